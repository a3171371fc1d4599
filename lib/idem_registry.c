/*
 * idem_registry.c - the Schema Registry client: one table of ids behind one mutex, fetches
 * outside it.
 *
 * Each id seen has an entry in a hash table. An entry is either being fetched (by exactly one
 * thread: single flight) or holds the answer of its last fetch: the schema object (kept until
 * evicted), an UNKNOWN reason (kept unknown_keep_ms) or an UNAVAILABLE reason with the time
 * before which the id is not asked again (per-id exponential backoff). Answered entries sit in
 * one of two least-recently-used lists, OK entries and the others, each bounded by
 * max_schemas: ids that do not resolve cannot push good schemas out, and a stream of random
 * ids cannot grow the table without bound.
 *
 * Threads asking for an id being fetched wait on the condition variable for the fetch's
 * generation to change and take its answer; while they wait the entry is pinned (never
 * evicted). The HTTP request itself runs without the lock, on a curl easy handle taken from a
 * small pool so that connections to the registry are reused.
 */
#include "idem_registry.h"

#include <assert.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "idem_log.h"

/* Easy handles kept between fetches (each keeps its connections open). */
#define IDEM_REGISTRY_IDLE_CONNS 2

/* Tests shrink these (IDEM_TESTABLE); a registry reads them once, in idem_registry_new(). */
IDEM_TESTABLE size_t idem__registry_max_schemas = IDEM_REGISTRY_MAX_SCHEMAS;
IDEM_TESTABLE int64_t idem__registry_unknown_keep_ms = IDEM_REGISTRY_UNKNOWN_KEEP_MS;
IDEM_TESTABLE size_t idem__registry_max_answer = IDEM_REGISTRY_MAX_ANSWER_BYTES;

IDEM_TESTABLE char *idem__registry_url_redact(const char *url);

struct idem_registry_entry {
	int32_t id;
	bool fetching;                    /* a thread is asking the registry now */
	enum idem_registry_answer answer; /* of the last fetch */
	void *obj;                        /* OK: the cache's reference */
	char *why;                        /* UNKNOWN, UNAVAILABLE (NULL if out of memory) */
	int64_t until_ms;                 /* UNKNOWN, UNAVAILABLE: no request before this */
	int failures;                     /* consecutive UNAVAILABLE fetches */
	unsigned int waiters;             /* threads waiting for this fetch: pinned */
	uint64_t gen;                     /* fetches ended */
	struct idem_registry_entry *hnext;
	struct idem_registry_entry *prev, *next; /* in an LRU list unless fetching */
};

struct idem_registry_lru {
	struct idem_registry_entry *head, *tail; /* head: most recently used */
	size_t n;
};

/* An easy handle with what its callbacks write. */
struct idem_registry_conn {
	CURL *curl;
	char errbuf[CURL_ERROR_SIZE];
	struct idem_buf body;
	size_t max;
	bool too_big;
	bool nomem;
	struct idem_registry_conn *next;
};

struct idem_registry {
	char *url;       /* for requests, without a trailing '/' */
	char *url_shown; /* for messages: without user information */
	char *username;
	char *password;
	int timeout_ms;
	int retry_initial_ms;
	int retry_max_ms;
	idem_registry_parse_fn parse;
	idem_registry_ref_fn ref;
	idem_registry_unref_fn unref;
	size_t max_schemas;
	int64_t unknown_keep_ms;
	size_t max_answer;
	struct curl_slist *headers;

	pthread_mutex_t mu; /* everything below */
	pthread_cond_t cv;  /* a fetch ended */
	struct idem_registry_entry **buckets;
	size_t nbuckets; /* a power of 2 */
	struct idem_registry_lru ok;
	struct idem_registry_lru other;
	struct idem_registry_conn *idle;
	size_t nidle;
	unsigned int seed;
	struct idem_registry_stats stats; /* cached is ok.n */
};

