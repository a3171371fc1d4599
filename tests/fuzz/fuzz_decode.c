/*
 * fuzz_decode.c - libFuzzer target for the whole decode path of a message: routing by topic,
 * the business key, the handler parameters, in-batch duplicate collapse, and every statement
 * parameter built from message bytes (the claim arrays, row-mode and set-mode handler
 * parameters, the quarantine row).
 *
 * The input's first byte picks the topic (and so the route); the rest is split on the byte 0x1e
 * (ASCII record separator) into at most six parts:
 *
 *   key \x1e header-name \x1e header-value \x1e header-name \x1e header-value \x1e value
 *
 * A missing part is absent in the message: no key, fewer headers (a name without a value part
 * has a null value), no value (a tombstone). The value is the rest of the input.
 *
 * The message is added to a batch three times (the third with half its value), so in-batch
 * duplicates and mismatching payloads are exercised too. What is checked (abort when broken):
 * a decoded message has a non-empty valid UTF-8 key within the limit and parameters without a
 * NUL byte unless set mode refuses them; the claim's key array decodes back to the keys in key
 * order; each set-mode text[] decodes back to exactly the row-mode parameters of the same
 * messages; an undecodable message has a reason, and its quarantine row carries its key, value
 * and headers byte for byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem_batch.h"
#include "idem_bind.h"
#include "idem_cfg.h"

#define FUZZ_SEP    0x1e
#define FUZZ_PARTS  6
#define FUZZ_COPIES 3

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Routes over the kinds of business key and parameter (ARCHITECTURE.md, "Modules": idem_field). */
static const char fuzz_cfg_text[] =
        "kafka: {brokers: \"127.0.0.1:9092\", group_id: g}\n"
        "postgres: {conninfo: \"dbname=x\"}\n"
        "limits: {max_key_bytes: 40}\n"
        "routes:\n"
        "  - name: json\n"
        "    topics: [j]\n"
        "    business_key: \"json:/id\"\n"
        "    handler: {sql: \"SELECT $1, $2, $3, $4, $5, $6\", params: [business_key, \"json:/a\","
        " \"json:/b/0\", value, traceparent, tracestate]}\n"
        "  - name: header\n"
        "    topics: [h]\n"
        "    business_key: \"${header:tenant}-${json:/id}\"\n"
        "    handler: {mode: set, sql: \"SELECT unnest($1::text[]), unnest($2::text[])\","
        " params: [\"header:tenant\", key]}\n"
        "  - name: key\n"
        "    topics: [k]\n"
        "    business_key: key\n"
        "    handler: {mode: set, sql: \"SELECT $1::text[], $2, $3, $4, $5\", params: [value, offset,"
        " timestamp, topic, partition]}\n"
        "  - name: value\n"
        "    topics: [v]\n"
        "    business_key: value\n"
        "    handler: {sql: \"SELECT 1\"}\n";

static const char *const fuzz_topics[] = { "j", "h", "k", "v" };

static struct idem_cfg *cfg;

/* Decode Postgres array literal @s (as idem_pgarray_add() writes it) into @out: each element's
 * bytes, NULL as a null span; returns the number of elements or -1 when malformed. */
static int array_decode(const char *s, struct idem_buf *out, struct idem_span *el, int max)
{
	int n = 0;

	idem_buf_reset(out);
	if (*s++ != '{')
		return -1;
	if (*s == '}')
		return s[1] == '\0' ? 0 : -1;
	for (;;) {
		if (n == max)
			return -1;
		if (strncmp(s, "NULL", 4) == 0) {
			el[n++] = (struct idem_span){ 0, 0, true };
			s += 4;
		} else if (*s == '"') {
			size_t off = out->len;

			for (s++; *s != '"'; s++) {
				if (*s == '\0')
					return -1;
				if (*s == '\\')
					s++;
				if (*s == '\0' || idem_buf_append(out, s, 1) != IDEM_OK)
					return -1;
			}
			s++;
			el[n++] = (struct idem_span){ off, out->len - off, false };
		} else {
			return -1;
		}
		if (*s == '}')
			return s[1] == '\0' ? n : -1;
		if (*s++ != ',')
			return -1;
	}
}

static bool span_eq(const struct idem_buf *dec, struct idem_span d, const struct idem_batch *b,
                    struct idem_span s)
{
	if (d.null || s.null)
		return d.null == s.null;
	return d.len == s.len &&
	       (s.len == 0 || memcmp(dec->data + d.off, idem_batch_ptr(b, s), s.len) == 0);
}

static void check_key(const struct idem_batch *b, const struct idem_batch_msg *m)
{
	const char *k = idem_batch_ptr(b, m->bkey);

	if (k == NULL || m->bkey.len == 0 || m->bkey.len > (size_t)cfg->max_key_bytes ||
	    strlen(k) != m->bkey.len || !idem_utf8_valid(k, m->bkey.len))
		abort();
}

