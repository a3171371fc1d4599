/*
 * idem-kafkatool - the test rig's Kafka client: produces payment streams with upstream
 * duplicates, single hand-made messages, messages from a file (the Avro tests' encoder writes
 * them), and reads or resets a group's committed offsets.
 *
 *   idem-kafkatool produce        --brokers B --topic T --count N [...]
 *   idem-kafkatool produce-one    --brokers B --topic T [...]
 *   idem-kafkatool produce-file   --brokers B --topic T --input FILE [...]
 *   idem-kafkatool offsets        --brokers B --group G --topic T
 *   idem-kafkatool wait-committed --brokers B --group G --topic T --timeout SECONDS
 *   idem-kafkatool reset          --brokers B --group G --topic T (--to-beginning|--to-offset O)
 *   idem-kafkatool consume        --brokers B --topic T [--partition P] [--max N]
 *   idem-kafkatool cluster-id     --brokers B
 *
 * Every subcommand takes --help, -X PROP=VALUE (any librdkafka property, applied last) and
 * --log-level N (librdkafka syslog level, default 4: warnings and errors). Errors go to stderr;
 * any failure exits 1.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_common.h"

#define KT_REQUEST_MS    10000 /* timeout of one metadata, watermark or commit request */
#define KT_POLL_MS       200   /* wait-committed polls this often */
#define KT_TS_BASE       INT64_C(1735689600000) /* 2025-01-01T00:00:00Z, "ts" of the first payment */
#define KT_FAR_GAP       256 /* per partition: "far-back" duplicates skip this many payments */
#define KT_DEFAULT_LOGLV "4"

enum {
	OPT_BROKERS = 256,
	OPT_TOPIC,
	OPT_GROUP,
	OPT_LOG_LEVEL,
	OPT_COUNT,
	OPT_DUP_RATIO,
	OPT_ACCOUNTS,
	OPT_SEED,
	OPT_MANIFEST,
	OPT_TENANT,
	OPT_RATE,
	OPT_PARTITION,
	OPT_KEY,
	OPT_KEY_HEX,
	OPT_NO_KEY,
	OPT_VALUE,
	OPT_VALUE_HEX,
	OPT_VALUE_FILE,
	OPT_NO_VALUE,
	OPT_HEADER,
	OPT_HEADER_HEX,
	OPT_TIMEOUT,
	OPT_TO_BEGINNING,
	OPT_TO_OFFSET,
	OPT_INPUT,
};

/* clang-format off */
#define KT_COMMON_OPTS                                                                             \
	{ "brokers", required_argument, NULL, OPT_BROKERS },                                       \
	{ "topic", required_argument, NULL, OPT_TOPIC },                                           \
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },                                   \
	{ "property", required_argument, NULL, 'X' },                                              \
	{ "help", no_argument, NULL, 'h' }
/* clang-format on */

/* Options every subcommand shares. */
struct kt_common {
	const char *brokers;
	const char *topic;
	const char *group;
	const char *log_level;
	char **props; /* -X values, "name=value" */
	int nprops;
};

/* A librdkafka property; tables of them end with a NULL name. */
struct kt_prop {
	const char *name;
	const char *value;
};

/* One partition's view: committed offset (-1 = none), watermarks. */
struct kt_part {
	int32_t partition;
	int64_t committed;
	int64_t low;
	int64_t high;
};

/* Delivery bookkeeping shared with the delivery report callback. */
struct kt_delivery {
	uint64_t delivered;
	uint64_t failed;
	int32_t partition;
	int64_t offset;
	char first_error[512];
};

static const char *prog_cmd = "idem-kafkatool";

static void usage_main(FILE *f)
{
	fprintf(f, "usage: idem-kafkatool COMMAND [OPTIONS]\n"
	           "\n"
	           "commands:\n"
	           "  produce         write a stream of JSON payments with upstream duplicates\n"
	           "  produce-one     write exactly one message built from the options\n"
	           "  produce-file    write the messages of a file, one per line, in order\n"
	           "  offsets         print a group's committed offsets and the watermarks\n"
	           "  wait-committed  wait until a group has committed up to the high watermarks\n"
	           "  reset           commit chosen offsets for a stopped group\n"
	           "  consume         print the messages of a topic, one per line\n"
	           "  cluster-id      print the cluster's id\n"
	           "\n"
	           "'idem-kafkatool COMMAND --help' describes a command.\n");
}

static const char common_help[] =
        "  -X, --property NAME=VALUE  set a librdkafka property (applied last; repeatable)\n"
        "      --log-level N          librdkafka log level (default 4)\n"
        "  -h, --help                 show this help\n";

static void usage_produce(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool produce --brokers B --topic T --count N [--dup-ratio R]\n"
	        "         [--accounts A] [--seed S] [--manifest FILE] [--tenant NAME]\n"
	        "         [--rate MSGS_PER_SEC]\n"
	        "\n"
	        "Writes N JSON payments; N includes the duplicates. Unique payment i:\n"
	        "  key pay-S-i, value {\"payment_id\":\"pay-S-i\",\"account\":\"acct-K\",\"amount\":1..10000,\n"
	        "  \"currency\":\"EUR\",\"ts\":MS}, headers tenant: NAME and source: idemd-demo,\n"
	        "  partition FNV-1a(\"acct-K\") %% partitions (a payment's account decides its partition).\n"
	        "With probability R a message re-sends an earlier payment with the identical value:\n"
	        "40%% the latest payment (same partition, adjacent), 40%% an old one (same partition),\n"
	        "20%% any earlier one to a different partition. The output depends only on the options.\n"
	        "\n"
	        "  --count N          messages to write, duplicates included (required)\n"
	        "  --dup-ratio R      probability that a message is a duplicate, 0..1 (default 0)\n"
	        "  --accounts A       accounts acct-1..acct-A (default 50)\n"
	        "  --seed S           non-negative integer (default 1)\n"
	        "  --manifest FILE    write payment_id,account,amount per unique payment (CSV)\n"
	        "  --tenant NAME      value of the tenant header (default t1)\n"
	        "  --rate R           at most R messages per second\n"
	        "%s"
	        "\n"
	        "On SIGTERM or SIGINT it writes no more messages, waits for those written and says so\n"
	        "as at the end (a stream that runs until the test is done with it).\n"
	        "Prints produced=N unique=U duplicates=D; exits 1 if any message was not delivered.\n",
	        common_help);
}

static void usage_produce_one(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool produce-one --brokers B --topic T [--partition P]\n"
	        "         [--key K | --key-hex HEX | --no-key]\n"
	        "         [--value V | --value-hex HEX | --value-file F | --no-value]\n"
	        "         [--header NAME=VALUE]... [--header-hex NAME=HEX]...\n"
	        "\n"
	        "Writes exactly one message. Key and value default to none (NULL); --key '' is an\n"
	        "empty key. Headers keep their order and may repeat; --header NAME (no '=') adds a\n"
	        "header with a NULL value. Prints partition=P offset=O.\n"
	        "%s",
	        common_help);
}

static void usage_produce_file(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool produce-file --brokers B --topic T --input FILE\n"
	        "         [--partition P] [--rate MSGS_PER_SEC]\n"
	        "\n"
	        "Writes one message per line of FILE ('-': stdin), in the order of the lines:\n"
	        "  KEY<TAB>VALUE[<TAB>PARTITION]\n"
	        "KEY and VALUE are hex ('' is empty) or '-' for none (NULL), as tests/tools/avro_encode.py\n"
	        "writes them; blank lines are skipped. A message goes to the line's PARTITION, else to\n"
	        "--partition P, else a keyed one to the partition the key hashes to (librdkafka's\n"
	        "CRC32 partitioner, 'consistent': equal keys, also empty ones, share a partition), an\n"
	        "unkeyed one round-robin over the partitions.\n"
	        "\n"
	        "  --input FILE       the messages (required)\n"
	        "  --partition P      partition of the lines that name none\n"
	        "  --rate R           at most R messages per second\n"
	        "%s"
	        "\n"
	        "Prints produced=N; exits 1 on a malformed line or if any message was not delivered.\n",
	        common_help);
}

