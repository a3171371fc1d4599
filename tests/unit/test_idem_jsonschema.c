/*
 * test_idem_jsonschema.c - JSON Schema validation: every keyword with a document it takes and
 * one it refuses (and the exact message), numbers compared by value, patterns (each supported
 * feature, each refused one), $refs (recursion, cycles, pointers, remote and bad ones), the
 * drafts, refused and ignored keywords, schemas that are not schemas, escaping of what
 * documents hold, and one schema checked by two threads at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_common.h"
#include "idem_jsonschema.h"

#define D07  "\"$schema\": \"http://json-schema.org/draft-07/schema#\", "
#define D202 "\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", "

static json_object *doc_of(const char *text)
{
	json_tokener *tok = json_tokener_new_ex(1024);
	json_object *v;
	enum json_tokener_error e;

	assert_non_null(tok);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	v = json_tokener_parse_ex(tok, text, (int)strlen(text));
	e = json_tokener_get_error(tok);
	if (v == NULL && e == json_tokener_continue) {
		v = json_tokener_parse_ex(tok, "", 1);
		e = json_tokener_get_error(tok);
	}
	json_tokener_free(tok);
	if (e != json_tokener_success)
		print_error("document %s: %s\n", text, json_tokener_error_desc(e));
	assert_int_equal(e, json_tokener_success);
	return v;
}

static idem_jsonschema *schema_of(const char *text)
{
	idem_jsonschema *s = NULL;
	idem_error err = { 0 };
	idem_status r = idem_jsonschema_new(text, strlen(text), &s, &err);

	if (r != IDEM_OK)
		print_error("schema %s: %s\n", text, err.msg);
	assert_int_equal(r, IDEM_OK);
	assert_non_null(s);
	return s;
}

/* @want: the exact message, or "*" and a part of it. */
static void msg_is(const char *got, const char *want)
{
	bool ok = want[0] == '*' ? strstr(got, want + 1) != NULL : strcmp(got, want) == 0;

	if (!ok)
		print_error("got  '%s'\nwant '%s'\n", got, want);
	assert_true(ok);
}

static void schema_fails(const char *text, const char *want)
{
	idem_jsonschema *s = NULL;
	idem_error err = { 0 };

	idem_status r = idem_jsonschema_new(text, strlen(text), &s, &err);

	if (r != IDEM_ERR_INVALID)
		print_error("schema %s: %s, want '%s'\n", text, idem_status_str(r), want);
	assert_int_equal(r, IDEM_ERR_INVALID);
	assert_null(s);
	assert_int_equal(err.code, IDEM_ERR_INVALID);
	msg_is(err.msg, want);
}

/* @want NULL: @doc is valid; else the message of its failure. */
static void check_is(const idem_jsonschema *s, const char *doc, const char *want)
{
	json_object *v = doc_of(doc);
	idem_error err = { 0 };
	idem_status r = idem_jsonschema_check(s, v, &err);

	if (want == NULL) {
		if (r != IDEM_OK)
			print_error("document %s: %s\n", doc, err.msg);
		assert_int_equal(r, IDEM_OK);
		assert_string_equal(err.msg, "");
	} else {
		if (r != IDEM_ERR_KEY)
			print_error("document %s is valid, want '%s'\n", doc, want);
		assert_int_equal(r, IDEM_ERR_KEY);
		assert_int_equal(err.code, IDEM_ERR_KEY);
		msg_is(err.msg, want);
	}
	json_object_put(v);
}

struct doc_case {
	const char *schema, *doc, *want; /* want NULL: valid */
};

static void run(const struct doc_case *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		idem_jsonschema *s = schema_of(c[i].schema);

		check_is(s, c[i].doc, c[i].want);
		idem_jsonschema_unref(s);
	}
}

static void test_types(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"type\": \"string\"}", "\"a\"", NULL },
		{ "{\"type\": \"string\"}", "12", "at /: 12 is not of type string (schema /)" },
		{ "{\"type\": \"string\"}", "{}", "at /: object is not of type string (schema /)" },
		{ "{\"type\": \"string\"}", "[]", "at /: array is not of type string (schema /)" },
		{ "{\"type\": \"null\"}", "null", NULL },
		{ "{\"type\": \"null\"}", "false", "at /: false is not of type null (schema /)" },
		{ "{\"type\": \"boolean\"}", "true", NULL },
		{ "{\"type\": \"boolean\"}", "null",
		  "at /: null is not of type boolean (schema /)" },
		{ "{\"type\": \"object\"}", "{\"a\": 1}", NULL },
		{ "{\"type\": \"array\"}", "[1]", NULL },
		{ "{\"type\": \"number\"}", "1.5", NULL },
		{ "{\"type\": \"number\"}", "-3", NULL },
		{ "{\"type\": \"number\"}", "\"1\"", "at /: '1' is not of type number (schema /)" },
		{ "{\"type\": \"integer\"}", "1", NULL },
		{ "{\"type\": \"integer\"}", "1.0", NULL },
		{ "{\"type\": \"integer\"}", "-2e3", NULL },
		{ "{\"type\": \"integer\"}", "1.5", "at /: 1.5 is not of type integer (schema /)" },
		{ "{\"type\": \"integer\"}", "18446744073709551615", NULL },
		{ "{\"type\": [\"string\", \"null\"]}", "null", NULL },
		{ "{\"type\": [\"string\", \"null\"]}", "1",
		  "at /: 1 is not of type string or null (schema /)" },
		{ "{\"type\": [\"null\", \"integer\", \"string\"]}", "0.5",
		  "at /: 0.5 is not of type string, integer or null (schema /)" },
		{ "{\"properties\": {\"items\": {\"items\": {\"properties\": {\"sku\": {\"type\": "
		  "\"string\"}}}}}}",
		  "{\"items\": [{\"sku\": \"a\"}, {\"sku\": \"b\"}, {\"sku\": 12}]}",
		  "at /items/2/sku: 12 is not of type string (schema "
		  "/properties/items/items/properties/sku)" },
		{ "true", "{\"anything\": [1]}", NULL },
		{ "{}", "null", NULL },
		{ "false", "1", "at /: 1 is not allowed: the schema is false (schema /)" },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

static void test_const_enum(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"const\": 1}", "1.0", NULL },
		{ "{\"const\": 1.0}", "1", NULL },
		{ "{\"const\": 1}", "true", "at /: true is not the value of const (schema /)" },
		{ "{\"const\": 0}", "-0.0", NULL },
		{ "{\"const\": null}", "null", NULL },
		{ "{\"const\": null}", "0", "at /: 0 is not the value of const (schema /)" },
		{ "{\"const\": \"a\\u0000b\"}", "\"a\\u0000b\"", NULL },
		{ "{\"const\": \"a\\u0000b\"}", "\"a\\u0000c\"",
		  "at /: 'a\\x00c' is not the value of const (schema /)" },
		{ "{\"const\": {\"a\": 1, \"b\": [1, 2.0, {\"c\": null}]}}",
		  "{\"b\": [1.0, 2, {\"c\": null}], \"a\": 1e0}", NULL },
		{ "{\"const\": {\"a\": 1, \"b\": [1, 2]}}", "{\"a\": 1, \"b\": [2, 1]}",
		  "at /: object is not the value of const (schema /)" },
		{ "{\"const\": {\"a\": 1}}", "{\"a\": 1, \"b\": 2}",
		  "at /: object is not the value of const (schema /)" },
		{ "{\"const\": [1]}", "[true]",
		  "at /: array is not the value of const (schema /)" },
		{ "{\"const\": 9007199254740993}", "9007199254740992.0",
		  "at /: 9007199254740992 is not the value of const (schema /)" },
		{ "{\"enum\": [1, \"a\", null, {\"x\": [1]}]}", "1.0", NULL },
		{ "{\"enum\": [1, \"a\", null, {\"x\": [1]}]}", "null", NULL },
		{ "{\"enum\": [1, \"a\", null, {\"x\": [1]}]}", "{\"x\": [1.0]}", NULL },
		{ "{\"enum\": [1, \"a\", null, {\"x\": [1]}]}", "\"b\"",
		  "at /: 'b' is not one of the 4 values of enum (schema /)" },
		{ "{\"enum\": []}", "1", "at /: 1 is not one of the 0 values of enum (schema /)" },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

