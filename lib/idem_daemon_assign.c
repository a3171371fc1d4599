/*
 * idem_daemon_assign.c - partitions coming and going, and where each one is read from.
 *
 * The rebalance callbacks, on the consumer thread (idem_consumer calls them from within a
 * poll): an assigned partition starts at the database's position, or at Kafka's committed offset
 * where another client moved it ahead (idem_resume decides; ARCHITECTURE.md "Where a partition
 * starts"); the start is logged, and committed to Kafka once assigned. A revoked partition's
 * batches are drained and its offsets committed before it is given up.
 * While partitions are held, the database may go back in time (a restore, a failover): found by
 * a batch's transaction or by the check after a worker reconnected, a partition is read again
 * from the database's position (ARCHITECTURE.md "When the database goes back").
 * The main loop is idem_daemon.c; struct idem_daemon is in idem_daemon_int.h.
 */
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_daemon_int.h"
#include "idem_log.h"
#include "idem_metrics.h"
#include "idem_part.h"
#include "idem_pool.h"
#include "idem_resume.h"

/* Committed offsets unreadable at assignment: read again this often, each read this long. */
#define UNREAD_RETRY_MS   2000
#define UNREAD_TIMEOUT_MS 1000

static void fmt_offset(char *buf, size_t len, int64_t offset)
{
	if (offset >= 0)
		snprintf(buf, len, "%" PRId64, offset);
	else
		snprintf(buf, len, "-");
}

/* The row's log, as the log line says it. */
static const char *log_why(const struct idem_resume_pos *pos)
{
	switch (pos->out.log) {
	case IDEM_LOG_CLUSTER:
		return "the database's position is in another Kafka cluster's log (disaster "
		       "recovery, migration)";
	case IDEM_LOG_TRUNCATED:
		return "the database's position is beyond the end of the partition's log (the topic "
		       "was deleted and created again, or the log lost its tail)";
	case IDEM_LOG_SAME:
		break;
	}
	return "";
}

IDEM_TESTABLE void idem__daemon_log_assign(const rd_kafka_topic_partition_t *tp,
                                           const struct idem_resume_pos *pos, const char *db_id,
                                           const char *cluster, const char *d_group);

/* What idem__daemon_on_assign() decided for one partition, in the log (and a warning where Kafka
 * and the database disagree). Message-derived text never appears: offsets, names from the
 * configuration, and the metadata's fields, which idem_resume_md_parse() checked. */
