/*
 * idem_consumer.h - idemd's Kafka side: the consumer configuration, subscribing, pausing,
 * resuming and seeking a partition, storing and committing offsets, and the rebalance and error
 * callbacks (a rebalance calls back into the owner of the partition table through
 * struct idem_consumer_hooks).
 *
 * What it does not own: which offset may be stored (idem_part keeps that rule), and the
 * partition table itself.
 *
 * Threading: every function that takes @rk is called on the consumer thread (the one that polls
 * @rk); librdkafka runs the rebalance and error callbacks from within that thread's poll, so the
 * hooks run there too. Failures of pause, resume, seek, store and commit are logged here (under
 * "kafka") and survived: the claims make a redelivery harmless.
 */
#ifndef IDEM_CONSUMER_H
#define IDEM_CONSUMER_H

#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"
#include "idem_field.h"

/*
 * librdkafka's prefetch, shared by the partitions of the subscribed topics (each has its own
 * queue, which idemd reads only as far as the partition's batch has room:
 * idem_consumer_queue_open()). librdkafka 2.0.2 stops fetching a partition whose queue holds
 * queued.min.messages or queued.max.messages.kbytes, and looks again only when its broker
 * thread wakes up, up to a second later: the prefetch must hold more than a second of what idemd
 * applies, or it waits (48,000 messages held the bench's backlog rate to about 55,000 msg/s
 * on 2 CPUs, 160,000 let it reach 107,000: tests/bench/README.md, "Prefetch"). Divided among
 * the partitions (at least 1,000 messages and 256 KiB each), so memory stays bounded whatever
 * the backlog and the partition count: the bytes bound the payloads, the count bounds
 * librdkafka's overhead of about 400 bytes a message (idemd.yaml(5) MEMORY).
 */
#define IDEM_CONSUMER_PREFETCH_MESSAGES 160000
#define IDEM_CONSUMER_PREFETCH_KBYTES   32768

/* The least prefetch a partition gets, however many there are: one fetch of a partition
 * (max.partition.fetch.bytes, 1 MiB by default) in a few rounds. */
#define IDEM_CONSUMER_PREFETCH_MIN_MESSAGES 1000
#define IDEM_CONSUMER_PREFETCH_MIN_KBYTES   256

/*
 * When the partitions cannot be counted at start-up (a topic missing, metadata not answered in
 * time), each gets the least above, the share of as many partitions as the whole covers at it
 * (this many: 32768 / 256 KiB; 160000 / 1000 messages cover 160): up to this many partitions hold
 * no more than the whole, and more hold no more than counted ones would. librdkafka reads the
 * prefetch from its configuration only, which cannot change once the consumer is made, so it
 * stays so until idemd restarts (README, "Memory").
 */
#define IDEM_CONSUMER_PREFETCH_FALLBACK_PARTITIONS                                                 \
	(IDEM_CONSUMER_PREFETCH_KBYTES / IDEM_CONSUMER_PREFETCH_MIN_KBYTES <                       \
	                 IDEM_CONSUMER_PREFETCH_MESSAGES / IDEM_CONSUMER_PREFETCH_MIN_MESSAGES     \
	         ? IDEM_CONSUMER_PREFETCH_KBYTES / IDEM_CONSUMER_PREFETCH_MIN_KBYTES               \
	         : IDEM_CONSUMER_PREFETCH_MESSAGES / IDEM_CONSUMER_PREFETCH_MIN_MESSAGES)

/*
 * @brief The prefetch per partition for @partitions partitions in all (0: unknown, the least):
 * queued.min.messages and queued.max.messages.kbytes.
 */
void idem_consumer_prefetch(int partitions, long *ret_messages, long *ret_kbytes);

/*
 * @brief Build the consumer configuration: brokers and group from @cfg, idemd's own settings
 * (offsets are committed by idemd itself, only after the Postgres commit and with metadata:
 * enable.auto.offset.store and enable.auto.commit off), the prefetch divided among
 * @partitions (idem_consumer_prefetch(); 0: unknown, the least a partition gets), then
 * kafka.properties.
 * @param ret_conf on success, a new configuration the caller owns.
 */
