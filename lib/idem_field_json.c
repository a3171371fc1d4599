/*
 * idem_field_json.c - json: fields: the value parsed as JSON (plain, or the document of a
 * Confluent-framed JSON Schema value: routes[].value_format), pointers into it and the text of
 * what they find. The other half of idem_field (idem_field_int.h): idem_field.c names the
 * fields and reads every other kind.
 *
 * A json: field is first looked for with idem_json_scalar(), which reads a plain document in
 * one pass without allocating; whatever it does not vouch for goes to json-c, whose parse of the
 * value happens at most once per message and is cached in struct idem_jsondoc (the tokener
 * itself is kept and reused). JSON pointers are resolved here rather than with
 * json_pointer_get(), which copies the pointer on every call.
 *
 * A framed value (idemd.yaml(5) JSON SCHEMA VALUES) is byte 0 = 0, bytes 1-4 the schema id, then
 * the document. Its header is read once per message and the id's schema asked for through
 * doc->schema_fn (the registry, as for avro: fields), which must be a JSON schema; with
 * doc->validate (routes[].validate) the document is checked against it (idem_jsonschema), once
 * per message, before any field is read. Past the header, the document is read exactly as a
 * plain value.
 */
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_avro.h"
#include "idem_field.h"
#include "idem_field_int.h"
#include "idem_json.h"
#include "idem_jsonschema.h"

/* Nesting deeper than this makes the value "not valid JSON" (json-c's default is 32). */
#define IDEM_FIELD_JSON_DEPTH 64

/* Pointer segments up to this length are looked up through json-c's hash table. */
#define IDEM_FIELD_SEGMENT_MAX 128

static void jsondoc_set_invalid(struct idem_jsondoc *doc, const char *fmt, ...) IDEM_PRINTF(2, 3);

static void jsondoc_set_invalid(struct idem_jsondoc *doc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(doc->errmsg, sizeof(doc->errmsg), fmt, ap);
	va_end(ap);
	doc->invalid = true;
	doc->parsed = true;
}

/*
 * Parses the value of @m (the document: past the header of a framed value) into @doc unless
 * that was done already for this message. A value that is not JSON is not a failure here: it
 * sets doc->invalid and doc->errmsg, which callers turn into an error naming their field. Byte
 * positions in errmsg are 0-based offsets into the value as received, header included.
 */
