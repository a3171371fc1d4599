/*
 * Unit tests for idem_trace: which traceparent values are read (the W3C rules, each refusal
 * on its own), the tracestate passed on, idemd's span id and the traceparent it passes on; and
 * the message-level reading (idem_field_trace()): one traceparent header or none, repeated
 * tracestate headers joined.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "idem_field.h"
#include "idem_trace.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static bool parses(const char *s)
{
	struct idem_trace t;

	return idem_trace_parse(s, strlen(s), &t);
}

static void test_parse(void **state)
{
	struct idem_trace t;

	(void)state;
	assert_true(idem_trace_parse(TP, strlen(TP), &t));
	assert_string_equal(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
	assert_string_equal(t.parent_id, "00f067aa0ba902b7");
	assert_string_equal(t.flags, "01");
	/* Not sampled is as good. */
	assert_true(parses("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
	/* A later version is read by version 00's layout, and may carry more after a '-'. */
	assert_true(parses("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	assert_true(parses("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-next"));
}

static void test_refused(void **state)
{
	static const char *const bad[] = {
		"",
		/* one short, one long (version 00 is exactly 55) */
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
		/* version ff is invalid; a later version must continue with '-' */
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
		/* uppercase hex */
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		/* all-zero trace id or parent id */
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		/* separators, non-hex */
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
		"'; DROP TABLE idem.outbox; --                          ",
	};
	struct idem_trace t;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (parses(bad[i]))
			fail_msg("traceparent '%s' was read", bad[i]);
	}
	/* A NUL byte inside: the bytes, not the C string, are what is read. */
	assert_false(idem_trace_parse("00-4bf92f3577b34da6a3ce929d0e0e4736\0"
	                              "00f067aa0ba902b7-01",
	                              55, &t));
	assert_false(idem_trace_parse(NULL, 0, &t));
}

static void test_tracestate(void **state)
{
	char longest[IDEM_TRACESTATE_MAX + 2];

	(void)state;
	assert_true(idem_tracestate_ok("congo=t61rcWkgMzE", 17));
	assert_true(idem_tracestate_ok("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 39));
	assert_false(idem_tracestate_ok("", 0));
	assert_false(idem_tracestate_ok("a=b\nc=d", 7));
	assert_false(idem_tracestate_ok("a=\xc3\xa9", 4));
	memset(longest, 'a', sizeof(longest));
	assert_true(idem_tracestate_ok(longest, IDEM_TRACESTATE_MAX));
	assert_false(idem_tracestate_ok(longest, IDEM_TRACESTATE_MAX + 1));
}

/* The span id: 16 lowercase hex, the same for one message and consumer, else different. */
static void test_span(void **state)
{
	char a[17], b[17], c[17], d[17], e[17];

	(void)state;
	idem_trace_span("payments", "orders", 3, 1234, a);
	idem_trace_span("payments", "orders", 3, 1234, b);
	idem_trace_span("payments", "orders", 3, 1235, c);
	idem_trace_span("shipping", "orders", 3, 1234, d);
	idem_trace_span("payments", "orders", 4, 1234, e);
	assert_int_equal(strlen(a), 16);
	assert_int_equal(strspn(a, "0123456789abcdef"), 16);
	assert_string_equal(a, b);
	assert_string_not_equal(a, c);
	assert_string_not_equal(a, d);
	assert_string_not_equal(a, e);
	/* "1" "23:4" and "12" "3:4" are different positions: the parts are separated. */
	idem_trace_span("p", "t1", 23, 4, a);
	idem_trace_span("p", "t", 123, 4, b);
	assert_string_not_equal(a, b);
}

static void test_child(void **state)
{
	struct idem_trace t;
	char out[IDEM_TRACEPARENT_LEN + 1];

	(void)state;
	assert_true(parses(TP));
	assert_true(idem_trace_parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-more",
	                             60, &t));
	idem_trace_child(&t, "1122334455667788", out);
	/* Version 00, the trace and its flags kept, idemd's span the parent; readable again. */
	assert_string_equal(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-1122334455667788-09");
	assert_true(parses(out));
}

static struct idem_msgview view(const struct idem_header *h, size_t n)
{
	return (struct idem_msgview){ .consumer = "payments",
		                      .topic = "orders",
		                      .partition = 2,
		                      .offset = 77,
		                      .timestamp_ms = -1,
		                      .headers = h,
		                      .n_headers = n };
}

static void test_message(void **state)
{
	char span[17], want[IDEM_TRACEPARENT_LEN + 1];
	struct idem_header one[] = {
		{ "tracestate", "rojo=1", 6 },
		{ "traceparent", TP, strlen(TP) },
		{ "tracestate", "congo=2", 7 },
	};
	struct idem_header two[] = {
		{ "traceparent", TP, strlen(TP) },
		{ "traceparent", TP, strlen(TP) },
	};
	struct idem_header bad[] = {
		{ "traceparent", "00-xyz", 6 },
		{ "tracestate", "rojo=1", 6 },
	};
	struct idem_header ctl[] = {
		{ "traceparent", TP, strlen(TP) },
		{ "tracestate", "rojo=1\r\nX-Forged: 1", 19 },
	};
	struct idem_msgview m = view(one, 3);
	struct idem_msgtrace t;

	(void)state;
	snprintf(want, sizeof(want), "00-4bf92f3577b34da6a3ce929d0e0e4736-");
	idem_trace_span("payments", "orders", 2, 77, span);
	strcat(want, span);
	strcat(want, "-01");
	idem_field_trace(&m, &t);
	assert_true(t.has);
	assert_string_equal(t.traceparent, want);
	assert_string_equal(t.tracestate, "rojo=1,congo=2");
	/* Two traceparent headers: none can be trusted, the message has no trace context. */
	m = view(two, 2);
	idem_field_trace(&m, &t);
	assert_false(t.has);
	/* A malformed one: none either, and its tracestate is not passed on alone. */
	m = view(bad, 2);
	idem_field_trace(&m, &t);
	assert_false(t.has);
	assert_string_equal(t.tracestate, "");
	/* A tracestate with control bytes is not passed on; the traceparent still is. */
	m = view(ctl, 2);
	idem_field_trace(&m, &t);
	assert_true(t.has);
	assert_string_equal(t.tracestate, "");
	/* No headers at all. */
	m = view(NULL, 0);
	idem_field_trace(&m, &t);
	assert_false(t.has);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),      cmocka_unit_test(test_refused),
		cmocka_unit_test(test_tracestate), cmocka_unit_test(test_span),
		cmocka_unit_test(test_child),      cmocka_unit_test(test_message),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
