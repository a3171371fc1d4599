/*
 * idem_registry_http.c - one request to the Schema Registry, made without the registry's lock:
 * the easy handle and its callbacks, the fetch with libcurl, and the reading of its answer (the
 * status and its reason, the registry's JSON error body and error_code, the quote of an answer
 * that is not the registry's, the 200 answer and the parse of its schema) into a struct
 * idem_registry_result. What is kept of it, and for how long, is idem_registry.c's.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_log.h"
#include "idem_registry_int.h"

/* How much of an answer that is not the registry's a message quotes. */
#define IDEM_REGISTRY_QUOTE_BYTES 80

static size_t idem_registry_write(char *p, size_t size, size_t n, void *arg)
{
	struct idem_registry_conn *conn = arg;
	size_t len = size * n;

	if (len > conn->max - conn->body.len) {
		conn->too_big = true;
		return 0;
	}
	if (idem_buf_append(&conn->body, p, len) != IDEM_OK) {
		conn->nomem = true;
		return 0;
	}
	return len;
}

/* Aborts a transfer once the registry is closing (called by libcurl about once a second at
 * least, more often while bytes move). */
static int idem_registry_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
                                  curl_off_t ultotal, curl_off_t ulnow)
{
	idem_registry *reg = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return atomic_load(&reg->closing) ? 1 : 0;
}

void idem__registry_conn_free(struct idem_registry_conn *conn)
{
	if (conn == NULL)
		return;
	curl_easy_cleanup(conn->curl);
	idem_buf_done(&conn->body);
	free(conn);
}

struct idem_registry_conn *idem__registry_conn_new(idem_registry *reg)
{
	struct idem_registry_conn *conn = calloc(1, sizeof(*conn));
	CURL *c;
	bool bad;

	if (conn == NULL)
		return NULL;
	c = conn->curl = curl_easy_init();
	if (c == NULL) {
		free(conn);
		return NULL;
	}
	bad = curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)reg->timeout_ms) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)reg->timeout_ms) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_HTTPHEADER, reg->headers) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, idem_registry_write) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_WRITEDATA, conn) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_ERRORBUFFER, conn->errbuf) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, idem_registry_progress) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_XFERINFODATA, reg) != CURLE_OK ||
	      curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)reg->max_answer) !=
	              CURLE_OK ||
#ifdef IDEM_VERSION
	      curl_easy_setopt(c, CURLOPT_USERAGENT, "idemd/" IDEM_VERSION) != CURLE_OK ||
#endif
	      curl_easy_setopt(c, CURLOPT_HTTPGET, 1L) != CURLE_OK;
	if (!bad && reg->username != NULL)
		bad = curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC) != CURLE_OK ||
		      curl_easy_setopt(c, CURLOPT_USERNAME, reg->username) != CURLE_OK ||
		      curl_easy_setopt(c, CURLOPT_PASSWORD, reg->password) != CURLE_OK;
	if (bad) {
		idem__registry_conn_free(conn);
		return NULL;
	}
	conn->max = reg->max_answer;
	return conn;
}

void idem__registry_result_set(struct idem_registry_result *res, enum idem_registry_answer answer,
                               const char *fmt, ...)
{
	va_list ap;

	res->answer = answer;
	va_start(ap, fmt);
	vsnprintf(res->why, sizeof(res->why), fmt, ap);
	va_end(ap);
}

static const char *idem_registry_reason(long status)
{
	static const struct {
		long status;
		const char *reason;
	} reasons[] = {
		{ 200, "OK" },
		{ 301, "Moved Permanently" },
		{ 302, "Found" },
		{ 307, "Temporary Redirect" },
		{ 308, "Permanent Redirect" },
		{ 400, "Bad Request" },
		{ 401, "Unauthorized" },
		{ 403, "Forbidden" },
		{ 404, "Not Found" },
		{ 408, "Request Timeout" },
		{ 422, "Unprocessable Entity" },
		{ 429, "Too Many Requests" },
		{ 500, "Internal Server Error" },
		{ 502, "Bad Gateway" },
		{ 503, "Service Unavailable" },
		{ 504, "Gateway Timeout" },
	};

	for (size_t i = 0; i < IDEM_ARRAY_SIZE(reasons); i++) {
		if (reasons[i].status == status)
			return reasons[i].reason;
	}
	return "";
}

