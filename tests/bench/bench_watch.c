/*
 * bench_watch - measurements around a running idemd (phase C and the latency run).
 *
 *   bench_watch pgcpu --postmaster PID
 *       Prints pg_cpu=SECONDS: CPU used so far by the Postgres cluster (see bench_pg_cpu()).
 *   bench_watch proc --pid PID
 *       Prints cpu=SECONDS hwm_kib=K for a process (all threads; VmHWM, the peak RSS).
 *   bench_watch wait --conninfo C --consumer NAME --topic T --target N [--timeout S]
 *                    [--pid PID] [--postmaster PID]
 *       Polls idem.partition_progress every 100 ms on one connection until the sum of
 *       next_offset over the topic's partitions reaches N (every partition starts at offset 0,
 *       so that is "all N messages committed"). Then, at once, samples the process and the
 *       cluster as above, and reads from the database when the work started and ended:
 *       first = the start of the first batch transaction (min processed_at of the claims),
 *       last = the commit time of the last one (pg_xact_commit_timestamp of the progress rows;
 *       needs track_commit_timestamp = on). Prints
 *       first=EPOCH last=EPOCH seconds=S cpu=X hwm_kib=K pg_cpu=Y claims=C transactions=T.
 *       Fails if the process exits or the timeout passes first.
 *       With --fair-at F --partitions P (the topic's partition count), it reads each
 *       partition's next_offset (offsets applied: the topic is fresh, every partition starts at
 *       0; a partition without a progress row yet has applied none), every 50 ms until the sum
 *       first reaches F x N; then it records the least and the most advanced partition and
 *       adds to the line fair_total=SUM fair_least=L fair_least_partition=P1 fair_most=M
 *       fair_most_partition=P2 fair_ratio=L/M fair_after_s=SECONDS (since the first applied
 *       offset was seen).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"

struct watch_opts {
	const char *conninfo;
	const char *consumer;
	const char *topic;
	long long target;
	double timeout;
	pid_t pid;
	pid_t postmaster;
	double fair_at;
	int partitions;
};

/* The least and the most advanced partition, the first time the sum reached the mark. */
struct watch_fair {
	bool taken;
	long long total;
	long long least, most;
	int least_part, most_part;
	double after_s;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_watch pgcpu --postmaster PID\n"
	           "       bench_watch proc --pid PID\n"
	           "       bench_watch wait --conninfo C --consumer NAME --topic T --target N\n"
	           "                        [--timeout S] [--pid PID] [--postmaster PID]\n"
	           "                        [--fair-at F --partitions P]\n");
}