/* One fetch's outcome, built without the lock. */
struct idem_registry_result {
	enum idem_registry_answer answer;
	void *obj;
	char why[512];
};

static pthread_once_t idem_registry_once = PTHREAD_ONCE_INIT;
static CURLcode idem_registry_global_rc;

static void idem_registry_global_init_once(void)
{
	idem_registry_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

idem_status idem_registry_global_init(idem_error *err)
{
	pthread_once(&idem_registry_once, idem_registry_global_init_once);
	if (idem_registry_global_rc != CURLE_OK)
		return idem_error_set(err, IDEM_ERR_INVALID, "cannot initialise libcurl: %s",
		                      curl_easy_strerror(idem_registry_global_rc));
	return IDEM_OK;
}

/*
 * The URL without its user information ("https://u:p@host/x" -> "https://host/x"), as a new
 * string. Works on any text, so that even a URL rejected for its scheme is printed safely.
 */
IDEM_TESTABLE char *idem__registry_url_redact(const char *url)
{
	const char *sep = strstr(url, "://");
	size_t start = sep != NULL ? (size_t)(sep - url) + 3 : 0;
	size_t end = start + strcspn(url + start, "/?#");
	size_t at = 0;
	bool has_at = false;
	char *out;

	for (size_t i = start; i < end; i++) {
		if (url[i] == '@') {
			at = i;
			has_at = true;
		}
	}
	if (!has_at)
		return strdup(url);
	out = malloc(strlen(url) + 1);
	if (out == NULL)
		return NULL;
	memcpy(out, url, start);
	strcpy(out + start, url + at + 1);
	return out;
}

/* Check @url's form; on success *ret_base is it without trailing '/', *ret_shown redacted. */
static idem_status idem_registry_url_check(const char *url, char **ret_base, char **ret_shown,
                                           idem_error *err)
{
	char *shown = idem__registry_url_redact(url);
	const char *auth, *host, *port;
	size_t auth_len, at, host_len, len;
	char *base;
	idem_status r;

	if (shown == NULL)
		return idem_error_nomem(err);
	if (strncasecmp(url, "http://", 7) == 0) {
		auth = url + 7;
	} else if (strncasecmp(url, "https://", 8) == 0) {
		auth = url + 8;
	} else {
		r = idem_error_set(err, IDEM_ERR_CONFIG,
		                   "schema_registry.url '%s' must start with http:// or https://",
		                   shown);
		goto out_free_shown;
	}
	for (const char *p = url; *p != '\0'; p++) {
		if ((unsigned char)*p <= ' ' || *p == 0x7f) {
			r = idem_error_set(
			        err, IDEM_ERR_CONFIG,
			        "schema_registry.url '%s' must not contain spaces or control characters",
			        shown);
			goto out_free_shown;
		}
	}
	if (strpbrk(url, "?#") != NULL) {
		r = idem_error_set(err, IDEM_ERR_CONFIG,
		                   "schema_registry.url '%s' must not have a query or a fragment",
		                   shown);
		goto out_free_shown;
	}
	auth_len = strcspn(auth, "/");
	at = 0;
	for (size_t i = 0; i < auth_len; i++) {
		if (auth[i] == '@')
			at = i + 1;
	}
	host = auth + at;
	len = auth_len - at;
	if (len > 0 && host[0] == '[') {
		const char *close = memchr(host, ']', len);

		host_len = close != NULL ? (size_t)(close - host) + 1 : len;
		if (close == NULL || host_len == 2) {
			r = idem_error_set(err, IDEM_ERR_CONFIG,
			                   "schema_registry.url '%s' has no valid host", shown);
			goto out_free_shown;
		}
	} else {
		const char *colon = memchr(host, ':', len);

		host_len = colon != NULL ? (size_t)(colon - host) : len;
	}
	if (host_len == 0) {
		r = idem_error_set(err, IDEM_ERR_CONFIG, "schema_registry.url '%s' has no host",
		                   shown);
		goto out_free_shown;
	}
	port = host + host_len;
	if (port < host + len) {
		size_t digits = (size_t)(host + len - port) - 1;
		long v = 0;

		if (*port != ':' || digits == 0 || digits > 5 ||
		    strspn(port + 1, "0123456789") < digits ||
		    (v = strtol(port + 1, NULL, 10)) < 1 || v > 65535) {
			r = idem_error_set(err, IDEM_ERR_CONFIG,
			                   "schema_registry.url '%s' has an invalid port", shown);
			goto out_free_shown;
		}
	}
	base = strdup(url);
	if (base == NULL) {
		r = idem_error_nomem(err);
		goto out_free_shown;
	}
	for (len = strlen(base); len > 0 && base[len - 1] == '/'; len--)
		base[len - 1] = '\0';
	for (len = strlen(shown); len > 0 && shown[len - 1] == '/'; len--)
		shown[len - 1] = '\0';
	*ret_base = base;
	*ret_shown = shown;
	return IDEM_OK;

out_free_shown:
	free(shown);
	return r;
}

static char *idem_registry_strdup_opt(const char *s, bool *nomem)
{
	char *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	if (d == NULL)
		*nomem = true;
	return d;
}

idem_status idem_registry_new(const struct idem_registry_opts *opts, idem_registry **ret_reg,
                              idem_error *err)
{
	idem_registry *reg;
	bool nomem = false;
	idem_status r;

	assert(opts != NULL && opts->parse != NULL && opts->ref != NULL && opts->unref != NULL);
	if (opts->timeout_ms <= 0 || opts->retry_initial_ms <= 0 || opts->retry_max_ms <= 0)
		return idem_error_set(
		        err, IDEM_ERR_INVALID,
		        "schema registry timeout (%d ms) and retry delays (%d ms, %d ms) must be positive",
		        opts->timeout_ms, opts->retry_initial_ms, opts->retry_max_ms);
	if (opts->url == NULL)
		return idem_error_set(err, IDEM_ERR_CONFIG, "schema_registry.url is not set");
	reg = calloc(1, sizeof(*reg));
	if (reg == NULL)
		return idem_error_nomem(err);
	if (pthread_mutex_init(&reg->mu, NULL) != 0) {
		free(reg);
		return idem_error_nomem(err);
	}
	if (idem_cond_init(&reg->cv) != 0) {
		pthread_mutex_destroy(&reg->mu);
		free(reg);
		return idem_error_nomem(err);
	}
	reg->timeout_ms = opts->timeout_ms;
	reg->retry_initial_ms = opts->retry_initial_ms;
	reg->retry_max_ms = opts->retry_max_ms > opts->retry_initial_ms ? opts->retry_max_ms
	                                                                : opts->retry_initial_ms;
	reg->parse = opts->parse;
	reg->ref = opts->ref;
	reg->unref = opts->unref;
	reg->max_schemas = idem__registry_max_schemas > 0 ? idem__registry_max_schemas : 1;
	reg->unknown_keep_ms = idem__registry_unknown_keep_ms;
	reg->max_answer = idem__registry_max_answer;
	reg->seed = (unsigned int)idem_mono_us() ^ (unsigned int)(uintptr_t)reg;
	r = idem_registry_url_check(opts->url, &reg->url, &reg->url_shown, err);
	if (r != IDEM_OK)
		goto out_free_reg;
	if (opts->username != NULL) {
		reg->username = idem_registry_strdup_opt(opts->username, &nomem);
		reg->password =
		        idem_registry_strdup_opt(opts->password ? opts->password : "", &nomem);
	}
	for (reg->nbuckets = 16; reg->nbuckets < reg->max_schemas; reg->nbuckets *= 2)
		;
	reg->buckets = calloc(reg->nbuckets, sizeof(*reg->buckets));
	if (reg->buckets == NULL)
		nomem = true;
	if (!nomem) {
		struct curl_slist *h = curl_slist_append(
		        NULL, "Accept: application/vnd.schemaregistry.v1+json, application/json");

		if (h == NULL)
			nomem = true;
		reg->headers = h;
	}
	if (nomem) {
		r = idem_error_nomem(err);
		goto out_free_reg;
	}
	*ret_reg = reg;
	return IDEM_OK;

out_free_reg:
	idem_registry_free(reg);
	return r;
}

static void idem_registry_conn_free(struct idem_registry_conn *conn)
{
	if (conn == NULL)
		return;
	curl_easy_cleanup(conn->curl);
	idem_buf_done(&conn->body);
	free(conn);
}

static void idem_registry_entry_free(idem_registry *reg, struct idem_registry_entry *e)
{
	if (e->obj != NULL)
		reg->unref(e->obj);
	free(e->why);
	free(e);
}

void idem_registry_free(idem_registry *reg)
{
	if (reg == NULL)
		return;
	for (size_t i = 0; reg->buckets != NULL && i < reg->nbuckets; i++) {
		struct idem_registry_entry *e = reg->buckets[i], *next;

		for (; e != NULL; e = next) {
			next = e->hnext;
			assert(!e->fetching && e->waiters == 0); /* no get() may run now */
			idem_registry_entry_free(reg, e);
		}
	}
	while (reg->idle != NULL) {
		struct idem_registry_conn *conn = reg->idle;

		reg->idle = conn->next;
		idem_registry_conn_free(conn);
	}
	curl_slist_free_all(reg->headers);
	free(reg->buckets);
	free(reg->url);
	free(reg->url_shown);
	free(reg->username);
	if (reg->password != NULL) {
		/* Not for secrecy against this process, only to keep it out of core files. */
		memset(reg->password, 0, strlen(reg->password));
		free(reg->password);
	}
	pthread_cond_destroy(&reg->cv);
	pthread_mutex_destroy(&reg->mu);
	free(reg);
}

/* --- the table (reg->mu held) --- */

static size_t idem_registry_bucket(const idem_registry *reg, int32_t id)
{
	return (size_t)(((uint32_t)id * 2654435761u) >> 7) & (reg->nbuckets - 1);
}

static struct idem_registry_entry *idem_registry_lookup(idem_registry *reg, int32_t id)
{
	struct idem_registry_entry *e = reg->buckets[idem_registry_bucket(reg, id)];

	while (e != NULL && e->id != id)
		e = e->hnext;
	return e;
}

static void idem_registry_unhash(idem_registry *reg, struct idem_registry_entry *e)
{
	struct idem_registry_entry **pp = &reg->buckets[idem_registry_bucket(reg, e->id)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
}

static struct idem_registry_lru *idem_registry_list_of(idem_registry *reg,
                                                       const struct idem_registry_entry *e)
{
	return e->answer == IDEM_REGISTRY_OK ? &reg->ok : &reg->other;
}

static void idem_registry_lru_remove(struct idem_registry_lru *l, struct idem_registry_entry *e)
{
	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		l->head = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		l->tail = e->prev;
	e->prev = e->next = NULL;
	l->n--;
}

static void idem_registry_lru_push(struct idem_registry_lru *l, struct idem_registry_entry *e)
{
	e->prev = NULL;
	e->next = l->head;
	if (l->head != NULL)
		l->head->prev = e;
	else
		l->tail = e;
	l->head = e;
	l->n++;
}

/*
 * Move the least recently used entries of @l beyond @max, skipping pinned ones, out of the
 * table onto *@gone, to be freed after the lock is released (unref_fn runs unlocked).
 */
static void idem_registry_evict(idem_registry *reg, struct idem_registry_lru *l,
                                struct idem_registry_entry **gone)
{
	struct idem_registry_entry *e = l->tail, *prev;

	for (; e != NULL && l->n > reg->max_schemas; e = prev) {
		prev = e->prev;
		if (e->waiters > 0)
			continue;
		idem_registry_lru_remove(l, e);
		idem_registry_unhash(reg, e);
		idem_log_debug("registry", "schema id %d: evicted from the cache", (int)e->id);
		e->hnext = *gone;
		*gone = e;
	}
}

/* Write the answer of @e's last fetch to the caller. */
static enum idem_registry_answer idem_registry_reply(idem_registry *reg,
                                                     const struct idem_registry_entry *e,
                                                     int64_t now, void **ret_obj, char *why,
                                                     size_t whylen, int *ret_retry_ms)
{
	if (e->answer == IDEM_REGISTRY_OK) {
		*ret_obj = reg->ref(e->obj);
		return IDEM_REGISTRY_OK;
	}
	if (why != NULL && whylen > 0) {
		if (e->why != NULL)
			snprintf(why, whylen, "%s", e->why);
		else
			snprintf(why, whylen, "schema id %d: out of memory", (int)e->id);
	}
	if (e->answer == IDEM_REGISTRY_UNAVAILABLE && ret_retry_ms != NULL) {
		int64_t left = e->until_ms - now;

		*ret_retry_ms = left < 1 ? 1 : left > INT_MAX ? INT_MAX : (int)left;
	}
	return e->answer;
}

/* --- one request (no lock held) --- */

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

static struct idem_registry_conn *idem_registry_conn_new(const idem_registry *reg)
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
		idem_registry_conn_free(conn);
		return NULL;
	}
	conn->max = reg->max_answer;
	return conn;
}

