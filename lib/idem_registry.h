/*
 * idem_registry.h - a Confluent Schema Registry client: schemas by id, fetched once, cached.
 *
 * GET {url}/schemas/ids/{id} on the first sight of an id (libcurl; TLS through an https URL;
 * HTTP basic authentication with username and password). Schema ids are immutable, so an
 * answer is kept for the life of the process, at most IDEM_REGISTRY_MAX_SCHEMAS of them (the
 * least recently used goes first). The schema text is turned into an object by the caller's
 * parse function (idem_avro_schema_new() in idemd), so the cache holds ready schemas.
 *
 * Two ways to ask: idem_registry_get() blocks while it fetches (at most timeout_ms);
 * idem_registry_peek() never waits on the network: it answers from the cache, or hands the id
 * to a background fetcher thread and answers IDEM_REGISTRY_PENDING (the daemon's consumer
 * thread asks this way, and is told through opts.notify when the fetch ends).
 *
 * Concurrency: any number of threads may ask at once, by either call. One id is fetched by one
 * thread at a time (a caller of get() or a fetcher thread); callers of get() asking for an id
 * being fetched wait for that fetch and share its answer, and peek() answers PENDING without
 * starting another (single flight).
 *
 * Answers:
 *   IDEM_REGISTRY_OK           the schema (a reference the caller releases with unref_fn)
 *   IDEM_REGISTRY_UNKNOWN      the registry says it does not know the id (404 with its JSON
 *                              error body and an error_code 404xx: 40401 subject, 40402
 *                              version, 40403 schema not found), or the schema is not an Avro
 *                              schema (nor a JSON one, with opts.parse_json) that parses:
 *                              permanent for this message (quarantine).
 *                              Kept IDEM_REGISTRY_UNKNOWN_KEEP_MS, then asked again.
 *   IDEM_REGISTRY_UNAVAILABLE  cannot tell now: connection refused or reset, timeout, 5xx, 429,
 *                              401/403, any other 404 (an HTML page from a proxy, a wrong base
 *                              path, no error_code or another one), any answer that is not the
 *                              registry's JSON (a 200 without a "schema" string included).
 *                              Transient: the caller waits and asks again after *ret_retry_ms.
 *                              Until then, asking again answers the same at once, without a
 *                              request (the backoff doubles per failed fetch of that id, from
 *                              retry_initial_ms to retry_max_ms, with jitter). The reason names
 *                              the URL, the status and the answer's first bytes (escaped).
 *   IDEM_REGISTRY_PENDING      peek() only: a background fetch of the id is under way.
 * The password never appears in a message: the URL may not hold credentials (idem_url.h), and
 * the username and password go to libcurl only.
 */
#ifndef IDEM_REGISTRY_H
#define IDEM_REGISTRY_H

#include "idem_common.h"
#include "idem_limits.h"
#include "idem_protobuf.h"

#define IDEM_REGISTRY_MAX_SCHEMAS     1000
#define IDEM_REGISTRY_UNKNOWN_KEEP_MS 10000
/*
 * A 200 answer larger than this is UNKNOWN ("schema id 7: answer of http://registry:8081 is
 * larger than 8388608 bytes"): the answer for an id never changes, so asking again cannot help.
 */
#define IDEM_REGISTRY_MAX_ANSWER_BYTES (8u * 1024 * 1024)

typedef struct idem_registry idem_registry;

/*
 * Turns the schema text (the "schema" member of the answer, NUL-terminated at @len) into an
 * object with one reference, the caller's; @why on failure. A failure makes the id UNKNOWN,
 * except IDEM_ERR_NOMEM, which makes it UNAVAILABLE (asked again after the backoff).
 * parse_fn and unref_fn run on the threads calling idem_registry_get() and on the fetcher
 * threads (unref_fn also in idem_registry_free()) without the registry's lock, so they must be
 * thread-safe; ref_fn runs under it and must only take a reference. None may call back into the
 * registry.
 */
typedef idem_status (*idem_registry_parse_fn)(const char *text, size_t len, void **ret_obj,
                                              char *why, size_t whylen);
/*
 * The same for a Protobuf schema (schemaType PROTOBUF) of id @id, with the .proto files its
 * references name, directly or not (GET /subjects/{subject}/versions/{version} each, by the
 * same fetch: a reference that cannot be had now makes the id UNAVAILABLE, one the registry
 * does not know or that is not Protobuf UNKNOWN).
 */
typedef idem_status (*idem_registry_parse_pb_fn)(const char *text, size_t len, int32_t id,
                                                 const struct idem_pb_file *deps, size_t n_deps,
                                                 void **ret_obj, char *why, size_t whylen);
typedef void *(*idem_registry_ref_fn)(void *obj);
typedef void (*idem_registry_unref_fn)(void *obj);

struct idem_registry_opts {
	const char *url;      /* base URL, e.g. "http://registry:8081"; a trailing '/' is fine */
	const char *username; /* NULL: no authentication */
	const char *password; /* with username; never logged */
	int timeout_ms;       /* a whole request, connecting included */
	int retry_initial_ms; /* backoff after the first failed fetch of an id */
	int retry_max_ms;     /* at most this */
	idem_registry_parse_fn parse;
	idem_registry_ref_fn ref;
	idem_registry_unref_fn unref;
	/*
	 * Optional: the parse function of a schema whose schemaType is JSON (JSON Schema), as
	 * parse is AVRO's; its objects share ref and unref with Avro's, and schema references are
	 * no reason to refuse one (Avro's are). NULL: such an id is UNKNOWN, like PROTOBUF ("schema
	 * id 9 is JSON, not AVRO").
	 */
	idem_registry_parse_fn parse_json;
	/* Optional: the same for PROTOBUF (NULL: such an id is UNKNOWN). */
	idem_registry_parse_pb_fn parse_protobuf;
	/*
	 * Optional: called without the registry's lock each time a fetch that peek() answered
	 * IDEM_REGISTRY_PENDING for ends, whatever its answer (peek() then answers without
	 * PENDING): on the fetcher thread, or on the thread of the get() whose fetch peek() found
	 * under way. Must be quick and must not call into the registry (wake the thread that
	 * peeks). Not called once idem_registry_free() has begun.
	 */
	void (*notify)(void *ctx);
	void *notify_ctx;
};

