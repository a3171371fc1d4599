/*
 * idem_try.h - `idemctl try`: run one message, or a few, through their route exactly as idemd
 * would, inside a transaction that is always rolled back, and report what would happen (idemctl(8)
 * TRYING A ROUTE).
 *
 * In two files: idem_try_file.c reads the message file format (below) and Kafka messages into
 * struct idem_try_msgs; idem_try.c runs them. The messages are decoded by idem_batch_add() (the
 * business key, the handler parameters and the payload hash, as the daemon decodes them), the
 * statements and their parameters are idem_sql's and idem_bind's, and the transaction follows
 * the batch transaction's order (ARCHITECTURE.md "The transaction"): the partition's progress,
 * the claim of every key, the claims the duplicates ran into, then the handler (row mode: once
 * per newly claimed message; set mode: once, with text[] arrays), each after IDEM_SQL_CONTEXT when
 * the outbox is enabled. Then ROLLBACK, whatever happened: nothing is committed, no progress or
 * quarantine row is written, and every lock is released.
 *
 * The message file format: UTF-8 text, lines ending in LF or CRLF; blank lines and lines whose
 * first non-blank character is '#' are ignored; a line "---" separates messages; every other
 * line is "FIELD: VALUE", the value being the rest of the line after the blanks behind the colon
 * (so nothing after it is a comment). Fields, each at most once per message but header:
 *
 *   topic: T          the route is chosen by it (default: --topic)
 *   partition: P      default --partition, else 0
 *   offset: O         default the partition's next_offset in the database (+1 for each message
 *                     before it in the try), as if it were the next message to arrive
 *   timestamp: MS     milliseconds since the epoch (default: now)
 *   key: TEXT         the Kafka key; key-hex: HEX, key-base64: BASE64 for bytes
 *   value: TEXT       the value; value-hex: HEX, value-base64: BASE64 (Avro, framed values)
 *   header: NAME=TEXT a header (the name ends at the first '='); "header: NAME" alone is a header
 *                     with a null value; header-hex: NAME=HEX, header-base64: NAME=BASE64
 *
 * A key or value written "<<END" is made of the lines that follow, up to the line "END", joined
 * by LF (without the last line end); hex and base64 ignore white space. No key field: a message
 * without a key; no value field: one without a value (a tombstone).
 */
#ifndef IDEM_TRY_H
#define IDEM_TRY_H

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "idem_batch.h"
#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_pg.h"

struct idem_try_hdr {
	char *name;           /* owned */
	unsigned char *value; /* owned; NULL: a header with a null value */
	size_t len;
};

/* One message as given: from a file, or read from Kafka. */
struct idem_try_msg {
	char *topic;          /* owned; NULL: not given (the command line's --topic) */
	int32_t partition;    /* -1: not given */
	int64_t offset;       /* -1: not given */
	int64_t timestamp_ms; /* -1: not given */
	unsigned char *key;   /* owned; NULL: no key */
	size_t key_len;
	unsigned char *value; /* owned; NULL: no value */
	size_t value_len;
	struct idem_try_hdr *hdrs; /* owned, n_hdrs of them */
	size_t n_hdrs;
	size_t cap_hdrs;
	unsigned line; /* the line of its file it starts at (1-based); 0: from Kafka */
};

struct idem_try_msgs {
	struct idem_try_msg *v;
	size_t n, cap;
};

/*
 * @brief Parse @text[0..@len) in the message file format (above), appending its messages to
 * @msgs. @name names the file in errors, which are "NAME:LINE: error: 'FIELD': what is wrong"
 * (IDEM_ERR_INVALID): an unknown field, a line that is not "FIELD: VALUE", a field given twice in
 * one message, a number out of range, bad hex or base64, a "<<END" not closed, a message with no
 * field, a file with no message. On failure @msgs keeps the messages of earlier calls only.
 */
IDEM_NODISCARD idem_status idem_try_parse(const char *name, const char *text, size_t len,
                                          struct idem_try_msgs *msgs, idem_error *err);

/*
 * @brief Read @count messages of @topic/@partition from @offset on with @rk (a consumer of
 * idem_consumer_new(): the partition is assigned, never subscribed, and nothing is committed),
 * waiting at most @timeout_ms, and append them to @msgs as idem_consumer_view() sees them.
 * Fewer than @count before the end of the partition: IDEM_ERR_NOT_FOUND, naming the offsets.
 */
