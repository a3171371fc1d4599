/*
 * idem_daemon_commit.c - what Kafka is told: the offset rule (an offset is stored only once
 * everything below it committed in Postgres) and the commits of stored offsets to Kafka, each
 * with idemd's metadata naming the database, the log and the consumer (idem_resume;
 * ARCHITECTURE.md "Data flow", "Where a partition starts"). On the consumer thread, as the rest
 * of idem_daemon (idem_daemon_int.h).
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_daemon_int.h"
#include "idem_part.h"
#include "idem_resume.h"

/*
 * The offset rule (idem_part): Kafka hears of @next only once everything below it committed in
 * Postgres, and never of an offset below one it already has (idem__daemon_commit_offsets() sends
 * it).
 */
void idem__daemon_store_offset(idem_daemon *d, struct idem_part *p, int64_t next)
{
	(void)d;
	if (idem_part_committed(p, next))
		idem_part_stored(p, next);
}

/*
 * The offsets to commit to Kafka: those it does not have yet (idem_part_commit_due(): never over
 * a committed offset that could not be read; @only_leaving: only the partitions being revoked),
 * each with its metadata: this database's identity, the log and the consumer, where the
 * consumer's first start on the log began, and the offset, which tells a later assignment that
 * the database held it, and in which log, for which claims (idem_resume; ARCHITECTURE.md "Where
 * a partition starts"). Built here, not in idem_part: the metadata is idem_resume's, a layer
 * above idem_part (ARCHITECTURE.md "Modules").
 */
static rd_kafka_topic_partition_list_t *commit_list(const idem_daemon *d, bool only_leaving)
{
	rd_kafka_topic_partition_list_t *list;
	struct idem_resume_md m = { .version = 2 };
	char md[512];

	list = rd_kafka_topic_partition_list_new((int)d->parts.n + 1);
	memcpy(m.db_id, d->db_id, sizeof(m.db_id));
	for (size_t i = 0; i < d->parts.n; i++) {
		const struct idem_part *p = d->parts.v[i];
		rd_kafka_topic_partition_t *tp;
		int len;

		if (!idem_part_commit_due(p, only_leaving))
			continue;
		memcpy(m.cluster, p->kafka_cluster, sizeof(m.cluster));
		m.epoch = p->log_epoch;
		snprintf(m.consumer, sizeof(m.consumer), "%s", p->route->consumer);
		m.first = p->log_first;
		m.next = p->stored_next;
		len = idem_resume_md_format(md, sizeof(md), &m);
		tp = rd_kafka_topic_partition_list_add(list, p->topic, p->partition);
		tp->offset = p->stored_next;
		tp->metadata = malloc((size_t)len);
		if (tp->metadata != NULL) {
			memcpy(tp->metadata, md, (size_t)len);
			tp->metadata_size = (size_t)len;
		}
	}
	return list;
}

/*
 * Commit to Kafka the offsets it lacks, with idemd's metadata (commit_list()). Every
 * auto.commit.interval.ms asynchronously (what fails is sent again next time;
 * idem__daemon_on_committed() records what Kafka has), and synchronously before partitions are
 * given up.
 */
void idem__daemon_commit_offsets(idem_daemon *d, bool sync, bool only_leaving, const char *why)
{
	rd_kafka_topic_partition_list_t *list;

	d->last_commit_ms = idem_mono_ms();
	list = commit_list(d, only_leaving);
	if (idem_consumer_commit(d->rk, list, sync, why) && sync) {
		for (int i = 0; i < list->cnt; i++) {
			struct idem_part *p = idem_parts_find(&d->parts, list->elems[i].topic,
			                                      list->elems[i].partition);

			if (p != NULL)
				p->commit_acked = list->elems[i].offset;
		}
	}
	rd_kafka_topic_partition_list_destroy(list);
}

/* An asynchronous commit is done: what Kafka has now. */
void idem__daemon_on_committed(void *opaque, rd_kafka_resp_err_t err,
                               const rd_kafka_topic_partition_list_t *offsets)
{
	idem_daemon *d = opaque;

	for (int i = 0; i < offsets->cnt; i++) {
		const rd_kafka_topic_partition_t *tp = &offsets->elems[i];
		struct idem_part *p = idem_parts_find(&d->parts, tp->topic, tp->partition);

		if (p != NULL && err == RD_KAFKA_RESP_ERR_NO_ERROR &&
		    tp->err == RD_KAFKA_RESP_ERR_NO_ERROR && tp->offset >= 0)
			p->commit_acked = tp->offset;
	}
}
