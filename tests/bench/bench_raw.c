/*
 * bench_raw - phase A of the benchmark: the raw Postgres limit for idemd's work.
 *
 *   bench_raw --conninfo C --brokers B --topic T [--consumer NAME] [--batch N]
 *             [--connections K] [--postmaster PID] [--mode row|set]
 *
 * First reads the whole topic into memory (untimed: no Kafka in the timed loop) and decodes
 * every message as idemd's benchmark route does (business key json:/payment_id, parameters
 * business_key, json:/account, json:/amount, SHA-256 payload hash). Then, timed, it runs
 * idemd's batch transaction over the same messages on K connections (default 1; the benchmark
 * uses as many as idemd has workers), each on its own thread with its share of the partitions:
 * per batch of up to N consecutive messages of one partition (its partitions taken in turn),
 * in-batch duplicates collapsed, in libpq pipeline mode
 *   1. BEGIN; the claim (INSERT ... ON CONFLICT DO NOTHING RETURNING over unnest()ed arrays,
 *      keys sorted);
 *   2. the payments handler once per claimed message, in offset order (--mode set: the set
 *      handler once for all of them, with text[] parameters, as handler.mode: set);
 *   3. the results UPDATE (only if a handler returned results), the progress upsert, COMMIT;
 * the same statements (lib/idem_sql.h), round trips and batch size as lib/idem_flush.c, without
 * idemd's decoding, polling and bookkeeping around them. A batch that runs into a deadlock with
 * another connection (two partitions touching one account) is rolled back and run again, as idemd
 * retries it.
 *
 * Prints one line: raw messages=M batches=K applied=U duplicates=D seconds=S rate=R
 * cpu_self=X pg_cpu=Y (CPU seconds of this process and of the whole Postgres cluster during
 * the timed loop; pg_cpu is -1 without --postmaster).
 */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "idem_bind.h"

struct raw_opts {
	const char *conninfo;
	const char *brokers;
	const char *topic;
	const char *consumer;
	int batch;
	int connections;
	pid_t postmaster;
	bool set; /* --mode set: the set handler once per transaction, as handler.mode: set */
};

struct raw_load {
	struct bench_msg *msgs;
	size_t n, cap;
};

static int msg_cmp(const void *a, const void *b)
{
	const struct bench_msg *x = a, *y = b;

	if (x->partition != y->partition)
		return (x->partition > y->partition) - (x->partition < y->partition);
	return (x->offset > y->offset) - (x->offset < y->offset);
}

static void load_add(struct raw_load *ld, const rd_kafka_message_t *rkm)
{
	char why[128];

	if (ld->n == ld->cap) {
		size_t ncap = ld->cap ? 2 * ld->cap : 65536;
		struct bench_msg *nm = realloc(ld->msgs, ncap * sizeof(*nm));

		if (nm == NULL)
			bench_die("out of memory");
		ld->msgs = nm;
		ld->cap = ncap;
	}
	if (rkm->payload == NULL ||
	    !bench_payment_decode(rkm->payload, rkm->len, &ld->msgs[ld->n].pay, why, sizeof(why)))
		bench_die("partition %" PRId32 " offset %" PRId64 ": %s", rkm->partition,
		          rkm->offset, rkm->payload ? why : "no value");
	ld->msgs[ld->n].partition = rkm->partition;
	ld->msgs[ld->n].offset = rkm->offset;
	ld->n++;
}

