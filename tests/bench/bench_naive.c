/*
 * bench_naive - phase B of the benchmark: the naive exactly-once consumer that idemd replaces.
 *
 *   bench_naive --conninfo C --brokers B --topic T --group G [--consumer NAME]
 *               [--max N] [--seconds S] [--postmaster PID]
 *
 * A librdkafka consumer in group G. For every message, one transaction and one synchronous
 * offset commit:
 *   BEGIN; INSERT the claim (one row, ON CONFLICT DO NOTHING RETURNING); if claimed, the
 *   payments handler and the UPDATE that stores its result; COMMIT;
 *   rd_kafka_commit_message(sync).
 * The same tables, claim columns and handler as idemd, with prepared statements; no progress
 * table (a naive consumer trusts Kafka's offsets). It stops after N messages or S seconds,
 * counted from the first message (the group join is not timed), whichever comes first.
 *
 * Prints one line: naive messages=M applied=U duplicates=D seconds=S rate=R cpu_self=X
 * pg_cpu=Y (pg_cpu is -1 without --postmaster).
 */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

static const char SQL_CLAIM_ONE[] =
        "INSERT INTO idem.processed_messages"
        " (consumer_id, business_key, topic_id, partition, \"offset\", payload_hash)"
        " VALUES (idem.claim_consumer_id($1), $2, idem.claim_topic_id($3), $4, $5,"
        " decode($6, 'hex'))"
        " ON CONFLICT DO NOTHING RETURNING business_key";

static const char SQL_RESULT_ONE[] =
        "UPDATE idem.processed_messages SET result = $3 WHERE consumer_id ="
        " (SELECT id FROM idem.claim_consumers WHERE name = $1) AND business_key = $2";

struct naive_opts {
	const char *conninfo;
	const char *brokers;
	const char *topic;
	const char *group;
	const char *consumer;
	long max;
	double seconds;
	pid_t postmaster;
};

static PGresult *exec_ok(PGconn *conn, const char *name, int n, const char *const *vals,
                         const char *what)
{
	PGresult *res =
	        name ? PQexecPrepared(conn, name, n, vals, NULL, NULL, 0) : PQexec(conn, what);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		bench_die("%s failed: %s", what, PQresultErrorMessage(res));
	return res;
}

