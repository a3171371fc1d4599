/*
 * idem_flush.c - the batch transaction.
 *
 * Fast path, in libpq pipeline mode (three round trips per batch whatever its size):
 *   1. BEGIN; read the partition's recorded progress; claim every unique key of the batch with
 *      one INSERT ... ON CONFLICT DO NOTHING RETURNING over unnest()ed arrays, keys in sorted
 *      order;
 *   2. only if some keys were claimed already: where (topic/partition/offset, payload hash),
 *      to classify the duplicates; the handler once per newly claimed message, in offset order;
 *   3. store the handlers' results; quarantine what cannot be applied; the replies and dead
 *      letters the route asks for (idem.outbox rows); advance idem.partition_progress with the
 *      batch's counters; COMMIT.
 * Slow path, only after a message-specific handler failure (or a handler timeout, or claims that
 * kept running into lock_timeout): the same work with a SAVEPOINT around each message's claim
 * and handler, so a failing message takes its claim with it and its neighbours still commit.
 * Several partitions' batches (idem_flush_many()): the fast path's three round trips carry
 * them all, with one claim of all their keys in one global order, one lookup of their
 * duplicates' claims per consumer, and one COMMIT (one fsync).
 * Anything short of a clean commit rolls that back, and each batch is flushed on its own.
 */
#include "idem_flush.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_bind.h"
#include "idem_log.h"
#include "idem_migrate.h"
#include "idem_sql.h"

/*
 * One batch's part of a flush, kept between the round trips: idem_flush_batch() uses pg->one,
 * idem_flush_many() one per batch of its combined transaction.
 */
struct flush_ctx {
	struct idem_batch *b;
	size_t pos;                 /* idem_flush_many(): the batch's index in its arguments */
	struct idem_flush_stats st; /* what the closing statements record */
	size_t *applied; /* indices of messages whose handler must run, in offset order */
	size_t n_apply;
	size_t *dups; /* indices of messages that ran into an existing claim, sorted by key */
	size_t n_dups;
	size_t cap_idx;
	bool results_sent;     /* round trip 3: sent its results statement */
	bool replies_sent;     /* round trip 3: sent its replies statement */
	int64_t progress_next; /* the partition's recorded progress before this batch, or -1 */
	int64_t replay_to;     /* the end of the range a replay reads again, or -1 */
	int64_t reapply_to;    /* the end of a gap being read again, as recorded, or -1 */
	bool behind;           /* the database lacks the position b->db_floor: rolled back */
	bool set_sent;         /* set mode: sent its route's statement (round trip 2) */
	bool dups_sent; /* sent the claims lookup of its consumer's duplicates (round trip 2) */
	struct {
		bool on;
		int64_t offset;
		char reason[512];
	} halt; /* on_poison: halt stopped the batch */
};

struct idem_flush {
	const struct idem_cfg *cfg;
	PGconn *conn;
	bool emit_context;       /* name each message for idem.emit() (IDEM_SQL_CONTEXT) */
	const char *ctx_vals[2]; /* its parameters */
	uint64_t connects;       /* connections set up so far (atomic) */
	struct idem_bind bind;   /* statement parameters, rebuilt for each statement */
	struct flush_ctx one;    /* idem_flush_batch() and idem_flush_apply_one() */
	struct flush_ctx *many;  /* idem_flush_many(), cap_many of them */
	size_t cap_many;
	const struct idem_batch **many_b;  /* the batches of pg->many, for the combined claim */
	struct idem_bind_progress *many_p; /* and their progress rows */
	const struct idem_batch *one_b[1]; /* the same for pg->one */
	struct idem_bind_progress one_p[1];
};

/* @sql on one line, shortened to fit @len, for a message that names the statement. */
static void sql_excerpt(const char *sql, char *buf, size_t len)
{
	size_t o = 0;
	bool space = false;
	const char *p;

	for (p = sql; *p != '\0' && o + 5 < len; p++) {
		if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
			space = o > 0;
			continue;
		}
		if (space)
			buf[o++] = ' ';
		space = false;
		buf[o++] = *p;
	}
	if (*p != '\0') {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = '\0';
}

