/*
 * idem_try.c - `idemctl try`: the messages of idem_try_file.c through their route, in one
 * transaction that is always rolled back (idem_try.h).
 *
 * The transaction takes the batch transaction's steps in its order (ARCHITECTURE.md "The
 * transaction"), with blocking calls instead of a pipeline, since one operator waits for a few
 * messages: the partition's progress, the claim of the keys (IDEM_SQL_CLAIM), where the
 * duplicates' keys were claimed (IDEM_SQL_LOOKUP, which also says when and with which result),
 * their classification (idem_batch_classify(), which quarantines a mismatching payload where the
 * route says so), then the handler. Each handler statement runs under a savepoint, as on the slow
 * path (ARCHITECTURE.md "Slow path"), so that one message's failure is reported as that message's
 * and the others still run; what it did is read inside the transaction: the rows it returned,
 * pg_stat_xact_user_tables before and after it, and the rows it added to idem.outbox. A set
 * statement that fails for a message's reason is run again one message at a time, as idemd's
 * slow path does, to name the message. Then ROLLBACK, on every path.
 */
#include "idem_try.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_bind.h"
#include "idem_schemas.h"
#include "idem_sql.h"

/* The name the row-mode handler is prepared under on try's connection. */
#define HANDLER_NAME "idem_try_handler"

/* What every table's counters are in this transaction so far. */
static const char sql_stats[] = "SELECT relid::bigint, schemaname || '.' || relname, n_tup_ins,"
                                " n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables"
                                " ORDER BY relid";

const char *idem_try_outcome_str(enum idem_try_outcome o)
{
	switch (o) {
	case IDEM_TRY_APPLY:
		return "apply";
	case IDEM_TRY_DUPLICATE:
		return "duplicate";
	case IDEM_TRY_QUARANTINE:
		return "quarantine";
	case IDEM_TRY_HANDLER_FAILED:
		return "handler_failed";
	}
	return "unknown";
}

/* One try: its connection, options, scratch and report. */
struct run {
	const struct idem_cfg *cfg;
	const struct idem_try_opts *o;
	PGconn *conn;
	struct idem_try_report *rep;
	struct idem_bind bind;
	idem_error *err;
};

static idem_status exec(struct run *rn, const char *sql, const char *what)
{
	return idem_pg_exec(rn->conn, sql, what, rn->err);
}

/* The counters of pg_stat_xact_user_tables now (*ret_res: the caller clears it). */
static idem_status stats(struct run *rn, PGresult **ret_res)
{
	return idem_pg_exec_params(rn->conn, sql_stats, 0, NULL, "read table statistics", ret_res,
	                           rn->err);
}

