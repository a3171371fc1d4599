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
 * small pool so that connections to the registry are reused; making the request and reading
 * its answer is idem_registry_http.c's (idem_registry_int.h says who does what).
 *
 * peek() fetches in the background: it marks the entry fetching (the same flag get() sets, so
 * a get() of the id waits for that fetch), puts it on a queue and returns. IDEM_REGISTRY_FETCHERS
 * threads, started at the first need, take ids from the queue and run the very fetch, parse and
 * store of get(), then call opts.notify. Two, not one: a request that hangs until timeout_ms
 * does not hold up every other id; not more: there is one registry, two idle connections are
 * kept, and a configuration reads few schemas. A queued entry is not in an LRU list, so it is
 * never evicted while it waits. Closing sets reg->closing, which every transfer's progress
 * callback reads, so a hanging request is aborted within libcurl's progress interval (about a
 * second at most).
 */
#include "idem_registry.h"

#include <assert.h>
#include <curl/curl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_log.h"
#include "idem_registry_int.h"
#include "idem_url.h"

/* Easy handles kept between fetches (each keeps its connections open). */
#define IDEM_REGISTRY_IDLE_CONNS 2

/* Tests shrink these (IDEM_TESTABLE); a registry reads them once, in idem_registry_new(). */
IDEM_TESTABLE size_t idem__registry_max_schemas = IDEM_REGISTRY_MAX_SCHEMAS;
IDEM_TESTABLE int64_t idem__registry_unknown_keep_ms = IDEM_REGISTRY_UNKNOWN_KEEP_MS;
IDEM_TESTABLE size_t idem__registry_max_answer = IDEM_REGISTRY_MAX_ANSWER_BYTES;

