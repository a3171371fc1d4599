/*
 * Unit tests for idem_registry against a scripted HTTP/1.1 server on 127.0.0.1 (a thread in
 * this process): caching, UNKNOWN and UNAVAILABLE classification, backoff, basic
 * authentication, eviction and single flight.
 *
 * The registry's timing (backoff, UNKNOWN keep time) is real time, and the tests use short delays
 * (tens of milliseconds). No assertion depends on how fast the machine is: the registry reads
 * the clock (idem_mono_ms()) inside each call, so a call bracketed by the test's own reads of it
 * (timed_get()) bounds what the registry saw, and an assertion that an answer came inside a
 * window is made only where those reads prove it did (else the other outcome is checked for
 * being possible at all). Where the point is what happens inside a window, the window is
 * seconds long. That a call did not wait for an answer is shown by the fake registry: it counts
 * an answer before its first byte, and a connection closed while the answer was delayed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "idem_registry.h"

/* Internals of idem_registry.c (IDEM_TESTABLE). */
extern size_t idem__registry_max_schemas;
extern int64_t idem__registry_unknown_keep_ms;
extern size_t idem__registry_max_answer;
void idem__registry_quote(const char *data, size_t len, char *out, size_t outlen);

#define SCHEMA_OK   "{\"schema\":\"{\\\"type\\\":\\\"string\\\"}\"}"
#define NOT_FOUND   "{\"error_code\":40403,\"message\":\"Schema not found\"}"
#define ALICE_BASIC "Basic YWxpY2U6czNjcmV0LXB3" /* alice:s3cret-pw */

/* --- the fake registry --- */

struct fake {
	int lfd;
	int port;
	pthread_t thr;
	atomic_bool stop;
	pthread_mutex_t mu; /* the script and what was seen */
	int status;
	char *body;
	int delay_ms;
	bool hang_up;          /* close the connection without answering */
	bool no_length;        /* no Content-Length: the body ends when the connection closes */
	const char *need_auth; /* Authorization header required, else 401 */
	int requests;
	int answered;  /* answers begun: counted before their first byte is sent */
	int cut_short; /* connections the client closed while the answer was delayed */
	int served;    /* connections done with, answered or not */
	char path[256];
	char auth[256];
	char accept[256];
	/* Answers by path, before the scripted one: what Protobuf references are fetched from. */
	struct {
		char path[128];
		int status;
		char body[512];
	} routes[8];
	int nroutes;
	char paths[1024]; /* every path asked, ' '-separated */
};

static void fake_route(struct fake *f, const char *path, int status, const char *body)
{
	pthread_mutex_lock(&f->mu);
	assert_true(f->nroutes < (int)IDEM_ARRAY_SIZE(f->routes));
	snprintf(f->routes[f->nroutes].path, sizeof(f->routes[0].path), "%s", path);
	f->routes[f->nroutes].status = status;
	snprintf(f->routes[f->nroutes].body, sizeof(f->routes[0].body), "%s", body);
	f->nroutes++;
	pthread_mutex_unlock(&f->mu);
}

static void fake_script(struct fake *f, int status, const char *body)
{
	pthread_mutex_lock(&f->mu);
	f->status = status;
	free(f->body);
	f->body = strdup(body);
	pthread_mutex_unlock(&f->mu);
}

static int fake_requests(struct fake *f)
{
	int n;

	pthread_mutex_lock(&f->mu);
	n = f->requests;
	pthread_mutex_unlock(&f->mu);
	return n;
}

static int fake_answered(struct fake *f)
{
	int n;

	pthread_mutex_lock(&f->mu);
	n = f->answered;
	pthread_mutex_unlock(&f->mu);
	return n;
}

static int fake_cut_short(struct fake *f)
{
	int n;

	pthread_mutex_lock(&f->mu);
	n = f->cut_short;
	pthread_mutex_unlock(&f->mu);
	return n;
}

/* Wait (at most 20 s: a bound for a broken build, not a timing) until @n connections are done. */
static void fake_wait_served(struct fake *f, int n)
{
	for (int i = 0; i < 4000; i++) {
		int k;

		pthread_mutex_lock(&f->mu);
		k = f->served;
		pthread_mutex_unlock(&f->mu);
		if (k >= n)
			return;
		(void)poll(NULL, 0, 5);
	}
	fail_msg("the fake registry served fewer than %d connections in 20 s", n);
}

static void fake_delay(struct fake *f, int delay_ms)
{
	pthread_mutex_lock(&f->mu);
	f->delay_ms = delay_ms;
	pthread_mutex_unlock(&f->mu);
}

static void header_value(const char *req, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);

	out[0] = '\0';
	for (const char *p = strstr(req, "\r\n"); p != NULL; p = strstr(p + 2, "\r\n")) {
		const char *line = p + 2;

		if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
			const char *v = line + nl + 1;
			size_t len;

			v += strspn(v, " ");
			len = strcspn(v, "\r\n");
			snprintf(out, outlen, "%.*s", (int)len, v);
			return;
		}
	}
}