IDEM_NODISCARD idem_status idem_try_read_kafka(rd_kafka_t *rk, const char *topic, int32_t partition,
                                               int64_t offset, int count, int timeout_ms,
                                               struct idem_try_msgs *msgs, idem_error *err);

void idem_try_msgs_done(struct idem_try_msgs *msgs);

/* What would happen to one message. */
enum idem_try_outcome {
	IDEM_TRY_APPLY = 0,      /* its key is new: the handler ran */
	IDEM_TRY_DUPLICATE,      /* its key is claimed already (or by a message before it) */
	IDEM_TRY_QUARANTINE,     /* would be quarantined: reason */
	IDEM_TRY_HANDLER_FAILED, /* the handler failed for it: reason, sqlstate */
};

/* @brief "apply", "duplicate", "quarantine", "handler_failed". */
const char *idem_try_outcome_str(enum idem_try_outcome o);

/* One table the handler changed (pg_stat_xact_user_tables, before and after it). */
struct idem_try_table {
	char *name; /* owned: "schema.table" */
	int64_t inserted, updated, deleted;
};

/* What one handler statement did. */
struct idem_try_effects {
	bool ran;
	PGresult *rows;   /* the rows it returned (owned), NULL if it did not run or failed */
	PGresult *events; /* the rows it added to idem.outbox (owned; IDEM_SQL_TRY_EVENTS: id,
	                     event_id, topic, key hex, value hex, header name, header value hex;
	                     one row per header) */
	struct idem_try_table *tables; /* owned, n_tables of them, by name */
	size_t n_tables;
};

struct idem_try_msg_report {
	enum idem_try_outcome outcome;
	char reason[1024];          /* QUARANTINE, HANDLER_FAILED: why */
	char sqlstate[6];           /* HANDLER_FAILED: the handler's SQLSTATE */
	PGresult *claim;            /* DUPLICATE: IDEM_SQL_LOOKUP's row of the claim in the route's
	                               consumer (owned), NULL if none (the winner is in this set) */
	struct idem_try_effects fx; /* row mode, and set mode's one-message runs after a failure */
};

struct idem_try_report {
	const struct idem_route *route;
	struct idem_batch b;              /* the messages as idemd decodes them, in the given order:
	                                     business keys, parameters, states, duplicate kinds,
	                                     claims, results */
	struct idem_try_msg_report *msgs; /* b.n_msgs of them */
	int64_t progress_next;            /* the partition's next_offset, -1 if it has none */
	struct idem_pg_search_path search_path; /* where the handler's unqualified names resolve */
	bool context;                           /* IDEM_SQL_CONTEXT was sent before the handler */
	char **set_params;              /* set mode: the text[] parameters as sent (owned) */
	struct idem_try_effects set_fx; /* set mode: what the statement did */
	char set_reason[1024];          /* set mode: why the statement failed, "" if it did not */
	char set_sqlstate[6];
};

/* Options of a try. */
struct idem_try_opts {
	const char *topic;        /* for messages that name none (NULL: they must) */
	int32_t partition;        /* for messages that name none (-1: 0) */
	int statement_timeout_ms; /* SET LOCAL statement_timeout */
	int lock_timeout_ms;      /* SET LOCAL lock_timeout */
};

/*
 * @brief Run @msgs (one topic and partition: one batch) through their route on @conn, in a
 * transaction that is rolled back whatever happens, and fill @ret (release it with
 * idem_try_report_done(), on failure too).
 * @returns IDEM_OK (the report says what would happen to each message), IDEM_ERR_INVALID (no
 * route for the topic, messages of several partitions), IDEM_ERR_UNAVAILABLE (a schema cannot be
 * had), IDEM_ERR_PG (a statement of idemd's failed: a claimed key locked by another transaction
 * longer than the lock timeout, the schema not migrated...), IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_try_run(const struct idem_cfg *cfg, PGconn *conn,
                                        const struct idem_try_msgs *msgs,
                                        const struct idem_try_opts *o, struct idem_try_report *ret,
                                        idem_error *err);
void idem_try_report_done(struct idem_try_report *r);

/* @brief The outcome that decides the exit status: the worst of the messages' (handler failed,
 * then quarantine, then duplicate, then apply). */
enum idem_try_outcome idem_try_worst(const struct idem_try_report *r);

#endif
