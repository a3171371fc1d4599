/*
 * idem_daemon.c - the main loop.
 *
 * The consumer thread polls for events, takes each partition's messages from the partition's
 * own queue into its batch (idem_part) and hands due batches to the worker pool (idem_pool),
 * where each worker commits them on its own Postgres connection. Under load batches fill while
 * the workers are busy. Each partition has at most one batch in flight, so its batches commit
 * in offset order; the next one fills meanwhile, and when it is full too the partition's queue
 * is not read until the one in flight is done (backpressure; librdkafka keeps prefetching it).
 * A batch is full at batch.max_messages (IDEM_BATCH_GROW times that while one is in flight) or
 * batch.max_bytes; once the bytes held in all batches reach batch.max_bytes_total, a partition
 * with a batch in flight is held the same way and one without dispatches what it has, so
 * memory stays bounded in bytes ("Memory bound").
 * Everything Kafka-side (idem_consumer) happens on the consumer thread: a worker only commits
 * and reports back, and the consumer thread stores the offset after that commit. See
 * ARCHITECTURE.md, "Data flow".
 * Partitions coming and going (the rebalance callbacks) and where each one is read from, also
 * after the database went back, are in idem_daemon_assign.c; struct idem_daemon and what the two
 * files share are in idem_daemon_int.h.
 */
#include "idem_daemon.h"

#include <assert.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_daemon_int.h"
#include "idem_esc.h"
#include "idem_flush.h"
#include "idem_log.h"
#include "idem_metrics.h"
#include "idem_part.h"
#include "idem_pool.h"
#include "idem_relay.h"
#include "idem_resume.h"
#include "idem_retention.h"

/* At most this many messages of one partition in a round of take_queued(). */
#define IDEM_TAKE_QUANTUM 64
/* A batch in a worker's hands this long is logged as stalled, and again each time as long. */
#define STALL_WARN_MS 30000

static bool stopping(const idem_daemon *d)
{
	return d->stop != NULL && d->stop();
}

static int backoff_ms(idem_daemon *d, int attempt)
{
	return idem_backoff_ms(d->cfg->retry_initial_ms, d->cfg->retry_max_ms, attempt, &d->seed);
}

/* Stop fetching @p (it began to wait: RETRY_WAIT, SCHEMA_WAIT, HALTED). */
static void pause_part(idem_daemon *d, struct idem_part *p)
{
	idem_consumer_pause(d->rk, p->topic, p->partition);
}

/*
 * Fetch @p again from @offset (idem_consumer_resume()), after a pause (its wait is over), or a
 * rewind: messages that arrived while it waited were dropped (take()).
 */
void idem__daemon_resume_part(idem_daemon *d, struct idem_part *p, int64_t offset)
{
	idem_consumer_resume(d->rk, p->topic, p->partition, offset);
	p->fetch_next = offset;
}

/* Mismatching duplicates of a committed batch, for routes[].on_payload_mismatch: log. */
static void log_mismatches(const struct idem_batch *b)
{
	int shown = 0;

	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];
		const struct idem_batch_claim *c =
		        m->state == IDEM_MSG_DUP_IN_BATCH ? &b->msgs[m->winner].claim : &m->claim;
		char key[1024]; /* the key as the line quotes it: a quote in it cannot close it */
		int64_t claim_offset = m->state == IDEM_MSG_DUP_IN_BATCH && !c->found
		                               ? b->msgs[m->winner].offset
		                               : c->offset;

		if (!m->mismatch || m->state == IDEM_MSG_QUARANTINED)
			continue;
		if (++shown > 10) {
			idem_log_warn(
			        "batch",
			        "more duplicates with a different payload in topic=%s partition=%" PRId32
			        ", not shown (see idem.partition_progress.payload_mismatches)",
			        b->topic, b->partition);
			return;
		}
		idem_log_warn(
		        "batch",
		        "duplicate with a different payload: route=%s topic=%s partition=%" PRId32
		        " offset=%" PRId64 " key='%s' kind=%s first applied at offset=%" PRId64
		        ", ignoring it as a duplicate (routes[].on_payload_mismatch)",
		        b->route->name, b->topic, b->partition, m->offset,
		        idem_esc_str(key, sizeof(key), idem_batch_ptr(b, m->bkey), IDEM_ESC_QUOTE),
		        idem_batch_dup_str(m->dup), claim_offset);
	}
}

/*
 * Readiness changed, or may have: partitions were assigned or revoked, one halted or got past its
 * poison message. Said at once, so that /readyz never lags such a change (whether Postgres is
 * connected the pool answers at each request).
 */
void idem__daemon_ready_changed(idem_daemon *d)
{
	idem_metrics_ready(d->metrics, d->parts.n > 0, idem_parts_halted(&d->parts) > 0);
}

static bool pool_connected(const void *pool)
{
	return idem_pool_connected(pool);
}

static void add_stats(idem_daemon *d, const struct idem_flush_stats *st)
{
	d->stats.batches++;
	d->stats.slow_batches += st->slow_path;
	d->stats.consumed += st->consumed;
	d->stats.applied += st->applied;
	d->stats.duplicates += st->duplicates;
	d->stats.quarantined += st->quarantined;
	d->stats.dup_redelivery += st->dup_redelivery;
	d->stats.dup_replay += st->dup_replay;
	d->stats.dup_upstream += st->dup_upstream;
	d->stats.payload_mismatches += st->payload_mismatches;
	d->stats.reapplied += st->reapplied;
}

