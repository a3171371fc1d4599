/*
 * test_idem_cfg.c - configuration parsing and validation.
 *
 * Golden cases live in $IDEM_TEST_DATA/cfg: every NAME.yaml has a NAME.expected holding the
 * exact error text idem_cfg_parse() must produce for it (with "NAME.yaml" as the file name), or
 * nothing when the file must load. Each case runs as its own test in the "golden" group.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>

#include "idem_cfg.h"
#include "idem_lex.h"

/* Internals of idem_cfg_walk.c (IDEM_TESTABLE). */
size_t idem__cfg_edit_distance(const char *a, size_t la, const char *b, size_t lb);

/* The golden directory must hold at least this many cases: a wrong path fails loudly. */
#define GOLDEN_MIN 25

static const char *data_dir(void)
{
	const char *dir = getenv("IDEM_TEST_DATA");

	if (dir == NULL || dir[0] == '\0')
		fail_msg("IDEM_TEST_DATA is not set (it must point at tests/unit/data)");
	return dir;
}

/* Reads @path into a malloc'ed NUL-terminated buffer; fails the test if it cannot. */
static char *read_file(const char *path, size_t *ret_len)
{
	struct idem_buf b = { 0 };
	char chunk[4096];
	size_t n;
	FILE *f = fopen(path, "rb");

	if (f == NULL)
		fail_msg("cannot open '%s': %s", path, strerror(errno));
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		assert_int_equal(idem_buf_append(&b, chunk, n), IDEM_OK);
	fclose(f);
	assert_int_equal(idem_buf_append(&b, "", 0), IDEM_OK);
	if (ret_len != NULL)
		*ret_len = b.len;
	return b.data;
}

static char *data_path(const char *rel)
{
	struct idem_buf b = { 0 };

	assert_int_equal(idem_buf_printf(&b, "%s/%s", data_dir(), rel), IDEM_OK);
	return b.data;
}

/* Parses the golden file cfg/@name as "@name". */
static idem_status parse_golden(const char *name, struct idem_cfg **ret_cfg, char **ret_errors)
{
	char rel[256], *path, *buf;
	idem_status r;
	size_t len;

	snprintf(rel, sizeof(rel), "cfg/%s", name);
	path = data_path(rel);
	buf = read_file(path, &len);
	r = idem_cfg_parse(name, buf, len, ret_cfg, ret_errors);
	free(buf);
	free(path);
	return r;
}

static struct idem_cfg *load_ok(const char *name)
{
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;
	idem_status r = parse_golden(name, &cfg, &errors);

	if (r != IDEM_OK)
		fail_msg("%s: status %d, errors:\n%s", name, r, errors ? errors : "(none)");
	assert_non_null(cfg);
	return cfg;
}

static void test_full(void **state)
{
	struct idem_cfg *cfg = load_ok("full.yaml");
	const struct idem_route *r;

	(void)state;
	assert_string_equal(cfg->path, "full.yaml");
	assert_string_equal(cfg->brokers, "k1:9092,k2:9092");
	assert_string_equal(cfg->group_id, "grp");
	assert_int_equal(cfg->n_topics, 3);
	assert_string_equal(cfg->topics[0], "orders");
	assert_string_equal(cfg->topics[1], "payments");
	assert_string_equal(cfg->topics[2], "refunds");
	assert_int_equal(cfg->n_kafka_props, 3);
	assert_string_equal(cfg->kafka_props[0].name, "session.timeout.ms");
	assert_string_equal(cfg->kafka_props[0].value, "6000");
	assert_string_equal(cfg->kafka_props[1].name, "enable.idempotence");
	assert_string_equal(cfg->kafka_props[1].value, "false");
	assert_string_equal(cfg->kafka_props[2].name, "client.id");
	assert_string_equal(cfg->kafka_props[2].value, "idemd-test");
	assert_string_equal(cfg->conninfo, "host=/run/postgresql dbname=app user=idemd");
	assert_null(cfg->password_env);
	assert_string_equal(cfg->password_file, "/etc/idemd/pgpass");
	assert_int_equal(cfg->lock_timeout_ms, 0);
	assert_int_equal(cfg->statement_timeout_ms, 86400000);

	assert_int_equal(cfg->n_routes, 2);
	r = &cfg->routes[0];
	assert_string_equal(r->name, "payments");
	assert_int_equal(r->n_topics, 2);
	assert_string_equal(r->topics[0], "payments");
	assert_string_equal(r->topics[1], "refunds");
	assert_string_equal(r->consumer, "pay");
	assert_int_equal(r->key.n_parts, 3);
	assert_int_equal(r->key.parts[0].kind, IDEM_FIELD_HEADER);
	assert_string_equal(r->key.parts[0].arg, "tenant");
	assert_int_equal(r->key.parts[1].kind, IDEM_FIELD_LITERAL);
	assert_string_equal(r->key.parts[1].arg, "/");
	assert_int_equal(r->key.parts[2].kind, IDEM_FIELD_JSON);
	assert_string_equal(r->key.parts[2].arg, "/payment_id");
	assert_string_equal(r->handler_sql, "INSERT INTO t (a, b, c) VALUES ($1, $2, $3)");
	assert_int_equal(r->n_params, 3);
	assert_int_equal(r->params[0].kind, IDEM_FIELD_BUSINESS_KEY);
	assert_int_equal(r->params[1].kind, IDEM_FIELD_JSON);
	assert_string_equal(r->params[1].arg, "/amount");
	assert_int_equal(r->params[2].kind, IDEM_FIELD_HEADER);
	assert_string_equal(r->params[2].arg, "tenant");
	assert_true(r->needs_json);
	assert_int_equal(r->on_poison, IDEM_CFG_POISON_HALT);
	assert_int_equal(r->on_payload_mismatch, IDEM_CFG_MISMATCH_QUARANTINE);

	r = &cfg->routes[1];
	assert_string_equal(r->name, "orders");
	assert_int_equal(r->n_topics, 1);
	assert_string_equal(r->topics[0], "orders");
	assert_string_equal(r->consumer, "grp");
	assert_int_equal(r->key.n_parts, 1);
	assert_int_equal(r->key.parts[0].kind, IDEM_FIELD_KEY);
	assert_string_equal(r->handler_sql, "SELECT 1");
	assert_int_equal(r->n_params, 0);
	assert_false(r->needs_json);
	assert_int_equal(r->on_poison, IDEM_CFG_POISON_QUARANTINE);
	assert_int_equal(r->on_payload_mismatch, IDEM_CFG_MISMATCH_IGNORE);

	assert_int_equal(cfg->batch_max_messages, 1000);
	assert_int_equal(cfg->batch_max_bytes, 4096);
	assert_int_equal(cfg->batch_max_bytes_total, 4096);
	assert_int_equal(cfg->batch_max_wait_ms, 0);
	assert_int_equal(cfg->batch_workers, 3);
	assert_int_equal(idem_cfg_workers(cfg), 3);
	assert_int_equal(cfg->max_key_bytes, 2048);
	assert_int_equal(cfg->max_message_bytes, 1024);
	assert_int_equal(cfg->retry_initial_ms, 250);
	assert_int_equal(cfg->retry_max_ms, 250);
	assert_int_equal(cfg->max_attempts, 100);
	assert_int_equal(cfg->retention_keep_s, 45 * 86400);
	assert_int_equal(cfg->retention_interval_s, 90);
	assert_int_equal(cfg->retention_batch, 250);
	assert_string_equal(cfg->metrics_listen, "127.0.0.1:9187");
	assert_int_equal(cfg->log_level, IDEM_LOG_DEBUG);
	idem_cfg_free(cfg);
}