static void usage_offsets(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool offsets --brokers B --group G --topic T\n"
	        "\n"
	        "Prints one line per partition, partition=P committed=C low=L high=H lag=X, then\n"
	        "total committed=C high=H lag=X. committed=-1 means none; the lag of such a\n"
	        "partition counts from the low watermark.\n"
	        "%s",
	        common_help);
}

static void usage_wait_committed(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool wait-committed --brokers B --group G --topic T --timeout S\n"
	        "\n"
	        "Waits until every partition's committed offset reached its high watermark (an empty\n"
	        "partition needs no commit), then prints the total line and exits 0. On timeout prints\n"
	        "the last state to stderr and exits 1.\n"
	        "%s",
	        common_help);
}

static void usage_reset(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool reset --brokers B --group G --topic T\n"
	        "         (--to-beginning | --to-offset O) [--partition P]\n"
	        "\n"
	        "Commits the offsets for a group that has no active members (stop its consumers\n"
	        "first), on every partition or only P, then reads them back. --to-beginning uses each\n"
	        "partition's low watermark. Prints partition=P committed=O previous=C per partition\n"
	        "(previous=-1: none).\n"
	        "%s",
	        common_help);
}

static void usage_consume(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool consume --brokers B --topic T [--partition P] [--max N]\n"
	        "         [--timeout S]\n"
	        "\n"
	        "Reads every partition (or only P) from the low to the high watermark as of the\n"
	        "start, without a group, and prints one line per message:\n"
	        "PARTITION<TAB>OFFSET<TAB>KEY<TAB>VALUE<TAB>NAME=VALUE,NAME=VALUE...\n"
	        "Bytes outside printable ASCII and '\\' print as \\xNN (also ',' and '=' in\n"
	        "headers); a NULL key or value prints as \\N. Stops after N messages; exits 1 if\n"
	        "the end is not reached in S seconds (default 30).\n"
	        "%s",
	        common_help);
}

static void usage_cluster_id(FILE *f)
{
	fprintf(f,
	        "usage: idem-kafkatool cluster-id --brokers B [--timeout S]\n"
	        "\n"
	        "Prints the id of the cluster at B (as Kafka's metadata names it, what idemd\n"
	        "records in idem.partition_progress.kafka_cluster). Exits 1 if there is none in S\n"
	        "seconds (default 10).\n"
	        "%s",
	        common_help);
}

static bool parse_i64(const char *s, int64_t min, int64_t max, int64_t *ret)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return false;
	*ret = v;
	return true;
}

static bool parse_double(const char *s, double min, double max, double *ret)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= min && v <= max))
		return false;
	*ret = v;
	return true;
}

/* Decode hex text into a new buffer (never NULL on success, even for ""). */
static bool hex_decode(const char *hex, char **ret, size_t *ret_len)
{
	size_t n = strlen(hex);
	char *out;

	if (n % 2 != 0)
		return false;
	out = malloc(n / 2 + 1);
	if (out == NULL)
		return false;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = idem_hex_digit(hex[2 * i]), lo = idem_hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			free(out);
			return false;
		}
		out[i] = (char)(hi << 4 | lo);
	}
	*ret = out;
	*ret_len = n / 2;
	return true;
}

static bool read_file(const char *path, char **ret, size_t *ret_len)
{
	size_t len = 0, cap = 65536;
	char *buf, *nbuf;
	FILE *f;

	f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "%s: open '%s' failed: %s\n", prog_cmd, path, strerror(errno));
		return false;
	}
	buf = malloc(cap);
	if (buf == NULL)
		goto out_nomem;
	for (;;) {
		size_t n = fread(buf + len, 1, cap - len, f);

		len += n;
		if (n == 0)
			break;
		if (len == cap) {
			nbuf = realloc(buf, cap * 2);
			if (nbuf == NULL)
				goto out_nomem;
			buf = nbuf;
			cap *= 2;
		}
	}
	if (ferror(f)) {
		fprintf(stderr, "%s: read '%s' failed: %s\n", prog_cmd, path, strerror(errno));
		free(buf);
		fclose(f);
		return false;
	}
	fclose(f);
	*ret = buf;
	*ret_len = len;
	return true;
out_nomem:
	fprintf(stderr, "%s: out of memory reading '%s'\n", prog_cmd, path);
	free(buf);
	fclose(f);
	return false;
}

/* Handle an option every subcommand takes. Returns 1 if handled, 0 if not ours. */
static int common_opt(int c, char *arg, struct kt_common *cm)
{
	switch (c) {
	case OPT_BROKERS:
		cm->brokers = arg;
		return 1;
	case OPT_TOPIC:
		cm->topic = arg;
		return 1;
	case OPT_GROUP:
		cm->group = arg;
		return 1;
	case OPT_LOG_LEVEL:
		cm->log_level = arg;
		return 1;
	case 'X':
		cm->props[cm->nprops++] = arg;
		return 1;
	default:
		return 0;
	}
}

static bool common_check(const struct kt_common *cm, bool need_group)
{
	if (cm->brokers == NULL || cm->topic == NULL || (need_group && cm->group == NULL)) {
		fprintf(stderr, "%s: --brokers, --topic%s are required (see --help)\n", prog_cmd,
		        need_group ? " and --group" : "");
		return false;
	}
	return true;
}

static bool conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
	char errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
		fprintf(stderr, "%s: %s\n", prog_cmd, errstr);
		return false;
	}
	return true;
}

/*
 * Build a configuration: the brokers and log level, @defaults (ended by a NULL name), then
 * every -X property so the user has the last word.
 */
static rd_kafka_conf_t *conf_new(const struct kt_common *cm, const struct kt_prop *defaults)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();

	if (!conf_set(conf, "bootstrap.servers", cm->brokers) ||
	    !conf_set(conf, "log_level", cm->log_level ? cm->log_level : KT_DEFAULT_LOGLV))
		goto out_destroy;
	for (size_t i = 0; defaults[i].name != NULL; i++) {
		if (!conf_set(conf, defaults[i].name, defaults[i].value))
			goto out_destroy;
	}
	for (int i = 0; i < cm->nprops; i++) {
		char name[256];
		const char *eq = strchr(cm->props[i], '=');

		if (eq == NULL || eq == cm->props[i] ||
		    (size_t)(eq - cm->props[i]) >= sizeof(name)) {
			fprintf(stderr, "%s: invalid property '%s', expected NAME=VALUE\n",
			        prog_cmd, cm->props[i]);
			goto out_destroy;
		}
		memcpy(name, cm->props[i], (size_t)(eq - cm->props[i]));
		name[eq - cm->props[i]] = '\0';
		if (!conf_set(conf, name, eq + 1))
			goto out_destroy;
	}
	return conf;
out_destroy:
	rd_kafka_conf_destroy(conf);
	return NULL;
}

static rd_kafka_t *client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf)
{
	char errstr[512];
	rd_kafka_t *rk;

	rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
	if (rk == NULL) {
		fprintf(stderr, "%s: create client failed: %s\n", prog_cmd, errstr);
		rd_kafka_conf_destroy(conf);
	}
	return rk;
}

/* A consumer that joins no group: it only reads and commits offsets for @cm->group. */
static rd_kafka_t *offsets_client_new(const struct kt_common *cm)
{
	static const struct kt_prop defaults[] = {
		{ "enable.auto.commit", "false" },
		{ "enable.auto.offset.store", "false" },
		{ "session.timeout.ms", "6000" },
		{ "auto.offset.reset", "earliest" },
		{ NULL, NULL },
	};
	rd_kafka_conf_t *conf;

	conf = conf_new(cm, defaults);
	if (conf == NULL || !conf_set(conf, "group.id", cm->group)) {
		if (conf != NULL)
			rd_kafka_conf_destroy(conf);
		return NULL;
	}
	return client_new(RD_KAFKA_CONSUMER, conf);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
}

/*
 * Number of partitions of @topic from metadata. Retries while the topic is unknown or has no
 * leader yet (a topic being created), until @timeout_ms. Returns -1 on failure.
 */