/* The body as one JSON value and nothing after it but white space; NULL if it is not. */
static json_object *idem_registry_json(const struct idem_buf *body)
{
	json_tokener *tok;
	json_object *doc;
	size_t end;

	if (body->len == 0 || body->len > INT_MAX)
		return NULL;
	tok = json_tokener_new();
	if (tok == NULL)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	doc = json_tokener_parse_ex(tok, body->data, (int)body->len);
	if (doc != NULL && json_tokener_get_error(tok) == json_tokener_success) {
		end = json_tokener_get_parse_end(tok);
		while (end < body->len && body->data[end] != '\0' &&
		       strchr(" \t\r\n", body->data[end]) != NULL)
			end++;
		if (end != body->len) {
			json_object_put(doc);
			doc = NULL;
		}
	} else {
		json_object_put(doc);
		doc = NULL;
	}
	json_tokener_free(tok);
	return doc;
}

/*
 * The registry's error body: a JSON object with an integer "error_code". Then *ret_code is
 * it and @out " (error_code 40403: Schema not found)"; control characters from the server
 * become '?' (the text ends up in log lines). false (and @out "") for any other body.
 */
static bool idem_registry_error_detail(const struct idem_buf *body, char *out, size_t outlen,
                                       int64_t *ret_code)
{
	json_object *doc = idem_registry_json(body), *code = NULL, *msg = NULL;
	char text[200] = "";
	bool registry = false;

	out[0] = '\0';
	if (doc == NULL)
		return false;
	if (json_object_is_type(doc, json_type_object) &&
	    json_object_object_get_ex(doc, "error_code", &code) &&
	    json_object_is_type(code, json_type_int)) {
		registry = true;
		*ret_code = (int64_t)json_object_get_int64(code);
		json_object_object_get_ex(doc, "message", &msg);
		if (!json_object_is_type(msg, json_type_string))
			msg = NULL;
		if (msg != NULL)
			snprintf(text, sizeof(text), "%s", json_object_get_string(msg));
		for (char *p = text; *p != '\0'; p++) {
			if ((unsigned char)*p < ' ' || *p == 0x7f)
				*p = '?';
		}
		if (msg != NULL)
			snprintf(out, outlen, " (error_code %" PRId64 ": %s)", *ret_code, text);
		else
			snprintf(out, outlen, " (error_code %" PRId64 ")", *ret_code);
	}
	json_object_put(doc);
	return registry;
}

/*
 * ", answer '<html>...'" quoting the first IDEM_REGISTRY_QUOTE_BYTES of an answer that is not
 * the registry's, so that a proxy's page or a wrong path can be told from the log; or
 * ", empty answer". Printable ASCII is kept; '\\', '\'' and every other byte are escaped
 * ("\\x0a"), so a server cannot forge a log line. "..." after the quote: there was more.
 */
IDEM_TESTABLE void idem__registry_quote(const char *data, size_t len, char *out, size_t outlen);

IDEM_TESTABLE void idem__registry_quote(const char *data, size_t len, char *out, size_t outlen)
{
	size_t n, take = len < IDEM_REGISTRY_QUOTE_BYTES ? len : IDEM_REGISTRY_QUOTE_BYTES;
	static const char hex[] = "0123456789abcdef";

	if (outlen == 0)
		return;
	if (len == 0) {
		snprintf(out, outlen, ", empty answer");
		return;
	}
	n = (size_t)snprintf(out, outlen, ", answer '");
	if (n >= outlen)
		return;
	for (size_t i = 0; i < take && n + 5 < outlen; i++) {
		unsigned char c = (unsigned char)data[i];

		if (c >= ' ' && c < 0x7f && c != '\\' && c != '\'') {
			out[n++] = (char)c;
		} else if (c == '\\' || c == '\'') {
			out[n++] = '\\';
			out[n++] = (char)c;
		} else {
			out[n++] = '\\';
			out[n++] = 'x';
			out[n++] = hex[c >> 4];
			out[n++] = hex[c & 15];
		}
	}
	out[n] = '\0';
	snprintf(out + n, outlen - n, "'%s", len > take ? "..." : "");
}

/*
 * GET {url}@path on @conn. true: a 200 answer is in conn->body. false: @res says what happened,
 * its reason starting with @what ("schema id 7"): UNKNOWN for the registry's own 404xx (and a
 * 200 answer past the size limit: it does not change), UNAVAILABLE otherwise. Leaves the body
 * for the caller to free.
 */
