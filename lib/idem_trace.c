/*
 * idem_trace.c - W3C Trace Context: reading a traceparent, and the one idemd passes on
 * (idem_trace.h).
 */
#include "idem_trace.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Lowercase hex only: the specification refuses uppercase. */
static bool lower_hex(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return false;
	return true;
}

static bool all_zeros(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != '0')
			return false;
	return true;
}

bool idem_trace_parse(const void *s, size_t n, struct idem_trace *ret)
{
	const unsigned char *p = s;

	/* version "-" trace-id "-" parent-id "-" flags */
	if (p == NULL || n < IDEM_TRACEPARENT_LEN)
		return false;
	if (!lower_hex(p, 2) || (p[0] == 'f' && p[1] == 'f') || p[2] != '-' || p[35] != '-' ||
	    p[52] != '-')
		return false;
	if (p[0] == '0' && p[1] == '0' ? n != IDEM_TRACEPARENT_LEN
	                               : n > IDEM_TRACEPARENT_LEN && p[IDEM_TRACEPARENT_LEN] != '-')
		return false;
	if (!lower_hex(p + 3, 32) || !lower_hex(p + 36, 16) || !lower_hex(p + 53, 2) ||
	    all_zeros(p + 3, 32) || all_zeros(p + 36, 16))
		return false;
	memcpy(ret->trace_id, p + 3, 32);
	ret->trace_id[32] = '\0';
	memcpy(ret->parent_id, p + 36, 16);
	ret->parent_id[16] = '\0';
	memcpy(ret->flags, p + 53, 2);
	ret->flags[2] = '\0';
	return true;
}

bool idem_tracestate_ok(const void *s, size_t n)
{
	const unsigned char *p = s;

	if (p == NULL || n == 0 || n > IDEM_TRACESTATE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] > 0x7e)
			return false;
	return true;
}

/* FNV-1a over @n bytes, then a separator, continuing from @h. */
static uint64_t fnv(uint64_t h, const void *s, size_t n)
{
	const unsigned char *p = s;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * UINT64_C(0x100000001b3);
	return (h ^ 0x1f) * UINT64_C(0x100000001b3);
}

void idem_trace_span(const char *consumer, const char *topic, int32_t partition, int64_t offset,
                     char out[17])
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	char pos[48];
	int len = snprintf(pos, sizeof(pos), "%" PRId32 ":%" PRId64, partition, offset);

	h = fnv(h, consumer, strlen(consumer));
	h = fnv(h, topic, strlen(topic));
	h = fnv(h, pos, (size_t)len);
	/* splitmix64's finalizer spreads FNV's weak high bits over the whole id. */
	h ^= h >> 30;
	h *= UINT64_C(0xbf58476d1ce4e5b9);
	h ^= h >> 27;
	h *= UINT64_C(0x94d049bb133111eb);
	h ^= h >> 31;
	if (h == 0)
		h = 1;
	snprintf(out, 17, "%016" PRIx64, h);
}

void idem_trace_child(const struct idem_trace *t, const char *span,
                      char out[IDEM_TRACEPARENT_LEN + 1])
{
	snprintf(out, IDEM_TRACEPARENT_LEN + 1, "00-%s-%s-%s", t->trace_id, span, t->flags);
}