static idem_status setup(idem_flush *pg, idem_error *err)
{
	char name[32], what[512], sql[160], set[128];
	idem_status r;

	r = idem_pg_conn_open(pg->cfg, "idemd", &pg->conn, err);
	if (r != IDEM_OK)
		return r;
	if ((r = idem_migrate_check(pg->conn, err)) != IDEM_OK)
		return r;
	/* Per connection, so they also hold after a reconnect. A claim waits at most
	 * lock_timeout for a key another transaction is claiming; a handler runs at most
	 * statement_timeout. 0 means no limit, as in Postgres. */
	snprintf(set, sizeof(set), "SET lock_timeout = %d; SET statement_timeout = %d",
	         pg->cfg->lock_timeout_ms, pg->cfg->statement_timeout_ms);
	if ((r = idem_pg_exec(pg->conn, set, "set timeouts", err)) != IDEM_OK)
		return r;
	if ((r = idem_sql_prepare_batch(pg->conn, err)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < pg->cfg->n_routes; i++) {
		const struct idem_route *rt = &pg->cfg->routes[i];

		snprintf(name, sizeof(name), "idem_h%zu", i);
		sql_excerpt(rt->handler_sql, sql, sizeof(sql));
		snprintf(what, sizeof(what), "route '%s': handler sql '%s' does not prepare",
		         rt->name, sql);
		r = idem_pg_prepare(pg->conn, name, rt->handler_sql, (int)rt->n_params, what, err);
		if (r != IDEM_OK)
			return r;
	}
	__atomic_add_fetch(&pg->connects, 1, __ATOMIC_RELAXED);
	return IDEM_OK;
}

idem_status idem_flush_new(const struct idem_cfg *cfg, idem_flush **ret_pg, idem_error *err)
{
	idem_flush *pg = calloc(1, sizeof(*pg));
	idem_status r;

	if (pg == NULL)
		return idem_error_nomem(err);
	pg->cfg = cfg;
	/* Without the relay nothing is published, and naming every message costs a statement per
	 * message in row mode: idem.emit() then gives random ids. */
	pg->emit_context = cfg->outbox_enabled;
	r = setup(pg, err);
	if (r != IDEM_OK) {
		idem_flush_free(pg);
		return r;
	}
	*ret_pg = pg;
	return IDEM_OK;
}

static void ctx_done(struct flush_ctx *ctx)
{
	free(ctx->applied);
	free(ctx->dups);
}

void idem_flush_free(idem_flush *pg)
{
	if (pg == NULL)
		return;
	if (pg->conn != NULL)
		PQfinish(pg->conn);
	idem_bind_done(&pg->bind);
	ctx_done(&pg->one);
	for (size_t k = 0; k < pg->cap_many; k++)
		ctx_done(&pg->many[k]);
	free(pg->many);
	free(pg->many_b);
	free(pg->many_p);
	free(pg);
}

idem_status idem_flush_reconnect(idem_flush *pg, idem_error *err)
{
	idem_status r;

	if (pg->conn != NULL)
		PQfinish(pg->conn);
	pg->conn = NULL;
	r = setup(pg, err);
	/* Connected but not set up (a handler that no longer prepares): the next attempt must
	 * start over, not run on statements that do not exist. */
	if (r != IDEM_OK && pg->conn != NULL) {
		PQfinish(pg->conn);
		pg->conn = NULL;
	}
	return r;
}

bool idem_flush_check(idem_flush *pg)
{
	/* Reading is what makes libpq notice that the server closed the connection. */
	if (idem_flush_connected(pg) && !PQconsumeInput(pg->conn)) {
		PQfinish(pg->conn);
		pg->conn = NULL;
	}
	if (!idem_flush_connected(pg) && idem_flush_reconnect(pg, NULL) != IDEM_OK)
		return false;
	return idem_flush_connected(pg);
}

bool idem_flush_connected(const idem_flush *pg)
{
	return pg->conn != NULL && PQstatus(pg->conn) == CONNECTION_OK;
}

uint64_t idem_flush_connects(const idem_flush *pg)
{
	return __atomic_load_n(&pg->connects, __ATOMIC_RELAXED);
}

PGconn *idem_flush_conn(idem_flush *pg)
{
	return pg->conn;
}

static idem_status need_idx(struct flush_ctx *ctx, size_t n)
{
	size_t *a, *d;

	if (n <= ctx->cap_idx)
		return IDEM_OK;
	a = realloc(ctx->applied, n * sizeof(*a));
	if (a == NULL)
		return IDEM_ERR_NOMEM;
	ctx->applied = a;
	d = realloc(ctx->dups, n * sizeof(*d));
	if (d == NULL)
		return IDEM_ERR_NOMEM;
	ctx->dups = d;
	ctx->cap_idx = n;
	return IDEM_OK;
}

/* Room for @n batches in pg->many; new ones start empty. */
static idem_status need_many(idem_flush *pg, size_t n)
{
	struct flush_ctx *ctx;
	const struct idem_batch **bs;

	if (n <= pg->cap_many)
		return IDEM_OK;
	struct idem_bind_progress *ps;

	bs = realloc(pg->many_b, n * sizeof(*bs));
	if (bs == NULL)
		return IDEM_ERR_NOMEM;
	pg->many_b = bs;
	ps = realloc(pg->many_p, n * sizeof(*ps));
	if (ps == NULL)
		return IDEM_ERR_NOMEM;
	pg->many_p = ps;
	ctx = realloc(pg->many, n * sizeof(*ctx));
	if (ctx == NULL)
		return IDEM_ERR_NOMEM;
	memset(ctx + pg->cap_many, 0, (n - pg->cap_many) * sizeof(*ctx));
	pg->many = ctx;
	pg->cap_many = n;
	return IDEM_OK;
}

/* The batches of ctx[0..n) as a list (pg->one's or pg->many's), for statements over several. */
static const struct idem_batch *const *batch_list(idem_flush *pg, const struct flush_ctx *ctx,
                                                  size_t n)
{
	const struct idem_batch **l = ctx == &pg->one ? pg->one_b : pg->many_b;

	for (size_t k = 0; k < n; k++)
		l[k] = ctx[k].b;
	return l;
}

/*
 * The partitions' recorded progress and pending replay (IDEM_SQL_PROGRESS_GET: one row per
 * batch, in order).
 */
static void read_progress(struct flush_ctx *ctx, size_t n, const PGresult *res)
{
	for (size_t k = 0; k < n; k++) {
		ctx[k].progress_next = -1;
		ctx[k].replay_to = -1;
		ctx[k].reapply_to = -1;
		if ((int)k >= PQntuples(res))
			continue;
		if (!PQgetisnull(res, (int)k, 0))
			ctx[k].progress_next = strtoll(PQgetvalue(res, (int)k, 0), NULL, 10);
		if (PQnfields(res) > 1 && !PQgetisnull(res, (int)k, 1))
			ctx[k].replay_to = strtoll(PQgetvalue(res, (int)k, 1), NULL, 10);
		if (PQnfields(res) > 2 && !PQgetisnull(res, (int)k, 2))
			ctx[k].reapply_to = strtoll(PQgetvalue(res, (int)k, 2), NULL, 10);
	}
}

/*
 * Does the database still hold every partition where this process last saw it (b->db_floor)?
 * A position it lacks was lost: a restore, a point-in-time recovery, a failover to a standby
 * that had not received the last commits. Nothing of such a partition may commit on top of the
 * gap (its next_offset would jump over it): IDEM_ERR_BEHIND, and the daemon reads the partition
 * again from b->db_next (ARCHITECTURE.md "When the database goes back").
 */
static idem_status check_floor(struct flush_ctx *ctx, size_t n, idem_error *err)
{
	idem_status r = IDEM_OK;

	for (size_t k = 0; k < n; k++) {
		struct idem_batch *b = ctx[k].b;

		b->db_next = ctx[k].progress_next;
		if (b->db_floor < 0 || ctx[k].progress_next >= b->db_floor)
			continue;
		ctx[k].behind = true;
		r = idem_error_set(err, IDEM_ERR_BEHIND,
		                   "the database is behind: topic=%s partition=%" PRId32
		                   " next_offset=%" PRId64 " where this process saw %" PRId64,
		                   b->topic, b->partition, ctx[k].progress_next, b->db_floor);
	}
	return r;
}

/* Record the claims found by SQL_CLAIMS_GET on the duplicates ctx->dups[0..ctx->n_dups). */
static idem_status read_claims(struct flush_ctx *ctx, const PGresult *res)
{
	struct idem_batch *b = ctx->b;
	const size_t *dups = ctx->dups;
	size_t n = ctx->n_dups;

	for (int row = 0; row < PQntuples(res); row++) {
		const char *k = PQgetvalue(res, row, 0);
		size_t klen = (size_t)PQgetlength(res, row, 0);
		int32_t part = (int32_t)strtol(PQgetvalue(res, row, 2), NULL, 10);
		int64_t off = strtoll(PQgetvalue(res, row, 3), NULL, 10);
		bool no_hash = PQgetisnull(res, row, 4);

		for (size_t pos = idem_batch_lower_bound(b, dups, n, k, klen);
		     pos < n && b->msgs[dups[pos]].bkey.len == klen &&
		     memcmp(idem_batch_ptr(b, b->msgs[dups[pos]].bkey), k, klen) == 0;
		     pos++) {
			if (idem_batch_set_claim(b, dups[pos], PQgetvalue(res, row, 1), part, off,
			                         no_hash ? NULL : PQgetvalue(res, row, 4),
			                         (size_t)PQgetlength(res, row, 4)) != IDEM_OK)
				return IDEM_ERR_NOMEM;
		}
	}
	return IDEM_OK;
}

static void count(const struct idem_batch *b, struct idem_flush_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->consumed = b->n_msgs;
	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];

		st->payload_mismatches += m->mismatch;
		switch (m->state) {
		case IDEM_MSG_APPLIED:
			st->applied++;
			break;
		case IDEM_MSG_DUPLICATE:
		case IDEM_MSG_DUP_IN_BATCH:
			st->duplicates++;
			st->dup_redelivery += m->dup == IDEM_DUP_REDELIVERY;
			st->dup_replay += m->dup == IDEM_DUP_REPLAY;
			/* Unclassified ones (a claim purged meanwhile) count as upstream. */
			st->dup_upstream += m->dup == IDEM_DUP_UPSTREAM || m->dup == IDEM_DUP_NONE;
			break;
		case IDEM_MSG_BAD:
		case IDEM_MSG_QUARANTINED:
			/* Counted once, when it first went there: seen again at the same
			 * position, it is Kafka delivering it again. */
			if (m->quarantined_before) {
				st->duplicates++;
				st->dup_redelivery++;
			} else {
				st->quarantined++;
			}
			break;
		case IDEM_MSG_PENDING:
			break;
		}
	}
}

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

