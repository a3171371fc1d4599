/*
 * bench_klat - the Kafka-only latency floor of the latency run (phase K of the benchmark).
 *
 *   bench_klat --brokers B --topic T --group G --count N [--timeout S] [--config FILE]
 *              [--kafka-prop NAME=VALUE]...
 *
 * A consumer in group G with idemd's Kafka properties that does nothing but note, for each of the
 * first N messages, the wall-clock time it was handed over minus the message's Kafka timestamp (set
 * by the producer). Run it while idem-kafkatool produces at the latency run's rate: what remains of
 * the end-to-end latency target after Kafka (producer linger, broker, fetch) has taken its share.
 *
 * With --config (the idemd configuration of the latency run), the consumer is configured exactly
 * as idemd configures its own (idem_consumer_conf(): the brokers, idemd's defaults, then the
 * file's kafka.properties), only the group replaced by G. Without it: session.timeout.ms 6000,
 * heartbeat.interval.ms 500, fetch.wait.max.ms 10, queued.min.messages 1000000 (the benchmark's
 * tuned settings before idemd was measured at its defaults). --kafka-prop comes last either way
 * (a later one replaces an earlier one).
 *
 * Says "bench_klat: assigned N partitions" on stderr once the group is joined (produce only
 * then), and at the end prints one line: klat messages=N p50_ms=X p99_ms=Y max_ms=Z
 */
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "idem_cfg.h"
#include "idem_consumer.h"

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Eager rebalancing (the default strategies); says on stderr when partitions arrive. */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
	(void)opaque;
	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		rd_kafka_assign(rk, list);
		fprintf(stderr, "bench_klat: assigned %d partitions\n", list->cnt);
	} else {
		rd_kafka_assign(rk, NULL);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_klat --brokers B --topic T --group G --count N [--timeout S]\n"
	           "                  [--config FILE] [--kafka-prop NAME=VALUE]...\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "brokers", required_argument, NULL, 'b' },
		{ "topic", required_argument, NULL, 't' },
		{ "group", required_argument, NULL, 'g' },
		{ "count", required_argument, NULL, 'n' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "kafka-prop", required_argument, NULL, 'X' },
		{ "config", required_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *brokers = NULL, *topic = NULL, *group = NULL, *config = NULL;
	rd_kafka_topic_partition_list_t *topics;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	char errstr[512];
	char *props[32];
	int n_props = 0;
	long count = 0, got = 0;
	double timeout = 300, deadline, *lat;
	int c;

	bench_set_prog("bench_klat");
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			brokers = optarg;
			break;
		case 't':
			topic = optarg;
			break;
		case 'g':
			group = optarg;
			break;
		case 'n':
			count = atol(optarg);
			break;
		case 'T':
			timeout = atof(optarg);
			break;
		case 'C':
			config = optarg;
			break;
		case 'X':
			if (n_props == (int)(sizeof(props) / sizeof(props[0])) ||
			    strchr(optarg, '=') == NULL)
				bench_die("--kafka-prop: NAME=VALUE, at most 32 of them");
			props[n_props++] = optarg;
			break;
		default:
			usage(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 1;
		}
	}
	if (brokers == NULL || topic == NULL || group == NULL || count < 1) {
		usage(stderr);
		return 1;
	}
	lat = malloc((size_t)count * sizeof(*lat));
	if (lat == NULL)
		bench_die("out of memory");

	if (config != NULL) {
		/* idemd's own consumer configuration, from its configuration file. */
		struct idem_cfg *cfg = NULL;
		char *errors = NULL;
		idem_error err;

		if (idem_cfg_load(config, &cfg, &errors) != IDEM_OK)
			bench_die("%s", errors != NULL ? errors : "cannot load the configuration");
		/* The prefetch as for an unknown partition count: it reads the whole topic from
		 * the consumer queue, where idemd divides it among partitions' own queues. */
		if (idem_consumer_conf(cfg, 0, &conf, &err) != IDEM_OK)
			bench_die("%s", err.msg);
		idem_cfg_free(cfg);
		bench_kafka_set(conf, "bootstrap.servers", brokers);
	} else {
		/* The benchmark's tuned settings of before. */
		conf = rd_kafka_conf_new();
		bench_kafka_set(conf, "bootstrap.servers", brokers);
		bench_kafka_set(conf, "auto.offset.reset", "earliest");
		bench_kafka_set(conf, "session.timeout.ms", "6000");
		bench_kafka_set(conf, "heartbeat.interval.ms", "500");
		bench_kafka_set(conf, "fetch.wait.max.ms", "10");
		bench_kafka_set(conf, "queued.min.messages", "1000000");
	}
	bench_kafka_set(conf, "group.id", group);
	bench_kafka_set(conf, "enable.auto.commit", "false");
	bench_kafka_set(conf, "log_level", "4");
	for (int i = 0; i < n_props; i++) {
		char *eq = strchr(props[i], '=');

		*eq = '\0';
		bench_kafka_set(conf, props[i], eq + 1);
	}
	rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
		bench_die("cannot create kafka consumer: %s", errstr);
	rd_kafka_poll_set_consumer(rk);
	topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
	if (rd_kafka_subscribe(rk, topics) != RD_KAFKA_RESP_ERR_NO_ERROR)
		bench_die("cannot subscribe to '%s'", topic);
	rd_kafka_topic_partition_list_destroy(topics);

	deadline = bench_now() + timeout;
	while (got < count) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);
		struct timespec ts;
		int64_t ms;

		if (bench_now() > deadline)
			bench_die("timed out after %ld of %ld messages", got, count);
		if (rkm == NULL)
			continue;
		clock_gettime(CLOCK_REALTIME, &ts);
		ms = rd_kafka_message_timestamp(rkm, NULL);
		if (rkm->err == RD_KAFKA_RESP_ERR_NO_ERROR && ms >= 0)
			lat[got++] =
			        (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6 - (double)ms;
		rd_kafka_message_destroy(rkm);
	}
	qsort(lat, (size_t)count, sizeof(*lat), dbl_cmp);
	printf("klat messages=%ld p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n", count, lat[count / 2],
	       lat[(count * 99) / 100], lat[count - 1]);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	free(lat);
	return 0;
}