IDEM_TESTABLE void idem__daemon_log_assign(const rd_kafka_topic_partition_t *tp,
                                           const struct idem_resume_pos *pos, const char *db_id,
                                           const char *cluster, const char *d_group)
{
	const struct idem_resume_in *in = &pos->in;
	char start[24], db[24], committed[24];

	fmt_offset(start, sizeof(start), tp->offset);
	fmt_offset(db, sizeof(db), in->db);
	fmt_offset(committed, sizeof(committed), in->committed);
	if (pos->out.log != IDEM_LOG_SAME)
		idem_log_warn("kafka",
		              "log replaced: topic=%s partition=%" PRId32 " consumer=%s: %s "
		              "(database next_offset=%s in cluster %s, log epoch %" PRId32
		              "; Kafka now: cluster %s, offsets %" PRId64 "..%" PRId64
		              "): that position is set aside; starting at %s (%s, kafka "
		              "committed=%s), log epoch %" PRId32 "; the claims make whatever "
		              "is read again a no-op",
		              tp->topic, tp->partition, in->consumer, log_why(pos), db,
		              in->db_cluster[0] ? in->db_cluster : "(unknown)", in->db_epoch,
		              cluster[0] ? cluster : "(unknown)", in->low, in->high, start,
		              idem_resume_case_str(pos->out.why), committed, pos->out.epoch);
	switch (pos->out.why) {
	case IDEM_RESUME_BEHIND:
		if (in->md.consumer[0] != '\0' && strcmp(in->md.consumer, in->consumer) != 0) {
			char group[24];

			/* A rename and a restore in one: the gap from the group's position, under
			 * the new name (the database holds none of it under any name). */
			fmt_offset(group, sizeof(group),
			           in->other_db > in->db || pos->out.log != IDEM_LOG_SAME
			                   ? in->other_db
			                   : in->db);
			idem_log_warn(
			        "kafka",
			        "database behind, consumer renamed: topic=%s partition=%" PRId32
			        " next_offset=%s in the database for group %s, kafka committed=%s by "
			        "idemd for consumer %s (an earlier name of %s), database %s: the "
			        "database went back in time (restore, failover); reading offsets from "
			        "%s again under consumer %s, %" PRId64 " message(s) to re-apply",
			        tp->topic, tp->partition, group, d_group, committed,
			        in->md.consumer, in->consumer,
			        in->md.db_id[0] ? in->md.db_id : "(unknown)", start, in->consumer,
			        tp->offset >= 0 ? in->committed - tp->offset : 0);
			break;
		}
		idem_log_warn(
		        "kafka",
		        "database behind: topic=%s partition=%" PRId32 " next_offset=%s in the "
		        "database, kafka committed=%s by idemd for consumer %s, database %s: the "
		        "database went back in time (restore, failover); reading offsets from %s "
		        "again, %" PRId64 " message(s) to re-apply",
		        tp->topic, tp->partition,
		        in->db >= 0 && pos->out.log == IDEM_LOG_SAME ? db : "none", committed,
		        in->md.consumer[0] ? in->md.consumer : in->consumer,
		        in->md.db_id[0] ? in->md.db_id : "(unknown)", start,
		        tp->offset >= 0 ? in->committed - tp->offset : 0);
		break;
	case IDEM_RESUME_RENAMED: {
		char other[24];

		fmt_offset(other, sizeof(other), in->other_db);
		idem_log_warn(
		        "kafka",
		        "consumer renamed: topic=%s partition=%" PRId32
		        " kafka committed=%s by idemd for consumer %s and not for this route's "
		        "consumer %s (next_offset %s); the furthest earlier consumer of group "
		        "%s got to next_offset %s: what earlier names applied is not applied "
		        "again under %s; starting at %s. To apply it again on purpose: "
		        "idemctl replay",
		        tp->topic, tp->partition, committed,
		        in->md_idemd && in->md.consumer[0] ? in->md.consumer : "(unknown)",
		        in->consumer, pos->out.log == IDEM_LOG_SAME ? db : "none", d_group, other,
		        in->consumer, start);
		break;
	}
	case IDEM_RESUME_SKIP:
		idem_log_warn("kafka",
		              "offsets moved ahead by another client: topic=%s partition=%" PRId32
		              " kafka committed=%s, database next_offset=%s; honoured: offsets "
		              "%s..%" PRId64 " are skipped",
		              tp->topic, tp->partition, committed, db, db, in->committed - 1);
		break;
	case IDEM_RESUME_NO_KAFKA:
		idem_log_warn("kafka",
		              "cannot read the committed offset of topic=%s partition=%" PRId32
		              " (%s): starting it at the database's next_offset=%s; nothing is "
		              "committed to Kafka for it until its committed offset can be read",
		              tp->topic, tp->partition, pos->kafka_err, db);
		break;
	case IDEM_RESUME_NO_DB:
		idem_log_warn("kafka",
		              "starting topic=%s partition=%" PRId32
		              " at kafka committed=%s without the database%s",
		              tp->topic, tp->partition, committed,
		              pos->out.floor >= 0 ? " (its first transaction checks that the "
		                                    "database holds it)"
		                                  : "");
		break;
	default:
		break;
	}
	if (pos->kafka_failed > 0 && in->committed_read)
		idem_log_warn("kafka",
		              "read the committed offset of topic=%s partition=%" PRId32
		              " after %d failed read(s) (last: %s)",
		              tp->topic, tp->partition, pos->kafka_failed, pos->kafka_err);
	if (pos->record_err[0] != '\0')
		idem_log_warn("kafka",
		              "cannot record the start of topic=%s partition=%" PRId32
		              " in the database (%s): started without it",
		              tp->topic, tp->partition, pos->record_err);
	idem_log_info("kafka",
	              "assigned topic=%s partition=%" PRId32 " start=%s (database next_offset=%s, "
	              "kafka committed=%s%s) case=%s database=%s cluster=%s log_epoch=%" PRId32,
	              tp->topic, tp->partition, start, db, committed,
	              tp->offset >= 0 ? "" : "; librdkafka starts it at the committed offset",
	              idem_resume_case_str(pos->out.why), db_id[0] ? db_id : "-",
	              cluster[0] ? cluster : "-", pos->out.epoch);
}

