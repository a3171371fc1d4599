/*
 * idem_part.h - the table of assigned partitions and each partition's delivery state.
 *
 * Owns, per assigned partition: the batch being filled and the batch in flight, where fetching
 * stands (fetch_next), the fetch side's state (enum idem_part_state: whether its queue is read,
 * and if not, why and until when), the retry schedule of a failed batch (failures, wake_at_ms),
 * and its offsets (db_next: committed to Postgres; stored_next: to commit to Kafka;
 * commit_acked: what Kafka has; db_floor: what the database must still hold), with which of
 * them Kafka lacks (idem_part_commit_due(); the daemon commits them with idemd's metadata,
 * idem_daemon.c commit_list()).
 *
 * The offset rule it keeps: an offset is committed to Kafka only after the Postgres transaction
 * that processed everything below it has committed, never moves backwards (but where the
 * database itself went back: its start is decided again, idem_part_await_start()), and is never
 * committed for a partition that is no longer assigned (a revoked partition is gone from the table,
 * and comes back with fresh bookkeeping). See ARCHITECTURE.md, "Invariants".
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
	int stall_warnings;  /* warnings logged that it is still in flight (idem_daemon.c) */
	idem_status r;
	struct idem_flush_stats st;
	idem_error err;
};

/*
 * The fetch side of a partition: whether its queue is read and, if not, why and until when. One
 * state at a time, in @state; the transition functions below are its only writers, and of
 * @wake_at_ms, each named for the event. A transition its source state does not allow is refused: a
 * no-op that returns false, never an assert, because a LEAVING partition still receives the events
 * of its batches (it drains) and must refuse the rest. Every (state, event) pair is in the table of
 * tests/unit/test_idem_part.c; in short (- refused):
 *
 *   event \ from  FETCHING     HELD         RETRY_WAIT   SCHEMA_WAIT  HALTED    LEAVING  STARTING
 *   hold          HELD (busy)  HELD (busy)  -            -            -         -        -
 *   release       FETCHING     FETCHING     FETCHING     FETCHING     -         LEAVING  -
 *   retry_at      RETRY_WAIT   RETRY_WAIT   RETRY_WAIT   RETRY_WAIT   -         LEAVING  -
 *   wait_schema   SCHEMA_WAIT  SCHEMA_WAIT  -            SCHEMA_WAIT  -         -        -
 *   halt          HALTED       HALTED       HALTED       HALTED       -         LEAVING  -
 *   due (time)    -            -            FETCHING     FETCHING     FETCHING  -        -
 *   leave         LEAVING      LEAVING      LEAVING      LEAVING      LEAVING   LEAVING  LEAVING
 *   await_start   STARTING     STARTING     STARTING     STARTING     STARTING  -        STARTING
 *   start         -            -            -            -            -         -        FETCHING
 * (await_start is refused with a batch in flight.)
 *
 * Kept apart from it, because they hold in several states at once:
 * - @busy: a batch is in flight, owned by a worker. Any state but HALTED may have one: HELD
 *   always does, RETRY_WAIT while its failed batch is retried (it stays paused until that one
 *   is done), SCHEMA_WAIT when the wait began with one in flight, LEAVING while it drains.
 * - @poison_at: halted at a poison message, from the batch that halted to the first that
 *   commits past it, through the waits, retries and fetches again in between (readiness must
 *   not come and go with each retry of a partition still stuck).
 */
