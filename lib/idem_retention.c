/*
 * idem_retention.c - the purge of old claims and its background thread.
 */
#include "idem_retention.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_log.h"
#include "idem_pg.h"
#include "idem_sql.h"

/*
 * A sweep's step reads this many blocks at most (1 MiB of 8 KiB pages, about 12,000 claims): well
 * under a millisecond of a TID range scan, and when more than retention.batch claims of it are
 * due, the next step reads only the rest of it.
 */
#define SWEEP_BLOCKS 128

idem_status idem_retention_purge(PGconn *conn, const char *consumer, int64_t keep_seconds,
                                 int batch, const atomic_bool *cancel, int64_t *ret_deleted,
                                 double *ret_oldest_age, idem_error *err)
{
	char keep[32], lim[16], from[48] = "(0,0)", to[24], cutoff[64] = "";
	const char *vals[5] = { consumer, from, to, cutoff, lim };
	const char *kv[1] = { keep };
	int64_t total = 0, blocks, b = 0;
	double now, oldest = -1;
	PGresult *res;
	idem_status r;

	snprintf(keep, sizeof(keep), "%" PRId64, keep_seconds);
	snprintf(lim, sizeof(lim), "%d", batch);
	if ((r = idem_sql_exec(conn, IDEM_SQL_RETENTION_CUTOFF, kv, "retention cutoff", &res,
	                       err)) != IDEM_OK) {
		PQclear(res);
		return r;
	}
	snprintf(cutoff, sizeof(cutoff), "%s", PQgetvalue(res, 0, 0));
	now = strtod(PQgetvalue(res, 0, 1), NULL);
	blocks = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
	PQclear(res);
	while (b < blocks && (cancel == NULL || !atomic_load(cancel))) {
		int64_t hi = b + SWEEP_BLOCKS < blocks ? b + SWEEP_BLOCKS : blocks, n;

		snprintf(to, sizeof(to), "%" PRId64, hi);
		if ((r = idem_sql_exec(conn, IDEM_SQL_RETENTION_PURGE, vals, "retention purge",
		                       &res, err)) != IDEM_OK) {
			PQclear(res);
			break;
		}
		n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		if (!PQgetisnull(res, 0, 2)) {
			double age = now - strtod(PQgetvalue(res, 0, 2), NULL);

			if (age < 0)
				age = 0;
			if (age > oldest)
				oldest = age;
		}
		total += n;
		/* The limit reached: the rest of the range from the last claim deleted. */
		if (n >= batch)
			snprintf(from, sizeof(from), "%s", PQgetvalue(res, 0, 1));
		else
			snprintf(from, sizeof(from), "(%" PRId64 ",0)", b = hi);
		PQclear(res);
	}
	*ret_deleted = total;
	if (ret_oldest_age != NULL && r == IDEM_OK && b >= blocks)
		*ret_oldest_age = oldest;
	return r;
}

idem_status idem_retention_topic_ms(rd_kafka_t *rk, const char *topic, int64_t *ret_ms,
                                    idem_error *err)
{
	rd_kafka_ConfigResource_t *res =
	        rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_AdminOptions_t *opts =
	        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
	rd_kafka_event_t *ev;
	idem_status r = IDEM_ERR_NOT_FOUND;

	rd_kafka_AdminOptions_set_request_timeout(opts, 5000, NULL, 0);
	rd_kafka_DescribeConfigs(rk, &res, 1, opts, q);
	ev = rd_kafka_queue_poll(q, 6000);
	if (ev != NULL && rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR) {
		const rd_kafka_DescribeConfigs_result_t *dr =
		        rd_kafka_event_DescribeConfigs_result(ev);
		size_t n = 0, nc = 0;
		const rd_kafka_ConfigResource_t **rs =
		        dr ? rd_kafka_DescribeConfigs_result_resources(dr, &n) : NULL;
		const rd_kafka_ConfigEntry_t **ce =
		        n == 1 ? rd_kafka_ConfigResource_configs(rs[0], &nc) : NULL;

		for (size_t i = 0; i < nc; i++) {
			const char *v = rd_kafka_ConfigEntry_value(ce[i]);

			if (strcmp(rd_kafka_ConfigEntry_name(ce[i]), "retention.ms") == 0 &&
			    v != NULL && strtoll(v, NULL, 10) > 0) {
				*ret_ms = strtoll(v, NULL, 10);
				r = IDEM_OK;
			}
		}
	}
	if (r != IDEM_OK)
		idem_error_set(err, r, "the broker does not tell the retention of topic '%s'%s%s",
		               topic, ev ? ": " : "", ev ? rd_kafka_event_error_string(ev) : "");
	if (ev != NULL)
		rd_kafka_event_destroy(ev);
	rd_kafka_AdminOptions_destroy(opts);
	rd_kafka_queue_destroy(q);
	rd_kafka_ConfigResource_destroy(res);
	return r;
}

struct idem_retention {
	const struct idem_cfg *cfg;
	int64_t keep, interval;
	int batch;
	idem_metrics *metrics;
	rd_kafka_t *rk;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	atomic_bool cancel; /* set with stop: a sweep under way ends after its step */
};

