/*
 * idem_jsonschema_check.c - checking a document against a compiled schema (idem_jsonschema.h):
 * the walk over the nodes, numbers, JSON equality and the messages.
 *
 * The walk evaluates a node's keywords in a fixed order (type, const, enum, the keywords of the
 * value's type, allOf, anyOf, oneOf, not, if/then/else, $ref) and stops at the first failure,
 * which is told, unless it happened inside anyOf, oneOf, not, if or contains: those only ask
 * whether a subschema holds, and tell a failure of their own. The walk's recursion is bounded:
 * a node's subschemas nest at most IDEM_JSONSCHEMA_MAX_DEPTH levels (the compiler says so), and
 * only a $ref goes further, at most IDEM_JSONSCHEMA_MAX_DEPTH of them at a time; the document's
 * depth is bounded too.
 */
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_esc.h"
#include "idem_jsonschema_int.h"

#define MAX_DEPTH IDEM_JSONSCHEMA_MAX_DEPTH

/* Room for a value shown in a message (strings cut at about 40 bytes), and a name. */
#define SHOW_VALUE 64
#define SHOW_NAME  64

/* Arrays this long or shorter are checked for uniqueItems pair by pair, longer ones by hash. */
#define UNIQUE_PAIRWISE 16

const char *const idem__jsonschema_types[7] = {
	"null", "boolean", "object", "array", "number", "string", "integer",
};

enum verdict {
	JS_VALID,
	JS_INVALID, /* told in err, unless quiet */
	JS_ERROR,   /* the check cannot go on: walk.error, told in err */
};

struct walk {
	const idem_jsonschema *s;
	idem_error *err;
	idem_status error; /* with JS_ERROR */
	int quiet;         /* > 0: failures are not told (inside anyOf, oneOf, not, if, contains) */
	int depth;         /* the document's place: seg[0..depth) */
	int refs;          /* $refs being followed */
	struct seg {
		const char *key; /* NULL: an array index */
		size_t index;
	} seg[MAX_DEPTH];
};

static enum verdict eval(struct walk *w, const struct js_node *n, json_object *v);

/*
 * Numbers.
 */

/*
 * multipleOf, exactly in decimal. A double is taken as the decimal of its shortest text that
 * reads back to it (at least 15 digits, as idem_buf_append_real() writes it): 0.3 is 3e-1, a
 * multiple of 0.1 = 1e-1, as its author meant, though the doubles' quotient is 2.9999999999999996.
 */
struct dec {
	uint64_t m; /* |x| = m * 10^e, m without trailing zeros */
	int e;
};

static bool num_dec(const struct js_num *x, struct dec *ret)
{
	char buf[64], *p;
	double d;
	int prec, frac = 0;
	uint64_t m = 0;
	long e;

	if (x->kind == JS_NUM_INT) {
		m = x->i < 0 ? (uint64_t)0 - (uint64_t)x->i : (uint64_t)x->i;
		e = 0;
	} else if (x->kind == JS_NUM_UINT) {
		m = x->u;
		e = 0;
	} else {
		d = fabs(x->d);
		if (!isfinite(d))
			return false;
		/* a subnormal has fewer digits: 1e-320 is 1e-320, not 9.99988867182683e-321 */
		for (prec = fpclassify(d) == FP_SUBNORMAL ? 1 : 15; prec < 17; prec++) {
			snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
			if (strtod(buf, NULL) == d)
				break;
		}
		snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
		/* d.ddd...e±x; the point is the locale's, so any non-digit before the 'e' */
		for (p = buf; *p != '\0' && *p != 'e'; p++) {
			if (*p >= '0' && *p <= '9') {
				m = m * 10 + (uint64_t)(*p - '0');
				frac++;
			}
		}
		e = *p == 'e' ? strtol(p + 1, NULL, 10) : 0;
		e -= frac - 1;
	}
	while (m != 0 && m % 10 == 0) {
		m /= 10;
		e++;
	}
	ret->m = m;
	ret->e = m == 0 ? 0 : (int)e;
	return true;
}