static void test_outbox(void **state)
{
	struct idem_cfg *cfg = load_ok("ok_outbox.yaml");

	(void)state;
	assert_int_equal(cfg->outbox_enabled, 1);
	assert_int_equal(cfg->outbox_poll_interval_ms, 50);
	assert_int_equal(cfg->outbox_batch, 200);
	assert_int_equal(cfg->outbox_keep_s, 3600);
	assert_int_equal(cfg->outbox_purge_interval_s, 30);
	idem_cfg_free(cfg);
}

static void test_avro(void **state)
{
	struct idem_cfg *cfg = load_ok("ok_avro.yaml");
	const struct idem_route *route = &cfg->routes[0];

	(void)state;
	assert_string_equal(cfg->registry_url, "https://registry.example:8081/");
	assert_string_equal(cfg->registry_username, "idemd");
	assert_string_equal(cfg->registry_password_env, "REGISTRY_PASSWORD");
	assert_null(cfg->registry_password_file);
	assert_int_equal(cfg->registry_timeout_ms, 2000);
	assert_true(route->needs_avro);
	assert_int_equal(route->key.n_parts, 3);
	assert_int_equal(route->key.parts[0].kind, IDEM_FIELD_AVRO_KEY);
	assert_string_equal(route->key.parts[0].arg, "/tenant");
	assert_int_equal(route->key.parts[2].kind, IDEM_FIELD_AVRO);
	assert_string_equal(route->key.parts[2].arg, "/payment_id");
	assert_int_equal(route->params[1].kind, IDEM_FIELD_AVRO);
	assert_string_equal(route->params[1].arg, "");
	assert_int_equal(route->params[2].kind, IDEM_FIELD_AVRO);
	idem_cfg_free(cfg);

	/* Without the section: no registry, the default timeout. */
	cfg = load_ok("minimal.yaml");
	assert_null(cfg->registry_url);
	assert_int_equal(cfg->registry_timeout_ms, 5000);
	assert_false(cfg->routes[0].needs_avro);
	idem_cfg_free(cfg);
}

/* routes[].value_format: json by default, json-schema framed (with a schema registry). */
static void test_value_format(void **state)
{
	struct idem_cfg *cfg = load_ok("ok_json_schema.yaml");

	(void)state;
	assert_int_equal(cfg->n_routes, 3);
	assert_int_equal(cfg->routes[0].value_format, IDEM_CFG_VALUE_JSON);
	assert_int_equal(cfg->routes[1].value_format, IDEM_CFG_VALUE_JSON_SCHEMA);
	assert_true(cfg->routes[1].needs_json);
	assert_int_equal(cfg->routes[2].value_format, IDEM_CFG_VALUE_JSON);
	idem_cfg_free(cfg);
	cfg = load_ok("minimal.yaml");
	assert_int_equal(cfg->routes[0].value_format, IDEM_CFG_VALUE_JSON);
	idem_cfg_free(cfg);
}

static void test_replies(void **state)
{
	struct idem_cfg *cfg = load_ok("ok_replies.yaml");

	(void)state;
	assert_string_equal(cfg->routes[0].reply_topic, "replies");
	assert_int_equal(cfg->routes[0].reply_key, IDEM_CFG_REPLY_MESSAGE_KEY);
	assert_int_equal(cfg->routes[0].reply_duplicates, 1);
	assert_string_equal(cfg->routes[0].dead_letter_topic, "t.dlt");
	assert_string_equal(cfg->routes[1].reply_topic, "replies-s");
	assert_int_equal(cfg->routes[1].reply_key, IDEM_CFG_REPLY_BUSINESS_KEY);
	assert_int_equal(cfg->routes[1].reply_duplicates, 0);
	assert_null(cfg->routes[1].dead_letter_topic);
	idem_cfg_free(cfg);
}