static int topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms)
{
	double deadline = now_s() + timeout_ms / 1000.0;
	rd_kafka_resp_err_t last = RD_KAFKA_RESP_ERR_NO_ERROR;
	rd_kafka_topic_t *rkt;
	int cnt = -1;

	rkt = rd_kafka_topic_new(rk, topic, NULL);
	if (rkt == NULL) {
		fprintf(stderr, "%s: topic '%s': %s\n", prog_cmd, topic,
		        rd_kafka_err2str(rd_kafka_last_error()));
		return -1;
	}
	while (cnt < 0) {
		const struct rd_kafka_metadata *md;
		double left = deadline - now_s();

		if (left <= 0) {
			fprintf(stderr, "%s: no metadata for topic '%s': %s\n", prog_cmd, topic,
			        last ? rd_kafka_err2str(last) : "timed out");
			break;
		}
		last = rd_kafka_metadata(rk, 0, rkt, &md, (int)(left * 1000) + 1);
		if (last)
			continue;
		if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
		    md->topics[0].partition_cnt > 0)
			cnt = md->topics[0].partition_cnt;
		else if (md->topic_cnt == 1)
			last = md->topics[0].err;
		rd_kafka_metadata_destroy(md);
		if (cnt < 0)
			sleep_s(0.1);
	}
	rd_kafka_topic_destroy(rkt);
	return cnt;
}

/*
 * Read every partition's committed offset for the client's group and its watermarks.
 * @ret_parts is malloc'ed (caller frees) and written only on success. Returns 0 or -1.
 */
static int offsets_read(rd_kafka_t *rk, const char *topic, struct kt_part **ret_parts, int *ret_cnt)
{
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_resp_err_t err;
	struct kt_part *parts;
	int cnt, rc = -1;

	cnt = topic_partitions(rk, topic, KT_REQUEST_MS);
	if (cnt < 0)
		return -1;
	parts = calloc((size_t)cnt, sizeof(*parts));
	if (parts == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog_cmd);
		return -1;
	}
	list = rd_kafka_topic_partition_list_new(cnt);
	for (int p = 0; p < cnt; p++)
		rd_kafka_topic_partition_list_add(list, topic, p);
	err = rd_kafka_committed(rk, list, KT_REQUEST_MS);
	if (err) {
		fprintf(stderr, "%s: read committed offsets failed: %s\n", prog_cmd,
		        rd_kafka_err2str(err));
		goto out_free;
	}
	for (int i = 0; i < list->cnt; i++) {
		const rd_kafka_topic_partition_t *tp = &list->elems[i];
		struct kt_part *kp = &parts[tp->partition];

		if (tp->err) {
			fprintf(stderr,
			        "%s: read committed offset of partition %" PRId32 " failed: %s\n",
			        prog_cmd, tp->partition, rd_kafka_err2str(tp->err));
			goto out_free;
		}
		kp->partition = tp->partition;
		kp->committed = tp->offset < 0 ? -1 : tp->offset;
	}
	for (int p = 0; p < cnt; p++) {
		err = rd_kafka_query_watermark_offsets(rk, topic, p, &parts[p].low, &parts[p].high,
		                                       KT_REQUEST_MS);
		if (err) {
			fprintf(stderr, "%s: read watermarks of partition %d failed: %s\n",
			        prog_cmd, p, rd_kafka_err2str(err));
			goto out_free;
		}
	}
	*ret_parts = parts;
	*ret_cnt = cnt;
	parts = NULL;
	rc = 0;
out_free:
	rd_kafka_topic_partition_list_destroy(list);
	free(parts);
	return rc;
}

static int64_t part_lag(const struct kt_part *kp)
{
	return kp->high - (kp->committed >= 0 ? kp->committed : kp->low);
}

/* An empty partition needs no commit: a consumer never commits for it. */
static bool part_caught_up(const struct kt_part *kp)
{
	return kp->committed >= 0 ? kp->committed >= kp->high : kp->low == kp->high;
}

static void offsets_print(FILE *f, const struct kt_part *parts, int cnt, bool per_partition)
{
	int64_t committed = 0, high = 0, lag = 0;

	for (int p = 0; p < cnt; p++) {
		const struct kt_part *kp = &parts[p];

		if (per_partition)
			fprintf(f,
			        "partition=%" PRId32 " committed=%" PRId64 " low=%" PRId64
			        " high=%" PRId64 " lag=%" PRId64 "\n",
			        kp->partition, kp->committed, kp->low, kp->high, part_lag(kp));
		committed += kp->committed > 0 ? kp->committed : 0;
		high += kp->high;
		lag += part_lag(kp);
	}
	fprintf(f, "total committed=%" PRId64 " high=%" PRId64 " lag=%" PRId64 "\n", committed,
	        high, lag);
}

static void client_close(rd_kafka_t *rk)
{
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
}

/* ---- offsets ----------------------------------------------------------------------------- */

static int cmd_offsets(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "group", required_argument, NULL, OPT_GROUP },
		{ NULL, 0, NULL, 0 },
	};
	struct kt_part *parts;
	rd_kafka_t *rk;
	int c, cnt, rc;

	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		if (common_opt(c, optarg, cm))
			continue;
		usage_offsets(c == 'h' ? stdout : stderr);
		return c == 'h' ? 0 : 1;
	}
	if (!common_check(cm, true))
		return 1;
	rk = offsets_client_new(cm);
	if (rk == NULL)
		return 1;
	rc = offsets_read(rk, cm->topic, &parts, &cnt) == 0 ? 0 : 1;
	if (rc == 0) {
		offsets_print(stdout, parts, cnt, true);
		free(parts);
	}
	client_close(rk);
	return rc;
}

/* ---- wait-committed ---------------------------------------------------------------------- */

static int cmd_wait_committed(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ NULL, 0, NULL, 0 },
	};
	struct kt_part *parts = NULL;
	double timeout = -1, deadline;
	int c, cnt = 0, rc = 1;
	rd_kafka_t *rk;

	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		if (common_opt(c, optarg, cm))
			continue;
		if (c == OPT_TIMEOUT && parse_double(optarg, 0, 1e9, &timeout))
			continue;
		if (c == OPT_TIMEOUT)
			fprintf(stderr, "%s: invalid --timeout '%s'\n", prog_cmd, optarg);
		else
			usage_wait_committed(c == 'h' ? stdout : stderr);
		return c == 'h' ? 0 : 1;
	}
	if (!common_check(cm, true))
		return 1;
	if (timeout < 0) {
		fprintf(stderr, "%s: --timeout is required\n", prog_cmd);
		return 1;
	}
	rk = offsets_client_new(cm);
	if (rk == NULL)
		return 1;
	deadline = now_s() + timeout;
	for (;;) {
		struct kt_part *now;
		bool done = true;

		/* A failed read (a broker is down) is retried like an unfinished one. */
		if (offsets_read(rk, cm->topic, &now, &cnt) == 0) {
			free(parts);
			parts = now;
			for (int p = 0; p < cnt; p++)
				done = done && part_caught_up(&parts[p]);
			if (done) {
				offsets_print(stdout, parts, cnt, false);
				rc = 0;
				break;
			}
		}
		if (now_s() >= deadline) {
			fprintf(stderr,
			        "%s: group '%s' did not commit topic '%s' to the end in %gs\n",
			        prog_cmd, cm->group, cm->topic, timeout);
			if (parts != NULL)
				offsets_print(stderr, parts, cnt, true);
			break;
		}
		sleep_s(KT_POLL_MS / 1000.0);
	}
	free(parts);
	client_close(rk);
	return rc;
}

/* ---- reset ------------------------------------------------------------------------------- */

/*
 * Commit @list for cm->group as a member of the group. Needed once the group has had members:
 * the embedded Kafka then refuses commits from outside the group (real Kafka accepts them for
 * an empty group). Joins, waits until this member holds all @cnt partitions (so nobody else is
 * in the group), commits, leaves.
 */