/* (@a * @b) mod @m without overflow. */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
	uint64_t r = 0;

	for (a %= m; b != 0; b >>= 1) {
		if (b & 1)
			r = r >= m - a ? r - (m - a) : r + a;
		a = a >= m - a ? a - (m - a) : a + a;
	}
	return r;
}

static bool multiple_of(const struct js_num *x, const struct js_num *y)
{
	struct dec a, b;
	uint64_t p, base = 10, div;
	int k;

	if (!num_dec(x, &a) || !num_dec(y, &b) || b.m == 0)
		return false;
	if (a.m == 0)
		return true;
	k = a.e - b.e;
	if (k >= 0) {
		/* b.m must divide a.m * 10^k */
		p = 1 % b.m;
		for (base %= b.m; k > 0; k >>= 1) {
			if (k & 1)
				p = mulmod(p, base, b.m);
			base = mulmod(base, base, b.m);
		}
		return mulmod(a.m, p, b.m) == 0;
	}
	/* b.m * 10^-k must divide a.m, which is below 2^64 */
	for (div = b.m; k < 0; k++) {
		if (div > UINT64_MAX / 10)
			return false;
		div *= 10;
	}
	return a.m % div == 0;
}

/*
 * Values and their equality.
 */

static unsigned value_types(json_object *v)
{
	double d;

	switch (json_object_get_type(v)) {
	case json_type_null:
		return JS_T_NULL;
	case json_type_boolean:
		return JS_T_BOOLEAN;
	case json_type_object:
		return JS_T_OBJECT;
	case json_type_array:
		return JS_T_ARRAY;
	case json_type_string:
		return JS_T_STRING;
	case json_type_int:
		return JS_T_NUMBER | JS_T_INTEGER;
	case json_type_double:
		/* 2020-12: a number with a zero fractional part is an integer (1.0) */
		d = json_object_get_double(v);
		return JS_T_NUMBER | (isfinite(d) && d == floor(d) ? JS_T_INTEGER : 0);
	}
	return 0;
}

static bool is_number(json_object *v)
{
	return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

/*
 * JSON equality: numbers by value, strings bytewise, arrays item by item, objects member by
 * member whatever their order. @returns 1 or 0; -1 when the values nest more than @room
 * levels.
 */
static int equal(json_object *a, json_object *b, int room)
{
	struct json_object_iterator it, end;
	struct js_num x, y;
	size_t n;

	if (is_number(a) && is_number(b)) {
		idem__jsonschema_num(a, &x);
		idem__jsonschema_num(b, &y);
		return idem__jsonschema_num_cmp(&x, &y) == 0;
	}
	if (json_object_get_type(a) != json_object_get_type(b))
		return 0;
	switch (json_object_get_type(a)) {
	case json_type_boolean:
		return json_object_get_boolean(a) == json_object_get_boolean(b);
	case json_type_string:
		n = (size_t)json_object_get_string_len(a);
		return n == (size_t)json_object_get_string_len(b) &&
		       memcmp(json_object_get_string(a), json_object_get_string(b), n) == 0;
	case json_type_array:
		n = json_object_array_length(a);
		if (n != json_object_array_length(b))
			return 0;
		if (room <= 0)
			return -1;
		for (size_t i = 0; i < n; i++) {
			int r = equal(json_object_array_get_idx(a, i),
			              json_object_array_get_idx(b, i), room - 1);

			if (r != 1)
				return r;
		}
		return 1;
	case json_type_object:
		if (json_object_object_length(a) != json_object_object_length(b))
			return 0;
		if (room <= 0)
			return -1;
		it = json_object_iter_begin(a);
		end = json_object_iter_end(a);
		for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
			json_object *bv;
			int r;

			if (!json_object_object_get_ex(b, json_object_iter_peek_name(&it), &bv))
				return 0;
			r = equal(json_object_iter_peek_value(&it), bv, room - 1);
			if (r != 1)
				return r;
		}
		return 1;
	default:
		return 1; /* null */
	}
}

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	h *= UINT64_C(0xc4ceb9fe1a85ec53);
	return h ^ (h >> 33);
}

