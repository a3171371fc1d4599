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
 * Reading never blocks progress for long (IDEM_RESUME_BOUND_MS in all, each read a few seconds)
 * and never fails the assignment: a partition whose facts cannot all be read is held, and
 * decided again later (idem_resume_decide(): HOLD).
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

/*
 * The longest idem_resume_positions() takes: the rebalance callback's bound, well within the
 * systemd watchdog's interval (systemd/idemd.service WatchdogSec=120s, pinged every half of it
 * from the main loop) and Kafka's max.poll.interval.ms (300 s).
 */
#define IDEM_RESUME_BOUND_MS 30000

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
	bool db_replaying;   /* the row's replay_to is set: an `idemctl replay` is under way, and
	                        Kafka's offset below the row is its start, not a move back */
	int64_t other_db;    /* the furthest next_offset of the group's other consumers on the
	                        partition in this cluster (earlier names of this one); -1: none */
	int64_t other_first; /* the earliest first_offset among them; -1 unknown */
	char other_consumer[IDEM_CONSUMER_NAME_MAX + 1]; /* the furthest one's name (in any
	                                                    cluster if none is in this one); "":
	                                                    the group has no other consumer on it */
	bool committed_read;      /* the group's committed offset could be read */
	int64_t committed;        /* -1: none */
	bool md_idemd;            /* @md is idemd's metadata of @committed */
	struct idem_resume_md md; /* idemd's metadata found with @committed (md.version 0: none;
	                             it may name another offset: a mirror's copy) */
};

/* How the start was decided. */
enum idem_resume_case {
	IDEM_RESUME_FIRST,    /* no position anywhere: where a first start begins (reset) */
	IDEM_RESUME_DATABASE, /* the database's position; Kafka's committed offset is not beyond */
	IDEM_RESUME_BEHIND,   /* idemd committed, in this log, an offset the database does not hold:
	                         it went back; read the gap again */
	IDEM_RESUME_SKIP,     /* another client moved the offset beyond the database: honoured */
	IDEM_RESUME_KAFKA,    /* no position in this log, an offset idemd did not commit here (a
	                         tool, a mirror's translated offset): start there */
	IDEM_RESUME_REWIND,   /* another client moved the offset back below the database's
	                         position (Kafka's tools, `idemctl replay`): read again from there,
	                         a no-op for what was applied */
	IDEM_RESUME_HOLD,     /* not started: a fact the rule needs is unknown, or the consumer was
	                         renamed without `idemctl rename` (@wait says which); decided again
	                         when it is known */
};
#define IDEM_RESUME_CASES (IDEM_RESUME_HOLD + 1)

/* What a held partition waits for (IDEM_RESUME_HOLD). */
enum idem_resume_wait {
	IDEM_WAIT_NONE,
	IDEM_WAIT_DATABASE,   /* the database could not be read */
	IDEM_WAIT_KAFKA,      /* the group's committed offset could not be read */
	IDEM_WAIT_CLUSTER,    /* the Kafka cluster's id could not be read */
	IDEM_WAIT_WATERMARKS, /* the partition's first and last offsets could not be read */
	IDEM_WAIT_RENAMED,    /* another consumer of the group got further on the partition than
	                         this one: a rename made in the configuration only (`idemctl rename`
	                         moves the claims and positions of a consumer in one transaction) */
};

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
	int64_t start;      /* where fetching starts, within the log's offsets; HOLD: none (-1) */
	int64_t floor;      /* what the database must hold before anything of the partition commits
	                       (struct idem_batch.db_floor); -1: nothing known */
	int64_t reapply_to; /* BEHIND: the end of the gap read again (Kafka's offset); else -1 */
	bool record;        /* write the progress row at @start with @first and @epoch before
	                       fetching (a first start, a replaced log, a database that lost it) */
	int64_t first;      /* where this consumer's first start on the log began; -1 unknown */
	int32_t epoch;      /* the log's epoch */
	enum idem_resume_wait wait; /* HOLD: what it waits for */
	bool mirror; /* KAFKA or BEHIND from a mirror's offset (idemd's metadata of another
	                cluster, copied with the translated offset) */
};

/*
 * @brief The rule (ARCHITECTURE.md "Where a partition starts" has it as a table). It decides on
 * complete knowledge only: with the database, the committed offset, the cluster's id or the
 * watermarks unread, HOLD (the partition is not fetched; decided again when they can be read).
 * Then, is the row's position in this log (IDEM_LOG_*: another cluster, beyond the log's end)?
 * If not, it is set aside (the epoch moves on). Another consumer of the group further on the
 * partition than this one in this log, or with a row in any log where this one has none: HOLD
 * (a rename `idemctl rename` did not make; its claims are not this consumer's). Kafka's offset K
 * counts if it is within the log; idemd's own (its metadata names K and this cluster, whatever the
 * consumer: `idemctl rename` moved the namespace) means the database held K when it was committed.
 * With a position R:
 *   - K not beyond R (or none): DATABASE, R; but K below R and not idemd's: REWIND, K (an
 *     operator's move back, honoured: the claims make it a no-op for what was applied);
 *   - K beyond R, idemd's: BEHIND, R, re-applying up to K (the database went back);
 *   - K beyond R, not idemd's: SKIP, K (an operator's move, honoured, and recorded).
 * Without one:
 *   - no K: FIRST, the log's start or end (@reset), made explicit so that it is recorded;
 *   - K idemd's: BEHIND, from the first start its metadata names (else the log's start);
 *   - K with idemd's metadata of another cluster (a mirror's translated offset, metadata
 *     copied): KAFKA, K, if the database holds what the metadata names there (its row in that
 *     cluster at md.next or beyond); else BEHIND, from K - (md.next - x), x the row's position
 *     there or else md.first (a mirror's offsets are as dense as the source's or denser, so
 *     that is at or before x's place here; without x, the log's start). The first start is
 *     md.first's place, the same way;
 *   - any other K: KAFKA, K.
 * Every start without a position in this log is recorded, and so is a skip; a start below the
 * log's first offset is that offset.
 */
struct idem_resume_out idem_resume_decide(const struct idem_resume_in *in);

/*
 * @brief Row @row of IDEM_SQL_RESUME_GET into @in: the partition's row (db, db_cluster,
 * db_epoch, db_first) and its group's other consumers' (other_db, other_first).
 */
void idem_resume_row(const PGresult *res, int row, struct idem_resume_in *in);

/* @brief "database", "behind", ...: the case's name, for logs and metrics. */
const char *idem_resume_case_str(enum idem_resume_case why);

/* A partition whose start could not be decided is decided again after this many ms at least. */
#define IDEM_RESUME_RETRY_MS 2000

/*
 * @brief When to decide the starts again, after a decision that took @took_ms on the consumer
 * thread: IDEM_RESUME_RETRY_MS, or twice @took_ms when that is longer. The reads block the
 * consumer thread (up to IDEM_RESUME_BOUND_MS when Kafka or the database does not answer), so
 * retrying no sooner keeps the partitions already started served at least two thirds of the
 * time during an outage.
 */
int64_t idem_resume_retry_ms(int64_t took_ms);
/* @brief "same", "cluster", "truncated". */
const char *idem_resume_log_str(enum idem_resume_log log);
/* @brief "database", "kafka", "cluster", "watermarks", "renamed" ("" for none). */
const char *idem_resume_wait_str(enum idem_resume_wait wait);
/* @brief What a held partition waits for, as a sentence's end for the log. */
const char *idem_resume_wait_why(enum idem_resume_wait wait);

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