/* Read every partition of the topic from its low to its high watermark. */
static void load_topic(const struct raw_opts *o, struct raw_load *ld)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_topic_t *rkt;
	char errstr[512];
	int64_t *end;
	rd_kafka_t *rk;
	int nparts, remaining = 0;
	double deadline;

	if (rd_kafka_conf_set(conf, "bootstrap.servers", o->brokers, errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "queued.min.messages", "1000000", errstr, sizeof(errstr)) ||
	    /* assign() needs a group id, though nothing is committed. */
	    rd_kafka_conf_set(conf, "group.id", "bench-raw-load", errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr)))
		bench_die("kafka configuration: %s", errstr);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
		bench_die("cannot create kafka consumer: %s", errstr);
	rd_kafka_poll_set_consumer(rk);
	rkt = rd_kafka_topic_new(rk, o->topic, NULL);
	if (rkt == NULL ||
	    rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
	    md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
		bench_die("cannot read metadata of topic '%s'", o->topic);
	nparts = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	end = calloc((size_t)nparts, sizeof(*end));
	list = rd_kafka_topic_partition_list_new(nparts);
	if (end == NULL || list == NULL)
		bench_die("out of memory");
	for (int p = 0; p < nparts; p++) {
		int64_t low;
		rd_kafka_resp_err_t e =
		        rd_kafka_query_watermark_offsets(rk, o->topic, p, &low, &end[p], 10000);

		if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
			bench_die("watermarks of partition %d: %s", p, rd_kafka_err2str(e));
		if (low < end[p]) {
			rd_kafka_topic_partition_list_add(list, o->topic, p)->offset = low;
			remaining++;
		}
	}
	if (rd_kafka_assign(rk, list) != RD_KAFKA_RESP_ERR_NO_ERROR)
		bench_die("assign failed");
	deadline = bench_now() + 600;
	while (remaining > 0) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);

		if (bench_now() > deadline)
			bench_die("timed out reading topic '%s'", o->topic);
		if (rkm == NULL)
			continue;
		if (rkm->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
			if (rkm->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
				bench_die("consume failed: %s", rd_kafka_message_errstr(rkm));
		} else if (rkm->offset < end[rkm->partition]) {
			load_add(ld, rkm);
			if (rkm->offset + 1 == end[rkm->partition])
				remaining--;
		}
		rd_kafka_message_destroy(rkm);
	}
	rd_kafka_assign(rk, NULL);
	rd_kafka_topic_partition_list_destroy(list);
	free(end);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	qsort(ld->msgs, ld->n, sizeof(*ld->msgs), msg_cmp);
}

/* What the row handler returned for each message of the batch being processed. */
struct raw_results {
	char (*result)[24];
	bool *has_result;
};

struct raw_bufs {
	struct bench_bufs c; /* the claim; set mode: the handler's text[] */
	struct idem_buf rkeys, rvals;
};

/*
 * One batch, exactly as idemd's fast path. Adds to *applied and *dups. false: it ran into a
 * deadlock and was rolled back, to be run again.
 */