static void test_numbers(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"multipleOf\": 2}", "4.0", NULL },
		{ "{\"multipleOf\": 2}", "5", "at /: 5 is not a multiple of 2 (schema /)" },
		{ "{\"multipleOf\": 0.1}", "0.3", NULL },
		{ "{\"multipleOf\": 0.1}", "7", NULL },
		{ "{\"multipleOf\": 0.1}", "0.35",
		  "at /: 0.35 is not a multiple of 0.1 (schema /)" },
		{ "{\"multipleOf\": 0.0001}", "0.0075", NULL },
		{ "{\"multipleOf\": 0.0001}", "0.00751",
		  "at /: 0.00751 is not a multiple of 0.0001 (schema /)" },
		{ "{\"multipleOf\": 1.5}", "-4.5", NULL },
		{ "{\"multipleOf\": 2.5}", "1e300", NULL },
		{ "{\"type\": \"integer\", \"multipleOf\": 0.123456789}", "1e308",
		  "at /: 1e+308 is not a multiple of 0.123456789 (schema /)" },
		{ "{\"multipleOf\": 5}", "18446744073709551615", NULL },
		{ "{\"multipleOf\": 5}", "18446744073709551614",
		  "at /: 18446744073709551614 is not a multiple of 5 (schema /)" },
		{ "{\"multipleOf\": 8}", "-9223372036854775808", NULL },
		{ "{\"multipleOf\": 3}", "-9223372036854775808",
		  "at /: -9223372036854775808 is not a multiple of 3 (schema /)" },
		{ "{\"multipleOf\": 1e-320}", "1e-300", NULL },
		{ "{\"multipleOf\": 0.3}", "0", NULL },
		{ "{\"maximum\": 10}", "10", NULL },
		{ "{\"maximum\": 10}", "10.5", "at /: 10.5 is greater than maximum 10 (schema /)" },
		{ "{\"maximum\": 9007199254740992.0}", "9007199254740993",
		  "at /: 9007199254740993 is greater than maximum 9007199254740992 (schema /)" },
		{ "{\"maximum\": 9223372036854775807}", "9223372036854775808",
		  "at /: 9223372036854775808 is greater than maximum 9223372036854775807 (schema /)" },
		{ "{\"exclusiveMaximum\": 10}", "9.99", NULL },
		{ "{\"exclusiveMaximum\": 10}", "10.0",
		  "at /: 10 is not less than exclusiveMaximum 10 (schema /)" },
		{ "{\"minimum\": -1.5}", "-1.5", NULL },
		{ "{\"minimum\": -1.5}", "-2", "at /: -2 is less than minimum -1.5 (schema /)" },
		{ "{\"minimum\": 18446744073709551615}", "18446744073709551614",
		  "at /: 18446744073709551614 is less than minimum 18446744073709551615 (schema /)" },
		{ "{\"minimum\": 1e19}", "18446744073709551615", NULL },
		{ "{\"exclusiveMinimum\": 0}", "1e-300", NULL },
		{ "{\"exclusiveMinimum\": 0}", "0",
		  "at /: 0 is not greater than exclusiveMinimum 0 (schema /)" },
		{ "{\"exclusiveMinimum\": 0.1}", "0.1",
		  "at /: 0.1 is not greater than exclusiveMinimum 0.1 (schema /)" },
		/* number keywords pass other types */
		{ "{\"minimum\": 5, \"multipleOf\": 7}", "\"x\"", NULL },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

static void test_strings(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"maxLength\": 3}", "\"h\\u00e9\\u00e9\"", NULL },
		{ "{\"maxLength\": 3}", "\"h\xc3\xa9llo\"",
		  "at /: 'h\xc3\xa9llo' is 5 characters long, more than maxLength 3 (schema /)" },
		{ "{\"maxLength\": 1}", "\"\xf0\x9f\x98\x80\"", NULL },
		{ "{\"minLength\": 2}", "\"\xf0\x9f\x98\x80\"",
		  "at /: '\xf0\x9f\x98\x80' is 1 character long, fewer than minLength 2 (schema /)" },
		{ "{\"minLength\": 2}", "\"\xe6\x97\xa5\xe6\x9c\xac\"", NULL },
		{ "{\"minLength\": 2.0}", "\"\"",
		  "at /: '' is 0 characters long, fewer than minLength 2 (schema /)" },
		{ "{\"maxLength\": 3}",
		  "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
		  "at /: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is 60 characters long, more "
		  "than maxLength 3 (schema /)" },
		{ "{\"pattern\": \"^[a-z]+$\"}", "\"abc\"", NULL },
		{ "{\"pattern\": \"^[a-z]+$\"}", "\"ab1\"",
		  "at /: 'ab1' does not match pattern '^[a-z]+$' (schema /)" },
		{ "{\"maxLength\": 0, \"pattern\": \"x\"}", "5", NULL },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

/* A pattern (JSON string text), a string (JSON string text) and whether it matches. */
struct pattern_case {
	const char *pattern, *str;
	bool match;
};

