/*
 * idem_daemon_assign.c - partitions coming and going, and where each one is read from.
 *
 * The rebalance callbacks, on the consumer thread (idem_consumer calls them from within a
 * poll): an assigned partition starts at the database's position, or at Kafka's committed offset
 * where another client moved it ahead (idem_resume decides; ARCHITECTURE.md "Where a partition
 * starts"); the start is logged, and committed to Kafka once assigned. A partition whose start
 * cannot be decided (a fact unreadable, a consumer renamed in the configuration only) waits,
 * paused (STARTING), and is decided again every IDEM_RESUME_RETRY_MS, or twice as long as the
 * last decision took (idem__daemon_check_starts(), idem_resume_retry_ms()).
 * A revoked partition's batches are drained and its offsets committed before it is given up.
 * While partitions are held, the database may go back in time (a restore, a failover): found by
 * a batch's transaction or by the check after a worker reconnected, the partition's start is
 * decided again, as at assignment (ARCHITECTURE.md "When the database goes back").
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

/* A partition whose start is not decided: its wait logged again this often (it is decided again
 * after idem_resume_retry_ms()). */
#define START_LOG_MS 60000

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
                                           const char *cluster);

/* What idem__daemon_on_assign() decided for one partition, in the log (and a warning where Kafka
 * and the database disagree). Message-derived text never appears: offsets, names from the
 * configuration, and the metadata's fields, which idem_resume_md_parse() checked. */
