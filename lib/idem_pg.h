/*
 * idem_pg.h - talking to Postgres: connecting (with the password kept out of conninfo and logs),
 * turning a failed result into an idem_error, the one SQLSTATE policy, and the small exec helpers
 * every module uses. Knows nothing of batches (idem_flush.h) or of statements (idem_sql.h).
 */
#ifndef IDEM_PG_H
#define IDEM_PG_H

#include <libpq-fe.h>

#include "idem_cfg.h"
#include "idem_common.h"

/* How a failure is handled (ARCHITECTURE.md "Failures"), decided by SQLSTATE only. */
enum idem_pg_class {
	IDEM_PG_TRANSIENT = 0, /* roll back, back off, reconnect if needed, retry the same batch */
	IDEM_PG_MESSAGE,       /* this message's fault: isolate it, retry it, then quarantine it */
	IDEM_PG_BROKEN,        /* the handler or schema is broken: pause and retry with backoff */
};

/*
 * @brief Classify @sqlstate ("" or NULL: no server answer, i.e. the connection failed).
 *
 * lock_timeout (55P03) and statement_timeout (57014) are transient here, as for any statement
 * that is not one message's: the batch is retried. When one message's handler hits them, the
 * batch transaction treats them as that message's failure instead (idem_pg_timeout()), so a
 * handler that always times out ends in quarantine after retry.max_attempts, not in a loop.
 */
enum idem_pg_class idem_pg_classify(const char *sqlstate);
const char *idem_pg_class_str(enum idem_pg_class c);

/* @brief true for the SQLSTATEs of lock_timeout (55P03) and statement_timeout (57014). */
bool idem_pg_timeout(const char *sqlstate);

/*
 * @brief true when @err (from connecting or setting up) is one a retry cannot cure: a
 * configuration error, or Postgres refusing the schema, the handler SQL, the login or the
 * database (SQLSTATE classes 42, 28, 3D). idemd exits IDEM_EXIT_CONFIG on it.
 */
bool idem_pg_needs_operator(const idem_error *err);

/*
 * @brief What the operator should do about @err, for the errors of idem_pg_needs_operator()
 * that refuse a connection or a privilege (SQLSTATE 3D000, 28P01, other class 28, 42501);
 * NULL for any other.
 */
const char *idem_pg_operator_hint(const idem_error *err);

/*
 * @brief The SQLSTATE in a libpq error message written at PQERRORS_SQLSTATE verbosity
 * ("...failed: FATAL:  3D000"): the last line that ends in "SEVERITY:  CODE" (with several
 * hosts, the last server that answered). false if none does (no server answered).
 */
bool idem_pg_message_sqlstate(const char *msg, char ret_state[6]);

/*
 * Seconds a connection attempt waits for the server before it gives up (libpq's connect_timeout,
 * whose own default is to wait for ever), unless the conninfo sets connect_timeout: a server that
 * accepts and never answers (a hung host, a proxy in front of a dead one) then fails the attempt,
 * which is retried with backoff, instead of holding a worker and its batches.
 */
#define IDEM_PG_CONNECT_TIMEOUT_S 10

/*
 * @brief Open a connection using cfg->conninfo and the configured password source, giving up
 * after IDEM_PG_CONNECT_TIMEOUT_S. The password is passed to libpq as a separate parameter and
 * never logged. A server that refused the connection leaves its SQLSTATE in @err->sqlstate
 * (asked of it by a second attempt; "28P01" when a password was asked for and none given), so
 * that idem_pg_needs_operator() tells a login refused from a server not up yet; a connection
 * that no server answered leaves it empty.
 */
IDEM_NODISCARD idem_status idem_pg_conn_open(const struct idem_cfg *cfg, const char *app_name,
                                             PGconn **ret_conn, idem_error *err);

/*
 * @brief The same, giving up on connecting after @connect_timeout_s seconds (libpq's
 * connect_timeout; 0: libpq's default, none) unless cfg->conninfo sets connect_timeout itself.
 */
IDEM_NODISCARD idem_status idem_pg_conn_open_timeout(const struct idem_cfg *cfg,
                                                     const char *app_name, int connect_timeout_s,
                                                     PGconn **ret_conn, idem_error *err);

/* @brief Set @err from a failed result (or from the connection when @res is NULL). */
idem_status idem_pg_error(idem_error *err, PGconn *conn, const PGresult *res, const char *what);

/*
 * @brief Check that @res (from any exec call) succeeded, else set @err (naming @what). The result
 * then goes to *ret_res if not NULL (the caller clears it, on failure too), else it is cleared.
 */
IDEM_NODISCARD idem_status idem_pg_result(PGconn *conn, PGresult *res, const char *what,
                                          PGresult **ret_res, idem_error *err);

/* Where an unqualified name in a handler resolves on a connection. */
struct idem_pg_search_path {
	char setting[256]; /* search_path as set ('"$user", public'), cut short if longer */
	char schemas[256]; /* current_schemas(true), in order, ", "-separated: where an unqualified
	                      table is looked for ("pg_catalog, public") */
};

/*
 * @brief Read the effective search path of @conn into *@ret (written only on success), so that
 * idemd and idemctl try can say which schema a handler's unqualified table resolves to.
 */
IDEM_NODISCARD idem_status idem_pg_search_path(PGconn *conn, struct idem_pg_search_path *ret,
                                               idem_error *err);

/*
 * @brief End the transaction open on @conn, if any, undoing it: the one ROLLBACK of idemd's own
 * transactions (a failure is ignored: a connection that cannot roll back has nothing to keep).
 * Not for a connection in pipeline mode (leave it first).
 */
void idem_pg_rollback(PGconn *conn);

/*
 * @brief Run @sql (no parameters; several statements allowed) and check it succeeded.
 * @what names it in @err.
 */
IDEM_NODISCARD idem_status idem_pg_exec(PGconn *conn, const char *sql, const char *what,
                                        idem_error *err);

/*
 * @brief Run @sql with text parameters pv[0..n) and check it succeeded; the result, if wanted,
 * goes to *ret_res (the caller clears it, on failure too). @what names it in @err.
 */
IDEM_NODISCARD idem_status idem_pg_exec_params(PGconn *conn, const char *sql, int n,
                                               const char *const *pv, const char *what,
                                               PGresult **ret_res, idem_error *err);

/* @brief PREPARE @sql as @name with @n untyped parameters. @what names it in @err. */
IDEM_NODISCARD idem_status idem_pg_prepare(PGconn *conn, const char *name, const char *sql, int n,
                                           const char *what, idem_error *err);

#endif
