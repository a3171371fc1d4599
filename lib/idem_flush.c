/*
 * idem_flush.c - the batch transaction: one partition's batch, or several partitions' batches
 * in one transaction (ARCHITECTURE.md "The transaction").
 *
 * The fast path runs in libpq pipeline mode, in three round trips whatever the number of batches
 * and messages (four in a transaction that quarantines a message):
 *   1. BEGIN; each partition's recorded progress (one below the batch's floor ends the
 *      transaction here: ARCHITECTURE.md "When the database goes back"); one claim of all the
 *      keys, INSERT ... ON CONFLICT DO NOTHING RETURNING over unnest()ed arrays, in one global
 *      key order;
 *   2. where the keys claimed before were claimed (only if there are any: one lookup per
 *      consumer), to classify the duplicates; the handlers, once per newly claimed message in
 *      offset order (row mode) or once per route (set mode), with the outbox enabled each
 *      after the statement that names its message for idem.emit();
 *   3. the handlers' results (if they returned any); one quarantine insert per bad message
 *      (with its dead letter, if the route has a dead letter topic); the replies the routes ask
 *      for. A transaction that quarantines reads these answers now, as a message whose position
 *      is in the quarantine already is a redelivery, not a new quarantine (the fourth round
 *      trip). Then each partition's progress and counters, and COMMIT.
 * The functions below follow that order, then come the fast path that strings the round trips
 * together and the entry points, idem_flush_batch() and idem_flush_many().
 *
 * Anything short of a clean commit rolls the transaction back. A handler that fails for a
 * message's reason (or times out) sends a batch to the slow path (idem_flush_slow.c), which
 * ends with round trip 3 too; a combined transaction that does not commit has each of its
 * batches flushed on its own. The session and each batch's scratch state are in idem_session.c,
 * what the three files share in idem_flush_int.h.
 */
#include "idem_flush.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_bind.h"
#include "idem_flush_int.h"
#include "idem_log.h"
#include "idem_pg.h"
#include "idem_sql.h"

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
	idem__flush_pipeline_abort(pg, false);
	return FAST_ERROR;
}

