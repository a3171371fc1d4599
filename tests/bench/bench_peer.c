/*
 * bench_peer - phase P_set of the benchmark: the honest peer, a hand-written exactly-once
 * consumer with set-based SQL, tuned as well as we know how.
 *
 *   bench_peer --conninfo C --brokers B --topic T --group G [--consumer NAME] [--batch N]
 *              [--connections K] [--postmaster PID] [--no-pipeline] [--prepared-handler]
 *              [--idemd-claim] [--kafka-prop NAME=VALUE]... [--timeout S]
 *
 * What a good engineer would write by hand to consume a topic exactly once into Postgres,
 * without idemd: a librdkafka consumer in group G (eager assignment), K connections to Postgres,
 * each on its own thread with every K-th partition of the assignment. A thread reads its
 * partitions from their own fetch queues (rd_kafka_queue_get_partition(), not forwarded to the
 * consumer queue), in turn, and per transaction takes up to N messages of one partition (what
 * its queue holds, without waiting for more), collapses duplicates within the batch (the lowest
 * offset wins) and applies the batch in ONE statement (peer_sql_batch: one round trip, one
 * implicit transaction): a data-modifying CTE that unnests the batch's arrays, claims the keys
 * in key order in its own narrow table peer_claims (consumer, business_key, processed_at; the
 * primary key and an index on processed_at, which retention needs) with INSERT ... ON CONFLICT
 * DO NOTHING RETURNING, and does sql/examples/payments_set.sql's work (ledger rows, per-account
 * sums) for the returned keys only; sent with its text (--prepared-handler: prepared once).
 * Then it commits the partition's offset to Kafka (asynchronously: the claims make a
 * redelivery harmless), after the database commit. No progress table, no quarantine, no
 * payload hash, no retries beyond running again a batch that deadlocked with another
 * connection (a cross-partition duplicate touching another partition's account).
 *
 * --idemd-claim: the earlier peer, in libpq pipeline mode: BEGIN and the claim with idemd's own
 * statement and table (IDEM_SQL_CLAIM of lib/idem_sql.h), then the set handler of
 * sql/examples/payments_set.sql over the newly claimed messages and COMMIT (two round trips;
 * --no-pipeline: four).
 *
 * It stops once every partition is consumed up to the high watermark it had at the start (the
 * benchmark's topic is produced before: a backlog). Messages are decoded as the benchmark's
 * route does (json:/payment_id, json:/account, json:/amount; with --idemd-claim, SHA-256 of the
 * value too), with idemd's reader for plain documents (idem_json_members_read(): one pass for
 * all three fields; json-c for anything else), as a tuned consumer would.
 *
 * Kafka properties: bootstrap.servers, group.id, enable.auto.commit=false,
 * enable.auto.offset.store=false, auto.offset.reset=earliest, session.timeout.ms=6000 and
 * heartbeat.interval.ms=500 (only how fast the group forms), librdkafka's defaults for the
 * rest (no property measured faster: tests/bench/README.md, "The peer"), then --kafka-prop (a
 * later one replaces an earlier one).
 *
 * Defaults (the tuning that won on the 2-core bench machine): N = 5000, K = 4, one statement
 * per batch sent with its text.
 *
 * Prints one line: peer messages=M batches=T applied=U duplicates=D seconds=S rate=R
 * cpu_self=X pg_cpu=Y connections=K retries=Z hwm_kib=H. seconds: from the first BEGIN to the
 * last COMMIT; cpu_self: this process, all threads (librdkafka's included), from before it
 * joins the group to the end; pg_cpu: the whole Postgres cluster from the assignment to the end
 * (-1 without --postmaster); hwm_kib: this process's peak RSS.
 */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "idem_json.h"

/* The tuned defaults (tests/bench/README.md, "The peer"). */
#define PEER_BATCH       5000
#define PEER_MAX_PROPS   32
#define PEER_MAX_THREADS 64

/*
 * The peer's own claim table: what a hand-written consumer keeps, the key and when it was
 * applied (retention purges by age, hence the index), nothing else; its key compares as bytes,
 * as idemd's does (sql/0010_claim_keys_bytes.sql), whatever the database's collation.
 */
static const char peer_sql_table[] =
        "CREATE TABLE IF NOT EXISTS peer_claims (consumer text COLLATE \"C\" NOT NULL, "
        "business_key text COLLATE \"C\" NOT NULL, processed_at timestamptz NOT NULL DEFAULT "
        "now(), PRIMARY KEY (consumer, business_key)); CREATE INDEX IF NOT EXISTS "
        "peer_claims_processed_at ON peer_claims (processed_at)";