struct idem_registry_entry {
	int32_t id;
	bool fetching;                     /* a thread is asking the registry now, or queued */
	bool peeked;                       /* peek() answered PENDING for this fetch: notify */
	enum idem_registry_answer answer;  /* of the last fetch */
	void *obj;                         /* OK: the cache's reference */
	char *why;                         /* UNKNOWN, UNAVAILABLE (NULL if out of memory) */
	int64_t until_ms;                  /* UNKNOWN, UNAVAILABLE: no request before this */
	int failures;                      /* consecutive UNAVAILABLE fetches */
	unsigned int waiters;              /* threads waiting for this fetch: pinned */
	uint64_t gen;                      /* fetches ended */
	struct idem_registry_entry *qnext; /* queued for a fetcher thread */
	struct idem_registry_entry *hnext;
	struct idem_registry_entry *prev, *next; /* in an LRU list unless fetching */
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

/* @url checked by the one URL reader (idem_url.h); *ret_base is what requests go to. */
static idem_status idem_registry_url_check(const char *url, char **ret_base, idem_error *err)
{
	struct idem_url u;
	char why[600];
	idem_status r = idem_url_parse(url, &u, why, sizeof(why));

	if (r == IDEM_ERR_NOMEM)
		return idem_error_nomem(err);
	if (r != IDEM_OK)
		return idem_error_set(
		        err, IDEM_ERR_CONFIG, "schema_registry.url %s%s", why,
		        idem_url_has_credentials(url)
		                ? " (use schema_registry.username and schema_registry.password_file)"
		                : "");
	*ret_base = u.base;
	u.base = NULL;
	idem_url_done(&u);
	return IDEM_OK;
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
	if (idem_cond_init(&reg->work_cv) != 0) {
		pthread_cond_destroy(&reg->cv);
		pthread_mutex_destroy(&reg->mu);
		free(reg);
		return idem_error_nomem(err);
	}
	atomic_init(&reg->closing, false);
	reg->notify = opts->notify;
	reg->notify_ctx = opts->notify_ctx;
	reg->timeout_ms = opts->timeout_ms;
	reg->retry_initial_ms = opts->retry_initial_ms;
	reg->retry_max_ms = opts->retry_max_ms > opts->retry_initial_ms ? opts->retry_max_ms
	                                                                : opts->retry_initial_ms;
	reg->parse = opts->parse;
	reg->parse_json = opts->parse_json;
	reg->parse_protobuf = opts->parse_protobuf;
	reg->ref = opts->ref;
	reg->unref = opts->unref;
	reg->max_schemas = idem__registry_max_schemas > 0 ? idem__registry_max_schemas : 1;
	reg->unknown_keep_ms = idem__registry_unknown_keep_ms;
	reg->max_answer = idem__registry_max_answer;
	reg->seed = (unsigned int)idem_mono_us() ^ (unsigned int)(uintptr_t)reg;
	r = idem_registry_url_check(opts->url, &reg->url, err);
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
	/* Stop the fetchers: an id being fetched has its transfer aborted, queued ids are dropped
	 * with the table below. */
	pthread_mutex_lock(&reg->mu);
	atomic_store(&reg->closing, true);
	pthread_cond_broadcast(&reg->work_cv);
	pthread_mutex_unlock(&reg->mu);
	for (size_t i = 0; i < reg->nfetchers; i++)
		pthread_join(reg->fetchers[i], NULL);
	reg->queue_head = reg->queue_tail = NULL;
	for (size_t i = 0; reg->buckets != NULL && i < reg->nbuckets; i++) {
		struct idem_registry_entry *e = reg->buckets[i], *next;

		for (; e != NULL; e = next) {
			next = e->hnext;
			assert(e->waiters == 0); /* no get() may run now */
			idem_registry_entry_free(reg, e);
		}
	}
	while (reg->idle != NULL) {
		struct idem_registry_conn *conn = reg->idle;

		reg->idle = conn->next;
		idem__registry_conn_free(conn);
	}
	curl_slist_free_all(reg->headers);
	free(reg->buckets);
	free(reg->url);
	free(reg->username);
	if (reg->password != NULL) {
		/* Out of core files and freed memory (explicit_bzero: never optimised away). */
		idem_secret_wipe(reg->password, strlen(reg->password));
		free(reg->password);
	}
	pthread_cond_destroy(&reg->work_cv);
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

/* --- get, peek and the fetcher threads --- */

/* The entry of @id, made (not yet in a list) if new; NULL when out of memory. */
static struct idem_registry_entry *idem_registry_entry_of(idem_registry *reg, int32_t id)
{
	struct idem_registry_entry *e = idem_registry_lookup(reg, id);

	if (e != NULL)
		return e;
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	e->id = id;
	e->hnext = reg->buckets[idem_registry_bucket(reg, id)];
	reg->buckets[idem_registry_bucket(reg, id)] = e;
	return e;
}

static enum idem_registry_answer idem_registry_nomem(idem_registry *reg, int32_t id, char *why,
                                                     size_t whylen, int *ret_retry_ms)
{
	if (why != NULL && whylen > 0)
		snprintf(why, whylen, "schema id %d: out of memory", (int)id);
	if (ret_retry_ms != NULL)
		*ret_retry_ms = reg->retry_initial_ms;
	return IDEM_REGISTRY_UNAVAILABLE;
}

/*
 * The cached answer of @e if it still holds (an OK, an UNKNOWN within its keep time, an
 * UNAVAILABLE within its backoff), touching its LRU position; false if the id must be asked
 * again, in which case @e is taken out of its list. @e is not being fetched.
 */
static bool idem_registry_cached(idem_registry *reg, struct idem_registry_entry *e, int64_t now,
                                 bool is_new, void **ret_obj, char *why, size_t whylen,
                                 int *ret_retry_ms, enum idem_registry_answer *ret_answer)
{
	struct idem_registry_lru *l;

	if (is_new)
		return false;
	l = idem_registry_list_of(reg, e);
	idem_registry_lru_remove(l, e);
	if (e->answer == IDEM_REGISTRY_OK || now < e->until_ms) {
		idem_registry_lru_push(l, e);
		*ret_answer = idem_registry_reply(reg, e, now, ret_obj, why, whylen, ret_retry_ms);
		return true;
	}
	/* An UNKNOWN kept long enough, or an UNAVAILABLE whose wait is over: ask again. */
	return false;
}

/*
 * Store the outcome of a fetch of @e (get() and the fetchers alike): its answer, its keep time
 * or backoff, back into an LRU list, and wake the threads waiting for it. The caller evicts
 * afterwards (after taking its own reply, as @e may be evicted).
 */
static void idem_registry_store(idem_registry *reg, struct idem_registry_entry *e,
                                const struct idem_registry_result *res, int64_t now)
{
	free(e->why);
	e->why = NULL;
	e->answer = res->answer;
	e->fetching = false;
	e->peeked = false;
	switch (res->answer) {
	case IDEM_REGISTRY_OK:
		e->obj = res->obj;
		e->failures = 0;
		break;
	case IDEM_REGISTRY_UNKNOWN:
		reg->stats.unknown++;
		e->why = strdup(res->why);
		e->until_ms = now + reg->unknown_keep_ms;
		e->failures = 0;
		break;
	case IDEM_REGISTRY_UNAVAILABLE:
	case IDEM_REGISTRY_PENDING: /* not an outcome; kept apart for the compiler */
		e->answer = IDEM_REGISTRY_UNAVAILABLE;
		reg->stats.failures++;
		e->why = strdup(res->why);
		e->failures++;
		e->until_ms = now + idem_backoff_ms(reg->retry_initial_ms, reg->retry_max_ms,
		                                    e->failures, &reg->seed);
		break;
	}
	e->gen++;
	idem_registry_lru_push(idem_registry_list_of(reg, e), e);
	if (e->waiters > 0)
		pthread_cond_broadcast(&reg->cv);
}

/* Evict beyond the limits (reg->mu held); the entries to free go on *@gone. */
static void idem_registry_trim(idem_registry *reg, struct idem_registry_entry **gone)
{
	idem_registry_evict(reg, &reg->ok, gone);
	idem_registry_evict(reg, &reg->other, gone);
	reg->stats.cached = reg->ok.n;
}

static void idem_registry_free_gone(idem_registry *reg, struct idem_registry_entry *gone)
{
	while (gone != NULL) {
		struct idem_registry_entry *e = gone;

		gone = e->hnext;
		idem_registry_entry_free(reg, e);
	}
}

/* An idle easy handle, or NULL (make one without the lock). reg->mu held. */
static struct idem_registry_conn *idem_registry_conn_take(idem_registry *reg)
{
	struct idem_registry_conn *conn = reg->idle;

	if (conn != NULL) {
		reg->idle = conn->next;
		reg->nidle--;
	}
	return conn;
}

/* Keep @conn for the next fetch if there is room; else it is returned, to free unlocked. */
static struct idem_registry_conn *idem_registry_conn_give(idem_registry *reg,
                                                          struct idem_registry_conn *conn)
{
	if (conn != NULL && reg->nidle < IDEM_REGISTRY_IDLE_CONNS) {
		conn->next = reg->idle;
		reg->idle = conn;
		reg->nidle++;
		conn = NULL;
	}
	return conn;
}

/*
 * Fetch @e (marked fetching, counted) without the lock and store its answer, for get() and the
 * fetchers alike. Called and returns with reg->mu held; evicted entries go to *@gone (freed by
 * the caller once unlocked, idem_registry_free_gone()), the connection back to the idle pool.
 * Returns whether a peek() found the fetch under way (and answered PENDING) before the store.
 */
static bool idem_registry_fetch_store(idem_registry *reg, struct idem_registry_entry *e,
                                      struct idem_registry_entry **gone)
{
	struct idem_registry_conn *conn = idem_registry_conn_take(reg);
	struct idem_registry_result res;
	int32_t id = e->id;
	bool peeked;

	pthread_mutex_unlock(&reg->mu);
	if (conn == NULL)
		conn = idem__registry_conn_new(reg);
	idem__registry_fetch(reg, conn, id, &res);
	pthread_mutex_lock(&reg->mu);
	conn = idem_registry_conn_give(reg, conn);
	peeked = e->peeked;
	idem_registry_store(reg, e, &res, idem_mono_ms());
	idem_registry_trim(reg, gone);
	if (conn != NULL) {
		/* Not kept (the pool is full): freed without the lock. */
		pthread_mutex_unlock(&reg->mu);
		idem__registry_conn_free(conn);
		pthread_mutex_lock(&reg->mu);
	}
	return peeked;
}

enum idem_registry_answer idem_registry_get(idem_registry *reg, int32_t id, void **ret_obj,
                                            char *why, size_t whylen, int *ret_retry_ms)
{
	struct idem_registry_entry *e, *gone = NULL;
	enum idem_registry_answer answer;
	bool is_new, peeked;
	int64_t now;

	pthread_mutex_lock(&reg->mu);
	is_new = idem_registry_lookup(reg, id) == NULL;
	e = idem_registry_entry_of(reg, id);
	now = idem_mono_ms();
	if (e == NULL) {
		pthread_mutex_unlock(&reg->mu);
		return idem_registry_nomem(reg, id, why, whylen, ret_retry_ms);
	}
	if (e->fetching) {
		uint64_t gen = e->gen;

		/* Single flight: take the answer of the fetch under way (ours or a fetcher's). */
		e->waiters++;
		while (e->gen == gen)
			pthread_cond_wait(&reg->cv, &reg->mu);
		e->waiters--;
		answer = idem_registry_reply(reg, e, idem_mono_ms(), ret_obj, why, whylen,
		                             ret_retry_ms);
		pthread_mutex_unlock(&reg->mu);
		return answer;
	}
	if (idem_registry_cached(reg, e, now, is_new, ret_obj, why, whylen, ret_retry_ms,
	                         &answer)) {
		pthread_mutex_unlock(&reg->mu);
		return answer;
	}
	e->fetching = true;
	reg->stats.fetches++;
	peeked = idem_registry_fetch_store(reg, e, &gone);
	answer = idem_registry_reply(reg, e, idem_mono_ms(), ret_obj, why, whylen, ret_retry_ms);
	pthread_mutex_unlock(&reg->mu);

	idem_registry_free_gone(reg, gone);
	/* A peek() found this fetch under way and answered PENDING: tell it, as a fetcher would. */
	if (peeked && reg->notify != NULL)
		reg->notify(reg->notify_ctx);
	return answer;
}

/* A fetcher thread: fetch the queued ids one by one, as get() does, until closing. */
static void *idem_registry_fetcher(void *arg)
{
	idem_registry *reg = arg;

	pthread_mutex_lock(&reg->mu);
	for (;;) {
		struct idem_registry_entry *e, *gone = NULL;

		while (!atomic_load(&reg->closing) && reg->queue_head == NULL)
			pthread_cond_wait(&reg->work_cv, &reg->mu);
		if (atomic_load(&reg->closing))
			break;
		e = reg->queue_head;
		reg->queue_head = e->qnext;
		if (reg->queue_head == NULL)
			reg->queue_tail = NULL;
		e->qnext = NULL;
		reg->stats.fetches++;
		(void)idem_registry_fetch_store(reg, e, &gone);
		pthread_mutex_unlock(&reg->mu);

		idem_registry_free_gone(reg, gone);
		if (reg->notify != NULL && !atomic_load(&reg->closing))
			reg->notify(reg->notify_ctx);
		pthread_mutex_lock(&reg->mu);
	}
	pthread_mutex_unlock(&reg->mu);
	return NULL;
}

/* Start the fetcher threads if none runs yet (reg->mu held); false if none could start. */
static bool idem_registry_fetchers_start(idem_registry *reg)
{
	while (reg->nfetchers < IDEM_REGISTRY_FETCHERS) {
		if (idem_thread_start(&reg->fetchers[reg->nfetchers], idem_registry_fetcher, reg) !=
		    0)
			break;
		reg->nfetchers++;
	}
	return reg->nfetchers > 0;
}

enum idem_registry_answer idem_registry_peek(idem_registry *reg, int32_t id, void **ret_obj,
                                             char *why, size_t whylen, int *ret_retry_ms)
{
	struct idem_registry_entry *e;
	enum idem_registry_answer answer;
	bool is_new;

	pthread_mutex_lock(&reg->mu);
	is_new = idem_registry_lookup(reg, id) == NULL;
	e = idem_registry_entry_of(reg, id);
	if (e == NULL) {
		pthread_mutex_unlock(&reg->mu);
		return idem_registry_nomem(reg, id, why, whylen, ret_retry_ms);
	}
	if (!e->fetching) {
		if (idem_registry_cached(reg, e, idem_mono_ms(), is_new, ret_obj, why, whylen,
		                         ret_retry_ms, &answer)) {
			pthread_mutex_unlock(&reg->mu);
			return answer;
		}
		e->fetching = true;
		if (!idem_registry_fetchers_start(reg)) {
			struct idem_registry_entry *gone = NULL;
			struct idem_registry_result res = { .obj = NULL };

			/* Stored like a failed fetch: backoff, then asked again. */
			idem__registry_result_set(&res, IDEM_REGISTRY_UNAVAILABLE,
			                          "schema id %d: cannot start a thread to ask %s",
			                          (int)id, reg->url);
			idem_registry_store(reg, e, &res, idem_mono_ms());
			answer = idem_registry_reply(reg, e, idem_mono_ms(), ret_obj, why, whylen,
			                             ret_retry_ms);
			idem_registry_trim(reg, &gone);
			pthread_mutex_unlock(&reg->mu);
			idem_registry_free_gone(reg, gone);
			return answer;
		}
		if (reg->queue_tail != NULL)
			reg->queue_tail->qnext = e;
		else
			reg->queue_head = e;
		reg->queue_tail = e;
		pthread_cond_signal(&reg->work_cv);
	}
	e->peeked = true;
	pthread_mutex_unlock(&reg->mu);
	if (why != NULL && whylen > 0)
		snprintf(why, whylen, "schema id %d: asking %s", (int)id, reg->url);
	if (ret_retry_ms != NULL)
		*ret_retry_ms = reg->timeout_ms;
	return IDEM_REGISTRY_PENDING;
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
