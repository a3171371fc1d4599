/*
 * Unit tests for idem_part: the assigned-partition table, delivery state (the fetch side's state
 * machine: every (state, event) pair, allowed and refused) and offset bookkeeping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <inttypes.h>
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
	assert_int_equal(p->state, IDEM_PART_FETCHING);
	assert_int_equal(p->wake_at_ms, 0);
	assert_int_equal(p->poison_at, -1);
	assert_int_equal(p->failures, 0);
	assert_false(p->busy);
	assert_false(p->schema_warned);
	assert_true(idem_part_fetching(p));
	assert_false(idem_part_paused(p));
	assert_false(idem_part_leaving(p));
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
	p->failures = 1;
	assert_true(idem_part_retry_at(p, 99));
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
	assert_int_equal(p->state, IDEM_PART_RETRY_WAIT);
	assert_int_equal(p->wake_at_ms, 99);
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

/* Awaiting its start drops what is in hand and forgets every offset; its start reads from
 * where it is told. */
static void test_await_start(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;
	struct idem_msgview m = { .topic = "payments", .partition = 1, .key = "k", .key_len = 1 };

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 1, &p), IDEM_OK);
	p->db_floor = 100;
	assert_true(idem_part_committed(p, 180));
	idem_part_stored(p, 180);
	p->reapply_to = 200;
	for (int i = 0; i < 3; i++) {
		m.offset = 180 + i;
		assert_int_equal(idem_batch_add(&p->batch, &m, &cfg, 0), IDEM_OK);
	}
	assert_true(idem_part_halt(p, 5, 183));
	p->failures = 2;
	assert_true(idem_part_await_start(p));
	assert_int_equal(p->state, IDEM_PART_STARTING);
	assert_int_equal(p->batch.n_msgs, 0);
	assert_int_equal(p->batch.bytes, 0);
	assert_int_equal(p->poison_at, -1);
	assert_int_equal(p->wake_at_ms, 0);
	assert_int_equal(p->failures, 0);
	assert_int_equal(p->db_floor, -1);
	assert_int_equal(p->db_next, -1);
	assert_int_equal(p->stored_next, -1);
	assert_int_equal(p->fetch_next, -1);
	assert_int_equal(p->reapply_to, -1);
	assert_false(idem_part_fetching(p));
	assert_false(idem_part_commit_due(p, false));
	assert_true(idem_part_start(p, 120));
	assert_int_equal(p->state, IDEM_PART_FETCHING);
	assert_int_equal(p->fetch_next, 120);
	assert_false(idem_part_start(p, 130)); /* only from STARTING */
	assert_int_equal(p->fetch_next, 120);
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
	assert_true(idem_part_halt(p, 1, 7));
	assert_int_equal(idem_parts_halted(&ps), 1);
	/* Still halted while it fetches the poison message again, until a batch commits past it. */
	assert_true(idem_part_due(p, 1));
	assert_int_equal(p->state, IDEM_PART_FETCHING);
	assert_int_equal(idem_parts_halted(&ps), 1);
	idem_parts_revoke(&ps, "payments", 2);
	assert_int_equal(idem_parts_halted(&ps), 0);
	idem_parts_done(&ps);
}

/*
 * The fetch side's state machine: every event from every state, allowed and refused, with the
 * state, wake time, poison message and failures it leaves (idem_part.h, enum idem_part_state).
 * A source state is reached through the transitions themselves: a waiting one with its wake at
 * W and one failure for RETRY_WAIT, HALTED at the poison message at offset 42.
 */
enum src {
	S_FETCHING,
	S_HELD,
	S_RETRY,
	S_SCHEMA,
	S_HALTED,
	S_LEAVING,
	S_LEAVING_RETRY,
	S_STARTING
};
enum ev {
	E_HOLD,
	E_RELEASE,
	E_RETRY_AT,
	E_WAIT_SCHEMA,
	E_HALT,
	E_DUE,
	E_WAKE_NOW,
	E_LEAVE,
	E_AWAIT_START,
	E_START
};

#define W     100 /* the wake time of a source state that waits */
#define WHEN  500 /* the time retry_at, wait_schema and halt are given */
#define EARLY 50  /* a now before W */
#define LATE  200 /* a now after W */

static const char *const src_str[] = { "fetching", "held",    "retry_wait",         "schema_wait",
	                               "halted",   "leaving", "leaving (retrying)", "starting" };