enum idem_part_state {
	/* Its queue is read, as far as its batch has room (idem_daemon.c can_take()). */
	IDEM_PART_FETCHING = 0,
	/* Backpressure: its next batch filled up, or batch.max_bytes_total was reached, while one
	 * was in flight; until that one is done. Its queue is not read while the batch stays full
	 * or the bytes over budget (can_take() asks: bytes another partition releases let it read
	 * again meanwhile, still HELD). */
	IDEM_PART_HELD,
	/* A failed batch waits for wake_at_ms to be retried (then handed over again, still in
	 * RETRY_WAIT until it is done). Paused, as are the next two. */
	IDEM_PART_RETRY_WAIT,
	/* Its next message (at fetch_next) waits for the schema registry; fetched again from it
	 * at wake_at_ms, or as soon as the batch in flight is done. */
	IDEM_PART_SCHEMA_WAIT,
	/* Stopped at a poison message (routes[].on_poison: halt); fetched again from it at
	 * wake_at_ms, every retry.max_ms. */
	IDEM_PART_HALTED,
	/* Being revoked or shut down: drained (its batches still committed, failed ones retried
	 * at wake_at_ms), never fetched again. Final: the entry goes with it. */
	IDEM_PART_LEAVING,
	/* Its start is not decided (idem_resume: a fact unreadable, a rename made in the
	 * configuration only), at assignment or after the database went back: paused, nothing
	 * taken, nothing committed, its offsets unknown; decided again every few seconds
	 * (idem__daemon_check_starts()), then started where the rule says. */
	IDEM_PART_STARTING,
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
	bool busy; /* a batch in flight (idem_part_hand_over() to its collection) */
	enum idem_part_state state; /* written by the transition functions only */
	int64_t wake_at_ms;   /* monotonic time a RETRY_WAIT, SCHEMA_WAIT or HALTED partition (or a
	                         LEAVING one's failed batch) is tried again; 0: none pending */
	int64_t poison_at;    /* the poison message's offset while halted at it (see above); -1 */
	bool schema_warned;   /* a wait for the schema registry was logged (warn), its message not
	                         taken since: a wait again logs at debug, then "schema found" */
	int drain_tries;      /* attempts left while draining */
	int failures;         /* consecutive failed attempts of the current batch */
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
	int64_t log_first;       /* where the consumer's first start on the log began; -1 unknown */
	int start_wait;          /* STARTING: what its start waits for (enum idem_resume_wait of
	                            idem_resume.h, a layer above; 0: nothing) */
	int64_t start_logged_ms; /* STARTING: when the wait was last logged; 0 never */
	bool went_back; /* STARTING because the database went back (counted then, not again when
	                   its start is decided) */
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
 * @brief Add an assigned partition (no-op if present), FETCHING, with empty batches, no retry
 * pending and unknown offsets (-1).
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

/*
 * @brief How many assigned partitions are halted at a poison message (@poison_at: in HALTED, or
 * since fetching it again, until a batch commits past it).
 */
size_t idem_parts_halted(const struct idem_parts *ps);

/* @brief The state's name, in lowercase ("fetching", "held", ...). */
const char *idem_part_state_str(enum idem_part_state state);

/*
 * The transitions of enum idem_part_state, one per event (table above). Each returns true when
 * its source state allows the event (the state may stay the same), false when it refuses it,
 * changing nothing. Only these (idem_part_await_start() and idem_part_start() among them) write
 * @state and @wake_at_ms.
 */

/*
 * @brief Its next batch is full (or the bytes over budget) while one is in flight: FETCHING or
 * HELD -> HELD. Refused without a batch in flight (@busy): a partition with nothing in flight
 * hands its batch over instead, so every HELD partition has one, whose end releases it.
 */
bool idem_part_hold(struct idem_part *p);

/*
 * @brief Its batch in flight committed: a hold or a wait ends (FETCHING, HELD, RETRY_WAIT,
 * SCHEMA_WAIT -> FETCHING), so do a failed batch's failures and a halt (@poison_at). LEAVING
 * stays LEAVING, its retry no longer pending. Refused in HALTED (no batch in flight there).
 */
bool idem_part_release(struct idem_part *p);

/*
 * @brief Its batch in flight failed and is taken back, to be tried again at @when_ms: counts the
 * failure, FETCHING, HELD, RETRY_WAIT, SCHEMA_WAIT -> RETRY_WAIT. LEAVING stays LEAVING, the
 * retry pending at @when_ms (a drain with several tries waits for it). Refused in HALTED.
 */
bool idem_part_retry_at(struct idem_part *p, int64_t when_ms);

/*
 * @brief Its next message waits for the schema registry until @when_ms: FETCHING, HELD,
 * SCHEMA_WAIT -> SCHEMA_WAIT. Refused in RETRY_WAIT and HALTED (nothing is taken while they
 * wait) and LEAVING (never fetched).
 */
bool idem_part_wait_schema(struct idem_part *p, int64_t when_ms);

/*
 * @brief Its batch in flight committed up to a poison message at @offset (on_poison: halt),
 * fetched again from it at @when_ms: FETCHING, HELD, RETRY_WAIT, SCHEMA_WAIT -> HALTED, with
 * @poison_at = @offset and no failures. LEAVING stays LEAVING, @poison_at set (readiness
 * counts it until it goes) and the retry pending at @when_ms. Refused in HALTED.
 */
bool idem_part_halt(struct idem_part *p, int64_t when_ms, int64_t offset);

/*
 * @brief The wait of a RETRY_WAIT, SCHEMA_WAIT or HALTED partition is over at @now_ms
 * (wake_at_ms passed) and its queue is read again: -> FETCHING. Refused before its time, in
 * the other states, and with a batch in flight (a retry in flight ends by release or
 * retry_at). A RETRY_WAIT partition with a batch in hand is not woken but hands it over,
 * staying RETRY_WAIT until that retry is done.
 */
bool idem_part_due(struct idem_part *p, int64_t now_ms);

/*
 * @brief Bring the wait of a RETRY_WAIT, SCHEMA_WAIT or HALTED partition forward to @now_ms
 * (SIGHUP: idem_daemon_retry_now()); its state stays. Refused in the other states, with a batch in
 * flight, or when its time already came.
 */
bool idem_part_wake_now(struct idem_part *p, int64_t now_ms);

/*
 * @brief It is being revoked or shut down: any state -> LEAVING, for good (the entry goes with
 * it). A retry pending stays pending (the drain waits for it), and so does a halt.
 */
bool idem_part_leave(struct idem_part *p);

/*
 * @brief Its start is not known (at assignment, or the database went back): FETCHING, HELD,
 * RETRY_WAIT, SCHEMA_WAIT, HALTED, STARTING -> STARTING. Its batches are dropped, its offsets
 * forgotten (-1: nothing is committed for it), a wait, a halt and failures end. Refused with a
 * batch in flight (its end comes first) and in LEAVING.
 */
bool idem_part_await_start(struct idem_part *p);

/*
 * @brief Its start is decided: STARTING -> FETCHING, read from @offset (fetch_next). Refused in
 * the other states.
 */
bool idem_part_start(struct idem_part *p, int64_t offset);

/* @brief Is @p STARTING? */
bool idem_part_starting(const struct idem_part *p);

/* @brief Is @p's queue read (FETCHING or HELD; HELD only while the batch has room)? */
bool idem_part_fetching(const struct idem_part *p);

/*
 * @brief Is @p paused: RETRY_WAIT, SCHEMA_WAIT, HALTED, or LEAVING with a failed batch's retry
 * (or a halt) pending? librdkafka was told to pause it when it began to wait, and what still
 * arrives of it is dropped, fetched again where it resumes (idem_consumer_resume()).
 */
bool idem_part_paused(const struct idem_part *p);

/* @brief Is @p LEAVING? */
bool idem_part_leaving(const struct idem_part *p);

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
 * @brief Record that a batch ending before @next committed in Postgres (its offsets only: the
 * state's part is idem_part_release() or idem_part_halt()).
 * @returns true when Kafka should be told (@next is beyond what was stored); the caller then
 * stores it and calls idem_part_stored().
 */
bool idem_part_committed(struct idem_part *p, int64_t next);
void idem_part_stored(struct idem_part *p, int64_t next);

/*
 * @brief Does Kafka lack @p's stored offset, which may be committed (the commit list of
 * idem_daemon.c)? With @only_leaving (revoke) only if LEAVING.
 */
bool idem_part_commit_due(const struct idem_part *p, bool only_leaving);

#endif
