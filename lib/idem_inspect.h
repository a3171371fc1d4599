/*
 * idem_inspect.h - what operators ask of a running (or stopped) idemd deployment: where each
 * partition stands in Kafka and in the database, where a key was applied, and what a replay
 * would do. Used by idemctl; nothing here changes idemd's state except idem_inspect_reset().
 */
#ifndef IDEM_INSPECT_H
#define IDEM_INSPECT_H

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_resume.h"

/* One partition of a configured topic. Offsets are -1 when unknown or absent. */
struct idem_part_status {
	char *topic; /* owned */
	const struct idem_route *route;
	int32_t partition;
	int64_t committed;        /* the group's committed offset in Kafka */
	bool committed_idemd;     /* committed by idemd (its metadata names that offset) */
	struct idem_resume_md md; /* that metadata (idem_resume_md_parse()) */
	int64_t db_next;          /* idem.partition_progress.next_offset */
	char db_cluster[IDEM_CLUSTER_ID_LEN]; /* the Kafka cluster the row's position is in */
	int32_t db_epoch;                     /* the row's log epoch */
	int64_t db_first;    /* where the consumer's first start on the log began, or -1 */
	int64_t other_db;    /* the furthest next_offset of the group's other consumers (earlier
	                        names) on the partition in this cluster, or -1 */
	int64_t other_first; /* their earliest first_offset, or -1 */
	char other_consumer[IDEM_CONSUMER_NAME_MAX + 1]; /* the furthest of them (in any cluster if
	                                                    none is in this one), or "" */
	int64_t low, high;                               /* Kafka watermarks */
	int64_t consumed, applied, duplicates, quarantined; /* database counters */
	int64_t quarantine_rows; /* unresolved rows in idem.quarantine for the partition */
	int64_t halted_offset;   /* where on_poison: halt stopped it, or -1 */
	char *halt_reason;       /* owned; NULL unless halted */
};

struct idem_status_report {
	struct idem_part_status *parts;
	size_t n_parts;
	char cluster[IDEM_CLUSTER_ID_LEN]; /* the Kafka cluster's id ("" if it did not say) */
	const char **missing; /* configured topics the brokers do not have (cfg's strings) */
	size_t n_missing;
};

/*
 * @brief Read every partition of every configured topic: Kafka committed offsets of the group
 * and watermarks (through @rk, a consumer of the group that is not subscribed), and the
 * database's progress and counters (through @conn). A topic the brokers do not have is listed
 * in ret->missing (valid while @cfg is), never named to them (which could create it).
 */
IDEM_NODISCARD idem_status idem_inspect_status(const struct idem_cfg *cfg, rd_kafka_t *rk,
                                               PGconn *conn, struct idem_status_report *ret,
                                               idem_error *err);
void idem_status_report_done(struct idem_status_report *r);

/*
 * verify's reading of one partition: what idemd would make of it at the next assignment
 * (idem_resume_decide(), the one rule).
 */
enum idem_verify_state {
	IDEM_VERIFY_OK = 0,        /* Kafka committed == database progress */
	IDEM_VERIFY_DB_AHEAD,      /* database ahead: harmless, the redelivery will be skipped */
	IDEM_VERIFY_DB_BEHIND,     /* idemd committed beyond what the database holds: the database
	                              went back; idemd re-applies the gap at the next assignment */
	IDEM_VERIFY_KAFKA_AHEAD,   /* offsets moved ahead by another client: messages skipped,
	                              loss alarm unless that was meant */
	IDEM_VERIFY_NO_COMMIT,     /* nothing committed in Kafka yet */
	IDEM_VERIFY_RENAMED,       /* another consumer of the group got further on the partition (a
	                              routes[].consumer renamed in the configuration only): idemd
	                              holds the partition until `idemctl rename` */
	IDEM_VERIFY_OTHER_CLUSTER, /* the database's position is another Kafka cluster's (disaster
	                              recovery, migration): idemd sets it aside and starts at the
	                              group's offset in this cluster */
	IDEM_VERIFY_LOG_REPLACED,  /* the database's position is beyond the log's end (a topic
	                              created again): idemd sets it aside likewise */
	IDEM_VERIFY_BEYOND_END,    /* Kafka's committed offset is beyond the log's end: not an
	                              offset of this log; idemd starts at the database's position */
	IDEM_VERIFY_UNKNOWN,       /* what idemd decides the start on could not all be read (the
	                              cluster's id): idemd would hold the partition until it can */
};