static void test_patterns(void **state)
{
	static const struct pattern_case cases[] = {
		/* unanchored, as the specification says */
		{ "b", "abc", true },
		{ "^b", "abc", false },
		{ "c$", "abc", true },
		{ "a$", "abc", false },
		/* \d \D \w \W \s \S */
		{ "\\\\d+", "a1", true },
		{ "^\\\\d+$", "12a", false },
		{ "^\\\\D+$", "ab", true },
		{ "^\\\\D$", "5", false },
		{ "^\\\\D$", "\\u00e9", true },
		{ "^\\\\w+$", "a_Z9", true },
		{ "^\\\\w$", "\\u00e9", false },
		{ "^\\\\W$", "\\u00e9", true },
		{ "^\\\\W$", "_", false },
		{ "^\\\\s$", " ", true },
		{ "^\\\\s$", "\\t", true },
		{ "^\\\\s$", "\\u00a0", true },
		{ "^\\\\s$", "\\u2003", true },
		{ "^\\\\s$", "\\ufeff", true },
		{ "^\\\\s$", "x", false },
		{ "^\\\\S+$", "ab", true },
		{ "^\\\\S$", " ", false },
		{ "^\\\\S$", "\\u3000", false },
		/* '.' takes a code point, not a byte, and no line terminator */
		{ "^.$", "\\u00e9", true },
		{ "^.$", "\\ud83d\\ude00", true },
		{ "^..$", "\\u00e9", false },
		{ "^.{3}$", "\\u65e5\\u672c\\u8a9e", true },
		{ "^.$", "\\n", false },
		{ "^.$", "\\r", false },
		{ "^.$", "\\u2028", false },
		{ "^.$", "\\u0085", true },
		/* escapes */
		{ "^\\\\t$", "\\t", true },
		{ "^\\\\n\\\\r\\\\v\\\\f$", "\\n\\r\\u000b\\f", true },
		{ "^\\\\x41$", "A", true },
		{ "^\\\\u00e9$", "\\u00e9", true },
		{ "^\\\\u{1F600}$", "\\ud83d\\ude00", true },
		{ "^\\\\uD83D\\\\uDE00$", "\\ud83d\\ude00", true },
		{ "^\\\\cJ$", "\\n", true },
		{ "^a\\\\.b$", "a.b", true },
		{ "^a\\\\.b$", "axb", false },
		{ "^\\\\$\\\\^\\\\(\\\\)\\\\[\\\\]\\\\{\\\\}\\\\|\\\\*\\\\+\\\\?\\\\\\\\\\\\/\\\\-$",
		  "$^()[]{}|*+?\\\\/-", true },
		{ "^\\u00e9+$", "\\u00e9\\u00e9", true },
		{ "^\\u00e9+$", "\\u00e8", false },
		/* classes */
		{ "^[a-c]+$", "abc", true },
		{ "^[a-c]+$", "abd", false },
		{ "^[^a-c]$", "d", true },
		{ "^[^a-c]$", "a", false },
		{ "^[^a-c]$", "\\u00e9", true },
		{ "^[^a-c]$", "\\n", true },
		{ "^[\\u00e9-\\u00eb]$", "\\u00ea", true },
		{ "^[\\u00e9-\\u00eb]$", "e", false },
		{ "^[\\\\u00e9-\\\\u00eb]$", "\\u00eb", true },
		{ "^[\\\\d.-]+$", "1.-2", true },
		{ "^[\\\\d.-]+$", "1a", false },
		{ "^[\\\\]\\\\[^-]+$", "][^-", true },
		{ "^[\\\\]\\\\[^-]+$", "a", false },
		{ "^[-a]$", "-", true },
		{ "^[a-]$", "-", true },
		{ "^[\\\\^]$", "^", true },
		{ "^[\\\\^]$", "a", false },
		{ "^[^^]$", "^", false },
		{ "^[^^]$", "a", true },
		{ "^[\\\\^-]$", "-", true },
		{ "^[\\\\s\\\\d]$", " ", true },
		{ "^[\\\\s\\\\d]$", "7", true },
		{ "^[\\\\s\\\\d]$", "a", false },
		{ "^[\\\\S]$", "x", true },
		{ "^[^\\\\S]$", "x", false },
		{ "^[\\\\b]$", "\\b", true },
		{ "^[.]$", ".", true },
		{ "^[.]$", "x", false },
		{ "^[:alpha:]$", "p", true },
		{ "^[:alpha:]$", "b", false },
		{ "^[=a=]$", "=", true },
		{ "^[Z-a]$", "\\\\", true },
		{ "^[Z-a]$", "]", true },
		{ "^[Z-a]$", "b", false },
		{ "^[^]$", "x", true },
		{ "^[^]$", "\\n", true },
		{ "a[]", "a", false },
		{ "^[\\\\w\\\\W]$", "\\u00e9", true },
		/* groups, alternation, quantifiers */
		{ "^(ab|cd)+$", "abcd", true },
		{ "^(ab|cd)+$", "abc", false },
		{ "^(?:a|b)c$", "bc", true },
		{ "a|^$", "", true },
		{ "^(a|)$", "", true },
		{ "^()$", "", true },
		{ "^a{2}$", "aa", true },
		{ "^a{2}$", "a", false },
		{ "^a{2,}$", "aaa", true },
		{ "^a{1,2}$", "aaa", false },
		{ "^a?b*c+$", "c", true },
		{ "^(a(b(c)))*$", "abcabc", true },
		{ "x{", "x{", true },
		{ "^a{,2}$", "a{,2}", true },
		{ "^a{2,1", "a{2,1", true },
		{ "^[0-9]{1,1000}$", "12345", true },
		{ "^(.*){1,20}x$", "abcx", true },
		{ "^(a?){1,140}$", "aaa", true },
	};
	char schema[512], doc[256];

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		idem_jsonschema *s;

		snprintf(schema, sizeof(schema), "{\"pattern\": \"%s\"}", cases[i].pattern);
		snprintf(doc, sizeof(doc), "\"%s\"", cases[i].str);
		s = schema_of(schema);
		if (cases[i].match) {
			check_is(s, doc, NULL);
		} else {
			json_object *v = doc_of(doc);
			idem_error err = { 0 };

			if (idem_jsonschema_check(s, v, &err) != IDEM_ERR_KEY)
				print_error("pattern %s matches %s\n", cases[i].pattern, doc);
			assert_int_equal(idem_jsonschema_check(s, v, &err), IDEM_ERR_KEY);
			assert_non_null(strstr(err.msg, "does not match pattern"));
			json_object_put(v);
		}
		idem_jsonschema_unref(s);
	}
}

static void test_patterns_refused(void **state)
{
	static const struct {
		const char *pattern, *want;
	} cases[] = {
		{ "(?=a)",
		  "at /pattern: '(?=a)' cannot be read: lookahead '(?=' at offset 0 is not "
		  "one idemd can check" },
		{ "a(?!b)", "*lookahead '(?!' at offset 1 is not one idemd can check" },
		{ "(?<=a)b", "*lookbehind '(?<=' at offset 0" },
		{ "(?<!a)b", "*lookbehind '(?<!' at offset 0" },
		{ "(a)\\\\1", "*backreference '\\\\1' at offset 3" },
		{ "(?<year>\\\\d+)", "*named group '(?<' at offset 0" },
		{ "\\\\k<year>", "*named backreference '\\\\k' at offset 0" },
		{ "a*?", "*lazy quantifier at offset 1 is not one idemd can check" },
		{ "a+?", "*lazy quantifier" },
		{ "a??", "*lazy quantifier" },
		{ "a{2,3}?", "*lazy quantifier" },
		{ "\\\\bword", "*word boundary '\\\\b' at offset 0 is not one idemd can check" },
		{ "a\\\\B", "*'\\\\B' at offset 1 is not one idemd can check" },
		{ "\\\\p{L}",
		  "*Unicode property escape '\\\\p' at offset 0 is not one idemd can check" },
		{ "\\\\P{L}", "*Unicode property escape '\\\\P'" },
		{ "(?i)a", "*group modifier '(?' at offset 0 is not one idemd can check" },
		{ "\\\\0", "*'\\\\0' (a NUL character)" },
		{ "\\\\01", "*octal escape '\\\\01'" },
		{ "\\\\x00", "*'\\\\x00' (a NUL character)" },
		{ "\\\\u0000", "*'\\\\u0000' (a NUL character)" },
		{ "a\\u0000", "*a NUL character at offset 1" },
		{ "\\\\a", "*escape '\\\\a'" },
		{ "\\\\Z", "*escape '\\\\Z'" },
		{ "a**", "*nothing to repeat at offset 2" },
		{ "*a", "*nothing to repeat at offset 0" },
		{ "^*", "*nothing to repeat at offset 1" },
		{ "(|*)", "*nothing to repeat at offset 2" },
		{ "(a", "*'(' without ')' at offset 2" },
		{ "a)", "*')' without '(' at offset 1" },
		{ "[a", "*class '[' without ']' at offset 0" },
		{ "[z-a]", "*a range out of order at offset 1" },
		{ "[\\\\d-z]", "*a range with a class escape at offset 1" },
		{ "a{1001}", "*a count over 1000 at offset 1" },
		{ "a{3,2}", "*counts out of order at offset 1" },
		{ "(a{1000}){1000}", "*repeats that expand to over 20000 elements" },
		/* copies of what may match nothing cost their count squared */
		{ "(.*){1,1000}x", "*repeats that expand to over 20000 elements at offset 4" },
		{ "(a|b?){1,150}", "*repeats that expand to over 20000 elements" },
		{ "\\\\x4", "*'\\\\x' without two hex digits" },
		{ "\\\\u12", "*'\\\\u' without four hex digits" },
		{ "\\\\u{110000}", "*beyond U+10FFFF" },
		{ "\\\\uD800", "*a lone surrogate '\\\\uD800'" },
		{ "\\\\c1", "*'\\\\c' without a letter" },
		{ "a\\\\", "*'\\\\' at the end at offset 1" },
		{ "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a))))))))))))"
		  "))))))))))))))))))))))))))))))))))))))))))))))))))))))",
		  "*groups nested deeper than 64" },
	};
	char schema[512];

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		snprintf(schema, sizeof(schema), "{\"pattern\": \"%s\"}", cases[i].pattern);
		schema_fails(schema, cases[i].want);
	}
	schema_fails("{\"properties\": {\"code\": {\"pattern\": \"(?=x)\"}}}",
	             "at /properties/code/pattern: '(?=x)' cannot be read: lookahead '(?=' at "
	             "offset 0 is not one idemd can check");
	schema_fails("{\"patternProperties\": {\"a(?!b)\": true}}",
	             "at /patternProperties/a(?!b): 'a(?!b)' cannot be read: lookahead '(?!' at "
	             "offset 1 is not one idemd can check");
	schema_fails("{\"pattern\": 5}", "at /: 'pattern' must be a string");
}

