/*
 * idem_cfg.c - the YAML configuration: parse, validate everything, build struct idem_cfg.
 *
 * libyaml's document API composes the file into a node graph in which aliases resolve to shared
 * nodes. A walker checks that graph against one table per section (key, type, default, range,
 * reloadable). Every problem is recorded with the position of its node and the walk goes on, so
 * one run reports them all; the object is handed out only when there were none.
 *
 * Aliases can make a small file name the same nodes many times ("billion laughs"). The schema
 * has a fixed depth, so the walk always ends, but its length is bounded by a visit budget
 * proportional to the size of the file as well.
 */
#include "idem_cfg.h"

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#define CFG_MAX_KEYS        12 /* keys in the largest section table */
#define CFG_QUOTE_CHARS     64 /* characters of a user value shown in a message */
#define CFG_QUOTE_BUF       (CFG_QUOTE_CHARS * 4 + 8)
#define CFG_MAX_FILE        ((size_t)64 << 20) /* refuse to read larger files */
#define CFG_PATH_MAX        256
#define CFG_VISITS_PER_NODE 10  /* walk budget: nodes in the file times this */
#define CFG_MAX_TOPIC       249 /* Kafka's limit on topic name length */

enum cfg_type {
	CFG_STRING,     /* char *, not empty */
	CFG_INT,        /* int, min..max */
	CFG_SIZE,       /* size_t, min..max */
	CFG_DURATION,   /* int64_t seconds, min..max: "30d", "12h", "90m", "45s" or seconds */
	CFG_LOG_LEVEL,  /* enum idem_log_level */
	CFG_ENUM,       /* an enum, one of the key's names (their index is the value) */
	CFG_TOPICS,     /* char ** and a size_t count: a non-empty list of topic names */
	CFG_PROPERTIES, /* struct idem_kv * and a size_t count: librdkafka properties */
	CFG_TEMPLATE,   /* struct idem_template */
	CFG_FIELDS,     /* struct idem_field * and a size_t count */
	CFG_SECTION,    /* a mapping described by another table, filling the same target */
	CFG_ROUTES,     /* the routes sequence, each item a mapping described by another table */
};

struct cfg_ctx;

/* Where a key was found in its mapping, and whether its value could be used. */
struct cfg_slot {
	yaml_node_t *key;
	yaml_node_t *value;
	bool ok; /* absent (the default applies) or usable */
};

typedef bool cfg_check_value_fn(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                                const char *value);
typedef void cfg_check_section_fn(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target);

struct cfg_section;

struct cfg_key {
	const char *name;
	enum cfg_type type;
	bool required;
	bool reload; /* takes effect on SIGHUP; everything else needs a restart */
	long long def, min, max;
	size_t off;   /* where the value goes in the target struct */
	size_t n_off; /* CFG_TOPICS, CFG_PROPERTIES, CFG_FIELDS: where the count goes */
	const struct cfg_section *sub;
	cfg_check_value_fn *check; /* CFG_STRING: further validation */
	const char *const *names;  /* CFG_ENUM: the accepted words, NULL-terminated */
};

struct cfg_section {
	const struct cfg_key *keys;
	size_t n_keys;
	cfg_check_section_fn *check; /* runs after the keys, with their slots */
};

struct cfg_error_line {
	size_t line, col, seq; /* line 0: about the whole file */
	char *text;
};

struct cfg_ctx {
	const char *name;
	yaml_document_t *doc;
	struct idem_cfg *cfg;
	struct cfg_error_line *errs;
	size_t n_errs, cap_errs;
	size_t visits, max_visits;
	bool overflow;
	bool nomem;
	rd_kafka_conf_t *rkconf; /* scratch: validates kafka.properties, never used to connect */
	char qbuf[4][CFG_QUOTE_BUF];
	unsigned qnext;
};

IDEM_TESTABLE size_t idem__cfg_edit_distance(const char *a, size_t la, const char *b, size_t lb);
IDEM_TESTABLE unsigned long idem__cfg_sql_params(const char *sql, bool *ret_multi,
                                                 const char **ret_unterminated);
IDEM_TESTABLE idem_status idem__cfg_conninfo_has_password(const char *conninfo,
                                                          bool *ret_has_password);

static void cfg_error(struct cfg_ctx *ctx, const yaml_node_t *node, const char *fmt, ...)
        IDEM_PRINTF(3, 4);
static void cfg_error_at(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, ...)
        IDEM_PRINTF(4, 5);

/* Section tables. */

static cfg_check_value_fn cfg_check_conninfo;
static cfg_check_section_fn cfg_check_top, cfg_check_postgres, cfg_check_retry, cfg_check_handler;

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
	                   .type = CFG_TOPICS,
	                   .off = offsetof(struct idem_cfg, topics),
	                   .n_off = offsetof(struct idem_cfg, n_topics) },
	[KAFKA_PROPERTIES] = { .name = "properties",
	                       .type = CFG_PROPERTIES,
	                       .off = offsetof(struct idem_cfg, kafka_props),
	                       .n_off = offsetof(struct idem_cfg, n_kafka_props) },
};
static const struct cfg_section kafka_section = { kafka_keys, KAFKA_N, NULL };

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
	                     .type = CFG_FIELDS,
	                     .off = offsetof(struct idem_route, params),
	                     .n_off = offsetof(struct idem_route, n_params) },
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
                       sizeof(enum idem_cfg_mode) == sizeof(int),
               "CFG_ENUM targets must be int-sized");
static const char *const cfg_poison_names[] = { "quarantine", "halt", NULL };
static const char *const cfg_mismatch_names[] = { "ignore", "log", "quarantine", NULL };

enum {
	ROUTE_NAME,
	ROUTE_TOPICS,
	ROUTE_CONSUMER,
	ROUTE_KEY,
	ROUTE_HANDLER,
	ROUTE_ON_POISON,
	ROUTE_ON_PAYLOAD_MISMATCH,
	ROUTE_N
};
static const struct cfg_key route_keys[] = {
	[ROUTE_NAME] = { .name = "name",
	                 .type = CFG_STRING,
	                 .required = true,
	                 .off = offsetof(struct idem_route, name) },
	[ROUTE_TOPICS] = { .name = "topics",
	                   .type = CFG_TOPICS,
	                   .required = true,
	                   .off = offsetof(struct idem_route, topics),
	                   .n_off = offsetof(struct idem_route, n_topics) },
	[ROUTE_CONSUMER] = { .name = "consumer",
	                     .type = CFG_STRING,
	                     .off = offsetof(struct idem_route, consumer) },
	[ROUTE_KEY] = { .name = "business_key",
	                .type = CFG_TEMPLATE,
	                .required = true,
	                .off = offsetof(struct idem_route, key) },
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
};
static const struct cfg_section route_section = { route_keys, ROUTE_N, NULL };