/* A partition's queue gained a message while empty (a librdkafka thread): end the poll. */
static void wake(rd_kafka_t *rk, void *opaque)
{
	idem_daemon *d = opaque;

	(void)rk;
	rd_kafka_queue_yield(d->cq);
}

/*
 * The group hands partitions over (idem_consumer assigns them after this): each one starts at
 * the database's position, unless Kafka's committed offset is beyond it and idemd did not commit
 * it (an operator's skip); an offset idemd committed that the database lacks means the database
 * went back, and the gap is read again (idem_resume; ARCHITECTURE.md "Where a partition starts"
 * and "When the database goes back"). This holds for eager and incremental (cooperative)
 * assignment alike: librdkafka starts each partition of @list at its .offset.
 */
void idem__daemon_on_assign(void *opaque, rd_kafka_topic_partition_list_t *list)
{
	idem_daemon *d = opaque;
	struct idem_resume_pos *pos = calloc(list->cnt > 0 ? (size_t)list->cnt : 1, sizeof(*pos));
	idem_error db_err = { 0 };
	char db_id[IDEM_DB_ID_LEN] = "", cluster[IDEM_CLUSTER_ID_LEN] = "";

	/* Out of memory: every partition starts at its committed offset, as librdkafka would. */
	if (pos != NULL) {
		idem_resume_positions(d->resume, d->rk, list, pos, db_id, cluster, &db_err);
		if (db_err.code != IDEM_OK)
			idem_log_warn(
			        "kafka",
			        "cannot read where the partitions stopped in the database (%s): "
			        "starting them from Kafka's committed offsets",
			        db_err.msg);
		if (db_id[0] != '\0')
			memcpy(d->db_id, db_id, sizeof(d->db_id));
		if (cluster[0] != '\0')
			memcpy(d->cluster, cluster, sizeof(d->cluster));
	}
	for (int i = 0; i < list->cnt; i++) {
		rd_kafka_topic_partition_t *tp = &list->elems[i];
		struct idem_part *p = idem_parts_find(&d->parts, tp->topic, tp->partition);
		idem_status r;

		/* Still held (not expected: a partition is revoked before it is assigned again):
		 * its bookkeeping goes on, and so does its fetching. */
		if (p != NULL)
			tp->offset = RD_KAFKA_OFFSET_INVALID;
		r = idem_parts_assign(&d->parts, d->cfg, tp->topic, tp->partition, &p);
		if (r == IDEM_OK && p->queue == NULL) {
			p->queue =
			        idem_consumer_queue_open(d->rk, tp->topic, tp->partition, wake, d);
			if (p->queue == NULL)
				r = IDEM_ERR_NOMEM;
		}
		if (r != IDEM_OK) {
			idem_log_error("kafka",
			               "cannot take partition topic=%s partition=%" PRId32 ": %s",
			               tp->topic, tp->partition, idem_status_str(r));
			continue;
		}
		if (tp->offset >= 0)
			p->fetch_next = tp->offset;
		memcpy(p->kafka_cluster, d->cluster, sizeof(p->kafka_cluster));
		if (pos == NULL)
			continue;
		p->db_floor = pos[i].out.floor;
		p->reapply_to = pos[i].out.reapply_to;
		p->log_epoch = pos[i].out.epoch;
		p->log_first = pos[i].out.first;
		p->commit_unread = pos[i].out.why == IDEM_RESUME_NO_KAFKA;
		if (pos[i].out.why == IDEM_RESUME_BEHIND)
			idem_metrics_database_behind(d->metrics);
		idem_metrics_partition_start(d->metrics, idem_resume_case_str(pos[i].out.why),
		                             pos[i].out.log != IDEM_LOG_SAME);
		/* The loss alarm is for messages skipped by another client's move only: a gap
		 * the database lost is read again, a mirror's translated offset is where the same
		 * messages are in the new log. */
		idem_metrics_partition_assigned(
		        d->metrics, tp->topic, tp->partition,
		        pos[i].out.log == IDEM_LOG_SAME && (pos[i].out.why == IDEM_RESUME_SKIP ||
		                                            pos[i].out.why == IDEM_RESUME_KAFKA)
		                ? pos[i].in.committed
		                : -1,
		        pos[i].out.log == IDEM_LOG_SAME ? pos[i].in.db : -1);
		idem__daemon_log_assign(tp, &pos[i], d->db_id, d->cluster, d->cfg->group_id);
	}
	free(pos);
}

