/*
 * Unit tests for idem_batch: decoding into the arena, in-batch duplicate collapse, key lookup.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "idem_batch.h"

struct fixture {
	struct idem_cfg cfg;
	struct idem_route route;
	struct idem_field params[2];
	struct idem_batch b;
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
	assert_int_equal(idem_template_parse("${key}", &fx.route.key, errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(idem_field_parse("business_key", &fx.params[0], errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(idem_field_parse("value", &fx.params[1], errbuf, sizeof(errbuf)), IDEM_OK);
	fx.route.params = fx.params;
	fx.route.n_params = 2;
	assert_int_equal(idem_batch_init(&fx.b, &fx.route, "payments", 3), IDEM_OK);
	*state = &fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	idem_batch_done(&fx->b);
	idem_template_done(&fx->route.key);
	idem_field_done(&fx->params[0]);
	idem_field_done(&fx->params[1]);
	return 0;
}

static void add(struct fixture *fx, int64_t offset, const char *key, const void *value,
                size_t value_len)
{
	struct idem_msgview m = { 0 };

	m.topic = "payments";
	m.partition = 3;
	m.offset = offset;
	m.timestamp_ms = 1000;
	m.key = key;
	m.key_len = key ? strlen(key) : 0;
	m.value = value;
	m.value_len = value_len;
	assert_int_equal(idem_batch_add(&fx->b, &m, &fx->cfg, 0), IDEM_OK);
}

static const char *bkey(const struct idem_batch *b, size_t i)
{
	return idem_batch_ptr(b, b->msgs[i].bkey);
}

static void test_collapse_lowest_offset_wins(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;

	add(fx, 10, "b", "v", 1);
	add(fx, 11, "a", "v", 1);
	add(fx, 12, "b", "v2", 2);
	add(fx, 13, "c", "v", 1);
	add(fx, 14, "a", "v", 1);
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	assert_int_equal(b->n_order, 3);
	/* Sorted by key bytes, each the lowest offset of its key. */
	assert_string_equal(bkey(b, b->order[0]), "a");
	assert_int_equal(b->msgs[b->order[0]].offset, 11);
	assert_string_equal(bkey(b, b->order[1]), "b");
	assert_int_equal(b->msgs[b->order[1]].offset, 10);
	assert_string_equal(bkey(b, b->order[2]), "c");
	assert_int_equal(b->msgs[2].state, IDEM_MSG_DUP_IN_BATCH);
	assert_int_equal(b->msgs[4].state, IDEM_MSG_DUP_IN_BATCH);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_PENDING);
	assert_int_equal(b->msgs[1].state, IDEM_MSG_PENDING);
	assert_int_equal(b->msgs[3].state, IDEM_MSG_PENDING);
}

static void test_collapse_offset_order_not_add_order(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;

	add(fx, 7, "k", "v", 1);
	add(fx, 5, "k", "v", 1);
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	assert_int_equal(b->n_order, 1);
	assert_int_equal(b->msgs[b->order[0]].offset, 5);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_DUP_IN_BATCH);
}

static void test_prefix_keys_are_distinct(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;

	add(fx, 1, "ab", "v", 1);
	add(fx, 2, "a", "v", 1);
	add(fx, 3, "abc", "v", 1);
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	assert_int_equal(b->n_order, 3);
	assert_string_equal(bkey(b, b->order[0]), "a");
	assert_string_equal(bkey(b, b->order[1]), "ab");
	assert_string_equal(bkey(b, b->order[2]), "abc");
	assert_int_equal(idem_batch_find_key(b, "ab", 2), 0);
	assert_int_equal(idem_batch_find_key(b, "a", 1), 1);
	assert_int_equal(idem_batch_find_key(b, "abc", 3), 2);
	assert_int_equal(idem_batch_find_key(b, "abd", 3), -1);
	assert_int_equal(idem_batch_find_key(b, "", 0), -1);
}