/*
 * Send one batch's closing statements that precede the progress, in pipeline mode: results (if
 * any), one quarantine insert per bad message. @ret_n counts the statements sent, @ret_q the
 * quarantine inserts among them.
 */
static idem_status send_closing(idem_flush *pg, struct flush_ctx *ctx, int *ret_n, int *ret_q,
                                idem_error *err)
{
	const struct idem_batch *b = ctx->b;
	struct idem_bind *bd = &pg->bind;
	const char *v[3];
	bool any;
	int n = 0, q = 0;

	/* Only results there are: no claim row is rewritten for nothing. */
	if (idem_bind_results(bd, b, &any, v) != IDEM_OK)
		return idem_error_nomem(err);
	ctx->results_sent = any;
	if (any) {
		if (!idem_sql_send(pg->conn, IDEM_SQL_RESULTS, v, NULL, NULL))
			return idem_pg_error(err, pg->conn, NULL, "send results");
		n++;
	}
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state != IDEM_MSG_BAD)
			continue;
		if (idem_bind_quarantine(bd, b, i) != IDEM_OK)
			return idem_error_nomem(err);
		/* libpq copies parameters at send time, so the buffers may be reused. */
		if (!idem_sql_send(pg->conn,
		                   b->route->dead_letter_topic != NULL ? IDEM_SQL_QUARANTINE_DLT
		                                                       : IDEM_SQL_QUARANTINE,
		                   bd->vals, bd->lens, bd->fmts))
			return idem_pg_error(err, pg->conn, NULL, "send quarantine");
		q++;
	}
	*ret_n = n + q;
	*ret_q = q;
	return IDEM_OK;
}

/*
 * Send one batch's replies (routes[].reply), if it has any: after every batch's results, so
 * that a duplicate of a message applied in this very transaction reads that message's result.
 * *ret_n is 1 when sent.
 */
static idem_status send_replies(idem_flush *pg, struct flush_ctx *ctx, int *ret_n, idem_error *err)
{
	const char *v[8];
	size_t n;

	ctx->replies_sent = false;
	*ret_n = 0;
	if (ctx->b->route->reply_topic == NULL)
		return IDEM_OK;
	if (idem_bind_replies(&pg->bind, ctx->b, &n, v) != IDEM_OK)
		return idem_error_nomem(err);
	if (n == 0)
		return IDEM_OK;
	if (!idem_sql_send(pg->conn, IDEM_SQL_REPLIES, v, NULL, NULL))
		return idem_pg_error(err, pg->conn, NULL, "send replies");
	ctx->replies_sent = true;
	*ret_n = 1;
	return IDEM_OK;
}

/* What the batch of @ctx adds to its partition's progress row. */
static struct idem_bind_progress progress_row(const struct flush_ctx *ctx)
{
	const struct idem_flush_stats *st = &ctx->st;

	return (struct idem_bind_progress){
		.b = ctx->b,
		.next_offset = st->next_offset,
		.counts = { st->consumed, st->applied, st->duplicates, st->quarantined,
		            st->dup_redelivery, st->dup_replay, st->dup_upstream,
		            st->payload_mismatches },
		.halted = st->halted,
		.halt_reason = st->halt_reason,
		.reapply_to = st->reapply_to,
		.reapplied = st->reapplied,
	};
}

/*
 * The messages of the batch below the end of a gap being read again (the daemon's, or the one
 * recorded in the database by an earlier batch), and that end if the batch stops before it.
 */
static void count_reapplied(struct flush_ctx *ctx)
{
	const struct idem_batch *b = ctx->b;
	struct idem_flush_stats *st = &ctx->st;
	int64_t end = b->reapply_to > ctx->reapply_to ? b->reapply_to : ctx->reapply_to;

	st->reapplied = 0;
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].offset < end && b->msgs[i].offset < st->next_offset)
			st->reapplied++;
	}
	st->reapply_to = end > st->next_offset ? end : -1;
}

/* Counters, where the partition is done, and the halt if any, for the closing statements. */
static void finish_stats(struct flush_ctx *ctx)
{
	const struct idem_batch *b = ctx->b;
	struct idem_flush_stats *st = &ctx->st;

	count(b, st);
	st->halted = ctx->halt.on;
	if (ctx->halt.on) {
		st->next_offset = ctx->halt.offset;
		snprintf(st->halt_reason, sizeof(st->halt_reason), "%s", ctx->halt.reason);
	} else {
		st->next_offset = b->msgs[b->n_msgs - 1].offset + 1;
	}
	count_reapplied(ctx);
}

/* Stop the batch at message @i (on_poison: halt): it and what follows stay unprocessed. */
static void halt_at(struct flush_ctx *ctx, size_t i)
{
	struct idem_batch *b = ctx->b;
	const struct idem_batch_msg *m = &b->msgs[i];

	ctx->halt.on = true;
	ctx->halt.offset = m->offset;
	snprintf(ctx->halt.reason, sizeof(ctx->halt.reason), "%s",
	         m->reason.null ? "unknown" : idem_batch_ptr(b, m->reason));
	idem_batch_truncate(b, i);
}

/*
 * Read the result of the next pipelined statement: one PGresult then NULL. Returns the status
 * and keeps the result in *ret_res (caller clears) when @keep.
 */
static ExecStatusType next_result(PGconn *conn, PGresult **ret_res)
{
	PGresult *res = PQgetResult(conn), *extra;
	ExecStatusType st;

	if (res == NULL) {
		*ret_res = NULL;
		return PGRES_FATAL_ERROR;
	}
	st = PQresultStatus(res);
	if (st != PGRES_PIPELINE_SYNC) {
		/* Each query's results are followed by a NULL. */
		while ((extra = PQgetResult(conn)) != NULL)
			PQclear(extra);
	}
	*ret_res = res;
	return st;
}

/* After a failure in pipeline mode: drain to the sync, leave pipeline mode, roll back. */
static void pipeline_abort(idem_flush *pg, bool sync_sent)
{
	PGresult *res;

	if (PQstatus(pg->conn) != CONNECTION_OK)
		return;
	if (!sync_sent && !PQpipelineSync(pg->conn))
		return;
	for (;;) {
		res = PQgetResult(pg->conn);
		if (res == NULL) {
			if (PQstatus(pg->conn) != CONNECTION_OK)
				return;
			continue;
		}
		if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
			PQclear(res);
			break;
		}
		PQclear(res);
	}
	PQexitPipelineMode(pg->conn);
	res = PQexec(pg->conn, "ROLLBACK");
	PQclear(res);
}

static idem_status exec_params(idem_flush *pg, const char *name, int n, const char *const *vals,
                               const int *lens, const int *fmts, PGresult **ret_res)
{
	PGresult *res = PQexecPrepared(pg->conn, name, n, vals, lens, fmts, 0);
	ExecStatusType s = PQresultStatus(res);

	*ret_res = res;
	return (s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK) ? IDEM_OK : IDEM_ERR_PG;
}

/* exec_params() of statement @id of the table. */
static idem_status exec_stmt(idem_flush *pg, enum idem_sql_id id, const char *const *vals,
                             const int *lens, const int *fmts, PGresult **ret_res)
{
	return idem_sql_exec_prepared(pg->conn, id, vals, lens, fmts, idem_sql(id)->name, ret_res,
	                              NULL);
}

