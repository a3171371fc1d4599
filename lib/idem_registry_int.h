/*
 * idem_registry_int.h - what the two files of idem_registry share (internal to them).
 *
 * idem_registry is split in two: idem_registry.c, the table of ids (entries, hash, the two
 * LRU lists, single flight, get(), peek(), the fetcher threads, the pool of idle easy handles)
 * and idem_registry_http.c, one request to the registry without the lock (an easy handle and
 * its callbacks, the fetch with libcurl, and the reading of the answer: the status, the
 * registry's JSON and its error_code, the 200 answer and its parse) into a struct
 * idem_registry_result that idem_registry.c stores. The entries of the table are
 * idem_registry.c's own; idem_registry_http.c never takes reg->mu.
 *
 * Included by those files only: not part of libidem's contract (idem_registry.h is). The
 * functions with external linkage are idem__registry_*.
 */
#ifndef IDEM_REGISTRY_INT_H
#define IDEM_REGISTRY_INT_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "idem_common.h"
#include "idem_registry.h"

/* Background fetcher threads (why two: idem_registry.c's opening comment). */
#define IDEM_REGISTRY_FETCHERS 2

struct idem_registry_entry; /* idem_registry.c */

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
	char *url; /* for requests and messages (it holds no credentials), without a trailing '/' */
	char *username;
	char *password;
	int timeout_ms;
	int retry_initial_ms;
	int retry_max_ms;
	idem_registry_parse_fn parse;
	idem_registry_parse_fn parse_json;        /* NULL: JSON schemas are UNKNOWN */
	idem_registry_parse_pb_fn parse_protobuf; /* NULL: Protobuf schemas are UNKNOWN */
	idem_registry_ref_fn ref;
	idem_registry_unref_fn unref;
	size_t max_schemas;
	int64_t unknown_keep_ms;
	size_t max_answer;
	struct curl_slist *headers;
	void (*notify)(void *ctx);
	void *notify_ctx;
	atomic_bool closing; /* idem_registry_free() began: transfers abort, fetchers end */

	pthread_mutex_t mu;                                  /* everything below */
	pthread_cond_t cv;                                   /* a fetch ended */
	pthread_cond_t work_cv;                              /* an id was queued, or closing */
	struct idem_registry_entry *queue_head, *queue_tail; /* for the fetcher threads */
	pthread_t fetchers[IDEM_REGISTRY_FETCHERS];
	size_t nfetchers; /* started */
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

/*
 * A new easy handle for @reg's requests (timeouts, headers, authentication, the answer's size
 * limit, the abort on closing); NULL when out of memory. Called without reg->mu.
 */
struct idem_registry_conn *idem__registry_conn_new(idem_registry *reg);
/* Accepts NULL. */
void idem__registry_conn_free(struct idem_registry_conn *conn);

/* @res's answer and its reason, formatted (cut at sizeof(res->why)). */
void idem__registry_result_set(struct idem_registry_result *res, enum idem_registry_answer answer,
                               const char *fmt, ...) IDEM_PRINTF(3, 4);

/*
 * Ask the registry for @id on @conn (NULL: the handle could not be made, an UNAVAILABLE
 * outcome) and read the answer into @res: OK with the parsed object (one reference, the
 * caller's), UNKNOWN or UNAVAILABLE with the reason. Called without reg->mu; frees the answer's
 * buffer, so that an idle handle keeps no schema text.
 */
void idem__registry_fetch(idem_registry *reg, struct idem_registry_conn *conn, int32_t id,
                          struct idem_registry_result *res);

#endif