enum { BATCH_MAX_MESSAGES, BATCH_MAX_WAIT_MS, BATCH_WORKERS, BATCH_N };
static const struct cfg_key batch_keys[] = {
	[BATCH_MAX_MESSAGES] = { .name = "max_messages",
	                         .type = CFG_INT,
	                         .reload = true,
	                         .def = 500,
	                         .min = 1,
	                         .max = 100000,
	                         .off = offsetof(struct idem_cfg, batch_max_messages) },
	[BATCH_MAX_WAIT_MS] = { .name = "max_wait_ms",
	                        .type = CFG_INT,
	                        .reload = true,
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
static const struct cfg_section batch_section = { batch_keys, BATCH_N, NULL };

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
	                       .reload = true,
	                       .def = 100,
	                       .min = 1,
	                       .max = 60000,
	                       .off = offsetof(struct idem_cfg, retry_initial_ms) },
	[RETRY_MAX_MS] = { .name = "max_ms",
	                   .type = CFG_INT,
	                   .reload = true,
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
	                     .off = offsetof(struct idem_cfg, metrics_listen) },
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
	                         .def = 600,
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

enum { LOG_LEVEL, LOG_N };
static const struct cfg_key log_keys[] = {
	[LOG_LEVEL] = { .name = "level",
	                .type = CFG_LOG_LEVEL,
	                .reload = true,
	                .def = IDEM_LOG_INFO,
	                .off = offsetof(struct idem_cfg, log_level) },
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
	                 .type = CFG_ROUTES,
	                 .required = true,
	                 .sub = &route_section },
	[TOP_BATCH] = { .name = "batch",
	                .type = CFG_SECTION,
	                .reload = true,
	                .sub = &batch_section },
	[TOP_LIMITS] = { .name = "limits", .type = CFG_SECTION, .sub = &limits_section },
	[TOP_RETRY] = { .name = "retry",
	                .type = CFG_SECTION,
	                .reload = true,
	                .sub = &retry_section },
	[TOP_RETENTION] = { .name = "retention", .type = CFG_SECTION, .sub = &retention_section },
	[TOP_METRICS] = { .name = "metrics", .type = CFG_SECTION, .sub = &metrics_section },
	[TOP_LOG] = { .name = "log", .type = CFG_SECTION, .reload = true, .sub = &log_section },
};
static const struct cfg_section top_section = { top_keys, TOP_N, cfg_check_top };

_Static_assert(KAFKA_N <= CFG_MAX_KEYS && PG_N <= CFG_MAX_KEYS && HANDLER_N <= CFG_MAX_KEYS &&
                       ROUTE_N <= CFG_MAX_KEYS && BATCH_N <= CFG_MAX_KEYS &&
                       LIMITS_N <= CFG_MAX_KEYS && RETRY_N <= CFG_MAX_KEYS &&
                       LOG_N <= CFG_MAX_KEYS && TOP_N <= CFG_MAX_KEYS &&
                       METRICS_N <= CFG_MAX_KEYS && RETENTION_N <= CFG_MAX_KEYS,
               "CFG_MAX_KEYS is too small");

/*
 * librdkafka properties that idemd sets itself. Letting a user override them would break the
 * offset discipline (offsets are stored only after the database commit) or the subscription.
 */
static const struct {
	const char *name;
	const char *use; /* the key to set instead, or NULL if idemd alone decides */
} cfg_managed_props[] = {
	{ "group.id", "kafka.group_id" },
	{ "bootstrap.servers", "kafka.brokers" },
	{ "metadata.broker.list", "kafka.brokers" },
	{ "enable.auto.commit", NULL },
	{ "auto.commit.enable", NULL },
	{ "enable.auto.offset.store", NULL },
	{ "enable.partition.eof", NULL },
};

/* Errors. */

/*
 * A user value fit for a message: at most CFG_QUOTE_CHARS characters, control characters
 * escaped, so that one error stays one line. Valid until three more calls.
 */
static const char *cfg_q(struct cfg_ctx *ctx, const char *s, size_t len)
{
	char *out = ctx->qbuf[ctx->qnext++ % IDEM_ARRAY_SIZE(ctx->qbuf)];
	size_t o = 0, chars = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		/* Count characters, not bytes, and never cut a UTF-8 sequence. */
		if ((c & 0xc0) != 0x80 && chars++ == CFG_QUOTE_CHARS) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		if (c == '\n' || c == '\t' || c == '\r') {
			out[o++] = '\\';
			out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(out + o, CFG_QUOTE_BUF - o, "\\x%02x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
	return out;
}

static const char *cfg_qs(struct cfg_ctx *ctx, const char *s)
{
	return cfg_q(ctx, s, strlen(s));
}

static const char *cfg_qn(struct cfg_ctx *ctx, const yaml_node_t *node)
{
	return cfg_q(ctx, (const char *)node->data.scalar.value, node->data.scalar.length);
}

static void cfg_verror(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, va_list ap)
        IDEM_PRINTF(4, 0);

static void cfg_verror(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, va_list ap)
{
	struct idem_buf b = { 0 };
	struct cfg_error_line *e;
	char msg[2048];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* Library texts (librdkafka, libyaml) may carry raw user bytes: keep one error per line. */
	for (char *p = msg; *p != '\0'; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	}
	if (ctx->n_errs == ctx->cap_errs) {
		size_t cap = ctx->cap_errs ? ctx->cap_errs * 2 : 16;

		e = realloc(ctx->errs, cap * sizeof(*e));
		if (e == NULL) {
			ctx->nomem = true;
			return;
		}
		ctx->errs = e;
		ctx->cap_errs = cap;
	}
	if ((line > 0 ? idem_buf_printf(&b, "%s:%zu:%zu: error: %s\n", ctx->name, line, col, msg)
	              : idem_buf_printf(&b, "%s: error: %s\n", ctx->name, msg)) != IDEM_OK) {
		idem_buf_done(&b);
		ctx->nomem = true;
		return;
	}
	e = &ctx->errs[ctx->n_errs];
	e->line = line;
	e->col = col;
	e->seq = ctx->n_errs;
	e->text = b.data;
	ctx->n_errs++;
}

/* Reports a problem at @node (1-based line:column), or about the whole file if @node is NULL. */
static void cfg_error(struct cfg_ctx *ctx, const yaml_node_t *node, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (node != NULL)
		cfg_verror(ctx, node->start_mark.line + 1, node->start_mark.column + 1, fmt, ap);
	else
		cfg_verror(ctx, 0, 0, fmt, ap);
	va_end(ap);
}

static void cfg_error_at(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cfg_verror(ctx, line, col, fmt, ap);
	va_end(ap);
}

static int cfg_error_cmp(const void *a, const void *b)
{
	const struct cfg_error_line *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* All errors in file order, one per line, or NULL when out of memory. */
static char *cfg_error_text(struct cfg_ctx *ctx)
{
	struct idem_buf b = { 0 };

	qsort(ctx->errs, ctx->n_errs, sizeof(*ctx->errs), cfg_error_cmp);
	for (size_t i = 0; i < ctx->n_errs; i++) {
		if (idem_buf_append_str(&b, ctx->errs[i].text) != IDEM_OK) {
			idem_buf_done(&b);
			return NULL;
		}
	}
	return b.data;
}

/* libyaml could not compose the document: report its problem at its mark. */
static void cfg_yaml_error(struct cfg_ctx *ctx, const yaml_parser_t *parser, const char *buf,
                           size_t len)
{
	const char *problem = parser->problem ? parser->problem : "unknown error";
	size_t line = 1, col = 1;

	switch (parser->error) {
	case YAML_MEMORY_ERROR:
		ctx->nomem = true;
		return;
	case YAML_READER_ERROR:
		/* Reader errors (bad encoding) carry a byte offset instead of a mark. */
		for (size_t i = 0; i < parser->problem_offset && i < len; i++) {
			if (buf[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)buf[i] & 0xc0) != 0x80) {
				col++;
			}
		}
		if (parser->problem_value != -1)
			cfg_error_at(ctx, line, col, "invalid yaml: %s (byte 0x%02x)", problem,
			             (unsigned)parser->problem_value & 0xffu);
		else
			cfg_error_at(ctx, line, col, "invalid yaml: %s", problem);
		return;
	default:
		line = parser->problem_mark.line + 1;
		col = parser->problem_mark.column + 1;
		if (parser->context != NULL)
			cfg_error_at(ctx, line, col,
			             "invalid yaml: %s (%s at line %zu, column %zu)", problem,
			             parser->context, parser->context_mark.line + 1,
			             parser->context_mark.column + 1);
		else
			cfg_error_at(ctx, line, col, "invalid yaml: %s", problem);
		return;
	}
}

/* Node helpers. */

static yaml_node_t *cfg_node(struct cfg_ctx *ctx, int index)
{
	return yaml_document_get_node(ctx->doc, index);
}

static const char *cfg_kind(const yaml_node_t *node)
{
	switch (node->type) {
	case YAML_SCALAR_NODE:
		return "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a sequence";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "nothing";
	}
}

/* A plain "", "~" or "null": an empty section or list, an empty string. */
static bool cfg_is_null(const yaml_node_t *node)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

	if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(nulls); i++) {
		if (strcmp((const char *)node->data.scalar.value, nulls[i]) == 0 &&
		    node->data.scalar.length == strlen(nulls[i]))
			return true;
	}
	return false;
}

