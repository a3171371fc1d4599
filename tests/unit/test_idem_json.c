/*
 * test_idem_json.c - the allocation-free JSON reader: what it vouches for, what it leaves to
 * json-c, and that json: fields give the same through either (idem_field_get, idem_key_build).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* A one-segment pointer: "/name", nothing after. */
static bool one_segment(const char *ptr)
{
	return ptr[0] == '/' && strchr(ptr + 1, '/') == NULL;
}

/*
 * The value read once (idem_json_members_read()) answers every case of a one-segment pointer
 * into a root object exactly as a pass of its own (idem_json_scalar()) would, and leaves only
 * the rest to it.
 */
static void test_members_cases(void **state)
{
	size_t answered = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct jcase *c = &cases[i];
		struct idem_json_members ms;
		const char *p = NULL, *q = NULL;
		size_t n = 0, qn = 0;
		bool plain = idem_json_members_read(c->doc, strlen(c->doc), &ms);
		bool alone = idem_json_scalar(c->doc, strlen(c->doc), c->ptr, &q, &qn);
		int r = idem_json_members_scalar(&ms, c->ptr, &p, &n);

		print_message("case %zu: %s at '%s' -> %d\n", i, c->doc, c->ptr, r);
		assert_int_equal(plain, ms.plain);
		if (r < 0) {
			/* Only what the members cannot tell goes to a pass of its own. */
			assert_true(plain);
			assert_true(!one_segment(c->ptr) || !ms.object);
			continue;
		}
		/* Every one-segment pointer into a plain root object is answered here. */
		answered++;
		assert_int_equal(r == 1, alone);
		if (r == 1) {
			assert_int_equal(n, qn);
			assert_ptr_equal(p, q);
		}
		if (plain && ms.object)
			assert_true(one_segment(c->ptr));
		if (!plain) /* a document not in the narrow form is json-c's, for every pointer */
			assert_int_equal(r, 0);
	}
	assert_true(answered >= 30); /* 36 of the 48 */
}

/* Every member of a root object, and the cases where the members cannot tell. */
static void test_members_doc(void **state)
{
	static const char doc[] =
	        " {\"payment_id\" : \"pay-7\", \"account\":\"acct-1\",\"amount\":250, \"n\":null,"
	        "\"o\":{\"amount\":1},\"a\":[1],\"z\":-0,\"t\":true,\"a~b\":\"tilde\",\"c/d\":\"slash\"}";
	struct idem_json_members ms;
	const char *p;
	size_t n;
	char big[2048], *w = big;

	(void)state;
	assert_true(idem_json_members_read(doc, sizeof(doc) - 1, &ms));
	assert_true(ms.object);
	assert_false(ms.overflow);
	assert_int_equal(ms.n, 10);
	assert_int_equal(idem_json_members_scalar(&ms, "/payment_id", &p, &n), 1);
	assert_int_equal(n, 5);
	assert_memory_equal(p, "pay-7", 5);
	assert_int_equal(idem_json_members_scalar(&ms, "/account", &p, &n), 1);
	assert_memory_equal(p, "acct-1", 6);
	assert_int_equal(idem_json_members_scalar(&ms, "/amount", &p, &n), 1);
	assert_int_equal(n, 3);
	assert_memory_equal(p, "250", 3);
	assert_int_equal(idem_json_members_scalar(&ms, "/t", &p, &n), 1);
	assert_memory_equal(p, "true", 4);
	assert_int_equal(idem_json_members_scalar(&ms, "/a~0b", &p, &n), 1);
	assert_memory_equal(p, "tilde", 5);
	assert_int_equal(idem_json_members_scalar(&ms, "/c~1d", &p, &n), 1);
	assert_memory_equal(p, "slash", 5);
	/* null, containers, -0 and absent names are json-c's to answer; deeper pointers are
	 * not the members'. */
	assert_int_equal(idem_json_members_scalar(&ms, "/n", &p, &n), 0);
	assert_int_equal(idem_json_members_scalar(&ms, "/o", &p, &n), 0);
	assert_int_equal(idem_json_members_scalar(&ms, "/a", &p, &n), 0);
	assert_int_equal(idem_json_members_scalar(&ms, "/z", &p, &n), 0);
	assert_int_equal(idem_json_members_scalar(&ms, "/nope", &p, &n), 0);
	assert_int_equal(idem_json_members_scalar(&ms, "/o/amount", &p, &n), -1);
	assert_int_equal(idem_json_members_scalar(&ms, "", &p, &n), -1);

	/* More members than are noted: a name could come again past them. */
	w += sprintf(w, "{");
	for (int i = 0; i < IDEM_JSON_MEMBERS + 8; i++)
		w += sprintf(w, "%s\"k%d\":%d", i > 0 ? "," : "", i % (IDEM_JSON_MEMBERS + 4), i);
	sprintf(w, "}");
	assert_true(idem_json_members_read(big, strlen(big), &ms));
	assert_true(ms.overflow);
	assert_int_equal(idem_json_members_scalar(&ms, "/k1", &p, &n), -1);
	assert_false(idem_json_scalar(big, strlen(big), "/k1", &p, &n)); /* named twice */
	assert_true(idem_json_scalar(big, strlen(big), "/k5", &p, &n));

	/* A root that is not an object. */
	assert_true(idem_json_members_read("[1,2]", 5, &ms));
	assert_false(ms.object);
	assert_int_equal(idem_json_members_scalar(&ms, "/0", &p, &n), -1);
}