static void send_all(int c, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = send(c, p, n, MSG_NOSIGNAL);

		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

static void fake_serve(struct fake *f, int c)
{
	char req[8192], auth[256], head[512];
	size_t n = 0;
	int status, delay_ms;
	bool hang_up, no_length;
	char *body;

	for (;;) {
		struct pollfd p = { .fd = c, .events = POLLIN };
		ssize_t k;

		if (n == sizeof(req) - 1 || poll(&p, 1, 2000) <= 0)
			return;
		k = recv(c, req + n, sizeof(req) - 1 - n, 0);
		if (k <= 0)
			return;
		n += (size_t)k;
		req[n] = '\0';
		if (strstr(req, "\r\n\r\n") != NULL)
			break;
	}
	header_value(req, "Authorization", auth, sizeof(auth));
	pthread_mutex_lock(&f->mu);
	f->requests++;
	if (sscanf(req, "GET %255s HTTP/1.1", f->path) != 1)
		f->path[0] = '\0';
	snprintf(f->auth, sizeof(f->auth), "%s", auth);
	header_value(req, "Accept", f->accept, sizeof(f->accept));
	status = f->status;
	body = NULL;
	snprintf(f->paths + strlen(f->paths), sizeof(f->paths) - strlen(f->paths), "%s%s",
	         f->paths[0] != '\0' ? " " : "", f->path);
	for (int i = 0; i < f->nroutes && body == NULL; i++) {
		if (strcmp(f->routes[i].path, f->path) == 0) {
			status = f->routes[i].status;
			body = strdup(f->routes[i].body);
		}
	}
	if (body == NULL)
		body = strdup(f->body != NULL ? f->body : "");
	delay_ms = f->delay_ms;
	hang_up = f->hang_up;
	no_length = f->no_length;
	if (f->need_auth != NULL && strcmp(auth, f->need_auth) != 0) {
		status = 401;
		free(body);
		body = strdup("{\"error_code\":401,\"message\":\"Unauthorized\"}");
	}
	pthread_mutex_unlock(&f->mu);
	if (body == NULL)
		return; /* no cmocka assertion outside the test's thread */

	if (delay_ms > 0) {
		/* Wakes early when the client gives up and closes: then there is no one to answer,
		 * and the test knows the client did not wait for the answer. */
		struct pollfd p = { .fd = c, .events = POLLIN };

		if (poll(&p, 1, delay_ms) > 0) {
			pthread_mutex_lock(&f->mu);
			f->cut_short++;
			pthread_mutex_unlock(&f->mu);
			hang_up = true;
		}
	}
	if (!hang_up) {
		pthread_mutex_lock(&f->mu);
		f->answered++;
		pthread_mutex_unlock(&f->mu);
		if (no_length)
			snprintf(
			        head, sizeof(head),
			        "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
			        status);
		else
			snprintf(
			        head, sizeof(head),
			        "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			        status, strlen(body));
		send_all(c, head, strlen(head));
		send_all(c, body, strlen(body));
		shutdown(c, SHUT_WR);
	}
	free(body);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;

	while (!atomic_load(&f->stop)) {
		struct pollfd p = { .fd = f->lfd, .events = POLLIN };
		int c;

		if (poll(&p, 1, 20) <= 0)
			continue;
		c = accept(f->lfd, NULL, NULL);
		if (c < 0)
			continue;
		fake_serve(f, c);
		close(c);
		pthread_mutex_lock(&f->mu);
		f->served++;
		pthread_mutex_unlock(&f->mu);
	}
	return NULL;
}

/* Listen on 127.0.0.1:@port (0: any free port) and serve in a thread. */
static void fake_start(struct fake *f, int port)
{
	struct sockaddr_in a = { 0 };
	socklen_t alen = sizeof(a);
	int one = 1;

	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(f->lfd, 64), 0);
	assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &alen), 0);
	f->port = ntohs(a.sin_port);
	atomic_store(&f->stop, false);
	assert_int_equal(pthread_create(&f->thr, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	if (f->lfd < 0)
		return;
	atomic_store(&f->stop, true);
	pthread_join(f->thr, NULL);
	close(f->lfd);
	f->lfd = -1;
}

/* A port on 127.0.0.1 with nothing listening (bound, then released). */
static int free_port(void)
{
	struct sockaddr_in a = { 0 };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* --- the parsed objects: reference counted, counted --- */

struct obj {
	atomic_int refs;
	char text[64];
};

static atomic_int parse_calls;
static atomic_int live_objs;

static idem_status obj_parse(const char *text, size_t len, void **ret_obj, char *why, size_t whylen)
{
	struct obj *o;

	atomic_fetch_add(&parse_calls, 1);
	assert_int_equal(text[len], '\0');
	if (strncmp(text, "bad", 3) == 0) {
		snprintf(why, whylen, "not an avro schema: %s", text);
		return IDEM_ERR_INVALID;
	}
	o = calloc(1, sizeof(*o));
	if (o == NULL)
		return IDEM_ERR_NOMEM;
	atomic_init(&o->refs, 1);
	snprintf(o->text, sizeof(o->text), "%s", text);
	atomic_fetch_add(&live_objs, 1);
	*ret_obj = o;
	return IDEM_OK;
}

static void *obj_ref(void *p)
{
	struct obj *o = p;

	atomic_fetch_add(&o->refs, 1);
	return o;
}

static void obj_unref(void *p)
{
	struct obj *o = p;

	if (o != NULL && atomic_fetch_sub(&o->refs, 1) == 1) {
		atomic_fetch_sub(&live_objs, 1);
		free(o);
	}
}

/* --- helpers --- */

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/*
 * idem_registry_get() between two reads of the registry's clock, *@t0 before and *@t1 after:
 * whatever the registry computed from the clock (a backoff's end, a keep time's end, the wait
 * left) it read in between. A failure stored at s and replied at r (t0 <= s <= r <= t1) ends
 * its backoff b at s + b = r + *@retry: so b lies in [*@retry, *@retry + (t1 - t0)], and the
 * window ends no sooner than t0 + *@retry (unless the wait left was clamped to 1 ms, which needs
 * b <= t1 - t0).
 */
static enum idem_registry_answer timed_get(idem_registry *reg, int32_t id, void **obj, char *why,
                                           size_t whylen, int *retry, int64_t *t0, int64_t *t1)
{
	enum idem_registry_answer a;

	*t0 = idem_mono_ms();
	a = idem_registry_get(reg, id, obj, why, whylen, retry);
	*t1 = idem_mono_ms();
	return a;
}

static idem_registry *reg_new(const char *url, const char *user, const char *pass, int timeout_ms,
                              int initial_ms, int max_ms)
{
	struct idem_registry_opts opts = {
		.url = url,
		.username = user,
		.password = pass,
		.timeout_ms = timeout_ms,
		.retry_initial_ms = initial_ms,
		.retry_max_ms = max_ms,
		.parse = obj_parse,
		.ref = obj_ref,
		.unref = obj_unref,
	};
	idem_registry *reg = NULL;
	idem_error err;

	if (idem_registry_new(&opts, &reg, &err) != IDEM_OK)
		fail_msg("idem_registry_new: %s", err.msg);
	return reg;
}

/* What the last Protobuf parse was given: the text, then each file as " name=text". */
static char pb_seen[512];

static idem_status pb_parse(const char *text, size_t len, int32_t id,
                            const struct idem_pb_file *deps, size_t n_deps, void **ret_obj,
                            char *why, size_t whylen)
{
	int n = snprintf(pb_seen, sizeof(pb_seen), "%d:%s", (int)id, text);

	for (size_t i = 0; i < n_deps && n > 0 && (size_t)n < sizeof(pb_seen); i++) {
		assert_int_equal(deps[i].text[deps[i].len], '\0');
		n += snprintf(pb_seen + n, sizeof(pb_seen) - (size_t)n, " %s=%s", deps[i].name,
		              deps[i].text);
	}
	return obj_parse(text, len, ret_obj, why, whylen);
}

static idem_registry *reg_fake(const struct fake *f)
{
	char url[64];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
	return reg_new(url, NULL, NULL, 2000, 20, 80);
}

static void assert_contains(const char *s, const char *part)
{
	if (strstr(s, part) == NULL)
		fail_msg("'%s' does not contain '%s'", s, part);
}

static void assert_lacks(const char *s, const char *part)
{
	if (strstr(s, part) != NULL)
		fail_msg("'%s' contains '%s'", s, part);
}

static int setup(void **state)
{
	struct fake *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	pthread_mutex_init(&f->mu, NULL);
	f->lfd = -1;
	fake_script(f, 200, SCHEMA_OK);
	fake_start(f, 0);
	atomic_store(&parse_calls, 0);
	atomic_store(&live_objs, 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fake *f = *state;

	fake_stop(f);
	free(f->body);
	pthread_mutex_destroy(&f->mu);
	free(f);
	idem__registry_max_schemas = IDEM_REGISTRY_MAX_SCHEMAS;
	idem__registry_unknown_keep_ms = IDEM_REGISTRY_UNKNOWN_KEEP_MS;
	idem__registry_max_answer = IDEM_REGISTRY_MAX_ANSWER_BYTES;
	/* Every reference was released: by the tests and by idem_registry_free(). */
	assert_int_equal(atomic_load(&live_objs), 0);
	return 0;
}

/* --- tests --- */

static void test_url_check(void **state)
{
	static const struct {
		const char *url;
		const char *msg; /* NULL: accepted */
	} cases[] = {
		{ "http://registry:8081", NULL },
		{ "https://registry.example.com/", NULL },
		{ "HTTP://registry:8081/base//", NULL },
		{ "http://[::1]:8081", NULL },
		{ "ftp://x", "schema_registry.url 'ftp://x' must start with http:// or https://" },
		{ "registry:8081",
		  "schema_registry.url 'registry:8081' must start with http:// or https://" },
		{ "ftp://alice:s3cret-pw@x/y",
		  "schema_registry.url 'ftp://***@x/y' must not contain credentials (use schema_registry.username and schema_registry.password_file)" },
		{ "http://", "schema_registry.url 'http://' has no host" },
		{ "https://u:p@registry:443/sr",
		  "schema_registry.url 'https://***@registry:443/sr' must not contain credentials (use schema_registry.username and schema_registry.password_file)" },
		{ "https://u:p#w@registry",
		  "schema_registry.url 'https://***@registry' must not contain credentials (use schema_registry.username and schema_registry.password_file)" },
		{ "http://:8081", "schema_registry.url 'http://:8081' has no host" },
		{ "http://h:0", "schema_registry.url 'http://h:0' has an invalid port" },
		{ "http://h:99999", "schema_registry.url 'http://h:99999' has an invalid port" },
		{ "http://h:80x", "schema_registry.url 'http://h:80x' has an invalid port" },
		{ "http://[::1", "schema_registry.url 'http://[::1' has an invalid host" },
		{ "http://h/x?y=1",
		  "schema_registry.url 'http://h/x?y=1' must not have a query or a fragment" },
		{ "http://h /x",
		  "schema_registry.url 'http://h /x' must not contain spaces or control characters" },
	};
	struct idem_registry_opts opts = {
		.timeout_ms = 1000,
		.retry_initial_ms = 100,
		.retry_max_ms = 1000,
		.parse = obj_parse,
		.ref = obj_ref,
		.unref = obj_unref,
	};

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		idem_registry *reg = NULL;
		idem_error err;
		idem_status r;

		opts.url = cases[i].url;
		r = idem_registry_new(&opts, &reg, &err);
		if (cases[i].msg == NULL) {
			if (r != IDEM_OK)
				fail_msg("'%s' refused: %s", cases[i].url, err.msg);
			idem_registry_free(reg);
			continue;
		}
		assert_int_equal(r, IDEM_ERR_CONFIG);
		assert_null(reg);
		assert_string_equal(err.msg, cases[i].msg);
	}
	opts.url = "http://h";
	opts.timeout_ms = 0;
	{
		idem_registry *reg = NULL;
		idem_error err;

		assert_int_equal(idem_registry_new(&opts, &reg, &err), IDEM_ERR_INVALID);
		assert_null(reg);
	}
	idem_registry_free(NULL);
}

static void test_quote(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "", ", empty answer" },
		{ "<html>", ", answer '<html>'" },
		{ "a\r\nb\tc\x1b[0m", ", answer 'a\\x0d\\x0ab\\x09c\\x1b[0m'" },
		{ "it's \\ \xc3\xa9", ", answer 'it\\'s \\\\ \\xc3\\xa9'" },
		{ "0123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789X",
		  ", answer '0123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789'..." },
	};
	char out[400];

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		idem__registry_quote(cases[i].in, strlen(cases[i].in), out, sizeof(out));
		assert_string_equal(out, cases[i].out);
	}
	/* A NUL in the answer is a byte like any other; a short buffer is cut, not overrun. */
	idem__registry_quote("a\0b", 3, out, sizeof(out));
	assert_string_equal(out, ", answer 'a\\x00b'");
	idem__registry_quote("abcdef", 6, out, 16);
	assert_string_equal(out, ", answer 'a'");
	idem__registry_quote("abcdef", 6, out, 5);
	assert_string_equal(out, ", an");
}