/*
 * Read what send_closing() sent for @ctx: the results statement, then for each bad message
 * whether idem.quarantine had its position already (IDEM_SQL_QUARANTINE returns whether its row
 * is new): then it is a redelivery, counted as such by count().
 */
static idem_status read_closing(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	struct idem_batch *b = ctx->b;
	PGresult *res;
	idem_status r;

	if (ctx->results_sent) {
		if (next_result(pg->conn, &res) != PGRES_TUPLES_OK) {
			r = idem_pg_error(err, pg->conn, res, "store results");
			PQclear(res);
			return r;
		}
		PQclear(res);
	}
	for (size_t i = 0; i < b->n_msgs; i++) {
		struct idem_batch_msg *m = &b->msgs[i];

		if (m->state != IDEM_MSG_BAD)
			continue;
		if (next_result(pg->conn, &res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
			r = idem_pg_error(err, pg->conn, res, "quarantine");
			PQclear(res);
			return r;
		}
		m->quarantined_before = strcmp(PQgetvalue(res, 0, 0), "f") == 0;
		if (m->quarantined_before)
			m->dup = IDEM_DUP_REDELIVERY;
		PQclear(res);
	}
	return IDEM_OK;
}

/* Read what send_replies() sent for @ctx. */
static idem_status read_replies(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	PGresult *res;
	idem_status r = IDEM_OK;

	if (!ctx->replies_sent)
		return IDEM_OK;
	if (next_result(pg->conn, &res) != PGRES_COMMAND_OK)
		r = idem_pg_error(err, pg->conn, res, "replies");
	PQclear(res);
	return r;
}

/*
 * Round trip 3 for the batches of ctx[0..n): results and quarantine, then each batch's counters
 * (finish_stats()), one progress statement for all their partitions, COMMIT and sync; the
 * pipeline is left on success. A transaction that quarantines reads the quarantine inserts'
 * answers before it counts (one round trip more, only then): a message whose position was in
 * idem.quarantine already is a redelivery, not a new quarantine.
 */
static idem_status close_batch(idem_flush *pg, struct flush_ctx *ctx, size_t n, idem_error *err)
{
	struct idem_bind_progress *pr = ctx == &pg->one ? pg->one_p : pg->many_p;
	int n_sent = 0, n_quar = 0, n_one = 0, q_one = 0;
	const char *v[16];
	PGresult *res;
	idem_status r;

	for (size_t k = 0; k < n; k++) {
		if ((r = send_closing(pg, &ctx[k], &n_one, &q_one, err)) != IDEM_OK)
			goto out_abort;
		n_sent += n_one;
		n_quar += q_one;
	}
	for (size_t k = 0; k < n; k++) {
		if ((r = send_replies(pg, &ctx[k], &n_one, err)) != IDEM_OK)
			goto out_abort;
		n_sent += n_one;
	}
	if (n_quar > 0) {
		if (!PQsendFlushRequest(pg->conn) || PQflush(pg->conn) != 0) {
			r = idem_pg_error(err, pg->conn, NULL, "batch send");
			goto out_abort;
		}
		for (size_t k = 0; k < n; k++) {
			if ((r = read_closing(pg, &ctx[k], err)) != IDEM_OK)
				goto out_abort;
		}
		for (size_t k = 0; k < n; k++) {
			if ((r = read_replies(pg, &ctx[k], err)) != IDEM_OK)
				goto out_abort;
		}
		n_sent = 0;
	}
	for (size_t k = 0; k < n; k++) {
		finish_stats(&ctx[k]);
		pr[k] = progress_row(&ctx[k]);
	}
	if (idem_bind_progress(&pg->bind, pr, n, v) != IDEM_OK) {
		r = idem_error_nomem(err);
		goto out_abort;
	}
	if (!idem_sql_send(pg->conn, IDEM_SQL_PROGRESS, v, NULL, NULL) ||
	    !PQsendQueryParams(pg->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0)) {
		r = idem_pg_error(err, pg->conn, NULL, "send commit");
		goto out_abort;
	}
	n_sent += 2;
	if (!PQpipelineSync(pg->conn)) {
		r = idem_pg_error(err, pg->conn, NULL, "sync");
		goto out_abort;
	}
	for (int k = 0; k < n_sent; k++) {
		ExecStatusType s = next_result(pg->conn, &res);

		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
			r = idem_pg_error(err, pg->conn, res, "batch commit");
			PQclear(res);
			pipeline_abort(pg, true);
			return r;
		}
		PQclear(res);
	}
	if (next_result(pg->conn, &res) != PGRES_PIPELINE_SYNC) {
		r = idem_pg_error(err, pg->conn, res, "batch sync");
		PQclear(res);
		return r;
	}
	PQclear(res);
	PQexitPipelineMode(pg->conn);
	return IDEM_OK;

out_abort:
	pipeline_abort(pg, false);
	return r;
}

static void handler_name(const idem_flush *pg, const struct idem_batch *b, char *buf, size_t len)
{
	snprintf(buf, len, "idem_h%zu", (size_t)(b->route - pg->cfg->routes));
}

static idem_status store_result(struct idem_batch *b, size_t i, const PGresult *res)
{
	if (PQntuples(res) > 0 && PQnfields(res) > 0)
		return idem_batch_set_result(b, i, PQgetvalue(res, 0, 0),
		                             (size_t)PQgetlength(res, 0, 0),
		                             PQgetisnull(res, 0, 0));
	return IDEM_OK;
}

/*
 * Outcome of the fast path, or of one of its round trips: done, or redo on the slow path, or an
 * error to return.
 */
enum fast_outcome { FAST_DONE, FAST_SLOW, FAST_ERROR };

/* The fast path failed: report @res (NULL: the connection), clear it, abort the pipeline. */
static enum fast_outcome fast_fail(idem_flush *pg, PGresult *res, const char *what, idem_error *err)
{
	idem_pg_error(err, pg->conn, res, what);
	PQclear(res);
	pipeline_abort(pg, false);
	return FAST_ERROR;
}

static enum fast_outcome fast_nomem(idem_flush *pg, PGresult *res, idem_error *err)
{
	PQclear(res);
	idem_error_nomem(err);
	pipeline_abort(pg, false);
	return FAST_ERROR;
}

/* A failure to build (IDEM_ERR_NOMEM) or to send (else) statements of the fast path. */
static enum fast_outcome fast_send_fail(idem_flush *pg, idem_status r, idem_error *err)
{
	if (r == IDEM_ERR_NOMEM)
		return fast_nomem(pg, NULL, err);
	return fast_fail(pg, NULL, "batch send", err);
}

/*
 * Round trip 1, sent: BEGIN, each batch's partition progress, and one claim of all their keys
 * (*ret_claim: whether there were keys to claim). A single batch is claimed as it always was;
 * several with the combined claim.
 */
