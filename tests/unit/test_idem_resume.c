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
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "idem_log.h"
#include "idem_resume.h"

void idem__daemon_log_assign(const rd_kafka_topic_partition_t *tp,
                             const struct idem_resume_pos *pos, const char *db_id,
                             const char *cluster);

#define DB_ID "5b0e8f5e-1c1a-4c55-9f5e-2d0d3f1b6a7c"
#define CL_A  "mockClusterA1"
#define CL_B  "ClusterB-0_zz"
#define BEG   RD_KAFKA_OFFSET_BEGINNING
#define END   RD_KAFKA_OFFSET_END
#define INV   RD_KAFKA_OFFSET_INVALID

static struct idem_resume_md md_of(const char *cluster, int32_t epoch, const char *consumer,
                                   int64_t first, int64_t next)
{
	struct idem_resume_md m = { .version = 2, .epoch = epoch, .first = first, .next = next };

	snprintf(m.db_id, sizeof(m.db_id), "%s", DB_ID);
	snprintf(m.cluster, sizeof(m.cluster), "%s", cluster);
	snprintf(m.consumer, sizeof(m.consumer), "%s", consumer);
	return m;
}

static void test_md_round_trip(void **state)
{
	struct idem_resume_md m = md_of(CL_A, 3, "shop-v1", 120, 4711), back;
	char buf[512];
	int n;

	(void)state;
	n = idem_resume_md_format(buf, sizeof(buf), &m);
	assert_string_equal(buf, "idemd/2 db=" DB_ID " log=" CL_A ":3 consumer=shop-v1 first=120 "
	                         "next=4711");
	assert_true(idem_resume_md_parse(buf, (size_t)n, &back));
	assert_int_equal(back.version, 2);
	assert_string_equal(back.db_id, DB_ID);
	assert_string_equal(back.cluster, CL_A);
	assert_int_equal(back.epoch, 3);
	assert_string_equal(back.consumer, "shop-v1");
	assert_int_equal(back.first, 120);
	assert_int_equal(back.next, 4711);
	/* Unknown database, cluster and first start. */
	m = md_of("", 0, "c", -1, 0);
	m.db_id[0] = '\0';
	n = idem_resume_md_format(buf, sizeof(buf), &m);
	assert_string_equal(buf, "idemd/2 db=- log=-:0 consumer=c first=- next=0");
	assert_true(idem_resume_md_parse(buf, (size_t)n, &back));
	assert_string_equal(back.db_id, "");
	assert_string_equal(back.cluster, "");
	assert_int_equal(back.first, -1);
	assert_int_equal(back.next, 0);
	/* Version 1, as idemd before schema version 8 committed it, is still read. */
	assert_true(idem_resume_md_parse("idemd/1 db=" DB_ID " next=9",
	                                 strlen("idemd/1 db=" DB_ID " next=9"), &back));
	assert_int_equal(back.version, 1);
	assert_string_equal(back.db_id, DB_ID);
	assert_string_equal(back.consumer, "");
	assert_string_equal(back.cluster, "");
	assert_int_equal(back.first, -1);
	assert_int_equal(back.next, 9);
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
		"idemd/3 db=x next=5",
		"IDEMD/1 db=x next=5",
		"idemd/1 db=x  next=5",
		"idemd/1 db=0123456789012345678901234567890123456789 next=5",
		"idemd/2 db=x log=a:0 consumer=c first=- next=5 ",
		"idemd/2 db=x log=a consumer=c first=- next=5",
		"idemd/2 db=x log=a:-1 consumer=c first=- next=5",
		"idemd/2 db=x log=:0 consumer=c first=- next=5",
		"idemd/2 db=x log=a:0 consumer= first=- next=5",
		"idemd/2 db=x log=a:0 consumer=a/b first=- next=5",
		"idemd/2 db=x log=a:0 consumer=c first=-1 next=5",
		"idemd/2 db=x log=a:0 consumer=c next=5",
		"idemd/2 db=x log=a:99999999999 consumer=c first=1 next=5",
		"idemd/2 db=x consumer=c log=a:0 first=1 next=5",
		"consumer-groups reset",
	};
	struct idem_resume_md m;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(idem_resume_md_parse(bad[i], strlen(bad[i]), &m));
		assert_string_equal(m.db_id, "");
		assert_string_equal(m.consumer, "");
		assert_int_equal(m.next, -1);
		assert_int_equal(m.first, -1);
	}
	assert_false(idem_resume_md_parse(NULL, 0, &m));
	/* A NUL inside. */
	assert_false(idem_resume_md_parse("idemd/1 db=x\0next=5", 19, &m));
	assert_true(idem_resume_md_parse("idemd/1 db=x next=5", 19, &m));
	assert_true(
	        idem_resume_md_parse("idemd/2 db=x log=a:b:7 consumer=c first=1 next=5", 48, &m));
	assert_string_equal(m.cluster, "a:b");
	assert_int_equal(m.epoch, 7);
}