static bool run_batch(PGconn *conn, const struct raw_opts *o, struct bench_batch *b,
                      struct raw_results *rs, struct raw_bufs *bf, uint64_t *applied,
                      uint64_t *dups)
{
	char part[16], pr[IDEM_BIND_PROGRESS_PARAMS][64];
	struct idem_bind_claim cv;
	const char *pv[IDEM_BIND_PROGRESS_PARAMS], *hv[3];
	uint64_t n_app = 0, n_dup = 0;
	bool sync_sent = false, any_result = false;
	PGresult *res;

	bench_batch_collapse(b);
	memset(rs->has_result, 0, b->n * sizeof(*rs->has_result));
	bench_claim_params(b, o->consumer, o->topic, &bf->c, part, &cv);
	/* Round trip 1: BEGIN and the claim. */
	if (!bench_claim_round_trip(conn, b, &cv))
		goto retry;
	n_app = b->n_applied;
	n_dup = b->n - b->n_applied;

	/* Round trip 2: the handler for each claimed message, in offset order; in set mode once
	 * for all of them, with one text[] per parameter, as idemd sends it (sent with its text,
	 * planned for these arrays). */
	if (o->set && b->n_applied > 0) {
		const char *sv[3];

		bench_set_params(b, &bf->c, sv);
		if (!PQsendQueryParams(conn, bench_sql_payments_set, 3, NULL, sv, NULL, NULL, 0) ||
		    !PQsendFlushRequest(conn) || PQflush(conn) != 0)
			bench_die("send set handler: %s", PQerrorMessage(conn));
		if ((res = bench_next_result(conn, PGRES_COMMAND_OK, "set handler")) == NULL)
			goto retry;
		PQclear(res);
	}
	/* Round trip 2: the handler for each claimed message, in offset order. */
	for (size_t k = 0; !o->set && k < b->n_applied; k++) {
		const struct bench_msg *m = &b->msgs[b->applied[k]];

		hv[0] = m->pay.payment_id;
		hv[1] = m->pay.account;
		hv[2] = m->pay.amount;
		if (!PQsendQueryPrepared(conn, "idem_h0", 3, hv, NULL, NULL, 0))
			bench_die("send handler: %s", PQerrorMessage(conn));
	}
	if (!o->set && b->n_applied > 0) {
		if (!PQsendFlushRequest(conn) || PQflush(conn) != 0)
			bench_die("send handlers: %s", PQerrorMessage(conn));
		for (size_t k = 0; k < b->n_applied; k++) {
			size_t i = b->applied[k];

			if ((res = bench_next_result(conn, PGRES_TUPLES_OK, "handler")) == NULL)
				goto retry;
			if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0)) {
				snprintf(rs->result[i], sizeof(rs->result[i]), "%s",
				         PQgetvalue(res, 0, 0));
				rs->has_result[i] = true;
			}
			PQclear(res);
		}
	}

	/* Round trip 3: results, progress, COMMIT. */
	bench_check(idem_pgarray_open(&bf->rkeys));
	bench_check(idem_pgarray_open(&bf->rvals));
	for (size_t k = 0; k < b->n_applied; k++) {
		size_t i = b->applied[k];

		if (!rs->has_result[i])
			continue;
		any_result = true;
		bench_check(bench_arr_add(&bf->rkeys, b->msgs[i].pay.payment_id));
		bench_check(bench_arr_add(&bf->rvals, rs->result[i]));
	}
	bench_check(idem_pgarray_close(&bf->rkeys));
	bench_check(idem_pgarray_close(&bf->rvals));
	/* The progress statement takes arrays (one element per partition; one here): consumer,
	 * topic, partition, next offset, consumed, applied, duplicates, quarantined, the
	 * duplicates by kind (all upstream: the topic is read once), payload mismatches, no halt,
	 * nothing re-applied.
	 */
	snprintf(pr[0], sizeof(pr[0]), "{\"%s\"}", o->consumer);
	snprintf(pr[1], sizeof(pr[1]), "{\"%s\"}", o->topic);
	snprintf(pr[2], sizeof(pr[2]), "{%s}", part);
	snprintf(pr[3], sizeof(pr[3]), "{%" PRId64 "}", b->msgs[b->n - 1].offset + 1);
	snprintf(pr[4], sizeof(pr[4]), "{%zu}", b->n);
	snprintf(pr[5], sizeof(pr[5]), "{%" PRIu64 "}", n_app);
	snprintf(pr[6], sizeof(pr[6]), "{%" PRIu64 "}", n_dup);
	snprintf(pr[7], sizeof(pr[7]), "{0}");
	snprintf(pr[8], sizeof(pr[8]), "{0}");
	snprintf(pr[9], sizeof(pr[9]), "{0}");
	snprintf(pr[10], sizeof(pr[10]), "{%" PRIu64 "}", n_dup);
	snprintf(pr[11], sizeof(pr[11]), "{0}");
	snprintf(pr[12], sizeof(pr[12]), "{NULL}");
	snprintf(pr[13], sizeof(pr[13]), "{NULL}");
	snprintf(pr[14], sizeof(pr[14]), "{NULL}"); /* no gap being read again */
	snprintf(pr[15], sizeof(pr[15]), "{0}");
	snprintf(pr[16], sizeof(pr[16]), "{NULL}"); /* the Kafka cluster: not named */
	snprintf(pr[17], sizeof(pr[17]), "{NULL}"); /* the first start: not known */
	snprintf(pr[18], sizeof(pr[18]), "{NULL}"); /* the group: not named */
	snprintf(pr[19], sizeof(pr[19]), "{0}");    /* the log's epoch */
	for (int k = 0; k < IDEM_BIND_PROGRESS_PARAMS; k++)
		pv[k] = pr[k];
	if (any_result) {
		const char *rv[3] = { o->consumer, bf->rkeys.data, bf->rvals.data };

		if (!idem_sql_send(conn, IDEM_SQL_RESULTS, rv, NULL, NULL))
			bench_die("send results: %s", PQerrorMessage(conn));
	}
	if (!idem_sql_send(conn, IDEM_SQL_PROGRESS, pv, NULL, NULL) ||
	    !PQsendQueryParams(conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) ||
	    !PQpipelineSync(conn))
		bench_die("send commit: %s", PQerrorMessage(conn));
	sync_sent = true;
	if (any_result) {
		if ((res = bench_next_result(conn, PGRES_TUPLES_OK, "results")) == NULL)
			goto retry;
		PQclear(res);
	}
	if ((res = bench_next_result(conn, PGRES_COMMAND_OK, "progress")) == NULL ||
	    (PQclear(res), res = bench_next_result(conn, PGRES_COMMAND_OK, "commit")) == NULL)
		goto retry;
	PQclear(res);
	PQclear(bench_next_result(conn, PGRES_PIPELINE_SYNC, "sync"));
	if (!PQexitPipelineMode(conn))
		bench_die("exit pipeline mode: %s", PQerrorMessage(conn));
	*applied += n_app;
	*dups += n_dup;
	return true;

