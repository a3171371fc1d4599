/*
 * idem_metrics.h - Prometheus metrics and health endpoints.
 *
 * The main loop records what it does (a few calls per batch, never per message); an HTTP
 * listener (libmicrohttpd, its own thread) serves /metrics in the Prometheus text format,
 * /healthz (the process answers) and /readyz (connected to Postgres, every subscribed topic
 * there, partitions assigned, none halted). All calls are thread-safe.
 */
#ifndef IDEM_METRICS_H
#define IDEM_METRICS_H

#include "idem_common.h"

typedef struct idem_metrics idem_metrics;

/* Duplicate kinds, the label values of idemd_duplicates_total{kind} (as in the database). */
enum idem_metrics_dup {
	IDEM_METRICS_DUP_REDELIVERY = 0, /* the same topic/partition/offset as the claim */
	IDEM_METRICS_DUP_REPLAY,         /* below the partition's recorded progress */
	IDEM_METRICS_DUP_UPSTREAM,       /* another message with the same business key */
	IDEM_METRICS_DUP_KINDS
};

/*
 * Where a message's time goes between its producer and the commit that applies it, measured per
 * committed batch on its first message (idemd_stage_seconds{stage}):
 */
enum idem_metrics_stage {
	IDEM_METRICS_STAGE_FETCH = 0, /* producer timestamp to idemd's poll (Kafka, fetch wait) */
	IDEM_METRICS_STAGE_BATCH,     /* poll to the batch handed to the pool (batch.max_wait_ms,
	                                 a batch of the same partition still in flight) */
	IDEM_METRICS_STAGE_QUEUE,     /* handed over to a worker starting its transaction */
	IDEM_METRICS_STAGE_COMMIT,    /* the transaction: BEGIN to COMMIT done */
	IDEM_METRICS_STAGES
};

/* @brief A registry with nothing recorded, not listening. NULL on out of memory. */
idem_metrics *idem_metrics_new(void);
void idem_metrics_free(idem_metrics *m);

/*
 * @brief Serve HTTP on @listen ("127.0.0.1:9187", "[::1]:9187"; every address only when written
 * out, "0.0.0.0:9187" or "[::]:9187").
 * @returns IDEM_ERR_CONFIG for an address that does not parse or has no host (":9187"),
 * IDEM_ERR_IO if it cannot bind.
 */
IDEM_NODISCARD idem_status idem_metrics_listen(idem_metrics *m, const char *listen,
                                               idem_error *err);

/* One committed batch of @n messages that took @seconds from BEGIN to COMMIT. */
void idem_metrics_batch(idem_metrics *m, uint64_t consumed, uint64_t applied, uint64_t quarantined,
                        double seconds);
/* One committed batch's stages, in seconds (a negative one is unknown and not recorded). */
void idem_metrics_stages(idem_metrics *m, const double seconds[IDEM_METRICS_STAGES]);
void idem_metrics_duplicates(idem_metrics *m, enum idem_metrics_dup kind, uint64_t n);
/* Duplicates whose payload differs from the claimed message's. */
void idem_metrics_mismatches(idem_metrics *m, uint64_t n);
/* Messages of a committed batch that were read again because the database went back. */
void idem_metrics_reapplied(idem_metrics *m, uint64_t n);
/* A partition found behind in the database, read again from there. */
void idem_metrics_database_behind(idem_metrics *m);
/*
 * A partition was assigned, its start decided as @why (a static string: idem_resume's case
 * name), its database position set aside as another log's if @log_replaced:
 * idemd_partition_starts_total{case}, idemd_log_replaced_total.
 */
void idem_metrics_partition_start(idem_metrics *m, const char *why, bool log_replaced);
/* Show idemd_partition_starts_total{case=@why} at 0 until it counts (a rate needs a start). */
void idem_metrics_partition_case(idem_metrics *m, const char *why);
/* A partition waited for the schema registry (ARCHITECTURE.md "Avro"). */
void idem_metrics_schema_wait(idem_metrics *m);
/* The schema registry client's counters (struct idem_registry_stats), about once a second. */
void idem_metrics_registry(idem_metrics *m, uint64_t fetches, uint64_t failures, uint64_t unknown,
                           size_t cached);