static int64_t num(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static int table_cmp(const void *a, const void *b)
{
	return strcmp(((const struct idem_try_table *)a)->name,
	              ((const struct idem_try_table *)b)->name);
}

/* The tables whose counters differ between @before and @after into @fx. */
static idem_status diff_tables(const PGresult *before, const PGresult *after,
                               struct idem_try_effects *fx)
{
	int nb = PQntuples(before), na = PQntuples(after), j = 0;

	fx->tables = calloc(na > 0 ? (size_t)na : 1, sizeof(*fx->tables));
	if (fx->tables == NULL)
		return IDEM_ERR_NOMEM;
	for (int i = 0; i < na; i++) {
		int64_t rel = num(after, i, 0), d[3];
		struct idem_try_table *t;
		bool had;

		while (j < nb && num(before, j, 0) < rel)
			j++;
		had = j < nb && num(before, j, 0) == rel;
		for (int c = 0; c < 3; c++)
			d[c] = num(after, i, 2 + c) - (had ? num(before, j, 2 + c) : 0);
		if (d[0] == 0 && d[1] == 0 && d[2] == 0)
			continue;
		t = &fx->tables[fx->n_tables];
		if ((t->name = strdup(PQgetvalue(after, i, 1))) == NULL)
			return IDEM_ERR_NOMEM;
		t->inserted = d[0];
		t->updated = d[1];
		t->deleted = d[2];
		fx->n_tables++;
	}
	qsort(fx->tables, fx->n_tables, sizeof(*fx->tables), table_cmp);
	return IDEM_OK;
}

/* Before a handler statement: the counters and the outbox's last id. */
struct mark {
	PGresult *stats;
	char last[24];
};

static idem_status mark_take(struct run *rn, struct mark *mk)
{
	PGresult *res = NULL;
	idem_status r;

	mk->stats = NULL;
	if ((r = idem_sql_exec(rn->conn, IDEM_SQL_TRY_OUTBOX_LAST, NULL, "read idem.outbox", &res,
	                       rn->err)) == IDEM_OK)
		snprintf(mk->last, sizeof(mk->last), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (r != IDEM_OK)
		return r;
	if ((r = stats(rn, &mk->stats)) != IDEM_OK) {
		PQclear(mk->stats);
		mk->stats = NULL;
	}
	return r;
}

/* After it succeeded with @res (taken over): what it returned, changed and emitted. */
static idem_status mark_effects(struct run *rn, struct mark *mk, PGresult *res,
                                struct idem_try_effects *fx)
{
	const char *v[1] = { mk->last };
	PGresult *after = NULL;
	idem_status r;

	fx->ran = true;
	fx->rows = res;
	if ((r = stats(rn, &after)) == IDEM_OK && diff_tables(mk->stats, after, fx) != IDEM_OK)
		r = idem_error_nomem(rn->err);
	PQclear(after);
	PQclear(mk->stats);
	mk->stats = NULL;
	if (r != IDEM_OK)
		return r;
	return idem_sql_exec(rn->conn, IDEM_SQL_TRY_EVENTS, v, "read the events", &fx->events,
	                     rn->err);
}

/* Why a handler failed, as idemd's quarantine would say it, with its SQLSTATE. */
static void handler_reason(struct run *rn, const PGresult *res, char *buf, size_t len,
                           char *sqlstate)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *prim = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *det = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL) : NULL;
	char head[128];

	if (state != NULL && strcmp(state, "57014") == 0)
		snprintf(head, sizeof(head), "handler timed out (statement timeout %d ms)",
		         rn->o->statement_timeout_ms);
	else if (state != NULL && strcmp(state, "55P03") == 0)
		snprintf(head, sizeof(head), "handler waited for a lock longer than %d ms",
		         rn->o->lock_timeout_ms);
	else
		snprintf(head, sizeof(head), "handler failed");
	if (prim == NULL)
		prim = PQerrorMessage(rn->conn);
	snprintf(buf, len, "%s: %s%s%s", head, prim, det ? ": " : "", det ? det : "");
	snprintf(sqlstate, 6, "%s", state ? state : "");
}

/* Does a handler failure with @state send idemd's batch to the slow path (that message's)? */
static bool message_failure(const char *state)
{
	return state[0] != '\0' &&
	       (idem_pg_classify(state) == IDEM_PG_MESSAGE || idem_pg_timeout(state));
}

/* The statement of @rt for message @i alone (row mode's prepared one, or one-element arrays). */
static PGresult *run_one(struct run *rn, size_t i)
{
	const struct idem_batch *b = &rn->rep->b;
	const struct idem_route *rt = b->route;

	if (rt->handler_mode != IDEM_CFG_MODE_SET) {
		if (idem_bind_row(&rn->bind, b, i) != IDEM_OK)
			return NULL;
		return PQexecPrepared(rn->conn, HANDLER_NAME, (int)rt->n_params, rn->bind.vals,
		                      NULL, NULL, 0);
	}
	if (idem_bind_set_open(&rn->bind, rt->n_params) != IDEM_OK ||
	    idem_bind_set_add(&rn->bind, b, i) != IDEM_OK ||
	    idem_bind_set_close(&rn->bind, rt->n_params) != IDEM_OK)
		return NULL;
	return PQexecParams(rn->conn, rt->handler_sql, (int)rt->n_params, NULL, rn->bind.vals, NULL,
	                    NULL, 0);
}

/*
 * Name the message(s) a handler statement applies for idem.emit(), where idemd would: message
 * @i in row mode, every APPLIED message in set mode (@i SIZE_MAX): IDEM_SQL_CONTEXT, and
 * IDEM_SQL_TRACES for those with trace context.
 */