static void test_minimal_defaults(void **state)
{
	struct idem_cfg *cfg = load_ok("minimal.yaml");
	const struct idem_route *r;

	(void)state;
	assert_string_equal(cfg->brokers, "127.0.0.1:9092");
	assert_string_equal(cfg->group_id, "g");
	/* kafka.topics defaults to the routes' topics. */
	assert_int_equal(cfg->n_topics, 1);
	assert_string_equal(cfg->topics[0], "t");
	assert_int_equal(cfg->n_kafka_props, 0);
	assert_null(cfg->kafka_props);
	assert_string_equal(cfg->conninfo, "dbname=x");
	assert_null(cfg->password_env);
	assert_null(cfg->password_file);
	assert_int_equal(cfg->lock_timeout_ms, 10000);
	assert_int_equal(cfg->statement_timeout_ms, 30000);
	assert_int_equal(cfg->n_routes, 1);
	r = &cfg->routes[0];
	assert_string_equal(r->name, "r");
	assert_string_equal(r->consumer, "g"); /* defaults to kafka.group_id */
	assert_int_equal(r->on_poison, IDEM_CFG_POISON_QUARANTINE);
	assert_int_equal(r->on_payload_mismatch, IDEM_CFG_MISMATCH_LOG);
	assert_int_equal(r->n_params, 1);
	assert_int_equal(r->params[0].kind, IDEM_FIELD_VALUE);
	assert_false(r->needs_json);
	assert_int_equal(cfg->batch_max_messages, 500);
	assert_int_equal(cfg->batch_max_bytes, 16777216);
	assert_int_equal(cfg->batch_max_bytes_total, 268435456);
	assert_int_equal(cfg->batch_max_wait_ms, 20);
	assert_int_equal(cfg->batch_workers, 0); /* one per CPU, 1..8 */
	assert_in_range(idem_cfg_workers(cfg), 1, 8);
	assert_int_equal(cfg->max_key_bytes, 512);
	assert_int_equal(cfg->max_message_bytes, 16777216);
	assert_int_equal(cfg->retry_initial_ms, 100);
	assert_int_equal(cfg->retry_max_ms, 30000);
	assert_int_equal(cfg->max_attempts, 3);
	assert_int_equal(cfg->retention_keep_s, 30 * 86400);
	assert_int_equal(cfg->retention_interval_s, 86400);
	assert_int_equal(cfg->retention_batch, 1000);
	assert_int_equal(cfg->outbox_enabled, 0);
	assert_int_equal(cfg->outbox_poll_interval_ms, 100);
	assert_int_equal(cfg->outbox_batch, 1000);
	assert_int_equal(cfg->outbox_keep_s, 7 * 86400);
	assert_int_equal(cfg->outbox_purge_interval_s, 60);
	assert_null(cfg->routes[0].reply_topic);
	assert_null(cfg->routes[0].dead_letter_topic);
	assert_null(cfg->metrics_listen);
	assert_int_equal(cfg->log_level, IDEM_LOG_INFO);
	idem_cfg_free(cfg);
}

static void test_default_topics_in_route_order(void **state)
{
	static const char text[] = "kafka: {brokers: b, group_id: g}\n"
	                           "postgres: {conninfo: \"dbname=x\"}\n"
	                           "routes:\n"
	                           "  - {name: one, topics: [z, a], business_key: key,\n"
	                           "     handler: {sql: \"SELECT 1\"}}\n"
	                           "  - {name: two, topics: [m], business_key: \"json:/id\",\n"
	                           "     handler: {sql: \"SELECT $1\", params: [offset]}}\n";
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;

	(void)state;
	assert_int_equal(idem_cfg_parse("t.yaml", text, strlen(text), &cfg, &errors), IDEM_OK);
	assert_int_equal(cfg->n_topics, 3);
	assert_string_equal(cfg->topics[0], "z");
	assert_string_equal(cfg->topics[1], "a");
	assert_string_equal(cfg->topics[2], "m");
	assert_false(cfg->routes[0].needs_json);
	assert_true(cfg->routes[1].needs_json); /* from the key alone */
	idem_cfg_free(cfg);
}

static void test_route_for(void **state)
{
	struct idem_cfg *cfg = load_ok("full.yaml");

	(void)state;
	assert_ptr_equal(idem_cfg_route_for(cfg, "payments"), &cfg->routes[0]);
	assert_ptr_equal(idem_cfg_route_for(cfg, "refunds"), &cfg->routes[0]);
	assert_ptr_equal(idem_cfg_route_for(cfg, "orders"), &cfg->routes[1]);
	assert_null(idem_cfg_route_for(cfg, "payment"));
	assert_null(idem_cfg_route_for(cfg, ""));
	assert_null(idem_cfg_route_for(NULL, "orders"));
	idem_cfg_free(cfg);
}

static void test_shipped_example(void **state)
{
	struct idem_cfg *cfg = NULL;
	char *path = data_path("../../../etc/idemd.yaml");
	char *errors = NULL;
	const struct idem_route *r;
	idem_status st;

	(void)state;
	st = idem_cfg_load(path, &cfg, &errors);
	if (st != IDEM_OK)
		fail_msg("etc/idemd.yaml: status %d, errors:\n%s", st, errors ? errors : "(none)");
	assert_string_equal(cfg->path, path);
	assert_string_equal(cfg->brokers, "127.0.0.1:9092");
	assert_string_equal(cfg->conninfo, "host=/run/postgresql dbname=idemd user=idemd");
	assert_int_equal(cfg->n_topics, 1);
	assert_string_equal(cfg->topics[0], "payments");
	r = idem_cfg_route_for(cfg, "payments");
	assert_non_null(r);
	assert_int_equal(r->key.n_parts, 1);
	assert_int_equal(r->key.parts[0].kind, IDEM_FIELD_JSON);
	assert_string_equal(r->key.parts[0].arg, "/payment_id");
	assert_int_equal(r->n_params, 3);
	assert_int_equal(r->params[0].kind, IDEM_FIELD_BUSINESS_KEY);
	assert_string_equal(r->params[1].arg, "/account");
	assert_string_equal(r->params[2].arg, "/amount");
	assert_true(r->needs_json);
	assert_non_null(strstr(r->handler_sql, "INSERT INTO ledger"));
	/* The failure settings it documents are the defaults. */
	assert_int_equal(r->on_poison, IDEM_CFG_POISON_QUARANTINE);
	assert_int_equal(r->on_payload_mismatch, IDEM_CFG_MISMATCH_LOG);
	assert_int_equal(cfg->max_attempts, 3);
	assert_int_equal(cfg->lock_timeout_ms, 10000);
	assert_int_equal(cfg->statement_timeout_ms, 30000);
	idem_cfg_free(cfg);
	free(path);
}