static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * UINT64_C(0x100000001b3);
	return h;
}

/*
 * A hash that equal values share (numbers hash as their double: equal numbers are the same
 * double). @returns false when @v nests more than @room levels.
 */
static bool hash(json_object *v, int room, uint64_t *ret)
{
	struct json_object_iterator it, end;
	struct js_num x;
	uint64_t h, sub;
	double d;

	switch (json_object_get_type(v)) {
	case json_type_int:
	case json_type_double:
		idem__jsonschema_num(v, &x);
		d = x.kind == JS_NUM_INT ? (double)x.i : x.kind == JS_NUM_UINT ? (double)x.u : x.d;
		if (d == 0)
			d = 0; /* -0 == 0 */
		memcpy(&h, &d, sizeof(h));
		*ret = mix(h ^ 1);
		return true;
	case json_type_string:
		*ret = mix(hash_bytes(json_object_get_string(v),
		                      (size_t)json_object_get_string_len(v)) ^
		           2);
		return true;
	case json_type_boolean:
		*ret = mix(3 + (uint64_t)json_object_get_boolean(v));
		return true;
	case json_type_array:
		if (room <= 0)
			return false;
		h = 5;
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			if (!hash(json_object_array_get_idx(v, i), room - 1, &sub))
				return false;
			h = mix(h * 31 + sub);
		}
		*ret = h;
		return true;
	case json_type_object:
		if (room <= 0)
			return false;
		h = 6;
		it = json_object_iter_begin(v);
		end = json_object_iter_end(v);
		for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
			const char *name = json_object_iter_peek_name(&it);

			if (!hash(json_object_iter_peek_value(&it), room - 1, &sub))
				return false;
			h += mix(hash_bytes(name, strlen(name)) ^ mix(sub)); /* in any order */
		}
		*ret = mix(h);
		return true;
	default:
		*ret = mix(7);
		return true;
	}
}

/*
 * Messages.
 */

static const char *show_num(char *out, size_t outlen, const struct js_num *x)
{
	if (x->kind == JS_NUM_INT) {
		snprintf(out, outlen, "%" PRId64, x->i);
	} else if (x->kind == JS_NUM_UINT) {
		snprintf(out, outlen, "%" PRIu64, x->u);
	} else if (!isfinite(x->d)) {
		snprintf(out, outlen, "%s",
		         isnan(x->d) ? "NaN"
		         : x->d > 0  ? "Infinity"
		                     : "-Infinity");
	} else {
		/* the shortest text that reads back to the same double, as idem_buf_append_real()
		 */
		for (int prec = fpclassify(x->d) == FP_SUBNORMAL ? 1 : 15; prec <= 17; prec++) {
			snprintf(out, outlen, "%.*g", prec, x->d);
			if (strtod(out, NULL) == x->d)
				break;
		}
	}
	return out;
}

/* @v, short: numbers as text, strings quoted and cut, objects and arrays by their type. */
static const char *show_value(char *out, size_t outlen, json_object *v)
{
	struct js_num x;
	size_t n;

	switch (json_object_get_type(v)) {
	case json_type_null:
		return "null";
	case json_type_boolean:
		return json_object_get_boolean(v) ? "true" : "false";
	case json_type_object:
		return "object";
	case json_type_array:
		return "array";
	case json_type_int:
	case json_type_double:
		idem__jsonschema_num(v, &x);
		return show_num(out, outlen, &x);
	case json_type_string:
		out[0] = '\'';
		idem_esc(out + 1, 44, json_object_get_string(v),
		         (size_t)json_object_get_string_len(v), IDEM_ESC_QUOTE);
		n = strlen(out);
		out[n] = '\'';
		out[n + 1] = '\0';
		return out;
	}
	return "value";
}

static const char *show_name(char *out, size_t outlen, const char *name)
{
	return idem_esc_str(out, outlen, name, IDEM_ESC_QUOTE);
}