static bool cfg_scalar_eq(const yaml_node_t *node, const char *s)
{
	size_t n = strlen(s);

	return node->type == YAML_SCALAR_NODE && node->data.scalar.length == n &&
	       memcmp(node->data.scalar.value, s, n) == 0;
}

/* The value node of @key in mapping @map (the first if repeated), or NULL. */
static yaml_node_t *cfg_map_get(struct cfg_ctx *ctx, yaml_node_t *map, const char *key)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = cfg_node(ctx, p->key);

		if (k != NULL && cfg_scalar_eq(k, key))
			return cfg_node(ctx, p->value);
	}
	return NULL;
}

/* Item @i of sequence @seq, or NULL. */
static yaml_node_t *cfg_seq_get(struct cfg_ctx *ctx, yaml_node_t *seq, size_t i)
{
	if (seq == NULL || seq->type != YAML_SEQUENCE_NODE ||
	    i >= (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start))
		return NULL;
	return cfg_node(ctx, seq->data.sequence.items.start[i]);
}

/* Counts one step of the walk; false once the budget is spent (reported once). */
static bool cfg_visit(struct cfg_ctx *ctx)
{
	if (ctx->overflow)
		return false;
	if (++ctx->visits <= ctx->max_visits)
		return true;
	ctx->overflow = true;
	cfg_error(ctx, NULL,
	          "configuration is too large: more than %zu nodes after expanding aliases",
	          ctx->max_visits);
	return false;
}

/* A path for messages ("routes[0].handler"); paths are ours and short, so truncation is moot. */
static void cfg_path(char dst[CFG_PATH_MAX], const char *fmt, ...) IDEM_PRINTF(2, 3);

static void cfg_path(char dst[CFG_PATH_MAX], const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(dst, CFG_PATH_MAX, fmt, ap);
	va_end(ap);
}

static void *cfg_field(void *target, size_t off)
{
	return (char *)target + off;
}

/* The text of scalar @node ("" for null), or NULL after reporting why it cannot be used. */
static const char *cfg_text(struct cfg_ctx *ctx, yaml_node_t *node, const char *path)
{
	if (node->type != YAML_SCALAR_NODE) {
		cfg_error(ctx, node, "expected a scalar for '%s', found %s", path, cfg_kind(node));
		return NULL;
	}
	if (cfg_is_null(node))
		return "";
	if (memchr(node->data.scalar.value, '\0', node->data.scalar.length) != NULL) {
		cfg_error(ctx, node, "'%s' must not contain a nul character", path);
		return NULL;
	}
	return (const char *)node->data.scalar.value;
}

static char *cfg_strdup(struct cfg_ctx *ctx, const char *s)
{
	char *d = strdup(s);

	if (d == NULL)
		ctx->nomem = true;
	return d;
}

/* Suggestions. */

/*
 * Optimal string alignment distance (Levenshtein plus adjacent transpositions), the usual
 * typo measure. Strings longer than 32 bytes are "too far" (SIZE_MAX): table keys are short.
 */
IDEM_TESTABLE size_t idem__cfg_edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[33][33];

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
			size_t v = d[i - 1][j] + 1;

			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (d[i - 1][j - 1] + cost < v)
				v = d[i - 1][j - 1] + cost;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	}
	return d[la][lb];
}

/* The key of @sec closest to @node's text, if within two edits. */
static const char *cfg_suggest(const struct cfg_section *sec, const yaml_node_t *node)
{
	const char *s = (const char *)node->data.scalar.value;
	size_t len = node->data.scalar.length, best = 3;
	const char *found = NULL;

	for (size_t i = 0; i < sec->n_keys; i++) {
		size_t d = idem__cfg_edit_distance(s, len, sec->keys[i].name,
		                                   strlen(sec->keys[i].name));

		if (d < best) {
			best = d;
			found = sec->keys[i].name;
		}
	}
	return found;
}

/* Checks of single values. */