static void test_arrays(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"maxItems\": 2}", "[1, 2]", NULL },
		{ "{\"maxItems\": 2}", "[1, 2, 3]",
		  "at /: array of 3 items is longer than maxItems 2 (schema /)" },
		{ "{\"minItems\": 2}", "[1]",
		  "at /: array of 1 item is shorter than minItems 2 (schema /)" },
		{ "{\"minItems\": 2}", "{}", NULL },
		{ "{\"uniqueItems\": true}", "[1, \"1\", true, null, [1], {\"1\": 1}, 2]", NULL },
		{ "{\"uniqueItems\": true}", "[[1, 2], [2, 1], {\"a\": 1}, {\"a\": 2}]", NULL },
		{ "{\"uniqueItems\": true}", "[1, 2, 1.0]",
		  "at /: items 0 and 2 are equal, and uniqueItems is true (schema /)" },
		{ "{\"uniqueItems\": true}", "[{\"a\": 1, \"b\": 2}, {\"b\": 2.0, \"a\": 1}]",
		  "at /: items 0 and 1 are equal, and uniqueItems is true (schema /)" },
		{ "{\"uniqueItems\": false}", "[1, 1]", NULL },
		/* longer than 16: by hash */
		{ "{\"uniqueItems\": true}",
		  "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]", NULL },
		{ "{\"uniqueItems\": true}",
		  "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 5]",
		  "at /: items 5 and 19 are equal, and uniqueItems is true (schema /)" },
		{ "{\"uniqueItems\": true}",
		  "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 3, 2.0, 17, 18, -0.0]",
		  "at /: items 3 and 15 are equal, and uniqueItems is true (schema /)" },
		{ "{\"uniqueItems\": true}",
		  "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, -0.0]",
		  "at /: items 0 and 19 are equal, and uniqueItems is true (schema /)" },
		{ "{\"uniqueItems\": true}",
		  "[{\"a\": [1, {\"b\": 2}]}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, "
		  "{\"a\": [1.0, {\"b\": 2}]}]",
		  "at /: items 0 and 17 are equal, and uniqueItems is true (schema /)" },
		{ "{\"items\": {\"type\": \"integer\"}}", "[1, 2, 3]", NULL },
		{ "{\"items\": {\"type\": \"integer\"}}", "[1, 2, \"x\"]",
		  "at /2: 'x' is not of type integer (schema /items)" },
		{ "{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": "
		  "false}",
		  "[\"a\", 1]", NULL },
		{ "{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": "
		  "false}",
		  "[\"a\", 1, 2]", "at /2: 2 is not allowed: the schema is false (schema /items)" },
		{ "{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}", "[1]",
		  "at /0: 1 is not of type string (schema /prefixItems/0)" },
		/* draft-07's tuple form, with and without $schema */
		{ "{" D07 "\"items\": [{\"type\": \"string\"}], \"additionalItems\": {\"type\": "
		  "\"integer\"}}",
		  "[\"a\", 1, 2]", NULL },
		{ "{" D07 "\"items\": [{\"type\": \"string\"}], \"additionalItems\": {\"type\": "
		  "\"integer\"}}",
		  "[\"a\", \"b\"]", "at /1: 'b' is not of type integer (schema /additionalItems)" },
		{ "{\"items\": [{\"type\": \"string\"}], \"additionalItems\": false}", "[\"a\", 1]",
		  "at /1: 1 is not allowed: the schema is false (schema /additionalItems)" },
		{ "{\"items\": [{\"type\": \"string\"}]}", "[\"a\", 1]", NULL },
		{ "{\"items\": {\"type\": \"string\"}, \"additionalItems\": false}",
		  "[\"a\", \"b\"]", NULL },
		/* keywords of the draft not chosen are ignored */
		{ "{" D07 "\"prefixItems\": [{\"type\": \"string\"}]}", "[1]", NULL },
		{ "{" D202 "\"prefixItems\": [true], \"additionalItems\": false}", "[1, 2]", NULL },
		{ "{\"contains\": {\"type\": \"string\"}}", "[1, \"a\"]", NULL },
		{ "{\"contains\": {\"type\": \"string\"}}", "[1, 2]",
		  "at /: no item matches contains (schema /)" },
		{ "{\"contains\": {\"type\": \"string\"}}", "[]",
		  "at /: no item matches contains (schema /)" },
		{ "{\"contains\": {\"const\": 1}, \"minContains\": 2}", "[1, 2, 1.0]", NULL },
		{ "{\"contains\": {\"const\": 1}, \"minContains\": 2}", "[1, 2]",
		  "at /: 1 item matches contains, fewer than minContains 2 (schema /)" },
		{ "{\"contains\": {\"const\": 1}, \"minContains\": 3}", "[1, 1]",
		  "at /: 2 items match contains, fewer than minContains 3 (schema /)" },
		{ "{\"contains\": {\"const\": 1}, \"maxContains\": 1}", "[1, 2]", NULL },
		{ "{\"contains\": {\"const\": 1}, \"maxContains\": 1}", "[1, 2, 1]",
		  "at /: more items match contains than maxContains 1 (schema /)" },
		{ "{\"contains\": {\"const\": 1}, \"minContains\": 0}", "[]", NULL },
		{ "{\"maxContains\": 0}", "[1]", NULL },
		{ "{" D07 "\"contains\": {\"const\": 1}, \"maxContains\": 1}", "[1, 1]", NULL },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