static rd_kafka_resp_err_t commit_as_member(const struct kt_common *cm, int cnt,
                                            rd_kafka_topic_partition_list_t *list)
{
	rd_kafka_topic_partition_list_t *sub, *assigned = NULL;
	rd_kafka_resp_err_t err;
	double deadline = now_s() + 30;
	rd_kafka_t *rk;

	rk = offsets_client_new(cm);
	if (rk == NULL)
		return RD_KAFKA_RESP_ERR__FAIL;
	sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, cm->topic, RD_KAFKA_PARTITION_UA);
	err = rd_kafka_subscribe(rk, sub);
	rd_kafka_topic_partition_list_destroy(sub);
	while (!err) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);

		if (rkm != NULL)
			rd_kafka_message_destroy(rkm);
		if (assigned != NULL)
			rd_kafka_topic_partition_list_destroy(assigned);
		assigned = NULL;
		err = rd_kafka_assignment(rk, &assigned);
		if (!err && assigned->cnt == cnt)
			break;
		if (now_s() > deadline)
			err = RD_KAFKA_RESP_ERR__TIMED_OUT;
	}
	if (assigned != NULL)
		rd_kafka_topic_partition_list_destroy(assigned);
	if (!err)
		err = rd_kafka_commit(rk, list, 0);
	for (int i = 0; !err && i < list->cnt; i++)
		err = list->elems[i].err;
	client_close(rk);
	return err;
}

static int cmd_reset(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "to-beginning", no_argument, NULL, OPT_TO_BEGINNING },
		{ "to-offset", required_argument, NULL, OPT_TO_OFFSET },
		{ "partition", required_argument, NULL, OPT_PARTITION },
		{ NULL, 0, NULL, 0 },
	};
	rd_kafka_topic_partition_list_t *list, *before, *check;
	rd_kafka_resp_err_t err;
	int64_t to_offset = -1, partition = -1;
	bool to_beginning = false;
	int c, cnt, rc = 1;
	rd_kafka_t *rk;

	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		if (common_opt(c, optarg, cm))
			continue;
		switch (c) {
		case OPT_TO_BEGINNING:
			to_beginning = true;
			continue;
		case OPT_TO_OFFSET:
			if (parse_i64(optarg, 0, INT64_MAX, &to_offset))
				continue;
			fprintf(stderr, "%s: invalid --to-offset '%s'\n", prog_cmd, optarg);
			return 1;
		case OPT_PARTITION:
			if (parse_i64(optarg, 0, INT32_MAX, &partition))
				continue;
			fprintf(stderr, "%s: invalid --partition '%s'\n", prog_cmd, optarg);
			return 1;
		default:
			usage_reset(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
	}
	if (!common_check(cm, true))
		return 1;
	if (to_beginning == (to_offset >= 0)) {
		fprintf(stderr, "%s: give exactly one of --to-beginning and --to-offset\n",
		        prog_cmd);
		return 1;
	}
	rk = offsets_client_new(cm);
	if (rk == NULL)
		return 1;
	cnt = topic_partitions(rk, cm->topic, KT_REQUEST_MS);
	if (cnt < 0)
		goto out_close;
	if (partition >= cnt) {
		fprintf(stderr, "%s: topic '%s' has no partition %" PRId64 "\n", prog_cmd,
		        cm->topic, partition);
		goto out_close;
	}
	list = rd_kafka_topic_partition_list_new(cnt);
	for (int p = 0; p < cnt; p++) {
		int64_t low = 0, high;

		if (partition >= 0 && p != partition)
			continue;
		if (to_beginning) {
			err = rd_kafka_query_watermark_offsets(rk, cm->topic, p, &low, &high,
			                                       KT_REQUEST_MS);
			if (err) {
				fprintf(stderr, "%s: read watermarks of partition %d failed: %s\n",
				        prog_cmd, p, rd_kafka_err2str(err));
				goto out_destroy_list;
			}
		}
		rd_kafka_topic_partition_list_add(list, cm->topic, p)->offset =
		        to_beginning ? low : to_offset;
	}
	/*
	 * Read the current offsets first. Besides reporting them, this waits until the group
	 * coordinator is connected: a commit issued before that is deferred by a whole second.
	 */
	before = rd_kafka_topic_partition_list_copy(list);
	err = rd_kafka_committed(rk, before, KT_REQUEST_MS);
	if (err) {
		fprintf(stderr, "%s: read committed offsets failed: %s\n", prog_cmd,
		        rd_kafka_err2str(err));
		goto out_destroy_before;
	}
	/* Assigned but never polled: commit() names the offsets explicitly. */
	err = rd_kafka_assign(rk, list);
	if (err) {
		fprintf(stderr, "%s: assign failed: %s\n", prog_cmd, rd_kafka_err2str(err));
		goto out_destroy_before;
	}
	err = rd_kafka_commit(rk, list, 0);
	for (int i = 0; !err && i < list->cnt; i++)
		err = list->elems[i].err;
	if (err == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID) {
		for (int i = 0; i < list->cnt; i++)
			list->elems[i].err = RD_KAFKA_RESP_ERR_NO_ERROR;
		err = commit_as_member(cm, cnt, list);
	}
	if (err) {
		fprintf(stderr,
		        "%s: commit for group '%s' failed: %s (is the group still active?)\n",
		        prog_cmd, cm->group, rd_kafka_err2str(err));
		goto out_unassign;
	}
	check = rd_kafka_topic_partition_list_copy(list);
	err = rd_kafka_committed(rk, check, KT_REQUEST_MS);
	if (err) {
		fprintf(stderr, "%s: read back committed offsets failed: %s\n", prog_cmd,
		        rd_kafka_err2str(err));
		goto out_destroy_check;
	}
	for (int i = 0; i < check->cnt; i++) {
		const rd_kafka_topic_partition_t *tp = &check->elems[i];

		if (tp->err || tp->offset != list->elems[i].offset) {
			fprintf(stderr,
			        "%s: partition %" PRId32 " committed %" PRId64
			        " instead of %" PRId64 "%s%s\n",
			        prog_cmd, tp->partition, tp->offset, list->elems[i].offset,
			        tp->err ? ": " : "", tp->err ? rd_kafka_err2str(tp->err) : "");
			goto out_destroy_check;
		}
		printf("partition=%" PRId32 " committed=%" PRId64 " previous=%" PRId64 "\n",
		       tp->partition, tp->offset,
		       before->elems[i].offset < 0 ? -1 : before->elems[i].offset);
	}
	rc = 0;
out_destroy_check:
	rd_kafka_topic_partition_list_destroy(check);
out_unassign:
	rd_kafka_assign(rk, NULL);
out_destroy_before:
	rd_kafka_topic_partition_list_destroy(before);
out_destroy_list:
	rd_kafka_topic_partition_list_destroy(list);
out_close:
	client_close(rk);
	return rc;
}

/* ---- consume ----------------------------------------------------------------------------- */

/* Print bytes so one message stays on one line: \xNN for controls, non-ASCII and @extra. */
static void print_escaped(const void *p, size_t len, const char *extra)
{
	const unsigned char *b = p;

	if (p == NULL) {
		fputs("\\N", stdout);
		return;
	}
	for (size_t i = 0; i < len; i++) {
		if (b[i] < 0x20 || b[i] >= 0x7f || b[i] == '\\' || strchr(extra, b[i]) != NULL)
			printf("\\x%02x", b[i]);
		else
			putchar(b[i]);
	}
}