/* Forget @b's messages, and the bytes they held. */
static void release(idem_daemon *d, struct idem_batch *b)
{
	d->bytes_held -= b->bytes;
	idem_batch_reset(b);
}

/* Is @b full (batch.max_messages, or IDEM_BATCH_GROW times that while @p's batch is in flight,
 * or batch.max_bytes)? */
static bool batch_full(const idem_daemon *d, const struct idem_part *p, const struct idem_batch *b)
{
	size_t max = (size_t)d->cfg->batch_max_messages * (p->busy ? IDEM_BATCH_GROW : 1);

	return b->n_msgs >= max || b->bytes >= d->cfg->batch_max_bytes;
}

/* Have all batches together reached batch.max_bytes_total? */
static bool over_budget(const idem_daemon *d)
{
	return d->bytes_held >= d->cfg->batch_max_bytes_total;
}

/* Hand @p's batch to the workers, with what the database must hold for it. */
static void dispatch(idem_daemon *d, struct idem_part *p)
{
	p->batch.db_floor = p->db_floor;
	p->batch.reapply_to = p->reapply_to;
	p->batch.kafka_cluster = p->kafka_cluster;
	p->batch.log_first = p->log_first;
	p->batch.group_id = d->cfg->group_id;
	p->batch.log_epoch = p->log_epoch;
	idem_part_hand_over(p, idem_mono_ms());
	p->job.handed_us = idem_mono_us();
	idem_pool_submit(d->pool, p);
}

/* The batch in flight of @p committed: count it, hand its offset to Kafka, go on or halt. */
static void committed(idem_daemon *d, struct idem_part *p)
{
	struct idem_batch *b = &p->inflight;
	const struct idem_flush_stats *st = &p->job.st;
	bool was_paused = idem_part_paused(p), was_halted = p->poison_at >= 0;
	int64_t first = p->job.first, last = st->next_offset - 1;

	double stages[IDEM_METRICS_STAGES] = {
		[IDEM_METRICS_STAGE_FETCH] =
		        b->first_lag_ms >= 0 ? (double)b->first_lag_ms / 1e3 : -1,
		[IDEM_METRICS_STAGE_BATCH] = (double)(p->job.handed_us - b->opened_us) / 1e6,
		[IDEM_METRICS_STAGE_QUEUE] = (double)(p->job.begin_us - p->job.handed_us) / 1e6,
		[IDEM_METRICS_STAGE_COMMIT] = (double)(p->job.end_us - p->job.begin_us) / 1e6,
	};

	add_stats(d, st);
	idem_metrics_batch(d->metrics, st->consumed, st->applied, st->quarantined,
	                   stages[IDEM_METRICS_STAGE_COMMIT]);
	idem_metrics_stages(d->metrics, stages);
	idem_metrics_duplicates(d->metrics, IDEM_METRICS_DUP_REDELIVERY, st->dup_redelivery);
	idem_metrics_duplicates(d->metrics, IDEM_METRICS_DUP_REPLAY, st->dup_replay);
	idem_metrics_duplicates(d->metrics, IDEM_METRICS_DUP_UPSTREAM, st->dup_upstream);
	idem_metrics_mismatches(d->metrics, st->payload_mismatches);
	idem_metrics_reapplied(d->metrics, st->reapplied);
	if (st->quarantined > 0)
		idem_log_warn("batch",
		              "quarantined %" PRIu64 " message(s) topic=%s partition=%" PRId32
		              " offsets=%" PRId64 "..%" PRId64 " (see idem.quarantine)",
		              st->quarantined, b->topic, b->partition, first, last);
	if (st->payload_mismatches > 0 && b->route->on_payload_mismatch == IDEM_CFG_MISMATCH_LOG)
		log_mismatches(b);
	idem_log_debug("batch",
	               "committed topic=%s partition=%" PRId32 " offsets=%" PRId64 "..%" PRId64
	               " consumed=%" PRIu64 " applied=%" PRIu64 " duplicates=%" PRIu64
	               " quarantined=%" PRIu64 " slow=%d ms=%" PRId64 " fetch_ms=%.1f batch_ms=%.1f"
	               " queue_ms=%.1f commit_ms=%.1f",
	               b->topic, b->partition, first, last, st->consumed, st->applied,
	               st->duplicates, st->quarantined, st->slow_path, idem_mono_ms() - p->job.t0,
	               stages[0] * 1e3, stages[1] * 1e3, stages[2] * 1e3, stages[3] * 1e3);
	if (p->failures > 0)
		idem_log_info(
		        "batch",
		        "batch committed after %d failed attempt(s) topic=%s partition=%" PRId32,
		        p->failures, b->topic, b->partition);
	idem__daemon_store_offset(d, p, st->next_offset);
	release(d, b);
	/* Halted until a batch commits past the poison message, not merely while it waits for
	 * a retry: readiness must not come and go with each retry of a partition still stuck
	 * (p->poison_at, which both transitions set). A hold or a wait ends here. */
	if (st->halted)
		(void)idem_part_halt(p, idem_mono_ms() + d->cfg->retry_max_ms, st->next_offset);
	else
		(void)idem_part_release(p);
	if ((p->poison_at >= 0) != was_halted)
		idem__daemon_ready_changed(d);
	if (st->halted) {
		/* Offsets below the poison message are stored; it and what follows are dropped
		 * here and fetched again when the partition is retried. */
		release(d, &p->batch);
		p->fetch_next = st->next_offset;
		if (!was_paused)
			pause_part(d, p);
		idem_log_error(
		        "batch",
		        "partition halted at a poison message (routes[].on_poison: halt): route=%s topic=%s partition=%" PRId32
		        " offset=%" PRId64
		        ": %s; nothing at or after it is applied until it goes through, retrying in %dms",
		        b->route->name, b->topic, b->partition, st->next_offset, st->halt_reason,
		        d->cfg->retry_max_ms);
		return;
	}
	/* A batch that filled up meanwhile goes at once, and so does any while the bytes held are
	 * over budget: in flight is the only way they are ever released. */
	if (p->batch.n_msgs > 0 && (batch_full(d, p, &p->batch) || over_budget(d)))
		dispatch(d, p);
	if (idem_part_leaving(p))
		return;
	if (was_paused)
		idem__daemon_resume_part(d, p, p->fetch_next >= 0 ? p->fetch_next : last + 1);
}

