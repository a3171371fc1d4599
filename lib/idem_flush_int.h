/*
 * idem_flush_int.h - what the files of idem_flush share (internal to them).
 *
 * idem_flush is split in three: idem_session.c, a worker's session (its connection and prepared
 * statements, the pipeline plumbing on it, and the scratch every flush reuses: struct flush_ctx,
 * one batch's state from its reset to its commit); idem_flush.c, the transaction itself (round
 * trips 1, 2 and 3 of the fast path, for one batch or several, and the entry points
 * idem_flush_batch() and idem_flush_many()); idem_flush_slow.c, the slow path (a savepoint per
 * message) and idem_flush_apply_one(). ARCHITECTURE.md "The transaction" describes the whole.
 *
 * Included by those three files only (and by tests/unit/test_idem_flush.c): not installed and
 * not part of libidem's contract (idem_flush.h is). The types keep their short names, the
 * functions with external linkage are idem__flush_*.
 */
#ifndef IDEM_FLUSH_INT_H
#define IDEM_FLUSH_INT_H

#include <libpq-fe.h>

#include "idem_batch.h"
#include "idem_bind.h"
#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_flush.h"

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
	struct idem_pg_search_path search_path; /* the connection's, read at its first setup */
	struct idem_bind bind;  /* statement parameters, rebuilt for each statement */
	struct flush_ctx one;   /* idem_flush_batch() and idem_flush_apply_one() */
	struct flush_ctx *many; /* idem_flush_many(), cap_many of them */
	size_t cap_many;
	const struct idem_batch **many_b;  /* the batches of pg->many, for the combined claim */
	struct idem_bind_progress *many_p; /* and their progress rows */
	const struct idem_batch *one_b[1]; /* the same for pg->one */
	struct idem_bind_progress one_p[1];
};

/* Does @b's route run its handler once per transaction (handler.mode: set)? */
static inline bool idem__flush_set_mode(const struct idem_batch *b)
{
	return b->route->handler_mode == IDEM_CFG_MODE_SET;
}

/* idem_session.c: the connection, its statements and its pipeline */

/* The name @b's route's handler is prepared under on the session's connection. */
void idem__flush_handler_name(const idem_flush *pg, const struct idem_batch *b, char *buf,
                              size_t len);
/*
 * A connection left mid-pipeline or mid-transaction by a failure is not worth saving: drop it,
 * and the next attempt starts on a fresh one.
 */
void idem__flush_drop_unclean(idem_flush *pg);
/*
 * Read the result of the next pipelined statement, and the NULL that ends it (a sync has
 * none). Returns its status; the result goes to *ret_res, which the caller clears (NULL, with
 * PGRES_FATAL_ERROR, if there was none).
 */
ExecStatusType idem__flush_next_result(PGconn *conn, PGresult **ret_res);
/*
 * After a failure in pipeline mode: drain to the sync (sent first unless @sync_sent), leave
 * pipeline mode, roll back. Gives up as soon as the connection is broken.
 */
void idem__flush_pipeline_abort(idem_flush *pg, bool sync_sent);

/* idem_session.c: the scratch each flush reuses */

/* Room for @n messages in @ctx's index lists (applied, dups). */
IDEM_NODISCARD idem_status idem__flush_need_idx(struct flush_ctx *ctx, size_t n);
/* Room for @n batches in pg->many; new ones start empty. */
IDEM_NODISCARD idem_status idem__flush_need_many(idem_flush *pg, size_t n);
/* The batches of ctx[0..n) as a list (pg->one's or pg->many's), for statements over several. */
const struct idem_batch *const *idem__flush_batch_list(idem_flush *pg, const struct flush_ctx *ctx,
                                                       size_t n);
/* The batch of ctx[0..n) with @topic and @partition, or NULL. */
struct flush_ctx *idem__flush_ctx_find(struct flush_ctx *ctx, size_t n, const char *topic,
                                       int32_t partition);