/*
 * A batch in one statement, so one round trip and one implicit transaction: the batch's
 * unique keys (in offset order) claimed in key order, and sql/examples/payments_set.sql's
 * work over the newly claimed ones. Returns how many were applied.
 */
static const char peer_sql_batch[] =
        "WITH u AS (SELECT id, account, amount::bigint AS amount, n FROM unnest($2::text[], "
        "$3::text[], $4::text[]) WITH ORDINALITY AS u(id, account, amount, n)), "
        "c AS (INSERT INTO peer_claims (consumer, business_key) SELECT $1, id FROM u ORDER BY "
        "id ON CONFLICT DO NOTHING RETURNING business_key), "
        "p AS (SELECT u.* FROM u JOIN c ON c.business_key = u.id), "
        "l AS (INSERT INTO ledger (payment_id, account, amount) SELECT id, account, amount "
        "FROM p ORDER BY n), "
        "a AS (INSERT INTO accounts (id, balance) SELECT account, sum(amount) FROM p GROUP BY "
        "account ORDER BY account ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + "
        "excluded.balance) "
        "SELECT count(*) FROM p";

struct peer_opts {
	const char *conninfo;
	const char *brokers;
	const char *topic;
	const char *group;
	const char *consumer;
	int batch;
	int connections;
	pid_t postmaster;
	bool pipeline;
	bool prepared_handler;
	bool idemd_claim; /* claim with idemd's statement and table, then the handler */
	double timeout;
	char *props[PEER_MAX_PROPS];
	int n_props;
};

struct peer_part {
	rd_kafka_queue_t *q; /* its fetch queue, set on assignment */
	int64_t high;        /* the high watermark at the start: consumed up to here */
	int64_t next;        /* the next offset to take (owned by its thread) */
	atomic_bool done;    /* consumed up to high (set by its thread, read by main) */
};

struct peer_thread {
	pthread_t thread;
	int id, n_threads;
	const struct peer_opts *o;
	rd_kafka_t *rk;
	struct peer_part *parts;
	int nparts;
	PGconn *conn;
	EVP_MD_CTX *md_ctx;
	struct idem_json_members members; /* of the message being decoded */
	double first_begin, last_commit;
	uint64_t messages, applied, dups, batches, retries;
};

static EVP_MD *sha256;
static struct peer_part *g_parts;
static int g_nparts;
static const char *g_topic;
static pid_t g_postmaster;
static double g_pg0 = -1;
static atomic_int g_assigned;
static atomic_int g_running;

static void nap_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

/* Eager rebalancing: the partitions' own queues are taken over before fetching starts. */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
	(void)opaque;
	if (err != RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		if (atomic_load(&g_running))
			bench_die("partitions revoked while consuming (another member?)");
		rd_kafka_assign(rk, NULL);
		return;
	}
	for (int i = 0; i < list->cnt; i++) {
		int32_t p = list->elems[i].partition;

		if (strcmp(list->elems[i].topic, g_topic) != 0 || p < 0 || p >= g_nparts)
			bench_die("unexpected assignment %s/%" PRId32, list->elems[i].topic, p);
		if (g_parts[p].q == NULL) {
			g_parts[p].q = rd_kafka_queue_get_partition(rk, g_topic, p);
			if (g_parts[p].q == NULL)
				bench_die("no queue for partition %" PRId32, p);
			/* The application's queue: librdkafka does not forward it to the consumer
			 * queue when fetching starts. */
			rd_kafka_queue_forward(g_parts[p].q, NULL);
		}
	}
	if (rd_kafka_assign(rk, list) != RD_KAFKA_RESP_ERR_NO_ERROR)
		bench_die("assign failed");
	fprintf(stderr, "bench_peer: assigned %d partitions\n", list->cnt);
	if (list->cnt != g_nparts)
		bench_die("assigned %d of %d partitions (another member?)", list->cnt, g_nparts);
	if (g_postmaster > 0)
		g_pg0 = bench_pg_cpu(g_postmaster);
	atomic_store(&g_running, 1);
	atomic_store(&g_assigned, 1);
}

/*
 * json:/NAME of a plain document read once for all its fields (@ms), as idemd reads it, else
 * false (the caller asks json-c).
 */