/* A batch of @n keys "pay-<first>" .. "pay-<first + n - 1>" of @route, its keys hashed. */
static void keyset_batch(struct fixture *fx, struct idem_batch *b, const struct idem_route *route,
                         int first, int n)
{
	struct idem_msgview m = { 0 };
	char key[32];

	assert_int_equal(idem_batch_init(b, route, "payments", 1), IDEM_OK);
	m.topic = "payments";
	m.partition = 1;
	for (int i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "pay-%d", first + i);
		m.offset = i;
		m.key = key;
		m.key_len = strlen(key);
		m.value = "v";
		m.value_len = 1;
		assert_int_equal(idem_batch_add(b, &m, &fx->cfg, 0), IDEM_OK);
	}
	idem_batch_key_hashes(b);
}

static size_t n_late(const struct idem_batch *b)
{
	size_t n = 0;

	for (size_t i = 0; i < b->n_msgs; i++)
		n += b->msgs[i].late;
	return n;
}

/* Mark @b's keys late against the set of @n batches' keys (another transaction's). */
static size_t late_in(struct idem_batch *b, struct idem_batch *const *others, size_t n)
{
	struct idem_keyset s = { 0 };
	size_t r;

	assert_int_equal(idem_keyset_build(&s, others, n), IDEM_OK);
	r = idem_batch_mark_late(b, &s);
	idem_keyset_free(&s);
	return r;
}

/* A key is late exactly when another transaction claims it too for the same consumer. */
static void test_mark_late(void **state)
{
	struct fixture *fx = *state;
	struct idem_route other = fx->route;
	static char cname2[] = "c2";
	struct idem_batch a, b, c, d;
	struct idem_msgview m = { 0 };
	struct idem_keyset empty = { 0 }, s = { 0 };

	other.consumer = cname2;
	keyset_batch(fx, &a, &fx->route, 0, 1000);
	keyset_batch(fx, &b, &fx->route, 1000, 2000);
	assert_int_equal(late_in(&a, (struct idem_batch *[]){ &b }, 1), 0);
	assert_int_equal(late_in(&b, (struct idem_batch *[]){ &a }, 1), 0);
	/* pay-999 and pay-1000 both ways; pay-5 is in the batch twice, both late. */
	keyset_batch(fx, &c, &fx->route, 3000, 10);
	m.offset = 100;
	for (const char *const *k =
	             (const char *const[]){ "pay-999", "pay-5", "pay-1000", "pay-5", NULL };
	     *k != NULL; k++) {
		m.key = *k;
		m.key_len = strlen(*k);
		m.offset++;
		assert_int_equal(idem_batch_add(&c, &m, &fx->cfg, 0), IDEM_OK);
	}
	idem_batch_key_hashes(&c);
	assert_int_equal(late_in(&c, (struct idem_batch *[]){ &a }, 1), 3);
	assert_true(c.msgs[10].late && c.msgs[11].late && c.msgs[13].late);
	assert_false(c.msgs[12].late);
	assert_int_equal(late_in(&c, (struct idem_batch *[]){ &b }, 1), 1);
	assert_true(c.msgs[12].late);
	assert_int_equal(n_late(&c), 4);
	/* Marked once: again, nothing more. */
	assert_int_equal(late_in(&c, (struct idem_batch *[]){ &a }, 1), 0);
	assert_int_equal(late_in(&a, (struct idem_batch *[]){ &c }, 1), 2);
	/* Hashing again starts with none late; a set of several batches has the keys of each. */
	idem_batch_key_hashes(&c);
	assert_int_equal(n_late(&c), 0);
	assert_int_equal(late_in(&c, (struct idem_batch *[]){ &a, &b }, 2), 4);
	/* The same keys of another consumer are other claims, alone or among this one's. */
	keyset_batch(fx, &d, &other, 0, 1000);
	idem_batch_key_hashes(&c);
	assert_int_equal(late_in(&d, (struct idem_batch *[]){ &c }, 1), 0);
	assert_int_equal(late_in(&c, (struct idem_batch *[]){ &d }, 1), 0);
	assert_int_equal(late_in(&c, (struct idem_batch *[]){ &d, &b }, 2), 1); /* pay-1000 */
	/* Keys that share a prefix, or differ past their eighth byte, are other keys. */
	idem_batch_reset(&d);
	d.route = &fx->route;
	m.key = "pay-1000x";
	m.key_len = strlen(m.key);
	assert_int_equal(idem_batch_add(&d, &m, &fx->cfg, 0), IDEM_OK);
	m.key = "pay-100";
	m.key_len = strlen(m.key);
	assert_int_equal(idem_batch_add(&d, &m, &fx->cfg, 0), IDEM_OK);
	idem_batch_key_hashes(&d);
	assert_int_equal(late_in(&d, (struct idem_batch *[]){ &b }, 1), 0);
	/* A message whose key could not be built claims nothing. */
	m.key = NULL;
	m.key_len = 0;
	assert_int_equal(idem_batch_add(&d, &m, &fx->cfg, 0), IDEM_OK);
	assert_int_equal(d.msgs[2].state, IDEM_MSG_BAD);
	idem_batch_key_hashes(&d);
	assert_int_equal(late_in(&d, (struct idem_batch *[]){ &a }, 1), 1); /* pay-100 */
	assert_false(d.msgs[2].late);
	/* A reset batch's keys are not hashed: none in a set, none marked. */
	idem_batch_reset(&a);
	idem_batch_key_hashes(&c);
	assert_int_equal(late_in(&c, (struct idem_batch *[]){ &a }, 1), 0);
	assert_int_equal(idem_batch_mark_late(&a, &s), 0);
	/* An empty set (never built, or cleared) marks nothing. */
	assert_int_equal(idem_batch_mark_late(&c, &empty), 0);
	assert_int_equal(idem_keyset_build(&s, (struct idem_batch *[]){ &b }, 1), IDEM_OK);
	assert_int_equal(idem_batch_mark_late(&c, &s), 1);
	idem_batch_key_hashes(&c);
	idem_keyset_clear(&s);
	assert_int_equal(idem_batch_mark_late(&c, &s), 0);
	idem_keyset_free(&s);
	idem_batch_done(&a);
	idem_batch_done(&b);
	idem_batch_done(&c);
	idem_batch_done(&d);
}