static idem_status send_begin(idem_flush *pg, const struct flush_ctx *ctx, size_t n,
                              bool *ret_claim)
{
	const char *v[6];
	size_t n_keys = 0;

	if (!PQsendQueryParams(pg->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0))
		return IDEM_ERR_PG;
	if (idem_bind_progress_get(&pg->bind, batch_list(pg, ctx, n), n, v) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (!idem_sql_send(pg->conn, IDEM_SQL_PROGRESS_GET, v, NULL, NULL))
		return IDEM_ERR_PG;
	for (size_t k = 0; k < n; k++)
		n_keys += ctx[k].b->n_order;
	*ret_claim = n_keys > 0;
	if (n_keys == 0)
		return IDEM_OK;
	if (n == 1) {
		if (idem_bind_claim(&pg->bind, ctx->b, ctx->b->order, ctx->b->n_order, v) !=
		    IDEM_OK)
			return IDEM_ERR_NOMEM;
		return idem_sql_send(pg->conn, IDEM_SQL_CLAIM, v, NULL, NULL) ? IDEM_OK
		                                                              : IDEM_ERR_PG;
	}
	if (idem_bind_claim_many(&pg->bind, batch_list(pg, ctx, n), n, n_keys, v) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	return idem_sql_send(pg->conn, IDEM_SQL_CLAIM_MANY, v, NULL, NULL) ? IDEM_OK : IDEM_ERR_PG;
}

/* The batch of ctx[0..n) with @topic and @partition, or NULL. */
static struct flush_ctx *ctx_find(struct flush_ctx *ctx, size_t n, const char *topic,
                                  int32_t partition)
{
	for (size_t k = 0; k < n; k++) {
		if (ctx[k].b->partition == partition && strcmp(ctx[k].b->topic, topic) == 0)
			return &ctx[k];
	}
	return NULL;
}

/*
 * Mark APPLIED the messages whose keys the claim inserted (the combined claim returns each key's
 * topic and partition too, telling its batch). A key that is no message's would be claimed
 * without its handler running: that fails the flush.
 */
static idem_status mark_claimed(struct flush_ctx *ctx, size_t n, const PGresult *res,
                                idem_error *err)
{
	for (int row = 0; row < PQntuples(res); row++) {
		const char *k = PQgetvalue(res, row, 0);
		struct flush_ctx *owner = ctx;
		ssize_t i = -1;

		if (n > 1)
			owner = ctx_find(ctx, n, PQgetvalue(res, row, 1),
			                 (int32_t)strtol(PQgetvalue(res, row, 2), NULL, 10));
		if (owner != NULL)
			i = idem_batch_find_key(owner->b, k, (size_t)PQgetlength(res, row, 0));
		if (i < 0)
			return idem_error_set(
			        err, IDEM_ERR_PG,
			        "claim returned business key '%s' of no message being flushed", k);
		owner->b->msgs[i].state = IDEM_MSG_APPLIED;
	}
	return IDEM_OK;
}

/*
 * Unclaimed keys belong to someone else already: duplicates. The handler runs for the claimed
 * ones in offset order.
 */
static void split_claimed(struct flush_ctx *ctx)
{
	struct idem_batch *b = ctx->b;

	ctx->n_apply = 0;
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_PENDING)
			b->msgs[i].state = IDEM_MSG_DUPLICATE;
		else if (b->msgs[i].state == IDEM_MSG_APPLIED)
			ctx->applied[ctx->n_apply++] = i;
	}
}

/* Round trip 1: BEGIN, the partitions' progress so far, and the claim. */
static enum fast_outcome begin_rt(idem_flush *pg, struct flush_ctx *ctx, size_t n, idem_error *err)
{
	PGresult *res;
	bool claim;
	idem_status r;

	if ((r = send_begin(pg, ctx, n, &claim)) != IDEM_OK)
		return fast_send_fail(pg, r, err);
	if (!PQsendFlushRequest(pg->conn) || PQflush(pg->conn) != 0)
		return fast_fail(pg, NULL, "batch send", err);
	if (next_result(pg->conn, &res) != PGRES_COMMAND_OK)
		return fast_fail(pg, res, "batch", err);
	PQclear(res);
	if (next_result(pg->conn, &res) != PGRES_TUPLES_OK)
		return fast_fail(pg, res, "batch", err);
	read_progress(ctx, n, res);
	PQclear(res);
	if (check_floor(ctx, n, err) != IDEM_OK) {
		pipeline_abort(pg, false);
		return FAST_ERROR;
	}
	if (claim) {
		if (next_result(pg->conn, &res) != PGRES_TUPLES_OK) {
			/* Another transaction holds one of the keys for longer than lock_timeout:
			 * not any one message's fault, so the batch is retried; after
			 * max_attempts such tries it goes to the slow path (see idem_flush_batch).
			 * Which of several batches has the key is unknown: each is retried on its
			 * own (idem_flush_many), and counts there. */
			if (n == 1 && res != NULL &&
			    idem_pg_timeout(PQresultErrorField(res, PG_DIAG_SQLSTATE)))
				ctx->b->claim_timeouts++;
			return fast_fail(pg, res, "batch", err);
		}
		r = mark_claimed(ctx, n, res, err);
		PQclear(res);
		if (r != IDEM_OK) {
			pipeline_abort(pg, false);
			return FAST_ERROR;
		}
	}
	for (size_t k = 0; k < n; k++)
		split_claimed(&ctx[k]);
	return FAST_DONE;
}

/* Does @b's route run its handler once per transaction (handler.mode: set)? */
static bool set_mode(const struct idem_batch *b)
{
	return b->route->handler_mode == IDEM_CFG_MODE_SET;
}

/* Do ctx[j] and ctx[k] claim keys for the same consumer (key namespace)? */
static bool same_consumer(const struct flush_ctx *ctx, size_t j, size_t k)
{
	return strcmp(ctx[j].b->route->consumer, ctx[k].b->route->consumer) == 0;
}

/*
 * Round trip 2, sent: where the duplicates' keys were claimed, one lookup per consumer for all
 * its batches of the transaction (ctx[k].dups_sent marks the first batch of each consumer that
 * sent one), each batch's duplicates in its ctx.
 */