static void idem_registry_result_set(struct idem_registry_result *res,
                                     enum idem_registry_answer answer, const char *fmt, ...)
        IDEM_PRINTF(3, 4);

static void idem_registry_result_set(struct idem_registry_result *res,
                                     enum idem_registry_answer answer, const char *fmt, ...)
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
 * " (error_code 40403: Schema not found)" from a registry's error body, or "". Control
 * characters from the server become '?' (the text ends up in log lines).
 */
static void idem_registry_error_detail(const struct idem_buf *body, char *out, size_t outlen)
{
	json_object *doc = idem_registry_json(body), *code = NULL, *msg = NULL;
	char text[200] = "";

	out[0] = '\0';
	if (doc == NULL)
		return;
	if (json_object_is_type(doc, json_type_object)) {
		json_object_object_get_ex(doc, "error_code", &code);
		json_object_object_get_ex(doc, "message", &msg);
		if (!json_object_is_type(code, json_type_int))
			code = NULL;
		if (!json_object_is_type(msg, json_type_string))
			msg = NULL;
		if (msg != NULL)
			snprintf(text, sizeof(text), "%s", json_object_get_string(msg));
		for (char *p = text; *p != '\0'; p++) {
			if ((unsigned char)*p < ' ' || *p == 0x7f)
				*p = '?';
		}
		if (code != NULL && msg != NULL)
			snprintf(out, outlen, " (error_code %" PRId64 ": %s)",
			         (int64_t)json_object_get_int64(code), text);
		else if (code != NULL)
			snprintf(out, outlen, " (error_code %" PRId64 ")",
			         (int64_t)json_object_get_int64(code));
		else if (msg != NULL)
			snprintf(out, outlen, " (%s)", text);
	}
	json_object_put(doc);
}