static void test_bad_messages_kept_with_reason(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	char big[2048];
	static const char nul_value[] = { 'a', '\0', 'b' };

	memset(big, 'x', sizeof(big));
	add(fx, 1, NULL, "v", 1);
	add(fx, 2, "k2", nul_value, sizeof(nul_value));
	add(fx, 3, "k3", big, sizeof(big));
	add(fx, 4, "k4", "fine", 4);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_BAD);
	assert_non_null(strstr(idem_batch_ptr(b, b->msgs[0].reason), "business key"));
	assert_non_null(strstr(idem_batch_ptr(b, b->msgs[0].reason), "no key"));
	assert_int_equal(b->msgs[1].state, IDEM_MSG_BAD);
	assert_string_equal(idem_batch_ptr(b, b->msgs[1].reason),
	                    "parameter $2 contains a NUL byte");
	assert_int_equal(b->msgs[2].state, IDEM_MSG_BAD);
	assert_string_equal(idem_batch_ptr(b, b->msgs[2].reason),
	                    "message is 2050 bytes, larger than limits.max_message_bytes 1024");
	assert_int_equal(b->msgs[3].state, IDEM_MSG_PENDING);
	/* The raw bytes are kept for the quarantine. */
	assert_int_equal(b->msgs[1].value.len, 3);
	assert_memory_equal(idem_batch_ptr(b, b->msgs[1].value), nul_value, 3);
	assert_int_equal(b->msgs[2].value.len, sizeof(big));
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	assert_int_equal(b->n_order, 1);
}