static void test_ok_cached(void **state)
{
	struct fake *f = *state;
	struct idem_registry_stats st;
	char url[64], why[256] = "untouched";
	struct obj *first = NULL;
	idem_registry *reg;
	int retry = -7;

	/* A trailing '/' in the base URL does not double in the path. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", f->port);
	reg = reg_new(url, NULL, NULL, 2000, 20, 80);
	for (int i = 0; i < 50; i++) {
		void *obj = NULL;

		assert_int_equal(idem_registry_get(reg, 7, &obj, why, sizeof(why), &retry),
		                 IDEM_REGISTRY_OK);
		assert_non_null(obj);
		if (first == NULL)
			first = obj_ref(obj);
		assert_ptr_equal(obj, first);
		obj_unref(obj);
	}
	assert_string_equal(why, "untouched");
	assert_int_equal(retry, -7);
	assert_string_equal(first->text, "{\"type\":\"string\"}");
	assert_int_equal(fake_requests(f), 1);
	assert_int_equal(atomic_load(&parse_calls), 1);
	assert_string_equal(f->path, "/schemas/ids/7");
	assert_string_equal(f->accept, "application/vnd.schemaregistry.v1+json, application/json");
	assert_string_equal(f->auth, "");

	/* schemaType AVRO and empty references are plain Avro. */
	fake_script(f, 200,
	            "{\"schema\":\"\\\"long\\\"\",\"schemaType\":\"AVRO\",\"references\":[]}\r\n");
	{
		void *obj = NULL;

		assert_int_equal(idem_registry_get(reg, 8, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
		assert_string_equal(((struct obj *)obj)->text, "\"long\"");
		obj_unref(obj);
	}
	idem_registry_stats(reg, &st);
	assert_int_equal(st.fetches, 2);
	assert_int_equal(st.failures, 0);
	assert_int_equal(st.unknown, 0);
	assert_int_equal(st.cached, 2);

	/* The cache holds its own reference: ours outlives nothing. */
	assert_int_equal(atomic_load(&first->refs), 2);
	obj_unref(first);
	idem_registry_free(reg);
}

static void test_not_found(void **state)
{
	struct fake *f = *state;
	struct idem_registry_stats st;
	char why[256], want[256];
	idem_registry *reg = reg_fake(f);
	void *obj = NULL;

	fake_script(f, 404, NOT_FOUND);
	assert_int_equal(idem_registry_get(reg, 7, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_null(obj);
	snprintf(
	        want, sizeof(want),
	        "schema id 7: registry http://127.0.0.1:%d answered 404 Not Found (error_code 40403: Schema not found)",
	        f->port);
	assert_string_equal(why, want);

	/* Kept: asked again only after the keep time. */
	why[0] = '\0';
	assert_int_equal(idem_registry_get(reg, 7, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_string_equal(why, want);
	assert_int_equal(fake_requests(f), 1);

	/* A short buffer is truncated, not overrun. */
	assert_int_equal(idem_registry_get(reg, 7, &obj, why, 10, NULL), IDEM_REGISTRY_UNKNOWN);
	assert_string_equal(why, "schema id");

	/* The other "not found" codes of the registry (subject, version) are UNKNOWN too. */
	fake_script(f, 404, "{\"error_code\":40401,\"message\":\"Subject 'x' not found.\"}");
	assert_int_equal(idem_registry_get(reg, 8, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_contains(why, "answered 404 Not Found (error_code 40401: Subject 'x' not found.)");
	fake_script(f, 404, "{\"error_code\":40402}");
	assert_int_equal(idem_registry_get(reg, 9, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);

	idem_registry_stats(reg, &st);
	assert_int_equal(st.fetches, 3);
	assert_int_equal(st.unknown, 3);
	assert_int_equal(st.failures, 0);
	assert_int_equal(st.cached, 0);
	idem_registry_free(reg);
}

/*
 * Only the registry's own "not found" is UNKNOWN (the message would be quarantined); any other
 * 404, or any answer that is not the registry's JSON, is UNAVAILABLE (asked again later), and
 * its reason shows the URL, the status and the answer's first bytes, escaped.
 */
static void test_not_the_registry(void **state)
{
	static const struct {
		int status;
		const char *body;
		const char *why; /* after "schema id N: registry http://127.0.0.1:PORT" */
	} cases[] = {
		{ 404, "<html><body><h1>404 Not Found</h1></body></html>",
		  " answered 404 Not Found, answer '<html><body><h1>404 Not Found</h1></body></html>'" },
		{ 404, "{\"message\":\"no such path\"}",
		  " answered 404 Not Found, answer '{\"message\":\"no such path\"}'" },
		{ 404, "{\"error_code\":50001,\"message\":\"Error in the backend\"}",
		  " answered 404 Not Found (error_code 50001: Error in the backend)" },
		/* Jersey's own 404 (a wrong base path) carries error_code 404, not 404xx. */
		{ 404, "{\"error_code\":404,\"message\":\"HTTP 404 Not Found\"}",
		  " answered 404 Not Found (error_code 404: HTTP 404 Not Found)" },
		{ 404, "{\"error_code\":\"40403\"}",
		  " answered 404 Not Found, answer '{\"error_code\":\"40403\"}'" },
		{ 404, "", " answered 404 Not Found, empty answer" },
		{ 404, "line\r\nforged: yes",
		  " answered 404 Not Found, answer 'line\\x0d\\x0aforged: yes'" },
		{ 200, "<html>oops</html>",
		  " answered 200 OK without the registry's JSON (an object with a \"schema\" string), answer '<html>oops</html>'" },
		{ 200, "{\"id\":1}",
		  " answered 200 OK without the registry's JSON (an object with a \"schema\" string), answer '{\"id\":1}'" },
	};
	struct fake *f = *state;
	struct idem_registry_stats st;
	idem_registry *reg = reg_fake(f);
	void *obj = NULL;
	char why[512], want[512];
	int retry = 0;

	for (int i = 0; i < (int)IDEM_ARRAY_SIZE(cases); i++) {
		fake_script(f, cases[i].status, cases[i].body);
		retry = 0;
		assert_int_equal(idem_registry_get(reg, 60 + i, &obj, why, sizeof(why), &retry),
		                 IDEM_REGISTRY_UNAVAILABLE);
		snprintf(want, sizeof(want), "schema id %d: registry http://127.0.0.1:%d%s", 60 + i,
		         f->port, cases[i].why);
		assert_string_equal(why, want);
		assert_null(strchr(why, '\n'));
		assert_true(retry > 0);
	}
	/* A long page is quoted up to 80 bytes. */
	fake_script(
	        f, 404,
	        "<!DOCTYPE html><html><head><title>Not Found</title></head><body>The requested URL was not found on this server.</body></html>");
	assert_int_equal(idem_registry_get(reg, 90, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_contains(
	        why,
	        ", answer '<!DOCTYPE html><html><head><title>Not Found</title></head><body>The requested UR'...");
	idem_registry_stats(reg, &st);
	assert_int_equal(st.unknown, 0);
	assert_int_equal(st.failures, IDEM_ARRAY_SIZE(cases) + 1);
	assert_int_equal(atomic_load(&parse_calls), 0);
	idem_registry_free(reg);
}

/* An UNKNOWN is kept 100 ms (stored at s >= t0, kept until s + 100), then asked again. */
static void test_unknown_kept_then_asked_again(void **state)
{
	struct fake *f = *state;
	enum idem_registry_answer a;
	idem_registry *reg;
	void *obj = NULL;
	char why[256];
	int64_t t0, t1, t2, t3;

	idem__registry_unknown_keep_ms = 100;
	reg = reg_fake(f);
	fake_script(f, 404, NOT_FOUND);
	assert_int_equal(timed_get(reg, 3, &obj, why, sizeof(why), NULL, &t0, &t1),
	                 IDEM_REGISTRY_UNKNOWN);
	fake_script(f, 200, SCHEMA_OK);
	a = timed_get(reg, 3, &obj, why, sizeof(why), NULL, &t2, &t3);
	if (t3 < t0 + 100)
		assert_int_equal(fake_requests(f), 1); /* inside the keep time for sure */
	if (fake_requests(f) == 1) {
		/* Kept: the same answer, no request; past the keep time, asked again. */
		assert_int_equal(a, IDEM_REGISTRY_UNKNOWN);
		sleep_ms(130);
		assert_int_equal(idem_registry_get(reg, 3, &obj, why, sizeof(why), NULL),
		                 IDEM_REGISTRY_OK);
	} else {
		/* Asked again at once: only if the keep time may have ended (a stalled machine). */
		assert_true(t3 >= t0 + 100);
		assert_int_equal(a, IDEM_REGISTRY_OK);
	}
	assert_int_equal(fake_requests(f), 2);
	obj_unref(obj);
	idem_registry_free(reg);
}

/* 500s with backoff capped at 20, 40, 80, 80 ms (idem_backoff_ms(): [cap/2, cap]), then the
 * registry recovers. Each backoff b is bounded through timed_get(); each window is waited out
 * (it ends at most retry ms after the get returned) and the next get asks again. */
static void test_unavailable_backoff(void **state)
{
	static const int cap[] = { 20, 40, 80, 80 };
	struct fake *f = *state;
	struct idem_registry_stats st;
	idem_registry *reg = reg_fake(f);
	char why[256], again[256];
	int retry = 0, prev = 0;
	int64_t t0, t1;
	void *obj = NULL;

	fake_script(f, 500, "{\"error_code\":50001,\"message\":\"Error in the backend\"}");
	for (int k = 0; k < (int)IDEM_ARRAY_SIZE(cap); k++) {
		int64_t most;

		assert_int_equal(timed_get(reg, 5, &obj, why, sizeof(why), &retry, &t0, &t1),
		                 IDEM_REGISTRY_UNAVAILABLE);
		assert_int_equal(fake_requests(f), k + 1);
		assert_contains(why, "schema id 5: registry http://127.0.0.1:");
		assert_contains(
		        why,
		        "answered 500 Internal Server Error (error_code 50001: Error in the backend)");
		/* b in [cap/2, cap], b in [retry, retry + (t1 - t0)]. */
		most = retry + (t1 - t0);
		assert_in_range(retry, 1, cap[k]);
		assert_true(most >= cap[k] / 2);
		/* Growing: from the third failure on, at least the whole first cap. */
		if (k >= 2)
			assert_true(most >= cap[0] && most >= prev / 2);
		prev = retry;
		sleep_ms(retry + 5);
	}

	/* Recovery. */
	fake_script(f, 200, SCHEMA_OK);
	assert_int_equal(idem_registry_get(reg, 5, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_OK);
	assert_int_equal(fake_requests(f), 5);
	obj_unref(obj);
	idem_registry_stats(reg, &st);
	assert_int_equal(st.fetches, 5);
	assert_int_equal(st.failures, 4);
	assert_int_equal(st.cached, 1);

	/* The other statuses that mean "not now". */
	for (int s = 0; s < 5; s++) {
		static const int status[] = { 429, 403, 503, 400, 302 };

		fake_script(f, status[s], "");
		assert_int_equal(idem_registry_get(reg, 100 + s, &obj, why, sizeof(why), &retry),
		                 IDEM_REGISTRY_UNAVAILABLE);
		snprintf(again, sizeof(again), "answered %d", status[s]);
		assert_contains(why, again);
		assert_true(retry > 0);
	}
	idem_registry_free(reg);
}

/*
 * Inside its backoff an UNAVAILABLE id is answered at once with the same reason and the wait
 * left, without a request; retry_now() (SIGHUP) ends the wait and the next get asks. The
 * backoff is 5 to 10 s, and timed_get() proves the second get came inside it; a machine stalled
 * that long proves nothing, and another id is tried (at most three).
 */
static void test_unavailable_window(void **state)
{
	struct fake *f = *state;
	struct idem_registry_stats st;
	char url[64], why[256], again[256];
	idem_registry *reg;
	void *obj = NULL;
	int retry = 0, retry2 = 0, tries = 0;
	int64_t t0, t1, t2, t3;
	int32_t id;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
	reg = reg_new(url, NULL, NULL, 2000, 10000, 10000);
	fake_script(f, 500, "{\"error_code\":50001,\"message\":\"Error in the backend\"}");
	for (id = 5;; id++) {
		enum idem_registry_answer a;
		int n = fake_requests(f);

		assert_true(tries++ < 3);
		assert_int_equal(timed_get(reg, id, &obj, why, sizeof(why), &retry, &t0, &t1),
		                 IDEM_REGISTRY_UNAVAILABLE);
		assert_int_equal(fake_requests(f), n + 1);
		assert_in_range(retry, 1, 10000);
		assert_true(retry + (t1 - t0) >= 5000);
		a = timed_get(reg, id, &obj, again, sizeof(again), &retry2, &t2, &t3);
		if (t3 >= t0 + retry)
			continue; /* the window may have ended: nothing proved */
		assert_int_equal(a, IDEM_REGISTRY_UNAVAILABLE);
		assert_string_equal(again, why);
		assert_in_range(retry2, 1, retry);
		assert_int_equal(fake_requests(f), n + 1);
		break;
	}

	/* retry_now() ends the wait of every id waiting, once. */
	assert_int_equal(idem_registry_retry_now(reg), tries);
	assert_int_equal(idem_registry_retry_now(reg), 0);
	fake_script(f, 200, SCHEMA_OK);
	{
		int n = fake_requests(f);

		assert_int_equal(idem_registry_get(reg, id, &obj, why, sizeof(why), &retry),
		                 IDEM_REGISTRY_OK);
		assert_int_equal(fake_requests(f), n + 1);
	}
	obj_unref(obj);
	idem_registry_stats(reg, &st);
	assert_int_equal(st.cached, 1);
	idem_registry_free(reg);
}

/*
 * A request of 100 ms against a registry that answers (200, a good schema) after 1,000 ms: the
 * client gives up and closes before the answer, so the registry sees its request cut short and
 * answers nothing. A request that waited ten times its timeout would have had the schema.
 */
static void test_timeout(void **state)
{
	struct fake *f = *state;
	char url[64], why[256];
	idem_registry *reg;
	void *obj = NULL;
	int retry = 0;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
	reg = reg_new(url, NULL, NULL, 100, 50, 50);
	fake_delay(f, 1000);
	assert_int_equal(idem_registry_get(reg, 4, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_null(obj);
	assert_contains(why, "schema id 4: request to http://127.0.0.1:");
	assert_contains(why, "timed out");
	assert_true(retry > 0);
	fake_wait_served(f, 1);
	assert_int_equal(fake_requests(f), 1);
	assert_int_equal(fake_cut_short(f), 1);
	assert_int_equal(fake_answered(f), 0);
	idem_registry_free(reg);
}

static void test_refused_then_back(void **state)
{
	struct fake *f = *state;
	char url[64], why[256], want[128];
	enum idem_registry_answer a;
	idem_registry *reg;
	void *obj = NULL;
	int port = free_port(), retry = 0, retry2 = 0;
	int64_t t0, t1, t2, t3;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	reg = reg_new(url, NULL, NULL, 1000, 50, 100);
	assert_int_equal(timed_get(reg, 6, &obj, why, sizeof(why), &retry, &t0, &t1),
	                 IDEM_REGISTRY_UNAVAILABLE);
	snprintf(want, sizeof(want), "schema id 6: cannot reach http://127.0.0.1:%d: ", port);
	assert_contains(why, want);
	/* idem_backoff_ms(50, ...) of attempt 1, in [25, 50] (see timed_get()) */
	assert_in_range(retry, 1, 50);
	assert_true(retry + (t1 - t0) >= 25);

	/* The registry comes back on that port: not asked while the window lasts, then asked. */
	fake_stop(f);
	fake_start(f, port);
	a = timed_get(reg, 6, &obj, why, sizeof(why), &retry2, &t2, &t3);
	if (t3 < t0 + retry)
		assert_int_equal(fake_requests(f), 0); /* inside the window for sure */
	if (fake_requests(f) == 0) {
		assert_int_equal(a, IDEM_REGISTRY_UNAVAILABLE);
		sleep_ms(retry2 + 5);
		assert_int_equal(idem_registry_get(reg, 6, &obj, why, sizeof(why), &retry),
		                 IDEM_REGISTRY_OK);
	} else {
		/* Asked at once: only if the restart may have outlasted the window. */
		assert_true(t3 >= t0 + retry);
		assert_int_equal(a, IDEM_REGISTRY_OK);
	}
	assert_int_equal(fake_requests(f), 1);
	obj_unref(obj);
	idem_registry_free(reg);
}

static void test_bad_answers(void **state)
{
	static const char *const bodies[] = {
		"<html>oops</html>",
		"{\"id\":1}",
		"{\"schema\":{\"type\":\"string\"}}",
		"[1]",
		"{\"schema\":\"x\"} trailing",
		"",
	};
	struct fake *f = *state;
	idem_registry *reg = reg_fake(f);
	void *obj = NULL;
	char why[256];
	int retry = 0;

	for (int i = 0; i < (int)IDEM_ARRAY_SIZE(bodies); i++) {
		fake_script(f, 200, bodies[i]);
		assert_int_equal(idem_registry_get(reg, 20 + i, &obj, why, sizeof(why), &retry),
		                 IDEM_REGISTRY_UNAVAILABLE);
		assert_contains(why, "answered 200 OK without the registry's JSON");
		assert_true(retry > 0);
	}

	/* The connection closes without an answer. */
	f->hang_up = true;
	assert_int_equal(idem_registry_get(reg, 40, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_contains(why, "schema id 40: request to http://127.0.0.1:");
	assert_int_equal(atomic_load(&parse_calls), 0);
	idem_registry_free(reg);
}

static void test_not_avro(void **state)
{
	struct fake *f = *state;
	idem_registry *reg = reg_fake(f);
	void *obj = NULL;
	char why[256];

	fake_script(f, 200,
	            "{\"schema\":\"syntax = \\\"proto3\\\";\",\"schemaType\":\"PROTOBUF\"}");
	assert_int_equal(idem_registry_get(reg, 9, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_string_equal(why, "schema id 9 is PROTOBUF, not AVRO");

	fake_script(
	        f, 200,
	        "{\"schema\":\"{}\",\"references\":[{\"name\":\"a.b\",\"subject\":\"s\",\"version\":1}]}");
	assert_int_equal(idem_registry_get(reg, 10, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_string_equal(
	        why, "schema id 10 uses schema references, which idemd does not support for Avro");

	fake_script(f, 200, "{\"schema\":\"bad schema\"}");
	assert_int_equal(idem_registry_get(reg, 11, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_string_equal(why, "schema id 11: not an avro schema: bad schema");
	assert_int_equal(atomic_load(&parse_calls), 1);
	assert_int_equal(fake_requests(f), 3);
	idem_registry_free(reg);
}

/*
 * A Protobuf schema's references: each fetched by subject and version with the schema (the
 * subject escaped in the path), theirs too, each name once, and handed to the parse with the
 * text; a reference the registry does not know makes the id UNKNOWN, one it cannot give now
 * UNAVAILABLE, one that is not Protobuf UNKNOWN.
 */
static void test_protobuf_references(void **state)
{
	struct fake *f = *state;
	struct idem_registry_opts opts = {
		.timeout_ms = 2000,
		.retry_initial_ms = 20,
		.retry_max_ms = 80,
		.parse = obj_parse,
		.parse_protobuf = pb_parse,
		.ref = obj_ref,
		.unref = obj_unref,
	};
	idem_registry *reg = NULL;
	idem_error err;
	void *obj = NULL;
	char url[64], why[512], want[512];
	int retry_ms = 0;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
	opts.url = url;
	assert_int_equal(idem_registry_new(&opts, &reg, &err), IDEM_OK);

	fake_route(f, "/schemas/ids/20", 200,
	           "{\"schema\":\"main\",\"schemaType\":\"PROTOBUF\",\"references\":["
	           "{\"name\":\"a.proto\",\"subject\":\"a\",\"version\":1},"
	           "{\"name\":\"b/c.proto\",\"subject\":\"b/c\",\"version\":2}]}");
	fake_route(f, "/subjects/a/versions/1", 200,
	           "{\"subject\":\"a\",\"version\":1,\"id\":3,\"schemaType\":\"PROTOBUF\","
	           "\"schema\":\"A\",\"references\":["
	           "{\"name\":\"b/c.proto\",\"subject\":\"b/c\",\"version\":2}]}");
	fake_route(f, "/subjects/b%2Fc/versions/2", 200,
	           "{\"subject\":\"b/c\",\"version\":2,\"id\":4,\"schemaType\":\"PROTOBUF\","
	           "\"schema\":\"C\"}");
	assert_int_equal(idem_registry_get(reg, 20, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_OK);
	assert_string_equal(pb_seen, "20:main a.proto=A b/c.proto=C");
	assert_string_equal(f->paths,
	                    "/schemas/ids/20 /subjects/a/versions/1 /subjects/b%2Fc/versions/2");
	obj_unref(obj);

	/* Not known to the registry: the id cannot be read. */
	fake_script(f, 200,
	            "{\"schema\":\"m\",\"schemaType\":\"PROTOBUF\",\"references\":["
	            "{\"name\":\"x.proto\",\"subject\":\"x\",\"version\":1}]}");
	fake_route(f, "/subjects/x/versions/1", 404,
	           "{\"error_code\":40401,\"message\":\"Subject 'x' not found.\"}");
	assert_int_equal(idem_registry_get(reg, 21, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	snprintf(
	        want, sizeof(want),
	        "schema id 21: reference 'x.proto' (subject 'x' version 1): registry %s answered 404 Not Found (error_code 40401: Subject 'x' not found.)",
	        url);
	assert_string_equal(why, want);

	/* Not available now: the id waits like any outage. */
	fake_script(f, 200,
	            "{\"schema\":\"m\",\"schemaType\":\"PROTOBUF\",\"references\":["
	            "{\"name\":\"y.proto\",\"subject\":\"y\",\"version\":3}]}");
	fake_route(f, "/subjects/y/versions/3", 503,
	           "{\"error_code\":50003,\"message\":\"Error in the backend\"}");
	assert_int_equal(idem_registry_get(reg, 22, &obj, why, sizeof(why), &retry_ms),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_contains(why,
	                "schema id 22: reference 'y.proto' (subject 'y' version 3): registry ");
	assert_contains(why, " answered 503 Service Unavailable (error_code 50003");
	assert_true(retry_ms > 0);

	/* A reference that is an Avro schema (no schemaType): not an import. */
	fake_script(f, 200,
	            "{\"schema\":\"m\",\"schemaType\":\"PROTOBUF\",\"references\":["
	            "{\"name\":\"z.proto\",\"subject\":\"z\",\"version\":1}]}");
	fake_route(f, "/subjects/z/versions/1", 200,
	           "{\"subject\":\"z\",\"version\":1,\"id\":9,\"schema\":\"{}\"}");
	assert_int_equal(idem_registry_get(reg, 23, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_string_equal(
	        why,
	        "schema id 23: reference 'z.proto' (subject 'z' version 1): not a Protobuf schema");
	idem_registry_free(reg);
}

static void test_too_big(void **state)
{
	struct fake *f = *state;
	char body[2100], why[256];
	idem_registry *reg;
	void *obj = NULL;
	int retry = 0;

	idem__registry_max_answer = 1024;
	reg = reg_fake(f);
	memset(body, 'x', sizeof(body));
	memcpy(body, "{\"schema\":\"", 11);
	memcpy(body + sizeof(body) - 3, "\"}", 3);
	fake_script(f, 200, body);
	assert_int_equal(idem_registry_get(reg, 12, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_contains(why, "schema id 12: answer of http://127.0.0.1:");
	assert_contains(why, "is larger than 1024 bytes");

	/* Without Content-Length, the limit is met while reading. */
	f->no_length = true;
	assert_int_equal(idem_registry_get(reg, 13, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_contains(why, "is larger than 1024 bytes");

	/* A large error page is an error page. */
	fake_script(f, 503, body);
	assert_int_equal(idem_registry_get(reg, 14, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_contains(why, "answered 503 Service Unavailable");

	/* Under the limit, without Content-Length. */
	fake_script(f, 200, SCHEMA_OK);
	assert_int_equal(idem_registry_get(reg, 15, &obj, why, sizeof(why), NULL),
	                 IDEM_REGISTRY_OK);
	obj_unref(obj);
	assert_int_equal(atomic_load(&parse_calls), 1);
	idem_registry_free(reg);
}

static void test_basic_auth(void **state)
{
	struct fake *f = *state;
	char url[128], why[256];
	idem_registry *reg;
	void *obj = NULL;
	int retry = 0;

	f->need_auth = ALICE_BASIC;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);

	/* Wrong password: 401 is UNAVAILABLE (credentials can be fixed) and says no password. */
	reg = reg_new(url, "alice", "wrong-pw", 2000, 20, 80);
	assert_int_equal(idem_registry_get(reg, 1, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_contains(why, "answered 401 Unauthorized");
	assert_lacks(why, "wrong-pw");
	idem_registry_free(reg);

	reg = reg_new(url, "alice", "s3cret-pw", 2000, 20, 80);
	assert_int_equal(idem_registry_get(reg, 1, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_OK);
	assert_string_equal(f->auth, ALICE_BASIC);
	obj_unref(obj);
	idem_registry_free(reg);

	/* Credentials in the URL are refused, and not shown, whichever delimiter splits them. */
	for (int i = 0; i < 4; i++) {
		static const char *const forms[] = { "alice:s3cret-pw@", "alice:s3c#ret-pw@",
			                             "alice:s3c/ret-pw@", "alice:s3c?ret-pw@" };
		struct idem_registry_opts opts = {
			.url = url,
			.timeout_ms = 2000,
			.retry_initial_ms = 20,
			.retry_max_ms = 80,
			.parse = obj_parse,
			.ref = obj_ref,
			.unref = obj_unref,
		};
		idem_error err;

		reg = NULL;
		snprintf(url, sizeof(url), "http://%s127.0.0.1:%d/", forms[i], f->port);
		assert_int_equal(idem_registry_new(&opts, &reg, &err), IDEM_ERR_CONFIG);
		assert_null(reg);
		assert_contains(err.msg, "must not contain credentials");
		assert_contains(err.msg, "'http://***@127.0.0.1:");
		assert_lacks(err.msg, "s3c");
		assert_lacks(err.msg, "alice");
	}
	assert_int_equal(fake_requests(f), 2);

	/* Nothing listening: curl's own message must not carry them either. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", free_port());
	reg = reg_new(url, "alice", "s3cret-pw", 2000, 20, 80);
	assert_int_equal(idem_registry_get(reg, 1, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_contains(why, "cannot reach http://127.0.0.1:");
	assert_lacks(why, "s3cret");
	idem_registry_free(reg);
}

static void test_eviction(void **state)
{
	struct fake *f = *state;
	struct idem_registry_stats st;
	idem_registry *reg;
	void *obj = NULL;

	idem__registry_max_schemas = 4;
	reg = reg_fake(f);
	for (int id = 1; id <= 4; id++) {
		assert_int_equal(idem_registry_get(reg, id, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
		obj_unref(obj);
	}
	/* Touch 1: 2 is now the least recently used. */
	assert_int_equal(idem_registry_get(reg, 1, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
	obj_unref(obj);
	assert_int_equal(idem_registry_get(reg, 5, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
	obj_unref(obj);
	assert_int_equal(fake_requests(f), 5);
	idem_registry_stats(reg, &st);
	assert_int_equal(st.cached, 4);
	assert_int_equal(atomic_load(&live_objs), 4); /* 2's object went with its entry */

	assert_int_equal(idem_registry_get(reg, 1, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
	obj_unref(obj);
	assert_int_equal(fake_requests(f), 5);
	assert_int_equal(idem_registry_get(reg, 2, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
	assert_int_equal(fake_requests(f), 6);

	/* A reference held by the caller survives the eviction of its entry. */
	for (int id = 10; id < 14; id++) {
		void *other = NULL;

		assert_int_equal(idem_registry_get(reg, id, &other, NULL, 0, NULL),
		                 IDEM_REGISTRY_OK);
		obj_unref(other);
	}
	assert_int_equal(atomic_load(&((struct obj *)obj)->refs), 1);
	obj_unref(obj);

	/* Ids that do not resolve do not push schemas out. */
	fake_script(f, 404, NOT_FOUND);
	for (int id = 20; id < 30; id++)
		assert_int_equal(idem_registry_get(reg, id, &obj, NULL, 0, NULL),
		                 IDEM_REGISTRY_UNKNOWN);
	idem_registry_stats(reg, &st);
	assert_int_equal(st.cached, 4);
	idem_registry_free(reg);
}

/* The real limit, against the local server. */
static void test_eviction_default_limit(void **state)
{
	struct fake *f = *state;
	struct idem_registry_stats st;
	idem_registry *reg = reg_fake(f);
	void *obj = NULL;

	for (int id = 0; id <= IDEM_REGISTRY_MAX_SCHEMAS; id++) {
		assert_int_equal(idem_registry_get(reg, id, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
		obj_unref(obj);
	}
	idem_registry_stats(reg, &st);
	assert_int_equal(st.cached, IDEM_REGISTRY_MAX_SCHEMAS);
	assert_int_equal(st.fetches, IDEM_REGISTRY_MAX_SCHEMAS + 1);
	assert_int_equal(atomic_load(&live_objs), IDEM_REGISTRY_MAX_SCHEMAS);
	/* Id 0 went first; the last one is still there. */
	assert_int_equal(idem_registry_get(reg, IDEM_REGISTRY_MAX_SCHEMAS, &obj, NULL, 0, NULL),
	                 IDEM_REGISTRY_OK);
	obj_unref(obj);
	assert_int_equal(fake_requests(f), IDEM_REGISTRY_MAX_SCHEMAS + 1);
	assert_int_equal(idem_registry_get(reg, 0, &obj, NULL, 0, NULL), IDEM_REGISTRY_OK);
	obj_unref(obj);
	assert_int_equal(fake_requests(f), IDEM_REGISTRY_MAX_SCHEMAS + 2);
	idem_registry_free(reg);
}

#define FLIGHT_THREADS 8

struct flight {
	idem_registry *reg;
	pthread_barrier_t *start;
	int32_t id;
	enum idem_registry_answer answer;
	void *obj;
	char why[256];
	int retry;
};

static void *flight_main(void *arg)
{
	struct flight *fl = arg;

	pthread_barrier_wait(fl->start);
	fl->answer =
	        idem_registry_get(fl->reg, fl->id, &fl->obj, fl->why, sizeof(fl->why), &fl->retry);
	return NULL;
}

static void run_flight(idem_registry *reg, int32_t id, struct flight *fl)
{
	pthread_t thr[FLIGHT_THREADS];
	pthread_barrier_t start;

	assert_int_equal(pthread_barrier_init(&start, NULL, FLIGHT_THREADS), 0);
	for (int i = 0; i < FLIGHT_THREADS; i++) {
		fl[i] = (struct flight){ .reg = reg, .start = &start, .id = id };
		assert_int_equal(pthread_create(&thr[i], NULL, flight_main, &fl[i]), 0);
	}
	for (int i = 0; i < FLIGHT_THREADS; i++)
		pthread_join(thr[i], NULL);
	pthread_barrier_destroy(&start);
}

static void test_single_flight(void **state)
{
	struct fake *f = *state;
	struct flight fl[FLIGHT_THREADS];
	struct idem_registry_stats st;
	char url[64];
	idem_registry *reg;

	/* A thread that comes after the fetch gets the stored answer: the failure's backoff (5 to
	 * 10 s) outlasts any thread's lateness, so none asks again. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
	reg = reg_new(url, NULL, NULL, 2000, 10000, 10000);
	f->delay_ms = 200;
	run_flight(reg, 42, fl);
	assert_int_equal(fake_requests(f), 1);
	assert_int_equal(atomic_load(&parse_calls), 1);
	for (int i = 0; i < FLIGHT_THREADS; i++) {
		assert_int_equal(fl[i].answer, IDEM_REGISTRY_OK);
		assert_ptr_equal(fl[i].obj, fl[0].obj);
	}
	assert_int_equal(atomic_load(&((struct obj *)fl[0].obj)->refs), FLIGHT_THREADS + 1);
	for (int i = 0; i < FLIGHT_THREADS; i++)
		obj_unref(fl[i].obj);

	/* A failure is shared the same way. */
	fake_script(f, 503, "");
	run_flight(reg, 43, fl);
	assert_int_equal(fake_requests(f), 2);
	for (int i = 0; i < FLIGHT_THREADS; i++) {
		assert_int_equal(fl[i].answer, IDEM_REGISTRY_UNAVAILABLE);
		assert_string_equal(fl[i].why, fl[0].why);
		assert_true(fl[i].retry > 0);
	}
	idem_registry_stats(reg, &st);
	assert_int_equal(st.fetches, 2);
	assert_int_equal(st.failures, 1);
	idem_registry_free(reg);
}

/* --- peek: fetches on the fetcher threads --- */

struct notified {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int n;
};

static void on_notify(void *ctx)
{
	struct notified *nt = ctx;

	pthread_mutex_lock(&nt->mu);
	nt->n++;
	pthread_cond_broadcast(&nt->cv);
	pthread_mutex_unlock(&nt->mu);
}

static void notified_init(struct notified *nt)
{
	nt->n = 0;
	assert_int_equal(pthread_mutex_init(&nt->mu, NULL), 0);
	assert_int_equal(idem_cond_init(&nt->cv), 0);
}

static void notified_done(struct notified *nt)
{
	pthread_cond_destroy(&nt->cv);
	pthread_mutex_destroy(&nt->mu);
}

static int notified_count(struct notified *nt)
{
	int n;

	pthread_mutex_lock(&nt->mu);
	n = nt->n;
	pthread_mutex_unlock(&nt->mu);
	return n;
}

/* Wait (at most 20 s: a bound for a broken build, not a timing) for @n notifications. */
static void notified_wait(struct notified *nt, int n)
{
	struct timespec deadline = idem_cond_deadline(20000);
	int rc = 0;

	pthread_mutex_lock(&nt->mu);
	while (nt->n < n && rc == 0)
		rc = pthread_cond_timedwait(&nt->cv, &nt->mu, &deadline);
	pthread_mutex_unlock(&nt->mu);
	if (rc != 0)
		fail_msg("no notification after 20 s");
}

static idem_registry *reg_notify(const struct fake *f, struct notified *nt, int timeout_ms,
                                 int initial_ms)
{
	struct idem_registry_opts opts = {
		.timeout_ms = timeout_ms,
		.retry_initial_ms = initial_ms,
		.retry_max_ms = initial_ms * 4,
		.parse = obj_parse,
		.ref = obj_ref,
		.unref = obj_unref,
		.notify = on_notify,
		.notify_ctx = nt,
	};
	idem_registry *reg = NULL;
	idem_error err;
	char url[64];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
	opts.url = url;
	if (idem_registry_new(&opts, &reg, &err) != IDEM_OK)
		fail_msg("idem_registry_new: %s", err.msg);
	return reg;
}

struct getter {
	idem_registry *reg;
	int32_t id;
	enum idem_registry_answer answer;
	void *obj;
};

static void *getter_main(void *arg)
{
	struct getter *g = arg;

	g->answer = idem_registry_get(g->reg, g->id, &g->obj, NULL, 0, NULL);
	return NULL;
}

static void test_peek(void **state)
{
	struct fake *f = *state;
	struct idem_registry_stats st;
	struct notified nt;
	struct getter g = { 0 };
	char why[256] = "", want[128];
	idem_registry *reg;
	pthread_t thr;
	void *obj = NULL;
	int retry = 0;

	notified_init(&nt);
	/* Backoff 5 to 10 s: the failure below is still in its window when peeked after the
	 * notification, however late this thread wakes. */
	reg = reg_notify(f, &nt, 5000, 10000);
	fake_delay(f, 2000);
	assert_int_equal(idem_registry_peek(reg, 7, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_PENDING);
	/* Returned before the registry began to answer (counted before its first byte), let
	 * alone before the fetch ended: the fetch runs elsewhere. */
	assert_int_equal(fake_answered(f), 0);
	assert_int_equal(notified_count(&nt), 0);
	assert_null(obj);
	snprintf(want, sizeof(want), "schema id 7: asking http://127.0.0.1:%d", f->port);
	assert_string_equal(why, want);
	assert_int_equal(retry, 5000);

	/* While it runs: peek answers PENDING again, a blocking get() waits for the same fetch. */
	assert_int_equal(idem_registry_peek(reg, 7, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_PENDING);
	g.reg = reg;
	g.id = 7;
	assert_int_equal(pthread_create(&thr, NULL, getter_main, &g), 0);

	notified_wait(&nt, 1);
	pthread_join(thr, NULL);
	assert_int_equal(g.answer, IDEM_REGISTRY_OK);
	assert_int_equal(idem_registry_peek(reg, 7, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_OK);
	assert_ptr_equal(obj, g.obj);
	assert_string_equal(((struct obj *)obj)->text, "{\"type\":\"string\"}");
	obj_unref(obj);
	obj_unref(g.obj);
	/* One request, one parse (on the fetcher), one notification. */
	assert_int_equal(fake_requests(f), 1);
	assert_int_equal(atomic_load(&parse_calls), 1);
	assert_int_equal(notified_count(&nt), 1);
	idem_registry_stats(reg, &st);
	assert_int_equal(st.fetches, 1);
	assert_int_equal(st.cached, 1);

	/* A failure ends the same way: notified, then answered from the entry. */
	fake_delay(f, 0);
	fake_script(f, 503, "");
	assert_int_equal(idem_registry_peek(reg, 8, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_PENDING);
	notified_wait(&nt, 2);
	assert_int_equal(idem_registry_peek(reg, 8, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_contains(why, "answered 503 Service Unavailable");
	assert_in_range(retry, 1, 10000);
	idem_registry_free(reg);
	assert_int_equal(notified_count(&nt), 2);
	notified_done(&nt);
}

/* An answer within its keep time or backoff is given at once, with no request. */
static void test_peek_cached(void **state)
{
	struct fake *f = *state;
	struct notified nt;
	char why[256], first[256];
	idem_registry *reg;
	void *obj = NULL;
	int retry = 0;

	notified_init(&nt);
	reg = reg_notify(f, &nt, 2000, 60000);
	fake_script(f, 404, NOT_FOUND);
	assert_int_equal(idem_registry_get(reg, 3, &obj, first, sizeof(first), NULL),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_int_equal(idem_registry_peek(reg, 3, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNKNOWN);
	assert_string_equal(why, first);

	fake_script(f, 500, "");
	assert_int_equal(idem_registry_get(reg, 4, &obj, first, sizeof(first), NULL),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_int_equal(idem_registry_peek(reg, 4, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_UNAVAILABLE);
	assert_string_equal(why, first);
	assert_in_range(retry, 1, 60000);
	assert_int_equal(fake_requests(f), 2);
	assert_int_equal(notified_count(&nt), 0); /* get() fetches notify nobody */

	/* Backoff over (SIGHUP's retry_now()): peek fetches again, in the background. */
	fake_script(f, 200, SCHEMA_OK);
	assert_int_equal(idem_registry_retry_now(reg), 1);
	assert_int_equal(idem_registry_peek(reg, 4, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_PENDING);
	notified_wait(&nt, 1);
	assert_int_equal(idem_registry_peek(reg, 4, &obj, why, sizeof(why), &retry),
	                 IDEM_REGISTRY_OK);
	obj_unref(obj);
	assert_int_equal(fake_requests(f), 3);

	/* A peek() that finds a get()'s fetch under way is notified when that fetch ends. */
	{
		struct getter g = { .reg = reg, .id = 5 };
		pthread_t thr;
		int64_t t0 = idem_mono_ms();

		fake_delay(f, 1000);
		assert_int_equal(pthread_create(&thr, NULL, getter_main, &g), 0);
		while (fake_requests(f) == 3 && idem_mono_ms() - t0 < 20000)
			sleep_ms(5);
		assert_int_equal(idem_registry_peek(reg, 5, &obj, why, sizeof(why), &retry),
		                 IDEM_REGISTRY_PENDING);
		notified_wait(&nt, 2);
		pthread_join(thr, NULL);
		assert_int_equal(g.answer, IDEM_REGISTRY_OK);
		obj_unref(g.obj);
		assert_int_equal(fake_requests(f), 4);
	}
	idem_registry_free(reg);
	notified_done(&nt);
}

/*
 * free() while the registry hangs (30 s, more than anything here waits): the transfers are
 * aborted, the threads joined, the queued ids dropped. The registry sees the request cut short
 * and never answers: a free() that waited for the request would have found its answer begun.
 */
static void test_free_while_hanging(void **state)
{
	struct fake *f = *state;
	struct notified nt;
	idem_registry *reg;
	void *obj = NULL;
	int64_t t0;

	notified_init(&nt);
	reg = reg_notify(f, &nt, 60000, 20);
	fake_delay(f, 30000);
	for (int32_t id = 1; id <= 4; id++)
		assert_int_equal(idem_registry_peek(reg, id, &obj, NULL, 0, NULL),
		                 IDEM_REGISTRY_PENDING);
	/* Wait until a request is with the server (bounded: a broken build fails, not hangs). */
	t0 = idem_mono_ms();
	while (fake_requests(f) == 0 && idem_mono_ms() - t0 < 20000)
		sleep_ms(5);
	assert_int_equal(fake_requests(f), 1);
	idem_registry_free(reg);
	assert_int_equal(fake_answered(f), 0);
	/* The other fetcher's request, waiting behind the first one, may be read after free()
	 * closed it: cut short as well. */
	fake_wait_served(f, 1);
	assert_true(fake_cut_short(f) >= 1);
	assert_int_equal(fake_answered(f), 0);
	assert_int_equal(notified_count(&nt), 0); /* not after free() began */
	assert_int_equal(atomic_load(&parse_calls), 0);
	notified_done(&nt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quote),
		cmocka_unit_test(test_url_check),
		cmocka_unit_test_setup_teardown(test_ok_cached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_the_registry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_kept_then_asked_again, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_unavailable_backoff, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unavailable_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_then_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_avro, setup, teardown),
		cmocka_unit_test_setup_teardown(test_protobuf_references, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_big, setup, teardown),
		cmocka_unit_test_setup_teardown(test_basic_auth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction_default_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_single_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peek, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peek_cached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_while_hanging, setup, teardown),
	};
	idem_error err;

	/* The fake registry is local: a proxy from the environment must not be asked. */
	unsetenv("http_proxy");
	unsetenv("HTTP_PROXY");
	unsetenv("https_proxy");
	unsetenv("HTTPS_PROXY");
	unsetenv("all_proxy");
	unsetenv("ALL_PROXY");
	if (idem_registry_global_init(&err) != IDEM_OK) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
