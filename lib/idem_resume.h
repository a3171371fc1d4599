/*
 * idem_resume.h - where an assigned partition starts, and whether the database went back in
 * time (ARCHITECTURE.md "Where a partition starts" and "When the database goes back").
 *
 * The database is the truth for what has been applied: next_offset commits in the transaction
 * that applies the batch, while Kafka's committed offset follows it (stored after the commit,
 * committed every 500 ms, not at all after a SIGKILL). So a partition normally starts at the
 * database's position. Kafka's committed offset can also be ahead of it, for two reasons that
 * call for opposite answers:
 *   - the database lost commits (restored from a backup, recovered to a point in time, failed
 *     over to a standby that had not received them): the gap must be read again, and the claims
 *     make the part the database still has a no-op;
 *   - an operator moved the offset on purpose with Kafka's tools: the skip is honoured.
 * idemd tells them apart by the metadata it commits with every offset (idem_resume_md_format():
 * the database's identity and the offset itself): an offset idemd committed was held by the
 * database when it was committed, so a database without it went back; an offset without that
 * metadata, or with metadata naming another offset, was moved by someone else.
 * idem_resume_decide() is that rule, on its own so that every case is unit-tested.
 *
 * Reading never blocks progress for long (5 s connect, 5 s statement, 10 s for the committed
 * offsets) and never fails the assignment: what cannot be read is decided without it (see
 * idem_resume_decide()).
 *
 * Opens a Postgres connection of its own for each call (application name idemd-resume) and
 * closes it before returning. Threading: the consumer thread only (the rebalance callback, and
 * the daemon's check after a worker reconnected).
 */
#ifndef IDEM_RESUME_H
#define IDEM_RESUME_H

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"

/* A database identity (idem.database_identity.id, a UUID's text), or "" when unknown. */
#define IDEM_DB_ID_LEN 37

/*
 * What idemd commits with every offset, version 2:
 *   "idemd/2 db=<database identity> log=<cluster id>:<epoch> consumer=<consumer> first=<first>
 *    next=<next>"
 * (one line; "-" for an unknown database, cluster or first). @next is the offset committed, which
 * the database held when it was committed; the log (the cluster, and the epoch: how many times
 * idemd found the partition's log replaced under this consumer) and the consumer (the claims
 * namespace) say what it is an offset of; @first is where this consumer's first start on the log
 * began, from where a database that lost everything of the partition re-applies. Version 1
 * ("idemd/1 db=<id> next=<next>") is still read: log, consumer and first unknown.
 */
struct idem_resume_md {
	int version;                               /* 1 or 2 */
	char db_id[IDEM_DB_ID_LEN];                /* "" unknown */
	char cluster[IDEM_CLUSTER_ID_LEN];         /* "" unknown (version 1) */
	int32_t epoch;                             /* 0 in version 1 */
	char consumer[IDEM_CONSUMER_NAME_MAX + 1]; /* "" in version 1 */
	int64_t first;                             /* -1 unknown */
	int64_t next;
};

/*
 * @brief Format @md (version 2 whatever md->version says).
 * @returns what snprintf() returns.
 */
int idem_resume_md_format(char *buf, size_t len, const struct idem_resume_md *md);

/*
 * @brief Parse commit metadata: true if it is idemd's (either version), into @ret (zeroed, with
 * first and next -1, when it is not).
 */
bool idem_resume_md_parse(const void *md, size_t len, struct idem_resume_md *ret);

/* What is known of one partition when it is assigned. */
struct idem_resume_in {
	const char *consumer; /* the route's consumer (claims namespace) */
	const char *cluster;  /* the cluster's id now; "" unknown */
	int64_t reset;        /* where a partition without a position starts (auto.offset.reset):
	                         RD_KAFKA_OFFSET_BEGINNING or RD_KAFKA_OFFSET_END */
	int64_t low, high;    /* the partition's watermarks now; -1 unknown */
	bool db_read;         /* the database answered */
	int64_t db;           /* this consumer's next_offset; -1: no progress row */
	char db_cluster[IDEM_CLUSTER_ID_LEN]; /* the row's kafka_cluster; "" unknown */
	int32_t db_epoch;                     /* the row's log_epoch */
	int64_t db_first;                     /* the row's first_offset; -1 unknown */
	int64_t other_db;    /* the furthest next_offset of the group's other consumers (earlier
	                        names of this one) on the partition in this cluster; -1: none */
	int64_t other_first; /* the earliest first_offset among them; -1 unknown */
	bool committed_read; /* the group's committed offset could be read */
	int64_t committed;   /* -1: none */
	bool md_idemd;       /* @md is idemd's metadata of @committed */
	struct idem_resume_md md;
};