static void print_message(const rd_kafka_message_t *rkm)
{
	rd_kafka_headers_t *hdrs;

	printf("%" PRId32 "\t%" PRId64 "\t", rkm->partition, rkm->offset);
	print_escaped(rkm->key, rkm->key_len, "");
	putchar('\t');
	print_escaped(rkm->payload, rkm->len, "");
	putchar('\t');
	if (rd_kafka_message_headers(rkm, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
		const char *name;
		const void *value;
		size_t size;

		for (size_t i = 0; !rd_kafka_header_get_all(hdrs, i, &name, &value, &size); i++) {
			if (i > 0)
				putchar(',');
			print_escaped(name, strlen(name), ",=");
			putchar('=');
			print_escaped(value, size, ",=");
		}
	}
	putchar('\n');
}

static int cmd_consume(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "partition", required_argument, NULL, OPT_PARTITION },
		{ "max", required_argument, NULL, OPT_COUNT },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ NULL, 0, NULL, 0 },
	};
	static const struct kt_prop defaults[] = {
		{ "group.id", "idem-kafkatool-consume" },
		{ "enable.auto.commit", "false" },
		{ "enable.auto.offset.store", "false" },
		{ "fetch.wait.max.ms", "10" },
		{ "queued.min.messages", "1000000" },
		{ "session.timeout.ms", "6000" },
		{ NULL, NULL },
	};
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_resp_err_t err;
	rd_kafka_conf_t *conf;
	int64_t partition = -1, max = INT64_MAX, printed = 0;
	int64_t *end;
	double timeout = 30, deadline;
	int c, cnt, remaining = 0, rc = 1;
	rd_kafka_t *rk;

	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		bool ok = true;

		if (common_opt(c, optarg, cm))
			continue;
		switch (c) {
		case OPT_PARTITION:
			ok = parse_i64(optarg, 0, INT32_MAX, &partition);
			break;
		case OPT_COUNT:
			ok = parse_i64(optarg, 0, INT64_MAX, &max);
			break;
		case OPT_TIMEOUT:
			ok = parse_double(optarg, 0, 1e9, &timeout);
			break;
		default:
			usage_consume(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
		if (!ok) {
			fprintf(stderr, "%s: invalid value '%s' (see --help)\n", prog_cmd, optarg);
			return 1;
		}
	}
	if (!common_check(cm, false))
		return 1;
	conf = conf_new(cm, defaults);
	if (conf == NULL)
		return 1;
	rk = client_new(RD_KAFKA_CONSUMER, conf);
	if (rk == NULL)
		return 1;
	cnt = topic_partitions(rk, cm->topic, KT_REQUEST_MS);
	if (cnt < 0)
		goto out_close;
	if (partition >= cnt) {
		fprintf(stderr, "%s: topic '%s' has no partition %" PRId64 "\n", prog_cmd,
		        cm->topic, partition);
		goto out_close;
	}
	end = calloc((size_t)cnt, sizeof(*end));
	if (end == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog_cmd);
		goto out_close;
	}
	/* Read what the partitions held when we started: from the low to the high watermark. */
	list = rd_kafka_topic_partition_list_new(cnt);
	for (int p = 0; p < cnt; p++) {
		int64_t low;

		if (partition >= 0 && p != partition)
			continue;
		err = rd_kafka_query_watermark_offsets(rk, cm->topic, p, &low, &end[p],
		                                       KT_REQUEST_MS);
		if (err) {
			fprintf(stderr, "%s: read watermarks of partition %d failed: %s\n",
			        prog_cmd, p, rd_kafka_err2str(err));
			goto out_destroy_list;
		}
		if (low < end[p]) {
			rd_kafka_topic_partition_list_add(list, cm->topic, p)->offset = low;
			remaining++;
		}
	}
	err = rd_kafka_assign(rk, list);
	if (err) {
		fprintf(stderr, "%s: assign failed: %s\n", prog_cmd, rd_kafka_err2str(err));
		goto out_destroy_list;
	}
	deadline = now_s() + timeout;
	while (remaining > 0 && printed < max) {
		rd_kafka_message_t *rkm;

		if (now_s() >= deadline) {
			fprintf(stderr, "%s: timed out after %" PRId64 " message(s)\n", prog_cmd,
			        printed);
			goto out_unassign;
		}
		rkm = rd_kafka_consumer_poll(rk, 100);
		if (rkm == NULL)
			continue;
		if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			rd_kafka_message_destroy(rkm);
			continue;
		}
		if (rkm->err) {
			fprintf(stderr, "%s: consume failed: %s\n", prog_cmd,
			        rd_kafka_message_errstr(rkm));
			rd_kafka_message_destroy(rkm);
			goto out_unassign;
		}
		if (rkm->offset < end[rkm->partition]) {
			print_message(rkm);
			printed++;
			if (rkm->offset + 1 == end[rkm->partition])
				remaining--;
		}
		rd_kafka_message_destroy(rkm);
	}
	rc = 0;
out_unassign:
	rd_kafka_assign(rk, NULL);
out_destroy_list:
	rd_kafka_topic_partition_list_destroy(list);
	free(end);
out_close:
	client_close(rk);
	return rc;
}

/* ---- cluster-id -------------------------------------------------------------------------- */

static int cmd_cluster_id(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ NULL, 0, NULL, 0 },
	};
	static const struct kt_prop defaults[] = {
		{ NULL, NULL },
	};
	double timeout = KT_REQUEST_MS / 1000.0;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	char *id;
	int c, rc = 1;

	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		if (common_opt(c, optarg, cm))
			continue;
		if (c == OPT_TIMEOUT && parse_double(optarg, 0, 1e6, &timeout))
			continue;
		if (c == OPT_TIMEOUT)
			fprintf(stderr, "%s: invalid --timeout '%s'\n", prog_cmd, optarg);
		else
			usage_cluster_id(c == 'h' ? stdout : stderr);
		return c == 'h' ? 0 : 1;
	}
	if (cm->brokers == NULL) {
		fprintf(stderr, "%s: --brokers is required (see --help)\n", prog_cmd);
		return 1;
	}
	/* A producer that sends nothing: the id comes with the metadata. */
	conf = conf_new(cm, defaults);
	if (conf == NULL)
		return 1;
	rk = client_new(RD_KAFKA_PRODUCER, conf);
	if (rk == NULL)
		return 1;
	id = rd_kafka_clusterid(rk, (int)(timeout * 1000));
	if (id != NULL && id[0] != '\0') {
		printf("%s\n", id);
		rc = 0;
	} else {
		fprintf(stderr, "%s: no cluster id from '%s' within %gs\n", prog_cmd, cm->brokers,
		        timeout);
	}
	if (id != NULL)
		rd_kafka_mem_free(rk, id);
	rd_kafka_destroy(rk);
	return rc;
}

/* ---- producing --------------------------------------------------------------------------- */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
	struct kt_delivery *dv = opaque;

	(void)rk;
	if (rkm->err) {
		if (dv->failed++ == 0)
			snprintf(dv->first_error, sizeof(dv->first_error), "%s",
			         rd_kafka_err2str(rkm->err));
		return;
	}
	dv->delivered++;
	dv->partition = rkm->partition;
	dv->offset = rkm->offset;
}

static rd_kafka_t *producer_new(const struct kt_common *cm, struct kt_delivery *dv,
                                const struct kt_prop *defaults)
{
	rd_kafka_conf_t *conf;

	conf = conf_new(cm, defaults);
	if (conf == NULL)
		return NULL;
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_opaque(conf, dv);
	return client_new(RD_KAFKA_PRODUCER, conf);
}

/*
 * Wait for every outstanding delivery report. Each message gets one at the latest after
 * message.timeout.ms, so this ends. Returns 0 if everything was delivered.
 */
static int producer_finish(rd_kafka_t *rk, const struct kt_delivery *dv)
{
	char errstr[512];
	rd_kafka_resp_err_t err;

	while (rd_kafka_outq_len(rk) > 0)
		rd_kafka_flush(rk, 1000);
	err = rd_kafka_fatal_error(rk, errstr, sizeof(errstr));
	if (err) {
		fprintf(stderr, "%s: producer failed: %s\n", prog_cmd, errstr);
		return -1;
	}
	if (dv->failed > 0) {
		fprintf(stderr, "%s: %" PRIu64 " message(s) not delivered, first error: %s\n",
		        prog_cmd, dv->failed, dv->first_error);
		return -1;
	}
	return 0;
}

