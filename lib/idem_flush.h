/*
 * idem_flush.h - the batch transaction: a worker's Postgres session (its connection, the
 * prepared statements, reused buffers) and the commit of batches through it.
 *
 * ARCHITECTURE.md "The transaction" describes its shape; idem_sql.h holds its statements and
 * idem_pg.h the connection and the SQLSTATE policy it relies on.
 */
#ifndef IDEM_FLUSH_H
#define IDEM_FLUSH_H

#include <libpq-fe.h>

#include "idem_batch.h"
#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_pg.h"

typedef struct idem_flush idem_flush;

/* What one committed batch did, for logs and counters. */
struct idem_flush_stats {
	uint64_t consumed;
	uint64_t applied;
	uint64_t duplicates;
	uint64_t quarantined;    /* newly written to idem.quarantine (a message already there
	                            at the same position, seen again, is a redelivery duplicate) */
	uint64_t dup_redelivery; /* duplicates by kind; they add up to duplicates */
	uint64_t dup_replay;
	uint64_t dup_upstream;
	uint64_t payload_mismatches; /* duplicates whose payload differs, quarantined or not */
	uint64_t reapplied; /* messages below a gap's end, read again because the database went
	                       back (also counted above) */
	int64_t reapply_to; /* the gap's end if the batch ends before it, else -1 */
	bool slow_path;
	int64_t next_offset; /* the partition is done below this offset */
	bool halted;         /* on_poison: halt stopped the batch at next_offset */
	char halt_reason[512];
};

/*
 * @brief Connect, check that the schema is migrated, and prepare every statement, the handlers
 * included, so that a broken handler fails here (IDEM_ERR_PG, class IDEM_PG_BROKEN, the route
 * named in @err) rather than on the first message. @cfg must outlive the handle.
 */
IDEM_NODISCARD idem_status idem_flush_new(const struct idem_cfg *cfg, idem_flush **ret_pg,
                                          idem_error *err);
void idem_flush_free(idem_flush *pg);

/*
 * @brief Drop the connection and open a new one (re-preparing everything). On failure there is
 * no connection: one that opened but could not be set up is not kept half-prepared.
 */
IDEM_NODISCARD idem_status idem_flush_reconnect(idem_flush *pg, idem_error *err);
bool idem_flush_connected(const idem_flush *pg);

/*
 * @brief How many times a connection was opened and set up: the first, and every reconnect
 * since. A new connection may reach another database state (a promoted standby): the daemon
 * then checks every partition's position (ARCHITECTURE.md "When the database goes back").
 */
uint64_t idem_flush_connects(const idem_flush *pg);

/* @brief The search path of @pg's connection, read when it was first set up (valid as @pg). */
const struct idem_pg_search_path *idem_flush_search_path(const idem_flush *pg);

/*
 * @brief For an idle session: notice a connection the server closed meanwhile (a terminated
 * backend, a server shutting down: libpq sees it only when it reads), and reconnect one that is
 * gone. Never blocks on the server except to connect.
 * @returns idem_flush_connected() afterwards.
 */
bool idem_flush_check(idem_flush *pg);

/*
 * @brief Process batch @b in one transaction: claim, run handlers, store results, classify
 * duplicates, quarantine what cannot be processed, advance idem.partition_progress, commit.
 *
 * Fast path: three pipelined round trips for the whole batch (four if it quarantines a message). If
 * a handler fails for a message-specific reason (or times out), the transaction is rolled back and
 * redone on the slow path with a SAVEPOINT per message, so only the failing message is retried
 * (retry.max_attempts) and then quarantined, while its neighbours commit. A claim that runs into
 * lock_timeout is a transient failure of the batch; after retry.max_attempts of them the batch goes
 * to the slow path, where a key still locked by another transaction gets its message quarantined.
 * With routes[].on_poison: halt, the batch is committed only up to its first message that would
 * be quarantined; @b is truncated there and ret_stats->halted is set.
 *
 * The transaction commits only if the database holds the partition at b->db_floor or beyond:
 * finding it behind (a restore, a failover to a standby that lacked the last commits), it rolls
 * back and returns IDEM_ERR_BEHIND, b->db_next telling where the database stands (-1: no
 * row), so that the partition is read again from there (ARCHITECTURE.md "When the database goes
 * back"). Messages below b->reapply_to (or the gap's end recorded in the database) are counted
 * as re-applied.
 *
 * On IDEM_OK the transaction committed and every message left in @b has its final state.
 * On IDEM_ERR_PG nothing was committed (err->sqlstate and idem_pg_classify() tell what to do);
 * if the connection broke, the outcome of a COMMIT in flight is unknown, which is safe: the retry
 * finds the keys claimed.
 */
IDEM_NODISCARD idem_status idem_flush_batch(idem_flush *pg, struct idem_batch *b,
                                            struct idem_flush_stats *ret_stats, idem_error *err);

/*
 * @brief Commit the batches b[0..n) (distinct batches of different partitions), together when
 * possible: one transaction, one commit, the three (or four) round trips of idem_flush_batch()'s
 * fast path for all of them, with one claim of all their keys in a single global order.
 *
 * Each batch ends exactly as idem_flush_batch() would leave it, and the database gets what n
 * idem_flush_batch() calls would write: ret_r[i], ret_stats[i] and errs[i] are what
 * idem_flush_batch() would have returned and filled for b[i] (ret_stats[i] on IDEM_OK only, errs[i]
 * on failure only). A key that two batches of one consumer carry is applied for the first of them;
 * the other one's message is a duplicate of it.
 *
 * Batches that cannot share the transaction are flushed on their own with idem_flush_batch(): empty
 * ones, those that need the slow path (claims timed out retry.max_attempts times) or stop at a
 * message that cannot be decoded (on_poison: halt). If the shared transaction does not commit
 * for any reason (a handler failed, a claim timed out, the connection broke, out of memory), it
 * is rolled back and every batch is flushed on its own, in order. So the shared commit, if any,
 * comes first, then the others' in order; n == 1 is just idem_flush_batch().
 *
 * @param errs NULL, or n of them.
 */
void idem_flush_many(idem_flush *pg, struct idem_batch *const *b, size_t n,
                     struct idem_flush_stats *ret_stats, idem_status *ret_r, idem_error *errs);

/*
 * @brief Apply message @i of @b (decoded, not undecodable) on its own, inside the transaction
 * the caller opened on idem_flush_conn(): claim its key and run its handler under a savepoint,
 * retried up to retry.max_attempts for message-specific failures, and store the handler's
 * result. Leaves the message APPLIED, DUPLICATE (b->msgs[i].claim tells where the key was
 * applied) or BAD (reason and SQLSTATE set; its claim rolled back).
 * @returns IDEM_OK, or IDEM_ERR_PG for a failure that is not the message's (the transaction is
 * then aborted), IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_flush_apply_one(idem_flush *pg, struct idem_batch *b, size_t i,
                                                idem_error *err);

/* @brief The connection (NULL while disconnected); valid until the next call on @pg. */
PGconn *idem_flush_conn(idem_flush *pg);

#endif
