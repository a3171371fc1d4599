/*
 * Unit tests for idem_resume: the commit metadata and the rule that decides where an assigned
 * partition starts, for every combination of the database's position, Kafka's committed
 * offset and who committed it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <string.h>

#include "idem_resume.h"

#define DB_ID "5b0e8f5e-1c1a-4c55-9f5e-2d0d3f1b6a7c"

static void test_md_round_trip(void **state)
{
	char buf[128], id[IDEM_DB_ID_LEN];
	int64_t next;
	int n;

	(void)state;
	n = idem_resume_md_format(buf, sizeof(buf), DB_ID, 4711);
	assert_string_equal(buf, "idemd/1 db=" DB_ID " next=4711");
	assert_true(idem_resume_md_parse(buf, (size_t)n, id, &next));
	assert_string_equal(id, DB_ID);
	assert_int_equal(next, 4711);
	/* The database's identity unknown when it was committed. */
	n = idem_resume_md_format(buf, sizeof(buf), "", 0);
	assert_string_equal(buf, "idemd/1 db=- next=0");
	assert_true(idem_resume_md_parse(buf, (size_t)n, id, &next));
	assert_string_equal(id, "");
	assert_int_equal(next, 0);
	n = idem_resume_md_format(buf, sizeof(buf), NULL, 9);
	assert_true(idem_resume_md_parse(buf, (size_t)n, id, &next));
	assert_int_equal(next, 9);
}

/* Anything but idemd's own metadata is someone else's commit. */
static void test_md_foreign(void **state)
{
	static const char *const bad[] = {
		"",
		"idemd/1",
		"idemd/1 db=",
		"idemd/1 db=x",
		"idemd/1 db= next=5",
		"idemd/1 db=x next=",
		"idemd/1 db=x next=-5",
		"idemd/1 db=x next=5 ",
		"idemd/1 db=x next=5x",
		"idemd/2 db=x next=5",
		"IDEMD/1 db=x next=5",
		"idemd/1 db=x  next=5",
		"idemd/1 db=0123456789012345678901234567890123456789 next=5",
		"consumer-groups reset",
	};
	char id[IDEM_DB_ID_LEN];
	int64_t next;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(idem_resume_md_parse(bad[i], strlen(bad[i]), id, &next));
		assert_string_equal(id, "");
		assert_int_equal(next, -1);
	}
	assert_false(idem_resume_md_parse(NULL, 0, id, &next));
	/* A NUL inside. */
	assert_false(idem_resume_md_parse("idemd/1 db=x\0next=5", 19, id, &next));
	assert_true(idem_resume_md_parse("idemd/1 db=x next=5", 19, id, &next));
}

/* Both sides read: @db (-1: no row), @committed (-1: none), metadata of @md_next (-1: none). */
static struct idem_resume_in in_of(int64_t db, int64_t committed, int64_t md_next, bool same_db)
{
	return (struct idem_resume_in){
		.db_read = true,
		.db = db,
		.committed_read = true,
		.committed = committed,
		.md_idemd = md_next >= 0,
		.md_next = md_next,
		.md_same_db = md_next >= 0 && same_db,
		.reset = RD_KAFKA_OFFSET_BEGINNING,
	};
}

static void expect(struct idem_resume_in in, enum idem_resume_case why, int64_t start,
                   int64_t floor, int64_t reapply_to)
{
	struct idem_resume_out o = idem_resume_decide(&in);

	assert_string_equal(idem_resume_case_str(o.why), idem_resume_case_str(why));
	assert_int_equal(o.start, start);
	assert_int_equal(o.floor, floor);
	assert_int_equal(o.reapply_to, reapply_to);
}

/* Kafka not beyond the database: the database's position, whoever committed. */
static void test_database_ahead_or_equal(void **state)
{
	(void)state;
	expect(in_of(250, 100, 100, true), IDEM_RESUME_DATABASE, 250, 250, -1); /* a crash */
	expect(in_of(250, 100, -1, true), IDEM_RESUME_DATABASE, 250, 250, -1);
	expect(in_of(250, 250, 250, true), IDEM_RESUME_DATABASE, 250, 250, -1);
	expect(in_of(250, 250, -1, true), IDEM_RESUME_DATABASE, 250, 250, -1);
	expect(in_of(250, -1, -1, true), IDEM_RESUME_DATABASE, 250, 250, -1); /* none yet */
	expect(in_of(0, 0, 0, false), IDEM_RESUME_DATABASE, 0, 0, -1);        /* a replay */
}

