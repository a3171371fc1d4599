/*
 * idem_pool.h - the worker threads that commit batches to Postgres.
 *
 * Owns: the worker threads, each with its own idem_flush session (one Postgres connection), the
 * ready list (partitions whose batch in flight waits for a worker) and the done list (their
 * outcome, waiting for the consumer thread), the mutex and condition variables guarding them,
 * and the consumer queue handle used to wake the consumer thread out of its poll when something
 * is done. A worker takes every ready batch (up to a bound) and commits them in one transaction
 * (idem_flush_many), so at moderate rates one fsync serves many partitions.
 *
 * Ownership: the pool never owns a partition. Between idem_pool_submit() and the
 * idem_pool_collect() that returns it, a partition's @inflight batch and @job result belong to
 * the pool; the caller must not free the partition meanwhile (idem_pool_stop() waits for them).
 *
 * Threading: every function is called on the consumer thread; the workers only touch what
 * idem_pool_submit() handed them and the lists, under the pool's mutex.
 */
#ifndef IDEM_POOL_H
#define IDEM_POOL_H

#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_part.h"

typedef struct idem_pool idem_pool;

/*
 * @brief Open one idem_flush session per worker (idem_cfg_workers()): every connection is open
 * and every handler prepared before anything is consumed. No thread is started yet.
 * @param cfg must outlive the pool.
 */
IDEM_NODISCARD idem_status idem_pool_new(const struct idem_cfg *cfg, idem_pool **ret_pool,
                                         idem_error *err);

/*
 * @brief Start the worker threads. When a worker is done with something it wakes @rk's consumer
 * queue (rd_kafka_queue_yield), ending the consumer thread's poll.
 * @param rk must outlive the threads (idem_pool_stop()).
 */
IDEM_NODISCARD idem_status idem_pool_start(idem_pool *pool, rd_kafka_t *rk, idem_error *err);

/* @brief How many workers (and Postgres connections) the pool has. */
size_t idem_pool_size(const idem_pool *pool);

/* @brief The search path of the workers' connections (one conninfo and role: the same for all). */
const struct idem_pg_search_path *idem_pool_search_path(const idem_pool *pool);

/*
 * @brief Queue @p, just handed over (idem_part_hand_over()), for a worker: it commits
 * p->inflight and records the outcome in p->job (r, st, err).
 */
void idem_pool_submit(idem_pool *pool, struct idem_part *p);

/*
 * @brief Take what the workers finished: a list linked through job.next, in the order they
 * finished, or NULL. The partitions are the caller's again (their @busy is for the caller to
 * clear).
 */
struct idem_part *idem_pool_collect(idem_pool *pool);

/* @brief Wait up to @ms for a worker to finish something (returns at once if one has). */
void idem_pool_wait(idem_pool *pool, int ms);

/*
 * @brief Is every worker's connection up? As of each worker's last commit, or of its last check
 * while idle (every second: a connection the server closed is noticed, a lost one reopened), so
 * an idle pool's answer is at most about a second old. Thread-safe.
 */
bool idem_pool_connected(const idem_pool *pool);

/*
 * @brief How many connections the workers opened again after their first one: the daemon
 * checks every partition's position when it grows (a reconnect may reach a promoted standby).
 */
uint64_t idem_pool_reconnects(const idem_pool *pool);
/* Keys claimed late because another transaction in flight claims them too (take_group()). */
uint64_t idem_pool_late(const idem_pool *pool);

/*
 * @brief How long, in milliseconds at @now_ms, the oldest batch of @ps in a worker's hands has
 * been there (0: none).
 */
int64_t idem_pool_stalled_ms(const struct idem_parts *ps, int64_t now_ms);

/*
 * @brief Let the workers finish what they hold, then end the threads. Safe to call twice and on
 * a pool never started.
 */
void idem_pool_stop(idem_pool *pool);

/* @brief Stop (idem_pool_stop()) and close the connections. Accepts NULL. */
void idem_pool_free(idem_pool *pool);

#endif