static idem_status context(struct run *rn, size_t i)
{
	const struct idem_batch *b = &rn->rep->b;
	const char *v[4] = { b->route->consumer,
		             i == SIZE_MAX ? "" : idem_batch_ptr(b, b->msgs[i].bkey) };
	size_t n;
	idem_status r;

	if (!rn->rep->context)
		return IDEM_OK;
	if ((r = idem_sql_exec(rn->conn, IDEM_SQL_CONTEXT, v, "name the message", NULL, rn->err)) !=
	    IDEM_OK)
		return r;
	if (idem_bind_traces_open(&rn->bind) != IDEM_OK)
		return idem_error_nomem(rn->err);
	for (size_t k = i == SIZE_MAX ? 0 : i; k < (i == SIZE_MAX ? b->n_msgs : i + 1); k++) {
		if (b->msgs[k].state == IDEM_MSG_APPLIED &&
		    idem_bind_traces_add(&rn->bind, b, &k, 1) != IDEM_OK)
			return idem_error_nomem(rn->err);
	}
	if (idem_bind_traces_close(&rn->bind, v, &n) != IDEM_OK)
		return idem_error_nomem(rn->err);
	if (n == 0)
		return IDEM_OK;
	return idem_sql_exec(rn->conn, IDEM_SQL_TRACES, v, "name the trace context", NULL, rn->err);
}

/* A handler statement's failure under its savepoint, undone. */
static idem_status undo(struct run *rn)
{
	return exec(rn, "ROLLBACK TO SAVEPOINT idem_try", "roll back to the savepoint");
}

