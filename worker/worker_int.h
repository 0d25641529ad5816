/* worker_int.h: what the worker's rooms share (private to worker/).
 *
 * The worker is one struct cf_worker, owned by the main thread except
 * where a field says otherwise.  Its rooms:
 *   worker.c         start, the main loop, shutdown, reports
 *   intake.c         a message taken: decode, admission, queueing
 *   slots.c          a slot thread's run of a job, the lease keeper
 *   delivery.c       answers to the producer, delivery reports, retries, dead letters
 *   partitions.c     assignment, revocation, pause and hold, offsets, the partition guard
 *   cancels.c        the cancel topics and the cancels remembered
 *   kafka_clients.c  the Kafka clients' configuration and callbacks
 *   job.c            the job record
 */
#ifndef CF_WORKER_INT_H
#define CF_WORKER_INT_H

#include <librdkafka/rdkafka.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cf_backend.h"
#include "cf_control.h"
#include "cf_kafka_heal.h"
#include "cf_pipeline.h"
#include "profile_int.h"
#include "cf_schema.h"
#include "cf_worker.h"
#include "exec_pool_int.h"
#include "job_int.h"
#include "observe_int.h"
#include "offset_tracker_int.h"
#include "partition_guard_int.h"
#include "worker_state_int.h"

/* Delivery reports served per call of delivery_serve_producer (it returns
 * this when there may be more). */
#define PRODUCER_SERVE_MAX 1000
#define HDR_PREFIX "codefleet-" /* the headers of dead letters */

/* Cancels remembered for requests not (yet) here: per request topic and
 * id, until they expire (cancel-memory).  Main thread only. */
#define MEMO_BUCKETS 4096
#define MEMO_MAX 100000      /* in all (~450 bytes each with the allocator's share: ~45 MB) */
#define MEMO_MAX_TOPIC 20000 /* per request topic: one tenant cannot fill it for all */
typedef struct memo_entry {
    struct memo_entry *next;
    size_t topic;
    int64_t expires_us; /* monotonic */
    const char *reason; /* in data, after the id */
    char id[];          /* NUL-terminated, then the reason */
} memo_entry;

/* The latest cancels, for a slot that takes a job at the moment its cancel
 * is applied: apply_cancel records here and looks at the running jobs,
 * run_job registers its job and looks here, both under the worker's lock,
 * so one of them sees the other. */
#define RECENT_CANCELS 256
#define RECENT_CANCEL_US (10 * 1000000LL) /* far longer than that hand-over */
typedef struct recent_cancel {
    int64_t at_us; /* monotonic */
    size_t topic;
    char id[CF_ID_MAX + 1];
    char reason[CF_CANCEL_REASON_MAX + 64];
} recent_cancel;

typedef struct part_state {
    bool assigned;
    bool paused;
    bool held;       /* paused alone: its tracker is full (a slow head) */
    uint64_t gen;
    cf_offset_tracker *tracker;
    cf_pguard_part guard; /* the partition guard's record (partition_guard.h) */
} part_state;

#define MAX_PARTITIONS 100000
#define STREAM_TOPICS_KNOWN 64
#define CHUNK_OUTQ_MAX 10000 /* producer queue depth past which chunks wait */

/* One request topic the worker consumes, and the profile governing it. */
typedef struct topic_state {
    const cf_profile *profile;
    const char *name;     /* profile->topic */
    const char *results;  /* its result topic */
    part_state *parts;
    size_t nparts;
    size_t consumer;      /* index into cf_worker.consumers */
    /* Fair shares (docs/OPERATIONS.md, "Fair shares"): the pool's group of
     * this topic is its index. */
    int slot_cap;         /* the most slots its executions hold at once */
    int64_t pids_share;   /* the most of the process budget its executions hold (budget.c; 0: all of it) */
    size_t inflight;      /* its jobs taken and not ended (main thread) */
    bool paused;          /* its intake is paused: slot_cap + prefetch taken */
} topic_state;