static bool scalar(const struct idem_json_members *ms, const rd_kafka_message_t *rkm,
                   const char *ptr, char *out, size_t outlen)
{
	const char *p;
	size_t n;
	int r = idem_json_members_scalar(ms, ptr, &p, &n);

	if (r < 0)
		r = idem_json_scalar(rkm->payload, rkm->len, ptr, &p, &n);
	if (r != 1 || n >= outlen)
		return false;
	memcpy(out, p, n);
	out[n] = '\0';
	return true;
}

static bool integer_text(const char *s)
{
	if (*s == '-')
		s++;
	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return false;
	}
	return true;
}

static void decode(struct peer_thread *t, const rd_kafka_message_t *rkm, struct bench_msg *m)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char why[128];

	m->partition = rkm->partition;
	m->offset = rkm->offset;
	if (rkm->payload == NULL)
		bench_die("partition %" PRId32 " offset %" PRId64 ": no value", rkm->partition,
		          rkm->offset);
	(void)idem_json_members_read(rkm->payload, rkm->len, &t->members);
	if (!scalar(&t->members, rkm, "/payment_id", m->pay.payment_id,
	            sizeof(m->pay.payment_id)) ||
	    !scalar(&t->members, rkm, "/account", m->pay.account, sizeof(m->pay.account)) ||
	    !scalar(&t->members, rkm, "/amount", m->pay.amount, sizeof(m->pay.amount)) ||
	    !integer_text(m->pay.amount)) {
		if (!bench_payment_decode(rkm->payload, rkm->len, &m->pay, why, sizeof(why)))
			bench_die("partition %" PRId32 " offset %" PRId64 ": %s", rkm->partition,
			          rkm->offset, why);
		return;
	}
	if (!t->o->idemd_claim)
		return; /* the peer's own claim keeps no payload hash */
	if (EVP_DigestInit_ex(t->md_ctx, sha256, NULL) != 1 ||
	    EVP_DigestUpdate(t->md_ctx, rkm->payload, rkm->len) != 1 ||
	    EVP_DigestFinal_ex(t->md_ctx, md, &mdlen) != 1 || mdlen != 32)
		bench_die("sha256 failed");
	bench_hash_hex(md, m->pay.hash);
}

/* Without pipeline mode: one statement, one round trip. NULL to run the transaction again. */
static PGresult *exec_one(PGconn *conn, PGresult *res, ExecStatusType want, const char *what)
{
	if (PQresultStatus(res) == want)
		return res;
	if (bench_retryable(res)) {
		PQclear(res);
		PQclear(PQexec(conn, "ROLLBACK"));
		return NULL;
	}
	bench_die("%s failed: %s", what, PQresultErrorMessage(res));
}

static int send_handler(PGconn *conn, const struct peer_opts *o, const char *const sv[3])
{
	if (o->prepared_handler)
		return PQsendQueryPrepared(conn, "peer_handler", 3, sv, NULL, NULL, 0);
	return PQsendQueryParams(conn, bench_sql_payments_set, 3, NULL, sv, NULL, NULL, 0);
}

/* One transaction in pipeline mode: two round trips. false: deadlocked, rolled back. */
static bool run_tx_pipeline(struct peer_thread *t, struct bench_batch *b, struct bench_bufs *bf)
{
	PGconn *conn = t->conn;
	struct idem_bind_claim cv;
	const char *sv[3];
	char part[16];
	bool sync_sent = false;
	PGresult *res;

	bench_claim_params(b, t->o->consumer, t->o->topic, bf, part, &cv);
	/* Round trip 1: BEGIN and the claim. */
	if (!bench_claim_round_trip(conn, b, &cv))
		goto retry;
	/* Round trip 2: the set handler over the newly claimed messages, COMMIT. */
	if (b->n_applied > 0) {
		bench_set_params(b, bf, sv);
		if (!send_handler(conn, t->o, sv))
			bench_die("send handler: %s", PQerrorMessage(conn));
	}
	if (!PQsendQueryParams(conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) ||
	    !PQpipelineSync(conn))
		bench_die("send commit: %s", PQerrorMessage(conn));
	sync_sent = true;
	if (b->n_applied > 0) {
		if ((res = bench_next_result(conn, PGRES_COMMAND_OK, "handler")) == NULL)
			goto retry;
		PQclear(res);
	}
	if ((res = bench_next_result(conn, PGRES_COMMAND_OK, "commit")) == NULL)
		goto retry;
	PQclear(res);
	PQclear(bench_next_result(conn, PGRES_PIPELINE_SYNC, "sync"));
	if (!PQexitPipelineMode(conn))
		bench_die("exit pipeline mode: %s", PQerrorMessage(conn));
	return true;

retry:
	bench_pipeline_abort(conn, sync_sent);
	return false;
}