static void test_objects(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"maxProperties\": 1}", "{\"a\": 1}", NULL },
		{ "{\"maxProperties\": 1}", "{\"a\": 1, \"b\": 2}",
		  "at /: object of 2 properties has more than maxProperties 1 (schema /)" },
		{ "{\"minProperties\": 1}", "{}",
		  "at /: object of 0 properties has fewer than minProperties 1 (schema /)" },
		{ "{\"minProperties\": 2}", "{\"a\": 1}",
		  "at /: object of 1 property has fewer than minProperties 2 (schema /)" },
		{ "{\"required\": [\"amount\"]}", "{\"amount\": null}", NULL },
		{ "{\"required\": [\"amount\"]}", "{}",
		  "at /: required property 'amount' is missing (schema /)" },
		{ "{\"required\": [\"amount\"]}", "[]", NULL },
		{ "{\"properties\": {\"a\": {\"type\": \"string\"}}}", "{\"a\": \"x\", \"b\": 1}",
		  NULL },
		{ "{\"properties\": {\"a\": {\"type\": \"string\"}}}", "{\"a\": 1}",
		  "at /a: 1 is not of type string (schema /properties/a)" },
		{ "{\"properties\": {\"a/b~c\": {\"type\": \"string\"}}}", "{\"a/b~c\": 1}",
		  "at /a~1b~0c: 1 is not of type string (schema /properties/a~1b~0c)" },
		{ "{\"properties\": {\"z\": true, \"a\": true, \"m\": {\"type\": \"null\"}}}",
		  "{\"m\": 1}", "at /m: 1 is not of type null (schema /properties/m)" },
		{ "{\"patternProperties\": {\"^x-\": {\"type\": \"integer\"}}}",
		  "{\"x-a\": 1, \"y\": \"s\"}", NULL },
		{ "{\"patternProperties\": {\"^x-\": {\"type\": \"integer\"}}}", "{\"x-a\": \"s\"}",
		  "at /x-a: 's' is not of type integer (schema /patternProperties/^x-)" },
		{ "{\"patternProperties\": {\"\\u00e9\": {\"minimum\": 2}}}", "{\"caf\\u00e9\": 1}",
		  "at /caf\xc3\xa9: 1 is less than minimum 2 (schema /patternProperties/\xc3\xa9)" },
		{ "{\"properties\": {\"a\": true}, \"patternProperties\": {\"^b\": true}, "
		  "\"additionalProperties\": false}",
		  "{\"a\": 1, \"bb\": 2}", NULL },
		{ "{\"properties\": {\"a\": true}, \"additionalProperties\": false}",
		  "{\"a\": 1, \"b\": 2}",
		  "at /: property 'b' is not allowed by additionalProperties (schema /)" },
		{ "{\"additionalProperties\": {\"type\": \"string\"}}", "{\"b\": 2}",
		  "at /b: 2 is not of type string (schema /additionalProperties)" },
		{ "{\"propertyNames\": {\"maxLength\": 3}}", "{\"abc\": 1}", NULL },
		{ "{\"propertyNames\": {\"maxLength\": 3}}", "{\"abc\": 1, \"abcd\": 1}",
		  "at /: 'abcd' is 4 characters long, more than maxLength 3 (schema /propertyNames)" },
		{ "{\"propertyNames\": false}", "{}", NULL },
		{ "{\"dependentRequired\": {\"a\": [\"b\"]}}", "{\"b\": 1}", NULL },
		{ "{\"dependentRequired\": {\"a\": [\"b\"]}}", "{\"a\": 1, \"b\": 1}", NULL },
		{ "{\"dependentRequired\": {\"a\": [\"b\"]}}", "{\"a\": 1}",
		  "at /: property 'b' is missing, required by property 'a' (schema /)" },
		{ "{\"dependentSchemas\": {\"a\": {\"required\": [\"c\"]}}}", "{\"c\": 1}", NULL },
		{ "{\"dependentSchemas\": {\"a\": {\"required\": [\"c\"]}}}", "{\"a\": 1}",
		  "at /: required property 'c' is missing (schema /dependentSchemas/a)" },
		/* draft-07's dependencies, both forms */
		{ "{\"dependencies\": {\"a\": [\"b\"], \"c\": {\"required\": [\"d\"]}}}",
		  "{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4}", NULL },
		{ "{\"dependencies\": {\"a\": [\"b\"], \"c\": {\"required\": [\"d\"]}}}",
		  "{\"a\": 1}",
		  "at /: property 'b' is missing, required by property 'a' (schema /)" },
		{ "{" D07 "\"dependencies\": {\"a\": [\"b\"], \"c\": {\"required\": [\"d\"]}}}",
		  "{\"c\": 1}", "at /: required property 'd' is missing (schema /dependencies/c)" },
		{ "{" D202 "\"dependencies\": {\"a\": [\"b\"]}}", "{\"a\": 1}", NULL },
		{ "{" D07 "\"dependentRequired\": {\"a\": [\"b\"]}}", "{\"a\": 1}", NULL },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

static void test_logic(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"allOf\": [{\"type\": \"number\"}, {\"minimum\": 2}]}", "3", NULL },
		{ "{\"allOf\": [{\"type\": \"number\"}, {\"minimum\": 2}]}", "1",
		  "at /: 1 is less than minimum 2 (schema /allOf/1)" },
		{ "{\"anyOf\": [{\"type\": \"string\"}, {\"minimum\": 2}]}", "\"a\"", NULL },
		{ "{\"anyOf\": [{\"type\": \"string\"}, {\"minimum\": 2}]}", "3", NULL },
		{ "{\"anyOf\": [{\"type\": \"string\"}, {\"minimum\": 2}]}", "1",
		  "at /: 1 matches none of the 2 schemas of anyOf (schema /)" },
		{ "{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]}", "1", NULL },
		{ "{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]}", "2.5", NULL },
		{ "{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]}", "1.5",
		  "at /: 1.5 matches none of the 2 schemas of oneOf (schema /)" },
		{ "{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]}", "3",
		  "at /: 3 matches schemas 0 and 1 of oneOf, not exactly one (schema /)" },
		{ "{\"oneOf\": [false, true, {}, true]}", "3",
		  "at /: 3 matches schemas 1 and 2 of oneOf, not exactly one (schema /)" },
		{ "{\"not\": {\"type\": \"string\"}}", "1", NULL },
		{ "{\"not\": {\"type\": \"string\"}}", "\"a\"",
		  "at /: 'a' matches the schema of not (schema /)" },
		{ "{\"if\": {\"properties\": {\"kind\": {\"const\": \"card\"}}}, \"then\": "
		  "{\"required\": [\"pan\"]}, \"else\": {\"required\": [\"iban\"]}}",
		  "{\"kind\": \"card\", \"pan\": \"x\"}", NULL },
		{ "{\"if\": {\"properties\": {\"kind\": {\"const\": \"card\"}}}, \"then\": "
		  "{\"required\": [\"pan\"]}, \"else\": {\"required\": [\"iban\"]}}",
		  "{\"kind\": \"card\"}",
		  "at /: required property 'pan' is missing (schema /then)" },
		{ "{\"if\": {\"properties\": {\"kind\": {\"const\": \"card\"}}}, \"then\": "
		  "{\"required\": [\"pan\"]}, \"else\": {\"required\": [\"iban\"]}}",
		  "{\"kind\": \"sepa\"}",
		  "at /: required property 'iban' is missing (schema /else)" },
		{ "{\"if\": {\"properties\": {\"kind\": {\"const\": \"card\"}}}, \"then\": "
		  "{\"required\": [\"pan\"]}, \"else\": {\"required\": [\"iban\"]}}",
		  "{\"kind\": \"sepa\", \"iban\": \"x\"}", NULL },
		{ "{\"then\": false, \"else\": false}", "1", NULL },
		{ "{\"if\": true}", "1", NULL },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

/* A binary tree @depth objects deep down "left", its last value @last. */
static char *tree_doc(int depth, const char *last)
{
	struct idem_buf b = { 0 };

	for (int i = 1; i < depth; i++)
		assert_int_equal(idem_buf_append_str(&b, "{\"value\": 1, \"left\": "), IDEM_OK);
	assert_int_equal(idem_buf_printf(&b, "{\"value\": %s}", last), IDEM_OK);
	for (int i = 1; i < depth; i++)
		assert_int_equal(idem_buf_append_str(&b, "}"), IDEM_OK);
	return b.data;
}

