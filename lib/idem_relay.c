/*
 * idem_relay.c - the outbox relay thread: read pending rows, produce, wait for the delivery
 * reports, mark, purge. Its structure and shutdown mirror idem_retention.c.
 */
#include "idem_relay.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_log.h"
#include "idem_pg.h"
#include "idem_sql.h"

/*
 * kafka.properties configure idemd's consumer. Only those that say how to reach and talk to the
 * cluster are the producer's business too; consumer settings would only earn warnings from
 * librdkafka, and producer settings that weaken delivery (acks, idempotence) must not leak in.
 */
static const char *const relay_shared_prefixes[] = {
	"security.protocol",
	"ssl.",
	"sasl.",
	"socket.",
	"broker.",
	"reconnect.",
	"api.version",
	"client.dns.lookup",
	"client.rack",
	"connections.max.idle.ms",
	"topic.metadata.",
	"metadata.max.age.ms",
	"debug",
	"log_level",
	"log.connection.close",
};

/* What the relay needs whatever the configuration says; applied last. */
static const struct {
	const char *name;
	const char *value;
} relay_props[] = {
	{ "client.id", "idemd-relay" },
	/* No duplicates from the producer's own retries, and order kept within a partition: a
	 * failed message fails the ones behind it instead of letting them overtake it. */
	{ "enable.idempotence", "true" },
	{ "acks", "all" },
	/* A round waits for its delivery reports: this bounds it when Kafka is away. */
	{ "message.timeout.ms", "30000" },
	{ "linger.ms", "5" },
};

#define RELAY_REPORT_SLACK_MS 5000 /* beyond message.timeout.ms: every report is in by then */

static bool relay_prop_shared(const char *name)
{
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(relay_shared_prefixes); i++) {
		if (strncmp(name, relay_shared_prefixes[i], strlen(relay_shared_prefixes[i])) == 0)
			return true;
	}
	return false;
}

static idem_status relay_set(rd_kafka_conf_t *conf, const char *name, const char *value,
                             idem_error *err)
{
	char errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		return idem_error_set(err, IDEM_ERR_CONFIG, "kafka property '%s': %s", name,
		                      errstr);
	return IDEM_OK;
}

idem_status idem_relay_conf(const struct idem_cfg *cfg, rd_kafka_conf_t **ret_conf, idem_error *err)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	idem_status r;

	if (conf == NULL)
		return idem_error_nomem(err);
	if ((r = relay_set(conf, "bootstrap.servers", cfg->brokers, err)) != IDEM_OK)
		goto out_destroy;
	for (size_t i = 0; i < cfg->n_kafka_props; i++) {
		if (!relay_prop_shared(cfg->kafka_props[i].name))
			continue;
		if ((r = relay_set(conf, cfg->kafka_props[i].name, cfg->kafka_props[i].value,
		                   err)) != IDEM_OK)
			goto out_destroy;
	}
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(relay_props); i++) {
		if ((r = relay_set(conf, relay_props[i].name, relay_props[i].value, err)) !=
		    IDEM_OK)
			goto out_destroy;
	}
	*ret_conf = conf;
	return IDEM_OK;

out_destroy:
	rd_kafka_conf_destroy(conf);
	return r;
}

/* A row's fate in the current round. */
enum relay_state {
	RELAY_QUEUED = 0,
	RELAY_DELIVERED,
	RELAY_FAILED,
};

struct idem_relay {
	const struct idem_cfg *cfg;
	idem_metrics *metrics;
	rd_kafka_t *rk;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;

	/* The relay thread's own (the delivery report callback runs inside its polls). */
	uint32_t round;           /* tags each message, so that a late report of an abandoned
	                             round cannot touch the current one */
	int64_t *ids;             /* the rows of the round, in id order */
	enum relay_state *states; /* their fate */
	size_t n, cap;
	size_t outstanding; /* reports still expected this round */
	char first_error[256];
	unsigned int seed;
	int64_t read_us, wait_us, mark_us; /* the last round's time: lock and read, produce and
	                                      wait for the reports, mark and commit */
};

static bool relay_stopping(idem_relay *rl)
{
	bool stop;

	pthread_mutex_lock(&rl->lock);
	stop = rl->stop;
	pthread_mutex_unlock(&rl->lock);
	return stop;
}

/* Sleeps @ms or until stopped; returns true when stopped. */
static bool relay_sleep(idem_relay *rl, int64_t ms)
{
	struct timespec until = idem_cond_deadline(ms);
	bool stop;

	pthread_mutex_lock(&rl->lock);
	while (!rl->stop && pthread_cond_timedwait(&rl->cond, &rl->lock, &until) == 0)
		;
	stop = rl->stop;
	pthread_mutex_unlock(&rl->lock);
	return stop;
}

