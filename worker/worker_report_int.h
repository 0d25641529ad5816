/* worker_report: the worker's description of itself for operators.
 *
 * At start each worker publishes one JSON object, keyed by its worker id, to
 * the workers topic (compacted, so the topic holds the latest report per
 * worker); at a clean shutdown it publishes a tombstone (null value) under
 * the same key.  `codefleet doctor` joins these reports with the consumer
 * group's live members (by client id) to say which backends and languages
 * the running fleet serves.  The format is in schema/SPEC.md, "Worker
 * reports".  Reports are for people: nothing in the fleet's behaviour
 * depends on them. */
#ifndef CF_WORKER_REPORT_H
#define CF_WORKER_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_backend.h"

#define CF_WORKER_REPORT_SCHEMA 1
/* The largest report a reader accepts (a report is a few KiB). */
#define CF_WORKER_REPORT_MAX_BYTES (64 * 1024)

/* What the worker is doing, in the reports it republishes every
 * report-interval (`codefleet top` reads them). */
typedef struct cf_worker_load {
    int64_t at_ms;              /* Unix time of the picture */
    int64_t busy, held;         /* slots running, requests waiting for one */
    bool paused, draining;
    uint64_t received, answered, rejected, dead_lettered, retries; /* since start */
    const char *const *stalled; /* partitions the guard finds stalled now, "topic[N]" */
    size_t n_stalled;
    uint64_t stalls;            /* stalls the guard found since start */
    int64_t memory_reserved, memory_budget; /* bytes (budget 0: not enforced) */
    int64_t pids_reserved, pids_budget;     /* processes (budget 0: not enforced) */
    const char *const *paused_topics; /* request topics whose intake is paused (their profile's cap + prefetch taken) */
    size_t n_paused_topics;
} cf_worker_load;

/* The most stalled partitions a report names. */
#define CF_WORKER_LOAD_STALLED_MAX 16

typedef struct cf_worker_report_info {
    const char *worker_id;
    const char *client_id;      /* the consumer's client.id, as the group lists it */
    const char *group;
    int64_t started_at_ms;      /* Unix time */
    int64_t slots;
    const char *const *request_topics;
    size_t n_request_topics;
    const char *result_topic;
    const char *const *result_topics; /* every result topic of its profiles (default first) */
    size_t n_result_topics;
    int64_t max_output_bytes;
    int64_t largest_result_bytes; /* what one result may need of a message */
    int redis;                  /* 1: workspaces, checkpoints and idempotency available */
    const cf_backend_set *backends;
    uint32_t compiled_languages; /* languages the compile pipeline serves on this host */
    const cf_worker_load *load; /* NULL: none */
} cf_worker_report_info;

/* The report as a NUL-terminated JSON string (caller frees), NULL when out
 * of memory. */
char *cf_worker_report_json(const cf_worker_report_info *info);

#endif