/* The same without pipeline mode: BEGIN, claim, handler, COMMIT, a round trip each. */
static bool run_tx_plain(struct peer_thread *t, struct bench_batch *b, struct bench_bufs *bf)
{
	const struct idem_sql_stmt *claim = idem_sql(IDEM_SQL_CLAIM);
	PGconn *conn = t->conn;
	struct idem_bind_claim cv;
	const char *sv[3];
	char part[16];
	PGresult *res;

	bench_claim_params(b, t->o->consumer, t->o->topic, bf, part, &cv);
	PQclear(exec_one(conn, PQexec(conn, "BEGIN"), PGRES_COMMAND_OK, "begin"));
	res = exec_one(
	        conn,
	        PQexecPrepared(conn, claim->name, claim->n_params, cv.vals, cv.lens, cv.fmts, 0),
	        PGRES_TUPLES_OK, "claim");
	if (res == NULL)
		return false;
	bench_batch_claimed(b, res);
	PQclear(res);
	if (b->n_applied > 0) {
		bench_set_params(b, bf, sv);
		res = t->o->prepared_handler
		              ? PQexecPrepared(conn, "peer_handler", 3, sv, NULL, NULL, 0)
		              : PQexecParams(conn, bench_sql_payments_set, 3, NULL, sv, NULL, NULL,
		                             0);
		if ((res = exec_one(conn, res, PGRES_COMMAND_OK, "handler")) == NULL)
			return false;
		PQclear(res);
	}
	if ((res = exec_one(conn, PQexec(conn, "COMMIT"), PGRES_COMMAND_OK, "commit")) == NULL)
		return false;
	PQclear(res);
	return true;
}

/* One statement, one round trip, one implicit transaction. false: deadlocked. */
static bool run_tx_one(struct peer_thread *t, struct bench_batch *b, struct bench_bufs *bf)
{
	const char *v[4];
	PGresult *res;

	bench_check(idem_pgarray_open(&bf->ids));
	bench_check(idem_pgarray_open(&bf->accounts));
	bench_check(idem_pgarray_open(&bf->amounts));
	for (size_t i = 0; i < b->n; i++) {
		const struct bench_msg *m = &b->msgs[i];

		if (b->state[i] == BENCH_DUP_IN_BATCH)
			continue;
		bench_check(bench_arr_add(&bf->ids, m->pay.payment_id));
		bench_check(bench_arr_add(&bf->accounts, m->pay.account));
		bench_check(bench_arr_add(&bf->amounts, m->pay.amount));
	}
	bench_check(idem_pgarray_close(&bf->ids));
	bench_check(idem_pgarray_close(&bf->accounts));
	bench_check(idem_pgarray_close(&bf->amounts));
	v[0] = t->o->consumer;
	v[1] = bf->ids.data;
	v[2] = bf->accounts.data;
	v[3] = bf->amounts.data;
	res = t->o->prepared_handler
	              ? PQexecPrepared(t->conn, "peer_batch", 4, v, NULL, NULL, 0)
	              : PQexecParams(t->conn, peer_sql_batch, 4, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		if (bench_retryable(res)) {
			PQclear(res);
			return false;
		}
		bench_die("batch statement failed: %s", PQresultErrorMessage(res));
	}
	b->n_applied = (size_t)strtoull(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return true;
}

/* After the database commit: the partition's next offset to Kafka, asynchronously. */
static void commit_offset(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t next)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_resp_err_t e;

	rd_kafka_topic_partition_list_add(list, topic, partition)->offset = next;
	e = rd_kafka_commit(rk, list, 1);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		fprintf(stderr, "bench_peer: offset commit of partition %" PRId32 ": %s\n",
		        partition, rd_kafka_err2str(e));
	rd_kafka_topic_partition_list_destroy(list);
}

