/* cf_trace: W3C Trace Context (traceparent) for requests and results.
 *
 * A request may carry `trace.traceparent`; the worker continues that trace:
 * its span for the request is a child of the caller's span, its log lines
 * for the request carry the trace and span ids, and the result carries the
 * worker's span context back.  https://www.w3.org/TR/trace-context/
 */
#ifndef CF_TRACE_H
#define CF_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CF_TRACEPARENT_LEN 55 /* version 00, without the NUL */

typedef struct cf_trace_ctx {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t flags; /* bit 0: sampled */
} cf_trace_ctx;

/* Parses a traceparent header value.  Returns 0, or -1 when it is not a
 * valid one (then the caller starts a new trace).  Versions above 00 are
 * read as 00 (the spec's forward compatibility); ff is invalid. */
int cf_traceparent_parse(const char *s, cf_trace_ctx *out);
/* "00-<trace>-<span>-<flags>", NUL-terminated (buf of at least 56). */
void cf_traceparent_format(const cf_trace_ctx *c, char *buf, size_t size);
/* Lowercase hex of n bytes into buf (2n+1 bytes). */
void cf_trace_hex(const uint8_t *b, size_t n, char *buf);
/* Random non-zero ids (getrandom; never all zero). */
void cf_trace_new_trace_id(uint8_t id[16]);
void cf_trace_new_span_id(uint8_t id[8]);

#endif