static enum fast_outcome fast_nomem(idem_flush *pg, PGresult *res, idem_error *err)
{
	PQclear(res);
	idem_error_nomem(err);
	idem__flush_pipeline_abort(pg, false);
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
 * (*ret_claim: whether there were keys to claim): IDEM_SQL_CLAIM for a single batch,
 * IDEM_SQL_CLAIM_PARTS for several of one consumer and topic, IDEM_SQL_CLAIM_MANY else.
 */
static idem_status send_begin(idem_flush *pg, const struct flush_ctx *ctx, size_t n,
                              bool *ret_claim)
{
	const char *v[3];
	struct idem_bind_claim c;
	size_t n_keys = 0;
	enum idem_sql_id id = IDEM_SQL_CLAIM;
	bool one;
	idem_status r;

	if (!PQsendQueryParams(pg->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0))
		return IDEM_ERR_PG;
	if (idem_bind_progress_get(&pg->bind, idem__flush_batch_list(pg, ctx, n), n, v) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (!idem_sql_send(pg->conn, IDEM_SQL_PROGRESS_GET, v, NULL, NULL))
		return IDEM_ERR_PG;
	for (size_t k = 0; k < n; k++)
		n_keys += ctx[k].b->n_order;
	*ret_claim = n_keys > 0;
	if (n_keys == 0)
		return IDEM_OK;
	if (n == 1) {
		r = idem_bind_claim(&pg->bind, ctx->b, ctx->b->order, ctx->b->n_order, &c);
	} else {
		r = idem_bind_claim_many(&pg->bind, idem__flush_batch_list(pg, ctx, n), n, n_keys,
		                         &c, &one);
		id = one ? IDEM_SQL_CLAIM_PARTS : IDEM_SQL_CLAIM_MANY;
	}
	if (r != IDEM_OK)
		return r;
	return idem_sql_send(pg->conn, id, c.vals, c.lens, c.fmts) ? IDEM_OK : IDEM_ERR_PG;
}

/*
 * Mark APPLIED the messages whose keys the claim inserted: each row is the offset of one
 * (IDEM_SQL_CLAIM), with its partition first when several batches were claimed at once, and
 * its topic after when their topics differ (IDEM_SQL_CLAIM_MANY). An offset that is no
 * message's being claimed would have its claim committed without its handler running: that
 * fails the flush.
 */
idem_status idem__flush_mark_claimed(struct flush_ctx *ctx, size_t n, const PGresult *res,
                                     idem_error *err)
{
	int f_off = n > 1 ? 1 : 0;
	bool topics = n > 1 && PQnfields(res) > 2;

	for (int row = 0; row < PQntuples(res); row++) {
		struct flush_ctx *owner = ctx;
		int64_t off = -1;
		int32_t part = ctx->b->partition;
		ssize_t i = -1;

		if (!idem_int_parse(PQgetvalue(res, row, f_off), 0, INT64_MAX, &off))
			off = -1;
		if (n > 1) {
			int64_t p = -1;

			if (!idem_int_parse(PQgetvalue(res, row, 0), 0, INT32_MAX, &p))
				p = -1;
			part = (int32_t)p;
			owner = idem__flush_ctx_find(
			        ctx, n, topics ? PQgetvalue(res, row, 2) : ctx->b->topic, part);
		}
		if (owner != NULL && off >= 0)
			i = idem_batch_find_offset(owner->b, off);
		if (i < 0)
			return idem_error_set(err, IDEM_ERR_PG,
			                      "claim returned partition %" PRId32
			                      " offset %s of no message being flushed",
			                      part, PQgetvalue(res, row, f_off));
		owner->b->msgs[i].state = IDEM_MSG_APPLIED;
	}
	return IDEM_OK;
}

/*
 * Unclaimed keys belong to someone else already: duplicates. The handler runs for the claimed
 * ones in offset order.
 */
void idem__flush_split_claimed(struct flush_ctx *ctx)
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
	if (idem__flush_next_result(pg->conn, &res) != PGRES_COMMAND_OK)
		return fast_fail(pg, res, "batch", err);
	PQclear(res);
	if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK)
		return fast_fail(pg, res, "batch", err);
	idem__flush_read_progress(ctx, n, res);
	PQclear(res);
	if (idem__flush_check_floor(ctx, n, err) != IDEM_OK) {
		idem__flush_pipeline_abort(pg, false);
		return FAST_ERROR;
	}
	if (claim) {
		if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK) {
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
		r = idem__flush_mark_claimed(ctx, n, res, err);
		PQclear(res);
		if (r != IDEM_OK) {
			idem__flush_pipeline_abort(pg, false);
			return FAST_ERROR;
		}
	}
	for (size_t k = 0; k < n; k++)
		idem__flush_split_claimed(&ctx[k]);
	return FAST_DONE;
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
const char **idem__flush_context_vals(idem_flush *pg, const struct idem_batch *b, size_t i)
{
	if (!pg->emit_context)
		return NULL;
	pg->ctx_vals[0] = b->route->consumer;
	pg->ctx_vals[1] = idem__flush_set_mode(b) ? "" : idem_batch_ptr(b, b->msgs[i].bkey);
	return pg->ctx_vals;
}

/* Round trip 2, sent for one batch in row mode: its handler once per message to apply. */
static idem_status send_handlers(idem_flush *pg, struct flush_ctx *ctx)
{
	const struct idem_batch *b = ctx->b;
	const char **cv;
	char hname[32];

	if (idem__flush_set_mode(b))
		return IDEM_OK;
	idem__flush_handler_name(pg, b, hname, sizeof(hname));
	for (size_t k = 0; k < ctx->n_apply; k++) {
		cv = idem__flush_context_vals(pg, b, ctx->applied[k]);
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
		if (!idem__flush_set_mode(ctx[k].b))
			continue;
		for (size_t j = 0; j < k && first; j++)
			first = ctx[j].b->route != rt;
		if (!first)
			continue;
		if ((r = bind_set(pg, ctx, n, k, &count)) != IDEM_OK)
			return r;
		if (count == 0)
			continue;
		if (pg->emit_context &&
		    !idem_sql_send(pg->conn, IDEM_SQL_CONTEXT,
		                   idem__flush_context_vals(pg, ctx[k].b, 0), NULL, NULL))
			return IDEM_ERR_PG;
		if (!PQsendQueryParams(pg->conn, rt->handler_sql, (int)rt->n_params, NULL,
		                       pg->bind.vals, NULL, NULL, 0))
			return IDEM_ERR_PG;
		ctx[k].set_sent = true;
	}
	return IDEM_OK;
}

/* A handler's failure: for the slow path if it is one message's fault (or a timeout). */
static enum fast_outcome handler_failed(idem_flush *pg, PGresult *res, idem_error *err)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (res != NULL && (idem_pg_classify(state) == IDEM_PG_MESSAGE || idem_pg_timeout(state))) {
		PQclear(res);
		idem__flush_pipeline_abort(pg, false);
		return FAST_SLOW;
	}
	return fast_fail(pg, res, "batch", err);
}