static void *peer_thread_main(void *arg)
{
	struct peer_thread *t = arg;
	const struct peer_opts *o = t->o;
	size_t cap = (size_t)o->batch;
	rd_kafka_message_t **rkms = calloc(cap, sizeof(*rkms));
	struct bench_msg *msgs = calloc(cap, sizeof(*msgs));
	struct bench_bufs bf = { 0 };
	struct bench_batch b = { .msgs = msgs };
	int left = 0;

	b.state = calloc(cap, sizeof(*b.state));
	b.order = calloc(cap, sizeof(*b.order));
	b.applied = calloc(cap, sizeof(*b.applied));
	t->md_ctx = EVP_MD_CTX_new();
	if (rkms == NULL || msgs == NULL || b.state == NULL || b.order == NULL ||
	    b.applied == NULL || t->md_ctx == NULL)
		bench_die("out of memory");
	while (!atomic_load(&g_assigned))
		nap_us(1000);
	for (int p = t->id; p < t->nparts; p += t->n_threads)
		left += !atomic_load(&t->parts[p].done);
	while (left > 0) {
		bool got = false;

		/* Its partitions in turn, one transaction each with what its queue holds. */
		for (int p = t->id; p < t->nparts; p += t->n_threads) {
			struct peer_part *pp = &t->parts[p];
			ssize_t n;

			if (atomic_load(&pp->done))
				continue;
			n = rd_kafka_consume_batch_queue(pp->q, 0, rkms, cap);
			if (n < 0)
				bench_die("consume: %s", rd_kafka_err2str(rd_kafka_last_error()));
			b.n = 0;
			for (ssize_t i = 0; i < n; i++) {
				const rd_kafka_message_t *m = rkms[i];

				if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
					if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
						fprintf(stderr, "bench_peer: consume error: %s\n",
						        rd_kafka_message_errstr(m));
				} else if (m->offset >= pp->next && m->offset < pp->high) {
					decode(t, m, &msgs[b.n++]);
				}
				rd_kafka_message_destroy(rkms[i]);
			}
			if (b.n == 0)
				continue;
			got = true;
			bench_batch_collapse(&b);
			for (;;) {
				double now = bench_now();

				if (t->first_begin == 0)
					t->first_begin = now;
				if (!o->idemd_claim ? run_tx_one(t, &b, &bf)
				    : o->pipeline   ? run_tx_pipeline(t, &b, &bf)
				                    : run_tx_plain(t, &b, &bf))
					break;
				t->retries++;
				bench_batch_collapse(&b);
			}
			t->last_commit = bench_now();
			t->messages += b.n;
			t->applied += b.n_applied;
			t->dups += b.n - b.n_applied;
			t->batches++;
			pp->next = b.msgs[b.n - 1].offset + 1;
			commit_offset(t->rk, o->topic, p, pp->next);
			if (pp->next >= pp->high) {
				atomic_store(&pp->done, true);
				left--;
			}
		}
		if (!got)
			nap_us(200);
	}
	bench_bufs_done(&bf);
	EVP_MD_CTX_free(t->md_ctx);
	free(msgs);
	free(b.state);
	free(b.order);
	free(b.applied);
	free(rkms);
	return NULL;
}