static void test_refs(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"$defs\": {\"pos\": {\"type\": \"integer\", \"minimum\": 1}}, \"properties\": "
		  "{\"n\": {\"$ref\": \"#/$defs/pos\"}}}",
		  "{\"n\": 0}", "at /n: 0 is less than minimum 1 (schema /$defs/pos)" },
		{ "{\"definitions\": {\"s\": {\"type\": \"string\"}}, \"items\": {\"$ref\": "
		  "\"#/definitions/s\"}}",
		  "[\"a\", 1]", "at /1: 1 is not of type string (schema /definitions/s)" },
		{ "{\"$defs\": {\"a/b\": {\"type\": \"string\"}, \"c~d\": {\"type\": \"integer\"}, "
		  "\"e f\": {\"type\": \"null\"}, \"%\": {\"type\": \"boolean\"}}, \"properties\": "
		  "{\"x\": {\"$ref\": \"#/$defs/a~1b\"}, \"y\": {\"$ref\": \"#/$defs/c~0d\"}, \"z\": "
		  "{\"$ref\": \"#/$defs/e%20f\"}, \"w\": {\"$ref\": \"#/%24defs/%25\"}}}",
		  "{\"x\": \"s\", \"y\": 1, \"z\": null, \"w\": true}", NULL },
		{ "{\"$defs\": {\"a/b\": {\"type\": \"string\"}}, \"properties\": {\"x\": {\"$ref\": "
		  "\"#/$defs/a~1b\"}}}",
		  "{\"x\": 1}", "at /x: 1 is not of type string (schema /$defs/a~1b)" },
		{ "{\"$defs\": {\"e f\": {\"type\": \"null\"}}, \"properties\": {\"z\": {\"$ref\": "
		  "\"#/$defs/e%20f\"}}}",
		  "{\"z\": 1}", "at /z: 1 is not of type null (schema /$defs/e f)" },
		{ "{\"anyOf\": [{\"type\": \"object\"}, {\"type\": \"string\"}], \"properties\": "
		  "{\"a\": {\"$ref\": \"#/anyOf/1\"}}}",
		  "{\"a\": 1}", "at /a: 1 is not of type string (schema /anyOf/1)" },
		{ "{\"x-lib\": {\"s\": {\"type\": \"string\"}}, \"properties\": {\"a\": {\"$ref\": "
		  "\"#/x-lib/s\"}}}",
		  "{\"a\": 1}", "at /a: 1 is not of type string (schema /x-lib/s)" },
		{ "{\"$id\": \"https://example.com/schemas/order.json\", \"$defs\": {\"s\": {\"type\": "
		  "\"string\"}}, \"properties\": {\"a\": {\"$ref\": "
		  "\"https://example.com/schemas/order.json#/$defs/s\"}, \"b\": {\"$ref\": "
		  "\"order.json#/$defs/s\"}}}",
		  "{\"a\": \"x\", \"b\": 1}", "at /b: 1 is not of type string (schema /$defs/s)" },
		{ "{\"$ref\": \"#/$defs/s\", \"$defs\": {\"s\": {\"type\": \"string\"}}}", "1",
		  "at /: 1 is not of type string (schema /$defs/s)" },
		/* beside $ref, keywords apply (2020-12), or not (draft-07) */
		{ "{\"$defs\": {\"s\": {\"type\": \"string\"}}, \"$ref\": \"#/$defs/s\", "
		  "\"maxLength\": 2}",
		  "\"abc\"", "at /: 'abc' is 3 characters long, more than maxLength 2 (schema /)" },
		{ "{" D07 "\"definitions\": {\"s\": {\"type\": \"string\"}}, \"$ref\": "
		  "\"#/definitions/s\", \"maxLength\": 2}",
		  "\"abc\"", NULL },
		{ "{" D07 "\"definitions\": {\"s\": {\"type\": \"string\"}}, \"$ref\": "
		  "\"#/definitions/s\", \"maxLength\": 2}",
		  "1", "at /: 1 is not of type string (schema /definitions/s)" },
		/* cycles that consume no input */
		{ "{\"$ref\": \"#\"}", "1", "at /: schema recursion deeper than 64 (schema /)" },
		{ "{\"$ref\": \"\"}", "1", "at /: schema recursion deeper than 64 (schema /)" },
		{ "{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"$ref\": \"#/$defs/a\"}}, "
		  "\"properties\": {\"p\": {\"$ref\": \"#/$defs/a\"}}}",
		  "{\"p\": 1}", "*at /p: schema recursion deeper than 64 (schema /$defs/" },
		{ "{\"anyOf\": [{\"$ref\": \"#\"}, true]}", "1",
		  "at /: schema recursion deeper than 64 (schema /anyOf/0)" },
		{ "{\"not\": {\"$ref\": \"#\"}}", "1",
		  "at /: schema recursion deeper than 64 (schema /not)" },
		/* a cycle through the document ends with it */
		{ "{\"properties\": {\"a\": {\"$ref\": \"#\"}}}", "{\"a\": {\"a\": {}}}", NULL },
	};
	static const char tree[] = "{\"type\": \"object\", \"properties\": {\"value\": {\"type\": "
	                           "\"integer\"}, \"left\": {\"$ref\": \"#\"}, \"right\": "
	                           "{\"$ref\": \"#\"}}, \"required\": [\"value\"], "
	                           "\"additionalProperties\": false}";
	idem_jsonschema *s;
	char *doc;
	json_object *v;
	idem_error err = { 0 };

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));

	s = schema_of(tree);
	doc = tree_doc(50, "2");
	check_is(s, doc, NULL);
	free(doc);
	doc = tree_doc(64, "2");
	check_is(s, doc, NULL);
	free(doc);
	doc = tree_doc(3, "\"x\"");
	check_is(s, doc,
	         "at /left/left/value: 'x' is not of type integer (schema /properties/value)");
	free(doc);
	check_is(s, "{\"value\": 1, \"right\": {\"value\": 2, \"left\": {}}}",
	         "at /right/left: required property 'value' is missing (schema /)");
	/* 65 objects deep: the value of the last is 65 levels down */
	doc = tree_doc(65, "2");
	v = doc_of(doc);
	assert_int_equal(idem_jsonschema_check(s, v, &err), IDEM_ERR_KEY);
	msg_is(err.msg, "*: schema recursion deeper than 64 (schema /properties/value)");
	assert_true(strncmp(err.msg, "at /left/left/left/", 19) == 0);
	json_object_put(v);
	free(doc);
	/* a deep document is an error even where the schema does not look */
	doc = tree_doc(100, "2");
	v = doc_of(doc);
	assert_int_equal(idem_jsonschema_check(s, v, &err), IDEM_ERR_KEY);
	msg_is(err.msg, "*schema recursion deeper than 64");
	json_object_put(v);
	free(doc);
	idem_jsonschema_unref(s);

	schema_fails("{\"properties\": {\"a\": {\"$ref\": \"#/$defs/nope\"}}}",
	             "at /properties/a/$ref: '#/$defs/nope' names nothing in the schema");
	schema_fails("{\"$ref\": \"#/items/1\", \"items\": [true]}",
	             "at /$ref: '#/items/1' names nothing in the schema");
	schema_fails("{\"$ref\": \"#/allOf/01\", \"allOf\": [true, true]}",
	             "at /$ref: '#/allOf/01' names nothing in the schema");
	schema_fails("{\"$ref\": \"#/a~2\", \"a~2\": true}",
	             "at /$ref: '#/a~2' names nothing in the schema");
	schema_fails("{\"$ref\": \"#/a%00b\", \"a\": true}",
	             "at /$ref: '#/a%00b' names nothing in the schema");
	schema_fails("{\"$ref\": \"#/a%zz\"}", "at /$ref: '#/a%zz' is not a valid URI fragment");
	schema_fails("{\"properties\": {\"a\": {\"$ref\": \"other.json#/x\"}}}",
	             "at /properties/a/$ref: remote reference 'other.json#/x' is not one idemd "
	             "can check");
	schema_fails("{\"$ref\": \"https://example.com/s.json\"}",
	             "at /$ref: remote reference 'https://example.com/s.json' is not one idemd can "
	             "check");
	schema_fails("{\"$id\": \"https://example.com/a.json\", \"$ref\": \"b.json\"}",
	             "at /$ref: remote reference 'b.json' is not one idemd can check");
	schema_fails("{\"$ref\": \"#foo\"}",
	             "at /$ref: '#foo' names an anchor, which is not one idemd can check");
	schema_fails("{\"x\": {\"n\": 5}, \"$ref\": \"#/x/n\"}",
	             "at /x/n: a schema must be an object or a boolean, not a number");
	schema_fails("{\"$ref\": 5}", "at /: '$ref' must be a string");
}

