/*
 * idem_retention.h - purging old claims, in small batches, off the pipeline's path.
 *
 * A claim must outlive every redelivery and every replay that could bring its message back,
 * so the default keep is longer than any sensible topic retention. What a purge deleted is
 * recorded in idem.retention_horizon, which `idemctl replay` consults.
 */
#ifndef IDEM_RETENTION_H
#define IDEM_RETENTION_H

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_metrics.h"

/*
 * @brief Delete the claims of @consumer older than @keep_seconds: one sweep of the claims
 * table in block order (it has no index on their age: sql/0012_claims_swept.sql), @batch rows
 * per transaction at most (short transactions: the pipeline's claims never wait long), each
 * recording the cutoff as the consumer's horizon when it deleted anything.
 * @param ret_deleted rows deleted.
 * @param ret_oldest_age if not NULL, set when the sweep went through the whole table to the
 * age in seconds of the oldest claim of @consumer it kept, at its start, by the server's clock;
 * -1 when it kept none.
 * @param cancel if not NULL, read before each step: once true the sweep ends there, successfully
 * (what it deleted stays deleted, its horizon recorded), without setting @ret_oldest_age.
 */
IDEM_NODISCARD idem_status idem_retention_purge(PGconn *conn, const char *consumer,
                                                int64_t keep_seconds, int batch,
                                                const atomic_bool *cancel, int64_t *ret_deleted,
                                                double *ret_oldest_age, idem_error *err);

/*
 * @brief Ask the broker for @topic's retention.ms. IDEM_ERR_NOT_FOUND when the broker cannot
 * tell (no DescribeConfigs, infinite retention).
 */
IDEM_NODISCARD idem_status idem_retention_topic_ms(rd_kafka_t *rk, const char *topic,
                                                   int64_t *ret_ms, idem_error *err);

typedef struct idem_retention idem_retention;

/*
 * @brief Start a background thread with its own Postgres connection that sweeps for every
 * route's consumer every @interval_seconds and publishes the oldest claim's age to @metrics
 * (may be NULL). First, if @rk is not NULL, it warns about topics whose retention (where the
 * broker tells) is longer than @keep_seconds. @cfg and @rk must outlive it.
 */
IDEM_NODISCARD idem_status idem_retention_start(const struct idem_cfg *cfg, int64_t keep_seconds,
                                                int64_t interval_seconds, int batch,
                                                idem_metrics *metrics, rd_kafka_t *rk,
                                                idem_retention **ret, idem_error *err);
/* @brief Stop the thread (a sweep under way ends after its current step). */
void idem_retention_stop(idem_retention *r);

#endif
