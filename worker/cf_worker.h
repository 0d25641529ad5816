/* cf_worker: a stateless execution worker in a Kafka consumer group.
 *
 * Takes execution requests from the request topic, runs each under the
 * requested backend, and produces the result (to the result topic, or the
 * request's reply_to) keyed by request id with the idempotent producer.
 * Offsets advance only after the result's delivery report succeeded, so a
 * worker killed at any point loses no request (at-least-once; consumers
 * deduplicate by request id).  See README "Architecture" and
 * docs/CONFIGURATION-worker.md.
 *
 * With `redis` set, requests naming a workspace run against its files
 * (written back as one revision) and requests naming a thread carry its
 * checkpoints (worker_state.h; docs/STATE.md, "Through the fleet").
 */
#ifndef CF_WORKER_H
#define CF_WORKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cf_backend.h"
#include "cf_config.h"
#include "cf_error.h"

typedef struct cf_worker_config {
    char *brokers;
    char *group;
    char *worker_id;
    char *request_topic;
    char *result_topic;
    char *dlq_topic;
    char *events_topic;         /* never a reply_to target */
    char *workers_topic;        /* worker reports for operators ("" = none) */
    int64_t report_interval_us; /* republish the report with its load (0 = at start only) */
    int64_t slots;              /* concurrent executions */
    int64_t prefetch;           /* requests buffered beyond the slots before pausing */
    bool static_membership;     /* worker-id is the group.instance.id (KIP-345) */
    int64_t group_protocol;     /* enum index: auto|consumer|classic (cf_worker_group_protocol) */
    bool consumer_per_topic;    /* one group member per request topic: each topic spread over the workers */
    int64_t memory_budget_bytes; /* what running executions' memory limits may add up to (0: auto, budget.c) */
    int64_t children_memory_bytes; /* what all the worker's executions, helpers and zygotes may use together (0: auto) */
    int64_t children_pids;      /* how many processes they may have together (0: auto) */
    int64_t userns_owner;       /* enum index: auto|run-uid|root (cf_userns_owner) */
    int64_t reserve_slots;      /* slots beyond `slots` no one profile may fill (-1: auto) */
    char *backends;             /* "process" or "sandbox,process": first = default */
    char *work_root;
    char *python_path;
    char *node_path;
    char *shell_path;
    char *exec_path;
    int64_t run_uid_base;
    char *cgroup_root;          /* sandbox cgroups' parent, relative to each hierarchy */
    char *slirp4netns_path;     /* sandbox network=enabled ("" = not offered) */
    int64_t sandbox_memory_bytes;
    int64_t sandbox_pids_max;
    int64_t sandbox_tmp_bytes;
    int64_t sandbox_work_bytes;
    int64_t sandbox_inodes;
    int64_t default_timeout_us;
    int64_t max_timeout_us;
    int64_t default_output_bytes;
    int64_t max_output_bytes;
    int64_t max_memory_bytes;   /* largest memory limit a request may ask for */
    int64_t max_processes;      /* largest processes limit */
    int64_t max_file_size_bytes; /* largest file size limit */
    int64_t max_request_bytes;
    int64_t max_files_bytes;
    int64_t max_output_file_bytes;
    int64_t shutdown_grace_us;
    int64_t shutdown_kafka_timeout_us; /* flush + final commit + group leave on shutdown */
    int64_t result_batch_us;    /* producer linger while there is a backlog */
    char *cancel_topic_suffix;  /* "" = no cancels */
    int64_t cancel_memory_us;
    char *stream_topic_suffix;  /* "" = no streaming */
    int64_t stream_interval_us;
    int64_t stream_chunk_bytes;
    int64_t stream_max_chunks;
    int64_t rebalance_wait_us;
    int64_t partition_stall_us; /* the partition guard (partition_guard.h) */
    /* Redis (workspaces, checkpoints, attempt counts); redis "" = none. */
    char *redis;
    char *redis_user;
    char *redis_password;
    int64_t redis_db;
    int64_t redis_connect_timeout_us;
    int64_t redis_command_timeout_us;
    int64_t redis_retry_budget_us;
    int64_t workspace_max_file_bytes;
    int64_t workspace_max_files;
    int64_t workspace_max_total_bytes;
    int64_t workspace_ttl_us;
    int64_t workspace_history;
    int64_t checkpoint_max_per_thread;
    int64_t checkpoint_ttl_us;
    int64_t idempotency_ttl_us;   /* results kept for replay (0 = no store) */
    int64_t idempotency_lease_us; /* one id's run lease, renewed while it runs */
    int64_t idempotency_max_result_bytes; /* stored copies are cut to this */
    /* Compiled languages, harnesses, cases, collect (cf_pipeline.h). */
    char *cc_path;
    char *cxx_path;
    char *rustc_path;
    char *go_path;
    char *tsc_path;
    char *harness_dir;
    char *c_flags_allowed;
    char *cpp_flags_allowed;
    char *rust_flags_allowed;
    char *go_flags_allowed;
    char *ts_flags_allowed;
    int64_t compile_timeout_us;
    int64_t compile_memory_bytes;
    int64_t compile_processes;
    int64_t compile_output_bytes;
    int64_t artifact_bytes;
    int64_t compile_cache_bytes;
    int64_t collect_bytes;
    char *metrics_listen;       /* host:port of /metrics, /healthz, /readyz ("" = none) */
    int64_t liveness_stall_us;
    char *otlp_endpoint;        /* OTLP/HTTP collector ("" = no span export) */
    char *otlp_headers;
    int64_t otlp_sample_percent;
    int64_t log_level;          /* enum index: error|warn|info|debug */
    int64_t log_format;         /* enum index: text|json */
    cf_kvlist kafka;            /* librdkafka pass-through ("kafka.<property>") */
    cf_kvlist profiles;         /* "profile.<name>.<key>" (cf_profile.h) */
    /* Each backend family's own keys (cf_backend_settings): set through
     * the same table, read by the family itself. */
    cf_backend_settings_area backend_settings;
} cf_worker_config;