IDEM_NODISCARD idem_status idem_consumer_conf(const struct idem_cfg *cfg, int partitions,
                                              rd_kafka_conf_t **ret_conf, idem_error *err);

/*
 * @brief How many partitions @topic has (metadata of all topics through @rk, up to 10 s: a
 * named topic's metadata would create it on a broker that creates topics on request).
 * IDEM_ERR_NOT_FOUND when the brokers have no such topic.
 */
IDEM_NODISCARD idem_status idem_consumer_partition_count(rd_kafka_t *rk, const char *topic,
                                                         int *ret_n, idem_error *err);

/*
 * @brief How many members group @group has, asked of the brokers without joining it
 * (ListGroups and DescribeGroups, up to @timeout_ms): a live group is seen without a rebalance.
 * A group the brokers do not know has none.
 * @returns IDEM_OK and *@ret_members; IDEM_ERR_UNAVAILABLE when the brokers cannot tell (they
 * lack those requests, as librdkafka's mock cluster does, or do not answer in time).
 */
IDEM_NODISCARD idem_status idem_consumer_group_members(rd_kafka_t *rk, const char *group,
                                                       int timeout_ms, int *ret_members,
                                                       idem_error *err);

/*
 * @brief Make a consumer (no subscription) for tools: the same settings, optionally another
 * group, and enable.auto.commit off: a tool commits only what it commits explicitly.
 */
IDEM_NODISCARD idem_status idem_consumer_new(const struct idem_cfg *cfg, const char *group,
                                             rd_kafka_t **ret_rk, idem_error *err);

/* Called back from within a poll when the group hands partitions over or takes them away. */
struct idem_consumer_hooks {
	/* Before the partitions of @list are assigned (their fetching starts after it returns):
	 * may set each element's .offset, where its fetching starts (librdkafka honours it, for
	 * eager and incremental assignment alike); left RD_KAFKA_OFFSET_INVALID, the partition
	 * starts at the group's committed offset. */
	void (*assign)(void *opaque, rd_kafka_topic_partition_list_t *list);
	/* Once they are assigned (offsets may be stored for them from then on); may be NULL. */
	void (*assigned)(void *opaque, const rd_kafka_topic_partition_list_t *list);
	/* Before the partitions of @list are unassigned: the last chance to finish them. */
	void (*revoke)(void *opaque, const rd_kafka_topic_partition_list_t *list);
	/* An asynchronous commit is done: per partition .err says whether Kafka has the offset;
	 * may be NULL. */
	void (*committed)(void *opaque, rd_kafka_resp_err_t err,
	                  const rd_kafka_topic_partition_list_t *offsets);
	void *opaque;
};

/*
 * @brief Which of cfg->topics the brokers do not have (ret_missing[i] for cfg->topics[i]), and
 * how many partitions they have in all (*@ret_partitions, may be NULL; 0 unless every topic
 * exists), asked as metadata of all topics through @rk (up to @timeout_ms), which creates none.
 */
IDEM_NODISCARD idem_status idem_consumer_topics_missing(rd_kafka_t *rk, const struct idem_cfg *cfg,
                                                        int timeout_ms, bool *ret_missing,
                                                        int *ret_partitions, idem_error *err);

/*
 * @brief Subscribe @rk to those of cfg->topics that are not @missing (missing[i] for
 * cfg->topics[i]), replacing its subscription; with none, unsubscribe. idemd never names a topic
 * the brokers do not have: a subscription would create it where topics are created on request.
 */
IDEM_NODISCARD idem_status idem_consumer_subscribe(rd_kafka_t *rk, const struct idem_cfg *cfg,
                                                   const bool *missing, idem_error *err);