/* A failed batch attempt that will be retried; @cls is "transient", "message" or "broken". */
void idem_metrics_retry(idem_metrics *m, const char *cls);
/* Per-partition gauges; @lag < 0 means unknown. */
void idem_metrics_partition(idem_metrics *m, const char *topic, int32_t partition, int64_t db_next,
                            int64_t lag);
void idem_metrics_partition_remove(idem_metrics *m, const char *topic, int32_t partition);
/* Whether @topic/@partition is halted at a poison message: idemd_partition_halted. */
void idem_metrics_partition_halted(idem_metrics *m, const char *topic, int32_t partition,
                                   bool halted);
/*
 * @topic/@partition was assigned with the group's @committed offset in Kafka and the database's
 * @db_next (-1: none): idemd_partition_kafka_ahead_messages is how far Kafka was ahead, what
 * idemctl verify calls a loss alarm (no next_offset counts as 0; no committed offset is never
 * ahead). The daemon gives @committed only where another client moved the offset ahead (idemd
 * honours the skip, so what lies between was never applied); a gap the database lost is read
 * again (idemd_database_behind_total). Kept until the partition is revoked.
 */
void idem_metrics_partition_assigned(idem_metrics *m, const char *topic, int32_t partition,
                                     int64_t committed, int64_t db_next);
/*
 * Readiness is exact at every request: ready when connected to Postgres, every subscribed topic
 * exists (idem_metrics_topics_missing()), assigned partitions and none halted, and only then. The
 * consumer thread says whether partitions are assigned and whether one is halted each time that
 * changes (not on a timer, which would lag a rebalance or a halt); whether Postgres is connected is
 * asked of @fn(@arg) at each request, on the listener's thread: it must be thread-safe and outlive
 * the listener. Without a probe, not connected.
 */
typedef bool (*idem_metrics_probe_fn)(const void *arg);
void idem_metrics_connected_probe(idem_metrics *m, idem_metrics_probe_fn fn, const void *arg);
void idem_metrics_ready(idem_metrics *m, bool assigned, bool halted);
/*
 * Assigned partitions whose start is not decided (STARTING): @n of them, @why what the first
 * waits for, said by /readyz, which is not ready while there is one.
 */
void idem_metrics_starting(idem_metrics *m, size_t n, const char *why);
/*
 * Subscribed topics the brokers do not have: @n of them, @first named by /readyz ("topic 'x'
 * does not exist"), which is not ready while there is one.
 */
void idem_metrics_topics_missing(idem_metrics *m, const char *first, size_t n);
/*
 * The worker pool: its size, batches being committed, partitions paused for backpressure, and
 * the keys claimed late because another transaction in flight claimed them too
 * (idem_pool_late(), a running total).
 */
void idem_metrics_workers(idem_metrics *m, size_t workers, size_t in_flight, size_t held,
                          uint64_t late);
/* Bytes held in batches (idem_part_bytes() of every partition) and their budget,
 * batch.max_bytes_total. */
void idem_metrics_bytes(idem_metrics *m, size_t budget, size_t held, size_t held_max);
/*
 * Age in seconds of the oldest claim kept (retention's sweep), < 0 if unknown; shown growing
 * with the time since, until the next sweep.
 */
void idem_metrics_oldest_claim_age(idem_metrics *m, double seconds);
/* The outbox relay: rows pending and the age of the oldest in seconds (0 when none). */
void idem_metrics_outbox_pending(idem_metrics *m, int64_t pending, double oldest_seconds);
/* The outbox relay published @published rows; @errors rows or rounds failed. */
void idem_metrics_outbox_published(idem_metrics *m, uint64_t published, uint64_t errors);

/* @brief Render /metrics into @out (appended). */
IDEM_NODISCARD idem_status idem_metrics_render(idem_metrics *m, struct idem_buf *out);
/* @brief What /readyz answers: true when ready; @why says what is missing otherwise. */
bool idem_metrics_is_ready(idem_metrics *m, char *why, size_t len);

#endif