/* Set mode: the (business key, result) rows of the statement, stored with their messages. */
static idem_status set_results(struct idem_batch *b, const PGresult *res)
{
	if (PQnfields(res) != 2)
		return IDEM_OK;
	for (int row = 0; row < PQntuples(res); row++) {
		ssize_t i;

		if (PQgetisnull(res, row, 0))
			continue;
		i = idem_batch_find_key(b, PQgetvalue(res, row, 0),
		                        (size_t)PQgetlength(res, row, 0));
		if (i < 0 || b->msgs[i].state != IDEM_MSG_APPLIED)
			continue;
		if (idem_batch_set_result(b, (size_t)i, PQgetvalue(res, row, 1),
		                          (size_t)PQgetlength(res, row, 1),
		                          PQgetisnull(res, row, 1)) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

/* Message @i's handler on its own, under a savepoint: APPLY with its effects, or failed. */
static idem_status one_message(struct run *rn, size_t i)
{
	struct idem_batch *b = &rn->rep->b;
	struct idem_try_msg_report *mr = &rn->rep->msgs[i];
	bool set = b->route->handler_mode == IDEM_CFG_MODE_SET;
	struct mark mk;
	PGresult *res;
	idem_status r;

	if ((r = exec(rn, "SAVEPOINT idem_try", "savepoint")) != IDEM_OK ||
	    (r = context(rn, set ? SIZE_MAX : i)) != IDEM_OK || (r = mark_take(rn, &mk)) != IDEM_OK)
		return r;
	res = run_one(rn, i);
	if (res == NULL && PQstatus(rn->conn) == CONNECTION_OK) {
		PQclear(mk.stats);
		return idem_error_nomem(rn->err);
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK) {
		mr->outcome = IDEM_TRY_HANDLER_FAILED;
		b->msgs[i].state = IDEM_MSG_BAD;
		handler_reason(rn, res, mr->reason, sizeof(mr->reason), mr->sqlstate);
		PQclear(res);
		PQclear(mk.stats);
		return undo(rn);
	}
	/* Row mode stores the first column of the first row; set mode its (key, result) rows. */
	if (!set && PQntuples(res) > 0 && PQnfields(res) > 0 &&
	    idem_batch_set_result(b, i, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0),
	                          PQgetisnull(res, 0, 0)) != IDEM_OK) {
		PQclear(res);
		PQclear(mk.stats);
		return idem_error_nomem(rn->err);
	}
	if (set && set_results(b, res) != IDEM_OK) {
		PQclear(res);
		PQclear(mk.stats);
		return idem_error_nomem(rn->err);
	}
	if ((r = mark_effects(rn, &mk, res, &mr->fx)) != IDEM_OK)
		return r;
	return exec(rn, "RELEASE SAVEPOINT idem_try", "release the savepoint");
}

/* Row mode: PREPARE the handler as idemd does at start-up; one that does not fails them all. */
static idem_status rows(struct run *rn)
{
	struct idem_try_report *rep = rn->rep;
	const struct idem_route *rt = rep->b.route;
	PGresult *res;
	idem_status r;

	if ((r = exec(rn, "SAVEPOINT idem_try", "savepoint")) != IDEM_OK)
		return r;
	res = PQprepare(rn->conn, HANDLER_NAME, rt->handler_sql, (int)rt->n_params, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		char why[900], state[6];

		handler_reason(rn, res, why, sizeof(why), state);
		PQclear(res);
		for (size_t i = 0; i < rep->b.n_msgs; i++) {
			if (rep->b.msgs[i].state != IDEM_MSG_APPLIED)
				continue;
			rep->msgs[i].outcome = IDEM_TRY_HANDLER_FAILED;
			snprintf(
			        rep->msgs[i].reason, sizeof(rep->msgs[i].reason),
			        "handler sql does not prepare (idemd would refuse to start, exit 78): %s",
			        why);
			snprintf(rep->msgs[i].sqlstate, sizeof(rep->msgs[i].sqlstate), "%s", state);
		}
		return undo(rn);
	}
	PQclear(res);
	if ((r = exec(rn, "RELEASE SAVEPOINT idem_try", "release the savepoint")) != IDEM_OK)
		return r;
	for (size_t i = 0; i < rep->b.n_msgs && r == IDEM_OK; i++) {
		if (rep->b.msgs[i].state == IDEM_MSG_APPLIED)
			r = one_message(rn, i);
	}
	return r;
}

/* Set mode: the statement once over every newly claimed message, in their order. */
static idem_status sets(struct run *rn)
{
	struct idem_try_report *rep = rn->rep;
	struct idem_batch *b = &rep->b;
	const struct idem_route *rt = b->route;
	size_t count = 0;
	struct mark mk;
	PGresult *res;
	idem_status r;

	if ((r = idem_bind_set_open(&rn->bind, rt->n_params)) != IDEM_OK)
		return idem_error_set(rn->err, r, "bind the set parameters: %s",
		                      idem_status_str(r));
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state != IDEM_MSG_APPLIED)
			continue;
		if ((r = idem_bind_set_add(&rn->bind, b, i)) != IDEM_OK)
			return idem_error_set(rn->err, r, "bind the set parameters: %s",
			                      idem_status_str(r));
		count++;
	}
	if (count == 0)
		return IDEM_OK;
	if ((r = idem_bind_set_close(&rn->bind, rt->n_params)) != IDEM_OK)
		return idem_error_nomem(rn->err);
	if ((rep->set_params = calloc(rt->n_params + 1, sizeof(char *))) == NULL)
		return idem_error_nomem(rn->err);
	for (size_t p = 0; p < rt->n_params; p++) {
		if ((rep->set_params[p] = strdup(rn->bind.vals[p])) == NULL)
			return idem_error_nomem(rn->err);
	}
	if ((r = exec(rn, "SAVEPOINT idem_try", "savepoint")) != IDEM_OK ||
	    (r = context(rn, SIZE_MAX)) != IDEM_OK || (r = mark_take(rn, &mk)) != IDEM_OK)
		return r;
	res = PQexecParams(rn->conn, rt->handler_sql, (int)rt->n_params, NULL,
	                   (const char *const *)rep->set_params, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK) {
		if (set_results(b, res) != IDEM_OK) {
			PQclear(res);
			PQclear(mk.stats);
			return idem_error_nomem(rn->err);
		}
		if ((r = mark_effects(rn, &mk, res, &rep->set_fx)) != IDEM_OK)
			return r;
		return exec(rn, "RELEASE SAVEPOINT idem_try", "release the savepoint");
	}
	handler_reason(rn, res, rep->set_reason, sizeof(rep->set_reason), rep->set_sqlstate);
	PQclear(res);
	PQclear(mk.stats);
	if ((r = undo(rn)) != IDEM_OK)
		return r;
	/* idemd redoes a batch whose statement failed for a message's reason with one-element
	 * arrays, one message at a time: the same finds the message. Any other failure is the
	 * whole statement's. */
	for (size_t i = 0; i < b->n_msgs && r == IDEM_OK; i++) {
		if (b->msgs[i].state != IDEM_MSG_APPLIED)
			continue;
		if (message_failure(rep->set_sqlstate)) {
			r = one_message(rn, i);
			continue;
		}
		rep->msgs[i].outcome = IDEM_TRY_HANDLER_FAILED;
		snprintf(rep->msgs[i].reason, sizeof(rep->msgs[i].reason), "%s", rep->set_reason);
		snprintf(rep->msgs[i].sqlstate, sizeof(rep->msgs[i].sqlstate), "%s",
		         rep->set_sqlstate);
	}
	return r;
}

