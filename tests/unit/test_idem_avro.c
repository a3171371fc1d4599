/*
 * test_idem_avro.c - Avro in the Confluent wire format: the header, schemas and their logical
 * types, the bounds and depth check (where it fails and what it says), and the text of every
 * type read through pointers. Datums are encoded here by hand, byte by byte.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_avro.h"
#include "idem_limits.h"
/* cmocka.h needs the headers above. */
#include <cmocka.h>

/* lib/idem_avro.c, IDEM_TESTABLE */
idem_status idem__avro_decimal_text(struct idem_buf *out, const uint8_t *b, size_t n, int precision,
                                    int scale);

/* An Avro binary encoder for the tests. */
struct enc {
	uint8_t *b;
	size_t n, cap;
};

static void put_raw(struct enc *e, const void *p, size_t n)
{
	if (e->n + n > e->cap) {
		e->cap = (e->n + n) * 2 + 64;
		e->b = realloc(e->b, e->cap);
		assert_non_null(e->b);
	}
	memcpy(e->b + e->n, p, n);
	e->n += n;
}

static void put_byte(struct enc *e, uint8_t c)
{
	put_raw(e, &c, 1);
}

static void put_long(struct enc *e, int64_t v)
{
	uint64_t u = ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0);

	while (u & ~(uint64_t)0x7f) {
		put_byte(e, (uint8_t)(u | 0x80));
		u >>= 7;
	}
	put_byte(e, (uint8_t)u);
}

static void put_bytes(struct enc *e, const void *p, size_t n)
{
	put_long(e, (int64_t)n);
	put_raw(e, p, n);
}

static void put_str(struct enc *e, const char *s)
{
	put_bytes(e, s, strlen(s));
}

static void put_float(struct enc *e, float f)
{
	uint32_t u;
	uint8_t b[4];

	memcpy(&u, &f, 4);
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(u >> (8 * i));
	put_raw(e, b, 4);
}

static void put_double(struct enc *e, double d)
{
	uint64_t u;
	uint8_t b[8];

	memcpy(&u, &d, 8);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(u >> (8 * i));
	put_raw(e, b, 8);
}

static void enc_done(struct enc *e)
{
	free(e->b);
	memset(e, 0, sizeof(*e));
}

static idem_avro_schema *schema_of(const char *json)
{
	idem_avro_schema *s = NULL;
	idem_error err = { 0 };
	idem_status r = idem_avro_schema_new(json, strlen(json), &s, &err);

	if (r != IDEM_OK)
		print_error("schema: %s\n", err.msg);
	assert_int_equal(r, IDEM_OK);
	return s;
}

static void schema_fails(const char *json, const char *want)
{
	idem_avro_schema *s = NULL;
	idem_error err = { 0 };

	assert_int_equal(idem_avro_schema_new(json, strlen(json), &s, &err), IDEM_ERR_INVALID);
	assert_null(s);
	if (strstr(err.msg, want) == NULL)
		print_error("got '%s', want '%s'\n", err.msg, want);
	assert_non_null(strstr(err.msg, want));
}

static void decode_ok(idem_avro_dec *dec, const idem_avro_schema *s, const struct enc *e)
{
	idem_error err = { 0 };
	idem_status r = idem_avro_decode(dec, s, 7, IDEM_AVRO_HEADER_BYTES, e->b, e->n, &err);

	if (r != IDEM_OK)
		print_error("decode: %s\n", err.msg);
	assert_int_equal(r, IDEM_OK);
}

static void decode_fails(idem_avro_dec *dec, const idem_avro_schema *s, const struct enc *e,
                         const char *want)
{
	idem_error err = { 0 };

	assert_int_equal(idem_avro_decode(dec, s, 7, IDEM_AVRO_HEADER_BYTES, e->b, e->n, &err),
	                 IDEM_ERR_KEY);
	assert_string_equal(err.msg, want);
}

static void text_is(const idem_avro_dec *dec, const char *ptr, const char *want)
{
	struct idem_buf out = { 0 };
	const char *absent = NULL;
	idem_error err = { 0 };
	idem_status r = idem_avro_read(dec, ptr, false, &out, &absent, &err);

	if (r != IDEM_OK)
		print_error("read '%s': %s\n", ptr, err.msg);
	assert_int_equal(r, IDEM_OK);
	if (absent != NULL)
		print_error("read '%s': %s\n", ptr, absent);
	assert_null(absent);
	assert_non_null(out.data);
	assert_string_equal(out.data, want);
	assert_int_equal(out.len, strlen(want));
	idem_buf_done(&out);
}

/* Business keys read with scalar = true: the same text for scalars. */
static void key_is(const idem_avro_dec *dec, const char *ptr, const char *want)
{
	struct idem_buf out = { 0 };
	const char *absent = NULL;
	idem_error err = { 0 };

	assert_int_equal(idem_avro_read(dec, ptr, true, &out, &absent, &err), IDEM_OK);
	assert_null(absent);
	assert_string_equal(out.data, want);
	idem_buf_done(&out);
}

static void absent_is(const idem_avro_dec *dec, const char *ptr, const char *why)
{
	struct idem_buf out = { 0 };
	const char *absent = NULL;
	idem_error err = { 0 };

	assert_int_equal(idem_avro_read(dec, ptr, false, &out, &absent, &err), IDEM_OK);
	assert_non_null(absent);
	assert_string_equal(absent, why);
	assert_int_equal(out.len, 0);
	idem_buf_done(&out);
}

