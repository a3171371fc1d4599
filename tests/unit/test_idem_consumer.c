/*
 * Unit tests for idem_consumer's configuration: librdkafka's prefetch divided among the
 * subscribed topics' partitions (idem_consumer_prefetch()), the fallback bounded in total when
 * they cannot be counted, kafka.properties winning over idemd's choice, and the one table of
 * idemd's property policy (idem_cfg_kafka_props()) both applied and checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "idem_cfg.h"
#include "idem_consumer.h"

static void test_prefetch_divided(void **state)
{
	static const struct {
		int partitions;
		long messages, kbytes;
	} cases[] = {
		/* Never above 100000 messages a partition (librdkafka's own default). */
		{ 1, 100000, IDEM_CONSUMER_PREFETCH_KBYTES },
		{ 8, IDEM_CONSUMER_PREFETCH_MESSAGES / 8, IDEM_CONSUMER_PREFETCH_KBYTES / 8 },
		{ 16, IDEM_CONSUMER_PREFETCH_MESSAGES / 16, IDEM_CONSUMER_PREFETCH_KBYTES / 16 },
		{ 100, IDEM_CONSUMER_PREFETCH_MESSAGES / 100, IDEM_CONSUMER_PREFETCH_KBYTES / 100 },
		/* Never below 1000 messages and 256 KiB a partition, however many. */
		{ 1000, 1000, 256 },
		/* Unknown: the least, as for the most partitions. */
		{ 0, 1000, 256 },
	};
	long total_m = 0, total_k = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long m = -1, k = -1;

		idem_consumer_prefetch(cases[i].partitions, &m, &k);
		assert_int_equal(m, cases[i].messages);
		assert_int_equal(k, cases[i].kbytes);
	}
	/* The whole stays about the same whatever the partition count (from 2: one partition
	 * alone is capped at 100000). */
	for (int p = 2; p <= 128; p++) {
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

/*
 * Partitions not counted: whatever their number turns out to be, they hold no more than the
 * whole (up to the most it covers at the least each), and beyond that no more than counted ones
 * would. A fixed share per partition, as before, held N times it: 1,000 partitions at 5,000
 * messages and 2 MiB each, 5 million messages and 2 GiB.
 */
static void test_prefetch_fallback_bounded(void **state)
{
	long fm = -1, fk = -1;

	(void)state;
	assert_int_equal(IDEM_CONSUMER_PREFETCH_FALLBACK_PARTITIONS, 128);
	idem_consumer_prefetch(0, &fm, &fk);
	assert_int_equal(fm, 1000);
	assert_int_equal(fk, 256);
	for (int p = 1; p <= 100000; p += p < 256 ? 1 : 997) {
		long m, k;

		idem_consumer_prefetch(p, &m, &k);
		if (p <= IDEM_CONSUMER_PREFETCH_FALLBACK_PARTITIONS) {
			assert_true(fm * p <= IDEM_CONSUMER_PREFETCH_MESSAGES);
			assert_true(fk * p <= IDEM_CONSUMER_PREFETCH_KBYTES);
		} else {
			assert_true(fm <= m);
			assert_true(fk <= k);
		}
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
	/* 16 partitions: 160000 / 16 messages and 32768 / 16 KiB each. */
	assert_int_equal(idem_consumer_conf(cfg, 16, &conf, &err), IDEM_OK);
	assert_prop(conf, "queued.min.messages", "10000");
	assert_prop(conf, "queued.max.messages.kbytes", "2048");
	assert_prop(conf, "enable.auto.commit", "false");
	assert_prop(conf, "enable.auto.offset.store", "false");
	rd_kafka_conf_destroy(conf);
	/* Partitions not counted: the least a partition gets. */
	assert_int_equal(idem_consumer_conf(cfg, 0, &conf, &err), IDEM_OK);
	assert_prop(conf, "queued.min.messages", "1000");
	assert_prop(conf, "queued.max.messages.kbytes", "256");
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

/* librdkafka holds @name at @got, which means @want (it spells some values its own way). */
static void assert_same_value(const char *name, const char *got, const char *want)
{
	rd_kafka_conf_t *ref = rd_kafka_conf_new();
	char errstr[256], v[256];
	size_t len = sizeof(v);

	assert_int_equal(rd_kafka_conf_set(ref, name, want, errstr, sizeof(errstr)),
	                 RD_KAFKA_CONF_OK);
	assert_int_equal(rd_kafka_conf_get(ref, name, v, &len), RD_KAFKA_CONF_OK);
	assert_string_equal(got, v);
	rd_kafka_conf_destroy(ref);
}

/*
 * The one policy table (idem_cfg_kafka_props()): each property has one entry, librdkafka knows
 * it, idem_consumer_conf() sets it to the table's value, and a default has a value to set.
 */
static void test_policy_table_applied(void **state)
{
	struct idem_cfg *cfg = parse("kafka: {brokers: b, group_id: g}\n" BASE);
	const struct idem_cfg_kafka_prop *props;
	rd_kafka_conf_t *conf = NULL;
	idem_error err;
	size_t n;

	(void)state;
	props = idem_cfg_kafka_props(&n);
	assert_true(n > 0);
	assert_int_equal(idem_consumer_conf(cfg, 0, &conf, &err), IDEM_OK);
	for (size_t i = 0; i < n; i++) {
		char v[256];
		size_t len = sizeof(v);

		for (size_t j = i + 1; j < n; j++) {
			if (strcmp(props[i].name, props[j].name) == 0)
				fail_msg("kafka property '%s' has two policy entries",
				         props[i].name);
		}
		if (rd_kafka_conf_get(conf, props[i].name, v, &len) != RD_KAFKA_CONF_OK)
			fail_msg("librdkafka does not know '%s'", props[i].name);
		if (props[i].value != NULL)
			assert_same_value(props[i].name, v, props[i].value);
		if (!props[i].managed) {
			assert_non_null(props[i].value);
			assert_null(props[i].use);
		}
	}
	assert_prop(conf, "bootstrap.servers", "b");
	assert_prop(conf, "group.id", "g");
	rd_kafka_conf_destroy(conf);
	idem_cfg_free(cfg);
}

/* kafka.properties: a managed property is refused with the table's message, a default not. */
static void test_policy_table_checked(void **state)
{
	const struct idem_cfg_kafka_prop *props = NULL;
	size_t n = 0;

	(void)state;
	props = idem_cfg_kafka_props(&n);
	for (size_t i = 0; i < n; i++) {
		struct idem_cfg *cfg = NULL;
		char text[1024], want[256], *errors = NULL;
		int col;
		idem_status r;

		snprintf(text, sizeof(text),
		         "kafka: {brokers: b, group_id: g, properties: {%s: %s}}\n" BASE,
		         props[i].name, props[i].value != NULL ? props[i].value : "x");
		r = idem_cfg_parse("t.yaml", text, strlen(text), &cfg, &errors);
		if (!props[i].managed) {
			if (r != IDEM_OK)
				fail_msg("'%s' refused: %s", props[i].name, errors ? errors : "?");
			idem_cfg_free(cfg);
			continue;
		}
		assert_int_equal(r, IDEM_ERR_CONFIG);
		col = (int)(strstr(text, "properties: {") - text) + 14;
		if (props[i].use != NULL)
			snprintf(
			        want, sizeof(want),
			        "t.yaml:1:%d: error: kafka property '%s' cannot be set here; use '%s'\n",
			        col, props[i].name, props[i].use);
		else
			snprintf(
			        want, sizeof(want),
			        "t.yaml:1:%d: error: kafka property '%s' is managed by idemd and cannot be set\n",
			        col, props[i].name);
		assert_string_equal(errors, want);
		free(errors);
	}
}

static void add_warning(const char *msg, void *arg)
{
	char *out = arg;

	strncat(out, msg, 1023 - strlen(out));
	strncat(out, "\n", 1023 - strlen(out));
}

/*
 * kafka.properties' sasl.password_file and ssl.key.password_env give librdkafka the file's first
 * line and the variable's value as sasl.password and ssl.key.password; a file open to others
 * stops it, naming the setting; a secret written in the file draws a warning without its value.
 */
static void test_conf_secret_forms(void **state)
{
	char path[64], text[1024], warnings[1024] = "";
	struct idem_cfg *cfg;
	rd_kafka_conf_t *conf = NULL;
	idem_error err = { 0 };
	FILE *f;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/idem-sasl-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs("kafka-s3cret\nignored\n", f);
	fclose(f);
	assert_int_equal(chmod(path, 0600), 0);
	setenv("IDEM_TEST_KEY_PW", "key-s3cret", 1);
	snprintf(text, sizeof(text),
	         "kafka: {brokers: b, group_id: g,\n"
	         "        properties: {security.protocol: SASL_PLAINTEXT, sasl.mechanisms: PLAIN,\n"
	         "                     sasl.username: idemd, sasl.password_file: \"%s\",\n"
	         "                     ssl.key.password_env: IDEM_TEST_KEY_PW}}\n" BASE,
	         path);
	cfg = parse(text);
	assert_int_equal(idem_cfg_secret_warnings(cfg, NULL, NULL), 0);
	assert_int_equal(idem_cfg_secrets_check(cfg, &err), IDEM_OK);
	assert_null(getenv("IDEM_TEST_KEY_PW"));
	assert_int_equal(idem_consumer_conf(cfg, 1, &conf, &err), IDEM_OK);
	assert_prop(conf, "sasl.username", "idemd");
	assert_prop(conf, "sasl.password", "kafka-s3cret");
	assert_prop(conf, "ssl.key.password", "key-s3cret");
	rd_kafka_conf_destroy(conf);

	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(idem_consumer_conf(cfg, 1, &conf, &err), IDEM_ERR_CONFIG);
	assert_non_null(strstr(err.msg, "kafka.properties.sasl.password_file: '"));
	assert_non_null(strstr(err.msg, "open to group or others"));
	assert_null(strstr(err.msg, "kafka-s3cret"));
	assert_int_equal(idem_cfg_secrets_check(cfg, &err), IDEM_ERR_CONFIG);
	idem_cfg_free(cfg);
	unlink(path);

	cfg = parse(
	        "kafka: {brokers: b, group_id: g,\n"
	        "        properties: {sasl.password: literal-s3cret, ssl.key.pem: pem-s3cret}}\n" BASE);
	assert_int_equal(idem_cfg_secret_warnings(cfg, add_warning, warnings), 2);
	assert_string_equal(
	        warnings,
	        "kafka property 'sasl.password' is a secret written in the configuration file; use 'sasl.password_file' or 'sasl.password_env' instead\n"
	        "kafka property 'ssl.key.pem' is a secret written in the configuration file; use 'ssl.key.location' (a file of mode 0600) instead\n");
	idem_cfg_free(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefetch_divided),
		cmocka_unit_test(test_prefetch_fallback_bounded),
		cmocka_unit_test(test_conf_prefetch),
		cmocka_unit_test(test_conf_user_wins),
		cmocka_unit_test(test_conf_secret_forms),
		cmocka_unit_test(test_policy_table_applied),
		cmocka_unit_test(test_policy_table_checked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