static void relay_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
	idem_relay *rl = opaque;
	uint64_t tag = (uint64_t)(uintptr_t)rkm->_private;
	uint32_t round = (uint32_t)(tag >> 32);
	size_t i = (size_t)(tag & 0xffffffffu);

	(void)rk;
	if (round != rl->round || i >= rl->n || rl->states[i] != RELAY_QUEUED)
		return;
	if (rkm->err) {
		rl->states[i] = RELAY_FAILED;
		if (rl->first_error[0] == '\0')
			snprintf(rl->first_error, sizeof(rl->first_error),
			         "outbox id %" PRId64 ": %s", rl->ids[i],
			         rd_kafka_err2str(rkm->err));
	} else {
		rl->states[i] = RELAY_DELIVERED;
	}
	rl->outstanding--;
}

static int64_t relay_be64(const char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | (unsigned char)p[i];
	return (int64_t)v;
}

/* Makes room for @n rows in the round's arrays. */
static idem_status relay_reserve(idem_relay *rl, size_t n, idem_error *err)
{
	int64_t *ids;
	enum relay_state *states;

	if (n <= rl->cap)
		return IDEM_OK;
	ids = realloc(rl->ids, n * sizeof(*ids));
	if (ids == NULL)
		return idem_error_nomem(err);
	rl->ids = ids;
	states = realloc(rl->states, n * sizeof(*states));
	if (states == NULL)
		return idem_error_nomem(err);
	rl->states = states;
	rl->cap = n;
	return IDEM_OK;
}

/*
 * Produce one outbox row: result rows [@first, @end) of @res are its headers. A message that
 * librdkafka refuses at once counts as failed.
 */
static void relay_produce(idem_relay *rl, const PGresult *res, int first, int end)
{
	size_t i = rl->n++;
	uint64_t tag = ((uint64_t)rl->round << 32) | (uint64_t)i;
	rd_kafka_headers_t *hdrs = rd_kafka_headers_new((size_t)(end - first) + 1);
	rd_kafka_resp_err_t e;

	rl->ids[i] = relay_be64(PQgetvalue(res, first, 0));
	rl->states[i] = RELAY_QUEUED;
	for (int row = first; row < end; row++) {
		if (PQgetisnull(res, row, 4))
			continue;
		rd_kafka_header_add(hdrs, PQgetvalue(res, row, 4), PQgetlength(res, row, 4),
		                    PQgetisnull(res, row, 5) ? NULL : PQgetvalue(res, row, 5),
		                    PQgetisnull(res, row, 5) ? 0 : PQgetlength(res, row, 5));
	}
	/* The event's id, not the row's: it survives a restore (sql/0007_restore.sql). */
	rd_kafka_header_add(hdrs, IDEM_RELAY_ID_HEADER, -1, PQgetvalue(res, first, 6),
	                    PQgetlength(res, first, 6));
	for (;;) {
		/* libpq ends every value with a NUL byte, binary ones too: the topic is a string.
		 */
		e = rd_kafka_producev(
		        rl->rk, RD_KAFKA_V_TOPIC(PQgetvalue(res, first, 1)),
		        RD_KAFKA_V_KEY(PQgetisnull(res, first, 2) ? NULL
		                                                  : PQgetvalue(res, first, 2),
		                       (size_t)PQgetlength(res, first, 2)),
		        RD_KAFKA_V_VALUE(PQgetisnull(res, first, 3) ? NULL
		                                                    : PQgetvalue(res, first, 3),
		                         (size_t)PQgetlength(res, first, 3)),
		        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs),
		        RD_KAFKA_V_OPAQUE((void *)(uintptr_t)tag), RD_KAFKA_V_END);
		if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
			break;
		rd_kafka_poll(rl->rk, 100);
	}
	if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
		rl->outstanding++;
		return;
	}
	rd_kafka_headers_destroy(hdrs);
	rl->states[i] = RELAY_FAILED;
	if (rl->first_error[0] == '\0')
		snprintf(rl->first_error, sizeof(rl->first_error), "outbox id %" PRId64 ": %s",
		         rl->ids[i], rd_kafka_err2str(e));
}