static void read_fails(const idem_avro_dec *dec, const char *ptr, bool scalar, const char *want)
{
	struct idem_buf out = { 0 };
	const char *absent = NULL;
	idem_error err = { 0 };

	assert_int_equal(idem_avro_read(dec, ptr, scalar, &out, &absent, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg, want);
	assert_int_equal(out.len, 0);
	idem_buf_done(&out);
}

/*
 * The header.
 */

static void test_frame(void **state)
{
	static const uint8_t ok[] = { 0, 0, 0, 0, 7, 0x02, 0x61 };
	static const uint8_t max[] = { 0, 0x7f, 0xff, 0xff, 0xff };
	static const uint8_t magic1[] = { 1, 0, 0, 0, 7, 0 };
	static const uint8_t big[] = { 0, 0x80, 0, 0, 0, 0 };
	const void *body;
	size_t len;
	int32_t id;
	idem_error err;

	(void)state;
	assert_int_equal(idem_avro_frame(ok, sizeof(ok), &id, &body, &len, &err), IDEM_OK);
	assert_int_equal(id, 7);
	assert_ptr_equal(body, ok + 5);
	assert_int_equal(len, 2);
	assert_int_equal(idem_avro_frame(max, sizeof(max), &id, &body, &len, &err), IDEM_OK);
	assert_int_equal(id, INT32_MAX);
	assert_int_equal(len, 0);

	assert_int_equal(idem_avro_frame(ok, 3, &id, &body, &len, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg, "value is 3 bytes, shorter than the 5-byte Confluent header");
	assert_int_equal(idem_avro_frame(NULL, 0, &id, &body, &len, &err), IDEM_ERR_KEY);
	assert_int_equal(idem_avro_frame(magic1, sizeof(magic1), &id, &body, &len, &err),
	                 IDEM_ERR_KEY);
	assert_string_equal(err.msg, "value starts with byte 1, not the Confluent magic byte 0");
	assert_int_equal(idem_avro_frame(big, sizeof(big), &id, &body, &len, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg, "schema id 2147483648 is beyond 2^31-1");
}

/*
 * Every type and logical type.
 */

static const char all_types[] =
        "{\"type\":\"record\",\"name\":\"T\",\"namespace\":\"test\",\"fields\":["
        "{\"name\":\"s\",\"type\":\"string\"},"
        "{\"name\":\"u\",\"type\":{\"type\":\"string\",\"logicalType\":\"uuid\"}},"
        "{\"name\":\"i\",\"type\":\"int\"},"
        "{\"name\":\"l\",\"type\":\"long\"},"
        "{\"name\":\"f\",\"type\":\"float\"},"
        "{\"name\":\"d\",\"type\":\"double\"},"
        "{\"name\":\"b\",\"type\":\"boolean\"},"
        "{\"name\":\"y\",\"type\":\"bytes\"},"
        "{\"name\":\"x\",\"type\":{\"type\":\"fixed\",\"name\":\"F3\",\"size\":3}},"
        "{\"name\":\"e\",\"type\":{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"RED\",\"GREEN\"]}},"
        "{\"name\":\"n\",\"type\":\"null\"},"
        "{\"name\":\"dec\",\"type\":{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":10,\"scale\":2}},"
        "{\"name\":\"decf\",\"type\":{\"type\":\"fixed\",\"name\":\"D4\",\"size\":4,\"logicalType\":\"decimal\",\"precision\":9,\"scale\":4}},"
        "{\"name\":\"dt\",\"type\":{\"type\":\"int\",\"logicalType\":\"date\"}},"
        "{\"name\":\"tm\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
        "{\"name\":\"tu\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-micros\"}},"
        "{\"name\":\"x2\",\"type\":\"test.F3\"},"
        "{\"name\":\"e2\",\"type\":\"E\"}"
        "]}";

struct all_values {
	const char *s;
	int32_t i;
	int64_t l;
	float f;
	double d;
	bool b;
	int64_t dec;  /* unscaled, as 2 bytes two's complement */
	int32_t decf; /* unscaled, 4 bytes */
	int32_t dt;
	int64_t tm, tu;
	int e;
};

static void put_all(struct enc *e, const struct all_values *v)
{
	static const uint8_t y[] = { 0x00, 0x0a, 0xff };
	uint8_t d2[2] = { (uint8_t)(v->dec >> 8), (uint8_t)v->dec };
	uint8_t d4[4] = { (uint8_t)(v->decf >> 24), (uint8_t)(v->decf >> 16),
		          (uint8_t)(v->decf >> 8), (uint8_t)v->decf };

	put_str(e, v->s);
	put_str(e, "123e4567-e89b-12d3-a456-426614174000");
	put_long(e, v->i);
	put_long(e, v->l);
	put_float(e, v->f);
	put_double(e, v->d);
	put_byte(e, v->b);
	put_bytes(e, y, sizeof(y));
	put_raw(e, "abc", 3);
	put_long(e, v->e);
	/* null: nothing */
	put_bytes(e, d2, sizeof(d2));
	put_raw(e, d4, sizeof(d4));
	put_long(e, v->dt);
	put_long(e, v->tm);
	put_long(e, v->tu);
	put_raw(e, "\x01\x02\x03", 3);
	put_long(e, 0);
}

static void test_all_types(void **state)
{
	idem_avro_schema *s = schema_of(all_types);
	idem_avro_dec *dec = idem_avro_dec_new();
	struct all_values v = {
		.s = "pay-1",
		.i = -42,
		.l = INT64_MIN,
		.f = 0.1f,
		.d = 0.1,
		.b = true,
		.dec = -5,
		.decf = 123456789,
		.dt = 19844,
		.tm = -1,
		.tu = 1714566896789123,
		.e = 1,
	};
	struct enc e = { 0 };

	(void)state;
	assert_non_null(dec);
	put_all(&e, &v);
	decode_ok(dec, s, &e);
	text_is(dec, "/s", "pay-1");
	text_is(dec, "/u", "123e4567-e89b-12d3-a456-426614174000");
	text_is(dec, "/i", "-42");
	text_is(dec, "/l", "-9223372036854775808");
	text_is(dec, "/f", "0.1");
	text_is(dec, "/d", "0.1");
	text_is(dec, "/b", "true");
	text_is(dec, "/y", "\\x000aff");
	text_is(dec, "/x", "\\x616263");
	text_is(dec, "/e", "GREEN");
	absent_is(dec, "/n", "is null");
	text_is(dec, "/dec", "-0.05");
	text_is(dec, "/decf", "12345.6789");
	text_is(dec, "/dt", "2024-05-01");
	text_is(dec, "/tm", "1969-12-31T23:59:59.999Z");
	text_is(dec, "/tu", "2024-05-01T12:34:56.789123Z");
	text_is(dec, "/x2", "\\x010203");
	text_is(dec, "/e2", "RED");
	key_is(dec, "/s", "pay-1");
	key_is(dec, "/dec", "-0.05");
	text_is(dec, "",
	        "{\"s\":\"pay-1\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\",\"i\":-42,"
	        "\"l\":-9223372036854775808,\"f\":0.1,\"d\":0.1,\"b\":true,\"y\":\"\\\\x000aff\","
	        "\"x\":\"\\\\x616263\",\"e\":\"GREEN\",\"n\":null,\"dec\":\"-0.05\","
	        "\"decf\":\"12345.6789\",\"dt\":\"2024-05-01\",\"tm\":\"1969-12-31T23:59:59.999Z\","
	        "\"tu\":\"2024-05-01T12:34:56.789123Z\",\"x2\":\"\\\\x010203\",\"e2\":\"RED\"}");
	read_fails(dec, "", true, "is a record, not a scalar");
	absent_is(dec, "/nope", "not found in value");
	absent_is(dec, "/s/x", "not found in value");

	/* Other values of the same fields, decoded into the same reused value. */
	v = (struct all_values){ .s = "",
		                 .i = INT32_MAX,
		                 .l = 0,
		                 .f = -0.0f,
		                 .d = 1e300,
		                 .b = false,
		                 .dec = 0,
		                 .decf = -1,
		                 .dt = -1,
		                 .tm = 0,
		                 .tu = -1,
		                 .e = 0 };
	enc_done(&e);
	put_all(&e, &v);
	decode_ok(dec, s, &e);
	text_is(dec, "/s", "");
	text_is(dec, "/i", "2147483647");
	text_is(dec, "/l", "0");
	text_is(dec, "/f", "-0");
	text_is(dec, "/d", "1e+300");
	text_is(dec, "/b", "false");
	text_is(dec, "/dec", "0.00");
	text_is(dec, "/decf", "-0.0001");
	text_is(dec, "/dt", "1969-12-31");
	text_is(dec, "/tm", "1970-01-01T00:00:00.000Z");
	text_is(dec, "/tu", "1969-12-31T23:59:59.999999Z");
	text_is(dec, "/e", "RED");

	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

/* A one-field record of type @type holding @put's encoding, read as text. */
static void one_field(const char *type, void (*put)(struct enc *, const void *), const void *arg,
                      const char *want, const char *want_json)
{
	char json[512];
	char whole[256];
	idem_avro_schema *s;
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };

	snprintf(json, sizeof(json),
	         "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"v\",\"type\":%s}]}",
	         type);
	s = schema_of(json);
	put(&e, arg);
	decode_ok(dec, s, &e);
	text_is(dec, "/v", want);
	snprintf(whole, sizeof(whole), "{\"v\":%s}", want_json);
	text_is(dec, "", whole);
	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

static void put_float_arg(struct enc *e, const void *arg)
{
	put_float(e, *(const float *)arg);
}

static void put_double_arg(struct enc *e, const void *arg)
{
	put_double(e, *(const double *)arg);
}

static void put_long_arg(struct enc *e, const void *arg)
{
	put_long(e, *(const int64_t *)arg);
}

static void test_reals(void **state)
{
	static const struct {
		float f;
		const char *want, *json;
	} floats[] = {
		{ 0.1f, "0.1", "0.1" },
		{ 1.0f, "1", "1" },
		{ 16777216.0f, "16777216", "16777216" },
		{ 3.4028235e38f, "3.4028235e+38", "3.4028235e+38" },
		{ 1e-45f, "1e-45", "1e-45" },
		{ 1.17549435e-38f, "1.1754944e-38", "1.1754944e-38" },
		{ -0.0f, "-0", "-0" },
	};
	static const struct {
		double d;
		const char *want, *json;
	} doubles[] = {
		{ 0.1, "0.1", "0.1" },
		{ 1e300, "1e+300", "1e+300" },
		{ 1.0 / 3, "0.3333333333333333", "0.3333333333333333" },
		{ 0.1 + 0.2, "0.30000000000000004", "0.30000000000000004" },
		{ -2.5, "-2.5", "-2.5" },
		{ 123456789012345680.0, "1.2345678901234568e+17", "1.2345678901234568e+17" },
		{ 5e-324, "5e-324", "5e-324" },
		{ 2.2250738585072014e-308, "2.2250738585072014e-308", "2.2250738585072014e-308" },
	};
	float fs[] = { NAN, INFINITY, -INFINITY };
	double ds[] = { NAN, INFINITY, -INFINITY };
	static const char *const words[] = { "NaN", "Infinity", "-Infinity" };
	static const char *const jwords[] = { "\"NaN\"", "\"Infinity\"", "\"-Infinity\"" };

	(void)state;
	for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++)
		one_field("\"float\"", put_float_arg, &floats[i].f, floats[i].want, floats[i].json);
	for (size_t i = 0; i < sizeof(doubles) / sizeof(doubles[0]); i++)
		one_field("\"double\"", put_double_arg, &doubles[i].d, doubles[i].want,
		          doubles[i].json);
	for (size_t i = 0; i < 3; i++) {
		one_field("\"float\"", put_float_arg, &fs[i], words[i], jwords[i]);
		one_field("\"double\"", put_double_arg, &ds[i], words[i], jwords[i]);
	}
}

static void test_dates_and_timestamps(void **state)
{
	static const struct {
		int64_t days;
		const char *want;
	} dates[] = {
		{ 0, "1970-01-01" },        { -1, "1969-12-31" },      { 11016, "2000-02-29" },
		{ -25508, "1900-03-01" },   { -719162, "0001-01-01" }, { -719528, "0000-01-01" },
		{ -719529, "-0001-12-31" }, { 2932896, "9999-12-31" }, { 2932897, "10000-01-01" },
	};
	static const struct {
		const char *logical;
		int64_t t;
		const char *want;
	} stamps[] = {
		{ "timestamp-millis", 0, "1970-01-01T00:00:00.000Z" },
		{ "timestamp-millis", 1, "1970-01-01T00:00:00.001Z" },
		{ "timestamp-millis", -1000, "1969-12-31T23:59:59.000Z" },
		{ "timestamp-millis", -1001, "1969-12-31T23:59:58.999Z" },
		{ "timestamp-millis", -14182940000, "1969-07-20T20:17:40.000Z" },
		{ "timestamp-millis", 1714566896789, "2024-05-01T12:34:56.789Z" },
		{ "timestamp-micros", 1714566896789123, "2024-05-01T12:34:56.789123Z" },
		{ "timestamp-micros", -1, "1969-12-31T23:59:59.999999Z" },
		{ "timestamp-micros", INT64_MIN, "-290308-12-21T19:59:05.224192Z" },
		{ "timestamp-micros", INT64_MAX, "294247-01-10T04:00:54.775807Z" },
		/* Other logical types of long are longs. */
		{ "local-timestamp-millis", 5, "5" },
	};
	char type[128], json[160];

	(void)state;
	for (size_t i = 0; i < sizeof(dates) / sizeof(dates[0]); i++) {
		snprintf(json, sizeof(json), "\"%s\"", dates[i].want);
		one_field("{\"type\":\"int\",\"logicalType\":\"date\"}", put_long_arg,
		          &dates[i].days, dates[i].want, json);
	}
	for (size_t i = 0; i < sizeof(stamps) / sizeof(stamps[0]); i++) {
		snprintf(type, sizeof(type), "{\"type\":\"long\",\"logicalType\":\"%s\"}",
		         stamps[i].logical);
		if (strncmp(stamps[i].logical, "timestamp", 9) == 0)
			snprintf(json, sizeof(json), "\"%s\"", stamps[i].want);
		else
			snprintf(json, sizeof(json), "%s", stamps[i].want);
		one_field(type, put_long_arg, &stamps[i].t, stamps[i].want, json);
	}
}

static void decimal_is(const uint8_t *b, size_t n, int precision, int scale, const char *want)
{
	struct idem_buf out = { 0 };

	assert_int_equal(idem__avro_decimal_text(&out, b, n, precision, scale), IDEM_OK);
	assert_string_equal(out.data, want);
	idem_buf_done(&out);
}

static void test_decimals(void **state)
{
	static const uint8_t big[20] = {
		0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
	};
	static const uint8_t small_neg[20] = { 0x80 };
	static const uint8_t five[] = { 0x05 }, minus5[] = { 0xfb }, zero[] = { 0x00 };
	static const uint8_t padded[] = { 0xff, 0xff, 0xff, 0x85 }; /* -123, sign-extended */
	static const uint8_t v12345[] = { 0x30, 0x39 }, v128[] = { 0x00, 0x80 };
	static const uint8_t m128[] = { 0x80 };
	uint8_t many[500];
	struct idem_buf out = { 0 };
	idem_avro_schema *s;
	idem_avro_dec *dec;
	struct enc e = { 0 };

	(void)state;
	decimal_is(five, 1, 10, 2, "0.05");
	decimal_is(minus5, 1, 10, 2, "-0.05");
	decimal_is(zero, 1, 10, 2, "0.00");
	decimal_is(zero, 1, 10, 0, "0");
	decimal_is(NULL, 0, 10, 3, "0.000");
	decimal_is(v12345, 2, 10, 0, "12345");
	decimal_is(v12345, 2, 10, 4, "1.2345");
	decimal_is(v12345, 2, 10, 5, "0.12345");
	decimal_is(v12345, 2, 10, 7, "0.0012345");
	decimal_is(v128, 2, 3, 0, "128");
	decimal_is(m128, 1, 3, 1, "-12.8");
	decimal_is(padded, 4, 3, 0, "-123");
	decimal_is(big, 20, 48, 0, "730750818665451459101842416358141509827966271487");
	decimal_is(big, 20, 48, 4, "73075081866545145910184241635814150982796627.1487");
	decimal_is(small_neg, 20, 48, 2, "-7307508186654514591018424163581415098279662714.88");
	/* More digits than the precision: the value breaks its schema. */
	assert_int_equal(idem__avro_decimal_text(&out, v12345, 2, 4, 0), IDEM_ERR_KEY);
	assert_int_equal(idem__avro_decimal_text(&out, big, 20, 47, 0), IDEM_ERR_KEY);
	memset(many, 0x11, sizeof(many));
	assert_int_equal(idem__avro_decimal_text(&out, many, sizeof(many), 1000, 0), IDEM_ERR_KEY);
	assert_int_equal(out.len, 0);
	/* Long ones within the precision. */
	memset(many, 0, sizeof(many));
	many[sizeof(many) - 1] = 7;
	decimal_is(many, sizeof(many), 5, 2, "0.07");
	memset(many, 0xff, sizeof(many));
	decimal_is(many, sizeof(many), 5, 0, "-1");
	memset(many, 0x11, 200);
	assert_int_equal(idem__avro_decimal_text(&out, many, 200, 1000, 0), IDEM_OK);
	assert_int_equal(out.len, 481);
	idem_buf_done(&out);

	/* Through a datum: a 20-byte value, and one beyond its precision. */
	s = schema_of("{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":48,"
	              "\"scale\":2}");
	dec = idem_avro_dec_new();
	put_bytes(&e, big, sizeof(big));
	decode_ok(dec, s, &e);
	text_is(dec, "", "7307508186654514591018424163581415098279662714.87");
	idem_avro_schema_unref(s);
	s = schema_of("{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":4}");
	enc_done(&e);
	put_bytes(&e, v12345, sizeof(v12345));
	decode_ok(dec, s, &e);
	read_fails(dec, "", false, "a decimal has more digits than its precision 4");
	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

/*
 * Unions, nesting, arrays, maps.
 */

static const char order_schema[] =
        "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\",\"fields\":["
        "{\"name\":\"id\",\"type\":\"string\"},"
        "{\"name\":\"note\",\"type\":[\"null\",\"string\"],\"default\":null},"
        "{\"name\":\"customer\",\"type\":{\"type\":\"record\",\"name\":\"Customer\",\"fields\":["
        "  {\"name\":\"name\",\"type\":\"string\"},"
        "  {\"name\":\"address\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"Address\","
        "    \"fields\":[{\"name\":\"city\",\"type\":\"string\"}]}]}]}},"
        "{\"name\":\"items\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
        "  \"name\":\"Item\",\"fields\":[{\"name\":\"qty\",\"type\":\"int\"},"
        "  {\"name\":\"sku\",\"type\":\"string\"}]}}},"
        "{\"name\":\"attrs\",\"type\":{\"type\":\"map\",\"values\":\"long\"}}"
        "]}";

static void put_order_head(struct enc *e, bool note, bool address)
{
	put_str(e, "o-1");
	if (note) {
		put_long(e, 1);
		put_str(e, "fragile");
	} else {
		put_long(e, 0);
	}
	put_str(e, "Ada");
	if (address) {
		put_long(e, 1);
		put_str(e, "Paris");
	} else {
		put_long(e, 0);
	}
}

static void put_items(struct enc *e)
{
	put_long(e, 2);
	put_long(e, 1);
	put_str(e, "A-1");
	put_long(e, 3);
	put_str(e, "B-2");
	put_long(e, 0);
}

static void test_nested(void **state)
{
	idem_avro_schema *s = schema_of(order_schema);
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };

	(void)state;
	put_order_head(&e, true, true);
	put_items(&e);
	put_long(&e, 3); /* attrs */
	put_str(&e, "weight");
	put_long(&e, 12);
	put_str(&e, "height");
	put_long(&e, -3);
	put_str(&e, "a/b~c");
	put_long(&e, 9);
	put_long(&e, 0);
	decode_ok(dec, s, &e);

	text_is(dec, "/note", "fragile");
	text_is(dec, "/customer/name", "Ada");
	text_is(dec, "/customer/address/city", "Paris");
	text_is(dec, "/customer/address", "{\"city\":\"Paris\"}");
	text_is(dec, "/customer", "{\"name\":\"Ada\",\"address\":{\"city\":\"Paris\"}}");
	text_is(dec, "/items/0/sku", "A-1");
	text_is(dec, "/items/1/qty", "3");
	text_is(dec, "/items", "[{\"qty\":1,\"sku\":\"A-1\"},{\"qty\":3,\"sku\":\"B-2\"}]");
	text_is(dec, "/items/1", "{\"qty\":3,\"sku\":\"B-2\"}");
	text_is(dec, "/attrs/weight", "12");
	text_is(dec, "/attrs/height", "-3");
	text_is(dec, "/attrs", "{\"a/b~c\":9,\"height\":-3,\"weight\":12}");
	text_is(dec, "/attrs/a~1b~0c", "9");
	text_is(dec, "",
	        "{\"id\":\"o-1\",\"note\":\"fragile\",\"customer\":{\"name\":\"Ada\",\"address\":"
	        "{\"city\":\"Paris\"}},\"items\":[{\"qty\":1,\"sku\":\"A-1\"},{\"qty\":3,"
	        "\"sku\":\"B-2\"}],\"attrs\":{\"a/b~c\":9,\"height\":-3,\"weight\":12}}");
	key_is(dec, "/items/1/sku", "B-2");

	absent_is(dec, "/items/2", "not found in value");
	absent_is(dec, "/items/01", "not found in value");
	absent_is(dec, "/items/-", "not found in value");
	absent_is(dec, "/items/x", "not found in value");
	absent_is(dec, "/items/99999999999999999999999", "not found in value");
	absent_is(dec, "/attrs/depth", "not found in value");
	absent_is(dec, "/customer/age", "not found in value");
	absent_is(dec, "/attrs/a/b~0c", "not found in value");
	absent_is(dec, "/attrs/a~0b~1c", "not found in value");
	absent_is(dec, "/id/0", "not found in value");
	read_fails(dec, "/items", true, "is an array, not a scalar");
	read_fails(dec, "/attrs", true, "is a map, not a scalar");
	read_fails(dec, "/customer/address", true, "is a record, not a scalar");

	/* The null branches: absent, and so is everything below them. */
	enc_done(&e);
	put_order_head(&e, false, false);
	put_long(&e, 0); /* no items */
	put_long(&e, 0); /* no attrs */
	decode_ok(dec, s, &e);
	absent_is(dec, "/note", "is null");
	absent_is(dec, "/customer/address", "is null");
	absent_is(dec, "/customer/address/city", "is null");
	text_is(dec, "/items", "[]");
	text_is(dec, "/attrs", "{}");
	absent_is(dec, "/items/0", "not found in value");
	text_is(dec, "/customer", "{\"name\":\"Ada\",\"address\":null}");

	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

/* Map entries in any order, in blocks with byte sizes or without: the same JSON text. */
static void test_map_order(void **state)
{
	idem_avro_schema *s =
	        schema_of("{\"type\":\"map\",\"values\":{\"type\":\"map\",\"values\":\"string\"}}");
	idem_avro_dec *dec = idem_avro_dec_new();
	static const char *const keys[] = { "b", "a", "ab", "", "\xc3\xa9", "B" };
	static const char want[] =
	        "{\"\":{\"k\":\"\"},\"B\":{\"k\":\"B\"},\"a\":{\"k\":\"a\"},\"ab\":{\"k\":\"ab\"},"
	        "\"b\":{\"k\":\"b\"},\"\xc3\xa9\":{\"k\":\"\xc3\xa9\"}}";
	struct enc e = { 0 }, inner = { 0 };

	(void)state;
	/* In the order above, one block. */
	put_long(&e, 6);
	for (size_t i = 0; i < 6; i++) {
		put_str(&e, keys[i]);
		put_long(&e, 1);
		put_str(&e, "k");
		put_str(&e, keys[i]);
		put_long(&e, 0);
	}
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	text_is(dec, "", want);
	text_is(dec, "/ab/k", "ab");
	text_is(dec, "/\xc3\xa9", "{\"k\":\"\xc3\xa9\"}");
	text_is(dec, "/", "{\"k\":\"\"}");
	absent_is(dec, "/c", "not found in value");

	/* Reversed, in blocks of two with negative counts and byte sizes. */
	enc_done(&e);
	for (size_t i = 6; i > 0; i -= 2) {
		for (size_t k = i; k > i - 2; k--) {
			put_str(&inner, keys[k - 1]);
			put_long(&inner, -1);
			put_long(&inner, 2 + (int64_t)strlen(keys[k - 1]) + 1);
			put_str(&inner, "k");
			put_str(&inner, keys[k - 1]);
			put_long(&inner, 0);
		}
		put_long(&e, -2);
		put_long(&e, (int64_t)inner.n);
		put_raw(&e, inner.b, inner.n);
		inner.n = 0;
	}
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	text_is(dec, "", want);

	enc_done(&e);
	enc_done(&inner);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

static void test_json_strings(void **state)
{
	idem_avro_schema *s = schema_of("{\"type\":\"array\",\"items\":\"string\"}");
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };
	static const char bad[] = "ok\xc3\x28";
	struct idem_buf out = { 0 };
	const char *absent = NULL;

	(void)state;
	put_long(&e, 3);
	put_str(&e, "q\"b\\s/\n\x01\x1f\x7f");
	put_str(&e, "caf\xc3\xa9 \xf0\x9f\x92\xb3");
	put_bytes(&e, "a\0b", 3);
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	text_is(dec, "",
	        "[\"q\\\"b\\\\s/\\u000a\\u0001\\u001f\x7f\",\"caf\xc3\xa9 \xf0\x9f\x92\xb3\","
	        "\"a\\u0000b\"]");
	text_is(dec, "/0", "q\"b\\s/\n\x01\x1f\x7f");
	/* A NUL in a string is kept as a scalar (the caller decides what to do with it). */
	assert_int_equal(idem_avro_read(dec, "/2", true, &out, &absent, NULL), IDEM_OK);
	assert_int_equal(out.len, 3);
	assert_memory_equal(out.data, "a\0b", 3);
	idem_buf_done(&out);

	/* Not UTF-8: as it is for a scalar, an error in JSON text. */
	enc_done(&e);
	put_long(&e, 1);
	put_str(&e, bad);
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	text_is(dec, "/0", bad);
	read_fails(dec, "", false, "a string in it is not valid UTF-8");

	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

static void test_root_union(void **state)
{
	idem_avro_schema *s = schema_of("[\"null\",\"string\",\"long\"]");
	idem_avro_dec *dec = idem_avro_dec_new();
	static const uint8_t null_branch[] = { 0x00 };
	static const uint8_t str_branch[] = { 0x02, 0x04, 'h', 'i' };
	static const uint8_t long_branch[] = { 0x04, 0x01 };
	idem_error err;

	(void)state;
	assert_int_equal(idem_avro_decode(dec, s, 1, 5, null_branch, 1, &err), IDEM_OK);
	absent_is(dec, "", "is null");
	absent_is(dec, "/x", "is null");
	assert_int_equal(idem_avro_decode(dec, s, 1, 5, str_branch, 4, &err), IDEM_OK);
	text_is(dec, "", "hi");
	key_is(dec, "", "hi");
	absent_is(dec, "/x", "not found in value");
	assert_int_equal(idem_avro_decode(dec, s, 1, 5, long_branch, 2, &err), IDEM_OK);
	text_is(dec, "", "-1");
	idem_avro_dec_reset(dec);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

/*
 * What the bounds and depth check refuses, and what it says.
 */

static const char list_schema[] =
        "{\"type\":\"record\",\"name\":\"Node\",\"fields\":[{\"name\":\"v\",\"type\":\"int\"},"
        "{\"name\":\"next\",\"type\":[\"null\",\"Node\"]}]}";

static void test_recursion(void **state)
{
	idem_avro_schema *s = schema_of(list_schema);
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };
	char ptr[512] = "";
	idem_error err;

	(void)state;
	/* Each node is two levels (record, union): 32 nodes make 64 levels with the last null. */
	for (int i = 0; i < 32; i++) {
		put_long(&e, i);
		put_long(&e, i < 31 ? 1 : 0);
	}
	decode_ok(dec, s, &e);
	for (int i = 0; i < 31; i++)
		strcat(ptr, "/next");
	strcat(ptr, "/v");
	text_is(dec, ptr, "31");
	text_is(dec, "/next/next/next/next/v", "4");
	absent_is(dec,
	          "/next/next/next/next/next/next/next/next/next/next/next/next/next/next/"
	          "next/next/next/next/next/next/next/next/next/next/next/next/next/next/"
	          "next/next/next/next",
	          "is null");

	/* 33 nodes: too deep. */
	enc_done(&e);
	for (int i = 0; i < 33; i++) {
		put_long(&e, i);
		put_long(&e, i < 32 ? 1 : 0);
	}
	assert_int_equal(idem_avro_decode(dec, s, 7, 5, e.b, e.n, &err), IDEM_ERR_KEY);
	assert_non_null(strstr(err.msg, "): nested deeper than 64 levels"));
	assert_non_null(strstr(err.msg, "schema id 7: at byte 69 (/next/next/"));

	/* 10,000 nodes: refused by the check, avro-c never recurses that deep. */
	enc_done(&e);
	for (int i = 0; i < 10000; i++) {
		put_long(&e, 0);
		put_long(&e, i < 9999 ? 1 : 0);
	}
	assert_int_equal(idem_avro_decode(dec, s, 7, 5, e.b, e.n, &err), IDEM_ERR_KEY);
	assert_non_null(strstr(err.msg, "nested deeper than 64 levels"));

	/* Arrays nest too: 65 levels of arrays. */
	idem_avro_schema_unref(s);
	s = schema_of("{\"type\":\"record\",\"name\":\"A\",\"fields\":[{\"name\":\"a\",\"type\":"
	              "{\"type\":\"array\",\"items\":\"A\"}}]}");
	enc_done(&e);
	for (int i = 0; i < 40; i++)
		put_long(&e, 1);
	put_long(&e, 0);
	for (int i = 0; i < 40; i++)
		put_long(&e, 0);
	assert_int_equal(idem_avro_decode(dec, s, 7, 5, e.b, e.n, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg,
	                    "schema id 7: at byte 37 (/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/"
	                    "a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/a/0/"
	                    "a/0/a/0/a/0/a/0/a/0): nested deeper than 64 levels");

	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

static void test_bad_datums(void **state)
{
	idem_avro_schema *order = schema_of(order_schema);
	idem_avro_schema *s;
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };

	(void)state;
	/* The header's example: the third item's sku says 1000 bytes; the value has 24. */
	s = schema_of(
	        "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"items\",\"type\":"
	        "{\"type\":\"array\",\"items\":{\"type\":\"record\",\"name\":\"I\",\"fields\":["
	        "{\"name\":\"qty\",\"type\":\"int\"},{\"name\":\"sku\",\"type\":\"string\"}]}}}]}");
	put_long(&e, 3);
	put_long(&e, 1);
	put_str(&e, "abcd");
	put_long(&e, 2);
	put_str(&e, "efgh");
	put_long(&e, 3);
	put_long(&e, 1000);
	put_raw(&e, "xyz", 3);
	assert_int_equal(e.n, 19);
	decode_fails(dec, s, &e,
	             "schema id 7: at byte 19 (/items/2/sku): string length 1000 runs past the end "
	             "of the value (24 bytes)");
	idem_avro_schema_unref(s);

	/* Trailing bytes. */
	enc_done(&e);
	put_order_head(&e, false, false);
	put_long(&e, 0);
	put_long(&e, 0);
	put_raw(&e, "\x01\x02\x03\x04", 4);
	decode_fails(dec, order, &e, "schema id 7: at byte 17: 4 bytes left after the datum");

	/* A union index out of range. */
	enc_done(&e);
	put_str(&e, "o-1");
	put_long(&e, 2);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 9 (/note): union index 2 is out of range (2 branches)");
	enc_done(&e);
	put_str(&e, "o-1");
	put_long(&e, -1);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 9 (/note): union index -1 is out of range (2 branches)");

	/* A string cut short, a negative length, a varint cut short, the value empty. */
	enc_done(&e);
	put_long(&e, 5);
	put_raw(&e, "o-", 2);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 5 (/id): string length 5 runs past the end of the value "
	             "(8 bytes)");
	enc_done(&e);
	put_long(&e, -3);
	decode_fails(dec, order, &e, "schema id 7: at byte 5 (/id): string length -3 is negative");
	enc_done(&e);
	put_byte(&e, 0x80);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 5 (/id): string length runs past the end of the value "
	             "(6 bytes)");
	enc_done(&e);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 5 (/id): string length runs past the end of the value "
	             "(5 bytes)");

	/* A map key with a NUL byte; an item of the array cut short. */
	enc_done(&e);
	put_order_head(&e, false, false);
	put_long(&e, 0);
	put_long(&e, 1);
	put_bytes(&e, "a\0b", 3);
	put_long(&e, 1);
	put_long(&e, 0);
	put_long(&e, 0);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 17 (/attrs/a?b): map key contains a NUL byte");
	enc_done(&e);
	put_order_head(&e, false, false);
	put_long(&e, 2);
	put_long(&e, 1);
	put_str(&e, "A-1");
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 21 (/items/1/qty): int runs past the end of the value "
	             "(21 bytes)");

	/* Array block counts: INT64_MIN, more items than bytes, a bad block size. */
	enc_done(&e);
	put_order_head(&e, false, false);
	put_long(&e, INT64_MIN);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 15 (/items): array block count -9223372036854775808 is "
	             "not valid");
	enc_done(&e);
	put_order_head(&e, false, false);
	put_long(&e, 1000000);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 15 (/items): array block of 1000000 items is more than "
	             "the value's 18 bytes can hold");
	enc_done(&e);
	put_order_head(&e, false, false);
	put_long(&e, -1);
	put_long(&e, 100);
	decode_fails(dec, order, &e,
	             "schema id 7: at byte 16 (/items): array block size 100 does not fit in the "
	             "value (18 bytes)");

	/* Arrays of nulls: many items of no bytes are refused all the same. */
	s = schema_of("{\"type\":\"array\",\"items\":\"null\"}");
	enc_done(&e);
	put_long(&e, 3);
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	text_is(dec, "", "[null,null,null]");
	absent_is(dec, "/1", "is null");
	enc_done(&e);
	put_long(&e, 1027);
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	enc_done(&e);
	put_long(&e, 1028);
	put_long(&e, 0);
	decode_fails(dec, s, &e,
	             "schema id 7: at byte 5: array block of 1028 items is more than the value's 8 "
	             "bytes can hold");
	enc_done(&e);
	put_long(&e, INT64_MAX);
	put_long(&e, 0);
	decode_fails(dec, s, &e,
	             "schema id 7: at byte 5: array block of 9223372036854775807 items is more "
	             "than the value's 16 bytes can hold");
	idem_avro_schema_unref(s);

	/* Scalars: an enum index, an int beyond 32 bits, a varint beyond 64 bits, a boolean. */
	s = schema_of(
	        "{\"type\":\"record\",\"name\":\"S\",\"fields\":[{\"name\":\"e\",\"type\":"
	        "{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"A\",\"B\"]}},"
	        "{\"name\":\"i\",\"type\":\"int\"},{\"name\":\"l\",\"type\":\"long\"},"
	        "{\"name\":\"b\",\"type\":\"boolean\"},{\"name\":\"d\",\"type\":\"double\"}]}");
	enc_done(&e);
	put_long(&e, 2);
	decode_fails(dec, s, &e,
	             "schema id 7: at byte 5 (/e): enum index 2 is out of range (2 symbols)");
	enc_done(&e);
	put_long(&e, 1);
	put_long(&e, (int64_t)INT32_MAX + 1);
	decode_fails(dec, s, &e,
	             "schema id 7: at byte 6 (/i): int 2147483648 is out of the 32-bit range");
	enc_done(&e);
	put_long(&e, 1);
	put_long(&e, 1);
	put_raw(&e, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10);
	decode_fails(dec, s, &e,
	             "schema id 7: at byte 7 (/l): long is a varint of more than 64 bits");
	enc_done(&e);
	put_long(&e, 1);
	put_long(&e, 1);
	put_raw(&e, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10); /* INT64_MIN */
	put_byte(&e, 2);
	decode_fails(dec, s, &e, "schema id 7: at byte 17 (/b): boolean byte 2 is neither 0 nor 1");
	enc_done(&e);
	put_long(&e, 1);
	put_long(&e, 1);
	put_raw(&e, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
	put_byte(&e, 1);
	put_raw(&e, "\x00\x00\x00", 3);
	decode_fails(dec, s, &e,
	             "schema id 7: at byte 18 (/d): double runs past the end of the value (21 "
	             "bytes)");
	put_raw(&e, "\x00\x00\x00\x00\x00", 5);
	decode_ok(dec, s, &e);
	text_is(dec, "/l", "-9223372036854775808");
	text_is(dec, "/d", "0");
	idem_avro_schema_unref(s);

	/* After all these, the decoder decodes as before. */
	enc_done(&e);
	put_order_head(&e, true, false);
	put_items(&e);
	put_long(&e, 0);
	decode_ok(dec, order, &e);
	text_is(dec, "/items/1/sku", "B-2");

	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(order);
}

/* Paths in messages: map keys escaped, shortened, and made printable. */
static void test_error_paths(void **state)
{
	idem_avro_schema *s = schema_of("{\"type\":\"map\",\"values\":\"int\"}");
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };
	char key[101], want[256];

	(void)state;
	memset(key, 'k', 100);
	key[100] = '\0';
	put_long(&e, 1);
	put_str(&e, key);
	put_long(&e, (int64_t)INT32_MAX + 1);
	snprintf(want, sizeof(want),
	         "schema id 7: at byte 108 (/%.64s...): int 2147483648 is out of the 32-bit range",
	         key);
	decode_fails(dec, s, &e, want);

	enc_done(&e);
	put_long(&e, 1);
	put_str(&e, "\xff~/\xc3\xa9\n");
	put_long(&e, (int64_t)INT32_MIN - 1);
	decode_fails(
	        dec, s, &e,
	        "schema id 7: at byte 13 (/?~0~1\xc3\xa9?): int -2147483649 is out of the 32-bit "
	        "range");

	/* A key that is not UTF-8: found by its bytes, refused in JSON text. */
	enc_done(&e);
	put_long(&e, 1);
	put_str(&e, "\xff");
	put_long(&e, 5);
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	text_is(dec, "/\xff", "5");
	read_fails(dec, "", false, "a string in it is not valid UTF-8");

	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

/*
 * Schemas.
 */

/* v2 adds a field with a default: the fields both have read the same. */
static void test_schema_versions(void **state)
{
	idem_avro_schema *v1 = schema_of(
	        "{\"type\":\"record\",\"name\":\"Payment\",\"fields\":["
	        "{\"name\":\"id\",\"type\":\"string\"},"
	        "{\"name\":\"amount\",\"type\":{\"type\":\"bytes\",\"logicalType\":\"decimal\","
	        "\"precision\":12,\"scale\":2}}]}");
	idem_avro_schema *v2 = schema_of(
	        "{\"type\":\"record\",\"name\":\"Payment\",\"fields\":["
	        "{\"name\":\"id\",\"type\":\"string\"},"
	        "{\"name\":\"amount\",\"type\":{\"type\":\"bytes\",\"logicalType\":\"decimal\","
	        "\"precision\":12,\"scale\":2}},"
	        "{\"name\":\"channel\",\"type\":[\"null\",\"string\"],\"default\":null}]}");
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e1 = { 0 }, e2 = { 0 };
	static const uint8_t amount[] = { 0x30, 0x39 };
	char json[64];

	(void)state;
	put_str(&e1, "pay-9");
	put_bytes(&e1, amount, 2);
	put_str(&e2, "pay-9");
	put_bytes(&e2, amount, 2);
	put_long(&e2, 1);
	put_str(&e2, "web");
	decode_ok(dec, v1, &e1);
	text_is(dec, "/id", "pay-9");
	text_is(dec, "/amount", "123.45");
	absent_is(dec, "/channel", "not found in value");
	decode_ok(dec, v2, &e2);
	text_is(dec, "/id", "pay-9");
	text_is(dec, "/amount", "123.45");
	text_is(dec, "/channel", "web");
	decode_ok(dec, v1, &e1);
	text_is(dec, "/amount", "123.45");

	/* More schemas than the decoder keeps: each still decodes (the oldest made again). */
	for (int i = 0; i < 20; i++) {
		idem_avro_schema *s;
		struct enc e = { 0 };
		char want[64];

		snprintf(json, sizeof(json), "{\"type\":\"fixed\",\"name\":\"F\",\"size\":%d}",
		         i + 1);
		s = schema_of(json);
		want[0] = '\\';
		want[1] = 'x';
		for (int k = 0; k <= i; k++) {
			put_byte(&e, (uint8_t)k);
			snprintf(want + 2 + 2 * k, 3, "%02x", k);
		}
		decode_ok(dec, s, &e);
		/* The decoder holds its own references: the caller's may go at once. */
		idem_avro_schema_unref(s);
		text_is(dec, "", want);
		enc_done(&e);
		decode_ok(dec, v2, &e2);
		text_is(dec, "/channel", "web");
	}

	enc_done(&e1);
	enc_done(&e2);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(v1);
	idem_avro_schema_unref(v2);
}

static void test_names(void **state)
{
	/* Namespaces: inherited, given, in the name; references relative and full. */
	idem_avro_schema *s = schema_of(
	        "{\"type\":\"record\",\"name\":\"Outer\",\"namespace\":\"a.b\",\"fields\":["
	        "{\"name\":\"f1\",\"type\":{\"type\":\"fixed\",\"name\":\"Id\",\"size\":2}},"
	        "{\"name\":\"f2\",\"type\":\"Id\"},"
	        "{\"name\":\"f3\",\"type\":\"a.b.Id\"},"
	        "{\"name\":\"f4\",\"type\":{\"type\":\"enum\",\"name\":\"x.y.Kind\","
	        "\"symbols\":[\"P\",\"Q\"]}},"
	        "{\"name\":\"f5\",\"type\":\"x.y.Kind\"},"
	        "{\"name\":\"f6\",\"type\":{\"type\":\"record\",\"name\":\"In\",\"namespace\":\"c\","
	        "\"fields\":[{\"name\":\"k\",\"type\":{\"type\":\"enum\",\"name\":\"Kind\","
	        "\"symbols\":[\"R\",\"S\",\"T\"]}}]}},"
	        "{\"name\":\"f7\",\"type\":\"c.Kind\"},"
	        "{\"name\":\"f8\",\"type\":{\"type\":\"array\",\"items\":\"Outer\"}}]}");
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };

	(void)state;
	put_raw(&e, "\x01\x02\x03\x04\x05\x06", 6);
	put_long(&e, 1);
	put_long(&e, 0);
	put_long(&e, 2);
	put_long(&e, 1);
	put_long(&e, 0);
	decode_ok(dec, s, &e);
	text_is(dec, "",
	        "{\"f1\":\"\\\\x0102\",\"f2\":\"\\\\x0304\",\"f3\":\"\\\\x0506\",\"f4\":\"Q\","
	        "\"f5\":\"P\",\"f6\":{\"k\":\"T\"},\"f7\":\"S\",\"f8\":[]}");
	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);
}