static PGresult *query(PGconn *conn, const char *sql, int n, const char *const *vals)
{
	PGresult *res = PQexecParams(conn, sql, n, NULL, vals, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		bench_die("query failed: %s", PQresultErrorMessage(res));
	return res;
}

/*
 * One poll with --fair-at: each partition's next_offset; returns their sum and, the first time
 * it reaches the mark, fills @fair. @applied is scratch space for o->partitions counts.
 */
static long long poll_partitions(PGconn *conn, const struct watch_opts *o, long long *applied,
                                 struct watch_fair *fair, double *started)
{
	const char *vals[2] = { o->consumer, o->topic };
	long long sum = 0;
	PGresult *res;

	res = query(conn,
	            "SELECT partition, coalesce(next_offset, 0) FROM idem.partition_progress"
	            " WHERE consumer = $1 AND topic = $2",
	            2, vals);
	memset(applied, 0, (size_t)o->partitions * sizeof(*applied));
	for (int i = 0; i < PQntuples(res); i++) {
		int p = atoi(PQgetvalue(res, i, 0));
		long long n = atoll(PQgetvalue(res, i, 1));

		if (p < 0 || p >= o->partitions)
			bench_die("partition %d of topic '%s' is not below --partitions %d", p,
			          o->topic, o->partitions);
		applied[p] = n;
		sum += n;
	}
	PQclear(res);
	if (sum > 0 && *started < 0)
		*started = bench_now();
	if (!fair->taken && (double)sum >= o->fair_at * (double)o->target) {
		fair->taken = true;
		fair->total = sum;
		fair->least_part = fair->most_part = 0;
		for (int p = 1; p < o->partitions; p++) {
			if (applied[p] < applied[fair->least_part])
				fair->least_part = p;
			if (applied[p] > applied[fair->most_part])
				fair->most_part = p;
		}
		fair->least = applied[fair->least_part];
		fair->most = applied[fair->most_part];
		fair->after_s = bench_now() - *started;
	}
	return sum;
}

static int cmd_wait(const struct watch_opts *o)
{
	struct watch_fair fair = { 0 };
	long long *applied = NULL;
	double started = -1;
	const char *vals[2] = { o->consumer, o->topic };
	double deadline = bench_now() + o->timeout, cpu = -1, pg = -1;
	long hwm = -1;
	PGconn *conn = bench_pg_connect(o->conninfo);
	PGresult *res;

	if (o->fair_at > 0) {
		applied = calloc((size_t)o->partitions, sizeof(*applied));
		if (applied == NULL)
			bench_die("out of memory");
	}
	for (;;) {
		/* Finer polls until the fairness mark is taken (read at the first poll past it). */
		struct timespec ts = { 0, (o->fair_at > 0 && !fair.taken ? 50 : 100) * 1000000L };
		long long sum;

		if (o->fair_at > 0) {
			sum = poll_partitions(conn, o, applied, &fair, &started);
		} else {
			res = query(
			        conn,
			        "SELECT coalesce(sum(next_offset), 0) FROM idem.partition_progress"
			        " WHERE consumer = $1 AND topic = $2",
			        2, vals);
			sum = atoll(PQgetvalue(res, 0, 0));
			PQclear(res);
		}
		if (sum >= o->target)
			break;
		if (o->pid > 0 && bench_proc_cpu(o->pid, false) < 0)
			bench_die("process %d exited before the topic was processed (%lld of %lld)",
			          (int)o->pid, sum, o->target);
		if (bench_now() > deadline)
			bench_die("timed out: %lld of %lld messages processed", sum, o->target);
		nanosleep(&ts, NULL);
	}
	if (o->pid > 0) {
		cpu = bench_proc_cpu(o->pid, false);
		hwm = bench_proc_hwm_kib(o->pid);
	}
	if (o->postmaster > 0)
		pg = bench_pg_cpu(o->postmaster);
	res = query(conn,
	            "WITH c AS MATERIALIZED (SELECT processed_at, xmin FROM idem.processed_messages"
	            " WHERE consumer_id = (SELECT id FROM idem.claim_consumers WHERE name = $1)"
	            " AND topic_id = (SELECT id FROM idem.claim_topics WHERE name = $2))"
	            " SELECT extract(epoch FROM (SELECT min(processed_at) FROM c)),"
	            " extract(epoch FROM (SELECT max(pg_xact_commit_timestamp(xmin)) FROM"
	            " idem.partition_progress WHERE consumer = $1 AND topic = $2)),"
	            " (SELECT count(*) FROM c), (SELECT count(DISTINCT xmin::text) FROM c)",
	            2, vals);
	if (PQgetisnull(res, 0, 0) || PQgetisnull(res, 0, 1))
		bench_die("no claims or no commit timestamps (is track_commit_timestamp on?)");
	printf("first=%s last=%s seconds=%.3f cpu=%.3f hwm_kib=%ld pg_cpu=%.3f claims=%s"
	       " transactions=%s",
	       PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
	       atof(PQgetvalue(res, 0, 1)) - atof(PQgetvalue(res, 0, 0)), cpu, hwm, pg,
	       PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3));
	PQclear(res);
	if (o->fair_at > 0)
		printf(" fair_total=%lld fair_least=%lld fair_least_partition=%d fair_most=%lld"
		       " fair_most_partition=%d fair_ratio=%.4f fair_after_s=%.3f",
		       fair.total, fair.least, fair.least_part, fair.most, fair.most_part,
		       fair.most > 0 ? (double)fair.least / (double)fair.most : 0.0, fair.after_s);
	printf("\n");
	free(applied);
	PQfinish(conn);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "conninfo", required_argument, NULL, 'c' },
		{ "consumer", required_argument, NULL, 'n' },
		{ "topic", required_argument, NULL, 't' },
		{ "target", required_argument, NULL, 'N' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "pid", required_argument, NULL, 'P' },
		{ "postmaster", required_argument, NULL, 'p' },
		{ "fair-at", required_argument, NULL, 'f' },
		{ "partitions", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct watch_opts o = { .timeout = 1800 };
	const char *cmd;
	int c;

	bench_set_prog("bench_watch");
	if (argc < 2 || argv[1][0] == '-') {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 1 : 0;
	}
	cmd = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o.conninfo = optarg;
			break;
		case 'n':
			o.consumer = optarg;
			break;
		case 't':
			o.topic = optarg;
			break;
		case 'N':
			o.target = atoll(optarg);
			break;
		case 'T':
			o.timeout = atof(optarg);
			break;
		case 'P':
			o.pid = (pid_t)atoi(optarg);
			break;
		case 'p':
			o.postmaster = (pid_t)atoi(optarg);
			break;
		case 'f':
			o.fair_at = atof(optarg);
			break;
		case 'k':
			o.partitions = atoi(optarg);
			break;
		default:
			usage(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
	}
	if (strcmp(cmd, "pgcpu") == 0 && o.postmaster > 0) {
		printf("pg_cpu=%.3f\n", bench_pg_cpu(o.postmaster));
		return 0;
	}
	if (strcmp(cmd, "proc") == 0 && o.pid > 0) {
		printf("cpu=%.3f hwm_kib=%ld\n", bench_proc_cpu(o.pid, false),
		       bench_proc_hwm_kib(o.pid));
		return 0;
	}
	if (o.fair_at < 0 || o.fair_at > 1 || (o.fair_at > 0 && o.partitions <= 0)) {
		fprintf(stderr, "bench_watch: --fair-at takes 0..1 and needs --partitions P\n");
		return 1;
	}
	if (strcmp(cmd, "wait") == 0 && o.conninfo && o.consumer && o.topic && o.target > 0)
		return cmd_wait(&o);
	usage(stderr);
	return 1;
}