retry:
	bench_pipeline_abort(conn, sync_sent);
	return false;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_raw --conninfo C --brokers B --topic T [--consumer NAME]\n"
	           "         [--batch N] [--connections K] [--postmaster PID] [--mode row|set]\n");
}

/* One connection's share: partitions k with k % n_threads == id. */
struct raw_thread {
	pthread_t thread;
	int id, n_threads;
	const struct raw_opts *o;
	const struct raw_load *ld;
	const size_t *first, *lim; /* partition k is ld->msgs[first[k] .. lim[k]) */
	size_t nparts;
	PGconn *conn;
	uint64_t applied, dups, batches, retries;
};

static void *raw_thread_main(void *arg)
{
	struct raw_thread *t = arg;
	const struct raw_opts *o = t->o;
	struct raw_bufs bf = { 0 };
	struct raw_results rs = { 0 };
	struct bench_batch b = { 0 };
	size_t *cur = calloc(t->nparts, sizeof(*cur));

	b.state = calloc((size_t)o->batch, sizeof(*b.state));
	b.order = calloc((size_t)o->batch, sizeof(*b.order));
	b.applied = calloc((size_t)o->batch, sizeof(*b.applied));
	rs.result = calloc((size_t)o->batch, sizeof(*rs.result));
	rs.has_result = calloc((size_t)o->batch, sizeof(*rs.has_result));
	if (cur == NULL || b.state == NULL || b.order == NULL || b.applied == NULL ||
	    rs.result == NULL || rs.has_result == NULL)
		bench_die("out of memory");
	memcpy(cur, t->first, t->nparts * sizeof(*cur));
	for (bool more = true; more;) {
		more = false;
		/* Its partitions in turn, one batch each. */
		for (size_t k = (size_t)t->id; k < t->nparts; k += (size_t)t->n_threads) {
			size_t end = cur[k] + (size_t)o->batch < t->lim[k]
			                     ? cur[k] + (size_t)o->batch
			                     : t->lim[k];

			if (cur[k] >= t->lim[k])
				continue;
			b.msgs = &t->ld->msgs[cur[k]];
			b.n = end - cur[k];
			while (!run_batch(t->conn, o, &b, &rs, &bf, &t->applied, &t->dups))
				t->retries++;
			t->batches++;
			cur[k] = end;
			more = true;
		}
	}
	bench_bufs_done(&bf.c);
	idem_buf_done(&bf.rkeys);
	idem_buf_done(&bf.rvals);
	free(b.state);
	free(b.order);
	free(b.applied);
	free(rs.result);
	free(rs.has_result);
	free(cur);
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "conninfo", required_argument, NULL, 'c' },
		{ "brokers", required_argument, NULL, 'b' },
		{ "topic", required_argument, NULL, 't' },
		{ "consumer", required_argument, NULL, 'n' },
		{ "batch", required_argument, NULL, 'B' },
		{ "connections", required_argument, NULL, 'K' },
		{ "postmaster", required_argument, NULL, 'p' },
		{ "mode", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct raw_opts o = { .consumer = "payments", .batch = 500, .connections = 1 };
	struct raw_load ld = { 0 };
	struct raw_thread *th;
	uint64_t applied = 0, dups = 0, batches = 0, retries = 0;
	size_t *first, *lim, nparts = 0;
	double t0, t1, cpu0, cpu1, pg0 = -1, pg1 = -1;
	idem_error err;
	int c;

	bench_set_prog("bench_raw");
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o.conninfo = optarg;
			break;
		case 'b':
			o.brokers = optarg;
			break;
		case 't':
			o.topic = optarg;
			break;
		case 'n':
			o.consumer = optarg;
			break;
		case 'B':
			o.batch = atoi(optarg);
			break;
		case 'K':
			o.connections = atoi(optarg);
			break;
		case 'p':
			o.postmaster = (pid_t)atoi(optarg);
			break;
		case 'm':
			if (strcmp(optarg, "row") != 0 && strcmp(optarg, "set") != 0)
				bench_die("--mode must be row or set, not '%s'", optarg);
			o.set = strcmp(optarg, "set") == 0;
			break;
		default:
			usage(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
	}
	if (o.conninfo == NULL || o.brokers == NULL || o.topic == NULL || o.batch < 1 ||
	    o.connections < 1 || o.connections > 64) {
		usage(stderr);
		return 1;
	}

	load_topic(&o, &ld);
	if (ld.n == 0)
		bench_die("topic '%s' is empty", o.topic);
	for (size_t i = 0; i < ld.n; i++) {
		if (i == 0 || ld.msgs[i].partition != ld.msgs[i - 1].partition)
			nparts++;
	}
	first = calloc(nparts, sizeof(*first));
	lim = calloc(nparts, sizeof(*lim));
	th = calloc((size_t)o.connections, sizeof(*th));
	if (first == NULL || lim == NULL || th == NULL)
		bench_die("out of memory");
	for (size_t i = 0, k = 0; i < ld.n; i++) {
		if (i == 0 || ld.msgs[i].partition != ld.msgs[i - 1].partition) {
			first[k] = i;
			if (k > 0)
				lim[k - 1] = i;
			k++;
		}
	}
	lim[nparts - 1] = ld.n;
	for (int i = 0; i < o.connections; i++) {
		th[i] = (struct raw_thread){ .id = i,
			                     .n_threads = o.connections,
			                     .o = &o,
			                     .ld = &ld,
			                     .first = first,
			                     .lim = lim,
			                     .nparts = nparts };
		th[i].conn = bench_pg_connect(o.conninfo);
		if (idem_sql_prepare_batch(th[i].conn, &err) != IDEM_OK)
			bench_die("%s", err.msg);
		bench_pg_prepare(th[i].conn, "idem_h0", bench_sql_payments_row);
	}
	fprintf(stderr,
	        "bench_raw: loaded %zu messages of %zu partitions, running on %d connection(s)\n",
	        ld.n, nparts, o.connections);

	t0 = bench_now();
	cpu0 = bench_self_cpu();
	if (o.postmaster > 0)
		pg0 = bench_pg_cpu(o.postmaster);
	for (int i = 0; i < o.connections; i++) {
		if (pthread_create(&th[i].thread, NULL, raw_thread_main, &th[i]) != 0)
			bench_die("cannot start a thread");
	}
	for (int i = 0; i < o.connections; i++) {
		pthread_join(th[i].thread, NULL);
		applied += th[i].applied;
		dups += th[i].dups;
		batches += th[i].batches;
		retries += th[i].retries;
	}
	t1 = bench_now();
	cpu1 = bench_self_cpu();
	if (o.postmaster > 0)
		pg1 = bench_pg_cpu(o.postmaster);

	printf("raw messages=%zu batches=%" PRIu64 " applied=%" PRIu64 " duplicates=%" PRIu64
	       " seconds=%.3f rate=%.1f cpu_self=%.3f pg_cpu=%.3f connections=%d retries=%" PRIu64
	       "\n",
	       ld.n, batches, applied, dups, t1 - t0, (double)ld.n / (t1 - t0), cpu1 - cpu0,
	       pg0 >= 0 && pg1 >= 0 ? pg1 - pg0 : -1.0, o.connections, retries);
	for (int i = 0; i < o.connections; i++)
		PQfinish(th[i].conn);
	free(th);
	free(first);
	free(lim);
	free(ld.msgs);
	return 0;
}