/* Logical type annotations that are not valid: the value is its underlying type. */
static void test_invalid_logical_types(void **state)
{
	static const struct {
		const char *type;
		const char *want;
	} cases[] = {
		{ "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":2,\"scale\":3}",
		  "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"scale\":1}", "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":\"5\"}",
		  "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":0}", "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":5,\"scale\":-1}",
		  "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":5.0}", "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"date\"}", "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"no-such-type\"}", "\\x3039" },
		{ "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":5}", "12345" },
		/* A fixed of 2 bytes holds at most 4 digits. */
		{ "{\"type\":\"fixed\",\"name\":\"F\",\"size\":2,\"logicalType\":\"decimal\","
		  "\"precision\":5}",
		  "\\x3039" },
		/* Valid, and 12345 has more digits than it allows. */
		{ "{\"type\":\"fixed\",\"name\":\"F\",\"size\":2,\"logicalType\":\"decimal\","
		  "\"precision\":4,\"scale\":4}",
		  NULL },
	};
	struct enc e = { 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char json[256];
		idem_avro_schema *s;
		idem_avro_dec *dec = idem_avro_dec_new();

		snprintf(json, sizeof(json), "%s", cases[i].type);
		s = schema_of(json);
		enc_done(&e);
		if (strstr(cases[i].type, "fixed") != NULL)
			put_raw(&e, "\x30\x39", 2);
		else
			put_bytes(&e, "\x30\x39", 2);
		decode_ok(dec, s, &e);
		print_message("case %zu: %s\n", i, cases[i].type);
		if (cases[i].want == NULL)
			read_fails(dec, "", false,
			           "a decimal has more digits than its precision 4");
		else
			text_is(dec, "", cases[i].want);
		idem_avro_dec_free(dec);
		idem_avro_schema_unref(s);
	}
	enc_done(&e);

	/* On the wrong types: an int, a string, a long as they are. */
	{
		idem_avro_schema *s = schema_of(
		        "{\"type\":\"record\",\"name\":\"W\",\"fields\":["
		        "{\"name\":\"a\",\"type\":{\"type\":\"int\",\"logicalType\":\"timestamp-millis\"}},"
		        "{\"name\":\"b\",\"type\":{\"type\":\"string\",\"logicalType\":\"date\"}},"
		        "{\"name\":\"c\",\"type\":{\"type\":\"long\",\"logicalType\":\"date\"}},"
		        "{\"name\":\"d\",\"type\":{\"type\":\"int\",\"logicalType\":\"time-millis\"}},"
		        "{\"name\":\"e\",\"type\":\"int\",\"logicalType\":\"date\"}]}");
		idem_avro_dec *dec = idem_avro_dec_new();

		put_long(&e, 5);
		put_str(&e, "x");
		put_long(&e, 6);
		put_long(&e, 7);
		put_long(&e, 8);
		decode_ok(dec, s, &e);
		text_is(dec, "", "{\"a\":5,\"b\":\"x\",\"c\":6,\"d\":7,\"e\":8}");
		enc_done(&e);
		idem_avro_dec_free(dec);
		idem_avro_schema_unref(s);
	}
}