/* A 200 answer: the registry's JSON, an Avro schema without references, that parses. */
static void idem_registry_answer_200(idem_registry *reg, struct idem_registry_conn *conn,
                                     int32_t id, struct idem_registry_result *res)
{
	json_object *doc = idem_registry_json(&conn->body), *schema = NULL, *type = NULL,
	            *refs = NULL;
	char why[256] = "";
	idem_status st;
	void *obj = NULL;

	if (doc == NULL || !json_object_is_type(doc, json_type_object) ||
	    !json_object_object_get_ex(doc, "schema", &schema) ||
	    !json_object_is_type(schema, json_type_string)) {
		idem_registry_result_set(
		        res, IDEM_REGISTRY_UNAVAILABLE,
		        "schema id %d: registry %s answered 200 OK without the registry's JSON (an object with a \"schema\" string)",
		        (int)id, reg->url_shown);
		goto out_put_doc;
	}
	if (json_object_object_get_ex(doc, "schemaType", &type) &&
	    !json_object_is_type(type, json_type_null)) {
		const char *t;

		if (!json_object_is_type(type, json_type_string)) {
			idem_registry_result_set(
			        res, IDEM_REGISTRY_UNAVAILABLE,
			        "schema id %d: registry %s answered a \"schemaType\" that is not a string",
			        (int)id, reg->url_shown);
			goto out_put_doc;
		}
		t = json_object_get_string(type);
		if (strcmp(t, "AVRO") != 0) {
			char shown[32];

			snprintf(shown, sizeof(shown), "%s", t);
			for (char *p = shown; *p != '\0'; p++) {
				if ((unsigned char)*p < ' ' || *p == 0x7f)
					*p = '?';
			}
			idem_registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
			                         "schema id %d is %s, not AVRO", (int)id, shown);
			goto out_put_doc;
		}
	}
	if (json_object_object_get_ex(doc, "references", &refs) &&
	    !json_object_is_type(refs, json_type_null)) {
		if (!json_object_is_type(refs, json_type_array)) {
			idem_registry_result_set(
			        res, IDEM_REGISTRY_UNAVAILABLE,
			        "schema id %d: registry %s answered \"references\" that are not an array",
			        (int)id, reg->url_shown);
			goto out_put_doc;
		}
		if (json_object_array_length(refs) > 0) {
			idem_registry_result_set(
			        res, IDEM_REGISTRY_UNKNOWN,
			        "schema id %d uses schema references, which idemd does not support",
			        (int)id);
			goto out_put_doc;
		}
	}
	st = reg->parse(json_object_get_string(schema), (size_t)json_object_get_string_len(schema),
	                &obj, why, sizeof(why));
	if (st == IDEM_OK) {
		res->answer = IDEM_REGISTRY_OK;
		res->obj = obj;
	} else {
		/* Out of memory says nothing about the schema: ask again later. */
		idem_registry_result_set(
		        res,
		        st == IDEM_ERR_NOMEM ? IDEM_REGISTRY_UNAVAILABLE : IDEM_REGISTRY_UNKNOWN,
		        "schema id %d: %s", (int)id, why[0] != '\0' ? why : idem_status_str(st));
	}