IDEM_TESTABLE void idem__daemon_log_assign(const rd_kafka_topic_partition_t *tp,
                                           const struct idem_resume_pos *pos, const char *db_id,
                                           const char *cluster)
{
	const struct idem_resume_in *in = &pos->in;
	char start[24], db[24], committed[24];

	if (pos->out.why == IDEM_RESUME_HOLD)
		return; /* said by log_waiting() */
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
		if (pos->out.mirror) {
			idem_log_warn(
			        "kafka",
			        "database behind, mirrored offset: topic=%s partition=%" PRId32
			        " kafka committed=%s carries idemd's metadata of cluster %s (next=%" PRId64
			        "), which the database does not hold there (next_offset %s): it went "
			        "back in time; reading offsets from %s again",
			        tp->topic, tp->partition, committed, in->md.cluster, in->md.next,
			        in->db >= 0 && strcmp(in->db_cluster, in->md.cluster) == 0 ? db
			                                                                   : "none",
			        start);
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
	case IDEM_RESUME_SKIP:
		idem_log_warn("kafka",
		              "offsets moved ahead by another client: topic=%s partition=%" PRId32
		              " kafka committed=%s, database next_offset=%s; honoured: offsets "
		              "%s..%" PRId64 " are skipped",
		              tp->topic, tp->partition, committed, db, db, in->committed - 1);
		break;
	case IDEM_RESUME_REWIND:
		idem_log_warn("kafka",
		              "offsets moved back by another client: topic=%s partition=%" PRId32
		              " kafka committed=%s, database next_offset=%s; honoured: offsets "
		              "%s..%" PRId64 " are read again (the claims make what was applied a "
		              "no-op)",
		              tp->topic, tp->partition, committed, db, committed, in->db - 1);
		break;
	case IDEM_RESUME_KAFKA:
		if (pos->out.mirror)
			idem_log_warn(
			        "kafka",
			        "mirrored offset: topic=%s partition=%" PRId32
			        " kafka committed=%s carries idemd's metadata of cluster %s "
			        "(next=%" PRId64 "), which the database holds there: starting "
			        "at it",
			        tp->topic, tp->partition, committed, in->md.cluster, in->md.next);
		break;
	default:
		break;
	}
	if (pos->kafka_failed > 0 && in->committed_read)
		idem_log_warn("kafka",
		              "read the committed offset of topic=%s partition=%" PRId32
		              " after %d failed read(s) (last: %s)",
		              tp->topic, tp->partition, pos->kafka_failed, pos->kafka_err);
	idem_log_info("kafka",
	              "assigned topic=%s partition=%" PRId32 " start=%s (database next_offset=%s, "
	              "kafka committed=%s) case=%s database=%s cluster=%s log_epoch=%" PRId32,
	              tp->topic, tp->partition, start, db, committed,
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

/* Why a partition's start waits, and since when: logged at once, then every START_LOG_MS. */
static void log_waiting(idem_daemon *d, struct idem_part *p, const struct idem_resume_pos *pos,
                        const char *detail)
{
	const struct idem_resume_in *in = &pos->in;
	int64_t now = idem_mono_ms();
	char db[24], other[24];

	if (p->start_wait == (int)pos->out.wait && p->start_logged_ms != 0 &&
	    now - p->start_logged_ms < START_LOG_MS)
		return;
	p->start_wait = (int)pos->out.wait;
	p->start_logged_ms = now;
	if (pos->out.wait != IDEM_WAIT_RENAMED) {
		idem_log_warn(
		        "kafka",
		        "not starting topic=%s partition=%" PRId32 " yet: %s%s%s%s; "
		        "nothing of it is read until it can be, tried again every %ds (twice as long "
		        "as the reads take, when they take longer)",
		        p->topic, p->partition, idem_resume_wait_why(pos->out.wait),
		        detail[0] != '\0' ? " (" : "", detail, detail[0] != '\0' ? ")" : "",
		        IDEM_RESUME_RETRY_MS / 1000);
		return;
	}
	fmt_offset(db, sizeof(db), in->db);
	fmt_offset(other, sizeof(other), in->other_db);
	idem_log_error(
	        "kafka",
	        "not starting topic=%s partition=%" PRId32 ": consumer renamed in the "
	        "configuration only: consumer %s of group %s got to next_offset %s on it, where "
	        "this route's consumer %s has %s; %s's claims are not %s's, so going on after it "
	        "would skip and starting before it would apply twice. Stop every instance that "
	        "runs %s, then run: idemctl rename %s %s (moves its claims and positions in one "
	        "transaction), or set the route's consumer back to %s. Tried again every %ds",
	        p->topic, p->partition, in->other_consumer, d->cfg->group_id,
	        in->other_db >= 0 ? other : "(another cluster's)", in->consumer,
	        in->db >= 0 ? db : "no position", in->other_consumer, in->consumer,
	        in->other_consumer, in->other_consumer, in->consumer, in->other_consumer,
	        IDEM_RESUME_RETRY_MS / 1000);
}

/* Readiness and the count of partitions not started: said to idem_metrics. */
static void starting_changed(idem_daemon *d)
{
	const struct idem_part *first = NULL;
	size_t n = 0;
	char why[160] = "";

	for (size_t i = 0; i < d->parts.n; i++) {
		if (!idem_part_starting(d->parts.v[i]))
			continue;
		if (n++ == 0)
			first = d->parts.v[i];
	}
	if (first != NULL)
		snprintf(why, sizeof(why), "topic %s partition %" PRId32 " not started: %s%s",
		         first->topic, first->partition,
		         first->start_wait == (int)IDEM_WAIT_RENAMED
		                 ? "its consumer was renamed in the configuration only "
		                   "(idemctl rename)"
		                 : idem_resume_wait_why((enum idem_resume_wait)first->start_wait),
		         n > 1 ? " (and others)" : "");
	idem_metrics_starting(d->metrics, n, why);
	idem__daemon_ready_changed(d);
}

/* idem_resume_positions() for @list into @pos, keeping the database's and the cluster's ids
 * this process names in its commits. */
static void read_positions(idem_daemon *d, rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *pos, idem_error *db_err)
{
	char db_id[IDEM_DB_ID_LEN] = "", cluster[IDEM_CLUSTER_ID_LEN] = "";

	idem_resume_positions(d->resume, d->rk, list, pos, db_id, cluster, db_err);
	if (db_id[0] != '\0')
		memcpy(d->db_id, db_id, sizeof(d->db_id));
	if (cluster[0] != '\0')
		memcpy(d->cluster, cluster, sizeof(d->cluster));
}

/*
 * What was decided for @p (just assigned, or STARTING): a start sets its floor, the gap being
 * read again, its log, and is logged and counted; a HOLD leaves it (or puts it) STARTING.
 * @returns whether it starts.
 */
static bool decided(idem_daemon *d, struct idem_part *p, rd_kafka_topic_partition_t *tp,
                    const struct idem_resume_pos *pos, const char *db_why)
{
	const struct idem_resume_out *o = &pos->out;

	if (o->why == IDEM_RESUME_HOLD) {
		(void)idem_part_await_start(p);
		log_waiting(d, p, pos,
		            o->wait == IDEM_WAIT_DATABASE
		                    ? (pos->record_err[0] != '\0' ? pos->record_err : db_why)
		            : o->wait == IDEM_WAIT_KAFKA ? pos->kafka_err
		                                         : "");
		return false;
	}
	memcpy(p->kafka_cluster, d->cluster, sizeof(p->kafka_cluster));
	p->db_floor = o->floor;
	p->reapply_to = o->reapply_to;
	p->log_epoch = o->epoch;
	p->log_first = o->first;
	if (o->why == IDEM_RESUME_BEHIND && !p->went_back)
		idem_metrics_database_behind(d->metrics);
	idem_metrics_partition_start(d->metrics, idem_resume_case_str(o->why),
	                             o->log != IDEM_LOG_SAME);
	/* The loss alarm is for messages skipped by another client's move only: a gap the
	 * database lost is read again, a mirror's translated offset is where the same messages
	 * are in the new log. */
	idem_metrics_partition_assigned(
	        d->metrics, tp->topic, tp->partition,
	        o->log == IDEM_LOG_SAME && !o->mirror &&
	                        (o->why == IDEM_RESUME_SKIP || o->why == IDEM_RESUME_KAFKA)
	                ? pos->in.committed
	                : -1,
	        o->log == IDEM_LOG_SAME ? pos->in.db : -1);
	idem__daemon_log_assign(tp, pos, d->db_id, d->cluster);
	return true;
}

/*
 * The group hands partitions over (idem_consumer assigns them after this): each one starts where
 * idem_resume decides (ARCHITECTURE.md "Where a partition starts"): the database's position,
 * unless Kafka's committed offset is beyond it and idemd did not commit it (an operator's skip);
 * an offset idemd committed that the database lacks means the database went back, and the gap
 * is read again. One whose start cannot be decided is assigned, then paused (STARTING) until it
 * can be. This holds for eager and incremental (cooperative) assignment alike: librdkafka
 * starts each partition of @list at its .offset.
 */
void idem__daemon_on_assign(void *opaque, rd_kafka_topic_partition_list_t *list)
{
	idem_daemon *d = opaque;
	struct idem_resume_pos *pos = calloc(list->cnt > 0 ? (size_t)list->cnt : 1, sizeof(*pos));
	idem_error db_err = { 0 };
	int64_t t0 = idem_mono_ms();

	if (pos != NULL)
		read_positions(d, list, pos, &db_err);
	for (int i = 0; i < list->cnt; i++) {
		rd_kafka_topic_partition_t *tp = &list->elems[i];
		struct idem_part *p = idem_parts_find(&d->parts, tp->topic, tp->partition);
		idem_status r;

		/* Still held (not expected: a partition is revoked before it is assigned again):
		 * its bookkeeping goes on, and so does its fetching. */
		if (p != NULL) {
			tp->offset = RD_KAFKA_OFFSET_INVALID;
			continue;
		}
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
		/* Out of memory: decided later, like one whose facts could not be read. */
		if (pos == NULL) {
			(void)idem_part_await_start(p);
			tp->offset = RD_KAFKA_OFFSET_BEGINNING; /* as idem_resume_positions() */
			continue;
		}
		if (decided(d, p, tp, &pos[i], db_err.msg))
			p->fetch_next = tp->offset;
	}
	free(pos);
	d->starts_at_ms = idem_mono_ms() + idem_resume_retry_ms(idem_mono_ms() - t0);
}

/*
 * A decided start: if the database holds it, commit it to Kafka too (the offset rule holds:
 * everything below it is applied), so the committed offset catches up even if no message
 * follows, for lag tools; and where the database went back, Kafka's offset follows it down,
 * with metadata naming the database's position.
 */
static void commit_start(struct idem_part *p, int64_t start)
{
	/* Only a position the database holds (a recorded start is one): committed with idemd's
	 * metadata, any other would read, after a crash, as a position the database lost. */
	if (start < 0 || start != p->db_floor)
		return;
	p->db_next = start;
	p->stored_next = start;
}

/* The partitions of @list are assigned: those not started are paused, the others' starts
 * committed. */
void idem__daemon_on_assigned(void *opaque, const rd_kafka_topic_partition_list_t *list)
{
	idem_daemon *d = opaque;

	for (int i = 0; i < list->cnt; i++) {
		struct idem_part *p =
		        idem_parts_find(&d->parts, list->elems[i].topic, list->elems[i].partition);

		if (p == NULL)
			continue;
		if (idem_part_starting(p))
			idem_consumer_pause(d->rk, p->topic, p->partition);
		else if (list->elems[i].offset >= 0)
			commit_start(p, list->elems[i].offset);
	}
	starting_changed(d);
}

/*
 * Every IDEM_RESUME_RETRY_MS (or longer: idem_resume_retry_ms()) while partitions are STARTING (and
 * at once after the database went back): decide their starts again, on everything read anew, and
 * start those it can.
 */
void idem__daemon_check_starts(idem_daemon *d)
{
	rd_kafka_topic_partition_list_t *list;
	struct idem_resume_pos *pos = NULL;
	idem_error db_err = { 0 };
	bool any = false;
	int64_t t0 = idem_mono_ms();

	if (t0 < d->starts_at_ms)
		return;
	d->starts_at_ms = t0 + IDEM_RESUME_RETRY_MS;
	for (size_t i = 0; i < d->parts.n && !any; i++)
		any = idem_part_starting(d->parts.v[i]) && !d->parts.v[i]->busy;
	if (!any)
		return;
	list = rd_kafka_topic_partition_list_new((int)d->parts.n);
	for (size_t i = 0; i < d->parts.n; i++) {
		if (idem_part_starting(d->parts.v[i]) && !d->parts.v[i]->busy)
			rd_kafka_topic_partition_list_add(list, d->parts.v[i]->topic,
			                                  d->parts.v[i]->partition);
	}
	pos = calloc((size_t)list->cnt, sizeof(*pos));
	if (pos == NULL)
		goto out;
	read_positions(d, list, pos, &db_err);
	for (int i = 0; i < list->cnt; i++) {
		rd_kafka_topic_partition_t *tp = &list->elems[i];
		struct idem_part *p = idem_parts_find(&d->parts, tp->topic, tp->partition);

		/* Revoked meanwhile (a rebalance runs within the reads' polls). */
		if (p == NULL || !idem_part_starting(p))
			continue;
		if (!decided(d, p, tp, &pos[i], db_err.msg))
			continue;
		(void)idem_part_start(p, tp->offset);
		idem__daemon_resume_part(d, p, tp->offset);
		commit_start(p, tp->offset);
	}
out:
	free(pos);
	rd_kafka_topic_partition_list_destroy(list);
	d->starts_at_ms = idem_mono_ms() + idem_resume_retry_ms(idem_mono_ms() - t0);
	starting_changed(d);
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
	starting_changed(d);
}

/*
 * The database no longer holds what this process saw it hold for @p: it went back in time (a
 * restore, a failover to a standby that lacked the last commits), or holds another log's
 * position. Found by a batch's transaction (@how "transaction", which rolled back) or by the
 * check after a worker reconnected ("reconnect"); @p has nothing in flight. Everything in hand
 * is dropped, the partition is paused, and its start is decided again as at assignment
 * (idem__daemon_check_starts(), at once): the database's position, re-applying up to what
 * idemd committed to Kafka, or wherever the rule says (ARCHITECTURE.md "When the database goes
 * back").
 */
void idem__daemon_went_back(idem_daemon *d, struct idem_part *p, int64_t db, const char *how)
{
	int64_t was = p->db_floor > p->db_next ? p->db_floor : p->db_next;
	size_t bytes = idem_part_bytes(p);
	bool was_halted = p->poison_at >= 0;
	char at[24];

	if (!idem_part_await_start(p))
		return;
	d->bytes_held -= bytes;
	p->went_back = true;
	idem_consumer_pause(d->rk, p->topic, p->partition);
	idem_metrics_database_behind(d->metrics);
	if (was_halted)
		idem__daemon_ready_changed(d);
	fmt_offset(at, sizeof(at), db);
	idem_log_warn("kafka",
	              "database behind: topic=%s partition=%" PRId32 " next_offset=%s in the "
	              "database, %" PRId64 " committed by this process (found at %s): it went back "
	              "in time (restore, failover); deciding the partition's start again",
	              p->topic, p->partition, at, was, how);
	d->starts_at_ms = 0;
	starting_changed(d);
}

/*
 * A worker opened a new connection, which may reach another database state (a standby promoted
 * after a failover): every partition is checked against the database's progress rows, on a
 * connection of the consumer thread's own, and one the database holds less of than this process
 * saw has its start decided again (idem__daemon_went_back()). A partition with a batch in flight
 * is left to that batch's transaction, which checks the same before it commits.
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

		if (p != NULL && !p->busy && !idem_part_leaving(p) && !idem_part_starting(p) &&
		    p->db_floor >= 0 && db[i] < p->db_floor)
			idem__daemon_went_back(d, p, db[i], "reconnect");
	}
out:
	free(db);
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