/*
 * The batch in flight of @p failed for a transient reason or a broken handler: nothing was
 * committed, so its offsets do not move. Put it back as the partition's batch (dropping what
 * arrived after it, fetched again later), pause the partition and schedule a retry with
 * exponential backoff and jitter: RETRY_WAIT (flush_due() retries it).
 */
static void failed(idem_daemon *d, struct idem_part *p)
{
	const idem_error *e = &p->job.err;
	enum idem_pg_class cls = idem_pg_classify(e->sqlstate);
	struct idem_batch *b = &p->batch;
	bool was_paused = idem_part_paused(p);
	size_t bytes = idem_part_bytes(p);
	int64_t first, last;
	int wait;

	if (p->job.r == IDEM_ERR_BEHIND) {
		idem__daemon_went_back(d, p, p->inflight.db_next, "transaction");
		return;
	}
	idem_part_take_back(p);
	d->bytes_held -= bytes - idem_part_bytes(p);
	first = p->job.first;
	last = p->job.last;
	d->stats.retries++;
	idem_metrics_retry(d->metrics, idem_pg_class_str(cls));
	wait = backoff_ms(d, p->failures + 1);
	if (!was_paused)
		pause_part(d, p);
	(void)idem_part_retry_at(p, idem_mono_ms() + wait);
	if (cls == IDEM_PG_BROKEN)
		idem_log_error(
		        "batch",
		        "handler or schema broken, partition paused: route=%s topic=%s partition=%" PRId32
		        " offsets=%" PRId64 "..%" PRId64 " sqlstate=%s: %s, retrying in %dms",
		        b->route->name, b->topic, b->partition, first, last, e->sqlstate, e->msg,
		        wait);
	else
		idem_log_warn("batch",
		              "batch failed topic=%s partition=%" PRId32 " offsets=%" PRId64
		              "..%" PRId64 " class=%s sqlstate=%s: %s, retrying in %dms",
		              b->topic, b->partition, first, last, idem_pg_class_str(cls),
		              e->sqlstate[0] ? e->sqlstate : "-", e->msg, wait);
}

/* Take back what the workers finished. Only running out of memory is returned as an error. */
static idem_status collect(idem_daemon *d, idem_error *err)
{
	struct idem_part *p, *next;
	idem_status r = IDEM_OK;

	for (p = idem_pool_collect(d->pool); p != NULL; p = next) {
		next = p->job.next;
		p->busy = false;
		if (p->job.r == IDEM_OK) {
			committed(d, p);
		} else if (p->job.r == IDEM_ERR_NOMEM) {
			r = idem_error_set(err, IDEM_ERR_NOMEM, "%s", p->job.err.msg);
			failed(d, p);
		} else {
			failed(d, p);
		}
	}
	return r;
}

/*
 * Commit what is in hand for the LEAVING partitions (revoked, or all of them at shutdown),
 * with up to @tries attempts each, waiting out the backoff between them when @tries > 1. A
 * batch that still fails is left: nothing was committed, its messages will be redelivered.
 */
static void warn_stalled(idem_daemon *d);