static void test_bad_schemas(void **state)
{
	(void)state;
	schema_fails("", "schema is not valid Avro");
	schema_fails("{\"type\":\"record\"", "schema is not valid Avro");
	schema_fails("\"nosuchtype\"", "schema: no type named nosuchtype");
	schema_fails("{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\","
	             "\"type\":\"Other\"}]}",
	             "schema: no type named Other");
	schema_fails("{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[]}",
	             "schema: enum E has no symbols");
	schema_fails("{\"type\":\"fixed\",\"name\":\"F\",\"size\":0}",
	             "schema: fixed F has size 0, not between 1 and 16777216 bytes");
	schema_fails("{\"type\":\"fixed\",\"name\":\"F\",\"size\":-4}", "has size -4");
	schema_fails("{\"type\":\"fixed\",\"name\":\"F\",\"size\":100000000}",
	             "has size 100000000");
	schema_fails("{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":1001}",
	             "schema: decimal precision 1001 is beyond the limit of 1000 digits");
	schema_fails("{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\","
	             "\"type\":\"int\"},{\"name\":\"a\",\"type\":\"long\"}]}",
	             "schema: record R has two fields named a");
}

/*
 * Large schemas: named types and record fields are found by hash, so building is linear in the
 * schema's size. A search per name made each of these take minutes; the run time of these
 * tests is the check.
 */