/*
 * One case of the rule. The partition is read by consumer "shop" in cluster CL_A, whose log
 * holds offsets 0..1000 (low, high), unless a case says otherwise.
 */
struct rcase {
	const char *name;
	/* database: read?, this consumer's row (next, cluster, epoch, first), other's row */
	bool db_read;
	int64_t db;
	const char *db_cluster;
	int32_t db_epoch;
	int64_t db_first;
	int64_t other_db;
	/* Kafka: read?, committed, metadata (NULL: none; "v1": version 1) */
	bool k_read;
	int64_t committed;
	const char *md_cluster, *md_consumer;
	int64_t md_first, md_next;
	int64_t reset, low, high;
	const char *cluster;
	/* expected */
	enum idem_resume_case why;
	enum idem_resume_log log;
	int64_t start, floor, reapply_to;
	bool record;
	int64_t first;
	int32_t epoch;
	enum idem_resume_wait wait; /* HOLD: what it waits for (last: the others leave it none) */
};

#define R(...)                                                                                     \
	{                                                                                          \
		__VA_ARGS__, IDEM_WAIT_NONE                                                        \
	}
#define RH(...)                                                                                    \
	{                                                                                          \
		__VA_ARGS__                                                                        \
	}
#define HOLD_(w)        IDEM_RESUME_HOLD, IDEM_LOG_SAME, -1, -1, -1, false, -1, 0, (w)
#define HOLD_RENAMED    HOLD_(IDEM_WAIT_RENAMED)
#define HOLD_DATABASE   HOLD_(IDEM_WAIT_DATABASE)
#define HOLD_KAFKA      HOLD_(IDEM_WAIT_KAFKA)
#define HOLD_CLUSTER    HOLD_(IDEM_WAIT_CLUSTER)
#define HOLD_WATERMARKS HOLD_(IDEM_WAIT_WATERMARKS)

