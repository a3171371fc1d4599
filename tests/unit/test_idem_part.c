/*
 * Unit tests for idem_part: the assigned-partition table, delivery state and offset
 * bookkeeping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <string.h>

#include "idem_part.h"

static struct idem_cfg cfg;
static struct idem_route routes[2];
static char t_payments[] = "payments", t_refunds[] = "refunds";
static char n_pay[] = "pay", n_ref[] = "ref";
static char *topics_a[] = { t_payments };
static char *topics_b[] = { t_refunds };

static int setup(void **state)
{
	char errbuf[128];

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	memset(routes, 0, sizeof(routes));
	cfg.max_key_bytes = 64;
	cfg.max_message_bytes = 1024;
	routes[0].name = n_pay;
	routes[0].topics = topics_a;
	routes[0].n_topics = 1;
	routes[1].name = n_ref;
	routes[1].topics = topics_b;
	routes[1].n_topics = 1;
	for (int i = 0; i < 2; i++)
		assert_int_equal(idem_template_parse("key", &routes[i].key, errbuf, sizeof(errbuf)),
		                 IDEM_OK);
	cfg.routes = routes;
	cfg.n_routes = 2;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++)
		idem_template_done(&routes[i].key);
	return 0;
}

static void test_assign_find_revoke(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL, *q = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &p), IDEM_OK);
	assert_non_null(p);
	assert_ptr_equal(p->route, &routes[0]);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "refunds", 0, &q), IDEM_OK);
	assert_ptr_equal(q->route, &routes[1]);
	assert_ptr_not_equal(p, q);
	/* Assigning twice returns the same entry. */
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &q), IDEM_OK);
	assert_ptr_equal(p, q);
	assert_int_equal(ps.n, 2);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "unrouted", 0, &q), IDEM_ERR_NOT_FOUND);
	assert_null(idem_parts_find(&ps, "payments", 1));
	assert_ptr_equal(idem_parts_find(&ps, "payments", 0), p);
	idem_parts_revoke(&ps, "payments", 0);
	assert_null(idem_parts_find(&ps, "payments", 0));
	assert_non_null(idem_parts_find(&ps, "refunds", 0));
	assert_int_equal(ps.n, 1);
	idem_parts_revoke(&ps, "payments", 0); /* not assigned: no-op */
	assert_int_equal(ps.n, 1);
	idem_parts_done(&ps);
}

static void test_offsets_store_only_forward(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 2, &p), IDEM_OK);
	assert_int_equal(p->db_next, -1);
	assert_int_equal(p->stored_next, -1);
	assert_true(idem_part_committed(p, 10));
	idem_part_stored(p, 10);
	assert_int_equal(p->stored_next, 10);
	/* A batch that ends below what is stored (a redelivery) never moves Kafka back. */
	assert_false(idem_part_committed(p, 5));
	assert_int_equal(p->db_next, 10);
	assert_false(idem_part_committed(p, 10));
	assert_true(idem_part_committed(p, 12));
	/* If the store failed, the next commit still asks for it. */
	assert_true(idem_part_committed(p, 12));
	idem_part_stored(p, 12);
	idem_part_stored(p, 11);
	assert_int_equal(p->stored_next, 12);
	idem_parts_done(&ps);
}

static void test_reassign_starts_fresh(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 1, &p), IDEM_OK);
	assert_true(idem_part_committed(p, 100));
	idem_part_stored(p, 100);
	idem_parts_revoke(&ps, "payments", 1);
	/* Back after a rebalance: what was stored before says nothing about the new owner's
	 * commits in between, so bookkeeping restarts. */
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 1, &p), IDEM_OK);
	assert_int_equal(p->stored_next, -1);
	assert_true(idem_part_committed(p, 50));
	idem_parts_done(&ps);
}

static void test_many_partitions(void **state)
{
	struct idem_parts ps;

	(void)state;
	idem_parts_init(&ps);
	for (int i = 0; i < 100; i++)
		assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", i, NULL), IDEM_OK);
	for (int i = 0; i < 100; i += 2)
		idem_parts_revoke(&ps, "payments", i);
	assert_int_equal(ps.n, 50);
	for (int i = 0; i < 100; i++) {
		if (i % 2)
			assert_non_null(idem_parts_find(&ps, "payments", i));
		else
			assert_null(idem_parts_find(&ps, "payments", i));
	}
	idem_parts_done(&ps);
}