/* How the start was decided. */
enum idem_resume_case {
	IDEM_RESUME_FIRST,    /* no position anywhere: where a first start begins (reset) */
	IDEM_RESUME_DATABASE, /* the database's position; Kafka's committed offset is not beyond */
	IDEM_RESUME_BEHIND,   /* idemd committed, for this consumer or another of the group in this
	                         log, an offset the database does not hold: it went back; read the
	                         gap again */
	IDEM_RESUME_SKIP,     /* another client moved the offset beyond the database: honoured */
	IDEM_RESUME_KAFKA,    /* no position in this log, an offset idemd did not commit (a tool,
	                         a mirror's translated offset): start there */
	IDEM_RESUME_RENAMED,  /* an earlier name of this consumer in the group got further:
	                         continue after what that consumer applied, never re-apply it */
	IDEM_RESUME_NO_KAFKA, /* the committed offset could not be read: the database's position,
	                         and nothing committed to Kafka until it is read */
	IDEM_RESUME_NO_DB,    /* the database could not be read: the committed offset (or where a
	                         first start begins), checked by the first transaction if idemd
	                         committed it (floor) */
};
#define IDEM_RESUME_CASES (IDEM_RESUME_NO_DB + 1)

/* Why the database's position is in another log than the partition's now. */
enum idem_resume_log {
	IDEM_LOG_SAME,     /* the same log, or nothing says otherwise */
	IDEM_LOG_CLUSTER,  /* the row names another Kafka cluster (disaster recovery, migration) */
	IDEM_LOG_TRUNCATED /* the row's position is beyond the log's end (a recreated topic, or a
	                      log that lost its tail) */
};

struct idem_resume_out {
	enum idem_resume_case why;
	enum idem_resume_log log; /* not SAME: the row's position was set aside, @why is decided
	                             as for a partition without one */
	int64_t start;      /* where fetching starts; RD_KAFKA_OFFSET_INVALID: librdkafka's start */
	int64_t floor;      /* what the database must hold before anything of the partition commits
	                       (struct idem_batch.db_floor); -1: nothing known */
	int64_t reapply_to; /* BEHIND: the end of the gap read again (Kafka's offset); else -1 */
	bool record;        /* write the progress row at @start with @first and @epoch before
	                       fetching (a first start, a replaced log, a renamed consumer) */
	int64_t first;      /* where this consumer's first start on the log began; -1 unknown */
	int32_t epoch;      /* the log's epoch */
};

/*
 * @brief The rule (ARCHITECTURE.md "Where a partition starts" has it as a table). A position
 * is an offset in one log for one consumer; first, is the row's position in this log at all
 * (IDEM_LOG_*: another cluster, or beyond the log's end)? If not, it is set aside (the epoch
 * moves on) and the partition is decided as one without a position. The group's position G is
 * the furthest of this consumer's and its group's other consumers' (earlier names) in this log.
 * Then:
 *   - Kafka's committed offset not beyond G (or none): G: DATABASE if it is this consumer's,
 *     RENAMED if an earlier name's (never re-apply under a new name what the group applied);
 *     but Kafka's offset, below this consumer's G, when idemd did not commit it for this
 *     consumer and a cluster id (the row's or the one now) is unknown: G may be another
 *     cluster's position (reading again is safe, skipping is not);
 *   - beyond G, idemd's metadata naming that offset, this cluster and this consumer or another
 *     of the group: BEHIND, start at G (no position: the metadata's first start, or the log's
 *     start without it) and re-apply up to Kafka's offset; for another consumer only where
 *     both cluster ids are known, else RENAMED, start at Kafka's offset (the offset may be
 *     another log's, and re-applied under this name it would apply again what the group did);
 *   - beyond G, anything else: SKIP (KAFKA without a position), start at Kafka's offset;
 *   - Kafka's offset unreadable: NO_KAFKA, start at G (reading again is safe, skipping is not);
 *     without G, librdkafka's start (FIRST).
 * Without any position and any committed offset: FIRST (the log's start or end, by @reset, made
 * explicit when the watermarks are known, so that where it began can be recorded). With the
 * database unreadable: NO_DB, Kafka's offset (none: where a first start begins), the first start
 * the metadata names or this one, and the floor is Kafka's offset when idemd committed it for
 * this consumer, so that the first transaction finds a database that lacks it.
 * A committed offset beyond the log's end is not an offset of this log and counts as none.
 */