/* Kafka beyond the database and idemd committed that very offset: the database went back. */
static void test_database_went_back(void **state)
{
	(void)state;
	expect(in_of(180, 390, 390, true), IDEM_RESUME_BEHIND, 180, 180, 390);
	/* Metadata naming another database (a new one, or one restored under another identity):
	 * the database's position still wins; reading again costs time, skipping loses data. */
	expect(in_of(180, 390, 390, false), IDEM_RESUME_BEHIND, 180, 180, 390);
	/* The database has nothing of the partition any more: from where a first start would
	 * begin. */
	expect(in_of(-1, 390, 390, true), IDEM_RESUME_BEHIND, RD_KAFKA_OFFSET_BEGINNING, -1, 390);
	{
		struct idem_resume_in in = in_of(-1, 390, 390, true);

		in.reset = RD_KAFKA_OFFSET_END;
		expect(in, IDEM_RESUME_BEHIND, RD_KAFKA_OFFSET_END, -1, 390);
	}
}

/* Kafka beyond the database, moved by someone else: an operator's skip, honoured. */
static void test_operator_skip(void **state)
{
	(void)state;
	/* Kafka's own tools commit without metadata. */
	expect(in_of(180, 390, -1, true), IDEM_RESUME_SKIP, 390, 180, -1);
	/* A tool that kept idemd's metadata but moved the offset. */
	expect(in_of(180, 390, 200, true), IDEM_RESUME_SKIP, 390, 180, -1);
	expect(in_of(180, 390, 500, true), IDEM_RESUME_SKIP, 390, 180, -1);
}

/* No progress row: a first start, or a group another consumer used before. */
static void test_no_row(void **state)
{
	(void)state;
	expect(in_of(-1, -1, -1, true), IDEM_RESUME_FIRST, RD_KAFKA_OFFSET_INVALID, -1, -1);
	expect(in_of(-1, 390, -1, true), IDEM_RESUME_KAFKA, RD_KAFKA_OFFSET_INVALID, -1, -1);
	expect(in_of(-1, 390, 12, true), IDEM_RESUME_KAFKA, RD_KAFKA_OFFSET_INVALID, -1, -1);
}

/* One side cannot be read. */
static void test_unreadable(void **state)
{
	struct idem_resume_in in;

	(void)state;
	/* Kafka unreadable: the database's position, never past it. */
	in = in_of(250, -1, -1, true);
	in.committed_read = false;
	expect(in, IDEM_RESUME_NO_KAFKA, 250, 250, -1);
	in = in_of(-1, -1, -1, true);
	in.committed_read = false;
	expect(in, IDEM_RESUME_FIRST, RD_KAFKA_OFFSET_INVALID, -1, -1);
	/* The database unreadable: librdkafka's start; an offset idemd committed becomes the
	 * floor, which the first transaction checks. */
	in = in_of(-1, 390, 390, true);
	in.db_read = false;
	expect(in, IDEM_RESUME_NO_DB, RD_KAFKA_OFFSET_INVALID, 390, -1);
	in = in_of(-1, 390, -1, true);
	in.db_read = false;
	expect(in, IDEM_RESUME_NO_DB, RD_KAFKA_OFFSET_INVALID, -1, -1);
	in = in_of(-1, 390, 200, true);
	in.db_read = false;
	expect(in, IDEM_RESUME_NO_DB, RD_KAFKA_OFFSET_INVALID, -1, -1);
	in = in_of(-1, -1, -1, true);
	in.db_read = false;
	expect(in, IDEM_RESUME_NO_DB, RD_KAFKA_OFFSET_INVALID, -1, -1);
	/* Neither. */
	in.committed_read = false;
	expect(in, IDEM_RESUME_FIRST, RD_KAFKA_OFFSET_INVALID, -1, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_md_round_trip),
		cmocka_unit_test(test_md_foreign),
		cmocka_unit_test(test_database_ahead_or_equal),
		cmocka_unit_test(test_database_went_back),
		cmocka_unit_test(test_operator_skip),
		cmocka_unit_test(test_no_row),
		cmocka_unit_test(test_unreadable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
