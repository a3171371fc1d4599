/*
 * idem_consumer.h - the librdkafka consumer configuration idemd runs with.
 */
#ifndef IDEM_CONSUMER_H
#define IDEM_CONSUMER_H

#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"

/*
 * @brief Build the consumer configuration: brokers and group from @cfg, idemd's own settings
 * (offsets are stored by idemd only after the Postgres commit: enable.auto.offset.store=false;
 * the stored offsets are committed by librdkafka in the background), then kafka.properties.
 * @param ret_conf on success, a new configuration the caller owns.
 */
IDEM_NODISCARD idem_status idem_consumer_conf(const struct idem_cfg *cfg,
                                              rd_kafka_conf_t **ret_conf, idem_error *err);

/*
 * @brief Make a consumer (no subscription) for tools: the same settings, optionally another
 * group, and enable.auto.commit off: a tool commits only what it commits explicitly.
 */
IDEM_NODISCARD idem_status idem_consumer_new(const struct idem_cfg *cfg, const char *group,
                                             rd_kafka_t **ret_rk, idem_error *err);

#endif
