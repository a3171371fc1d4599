/*
 * idem_batch.h - one partition's batch of decoded messages.
 *
 * Messages are copied into one arena per batch at add time (librdkafka's message is released
 * at once, and the arena is reused from batch to batch, so the hot path does not allocate per
 * message once warmed up; an arena that grew beyond IDEM_BATCH_KEEP_BYTES for large messages is
 * freed when the batch is reset, so that memory follows the bytes held). Business key and
 * handler parameters are extracted at add time; a message whose key cannot be extracted is kept
 * with its reason, for quarantine.
 */
#ifndef IDEM_BATCH_H
#define IDEM_BATCH_H

#include <sys/types.h>

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_field.h"

enum idem_msg_state {
	IDEM_MSG_PENDING = 0,  /* decoded, not yet claimed */
	IDEM_MSG_DUP_IN_BATCH, /* same key as a lower offset in this batch */
	IDEM_MSG_BAD,          /* cannot be processed (reason set): to quarantine */
	IDEM_MSG_APPLIED,      /* claimed and handler ran */
	IDEM_MSG_DUPLICATE,    /* claim existed already */
	IDEM_MSG_QUARANTINED,  /* written to idem.quarantine */
};

/* Why a duplicate is one (ARCHITECTURE.md, "The transaction"; sql/0002_failures.sql). */
enum idem_dup_kind {
	IDEM_DUP_NONE = 0,
	IDEM_DUP_REDELIVERY, /* the claim was made by this very message (same
	                        topic/partition/offset) */
	IDEM_DUP_REPLAY,   /* claimed by another message; this one is below the recorded progress */
	IDEM_DUP_UPSTREAM, /* claimed by another message; this one is new */
};

/* A span of the batch arena; off/len in bytes. */
struct idem_span {
	size_t off;
	size_t len;
	bool null;
};

/* The claim a duplicate ran into, as found in idem.processed_messages. */
struct idem_batch_claim {
	bool found;             /* false: not looked up, or gone (purged) */
	bool same_topic;        /* claim's topic is the batch's topic */
	struct idem_span topic; /* claim's topic, when not the batch's */
	int32_t partition;      /* claim's partition */
	int64_t offset;         /* claim's offset */
	struct idem_span hash;  /* claim's payload_hash, hex; null if it has none */
};

struct idem_batch_msg {
	int64_t offset;
	int64_t timestamp_ms;
	struct idem_span key;
	struct idem_span value;
	size_t hdr_first; /* index into batch->hdrs */
	size_t n_hdrs;
	struct idem_span bkey;        /* the business key (text, NUL-terminated in the arena) */
	size_t param_first;           /* index into batch->params; route->n_params of them */
	struct idem_span hash;        /* payload hash of the value, hex, NUL-terminated */
	struct idem_span reason;      /* why it is BAD or failed; NUL-terminated */
	struct idem_span result;      /* the handler's result, if any */
	struct idem_span traceparent; /* the one idemd passes on (idem_field_trace()), or null */
	struct idem_span tracestate;  /* passed on with it, or null */
	char sqlstate[6];
	int attempts;
	enum idem_msg_state state;
	bool undecodable;              /* BAD since idem_batch_add(): no attempt can change that */
	size_t winner;                 /* DUP_IN_BATCH: index of the message whose key wins */
	enum idem_dup_kind dup;        /* DUPLICATE and DUP_IN_BATCH, once classified */
	bool mismatch;                 /* a duplicate whose payload differs from its claim's */
	bool quarantined_before;       /* BAD, and idem.quarantine had its position already */
	struct idem_batch_claim claim; /* DUPLICATE: the claim it ran into */
	uint64_t khash;                /* its business key's hash (idem_batch_key_hashes()) */
	bool late; /* claimed after the batch's other keys: a transaction in flight claims its key
	              too (idem_batch_mark_late()) */
};

struct idem_batch_hdr {
	struct idem_span name;
	struct idem_span value;
};

struct idem_batch {
	const struct idem_route *route;
	char *topic; /* owned */
	int32_t partition;
	int64_t opened_ms;    /* monotonic time of the first add */
	int64_t opened_us;    /* the same in microseconds, for the stage metrics */
	int64_t first_lag_ms; /* the first message's producer timestamp to its poll, or -1 */

	struct idem_batch_msg *msgs;
	size_t n_msgs, cap_msgs;
	struct idem_batch_hdr *hdrs;
	size_t n_hdrs, cap_hdrs;
	struct idem_span *params;
	size_t n_params, cap_params;
	size_t *order; /* after collapse: indices of unique PENDING keys, sorted by key bytes */
	size_t n_order, cap_order;
	uint64_t chash; /* its consumer's hash, mixed into its keys' (idem_batch_key_hashes()) */
	bool hashed;    /* khash and chash are set (idem_batch_key_hashes()) */
	struct idem_buf arena;
	size_t bytes; /* arena bytes taken by idem_batch_add() (messages, keys, parameters,
	                 hashes): what counts against batch.max_bytes and batch.max_bytes_total;
	                 kept by idem_batch_truncate(), zeroed by idem_batch_reset() */