/* One message: its own transaction. Returns true if it was applied (not a duplicate). */
static bool process(PGconn *conn, const struct naive_opts *o, const rd_kafka_message_t *rkm)
{
	struct bench_payment pay;
	char why[128], part[16], off[24], result[24] = "";
	const char *cv[6], *hv[3], *rv[3];
	bool claimed, has_result = false;
	PGresult *res;

	if (rkm->payload == NULL ||
	    !bench_payment_decode(rkm->payload, rkm->len, &pay, why, sizeof(why)))
		bench_die("partition %" PRId32 " offset %" PRId64 ": %s", rkm->partition,
		          rkm->offset, rkm->payload ? why : "no value");
	snprintf(part, sizeof(part), "%" PRId32, rkm->partition);
	snprintf(off, sizeof(off), "%" PRId64, rkm->offset);
	PQclear(exec_ok(conn, NULL, 0, NULL, "BEGIN"));
	cv[0] = o->consumer;
	cv[1] = pay.payment_id;
	cv[2] = o->topic;
	cv[3] = part;
	cv[4] = off;
	cv[5] = pay.hash;
	res = exec_ok(conn, "claim", 6, cv, "claim");
	claimed = PQntuples(res) > 0;
	PQclear(res);
	if (claimed) {
		hv[0] = pay.payment_id;
		hv[1] = pay.account;
		hv[2] = pay.amount;
		res = exec_ok(conn, "handler", 3, hv, "handler");
		if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0)) {
			snprintf(result, sizeof(result), "%s", PQgetvalue(res, 0, 0));
			has_result = true;
		}
		PQclear(res);
		if (has_result) {
			rv[0] = o->consumer;
			rv[1] = pay.payment_id;
			rv[2] = result;
			PQclear(exec_ok(conn, "result", 3, rv, "result"));
		}
	}
	PQclear(exec_ok(conn, NULL, 0, NULL, "COMMIT"));
	return claimed;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_naive --conninfo C --brokers B --topic T --group G\n"
	           "         [--consumer NAME] [--max N] [--seconds S] [--postmaster PID]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "conninfo", required_argument, NULL, 'c' },
		{ "brokers", required_argument, NULL, 'b' },
		{ "topic", required_argument, NULL, 't' },
		{ "group", required_argument, NULL, 'g' },
		{ "consumer", required_argument, NULL, 'n' },
		{ "max", required_argument, NULL, 'm' },
		{ "seconds", required_argument, NULL, 's' },
		{ "postmaster", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct naive_opts o = { .consumer = "payments", .max = 20000, .seconds = 20 };
	rd_kafka_topic_partition_list_t *topics;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	char errstr[512];
	long n = 0, applied = 0;
	double t0 = 0, t1, cpu0 = 0, cpu1, pg0 = -1, pg1 = -1, deadline = 0, join_deadline;
	PGconn *conn;
	int c;

	bench_set_prog("bench_naive");
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
		case 'm':
			o.max = atol(optarg);
			break;
		case 's':
			o.seconds = atof(optarg);
			break;
		case 'p':
			o.postmaster = (pid_t)atoi(optarg);
			break;
		default:
			usage(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
	}
	if (o.conninfo == NULL || o.brokers == NULL || o.topic == NULL || o.group == NULL ||
	    o.max < 1 || o.seconds <= 0) {
		usage(stderr);
		return 1;
	}

	conn = bench_pg_connect(o.conninfo);
	bench_pg_prepare(conn, "claim", SQL_CLAIM_ONE);
	bench_pg_prepare(conn, "handler", bench_sql_payments_row);
	bench_pg_prepare(conn, "result", SQL_RESULT_ONE);

	conf = rd_kafka_conf_new();
	bench_kafka_set(conf, "bootstrap.servers", o.brokers);
	bench_kafka_set(conf, "group.id", o.group);
	bench_kafka_set(conf, "client.id", "bench_naive");
	bench_kafka_set(conf, "enable.auto.commit", "false");
	bench_kafka_set(conf, "auto.offset.reset", "earliest");
	bench_kafka_set(conf, "session.timeout.ms", "6000");
	bench_kafka_set(conf, "heartbeat.interval.ms", "500");
	bench_kafka_set(conf, "fetch.wait.max.ms", "10");
	bench_kafka_set(conf, "log_level", "4");
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
		bench_die("cannot create kafka consumer: %s", errstr);
	rd_kafka_poll_set_consumer(rk);
	topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, o.topic, RD_KAFKA_PARTITION_UA);
	if (rd_kafka_subscribe(rk, topics) != RD_KAFKA_RESP_ERR_NO_ERROR)
		bench_die("cannot subscribe to '%s'", o.topic);
	rd_kafka_topic_partition_list_destroy(topics);

	join_deadline = bench_now() + 60;
	while (n < o.max) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);
		rd_kafka_resp_err_t e;

		if (n == 0 && bench_now() > join_deadline)
			bench_die("no message within 60 s");
		if (n > 0 && bench_now() >= deadline) {
			if (rkm != NULL)
				rd_kafka_message_destroy(rkm);
			break;
		}
		if (rkm == NULL)
			continue;
		if (rkm->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
			fprintf(stderr, "bench_naive: consume error: %s, ignoring\n",
			        rd_kafka_message_errstr(rkm));
			rd_kafka_message_destroy(rkm);
			continue;
		}
		if (n == 0) {
			t0 = bench_now();
			cpu0 = bench_self_cpu();
			if (o.postmaster > 0)
				pg0 = bench_pg_cpu(o.postmaster);
			deadline = t0 + o.seconds;
		}
		applied += process(conn, &o, rkm);
		e = rd_kafka_commit_message(rk, rkm, 0);
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
			bench_die("offset commit failed: %s", rd_kafka_err2str(e));
		rd_kafka_message_destroy(rkm);
		n++;
	}
	t1 = bench_now();
	cpu1 = bench_self_cpu();
	if (o.postmaster > 0)
		pg1 = bench_pg_cpu(o.postmaster);

	printf("naive messages=%ld applied=%ld duplicates=%ld seconds=%.3f rate=%.1f cpu_self=%.3f"
	       " pg_cpu=%.3f\n",
	       n, applied, n - applied, t1 - t0, (double)n / (t1 - t0), cpu1 - cpu0,
	       pg0 >= 0 && pg1 >= 0 ? pg1 - pg0 : -1.0);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	PQfinish(conn);
	return 0;
}
