/*
 * idem_field.c - field names, business-key templates and their extraction from messages.
 *
 * Extraction runs once per message on the hot path, so it allocates nothing beyond growing the
 * caller's idem_buf. json: fields are idem_field_json.c's (idem_field_int.h); avro: and
 * protobuf: fields are decoded here once per message, through idem_avro and idem_protobuf.
 *
 * Kafka allows a header name to repeat. The last occurrence wins, for business keys and for
 * handler parameters alike: a producer that "sets" a header a library already added appends it.
 */
#include "idem_field.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_field_int.h"

static const struct {
	const char *name;
	enum idem_field_kind kind;
} field_names[] = {
	{ "value", IDEM_FIELD_VALUE },
	{ "key", IDEM_FIELD_KEY },
	{ "business_key", IDEM_FIELD_BUSINESS_KEY },
	{ "topic", IDEM_FIELD_TOPIC },
	{ "partition", IDEM_FIELD_PARTITION },
	{ "offset", IDEM_FIELD_OFFSET },
	{ "timestamp", IDEM_FIELD_TIMESTAMP },
	{ "traceparent", IDEM_FIELD_TRACEPARENT },
	{ "tracestate", IDEM_FIELD_TRACESTATE },
};

static idem_status parse_fail(char *errbuf, size_t errlen, idem_status r, const char *fmt, ...)
        IDEM_PRINTF(4, 5);

static idem_status parse_fail(char *errbuf, size_t errlen, idem_status r, const char *fmt, ...)
{
	va_list ap;

	if (errbuf == NULL || errlen == 0)
		return r;
	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
	return r;
}

static idem_status check_json_pointer(const char *field, const char *ptr, char *errbuf,
                                      size_t errlen)
{
	const char *why = idem_json_pointer_problem(ptr);

	if (why == NULL)
		return IDEM_OK;
	return parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
	                  "invalid JSON pointer in field '%s': %s", field, why);
}

idem_status idem_field_parse(const char *s, struct idem_field *ret_field, char *errbuf,
                             size_t errlen)
{
	enum idem_field_kind kind = IDEM_FIELD_LITERAL;
	const char *arg = NULL;
	char *copy = NULL;
	idem_status r;

	if (s == NULL || s[0] == '\0')
		return parse_fail(errbuf, errlen, IDEM_ERR_INVALID, "empty field name");
	if (strncmp(s, "header:", 7) == 0) {
		kind = IDEM_FIELD_HEADER;
		arg = s + 7;
		if (arg[0] == '\0')
			return parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
			                  "empty header name in field 'header:'");
	} else if (strncmp(s, "json:", 5) == 0 || strncmp(s, "avro:", 5) == 0 ||
	           strncmp(s, "avro-key:", 9) == 0 || strncmp(s, "protobuf:", 9) == 0 ||
	           strncmp(s, "protobuf-key:", 13) == 0) {
		bool key = strncmp(s, "avro-key:", 9) == 0 || strncmp(s, "protobuf-key:", 13) == 0;

		kind = s[0] == 'j'   ? IDEM_FIELD_JSON
		       : s[0] == 'a' ? (key ? IDEM_FIELD_AVRO_KEY : IDEM_FIELD_AVRO)
		                     : (key ? IDEM_FIELD_PROTOBUF_KEY : IDEM_FIELD_PROTOBUF);
		arg = strchr(s, ':') + 1;
		r = check_json_pointer(s, arg, errbuf, errlen);
		if (r != IDEM_OK)
			return r;
	} else {
		for (size_t i = 0; i < IDEM_ARRAY_SIZE(field_names); i++) {
			if (strcmp(s, field_names[i].name) == 0) {
				kind = field_names[i].kind;
				break;
			}
		}
		if (kind == IDEM_FIELD_LITERAL)
			return parse_fail(
			        errbuf, errlen, IDEM_ERR_INVALID,
			        "unknown field '%s' (expected value, key, business_key, topic, partition, offset, timestamp, traceparent, tracestate, header:NAME, or json:, avro:, avro-key:, protobuf: or protobuf-key: with a /pointer)",
			        s);
	}
	if (arg != NULL) {
		copy = strdup(arg);
		if (copy == NULL)
			return parse_fail(errbuf, errlen, IDEM_ERR_NOMEM, "%s",
			                  idem_status_str(IDEM_ERR_NOMEM));
	}
	ret_field->kind = kind;
	ret_field->arg = copy;
	return IDEM_OK;
}