static bool idem_registry_request(idem_registry *reg, struct idem_registry_conn *conn,
                                  const char *path, const char *what,
                                  struct idem_registry_result *res)
{
	char url[2048 + 512];
	char detail[IDEM_REGISTRY_QUOTE_BYTES * 4 + 32];
	long status = 0;
	CURLcode rc;
	bool too_big;

	if (conn == NULL) {
		idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
		                          "%s: cannot set up a request to %s: out of memory", what,
		                          reg->url);
		return false;
	}
	if ((size_t)snprintf(url, sizeof(url), "%s%s", reg->url, path) >= sizeof(url)) {
		idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
		                          "%s: registry URL %s is too long", what, reg->url);
		return false;
	}
	idem_buf_reset(&conn->body);
	conn->errbuf[0] = '\0';
	conn->too_big = conn->nomem = false;
	if (curl_easy_setopt(conn->curl, CURLOPT_URL, url) != CURLE_OK) {
		idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
		                          "%s: cannot set up a request to %s: out of memory", what,
		                          reg->url);
		return false;
	}
	idem_log_debug("registry", "%s: asking %s", what, reg->url);
	rc = curl_easy_perform(conn->curl);
	curl_easy_getinfo(conn->curl, CURLINFO_RESPONSE_CODE, &status);
	too_big = conn->too_big || rc == CURLE_FILESIZE_EXCEEDED;

	if (conn->nomem) {
		idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
		                          "%s: out of memory reading the answer of %s", what,
		                          reg->url);
	} else if (too_big && status == 200) {
		/* The answer for an id does not change: a larger one will stay larger. */
		idem__registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
		                          "%s: answer of %s is larger than %zu bytes", what,
		                          reg->url, reg->max_answer);
	} else if (rc != CURLE_OK && !too_big) {
		const char *err = conn->errbuf[0] != '\0' ? conn->errbuf : curl_easy_strerror(rc);
		bool reach = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
		             rc == CURLE_COULDNT_RESOLVE_PROXY;
		long os_errno = 0;
		char oserr[128];

		/* "Connection refused" says more than curl's "Couldn't connect to server". */
		if (rc == CURLE_COULDNT_CONNECT &&
		    curl_easy_getinfo(conn->curl, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK &&
		    os_errno != 0 && strerror_r((int)os_errno, oserr, sizeof(oserr)) == 0)
			err = oserr;
		if (rc == CURLE_ABORTED_BY_CALLBACK)
			idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
			                          "%s: request to %s stopped: closing", what,
			                          reg->url);
		else if (reach)
			idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
			                          "%s: cannot reach %s: %s", what, reg->url, err);
		else
			idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
			                          "%s: request to %s failed: %s", what, reg->url,
			                          err);
	} else if (status == 200) {
		return true;
	} else {
		const char *reason = idem_registry_reason(status);
		int64_t code = 0;
		bool registry = !too_big && idem_registry_error_detail(&conn->body, detail,
		                                                       sizeof(detail), &code);

		/*
		 * Only the registry itself saying "not found" (its JSON, error_code 404xx: subject,
		 * version or schema not found) is an answer about the id. Any other 404 comes from
		 * something else (a proxy's page, a wrong base path: Jersey's error_code 404) and
		 * says nothing about the id: ask again later.
		 */
		if (!registry)
			idem__registry_quote(conn->body.data, conn->body.len, detail,
			                     sizeof(detail));
		idem__registry_result_set(res,
		                          status == 404 && registry && code >= 40400 &&
		                                          code <= 40499
		                                  ? IDEM_REGISTRY_UNKNOWN
		                                  : IDEM_REGISTRY_UNAVAILABLE,
		                          "%s: registry %s answered %ld%s%s%s", what, reg->url,
		                          status, reason[0] != '\0' ? " " : "", reason, detail);
	}
	return false;
}

/* @s, cut to fit @out, with control characters as '?' (server text bound for log lines). */
static const char *idem_registry_shown(const char *s, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s", s);
	for (char *p = out; *p != '\0'; p++) {
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
	}
	return out;
}