/* The claim of the batch's unique keys: its key array is exactly b->order's keys, sorted. */
static void check_claim(struct idem_bind *bd, const struct idem_batch *b, struct idem_buf *dec)
{
	struct idem_bind_claim c;
	size_t count;
	const char *e;
	size_t n;
	bool null;

	if (idem_bind_claim(bd, b, b->order, b->n_order, &c) != IDEM_OK)
		abort();
	if (b->n_order == 0)
		return;
	if (!idem_pgbin_get(c.vals[3], (size_t)c.lens[3], 0, &e, &n, &null, &count) ||
	    count != b->n_order)
		abort();
	idem_buf_reset(dec);
	for (size_t k = 0; k < b->n_order; k++) {
		const struct idem_batch_msg *m = &b->msgs[b->order[k]];
		const char *prev = dec->data;
		size_t prev_n = dec->len;

		if (!idem_pgbin_get(c.vals[3], (size_t)c.lens[3], k, &e, &n, &null, NULL) || null)
			abort();
		if (n != m->bkey.len || memcmp(e, idem_batch_ptr(b, m->bkey), n) != 0)
			abort();
		if (k > 0) { /* out of key order, or a key twice in one claim */
			int cmp = memcmp(prev, e, prev_n < n ? prev_n : n);

			if (cmp > 0 || (cmp == 0 && prev_n >= n))
				abort();
		}
		idem_buf_reset(dec);
		if (idem_buf_append(dec, e, n) != IDEM_OK)
			abort();
	}
}

/* Row mode and set mode bind the same bytes for the same messages. */
static void check_params(struct idem_bind *bd, const struct idem_batch *b, struct idem_buf *dec)
{
	const struct idem_route *rt = b->route;
	size_t np = rt->n_params, in_set[FUZZ_COPIES], n_set = 0;
	struct idem_span el[FUZZ_COPIES];

	if (np == 0)
		return;
	if (idem_bind_set_open(bd, np) != IDEM_OK)
		abort();
	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];
		bool has_nul = false;
		idem_status r;

		if (m->state != IDEM_MSG_PENDING)
			continue;
		if (idem_bind_row(bd, b, i) != IDEM_OK)
			abort();
		for (size_t p = 0; p < np; p++) {
			struct idem_span s = b->params[m->param_first + p];

			if ((bd->vals[p] == NULL) != s.null)
				abort();
			if (!s.null && strlen(bd->vals[p]) != s.len)
				has_nul = true;
		}
		r = idem_bind_set_add(bd, b, i);
		if (r == IDEM_ERR_INVALID && has_nul)
			continue; /* set mode quarantines it; row mode's flush does the same */
		if (r != IDEM_OK || has_nul)
			abort();
		in_set[n_set++] = i;
	}
	/* A refused message may have left part of its elements: rebuild from the accepted ones. */
	if (idem_bind_set_open(bd, np) != IDEM_OK)
		abort();
	for (size_t k = 0; k < n_set; k++) {
		if (idem_bind_set_add(bd, b, in_set[k]) != IDEM_OK)
			abort();
	}
	if (idem_bind_set_close(bd, np) != IDEM_OK)
		abort();
	for (size_t p = 0; p < np; p++) {
		struct idem_buf copy = { 0 };

		if (idem_buf_append(&copy, bd->vals[p], strlen(bd->vals[p])) != IDEM_OK)
			abort();
		if (array_decode(copy.data, dec, el, FUZZ_COPIES) != (int)n_set)
			abort();
		for (size_t k = 0; k < n_set; k++) {
			const struct idem_batch_msg *m = &b->msgs[in_set[k]];

			if (!span_eq(dec, el[k], b, b->params[m->param_first + p]))
				abort();
		}
		idem_buf_done(&copy);
	}
}

/* An undecodable message's quarantine row: its reason, and its bytes as they came. */
static void check_quarantine(struct idem_bind *bd, const struct idem_batch *b, size_t i,
                             struct idem_buf *dec)
{
	const struct idem_batch_msg *m = &b->msgs[i];
	struct idem_span el[2];
	int n;