static void test_load_missing_file(void **state)
{
	static struct idem_cfg untouched;
	struct idem_cfg *cfg = &untouched; /* written only on success */
	char *errors = NULL;
	char *path = data_path("cfg/no-such-file.yaml");

	(void)state;
	assert_int_equal(idem_cfg_load(path, &cfg, &errors), IDEM_ERR_IO);
	assert_ptr_equal(cfg, &untouched);
	assert_non_null(errors);
	assert_true(strncmp(errors, path, strlen(path)) == 0);
	assert_non_null(strstr(errors, ": error: cannot open configuration: "));
	assert_non_null(strstr(errors, strerror(ENOENT)));
	free(errors);
	free(path);
}

static void test_load_names_the_path(void **state)
{
	char *path = data_path("cfg/err_log_level.yaml");
	struct idem_cfg *cfg = NULL;
	char *errors = NULL, *want;
	struct idem_buf b = { 0 };

	(void)state;
	assert_int_equal(idem_cfg_load(path, &cfg, &errors), IDEM_ERR_CONFIG);
	assert_null(cfg);
	assert_int_equal(idem_buf_printf(&b, "%s:14:10: error: ", path), IDEM_OK);
	want = b.data;
	assert_non_null(errors);
	assert_true(strncmp(errors, want, strlen(want)) == 0);
	free(errors);
	free(want);
	free(path);
}

static void test_several_errors_reported(void **state)
{
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;
	size_t lines = 0;

	(void)state;
	assert_int_equal(parse_golden("err_many.yaml", &cfg, &errors), IDEM_ERR_CONFIG);
	assert_null(cfg);
	for (const char *p = errors; *p != '\0'; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 6);
	/* In file order, each a complete "file:line:col: error: ..." line. */
	assert_non_null(
	        strstr(errors, "err_many.yaml:2:3: error: missing required key 'group_id'"));
	assert_non_null(strstr(errors, "err_many.yaml:16:10: error: 'log.level'"));
	assert_true(strstr(errors, ":2:3:") < strstr(errors, ":16:10:"));
	free(errors);
}

static void test_never_echoes_password(void **state)
{
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;

	(void)state;
	assert_int_equal(parse_golden("err_passwords.yaml", &cfg, &errors), IDEM_ERR_CONFIG);
	assert_non_null(strstr(errors, "must not contain a password"));
	assert_null(strstr(errors, "s3cr3t"));
	free(errors);
	errors = NULL;
	assert_int_equal(parse_golden("err_password_uri.yaml", &cfg, &errors), IDEM_ERR_CONFIG);
	assert_non_null(strstr(errors, "must not contain a password"));
	assert_null(strstr(errors, "hunter2"));
	free(errors);
	/* schema_registry.url: a password split by '#' or '/' is found and hidden all the same. */
	for (int i = 0; i < 2; i++) {
		errors = NULL;
		assert_int_equal(parse_golden(i == 0 ? "err_registry_url_fragment.yaml"
		                                     : "err_registry_url_path.yaml",
		                              &cfg, &errors),
		                 IDEM_ERR_CONFIG);
		assert_non_null(strstr(errors, "must not contain credentials"));
		assert_null(strstr(errors, "s3c"));
		assert_null(strstr(errors, "r3t"));
		free(errors);
	}
}

static void test_optional_out_params(void **state)
{
	static const char bad[] = "kafka: [\n";
	static const char good[] = "kafka: {brokers: b, group_id: g}\n"
	                           "postgres: {conninfo: \"dbname=x\"}\n"
	                           "routes: [{name: r, topics: [t], business_key: key,"
	                           " handler: {sql: \"SELECT 1\"}}]\n";

	(void)state;
	assert_int_equal(idem_cfg_parse("b.yaml", bad, strlen(bad), NULL, NULL), IDEM_ERR_CONFIG);
	assert_int_equal(idem_cfg_parse("g.yaml", good, strlen(good), NULL, NULL), IDEM_OK);
	assert_int_equal(idem_cfg_parse("e.yaml", NULL, 0, NULL, NULL), IDEM_ERR_CONFIG);
}

static void test_buffer_not_nul_terminated(void **state)
{
	/* Only the first len bytes count: the rest would be a syntax error. */
	static const char text[] = "kafka: {brokers: b, group_id: g}\n"
	                           "postgres: {conninfo: \"dbname=x\"}\n"
	                           "routes: [{name: r, topics: [t], business_key: key,"
	                           " handler: {sql: \"SELECT 1\"}}]\n"
	                           "]]] garbage: [";
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;

	(void)state;
	assert_int_equal(
	        idem_cfg_parse("n.yaml", text, (size_t)(strstr(text, "]]]") - text), &cfg, &errors),
	        IDEM_OK);
	idem_cfg_free(cfg);
	assert_int_equal(idem_cfg_parse("n.yaml", text, strlen(text), &cfg, &errors),
	                 IDEM_ERR_CONFIG);
	assert_non_null(strstr(errors, "n.yaml:4:1: error: invalid yaml: "));
	free(errors);
}