/*
 * The partitions of @list are assigned: where one starts from the database's position, commit
 * that to Kafka too (the offset rule holds: everything below it is applied), so the committed
 * offset catches up even if no message follows, for lag tools; and where the database went
 * back, Kafka's offset follows it down, with metadata naming the database's position.
 */
void idem__daemon_on_assigned(void *opaque, const rd_kafka_topic_partition_list_t *list)
{
	idem_daemon *d = opaque;

	for (int i = 0; i < list->cnt; i++) {
		struct idem_part *p;

		if (list->elems[i].offset < 0)
			continue;
		p = idem_parts_find(&d->parts, list->elems[i].topic, list->elems[i].partition);
		/* Only the database's own position: committed with idemd's metadata, a skip's start
		 * would read, after a crash, as a position the database lost. The skip is
		 * committed with the first batch past it. */
		if (p == NULL || list->elems[i].offset != p->db_floor)
			continue;
		p->db_next = list->elems[i].offset;
		p->stored_next = list->elems[i].offset;
	}
	idem__daemon_ready_changed(d);
}

/*
 * Partitions are being taken away: finish what is in hand (one attempt each; a failed batch is
 * abandoned and redelivered to the new owner, where the claims make it harmless), commit the
 * offsets, then let them go (idem_consumer unassigns them after this).
 */
void idem__daemon_on_revoke(void *opaque, const rd_kafka_topic_partition_list_t *list)
{
	idem_daemon *d = opaque;

	for (int i = 0; i < list->cnt; i++) {
		struct idem_part *p =
		        idem_parts_find(&d->parts, list->elems[i].topic, list->elems[i].partition);

		if (p != NULL)
			(void)idem_part_leave(p);
	}
	/* Out of memory here leaves the batches uncommitted: they are redelivered. */
	if (idem__daemon_drain(d, 1, NULL) != IDEM_OK)
		idem_log_error("kafka", "out of memory while finishing revoked partitions");
	idem__daemon_commit_offsets(d, true, true, "revoke");
	for (int i = 0; i < list->cnt; i++) {
		struct idem_part *p =
		        idem_parts_find(&d->parts, list->elems[i].topic, list->elems[i].partition);

		if (p != NULL) {
			d->bytes_held -= idem_part_bytes(p);
			idem_consumer_queue_close(p->queue);
			p->queue = NULL;
		}
		idem_parts_revoke(&d->parts, list->elems[i].topic, list->elems[i].partition);
		idem_metrics_partition_remove(d->metrics, list->elems[i].topic,
		                              list->elems[i].partition);
		idem_log_info("kafka", "revoked topic=%s partition=%" PRId32, list->elems[i].topic,
		              list->elems[i].partition);
	}
	idem__daemon_ready_changed(d);
}

