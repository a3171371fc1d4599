/*
 * idemctl_ops.c - idemctl status | verify | lookup | replay.
 */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_consumer.h"
#include "idem_inspect.h"
#include "idem_pg.h"
#include "idem_retention.h"
#include "idemctl.h"

void idemctl_ops_usage(FILE *f)
{
	fprintf(f,
	        "  status [--json]     per partition: Kafka committed offset, database progress,\n"
	        "                      high watermark, lag, counters, quarantined messages\n"
	        "  verify [--json]     compare Kafka's committed offsets with the database's\n"
	        "                      progress; exit 3 if Kafka is ahead (a loss alarm)\n"
	        "  lookup KEY [--json] where and when a business key was applied, and its result;\n"
	        "                      exit 3 if it was not\n"
	        "  replay --topic T [--partition P] (--to-offset O | --to-time TIME)\n"
	        "         [--dry-run] [--force] [--json]\n"
	        "                      reset the stopped group's offsets so the range is read again;\n"
	        "                      --dry-run only counts what would apply and what is already\n"
	        "                      claimed; refuses a range older than the retention horizon\n"
	        "                      unless --force\n"
	        "  purge [--older-than DURATION]\n"
	        "                      delete the claims older than DURATION (default: the\n"
	        "                      configured retention.keep) of this configuration's routes\n"
	        "                      and record the retention horizon, as idemd does itself\n");
}

