/*
 * idem_cfg.h - the immutable configuration, loaded from YAML.
 *
 * parse -> validate the whole file collecting every error -> build struct idem_cfg.
 * Errors read "FILE:LINE:COLUMN: error: MESSAGE", 1-based, one per line.
 */
#ifndef IDEM_CFG_H
#define IDEM_CFG_H

#include "idem_common.h"
#include "idem_field.h"
#include "idem_log.h"

/* The schema_registry section's table (idem_cfg_registry.c), for idem_cfg.c's top section. */
struct cfg_section;
extern const struct cfg_section idem__cfg_registry_section;

/*
 * routes[].on_poison: what happens to a message that cannot be applied (ARCHITECTURE.md,
 * "The transaction").
 */
enum idem_cfg_poison {
	IDEM_CFG_POISON_QUARANTINE = 0, /* write it to idem.quarantine and go on */
	IDEM_CFG_POISON_HALT,           /* stop the partition at it (strict per-key ordering) */
};

/* routes[].on_payload_mismatch: a duplicate key whose payload differs from the claim's. */
enum idem_cfg_mismatch {
	IDEM_CFG_MISMATCH_IGNORE = 0, /* count it (payload_mismatches) only */
	IDEM_CFG_MISMATCH_LOG,        /* count it and log a warning */
	IDEM_CFG_MISMATCH_QUARANTINE, /* count it and quarantine the message */
};

/*
 * routes[].value_format: what json: fields find in a message's value (idemd.yaml(5)
 * JSON SCHEMA VALUES). Never guessed from the bytes: a route says it.
 */
enum idem_cfg_value_format {
	IDEM_CFG_VALUE_JSON = 0,    /* the value is the JSON document */
	IDEM_CFG_VALUE_JSON_SCHEMA, /* Confluent-framed JSON Schema: byte 0 = 0, bytes 1-4 the
	                               schema id (a JSON schema of schema_registry), then the
	                               document */
};

/* routes[].handler.mode: how often the handler statement runs. */
enum idem_cfg_mode {
	IDEM_CFG_MODE_ROW = 0, /* once per newly claimed message, with that message's fields */
	IDEM_CFG_MODE_SET,     /* once per transaction over all its newly claimed messages of the
	                          route: each parameter is a text[] of that field, one element per
	                          message, in the order they are applied */
};

/* routes[].reply.key: the key of a reply message. */
enum idem_cfg_reply_key {
	IDEM_CFG_REPLY_BUSINESS_KEY = 0, /* the message's business key (UTF-8) */
	IDEM_CFG_REPLY_MESSAGE_KEY,      /* the request's own Kafka key, its bytes as they are */
};

/* One route: which topics, how to build the business key, which handler to run. */
/* The longest routes[].consumer (letters, digits, '.', '_' and '-': idem_cfg_consumer_valid()). */
#define IDEM_CONSUMER_NAME_MAX 128

/*
 * The unit's WatchdogSec (systemd/idemd.service), and the longest schema_registry.timeout_ms:
 * half of it, so that a request hanging to its end never delays the watchdog's pings.
 */
#define IDEM_CFG_WATCHDOG_S              120
#define IDEM_CFG_REGISTRY_TIMEOUT_MAX_MS (IDEM_CFG_WATCHDOG_S * 1000 / 2)

/* @brief Is @name a valid consumer name (routes[].consumer, or kafka.group_id standing in)? */
bool idem_cfg_consumer_valid(const char *name);

struct idem_route {
	char *name;    /* routes[].name, required, unique */
	char **topics; /* routes[].topics, required, non-empty */
	size_t n_topics;
	char *consumer;            /* routes[].consumer: key namespace; default kafka.group_id */
	struct idem_template key;  /* routes[].business_key */
	char *handler_sql;         /* routes[].handler.sql: one statement with $1..$n */
	struct idem_field *params; /* routes[].handler.params: $1..$n, in order */
	size_t n_params;
	enum idem_cfg_mode handler_mode;            /* routes[].handler.mode, default row */
	enum idem_cfg_poison on_poison;             /* routes[].on_poison, default quarantine */
	enum idem_cfg_mismatch on_payload_mismatch; /* routes[].on_payload_mismatch, default log */
	/* routes[].reply (ARCHITECTURE.md "Replies and dead letters"): NULL topic, no replies. */
	char *reply_topic;                 /* routes[].reply.topic */
	enum idem_cfg_reply_key reply_key; /* routes[].reply.key, default business_key */
	int reply_duplicates;              /* routes[].reply.duplicates, default false */
	char *dead_letter_topic;           /* routes[].dead_letter_topic: NULL, quarantine only */
	bool needs_json;                   /* computed: key or a param uses json: */
	bool needs_avro;                   /* computed: avro:, protobuf: (-key:) fields used */
	/* routes[].value_format, default json: what json: fields find in the value */
	enum idem_cfg_value_format value_format;
	/* routes[].validate, default false: json-schema values checked against their schema */
	int validate;
};