/* "string", "string or null", "integer, string or null" */
static const char *show_types(char *out, size_t outlen, unsigned types)
{
	static const unsigned order[] = { JS_T_STRING, JS_T_INTEGER, JS_T_NUMBER, JS_T_BOOLEAN,
		                          JS_T_OBJECT, JS_T_ARRAY,   JS_T_NULL };
	size_t left = 0, len = 0;

	for (size_t i = 0; i < IDEM_ARRAY_SIZE(order); i++)
		left += (types & order[i]) != 0;
	out[0] = '\0';
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(order); i++) {
		unsigned bit = 0;

		if (!(types & order[i]))
			continue;
		while ((1u << bit) != order[i])
			bit++;
		left--;
		len += (size_t)snprintf(out + len, outlen - len, "%s%s",
		                        idem__jsonschema_types[bit],
		                        left > 1    ? ", "
		                        : left == 1 ? " or "
		                                    : "");
		if (len >= outlen)
			break;
	}
	return out;
}

/*
 * Tells the failure "at PLACE: what (schema PATH)" in w->err, unless quiet.
 * @returns JS_INVALID; JS_ERROR on out of memory.
 */
IDEM_PRINTF(3, 4)
static enum verdict refuse(struct walk *w, const struct js_node *n, const char *fmt, ...)
{
	struct idem_buf place = { 0 };
	char what[640], where[SHOW_PATH], schema[SHOW_PATH];
	idem_status r = IDEM_OK;
	va_list ap;

	if (w->quiet > 0 || w->err == NULL)
		return JS_INVALID;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	for (int i = 0; i < w->depth && r == IDEM_OK; i++) {
		if (w->seg[i].key == NULL) {
			r = idem_buf_printf(&place, "/%zu", w->seg[i].index);
			continue;
		}
		r = idem_buf_append(&place, "/", 1);
		for (const char *p = w->seg[i].key; *p != '\0' && r == IDEM_OK; p++)
			r = *p == '~'   ? idem_buf_append(&place, "~0", 2)
			    : *p == '/' ? idem_buf_append(&place, "~1", 2)
			                : idem_buf_append(&place, p, 1);
	}
	if (r != IDEM_OK) {
		idem_buf_done(&place);
		w->error = idem_error_nomem(w->err);
		return JS_ERROR;
	}
	if (place.len == 0)
		snprintf(where, sizeof(where), "/");
	else
		idem_esc(where, sizeof(where), place.data, place.len, 0);
	if (n->path[0] == '\0')
		snprintf(schema, sizeof(schema), "/");
	else
		idem_esc(schema, sizeof(schema), n->path, strlen(n->path), 0);
	idem_buf_done(&place);
	idem_error_set(w->err, IDEM_ERR_KEY, "at %s: %s (schema %s)", where, what, schema);
	return JS_INVALID;
}

/* The walk went deeper than it may: an error, told even when quiet. */
static enum verdict too_deep(struct walk *w, const struct js_node *n)
{
	int quiet = w->quiet;

	w->quiet = 0;
	if (refuse(w, n, "schema recursion deeper than %d", MAX_DEPTH) == JS_INVALID)
		w->error = IDEM_ERR_KEY;
	w->quiet = quiet;
	return JS_ERROR;
}

static const char *plural(size_t n)
{
	return n == 1 ? "" : "s";
}

static enum verdict nomem(struct walk *w)
{
	w->error = idem_error_nomem(w->err);
	return JS_ERROR;
}

/*
 * The walk.
 */

/* @n against @v, a member (@key) or an item (@index) one level down the document. */
static enum verdict eval_at(struct walk *w, const struct js_node *n, json_object *v,
                            const char *key, size_t index)
{
	enum verdict r;

	if (w->depth >= MAX_DEPTH)
		return too_deep(w, n);
	w->seg[w->depth].key = key;
	w->seg[w->depth].index = index;
	w->depth++;
	r = eval(w, n, v);
	w->depth--;
	return r;
}

static enum verdict eval_quiet(struct walk *w, const struct js_node *n, json_object *v)
{
	enum verdict r;

	w->quiet++;
	r = eval(w, n, v);
	w->quiet--;
	return r;
}

