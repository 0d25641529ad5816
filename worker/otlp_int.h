/* otlp: exports the worker's spans over OTLP/HTTP (JSON encoding) to a
 * collector: POST <endpoint>/v1/traces.
 *
 * Export never slows an execution: spans are copied into a bounded queue
 * (CF_OTLP_QUEUE_MAX; beyond it they are dropped and counted) and a thread
 * of its own sends them in batches through libcurl, with a timeout.  A
 * failed batch is counted and dropped: traces are diagnostics, never worth
 * holding results back for.  https://opentelemetry.io/docs/specs/otlp/
 */
#ifndef CF_OTLP_H
#define CF_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"

#define CF_OTLP_QUEUE_MAX 8192
#define CF_OTLP_BATCH_MAX 512
#define CF_OTLP_ATTRS_MAX 8
#define CF_OTLP_ATTR_VALUE_MAX 256

typedef enum cf_span_kind {
    CF_SPAN_INTERNAL = 1,
    CF_SPAN_SERVER = 2,
    CF_SPAN_CLIENT = 3,
    CF_SPAN_PRODUCER = 4,
    CF_SPAN_CONSUMER = 5,
} cf_span_kind;

typedef struct cf_span_attr {
    const char *key; /* borrowed: a literal */
    char value[CF_OTLP_ATTR_VALUE_MAX];
} cf_span_attr;

typedef struct cf_span {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t parent_id[8]; /* all zero: a root span */
    const char *name;     /* borrowed: a literal */
    cf_span_kind kind;
    int64_t start_ns, end_ns; /* Unix time */
    bool error;               /* status ERROR (the sandbox broke), else UNSET */
    cf_span_attr attrs[CF_OTLP_ATTRS_MAX];
    size_t n_attrs;
} cf_span;

/* Adds a string attribute (cut to CF_OTLP_ATTR_VALUE_MAX - 1 bytes). */
void cf_span_attr_add(cf_span *s, const char *key, const char *value);

typedef struct cf_otlp cf_otlp;

typedef struct cf_otlp_stats {
    uint64_t exported, dropped, failed_batches;
} cf_otlp_stats;

/* endpoint: "http://host:port" (a path may follow; /v1/traces is added).
 * headers: "Name=value,..." sent with every export ("" = none).
 * service_instance: the worker id (resource attribute service.instance.id). */
int cf_otlp_new(const char *endpoint, const char *headers, const char *service_instance, cf_otlp **out,
                cf_error *err);
/* Queues copies of the spans.  Never blocks on the network. */
void cf_otlp_export(cf_otlp *o, const cf_span *spans, size_t n);
cf_otlp_stats cf_otlp_get_stats(cf_otlp *o);
/* The export URL for logs, any user:password@ of it hidden. */
const char *cf_otlp_url(const cf_otlp *o);
/* Sends what is queued (waiting at most timeout_ms), then stops.  NULL-safe. */
void cf_otlp_destroy(cf_otlp *o, int timeout_ms);

#endif
