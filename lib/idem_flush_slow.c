/*
 * idem_flush_slow.c - the slow path, and applying one message for an operator.
 *
 * The slow path (ARCHITECTURE.md "The transaction", Slow path) redoes one batch after its
 * handler failed for a message's reason (SQLSTATE class 22, 23, P0, 54) or timed out in the fast
 * path, or after its claims kept running into lock_timeout: in a transaction of its own, with a
 * SAVEPOINT around each message's claim and handler, so that a failing message takes its claim
 * (and whatever its handler emitted) with it, is retried up to retry.max_attempts times and is
 * then quarantined, or halts the partition (on_poison: halt), while its neighbours commit. It
 * ends with round trip 3 of idem_flush.c.
 * idem_flush_apply_one() is the same per-message step for `idemctl quarantine retry`, inside the
 * operator's transaction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_bind.h"
#include "idem_flush.h"
#include "idem_flush_int.h"
#include "idem_pg.h"
#include "idem_sql.h"

/* Why a handler failed, for the quarantine: the limit it hit, or Postgres's message. */
static void handler_reason(const idem_flush *pg, const PGresult *res, char *buf, size_t len)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *prim = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *det = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	char head[128];

	if (state != NULL && strcmp(state, "57014") == 0)
		snprintf(head, sizeof(head),
		         "handler timed out (postgres.statement_timeout_ms is %d)",
		         pg->cfg->statement_timeout_ms);
	else if (state != NULL && strcmp(state, "55P03") == 0)
		snprintf(head, sizeof(head),
		         "handler waited for a lock longer than postgres.lock_timeout_ms (%d)",
		         pg->cfg->lock_timeout_ms);
	else
		snprintf(head, sizeof(head), "handler failed");
	snprintf(buf, len, "%s: %s%s%s", head, prim ? prim : "unknown error", det ? ": " : "",
	         det ? det : "");
}

/* Statement @id of idem_sql's table, run as idem_sql_send() sends it; the result goes to
 * *ret_res (the caller clears it, always), the error stays in it. */
static idem_status exec_stmt(idem_flush *pg, enum idem_sql_id id, const char *const *vals,
                             const int *lens, const int *fmts, PGresult **ret_res)
{
	return idem_sql_exec_prepared(pg->conn, id, vals, lens, fmts, idem_sql(id)->name, ret_res,
	                              NULL);
}

/*
 * Run message @i's handler on its own: in row mode its prepared statement with its fields, in
 * set mode the set statement with one-element arrays. *ret_res is the result, to be cleared by
 * the caller; IDEM_ERR_PG: the handler failed (see *ret_res), IDEM_ERR_INVALID: a parameter
 * cannot be bound (a NUL byte), IDEM_ERR_NOMEM.
 */