struct idem_kv {
	char *name;
	char *value;
};

struct idem_cfg {
	char *path; /* the file it came from */

	/* kafka: */
	char *brokers;  /* kafka.brokers, required ("host:port,...") */
	char *group_id; /* kafka.group_id, required */
	char **topics;  /* kafka.topics; default: every route's topics, deduplicated */
	size_t n_topics;
	struct idem_kv *kafka_props; /* kafka.properties: passed to librdkafka as strings */
	size_t n_kafka_props;

	/* postgres: */
	char *conninfo;      /* postgres.conninfo, required; must not contain a password */
	char *password_env;  /* postgres.password_env: name of an environment variable */
	char *password_file; /* postgres.password_file: file whose first line is the password */
	int lock_timeout_ms; /* postgres.lock_timeout_ms, default 10000, 0..3600000 (0: none) */
	int statement_timeout_ms; /* postgres.statement_timeout_ms, default 30000, 0..86400000 */

	/* routes: */
	struct idem_route *routes;
	size_t n_routes;

	/* batch: */
	int batch_max_messages; /* batch.max_messages, default 500, 1..100000 */
	size_t batch_max_bytes; /* batch.max_bytes: a batch closes once its messages hold this many
	                           bytes, default 16 MiB, 1 KiB..1 GiB */
	size_t batch_max_bytes_total; /* batch.max_bytes_total: bytes held in all batches before
	                                 partitions pause, default 256 MiB, 1 KiB..64 GiB; at least
	                                 batch_max_bytes */
	int batch_max_wait_ms;        /* batch.max_wait_ms, default 20, 0..60000 */
	int batch_workers; /* batch.workers, 0..64, default 0: two per CPU, at most 8 (see
	                      idem_cfg_workers()) */

	/* limits: */
	size_t max_key_bytes; /* limits.max_key_bytes, default 512, 1..2048 (a btree entry must fit
	                         a third of a page) */
	size_t max_message_bytes; /* limits.max_message_bytes, default 16 MiB */

	/* retry: */
	int retry_initial_ms; /* retry.initial_ms, default 100 */
	int retry_max_ms;     /* retry.max_ms, default 30000 */
	int max_attempts; /* retry.max_attempts: tries of a failing message, default 3, 1..100 */

	/* retention: */
	int64_t retention_keep_s;     /* retention.keep, default 30d, 60s..100 years */
	int64_t retention_interval_s; /* retention.interval, default 10m */
	int retention_batch;          /* retention.batch, default 1000 rows per transaction */

	/* outbox: (ARCHITECTURE.md "The outbox") */
	int outbox_enabled;          /* outbox.enabled, default false: run the relay thread */
	int outbox_poll_interval_ms; /* outbox.poll_interval_ms, default 100, 1..60000: how often
	                                an idle relay looks for pending rows */
	int outbox_batch;            /* outbox.batch, default 1000, 1..100000: rows per round */
	int64_t outbox_keep_s;       /* outbox.keep, default 7d, 1s..100 years: how long published
	                                rows stay */
	int64_t outbox_purge_interval_s; /* outbox.purge_interval, default 60s, 1s..7d */

	/* schema_registry: (ARCHITECTURE.md "Avro"; idem_cfg_registry.c) */
	char *registry_url;               /* schema_registry.url; NULL: none (no avro: fields) */
	char *registry_username;          /* schema_registry.username: HTTP basic authentication */
	char *registry_password_env;      /* schema_registry.password_env */
	char *registry_password_file;     /* schema_registry.password_file: first line */
	int registry_timeout_ms;          /* schema_registry.timeout_ms, default 5000, 100..60000 */
	int registry_allow_insecure_auth; /* schema_registry.allow_insecure_auth, default false:
	                                     basic authentication over http:// is refused */

	/* metrics: */
	char *metrics_listen; /* metrics.listen ("127.0.0.1:9187"); NULL: no HTTP listener */

	/* log: */
	enum idem_log_level log_level; /* log.level, default info */
};

/* @brief Does @route read avro: or avro-key: fields (its business key or a parameter)? */
bool idem_route_reads_avro(const struct idem_route *route);

/*
 * @brief Load and validate @path.
 * @param ret_cfg on success, the new configuration (free with idem_cfg_free()).
 * @param ret_errors on IDEM_ERR_CONFIG or IDEM_ERR_IO, a malloc'ed text with every error, one
 *        per line, each "path:line:col: error: ..." (or "path: error: ..." without a position).
 * @returns IDEM_OK, IDEM_ERR_CONFIG, IDEM_ERR_IO (cannot read) or IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_cfg_load(const char *path, struct idem_cfg **ret_cfg,
                                         char **ret_errors);

/* @brief As idem_cfg_load() but from memory; @name is used in messages. */
IDEM_NODISCARD idem_status idem_cfg_parse(const char *name, const char *buf, size_t len,
                                          struct idem_cfg **ret_cfg, char **ret_errors);

