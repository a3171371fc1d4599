/*
 * idem_jsonschema_pattern.c - JSON Schema patterns: ECMA-262 regular expressions translated to
 * POSIX extended ones, compiled and matched with regcomp() and regexec() (idem_jsonschema.h
 * says what is supported and what is refused).
 */
#include <errno.h>
#include <locale.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_jsonschema_int.h"

/* The largest count of {n,m}, and how many elements repeats may expand to. */
#define RX_MAX_COUNT  1000
#define RX_MAX_WEIGHT 20000

/*
 * @returns @p (an array of capacity *@cap elements of @size) with room for @n + 1 elements,
 * perhaps moved; NULL on out of memory (@p is then unchanged).
 */
void *idem__jsonschema_grow(void *p, size_t *cap, size_t n, size_t size)
{
	size_t want = *cap ? *cap : 8;

	if (n < *cap)
		return p;
	while (want <= n)
		want *= 2;
	p = realloc(p, want * size);
	if (p != NULL)
		*cap = want;
	return p;
}

/*
 * Patterns: ECMA-262 to POSIX extended, by code point sets.
 *
 * Every atom becomes one ERE atom: a literal (escaped when ERE gives it a meaning), a bracket
 * expression or a group, so that a quantifier after it applies to the same thing in both.
 * regcomp() and regexec() run in the C locale, whatever the process's: there a bracket
 * expression takes one byte, and ranges are byte ranges. (In glibc's C.UTF-8 a bracket takes a
 * character, but a range whose ends are not ASCII is refused, "Invalid collation character".)
 * So code points are spelt as their UTF-8 bytes: a character beyond ASCII is a group of its
 * bytes; classes (and '.', \d, \s, \w and their negations) are sets of code points, sorted
 * and merged, written out as a bracket of their ASCII part and the UTF-8 byte sequences of the
 * rest, "([a-z]|\xc3[\xa0-\xbf]|...)", each range split where its bytes stop being ranges of
 * their own (as RE2 and Rust's regex-syntax do). Documents' strings are valid UTF-8 (json-c
 * checks), so a sequence matches exactly one character. Sets never hold NUL (regexec() ends a
 * string there) nor surrogates (which UTF-8 does not encode).
 */

struct cpset {
	uint32_t (*r)[2];
	size_t n, cap;
	bool nomem;
};

struct rx {
	const char *p; /* the pattern */
	size_t len, i;
	struct idem_buf *out;
	bool nomem;
	char why[160];  /* what was refused, and where, when translating failed */
	int depth;      /* open groups */
	uint64_t w[65]; /* elements each open group expands to so far; w[0] the whole pattern */
	uint64_t last;  /* elements of the last atom, 0 when there is nothing to repeat */
	uint64_t atom;  /* elements of the atom just written */
	/*
	 * Whether what was read matches the empty string: the current alternative of each open
	 * group so far (alt_null), an alternative of it before ('|', grp_null), the last atom
	 * (last_null), and the current alternative before it (before_null).
	 */
	bool alt_null[65], grp_null[65], last_null, before_null;
};

static const uint32_t universe[2][2] = { { 1, 0xd7ff }, { 0xe000, 0x10ffff } };

static void cps_add(struct cpset *s, uint32_t lo, uint32_t hi)
{
	void *r = idem__jsonschema_grow(s->r, &s->cap, s->n, sizeof(*s->r));

	if (r == NULL) {
		s->nomem = true;
		return;
	}
	s->r = r;
	s->r[s->n][0] = lo;
	s->r[s->n][1] = hi;
	s->n++;
}

