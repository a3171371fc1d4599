/*
 * idem_cfg.c - the settings: one table per section (key, type, default, range, reloadable),
 * the conversions of the value types only idem_cfg knows (templates, message fields, kafka
 * properties), the checks that need to know what a setting means, idemd's policy for librdkafka
 * properties, and building struct idem_cfg.
 *
 * The engine driven by the tables (walking the YAML, errors and their positions, value
 * conversion, the visit budget, freeing and comparing configurations) is idem_cfg_walk.c; the
 * conninfo and SQL lexers are idem_lex.c.
 */
#include "idem_cfg.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "idem_cfg_int.h"
#include "idem_cfg_walk.h"
#include "idem_lex.h"

#define CFG_MAX_FILE  ((size_t)64 << 20) /* refuse to read larger files */
#define CFG_MAX_TOPIC 249                /* Kafka's limit on topic name length */

/* What the checks of one load keep beyond the walk (struct cfg_ctx.user). */
struct cfg_load {
	rd_kafka_conf_t *rkconf; /* scratch: validates kafka.properties, never used to connect */
};

/* Value types the walker does not know (struct cfg_conv): making, comparing, freeing one. */

static idem_status cfg_kv_pair(const char *name, const char *value, void *ret)
{
	struct idem_kv *kv = ret;

	kv->name = strdup(name);
	kv->value = strdup(value);
	return kv->name != NULL && kv->value != NULL ? IDEM_OK : IDEM_ERR_NOMEM;
}

static bool cfg_kv_eq(const void *a, const void *b)
{
	const struct idem_kv *x = a, *y = b;

	return idem__cfg_str_eq(x->name, y->name) && idem__cfg_str_eq(x->value, y->value);
}

static void cfg_kv_done(void *v)
{
	struct idem_kv *kv = v;

	free(kv->name);
	free(kv->value);
}

static idem_status cfg_field_parse(const char *s, void *ret, char *why, size_t len)
{
	return idem_field_parse(s, ret, why, len);
}

static bool cfg_field_eq(const void *a, const void *b)
{
	const struct idem_field *x = a, *y = b;

	return x->kind == y->kind && idem__cfg_str_eq(x->arg, y->arg);
}

static void cfg_field_done(void *v)
{
	idem_field_done(v);
}

static idem_status cfg_template_parse(const char *s, void *ret, char *why, size_t len)
{
	return idem_template_parse(s, ret, why, len);
}

static bool cfg_template_eq(const void *a, const void *b)
{
	const struct idem_template *x = a, *y = b;

	for (size_t i = 0; x->n_parts == y->n_parts && i < x->n_parts; i++) {
		if (!cfg_field_eq(&x->parts[i], &y->parts[i]))
			return false;
	}
	return x->n_parts == y->n_parts;
}

static void cfg_template_done(void *v)
{
	idem_template_done(v);
}

static const struct cfg_conv cfg_kv_conv = { sizeof(struct idem_kv), NULL, cfg_kv_pair, cfg_kv_eq,
	                                     cfg_kv_done };
static const struct cfg_conv cfg_field_conv = { sizeof(struct idem_field), cfg_field_parse, NULL,
	                                        cfg_field_eq, cfg_field_done };
static const struct cfg_conv cfg_template_conv = { sizeof(struct idem_template), cfg_template_parse,
	                                           NULL, cfg_template_eq, cfg_template_done };

/*
 * Section tables. A key marked .reload is one that idemd's SIGHUP handler applies to the
 * running daemon (daemon/idemd.c, reload()); mark one only together with the code that applies
 * it. Sections and lists carry no mark: idem_cfg_diff() reports their leaves, and every route
 * key is restart-only, so a changed route always needs a restart.
 */

static cfg_check_value_fn cfg_check_conninfo, cfg_check_topic, cfg_check_consumer,
        cfg_check_metrics_listen;
static cfg_check_pair_fn cfg_check_property;
static cfg_check_section_fn cfg_check_top, cfg_check_kafka, cfg_check_postgres, cfg_check_batch,
        cfg_check_retry, cfg_check_handler;

enum { KAFKA_BROKERS, KAFKA_GROUP_ID, KAFKA_TOPICS, KAFKA_PROPERTIES, KAFKA_N };
static const struct cfg_key kafka_keys[] = {
	[KAFKA_BROKERS] = { .name = "brokers",
	                    .type = CFG_STRING,
	                    .required = true,
	                    .off = offsetof(struct idem_cfg, brokers) },
	[KAFKA_GROUP_ID] = { .name = "group_id",
	                     .type = CFG_STRING,
	                     .required = true,
	                     .off = offsetof(struct idem_cfg, group_id) },
	[KAFKA_TOPICS] = { .name = "topics",
	                   .type = CFG_STRINGS,
	                   .off = offsetof(struct idem_cfg, topics),
	                   .n_off = offsetof(struct idem_cfg, n_topics),
	                   .noun = "topic",
	                   .check = cfg_check_topic },
	[KAFKA_PROPERTIES] = { .name = "properties",
	                       .type = CFG_PROPERTIES,
	                       .off = offsetof(struct idem_cfg, kafka_props),
	                       .n_off = offsetof(struct idem_cfg, n_kafka_props),
	                       .check_pair = cfg_check_property,
	                       .conv = &cfg_kv_conv },
};
static const struct cfg_section kafka_section = { kafka_keys, KAFKA_N, cfg_check_kafka };