static enum verdict check_number(struct walk *w, const struct js_node *n, json_object *v)
{
	char a[SHOW_VALUE], b[SHOW_VALUE];
	struct js_num x;
	int c;

	idem__jsonschema_num(v, &x);
	if (n->has_multiple && !multiple_of(&x, &n->multiple))
		return refuse(w, n, "%s is not a multiple of %s", show_num(a, sizeof(a), &x),
		              show_num(b, sizeof(b), &n->multiple));
	if (n->has_max && (c = idem__jsonschema_num_cmp(&x, &n->max)) != -1 && c != 0)
		return refuse(w, n, "%s is greater than maximum %s", show_num(a, sizeof(a), &x),
		              show_num(b, sizeof(b), &n->max));
	if (n->has_xmax && idem__jsonschema_num_cmp(&x, &n->xmax) != -1)
		return refuse(w, n, "%s is not less than exclusiveMaximum %s",
		              show_num(a, sizeof(a), &x), show_num(b, sizeof(b), &n->xmax));
	if (n->has_min && (c = idem__jsonschema_num_cmp(&x, &n->min)) != 1 && c != 0)
		return refuse(w, n, "%s is less than minimum %s", show_num(a, sizeof(a), &x),
		              show_num(b, sizeof(b), &n->min));
	if (n->has_xmin && idem__jsonschema_num_cmp(&x, &n->xmin) != 1)
		return refuse(w, n, "%s is not greater than exclusiveMinimum %s",
		              show_num(a, sizeof(a), &x), show_num(b, sizeof(b), &n->xmin));
	return JS_VALID;
}

static enum verdict check_string(struct walk *w, const struct js_node *n, json_object *v)
{
	const char *str = json_object_get_string(v);
	size_t len = (size_t)json_object_get_string_len(v), chars = 0;
	char a[SHOW_VALUE], pat[SHOW_TEXT];

	if (n->max_length != JS_NO_MAX || n->min_length > 0) {
		/* code points: every byte but UTF-8's continuation bytes starts one */
		for (size_t i = 0; i < len; i++)
			chars += ((unsigned char)str[i] & 0xc0) != 0x80;
		if (chars > n->max_length)
			return refuse(
			        w, n, "%s is %zu character%s long, more than maxLength %" PRIu64,
			        show_value(a, sizeof(a), v), chars, plural(chars), n->max_length);
		if (chars < n->min_length)
			return refuse(
			        w, n, "%s is %zu character%s long, fewer than minLength %" PRIu64,
			        show_value(a, sizeof(a), v), chars, plural(chars), n->min_length);
	}
	if (n->pattern != NULL) {
		int m = idem__jsonschema_match(n->pattern, w->s->loc, str);

		if (m < 0)
			return nomem(w);
		if (m == 0)
			return refuse(w, n, "%s does not match pattern '%s'",
			              show_value(a, sizeof(a), v),
			              idem__jsonschema_show(pat, sizeof(pat), n->pattern->src,
			                                    strlen(n->pattern->src)));
	}
	return JS_VALID;
}

struct hashed {
	uint64_t h;
	size_t i;
};