static const char *const ev_str[] = { "hold", "release",  "retry_at", "wait_schema", "halt",
	                              "due",  "wake_now", "leave",    "await_start", "start" };

static const struct transition {
	enum src from;
	bool busy; /* a batch in flight when the event comes */
	enum ev ev;
	int64_t now; /* for due and wake_now */
	bool ret;
	enum idem_part_state to;
	int64_t wake, poison;
	int failures;
} transitions[] = {
	/* FETCHING */
	{ S_FETCHING, false, E_HOLD, 0, false, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_FETCHING, true, E_HOLD, 0, true, IDEM_PART_HELD, 0, -1, 0 },
	{ S_FETCHING, false, E_RELEASE, 0, true, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_FETCHING, false, E_RETRY_AT, 0, true, IDEM_PART_RETRY_WAIT, WHEN, -1, 1 },
	{ S_FETCHING, false, E_WAIT_SCHEMA, 0, true, IDEM_PART_SCHEMA_WAIT, WHEN, -1, 0 },
	{ S_FETCHING, true, E_WAIT_SCHEMA, 0, true, IDEM_PART_SCHEMA_WAIT, WHEN, -1, 0 },
	{ S_FETCHING, false, E_HALT, 0, true, IDEM_PART_HALTED, WHEN, 77, 0 },
	{ S_FETCHING, false, E_DUE, LATE, false, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_FETCHING, false, E_WAKE_NOW, EARLY, false, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_FETCHING, false, E_LEAVE, 0, true, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_FETCHING, false, E_AWAIT_START, 0, true, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_FETCHING, false, E_START, 0, false, IDEM_PART_FETCHING, 0, -1, 0 },
	/* HELD: always with a batch in flight, until that one is done */
	{ S_HELD, true, E_HOLD, 0, true, IDEM_PART_HELD, 0, -1, 0 },
	{ S_HELD, false, E_HOLD, 0, false, IDEM_PART_HELD, 0, -1, 0 },
	{ S_HELD, false, E_RELEASE, 0, true, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_HELD, false, E_RETRY_AT, 0, true, IDEM_PART_RETRY_WAIT, WHEN, -1, 1 },
	{ S_HELD, true, E_WAIT_SCHEMA, 0, true, IDEM_PART_SCHEMA_WAIT, WHEN, -1, 0 },
	{ S_HELD, false, E_HALT, 0, true, IDEM_PART_HALTED, WHEN, 77, 0 },
	{ S_HELD, true, E_DUE, LATE, false, IDEM_PART_HELD, 0, -1, 0 },
	{ S_HELD, true, E_WAKE_NOW, EARLY, false, IDEM_PART_HELD, 0, -1, 0 },
	{ S_HELD, true, E_LEAVE, 0, true, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_HELD, false, E_AWAIT_START, 0, true, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_HELD, false, E_START, 0, false, IDEM_PART_HELD, 0, -1, 0 },
	/* RETRY_WAIT: a failed batch waits for W (then is retried, still RETRY_WAIT) */
	{ S_RETRY, true, E_HOLD, 0, false, IDEM_PART_RETRY_WAIT, W, -1, 1 },
	{ S_RETRY, false, E_RELEASE, 0, true, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_RETRY, false, E_RETRY_AT, 0, true, IDEM_PART_RETRY_WAIT, WHEN, -1, 2 },
	{ S_RETRY, false, E_WAIT_SCHEMA, 0, false, IDEM_PART_RETRY_WAIT, W, -1, 1 },
	{ S_RETRY, false, E_HALT, 0, true, IDEM_PART_HALTED, WHEN, 77, 0 },
	{ S_RETRY, false, E_DUE, EARLY, false, IDEM_PART_RETRY_WAIT, W, -1, 1 },
	{ S_RETRY, false, E_DUE, W, true, IDEM_PART_FETCHING, 0, -1, 1 },
	{ S_RETRY, false, E_DUE, LATE, true, IDEM_PART_FETCHING, 0, -1, 1 },
	{ S_RETRY, true, E_DUE, LATE, false, IDEM_PART_RETRY_WAIT, W, -1, 1 },
	{ S_RETRY, false, E_WAKE_NOW, EARLY, true, IDEM_PART_RETRY_WAIT, EARLY, -1, 1 },
	{ S_RETRY, false, E_WAKE_NOW, LATE, false, IDEM_PART_RETRY_WAIT, W, -1, 1 },
	{ S_RETRY, true, E_WAKE_NOW, EARLY, false, IDEM_PART_RETRY_WAIT, W, -1, 1 },
	{ S_RETRY, false, E_LEAVE, 0, true, IDEM_PART_LEAVING, W, -1, 1 },
	{ S_RETRY, false, E_AWAIT_START, 0, true, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_RETRY, false, E_START, 0, false, IDEM_PART_RETRY_WAIT, W, -1, 1 },
	/* SCHEMA_WAIT: its next message waits for the registry until W */
	{ S_SCHEMA, true, E_HOLD, 0, false, IDEM_PART_SCHEMA_WAIT, W, -1, 0 },
	{ S_SCHEMA, false, E_RELEASE, 0, true, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_SCHEMA, false, E_RETRY_AT, 0, true, IDEM_PART_RETRY_WAIT, WHEN, -1, 1 },
	{ S_SCHEMA, false, E_WAIT_SCHEMA, 0, true, IDEM_PART_SCHEMA_WAIT, WHEN, -1, 0 },
	{ S_SCHEMA, false, E_HALT, 0, true, IDEM_PART_HALTED, WHEN, 77, 0 },
	{ S_SCHEMA, false, E_DUE, EARLY, false, IDEM_PART_SCHEMA_WAIT, W, -1, 0 },
	{ S_SCHEMA, false, E_DUE, LATE, true, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_SCHEMA, true, E_DUE, LATE, false, IDEM_PART_SCHEMA_WAIT, W, -1, 0 },
	{ S_SCHEMA, false, E_WAKE_NOW, EARLY, true, IDEM_PART_SCHEMA_WAIT, EARLY, -1, 0 },
	{ S_SCHEMA, false, E_LEAVE, 0, true, IDEM_PART_LEAVING, W, -1, 0 },
	{ S_SCHEMA, false, E_AWAIT_START, 0, true, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_SCHEMA, false, E_START, 0, false, IDEM_PART_SCHEMA_WAIT, W, -1, 0 },
	/* HALTED: at the poison message 42 until W; never a batch in flight */
	{ S_HALTED, true, E_HOLD, 0, false, IDEM_PART_HALTED, W, 42, 0 },
	{ S_HALTED, false, E_RELEASE, 0, false, IDEM_PART_HALTED, W, 42, 0 },
	{ S_HALTED, false, E_RETRY_AT, 0, false, IDEM_PART_HALTED, W, 42, 0 },
	{ S_HALTED, false, E_WAIT_SCHEMA, 0, false, IDEM_PART_HALTED, W, 42, 0 },
	{ S_HALTED, false, E_HALT, 0, false, IDEM_PART_HALTED, W, 42, 0 },
	{ S_HALTED, false, E_DUE, EARLY, false, IDEM_PART_HALTED, W, 42, 0 },
	/* Fetching the poison message again, it is still halted (readiness) until a batch
	 * commits past it. */
	{ S_HALTED, false, E_DUE, LATE, true, IDEM_PART_FETCHING, 0, 42, 0 },
	{ S_HALTED, false, E_WAKE_NOW, EARLY, true, IDEM_PART_HALTED, EARLY, 42, 0 },
	{ S_HALTED, false, E_WAKE_NOW, LATE, false, IDEM_PART_HALTED, W, 42, 0 },
	{ S_HALTED, false, E_LEAVE, 0, true, IDEM_PART_LEAVING, W, 42, 0 },
	{ S_HALTED, false, E_AWAIT_START, 0, true, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_HALTED, false, E_START, 0, false, IDEM_PART_HALTED, W, 42, 0 },
	/* LEAVING: takes in what came of its batches (drained), never fetched again */
	{ S_LEAVING, true, E_HOLD, 0, false, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING, false, E_RELEASE, 0, true, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING, false, E_RETRY_AT, 0, true, IDEM_PART_LEAVING, WHEN, -1, 1 },
	{ S_LEAVING, false, E_WAIT_SCHEMA, 0, false, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING, false, E_HALT, 0, true, IDEM_PART_LEAVING, WHEN, 77, 0 },
	{ S_LEAVING, false, E_DUE, LATE, false, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING, false, E_WAKE_NOW, EARLY, false, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING, false, E_LEAVE, 0, true, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING, false, E_AWAIT_START, 0, false, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING, false, E_START, 0, false, IDEM_PART_LEAVING, 0, -1, 0 },
	/* LEAVING with a failed batch's retry pending at W: its time never wakes it */
	{ S_LEAVING_RETRY, true, E_HOLD, 0, false, IDEM_PART_LEAVING, W, -1, 1 },
	{ S_LEAVING_RETRY, false, E_RELEASE, 0, true, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_LEAVING_RETRY, false, E_RETRY_AT, 0, true, IDEM_PART_LEAVING, WHEN, -1, 2 },
	{ S_LEAVING_RETRY, false, E_WAIT_SCHEMA, 0, false, IDEM_PART_LEAVING, W, -1, 1 },
	{ S_LEAVING_RETRY, false, E_HALT, 0, true, IDEM_PART_LEAVING, WHEN, 77, 0 },
	{ S_LEAVING_RETRY, false, E_DUE, LATE, false, IDEM_PART_LEAVING, W, -1, 1 },
	{ S_LEAVING_RETRY, false, E_WAKE_NOW, EARLY, false, IDEM_PART_LEAVING, W, -1, 1 },
	{ S_LEAVING_RETRY, false, E_LEAVE, 0, true, IDEM_PART_LEAVING, W, -1, 1 },
	{ S_LEAVING_RETRY, false, E_AWAIT_START, 0, false, IDEM_PART_LEAVING, W, -1, 1 },
	{ S_LEAVING_RETRY, false, E_START, 0, false, IDEM_PART_LEAVING, W, -1, 1 },
	/* STARTING: only its start, a leave and a start awaited again; no batch in flight, so
	 * the ends of one are refused. */
	{ S_STARTING, true, E_HOLD, 0, false, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_RELEASE, 0, false, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_RETRY_AT, 0, false, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_WAIT_SCHEMA, 0, false, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_HALT, 0, false, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_DUE, LATE, false, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_WAKE_NOW, EARLY, false, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_LEAVE, 0, true, IDEM_PART_LEAVING, 0, -1, 0 },
	{ S_STARTING, false, E_AWAIT_START, 0, true, IDEM_PART_STARTING, 0, -1, 0 },
	{ S_STARTING, false, E_START, 0, true, IDEM_PART_FETCHING, 0, -1, 0 },
	/* With a batch in flight its start is not awaited: the batch ends first. */
	{ S_FETCHING, true, E_AWAIT_START, 0, false, IDEM_PART_FETCHING, 0, -1, 0 },
	{ S_HELD, true, E_AWAIT_START, 0, false, IDEM_PART_HELD, 0, -1, 0 },
};