#define MANY_FIELDS 300000
#define MANY_TYPES  (IDEM_SCHEMA_MAX_NAMED_TYPES - 1) /* and Top: exactly the bound */

/* Record Big of @n long fields f0, f1, ...; with @dup the last is named f0 again. */
static void many_fields_json(struct idem_buf *json, size_t n, bool dup)
{
	assert_int_equal(
	        idem_buf_append_str(json, "{\"type\":\"record\",\"name\":\"Big\",\"fields\":["),
	        IDEM_OK);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(idem_buf_printf(json, "%s{\"name\":\"f%zu\",\"type\":\"long\"}",
		                                 i > 0 ? "," : "", dup && i == n - 1 ? 0 : i),
		                 IDEM_OK);
	assert_int_equal(idem_buf_append_str(json, "]}"), IDEM_OK);
}

static void test_many_fields(void **state)
{
	struct idem_buf json = { 0 };
	idem_avro_schema *s;
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };

	(void)state;
	many_fields_json(&json, MANY_FIELDS, false);
	s = schema_of(json.data);
	for (size_t i = 0; i < MANY_FIELDS; i++)
		put_long(&e, (int64_t)i * 3);
	decode_ok(dec, s, &e);
	text_is(dec, "/f0", "0");
	text_is(dec, "/f150000", "450000");
	text_is(dec, "/f299999", "899997");
	absent_is(dec, "/f300000", "not found in value");
	absent_is(dec, "/f~1", "not found in value");
	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);

	idem_buf_reset(&json);
	many_fields_json(&json, MANY_FIELDS, true);
	schema_fails(json.data, "schema: record Big has two fields named f0");
	idem_buf_done(&json);
}