static int range_cmp(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorts and merges @s, and keeps only what is in the universe (no NUL, no surrogates). */
static void cps_norm(struct cpset *s)
{
	struct cpset t = { 0 };
	size_t n = 0;

	if (s->n == 0)
		return;
	qsort(s->r, s->n, sizeof(*s->r), range_cmp);
	for (size_t i = 1; i < s->n; i++) {
		if (s->r[i][0] <= s->r[n][1] + 1) {
			if (s->r[i][1] > s->r[n][1])
				s->r[n][1] = s->r[i][1];
		} else {
			n++;
			s->r[n][0] = s->r[i][0];
			s->r[n][1] = s->r[i][1];
		}
	}
	n++;
	for (size_t i = 0; i < n; i++) {
		for (size_t u = 0; u < 2; u++) {
			uint32_t lo = s->r[i][0] > universe[u][0] ? s->r[i][0] : universe[u][0];
			uint32_t hi = s->r[i][1] < universe[u][1] ? s->r[i][1] : universe[u][1];

			if (lo <= hi)
				cps_add(&t, lo, hi);
		}
	}
	free(s->r);
	t.nomem |= s->nomem;
	*s = t;
}

/* @s (normalised) becomes its complement in the universe. */
static void cps_complement(struct cpset *s)
{
	struct cpset t = { 0 };

	for (size_t u = 0; u < 2; u++) {
		uint32_t from = universe[u][0];

		for (size_t i = 0; i < s->n; i++) {
			if (s->r[i][1] < universe[u][0] || s->r[i][0] > universe[u][1])
				continue;
			if (s->r[i][0] > from)
				cps_add(&t, from, s->r[i][0] - 1);
			from = s->r[i][1] + 1;
		}
		if (from <= universe[u][1])
			cps_add(&t, from, universe[u][1]);
	}
	free(s->r);
	t.nomem |= s->nomem;
	*s = t;
}

static bool cps_has(const struct cpset *s, uint32_t cp)
{
	for (size_t i = 0; i < s->n; i++) {
		if (s->r[i][0] <= cp && cp <= s->r[i][1])
			return true;
	}
	return false;
}

/* ECMA-262's \d, \s (WhiteSpace and LineTerminator) and \w, negated when @neg. */
static void cps_escape(struct cpset *s, char which, bool neg)
{
	static const uint32_t spaces[][2] = {
		{ 0x09, 0x0d },     { 0x20, 0x20 },     { 0xa0, 0xa0 },     { 0x1680, 0x1680 },
		{ 0x2000, 0x200a }, { 0x2028, 0x2029 }, { 0x202f, 0x202f }, { 0x205f, 0x205f },
		{ 0x3000, 0x3000 }, { 0xfeff, 0xfeff },
	};
	struct cpset t = { 0 };

	if (which == 'd') {
		cps_add(&t, '0', '9');
	} else if (which == 'w') {
		cps_add(&t, '0', '9');
		cps_add(&t, 'A', 'Z');
		cps_add(&t, '_', '_');
		cps_add(&t, 'a', 'z');
	} else {
		for (size_t i = 0; i < IDEM_ARRAY_SIZE(spaces); i++)
			cps_add(&t, spaces[i][0], spaces[i][1]);
	}
	cps_norm(&t);
	if (neg)
		cps_complement(&t);
	for (size_t i = 0; i < t.n; i++)
		cps_add(s, t.r[i][0], t.r[i][1]);
	s->nomem |= t.nomem;
	free(t.r);
}

static void rx_put(struct rx *x, const char *s, size_t n)
{
	if (idem_buf_append(x->out, s, n) != IDEM_OK)
		x->nomem = true;
}

static void rx_put_cp(struct rx *x, uint32_t cp)
{
	char b[4];
	size_t n;

	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | (cp >> 6));
		b[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | (cp >> 12));
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (char)(0xf0 | (cp >> 18));
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	rx_put(x, b, n);
}

/* A literal code point as an ERE atom: beyond ASCII, the group of its bytes. */
static void rx_put_literal(struct rx *x, uint32_t cp)
{
	x->atom = 1;
	if (cp >= 0x80) {
		rx_put(x, "(", 1);
		rx_put_cp(x, cp);
		rx_put(x, ")", 1);
		return;
	}
	if (strchr(".[\\()*+?{|^$", (int)cp) != NULL)
		rx_put(x, "\\", 1);
	rx_put_cp(x, cp);
}

/*
 * A bracket expression for the ASCII set @s. The characters that mean something there (']'
 * first, '^' first, '-' between two, '[' before '.', ':' or '=') are taken out of the ranges
 * and written where they mean themselves: ']' first, '[' and '^' after the rest, '-' last.
 */