int idemctl_purge(const struct idem_cfg *cfg, int argc, char **argv)
{
	int64_t keep = idemctl_retention_keep(cfg);
	idem_error err = { 0 };
	PGconn *conn;
	int rc = IDEM_EXIT_OK;

	if (argc == 3 && strcmp(argv[1], "--older-than") == 0) {
		if (!idem_duration_parse(argv[2], &keep)) {
			fprintf(stderr,
			        "idemctl: purge: '%s' is not a duration (e.g. 30d, 12h, 90m, 3600s)\n",
			        argv[2]);
			return IDEM_EXIT_USAGE;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: idemctl purge [--older-than DURATION]\n");
		return IDEM_EXIT_USAGE;
	}
	if (idem_pg_conn_open(cfg, "idemctl", &conn, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	for (size_t i = 0; i < cfg->n_routes; i++) {
		int64_t deleted = 0;

		/* Two routes may share a consumer: purge each namespace once. */
		bool seen = false;

		for (size_t j = 0; j < i; j++)
			seen |= strcmp(cfg->routes[j].consumer, cfg->routes[i].consumer) == 0;
		if (seen)
			continue;
		if (idem_retention_purge(conn, cfg->routes[i].consumer, keep, cfg->retention_batch,
		                         &deleted, &err) != IDEM_OK) {
			fprintf(stderr, "idemctl: purge: %s\n", err.msg);
			rc = IDEM_EXIT_FAILURE;
			break;
		}
		printf("consumer=%s purged=%" PRId64 " older_than_s=%" PRId64 "\n",
		       cfg->routes[i].consumer, deleted, keep);
	}
	PQfinish(conn);
	return rc;
}

/* Connections for a subcommand: Postgres and a non-committing consumer of the group. */
static int open_both(const struct idem_cfg *cfg, PGconn **conn, rd_kafka_t **rk)
{
	idem_error err = { 0 };

	if (idem_pg_conn_open(cfg, "idemctl", conn, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	if (idem_consumer_new(cfg, NULL, rk, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		PQfinish(*conn);
		return IDEM_EXIT_FAILURE;
	}
	return IDEM_EXIT_OK;
}

static void close_both(PGconn *conn, rd_kafka_t *rk)
{
	rd_kafka_destroy(rk);
	PQfinish(conn);
}

/* Parse "--json" as the only option; returns -1 on a usage error. */
static int json_only(int argc, char **argv, int min_args, int max_args, bool *json)
{
	int n = 0;

	*json = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			*json = true;
		else if (argv[i][0] == '-' && argv[i][1] != '\0')
			return -1;
		else
			argv[++n] = argv[i];
	}
	return n < min_args || n > max_args ? -1 : n;
}

static json_object *part_json(const struct idem_part_status *p)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "topic", json_object_new_string(p->topic));
	json_object_object_add(o, "partition", json_object_new_int(p->partition));
	json_object_object_add(o, "route", json_object_new_string(p->route->name));
	json_object_object_add(o, "consumer", json_object_new_string(p->route->consumer));
	json_object_object_add(o, "kafka_committed",
	                       p->committed < 0 ? NULL : json_object_new_int64(p->committed));
	json_object_object_add(o, "database_progress",
	                       p->db_next < 0 ? NULL : json_object_new_int64(p->db_next));
	json_object_object_add(o, "log_start", json_object_new_int64(p->low));
	json_object_object_add(o, "high_watermark", json_object_new_int64(p->high));
	json_object_object_add(
	        o, "lag",
	        json_object_new_int64(p->high - (p->committed < 0 ? p->low : p->committed)));
	json_object_object_add(o, "consumed", json_object_new_int64(p->consumed));
	json_object_object_add(o, "applied", json_object_new_int64(p->applied));
	json_object_object_add(o, "duplicates", json_object_new_int64(p->duplicates));
	json_object_object_add(o, "quarantined", json_object_new_int64(p->quarantine_rows));
	json_object_object_add(o, "halted_offset",
	                       p->halted_offset < 0 ? NULL
	                                            : json_object_new_int64(p->halted_offset));
	json_object_object_add(o, "halt_reason",
	                       p->halt_reason ? json_object_new_string(p->halt_reason) : NULL);
	return o;
}

static void print_json(json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
	                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

static void off_str(char *buf, size_t len, int64_t v)
{
	if (v < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%" PRId64, v);
}

static int status_or_verify(const struct idem_cfg *cfg, int argc, char **argv, bool verify)
{
	struct idem_status_report rep = { 0 };
	idem_error err = { 0 };
	json_object *arr = NULL;
	int alarms = 0, rc;
	PGconn *conn;
	rd_kafka_t *rk;
	bool json;

	if (json_only(argc, argv, 0, 0, &json) < 0) {
		fprintf(stderr, "usage: idemctl %s [--json]\n", argv[0]);
		return IDEM_EXIT_USAGE;
	}
	if ((rc = open_both(cfg, &conn, &rk)) != IDEM_EXIT_OK)
		return rc;
	if (idem_inspect_status(cfg, rk, conn, &rep, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s: %s\n", argv[0], err.msg);
		close_both(conn, rk);
		return IDEM_EXIT_FAILURE;
	}
	if (json)
		arr = json_object_new_array();
	else if (verify)
		printf("%-20s %5s %12s %12s  %s\n", "TOPIC", "PART", "KAFKA", "DATABASE", "STATE");
	else
		printf("%-20s %5s %12s %12s %12s %10s %10s %10s %10s %5s\n", "TOPIC", "PART",
		       "COMMITTED", "DATABASE", "HIGH", "LAG", "APPLIED", "DUPLICATES",
		       "QUARANTINE", "ROUTE");
	for (size_t i = 0; i < rep.n_parts; i++) {
		const struct idem_part_status *p = &rep.parts[i];
		enum idem_verify_state vs = idem_inspect_verify_state(p);
		char c[24], d[24];

		alarms += vs == IDEM_VERIFY_KAFKA_AHEAD;
		off_str(c, sizeof(c), p->committed);
		off_str(d, sizeof(d), p->db_next);
		if (json) {
			json_object *o = part_json(p);

			if (verify)
				json_object_object_add(
				        o, "state",
				        json_object_new_string(
				                vs == IDEM_VERIFY_OK            ? "ok"
				                : vs == IDEM_VERIFY_DB_AHEAD    ? "database_ahead"
				                : vs == IDEM_VERIFY_KAFKA_AHEAD ? "kafka_ahead"
				                                                : "no_commit"));
			json_object_array_add(arr, o);
		} else if (verify) {
			printf("%-20s %5" PRId32 " %12s %12s  %s\n", p->topic, p->partition, c, d,
			       idem_verify_state_str(vs));
		} else {
			printf("%-20s %5" PRId32 " %12s %12s %12" PRId64 " %10" PRId64 " %10" PRId64
			       " %10" PRId64 " %10" PRId64 " %s\n",
			       p->topic, p->partition, c, d, p->high,
			       p->high - (p->committed < 0 ? p->low : p->committed), p->applied,
			       p->duplicates, p->quarantine_rows, p->route->name);
			if (p->halted_offset >= 0)
				printf("%-20s %5" PRId32 " HALTED at offset %" PRId64 ": %s\n",
				       p->topic, p->partition, p->halted_offset, p->halt_reason);
		}
	}
	if (json)
		print_json(arr);
	else if (verify)
		printf("%s\n",
		       alarms ? "LOSS ALARM: Kafka committed offsets beyond what the database applied"
		              : "ok: no partition has Kafka ahead of the database");
	idem_status_report_done(&rep);
	close_both(conn, rk);
	return verify && alarms ? 3 : IDEM_EXIT_OK;
}

int idemctl_status(const struct idem_cfg *cfg, int argc, char **argv)
{
	return status_or_verify(cfg, argc, argv, false);
}

int idemctl_verify(const struct idem_cfg *cfg, int argc, char **argv)
{
	return status_or_verify(cfg, argc, argv, true);
}

int idemctl_lookup(const struct idem_cfg *cfg, int argc, char **argv)
{
	struct idem_buf consumers = { 0 };
	idem_error err = { 0 };
	const char *vals[2];
	json_object *arr;
	PGresult *res;
	PGconn *conn;
	bool json;
	int rc = IDEM_EXIT_OK;

	if (json_only(argc, argv, 1, 1, &json) < 0) {
		fprintf(stderr, "usage: idemctl lookup KEY [--json]\n");
		return IDEM_EXIT_USAGE;
	}
	if (idem_pg_conn_open(cfg, "idemctl", &conn, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	/* Look in the namespaces of this configuration's routes only. */
	if (idem_pgarray_open(&consumers) != IDEM_OK)
		goto out_nomem;
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const char *c = cfg->routes[i].consumer;

		if (idem_pgarray_add(&consumers, c, strlen(c), false) != IDEM_OK)
			goto out_nomem;
	}
	if (idem_pgarray_close(&consumers) != IDEM_OK)
		goto out_nomem;
	vals[0] = argv[1];
	vals[1] = consumers.data;
	res = PQexecParams(
	        conn,
	        "SELECT consumer, topic, partition, \"offset\", to_char(processed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), result, encode(payload_hash, 'hex') FROM idem.processed_messages WHERE business_key = $1 AND consumer = ANY($2::text[]) ORDER BY consumer",
	        2, NULL, vals, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		idem_pg_error(&err, conn, res, "lookup");
		fprintf(stderr, "idemctl: %s\n", err.msg);
		rc = IDEM_EXIT_FAILURE;
		goto out_clear;
	}
	if (PQntuples(res) == 0) {
		fprintf(stderr,
		        "idemctl: key '%s' has not been applied (or its claim was purged by retention)\n",
		        argv[1]);
		rc = IDEM_EXIT_LOSS;
		goto out_clear;
	}
	arr = json_object_new_array();
	for (int r = 0; r < PQntuples(res); r++) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "business_key", json_object_new_string(argv[1]));
		json_object_object_add(o, "consumer",
		                       json_object_new_string(PQgetvalue(res, r, 0)));
		json_object_object_add(o, "topic", json_object_new_string(PQgetvalue(res, r, 1)));
		json_object_object_add(o, "partition",
		                       json_object_new_int(atoi(PQgetvalue(res, r, 2))));
		json_object_object_add(
		        o, "offset",
		        json_object_new_int64(strtoll(PQgetvalue(res, r, 3), NULL, 10)));
		json_object_object_add(o, "applied_at",
		                       json_object_new_string(PQgetvalue(res, r, 4)));
		json_object_object_add(o, "result",
		                       PQgetisnull(res, r, 5)
		                               ? NULL
		                               : json_object_new_string(PQgetvalue(res, r, 5)));
		json_object_object_add(o, "payload_sha256",
		                       PQgetisnull(res, r, 6)
		                               ? NULL
		                               : json_object_new_string(PQgetvalue(res, r, 6)));
		if (!json)
			printf("key=%s consumer=%s topic=%s partition=%s offset=%s applied_at=%s result=%s payload_sha256=%s\n",
			       argv[1], PQgetvalue(res, r, 0), PQgetvalue(res, r, 1),
			       PQgetvalue(res, r, 2), PQgetvalue(res, r, 3), PQgetvalue(res, r, 4),
			       PQgetisnull(res, r, 5) ? "NULL" : PQgetvalue(res, r, 5),
			       PQgetisnull(res, r, 6) ? "NULL" : PQgetvalue(res, r, 6));
		json_object_array_add(arr, o);
	}
	if (json)
		print_json(arr);
	else
		json_object_put(arr);
out_clear:
	PQclear(res);
	idem_buf_done(&consumers);
	PQfinish(conn);
	return rc;
out_nomem:
	fprintf(stderr, "idemctl: out of memory\n");
	idem_buf_done(&consumers);
	PQfinish(conn);
	return IDEM_EXIT_FAILURE;
}

static void replay_usage(FILE *f)
{
	fprintf(f,
	        "usage: idemctl replay --topic T [--partition P] (--to-offset O | --to-time TIME) [--dry-run] [--force] [--json]\n"
	        "TIME is milliseconds since the epoch or YYYY-MM-DDTHH:MM:SSZ (UTC).\n");
}

/* Days since 1970-01-01 of a proleptic Gregorian date (timegm is not POSIX). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* "1700000000000" (ms since the epoch) or "2026-11-30T12:00:00Z"; -1 if neither. */
static int64_t parse_time_ms(const char *s)
{
	int y, mo, d, h, mi, se;
	char *end;
	long long v = strtoll(s, &end, 10);

	if (*end == '\0' && end != s)
		return v;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2dZ", &y, &mo, &d, &h, &mi, &se) != 6 || mo < 1 ||
	    mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
		return -1;
	return ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000 + (int64_t)se * 1000;
}

int idemctl_replay(const struct idem_cfg *cfg, int argc, char **argv)
{
	enum { OPT_TOPIC = 256, OPT_PARTITION, OPT_OFFSET, OPT_TIME, OPT_DRY, OPT_FORCE, OPT_JSON };
	static const struct option opts[] = {
		{ "topic", required_argument, NULL, OPT_TOPIC },
		{ "partition", required_argument, NULL, OPT_PARTITION },
		{ "to-offset", required_argument, NULL, OPT_OFFSET },
		{ "to-time", required_argument, NULL, OPT_TIME },
		{ "dry-run", no_argument, NULL, OPT_DRY },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct idem_replay_report rep = { 0 };
	const char *topic = NULL, *to_time = NULL;
	int64_t partition = -1, offset = -1, tot[5] = { 0 };
	bool dry = false, force = false, json = false;
	idem_error err = { 0 };
	PGconn *conn;
	rd_kafka_t *rk;
	int c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_TOPIC:
			topic = optarg;
			break;
		case OPT_PARTITION:
			partition = strtoll(optarg, NULL, 10);
			break;
		case OPT_OFFSET:
			offset = strtoll(optarg, NULL, 10);
			break;
		case OPT_TIME:
			to_time = optarg;
			break;
		case OPT_DRY:
			dry = true;
			break;
		case OPT_FORCE:
			force = true;
			break;
		case OPT_JSON:
			json = true;
			break;
		case 'h':
			replay_usage(stdout);
			return IDEM_EXIT_OK;
		default:
			replay_usage(stderr);
			return IDEM_EXIT_USAGE;
		}
	}
	if (topic == NULL || optind != argc || (offset < 0) == (to_time == NULL) ||
	    partition < -1) {
		replay_usage(stderr);
		return IDEM_EXIT_USAGE;
	}
	if ((rc = open_both(cfg, &conn, &rk)) != IDEM_EXIT_OK)
		return rc;
	if (to_time != NULL) {
		int64_t ms = parse_time_ms(to_time);
		rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
		rd_kafka_resp_err_t e;

		if (ms < 0) {
			fprintf(stderr, "idemctl: replay: cannot read time '%s'\n", to_time);
			rd_kafka_topic_partition_list_destroy(l);
			rc = IDEM_EXIT_USAGE;
			goto out_close;
		}
		/* Each partition has its own offset for a time, so --to-time takes one partition.
		 */
		rd_kafka_topic_partition_list_add(l, topic, partition < 0 ? 0 : (int32_t)partition)
		        ->offset = ms;
		e = rd_kafka_offsets_for_times(rk, l, 10000);
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR || l->elems[0].err || l->elems[0].offset < 0) {
			fprintf(stderr,
			        "idemctl: replay: the broker cannot look up offsets by time (%s); use --to-offset\n",
			        rd_kafka_err2str(e                 ? e
			                         : l->elems[0].err ? l->elems[0].err
			                                           : RD_KAFKA_RESP_ERR__NOENT));
			rd_kafka_topic_partition_list_destroy(l);
			rc = IDEM_EXIT_FAILURE;
			goto out_close;
		}
		if (partition < 0) {
			fprintf(stderr,
			        "idemctl: replay: --to-time needs --partition (each partition has its own offset for a time)\n");
			rd_kafka_topic_partition_list_destroy(l);
			rc = IDEM_EXIT_USAGE;
			goto out_close;
		}
		offset = l->elems[0].offset;
		rd_kafka_topic_partition_list_destroy(l);
	}
	if (idem_inspect_replay_plan(cfg, rk, conn, topic, (int32_t)partition, offset, &rep,
	                             &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: replay: %s\n", err.msg);
		rc = IDEM_EXIT_FAILURE;
		goto out_close;
	}
	for (size_t i = 0; i < rep.n_plans; i++) {
		const struct idem_replay_plan *p = &rep.plans[i];

		tot[0] += p->messages;
		tot[1] += p->would_apply;
		tot[2] += p->already_claimed;
		tot[3] += p->in_range_dups;
		tot[4] += p->undecodable;
		if (!json)
			printf("%s/%" PRId32 ": offsets %" PRId64 "..%" PRId64
			       "%s messages=%" PRId64 " would_apply=%" PRId64
			       " already_claimed=%" PRId64 " repeated_in_range=%" PRId64
			       " undecodable=%" PRId64 "\n",
			       p->topic, p->partition, p->from, p->to,
			       p->clamped ? " (clamped to the log start)" : "", p->messages,
			       p->would_apply, p->already_claimed, p->in_range_dups,
			       p->undecodable);
	}
	if (json) {
		json_object *o = json_object_new_object(), *arr = json_object_new_array();

		for (size_t i = 0; i < rep.n_plans; i++) {
			const struct idem_replay_plan *p = &rep.plans[i];
			json_object *q = json_object_new_object();

			json_object_object_add(q, "topic", json_object_new_string(p->topic));
			json_object_object_add(q, "partition", json_object_new_int(p->partition));
			json_object_object_add(q, "from", json_object_new_int64(p->from));
			json_object_object_add(q, "to", json_object_new_int64(p->to));
			json_object_object_add(q, "clamped", json_object_new_boolean(p->clamped));
			json_object_object_add(q, "messages", json_object_new_int64(p->messages));
			json_object_object_add(q, "would_apply",
			                       json_object_new_int64(p->would_apply));
			json_object_object_add(q, "already_claimed",
			                       json_object_new_int64(p->already_claimed));
			json_object_object_add(q, "repeated_in_range",
			                       json_object_new_int64(p->in_range_dups));
			json_object_object_add(q, "undecodable",
			                       json_object_new_int64(p->undecodable));
			json_object_array_add(arr, q);
		}
		json_object_object_add(o, "partitions", arr);
		json_object_object_add(o, "messages", json_object_new_int64(tot[0]));
		json_object_object_add(o, "would_apply", json_object_new_int64(tot[1]));
		json_object_object_add(o, "already_claimed", json_object_new_int64(tot[2]));
		json_object_object_add(o, "past_retention_horizon",
		                       json_object_new_boolean(rep.past_horizon));
		json_object_object_add(o, "dry_run", json_object_new_boolean(dry));
		print_json(o);
	} else {
		printf("total: messages=%" PRId64 " would_apply=%" PRId64
		       " already_claimed=%" PRId64 " repeated_in_range=%" PRId64
		       " undecodable=%" PRId64 "\n",
		       tot[0], tot[1], tot[2], tot[3], tot[4]);
	}
	if (rep.past_horizon && !force) {
		fprintf(stderr,
		        "idemctl: replay: refused: the range holds messages older than the retention horizon (claims purged before %" PRId64
		        " ms since the epoch), which could be applied again; use --force to replay anyway\n",
		        rep.horizon_ms);
		rc = IDEM_EXIT_FAILURE;
		goto out_done;
	}
	if (dry) {
		if (!json)
			printf("dry run: nothing changed\n");
		goto out_done;
	}
	if (idem_inspect_reset(cfg, &rep, 30000, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: replay: %s\n", err.msg);
		rc = IDEM_EXIT_FAILURE;
		goto out_done;
	}
	if (!json)
		printf("group '%s' reset: start idemd to replay\n", cfg->group_id);
out_done:
	idem_replay_report_done(&rep);
out_close:
	close_both(conn, rk);
	return rc;
}