	/* scratch, reused */
	struct idem_jsondoc doc; /* doc.framed from the route; doc.schema_fn set by the owner */
	char wait_reason[1024];  /* why idem_batch_add() last said IDEM_ERR_UNAVAILABLE */
	struct idem_buf scratch;
	struct evp_md_ctx_st *md_ctx; /* SHA-256 of the values, created on first use */

	/* Failed commits of these messages, kept across attempts; cleared by idem_batch_reset().
	 * The partition's delivery state (retries, fetch position) is in struct idem_part. */
	int claim_timeouts; /* attempts whose claim ran into lock_timeout/statement_timeout */

	/* What the database must hold for the partition (ARCHITECTURE.md "When the database goes
	 * back"), set by the daemon when it hands the batch over: */
	int64_t db_floor;   /* next_offset as this process last read or committed it; -1: none */
	int64_t reapply_to; /* the end of a gap being read again, as the daemon knows it; -1 */
	const char *kafka_cluster; /* the Kafka cluster its offsets are in (struct idem_part's),
	                              NULL or "": unknown */
	int64_t log_first;    /* where the consumer's first start on the log began; -1 unknown */
	const char *group_id; /* the consumer group reading it (kafka.group_id); NULL unknown */
	int32_t log_epoch;    /* the log's epoch (struct idem_part's) */
	/* and what the last attempt found there: next_offset (-1: no row). */
	int64_t db_next;
};

/*
 * The payload hash a claim stores (processed_messages.payload_hash), to tell a duplicate with a
 * different payload (routes[].on_payload_mismatch): the first 8 bytes (64 bits) of the value's
 * SHA-256. It is compared only with the payloads of one business key, never searched for, so
 * what matters is that two different payloads of one key agree by chance: probability 2^-64
 * per re-send. 8 bytes rather than 16 make each claim 8 bytes smaller on the heap (the alignment
 * of processed_at after it), and the write-ahead log with it (ARCHITECTURE.md "What a claim
 * costs"). Claims made with a longer hash keep it and compare on the part both have.
 */
#define IDEM_BATCH_HASH_BYTES 8

/*
 * Transaction size follows the load. A batch that can go at once goes at batch.max_messages;
 * one that must wait for its partition's batch in flight keeps filling meanwhile, up to
 * IDEM_BATCH_GROW times that: waiting, it can go no sooner, and under a backlog the next
 * transaction then spreads its commit over what arrived during the last one. batch.max_bytes
 * and batch.max_bytes_total bound both (idem_daemon); a worker's transaction takes batches up to
 * the largest one (idem_pool): one grown batch, or several smaller ones. Four, not two: a
 * transaction then carries about as many messages as before but of fewer partitions, so a set
 * handler that sums per account updates each account less often (tests/bench/README.md
 * "Batches that grow four times").
 */
#define IDEM_BATCH_GROW 4

/* Arena and scratch memory a reset batch keeps for the next one; larger buffers are freed. */
#define IDEM_BATCH_KEEP_BYTES ((size_t)256 * 1024)

/* @brief Initialise an empty batch for @topic/@partition served by @route. */
IDEM_NODISCARD idem_status idem_batch_init(struct idem_batch *b, const struct idem_route *route,
                                           const char *topic, int32_t partition);
void idem_batch_done(struct idem_batch *b);
/*
 * @brief Forget every message (and the claim timeouts counted for them); keep the memory, up to
 * IDEM_BATCH_KEEP_BYTES of arena and of scratch (larger ones are freed).
 */
void idem_batch_reset(struct idem_batch *b);

/*
 * @brief Keep only the first @n messages (offset order), for a batch about to be committed up
 * to a poison message. Their bytes stay in the arena.
 */
void idem_batch_truncate(struct idem_batch *b, size_t n);

/*
 * @brief Copy @m into the batch and decode it (business key, parameters, payload hash), adding
 * the arena bytes it takes to b->bytes. A message that cannot be decoded is added as
 * IDEM_MSG_BAD with its reason; only memory exhaustion fails.
 */
IDEM_NODISCARD idem_status idem_batch_add(struct idem_batch *b, const struct idem_msgview *m,
                                          const struct idem_cfg *cfg, int64_t now_ms);

/*
 * @brief Mark in-batch duplicates (the lowest offset of a key wins) and fill b->order with
 * the winners sorted by key bytes, the order claims are made in (so that concurrent claimants
 * lock keys in one global order; but for the late keys, idem_bind_claim()).
 */
IDEM_NODISCARD idem_status idem_batch_collapse(struct idem_batch *b);

/*
 * @brief Classify a duplicate at @offset of the batch's partition, given the claim it ran into
 * (@claim, NULL or not found when unknown) and the partition's recorded progress before this
 * batch (@progress_next, -1 when none): idem_batch_dup_kind_replay() with no replay pending.
 */
enum idem_dup_kind idem_batch_dup_kind(int32_t partition, int64_t offset,
                                       const struct idem_batch_claim *claim, int64_t progress_next);