static void rx_put_bracket(struct rx *x, const struct cpset *s)
{
	bool close = cps_has(s, ']'), open = cps_has(s, '['), hat = cps_has(s, '^');
	bool dash = cps_has(s, '-');
	size_t mark = x->out->len;

	rx_put(x, "[", 1);
	if (close)
		rx_put(x, "]", 1);
	for (size_t i = 0; i < s->n; i++) {
		uint32_t lo = s->r[i][0], hi = s->r[i][1];

		while (lo <= hi && (lo == ']' || lo == '[' || lo == '^' || lo == '-'))
			lo++;
		while (hi >= lo && (hi == ']' || hi == '[' || hi == '^' || hi == '-'))
			hi--;
		if (lo > hi)
			continue;
		rx_put_cp(x, lo);
		if (hi > lo + 1)
			rx_put(x, "-", 1);
		if (hi > lo)
			rx_put_cp(x, hi);
	}
	if (open)
		rx_put(x, "[", 1);
	if (hat && !x->nomem && x->out->len == mark + 1) {
		/* "^" first would negate: "[-^]", or '^' alone escaped. */
		x->out->len = mark;
		rx_put(x, dash ? "[-^]" : "\\^", dash ? 4 : 2);
		return;
	}
	if (hat)
		rx_put(x, "^", 1);
	if (dash)
		rx_put(x, "-", 1);
	rx_put(x, "]", 1);
}

/*
 * The UTF-8 sequences of the code points [@lo, @hi] (all of one encoded length, no surrogates)
 * as ERE alternatives, each a byte or a range of bytes per position.
 */