static int hashed_cmp(const void *a, const void *b)
{
	const struct hashed *x = a, *y = b;

	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * Finds the equal items i < j of @v with the least j (then the least i), pair by pair in short
 * arrays, else among items of one hash. @returns JS_VALID when there are none.
 */
static enum verdict check_unique(struct walk *w, const struct js_node *n, json_object *v)
{
	size_t len = json_object_array_length(v), bi = SIZE_MAX, bj = SIZE_MAX;
	int room = MAX_DEPTH - w->depth;
	struct hashed *e;

	if (len <= UNIQUE_PAIRWISE) {
		for (size_t j = 1; j < len && bj == SIZE_MAX; j++) {
			for (size_t i = 0; i < j; i++) {
				int r = equal(json_object_array_get_idx(v, i),
				              json_object_array_get_idx(v, j), room);

				if (r < 0)
					return too_deep(w, n);
				if (r == 1) {
					bi = i;
					bj = j;
					break;
				}
			}
		}
		goto out_tell;
	}
	e = malloc(len * sizeof(*e));
	if (e == NULL)
		return nomem(w);
	for (size_t i = 0; i < len; i++) {
		e[i].i = i;
		if (!hash(json_object_array_get_idx(v, i), room, &e[i].h)) {
			free(e);
			return too_deep(w, n);
		}
	}
	qsort(e, len, sizeof(*e), hashed_cmp);
	for (size_t a = 0; a < len;) {
		size_t end = a + 1;
		bool found = false;

		while (end < len && e[end].h == e[a].h)
			end++;
		/* in a run, items are in index order: the first j with an equal i before it */
		for (size_t y = a + 1; y < end && !found && e[y].i < bj; y++) {
			for (size_t x = a; x < y; x++) {
				int r = equal(json_object_array_get_idx(v, e[x].i),
				              json_object_array_get_idx(v, e[y].i), room);

				if (r < 0) {
					free(e);
					return too_deep(w, n);
				}
				if (r == 1) {
					bi = e[x].i;
					bj = e[y].i;
					found = true;
					break;
				}
			}
		}
		a = end;
	}
	free(e);

out_tell:
	if (bj == SIZE_MAX)
		return JS_VALID;
	return refuse(w, n, "items %zu and %zu are equal, and uniqueItems is true", bi, bj);
}

static enum verdict check_array(struct walk *w, const struct js_node *n, json_object *v)
{
	size_t len = json_object_array_length(v), count = 0;
	enum verdict r;

	if (len > n->max_items)
		return refuse(w, n, "array of %zu item%s is longer than maxItems %" PRIu64, len,
		              plural(len), n->max_items);
	if (len < n->min_items)
		return refuse(w, n, "array of %zu item%s is shorter than minItems %" PRIu64, len,
		              plural(len), n->min_items);
	if (n->unique && (r = check_unique(w, n, v)) != JS_VALID)
		return r;
	for (size_t i = 0; i < len; i++) {
		const struct js_node *item = i < n->n_prefix ? n->prefix[i] : n->rest;

		if (item != NULL &&
		    (r = eval_at(w, item, json_object_array_get_idx(v, i), NULL, i)) != JS_VALID)
			return r;
	}
	if (n->contains == NULL)
		return JS_VALID;
	for (size_t i = 0; i < len && count <= n->max_contains; i++) {
		w->quiet++;
		r = eval_at(w, n->contains, json_object_array_get_idx(v, i), NULL, i);
		w->quiet--;
		if (r == JS_ERROR)
			return r;
		count += r == JS_VALID;
	}
	if (count < n->min_contains && n->min_contains == 1)
		return refuse(w, n, "no item matches contains");
	if (count < n->min_contains)
		return refuse(w, n, "%zu item%s match%s contains, fewer than minContains %" PRIu64,
		              count, plural(count), count == 1 ? "es" : "", n->min_contains);
	if (count > n->max_contains)
		return refuse(w, n, "more items match contains than maxContains %" PRIu64,
		              n->max_contains);
	return JS_VALID;
}

static bool has_member(json_object *v, const char *name)
{
	json_object *dummy;

	return json_object_object_get_ex(v, name, &dummy);
}

static int prop_find(const void *key, const void *elem)
{
	return strcmp(key, ((const struct js_prop *)elem)->name);
}

/* propertyNames: each name as a JSON string (made here, the only allocation of a valid walk) */
static enum verdict check_names(struct walk *w, const struct js_node *n, json_object *v)
{
	struct json_object_iterator it = json_object_iter_begin(v), end = json_object_iter_end(v);

	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		json_object *name = json_object_new_string(json_object_iter_peek_name(&it));
		enum verdict r;

		if (name == NULL)
			return nomem(w);
		r = eval(w, n->names, name);
		json_object_put(name);
		if (r != JS_VALID)
			return r;
	}
	return JS_VALID;
}