static const struct rcase cases[] = {
	/* name, db_read, db, db_cluster, epoch, first, other_db (-2: another consumer's row in
	 * another cluster only), k_read, committed, md_cluster, md_consumer, md_first, md_next,
	 * reset, low, high, cluster, why, log, start, floor, reapply_to, record, first, epoch */

	/* ---- the same log: the database's position ---- */
	R("restart, kafka trails (a crash)", true, 250, CL_A, 0, 0, -1, true, 100, CL_A, "shop", 0,
	  100, BEG, 0, 1000, CL_A, IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 250, 250, -1, false, 0, 0),
	R("restart, equal", true, 250, CL_A, 0, 0, -1, true, 250, CL_A, "shop", 0, 250, BEG, 0,
	  1000, CL_A, IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 250, 250, -1, false, 0, 0),
	R("restart, nothing committed", true, 250, CL_A, 0, 0, -1, true, -1, NULL, NULL, -1, -1,
	  BEG, 0, 1000, CL_A, IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 250, 250, -1, false, 0, 0),
	R("a replay lowered both", true, 0, CL_A, 0, 0, -1, true, 0, NULL, NULL, -1, -1, BEG, 0,
	  1000, CL_A, IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 0, 0, -1, false, 0, 0),
	R("a tool moved Kafka's offset back (idemctl replay's Kafka half, kept where a restore lost "
	  "its database half): read again from it",
	  true, 250, CL_A, 0, 0, -1, true, 100, NULL, NULL, -1, -1, BEG, 0, 1000, CL_A,
	  IDEM_RESUME_REWIND, IDEM_LOG_SAME, 100, 250, -1, false, 0, 0),
	R("idemd's own offset below the row's in this log: Kafka trails, the database's position",
	  true, 250, CL_A, 0, 0, -1, true, 100, CL_A, "shop", 0, 100, BEG, 0, 1000, CL_A,
	  IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 250, 250, -1, false, 0, 0),
	R("a row of before version 8: recorded", true, 250, "", 0, -1, -1, true, 250, NULL, NULL,
	  -1, -1, BEG, 0, 1000, CL_A, IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 250, 250, -1, true, -1,
	  0),
	R("a row without a cluster id, a lower offset idemd did not commit (a mirror's translated "
	  "offset): read again from it, not skipped",
	  true, 8000, "", 0, 0, -1, true, 4100, NULL, NULL, -1, -1, BEG, 0, 8000, CL_B,
	  IDEM_RESUME_REWIND, IDEM_LOG_SAME, 4100, 4100, -1, true, 0, 0),
	R("a row without a cluster id, a lower offset with another cluster's metadata (a mirror's "
	  "copy): read again from it, not skipped",
	  true, 8000, "", 0, 0, -1, true, 4100, CL_A, "shop", 0, 8000, BEG, 0, 8000, CL_B,
	  IDEM_RESUME_REWIND, IDEM_LOG_SAME, 4100, 4100, -1, true, 0, 0),
	R("idemctl replay's offset, committed with the metadata it found (another offset's): read "
	  "again from it",
	  true, 650, CL_A, 0, 0, -1, true, 450, CL_A, "shop", 0, 650, BEG, 0, 1000, CL_A,
	  IDEM_RESUME_REWIND, IDEM_LOG_SAME, 450, 650, -1, false, 0, 0),
	R("a row without a cluster id, idemd's own offset below it: Kafka trails", true, 250, "", 0,
	  0, -1, true, 100, CL_A, "shop", 0, 100, BEG, 0, 1000, CL_A, IDEM_RESUME_DATABASE,
	  IDEM_LOG_SAME, 250, 250, -1, true, 0, 0),
	R("committed beyond the log's end counts as none", true, 250, CL_A, 0, 0, -1, true, 5000,
	  CL_A, "shop", 0, 5000, BEG, 0, 1000, CL_A, IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 250, 250,
	  -1, false, 0, 0),
	R("the position below the log's first offset (retention deleted it): from that offset, "
	  "never a reset",
	  true, 250, CL_A, 0, 0, -1, true, 250, CL_A, "shop", 0, 250, END, 600, 1000, CL_A,
	  IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 600, 250, -1, false, 0, 0),

	/* ---- the database went back ---- */
	R("restore: idemd's own offset ahead", true, 180, CL_A, 0, 0, -1, true, 390, CL_A, "shop",
	  0, 390, BEG, 0, 1000, CL_A, IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 180, 180, 390, false, 0,
	  0),
	R("restore, version 1 metadata", true, 180, "", 0, -1, -1, true, 390, "v1", "", -1, 390,
	  BEG, 0, 1000, CL_A, IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 180, 180, 390, true, -1, 0),
	R("restore to before the partition's row: from its first start", true, -1, "", 0, -1, -1,
	  true, 390, CL_A, "shop", 120, 390, BEG, 0, 1000, CL_A, IDEM_RESUME_BEHIND, IDEM_LOG_SAME,
	  120, 120, 390, true, 120, 0),
	R("latest + restore to before the first batch: from where latest began, not the end", true,
	  -1, "", 0, -1, -1, true, 5000, CL_A, "shop", 0, 5000, END, 0, 7000, CL_A,
	  IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 0, 0, 5000, true, 0, 0),
	R("no row, version 1 metadata: from the log's start", true, -1, "", 0, -1, -1, true, 390,
	  "v1", "", -1, 390, BEG, 10, 1000, CL_A, IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 10, 10, 390,
	  true, 10, 0),
	R("no row, version 1 metadata, latest: from the log's start, not its end now", true, -1, "",
	  0, -1, -1, true, 390, "v1", "", -1, 390, END, 10, 1000, CL_A, IDEM_RESUME_BEHIND,
	  IDEM_LOG_SAME, 10, 10, 390, true, 10, 0),
	R("restore keeps the log's epoch from the metadata", true, -1, "", 0, -1, -1, true, 390,
	  CL_A, "shop", 100, 390, BEG, 0, 1000, CL_A, IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 100, 100,
	  390, true, 100, 0),

	/* ---- an operator's skip ---- */
	R("skip: Kafka's tools write no metadata", true, 180, CL_A, 0, 0, -1, true, 390, NULL, NULL,
	  -1, -1, BEG, 0, 1000, CL_A, IDEM_RESUME_SKIP, IDEM_LOG_SAME, 390, 390, -1, true, 0, 0),
	R("skip: metadata of another offset", true, 180, CL_A, 0, 0, -1, true, 390, CL_A, "shop", 0,
	  200, BEG, 0, 1000, CL_A, IDEM_RESUME_SKIP, IDEM_LOG_SAME, 390, 390, -1, true, 0, 0),
	R("skip: metadata copied from another cluster", true, 180, CL_A, 0, 0, -1, true, 390, CL_B,
	  "shop", 0, 390, BEG, 0, 1000, CL_A, IDEM_RESUME_SKIP, IDEM_LOG_SAME, 390, 390, -1, true,
	  0, 0),
	R("no row, an offset idemd did not commit", true, -1, "", 0, -1, -1, true, 390, NULL, NULL,
	  -1, -1, BEG, 0, 1000, CL_A, IDEM_RESUME_KAFKA, IDEM_LOG_SAME, 390, 390, -1, true, 390, 0),

	/* ---- renamed: by `idemctl rename` (one namespace), or in the configuration only ---- */
	RH("renamed in the configuration only: another consumer got further, none here", true, -1,
	   "", 0, -1, 5000, true, 5000, CL_A, "shop-v1", 0, 5000, BEG, 0, 7000, CL_A, HOLD_RENAMED),
	RH("renamed in the configuration only, back to a name that is behind", true, 5000, CL_A, 0,
	   0, 7000, true, 7500, CL_A, "shop-v2", 0, 7500, BEG, 0, 8000, CL_A, HOLD_RENAMED),
	RH("renamed in the configuration only, the other consumer's row in another cluster", true,
	   -1, "", 0, -1, -2, true, 4100, NULL, NULL, -1, -1, BEG, 0, 8000, CL_B, HOLD_RENAMED),
	RH("renamed in the configuration only, Kafka unreadable too: what is unread comes first",
	   true, -1, "", 0, -1, 5000, false, -1, NULL, NULL, -1, -1, BEG, 0, 7000, CL_A,
	   HOLD_KAFKA),
	R("another consumer's row beyond the log's end is no position", true, 300, CL_A, 0, 0, 9000,
	  true, 300, CL_A, "shop", 0, 300, BEG, 0, 1000, CL_A, IDEM_RESUME_DATABASE, IDEM_LOG_SAME,
	  300, 300, -1, false, 0, 0),
	R("this consumer ahead of another's (a continuation made by an earlier idemd): its own",
	  true, 950, CL_A, 0, 0, 900, true, 900, CL_A, "shop-v2", 300, 900, BEG, 0, 1000, CL_A,
	  IDEM_RESUME_DATABASE, IDEM_LOG_SAME, 950, 950, -1, false, 0, 0),
	R("after idemctl rename, Kafka's offset names the old consumer: idemd's own, the database "
	  "went back",
	  true, 300, CL_A, 0, 0, -1, true, 900, CL_A, "shop-v2", 300, 900, BEG, 0, 1000, CL_A,
	  IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 300, 300, 900, false, 0, 0),
	R("after idemctl rename, the database restored to before everything: from the first start",
	  true, -1, "", 0, -1, -1, true, 5000, CL_A, "shop-v1", 0, 5000, BEG, 0, 7000, CL_A,
	  IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 0, 0, 5000, true, 0, 0),

	/* ---- the log replaced ---- */
	R("mirror: the row is cluster A's, Kafka's translated offset on B", true, 8000, CL_A, 0, 0,
	  -1, true, 4100, NULL, NULL, -1, -1, BEG, 0, 8000, CL_B, IDEM_RESUME_KAFKA,
	  IDEM_LOG_CLUSTER, 4100, 4100, -1, true, 4100, 1),
	R("mirror without a translated offset: where a first start begins", true, 8000, CL_A, 0, 0,
	  -1, true, -1, NULL, NULL, -1, -1, BEG, 0, 8000, CL_B, IDEM_RESUME_FIRST, IDEM_LOG_CLUSTER,
	  0, 0, -1, true, 0, 1),
	R("mirror, A's metadata copied, the database holds it there: the translated offset", true,
	  8000, CL_A, 0, 0, -1, true, 4100, CL_A, "shop", 2000, 8000, BEG, 0, 8000, CL_B,
	  IDEM_RESUME_KAFKA, IDEM_LOG_CLUSTER, 4100, 4100, -1, true, 0, 1),
	R("mirror, A's metadata copied, the database behind it there: the gap's place here", true,
	  6000, CL_A, 0, 0, -1, true, 4100, CL_A, "shop", 0, 8000, BEG, 0, 8000, CL_B,
	  IDEM_RESUME_BEHIND, IDEM_LOG_CLUSTER, 2100, 2100, 4100, true, 0, 1),
	R("mirror, A's metadata copied, no row at all: from the first start's place here", true, -1,
	  "", 0, -1, -1, true, 4100, CL_A, "shop", 7000, 8000, BEG, 0, 8000, CL_B,
	  IDEM_RESUME_BEHIND, IDEM_LOG_SAME, 3100, 3100, 4100, true, 3100, 0),
	R("mirror, A's metadata without a first start, no row: from the log's start", true, -1, "",
	  0, -1, -1, true, 4100, "v1", "", -1, 4100, BEG, 5, 8000, CL_B, IDEM_RESUME_BEHIND,
	  IDEM_LOG_SAME, 5, 5, 4100, true, 5, 0),
	R("on B already, then the database restored to before it", true, 8000, CL_A, 0, 0, -1, true,
	  6000, CL_B, "shop", 4100, 6000, BEG, 0, 8000, CL_B, IDEM_RESUME_BEHIND, IDEM_LOG_CLUSTER,
	  4100, 4100, 6000, true, 4100, 1),
	R("recreated topic: the position beyond the log's end", true, 8000, CL_A, 2, 0, -1, true,
	  -1, NULL, NULL, -1, -1, BEG, 0, 3000, CL_A, IDEM_RESUME_FIRST, IDEM_LOG_TRUNCATED, 0, 0,
	  -1, true, 0, 3),
	R("recreated topic, old group offset left beyond the end", true, 8000, CL_A, 0, 0, -1, true,
	  8000, CL_A, "shop", 0, 8000, BEG, 0, 3000, CL_A, IDEM_RESUME_FIRST, IDEM_LOG_TRUNCATED, 0,
	  0, -1, true, 0, 1),
	R("recreated topic, latest", true, 8000, CL_A, 0, 0, -1, true, -1, NULL, NULL, -1, -1, END,
	  0, 3000, CL_A, IDEM_RESUME_FIRST, IDEM_LOG_TRUNCATED, 3000, 3000, -1, true, 3000, 1),

	/* ---- first starts ---- */
	R("first start, earliest", true, -1, "", 0, -1, -1, true, -1, NULL, NULL, -1, -1, BEG, 40,
	  1000, CL_A, IDEM_RESUME_FIRST, IDEM_LOG_SAME, 40, 40, -1, true, 40, 0),
	R("first start, latest: the end made explicit", true, -1, "", 0, -1, -1, true, -1, NULL,
	  NULL, -1, -1, END, 40, 1000, CL_A, IDEM_RESUME_FIRST, IDEM_LOG_SAME, 1000, 1000, -1, true,
	  1000, 0),

	/* ---- what is not known holds the partition ---- */
	RH("database unreadable", false, -1, "", 0, -1, -1, true, 390, CL_A, "shop", 0, 390, BEG, 0,
	   1000, CL_A, HOLD_DATABASE),
	RH("database unreadable, nothing committed, latest: not the end now", false, -1, "", 0, -1,
	   -1, true, -1, NULL, NULL, -1, -1, END, 0, 1150, CL_A, HOLD_DATABASE),
	RH("Kafka's committed offset unreadable", true, 250, CL_A, 0, 0, -1, false, -1, NULL, NULL,
	   -1, -1, BEG, 0, 1000, CL_A, HOLD_KAFKA),
	RH("Kafka's committed offset unreadable, no row", true, -1, "", 0, -1, -1, false, -1, NULL,
	   NULL, -1, -1, BEG, 0, 1000, CL_A, HOLD_KAFKA),
	RH("the cluster's id unreadable", true, 250, CL_A, 2, 7, -1, true, 250, CL_A, "shop", 7,
	   250, BEG, 0, 1000, "", HOLD_CLUSTER),
	RH("the cluster's id unreadable, a lower offset idemd did not commit", true, 8000, CL_A, 0,
	   0, -1, true, 4100, NULL, NULL, -1, -1, BEG, 0, 8000, "", HOLD_CLUSTER),
	RH("the watermarks unreadable", true, -1, "", 0, -1, -1, true, 390, "v1", "", -1, 390, END,
	   -1, -1, CL_A, HOLD_WATERMARKS),
	RH("the first start, watermarks unreadable", true, -1, "", 0, -1, -1, true, -1, NULL, NULL,
	   -1, -1, END, -1, -1, CL_A, HOLD_WATERMARKS),
	RH("nothing readable", false, -1, "", 0, -1, -1, false, -1, NULL, NULL, -1, -1, BEG, 0,
	   1000, CL_A, HOLD_DATABASE),
};