enum {
	PG_CONNINFO,
	PG_PASSWORD_ENV,
	PG_PASSWORD_FILE,
	PG_LOCK_TIMEOUT_MS,
	PG_STATEMENT_TIMEOUT_MS,
	PG_N
};
static const struct cfg_key postgres_keys[] = {
	[PG_CONNINFO] = { .name = "conninfo",
	                  .type = CFG_STRING,
	                  .required = true,
	                  .off = offsetof(struct idem_cfg, conninfo),
	                  .check = cfg_check_conninfo },
	[PG_PASSWORD_ENV] = { .name = "password_env",
	                      .type = CFG_STRING,
	                      .off = offsetof(struct idem_cfg, password_env) },
	[PG_PASSWORD_FILE] = { .name = "password_file",
	                       .type = CFG_STRING,
	                       .off = offsetof(struct idem_cfg, password_file) },
	[PG_LOCK_TIMEOUT_MS] = { .name = "lock_timeout_ms",
	                         .type = CFG_INT,
	                         .def = 10000,
	                         .min = 0,
	                         .max = 3600000,
	                         .off = offsetof(struct idem_cfg, lock_timeout_ms) },
	[PG_STATEMENT_TIMEOUT_MS] = { .name = "statement_timeout_ms",
	                              .type = CFG_INT,
	                              .def = 30000,
	                              .min = 0,
	                              .max = 86400000,
	                              .off = offsetof(struct idem_cfg, statement_timeout_ms) },
};
static const struct cfg_section postgres_section = { postgres_keys, PG_N, cfg_check_postgres };

static const char *const cfg_mode_names[] = { "row", "set", NULL };

enum { HANDLER_SQL, HANDLER_PARAMS, HANDLER_MODE, HANDLER_N };
static const struct cfg_key handler_keys[] = {
	[HANDLER_SQL] = { .name = "sql",
	                  .type = CFG_STRING,
	                  .required = true,
	                  .off = offsetof(struct idem_route, handler_sql) },
	[HANDLER_PARAMS] = { .name = "params",
	                     .type = CFG_VALUES,
	                     .off = offsetof(struct idem_route, params),
	                     .n_off = offsetof(struct idem_route, n_params),
	                     .conv = &cfg_field_conv },
	[HANDLER_MODE] = { .name = "mode",
	                   .type = CFG_ENUM,
	                   .def = IDEM_CFG_MODE_ROW,
	                   .off = offsetof(struct idem_route, handler_mode),
	                   .names = cfg_mode_names },
};
static const struct cfg_section handler_section = { handler_keys, HANDLER_N, cfg_check_handler };

/* CFG_ENUM values are stored through an int. */
_Static_assert(sizeof(enum idem_cfg_poison) == sizeof(int) &&
                       sizeof(enum idem_cfg_mismatch) == sizeof(int) &&
                       sizeof(enum idem_cfg_mode) == sizeof(int) &&
                       sizeof(enum idem_cfg_reply_key) == sizeof(int) &&
                       sizeof(enum idem_cfg_value_format) == sizeof(int) &&
                       sizeof(enum idem_log_level) == sizeof(int),
               "CFG_ENUM targets must be int-sized");
static const char *const cfg_poison_names[] = { "quarantine", "halt", NULL };
static const char *const cfg_reply_key_names[] = { "business_key", "message_key", NULL };
static const char *const cfg_bool_names[] = { "false", "true", NULL };

enum { REPLY_TOPIC, REPLY_KEY, REPLY_DUPLICATES, REPLY_N };
static const struct cfg_key reply_keys[] = {
	[REPLY_TOPIC] = { .name = "topic",
	                  .type = CFG_STRING,
	                  .required = true,
	                  .off = offsetof(struct idem_route, reply_topic),
	                  .check = cfg_check_topic },
	[REPLY_KEY] = { .name = "key",
	                .type = CFG_ENUM,
	                .def = IDEM_CFG_REPLY_BUSINESS_KEY,
	                .off = offsetof(struct idem_route, reply_key),
	                .names = cfg_reply_key_names },
	[REPLY_DUPLICATES] = { .name = "duplicates",
	                       .type = CFG_ENUM,
	                       .def = 0,
	                       .off = offsetof(struct idem_route, reply_duplicates),
	                       .names = cfg_bool_names },
};
static const struct cfg_section reply_section = { reply_keys, REPLY_N, NULL };
static const char *const cfg_mismatch_names[] = { "ignore", "log", "quarantine", NULL };
static const char *const cfg_value_format_names[] = { "json", "json-schema", NULL };