enum idem_registry_answer {
	IDEM_REGISTRY_OK = 0,
	IDEM_REGISTRY_UNKNOWN,
	IDEM_REGISTRY_UNAVAILABLE,
	IDEM_REGISTRY_PENDING, /* a background fetch of the id is under way (peek() only) */
};

/* Counters since start, for metrics and tests. */
struct idem_registry_stats {
	uint64_t fetches;  /* HTTP requests made */
	uint64_t failures; /* of which UNAVAILABLE */
	uint64_t unknown;  /* of which UNKNOWN */
	size_t cached;     /* schemas held now */
};

/*
 * @brief A client for @opts (strings are copied). Checks the URL's form (http or https) but
 * makes no request and starts no thread (the fetcher threads start with the first peek() that
 * needs one). Errors: IDEM_ERR_CONFIG with the reason in @err, read by idem_url_parse()
 * ("schema_registry.url 'ftp://x' must start with http:// or https://"; also credentials, no
 * host, a bad port, a query or fragment, spaces), IDEM_ERR_INVALID for a timeout or retry delay
 * that is not positive, IDEM_ERR_NOMEM. parse, ref and unref must be set. A retry_max_ms below
 * retry_initial_ms counts as the latter. Call curl_global_init() once per process before the first
 * client (idem_registry_global_init).
 */
IDEM_NODISCARD idem_status idem_registry_new(const struct idem_registry_opts *opts,
                                             idem_registry **ret_reg, idem_error *err);
/*
 * @brief Ask @reg for its subjects (GET {url}/subjects) once, on the calling thread, up to its
 * timeout: whether it answers, for a check before consuming. *@ret_http is the HTTP status of
 * the answer (0: none came), set on failure too. Errors: IDEM_ERR_UNAVAILABLE with the reason.
 */
IDEM_NODISCARD idem_status idem_registry_ping(idem_registry *reg, long *ret_http, idem_error *err);
/*
 * @brief Accepts NULL. Aborts the requests of the fetcher threads under way (within about a
 * second, however long the registry takes), joins the threads, drops the ids queued for them and
 * releases every cached schema. Not to be called concurrently with get() or peek().
 */
void idem_registry_free(idem_registry *reg);

/* @brief curl_global_init(), once per process, before threads (idempotent). */
IDEM_NODISCARD idem_status idem_registry_global_init(idem_error *err);

/*
 * @brief The schema of @id. On IDEM_REGISTRY_OK *ret_obj is a new reference. Otherwise @why
 * says what happened, naming the id and the URL (without credentials) — "schema id 7: registry
 * answered 404 Not Found (error_code 40403: Schema not found)", "schema id 7: cannot reach
 * http://registry:8081: Connection refused" — and for UNAVAILABLE *ret_retry_ms is how long to
 * wait before asking again (> 0). On IDEM_REGISTRY_OK @why and *ret_retry_ms are untouched;
 * @why may be NULL when @whylen is 0, @ret_retry_ms may be NULL. The backoff after the k-th
 * consecutive failed fetch of an id is idem_backoff_ms() (the one retry policy) of attempt k.
 * Never answers IDEM_REGISTRY_PENDING: a fetch of @id under way (by peek()'s fetcher or another
 * get()) is waited for. Not to be called concurrently with idem_registry_free().
 */
enum idem_registry_answer idem_registry_get(idem_registry *reg, int32_t id, void **ret_obj,
                                            char *why, size_t whylen, int *ret_retry_ms);

/*
 * @brief The schema of @id without waiting on the network. Answers as get() from the cache: OK
 * (a new reference in *ret_obj), UNKNOWN within its keep time, UNAVAILABLE within its backoff
 * (*ret_retry_ms the time left). Otherwise (never asked, keep time or backoff over) it marks
 * the id as being fetched, hands it to a fetcher thread (started at the first need; the fetch
 * and the parse run there) and answers IDEM_REGISTRY_PENDING: "schema id 7: asking
 * http://registry:8081", *ret_retry_ms = timeout_ms (the request's own bound; opts.notify tells
 * when it ends). A peek() while the id is being fetched answers PENDING too, without another
 * request. UNAVAILABLE also when the entry or the thread cannot be had (out of memory).
 * @why, @ret_retry_ms as for get(). Not to be called concurrently with idem_registry_free().
 */
enum idem_registry_answer idem_registry_peek(idem_registry *reg, int32_t id, void **ret_obj,
                                             char *why, size_t whylen, int *ret_retry_ms);

/*
 * @brief Forget the backoff of every id the registry did not answer for: the next get() of each
 * (or peek()) asks again at once (SIGHUP, with the partitions' own retries).
 * @returns how many ids were waiting.
 */
size_t idem_registry_retry_now(idem_registry *reg);

void idem_registry_stats(idem_registry *reg, struct idem_registry_stats *ret_stats);

#endif
