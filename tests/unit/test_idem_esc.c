/*
 * Unit tests for idem_esc: the printable form of untrusted text. A table of inputs and their
 * forms under each flag, then truncation at every output size: never inside a unit, always
 * NUL-terminated, never past the buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_common.h"
#include "idem_esc.h"

#define S(lit) lit, sizeof(lit) - 1

struct esc_case {
	const char *in;
	size_t len;
	unsigned flags;
	const char *want;
};

static const struct esc_case cases[] = {
	{ S(""), 0, "" },
	{ S("plain key-1.x_y"), 0, "plain key-1.x_y" },
	/* ANSI/ESC sequences, line breaks, TAB, NUL, DEL */
	{ S("\x1b[31mred\x1b[0m"), 0, "\\x1b[31mred\\x1b[0m" },
	{ S("\x1b[2J"), IDEM_ESC_QUOTE, "\\x1b[2J" },
	{ S("a\r\nb"), 0, "a\\x0d\\x0ab" },
	{ S("a\tb"), 0, "a\\x09b" },
	{ S("a\0b"), 0, "a\\x00b" },
	{ S("\x7f"), 0, "\\x7f" },
	{ S("\x01\x1f"), 0, "\\x01\\x1f" },
	/* C1 controls as UTF-8 (CSI U+009B, NEL U+0085) */
	{ S("\xc2\x9b[2J"), 0, "\\u{009B}[2J" },
	{ S("\xc2\x80\xc2\x85\xc2\x9f"), 0, "\\u{0080}\\u{0085}\\u{009F}" },
	{ S("\xc2\xa0"), 0, "\xc2\xa0" }, /* U+00A0, the first character after them, kept */
	/* bidi controls, each */
	{ S("\xd8\x9c"), 0, "\\u{061C}" },
	{ S("\xe2\x80\x8e"), 0, "\\u{200E}" },
	{ S("\xe2\x80\x8f"), 0, "\\u{200F}" },
	{ S("\xe2\x80\xaa"), 0, "\\u{202A}" },
	{ S("\xe2\x80\xab"), 0, "\\u{202B}" },
	{ S("\xe2\x80\xac"), 0, "\\u{202C}" },
	{ S("\xe2\x80\xad"), 0, "\\u{202D}" },
	{ S("abc\xe2\x80\xae"
	    "fed"),
	  0, "abc\\u{202E}fed" },
	{ S("\xe2\x81\xa6"), 0, "\\u{2066}" },
	{ S("\xe2\x81\xa7"), 0, "\\u{2067}" },
	{ S("\xe2\x81\xa8"), 0, "\\u{2068}" },
	{ S("\xe2\x81\xa9"), 0, "\\u{2069}" },
	/* invisible line breaks and format characters; ZWNJ and ZWJ kept */
	{ S("\xe2\x80\xa8\xe2\x80\xa9"), 0, "\\u{2028}\\u{2029}" },
	{ S("\xe2\x80\x8b\xe2\x81\xa0\xef\xbb\xbf"), 0, "\\u{200B}\\u{2060}\\u{FEFF}" },
	{ S("\xe2\x80\x8c\xe2\x80\x8d"), 0, "\xe2\x80\x8c\xe2\x80\x8d" },
	/* invalid UTF-8: each byte that starts no valid sequence, decoding resumes after it */
	{ S("a\x80z"), 0, "a\\x80z" },                        /* lone continuation */
	{ S("\xbf\xbf"), 0, "\\xbf\\xbf" },                   /* continuations */
	{ S("\xc0\xaf"), 0, "\\xc0\\xaf" },                   /* overlong '/' */
	{ S("\xc1\xbf"), 0, "\\xc1\\xbf" },                   /* overlong */
	{ S("\xe0\x80\xaf"), 0, "\\xe0\\x80\\xaf" },          /* overlong, 3 bytes */
	{ S("\xf0\x80\x80\xaf"), 0, "\\xf0\\x80\\x80\\xaf" }, /* overlong, 4 bytes */
	{ S("\xed\xa0\x80"), 0, "\\xed\\xa0\\x80" },          /* surrogate U+D800 */
	{ S("\xf4\x90\x80\x80"), 0, "\\xf4\\x90\\x80\\x80" }, /* beyond U+10FFFF */
	{ S("\xf5\xff\xfe"), 0, "\\xf5\\xff\\xfe" },
	{ S("ok\xe6\x97"), 0, "ok\\xe6\\x97" }, /* sequence cut short at the end */
	{ S("\xe6\x97"
	    "a"),
	  0, "\\xe6\\x97a" }, /* ... and in the middle */
	{ S("\xc3"
	    "\xc3\xa9"),
	  0, "\\xc3\xc3\xa9" }, /* a lead byte, then a valid é */
	/* valid UTF-8 kept: é, 日本, an emoji */
	{ S("caf\xc3\xa9"), 0, "caf\xc3\xa9" },
	{ S("\xe6\x97\xa5\xe6\x9c\xac"), IDEM_ESC_QUOTE, "\xe6\x97\xa5\xe6\x9c\xac" },
	{ S("\xf0\x9f\x98\x80"), 0, "\xf0\x9f\x98\x80" },
	/* quotes with and without the flag, backslash */
	{ S("it's \"x\""), 0, "it's \"x\"" },
	{ S("it's \"x\""), IDEM_ESC_QUOTE, "it\\'s \\\"x\\\"" },
	{ S("k' kind=fake x='"), IDEM_ESC_QUOTE, "k\\' kind=fake x=\\'" },
	{ S("a\\b"), 0, "a\\\\b" },
	{ S("\\x1b"), 0, "\\\\x1b" }, /* text that looks like an escape is not one */
	{ S("a\\b"), IDEM_ESC_QUOTE, "a\\\\b" },
	{ S("a\\b\x1b'"), IDEM_ESC_KEEP_BACKSLASH, "a\\b\\x1b'" },
	{ S("a\\b\x1b'\xe2\x80\xae"), IDEM_ESC_KEEP_BACKSLASH | IDEM_ESC_QUOTE,
	  "a\\b\\x1b\\'\\u{202E}" },
	/* JSON: code points as JSON escapes, JSON whitespace kept, the rest as json-c wrote it */
	{ S("[\n  \"a\\u001b\\\"\xe2\x80\xae\xc2\x9b\"\t]\r\n"), IDEM_ESC_JSON,
	  "[\n  \"a\\u001b\\\"\\u202e\\u009b\"\t]\r\n" },
	{ S("\"\x1b\x7f\xff\xc3\xa9\""), IDEM_ESC_JSON, "\"\\u001b\\u007f\\ufffd\xc3\xa9\"" },
};