/* Start a flush from the decoded state: undo what an earlier attempt marked. */
void idem__flush_reset(struct flush_ctx *ctx);
/* Stop the batch at message @i (on_poison: halt): it and what follows stay unprocessed. */
void idem__flush_halt_at(struct flush_ctx *ctx, size_t i);
/* Counters, where the partition is done, and the halt if any, for the closing statements. */
void idem__flush_finish_stats(struct flush_ctx *ctx);
/* What the batch of @ctx adds to its partition's progress row. */
struct idem_bind_progress idem__flush_progress_row(const struct flush_ctx *ctx);
/* Committed: the bad messages are in the quarantine now, and the counters are the caller's. */
void idem__flush_done(struct flush_ctx *ctx, struct idem_flush_stats *ret_stats);

/* idem_flush.c: pieces of the round trips the slow path uses too */

/* The partitions' progress, pending replay and gap's end (IDEM_SQL_PROGRESS_GET's rows). */
void idem__flush_read_progress(struct flush_ctx *ctx, size_t n, const PGresult *res);
/*
 * IDEM_ERR_BEHIND if the database lacks a partition's position b->db_floor (ARCHITECTURE.md
 * "When the database goes back"); sets each b->db_next.
 */
IDEM_NODISCARD idem_status idem__flush_check_floor(struct flush_ctx *ctx, size_t n,
                                                   idem_error *err);
/* Record the claims found by IDEM_SQL_CLAIMS_GET on the duplicates ctx->dups[0..ctx->n_dups). */
IDEM_NODISCARD idem_status idem__flush_read_claims(struct flush_ctx *ctx, const PGresult *res);
/* IDEM_SQL_CONTEXT's parameters for message @i of @b, or NULL where nothing is named. */
const char **idem__flush_context_vals(idem_flush *pg, const struct idem_batch *b, size_t i);
/* Message @i's result from its row-mode handler's @res (the first column of its first row). */
IDEM_NODISCARD idem_status idem__flush_store_result(struct idem_batch *b, size_t i,
                                                    const PGresult *res);
/*
 * Round trip 3 for the batches of ctx[0..n), in pipeline mode inside the open transaction:
 * results, quarantine, replies, progress, COMMIT. IDEM_OK: committed, and the pipeline is left.
 * Otherwise rolled back, or the connection broke (a COMMIT in flight then has an unknown
 * outcome).
 */
IDEM_NODISCARD idem_status idem__flush_close_batch(idem_flush *pg, struct flush_ctx *ctx, size_t n,
                                                   idem_error *err);

/* idem_flush.c: reading the round trips' answers (external so that tests/unit reaches them) */

/*
 * Mark APPLIED the messages of the batches of ctx[0..n) whose keys the claim's @res newly
 * claimed: rows of their offsets (IDEM_SQL_CLAIM), or when n > 1 of partition and offset
 * (IDEM_SQL_CLAIM_PARTS) and topic (IDEM_SQL_CLAIM_MANY); IDEM_ERR_PG for an offset of no
 * message being flushed.
 */
IDEM_NODISCARD idem_status idem__flush_mark_claimed(struct flush_ctx *ctx, size_t n,
                                                    const PGresult *res, idem_error *err);
/*
 * After the claim: a message still PENDING ran into an existing claim (DUPLICATE); ctx->applied
 * lists the APPLIED ones, in offset order.
 */
void idem__flush_split_claimed(struct flush_ctx *ctx);
/*
 * Set mode: the (business key, result) rows of the set statement of ctx[first]'s route, stored
 * with the APPLIED messages of that route's batches of ctx[first..n); other rows are ignored.
 */
IDEM_NODISCARD idem_status idem__flush_store_set_results(struct flush_ctx *ctx, size_t n,
                                                         size_t first, const PGresult *res);
/* Bad message @m's quarantine insert answered @res: a position there already is a redelivery. */
void idem__flush_quarantine_answer(struct idem_batch_msg *m, const PGresult *res);

/* idem_flush_slow.c */

/*
 * The batch of @ctx on the slow path, in a transaction of its own: a savepoint around each
 * message's claim and handler, then round trip 3. IDEM_OK: committed.
 */
IDEM_NODISCARD idem_status idem__flush_slow_path(idem_flush *pg, struct flush_ctx *ctx,
                                                 idem_error *err);

#endif