enum {
	ROUTE_NAME,
	ROUTE_TOPICS,
	ROUTE_CONSUMER,
	ROUTE_KEY,
	ROUTE_VALUE_FORMAT,
	ROUTE_VALIDATE,
	ROUTE_HANDLER,
	ROUTE_ON_POISON,
	ROUTE_ON_PAYLOAD_MISMATCH,
	ROUTE_REPLY,
	ROUTE_DEAD_LETTER_TOPIC,
	ROUTE_N
};
static const struct cfg_key route_keys[] = {
	[ROUTE_NAME] = { .name = "name",
	                 .type = CFG_STRING,
	                 .required = true,
	                 .unique = true,
	                 .off = offsetof(struct idem_route, name) },
	[ROUTE_TOPICS] = { .name = "topics",
	                   .type = CFG_STRINGS,
	                   .required = true,
	                   .off = offsetof(struct idem_route, topics),
	                   .n_off = offsetof(struct idem_route, n_topics),
	                   .noun = "topic",
	                   .check = cfg_check_topic },
	[ROUTE_CONSUMER] = { .name = "consumer",
	                     .type = CFG_STRING,
	                     .off = offsetof(struct idem_route, consumer),
	                     .check = cfg_check_consumer },
	[ROUTE_KEY] = { .name = "business_key",
	                .type = CFG_VALUE,
	                .required = true,
	                .off = offsetof(struct idem_route, key),
	                .conv = &cfg_template_conv },
	[ROUTE_VALUE_FORMAT] = { .name = "value_format",
	                         .type = CFG_ENUM,
	                         .def = IDEM_CFG_VALUE_JSON,
	                         .off = offsetof(struct idem_route, value_format),
	                         .names = cfg_value_format_names },
	[ROUTE_VALIDATE] = { .name = "validate",
	                     .type = CFG_ENUM,
	                     .def = 0,
	                     .off = offsetof(struct idem_route, validate),
	                     .names = cfg_bool_names },
	[ROUTE_HANDLER] = { .name = "handler",
	                    .type = CFG_SECTION,
	                    .required = true,
	                    .sub = &handler_section },
	[ROUTE_ON_POISON] = { .name = "on_poison",
	                      .type = CFG_ENUM,
	                      .def = IDEM_CFG_POISON_QUARANTINE,
	                      .off = offsetof(struct idem_route, on_poison),
	                      .names = cfg_poison_names },
	[ROUTE_ON_PAYLOAD_MISMATCH] = { .name = "on_payload_mismatch",
	                                .type = CFG_ENUM,
	                                .def = IDEM_CFG_MISMATCH_LOG,
	                                .off = offsetof(struct idem_route, on_payload_mismatch),
	                                .names = cfg_mismatch_names },
	[ROUTE_REPLY] = { .name = "reply", .type = CFG_SECTION, .sub = &reply_section },
	[ROUTE_DEAD_LETTER_TOPIC] = { .name = "dead_letter_topic",
	                              .type = CFG_STRING,
	                              .off = offsetof(struct idem_route, dead_letter_topic),
	                              .check = cfg_check_topic },
};
static const struct cfg_section route_section = { route_keys, ROUTE_N, NULL };

enum {
	BATCH_MAX_MESSAGES,
	BATCH_MAX_BYTES,
	BATCH_MAX_BYTES_TOTAL,
	BATCH_MAX_WAIT_MS,
	BATCH_WORKERS,
	BATCH_N
};
static const struct cfg_key batch_keys[] = {
	[BATCH_MAX_MESSAGES] = { .name = "max_messages",
	                         .type = CFG_INT,
	                         .def = 500,
	                         .min = 1,
	                         .max = 100000,
	                         .off = offsetof(struct idem_cfg, batch_max_messages) },
	[BATCH_MAX_BYTES] = { .name = "max_bytes",
	                      .type = CFG_SIZE,
	                      .def = 16777216,
	                      .min = 1024,
	                      .max = 1073741824,
	                      .off = offsetof(struct idem_cfg, batch_max_bytes) },
	[BATCH_MAX_BYTES_TOTAL] = { .name = "max_bytes_total",
	                            .type = CFG_SIZE,
	                            .def = 268435456,
	                            .min = 1024,
	                            .max = 68719476736,
	                            .off = offsetof(struct idem_cfg, batch_max_bytes_total) },
	[BATCH_MAX_WAIT_MS] = { .name = "max_wait_ms",
	                        .type = CFG_INT,
	                        .def = 20,
	                        .min = 0,
	                        .max = 60000,
	                        .off = offsetof(struct idem_cfg, batch_max_wait_ms) },
	[BATCH_WORKERS] = { .name = "workers",
	                    .type = CFG_INT,
	                    .def = 0,
	                    .min = 0,
	                    .max = 64,
	                    .off = offsetof(struct idem_cfg, batch_workers) },
};
static const struct cfg_section batch_section = { batch_keys, BATCH_N, cfg_check_batch };