static void test_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		const struct esc_case *c = &cases[i];
		char out[256];
		size_t n;

		memset(out, 'Z', sizeof(out));
		n = idem_esc(out, sizeof(out), c->in, c->len, c->flags);
		if (strcmp(out, c->want) != 0)
			fail_msg("case %zu: got '%s', want '%s'", i, out, c->want);
		assert_int_equal(n, strlen(c->want));
	}
}

/* No raw ESC, C1, DEL or U+202E in any output: what a terminal or a log reader would obey. */
static void test_no_raw_controls(void **state)
{
	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		const struct esc_case *c = &cases[i];
		char out[256];

		idem_esc(out, sizeof(out), c->in, c->len, c->flags);
		for (const unsigned char *p = (const unsigned char *)out; *p; p++) {
			bool ws = (c->flags & IDEM_ESC_JSON) &&
			          (*p == '\n' || *p == '\r' || *p == '\t');

			if ((*p < 0x20 && !ws) || *p == 0x7f)
				fail_msg("case %zu: raw control 0x%02x in '%s'", i, *p, out);
		}
		assert_null(strstr(out, "\xe2\x80\xae"));
		assert_null(strstr(out, "\xc2\x9b"));
	}
}

/* The offsets of @s (an output of idem_esc() without IDEM_ESC_JSON) where a unit starts. */
static bool unit_boundary(const char *s, size_t at)
{
	size_t i = 0;

	while (i < at) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\' && s[i + 1] == 'x')
			i += 4;
		else if (c == '\\' && s[i + 1] == 'u')
			i += 8;
		else if (c == '\\')
			i += 2;
		else if (c >= 0xf0)
			i += 4;
		else if (c >= 0xe0)
			i += 3;
		else if (c >= 0xc0)
			i += 2;
		else
			i++;
	}
	return i == at;
}