static idem_status send_dup_lookups(idem_flush *pg, struct flush_ctx *ctx, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		size_t total = 0;
		bool first = true;
		const char *v[2];

		ctx[k].dups_sent = false;
		for (size_t j = 0; j < k && first; j++)
			first = !same_consumer(ctx, j, k);
		if (!first)
			continue;
		if (idem_bind_dup_keys_open(&pg->bind) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		for (size_t j = k; j < n; j++) {
			if (!same_consumer(ctx, j, k))
				continue;
			if (idem_bind_dup_keys_add(&pg->bind, ctx[j].b, ctx[j].dups,
			                           &ctx[j].n_dups) != IDEM_OK)
				return IDEM_ERR_NOMEM;
			total += ctx[j].n_dups;
		}
		if (idem_bind_dup_keys_close(&pg->bind) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		if (total == 0)
			continue;
		v[0] = ctx[k].b->route->consumer;
		v[1] = pg->bind.dkeys.data;
		if (!idem_sql_send(pg->conn, IDEM_SQL_CLAIMS_GET, v, NULL, NULL))
			return IDEM_ERR_PG;
		ctx[k].dups_sent = true;
	}
	return IDEM_OK;
}

/*
 * Name the message a handler applies for idem.emit() (IDEM_SQL_CONTEXT), where the outbox is
 * enabled: the consumer and, in row mode, message @i's business key; a set statement applies
 * many messages, and its handler names each event's message itself (idem.emit_for()).
 */
static const char **context_vals(idem_flush *pg, const struct idem_batch *b, size_t i)
{
	if (!pg->emit_context)
		return NULL;
	pg->ctx_vals[0] = b->route->consumer;
	pg->ctx_vals[1] = set_mode(b) ? "" : idem_batch_ptr(b, b->msgs[i].bkey);
	return pg->ctx_vals;
}

/* Round trip 2, sent for one batch in row mode: its handler once per message to apply. */
static idem_status send_handlers(idem_flush *pg, struct flush_ctx *ctx)
{
	const struct idem_batch *b = ctx->b;
	const char **cv;
	char hname[32];

	if (set_mode(b))
		return IDEM_OK;
	handler_name(pg, b, hname, sizeof(hname));
	for (size_t k = 0; k < ctx->n_apply; k++) {
		cv = context_vals(pg, b, ctx->applied[k]);
		if (cv != NULL && !idem_sql_send(pg->conn, IDEM_SQL_CONTEXT, cv, NULL, NULL))
			return IDEM_ERR_PG;
		if (idem_bind_row(&pg->bind, b, ctx->applied[k]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		if (!PQsendQueryPrepared(pg->conn, hname, (int)b->route->n_params, pg->bind.vals,
		                         NULL, NULL, 0))
			return IDEM_ERR_PG;
	}
	return IDEM_OK;
}

/*
 * Set mode: bind the messages to apply of the batches of ctx[first..n) that share ctx[first]'s
 * route, batch after batch, each in offset order: one text[] per handler parameter.
 * @ret_n counts the messages.
 */
static idem_status bind_set(idem_flush *pg, const struct flush_ctx *ctx, size_t n, size_t first,
                            size_t *ret_n)
{
	const struct idem_route *rt = ctx[first].b->route;
	size_t count = 0;
	idem_status r;

	if ((r = idem_bind_set_open(&pg->bind, rt->n_params)) != IDEM_OK)
		return r;
	for (size_t k = first; k < n; k++) {
		if (ctx[k].b->route != rt)
			continue;
		for (size_t j = 0; j < ctx[k].n_apply; j++) {
			if ((r = idem_bind_set_add(&pg->bind, ctx[k].b, ctx[k].applied[j])) !=
			    IDEM_OK)
				return r;
		}
		count += ctx[k].n_apply;
	}
	*ret_n = count;
	return idem_bind_set_close(&pg->bind, rt->n_params);
}

/*
 * Set mode, sent: one statement per route over all the messages to apply of the transaction's
 * batches of that route; ctx[k].set_sent marks the first batch of each route that sent one.
 *
 * The statement is sent with its text rather than as the prepared one: planned for these very
 * arrays once per transaction, it never keeps a generic plan made while the tables were still
 * small (the PREPARE at start-up has checked it already).
 */
static idem_status send_sets(idem_flush *pg, struct flush_ctx *ctx, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const struct idem_route *rt = ctx[k].b->route;
		size_t count;
		bool first = true;
		idem_status r;

		ctx[k].set_sent = false;
		if (!set_mode(ctx[k].b))
			continue;
		for (size_t j = 0; j < k && first; j++)
			first = ctx[j].b->route != rt;
		if (!first)
			continue;
		if ((r = bind_set(pg, ctx, n, k, &count)) != IDEM_OK)
			return r;
		if (count == 0)
			continue;
		if (pg->emit_context && !idem_sql_send(pg->conn, IDEM_SQL_CONTEXT,
		                                       context_vals(pg, ctx[k].b, 0), NULL, NULL))
			return IDEM_ERR_PG;
		if (!PQsendQueryParams(pg->conn, rt->handler_sql, (int)rt->n_params, NULL,
		                       pg->bind.vals, NULL, NULL, 0))
			return IDEM_ERR_PG;
		ctx[k].set_sent = true;
	}
	return IDEM_OK;
}

/*
 * Set mode: a statement that returns rows of two columns (business key, result) gives results
 * to store with the claims of the messages of ctx[first..n) of its route; other rows, and keys
 * of no message it applied, are ignored.
 */
static idem_status store_set_results(struct flush_ctx *ctx, size_t n, size_t first,
                                     const PGresult *res)
{
	const struct idem_route *rt = ctx[first].b->route;

	if (PQnfields(res) != 2)
		return IDEM_OK;
	for (int row = 0; row < PQntuples(res); row++) {
		const char *k = PQgetvalue(res, row, 0);
		size_t klen = (size_t)PQgetlength(res, row, 0);

		if (PQgetisnull(res, row, 0))
			continue;
		for (size_t j = first; j < n; j++) {
			struct idem_batch *b = ctx[j].b;
			ssize_t i = b->route == rt ? idem_batch_find_key(b, k, klen) : -1;

			if (i < 0 || b->msgs[i].state != IDEM_MSG_APPLIED)
				continue;
			if (idem_batch_set_result(b, (size_t)i, PQgetvalue(res, row, 1),
			                          (size_t)PQgetlength(res, row, 1),
			                          PQgetisnull(res, row, 1)) != IDEM_OK)
				return IDEM_ERR_NOMEM;
			break;
		}
	}
	return IDEM_OK;
}

/* A handler's failure: for the slow path if it is one message's fault (or a timeout). */
static enum fast_outcome handler_failed(idem_flush *pg, PGresult *res, idem_error *err)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (res != NULL && (idem_pg_classify(state) == IDEM_PG_MESSAGE || idem_pg_timeout(state))) {
		PQclear(res);
		pipeline_abort(pg, false);
		return FAST_SLOW;
	}
	return fast_fail(pg, res, "batch", err);
}

/* Round trip 2, read: the duplicates' claims, in the order send_dup_lookups() sent them. */
static enum fast_outcome read_dup_lookups(idem_flush *pg, struct flush_ctx *ctx, size_t n,
                                          idem_error *err)
{
	PGresult *res;

	for (size_t k = 0; k < n; k++) {
		if (!ctx[k].dups_sent)
			continue;
		if (next_result(pg->conn, &res) != PGRES_TUPLES_OK)
			return fast_fail(pg, res, "batch", err);
		for (size_t j = k; j < n; j++) {
			if (same_consumer(ctx, j, k) && read_claims(&ctx[j], res) != IDEM_OK)
				return fast_nomem(pg, res, err);
		}
		PQclear(res);
	}
	return FAST_DONE;
}

/* Round trip 2, read for one batch in row mode: its handlers' results. */
static enum fast_outcome read_handlers(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	PGresult *res;

	if (set_mode(ctx->b))
		return FAST_DONE;
	for (size_t k = 0; k < ctx->n_apply; k++) {
		ExecStatusType s;

		if (pg->emit_context) {
			if (next_result(pg->conn, &res) != PGRES_TUPLES_OK)
				return fast_fail(pg, res, "batch", err);
			PQclear(res);
		}
		s = next_result(pg->conn, &res);

		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK)
			return handler_failed(pg, res, err);
		if (store_result(ctx->b, ctx->applied[k], res) != IDEM_OK)
			return fast_nomem(pg, res, err);
		PQclear(res);
	}
	return FAST_DONE;
}

/* Set mode, read: the set statements' outcomes, in the order send_sets() sent them. */
static enum fast_outcome read_sets(idem_flush *pg, struct flush_ctx *ctx, size_t n, idem_error *err)
{
	PGresult *res;

	for (size_t k = 0; k < n; k++) {
		ExecStatusType s;

		if (!ctx[k].set_sent)
			continue;
		if (pg->emit_context) {
			if (next_result(pg->conn, &res) != PGRES_TUPLES_OK)
				return fast_fail(pg, res, "batch", err);
			PQclear(res);
		}
		s = next_result(pg->conn, &res);
		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK)
			return handler_failed(pg, res, err);
		if (store_set_results(ctx, n, k, res) != IDEM_OK)
			return fast_nomem(pg, res, err);
		PQclear(res);
	}
	return FAST_DONE;
}