/*
 * The database no longer holds what this process saw it hold for @p: it went back in time (a
 * restore, a failover to a standby that lacked the last commits). Found by a batch's
 * transaction (@how "transaction", which rolled back) or by the check after a worker
 * reconnected ("reconnect"); @p has nothing in flight. Everything in hand is dropped and the
 * partition is read again from the database's position @db (no progress row: where the
 * consumer's first start on the log began, or where one would begin if that is not known);
 * the claims make the part the database still has a no-op, and the rest is
 * applied again, exactly once (ARCHITECTURE.md "When the database goes back").
 */
void idem__daemon_went_back(idem_daemon *d, struct idem_part *p, int64_t db, const char *how)
{
	int64_t was = p->db_floor > p->db_next ? p->db_floor : p->db_next, gap;
	size_t bytes = idem_part_bytes(p);
	bool was_halted = p->poison_at >= 0;

	gap = idem_part_rewind(p, db);
	d->bytes_held -= bytes;
	idem_metrics_database_behind(d->metrics);
	if (was_halted)
		idem__daemon_ready_changed(d);
	idem_log_warn("kafka",
	              "database behind: topic=%s partition=%" PRId32 " next_offset=%" PRId64
	              " in the database, %" PRId64
	              " committed by this process (found at %s): it went back in time (restore, "
	              "failover); reading the partition again from there, %" PRId64
	              " message(s) to re-apply",
	              p->topic, p->partition, db, was, how, gap);
	/* Paused or fetching, the partition is resumed and sought there (idem_part_rewind() ended
	 * any wait: FETCHING, or still LEAVING if it drains); without a row, from
	 * where the consumer's first start on this log began (a `latest` start is not the end of
	 * the log now), or from the log's start if that is not known (reading again is safe). */
	if (db < 0 && p->log_first >= 0)
		db = p->log_first;
	idem__daemon_resume_part(d, p, db >= 0 ? db : RD_KAFKA_OFFSET_BEGINNING);
	if (db < 0)
		p->fetch_next = -1;
}

/*
 * A worker opened a new connection, which may reach another database state (a standby promoted
 * after a failover): every partition is checked against the database's progress rows, on a
 * connection of the consumer thread's own, and one the database holds less of than this process
 * saw is read again from there (idem__daemon_went_back()). A partition with a batch in flight is
 * left to that batch's transaction, which checks the same before it commits.
 */
void idem__daemon_check_positions(idem_daemon *d)
{
	rd_kafka_topic_partition_list_t *list =
	        rd_kafka_topic_partition_list_new((int)d->parts.n + 1);
	int64_t *db = calloc(d->parts.n + 1, sizeof(*db));
	uint64_t seen = idem_pool_reconnects(d->pool);
	char db_id[IDEM_DB_ID_LEN];
	idem_error err = { 0 };

	for (size_t i = 0; i < d->parts.n; i++)
		rd_kafka_topic_partition_list_add(list, d->parts.v[i]->topic,
		                                  d->parts.v[i]->partition);
	if (db == NULL || idem_resume_read_db(d->resume, list, db, db_id, &err) != IDEM_OK) {
		idem_log_debug("kafka",
		               "cannot check the partitions' positions after a reconnect: %s",
		               db == NULL ? "out of memory" : err.msg);
		d->check_at_ms = idem_mono_ms() + 1000;
		goto out;
	}
	d->reconnects = seen;
	if (db_id[0] != '\0' && d->db_id[0] != '\0' && strcmp(db_id, d->db_id) != 0)
		idem_log_warn("kafka",
		              "reconnected to another database (identity %s, was %s): checking "
		              "every partition's position against it",
		              db_id, d->db_id);
	if (db_id[0] != '\0')
		memcpy(d->db_id, db_id, sizeof(d->db_id));
	for (size_t i = 0; i < d->parts.n; i++) {
		struct idem_part *p =
		        idem_parts_find(&d->parts, list->elems[i].topic, list->elems[i].partition);

		if (p != NULL && !p->busy && !idem_part_leaving(p) && p->db_floor >= 0 &&
		    db[i] < p->db_floor)
			idem__daemon_went_back(d, p, db[i], "reconnect");
	}
out:
	free(db);
	rd_kafka_topic_partition_list_destroy(list);
}

