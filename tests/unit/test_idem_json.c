/*
 * test_idem_json.c - the allocation-free JSON reader: what it vouches for, what it leaves to
 * json-c, and that json: fields give the same through either (idem_field_get, idem_key_build).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "idem_field.h"
#include "idem_json.h"
/* cmocka.h needs the headers above. */
#include <cmocka.h>

struct jcase {
	const char *doc;
	const char *ptr;
	const char *want; /* NULL: not known here, json-c decides */
};

static const struct jcase cases[] = {
	/* Plain scalars are read in place. */
	{ "{\"id\":\"pay-1\",\"amount\":250}", "/id", "pay-1" },
	{ "{\"id\":\"pay-1\",\"amount\":250}", "/amount", "250" },
	{ " { \"a\" : { \"b\" : [ 10 , -2.50e+3 , true ] } } ", "/a/b/1", "-2.50e+3" },
	{ "{\"a\":{\"b\":[10,-2.5,true]}}", "/a/b/2", "true" },
	{ "{\"a\":[false]}", "/a/0", "false" },
	{ "\"whole\"", "", "whole" },
	{ "42", "", "42" },
	{ "{\"a/b\":\"slash\",\"m~n\":\"tilde\"}", "/a~1b", "slash" },
	{ "{\"a/b\":\"slash\",\"m~n\":\"tilde\"}", "/m~0n", "tilde" },
	{ "{\"\":\"empty name\"}", "/", "empty name" },
	{ "{\"k\":\"caf\xc3\xa9 \xf0\x9f\x92\xb3\"}", "/k", "caf\xc3\xa9 \xf0\x9f\x92\xb3" },
	{ "{\"k\":\"\"}", "/k", "" },
	{ "{\"k\":0}", "/k", "0" },
	{ "{\"k\":-7}", "/k", "-7" },
	{ "{\"k\":999999999999999999}", "/k", "999999999999999999" },
	{ "{\"k\":1E5}", "/k", "1E5" },
	{ "{\"x\":{\"k\":1},\"k\":2}", "/k", "2" },
	/* Left to json-c: not found, null, containers, escapes, names twice, odd numbers. */
	{ "{\"id\":\"pay-1\"}", "/nope", NULL },
	{ "{\"id\":null}", "/id", NULL },
	{ "{\"id\":{\"a\":1}}", "/id", NULL },
	{ "{\"id\":[1]}", "/id", NULL },
	{ "{\"id\":\"a\\\"b\"}", "/id", NULL },
	{ "{\"id\":\"x\",\"other\":\"\\u00e9\"}", "/id", NULL },
	{ "{\"id\":\"first\",\"id\":\"second\"}", "/id", NULL },
	{ "{\"a\":{\"b\":1},\"a\":{\"c\":2}}", "/a/b", NULL },
	{ "{\"a\":{\"b\":1},\"a\":{\"b\":2}}", "/a/b", NULL },
	{ "{\"a\":[{\"b\":1}],\"a\":[]}", "/a/0/b", NULL },
	{ "{\"x\":{\"b\":1},\"x\":2,\"a\":{\"b\":3}}", "/a/b", "3" },
	{ "{\"id\":-0}", "/id", NULL },
	{ "{\"id\":01}", "/id", NULL },
	{ "{\"id\":1234567890123456789}", "/id", NULL },
	{ "{\"id\":1e100}", "/id", NULL },
	{ "{\"id\":1.}", "/id", NULL },
	{ "{\"id\":.5}", "/id", NULL },
	{ "{\"id\":+1}", "/id", NULL },
	{ "{\"id\":NaN}", "/id", NULL },
	{ "{\"id\":\"tab\there\"}", "/id", NULL },
	{ "{\"id\":\"\xc3\x28\"}", "/id", NULL },
	{ "{\"id\":\"x\",}", "/id", NULL },
	{ "{\"id\":\"x\"} x", "/id", NULL },
	{ "{\"id\":\"x\"}\f", "/id", NULL },
	{ "{\"id\":truex}", "/id", NULL },
	{ "{'id':'x'}", "/id", NULL },
	{ "{\"id\":\"x\" /* c */}", "/id", NULL },
	{ "", "", NULL },
	{ "[1,2]", "/01", NULL },
	{ "[1,2]", "/2", NULL },
	{ "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "/0", NULL },
};

static void test_scalar_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct jcase *c = &cases[i];
		const char *p = NULL;
		size_t n = 0;
		bool got = idem_json_scalar(c->doc, strlen(c->doc), c->ptr, &p, &n);

		print_message("case %zu: %s at '%s'\n", i, c->doc, c->ptr);
		assert_int_equal(got, c->want != NULL);
		if (c->want != NULL) {
			assert_int_equal(n, strlen(c->want));
			assert_memory_equal(p, c->want, n);
		}
	}
}