/* Number of partitions and their high watermarks. */
static int topic_watermarks(rd_kafka_t *rk, const char *topic, struct peer_part **ret_parts)
{
	const struct rd_kafka_metadata *md = NULL;
	struct peer_part *parts;
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	int nparts;

	if (rkt == NULL ||
	    rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
	    md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
		bench_die("cannot read metadata of topic '%s'", topic);
	nparts = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	parts = calloc((size_t)nparts, sizeof(*parts));
	if (parts == NULL)
		bench_die("out of memory");
	for (int p = 0; p < nparts; p++) {
		int64_t low;
		rd_kafka_resp_err_t e =
		        rd_kafka_query_watermark_offsets(rk, topic, p, &low, &parts[p].high, 10000);

		if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
			bench_die("watermarks of partition %d: %s", p, rd_kafka_err2str(e));
		parts[p].next = low;
		atomic_init(&parts[p].done, low >= parts[p].high);
	}
	*ret_parts = parts;
	return nparts;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: bench_peer --conninfo C --brokers B --topic T --group G [--consumer NAME]\n"
	        "         [--batch N] [--connections K] [--postmaster PID] [--no-pipeline]\n"
	        "         [--prepared-handler] [--idemd-claim] [--kafka-prop NAME=VALUE]...\n"
	        "         [--timeout S]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "conninfo", required_argument, NULL, 'c' },
		{ "brokers", required_argument, NULL, 'b' },
		{ "topic", required_argument, NULL, 't' },
		{ "group", required_argument, NULL, 'g' },
		{ "consumer", required_argument, NULL, 'n' },
		{ "batch", required_argument, NULL, 'B' },
		{ "connections", required_argument, NULL, 'K' },
		{ "postmaster", required_argument, NULL, 'p' },
		{ "no-pipeline", no_argument, NULL, 'P' },
		{ "prepared-handler", no_argument, NULL, 'H' },
		{ "idemd-claim", no_argument, NULL, 'I' },
		{ "kafka-prop", required_argument, NULL, 'X' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct peer_opts o = { .consumer = "payments",
		               .batch = PEER_BATCH,
		               .connections = 4,
		               .pipeline = true,
		               .timeout = 900 };
	rd_kafka_topic_partition_list_t *topics;
	struct peer_thread *th;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	char errstr[512];
	uint64_t messages = 0, applied = 0, dups = 0, batches = 0, retries = 0;
	double t0 = 0, t1 = 0, cpu0, cpu1, pg1 = -1, deadline;
	int64_t total = 0;
	idem_error err;
	int c;

	bench_set_prog("bench_peer");
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
		case 'g':
			o.group = optarg;
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
		case 'P':
			o.pipeline = false;
			break;
		case 'H':
			o.prepared_handler = true;
			break;
		case 'I':
			o.idemd_claim = true;
			break;
		case 'X':
			if (o.n_props == PEER_MAX_PROPS || strchr(optarg, '=') == NULL)
				bench_die("--kafka-prop: NAME=VALUE, at most %d of them",
				          PEER_MAX_PROPS);
			o.props[o.n_props++] = optarg;
			break;
		case 'T':
			o.timeout = atof(optarg);
			break;
		default:
			usage(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
	}
	if (o.conninfo == NULL || o.brokers == NULL || o.topic == NULL || o.group == NULL ||
	    o.batch < 1 || o.connections < 1 || o.connections > PEER_MAX_THREADS ||
	    o.timeout <= 0) {
		usage(stderr);
		return 1;
	}
	sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (sha256 == NULL)
		bench_die("no SHA-256");
	g_topic = o.topic;
	g_postmaster = o.postmaster;

	th = calloc((size_t)o.connections, sizeof(*th));
	if (th == NULL)
		bench_die("out of memory");
	for (int i = 0; i < o.connections; i++) {
		th[i].conn = bench_pg_connect(o.conninfo);
		if (!o.idemd_claim) {
			PGresult *res = i == 0 ? PQexec(th[i].conn, peer_sql_table) : NULL;

			if (res != NULL && PQresultStatus(res) != PGRES_COMMAND_OK)
				bench_die("peer_claims: %s", PQresultErrorMessage(res));
			PQclear(res);
			if (o.prepared_handler)
				bench_pg_prepare(th[i].conn, "peer_batch", peer_sql_batch);
			continue;
		}
		if (idem_sql_prepare(th[i].conn, IDEM_SQL_CLAIM, &err) != IDEM_OK)
			bench_die("%s", err.msg);
		if (o.prepared_handler)
			bench_pg_prepare(th[i].conn, "peer_handler", bench_sql_payments_set);
	}

	cpu0 = bench_self_cpu();
	conf = rd_kafka_conf_new();
	bench_kafka_set(conf, "bootstrap.servers", o.brokers);
	bench_kafka_set(conf, "group.id", o.group);
	bench_kafka_set(conf, "client.id", "bench_peer");
	bench_kafka_set(conf, "enable.auto.commit", "false");
	bench_kafka_set(conf, "enable.auto.offset.store", "false");
	bench_kafka_set(conf, "auto.offset.reset", "earliest");
	bench_kafka_set(conf, "session.timeout.ms", "6000");
	bench_kafka_set(conf, "heartbeat.interval.ms", "500");
	bench_kafka_set(conf, "log_level", "4");
	for (int i = 0; i < o.n_props; i++) {
		char *eq = strchr(o.props[i], '=');

		*eq = '\0';
		bench_kafka_set(conf, o.props[i], eq + 1);
		*eq = '=';
	}
	rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
		bench_die("cannot create kafka consumer: %s", errstr);
	rd_kafka_poll_set_consumer(rk);
	g_nparts = topic_watermarks(rk, o.topic, &g_parts);
	for (int p = 0; p < g_nparts; p++)
		total += g_parts[p].high - g_parts[p].next;
	if (total == 0)
		bench_die("topic '%s' is empty", o.topic);
	for (int i = 0; i < o.connections; i++) {
		th[i].id = i;
		th[i].n_threads = o.connections;
		th[i].o = &o;
		th[i].rk = rk;
		th[i].parts = g_parts;
		th[i].nparts = g_nparts;
		if (pthread_create(&th[i].thread, NULL, peer_thread_main, &th[i]) != 0)
			bench_die("cannot start a thread");
	}
	fprintf(stderr,
	        "bench_peer: %" PRId64 " messages in %d partitions, %d connection(s), up to %d"
	        " messages per transaction, %s, handler %s\n",
	        total, g_nparts, o.connections, o.batch,
	        !o.idemd_claim ? "one statement per batch (claims in peer_claims)"
	        : o.pipeline   ? "idemd's claim, pipeline on"
	                       : "idemd's claim, pipeline off",
	        o.prepared_handler ? "prepared" : "sent with its text");
	topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, o.topic, RD_KAFKA_PARTITION_UA);
	if (rd_kafka_subscribe(rk, topics) != RD_KAFKA_RESP_ERR_NO_ERROR)
		bench_die("cannot subscribe to '%s'", o.topic);
	rd_kafka_topic_partition_list_destroy(topics);

	/* The consumer queue carries only the group's events: serve them until the threads end. */
	deadline = bench_now() + o.timeout;
	for (;;) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 50);
		bool done = true;

		if (rkm != NULL) {
			if (rkm->err != RD_KAFKA_RESP_ERR_NO_ERROR)
				fprintf(stderr, "bench_peer: %s\n", rd_kafka_message_errstr(rkm));
			else
				bench_die("a message on the consumer queue (partition %" PRId32 ")",
				          rkm->partition);
			rd_kafka_message_destroy(rkm);
		}
		for (int p = 0; p < g_nparts; p++)
			done = done && atomic_load(&g_parts[p].done);
		if (done)
			break;
		if (bench_now() > deadline)
			bench_die("timed out after %.0f s", o.timeout);
	}
	for (int i = 0; i < o.connections; i++) {
		pthread_join(th[i].thread, NULL);
		messages += th[i].messages;
		applied += th[i].applied;
		dups += th[i].dups;
		batches += th[i].batches;
		retries += th[i].retries;
		if (th[i].first_begin > 0 && (t0 == 0 || th[i].first_begin < t0))
			t0 = th[i].first_begin;
		if (th[i].last_commit > t1)
			t1 = th[i].last_commit;
	}
	cpu1 = bench_self_cpu();
	if (o.postmaster > 0)
		pg1 = bench_pg_cpu(o.postmaster);

	printf("peer messages=%" PRIu64 " batches=%" PRIu64 " applied=%" PRIu64
	       " duplicates=%" PRIu64 " seconds=%.3f rate=%.1f cpu_self=%.3f pg_cpu=%.3f"
	       " connections=%d retries=%" PRIu64 " hwm_kib=%ld\n",
	       messages, batches, applied, dups, t1 - t0, (double)messages / (t1 - t0), cpu1 - cpu0,
	       g_pg0 >= 0 && pg1 >= 0 ? pg1 - g_pg0 : -1.0, o.connections, retries,
	       bench_proc_hwm_kib(getpid()));
	fflush(stdout);

	/* Untimed: the offsets once more, synchronously, then leave the group. */
	atomic_store(&g_running, 0);
	topics = rd_kafka_topic_partition_list_new(g_nparts);
	for (int p = 0; p < g_nparts; p++)
		rd_kafka_topic_partition_list_add(topics, o.topic, p)->offset = g_parts[p].next;
	if (rd_kafka_commit(rk, topics, 0) != RD_KAFKA_RESP_ERR_NO_ERROR)
		fprintf(stderr, "bench_peer: the last offset commit failed\n");
	rd_kafka_topic_partition_list_destroy(topics);
	for (int p = 0; p < g_nparts; p++) {
		if (g_parts[p].q != NULL)
			rd_kafka_queue_destroy(g_parts[p].q);
	}
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	for (int i = 0; i < o.connections; i++)
		PQfinish(th[i].conn);
	EVP_MD_free(sha256);
	free(th);
	free(g_parts);
	return 0;
}
