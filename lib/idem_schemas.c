/*
 * idem_schemas.c - the schema registry of a configuration, as struct idem_jsondoc asks for
 * schemas: idem_registry caches parsed Avro and Protobuf schemas (with their type), fetched
 * once per id, and JSON schemas compiled for routes that validate (idem_jsonschema; a schema
 * that does not compile is kept with the reason: only validating routes need it). Tools ask and
 * wait (idem_schemas_attach()); the daemon's consumer thread never waits on the network
 * (idem_schemas_attach_async(): the registry's fetchers fetch, and @wake tells it when one ended).
 */
#include "idem_schemas.h"

#include <json-c/json.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_avro.h"
#include "idem_jsonschema.h"
#include "idem_protobuf.h"

struct idem_schemas {
	idem_registry *reg;
	int timeout_ms;
	void (*wake)(void *ctx);
	void *wake_ctx;
	atomic_uint_fast64_t answers; /* background fetches ended */
};

/*
 * What the registry's cache holds for a schema: the schema with its type, reference counted
 * (the cache's reference and those of the threads reading it).
 */
struct schema_obj {
	atomic_int refs;
	enum idem_schema_type type;
	/*
	 * idem_avro_schema *, idem_pb_schema * or idem_jsonschema *, one reference; NULL for a
	 * JSON schema that does not compile, with the reason in error (routes that do not
	 * validate read its values all the same).
	 */
	void *schema;
	char *error;
};

static void drop_schema(enum idem_schema_type type, void *schema)
{
	switch (type) {
	case IDEM_SCHEMA_TYPE_PROTOBUF:
		idem_pb_schema_unref(schema);
		break;
	case IDEM_SCHEMA_TYPE_JSON:
		idem_jsonschema_unref(schema);
		break;
	case IDEM_SCHEMA_TYPE_AVRO:
		idem_avro_schema_unref(schema);
		break;
	}
}

static idem_status wrap(enum idem_schema_type type, void *schema, const char *error, void **ret_obj,
                        char *why, size_t whylen)
{
	struct schema_obj *o = malloc(sizeof(*o));

	if (o == NULL || (error != NULL && (o->error = strdup(error)) == NULL)) {
		free(o);
		drop_schema(type, schema);
		snprintf(why, whylen, "out of memory");
		return IDEM_ERR_NOMEM;
	}
	if (error == NULL)
		o->error = NULL;
	atomic_init(&o->refs, 1);
	o->type = type;
	o->schema = schema;
	*ret_obj = o;
	return IDEM_OK;
}

/* An Avro schema (schemaType AVRO, or none). */
IDEM_TESTABLE idem_status idem__schemas_parse_avro(const char *text, size_t len, void **ret_obj,
                                                   char *why, size_t whylen);
IDEM_TESTABLE idem_status idem__schemas_parse_avro(const char *text, size_t len, void **ret_obj,
                                                   char *why, size_t whylen)
{
	idem_avro_schema *schema;
	idem_error e = { 0 };
	idem_status r;

	r = idem_avro_schema_new(text, len, &schema, &e);
	if (r != IDEM_OK) {
		snprintf(why, whylen, "%s", e.msg);
		return r;
	}
	return wrap(IDEM_SCHEMA_TYPE_AVRO, schema, NULL, ret_obj, why, whylen);
}

/* A Protobuf schema (schemaType PROTOBUF) with the files its references name. */
IDEM_TESTABLE idem_status idem__schemas_parse_protobuf(const char *text, size_t len, int32_t id,
                                                       const struct idem_pb_file *deps,
                                                       size_t n_deps, void **ret_obj, char *why,
                                                       size_t whylen);
IDEM_TESTABLE idem_status idem__schemas_parse_protobuf(const char *text, size_t len, int32_t id,
                                                       const struct idem_pb_file *deps,
                                                       size_t n_deps, void **ret_obj, char *why,
                                                       size_t whylen)
{
	idem_pb_schema *schema;
	idem_error e = { 0 };
	char name[48];
	idem_status r;

	/* The registry gives the schema of an id no file name: this one names it in messages. */
	snprintf(name, sizeof(name), "schema-%d.proto", (int)id);
	r = idem_pb_schema_new(name, text, len, deps, n_deps, &schema, &e);
	if (r != IDEM_OK) {
		snprintf(why, whylen, "%s", e.msg);
		return r;
	}
	return wrap(IDEM_SCHEMA_TYPE_PROTOBUF, schema, NULL, ret_obj, why, whylen);
}

