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
 */
#include <getopt.h>
#include <inttypes.h>
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
};

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_watch pgcpu --postmaster PID\n"
	           "       bench_watch proc --pid PID\n"
	           "       bench_watch wait --conninfo C --consumer NAME --topic T --target N\n"
	           "                        [--timeout S] [--pid PID] [--postmaster PID]\n");
}

static PGresult *query(PGconn *conn, const char *sql, int n, const char *const *vals)
{
	PGresult *res = PQexecParams(conn, sql, n, NULL, vals, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		bench_die("query failed: %s", PQresultErrorMessage(res));
	return res;
}

static int cmd_wait(const struct watch_opts *o)
{
	const char *vals[2] = { o->consumer, o->topic };
	double deadline = bench_now() + o->timeout, cpu = -1, pg = -1;
	long hwm = -1;
	PGconn *conn = bench_pg_connect(o->conninfo);
	PGresult *res;

	for (;;) {
		struct timespec ts = { 0, 100 * 1000000L };
		long long sum;

		res = query(conn,
		            "SELECT coalesce(sum(next_offset), 0) FROM idem.partition_progress"
		            " WHERE consumer = $1 AND topic = $2",
		            2, vals);
		sum = atoll(PQgetvalue(res, 0, 0));
		PQclear(res);
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
	res = query(
	        conn,
	        "SELECT extract(epoch FROM (SELECT min(processed_at) FROM"
	        " idem.processed_messages WHERE consumer = $1 AND topic = $2)),"
	        " extract(epoch FROM (SELECT max(pg_xact_commit_timestamp(xmin)) FROM"
	        " idem.partition_progress WHERE consumer = $1 AND topic = $2)),"
	        " (SELECT count(*) FROM idem.processed_messages WHERE consumer = $1 AND topic = $2),"
	        " (SELECT count(DISTINCT xmin::text) FROM idem.processed_messages"
	        " WHERE consumer = $1 AND topic = $2)",
	        2, vals);
	if (PQgetisnull(res, 0, 0) || PQgetisnull(res, 0, 1))
		bench_die("no claims or no commit timestamps (is track_commit_timestamp on?)");
	printf("first=%s last=%s seconds=%.3f cpu=%.3f hwm_kib=%ld pg_cpu=%.3f claims=%s"
	       " transactions=%s\n",
	       PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
	       atof(PQgetvalue(res, 0, 1)) - atof(PQgetvalue(res, 0, 0)), cpu, hwm, pg,
	       PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3));
	PQclear(res);
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
	if (strcmp(cmd, "wait") == 0 && o.conninfo && o.consumer && o.topic && o.target > 0)
		return cmd_wait(&o);
	usage(stderr);
	return 1;
}
