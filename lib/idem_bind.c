/*
 * idem_bind.c - statement parameters from batch messages.
 */
#include "idem_bind.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void idem_bind_init(struct idem_bind *bd)
{
	memset(bd, 0, sizeof(*bd));
}

void idem_bind_done(struct idem_bind *bd)
{
	if (bd == NULL)
		return;
	idem_buf_done(&bd->keys);
	idem_buf_done(&bd->offs);
	idem_buf_done(&bd->hashes);
	idem_buf_done(&bd->cons);
	idem_buf_done(&bd->topics);
	idem_buf_done(&bd->parts);
	idem_buf_done(&bd->rkeys);
	idem_buf_done(&bd->rvals);
	idem_buf_done(&bd->hnames);
	idem_buf_done(&bd->hvals);
	idem_buf_done(&bd->dkeys);
	for (size_t c = 0; c < IDEM_ARRAY_SIZE(bd->reply); c++)
		idem_buf_done(&bd->reply[c]);
	for (size_t c = 0; c < IDEM_ARRAY_SIZE(bd->trace); c++)
		idem_buf_done(&bd->trace[c]);
	for (size_t k = 0; k < IDEM_ARRAY_SIZE(bd->prog); k++)
		idem_buf_done(&bd->prog[k]);
	for (size_t p = 0; p < bd->cap_set; p++)
		idem_buf_done(&bd->set[p]);
	free(bd->set);
	free(bd->vals);
	free(bd->lens);
	free(bd->fmts);
	free(bd->refs);
	memset(bd, 0, sizeof(*bd));
}

