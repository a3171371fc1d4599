/*
 * Unit tests for idem_common (buffers, UTF-8, errors) and the SQLSTATE classification.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "idem_common.h"
#include "idem_pg.h"

static void test_buf(void **state)
{
	struct idem_buf b = { 0 };

	(void)state;
	assert_int_equal(idem_buf_append_str(&b, "abc"), IDEM_OK);
	assert_int_equal(idem_buf_append(&b, "\0d", 2), IDEM_OK);
	assert_int_equal(b.len, 5);
	assert_int_equal(b.data[5], '\0');
	assert_int_equal(idem_buf_printf(&b, "-%d-", 42), IDEM_OK);
	assert_memory_equal(b.data, "abc\0d-42-", 9);
	idem_buf_reset(&b);
	assert_int_equal(b.len, 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(idem_buf_append_str(&b, "0123456789"), IDEM_OK);
	assert_int_equal(b.len, 10000);
	assert_int_equal(b.data[10000], '\0');
	idem_buf_done(&b);
	idem_buf_done(&b); /* twice is fine */
}

static void test_utf8(void **state)
{
	(void)state;
	assert_true(idem_utf8_valid("", 0));
	assert_true(idem_utf8_valid("plain", 5));
	assert_true(idem_utf8_valid("\xc3\xa9t\xc3\xa9", 5)); /* été */
	assert_true(idem_utf8_valid("\xe2\x82\xac", 3));      /* € */
	assert_true(idem_utf8_valid("\xf0\x9f\x92\xb3", 4));  /* U+1F4B3 */
	assert_false(idem_utf8_valid("a\0b", 3));             /* NUL */
	assert_false(idem_utf8_valid("\xff", 1));             /* invalid byte */
	assert_false(idem_utf8_valid("\xc3", 1));             /* truncated */
	assert_false(idem_utf8_valid("\xc0\xaf", 2));         /* overlong '/' */
	assert_false(idem_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
	assert_false(idem_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
	assert_false(idem_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	assert_false(idem_utf8_valid("\xe2\x82", 2));         /* truncated */
	assert_false(idem_utf8_valid("\x80", 1));             /* lone continuation */
}

static void test_error_set(void **state)
{
	idem_error err;

	(void)state;
	memset(&err, 'x', sizeof(err));
	assert_int_equal(idem_error_set(&err, IDEM_ERR_KEY, "field '%s' missing", "a"),
	                 IDEM_ERR_KEY);
	assert_int_equal(err.code, IDEM_ERR_KEY);
	assert_string_equal(err.msg, "field 'a' missing");
	assert_string_equal(err.sqlstate, "");
	assert_int_equal(idem_error_set(NULL, IDEM_ERR_IO, "ignored"), IDEM_ERR_IO);
}

static void test_pgarray(void **state)
{
	struct idem_buf a = { 0 };

	(void)state;
	assert_int_equal(idem_pgarray_open(&a), IDEM_OK);
	assert_int_equal(idem_pgarray_close(&a), IDEM_OK);
	assert_string_equal(a.data, "{}");
	assert_int_equal(idem_pgarray_open(&a), IDEM_OK);
	assert_int_equal(idem_pgarray_add(&a, "plain", 5, false), IDEM_OK);
	assert_int_equal(idem_pgarray_add(&a, "q\"uo\\te", 7, false), IDEM_OK);
	assert_int_equal(idem_pgarray_add(&a, NULL, 0, true), IDEM_OK);
	assert_int_equal(idem_pgarray_add(&a, "", 0, false), IDEM_OK);
	assert_int_equal(idem_pgarray_add(&a, "'; DROP TABLE x; --,{}", 22, false), IDEM_OK);
	assert_int_equal(idem_pgarray_close(&a), IDEM_OK);
	assert_string_equal(a.data,
	                    "{\"plain\",\"q\\\"uo\\\\te\",NULL,\"\",\"'; DROP TABLE x; --,{}\"}");
	idem_buf_done(&a);
}

static void test_duration(void **state)
{
	int64_t v = -1;

	(void)state;
	assert_true(idem_duration_parse("0", &v));
	assert_int_equal(v, 0);
	assert_true(idem_duration_parse("3600", &v));
	assert_int_equal(v, 3600);
	assert_true(idem_duration_parse("45s", &v));
	assert_int_equal(v, 45);
	assert_true(idem_duration_parse("90m", &v));
	assert_int_equal(v, 5400);
	assert_true(idem_duration_parse("12h", &v));
	assert_int_equal(v, 43200);
	assert_true(idem_duration_parse("30d", &v));
	assert_int_equal(v, 2592000);
	v = 7;
	assert_false(idem_duration_parse("", &v));
	assert_false(idem_duration_parse("d", &v));
	assert_false(idem_duration_parse("-1d", &v));
	assert_false(idem_duration_parse("1w", &v));
	assert_false(idem_duration_parse("1dd", &v));
	assert_false(idem_duration_parse("1 d", &v));
	assert_false(idem_duration_parse("99999999999999999999", &v));
	assert_false(idem_duration_parse("999999999999999999d", &v));
	assert_int_equal(v, 7); /* untouched on failure */
}

static void test_int_parse(void **state)
{
	int64_t v = 7;

	(void)state;
	assert_true(idem_int_parse("0", 0, 10, &v));
	assert_int_equal(v, 0);
	assert_true(idem_int_parse("10", 0, 10, &v));
	assert_int_equal(v, 10);
	assert_true(idem_int_parse("-1", -1, 10, &v));
	assert_int_equal(v, -1);
	assert_true(idem_int_parse("007", 0, 10, &v));
	assert_int_equal(v, 7);
	assert_true(idem_int_parse("9223372036854775807", INT64_MIN, INT64_MAX, &v));
	assert_true(v == INT64_MAX);
	assert_true(idem_int_parse("-9223372036854775808", INT64_MIN, INT64_MAX, &v));
	assert_true(v == INT64_MIN);
	v = 7;
	/* What strtoll() would have read as 0 or as a prefix. */
	assert_false(idem_int_parse("x", 0, 10, &v));
	assert_false(idem_int_parse("", 0, 10, &v));
	assert_false(idem_int_parse("-", 0, 10, &v));
	assert_false(idem_int_parse("3x", 0, 10, &v));
	assert_false(idem_int_parse(" 3", 0, 10, &v));
	assert_false(idem_int_parse("3 ", 0, 10, &v));
	assert_false(idem_int_parse("+3", 0, 10, &v));
	assert_false(idem_int_parse("0x10", 0, 100, &v));
	assert_false(idem_int_parse("1e3", 0, 10000, &v));
	/* Out of range, of the caller's or of int64_t. */
	assert_false(idem_int_parse("11", 0, 10, &v));
	assert_false(idem_int_parse("-1", 0, 10, &v));
	assert_false(idem_int_parse("9223372036854775808", INT64_MIN, INT64_MAX, &v));
	assert_false(idem_int_parse("-9223372036854775809", INT64_MIN, INT64_MAX, &v));
	assert_false(idem_int_parse("99999999999999999999", INT64_MIN, INT64_MAX, &v));
	assert_int_equal(v, 7); /* untouched on failure */
}

/* A wait on a condition from idem_cond_init() ends at its idem_cond_deadline(), on the
 * monotonic clock: not before it (a deadline read on another clock could end it at once or
 * never). */
static void test_cond_deadline(void **state)
{
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cv;
	struct timespec until;
	int64_t t0, t1;
	int e;

	(void)state;
	assert_int_equal(idem_cond_init(&cv), 0);
	t0 = idem_mono_ms();
	until = idem_cond_deadline(50);
	pthread_mutex_lock(&mu);
	do
		e = pthread_cond_timedwait(&cv, &mu, &until);
	while (e == 0);
	pthread_mutex_unlock(&mu);
	t1 = idem_mono_ms();
	assert_int_equal(e, ETIMEDOUT);
	assert_true(t1 - t0 >= 49); /* ms rounding of both readings */
	assert_true(idem_mono_us() / 1000 >= t1);
	pthread_cond_destroy(&cv);
}

static void test_classify(void **state)
{
	(void)state;
	/* No answer: the connection failed. */
	assert_int_equal(idem_pg_classify(NULL), IDEM_PG_TRANSIENT);
	assert_int_equal(idem_pg_classify(""), IDEM_PG_TRANSIENT);
	assert_int_equal(idem_pg_classify("08006"), IDEM_PG_TRANSIENT); /* connection failure */
	assert_int_equal(idem_pg_classify("40001"), IDEM_PG_TRANSIENT); /* serialization */
	assert_int_equal(idem_pg_classify("40P01"), IDEM_PG_TRANSIENT); /* deadlock */
	assert_int_equal(idem_pg_classify("55P03"), IDEM_PG_TRANSIENT); /* lock not available */
	assert_int_equal(idem_pg_classify("57014"), IDEM_PG_TRANSIENT); /* query canceled */
	assert_int_equal(idem_pg_classify("57P01"), IDEM_PG_TRANSIENT); /* admin shutdown */
	assert_int_equal(idem_pg_classify("53300"), IDEM_PG_TRANSIENT); /* too many connections */
	assert_int_equal(idem_pg_classify("22P02"), IDEM_PG_MESSAGE);   /* invalid text repr. */
	assert_int_equal(idem_pg_classify("22021"), IDEM_PG_MESSAGE);   /* bad encoding */
	assert_int_equal(idem_pg_classify("23505"), IDEM_PG_MESSAGE);   /* unique violation */
	assert_int_equal(idem_pg_classify("23502"), IDEM_PG_MESSAGE);   /* not null */
	assert_int_equal(idem_pg_classify("P0001"), IDEM_PG_MESSAGE);   /* RAISE */
	assert_int_equal(idem_pg_classify("42P01"), IDEM_PG_BROKEN);    /* undefined table */
	assert_int_equal(idem_pg_classify("42883"), IDEM_PG_BROKEN);    /* undefined function */
	assert_int_equal(idem_pg_classify("42601"), IDEM_PG_BROKEN);    /* syntax error */
	assert_int_equal(idem_pg_classify("XX000"), IDEM_PG_BROKEN);    /* unexpected */
	assert_int_equal(idem_pg_classify("40002"), IDEM_PG_BROKEN);    /* not a retry class */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buf),           cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_error_set),     cmocka_unit_test(test_pgarray),
		cmocka_unit_test(test_duration),      cmocka_unit_test(test_int_parse),
		cmocka_unit_test(test_cond_deadline), cmocka_unit_test(test_classify),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
