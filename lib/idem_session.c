/*
 * idem_session.c - a worker's Postgres session, and the scratch every flush reuses.
 *
 * The session (struct idem_flush, idem_flush_int.h): one connection per worker, set up with the
 * timeouts and every statement prepared, the handlers included (so that a broken handler fails
 * at start-up or on reconnect, not on the first message); checking, dropping and reopening it;
 * the pipeline plumbing on it (reading one pipelined result, aborting a pipeline).
 * The scratch (struct flush_ctx, one per batch of a flush): its index lists, sized once and
 * reused, and the batch's state between the round trips: reset before a flush, the partition's
 * recorded progress read into it and checked against what this process saw, stopped by a halt,
 * counted into the progress row that round trip 3 writes, handed over on commit.
 * The transaction that uses them is in idem_flush.c (ARCHITECTURE.md "The transaction").
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_flush.h"
#include "idem_flush_int.h"
#include "idem_migrate.h"
#include "idem_pg.h"
#include "idem_sql.h"

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

/*
 * Every configured topic's and route consumer's number in idem.claim_topics and
 * idem.claim_consumers, committed before any batch claims: a batch that numbered a new name
 * would hold that row until its commit, and every other batch naming it would wait there.
 */
static idem_status number_names(idem_flush *pg, idem_error *err)
{
	struct idem_buf topics = { 0 }, consumers = { 0 };
	const char *vals[2];
	idem_status r;

	if ((r = idem_pgarray_open(&topics)) != IDEM_OK ||
	    (r = idem_pgarray_open(&consumers)) != IDEM_OK)
		goto out_nomem;
	for (size_t i = 0; i < pg->cfg->n_topics; i++) {
		r = idem_pgarray_add(&topics, pg->cfg->topics[i], strlen(pg->cfg->topics[i]),
		                     false);
		if (r != IDEM_OK)
			goto out_nomem;
	}
	for (size_t i = 0; i < pg->cfg->n_routes; i++) {
		const char *c = pg->cfg->routes[i].consumer;

		if ((r = idem_pgarray_add(&consumers, c, strlen(c), false)) != IDEM_OK)
			goto out_nomem;
	}
	if ((r = idem_pgarray_close(&topics)) != IDEM_OK ||
	    (r = idem_pgarray_close(&consumers)) != IDEM_OK)
		goto out_nomem;
	vals[0] = topics.data;
	vals[1] = consumers.data;
	r = idem_sql_exec(pg->conn, IDEM_SQL_NAMES_NUMBER, vals, "number the topics and consumers",
	                  NULL, err);
	idem_buf_done(&topics);
	idem_buf_done(&consumers);
	return r;
out_nomem:
	idem_buf_done(&topics);
	idem_buf_done(&consumers);
	return idem_error_nomem(err);
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
	/* Read once: a reconnect uses the same conninfo and role, so the same search path.
	 * Before pg_temp exists (the trace context's table): it is idemd's, not the handler's. */
	if (pg->search_path.schemas[0] == '\0' &&
	    (r = idem_pg_search_path(pg->conn, &pg->search_path, err)) != IDEM_OK)
		return r;
	if ((r = idem_sql_prepare_batch(pg->conn, err)) != IDEM_OK)
		return r;
	if ((r = number_names(pg, err)) != IDEM_OK)
		return r;
	/* Where events are named after their message, they carry its trace context too. */
	if (pg->emit_context &&
	    ((r = idem_sql_exec(pg->conn, IDEM_SQL_TRACE_TABLE, NULL, "create pg_temp.idem_trace",
	                        NULL, err)) != IDEM_OK ||
	     (r = idem_sql_prepare(pg->conn, IDEM_SQL_TRACES, err)) != IDEM_OK))
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

/* The name setup() prepared @b's route's handler under. */
void idem__flush_handler_name(const idem_flush *pg, const struct idem_batch *b, char *buf,
                              size_t len)
{
	snprintf(buf, len, "idem_h%zu", (size_t)(b->route - pg->cfg->routes));
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

const struct idem_pg_search_path *idem_flush_search_path(const idem_flush *pg)
{
	return &pg->search_path;
}

uint64_t idem_flush_connects(const idem_flush *pg)
{
	return __atomic_load_n(&pg->connects, __ATOMIC_RELAXED);
}

PGconn *idem_flush_conn(idem_flush *pg)
{
	return pg->conn;
}

/*
 * A connection left mid-pipeline or mid-transaction by a failure is not worth saving: drop it,
 * and the next attempt starts on a fresh one.
 */
void idem__flush_drop_unclean(idem_flush *pg)
{
	if (pg->conn != NULL &&
	    (PQstatus(pg->conn) != CONNECTION_OK || PQpipelineStatus(pg->conn) != PQ_PIPELINE_OFF ||
	     PQtransactionStatus(pg->conn) != PQTRANS_IDLE)) {
		PQfinish(pg->conn);
		pg->conn = NULL;
	}
}

/*
 * Read the result of the next pipelined statement, and the NULL that ends it (a sync has none).
 * Returns its status; the result goes to *ret_res, which the caller clears (NULL, with
 * PGRES_FATAL_ERROR, if there was none).
 */
ExecStatusType idem__flush_next_result(PGconn *conn, PGresult **ret_res)
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

/*
 * After a failure in pipeline mode: drain to the sync, leave pipeline mode, roll back. Two NULLs
 * in a row from PQgetResult() mean libpq awaits nothing more (one NULL ends each statement's
 * results): no sync is coming, and waiting for one would spin for ever. The connection is then
 * left in pipeline mode, and so dropped (idem__flush_drop_unclean()).
 */
void idem__flush_pipeline_abort(idem_flush *pg, bool sync_sent)
{
	PGresult *res;
	bool after_null = false;

	if (PQstatus(pg->conn) != CONNECTION_OK)
		return;
	if (!sync_sent && !PQpipelineSync(pg->conn))
		return;
	for (;;) {
		res = PQgetResult(pg->conn);
		if (res == NULL) {
			if (PQstatus(pg->conn) != CONNECTION_OK || after_null)
				return;
			after_null = true;
			continue;
		}
		after_null = false;
		if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
			PQclear(res);
			break;
		}
		PQclear(res);
	}
	PQexitPipelineMode(pg->conn);
	idem_pg_rollback(pg->conn);
}

/* Room for @n messages in @ctx's index lists. */
idem_status idem__flush_need_idx(struct flush_ctx *ctx, size_t n)
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
idem_status idem__flush_need_many(idem_flush *pg, size_t n)
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
const struct idem_batch *const *idem__flush_batch_list(idem_flush *pg, const struct flush_ctx *ctx,
                                                       size_t n)
{
	const struct idem_batch **l = ctx == &pg->one ? pg->one_b : pg->many_b;

	for (size_t k = 0; k < n; k++)
		l[k] = ctx[k].b;
	return l;
}

/* The batch of ctx[0..n) with @topic and @partition, or NULL. */
struct flush_ctx *idem__flush_ctx_find(struct flush_ctx *ctx, size_t n, const char *topic,
                                       int32_t partition)
{
	for (size_t k = 0; k < n; k++) {
		if (ctx[k].b->partition == partition && strcmp(ctx[k].b->topic, topic) == 0)
			return &ctx[k];
	}
	return NULL;
}

/* Start a flush from the decoded state: undo what an earlier attempt marked. */
void idem__flush_reset(struct flush_ctx *ctx)
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

/* Stop the batch at message @i (on_poison: halt): it and what follows stay unprocessed. */
void idem__flush_halt_at(struct flush_ctx *ctx, size_t i)
{
	struct idem_batch *b = ctx->b;
	const struct idem_batch_msg *m = &b->msgs[i];

	ctx->halt.on = true;
	ctx->halt.offset = m->offset;
	snprintf(ctx->halt.reason, sizeof(ctx->halt.reason), "%s",
	         m->reason.null ? "unknown" : idem_batch_ptr(b, m->reason));
	idem_batch_truncate(b, i);
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
void idem__flush_finish_stats(struct flush_ctx *ctx)
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

/* What the batch of @ctx adds to its partition's progress row. */
struct idem_bind_progress idem__flush_progress_row(const struct flush_ctx *ctx)
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

/* Committed: the bad messages are in the quarantine now, and the counters are the caller's. */
void idem__flush_done(struct flush_ctx *ctx, struct idem_flush_stats *ret_stats)
{
	struct idem_batch *b = ctx->b;

	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_BAD)
			b->msgs[i].state = IDEM_MSG_QUARANTINED;
	}
	*ret_stats = ctx->st;
}

/*
 * The partitions' recorded progress, pending replay and gap being read again
 * (IDEM_SQL_PROGRESS_GET: one row per batch, in order).
 */
void idem__flush_read_progress(struct flush_ctx *ctx, size_t n, const PGresult *res)
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
idem_status idem__flush_check_floor(struct flush_ctx *ctx, size_t n, idem_error *err)
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