enum { LIMITS_MAX_KEY_BYTES, LIMITS_MAX_MESSAGE_BYTES, LIMITS_N };
static const struct cfg_key limits_keys[] = {
	[LIMITS_MAX_KEY_BYTES] = { .name = "max_key_bytes",
	                           .type = CFG_SIZE,
	                           .def = 512,
	                           .min = 1,
	                           .max = 2048,
	                           .off = offsetof(struct idem_cfg, max_key_bytes) },
	[LIMITS_MAX_MESSAGE_BYTES] = { .name = "max_message_bytes",
	                               .type = CFG_SIZE,
	                               .def = 16777216,
	                               .min = 1024,
	                               .max = 1073741824,
	                               .off = offsetof(struct idem_cfg, max_message_bytes) },
};
static const struct cfg_section limits_section = { limits_keys, LIMITS_N, NULL };

enum { RETRY_INITIAL_MS, RETRY_MAX_MS, RETRY_MAX_ATTEMPTS, RETRY_N };
static const struct cfg_key retry_keys[] = {
	[RETRY_INITIAL_MS] = { .name = "initial_ms",
	                       .type = CFG_INT,
	                       .def = 100,
	                       .min = 1,
	                       .max = 60000,
	                       .off = offsetof(struct idem_cfg, retry_initial_ms) },
	[RETRY_MAX_MS] = { .name = "max_ms",
	                   .type = CFG_INT,
	                   .def = 30000,
	                   .min = 1,
	                   .max = 3600000,
	                   .off = offsetof(struct idem_cfg, retry_max_ms) },
	[RETRY_MAX_ATTEMPTS] = { .name = "max_attempts",
	                         .type = CFG_INT,
	                         .def = 3,
	                         .min = 1,
	                         .max = 100,
	                         .off = offsetof(struct idem_cfg, max_attempts) },
};
static const struct cfg_section retry_section = { retry_keys, RETRY_N, cfg_check_retry };

enum { METRICS_LISTEN, METRICS_N };
static const struct cfg_key metrics_keys[] = {
	[METRICS_LISTEN] = { .name = "listen",
	                     .type = CFG_STRING,
	                     .off = offsetof(struct idem_cfg, metrics_listen),
	                     .check = cfg_check_metrics_listen },
};
static const struct cfg_section metrics_section = { metrics_keys, METRICS_N, NULL };

enum { RETENTION_KEEP, RETENTION_INTERVAL, RETENTION_BATCH, RETENTION_N };
static const struct cfg_key retention_keys[] = {
	[RETENTION_KEEP] = { .name = "keep",
	                     .type = CFG_DURATION,
	                     .def = 30 * 86400,
	                     .min = 60,
	                     .max = 100LL * 365 * 86400,
	                     .off = offsetof(struct idem_cfg, retention_keep_s) },
	[RETENTION_INTERVAL] = { .name = "interval",
	                         .type = CFG_DURATION,
	                         .def = 86400,
	                         .min = 1,
	                         .max = 7 * 86400,
	                         .off = offsetof(struct idem_cfg, retention_interval_s) },
	[RETENTION_BATCH] = { .name = "batch",
	                      .type = CFG_INT,
	                      .def = 1000,
	                      .min = 1,
	                      .max = 100000,
	                      .off = offsetof(struct idem_cfg, retention_batch) },
};
static const struct cfg_section retention_section = { retention_keys, RETENTION_N, NULL };

enum {
	OUTBOX_ENABLED,
	OUTBOX_POLL_INTERVAL_MS,
	OUTBOX_BATCH,
	OUTBOX_KEEP,
	OUTBOX_PURGE_INTERVAL,
	OUTBOX_N
};
static const struct cfg_key outbox_keys[] = {
	[OUTBOX_ENABLED] = { .name = "enabled",
	                     .type = CFG_ENUM,
	                     .def = 0,
	                     .off = offsetof(struct idem_cfg, outbox_enabled),
	                     .names = cfg_bool_names },
	[OUTBOX_POLL_INTERVAL_MS] = { .name = "poll_interval_ms",
	                              .type = CFG_INT,
	                              .def = 100,
	                              .min = 1,
	                              .max = 60000,
	                              .off = offsetof(struct idem_cfg, outbox_poll_interval_ms) },
	[OUTBOX_BATCH] = { .name = "batch",
	                   .type = CFG_INT,
	                   .def = 1000,
	                   .min = 1,
	                   .max = 100000,
	                   .off = offsetof(struct idem_cfg, outbox_batch) },
	[OUTBOX_KEEP] = { .name = "keep",
	                  .type = CFG_DURATION,
	                  .def = 7 * 86400,
	                  .min = 1,
	                  .max = 100LL * 365 * 86400,
	                  .off = offsetof(struct idem_cfg, outbox_keep_s) },
	[OUTBOX_PURGE_INTERVAL] = { .name = "purge_interval",
	                            .type = CFG_DURATION,
	                            .def = 60,
	                            .min = 1,
	                            .max = 7 * 86400,
	                            .off = offsetof(struct idem_cfg, outbox_purge_interval_s) },
};
static const struct cfg_section outbox_section = { outbox_keys, OUTBOX_N, NULL };