idem_status idem__daemon_drain(idem_daemon *d, int tries, idem_error *err)
{
	idem_status r = IDEM_OK;

	for (size_t i = 0; i < d->parts.n; i++)
		d->parts.v[i]->drain_tries = idem_part_leaving(d->parts.v[i]) ? tries : 0;
	for (;;) {
		int64_t now = idem_mono_ms(), wait = 100;
		bool pending = false;

		if (collect(d, err) != IDEM_OK)
			r = IDEM_ERR_NOMEM;
		for (size_t i = 0; i < d->parts.n; i++) {
			struct idem_part *p = d->parts.v[i];
			struct idem_batch *b = &p->batch;

			if (!idem_part_leaving(p))
				continue;
			if (p->busy) {
				pending = true;
				continue;
			}
			/* Out of memory: hand over nothing more, but wait for what the workers
			 * hold, which must not be freed under them. (A halted partition waiting
			 * for its retry has nothing in hand.) */
			if (b->n_msgs == 0 || p->drain_tries <= 0 || r != IDEM_OK)
				continue;
			/* A failed batch's retry pending (idem_part_retry_at()). */
			if (tries > 1 && p->wake_at_ms != 0 && now < p->wake_at_ms) {
				if (p->wake_at_ms - now < wait)
					wait = p->wake_at_ms - now;
				pending = true;
				continue;
			}
			p->drain_tries--;
			dispatch(d, p);
			pending = true;
		}
		if (!pending)
			break;
		/* A batch that does not finish (a Postgres that stopped answering) is said here
		 * too: the revoke and the shutdown wait for it. */
		warn_stalled(d);
		idem_pool_wait(d->pool, (int)wait);
	}
	for (size_t i = 0; i < d->parts.n; i++) {
		struct idem_part *p = d->parts.v[i];

		if (idem_part_leaving(p) && !p->busy && p->batch.n_msgs > 0)
			idem_log_warn("batch",
			              "giving up on batch topic=%s partition=%" PRId32
			              " offsets=%" PRId64 "..%" PRId64 "; it will be redelivered",
			              p->topic, p->partition, p->batch.msgs[0].offset,
			              p->batch.msgs[p->batch.n_msgs - 1].offset);
	}
	return r;
}

/*
 * A schema fetch ended, on one of the registry's fetcher threads: end the consumer thread's
 * poll, whose next turn wakes the partitions waiting for a schema (wake_schema_waits()). The
 * consumer queue exists before any fetch can start (one starts only from the consumer thread's
 * take()), and the schemas are closed before it goes.
 */
static void schema_fetched(void *ctx)
{
	idem_daemon *d = ctx;

	if (d->cq != NULL)
		rd_kafka_queue_yield(d->cq);
}

idem_status idem_daemon_new(const struct idem_cfg *cfg, idem_stop_fn stop, idem_daemon **ret_d,
                            idem_error *err)
{
	idem_daemon *d;
	idem_status r;

	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return idem_error_nomem(err);
	d->cfg = cfg;
	d->stop = stop;
	d->seed = (unsigned int)idem_mono_ms() ^ (unsigned int)(uintptr_t)d;
	d->last_stats_ms = idem_mono_ms();
	d->commit_ms = idem_consumer_commit_interval_ms(cfg);
	idem_parts_init(&d->parts);
	if ((r = idem_schemas_open(cfg, schema_fetched, d, &d->schemas, err)) != IDEM_OK)
		goto out_free;
	d->parts.schemas = d->schemas;
	if ((r = idem_pool_new(cfg, &d->pool, err)) != IDEM_OK)
		goto out_free;
	d->metrics = idem_metrics_new();
	if (d->metrics == NULL) {
		r = idem_error_nomem(err);
		goto out_free;
	}
	idem_metrics_connected_probe(d->metrics, pool_connected, d->pool);
	/* Every case a start is counted by (a held partition is not started). */
	for (int c = 0; c < IDEM_RESUME_CASES; c++) {
		if (c != IDEM_RESUME_HOLD)
			idem_metrics_partition_case(d->metrics,
			                            idem_resume_case_str((enum idem_resume_case)c));
	}
	if (cfg->metrics_listen != NULL &&
	    (r = idem_metrics_listen(d->metrics, cfg->metrics_listen, err)) != IDEM_OK)
		goto out_free;
	d->resume = idem_resume_new(cfg);
	if (d->resume == NULL) {
		r = idem_error_nomem(err);
		goto out_free;
	}
	d->hooks = (struct idem_consumer_hooks){ idem__daemon_on_assign, idem__daemon_on_assigned,
		                                 idem__daemon_on_revoke, idem__daemon_on_committed,
		                                 d };
	d->topic_missing = calloc(cfg->n_topics ? cfg->n_topics : 1, sizeof(*d->topic_missing));
	if (d->topic_missing == NULL) {
		r = idem_error_nomem(err);
		goto out_free;
	}
	if ((r = idem_consumer_open(cfg, &d->hooks, d->topic_missing, &d->rk, err)) != IDEM_OK)
		goto out_free;
	idem__daemon_topics_report(d);
	d->cq = rd_kafka_queue_get_consumer(d->rk);
	if ((r = idem_pool_start(d->pool, d->rk, err)) != IDEM_OK)
		goto out_free;
	idem_log_info("daemon", "%zu worker(s), one Postgres connection each",
	              idem_pool_size(d->pool));
	if ((r = idem_retention_start(cfg, cfg->retention_keep_s, cfg->retention_interval_s,
	                              cfg->retention_batch, d->metrics, d->rk, &d->retention,
	                              err)) != IDEM_OK)
		goto out_free;
	if (cfg->outbox_enabled &&
	    (r = idem_relay_start(cfg, d->metrics, &d->relay, err)) != IDEM_OK)
		goto out_free;
	*ret_d = d;
	return IDEM_OK;

out_free:
	idem_daemon_free(d);
	return r;
}