/* Record the claims found by IDEM_SQL_CLAIMS_GET on the duplicates ctx->dups[0..ctx->n_dups). */
idem_status idem__flush_read_claims(struct flush_ctx *ctx, const PGresult *res)
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

/* Round trip 2, read: the duplicates' claims, in the order send_dup_lookups() sent them. */
static enum fast_outcome read_dup_lookups(idem_flush *pg, struct flush_ctx *ctx, size_t n,
                                          idem_error *err)
{
	PGresult *res;

	for (size_t k = 0; k < n; k++) {
		if (!ctx[k].dups_sent)
			continue;
		if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK)
			return fast_fail(pg, res, "batch", err);
		for (size_t j = k; j < n; j++) {
			if (same_consumer(ctx, j, k) &&
			    idem__flush_read_claims(&ctx[j], res) != IDEM_OK)
				return fast_nomem(pg, res, err);
		}
		PQclear(res);
	}
	return FAST_DONE;
}

/* Row mode: message @i's result, the first column of its handler's first row, if any. */
idem_status idem__flush_store_result(struct idem_batch *b, size_t i, const PGresult *res)
{
	if (PQntuples(res) > 0 && PQnfields(res) > 0)
		return idem_batch_set_result(b, i, PQgetvalue(res, 0, 0),
		                             (size_t)PQgetlength(res, 0, 0),
		                             PQgetisnull(res, 0, 0));
	return IDEM_OK;
}

/* Round trip 2, read for one batch in row mode: its handlers' results. */
static enum fast_outcome read_handlers(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	PGresult *res;

	if (idem__flush_set_mode(ctx->b))
		return FAST_DONE;
	for (size_t k = 0; k < ctx->n_apply; k++) {
		ExecStatusType s;

		if (pg->emit_context) {
			if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK)
				return fast_fail(pg, res, "batch", err);
			PQclear(res);
		}
		s = idem__flush_next_result(pg->conn, &res);

		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK)
			return handler_failed(pg, res, err);
		if (idem__flush_store_result(ctx->b, ctx->applied[k], res) != IDEM_OK)
			return fast_nomem(pg, res, err);
		PQclear(res);
	}
	return FAST_DONE;
}

/*
 * Set mode: a statement that returns rows of two columns (business key, result) gives results
 * to store with the claims of the messages of ctx[first..n) of its route; other rows, and keys
 * of no message it applied, are ignored.
 */
idem_status idem__flush_store_set_results(struct flush_ctx *ctx, size_t n, size_t first,
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

/* Set mode, read: the set statements' outcomes, in the order send_sets() sent them. */
static enum fast_outcome read_sets(idem_flush *pg, struct flush_ctx *ctx, size_t n, idem_error *err)
{
	PGresult *res;

	for (size_t k = 0; k < n; k++) {
		ExecStatusType s;

		if (!ctx[k].set_sent)
			continue;
		if (pg->emit_context) {
			if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK)
				return fast_fail(pg, res, "batch", err);
			PQclear(res);
		}
		s = idem__flush_next_result(pg->conn, &res);
		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK)
			return handler_failed(pg, res, err);
		if (idem__flush_store_set_results(ctx, n, k, res) != IDEM_OK)
			return fast_nomem(pg, res, err);
		PQclear(res);
	}
	return FAST_DONE;
}