out_put_doc:
	json_object_put(doc);
}

static void idem_registry_fetch(idem_registry *reg, struct idem_registry_conn *conn, int32_t id,
                                struct idem_registry_result *res)
{
	char url[2048 + 32];
	char detail[300];
	long status = 0;
	CURLcode rc;
	bool too_big;

	res->obj = NULL;
	res->why[0] = '\0';
	if (conn == NULL) {
		idem_registry_result_set(
		        res, IDEM_REGISTRY_UNAVAILABLE,
		        "schema id %d: cannot set up a request to %s: out of memory", (int)id,
		        reg->url_shown);
		return;
	}
	if ((size_t)snprintf(url, sizeof(url), "%s/schemas/ids/%d", reg->url, (int)id) >=
	    sizeof(url)) {
		idem_registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
		                         "schema id %d: registry URL %s is too long", (int)id,
		                         reg->url_shown);
		return;
	}
	idem_buf_reset(&conn->body);
	conn->errbuf[0] = '\0';
	conn->too_big = conn->nomem = false;
	if (curl_easy_setopt(conn->curl, CURLOPT_URL, url) != CURLE_OK) {
		idem_registry_result_set(
		        res, IDEM_REGISTRY_UNAVAILABLE,
		        "schema id %d: cannot set up a request to %s: out of memory", (int)id,
		        reg->url_shown);
		return;
	}
	idem_log_debug("registry", "schema id %d: asking %s", (int)id, reg->url_shown);
	rc = curl_easy_perform(conn->curl);
	curl_easy_getinfo(conn->curl, CURLINFO_RESPONSE_CODE, &status);
	too_big = conn->too_big || rc == CURLE_FILESIZE_EXCEEDED;

	if (conn->nomem) {
		idem_registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
		                         "schema id %d: out of memory reading the answer of %s",
		                         (int)id, reg->url_shown);
	} else if (too_big && status == 200) {
		/* The answer for an id does not change: a larger one will stay larger. */
		idem_registry_result_set(res, IDEM_REGISTRY_UNKNOWN,
		                         "schema id %d: answer of %s is larger than %zu bytes",
		                         (int)id, reg->url_shown, reg->max_answer);
	} else if (rc != CURLE_OK && !too_big) {
		const char *what = conn->errbuf[0] != '\0' ? conn->errbuf : curl_easy_strerror(rc);
		bool reach = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
		             rc == CURLE_COULDNT_RESOLVE_PROXY;
		long os_errno = 0;
		char oserr[128];

		/* "Connection refused" says more than curl's "Couldn't connect to server". */
		if (rc == CURLE_COULDNT_CONNECT &&
		    curl_easy_getinfo(conn->curl, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK &&
		    os_errno != 0 && strerror_r((int)os_errno, oserr, sizeof(oserr)) == 0)
			what = oserr;
		if (reach)
			idem_registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
			                         "schema id %d: cannot reach %s: %s", (int)id,
			                         reg->url_shown, what);
		else
			idem_registry_result_set(res, IDEM_REGISTRY_UNAVAILABLE,
			                         "schema id %d: request to %s failed: %s", (int)id,
			                         reg->url_shown, what);
	} else if (status == 200) {
		idem_registry_answer_200(reg, conn, id, res);
	} else {
		const char *reason = idem_registry_reason(status);

		if (too_big)
			detail[0] = '\0';
		else
			idem_registry_error_detail(&conn->body, detail, sizeof(detail));
		idem_registry_result_set(
		        res, status == 404 ? IDEM_REGISTRY_UNKNOWN : IDEM_REGISTRY_UNAVAILABLE,
		        "schema id %d: registry %s answered %ld%s%s%s", (int)id, reg->url_shown,
		        status, reason[0] != '\0' ? " " : "", reason, detail);
	}
	/* A schema can be megabytes: do not keep that much per idle handle. */
	idem_buf_done(&conn->body);
	if (res->answer == IDEM_REGISTRY_OK)
		idem_log_debug("registry", "schema id %d: fetched from %s", (int)id,
		               reg->url_shown);
	else
		idem_log_debug("registry", "%s", res->why);
}

