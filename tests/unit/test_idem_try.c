/*
 * Unit tests for idem_try: the message file format of `idemctl try` (idem_try_parse()). Good
 * input gives exactly the bytes it says; each kind of malformed input is refused with an error
 * that names the file, the line and the field, and leaves the messages read before untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "idem_try.h"

static void parse_ok(const char *text, struct idem_try_msgs *msgs)
{
	idem_error err = { 0 };

	if (idem_try_parse("m.txt", text, strlen(text), msgs, &err) != IDEM_OK)
		fail_msg("refused: %s", err.msg);
}

static void assert_bytes(const unsigned char *p, size_t len, const char *want, size_t want_len)
{
	assert_non_null(p);
	assert_int_equal(len, want_len);
	assert_memory_equal(p, want, want_len);
}

static void test_full_message(void **state)
{
	struct idem_try_msgs msgs = { 0 };
	const struct idem_try_msg *m;

	(void)state;
	parse_ok("# a payment\n"
	         "topic: payments\n"
	         "partition: 3\r\n"
	         "offset: 42\n"
	         "timestamp: 1700000000000\n"
	         "\n"
	         "key:   acct-1\n"
	         "header: tenant=t1\n"
	         "header: flag\n"
	         "header-hex: bin=00ff\n"
	         "header-base64: b64=aGk=\n"
	         "header: eq=a=b\n"
	         "value: {\"payment_id\": \"p1\", \"amount\": 5}\n",
	         &msgs);
	assert_int_equal(msgs.n, 1);
	m = &msgs.v[0];
	assert_string_equal(m->topic, "payments");
	assert_int_equal(m->partition, 3);
	assert_int_equal(m->offset, 42);
	assert_int_equal(m->timestamp_ms, 1700000000000);
	assert_int_equal(m->line, 2);
	assert_bytes(m->key, m->key_len, "acct-1", 6);
	assert_bytes(m->value, m->value_len, "{\"payment_id\": \"p1\", \"amount\": 5}", 33);
	assert_int_equal(m->n_hdrs, 5);
	assert_string_equal(m->hdrs[0].name, "tenant");
	assert_bytes(m->hdrs[0].value, m->hdrs[0].len, "t1", 2);
	assert_string_equal(m->hdrs[1].name, "flag");
	assert_null(m->hdrs[1].value);
	assert_string_equal(m->hdrs[2].name, "bin");
	assert_bytes(m->hdrs[2].value, m->hdrs[2].len, "\x00\xff", 2);
	assert_bytes(m->hdrs[3].value, m->hdrs[3].len, "hi", 2);
	assert_string_equal(m->hdrs[4].name, "eq");
	assert_bytes(m->hdrs[4].value, m->hdrs[4].len, "a=b", 3);
	idem_try_msgs_done(&msgs);
}

static void test_defaults_and_several(void **state)
{
	struct idem_try_msgs msgs = { 0 };

	(void)state;
	parse_ok("value: a\n---\n\n# second\nkey-hex: 00 01\nvalue:\n---\nvalue-base64: QUJD\n",
	         &msgs);
	assert_int_equal(msgs.n, 3);
	assert_null(msgs.v[0].topic);
	assert_int_equal(msgs.v[0].partition, -1);
	assert_int_equal(msgs.v[0].offset, -1);
	assert_int_equal(msgs.v[0].timestamp_ms, -1);
	assert_null(msgs.v[0].key);
	assert_int_equal(msgs.v[0].n_hdrs, 0);
	assert_bytes(msgs.v[1].key, msgs.v[1].key_len, "\x00\x01", 2);
	assert_int_equal(msgs.v[1].line, 5);
	/* An empty value is a value of no bytes, not a missing one. */
	assert_non_null(msgs.v[1].value);
	assert_int_equal(msgs.v[1].value_len, 0);
	assert_bytes(msgs.v[2].value, msgs.v[2].value_len, "ABC", 3);
	assert_null(msgs.v[2].key);
	/* A second file appends. */
	parse_ok("value: d\n", &msgs);
	assert_int_equal(msgs.n, 4);
	/* No value line at all: a tombstone. */
	parse_ok("key: k\n", &msgs);
	assert_null(msgs.v[4].value);
	idem_try_msgs_done(&msgs);
}