/* The messages as idemd decodes them, into the report's batch. */
static idem_status decode(struct run *rn, const struct idem_try_msgs *msgs)
{
	struct idem_batch *b = &rn->rep->b;
	struct idem_header *hv = NULL;
	int64_t base = rn->rep->progress_next >= 0 ? rn->rep->progress_next : 0;
	int64_t now = idem_wall_ms();
	idem_status r = IDEM_OK;

	for (size_t i = 0; i < msgs->n && r == IDEM_OK; i++) {
		const struct idem_try_msg *m = &msgs->v[i];
		struct idem_msgview v = {
			.topic = b->topic,
			.partition = b->partition,
			.offset = m->offset >= 0 ? m->offset : base + (int64_t)i,
			.timestamp_ms = m->timestamp_ms >= 0 ? m->timestamp_ms : now,
			.key = m->key,
			.key_len = m->key_len,
			.value = m->value,
			.value_len = m->value_len,
			.n_headers = m->n_hdrs,
		};

		free(hv);
		if ((hv = calloc(m->n_hdrs ? m->n_hdrs : 1, sizeof(*hv))) == NULL) {
			r = idem_error_nomem(rn->err);
			break;
		}
		for (size_t h = 0; h < m->n_hdrs; h++)
			hv[h] = (struct idem_header){ m->hdrs[h].name, m->hdrs[h].value,
				                      m->hdrs[h].len };
		v.headers = hv;
		r = idem_batch_add(b, &v, rn->cfg, 0);
		if (r == IDEM_ERR_UNAVAILABLE)
			r = idem_error_set(rn->err, r, "message %zu cannot be read now: %s", i + 1,
			                   b->wait_reason);
		else if (r != IDEM_OK)
			r = idem_error_nomem(rn->err);
	}
	free(hv);
	if (r == IDEM_OK && idem_batch_collapse(b) != IDEM_OK)
		r = idem_error_nomem(rn->err);
	return r;
}

/* The partition's next_offset and pending replay end (IDEM_SQL_PROGRESS_GET). */
static idem_status progress(struct run *rn, int64_t *ret_replay_to)
{
	const struct idem_batch *list[1] = { &rn->rep->b };
	const char *v[3];
	PGresult *res = NULL;
	idem_status r;

	if (idem_bind_progress_get(&rn->bind, list, 1, v) != IDEM_OK)
		return idem_error_nomem(rn->err);
	r = idem_sql_exec(rn->conn, IDEM_SQL_PROGRESS_GET, v, "read the partition's progress", &res,
	                  rn->err);
	*ret_replay_to = -1;
	if (r == IDEM_OK && PQntuples(res) > 0) {
		rn->rep->progress_next = PQgetisnull(res, 0, 0) ? -1 : num(res, 0, 0);
		*ret_replay_to = PQgetisnull(res, 0, 1) ? -1 : num(res, 0, 1);
	}
	PQclear(res);
	return r;
}

/* The claim of every key; the offsets it returns are new claims, their messages APPLIED. */
static idem_status claim(struct run *rn)
{
	struct idem_batch *b = &rn->rep->b;
	idem_error e = { 0 };
	struct idem_bind_claim c;
	PGresult *res = NULL;
	idem_status r;

	if (b->n_order > 0) {
		if (idem_bind_claim(&rn->bind, b, b->order, b->n_order, &c) != IDEM_OK)
			return idem_error_nomem(rn->err);
		r = idem_sql_exec_bin(rn->conn, IDEM_SQL_CLAIM, c.vals, c.lens, c.fmts, "claim",
		                      &res, &e);
		if (r != IDEM_OK && idem_pg_timeout(e.sqlstate))
			r = idem_error_set(
			        rn->err, r,
			        "claim: a business key is being claimed by another transaction now (waited longer than %d ms); try again",
			        rn->o->lock_timeout_ms);
		else if (r != IDEM_OK && rn->err != NULL)
			*rn->err = e;
		for (int row = 0; r == IDEM_OK && row < PQntuples(res); row++) {
			ssize_t i = idem_batch_find_offset(b, num(res, row, 0));

			if (i >= 0)
				b->msgs[i].state = IDEM_MSG_APPLIED;
		}
		PQclear(res);
		if (r != IDEM_OK)
			return r;
	}
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_PENDING)
			b->msgs[i].state = IDEM_MSG_DUPLICATE;
	}
	return IDEM_OK;
}

