/*
 * Unit tests for idem_metrics: the exposition text and readiness.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_metrics.h"

static char *render(idem_metrics *m)
{
	struct idem_buf b = { 0 };

	assert_int_equal(idem_metrics_render(m, &b), IDEM_OK);
	return b.data;
}

static void has_line(const char *text, const char *line)
{
	const char *p = text;
	size_t n = strlen(line);

	while ((p = strstr(p, line)) != NULL) {
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return;
		p += n;
	}
	fail_msg("missing line '%s' in:\n%s", line, text);
}

static void test_counters_and_histograms(void **state)
{
	idem_metrics *m = idem_metrics_new();
	char *t;

	(void)state;
	assert_non_null(m);
	idem_metrics_batch(m, 500, 300, 1, 0.004);
	idem_metrics_batch(m, 3, 3, 0, 0.2);
	idem_metrics_duplicates(m, IDEM_METRICS_DUP_REDELIVERY, 150);
	idem_metrics_mismatches(m, 2);
	idem_metrics_duplicates(m, IDEM_METRICS_DUP_UPSTREAM, 49);
	idem_metrics_retry(m, "transient");
	idem_metrics_retry(m, "transient");
	idem_metrics_retry(m, "broken");
	idem_metrics_workers(m, 4, 3, 1, 7);
	t = render(m);
	has_line(t, "# TYPE idemd_messages_consumed_total counter");
	has_line(t, "idemd_messages_consumed_total 503");
	has_line(t, "idemd_messages_applied_total 303");
	has_line(t, "idemd_messages_quarantined_total 1");
	has_line(t, "idemd_batches_total 2");
	has_line(t, "idemd_duplicates_total{kind=\"redelivery\"} 150");
	has_line(t, "idemd_payload_mismatches_total 2");
	has_line(t, "idemd_duplicates_total{kind=\"upstream\"} 49");
	has_line(t, "idemd_duplicates_total{kind=\"replay\"} 0");
	has_line(t, "idemd_batch_retries_total{class=\"transient\"} 2");
	has_line(t, "idemd_batch_retries_total{class=\"broken\"} 1");
	/* Cumulative buckets: 3 <= 5, 500 <= 500. */
	has_line(t, "idemd_batch_size_messages_bucket{le=\"1\"} 0");
	has_line(t, "idemd_batch_size_messages_bucket{le=\"5\"} 1");
	has_line(t, "idemd_batch_size_messages_bucket{le=\"250\"} 1");
	has_line(t, "idemd_batch_size_messages_bucket{le=\"500\"} 2");
	has_line(t, "idemd_batch_size_messages_bucket{le=\"+Inf\"} 2");
	has_line(t, "idemd_batch_size_messages_count 2");
	has_line(t, "idemd_batch_size_messages_sum 503.000000");
	has_line(t, "idemd_batch_duration_seconds_bucket{le=\"0.005\"} 1");
	has_line(t, "idemd_batch_duration_seconds_bucket{le=\"0.1\"} 1");
	has_line(t, "idemd_batch_duration_seconds_bucket{le=\"0.25\"} 2");
	has_line(t, "idemd_build_info{version=\"" IDEM_VERSION "\"} 1");
	has_line(t, "# TYPE idemd_workers gauge");
	has_line(t, "idemd_workers 4");
	has_line(t, "idemd_batches_in_flight 3");
	has_line(t, "idemd_partitions_held 1");
	has_line(t, "# TYPE idemd_claims_late_total counter");
	has_line(t, "idemd_claims_late_total 7");
	free(t);
	idem_metrics_free(m);
}

static void test_partitions(void **state)
{
	idem_metrics *m = idem_metrics_new();
	char *t;

	(void)state;
	idem_metrics_partition(m, "payments", 0, 100, 5);
	idem_metrics_partition(m, "payments", 1, -1, -1);
	idem_metrics_partition(m, "payments", 0, 120, 0);
	t = render(m);
	has_line(t, "idemd_partition_lag_messages{topic=\"payments\",partition=\"0\"} 0");
	has_line(t, "idemd_partition_database_progress{topic=\"payments\",partition=\"0\"} 120");
	assert_null(strstr(t, "idemd_partition_lag_messages{topic=\"payments\",partition=\"1\"}"));
	assert_null(
	        strstr(t, "idemd_partition_database_progress{topic=\"payments\",partition=\"1\"}"));
	has_line(t, "idemd_partition_halted{topic=\"payments\",partition=\"1\"} 0");
	free(t);
	idem_metrics_partition_remove(m, "payments", 0);
	t = render(m);
	assert_null(strstr(t, "partition=\"0\""));
	free(t);
	idem_metrics_free(m);
}

