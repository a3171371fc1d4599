/*
 * idemctl_replay.c - idemctl replay: plan a replay of a range, reset the group's offsets and
 * lower the database position (idem.partition_progress.next_offset) to its start.
 */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_inspect.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

void idemctl_replay_usage(FILE *f)
{
	fprintf(f,
	        "  replay --topic T [--partition P] (--to-offset O | --to-time TIME)\n"
	        "         [--dry-run] [--force] [--json]\n"
	        "                      reset the stopped group's offsets and the database position\n"
	        "                      so the range is read again;\n"
	        "                      --dry-run only counts what would apply and what is already\n"
	        "                      claimed; refuses a range older than the retention horizon\n"
	        "                      unless --force\n");
}

static void replay_synopsis(FILE *f)
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
	int y, mo, d, h, mi, se, n = -1;
	int64_t v;

	if (idem_int_parse(s, 0, INT64_MAX, &v))
		return v;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &y, &mo, &d, &h, &mi, &se, &n) != 6 || n < 0 ||
	    s[n] != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 ||
	    mi > 59 || se < 0 || se > 60)
		return -1;
	return ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000 + (int64_t)se * 1000;
}

/* What the command line asked for. */
struct replay_opts {
	const char *topic;
	int64_t partition; /* -1: every partition */
	int64_t offset;    /* -1: from --to-time */
	int64_t time_ms;   /* --to-time, -1 if not given */
	bool dry, force, json;
};

/*
 * Read and check every option, before anything is opened or asked.
 * @returns -1 to go on, or the exit status to end with (a usage error, or --help answered).
 */
static int replay_parse(int argc, char **argv, struct replay_opts *o)
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
	const char *to_time = NULL;
	int c;

	*o = (struct replay_opts){ .partition = -1, .offset = -1, .time_ms = -1 };
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_TOPIC:
			o->topic = optarg;
			break;
		case OPT_PARTITION:
			if (!idemctl_number("replay --partition", optarg, 0, INT32_MAX,
			                    &o->partition))
				return IDEM_EXIT_USAGE;
			break;
		case OPT_OFFSET:
			if (!idemctl_number("replay --to-offset", optarg, 0, INT64_MAX, &o->offset))
				return IDEM_EXIT_USAGE;
			break;
		case OPT_TIME:
			to_time = optarg;
			break;
		case OPT_DRY:
			o->dry = true;
			break;
		case OPT_FORCE:
			o->force = true;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case 'h':
			replay_synopsis(stdout);
			return IDEM_EXIT_OK;
		default:
			replay_synopsis(stderr);
			return IDEM_EXIT_USAGE;
		}
	}
	if (o->topic == NULL || optind != argc || (o->offset < 0) == (to_time == NULL)) {
		replay_synopsis(stderr);
		return IDEM_EXIT_USAGE;
	}
	if (to_time != NULL && (o->time_ms = parse_time_ms(to_time)) < 0) {
		fprintf(stderr,
		        "idemctl: replay --to-time: cannot read '%s' (milliseconds since the epoch or YYYY-MM-DDTHH:MM:SSZ)\n",
		        to_time);
		return IDEM_EXIT_USAGE;
	}
	if (to_time != NULL && o->partition < 0) {
		fprintf(stderr,
		        "idemctl: replay: --to-time needs --partition (each partition has its own offset for a time)\n");
		return IDEM_EXIT_USAGE;
	}
	return -1;
}

/* The first offset of @topic/@partition at or after @ms, asked of the broker. */
static int offset_for_time(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t ms,
                           int64_t *ret_offset)
{
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
	rd_kafka_resp_err_t e;
	int rc = IDEM_EXIT_OK;

	rd_kafka_topic_partition_list_add(l, topic, partition)->offset = ms;
	e = rd_kafka_offsets_for_times(rk, l, 10000);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR || l->elems[0].err || l->elems[0].offset < 0) {
		fprintf(stderr,
		        "idemctl: replay: the broker cannot look up offsets by time (%s); use --to-offset\n",
		        rd_kafka_err2str(e                 ? e
		                         : l->elems[0].err ? l->elems[0].err
		                                           : RD_KAFKA_RESP_ERR__NOENT));
		rc = IDEM_EXIT_FAILURE;
	} else {
		*ret_offset = l->elems[0].offset;
	}
	rd_kafka_topic_partition_list_destroy(l);
	return rc;
}