static struct idem_resume_in in_of(const struct rcase *c)
{
	struct idem_resume_in in = {
		.consumer = "shop",
		.cluster = c->cluster,
		.reset = c->reset,
		.low = c->low,
		.high = c->high,
		.db_read = c->db_read,
		.db = c->db,
		.db_epoch = c->db_epoch,
		.db_first = c->db_first,
		.other_db = c->other_db >= 0 ? c->other_db : -1,
		.committed_read = c->k_read,
		.committed = c->committed,
	};

	snprintf(in.db_cluster, sizeof(in.db_cluster), "%s", c->db_cluster);
	if (c->other_db != -1)
		snprintf(in.other_consumer, sizeof(in.other_consumer), "%s",
		         c->other_db >= 0 ? "shop-v1" : "shop-v0");
	in.other_first = -1;
	in.md.first = in.md.next = -1;
	if (c->md_cluster != NULL) {
		char buf[512];
		int n;

		if (strcmp(c->md_cluster, "v1") == 0) {
			n = snprintf(buf, sizeof(buf), "idemd/1 db=" DB_ID " next=%" PRId64,
			             c->md_next);
		} else {
			struct idem_resume_md m = md_of(c->md_cluster, c->db_epoch, c->md_consumer,
			                                c->md_first, c->md_next);

			n = idem_resume_md_format(buf, sizeof(buf), &m);
		}
		/* Through the parser: the rule reads what Kafka hands back. */
		in.md_idemd =
		        idem_resume_md_parse(buf, (size_t)n, &in.md) && in.md.next == in.committed;
	}
	return in;
}