/* The .proto files a Protobuf schema imports, fetched through its references. */
struct idem_registry_deps {
	struct idem_pb_file files[IDEM_SCHEMA_MAX_REFERENCES];
	char *owned[IDEM_SCHEMA_MAX_REFERENCES][2]; /* the name and the text of files[i] */
	size_t n;
	size_t bytes; /* of text, at most reg->max_answer */
};

/*
 * A 200 answer's body for @what ("schema id 7", "schema id 7: reference ..."): the registry's
 * JSON, an object with a "schema" string (*ret_schema); NULL with @res UNAVAILABLE if it is not,
 * quoting what came (a proxy's page, say).
 */
static json_object *idem_registry_schema_doc(const idem_registry *reg,
                                             const struct idem_registry_conn *conn,
                                             const char *what, json_object **ret_schema,
                                             struct idem_registry_result *res)
{
	json_object *doc = idem_registry_json(&conn->body);
	char quote[IDEM_REGISTRY_QUOTE_BYTES * 4 + 32];

	if (doc != NULL && json_object_is_type(doc, json_type_object) &&
	    json_object_object_get_ex(doc, "schema", ret_schema) &&
	    json_object_is_type(*ret_schema, json_type_string))
		return doc;
	json_object_put(doc);
	idem__registry_quote(conn->body.data, conn->body.len, quote, sizeof(quote));
	idem__registry_result_set(
	        res, IDEM_REGISTRY_UNAVAILABLE,
	        "%s: registry %s answered 200 OK without the registry's JSON (an object with a \"schema\" string)%s",
	        what, reg->url, quote);
	return NULL;
}

static void idem_registry_deps_done(struct idem_registry_deps *deps)
{
	for (size_t i = 0; i < deps->n; i++) {
		free(deps->owned[i][0]);
		free(deps->owned[i][1]);
	}
	deps->n = 0;
}

/*
 * The references @refs (an array of {"name", "subject", "version"}) of schema @id, and theirs,
 * into @deps: GET /subjects/{subject}/versions/{version} for each name not had yet. false with
 * @res set when one cannot be had: UNKNOWN when the registry does not know it (its 404xx) or it
 * is not a Protobuf schema, or the references are not the registry's form or too many;
 * UNAVAILABLE as for the id itself. @depth bounds the recursion.
 */
static bool idem_registry_references(idem_registry *reg, struct idem_registry_conn *conn,
                                     int32_t id, json_object *refs, int depth,
                                     struct idem_registry_deps *deps,
                                     struct idem_registry_result *res)
{
	size_t n = json_object_array_length(refs);

	if (depth > IDEM_SCHEMA_MAX_REFERENCES) {
		idem__registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
		                          "schema id %d: references nested deeper than %d", (int)id,
		                          IDEM_SCHEMA_MAX_REFERENCES);
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		json_object *ref = json_object_array_get_idx(refs, i), *jname = NULL,
		            *jsubject = NULL, *jversion = NULL, *doc, *schema = NULL, *type = NULL,
		            *sub = NULL;
		char shown_name[128], shown_subject[128], what[400], path[1024];
		const char *name, *subject;
		char *esc, *name_copy, *text_copy;
		int64_t version;
		bool have = false, ok;