	if (m->reason.null || m->reason.len == 0 || idem_batch_ptr(b, m->reason)[0] == '\0')
		abort();
	if (idem_bind_quarantine(bd, b, i) != IDEM_OK)
		abort();
	if ((bd->vals[5] == NULL) != m->key.null || (size_t)bd->lens[5] != m->key.len ||
	    (m->key.len > 0 && memcmp(bd->vals[5], idem_batch_ptr(b, m->key), m->key.len) != 0))
		abort();
	if ((bd->vals[6] == NULL) != m->value.null || (size_t)bd->lens[6] != m->value.len ||
	    (m->value.len > 0 &&
	     memcmp(bd->vals[6], idem_batch_ptr(b, m->value), m->value.len) != 0))
		abort();
	if (strlen(bd->vals[10]) != m->reason.len)
		abort();
	/* Header names as text (hex when not UTF-8), values as bytea hex: one element each. */
	if ((n = array_decode(bd->vals[7], dec, el, 2)) != (int)m->n_hdrs)
		abort();
	if ((n = array_decode(bd->vals[8], dec, el, 2)) != (int)m->n_hdrs)
		abort();
	for (int h = 0; h < n; h++) {
		struct idem_span v = b->hdrs[m->hdr_first + (size_t)h].value;

		if (el[h].null != v.null)
			abort();
		if (!v.null &&
		    (el[h].len != 2 + 2 * v.len || memcmp(dec->data + el[h].off, "\\x", 2) != 0))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *part[FUZZ_PARTS] = { NULL };
	size_t len[FUZZ_PARTS] = { 0 };
	size_t n = 0, start = 1;
	struct idem_header hdrs[2];
	struct idem_msgview m = { 0 };
	struct idem_batch b;
	struct idem_bind bd;
	struct idem_buf dec = { 0 };
	char *names[2] = { NULL, NULL };
	const struct idem_route *rt;

	if (cfg == NULL) {
		char *errors = NULL;

		if (idem_cfg_parse("fuzz.yaml", fuzz_cfg_text, sizeof(fuzz_cfg_text) - 1, &cfg,
		                   &errors) != IDEM_OK)
			abort();
	}
	if (size == 0)
		return 0;
	m.topic = fuzz_topics[data[0] % (sizeof(fuzz_topics) / sizeof(fuzz_topics[0]))];
	for (size_t i = 1; i <= size && n < FUZZ_PARTS; i++) {
		if (i == size || (data[i] == FUZZ_SEP && n < FUZZ_PARTS - 1)) {
			part[n] = data + start;
			len[n] = i - start;
			n++;
			start = i + 1;
		}
	}
	if (n < FUZZ_PARTS) {
		/* Fewer parts: the last one given is the value; the key is there if two or more. */
		part[FUZZ_PARTS - 1] = n > 1 ? part[n - 1] : NULL;
		len[FUZZ_PARTS - 1] = n > 1 ? len[n - 1] : 0;
		if (n > 1)
			part[n - 1] = NULL;
	}
	m.partition = data[0] >> 4;
	m.timestamp_ms = data[0] & 8 ? -1 : 1700000000000 + (int64_t)size;
	m.key = part[0];
	m.key_len = len[0];
	for (size_t h = 0; h < 2; h++) {
		const uint8_t *nm = part[1 + 2 * h];

		if (nm == NULL)
			break;
		names[h] = strndup((const char *)nm, len[1 + 2 * h]);
		if (names[h] == NULL)
			abort();
		hdrs[h] = (struct idem_header){ names[h], part[2 + 2 * h], len[2 + 2 * h] };
		m.n_headers = h + 1;
	}
	m.headers = hdrs;
	m.value = part[FUZZ_PARTS - 1];
	m.value_len = len[FUZZ_PARTS - 1];

	rt = idem_cfg_route_for(cfg, m.topic);
	if (rt == NULL || idem_batch_init(&b, rt, m.topic, m.partition) != IDEM_OK)
		abort();
	idem_bind_init(&bd);
	for (int c = 0; c < FUZZ_COPIES; c++) {
		m.offset = 7 + c;
		if (c == FUZZ_COPIES - 1 && m.value != NULL)
			m.value_len /= 2;
		if (idem_batch_add(&b, &m, cfg, 0) != IDEM_OK)
			abort();
	}
	if (idem_batch_collapse(&b) != IDEM_OK)
		abort();
	for (size_t i = 0; i < b.n_msgs; i++) {
		const struct idem_batch_msg *bm = &b.msgs[i];

		if (bm->state == IDEM_MSG_BAD)
			check_quarantine(&bd, &b, i, &dec);
		else if (bm->state == IDEM_MSG_PENDING || bm->state == IDEM_MSG_DUP_IN_BATCH)
			check_key(&b, bm);
		else
			abort();
		if (bm->state == IDEM_MSG_DUP_IN_BATCH &&
		    (bm->winner >= i || b.msgs[bm->winner].state != IDEM_MSG_PENDING))
			abort();
	}
	check_claim(&bd, &b, &dec);
	check_params(&bd, &b, &dec);

	idem_buf_done(&dec);
	idem_bind_done(&bd);
	idem_batch_done(&b);
	free(names[0]);
	free(names[1]);
	return 0;
}