static bool cfg_topic_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > CFG_MAX_TOPIC || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return false;
	for (const char *p = s; *p != '\0'; p++) {
		char c = *p;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static int cfg_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* URI query keys are percent-decoded by libpq before it looks at them. */
static bool cfg_uri_key_is(const char *k, size_t n, const char *want)
{
	size_t w = 0;

	for (size_t i = 0; i < n; i++, w++) {
		int c = (unsigned char)k[i];

		if (c == '%' && i + 2 < n && cfg_hex(k[i + 1]) >= 0 && cfg_hex(k[i + 2]) >= 0) {
			c = cfg_hex(k[i + 1]) * 16 + cfg_hex(k[i + 2]);
			i += 2;
		}
		if (want[w] == '\0' || (unsigned char)want[w] != c)
			return false;
	}
	return want[w] == '\0';
}

static bool cfg_uri_has_password(const char *s)
{
	const char *p = strstr(s, "://") + 3;
	const char *q;

	/* As libpq: user info is what precedes an '@' that comes before any '/'. */
	for (q = p; *q != '\0' && *q != '@' && *q != '/'; q++)
		;
	if (*q == '@') {
		const char *colon = memchr(p, ':', (size_t)(q - p));

		if (colon != NULL && colon + 1 < q)
			return true;
	}
	q = strchr(p, '?');
	while (q != NULL) {
		const char *k = q + 1, *eq, *end;

		end = strchr(k, '&');
		if (end == NULL)
			end = k + strlen(k);
		eq = memchr(k, '=', (size_t)(end - k));
		if (eq != NULL && eq + 1 < end && cfg_uri_key_is(k, (size_t)(eq - k), "password"))
			return true;
		q = *end == '&' ? end : NULL;
	}
	return false;
}

static bool cfg_is_uri(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

static bool cfg_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static idem_status cfg_conninfo_password(const char *s, int depth, bool *ret)
{
	char *val;
	idem_status r = IDEM_OK;

	if (cfg_is_uri(s)) {
		*ret = cfg_uri_has_password(s);
		return IDEM_OK;
	}
	/* keyword = value pairs, parsed as libpq does; values may be quoted and escaped. */
	val = malloc(strlen(s) + 1);
	if (val == NULL)
		return IDEM_ERR_NOMEM;
	*ret = false;
	while (*s != '\0' && !*ret) {
		const char *name;
		size_t name_len, n = 0;

		while (cfg_is_space(*s))
			s++;
		if (*s == '\0')
			break;
		name = s;
		while (*s != '\0' && *s != '=' && !cfg_is_space(*s))
			s++;
		name_len = (size_t)(s - name);
		while (cfg_is_space(*s))
			s++;
		if (*s != '=')
			break; /* malformed: libpq will say so; nothing more to find */
		s++;
		while (cfg_is_space(*s))
			s++;
		if (*s == '\'') {
			for (s++; *s != '\0' && *s != '\''; s++) {
				if (*s == '\\' && s[1] != '\0')
					s++;
				val[n++] = *s;
			}
			if (*s == '\'')
				s++;
		} else {
			for (; *s != '\0' && !cfg_is_space(*s); s++) {
				if (*s == '\\' && s[1] != '\0')
					s++;
				val[n++] = *s;
			}
		}
		val[n] = '\0';
		if (name_len == 8 && memcmp(name, "password", 8) == 0 && n > 0)
			*ret = true;
		/* libpq expands a dbname that is itself a URI or a conninfo string. */
		if (name_len == 6 && memcmp(name, "dbname", 6) == 0 && depth == 0 &&
		    (cfg_is_uri(val) || strchr(val, '=') != NULL)) {
			r = cfg_conninfo_password(val, depth + 1, ret);
			if (r != IDEM_OK)
				break;
		}
	}
	free(val);
	return r;
}

/*
 * @brief Does libpq conninfo @conninfo (keyword=value or URI form) carry a password?
 * @returns IDEM_OK or IDEM_ERR_NOMEM.
 */
IDEM_TESTABLE idem_status idem__cfg_conninfo_has_password(const char *conninfo,
                                                          bool *ret_has_password)
{
	bool has = false;
	idem_status r = cfg_conninfo_password(conninfo, 0, &has);

	if (r == IDEM_OK)
		*ret_has_password = has;
	return r;
}

static bool cfg_check_conninfo(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                               const char *value)
{
	bool has = false;

	if (idem__cfg_conninfo_has_password(value, &has) != IDEM_OK) {
		ctx->nomem = true;
		return false;
	}
	/* Never echo the conninfo: it holds the very secret this check is about. */
	if (has) {
		cfg_error(
		        ctx, node,
		        "'%s' must not contain a password; set 'postgres.password_env' or 'postgres.password_file' instead",
		        path);
		return false;
	}
	return true;
}

static bool cfg_sql_ident_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '$' || c >= 0x80;
}

static bool cfg_sql_tag_char(unsigned char c)
{
	return cfg_sql_ident_char(c) && c != '$';
}

/*
 * @brief The highest $N in @sql (at most 1000000), 0 if none.
 * Skips what Postgres's lexer skips: '...' strings (E'...' with backslash escapes), "..."
 * identifiers, -- comments, nested C-style comments and $tag$...$tag$ strings. A '$' inside an
 * identifier (a$1) is part of the identifier.
 * @param ret_multi set true when more SQL follows a ';' (more than one statement).
 * @param ret_unterminated set to what is left open at the end ("string literal", ...) or NULL.
 */
IDEM_TESTABLE unsigned long idem__cfg_sql_params(const char *sql, bool *ret_multi,
                                                 const char **ret_unterminated)
{
	const unsigned char *s = (const unsigned char *)sql;
	const char *open = NULL;
	unsigned long max = 0;
	bool ended = false, multi = false;
	size_t i = 0;

	while (s[i] != '\0' && open == NULL) {
		unsigned char c = s[i];

		if (c == '-' && s[i + 1] == '-') {
			while (s[i] != '\0' && s[i] != '\n')
				i++;
			continue;
		}
		if (c == '/' && s[i + 1] == '*') {
			size_t depth = 1;

			for (i += 2; depth > 0 && s[i] != '\0';) {
				if (s[i] == '/' && s[i + 1] == '*') {
					depth++;
					i += 2;
				} else if (s[i] == '*' && s[i + 1] == '/') {
					depth--;
					i += 2;
				} else {
					i++;
				}
			}
			if (depth > 0)
				open = "comment";
			continue;
		}
		if (cfg_is_space((char)c)) {
			i++;
			continue;
		}
		if (c == ';') {
			ended = true;
			i++;
			continue;
		}
		if (ended)
			multi = true;
		if (c == '\'' || c == '"') {
			bool esc = c == '\'' && i > 0 && (s[i - 1] == 'E' || s[i - 1] == 'e') &&
			           (i < 2 || !cfg_sql_ident_char(s[i - 2]));

			for (i++;; i++) {
				if (s[i] == '\0') {
					open = c == '\'' ? "string literal" : "quoted identifier";
					break;
				}
				if (esc && s[i] == '\\' && s[i + 1] != '\0') {
					i++;
					continue;
				}
				if (s[i] == c) {
					if (s[i + 1] == c) {
						i++;
						continue;
					}
					i++;
					break;
				}
			}
			continue;
		}
		if (c == '$' && (i == 0 || !cfg_sql_ident_char(s[i - 1]))) {
			size_t t = i + 1, taglen, j;

			if (s[t] >= '0' && s[t] <= '9') {
				unsigned long n = 0;

				/* Saturate: anything past Postgres's 65535 parameters is wrong
				 * anyway. */
				for (; s[t] >= '0' && s[t] <= '9'; t++) {
					n = n * 10 + (unsigned long)(s[t] - '0');
					if (n > 1000000)
						n = 1000000;
				}
				if (n > max)
					max = n;
				i = t;
				continue;
			}
			while (cfg_sql_tag_char(s[t]))
				t++;
			if (s[t] != '$') {
				i = t;
				continue;
			}
			taglen = t - i + 1;
			for (j = t + 1; s[j] != '\0'; j++) {
				if (s[j] == '$' && strncmp(sql + j, sql + i, taglen) == 0)
					break;
			}
			if (s[j] == '\0') {
				open = "dollar-quoted string";
				break;
			}
			i = j + taglen;
			continue;
		}
		i++;
	}
	*ret_multi = multi;
	*ret_unterminated = open;
	return max;
}

/* Values by type. */

static bool cfg_string(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                       const char *path, void *target)
{
	char **slot = cfg_field(target, key->off);
	const char *s = cfg_text(ctx, node, path);

	if (s == NULL)
		return false;
	if (*s == '\0') {
		cfg_error(ctx, node, "'%s' must not be empty", path);
		return false;
	}
	if (key->check != NULL && !key->check(ctx, node, path, s))
		return false;
	*slot = cfg_strdup(ctx, s);
	return *slot != NULL;
}

static bool cfg_int(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                    const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	const char *p;
	char *end;
	long long v;

	if (s == NULL)
		return false;
	p = s + (*s == '-' || *s == '+');
	if (*p < '0' || *p > '9') {
		cfg_error(ctx, node, "'%s' must be an integer, got '%s'", path, cfg_qs(ctx, s));
		return false;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0') {
		cfg_error(ctx, node, "'%s' must be an integer, got '%s'", path, cfg_qs(ctx, s));
		return false;
	}
	if (errno == ERANGE || v < key->min || v > key->max) {
		cfg_error(ctx, node, "'%s' must be between %lld and %lld, got '%s'", path, key->min,
		          key->max, cfg_qs(ctx, s));
		return false;
	}
	if (key->type == CFG_SIZE)
		*(size_t *)cfg_field(target, key->off) = (size_t)v;
	else
		*(int *)cfg_field(target, key->off) = (int)v;
	return true;
}

static bool cfg_duration(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                         const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	int64_t v;

	if (s == NULL)
		return false;
	if (!idem_duration_parse(s, &v)) {
		cfg_error(ctx, node,
		          "'%s' must be a duration such as 30d, 12h, 90m or 45s, got '%s'", path,
		          cfg_qs(ctx, s));
		return false;
	}
	if (v < key->min || v > key->max) {
		cfg_error(ctx, node, "'%s' must be between %llds and %llds, got '%s'", path,
		          key->min, key->max, cfg_qs(ctx, s));
		return false;
	}
	*(int64_t *)cfg_field(target, key->off) = v;
	return true;
}

static bool cfg_enum(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                     const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	struct idem_buf choices = { 0 };
	size_t n = 0;

	if (s == NULL)
		return false;
	for (size_t i = 0; key->names[i] != NULL; i++) {
		if (strcmp(s, key->names[i]) == 0) {
			*(int *)cfg_field(target, key->off) = (int)i;
			return true;
		}
		n++;
	}
	/* "a, b or c", from the table, so the message never goes stale. */
	for (size_t i = 0; i < n; i++) {
		const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";

		if (idem_buf_printf(&choices, "%s%s", sep, key->names[i]) != IDEM_OK) {
			idem_buf_done(&choices);
			ctx->nomem = true;
			return false;
		}
	}
	cfg_error(ctx, node, "'%s' must be %s, got '%s'", path, choices.data, cfg_qs(ctx, s));
	idem_buf_done(&choices);
	return false;
}

static bool cfg_log_level(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                          const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	enum idem_log_level level;

	if (s == NULL)
		return false;
	if (!idem_log_level_parse(s, &level)) {
		cfg_error(ctx, node, "'%s' must be error, warn, info or debug, got '%s'", path,
		          cfg_qs(ctx, s));
		return false;
	}
	*(enum idem_log_level *)cfg_field(target, key->off) = level;
	return true;
}

/*
 * A sequence (or null) @node: its item count, or false after reporting that it is not one.
 */
static bool cfg_seq(struct cfg_ctx *ctx, yaml_node_t *node, const char *path, size_t *ret_n)
{
	if (cfg_is_null(node)) {
		*ret_n = 0;
		return true;
	}
	if (node->type != YAML_SEQUENCE_NODE) {
		cfg_error(ctx, node, "expected a sequence for '%s', found %s", path,
		          cfg_kind(node));
		return false;
	}
	*ret_n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
	return true;
}

static bool cfg_topics(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                       const char *path, void *target)
{
	char ***slot = cfg_field(target, key->off);
	size_t *count = cfg_field(target, key->n_off);
	char item_path[CFG_PATH_MAX];
	char **topics;
	size_t n;

	if (!cfg_seq(ctx, node, path, &n))
		return false;
	if (n == 0) {
		cfg_error(ctx, node, "'%s' must list at least one topic", path);
		return false;
	}
	topics = calloc(n, sizeof(*topics));
	if (topics == NULL) {
		ctx->nomem = true;
		return false;
	}
	*slot = topics;
	*count = n;
	for (size_t i = 0; i < n && cfg_visit(ctx); i++) {
		yaml_node_t *item = cfg_seq_get(ctx, node, i);
		const char *s;

		cfg_path(item_path, "%s[%zu]", path, i);
		if (item == NULL || (s = cfg_text(ctx, item, item_path)) == NULL)
			continue;
		if (!cfg_topic_valid(s)) {
			cfg_error(
			        ctx, item,
			        "invalid topic name '%s' in '%s' (use letters, digits, '.', '_' and '-', at most 249 characters)",
			        cfg_qs(ctx, s), item_path);
			continue;
		}
		topics[i] = cfg_strdup(ctx, s);
	}
	return true;
}

static bool cfg_fields(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                       const char *path, void *target)
{
	struct idem_field **slot = cfg_field(target, key->off);
	size_t *count = cfg_field(target, key->n_off);
	char item_path[CFG_PATH_MAX], why[512];
	struct idem_field *fields;
	size_t n;

	if (!cfg_seq(ctx, node, path, &n))
		return false;
	if (n == 0)
		return true;
	fields = calloc(n, sizeof(*fields));
	if (fields == NULL) {
		ctx->nomem = true;
		return false;
	}
	*slot = fields;
	*count = n;
	for (size_t i = 0; i < n && cfg_visit(ctx); i++) {
		yaml_node_t *item = cfg_seq_get(ctx, node, i);
		const char *s;
		idem_status r;

		cfg_path(item_path, "%s[%zu]", path, i);
		if (item == NULL || (s = cfg_text(ctx, item, item_path)) == NULL)
			continue;
		r = idem_field_parse(s, &fields[i], why, sizeof(why));
		if (r == IDEM_ERR_NOMEM)
			ctx->nomem = true;
		else if (r != IDEM_OK)
			cfg_error(ctx, item, "invalid '%s': %s", item_path, why);
	}
	return true;
}

static bool cfg_template(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                         const char *path, void *target)
{
	struct idem_template *slot = cfg_field(target, key->off);
	const char *s = cfg_text(ctx, node, path);
	char why[512];
	idem_status r;

	if (s == NULL)
		return false;
	r = idem_template_parse(s, slot, why, sizeof(why));
	if (r == IDEM_ERR_NOMEM)
		ctx->nomem = true;
	else if (r != IDEM_OK)
		cfg_error(ctx, node, "invalid '%s': %s", path, why);
	return r == IDEM_OK;
}

struct cfg_name_ref {
	const char *name;
	size_t a, b; /* position in the file's lists: route, item */
	yaml_node_t *node;
};

static int cfg_name_ref_cmp(const void *x, const void *y)
{
	const struct cfg_name_ref *p = x, *q = y;
	int c = strcmp(p->name, q->name);

	if (c != 0)
		return c;
	if (p->a != q->a)
		return p->a < q->a ? -1 : 1;
	return p->b < q->b ? -1 : p->b > q->b;
}

/* Is @name in @refs[0..n), sorted by name? */
static bool cfg_name_ref_find(const struct cfg_name_ref *refs, size_t n, const char *name)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(refs[mid].name, name);

		if (c == 0)
			return true;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static bool cfg_property_known(struct cfg_ctx *ctx, yaml_node_t *knode, yaml_node_t *vnode,
                               const char *name, const char *value)
{
	char errstr[512];
	rd_kafka_conf_res_t res;

	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cfg_managed_props); i++) {
		if (strcmp(name, cfg_managed_props[i].name) != 0)
			continue;
		if (cfg_managed_props[i].use != NULL)
			cfg_error(ctx, knode, "kafka property '%s' cannot be set here; use '%s'",
			          name, cfg_managed_props[i].use);
		else
			cfg_error(ctx, knode,
			          "kafka property '%s' is managed by idemd and cannot be set",
			          name);
		return false;
	}
	/* librdkafka loads plugins as soon as this is set; leave that to the daemon. */
	if (strcmp(name, "plugin.library.paths") == 0)
		return true;
	if (ctx->rkconf == NULL) {
		ctx->rkconf = rd_kafka_conf_new();
		if (ctx->rkconf == NULL) {
			ctx->nomem = true;
			return false;
		}
	}
	errstr[0] = '\0';
	res = rd_kafka_conf_set(ctx->rkconf, name, value, errstr, sizeof(errstr));
	if (res == RD_KAFKA_CONF_OK)
		return true;
	cfg_error(ctx, res == RD_KAFKA_CONF_UNKNOWN ? knode : vnode,
	          "invalid kafka property '%s': %s", cfg_qs(ctx, name), errstr);
	return false;
}