/* The plan, a line per partition and a total, or as JSON. */
static void print_plan(const struct idem_replay_report *rep, const struct replay_opts *o)
{
	int64_t tot[5] = { 0 };
	json_object *top = NULL, *arr = NULL;

	if (o->json) {
		top = json_object_new_object();
		arr = json_object_new_array();
	}
	for (size_t i = 0; i < rep->n_plans; i++) {
		const struct idem_replay_plan *p = &rep->plans[i];
		json_object *q;

		tot[0] += p->messages;
		tot[1] += p->would_apply;
		tot[2] += p->already_claimed;
		tot[3] += p->in_range_dups;
		tot[4] += p->undecodable;
		if (!o->json) {
			printf("%s/%" PRId32 ": offsets %" PRId64 "..%" PRId64
			       "%s messages=%" PRId64 " would_apply=%" PRId64
			       " already_claimed=%" PRId64 " repeated_in_range=%" PRId64
			       " undecodable=%" PRId64 "\n",
			       p->topic, p->partition, p->from, p->to,
			       p->clamped ? " (clamped to the log start)" : "", p->messages,
			       p->would_apply, p->already_claimed, p->in_range_dups,
			       p->undecodable);
			continue;
		}
		q = json_object_new_object();
		json_object_object_add(q, "topic", json_object_new_string(p->topic));
		json_object_object_add(q, "partition", json_object_new_int(p->partition));
		json_object_object_add(q, "from", json_object_new_int64(p->from));
		json_object_object_add(q, "to", json_object_new_int64(p->to));
		json_object_object_add(q, "clamped", json_object_new_boolean(p->clamped));
		json_object_object_add(q, "messages", json_object_new_int64(p->messages));
		json_object_object_add(q, "would_apply", json_object_new_int64(p->would_apply));
		json_object_object_add(q, "already_claimed",
		                       json_object_new_int64(p->already_claimed));
		json_object_object_add(q, "repeated_in_range",
		                       json_object_new_int64(p->in_range_dups));
		json_object_object_add(q, "undecodable", json_object_new_int64(p->undecodable));
		json_object_array_add(arr, q);
	}
	if (!o->json) {
		printf("total: messages=%" PRId64 " would_apply=%" PRId64
		       " already_claimed=%" PRId64 " repeated_in_range=%" PRId64
		       " undecodable=%" PRId64 "\n",
		       tot[0], tot[1], tot[2], tot[3], tot[4]);
		return;
	}
	json_object_object_add(top, "partitions", arr);
	json_object_object_add(top, "messages", json_object_new_int64(tot[0]));
	json_object_object_add(top, "would_apply", json_object_new_int64(tot[1]));
	json_object_object_add(top, "already_claimed", json_object_new_int64(tot[2]));
	json_object_object_add(top, "past_retention_horizon",
	                       json_object_new_boolean(rep->past_horizon));
	json_object_object_add(top, "dry_run", json_object_new_boolean(o->dry));
	idemctl_print_json(top);
	json_object_put(top);
}

/* How long the brokers have to describe the group. */
#define DESCRIBE_TIMEOUT_MS 10000

/*
 * Refuse a replay while the group has members, asking the brokers without joining it: a join
 * would make a running idemd give up its partitions twice (the join, the leave). Brokers that
 * cannot describe groups (librdkafka's mock cluster) leave it to idem_inspect_reset(), whose
 * commit is refused while the group has members and which then joins to find out.
 */
static int replay_check_stopped(const struct idem_cfg *cfg, rd_kafka_t *rk)
{
	idem_error err = { 0 };
	int members = 0;

	if (idem_consumer_group_members(rk, cfg->group_id, DESCRIBE_TIMEOUT_MS, &members, &err) !=
	    IDEM_OK) {
		fprintf(stderr,
		        "idemctl: replay: %s; the reset will find out whether it is stopped by joining it\n",
		        err.msg);
		return IDEM_EXIT_OK;
	}
	if (members == 0)
		return IDEM_EXIT_OK;
	fprintf(stderr,
	        "idemctl: replay: refused: group '%s' has %d active member(s): stop every idemd of the group before a replay (nothing changed)\n",
	        cfg->group_id, members);
	return IDEM_EXIT_FAILURE;
}

/* Reset the group's offsets, then the database position, to the plan's start. */
static int replay_reset(const struct idem_cfg *cfg, PGconn *conn,
                        const struct idem_replay_report *rep, bool json)
{
	idem_error err = { 0 };

	if (idem_inspect_reset(cfg, rep, 30000, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: replay: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	/* idemd starts a partition at the database's position (idem_resume_decide()): the
	 * database position goes back too, once Kafka's has (which makes sure that no idemd of
	 * the group runs). */
	if (idem_inspect_replay_mark(cfg, conn, rep, &err) != IDEM_OK) {
		fprintf(stderr,
		        "idemctl: replay: the group's offsets were reset, but not the database position "
		        "(%s): idemd would resume where the database stopped, without replaying; run "
		        "the same replay again before starting idemd\n",
		        err.msg);
		return IDEM_EXIT_FAILURE;
	}
	if (!json)
		printf("group '%s' reset: start idemd to replay\n", cfg->group_id);
	return IDEM_EXIT_OK;
}

int idemctl_replay(const struct idem_cfg *cfg, int argc, char **argv)
{
	struct idem_replay_report rep = { 0 };
	struct replay_opts o;
	idem_error err = { 0 };
	PGconn *conn;
	rd_kafka_t *rk;
	int rc;

	if ((rc = replay_parse(argc, argv, &o)) >= 0)
		return rc;
	if ((rc = idemctl_open_both(cfg, &conn, &rk)) != IDEM_EXIT_OK)
		return rc;
	if (!o.dry && (rc = replay_check_stopped(cfg, rk)) != IDEM_EXIT_OK)
		goto out_close;
	if (o.time_ms >= 0 && (rc = offset_for_time(rk, o.topic, (int32_t)o.partition, o.time_ms,
	                                            &o.offset)) != IDEM_EXIT_OK)
		goto out_close;
	if (idem_inspect_replay_plan(cfg, rk, conn, o.topic, (int32_t)o.partition, o.offset, &rep,
	                             &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: replay: %s\n", err.msg);
		rc = IDEM_EXIT_FAILURE;
		goto out_close;
	}
	print_plan(&rep, &o);
	if (rep.past_horizon && !o.force) {
		fprintf(stderr,
		        "idemctl: replay: refused: the range holds messages older than the retention horizon (claims purged before %" PRId64
		        " ms since the epoch), which could be applied again; use --force to replay anyway\n",
		        rep.horizon_ms);
		rc = IDEM_EXIT_FAILURE;
	} else if (o.dry) {
		if (!o.json)
			printf("dry run: nothing changed\n");
	} else {
		rc = replay_reset(cfg, conn, &rep, o.json);
	}
	idem_replay_report_done(&rep);
out_close:
	idemctl_close_both(conn, rk);
	return rc;
}
