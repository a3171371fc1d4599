/*
 * idem_avro_text.c - the one text form of each Avro value (the table in idem_avro.h), JSON
 * for records, arrays and maps, and RFC 6901 pointers into a decoded datum; see idem_avro.c.
 */
#include <assert.h>
#include <avro.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_avro_int.h"

/*
 * Text forms.
 */

static idem_status append_u64(struct idem_buf *out, uint64_t u, bool neg)
{
	char buf[24];
	size_t i = sizeof(buf);

	do {
		buf[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (neg)
		buf[--i] = '-';
	return idem_buf_append(out, buf + i, sizeof(buf) - i);
}

static idem_status append_i64(struct idem_buf *out, int64_t v)
{
	return append_u64(out, v < 0 ? ~(uint64_t)v + 1 : (uint64_t)v, v < 0);
}

/* Writes @v in decimal with at least @width digits (zero-padded) at @p; @returns the end. */
static char *put_uint(char *p, uint64_t v, int width)
{
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n < width)
		tmp[n++] = '0';
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

/*
 * YYYY-MM-DD at @p (years before 0 as -YYYY, after 9999 with more digits: ISO 8601 expanded).
 * Written by hand rather than with snprintf(), which took most of the time of a timestamp read.
 */
static char *put_date(char *p, int64_t days)
{
	int64_t y;
	int m, d;

	idem_civil_from_days(days, &y, &m, &d);
	if (y < 0)
		*p++ = '-';
	p = put_uint(p, (uint64_t)(y < 0 ? -y : y), 4);
	*p++ = '-';
	p = put_uint(p, (uint64_t)m, 2);
	*p++ = '-';
	return put_uint(p, (uint64_t)d, 2);
}

/* @t in units of 1/@per_sec second (1000, 1000000) as YYYY-MM-DDTHH:MM:SS.fffZ. */
static idem_status append_timestamp(struct idem_buf *out, int64_t t, int64_t per_sec, int digits)
{
	int64_t secs = t / per_sec, frac = t % per_sec, days, sod;
	char buf[64], *p;

	if (frac < 0) {
		frac += per_sec;
		secs--;
	}
	days = secs / 86400;
	sod = secs % 86400;
	if (sod < 0) {
		sod += 86400;
		days--;
	}
	p = put_date(buf, days);
	*p++ = 'T';
	p = put_uint(p, (uint64_t)(sod / 3600), 2);
	*p++ = ':';
	p = put_uint(p, (uint64_t)(sod / 60 % 60), 2);
	*p++ = ':';
	p = put_uint(p, (uint64_t)(sod % 60), 2);
	*p++ = '.';
	p = put_uint(p, (uint64_t)frac, digits);
	*p++ = 'Z';
	return idem_buf_append(out, buf, (size_t)(p - buf));
}

static idem_status append_date(struct idem_buf *out, int32_t days)
{
	char buf[32];

	return idem_buf_append(out, buf, (size_t)(put_date(buf, days) - buf));
}

/*
 * A decimal: @b[0..n) is the unscaled value, two's complement, big-endian, of any length; the
 * text has exactly @scale digits after the point ("0.05", "-0.05", "12"). A value with more
 * digits than @precision breaks its schema (Java's writer refuses to write one) and is
 * IDEM_ERR_KEY; that also bounds the work, which is quadratic in the length.
 */
IDEM_TESTABLE idem_status idem__avro_decimal_text(struct idem_buf *out, const uint8_t *b, size_t n,
                                                  int precision, int scale);
IDEM_TESTABLE idem_status idem__avro_decimal_text(struct idem_buf *out, const uint8_t *b, size_t n,
                                                  int precision, int scale)
{
	uint8_t mag_small[64], *mag = mag_small;
	uint32_t limb_small[24], *limbs = limb_small;
	char dig_small[24 * 9 + 1], *dig = dig_small;
	bool neg = n > 0 && (b[0] & 0x80);
	size_t skip = 0, m, nl = 0, cap, nd, i;
	unsigned carry = 1;
	idem_status r = IDEM_OK;

	if (n > sizeof(mag_small) && (mag = malloc(n)) == NULL)
		return IDEM_ERR_NOMEM;
	for (i = n; i-- > 0;) {
		if (neg) {
			carry += (uint8_t)~b[i];
			mag[i] = (uint8_t)carry;
			carry >>= 8;
		} else {
			mag[i] = b[i];
		}
	}
	while (skip < n && mag[skip] == 0)
		skip++;
	m = n - skip;
	/* At least 2^(8(m-1)): more than @precision digits once 8(m-1) log10(2) >= precision. */
	if (m > 0 && (double)(m - 1) * 8 * 0.30102999566398119521 >= precision) {
		r = IDEM_ERR_KEY;
		goto out_free_mag;
	}
	cap = m * 8 / 29 + 2; /* base-1e9 limbs: 8 log10(2) / 9 < 8 / 29 */
	if (cap > IDEM_ARRAY_SIZE(limb_small) && ((limbs = malloc(cap * sizeof(*limbs))) == NULL ||
	                                          (dig = malloc(cap * 9 + 1)) == NULL)) {
		r = IDEM_ERR_NOMEM;
		goto out_free_limbs;
	}
	for (i = skip; i < n; i++) {
		uint64_t c = mag[i];

		for (size_t k = 0; k < nl; k++) {
			uint64_t t = (uint64_t)limbs[k] * 256 + c;

			limbs[k] = (uint32_t)(t % 1000000000);
			c = t / 1000000000;
		}
		if (c != 0)
			limbs[nl++] = (uint32_t)c;
	}
	if (nl == 0) {
		nd = (size_t)snprintf(dig, 2, "0");
	} else {
		nd = (size_t)snprintf(dig, 10, "%" PRIu32, limbs[nl - 1]);
		for (size_t k = nl - 1; k-- > 0;)
			nd += (size_t)snprintf(dig + nd, 10, "%09" PRIu32, limbs[k]);
	}
	if (nd > (size_t)precision) {
		r = IDEM_ERR_KEY;
		goto out_free_limbs;
	}
	if (neg && nl > 0)
		r = idem_buf_append(out, "-", 1);
	if (r == IDEM_OK && scale == 0) {
		r = idem_buf_append(out, dig, nd);
	} else if (r == IDEM_OK && nd > (size_t)scale) {
		if (idem_buf_append(out, dig, nd - (size_t)scale) != IDEM_OK ||
		    idem_buf_append(out, ".", 1) != IDEM_OK ||
		    idem_buf_append(out, dig + nd - (size_t)scale, (size_t)scale) != IDEM_OK)
			r = IDEM_ERR_NOMEM;
	} else if (r == IDEM_OK) {
		if (idem_buf_reserve(out, 2 + (size_t)scale) != IDEM_OK) {
			r = IDEM_ERR_NOMEM;
		} else {
			memcpy(out->data + out->len, "0.", 2);
			memset(out->data + out->len + 2, '0', (size_t)scale - nd);
			out->len += 2 + (size_t)scale - nd;
			r = idem_buf_append(out, dig, nd);
		}
	}
out_free_limbs:
	if (limbs != limb_small)
		free(limbs);
	if (dig != dig_small)
		free(dig);
out_free_mag:
	if (mag != mag_small)
		free(mag);
	return r;
}

/* @s[0..n) as a JSON string. @returns IDEM_ERR_KEY if it is not valid UTF-8. */
static idem_status append_json_string(struct idem_buf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = (const uint8_t *)s;
	size_t i = 0, run, k;
	char *d;

	if (n > (SIZE_MAX - 2) / 6 || idem_buf_reserve(out, 6 * n + 2) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	d = out->data + out->len;
	*d++ = '"';
	while (i < n) {
		if (p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\') {
			*d++ = (char)p[i++];
		} else if (p[i] < 0x20) {
			memcpy(d, "\\u00", 4);
			d[4] = hex[p[i] >> 4];
			d[5] = hex[p[i] & 15];
			d += 6;
			i++;
		} else if (p[i] < 0x80) {
			*d++ = '\\';
			*d++ = (char)p[i++];
		} else {
			if ((run = idem_utf8_seq(p + i, n - i)) == 0) {
				out->data[out->len] = '\0';
				return IDEM_ERR_KEY;
			}
			for (k = 0; k < run; k++)
				*d++ = (char)p[i++];
		}
	}
	*d++ = '"';
	out->len = (size_t)(d - out->data);
	out->data[out->len] = '\0';
	return IDEM_OK;
}

/*
 * Reading the decoded value.
 */

struct render {
	const idem_avro_dec *dec;
	const char *ptr; /* for messages */
	struct idem_buf *out;
	idem_error *err;
};

static idem_status render_broken(const struct render *rd)
{
	return idem_error_set(rd->err, IDEM_ERR_INVALID,
	                      "avro-c's value does not have its schema's shape");
}

static idem_status render_status(const struct render *rd, idem_status r)
{
	if (r == IDEM_ERR_NOMEM)
		return idem_error_nomem(rd->err);
	return r;
}

/* @s[0..n) as a JSON string, for render_json(). */
static idem_status render_string(const struct render *rd, const char *s, size_t n)
{
	idem_status r = append_json_string(rd->out, s, n);

	if (r == IDEM_ERR_KEY)
		return idem_error_set(rd->err, IDEM_ERR_KEY, "a string in it is not valid UTF-8");
	return render_status(rd, r);
}

/* Passes @v and @n through unions to the selected branch. */
static bool through_unions(avro_value_t *v, const struct avro_node **n)
{
	avro_value_t branch;
	int d;

	while ((*n)->type == AVRO_UNION) {
		if (avro_value_get_discriminant(v, &d) != 0 || d < 0 || (size_t)d >= (*n)->n ||
		    avro_value_get_current_branch(v, &branch) != 0)
			return false;
		*v = branch;
		*n = (*n)->sub[d];
	}
	return true;
}

/*
 * The text of scalar @v (type @n, not a union, record, array, map or null). With @json,
 * the JSON form: strings quoted and escaped, numbers bare.
 */
static idem_status render_scalar(const struct render *rd, avro_value_t *v,
                                 const struct avro_node *n, bool json)
{
	struct idem_buf *out = rd->out;
	const void *bytes;
	const char *str;
	size_t size;
	int32_t i32;
	int64_t i64;
	double dbl;
	float flt;
	int i;
	idem_status r;
	bool quote;

	switch (n->type) {
	case AVRO_BOOLEAN:
		if (avro_value_get_boolean(v, &i) != 0)
			return render_broken(rd);
		return render_status(rd, idem_buf_append_str(out, i ? "true" : "false"));
	case AVRO_INT32:
		if (avro_value_get_int(v, &i32) != 0)
			return render_broken(rd);
		if (n->logical != LOGICAL_DATE)
			return render_status(rd, append_i64(out, i32));
		quote = json;
		if ((quote && idem_buf_append(out, "\"", 1) != IDEM_OK) ||
		    append_date(out, i32) != IDEM_OK ||
		    (quote && idem_buf_append(out, "\"", 1) != IDEM_OK))
			return idem_error_nomem(rd->err);
		return IDEM_OK;
	case AVRO_INT64:
		if (avro_value_get_long(v, &i64) != 0)
			return render_broken(rd);
		if (n->logical != LOGICAL_TS_MILLIS && n->logical != LOGICAL_TS_MICROS)
			return render_status(rd, append_i64(out, i64));
		quote = json;
		if ((quote && idem_buf_append(out, "\"", 1) != IDEM_OK) ||
		    (n->logical == LOGICAL_TS_MILLIS
		             ? append_timestamp(out, i64, 1000, 3)
		             : append_timestamp(out, i64, 1000000, 6)) != IDEM_OK ||
		    (quote && idem_buf_append(out, "\"", 1) != IDEM_OK))
			return idem_error_nomem(rd->err);
		return IDEM_OK;
	case AVRO_FLOAT:
		if (avro_value_get_float(v, &flt) != 0)
			return render_broken(rd);
		return render_status(rd, idem_buf_append_real(out, flt, true, json));
	case AVRO_DOUBLE:
		if (avro_value_get_double(v, &dbl) != 0)
			return render_broken(rd);
		return render_status(rd, idem_buf_append_real(out, dbl, false, json));
	case AVRO_STRING:
		if (avro_value_get_string(v, &str, &size) != 0 || size == 0)
			return render_broken(rd);
		if (!json)
			return render_status(rd, idem_buf_append(out, str, size - 1));
		return render_string(rd, str, size - 1);
	case AVRO_ENUM:
		if (avro_value_get_enum(v, &i) != 0 || i < 0 || (size_t)i >= n->n)
			return render_broken(rd);
		if (!json)
			return render_status(rd, idem_buf_append_str(out, n->names[i]));
		return render_string(rd, n->names[i], strlen(n->names[i]));
	case AVRO_BYTES:
	case AVRO_FIXED:
		if ((n->type == AVRO_BYTES ? avro_value_get_bytes(v, &bytes, &size)
		                           : avro_value_get_fixed(v, &bytes, &size)) != 0)
			return render_broken(rd);
		if (json && idem_buf_append(out, "\"", 1) != IDEM_OK)
			return idem_error_nomem(rd->err);
		if (n->logical == LOGICAL_DECIMAL) {
			r = idem__avro_decimal_text(out, bytes, size, n->precision, n->scale);
			if (r == IDEM_ERR_KEY)
				return idem_error_set(
				        rd->err, IDEM_ERR_KEY,
				        "a decimal has more digits than its precision %d",
				        n->precision);
		} else if (json) {
			/* "\x0a" in JSON: the backslash escaped. */
			r = idem_buf_append(out, "\\", 1);
			if (r == IDEM_OK)
				r = idem_buf_append_bytea(out, bytes, size);
		} else {
			r = idem_buf_append_bytea(out, bytes, size);
		}
		if (r == IDEM_OK && json)
			r = idem_buf_append(out, "\"", 1);
		return render_status(rd, r);
	default:
		return render_broken(rd);
	}
}

static idem_status render_json(const struct render *rd, avro_value_t *v, const struct avro_node *n);

/* Whether map entry @a sorts after @b: bytewise, a prefix first. */
static bool entry_after(const struct map_entry *a, const struct map_entry *b)
{
	int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);

	return c > 0 || (c == 0 && a->len > b->len);
}

/* Heapsort (qsort() may allocate; this runs on every map read, after warm-up without any). */
static void sort_entries(struct map_entry *e, size_t n)
{
	struct map_entry t;
	size_t start = n / 2, end = n, root, child;

	while (end > 1) {
		if (start > 0) {
			start--;
		} else {
			end--;
			t = e[0];
			e[0] = e[end];
			e[end] = t;
		}
		root = start;
		while ((child = 2 * root + 1) < end) {
			if (child + 1 < end && entry_after(&e[child + 1], &e[child]))
				child++;
			if (!entry_after(&e[child], &e[root]))
				break;
			t = e[root];
			e[root] = e[child];
			e[child] = t;
			root = child;
		}
	}
}

/* A map as a JSON object with its keys sorted bytewise. */
static idem_status render_map(const struct render *rd, avro_value_t *v, const struct avro_node *n)
{
	struct map_sort *ms = rd->dec->sort;
	size_t size, base = ms->top;
	avro_value_t child;
	const char *key;
	idem_status r = IDEM_OK;

	if (avro_value_get_size(v, &size) != 0)
		return render_broken(rd);
	if (size == 0)
		return render_status(rd, idem_buf_append(rd->out, "{}", 2));
	if (size > SIZE_MAX / sizeof(*ms->e) - base)
		return idem_error_nomem(rd->err);
	if (base + size > ms->cap) {
		size_t cap = ms->cap ? ms->cap : 16;
		struct map_entry *e;

		while (cap < base + size)
			cap *= 2;
		if ((e = realloc(ms->e, cap * sizeof(*e))) == NULL)
			return idem_error_nomem(rd->err);
		ms->e = e;
		ms->cap = cap;
	}
	for (size_t i = 0; i < size; i++) {
		if (avro_value_get_by_index(v, i, &child, &key) != 0 || key == NULL)
			return render_broken(rd);
		ms->e[base + i] = (struct map_entry){ key, strlen(key), i };
	}
	sort_entries(ms->e + base, size);
	ms->top = base + size;
	if (idem_buf_append(rd->out, "{", 1) != IDEM_OK) {
		r = idem_error_nomem(rd->err);
		goto out_pop;
	}
	for (size_t i = 0; i < size; i++) {
		/* ms->e may move while a nested map sorts: read the entry afresh. */
		struct map_entry e = ms->e[base + i];

		if ((i > 0 && idem_buf_append(rd->out, ",", 1) != IDEM_OK)) {
			r = idem_error_nomem(rd->err);
			goto out_pop;
		}
		if ((r = render_string(rd, e.key, e.len)) != IDEM_OK)
			goto out_pop;
		if (idem_buf_append(rd->out, ":", 1) != IDEM_OK) {
			r = idem_error_nomem(rd->err);
			goto out_pop;
		}
		if (avro_value_get_by_index(v, e.idx, &child, NULL) != 0) {
			r = render_broken(rd);
			goto out_pop;
		}
		if ((r = render_json(rd, &child, n->sub[0])) != IDEM_OK)
			goto out_pop;
	}
	r = render_status(rd, idem_buf_append(rd->out, "}", 1));
out_pop:
	ms->top = base;
	return r;
}

/* @v (type @n) as JSON text: records in field order, map keys sorted, unions as their branch. */
static idem_status render_json(const struct render *rd, avro_value_t *v, const struct avro_node *n)
{
	avro_value_t val = *v, child;
	size_t size;
	idem_status r;

	if (!through_unions(&val, &n))
		return render_broken(rd);
	switch (n->type) {
	case AVRO_NULL:
		return render_status(rd, idem_buf_append(rd->out, "null", 4));
	case AVRO_RECORD:
		if (idem_buf_append(rd->out, "{", 1) != IDEM_OK)
			return idem_error_nomem(rd->err);
		for (size_t i = 0; i < n->n; i++) {
			if (i > 0 && idem_buf_append(rd->out, ",", 1) != IDEM_OK)
				return idem_error_nomem(rd->err);
			if ((r = render_string(rd, n->names[i], strlen(n->names[i]))) != IDEM_OK)
				return r;
			if (idem_buf_append(rd->out, ":", 1) != IDEM_OK)
				return idem_error_nomem(rd->err);
			if (avro_value_get_by_index(&val, i, &child, NULL) != 0)
				return render_broken(rd);
			if ((r = render_json(rd, &child, n->sub[i])) != IDEM_OK)
				return r;
		}
		return render_status(rd, idem_buf_append(rd->out, "}", 1));
	case AVRO_ARRAY:
		if (avro_value_get_size(&val, &size) != 0)
			return render_broken(rd);
		if (idem_buf_append(rd->out, "[", 1) != IDEM_OK)
			return idem_error_nomem(rd->err);
		for (size_t i = 0; i < size; i++) {
			if (i > 0 && idem_buf_append(rd->out, ",", 1) != IDEM_OK)
				return idem_error_nomem(rd->err);
			if (avro_value_get_by_index(&val, i, &child, NULL) != 0)
				return render_broken(rd);
			if ((r = render_json(rd, &child, n->sub[0])) != IDEM_OK)
				return r;
		}
		return render_status(rd, idem_buf_append(rd->out, "]", 1));
	case AVRO_MAP:
		return render_map(rd, &val, n);
	default:
		return render_scalar(rd, &val, n, true);
	}
}

/* Whether pointer token @s[0..n) (still escaped) names @name[0..len). */
static bool token_equal(const char *s, size_t n, const char *name, size_t len)
{
	size_t k = 0;
	char c;

	for (size_t i = 0; i < n; i++, k++) {
		c = s[i];
		if (c == '~') {
			c = s[i + 1] == '0' ? '~' : '/';
			i++;
		}
		if (k >= len || name[k] != c)
			return false;
	}
	return k == len;
}

/* Array index token @s[0..n): "0" or digits without a leading zero; false if not one. */
static bool token_index(const char *s, size_t n, size_t *ret)
{
	size_t v = 0;

	if (n == 0 || n > 18 || (s[0] == '0' && n > 1))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (size_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

/* The child of @v (type @n, past unions) named by token @s[0..len); false if there is none. */
static bool step(avro_value_t *v, const struct avro_node **n, const char *s, size_t len)
{
	const struct avro_node *t = *n;
	avro_value_t child;
	const char *key;
	size_t idx, size;

	switch (t->type) {
	case AVRO_RECORD:
		/* By the record's index of its fields (idem_avro.c), not by a search. */
		for (size_t k = idem__avro_hash(IDEM__AVRO_HASH_INIT, s, len, true) &
		                (t->index_cap - 1);
		     t->index[k] != 0; k = (k + 1) & (t->index_cap - 1)) {
			idx = t->index[k] - 1;
			if (token_equal(s, len, t->names[idx], strlen(t->names[idx]))) {
				if (avro_value_get_by_index(v, idx, &child, NULL) != 0)
					return false;
				*v = child;
				*n = t->sub[idx];
				return true;
			}
		}
		return false;
	case AVRO_ARRAY:
		if (!token_index(s, len, &idx) || avro_value_get_size(v, &size) != 0 ||
		    idx >= size || avro_value_get_by_index(v, idx, &child, NULL) != 0)
			return false;
		*v = child;
		*n = t->sub[0];
		return true;
	case AVRO_MAP:
		/* By index, not avro_value_get_by_name(): a miss there writes avro-c's global
		 * error buffer, which other threads write too. */
		if (avro_value_get_size(v, &size) != 0)
			return false;
		for (size_t i = 0; i < size; i++) {
			if (avro_value_get_by_index(v, i, &child, &key) != 0 || key == NULL)
				return false;
			if (token_equal(s, len, key, strlen(key))) {
				*v = child;
				*n = t->sub[0];
				return true;
			}
		}
		return false;
	default:
		return false;
	}
}

idem_status idem_avro_read(const idem_avro_dec *dec, const char *ptr, bool scalar,
                           struct idem_buf *out, const char **ret_absent, idem_error *err)
{
	struct render rd = { .dec = dec, .ptr = ptr, .out = out, .err = err };
	const struct avro_node *n;
	const char *p = ptr, *e;
	size_t mark = out->len;
	avro_value_t v;
	idem_status r;

	assert(dec != NULL && dec->cur != NULL); /* read only after a successful decode */
	if (idem_json_pointer_problem(ptr) != NULL)
		return idem_error_set(err, IDEM_ERR_INVALID, "'%s' is not a JSON pointer", ptr);
	v = dec->cur->value;
	n = dec->schema->root;
	for (;;) {
		if (!through_unions(&v, &n))
			return render_broken(&rd);
		if (n->type == AVRO_NULL) {
			*ret_absent = "is null";
			return IDEM_OK;
		}
		if (*p == '\0')
			break;
		p++;
		e = strchr(p, '/');
		if (e == NULL)
			e = p + strlen(p);
		if (!step(&v, &n, p, (size_t)(e - p))) {
			*ret_absent = "not found in value";
			return IDEM_OK;
		}
		p = e;
	}
	if (scalar && (n->type == AVRO_RECORD || n->type == AVRO_ARRAY || n->type == AVRO_MAP))
		return idem_error_set(err, IDEM_ERR_KEY, "is %s, not a scalar",
		                      n->type == AVRO_RECORD  ? "a record"
		                      : n->type == AVRO_ARRAY ? "an array"
		                                              : "a map");
	if (n->type == AVRO_RECORD || n->type == AVRO_ARRAY || n->type == AVRO_MAP)
		r = render_json(&rd, &v, n);
	else
		r = render_scalar(&rd, &v, n, false);
	if (r != IDEM_OK && out->data != NULL) {
		out->len = mark;
		out->data[mark] = '\0';
	}
	return r;
}
