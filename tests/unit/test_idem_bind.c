/*
 * Unit tests for idem_bind: array literals for set-mode handlers and the claim (NULL elements,
 * quoting, NUL refused, binary keys), and row binding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "idem_bind.h"

struct fixture {
	struct idem_cfg cfg;
	struct idem_route route;
	struct idem_field params[3];
	struct idem_batch b;
	struct idem_bind bd;
};

static int setup(void **state)
{
	static struct fixture fx;
	static char rname[] = "r", cname[] = "c";
	char errbuf[256];

	memset(&fx, 0, sizeof(fx));
	fx.cfg.max_key_bytes = 64;
	fx.cfg.max_message_bytes = 1024;
	fx.route.name = rname;
	fx.route.consumer = cname;
	fx.route.handler_mode = IDEM_CFG_MODE_SET;
	assert_int_equal(idem_template_parse("${key}", &fx.route.key, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(idem_field_parse("business_key", &fx.params[0], errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(idem_field_parse("value", &fx.params[1], errbuf, sizeof(errbuf)), IDEM_OK);
	assert_int_equal(idem_field_parse("header:h", &fx.params[2], errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	fx.route.params = fx.params;
	fx.route.n_params = 3;
	assert_int_equal(idem_batch_init(&fx.b, &fx.route, "payments", 3), IDEM_OK);
	idem_bind_init(&fx.bd);
	*state = &fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	idem_bind_done(&fx->bd);
	idem_batch_done(&fx->b);
	idem_template_done(&fx->route.key);
	for (size_t p = 0; p < 3; p++)
		idem_field_done(&fx->params[p]);
	return 0;
}

static void add(struct fixture *fx, int64_t offset, const void *key, size_t key_len,
                const char *value, const char *header)
{
	struct idem_header h = { "h", header, header ? strlen(header) : 0 };
	struct idem_msgview m = { 0 };

	m.topic = "payments";
	m.partition = 3;
	m.offset = offset;
	m.timestamp_ms = 1000;
	m.key = key;
	m.key_len = key_len;
	m.value = value;
	m.value_len = strlen(value);
	m.headers = header ? &h : NULL;
	m.n_headers = header ? 1 : 0;
	assert_int_equal(idem_batch_add(&fx->b, &m, &fx->cfg, 0), IDEM_OK);
}

static void text_elem(struct idem_buf *a, const char *s, bool null)
{
	assert_int_equal(idem_bind_text_elem(a, s, s ? strlen(s) : 0, null), IDEM_OK);
}

static void test_literal_quoting(void **state)
{
	struct idem_buf a = { 0 };

	(void)state;
	assert_int_equal(idem_pgarray_open(&a), IDEM_OK);
	text_elem(&a, "plain", false);
	text_elem(&a, NULL, true);
	text_elem(&a, "{a,b}", false);
	text_elem(&a, "say \"hi\"", false);
	text_elem(&a, "back\\slash", false);
	text_elem(&a, "", false);
	text_elem(&a, "NULL", false);
	text_elem(&a, " spaced ", false);
	text_elem(&a, "'); DROP TABLE ledger; --", false);
	assert_int_equal(idem_pgarray_close(&a), IDEM_OK);
	/* Every element quoted, so the word NULL, braces, commas and blanks stay text; only a
	 * NULL element is the bare NULL. */
	assert_string_equal(a.data,
	                    "{\"plain\",NULL,\"{a,b}\",\"say \\\"hi\\\"\",\"back\\\\slash\","
	                    "\"\",\"NULL\",\" spaced \",\"'); DROP TABLE ledger; --\"}");
	idem_buf_done(&a);
}

static void test_literal_refuses_nul(void **state)
{
	struct idem_buf a = { 0 };

	(void)state;
	assert_int_equal(idem_pgarray_open(&a), IDEM_OK);
	assert_int_equal(idem_bind_text_elem(&a, "a\0b", 3, false), IDEM_ERR_INVALID);
	/* A NULL element has no bytes to check. */
	assert_int_equal(idem_bind_text_elem(&a, NULL, 0, true), IDEM_OK);
	idem_buf_done(&a);
}

static void test_empty_array(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(idem_bind_set_open(&fx->bd, 3), IDEM_OK);
	assert_int_equal(idem_bind_set_close(&fx->bd, 3), IDEM_OK);
	for (size_t p = 0; p < 3; p++)
		assert_string_equal(fx->bd.vals[p], "{}");
}

