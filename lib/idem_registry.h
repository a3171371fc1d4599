/*
 * idem_registry.h - a Confluent Schema Registry client: schemas by id, fetched once, cached.
 *
 * GET {url}/schemas/ids/{id} on the first sight of an id (libcurl; TLS through an https URL;
 * HTTP basic authentication with username and password). Schema ids are immutable, so an
 * answer is kept for the life of the process, at most IDEM_REGISTRY_MAX_SCHEMAS of them (the
 * least recently used goes first). The schema text is turned into an object by the caller's
 * parse function (idem_avro_schema_new() in idemd), so the cache holds ready schemas.
 *
 * Concurrency: any number of threads may look up at once. One id is fetched by one thread at a
 * time; the others asking for it wait for that fetch and share its answer (single flight).
 *
 * Answers:
 *   IDEM_REGISTRY_OK           the schema (a reference the caller releases with unref_fn)
 *   IDEM_REGISTRY_UNKNOWN      the registry does not know the id (404), or its schema is not an
 *                              Avro schema that parses: permanent for this message (quarantine).
 *                              Kept IDEM_REGISTRY_UNKNOWN_KEEP_MS, then asked again.
 *   IDEM_REGISTRY_UNAVAILABLE  cannot tell now: connection refused or reset, timeout, 5xx, 429,
 *                              401/403, a body that is not the registry's JSON. Transient: the
 *                              caller waits and asks again after *ret_retry_ms. Until then, asking
 *                              again answers the same at once, without a request (the backoff
 *                              doubles per failed fetch of that id, from retry_initial_ms to
 *                              retry_max_ms, with jitter).
 * The password never appears in a message: URLs in messages have their user information removed.
 */
#ifndef IDEM_REGISTRY_H
#define IDEM_REGISTRY_H

#include "idem_common.h"

#define IDEM_REGISTRY_MAX_SCHEMAS     1000
#define IDEM_REGISTRY_UNKNOWN_KEEP_MS 10000
/*
 * A 200 answer larger than this is UNKNOWN ("schema id 7: answer of http://registry:8081 is
 * larger than 8388608 bytes"): the answer for an id never changes, so asking again cannot help.
 */
#define IDEM_REGISTRY_MAX_ANSWER_BYTES (8u * 1024 * 1024)

typedef struct idem_registry idem_registry;

/*
 * Turns the schema text (the "schema" member of the answer, NUL-terminated at @len) into an
 * object with one reference, the caller's; @why on failure. A failure makes the id UNKNOWN,
 * except IDEM_ERR_NOMEM, which makes it UNAVAILABLE (asked again after the backoff).
 * parse_fn and unref_fn run on the threads calling idem_registry_get() (unref_fn also in
 * idem_registry_free()) without the registry's lock; ref_fn runs under it and must only take a
 * reference. None may call back into the registry.
 */
typedef idem_status (*idem_registry_parse_fn)(const char *text, size_t len, void **ret_obj,
                                              char *why, size_t whylen);
typedef void *(*idem_registry_ref_fn)(void *obj);
typedef void (*idem_registry_unref_fn)(void *obj);

struct idem_registry_opts {
	const char *url;      /* base URL, e.g. "http://registry:8081"; a trailing '/' is fine */
	const char *username; /* NULL: no authentication */
	const char *password; /* with username; never logged */
	int timeout_ms;       /* a whole request, connecting included */
	int retry_initial_ms; /* backoff after the first failed fetch of an id */
	int retry_max_ms;     /* at most this */
	idem_registry_parse_fn parse;
	idem_registry_ref_fn ref;
	idem_registry_unref_fn unref;
};

enum idem_registry_answer {
	IDEM_REGISTRY_OK = 0,
	IDEM_REGISTRY_UNKNOWN,
	IDEM_REGISTRY_UNAVAILABLE,
};

/* Counters since start, for metrics and tests. */
struct idem_registry_stats {
	uint64_t fetches;  /* HTTP requests made */
	uint64_t failures; /* of which UNAVAILABLE */
	uint64_t unknown;  /* of which UNKNOWN */
	size_t cached;     /* schemas held now */
};

/*
 * @brief A client for @opts (strings are copied). Checks the URL's form (http or https) but
 * makes no request. Errors: IDEM_ERR_CONFIG with the reason in @err ("schema_registry.url
 * 'ftp://x' must start with http:// or https://"; also no host, a bad port, a query or fragment,
 * spaces), IDEM_ERR_INVALID for a timeout or retry delay that is not positive, IDEM_ERR_NOMEM.
 * parse, ref and unref must be set. A retry_max_ms below retry_initial_ms counts as the latter.
 * Call curl_global_init() once per process before the first client (idem_registry_global_init).
 */
IDEM_NODISCARD idem_status idem_registry_new(const struct idem_registry_opts *opts,
                                             idem_registry **ret_reg, idem_error *err);
void idem_registry_free(idem_registry *reg); /* accepts NULL; releases every cached schema */

/* @brief curl_global_init(), once per process, before threads (idempotent). */
IDEM_NODISCARD idem_status idem_registry_global_init(idem_error *err);

/*
 * @brief The schema of @id. On IDEM_REGISTRY_OK *ret_obj is a new reference. Otherwise @why
 * says what happened, naming the id and the URL (without credentials) — "schema id 7: registry
 * answered 404 Not Found (error_code 40403: Schema not found)", "schema id 7: cannot reach
 * http://registry:8081: Connection refused" — and for UNAVAILABLE *ret_retry_ms is how long to
 * wait before asking again (> 0). On IDEM_REGISTRY_OK @why and *ret_retry_ms are untouched;
 * @why may be NULL when @whylen is 0, @ret_retry_ms may be NULL. The backoff after the k-th
 * consecutive failed fetch of an id is idem_backoff_ms() (the one retry policy) of attempt k.
 * Not to be called concurrently with idem_registry_free().
 */
enum idem_registry_answer idem_registry_get(idem_registry *reg, int32_t id, void **ret_obj,
                                            char *why, size_t whylen, int *ret_retry_ms);

/*
 * @brief Forget the backoff of every id the registry did not answer for: the next get() of each
 * asks again at once (SIGHUP, with the partitions' own retries).
 * @returns how many ids were waiting.
 */
size_t idem_registry_retry_now(idem_registry *reg);

void idem_registry_stats(idem_registry *reg, struct idem_registry_stats *ret_stats);

#endif