/* @brief Route serving @topic, or NULL. */
const struct idem_route *idem_cfg_route_for(const struct idem_cfg *cfg, const char *topic);

void idem_cfg_free(struct idem_cfg *cfg);

/*
 * @brief Calls @fn with the path of every key the configuration file accepts, in the order of
 * the tables: a section's own path ("kafka"), then its keys ("kafka.brokers"); a list's items
 * as "routes[].name". The documentation check (tests/check_docs.sh) compares this list with
 * idemd.yaml(5) through "idemd --dump-keys".
 */
void idem_cfg_keys(void (*fn)(const char *path, void *arg), void *arg);

/*
 * @brief How many workers commit batches: batch.workers, or for 0 two per online CPU, at least
 * 1 and at most 8 (a worker waits on Postgres much of its transaction; more only queue up there).
 */
int idem_cfg_workers(const struct idem_cfg *cfg);

/*
 * idemd's policy for one librdkafka consumer property. One table holds them all, read both by
 * the check of kafka.properties here and by idem_consumer_conf(), so the two cannot disagree.
 */
struct idem_cfg_kafka_prop {
	const char *name;
	/* What idemd sets it to (idem_consumer_conf(), in the table's order, before
	 * kafka.properties); NULL: set from the setting .use, or not at all (an alias). */
	const char *value;
	/* true: kafka.properties may not set it ("kafka property 'NAME' cannot be set here; use
	 * 'USE'", or without .use "... is managed by idemd and cannot be set"); false: .value is
	 * a default that kafka.properties overrides. */
	bool managed;
	const char *use; /* the setting that decides it instead, or NULL */
};

/* @brief The table of librdkafka properties idemd sets or refuses; @ret_n its length. */
const struct idem_cfg_kafka_prop *idem_cfg_kafka_props(size_t *ret_n);

/* Room for a Postgres or schema registry password, with its NUL (idem_pg, idem_schemas). */
#define IDEM_CFG_PASSWORD_MAX 1024
/* Room for a secret of kafka.properties, with its NUL. */
#define IDEM_CFG_SECRET_MAX 4096

/*
 * @brief Whether kafka.properties key @name is SECRET_env or SECRET_file for one of librdkafka's
 * secret properties (sasl.password, ssl.key.password, ssl.keystore.password,
 * sasl.oauthbearer.client.secret): its value then names an environment variable or a file
 * (idem_secret_get()) whose secret idem_consumer_conf() sets as SECRET.
 * @returns the length of SECRET at the start of @name, with *ret_file (true: _file); else 0.
 */
size_t idem_cfg_kafka_secret_ref(const char *name, bool *ret_file);

/* A warning about a valid configuration, as one line without the file's name. */
typedef void idem_cfg_warn_fn(const char *msg, void *arg);

/*
 * @brief Calls @fn (if not NULL) for each secret property of kafka.properties written in the
 * file itself ("kafka property 'sasl.password' is a secret written in the configuration file;
 * use ..."); the value is never part of it.
 * @returns how many.
 */
size_t idem_cfg_secret_warnings(const struct idem_cfg *cfg, idem_cfg_warn_fn *fn, void *arg);

/*
 * @brief Reads every secret @cfg names (postgres, schema_registry, kafka.properties' _env and
 * _file forms) once and wipes it: at start-up, before any thread, so that a missing, unsafe
 * (open to group or others), empty or overlong one stops idemd with its reason, and the
 * environment variables are taken out of the environment (idem_secret_get()).
 * @returns IDEM_OK, IDEM_ERR_CONFIG with the first problem, or IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_cfg_secrets_check(const struct idem_cfg *cfg, idem_error *err);

/* One setting whose value differs between two configurations (see idem_cfg_diff()). */
struct idem_cfg_change {
	/* Its dotted path: "log.level", "batch.max_messages", "routes[0].handler.sql"; "routes"
	 * when the number of routes differs. */
	const char *path;
	/* The new value as text ("debug", "500", "30s") for a single-valued setting, NULL for a
	 * list, a mapping or a template. Valid during the callback only. */
	const char *value;
	/* true: the running daemon applies it on SIGHUP; false: it takes effect at restart. */
	bool reload;
};

typedef void idem_cfg_change_fn(const struct idem_cfg_change *change, void *arg);

/*
 * @brief Compare two configurations setting by setting, driven by the same tables that load
 * them: calls @fn (if not NULL) with @arg for every setting whose value in @cfg differs from
 * @old, in the order of the tables. Values computed at load (kafka.topics from the routes,
 * routes[].consumer from kafka.group_id) are compared as loaded. Routes are compared by
 * position: a different number of routes is one change of "routes", otherwise each route
 * key is compared; no route key is reloadable.
 * @returns the number of changed settings (0: nothing changed).
 */
size_t idem_cfg_diff(const struct idem_cfg *old, const struct idem_cfg *cfg, idem_cfg_change_fn *fn,
                     void *arg);

#endif
