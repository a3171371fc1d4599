/*
 * idem_pg.h - the Postgres side: connection, prepared statements, and the batch transaction.
 */
#ifndef IDEM_PG_H
#define IDEM_PG_H

#include <libpq-fe.h>

#include "idem_batch.h"
#include "idem_cfg.h"
#include "idem_common.h"

typedef struct idem_pg idem_pg;

/* How a failure is handled (DESIGN §3), decided by SQLSTATE only. */
enum idem_pg_class {
	IDEM_PG_TRANSIENT = 0, /* roll back, back off, reconnect if needed, retry the same batch */
	IDEM_PG_MESSAGE,       /* this message's fault: isolate it, retry it, then quarantine it */
	IDEM_PG_BROKEN,        /* the handler or schema is broken: pause and retry with backoff */
};

/* @brief Classify @sqlstate ("" or NULL: no server answer, i.e. the connection failed). */
enum idem_pg_class idem_pg_classify(const char *sqlstate);
const char *idem_pg_class_str(enum idem_pg_class c);

/* Attempts a message gets on the slow path before it is quarantined. */
#define IDEM_PG_MAX_ATTEMPTS 3

/* What one committed batch did, for logs and counters. */
struct idem_flush_stats {
	uint64_t consumed;
	uint64_t applied;
	uint64_t duplicates;
	uint64_t quarantined;
	bool slow_path;
};

/*
 * @brief Open a connection using cfg->conninfo and the configured password source.
 * The password is passed to libpq as a separate parameter and never logged.
 */
IDEM_NODISCARD idem_status idem_pg_conn_open(const struct idem_cfg *cfg, const char *app_name,
                                             PGconn **ret_conn, idem_error *err);

/* @brief Set @err from a failed result (or from the connection when @res is NULL). */
idem_status idem_pg_error(idem_error *err, PGconn *conn, const PGresult *res, const char *what);

/*
 * @brief Connect, check that the schema is migrated, and prepare every statement, the handlers
 * included, so that a broken handler fails here (IDEM_ERR_PG, class IDEM_PG_BROKEN, the route
 * named in @err) rather than on the first message. @cfg must outlive the handle.
 */
IDEM_NODISCARD idem_status idem_pg_new(const struct idem_cfg *cfg, idem_pg **ret_pg,
                                       idem_error *err);
void idem_pg_free(idem_pg *pg);

/* @brief Drop the connection and open a new one (re-preparing everything). */
IDEM_NODISCARD idem_status idem_pg_reconnect(idem_pg *pg, idem_error *err);
bool idem_pg_connected(const idem_pg *pg);

/*
 * @brief Process batch @b in one transaction: claim, run handlers, store results, quarantine
 * what cannot be processed, advance idem.partition_progress, commit.
 *
 * Fast path: a few pipelined round trips for the whole batch. If a handler fails for a
 * message-specific reason, the transaction is rolled back and redone on the slow path with a
 * SAVEPOINT per message, so only the failing message is retried and then quarantined.
 * On IDEM_OK the transaction committed and every message in @b has its final state.
 * On IDEM_ERR_PG nothing was committed (err->sqlstate and idem_pg_classify() tell what to do);
 * if the connection broke, the outcome of a COMMIT in flight is unknown, which is safe: the retry
 * finds the keys claimed.
 */
IDEM_NODISCARD idem_status idem_pg_flush(idem_pg *pg, struct idem_batch *b,
                                         struct idem_flush_stats *ret_stats, idem_error *err);

#endif