static void check_cuts(const char *in, size_t len, unsigned flags)
{
	char full[512], out[520];
	size_t flen = idem_esc(full, sizeof(full), in, len, flags);
	size_t mark = strlen(IDEM_ESC_TRUNC);

	assert_true(flen + 1 < sizeof(full));
	for (size_t outlen = 0; outlen <= flen + 2; outlen++) {
		size_t n, kept;

		memset(out, 'Z', sizeof(out));
		/* The length of the whole form, whatever the room. */
		assert_int_equal(idem_esc(out, outlen, in, len, flags), flen);
		if (outlen == 0) {
			assert_int_equal(out[0], 'Z'); /* nothing written */
			continue;
		}
		n = strlen(out);
		assert_true(n < outlen);
		assert_int_equal(out[outlen], 'Z'); /* nothing past the buffer */
		if (outlen > flen) {
			assert_string_equal(out, full);
			continue;
		}
		/* Cut: whole units, then the mark (as much of it as fits in a tiny buffer). */
		kept = n >= mark ? n - mark : 0;
		assert_memory_equal(out, full, kept);
		assert_true(unit_boundary(full, kept));
		if (outlen - 1 >= mark)
			assert_memory_equal(out + kept, IDEM_ESC_TRUNC, mark);
		/* As much as fits: the next unit would not have left room for the mark. */
		for (size_t next = kept + 1; next <= flen; next++) {
			if (unit_boundary(full, next)) {
				assert_true(next + mark > outlen - 1);
				break;
			}
		}
	}
}

static void test_truncation(void **state)
{
	(void)state;
	check_cuts(S("key\x1b[2J'\xe2\x80\xae\xe6\x97\xa5\xc3\xa9\\\xc2\x9b\x80z\xf0\x9f\x98\x80"),
	           0);
	check_cuts(S("key\x1b[2J'\xe2\x80\xae\xe6\x97\xa5\xc3\xa9\\\xc2\x9b\x80z\xf0\x9f\x98\x80"),
	           IDEM_ESC_QUOTE);
	check_cuts(S("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"), 0);
	check_cuts(S("\x00\x01\x02"), 0);
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		if (!(cases[i].flags & (IDEM_ESC_JSON | IDEM_ESC_KEEP_BACKSLASH)))
			check_cuts(cases[i].in, cases[i].len, cases[i].flags);
	}
}

static void test_str(void **state)
{
	char out[32];

	(void)state;
	assert_string_equal(idem_esc_str(out, sizeof(out), "a'b\n", IDEM_ESC_QUOTE), "a\\'b\\x0a");
	assert_string_equal(idem_esc_str(out, sizeof(out), NULL, 0), "(null)");
	assert_string_equal(idem_esc_str(out, 8, "0123456789", 0), "0123...");
	assert_string_equal(idem_esc_str(out, 1, "0123456789", 0), "");
	assert_string_equal(idem_esc_str(out, 3, "0123456789", 0), "..");
	assert_int_equal(idem_esc(NULL, 0, "a\x1b", 2, 0), 5);
	assert_int_equal(idem_esc(out, 4, "a\x1b", 2, 0), 5); /* cut: 5 >= 4 */
	assert_string_equal(out, "...");
	assert_int_equal(idem_esc(out, sizeof(out), NULL, 0, 0), 0);
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_no_raw_controls),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_str),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