void idem_daemon_free(idem_daemon *d)
{
	if (d == NULL)
		return;
	idem_relay_stop(d->relay);
	idem_retention_stop(d->retention);
	/* No schema_fetched() after this: it wakes the consumer queue, which goes below. */
	idem_schemas_close(d->schemas);
	d->schemas = NULL;
	d->parts.schemas = NULL;
	/* The workers are done before the consumer whose queue they wake goes. */
	idem_pool_stop(d->pool);
	for (size_t i = 0; i < d->parts.n; i++) {
		idem_consumer_queue_close(d->parts.v[i]->queue);
		d->parts.v[i]->queue = NULL;
	}
	if (d->cq != NULL)
		rd_kafka_queue_destroy(d->cq);
	if (d->rk != NULL)
		rd_kafka_destroy(d->rk);
	idem_metrics_free(d->metrics);
	idem_resume_free(d->resume);
	idem_pool_free(d->pool);
	idem_parts_done(&d->parts);
	idem_schemas_close(d->schemas);
	idem_consumer_headers_free(&d->hdrs);
	free(d->topic_missing);
	free(d);
}

void idem_daemon_stats(const idem_daemon *d, struct idem_daemon_stats *ret_stats)
{
	*ret_stats = d->stats;
	ret_stats->partitions = d->parts.n;
	ret_stats->halted = idem_parts_halted(&d->parts);
}

const struct idem_pg_search_path *idem_daemon_search_path(const idem_daemon *d)
{
	return idem_pool_search_path(d->pool);
}

int64_t idem_daemon_stalled_ms(const idem_daemon *d)
{
	return idem_pool_stalled_ms(&d->parts, idem_mono_ms());
}

/*
 * The message at @offset of @p cannot be decoded now: the schema registry does not answer
 * (ARCHITECTURE.md "Avro"). Nothing is wrong with the message, so it is not quarantined: the
 * partition waits, as for a retry (SCHEMA_WAIT, paused; what it has in hand before the message
 * goes on its way), and reads the message again when the registry's backoff for that schema id
 * is over.
 */
static void wait_schema(idem_daemon *d, struct idem_part *p, int64_t offset)
{
	int wait = p->batch.doc.retry_ms > 0 ? p->batch.doc.retry_ms : d->cfg->retry_initial_ms;
	bool was_paused = idem_part_paused(p);

	if (p->batch.doc.pending)
		idem_log_debug(
		        "registry",
		        "partition waits for a schema being fetched topic=%s partition=%" PRId32
		        " offset=%" PRId64 ": %s",
		        p->topic, p->partition, offset, p->batch.wait_reason);
	else if (!p->schema_warned)
		idem_log_warn("registry",
		              "partition waits for the schema registry topic=%s partition=%" PRId32
		              " offset=%" PRId64 ": %s; retrying in %dms",
		              p->topic, p->partition, offset, p->batch.wait_reason, wait);
	else
		idem_log_debug("registry",
		               "still waiting for the schema registry topic=%s partition=%" PRId32
		               " offset=%" PRId64 ": %s; retrying in %dms",
		               p->topic, p->partition, offset, p->batch.wait_reason, wait);
	p->schema_warned |= !p->batch.doc.pending;
	d->stats.schema_waits++;
	idem_metrics_schema_wait(d->metrics);
	p->fetch_next = offset;
	if (!was_paused)
		pause_part(d, p);
	(void)idem_part_wait_schema(p, idem_mono_ms() + wait);
	/* What came before the message need not wait with it. */
	if (!p->busy && p->batch.n_msgs > 0)
		dispatch(d, p);
}

static idem_status take(idem_daemon *d, rd_kafka_message_t *rkm, idem_error *err)
{
	struct idem_msgview m;
	struct idem_part *p;
	size_t bytes;
	idem_status r;

	p = idem_parts_find(&d->parts, rd_kafka_topic_name(rkm->rkt), rkm->partition);
	if (p == NULL) {
		/* A message of a partition this instance no longer owns: its new owner gets it. */
		return IDEM_OK;
	}
	/* The partition waits (RETRY_WAIT, SCHEMA_WAIT, HALTED): it is paused, and what still
	 * arrives is fetched again from where it resumes. Below fetch_next: fetched before a seek
	 * back. */
	if (idem_part_paused(p) || idem_part_starting(p) ||
	    (p->fetch_next >= 0 && rkm->offset < p->fetch_next))
		return IDEM_OK;
	if (idem_consumer_view(rkm, &d->hdrs, &m) != IDEM_OK)
		return idem_error_nomem(err);
	bytes = p->batch.bytes;
	r = idem_batch_add(&p->batch, &m, d->cfg, idem_mono_ms());
	d->bytes_held += p->batch.bytes - bytes;
	if (d->bytes_held > d->bytes_held_max)
		d->bytes_held_max = d->bytes_held;
	if (r == IDEM_ERR_UNAVAILABLE) {
		wait_schema(d, p, rkm->offset);
		return IDEM_OK;
	}
	if (r != IDEM_OK)
		return idem_error_set(err, r, "cannot add message to batch: %s",
		                      idem_status_str(r));
	if (p->schema_warned) {
		p->schema_warned = false;
		idem_log_info("registry",
		              "schema found, partition goes on topic=%s partition=%" PRId32
		              " offset=%" PRId64,
		              p->topic, p->partition, rkm->offset);
	}
	p->fetch_next = rkm->offset + 1;
	if (p->batch.n_msgs == 1) {
		p->batch.opened_us = idem_mono_us();
		p->batch.first_lag_ms = m.timestamp_ms >= 0 ? idem_wall_ms() - m.timestamp_ms : -1;
	}
	if (!batch_full(d, p, &p->batch) && !over_budget(d))
		return IDEM_OK;
	/* Over budget, a partition with nothing in flight dispatches what it has (one message
	 * at least, however large: never stuck), one with a batch in flight is held instead of
	 * growing. Every held partition has a batch in flight, which releases its bytes and its
	 * hold (committed()), so waiting for the budget cannot deadlock. */
	if (!p->busy) {
		dispatch(d, p);
	} else {
		/* Full (or over budget) while the one before it commits: its queue is not consumed
		 * until then (can_take()). */
		(void)idem_part_hold(p);
	}
	return IDEM_OK;
}