static idem_status run_handler(idem_flush *pg, struct idem_batch *b, size_t i, const char *hname,
                               PGresult **ret_res)
{
	const struct idem_route *rt = b->route;
	const char **cv = idem__flush_context_vals(pg, b, i);
	idem_status r;

	*ret_res = NULL;
	if (cv != NULL && exec_stmt(pg, IDEM_SQL_CONTEXT, cv, NULL, NULL, ret_res) != IDEM_OK)
		return IDEM_ERR_PG;
	PQclear(*ret_res);
	*ret_res = NULL;
	if (cv != NULL && !b->msgs[i].traceparent.null) {
		const char *tv[4];
		size_t n;

		if (idem_bind_traces_open(&pg->bind) != IDEM_OK ||
		    idem_bind_traces_add(&pg->bind, b, &i, 1) != IDEM_OK ||
		    idem_bind_traces_close(&pg->bind, tv, &n) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		if (exec_stmt(pg, IDEM_SQL_TRACES, tv, NULL, NULL, ret_res) != IDEM_OK)
			return IDEM_ERR_PG;
		PQclear(*ret_res);
		*ret_res = NULL;
	}
	if (!idem__flush_set_mode(b)) {
		if (idem_bind_row(&pg->bind, b, i) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		return idem_pg_result(pg->conn,
		                      PQexecPrepared(pg->conn, hname, (int)rt->n_params,
		                                     pg->bind.vals, NULL, NULL, 0),
		                      hname, ret_res, NULL);
	}
	if ((r = idem_bind_set_open(&pg->bind, rt->n_params)) != IDEM_OK ||
	    (r = idem_bind_set_add(&pg->bind, b, i)) != IDEM_OK ||
	    (r = idem_bind_set_close(&pg->bind, rt->n_params)) != IDEM_OK)
		return r;
	return idem_pg_result(pg->conn,
	                      PQexecParams(pg->conn, rt->handler_sql, (int)rt->n_params, NULL,
	                                   pg->bind.vals, NULL, NULL, 0),
	                      hname, ret_res, NULL);
}

/* Message @i's result from its handler's @res: row mode's first column, set mode's row. */
static idem_status store_one_result(struct idem_batch *b, size_t i, const PGresult *res)
{
	const struct idem_batch_msg *m = &b->msgs[i];

	if (!idem__flush_set_mode(b))
		return idem__flush_store_result(b, i, res);
	if (PQnfields(res) != 2)
		return IDEM_OK;
	for (int row = 0; row < PQntuples(res); row++) {
		if (PQgetisnull(res, row, 0) || (size_t)PQgetlength(res, row, 0) != m->bkey.len ||
		    memcmp(PQgetvalue(res, row, 0), idem_batch_ptr(b, m->bkey), m->bkey.len) != 0)
			continue;
		return idem_batch_set_result(b, i, PQgetvalue(res, row, 1),
		                             (size_t)PQgetlength(res, row, 1),
		                             PQgetisnull(res, row, 1));
	}
	return IDEM_OK;
}

/*
 * One message on the slow path, inside SAVEPOINT idem_msg: claim, then handler. A
 * message-specific failure or a handler timeout rolls back to the savepoint (taking the claim
 * with it) and is retried up to retry.max_attempts times, then the message becomes BAD. A claim
 * that times out makes the message BAD only once the batch has had its max_attempts of those;
 * before that it fails the batch, to be retried. Other failures end the batch.
 */
static idem_status slow_one(idem_flush *pg, struct idem_batch *b, size_t i, const char *hname,
                            idem_error *err)
{
	struct idem_batch_msg *m = &b->msgs[i];
	int max = pg->cfg->max_attempts;
	struct idem_bind_claim cv;
	const char *state;
	char why[768] = "";
	PGresult *res;
	idem_status r;

	for (int attempt = 1; attempt <= max; attempt++) {
		m->attempts = attempt;
		if ((r = idem_pg_exec(pg->conn, "SAVEPOINT idem_msg", "savepoint", err)) != IDEM_OK)
			return r;
		if (idem_bind_claim(&pg->bind, b, &i, 1, &cv) != IDEM_OK)
			return idem_error_nomem(err);
		if (exec_stmt(pg, IDEM_SQL_CLAIM, cv.vals, cv.lens, cv.fmts, &res) != IDEM_OK) {
			state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			if (!idem_pg_timeout(state) || b->claim_timeouts < max) {
				if (idem_pg_timeout(state))
					b->claim_timeouts++;
				r = idem_pg_error(err, pg->conn, res, "claim");
				PQclear(res);
				return r;
			}
			snprintf(
			        why, sizeof(why),
			        "claim: the business key stayed locked by another transaction longer than postgres.lock_timeout_ms (%d) in %d attempts: %s",
			        pg->cfg->lock_timeout_ms, b->claim_timeouts,
			        PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
			snprintf(m->sqlstate, sizeof(m->sqlstate), "%s", state);
			m->attempts = b->claim_timeouts;
			PQclear(res);
			if ((r = idem_pg_exec(pg->conn, "ROLLBACK TO SAVEPOINT idem_msg",
			                      "rollback to savepoint", err)) != IDEM_OK)
				return r;
			break;
		}
		if (PQntuples(res) == 0) {
			PQclear(res);
			m->state = IDEM_MSG_DUPLICATE;
			return idem_pg_exec(pg->conn, "RELEASE SAVEPOINT idem_msg", "release", err);
		}
		PQclear(res);
		if ((r = run_handler(pg, b, i, hname, &res)) == IDEM_ERR_NOMEM)
			return idem_error_nomem(err);
		if (r == IDEM_ERR_INVALID) {
			snprintf(why, sizeof(why), "a handler parameter contains a NUL byte");
			if ((r = idem_pg_exec(pg->conn, "ROLLBACK TO SAVEPOINT idem_msg",
			                      "rollback to savepoint", err)) != IDEM_OK)
				return r;
			break;
		}
		if (r == IDEM_OK) {
			if (store_one_result(b, i, res) != IDEM_OK) {
				PQclear(res);
				return idem_error_nomem(err);
			}
			PQclear(res);
			m->state = IDEM_MSG_APPLIED;
			return idem_pg_exec(pg->conn, "RELEASE SAVEPOINT idem_msg", "release", err);
		}
		state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		if (idem_pg_classify(state) != IDEM_PG_MESSAGE && !idem_pg_timeout(state)) {
			r = idem_pg_error(err, pg->conn, res, "handler");
			PQclear(res);
			return r;
		}
		handler_reason(pg, res, why, sizeof(why));
		snprintf(m->sqlstate, sizeof(m->sqlstate), "%s", state);
		PQclear(res);
		if ((r = idem_pg_exec(pg->conn, "ROLLBACK TO SAVEPOINT idem_msg",
		                      "rollback to savepoint", err)) != IDEM_OK)
			return r;
	}
	m->state = IDEM_MSG_BAD;
	return idem_batch_set_reason(b, i, why, m->sqlstate) == IDEM_OK ? IDEM_OK
	                                                                : idem_error_nomem(err);
}

/* Fetch the existing claims of the batch's duplicates (if any) into their messages. */
static idem_status fetch_claims(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	PGresult *res;
	idem_status r;

	if (idem__flush_need_idx(ctx, ctx->b->n_msgs) != IDEM_OK ||
	    idem_bind_dup_keys(&pg->bind, ctx->b, ctx->dups, &ctx->n_dups) != IDEM_OK)
		return idem_error_nomem(err);
	if (ctx->n_dups == 0)
		return IDEM_OK;
	if (exec_stmt(pg, IDEM_SQL_CLAIMS_GET,
	              (const char *[]){ ctx->b->route->consumer, pg->bind.dkeys.data }, NULL, NULL,
	              &res) != IDEM_OK) {
		r = idem_pg_error(err, pg->conn, res, "claims");
		PQclear(res);
		return r;
	}
	r = idem__flush_read_claims(ctx, res);
	PQclear(res);
	return r == IDEM_OK ? IDEM_OK : idem_error_nomem(err);
}

/* Look up the claims of the duplicates and classify them, inside the open transaction. */
static idem_status slow_classify(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	idem_status r;

	if ((r = fetch_claims(pg, ctx, err)) != IDEM_OK)
		return r;
	if (idem_batch_classify(ctx->b, ctx->progress_next, ctx->replay_to) != IDEM_OK)
		return idem_error_nomem(err);
	return IDEM_OK;
}

/*
 * Redo the batch of @ctx alone: every decodable message again, one at a time under savepoints,
 * in offset order, then round trip 3. The floor is checked as in round trip 1, before any
 * message.
 */
idem_status idem__flush_slow_path(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	struct idem_batch *b = ctx->b;
	char hname[32];
	const char *gv[3];
	PGresult *res;
	idem_status r;

	idem__flush_handler_name(pg, b, hname, sizeof(hname));
	/* Every decodable message gets its own attempt, in offset order: an in-batch duplicate
	 * whose first copy fails must still be able to claim the key. */
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (!b->msgs[i].undecodable)
			b->msgs[i].state = IDEM_MSG_PENDING;
	}
	b->n_order = 0;
	if ((r = idem_pg_exec(pg->conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	if (idem_bind_progress_get(&pg->bind, idem__flush_batch_list(pg, ctx, 1), 1, gv) !=
	    IDEM_OK) {
		r = idem_error_nomem(err);
		goto out_rollback;
	}
	if (exec_stmt(pg, IDEM_SQL_PROGRESS_GET, gv, NULL, NULL, &res) != IDEM_OK) {
		r = idem_pg_error(err, pg->conn, res, "progress");
		PQclear(res);
		goto out_rollback;
	}
	idem__flush_read_progress(ctx, 1, res);
	PQclear(res);
	if ((r = idem__flush_check_floor(ctx, 1, err)) != IDEM_OK)
		goto out_rollback;
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state != IDEM_MSG_PENDING)
			continue;
		if ((r = slow_one(pg, b, i, hname, err)) != IDEM_OK)
			goto out_rollback;
		if (b->msgs[i].state == IDEM_MSG_BAD &&
		    b->route->on_poison == IDEM_CFG_POISON_HALT) {
			idem__flush_halt_at(ctx, i);
			break;
		}
	}
	if ((r = slow_classify(pg, ctx, err)) != IDEM_OK)
		goto out_rollback;
	if (!PQenterPipelineMode(pg->conn)) {
		r = idem_pg_error(err, pg->conn, NULL, "enter pipeline mode");
		goto out_rollback;
	}
	if ((r = idem__flush_close_batch(pg, ctx, 1, err)) != IDEM_OK)
		return r;
	ctx->st.slow_path = true;
	return IDEM_OK;

out_rollback:
	if (PQstatus(pg->conn) == CONNECTION_OK)
		idem_pg_rollback(pg->conn);
	return r;
}

idem_status idem_flush_apply_one(idem_flush *pg, struct idem_batch *b, size_t i, idem_error *err)
{
	struct idem_batch_msg *m = &b->msgs[i];
	char hname[32];
	bool any;
	idem_status r;

	idem__flush_handler_name(pg, b, hname, sizeof(hname));
	m->state = IDEM_MSG_PENDING;
	m->sqlstate[0] = '\0';
	m->result.null = true;
	m->claim.found = false;
	/* An operator is waiting: a locked key is reported at once, not retried as a batch. */
	b->claim_timeouts = pg->cfg->max_attempts;
	if ((r = slow_one(pg, b, i, hname, err)) != IDEM_OK)
		return r;
	if (m->state == IDEM_MSG_APPLIED) {
		const char *rv[3];

		if (idem_bind_results(&pg->bind, b, &any, rv) != IDEM_OK)
			return idem_error_nomem(err);
		if (any) {
			PGresult *res;

			if (exec_stmt(pg, IDEM_SQL_RESULTS, rv, NULL, NULL, &res) != IDEM_OK) {
				r = idem_pg_error(err, pg->conn, res, "store result");
				PQclear(res);
				return r;
			}
			PQclear(res);
		}
		if (b->route->reply_topic != NULL) {
			const char *yv[10];
			size_t n;
			PGresult *res;

			if (idem_bind_replies(&pg->bind, b, &n, yv) != IDEM_OK)
				return idem_error_nomem(err);
			if (n > 0 &&
			    exec_stmt(pg, IDEM_SQL_REPLIES, yv, NULL, NULL, &res) != IDEM_OK) {
				r = idem_pg_error(err, pg->conn, res, "reply");
				PQclear(res);
				return r;
			}
			if (n > 0)
				PQclear(res);
		}
	} else if (m->state == IDEM_MSG_DUPLICATE) {
		pg->one.b = b;
		if ((r = fetch_claims(pg, &pg->one, err)) != IDEM_OK)
			return r;
	}
	return IDEM_OK;
}