/* splitmix64: small, fast, and the same sequence on every platform. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static double rng_unit(uint64_t *state)
{
	return (double)(rng_next(state) >> 11) * 0x1.0p-53;
}

static uint64_t rng_below(uint64_t *state, uint64_t n)
{
	return rng_next(state) % n;
}

static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s != '\0'; s++) {
		h ^= (uint8_t)*s;
		h *= 16777619u;
	}
	return h;
}

struct kt_payment {
	uint32_t account;
	uint32_t amount;
	int32_t partition;
};

enum kt_dup_kind { KT_DUP_IMMEDIATE, KT_DUP_FAR, KT_DUP_CROSS, KT_DUP_KINDS };

struct kt_produce_opts {
	int64_t count;
	double dup_ratio;
	int64_t accounts;
	int64_t seed;
	const char *manifest;
	char *tenant;
	double rate;
};

/* Set by SIGTERM or SIGINT: the stream ends after the message being written. */
static volatile sig_atomic_t produce_stop;

static void on_stop_signal(int sig)
{
	(void)sig;
	produce_stop = 1;
}

/*
 * Queue the payment stream (see usage_produce) and write the manifest. Delivery is not yet
 * confirmed on return. @ret_produced (fewer than the count if told to stop), @ret_unique and
 * @ret_dups (KT_DUP_KINDS counters) are written on success. Returns 0 or -1.
 */
static int produce_stream(rd_kafka_t *rk, const struct kt_common *cm,
                          const struct kt_produce_opts *po, int nparts, int64_t *ret_produced,
                          uint64_t *ret_unique, uint64_t *ret_dups)
{
	static char source[] = "idemd-demo";
	uint64_t dups[KT_DUP_KINDS] = { 0 };
	struct kt_payment *pay;
	uint64_t unique = 0, rng = (uint64_t)po->seed;
	double start = now_s();
	FILE *manifest = NULL;
	int64_t i;
	int rc = -1;

	pay = malloc((size_t)(po->count > 0 ? po->count : 1) * sizeof(*pay));
	if (pay == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog_cmd);
		return -1;
	}
	if (po->manifest != NULL) {
		manifest = fopen(po->manifest, "w");
		if (manifest == NULL) {
			fprintf(stderr, "%s: open '%s' failed: %s\n", prog_cmd, po->manifest,
			        strerror(errno));
			goto out_free;
		}
	}
	for (i = 0; i < po->count && !produce_stop; i++) {
		char id[64], acct[32], value[256];
		uint64_t idx;
		int32_t partition;
		rd_kafka_resp_err_t err;

		if (unique > 0 && rng_unit(&rng) < po->dup_ratio) {
			/* A re-send of an earlier payment: an upstream retry. */
			double kind = rng_unit(&rng);
			uint64_t gap = (uint64_t)KT_FAR_GAP * (uint64_t)nparts;

			if (kind < 0.4) {
				idx = unique - 1;
				partition = pay[idx].partition;
				dups[KT_DUP_IMMEDIATE]++;
			} else if (kind < 0.8 || nparts == 1) {
				idx = rng_below(&rng, unique > gap ? unique - gap : unique);
				partition = pay[idx].partition;
				dups[KT_DUP_FAR]++;
			} else {
				idx = rng_below(&rng, unique);
				partition =
				        (int32_t)((pay[idx].partition + 1 +
				                   (int32_t)rng_below(&rng, (uint64_t)nparts - 1)) %
				                  nparts);
				dups[KT_DUP_CROSS]++;
			}
			snprintf(id, sizeof(id), "pay-%" PRId64 "-%" PRIu64, po->seed, idx);
		} else {
			idx = unique++;
			snprintf(id, sizeof(id), "pay-%" PRId64 "-%" PRIu64, po->seed, idx);
			pay[idx].account = 1 + (uint32_t)rng_below(&rng, (uint64_t)po->accounts);
			pay[idx].amount = 1 + (uint32_t)rng_below(&rng, 10000);
			/* Keyed by account, as payment topics are: one account's payments stay in
			 * order on one partition, and partitions committed in parallel do not
			 * contend for the same balance rows. */
			snprintf(acct, sizeof(acct), "acct-%" PRIu32, pay[idx].account);
			pay[idx].partition = (int32_t)(fnv1a(acct) % (uint32_t)nparts);
			partition = pay[idx].partition;
			if (manifest != NULL)
				fprintf(manifest, "%s,acct-%" PRIu32 ",%" PRIu32 "\n", id,
				        pay[idx].account, pay[idx].amount);
		}
		snprintf(value, sizeof(value),
		         "{\"payment_id\":\"%s\",\"account\":\"acct-%" PRIu32
		         "\",\"amount\":%" PRIu32 ",\"currency\":\"EUR\",\"ts\":%" PRId64 "}",
		         id, pay[idx].account, pay[idx].amount, KT_TS_BASE + (int64_t)idx * 1000);

		if (po->rate > 0) {
			double due = start + (double)i / po->rate;

			while (now_s() < due && !produce_stop) {
				rd_kafka_poll(rk, 0);
				sleep_s(due - now_s() < 0.01 ? due - now_s() : 0.01);
			}
		}
		for (;;) {
			err = rd_kafka_producev(
			        rk, RD_KAFKA_V_TOPIC(cm->topic), RD_KAFKA_V_PARTITION(partition),
			        RD_KAFKA_V_KEY(id, strlen(id)),
			        RD_KAFKA_V_VALUE(value, strlen(value)),
			        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
			        RD_KAFKA_V_HEADER("tenant", po->tenant, -1),
			        RD_KAFKA_V_HEADER("source", source, -1), RD_KAFKA_V_END);
			if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
				break;
			rd_kafka_poll(rk, 100);
		}
		if (err) {
			fprintf(stderr, "%s: produce to '%s' [%" PRId32 "] failed: %s\n", prog_cmd,
			        cm->topic, partition, rd_kafka_err2str(err));
			goto out_close_manifest;
		}
		if (i % 1024 == 0)
			rd_kafka_poll(rk, 0);
	}
	if (manifest != NULL) {
		FILE *f = manifest;

		manifest = NULL;
		if (fclose(f) != 0) {
			fprintf(stderr, "%s: write '%s' failed: %s\n", prog_cmd, po->manifest,
			        strerror(errno));
			goto out_free;
		}
	}
	*ret_produced = i;
	*ret_unique = unique;
	memcpy(ret_dups, dups, sizeof(dups));
	rc = 0;
out_close_manifest:
	if (manifest != NULL)
		fclose(manifest);
out_free:
	free(pay);
	return rc;
}

static int cmd_produce(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "dup-ratio", required_argument, NULL, OPT_DUP_RATIO },
		{ "accounts", required_argument, NULL, OPT_ACCOUNTS },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "manifest", required_argument, NULL, OPT_MANIFEST },
		{ "tenant", required_argument, NULL, OPT_TENANT },
		{ "rate", required_argument, NULL, OPT_RATE },
		{ NULL, 0, NULL, 0 },
	};
	static const struct kt_prop defaults[] = {
		{ "acks", "all" },
		{ "enable.idempotence", "true" },
		{ "linger.ms", "5" },
		/* The mock stores batches compressed, which stretches its 5 MiB retention. */
		{ "compression.codec", "lz4" },
		{ "queue.buffering.max.messages", "2000000" },
		{ "queue.buffering.max.kbytes", "2097152" },
		{ NULL, NULL },
	};
	static char default_tenant[] = "t1";
	struct kt_produce_opts po = {
		.count = -1, .accounts = 50, .seed = 1, .tenant = default_tenant
	};
	struct kt_delivery dv = { 0 };
	uint64_t unique, dups[KT_DUP_KINDS];
	int64_t produced = 0;
	rd_kafka_t *rk;
	int c, nparts, rc = 1;

	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		bool ok = true;

		if (common_opt(c, optarg, cm))
			continue;
		switch (c) {
		case OPT_COUNT:
			ok = parse_i64(optarg, 0, INT32_MAX, &po.count);
			break;
		case OPT_DUP_RATIO:
			ok = parse_double(optarg, 0, 1, &po.dup_ratio);
			break;
		case OPT_ACCOUNTS:
			ok = parse_i64(optarg, 1, UINT32_MAX - 1, &po.accounts);
			break;
		case OPT_SEED:
			ok = parse_i64(optarg, 0, INT64_MAX, &po.seed);
			break;
		case OPT_MANIFEST:
			po.manifest = optarg;
			break;
		case OPT_TENANT:
			po.tenant = optarg;
			break;
		case OPT_RATE:
			ok = parse_double(optarg, 1e-3, 1e9, &po.rate);
			break;
		default:
			usage_produce(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
		if (!ok) {
			fprintf(stderr, "%s: invalid value '%s' (see --help)\n", prog_cmd, optarg);
			return 1;
		}
	}
	if (!common_check(cm, false))
		return 1;
	if (po.count < 0) {
		fprintf(stderr, "%s: --count is required\n", prog_cmd);
		return 1;
	}
	rk = producer_new(cm, &dv, defaults);
	if (rk == NULL)
		return 1;
	nparts = topic_partitions(rk, cm->topic, KT_REQUEST_MS);
	signal(SIGTERM, on_stop_signal);
	signal(SIGINT, on_stop_signal);
	if (nparts > 0 && produce_stream(rk, cm, &po, nparts, &produced, &unique, dups) == 0) {
		if (producer_finish(rk, &dv) == 0) {
			fprintf(stderr,
			        "%s: duplicates: immediate=%" PRIu64 " far=%" PRIu64
			        " cross_partition=%" PRIu64 "\n",
			        prog_cmd, dups[KT_DUP_IMMEDIATE], dups[KT_DUP_FAR],
			        dups[KT_DUP_CROSS]);
			printf("produced=%" PRId64 " unique=%" PRIu64 " duplicates=%" PRIu64 "\n",
			       produced, unique, (uint64_t)produced - unique);
			rc = 0;
		}
	} else {
		/* Do not wait for the rest: nothing more will be reported as success. */
		rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_flush(rk, 1000);
	}
	rd_kafka_destroy(rk);
	return rc;
}