static void add(struct idem_part *p, int64_t offset)
{
	struct idem_msgview m = { 0 };

	m.topic = p->topic;
	m.partition = p->partition;
	m.offset = offset;
	m.timestamp_ms = -1;
	m.value = "v";
	m.value_len = 1;
	assert_int_equal(idem_batch_add(&p->batch, &m, &cfg, 0), IDEM_OK);
}

static void test_fresh_delivery_state(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 4, &p), IDEM_OK);
	assert_int_equal(p->fetch_next, -1);
	assert_int_equal(p->retry_at_ms, 0);
	assert_int_equal(p->failures, 0);
	assert_false(p->busy);
	assert_false(p->held);
	assert_false(p->leaving);
	assert_false(p->halted);
	assert_int_equal(p->batch.n_msgs, 0);
	assert_int_equal(p->inflight.n_msgs, 0);
	idem_parts_done(&ps);
}

static void test_hand_over_keeps_delivery_state(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &p), IDEM_OK);
	for (int64_t o = 10; o <= 12; o++)
		add(p, o);
	p->failures = 2;
	p->retry_at_ms = 99;
	p->fetch_next = 13;
	idem_part_hand_over(p, 1234);
	assert_true(p->busy);
	assert_int_equal(p->inflight.n_msgs, 3);
	assert_int_equal(p->batch.n_msgs, 0);
	assert_int_equal(p->job.first, 10);
	assert_int_equal(p->job.last, 12);
	assert_int_equal(p->job.t0, 1234);
	assert_null(p->job.next);
	/* The delivery state belongs to the partition, not to either batch. */
	assert_int_equal(p->failures, 2);
	assert_int_equal(p->retry_at_ms, 99);
	assert_int_equal(p->fetch_next, 13);
	idem_parts_done(&ps);
}

/* Bytes held follow the messages through hand-over, take-back and reset (batch.max_bytes_total). */
static void test_bytes_follow_the_batches(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;
	size_t one, three;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &p), IDEM_OK);
	assert_int_equal(idem_part_bytes(p), 0);
	add(p, 10);
	one = idem_part_bytes(p);
	/* The value and what decoding it wrote (here: why it has no key). */
	assert_true(one > 1);
	add(p, 11);
	add(p, 12);
	three = idem_part_bytes(p);
	assert_int_equal(three, 3 * one);
	idem_part_hand_over(p, 0);
	assert_int_equal(p->inflight.bytes, three);
	assert_int_equal(p->batch.bytes, 0);
	add(p, 13); /* arrived while the batch was in flight: both count */
	assert_int_equal(idem_part_bytes(p), three + one);
	/* What the flush writes into the batch in flight (reasons, results) is not counted. */
	assert_int_equal(idem_batch_set_reason(&p->inflight, 0, "some reason", NULL), IDEM_OK);
	assert_int_equal(idem_part_bytes(p), three + one);
	/* Taken back: what arrived after it is dropped, its bytes with it. */
	p->busy = false;
	idem_part_take_back(p);
	assert_int_equal(idem_part_bytes(p), three);
	/* Truncated (on_poison: halt) it still holds them until it is reset. */
	idem_part_hand_over(p, 0);
	idem_batch_truncate(&p->inflight, 1);
	assert_int_equal(idem_part_bytes(p), three);
	idem_batch_reset(&p->inflight);
	assert_int_equal(idem_part_bytes(p), 0);
	idem_parts_done(&ps);
}

static void test_take_back_refetches_after_it(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &p), IDEM_OK);
	for (int64_t o = 10; o <= 12; o++)
		add(p, o);
	idem_part_hand_over(p, 0);
	add(p, 13); /* arrived while the batch was in flight */
	p->fetch_next = 14;
	p->busy = false;
	idem_part_take_back(p);
	/* The failed batch is the partition's batch again; what came after it is dropped and
	 * fetched again. */
	assert_int_equal(p->batch.n_msgs, 3);
	assert_int_equal(p->batch.msgs[0].offset, 10);
	assert_int_equal(p->inflight.n_msgs, 0);
	assert_int_equal(p->fetch_next, 13);

	/* A flush that cut the batch off before its first message: fetched again from there. */
	idem_part_hand_over(p, 0);
	idem_batch_truncate(&p->inflight, 0);
	p->busy = false;
	idem_part_take_back(p);
	assert_int_equal(p->batch.n_msgs, 0);
	assert_int_equal(p->fetch_next, 10);
	idem_parts_done(&ps);
}