void idem_field_done(struct idem_field *f)
{
	if (f == NULL)
		return;
	free(f->arg);
	f->arg = NULL;
	f->kind = IDEM_FIELD_LITERAL;
}

void idem_template_done(struct idem_template *t)
{
	if (t == NULL)
		return;
	for (size_t i = 0; i < t->n_parts; i++)
		idem_field_done(&t->parts[i]);
	free(t->parts);
	t->parts = NULL;
	t->n_parts = 0;
}

bool idem_template_needs_json(const struct idem_template *t)
{
	if (t == NULL)
		return false;
	for (size_t i = 0; i < t->n_parts; i++) {
		if (t->parts[i].kind == IDEM_FIELD_JSON)
			return true;
	}
	return false;
}

bool idem_field_schema(enum idem_field_kind kind, enum idem_schema_type *ret_type, bool *ret_key)
{
	switch (kind) {
	case IDEM_FIELD_AVRO:
	case IDEM_FIELD_AVRO_KEY:
		*ret_type = IDEM_SCHEMA_TYPE_AVRO;
		*ret_key = kind == IDEM_FIELD_AVRO_KEY;
		return true;
	case IDEM_FIELD_PROTOBUF:
	case IDEM_FIELD_PROTOBUF_KEY:
		*ret_type = IDEM_SCHEMA_TYPE_PROTOBUF;
		*ret_key = kind == IDEM_FIELD_PROTOBUF_KEY;
		return true;
	default:
		return false;
	}
}

bool idem_template_needs_avro(const struct idem_template *t)
{
	enum idem_schema_type type;
	bool key;

	if (t == NULL)
		return false;
	for (size_t i = 0; i < t->n_parts; i++) {
		if (idem_field_schema(t->parts[i].kind, &type, &key))
			return true;
	}
	return false;
}

/* Appends @f to @t, taking ownership of f->arg even on failure. */
static idem_status template_push(struct idem_template *t, size_t *cap, struct idem_field *f)
{
	struct idem_field *parts;

	if (t->n_parts == *cap) {
		size_t n = *cap ? *cap * 2 : 4;

		parts = realloc(t->parts, n * sizeof(*parts));
		if (parts == NULL) {
			idem_field_done(f);
			return IDEM_ERR_NOMEM;
		}
		t->parts = parts;
		*cap = n;
	}
	t->parts[t->n_parts++] = *f;
	return IDEM_OK;
}

/* Turns the pending literal text lit[0..*n) into a part, if there is any. */
static idem_status template_flush_literal(struct idem_template *t, size_t *cap, const char *lit,
                                          size_t *n)
{
	struct idem_field f = { IDEM_FIELD_LITERAL, NULL };

	if (*n == 0)
		return IDEM_OK;
	f.arg = strndup(lit, *n);
	if (f.arg == NULL)
		return IDEM_ERR_NOMEM;
	*n = 0;
	return template_push(t, cap, &f);
}

