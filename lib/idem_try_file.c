/*
 * idem_try_file.c - the messages `idemctl try` runs: the message file format (idem_try.h) and
 * messages read from Kafka, as idem_consumer_view() sees them (the daemon's one view).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_try.h"

/* The fields of the format; the forms of key, value and header share one slot each. */
enum slot { S_TOPIC, S_PARTITION, S_OFFSET, S_TIMESTAMP, S_KEY, S_VALUE, S_HEADER };
enum enc { ENC_TEXT, ENC_HEX, ENC_BASE64 };

static const struct {
	const char *name;
	enum slot slot;
	enum enc enc;
} fields[] = {
	{ "topic", S_TOPIC, ENC_TEXT },
	{ "partition", S_PARTITION, ENC_TEXT },
	{ "offset", S_OFFSET, ENC_TEXT },
	{ "timestamp", S_TIMESTAMP, ENC_TEXT },
	{ "key", S_KEY, ENC_TEXT },
	{ "key-hex", S_KEY, ENC_HEX },
	{ "key-base64", S_KEY, ENC_BASE64 },
	{ "value", S_VALUE, ENC_TEXT },
	{ "value-hex", S_VALUE, ENC_HEX },
	{ "value-base64", S_VALUE, ENC_BASE64 },
	{ "header", S_HEADER, ENC_TEXT },
	{ "header-hex", S_HEADER, ENC_HEX },
	{ "header-base64", S_HEADER, ENC_BASE64 },
};

struct parser {
	const char *name;
	const char *p, *end;
	unsigned line;       /* of the line last read */
	unsigned seen;       /* slots given in the message being read (1 << slot) */
	unsigned msg_line;   /* where it started, 0: none open */
	const char *field;   /* the field being read, for errors */
	struct idem_buf buf; /* a decoded value */
	idem_error *err;
};

static idem_status fail(struct parser *ps, const char *fmt, ...) IDEM_PRINTF(2, 3);