static void test_rule_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct rcase *c = &cases[i];
		struct idem_resume_in in = in_of(c);
		struct idem_resume_out o = idem_resume_decide(&in);

		print_message("case: %s\n", c->name);
		assert_string_equal(idem_resume_case_str(o.why), idem_resume_case_str(c->why));
		assert_string_equal(idem_resume_log_str(o.log), idem_resume_log_str(c->log));
		assert_int_equal(o.start, c->start);
		/* The floor as idem_resume_positions() leaves it: a recorded start is held. */
		assert_int_equal(o.record ? o.start : o.floor, c->floor);
		assert_int_equal(o.reapply_to, c->reapply_to);
		assert_int_equal(o.record, c->record);
		assert_int_equal(o.first, c->first);
		assert_int_equal(o.epoch, c->epoch);
		assert_string_equal(idem_resume_wait_str(o.wait), idem_resume_wait_str(c->wait));
	}
}

/*
 * The topic created again, then the database restored to before that: the row's position is
 * within the new log's offsets, but idemd's own offset names a later epoch of this cluster's
 * log: the row is the old log's, set aside; the new log read from the metadata's first start.
 */
static void test_later_epoch(void **state)
{
	struct idem_resume_in in = { .consumer = "shop",
		                     .cluster = CL_A,
		                     .reset = BEG,
		                     .low = 0,
		                     .high = 3000,
		                     .db_read = true,
		                     .db = 2500,
		                     .db_epoch = 0,
		                     .db_first = 0,
		                     .other_db = -1,
		                     .other_first = -1,
		                     .committed_read = true,
		                     .committed = 200 };
	struct idem_resume_md m = md_of(CL_A, 1, "shop", 0, 200);
	struct idem_resume_out o;
	char buf[512];
	int n = idem_resume_md_format(buf, sizeof(buf), &m);

	(void)state;
	snprintf(in.db_cluster, sizeof(in.db_cluster), "%s", CL_A);
	in.md_idemd = idem_resume_md_parse(buf, (size_t)n, &in.md) && in.md.next == in.committed;
	o = idem_resume_decide(&in);
	assert_int_equal(o.why, IDEM_RESUME_BEHIND);
	assert_int_equal(o.log, IDEM_LOG_TRUNCATED);
	assert_int_equal(o.start, 0);
	assert_int_equal(o.reapply_to, 200);
	assert_int_equal(o.epoch, 1);
	assert_true(o.record);
	/* The same offset committed in the row's own epoch: the database's position. */
	m = md_of(CL_A, 0, "shop", 0, 200);
	n = idem_resume_md_format(buf, sizeof(buf), &m);
	in.md_idemd = idem_resume_md_parse(buf, (size_t)n, &in.md) && in.md.next == in.committed;
	o = idem_resume_decide(&in);
	assert_int_equal(o.why, IDEM_RESUME_DATABASE);
	assert_int_equal(o.start, 2500);
	/* An offset moved back (no metadata) is read again from; but while an `idemctl replay`
	 * is under way (replay_to set) it is the replay's start, and the row where the replay got
	 * to (a crash during the replay resumes inside it). */
	memset(&in.md, 0, sizeof(in.md));
	in.md.first = in.md.next = -1;
	in.md_idemd = false;
	o = idem_resume_decide(&in);
	assert_int_equal(o.why, IDEM_RESUME_REWIND);
	assert_int_equal(o.start, 200);
	in.db_replaying = true;
	o = idem_resume_decide(&in);
	assert_int_equal(o.why, IDEM_RESUME_DATABASE);
	assert_int_equal(o.start, 2500);
}

