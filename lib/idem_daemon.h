/*
 * idem_daemon.h - the consume -> batch -> transaction -> offset loop.
 *
 * Owns the main loop and what ties the modules together: it polls the consumer
 * (idem_consumer), takes each message into its partition's batch (idem_part), hands due
 * batches to the workers (idem_pool), and handles what they finished (statistics, metrics,
 * offsets stored after the commit, retries with backoff, halts); it drains on revoke and on
 * shutdown. The daemon program owns signals, logging setup and exit codes; everything else is
 * here so it can be driven from tests.
 *
 * Ownership: idem_daemon_new() creates and idem_daemon_free() destroys the consumer, the pool
 * (its threads and connections), the partition table, the metrics and the retention thread.
 *
 * Threading: every function is called on one thread, the consumer thread; the pool's workers
 * and the retention thread are internal. idem_daemon_stats() and idem_daemon_stalled_ms() read
 * only what that thread writes.
 */
#ifndef IDEM_DAEMON_H
#define IDEM_DAEMON_H

#include "idem_cfg.h"
#include "idem_common.h"

typedef struct idem_daemon idem_daemon;

struct idem_daemon_stats {
	uint64_t consumed;
	uint64_t applied;
	uint64_t duplicates;
	uint64_t quarantined;
	uint64_t dup_redelivery; /* duplicates by kind (they add up to duplicates) */
	uint64_t dup_replay;
	uint64_t dup_upstream;
	uint64_t payload_mismatches;
	uint64_t reapplied; /* read again because the database went back (also counted above) */
	uint64_t batches;
	uint64_t slow_batches;
	uint64_t retries;
	uint64_t schema_waits; /* a partition waited for the schema registry */
	size_t partitions;     /* currently assigned */
	size_t halted;         /* of which stopped at a poison message (routes[].on_poison: halt) */
};

/* Asked between retries and during waits: true when the process should stop. */
typedef bool (*idem_stop_fn)(void);

/*
 * @brief Connect to Postgres (checking the schema and preparing every handler), create the
 * consumer and subscribe. Does not retry: a failure here is reported to the caller, with
 * err->code IDEM_ERR_PG and a SQLSTATE when Postgres refused something.
 * @param cfg must outlive the daemon.
 */
IDEM_NODISCARD idem_status idem_daemon_new(const struct idem_cfg *cfg, idem_stop_fn stop,
                                           idem_daemon **ret_d, idem_error *err);

/*
 * @brief One turn of the main loop: poll Kafka for up to ~100 ms, add messages to their
 * partition's batch, commit the batches that are full or due. A batch that fails for a transient
 * reason or a broken handler pauses its partition and is retried the same, after an exponential
 * backoff with jitter (retry.initial_ms..retry.max_ms), while other partitions go on; a halted
 * partition (routes[].on_poison: halt) is retried every retry.max_ms from its poison message
 * (and at once after idem_daemon_retry_now()).
 * @returns IDEM_OK, or a fatal error (out of memory).
 */
IDEM_NODISCARD idem_status idem_daemon_tick(idem_daemon *d, idem_error *err);

/*
 * @brief Retry at once every partition that waits for a retry: halted at a poison message
 * (routes[].on_poison: halt) or paused after a failed batch (a broken handler, a transient
 * error), instead of at its scheduled time (up to retry.max_ms away). For SIGHUP: an operator
 * has fixed the cause. A retry that fails again is scheduled as any other.
 * @returns how many partitions will be retried.
 */
size_t idem_daemon_retry_now(idem_daemon *d);

/*
 * @brief Drain: commit the open batches (bounded retries), commit offsets synchronously, close
 * the consumer (leaving the group).
 */
IDEM_NODISCARD idem_status idem_daemon_shutdown(idem_daemon *d, idem_error *err);

void idem_daemon_stats(const idem_daemon *d, struct idem_daemon_stats *ret_stats);

/*
 * @brief How long, in milliseconds, the oldest batch in flight has been in a worker's hands
 * (0: none). The consumer thread turns while workers wait on Postgres; this says whether they
 * are getting anywhere.
 */
int64_t idem_daemon_stalled_ms(const idem_daemon *d);

/*
 * @brief Where an unqualified name in a handler resolves: the search path of the workers'
 * connections, read when they were set up (valid as @d).
 */
const struct idem_pg_search_path *idem_daemon_search_path(const idem_daemon *d);
void idem_daemon_free(idem_daemon *d);

#endif
