/*
 * idem_bind.h - turning a batch's messages into the parameters of the statements of
 * idem_sql.h and of the handlers: binary arrays for the claims (struct idem_bind_claim), array
 * literals for the results, one row of parameters for a row-mode handler, one text[] per
 * parameter for a set-mode handler, the quarantine row, the progress row.
 *
 * Message data reaches SQL only as bound parameters: text parameters (NUL-terminated, so a NUL
 * inside is refused, as idem_batch_add() already refuses it in handler parameters) or binary
 * ones (the claims' arrays; bytea for the quarantined key and value). Array literals quote
 * every element, so '{', '}', ',', '"', '\\' and whitespace survive; NULL elements stand for
 * absent fields.
 *
 * A struct idem_bind is scratch space owned by one flush session (one thread): every call
 * rebuilds what it fills, and the pointers it hands out stay valid until the next call that
 * fills the same parameters. libpq copies parameters when a statement is sent, so they may be
 * rebuilt at once after sending.
 */
#ifndef IDEM_BIND_H
#define IDEM_BIND_H

#include "idem_batch.h"
#include "idem_common.h"

/* A key of a combined claim: message @i of batch @b, the @k-th batch of the transaction. */
struct idem_bind_ref {
	const struct idem_batch *b;
	size_t k;
	size_t i;
};

/* IDEM_SQL_PROGRESS's parameters (idem_bind_progress() fills this many values). */
#define IDEM_BIND_PROGRESS_PARAMS 20

struct idem_bind {
	struct idem_buf keys, offs, hashes;  /* the claim's arrays */
	struct idem_buf cons, topics, parts; /* and the combined claim's */
	struct idem_buf rkeys, rvals;        /* the results' */
	struct idem_buf hnames, hvals;       /* a quarantined message's headers */
	struct idem_buf dkeys;               /* keys of duplicates, to look up their claims */
	struct idem_buf reply[6];            /* the replies' arrays */
	struct idem_buf trace[4];            /* IDEM_SQL_TRACES' arrays */
	size_t n_trace;                      /* and how many messages they hold */
	char rpart[16];                      /* and their partition */
	struct idem_buf prog[IDEM_BIND_PROGRESS_PARAMS]; /* the progress rows' columns */
	struct idem_buf *set; /* set mode: one text[] per handler parameter */
	size_t cap_set;
	const char **vals; /* parameters of the last row, set or quarantine bound */
	int *lens, *fmts;
	size_t cap_vals;
	struct idem_bind_ref *refs; /* the combined claim's keys, in claim order */
	size_t cap_refs;
	char part[16], off[24], ts[24], att[16];
};

void idem_bind_init(struct idem_bind *bd);
void idem_bind_done(struct idem_bind *bd);

/*
 * A claim's parameters as libpq takes them: its arrays are in binary (idem_pgbin_open()), so
 * the server neither parses them nor decodes the hashes' hex (measured in tests/bench/README.md,
 * "Where each message's cost goes").
 */
#define IDEM_BIND_CLAIM_PARAMS 6
struct idem_bind_claim {
	const char *vals[IDEM_BIND_CLAIM_PARAMS];
	int lens[IDEM_BIND_CLAIM_PARAMS];
	int fmts[IDEM_BIND_CLAIM_PARAMS];
};

/*
 * @brief The claim (IDEM_SQL_CLAIM) of the keys of messages idx[0..n) of @b, in that order but
 * for the late ones (idem_batch_mark_late()), which come after the others in the same order,
 * into @ret. A late key is one another transaction of this process has in flight: the claim
 * waits for that transaction's end at its first late key (the unique index), so every other
 * key is claimed before that wait rather than after it (ARCHITECTURE.md "The transaction", 1).
 */
IDEM_NODISCARD idem_status idem_bind_claim(struct idem_bind *bd, const struct idem_batch *b,
                                           const size_t *idx, size_t n,
                                           struct idem_bind_claim *ret);

/*
 * @brief The combined claim (IDEM_SQL_CLAIM_MANY) of the keys (b[k]->order) of the batches
 * b[0..n), @n_keys in all, into @ret. Keys are claimed in one order: the late ones last, as in
 * idem_bind_claim(); then by key bytes like a single batch's (idem_batch_collapse()), so that
 * it does not cross the order of another transaction's claims (ARCHITECTURE.md "The
 * transaction", 1, says when the late keys can, and what then happens); then by consumer, as a
 * key is locked per consumer; then by batch, the first one winning a key that two batches of
 * one consumer carry, as if it had been flushed first on its own. *ret_one: the batches share
 * one consumer and one topic, given once in ret->vals[0] and ret->vals[2] for
 * IDEM_SQL_CLAIM_PARTS.
 */
IDEM_NODISCARD idem_status idem_bind_claim_many(struct idem_bind *bd,
                                                const struct idem_batch *const *b, size_t n,
                                                size_t n_keys, struct idem_bind_claim *ret,
                                                bool *ret_one);

/*
 * @brief IDEM_SQL_PROGRESS_GET of the partitions of the batches b[0..n) into ret_vals[0..3): the
 * result has one row per batch, in that order.
 */
IDEM_NODISCARD idem_status idem_bind_progress_get(struct idem_bind *bd,
                                                  const struct idem_batch *const *b, size_t n,
                                                  const char **ret_vals);