/*
 * @brief Create idemd's consumer (idem_consumer_conf() plus the rebalance and error callbacks),
 * route its events to the consumer queue and subscribe to those of cfg->topics that exist
 * (idem_consumer_topics_missing(); none if it cannot be asked).
 * @param hooks must outlive the consumer.
 * @param ret_missing cfg->n_topics elements: which topics were not subscribed, missing or not
 * known to exist (set on failure too).
 * @param ret_rk on success, the consumer, owned by the caller (rd_kafka_consumer_close() then
 * rd_kafka_destroy()).
 */
IDEM_NODISCARD idem_status idem_consumer_open(const struct idem_cfg *cfg,
                                              const struct idem_consumer_hooks *hooks,
                                              bool *ret_missing, rd_kafka_t **ret_rk,
                                              idem_error *err);

/*
 * @brief The fetch queue of an assigned partition, as a queue of the caller's own: what is
 * fetched for it is not forwarded to the consumer queue but waits there until the caller
 * consumes it (rd_kafka_consume_batch_queue()), and librdkafka prefetches the partition up to
 * queued.min.messages / queued.max.messages.kbytes of that queue. Not consuming a partition is
 * its backpressure: no pause, so no fetch is dropped, done again, or left waiting behind a long
 * poll of the broker's other partitions. @wake(@rk, @opaque) is called from a librdkafka thread
 * when the queue gains a message while empty. Call it before the partition is assigned (in the
 * assign hook). NULL when out of memory.
 */
rd_kafka_queue_t *idem_consumer_queue_open(rd_kafka_t *rk, const char *topic, int32_t partition,
                                           void (*wake)(rd_kafka_t *rk, void *opaque),
                                           void *opaque);

/* @brief Stop the wake-ups and release the handle (NULL is ignored). */
void idem_consumer_queue_close(rd_kafka_queue_t *q);

/* Scratch for one message's headers at a time, grown to the most any message had. */
struct idem_consumer_headers {
	struct idem_header *v;
	size_t cap;
};

/*
 * @brief View @rkm (a message, not an error) as business keys and handler parameters read it:
 * the one conversion from a Kafka message, for the daemon and for replay planning alike, so
 * that both find the same key. Every header is in view, in order, held in @h while @rkm lives;
 * headers librdkafka cannot read are left out altogether (none in view).
 * @returns IDEM_OK or IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_consumer_view(const rd_kafka_message_t *rkm,
                                              struct idem_consumer_headers *h,
                                              struct idem_msgview *ret_m);
void idem_consumer_headers_free(struct idem_consumer_headers *h);

/* @brief Stop fetching @topic/@partition. */
void idem_consumer_pause(rd_kafka_t *rk, const char *topic, int32_t partition);

/*
 * @brief Fetch @topic/@partition again from @offset, after a pause: resume it, then seek there,
 * waiting (up to 5 s) for the seek so that nothing fetched before it arrives afterwards.
 */
void idem_consumer_resume(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset);

/*
 * @brief Where a partition without any position starts (auto.offset.reset as idemd runs it):
 * RD_KAFKA_OFFSET_BEGINNING (earliest, the default) or RD_KAFKA_OFFSET_END (latest).
 */
int64_t idem_consumer_reset_offset(const struct idem_cfg *cfg);

/*
 * @brief How often the daemon commits the offsets it may commit, in milliseconds:
 * auto.commit.interval.ms as idemd runs it (500 unless kafka.properties says otherwise; idemd
 * commits itself, with metadata, but keeps librdkafka's name for the interval).
 */
int idem_consumer_commit_interval_ms(const struct idem_cfg *cfg);

/*
 * @brief Commit @offsets (each with its .metadata) to the group: @sync waits for the answer,
 * otherwise hooks.committed hears it from a later poll. @why names the occasion in the log.
 * @returns true when a synchronous commit succeeded or an asynchronous one was sent.
 */
bool idem_consumer_commit(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *offsets, bool sync,
                          const char *why);

#endif