/* One text[] per parameter, one element per message in the order added, NULL for absent. */
static void test_set_arrays(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	static const char bin[] = { 'k', (char)0xff, 0 };

	add(fx, 10, "k1", 2, "{\"a\":1}", "x,y");
	add(fx, 11, "k2", 2, "v\\2", NULL);
	add(fx, 12, bin, 2, "v3", "\"q\"");
	assert_int_equal(b->n_msgs, 3);
	/* A key that is not UTF-8 is the text \x plus hex: one-to-one, and text-safe. */
	assert_string_equal(idem_batch_ptr(b, b->msgs[2].bkey), "\\x6bff");

	assert_int_equal(idem_bind_set_open(&fx->bd, 3), IDEM_OK);
	assert_int_equal(idem_bind_set_add(&fx->bd, b, 2), IDEM_OK);
	assert_int_equal(idem_bind_set_add(&fx->bd, b, 0), IDEM_OK);
	assert_int_equal(idem_bind_set_add(&fx->bd, b, 1), IDEM_OK);
	assert_int_equal(idem_bind_set_close(&fx->bd, 3), IDEM_OK);
	assert_string_equal(fx->bd.vals[0], "{\"\\\\x6bff\",\"k1\",\"k2\"}");
	assert_string_equal(fx->bd.vals[1], "{\"v3\",\"{\\\"a\\\":1}\",\"v\\\\2\"}");
	assert_string_equal(fx->bd.vals[2], "{\"\\\"q\\\"\",\"x,y\",NULL}");

	/* Reused: a second transaction starts from empty arrays. */
	assert_int_equal(idem_bind_set_open(&fx->bd, 3), IDEM_OK);
	assert_int_equal(idem_bind_set_add(&fx->bd, b, 1), IDEM_OK);
	assert_int_equal(idem_bind_set_close(&fx->bd, 3), IDEM_OK);
	assert_string_equal(fx->bd.vals[0], "{\"k2\"}");
	assert_string_equal(fx->bd.vals[2], "{NULL}");
}

static void test_row(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;

	add(fx, 10, "k1", 2, "v1", NULL);
	assert_int_equal(idem_bind_row(&fx->bd, b, 0), IDEM_OK);
	assert_string_equal(fx->bd.vals[0], "k1");
	assert_string_equal(fx->bd.vals[1], "v1");
	assert_null(fx->bd.vals[2]);
}

/* Element @k of the claim's binary array parameter @p, as text (numbers as 8-byte values). */
static const char *claim_elem(const struct idem_bind_claim *c, int p, size_t k, size_t *ret_n)
{
	const char *e;
	bool null;

	assert_int_equal(c->fmts[p], 1);
	assert_true(idem_pgbin_get(c->vals[p], (size_t)c->lens[p], k, &e, ret_n, &null, NULL));
	assert_false(null);
	return e;
}

static int64_t be64(const char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | (unsigned char)p[i];
	return (int64_t)v;
}

/*
 * The claim's parameters: consumer, topic and partition as text; keys (text), offsets (bigint)
 * and payload hashes (the hash's bytes, not its hex) as binary arrays, in key order.
 */