static void test_refused_keywords(void **state)
{
	static const struct {
		const char *schema, *want;
	} cases[] = {
		{ "{\"properties\": {\"x\": {\"unevaluatedProperties\": false}}}",
		  "at /properties/x: keyword 'unevaluatedProperties' is not one idemd can check" },
		{ "{\"unevaluatedItems\": false}",
		  "at /: keyword 'unevaluatedItems' is not one idemd can check" },
		{ "{\"$dynamicRef\": \"#meta\"}",
		  "at /: keyword '$dynamicRef' is not one idemd can check" },
		{ "{\"$dynamicAnchor\": \"meta\"}",
		  "at /: keyword '$dynamicAnchor' is not one idemd can check" },
		{ "{\"$recursiveRef\": \"#\"}",
		  "at /: keyword '$recursiveRef' is not one idemd can check" },
		{ "{\"$recursiveAnchor\": true}",
		  "at /: keyword '$recursiveAnchor' is not one idemd can check" },
		{ "{\"items\": {\"$anchor\": \"item\"}}",
		  "at /items: keyword '$anchor' is not one idemd can check" },
		{ "{\"divisibleBy\": 2}",
		  "at /: keyword 'divisibleBy' is not one idemd can check" },
		{ "{\"disallow\": \"string\"}",
		  "at /: keyword 'disallow' is not one idemd can check" },
		{ "{\"extends\": {}}", "at /: keyword 'extends' is not one idemd can check" },
		{ "{\"properties\": {\"a\": {\"$id\": \"a.json\"}}}",
		  "at /properties/a: '$id' below the root (a schema resource of its own, for remote "
		  "references) is not one idemd can check" },
		{ "{\"maximum\": 5, \"exclusiveMaximum\": true}",
		  "at /: boolean 'exclusiveMaximum' is draft-04's form, not one idemd can check" },
		{ "{\"exclusiveMinimum\": false}",
		  "at /: boolean 'exclusiveMinimum' is draft-04's form, not one idemd can check" },
		{ "{" D202 "\"items\": [true]}",
		  "at /: 'items' must be a schema in draft 2020-12 (an array is draft-07's form: see "
		  "'prefixItems')" },
		{ "{\"items\": [true], \"prefixItems\": [true]}",
		  "at /: 'items' as an array and 'prefixItems' together" },
		{ "{\"$defs\": {\"a\": {\"$defs\": {\"b\": {\"unevaluatedItems\": true}}}}}",
		  "at /$defs/a/$defs/b: keyword 'unevaluatedItems' is not one idemd can check" },
	};

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++)
		schema_fails(cases[i].schema, cases[i].want);
}

static void test_ignored(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"x-foo\": {\"type\": 5}, \"connect.name\": \"x\", \"format\": \"email\", "
		  "\"title\": \"t\", \"description\": \"d\", \"default\": 1, \"examples\": [1], "
		  "\"readOnly\": true, \"writeOnly\": false, \"deprecated\": true, \"$comment\": "
		  "\"c\", \"contentEncoding\": \"base64\", \"contentMediaType\": \"application/json\", "
		  "\"contentSchema\": {\"type\": 5}, \"$vocabulary\": {}, \"$id\": \"urn:x\"}",
		  "\"not an email\"", NULL },
		{ "{\"format\": \"date-time\", \"type\": \"string\"}", "\"yesterday\"", NULL },
		/* not keywords of the draft the schema names */
		{ "{" D202 "\"$recursiveRef\": \"#\", \"$recursiveAnchor\": true}", "1", NULL },
		{ "{" D07 "\"unevaluatedProperties\": false, \"$anchor\": \"x\"}", "{\"a\": 1}",
		  NULL },
		{ "{\"$schema\": \"https://json-schema.org/draft/2019-09/schema\", \"items\": "
		  "[{\"type\": \"string\"}], \"dependentRequired\": {\"a\": [\"b\"]}}",
		  "[1]", "at /0: 1 is not of type string (schema /items/0)" },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

static void test_bad_schemas(void **state)
{
	static const struct {
		const char *schema, *want;
	} cases[] = {
		{ "{", "*not JSON: " },
		{ "", "*not JSON: " },
		{ "{} x", "not JSON: unexpected character at byte 3" },
		{ "{\"a\": 1,}", "*not JSON: " },
		{ "12", "at /: a schema must be an object or a boolean, not a number" },
		{ "null", "at /: a schema must be an object or a boolean, not null" },
		{ "\"s\"", "at /: a schema must be an object or a boolean, not a string" },
		{ "[true]", "at /: a schema must be an object or a boolean, not an array" },
		{ "{\"properties\": {\"a\": 5}}",
		  "at /properties/a: a schema must be an object or a boolean, not a number" },
		{ "{\"properties\": {\"id\": {\"type\": 5}}}",
		  "at /properties/id: 'type' must be a string or an array of strings" },
		{ "{\"type\": []}", "at /: 'type' must be a string or an array of strings" },
		{ "{\"type\": [\"string\", 1]}",
		  "at /: 'type' must be a string or an array of strings" },
		{ "{\"type\": \"strin\"}", "at /: 'type' names unknown type 'strin'" },
		{ "{\"type\": [\"string\", \"it's\"]}",
		  "at /: 'type' names unknown type 'it\\'s'" },
		{ "{\"enum\": 5}", "at /: 'enum' must be an array" },
		{ "{\"multipleOf\": 0}", "at /: 'multipleOf' must be greater than 0" },
		{ "{\"multipleOf\": -0.5}", "at /: 'multipleOf' must be greater than 0" },
		{ "{\"maximum\": \"5\"}", "at /: 'maximum' must be a number" },
		{ "{\"minLength\": -1}", "at /: 'minLength' must be a non-negative integer" },
		{ "{\"maxItems\": 1.5}", "at /: 'maxItems' must be a non-negative integer" },
		{ "{\"minContains\": \"1\"}",
		  "at /: 'minContains' must be a non-negative integer" },
		{ "{\"required\": [1]}", "at /: 'required' must be an array of strings" },
		{ "{\"required\": \"a\"}", "at /: 'required' must be an array of strings" },
		{ "{\"allOf\": []}", "at /: 'allOf' must be a non-empty array of schemas" },
		{ "{\"oneOf\": {}}", "at /: 'oneOf' must be a non-empty array of schemas" },
		{ "{\"anyOf\": [true, 1]}",
		  "at /anyOf/1: a schema must be an object or a boolean, not a number" },
		{ "{\"prefixItems\": []}",
		  "at /: 'prefixItems' must be a non-empty array of schemas" },
		{ "{\"properties\": []}", "at /: 'properties' must be an object of schemas" },
		{ "{\"$defs\": 1}", "at /: '$defs' must be an object of schemas" },
		{ "{\"uniqueItems\": 1}", "at /: 'uniqueItems' must be a boolean" },
		{ "{\"$schema\": 5}", "at /: '$schema' must be a string" },
		{ "{\"$id\": 5}", "at /: '$id' must be a string" },
		{ "{\"dependentRequired\": {\"a\": [1]}}",
		  "at /: 'dependentRequired' must hold arrays of strings" },
		{ "{\"dependentRequired\": []}", "at /: 'dependentRequired' must be an object" },
		{ "{\"dependencies\": {\"a\": 5}}",
		  "at /dependencies/a: a schema must be an object or a boolean, not a number" },
		{ "{\"dependencies\": {\"a\": [5]}}",
		  "at /: 'dependencies' must hold arrays of strings or schemas" },
		{ "{\"not\": null}", "at /not: a schema must be an object or a boolean, not null" },
	};
	struct idem_buf deep = { 0 };
	idem_jsonschema *s = NULL;
	idem_error err = { 0 };

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++)
		schema_fails(cases[i].schema, cases[i].want);
	/* white space after the value */
	idem_jsonschema_unref(schema_of("{} \n\t"));
	/* a NUL byte, counted by length */
	assert_int_equal(idem_jsonschema_new("{}\0", 3, &s, &err), IDEM_ERR_INVALID);
	assert_string_equal(err.msg, "not JSON: NUL byte at byte 2");
	assert_null(s);

	/* 64 levels of subschemas, then 65 */
	for (int i = 0; i < 64; i++)
		assert_int_equal(idem_buf_append_str(&deep, "{\"items\": "), IDEM_OK);
	assert_int_equal(idem_buf_append_str(&deep, "true"), IDEM_OK);
	for (int i = 0; i < 64; i++)
		assert_int_equal(idem_buf_append_str(&deep, "}"), IDEM_OK);
	s = schema_of(deep.data);
	idem_jsonschema_unref(s);
	idem_buf_reset(&deep);
	for (int i = 0; i < 65; i++)
		assert_int_equal(idem_buf_append_str(&deep, "{\"items\": "), IDEM_OK);
	assert_int_equal(idem_buf_append_str(&deep, "true"), IDEM_OK);
	for (int i = 0; i < 65; i++)
		assert_int_equal(idem_buf_append_str(&deep, "}"), IDEM_OK);
	s = NULL;
	assert_int_equal(idem_jsonschema_new(deep.data, deep.len, &s, &err), IDEM_ERR_INVALID);
	assert_null(s);
	msg_is(err.msg, "*...: schema nested deeper than 64 levels");
	assert_true(strncmp(err.msg, "at /items/items/", 16) == 0);
	idem_buf_done(&deep);
	/* no error detail wanted */
	assert_int_equal(idem_jsonschema_new("{", 1, &s, NULL), IDEM_ERR_INVALID);
}