		if (!json_object_is_type(ref, json_type_object) ||
		    !json_object_object_get_ex(ref, "name", &jname) ||
		    !json_object_is_type(jname, json_type_string) ||
		    !json_object_object_get_ex(ref, "subject", &jsubject) ||
		    !json_object_is_type(jsubject, json_type_string) ||
		    !json_object_object_get_ex(ref, "version", &jversion) ||
		    !json_object_is_type(jversion, json_type_int)) {
			idem__registry_result_set(
			        res, IDEM_REGISTRY_UNKNOWN,
			        "schema id %d: a reference is not an object with a \"name\", a \"subject\" and a \"version\"",
			        (int)id);
			return false;
		}
		name = json_object_get_string(jname);
		subject = json_object_get_string(jsubject);
		version = json_object_get_int64(jversion);
		for (size_t k = 0; k < deps->n && !have; k++)
			have = strcmp(deps->files[k].name, name) == 0;
		if (have)
			continue;
		snprintf(what, sizeof(what),
		         "schema id %d: reference '%s' (subject '%s' version %" PRId64 ")", (int)id,
		         idem_registry_shown(name, shown_name, sizeof(shown_name)),
		         idem_registry_shown(subject, shown_subject, sizeof(shown_subject)),
		         version);
		if (deps->n == IDEM_SCHEMA_MAX_REFERENCES) {
			idem__registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
			                          "%s: more than %d references", what,
			                          IDEM_SCHEMA_MAX_REFERENCES);
			return false;
		}
		esc = curl_easy_escape(conn->curl, subject, 0);
		if (esc == NULL ||
		    (size_t)snprintf(path, sizeof(path), "/subjects/%s/versions/%" PRId64, esc,
		                     version) >= sizeof(path)) {
			curl_free(esc);
			idem__registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
			                          "%s: subject too long", what);
			return false;
		}
		curl_free(esc);
		if (!idem_registry_request(reg, conn, path, what, res))
			return false;
		doc = idem_registry_schema_doc(reg, conn, what, &schema, res);
		if (doc == NULL)
			return false;
		if (!json_object_object_get_ex(doc, "schemaType", &type) ||
		    !json_object_is_type(type, json_type_string) ||
		    strcmp(json_object_get_string(type), "PROTOBUF") != 0) {
			idem__registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
			                          "%s: not a Protobuf schema", what);
			json_object_put(doc);
			return false;
		}
		deps->bytes += (size_t)json_object_get_string_len(schema);
		if (deps->bytes > reg->max_answer) {
			idem__registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
			                          "%s: references larger than %zu bytes in all",
			                          what, reg->max_answer);
			json_object_put(doc);
			return false;
		}
		name_copy = strdup(name);
		text_copy = strdup(json_object_get_string(schema));
		if (name_copy == NULL || text_copy == NULL) {
			free(name_copy);
			free(text_copy);
			idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
			                          "%s: out of memory", what);
			json_object_put(doc);
			return false;
		}
		deps->owned[deps->n][0] = name_copy;
		deps->owned[deps->n][1] = text_copy;
		deps->files[deps->n++] = (struct idem_pb_file){
			.name = name_copy,
			.text = text_copy,
			.len = (size_t)json_object_get_string_len(schema),
		};
		ok = true;
		if (json_object_object_get_ex(doc, "references", &sub) &&
		    !json_object_is_type(sub, json_type_null)) {
			if (!json_object_is_type(sub, json_type_array)) {
				idem__registry_result_set(
				        res, IDEM_REGISTRY_UNKNOWN,
				        "%s: \"references\" that are not an array", what);
				ok = false;
			} else {
				ok = idem_registry_references(reg, conn, id, sub, depth + 1, deps,
				                              res);
			}
		}
		json_object_put(doc);
		if (!ok)
			return false;
	}
	return true;
}

/*
 * A 200 answer: the registry's JSON, an Avro schema without references that parses, (with
 * parse_json) a JSON schema that parses, or (with parse_protobuf) a Protobuf schema that parses
 * with the files its references name.
 */