static idem_status template_parse_parts(const char *s, struct idem_template *t, char *errbuf,
                                        size_t errlen)
{
	struct idem_field f;
	size_t cap = 0, n_lit = 0, n_fields = 0;
	const char *p = s;
	char *lit, *name;
	idem_status r;

	lit = malloc(strlen(s) + 1);
	if (lit == NULL)
		return parse_fail(errbuf, errlen, IDEM_ERR_NOMEM, "%s",
		                  idem_status_str(IDEM_ERR_NOMEM));
	lit[0] = '\0';
	while (*p != '\0') {
		const char *end;

		if (p[0] != '$' || (p[1] != '$' && p[1] != '{')) {
			lit[n_lit++] = *p++;
			continue;
		}
		if (p[1] == '$') {
			lit[n_lit++] = '$';
			p += 2;
			continue;
		}
		end = strchr(p + 2, '}');
		if (end == NULL) {
			r = parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
			               "unterminated '${' in business key template '%s'", s);
			goto out_free_lit;
		}
		r = template_flush_literal(t, &cap, lit, &n_lit);
		if (r != IDEM_OK) {
			r = parse_fail(errbuf, errlen, r, "%s", idem_status_str(IDEM_ERR_NOMEM));
			goto out_free_lit;
		}
		name = strndup(p + 2, (size_t)(end - (p + 2)));
		r = name != NULL ? idem_field_parse(name, &f, errbuf, errlen)
		                 : parse_fail(errbuf, errlen, IDEM_ERR_NOMEM, "%s",
		                              idem_status_str(IDEM_ERR_NOMEM));
		free(name);
		if (r != IDEM_OK)
			goto out_free_lit;
		if (f.kind == IDEM_FIELD_BUSINESS_KEY) {
			idem_field_done(&f);
			r = parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
			               "business key template cannot reference business_key");
			goto out_free_lit;
		}
		r = template_push(t, &cap, &f);
		if (r != IDEM_OK) {
			r = parse_fail(errbuf, errlen, r, "%s", idem_status_str(IDEM_ERR_NOMEM));
			goto out_free_lit;
		}
		n_fields++;
		p = end + 1;
	}
	r = template_flush_literal(t, &cap, lit, &n_lit);
	if (r != IDEM_OK)
		r = parse_fail(errbuf, errlen, r, "%s", idem_status_str(IDEM_ERR_NOMEM));
	else if (n_fields == 0)
		r = parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
		               "business key template references no field");
out_free_lit:
	free(lit);
	return r;
}

idem_status idem_template_parse(const char *s, struct idem_template *ret_tpl, char *errbuf,
                                size_t errlen)
{
	struct idem_template t = { NULL, 0 };
	struct idem_field f;
	char why[256];
	idem_status r;

	if (s == NULL || s[0] == '\0')
		return parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
		                  "business key template is empty");
	/* "json:/order_no" is shorthand for "${json:/order_no}". */
	if (strstr(s, "${") == NULL) {
		r = idem_field_parse(s, &f, why, sizeof(why));
		if (r == IDEM_ERR_NOMEM)
			return parse_fail(errbuf, errlen, r, "%s", idem_status_str(IDEM_ERR_NOMEM));
		if (r != IDEM_OK)
			return parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
			                  "business key template references no field: %s", why);
		if (f.kind == IDEM_FIELD_BUSINESS_KEY) {
			idem_field_done(&f);
			return parse_fail(errbuf, errlen, IDEM_ERR_INVALID,
			                  "business key template cannot reference business_key");
		}
		t.parts = malloc(sizeof(*t.parts));
		if (t.parts == NULL) {
			idem_field_done(&f);
			return parse_fail(errbuf, errlen, IDEM_ERR_NOMEM, "%s",
			                  idem_status_str(IDEM_ERR_NOMEM));
		}
		t.parts[0] = f;
		t.n_parts = 1;
		*ret_tpl = t;
		return IDEM_OK;
	}
	r = template_parse_parts(s, &t, errbuf, errlen);
	if (r != IDEM_OK) {
		idem_template_done(&t);
		return r;
	}
	*ret_tpl = t;
	return IDEM_OK;
}

void idem_jsondoc_init(struct idem_jsondoc *doc)
{
	memset(doc, 0, sizeof(*doc));
}

void idem_jsondoc_reset(struct idem_jsondoc *doc)
{
	if (doc == NULL)
		return;
	json_object_put(doc->root);
	doc->root = NULL;
	doc->parsed = false;
	doc->members_of = NULL;
	doc->invalid = false;
	doc->errmsg[0] = '\0';
	doc->frame_read = false;
	doc->frame_invalid = false;
	doc->frame_errmsg[0] = '\0';
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(doc->avro); i++) {
		struct idem_avrodoc *a = &doc->avro[i];

		/* The decoded datum goes (and its schema reference); the decoder stays. */
		if (a->decoded && a->dec != NULL)
			idem_avro_dec_reset(a->dec);
		if (a->decoded && a->pb != NULL)
			idem_pb_dec_reset(a->pb);
		a->decoded = false;
		a->invalid = false;
		a->errmsg[0] = '\0';
	}
}