/* Waits for every report of the round; false when stopped or out of time first. */
static bool relay_wait_reports(idem_relay *rl)
{
	int64_t deadline = idem_mono_us() / 1000 + 30000 + RELAY_REPORT_SLACK_MS;

	while (rl->outstanding > 0) {
		if (relay_stopping(rl) || idem_mono_us() / 1000 > deadline)
			return false;
		/* flush, not poll: it also sends at once what still waits for linger.ms. */
		rd_kafka_flush(rl->rk, 50);
	}
	return true;
}

/*
 * Abandon what the round still has in librdkafka: nothing of it will be marked, so the rows are
 * sent again later, which the contract allows.
 */
static void relay_abandon(idem_relay *rl)
{
	rd_kafka_purge(rl->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	rd_kafka_poll(rl->rk, 0);
	rl->round++;
	rl->n = 0;
	rl->outstanding = 0;
}

/*
 * One round: lock, read a chunk, produce it, wait, mark what was delivered, commit.
 * @ret_published rows marked, @ret_failed rows the broker refused; @ret_rows rows read (0: the
 * outbox is empty or another relay holds the lock, *ret_locked says which).
 */
static idem_status relay_round(idem_relay *rl, PGconn *conn, size_t *ret_rows,
                               size_t *ret_published, size_t *ret_failed, bool *ret_locked,
                               idem_error *err)
{
	const struct idem_sql_stmt *pending = idem_sql(IDEM_SQL_OUTBOX_PENDING);
	struct idem_buf ids = { 0 };
	char lim[16];
	const char *vals[1] = { lim };
	size_t published = 0, failed = 0;
	PGresult *res;
	idem_status r;
	int64_t t0;
	int nrows;

	*ret_rows = 0;
	*ret_published = 0;
	*ret_failed = 0;
	*ret_locked = false;
	t0 = idem_mono_us();
	if ((r = idem_pg_exec(conn, "BEGIN", "outbox begin", err)) != IDEM_OK)
		return r;
	if ((r = idem_sql_exec(conn, IDEM_SQL_OUTBOX_LOCK, NULL, "outbox lock", &res, err)) !=
	    IDEM_OK) {
		PQclear(res);
		goto out_rollback;
	}
	*ret_locked = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!*ret_locked) {
		r = IDEM_OK;
		goto out_rollback;
	}
	snprintf(lim, sizeof(lim), "%d", rl->cfg->outbox_batch);
	/* Binary results: ids, keys, values and header values come as they are. */
	res = PQexecParams(conn, pending->text, pending->n_params, NULL, vals, NULL, NULL, 1);
	if ((r = idem_pg_result(conn, res, "outbox read", &res, err)) != IDEM_OK) {
		PQclear(res);
		goto out_rollback;
	}
	nrows = PQntuples(res);
	if ((r = relay_reserve(rl, (size_t)nrows, err)) != IDEM_OK) {
		PQclear(res);
		goto out_rollback;
	}
	rl->round++;
	rl->n = 0;
	rl->outstanding = 0;
	rl->first_error[0] = '\0';
	rl->read_us = idem_mono_us() - t0;
	for (int first = 0, end; first < nrows; first = end) {
		const char *id = PQgetvalue(res, first, 0);

		for (end = first + 1; end < nrows && memcmp(PQgetvalue(res, end, 0), id, 8) == 0;
		     end++)
			;
		relay_produce(rl, res, first, end);
	}
	PQclear(res);
	*ret_rows = rl->n;
	if (rl->n == 0) {
		r = idem_pg_exec(conn, "COMMIT", "outbox commit", err);
		goto out_done;
	}
	if (!relay_wait_reports(rl)) {
		relay_abandon(rl);
		r = idem_error_set(err, IDEM_ERR_KAFKA,
		                   "outbox round abandoned before every delivery report came in");
		goto out_rollback;
	}
	rl->wait_us = idem_mono_us() - t0 - rl->read_us;
	t0 = idem_mono_us();
	if ((r = idem_pgarray_open(&ids)) != IDEM_OK)
		goto out_rollback;
	for (size_t i = 0; i < rl->n; i++) {
		char num[24];
		int len;

		if (rl->states[i] != RELAY_DELIVERED) {
			failed++;
			continue;
		}
		len = snprintf(num, sizeof(num), "%" PRId64, rl->ids[i]);
		if ((r = idem_pgarray_add(&ids, num, (size_t)len, false)) != IDEM_OK)
			goto out_rollback;
		published++;
	}
	if ((r = idem_pgarray_close(&ids)) != IDEM_OK)
		goto out_rollback;
	vals[0] = ids.data;
	if (published > 0 && (r = idem_sql_exec(conn, IDEM_SQL_OUTBOX_MARK, vals, "outbox mark",
	                                        NULL, err)) != IDEM_OK)
		goto out_rollback;
	if ((r = idem_pg_exec(conn, "COMMIT", "outbox commit", err)) != IDEM_OK)
		goto out_done;
	rl->mark_us = idem_mono_us() - t0;
	*ret_published = published;
	*ret_failed = failed;
	if (failed > 0)
		r = idem_error_set(err, IDEM_ERR_KAFKA, "%zu of %zu outbox rows not delivered (%s)",
		                   failed, rl->n, rl->first_error);
	goto out_done;

out_rollback:
	idem_pg_rollback(conn);
out_done:
	idem_buf_done(&ids);
	return r;
}