/*
 * @brief The same, with the end of the range a replay (`idemctl replay`) is reading again
 * (@replay_to, idem.partition_progress.replay_to, -1 when none): a duplicate below it is a
 * replay whoever made its claim, as the operator asked for the range to be read again.
 * Otherwise a duplicate of this very message's claim is a redelivery, one below the recorded
 * progress a replay, anything else upstream.
 */
enum idem_dup_kind idem_batch_dup_kind_replay(int32_t partition, int64_t offset,
                                              const struct idem_batch_claim *claim,
                                              int64_t progress_next, int64_t replay_to);

/*
 * @brief Classify every duplicate of @b once its claims are known (redelivery, replay,
 * upstream; an in-batch duplicate by its winner's claim, made in this very transaction if the
 * winner was APPLIED) and compare its payload with its claim's. With routes[].on_payload_mismatch:
 * quarantine, a mismatching duplicate becomes BAD, with its reason.
 * @param progress_next the partition's recorded progress before this batch, -1 when none.
 * @param replay_to the end of the range a replay reads again, -1 when none
 * (idem_batch_dup_kind_replay()).
 * @returns IDEM_OK or IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_batch_classify(struct idem_batch *b, int64_t progress_next,
                                               int64_t replay_to);

/* @brief Name of a duplicate kind ("redelivery", "replay", "upstream", "none"). */
const char *idem_batch_dup_str(enum idem_dup_kind k);

/*
 * @brief Does message @i's payload differ from that of the claim @claim (same arena)?
 * false when the claim is unknown.
 */
bool idem_batch_payload_differs(const struct idem_batch *b, size_t i,
                                const struct idem_batch_claim *claim);

/*
 * @brief Record the claim that message @i ran into (@topic and @hash are copied into the arena;
 * @hash NULL when the claim has none).
 */
IDEM_NODISCARD idem_status idem_batch_set_claim(struct idem_batch *b, size_t i, const char *topic,
                                                int32_t partition, int64_t offset, const char *hash,
                                                size_t hash_len);

/*
 * @brief Hash the business keys @b's PENDING messages claim (each message's khash, and the
 * consumer's chash), every message not late, for idem_keyset_build() and
 * idem_batch_mark_late(). Called on the consumer thread as the batch is handed to the workers
 * (idem_pool_submit()).
 */
void idem_batch_key_hashes(struct idem_batch *b);

/*
 * The business keys of one transaction's batches, each with its consumer (the claims'
 * namespace): an open-addressing set of 64-bit hashes (0: an empty slot), mask + 1 slots, empty
 * while mask is 0. A worker builds it for the group it takes, so that the groups taken after it
 * mark their keys against one set rather than against each of its batches.
 */
struct idem_keyset {
	uint64_t *v;
	size_t mask, cap;
};

/*
 * @brief Make @s the set of the keys @b[0..n) claim (each hashed: idem_batch_key_hashes()).
 * @returns IDEM_ERR_NOMEM with @s left empty (its keys are then never found: only the order of
 * other claims changes).
 */
idem_status idem_keyset_build(struct idem_keyset *s, struct idem_batch *const *b, size_t n);

/* @brief Empty @s, keeping its memory (up to IDEM_BATCH_KEEP_BYTES). */
void idem_keyset_clear(struct idem_keyset *s);

/* @brief Free @s's memory; @s is empty. */
void idem_keyset_free(struct idem_keyset *s);

/*
 * @brief Mark late each PENDING message of @b whose key (of @b's consumer) is in @s: never
 * missed, and by chance for two different keys about once in 2^64 pairs, which only changes
 * the order of a claim. Returns how many it marked.
 */
size_t idem_batch_mark_late(struct idem_batch *b, const struct idem_keyset *s);

/* @brief Sort @idx[0..n) (indices into b->msgs) by business key bytes, then offset. */
void idem_batch_sort_by_key(const struct idem_batch *b, size_t *idx, size_t n);

/*
 * @brief The first position in @idx[0..n) (sorted by idem_batch_sort_by_key()) whose message has
 * business key @k, or n if none has.
 */
size_t idem_batch_lower_bound(const struct idem_batch *b, const size_t *idx, size_t n,
                              const char *k, size_t klen);

/* @brief Index in b->msgs of the PENDING message with business key @k (in b->order), or -1. */
ssize_t idem_batch_find_key(const struct idem_batch *b, const char *k, size_t klen);

/*
 * @brief Index in b->msgs of the PENDING message at Kafka offset @offset, or -1: what a claim's
 * returned row names. Messages are in offset order as consumed (a binary search); should they
 * not be, every message is looked at.
 */
ssize_t idem_batch_find_offset(const struct idem_batch *b, int64_t offset);

/* @brief Pointer to span @s in the arena (valid until the next add). */
static inline const char *idem_batch_ptr(const struct idem_batch *b, struct idem_span s)
{
	return s.null ? NULL : b->arena.data + s.off;
}

/* @brief Set message @i's reason text (copied into the arena). */
IDEM_NODISCARD idem_status idem_batch_set_reason(struct idem_batch *b, size_t i, const char *reason,
                                                 const char *sqlstate);
IDEM_NODISCARD idem_status idem_batch_set_result(struct idem_batch *b, size_t i, const char *res,
                                                 size_t len, bool null);

#endif