/* What idem__daemon_log_assign() writes for @pos (started at @start) into @buf. */
static void logged(const struct idem_resume_pos *pos, int64_t start, char *buf, size_t len)
{
	rd_kafka_topic_partition_t tp = { .topic = (char *)(uintptr_t) "payments",
		                          .partition = 3,
		                          .offset = start };
	FILE *f = tmpfile();
	int saved = dup(STDERR_FILENO);
	size_t n;

	assert_non_null(f);
	assert_true(saved >= 0);
	idem_log_set_level(IDEM_LOG_INFO);
	assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
	idem__daemon_log_assign(&tp, pos, DB_ID, CL_A);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	rewind(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* Which case the line names, from @name of the table. */
static const struct rcase *case_named(const char *name)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (strcmp(cases[i].name, name) == 0)
			return &cases[i];
	}
	fail_msg("no case '%s'", name);
	return NULL;
}

/*
 * The warnings of a start: the database behind (what it re-applies), behind through a mirror
 * (the cluster the metadata names), and a held partition says nothing here (log_waiting() in
 * idem_daemon_assign.c does).
 */
/* A decision that blocked the consumer thread for longer waits twice that before the next one. */
static void test_retry_ms(void **state)
{
	(void)state;
	assert_int_equal(idem_resume_retry_ms(0), IDEM_RESUME_RETRY_MS);
	assert_int_equal(idem_resume_retry_ms(IDEM_RESUME_RETRY_MS / 2), IDEM_RESUME_RETRY_MS);
	assert_int_equal(idem_resume_retry_ms(5000), 10000);
	assert_int_equal(idem_resume_retry_ms(IDEM_RESUME_BOUND_MS), 2 * IDEM_RESUME_BOUND_MS);
}