/*
 * Record Top defines fixed ns.N0, ns.N1, ... in fields a0, a1, ... and refers to each in
 * fields b0, b1, ..., by its name (even) or full name (odd): a search of the types before for
 * each reference was quadratic.
 */
static void many_types_json(struct idem_buf *json, size_t n, struct enc *e)
{
	assert_int_equal(idem_buf_append_str(json, "{\"type\":\"record\",\"name\":\"Top\","
	                                           "\"namespace\":\"ns\",\"fields\":["),
	                 IDEM_OK);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(
		        idem_buf_printf(
		                json,
		                "%s{\"name\":\"a%zu\",\"type\":{\"type\":\"fixed\","
		                "\"name\":\"N%zu\",\"size\":1}},{\"name\":\"b%zu\",\"type\":\"%sN%zu\"}",
		                i > 0 ? "," : "", i, i, i, i % 2 ? "ns." : "", i),
		        IDEM_OK);
		put_byte(e, (uint8_t)i);
		put_byte(e, (uint8_t)(i >> 8));
	}
	assert_int_equal(idem_buf_append_str(json, "]}"), IDEM_OK);
}

static void test_many_named_types(void **state)
{
	struct idem_buf json = { 0 };
	idem_avro_schema *s;
	idem_avro_dec *dec = idem_avro_dec_new();
	struct enc e = { 0 };

	(void)state;
	many_types_json(&json, MANY_TYPES, &e);
	s = schema_of(json.data);
	decode_ok(dec, s, &e);
	text_is(dec, "/a0", "\\x00");
	text_is(dec, "/b0", "\\x00");
	text_is(dec, "/a99998", "\\x9e"); /* 99998 = 0x1869e */
	text_is(dec, "/b99998", "\\x86");
	enc_done(&e);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(s);

	/* One past the bound, refused before avro-c reads it. */
	idem_buf_reset(&json);
	many_types_json(&json, MANY_TYPES + 1, &e);
	schema_fails(json.data,
	             "schema: named type ns.N99999 is past the bound of 100000 named types");
	enc_done(&e);
	idem_buf_done(&json);
}