void idem_jsondoc_done(struct idem_jsondoc *doc)
{
	if (doc == NULL)
		return;
	idem_jsondoc_reset(doc);
	if (doc->tok != NULL)
		json_tokener_free(doc->tok);
	doc->tok = NULL;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(doc->avro); i++) {
		idem_avro_dec_free(doc->avro[i].dec);
		doc->avro[i].dec = NULL;
		idem_pb_dec_free(doc->avro[i].pb);
		doc->avro[i].pb = NULL;
	}
}

/*
 * Decodes the Confluent-framed Avro @p[0..@n) (the value, @which 0, or the key, 1) into @doc
 * unless that was done already for this message. As for JSON, bytes that are not Avro of a
 * known schema are not a failure here: they set a->invalid and a->errmsg. A schema that cannot
 * be had now is: IDEM_ERR_UNAVAILABLE, with doc->retry_ms (and doc->pending when it is being
 * fetched: the owner is told when that fetch ends, idem_schemas).
 */
idem_status idem__field_frame_schema(struct idem_jsondoc *doc, const void *p, size_t n,
                                     enum idem_schema_type type, const char *what,
                                     void **ret_schema, const void **ret_body, size_t *ret_len,
                                     int32_t *ret_id, bool *ret_invalid, char *why, size_t whylen,
                                     idem_error *err)
{
	int retry_ms = 0;
	enum idem_schema_answer answer;
	idem_error e = { 0 };
	idem_status r;

	*ret_invalid = false;
	if (idem_avro_frame(p, n, ret_id, ret_body, ret_len, &e) != IDEM_OK) {
		snprintf(why, whylen, "%s", e.msg);
		*ret_invalid = true;
		return IDEM_OK;
	}
	if (doc->schema_fn == NULL)
		return idem_error_set(err, IDEM_ERR_INVALID, "no schema registry to read %s", what);
	answer = doc->schema_fn(doc->schema_ctx, *ret_id, type, ret_schema, why, whylen, &retry_ms);
	switch (answer) {
	case IDEM_SCHEMA_OK:
		break;
	case IDEM_SCHEMA_UNKNOWN:
		*ret_invalid = true;
		break;
	case IDEM_SCHEMA_UNAVAILABLE:
	case IDEM_SCHEMA_PENDING:
		doc->retry_ms = retry_ms > 0 ? retry_ms : 1;
		doc->pending = answer == IDEM_SCHEMA_PENDING;
		r = idem_error_set(err, IDEM_ERR_UNAVAILABLE, "%s", why);
		why[0] = '\0';
		return r;
	}
	return IDEM_OK;
}

static idem_status schema_load(struct idem_jsondoc *doc, int which, enum idem_schema_type type,
                               const void *p, size_t n, idem_error *err)
{
	struct idem_avrodoc *a = &doc->avro[which];
	bool pb = type == IDEM_SCHEMA_TYPE_PROTOBUF;
	void *schema = NULL;
	const void *body;
	size_t len;
	int32_t id;
	bool invalid;
	idem_error e = { 0 };
	idem_status r;

	if (a->decoded || a->invalid)
		return IDEM_OK;
	if ((r = idem__field_frame_schema(doc, p, n, type, pb ? "protobuf fields" : "avro fields",
	                                  &schema, &body, &len, &id, &invalid, a->errmsg,
	                                  sizeof(a->errmsg), err)) != IDEM_OK)
		return r;
	if (invalid) {
		a->invalid = true;
		return IDEM_OK;
	}
	if (pb) {
		if (a->pb == NULL && (a->pb = idem_pb_dec_new()) == NULL) {
			idem_pb_schema_unref(schema);
			return idem_error_nomem(err);
		}
		r = idem_pb_decode(a->pb, schema, id, IDEM_AVRO_HEADER_BYTES, body, len, &e);
		idem_pb_schema_unref(schema);
	} else {
		if (a->dec == NULL && (a->dec = idem_avro_dec_new()) == NULL) {
			idem_avro_schema_unref(schema);
			return idem_error_nomem(err);
		}
		r = idem_avro_decode(a->dec, schema, id, IDEM_AVRO_HEADER_BYTES, body, len, &e);
		idem_avro_schema_unref(schema);
	}
	if (r == IDEM_ERR_NOMEM)
		return idem_error_nomem(err);
	if (r != IDEM_OK) {
		snprintf(a->errmsg, sizeof(a->errmsg), "%s", e.msg);
		a->invalid = true;
		return IDEM_OK;
	}
	a->decoded = true;
	return IDEM_OK;
}