/*
 * Several json: fields of one message through one document, then the next message in the same
 * buffer: each field reads its own message (the value is read once per message, and
 * idem_jsondoc_reset() forgets it), the same as json-c alone.
 */
static void test_fields_of_one_message(void **state)
{
	static const char *const names[] = { "json:/id",  "json:/account", "json:/amount",
		                             "json:/a/b", "json:/nope",    "json:/amount" };
	static const char *const docs[] = {
		"{\"id\":\"pay-1\",\"account\":\"acct-1\",\"amount\":10,\"a\":{\"b\":\"deep\"}}",
		"{\"amount\":2000,\"account\":\"acct-two\",\"id\":\"pay-2\",\"a\":{\"b\":\"DEEP\"}}",
		"{\"id\":\"pay-3\",\"id\":\"x\",\"amount\":\"30\",\"a\":{\"b\":null}}",
		"{\"id\":\"pay-4\",\"account\":\"\\u0041\",\"amount\":40,\"a\":{\"b\":4}}",
	};
	struct idem_jsondoc fast, slow;
	struct idem_field f[6];
	char buf[128];
	struct idem_msgview m = { 0 };

	(void)state;
	for (size_t k = 0; k < 6; k++)
		assert_int_equal(idem_field_parse(names[k], &f[k], NULL, 0), IDEM_OK);
	idem_jsondoc_init(&fast);
	idem_jsondoc_init(&slow);
	slow.json_c_only = true;
	m.topic = "t";
	m.timestamp_ms = -1;
	m.value = buf;
	for (size_t d = 0; d < 4; d++) {
		/* The same address and the same length for every message. */
		memset(buf, ' ', sizeof(buf));
		memcpy(buf, docs[d], strlen(docs[d]));
		m.value_len = sizeof(buf);
		idem_jsondoc_reset(&fast);
		idem_jsondoc_reset(&slow);
		for (size_t k = 0; k < 6; k++) {
			struct outcome a = { 0 }, b = { 0 };

			a.r = idem_field_get(&f[k], &m, &fast, NULL, &a.out, &a.null, &a.err);
			b.r = idem_field_get(&f[k], &m, &slow, NULL, &b.out, &b.null, &b.err);
			print_message("doc %zu field %s\n", d, names[k]);
			assert_same(&a, &b);
			idem_buf_done(&a.out);
			idem_buf_done(&b.out);
		}
	}
	/* The second message's fields are its own. */
	{
		struct idem_buf out = { 0 };
		bool null = false;
		idem_error err = { 0 };

		memset(buf, ' ', sizeof(buf));
		memcpy(buf, docs[1], strlen(docs[1]));
		idem_jsondoc_reset(&fast);
		assert_int_equal(idem_field_get(&f[0], &m, &fast, NULL, &out, &null, &err),
		                 IDEM_OK);
		assert_int_equal(out.len, 5);
		assert_memory_equal(out.data, "pay-2", 5);
		idem_buf_done(&out);
	}
	for (size_t k = 0; k < 6; k++)
		idem_field_done(&f[k]);
	idem_jsondoc_done(&fast);
	idem_jsondoc_done(&slow);
}

/* nested(levels): {"k":"v","a":[[...1...]]} with @levels containers in all (the root counts). */
static char *nested(size_t levels)
{
	size_t arrays = levels - 1, n = 0;
	char *d = malloc(arrays * 2 + 32);

	assert_non_null(d);
	n += (size_t)sprintf(d, "{\"k\":\"v\",\"a\":");
	memset(d + n, '[', arrays);
	n += arrays;
	d[n++] = '1';
	memset(d + n, ']', arrays);
	n += arrays;
	d[n++] = '}';
	d[n] = '\0';
	return d;
}

/* The scanner recurses once per container: IDEM_JSON_DEPTH containers are read, one more is
 * "not known" (json-c, which does not recurse, answers), and so is a document nested 200,000
 * deep, without exhausting the stack. */
static void test_depth_bound(void **state)
{
	const size_t levels[] = { IDEM_JSON_DEPTH, IDEM_JSON_DEPTH + 1, 200000 };
	(void)state;

	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		char *d = nested(levels[i]);
		const char *p = NULL;
		size_t n = 0;
		bool known = idem_json_scalar(d, strlen(d), "/k", &p, &n);

		assert_int_equal(known, levels[i] <= IDEM_JSON_DEPTH);
		if (known)
			assert_true(n == 1 && p[0] == 'v');
		free(d);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scalar_cases),   cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_same_as_json_c), cmocka_unit_test(test_members_cases),
		cmocka_unit_test(test_members_doc),    cmocka_unit_test(test_fields_of_one_message),
		cmocka_unit_test(test_depth_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