static void test_params_and_hash(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	const struct idem_batch_msg *m;

	add(fx, 9, "pay-1", "abc", 3);
	m = &b->msgs[0];
	assert_int_equal(m->state, IDEM_MSG_PENDING);
	assert_string_equal(idem_batch_ptr(b, b->params[m->param_first]), "pay-1");
	assert_string_equal(idem_batch_ptr(b, b->params[m->param_first + 1]), "abc");
	/* The first 8 bytes of SHA-256("abc") */
	assert_string_equal(idem_batch_ptr(b, m->hash), "ba7816bf8f01cfea");
}

static void test_reset_reuses_memory(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	char *arena;

	for (int i = 0; i < 100; i++) {
		char k[16];

		snprintf(k, sizeof(k), "k%d", i);
		add(fx, i, k, "value", 5);
	}
	arena = b->arena.data;
	idem_batch_reset(b);
	assert_int_equal(b->n_msgs, 0);
	assert_int_equal(b->n_params, 0);
	add(fx, 100, "again", "v", 1);
	assert_ptr_equal(b->arena.data, arena);
	assert_string_equal(bkey(b, 0), "again");
}

/* b->bytes counts what each add takes in the arena; a reset forgets it, and frees an arena that
 * grew for large messages (memory follows the bytes held), but keeps a small one. */
static void test_bytes_counted_and_large_arena_freed(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	static char big[1000];
	size_t before;

	fx->cfg.max_message_bytes = sizeof(big);
	memset(big, 'x', sizeof(big));
	assert_int_equal(b->bytes, 0);
	add(fx, 1, "a", "v", 1);
	assert_int_equal(b->bytes, b->arena.len);
	before = b->bytes;
	add(fx, 2, "b", big, sizeof(big));
	/* Key, value, business key, hash: each with its NUL. */
	assert_true(b->bytes - before >= sizeof(big) + 64);
	assert_int_equal(b->bytes, b->arena.len);
	/* A message over limits.max_message_bytes is kept (for quarantine) and counted too. */
	fx->cfg.max_message_bytes = 1024;
	before = b->bytes;
	for (int i = 0; i < 300; i++)
		add(fx, 3 + i, "c", big, sizeof(big));
	assert_true(b->bytes - before >= 300 * sizeof(big));
	assert_true(b->arena.cap > IDEM_BATCH_KEEP_BYTES);
	idem_batch_reset(b);
	assert_int_equal(b->bytes, 0);
	assert_null(b->arena.data);
	assert_int_equal(b->arena.cap, 0);
	/* Still usable, and a small arena is kept from batch to batch. */
	add(fx, 400, "d", "v", 1);
	assert_string_equal(bkey(b, 0), "d");
	assert_true(b->arena.cap <= IDEM_BATCH_KEEP_BYTES);
	idem_batch_reset(b);
	assert_non_null(b->arena.data);
}

static void test_invalid_utf8_parameter(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	static const char bad[] = { 'a', (char)0xff, 'b' };

	add(fx, 1, "k1", bad, sizeof(bad));
	assert_int_equal(b->msgs[0].state, IDEM_MSG_BAD);
	assert_true(b->msgs[0].undecodable);
	assert_string_equal(idem_batch_ptr(b, b->msgs[0].reason),
	                    "parameter $2 is not valid UTF-8");
	add(fx, 2, "k2", "fine", 4);
	assert_false(b->msgs[1].undecodable);
}

/* A handler failure records its SQLSTATE in the message itself and passes it back in. */
static void test_set_reason_keeps_own_sqlstate(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	struct idem_batch_msg *m;

	add(fx, 1, "k", "v", 1);
	m = &b->msgs[0];
	snprintf(m->sqlstate, sizeof(m->sqlstate), "%s", "22P02");
	assert_int_equal(idem_batch_set_reason(b, 0, "handler failed: x", m->sqlstate), IDEM_OK);
	assert_string_equal(m->sqlstate, "22P02");
	assert_string_equal(idem_batch_ptr(b, m->reason), "handler failed: x");
	assert_int_equal(idem_batch_set_reason(b, 0, "y", NULL), IDEM_OK);
	assert_string_equal(b->msgs[0].sqlstate, "");
}