/* Where each duplicate's key was claimed (when, with which result), then classify them. */
static idem_status duplicates(struct run *rn, int64_t replay_to)
{
	struct idem_try_report *rep = rn->rep;
	struct idem_batch *b = &rep->b;
	struct idem_buf cons = { 0 };
	idem_status r = IDEM_OK;

	if (idem_pgarray_open(&cons) != IDEM_OK ||
	    idem_pgarray_add(&cons, b->route->consumer, strlen(b->route->consumer), false) !=
	            IDEM_OK ||
	    idem_pgarray_close(&cons) != IDEM_OK) {
		idem_buf_done(&cons);
		return idem_error_nomem(rn->err);
	}
	for (size_t i = 0; i < b->n_msgs && r == IDEM_OK; i++) {
		const char *v[2] = { idem_batch_ptr(b, b->msgs[i].bkey), cons.data };
		PGresult *res = NULL;

		if (b->msgs[i].state != IDEM_MSG_DUPLICATE)
			continue;
		r = idem_sql_exec(rn->conn, IDEM_SQL_LOOKUP, v, "look the claim up", &res, rn->err);
		if (r == IDEM_OK && PQntuples(res) > 0 &&
		    idem_batch_set_claim(b, i, PQgetvalue(res, 0, 1), (int32_t)num(res, 0, 2),
		                         num(res, 0, 3),
		                         PQgetisnull(res, 0, 6) ? NULL : PQgetvalue(res, 0, 6),
		                         (size_t)PQgetlength(res, 0, 6)) != IDEM_OK)
			r = idem_error_nomem(rn->err);
		if (r == IDEM_OK && PQntuples(res) > 0)
			rep->msgs[i].claim = res;
		else
			PQclear(res);
	}
	idem_buf_done(&cons);
	if (r == IDEM_OK && idem_batch_classify(b, rep->progress_next, replay_to) != IDEM_OK)
		r = idem_error_nomem(rn->err);
	for (size_t i = 0; i < b->n_msgs && r == IDEM_OK; i++) {
		struct idem_batch_msg *m = &b->msgs[i];

		if (m->state == IDEM_MSG_BAD) {
			rep->msgs[i].outcome = IDEM_TRY_QUARANTINE;
			snprintf(rep->msgs[i].reason, sizeof(rep->msgs[i].reason), "%s",
			         m->reason.null ? "unknown" : idem_batch_ptr(b, m->reason));
		} else if (m->state == IDEM_MSG_DUPLICATE || m->state == IDEM_MSG_DUP_IN_BATCH) {
			rep->msgs[i].outcome = IDEM_TRY_DUPLICATE;
		}
	}
	return r;
}

/* Where the messages go: one topic and partition, the route that reads the topic. */
static idem_status where(const struct idem_cfg *cfg, const struct idem_try_msgs *msgs,
                         const struct idem_try_opts *o, struct idem_try_report *rep,
                         idem_error *err)
{
	const char *topic = msgs->v[0].topic ? msgs->v[0].topic : o->topic;
	int32_t part = msgs->v[0].partition >= 0 ? msgs->v[0].partition
	                                         : (o->partition >= 0 ? o->partition : 0);

	if (topic == NULL)
		return idem_error_set(
		        err, IDEM_ERR_INVALID,
		        "which topic? give --topic or a 'topic:' line (the route is chosen by the topic)");
	for (size_t i = 1; i < msgs->n; i++) {
		const struct idem_try_msg *m = &msgs->v[i];
		const char *t = m->topic ? m->topic : o->topic;
		int32_t p =
		        m->partition >= 0 ? m->partition : (o->partition >= 0 ? o->partition : 0);

		if (t == NULL || strcmp(t, topic) != 0 || p != part)
			return idem_error_set(
			        err, IDEM_ERR_INVALID,
			        "message %zu is not of topic '%s' partition %" PRId32
			        " like the first: one try is one batch, of one partition",
			        i + 1, topic, part);
	}
	if ((rep->route = idem_cfg_route_for(cfg, topic)) == NULL)
		return idem_error_set(err, IDEM_ERR_INVALID, "no route reads topic '%s'", topic);
	if (idem_batch_init(&rep->b, rep->route, topic, part) != IDEM_OK ||
	    (rep->msgs = calloc(msgs->n, sizeof(*rep->msgs))) == NULL)
		return idem_error_nomem(err);
	return IDEM_OK;
}