/*
 * An avro:, avro-key:, protobuf: or protobuf-key: field, for field_read(): as
 * idem__field_json_read() for JSON.
 */
static idem_status schema_read(const struct idem_field *f, const struct idem_msgview *m,
                               struct idem_jsondoc *doc, bool scalar, struct idem_buf *out,
                               const char **ret_absent, idem_error *err)
{
	enum idem_schema_type type = IDEM_SCHEMA_TYPE_AVRO;
	bool key = false, pb;
	int which;
	const void *p;
	const char *name = idem_field_kind_str(f->kind);
	idem_error e = { 0 };
	idem_status r;

	(void)idem_field_schema(f->kind, &type, &key);
	pb = type == IDEM_SCHEMA_TYPE_PROTOBUF;
	which = key;
	p = key ? m->key : m->value;

	if (p == NULL) {
		*ret_absent = which ? "message has no key" : "message has no value";
		return IDEM_OK;
	}
	r = schema_load(doc, which, type, p, which ? m->key_len : m->value_len, err);
	if (r != IDEM_OK)
		return r;
	if (doc->avro[which].invalid)
		return idem_error_set(err, IDEM_ERR_KEY,
		                      "%s:%s: %s is not %s this route can read: %s", name, f->arg,
		                      which ? "key" : "value", pb ? "Protobuf" : "Avro",
		                      doc->avro[which].errmsg);
	r = pb ? idem_pb_read(doc->avro[which].pb, f->arg, scalar, out, ret_absent, &e)
	       : idem_avro_read(doc->avro[which].dec, f->arg, scalar, out, ret_absent, &e);
	if (r == IDEM_ERR_NOMEM)
		return idem_error_nomem(err);
	if (r != IDEM_OK)
		return idem_error_set(err, r, "%s:%s: %s", name, f->arg, e.msg);
	return IDEM_OK;
}

static const struct idem_header *find_header(const struct idem_msgview *m, const char *name)
{
	for (size_t i = m->n_headers; i > 0; i--) {
		const struct idem_header *h = &m->headers[i - 1];

		if (h->name != NULL && strcmp(h->name, name) == 0)
			return h;
	}
	return NULL;
}

void idem_field_trace(const struct idem_msgview *m, struct idem_msgtrace *ret)
{
	const struct idem_header *tp = NULL;
	struct idem_trace t;
	char span[17];
	size_t n = 0;

	ret->has = false;
	ret->traceparent[0] = ret->tracestate[0] = '\0';
	for (size_t i = 0; i < m->n_headers; i++) {
		const struct idem_header *h = &m->headers[i];

		if (h->name == NULL || strcmp(h->name, "traceparent") != 0)
			continue;
		if (tp != NULL)
			return; /* two: neither can be trusted */
		tp = h;
	}
	if (tp == NULL || !idem_trace_parse(tp->value, tp->len, &t))
		return;
	ret->has = true;
	idem_trace_span(m->consumer != NULL ? m->consumer : "", m->topic != NULL ? m->topic : "",
	                m->partition, m->offset, span);
	idem_trace_child(&t, span, ret->traceparent);
	for (size_t i = 0; i < m->n_headers; i++) {
		const struct idem_header *h = &m->headers[i];
		size_t need;

		if (h->name == NULL || strcmp(h->name, "tracestate") != 0 || h->value == NULL ||
		    h->len == 0)
			continue;
		need = n + (n > 0) + h->len;
		if (need > IDEM_TRACESTATE_MAX) {
			n = 0; /* too long to pass on whole: none rather than a cut list */
			break;
		}
		if (n > 0)
			ret->tracestate[n++] = ',';
		memcpy(ret->tracestate + n, h->value, h->len);
		n += h->len;
	}
	ret->tracestate[n] = '\0';
	if (n > 0 && !idem_tracestate_ok(ret->tracestate, n))
		ret->tracestate[0] = '\0';
}