static void test_heredoc(void **state)
{
	struct idem_try_msgs msgs = { 0 };

	(void)state;
	parse_ok("value: <<END\n{\n  \"id\": \"x\"\n}\nEND\nkey-base64: <<EOF\nQUJD\nREVG\nEOF\n",
	         &msgs);
	assert_int_equal(msgs.n, 1);
	assert_bytes(msgs.v[0].value, msgs.v[0].value_len, "{\n  \"id\": \"x\"\n}", 15);
	assert_bytes(msgs.v[0].key, msgs.v[0].key_len, "ABCDEF", 6);
	idem_try_msgs_done(&msgs);
}

static void test_refused(void **state)
{
	static const struct {
		const char *text, *error;
	} cases[] = {
		{ "vaule: x\n", "m.txt:1: error: unknown field 'vaule'" },
		{ "value: x\njust text\n", "m.txt:2: error: 'just text' is not 'FIELD: VALUE'" },
		{ "value: x\nvalue: y\n",
		  "m.txt:2: error: 'value': given twice in the message that starts at line 1" },
		{ "key: x\nkey-hex: 00\n",
		  "m.txt:2: error: 'key-hex': given twice in the message that starts at line 1" },
		{ "partition: x\n",
		  "m.txt:1: error: 'partition': 'x' is not a whole number from 0 to 2147483647" },
		{ "partition: -1\n", "m.txt:1: error: 'partition': '-1' is not a whole number" },
		{ "partition: 2147483648\n", "m.txt:1: error: 'partition': '2147483648' is not" },
		{ "offset: 1x\n", "m.txt:1: error: 'offset': '1x' is not a whole number" },
		{ "timestamp:\n", "m.txt:1: error: 'timestamp': '' is not a whole number" },
		{ "value-hex: 0g\n", "m.txt:1: error: 'value-hex': 'g' is not a hex digit" },
		{ "value-hex: 012\n", "m.txt:1: error: 'value-hex': an odd number of hex digits" },
		{ "value-base64: QQ=A\n",
		  "m.txt:1: error: 'value-base64': 'A' is not a base64 character here" },
		{ "value-base64: Q\n", "m.txt:1: error: 'value-base64': not whole base64" },
		{ "value-base64: a$\n", "m.txt:1: error: 'value-base64': '$' is not a base64" },
		{ "header: =v\n", "m.txt:1: error: 'header': a header needs a name" },
		{ "header-hex: name\n", "m.txt:1: error: 'header-hex': NAME=VALUE expected" },
		{ "topic:\n", "m.txt:1: error: 'topic': a topic name is needed" },
		{ "value: x\n---\n---\nvalue: y\n",
		  "m.txt:3: error: no field before '---' (an empty message)" },
		{ "key: k\nvalue: <<END\nabc\nEN\n",
		  "m.txt:2: error: 'value': '<<END' is not closed ('END' alone on a line) before the end" },
		{ "value: <<\n", "m.txt:1: error: 'value': '<<' needs a word" },
		{ "# only a comment\n\n", "m.txt: error: no message in it" },
		{ "", "m.txt: error: no message in it" },
	};

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		struct idem_try_msgs msgs = { 0 };
		idem_error err = { 0 };

		parse_ok("value: before\n", &msgs);
		if (idem_try_parse("m.txt", cases[i].text, strlen(cases[i].text), &msgs, &err) ==
		    IDEM_OK)
			fail_msg("accepted: %s", cases[i].text);
		assert_int_equal(err.code, IDEM_ERR_INVALID);
		if (strncmp(err.msg, cases[i].error, strlen(cases[i].error)) != 0)
			fail_msg("for %s: got '%s', want '%s...'", cases[i].text, err.msg,
			         cases[i].error);
		/* What earlier files gave is kept, nothing of the refused one. */
		assert_int_equal(msgs.n, 1);
		assert_bytes(msgs.v[0].value, msgs.v[0].value_len, "before", 6);
		idem_try_msgs_done(&msgs);
	}
}

static void test_outcome_names(void **state)
{
	(void)state;
	assert_string_equal(idem_try_outcome_str(IDEM_TRY_APPLY), "apply");
	assert_string_equal(idem_try_outcome_str(IDEM_TRY_DUPLICATE), "duplicate");
	assert_string_equal(idem_try_outcome_str(IDEM_TRY_QUARANTINE), "quarantine");
	assert_string_equal(idem_try_outcome_str(IDEM_TRY_HANDLER_FAILED), "handler_failed");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_message),  cmocka_unit_test(test_defaults_and_several),
		cmocka_unit_test(test_heredoc),       cmocka_unit_test(test_refused),
		cmocka_unit_test(test_outcome_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