/* The worker's configuration table: its own keys and every backend
 * family's (composed at first use). */
const cf_conf_table *cf_worker_conf(void);
#define cf_worker_conf_table (*cf_worker_conf())

/* The reference (docs/CONFIGURATION-worker.md): the worker's table, then
 * the keys of a profile (cf_profile.h). */
void cf_worker_print_config_markdown(FILE *out);

typedef struct cf_worker cf_worker;

/* Creates the worker: backends (probing the host), Kafka clients.  cfg is
 * borrowed and must outlive the worker. */
int cf_worker_new(const cf_worker_config *cfg, cf_worker **out, cf_error *err);

/* Runs until cf_worker_stop() or SIGTERM/SIGINT (blocked in the caller and
 * received through a signalfd when handle_signals is true).  Shuts down
 * gracefully: stops taking work, lets running executions finish within
 * shutdown_grace, commits, closes the consumer.  Returns 0 on a clean stop. */
int cf_worker_run(cf_worker *w, bool handle_signals, cf_error *err);

/* What the worker's consumer holds and what its partition guard did, read
 * from any thread (each field on its own; not one consistent picture). */
typedef struct cf_worker_partitions {
    int64_t assigned;         /* request partitions assigned now */
    int64_t stalled;          /* of those, found stalled and not yet moving again */
    uint64_t stalls;          /* stalls found since start */
    uint64_t recoveries[3];   /* by the step that got one moving: resume, seek, rejoin */
} cf_worker_partitions;

void cf_worker_partitions_get(const cf_worker *w, cf_worker_partitions *out);

/* The worker's jobs (one per message taken from a request partition) by
 * where they ended.  Every job taken ends exactly once: answered (its
 * result delivered), dead-lettered, or dropped (given up unanswered: read
 * again by the partition's next owner); live are those not ended yet. */
typedef struct cf_worker_jobs {
    _Atomic uint64_t taken, answered, dead_lettered, dropped;
    _Atomic int64_t live;
} cf_worker_jobs;

/* The counts as they are now (any thread). */
void cf_worker_jobs_get(const cf_worker *w, cf_worker_jobs *out);
/* Before cf_worker_run: from then on the worker also keeps the counts in *ledger (the caller's,
 * zeroed, and outliving the worker: cf_worker_destroy's own endings are in
 * it too).  For audits and tests. */
void cf_worker_jobs_watch(cf_worker *w, cf_worker_jobs *ledger);

/* Fault injection, for tests of the partition guard: pauses a partition
 * in the consumer behind the worker's back (its own record says it is
 * fetched), the state librdkafka 2.0.2 left a partition in after a lost
 * assignment (issue 28).  Thread-safe. */
int cf_worker_fault_pause_unrecorded(cf_worker *w, const char *topic, int32_t partition);

/* The consumer group protocol (worker setting group-protocol).  AUTO:
 * KIP-848's (`consumer`) unless the operator set a classic-only kafka
 * property; a broker that does not offer it ends cf_worker_run with
 * cf_worker_group_protocol_refused() true, and the caller starts the
 * worker again with CLASSIC. */
typedef enum cf_worker_group_protocol {
    CF_WORKER_GROUP_AUTO,
    CF_WORKER_GROUP_CONSUMER,
    CF_WORKER_GROUP_CLASSIC,
} cf_worker_group_protocol;

/* After cf_worker_run failed: whether the broker refused the consumer group
 * protocol (KIP-848) before the worker took any request, so that a new
 * worker with group-protocol = classic loses nothing. */
bool cf_worker_group_protocol_refused(const cf_worker *w);

/* After cf_worker_run failed: whether a static member's instance id was
 * still held by an earlier run of it (KIP-848 fences the newcomer) before
 * the worker took any request: starting again once that member's session
 * expires loses nothing. */
bool cf_worker_instance_id_held(const cf_worker *w);

/* Before cf_worker_destroy, when the process exits right after it: a Kafka
 * consumer whose close did not finish (the broker away) is left to the
 * exit instead of destroyed.  librdkafka's destroy waits for the commits
 * it still holds for the coordinator, and under KIP-848 that wait is its
 * fixed 45 s session default (session.timeout.ms cannot be set there), so
 * a worker stopping without a broker took grace + 45 s.  What those
 * commits would have said is read again by the partitions' next owner. */
void cf_worker_exiting(cf_worker *w);

/* Asks a running worker to stop (thread-safe and async-signal-safe). */
void cf_worker_stop(cf_worker *w);

void cf_worker_destroy(cf_worker *w);

#endif