struct idem_resume_out idem_resume_decide(const struct idem_resume_in *in);

/*
 * @brief The rule for a running partition whose committed offset, unreadable at assignment, has
 * just been read (@in's Kafka side, as idem_resume_read_committed() leaves it): @in is completed
 * with where the partition stands (@at, the position this process knows the database holds, in
 * the log of @cluster and @epoch, first start @first, for @consumer) and decided by
 * idem_resume_decide(). A start beyond @at is where the partition goes on (an operator's skip, an
 * earlier name's offset in a log not known to be this one); any other stays at @at (idemd's own
 * offset beyond it is the database gone back, read again from @at already).
 */
struct idem_resume_out idem_resume_decide_late(struct idem_resume_in *in, const char *consumer,
                                               const char *cluster, int32_t epoch, int64_t first,
                                               int64_t at);

/*
 * @brief Row @row of IDEM_SQL_RESUME_GET into @in: the partition's row (db, db_cluster,
 * db_epoch, db_first) and its group's earlier consumers' (other_db, other_first).
 */
void idem_resume_row(const PGresult *res, int row, struct idem_resume_in *in);

/* @brief "database", "behind", ...: the case's name, for logs and metrics. */
const char *idem_resume_case_str(enum idem_resume_case why);
/* @brief "same", "cluster", "truncated". */
const char *idem_resume_log_str(enum idem_resume_log log);

typedef struct idem_resume idem_resume;

/* What was read and decided for one partition. */
struct idem_resume_pos {
	struct idem_resume_in in;
	struct idem_resume_out out;
	char kafka_err[160];  /* why the committed offset could not be read (last time), or "" */
	int kafka_failed;     /* reads of the committed offset that failed, also before one that
	                         succeeded */
	char record_err[160]; /* why the progress row could not be written (out.record), or "" */
};

/* @brief A resolver for @cfg (which must outlive it); NULL when out of memory. */
idem_resume *idem_resume_new(const struct idem_cfg *cfg);
void idem_resume_free(idem_resume *rs);

/*
 * @brief Decide where each partition of @list (about to be assigned) starts: read the cluster's
 * id, the group's committed offsets with their metadata (retried within a bound before they
 * count as unreadable), the partitions' watermarks, their progress rows (and those of a consumer
 * the metadata names) and the database's identity, then idem_resume_decide() each, and write
 * the progress rows it asks for (out.record; one that cannot be written is started without
 * them: out.record false, out.floor -1). Sets each element's .offset (RD_KAFKA_OFFSET_INVALID
 * leaves the start to librdkafka).
 * Logs nothing above debug: the caller reports what was decided.
 * @param ret_pos room for list->cnt entries: what was read and decided for each.
 * @param ret_db_id the database's identity ("" if it could not be read).
 * @param ret_cluster the Kafka cluster's id ("" if it could not be read).
 * @param db_err why the database could not be read (left alone when it was).
 */
void idem_resume_positions(idem_resume *rs, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *ret_pos, char ret_db_id[IDEM_DB_ID_LEN],
                           char ret_cluster[IDEM_CLUSTER_ID_LEN], idem_error *db_err);

/*
 * @brief Read the group's committed offsets of @list with their metadata (one try of at most
 * @timeout_ms): into ret_pos[i].in (committed_read, committed, md_idemd, md) and kafka_err.
 * @returns true if every partition's could be read.
 */
bool idem_resume_read_committed(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *list,
                                struct idem_resume_pos *ret_pos, int timeout_ms);

/*
 * @brief Read the progress rows of the partitions of @list into ret_db[0..list->cnt) (-1: no
 * row) and the database's identity, on a connection of its own (for the check after a worker
 * reconnected).
 */
IDEM_NODISCARD idem_status idem_resume_read_db(idem_resume *rs,
                                               const rd_kafka_topic_partition_list_t *list,
                                               int64_t *ret_db, char ret_db_id[IDEM_DB_ID_LEN],
                                               idem_error *err);

#endif