/*
 * Hand over every batch that is due (full ones went at once: take()), and the retries whose
 * time came, beginning with another partition each time: the workers take batches in the order
 * they were handed over, so no partition's batches wait behind the others' for its place in the
 * list. A batch is due when it is batch.max_wait_ms old, or when its partition's queue had
 * nothing more (p->drained: nothing is worth waiting for).
 */
static void flush_due(idem_daemon *d)
{
	int64_t now = idem_mono_ms();
	size_t n = d->parts.n, start = n > 0 ? d->flush_next++ % n : 0;

	for (size_t k = 0; k < n; k++) {
		struct idem_part *p = d->parts.v[(start + k) % n];
		struct idem_batch *b = &p->batch;

		if (p->busy)
			continue;
		if (idem_part_paused(p)) {
			if (now < p->wake_at_ms)
				continue;
			if (p->poison_at >= 0 || b->n_msgs == 0) {
				/* Nothing in hand to retry: fetch again from where it stopped (a
				 * poison message may go through now; the partition stays halted
				 * until a batch commits past it). Never a LEAVING one. */
				if (idem_part_due(p, now)) {
					idem_log_info(
					        "batch",
					        "retrying %s partition topic=%s partition=%" PRId32
					        " from offset=%" PRId64,
					        p->poison_at >= 0 ? "halted" : "paused", p->topic,
					        p->partition, p->fetch_next);
					idem__daemon_resume_part(d, p, p->fetch_next);
				}
				continue;
			}
			/* A failed batch in hand: retried, the partition still RETRY_WAIT (paused)
			 * until it is done. */
		} else if (b->n_msgs == 0 ||
		           (!p->drained && now - b->opened_ms < d->cfg->batch_max_wait_ms &&
		            !over_budget(d))) {
			/* Over budget, nothing is taken until bytes are released: what is in hand
			 * goes at once. */
			continue;
		}
		dispatch(d, p);
	}
}

size_t idem_daemon_retry_now(idem_daemon *d)
{
	int64_t now = idem_mono_ms();
	size_t n = 0;

	/* A partition waiting for a schema asks the registry again, not only its cache. */
	idem_schemas_retry_now(d->schemas);
	for (size_t i = 0; i < d->parts.n; i++) {
		struct idem_part *p = d->parts.v[i];

		/* flush_due() takes it on the next turn, as if its time had come. */
		if (idem_part_wake_now(p, now))
			n++;
	}
	if (n > 0)
		idem_log_info(
		        "batch",
		        "retrying %zu halted or paused partition(s) now instead of at their scheduled time",
		        n);
	return n;
}

/*
 * May @p's queue be consumed? Not while it waits (RETRY_WAIT, SCHEMA_WAIT, HALTED: it is paused)
 * or leaves, nor while its next batch is full with one in flight (backpressure: HELD, which
 * this asks again), nor by any partition while the bytes held are over budget (what is held is
 * in flight, or dispatched at once: flush_due(), committed(); bytes released end it). What
 * is not consumed stays in librdkafka, which prefetches the partition only up to
 * queued.min.messages / queued.max.messages.kbytes of its queue: no pause, no seek, no fetch done
 * again, and no wait for a fetch slot behind a long poll of the broker's other partitions (up to
 * fetch.wait.max.ms) that a paused partition would meet when resumed.
 */
static bool can_take(const idem_daemon *d, const struct idem_part *p)
{
	return idem_part_fetching(p) && !over_budget(d) &&
	       !(p->busy && batch_full(d, p, &p->batch));
}

static int poll_timeout(const idem_daemon *d)
{
	int64_t now = idem_mono_ms(), t = 100;

	for (size_t i = 0; i < d->parts.n; i++) {
		const struct idem_part *p = d->parts.v[i];
		const struct idem_batch *b = &p->batch;
		int64_t left;

		if (p->queue != NULL && !p->drained && can_take(d, p))
			return 0; /* its queue has more to take at once */
		if (p->busy)
			continue; /* its worker wakes the poll when it is done */
		if (idem_part_paused(p))
			left = p->wake_at_ms - now;
		else if (b->n_msgs > 0)
			left = b->opened_ms + d->cfg->batch_max_wait_ms - now;
		else
			continue;
		if (left < t)
			t = left < 0 ? 0 : left;
	}
	return (int)t;
}

