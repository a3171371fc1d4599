/*
 * idem_trace.h - W3C Trace Context (https://www.w3.org/TR/trace-context/): reading a message's
 * traceparent and tracestate, and the traceparent idemd passes on, with its own span as the
 * parent (ARCHITECTURE.md "Trace context").
 *
 * A malformed traceparent is ignored, never a reason to refuse a message: the message then has
 * no trace context, as if it carried none.
 */
#ifndef IDEM_TRACE_H
#define IDEM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IDEM_TRACEPARENT_LEN 55  /* "00-" 32 hex "-" 16 hex "-" 2 hex */
#define IDEM_TRACESTATE_MAX  512 /* the most of a tracestate passed on (the W3C minimum) */

/* The parts of a valid traceparent that idemd keeps: lowercase hex, NUL-terminated. */
struct idem_trace {
	char trace_id[33];
	char parent_id[17];
	char flags[3];
};

/*
 * @brief Read a traceparent header's value (@n bytes, not NUL-terminated). Version 00 must be
 * exactly 55 bytes; a later version (not ff) is read by version 00's layout and may carry more
 * after a '-'. Hex is lowercase; the trace id and the parent id are not all zeros.
 * @return false if it is malformed (*ret is then unchanged).
 */
bool idem_trace_parse(const void *s, size_t n, struct idem_trace *ret);

/*
 * @brief A tracestate that may be passed on: 1..IDEM_TRACESTATE_MAX bytes of printable ASCII
 * (0x20..0x7e). Its members are not checked one by one: it is passed on as it came.
 */
bool idem_tracestate_ok(const void *s, size_t n);

/*
 * @brief idemd's span id for one message of one consumer: 16 lowercase hex digits, not all
 * zeros, the same every time that message is applied (like the ids of its events: a message
 * applied again after a restore continues its trace the same way).
 */
void idem_trace_span(const char *consumer, const char *topic, int32_t partition, int64_t offset,
                     char out[17]);

/*
 * @brief The traceparent idemd passes on: version 00, @t's trace id and flags, @span as the
 * parent. @out gets IDEM_TRACEPARENT_LEN characters and a NUL.
 */
void idem_trace_child(const struct idem_trace *t, const char *span,
                      char out[IDEM_TRACEPARENT_LEN + 1]);

#endif