static bool cfg_properties(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                           const char *path, void *target)
{
	struct idem_kv **slot = cfg_field(target, key->off);
	size_t *count = cfg_field(target, key->n_off);
	struct cfg_name_ref *refs;
	size_t n, n_refs = 0, i = 0;
	struct idem_kv *kv;

	if (cfg_is_null(node))
		return true;
	if (node->type != YAML_MAPPING_NODE) {
		cfg_error(ctx, node, "expected a mapping for '%s', found %s", path, cfg_kind(node));
		return false;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	if (n == 0)
		return true;
	kv = calloc(n, sizeof(*kv));
	refs = calloc(n, sizeof(*refs));
	if (kv == NULL || refs == NULL) {
		free(kv);
		free(refs);
		ctx->nomem = true;
		return false;
	}
	*slot = kv;
	*count = 0;
	for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
	     p < node->data.mapping.pairs.top && cfg_visit(ctx); p++, i++) {
		yaml_node_t *k = cfg_node(ctx, p->key), *v = cfg_node(ctx, p->value);
		char vpath[CFG_PATH_MAX];
		const char *name, *value;

		if (k == NULL || v == NULL)
			continue;
		if (k->type != YAML_SCALAR_NODE) {
			cfg_error(ctx, k, "expected a scalar key in '%s', found %s", path,
			          cfg_kind(k));
			continue;
		}
		if ((name = cfg_text(ctx, k, path)) == NULL)
			continue;
		refs[n_refs++] = (struct cfg_name_ref){ name, i, 0, k };
		cfg_path(vpath, "%s.%s", path, cfg_qs(ctx, name));
		if ((value = cfg_text(ctx, v, vpath)) == NULL)
			continue;
		if (!cfg_property_known(ctx, k, v, name, value))
			continue;
		kv[*count].name = cfg_strdup(ctx, name);
		kv[*count].value = cfg_strdup(ctx, value);
		(*count)++;
	}
	qsort(refs, n_refs, sizeof(*refs), cfg_name_ref_cmp);
	for (size_t j = 1; j < n_refs; j++) {
		if (strcmp(refs[j].name, refs[j - 1].name) != 0)
			continue;
		/* refs[j - 1] may itself be a repeat; the first of the run is the definition. */
		for (i = j - 1; i > 0 && strcmp(refs[i - 1].name, refs[j].name) == 0; i--)
			;
		cfg_error(ctx, refs[j].node,
		          "duplicate key '%s' in '%s' (first defined at line %zu)",
		          cfg_qs(ctx, refs[j].name), path, refs[i].node->start_mark.line + 1);
	}
	free(refs);
	return true;
}