/*
 * A JSON schema (schemaType JSON): JSON text, an object or a boolean (JSON Schema's two forms).
 * The registry checked it when it was registered; this only refuses an answer that cannot be
 * one. It is compiled for the routes that validate; one idemd cannot check (a keyword it does
 * not know how to check, a remote reference) is kept with the reason, for them to refuse.
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
	if (r == IDEM_OK) {
		idem_jsonschema *compiled = NULL;
		idem_error e = { 0 };

		r = idem_jsonschema_new(text, len, &compiled, &e);
		if (r == IDEM_ERR_NOMEM) {
			snprintf(why, whylen, "out of memory");
			return r;
		}
		r = wrap(IDEM_SCHEMA_TYPE_JSON, compiled, r == IDEM_OK ? NULL : e.msg, ret_obj, why,
		         whylen);
	}
	return r;
}

IDEM_TESTABLE void *idem__schemas_ref(void *obj);
IDEM_TESTABLE void *idem__schemas_ref(void *obj)
{
	atomic_fetch_add(&((struct schema_obj *)obj)->refs, 1);
	return obj;
}

IDEM_TESTABLE void idem__schemas_unref(void *obj);
IDEM_TESTABLE void idem__schemas_unref(void *obj)
{
	struct schema_obj *o = obj;

	if (o == NULL || atomic_fetch_sub(&o->refs, 1) != 1)
		return;
	drop_schema(o->type, o->schema);
	free(o->error);
	free(o);
}

static const char *schema_type_name(enum idem_schema_type type)
{
	switch (type) {
	case IDEM_SCHEMA_TYPE_JSON:
		return "JSON";
	case IDEM_SCHEMA_TYPE_PROTOBUF:
		return "PROTOBUF";
	case IDEM_SCHEMA_TYPE_AVRO:
		break;
	}
	return "AVRO";
}

/*
 * The registry's @answer for @id as struct idem_jsondoc's, with the schema (@obj) on OK: a
 * schema of another @type than the field reads is UNKNOWN, as the registry's own answer for a
 * type idemd does not read is ("schema id 7 is JSON, not AVRO"). For JSON, *@ret_schema is
 * the compiled schema when @ret_schema is not NULL (a route that validates), and one that did
 * not compile is UNKNOWN for it ("schema id 7 cannot be checked: ...").
 */
IDEM_TESTABLE enum idem_schema_answer
idem__schemas_answer(int timeout_ms, enum idem_registry_answer answer, void *obj, int32_t id,
                     enum idem_schema_type type, void **ret_schema, char *why, size_t whylen,
                     int *ret_retry_ms);
IDEM_TESTABLE enum idem_schema_answer
idem__schemas_answer(int timeout_ms, enum idem_registry_answer answer, void *obj, int32_t id,
                     enum idem_schema_type type, void **ret_schema, char *why, size_t whylen,
                     int *ret_retry_ms)
{
	struct schema_obj *o = obj;

	switch (answer) {
	case IDEM_REGISTRY_OK:
		if (o->type != type) {
			snprintf(why, whylen, "schema id %d is %s, not %s", (int)id,
			         schema_type_name(o->type), schema_type_name(type));
			idem__schemas_unref(obj);
			return IDEM_SCHEMA_UNKNOWN;
		}
		if (type == IDEM_SCHEMA_TYPE_AVRO) {
			*ret_schema = idem_avro_schema_ref(o->schema);
		} else if (type == IDEM_SCHEMA_TYPE_PROTOBUF) {
			*ret_schema = idem_pb_schema_ref(o->schema);
		} else if (ret_schema != NULL) {
			if (o->schema == NULL) {
				snprintf(why, whylen, "schema id %d cannot be checked: %s", (int)id,
				         o->error != NULL ? o->error : "not compiled");
				idem__schemas_unref(obj);
				return IDEM_SCHEMA_UNKNOWN;
			}
			*ret_schema = idem_jsonschema_ref(o->schema);
		}
		idem__schemas_unref(obj);
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
                                          void **ret_schema, char *why, size_t whylen,
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
                                           void **ret_schema, char *why, size_t whylen,
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
	opts.parse = idem__schemas_parse_avro;
	opts.parse_json = idem__schemas_parse_json;
	opts.parse_protobuf = idem__schemas_parse_protobuf;
	opts.ref = idem__schemas_ref;
	opts.unref = idem__schemas_unref;
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

idem_status idem_schemas_ping(idem_schemas *s, long *ret_http, idem_error *err)
{
	return idem_registry_ping(s->reg, ret_http, err);
}
