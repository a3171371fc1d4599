/*
 * idem_batch.c - decoding messages into a partition batch, in-batch duplicate collapse, and the
 * classification of duplicates once their claims are known.
 */
#include "idem_batch.h"

#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static idem_status grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *np;

	if (need <= *cap)
		return IDEM_OK;
	ncap = *cap ? *cap : 64;
	while (ncap < need)
		ncap *= 2;
	np = realloc(*p, ncap * elem);
	if (np == NULL)
		return IDEM_ERR_NOMEM;
	*p = np;
	*cap = ncap;
	return IDEM_OK;
}

#define GROW(arr, capv, need) grow((void **)&(arr), &(capv), (need), sizeof(*(arr)))

/* Append bytes (plus a NUL, not counted) to the arena and describe them as a span. */
static idem_status arena_put(struct idem_batch *b, const void *p, size_t n, struct idem_span *ret)
{
	size_t off = b->arena.len;

	if (p == NULL) {
		*ret = (struct idem_span){ 0, 0, true };
		return IDEM_OK;
	}
	if (idem_buf_append(&b->arena, p, n) != IDEM_OK || idem_buf_append(&b->arena, "", 1))
		return IDEM_ERR_NOMEM;
	*ret = (struct idem_span){ off, n, false };
	return IDEM_OK;
}

idem_status idem_batch_init(struct idem_batch *b, const struct idem_route *route, const char *topic,
                            int32_t partition)
{
	memset(b, 0, sizeof(*b));
	b->route = route;
	b->partition = partition;
	b->db_floor = -1;
	b->reapply_to = -1;
	b->db_next = -1;
	b->topic = strdup(topic);
	if (b->topic == NULL)
		return IDEM_ERR_NOMEM;
	idem_jsondoc_init(&b->doc);
	b->doc.framed = route != NULL && route->value_format == IDEM_CFG_VALUE_JSON_SCHEMA;
	b->doc.validate = b->doc.framed && route->validate;
	return IDEM_OK;
}

void idem_batch_done(struct idem_batch *b)
{
	if (b == NULL)
		return;
	free(b->topic);
	free(b->msgs);
	free(b->hdrs);
	free(b->params);
	free(b->order);
	idem_buf_done(&b->arena);
	idem_buf_done(&b->scratch);
	EVP_MD_CTX_free(b->md_ctx);
	idem_jsondoc_done(&b->doc);
	memset(b, 0, sizeof(*b));
}

void idem_batch_reset(struct idem_batch *b)
{
	b->n_msgs = 0;
	b->n_hdrs = 0;
	b->n_params = 0;
	b->n_order = 0;
	b->opened_ms = 0;
	b->opened_us = 0;
	b->first_lag_ms = -1;
	b->claim_timeouts = 0;
	b->bytes = 0;
	/* A batch of large messages must not keep its memory once they are committed: the bytes
	 * held (batch.max_bytes_total) are then what the process holds. */
	if (b->arena.cap > IDEM_BATCH_KEEP_BYTES) {
		idem_buf_done(&b->arena);
		/* The JSON parser keeps a buffer as large as the longest string it read. */
		idem_jsondoc_done(&b->doc);
	}
	if (b->scratch.cap > IDEM_BATCH_KEEP_BYTES)
		idem_buf_done(&b->scratch);
	b->hashed = false;
	idem_buf_reset(&b->arena);
}

void idem_batch_truncate(struct idem_batch *b, size_t n)
{
	if (n < b->n_msgs)
		b->n_msgs = n;
	b->n_order = 0;
}

enum idem_dup_kind idem_batch_dup_kind(int32_t partition, int64_t offset,
                                       const struct idem_batch_claim *claim, int64_t progress_next)
{
	return idem_batch_dup_kind_replay(partition, offset, claim, progress_next, -1);
}

enum idem_dup_kind idem_batch_dup_kind_replay(int32_t partition, int64_t offset,
                                              const struct idem_batch_claim *claim,
                                              int64_t progress_next, int64_t replay_to)
{
	/* idemd resumes from the database (ARCHITECTURE.md, "Invariants"), so Kafka hands over a
	 * message it already committed only when an operator replays it (or, rarely, when the
	 * database position could not be read at assignment, or a zombie owner overlaps the new
	 * one). */
	if (replay_to >= 0 && offset < replay_to)
		return IDEM_DUP_REPLAY;
	if (claim != NULL && claim->found && claim->same_topic && claim->partition == partition &&
	    claim->offset == offset)
		return IDEM_DUP_REDELIVERY;
	if (progress_next >= 0 && offset < progress_next)
		return IDEM_DUP_REPLAY;
	return IDEM_DUP_UPSTREAM;
}

