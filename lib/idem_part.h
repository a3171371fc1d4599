/*
 * idem_part.h - the table of assigned partitions and each partition's delivery state.
 *
 * Owns, per assigned partition: the batch being filled and the batch in flight, where fetching
 * stands (fetch_next), the retry schedule of a failed batch (failures, retry_at_ms), whether the
 * partition is held (backpressure), leaving (revoke, shutdown) or halted (poison message), and
 * its offsets (db_next: committed to Postgres; stored_next: to commit to Kafka; commit_acked:
 * what Kafka has; db_floor: what the database must still hold).
 *
 * The offset rule it keeps: an offset is committed to Kafka only after the Postgres transaction
 * that processed everything below it has committed, never moves backwards (but where the
 * database itself went back: idem_part_rewind()), and is never committed for a partition that
 * is no longer assigned (a revoked partition is gone from the table, and comes back with fresh
 * bookkeeping). See ARCHITECTURE.md, "Invariants".
 *
 * Ownership: the table owns its entries; an entry lives from idem_parts_assign() to
 * idem_parts_revoke() or idem_parts_done(), which must not be called while a worker holds the
 * entry (busy).
 *
 * Threading: the consumer thread owns the table and every field of every entry, except that
 * while @busy a worker (idem_pool) owns @inflight and @job's result fields (r, st, err) and the
 * pool's list link (job.next). Nothing here locks.
 */
#ifndef IDEM_PART_H
#define IDEM_PART_H

#include <librdkafka/rdkafka.h>

#include "idem_batch.h"
#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_flush.h"
#include "idem_schemas.h"

/* A batch handed to a worker, and what came of it. */
struct idem_part_job {
	struct idem_part *next; /* in the pool's ready or done list */
	int64_t t0;             /* monotonic time it was handed over */
	int64_t handed_us;      /* the same in microseconds; then the worker's BEGIN and COMMIT */
	int64_t begin_us, end_us;
	int64_t first, last; /* its offsets when it was handed over */
	idem_status r;
	struct idem_flush_stats st;
	idem_error err;
};

struct idem_part {
	char *topic; /* owned */
	int32_t partition;
	const struct idem_route *route;
	rd_kafka_queue_t *queue; /* its own fetch queue (idem_consumer_queue_open()), owned by
	                            the daemon, which closes it before the entry goes */
	bool drained;            /* @queue had nothing more when last consumed */
	struct idem_batch batch; /* messages received, not yet committed, nor handed over */
	/* While busy, a worker owns @inflight (the batch before @batch) and @job; nothing else
	 * touches them. One batch per partition is in flight at a time, so batches commit in
	 * offset order. */
	struct idem_batch inflight;
	struct idem_part_job job;
	bool busy;
	bool held;            /* not consumed because @batch is full, or batch.max_bytes_total is
	                         reached, while @inflight commits */
	bool leaving;         /* being revoked or shut down: drained, not fetched again */
	bool schema_wait;     /* waits for the schema registry to answer for its next message */
	bool halted;          /* stopped at a poison message (on_poison: halt), from the batch that
	                         halted to the first that commits past it, its retries included */
	int drain_tries;      /* attempts left while draining */
	int failures;         /* consecutive failed commits of the current batch */
	int64_t retry_at_ms;  /* monotonic time of the next attempt; 0: none pending */
	int64_t fetch_next;   /* offset expected next from Kafka; -1: unknown */
	int64_t db_next;      /* offset after the last batch committed to Postgres, or -1 */
	int64_t stored_next;  /* offset to commit to Kafka, or -1 */
	int64_t commit_acked; /* offset Kafka acknowledged (idemd's commits), or -1 */
	int64_t db_floor;     /* next_offset the database must hold before anything of the
	                         partition commits (read at assignment, then each commit); -1 */
	int64_t reapply_to;   /* the end of a gap being read again because the database went
	                         back, until the database passes it; -1 */
	/* The log its offsets are offsets in (ARCHITECTURE.md "Where a partition starts"), named
	 * in the metadata of every offset committed, set at assignment: */
	char kafka_cluster[IDEM_CLUSTER_ID_LEN]; /* "" unknown */
	int32_t log_epoch;
	int64_t log_first;  /* where the consumer's first start on the log began; -1 unknown */
	bool commit_unread; /* Kafka's committed offset could not be read at assignment: nothing
	                       is committed over it until it is (idem__daemon_check_unread()) */
};

struct idem_parts {
	struct idem_part **v;
	size_t n, cap;
	idem_schemas *schemas; /* not owned; what the batches read avro: fields with (or NULL) */
};

void idem_parts_init(struct idem_parts *ps);
void idem_parts_done(struct idem_parts *ps);

/* @brief The partition entry, or NULL if not assigned. */
struct idem_part *idem_parts_find(const struct idem_parts *ps, const char *topic,
                                  int32_t partition);

/*
 * @brief Add an assigned partition (no-op if present), with empty batches, no retry pending and
 * unknown offsets (-1).
 * @returns IDEM_ERR_NOT_FOUND if no route serves @topic, IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_parts_assign(struct idem_parts *ps, const struct idem_cfg *cfg,
                                             const char *topic, int32_t partition,
                                             struct idem_part **ret_part);

/* @brief Forget a partition and its uncommitted batch (they will be redelivered). */
void idem_parts_revoke(struct idem_parts *ps, const char *topic, int32_t partition);

/*
 * @brief Bytes @p holds in its two batches (idem_batch.bytes), what counts against
 * batch.max_bytes_total. Safe while busy: a worker never changes a batch's byte count.
 */
size_t idem_part_bytes(const struct idem_part *p);

/* @brief How many assigned partitions are halted. */
size_t idem_parts_halted(const struct idem_parts *ps);

/*
 * @brief Make @p's batch the one in flight (the emptied batch in flight becomes the one that
 * fills) and mark @p busy, the job's offsets and hand-over time (@now_ms) recorded. The caller
 * then gives @p to a worker.
 */
void idem_part_hand_over(struct idem_part *p, int64_t now_ms);

/*
 * @brief Take the batch in flight back as @p's batch, to be retried; what arrived after it is
 * dropped (fetched again from fetch_next, set after the batch's last message, or to @first when
 * it is empty).
 */
void idem_part_take_back(struct idem_part *p);

/*
 * @brief Record that a batch ending before @next committed in Postgres.
 * @returns true when Kafka should be told (@next is beyond what was stored); the caller then
 * stores it and calls idem_part_stored().
 */
bool idem_part_committed(struct idem_part *p, int64_t next);
void idem_part_stored(struct idem_part *p, int64_t next);

/*
 * @brief The database holds @p only up to @db (-1: nothing): it went back in time. Its batches
 * (in hand; the caller makes sure none is in flight) are dropped, and its offsets go back to
 * @db: what the database holds is all that is known to be applied. The end of the gap (the
 * furthest this process saw the database hold) becomes reapply_to.
 * @returns how many offsets the gap spans (0 if none is known).
 */
int64_t idem_part_rewind(struct idem_part *p, int64_t db);

/*
 * @brief Another client moved Kafka's offset of @p ahead to @offset, found after @p started (its
 * committed offset could not be read at assignment): drop what is in hand (the caller makes
 * sure nothing is in flight) and read from @offset. Nothing is stored for Kafka until a batch
 * past it commits, as for a skip found at assignment; what the database holds is unchanged.
 */
void idem_part_skip_to(struct idem_part *p, int64_t offset);

#endif