static void put_in(struct idem_part *p, enum src from)
{
	switch (from) {
	case S_FETCHING:
		break;
	case S_HELD:
		p->busy = true;
		assert_true(idem_part_hold(p));
		break;
	case S_RETRY:
		assert_true(idem_part_retry_at(p, W));
		break;
	case S_SCHEMA:
		assert_true(idem_part_wait_schema(p, W));
		break;
	case S_HALTED:
		assert_true(idem_part_halt(p, W, 42));
		break;
	case S_LEAVING:
		assert_true(idem_part_leave(p));
		break;
	case S_LEAVING_RETRY:
		assert_true(idem_part_retry_at(p, W));
		assert_true(idem_part_leave(p));
		break;
	case S_STARTING:
		assert_true(idem_part_await_start(p));
		break;
	}
}

static bool apply(struct idem_part *p, const struct transition *t)
{
	switch (t->ev) {
	case E_HOLD:
		return idem_part_hold(p);
	case E_RELEASE:
		return idem_part_release(p);
	case E_RETRY_AT:
		return idem_part_retry_at(p, WHEN);
	case E_WAIT_SCHEMA:
		return idem_part_wait_schema(p, WHEN);
	case E_HALT:
		return idem_part_halt(p, WHEN, 77);
	case E_DUE:
		return idem_part_due(p, t->now);
	case E_WAKE_NOW:
		return idem_part_wake_now(p, t->now);
	case E_LEAVE:
		return idem_part_leave(p);
	case E_AWAIT_START:
		return idem_part_await_start(p);
	case E_START:
		return idem_part_start(p, 10);
	}
	return false;
}