static void test_dup_kind(void **state)
{
	struct idem_batch_claim c = { 0 };

	(void)state;
	/* Unknown claim: below the recorded progress a replay, else upstream. */
	assert_int_equal(idem_batch_dup_kind(3, 10, NULL, -1), IDEM_DUP_UPSTREAM);
	assert_int_equal(idem_batch_dup_kind(3, 10, NULL, 11), IDEM_DUP_REPLAY);
	assert_int_equal(idem_batch_dup_kind(3, 10, NULL, 10), IDEM_DUP_UPSTREAM);
	assert_int_equal(idem_batch_dup_kind(3, 10, &c, 11), IDEM_DUP_REPLAY);
	/* The claim is this very message: a redelivery, whatever the progress. */
	c = (struct idem_batch_claim){
		.found = true, .same_topic = true, .partition = 3, .offset = 10
	};
	assert_int_equal(idem_batch_dup_kind(3, 10, &c, -1), IDEM_DUP_REDELIVERY);
	assert_int_equal(idem_batch_dup_kind(3, 10, &c, 100), IDEM_DUP_REDELIVERY);
	/* Same offset elsewhere is another message. */
	c.partition = 4;
	assert_int_equal(idem_batch_dup_kind(3, 10, &c, -1), IDEM_DUP_UPSTREAM);
	assert_int_equal(idem_batch_dup_kind(3, 10, &c, 50), IDEM_DUP_REPLAY);
	c.partition = 3;
	c.same_topic = false;
	assert_int_equal(idem_batch_dup_kind(3, 10, &c, -1), IDEM_DUP_UPSTREAM);
	/* Inside a range an operator replays (below replay_to): a replay, even of its own claim;
	 * at or above it, as without a replay. */
	c.same_topic = true;
	assert_int_equal(idem_batch_dup_kind_replay(3, 10, &c, 0, 11), IDEM_DUP_REPLAY);
	assert_int_equal(idem_batch_dup_kind_replay(3, 10, NULL, -1, 11), IDEM_DUP_REPLAY);
	assert_int_equal(idem_batch_dup_kind_replay(3, 10, &c, 0, 10), IDEM_DUP_REDELIVERY);
	assert_int_equal(idem_batch_dup_kind_replay(3, 10, NULL, 5, 10), IDEM_DUP_UPSTREAM);
	assert_int_equal(idem_batch_dup_kind_replay(3, 10, &c, 100, -1), IDEM_DUP_REDELIVERY);
	assert_string_equal(idem_batch_dup_str(IDEM_DUP_REDELIVERY), "redelivery");
	assert_string_equal(idem_batch_dup_str(IDEM_DUP_REPLAY), "replay");
	assert_string_equal(idem_batch_dup_str(IDEM_DUP_UPSTREAM), "upstream");
}

