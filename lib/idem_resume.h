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

#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"

/* A database identity (idem.database_identity.id, a UUID's text), or "" when unknown. */
#define IDEM_DB_ID_LEN 37

/*
 * @brief The metadata idemd commits with offset @next: "idemd/1 db=<@db_id or -> next=<@next>".
 * @returns what snprintf() returns.
 */
int idem_resume_md_format(char *buf, size_t len, const char *db_id, int64_t next);

/*
 * @brief Parse commit metadata: true if it is idemd's (idem_resume_md_format()), with the
 * database identity ("" for "-") into @ret_db_id and the offset into *ret_next.
 */
bool idem_resume_md_parse(const void *md, size_t len, char ret_db_id[IDEM_DB_ID_LEN],
                          int64_t *ret_next);

/* What is known of one partition when it is assigned. */
struct idem_resume_in {
	bool db_read;        /* the database answered */
	int64_t db;          /* its next_offset; -1: no progress row */
	bool committed_read; /* the group's committed offset could be read */
	int64_t committed;   /* -1: none */
	bool md_idemd;       /* the offset was committed by idemd (its metadata) */
	int64_t md_next;     /* the offset the metadata names */
	bool md_same_db;     /* the metadata names this database */
	int64_t reset;       /* where a partition without a position starts (auto.offset.reset):
	                        RD_KAFKA_OFFSET_BEGINNING or RD_KAFKA_OFFSET_END */
};

/* What was decided, and why. */
enum idem_resume_case {
	IDEM_RESUME_FIRST, /* nothing to go by: librdkafka's start (committed offset, or reset) */
	IDEM_RESUME_DATABASE, /* the database's position; Kafka's committed offset is not beyond */
	IDEM_RESUME_BEHIND,   /* idemd committed an offset the database does not hold: it went
	                         back; read the gap again from the database's position */
	IDEM_RESUME_SKIP,     /* another client moved the offset beyond the database: honoured */
	IDEM_RESUME_KAFKA, /* no database position, an offset idemd did not commit: start there */
	IDEM_RESUME_NO_KAFKA, /* the committed offset could not be read: the database's position */
	IDEM_RESUME_NO_DB,    /* the database could not be read: the committed offset, checked by
	                         the first transaction if idemd committed it (floor) */
};

struct idem_resume_out {
	enum idem_resume_case why;
	int64_t start;      /* where fetching starts; RD_KAFKA_OFFSET_INVALID: librdkafka's start */
	int64_t floor;      /* what the database must hold before anything of the partition commits
	                       (struct idem_batch.db_floor); -1: nothing known */
	int64_t reapply_to; /* BEHIND: the end of the gap read again (Kafka's offset); else -1 */
};

/*
 * @brief The rule. With the database's position known:
 *   - Kafka's committed offset not beyond it (or none): DATABASE, start there;
 *   - beyond it, committed by idemd (metadata naming that very offset), for this database or
 *     another one: BEHIND, start at the database's position (no progress row: at @reset) and
 *     re-apply up to Kafka's offset;
 *   - beyond it, committed by another client (no idemd metadata, or metadata of another
 *     offset): SKIP, start at Kafka's offset;
 *   - Kafka's offset unreadable: NO_KAFKA, start at the database's position (reading again is
 *     safe, skipping is not).
 * Without a progress row: an offset idemd committed is BEHIND (start at @reset), any other
 * KAFKA, none FIRST. With the database unreadable: NO_DB, librdkafka's start, and the floor is
 * Kafka's offset when idemd committed it, so that the first transaction finds a database that
 * lacks it (IDEM_ERR_BEHIND). Where neither side can be read: FIRST.
 */
struct idem_resume_out idem_resume_decide(const struct idem_resume_in *in);

/* @brief "database", "behind", ...: the case's name, for logs. */
const char *idem_resume_case_str(enum idem_resume_case why);

typedef struct idem_resume idem_resume;

/* What was read and decided for one partition. */
struct idem_resume_pos {
	struct idem_resume_in in;
	struct idem_resume_out out;
	char md_db_id[IDEM_DB_ID_LEN]; /* the database the metadata names ("" if none) */
	char kafka_err[160];           /* why the committed offset could not be read, or "" */
};

/* @brief A resolver for @cfg (which must outlive it); NULL when out of memory. */
idem_resume *idem_resume_new(const struct idem_cfg *cfg);
void idem_resume_free(idem_resume *rs);

/*
 * @brief Decide where each partition of @list (about to be assigned) starts: read their
 * progress rows and the database's identity, and the group's committed offsets with their
 * metadata, then idem_resume_decide() each. Sets each element's .offset (RD_KAFKA_OFFSET_INVALID
 * leaves the start to librdkafka).
 * Logs nothing above debug: the caller reports what was decided.
 * @param ret_pos room for list->cnt entries: what was read and decided for each.
 * @param ret_db_id the database's identity ("" if it could not be read).
 * @param db_err why the database could not be read (left alone when it was).
 */
void idem_resume_positions(idem_resume *rs, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *ret_pos, char ret_db_id[IDEM_DB_ID_LEN],
                           idem_error *db_err);

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