/* --- get --- */

enum idem_registry_answer idem_registry_get(idem_registry *reg, int32_t id, void **ret_obj,
                                            char *why, size_t whylen, int *ret_retry_ms)
{
	struct idem_registry_entry *e, *gone = NULL;
	struct idem_registry_conn *conn;
	struct idem_registry_result res;
	enum idem_registry_answer answer;
	int64_t now;

	pthread_mutex_lock(&reg->mu);
	e = idem_registry_lookup(reg, id);
	now = idem_mono_ms();
	if (e == NULL) {
		e = calloc(1, sizeof(*e));
		if (e == NULL) {
			pthread_mutex_unlock(&reg->mu);
			if (why != NULL && whylen > 0)
				snprintf(why, whylen, "schema id %d: out of memory", (int)id);
			if (ret_retry_ms != NULL)
				*ret_retry_ms = reg->retry_initial_ms;
			return IDEM_REGISTRY_UNAVAILABLE;
		}
		e->id = id;
		e->hnext = reg->buckets[idem_registry_bucket(reg, id)];
		reg->buckets[idem_registry_bucket(reg, id)] = e;
	} else if (e->fetching) {
		uint64_t gen = e->gen;

		/* Single flight: take the answer of the fetch under way. */
		e->waiters++;
		while (e->gen == gen)
			pthread_cond_wait(&reg->cv, &reg->mu);
		e->waiters--;
		answer = idem_registry_reply(reg, e, idem_mono_ms(), ret_obj, why, whylen,
		                             ret_retry_ms);
		pthread_mutex_unlock(&reg->mu);
		return answer;
	} else if (e->answer == IDEM_REGISTRY_OK || now < e->until_ms) {
		struct idem_registry_lru *l = idem_registry_list_of(reg, e);

		idem_registry_lru_remove(l, e);
		idem_registry_lru_push(l, e);
		answer = idem_registry_reply(reg, e, now, ret_obj, why, whylen, ret_retry_ms);
		pthread_mutex_unlock(&reg->mu);
		return answer;
	} else {
		/* An UNKNOWN kept long enough, or an UNAVAILABLE whose wait is over: ask again. */
		idem_registry_lru_remove(idem_registry_list_of(reg, e), e);
	}
	e->fetching = true;
	reg->stats.fetches++;
	conn = reg->idle;
	if (conn != NULL) {
		reg->idle = conn->next;
		reg->nidle--;
	}
	pthread_mutex_unlock(&reg->mu);

	if (conn == NULL)
		conn = idem_registry_conn_new(reg);
	idem_registry_fetch(reg, conn, id, &res);

	pthread_mutex_lock(&reg->mu);
	now = idem_mono_ms();
	if (conn != NULL && reg->nidle < IDEM_REGISTRY_IDLE_CONNS) {
		conn->next = reg->idle;
		reg->idle = conn;
		reg->nidle++;
		conn = NULL;
	}
	free(e->why);
	e->why = NULL;
	e->answer = res.answer;
	e->fetching = false;
	switch (res.answer) {
	case IDEM_REGISTRY_OK:
		e->obj = res.obj;
		e->failures = 0;
		break;
	case IDEM_REGISTRY_UNKNOWN:
		reg->stats.unknown++;
		e->why = strdup(res.why);
		e->until_ms = now + reg->unknown_keep_ms;
		e->failures = 0;
		break;
	case IDEM_REGISTRY_UNAVAILABLE:
		reg->stats.failures++;
		e->why = strdup(res.why);
		e->failures++;
		e->until_ms = now + idem_backoff_ms(reg->retry_initial_ms, reg->retry_max_ms,
		                                    e->failures, &reg->seed);
		break;
	}
	e->gen++;
	idem_registry_lru_push(idem_registry_list_of(reg, e), e);
	answer = idem_registry_reply(reg, e, now, ret_obj, why, whylen, ret_retry_ms);
	if (e->waiters > 0)
		pthread_cond_broadcast(&reg->cv);
	idem_registry_evict(reg, &reg->ok, &gone);
	idem_registry_evict(reg, &reg->other, &gone);
	reg->stats.cached = reg->ok.n;
	pthread_mutex_unlock(&reg->mu);

	idem_registry_conn_free(conn);
	while (gone != NULL) {
		e = gone;
		gone = e->hnext;
		idem_registry_entry_free(reg, e);
	}
	return answer;
}

size_t idem_registry_retry_now(idem_registry *reg)
{
	size_t n = 0;

	pthread_mutex_lock(&reg->mu);
	for (struct idem_registry_entry *e = reg->other.head; e != NULL; e = e->next) {
		if (e->answer == IDEM_REGISTRY_UNAVAILABLE && e->until_ms > 0) {
			e->until_ms = 0;
			n++;
		}
	}
	pthread_mutex_unlock(&reg->mu);
	return n;
}

void idem_registry_stats(idem_registry *reg, struct idem_registry_stats *ret_stats)
{
	pthread_mutex_lock(&reg->mu);
	*ret_stats = reg->stats;
	ret_stats->cached = reg->ok.n;
	pthread_mutex_unlock(&reg->mu);
}
