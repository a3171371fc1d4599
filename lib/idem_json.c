/*
 * idem_json.c - allocation-free JSON scanner for plain documents (see idem_json.h).
 *
 * One recursive-descent pass over the value validates it in the narrow form and, on the way,
 * notes the value the pointer names. Every "not in the form" is a plain false: the caller then
 * parses with json-c, so being stricter than json-c here costs speed, never correctness, and
 * being more lenient is the one thing this file must never be.
 */
#include "idem_json.h"

#include <stdint.h>
#include <string.h>

#include "idem_common.h"

/* Most integer digits of a number (an int64 has 19; json-c clamps what does not fit). */
#define INT_DIGITS_MAX 18
/* Most exponent digits: |exponent| <= 99 keeps every such number a finite double. */
#define EXP_DIGITS_MAX 2

enum kind { K_STRING, K_NUMBER, K_LITERAL, K_OTHER };

struct seg {
	const char *p; /* escaped (~0, ~1) */
	size_t n;
	int64_t index; /* as an array index, or -1 */
};

struct scan {
	const unsigned char *p, *end;
	struct seg seg[IDEM_JSON_DEPTH];
	size_t n_seg;
	const unsigned char *hit; /* the target's text */
	size_t hit_n;
	enum kind hit_kind;
	int hits;
	bool minus_zero;
	bool twice; /* an object on the path names the pointer's segment twice */

	/* The value just read (by value()), and where the root object's members are noted. */
	const unsigned char *last;
	size_t last_n;
	enum kind last_kind;
	bool last_minus_zero;
	struct idem_json_members *members;
};

static void skip_ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* A string without escapes or control characters, of valid UTF-8: its content. */
static bool string(struct scan *s, const unsigned char **ret_p, size_t *ret_n)
{
	const unsigned char *start = ++s->p; /* past the opening quote */
	bool ascii = true;

	while (s->p < s->end && *s->p != '"') {
		if (*s->p == '\\' || *s->p < 0x20)
			return false;
		ascii = ascii && *s->p < 0x80;
		s->p++;
	}
	if (s->p == s->end)
		return false;
	if (!ascii && !idem_utf8_valid(start, (size_t)(s->p - start)))
		return false;
	*ret_p = start;
	*ret_n = (size_t)(s->p - start);
	s->p++;
	return true;
}

static size_t digits(struct scan *s)
{
	const unsigned char *start = s->p;

	while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
		s->p++;
	return (size_t)(s->p - start);
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? within the limits above. */
static bool number(struct scan *s, bool *ret_minus_zero)
{
	const unsigned char *start = s->p;
	size_t n;
	bool plain = true;

	if (*s->p == '-')
		s->p++;
	if (s->p == s->end || *s->p < '0' || *s->p > '9')
		return false;
	n = digits(s);
	if (n > INT_DIGITS_MAX || (n > 1 && s->p[-(ptrdiff_t)n] == '0'))
		return false;
	if (s->p < s->end && *s->p == '.') {
		s->p++;
		if (digits(s) == 0)
			return false;
		plain = false;
	}
	if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
		s->p++;
		if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
			s->p++;
		n = digits(s);
		if (n == 0 || n > EXP_DIGITS_MAX)
			return false;
		plain = false;
	}
	/* json-c reads the integer -0 as 0: not the text written. */
	*ret_minus_zero = plain && s->p - start == 2 && start[0] == '-' && start[1] == '0';
	return true;
}

static bool literal(struct scan *s, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
		return false;
	s->p += n;
	return true;
}

/* Does the member name k[0..kn) equal the escaped pointer segment @g? */
static bool seg_equal(const struct seg *g, const unsigned char *k, size_t kn)
{
	size_t j = 0;

	for (size_t i = 0; i < g->n; i++, j++) {
		char c = g->p[i];

		if (c == '~' && i + 1 < g->n) {
			c = g->p[i + 1] == '0' ? '~' : '/';
			i++;
		}
		if (j == kn || (char)k[j] != c)
			return false;
	}
	return j == kn;
}

/* After a scalar, only a delimiter may follow. */
static bool delimited(const struct scan *s)
{
	return s->p == s->end || (*s->p != '\0' && strchr(" \t\r\n,]}", *s->p) != NULL);
}

static bool value(struct scan *s, size_t depth, bool on_path);

/* A member of the root object, with the value value() just read. */
static void note_member(struct idem_json_members *ms, const unsigned char *k, size_t kn,
                        const struct scan *s)
{
	struct idem_json_member *m;

	if (ms->n == IDEM_JSON_MEMBERS) {
		ms->overflow = true;
		return;
	}
	m = &ms->m[ms->n++];
	m->name = (const char *)k;
	m->name_n = kn;
	m->text = (const char *)s->last;
	m->text_n = s->last_n;
	m->scalar = s->last_kind != K_OTHER && !s->last_minus_zero;
}

static bool object(struct scan *s, size_t depth, bool on_path)
{
	int matches = 0;

	s->p++;
	skip_ws(s);
	if (s->p < s->end && *s->p == '}') {
		s->p++;
		return true;
	}
	for (;;) {
		const unsigned char *k;
		size_t kn;
		bool member_on;

		if (s->p == s->end || *s->p != '"' || !string(s, &k, &kn))
			return false;
		member_on = on_path && depth < s->n_seg && seg_equal(&s->seg[depth], k, kn);
		/* json-c keeps one of the two (the last); which one is its business. */
		if (member_on && ++matches > 1)
			s->twice = true;
		skip_ws(s);
		if (s->p == s->end || *s->p != ':')
			return false;
		s->p++;
		if (!value(s, depth + 1, member_on))
			return false;
		if (depth == 0 && s->members != NULL)
			note_member(s->members, k, kn, s);
		skip_ws(s);
		if (s->p == s->end)
			return false;
		if (*s->p == '}') {
			s->p++;
			return true;
		}
		if (*s->p != ',')
			return false;
		s->p++;
		skip_ws(s);
	}
}

