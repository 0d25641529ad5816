/* observe: what the worker shows operators besides its logs.
 *
 * - Metrics (metrics.h), served with liveness and readiness on
 *   metrics-listen (ops_http.h).  docs/OPERATIONS.md lists them.
 * - Trace context: each request continues its caller's W3C trace
 *   (cf_trace.h); its spans go to an OTLP collector when otlp-endpoint is
 *   set (otlp.h).
 *
 * The worker's threads report through these calls; none of them blocks on
 * I/O (the HTTP server and the exporter have threads of their own), and
 * all are safe from any thread.  A NULL cf_observe is allowed everywhere
 * and does nothing, so tests can run a worker without it.
 */
#ifndef CF_OBSERVE_H
#define CF_OBSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_schema.h"
#include "cf_trace.h"
#include "cf_worker.h"

typedef struct cf_observe cf_observe;

int cf_observe_new(const cf_worker_config *cfg, const char *worker_id, cf_observe **out, cf_error *err);
/* Stops the HTTP server and sends the spans still queued (bounded). */
void cf_observe_destroy(cf_observe *o);
/* The port /metrics is served on (0: none), for logs and tests. */
int cf_observe_port(const cf_observe *o);

/* The main loop's picture, set on every turn (also liveness's heartbeat). */
typedef struct cf_observe_loop_state {
    int64_t slots, busy, held;
    bool paused;   /* some partition paused for backpressure */
    bool draining; /* stopping: not ready */
    int64_t stalled; /* partitions the partition guard finds stalled */
    int64_t memory_reserved, memory_budget; /* bytes: the running executions' limits, and their ceiling (0: none) */
    int64_t pids_reserved, pids_budget;     /* processes: the same for their pids bounds */
} cf_observe_loop_state;
void cf_observe_loop(cf_observe *o, const cf_observe_loop_state *s);

/* What the worker's executions, helpers and zygotes use together, and
 * their bounds (budget.c), read when /metrics is scraped. */
typedef struct cf_observe_children {
    int64_t memory_bytes, memory_max, pids, pids_max;
} cf_observe_children;
typedef void (*cf_observe_children_fn)(void *arg, cf_observe_children *out);
void cf_observe_set_children_source(cf_observe *o, cf_observe_children_fn fn, void *arg);

/* The group's assignment: has_assignment after an assign (an empty one
 * counts: more workers than partitions), false after a revoke or loss. */
void cf_observe_assigned(cf_observe *o, bool has_assignment);
/* librdkafka's statistics JSON of one consumer (source: its name): lag per
 * partition, brokers up.  The lag series are those of every consumer's
 * latest statistics together (a worker has one per request topic). */
void cf_observe_kafka_stats(cf_observe *o, const char *source, const char *json, size_t len);
void cf_observe_kafka_error(cf_observe *o, bool fatal, bool all_brokers_down);
void cf_observe_redis_error(cf_observe *o);
/* A result offered to the idempotency store: "kept", "kept_short", "over_quota", "unavailable", "not_kept". */
void cf_observe_result_store(cf_observe *o, const char *profile, const char *outcome);
void cf_observe_produce_retry(cf_observe *o);
/* The partition guard took a step ("resume", "seek", "rejoin"). */
void cf_observe_partition_stall(cf_observe *o, const char *step);

/* One request's timeline and outcome, carried by its job.  Times are Unix
 * nanoseconds (0 = did not happen). */
typedef struct cf_job_obs {
    cf_trace_ctx ctx;          /* trace id, the worker's span id, flags */
    uint8_t parent_span[8];    /* the caller's span (zero: a new trace) */
    char trace_hex[33], span_hex[17];
    int64_t created_ns;        /* the request's creation (end to end starts here) */
    int64_t taken_ns, admitted_ns, slot_ns, exec_start_ns, run_start_ns, run_end_ns, exec_end_ns;
    int64_t produce_ns;
    const char *status;        /* cf_status_name of the answer; NULL: dead letter */
    const char *backend;       /* the backend's registry name, "none" before one was chosen */
    const char *language;      /* cf_language_name, "none" */
    int64_t exec_wall_us;      /* the run's wall time (0: did not run) */
    int compile_cache;         /* 1 hit, -1 miss, 0 no compile step */
    bool setup_failed;         /* the backend broke (internal_error of the machinery) */
    bool dead_letter;
} cf_job_obs;

/* Starts a request's trace: continues req's traceparent when valid.
 * msg_ts_ms: the Kafka message timestamp (0 = none). */
void cf_job_obs_begin(cf_job_obs *j, const cf_request *req, int64_t msg_ts_ms);
/* Makes the calling thread's log lines carry j's trace (NULL: none). */
void cf_job_obs_log(const cf_job_obs *j);
/* The worker's traceparent for the result's metadata. */
void cf_job_obs_traceparent(const cf_job_obs *j, char *buf, size_t size);
/* Converts a monotonic time (us) of this process to Unix ns. */
int64_t cf_observe_mono_to_unix_ns(int64_t mono_us);
int64_t cf_observe_now_ns(void);

/* The request was answered (delivery acknowledged): counts it and exports
 * its spans. */
void cf_observe_answered(cf_observe *o, cf_job_obs *j, const char *request_id);
/* Queue wait, observed when a slot takes the job. */
void cf_observe_queue_wait(cf_observe *o, const cf_job_obs *j);

/* The exposition text (malloc'd), also for tests. */
char *cf_observe_render(cf_observe *o, size_t *len);

#endif