/* Split "NAME=VALUE" (VALUE hex-encoded if @hex) into a header. */
static bool header_add(rd_kafka_headers_t *hdrs, const char *spec, bool hex)
{
	const char *eq = strchr(spec, '=');
	size_t name_len = eq != NULL ? (size_t)(eq - spec) : strlen(spec);
	rd_kafka_resp_err_t err;
	char *value = NULL;
	size_t value_len = 0;

	if (name_len == 0) {
		fprintf(stderr, "%s: invalid header '%s', expected NAME=VALUE\n", prog_cmd, spec);
		return false;
	}
	if (eq != NULL && hex && !hex_decode(eq + 1, &value, &value_len)) {
		fprintf(stderr, "%s: invalid hex in header '%s'\n", prog_cmd, spec);
		return false;
	}
	if (eq != NULL && !hex) {
		err = rd_kafka_header_add(hdrs, spec, (ssize_t)name_len, eq + 1, -1);
	} else {
		err = rd_kafka_header_add(hdrs, spec, (ssize_t)name_len, value, (ssize_t)value_len);
	}
	free(value);
	if (err) {
		fprintf(stderr, "%s: add header '%s' failed: %s\n", prog_cmd, spec,
		        rd_kafka_err2str(err));
		return false;
	}
	return true;
}

static int cmd_produce_one(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "partition", required_argument, NULL, OPT_PARTITION },
		{ "key", required_argument, NULL, OPT_KEY },
		{ "key-hex", required_argument, NULL, OPT_KEY_HEX },
		{ "no-key", no_argument, NULL, OPT_NO_KEY },
		{ "value", required_argument, NULL, OPT_VALUE },
		{ "value-hex", required_argument, NULL, OPT_VALUE_HEX },
		{ "value-file", required_argument, NULL, OPT_VALUE_FILE },
		{ "no-value", no_argument, NULL, OPT_NO_VALUE },
		{ "header", required_argument, NULL, OPT_HEADER },
		{ "header-hex", required_argument, NULL, OPT_HEADER_HEX },
		{ NULL, 0, NULL, 0 },
	};
	static const struct kt_prop defaults[] = {
		{ "acks", "all" },
		{ "enable.idempotence", "true" },
		/* Room for oversized values: the corpus has 1 MiB messages. */
		{ "message.max.bytes", "16777216" },
		{ NULL, NULL },
	};
	struct kt_delivery dv = { .partition = -1, .offset = -1 };
	rd_kafka_headers_t *hdrs;
	rd_kafka_resp_err_t err;
	int64_t partition = RD_KAFKA_PARTITION_UA;
	char *key = NULL, *value = NULL;
	size_t key_len = 0, value_len = 0;
	int c, nkey = 0, nvalue = 0, rc = 1;
	rd_kafka_t *rk;

	hdrs = rd_kafka_headers_new(8);
	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		bool ok = true;

		if (common_opt(c, optarg, cm))
			continue;
		switch (c) {
		case OPT_PARTITION:
			ok = parse_i64(optarg, 0, INT32_MAX, &partition);
			break;
		case OPT_KEY:
		case OPT_KEY_HEX:
		case OPT_NO_KEY:
			free(key);
			key = NULL;
			key_len = 0;
			nkey++;
			if (c == OPT_KEY) {
				key_len = strlen(optarg);
				key = malloc(key_len + 1);
				ok = key != NULL;
				if (ok)
					memcpy(key, optarg, key_len + 1);
			} else if (c == OPT_KEY_HEX) {
				ok = hex_decode(optarg, &key, &key_len);
			}
			break;
		case OPT_VALUE:
		case OPT_VALUE_HEX:
		case OPT_VALUE_FILE:
		case OPT_NO_VALUE:
			free(value);
			value = NULL;
			value_len = 0;
			nvalue++;
			if (c == OPT_VALUE) {
				value_len = strlen(optarg);
				value = malloc(value_len + 1);
				ok = value != NULL;
				if (ok)
					memcpy(value, optarg, value_len + 1);
			} else if (c == OPT_VALUE_HEX) {
				ok = hex_decode(optarg, &value, &value_len);
			} else if (c == OPT_VALUE_FILE && !read_file(optarg, &value, &value_len)) {
				goto out_free;
			}
			break;
		case OPT_HEADER:
		case OPT_HEADER_HEX:
			if (!header_add(hdrs, optarg, c == OPT_HEADER_HEX))
				goto out_free;
			break;
		default:
			usage_produce_one(c == 'h' ? stdout : stderr);
			rc = c == 'h' ? 0 : 1;
			goto out_free;
		}
		if (!ok) {
			fprintf(stderr, "%s: invalid value '%s' (see --help)\n", prog_cmd, optarg);
			goto out_free;
		}
	}
	if (!common_check(cm, false))
		goto out_free;
	if (nkey > 1 || nvalue > 1) {
		fprintf(stderr, "%s: give at most one key option and one value option\n", prog_cmd);
		goto out_free;
	}
	rk = producer_new(cm, &dv, defaults);
	if (rk == NULL)
		goto out_free;
	err = rd_kafka_producev(
	        rk, RD_KAFKA_V_TOPIC(cm->topic), RD_KAFKA_V_PARTITION((int32_t)partition),
	        RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE(value, value_len),
	        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
	if (err) {
		fprintf(stderr, "%s: produce to '%s' failed: %s\n", prog_cmd, cm->topic,
		        rd_kafka_err2str(err));
		rd_kafka_destroy(rk);
		goto out_free;
	}
	hdrs = NULL; /* the message owns them now */
	if (producer_finish(rk, &dv) == 0) {
		printf("partition=%" PRId32 " offset=%" PRId64 "\n", dv.partition, dv.offset);
		rc = 0;
	}
	rd_kafka_destroy(rk);
out_free:
	if (hdrs != NULL)
		rd_kafka_headers_destroy(hdrs);
	free(key);
	free(value);
	return rc;
}

/* ---- produce-file ------------------------------------------------------------------------ */

/*
 * Decode the field @s of a produce-file line in place: "-" is none (*ret = NULL), anything else
 * hex ("" is empty, *ret = @s). Returns false on invalid hex.
 */
static bool hex_field(char *s, char **ret, size_t *ret_len)
{
	size_t n = strlen(s);

	if (strcmp(s, "-") == 0) {
		*ret = NULL;
		*ret_len = 0;
		return true;
	}
	if (n % 2 != 0)
		return false;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = idem_hex_digit(s[2 * i]), lo = idem_hex_digit(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		s[i] = (char)(hi << 4 | lo);
	}
	*ret = s;
	*ret_len = n / 2;
	return true;
}

