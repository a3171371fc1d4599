/*
 * idem_esc.c - the printable form of untrusted text (see idem_esc.h for the form itself).
 *
 * One pass over the input, one unit at a time: a unit is what one input character (or one byte
 * of invalid UTF-8) becomes. Units are written whole or not at all, so that a cut never splits
 * an escape or a UTF-8 sequence; the last place where the truncation mark would still fit is
 * remembered, and a unit that does not fit takes the output back there.
 */
#include "idem_esc.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct sink {
	char *out;
	size_t cap;  /* bytes that may be written before the NUL */
	size_t pos;  /* bytes written */
	size_t keep; /* the last unit boundary with room for IDEM_ESC_TRUNC after it */
	size_t need; /* the length of the whole form */
	bool full;   /* a unit did not fit: the rest is only counted */
};

static void put(struct sink *k, const char *u, size_t n)
{
	k->need += n;
	if (k->full)
		return;
	if (n > k->cap - k->pos) {
		k->full = true;
		return;
	}
	memcpy(k->out + k->pos, u, n);
	k->pos += n;
	if (k->cap - k->pos >= sizeof(IDEM_ESC_TRUNC) - 1)
		k->keep = k->pos;
}

/*
 * The length (2..4) of the valid UTF-8 sequence at @s[0..@n), with its code point in *@ret_cp,
 * or 0 if @s[0] does not start one (RFC 3629: no overlong forms, no surrogates, nothing beyond
 * U+10FFFF, no sequence cut short).
 */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *ret_cp)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t need;
	uint32_t cp;

	if (c >= 0xc2 && c <= 0xdf) {
		need = 1;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 2;
		cp = c & 0x0f;
		lo = c == 0xe0 ? 0xa0 : 0x80; /* overlong below U+0800 */
		hi = c == 0xed ? 0x9f : 0xbf; /* surrogates U+D800..U+DFFF */
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 3;
		cp = c & 0x07;
		lo = c == 0xf0 ? 0x90 : 0x80; /* overlong below U+10000 */
		hi = c == 0xf4 ? 0x8f : 0xbf; /* beyond U+10FFFF */
	} else {
		return 0;
	}
	if (n - 1 < need || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 1; i <= need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	*ret_cp = cp;
	return need + 1;
}

/* Valid code points that are written as escapes: see idem_esc.h. */
static bool cp_escaped(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200b || cp == 0x200e ||
	       cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) ||
	       cp == 0xfeff;
}

size_t idem_esc(char *out, size_t outlen, const void *s, size_t len, unsigned flags)
{
	const unsigned char *p = s;
	bool json = flags & IDEM_ESC_JSON;
	struct sink k = { .out = out };
	char u[16];
	size_t i = 0;

	k.cap = outlen > 0 ? outlen - 1 : 0;
	while (i < len) {
		unsigned char c = p[i];
		uint32_t cp;
		size_t n;

		if (c >= 0x20 && c < 0x7f) {
			bool esc = !json && ((c == '\\' && !(flags & IDEM_ESC_KEEP_BACKSLASH)) ||
			                     ((c == '\'' || c == '"') && (flags & IDEM_ESC_QUOTE)));

			u[0] = '\\';
			u[1] = (char)c;
			put(&k, esc ? u : u + 1, esc ? 2 : 1);
			i++;
		} else if (c < 0x80) {
			if (json && (c == '\t' || c == '\n' || c == '\r'))
				put(&k, (const char *)&p[i], 1);
			else
				put(&k, u,
				    (size_t)snprintf(u, sizeof(u), json ? "\\u%04x" : "\\x%02x",
				                     c));
			i++;
		} else if ((n = utf8_seq(p + i, len - i, &cp)) == 0) {
			if (json)
				put(&k, "\\ufffd", 6);
			else
				put(&k, u, (size_t)snprintf(u, sizeof(u), "\\x%02x", c));
			i++;
		} else {
			if (cp_escaped(cp))
				put(&k, u,
				    (size_t)snprintf(u, sizeof(u), json ? "\\u%04x" : "\\u{%04X}",
				                     (unsigned)cp));
			else
				put(&k, (const char *)&p[i], n);
			i += n;
		}
	}
	if (outlen == 0)
		return k.need;
	if (k.full) {
		size_t mark = sizeof(IDEM_ESC_TRUNC) - 1;

		k.pos = k.keep;
		if (mark > k.cap - k.pos)
			mark = k.cap - k.pos;
		memcpy(out + k.pos, IDEM_ESC_TRUNC, mark);
		k.pos += mark;
	}
	out[k.pos] = '\0';
	return k.need;
}

const char *idem_esc_str(char *out, size_t outlen, const char *s, unsigned flags)
{
	if (s == NULL)
		s = "(null)";
	idem_esc(out, outlen, s, strlen(s), flags);
	return out;
}
