/*
 * idem_schemas.c - the schema registry of a configuration, as struct idem_jsondoc asks for
 * schemas: idem_registry caches parsed idem_avro_schema objects, fetched once per id, and marks
 * the ids of JSON schemas (json_schema_mark: values are not validated against them, so nothing
 * of them is kept but their type). Tools ask and wait (idem_schemas_attach()); the daemon's
 * consumer thread never waits on the network (idem_schemas_attach_async(): the registry's
 * fetchers fetch, and @wake tells it when one ended).
 */
#include "idem_schemas.h"

#include <json-c/json.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "idem_avro.h"

struct idem_schemas {
	idem_registry *reg;
	int timeout_ms;
	void (*wake)(void *ctx);
	void *wake_ctx;
	atomic_uint_fast64_t answers; /* background fetches ended */
};

static idem_status parse_schema(const char *text, size_t len, void **ret_obj, char *why,
                                size_t whylen)
{
	idem_avro_schema *schema;
	idem_error e = { 0 };
	idem_status r;

	r = idem_avro_schema_new(text, len, &schema, &e);
	if (r != IDEM_OK) {
		snprintf(why, whylen, "%s", e.msg);
		return r;
	}
	*ret_obj = schema;
	return IDEM_OK;
}

/*
 * What the registry holds for the id of a JSON schema: one object for them all, never freed.
 * The registry's cache then answers for the id (fetched once, kept) as for an Avro schema.
 */
static char json_schema_mark;

/*
 * A JSON schema (schemaType JSON): JSON text, an object or a boolean (JSON Schema's two forms).
 * The registry checked it when it was registered; this only refuses an answer that cannot be one.
 */
IDEM_TESTABLE idem_status idem__schemas_parse_json(const char *text, size_t len, void **ret_obj,
                                                   char *why, size_t whylen);
IDEM_TESTABLE idem_status idem__schemas_parse_json(const char *text, size_t len, void **ret_obj,
                                                   char *why, size_t whylen)
{
	enum json_tokener_error jerr = json_tokener_success;
	json_object *doc;
	idem_status r = IDEM_OK;

	(void)len; /* NUL-terminated at len (idem_registry_parse_fn) */
	doc = json_tokener_parse_verbose(text, &jerr);
	if (jerr != json_tokener_success) {
		snprintf(why, whylen, "JSON schema is not JSON: %s", json_tokener_error_desc(jerr));
		r = IDEM_ERR_INVALID;
	} else if (!json_object_is_type(doc, json_type_object) &&
	           !json_object_is_type(doc, json_type_boolean)) {
		snprintf(why, whylen, "JSON schema is neither an object nor a boolean");
		r = IDEM_ERR_INVALID;
	}
	json_object_put(doc);
	if (r == IDEM_OK)
		*ret_obj = &json_schema_mark;
	return r;
}

static void *ref_schema(void *obj)
{
	return obj == &json_schema_mark ? obj : idem_avro_schema_ref(obj);
}

static void unref_schema(void *obj)
{
	if (obj != &json_schema_mark)
		idem_avro_schema_unref(obj);
}

static const char *schema_type_name(enum idem_schema_type type)
{
	return type == IDEM_SCHEMA_TYPE_JSON ? "JSON" : "AVRO";
}

/*
 * The registry's @answer for @id as struct idem_jsondoc's, with the schema (@obj) on OK: a
 * schema of another @type than the field reads is UNKNOWN, as the registry's own answer for a
 * type idemd does not read is ("schema id 7 is JSON, not AVRO").
 */
IDEM_TESTABLE enum idem_schema_answer
idem__schemas_answer(int timeout_ms, enum idem_registry_answer answer, void *obj, int32_t id,
                     enum idem_schema_type type, idem_avro_schema **ret_schema, char *why,
                     size_t whylen, int *ret_retry_ms);
IDEM_TESTABLE enum idem_schema_answer
idem__schemas_answer(int timeout_ms, enum idem_registry_answer answer, void *obj, int32_t id,
                     enum idem_schema_type type, idem_avro_schema **ret_schema, char *why,
                     size_t whylen, int *ret_retry_ms)
{
	enum idem_schema_type got;

	switch (answer) {
	case IDEM_REGISTRY_OK:
		got = obj == &json_schema_mark ? IDEM_SCHEMA_TYPE_JSON : IDEM_SCHEMA_TYPE_AVRO;
		if (got != type) {
			unref_schema(obj);
			snprintf(why, whylen, "schema id %d is %s, not %s", (int)id,
			         schema_type_name(got), schema_type_name(type));
			return IDEM_SCHEMA_UNKNOWN;
		}
		if (type == IDEM_SCHEMA_TYPE_AVRO)
			*ret_schema = obj;
		return IDEM_SCHEMA_OK;
	case IDEM_REGISTRY_UNKNOWN:
		return IDEM_SCHEMA_UNKNOWN;
	case IDEM_REGISTRY_PENDING:
		/* At the latest when the request times out; the fetch's end wakes the owner. */
		if (ret_retry_ms != NULL)
			*ret_retry_ms = timeout_ms + 1000;
		return IDEM_SCHEMA_PENDING;
	case IDEM_REGISTRY_UNAVAILABLE:
		break;
	}
	return IDEM_SCHEMA_UNAVAILABLE;
}