/* "NAME:LINE: error: 'FIELD': what" (without the field outside one). */
static idem_status fail(struct parser *ps, const char *fmt, ...)
{
	char what[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (ps->field != NULL)
		return idem_error_set(ps->err, IDEM_ERR_INVALID, "%s:%u: error: '%s': %s", ps->name,
		                      ps->line, ps->field, what);
	return idem_error_set(ps->err, IDEM_ERR_INVALID, "%s:%u: error: %s", ps->name, ps->line,
	                      what);
}

/* The next line, without its LF or CRLF; false at the end. */
static bool next_line(struct parser *ps, const char **ret_s, size_t *ret_n)
{
	const char *s = ps->p, *nl;
	size_t n;

	if (ps->p >= ps->end)
		return false;
	nl = memchr(s, '\n', (size_t)(ps->end - s));
	n = nl ? (size_t)(nl - s) : (size_t)(ps->end - s);
	ps->p = nl ? nl + 1 : ps->end;
	if (n > 0 && s[n - 1] == '\r')
		n--;
	ps->line++;
	*ret_s = s;
	*ret_n = n;
	return true;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_space(char c)
{
	return is_blank(c) || c == '\n' || c == '\r';
}

static int b64_digit(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/* Decode @s[0..n) written as @enc into ps->buf (reset first). */
static idem_status decode(struct parser *ps, enum enc enc, const char *s, size_t n)
{
	unsigned acc = 0;
	int bits = 0, hi = -1;
	size_t pad = 0;

	idem_buf_reset(&ps->buf);
	if (enc == ENC_TEXT)
		return idem_buf_append(&ps->buf, s, n) == IDEM_OK ? IDEM_OK
		                                                  : idem_error_nomem(ps->err);
	for (size_t i = 0; i < n; i++) {
		unsigned char byte;
		int d;

		if (is_space(s[i]))
			continue;
		if (enc == ENC_HEX) {
			if ((d = idem_hex_digit(s[i])) < 0)
				return fail(ps, "'%c' is not a hex digit", s[i]);
			if (hi < 0) {
				hi = d;
				continue;
			}
			byte = (unsigned char)(hi << 4 | d);
			hi = -1;
		} else {
			if (s[i] == '=') {
				pad++;
				continue;
			}
			if (pad > 0 || (d = b64_digit(s[i])) < 0)
				return fail(ps, "'%c' is not a base64 character here", s[i]);
			acc = (acc << 6 | (unsigned)d) & 0xffffff;
			if ((bits += 6) < 8)
				continue;
			bits -= 8;
			byte = (unsigned char)(acc >> bits);
		}
		if (idem_buf_append(&ps->buf, &byte, 1) != IDEM_OK)
			return idem_error_nomem(ps->err);
	}
	if (enc == ENC_HEX && hi >= 0)
		return fail(ps, "an odd number of hex digits");
	if (enc == ENC_BASE64 && (bits >= 6 || pad > 2 || (acc & ((1u << bits) - 1)) != 0))
		return fail(ps, "not whole base64 (its length or its last character is wrong)");
	return IDEM_OK;
}

/* A copy of @p[0..n) with a NUL after it (@p may hold NULs). */
static void *dup_bytes(const void *p, size_t n)
{
	char *q = malloc(n + 1);

	if (q != NULL) {
		memcpy(q, p, n);
		q[n] = '\0';
	}
	return q;
}

static idem_status number(struct parser *ps, const char *s, size_t n, int64_t max, int64_t *ret)
{
	char tmp[32];

	if (n >= sizeof(tmp) ||
	    (memcpy(tmp, s, n), tmp[n] = '\0', !idem_int_parse(tmp, 0, max, ret)))
		return fail(ps, "'%.*s' is not a whole number from 0 to %" PRId64,
		            (int)(n < 64 ? n : 64), s, max);
	return IDEM_OK;
}

static idem_status add_header(struct parser *ps, struct idem_try_msg *m, enum enc enc,
                              const char *s, size_t n)
{
	const char *eq = memchr(s, '=', n);
	size_t nlen = eq ? (size_t)(eq - s) : n;
	struct idem_try_hdr *h;
	idem_status r;

	if (nlen == 0)
		return fail(ps, "a header needs a name: NAME=VALUE");
	if (memchr(s, '\0', nlen) != NULL)
		return fail(ps, "a header name cannot hold a NUL byte");
	if (eq == NULL && enc != ENC_TEXT)
		return fail(ps,
		            "NAME=VALUE expected (a header with a null value is 'header: NAME')");
	if (m->n_hdrs == m->cap_hdrs) {
		size_t cap = m->cap_hdrs ? 2 * m->cap_hdrs : 4;
		struct idem_try_hdr *v = realloc(m->hdrs, cap * sizeof(*v));

		if (v == NULL)
			return idem_error_nomem(ps->err);
		m->hdrs = v;
		m->cap_hdrs = cap;
	}
	h = &m->hdrs[m->n_hdrs];
	*h = (struct idem_try_hdr){ 0 };
	if (eq != NULL && (r = decode(ps, enc, eq + 1, n - nlen - 1)) != IDEM_OK)
		return r;
	if ((h->name = dup_bytes(s, nlen)) == NULL ||
	    (eq != NULL &&
	     (h->value = dup_bytes(ps->buf.data ? ps->buf.data : "", ps->buf.len)) == NULL)) {
		free(h->name);
		return idem_error_nomem(ps->err);
	}
	h->len = eq != NULL ? ps->buf.len : 0;
	m->n_hdrs++;
	return IDEM_OK;
}

/* A "<<END" value: the lines up to END alone on a line, joined by LF. */
static idem_status heredoc(struct parser *ps, const char *delim, size_t dlen, struct idem_buf *out)
{
	unsigned start = ps->line;
	const char *s;
	size_t n;
	bool first = true;

	idem_buf_reset(out);
	if (dlen == 0)
		return fail(ps, "'<<' needs a word to end the value with ('<<END')");
	while (next_line(ps, &s, &n)) {
		if (n == dlen && memcmp(s, delim, n) == 0)
			return IDEM_OK;
		if ((!first && idem_buf_append(out, "\n", 1) != IDEM_OK) ||
		    idem_buf_append(out, s, n) != IDEM_OK)
			return idem_error_nomem(ps->err);
		first = false;
	}
	ps->line = start;
	return fail(ps, "'<<%.*s' is not closed ('%.*s' alone on a line) before the end", (int)dlen,
	            delim, (int)dlen, delim);
}

/* One "FIELD: VALUE" line of message @m. */
static idem_status field_line(struct parser *ps, struct idem_try_msg *m, const char *s, size_t n)
{
	const char *colon = memchr(s, ':', n), *v;
	struct idem_buf doc = { 0 };
	size_t i, vn, flen;
	int64_t num;
	idem_status r;

	ps->field = NULL;
	if (colon == NULL)
		return fail(ps, "'%.*s' is not 'FIELD: VALUE'", (int)(n < 64 ? n : 64), s);
	flen = (size_t)(colon - s);
	for (i = 0; i < IDEM_ARRAY_SIZE(fields); i++) {
		if (strlen(fields[i].name) == flen && memcmp(fields[i].name, s, flen) == 0)
			break;
	}
	if (i == IDEM_ARRAY_SIZE(fields))
		return fail(
		        ps,
		        "unknown field '%.*s' (topic, partition, offset, timestamp, key, value, "
		        "header; key, value and header also as -hex or -base64)",
		        (int)(flen < 64 ? flen : 64), s);
	ps->field = fields[i].name;
	if (fields[i].slot != S_HEADER && (ps->seen & (1u << fields[i].slot)))
		return fail(ps, "given twice in the message that starts at line %u", ps->msg_line);
	ps->seen |= 1u << fields[i].slot;
	for (v = colon + 1; v < s + n && is_blank(*v); v++)
		;
	vn = (size_t)(s + n - v);
	switch (fields[i].slot) {
	case S_TOPIC:
		if (vn == 0 || memchr(v, '\0', vn) != NULL)
			return fail(ps, "a topic name is needed");
		free(m->topic);
		return (m->topic = dup_bytes(v, vn)) ? IDEM_OK : idem_error_nomem(ps->err);
	case S_PARTITION:
		if ((r = number(ps, v, vn, INT32_MAX, &num)) == IDEM_OK)
			m->partition = (int32_t)num;
		return r;
	case S_OFFSET:
		return number(ps, v, vn, INT64_MAX, &m->offset);
	case S_TIMESTAMP:
		return number(ps, v, vn, INT64_MAX, &m->timestamp_ms);
	case S_HEADER:
		return add_header(ps, m, fields[i].enc, v, vn);
	case S_KEY:
	case S_VALUE:
		break;
	}
	if (vn >= 2 && v[0] == '<' && v[1] == '<') {
		const char *d = v + 2, *e = s + n;

		while (e > d && is_blank(e[-1]))
			e--;
		if ((r = heredoc(ps, d, (size_t)(e - d), &doc)) == IDEM_OK)
			r = decode(ps, fields[i].enc, doc.data ? doc.data : "", doc.len);
		idem_buf_done(&doc);
	} else {
		r = decode(ps, fields[i].enc, v, vn);
	}
	if (r != IDEM_OK)
		return r;
	if (fields[i].slot == S_KEY) {
		m->key = dup_bytes(ps->buf.data ? ps->buf.data : "", ps->buf.len);
		m->key_len = ps->buf.len;
		return m->key ? IDEM_OK : idem_error_nomem(ps->err);
	}
	m->value = dup_bytes(ps->buf.data ? ps->buf.data : "", ps->buf.len);
	m->value_len = ps->buf.len;
	return m->value ? IDEM_OK : idem_error_nomem(ps->err);
}

static void msg_done(struct idem_try_msg *m)
{
	free(m->topic);
	free(m->key);
	free(m->value);
	for (size_t h = 0; h < m->n_hdrs; h++) {
		free(m->hdrs[h].name);
		free(m->hdrs[h].value);
	}
	free(m->hdrs);
}

static void msg_init(struct idem_try_msg *m)
{
	*m = (struct idem_try_msg){ .partition = -1, .offset = -1, .timestamp_ms = -1 };
}

/* Append @m (taken over, even on failure) to @msgs. */
static idem_status push(struct idem_try_msgs *msgs, struct idem_try_msg *m, idem_error *err)
{
	if (msgs->n == msgs->cap) {
		size_t cap = msgs->cap ? 2 * msgs->cap : 8;
		struct idem_try_msg *v = realloc(msgs->v, cap * sizeof(*v));

		if (v == NULL) {
			msg_done(m);
			return idem_error_nomem(err);
		}
		msgs->v = v;
		msgs->cap = cap;
	}
	msgs->v[msgs->n++] = *m;
	msg_init(m);
	return IDEM_OK;
}

idem_status idem_try_parse(const char *name, const char *text, size_t len,
                           struct idem_try_msgs *msgs, idem_error *err)
{
	struct parser ps = { .name = name, .p = text, .end = text + len, .err = err };
	struct idem_try_msg m;
	size_t first = msgs->n;
	idem_status r = IDEM_OK;
	const char *s;
	size_t n;

	msg_init(&m);
	while (r == IDEM_OK && next_line(&ps, &s, &n)) {
		size_t i = 0;

		while (i < n && is_blank(s[i]))
			i++;
		if (i == n || s[i] == '#')
			continue;
		if (n == 3 && memcmp(s, "---", 3) == 0) {
			ps.field = NULL;
			if (ps.msg_line == 0)
				r = fail(&ps, "no field before '---' (an empty message)");
			else
				r = push(msgs, &m, err);
			ps.msg_line = 0;
			ps.seen = 0;
			continue;
		}
		if (ps.msg_line == 0) {
			ps.msg_line = ps.line;
			m.line = ps.line;
		}
		r = field_line(&ps, &m, s, n);
	}
	if (r == IDEM_OK && ps.msg_line != 0)
		r = push(msgs, &m, err);
	else if (r == IDEM_OK && msgs->n == first)
		r = idem_error_set(err, IDEM_ERR_INVALID, "%s: error: no message in it", name);
	msg_done(&m);
	idem_buf_done(&ps.buf);
	if (r != IDEM_OK) {
		while (msgs->n > first)
			msg_done(&msgs->v[--msgs->n]);
	}
	return r;
}

void idem_try_msgs_done(struct idem_try_msgs *msgs)
{
	if (msgs == NULL)
		return;
	for (size_t i = 0; i < msgs->n; i++)
		msg_done(&msgs->v[i]);
	free(msgs->v);
	*msgs = (struct idem_try_msgs){ 0 };
}

/* A copy of the message @v sees, appended to @msgs. */
static idem_status copy_view(const struct idem_msgview *v, struct idem_try_msgs *msgs,
                             idem_error *err)
{
	struct idem_try_msg m;

	msg_init(&m);
	m.partition = v->partition;
	m.offset = v->offset;
	m.timestamp_ms = v->timestamp_ms;
	m.key_len = v->key_len;
	m.value_len = v->value_len;
	if ((m.topic = dup_bytes(v->topic, strlen(v->topic))) == NULL ||
	    (v->key != NULL && (m.key = dup_bytes(v->key, v->key_len)) == NULL) ||
	    (v->value != NULL && (m.value = dup_bytes(v->value, v->value_len)) == NULL) ||
	    (v->n_headers > 0 && (m.hdrs = calloc(v->n_headers, sizeof(*m.hdrs))) == NULL))
		goto out_nomem;
	for (; m.n_hdrs < v->n_headers; m.n_hdrs++) {
		const struct idem_header *h = &v->headers[m.n_hdrs];

		m.hdrs[m.n_hdrs].len = h->len;
		if ((m.hdrs[m.n_hdrs].name = dup_bytes(h->name, strlen(h->name))) == NULL ||
		    (h->value != NULL &&
		     (m.hdrs[m.n_hdrs].value = dup_bytes(h->value, h->len)) == NULL)) {
			free(m.hdrs[m.n_hdrs].name);
			goto out_nomem;
		}
	}
	return push(msgs, &m, err);

out_nomem:
	msg_done(&m);
	return idem_error_nomem(err);
}

idem_status idem_try_read_kafka(rd_kafka_t *rk, const char *topic, int32_t partition,
                                int64_t offset, int count, int timeout_ms,
                                struct idem_try_msgs *msgs, idem_error *err)
{
	rd_kafka_topic_partition_list_t *list;
	struct idem_consumer_headers hdrs = { 0 };
	int64_t lo, hi, next = offset, end = offset + count, deadline = idem_mono_ms() + timeout_ms;
	rd_kafka_resp_err_t e;
	idem_status r = IDEM_OK;

	e = rd_kafka_query_watermark_offsets(rk, topic, partition, &lo, &hi, timeout_ms);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		return idem_error_set(err, IDEM_ERR_KAFKA, "%s/%" PRId32 ": %s", topic, partition,
		                      rd_kafka_err2str(e));
	if (offset < lo || end > hi)
		return idem_error_set(err, IDEM_ERR_NOT_FOUND,
		                      "%s/%" PRId32 " holds offsets %" PRId64 "..%" PRId64
		                      ", not %" PRId64 "..%" PRId64,
		                      topic, partition, lo, hi - 1, offset, end - 1);
	list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(list, topic, partition)->offset = offset;
	if ((e = rd_kafka_assign(rk, list)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		r = idem_error_set(err, IDEM_ERR_KAFKA, "assign %s/%" PRId32 ": %s", topic,
		                   partition, rd_kafka_err2str(e));
		goto out;
	}
	while (next < end && r == IDEM_OK) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 200);
		struct idem_msgview v;

		if (rkm == NULL) {
			if (idem_mono_ms() > deadline)
				r = idem_error_set(err, IDEM_ERR_KAFKA,
				                   "reading %s/%" PRId32
				                   " stalled at offset %" PRId64,
				                   topic, partition, next);
			continue;
		}
		if (rkm->err == RD_KAFKA_RESP_ERR_NO_ERROR && rkm->offset >= next &&
		    rkm->offset < end) {
			next = rkm->offset + 1;
			if (idem_consumer_view(rkm, &hdrs, &v) != IDEM_OK)
				r = idem_error_nomem(err);
			else
				r = copy_view(&v, msgs, err);
		} else if (rkm->err != RD_KAFKA_RESP_ERR_NO_ERROR &&
		           rkm->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			r = idem_error_set(err, IDEM_ERR_KAFKA, "reading %s/%" PRId32 ": %s", topic,
			                   partition, rd_kafka_message_errstr(rkm));
		}
		rd_kafka_message_destroy(rkm);
	}
	rd_kafka_assign(rk, NULL);
out:
	rd_kafka_topic_partition_list_destroy(list);
	idem_consumer_headers_free(&hdrs);
	return r;
}