static void test_free_null_and_half_built(void **state)
{
	struct idem_cfg *cfg = calloc(1, sizeof(*cfg));

	(void)state;
	idem_cfg_free(NULL);
	assert_non_null(cfg);
	/* As left by a parse that failed half-way: arrays sized, only some entries filled. */
	cfg->brokers = strdup("b");
	cfg->topics = calloc(3, sizeof(*cfg->topics));
	cfg->n_topics = 3;
	cfg->topics[1] = strdup("t");
	cfg->kafka_props = calloc(2, sizeof(*cfg->kafka_props));
	cfg->n_kafka_props = 1;
	cfg->kafka_props[0].name = strdup("client.id");
	cfg->routes = calloc(2, sizeof(*cfg->routes));
	cfg->n_routes = 2;
	cfg->routes[0].name = strdup("r");
	cfg->routes[0].params = calloc(2, sizeof(*cfg->routes[0].params));
	cfg->routes[0].n_params = 2;
	assert_int_equal(idem_field_parse("json:/a", &cfg->routes[0].params[1], NULL, 0), IDEM_OK);
	idem_cfg_free(cfg); /* ASan/LSan report anything left or freed twice */
}

static void test_sql_params(void **state)
{
	static const struct {
		const char *sql;
		unsigned long max;
		bool multi;
		const char *open;
	} cases[] = {
		{ "SELECT 1", 0, false, NULL },
		{ "SELECT $1, $2", 2, false, NULL },
		{ "SELECT $2, $10, $3", 10, false, NULL },
		{ "SELECT $1::bigint", 1, false, NULL },
		{ "SELECT '$5'", 0, false, NULL },
		{ "SELECT 'it''s $5', $1", 1, false, NULL },
		{ "SELECT E'\\'$5', $1", 1, false, NULL },
		{ "SELECT e'\\\\', $2", 2, false, NULL },
		{ "SELECT \"a$5\", \"b\"\"$6\", $1", 1, false, NULL },
		{ "SELECT a$5, $1", 1, false, NULL },
		{ "SELECT $1 -- $5\n, $2", 2, false, NULL },
		{ "SELECT /* $5 /* $6 */ $7 */ $1", 1, false, NULL },
		{ "SELECT $$ $5 $$, $1", 1, false, NULL },
		{ "SELECT $tag$ $5 $$ $6 $tag$, $2", 2, false, NULL },
		{ "SELECT $a$b$ $1 $a$b$, $3", 3, false, NULL },
		{ "SELECT $1;", 1, false, NULL },
		{ "SELECT $1; -- done\n", 1, false, NULL },
		{ "SELECT $1; SELECT $2", 2, true, NULL },
		{ "SELECT ';', $1", 1, false, NULL },
		{ "SELECT 'open", 0, false, "string literal" },
		{ "SELECT \"open", 0, false, "quoted identifier" },
		{ "SELECT 1 /* open /* */", 0, false, "comment" },
		{ "SELECT $q$ open", 0, false, "dollar-quoted string" },
		{ "SELECT $99999999999999999999", 1000000, false, NULL },
		{ "SELECT $", 0, false, NULL },
		{ "", 0, false, NULL },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool multi = !cases[i].multi;
		const char *open = "unset";
		unsigned long max = idem_lex_sql_params(cases[i].sql, &multi, &open);

		if (max != cases[i].max || multi != cases[i].multi ||
		    (open == NULL) != (cases[i].open == NULL) ||
		    (open != NULL && strcmp(open, cases[i].open) != 0))
			fail_msg("sql '%s': got max %lu multi %d open %s", cases[i].sql, max, multi,
			         open ? open : "NULL");
	}
}

static void test_conninfo_password(void **state)
{
	static const struct {
		const char *conninfo;
		bool has;
	} cases[] = {
		{ "host=/run/postgresql dbname=app user=idemd", false },
		{ "password=x", true },
		{ "host=h password = 'a b' dbname=d", true },
		{ "host=h password=''", false },
		{ "host=h passfile=/etc/pgpass", false },
		{ "application_name='password=x'", false },
		{ "dbname='host=h password=x'", true },
		{ "dbname=postgresql://u:p@h/d", true },
		{ "postgresql://idemd@db/app", false },
		{ "postgresql://idemd:s3cret@db:5432/app", true },
		{ "postgres://idemd:@db/app", false },
		{ "postgresql://db/app?sslmode=require&password=x", true },
		{ "postgresql://db/app?pass%77ord=x", true },
		{ "postgresql:///app?host=/run/postgresql", false },
		{ "postgresql://db/a:b@c", false },
		{ "", false },
		/* Read by libpq itself (PQconninfoParse()): escapes, spaces, percent-encoding. */
		{ "password='it\\'s'", true },
		{ "  password  =  x  ", true },
		{ "dbname=app password=", false },
		{ "postgresql://u:%70@h/d", true },
		{ "postgresql://u:p@[::1]:5432/d", true },
		{ "postgresql://h1,h2:5433/d?target_session_attrs=read-write", false },
		{ "postgresql://h/d?password=", false },
		{ "postgresql://h/d?application_name=a&password=b", true },
		/* A dbname that is itself a conninfo string or a URI, expanded once as libpq does.
		 */
		{ "dbname='postgresql://h/d?password=x'", true },
		{ "dbname=postgres://u:p@h/d", true },
		{ "dbname=postgres://h/d", false },
		{ "dbname='user=u'", false },
		{ "dbname='dbname=\\'password=x\\''", false },
	};
	/* Strings libpq refuses (it would not connect): an error, whatever they hold. */
	static const char *const refused[] = {
		"foo=1 password=x",
		"password=x host",
		"host",
		"postgresql://u:p%zz@h/d",
		"postgresql://h/d?foo=bar&password=x",
		"dbname='foo=1 password=x'",
		"password='x",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool has = !cases[i].has;

		assert_int_equal(idem_lex_conninfo_has_password(cases[i].conninfo, &has), IDEM_OK);
		if (has != cases[i].has)
			fail_msg("conninfo '%s': got %d", cases[i].conninfo, has);
	}
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		bool has = false;

		if (idem_lex_conninfo_has_password(refused[i], &has) != IDEM_ERR_INVALID)
			fail_msg("conninfo '%s' was not refused", refused[i]);
	}
}