static void test_claim(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	struct idem_bind_claim c;
	const char *e;
	size_t n, count;
	bool null;

	add(fx, 10, "b\"", 2, "v1", NULL);
	add(fx, 11, "a", 1, "v2", NULL);
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	assert_int_equal(idem_bind_claim(&fx->bd, b, b->order, b->n_order, &c), IDEM_OK);
	assert_string_equal(c.vals[0], "c");
	assert_string_equal(c.vals[1], "payments");
	assert_string_equal(c.vals[2], "3");
	for (int p = 0; p < 3; p++)
		assert_int_equal(c.fmts[p], 0);
	e = claim_elem(&c, 3, 0, &n);
	assert_int_equal(n, 1);
	assert_memory_equal(e, "a", 1);
	e = claim_elem(&c, 3, 1, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(e, "b\"", 2);
	assert_false(idem_pgbin_get(c.vals[3], (size_t)c.lens[3], 2, &e, &n, &null, &count));
	assert_int_equal(count, 2);
	e = claim_elem(&c, 4, 0, &n);
	assert_int_equal(n, 8);
	assert_int_equal(be64(e), 11);
	e = claim_elem(&c, 4, 1, &n);
	assert_int_equal(be64(e), 10);
	for (size_t k = 0; k < 2; k++) {
		const struct idem_batch_msg *m = &b->msgs[b->order[k]];
		const char *hex = idem_batch_ptr(b, m->hash);

		e = claim_elem(&c, 5, k, &n);
		assert_int_equal(n * 2, m->hash.len);
		for (size_t i = 0; i < n; i++)
			assert_int_equal((unsigned char)e[i],
			                 idem_hex_digit(hex[2 * i]) * 16 +
			                         idem_hex_digit(hex[2 * i + 1]));
	}
	/* A key another transaction in flight claims too (late) comes after the others, with its
	 * offset and hash. */
	add(fx, 12, "c", 1, "v3", NULL);
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	b->msgs[1].late = true; /* "a" */
	assert_int_equal(idem_bind_claim(&fx->bd, b, b->order, b->n_order, &c), IDEM_OK);
	e = claim_elem(&c, 3, 0, &n);
	assert_memory_equal(e, "b\"", n);
	e = claim_elem(&c, 3, 1, &n);
	assert_memory_equal(e, "c", n);
	e = claim_elem(&c, 3, 2, &n);
	assert_memory_equal(e, "a", n);
	assert_int_equal(be64(claim_elem(&c, 4, 0, &n)), 10);
	assert_int_equal(be64(claim_elem(&c, 4, 1, &n)), 12);
	assert_int_equal(be64(claim_elem(&c, 4, 2, &n)), 11);
	e = claim_elem(&c, 5, 2, &n);
	assert_int_equal((unsigned char)e[0],
	                 idem_hex_digit(idem_batch_ptr(b, b->msgs[1].hash)[0]) * 16 +
	                         idem_hex_digit(idem_batch_ptr(b, b->msgs[1].hash)[1]));
}

/*
 * Replies: every applied message; with reply.duplicates every upstream duplicate too (a repeat),
 * never a redelivery or a replay; keys as bytea, the business key or the message's own key.
 */
static void test_replies(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	static char topic[] = "replies";
	const char *v[10];
	size_t n;

	fx->route.reply_topic = topic;
	add(fx, 10, "k1", 2, "v1", NULL);
	add(fx, 11, "k2", 2, "v2", NULL);
	add(fx, 12, "k3", 2, "v3", NULL);
	add(fx, 13, "k4", 2, "v4", NULL);
	add(fx, 14, "k5", 2, "v5", NULL);
	b->msgs[0].state = IDEM_MSG_APPLIED;
	b->msgs[1].state = IDEM_MSG_DUPLICATE;
	b->msgs[1].dup = IDEM_DUP_UPSTREAM;
	b->msgs[2].state = IDEM_MSG_DUPLICATE;
	b->msgs[2].dup = IDEM_DUP_REDELIVERY;
	b->msgs[3].state = IDEM_MSG_DUP_IN_BATCH;
	b->msgs[3].dup = IDEM_DUP_UPSTREAM;
	b->msgs[4].state = IDEM_MSG_BAD;

	assert_int_equal(idem_bind_replies(&fx->bd, b, &n, v), IDEM_OK);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], "replies");
	assert_string_equal(v[1], "c");
	assert_string_equal(v[2], "payments");
	assert_string_equal(v[3], "3");
	assert_string_equal(v[4], "{\"k1\"}");
	assert_string_equal(v[5], "{\"\\\\x6b31\"}");
	assert_string_equal(v[6], "{\"10\"}");
	assert_string_equal(v[7], "{\"f\"}");
	/* No trace context: NULL traceparent and tracestate. */
	assert_string_equal(v[8], "{NULL}");
	assert_string_equal(v[9], "{NULL}");

	fx->route.reply_duplicates = 1;
	assert_int_equal(idem_bind_replies(&fx->bd, b, &n, v), IDEM_OK);
	assert_int_equal(n, 3);
	assert_string_equal(v[4], "{\"k1\",\"k2\",\"k4\"}");
	assert_string_equal(v[6], "{\"10\",\"11\",\"13\"}");
	assert_string_equal(v[7], "{\"f\",\"t\",\"t\"}");

	/* The message's own key: bytes as they are, a missing key NULL. */
	fx->route.reply_key = IDEM_CFG_REPLY_MESSAGE_KEY;
	fx->route.reply_duplicates = 0;
	b->msgs[0].key.null = true;
	assert_int_equal(idem_bind_replies(&fx->bd, b, &n, v), IDEM_OK);
	assert_string_equal(v[5], "{NULL}");
	fx->route.reply_topic = NULL;
}