struct kt_file_opts {
	const char *input;
	int64_t partition; /* -1: none given */
	double rate;
};

/*
 * Queue every line of @in (named @path in messages) for delivery, in order; see
 * usage_produce_file. Delivery is not yet confirmed on return. @ret_count is written on
 * success. Returns 0 or -1.
 */
static int produce_lines(rd_kafka_t *rk, const struct kt_common *cm, const struct kt_file_opts *fo,
                         FILE *in, int nparts, int64_t *ret_count)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int64_t lineno = 0, n = 0, rr = 0;
	double start = now_s();
	int rc = -1;

	while ((len = getline(&line, &cap, in)) != -1) {
		char *field[3], *p, *key, *value;
		size_t key_len, value_len;
		int64_t partition = fo->partition;
		int nfields = 1;
		rd_kafka_resp_err_t err;

		lineno++;
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len == 0)
			continue;
		field[0] = line;
		for (p = strchr(line, '\t'); p != NULL; p = strchr(p, '\t')) {
			*p++ = '\0';
			if (nfields == 3) {
				nfields++;
				break;
			}
			field[nfields++] = p;
		}
		if (nfields < 2 || nfields > 3) {
			fprintf(stderr,
			        "%s: %s:%" PRId64 ": expected KEY<TAB>VALUE[<TAB>PARTITION]\n",
			        prog_cmd, fo->input, lineno);
			goto out_free;
		}
		if (!hex_field(field[0], &key, &key_len) ||
		    !hex_field(field[1], &value, &value_len)) {
			fprintf(stderr, "%s: %s:%" PRId64 ": invalid hex in the key or value\n",
			        prog_cmd, fo->input, lineno);
			goto out_free;
		}
		if (nfields == 3 && !parse_i64(field[2], 0, INT32_MAX, &partition)) {
			fprintf(stderr, "%s: %s:%" PRId64 ": invalid partition '%s'\n", prog_cmd,
			        fo->input, lineno, field[2]);
			goto out_free;
		}
		if (partition >= nparts) {
			fprintf(stderr,
			        "%s: %s:%" PRId64 ": topic '%s' has no partition %" PRId64 "\n",
			        prog_cmd, fo->input, lineno, cm->topic, partition);
			goto out_free;
		}
		if (partition < 0)
			partition = key != NULL ? RD_KAFKA_PARTITION_UA : rr++ % nparts;

		if (fo->rate > 0) {
			double due = start + (double)n / fo->rate;

			while (now_s() < due) {
				rd_kafka_poll(rk, 0);
				sleep_s(due - now_s() < 0.01 ? due - now_s() : 0.01);
			}
		}
		for (;;) {
			err = rd_kafka_producev(
			        rk, RD_KAFKA_V_TOPIC(cm->topic),
			        RD_KAFKA_V_PARTITION((int32_t)partition),
			        RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE(value, value_len),
			        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
			if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
				break;
			rd_kafka_poll(rk, 100);
		}
		if (err) {
			fprintf(stderr, "%s: %s:%" PRId64 ": produce to '%s' failed: %s\n",
			        prog_cmd, fo->input, lineno, cm->topic, rd_kafka_err2str(err));
			goto out_free;
		}
		if (++n % 1024 == 0)
			rd_kafka_poll(rk, 0);
	}
	if (ferror(in)) {
		fprintf(stderr, "%s: read '%s' failed: %s\n", prog_cmd, fo->input, strerror(errno));
		goto out_free;
	}
	*ret_count = n;
	rc = 0;
out_free:
	free(line);
	return rc;
}

static int cmd_produce_file(int argc, char **argv, struct kt_common *cm)
{
	static const struct option opts[] = {
		KT_COMMON_OPTS,
		{ "input", required_argument, NULL, OPT_INPUT },
		{ "partition", required_argument, NULL, OPT_PARTITION },
		{ "rate", required_argument, NULL, OPT_RATE },
		{ NULL, 0, NULL, 0 },
	};
	static const struct kt_prop defaults[] = {
		{ "acks", "all" },
		{ "enable.idempotence", "true" },
		{ "linger.ms", "5" },
		{ "compression.codec", "lz4" },
		{ "queue.buffering.max.messages", "2000000" },
		{ "queue.buffering.max.kbytes", "2097152" },
		{ "message.max.bytes", "16777216" },
		/* CRC32 of the key like the default (consistent_random), but an empty key too
		 * always lands on the same partition. */
		{ "partitioner", "consistent" },
		{ NULL, NULL },
	};
	struct kt_file_opts fo = { .partition = -1 };
	struct kt_delivery dv = { 0 };
	int64_t count = 0;
	rd_kafka_t *rk;
	FILE *in;
	int c, nparts, rc = 1;

	while ((c = getopt_long(argc, argv, "hX:", opts, NULL)) != -1) {
		bool ok = true;

		if (common_opt(c, optarg, cm))
			continue;
		switch (c) {
		case OPT_INPUT:
			fo.input = optarg;
			break;
		case OPT_PARTITION:
			ok = parse_i64(optarg, 0, INT32_MAX, &fo.partition);
			break;
		case OPT_RATE:
			ok = parse_double(optarg, 1e-3, 1e9, &fo.rate);
			break;
		default:
			usage_produce_file(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
		if (!ok) {
			fprintf(stderr, "%s: invalid value '%s' (see --help)\n", prog_cmd, optarg);
			return 1;
		}
	}
	if (!common_check(cm, false))
		return 1;
	if (fo.input == NULL) {
		fprintf(stderr, "%s: --input is required\n", prog_cmd);
		return 1;
	}
	in = strcmp(fo.input, "-") == 0 ? stdin : fopen(fo.input, "r");
	if (in == NULL) {
		fprintf(stderr, "%s: open '%s' failed: %s\n", prog_cmd, fo.input, strerror(errno));
		return 1;
	}
	rk = producer_new(cm, &dv, defaults);
	if (rk == NULL)
		goto out_close;
	nparts = topic_partitions(rk, cm->topic, KT_REQUEST_MS);
	if (nparts > 0 && fo.partition >= nparts) {
		fprintf(stderr, "%s: topic '%s' has no partition %" PRId64 "\n", prog_cmd,
		        cm->topic, fo.partition);
		nparts = -1;
	}
	if (nparts > 0 && produce_lines(rk, cm, &fo, in, nparts, &count) == 0) {
		if (producer_finish(rk, &dv) == 0) {
			printf("produced=%" PRId64 "\n", count);
			rc = 0;
		}
	} else {
		/* Do not wait for the rest: nothing more will be reported as success. */
		rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_flush(rk, 1000);
	}
	rd_kafka_destroy(rk);
out_close:
	if (in != stdin)
		fclose(in);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(int argc, char **argv, struct kt_common *cm);
	} cmds[] = {
		{ "produce", cmd_produce },
		{ "produce-one", cmd_produce_one },
		{ "produce-file", cmd_produce_file },
		{ "offsets", cmd_offsets },
		{ "wait-committed", cmd_wait_committed },
		{ "reset", cmd_reset },
		{ "consume", cmd_consume },
		{ "cluster-id", cmd_cluster_id },
	};
	struct kt_common cm = { 0 };
	int rc;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage_main(argc < 2 ? stderr : stdout);
		return argc < 2 ? 1 : 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char cmdname[64];

		if (strcmp(argv[1], cmds[i].name) != 0)
			continue;
		snprintf(cmdname, sizeof(cmdname), "idem-kafkatool %s", cmds[i].name);
		prog_cmd = cmdname;
		cm.props = calloc((size_t)argc, sizeof(*cm.props));
		if (cm.props == NULL) {
			fprintf(stderr, "%s: out of memory\n", prog_cmd);
			return 1;
		}
		rc = cmds[i].run(argc - 1, argv + 1, &cm);
		free(cm.props);
		return rc;
	}
	fprintf(stderr, "idem-kafkatool: unknown command '%s'\n", argv[1]);
	usage_main(stderr);
	return 1;
}
