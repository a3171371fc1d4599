/*
 * idem_common.c - error detail, byte buffers, UTF-8 validation.
 */
#include "idem_common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

idem_status idem_secret_read(const char *section, const char *env, const char *file, char *buf,
                             size_t len, bool *ret_set, idem_error *err)
{
	*ret_set = false;
	if (env != NULL) {
		const char *v = getenv(env);

		if (v == NULL)
			return idem_error_set(
			        err, IDEM_ERR_CONFIG,
			        "%s.password_env: environment variable '%s' is not set", section,
			        env);
		snprintf(buf, len, "%s", v);
		*ret_set = true;
	} else if (file != NULL) {
		FILE *f = fopen(file, "r");

		if (f == NULL)
			return idem_error_set(err, IDEM_ERR_CONFIG,
			                      "%s.password_file: cannot open '%s': %s", section,
			                      file, strerror(errno));
		if (fgets(buf, (int)len, f) == NULL)
			buf[0] = '\0';
		fclose(f);
		buf[strcspn(buf, "\r\n")] = '\0';
		*ret_set = true;
	}
	return IDEM_OK;
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

void idem_secret_wipe(char *p, size_t n)
{
	volatile char *v = p;

	while (n-- > 0)
		*v++ = 0;
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