static void test_transitions(void **state)
{
	bool seen[S_STARTING + 1][E_START + 1] = { { false } };
	struct idem_parts ps;

	(void)state;
	idem_parts_init(&ps);
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(transitions); i++) {
		const struct transition *t = &transitions[i];
		struct idem_part *p = NULL;
		bool ret;

		assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &p), IDEM_OK);
		put_in(p, t->from);
		p->busy = t->busy;
		ret = apply(p, t);
		if (ret != t->ret || p->state != t->to || p->wake_at_ms != t->wake ||
		    p->poison_at != t->poison || p->failures != t->failures)
			fail_msg("row %zu: %s%s --%s(%" PRId64 ")--> %s wake=%" PRId64
			         " poison=%" PRId64
			         " failures=%d returned %s; expected %s wake=%" PRId64
			         " poison=%" PRId64 " failures=%d returning %s",
			         i, src_str[t->from], t->busy ? " busy" : "", ev_str[t->ev], t->now,
			         idem_part_state_str(p->state), p->wake_at_ms, p->poison_at,
			         p->failures, ret ? "true" : "false", idem_part_state_str(t->to),
			         t->wake, t->poison, t->failures, t->ret ? "true" : "false");
		/* A transition never touches the batch in flight's owner. */
		assert_int_equal(p->busy, t->busy);
		seen[t->from][t->ev] = true;
		p->busy = false;
		idem_parts_revoke(&ps, "payments", 0);
	}
	/* Every event from every state is in the table. */
	for (int f = S_FETCHING; f <= S_STARTING; f++) {
		for (int e = E_HOLD; e <= E_START; e++) {
			if (!seen[f][e])
				fail_msg("no row for %s --%s-->", src_str[f], ev_str[e]);
		}
	}
	idem_parts_done(&ps);
}

