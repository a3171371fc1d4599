/*
 * idem_relay.h - the outbox relay: publishes the rows handlers wrote with idem.emit() to Kafka.
 *
 * A thread of idemd with its own Postgres connection and an idempotent producer
 * (enable.idempotence=true). Each round, inside one transaction that holds the relay lock (one
 * relay at a time per database, whichever idemd runs it), it reads up to outbox.batch pending
 * rows of idem.outbox in id order, produces them with the header idem-outbox-id (the row's
 * event_id: named after the message that emitted it, so the same after a restore), waits for
 * their delivery reports and marks the delivered rows published. A crash between the delivery
 * and the mark re-sends the rows with the same idem-outbox-id, which a downstream consumer
 * deduplicates: that is the contract (ARCHITECTURE.md "The outbox").
 * Published rows older than outbox.keep are purged.
 */
#ifndef IDEM_RELAY_H
#define IDEM_RELAY_H

#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_metrics.h"

/* The header each published message carries: the event's id (idem.outbox.event_id). */
#define IDEM_RELAY_ID_HEADER "idem-outbox-id"

typedef struct idem_relay idem_relay;

/*
 * @brief Build the producer configuration: cfg->brokers, the connection and security settings of
 * kafka.properties (consumer settings are not passed on), then what the relay needs
 * (enable.idempotence=true, acks=all).
 * @param ret_conf on success, a new configuration the caller owns.
 */
IDEM_NODISCARD idem_status idem_relay_conf(const struct idem_cfg *cfg, rd_kafka_conf_t **ret_conf,
                                           idem_error *err);

/*
 * @brief Start the relay thread (it connects to Postgres and Kafka itself, and retries with
 * idem_backoff_ms() while it cannot). @cfg and @metrics (may be NULL) must outlive it.
 * @returns IDEM_ERR_KAFKA if the producer cannot be created, IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_relay_start(const struct idem_cfg *cfg, idem_metrics *metrics,
                                            idem_relay **ret, idem_error *err);

/*
 * @brief Stop the thread: a round in progress gives up waiting for delivery reports and rolls
 * back (its rows are sent again by the next relay), then the producer is destroyed. NULL is
 * accepted.
 */
void idem_relay_stop(idem_relay *rl);

#endif