idem_status idem_try_run(const struct idem_cfg *cfg, PGconn *conn, const struct idem_try_msgs *msgs,
                         const struct idem_try_opts *o, struct idem_try_report *ret,
                         idem_error *err)
{
	struct run rn = { .cfg = cfg, .o = o, .conn = conn, .rep = ret, .err = err };
	idem_schemas *schemas = NULL;
	int64_t replay_to = -1;
	char set[128];
	idem_status r;

	memset(ret, 0, sizeof(*ret));
	ret->progress_next = -1;
	ret->context = cfg->outbox_enabled;
	if (msgs->n == 0)
		return idem_error_set(err, IDEM_ERR_INVALID, "no message to try");
	if ((r = where(cfg, msgs, o, ret, err)) != IDEM_OK)
		return r;
	idem_bind_init(&rn.bind);
	if ((r = idem_schemas_open(cfg, NULL, NULL, &schemas, err)) != IDEM_OK)
		goto out_bind;
	idem_schemas_attach(schemas, &ret->b.doc);
	snprintf(set, sizeof(set), "SET LOCAL statement_timeout = %d; SET LOCAL lock_timeout = %d",
	         o->statement_timeout_ms, o->lock_timeout_ms);
	if ((r = exec(&rn, "BEGIN", "begin")) != IDEM_OK)
		goto out_schemas;
	/* The trace context's table as a worker's session has it, gone with the rollback. */
	if ((r = exec(&rn, set, "set the timeouts")) != IDEM_OK ||
	    (r = idem_pg_search_path(conn, &ret->search_path, err)) != IDEM_OK ||
	    (ret->context &&
	     (r = idem_sql_exec(conn, IDEM_SQL_TRACE_TABLE, NULL, "create pg_temp.idem_trace", NULL,
	                        err)) != IDEM_OK) ||
	    (r = progress(&rn, &replay_to)) != IDEM_OK || (r = decode(&rn, msgs)) != IDEM_OK ||
	    (r = claim(&rn)) != IDEM_OK || (r = duplicates(&rn, replay_to)) != IDEM_OK)
		goto out_rollback;
	r = ret->route->handler_mode == IDEM_CFG_MODE_SET ? sets(&rn) : rows(&rn);

out_rollback:
	/* Whatever happened: nothing of a try is ever kept. */
	idem_pg_rollback(conn);
out_schemas:
	idem_schemas_close(schemas);
out_bind:
	idem_bind_done(&rn.bind);
	return r;
}

static void effects_done(struct idem_try_effects *fx)
{
	PQclear(fx->rows);
	PQclear(fx->events);
	for (size_t t = 0; t < fx->n_tables; t++)
		free(fx->tables[t].name);
	free(fx->tables);
	*fx = (struct idem_try_effects){ 0 };
}

void idem_try_report_done(struct idem_try_report *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; r->msgs != NULL && i < r->b.n_msgs; i++) {
		PQclear(r->msgs[i].claim);
		effects_done(&r->msgs[i].fx);
	}
	free(r->msgs);
	if (r->set_params != NULL && r->route != NULL) {
		for (size_t p = 0; p < r->route->n_params; p++)
			free(r->set_params[p]);
	}
	free(r->set_params);
	effects_done(&r->set_fx);
	idem_batch_done(&r->b);
	memset(r, 0, sizeof(*r));
}

enum idem_try_outcome idem_try_worst(const struct idem_try_report *r)
{
	enum idem_try_outcome w = IDEM_TRY_APPLY;

	for (size_t i = 0; r->msgs != NULL && i < r->b.n_msgs; i++) {
		if (r->msgs[i].outcome > w)
			w = r->msgs[i].outcome;
	}
	return w;
}