static void add_traced(struct fixture *fx, int64_t offset, const char *key, const char *tp,
                       const char *ts)
{
	struct idem_header h[2] = { { "traceparent", tp, strlen(tp) },
		                    { "tracestate", ts, ts ? strlen(ts) : 0 } };
	struct idem_msgview m = { 0 };

	m.topic = "payments";
	m.partition = 3;
	m.offset = offset;
	m.timestamp_ms = 1000;
	m.key = key;
	m.key_len = strlen(key);
	m.value = "v";
	m.value_len = 1;
	m.headers = h;
	m.n_headers = ts ? 2 : 1;
	assert_int_equal(idem_batch_add(&fx->b, &m, &fx->cfg, 0), IDEM_OK);
}

/*
 * Trace context: a message's traceparent (idemd's span for consumer c and the message's
 * position as the parent) and tracestate reach IDEM_SQL_TRACES, its reply and its dead letter;
 * a message without, or with a malformed one, has NULLs and is not named for idem.emit().
 */
static void test_trace(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	static char topic[] = "replies", dlt[] = "dlt";
	static const size_t all[] = { 0, 1, 2 };
	char span[17], want[IDEM_TRACEPARENT_LEN + 1], arr[128];
	const char *v[10];
	size_t n;

	add_traced(fx, 20, "t1", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	           "rojo=1");
	add(fx, 21, "t2", 2, "v", NULL);
	add_traced(fx, 22, "t3", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", NULL);
	idem_trace_span("c", "payments", 3, 20, span);
	snprintf(want, sizeof(want), "00-4bf92f3577b34da6a3ce929d0e0e4736-%s-01", span);

	assert_int_equal(idem_bind_traces_open(&fx->bd), IDEM_OK);
	assert_int_equal(idem_bind_traces_add(&fx->bd, b, all, 3), IDEM_OK);
	assert_int_equal(idem_bind_traces_close(&fx->bd, v, &n), IDEM_OK);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], "{\"c\"}");
	assert_string_equal(v[1], "{\"t1\"}");
	snprintf(arr, sizeof(arr), "{\"%s\"}", want);
	assert_string_equal(v[2], arr);
	assert_string_equal(v[3], "{\"rojo=1\"}");
	/* None of them traced: nothing to send. */
	assert_int_equal(idem_bind_traces_open(&fx->bd), IDEM_OK);
	assert_int_equal(idem_bind_traces_add(&fx->bd, b, all + 1, 2), IDEM_OK);
	assert_int_equal(idem_bind_traces_close(&fx->bd, v, &n), IDEM_OK);
	assert_int_equal(n, 0);

	fx->route.reply_topic = topic;
	for (size_t i = 0; i < 3; i++)
		b->msgs[i].state = IDEM_MSG_APPLIED;
	assert_int_equal(idem_bind_replies(&fx->bd, b, &n, v), IDEM_OK);
	assert_int_equal(n, 3);
	snprintf(arr, sizeof(arr), "{\"%s\",NULL,NULL}", want);
	assert_string_equal(v[8], arr);
	assert_string_equal(v[9], "{\"rojo=1\",NULL,NULL}");
	fx->route.reply_topic = NULL;

	fx->route.dead_letter_topic = dlt;
	b->msgs[0].state = IDEM_MSG_BAD;
	assert_int_equal(idem_batch_set_reason(b, 0, "bad", NULL), IDEM_OK);
	assert_int_equal(idem_bind_quarantine(&fx->bd, b, 0), IDEM_OK);
	assert_string_equal(fx->bd.vals[13], "dlt");
	assert_string_equal(fx->bd.vals[14], want);
	assert_string_equal(fx->bd.vals[15], "rojo=1");
	b->msgs[2].state = IDEM_MSG_BAD;
	assert_int_equal(idem_batch_set_reason(b, 2, "bad", NULL), IDEM_OK);
	assert_int_equal(idem_bind_quarantine(&fx->bd, b, 2), IDEM_OK);
	assert_null(fx->bd.vals[14]);
	assert_null(fx->bd.vals[15]);
	fx->route.dead_letter_topic = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_literal_quoting),
		cmocka_unit_test(test_literal_refuses_nul),
		cmocka_unit_test_setup_teardown(test_empty_array, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_arrays, setup, teardown),
		cmocka_unit_test_setup_teardown(test_row, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trace, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
