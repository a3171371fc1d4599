/*
 * Unit tests for idem_consumer's configuration: librdkafka's prefetch divided among the
 * subscribed topics' partitions (idem_consumer_prefetch()), the fixed fallback when they cannot
 * be counted, and kafka.properties winning over idemd's choice.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>

#include "idem_cfg.h"
#include "idem_consumer.h"

static void test_prefetch_divided(void **state)
{
	static const struct {
		int partitions;
		long messages, kbytes;
	} cases[] = {
		{ 1, IDEM_CONSUMER_PREFETCH_MESSAGES, IDEM_CONSUMER_PREFETCH_KBYTES },
		{ 8, IDEM_CONSUMER_PREFETCH_MESSAGES / 8, IDEM_CONSUMER_PREFETCH_KBYTES / 8 },
		{ 16, IDEM_CONSUMER_PREFETCH_MESSAGES / 16, IDEM_CONSUMER_PREFETCH_KBYTES / 16 },
		/* Never below 1000 messages and 256 KiB a partition, however many. */
		{ 100, 1000, IDEM_CONSUMER_PREFETCH_KBYTES / 100 },
		{ 1000, 1000, 256 },
		/* Unknown counts as one. */
		{ 0, IDEM_CONSUMER_PREFETCH_MESSAGES, IDEM_CONSUMER_PREFETCH_KBYTES },
	};
	long total_m = 0, total_k = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long m = -1, k = -1;

		idem_consumer_prefetch(cases[i].partitions, &m, &k);
		assert_int_equal(m, cases[i].messages);
		assert_int_equal(k, cases[i].kbytes);
	}
	/* The whole stays about the same whatever the partition count. */
	for (int p = 1; p <= 48; p++) {
		long m, k;

		idem_consumer_prefetch(p, &m, &k);
		total_m = m * p;
		total_k = k * p;
		assert_true(total_m <= IDEM_CONSUMER_PREFETCH_MESSAGES);
		assert_true(total_m > IDEM_CONSUMER_PREFETCH_MESSAGES - p);
		assert_true(total_k <= IDEM_CONSUMER_PREFETCH_KBYTES);
		assert_true(total_k > IDEM_CONSUMER_PREFETCH_KBYTES - p);
	}
}

static struct idem_cfg *parse(const char *text)
{
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;

	assert_int_equal(idem_cfg_parse("t.yaml", text, strlen(text), &cfg, &errors), IDEM_OK);
	assert_null(errors);
	return cfg;
}

static void assert_prop(rd_kafka_conf_t *conf, const char *name, const char *want)
{
	char v[64];
	size_t len = sizeof(v);

	assert_int_equal(rd_kafka_conf_get(conf, name, v, &len), RD_KAFKA_CONF_OK);
	assert_string_equal(v, want);
}

#define BASE                                                                                       \
	"postgres: {conninfo: \"dbname=x\"}\n"                                                     \
	"routes:\n"                                                                                \
	"  - {name: r, topics: [t], business_key: key, handler: {sql: \"SELECT 1\"}}\n"

static void test_conf_prefetch(void **state)
{
	struct idem_cfg *cfg = parse("kafka: {brokers: b, group_id: g}\n" BASE);
	rd_kafka_conf_t *conf = NULL;
	idem_error err;

	(void)state;
	/* 16 partitions: 48000 / 16 messages and 32768 / 16 KiB each. */
	assert_int_equal(idem_consumer_conf(cfg, 16, &conf, &err), IDEM_OK);
	assert_prop(conf, "queued.min.messages", "3000");
	assert_prop(conf, "queued.max.messages.kbytes", "2048");
	assert_prop(conf, "enable.auto.commit", "false");
	assert_prop(conf, "enable.auto.offset.store", "false");
	rd_kafka_conf_destroy(conf);
	/* Partitions not counted: the fixed fallback. */
	assert_int_equal(idem_consumer_conf(cfg, 0, &conf, &err), IDEM_OK);
	assert_prop(conf, "queued.min.messages", "5000");
	assert_prop(conf, "queued.max.messages.kbytes", "2048");
	rd_kafka_conf_destroy(conf);
	idem_cfg_free(cfg);
}

static void test_conf_user_wins(void **state)
{
	struct idem_cfg *cfg = parse(
	        "kafka: {brokers: b, group_id: g,\n"
	        "        properties: {queued.min.messages: 777, auto.commit.interval.ms: 250}}\n" BASE);
	rd_kafka_conf_t *conf = NULL;
	idem_error err;

	(void)state;
	assert_int_equal(idem_consumer_conf(cfg, 4, &conf, &err), IDEM_OK);
	assert_prop(conf, "queued.min.messages", "777");
	/* The other one still idemd's, divided among the 4 partitions. */
	assert_prop(conf, "queued.max.messages.kbytes", "8192");
	assert_prop(conf, "auto.commit.interval.ms", "250");
	assert_int_equal(idem_consumer_commit_interval_ms(cfg), 250);
	rd_kafka_conf_destroy(conf);
	idem_cfg_free(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefetch_divided),
		cmocka_unit_test(test_conf_prefetch),
		cmocka_unit_test(test_conf_user_wins),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
