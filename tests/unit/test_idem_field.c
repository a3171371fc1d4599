/*
 * test_idem_field.c - field names, templates, business keys and handler parameters.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_field.h"
/* cmocka.h needs the headers above. */
#include <cmocka.h>

#define KEY_MAX 512

static struct idem_msgview msg_json(const char *value)
{
	struct idem_msgview m = {
		.topic = "payments",
		.partition = 3,
		.offset = 42,
		.timestamp_ms = -1,
		.value = value,
		.value_len = value != NULL ? strlen(value) : 0,
	};
	return m;
}

static struct idem_msgview msg_key(const void *key, size_t key_len)
{
	struct idem_msgview m = msg_json(NULL);

	m.key = key;
	m.key_len = key_len;
	return m;
}

/* Builds the key of @m from template @tpl_text; the key or error text goes to @out / @err. */
static idem_status build(const char *tpl_text, const struct idem_msgview *m, size_t max_len,
                         struct idem_buf *out, idem_error *err)
{
	struct idem_template tpl;
	struct idem_jsondoc doc;
	char errbuf[256];
	idem_status r;

	assert_int_equal(idem_template_parse(tpl_text, &tpl, errbuf, sizeof(errbuf)), IDEM_OK);
	idem_jsondoc_init(&doc);
	r = idem_key_build(&tpl, m, &doc, max_len, out, err);
	idem_jsondoc_done(&doc);
	idem_template_done(&tpl);
	return r;
}

static void assert_key(const char *tpl_text, const struct idem_msgview *m, const char *expected)
{
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	idem_status r;

	r = build(tpl_text, m, KEY_MAX, &out, &err);
	if (r != IDEM_OK)
		fail_msg("template '%s': unexpected error: %s", tpl_text, err.msg);
	assert_int_equal(out.len, strlen(expected));
	assert_string_equal(out.data, expected);
	idem_buf_done(&out);
}

static void assert_key_error(const char *tpl_text, const struct idem_msgview *m,
                             const char *expected)
{
	struct idem_buf out = { 0 };
	idem_error err = { 0 };

	assert_int_equal(build(tpl_text, m, KEY_MAX, &out, &err), IDEM_ERR_KEY);
	assert_int_equal(err.code, IDEM_ERR_KEY);
	assert_string_equal(err.msg, expected);
	idem_buf_done(&out);
}

/* Gets field @name of @m as a parameter: returns the text, or NULL for SQL NULL. */
static char *get_field(const char *name, const struct idem_msgview *m, const char *bkey,
                       size_t *ret_len)
{
	struct idem_field f;
	struct idem_jsondoc doc;
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	char errbuf[256];
	bool null = true;
	char *text = NULL;

	assert_int_equal(idem_field_parse(name, &f, errbuf, sizeof(errbuf)), IDEM_OK);
	idem_jsondoc_init(&doc);
	if (idem_field_get(&f, m, &doc, bkey, &out, &null, &err) != IDEM_OK)
		fail_msg("field '%s': unexpected error: %s", name, err.msg);
	if (!null) {
		assert_non_null(out.data);
		text = malloc(out.len + 1);
		assert_non_null(text);
		memcpy(text, out.data, out.len + 1);
		if (ret_len != NULL)
			*ret_len = out.len;
	}
	idem_buf_done(&out);
	idem_jsondoc_done(&doc);
	idem_field_done(&f);
	return text;
}

static void assert_get(const char *name, const struct idem_msgview *m, const char *expected)
{
	char *text = get_field(name, m, NULL, NULL);

	if (text == NULL)
		fail_msg("field '%s' is NULL, expected '%s'", name, expected);
	assert_string_equal(text, expected);
	free(text);
}

static void assert_get_null(const char *name, const struct idem_msgview *m)
{
	char *text = get_field(name, m, NULL, NULL);

	if (text != NULL)
		fail_msg("field '%s' is '%s', expected NULL", name, text);
}

static void assert_field_error(const char *s, const char *expected)
{
	struct idem_field f = { IDEM_FIELD_TOPIC, NULL };
	char errbuf[256] = "";

	assert_int_equal(idem_field_parse(s, &f, errbuf, sizeof(errbuf)), IDEM_ERR_INVALID);
	assert_string_equal(errbuf, expected);
	/* ret_field is written only on success. */
	assert_int_equal(f.kind, IDEM_FIELD_TOPIC);
	assert_null(f.arg);
}

static void assert_template_error(const char *s, const char *expected)
{
	struct idem_template tpl = { NULL, 7 };
	char errbuf[256] = "";

	assert_int_equal(idem_template_parse(s, &tpl, errbuf, sizeof(errbuf)), IDEM_ERR_INVALID);
	assert_string_equal(errbuf, expected);
	assert_null(tpl.parts);
	assert_int_equal(tpl.n_parts, 7);
}

