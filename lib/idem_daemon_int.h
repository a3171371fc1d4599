/*
 * idem_daemon_int.h - what the files of idem_daemon share (internal to them).
 *
 * idem_daemon is split in three: idem_daemon.c, the main loop (taking messages into batches,
 * handing them to the workers, what they finished, drain and shutdown, stats),
 * idem_daemon_commit.c, what Kafka is told (stored offsets, their commits with metadata), and
 * idem_daemon_assign.c, partitions coming and going (the rebalance callbacks) and where each
 * one is read from, also after the database went back. All work on struct idem_daemon, on the
 * consumer thread only.
 *
 * Included by those files only: not part of libidem's contract (idem_daemon.h is). The
 * functions with external linkage are idem__daemon_*.
 */
#ifndef IDEM_DAEMON_INT_H
#define IDEM_DAEMON_INT_H

#include <librdkafka/rdkafka.h>

#include "idem_common.h"
#include "idem_consumer.h"
#include "idem_daemon.h"
#include "idem_metrics.h"
#include "idem_part.h"
#include "idem_pool.h"
#include "idem_relay.h"
#include "idem_resume.h"
#include "idem_retention.h"

struct idem_daemon {
	const struct idem_cfg *cfg;
	idem_stop_fn stop;
	rd_kafka_t *rk;
	rd_kafka_queue_t *cq;             /* the consumer queue: events, and wake-ups of the poll */
	struct idem_consumer_hooks hooks; /* the consumer's rebalance callbacks, into this */
	idem_pool *pool;

	struct idem_parts parts;
	idem_schemas *schemas;   /* the schema registry of avro: fields, or NULL */
	uint64_t schema_answers; /* idem_schemas_answers() when last looked at */
	size_t take_next;        /* take_queued() begins its next round with this partition */
	size_t flush_next;       /* flush_due() begins with this one (modulo the partitions) */
	size_t bytes_held; /* idem_part_bytes() of every partition: batch.max_bytes_total's count */
	size_t bytes_held_max;             /* the most bytes_held has been */
	struct idem_consumer_headers hdrs; /* scratch for one message's headers */
	struct idem_daemon_stats stats;
	int64_t last_stats_ms;
	int64_t last_publish_ms;
	unsigned int seed;          /* for backoff jitter */
	idem_metrics *metrics;      /* always there; served over HTTP if metrics.listen is set */
	idem_retention *retention;  /* the purge thread */
	idem_relay *relay;          /* the outbox relay thread, if outbox.enabled */
	idem_resume *resume;        /* where assigned partitions start (its own connection) */
	char db_id[IDEM_DB_ID_LEN]; /* the database's identity, named in commit metadata */
	char cluster[IDEM_CLUSTER_ID_LEN]; /* the Kafka cluster's id, as last read ("" unknown) */
	int64_t starts_at_ms;              /* next decision of the starts of STARTING partitions */
	int64_t last_commit_ms;            /* offsets last committed to Kafka */
	int commit_ms;                     /* and how often (auto.commit.interval.ms) */
	uint64_t reconnects;               /* idem_pool_reconnects() as last checked */
	int64_t check_at_ms;               /* no position check before (one failed) */
	bool *topic_missing;   /* cfg->n_topics: not subscribed, the brokers not having it (or
	                          not known to have it) */
	int64_t topics_at_ms;  /* next look at the missing topics */
	int64_t topics_log_ms; /* next warning naming them */
};

/* idem_daemon_assign.c: topics that do not exist (yet) */

/* Log the topics missing at start (every IDEM_DAEMON_TOPICS_LOG_MS while they are) and say so to
 * /readyz. */
void idem__daemon_topics_report(idem_daemon *d);
/* Every IDEM_DAEMON_TOPICS_CHECK_MS while a topic is missing: ask again (metadata of all
 * topics) and subscribe to the ones that appeared. */
void idem__daemon_check_topics(idem_daemon *d);

/* idem_daemon_commit.c */

/* The batch in flight of @p committed up to @next: store it for Kafka (the offset rule). */
void idem__daemon_store_offset(idem_daemon *d, struct idem_part *p, int64_t next);
/* Commit the offsets Kafka lacks, with idemd's metadata (@only_leaving: LEAVING ones only). */
void idem__daemon_commit_offsets(idem_daemon *d, bool sync, bool only_leaving, const char *why);
/* struct idem_consumer_hooks' committed: an asynchronous commit is done. */
void idem__daemon_on_committed(void *opaque, rd_kafka_resp_err_t err,
                               const rd_kafka_topic_partition_list_t *offsets);

/* idem_daemon.c */

/* Fetch @p again from @offset (after a pause, or a rewind). */
void idem__daemon_resume_part(idem_daemon *d, struct idem_part *p, int64_t offset);
/* Readiness may have changed (partitions assigned, revoked, halted or not): tell idem_metrics. */
void idem__daemon_ready_changed(idem_daemon *d);
/* Commit what is in hand for the leaving partitions, up to @tries attempts each. */
idem_status idem__daemon_drain(idem_daemon *d, int tries, idem_error *err);

/* idem_daemon_assign.c */

/* The rebalance callbacks: struct idem_consumer_hooks' assign, assigned and revoke. */
void idem__daemon_on_assign(void *opaque, rd_kafka_topic_partition_list_t *list);
void idem__daemon_on_assigned(void *opaque, const rd_kafka_topic_partition_list_t *list);
void idem__daemon_on_revoke(void *opaque, const rd_kafka_topic_partition_list_t *list);
/* The database holds @p only up to @db (or another log): drop what is in hand, and decide its
 * start again. */
void idem__daemon_went_back(idem_daemon *d, struct idem_part *p, int64_t db, const char *how);
/* After a worker reconnected: check every idle partition against the database's positions. */
void idem__daemon_check_positions(idem_daemon *d);
/* Decide again the starts of STARTING partitions, every few seconds. */
void idem__daemon_check_starts(idem_daemon *d);

#endif