/*
 * Round trip 2: where the duplicates' keys were claimed (only if there are any: one lookup per
 * consumer), and the handlers: in row mode once per message, batch after batch; in set mode
 * once per route.
 */
static enum fast_outcome handler_rt(idem_flush *pg, struct flush_ctx *ctx, size_t n,
                                    idem_error *err)
{
	enum fast_outcome o;
	bool any = false;
	idem_status r;

	if ((r = send_dup_lookups(pg, ctx, n)) != IDEM_OK)
		return fast_send_fail(pg, r, err);
	for (size_t k = 0; k < n; k++) {
		if ((r = send_handlers(pg, &ctx[k])) != IDEM_OK)
			return fast_send_fail(pg, r, err);
		any = any || ctx[k].n_apply > 0 || ctx[k].dups_sent;
	}
	if ((r = send_sets(pg, ctx, n)) != IDEM_OK) {
		/* A NUL byte cannot be bound: the slow path finds the message. */
		if (r == IDEM_ERR_INVALID) {
			pipeline_abort(pg, false);
			return FAST_SLOW;
		}
		return fast_send_fail(pg, r, err);
	}
	if (any && (!PQsendFlushRequest(pg->conn) || PQflush(pg->conn) != 0))
		return fast_fail(pg, NULL, "batch send", err);
	if ((o = read_dup_lookups(pg, ctx, n, err)) != FAST_DONE)
		return o;
	for (size_t k = 0; k < n; k++) {
		if ((o = read_handlers(pg, &ctx[k], err)) != FAST_DONE)
			return o;
	}
	return read_sets(pg, ctx, n, err);
}

/*
 * The batches of ctx[0..n) in one transaction, three round trips whatever their number and size.
 * On FAST_DONE it committed and every ctx[k].st is filled; otherwise it was rolled back (or the
 * connection broke).
 */
static enum fast_outcome fast_path(idem_flush *pg, struct flush_ctx *ctx, size_t n, idem_error *err)
{
	enum fast_outcome o;

	for (size_t k = 0; k < n; k++) {
		if (need_idx(&ctx[k], ctx[k].b->n_msgs) != IDEM_OK) {
			idem_error_nomem(err);
			return FAST_ERROR;
		}
	}
	if (!PQenterPipelineMode(pg->conn)) {
		idem_pg_error(err, pg->conn, NULL, "enter pipeline mode");
		return FAST_ERROR;
	}
	if ((o = begin_rt(pg, ctx, n, err)) != FAST_DONE ||
	    (o = handler_rt(pg, ctx, n, err)) != FAST_DONE)
		return o;
	for (size_t k = 0; k < n; k++) {
		if (idem_batch_classify(ctx[k].b, ctx[k].progress_next, ctx[k].replay_to) !=
		    IDEM_OK)
			return fast_nomem(pg, NULL, err);
	}

	/* Round trip 3: results, quarantine, progress, COMMIT. */
	if (close_batch(pg, ctx, n, err) != IDEM_OK)
		return FAST_ERROR;
	return FAST_DONE;
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
	const char **cv = context_vals(pg, b, i);
	idem_status r;