static bool cfg_section_walk(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                             const struct cfg_section *sec, void *target);
static void cfg_set_defaults(const struct cfg_section *sec, void *target);

static bool cfg_routes(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                       const char *path, void *target)
{
	struct idem_cfg *cfg = target;
	char item_path[CFG_PATH_MAX];
	size_t n;

	if (!cfg_seq(ctx, node, path, &n))
		return false;
	if (n == 0) {
		cfg_error(ctx, node, "'%s' must list at least one route", path);
		return false;
	}
	cfg->routes = calloc(n, sizeof(*cfg->routes));
	if (cfg->routes == NULL) {
		ctx->nomem = true;
		return false;
	}
	cfg->n_routes = n;
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *item = cfg_seq_get(ctx, node, i);

		cfg_set_defaults(key->sub, &cfg->routes[i]);
		cfg_path(item_path, "%s[%zu]", path, i);
		if (item != NULL)
			cfg_section_walk(ctx, item, item_path, key->sub, &cfg->routes[i]);
	}
	return true;
}

static bool cfg_value(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                      const char *path, void *target)
{
	switch (key->type) {
	case CFG_STRING:
		return cfg_string(ctx, key, node, path, target);
	case CFG_INT:
	case CFG_SIZE:
		return cfg_int(ctx, key, node, path, target);
	case CFG_DURATION:
		return cfg_duration(ctx, key, node, path, target);
	case CFG_LOG_LEVEL:
		return cfg_log_level(ctx, key, node, path, target);
	case CFG_ENUM:
		return cfg_enum(ctx, key, node, path, target);
	case CFG_TOPICS:
		return cfg_topics(ctx, key, node, path, target);
	case CFG_PROPERTIES:
		return cfg_properties(ctx, key, node, path, target);
	case CFG_TEMPLATE:
		return cfg_template(ctx, key, node, path, target);
	case CFG_FIELDS:
		return cfg_fields(ctx, key, node, path, target);
	case CFG_SECTION:
		return cfg_section_walk(ctx, node, path, key->sub, target);
	case CFG_ROUTES:
		return cfg_routes(ctx, key, node, path, target);
	}
	return false;
}

/*
 * Checks mapping @node against @sec, storing values into @target. Path "" is the top level.
 * @returns true if nothing in it was wrong.
 */
static bool cfg_section_walk(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                             const struct cfg_section *sec, void *target)
{
	struct cfg_slot slots[CFG_MAX_KEYS];
	yaml_node_pair_t *pairs = NULL, *end = NULL;
	size_t errors = ctx->n_errs;
	bool top = path[0] == '\0';

	if (!cfg_visit(ctx))
		return false;
	if (node->type != YAML_MAPPING_NODE && !cfg_is_null(node)) {
		if (top)
			cfg_error(ctx, node, "expected a mapping at the top level, found %s",
			          cfg_kind(node));
		else
			cfg_error(ctx, node, "expected a mapping for '%s', found %s", path,
			          cfg_kind(node));
		return false;
	}
	for (size_t i = 0; i < sec->n_keys; i++)
		slots[i] = (struct cfg_slot){ NULL, NULL, true };
	if (node->type == YAML_MAPPING_NODE) {
		pairs = node->data.mapping.pairs.start;
		end = node->data.mapping.pairs.top;
	}
	for (yaml_node_pair_t *p = pairs; p < end && cfg_visit(ctx); p++) {
		yaml_node_t *k = cfg_node(ctx, p->key), *v = cfg_node(ctx, p->value);
		char child[CFG_PATH_MAX];
		const char *suggest;
		size_t i;

		if (k == NULL || v == NULL)
			continue;
		if (k->type != YAML_SCALAR_NODE) {
			if (top)
				cfg_error(ctx, k,
				          "expected a scalar key at the top level, found %s",
				          cfg_kind(k));
			else
				cfg_error(ctx, k, "expected a scalar key in '%s', found %s", path,
				          cfg_kind(k));
			continue;
		}
		for (i = 0; i < sec->n_keys && !cfg_scalar_eq(k, sec->keys[i].name); i++)
			;
		if (i == sec->n_keys) {
			suggest = cfg_suggest(sec, k);
			if (top && suggest != NULL)
				cfg_error(ctx, k, "unknown section '%s' (did you mean '%s'?)",
				          cfg_qn(ctx, k), suggest);
			else if (top)
				cfg_error(ctx, k, "unknown section '%s'", cfg_qn(ctx, k));
			else if (suggest != NULL)
				cfg_error(ctx, k, "unknown key '%s' in '%s' (did you mean '%s'?)",
				          cfg_qn(ctx, k), path, suggest);
			else
				cfg_error(ctx, k, "unknown key '%s' in '%s'", cfg_qn(ctx, k), path);
			continue;
		}
		if (slots[i].key != NULL) {
			if (top)
				cfg_error(ctx, k,
				          "duplicate section '%s' (first defined at line %zu)",
				          sec->keys[i].name, slots[i].key->start_mark.line + 1);
			else
				cfg_error(ctx, k,
				          "duplicate key '%s' in '%s' (first defined at line %zu)",
				          sec->keys[i].name, path,
				          slots[i].key->start_mark.line + 1);
			continue;
		}
		slots[i].key = k;
		slots[i].value = v;
		if (top)
			cfg_path(child, "%s", sec->keys[i].name);
		else
			cfg_path(child, "%s.%s", path, sec->keys[i].name);
		slots[i].ok = cfg_value(ctx, &sec->keys[i], v, child, target);
	}
	for (size_t i = 0; i < sec->n_keys; i++) {
		if (!sec->keys[i].required || slots[i].key != NULL)
			continue;
		slots[i].ok = false;
		if (ctx->overflow)
			continue;
		if (top)
			cfg_error(ctx, node, "missing required section '%s'", sec->keys[i].name);
		else
			cfg_error(ctx, node, "missing required key '%s' in '%s'", sec->keys[i].name,
			          path);
	}
	if (sec->check != NULL && !ctx->overflow)
		sec->check(ctx, slots, target);
	return ctx->n_errs == errors;
}

/* Checks across keys. */

static void cfg_check_postgres(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	(void)target;
	if (slots[PG_PASSWORD_ENV].key != NULL && slots[PG_PASSWORD_FILE].key != NULL)
		cfg_error(
		        ctx, slots[PG_PASSWORD_FILE].key,
		        "'postgres.password_env' and 'postgres.password_file' are mutually exclusive; set one of them");
}