static enum idem_schema_answer get_schema(void *ctx, int32_t id, enum idem_schema_type type,
                                          idem_avro_schema **ret_schema, char *why, size_t whylen,
                                          int *ret_retry_ms)
{
	struct idem_schemas *s = ctx;
	void *obj = NULL;
	enum idem_registry_answer a;

	a = idem_registry_get(s->reg, id, &obj, why, whylen, ret_retry_ms);

	return idem__schemas_answer(s->timeout_ms, a, obj, id, type, ret_schema, why, whylen,
	                            ret_retry_ms);
}

/* As get_schema(), never waiting: an id not in the cache is fetched in the background. */
static enum idem_schema_answer peek_schema(void *ctx, int32_t id, enum idem_schema_type type,
                                           idem_avro_schema **ret_schema, char *why, size_t whylen,
                                           int *ret_retry_ms)
{
	struct idem_schemas *s = ctx;
	void *obj = NULL;
	enum idem_registry_answer a;

	a = idem_registry_peek(s->reg, id, &obj, why, whylen, ret_retry_ms);

	return idem__schemas_answer(s->timeout_ms, a, obj, id, type, ret_schema, why, whylen,
	                            ret_retry_ms);
}

/* A background fetch ended (a fetcher thread): count it and wake the owner. */
static void fetched(void *ctx)
{
	struct idem_schemas *s = ctx;

	atomic_fetch_add(&s->answers, 1);
	if (s->wake != NULL)
		s->wake(s->wake_ctx);
}

idem_status idem_schemas_open(const struct idem_cfg *cfg, void (*wake)(void *ctx), void *wake_ctx,
                              idem_schemas **ret_schemas, idem_error *err)
{
	struct idem_registry_opts opts = { 0 };
	struct idem_schemas *s;
	char password[IDEM_CFG_PASSWORD_MAX];
	bool have_pw = false;
	idem_status r;

	*ret_schemas = NULL;
	if (cfg->registry_url == NULL)
		return IDEM_OK;
	if ((r = idem_registry_global_init(err)) != IDEM_OK)
		return r;
	r = idem_secret_read("schema_registry", cfg->registry_password_env,
	                     cfg->registry_password_file, password, sizeof(password), &have_pw,
	                     err);
	if (r != IDEM_OK)
		return r;
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		idem_secret_wipe(password, sizeof(password));
		return idem_error_nomem(err);
	}
	opts.url = cfg->registry_url;
	opts.username = cfg->registry_username;
	opts.password = have_pw ? password : NULL;
	opts.timeout_ms = cfg->registry_timeout_ms;
	opts.retry_initial_ms = cfg->retry_initial_ms;
	opts.retry_max_ms = cfg->retry_max_ms;
	opts.parse = parse_schema;
	opts.parse_json = idem__schemas_parse_json;
	opts.ref = ref_schema;
	opts.unref = unref_schema;
	opts.notify = fetched;
	opts.notify_ctx = s;
	s->timeout_ms = cfg->registry_timeout_ms;
	s->wake = wake;
	s->wake_ctx = wake_ctx;
	atomic_init(&s->answers, 0);
	r = idem_registry_new(&opts, &s->reg, err);
	idem_secret_wipe(password, sizeof(password));
	if (r != IDEM_OK) {
		free(s);
		return r;
	}
	*ret_schemas = s;
	return IDEM_OK;
}

void idem_schemas_close(idem_schemas *s)
{
	if (s == NULL)
		return;
	idem_registry_free(s->reg);
	free(s);
}

void idem_schemas_attach(idem_schemas *s, struct idem_jsondoc *doc)
{
	doc->schema_fn = s != NULL ? get_schema : NULL;
	doc->schema_ctx = s;
}

void idem_schemas_attach_async(idem_schemas *s, struct idem_jsondoc *doc)
{
	doc->schema_fn = s != NULL ? peek_schema : NULL;
	doc->schema_ctx = s;
}

uint64_t idem_schemas_answers(idem_schemas *s)
{
	return s != NULL ? atomic_load(&s->answers) : 0;
}

void idem_schemas_retry_now(idem_schemas *s)
{
	if (s != NULL)
		idem_registry_retry_now(s->reg);
}

void idem_schemas_stats(idem_schemas *s, struct idem_registry_stats *ret_stats)
{
	if (s == NULL) {
		*ret_stats = (struct idem_registry_stats){ 0 };
		return;
	}
	idem_registry_stats(s->reg, ret_stats);
}