/*
 * Claims must outlive every redelivery and replay: a keep shorter than what a topic retains
 * lets a replay of its oldest messages apply them again. Warn where the broker can tell.
 */
static void warn_short_retention(const idem_retention *rt)
{
	for (size_t i = 0; rt->rk != NULL && i < rt->cfg->n_topics; i++) {
		const char *topic = rt->cfg->topics[i];
		int64_t ms = 0;
		idem_error e;

		if (idem_retention_topic_ms(rt->rk, topic, &ms, &e) != IDEM_OK) {
			idem_log_debug("retention", "%s", e.msg);
			continue;
		}
		if (ms / 1000 > rt->keep)
			idem_log_warn("retention",
			              "retention.keep=%" PRId64
			              "s is shorter than the retention of topic=%s (%" PRId64
			              "s): replaying its oldest messages could apply them again",
			              rt->keep, topic, ms / 1000);
	}
}

static void *retention_main(void *arg)
{
	idem_retention *rt = arg;
	PGconn *conn = NULL;

	warn_short_retention(rt);

	pthread_mutex_lock(&rt->lock);
	while (!rt->stop) {
		struct timespec until;
		idem_error err;
		double oldest = -1;
		bool swept;

		pthread_mutex_unlock(&rt->lock);
		if (conn != NULL && PQstatus(conn) != CONNECTION_OK) {
			PQfinish(conn);
			conn = NULL;
		}
		if (conn == NULL &&
		    idem_pg_conn_open(rt->cfg, "idemd-retention", &conn, &err) != IDEM_OK) {
			idem_log_warn("retention", "%s, retrying in %" PRId64 "s", err.msg,
			              rt->interval);
			conn = NULL;
		}
		swept = conn != NULL;
		for (size_t i = 0; conn != NULL && i < rt->cfg->n_routes; i++) {
			const char *consumer = rt->cfg->routes[i].consumer;
			int64_t deleted = 0;
			double age = -1;
			bool seen = false;

			/* Two routes may share a consumer: one sweep for it. */
			for (size_t j = 0; j < i; j++)
				seen |= strcmp(rt->cfg->routes[j].consumer, consumer) == 0;
			if (seen)
				continue;
			if (idem_retention_purge(conn, consumer, rt->keep, rt->batch, &rt->cancel,
			                         &deleted, &age, &err) != IDEM_OK) {
				idem_log_warn("retention",
				              "purge consumer=%s: %s, retrying in %" PRId64 "s",
				              consumer, err.msg, rt->interval);
				swept = false;
			} else if (deleted > 0)
				idem_log_info("retention",
				              "purged consumer=%s claims=%" PRId64
				              " older_than_s=%" PRId64,
				              consumer, deleted, rt->keep);
			if (age > oldest)
				oldest = age;
		}
		/* A sweep cut short may not have seen the oldest: the gauge keeps counting. */
		if (swept && !atomic_load(&rt->cancel))
			idem_metrics_oldest_claim_age(rt->metrics, oldest);
		until = idem_cond_deadline(rt->interval * 1000);
		pthread_mutex_lock(&rt->lock);
		while (!rt->stop && pthread_cond_timedwait(&rt->cond, &rt->lock, &until) == 0)
			;
	}
	pthread_mutex_unlock(&rt->lock);
	if (conn != NULL)
		PQfinish(conn);
	return NULL;
}

idem_status idem_retention_start(const struct idem_cfg *cfg, int64_t keep_seconds,
                                 int64_t interval_seconds, int batch, idem_metrics *metrics,
                                 rd_kafka_t *rk, idem_retention **ret, idem_error *err)
{
	idem_retention *rt = calloc(1, sizeof(*rt));

	if (rt == NULL)
		return idem_error_nomem(err);
	atomic_init(&rt->cancel, false);
	rt->cfg = cfg;
	rt->keep = keep_seconds;
	rt->interval = interval_seconds > 0 ? interval_seconds : 1;
	rt->batch = batch > 0 ? batch : 1000;
	rt->metrics = metrics;
	rt->rk = rk;
	pthread_mutex_init(&rt->lock, NULL);
	idem_cond_init(&rt->cond);
	if (idem_thread_start(&rt->thread, retention_main, rt) != 0) {
		pthread_cond_destroy(&rt->cond);
		pthread_mutex_destroy(&rt->lock);
		free(rt);
		return idem_error_set(err, IDEM_ERR_NOMEM, "cannot start the retention thread");
	}
	*ret = rt;
	return IDEM_OK;
}

void idem_retention_stop(idem_retention *rt)
{
	if (rt == NULL)
		return;
	atomic_store(&rt->cancel, true);
	pthread_mutex_lock(&rt->lock);
	rt->stop = true;
	pthread_cond_signal(&rt->cond);
	pthread_mutex_unlock(&rt->lock);
	pthread_join(rt->thread, NULL);
	pthread_cond_destroy(&rt->cond);
	pthread_mutex_destroy(&rt->lock);
	free(rt);
}