static void cfg_check_retry(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	struct idem_cfg *cfg = target;

	if (!slots[RETRY_INITIAL_MS].ok || !slots[RETRY_MAX_MS].ok ||
	    cfg->retry_max_ms >= cfg->retry_initial_ms)
		return;
	if (slots[RETRY_MAX_MS].value != NULL)
		cfg_error(ctx, slots[RETRY_MAX_MS].value,
		          "'retry.max_ms' must be at least 'retry.initial_ms' (%d), got '%d'",
		          cfg->retry_initial_ms, cfg->retry_max_ms);
	else
		cfg_error(ctx, slots[RETRY_INITIAL_MS].value,
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
	max = idem__cfg_sql_params(route->handler_sql, &multi, &open);
	if (open != NULL) {
		cfg_error(ctx, node, "handler sql has an unterminated %s", open);
		return;
	}
	if (multi)
		cfg_error(ctx, node, "handler sql must be a single statement");
	if (!slots[HANDLER_PARAMS].ok || max == route->n_params)
		return;
	if (max == 0)
		cfg_error(ctx, node, "handler sql uses no parameters but params lists %zu field%s",
		          route->n_params, route->n_params == 1 ? "" : "s");
	else
		cfg_error(ctx, node, "handler sql uses $%lu but params lists %zu field%s", max,
		          route->n_params, route->n_params == 1 ? "" : "s");
}

static const char *cfg_route_label(struct cfg_ctx *ctx, const struct idem_cfg *cfg, size_t i,
                                   char *buf, size_t len)
{
	if (cfg->routes[i].name != NULL)
		return cfg_qs(ctx, cfg->routes[i].name);
	snprintf(buf, len, "routes[%zu]", i);
	return buf;
}

static void cfg_check_route_names(struct cfg_ctx *ctx, struct idem_cfg *cfg, yaml_node_t *routes)
{
	struct cfg_name_ref *refs = calloc(cfg->n_routes, sizeof(*refs));
	size_t n = 0;

	if (refs == NULL) {
		ctx->nomem = true;
		return;
	}
	for (size_t i = 0; i < cfg->n_routes; i++) {
		yaml_node_t *node = cfg_map_get(ctx, cfg_seq_get(ctx, routes, i), "name");

		if (cfg->routes[i].name != NULL && node != NULL)
			refs[n++] = (struct cfg_name_ref){ cfg->routes[i].name, i, 0, node };
	}
	qsort(refs, n, sizeof(*refs), cfg_name_ref_cmp);
	for (size_t i = 1, first = 0; i < n; i++) {
		if (strcmp(refs[i].name, refs[first].name) != 0) {
			first = i;
			continue;
		}
		cfg_error(ctx, refs[i].node,
		          "duplicate route name '%s' (first defined at line %zu)",
		          cfg_qs(ctx, refs[i].name), refs[first].node->start_mark.line + 1);
	}
	free(refs);
}

/* Every topic of every route, sorted by name, or NULL (out of memory). */
static struct cfg_name_ref *cfg_route_topics(struct cfg_ctx *ctx, struct idem_cfg *cfg,
                                             yaml_node_t *routes, size_t *ret_n)
{
	struct cfg_name_ref *refs;
	size_t total = 0, n = 0;

	for (size_t i = 0; i < cfg->n_routes; i++)
		total += cfg->routes[i].n_topics;
	refs = calloc(total ? total : 1, sizeof(*refs));
	if (refs == NULL) {
		ctx->nomem = true;
		return NULL;
	}
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct idem_route *route = &cfg->routes[i];
		yaml_node_t *list = cfg_map_get(ctx, cfg_seq_get(ctx, routes, i), "topics");

		for (size_t j = 0; j < route->n_topics; j++) {
			yaml_node_t *node = cfg_seq_get(ctx, list, j);

			if (route->topics[j] != NULL && node != NULL)
				refs[n++] = (struct cfg_name_ref){ route->topics[j], i, j, node };
		}
	}
	qsort(refs, n, sizeof(*refs), cfg_name_ref_cmp);
	*ret_n = n;
	return refs;
}

static void cfg_check_route_topics(struct cfg_ctx *ctx, struct idem_cfg *cfg, yaml_node_t *routes,
                                   yaml_node_t *kafka_topics)
{
	struct cfg_name_ref *refs, *krefs = NULL;
	size_t n, nk = 0;
	char label[64];

	refs = cfg_route_topics(ctx, cfg, routes, &n);
	if (refs == NULL)
		return;
	for (size_t i = 1, first = 0; i < n; i++) {
		if (strcmp(refs[i].name, refs[first].name) != 0) {
			first = i;
			continue;
		}
		if (refs[i].a == refs[first].a)
			cfg_error(ctx, refs[i].node, "duplicate topic '%s' in 'routes[%zu].topics'",
			          cfg_qs(ctx, refs[i].name), refs[i].a);
		else
			cfg_error(
			        ctx, refs[i].node,
			        "topic '%s' already belongs to route '%s' (a topic may belong to one route only)",
			        cfg_qs(ctx, refs[i].name),
			        cfg_route_label(ctx, cfg, refs[first].a, label, sizeof(label)));
	}
	if (cfg->topics == NULL)
		goto out_free_refs;
	krefs = calloc(cfg->n_topics, sizeof(*krefs));
	if (krefs == NULL) {
		ctx->nomem = true;
		goto out_free_refs;
	}
	for (size_t j = 0; j < cfg->n_topics; j++) {
		yaml_node_t *node = cfg_seq_get(ctx, kafka_topics, j);

		if (cfg->topics[j] != NULL && node != NULL)
			krefs[nk++] = (struct cfg_name_ref){ cfg->topics[j], 0, j, node };
	}
	qsort(krefs, nk, sizeof(*krefs), cfg_name_ref_cmp);
	for (size_t j = 0; j < nk; j++) {
		if (j > 0 && strcmp(krefs[j].name, krefs[j - 1].name) == 0)
			cfg_error(ctx, krefs[j].node, "duplicate topic '%s' in 'kafka.topics'",
			          cfg_qs(ctx, krefs[j].name));
		else if (!cfg_name_ref_find(refs, n, krefs[j].name))
			cfg_error(ctx, krefs[j].node, "topic '%s' in 'kafka.topics' has no route",
			          cfg_qs(ctx, krefs[j].name));
	}
	for (size_t i = 0; i < n; i++) {
		if (!cfg_name_ref_find(krefs, nk, refs[i].name))
			cfg_error(ctx, refs[i].node,
			          "topic '%s' of route '%s' is not in 'kafka.topics'",
			          cfg_qs(ctx, refs[i].name),
			          cfg_route_label(ctx, cfg, refs[i].a, label, sizeof(label)));
	}
	free(krefs);
out_free_refs:
	free(refs);
}

static void cfg_check_top(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	struct idem_cfg *cfg = target;
	yaml_node_t *routes = slots[TOP_ROUTES].value;

	if (routes == NULL || !slots[TOP_ROUTES].ok)
		return;
	cfg_check_route_names(ctx, cfg, routes);
	cfg_check_route_topics(ctx, cfg, routes,
	                       cfg_map_get(ctx, slots[TOP_KAFKA].value, "topics"));
}

/* Building. */

static void cfg_set_defaults(const struct cfg_section *sec, void *target)
{
	for (size_t i = 0; i < sec->n_keys; i++) {
		const struct cfg_key *key = &sec->keys[i];

		switch (key->type) {
		case CFG_INT:
			*(int *)cfg_field(target, key->off) = (int)key->def;
			break;
		case CFG_SIZE:
			*(size_t *)cfg_field(target, key->off) = (size_t)key->def;
			break;
		case CFG_DURATION:
			*(int64_t *)cfg_field(target, key->off) = (int64_t)key->def;
			break;
		case CFG_LOG_LEVEL:
			*(enum idem_log_level *)cfg_field(target, key->off) =
			        (enum idem_log_level)key->def;
			break;
		case CFG_ENUM:
			*(int *)cfg_field(target, key->off) = (int)key->def;
			break;
		case CFG_SECTION:
			cfg_set_defaults(key->sub, target);
			break;
		default:
			break;
		}
	}
}