/* Rows pending and the oldest one's age, for the metrics. */
static void relay_stats(idem_relay *rl, PGconn *conn)
{
	PGresult *res;
	idem_error err;

	if (idem_sql_exec(conn, IDEM_SQL_OUTBOX_STATS, NULL, "outbox stats", &res, &err) == IDEM_OK)
		idem_metrics_outbox_pending(rl->metrics, strtoll(PQgetvalue(res, 0, 0), NULL, 10),
		                            strtod(PQgetvalue(res, 0, 1), NULL));
	else
		idem_log_debug("outbox", "%s", err.msg);
	PQclear(res);
}

/* Deletes published rows older than outbox.keep, in short transactions. */
static void relay_purge(idem_relay *rl, PGconn *conn)
{
	char keep[32], lim[16];
	const char *vals[2] = { keep, lim };
	int64_t total = 0;
	idem_error err;

	snprintf(keep, sizeof(keep), "%" PRId64, rl->cfg->outbox_keep_s);
	snprintf(lim, sizeof(lim), "%d", rl->cfg->retention_batch);
	for (;;) {
		PGresult *res;
		int64_t n;

		if (idem_sql_exec(conn, IDEM_SQL_OUTBOX_PURGE, vals, "outbox purge", &res, &err) !=
		    IDEM_OK) {
			PQclear(res);
			idem_log_warn("outbox", "%s, retrying in %" PRId64 "s", err.msg,
			              rl->cfg->outbox_purge_interval_s);
			break;
		}
		n = strtoll(PQcmdTuples(res), NULL, 10);
		PQclear(res);
		total += n;
		if (n < rl->cfg->retention_batch || relay_stopping(rl))
			break;
	}
	if (total > 0)
		idem_log_info("outbox", "purged published rows=%" PRId64 " older_than_s=%" PRId64,
		              total, rl->cfg->outbox_keep_s);
}

/* The producer, whose delivery reports come to relay_dr_cb() with @rl. */
static idem_status relay_producer_new(idem_relay *rl, idem_error *err)
{
	rd_kafka_conf_t *conf;
	char errstr[512];
	idem_status r;

	if ((r = idem_relay_conf(rl->cfg, &conf, err)) != IDEM_OK)
		return r;
	rd_kafka_conf_set_dr_msg_cb(conf, relay_dr_cb);
	rd_kafka_conf_set_opaque(conf, rl);
	rl->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rl->rk == NULL) {
		rd_kafka_conf_destroy(conf);
		return idem_error_set(err, IDEM_ERR_KAFKA, "cannot create the outbox producer: %s",
		                      errstr);
	}
	return IDEM_OK;
}