/* @brief Does @s call for idemctl verify's exit IDEM_EXIT_MOVED (another log or consumer)? */
bool idem_verify_state_moved(enum idem_verify_state s);

enum idem_verify_state idem_inspect_verify_state(const struct idem_status_report *rep,
                                                 const struct idem_part_status *p);
/* @brief The state's name in verify --json ("ok", "database_behind", ...). */
const char *idem_verify_state_name(enum idem_verify_state s);
const char *idem_verify_state_str(enum idem_verify_state s);

/* What a replay of one partition from @from to the group's committed offset would do. */
struct idem_replay_plan {
	char *topic; /* owned */
	int32_t partition;
	int64_t from; /* requested start, clamped to the log start */
	int64_t to;   /* exclusive end: the furthest idemd could start without the replay (the
	                 committed offset, the database position, the end of a replay pending), or
	                 the high watermark
	                 when none is known, at most the high watermark */
	int64_t committed;
	int64_t db_next;         /* idem.partition_progress.next_offset, -1 if none */
	int64_t messages;        /* messages read in [from, to) */
	int64_t already_claimed; /* would be no-ops */
	int64_t would_apply;     /* keys not claimed yet (first occurrence in the range) */
	int64_t in_range_dups;   /* later copies of a key that occurs earlier in the range */
	int64_t undecodable;     /* no business key: would be quarantined */
	int64_t oldest_ts_ms;    /* oldest message timestamp in the range, -1 if none */
	bool clamped;            /* @from was below the log start */
};

struct idem_replay_report {
	struct idem_replay_plan *plans;
	size_t n_plans;
	int64_t horizon_ms; /* idem.retention_horizon.purged_before in ms, -1 if nothing purged */
	bool past_horizon;  /* some message in a range is older than the horizon */
};

/*
 * @brief Where business key @key was claimed, in the namespaces (consumers) of @cfg's routes
 * only: one row per consumer (the columns of IDEM_SQL_LOOKUP, in lib/idem_sql.h).
 * @returns IDEM_OK and *@ret_res (the caller PQclear()s it), or an error with *@ret_res NULL.
 */
IDEM_NODISCARD idem_status idem_inspect_lookup(const struct idem_cfg *cfg, PGconn *conn,
                                               const char *key, PGresult **ret_res,
                                               idem_error *err);

/*
 * @brief Plan a replay of @topic (all partitions, or only @partition when >= 0) from offset
 * @from: read the messages between @from and where idemd stands (plan->to), build their
 * business keys with the topic's route and count which are already claimed.
 */
IDEM_NODISCARD idem_status idem_inspect_replay_plan(const struct idem_cfg *cfg, rd_kafka_t *rk,
                                                    PGconn *conn, const char *topic,
                                                    int32_t partition, int64_t from,
                                                    struct idem_replay_report *ret,
                                                    idem_error *err);
void idem_replay_report_done(struct idem_replay_report *r);

/*
 * @brief Commit the planned start offsets for the group. The group must have no active
 * member: a direct commit is tried first, then (where the broker insists on membership) a
 * join that must receive every partition of the topic within @timeout_ms.
 */
IDEM_NODISCARD idem_status idem_inspect_reset(const struct idem_cfg *cfg,
                                              const struct idem_replay_report *plan, int timeout_ms,
                                              idem_error *err);

/*
 * @brief Make the planned replay happen in the database too, in one transaction: idemd starts
 * a partition at the database's position (idem_resume_decide()), so each planned
 * partition's next_offset goes back to its plan->from, and replay_to records the end of the
 * range read again, whose duplicates are then counted as replays (IDEM_SQL_REPLAY_MARK).
 * Called after idem_inspect_reset() succeeded (which makes sure the group is stopped).
 */
IDEM_NODISCARD idem_status idem_inspect_replay_mark(const struct idem_cfg *cfg, PGconn *conn,
                                                    const struct idem_replay_report *plan,
                                                    idem_error *err);

#endif
