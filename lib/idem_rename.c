/*
 * idem_rename.c - idemctl rename: a consumer's claims, positions, quarantine and horizon moved to
 * another name in one transaction.
 */
#include "idem_rename.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_cfg.h"
#include "idem_esc.h"
#include "idem_pg.h"
#include "idem_sql.h"

idem_status idem_rename_check(const char *old_name, const char *new_name, idem_error *err)
{
	const char *names[2] = { old_name, new_name };
	char q[4 * IDEM_CONSUMER_NAME_MAX + 16];

	for (size_t i = 0; i < 2; i++) {
		if (!idem_cfg_consumer_valid(names[i]))
			return idem_error_set(
			        err, IDEM_ERR_INVALID,
			        "invalid consumer name '%s' (use letters, digits, '.', '_' and '-', at most %d characters)",
			        idem_esc_str(q, sizeof(q), names[i], IDEM_ESC_QUOTE),
			        IDEM_CONSUMER_NAME_MAX);
	}
	if (strcmp(old_name, new_name) == 0)
		return idem_error_set(err, IDEM_ERR_INVALID,
		                      "the old and the new name are both '%s': nothing to rename",
		                      old_name);
	return IDEM_OK;
}

/* Run statement @id with @vals and add the rows it changed to *@count (may be NULL). */
static idem_status rename_step(PGconn *conn, enum idem_sql_id id, const char *const *vals,
                               const char *what, int64_t *count, idem_error *err)
{
	PGresult *res = NULL;
	idem_status r = idem_sql_exec(conn, id, vals, what, &res, err);

	if (r == IDEM_OK && count != NULL)
		*count += strtoll(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return r;
}

/*
 * Under the lock: refuse an old name with nothing to move, or one that advanced so recently that
 * an instance may still run under it (unless @force).
 */
static idem_status rename_check_old(PGconn *conn, const char *old_name, bool force,
                                    int64_t *ret_last_s, idem_error *err)
{
	const char *vals[1] = { old_name };
	PGresult *res = NULL;
	int64_t last = -1;
	idem_status r;

	if ((r = idem_sql_exec(conn, IDEM_SQL_RENAME_OLD, vals, "read what the old name holds",
	                       &res, err)) != IDEM_OK)
		goto out_clear_res;
	if (!PQgetisnull(res, 0, 3))
		last = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0 && strcmp(PQgetvalue(res, 0, 1), "t") != 0 &&
	    strcmp(PQgetvalue(res, 0, 2), "t") != 0) {
		r = idem_error_set(
		        err, IDEM_ERR_NOT_FOUND,
		        "nothing to rename: consumer '%s' has no claims, no progress rows and no quarantine rows",
		        old_name);
		goto out_clear_res;
	}
	if (!force && last >= 0 && last < IDEM_RENAME_QUIET_S) {
		r = idem_error_set(
		        err, IDEM_ERR_INVALID,
		        "an idemd instance may still be running under '%s': last progress %" PRId64
		        " s ago; stop every instance that runs the old name, then run this again, or --force",
		        old_name, last);
		goto out_clear_res;
	}
	*ret_last_s = last;
	r = IDEM_OK;
out_clear_res:
	PQclear(res);
	return r;
}

idem_status idem_rename_consumer(PGconn *conn, const char *old_name, const char *new_name,
                                 bool force, struct idem_rename_result *ret, idem_error *err)
{
	const char *vals[2] = { old_name, new_name };
	struct idem_rename_result rr = { 0 };
	int64_t horizon = 0;
	char set[64];
	PGresult *res = NULL;
	idem_status r;

	if ((r = idem_rename_check(old_name, new_name, err)) != IDEM_OK)
		return r;
	snprintf(set, sizeof(set), "SET LOCAL lock_timeout = %d", IDEM_RENAME_LOCK_TIMEOUT_MS);
	if ((r = idem_pg_exec(conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	if ((r = idem_pg_exec(conn, set, "set lock_timeout", err)) != IDEM_OK ||
	    (r = rename_step(conn, IDEM_SQL_RENAME_LOCK, NULL, "lock the consumers' tables", NULL,
	                     err)) != IDEM_OK ||
	    (r = rename_check_old(conn, old_name, force, &rr.last_progress_s, err)) != IDEM_OK)
		goto out_rollback;
	/* Claims first: what decides that a message applies. */
	if ((r = rename_step(conn, IDEM_SQL_RENAME_CLAIMS, vals, "move claims", &rr.claims_moved,
	                     err)) != IDEM_OK ||
	    (r = rename_step(conn, IDEM_SQL_RENAME_CLAIMS_DROP, vals,
	                     "delete claims the new name holds", &rr.claims_held, err)) != IDEM_OK)
		goto out_rollback;
	/* Positions before the quarantine, whose deleted rows are uncounted from the merged. */
	if ((r = rename_step(conn, IDEM_SQL_RENAME_PROGRESS_MERGE, vals, "merge progress rows",
	                     &rr.positions_merged, err)) != IDEM_OK ||
	    (r = rename_step(conn, IDEM_SQL_RENAME_PROGRESS, vals, "move progress rows",
	                     &rr.positions_moved, err)) != IDEM_OK ||
	    (r = rename_step(conn, IDEM_SQL_RENAME_PROGRESS_DROP, vals,
	                     "delete merged progress rows", NULL, err)) != IDEM_OK ||
	    (r = rename_step(conn, IDEM_SQL_RENAME_QUARANTINE, vals, "move quarantine rows",
	                     &rr.quarantine_moved, err)) != IDEM_OK)
		goto out_rollback;
	if ((r = idem_sql_exec(conn, IDEM_SQL_RENAME_QUARANTINE_DROP, vals,
	                       "delete quarantine rows the new name holds", &res, err)) != IDEM_OK)
		goto out_clear_res;
	rr.quarantine_held = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	res = NULL;
	if ((r = rename_step(conn, IDEM_SQL_RENAME_HORIZON, vals, "move the retention horizon",
	                     &horizon, err)) != IDEM_OK ||
	    (r = idem_pg_exec(conn, "COMMIT", "commit", err)) != IDEM_OK)
		goto out_rollback;
	rr.horizon_moved = horizon > 0;
	*ret = rr;
	return IDEM_OK;

out_clear_res:
	PQclear(res);
out_rollback:
	idem_pg_rollback(conn);
	return r;
}