const char *idem_batch_dup_str(enum idem_dup_kind k)
{
	switch (k) {
	case IDEM_DUP_REDELIVERY:
		return "redelivery";
	case IDEM_DUP_REPLAY:
		return "replay";
	case IDEM_DUP_UPSTREAM:
		return "upstream";
	case IDEM_DUP_NONE:
		break;
	}
	return "none";
}

bool idem_batch_payload_differs(const struct idem_batch *b, size_t i,
                                const struct idem_batch_claim *claim)
{
	const struct idem_span *h = &b->msgs[i].hash;
	size_t n;

	if (claim == NULL || !claim->found)
		return false;
	if (h->null || claim->hash.null)
		return h->null != claim->hash.null;
	/* A claim made before schema version 7's idemd kept all of SHA-256: the part both have. */
	n = h->len < claim->hash.len ? h->len : claim->hash.len;
	return memcmp(b->arena.data + h->off, b->arena.data + claim->hash.off, n) != 0;
}

idem_status idem_batch_set_reason(struct idem_batch *b, size_t i, const char *reason,
                                  const char *sqlstate)
{
	struct idem_batch_msg *msg = &b->msgs[i];
	char state[sizeof(msg->sqlstate)];

	/* @sqlstate may be msg->sqlstate itself: copy through a buffer (snprintf must not
	 * overlap). */
	snprintf(state, sizeof(state), "%s", sqlstate ? sqlstate : "");
	memcpy(msg->sqlstate, state, sizeof(state));
	return arena_put(b, reason, strlen(reason), &msg->reason);
}

idem_status idem_batch_set_result(struct idem_batch *b, size_t i, const char *res, size_t len,
                                  bool null)
{
	return arena_put(b, null ? NULL : res, len, &b->msgs[i].result);
}

/*
 * SHA-256, fetched once: passing EVP_sha256() to each digest makes OpenSSL 3 look the
 * algorithm up in its provider tables every time, which costs more than hashing a payment.
 */
static EVP_MD *sha256;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
	sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static idem_status put_hash(struct idem_batch *b, struct idem_batch_msg *msg, const void *p,
                            size_t n)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char text[2 * EVP_MAX_MD_SIZE];

	if (p == NULL) {
		msg->hash = (struct idem_span){ 0, 0, true };
		return IDEM_OK;
	}
	pthread_once(&sha256_once, sha256_fetch);
	if (sha256 == NULL)
		return IDEM_ERR_NOMEM;
	if (b->md_ctx == NULL && (b->md_ctx = EVP_MD_CTX_new()) == NULL)
		return IDEM_ERR_NOMEM;
	if (EVP_DigestInit_ex(b->md_ctx, sha256, NULL) != 1 ||
	    EVP_DigestUpdate(b->md_ctx, p, n) != 1 ||
	    EVP_DigestFinal_ex(b->md_ctx, md, &mdlen) != 1)
		return IDEM_ERR_NOMEM;
	if (mdlen > IDEM_BATCH_HASH_BYTES)
		mdlen = IDEM_BATCH_HASH_BYTES;
	for (unsigned int k = 0; k < mdlen; k++) {
		text[2 * k] = hex[md[k] >> 4];
		text[2 * k + 1] = hex[md[k] & 15];
	}
	return arena_put(b, text, 2 * mdlen, &msg->hash);
}

/* A message that cannot be decoded now (IDEM_ERR_UNAVAILABLE): keep why, for the caller. */
static idem_status batch_wait(struct idem_batch *b, idem_status r, const idem_error *err)
{
	if (r == IDEM_ERR_UNAVAILABLE)
		snprintf(b->wait_reason, sizeof(b->wait_reason), "%s", err->msg);
	return r;
}