	*ret_res = NULL;
	if (cv != NULL && exec_stmt(pg, IDEM_SQL_CONTEXT, cv, NULL, NULL, ret_res) != IDEM_OK)
		return IDEM_ERR_PG;
	PQclear(*ret_res);
	*ret_res = NULL;
	if (!set_mode(b)) {
		if (idem_bind_row(&pg->bind, b, i) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		return exec_params(pg, hname, (int)rt->n_params, pg->bind.vals, NULL, NULL,
		                   ret_res);
	}
	if ((r = idem_bind_set_open(&pg->bind, rt->n_params)) != IDEM_OK ||
	    (r = idem_bind_set_add(&pg->bind, b, i)) != IDEM_OK ||
	    (r = idem_bind_set_close(&pg->bind, rt->n_params)) != IDEM_OK)
		return r;
	*ret_res = PQexecParams(pg->conn, rt->handler_sql, (int)rt->n_params, NULL, pg->bind.vals,
	                        NULL, NULL, 0);
	switch (PQresultStatus(*ret_res)) {
	case PGRES_TUPLES_OK:
	case PGRES_COMMAND_OK:
		return IDEM_OK;
	default:
		return IDEM_ERR_PG;
	}
}

/* Message @i's result from its handler's @res: row mode's first column, set mode's row. */
static idem_status store_one_result(struct idem_batch *b, size_t i, const PGresult *res)
{
	const struct idem_batch_msg *m = &b->msgs[i];

	if (!set_mode(b))
		return store_result(b, i, res);
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
	const char *cv[6], *state;
	char why[768] = "";
	PGresult *res;
	idem_status r;

	for (int attempt = 1; attempt <= max; attempt++) {
		m->attempts = attempt;
		if ((r = idem_pg_exec(pg->conn, "SAVEPOINT idem_msg", "savepoint", err)) != IDEM_OK)
			return r;
		if (idem_bind_claim(&pg->bind, b, &i, 1, cv) != IDEM_OK)
			return idem_error_nomem(err);
		if (exec_stmt(pg, IDEM_SQL_CLAIM, cv, NULL, NULL, &res) != IDEM_OK) {
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

	if (need_idx(ctx, ctx->b->n_msgs) != IDEM_OK ||
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
	r = read_claims(ctx, res);
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

static idem_status slow_path(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	struct idem_batch *b = ctx->b;
	char hname[32];
	const char *gv[3];
	PGresult *res;
	idem_status r;

	handler_name(pg, b, hname, sizeof(hname));
	/* Every decodable message gets its own attempt, in offset order: an in-batch duplicate
	 * whose first copy fails must still be able to claim the key. */
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (!b->msgs[i].undecodable)
			b->msgs[i].state = IDEM_MSG_PENDING;
	}
	b->n_order = 0;
	if ((r = idem_pg_exec(pg->conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	if (idem_bind_progress_get(&pg->bind, batch_list(pg, ctx, 1), 1, gv) != IDEM_OK) {
		r = idem_error_nomem(err);
		goto out_rollback;
	}
	if (exec_stmt(pg, IDEM_SQL_PROGRESS_GET, gv, NULL, NULL, &res) != IDEM_OK) {
		r = idem_pg_error(err, pg->conn, res, "progress");
		PQclear(res);
		goto out_rollback;
	}
	read_progress(ctx, 1, res);
	PQclear(res);
	if ((r = check_floor(ctx, 1, err)) != IDEM_OK)
		goto out_rollback;
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state != IDEM_MSG_PENDING)
			continue;
		if ((r = slow_one(pg, b, i, hname, err)) != IDEM_OK)
			goto out_rollback;
		if (b->msgs[i].state == IDEM_MSG_BAD &&
		    b->route->on_poison == IDEM_CFG_POISON_HALT) {
			halt_at(ctx, i);
			break;
		}
	}
	if ((r = slow_classify(pg, ctx, err)) != IDEM_OK)
		goto out_rollback;
	if (!PQenterPipelineMode(pg->conn)) {
		r = idem_pg_error(err, pg->conn, NULL, "enter pipeline mode");
		goto out_rollback;
	}
	if ((r = close_batch(pg, ctx, 1, err)) != IDEM_OK)
		return r;
	ctx->st.slow_path = true;
	return IDEM_OK;

out_rollback:
	if (PQstatus(pg->conn) == CONNECTION_OK) {
		res = PQexec(pg->conn, "ROLLBACK");
		PQclear(res);
	}
	return r;
}

/* Start a flush from the decoded state: undo what an earlier attempt marked. */
static void reset_states(struct flush_ctx *ctx)
{
	struct idem_batch *b = ctx->b;

	ctx->halt.on = false;
	ctx->behind = false;
	ctx->progress_next = -1;
	ctx->replay_to = -1;
	ctx->reapply_to = -1;
	for (size_t i = 0; i < b->n_msgs; i++) {
		struct idem_batch_msg *m = &b->msgs[i];

		m->state = m->undecodable ? IDEM_MSG_BAD : IDEM_MSG_PENDING;
		if (!m->undecodable) {
			m->sqlstate[0] = '\0';
			m->attempts = 0;
		}
		m->result.null = true;
		m->dup = IDEM_DUP_NONE;
		m->mismatch = false;
		m->quarantined_before = false;
		m->claim.found = false;
	}
}

/* The first message of @b that cannot be decoded, or b->n_msgs. */
static size_t first_undecodable(const struct idem_batch *b)
{
	size_t i = 0;

	while (i < b->n_msgs && !b->msgs[i].undecodable)
		i++;
	return i;
}

/* Committed: the bad messages are in the quarantine now, and the counters are the caller's. */
static void flush_done(struct flush_ctx *ctx, struct idem_flush_stats *ret_stats)
{
	struct idem_batch *b = ctx->b;

	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_BAD)
			b->msgs[i].state = IDEM_MSG_QUARANTINED;
	}
	*ret_stats = ctx->st;
}

/*
 * A connection left mid-pipeline or mid-transaction by a failure is not worth saving: drop it,
 * and the next attempt starts on a fresh one.
 */
static void drop_unclean(idem_flush *pg)
{
	if (pg->conn != NULL &&
	    (PQstatus(pg->conn) != CONNECTION_OK || PQpipelineStatus(pg->conn) != PQ_PIPELINE_OFF ||
	     PQtransactionStatus(pg->conn) != PQTRANS_IDLE)) {
		PQfinish(pg->conn);
		pg->conn = NULL;
	}
}

idem_status idem_flush_batch(idem_flush *pg, struct idem_batch *b,
                             struct idem_flush_stats *ret_stats, idem_error *err)
{
	struct flush_ctx *ctx = &pg->one;
	size_t bad;
	idem_status r;

	if (b->n_msgs == 0) {
		memset(ret_stats, 0, sizeof(*ret_stats));
		return IDEM_OK;
	}
	if (!idem_flush_connected(pg) && (r = idem_flush_reconnect(pg, err)) != IDEM_OK)
		return r;
	ctx->b = b;
	reset_states(ctx);
	/* With on_poison: halt, nothing at or after a message that cannot even be decoded is
	 * processed: the partition stops there. */
	if (b->route->on_poison == IDEM_CFG_POISON_HALT && (bad = first_undecodable(b)) < b->n_msgs)
		halt_at(ctx, bad);
	if ((r = idem_batch_collapse(b)) != IDEM_OK)
		return idem_error_nomem(err);
	/* Claims that ran into lock_timeout max_attempts times: find the locked keys one by one. */
	if (b->claim_timeouts < pg->cfg->max_attempts) {
		switch (fast_path(pg, ctx, 1, err)) {
		case FAST_DONE:
			goto out_done;
		case FAST_ERROR:
			r = ctx->behind ? IDEM_ERR_BEHIND : err ? err->code : IDEM_ERR_PG;
			goto out_reset;
		case FAST_SLOW:
			break;
		}
	}
	if (!idem_flush_connected(pg)) {
		r = idem_pg_error(err, pg->conn, NULL, "connection lost");
		goto out_reset;
	}
	if ((r = slow_path(pg, ctx, err)) != IDEM_OK)
		goto out_reset;
out_done:
	flush_done(ctx, ret_stats);
	return IDEM_OK;

out_reset:
	drop_unclean(pg);
	return r;
}

/*
 * Can @b join the batches of ctx[0..n) in one transaction? Not if it is empty, needs the slow
 * path (its claims timed out max_attempts times) or stops at a message that cannot be decoded
 * (on_poison: halt): idem_flush_batch() deals with those. Nor if one of ctx[0..n) has its
 * partition, as the combined claim tells batches apart by topic and partition.
 */
static bool combinable(const idem_flush *pg, struct flush_ctx *ctx, size_t n,
                       const struct idem_batch *b)
{
	if (b->n_msgs == 0 || b->claim_timeouts >= pg->cfg->max_attempts ||
	    ctx_find(ctx, n, b->topic, b->partition) != NULL)
		return false;
	return b->route->on_poison != IDEM_CFG_POISON_HALT || first_undecodable(b) == b->n_msgs;
}

/* Put the batches of b[0..n) that can be combined into pg->many, decoded state; how many. */
static size_t pick_many(idem_flush *pg, struct idem_batch *const *b, size_t n)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		struct flush_ctx *ctx = &pg->many[m];

		if (!combinable(pg, pg->many, m, b[i]))
			continue;
		ctx->b = b[i];
		ctx->pos = i;
		reset_states(ctx);
		/* Out of memory: its own flush will say so. */
		if (idem_batch_collapse(b[i]) == IDEM_OK)
			m++;
	}
	return m;
}

/*
 * The batches of pg->many[0..m) in one transaction. false: nothing was committed (rolled back, or
 * the connection is gone), the batches are to be flushed one by one.
 */
static bool flush_combined(idem_flush *pg, size_t m)
{
	idem_error e;

	switch (fast_path(pg, pg->many, m, &e)) {
	case FAST_DONE:
		return true;
	case FAST_SLOW:
		idem_log_debug(
		        "pg",
		        "handler failed in the transaction of %zu batches, flushing them one by one",
		        m);
		break;
	case FAST_ERROR:
		idem_log_debug("pg",
		               "transaction of %zu batches failed, flushing them one by one: %s", m,
		               e.msg);
		break;
	}
	drop_unclean(pg);
	return false;
}

void idem_flush_many(idem_flush *pg, struct idem_batch *const *b, size_t n,
                     struct idem_flush_stats *ret_stats, idem_status *ret_r, idem_error *errs)
{
	size_t m = 0, k = 0;

	/* A connection that must be reopened first is idem_flush_batch()'s to report, per batch. */
	if (n > 1 && idem_flush_connected(pg) && need_many(pg, n) == IDEM_OK) {
		m = pick_many(pg, b, n);
		if (m < 2 || !flush_combined(pg, m))
			m = 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (k < m && pg->many[k].pos == i) {
			flush_done(&pg->many[k++], &ret_stats[i]);
			ret_r[i] = IDEM_OK;
			continue;
		}
		/* idem_flush_batch() starts again from the decoded state. */
		ret_r[i] = idem_flush_batch(pg, b[i], &ret_stats[i], errs ? &errs[i] : NULL);
	}
}

idem_status idem_flush_apply_one(idem_flush *pg, struct idem_batch *b, size_t i, idem_error *err)
{
	struct idem_batch_msg *m = &b->msgs[i];
	char hname[32];
	bool any;
	idem_status r;

	handler_name(pg, b, hname, sizeof(hname));
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
			const char *yv[8];
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