static void log_stats(idem_daemon *d)
{
	int64_t now = idem_mono_ms();

	if (now - d->last_stats_ms < 30000)
		return;
	d->last_stats_ms = now;
	idem_log_info("stats",
	              "consumed=%" PRIu64 " applied=%" PRIu64 " duplicates=%" PRIu64
	              " (redelivery=%" PRIu64 " replay=%" PRIu64 " upstream=%" PRIu64
	              ") payload_mismatches=%" PRIu64 " quarantined=%" PRIu64 " reapplied=%" PRIu64
	              " batches=%" PRIu64 " slow_batches=%" PRIu64 " retries=%" PRIu64
	              " partitions=%zu halted=%zu",
	              d->stats.consumed, d->stats.applied, d->stats.duplicates,
	              d->stats.dup_redelivery, d->stats.dup_replay, d->stats.dup_upstream,
	              d->stats.payload_mismatches, d->stats.quarantined, d->stats.reapplied,
	              d->stats.batches, d->stats.slow_batches, d->stats.retries, d->parts.n,
	              idem_parts_halted(&d->parts));
}

/*
 * Say which batches have been in a worker's hands for STALL_WARN_MS, and again each STALL_WARN_MS
 * after. Each statement is bounded by postgres.statement_timeout_ms, but a server or connection
 * that stops answering is not, and its partitions make no progress meanwhile: this is the only
 * sign of it in the log (under systemd the watchdog restarts idemd, daemon/idemd.c).
 */
static void warn_stalled(idem_daemon *d)
{
	int64_t now = idem_mono_ms();

	for (size_t i = 0; i < d->parts.n; i++) {
		struct idem_part *p = d->parts.v[i];
		int64_t held = now - p->job.t0;

		if (!p->busy || held < (int64_t)(p->job.stall_warnings + 1) * STALL_WARN_MS)
			continue;
		p->job.stall_warnings++;
		idem_log_warn("batch",
		              "batch in flight for %" PRId64 "s topic=%s partition=%" PRId32
		              " offsets=%" PRId64 "..%" PRId64
		              ": its worker still waits for postgres, the partition waits for it",
		              held / 1000, p->topic, p->partition, p->job.first, p->job.last);
	}
}

/* About once a second: per-partition lag and progress, the pool's gauges. */
static void publish(idem_daemon *d)
{
	rd_kafka_topic_partition_list_t *list;
	int64_t now = idem_mono_ms();
	size_t held = 0, busy = 0, bytes = 0;

	if (now - d->last_publish_ms < 1000)
		return;
	d->last_publish_ms = now;
	list = rd_kafka_topic_partition_list_new((int)d->parts.n + 1);
	for (size_t i = 0; i < d->parts.n; i++)
		rd_kafka_topic_partition_list_add(list, d->parts.v[i]->topic,
		                                  d->parts.v[i]->partition);
	rd_kafka_position(d->rk, list);
	for (size_t i = 0; i < d->parts.n; i++) {
		const struct idem_part *p = d->parts.v[i];
		int64_t low = -1, high = -1, done = p->db_next, lag = -1;

		/* Cached from fetch responses: no request to the broker. */
		rd_kafka_get_watermark_offsets(d->rk, p->topic, p->partition, &low, &high);
		if (done < 0 && list->elems[i].offset >= 0)
			done = list->elems[i].offset;
		if (high >= 0 && done >= 0)
			lag = high > done ? high - done : 0;
		idem_metrics_partition(d->metrics, p->topic, p->partition, p->db_next, lag);
		idem_metrics_partition_halted(d->metrics, p->topic, p->partition,
		                              p->poison_at >= 0);
	}
	rd_kafka_topic_partition_list_destroy(list);
	for (size_t i = 0; i < d->parts.n; i++) {
		held += d->parts.v[i]->state == IDEM_PART_HELD;
		busy += d->parts.v[i]->busy;
		bytes += idem_part_bytes(d->parts.v[i]);
	}
	/* The running count is kept at every add and release; this is what it must equal. */
	assert(bytes == d->bytes_held);
	(void)bytes;
	if (d->schemas != NULL) {
		struct idem_registry_stats rs;

		idem_schemas_stats(d->schemas, &rs);
		idem_metrics_registry(d->metrics, rs.fetches, rs.failures, rs.unknown, rs.cached);
	}
	idem_metrics_workers(d->metrics, idem_pool_size(d->pool), busy, held,
	                     idem_pool_late(d->pool));
	idem_metrics_bytes(d->metrics, d->cfg->batch_max_bytes_total, d->bytes_held,
	                   d->bytes_held_max);
}