static void rx_put_sequences(struct rx *x, uint32_t lo, uint32_t hi)
{
	size_t n = lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
	char a[4], b[4];

	/* split until, at every position, the bytes between lo's and hi's are all taken */
	for (size_t i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;

		if ((lo & ~m) == (hi & ~m))
			continue;
		if ((lo & m) != 0) {
			rx_put_sequences(x, lo, lo | m);
			rx_put_sequences(x, (lo | m) + 1, hi);
			return;
		}
		if ((hi & m) != m) {
			rx_put_sequences(x, lo, (hi & ~m) - 1);
			rx_put_sequences(x, hi & ~m, hi);
			return;
		}
	}
	for (size_t k = n; k-- > 1;) {
		a[k] = (char)(0x80 | ((lo >> (6 * (n - 1 - k))) & 0x3f));
		b[k] = (char)(0x80 | ((hi >> (6 * (n - 1 - k))) & 0x3f));
	}
	a[0] = (char)((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | (lo >> (6 * (n - 1))));
	b[0] = (char)((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | (hi >> (6 * (n - 1))));
	if (x->atom > 0)
		rx_put(x, "|", 1);
	for (size_t k = 0; k < n; k++) {
		if (a[k] == b[k]) {
			rx_put(x, &a[k], 1);
			continue;
		}
		rx_put(x, "[", 1);
		rx_put(x, &a[k], 1);
		rx_put(x, "-", 1);
		rx_put(x, &b[k], 1);
		rx_put(x, "]", 1);
	}
	x->atom++;
}

/* The set @s (normalised) as one ERE atom; x->atom the alternatives it took. */
static void rx_put_set(struct rx *x, struct cpset *s)
{
	static const uint32_t lengths[][2] = { { 0x80, 0x7ff },
		                               { 0x800, 0xffff },
		                               { 0x10000, 0x10ffff } };
	struct cpset ascii = { 0 };
	bool wide = s->n > 0 && s->r[s->n - 1][1] >= 0x80;

	x->atom = 0;
	for (size_t i = 0; i < s->n && s->r[i][0] < 0x80; i++)
		cps_add(&ascii, s->r[i][0], s->r[i][1] < 0x80 ? s->r[i][1] : 0x7f);
	if (s->n == 0) {
		rx_put(x, "[^\x01-\xff]", 6); /* no character at all */
		x->atom = 1;
		goto out_free_ascii;
	}
	if (!wide) {
		rx_put_bracket(x, &ascii);
		x->atom = 1;
		goto out_free_ascii;
	}
	rx_put(x, "(", 1);
	if (ascii.n > 0) {
		rx_put_bracket(x, &ascii);
		x->atom = 1;
	}
	for (size_t i = 0; i < s->n; i++) {
		for (size_t l = 0; l < IDEM_ARRAY_SIZE(lengths); l++) {
			uint32_t lo = s->r[i][0] > lengths[l][0] ? s->r[i][0] : lengths[l][0];
			uint32_t hi = s->r[i][1] < lengths[l][1] ? s->r[i][1] : lengths[l][1];

			if (lo <= hi)
				rx_put_sequences(x, lo, hi);
		}
	}
	rx_put(x, ")", 1);

out_free_ascii:
	if (s->nomem || ascii.nomem)
		x->nomem = true;
	free(ascii.r);
}

/*
 * Says what cannot be read, and where: "<what> at offset N", or, for what is valid ECMA-262
 * that idemd does not translate, "<what> at offset N is not one idemd can check".
 */
IDEM_PRINTF(3, 4)
static bool rx_refuse(struct rx *x, size_t at, const char *fmt, ...)
{
	static const char tail[] = " is not one idemd can check";
	char what[120];
	size_t n;
	bool unsupported;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	n = strlen(what);
	unsupported = n >= sizeof(tail) - 1 && strcmp(what + n - (sizeof(tail) - 1), tail) == 0;
	if (unsupported)
		what[n - (sizeof(tail) - 1)] = '\0';
	snprintf(x->why, sizeof(x->why), "%s at offset %zu%s", what, at, unsupported ? tail : "");
	return false;
}

/* Decodes the UTF-8 sequence at x->i, advancing past it. */
static bool rx_next_cp(struct rx *x, uint32_t *ret_cp)
{
	const unsigned char *p = (const unsigned char *)x->p + x->i;
	size_t left = x->len - x->i, n;
	uint32_t cp, min;

	if (p[0] < 0x80) {
		x->i++;
		*ret_cp = p[0];
		return true;
	}
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		n = 2, cp = p[0] & 0x1fu, min = 0x80;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		n = 3, cp = p[0] & 0x0fu, min = 0x800;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		n = 4, cp = p[0] & 0x07u, min = 0x10000;
	} else {
		return rx_refuse(x, x->i, "a byte that is not UTF-8");
	}
	if (left < n)
		return rx_refuse(x, x->i, "a byte that is not UTF-8");
	for (size_t k = 1; k < n; k++) {
		if ((p[k] & 0xc0) != 0x80)
			return rx_refuse(x, x->i, "a byte that is not UTF-8");
		cp = (cp << 6) | (p[k] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return rx_refuse(x, x->i, "a byte that is not UTF-8");
	x->i += n;
	*ret_cp = cp;
	return true;
}

/* Reads @n hex digits at x->p[@at..]; false if there are not that many. */
static bool rx_hex(const struct rx *x, size_t at, size_t n, uint32_t *ret_v)
{
	uint32_t v = 0;

	if (x->len - at < n)
		return false;
	for (size_t k = 0; k < n; k++) {
		int d = idem_hex_digit(x->p[at + k]);

		if (d < 0)
			return false;
		v = v * 16 + (uint32_t)d;
	}
	*ret_v = v;
	return true;
}

/* \uHHHH, a surrogate pair of two, or \u{H...}; x->i is at the 'u'. */
static bool rx_unicode_escape(struct rx *x, size_t at, uint32_t *ret_cp)
{
	uint32_t cp, lo;

	if (x->i + 1 < x->len && x->p[x->i + 1] == '{') {
		size_t k = x->i + 2;

		cp = 0;
		for (; k < x->len && idem_hex_digit(x->p[k]) >= 0; k++) {
			cp = cp * 16 + (uint32_t)idem_hex_digit(x->p[k]);
			if (cp > 0x10ffff)
				return rx_refuse(x, at, "'\\\\u{...}' beyond U+10FFFF");
		}
		if (k == x->i + 2 || k >= x->len || x->p[k] != '}')
			return rx_refuse(x, at, "'\\\\u{' without hex digits and '}'");
		x->i = k + 1;
	} else {
		if (!rx_hex(x, x->i + 1, 4, &cp))
			return rx_refuse(x, at, "'\\\\u' without four hex digits");
		x->i += 5;
		if (cp >= 0xd800 && cp <= 0xdbff && x->i + 1 < x->len && x->p[x->i] == '\\' &&
		    x->p[x->i + 1] == 'u' && rx_hex(x, x->i + 2, 4, &lo) && lo >= 0xdc00 &&
		    lo <= 0xdfff) {
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			x->i += 6;
		}
	}
	if (cp >= 0xd800 && cp <= 0xdfff)
		return rx_refuse(x, at, "a lone surrogate '\\\\u%04X'", (unsigned)cp);
	*ret_cp = cp;
	return true;
}

/*
 * The escape at x->i (a '\'), in a class or not: a code point in *@ret_cp, or a set added to
 * @set (*@ret_is_set true).
 */
static bool rx_escape(struct rx *x, bool in_class, uint32_t *ret_cp, struct cpset *set,
                      bool *ret_is_set)
{
	size_t at = x->i;
	char c;
	uint32_t v;

	*ret_is_set = false;
	x->i++;
	if (x->i >= x->len)
		return rx_refuse(x, at, "'\\\\' at the end");
	c = x->p[x->i];
	switch (c) {
	case 'd':
	case 'D':
	case 'w':
	case 'W':
	case 's':
	case 'S':
		cps_escape(set, (char)(c | 0x20), c < 'a');
		*ret_is_set = true;
		x->i++;
		return true;
	case 'b':
		if (!in_class)
			return rx_refuse(x, at, "word boundary '\\\\b' is not one idemd can check");
		*ret_cp = 8;
		x->i++;
		return true;
	case 'B':
		return rx_refuse(x, at, "'\\\\B' is not one idemd can check");
	case 't':
		*ret_cp = '\t';
		break;
	case 'n':
		*ret_cp = '\n';
		break;
	case 'v':
		*ret_cp = '\v';
		break;
	case 'f':
		*ret_cp = '\f';
		break;
	case 'r':
		*ret_cp = '\r';
		break;
	case 'c':
		if (x->i + 1 >= x->len || !((x->p[x->i + 1] >= 'a' && x->p[x->i + 1] <= 'z') ||
		                            (x->p[x->i + 1] >= 'A' && x->p[x->i + 1] <= 'Z')))
			return rx_refuse(x, at, "'\\\\c' without a letter");
		*ret_cp = (uint32_t)(x->p[x->i + 1] & 0x1f);
		x->i += 2;
		return true;
	case 'x':
		if (!rx_hex(x, x->i + 1, 2, &v))
			return rx_refuse(x, at, "'\\\\x' without two hex digits");
		if (v == 0)
			return rx_refuse(x, at,
			                 "'\\\\x00' (a NUL character) is not one idemd can check");
		*ret_cp = v;
		x->i += 3;
		return true;
	case 'u':
		if (!rx_unicode_escape(x, at, ret_cp))
			return false;
		if (*ret_cp == 0)
			return rx_refuse(
			        x, at, "'\\\\u0000' (a NUL character) is not one idemd can check");
		return true;
	case '0':
		if (x->i + 1 < x->len && x->p[x->i + 1] >= '0' && x->p[x->i + 1] <= '9')
			return rx_refuse(x, at, "octal escape '\\\\0%c' is not one idemd can check",
			                 x->p[x->i + 1]);
		return rx_refuse(x, at, "'\\\\0' (a NUL character) is not one idemd can check");
	case 'k':
		return rx_refuse(x, at, "named backreference '\\\\k' is not one idemd can check");
	case 'p':
	case 'P':
		return rx_refuse(x, at,
		                 "Unicode property escape '\\\\%c' is not one idemd can check", c);
	case '-':
		/* ECMA-262 allows it in classes only; elsewhere it is a literal all the same */
		*ret_cp = '-';
		break;
	default:
		if (c >= '1' && c <= '9')
			return rx_refuse(x, at, "backreference '\\\\%c' is not one idemd can check",
			                 c);
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
			return rx_refuse(x, at, "escape '\\\\%c' is not one idemd can check", c);
		/* an escaped punctuation or other character is itself */
		return rx_next_cp(x, ret_cp);
	}
	x->i++;
	return true;
}

/* One class atom: a character or an escape. */
static bool rx_class_atom(struct rx *x, uint32_t *ret_cp, struct cpset *set, bool *ret_is_set)
{
	if (x->p[x->i] == '\\')
		return rx_escape(x, true, ret_cp, set, ret_is_set);
	*ret_is_set = false;
	return rx_next_cp(x, ret_cp);
}

static bool rx_class(struct rx *x)
{
	size_t at = x->i;
	struct cpset set = { 0 };
	bool neg = false, is_set, ok = false;
	uint32_t lo, hi;

	x->i++;
	if (x->i < x->len && x->p[x->i] == '^') {
		neg = true;
		x->i++;
	}
	for (;;) {
		size_t from = x->i;

		if (x->i >= x->len) {
			rx_refuse(x, at, "class '[' without ']'");
			goto out_free_set;
		}
		if (x->p[x->i] == ']') {
			x->i++;
			break;
		}
		if (!rx_class_atom(x, &lo, &set, &is_set))
			goto out_free_set;
		if (x->i + 1 < x->len && x->p[x->i] == '-' && x->p[x->i + 1] != ']') {
			bool hi_is_set;

			x->i++;
			if (!rx_class_atom(x, &hi, &set, &hi_is_set))
				goto out_free_set;
			if (is_set || hi_is_set) {
				rx_refuse(x, from, "a range with a class escape");
				goto out_free_set;
			}
			if (lo > hi) {
				rx_refuse(x, from, "a range out of order");
				goto out_free_set;
			}
			cps_add(&set, lo, hi);
		} else if (!is_set) {
			cps_add(&set, lo, lo);
		}
	}
	cps_norm(&set);
	if (neg)
		cps_complement(&set);
	rx_put_set(x, &set);
	ok = true;

out_free_set:
	if (set.nomem)
		x->nomem = true;
	free(set.r);
	return ok;
}

/* Adds @w elements to the open group; false when the pattern grows too large. */
static bool rx_weigh(struct rx *x, uint64_t w, size_t at)
{
	x->w[x->depth] += w;
	if (x->w[x->depth] > RX_MAX_WEIGHT)
		return rx_refuse(x, at, "repeats that expand to over %d elements", RX_MAX_WEIGHT);
	return true;
}

static bool rx_atom_done(struct rx *x, size_t at)
{
	x->before_null = x->alt_null[x->depth];
	x->alt_null[x->depth] = false;
	x->last_null = false;
	x->last = x->atom;
	return rx_weigh(x, x->atom, at);
}

/* Reads a count of {n,m} at x->i, up to RX_MAX_COUNT + 1. */
static bool rx_count(struct rx *x, uint64_t *ret_n)
{
	uint64_t n = 0;
	size_t from = x->i;

	for (; x->i < x->len && x->p[x->i] >= '0' && x->p[x->i] <= '9'; x->i++) {
		if (n <= RX_MAX_COUNT)
			n = n * 10 + (uint64_t)(x->p[x->i] - '0');
	}
	*ret_n = n;
	return x->i > from;
}

/*
 * A quantifier at x->i ('*', '+', '?' or '{'). *@ret_literal when '{' does not start one: it
 * is then a literal, as ECMA-262's Annex B reads it.
 */
static bool rx_quantifier(struct rx *x, bool *ret_literal)
{
	size_t at = x->i;
	uint64_t n = 0, m = 0, times;
	bool has_m = false, comma = false;
	char buf[48];

	*ret_literal = false;
	if (x->p[x->i] == '{') {
		x->i++;
		if (!rx_count(x, &n))
			goto out_literal;
		if (x->i < x->len && x->p[x->i] == ',') {
			comma = true;
			x->i++;
			has_m = rx_count(x, &m);
		}
		if (x->i >= x->len || x->p[x->i] != '}')
			goto out_literal;
		x->i++;
		if (n > RX_MAX_COUNT || (has_m && m > RX_MAX_COUNT))
			return rx_refuse(x, at, "a count over %d", RX_MAX_COUNT);
		if (has_m && m < n)
			return rx_refuse(x, at, "counts out of order");
		if (!comma)
			snprintf(buf, sizeof(buf), "{%u}", (unsigned)n);
		else if (!has_m)
			snprintf(buf, sizeof(buf), "{%u,}", (unsigned)n);
		else
			snprintf(buf, sizeof(buf), "{%u,%u}", (unsigned)n, (unsigned)m);
		times = has_m ? m : n + 1;
	} else {
		buf[0] = x->p[x->i];
		buf[1] = '\0';
		times = buf[0] == '+' ? 2 : 1;
		n = buf[0] == '+';
		x->i++;
	}
	if (x->last == 0)
		return rx_refuse(x, at, "nothing to repeat");
	if (x->i < x->len && x->p[x->i] == '?')
		return rx_refuse(x, at, "lazy quantifier is not one idemd can check");
	rx_put(x, buf, strlen(buf));
	/*
	 * regcomp() unrolls {n,m} into m copies. Copies of what may match nothing can each be
	 * skipped, so the copies' closures overlap and cost grows with m squared: "(.*){1,1000}"
	 * took regcomp() 50 s and 2 GB before it gave up.
	 */
	if (x->last_null)
		times *= times;
	if (times > 1 && !rx_weigh(x, x->last * (times - 1), at))
		return false;
	if (n == 0)
		x->alt_null[x->depth] = x->before_null;
	x->last = 0;
	return true;

out_literal:
	x->i = at;
	*ret_literal = true;
	return true;
}

static bool rx_group_open(struct rx *x)
{
	size_t at = x->i;
	const char *p = x->p + x->i;
	size_t left = x->len - x->i;

	if (left >= 2 && p[1] == '?') {
		if (left >= 3 && p[2] == ':')
			x->i += 3;
		else if (left >= 3 && (p[2] == '=' || p[2] == '!'))
			return rx_refuse(x, at, "lookahead '(?%c' is not one idemd can check",
			                 p[2]);
		else if (left >= 4 && p[2] == '<' && (p[3] == '=' || p[3] == '!'))
			return rx_refuse(x, at, "lookbehind '(?<%c' is not one idemd can check",
			                 p[3]);
		else if (left >= 3 && p[2] == '<')
			return rx_refuse(x, at, "named group '(?<' is not one idemd can check");
		else
			return rx_refuse(x, at, "group modifier '(?' is not one idemd can check");
	} else {
		x->i++;
	}
	if (x->depth + 1 >= (int)IDEM_ARRAY_SIZE(x->w))
		return rx_refuse(x, at, "groups nested deeper than %d",
		                 (int)IDEM_ARRAY_SIZE(x->w) - 1);
	x->depth++;
	x->w[x->depth] = 0;
	x->alt_null[x->depth] = true;
	x->grp_null[x->depth] = false;
	x->last = 0;
	rx_put(x, "(", 1);
	return true;
}

static bool rx_translate(struct rx *x)
{
	while (x->i < x->len) {
		size_t at = x->i;
		char c = x->p[x->i];
		uint32_t cp;
		bool is_set, literal;
		struct cpset set = { 0 };

		switch (c) {
		case '|':
			rx_put(x, "|", 1);
			x->grp_null[x->depth] |= x->alt_null[x->depth];
			x->alt_null[x->depth] = true;
			x->last = 0;
			x->i++;
			continue;
		case '(':
			if (!rx_group_open(x))
				return false;
			continue;
		case ')': {
			uint64_t gw;
			bool null;

			if (x->depth == 0)
				return rx_refuse(x, at, "')' without '('");
			rx_put(x, ")", 1);
			x->i++;
			gw = x->w[x->depth] ? x->w[x->depth] : 1;
			null = x->grp_null[x->depth] || x->alt_null[x->depth];
			x->depth--;
			if (!rx_weigh(x, gw, at))
				return false;
			x->before_null = x->alt_null[x->depth];
			x->alt_null[x->depth] = x->alt_null[x->depth] && null;
			x->last_null = null;
			x->last = gw;
			continue;
		}
		case '^':
		case '$':
			rx_put(x, &c, 1);
			x->last = 0;
			x->i++;
			continue;
		case '*':
		case '+':
		case '?':
		case '{':
			if (!rx_quantifier(x, &literal))
				return false;
			if (!literal)
				continue;
			x->i++;
			rx_put_literal(x, '{');
			break;
		case '.':
			x->i++;
			cps_add(&set, '\n', '\n');
			cps_add(&set, '\r', '\r');
			cps_add(&set, 0x2028, 0x2029);
			cps_norm(&set);
			cps_complement(&set);
			rx_put_set(x, &set);
			free(set.r);
			break;
		case '[':
			if (!rx_class(x))
				return false;
			break;
		case '\\':
			if (!rx_escape(x, false, &cp, &set, &is_set)) {
				free(set.r);
				return false;
			}
			if (is_set) {
				cps_norm(&set);
				rx_put_set(x, &set);
			} else {
				rx_put_literal(x, cp);
			}
			free(set.r);
			break;
		default:
			if (!rx_next_cp(x, &cp))
				return false;
			rx_put_literal(x, cp);
			break;
		}
		if (!rx_atom_done(x, at))
			return false;
	}
	if (x->depth > 0)
		return rx_refuse(x, x->len, "'(' without ')'");
	return true;
}

idem_status idem__jsonschema_pattern_new(idem_jsonschema *s, const char *src, size_t len,
                                         struct js_pattern **ret_pat, char *why, size_t whylen)
{
	struct idem_buf ere = { 0 };
	struct rx x = { .p = src, .len = len, .out = &ere };
	struct js_pattern *pat, **pats;
	locale_t old;
	idem_status r;
	int rc;

	if (strlen(src) != len) {
		snprintf(why, whylen, "a NUL character at offset %zu", strlen(src));
		return IDEM_ERR_INVALID;
	}
	/*
	 * "^.*(P)" rather than P: regexec() searches for an unanchored P by trying every start in
	 * turn, quadratic in the string ("(a|aa)*b" took 47 s over 200 KB of "a"), while this is
	 * one pass. The same strings match: '.' takes any byte but NUL, and a '^' or '$' in P
	 * still means the string's start or end (no REG_NEWLINE).
	 */
	x.alt_null[0] = true;
	rx_put(&x, "^.*(", 4);
	if (!rx_translate(&x) && !x.nomem) {
		snprintf(why, whylen, "%s", x.why);
		r = IDEM_ERR_INVALID;
		goto out_done_ere;
	}
	rx_put(&x, ")", 1);
	if (x.nomem || idem_buf_append(&ere, "", 0) != IDEM_OK) {
		r = IDEM_ERR_NOMEM;
		goto out_done_ere;
	}
	if (s->loc == (locale_t)0) {
		s->loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
		if (s->loc == (locale_t)0) {
			r = errno == ENOMEM ? IDEM_ERR_NOMEM : IDEM_ERR_INVALID;
			snprintf(why, whylen, "the C locale cannot be loaded: %s", strerror(errno));
			goto out_done_ere;
		}
	}
	pats = idem__jsonschema_grow(s->patterns, &s->cap_patterns, s->n_patterns,
	                             sizeof(*s->patterns));
	if (pats == NULL) {
		r = IDEM_ERR_NOMEM;
		goto out_done_ere;
	}
	s->patterns = pats;
	pat = calloc(1, sizeof(*pat));
	if (pat == NULL) {
		r = IDEM_ERR_NOMEM;
		goto out_done_ere;
	}
	old = uselocale(s->loc);
	rc = regcomp(&pat->re, ere.data, REG_EXTENDED | REG_NOSUB);
	uselocale(old);
	if (rc != 0) {
		regerror(rc, &pat->re, why, whylen);
		free(pat);
		r = rc == REG_ESPACE ? IDEM_ERR_NOMEM : IDEM_ERR_INVALID;
		goto out_done_ere;
	}
	pat->src = src;
	s->patterns[s->n_patterns++] = pat;
	*ret_pat = pat;
	r = IDEM_OK;

out_done_ere:
	idem_buf_done(&ere);
	return r;
}

int idem__jsonschema_match(const struct js_pattern *pat, locale_t loc, const char *str)
{
	locale_t old = uselocale(loc);
	int rc = regexec(&pat->re, str, 0, NULL, 0);

	uselocale(old);
	if (rc == 0)
		return 1;
	return rc == REG_NOMATCH ? 0 : -1;
}