/* Drops what the producer still holds (rounds that were given up) and destroys it. */
static void relay_producer_free(idem_relay *rl)
{
	rd_kafka_purge(rl->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	rd_kafka_flush(rl->rk, 1000);
	rd_kafka_destroy(rl->rk);
	rl->rk = NULL;
}

/*
 * An idempotent producer can hit a fatal error (the broker lost its producer state, a sequence
 * gap it cannot repair); it then refuses everything. Replace it: the rows it did not deliver are
 * still pending and go out through the new one.
 */
static void relay_check_fatal(idem_relay *rl)
{
	char errstr[512];
	idem_error err;

	if (rd_kafka_fatal_error(rl->rk, errstr, sizeof(errstr)) == RD_KAFKA_RESP_ERR_NO_ERROR)
		return;
	idem_log_warn("outbox", "producer failed for good (%s), replacing it", errstr);
	rl->round++;
	relay_producer_free(rl);
	while (relay_producer_new(rl, &err) != IDEM_OK) {
		idem_log_warn("outbox", "%s, retrying in %dms", err.msg, rl->cfg->retry_max_ms);
		if (relay_sleep(rl, rl->cfg->retry_max_ms))
			break;
	}
}

static void *relay_main(void *arg)
{
	idem_relay *rl = arg;
	PGconn *conn = NULL;
	int attempt = 0;
	int64_t next_purge = 0, next_stats = 0;

	while (!relay_stopping(rl)) {
		size_t rows = 0, published = 0, failed = 0;
		bool locked = false;
		int64_t now_ms;
		idem_error err;
		idem_status r;

		if (conn != NULL && PQstatus(conn) != CONNECTION_OK) {
			PQfinish(conn);
			conn = NULL;
		}
		if (conn == NULL &&
		    idem_pg_conn_open(rl->cfg, "idemd-relay", &conn, &err) != IDEM_OK) {
			int ms = idem_backoff_ms(rl->cfg->retry_initial_ms, rl->cfg->retry_max_ms,
			                         attempt++, &rl->seed);

			idem_log_warn("outbox", "%s, retrying in %dms", err.msg, ms);
			conn = NULL;
			relay_sleep(rl, ms);
			continue;
		}
		r = relay_round(rl, conn, &rows, &published, &failed, &locked, &err);
		if (published > 0 || failed > 0)
			idem_metrics_outbox_published(rl->metrics, published, failed);
		if (r != IDEM_OK) {
			int ms = idem_backoff_ms(rl->cfg->retry_initial_ms, rl->cfg->retry_max_ms,
			                         attempt++, &rl->seed);

			if (failed == 0)
				idem_metrics_outbox_published(rl->metrics, 0, 1);
			relay_check_fatal(rl);
			idem_log_warn("outbox", "%s, retrying in %dms", err.msg, ms);
			relay_sleep(rl, ms);
			continue;
		}
		attempt = 0;
		if (published > 0)
			idem_log_debug("outbox",
			               "published rows=%zu read_ms=%.1f wait_ms=%.1f mark_ms=%.1f",
			               published, (double)rl->read_us / 1000,
			               (double)rl->wait_us / 1000, (double)rl->mark_us / 1000);
		now_ms = idem_mono_us() / 1000;
		if (now_ms >= next_stats || rows == 0) {
			relay_stats(rl, conn);
			next_stats = now_ms + 1000;
		}
		if (now_ms >= next_purge) {
			relay_purge(rl, conn);
			next_purge = now_ms + rl->cfg->outbox_purge_interval_s * 1000;
		}
		/* A full chunk means more is waiting: go on at once. Another relay holding the lock
		 * is checked on less often. */
		if (rows < (size_t)rl->cfg->outbox_batch)
			relay_sleep(rl, locked ? rl->cfg->outbox_poll_interval_ms
			                       : 10 * (int64_t)rl->cfg->outbox_poll_interval_ms);
	}
	if (conn != NULL)
		PQfinish(conn);
	return NULL;
}

idem_status idem_relay_start(const struct idem_cfg *cfg, idem_metrics *metrics, idem_relay **ret,
                             idem_error *err)
{
	idem_relay *rl = calloc(1, sizeof(*rl));
	idem_status r;

	if (rl == NULL)
		return idem_error_nomem(err);
	rl->cfg = cfg;
	rl->metrics = metrics;
	rl->seed = (unsigned int)idem_mono_us() ^ (unsigned int)(uintptr_t)rl;
	if ((r = relay_producer_new(rl, err)) != IDEM_OK)
		goto out_free;
	pthread_mutex_init(&rl->lock, NULL);
	idem_cond_init(&rl->cond);
	if (idem_thread_start(&rl->thread, relay_main, rl) != 0) {
		pthread_cond_destroy(&rl->cond);
		pthread_mutex_destroy(&rl->lock);
		rd_kafka_destroy(rl->rk);
		r = idem_error_set(err, IDEM_ERR_NOMEM, "cannot start the outbox relay thread");
		goto out_free;
	}
	idem_metrics_outbox_pending(metrics, 0, 0);
	*ret = rl;
	return IDEM_OK;

out_free:
	free(rl);
	return r;
}

void idem_relay_stop(idem_relay *rl)
{
	if (rl == NULL)
		return;
	pthread_mutex_lock(&rl->lock);
	rl->stop = true;
	pthread_cond_signal(&rl->cond);
	pthread_mutex_unlock(&rl->lock);
	pthread_join(rl->thread, NULL);
	/* Whatever is still queued belongs to a round that was rolled back: drop it. */
	if (rl->rk != NULL)
		relay_producer_free(rl);
	pthread_cond_destroy(&rl->cond);
	pthread_mutex_destroy(&rl->lock);
	free(rl->ids);
	free(rl->states);
	free(rl);
}