/* What the daemon asks of a state: is the queue read, is it paused, is it leaving? */
static void test_state_predicates(void **state)
{
	static const struct {
		enum src from;
		bool fetching, paused, leaving;
		const char *name;
	} cases[] = {
		{ S_FETCHING, true, false, false, "fetching" },
		{ S_HELD, true, false, false, "held" },
		{ S_RETRY, false, true, false, "retry_wait" },
		{ S_SCHEMA, false, true, false, "schema_wait" },
		{ S_HALTED, false, true, false, "halted" },
		{ S_LEAVING, false, false, true, "leaving" },
		/* Paused when it began to wait, and never resumed: what arrives is dropped. */
		{ S_LEAVING_RETRY, false, true, true, "leaving" },
		/* Not read, and not a wait with a time: decided by the daemon's check. */
		{ S_STARTING, false, false, false, "starting" },
	};
	struct idem_parts ps;

	(void)state;
	idem_parts_init(&ps);
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		struct idem_part *p = NULL;

		assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &p), IDEM_OK);
		put_in(p, cases[i].from);
		assert_int_equal(idem_part_fetching(p), cases[i].fetching);
		assert_int_equal(idem_part_paused(p), cases[i].paused);
		assert_int_equal(idem_part_leaving(p), cases[i].leaving);
		assert_string_equal(idem_part_state_str(p->state), cases[i].name);
		p->busy = false;
		idem_parts_revoke(&ps, "payments", 0);
	}
	idem_parts_done(&ps);
}

/* Which offsets the commit list takes: those Kafka lacks, never over an unread one. */
static void test_commit_due(void **state)
{
	struct idem_parts ps;
	struct idem_part *p = NULL;

	(void)state;
	idem_parts_init(&ps);
	assert_int_equal(idem_parts_assign(&ps, &cfg, "payments", 0, &p), IDEM_OK);
	assert_false(idem_part_commit_due(p, false)); /* nothing stored */
	assert_true(idem_part_committed(p, 10));
	idem_part_stored(p, 10);
	assert_true(idem_part_commit_due(p, false));
	assert_false(idem_part_commit_due(p, true)); /* not leaving */
	p->commit_acked = 10;
	assert_false(idem_part_commit_due(p, false)); /* Kafka has it */
	assert_true(idem_part_committed(p, 12));
	idem_part_stored(p, 12);
	assert_true(idem_part_commit_due(p, false));
	/* A start awaited again: nothing of it is committed until it is decided. */
	assert_true(idem_part_await_start(p));
	assert_false(idem_part_commit_due(p, false));
	assert_true(idem_part_start(p, 12));
	assert_true(idem_part_committed(p, 14));
	idem_part_stored(p, 14);
	assert_true(idem_part_leave(p));
	assert_true(idem_part_commit_due(p, true));
	assert_true(idem_part_commit_due(p, false));
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
		cmocka_unit_test(test_await_start),
		cmocka_unit_test(test_transitions),
		cmocka_unit_test(test_state_predicates),
		cmocka_unit_test(test_commit_due),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