/* Decode key and parameters; on a message-specific failure set the reason and state BAD. */
static idem_status decode(struct idem_batch *b, size_t i, const struct idem_msgview *m,
                          const struct idem_cfg *cfg)
{
	const struct idem_route *route = b->route;
	struct idem_batch_msg *msg = &b->msgs[i];
	idem_error err = { 0 };
	idem_status r;

	idem_jsondoc_reset(&b->doc);
	if (m->key_len + m->value_len > cfg->max_message_bytes) {
		char why[160];

		snprintf(why, sizeof(why),
		         "message is %zu bytes, larger than limits.max_message_bytes %zu",
		         m->key_len + m->value_len, cfg->max_message_bytes);
		msg->state = IDEM_MSG_BAD;
		msg->undecodable = true;
		return idem_batch_set_reason(b, i, why, NULL);
	}
	r = idem_key_build(&route->key, m, &b->doc, cfg->max_key_bytes, &b->scratch, &err);
	if (r == IDEM_ERR_NOMEM || r == IDEM_ERR_UNAVAILABLE)
		return batch_wait(b, r, &err);
	if (r != IDEM_OK) {
		char why[sizeof(err.msg) + 64];

		snprintf(why, sizeof(why), "business key: %s", err.msg);
		msg->state = IDEM_MSG_BAD;
		msg->undecodable = true;
		return idem_batch_set_reason(b, i, why, NULL);
	}
	r = arena_put(b, b->scratch.data, b->scratch.len, &msg->bkey);
	if (r != IDEM_OK)
		return r;

	if (GROW(b->params, b->cap_params, b->n_params + route->n_params) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	msg->param_first = b->n_params;
	for (size_t p = 0; p < route->n_params; p++) {
		bool is_null = false;

		/* The business key lives in the arena, which may move as parameters are added:
		 * pass a pointer taken after every append. */
		r = idem_field_get(&route->params[p], m, &b->doc, b->arena.data + msg->bkey.off,
		                   &b->scratch, &is_null, &err);
		if (r == IDEM_ERR_NOMEM || r == IDEM_ERR_UNAVAILABLE)
			return batch_wait(b, r, &err);
		if (r != IDEM_OK) {
			char why[sizeof(err.msg) + 64];

			snprintf(why, sizeof(why), "parameter $%zu: %s", p + 1, err.msg);
			msg->state = IDEM_MSG_BAD;
			msg->undecodable = true;
			return idem_batch_set_reason(b, i, why, NULL);
		}
		/* Text parameters are NUL-terminated on the wire: a NUL inside would cut the
		 * value short without an error, so such a message is refused instead. */
		if (!is_null && memchr(b->scratch.data, 0, b->scratch.len) != NULL) {
			char why[64];

			snprintf(why, sizeof(why), "parameter $%zu contains a NUL byte", p + 1);
			msg->state = IDEM_MSG_BAD;
			msg->undecodable = true;
			return idem_batch_set_reason(b, i, why, NULL);
		}
		/* Postgres refuses text parameters that are not valid in its encoding (UTF-8):
		 * say so here, precisely, instead of failing the handler max_attempts times. */
		if (!is_null && !idem_utf8_valid(b->scratch.data, b->scratch.len)) {
			char why[64];

			snprintf(why, sizeof(why), "parameter $%zu is not valid UTF-8", p + 1);
			msg->state = IDEM_MSG_BAD;
			msg->undecodable = true;
			return idem_batch_set_reason(b, i, why, NULL);
		}
		r = arena_put(b, is_null ? NULL : b->scratch.data, b->scratch.len,
		              &b->params[b->n_params + p]);
		if (r != IDEM_OK)
			return r;
	}
	b->n_params += route->n_params;
	return put_hash(b, msg, m->value, m->value_len);
}

/* The message's trace context, kept for its events, reply and dead letter (ARCHITECTURE.md
 * "Trace context"). */
static idem_status put_trace(struct idem_batch *b, struct idem_batch_msg *msg,
                             const struct idem_msgview *m)
{
	struct idem_msgtrace t;
	idem_status r;

	idem_field_trace(m, &t);
	if (!t.has)
		return IDEM_OK;
	if ((r = arena_put(b, t.traceparent, strlen(t.traceparent), &msg->traceparent)) != IDEM_OK)
		return r;
	if (t.tracestate[0] == '\0')
		return IDEM_OK;
	return arena_put(b, t.tracestate, strlen(t.tracestate), &msg->tracestate);
}

idem_status idem_batch_add(struct idem_batch *b, const struct idem_msgview *m,
                           const struct idem_cfg *cfg, int64_t now_ms)
{
	struct idem_batch_msg *msg;
	struct idem_msgview mv;
	size_t i, before = b->arena.len;
	idem_status r;

	if (GROW(b->msgs, b->cap_msgs, b->n_msgs + 1) != IDEM_OK ||
	    GROW(b->hdrs, b->cap_hdrs, b->n_hdrs + m->n_headers) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (b->n_msgs == 0)
		b->opened_ms = now_ms;
	i = b->n_msgs;
	msg = &b->msgs[i];
	memset(msg, 0, sizeof(*msg));
	msg->offset = m->offset;
	msg->timestamp_ms = m->timestamp_ms;
	msg->state = IDEM_MSG_PENDING;
	msg->bkey.null = msg->hash.null = msg->reason.null = msg->result.null = true;
	msg->traceparent.null = msg->tracestate.null = true;
	if ((r = arena_put(b, m->key, m->key_len, &msg->key)) != IDEM_OK ||
	    (r = arena_put(b, m->value, m->value_len, &msg->value)) != IDEM_OK)
		return r;
	msg->hdr_first = b->n_hdrs;
	msg->n_hdrs = m->n_headers;
	for (size_t h = 0; h < m->n_headers; h++) {
		struct idem_batch_hdr *hd = &b->hdrs[b->n_hdrs + h];

		if ((r = arena_put(b, m->headers[h].name, strlen(m->headers[h].name), &hd->name)) !=
		            IDEM_OK ||
		    (r = arena_put(b, m->headers[h].value, m->headers[h].len, &hd->value)) !=
		            IDEM_OK)
			return r;
	}
	b->n_hdrs += m->n_headers;
	b->n_msgs++;
	mv = *m;
	mv.consumer = b->route->consumer;
	if ((r = put_trace(b, msg, &mv)) != IDEM_OK)
		return r;
	r = decode(b, i, &mv, cfg);
	/* The parsed value is needed no more, and may be as large as the message. */
	idem_jsondoc_reset(&b->doc);
	if (r == IDEM_ERR_UNAVAILABLE) {
		/* Not added: the message is read again later, as if it had not come yet. */
		b->n_msgs--;
		b->n_hdrs -= m->n_headers;
		b->arena.len = before;
		return r;
	}
	b->bytes += b->arena.len - before;
	return r;
}

/*
 * A business key's 64-bit hash for the key sets: eight bytes at a time, each mixed in by a
 * multiply, then finished as MurmurHash3's fmix64. It need not resist an adversary: two keys
 * that agree by chance only change the order of a claim. Never 0, the empty slot.
 */
static uint64_t key_hash(const unsigned char *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, v;

	for (; n >= 8; p += 8, n -= 8) {
		memcpy(&v, p, 8);
		h = (h ^ v) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	if (n > 0) {
		v = 0;
		memcpy(&v, p, n);
		h = (h ^ v) * 0xc4ceb9fe1a85ec53ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h != 0 ? h : 1;
}

static bool claims_key(const struct idem_batch_msg *m)
{
	return m->state == IDEM_MSG_PENDING && !m->bkey.null;
}

void idem_batch_key_hashes(struct idem_batch *b)
{
	b->chash = key_hash((const unsigned char *)b->route->consumer, strlen(b->route->consumer));
	for (size_t i = 0; i < b->n_msgs; i++) {
		struct idem_batch_msg *m = &b->msgs[i];

		m->late = false;
		if (claims_key(m))
			m->khash = key_hash((const unsigned char *)b->arena.data + m->bkey.off,
			                    m->bkey.len);
	}
	b->hashed = true;
}

/* The set's entry for a key of a consumer: both hashes mixed, never 0 (the empty slot). */
static uint64_t keyset_entry(uint64_t khash, uint64_t chash)
{
	uint64_t h = (khash ^ chash) * 0x9e3779b97f4a7c15ULL;

	h ^= h >> 32;
	return h != 0 ? h : 1;
}

idem_status idem_keyset_build(struct idem_keyset *s, struct idem_batch *const *b, size_t n)
{
	size_t keys = 0, cap = 16;

	for (size_t j = 0; j < n; j++) {
		for (size_t i = 0; b[j]->hashed && i < b[j]->n_msgs; i++)
			keys += claims_key(&b[j]->msgs[i]);
	}
	/* At most half full: a probe ends at an empty slot soon. */
	while (cap < 2 * keys)
		cap *= 2;
	if (cap > s->cap) {
		uint64_t *v = realloc(s->v, cap * sizeof(*v));

		if (v == NULL) {
			s->mask = 0;
			return IDEM_ERR_NOMEM;
		}
		s->v = v;
		s->cap = cap;
	}
	memset(s->v, 0, cap * sizeof(*s->v));
	s->mask = cap - 1;
	for (size_t j = 0; j < n; j++) {
		for (size_t i = 0; b[j]->hashed && i < b[j]->n_msgs; i++) {
			const struct idem_batch_msg *m = &b[j]->msgs[i];
			uint64_t e;
			size_t k;

			if (!claims_key(m))
				continue;
			e = keyset_entry(m->khash, b[j]->chash);
			for (k = e & s->mask; s->v[k] != 0 && s->v[k] != e; k = (k + 1) & s->mask)
				;
			s->v[k] = e;
		}
	}
	return IDEM_OK;
}

void idem_keyset_clear(struct idem_keyset *s)
{
	s->mask = 0;
	if (s->cap * sizeof(*s->v) > IDEM_BATCH_KEEP_BYTES)
		idem_keyset_free(s);
}

void idem_keyset_free(struct idem_keyset *s)
{
	free(s->v);
	*s = (struct idem_keyset){ 0 };
}

static bool keyset_has(const struct idem_keyset *s, uint64_t e)
{
	for (size_t k = e & s->mask; s->v[k] != 0; k = (k + 1) & s->mask) {
		if (s->v[k] == e)
			return true;
	}
	return false;
}

size_t idem_batch_mark_late(struct idem_batch *b, const struct idem_keyset *s)
{
	size_t n = 0;

	if (s->mask == 0 || !b->hashed)
		return 0;
	for (size_t i = 0; i < b->n_msgs; i++) {
		struct idem_batch_msg *m = &b->msgs[i];

		if (claims_key(m) && !m->late && keyset_has(s, keyset_entry(m->khash, b->chash))) {
			m->late = true;
			n++;
		}
	}
	return n;
}

/* qsort has no context argument in C11: the batch being sorted is passed through this. */
static _Thread_local const struct idem_batch *sort_batch;

static int key_cmp(const struct idem_batch *b, size_t x, size_t y)
{
	const struct idem_batch_msg *mx = &b->msgs[x], *my = &b->msgs[y];
	size_t n = mx->bkey.len < my->bkey.len ? mx->bkey.len : my->bkey.len;
	int c = memcmp(b->arena.data + mx->bkey.off, b->arena.data + my->bkey.off, n);

	if (c != 0)
		return c;
	return (mx->bkey.len > my->bkey.len) - (mx->bkey.len < my->bkey.len);
}

static int order_cmp(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	int c = key_cmp(sort_batch, x, y);

	if (c != 0)
		return c;
	/* Same key: lowest offset first, so it wins. */
	return (sort_batch->msgs[x].offset > sort_batch->msgs[y].offset) -
	       (sort_batch->msgs[x].offset < sort_batch->msgs[y].offset);
}

void idem_batch_sort_by_key(const struct idem_batch *b, size_t *idx, size_t n)
{
	sort_batch = b;
	qsort(idx, n, sizeof(*idx), order_cmp);
	sort_batch = NULL;
}

/* Compare message @x's business key with @k. */
static int key_cmp_bytes(const struct idem_batch *b, size_t x, const char *k, size_t klen)
{
	const struct idem_batch_msg *m = &b->msgs[x];
	size_t n = m->bkey.len < klen ? m->bkey.len : klen;
	int c = memcmp(b->arena.data + m->bkey.off, k, n);

	if (c != 0)
		return c;
	return (m->bkey.len > klen) - (m->bkey.len < klen);
}

size_t idem_batch_lower_bound(const struct idem_batch *b, const size_t *idx, size_t n,
                              const char *k, size_t klen)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (key_cmp_bytes(b, idx[mid], k, klen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && key_cmp_bytes(b, idx[lo], k, klen) == 0 ? lo : n;
}

idem_status idem_batch_set_claim(struct idem_batch *b, size_t i, const char *topic,
                                 int32_t partition, int64_t offset, const char *hash,
                                 size_t hash_len)
{
	struct idem_batch_claim c = { 0 };
	idem_status r;

	c.found = true;
	c.same_topic = strcmp(topic, b->topic) == 0;
	c.partition = partition;
	c.offset = offset;
	c.topic = (struct idem_span){ 0, 0, true };
	if (!c.same_topic && (r = arena_put(b, topic, strlen(topic), &c.topic)) != IDEM_OK)
		return r;
	if ((r = arena_put(b, hash, hash_len, &c.hash)) != IDEM_OK)
		return r;
	b->msgs[i].claim = c;
	return IDEM_OK;
}

idem_status idem_batch_collapse(struct idem_batch *b)
{
	size_t n = 0, w = 0;

	if (GROW(b->order, b->cap_order, b->n_msgs + 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_PENDING)
			b->order[n++] = i;
	}
	idem_batch_sort_by_key(b, b->order, n);
	for (size_t k = 0; k < n; k++) {
		if (w > 0 && key_cmp(b, b->order[w - 1], b->order[k]) == 0) {
			b->msgs[b->order[k]].state = IDEM_MSG_DUP_IN_BATCH;
			b->msgs[b->order[k]].winner = b->order[w - 1];
			continue;
		}
		b->msgs[b->order[k]].winner = b->order[k];
		b->order[w++] = b->order[k];
	}
	b->n_order = w;
	return IDEM_OK;
}

ssize_t idem_batch_find_key(const struct idem_batch *b, const char *k, size_t klen)
{
	size_t pos = idem_batch_lower_bound(b, b->order, b->n_order, k, klen);

	return pos < b->n_order ? (ssize_t)b->order[pos] : -1;
}

ssize_t idem_batch_find_offset(const struct idem_batch *b, int64_t offset)
{
	size_t lo = 0, hi = b->n_msgs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (b->msgs[mid].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < b->n_msgs && b->msgs[lo].offset == offset; lo++) {
		if (b->msgs[lo].state == IDEM_MSG_PENDING)
			return (ssize_t)lo;
	}
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].offset == offset && b->msgs[i].state == IDEM_MSG_PENDING)
			return (ssize_t)i;
	}
	return -1;
}

/* Shorten a hex hash for a message. */
static void short_hash(const struct idem_batch *b, struct idem_span h, char *buf, size_t len)
{
	if (h.null)
		snprintf(buf, len, "none");
	else
		snprintf(buf, len, "%.12s", idem_batch_ptr(b, h));
}

idem_status idem_batch_classify(struct idem_batch *b, int64_t progress_next, int64_t replay_to)
{
	for (size_t i = 0; i < b->n_msgs; i++) {
		struct idem_batch_msg *m = &b->msgs[i];
		struct idem_batch_claim winner;
		const struct idem_batch_claim *c;
		char why[512], h1[16], h2[16];

		if (m->state == IDEM_MSG_DUPLICATE) {
			c = &m->claim;
		} else if (m->state == IDEM_MSG_DUP_IN_BATCH) {
			const struct idem_batch_msg *w = &b->msgs[m->winner];

			/* A key that is new to the database was claimed by its winner in this
			 * very transaction. */
			if (w->state == IDEM_MSG_APPLIED) {
				winner = (struct idem_batch_claim){ .found = true,
					                            .same_topic = true,
					                            .topic = { 0, 0, true },
					                            .partition = b->partition,
					                            .offset = w->offset,
					                            .hash = w->hash };
				c = &winner;
			} else {
				c = &w->claim;
			}
		} else {
			continue;
		}
		m->dup = idem_batch_dup_kind_replay(b->partition, m->offset, c, progress_next,
		                                    replay_to);
		m->mismatch = idem_batch_payload_differs(b, i, c);
		if (!m->mismatch || b->route->on_payload_mismatch != IDEM_CFG_MISMATCH_QUARANTINE)
			continue;
		short_hash(b, c->hash, h1, sizeof(h1));
		short_hash(b, m->hash, h2, sizeof(h2));
		snprintf(
		        why, sizeof(why),
		        "payload mismatch: business key already applied from topic '%s' partition %" PRId32
		        " offset %" PRId64
		        " with a different payload (sha256 %s..., this message %s...)",
		        c->same_topic ? b->topic : idem_batch_ptr(b, c->topic), c->partition,
		        c->offset, h1, h2);
		m->state = IDEM_MSG_BAD;
		m->attempts = 1;
		if (idem_batch_set_reason(b, i, why, NULL) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}