/* idem_log's names of enum idem_log_level, by value (test_idem_cfg checks that they agree). */
static const char *const cfg_log_level_names[] = { "error", "warn", "info", "debug", NULL };

enum { LOG_LEVEL, LOG_N };
static const struct cfg_key log_keys[] = {
	[LOG_LEVEL] = { .name = "level",
	                .type = CFG_ENUM,
	                .reload = true,
	                .def = IDEM_LOG_INFO,
	                .off = offsetof(struct idem_cfg, log_level),
	                .names = cfg_log_level_names },
};
static const struct cfg_section log_section = { log_keys, LOG_N, NULL };

enum {
	TOP_KAFKA,
	TOP_POSTGRES,
	TOP_ROUTES,
	TOP_BATCH,
	TOP_LIMITS,
	TOP_RETRY,
	TOP_RETENTION,
	TOP_OUTBOX,
	TOP_REGISTRY,
	TOP_METRICS,
	TOP_LOG,
	TOP_N
};
static const struct cfg_key top_keys[] = {
	[TOP_KAFKA] = { .name = "kafka",
	                .type = CFG_SECTION,
	                .required = true,
	                .sub = &kafka_section },
	[TOP_POSTGRES] = { .name = "postgres",
	                   .type = CFG_SECTION,
	                   .required = true,
	                   .sub = &postgres_section },
	[TOP_ROUTES] = { .name = "routes",
	                 .type = CFG_LIST,
	                 .required = true,
	                 .off = offsetof(struct idem_cfg, routes),
	                 .n_off = offsetof(struct idem_cfg, n_routes),
	                 .size = sizeof(struct idem_route),
	                 .noun = "route",
	                 .sub = &route_section },
	[TOP_BATCH] = { .name = "batch", .type = CFG_SECTION, .sub = &batch_section },
	[TOP_LIMITS] = { .name = "limits", .type = CFG_SECTION, .sub = &limits_section },
	[TOP_RETRY] = { .name = "retry", .type = CFG_SECTION, .sub = &retry_section },
	[TOP_RETENTION] = { .name = "retention", .type = CFG_SECTION, .sub = &retention_section },
	[TOP_OUTBOX] = { .name = "outbox", .type = CFG_SECTION, .sub = &outbox_section },
	[TOP_REGISTRY] = { .name = "schema_registry",
	                   .type = CFG_SECTION,
	                   .sub = &idem__cfg_registry_section },
	[TOP_METRICS] = { .name = "metrics", .type = CFG_SECTION, .sub = &metrics_section },
	[TOP_LOG] = { .name = "log", .type = CFG_SECTION, .sub = &log_section },
};
static const struct cfg_section top_section = { top_keys, TOP_N, cfg_check_top };

_Static_assert(KAFKA_N <= CFG_MAX_KEYS && PG_N <= CFG_MAX_KEYS && HANDLER_N <= CFG_MAX_KEYS &&
                       ROUTE_N <= CFG_MAX_KEYS && BATCH_N <= CFG_MAX_KEYS &&
                       LIMITS_N <= CFG_MAX_KEYS && RETRY_N <= CFG_MAX_KEYS &&
                       LOG_N <= CFG_MAX_KEYS && TOP_N <= CFG_MAX_KEYS &&
                       METRICS_N <= CFG_MAX_KEYS && RETENTION_N <= CFG_MAX_KEYS &&
                       OUTBOX_N <= CFG_MAX_KEYS && REPLY_N <= CFG_MAX_KEYS,
               "CFG_MAX_KEYS is too small");

/*
 * idemd's policy for librdkafka's consumer properties (struct idem_cfg_kafka_prop), in the
 * order idem_consumer_conf() sets them. A managed one cannot be overridden: that would break
 * the offset discipline (offsets are stored only after the database commit) or the
 * subscription.
 */
static const struct idem_cfg_kafka_prop cfg_kafka_props[] = {
	{ "group.id", NULL, true, "kafka.group_id" },
	{ "bootstrap.servers", NULL, true, "kafka.brokers" },
	{ "metadata.broker.list", NULL, true, "kafka.brokers" }, /* bootstrap.servers' alias */
	{ "client.id", "idemd", false, NULL },
	/* The offset of a message is committed only once its transaction committed, by idemd
	 * itself, with metadata naming the database's position (idem_consumer_commit()). */
	{ "enable.auto.offset.store", "false", true, NULL },
	{ "enable.auto.commit", "false", true, NULL },
	{ "auto.commit.enable", NULL, true, NULL }, /* enable.auto.commit's alias */
	/* How often idemd commits (idem_consumer_commit_interval_ms()): a crash between the
	 * database's commit and Kafka's is covered by the database's position, so a short
	 * interval only keeps lag tools current. */
	{ "auto.commit.interval.ms", "500", false, NULL },
	/* A group with no committed offset starts at the oldest message: idemd never skips
	 * messages by default. */
	{ "auto.offset.reset", "earliest", false, NULL },
	{ "enable.partition.eof", "false", true, NULL },
	/* librdkafka's prefetch (queued.min.messages, queued.max.messages.kbytes) is not here:
	 * idem_consumer_conf() divides IDEM_CONSUMER_PREFETCH_* among the partitions. */
};