/*
 * Partitions whose committed offset could not be read at assignment commit nothing (an offset
 * Kafka has that idemd could not read is never overwritten: it may be an operator's skip) and
 * read it again every few seconds. Once read: an offset another client moved beyond where the
 * partition stands is honoured from there on (what was applied meanwhile stays applied, and is
 * logged); anything else lets commits go on.
 */
void idem__daemon_check_unread(idem_daemon *d)
{
	rd_kafka_topic_partition_list_t *list;
	struct idem_resume_pos *pos;
	int64_t now = idem_mono_ms();

	if (now < d->unread_at_ms)
		return;
	d->unread_at_ms = now + UNREAD_RETRY_MS;
	list = rd_kafka_topic_partition_list_new((int)d->parts.n + 1);
	for (size_t i = 0; i < d->parts.n; i++) {
		if (d->parts.v[i]->commit_unread)
			rd_kafka_topic_partition_list_add(list, d->parts.v[i]->topic,
			                                  d->parts.v[i]->partition);
	}
	pos = list->cnt > 0 ? calloc((size_t)list->cnt, sizeof(*pos)) : NULL;
	if (pos == NULL)
		goto out;
	idem_resume_read_committed(d->rk, list, pos, UNREAD_TIMEOUT_MS);
	for (int i = 0; i < list->cnt; i++) {
		struct idem_resume_in *in = &pos[i].in;
		struct idem_part *p =
		        idem_parts_find(&d->parts, list->elems[i].topic, list->elems[i].partition);
		struct idem_resume_out o;
		int64_t at;

		if (p == NULL || !in->committed_read)
			continue;
		at = p->db_next > p->db_floor ? p->db_next : p->db_floor;
		/* The start rule decides: a start beyond where the partition stands is where it
		 * goes on. */
		o = idem_resume_decide_late(in, p->route->consumer, p->kafka_cluster, p->log_epoch,
		                            p->log_first, at);
		if (at >= 0 && o.start > at) {
			if (p->busy || idem_part_leaving(p))
				continue; /* once its batch in flight is done */
			bool was_halted = p->poison_at >= 0;

			d->bytes_held -= idem_part_bytes(p);
			idem_part_skip_to(p, o.start);
			idem__daemon_resume_part(d, p, o.start);
			/* Past the poison a halt stopped at: ready again. */
			if (was_halted)
				idem__daemon_ready_changed(d);
			idem_log_warn("kafka",
			              "offsets moved ahead by another client, read late: topic=%s "
			              "partition=%" PRId32 " case=%s kafka committed=%" PRId64
			              ", database next_offset=%" PRId64
			              "; honoured from here: offsets %" PRId64 "..%" PRId64
			              " are skipped",
			              p->topic, p->partition, idem_resume_case_str(o.why),
			              in->committed, at, at, o.start - 1);
		} else {
			idem_log_info("kafka",
			              "read the committed offset of topic=%s partition=%" PRId32
			              " at last (kafka committed=%" PRId64
			              ", database next_offset=%" PRId64
			              "): committing its offsets again",
			              p->topic, p->partition, in->committed, at);
		}
		p->commit_unread = false;
	}
out:
	free(pos);
	rd_kafka_topic_partition_list_destroy(list);
}