/* A Kafka timestamp (ms since the epoch, >= 0) as "YYYY-MM-DD HH:MM:SS.mmm+00". */
static idem_status append_timestamp(struct idem_buf *out, int64_t ms)
{
	int64_t secs = ms / 1000, sod = secs % 86400, year;
	int month, day;

	idem_civil_from_days(secs / 86400, &year, &month, &day);
	return idem_buf_printf(out,
	                       "%04" PRId64 "-%02d-%02d %02" PRId64 ":%02" PRId64 ":%02" PRId64
	                       ".%03" PRId64 "+00",
	                       year, month, day, sod / 3600, sod / 60 % 60, sod % 60, ms % 1000);
}

/*
 * The one reader of a message's fields, for business keys (idem_key_build()) and handler
 * parameters (idem_field_get()) alike, so that a new kind of field is added here only: appends
 * field @f of @m to @out. A field the message does not have is not an error here: *ret_absent
 * says why ("message has no value", "no such header", ...; NULL when present), and the caller
 * decides (a key refuses the message, a parameter is NULL). @bkey is the business key (NULL: none
 * yet). With @scalar (a key), a JSON value must be a scalar json-c keeps exactly.
 */
static idem_status field_read(const struct idem_field *f, const struct idem_msgview *m,
                              struct idem_jsondoc *doc, const char *bkey, bool scalar,
                              struct idem_buf *out, const char **ret_absent, idem_error *err)
{
	const struct idem_header *h;
	struct idem_msgtrace trace;
	const char *absent = NULL;
	idem_status r = IDEM_OK;

	*ret_absent = NULL;
	switch (f->kind) {
	case IDEM_FIELD_LITERAL:
		if (f->arg != NULL)
			r = idem_buf_append_str(out, f->arg);
		break;
	case IDEM_FIELD_VALUE:
		if (m->value == NULL)
			absent = "message has no value";
		else
			r = idem_buf_append(out, m->value, m->value_len);
		break;
	case IDEM_FIELD_KEY:
		if (m->key == NULL)
			absent = "message has no key";
		else
			r = idem_buf_append(out, m->key, m->key_len);
		break;
	case IDEM_FIELD_BUSINESS_KEY:
		if (bkey == NULL)
			absent = "no business key";
		else
			r = idem_buf_append_str(out, bkey);
		break;
	case IDEM_FIELD_TOPIC:
		if (m->topic == NULL)
			absent = "message has no topic";
		else
			r = idem_buf_append_str(out, m->topic);
		break;
	case IDEM_FIELD_PARTITION:
		r = idem_buf_printf(out, "%" PRId32, m->partition);
		break;
	case IDEM_FIELD_OFFSET:
		r = idem_buf_printf(out, "%" PRId64, m->offset);
		break;
	case IDEM_FIELD_TIMESTAMP:
		if (m->timestamp_ms < 0)
			absent = "message has no timestamp";
		else
			r = append_timestamp(out, m->timestamp_ms);
		break;
	case IDEM_FIELD_TRACEPARENT:
	case IDEM_FIELD_TRACESTATE:
		idem_field_trace(m, &trace);
		if (!trace.has)
			absent = "message has no valid traceparent header";
		else if (f->kind == IDEM_FIELD_TRACEPARENT)
			r = idem_buf_append_str(out, trace.traceparent);
		else if (trace.tracestate[0] == '\0')
			absent = "message has no tracestate to pass on";
		else
			r = idem_buf_append_str(out, trace.tracestate);
		break;
	case IDEM_FIELD_HEADER:
		h = find_header(m, f->arg);
		if (h == NULL)
			absent = "no such header";
		else if (h->value == NULL)
			absent = "header value is null";
		else
			r = idem_buf_append(out, h->value, h->len);
		break;
	case IDEM_FIELD_JSON:
		return idem__field_json_read(f, m, doc, scalar, out, ret_absent, err);
	case IDEM_FIELD_AVRO:
	case IDEM_FIELD_AVRO_KEY:
	case IDEM_FIELD_PROTOBUF:
	case IDEM_FIELD_PROTOBUF_KEY:
		return schema_read(f, m, doc, scalar, out, ret_absent, err);
	}
	if (r != IDEM_OK)
		return idem_error_nomem(err);
	*ret_absent = absent;
	return IDEM_OK;
}