/* A NUL byte is never vouched for, wherever it is. */
static void test_nul_byte(void **state)
{
	static const char doc[] = "{\"id\":\"a\0b\",\"k\":1}";
	static const char doc2[] = "{\"k\":1\0}";
	const char *p;
	size_t n;

	(void)state;
	assert_false(idem_json_scalar(doc, sizeof(doc) - 1, "/k", &p, &n));
	assert_false(idem_json_scalar(doc2, sizeof(doc2) - 1, "/k", &p, &n));
}

struct outcome {
	idem_status r;
	bool null;
	struct idem_buf out;
	idem_error err;
};

/* Field @name of @m as a parameter or (@as_key) as a business key, through one reader or both. */
static void run(const char *name, bool as_key, const struct idem_msgview *m, bool json_c_only,
                struct outcome *o)
{
	struct idem_field f;
	struct idem_template t;
	struct idem_jsondoc doc;

	idem_jsondoc_init(&doc);
	doc.json_c_only = json_c_only;
	memset(&o->err, 0, sizeof(o->err));
	o->null = false;
	if (as_key) {
		assert_int_equal(idem_template_parse(name, &t, NULL, 0), IDEM_OK);
		o->r = idem_key_build(&t, m, &doc, 512, &o->out, &o->err);
		idem_template_done(&t);
	} else {
		assert_int_equal(idem_field_parse(name, &f, NULL, 0), IDEM_OK);
		o->r = idem_field_get(&f, m, &doc, NULL, &o->out, &o->null, &o->err);
		idem_field_done(&f);
	}
	idem_jsondoc_done(&doc);
}

static void assert_same(const struct outcome *a, const struct outcome *b)
{
	assert_int_equal(a->r, b->r);
	assert_string_equal(a->err.msg, b->err.msg);
	if (a->r != IDEM_OK)
		return;
	assert_int_equal(a->null, b->null);
	assert_int_equal(a->out.len, b->out.len);
	if (a->out.len > 0)
		assert_memory_equal(a->out.data, b->out.data, a->out.len);
}

/* Every case, as a parameter and as a business key: the same with or without the fast reader. */
static void test_same_as_json_c(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct jcase *c = &cases[i];
		struct idem_msgview m = { 0 };
		struct outcome fast = { 0 }, slow = { 0 };
		char name[128];

		snprintf(name, sizeof(name), "json:%s", c->ptr);
		m.topic = "t";
		m.value = c->doc;
		m.value_len = strlen(c->doc);
		m.timestamp_ms = -1;
		print_message("case %zu: %s at '%s'\n", i, c->doc, c->ptr);
		run(name, false, &m, false, &fast);
		run(name, false, &m, true, &slow);
		assert_same(&fast, &slow);
		if (c->want != NULL) {
			assert_int_equal(slow.r, IDEM_OK);
			assert_false(slow.null);
			assert_int_equal(slow.out.len, strlen(c->want));
			assert_memory_equal(slow.out.data, c->want, slow.out.len);
		}
		run(name, true, &m, false, &fast);
		run(name, true, &m, true, &slow);
		assert_same(&fast, &slow);
		idem_buf_done(&fast.out);
		idem_buf_done(&slow.out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scalar_cases),
		cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_same_as_json_c),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