/* @n arrays around a long: n + 1 levels of types. */
static void nested_arrays_json(struct idem_buf *json, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(idem_buf_append_str(json, "{\"type\":\"array\",\"items\":"),
		                 IDEM_OK);
	assert_int_equal(idem_buf_append_str(json, "\"long\""), IDEM_OK);
	for (int i = 0; i < n; i++)
		assert_int_equal(idem_buf_append_str(json, "}"), IDEM_OK);
}

/* A long with an attribute of @n nested JSON arrays: n + 1 levels of JSON, 1 of types. */
static void nested_json(struct idem_buf *json, int n)
{
	assert_int_equal(idem_buf_append_str(json, "{\"type\":\"long\",\"x\":"), IDEM_OK);
	for (int i = 0; i < n; i++)
		assert_int_equal(idem_buf_append_str(json, "["), IDEM_OK);
	for (int i = 0; i < n; i++)
		assert_int_equal(idem_buf_append_str(json, "]"), IDEM_OK);
	assert_int_equal(idem_buf_append_str(json, "}"), IDEM_OK);
}

static void *small_stack_main(void *arg)
{
	struct idem_buf *json = arg;

	idem_avro_schema_unref(schema_of(json->data));
	return NULL;
}

/* Builds the schema @json on a thread of IDEM_THREAD_STACK_BYTES / 8: the bounds leave that
 * much margin. */