static bool array(struct scan *s, size_t depth, bool on_path)
{
	int64_t i = 0;

	s->p++;
	skip_ws(s);
	if (s->p < s->end && *s->p == ']') {
		s->p++;
		return true;
	}
	for (;; i++) {
		bool elem_on = on_path && depth < s->n_seg && s->seg[depth].index == i;

		if (!value(s, depth + 1, elem_on))
			return false;
		skip_ws(s);
		if (s->p == s->end)
			return false;
		if (*s->p == ']') {
			s->p++;
			return true;
		}
		if (*s->p != ',')
			return false;
		s->p++;
	}
}

/* One value at nesting @depth; @on_path: the pointer's first @depth segments led here. */
static bool value(struct scan *s, size_t depth, bool on_path)
{
	const unsigned char *start, *str = NULL;
	size_t str_n = 0;
	enum kind kind = K_OTHER;
	bool ok, minus_zero = false;

	skip_ws(s);
	if (s->p == s->end)
		return false;
	start = s->p;
	switch (*s->p) {
	case '{':
		ok = depth < IDEM_JSON_DEPTH && object(s, depth, on_path);
		break;
	case '[':
		ok = depth < IDEM_JSON_DEPTH && array(s, depth, on_path);
		break;
	case '"':
		ok = string(s, &str, &str_n);
		kind = K_STRING;
		break;
	case 't':
		ok = literal(s, "true") && delimited(s);
		kind = K_LITERAL;
		break;
	case 'f':
		ok = literal(s, "false") && delimited(s);
		kind = K_LITERAL;
		break;
	case 'n':
		ok = literal(s, "null") && delimited(s);
		break;
	default:
		ok = number(s, &minus_zero) && delimited(s);
		kind = K_NUMBER;
		break;
	}
	if (!ok)
		return false;
	s->last_kind = kind;
	s->last_minus_zero = minus_zero;
	s->last = kind == K_STRING ? str : start;
	s->last_n = kind == K_STRING ? str_n : (size_t)(s->p - start);
	if (on_path && depth == s->n_seg) {
		s->hits++;
		s->hit_kind = kind;
		s->minus_zero = minus_zero;
		s->hit = kind == K_STRING ? str : start;
		s->hit_n = kind == K_STRING ? str_n : (size_t)(s->p - start);
	}
	return true;
}

/* RFC 6901 array index: "0" or digits without a leading zero; anything else is -1. */
static int64_t seg_index(const char *p, size_t n)
{
	int64_t idx = 0;

	if (n == 0 || n > 15 || (n > 1 && p[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		idx = idx * 10 + (p[i] - '0');
	}
	return idx;
}

bool idem_json_scalar(const char *s, size_t n, const char *ptr, const char **ret_p, size_t *ret_n)
{
	struct scan sc;

	memset(&sc, 0, sizeof(sc));
	while (*ptr == '/') {
		const char *end;

		if (sc.n_seg == IDEM_JSON_DEPTH)
			return false;
		ptr++;
		end = strchr(ptr, '/');
		if (end == NULL)
			end = ptr + strlen(ptr);
		sc.seg[sc.n_seg].p = ptr;
		sc.seg[sc.n_seg].n = (size_t)(end - ptr);
		sc.seg[sc.n_seg].index = seg_index(ptr, (size_t)(end - ptr));
		sc.n_seg++;
		ptr = end;
	}
	if (*ptr != '\0' || n > INT32_MAX)
		return false;
	sc.p = (const unsigned char *)s;
	sc.end = sc.p + n;
	if (!value(&sc, 0, true))
		return false;
	skip_ws(&sc);
	if (sc.p != sc.end || sc.twice || sc.hits != 1 || sc.hit_kind == K_OTHER || sc.minus_zero)
		return false;
	*ret_p = (const char *)sc.hit;
	*ret_n = sc.hit_n;
	return true;
}

bool idem_json_members_read(const char *s, size_t n, struct idem_json_members *ret)
{
	struct scan sc;

	memset(&sc, 0, sizeof(sc));
	ret->n = 0;
	ret->overflow = false;
	ret->plain = false;
	ret->object = false;
	if (n > INT32_MAX)
		return false;
	sc.p = (const unsigned char *)s;
	sc.end = sc.p + n;
	sc.members = ret;
	skip_ws(&sc);
	ret->object = sc.p < sc.end && *sc.p == '{';
	if (!value(&sc, 0, false))
		return false;
	skip_ws(&sc);
	if (sc.p != sc.end)
		return false;
	ret->plain = true;
	return true;
}

int idem_json_members_scalar(const struct idem_json_members *ms, const char *ptr,
                             const char **ret_p, size_t *ret_n)
{
	struct seg g;
	const struct idem_json_member *hit = NULL;

	if (!ms->plain)
		return 0;
	if (!ms->object || ms->overflow || ptr[0] != '/' || strchr(ptr + 1, '/') != NULL)
		return -1;
	g.p = ptr + 1;
	g.n = strlen(g.p);
	g.index = -1;
	for (size_t i = 0; i < ms->n; i++) {
		if (!seg_equal(&g, (const unsigned char *)ms->m[i].name, ms->m[i].name_n))
			continue;
		if (hit != NULL)
			return 0; /* named twice */
		hit = &ms->m[i];
	}
	if (hit == NULL || !hit->scalar)
		return 0;
	*ret_p = hit->text;
	*ret_n = hit->text_n;
	return 1;
}
