/*
 * idemctl_status.c - idemctl status | verify | lookup: where each partition and each key stands.
 */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_inspect.h"
#include "idem_pg.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

void idemctl_status_usage(FILE *f)
{
	fprintf(f,
	        "  status [--json]     per partition: Kafka committed offset, database progress,\n"
	        "                      high watermark, lag, counters, quarantined messages\n"
	        "  verify [--json]     compare Kafka's committed offsets with the database's\n"
	        "                      progress; exit 3 if another client moved them ahead (a\n"
	        "                      loss alarm), 4 if the database is behind what idemd\n"
	        "                      committed (restored, failed over: idemd re-applies it),\n"
	        "                      5 if positions are another log's or consumer's (another\n"
	        "                      cluster, a topic created again, a renamed consumer:\n"
	        "                      idemd decides them anew at the next assignment)\n"
	        "  lookup KEY [--json] where and when a business key was applied, and its result;\n"
	        "                      exit 3 if it was not\n");
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
	int alarms = 0, behind = 0, moved = 0, rc;
	PGconn *conn;
	rd_kafka_t *rk;
	bool json;

	if (json_only(argc, argv, 0, 0, &json) < 0) {
		fprintf(stderr, "usage: idemctl %s [--json]\n", argv[0]);
		return IDEM_EXIT_USAGE;
	}
	if ((rc = idemctl_open_both(cfg, &conn, &rk)) != IDEM_EXIT_OK)
		return rc;
	if (idem_inspect_status(cfg, rk, conn, &rep, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s: %s\n", argv[0], err.msg);
		idemctl_close_both(conn, rk);
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
		enum idem_verify_state vs = idem_inspect_verify_state(&rep, p);
		char c[24], d[24];

		alarms += vs == IDEM_VERIFY_KAFKA_AHEAD;
		behind += vs == IDEM_VERIFY_DB_BEHIND;
		moved += idem_verify_state_moved(vs);
		off_str(c, sizeof(c), p->committed);
		off_str(d, sizeof(d), p->db_next);
		if (json) {
			json_object *o = part_json(p);

			json_object_object_add(o, "state",
			                       json_object_new_string(idem_verify_state_name(vs)));
			json_object_array_add(arr, o);
		} else if (verify) {
			printf("%-20s %5" PRId32 " %12s %12s  %s", p->topic, p->partition, c, d,
			       idem_verify_state_str(vs));
			if (vs == IDEM_VERIFY_DB_BEHIND || vs == IDEM_VERIFY_KAFKA_AHEAD)
				printf(" (%" PRId64 " message(s))",
				       p->committed - (p->db_next > 0 ? p->db_next : 0));
			putchar('\n');
		} else {
			printf("%-20s %5" PRId32 " %12s %12s %12" PRId64 " %10" PRId64 " %10" PRId64
			       " %10" PRId64 " %10" PRId64 " %s\n",
			       p->topic, p->partition, c, d, p->high,
			       p->high - (p->committed < 0 ? p->low : p->committed), p->applied,
			       p->duplicates, p->quarantine_rows, p->route->name);
			if (p->halted_offset >= 0) {
				/* The reason may quote the message that halted it. */
				printf("%-20s %5" PRId32 " HALTED at offset %" PRId64 ": ",
				       p->topic, p->partition, p->halted_offset);
				idemctl_print_esc(p->halt_reason, strlen(p->halt_reason), 4096, 0);
				putchar('\n');
			}
			/* What verify would say where it is more than a lag: the next start
			 * decides it anew, or it was moved by another client. */
			if (vs != IDEM_VERIFY_OK && vs != IDEM_VERIFY_DB_AHEAD &&
			    vs != IDEM_VERIFY_NO_COMMIT)
				printf("%-20s %5" PRId32 " %s\n", p->topic, p->partition,
				       idem_verify_state_str(vs));
		}
	}
	for (size_t i = 0; i < rep.n_missing; i++) {
		const struct idem_route *route = idem_cfg_route_for(cfg, rep.missing[i]);

		if (json) {
			json_object *o = json_object_new_object();

			json_object_object_add(o, "topic", json_object_new_string(rep.missing[i]));
			json_object_object_add(o, "route", json_object_new_string(route->name));
			json_object_object_add(o, "state", json_object_new_string("topic_missing"));
			json_object_array_add(arr, o);
		} else {
			printf("%-20s %5s TOPIC MISSING: the brokers do not have it; idemd consumes it once it exists (it creates no topic) route=%s\n",
			       rep.missing[i], "-", route->name);
		}
	}
	if (json) {
		idemctl_print_json(arr);
		json_object_put(arr);
	} else if (verify) {
		if (alarms)
			printf("LOSS ALARM: offsets moved ahead by another client on %d partition(s): "
			       "those messages were skipped without being applied\n",
			       alarms);
		if (behind)
			printf("DATABASE BEHIND what idemd committed on %d partition(s) (restored or "
			       "failed over): the messages will be re-applied at the next assignment\n",
			       behind);
		if (moved)
			printf("MOVED: positions of another log or consumer on %d partition(s) (idemd(8), "
			       "INCIDENT RUNBOOK, \"Reading verify\"): idemd decides them anew at the next "
			       "assignment\n",
			       moved);
		if (!alarms && !behind && !moved)
			printf("ok: no partition has Kafka ahead of the database\n");
	}
	idem_status_report_done(&rep);
	idemctl_close_both(conn, rk);
	if (verify && alarms)
		return IDEM_EXIT_LOSS;
	if (verify && behind)
		return IDEM_EXIT_BEHIND;
	return verify && moved ? IDEM_EXIT_MOVED : IDEM_EXIT_OK;
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
	idem_error err = { 0 };
	json_object *arr;
	PGresult *res;
	PGconn *conn;
	bool json;
	int rc = IDEM_EXIT_OK;

	if (json_only(argc, argv, 1, 1, &json) < 0) {
		fprintf(stderr, "usage: idemctl lookup KEY [--json]\n");
		return IDEM_EXIT_USAGE;
	}
	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		return rc;
	/* Look in the namespaces of this configuration's routes only. */
	if (idem_inspect_lookup(cfg, conn, argv[1], &res, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		PQfinish(conn);
		return IDEM_EXIT_FAILURE;
	}
	if (PQntuples(res) == 0) {
		fprintf(stderr,
		        "idemctl: key '%s' has not been applied (or its claim was purged by retention)\n",
		        argv[1]);
		rc = IDEM_EXIT_NOT_APPLIED;
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
		if (!json) {
			/* The key and the handler's result may come from the message. */
			char key[1024], consumer[256], topic[512], result[4096];

			printf("key=%s consumer=%s topic=%s partition=%s offset=%s applied_at=%s result=%s payload_sha256=%s\n",
			       idemctl_esc(key, sizeof(key), argv[1], 0),
			       idemctl_esc(consumer, sizeof(consumer), PQgetvalue(res, r, 0), 0),
			       idemctl_esc(topic, sizeof(topic), PQgetvalue(res, r, 1), 0),
			       PQgetvalue(res, r, 2), PQgetvalue(res, r, 3), PQgetvalue(res, r, 4),
			       PQgetisnull(res, r, 5) ? "NULL"
			                              : idemctl_esc(result, sizeof(result),
			                                            PQgetvalue(res, r, 5), 0),
			       PQgetisnull(res, r, 6) ? "NULL" : PQgetvalue(res, r, 6));
		}
		json_object_array_add(arr, o);
	}
	if (json)
		idemctl_print_json(arr);
	json_object_put(arr);
out_clear:
	PQclear(res);
	PQfinish(conn);
	return rc;
}