static void test_edit_distance(void **state)
{
	(void)state;
	assert_int_equal(idem__cfg_edit_distance("batch", 5, "batch", 5), 0);
	assert_int_equal(idem__cfg_edit_distance("bach", 4, "batch", 5), 1);
	assert_int_equal(idem__cfg_edit_distance("max_mesages", 11, "max_messages", 12), 1);
	assert_int_equal(idem__cfg_edit_distance("brokres", 7, "brokers", 7), 1); /* swap */
	assert_int_equal(idem__cfg_edit_distance("", 0, "log", 3), 3);
	assert_int_equal(idem__cfg_edit_distance("postgres", 8, "routes", 6), 4);
	assert_int_equal(idem__cfg_edit_distance("x", 1, "0123456789012345678901234567890123", 34),
	                 SIZE_MAX);
}

/* Golden cases. */

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void test_golden_case(void **state)
{
	const char *name = *state;
	char rel[256], *path, *expected, *errors = NULL;
	struct idem_cfg *cfg = NULL;
	idem_status r;

	snprintf(rel, sizeof(rel), "cfg/%.*s.expected", (int)(strlen(name) - 5), name);
	path = data_path(rel);
	expected = read_file(path, NULL);
	r = parse_golden(name, &cfg, &errors);
	if (expected[0] == '\0') {
		if (r != IDEM_OK)
			fail_msg("%s must load, got status %d:\n%s", name, r,
			         errors ? errors : "(no text)");
		assert_non_null(cfg);
		idem_cfg_free(cfg);
	} else {
		if (r != IDEM_ERR_CONFIG)
			fail_msg("%s: expected IDEM_ERR_CONFIG, got status %d", name, r);
		assert_null(cfg);
		assert_non_null(errors);
		if (strcmp(errors, expected) != 0)
			fail_msg("%s: errors differ\n--- expected\n%s--- got\n%s", name, expected,
			         errors);
		free(errors);
	}
	free(expected);
	free(path);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the golden *.yaml files; the count in *ret_n. */
static char **golden_names(size_t *ret_n)
{
	const char *dir = getenv("IDEM_TEST_DATA");
	char **names = NULL, path[4096];
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	*ret_n = 0;
	if (dir == NULL)
		return NULL;
	snprintf(path, sizeof(path), "%s/cfg", dir);
	d = opendir(path);
	if (d == NULL)
		return NULL;
	while ((de = readdir(d)) != NULL) {
		if (!has_suffix(de->d_name, ".yaml"))
			continue;
		if (n == cap) {
			char **p;

			cap = cap ? cap * 2 : 32;
			p = realloc(names, cap * sizeof(*names));
			if (p == NULL)
				break;
			names = p;
		}
		names[n] = strdup(de->d_name);
		if (names[n] != NULL)
			n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_str);
	*ret_n = n;
	return names;
}

/* Collects idem_cfg_diff() changes as "path[=value] reload|restart;" in a buffer. */
static void diff_collect(const struct idem_cfg_change *change, void *arg)
{
	struct idem_buf *b = arg;

	assert_int_equal(idem_buf_printf(b, "%s%s%s %s;", change->path, change->value ? "=" : "",
	                                 change->value ? change->value : "",
	                                 change->reload ? "reload" : "restart"),
	                 IDEM_OK);
}

/* The changes from @a to @b (two complete files), as diff_collect() writes them. */
static char *diff_text(const char *a, const char *b, size_t *ret_n)
{
	struct idem_cfg *old = NULL, *cfg = NULL;
	struct idem_buf out = { 0 };
	char *errors = NULL;

	if (idem_cfg_parse("a.yaml", a, strlen(a), &old, &errors) != IDEM_OK)
		fail_msg("a.yaml: %s", errors);
	if (idem_cfg_parse("b.yaml", b, strlen(b), &cfg, &errors) != IDEM_OK)
		fail_msg("b.yaml: %s", errors);
	assert_int_equal(idem_buf_append_str(&out, ""), IDEM_OK);
	*ret_n = idem_cfg_diff(old, cfg, diff_collect, &out);
	assert_int_equal(idem_cfg_diff(old, cfg, NULL, NULL), *ret_n);
	idem_cfg_free(old);
	idem_cfg_free(cfg);
	return out.data;
}

#define DIFF_BASE(level, max_messages, sql2, route3)                                               \
	"kafka: {brokers: b, group_id: g}\n"                                                       \
	"postgres: {conninfo: \"dbname=x\"}\n"                                                     \
	"routes:\n"                                                                                \
	"  - {name: one, topics: [z], business_key: key, handler: {sql: \"SELECT 1\"}}\n"          \
	"  - {name: two, topics: [m], business_key: key,\n"                                        \
	"     handler: {sql: \"" sql2 "\", params: [offset]}}\n" route3                            \
	"batch: {max_messages: " max_messages "}\n"                                                \
	"log: {level: " level "}\n"

static void test_diff(void **state)
{
	static const char base[] = DIFF_BASE("info", "500", "SELECT $1", "");
	char *text;
	size_t n;

	(void)state;
	/* The same file: nothing. */
	text = diff_text(base, base, &n);
	assert_int_equal(n, 0);
	assert_string_equal(text, "");
	free(text);

	/* One reloadable and one restart-only setting, in table order, each with its value. */
	text = diff_text(base, DIFF_BASE("debug", "10", "SELECT $1", ""), &n);
	assert_int_equal(n, 2);
	assert_string_equal(text, "batch.max_messages=10 restart;log.level=debug reload;");
	free(text);

	/* A route's statement: restart-only, named by the route's position. */
	text = diff_text(base, DIFF_BASE("info", "500", "SELECT $1 + 1", ""), &n);
	assert_int_equal(n, 1);
	assert_string_equal(text, "routes[1].handler.sql=SELECT $1 + 1 restart;");
	free(text);

	/* Another route: "routes" as a whole, and the kafka.topics computed from them. */
	text = diff_text(base,
	                 DIFF_BASE("info", "500", "SELECT $1",
	                           "  - {name: three, topics: [q], business_key: key,\n"
	                           "     handler: {sql: \"SELECT 3\"}}\n"),
	                 &n);
	assert_int_equal(n, 2);
	assert_string_equal(text, "kafka.topics restart;routes restart;");
	free(text);
}

/* Every key of every table set, the optional strings and lists included. */
static const char populated[] =
        "kafka:\n"
        "  brokers: b\n"
        "  group_id: g\n"
        "  topics: [t1, t2]\n"
        "  properties: {client.id: c, session.timeout.ms: 6000}\n"
        "postgres:\n"
        "  conninfo: \"dbname=x\"\n"
        "  password_env: PGPW\n"
        "  lock_timeout_ms: 1\n"
        "  statement_timeout_ms: 2\n"
        "routes:\n"
        "  - name: one\n"
        "    topics: [t1]\n"
        "    consumer: c1\n"
        "    business_key: \"${header:tenant}/${json:/id}\"\n"
        "    handler: {sql: \"SELECT $1, $2\", params: [business_key, \"json:/a\"], mode: set}\n"
        "    on_poison: halt\n"
        "    on_payload_mismatch: quarantine\n"
        "    reply: {topic: r1, key: message_key, duplicates: true}\n"
        "    dead_letter_topic: d1\n"
        "  - name: two\n"
        "    topics: [t2]\n"
        "    business_key: key\n"
        "    handler: {sql: \"SELECT 1\"}\n"
        "batch: {max_messages: 1, max_bytes: 1024, max_bytes_total: 2048, max_wait_ms: 1,"
        " workers: 1}\n"
        "limits: {max_key_bytes: 1, max_message_bytes: 1024}\n"
        "retry: {initial_ms: 1, max_ms: 2, max_attempts: 1}\n"
        "retention: {keep: 1h, interval: 1s, batch: 1}\n"
        "outbox: {enabled: true, poll_interval_ms: 1, batch: 1, keep: 1s, purge_interval: 1s}\n"
        "metrics: {listen: \"127.0.0.1:1\"}\n"
        "log: {level: warn}\n";

/*
 * idem_cfg_free() walks the same tables as parsing: a configuration holding a value for every
 * key is freed whole (ASan/LSan report anything left or freed twice), and comparing it with
 * itself or another one reads every value.
 */
static void test_free_fully_populated(void **state)
{
	static const char minimal[] = "kafka: {brokers: b, group_id: g}\n"
	                              "postgres: {conninfo: \"dbname=x\"}\n"
	                              "routes: [{name: one, topics: [t1], business_key: key,"
	                              " handler: {sql: \"SELECT 1\"}}]\n";
	struct idem_cfg *cfg = NULL, *min = NULL;
	const struct idem_route *r;
	char *errors = NULL, *text;
	size_t n;

	(void)state;
	if (idem_cfg_parse("p.yaml", populated, strlen(populated), &cfg, &errors) != IDEM_OK)
		fail_msg("p.yaml: %s", errors ? errors : "?");
	assert_int_equal(idem_cfg_parse("m.yaml", minimal, strlen(minimal), &min, NULL), IDEM_OK);
	assert_int_equal(cfg->n_topics, 2);
	assert_int_equal(cfg->n_kafka_props, 2);
	assert_non_null(cfg->password_env);
	assert_non_null(cfg->metrics_listen);
	assert_int_equal(cfg->log_level, IDEM_LOG_WARN);
	r = &cfg->routes[0];
	assert_string_equal(r->consumer, "c1");
	assert_int_equal(r->key.n_parts, 3);
	assert_int_equal(r->n_params, 2);
	assert_string_equal(r->reply_topic, "r1");
	assert_string_equal(r->dead_letter_topic, "d1");
	assert_string_equal(cfg->routes[1].consumer, "g");
	assert_int_equal(idem_cfg_diff(cfg, cfg, NULL, NULL), 0);
	idem_cfg_free(min);
	idem_cfg_free(cfg);
	/* Against the minimal file, every setting it changes, routes as a whole (one route
	 * against two), each with its value if it has a single one. */
	text = diff_text(minimal, populated, &n);
	assert_string_equal(
	        text,
	        "kafka.topics restart;kafka.properties restart;postgres.password_env=PGPW restart;"
	        "postgres.lock_timeout_ms=1 restart;postgres.statement_timeout_ms=2 restart;"
	        "routes restart;batch.max_messages=1 restart;batch.max_bytes=1024 restart;"
	        "batch.max_bytes_total=2048 restart;batch.max_wait_ms=1 restart;"
	        "batch.workers=1 restart;limits.max_key_bytes=1 restart;"
	        "limits.max_message_bytes=1024 restart;retry.initial_ms=1 restart;"
	        "retry.max_ms=2 restart;retry.max_attempts=1 restart;retention.keep=3600s restart;"
	        "retention.interval=1s restart;retention.batch=1 restart;"
	        "outbox.enabled=true restart;outbox.poll_interval_ms=1 restart;"
	        "outbox.batch=1 restart;outbox.keep=1s restart;outbox.purge_interval=1s restart;"
	        "metrics.listen=127.0.0.1:1 restart;log.level=warn reload;");
	assert_int_equal(n, 26);
	free(text);
}

/* log.level's names are idem_log's, value for value. */
static void test_log_level_names(void **state)
{
	(void)state;
	for (int l = IDEM_LOG_ERROR; l <= IDEM_LOG_DEBUG; l++) {
		enum idem_log_level parsed;
		struct idem_cfg *cfg = NULL;
		char text[512];

		snprintf(text, sizeof(text),
		         "kafka: {brokers: b, group_id: g}\npostgres: {conninfo: \"dbname=x\"}\n"
		         "routes: [{name: r, topics: [t], business_key: key,"
		         " handler: {sql: \"SELECT 1\"}}]\nlog: {level: %s}\n",
		         idem_log_level_name((enum idem_log_level)l));
		assert_int_equal(idem_cfg_parse("l.yaml", text, strlen(text), &cfg, NULL), IDEM_OK);
		assert_int_equal(cfg->log_level, l);
		assert_true(idem_log_level_parse(idem_log_level_name(cfg->log_level), &parsed));
		assert_int_equal(parsed, l);
		idem_cfg_free(cfg);
	}
}

static void test_golden_dir(void **state)
{
	size_t n;
	char **names = golden_names(&n);

	(void)state;
	data_dir();
	if (n < GOLDEN_MIN)
		fail_msg("found %zu golden cases in $IDEM_TEST_DATA/cfg, expected at least %d", n,
		         GOLDEN_MIN);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* @s with every run of whitespace made one space, and none at either end. */
static void squeeze(char *s)
{
	char *o = s;
	bool space = false;

	for (char *p = s; *p != '\0'; p++) {
		if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
			space = o != s;
			continue;
		}
		if (space)
			*o++ = ' ';
		space = false;
		*o++ = *p;
	}
	*o = '\0';
}

/*
 * One copy of the example handlers: the shipped etc/idemd.yaml carries exactly
 * sql/examples/payments_set.sql (in set mode), the statement the tests and the benchmark read.
 */
struct keys_seen {
	size_t n;
	bool top, leaf, item, nested;
};

static void key_seen(const char *path, void *arg)
{
	struct keys_seen *k = arg;

	k->n++;
	k->top |= strcmp(path, "kafka") == 0;
	k->leaf |= strcmp(path, "kafka.brokers") == 0;
	k->item |= strcmp(path, "routes[].name") == 0;
	k->nested |= strcmp(path, "routes[].handler.sql") == 0;
}

/* idem_cfg_keys() walks every table (tests/check_docs.sh compares it with idemd.yaml(5)). */
static void test_keys(void **state)
{
	struct keys_seen k = { 0 };

	(void)state;
	idem_cfg_keys(key_seen, &k);
	assert_true(k.top && k.leaf && k.item && k.nested);
	assert_true(k.n > 50);
}

static void test_example_config_matches_examples(void **state)
{
	char *etc = data_path("../../../etc/idemd.yaml");
	char *sqlpath = data_path("../../../sql/examples/payments_set.sql");
	char *errors = NULL, *want;
	struct idem_cfg *cfg = NULL;
	char *got;

	(void)state;
	if (idem_cfg_load(etc, &cfg, &errors) != IDEM_OK)
		fail_msg("etc/idemd.yaml does not load: %s", errors ? errors : "?");
	assert_int_equal(cfg->n_routes, 1);
	assert_int_equal(cfg->routes[0].handler_mode, IDEM_CFG_MODE_SET);
	want = read_file(sqlpath, NULL);
	got = strdup(cfg->routes[0].handler_sql);
	assert_non_null(got);
	squeeze(want);
	squeeze(got);
	assert_string_equal(got, want);
	free(got);
	free(want);
	idem_cfg_free(cfg);
	free(sqlpath);
	free(etc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_minimal_defaults),
		cmocka_unit_test(test_outbox),
		cmocka_unit_test(test_avro),
		cmocka_unit_test(test_value_format),
		cmocka_unit_test(test_replies),
		cmocka_unit_test(test_default_topics_in_route_order),
		cmocka_unit_test(test_route_for),
		cmocka_unit_test(test_shipped_example),
		cmocka_unit_test(test_load_missing_file),
		cmocka_unit_test(test_load_names_the_path),
		cmocka_unit_test(test_several_errors_reported),
		cmocka_unit_test(test_never_echoes_password),
		cmocka_unit_test(test_optional_out_params),
		cmocka_unit_test(test_buffer_not_nul_terminated),
		cmocka_unit_test(test_free_null_and_half_built),
		cmocka_unit_test(test_free_fully_populated),
		cmocka_unit_test(test_log_level_names),
		cmocka_unit_test(test_sql_params),
		cmocka_unit_test(test_conninfo_password),
		cmocka_unit_test(test_edit_distance),
		cmocka_unit_test(test_diff),
		cmocka_unit_test(test_example_config_matches_examples),
		cmocka_unit_test(test_golden_dir),
		cmocka_unit_test(test_keys),
	};
	struct CMUnitTest *golden;
	size_t n;
	char **names = golden_names(&n);
	int failed;

	failed = cmocka_run_group_tests(tests, NULL, NULL);
	golden = calloc(n ? n : 1, sizeof(*golden));
	if (golden == NULL)
		return 1;
	for (size_t i = 0; i < n; i++)
		golden[i] = (struct CMUnitTest){ names[i], test_golden_case, NULL, NULL, names[i] };
	if (n > 0)
		failed += _cmocka_run_group_tests("golden", golden, n, NULL, NULL);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(golden);
	return failed;
}