static idem_status jsondoc_load(struct idem_jsondoc *doc, const struct idem_msgview *m)
{
	size_t base = doc->framed ? IDEM_AVRO_HEADER_BYTES : 0;
	const char *nul;
	json_object *root;
	enum json_tokener_error jerr;
	size_t at;

	if (doc->parsed)
		return IDEM_OK;
	if (m->value_len > INT_MAX - 1) {
		jsondoc_set_invalid(doc, "value is too large (%zu bytes)", m->value_len);
		return IDEM_OK;
	}
	/* json-c takes a NUL as the end of the input; JSON text never contains one. */
	nul = memchr(m->value, '\0', m->value_len);
	if (nul != NULL) {
		jsondoc_set_invalid(doc, "NUL byte at byte %zu",
		                    base + (size_t)(nul - (const char *)m->value));
		return IDEM_OK;
	}
	if (doc->tok == NULL) {
		doc->tok = json_tokener_new_ex(IDEM_FIELD_JSON_DEPTH);
		if (doc->tok == NULL)
			return IDEM_ERR_NOMEM;
	}
	json_tokener_reset(doc->tok);
	json_tokener_set_flags(doc->tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(doc->tok, m->value, (int)m->value_len);
	jerr = json_tokener_get_error(doc->tok);
	at = json_tokener_get_parse_end(doc->tok);
	/*
	 * A top-level number (or an empty or truncated value) leaves the tokener waiting for more;
	 * the terminating NUL tells it the input has ended.
	 */
	if (root == NULL && jerr == json_tokener_continue) {
		root = json_tokener_parse_ex(doc->tok, "", 1);
		jerr = json_tokener_get_error(doc->tok);
		at = m->value_len;
	}
	if (jerr != json_tokener_success) {
		json_object_put(root);
		jsondoc_set_invalid(doc, "%s at byte %zu", json_tokener_error_desc(jerr),
		                    base + at);
		return IDEM_OK;
	}
	/* root is NULL when the whole value is the JSON literal null. */
	doc->root = root;
	doc->parsed = true;
	return IDEM_OK;
}

/* Compares the object key @k with the pointer token seg[0..n), which is still escaped. */
static bool segment_equal(const char *k, const char *seg, size_t n)
{
	for (size_t i = 0; i < n; i++, k++) {
		char c = seg[i];

		if (c == '~' && i + 1 < n) {
			c = seg[i + 1] == '0' ? '~' : '/';
			i++;
		}
		if (*k != c)
			return false;
	}
	return *k == '\0';
}

static bool object_member(json_object *obj, const char *seg, size_t n, json_object **ret_val)
{
	char key[IDEM_FIELD_SEGMENT_MAX];
	size_t len = 0;

	if (n < sizeof(key)) {
		for (size_t i = 0; i < n; i++) {
			if (seg[i] == '~' && i + 1 < n) {
				key[len++] = seg[i + 1] == '0' ? '~' : '/';
				i++;
			} else {
				key[len++] = seg[i];
			}
		}
		key[len] = '\0';
		return json_object_object_get_ex(obj, key, ret_val);
	}
	/* Long tokens are rare; compare them in place instead of copying them. */
	json_object_object_foreach(obj, k, v)
	{
		if (segment_equal(k, seg, n)) {
			*ret_val = v;
			return true;
		}
	}
	return false;
}

/* RFC 6901 array index: "0" or digits without a leading zero; "-" (past the end) never exists. */
static bool array_element(json_object *arr, const char *seg, size_t n, json_object **ret_val)
{
	size_t idx = 0;

	if (n == 0 || (n > 1 && seg[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (seg[i] < '0' || seg[i] > '9')
			return false;
		if (idx > (SIZE_MAX - 9) / 10)
			return false;
		idx = idx * 10 + (size_t)(seg[i] - '0');
	}
	if (idx >= json_object_array_length(arr))
		return false;
	*ret_val = json_object_array_get_idx(arr, idx);
	return true;
}

/* Resolves the (validated) pointer @ptr in @root; *ret_val is NULL for JSON null. */
static bool json_resolve(json_object *root, const char *ptr, json_object **ret_val)
{
	json_object *cur = root;
	const char *seg = ptr;

	while (*seg == '/') {
		const char *end;
		size_t n;
		bool found;

		seg++;
		end = strchr(seg, '/');
		n = end != NULL ? (size_t)(end - seg) : strlen(seg);
		if (json_object_is_type(cur, json_type_object))
			found = object_member(cur, seg, n, &cur);
		else if (json_object_is_type(cur, json_type_array))
			found = array_element(cur, seg, n, &cur);
		else
			found = false;
		if (!found)
			return false;
		seg += n;
	}
	*ret_val = cur;
	return true;
}

enum json_lookup {
	JSON_LOOKUP_FOUND,
	JSON_LOOKUP_NO_VALUE,
	JSON_LOOKUP_NOT_FOUND,
};

/* Finds json field @f in @m. A value that is not JSON is an IDEM_ERR_KEY error. */
static idem_status json_lookup(const struct idem_field *f, const struct idem_msgview *m,
                               struct idem_jsondoc *doc, json_object **ret_val,
                               enum json_lookup *ret_how, idem_error *err)
{
	idem_status r;

	if (m->value == NULL) {
		*ret_how = JSON_LOOKUP_NO_VALUE;
		return IDEM_OK;
	}
	r = jsondoc_load(doc, m);
	if (r != IDEM_OK)
		return idem_error_set(err, r, "json:%s: out of memory", f->arg);
	if (doc->invalid)
		return idem_error_set(err, IDEM_ERR_KEY, "json:%s: value is not valid JSON: %s",
		                      f->arg, doc->errmsg);
	*ret_how = json_resolve(doc->root, f->arg, ret_val) ? JSON_LOOKUP_FOUND
	                                                    : JSON_LOOKUP_NOT_FOUND;
	return IDEM_OK;
}

/*
 * Appends a non-null JSON value as text: strings as their content, everything else as json-c's
 * plain JSON text. Numbers keep the text they were written with where json-c keeps it (doubles);
 * integers are printed as json-c prints them, without the per-object buffer that costs.
 */
static idem_status json_append(struct idem_buf *out, json_object *val)
{
	const char *s;
	int64_t i;

	switch (json_object_get_type(val)) {
	case json_type_string:
		return idem_buf_append(out, json_object_get_string(val),
		                       (size_t)json_object_get_string_len(val));
	case json_type_boolean:
		return idem_buf_append_str(out, json_object_get_boolean(val) ? "true" : "false");
	case json_type_int:
		i = json_object_get_int64(val);
		if (i == INT64_MAX)
			return idem_buf_printf(out, "%" PRIu64, json_object_get_uint64(val));
		return idem_buf_printf(out, "%" PRId64, i);
	case json_type_double:
		s = json_object_get_userdata(val);
		if (s != NULL)
			return idem_buf_append_str(out, s);
		break;
	default:
		break;
	}
	s = json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN);
	if (s == NULL)
		return IDEM_ERR_NOMEM;
	return idem_buf_append_str(out, s);
}

/*
 * The scalar json field @f names in @m, read without json-c (idem_json.h), or false when that
 * reader does not vouch for it: json-c then gives the answer, or the error. Once json-c has
 * parsed the value for another field of this message, its tree answers. The value is read once
 * for all the message's fields named by one-segment pointers (idem_json_members_read()); any
 * other pointer reads it on its own.
 */
static bool json_fast(const struct idem_field *f, const struct idem_msgview *m,
                      struct idem_jsondoc *doc, const char **ret_p, size_t *ret_n)
{
	if (m->value == NULL || doc->parsed || doc->json_c_only)
		return false;
	if (f->arg[0] == '/' && strchr(f->arg + 1, '/') == NULL &&
	    (doc->members_of != m->value || doc->members_len != m->value_len)) {
		(void)idem_json_members_read(m->value, m->value_len, &doc->members);
		doc->members_of = m->value;
		doc->members_len = m->value_len;
	}
	if (doc->members_of == m->value && doc->members_len == m->value_len) {
		int r = idem_json_members_scalar(&doc->members, f->arg, ret_p, ret_n);

		if (r >= 0)
			return r == 1;
	}
	return idem_json_scalar(m->value, m->value_len, f->arg, ret_p, ret_n);
}

/*
 * Reads the Confluent header of a JSON Schema value (doc->framed) once per message, and asks
 * the schema of its id whether it is a JSON schema: a value whose header or schema is wrong
 * sets doc->frame_invalid and doc->frame_errmsg (the message cannot be read, like a value that
 * is not JSON). A schema that cannot be had now is IDEM_ERR_UNAVAILABLE, with doc->retry_ms
 * and doc->pending, as for Avro (idem_field.c avro_load()). On IDEM_OK without frame_invalid
 * the document is the value past the header.
 */
static idem_status json_frame(struct idem_jsondoc *doc, const struct idem_msgview *m,
                              idem_error *err)
{
	struct idem_msgview doc_view;
	void *schema = NULL;
	const void *body;
	size_t len;
	int32_t id;
	idem_error e = { 0 };
	idem_status r;

	if (doc->frame_read)
		return IDEM_OK;
	if ((r = idem__field_frame_schema(doc, m->value, m->value_len, IDEM_SCHEMA_TYPE_JSON,
	                                  "json-schema values", doc->validate ? &schema : NULL,
	                                  &body, &len, &id, &doc->frame_invalid, doc->frame_errmsg,
	                                  sizeof(doc->frame_errmsg), err)) != IDEM_OK)
		return r;
	doc->frame_read = true;
	if (schema == NULL || doc->frame_invalid)
		return IDEM_OK;
	/* A document that is not JSON is reported as such by the fields that read it. */
	doc_view = *m;
	doc_view.value = body;
	doc_view.value_len = len;
	r = jsondoc_load(doc, &doc_view);
	if (r == IDEM_OK && !doc->invalid)
		r = idem_jsonschema_check(schema, doc->root, &e);
	idem_jsonschema_unref(schema);
	if (r == IDEM_ERR_NOMEM)
		return idem_error_nomem(err);
	if (r != IDEM_OK) {
		snprintf(doc->frame_errmsg, sizeof(doc->frame_errmsg),
		         "schema id %d refuses the document: %.900s", (int)id, e.msg);
		doc->frame_invalid = true;
	}
	return IDEM_OK;
}

idem_status idem__field_json_validate(struct idem_jsondoc *doc, const struct idem_msgview *m,
                                      idem_error *err)
{
	idem_status r;

	if (!doc->framed || !doc->validate || m->value == NULL)
		return IDEM_OK;
	if ((r = json_frame(doc, m, err)) != IDEM_OK)
		return r;
	if (doc->frame_invalid)
		return idem_error_set(err, IDEM_ERR_KEY,
		                      "value is not JSON Schema this route can read: %s",
		                      doc->frame_errmsg);
	return IDEM_OK;
}

/*
 * A json: field, for idem_field_read(): absent when the message has no value, the pointer finds
 * nothing or JSON null; a value that is not JSON is an error, and so is a framed value
 * (doc->framed) whose header or schema is not JSON Schema. With @scalar (a business key),
 * objects, arrays and numbers json-c cannot keep exactly are errors too.
 */
idem_status idem__field_json_read(const struct idem_field *f, const struct idem_msgview *m,
                                  struct idem_jsondoc *doc, bool scalar, struct idem_buf *out,
                                  const char **ret_absent, idem_error *err)
{
	struct idem_msgview body;
	json_object *val = NULL;
	enum json_lookup how = JSON_LOOKUP_NOT_FOUND;
	const char *text;
	size_t text_n;
	idem_status r;
	int64_t i;

	if (doc->framed && m->value != NULL) {
		if ((r = json_frame(doc, m, err)) != IDEM_OK)
			return r;
		if (doc->frame_invalid)
			return idem_error_set(
			        err, IDEM_ERR_KEY,
			        "json:%s: value is not JSON Schema this route can read: %s", f->arg,
			        doc->frame_errmsg);
		body = *m;
		body.value = (const char *)m->value + IDEM_AVRO_HEADER_BYTES;
		body.value_len = m->value_len - IDEM_AVRO_HEADER_BYTES;
		m = &body;
	}
	if (json_fast(f, m, doc, &text, &text_n))
		return idem_buf_append(out, text, text_n) == IDEM_OK ? IDEM_OK
		                                                     : idem_error_nomem(err);
	r = json_lookup(f, m, doc, &val, &how, err);
	if (r != IDEM_OK)
		return r;
	if (how == JSON_LOOKUP_NO_VALUE) {
		*ret_absent = "message has no value";
		return IDEM_OK;
	}
	if (how == JSON_LOOKUP_NOT_FOUND) {
		*ret_absent = "not found in value";
		return IDEM_OK;
	}
	if (val == NULL) { /* JSON null: json-c has no object for it */
		*ret_absent = "is null";
		return IDEM_OK;
	}
	switch (scalar ? json_object_get_type(val) : json_type_null) {
	case json_type_object:
		return idem_error_set(err, IDEM_ERR_KEY, "json:%s: is an object, not a scalar",
		                      f->arg);
	case json_type_array:
		return idem_error_set(err, IDEM_ERR_KEY, "json:%s: is an array, not a scalar",
		                      f->arg);
	case json_type_int:
		/*
		 * json-c clamps integers beyond 64 bits to these limits, so two different order
		 * numbers would share one key. Refuse rather than merge them.
		 */
		i = json_object_get_int64(val);
		if (i == INT64_MIN || (i == INT64_MAX && json_object_get_uint64(val) == UINT64_MAX))
			return idem_error_set(
			        err, IDEM_ERR_KEY,
			        "json:%s: integer is at or beyond the 64-bit limit and may have been clamped; send it as a JSON string",
			        f->arg);
		break;
	case json_type_double:
		/* Only NaN and Infinity, which strict JSON does not have, lack their source text.
		 */
		if (json_object_get_userdata(val) == NULL)
			return idem_error_set(
			        err, IDEM_ERR_KEY, "json:%s: '%s' is not a valid JSON number",
			        f->arg,
			        json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN));
		break;
	default:
		break;
	}
	if (json_append(out, val) != IDEM_OK)
		return idem_error_nomem(err);
	return IDEM_OK;
}