/* A message, or an error, taken from a queue. */
static idem_status take_one(idem_daemon *d, rd_kafka_message_t *rkm, idem_error *err)
{
	idem_status r = IDEM_OK;

	if (rkm->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		r = take(d, rkm, err);
	else
		idem_log_warn("kafka", "consume error topic=%s partition=%" PRId32 ": %s",
		              rkm->rkt ? rd_kafka_topic_name(rkm->rkt) : "-", rkm->partition,
		              rd_kafka_message_errstr(rkm));
	rd_kafka_message_destroy(rkm);
	return r;
}

/*
 * How many messages @p may take now: what its batch has room for (batch.max_messages, or
 * IDEM_BATCH_GROW times that while one is in flight), at most @quantum.
 */
static size_t take_room(const idem_daemon *d, const struct idem_part *p, size_t quantum)
{
	size_t room = (size_t)d->cfg->batch_max_messages * (p->busy ? IDEM_BATCH_GROW : 1);

	room = p->batch.n_msgs < room ? room - p->batch.n_msgs : 0;
	return room < quantum ? room : quantum;
}

/*
 * Take what the partitions' queues hold, without waiting, at most @budget messages in all:
 * round robin with an equal quantum per partition (ARCHITECTURE.md "Fair take"). Each round
 * offers every partition that can take (can_take()) up to @budget / (partitions) messages, at
 * least one and at most IDEM_TAKE_QUANTUM, and rounds go on while any partition had more and
 * the budget lasts. The next call begins with the partition after the last one served, so
 * under a backlog no partition is served first because of its place in the list and every one
 * progresses at its share.
 *
 * Messages are taken one at a time and can_take() is asked before each one: a message taken
 * out of librdkafka cannot be put back, so this is what keeps a batch within batch.max_messages
 * and batch.max_bytes, and the bytes held within batch.max_bytes_total plus the one message
 * that crossed it ("Memory bound"). p->drained says whether a partition's queue had nothing
 * more.
 */
static idem_status take_queued(idem_daemon *d, int budget, idem_error *err)
{
	size_t n = d->parts.n, quantum;
	bool more = true;
	idem_status r = IDEM_OK;

	if (n == 0)
		return IDEM_OK;
	quantum = (size_t)budget / n;
	if (quantum < 1)
		quantum = 1;
	if (quantum > IDEM_TAKE_QUANTUM)
		quantum = IDEM_TAKE_QUANTUM;
	while (more && budget > 0 && !stopping(d)) {
		size_t start = d->take_next % n;

		more = false;
		for (size_t k = 0; k < n && budget > 0; k++) {
			size_t i = (start + k) % n;
			struct idem_part *p = d->parts.v[i];
			size_t want, got = 0;

			if (p->queue == NULL || !can_take(d, p))
				continue;
			want = take_room(d, p, quantum);
			while (got < want && can_take(d, p)) {
				rd_kafka_message_t *rkm = rd_kafka_consume_queue(p->queue, 0);

				if (rkm == NULL)
					break;
				got++;
				if ((r = take_one(d, rkm, err)) != IDEM_OK)
					return r;
			}
			p->drained = got < want && can_take(d, p);
			budget -= (int)got;
			d->take_next = i + 1;
			more |= !p->drained && can_take(d, p);
		}
	}
	return r;
}

/*
 * Schema fetches ended since the last turn (idem_schemas_answers()): the partitions waiting for
 * a schema read their message again now rather than at their scheduled time (flush_due()).
 * Those whose schema is still not to be had wait again, for the registry's backoff.
 */
static void wake_schema_waits(idem_daemon *d)
{
	uint64_t answers = idem_schemas_answers(d->schemas);
	int64_t now;

	if (answers == d->schema_answers)
		return;
	d->schema_answers = answers;
	now = idem_mono_ms();
	for (size_t i = 0; i < d->parts.n; i++)
		if (d->parts.v[i]->state == IDEM_PART_SCHEMA_WAIT)
			(void)idem_part_wake_now(d->parts.v[i], now);
}

idem_status idem_daemon_tick(idem_daemon *d, idem_error *err)
{
	rd_kafka_message_t *rkm;
	idem_status r;

	publish(d);
	if (idem_mono_ms() - d->last_commit_ms >= d->commit_ms)
		idem__daemon_commit_offsets(d, false, false, "interval");
	if (idem_pool_reconnects(d->pool) != d->reconnects && idem_mono_ms() >= d->check_at_ms)
		idem__daemon_check_positions(d);
	idem__daemon_check_starts(d);
	idem__daemon_check_topics(d);
	if ((r = collect(d, err)) != IDEM_OK)
		return r;
	/* Events (rebalances, commits, errors) and the wake-ups: a partition's queue gaining a
	 * message, a worker done. The partitions' messages wait in their own queues. */
	rkm = rd_kafka_consumer_poll(d->rk, poll_timeout(d));
	while (rkm != NULL) {
		if ((r = take_one(d, rkm, err)) != IDEM_OK)
			return r;
		rkm = rd_kafka_consumer_poll(d->rk, 0);
	}
	if ((r = collect(d, err)) != IDEM_OK)
		return r;
	if ((r = take_queued(d, d->cfg->batch_max_messages * 4, err)) != IDEM_OK)
		return r;
	if ((r = collect(d, err)) != IDEM_OK)
		return r;
	wake_schema_waits(d);
	flush_due(d);
	log_stats(d);
	warn_stalled(d);
	return IDEM_OK;
}

idem_status idem_daemon_shutdown(idem_daemon *d, idem_error *err)
{
	idem_status r;

	for (size_t i = 0; i < d->parts.n; i++)
		(void)idem_part_leave(d->parts.v[i]);
	r = idem__daemon_drain(d, 5, err);
	idem__daemon_commit_offsets(d, true, false, "shutdown");
	/* No more wake-ups: one during rd_kafka_consumer_close() would end its wait for the
	 * group's termination early (a yield of the consumer queue), and leave it half done. */
	for (size_t i = 0; i < d->parts.n; i++) {
		idem_consumer_queue_close(d->parts.v[i]->queue);
		d->parts.v[i]->queue = NULL;
	}
	/* Leaves the group; the revoke callback finds nothing left to do. */
	rd_kafka_consumer_close(d->rk);
	idem_pool_stop(d->pool);
	log_stats(d);
	return r;
}
