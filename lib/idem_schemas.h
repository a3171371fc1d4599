/*
 * idem_schemas.h - the schemas avro: fields are read with, for one configuration: its
 * schema_registry, behind the idem_schema_fn that struct idem_jsondoc calls (ARCHITECTURE.md,
 * "Avro"). One per process is enough: the cache and the single flight are the registry's.
 */
#ifndef IDEM_SCHEMAS_H
#define IDEM_SCHEMAS_H

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_field.h"
#include "idem_registry.h"

typedef struct idem_schemas idem_schemas;

/*
 * @brief The schemas of @cfg: *ret_schemas is NULL when it has no schema_registry section.
 * Reads the registry password (schema_registry.password_env / password_file) and wipes it once
 * handed to the client. No request is made. @wake (may be NULL) is called with @wake_ctx on a
 * fetcher thread each time a background fetch ends (idem_schemas_attach_async()): it must be
 * quick and must not call into @s. Errors: IDEM_ERR_CONFIG (the password cannot be read, the
 * URL), IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_schemas_open(const struct idem_cfg *cfg, void (*wake)(void *ctx),
                                             void *wake_ctx, idem_schemas **ret_schemas,
                                             idem_error *err);
/*
 * @brief idem_registry_ping() of @s's registry (opened with a schema_registry.url), with the
 * configured credentials.
 */
IDEM_NODISCARD idem_status idem_schemas_ping(idem_schemas *s, long *ret_http, idem_error *err);
/* Accepts NULL. Stops the fetchers (a request under way is aborted): no @wake after it. */
void idem_schemas_close(idem_schemas *s);

/*
 * @brief Let @doc read avro: fields with @s (NULL: it cannot; such fields are an error),
 * waiting for the registry when a schema is not cached (tools).
 */
void idem_schemas_attach(idem_schemas *s, struct idem_jsondoc *doc);

/*
 * @brief As idem_schemas_attach(), never waiting on the network: a schema not cached is fetched
 * in the background, the message is IDEM_ERR_UNAVAILABLE with doc->pending, and
 * idem_schemas_answers() grows (and @wake is called) when the fetch ends (the daemon).
 */
void idem_schemas_attach_async(idem_schemas *s, struct idem_jsondoc *doc);

/* @brief Background fetches ended so far (0 when @s is NULL): a change means ask again. */
uint64_t idem_schemas_answers(idem_schemas *s);

/* @brief idem_registry_retry_now() (nothing when @s is NULL). */
void idem_schemas_retry_now(idem_schemas *s);

/* @brief The registry's counters (zeros when @s is NULL). */
void idem_schemas_stats(idem_schemas *s, struct idem_registry_stats *ret_stats);

#endif