/*
 * Name the trace context of the messages to apply that have one, for idem.emit()
 * (IDEM_SQL_TRACES), where events are named after their message. *ret_sent: it was sent.
 */
static idem_status send_traces(idem_flush *pg, const struct flush_ctx *ctx, size_t n,
                               bool *ret_sent)
{
	const char *v[4];
	size_t count;

	*ret_sent = false;
	if (!pg->emit_context)
		return IDEM_OK;
	if (idem_bind_traces_open(&pg->bind) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < n; k++) {
		if (idem_bind_traces_add(&pg->bind, ctx[k].b, ctx[k].applied, ctx[k].n_apply) !=
		    IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	if (idem_bind_traces_close(&pg->bind, v, &count) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (count == 0)
		return IDEM_OK;
	if (!idem_sql_send(pg->conn, IDEM_SQL_TRACES, v, NULL, NULL))
		return IDEM_ERR_PG;
	*ret_sent = true;
	return IDEM_OK;
}

/*
 * Round trip 2: the applied messages' trace context (if any has one), where the duplicates' keys
 * were claimed (only if there are any: one lookup per consumer), and the handlers: in row mode once
 * per message, batch after batch; in set mode once per route.
 */
static enum fast_outcome handler_rt(idem_flush *pg, struct flush_ctx *ctx, size_t n,
                                    idem_error *err)
{
	enum fast_outcome o;
	bool any, traced;
	PGresult *res;
	idem_status r;

	if ((r = send_traces(pg, ctx, n, &traced)) != IDEM_OK)
		return fast_send_fail(pg, r, err);
	any = traced;
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
			idem__flush_pipeline_abort(pg, false);
			return FAST_SLOW;
		}
		return fast_send_fail(pg, r, err);
	}
	if (any && (!PQsendFlushRequest(pg->conn) || PQflush(pg->conn) != 0))
		return fast_fail(pg, NULL, "batch send", err);
	if (traced) {
		if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK)
			return fast_fail(pg, res, "batch", err);
		PQclear(res);
	}
	if ((o = read_dup_lookups(pg, ctx, n, err)) != FAST_DONE)
		return o;
	for (size_t k = 0; k < n; k++) {
		if ((o = read_handlers(pg, &ctx[k], err)) != FAST_DONE)
			return o;
	}
	return read_sets(pg, ctx, n, err);
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
	const char *v[10];
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

/*
 * Bad message @m's quarantine insert answered @res (one row: whether its row is new). A position
 * idem.quarantine had already makes it a redelivery, counted as such by count().
 */
void idem__flush_quarantine_answer(struct idem_batch_msg *m, const PGresult *res)
{
	m->quarantined_before = strcmp(PQgetvalue(res, 0, 0), "f") == 0;
	if (m->quarantined_before)
		m->dup = IDEM_DUP_REDELIVERY;
}

/*
 * Read what send_closing() sent for @ctx: the results statement, then for each bad message
 * whether idem.quarantine had its position already (idem__flush_quarantine_answer()).
 */
static idem_status read_closing(idem_flush *pg, struct flush_ctx *ctx, idem_error *err)
{
	struct idem_batch *b = ctx->b;
	PGresult *res;
	idem_status r;

	if (ctx->results_sent) {
		if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK) {
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
		if (idem__flush_next_result(pg->conn, &res) != PGRES_TUPLES_OK ||
		    PQntuples(res) != 1) {
			r = idem_pg_error(err, pg->conn, res, "quarantine");
			PQclear(res);
			return r;
		}
		idem__flush_quarantine_answer(m, res);
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
	if (idem__flush_next_result(pg->conn, &res) != PGRES_COMMAND_OK)
		r = idem_pg_error(err, pg->conn, res, "replies");
	PQclear(res);
	return r;
}

/*
 * Round trip 3 for the batches of ctx[0..n): results and quarantine, then each batch's counters
 * (idem__flush_finish_stats()), one progress statement for all their partitions, COMMIT and sync;
 * the pipeline is left on success. A transaction that quarantines reads the quarantine inserts'
 * answers before it counts (one round trip more, only then): a message whose position was in
 * idem.quarantine already is a redelivery, not a new quarantine.
 */
idem_status idem__flush_close_batch(idem_flush *pg, struct flush_ctx *ctx, size_t n,
                                    idem_error *err)
{
	struct idem_bind_progress *pr = ctx == &pg->one ? pg->one_p : pg->many_p;
	int n_sent = 0, n_quar = 0, n_one = 0, q_one = 0;
	const char *v[IDEM_BIND_PROGRESS_PARAMS];
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
		idem__flush_finish_stats(&ctx[k]);
		pr[k] = idem__flush_progress_row(&ctx[k]);
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
		ExecStatusType s = idem__flush_next_result(pg->conn, &res);

		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
			r = idem_pg_error(err, pg->conn, res, "batch commit");
			PQclear(res);
			idem__flush_pipeline_abort(pg, true);
			return r;
		}
		PQclear(res);
	}
	if (idem__flush_next_result(pg->conn, &res) != PGRES_PIPELINE_SYNC) {
		r = idem_pg_error(err, pg->conn, res, "batch sync");
		PQclear(res);
		return r;
	}
	PQclear(res);
	PQexitPipelineMode(pg->conn);
	return IDEM_OK;

out_abort:
	idem__flush_pipeline_abort(pg, false);
	return r;
}