static void test_claims_and_payload_mismatch(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;
	static const char sha_v[] =
	        "4c94485e0c21ae6c41ce1dfe7b6bfaceea5ab68e40a2476f50208e526f506080";
	size_t idx[3] = { 2, 0, 1 };

	add(fx, 1, "b", "v", 1);
	add(fx, 2, "a", "v", 1);
	add(fx, 3, "b", "w", 1);
	/* The first 8 bytes of SHA-256("v"), as a claim stores it now: no mismatch for "v",
	 * one for "w". */
	assert_int_equal(strlen(idem_batch_ptr(b, b->msgs[0].hash)), 16);
	assert_int_equal(idem_batch_set_claim(b, 0, "payments", 3, 1, sha_v, 16), IDEM_OK);
	assert_false(idem_batch_payload_differs(b, 0, &b->msgs[0].claim));
	assert_true(idem_batch_payload_differs(b, 2, &b->msgs[0].claim));
	/* 16 bytes and the whole digest, as claims of earlier versions keep it: the same
	 * answers. */
	assert_int_equal(idem_batch_set_claim(b, 0, "payments", 3, 1, sha_v, 32), IDEM_OK);
	assert_false(idem_batch_payload_differs(b, 0, &b->msgs[0].claim));
	assert_true(idem_batch_payload_differs(b, 2, &b->msgs[0].claim));
	assert_int_equal(idem_batch_set_claim(b, 0, "payments", 3, 1, sha_v, strlen(sha_v)),
	                 IDEM_OK);
	assert_true(b->msgs[0].claim.found && b->msgs[0].claim.same_topic);
	assert_false(idem_batch_payload_differs(b, 0, &b->msgs[0].claim));
	assert_true(idem_batch_payload_differs(b, 2, &b->msgs[0].claim));
	assert_false(idem_batch_payload_differs(b, 2, &b->msgs[1].claim)); /* not found: unknown */
	/* A claim without a hash differs from a message with a value. */
	assert_int_equal(idem_batch_set_claim(b, 1, "other", 0, 5, NULL, 0), IDEM_OK);
	assert_false(b->msgs[1].claim.same_topic);
	assert_string_equal(idem_batch_ptr(b, b->msgs[1].claim.topic), "other");
	assert_true(idem_batch_payload_differs(b, 1, &b->msgs[1].claim));
	/* Sorted by key, then offset; lower bound finds the first of a key. */
	idem_batch_sort_by_key(b, idx, 3);
	assert_int_equal(idx[0], 1);
	assert_int_equal(idx[1], 0);
	assert_int_equal(idx[2], 2);
	assert_int_equal(idem_batch_lower_bound(b, idx, 3, "b", 1), 1);
	assert_int_equal(idem_batch_lower_bound(b, idx, 3, "a", 1), 0);
	assert_int_equal(idem_batch_lower_bound(b, idx, 3, "c", 1), 3);
	assert_int_equal(idem_batch_lower_bound(b, idx, 3, "", 0), 3);
}

static void test_collapse_winner_and_truncate(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;

	add(fx, 1, "x", "v", 1);
	add(fx, 2, NULL, "v", 1); /* undecodable */
	add(fx, 3, "x", "v", 1);
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	assert_int_equal(b->msgs[2].state, IDEM_MSG_DUP_IN_BATCH);
	assert_int_equal(b->msgs[2].winner, 0);
	assert_int_equal(b->msgs[0].winner, 0);
	assert_true(b->msgs[1].undecodable);
	idem_batch_truncate(b, 1);
	assert_int_equal(b->n_msgs, 1);
	assert_int_equal(b->n_order, 0);
	idem_batch_truncate(b, 5); /* never grows */
	assert_int_equal(b->n_msgs, 1);
}

/* The partition's delivery state is in struct idem_part now (test_idem_part.c checks it). */
static void test_reset_clears_claim_timeouts(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b;

	add(fx, 1, "k", "v", 1);
	b->claim_timeouts = 2;
	idem_batch_reset(b);
	assert_int_equal(b->claim_timeouts, 0);
	assert_int_equal(b->n_msgs, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_collapse_lowest_offset_wins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_collapse_offset_order_not_add_order, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_prefix_keys_are_distinct, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mark_late, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_messages_kept_with_reason, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_params_and_hash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_reuses_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bytes_counted_and_large_arena_freed, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_invalid_utf8_parameter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_reason_keeps_own_sqlstate, setup,
		                                teardown),
		cmocka_unit_test(test_dup_kind),
		cmocka_unit_test_setup_teardown(test_claims_and_payload_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_collapse_winner_and_truncate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_clears_claim_timeouts, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