/* The halt gauge, and Kafka ahead of the database at assignment (idemctl verify's loss alarm). */
static void test_partition_halted_and_kafka_ahead(void **state)
{
	idem_metrics *m = idem_metrics_new();
	char *t;

	(void)state;
	idem_metrics_partition_assigned(m, "payments", 0, 150, 100); /* Kafka ahead by 50 */
	idem_metrics_partition_assigned(m, "payments", 1, 80, 100);  /* database ahead */
	idem_metrics_partition_assigned(m, "payments", 2, -1, 100);  /* no commit */
	idem_metrics_partition_assigned(m, "payments", 3, 7, -1);    /* no progress row: 0 */
	idem_metrics_partition_halted(m, "payments", 1, true);
	t = render(m);
	has_line(t, "idemd_partition_kafka_ahead_messages{topic=\"payments\",partition=\"0\"} 50");
	has_line(t, "idemd_partition_kafka_ahead_messages{topic=\"payments\",partition=\"1\"} 0");
	has_line(t, "idemd_partition_kafka_ahead_messages{topic=\"payments\",partition=\"2\"} 0");
	has_line(t, "idemd_partition_kafka_ahead_messages{topic=\"payments\",partition=\"3\"} 7");
	has_line(t, "idemd_partition_halted{topic=\"payments\",partition=\"0\"} 0");
	has_line(t, "idemd_partition_halted{topic=\"payments\",partition=\"1\"} 1");
	/* Assigned, nothing published yet: no lag nor progress. */
	assert_null(strstr(t, "idemd_partition_lag_messages{"));
	assert_null(strstr(t, "idemd_partition_database_progress{"));
	free(t);
	/* The publication keeps the assignment's figure; a revocation drops it. */
	idem_metrics_partition(m, "payments", 0, 160, 0);
	idem_metrics_partition_halted(m, "payments", 1, false);
	t = render(m);
	has_line(t, "idemd_partition_kafka_ahead_messages{topic=\"payments\",partition=\"0\"} 50");
	has_line(t, "idemd_partition_halted{topic=\"payments\",partition=\"1\"} 0");
	free(t);
	idem_metrics_partition_remove(m, "payments", 0);
	t = render(m);
	assert_null(strstr(t, "partition=\"0\""));
	free(t);
	idem_metrics_free(m);
}

static bool probe(const void *arg)
{
	return *(const bool *)arg;
}

static void test_ready(void **state)
{
	idem_metrics *m = idem_metrics_new();
	bool connected = false;
	char why[64];

	(void)state;
	assert_false(idem_metrics_is_ready(m, why, sizeof(why)));
	assert_string_equal(why, "not connected to postgres");
	idem_metrics_ready(m, true, false);
	assert_false(idem_metrics_is_ready(m, why, sizeof(why)));
	assert_string_equal(why, "not connected to postgres");
	/* Asked at each request: a connection lost or regained shows at once. */
	idem_metrics_connected_probe(m, probe, &connected);
	assert_false(idem_metrics_is_ready(m, why, sizeof(why)));
	assert_string_equal(why, "not connected to postgres");
	connected = true;
	idem_metrics_ready(m, false, false);
	assert_false(idem_metrics_is_ready(m, why, sizeof(why)));
	assert_string_equal(why, "no partition assigned");
	idem_metrics_ready(m, true, true);
	assert_false(idem_metrics_is_ready(m, why, sizeof(why)));
	assert_string_equal(why, "a partition is halted");
	idem_metrics_ready(m, true, false);
	assert_true(idem_metrics_is_ready(m, why, sizeof(why)));
	assert_string_equal(why, "ready");
	connected = false;
	assert_false(idem_metrics_is_ready(m, why, sizeof(why)));
	assert_string_equal(why, "not connected to postgres");
	idem_metrics_free(m);
}

static void test_listen_errors(void **state)
{
	idem_metrics *m = idem_metrics_new();
	idem_error err;

	(void)state;
	assert_int_equal(idem_metrics_listen(m, "localhost", &err), IDEM_ERR_CONFIG);
	assert_string_equal(err.msg,
	                    "metrics listen address 'localhost' has no port (expected HOST:PORT)");
	assert_int_equal(idem_metrics_listen(m, "127.0.0.1:99999", &err), IDEM_ERR_CONFIG);
	assert_int_equal(idem_metrics_listen(m, "example.com:80", &err), IDEM_ERR_CONFIG);
	assert_string_equal(err.msg, "metrics listen address 'example.com:80': bad IPv4 address");
	assert_int_equal(idem_metrics_listen(m, ":9187", &err), IDEM_ERR_CONFIG);
	assert_non_null(strstr(err.msg, "'0.0.0.0:9187'"));
	idem_metrics_free(m);
}

static void test_outbox(void **state)
{
	idem_metrics *m = idem_metrics_new();
	char *t;

	(void)state;
	t = render(m);
	assert_null(strstr(t, "idemd_outbox"));
	free(t);
	idem_metrics_outbox_pending(m, 7, 2.5);
	idem_metrics_outbox_published(m, 1000, 0);
	idem_metrics_outbox_published(m, 10, 2);
	t = render(m);
	has_line(t, "idemd_outbox_pending 7");
	has_line(t, "idemd_outbox_oldest_pending_seconds 2.500");
	has_line(t, "idemd_outbox_published_total 1010");
	has_line(t, "idemd_outbox_errors_total 2");
	has_line(t, "# TYPE idemd_outbox_published_total counter");
	free(t);
	idem_metrics_free(m);
}

/* Retention measures the oldest claim's age once a sweep; between sweeps it keeps growing. */
static void test_oldest_claim_age(void **state)
{
	idem_metrics *m = idem_metrics_new();
	struct timespec nap = { 0, 300 * 1000 * 1000 };
	double v;
	char *t, *p;

	(void)state;
	t = render(m);
	assert_null(strstr(t, "idemd_oldest_claim_age_seconds"));
	free(t);
	idem_metrics_oldest_claim_age(m, 10);
	nanosleep(&nap, NULL);
	t = render(m);
	p = strstr(t, "\nidemd_oldest_claim_age_seconds ");
	assert_non_null(p);
	v = strtod(p + strlen("\nidemd_oldest_claim_age_seconds "), NULL);
	assert_true(v >= 10.3 && v < 20);
	free(t);
	idem_metrics_oldest_claim_age(m, -1);
	t = render(m);
	assert_null(strstr(t, "idemd_oldest_claim_age_seconds"));
	free(t);
	idem_metrics_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_and_histograms),
		cmocka_unit_test(test_partitions),
		cmocka_unit_test(test_partition_halted_and_kafka_ahead),
		cmocka_unit_test(test_ready),
		cmocka_unit_test(test_listen_errors),
		cmocka_unit_test(test_outbox),
		cmocka_unit_test(test_oldest_claim_age),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