/* A request consumer (consumers.c): one per request topic, or one for all. */
typedef struct request_consumer {
    rd_kafka_t *rk;
    rd_kafka_queue_t *q;       /* its consumer queue: wakes the main loop */
    rd_kafka_queue_t *close_q; /* the close's queue, served until rk is destroyed */
    bool close_failed;         /* the close could not even start */
    bool closed;               /* ... and the close finished */
    cf_kafka_heal heal;        /* main thread's: kafka_heal_all */
    bool joined;               /* had an assignment, or a member epoch (consumers_watch_join) */
    int64_t epoch_seen_us;     /* when a member epoch was first seen */
} request_consumer;

/* What an operator can act on, from a librdkafka error: one line naming
 * what failed and what to check (the raw detail stays at debug level). */
typedef enum kafka_problem {
    KP_NONE,
    KP_UNREACHABLE,
    KP_AUTH,
    KP_ACL,
    KP_TOPIC,
    KP_PROTOCOL,
    KP_HANDSHAKE, /* a handshake dropped after the worker had joined: the broker is away, or changed */
    KP__COUNT,
} kafka_problem;

struct cf_worker {
    const cf_worker_config *cfg;
    char worker_id[CF_ID_MAX + 1];
    cf_backend_config bcfg;
    /* Helper programs and harnesses this worker uses unless configured:
     * installed ones next to an installed worker, else the build's. */
    char helper_dir[PATH_MAX], harness_dir[PATH_MAX];
    cf_pipeline *pipeline;   /* compiled languages, harnesses, cases, collect */
    bool ran;                /* cf_worker_run's shutdown happened */
    bool exiting;            /* cf_worker_exiting: the process ends after the destroy */
    bool kafka_closing;      /* ... and reached its flush/commit/close (after the grace) */
    cf_backend_set *backends;
    request_consumer *consumers; /* consumers.c */
    size_t nconsumers;
    bool consumer_per_topic;     /* in effect: one consumer per request topic */
    cf_worker_group_protocol group_protocol; /* in effect: CONSUMER or CLASSIC */
    bool consumed_any;           /* a consumer delivered a request (a message, not an error event) */
    bool group_joined;           /* every consumer has had a member epoch (consumers_join_refused) */
    bool join_refused;           /* ... and under auto it did not come while the broker answered */
    int64_t join_check_us, join_deadline_us;
    rd_kafka_resp_err_t consumer_fatal; /* what ended cf_worker_run, if a consumer's fatal error did */
    rd_kafka_t *producer;
    rd_kafka_queue_t *producer_q;
    int wake_fd;
    cf_exec_pool *pool;
    cf_profile_set *profiles;
    cf_profile_env penv;
    topic_state *topics;
    size_t ntopics;
    uint64_t gen_counter;
    bool paused_all;           /* every topic's intake is paused */
    bool stopping;
    bool destroying;           /* cf_worker_destroy: failed answers are dropped */
    atomic_int stop_requested;
    volatile int cancel_exec;  /* shutdown: Redis retries stop early */
    size_t inflight;           /* jobs taken and not ended (main thread) */
    size_t intake_blocked;     /* jobs in state blocking (main thread) */
    job *retry;                /* jobs in retry-wait or blocking, by when (main thread) */
    pthread_t main_thread;     /* the thread of cf_worker_run (and of cf_worker_new) */
    pthread_mutex_t lock;      /* guards handoff and running */
    job *handoff;              /* jobs slots hand back: main thread takes them */
    job **running;             /* per slot: the job it runs, NULL when idle */
    bool have_redis;
    bool idempotent;           /* Redis and idempotency-ttl > 0 */
    cf_wstate **wstate;        /* per slot, created lazily by that slot's thread */
    atomic_uint_fast64_t lease_seq;
    char nonce[17];            /* random, per process: in lease tokens */
    pthread_t keeper;          /* renews the leases of running executions */
    bool keeper_started;
    _Atomic int64_t kafka_explained_us[KP__COUNT]; /* when each kafka_problem was last explained */
    atomic_bool kafka_joined;  /* the group assigned once: the broker took this worker's settings */
    bool keeper_stop;          /* guarded by lock */
    pthread_cond_t keeper_cond;
    /* Cancels: see control_start. */
    rd_kafka_t *control;
    cf_kafka_heal control_heal, producer_heal; /* main thread's: kafka_heal_all */
    rd_kafka_queue_t *control_q;
    int *control_parts;        /* per request topic: partitions of its cancel topic read (0 = missing) */
    int64_t control_next_refresh_us;
    bool control_missing_logged;
    uint64_t memo_seed;        /* keys the memo's hash: ids are chosen by senders */
    size_t *memo_per_topic;    /* entries per request topic (MEMO_MAX_TOPIC each) */
    memo_entry *memo[MEMO_BUCKETS];
    recent_cancel *recent;     /* RECENT_CANCELS, guarded by lock */
    size_t recent_next;
    size_t memo_n;
    int64_t memo_full_logged_us;
    uint64_t cancels_skipped;  /* malformed cancels */
    int64_t cancel_skip_logged_us;
    uint64_t n_cancelled;
    /* The result flusher: see flusher_main. */
    pthread_t flusher;
    bool flusher_started;
    pthread_mutex_t flush_mu;
    pthread_cond_t flush_cv;
    bool flush_wanted;         /* guarded by flush_mu */
    bool flush_stop;           /* guarded by flush_mu */
    /* Streaming: output topics known to exist (stream_topic_exists). */
    pthread_mutex_t stream_mu;
    struct stream_topic_entry {
        char name[256];
        bool exists;
        int64_t until_us; /* monotonic */
    } stream_topics[STREAM_TOPICS_KNOWN];
    size_t stream_topics_next;
    atomic_uint_fast64_t run_seq;
    atomic_uint_fast64_t chunks_failed;
    _Atomic int64_t chunk_fail_logged_us;
    cf_observe *obs;           /* metrics, health, traces (NULL: none) */
    cf_pguard *guard;          /* notices partitions that stand still (partition_guard.h) */
    int64_t guard_next_us;     /* monotonic: the guard's next look */
    _Atomic int64_t n_assigned; /* request partitions held now (cf_worker_partitions_get) */
    int64_t started_ms;        /* Unix time, for the reports */
    int64_t report_next_us;    /* monotonic: the next periodic report */
    /* Counters for the shutdown summary. */
    uint64_t n_rejected, n_retries;
    /* Jobs by where they ended (job.c; any thread may read them). */
    cf_worker_jobs jobs;
    cf_worker_jobs *ledger;    /* cf_worker_jobs_watch: a copy the caller owns */
    int64_t memory_budget;     /* budget.c: what running executions' memory may add up to (0: none) */
    int64_t memory_group_max;  /* what one profile's may add up to (0: the budget): the reserve slots' memory kept out */
    int64_t pids_budget;       /* budget.c: what running executions' pids bounds may add up to (0: none) */
    /* budget.c: the cgroup directory of the worker's own that holds all its
     * executions, helpers and zygotes, and its limits (0: none set). */
    struct cf_cgroup_env *children_cg;
    char children_dir[80];    /* cfw-<pid ns inode>-<pid>-<start ticks> */
    int64_t children_memory, children_pids; /* bounds set (0: none) */
    int nslots;                /* slot threads: slots + the reserve (worker.c, worker_slot_count) */
};