/* properties, patternProperties and additionalProperties, member by member. */
static enum verdict check_members(struct walk *w, const struct js_node *n, json_object *v)
{
	struct json_object_iterator it = json_object_iter_begin(v), end = json_object_iter_end(v);
	char a[SHOW_NAME];

	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		const char *name = json_object_iter_peek_name(&it);
		json_object *mv = json_object_iter_peek_value(&it);
		const struct js_prop *p = NULL;
		bool matched = false;
		enum verdict r;

		if (n->n_props > 0)
			p = bsearch(name, n->props, n->n_props, sizeof(*n->props), prop_find);
		if (p != NULL) {
			matched = true;
			if ((r = eval_at(w, p->node, mv, name, 0)) != JS_VALID)
				return r;
		}
		for (size_t i = 0; i < n->n_patprops; i++) {
			int m = idem__jsonschema_match(n->patprops[i].pat, w->s->loc, name);

			if (m < 0)
				return nomem(w);
			if (m == 0)
				continue;
			matched = true;
			if ((r = eval_at(w, n->patprops[i].node, mv, name, 0)) != JS_VALID)
				return r;
		}
		if (matched || n->additional == NULL)
			continue;
		if (n->additional->boolean == 0)
			return refuse(w, n, "property '%s' is not allowed by additionalProperties",
			              show_name(a, sizeof(a), name));
		if ((r = eval_at(w, n->additional, mv, name, 0)) != JS_VALID)
			return r;
	}
	return JS_VALID;
}

static enum verdict check_object(struct walk *w, const struct js_node *n, json_object *v)
{
	size_t count = (size_t)json_object_object_length(v);
	char a[SHOW_NAME], b[SHOW_NAME];
	enum verdict r;

	if (count > n->max_props)
		return refuse(w, n, "object of %zu propert%s has more than maxProperties %" PRIu64,
		              count, count == 1 ? "y" : "ies", n->max_props);
	if (count < n->min_props)
		return refuse(w, n, "object of %zu propert%s has fewer than minProperties %" PRIu64,
		              count, count == 1 ? "y" : "ies", n->min_props);
	for (size_t i = 0; n->required != NULL && i < json_object_array_length(n->required); i++) {
		const char *name =
		        json_object_get_string(json_object_array_get_idx(n->required, i));

		if (!has_member(v, name))
			return refuse(w, n, "required property '%s' is missing",
			              show_name(a, sizeof(a), name));
	}
	for (size_t i = 0; i < n->n_dep_required; i++) {
		const struct js_dep *d = &n->dep_required[i];

		if (!has_member(v, d->name))
			continue;
		for (size_t k = 0; k < json_object_array_length(d->names); k++) {
			const char *name =
			        json_object_get_string(json_object_array_get_idx(d->names, k));

			if (!has_member(v, name))
				return refuse(w, n,
				              "property '%s' is missing, required by property '%s'",
				              show_name(a, sizeof(a), name),
				              show_name(b, sizeof(b), d->name));
		}
	}
	if (n->names != NULL && (r = check_names(w, n, v)) != JS_VALID)
		return r;
	if ((r = check_members(w, n, v)) != JS_VALID)
		return r;
	for (size_t i = 0; i < n->n_dep_schemas; i++) {
		if (has_member(v, n->dep_schemas[i].name) &&
		    (r = eval(w, n->dep_schemas[i].node, v)) != JS_VALID)
			return r;
	}
	return JS_VALID;
}

/* allOf, anyOf, oneOf, not, if/then/else */
static enum verdict check_logic(struct walk *w, const struct js_node *n, json_object *v)
{
	char a[SHOW_VALUE];
	size_t count = 0, first = 0, second = 0;
	enum verdict r;