/*
 * @brief The keys of the messages of @b that are IDEM_MSG_DUPLICATE into bd->dkeys, and their
 * indices into @ret_idx (room for b->n_msgs), sorted by key; *ret_n of them.
 */
IDEM_NODISCARD idem_status idem_bind_dup_keys(struct idem_bind *bd, const struct idem_batch *b,
                                              size_t *ret_idx, size_t *ret_n);

/*
 * @brief The same for several batches of one consumer, in one array (one IDEM_SQL_CLAIMS_GET
 * for them all): idem_bind_dup_keys_open(), idem_bind_dup_keys_add() for each batch (its own
 * @ret_idx and *ret_n as above), idem_bind_dup_keys_close().
 */
IDEM_NODISCARD idem_status idem_bind_dup_keys_open(struct idem_bind *bd);
IDEM_NODISCARD idem_status idem_bind_dup_keys_add(struct idem_bind *bd, const struct idem_batch *b,
                                                  size_t *ret_idx, size_t *ret_n);
IDEM_NODISCARD idem_status idem_bind_dup_keys_close(struct idem_bind *bd);

/*
 * @brief The results (IDEM_SQL_RESULTS) of @b's APPLIED messages that have one, into
 * ret_vals[0..3); *ret_any is false when none has (nothing to send).
 */
IDEM_NODISCARD idem_status idem_bind_results(struct idem_bind *bd, const struct idem_batch *b,
                                             bool *ret_any, const char **ret_vals);

/* @brief Row mode: message @i's handler parameters into bd->vals[0..route->n_params). */
IDEM_NODISCARD idem_status idem_bind_row(struct idem_bind *bd, const struct idem_batch *b,
                                         size_t i);

/*
 * @brief Set mode: start @n_params empty text[] parameters; idem_bind_set_add() appends one
 * message to each, idem_bind_set_close() finishes them into bd->vals[0..n_params).
 * idem_bind_set_add() returns IDEM_ERR_INVALID for a parameter with a NUL byte.
 */
IDEM_NODISCARD idem_status idem_bind_set_open(struct idem_bind *bd, size_t n_params);
IDEM_NODISCARD idem_status idem_bind_set_add(struct idem_bind *bd, const struct idem_batch *b,
                                             size_t i);
IDEM_NODISCARD idem_status idem_bind_set_close(struct idem_bind *bd, size_t n_params);

/*
 * @brief Append element @s[0..n) (NULL when @null) to the text[] literal @a, refusing a NUL
 * byte (IDEM_ERR_INVALID), which a text parameter cannot carry.
 */
IDEM_NODISCARD idem_status idem_bind_text_elem(struct idem_buf *a, const char *s, size_t n,
                                               bool null);

/*
 * @brief Quarantine message @i of @b (IDEM_SQL_QUARANTINE) into bd->vals, bd->lens and
 * bd->fmts [0..13): key and value as binary bytea, headers as text[] names and bytea[] values;
 * [13] is the route's dead_letter_topic, [14] and [15] the traceparent and tracestate to pass
 * on (NULL: none), for IDEM_SQL_QUARANTINE_DLT.
 */
IDEM_NODISCARD idem_status idem_bind_quarantine(struct idem_bind *bd, const struct idem_batch *b,
                                                size_t i);

/*
 * @brief IDEM_SQL_TRACES for the messages a transaction applies: idem_bind_traces_add() adds
 * each message idx[0..n) of @b that has trace context to the arrays idem_bind_traces_open()
 * opened; idem_bind_traces_close() puts them into ret_vals[0..4), *ret_n how many (0: nothing
 * to send).
 */
IDEM_NODISCARD idem_status idem_bind_traces_open(struct idem_bind *bd);
IDEM_NODISCARD idem_status idem_bind_traces_add(struct idem_bind *bd, const struct idem_batch *b,
                                                const size_t *idx, size_t n);
IDEM_NODISCARD idem_status idem_bind_traces_close(struct idem_bind *bd, const char **ret_vals,
                                                  size_t *ret_n);

/*
 * @brief The replies (IDEM_SQL_REPLIES) of @b's messages, in offset order, into
 * ret_vals[0..10): every APPLIED message, and with routes[].reply.duplicates every upstream
 * duplicate (marked a repeat); *ret_n counts them (0: nothing to send). Needs route->reply_topic.
 */
IDEM_NODISCARD idem_status idem_bind_replies(struct idem_bind *bd, const struct idem_batch *b,
                                             size_t *ret_n, const char **ret_vals);

/* What a committed batch adds to its partition's row of idem.partition_progress. */
struct idem_bind_progress {
	const struct idem_batch *b;
	int64_t next_offset;
	uint64_t counts[8]; /* consumed, applied, duplicates, quarantined, redelivery, replay,
	                       upstream, payload mismatches: the columns' order */
	bool halted;
	const char *halt_reason;
	int64_t reapply_to; /* the end of a gap being read again, if beyond next_offset; else -1 */
	uint64_t reapplied; /* messages of the batch below that end */
};

/*
 * @brief IDEM_SQL_PROGRESS of the partitions p[0..n) (distinct) into
 * ret_vals[0..IDEM_BIND_PROGRESS_PARAMS). @p is sorted by consumer, topic and partition first, so
 * that concurrent transactions lock the rows in one order.
 */
IDEM_NODISCARD idem_status idem_bind_progress(struct idem_bind *bd, struct idem_bind_progress *p,
                                              size_t n, const char **ret_vals);

#endif