/* Names and strings from documents cannot forge a log line. */
static void test_escaping(void **state)
{
	static const struct doc_case cases[] = {
		{ "{\"required\": [\"a\\nb\\u202ec\"]}", "{}",
		  "at /: required property 'a\\x0ab\\u{202E}c' is missing (schema /)" },
		{ "{\"additionalProperties\": {\"type\": \"string\"}}", "{\"x\\ny\\u202e\": 1}",
		  "at /x\\x0ay\\u{202E}: 1 is not of type string (schema /additionalProperties)" },
		{ "{\"additionalProperties\": false}", "{\"it's\\r\\n\": 1}",
		  "at /: property 'it\\'s\\x0d\\x0a' is not allowed by additionalProperties (schema /)" },
		{ "{\"type\": \"integer\"}", "\"a\\nb'\\u001b[2J\"",
		  "at /: 'a\\x0ab\\'\\x1b[2J' is not of type integer (schema /)" },
		{ "{\"properties\": {\"a\\\\b\": {\"type\": \"null\"}}}", "{\"a\\\\b\": 1}",
		  "at /a\\\\b: 1 is not of type null (schema /properties/a\\\\b)" },
		{ "{\"propertyNames\": {\"pattern\": \"^[a-z]+$\"}}",
		  "{\"ok\": 1, \"b\\u2066ad\": 2}",
		  "at /: 'b\\u{2066}ad' does not match pattern '^[a-z]+$' (schema /propertyNames)" },
	};

	(void)state;
	run(cases, IDEM_ARRAY_SIZE(cases));
}

static void test_null_and_no_err(void **state)
{
	idem_jsonschema *s = schema_of("{\"type\": \"null\"}");
	json_object *v = doc_of("1");

	(void)state;
	assert_int_equal(idem_jsonschema_check(s, NULL, NULL), IDEM_OK);
	assert_int_equal(idem_jsonschema_check(s, v, NULL), IDEM_ERR_KEY);
	json_object_put(v);
	idem_jsonschema_unref(s);
	idem_jsonschema_unref(NULL);
}

static void test_refcount(void **state)
{
	idem_jsonschema *s = schema_of("{\"type\": \"string\", \"pattern\": \"a\"}");

	(void)state;
	assert_ptr_equal(idem_jsonschema_ref(s), s);
	idem_jsonschema_unref(s);
	check_is(s, "\"a\"", NULL); /* still held */
	idem_jsonschema_unref(s);
}

/* Two threads check the same documents against one schema at once. */
struct thread_arg {
	const idem_jsonschema *s;
	json_object **docs;
	size_t n;
	const idem_status *want;
	const char *const *msgs;
	int bad; /* answers that differed */
};

static void *check_thread(void *p)
{
	struct thread_arg *a = p;

	for (int round = 0; round < 300; round++) {
		for (size_t i = 0; i < a->n; i++) {
			idem_error err = { 0 };
			idem_status r = idem_jsonschema_check(a->s, a->docs[i], &err);

			if (r != a->want[i] || strcmp(err.msg, a->msgs[i]) != 0)
				a->bad++;
		}
	}
	return NULL;
}

static void test_threads(void **state)
{
	static const char schema[] =
	        "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"name\": "
	        "{\"type\": \"string\", \"pattern\": \"^[\\\\w.-]+$\"}, \"kids\": {\"type\": "
	        "\"array\", \"uniqueItems\": true, \"items\": {\"$ref\": \"#/$defs/node\"}}}, "
	        "\"required\": [\"name\"]}}, \"$ref\": \"#/$defs/node\"}";
	static const char *const texts[] = {
		"{\"name\": \"root\", \"kids\": [{\"name\": \"a\"}, {\"name\": \"b.c\"}]}",
		"{\"name\": \"root\", \"kids\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}",
		"{\"name\": \"r oot\"}",
		"{\"kids\": []}",
		"{\"name\": \"x\", \"kids\": [{\"name\": \"y\", \"kids\": [{\"name\": 5}]}]}",
	};
	static const char *const msgs[] = {
		"",
		"at /kids: items 0 and 1 are equal, and uniqueItems is true (schema "
		"/$defs/node/properties/kids)",
		"at /name: 'r oot' does not match pattern '^[\\\\w.-]+$' (schema "
		"/$defs/node/properties/name)",
		"at /: required property 'name' is missing (schema /$defs/node)",
		"at /kids/0/kids/0/name: 5 is not of type string (schema /$defs/node/properties/name)",
	};
	static const idem_status want[] = { IDEM_OK, IDEM_ERR_KEY, IDEM_ERR_KEY, IDEM_ERR_KEY,
		                            IDEM_ERR_KEY };
	json_object *docs[IDEM_ARRAY_SIZE(texts)];
	idem_jsonschema *s = schema_of(schema);
	struct thread_arg args[2];
	pthread_t th[2];

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(texts); i++) {
		docs[i] = doc_of(texts[i]);
		check_is(s, texts[i], want[i] == IDEM_OK ? NULL : msgs[i]);
	}
	for (int t = 0; t < 2; t++) {
		args[t] = (struct thread_arg){ s, docs, IDEM_ARRAY_SIZE(texts), want, msgs, 0 };
		assert_int_equal(pthread_create(&th[t], NULL, check_thread, &args[t]), 0);
	}
	for (int t = 0; t < 2; t++) {
		assert_int_equal(pthread_join(th[t], NULL), 0);
		assert_int_equal(args[t].bad, 0);
	}
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(texts); i++)
		json_object_put(docs[i]);
	idem_jsonschema_unref(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_types),
		cmocka_unit_test(test_const_enum),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_patterns),
		cmocka_unit_test(test_patterns_refused),
		cmocka_unit_test(test_arrays),
		cmocka_unit_test(test_objects),
		cmocka_unit_test(test_logic),
		cmocka_unit_test(test_refs),
		cmocka_unit_test(test_refused_keywords),
		cmocka_unit_test(test_ignored),
		cmocka_unit_test(test_bad_schemas),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_null_and_no_err),
		cmocka_unit_test(test_refcount),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