typedef struct lane_match {
    cf_worker *w;
    const rd_kafka_topic_partition_list_t *parts;
} lane_match;

/* worker.c */
void worker_wake(cf_worker *w);
void worker_pool_notify(void *arg);

/* job.c */

/* intake.c */
bool intake_deadline_passed(const cf_request *req, char *reason, size_t rsz);
void intake_take(cf_worker *w, rd_kafka_t *rk, rd_kafka_message_t *m);

/* slots.c */
void flag_set(volatile int *f);
void slots_run_job(cf_pool_job *pj, int slot, void *arg);
size_t slots_stop_running(cf_worker *w, lane_match *lm);
void *slots_lease_keeper(void *arg);

/* delivery.c */
void *flusher_main(void *arg);
void delivery_kick(cf_worker *w);
void delivery_handed_over(cf_worker *w);
int delivery_serve_producer(cf_worker *w, int timeout_ms);
rd_kafka_resp_err_t delivery_drain(cf_worker *w, int timeout_ms);
void delivery_hand_back(cf_worker *w, job *j, rd_kafka_resp_err_t e);
void delivery_send(cf_worker *w, job *j);
void result_add_warning(cf_result *res, const char *msg);
bool result_cut_bulk(cf_result *res, size_t each);
int delivery_set_result(cf_worker *w, job *j, cf_result *res);
void delivery_send_result(cf_worker *w, job *j, cf_result *res);
void delivery_answer_rejected(cf_worker *w, job *j, const char *id, const char *reason);
void delivery_answer_cancelled(cf_worker *w, job *j, const char *reason);
void delivery_dead_letter(cf_worker *w, job *j, const rd_kafka_message_t *m, const char *reason);
void delivery_failed(cf_worker *w, job *j, rd_kafka_resp_err_t e);
void delivery_run_retries(cf_worker *w);
extern char delivery_report_tag;
extern char delivery_chunk_tag;
void delivery_chunk_failed(cf_worker *w, const char *topic, rd_kafka_resp_err_t e);
void delivery_take_handed_back(cf_worker *w);
void delivery_drop_retries(cf_worker *w, lane_match *lm);