/* The database's floor follows what commits; a rewind takes every offset back to the database. */
static void test_rewind(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;
	struct idem_msgview m = { .topic = "payments", .partition = 1, .key = "k", .key_len = 1 };

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 1, &p), IDEM_OK);
	assert_int_equal(p->db_floor, -1);
	assert_int_equal(p->reapply_to, -1);
	/* Assigned where the database stood at 100; batches commit up to 180. */
	p->db_floor = 100;
	assert_true(idem_part_committed(p, 150));
	idem_part_stored(p, 150);
	assert_true(idem_part_committed(p, 180));
	idem_part_stored(p, 180);
	assert_int_equal(p->db_floor, 180);
	/* A redelivered batch below it does not lower the floor. */
	assert_false(idem_part_committed(p, 170));
	assert_int_equal(p->db_floor, 180);
	for (int i = 0; i < 3; i++) {
		m.offset = 180 + i;
		assert_int_equal(idem_batch_add(&p->batch, &m, &cfg, 0), IDEM_OK);
	}
	p->held = true;
	p->halted = true;
	p->retry_at_ms = 5;
	p->failures = 2;

	/* The database is found at 120: 60 offsets to read again, nothing in hand kept. */
	assert_int_equal(idem_part_rewind(p, 120), 60);
	assert_int_equal(p->batch.n_msgs, 0);
	assert_int_equal(p->batch.bytes, 0);
	assert_false(p->held);
	assert_false(p->halted);
	assert_int_equal(p->retry_at_ms, 0);
	assert_int_equal(p->failures, 0);
	assert_int_equal(p->db_floor, 120);
	assert_int_equal(p->db_next, 120);
	assert_int_equal(p->stored_next, 120); /* Kafka follows the database down */
	assert_int_equal(p->fetch_next, 120);
	assert_int_equal(p->reapply_to, 180);

	/* Going back again inside the gap keeps the gap's end. */
	assert_true(idem_part_committed(p, 130));
	assert_int_equal(idem_part_rewind(p, 125), 55);
	assert_int_equal(p->reapply_to, 180);
	/* The gap ends once the database passes it. */
	assert_true(idem_part_committed(p, 179));
	assert_int_equal(p->reapply_to, 180);
	assert_true(idem_part_committed(p, 180));
	assert_int_equal(p->reapply_to, -1);

	/* A database with no row at all: everything up to the furthest position is the gap. */
	assert_int_equal(idem_part_rewind(p, -1), 180);
	assert_int_equal(p->db_floor, -1);
	assert_int_equal(p->reapply_to, 180);
	/* Nothing known beyond the database: no gap. */
	assert_int_equal(idem_part_rewind(p, -1), 180);
	p->reapply_to = -1;
	assert_int_equal(idem_part_rewind(p, 7), 0);
	assert_int_equal(p->reapply_to, -1);
	idem_parts_done(&ps);
}

static void test_halted_count(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_halted(&ps), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", i, &p), IDEM_OK);
	p->halted = true;
	assert_int_equal(idem_parts_halted(&ps), 1);
	idem_parts_revoke(&ps, "payments", 2);
	assert_int_equal(idem_parts_halted(&ps), 0);
	idem_parts_done(&ps);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_assign_find_revoke),
		cmocka_unit_test(test_offsets_store_only_forward),
		cmocka_unit_test(test_reassign_starts_fresh),
		cmocka_unit_test(test_many_partitions),
		cmocka_unit_test(test_fresh_delivery_state),
		cmocka_unit_test(test_hand_over_keeps_delivery_state),
		cmocka_unit_test(test_bytes_follow_the_batches),
		cmocka_unit_test(test_take_back_refetches_after_it),
		cmocka_unit_test(test_halted_count),
		cmocka_unit_test(test_rewind),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