const struct idem_cfg_kafka_prop *idem_cfg_kafka_props(size_t *ret_n)
{
	*ret_n = IDEM_ARRAY_SIZE(cfg_kafka_props);
	return cfg_kafka_props;
}

/* Checks of single values. */

/* Letters, digits, '.', '_' and '-' only, 1 to @max of them: a topic's or a consumer's name. */
static bool cfg_name_valid(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return false;
	for (const char *p = s; *p != '\0'; p++) {
		char c = *p;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool cfg_topic_valid(const char *s)
{
	return cfg_name_valid(s, CFG_MAX_TOPIC) && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/*
 * ":PORT" binds every address of the host: plain HTTP without authentication open to every
 * network is too much to get from an omitted host, so that must be written out.
 */
static bool cfg_check_metrics_listen(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                                     const char *value)
{
	const char *q;

	if (value[0] != ':')
		return true;
	q = idem__cfg_qs(ctx, value);
	idem__cfg_error(
	        ctx, node,
	        "'%s' has no host ('%s' would listen on every address): write '0.0.0.0%s' or '[::]%s' if every address is really meant, or '127.0.0.1%s' for this host only",
	        path, q, q, q, q);
	return false;
}

static bool cfg_check_topic(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                            const char *value)
{
	if (cfg_topic_valid(value))
		return true;
	idem__cfg_error(
	        ctx, node,
	        "invalid topic name '%s' in '%s' (use letters, digits, '.', '_' and '-', at most 249 characters)",
	        idem__cfg_qs(ctx, value), path);
	return false;
}

/*
 * A consumer name is written into the metadata of every offset idemd commits and into event ids
 * (ARCHITECTURE.md "Where a partition starts"): no separator of either can be part of it.
 */
bool idem_cfg_consumer_valid(const char *name)
{
	return cfg_name_valid(name, IDEM_CONSUMER_NAME_MAX);
}

static bool cfg_check_consumer(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                               const char *value)
{
	if (idem_cfg_consumer_valid(value))
		return true;
	idem__cfg_error(
	        ctx, node,
	        "invalid consumer name '%s' in '%s' (use letters, digits, '.', '_' and '-', "
	        "at most %d characters)",
	        idem__cfg_qs(ctx, value), path, IDEM_CONSUMER_NAME_MAX);
	return false;
}

static bool cfg_check_conninfo(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                               const char *value)
{
	bool has = false;
	idem_status r = idem_lex_conninfo_has_password(value, &has);

	/* Never echo the conninfo, nor libpq's word on it: either may hold a secret. */
	if (r == IDEM_ERR_INVALID) {
		idem__cfg_error(
		        ctx, node,
		        "'%s' is not a connection string libpq can read (keyword=value pairs, or a postgresql:// URI; a dbname holding either must be one too); not shown, as it may hold a password",
		        path);
		return false;
	}
	if (r != IDEM_OK) {
		ctx->nomem = true;
		return false;
	}
	if (has) {
		idem__cfg_error(
		        ctx, node,
		        "'%s' must not contain a password; set 'postgres.password_env' or 'postgres.password_file' instead",
		        path);
		return false;
	}
	return true;
}
static bool cfg_check_property(struct cfg_ctx *ctx, yaml_node_t *knode, yaml_node_t *vnode,
                               const char *name, const char *value)
{
	struct cfg_load *load = ctx->user;
	char errstr[512];
	rd_kafka_conf_res_t res;
	bool ok;

	/* sasl.password_file and the like are idemd's, not librdkafka's (idem_cfg_secrets.c). */
	if (idem__cfg_check_kafka_secret(ctx, vnode, name, value, &ok))
		return ok;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cfg_kafka_props); i++) {
		if (!cfg_kafka_props[i].managed || strcmp(name, cfg_kafka_props[i].name) != 0)
			continue;
		if (cfg_kafka_props[i].use != NULL)
			idem__cfg_error(ctx, knode,
			                "kafka property '%s' cannot be set here; use '%s'", name,
			                cfg_kafka_props[i].use);
		else
			idem__cfg_error(ctx, knode,
			                "kafka property '%s' is managed by idemd and cannot be set",
			                name);
		return false;
	}
	/* librdkafka loads plugins as soon as this is set; leave that to the daemon. */
	if (strcmp(name, "plugin.library.paths") == 0)
		return true;
	if (load->rkconf == NULL) {
		load->rkconf = rd_kafka_conf_new();
		if (load->rkconf == NULL) {
			ctx->nomem = true;
			return false;
		}
	}
	errstr[0] = '\0';
	res = rd_kafka_conf_set(load->rkconf, name, value, errstr, sizeof(errstr));
	if (res == RD_KAFKA_CONF_OK)
		return true;
	idem__cfg_error(ctx, res == RD_KAFKA_CONF_UNKNOWN ? knode : vnode,
	                "invalid kafka property '%s': %s", idem__cfg_qs(ctx, name), errstr);
	return false;
}
/* Checks across keys. */

static void cfg_check_kafka(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	(void)target;
	idem__cfg_check_kafka_secrets(ctx, slots[KAFKA_PROPERTIES].value);
}

static void cfg_check_postgres(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	(void)target;
	if (slots[PG_PASSWORD_ENV].key != NULL && slots[PG_PASSWORD_FILE].key != NULL)
		idem__cfg_error(
		        ctx, slots[PG_PASSWORD_FILE].key,
		        "'postgres.password_env' and 'postgres.password_file' are mutually exclusive; set one of them");
}

/* One full batch must fit in the budget of all batches. */
static void cfg_check_batch(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	struct idem_cfg *cfg = target;

	if (!slots[BATCH_MAX_BYTES].ok || !slots[BATCH_MAX_BYTES_TOTAL].ok ||
	    cfg->batch_max_bytes_total >= cfg->batch_max_bytes)
		return;
	if (slots[BATCH_MAX_BYTES_TOTAL].value != NULL)
		idem__cfg_error(
		        ctx, slots[BATCH_MAX_BYTES_TOTAL].value,
		        "'batch.max_bytes_total' must be at least 'batch.max_bytes' (%zu), got '%zu'",
		        cfg->batch_max_bytes, cfg->batch_max_bytes_total);
	else
		idem__cfg_error(
		        ctx, slots[BATCH_MAX_BYTES].value,
		        "'batch.max_bytes' must be at most 'batch.max_bytes_total' (%zu), got '%zu'",
		        cfg->batch_max_bytes_total, cfg->batch_max_bytes);
}

static void cfg_check_retry(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	struct idem_cfg *cfg = target;

	if (!slots[RETRY_INITIAL_MS].ok || !slots[RETRY_MAX_MS].ok ||
	    cfg->retry_max_ms >= cfg->retry_initial_ms)
		return;
	if (slots[RETRY_MAX_MS].value != NULL)
		idem__cfg_error(ctx, slots[RETRY_MAX_MS].value,
		                "'retry.max_ms' must be at least 'retry.initial_ms' (%d), got '%d'",
		                cfg->retry_initial_ms, cfg->retry_max_ms);
	else
		idem__cfg_error(ctx, slots[RETRY_INITIAL_MS].value,
		                "'retry.initial_ms' must be at most 'retry.max_ms' (%d), got '%d'",
		                cfg->retry_max_ms, cfg->retry_initial_ms);
}

static void cfg_check_handler(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	struct idem_route *route = target;
	yaml_node_t *node = slots[HANDLER_SQL].value;
	const char *open;
	unsigned long max;
	bool multi;

	if (!slots[HANDLER_SQL].ok || route->handler_sql == NULL)
		return;
	max = idem_lex_sql_params(route->handler_sql, &multi, &open);
	if (open != NULL) {
		idem__cfg_error(ctx, node, "handler sql has an unterminated %s", open);
		return;
	}
	if (multi)
		idem__cfg_error(ctx, node, "handler sql must be a single statement");
	if (!slots[HANDLER_PARAMS].ok || max == route->n_params)
		return;
	if (max == 0)
		idem__cfg_error(ctx, node,
		                "handler sql uses no parameters but params lists %zu field%s",
		                route->n_params, route->n_params == 1 ? "" : "s");
	else
		idem__cfg_error(ctx, node, "handler sql uses $%lu but params lists %zu field%s",
		                max, route->n_params, route->n_params == 1 ? "" : "s");
}

static void cfg_check_top(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	struct idem_cfg *cfg = target;
	yaml_node_t *routes = slots[TOP_ROUTES].value;

	if (routes == NULL || !slots[TOP_ROUTES].ok)
		return;
	idem__cfg_check_routes(ctx, cfg, routes,
	                       idem__cfg_map_get(ctx, slots[TOP_KAFKA].value, "topics"),
	                       slots[TOP_REGISTRY].key != NULL);
}

/* Fills in what is computed from other settings; only called on a valid file. */
static void cfg_finish(struct cfg_ctx *ctx, struct idem_cfg *cfg)
{
	size_t total = 0, n = 0;

	for (size_t i = 0; i < cfg->n_routes; i++) {
		struct idem_route *route = &cfg->routes[i];

		if (route->consumer == NULL)
			route->consumer = idem__cfg_strdup(ctx, cfg->group_id);
		route->needs_json = idem_template_needs_json(&route->key);
		for (size_t j = 0; j < route->n_params; j++) {
			if (route->params[j].kind == IDEM_FIELD_JSON)
				route->needs_json = true;
		}
		route->needs_avro = idem_route_reads_avro(route);
		total += route->n_topics;
	}
	if (cfg->topics != NULL)
		return;
	/* Topics belong to one route each, so the routes' lists are already disjoint. */
	cfg->topics = calloc(total ? total : 1, sizeof(*cfg->topics));
	if (cfg->topics == NULL) {
		ctx->nomem = true;
		return;
	}
	for (size_t i = 0; i < cfg->n_routes; i++) {
		for (size_t j = 0; j < cfg->routes[i].n_topics; j++)
			cfg->topics[n++] = idem__cfg_strdup(ctx, cfg->routes[i].topics[j]);
	}
	cfg->n_topics = n;
}

idem_status idem_cfg_parse(const char *name, const char *buf, size_t len, struct idem_cfg **ret_cfg,
                           char **ret_errors)
{
	struct cfg_load load = { 0 };
	struct cfg_ctx ctx;
	struct idem_cfg *cfg;
	idem_status r;

	memset(&ctx, 0, sizeof(ctx));
	ctx.name = name != NULL ? name : "<config>";
	ctx.user = &load;
	cfg = calloc(1, sizeof(*cfg));
	if (cfg == NULL)
		return IDEM_ERR_NOMEM;
	idem__cfg_set_defaults(&top_section, cfg);
	cfg->path = idem__cfg_strdup(&ctx, ctx.name);
	idem__cfg_walk(&ctx, buf, len, &top_section, cfg);
	if (ctx.n_errs == 0 && !ctx.nomem)
		cfg_finish(&ctx, cfg);
	r = idem__cfg_result(&ctx, ret_errors);
	if (r == IDEM_OK && ret_cfg != NULL) {
		*ret_cfg = cfg;
		cfg = NULL;
	}
	idem_cfg_free(cfg);
	idem__cfg_ctx_done(&ctx);
	if (load.rkconf != NULL)
		rd_kafka_conf_destroy(load.rkconf);
	return r;
}

static void cfg_keys_walk(const struct cfg_section *sec, const char *prefix,
                          void (*fn)(const char *path, void *arg), void *arg)
{
	char path[128];

	for (size_t i = 0; i < sec->n_keys; i++) {
		const struct cfg_key *k = &sec->keys[i];

		snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", k->name);
		fn(path, arg);
		if (k->type == CFG_LIST)
			strncat(path, "[]", sizeof(path) - strlen(path) - 1);
		if (k->sub != NULL)
			cfg_keys_walk(k->sub, path, fn, arg);
	}
}

void idem_cfg_keys(void (*fn)(const char *path, void *arg), void *arg)
{
	cfg_keys_walk(&top_section, "", fn, arg);
}

idem_status idem_cfg_load(const char *path, struct idem_cfg **ret_cfg, char **ret_errors)
{
	struct idem_buf b = { 0 };
	idem_status r;

	r = idem__cfg_read(path, CFG_MAX_FILE, &b, ret_errors);
	if (r != IDEM_OK)
		return r;
	r = idem_cfg_parse(path, b.data, b.len, ret_cfg, ret_errors);
	idem_buf_done(&b);
	return r;
}

const struct idem_route *idem_cfg_route_for(const struct idem_cfg *cfg, const char *topic)
{
	if (cfg == NULL || topic == NULL)
		return NULL;
	for (size_t i = 0; i < cfg->n_routes; i++) {
		for (size_t j = 0; j < cfg->routes[i].n_topics; j++) {
			if (cfg->routes[i].topics[j] != NULL &&
			    strcmp(cfg->routes[i].topics[j], topic) == 0)
				return &cfg->routes[i];
		}
	}
	return NULL;
}

int idem_cfg_workers(const struct idem_cfg *cfg)
{
	long n;

	if (cfg->batch_workers > 0)
		return cfg->batch_workers;
	/* Two per CPU: a worker spends much of its transaction waiting for Postgres (round trips,
	 * the COMMIT's WAL flush), so two keep a CPU busy (tests/bench: 4 workers on 2 CPUs apply
	 * about 14% more than 2). */
	n = 2 * sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

void idem_cfg_free(struct idem_cfg *cfg)
{
	if (cfg == NULL)
		return;
	/* Every setting, computed ones included, is freed as the tables describe it. */
	idem__cfg_clear(&top_section, cfg);
	/* What no table describes: the name of the file. */
	free(cfg->path);
	free(cfg);
}

struct cfg_diff_arg {
	idem_cfg_change_fn *fn;
	void *arg;
};

static void cfg_diff_report(const char *path, const char *value, bool reload, void *arg)
{
	const struct cfg_diff_arg *d = arg;
	struct idem_cfg_change change = { path, value, reload };

	if (d->fn != NULL)
		d->fn(&change, d->arg);
}

size_t idem_cfg_diff(const struct idem_cfg *old, const struct idem_cfg *cfg, idem_cfg_change_fn *fn,
                     void *arg)
{
	struct cfg_diff_arg d = { fn, arg };

	return idem__cfg_diff(&top_section, "", old, cfg, cfg_diff_report, &d);
}