static void test_log_assign(void **state)
{
	static struct idem_resume_pos pos;
	static char buf[8192];
	const struct rcase *c;

	(void)state;
	c = case_named("restore: idemd's own offset ahead");
	pos.in = in_of(c);
	pos.out = idem_resume_decide(&pos.in);
	logged(&pos, pos.out.start, buf, sizeof(buf));
	assert_non_null(strstr(buf, "database behind: topic=payments partition=3 next_offset=180 "
	                            "in the database, kafka committed=390 by idemd for consumer "
	                            "shop"));
	assert_non_null(strstr(buf, "reading offsets from 180 again, 210 message(s) to re-apply"));
	assert_non_null(strstr(buf, "case=behind"));

	c = case_named("mirror, A's metadata copied, the database behind it there: the gap's "
	               "place here");
	pos.in = in_of(c);
	pos.out = idem_resume_decide(&pos.in);
	logged(&pos, pos.out.start, buf, sizeof(buf));
	assert_non_null(strstr(buf, "database behind, mirrored offset: topic=payments partition=3 "
	                            "kafka committed=4100 carries idemd's metadata of cluster " CL_A
	                            " (next=8000), which the database does not hold there "
	                            "(next_offset 6000)"));
	assert_non_null(strstr(buf, "reading offsets from 2100 again"));

	c = case_named("renamed in the configuration only: another consumer got further, none "
	               "here");
	pos.in = in_of(c);
	pos.out = idem_resume_decide(&pos.in);
	logged(&pos, -1, buf, sizeof(buf));
	assert_string_equal(buf, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_md_round_trip), cmocka_unit_test(test_md_foreign),
		cmocka_unit_test(test_rule_table),    cmocka_unit_test(test_later_epoch),
		cmocka_unit_test(test_log_assign),    cmocka_unit_test(test_retry_ms),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