/* The field's name as written in a template: "value", "header:tenant", "json:/id". */
static const char *field_kind_name(enum idem_field_kind kind)
{
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(field_names); i++)
		if (field_names[i].kind == kind)
			return field_names[i].name;
	switch (kind) {
	case IDEM_FIELD_HEADER:
		return "header";
	case IDEM_FIELD_JSON:
		return "json";
	case IDEM_FIELD_AVRO:
		return "avro";
	case IDEM_FIELD_AVRO_KEY:
		return "avro-key";
	case IDEM_FIELD_PROTOBUF:
		return "protobuf";
	case IDEM_FIELD_PROTOBUF_KEY:
		return "protobuf-key";
	default:
		return "text";
	}
}

const char *idem_field_kind_str(enum idem_field_kind kind)
{
	return field_kind_name(kind);
}

static idem_status key_append_part(const struct idem_field *f, const struct idem_msgview *m,
                                   struct idem_jsondoc *doc, struct idem_buf *out, idem_error *err)
{
	const char *absent;
	bool has_arg = f->arg != NULL;
	idem_status r;

	if (f->kind == IDEM_FIELD_BUSINESS_KEY)
		return idem_error_set(err, IDEM_ERR_INVALID,
		                      "business key template cannot reference business_key");
	if ((r = field_read(f, m, doc, NULL, true, out, &absent, err)) != IDEM_OK || absent == NULL)
		return r;
	return idem_error_set(err, IDEM_ERR_KEY, "%s%s%s: %s", field_kind_name(f->kind),
	                      has_arg ? ":" : "", has_arg ? f->arg : "", absent);
}

static bool key_needs_hex(const struct idem_buf *b)
{
	if (b->len >= 2 && b->data[0] == '\\' && b->data[1] == 'x')
		return true;
	return !idem_utf8_valid(b->data, b->len);
}

idem_status idem_key_build(const struct idem_template *tpl, const struct idem_msgview *m,
                           struct idem_jsondoc *doc, size_t max_len, struct idem_buf *out,
                           idem_error *err)
{
	static const char hex[] = "0123456789abcdef";
	size_t n, enc;
	idem_status r;

	idem_buf_reset(out);
	/* Every message of a validating route is checked, whatever fields it reads. */
	if ((r = idem__field_json_validate(doc, m, err)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < tpl->n_parts; i++) {
		r = key_append_part(&tpl->parts[i], m, doc, out, err);
		if (r != IDEM_OK)
			return r;
	}
	n = out->len;
	if (n == 0)
		return idem_error_set(err, IDEM_ERR_KEY, "business key is empty");
	if (!key_needs_hex(out)) {
		if (n > max_len)
			return idem_error_set(
			        err, IDEM_ERR_KEY,
			        "business key is %zu bytes, longer than the limit of %zu", n,
			        max_len);
		return IDEM_OK;
	}
	if (n > (SIZE_MAX - 2) / 2 || 2 + 2 * n > max_len)
		return idem_error_set(
		        err, IDEM_ERR_KEY,
		        "business key is %zu bytes after hex encoding, longer than the limit of %zu",
		        n > (SIZE_MAX - 2) / 2 ? SIZE_MAX : 2 + 2 * n, max_len);
	enc = 2 + 2 * n;
	if (idem_buf_reserve(out, enc - n) != IDEM_OK)
		return idem_error_nomem(err);
	/* Encode in place from the end: byte i moves to 2+2i, past every byte still unread. */
	for (size_t i = n; i > 0; i--) {
		unsigned char c = (unsigned char)out->data[i - 1];

		out->data[2 * i] = hex[c >> 4];
		out->data[2 * i + 1] = hex[c & 0x0f];
	}
	out->data[0] = '\\';
	out->data[1] = 'x';
	out->len = enc;
	out->data[enc] = '\0';
	return IDEM_OK;
}

idem_status idem_field_get(const struct idem_field *f, const struct idem_msgview *m,
                           struct idem_jsondoc *doc, const char *bkey, struct idem_buf *out,
                           bool *ret_null, idem_error *err)
{
	const char *absent;
	idem_status r;

	/* A present but empty field must still read as "" (not NULL) through out->data. */
	if (idem_buf_reserve(out, 0) != IDEM_OK)
		return idem_error_nomem(err);
	idem_buf_reset(out);
	if ((r = field_read(f, m, doc, bkey, false, out, &absent, err)) != IDEM_OK)
		return r;
	*ret_null = absent != NULL;
	return IDEM_OK;
}
