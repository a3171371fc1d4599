/*
 * idem_common.c - error detail, byte buffers, UTF-8 validation, secrets.
 */
/* explicit_bzero() (glibc >= 2.25) is outside POSIX. */
#define _DEFAULT_SOURCE

#include "idem_common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "idem_limits.h"

idem_status idem_error_set(idem_error *err, idem_status code, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return code;
	err->code = code;
	err->sqlstate[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

idem_status idem_error_nomem(idem_error *err)
{
	return idem_error_set(err, IDEM_ERR_NOMEM, "%s", idem_status_str(IDEM_ERR_NOMEM));
}

int64_t idem_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t idem_mono_ms(void)
{
	return idem_mono_us() / 1000;
}

int idem_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	int e;

	if ((e = pthread_condattr_init(&a)) != 0)
		return e;
	if ((e = pthread_condattr_setclock(&a, CLOCK_MONOTONIC)) == 0)
		e = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return e;
}

int idem_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	int e;

	if ((e = pthread_attr_init(&a)) != 0)
		return e;
	if ((e = pthread_attr_setstacksize(&a, IDEM_THREAD_STACK_BYTES)) == 0)
		e = pthread_create(thread, &a, fn, arg);
	pthread_attr_destroy(&a);
	return e;
}

struct timespec idem_cond_deadline(int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

int64_t idem_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int idem_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int idem_backoff_ms(int initial_ms, int max_ms, int attempt, unsigned int *seed)
{
	int64_t cap = initial_ms;

	for (int i = 1; i < attempt && cap < max_ms; i++)
		cap *= 2;
	if (cap > max_ms)
		cap = max_ms;
	return (int)(cap / 2 + rand_r(seed) % (unsigned int)(cap / 2 + 1));
}

const char *idem_status_str(idem_status s)
{
	switch (s) {
	case IDEM_OK:
		return "success";
	case IDEM_ERR_NOMEM:
		return "out of memory";
	case IDEM_ERR_INVALID:
		return "invalid argument";
	case IDEM_ERR_IO:
		return "I/O error";
	case IDEM_ERR_CONFIG:
		return "configuration error";
	case IDEM_ERR_KEY:
		return "cannot extract field";
	case IDEM_ERR_PG:
		return "postgres error";
	case IDEM_ERR_KAFKA:
		return "kafka error";
	case IDEM_ERR_NOT_FOUND:
		return "not found";
	case IDEM_ERR_BEHIND:
		return "database behind";
	case IDEM_ERR_UNAVAILABLE:
		return "unavailable, try again";
	}
	return "unknown error";
}

/*
 * Secrets taken out of the environment (idem_secret_get()): a Postgres password is read again
 * for every connection, long after the variable is gone. This is process state, like the
 * environment it replaces, hence the one global of the library besides the log settings.
 */
struct secret_kept {
	char *name;
	char *value;
};
static pthread_mutex_t secret_mu = PTHREAD_MUTEX_INITIALIZER;
static struct secret_kept *secret_kept;
static size_t secret_n;

static idem_status secret_copy(const char *key, const char *what, const char *v, char *buf,
                               size_t len, idem_error *err)
{
	size_t n = strlen(v);

	if (n == 0)
		return idem_error_set(err, IDEM_ERR_CONFIG, "%s: %s is empty", key, what);
	if (n >= len)
		return idem_error_set(
		        err, IDEM_ERR_CONFIG,
		        "%s: %s holds a secret longer than %zu bytes; refused rather than cut short",
		        key, what, len - 1);
	memcpy(buf, v, n + 1);
	return IDEM_OK;
}

static idem_status secret_env(const char *key, const char *env, char *buf, size_t len,
                              idem_error *err)
{
	char what[320];
	struct secret_kept *kept;
	idem_status r;
	char *v, *entry;

	snprintf(what, sizeof(what), "environment variable '%s'", env);
	pthread_mutex_lock(&secret_mu);
	for (size_t i = 0; i < secret_n; i++) {
		if (strcmp(secret_kept[i].name, env) == 0) {
			r = secret_copy(key, what, secret_kept[i].value, buf, len, err);
			goto out_unlock;
		}
	}
	v = getenv(env);
	if (v == NULL) {
		r = idem_error_set(err, IDEM_ERR_CONFIG, "%s: %s is not set", key, what);
		goto out_unlock;
	}
	if ((r = secret_copy(key, what, v, buf, len, err)) != IDEM_OK)
		goto out_unlock;
	kept = realloc(secret_kept, (secret_n + 1) * sizeof(*kept));
	if (kept == NULL) {
		r = idem_error_nomem(err);
		goto out_wipe;
	}
	secret_kept = kept;
	kept[secret_n].name = strdup(env);
	kept[secret_n].value = strdup(v);
	if (kept[secret_n].name == NULL || kept[secret_n].value == NULL) {
		free(kept[secret_n].name);
		if (kept[secret_n].value != NULL)
			idem_secret_wipe(kept[secret_n].value, strlen(v));
		free(kept[secret_n].value);
		r = idem_error_nomem(err);
		goto out_wipe;
	}
	secret_n++;
	/* /proc/PID/environ shows the initial environment's text, whatever environ points to:
	 * overwrite "NAME=value" itself once unsetenv() dropped the pointer to it (glibc never
	 * frees these strings). */
	entry = v - strlen(env) - 1;
	unsetenv(env);
	idem_secret_wipe(entry, strlen(entry));
	r = IDEM_OK;
	goto out_unlock;
out_wipe:
	idem_secret_wipe(buf, len);
out_unlock:
	pthread_mutex_unlock(&secret_mu);
	return r;
}

/* Reads the first line of the open file @fd into @buf: up to @len - 1 bytes, never cut short. */
static idem_status secret_fd(const char *key, const char *path, int fd, char *buf, size_t len,
                             idem_error *err)
{
	size_t n = 0, line;
	ssize_t k;
	char c;

	while (n < len - 1) {
		k = read(fd, buf + n, len - 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return idem_error_set(err, IDEM_ERR_CONFIG, "%s: cannot read '%s': %s", key,
			                      path, strerror(errno));
		if (k == 0)
			break;
		n += (size_t)k;
	}
	for (line = 0; line < n && buf[line] != '\n' && buf[line] != '\r'; line++)
		;
	if (line == len - 1) {
		/* The buffer is full without an end of line: one more byte tells whether the
		 * secret ends here or goes on. */
		do
			k = read(fd, &c, 1);
		while (k < 0 && errno == EINTR);
		if (k > 0 && c != '\n' && c != '\r')
			return idem_error_set(
			        err, IDEM_ERR_CONFIG,
			        "%s: '%s' holds a secret longer than %zu bytes; refused rather than cut short",
			        key, path, len - 1);
	}
	buf[line] = '\0';
	if (n == 0)
		return idem_error_set(err, IDEM_ERR_CONFIG, "%s: '%s' is empty", key, path);
	if (line == 0)
		return idem_error_set(
		        err, IDEM_ERR_CONFIG,
		        "%s: '%s' starts with an empty line (the secret is the file's first line)",
		        key, path);
	if (memchr(buf, '\0', line) != NULL)
		return idem_error_set(err, IDEM_ERR_CONFIG, "%s: '%s' holds a NUL byte", key, path);
	return IDEM_OK;
}

static idem_status secret_file(const char *key, const char *file, char *buf, size_t len,
                               idem_error *err)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	bool credential = file[0] != '/' && dir != NULL && dir[0] != '\0';
	char path[PATH_MAX];
	struct stat st;
	idem_status r;
	int fd, n;

	n = snprintf(path, sizeof(path), "%s%s%s", credential ? dir : "", credential ? "/" : "",
	             file);
	if (n < 0 || (size_t)n >= sizeof(path))
		return idem_error_set(err, IDEM_ERR_CONFIG, "%s: path of '%s' is too long", key,
		                      file);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;

		return idem_error_set(
		        err, IDEM_ERR_CONFIG, "%s: cannot open '%s': %s%s", key, path, strerror(e),
		        file[0] != '/' && !credential
		                ? " (a relative path names a file of $CREDENTIALS_DIRECTORY, which is not set: see LoadCredential= in idemd.yaml(5), SECRETS)"
		        : e == EACCES && !credential
		                ? " (with DynamicUser=, pass the file with LoadCredential= instead: idemd.yaml(5), SECRETS)"
		                : "");
	}
	if (fstat(fd, &st) != 0) {
		r = idem_error_set(err, IDEM_ERR_CONFIG, "%s: cannot read '%s': %s", key, path,
		                   strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		r = idem_error_set(err, IDEM_ERR_CONFIG, "%s: '%s' is not a regular file", key,
		                   path);
		goto out_close;
	}
	/* $CREDENTIALS_DIRECTORY is the service's own (systemd makes it and its files readable
	 * by the service's user only); anywhere else a secret readable by others is no secret. */
	if (!credential && (st.st_mode & 077) != 0) {
		r = idem_error_set(
		        err, IDEM_ERR_CONFIG,
		        "%s: '%s' is open to group or others (mode %04o), refused; make it readable by its owner only (chmod 600 '%s'), or under systemd with DynamicUser= keep it root's and pass it with LoadCredential= (idemd.yaml(5), SECRETS)",
		        key, path, (unsigned)(st.st_mode & 07777), path);
		goto out_close;
	}
	r = secret_fd(key, path, fd, buf, len, err);
out_close:
	close(fd);
	if (r != IDEM_OK)
		idem_secret_wipe(buf, len);
	return r;
}

idem_status idem_secret_get(const char *key, const char *env, const char *file, char *buf,
                            size_t len, bool *ret_set, idem_error *err)
{
	idem_status r = IDEM_OK;

	if (len < 2)
		return idem_error_set(err, IDEM_ERR_INVALID, "%s: no room for a secret", key);
	if (env != NULL)
		r = secret_env(key, env, buf, len, err);
	else if (file != NULL)
		r = secret_file(key, file, buf, len, err);
	if (r == IDEM_OK)
		*ret_set = env != NULL || file != NULL;
	return r;
}

idem_status idem_secret_read(const char *section, const char *env, const char *file, char *buf,
                             size_t len, bool *ret_set, idem_error *err)
{
	char key[128];

	snprintf(key, sizeof(key), "%s.password_%s", section, env != NULL ? "env" : "file");
	return idem_secret_get(key, env, file, buf, len, ret_set, err);
}

void idem_civil_from_days(int64_t days, int64_t *ret_year, int *ret_month, int *ret_day)
{
	int64_t z = days + 719468, era, yoe, doe, doy, mp;

	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*ret_day = (int)(doy - (153 * mp + 2) / 5 + 1);
	*ret_month = (int)(mp < 10 ? mp + 3 : mp - 9);
	*ret_year = yoe + era * 400 + (*ret_month <= 2);
}

void idem_secret_wipe(void *p, size_t n)
{
	if (n > 0)
		explicit_bzero(p, n);
}

void idem_buf_init(struct idem_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void idem_buf_done(struct idem_buf *b)
{
	if (b == NULL)
		return;
	free(b->data);
	idem_buf_init(b);
}

void idem_buf_reset(struct idem_buf *b)
{
	b->len = 0;
	if (b->data != NULL)
		b->data[0] = '\0';
}

idem_status idem_buf_reserve(struct idem_buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	/* One spare byte always holds the terminating NUL. */
	if (extra > SIZE_MAX - b->len - 1)
		return IDEM_ERR_NOMEM;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return IDEM_OK;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (p == NULL)
		return IDEM_ERR_NOMEM;
	b->data = p;
	b->cap = cap;
	return IDEM_OK;
}

idem_status idem_buf_append(struct idem_buf *b, const void *p, size_t n)
{
	if (idem_buf_reserve(b, n) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (n > 0)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return IDEM_OK;
}

idem_status idem_buf_append_str(struct idem_buf *b, const char *s)
{
	return idem_buf_append(b, s, strlen(s));
}

idem_status idem_buf_printf(struct idem_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return IDEM_ERR_INVALID;
	if (idem_buf_reserve(b, (size_t)n) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return IDEM_OK;
}

idem_status idem_pgarray_open(struct idem_buf *a)
{
	idem_buf_reset(a);
	return idem_buf_append(a, "{", 1);
}

idem_status idem_pgarray_add(struct idem_buf *a, const char *s, size_t n, bool null)
{
	if (a->len > 1 && idem_buf_append(a, ",", 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (null)
		return idem_buf_append(a, "NULL", 4);
	if (idem_buf_reserve(a, 2 * n + 2) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	a->data[a->len++] = '"';
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			a->data[a->len++] = '\\';
		a->data[a->len++] = s[i];
	}
	a->data[a->len++] = '"';
	a->data[a->len] = '\0';
	return IDEM_OK;
}

idem_status idem_pgarray_close(struct idem_buf *a)
{
	return idem_buf_append(a, "}", 1);
}

/*
 * The binary array's header: number of dimensions (1), whether it has NULLs, element type, and
 * for its one dimension the element count and lower bound (1). The count is kept in host
 * order while elements are added and written in network order by idem_pgbin_close().
 */
#define PGBIN_HEADER 20
#define PGBIN_FLAGS  4
#define PGBIN_COUNT  12

static void put_be32(char *p, uint32_t v)
{
	p[0] = (char)(v >> 24);
	p[1] = (char)(v >> 16);
	p[2] = (char)(v >> 8);
	p[3] = (char)v;
}

idem_status idem_pgbin_open(struct idem_buf *a, uint32_t elem_oid)
{
	uint32_t zero = 0;

	idem_buf_reset(a);
	if (idem_buf_reserve(a, PGBIN_HEADER) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	put_be32(a->data, 1);
	put_be32(a->data + PGBIN_FLAGS, 0);
	put_be32(a->data + 8, elem_oid);
	memcpy(a->data + PGBIN_COUNT, &zero, sizeof(zero));
	put_be32(a->data + 16, 1);
	a->len = PGBIN_HEADER;
	return IDEM_OK;
}

/* Room for an element of @n bytes after its length word, counted; where its bytes go. */
static char *pgbin_elem(struct idem_buf *a, size_t n, bool null)
{
	uint32_t count;
	char *p;

	if (n > INT32_MAX || idem_buf_reserve(a, 4 + n) != IDEM_OK)
		return NULL;
	memcpy(&count, a->data + PGBIN_COUNT, sizeof(count));
	count++;
	memcpy(a->data + PGBIN_COUNT, &count, sizeof(count));
	p = a->data + a->len;
	put_be32(p, null ? UINT32_MAX : (uint32_t)n); /* -1: NULL */
	if (null)
		put_be32(a->data + PGBIN_FLAGS, 1);
	a->len += 4 + n;
	return p + 4;
}

idem_status idem_pgbin_add(struct idem_buf *a, const void *p, size_t n, bool null)
{
	char *e = pgbin_elem(a, null ? 0 : n, null);

	if (e == NULL)
		return IDEM_ERR_NOMEM;
	if (!null && n > 0)
		memcpy(e, p, n);
	return IDEM_OK;
}

idem_status idem_pgbin_add_hex(struct idem_buf *a, const char *s, size_t n, bool null)
{
	char *e;

	if (!null && n % 2 != 0)
		return IDEM_ERR_INVALID;
	if ((e = pgbin_elem(a, null ? 0 : n / 2, null)) == NULL)
		return IDEM_ERR_NOMEM;
	for (size_t i = 0; !null && i < n; i += 2) {
		int hi = idem_hex_digit(s[i]), lo = idem_hex_digit(s[i + 1]);

		if (hi < 0 || lo < 0)
			return IDEM_ERR_INVALID;
		*e++ = (char)(hi << 4 | lo);
	}
	return IDEM_OK;
}

/* A number of @n bytes, in network order. */
static idem_status pgbin_add_be(struct idem_buf *a, uint64_t v, size_t n)
{
	char *e = pgbin_elem(a, n, false);

	if (e == NULL)
		return IDEM_ERR_NOMEM;
	for (size_t i = 0; i < n; i++)
		e[i] = (char)(v >> (8 * (n - 1 - i)));
	return IDEM_OK;
}

idem_status idem_pgbin_add_int4(struct idem_buf *a, int32_t v)
{
	return pgbin_add_be(a, (uint32_t)v, 4);
}

idem_status idem_pgbin_add_int8(struct idem_buf *a, int64_t v)
{
	return pgbin_add_be(a, (uint64_t)v, 8);
}

static uint32_t get_be32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;

	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

bool idem_pgbin_get(const char *a, size_t len, size_t k, const char **ret_p, size_t *ret_n,
                    bool *ret_null, size_t *ret_count)
{
	size_t count, pos = PGBIN_HEADER;

	if (len < 12 || get_be32(a) > 1)
		return false;
	count = get_be32(a) == 0 ? 0 : len < PGBIN_HEADER ? SIZE_MAX : get_be32(a + PGBIN_COUNT);
	if (count == SIZE_MAX)
		return false;
	if (ret_count != NULL)
		*ret_count = count;
	if (k >= count)
		return false;
	for (size_t i = 0;; i++) {
		uint32_t n;

		if (len - pos < 4)
			return false;
		n = get_be32(a + pos);
		pos += 4;
		if (n != UINT32_MAX && n > len - pos)
			return false;
		if (i == k) {
			*ret_p = a + pos;
			*ret_n = n == UINT32_MAX ? 0 : n;
			*ret_null = n == UINT32_MAX;
			return true;
		}
		if (n != UINT32_MAX)
			pos += n;
	}
}

void idem_pgbin_close(struct idem_buf *a)
{
	uint32_t count;

	memcpy(&count, a->data + PGBIN_COUNT, sizeof(count));
	if (count == 0) {
		/* An empty array has no dimensions. */
		put_be32(a->data, 0);
		a->len = 12;
		return;
	}
	put_be32(a->data + PGBIN_COUNT, count);
}

bool idem_int_parse(const char *s, int64_t min, int64_t max, int64_t *ret_v)
{
	bool neg = *s == '-';
	uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	int64_t x;

	if (neg)
		s++;
	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (limit - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (*s != '\0')
		return false;
	/* -(INT64_MAX + 1) is INT64_MIN: negated in unsigned, then converted. */
	x = neg ? (int64_t)(0 - v) : (int64_t)v;
	if (x < min || x > max)
		return false;
	*ret_v = x;
	return true;
}

bool idem_duration_parse(const char *s, int64_t *ret_seconds)
{
	int64_t v = 0, mult = 1;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (INT64_MAX - (*s - '0')) / 10)
			return false;
		v = v * 10 + (*s - '0');
	}
	switch (*s) {
	case '\0':
	case 's':
		break;
	case 'm':
		mult = 60;
		break;
	case 'h':
		mult = 3600;
		break;
	case 'd':
		mult = 86400;
		break;
	default:
		return false;
	}
	if (*s != '\0' && s[1] != '\0')
		return false;
	if (v > INT64_MAX / mult)
		return false;
	*ret_seconds = v * mult;
	return true;
}

size_t idem_utf8_seq(const uint8_t *s, size_t n)
{
	size_t len;
	uint32_t cp, min;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

bool idem_utf8_valid(const void *p, size_t n)
{
	const unsigned char *s = p;
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];
		size_t need;
		uint32_t cp;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0) {
			need = 1;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			need = 2;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			need = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i - 1 < need)
			return false;
		for (size_t k = 1; k <= need; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		/* Reject overlong forms, surrogates and values past U+10FFFF. */
		if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
		    (need == 3 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += need + 1;
	}
	return true;
}

/* Postgres bytea hex: \x0a1b. */
idem_status idem_buf_append_bytea(struct idem_buf *out, const uint8_t *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	char *d;

	if (n > (SIZE_MAX - 2) / 2 || idem_buf_reserve(out, 2 + 2 * n) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	d = out->data + out->len;
	*d++ = '\\';
	*d++ = 'x';
	for (size_t i = 0; i < n; i++) {
		*d++ = hex[p[i] >> 4];
		*d++ = hex[p[i] & 15];
	}
	out->len += 2 + 2 * n;
	out->data[out->len] = '\0';
	return IDEM_OK;
}

/*
 * The shortest text that reads back to the same float (@is_float) or double: %g with more
 * digits until strtof()/strtod() gives the value back. -0.0 is "-0"; NaN and the infinities
 * are words, quoted in JSON (@json). From 6 (float) or 15 (double) digits: a normal number
 * that a shorter text gives back prints as that text there, its trailing zeros dropped; a
 * subnormal one has fewer digits of its own (1e-45, 5e-324), so the search starts at 1.
 */
idem_status idem_buf_append_real(struct idem_buf *out, double d, bool is_float, bool json)
{
	char buf[320]; /* what %g can write, as the compiler counts it */
	int prec = is_float ? 6 : 15;
	int last = is_float ? 9 : 17;
	const char *word = NULL;

	if (isnan(d))
		word = json ? "\"NaN\"" : "NaN";
	else if (isinf(d))
		word = d > 0 ? (json ? "\"Infinity\"" : "Infinity")
		             : (json ? "\"-Infinity\"" : "-Infinity");
	if (word != NULL)
		return idem_buf_append_str(out, word);
	if (is_float ? fpclassify((float)d) == FP_SUBNORMAL : fpclassify(d) == FP_SUBNORMAL)
		prec = 1;
	for (; prec < last; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (is_float ? strtof(buf, NULL) == (float)d : strtod(buf, NULL) == d)
			break;
	}
	if (prec == last)
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
	return idem_buf_append_str(out, buf);
}

void idem_pathbuf_put(struct idem_pathbuf *pb, const char *s, size_t n)
{
	const uint8_t *u = (const uint8_t *)s;
	size_t i = 0, run;

	while (i < n && !pb->cut) {
		run = idem_utf8_seq(u + i, n - i);
		if (pb->len + (run ? run : 1) + 2 > pb->cap - 4) {
			pb->cut = true;
			break;
		}
		if (u[i] == '~' || u[i] == '/') {
			pb->b[pb->len++] = '~';
			pb->b[pb->len++] = u[i] == '~' ? '0' : '1';
		} else if (run == 0 || u[i] < 0x20 || u[i] == 0x7f) {
			pb->b[pb->len++] = '?';
			run = 1;
		} else {
			memcpy(pb->b + pb->len, u + i, run);
			pb->len += run;
		}
		i += run;
	}
}

const char *idem_json_pointer_problem(const char *ptr)
{
	if (ptr[0] != '\0' && ptr[0] != '/')
		return "must be empty or start with '/'";
	for (const char *p = ptr; *p != '\0'; p++) {
		if (p[0] == '~' && p[1] != '0' && p[1] != '1')
			return "'~' must be followed by '0' or '1'";
	}
	return NULL;
}

idem_status idem_decode_fail(idem_error *err, int32_t id, size_t at, const char *path,
                             const char *what)
{
	if (path[0] == '\0')
		return idem_error_set(err, IDEM_ERR_KEY, "schema id %" PRId32 ": at byte %zu: %s",
		                      id, at, what);
	return idem_error_set(err, IDEM_ERR_KEY, "schema id %" PRId32 ": at byte %zu (%s): %s", id,
	                      at, path, what);
}
