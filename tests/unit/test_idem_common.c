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
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/*
 * Binary arrays, byte for byte as array_recv() reads them: one dimension, the NULL flag, the
 * element type, count and lower bound, then each element's length (-1: NULL) and bytes; an
 * empty array has no dimension. Read back with idem_pgbin_get().
 */
static void test_pgbin(void **state)
{
	static const unsigned char ints[] = {
		0, 0, 0, 1, 0,    0,    0,    0,    0,    0,    0,    20,
		0, 0, 0, 2, 0,    0,    0,    1,                            /* header */
		0, 0, 0, 8, 0,    0,    0,    0,    0,    0,    1,    2,    /* 258 */
		0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* -1 */
	};
	static const unsigned char mixed[] = {
		0,    0,    0,    1,    0,    0,    0, 1, 0, 0,
		0,    17,   0,    0,    0,    3,    0, 0, 0, 1, /* has a NULL */
		0,    0,    0,    2,    0xab, 0x01,             /* "ab01" */
		0xff, 0xff, 0xff, 0xff,                         /* NULL */
		0,    0,    0,    0,                            /* empty */
	};
	static const unsigned char empty[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 23 };
	struct idem_buf a = { 0 };
	const char *p;
	size_t n, count;
	bool null;

	(void)state;
	assert_int_equal(idem_pgbin_open(&a, IDEM_OID_INT8), IDEM_OK);
	assert_int_equal(idem_pgbin_add_int8(&a, 258), IDEM_OK);
	assert_int_equal(idem_pgbin_add_int8(&a, -1), IDEM_OK);
	idem_pgbin_close(&a);
	assert_int_equal(a.len, sizeof(ints));
	assert_memory_equal(a.data, ints, sizeof(ints));
	assert_true(idem_pgbin_get(a.data, a.len, 1, &p, &n, &null, &count));
	assert_int_equal(count, 2);
	assert_int_equal(n, 8);
	assert_memory_equal(p, ints + 36, 8);
	assert_false(idem_pgbin_get(a.data, a.len, 2, &p, &n, &null, NULL));
	assert_false(idem_pgbin_get(a.data, a.len - 1, 1, &p, &n, &null, NULL)); /* cut short */

	assert_int_equal(idem_pgbin_open(&a, IDEM_OID_BYTEA), IDEM_OK);
	assert_int_equal(idem_pgbin_add_hex(&a, "aB01", 4, false), IDEM_OK);
	assert_int_equal(idem_pgbin_add_hex(&a, NULL, 0, true), IDEM_OK);
	assert_int_equal(idem_pgbin_add(&a, "", 0, false), IDEM_OK);
	idem_pgbin_close(&a);
	assert_int_equal(a.len, sizeof(mixed));
	assert_memory_equal(a.data, mixed, sizeof(mixed));
	assert_true(idem_pgbin_get(a.data, a.len, 1, &p, &n, &null, NULL));
	assert_true(null);
	assert_true(idem_pgbin_get(a.data, a.len, 2, &p, &n, &null, NULL));
	assert_false(null);
	assert_int_equal(n, 0);
	assert_int_equal(idem_pgbin_add_hex(&a, "abc", 3, false), IDEM_ERR_INVALID);
	assert_int_equal(idem_pgbin_add_hex(&a, "zz", 2, false), IDEM_ERR_INVALID);

	assert_int_equal(idem_pgbin_open(&a, IDEM_OID_INT4), IDEM_OK);
	idem_pgbin_close(&a);
	assert_int_equal(a.len, sizeof(empty));
	assert_memory_equal(a.data, empty, sizeof(empty));
	assert_false(idem_pgbin_get(a.data, a.len, 0, &p, &n, &null, &count));
	assert_int_equal(count, 0);
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

/* Class 54 (program limit exceeded) is one message's fault: a value too large for an index or a
 * statement too complex is retried alone, then quarantined. */
static void test_classify_54(void **state)
{
	(void)state;
	assert_int_equal(idem_pg_classify("54000"), IDEM_PG_MESSAGE); /* program limit */
	assert_int_equal(idem_pg_classify("54001"), IDEM_PG_MESSAGE); /* statement too complex */
	assert_int_equal(idem_pg_classify("54011"), IDEM_PG_MESSAGE); /* too many columns */
	assert_int_equal(idem_pg_classify("54023"), IDEM_PG_MESSAGE); /* too many arguments */
}

/* Class 58 (system error: I/O, undefined file) is the server's trouble, not the message's. */
static void test_classify_58(void **state)
{
	(void)state;
	assert_int_equal(idem_pg_classify("58000"), IDEM_PG_TRANSIENT); /* system error */
	assert_int_equal(idem_pg_classify("58030"), IDEM_PG_TRANSIENT); /* io error */
	assert_int_equal(idem_pg_classify("58P01"), IDEM_PG_TRANSIENT); /* undefined file */
	assert_int_equal(idem_pg_classify("58P02"), IDEM_PG_TRANSIENT); /* duplicate file */
}

static bool needs_operator(const char *sqlstate)
{
	idem_error err = { 0 };

	err.code = IDEM_ERR_PG;
	snprintf(err.sqlstate, sizeof(err.sqlstate), "%s", sqlstate);
	return idem_pg_needs_operator(&err);
}

/* Login (28), database (3D) and schema or handler SQL (42) failures need an operator: idemd exits
 * IDEM_EXIT_CONFIG (78) on them, which the unit does not restart; nothing else does. */
static void test_needs_operator(void **state)
{
	idem_error err = { 0 };

	(void)state;
	assert_int_equal(IDEM_EXIT_CONFIG, 78);
	assert_true(needs_operator("28000"));  /* invalid authorization */
	assert_true(needs_operator("28P01"));  /* invalid password */
	assert_true(needs_operator("3D000"));  /* invalid catalog name: no such database */
	assert_true(needs_operator("42501"));  /* insufficient privilege */
	assert_true(needs_operator("42P01"));  /* undefined table */
	assert_true(needs_operator("42883"));  /* undefined function */
	assert_true(needs_operator("42601"));  /* syntax error */
	assert_false(needs_operator(""));      /* no answer: the connection failed */
	assert_false(needs_operator("08006")); /* connection failure */
	assert_false(needs_operator("53300")); /* too many connections */
	assert_false(needs_operator("57P03")); /* cannot connect now (starting up) */
	assert_false(needs_operator("58030")); /* io error */
	assert_false(needs_operator("54000")); /* program limit */
	assert_false(needs_operator("22P02")); /* one message's bad value */
	assert_false(needs_operator("3F000")); /* invalid schema name: not in the set */
	assert_false(needs_operator("XX000")); /* internal error */
	/* A configuration error needs one too, whatever its SQLSTATE; other errors never. */
	err.code = IDEM_ERR_CONFIG;
	assert_true(idem_pg_needs_operator(&err));
	err.code = IDEM_ERR_IO;
	snprintf(err.sqlstate, sizeof(err.sqlstate), "%s", "42P01");
	assert_false(idem_pg_needs_operator(&err));
}

/* A scratch directory for secret files, and the path of @name in it. */
struct secret_dir {
	char dir[64];
	char path[128];
};

static const char *secret_put(struct secret_dir *sd, const char *name, const char *text,
                              mode_t mode)
{
	int fd;

	snprintf(sd->path, sizeof(sd->path), "%s/%s", sd->dir, name);
	unlink(sd->path);
	fd = open(sd->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	/* fchmod/chmod beyond the umask: the modes under test are what the file says. */
	assert_int_equal(chmod(sd->path, mode), 0);
	return sd->path;
}

static void secret_dir_open(struct secret_dir *sd)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(sd->dir, sizeof(sd->dir), "%s/idem-secret-XXXXXX",
	         tmp != NULL && strlen(tmp) < 40 ? tmp : "/tmp");
	assert_non_null(mkdtemp(sd->dir));
}

static void secret_dir_close(struct secret_dir *sd, const char *const *names)
{
	for (; *names != NULL; names++) {
		snprintf(sd->path, sizeof(sd->path), "%s/%s", sd->dir, *names);
		unlink(sd->path);
	}
	assert_int_equal(rmdir(sd->dir), 0);
}

/* A password file open to group or others is refused, with the fix; 0600 and 0400 are read. */
static void test_secret_file_mode(void **state)
{
	static const char *const names[] = { "pw", NULL };
	struct secret_dir sd;
	idem_error err = { 0 };
	char buf[64];
	bool set = false;

	(void)state;
	secret_dir_open(&sd);
	for (int i = 0; i < 3; i++) {
		static const mode_t bad[] = { 0644, 0640, 0604 };
		const char *path = secret_put(&sd, "pw", "s3cret\n", bad[i]);

		memcpy(buf, "untouched", 10);
		assert_int_equal(
		        idem_secret_read("postgres", NULL, path, buf, sizeof(buf), &set, &err),
		        IDEM_ERR_CONFIG);
		assert_non_null(strstr(err.msg, "postgres.password_file: '"));
		assert_non_null(strstr(err.msg, "open to group or others"));
		assert_non_null(strstr(err.msg, "chmod 600"));
		assert_non_null(strstr(err.msg, "LoadCredential="));
		assert_null(strstr(err.msg, "s3cret"));
		assert_null(strstr(buf, "s3cret"));
	}
	for (int i = 0; i < 2; i++) {
		const char *path =
		        secret_put(&sd, "pw", "s3cret\r\nsecond line\n", i ? 0400 : 0600);

		set = false;
		assert_int_equal(
		        idem_secret_read("postgres", NULL, path, buf, sizeof(buf), &set, &err),
		        IDEM_OK);
		assert_true(set);
		assert_string_equal(buf, "s3cret");
	}
	idem_secret_wipe(buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
	secret_dir_close(&sd, names);
}

/* An empty file, or one whose first line is empty, is no password. */
static void test_secret_file_empty(void **state)
{
	static const char *const names[] = { "pw", NULL };
	static const char *const texts[] = { "", "\n", "\r\n", "\nlater\n" };
	struct secret_dir sd;
	idem_error err = { 0 };
	char buf[64];
	bool set;

	(void)state;
	secret_dir_open(&sd);
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(texts); i++) {
		const char *path = secret_put(&sd, "pw", texts[i], 0600);

		assert_int_equal(idem_secret_read("schema_registry", NULL, path, buf, sizeof(buf),
		                                  &set, &err),
		                 IDEM_ERR_CONFIG);
		assert_non_null(strstr(err.msg, "schema_registry.password_file: '"));
		assert_true(strstr(err.msg, "is empty") != NULL ||
		            strstr(err.msg, "starts with an empty line") != NULL);
	}
	secret_dir_close(&sd, names);
}

/* A password that does not fit is refused, never cut short; one that just fits is read. */
static void test_secret_file_overlong(void **state)
{
	static const char *const names[] = { "pw", NULL };
	struct secret_dir sd;
	idem_error err = { 0 };
	char buf[8]; /* 7 bytes and the NUL */
	bool set;

	(void)state;
	secret_dir_open(&sd);
	assert_int_equal(idem_secret_read("postgres", NULL, secret_put(&sd, "pw", "12345678", 0600),
	                                  buf, sizeof(buf), &set, &err),
	                 IDEM_ERR_CONFIG);
	assert_non_null(strstr(err.msg, "longer than 7 bytes"));
	assert_null(strstr(err.msg, "1234"));
	assert_int_equal(idem_secret_read("postgres", NULL,
	                                  secret_put(&sd, "pw", "12345678\n", 0600), buf,
	                                  sizeof(buf), &set, &err),
	                 IDEM_ERR_CONFIG);
	assert_int_equal(idem_secret_read("postgres", NULL,
	                                  secret_put(&sd, "pw", "1234567\n", 0600), buf,
	                                  sizeof(buf), &set, &err),
	                 IDEM_OK);
	assert_string_equal(buf, "1234567");
	assert_int_equal(idem_secret_read("postgres", NULL, secret_put(&sd, "pw", "1234567", 0600),
	                                  buf, sizeof(buf), &set, &err),
	                 IDEM_OK);
	assert_string_equal(buf, "1234567");
	/* The same bound for a variable. */
	setenv("IDEM_TEST_LONG_PW", "12345678", 1);
	assert_int_equal(idem_secret_read("postgres", "IDEM_TEST_LONG_PW", NULL, buf, sizeof(buf),
	                                  &set, &err),
	                 IDEM_ERR_CONFIG);
	assert_non_null(strstr(err.msg, "longer than 7 bytes"));
	unsetenv("IDEM_TEST_LONG_PW");
	secret_dir_close(&sd, names);
}

/*
 * With $CREDENTIALS_DIRECTORY (systemd's LoadCredential=), a relative name is a credential;
 * without it, a relative name that is not there says where it was looked for.
 */
static void test_secret_credentials_dir(void **state)
{
	static const char *const names[] = { "pg-password", NULL };
	struct secret_dir sd;
	idem_error err = { 0 };
	char buf[64];
	bool set = false;

	(void)state;
	secret_dir_open(&sd);
	secret_put(&sd, "pg-password", "from-credential\n", 0400);
	setenv("CREDENTIALS_DIRECTORY", sd.dir, 1);
	assert_int_equal(
	        idem_secret_read("postgres", NULL, "pg-password", buf, sizeof(buf), &set, &err),
	        IDEM_OK);
	assert_true(set);
	assert_string_equal(buf, "from-credential");
	assert_int_equal(idem_secret_get("kafka.properties.sasl.password_file", NULL, "pg-password",
	                                 buf, sizeof(buf), &set, &err),
	                 IDEM_OK);
	assert_string_equal(buf, "from-credential");
	assert_int_equal(
	        idem_secret_read("postgres", NULL, "missing", buf, sizeof(buf), &set, &err),
	        IDEM_ERR_CONFIG);
	assert_non_null(strstr(err.msg, sd.dir));
	unsetenv("CREDENTIALS_DIRECTORY");
	assert_int_equal(idem_secret_read("postgres", NULL, "idem-no-such-credential", buf,
	                                  sizeof(buf), &set, &err),
	                 IDEM_ERR_CONFIG);
	assert_non_null(strstr(err.msg, "$CREDENTIALS_DIRECTORY"));
	secret_dir_close(&sd, names);
}

/*
 * A variable leaves the environment once read (children and /proc/PID/environ never see it),
 * and later reads (a Postgres connection opened again) still get it.
 */
static void test_secret_env_taken(void **state)
{
	idem_error err = { 0 };
	char buf[64];
	bool set = false;

	(void)state;
	setenv("IDEM_TEST_PW", "hunter2", 1);
	assert_int_equal(
	        idem_secret_read("postgres", "IDEM_TEST_PW", NULL, buf, sizeof(buf), &set, &err),
	        IDEM_OK);
	assert_true(set);
	assert_string_equal(buf, "hunter2");
	assert_null(getenv("IDEM_TEST_PW"));
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(
	        idem_secret_read("postgres", "IDEM_TEST_PW", NULL, buf, sizeof(buf), &set, &err),
	        IDEM_OK);
	assert_string_equal(buf, "hunter2");

	assert_int_equal(idem_secret_read("postgres", "IDEM_TEST_UNSET_PW", NULL, buf, sizeof(buf),
	                                  &set, &err),
	                 IDEM_ERR_CONFIG);
	assert_string_equal(
	        err.msg,
	        "postgres.password_env: environment variable 'IDEM_TEST_UNSET_PW' is not set");
	setenv("IDEM_TEST_EMPTY_PW", "", 1);
	assert_int_equal(idem_secret_read("postgres", "IDEM_TEST_EMPTY_PW", NULL, buf, sizeof(buf),
	                                  &set, &err),
	                 IDEM_ERR_CONFIG);
	assert_string_equal(
	        err.msg,
	        "postgres.password_env: environment variable 'IDEM_TEST_EMPTY_PW' is empty");
	unsetenv("IDEM_TEST_EMPTY_PW");
	/* Neither setting: no password, and nothing wrong. */
	set = true;
	assert_int_equal(idem_secret_read("postgres", NULL, NULL, buf, sizeof(buf), &set, &err),
	                 IDEM_OK);
	assert_false(set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buf),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_error_set),
		cmocka_unit_test(test_pgarray),
		cmocka_unit_test(test_pgbin),
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_int_parse),
		cmocka_unit_test(test_cond_deadline),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_classify_54),
		cmocka_unit_test(test_classify_58),
		cmocka_unit_test(test_needs_operator),
		cmocka_unit_test(test_secret_file_mode),
		cmocka_unit_test(test_secret_file_empty),
		cmocka_unit_test(test_secret_file_overlong),
		cmocka_unit_test(test_secret_credentials_dir),
		cmocka_unit_test(test_secret_env_taken),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