static idem_status need_vals(struct idem_bind *bd, size_t n)
{
	if (n <= bd->cap_vals)
		return IDEM_OK;
	free(bd->vals);
	free(bd->lens);
	free(bd->fmts);
	bd->vals = calloc(n, sizeof(*bd->vals));
	bd->lens = calloc(n, sizeof(*bd->lens));
	bd->fmts = calloc(n, sizeof(*bd->fmts));
	bd->cap_vals = n;
	if (bd->vals == NULL || bd->lens == NULL || bd->fmts == NULL) {
		bd->cap_vals = 0;
		return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

static idem_status need_refs(struct idem_bind *bd, size_t n)
{
	struct idem_bind_ref *x;

	if (n <= bd->cap_refs)
		return IDEM_OK;
	x = realloc(bd->refs, n * sizeof(*x));
	if (x == NULL)
		return IDEM_ERR_NOMEM;
	bd->refs = x;
	bd->cap_refs = n;
	return IDEM_OK;
}

static idem_status need_set(struct idem_bind *bd, size_t n)
{
	struct idem_buf *s;

	if (n <= bd->cap_set)
		return IDEM_OK;
	s = realloc(bd->set, n * sizeof(*s));
	if (s == NULL)
		return IDEM_ERR_NOMEM;
	memset(s + bd->cap_set, 0, (n - bd->cap_set) * sizeof(*s));
	bd->set = s;
	bd->cap_set = n;
	return IDEM_OK;
}

idem_status idem_bind_text_elem(struct idem_buf *a, const char *s, size_t n, bool null)
{
	if (!null && memchr(s, '\0', n) != NULL)
		return IDEM_ERR_INVALID;
	return idem_pgarray_add(a, s, n, null);
}

/* A claim's parameter @k: a text one, or the binary array in @a. */
static void claim_text(struct idem_bind_claim *c, int k, const char *v)
{
	c->vals[k] = v;
	c->lens[k] = 0;
	c->fmts[k] = 0;
}

static void claim_array(struct idem_bind_claim *c, int k, const struct idem_buf *a)
{
	c->vals[k] = a->data;
	c->lens[k] = (int)a->len;
	c->fmts[k] = 1;
}

/*
 * Message @m's key and payload hash onto the claim's arrays. A business key is valid UTF-8
 * without NUL bytes (idem_key_build() hex-encodes any other), as the server's text needs; the
 * hash is the batch's hex, sent as its bytes.
 */
static idem_status claim_key_hash(struct idem_bind *bd, const struct idem_batch *b,
                                  const struct idem_batch_msg *m)
{
	if (idem_pgbin_add(&bd->keys, idem_batch_ptr(b, m->bkey), m->bkey.len, false) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	return idem_pgbin_add_hex(&bd->hashes, idem_batch_ptr(b, m->hash), m->hash.len,
	                          m->hash.null);
}

idem_status idem_bind_claim(struct idem_bind *bd, const struct idem_batch *b, const size_t *idx,
                            size_t n, struct idem_bind_claim *ret)
{
	idem_status r;

	if (idem_pgbin_open(&bd->keys, IDEM_OID_TEXT) ||
	    idem_pgbin_open(&bd->offs, IDEM_OID_INT8) ||
	    idem_pgbin_open(&bd->hashes, IDEM_OID_BYTEA))
		return IDEM_ERR_NOMEM;
	/* The keys another transaction in flight claims too come last (idem_bind.h). */
	for (int late = 0; late < 2; late++) {
		for (size_t k = 0; k < n; k++) {
			const struct idem_batch_msg *m = &b->msgs[idx[k]];

			if (m->late != (late == 1))
				continue;
			if ((r = claim_key_hash(bd, b, m)) != IDEM_OK)
				return r;
			if (idem_pgbin_add_int8(&bd->offs, m->offset) != IDEM_OK)
				return IDEM_ERR_NOMEM;
		}
	}
	idem_pgbin_close(&bd->keys);
	idem_pgbin_close(&bd->offs);
	idem_pgbin_close(&bd->hashes);
	snprintf(bd->part, sizeof(bd->part), "%" PRId32, b->partition);
	claim_text(ret, 0, b->route->consumer);
	claim_text(ret, 1, b->topic);
	claim_text(ret, 2, bd->part);
	claim_array(ret, 3, &bd->keys);
	claim_array(ret, 4, &bd->offs);
	claim_array(ret, 5, &bd->hashes);
	return IDEM_OK;
}

/* The combined claim's order (see idem_bind_claim_many()). */
static int ref_cmp(const void *p, const void *q)
{
	const struct idem_bind_ref *x = p, *y = q;
	const struct idem_batch_msg *mx = &x->b->msgs[x->i], *my = &y->b->msgs[y->i];
	const struct idem_span *kx = &mx->bkey, *ky = &my->bkey;
	int c = (mx->late > my->late) - (mx->late < my->late);

	if (c == 0)
		c = memcmp(idem_batch_ptr(x->b, *kx), idem_batch_ptr(y->b, *ky),
		           kx->len < ky->len ? kx->len : ky->len);
	if (c == 0)
		c = (kx->len > ky->len) - (kx->len < ky->len);
	if (c == 0)
		c = strcmp(x->b->route->consumer, y->b->route->consumer);
	if (c == 0)
		c = (x->k > y->k) - (x->k < y->k);
	return c;
}

static idem_status claim_many_add(struct idem_bind *bd, const struct idem_bind_ref *x, bool one)
{
	const struct idem_batch *b = x->b;
	const struct idem_batch_msg *m = &b->msgs[x->i];
	idem_status r;

	if ((r = claim_key_hash(bd, b, m)) != IDEM_OK)
		return r;
	if ((!one &&
	     (idem_pgbin_add(&bd->cons, b->route->consumer, strlen(b->route->consumer), false) ||
	      idem_pgbin_add(&bd->topics, b->topic, strlen(b->topic), false))) ||
	    idem_pgbin_add_int4(&bd->parts, b->partition) ||
	    idem_pgbin_add_int8(&bd->offs, m->offset))
		return IDEM_ERR_NOMEM;
	return IDEM_OK;
}

idem_status idem_bind_claim_many(struct idem_bind *bd, const struct idem_batch *const *b, size_t n,
                                 size_t n_keys, struct idem_bind_claim *ret, bool *ret_one)
{
	size_t n_refs = 0;
	bool one = true;
	idem_status r;

	if (need_refs(bd, n_keys) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t k = 1; k < n && one; k++)
		one = strcmp(b[k]->route->consumer, b[0]->route->consumer) == 0 &&
		      strcmp(b[k]->topic, b[0]->topic) == 0;
	for (size_t k = 0; k < n; k++) {
		for (size_t j = 0; j < b[k]->n_order && n_refs < n_keys; j++)
			bd->refs[n_refs++] = (struct idem_bind_ref){ b[k], k, b[k]->order[j] };
	}
	qsort(bd->refs, n_refs, sizeof(*bd->refs), ref_cmp);
	if (idem_pgbin_open(&bd->cons, IDEM_OID_TEXT) ||
	    idem_pgbin_open(&bd->keys, IDEM_OID_TEXT) ||
	    idem_pgbin_open(&bd->topics, IDEM_OID_TEXT) ||
	    idem_pgbin_open(&bd->parts, IDEM_OID_INT4) ||
	    idem_pgbin_open(&bd->offs, IDEM_OID_INT8) ||
	    idem_pgbin_open(&bd->hashes, IDEM_OID_BYTEA))
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < n_refs; k++) {
		if ((r = claim_many_add(bd, &bd->refs[k], one)) != IDEM_OK)
			return r;
	}
	idem_pgbin_close(&bd->cons);
	idem_pgbin_close(&bd->keys);
	idem_pgbin_close(&bd->topics);
	idem_pgbin_close(&bd->parts);
	idem_pgbin_close(&bd->offs);
	idem_pgbin_close(&bd->hashes);
	if (one) {
		claim_text(ret, 0, b[0]->route->consumer);
		claim_text(ret, 2, b[0]->topic);
	} else {
		claim_array(ret, 0, &bd->cons);
		claim_array(ret, 2, &bd->topics);
	}
	claim_array(ret, 1, &bd->keys);
	claim_array(ret, 3, &bd->parts);
	claim_array(ret, 4, &bd->offs);
	claim_array(ret, 5, &bd->hashes);
	*ret_one = one;
	return IDEM_OK;
}

/* Open the first @n arrays of bd->prog. */
static idem_status prog_open(struct idem_bind *bd, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		if (idem_pgarray_open(&bd->prog[k]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

/* Close the first @n arrays of bd->prog into ret_vals[0..n). */
static idem_status prog_close(struct idem_bind *bd, size_t n, const char **ret_vals)
{
	for (size_t k = 0; k < n; k++) {
		if (idem_pgarray_close(&bd->prog[k]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		ret_vals[k] = bd->prog[k].data;
	}
	return IDEM_OK;
}

/* Append the partition of @b (consumer, topic, partition) to bd->prog[0..3). */
static idem_status prog_partition(struct idem_bind *bd, const struct idem_batch *b)
{
	char part[16];
	int len = snprintf(part, sizeof(part), "%" PRId32, b->partition);

	if (idem_pgarray_add(&bd->prog[0], b->route->consumer, strlen(b->route->consumer), false) ||
	    idem_pgarray_add(&bd->prog[1], b->topic, strlen(b->topic), false) ||
	    idem_pgarray_add(&bd->prog[2], part, (size_t)len, false))
		return IDEM_ERR_NOMEM;
	return IDEM_OK;
}

idem_status idem_bind_progress_get(struct idem_bind *bd, const struct idem_batch *const *b,
                                   size_t n, const char **ret_vals)
{
	if (prog_open(bd, 3) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < n; k++) {
		if (prog_partition(bd, b[k]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return prog_close(bd, 3, ret_vals);
}

idem_status idem_bind_dup_keys_open(struct idem_bind *bd)
{
	return idem_pgarray_open(&bd->dkeys) ? IDEM_ERR_NOMEM : IDEM_OK;
}

idem_status idem_bind_dup_keys_add(struct idem_bind *bd, const struct idem_batch *b,
                                   size_t *ret_idx, size_t *ret_n)
{
	size_t n = 0;

	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];

		if (m->state != IDEM_MSG_DUPLICATE)
			continue;
		ret_idx[n++] = i;
		if (idem_pgarray_add(&bd->dkeys, idem_batch_ptr(b, m->bkey), m->bkey.len, false))
			return IDEM_ERR_NOMEM;
	}
	idem_batch_sort_by_key(b, ret_idx, n);
	*ret_n = n;
	return IDEM_OK;
}

idem_status idem_bind_dup_keys_close(struct idem_bind *bd)
{
	return idem_pgarray_close(&bd->dkeys) ? IDEM_ERR_NOMEM : IDEM_OK;
}

idem_status idem_bind_dup_keys(struct idem_bind *bd, const struct idem_batch *b, size_t *ret_idx,
                               size_t *ret_n)
{
	idem_status r;

	if ((r = idem_bind_dup_keys_open(bd)) != IDEM_OK ||
	    (r = idem_bind_dup_keys_add(bd, b, ret_idx, ret_n)) != IDEM_OK)
		return r;
	return idem_bind_dup_keys_close(bd);
}

idem_status idem_bind_results(struct idem_bind *bd, const struct idem_batch *b, bool *ret_any,
                              const char **ret_vals)
{
	*ret_any = false;
	if (idem_pgarray_open(&bd->rkeys) || idem_pgarray_open(&bd->rvals))
		return IDEM_ERR_NOMEM;
	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];

		if (m->state != IDEM_MSG_APPLIED || m->result.null)
			continue;
		if (idem_pgarray_add(&bd->rkeys, idem_batch_ptr(b, m->bkey), m->bkey.len, false) ||
		    idem_pgarray_add(&bd->rvals, idem_batch_ptr(b, m->result), m->result.len,
		                     false))
			return IDEM_ERR_NOMEM;
		*ret_any = true;
	}
	if (idem_pgarray_close(&bd->rkeys) || idem_pgarray_close(&bd->rvals))
		return IDEM_ERR_NOMEM;
	ret_vals[0] = b->route->consumer;
	ret_vals[1] = bd->rkeys.data;
	ret_vals[2] = bd->rvals.data;
	return IDEM_OK;
}

idem_status idem_bind_row(struct idem_bind *bd, const struct idem_batch *b, size_t i)
{
	const struct idem_batch_msg *m = &b->msgs[i];
	size_t np = b->route->n_params;

	if (need_vals(bd, np + 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t p = 0; p < np; p++)
		bd->vals[p] = idem_batch_ptr(b, b->params[m->param_first + p]);
	return IDEM_OK;
}

idem_status idem_bind_set_open(struct idem_bind *bd, size_t n_params)
{
	if (need_set(bd, n_params) != IDEM_OK || need_vals(bd, n_params + 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t p = 0; p < n_params; p++) {
		if (idem_pgarray_open(&bd->set[p]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

idem_status idem_bind_set_add(struct idem_bind *bd, const struct idem_batch *b, size_t i)
{
	const struct idem_batch_msg *m = &b->msgs[i];
	idem_status r;

	for (size_t p = 0; p < b->route->n_params; p++) {
		struct idem_span s = b->params[m->param_first + p];

		if ((r = idem_bind_text_elem(&bd->set[p], idem_batch_ptr(b, s), s.len, s.null)) !=
		    IDEM_OK)
			return r;
	}
	return IDEM_OK;
}

idem_status idem_bind_set_close(struct idem_bind *bd, size_t n_params)
{
	for (size_t p = 0; p < n_params; p++) {
		if (idem_pgarray_close(&bd->set[p]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		bd->vals[p] = bd->set[p].data;
	}
	return IDEM_OK;
}

/* Append bytea element @p[0..n) in hex input form ("\\x..." quoted) to array literal @a. */
static idem_status hex_elem(struct idem_buf *a, const char *p, size_t n, bool null)
{
	static const char hex[] = "0123456789abcdef";

	if (a->len > 1 && idem_buf_append(a, ",", 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (null)
		return idem_buf_append(a, "NULL", 4);
	/* "\\x..." inside a quoted array element is the bytea hex input "\x...". */
	if (idem_buf_reserve(a, 2 * n + 6) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	memcpy(a->data + a->len, "\"\\\\x", 4);
	a->len += 4;
	for (size_t i = 0; i < n; i++) {
		a->data[a->len++] = hex[(unsigned char)p[i] >> 4];
		a->data[a->len++] = hex[(unsigned char)p[i] & 15];
	}
	a->data[a->len++] = '"';
	a->data[a->len] = '\0';
	return IDEM_OK;
}

idem_status idem_bind_quarantine(struct idem_bind *bd, const struct idem_batch *b, size_t i)
{
	const struct idem_batch_msg *m = &b->msgs[i];

	if (need_vals(bd, 16) != IDEM_OK || idem_pgarray_open(&bd->hnames) ||
	    idem_pgarray_open(&bd->hvals))
		return IDEM_ERR_NOMEM;
	for (size_t h = 0; h < m->n_hdrs; h++) {
		const struct idem_batch_hdr *hd = &b->hdrs[m->hdr_first + h];
		const char *name = idem_batch_ptr(b, hd->name);

		/* Header names are stored as text; a name that is not UTF-8 is stored as hex. */
		if (idem_utf8_valid(name, hd->name.len)) {
			if (idem_pgarray_add(&bd->hnames, name, hd->name.len, false))
				return IDEM_ERR_NOMEM;
		} else if (hex_elem(&bd->hnames, name, hd->name.len, false)) {
			return IDEM_ERR_NOMEM;
		}
		if (hex_elem(&bd->hvals, idem_batch_ptr(b, hd->value), hd->value.len,
		             hd->value.null))
			return IDEM_ERR_NOMEM;
	}
	if (idem_pgarray_close(&bd->hnames) || idem_pgarray_close(&bd->hvals))
		return IDEM_ERR_NOMEM;
	snprintf(bd->part, sizeof(bd->part), "%" PRId32, b->partition);
	snprintf(bd->off, sizeof(bd->off), "%" PRId64, m->offset);
	snprintf(bd->ts, sizeof(bd->ts), "%" PRId64, m->timestamp_ms);
	snprintf(bd->att, sizeof(bd->att), "%d", m->attempts > 0 ? m->attempts : 1);
	memset(bd->fmts, 0, 16 * sizeof(*bd->fmts));
	memset(bd->lens, 0, 16 * sizeof(*bd->lens));
	bd->vals[0] = b->route->consumer;
	bd->vals[1] = b->topic;
	bd->vals[2] = bd->part;
	bd->vals[3] = bd->off;
	bd->vals[4] = idem_batch_ptr(b, m->bkey);
	bd->vals[5] = idem_batch_ptr(b, m->key);
	bd->lens[5] = (int)m->key.len;
	bd->fmts[5] = 1;
	bd->vals[6] = idem_batch_ptr(b, m->value);
	bd->lens[6] = (int)m->value.len;
	bd->fmts[6] = 1;
	bd->vals[7] = bd->hnames.data;
	bd->vals[8] = bd->hvals.data;
	bd->vals[9] = m->timestamp_ms >= 0 ? bd->ts : NULL;
	bd->vals[10] = idem_batch_ptr(b, m->reason);
	bd->vals[11] = m->sqlstate;
	bd->vals[12] = bd->att;
	bd->vals[13] = b->route->dead_letter_topic;
	bd->vals[14] = m->traceparent.null ? NULL : idem_batch_ptr(b, m->traceparent);
	bd->vals[15] = m->tracestate.null ? NULL : idem_batch_ptr(b, m->tracestate);
	return IDEM_OK;
}

/*
 * Does message @m of @b get a reply, and is it a repeat? Every APPLIED message gets one; with
 * routes[].reply.duplicates an upstream duplicate (a re-send of a message applied before, here
 * or in this very transaction) gets its original's result again. Redeliveries and replays do
 * not: the reply of their claim went out with it.
 */
static bool reply_wanted(const struct idem_batch *b, const struct idem_batch_msg *m,
                         bool *ret_repeat)
{
	*ret_repeat = false;
	if (m->state == IDEM_MSG_APPLIED)
		return true;
	if (!b->route->reply_duplicates || m->dup != IDEM_DUP_UPSTREAM)
		return false;
	*ret_repeat = true;
	return m->state == IDEM_MSG_DUPLICATE || m->state == IDEM_MSG_DUP_IN_BATCH;
}

idem_status idem_bind_replies(struct idem_bind *bd, const struct idem_batch *b, size_t *ret_n,
                              const char **ret_vals)
{
	struct idem_buf *a = bd->reply;
	size_t n = 0;

	*ret_n = 0;
	for (size_t c = 0; c < 6; c++) {
		if (idem_pgarray_open(&a[c]))
			return IDEM_ERR_NOMEM;
	}
	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];
		bool repeat, by_msg_key = b->route->reply_key == IDEM_CFG_REPLY_MESSAGE_KEY;
		struct idem_span k = by_msg_key ? m->key : m->bkey;
		char off[24];

		if (!reply_wanted(b, m, &repeat))
			continue;
		snprintf(off, sizeof(off), "%" PRId64, m->offset);
		if (idem_pgarray_add(&a[0], idem_batch_ptr(b, m->bkey), m->bkey.len, false) ||
		    hex_elem(&a[1], idem_batch_ptr(b, k), k.len, k.null) ||
		    idem_pgarray_add(&a[2], off, strlen(off), false) ||
		    idem_pgarray_add(&a[3], repeat ? "t" : "f", 1, false) ||
		    idem_pgarray_add(&a[4], idem_batch_ptr(b, m->traceparent), m->traceparent.len,
		                     m->traceparent.null) ||
		    idem_pgarray_add(&a[5], idem_batch_ptr(b, m->tracestate), m->tracestate.len,
		                     m->tracestate.null))
			return IDEM_ERR_NOMEM;
		n++;
	}
	for (size_t c = 0; c < 6; c++) {
		if (idem_pgarray_close(&a[c]))
			return IDEM_ERR_NOMEM;
	}
	snprintf(bd->rpart, sizeof(bd->rpart), "%" PRId32, b->partition);
	ret_vals[0] = b->route->reply_topic;
	ret_vals[1] = b->route->consumer;
	ret_vals[2] = b->topic;
	ret_vals[3] = bd->rpart;
	for (size_t c = 0; c < 6; c++)
		ret_vals[4 + c] = a[c].data;
	*ret_n = n;
	return IDEM_OK;
}

idem_status idem_bind_traces_open(struct idem_bind *bd)
{
	bd->n_trace = 0;
	for (size_t c = 0; c < IDEM_ARRAY_SIZE(bd->trace); c++) {
		if (idem_pgarray_open(&bd->trace[c]))
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

idem_status idem_bind_traces_add(struct idem_bind *bd, const struct idem_batch *b,
                                 const size_t *idx, size_t n)
{
	struct idem_buf *a = bd->trace;

	for (size_t k = 0; k < n; k++) {
		const struct idem_batch_msg *m = &b->msgs[idx[k]];

		if (m->traceparent.null)
			continue;
		if (idem_pgarray_add(&a[0], b->route->consumer, strlen(b->route->consumer),
		                     false) ||
		    idem_pgarray_add(&a[1], idem_batch_ptr(b, m->bkey), m->bkey.len, false) ||
		    idem_pgarray_add(&a[2], idem_batch_ptr(b, m->traceparent), m->traceparent.len,
		                     false) ||
		    idem_pgarray_add(&a[3], idem_batch_ptr(b, m->tracestate), m->tracestate.len,
		                     m->tracestate.null))
			return IDEM_ERR_NOMEM;
		bd->n_trace++;
	}
	return IDEM_OK;
}

idem_status idem_bind_traces_close(struct idem_bind *bd, const char **ret_vals, size_t *ret_n)
{
	for (size_t c = 0; c < IDEM_ARRAY_SIZE(bd->trace); c++) {
		if (idem_pgarray_close(&bd->trace[c]))
			return IDEM_ERR_NOMEM;
		ret_vals[c] = bd->trace[c].data;
	}
	*ret_n = bd->n_trace;
	return IDEM_OK;
}

static int progress_cmp(const void *x, const void *y)
{
	const struct idem_batch *a = ((const struct idem_bind_progress *)x)->b;
	const struct idem_batch *b = ((const struct idem_bind_progress *)y)->b;
	int c = strcmp(a->route->consumer, b->route->consumer);

	if (c == 0)
		c = strcmp(a->topic, b->topic);
	if (c == 0)
		c = (a->partition > b->partition) - (a->partition < b->partition);
	return c;
}

idem_status idem_bind_progress(struct idem_bind *bd, struct idem_bind_progress *p, size_t n,
                               const char **ret_vals)
{
	const char *cluster;
	char v[24];
	int len;

	qsort(p, n, sizeof(*p), progress_cmp);
	if (prog_open(bd, IDEM_BIND_PROGRESS_PARAMS) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < n; k++) {
		if (prog_partition(bd, p[k].b) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		len = snprintf(v, sizeof(v), "%" PRId64, p[k].next_offset);
		if (idem_pgarray_add(&bd->prog[3], v, (size_t)len, false))
			return IDEM_ERR_NOMEM;
		for (int c = 0; c < 8; c++) {
			len = snprintf(v, sizeof(v), "%" PRIu64, p[k].counts[c]);
			if (idem_pgarray_add(&bd->prog[4 + c], v, (size_t)len, false))
				return IDEM_ERR_NOMEM;
		}
		/* A halt records where (the next offset) and why; otherwise both are cleared. */
		len = snprintf(v, sizeof(v), "%" PRId64, p[k].next_offset);
		if (idem_pgarray_add(&bd->prog[12], v, (size_t)len, !p[k].halted) ||
		    idem_pgarray_add(&bd->prog[13], p[k].halt_reason,
		                     p[k].halted ? strlen(p[k].halt_reason) : 0, !p[k].halted))
			return IDEM_ERR_NOMEM;
		len = snprintf(v, sizeof(v), "%" PRId64, p[k].reapply_to);
		if (idem_pgarray_add(&bd->prog[14], v, (size_t)len,
		                     p[k].reapply_to <= p[k].next_offset))
			return IDEM_ERR_NOMEM;
		len = snprintf(v, sizeof(v), "%" PRIu64, p[k].reapplied);
		if (idem_pgarray_add(&bd->prog[15], v, (size_t)len, false))
			return IDEM_ERR_NOMEM;
		/* The Kafka cluster the offsets are in; NULL when unknown. */
		cluster = p[k].b->kafka_cluster;
		if (idem_pgarray_add(&bd->prog[16], cluster != NULL ? cluster : "",
		                     cluster != NULL ? strlen(cluster) : 0,
		                     cluster == NULL || cluster[0] == '\0'))
			return IDEM_ERR_NOMEM;
		/* Recorded by a row this batch inserts (its start was not recorded at
		 * assignment): where the first start began, the group, which tells a renamed
		 * consumer's start that this one is its earlier name, and the log's epoch, which
		 * the commits' metadata names. */
		len = snprintf(v, sizeof(v), "%" PRId64, p[k].b->log_first);
		if (idem_pgarray_add(&bd->prog[17], v, (size_t)len, p[k].b->log_first < 0) ||
		    idem_pgarray_add(&bd->prog[18],
		                     p[k].b->group_id != NULL ? p[k].b->group_id : "",
		                     p[k].b->group_id != NULL ? strlen(p[k].b->group_id) : 0,
		                     p[k].b->group_id == NULL))
			return IDEM_ERR_NOMEM;
		len = snprintf(v, sizeof(v), "%" PRId32, p[k].b->log_epoch);
		if (idem_pgarray_add(&bd->prog[19], v, (size_t)len, false))
			return IDEM_ERR_NOMEM;
	}
	return prog_close(bd, IDEM_BIND_PROGRESS_PARAMS, ret_vals);
}