/* partitions.c */
long partitions_topic_index(const cf_worker *w, const char *name);
part_state *partitions_get(cf_worker *w, size_t topic, int32_t partition, bool create);
part_state *partitions_of(cf_worker *w, const char *topic, int32_t partition, bool create);
int32_t partitions_lane(size_t topic, int32_t partition);
size_t partitions_tracker_soft(const cf_worker *w);
size_t partitions_tracker_cap(const cf_worker *w);
void partitions_pause_one(cf_worker *w, size_t t, int32_t p, bool pause);
void partitions_hold(cf_worker *w);
void partitions_rewind(cf_worker *w, const char *topic, int32_t partition, int64_t offset);
bool partitions_job_owned(cf_worker *w, const job *j);
void jobs_drop(cf_worker *w, cf_pool_job *list);
void partitions_store_offsets(cf_worker *w);
void partitions_set_paused(cf_worker *w, bool pause);
void partitions_set_topic_paused(cf_worker *w, size_t topic, bool pause);
bool partitions_topic_has_room(const cf_worker *w, size_t topic);
void partitions_guard_serve(cf_worker *w);
void partitions_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque);
bool partitions_lane_matches(int32_t lane, void *arg);

/* cancels.c */
const memo_entry *cancels_remembered(cf_worker *w, size_t topic, const char *id);
void cancels_free(cf_worker *w);
void cancels_serve(cf_worker *w);
void cancels_stop(cf_worker *w);
int cancels_start(cf_worker *w, cf_error *err);

/* budget.c */
int64_t budget_memory(const cf_worker_config *cfg, char *why, size_t cap);
int64_t budget_cost(const cf_worker *w, const cf_request *req, const char **what);
/* The processes an execution of req reserves: its backend's pids bound,
 * for a compiled language the larger of its compile step's and its run's;
 * 0 when the backend's executions hold none below the worker's directory.
 * *what names where the figure came from. */
int64_t budget_pids_cost(const cf_worker *w, const cf_backend *b, const cf_request *req, const cf_profile *prof,
                         const char **what);
/* Sets the pool's process budget from children-pids (all but what the
 * helpers and zygotes keep) and each profile's share of it. */
void budget_pids_setup(cf_worker *w);
/* Before the backends start: names the worker's own cgroup directory (into
 * bcfg.cgroup_own_dir), sweeps dead workers' ones, and bounds it by
 * children-memory and children-pids.  A host without usable cgroups is
 * logged, not fatal (the backends then say what they cannot enforce). */