/* Fills in what is computed from other settings; only called on a valid file. */
static void cfg_finish(struct cfg_ctx *ctx, struct idem_cfg *cfg)
{
	size_t total = 0, n = 0;

	for (size_t i = 0; i < cfg->n_routes; i++) {
		struct idem_route *route = &cfg->routes[i];

		if (route->consumer == NULL)
			route->consumer = cfg_strdup(ctx, cfg->group_id);
		route->needs_json = idem_template_needs_json(&route->key);
		for (size_t j = 0; j < route->n_params; j++) {
			if (route->params[j].kind == IDEM_FIELD_JSON)
				route->needs_json = true;
		}
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
			cfg->topics[n++] = cfg_strdup(ctx, cfg->routes[i].topics[j]);
	}
	cfg->n_topics = n;
}

static void cfg_walk(struct cfg_ctx *ctx, yaml_parser_t *parser, const char *buf, size_t len)
{
	yaml_document_t extra;
	yaml_node_t *root;
	size_t nodes;

	root = yaml_document_get_root_node(ctx->doc);
	if (root == NULL) {
		cfg_error(ctx, NULL, "configuration is empty (no yaml document)");
		return;
	}
	/*
	 * A reader that stopped at the first document would silently ignore the rest. Empty ones
	 * (a bare "---" at the end) hold nothing to ignore.
	 */
	for (bool more = true; more;) {
		yaml_node_t *extra_root;

		if (!yaml_parser_load(parser, &extra)) {
			cfg_yaml_error(ctx, parser, buf, len);
			break;
		}
		extra_root = yaml_document_get_root_node(&extra);
		more = extra_root != NULL && cfg_is_null(extra_root);
		if (extra_root != NULL && !more)
			cfg_error_at(ctx, extra.start_mark.line + 1, extra.start_mark.column + 1,
			             "more than one yaml document");
		yaml_document_delete(&extra);
	}
	nodes = (size_t)(ctx->doc->nodes.top - ctx->doc->nodes.start);
	ctx->max_visits = nodes * CFG_VISITS_PER_NODE + 1000;
	cfg_section_walk(ctx, root, "", &top_section, ctx->cfg);
}

idem_status idem_cfg_parse(const char *name, const char *buf, size_t len, struct idem_cfg **ret_cfg,
                           char **ret_errors)
{
	struct cfg_ctx ctx;
	yaml_parser_t parser;
	yaml_document_t doc;
	idem_status r;
	char *text;

	memset(&ctx, 0, sizeof(ctx));
	ctx.name = name != NULL ? name : "<config>";
	ctx.cfg = calloc(1, sizeof(*ctx.cfg));
	if (ctx.cfg == NULL)
		return IDEM_ERR_NOMEM;
	cfg_set_defaults(&top_section, ctx.cfg);
	ctx.cfg->path = cfg_strdup(&ctx, ctx.name);
	if (!yaml_parser_initialize(&parser)) {
		r = IDEM_ERR_NOMEM;
		goto out_free_cfg;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)(len ? buf : ""), len);
	if (yaml_parser_load(&parser, &doc)) {
		ctx.doc = &doc;
		cfg_walk(&ctx, &parser, buf, len);
		if (ctx.n_errs == 0 && !ctx.nomem)
			cfg_finish(&ctx, ctx.cfg);
		yaml_document_delete(&doc);
	} else {
		cfg_yaml_error(&ctx, &parser, buf, len);
	}
	yaml_parser_delete(&parser);
	if (ctx.nomem) {
		r = IDEM_ERR_NOMEM;
		goto out_free_cfg;
	}
	if (ctx.n_errs > 0) {
		text = cfg_error_text(&ctx);
		if (text == NULL) {
			r = IDEM_ERR_NOMEM;
			goto out_free_cfg;
		}
		if (ret_errors != NULL)
			*ret_errors = text;
		else
			free(text);
		r = IDEM_ERR_CONFIG;
		goto out_free_cfg;
	}
	if (ret_cfg != NULL)
		*ret_cfg = ctx.cfg;
	else
		idem_cfg_free(ctx.cfg);
	ctx.cfg = NULL;
	r = IDEM_OK;
out_free_cfg:
	idem_cfg_free(ctx.cfg);
	for (size_t i = 0; i < ctx.n_errs; i++)
		free(ctx.errs[i].text);
	free(ctx.errs);
	if (ctx.rkconf != NULL)
		rd_kafka_conf_destroy(ctx.rkconf);
	return r;
}

static idem_status cfg_io_error(const char *path, const char *what, int errnum, char **ret_errors)
{
	struct idem_buf b = { 0 };

	if (idem_buf_printf(&b, "%s: error: %s: %s\n", path, what, strerror(errnum)) != IDEM_OK) {
		idem_buf_done(&b);
		return IDEM_ERR_NOMEM;
	}
	if (ret_errors != NULL)
		*ret_errors = b.data;
	else
		idem_buf_done(&b);
	return IDEM_ERR_IO;
}

idem_status idem_cfg_load(const char *path, struct idem_cfg **ret_cfg, char **ret_errors)
{
	struct idem_buf b = { 0 };
	idem_status r;
	FILE *f;

	f = fopen(path, "rb");
	if (f == NULL)
		return cfg_io_error(path, "cannot open configuration", errno, ret_errors);
	for (;;) {
		size_t n;

		if (b.len >= CFG_MAX_FILE) {
			r = cfg_io_error(path, "cannot read configuration", EFBIG, ret_errors);
			goto out_close;
		}
		if (idem_buf_reserve(&b, 65536) != IDEM_OK) {
			r = IDEM_ERR_NOMEM;
			goto out_close;
		}
		n = fread(b.data + b.len, 1, 65536, f);
		b.len += n;
		if (n < 65536) {
			if (ferror(f)) {
				r = cfg_io_error(path, "cannot read configuration", errno,
				                 ret_errors);
				goto out_close;
			}
			break;
		}
	}
	r = idem_cfg_parse(path, b.data, b.len, ret_cfg, ret_errors);
out_close:
	fclose(f);
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

static void cfg_free_strv(char **v, size_t n)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

int idem_cfg_workers(const struct idem_cfg *cfg)
{
	long n;

	if (cfg->batch_workers > 0)
		return cfg->batch_workers;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

void idem_cfg_free(struct idem_cfg *cfg)
{
	if (cfg == NULL)
		return;
	free(cfg->path);
	free(cfg->brokers);
	free(cfg->group_id);
	cfg_free_strv(cfg->topics, cfg->n_topics);
	for (size_t i = 0; cfg->kafka_props != NULL && i < cfg->n_kafka_props; i++) {
		free(cfg->kafka_props[i].name);
		free(cfg->kafka_props[i].value);
	}
	free(cfg->kafka_props);
	free(cfg->conninfo);
	free(cfg->password_env);
	free(cfg->password_file);
	free(cfg->metrics_listen);
	for (size_t i = 0; cfg->routes != NULL && i < cfg->n_routes; i++) {
		struct idem_route *route = &cfg->routes[i];

		free(route->name);
		cfg_free_strv(route->topics, route->n_topics);
		free(route->consumer);
		idem_template_done(&route->key);
		free(route->handler_sql);
		for (size_t j = 0; route->params != NULL && j < route->n_params; j++)
			idem_field_done(&route->params[j]);
		free(route->params);
	}
	free(cfg->routes);
	free(cfg);
}