	for (size_t i = 0; i < n->n_all_of; i++) {
		if ((r = eval(w, n->all_of[i], v)) != JS_VALID)
			return r;
	}
	if (n->n_any_of > 0) {
		for (size_t i = 0; i < n->n_any_of && count == 0; i++) {
			if ((r = eval_quiet(w, n->any_of[i], v)) == JS_ERROR)
				return r;
			count += r == JS_VALID;
		}
		if (count == 0)
			return refuse(w, n, "%s matches none of the %zu schemas of anyOf",
			              show_value(a, sizeof(a), v), n->n_any_of);
	}
	count = 0;
	for (size_t i = 0; i < n->n_one_of && count < 2; i++) {
		if ((r = eval_quiet(w, n->one_of[i], v)) == JS_ERROR)
			return r;
		if (r != JS_VALID)
			continue;
		if (count++ == 0)
			first = i;
		else
			second = i;
	}
	if (n->n_one_of > 0 && count == 0)
		return refuse(w, n, "%s matches none of the %zu schemas of oneOf",
		              show_value(a, sizeof(a), v), n->n_one_of);
	if (count > 1)
		return refuse(w, n, "%s matches schemas %zu and %zu of oneOf, not exactly one",
		              show_value(a, sizeof(a), v), first, second);
	if (n->not_ != NULL) {
		if ((r = eval_quiet(w, n->not_, v)) == JS_ERROR)
			return r;
		if (r == JS_VALID)
			return refuse(w, n, "%s matches the schema of not",
			              show_value(a, sizeof(a), v));
	}
	if (n->if_ != NULL) {
		if ((r = eval_quiet(w, n->if_, v)) == JS_ERROR)
			return r;
		if (r == JS_VALID && n->then_ != NULL)
			return eval(w, n->then_, v);
		if (r == JS_INVALID && n->else_ != NULL)
			return eval(w, n->else_, v);
	}
	return JS_VALID;
}

static enum verdict eval(struct walk *w, const struct js_node *n, json_object *v)
{
	unsigned types = value_types(v);
	char a[SHOW_VALUE], b[SHOW_VALUE];
	enum verdict r = JS_VALID;
	size_t count;
	int eq;

	if (n->boolean >= 0)
		return n->boolean ? JS_VALID
		                  : refuse(w, n, "%s is not allowed: the schema is false",
		                           show_value(a, sizeof(a), v));
	if (n->types != 0 && !(n->types & types))
		return refuse(w, n, "%s is not of type %s", show_value(a, sizeof(a), v),
		              show_types(b, sizeof(b), n->types));
	if (n->has_const) {
		eq = equal(n->konst, v, MAX_DEPTH - w->depth);
		if (eq < 0)
			return too_deep(w, n);
		if (eq == 0)
			return refuse(w, n, "%s is not the value of const",
			              show_value(a, sizeof(a), v));
	}
	if (n->enum_values != NULL) {
		count = json_object_array_length(n->enum_values);
		eq = 0;
		for (size_t i = 0; i < count && eq == 0; i++)
			eq = equal(json_object_array_get_idx(n->enum_values, i), v,
			           MAX_DEPTH - w->depth);
		if (eq < 0)
			return too_deep(w, n);
		if (eq == 0)
			return refuse(w, n, "%s is not one of the %zu values of enum",
			              show_value(a, sizeof(a), v), count);
	}
	if (types & JS_T_NUMBER)
		r = check_number(w, n, v);
	else if (types & JS_T_STRING)
		r = check_string(w, n, v);
	else if (types & JS_T_ARRAY)
		r = check_array(w, n, v);
	else if (types & JS_T_OBJECT)
		r = check_object(w, n, v);
	if (r != JS_VALID || (r = check_logic(w, n, v)) != JS_VALID || n->ref == NULL)
		return r;
	if (w->refs >= MAX_DEPTH)
		return too_deep(w, n);
	w->refs++;
	r = eval(w, n->ref, v);
	w->refs--;
	return r;
}

idem_status idem_jsonschema_check(const idem_jsonschema *s, const void *doc, idem_error *err)
{
	struct walk w = { .s = s, .err = err };

	/* json-c's getters take non-const objects; the walk only reads */
	switch (eval(&w, s->root, (json_object *)(uintptr_t)doc)) {
	case JS_VALID:
		return IDEM_OK;
	case JS_INVALID:
		return IDEM_ERR_KEY;
	default:
		return w.error;
	}
}