static void schema_on_small_stack(struct idem_buf *json)
{
	pthread_attr_t a;
	pthread_t t;

	assert_int_equal(pthread_attr_init(&a), 0);
	assert_int_equal(pthread_attr_setstacksize(&a, IDEM_THREAD_STACK_BYTES / 8), 0);
	assert_int_equal(pthread_create(&t, &a, small_stack_main, json), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	pthread_attr_destroy(&a);
}

/*
 * The bounds of idem_limits.h, exactly at each and one past it: types nested
 * IDEM_SCHEMA_MAX_DEPTH deep, JSON nested IDEM_SCHEMA_MAX_JSON_DEPTH deep; 20,000 and 200,000
 * levels are refused as one past is, without avro-c recursing into them. A type defined twice
 * is refused before avro-c, whose error path for it leaks (LeakSanitizer checks).
 */
static void test_schema_bounds(void **state)
{
	struct idem_buf json = { 0 };
	char want[128];

	(void)state;
	nested_arrays_json(&json, IDEM_SCHEMA_MAX_DEPTH - 1);
	idem_avro_schema_unref(schema_of(json.data));
	schema_on_small_stack(&json);
	snprintf(want, sizeof(want), "schema: types nested deeper than the bound of %d levels",
	         IDEM_SCHEMA_MAX_DEPTH);
	idem_buf_reset(&json);
	nested_arrays_json(&json, IDEM_SCHEMA_MAX_DEPTH);
	schema_fails(json.data, want);

	idem_buf_reset(&json);
	nested_json(&json, IDEM_SCHEMA_MAX_JSON_DEPTH - 1);
	idem_avro_schema_unref(schema_of(json.data));
	schema_on_small_stack(&json);
	snprintf(want, sizeof(want), "schema JSON nested deeper than the bound of %d levels",
	         IDEM_SCHEMA_MAX_JSON_DEPTH);
	idem_buf_reset(&json);
	nested_json(&json, IDEM_SCHEMA_MAX_JSON_DEPTH);
	schema_fails(json.data, want);
	idem_buf_reset(&json);
	nested_arrays_json(&json, 20000);
	schema_fails(json.data, "schema JSON nested deeper than the bound of");
	idem_buf_reset(&json);
	nested_arrays_json(&json, 200000);
	schema_fails(json.data, "schema JSON nested deeper than the bound of");
	idem_buf_done(&json);

	schema_fails("{\"type\":\"record\",\"name\":\"R\",\"fields\":["
	             "{\"name\":\"a\",\"type\":{\"type\":\"fixed\",\"name\":\"F\",\"size\":1}},"
	             "{\"name\":\"b\",\"type\":{\"type\":\"fixed\",\"name\":\"F\",\"size\":2}}]}",
	             "schema: type F is defined twice");
	schema_fails(
	        "{\"type\":\"record\",\"name\":\"R\",\"fields\":["
	        "{\"name\":\"a\",\"type\":{\"type\":\"record\",\"name\":\"R\",\"fields\":[]}}]}",
	        "schema: type R is defined twice");
	/* avro-c answers an invalid name with ENOMEM, as if memory had run out: refused before. */
	schema_fails(
	        "{\"type\":\"record\",\"name\":\"R\",\"namespace\":\"x\",\"fields\":["
	        "{\"name\":\"a\",\"type\":{\"type\":\"record\",\"name\":\"x.R%\",\"fields\":[]}}]}",
	        "schema: the name of a record is not an Avro name");
	schema_fails("{\"type\":\"enum\",\"name\":\"1E\",\"symbols\":[\"A\"]}",
	             "schema: the name of a enum is not an Avro name");
	schema_fails("{\"type\":\"fixed\",\"name\":\"a.\",\"size\":1}",
	             "schema: the name of a fixed is not an Avro name");
}

static void test_refcount(void **state)
{
	idem_avro_schema *s = schema_of("\"string\"");
	idem_avro_dec *dec = idem_avro_dec_new();
	static const uint8_t body[] = { 0x06, 'a', 'b', 'c' };
	idem_error err;

	(void)state;
	assert_ptr_equal(idem_avro_schema_ref(s), s);
	idem_avro_schema_unref(s);
	assert_int_equal(idem_avro_decode(dec, s, 3, 5, body, sizeof(body), &err), IDEM_OK);
	idem_avro_schema_unref(s); /* the decoder's references keep it */
	text_is(dec, "", "abc");
	idem_avro_dec_reset(dec);
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(NULL);
	idem_avro_dec_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame),
		cmocka_unit_test(test_all_types),
		cmocka_unit_test(test_reals),
		cmocka_unit_test(test_dates_and_timestamps),
		cmocka_unit_test(test_decimals),
		cmocka_unit_test(test_nested),
		cmocka_unit_test(test_map_order),
		cmocka_unit_test(test_json_strings),
		cmocka_unit_test(test_root_union),
		cmocka_unit_test(test_recursion),
		cmocka_unit_test(test_bad_datums),
		cmocka_unit_test(test_error_paths),
		cmocka_unit_test(test_schema_versions),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_invalid_logical_types),
		cmocka_unit_test(test_bad_schemas),
		cmocka_unit_test(test_many_fields),
		cmocka_unit_test(test_many_named_types),
		cmocka_unit_test(test_schema_bounds),
		cmocka_unit_test(test_refcount),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