/*
 * A subscribed topic the brokers do not have is an error the operator must see, not a healthy
 * idle: idemd creates no topic, and subscribing to it would create it where brokers create
 * topics on request, so it is not subscribed until it exists, it is named in the log while it
 * is missing, and /readyz is not ready.
 */
#define IDEM_DAEMON_TOPICS_CHECK_MS 5000
#define IDEM_DAEMON_TOPICS_LOG_MS   60000
/* The consumer thread waits this long at most for the brokers' answer. */
#define IDEM_DAEMON_TOPICS_TIMEOUT_MS 2000

static size_t topics_missing(const idem_daemon *d, const char **ret_first)
{
	size_t n = 0;

	*ret_first = NULL;
	for (size_t i = 0; i < d->cfg->n_topics; i++) {
		if (!d->topic_missing[i])
			continue;
		if (n++ == 0)
			*ret_first = d->cfg->topics[i];
	}
	return n;
}

void idem__daemon_topics_report(idem_daemon *d)
{
	const char *first;
	size_t n = topics_missing(d, &first);
	int64_t now = idem_mono_ms();

	idem_metrics_topics_missing(d->metrics, first, n);
	if (n == 0)
		return;
	for (size_t i = 0; i < d->cfg->n_topics; i++) {
		if (d->topic_missing[i])
			idem_log_warn(
			        "kafka",
			        "topic '%s' (route '%s') does not exist, or the brokers did not say: not consumed until it does (idemd creates no topic), checking every %ds",
			        d->cfg->topics[i],
			        idem_cfg_route_for(d->cfg, d->cfg->topics[i])->name,
			        IDEM_DAEMON_TOPICS_CHECK_MS / 1000);
	}
	d->topics_at_ms = now + IDEM_DAEMON_TOPICS_CHECK_MS;
	d->topics_log_ms = now + IDEM_DAEMON_TOPICS_LOG_MS;
}

void idem__daemon_check_topics(idem_daemon *d)
{
	const char *first;
	size_t n = topics_missing(d, &first), now_missing = 0;
	bool *missing;
	idem_error err = { 0 };

	if (n == 0 || idem_mono_ms() < d->topics_at_ms)
		return;
	d->topics_at_ms = idem_mono_ms() + IDEM_DAEMON_TOPICS_CHECK_MS;
	missing = calloc(d->cfg->n_topics, sizeof(*missing));
	if (missing == NULL)
		return;
	if (idem_consumer_topics_missing(d->rk, d->cfg, IDEM_DAEMON_TOPICS_TIMEOUT_MS, missing,
	                                 NULL, &err) != IDEM_OK) {
		idem_log_debug("kafka", "cannot ask which topics exist: %s", err.msg);
		goto out_free;
	}
	for (size_t i = 0; i < d->cfg->n_topics; i++)
		now_missing += missing[i];
	if (now_missing < n) {
		if (idem_consumer_subscribe(d->rk, d->cfg, missing, &err) != IDEM_OK) {
			idem_log_warn("kafka", "%s, retrying in %ds", err.msg,
			              IDEM_DAEMON_TOPICS_CHECK_MS / 1000);
			goto out_free;
		}
		for (size_t i = 0; i < d->cfg->n_topics; i++) {
			if (d->topic_missing[i] && !missing[i])
				idem_log_info("kafka", "topic '%s' exists now: subscribed",
				              d->cfg->topics[i]);
		}
		memcpy(d->topic_missing, missing, d->cfg->n_topics * sizeof(*missing));
		n = topics_missing(d, &first);
		idem_metrics_topics_missing(d->metrics, first, n);
	}
	if (n > 0 && idem_mono_ms() >= d->topics_log_ms)
		idem__daemon_topics_report(d);
out_free:
	free(missing);
}
