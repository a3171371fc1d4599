/*
 * Unit tests for idem_relay: the producer configuration.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "idem_relay.h"

static const char cfg_text[] = "kafka:\n"
                               "  brokers: \"127.0.0.1:9092\"\n"
                               "  group_id: g\n"
                               "  properties:\n"
                               "    security.protocol: ssl\n"
                               "    ssl.ca.location: /etc/ssl/ca.pem\n"
                               "    socket.keepalive.enable: \"true\"\n"
                               "    session.timeout.ms: \"6000\"\n"
                               "    fetch.wait.max.ms: \"10\"\n"
                               "    auto.offset.reset: latest\n"
                               "    acks: \"1\"\n"
                               "    enable.idempotence: \"false\"\n"
                               "    linger.ms: \"500\"\n"
                               "postgres:\n"
                               "  conninfo: \"dbname=x\"\n"
                               "routes:\n"
                               "  - name: r\n"
                               "    topics: [t]\n"
                               "    business_key: key\n"
                               "    handler: { sql: \"SELECT 1\", params: [] }\n"
                               "outbox:\n"
                               "  enabled: true\n";

static void get(rd_kafka_conf_t *conf, const char *name, char *buf, size_t len)
{
	size_t n = len;

	if (rd_kafka_conf_get(conf, name, buf, &n) != RD_KAFKA_CONF_OK)
		fail_msg("cannot read property %s", name);
}

static void test_producer_conf(void **state)
{
	struct idem_cfg *cfg = NULL;
	rd_kafka_conf_t *conf = NULL;
	rd_kafka_conf_t *fresh = rd_kafka_conf_new();
	char *errors = NULL;
	char v[256], d[256];
	idem_error err;

	(void)state;
	assert_int_equal(idem_cfg_parse("t.yaml", cfg_text, strlen(cfg_text), &cfg, &errors),
	                 IDEM_OK);
	assert_int_equal(idem_relay_conf(cfg, &conf, &err), IDEM_OK);
	get(conf, "bootstrap.servers", v, sizeof(v));
	assert_string_equal(v, "127.0.0.1:9092");
	/* Connection and security settings are shared with the consumer. */
	get(conf, "security.protocol", v, sizeof(v));
	assert_string_equal(v, "ssl");
	get(conf, "ssl.ca.location", v, sizeof(v));
	assert_string_equal(v, "/etc/ssl/ca.pem");
	get(conf, "socket.keepalive.enable", v, sizeof(v));
	assert_string_equal(v, "true");
	/* What the relay needs wins over kafka.properties. */
	get(conf, "enable.idempotence", v, sizeof(v));
	assert_string_equal(v, "true");
	get(conf, "acks", v, sizeof(v));
	assert_string_equal(v, "-1");
	get(conf, "client.id", v, sizeof(v));
	assert_string_equal(v, "idemd-relay");
	/* Consumer settings and other producer settings stay at librdkafka's defaults. */
	get(conf, "session.timeout.ms", v, sizeof(v));
	get(fresh, "session.timeout.ms", d, sizeof(d));
	assert_string_equal(v, d);
	get(conf, "fetch.wait.max.ms", v, sizeof(v));
	get(fresh, "fetch.wait.max.ms", d, sizeof(d));
	assert_string_equal(v, d);
	get(conf, "linger.ms", v, sizeof(v));
	assert_string_equal(v, "5");
	rd_kafka_conf_destroy(conf);
	rd_kafka_conf_destroy(fresh);
	idem_cfg_free(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_producer_conf),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