void budget_children_setup(cf_worker *w);
/* What the children use now (-1: unknown), for the report and /metrics. */
void budget_children_usage(const cf_worker *w, int64_t *memory_bytes, int64_t *pids);
/* After the backends and /metrics are gone: removes the directory. */
void budget_children_teardown(cf_worker *w);

/* run_uids.c */
/* Claims host uids [first, first + count) for this worker against every
 * other worker on the host (a lock the kernel drops when it dies); -1
 * when another worker holds some of them.  One that cannot be claimed (no
 * /run/codefleet) is logged and let through. */
int run_uids_claim(int64_t first, int64_t count, cf_error *err);

/* consumers.c */
int consumers_setup(cf_worker *w, cf_error *err);
rd_kafka_t *consumers_of_topic(const cf_worker *w, size_t topic);
rd_kafka_t *consumers_of_topic_name(const cf_worker *w, const char *topic);
void consumers_take(cf_worker *w);
int consumers_subscribe(cf_worker *w, char *names, size_t nsize);
rd_kafka_resp_err_t consumers_subscribe_one(cf_worker *w, size_t consumer);
/* Watches the consumers join the group (main thread, every turn, a check
 * every 250 ms until all did).  A member that joins without partitions
 * gets no rebalance callback under KIP-848: its member epoch (the group
 * metadata's generation) says it joined, and it is logged as the classic
 * protocol's empty assignment is ("assigned 0 partition(s)").  Returns,
 * under group-protocol auto on KIP-848, whether they have not joined
 * although the broker has answered for CONSUMERS_JOIN_WAIT_US: a broker
 * without KIP-848 is not an error to librdkafka, which finds no
 * ConsumerGroupHeartbeat and looks for another coordinator for ever
 * (Kafka 3.x; a Kafka 4 whose group.coordinator.rebalance.protocols leaves
 * consumer out refuses it with UNSUPPORTED_VERSION, fatal, instead). */
#define CONSUMERS_JOIN_WAIT_US (20 * 1000000LL)
bool consumers_watch_join(cf_worker *w, int64_t now_us);
/* The rebalance callback's note that rk's consumer has an assignment. */
void consumers_joined(cf_worker *w, rd_kafka_t *rk);
/* The first consumer's fatal error (its reason in buf), or 0. */
rd_kafka_resp_err_t consumers_fatal(cf_worker *w, char *buf, size_t size);
void consumers_commit(cf_worker *w, bool async);
bool consumers_close(cf_worker *w, int64_t until);
void consumers_destroy(cf_worker *w);

/* kafka_clients.c */
void kafka_on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque);
/* What a librdkafka error says to an operator; joined: the worker has been
 * assigned partitions (so the broker once took its settings). */
kafka_problem kafka_classify_error(int err, const char *reason, bool joined);
void kafka_on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
int kafka_on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque);
int kafka_conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, cf_error *err);
bool kafka_key_consumer_only(const char *k);
/* How long a client that knows no live broker waits before bootstrapping
 * again (every client of the worker; see kafka_conf_new). */
#define KAFKA_REBOOTSTRAP_MS "3000"
/* Every client of the worker that has forgotten every broker gets its
 * bootstrap servers again (cf_kafka_heal.h).  Main thread. */
void kafka_heal_all(cf_worker *w);
/* The first classic-protocol-only consumer property the operator set
 * (session.timeout.ms and its kind), or NULL. */
const char *kafka_classic_only_key(const cf_kvlist *kafka);
bool kafka_key_producer_only(const char *k);
void kafka_client_id(const cf_worker *w, bool consumer, char *buf, size_t size);
rd_kafka_conf_t *kafka_conf_new(cf_worker *w, bool consumer, const char *own_topic, cf_error *err);
bool kafka_warm_topic(rd_kafka_t *rk, const char *topic);

#endif