/*
 * The batches of ctx[0..n) in one transaction, three round trips whatever their number and size
 * (four if it quarantines a message). On FAST_DONE it committed and every ctx[k].st is filled;
 * otherwise it was rolled back (or the connection broke).
 */
static enum fast_outcome fast_path(idem_flush *pg, struct flush_ctx *ctx, size_t n, idem_error *err)
{
	enum fast_outcome o;

	for (size_t k = 0; k < n; k++) {
		if (idem__flush_need_idx(&ctx[k], ctx[k].b->n_msgs) != IDEM_OK) {
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

	/* Round trip 3: results, quarantine, replies, progress, COMMIT. */
	if (idem__flush_close_batch(pg, ctx, n, err) != IDEM_OK)
		return FAST_ERROR;
	return FAST_DONE;
}

/* The first message of @b that cannot be decoded, or b->n_msgs. */
static size_t first_undecodable(const struct idem_batch *b)
{
	size_t i = 0;

	while (i < b->n_msgs && !b->msgs[i].undecodable)
		i++;
	return i;
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
	idem__flush_reset(ctx);
	/* With on_poison: halt, nothing at or after a message that cannot even be decoded is
	 * processed: the partition stops there. */
	if (b->route->on_poison == IDEM_CFG_POISON_HALT && (bad = first_undecodable(b)) < b->n_msgs)
		idem__flush_halt_at(ctx, bad);
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
	if ((r = idem__flush_slow_path(pg, ctx, err)) != IDEM_OK)
		goto out_reset;
out_done:
	idem__flush_done(ctx, ret_stats);
	return IDEM_OK;

out_reset:
	idem__flush_drop_unclean(pg);
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
	    idem__flush_ctx_find(ctx, n, b->topic, b->partition) != NULL)
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
		idem__flush_reset(ctx);
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
	idem__flush_drop_unclean(pg);
	return false;
}

void idem_flush_many(idem_flush *pg, struct idem_batch *const *b, size_t n,
                     struct idem_flush_stats *ret_stats, idem_status *ret_r, idem_error *errs)
{
	size_t m = 0, k = 0;

	/* A connection that must be reopened first is idem_flush_batch()'s to report, per batch. */
	if (n > 1 && idem_flush_connected(pg) && idem__flush_need_many(pg, n) == IDEM_OK) {
		m = pick_many(pg, b, n);
		if (m < 2 || !flush_combined(pg, m))
			m = 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (k < m && pg->many[k].pos == i) {
			idem__flush_done(&pg->many[k++], &ret_stats[i]);
			ret_r[i] = IDEM_OK;
			continue;
		}
		/* idem_flush_batch() starts again from the decoded state. */
		ret_r[i] = idem_flush_batch(pg, b[i], &ret_stats[i], errs ? &errs[i] : NULL);
	}
}
