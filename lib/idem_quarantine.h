/*
 * idem_quarantine.h - reading and resolving idem.quarantine (idemctl quarantine ...).
 *
 * A quarantined message keeps its bytes, headers and position. It is resolved by an operator:
 * retried (claimed and applied exactly as idemd would, in one transaction that also resolves the
 * row and moves the partition's counters from quarantined to applied or duplicates), or
 * discarded (never applied; still counted as quarantined). Resolved rows stay, with what became
 * of them; a message that fails again is reopened.
 */
#ifndef IDEM_QUARANTINE_H
#define IDEM_QUARANTINE_H

#include <libpq-fe.h>

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_flush.h"

/* One header of a quarantined message. */
struct idem_quarantine_header {
	char *name;  /* owned; as stored (a name that was not UTF-8 is stored as \x hex) */
	char *value; /* owned, value_len bytes (+ a NUL); NULL for a null header */
	size_t value_len;
};

/* One row of idem.quarantine. Strings are owned; free with idem_quarantine_entry_done(). */
struct idem_quarantine_entry {
	int64_t id;
	char *consumer;
	char *topic;
	int32_t partition;
	int64_t offset;
	char *business_key; /* NULL if it could not be built */
	char *key;          /* the Kafka key, key_len bytes (+ a NUL); NULL if none */
	size_t key_len;
	char *value; /* the Kafka value, value_len bytes (+ a NUL); NULL if none */
	size_t value_len;
	struct idem_quarantine_header *headers;
	size_t n_headers;
	int64_t timestamp_ms; /* -1 if none */
	char *reason;
	char sqlstate[6]; /* "" if none */
	int attempts;
	char *first_failed_at; /* timestamps as ISO 8601 text, UTC */
	char *last_failed_at;
	char *resolved_at; /* NULL while unresolved */
	char *resolution;  /* "applied", "duplicate", "discarded" or NULL */
};

/* What to list. */
struct idem_quarantine_filter {
	const char *consumer; /* NULL: every consumer */
	const char *topic;    /* NULL: every topic */
	bool all;             /* resolved rows too */
	size_t limit;         /* 0: no limit */
	/* NULL: every row; else only the rows a route of this configuration serves
	 * (idem_quarantine_in_scope()) */
	const struct idem_cfg *scope;
};

/*
 * @brief Whether a route of @cfg serves @e: one of its routes takes @e's topic, under @e's
 * consumer. Retry and discard act only on such entries.
 */
bool idem_quarantine_in_scope(const struct idem_cfg *cfg, const struct idem_quarantine_entry *e);

/*
 * @brief The rows matching @f, oldest first, without key, value and headers (use
 * idem_quarantine_get() for those).
 * @param ret_entries on success, a malloc'ed array (free with idem_quarantine_entries_free()).
 */
IDEM_NODISCARD idem_status idem_quarantine_list(PGconn *conn,
                                                const struct idem_quarantine_filter *f,
                                                struct idem_quarantine_entry **ret_entries,
                                                size_t *ret_n, idem_error *err);

/* @brief Row @id with everything in it. IDEM_ERR_NOT_FOUND if there is none. */
IDEM_NODISCARD idem_status idem_quarantine_get(PGconn *conn, int64_t id,
                                               struct idem_quarantine_entry *ret_entry,
                                               idem_error *err);

void idem_quarantine_entry_done(struct idem_quarantine_entry *e);
void idem_quarantine_entries_free(struct idem_quarantine_entry *v, size_t n);

/*
 * @brief Mark row @id discarded: its message will never be applied by idemd (a retry of the row
 * is refused afterwards). IDEM_ERR_NOT_FOUND if there is no such row, IDEM_ERR_INVALID if it is
 * resolved already or no route of @cfg serves it (another configuration's entry: unchanged).
 */
IDEM_NODISCARD idem_status idem_quarantine_discard(PGconn *conn, const struct idem_cfg *cfg,
                                                   int64_t id, idem_error *err);

enum idem_quarantine_outcome {
	IDEM_QUARANTINE_APPLIED = 0, /* claimed and applied now */
	IDEM_QUARANTINE_DUPLICATE,   /* its business key had been applied meanwhile */
	IDEM_QUARANTINE_FAILED,      /* failed again; the row stays open, its attempts counted */
};

const char *idem_quarantine_outcome_str(enum idem_quarantine_outcome o);

/*
 * @brief Retry row @id: decode the stored message with the route of @cfg that serves its topic
 * (and consumer), claim its business key and run the handler, all in one transaction that also
 * resolves the row and moves the partition's counters, so a retried message is applied at most
 * once, whatever idemd is doing meanwhile.
 * @param pg a connection prepared for @cfg (idem_flush_new()).
 * @param detail receives one line for the operator: where the key was applied, or why it failed.
 * @returns IDEM_OK with *ret_outcome; IDEM_ERR_NOT_FOUND (no such row), IDEM_ERR_INVALID (row
 * resolved already, or no route of @cfg serves it), IDEM_ERR_PG (nothing changed).
 */
IDEM_NODISCARD idem_status idem_quarantine_retry(idem_flush *pg, const struct idem_cfg *cfg,
                                                 int64_t id,
                                                 enum idem_quarantine_outcome *ret_outcome,
                                                 char *detail, size_t detail_len, idem_error *err);

#endif