static void idem_registry_answer_200(idem_registry *reg, struct idem_registry_conn *conn,
                                     int32_t id, struct idem_registry_result *res)
{
	json_object *doc, *schema = NULL, *type = NULL, *refs = NULL;
	enum { AVRO, JSON, PROTOBUF } kind = AVRO;
	struct idem_registry_deps *deps = NULL;
	char why[512] = "", what[32];
	idem_status st;
	void *obj = NULL;

	snprintf(what, sizeof(what), "schema id %d", (int)id);
	doc = idem_registry_schema_doc(reg, conn, what, &schema, res);
	if (doc == NULL)
		return;
	if (json_object_object_get_ex(doc, "schemaType", &type) &&
	    !json_object_is_type(type, json_type_null)) {
		const char *t;

		if (!json_object_is_type(type, json_type_string)) {
			idem__registry_result_set(
			        res, IDEM_REGISTRY_UNAVAILABLE,
			        "schema id %d: registry %s answered a \"schemaType\" that is not a string",
			        (int)id, reg->url);
			goto out_put_doc;
		}
		t = json_object_get_string(type);
		if (strcmp(t, "JSON") == 0 && reg->parse_json != NULL) {
			kind = JSON;
		} else if (strcmp(t, "PROTOBUF") == 0 && reg->parse_protobuf != NULL) {
			kind = PROTOBUF;
		} else if (strcmp(t, "AVRO") != 0) {
			char shown[32];
			bool js = reg->parse_json != NULL, pb = reg->parse_protobuf != NULL;

			idem__registry_result_set(
			        res, IDEM_REGISTRY_UNKNOWN, "schema id %d is %s, not AVRO%s%s",
			        (int)id, idem_registry_shown(t, shown, sizeof(shown)),
			        js ? (pb ? ", JSON" : " or JSON") : "", pb ? " or PROTOBUF" : "");
			goto out_put_doc;
		}
	}
	/* A JSON schema is not used to decode (values are not validated): its references are
	 * no reason to refuse it. A Protobuf schema's are its imports. */
	if (kind != JSON && json_object_object_get_ex(doc, "references", &refs) &&
	    !json_object_is_type(refs, json_type_null)) {
		if (!json_object_is_type(refs, json_type_array)) {
			idem__registry_result_set(
			        res, IDEM_REGISTRY_UNAVAILABLE,
			        "schema id %d: registry %s answered \"references\" that are not an array",
			        (int)id, reg->url);
			goto out_put_doc;
		}
		if (kind == AVRO && json_object_array_length(refs) > 0) {
			idem__registry_result_set(
			        res, IDEM_REGISTRY_UNKNOWN,
			        "schema id %d uses schema references, which idemd does not support for Avro",
			        (int)id);
			goto out_put_doc;
		}
	}
	if (kind == PROTOBUF) {
		if ((deps = calloc(1, sizeof(*deps))) == NULL) {
			idem__registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
			                          "schema id %d: out of memory", (int)id);
			goto out_put_doc;
		}
		if (refs != NULL && json_object_is_type(refs, json_type_array) &&
		    !idem_registry_references(reg, conn, id, refs, 0, deps, res))
			goto out_put_doc;
		st = reg->parse_protobuf(json_object_get_string(schema),
		                         (size_t)json_object_get_string_len(schema), id,
		                         deps->files, deps->n, &obj, why, sizeof(why));
	} else {
		st = (kind == JSON ? reg->parse_json : reg->parse)(
		        json_object_get_string(schema), (size_t)json_object_get_string_len(schema),
		        &obj, why, sizeof(why));
	}
	if (st == IDEM_OK) {
		res->answer = IDEM_REGISTRY_OK;
		res->obj = obj;
	} else {
		/* Out of memory says nothing about the schema: ask again later. */
		idem__registry_result_set(
		        res,
		        st == IDEM_ERR_NOMEM ? IDEM_REGISTRY_UNAVAILABLE : IDEM_REGISTRY_UNKNOWN,
		        "schema id %d: %s", (int)id, why[0] != '\0' ? why : idem_status_str(st));
	}

out_put_doc:
	if (deps != NULL) {
		idem_registry_deps_done(deps);
		free(deps);
	}
	json_object_put(doc);
}

void idem__registry_fetch(idem_registry *reg, struct idem_registry_conn *conn, int32_t id,
                          struct idem_registry_result *res)
{
	char path[64], what[32];

	res->obj = NULL;
	res->why[0] = '\0';
	snprintf(path, sizeof(path), "/schemas/ids/%d", (int)id);
	snprintf(what, sizeof(what), "schema id %d", (int)id);
	if (idem_registry_request(reg, conn, path, what, res))
		idem_registry_answer_200(reg, conn, id, res);
	/* A schema can be megabytes: do not keep that much per idle handle. */
	if (conn != NULL)
		idem_buf_done(&conn->body);
	if (res->answer == IDEM_REGISTRY_OK)
		idem_log_debug("registry", "schema id %d: fetched from %s", (int)id, reg->url);
	else
		idem_log_debug("registry", "%s", res->why);
}

idem_status idem_registry_ping(idem_registry *reg, long *ret_http, idem_error *err)
{
	struct idem_registry_conn *conn = idem__registry_conn_new(reg);
	struct idem_registry_result res = { 0 };
	long status = 0;
	idem_status r = IDEM_OK;

	if (!idem_registry_request(reg, conn, "/subjects", "list the subjects", &res)) {
		if (conn != NULL)
			curl_easy_getinfo(conn->curl, CURLINFO_RESPONSE_CODE, &status);
		r = idem_error_set(err, IDEM_ERR_UNAVAILABLE, "%s", res.why);
	}
	idem__registry_conn_free(conn);
	*ret_http = status;
	return r;
}