static void test_field_parse_names(void **state)
{
	static const struct {
		const char *name;
		enum idem_field_kind kind;
		const char *arg;
	} cases[] = {
		{ "value", IDEM_FIELD_VALUE, NULL },
		{ "key", IDEM_FIELD_KEY, NULL },
		{ "business_key", IDEM_FIELD_BUSINESS_KEY, NULL },
		{ "topic", IDEM_FIELD_TOPIC, NULL },
		{ "partition", IDEM_FIELD_PARTITION, NULL },
		{ "offset", IDEM_FIELD_OFFSET, NULL },
		{ "timestamp", IDEM_FIELD_TIMESTAMP, NULL },
		{ "header:tenant", IDEM_FIELD_HEADER, "tenant" },
		{ "header:X-Request:Id", IDEM_FIELD_HEADER, "X-Request:Id" },
		{ "json:", IDEM_FIELD_JSON, "" },
		{ "json:/", IDEM_FIELD_JSON, "/" },
		{ "json:/order_no", IDEM_FIELD_JSON, "/order_no" },
		{ "json:/a~0b/c~1d/0", IDEM_FIELD_JSON, "/a~0b/c~1d/0" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct idem_field f;

		assert_int_equal(idem_field_parse(cases[i].name, &f, NULL, 0), IDEM_OK);
		assert_int_equal(f.kind, cases[i].kind);
		if (cases[i].arg == NULL)
			assert_null(f.arg);
		else
			assert_string_equal(f.arg, cases[i].arg);
		idem_field_done(&f);
		assert_null(f.arg);
	}
}

static void test_field_parse_errors(void **state)
{
	struct idem_field f;
	(void)state;

	assert_field_error("", "empty field name");
	assert_field_error(NULL, "empty field name");
	assert_field_error(
	        "vaule",
	        "unknown field 'vaule' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)");
	assert_field_error(
	        "Key",
	        "unknown field 'Key' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)");
	assert_field_error(
	        " key",
	        "unknown field ' key' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)");
	assert_field_error(
	        "headers:x",
	        "unknown field 'headers:x' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)");
	assert_field_error("header:", "empty header name in field 'header:'");
	assert_field_error(
	        "json:order_no",
	        "invalid JSON pointer in field 'json:order_no': must be empty or start with '/'");
	assert_field_error(
	        "json:/a~2",
	        "invalid JSON pointer in field 'json:/a~2': '~' must be followed by '0' or '1'");
	assert_field_error(
	        "json:/a~",
	        "invalid JSON pointer in field 'json:/a~': '~' must be followed by '0' or '1'");
	assert_field_error(
	        "json:/~01/~",
	        "invalid JSON pointer in field 'json:/~01/~': '~' must be followed by '0' or '1'");
	/* A NULL or tiny error buffer is fine. */
	assert_int_equal(idem_field_parse("nope", &f, NULL, 0), IDEM_ERR_INVALID);
	{
		char tiny[8];

		assert_int_equal(idem_field_parse("nope", &f, tiny, sizeof(tiny)),
		                 IDEM_ERR_INVALID);
		assert_string_equal(tiny, "unknown");
	}
	/* _done accepts NULL. */
	idem_field_done(NULL);
}

static void test_template_parse(void **state)
{
	struct idem_template tpl;
	char errbuf[256];
	(void)state;

	/* A bare field name means that field alone. */
	assert_int_equal(idem_template_parse("json:/order_no", &tpl, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(tpl.n_parts, 1);
	assert_int_equal(tpl.parts[0].kind, IDEM_FIELD_JSON);
	assert_string_equal(tpl.parts[0].arg, "/order_no");
	assert_true(idem_template_needs_json(&tpl));
	idem_template_done(&tpl);
	assert_null(tpl.parts);
	assert_int_equal(tpl.n_parts, 0);

	assert_int_equal(idem_template_parse("${json:/order_no}", &tpl, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(tpl.n_parts, 1);
	assert_int_equal(tpl.parts[0].kind, IDEM_FIELD_JSON);
	assert_string_equal(tpl.parts[0].arg, "/order_no");
	idem_template_done(&tpl);

	assert_int_equal(idem_template_parse("key", &tpl, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(tpl.n_parts, 1);
	assert_int_equal(tpl.parts[0].kind, IDEM_FIELD_KEY);
	assert_false(idem_template_needs_json(&tpl));
	idem_template_done(&tpl);

	/* Literals, "$$", a lone "$" and adjacent fields. */
	assert_int_equal(idem_template_parse("pay-$$${header:tenant}/${json:/id}${partition}-$",
	                                     &tpl, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(tpl.n_parts, 6);
	assert_int_equal(tpl.parts[0].kind, IDEM_FIELD_LITERAL);
	assert_string_equal(tpl.parts[0].arg, "pay-$");
	assert_int_equal(tpl.parts[1].kind, IDEM_FIELD_HEADER);
	assert_string_equal(tpl.parts[1].arg, "tenant");
	assert_int_equal(tpl.parts[2].kind, IDEM_FIELD_LITERAL);
	assert_string_equal(tpl.parts[2].arg, "/");
	assert_int_equal(tpl.parts[3].kind, IDEM_FIELD_JSON);
	assert_string_equal(tpl.parts[3].arg, "/id");
	assert_int_equal(tpl.parts[4].kind, IDEM_FIELD_PARTITION);
	assert_null(tpl.parts[4].arg);
	assert_int_equal(tpl.parts[5].kind, IDEM_FIELD_LITERAL);
	assert_string_equal(tpl.parts[5].arg, "-$");
	assert_true(idem_template_needs_json(&tpl));
	idem_template_done(&tpl);

	/* Many parts, to grow the parts array. */
	assert_int_equal(idem_template_parse("${key}.${topic}.${offset}.${value}.${timestamp}.",
	                                     &tpl, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(tpl.n_parts, 10);
	assert_int_equal(tpl.parts[8].kind, IDEM_FIELD_TIMESTAMP);
	assert_string_equal(tpl.parts[9].arg, ".");
	assert_false(idem_template_needs_json(&tpl));
	idem_template_done(&tpl);

	assert_false(idem_template_needs_json(NULL));
	idem_template_done(NULL);
}

static void test_template_parse_errors(void **state)
{
	(void)state;

	assert_template_error("", "business key template is empty");
	assert_template_error(NULL, "business key template is empty");
	assert_template_error("order-${json:/id",
	                      "unterminated '${' in business key template 'order-${json:/id'");
	assert_template_error("${key}-${",
	                      "unterminated '${' in business key template '${key}-${'");
	assert_template_error("${business_key}",
	                      "business key template cannot reference business_key");
	assert_template_error("x${key}${business_key}",
	                      "business key template cannot reference business_key");
	assert_template_error("business_key",
	                      "business key template cannot reference business_key");
	assert_template_error(
	        "order",
	        "business key template references no field: unknown field 'order' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)");
	assert_template_error(
	        "$$",
	        "business key template references no field: unknown field '$$' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)");
	assert_template_error(
	        "json:id",
	        "business key template references no field: invalid JSON pointer in field 'json:id': must be empty or start with '/'");
	assert_template_error("$${key}", "business key template references no field");
	assert_template_error("${}", "empty field name");
	assert_template_error(
	        "a-${vaule}",
	        "unknown field 'vaule' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)");
	assert_template_error(
	        "${json:/a~3}",
	        "invalid JSON pointer in field 'json:/a~3': '~' must be followed by '0' or '1'");
	assert_template_error("${header:}", "empty header name in field 'header:'");
}

static void test_key_fields(void **state)
{
	struct idem_header hdrs[] = {
		{ "tenant", "acme", 4 },
		{ "empty", "", 0 },
	};
	struct idem_msgview m = msg_json("{\"order_no\":\"A-17\",\"n\":5}");
	(void)state;

	m.key = "k1";
	m.key_len = 2;
	m.timestamp_ms = 1700000000123;
	m.headers = hdrs;
	m.n_headers = 2;
	assert_key("key", &m, "k1");
	assert_key("value", &m, "{\"order_no\":\"A-17\",\"n\":5}");
	assert_key("topic", &m, "payments");
	assert_key("partition", &m, "3");
	assert_key("offset", &m, "42");
	assert_key("timestamp", &m, "2023-11-14 22:13:20.123+00");
	assert_key("header:tenant", &m, "acme");
	assert_key("json:/order_no", &m, "A-17");
	assert_key("json:/n", &m, "5");
	assert_key("${header:tenant}/${json:/order_no}", &m, "acme/A-17");
	assert_key("$$${topic}:${partition}:${offset}$$", &m, "$payments:3:42$");
	/* An empty part is fine as long as the whole key is not empty. */
	assert_key("${header:empty}${key}", &m, "k1");
	m.partition = -1;
	m.offset = INT64_MAX;
	assert_key("${partition}/${offset}", &m, "-1/9223372036854775807");
}

static void test_key_missing(void **state)
{
	struct idem_header hdrs[] = {
		{ "tenant", NULL, 0 },
	};
	struct idem_msgview m = msg_json(NULL);
	(void)state;

	m.headers = hdrs;
	m.n_headers = 1;
	assert_key_error("key", &m, "key: message has no key");
	assert_key_error("value", &m, "value: message has no value");
	assert_key_error("json:/order_no", &m, "json:/order_no: message has no value");
	assert_key_error("header:region", &m, "header:region: no such header");
	assert_key_error("header:tenant", &m, "header:tenant: header value is null");
	assert_key_error("timestamp", &m, "timestamp: message has no timestamp");
	assert_key_error("x-${header:Tenant}", &m, "header:Tenant: no such header");
	m.topic = NULL;
	assert_key_error("topic", &m, "topic: message has no topic");
}

static void test_key_invalid_json(void **state)
{
	static const char with_nul[] = "{\"a\":\"x\0y\"}";
	struct idem_msgview m;
	(void)state;

	m = msg_json("{\"order_no\": 12x}");
	assert_key_error("json:/order_no", &m,
	                 "json:/order_no: value is not valid JSON: number expected at byte 15");
	/* Trailing garbage after a complete document. */
	m = msg_json("{\"order_no\":1} x");
	assert_key_error(
	        "json:/order_no", &m,
	        "json:/order_no: value is not valid JSON: unexpected character at byte 15");
	m = msg_json("{} {}");
	assert_key_error("json:", &m,
	                 "json:: value is not valid JSON: unexpected character at byte 3");
	m = msg_json("123x");
	assert_key_error("json:", &m,
	                 "json:: value is not valid JSON: unexpected character at byte 3");
	m = msg_json("{\"order_no\":1,}");
	assert_key_error(
	        "json:/order_no", &m,
	        "json:/order_no: value is not valid JSON: unexpected character at byte 14");
	m = msg_json("{\"a\":'x'}");
	assert_key_error("json:/a", &m,
	                 "json:/a: value is not valid JSON: unexpected character at byte 5");
	m = msg_json("");
	assert_key_error("json:/a", &m,
	                 "json:/a: value is not valid JSON: unexpected end of data at byte 0");
	m = msg_json("{\"a\":");
	assert_key_error("json:/a", &m,
	                 "json:/a: value is not valid JSON: unexpected end of data at byte 5");
	m = msg_json("\"\xff\"");
	assert_key_error("json:", &m,
	                 "json:: value is not valid JSON: invalid utf-8 string at byte 1");
	/* A NUL would otherwise end json-c's input early and hide what follows. */
	m = msg_json(NULL);
	m.value = with_nul;
	m.value_len = sizeof(with_nul) - 1;
	assert_key_error("json:/a", &m, "json:/a: value is not valid JSON: NUL byte at byte 7");
	m.value = "{}\0garbage";
	m.value_len = 10;
	assert_key_error("json:", &m, "json:: value is not valid JSON: NUL byte at byte 2");
}

static void test_key_json_not_scalar(void **state)
{
	struct idem_msgview m =
	        msg_json("{\"o\":{\"a\":1},\"l\":[1,2],\"z\":null,\"s\":\"str\",\"n\":1}");
	(void)state;

	assert_key_error("json:/o", &m, "json:/o: is an object, not a scalar");
	assert_key_error("json:", &m, "json:: is an object, not a scalar");
	assert_key_error("json:/l", &m, "json:/l: is an array, not a scalar");
	assert_key_error("json:/z", &m, "json:/z: is null");
	assert_key_error("json:/missing", &m, "json:/missing: not found in value");
	assert_key_error("json:/o/b", &m, "json:/o/b: not found in value");
	assert_key_error("json:/s/0", &m, "json:/s/0: not found in value");
	assert_key_error("json:/n/x", &m, "json:/n/x: not found in value");
	assert_key_error("json:/z/x", &m, "json:/z/x: not found in value");
	assert_key_error("json:/l/2", &m, "json:/l/2: not found in value");
	assert_key_error("json:/l/01", &m, "json:/l/01: not found in value");
	assert_key_error("json:/l/-", &m, "json:/l/-: not found in value");
	assert_key_error("json:/l/1x", &m, "json:/l/1x: not found in value");
	assert_key_error("json:/l/", &m, "json:/l/: not found in value");
	assert_key_error("json:/l/99999999999999999999999", &m,
	                 "json:/l/99999999999999999999999: not found in value");
	m = msg_json("null");
	assert_key_error("json:", &m, "json:: is null");
	assert_key_error("json:/a", &m, "json:/a: not found in value");
}

static void test_key_json_scalars(void **state)
{
	struct idem_msgview m = msg_json(
	        "{\"s\":\"ord\\u00e9r/1\",\"i\":-17,\"z\":0,\"u\":18446744073709551614,"
	        "\"d\":1.50,\"e\":1E+3,\"t\":true,\"f\":false,\"nul\":\"a\\u0000b\",\"empty\":\"\","
	        "\"big\":99999999999999999999,\"neg\":-9223372036854775809,"
	        "\"max\":9223372036854775807,\"l\":[10,\"x\"]}");
	(void)state;

	assert_key("json:/s", &m, "ord\xc3\xa9r/1");
	assert_key("json:/i", &m, "-17");
	assert_key("json:/z", &m, "0");
	assert_key("json:/u", &m, "18446744073709551614");
	assert_key("json:/max", &m, "9223372036854775807");
	assert_key("json:/d", &m, "1.50");
	assert_key("json:/e", &m, "1E+3");
	assert_key("json:/t", &m, "true");
	assert_key("json:/f", &m, "false");
	assert_key("json:/l/0", &m, "10");
	assert_key("json:/l/1", &m, "x");
	assert_key("${json:/t}-${json:/i}", &m, "true--17");
	/* A string with an escaped NUL is not valid as text and is hex-encoded. */
	assert_key("json:/nul", &m, "\\x610062");
	assert_key_error("json:/empty", &m, "business key is empty");
	/* json-c clamps integers it cannot hold; refuse instead of merging keys. */
	assert_key_error(
	        "json:/big", &m,
	        "json:/big: integer is at or beyond the 64-bit limit and may have been clamped; send it as a JSON string");
	assert_key_error(
	        "json:/neg", &m,
	        "json:/neg: integer is at or beyond the 64-bit limit and may have been clamped; send it as a JSON string");
	/* json-c accepts NaN and Infinity even in strict mode. */
	m = msg_json("[NaN,-Infinity]");
	assert_key_error("json:/0", &m, "json:/0: 'NaN' is not a valid JSON number");
	assert_key_error("json:/1", &m, "json:/1: '-Infinity' is not a valid JSON number");
	/* Whole-document scalars, including a top-level number. */
	m = msg_json("\"whole\"");
	assert_key("json:", &m, "whole");
	m = msg_json("  42 \n");
	assert_key("json:", &m, "42");
	m = msg_json("3.25");
	assert_key("json:", &m, "3.25");
}

static void assert_key_not_found(const char *field, const struct idem_msgview *m)
{
	char expected[600];

	snprintf(expected, sizeof(expected), "%s: not found in value", field);
	assert_key_error(field, m, expected);
}

/* Writes "json:" and the RFC 6901 pointer to the single token @key into @dst. */
static void escape_token(char *dst, const char *key)
{
	strcpy(dst, "json:/");
	dst += strlen(dst);
	for (; *key != '\0'; key++) {
		if (*key == '~' || *key == '/') {
			*dst++ = '~';
			*dst++ = *key == '~' ? '0' : '1';
		} else {
			*dst++ = *key;
		}
	}
	*dst = '\0';
}

static void test_key_json_pointer_escapes(void **state)
{
	char value[512];
	char tpl[512];
	char longkey[201];
	struct idem_msgview m =
	        msg_json("{\"a/b\":{\"m~n\":\"slash-tilde\"},\"~1\":\"literal\",\"\":\"empty\","
	                 "\"x\":{\"\":{\"\":\"deep\"}}}");
	(void)state;

	assert_key("json:/a~1b/m~0n", &m, "slash-tilde");
	assert_key("json:/~01", &m, "literal");
	assert_key_error("json:/~1", &m, "json:/~1: not found in value");
	assert_key("json:/", &m, "empty");
	assert_key("json:/x//", &m, "deep");
	assert_key_error("json:/a/b", &m, "json:/a/b: not found in value");

	/* Tokens too long for the hash lookup buffer are compared in place. */
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	longkey[10] = '/';
	longkey[20] = '~';
	snprintf(value, sizeof(value), "{\"%s\":\"long\",\"short\":1}", longkey);
	m = msg_json(value);
	escape_token(tpl, longkey);
	assert_int_equal(strlen(tpl), 5 + 1 + 200 + 2);
	assert_key(tpl, &m, "long");
	/* Same length, one byte different: not found. */
	tpl[strlen(tpl) - 1] = 'j';
	assert_key_not_found(tpl, &m);
	/* One byte longer and one byte shorter than the real key. */
	longkey[199] = '\0';
	escape_token(tpl, longkey);
	assert_key_not_found(tpl, &m);
	longkey[199] = 'k';
	escape_token(tpl, longkey);
	strcat(tpl, "k");
	assert_key_not_found(tpl, &m);
}

static void test_key_length_limit(void **state)
{
	char key[KEY_MAX + 2];
	char expected[KEY_MAX + 2];
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	struct idem_msgview m;
	(void)state;

	memset(key, 'a', sizeof(key));
	m = msg_key(key, KEY_MAX);
	memcpy(expected, key, KEY_MAX);
	expected[KEY_MAX] = '\0';
	assert_key("key", &m, expected);
	m = msg_key(key, KEY_MAX + 1);
	assert_key_error("key", &m, "business key is 513 bytes, longer than the limit of 512");

	/* The limit applies to the stored, hex-encoded form: 3 raw bytes become 8. */
	m = msg_key("\xff\xfe\xfd", 3);
	assert_int_equal(build("key", &m, 8, &out, &err), IDEM_OK);
	assert_string_equal(out.data, "\\xfffefd");
	assert_int_equal(build("key", &m, 7, &out, &err), IDEM_ERR_KEY);
	assert_string_equal(
	        err.msg, "business key is 8 bytes after hex encoding, longer than the limit of 7");
	idem_buf_done(&out);
}

static void test_key_hex_encoding(void **state)
{
	struct idem_msgview m;
	(void)state;

	m = msg_key("\xff\x00"
	            "a",
	            3);
	assert_key("key", &m, "\\xff0061");
	m = msg_key("a\0b", 3);
	assert_key("key", &m, "\\x610062");
	/* A text key that looks hex-encoded is encoded too, keeping the mapping one-to-one. */
	m = msg_key("\\xab", 4);
	assert_key("key", &m, "\\x5c786162");
	m = msg_key("\\x", 2);
	assert_key("key", &m, "\\x5c78");
	m = msg_key("\\X1", 3);
	assert_key("key", &m, "\\X1");
	m = msg_key("\\", 1);
	assert_key("key", &m, "\\");
	m = msg_key("a\\x", 3);
	assert_key("key", &m, "a\\x");
	/* Valid UTF-8 is kept; an overlong form or a lone surrogate is not valid. */
	m = msg_key("z\xc3\xbcrich", 7);
	assert_key("key", &m, "z\xc3\xbcrich");
	m = msg_key("\xc0\xaf", 2);
	assert_key("key", &m, "\\xc0af");
	m = msg_key("\xed\xa0\x80", 3);
	assert_key("key", &m, "\\xeda080");
	/* Encoding applies to the whole assembled key, literals included. */
	m = msg_key("\xff", 1);
	assert_key("k-${key}", &m, "\\x6b2dff");
	/* A long key grows the buffer while it is encoded in place. */
	{
		unsigned char raw[200];
		char want[2 + 2 * sizeof(raw) + 1];

		for (size_t i = 0; i < sizeof(raw); i++)
			raw[i] = (unsigned char)(255 - i);
		want[0] = '\\';
		want[1] = 'x';
		for (size_t i = 0; i < sizeof(raw); i++)
			snprintf(want + 2 + 2 * i, 3, "%02x", raw[i]);
		m = msg_key(raw, sizeof(raw));
		assert_key("key", &m, want);
	}
}

static void test_key_empty(void **state)
{
	struct idem_header hdrs[] = {
		{ "h", "", 0 },
	};
	struct idem_msgview m = msg_key("", 0);
	(void)state;

	assert_key_error("key", &m, "business key is empty");
	m.headers = hdrs;
	m.n_headers = 1;
	assert_key_error("${key}${header:h}", &m, "business key is empty");
	m = msg_json("");
	assert_key_error("value", &m, "business key is empty");
}

static void test_duplicate_headers(void **state)
{
	struct idem_header hdrs[] = {
		{ "tenant", "first", 5 }, { "other", "o", 1 },  { "tenant", "last", 4 },
		{ NULL, "nameless", 8 },  { "nulled", "v", 1 }, { "nulled", NULL, 0 },
	};
	struct idem_msgview m = msg_json(NULL);
	(void)state;

	m.headers = hdrs;
	m.n_headers = IDEM_ARRAY_SIZE(hdrs);
	assert_key("header:tenant", &m, "last");
	assert_get("header:tenant", &m, "last");
	assert_get("header:other", &m, "o");
	/* The last occurrence wins even when it is null. */
	assert_key_error("header:nulled", &m, "header:nulled: header value is null");
	assert_get_null("header:nulled", &m);
}

static void test_get_fields(void **state)
{
	struct idem_header hdrs[] = {
		{ "bin", "\xff\x00z", 3 },
	};
	struct idem_msgview m = msg_json("{\"a\":1}");
	char *text;
	size_t len = 0;
	(void)state;

	m.key = "\xfe\x00k";
	m.key_len = 3;
	m.offset = 123456789012;
	m.timestamp_ms = 0;
	m.headers = hdrs;
	m.n_headers = 1;
	assert_get("value", &m, "{\"a\":1}");
	assert_get("topic", &m, "payments");
	assert_get("partition", &m, "3");
	assert_get("offset", &m, "123456789012");
	assert_get("timestamp", &m, "1970-01-01 00:00:00.000+00");
	/* Bytes pass through unchanged, even when they are not UTF-8. */
	text = get_field("key", &m, NULL, &len);
	assert_non_null(text);
	assert_int_equal(len, 3);
	assert_memory_equal(text, "\xfe\x00k", 3);
	free(text);
	text = get_field("header:bin", &m, NULL, &len);
	assert_non_null(text);
	assert_int_equal(len, 3);
	assert_memory_equal(text, "\xff\x00z", 3);
	free(text);
	text = get_field("business_key", &m, "\\x00ff", NULL);
	assert_non_null(text);
	assert_string_equal(text, "\\x00ff");
	free(text);
	assert_null(get_field("business_key", &m, NULL, NULL));
	/* A present but empty field is "", not NULL. */
	m.key = "";
	m.key_len = 0;
	assert_get("key", &m, "");
}

static void test_get_timestamp(void **state)
{
	static const struct {
		int64_t ms;
		const char *text;
	} cases[] = {
		{ 0, "1970-01-01 00:00:00.000+00" },
		{ 1, "1970-01-01 00:00:00.001+00" },
		{ 86399999, "1970-01-01 23:59:59.999+00" },
		{ 951782400000, "2000-02-29 00:00:00.000+00" },
		{ 951868800000, "2000-03-01 00:00:00.000+00" },
		{ 1700000000123, "2023-11-14 22:13:20.123+00" },
		{ 1709164800500, "2024-02-29 00:00:00.500+00" },
		{ 4102444799999, "2099-12-31 23:59:59.999+00" },
		{ 4107542400000, "2100-03-01 00:00:00.000+00" },
		{ 253402300799999, "9999-12-31 23:59:59.999+00" },
		{ 253402300800000, "10000-01-01 00:00:00.000+00" },
	};
	struct idem_msgview m = msg_json(NULL);
	(void)state;

	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		m.timestamp_ms = cases[i].ms;
		assert_get("timestamp", &m, cases[i].text);
	}
	m.timestamp_ms = INT64_MAX;
	assert_get("timestamp", &m, "292278994-08-17 07:12:55.807+00");
	m.timestamp_ms = -1;
	assert_get_null("timestamp", &m);
	m.timestamp_ms = INT64_MIN;
	assert_get_null("timestamp", &m);
}

static void test_get_nulls(void **state)
{
	struct idem_header hdrs[] = {
		{ "n", NULL, 0 },
	};
	struct idem_msgview m = msg_json(NULL);
	(void)state;

	m.headers = hdrs;
	m.n_headers = 1;
	assert_get_null("key", &m);
	assert_get_null("value", &m);
	assert_get_null("json:/a", &m);
	assert_get_null("json:", &m);
	assert_get_null("header:missing", &m);
	assert_get_null("header:n", &m);
	assert_get_null("timestamp", &m);
	m.topic = NULL;
	assert_get_null("topic", &m);
	m = msg_json("{\"a\":null,\"l\":[null]}");
	assert_get_null("json:/a", &m);
	assert_get_null("json:/l/0", &m);
	assert_get_null("json:/b", &m);
	assert_get_null("json:/a/b", &m);
	m = msg_json("null");
	assert_get_null("json:", &m);
}

static void test_get_json(void **state)
{
	struct idem_msgview m = msg_json("{\"s\":\"a\\\"b\",\"o\":{\"x\":[1,true,null,\"y\"]},"
	                                 "\"d\":2.50,\"i\":-3,\"t\":true,\"e\":\"\",\"l\":[]}");
	(void)state;

	assert_get("json:/s", &m, "a\"b");
	assert_get("json:/o", &m, "{\"x\":[1,true,null,\"y\"]}");
	assert_get("json:/o/x", &m, "[1,true,null,\"y\"]");
	assert_get("json:/d", &m, "2.50");
	assert_get("json:/i", &m, "-3");
	assert_get("json:/t", &m, "true");
	assert_get("json:/e", &m, "");
	assert_get("json:/l", &m, "[]");
	assert_get("json:/o/x/3", &m, "y");
	m = msg_json("[18446744073709551615,NaN]");
	assert_get("json:/0", &m, "18446744073709551615");
	assert_get("json:/1", &m, "NaN");
}

static void test_get_json_invalid(void **state)
{
	struct idem_field f;
	struct idem_jsondoc doc;
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	struct idem_msgview m = msg_json("<html>");
	bool null = true;
	(void)state;

	assert_int_equal(idem_field_parse("json:/a", &f, NULL, 0), IDEM_OK);
	idem_jsondoc_init(&doc);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_ERR_KEY);
	assert_int_equal(err.code, IDEM_ERR_KEY);
	assert_string_equal(err.msg,
	                    "json:/a: value is not valid JSON: unexpected character at byte 0");
	/* ret_null is written only on success. */
	assert_true(null);
	/* Other fields of the same message still work. */
	idem_field_done(&f);
	assert_int_equal(idem_field_parse("value", &f, NULL, 0), IDEM_OK);
	null = true;
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_false(null);
	assert_string_equal(out.data, "<html>");
	idem_field_done(&f);
	idem_jsondoc_done(&doc);
	idem_buf_done(&out);
}

static void test_json_depth(void **state)
{
	char deep[200];
	struct idem_msgview m;
	(void)state;

	memset(deep, '[', 64);
	memset(deep + 64, ']', 64);
	deep[128] = '\0';
	m = msg_json(deep);
	assert_key_error("json:/0/0", &m, "json:/0/0: is an array, not a scalar");
	memset(deep, '[', 65);
	memset(deep + 65, ']', 65);
	deep[130] = '\0';
	m = msg_json(deep);
	assert_key_error("json:/0", &m,
	                 "json:/0: value is not valid JSON: nesting too deep at byte 64");
}

/*
 * One jsondoc serves many messages: parsed by json-c once per message, reset between them
 * (json-c alone here: plain values are otherwise read without it, test_fast_reader).
 */
static void test_jsondoc_reuse(void **state)
{
	struct idem_template tpl;
	struct idem_field f;
	struct idem_jsondoc doc;
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	struct idem_msgview m;
	void *root, *tok;
	bool null = true;
	(void)state;

	assert_int_equal(idem_template_parse("${json:/id}-${json:/n}", &tpl, NULL, 0), IDEM_OK);
	assert_int_equal(idem_field_parse("json:/o", &f, NULL, 0), IDEM_OK);
	idem_jsondoc_init(&doc);
	doc.json_c_only = true;

	m = msg_json("{\"id\":\"a\",\"n\":1,\"o\":{\"k\":[2]}}");
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_OK);
	assert_string_equal(out.data, "a-1");
	assert_true(doc.parsed);
	root = doc.root;
	tok = doc.tok;
	assert_non_null(root);
	assert_non_null(tok);
	/* The parameter reuses the parse: the same root, even if the bytes changed under it. */
	m.value = "{\"o\":\"changed\"}";
	m.value_len = strlen(m.value);
	assert_int_equal(idem_field_get(&f, &m, &doc, out.data, &out, &null, &err), IDEM_OK);
	assert_false(null);
	assert_string_equal(out.data, "{\"k\":[2]}");
	assert_ptr_equal(doc.root, root);

	idem_jsondoc_reset(&doc);
	assert_false(doc.parsed);
	assert_null(doc.root);
	assert_ptr_equal(doc.tok, tok);
	m = msg_json("{\"id\":\"b\",");
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg,
	                    "json:/id: value is not valid JSON: unexpected end of data at byte 10");
	assert_true(doc.invalid);

	idem_jsondoc_reset(&doc);
	assert_false(doc.invalid);
	assert_string_equal(doc.errmsg, "");
	m = msg_json("{\"id\":\"c\",\"n\":2.0}");
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_OK);
	assert_string_equal(out.data, "c-2.0");
	assert_ptr_equal(doc.tok, tok);

	/* A tombstone after a parsed message: no parse happens, the key is missing. */
	idem_jsondoc_reset(&doc);
	m = msg_json(NULL);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg, "json:/id: message has no value");
	assert_false(doc.parsed);

	for (int i = 0; i < 100; i++) {
		idem_jsondoc_reset(&doc);
		m = msg_json(i % 2 ? "{\"id\":\"x\",\"n\":[1]}" : "{\"id\":\"y\",\"n\":true}");
		if (i % 2) {
			assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err),
			                 IDEM_ERR_KEY);
			assert_string_equal(err.msg, "json:/n: is an array, not a scalar");
		} else {
			assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err),
			                 IDEM_OK);
			assert_string_equal(out.data, "y-true");
		}
	}

	idem_jsondoc_done(&doc);
	assert_null(doc.root);
	assert_null(doc.tok);
	idem_jsondoc_done(&doc);
	idem_jsondoc_done(NULL);
	idem_jsondoc_reset(NULL);
	idem_field_done(&f);
	idem_template_done(&tpl);
	idem_buf_done(&out);
}

/*
 * Plain values are read without json-c (idem_json_scalar): no tree is built for them. A field
 * the fast reader does not vouch for (here an escaped string) makes json-c parse the value once,
 * and its tree answers the fields after it.
 */
/* avro: fields: schemas from a table instead of a registry; how often each id was asked. */
static const char avro_payment_schema[] =
        "{\"type\":\"record\",\"name\":\"payment\",\"fields\":["
        "{\"name\":\"payment_id\",\"type\":\"string\"},{\"name\":\"amount\",\"type\":\"long\"},"
        "{\"name\":\"note\",\"type\":[\"null\",\"string\"]}]}";
static int avro_asked[6];

/* Id 1 is the Avro payment schema, id 5 a JSON schema, id 3 cannot be had now, others unknown. */
static enum idem_schema_answer avro_table(void *ctx, int32_t id, enum idem_schema_type type,
                                          void **ret_schema, char *why, size_t whylen,
                                          int *ret_retry_ms)
{
	idem_error err = { 0 };

	(void)ctx;
	if (id >= 0 && id < 6)
		avro_asked[id]++;
	if ((id == 1 || id == 5) &&
	    type != (id == 5 ? IDEM_SCHEMA_TYPE_JSON : IDEM_SCHEMA_TYPE_AVRO)) {
		snprintf(why, whylen, "schema id %d is %s, not %s", (int)id,
		         id == 5 ? "JSON" : "AVRO", id == 5 ? "AVRO" : "JSON");
		return IDEM_SCHEMA_UNKNOWN;
	}
	switch (id) {
	case 5:
		return IDEM_SCHEMA_OK;
	case 1:
		assert_int_equal(idem_avro_schema_new(avro_payment_schema,
		                                      sizeof(avro_payment_schema) - 1,
		                                      (idem_avro_schema **)ret_schema, &err),
		                 IDEM_OK);
		return IDEM_SCHEMA_OK;
	case 3:
		snprintf(why, whylen, "schema id 3: cannot reach the registry");
		*ret_retry_ms = 250;
		return IDEM_SCHEMA_UNAVAILABLE;
	default:
		snprintf(why, whylen, "schema id %d: registry answered 404", (int)id);
		return IDEM_SCHEMA_UNKNOWN;
	}
}

static void test_avro_fields(void **state)
{
	/* Confluent header (0, id 1), then "p-1", 42, null; the second with note "hi". */
	static const unsigned char v1[] = { 0, 0, 0, 0, 1, 0x06, 'p', '-', '1', 0x54, 0x00 };
	static const unsigned char v2[] = { 0,   0,   0,    0,    1,    0x06, 'p',
		                            '-', '2', 0x54, 0x02, 0x04, 'h',  'i' };
	static const unsigned char unknown[] = { 0, 0, 0, 0, 2, 0x06, 'p', '-', '1', 0x54, 0x00 };
	static const unsigned char down[] = { 0, 0, 0, 0, 3, 0x06, 'p', '-', '1', 0x54, 0x00 };
	static const unsigned char magic1[] = { 1, 0, 0, 0, 1, 0x06, 'p', '-', '1', 0x54, 0x00 };
	struct idem_msgview m = msg_json(NULL);
	struct idem_template tpl;
	struct idem_field f;
	struct idem_jsondoc doc;
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	char errbuf[256];
	bool null = false;

	(void)state;
	memset(avro_asked, 0, sizeof(avro_asked));
	idem_jsondoc_init(&doc);
	doc.schema_fn = avro_table;
	assert_int_equal(idem_template_parse("${avro:/payment_id}/${avro-key:/payment_id}", &tpl,
	                                     errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_true(idem_template_needs_avro(&tpl));

	/* The value and the key, each decoded once for all the fields that read it. */
	m.value = v1;
	m.value_len = sizeof(v1);
	m.key = v2;
	m.key_len = sizeof(v2);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_OK);
	assert_string_equal(out.data, "p-1/p-2");
	assert_int_equal(idem_field_parse("avro:/amount", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_false(null);
	assert_string_equal(out.data, "42");
	idem_field_done(&f);
	assert_int_equal(avro_asked[1], 2);
	assert_int_equal(idem_field_parse("avro:/note", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_true(null);
	idem_field_done(&f);
	assert_int_equal(idem_field_parse("avro-key:", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_false(null);
	assert_string_equal(out.data, "{\"payment_id\":\"p-2\",\"amount\":42,\"note\":\"hi\"}");
	idem_field_done(&f);
	assert_int_equal(avro_asked[1], 2);

	/* A missing field refuses the key, naming it. */
	idem_jsondoc_reset(&doc);
	idem_template_done(&tpl);
	assert_int_equal(idem_template_parse("avro:/note", &tpl, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg, "avro:/note: is null");
	idem_template_done(&tpl);
	assert_int_equal(idem_template_parse("avro:/payment_id", &tpl, errbuf, sizeof(errbuf)),
	                 IDEM_OK);

	/* An id the registry does not know, a wrong magic byte: the message cannot be read. */
	idem_jsondoc_reset(&doc);
	m.value = unknown;
	m.value_len = sizeof(unknown);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_ERR_KEY);
	assert_non_null(strstr(
	        err.msg,
	        "avro:/payment_id: value is not Avro this route can read: schema id 2: registry answered 404"));
	idem_jsondoc_reset(&doc);
	m.value = magic1;
	m.value_len = sizeof(magic1);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_ERR_KEY);
	assert_non_null(strstr(err.msg, "avro:/payment_id: value is not Avro this route can read"));

	/* A registry that cannot answer now: try again later, with its wait. */
	idem_jsondoc_reset(&doc);
	m.value = down;
	m.value_len = sizeof(down);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_ERR_UNAVAILABLE);
	assert_int_equal(doc.retry_ms, 250);
	assert_non_null(strstr(err.msg, "cannot reach the registry"));

	/* No registry at all (a caller's mistake): an error, not a crash. */
	idem_jsondoc_reset(&doc);
	doc.schema_fn = NULL;
	m.value = v1;
	m.value_len = sizeof(v1);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_ERR_INVALID);

	idem_template_done(&tpl);
	idem_jsondoc_done(&doc);
	idem_buf_done(&out);
}

/* A Confluent-framed JSON Schema value of schema id @id: @doc after the 5-byte header. */
static struct idem_msgview msg_framed(char *buf, size_t cap, uint32_t id, const char *doc,
                                      size_t doc_len)
{
	struct idem_msgview m = msg_json(NULL);

	assert_true(5 + doc_len <= cap);
	buf[0] = 0;
	buf[1] = (char)(id >> 24);
	buf[2] = (char)(id >> 16);
	buf[3] = (char)(id >> 8);
	buf[4] = (char)id;
	memcpy(buf + 5, doc, doc_len);
	m.value = buf;
	m.value_len = 5 + doc_len;
	return m;
}

/* The error of reading json:/payment_id as a business key from @m (doc reset first). */
static const char *framed_key_error(struct idem_jsondoc *doc, const struct idem_msgview *m,
                                    idem_status want, idem_error *err)
{
	struct idem_template tpl;
	struct idem_buf out = { 0 };
	char errbuf[256];

	idem_jsondoc_reset(doc);
	assert_int_equal(idem_template_parse("json:/payment_id", &tpl, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(idem_key_build(&tpl, m, doc, KEY_MAX, &out, err), want);
	idem_template_done(&tpl);
	idem_buf_done(&out);
	return err->msg;
}

/*
 * JSON Schema values (doc.framed, routes[].value_format: json-schema): json: fields read the
 * document after the Confluent header, once its id is known to be a JSON schema; the header,
 * the id and its schema's type are checked once per message, whatever the fields.
 */
static void test_json_schema_fields(void **state)
{
	static const char doc1[] =
	        "{\"payment_id\":\"p-1\",\"amount\":42,\"note\":null,\"s\":\"a\\u00e9\"}";
	char buf[256];
	struct idem_msgview m = msg_framed(buf, sizeof(buf), 5, doc1, sizeof(doc1) - 1);
	struct idem_template tpl;
	struct idem_field f;
	struct idem_jsondoc doc;
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	char errbuf[256];
	bool null = false;

	(void)state;
	memset(avro_asked, 0, sizeof(avro_asked));
	idem_jsondoc_init(&doc);
	doc.framed = true;
	doc.schema_fn = avro_table;
	assert_int_equal(idem_template_parse("${json:/payment_id}", &tpl, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_OK);
	assert_string_equal(out.data, "p-1");
	assert_int_equal(idem_field_parse("json:/amount", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_false(null);
	assert_string_equal(out.data, "42");
	idem_field_done(&f);
	assert_int_equal(idem_field_parse("json:/note", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_true(null);
	idem_field_done(&f);
	/* An escaped string: json-c's tree, of the document past the header. */
	assert_int_equal(idem_field_parse("json:/s", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_string_equal(out.data, "a\xc3\xa9");
	idem_field_done(&f);
	assert_int_equal(idem_field_parse("json:", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_string_equal(
	        out.data,
	        "{\"payment_id\":\"p-1\",\"amount\":42,\"note\":null,\"s\":\"a\xc3\xa9\"}");
	idem_field_done(&f);
	/* The value field is the value as received, header included. */
	assert_int_equal(idem_field_parse("value", &f, errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_get(&f, &m, &doc, NULL, &out, &null, &err), IDEM_OK);
	assert_int_equal(out.len, 5 + sizeof(doc1) - 1);
	assert_memory_equal(out.data, buf, out.len);
	idem_field_done(&f);
	/* One look at the header and the schema per message. */
	assert_int_equal(avro_asked[5], 1);
	idem_jsondoc_reset(&doc);
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_OK);
	assert_int_equal(avro_asked[5], 2);
	idem_template_done(&tpl);

	/* Values that are not JSON Schema this route can read, each with its reason. */
	m = msg_framed(buf, sizeof(buf), 5, "", 0);
	m.value_len = 3;
	assert_string_equal(
	        framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	        "json:/payment_id: value is not JSON Schema this route can read: value is 3 bytes, shorter than the 5-byte Confluent header");
	m = msg_json("{\"payment_id\":\"p-1\"}");
	assert_string_equal(
	        framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	        "json:/payment_id: value is not JSON Schema this route can read: value starts with byte 123, not the Confluent magic byte 0");
	m = msg_framed(buf, sizeof(buf), 0x80000000u, "{}", 2);
	assert_string_equal(
	        framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	        "json:/payment_id: value is not JSON Schema this route can read: schema id 2147483648 is beyond 2^31-1");
	m = msg_framed(buf, sizeof(buf), 2, "{\"payment_id\":\"p-1\"}", 20);
	assert_string_equal(
	        framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	        "json:/payment_id: value is not JSON Schema this route can read: schema id 2: registry answered 404");
	m = msg_framed(buf, sizeof(buf), 1, "{\"payment_id\":\"p-1\"}", 20);
	assert_string_equal(
	        framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	        "json:/payment_id: value is not JSON Schema this route can read: schema id 1 is AVRO, not JSON");
	/* The document must be JSON; positions count the header. */
	m = msg_framed(buf, sizeof(buf), 5, "{\"payment_id\":", 14);
	assert_string_equal(
	        framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	        "json:/payment_id: value is not valid JSON: unexpected end of data at byte 19");
	m = msg_framed(buf, sizeof(buf), 5, "{\"a\":\"\0\"}", 9);
	assert_string_equal(framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	                    "json:/payment_id: value is not valid JSON: NUL byte at byte 11");
	m = msg_framed(buf, sizeof(buf), 5, "", 0);
	assert_string_equal(
	        framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	        "json:/payment_id: value is not valid JSON: unexpected end of data at byte 5");
	/* No value: the field is absent, as for plain JSON. */
	m = msg_json(NULL);
	assert_string_equal(framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	                    "json:/payment_id: message has no value");

	/* A registry that cannot answer now: the message waits, nothing is decided. */
	m = msg_framed(buf, sizeof(buf), 3, "{\"payment_id\":\"p-1\"}", 20);
	framed_key_error(&doc, &m, IDEM_ERR_UNAVAILABLE, &err);
	assert_int_equal(doc.retry_ms, 250);
	assert_non_null(strstr(err.msg, "cannot reach the registry"));
	assert_false(doc.frame_invalid);

	/* No registry at all (a caller's mistake): an error, not a crash. */
	doc.schema_fn = NULL;
	m = msg_framed(buf, sizeof(buf), 5, "{\"payment_id\":\"p-1\"}", 20);
	framed_key_error(&doc, &m, IDEM_ERR_INVALID, &err);

	/* Never guessed: a route of plain JSON does not read a framed value. */
	doc.framed = false;
	assert_non_null(strstr(framed_key_error(&doc, &m, IDEM_ERR_KEY, &err),
	                       "json:/payment_id: value is not valid JSON"));

	idem_jsondoc_done(&doc);
	idem_buf_done(&out);
}

static void test_fast_reader(void **state)
{
	struct idem_template tpl;
	struct idem_field f;
	struct idem_jsondoc doc;
	struct idem_buf out = { 0 };
	idem_error err = { 0 };
	struct idem_msgview m;
	bool null = true;
	(void)state;

	assert_int_equal(idem_template_parse("${json:/id}-${json:/n}", &tpl, NULL, 0), IDEM_OK);
	assert_int_equal(idem_field_parse("json:/amount", &f, NULL, 0), IDEM_OK);
	idem_jsondoc_init(&doc);

	m = msg_json("{\"id\":\"pay-7\",\"n\":3,\"amount\":12.50}");
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_OK);
	assert_string_equal(out.data, "pay-7-3");
	assert_int_equal(idem_field_get(&f, &m, &doc, out.data, &out, &null, &err), IDEM_OK);
	assert_false(null);
	assert_string_equal(out.data, "12.50");
	assert_false(doc.parsed);
	assert_null(doc.root);

	idem_jsondoc_reset(&doc);
	m = msg_json("{\"id\":\"pay-\\u0038\",\"n\":3,\"amount\":1}");
	assert_int_equal(idem_key_build(&tpl, &m, &doc, KEY_MAX, &out, &err), IDEM_OK);
	assert_string_equal(out.data, "pay-8-3");
	assert_true(doc.parsed);
	assert_non_null(doc.root);

	idem_jsondoc_done(&doc);
	idem_field_done(&f);
	idem_template_done(&tpl);
	idem_buf_done(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_field_parse_names),
		cmocka_unit_test(test_field_parse_errors),
		cmocka_unit_test(test_template_parse),
		cmocka_unit_test(test_template_parse_errors),
		cmocka_unit_test(test_key_fields),
		cmocka_unit_test(test_key_missing),
		cmocka_unit_test(test_key_invalid_json),
		cmocka_unit_test(test_key_json_not_scalar),
		cmocka_unit_test(test_key_json_scalars),
		cmocka_unit_test(test_key_json_pointer_escapes),
		cmocka_unit_test(test_key_length_limit),
		cmocka_unit_test(test_key_hex_encoding),
		cmocka_unit_test(test_key_empty),
		cmocka_unit_test(test_duplicate_headers),
		cmocka_unit_test(test_get_fields),
		cmocka_unit_test(test_get_timestamp),
		cmocka_unit_test(test_get_nulls),
		cmocka_unit_test(test_get_json),
		cmocka_unit_test(test_get_json_invalid),
		cmocka_unit_test(test_json_depth),
		cmocka_unit_test(test_jsondoc_reuse),
		cmocka_unit_test(test_fast_reader),
		cmocka_unit_test(test_avro_fields),
		cmocka_unit_test(test_json_schema_fields),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
