/* The worker's Kafka loop.
 *
 * Threads: the main thread owns both Kafka handles' callbacks (consumer
 * poll, rebalance, delivery reports), the offset trackers and the partition
 * state; slot threads (exec_pool) only run executions and produce their
 * results (rd_kafka_producev is thread-safe).  The main thread sleeps in
 * poll(2) on one eventfd that librdkafka (queue io events), the slots and
 * cf_worker_stop() write to, plus a signalfd.
 *
 * Delivery guarantee: an offset is stored for commit only when every
 * request up to it has a delivered answer: its result, or a dead letter.
 * Each job moves queued -> running -> producing -> delivered, with
 * retry-wait between failed deliveries (backoff; a result that cannot be
 * delivered after RESULT_TRIES becomes a dead letter of its request; a
 * dead letter is retried until it lands while the worker takes no new
 * work).  The only other end is giving up a partition (revoke, shutdown):
 * its jobs are stopped and dropped unmarked, and its next owner reads them
 * again.  Intake pauses at slots + prefetch unanswered requests, so the
 * offset trackers stay bounded.
 */
#include "cf_worker.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_control.h"
#include "cf_log.h"
#include "cf_pipeline.h"
#include "cf_profile.h"
#include "cf_redis.h"
#include "cf_schema.h"
#include "cf_util.h"
#include "exec_pool.h"
#include "observe.h"
#include "offset_tracker.h"
#include "partition_guard.h"
#include "streamer.h"
#include "worker_report.h"
#include "worker_state.h"

#define LOG_SUB "worker"
#define HDR_PREFIX "codefleet-"

typedef enum job_kind {
    JOB_EXECUTE,  /* decoded, admitted: runs in a slot */
    JOB_ANSWERED, /* answered on the main thread (rejected) */
    JOB_DEAD,     /* its answer is a dead letter */
} job_kind;

/* Where a job is.  Every message taken ends in one of two ways: its answer
 * (result or dead letter) is delivered and its offset marked done, or the
 * partition is given up (revoke, shutdown) and the job is dropped without
 * marking, so the next owner reads it again.  Nothing else frees a job. */
typedef enum job_state {
    JOB_QUEUED,     /* admitted, waiting for a slot */
    JOB_RUNNING,    /* in a slot */
    JOB_PRODUCING,  /* its answer is with the producer */
    JOB_RETRY_WAIT, /* its answer failed; produced again at next_try_us */
} job_state;

/* What a slot hands back to the main thread. */
typedef enum handoff_kind {
    HANDOFF_ABANDON, /* cancelled (revoke, shutdown): drop, never mark */
    HANDOFF_FAILED,  /* producing its answer failed at once: retry */
} handoff_kind;

/* The message a job answers with, kept until it is delivered so that a
 * failed delivery can be retried as it was. */
typedef struct job_out {
    const char *topic;
    char *key;
    cf_bytes value;
    rd_kafka_headers_t *hdrs; /* dead letters: origin and reason */
    bool slimmed;             /* a result already cut to fit */
    bool value_dropped;       /* a dead letter already sent without its value */
} job_out;

typedef struct job {
    cf_pool_job pj; /* first: the pool hands this pointer back */
    job_kind kind;
    job_state state;
    size_t topic;       /* index into the worker's request topics */
    char *key;          /* the message's key (pj.key is it qualified by the topic) */
    const cf_profile *profile;
    int32_t partition;
    int64_t offset;
    uint64_t gen; /* assignment generation of the partition when taken */
    cf_request req;
    const cf_backend *backend;
    const char *result_topic; /* req.reply_to or the profile's result topic */
    char *stream_topic;       /* req.stream: result_topic + stream-topic-suffix (owned) */
    volatile int cancel;      /* set by the main thread: stop this execution */
    /* Set (release) by the main thread after cancel_reason, when the stop
     * is its sender's cancel: then it is answered `cancelled`. */
    volatile int user_cancelled;
    char cancel_reason[CF_CANCEL_REASON_MAX + 64];
    bool answered_cancelled;  /* its answer is `cancelled` (for the counters) */
    job_out out;
    /* Bumped (release) just before each produce of out, read (acquire) by
     * the delivery report: the main thread then sees everything the slot
     * wrote into the job, by our own ordering rather than librdkafka's
     * internal hand-offs (ThreadSanitizer saw no order through those). */
    unsigned produced;
    int delivery_tries;       /* failed deliveries of the current answer */
    int64_t next_try_us;      /* JOB_RETRY_WAIT: when (monotonic) */
    bool blocks_intake;       /* a dead letter waiting: the worker takes no work */
    handoff_kind handoff;
    rd_kafka_resp_err_t handoff_err;
    /* Idempotency (slot thread; leased is read by the lease keeper under
     * the worker's lock). */
    bool leased;
    bool has_digest;          /* digest taken at intake (idempotency on) */
    bool unprotected;         /* ran without the store (Redis unreachable) */
    char digest[CF_DIGEST_HEX];
    char token[CF_ID_MAX + 48];
    char lease_key[CF_ID_MAX + 200];   /* fences the run's state writes */
    char lease_value[CF_ID_MAX + 200];
    cf_job_obs obs;           /* trace context and timeline (observe.h) */
    struct job *list_next;    /* handoff or retry list */
} job;

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
} topic_state;

/* What an operator can act on, from a librdkafka error: one line naming
 * what failed and what to check (the raw detail stays at debug level). */
typedef enum kafka_problem {
    KP_NONE,
    KP_UNREACHABLE,
    KP_AUTH,
    KP_ACL,
    KP_TOPIC,
    KP_PROTOCOL,
    KP__COUNT,
} kafka_problem;

struct cf_worker {
    const cf_worker_config *cfg;
    char worker_id[CF_ID_MAX + 1];
    cf_backend_config bcfg;
    /* Helper programs and harnesses this worker uses unless configured:
     * installed ones next to an installed worker, else the build's. */
    char zygote_path[PATH_MAX], container_init_path[PATH_MAX], embed_helper_path[PATH_MAX],
        harness_dir[PATH_MAX];
    cf_pipeline *pipeline;   /* compiled languages, harnesses, cases, collect */
    bool ran;                /* cf_worker_run's shutdown happened */
    bool kafka_closing;      /* ... and reached its flush/commit/close (after the grace) */
    bool consumer_closed;    /* ... and the consumer's close finished */
    rd_kafka_queue_t *close_q; /* the close's queue, served until the consumer is destroyed */
    cf_backend_set *backends;
    rd_kafka_t *consumer;
    rd_kafka_t *producer;
    rd_kafka_queue_t *consumer_q;
    rd_kafka_queue_t *producer_q;
    int wake_fd;
    cf_exec_pool *pool;
    cf_profile_set *profiles;
    cf_profile_env penv;
    topic_state *topics;
    size_t ntopics;
    uint64_t gen_counter;
    bool paused_all;
    bool stopping;
    bool destroying;           /* cf_worker_destroy: failed answers are dropped */
    atomic_int stop_requested;
    volatile int cancel_exec;  /* shutdown: Redis retries stop early */
    size_t inflight;           /* jobs taken and not yet finished (main thread) */
    size_t intake_blocked;     /* dead letters waiting for the broker (main thread) */
    job *retry;                /* answers waiting to be produced again (main thread) */
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
    bool keeper_stop;          /* guarded by lock */
    pthread_cond_t keeper_cond;
    /* Cancels: see control_start. */
    rd_kafka_t *control;
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
    uint64_t n_received, n_results, n_rejected, n_dead, n_abandoned, n_retries;
};

/* ---------------------------------------------------------------- helpers */

static void wake(cf_worker *w)
{
    uint64_t one = 1;
    ssize_t r = write(w->wake_fd, &one, sizeof(one));
    (void)r; /* EAGAIN means a wake-up is already pending */
}

static void pool_notify(void *arg)
{
    wake(arg);
}

static void out_clear(job_out *o)
{
    free(o->key);
    free(o->value.data);
    if (o->hdrs)
        rd_kafka_headers_destroy(o->hdrs);
    memset(o, 0, sizeof(*o));
}

static void job_free(job *j)
{
    if (!j)
        return;
    cf_request_clear(&j->req);
    out_clear(&j->out);
    free(j->stream_topic);
    free(j->pj.key);
    free(j->key);
    free(j);
}

/* The index of a request topic, or -1. */
static long topic_index(const cf_worker *w, const char *name)
{
    for (size_t i = 0; name && i < w->ntopics; i++)
        if (strcmp(w->topics[i].name, name) == 0)
            return (long)i;
    return -1;
}

static part_state *part_get(cf_worker *w, size_t topic, int32_t partition, bool create)
{
    if (topic >= w->ntopics || partition < 0 || partition >= MAX_PARTITIONS)
        return NULL;
    topic_state *t = &w->topics[topic];
    if ((size_t)partition >= t->nparts) {
        if (!create)
            return NULL;
        size_t n = (size_t)partition + 1;
        part_state *p = realloc(t->parts, n * sizeof(*p));
        if (!p)
            return NULL;
        memset(p + t->nparts, 0, (n - t->nparts) * sizeof(*p));
        t->parts = p;
        t->nparts = n;
    }
    return &t->parts[partition];
}

static part_state *part_of(cf_worker *w, const char *topic, int32_t partition, bool create)
{
    long ti = topic_index(w, topic);
    return ti < 0 ? NULL : part_get(w, (size_t)ti, partition, create);
}

/* The pool knows a job's partition only as one number: topic and
 * partition folded together (CF_PROFILE_MAX * MAX_PARTITIONS fits). */
static int32_t lane_of(size_t topic, int32_t partition)
{
    return (int32_t)(topic * MAX_PARTITIONS + (size_t)partition);
}

/* The end of a job: delivered (its offset is marked done if the partition
 * is still ours) or dropped with its partition (never marked: the next
 * owner reads it again).  Main thread only. */
static void job_finished(cf_worker *w, job *j, bool delivered)
{
    part_state *ps = part_get(w, j->topic, j->partition, false);
    if (delivered && ps && ps->assigned && ps->gen == j->gen)
        cf_offset_tracker_done(ps->tracker, j->offset);
    if (!delivered)
        w->n_abandoned++;
    if (j->blocks_intake)
        w->intake_blocked--;
    w->inflight--;
    job_free(j);
}

/* ---------------------------------------------------------------- producer */

/* Results are batched only while there is a backlog.  The producer lingers
 * (result-batch, its linger.ms) so that under load many results share one
 * produce request: the broker's CPU per request is mostly per produce
 * request.  Without a backlog nothing should wait: whoever hands a result
 * to the producer then kicks this thread, which calls rd_kafka_flush(), the
 * one call that makes librdkafka send at once despite linger.ms.  It runs
 * here because flush blocks until the reports are served; delivery reports
 * are events (rd_kafka_conf_set_events), so flush only waits and the main
 * thread keeps serving them (producer_serve). */
static void *flusher_main(void *arg)
{
    cf_worker *w = arg;
    pthread_mutex_lock(&w->flush_mu);
    for (;;) {
        while (!w->flush_wanted && !w->flush_stop)
            pthread_cond_wait(&w->flush_cv, &w->flush_mu);
        if (w->flush_stop)
            break;
        w->flush_wanted = false;
        pthread_mutex_unlock(&w->flush_mu);
        /* Bounded: with the broker gone this would wait for the message
         * timeout; a new kick starts another round. */
        (void)rd_kafka_flush(w->producer, 100);
        pthread_mutex_lock(&w->flush_mu);
    }
    pthread_mutex_unlock(&w->flush_mu);
    return NULL;
}

static void flusher_kick(cf_worker *w)
{
    if (!w->flusher_started)
        return;
    pthread_mutex_lock(&w->flush_mu);
    w->flush_wanted = true;
    pthread_cond_signal(&w->flush_cv);
    pthread_mutex_unlock(&w->flush_mu);
}

/* After a result went to the producer: send it now unless requests wait
 * for a slot, whose results will soon follow it. */
static void result_handed_over(cf_worker *w)
{
    /* Without a linger librdkafka sends at once by itself. */
    if (w->cfg->result_batch_us > 0 && (!w->pool || cf_exec_pool_queued(w->pool) == 0))
        flusher_kick(w);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);
static void on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque);

#define PRODUCER_SERVE_MAX 1000

/* Serves the producer's events on the main thread: delivery reports and
 * errors.  Waits up to timeout_ms for the first one; at most a bounded
 * number per call so intake is never starved (then the main loop is woken
 * again: librdkafka signals the queue only when something new arrives).
 * Returns how many were served. */
static int producer_serve(cf_worker *w, int timeout_ms)
{
    rd_kafka_event_t *ev;
    int n = 0;
    for (; n < PRODUCER_SERVE_MAX && (ev = rd_kafka_queue_poll(w->producer_q, n == 0 ? timeout_ms : 0)) != NULL; n++) {
        switch (rd_kafka_event_type(ev)) {
        case RD_KAFKA_EVENT_DR: {
            const rd_kafka_message_t *m;
            while ((m = rd_kafka_event_message_next(ev)) != NULL)
                on_delivery(w->producer, m, w);
            break;
        }
        case RD_KAFKA_EVENT_ERROR:
            on_kafka_error(w->producer,
                           rd_kafka_event_error_is_fatal(ev) ? RD_KAFKA_RESP_ERR__FATAL : rd_kafka_event_error(ev),
                           rd_kafka_event_error_string(ev), w);
            break;
        default:
            break;
        }
        rd_kafka_event_destroy(ev);
    }
    if (n == PRODUCER_SERVE_MAX)
        wake(w);
    return n;
}

/* Everything the producer holds delivered (or timeout_ms passed), its
 * reports served: rd_kafka_flush alone only waits when reports are
 * events, so the flusher flushes while this thread serves. */
static rd_kafka_resp_err_t producer_drain(cf_worker *w, int timeout_ms)
{
    int64_t until = cf_mono_us() + (int64_t)timeout_ms * 1000;
    while (rd_kafka_outq_len(w->producer) > 0 && cf_mono_us() < until) {
        flusher_kick(w);
        producer_serve(w, 10);
    }
    producer_serve(w, 0);
    return rd_kafka_outq_len(w->producer) > 0 ? RD_KAFKA_RESP_ERR__TIMED_OUT : RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* ---------------------------------------------------------------- results */

static void result_fill_meta(cf_worker *w, const job *j, cf_result *res)
{
    if (!res->id && j->req.id)
        cf_str_set(&res->id, j->req.id);
    if (!res->meta.backend && j->backend)
        cf_str_set(&res->meta.backend, j->backend->ops->name);
    if (!res->meta.isolation && j->backend)
        cf_str_set(&res->meta.isolation, j->backend->caps.isolation);
    if (!res->meta.language && j->req.language != CF_LANG_NONE)
        cf_str_set(&res->meta.language, cf_language_name(j->req.language));
    cf_str_set(&res->meta.worker, w->worker_id);
    char tp[64];
    cf_job_obs_traceparent(&j->obs, tp, sizeof(tp));
    cf_str_set(&res->meta.traceparent, tp);
    if (j->req.identity)
        cf_str_set(&res->meta.identity, j->req.identity);
    res->finished_us = cf_now_us();
}

/* Hands the job's answer (j->out) to the producer, which copies it: the job
 * keeps its own copy until the delivery report, to retry with.  on_main:
 * the caller is the main thread and may serve the producer queue while the
 * local queue is full; slot threads sleep instead. */
static rd_kafka_resp_err_t produce_out(cf_worker *w, job *j, bool on_main)
{
    const job_out *o = &j->out;
    j->state = JOB_PRODUCING;
    __atomic_add_fetch(&j->produced, 1, __ATOMIC_RELEASE);
    for (int tries = 0;; tries++) {
        rd_kafka_resp_err_t e;
        rd_kafka_headers_t *copy = o->hdrs ? rd_kafka_headers_copy(o->hdrs) : NULL;
        const char *key = o->key;
        if (copy)
            e = rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(o->topic), RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
                                  RD_KAFKA_V_VALUE(o->value.data, o->value.len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_HEADERS(copy), RD_KAFKA_V_OPAQUE(j), RD_KAFKA_V_END);
        else
            e = rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(o->topic), RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
                                  RD_KAFKA_V_VALUE(o->value.data, o->value.len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_OPAQUE(j), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
            result_handed_over(w);
            return e;
        }
        if (copy)
            rd_kafka_headers_destroy(copy);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || tries > 6000) {
            cf_log_warn(LOG_SUB, "produce to %s failed: %s", o->topic, rd_kafka_err2str(e));
            return e;
        }
        if (on_main)
            producer_serve(w, 10);
        else
            nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
}

static bool too_large(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE || e == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

/* A slot gives a job back to the main thread. */
static void hand_back(cf_worker *w, job *j, handoff_kind kind, rd_kafka_resp_err_t e)
{
    j->handoff = kind;
    j->handoff_err = e;
    pthread_mutex_lock(&w->lock);
    j->list_next = w->handoff;
    w->handoff = j;
    pthread_mutex_unlock(&w->lock);
    wake(w);
}

static void answer_failed(cf_worker *w, job *j, rd_kafka_resp_err_t e);

/* Produces j->out; an immediate failure goes the way of a failed delivery. */
static void send_out(cf_worker *w, job *j, bool on_main)
{
    rd_kafka_resp_err_t e = produce_out(w, j, on_main);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    if (on_main)
        answer_failed(w, j, e);
    else
        hand_back(w, j, HANDOFF_FAILED, e);
}

/* Appends a warning diagnostic (best effort: dropped when out of memory). */
static void add_warning(cf_result *res, const char *msg)
{
    cf_diagnostic *d = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*d));
    if (!d)
        return;
    res->diagnostics = d;
    memset(&d[res->n_diagnostics], 0, sizeof(*d));
    if (cf_str_set(&d[res->n_diagnostics].level, "warning") == 0 &&
        cf_str_set(&d[res->n_diagnostics].message, msg) == 0)
        res->n_diagnostics++;
}

#define SLIM_STREAM_BYTES (64 * 1024)

/* A result the result topic refused as too large keeps its status and
 * metadata but loses most of its bulk, and says so: better a truncated
 * answer than none (or an endless redelivery of the request). */
/* Cuts stdout and stderr to each bytes (marking them truncated) and drops
 * a structured output larger than that; true when the output was dropped. */
/* Cases and collected files share the budget: each case gets its part,
 * the files one budget between them. */
static bool cut_cases_and_files(cf_result *res, size_t each)
{
    bool dropped = false;
    size_t share = res->n_cases ? each / res->n_cases : each;
    if (share < 64)
        share = 64;
    for (size_t i = 0; i < res->n_cases; i++) {
        cf_case_result *c = &res->cases[i];
        if (c->stdout_data.len > share) {
            c->stdout_data.len = share;
            c->stdout_truncated = true;
        }
        if (c->stderr_data.len > share) {
            c->stderr_data.len = share;
            c->stderr_truncated = true;
        }
        if (c->output.len > share) {
            free(c->output.data);
            c->output = (cf_bytes){0};
            dropped = true;
        }
    }
    size_t budget = each;
    for (size_t i = 0; i < res->n_files; i++) {
        cf_out_file *f = &res->files[i];
        if (f->content.len > budget) {
            f->content.len = budget;
            f->truncated = true;
            res->files_truncated = true;
        }
        budget -= f->content.len;
    }
    return dropped;
}

static bool cut_bulk(cf_result *res, size_t each)
{
    bool dropped_cases = cut_cases_and_files(res, each);
    if (res->stdout_data.len > each) {
        res->stdout_data.len = each;
        res->stdout_truncated = true;
    }
    if (res->stderr_data.len > each) {
        res->stderr_data.len = each;
        res->stderr_truncated = true;
    }
    if (res->output.len <= each)
        return dropped_cases;
    free(res->output.data);
    res->output.data = NULL;
    res->output.len = 0;
    return true;
}

static void slim_result(cf_result *res, size_t refused_bytes)
{
    bool dropped_output = cut_bulk(res, SLIM_STREAM_BYTES);
    char msg[256];
    snprintf(msg, sizeof(msg),
             "the result (%zu bytes) exceeded the result topic's message size limit: stdout and stderr were cut "
             "to %d KiB%s",
             refused_bytes, SLIM_STREAM_BYTES / 1024, dropped_output ? " and the structured output dropped" : "");
    add_warning(res, msg);
}

/* Encodes res into j->out (for j->result_topic).  Only allocation failure
 * can fail an encode; then a bare internal_error is tried. */
static int set_result_out(cf_worker *w, job *j, cf_result *res)
{
    result_fill_meta(w, j, res);
    /* What the metrics count once it is delivered: names of the worker's
     * own (enum names, its backends), never a request's strings. */
    j->obs.status = cf_status_name(res->status);
    j->obs.backend = j->backend ? j->backend->ops->name : "none";
    j->obs.language = j->req.language != CF_LANG_NONE ? cf_language_name(j->req.language) : "none";
    j->obs.dead_letter = false;
    j->obs.produce_ns = cf_observe_now_ns();
    cf_bytes enc = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_result_encode(res, &enc, &err) < 0) {
        cf_log_error(LOG_SUB, "request %s: encoding result: %s", j->req.id ? j->req.id : "?", err.msg);
        cf_result bare = {0};
        bare.status = CF_STATUS_INTERNAL_ERROR;
        cf_str_set(&bare.id, res->id);
        cf_result_set_reason(&bare, "worker could not encode the result: %s", err.msg);
        int r = cf_result_encode(&bare, &enc, &err);
        cf_result_clear(&bare);
        if (r < 0)
            return -1;
    }
    free(j->out.value.data);
    j->out.value = enc;
    j->out.topic = j->result_topic;
    if (!j->out.key && res->id)
        j->out.key = cf_strdup(res->id);
    return 0;
}

/* Sends res as the job's answer.  When not even an encoding can be made
 * (out of memory), the job is dropped unmarked: the partition's position
 * stays before it and the request is read again after a restart or
 * rebalance; the worker logs it loudly. */
static void send_result(cf_worker *w, job *j, cf_result *res, bool on_main)
{
    if (set_result_out(w, j, res) < 0) {
        cf_log_error(LOG_SUB, "request %s: no memory for its result: left for redelivery", j->req.id);
        if (on_main)
            job_finished(w, j, false);
        else
            hand_back(w, j, HANDOFF_ABANDON, 0);
        return;
    }
    send_out(w, j, on_main);
}

static void answer_rejected(cf_worker *w, job *j, const char *id, const char *reason)
{
    cf_result res = {0};
    res.status = CF_STATUS_REJECTED;
    cf_str_set(&res.id, id);
    cf_result_set_reason(&res, "%s", reason);
    j->kind = JOB_ANSWERED;
    w->n_rejected++;
    cf_log_info(LOG_SUB, "request %s rejected: %s", id, reason);
    send_result(w, j, &res, true);
    cf_result_clear(&res);
}

/* Answers j `cancelled` without running it (main thread). */
static void answer_cancelled(cf_worker *w, job *j, const char *reason)
{
    cf_result res = {0};
    res.status = CF_STATUS_CANCELLED;
    cf_str_set(&res.id, j->req.id);
    cf_result_set_reason(&res, "%s", reason);
    j->kind = JOB_ANSWERED;
    j->answered_cancelled = true;
    cf_log_info(LOG_SUB, "request %s cancelled while it waited for a slot", j->req.id);
    send_result(w, j, &res, true);
    cf_result_clear(&res);
}

static const memo_entry *memo_find(cf_worker *w, size_t topic, const char *id);
static void set_flag(volatile int *f);

/* Makes bytes the job's answer as a dead letter: origin and reason in
 * headers. */
static int set_dead_letter_out(cf_worker *w, job *j, const char *key, const void *value, size_t len,
                               const char *reason)
{
    out_clear(&j->out);
    j->kind = JOB_DEAD;
    j->delivery_tries = 0;
    j->obs.dead_letter = true;
    j->obs.produce_ns = cf_observe_now_ns();
    const char *origin = w->topics[j->topic].name;
    cf_log_warn(LOG_SUB, "dead-lettering %s[%" PRId32 "]@%" PRId64 ": %s", origin, j->partition, j->offset, reason);
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);
    char num[32];
    rd_kafka_header_add(h, HDR_PREFIX "origin-topic", -1, origin, -1);
    snprintf(num, sizeof(num), "%" PRId32, j->partition);
    rd_kafka_header_add(h, HDR_PREFIX "origin-partition", -1, num, -1);
    snprintf(num, sizeof(num), "%" PRId64, j->offset);
    rd_kafka_header_add(h, HDR_PREFIX "origin-offset", -1, num, -1);
    rd_kafka_header_add(h, HDR_PREFIX "reason", -1, reason, -1);
    rd_kafka_header_add(h, HDR_PREFIX "worker", -1, w->worker_id, -1);
    j->out.hdrs = h;
    j->out.topic = w->cfg->dlq_topic;
    j->out.key = key ? cf_strdup(key) : NULL;
    if (len) {
        j->out.value.data = malloc(len);
        if (!j->out.value.data)
            return -1;
        memcpy(j->out.value.data, value, len);
        j->out.value.len = len;
    }
    return 0;
}

static void dead_letter(cf_worker *w, job *j, const rd_kafka_message_t *m, const char *reason)
{
    char *key = m->key_len ? cf_strndup(m->key, m->key_len) : NULL;
    int rc = set_dead_letter_out(w, j, key, m->payload, m->len, reason);
    free(key);
    if (rc < 0) {
        cf_log_error(LOG_SUB, "out of memory dead-lettering offset %" PRId64 ": left for redelivery", j->offset);
        job_finished(w, j, false);
        return;
    }
    send_out(w, j, true);
}

/* Backoff before producing a failed answer again: 100 ms doubling, capped
 * at 10 s (results) or 30 s (dead letters, retried until they land). */
static int64_t retry_delay_us(const job *j)
{
    int n = j->delivery_tries < 12 ? j->delivery_tries : 12;
    int64_t d = 100000LL << (n > 0 ? n - 1 : 0);
    int64_t cap = j->kind == JOB_DEAD ? 30000000 : 10000000;
    return d < cap ? d : cap;
}

static void schedule_retry(cf_worker *w, job *j, int64_t delay_us)
{
    j->state = JOB_RETRY_WAIT;
    j->next_try_us = cf_mono_us() + delay_us;
    j->list_next = w->retry;
    w->retry = j;
    w->n_retries++;
}

#define RESULT_TRIES 5

/* An answer could not be delivered (main thread).  A result is adjusted
 * when that can help (too large: cut; reply_to topic refused: the default
 * topic with reply_to_error) and retried with backoff; after RESULT_TRIES
 * the request itself is dead-lettered.  A dead letter is retried until it
 * lands, and while one waits the worker takes no new work: it never skips
 * an offset, and no offset waits longer than the broker does. */
/* Whether the job's partition is still ours as it was when the job was
 * taken (not revoked, not reassigned since). */
static bool job_owned(cf_worker *w, const job *j)
{
    part_state *ps = part_get(w, j->topic, j->partition, false);
    return ps && ps->assigned && ps->gen == j->gen;
}

static void answer_failed(cf_worker *w, job *j, rd_kafka_resp_err_t e)
{
    if (!job_owned(w, j) || w->destroying) {
        /* Its partition went to another worker, which reads the request
         * again: retrying here would only answer it twice. */
        job_finished(w, j, false);
        return;
    }
    j->delivery_tries++;
    cf_observe_produce_retry(w->obs);
    cf_log_warn(LOG_SUB, "delivery of %s for %s failed (try %d): %s", j->kind == JOB_DEAD ? "dead letter" : "result",
                j->req.id ? j->req.id : "?", j->delivery_tries, rd_kafka_err2str(e));
    if (rd_kafka_fatal_error(w->producer, NULL, 0)) {
        job_finished(w, j, false); /* the worker stops; the request is redelivered */
        return;
    }
    if (j->kind == JOB_DEAD) {
        if (too_large(e) && !j->out.value_dropped) {
            free(j->out.value.data);
            j->out.value = (cf_bytes){0};
            j->out.value_dropped = true;
            rd_kafka_header_add(j->out.hdrs, HDR_PREFIX "value-dropped", -1, "too large for the dead-letter topic",
                                -1);
            schedule_retry(w, j, 0);
            return;
        }
        if (!j->blocks_intake) {
            j->blocks_intake = true;
            w->intake_blocked++;
            cf_log_error(LOG_SUB, "the dead-letter topic %s cannot be written (%s): taking no work until it can",
                         w->cfg->dlq_topic, rd_kafka_err2str(e));
        }
        schedule_retry(w, j, retry_delay_us(j));
        return;
    }
    /* A result. */
    bool to_default = j->out.topic != w->topics[j->topic].results;
    if ((too_large(e) && !j->out.slimmed) || to_default) {
        cf_result res = {0};
        cf_decode_limits lim = cf_decode_limits_default;
        lim.max_total_bytes = lim.max_bin_bytes = j->out.value.len;
        if (cf_result_decode(j->out.value.data, j->out.value.len, &lim, &res, NULL) == 0) {
            if (too_large(e)) {
                slim_result(&res, j->out.value.len);
                j->out.slimmed = true;
            } else {
                /* A reply_to topic that does not take it: the profile's
                 * result topic, saying why. */
                const char *results = w->topics[j->topic].results;
                char why[300];
                snprintf(why, sizeof(why), "reply_to topic '%.64s' could not take the result (%s): sent to '%s'",
                         j->out.topic, rd_kafka_err2str(e), results);
                free(res.reply_to_error);
                res.reply_to_error = cf_strdup(why);
                j->result_topic = results;
            }
            int rc = set_result_out(w, j, &res);
            cf_result_clear(&res);
            if (rc == 0) {
                schedule_retry(w, j, 0);
                return;
            }
        }
    }
    if (j->delivery_tries >= RESULT_TRIES) {
        /* The result cannot be delivered: dead-letter the request itself
         * (re-encoded) so it is neither lost nor retried forever. */
        char reason[300];
        snprintf(reason, sizeof(reason), "result could not be delivered to %s: %s", j->out.topic, rd_kafka_err2str(e));
        cf_bytes enc = {0};
        if (cf_request_encode(&j->req, &enc, NULL) < 0 ||
            set_dead_letter_out(w, j, j->key, enc.data, enc.len, reason) < 0) {
            free(enc.data);
            cf_log_error(LOG_SUB, "request %s: out of memory dead-lettering: left for redelivery", j->req.id);
            job_finished(w, j, false);
            return;
        }
        free(enc.data);
        schedule_retry(w, j, 0);
        return;
    }
    schedule_retry(w, j, retry_delay_us(j));
}

/* Produces the answers whose retry time has come (main thread). */
static void run_retries(cf_worker *w)
{
    int64_t now = cf_mono_us();
    job *due = NULL;
    for (job **pp = &w->retry; *pp;) {
        job *j = *pp;
        if (j->next_try_us <= now || w->stopping) {
            *pp = j->list_next;
            j->list_next = due;
            due = j;
        } else {
            pp = &j->list_next;
        }
    }
    while (due) {
        job *j = due;
        due = j->list_next;
        j->list_next = NULL;
        if (job_owned(w, j))
            send_out(w, j, true);
        else
            job_finished(w, j, false);
    }
}

/* Delivery report: runs on the main thread from producer_serve. */
/* Marks the messages of worker reports (not jobs) in delivery reports. */
static char report_tag;
static char chunk_tag; /* the opaque of output chunks */

static void chunk_failed(cf_worker *w, const char *topic, rd_kafka_resp_err_t e)
{
    uint64_t n = atomic_fetch_add(&w->chunks_failed, 1) + 1;
    int64_t now = cf_mono_us(), last = atomic_load(&w->chunk_fail_logged_us);
    if ((last == 0 || now - last > 10 * 1000000LL) && atomic_compare_exchange_strong(&w->chunk_fail_logged_us, &last, now))
        cf_log_warn(LOG_SUB, "output chunk not published to %s: %s (%" PRIu64 " so far; the results still carry "
                    "all output)", topic, rd_kafka_err2str(e), n);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    cf_worker *w = opaque;
    if (m->_private == &report_tag) {
        /* Purged: the worker is stopping with the broker gone.  Reports
         * repeat every report-interval: their failure is said once every
         * 10 minutes. */
        static int64_t report_fail_logged_us;
        int64_t now_us = cf_mono_us();
        bool failed = m->err && m->err != RD_KAFKA_RESP_ERR__PURGE_QUEUE && m->err != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
        if (failed && (report_fail_logged_us == 0 || now_us - report_fail_logged_us > 600 * 1000000LL)) {
            report_fail_logged_us = now_us;
            cf_log_warn(LOG_SUB,
                        "worker report not published to %s: %s (codefleet doctor will not see what this worker "
                        "serves: check that the topic exists and this principal may write it)",
                        rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err));
        }
        return;
    }
    if (m->_private == &chunk_tag) {
        if (m->err)
            chunk_failed(w, rd_kafka_topic_name(m->rkt), m->err);
        return;
    }
    job *j = m->_private;
    if (!j)
        return;
    (void)__atomic_load_n(&j->produced, __ATOMIC_ACQUIRE); /* pairs with produce_out's */
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        cf_observe_answered(w->obs, &j->obs, j->req.id);
        if (j->kind == JOB_DEAD)
            w->n_dead++;
        else
            w->n_results++;
        if (j->answered_cancelled)
            w->n_cancelled++;
        job_finished(w, j, true);
        return;
    }
    answer_failed(w, j, m->err);
}

/* ---------------------------------------------------------------- admission */

static int64_t min_set(int64_t a, int64_t b)
{
    return b > 0 && b < a ? b : a;
}

/* Checks the request against its profile (what the operator allows this
 * topic's tenant), fills defaults, checks the worker's maxima and the
 * chosen backend's capabilities.  Returns -1 with a reason to reject. */
static int admit(cf_worker *w, job *j, char *reason, size_t rsz)
{
    const cf_worker_config *c = w->cfg;
    const cf_profile *prof = j->profile;
    cf_request *req = &j->req;
    const char *bname = cf_profile_backend_for(prof, req);
    cf_policy *p = &req->policy;
    /* Defaults first, never above the profile's maxima. */
    if (p->timeout_us == 0)
        p->timeout_us = min_set(c->default_timeout_us, prof->max_timeout_us);
    if (p->max_stdout_bytes == 0)
        p->max_stdout_bytes = min_set(c->default_output_bytes, prof->max_output_bytes);
    if (p->max_stderr_bytes == 0)
        p->max_stderr_bytes = min_set(c->default_output_bytes, prof->max_output_bytes);
    if (cf_profile_admit(prof, w->profiles, bname, req, reason, rsz) < 0)
        return -1;
    j->backend = cf_backend_set_select_as(w->backends, bname, req, reason, rsz);
    if (!j->backend)
        return -1;
    if (req->reply_to)
        j->result_topic = req->reply_to;
    if (req->stream) {
        const char *suffix = c->stream_topic_suffix;
        if (!suffix || !suffix[0]) {
            snprintf(reason, rsz, "stream: streaming is off on this worker (stream-topic-suffix is empty)");
            return -1;
        }
        free(j->stream_topic);
        size_t tl = strlen(j->result_topic) + strlen(suffix) + 1;
        j->stream_topic = malloc(tl);
        if (j->stream_topic)
            snprintf(j->stream_topic, tl, "%s%s", j->result_topic, suffix);
        else {
            snprintf(reason, rsz, "stream: out of memory");
            return -1;
        }
        if (!cf_profile_output_topic_ok(prof, w->profiles, j->stream_topic, reason, rsz))
            return -1;
    }
    if (p->timeout_us > c->max_timeout_us) {
        snprintf(reason, rsz, "policy.timeout_us %" PRId64 " exceeds this worker's maximum %" PRId64, p->timeout_us,
                 c->max_timeout_us);
        return -1;
    }
    if (p->max_stdout_bytes > c->max_output_bytes || p->max_stderr_bytes > c->max_output_bytes) {
        snprintf(reason, rsz, "policy.max_stdout_bytes/max_stderr_bytes exceed this worker's maximum %" PRId64,
                 c->max_output_bytes);
        return -1;
    }
    if (p->cpu_time_us > c->max_timeout_us) {
        snprintf(reason, rsz, "policy.cpu_time_us %" PRId64 " exceeds this worker's maximum %" PRId64, p->cpu_time_us,
                 c->max_timeout_us);
        return -1;
    }
    const struct {
        const char *name;
        int64_t v, max;
    } caps[] = {{"memory_bytes", p->memory_bytes, c->max_memory_bytes},
                {"max_processes", p->max_processes, c->max_processes},
                {"max_file_size_bytes", p->max_file_size_bytes, c->max_file_size_bytes}};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
        if (caps[i].v > caps[i].max || caps[i].v < 0) {
            snprintf(reason, rsz, "policy.%s %" PRId64 " exceeds this worker's maximum %" PRId64, caps[i].name,
                     caps[i].v, caps[i].max);
            return -1;
        }
    if (cf_wstate_admit(req, w->have_redis, reason, rsz) < 0)
        return -1;
    return cf_policy_check(&j->backend->caps, j->backend->ops->name, req, reason, rsz);
}

static bool deadline_passed(const cf_request *req, char *reason, size_t rsz)
{
    if (req->deadline_us <= 0)
        return false;
    int64_t now = cf_now_us();
    if (now <= req->deadline_us)
        return false;
    char ago[32];
    cf_format_duration(now - req->deadline_us, ago, sizeof(ago));
    snprintf(reason, rsz, "deadline passed %s before execution could start", ago);
    return true;
}

/* A partition's tracker holds every offset from its oldest unanswered one
 * on, answered or not: one long request at the head and many short ones
 * behind it fill it although few are unanswered.  At tracker_soft the
 * partition is held (paused alone) until the head moves; the hard cap only
 * guards against what is already fetched. */
static size_t tracker_soft(const cf_worker *w)
{
    size_t n = (size_t)(4 * (w->cfg->slots + w->cfg->prefetch) + 64);
    return n > 10000 ? n : 10000;
}

static size_t tracker_cap(const cf_worker *w)
{
    return 2 * tracker_soft(w) + 1024;
}

static void pause_one(cf_worker *w, size_t t, int32_t p, bool pause)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->topics[t].name, p);
    rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(w->consumer, l) : rd_kafka_resume_partitions(w->consumer, l);
    if (e)
        cf_log_warn("kafka", "%s %s[%" PRId32 "]: %s", pause ? "pausing" : "resuming", w->topics[t].name, p,
                    rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

/* Holds a partition whose tracker reached tracker_soft; releases held ones
 * whose tracker drained to half of it. */
static void hold_partitions(cf_worker *w)
{
    size_t soft = tracker_soft(w);
    for (size_t t = 0; t < w->ntopics; t++)
        for (size_t p = 0; p < w->topics[t].nparts; p++) {
            part_state *ps = &w->topics[t].parts[p];
            if (!ps->assigned || !ps->tracker)
                continue;
            size_t pending = cf_offset_tracker_pending(ps->tracker);
            if (!ps->held && pending >= soft) {
                cf_log_warn(LOG_SUB, "%s[%zu]: %zu offsets behind its oldest unanswered request: holding the "
                            "partition until it is answered", w->topics[t].name, p, pending);
                ps->held = true;
                if (!ps->paused) {
                    pause_one(w, t, (int32_t)p, true);
                    ps->paused = true;
                }
            } else if (ps->held && pending <= soft / 2) {
                ps->held = false;
                if (ps->paused && !w->paused_all && !w->stopping) {
                    pause_one(w, t, (int32_t)p, false);
                    ps->paused = false;
                }
            }
        }
}

/* Makes the consumer read a partition again from offset: a message we
 * could not take (tracker full, no memory) must not be skipped. */
static void rewind_partition(cf_worker *w, const char *topic, int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    rd_kafka_error_t *e = rd_kafka_seek_partitions(w->consumer, l, 0);
    if (e) {
        cf_log_error("kafka", "rewinding %s[%" PRId32 "] to %" PRId64 ": %s", topic, partition, offset,
                     rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static void on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque);

/* Takes one message: every path ends in an answer (result or dead letter)
 * or, if the message cannot even be recorded, a rewind to it. */
static void handle_message_traced(cf_worker *w, rd_kafka_message_t *m);

static void handle_message(cf_worker *w, rd_kafka_message_t *m)
{
    handle_message_traced(w, m);
    cf_job_obs_log(NULL);
}

static void handle_message_traced(cf_worker *w, rd_kafka_message_t *m)
{
    if (m->err) {
        /* The same one-line explanations as the clients' errors. */
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            on_kafka_error(w->consumer, m->err, rd_kafka_message_errstr(m), w);
        return;
    }
    const char *tname = m->rkt ? rd_kafka_topic_name(m->rkt) : NULL;
    long ti = topic_index(w, tname);
    part_state *ps = ti < 0 ? NULL : part_get(w, (size_t)ti, m->partition, false);
    if (!ps || !ps->assigned || w->stopping)
        return; /* not ours (any more): not tracked, so never committed */
    job *j = calloc(1, sizeof(*j));
    int added = j ? cf_offset_tracker_add(ps->tracker, m->offset) : -2;
    if (added >= -1 && w->guard) {
        int step = cf_pguard_taken(w->guard, &ps->guard, tname, m->partition, m->offset, cf_mono_us());
        if (step >= 0) {
            cf_log_warn(LOG_SUB, "partition guard: %s[%" PRId32 "] is moving again after the %s step", tname,
                        m->partition, cf_pguard_step_name((cf_pguard_step)step));
            w->report_next_us = 0;
        }
    }
    if (added == -1) {
        cf_log_debug(LOG_SUB, "partition %" PRId32 " offset %" PRId64 " seen already", m->partition, m->offset);
        free(j);
        return;
    }
    if (added < 0) {
        cf_log_error(LOG_SUB, "cannot take %s[%" PRId32 "]@%" PRId64 " (%zu pending, or no memory): reading it again",
                     tname, m->partition, m->offset, cf_offset_tracker_pending(ps->tracker));
        free(j);
        rewind_partition(w, tname, m->partition, m->offset);
        return;
    }
    w->n_received++;
    w->inflight++;
    int64_t msg_ts = rd_kafka_message_timestamp(m, NULL);
    cf_job_obs_begin(&j->obs, NULL, msg_ts > 0 ? msg_ts : 0);
    if (!ps->held && cf_offset_tracker_pending(ps->tracker) >= tracker_soft(w))
        hold_partitions(w);
    j->topic = (size_t)ti;
    j->profile = w->topics[ti].profile;
    j->partition = m->partition;
    j->offset = m->offset;
    j->gen = ps->gen;
    j->result_topic = w->topics[ti].results;
    j->pj.partition = lane_of((size_t)ti, m->partition);
    if (m->key_len) {
        /* Requests of one key run in order; keys of different topics
         * (tenants) never wait for each other. */
        j->key = cf_strndup(m->key, m->key_len);
        size_t n = m->key_len + 16;
        j->pj.key = j->key ? malloc(n) : NULL;
        if (j->pj.key)
            snprintf(j->pj.key, n, "%zu/%s", (size_t)ti, j->key);
    }

    char reason[600];
    cf_error err;
    cf_error_clear(&err);
    if ((int64_t)m->len > w->cfg->max_request_bytes) {
        snprintf(reason, sizeof(reason), "request of %zu bytes exceeds this worker's max-request of %" PRId64 " bytes",
                 m->len, w->cfg->max_request_bytes);
    } else {
        cf_decode_limits lim = cf_decode_limits_default;
        lim.max_total_bytes = (size_t)w->cfg->max_request_bytes;
        if (cf_request_decode(m->payload, m->len, &lim, &j->req, &err) == 0) {
            /* Its caller's trace, continued: this thread's lines about it
             * carry the trace (cleared by handle_message). */
            int64_t taken = j->obs.taken_ns;
            cf_job_obs_begin(&j->obs, &j->req, msg_ts > 0 ? msg_ts : 0);
            j->obs.taken_ns = taken;
            cf_job_obs_log(&j->obs);
            /* The digest is of the request as sent, before admission fills
             * defaults (which a configuration change could alter between
             * two deliveries of one message). */
            if (w->idempotent) {
                cf_error derr;
                cf_error_clear(&derr);
                j->has_digest = cf_request_digest(&j->req, j->digest, &derr) == 0;
                if (!j->has_digest)
                    cf_log_warn(LOG_SUB, "request %s: no digest (%s): it runs without the idempotency store",
                                j->req.id, derr.msg);
            }
            /* Its sender cancelled it before it came here: it goes the
             * usual way (admission: its reply_to; the slot: a result the
             * idempotency store holds is replayed, a redelivered request
             * that already finished is not contradicted) but never runs. */
            const memo_entry *me = memo_find(w, ti, j->req.id);
            if (me) {
                cf_strlcpy(j->cancel_reason, me->reason, sizeof(j->cancel_reason));
                __atomic_store_n(&j->user_cancelled, 1, __ATOMIC_RELEASE);
                set_flag(&j->cancel);
            }
            /* With the store, a passed deadline is judged in the slot, after
             * the store is asked: an answered request is replayed, not
             * refused. */
            if ((!j->has_digest && deadline_passed(&j->req, reason, sizeof(reason))) ||
                admit(w, j, reason, sizeof(reason)) < 0) {
                j->obs.admitted_ns = cf_observe_now_ns();
                answer_rejected(w, j, j->req.id, reason);
                return;
            }
            j->obs.admitted_ns = cf_observe_now_ns();
            j->kind = JOB_EXECUTE;
            j->state = JOB_QUEUED;
            cf_log_debug(LOG_SUB, "request %s (%s) queued", j->req.id, cf_language_name(j->req.language));
            if (cf_exec_pool_submit(w->pool, &j->pj) < 0) {
                cf_log_error(LOG_SUB, "out of memory queueing request %s", j->req.id);
                cf_result res = {0};
                res.status = CF_STATUS_INTERNAL_ERROR;
                cf_result_set_reason(&res, "worker %s is out of memory: the request was not run", w->worker_id);
                send_result(w, j, &res, true);
                cf_result_clear(&res);
            }
            return;
        }
        snprintf(reason, sizeof(reason), "malformed request: %s", err.msg);
    }
    char id[CF_ID_MAX + 1];
    if (m->len && cf_request_peek_id(m->payload, m->len, id, sizeof(id)) == 0)
        answer_rejected(w, j, id, reason);
    else
        dead_letter(w, j, m, reason);
}

/* ---------------------------------------------------------------- slots */

/* The slot's Redis state, created on first use (slot threads only). */
static cf_wstate *slot_state(cf_worker *w, int slot, cf_error *err)
{
    if (!w->have_redis)
        return NULL;
    if (!w->wstate[slot])
        w->wstate[slot] = cf_wstate_new(w->cfg, w->worker_id, &w->cancel_exec, err);
    return w->wstate[slot];
}

/* Fencing token for a checkpoint save: Kafka offsets order the requests of
 * a thread only when they share a partition, which the message key
 * guarantees when it is the thread id.  Otherwise 0 (expected_latest still
 * fences; docs/STATE.md). */
static int64_t writer_seq_for(const cf_worker *w, const job *j)
{
    /* Offsets of different topics are not comparable: with several
     * request topics the same thread could come from two of them. */
    if (w->ntopics == 1 && j->req.thread && j->key && strcmp(j->key, j->req.thread) == 0)
        return j->offset + 1;
    return 0;
}

/* The cancel flags are written by the main thread and read by slots and
 * runners while they run: atomic accesses (the fields stay volatile int
 * because backends take a plain pointer to them). */
static void set_flag(volatile int *f)
{
    __atomic_store_n(f, 1, __ATOMIC_RELAXED);
}

static bool cancelled(const cf_worker *w, const job *j)
{
    return __atomic_load_n(&w->cancel_exec, __ATOMIC_RELAXED) || __atomic_load_n(&j->cancel, __ATOMIC_RELAXED);
}

/* A job stopped by the worker: true (res filled: `cancelled`) when the
 * stop was its sender's cancel and the worker is not shutting down;
 * false when it is to be left for the partition's next owner. */
static bool user_cancel_answer(cf_worker *w, job *j, cf_result *res, int64_t wall_us)
{
    if (__atomic_load_n(&w->cancel_exec, __ATOMIC_RELAXED) || !__atomic_load_n(&j->user_cancelled, __ATOMIC_ACQUIRE))
        return false;
    res->status = CF_STATUS_CANCELLED;
    res->wall_time_us = wall_us;
    cf_result_set_reason(res, "%s", j->cancel_reason);
    cf_log_info(LOG_SUB, "request %s cancelled %s", j->req.id, wall_us ? "while it ran" : "before it started");
    return true;
}

/* ---------------------------------------------------------------- streaming */

/* Whether an output topic exists (1), does not (0), or the broker could
 * not say (-1: a transient failure, not cached), from a cache (64 names; a
 * hit lasts 5 minutes, a miss 5 s) filled by a metadata request on the
 * slot's thread: chunks for a missing topic would only fail one by one,
 * seconds later. */
static int stream_topic_exists(cf_worker *w, const char *topic)
{
    int64_t now = cf_mono_us();
    pthread_mutex_lock(&w->stream_mu);
    for (size_t i = 0; i < STREAM_TOPICS_KNOWN; i++) {
        struct stream_topic_entry *e = &w->stream_topics[i];
        if (e->until_us > now && strcmp(e->name, topic) == 0) {
            bool yes = e->exists;
            pthread_mutex_unlock(&w->stream_mu);
            return yes ? 1 : 0;
        }
    }
    pthread_mutex_unlock(&w->stream_mu);
    bool exists = false, known = false;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(w->producer, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rkt ? rd_kafka_metadata(w->producer, 0, rkt, &md, 3000) : RD_KAFKA_RESP_ERR__FAIL;
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1) {
        rd_kafka_resp_err_t te = md->topics[0].err;
        exists = te == 0 && md->topics[0].partition_cnt > 0;
        known = exists || te == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || te == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (!known)
        return -1;
    pthread_mutex_lock(&w->stream_mu);
    struct stream_topic_entry *slot = &w->stream_topics[w->stream_topics_next++ % STREAM_TOPICS_KNOWN];
    snprintf(slot->name, sizeof(slot->name), "%s", topic);
    slot->exists = exists;
    slot->until_us = now + (exists ? 300 : 5) * 1000000LL;
    pthread_mutex_unlock(&w->stream_mu);
    return exists ? 1 : 0;
}

typedef struct stream_sink {
    cf_worker *w;
    const char *topic;
} stream_sink;

/* cf_streamer's publish: the chunk goes out like a result (sent at once
 * unless requests wait for a slot). */
static int publish_chunk(void *arg, const char *id, uint8_t *value, size_t len)
{
    stream_sink *sk = arg;
    /* Results come first: chunks never fill the producer's queue. */
    if (rd_kafka_outq_len(sk->w->producer) > CHUNK_OUTQ_MAX)
        return 1;
    rd_kafka_resp_err_t e = rd_kafka_producev(sk->w->producer, RD_KAFKA_V_TOPIC(sk->topic),
                                              RD_KAFKA_V_KEY(id, strlen(id)), RD_KAFKA_V_VALUE(value, len),
                                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE), RD_KAFKA_V_OPAQUE(&chunk_tag),
                                              RD_KAFKA_V_END);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        result_handed_over(sk->w);
        return 0;
    }
    if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        return 1;
    chunk_failed(sk->w, sk->topic, e);
    return -1;
}

/* A Redis failure as the request's sender sees it: what failed and what to
 * do, without the worker's internal addresses (the log has the details). */
static void state_failed(cf_result *res, const cf_error *err, const char *when)
{
    res->status = CF_STATUS_INTERNAL_ERROR;
    if (err->code == CF_E_REDIS || err->code == CF_E_TIMEOUT || err->code == CF_E_SYSTEM)
        cf_result_set_reason(res,
                             "workspace/checkpoint store unavailable %s (%s): retry the request later; the worker's "
                             "log has the details",
                             when, err->retriable ? "transient" : "store error");
    else
        cf_result_set_reason(res, "%s", err->msg);
}

/* Runs a request that names a workspace or thread, or neither, with the
 * Redis steps around the backend.  Returns false when the execution was
 * cancelled by the worker (revoke, shutdown): then there is no result and
 * nothing was written back. */
static bool execute_job(cf_worker *w, job *j, int slot, cf_result *res)
{
    cf_exec_ctx ctx = {.slot = slot, .worker_id = w->worker_id, .cancel = &j->cancel, .profile = j->profile->name,
                       .profile_max_timeout_us = j->profile->max_timeout_us,
                       .profile_max_memory_bytes = j->profile->max_memory_bytes,
                       .profile_max_processes = j->profile->max_processes,
                       .net_allow = j->profile->net_allow, .n_net_allow = j->profile->n_net_allow};
    cf_error err;
    cf_error_clear(&err);
    cf_streamer streamer;
    stream_sink sink = {.w = w, .topic = j->stream_topic};
    if (j->req.stream) {
        int exists = j->stream_topic ? stream_topic_exists(w, j->stream_topic) : 0;
        if (exists <= 0) {
            /* Missing: the request's mistake.  Unknown: the broker's trouble. */
            res->status = exists == 0 ? CF_STATUS_REJECTED : CF_STATUS_INTERNAL_ERROR;
            cf_result_set_reason(res, exists == 0 ? "stream: output topic '%s' does not exist (codefleet topics create "
                                                    "makes it)"
                                                  : "stream: the broker did not say whether output topic '%s' exists: "
                                                    "try again",
                                 j->stream_topic ? j->stream_topic : "?");
            return true;
        }
        char run[CF_CHUNK_RUN_MAX + 1];
        snprintf(run, sizeof(run), "%s-%" PRIu64, w->nonce, (uint64_t)atomic_fetch_add(&w->run_seq, 1));
        cf_streamer_init(&streamer, j->req.id, run, w->cfg->stream_interval_us, (size_t)w->cfg->stream_chunk_bytes,
                         w->cfg->stream_max_chunks, publish_chunk, &sink);
        ctx.on_output = cf_streamer_on_output;
        ctx.on_output_arg = &streamer;
    }
    bool needs_state = j->req.workspace || j->req.thread;
    cf_wstate *st = slot_state(w, slot, &err);
    cf_wstate_run run;
    memset(&run, 0, sizeof(run));
    bool run_it = true, completed = true;
    if (needs_state) {
        if (!st) {
            cf_observe_redis_error(w->obs);
            cf_log_error(LOG_SUB, "request %s: workspace store unavailable: %s", j->req.id, err.msg);
            state_failed(res, &err, "before the run");
            run_it = false;
        } else if (cf_wstate_prepare(st, &j->req, writer_seq_for(w, j), &run, &run_it, res, &err) < 0) {
            cf_observe_redis_error(w->obs);
            cf_log_error(LOG_SUB, "request %s: %s", j->req.id, err.msg);
            cf_result_clear(res);
            state_failed(res, &err, "before the run");
            run_it = false;
        }
    }
    if (run_it && cancelled(w, j)) {
        run_it = false;
        completed = user_cancel_answer(w, j, res, 0);
    }
    if (run_it) {
        ctx.files = run.ws_active ? &run.files : NULL;
        cf_exec_phases phases = {0};
        ctx.phases = &phases;
        int64_t t0 = cf_mono_us();
        j->obs.exec_start_ns = cf_observe_now_ns();
        bool executed =
            cf_pipeline_execute(w->pipeline, j->backend, j->profile->name, &ctx, &j->req, res, &err) == 0;
        j->obs.exec_end_ns = cf_observe_now_ns();
        j->obs.run_start_ns = cf_observe_mono_to_unix_ns(phases.run_start_us);
        j->obs.run_end_ns = cf_observe_mono_to_unix_ns(phases.run_end_us);
        if (executed) {
            j->obs.exec_wall_us = res->wall_time_us;
            j->obs.setup_failed = res->status == CF_STATUS_INTERNAL_ERROR;
            if (res->compile.present)
                j->obs.compile_cache = res->compile.cached ? 1 : -1;
        } else if (!cancelled(w, j)) {
            j->obs.setup_failed = true;
        }
        if (!executed && cancelled(w, j)) {
            /* Killed by us, not by its own doing: no write; a result only
             * when its sender cancelled it. */
            cf_result_clear(res);
            completed = user_cancel_answer(w, j, res, cf_mono_us() - t0);
        } else if (!executed) {
            cf_result_clear(res);
            res->status = CF_STATUS_INTERNAL_ERROR;
            cf_result_set_reason(res, "%s backend failed (%s): %s", j->backend->ops->name, cf_errcode_name(err.code),
                                 err.msg);
            res->wall_time_us = cf_mono_us() - t0;
            cf_log_error(LOG_SUB, "request %s: %s", j->req.id, res->reason);
        }
        cf_error_clear(&err);
        if (j->req.stream) {
            res->chunks = streamer.seq;
            cf_str_set(&res->meta.run, streamer.run);
            if (streamer.stopped) {
                char msg[200];
                snprintf(msg, sizeof(msg), "output streaming stopped after %" PRId64 " chunk(s): the broker did not "
                         "take the next one; stdout and stderr here are complete", streamer.seq);
                add_warning(res, msg);
            }
        }
        if (completed && needs_state && cf_wstate_finish(st, &j->req, &run, executed, res, &err) < 0) {
            /* The program ran but its changes could not be stored: the
             * caller must not take the run as applied. */
            cf_observe_redis_error(w->obs);
            cf_log_error(LOG_SUB, "request %s: %s", j->req.id, err.msg);
            state_failed(res, &err, "after the run: its changes were not stored");
        }
        if (completed && run.ws_active)
            cf_log_debug(LOG_SUB, "request %s: workspace %s revision %" PRId64 " -> %" PRId64 " (%zu changed%s)",
                         j->req.id, j->req.workspace, run.ws_rev, res->workspace_revision, res->n_changed_paths,
                         res->workspace_conflict ? ", conflict" : "");
    }
    cf_wstate_run_clear(&run, &j->req);
    return completed;
}

/* How many times this message was delivered (0 when unknown). */
static int64_t delivery_count(cf_worker *w, const job *j, cf_wstate *st)
{
    if (!st)
        return 0;
    char msg[300];
    snprintf(msg, sizeof(msg), "%s/%" PRId32 "/%" PRId64, w->topics[j->topic].name, j->partition, j->offset);
    int64_t attempt = 0;
    cf_error err;
    cf_error_clear(&err);
    if (cf_wstate_attempt(st, j->profile->name, j->req.id, msg, &attempt, &err) < 0)
        cf_log_warn(LOG_SUB, "request %s: delivery count unavailable: %s", j->req.id, err.msg);
    else
        cf_log_debug(LOG_SUB, "request %s: delivery %" PRId64 " recorded", j->req.id, attempt);
    return attempt;
}

typedef enum claim_outcome {
    CLAIM_RUN,      /* run it (with the lease, or without the store) */
    CLAIM_ANSWERED, /* res holds the answer: a replay, or a refusal */
    CLAIM_STOPPED,  /* cancelled while waiting for another run */
} claim_outcome;

/* Before running: is this id answered already, or running elsewhere?  A
 * run of the same request elsewhere is waited for, then replayed. */
static claim_outcome claim(cf_worker *w, job *j, int slot, cf_wstate *st, cf_result *res)
{
    if (!w->idempotent || !st || !j->has_digest)
        return CLAIM_RUN;
    cf_error err;
    cf_error_clear(&err);
    /* Unique across restarts of a worker with a fixed id: a frozen old
     * process and its successor never hold the same lease value. */
    snprintf(j->token, sizeof(j->token), "%s/%s/%d/%" PRIu64, w->worker_id, w->nonce, slot,
             (uint64_t)atomic_fetch_add(&w->lease_seq, 1));
    int64_t lease_ms = w->cfg->idempotency_lease_us / 1000;
    /* The holder renews only while it runs, which its timeout bounds. */
    int64_t give_up_at = cf_mono_us() + w->cfg->max_timeout_us + 3 * w->cfg->idempotency_lease_us;
    int64_t error_until = cf_mono_us() + w->cfg->redis_retry_budget_us;
    bool said_waiting = false;
    for (;;) {
        cf_claim c;
        if (cf_wstate_claim(st, j->profile->name, j->req.id, j->digest, j->token, lease_ms, &c, &err) < 0) {
            if (err.retriable && cf_mono_us() < error_until && !cancelled(w, j)) {
                nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
                continue;
            }
            /* No store: run anyway (at-least-once for this request), and
             * say so in the result. */
            cf_log_warn(LOG_SUB, "request %s: idempotency store unavailable (%s): run without it", j->req.id, err.msg);
            j->unprotected = true;
            return CLAIM_RUN;
        }
        switch (c.kind) {
        case CF_CLAIM_RUN:
            pthread_mutex_lock(&w->lock);
            j->leased = true;
            pthread_mutex_unlock(&w->lock);
            return CLAIM_RUN;
        case CF_CLAIM_REPLAY: {
            cf_decode_limits lim = cf_decode_limits_default;
            lim.max_total_bytes = lim.max_bin_bytes = c.stored.len;
            int rc = cf_result_decode(c.stored.data, c.stored.len, &lim, res, &err);
            cf_claim_clear(&c);
            if (rc < 0) {
                res->status = CF_STATUS_INTERNAL_ERROR;
                cf_result_set_reason(res, "the stored result of id '%s' cannot be read: %s", j->req.id, err.msg);
                return CLAIM_ANSWERED;
            }
            free(res->reply_to_error);
            res->reply_to_error = NULL;
            res->meta.replay = true;
            cf_log_info(LOG_SUB, "request %s: answered from the idempotency store (%s)", j->req.id,
                        cf_status_name(res->status));
            return CLAIM_ANSWERED;
        }
        case CF_CLAIM_REUSED:
            res->status = CF_STATUS_REJECTED;
            cf_result_set_reason(res,
                                 "id reused: request id '%s' already belongs to a different request (ids are "
                                 "idempotency keys; use a new id for a new request)",
                                 j->req.id);
            return CLAIM_ANSWERED;
        case CF_CLAIM_BUSY:
            break;
        }
        if (cancelled(w, j))
            return CLAIM_STOPPED;
        if (cf_mono_us() >= give_up_at) {
            res->status = CF_STATUS_INTERNAL_ERROR;
            cf_result_set_reason(res, "request id '%s' has been running elsewhere for too long: not run here",
                                 j->req.id);
            return CLAIM_ANSWERED;
        }
        if (!said_waiting) {
            cf_log_info(LOG_SUB, "request %s: running elsewhere; waiting to answer with its result", j->req.id);
            said_waiting = true;
        }
        int64_t wait_ms = c.wait_ms > 0 && c.wait_ms < 200 ? c.wait_ms : 200;
        nanosleep(&(struct timespec){0, (long)wait_ms * 1000 * 1000}, NULL);
    }
}

/* Results worth replaying: what the program did.  A refusal or an
 * internal error may not hold for the next delivery, and a run whose
 * workspace or checkpoint write was refused changed nothing: running it
 * again is what its sender wants. */
static bool replayable(const cf_result *res)
{
    return res->status != CF_STATUS_INTERNAL_ERROR && res->status != CF_STATUS_REJECTED &&
           res->status != CF_STATUS_CANCELLED &&
           !res->workspace_conflict && !res->checkpoint_conflict;
}

/* The copy of a result kept for replays: at most max bytes, its bulk cut
 * to fit and the cut said in a diagnostic (res is modified: the caller has
 * published it already and clears it next).  0 with *out empty when even
 * the cut copy does not fit. */
static int stored_copy(cf_result *res, const cf_bytes *published, size_t max, cf_bytes *out)
{
    *out = (cf_bytes){0};
    if (published->len <= max)
        return cf_bytes_set(out, published->data, published->len);
    cut_bulk(res, max / 4);
    char msg[200];
    snprintf(msg, sizeof(msg),
             "replayed from the idempotency store, which keeps results of at most %zu bytes: stdout, stderr and "
             "output were cut (the original was %zu bytes)", max, published->len);
    add_warning(res, msg);
    if (cf_result_encode(res, out, NULL) < 0)
        return -1;
    if (out->len > max) {
        free(out->data);
        *out = (cf_bytes){0};
    }
    return 0;
}

static void run_job_traced(cf_worker *w, job *j, int slot);

static void run_job(cf_pool_job *pj, int slot, void *arg)
{
    cf_worker *w = arg;
    job *j = (job *)pj;
    j->obs.slot_ns = cf_observe_now_ns();
    cf_observe_queue_wait(w->obs, &j->obs);
    cf_job_obs_log(&j->obs);
    run_job_traced(w, j, slot);
    cf_job_obs_log(NULL);
}

static void run_job_traced(cf_worker *w, job *j, int slot)
{
    pthread_mutex_lock(&w->lock);
    j->state = JOB_RUNNING;
    w->running[slot] = j;
    /* A cancel applied while the pool handed this job over. */
    int64_t now = cf_mono_us();
    int64_t window = w->cfg->cancel_memory_us < RECENT_CANCEL_US ? w->cfg->cancel_memory_us : RECENT_CANCEL_US;
    for (size_t i = 0; w->recent && i < RECENT_CANCELS && i < w->recent_next; i++) {
        const recent_cancel *rc = &w->recent[i];
        if (now - rc->at_us < window && rc->topic == j->topic && j->req.id &&
            strcmp(rc->id, j->req.id) == 0) {
            cf_strlcpy(j->cancel_reason, rc->reason, sizeof(j->cancel_reason));
            __atomic_store_n(&j->user_cancelled, 1, __ATOMIC_RELEASE);
            set_flag(&j->cancel);
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    cf_result res = {0};
    char reason[600];
    bool completed = true;
    cf_error err;
    cf_error_clear(&err);
    cf_wstate *st = slot_state(w, slot, &err);
    /* A revoke stops this job's Redis retries too, not only its program. */
    if (st)
        cf_wstate_set_cancel(st, &j->cancel);
    int64_t attempt = delivery_count(w, j, st);
    claim_outcome o = claim(w, j, slot, st, &res);
    if (o == CLAIM_RUN && deadline_passed(&j->req, reason, sizeof(reason))) {
        /* It waited in the queue past its deadline (an answered request was
         * replayed above instead). */
        res.status = CF_STATUS_REJECTED;
        cf_result_set_reason(&res, "%s", reason);
    } else {
        if (o == CLAIM_RUN) {
            /* Holding the lease, the run's workspace and checkpoint writes
             * are fenced by it: if it lapses and another worker takes the
             * request over, this run writes nothing. */
            bool fenced = j->leased && cf_wstate_lease_ref(j->profile->name, j->req.id, j->digest, j->token,
                                                           j->lease_key, sizeof(j->lease_key), j->lease_value,
                                                           sizeof(j->lease_value)) == 0;
            if (fenced)
                cf_wstate_set_guard(st, j->lease_key, j->lease_value);
            completed = execute_job(w, j, slot, &res);
            if (fenced)
                cf_wstate_set_guard(st, NULL, NULL);
        } else if (o == CLAIM_STOPPED) {
            completed = user_cancel_answer(w, j, &res, 0);
        }
    }
    res.meta.attempt = attempt;
    if (j->unprotected && completed)
        add_warning(&res, "the idempotency store could not be reached: this request ran without replay "
                          "protection, and a redelivery of it would run again");
    if (st)
        cf_wstate_set_cancel(st, NULL);
    /* From here on the main thread may free j (after its delivery): it
     * must not find it among the running ones. */
    pthread_mutex_lock(&w->lock);
    w->running[slot] = NULL;
    bool leased = j->leased;
    j->leased = false;
    pthread_mutex_unlock(&w->lock);
    if (!completed) {
        /* The worker stopped it (its partition was revoked, or shutdown
         * grace ran out): no result; the request stays uncommitted and the
         * partition's next owner runs it, without waiting for our lease. */
        if (leased && cf_wstate_lease_release(st, j->profile->name, j->req.id, j->digest, j->token, &err) < 0)
            cf_log_warn(LOG_SUB, "request %s: releasing its lease: %s", j->req.id, err.msg);
        cf_log_info(LOG_SUB, "request %s: execution stopped by the worker: left for the partition's next owner",
                    j->req.id);
        cf_result_clear(&res);
        hand_back(w, j, HANDOFF_ABANDON, 0);
        return;
    }
    cf_log_debug(LOG_SUB, "request %s finished: %s", j->req.id, cf_status_name(res.status));
    j->answered_cancelled = res.status == CF_STATUS_CANCELLED;
    if (set_result_out(w, j, &res) < 0) {
        cf_log_error(LOG_SUB, "request %s: no memory for its result: left for redelivery", j->req.id);
        if (leased)
            cf_wstate_lease_release(st, j->profile->name, j->req.id, j->digest, j->token, &err);
        cf_result_clear(&res);
        hand_back(w, j, HANDOFF_ABANDON, 0);
        return;
    }
    if (leased) {
        /* Stored before it is published: a crash between the two replays
         * it on redelivery instead of running it again. */
        cf_bytes copy = {0};
        bool store = replayable(&res) &&
                     stored_copy(&res, &j->out.value, (size_t)w->cfg->idempotency_max_result_bytes, &copy) == 0 &&
                     copy.len > 0;
        int rc = store ? cf_wstate_store_result(st, j->profile->name, j->req.id, j->digest, j->token, &copy,
                                                w->cfg->idempotency_ttl_us / 1000, &err)
                       : cf_wstate_lease_release(st, j->profile->name, j->req.id, j->digest, j->token, &err);
        free(copy.data);
        if (rc < 0)
            cf_observe_redis_error(w->obs);
        if (rc < 0)
            cf_log_warn(LOG_SUB, "request %s: idempotency store: %s (the result is published all the same)",
                        j->req.id, err.msg);
    }
    cf_result_clear(&res);
    send_out(w, j, false);
}

/* ---------------------------------------------------------------- cancels */

/* FNV-1a from a random per-process seed: senders choose the ids, and must
 * not be able to pile them into one bucket. */
static uint32_t memo_hash(const cf_worker *w, size_t topic, const char *id)
{
    uint64_t h = (14695981039346656037ull ^ w->memo_seed) + topic;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h ^= h >> 29;
    return (uint32_t)(h % MEMO_BUCKETS);
}

/* The bucket of (topic, id), its expired entries dropped on the way. */
static memo_entry **memo_bucket(cf_worker *w, size_t topic, const char *id)
{
    memo_entry **head = &w->memo[memo_hash(w, topic, id)];
    int64_t now = cf_mono_us();
    for (memo_entry **pp = head; *pp;) {
        if ((*pp)->expires_us <= now) {
            memo_entry *dead = *pp;
            *pp = dead->next;
            if (w->memo_per_topic && dead->topic < w->ntopics)
                w->memo_per_topic[dead->topic]--;
            free(dead);
            w->memo_n--;
        } else {
            pp = &(*pp)->next;
        }
    }
    return head;
}

static const memo_entry *memo_find(cf_worker *w, size_t topic, const char *id)
{
    if (!id || w->memo_n == 0)
        return NULL;
    for (memo_entry *e = *memo_bucket(w, topic, id); e; e = e->next)
        if (e->topic == topic && strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

static void memo_add(cf_worker *w, size_t topic, const char *id, const char *reason, int64_t ttl_us)
{
    if (ttl_us <= 0 || !w->memo_per_topic)
        return;
    memo_entry **head = memo_bucket(w, topic, id);
    for (memo_entry *e = *head; e; e = e->next)
        if (e->topic == topic && strcmp(e->id, id) == 0)
            return;
    if (w->memo_n >= MEMO_MAX || w->memo_per_topic[topic] >= MEMO_MAX_TOPIC) {
        int64_t now = cf_mono_us();
        if (now - w->memo_full_logged_us > 60 * 1000000LL)
            cf_log_warn(LOG_SUB, "cancels remembered: %zu in all, %zu for %s (caps %d, %d per topic): cancels for "
                        "requests not here yet are not kept for now", w->memo_n, w->memo_per_topic[topic],
                        w->topics[topic].name, MEMO_MAX, MEMO_MAX_TOPIC);
        w->memo_full_logged_us = now;
        return;
    }
    size_t il = strlen(id) + 1, rl = strlen(reason) + 1;
    memo_entry *e = calloc(1, sizeof(*e) + il + rl);
    if (!e)
        return;
    e->topic = topic;
    e->expires_us = cf_mono_us() + ttl_us;
    memcpy(e->id, id, il);
    memcpy(e->id + il, reason, rl);
    e->reason = e->id + il;
    e->next = *head;
    *head = e;
    w->memo_n++;
    w->memo_per_topic[topic]++;
}

static void memo_free(cf_worker *w)
{
    for (size_t b = 0; b < MEMO_BUCKETS; b++) {
        while (w->memo[b]) {
            memo_entry *e = w->memo[b];
            w->memo[b] = e->next;
            free(e);
        }
    }
    w->memo_n = 0;
    free(w->memo_per_topic);
    w->memo_per_topic = NULL;
}

typedef struct cancel_match {
    size_t topic;
    const char *id;
} cancel_match;

static bool queued_is(const cf_pool_job *pj, void *arg)
{
    const cancel_match *cm = arg;
    const job *j = (const job *)pj;
    return j->topic == cm->topic && j->req.id && strcmp(j->req.id, cm->id) == 0;
}

/* A cancel of request id on request topic ti: stop it if it runs here,
 * answer it if it waits here, remember it either way (a redelivery, or
 * the request itself still to come). */
static void apply_cancel(cf_worker *w, size_t ti, const char *id, const char *reason, int64_t remember_us)
{
    memo_add(w, ti, id, reason, remember_us);
    size_t running = 0, queued = 0;
    pthread_mutex_lock(&w->lock);
    if (w->recent) {
        recent_cancel *rc = &w->recent[w->recent_next++ % RECENT_CANCELS];
        rc->at_us = cf_mono_us();
        rc->topic = ti;
        cf_strlcpy(rc->id, id, sizeof(rc->id));
        cf_strlcpy(rc->reason, reason, sizeof(rc->reason));
    }
    for (int64_t s = 0; s < w->cfg->slots; s++) {
        job *j = w->running[s];
        if (j && j->topic == ti && j->req.id && strcmp(j->req.id, id) == 0 &&
            !__atomic_load_n(&j->user_cancelled, __ATOMIC_RELAXED)) {
            cf_strlcpy(j->cancel_reason, reason, sizeof(j->cancel_reason));
            __atomic_store_n(&j->user_cancelled, 1, __ATOMIC_RELEASE);
            set_flag(&j->cancel);
            running++;
        }
    }
    pthread_mutex_unlock(&w->lock);
    cancel_match cm = {ti, id};
    cf_pool_job *list = cf_exec_pool_drop_queued_if(w->pool, queued_is, &cm);
    while (list) {
        job *j = (job *)list;
        list = list->next;
        answer_cancelled(w, j, reason);
        queued++;
    }
    cf_log_debug(LOG_SUB, "cancel of %s on %s: %zu running, %zu queued here", id, w->topics[ti].name, running, queued);
}

/* The request topic whose cancel topic is name, or -1. */
static long cancel_topic_index(const cf_worker *w, const char *name)
{
    const char *suffix = w->cfg->cancel_topic_suffix;
    size_t n = strlen(name), sl = strlen(suffix);
    if (n <= sl || strcmp(name + n - sl, suffix) != 0)
        return -1;
    for (size_t i = 0; i < w->ntopics; i++)
        if (strlen(w->topics[i].name) == n - sl && strncmp(w->topics[i].name, name, n - sl) == 0)
            return (long)i;
    return -1;
}

static void on_cancel_message(cf_worker *w, const rd_kafka_message_t *m)
{
    if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            on_kafka_error(w->control, m->err, rd_kafka_message_errstr(m), w);
        return;
    }
    const char *tname = rd_kafka_topic_name(m->rkt);
    long ti = cancel_topic_index(w, tname);
    if (ti < 0)
        return;
    cf_decode_limits lim = cf_decode_limits_default;
    lim.max_total_bytes = 4096; /* a cancel is a few hundred bytes */
    cf_cancel c;
    cf_error err;
    cf_error_clear(&err);
    if (cf_cancel_decode(m->payload, m->len, &lim, &c, &err) < 0) {
        /* Every worker reads every cancel: one line per 10 s, not one per
         * message, whatever a writer floods the topic with. */
        w->cancels_skipped++;
        int64_t now = cf_mono_us();
        if (now - w->cancel_skip_logged_us >= 10 * 1000000LL) {
            cf_log_warn(LOG_SUB, "cancel at %s[%" PRId32 "]@%" PRId64 " skipped: %s (%" PRIu64 " skipped so far)",
                        tname, m->partition, m->offset, err.msg, w->cancels_skipped);
            w->cancel_skip_logged_us = now;
        }
        return;
    }
    /* Remembered cancel-memory from when it was written (the broker's or
     * producer's timestamp): one read again at a restart is not kept
     * longer, and one older than that is stale. */
    int64_t remember_us = w->cfg->cancel_memory_us;
    int64_t ts_ms = rd_kafka_message_timestamp(m, NULL);
    if (ts_ms > 0) {
        int64_t age_us = cf_now_us() - ts_ms * 1000;
        if (age_us > 0)
            remember_us -= age_us;
    }
    if (remember_us > 0) {
        char reason[CF_CANCEL_REASON_MAX + 64];
        if (c.reason && c.reason[0])
            snprintf(reason, sizeof(reason), "cancelled by its sender: %s", c.reason);
        else
            snprintf(reason, sizeof(reason), "cancelled by its sender");
        apply_cancel(w, (size_t)ti, c.id, reason, remember_us);
    }
    cf_cancel_clear(&c);
}

static void control_refresh(cf_worker *w, bool now);

static void control_serve(cf_worker *w)
{
    if (!w->control)
        return;
    rd_kafka_message_t *m;
    int n = 0;
    for (; n < 1000 && (m = rd_kafka_consumer_poll(w->control, 0)) != NULL; n++) {
        on_cancel_message(w, m);
        rd_kafka_message_destroy(m);
    }
    if (n == 1000)
        wake(w); /* librdkafka signals the queue only when it was empty */
    control_refresh(w, false);
}

static void control_stop(cf_worker *w)
{
    free(w->control_parts);
    w->control_parts = NULL;
    if (w->control_q)
        rd_kafka_queue_destroy(w->control_q);
    w->control_q = NULL;
    if (w->control) {
        rd_kafka_destroy_flags(w->control, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        w->control = NULL;
    }
}

/* Renews the leases of running executions every third of their length,
 * on its own Redis connection. */
static void *lease_keeper(void *arg)
{
    cf_worker *w = arg;
    cf_error err;
    cf_error_clear(&err);
    cf_wstate *st = cf_wstate_new(w->cfg, w->worker_id, &w->cancel_exec, &err);
    if (!st)
        cf_log_error(LOG_SUB, "lease keeper: %s", err.msg);
    int64_t period_us = w->cfg->idempotency_lease_us / 3;
    typedef struct held {
        const char *scope;
        char id[CF_ID_MAX + 1];
        char digest[CF_DIGEST_HEX];
        char token[CF_ID_MAX + 48];
    } held;
    held *h = calloc((size_t)w->cfg->slots, sizeof(*h));
    pthread_mutex_lock(&w->lock);
    while (!w->keeper_stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += period_us / 1000000;
        until.tv_nsec += (long)(period_us % 1000000) * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!w->keeper_stop && pthread_cond_timedwait(&w->keeper_cond, &w->lock, &until) == 0) {
        }
        if (w->keeper_stop || !st || !h)
            continue;
        size_t n = 0;
        for (int64_t s = 0; s < w->cfg->slots; s++) {
            const job *j = w->running[s];
            if (j && j->leased) {
                h[n].scope = j->profile->name;
                cf_strlcpy(h[n].id, j->req.id, sizeof(h[n].id));
                cf_strlcpy(h[n].digest, j->digest, sizeof(h[n].digest));
                cf_strlcpy(h[n].token, j->token, sizeof(h[n].token));
                n++;
            }
        }
        pthread_mutex_unlock(&w->lock);
        for (size_t i = 0; i < n; i++) {
            bool still = false;
            if (cf_wstate_lease_renew(st, h[i].scope, h[i].id, h[i].digest, h[i].token,
                                      w->cfg->idempotency_lease_us / 1000, &still, &err) < 0)
                cf_log_warn(LOG_SUB, "request %s: renewing its lease: %s", h[i].id, err.msg);
            else if (!still)
                cf_log_debug(LOG_SUB, "request %s: lease no longer held (finished, or lapsed)", h[i].id);
        }
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    free(h);
    cf_wstate_destroy(st);
    return NULL;
}

/* ---------------------------------------------------------------- partitions */

typedef struct lane_match {
    cf_worker *w;
    const rd_kafka_topic_partition_list_t *parts;
} lane_match;

static bool job_in_partitions(int32_t lane, void *arg)
{
    const lane_match *lm = arg;
    for (int i = 0; i < lm->parts->cnt; i++) {
        long ti = topic_index(lm->w, lm->parts->elems[i].topic);
        if (ti >= 0 && lane_of((size_t)ti, lm->parts->elems[i].partition) == lane)
            return true;
    }
    return false;
}

/* Tells the running executions that match (lm NULL = all) to stop. */
static size_t cancel_running(cf_worker *w, lane_match *lm)
{
    size_t n = 0;
    pthread_mutex_lock(&w->lock);
    for (int64_t s = 0; s < w->cfg->slots; s++) {
        job *j = w->running[s];
        if (j && (!lm || job_in_partitions(j->pj.partition, lm))) {
            set_flag(&j->cancel);
            n++;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return n;
}

/* Takes the jobs slots handed back. */
static void drain_handoff(cf_worker *w)
{
    pthread_mutex_lock(&w->lock);
    job *list = w->handoff;
    w->handoff = NULL;
    pthread_mutex_unlock(&w->lock);
    while (list) {
        job *j = list;
        list = j->list_next;
        j->list_next = NULL;
        if (j->handoff == HANDOFF_FAILED)
            answer_failed(w, j, j->handoff_err);
        else
            job_finished(w, j, false);
    }
}

static void drop_jobs(cf_worker *w, cf_pool_job *list)
{
    while (list) {
        cf_pool_job *next = list->next;
        job_finished(w, (job *)list, false);
        list = next;
    }
}

/* Drops answers waiting for a retry whose partition is given up (lm NULL:
 * all): the next owner reads those requests again. */
static void drop_retries(cf_worker *w, lane_match *lm)
{
    for (job **pp = &w->retry; *pp;) {
        job *j = *pp;
        if (!lm || job_in_partitions(j->pj.partition, lm)) {
            *pp = j->list_next;
            job_finished(w, j, false);
        } else {
            pp = &j->list_next;
        }
    }
}

/* Stores every committable position (the next auto-commit, or an explicit
 * commit, sends them). */
static void store_offsets(cf_worker *w)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (size_t t = 0; t < w->ntopics; t++)
        for (size_t p = 0; p < w->topics[t].nparts; p++) {
            part_state *ps = &w->topics[t].parts[p];
            if (!ps->assigned)
                continue;
            int64_t pos = cf_offset_tracker_take_committable(ps->tracker);
            if (pos < 0)
                continue;
            if (!l)
                l = rd_kafka_topic_partition_list_new(4);
            rd_kafka_topic_partition_list_add(l, w->topics[t].name, (int32_t)p)->offset = pos;
        }
    if (!l)
        return;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(w->consumer, l);
    if (e)
        cf_log_warn("kafka", "storing offsets: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

static void set_paused(cf_worker *w, bool pause)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    for (size_t t = 0; t < w->ntopics; t++)
        for (size_t p = 0; p < w->topics[t].nparts; p++) {
            part_state *ps = &w->topics[t].parts[p];
            if (ps->assigned && ps->paused != pause && !(ps->held && !pause)) {
                rd_kafka_topic_partition_list_add(l, w->topics[t].name, (int32_t)p);
                ps->paused = pause;
            }
        }
    if (l->cnt) {
        rd_kafka_resp_err_t e =
            pause ? rd_kafka_pause_partitions(w->consumer, l) : rd_kafka_resume_partitions(w->consumer, l);
        if (e)
            cf_log_warn("kafka", "%s partitions: %s", pause ? "pausing" : "resuming", rd_kafka_err2str(e));
        else
            cf_log_debug("kafka", "%s %d partition(s)", pause ? "paused" : "resumed", l->cnt);
    }
    rd_kafka_topic_partition_list_destroy(l);
    w->paused_all = pause;
}

/* Subscribes the consumer to every request topic; names gets them, comma-separated. */
static rd_kafka_resp_err_t subscribe_all(cf_worker *w, char *names, size_t nsize)
{
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new((int)w->ntopics);
    if (nsize)
        names[0] = '\0';
    for (size_t i = 0; i < w->ntopics; i++) {
        rd_kafka_topic_partition_list_add(topics, w->topics[i].name, RD_KAFKA_PARTITION_UA);
        size_t n = strlen(names);
        if (n < nsize)
            snprintf(names + n, nsize - n, "%s%s", i ? "," : "", w->topics[i].name);
    }
    rd_kafka_resp_err_t e = rd_kafka_subscribe(w->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    return e;
}

/* ------------------------------------------------------- the partition guard */

/* The guard's last step: leave the group and join again.  Every partition
 * is revoked (its running executions get rebalance-wait, as in any
 * rebalance) and the group assigns afresh: a consumer-side state that
 * neither resume nor seek cleared does not survive it. */
static void rejoin_group(cf_worker *w)
{
    rd_kafka_resp_err_t e = rd_kafka_unsubscribe(w->consumer);
    if (e)
        cf_log_error("kafka", "partition guard: leaving the group: %s", rd_kafka_err2str(e));
    char names[1024];
    e = subscribe_all(w, names, sizeof(names));
    if (e)
        cf_log_error("kafka", "partition guard: subscribing again to %s: %s", names, rd_kafka_err2str(e));
}

static void guard_step(cf_worker *w, size_t t, int32_t p, part_state *ps, int step, int64_t position)
{
    const char *topic = w->topics[t].name;
    int64_t stalled_s = (cf_mono_us() - ps->guard.stalled_us) / 1000000;
    cf_log_warn(LOG_SUB,
                "partition guard: %s[%" PRId32 "] has %" PRId64 " request(s) waiting after offset %" PRId64
                " and nothing was taken from it for %" PRId64 " s while this worker had room (stalled %" PRId64
                " s): %s",
                topic, p, ps->guard.waiting, position, w->cfg->partition_stall_us / 1000000 + stalled_s, stalled_s,
                step == CF_PGUARD_RESUME ? "resuming it"
                : step == CF_PGUARD_SEEK ? "seeking it to its position"
                                         : "leaving the group and joining again");
    switch (step) {
    case CF_PGUARD_RESUME:
        pause_one(w, t, p, false);
        break;
    case CF_PGUARD_SEEK:
        rewind_partition(w, topic, p, position);
        break;
    default:
        rejoin_group(w);
        break;
    }
    if (w->obs)
        cf_observe_partition_stall(w->obs, cf_pguard_step_name((cf_pguard_step)step));
    w->report_next_us = 0; /* operators see it now, not a report-interval later */
}

/* Looks at every held partition twice a second: those that should move
 * and have not for partition-stall are probed (on the guard's thread);
 * answers are judged here and the step they call for is taken. */
static void guard_serve(cf_worker *w)
{
    if (!w->guard)
        return;
    int64_t now = cf_mono_us();
    cf_pguard_answer a;
    while (cf_pguard_next_answer(w->guard, &a)) {
        part_state *ps = part_of(w, a.topic, a.partition, false);
        if (!ps || !ps->assigned || ps->gen != a.gen)
            continue; /* given up meanwhile: its record started anew */
        if (a.failed)
            cf_log_debug(LOG_SUB, "partition guard: probing %s[%" PRId32 "]: %s", a.topic, a.partition, a.why);
        int64_t position = -1;
        int step = cf_pguard_judge(w->guard, &ps->guard, &a, now, &position);
        if (step >= 0)
            guard_step(w, (size_t)topic_index(w, a.topic), a.partition, ps, step, position);
    }
    if (now < w->guard_next_us)
        return;
    w->guard_next_us = now + 500 * 1000;
    size_t high = (size_t)(w->cfg->slots + w->cfg->prefetch);
    bool room = !w->paused_all && !w->stopping && w->intake_blocked == 0 && w->inflight < high;
    for (size_t t = 0; t < w->ntopics; t++)
        for (size_t p = 0; p < w->topics[t].nparts; p++) {
            part_state *ps = &w->topics[t].parts[p];
            if (ps->assigned)
                cf_pguard_check(w->guard, &ps->guard, w->topics[t].name, (int32_t)p, ps->gen, room && !ps->paused,
                                now);
        }
}

static void partitions_assigned(cf_worker *w, rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++) {
        part_state *ps = part_of(w, parts->elems[i].topic, parts->elems[i].partition, true);
        if (!ps)
            continue;
        cf_offset_tracker_destroy(ps->tracker);
        ps->tracker = cf_offset_tracker_new(tracker_cap(w));
        ps->assigned = ps->tracker != NULL;
        ps->paused = false;
        ps->held = false;
        ps->gen = ++w->gen_counter;
        ps->guard = (cf_pguard_part){.next_offset = -1};
        cf_pguard_restart(&ps->guard, cf_mono_us());
        if (ps->assigned)
            atomic_fetch_add(&w->n_assigned, 1);
    }
}

/* Revocation: queued jobs of the partitions are dropped (the new owner gets
 * them from the committed position); running ones get rebalance_wait to
 * finish so their offsets can be committed before we let go, and are then
 * stopped, so that no request runs here and at its new owner at once.
 * Lost partitions (the group moved on without us) are stopped at once. */
static void partitions_revoked(cf_worker *w, rd_kafka_topic_partition_list_t *parts, bool lost,
                               rd_kafka_topic_partition_list_t *was_paused)
{
    lane_match lm = {w, parts};
    drop_jobs(w, cf_exec_pool_drop_queued(w->pool, job_in_partitions, &lm));
    int64_t until = cf_mono_us() + (lost ? 0 : w->cfg->rebalance_wait_us);
    while (cf_exec_pool_count_running(w->pool, job_in_partitions, &lm) > 0 && cf_mono_us() < until) {
        producer_serve(w, 20);
        drain_handoff(w);
    }
    size_t n = cancel_running(w, &lm);
    if (n)
        cf_log_warn(LOG_SUB, "stopping %zu execution(s) of %s partition(s): their next owner runs them", n,
                    lost ? "lost" : "revoked");
    /* A stopped execution ends within the runner's cancel poll (tens of
     * ms); Redis retries stop early too.  Bounded all the same. */
    int64_t stop_until = cf_mono_us() + 30 * 1000000LL;
    while (cf_exec_pool_count_running(w->pool, job_in_partitions, &lm) > 0 && cf_mono_us() < stop_until) {
        producer_serve(w, 20);
        drain_handoff(w);
        cancel_running(w, &lm); /* jobs that started meanwhile */
    }
    if (!lost) {
        /* Shutting down: flushed and committed already, under the
         * shutdown deadline; a synchronous commit here could wait a
         * minute for a broker that is gone. */
        if (!w->kafka_closing)
            producer_drain(w, 2000);
        drain_handoff(w);
        store_offsets(w);
        rd_kafka_resp_err_t e = rd_kafka_commit(w->consumer, NULL, w->kafka_closing ? 1 : 0);
        if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
            cf_log_warn("kafka", "commit on revoke: %s", rd_kafka_err2str(e));
    }
    drop_retries(w, &lm);
    for (int i = 0; i < parts->cnt; i++) {
        part_state *ps = part_of(w, parts->elems[i].topic, parts->elems[i].partition, false);
        if (!ps)
            continue;
        if (ps->paused)
            rd_kafka_topic_partition_list_add(was_paused, parts->elems[i].topic, parts->elems[i].partition);
        if (ps->assigned)
            atomic_fetch_sub(&w->n_assigned, 1);
        if (w->guard)
            cf_pguard_forget(w->guard, &ps->guard);
        ps->assigned = false;
        ps->paused = false;
        ps->held = false;
        cf_offset_tracker_destroy(ps->tracker);
        ps->tracker = NULL;
    }
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque)
{
    cf_worker *w = opaque;
    bool cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        cf_log_info("kafka", "assigned %d partition(s)", parts->cnt);
        partitions_assigned(w, parts);
        cf_observe_assigned(w->obs, true);
        rd_kafka_error_t *e = NULL;
        if (cooperative)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        if (e) {
            cf_log_error("kafka", "assign: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
        /* Partitions assigned while we are busy arrive unpaused. */
        if (w->paused_all || w->stopping) {
            rd_kafka_pause_partitions(rk, parts);
            for (int i = 0; i < parts->cnt; i++) {
                part_state *ps = part_of(w, parts->elems[i].topic, parts->elems[i].partition, false);
                if (ps)
                    ps->paused = true;
            }
        }
    } else {
        bool lost = err != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS || rd_kafka_assignment_lost(rk);
        cf_log_info("kafka", "%s %d partition(s)", lost ? "lost" : "revoked", parts->cnt);
        rd_kafka_topic_partition_list_t *was_paused = rd_kafka_topic_partition_list_new(parts->cnt);
        partitions_revoked(w, parts, lost, was_paused);
        /* Lost: out of the group until it rejoins.  A cooperative revoke
         * is followed by the rest of the rebalance's assignment. */
        if (lost)
            cf_observe_assigned(w->obs, false);
        if (cooperative) {
            rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, parts);
            if (e) {
                cf_log_error("kafka", "unassign: %s", rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
            }
        } else {
            rd_kafka_assign(rk, NULL);
        }
        /* librdkafka keeps the application's pause on a partition across
         * its revocation (only its own pause is reset by an assign), while
         * our record of the partition starts afresh when it comes back: a
         * partition paused here, lost, and assigned to us again would then
         * never be fetched (issue 28: seven minutes without a message after
         * a broker outage).  So what we paused is resumed as we let it go;
         * it is no longer fetched by then, so nothing is read here. */
        if (was_paused->cnt) {
            rd_kafka_resp_err_t re = rd_kafka_resume_partitions(rk, was_paused);
            if (re)
                cf_log_warn("kafka", "resuming %d given-up partition(s): %s", was_paused->cnt, rd_kafka_err2str(re));
            else
                cf_log_debug("kafka", "resumed %d given-up partition(s) paused here", was_paused->cnt);
        }
        rd_kafka_topic_partition_list_destroy(was_paused);
    }
}

static kafka_problem classify_kafka_error(int err, const char *reason)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__RESOLVE:
        if (reason && strstr(reason, "SASL authentication"))
            return KP_AUTH;
        if (reason && (strstr(reason, "security.protocol") || strstr(reason, "might require SASL")))
            return KP_PROTOCOL;
        return KP_UNREACHABLE;
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
        return KP_AUTH;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        return KP_ACL;
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        return KP_TOPIC;
    default:
        return KP_NONE;
    }
}

#define KAFKA_EXPLAIN_EVERY_US (30 * INT64_C(1000000))

static void on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    cf_worker *w = opaque;
    cf_observe_kafka_error(w->obs, err == RD_KAFKA_RESP_ERR__FATAL, err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_fatal_error(rk, buf, sizeof(buf));
        cf_log_error("kafka", "%s: fatal error: %s", rd_kafka_name(rk), buf);
        return;
    }
    kafka_problem kp = classify_kafka_error(err, reason);
    if (kp == KP_NONE) {
        cf_log_warn("kafka", "%s: %s: %s", rd_kafka_name(rk), rd_kafka_err2name(err), reason);
        return;
    }
    cf_log_debug("kafka", "%s: %s: %s", rd_kafka_name(rk), rd_kafka_err2name(err), reason);
    int64_t now = cf_mono_us();
    /* A refused login drops the connection: "all brokers down" follows,
     * and is not the problem to fix. */
    int64_t auth = atomic_load(&w->kafka_explained_us[KP_AUTH]);
    int64_t proto = atomic_load(&w->kafka_explained_us[KP_PROTOCOL]);
    if (kp == KP_UNREACHABLE && ((auth && now - auth < KAFKA_EXPLAIN_EVERY_US) ||
                                 (proto && now - proto < KAFKA_EXPLAIN_EVERY_US)))
        return;
    /* Both clients report the same outage, over and over while it lasts:
     * one line per kind of problem every 30 s is what a person reads. */
    int64_t last = atomic_load(&w->kafka_explained_us[kp]);
    if (last && now - last < KAFKA_EXPLAIN_EVERY_US)
        return;
    atomic_store(&w->kafka_explained_us[kp], now);
    const cf_worker_config *c = w->cfg;
    switch (kp) {
    case KP_UNREACHABLE:
        cf_log_error("kafka",
                     "cannot reach the Kafka broker at %s (%.200s): is it running? check brokers "
                     "(CODEFLEET_WORKER_BROKERS); the worker retries and loses nothing meanwhile",
                     c->brokers, reason && reason[0] ? reason : rd_kafka_err2str(err));
        break;
    case KP_AUTH:
        cf_log_error("kafka",
                     "the Kafka broker at %s refused the worker's credentials (%.200s): check "
                     "kafka.sasl.mechanisms, kafka.sasl.username and kafka.sasl.password in the worker's --config",
                     c->brokers, reason && reason[0] ? reason : rd_kafka_err2str(err));
        break;
    case KP_PROTOCOL:
        cf_log_error("kafka",
                     "the Kafka broker at %s closed the connection as if it expects SASL or TLS (%.200s): check "
                     "kafka.security.protocol and kafka.sasl.* in the worker's --config",
                     c->brokers, reason);
        break;
    case KP_ACL:
        cf_log_error("kafka",
                     "the broker denied this worker an operation (%s): its principal needs read on the request "
                     "topics and group %s, write on the result, dead-letter and workers topics",
                     reason && reason[0] ? reason : rd_kafka_err2str(err), c->group);
        break;
    case KP_TOPIC:
        cf_log_error("kafka", "a topic the worker uses does not exist (%s): create the fleet's topics with "
                              "'codefleet topics create', or check request-topic / result-topic / dlq-topic",
                     reason && reason[0] ? reason : rd_kafka_err2str(err));
        break;
    default:
        break;
    }
}

/* librdkafka's connection failures (facility FAIL) are the raw detail
 * behind on_kafka_error's one-line explanations: debug level only.  Its
 * other warnings stay warnings: some (a failed offset commit, a session
 * timeout, a max.poll.interval overrun) reach no callback at all. */
static void on_kafka_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    cf_log_level l = level <= 3 ? CF_LOG_ERROR : level <= 4 ? CF_LOG_WARN : level <= 6 ? CF_LOG_INFO : CF_LOG_DEBUG;
    if (strcmp(fac, "FAIL") == 0 || l > CF_LOG_WARN)
        l = CF_LOG_DEBUG;
    CF_LOG(l, "kafka", "%s: %s", fac, buf);
}

static int on_kafka_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    cf_worker *w = opaque;
    cf_observe_kafka_stats(w->obs, json, len);
    return 0; /* librdkafka frees json */
}

/* ---------------------------------------------------------------- setup */

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, cf_error *err)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, k, v, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
        return cf_error_set(err, CF_E_INVALID, "kafka property %s=%s: %s", k, v, errstr);
    return 0;
}

static bool is_consumer_only(const char *k)
{
    static const char *const keys[] = {"group.", "session.timeout.ms", "max.poll.interval.ms", "heartbeat.interval.ms",
                                       "partition.assignment.strategy", "auto.", "enable.auto", "fetch.",
                                       "isolation.level", "queued.", "enable.partition.eof", "check.crcs"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strncmp(k, keys[i], strlen(keys[i])) == 0)
            return true;
    return false;
}

static bool is_producer_only(const char *k)
{
    static const char *const keys[] = {"enable.idempotence", "acks", "linger.ms", "queue.buffering.", "batch.",
                                       "message.timeout.ms", "retries", "retry.", "compression.", "partitioner",
                                       "delivery.timeout.ms", "max.in.flight", "request.required.acks",
                                       "transactional.id", "transaction.timeout.ms"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strncmp(k, keys[i], strlen(keys[i])) == 0)
            return true;
    return false;
}

/* The client.id the worker's consumer (or producer) gets, as the group lists
 * it: ours unless kafka.client.id overrides it (applied after ours). */
static void kafka_client_id(const cf_worker *w, bool consumer, char *buf, size_t size)
{
    const char *cid = cf_kvlist_get(&w->cfg->kafka, "client.id");
    if (cid)
        snprintf(buf, size, "%s", cid);
    else
        snprintf(buf, size, "codefleet-worker-%s%s", w->worker_id, consumer ? "" : "-producer");
}

static rd_kafka_conf_t *kafka_conf_new(cf_worker *w, bool consumer, cf_error *err)
{
    const cf_worker_config *c = w->cfg;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char client_id[200];
    kafka_client_id(w, consumer, client_id, sizeof(client_id));
    if (conf_set(conf, "bootstrap.servers", c->brokers, err) < 0 || conf_set(conf, "client.id", client_id, err) < 0 ||
        /* Small request/response exchanges: Nagle would only add delay. */
        conf_set(conf, "socket.nagle.disable", "true", err) < 0)
        goto fail;
    if (consumer) {
        /* Offsets are stored by us after delivery, committed by the
         * auto-committer (and explicitly on revoke and shutdown). */
        static const char *const kv[][2] = {
            {"enable.auto.commit", "true"},     {"enable.auto.offset.store", "false"},
            {"auto.commit.interval.ms", "500"}, {"auto.offset.reset", "earliest"},
            {"fetch.wait.max.ms", "10"},        {"fetch.error.backoff.ms", "50"},
            {"partition.assignment.strategy", "cooperative-sticky"},
            {"isolation.level", "read_committed"},
            /* A dead worker's partitions move within seconds, not the 45 s
             * default: heartbeats come from librdkafka's own thread, so
             * long executions and paused partitions never miss one
             * (docs/RELIABILITY.md, "Failover"). */
            {"session.timeout.ms", "6000"},     {"heartbeat.interval.ms", "1000"},
        };
        if (conf_set(conf, "group.id", c->group, err) < 0 ||
            (c->static_membership && conf_set(conf, "group.instance.id", w->worker_id, err) < 0))
            goto fail;
        /* What librdkafka prefetches per partition beyond what we took:
         * bounds each drain of its queue, so the offset trackers stay small
         * (the default, 100000 per partition, lets one drain take tens of
         * thousands of small requests). */
        char qmin[32];
        int64_t qm = 2 * (c->slots + c->prefetch);
        snprintf(qmin, sizeof(qmin), "%" PRId64, qm > 100 ? qm : 100);
        if (conf_set(conf, "queued.min.messages", qmin, err) < 0)
            goto fail;
        for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
            if (conf_set(conf, kv[i][0], kv[i][1], err) < 0)
                goto fail;
        rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
        /* Lag per partition and brokers' state for /metrics and /readyz:
         * librdkafka's statistics, served on the consumer's queue. */
        if (c->metrics_listen && c->metrics_listen[0]) {
            if (conf_set(conf, "statistics.interval.ms", "2000", err) < 0)
                goto fail;
            rd_kafka_conf_set_stats_cb(conf, on_kafka_stats);
        }
    } else {
        static const char *const kv[][2] = {
            {"enable.idempotence", "true"}, {"acks", "all"},
            {"partitioner", "murmur2_random"},
            {"message.max.bytes", "33554432"},
            /* A reply_to topic that does not exist fails its message after
             * this long (default 30 s), and the result goes to the default
             * topic with reply_to_error: every topic of the fleet exists
             * before results are sent to it. */
            {"topic.metadata.propagation.max.ms", "5000"},
            /* A topic named by a request (reply_to, its output topic) is
             * never created by the worker's metadata requests, whatever
             * the broker's auto.create.topics.enable says. */
            {"allow.auto.create.topics", "false"},
        };
        for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
            if (conf_set(conf, kv[i][0], kv[i][1], err) < 0)
                goto fail;
        /* Batching under a backlog only: see flusher_main. */
        char linger[32];
        snprintf(linger, sizeof(linger), "%.3f", (double)c->result_batch_us / 1000.0);
        if (conf_set(conf, "linger.ms", linger, err) < 0)
            goto fail;
        rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR);
    }
    for (size_t i = 0; i < c->kafka.count; i++) {
        const char *k = c->kafka.items[i].key;
        if ((consumer && is_producer_only(k)) || (!consumer && is_consumer_only(k)))
            continue;
        if (conf_set(conf, k, c->kafka.items[i].value, err) < 0)
            goto fail;
    }
    rd_kafka_conf_set_error_cb(conf, on_kafka_error);
    rd_kafka_conf_set_log_cb(conf, on_kafka_log);
    rd_kafka_conf_set_opaque(conf, w);
    return conf;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

/* (Re)assigns every partition of every cancel topic.  A cancel topic that
 * is missing (created after the worker started, a broker not up yet) or
 * that gained partitions is picked up here: every 30 s while one is
 * missing, every 5 min otherwise.  Partitions already read keep their
 * position; new ones start cancel-memory back. */
static void control_refresh(cf_worker *w, bool now)
{
    if (!w->control || !w->control_parts)
        return;
    int64_t t = cf_mono_us();
    if (!now && t < w->control_next_refresh_us)
        return;
    const cf_worker_config *c = w->cfg;
    bool changed = false, missing = false, unreachable = false;
    rd_kafka_topic_partition_list_t *want = rd_kafka_topic_partition_list_new(16);
    int *counts = calloc(w->ntopics ? w->ntopics : 1, sizeof(*counts));
    for (size_t i = 0; counts && i < w->ntopics; i++) {
        char name[512];
        snprintf(name, sizeof(name), "%s%s", w->topics[i].name, c->cancel_topic_suffix);
        int cnt = 0;
        if (!unreachable) {
            rd_kafka_topic_t *rkt = rd_kafka_topic_new(w->control, name, NULL);
            const struct rd_kafka_metadata *md = NULL;
            rd_kafka_resp_err_t e = rkt ? rd_kafka_metadata(w->control, 0, rkt, &md, 2000) : RD_KAFKA_RESP_ERR__FAIL;
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 && md->topics[0].err == 0) {
                cnt = md->topics[0].partition_cnt;
                for (int p = 0; p < cnt; p++)
                    rd_kafka_topic_partition_list_add(want, name, md->topics[0].partitions[p].id);
            }
            unreachable = e == RD_KAFKA_RESP_ERR__TRANSPORT || e == RD_KAFKA_RESP_ERR__TIMED_OUT;
            if (cnt == 0 && !w->control_missing_logged)
                cf_log_warn(LOG_SUB, "cancel topic %s unavailable (%s): cancels of %s's requests are not read until "
                            "it exists (codefleet topics create makes it; checked again every 30 s)", name,
                            rd_kafka_err2str(e ? e : md && md->topic_cnt == 1 ? md->topics[0].err
                                                                              : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC),
                            w->topics[i].name);
            if (md)
                rd_kafka_metadata_destroy(md);
            if (rkt)
                rd_kafka_topic_destroy(rkt);
        }
        if (unreachable && cnt == 0)
            cnt = w->control_parts[i]; /* unknown: keep what is assigned */
        counts[i] = cnt;
        missing = missing || cnt == 0;
        changed = changed || cnt != w->control_parts[i];
    }
    if (missing)
        w->control_missing_logged = true;
    w->control_next_refresh_us = t + (missing || unreachable ? 30 : 300) * 1000000LL;
    if (!counts || !changed || unreachable) {
        free(counts);
        rd_kafka_topic_partition_list_destroy(want);
        return;
    }
    /* Positions of what is read already; the rest from cancel-memory back. */
    rd_kafka_topic_partition_list_t *cur = NULL;
    if (rd_kafka_assignment(w->control, &cur) == RD_KAFKA_RESP_ERR_NO_ERROR && cur)
        (void)rd_kafka_position(w->control, cur);
    rd_kafka_topic_partition_list_t *fresh = rd_kafka_topic_partition_list_new(16);
    int64_t since_ms = (cf_now_us() - c->cancel_memory_us) / 1000;
    for (int i = 0; i < want->cnt; i++) {
        rd_kafka_topic_partition_t *p = &want->elems[i];
        rd_kafka_topic_partition_t *had = cur ? rd_kafka_topic_partition_list_find(cur, p->topic, p->partition) : NULL;
        if (had && had->offset >= 0)
            p->offset = had->offset;
        else
            rd_kafka_topic_partition_list_add(fresh, p->topic, p->partition)->offset = since_ms;
    }
    if (fresh->cnt > 0 && rd_kafka_offsets_for_times(w->control, fresh, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        cf_log_warn(LOG_SUB, "cancel topics: no offsets for the last %" PRId64 " s: reading new cancels only",
                    c->cancel_memory_us / 1000000);
        for (int i = 0; i < fresh->cnt; i++)
            fresh->elems[i].offset = RD_KAFKA_OFFSET_END;
    }
    for (int i = 0; i < fresh->cnt; i++) {
        rd_kafka_topic_partition_t *f = &fresh->elems[i];
        int64_t off = f->offset;
        if (f->err || off < 0) {
            /* Nothing that recent: from the end as it is now, as a number.
             * (OFFSET_END would be resolved later, when the fetch starts,
             * and skip a cancel written in between.) */
            int64_t lo = 0, hi = -1;
            if (rd_kafka_query_watermark_offsets(w->control, f->topic, f->partition, &lo, &hi, 5000) !=
                    RD_KAFKA_RESP_ERR_NO_ERROR ||
                hi < 0)
                hi = RD_KAFKA_OFFSET_END;
            off = hi;
        }
        rd_kafka_topic_partition_list_find(want, f->topic, f->partition)->offset = off;
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(w->control, want);
    if (e) {
        cf_log_warn(LOG_SUB, "cancel topics: assign failed: %s", rd_kafka_err2str(e));
    } else {
        memcpy(w->control_parts, counts, w->ntopics * sizeof(*counts));
        cf_log_info(LOG_SUB, "reading cancels from %d partition(s)", want->cnt);
    }
    free(counts);
    if (cur)
        rd_kafka_topic_partition_list_destroy(cur);
    rd_kafka_topic_partition_list_destroy(fresh);
    rd_kafka_topic_partition_list_destroy(want);
}

/* Cancels are read by every worker from every partition of each request
 * topic's cancel topic: an assign-only consumer (it never joins the group,
 * commits nothing), starting cancel-memory back so a cancel sent just before
 * this worker started still finds its request. */
static int control_start(cf_worker *w, cf_error *err)
{
    const cf_worker_config *c = w->cfg;
    if (!c->cancel_topic_suffix || !c->cancel_topic_suffix[0])
        return 0;
    /* A request topic that is another's cancel topic would take cancels
     * for requests (and the reverse): refused. */
    size_t sl = strlen(c->cancel_topic_suffix);
    for (size_t i = 0; i < w->ntopics; i++)
        for (size_t k = 0; k < w->ntopics; k++) {
            const char *a = w->topics[i].name, *b = w->topics[k].name;
            size_t al = strlen(a), bl = strlen(b);
            if (al == bl + sl && strncmp(a, b, bl) == 0 && strcmp(a + bl, c->cancel_topic_suffix) == 0)
                return cf_error_set(err, CF_E_INVALID,
                                    "request topic %s is the cancel topic of request topic %s (cancel-topic-suffix "
                                    "%s): rename one or change the suffix", a, b, c->cancel_topic_suffix);
        }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char cid[260];
    kafka_client_id(w, true, cid, sizeof(cid));
    strncat(cid, "-cancels", sizeof(cid) - strlen(cid) - 1);
    /* Cancels are tiny (the decoder refuses more than 4 KiB): librdkafka's
     * prefetch is bounded far below its defaults (64 MiB per partition),
     * so a flood of them costs the worker little memory. */
    static const char *const kv[][2] = {
        {"enable.auto.commit", "false"},        {"enable.auto.offset.store", "false"},
        {"fetch.wait.max.ms", "10"},            {"socket.nagle.disable", "true"},
        {"queued.max.messages.kbytes", "2048"}, {"queued.min.messages", "1000"},
        {"fetch.max.bytes", "1048576"},         {"max.partition.fetch.bytes", "262144"},
    };
    if (conf_set(conf, "bootstrap.servers", c->brokers, err) < 0 || conf_set(conf, "client.id", cid, err) < 0 ||
        conf_set(conf, "group.id", c->group, err) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
        if (conf_set(conf, kv[i][0], kv[i][1], err) < 0)
            goto fail;
    for (size_t i = 0; i < c->kafka.count; i++) {
        const char *k = c->kafka.items[i].key;
        if (is_producer_only(k) || is_consumer_only(k) || strcmp(k, "client.id") == 0)
            continue;
        if (conf_set(conf, k, c->kafka.items[i].value, err) < 0)
            goto fail;
    }
    rd_kafka_conf_set_error_cb(conf, on_kafka_error);
    rd_kafka_conf_set_log_cb(conf, on_kafka_log);
    rd_kafka_conf_set_opaque(conf, w);
    char errstr[512];
    w->control = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!w->control) {
        rd_kafka_conf_destroy(conf);
        return cf_error_set(err, CF_E_KAFKA, "creating the cancel consumer: %s", errstr);
    }
    rd_kafka_poll_set_consumer(w->control);
    w->control_q = rd_kafka_queue_get_consumer(w->control);
    static const uint64_t one = 1;
    rd_kafka_queue_io_event_enable(w->control_q, w->wake_fd, &one, sizeof(one));

    w->control_parts = calloc(w->ntopics ? w->ntopics : 1, sizeof(*w->control_parts));
    w->memo_per_topic = calloc(w->ntopics ? w->ntopics : 1, sizeof(*w->memo_per_topic));
    if (!w->control_parts || !w->memo_per_topic)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    if (getrandom(&w->memo_seed, sizeof(w->memo_seed), 0) != (ssize_t)sizeof(w->memo_seed))
        w->memo_seed = (uint64_t)cf_mono_us() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    control_refresh(w, true);
    /* Catch up before taking requests: cancels sent in the last
     * cancel-memory must be remembered before their requests come. */
    int64_t until = cf_mono_us() + 2000000;
    rd_kafka_message_t *m;
    while (cf_mono_us() < until && (m = rd_kafka_consumer_poll(w->control, 100)) != NULL) {
        on_cancel_message(w, m);
        rd_kafka_message_destroy(m);
    }
    return 0;
fail:
    rd_kafka_conf_destroy(conf);
    return -1;
}

/* librdkafka holds the first message for a topic whose metadata it has not
 * seen and, with linger.ms=0, sends it at the broker thread's next periodic
 * wake-up (about 1 s later): fetching the metadata at start-up takes that
 * second off the first result. */
/* Returns false when the broker could not be reached: warming the other
 * topics would only add 5 s each to the start-up. */
static bool warm_topic_metadata(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return true;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_metadata_destroy(md);
    else
        cf_log_debug("kafka", "metadata of %s: %s", topic, rd_kafka_err2str(e));
    rd_kafka_topic_destroy(rkt);
    return e != RD_KAFKA_RESP_ERR__TRANSPORT && e != RD_KAFKA_RESP_ERR__TIMED_OUT;
}

/* One look at Redis at start, so an operator reads what is wrong in one
 * line instead of inferring it from per-request warnings.  Never fatal: the
 * worker serves what it can without Redis and reconnects by itself. */
static void probe_redis(const cf_worker_config *cfg)
{
    char host[256];
    cf_error err = {0};
    cf_redis_config rc;
    if (cf_wstate_redis_config(cfg, host, sizeof(host), &rc, &err) < 0)
        return; /* cf_wstate_config_check said so already */
    cf_redis *r = cf_redis_new(&rc, true, &err);
    if (r && cf_redis_ping(r, &err) == 0) {
        cf_redis_destroy(r);
        return;
    }
    cf_redis_destroy(r);
    if (strstr(err.msg, "WRONGPASS") || strstr(err.msg, "NOAUTH") || strstr(err.msg, "NOPERM"))
        cf_log_error(LOG_SUB,
                     "Redis at %s refused the worker's credentials (%s): check redis-user and redis-password in the "
                     "worker's --config; meanwhile requests run without replay protection and those naming a "
                     "workspace or thread fail",
                     cfg->redis, err.msg);
    else
        cf_log_error(LOG_SUB,
                     "cannot reach Redis at %s (%s): is it running? check redis (CODEFLEET_WORKER_REDIS); the worker "
                     "reconnects by itself; meanwhile requests run without replay protection and those naming a "
                     "workspace or thread fail",
                     cfg->redis, err.msg);
}

/* ---- where the helper programs are ---- */

/* An installed worker (cmake --install) finds its helpers relative to its
 * own executable: <bindir>/CF_INSTALL_REL_LIBEXEC/<name> and the harnesses
 * in <bindir>/CF_INSTALL_REL_DATA/harness, so a prefix or DESTDIR copy
 * moved elsewhere still works.  Installed means that libexec directory
 * exists next to the executable; such a worker never falls back to the
 * build's paths (a build tree is its builder's, not root's, to write).  A
 * worker elsewhere (its build tree, a test) uses the build's own,
 * compiled-in paths.  "" means none: not installed, or not built. */
typedef struct install_dirs {
    bool installed;
    char libexec[PATH_MAX], data[PATH_MAX];
} install_dirs;

static void find_install_dirs(install_dirs *d)
{
    memset(d, 0, sizeof(*d));
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return;
    *slash = '\0';
    char cand[PATH_MAX];
    struct stat st;
    int m = snprintf(cand, sizeof(cand), "%s/%s", exe, CF_INSTALL_REL_LIBEXEC);
    if (m <= 0 || (size_t)m >= sizeof(cand) || !realpath(cand, d->libexec) || stat(d->libexec, &st) < 0 ||
        !S_ISDIR(st.st_mode))
        return;
    m = snprintf(cand, sizeof(cand), "%s/%s", exe, CF_INSTALL_REL_DATA);
    if (m <= 0 || (size_t)m >= sizeof(cand) || !realpath(cand, d->data))
        d->data[0] = '\0';
    d->installed = true;
}

static void default_path(const install_dirs *d, bool data, const char *name, const char *built, char *out,
                         size_t cap)
{
    out[0] = '\0';
    if (!d->installed) {
        cf_strlcpy(out, built, cap);
        return;
    }
    const char *dir = data ? d->data : d->libexec;
    struct stat st;
    char cand[PATH_MAX];
    int m = snprintf(cand, sizeof(cand), "%s/%s", dir, name);
    if (dir[0] && m > 0 && (size_t)m < sizeof(cand) && (size_t)m < cap && stat(cand, &st) == 0 &&
        (data ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode) && access(cand, X_OK) == 0))
        cf_strlcpy(out, cand, cap);
}

static void resolve_default_paths(cf_worker *w)
{
    install_dirs d;
    find_install_dirs(&d);
    default_path(&d, false, "codefleet-zygote", CF_DEFAULT_ZYGOTE, w->zygote_path, sizeof(w->zygote_path));
    default_path(&d, false, "codefleet-container-init", CF_DEFAULT_CONTAINER_INIT, w->container_init_path,
                 sizeof(w->container_init_path));
    default_path(&d, false, "codefleet-embed-helper", CF_DEFAULT_EMBED_HELPER, w->embed_helper_path,
                 sizeof(w->embed_helper_path));
    default_path(&d, true, "harness", CF_DEFAULT_HARNESS_DIR, w->harness_dir, sizeof(w->harness_dir));
}

int cf_worker_new(const cf_worker_config *cfg, cf_worker **out, cf_error *err)
{
    *out = NULL;
    cf_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    w->cfg = cfg;
    w->wake_fd = -1;
    resolve_default_paths(w);
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)cf_now_us() ^ ((uint64_t)getpid() << 32);
    snprintf(w->nonce, sizeof(w->nonce), "%016" PRIx64, rnd);
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->flush_mu, NULL);
    pthread_mutex_init(&w->stream_mu, NULL);
    pthread_cond_init(&w->flush_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->keeper_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (cfg->worker_id && cfg->worker_id[0]) {
        cf_strlcpy(w->worker_id, cfg->worker_id, sizeof(w->worker_id));
    } else {
        char host[64] = "host";
        gethostname(host, sizeof(host));
        host[sizeof(host) - 1] = '\0';
        snprintf(w->worker_id, sizeof(w->worker_id), "%s-%ld", host, (long)getpid());
    }
    if (cfg->static_membership && !(cfg->worker_id && cfg->worker_id[0])) {
        cf_error_set(err, CF_E_INVALID,
                     "static-membership needs a worker-id that stays the same across restarts (e.g. the pod name)");
        goto fail;
    }
    if (!cf_id_valid(w->worker_id, strlen(w->worker_id))) {
        cf_error_set(err, CF_E_INVALID, "worker-id '%s' must be printable ASCII without spaces", w->worker_id);
        goto fail;
    }

    w->have_redis = cfg->redis && cfg->redis[0];
    if (cf_wstate_config_check(cfg, err) < 0)
        goto fail;
    if (cf_observe_new(cfg, w->worker_id, &w->obs, err) < 0)
        goto fail;
    w->wstate = calloc((size_t)cfg->slots, sizeof(*w->wstate));
    w->running = calloc((size_t)cfg->slots, sizeof(*w->running));
    w->recent = calloc(RECENT_CANCELS, sizeof(*w->recent));
    if (!w->wstate || !w->running || !w->recent) {
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        goto fail;
    }
    w->idempotent = w->have_redis && cfg->idempotency_ttl_us > 0;
    if (w->have_redis)
        cf_log_info(LOG_SUB, "redis %s (db %" PRId64 "%s%s)", cfg->redis, cfg->redis_db,
                    cfg->redis_user && cfg->redis_user[0] ? ", user " : "",
                    cfg->redis_user && cfg->redis_user[0] ? cfg->redis_user : "");
    else
        cf_log_info(LOG_SUB, "no redis configured: requests naming a workspace or thread are rejected");
    if (w->have_redis)
        probe_redis(cfg);
    if (w->idempotent)
        cf_log_info(LOG_SUB, "idempotency: one run per request id, results kept %" PRId64 " s for replay",
                    cfg->idempotency_ttl_us / 1000000);
    else
        cf_log_warn(LOG_SUB, "delivery is at-least-once only (%s): a redelivered or resubmitted request runs again",
                    w->have_redis ? "idempotency-ttl is 0" : "no redis");

    cf_pipeline_config pcfg = {
        .cc = cfg->cc_path, .cxx = cfg->cxx_path, .rustc = cfg->rustc_path, .go = cfg->go_path,
        .tsc = cfg->tsc_path, .node = cfg->node_path,
        .harness_dir = cfg->harness_dir && cfg->harness_dir[0] ? cfg->harness_dir : w->harness_dir,
        .compile_timeout_us = cfg->compile_timeout_us, .compile_memory_bytes = cfg->compile_memory_bytes,
        .compile_processes = cfg->compile_processes, .compile_output_bytes = cfg->compile_output_bytes,
        .artifact_bytes = cfg->artifact_bytes, .cache_bytes = cfg->compile_cache_bytes,
        .collect_bytes = cfg->collect_bytes, .collect_scan_bytes = cfg->max_files_bytes,
        .max_total_us = cfg->max_timeout_us};
    pcfg.allowed_flags[CF_LANG_C] = cfg->c_flags_allowed;
    pcfg.allowed_flags[CF_LANG_CPP] = cfg->cpp_flags_allowed;
    pcfg.allowed_flags[CF_LANG_RUST] = cfg->rust_flags_allowed;
    pcfg.allowed_flags[CF_LANG_GO] = cfg->go_flags_allowed;
    pcfg.allowed_flags[CF_LANG_TYPESCRIPT] = cfg->ts_flags_allowed;
    if (cf_pipeline_new(&pcfg, &w->pipeline, err) < 0) {
        cf_error_wrap(err, "compile pipeline");
        goto fail;
    }
    char langs[1024];
    cf_pipeline_describe(w->pipeline, langs, sizeof(langs));
    cf_log_info(LOG_SUB, "compiled languages: %s", langs);

    w->bcfg = (cf_backend_config){
        .work_root = cfg->work_root,
        .python_path = cfg->python_path,
        .node_path = cfg->node_path,
        .shell_path = cfg->shell_path,
        .exec_path = cfg->exec_path,
        .slots = (int)cfg->slots,
        .run_uid_base = cfg->run_uid_base,
        .max_files_bytes = cfg->max_files_bytes,
        .max_output_file_bytes = cfg->max_output_file_bytes,
        .cgroup_root = cfg->cgroup_root && cfg->cgroup_root[0] ? cfg->cgroup_root : NULL,
        .slirp4netns_path = cfg->slirp4netns_path,
        .sandbox_memory_bytes = cfg->sandbox_memory_bytes,
        .sandbox_pids_max = cfg->sandbox_pids_max,
        .sandbox_tmp_bytes = cfg->sandbox_tmp_bytes,
        .sandbox_work_bytes = cfg->sandbox_work_bytes,
        .sandbox_inodes = cfg->sandbox_inodes,
        .sandbox_cold = !cfg->sandbox_warm,
        .sandbox_require_cgroups = cfg->sandbox_require_cgroups,
        .zygote_path = !cfg->sandbox_zygote ? NULL
                       : cfg->zygote_path && cfg->zygote_path[0] ? cfg->zygote_path
                                                                 : w->zygote_path,
        .zygote_exec = cfg->zygote_exec,
        .zygote_preload = cfg->zygote_preload,
        .zygote_memory_bytes = cfg->zygote_memory_bytes,
        .zygote_max_requests = cfg->zygote_max_requests,
        .container_images = cfg->container_images,
        .container_runtime = cfg->container_runtime,
        .container_init = cfg->container_init && cfg->container_init[0] ? cfg->container_init
                                                                        : w->container_init_path,
        .container_state = cfg->container_state,
        .embed_helper_path = cfg->embed_helper_path && cfg->embed_helper_path[0] ? cfg->embed_helper_path
                                                                                  : w->embed_helper_path,
        .embed_helper_memory_bytes = cfg->embed_helper_memory_bytes,
        .wasm_module_max_bytes = cfg->wasm_module_max_bytes,
        .wasm_fuel = cfg->wasm_fuel,
        .wasm_cache_bytes = cfg->wasm_cache_bytes,
        /* Every compiled language passes backend selection; the pipeline
         * answers one without a toolchain, naming what is missing. */
        .compiled_languages = 1u << CF_LANG_C | 1u << CF_LANG_CPP | 1u << CF_LANG_RUST | 1u << CF_LANG_GO |
                              1u << CF_LANG_TYPESCRIPT,
        .toolchain_dirs = cf_pipeline_toolchain_dirs(w->pipeline),
        .cc_path = cf_pipeline_toolchain_path(w->pipeline, CF_LANG_C),
        .cxx_path = cf_pipeline_toolchain_path(w->pipeline, CF_LANG_CPP),
    };
    cf_log_info(LOG_SUB, "helpers: harnesses %s, zygote %s, container init %s, embed helper %s",
                pcfg.harness_dir[0] ? pcfg.harness_dir : "(none)",
                !w->bcfg.zygote_path ? "(off)" : w->bcfg.zygote_path[0] ? w->bcfg.zygote_path : "(none)",
                w->bcfg.container_init[0] ? w->bcfg.container_init : "(none)",
                w->bcfg.embed_helper_path[0] ? w->bcfg.embed_helper_path : "(none)");
    if (cf_backend_set_new(cfg->backends, &w->bcfg, &w->backends, err) < 0) {
        cf_error_wrap(err, "backends");
        goto fail;
    }
    char matrix[4096];
    cf_backend_set_describe(w->backends, matrix, sizeof(matrix));
    cf_log_info(LOG_SUB, "worker %s capabilities:\n%s", w->worker_id, matrix);

    w->penv = (cf_profile_env){.request_topic = cfg->request_topic, .result_topic = cfg->result_topic,
                               .dlq_topic = cfg->dlq_topic, .events_topic = cfg->events_topic,
                               .workers_topic = cfg->workers_topic, .stream_suffix = cfg->stream_topic_suffix,
                               .env_prefix = cf_worker_conf_table.env_prefix, .backends = w->backends};
    if (cf_profile_set_new(&cfg->profiles, &w->penv, &w->profiles, err) < 0) {
        cf_error_wrap(err, "profiles");
        goto fail;
    }
    w->topics = calloc(cf_profile_set_count(w->profiles), sizeof(*w->topics));
    if (!w->topics) {
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < cf_profile_set_count(w->profiles); i++) {
        const cf_profile *pr = cf_profile_set_get(w->profiles, i);
        /* A profile maximum above the worker's would fill requests with a
         * default the worker then refuses. */
        const struct {
            const char *name;
            int64_t v, max;
        } over[] = {{"max-timeout", pr->max_timeout_us, cfg->max_timeout_us},
                    {"max-cpu-time", pr->max_cpu_time_us, cfg->max_timeout_us},
                    {"max-memory", pr->max_memory_bytes, cfg->max_memory_bytes},
                    {"max-processes", pr->max_processes, cfg->max_processes},
                    {"max-output", pr->max_output_bytes, cfg->max_output_bytes},
                    {"max-file-size", pr->max_file_size_bytes, cfg->max_file_size_bytes}};
        for (size_t k = 0; k < sizeof(over) / sizeof(over[0]); k++)
            if (over[k].v > over[k].max) {
                cf_error_set(err, CF_E_INVALID, "profile '%s': %s %" PRId64 " exceeds the worker's %" PRId64, pr->name,
                             over[k].name, over[k].v, over[k].max);
                goto fail;
            }
        if (!pr->topic[0])
            continue;
        topic_state *t = &w->topics[w->ntopics++];
        t->profile = pr;
        t->name = pr->topic;
        t->results = cf_profile_result_topic(pr, &w->penv);
        cf_log_info(LOG_SUB,
                    "profile %s: topic %s -> %s; backends %s; languages %s; network %s; roots ro [%s] rw [%s]; "
                    "env-allow [%s]; reply-to [%s]; state-prefix %s",
                    pr->name, t->name, t->results, pr->backends, pr->languages, pr->network ? "enabled" : "disabled",
                    pr->read_only_roots, pr->read_write_roots, pr->env_allow, pr->reply_to,
                    pr->state_prefix ? pr->state_prefix : "(none)");
    }
    if (w->ntopics == 0) {
        cf_error_set(err, CF_E_INVALID, "no request topic: set request-topic or a profile's topic");
        goto fail;
    }

    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->wake_fd < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "eventfd");
        goto fail;
    }

    char errstr[512];
    rd_kafka_conf_t *pconf = kafka_conf_new(w, false, err);
    if (!pconf)
        goto fail;
    w->producer = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, errstr, sizeof(errstr));
    if (!w->producer) {
        rd_kafka_conf_destroy(pconf);
        cf_error_set(err, CF_E_KAFKA, "creating producer: %s", errstr);
        goto fail;
    }
    bool reachable = warm_topic_metadata(w->producer, cfg->result_topic);
    for (size_t i = 0; reachable && i < w->ntopics; i++)
        if (strcmp(w->topics[i].results, cfg->result_topic) != 0)
            reachable = warm_topic_metadata(w->producer, w->topics[i].results);
    if (reachable)
        reachable = warm_topic_metadata(w->producer, cfg->dlq_topic);
    if (reachable && cfg->workers_topic && cfg->workers_topic[0])
        warm_topic_metadata(w->producer, cfg->workers_topic);
    rd_kafka_conf_t *cconf = kafka_conf_new(w, true, err);
    if (!cconf)
        goto fail;
    w->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cconf, errstr, sizeof(errstr));
    if (!w->consumer) {
        rd_kafka_conf_destroy(cconf);
        cf_error_set(err, CF_E_KAFKA, "creating consumer: %s", errstr);
        goto fail;
    }
    rd_kafka_poll_set_consumer(w->consumer);
    w->consumer_q = rd_kafka_queue_get_consumer(w->consumer);
    w->guard = cf_pguard_new(w->consumer, cfg->partition_stall_us, pool_notify, w, err);
    if (!w->guard)
        goto fail;
    w->producer_q = rd_kafka_queue_get_main(w->producer);
    if (pthread_create(&w->flusher, NULL, flusher_main, w) != 0) {
        cf_error_set(err, CF_E_SYSTEM, "starting the result flusher thread");
        goto fail;
    }
    w->flusher_started = true;
    static const uint64_t one = 1;
    rd_kafka_queue_io_event_enable(w->consumer_q, w->wake_fd, &one, sizeof(one));
    rd_kafka_queue_io_event_enable(w->producer_q, w->wake_fd, &one, sizeof(one));

    w->pool = cf_exec_pool_new((int)cfg->slots, run_job, pool_notify, w);
    if (!w->pool) {
        cf_error_set(err, CF_E_NOMEM, "starting %" PRId64 " execution slots", cfg->slots);
        goto fail;
    }
    if (w->idempotent) {
        if (pthread_create(&w->keeper, NULL, lease_keeper, w) != 0) {
            cf_error_set(err, CF_E_SYSTEM, "starting the lease keeper thread");
            goto fail;
        }
        w->keeper_started = true;
    }
    /* Last: catching up on cancels applies them to the pool and slots. */
    if (control_start(w, err) < 0)
        goto fail;
    *out = w;
    return 0;
fail:
    cf_worker_destroy(w);
    return -1;
}

void cf_worker_partitions_get(const cf_worker *w, cf_worker_partitions *out)
{
    memset(out, 0, sizeof(*out));
    out->assigned = atomic_load(&((cf_worker *)w)->n_assigned);
    cf_pguard_counts c;
    cf_pguard_counts_get(w->guard, &c);
    out->stalled = c.stalled;
    out->stalls = c.stalls;
    for (int i = 0; i < 3 && i < CF_PGUARD__STEPS; i++)
        out->recoveries[i] = c.recovered[i];
}

int cf_worker_fault_pause_unrecorded(cf_worker *w, const char *topic, int32_t partition)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition);
    rd_kafka_resp_err_t e = rd_kafka_pause_partitions(w->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
    return e ? -1 : 0;
}

void cf_worker_stop(cf_worker *w)
{
    atomic_store(&w->stop_requested, 1);
    wake(w);
}

/* Serves everything that is ready, without blocking. */
static void serve(cf_worker *w)
{
    uint64_t v;
    while (read(w->wake_fd, &v, sizeof(v)) > 0)
        ;
    /* Everything librdkafka has fetched is taken (its local queue is
     * bounded by queued.min.messages per partition, set from slots +
     * prefetch), then the partitions pause once slots + prefetch requests
     * are taken and unanswered.  Pausing in the middle of a fetched batch
     * was tried: librdkafka 2.0.2 then needs ~1 s to deliver again after a
     * resume, and throughput fell to tens per second.  Hysteresis: resume
     * once half the prefetch is used up. */
    size_t high = (size_t)(w->cfg->slots + w->cfg->prefetch);
    size_t low = (size_t)(w->cfg->slots + w->cfg->prefetch / 2);
    rd_kafka_message_t *m;
    /* Cancels first: a request fetched together with its cancel must find
     * it remembered. */
    control_serve(w);
    while ((m = rd_kafka_consumer_poll(w->consumer, 0)) != NULL) {
        handle_message(w, m);
        rd_kafka_message_destroy(m);
    }
    producer_serve(w, 0);
    drain_handoff(w);
    run_retries(w);
    hold_partitions(w);
    guard_serve(w);
    if (!w->stopping) {
        bool want_pause = w->intake_blocked > 0 || w->inflight >= high || (w->paused_all && w->inflight > low);
        if (want_pause != w->paused_all)
            set_paused(w, want_pause);
    }
    store_offsets(w);
    if (w->obs) {
        cf_observe_loop_state ls = {.slots = w->cfg->slots,
                                    .busy = (int64_t)cf_exec_pool_running(w->pool),
                                    .held = (int64_t)cf_exec_pool_queued(w->pool),
                                    .paused = w->paused_all,
                                    .draining = w->stopping};
        cf_pguard_counts gc;
        cf_pguard_counts_get(w->guard, &gc);
        ls.stalled = gc.stalled;
        cf_observe_loop(w->obs, &ls);
    }
}

static void wait_events(cf_worker *w, int sig_fd, int timeout_ms)
{
    struct pollfd pfd[2] = {{.fd = w->wake_fd, .events = POLLIN}, {.fd = sig_fd, .events = POLLIN}};
    int n = poll(pfd, sig_fd >= 0 ? 2 : 1, timeout_ms);
    if (n > 0 && sig_fd >= 0 && (pfd[1].revents & POLLIN)) {
        struct signalfd_siginfo si;
        if (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
            cf_log_info(LOG_SUB, "received signal %u: shutting down", si.ssi_signo);
            atomic_store(&w->stop_requested, 1);
        }
    }
}

static void publish_report(cf_worker *w, bool gone);

static void shutdown_gracefully(cf_worker *w, int sig_fd)
{
    w->ran = true;
    w->stopping = true;
    cf_pguard_stop(w->guard);
    /* Not ready from now on: a load balancer or the group's next
     * rebalance moves work elsewhere while this one drains. */
    if (w->obs)
        cf_observe_loop(w->obs, &(cf_observe_loop_state){.slots = w->cfg->slots, .draining = true});
    set_paused(w, true);
    drop_jobs(w, cf_exec_pool_drop_queued(w->pool, NULL, NULL));
    int64_t until = cf_mono_us() + w->cfg->shutdown_grace_us;
    size_t running = cf_exec_pool_running(w->pool);
    if (running)
        cf_log_info(LOG_SUB, "waiting up to %.1fs for %zu running execution(s)", w->cfg->shutdown_grace_us / 1e6,
                    running);
    while (cf_exec_pool_running(w->pool) > 0 && cf_mono_us() < until) {
        wait_events(w, -1, 100);
        serve(w);
    }
    if (cf_exec_pool_running(w->pool) > 0) {
        cf_log_warn(LOG_SUB, "shutdown grace over: abandoning %zu execution(s) (they stay uncommitted)",
                    cf_exec_pool_running(w->pool));
        set_flag(&w->cancel_exec);
        while (cf_exec_pool_running(w->pool) > 0) {
            cancel_running(w, NULL);
            wait_events(w, -1, 50);
            serve(w);
        }
    }
    (void)sig_fd;
    /* Everything Kafka does from here is bounded by one deadline: with
     * the broker gone, a synchronous final commit used to wait minutes.
     * What is not committed is read again by the partitions' next owner. */
    int64_t kafka_until = cf_mono_us() + w->cfg->shutdown_kafka_timeout_us;
    w->kafka_closing = true;
    publish_report(w, true);
    int64_t t_flush = cf_mono_us();
    int flush_ms = (int)(w->cfg->shutdown_kafka_timeout_us / 2000);
    rd_kafka_resp_err_t e = producer_drain(w, flush_ms);
    if (e)
        cf_log_warn("kafka",
                    "flush: %s after %d ms: %d message(s) unsent (results among them: their requests stay "
                    "uncommitted and run again on the partitions' next owner)",
                    rd_kafka_err2str(e), flush_ms, rd_kafka_outq_len(w->producer));
    serve(w);
    /* Answers still failing are left to the partitions' next owner. */
    drop_retries(w, NULL);
    store_offsets(w);
    /* Asynchronous: the close below sends it; a broker that does not
     * answer costs no more than the deadline. */
    e = rd_kafka_commit(w->consumer, NULL, 1);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
        cf_log_warn("kafka", "final commit: %s", rd_kafka_err2str(e));
    int64_t t_close = cf_mono_us();
    int64_t left = kafka_until - t_close;
    rd_kafka_queue_t *cq = rd_kafka_queue_new(w->consumer);
    rd_kafka_error_t *cerr = cq ? rd_kafka_consumer_close_queue(w->consumer, cq) : NULL;
    if (!cq || cerr) {
        cf_log_warn("kafka", "consumer close: %s", cerr ? rd_kafka_error_string(cerr) : "out of memory");
        rd_kafka_error_destroy(cerr);
    } else {
        /* Rebalance events of the close come here: hand them to the same
         * handling as during the run. */
        while (!rd_kafka_consumer_closed(w->consumer)) {
            left = kafka_until - cf_mono_us();
            if (left <= 0)
                break;
            rd_kafka_event_t *ev = rd_kafka_queue_poll(cq, (int)(left / 1000 > 100 ? 100 : left / 1000 + 1));
            if (!ev)
                continue;
            if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE)
                on_rebalance(w->consumer, rd_kafka_event_error(ev),
                             (rd_kafka_topic_partition_list_t *)rd_kafka_event_topic_partition_list(ev), w);
            rd_kafka_event_destroy(ev);
        }
    }
    /* Kept until the consumer is destroyed: a rebalance left unserved in
     * it would make that destroy wait forever (cf_worker_destroy drains it). */
    w->close_q = cq;
    w->consumer_closed = rd_kafka_consumer_closed(w->consumer);
    if (!w->consumer_closed)
        cf_log_warn("kafka",
                    "the broker did not answer the group leave within shutdown-kafka-timeout (%.1fs): leaving "
                    "without it; the group reassigns the partitions after its session timeout",
                    w->cfg->shutdown_kafka_timeout_us / 1e6);
    cf_log_info(LOG_SUB, "kafka shutdown: flush %.2fs, commit and close %.2fs", (t_close - t_flush) / 1e6,
                (cf_mono_us() - t_close) / 1e6);
    cf_log_info(LOG_SUB,
                "stopped: %" PRIu64 " received, %" PRIu64 " answered (%" PRIu64 " rejected, %" PRIu64
                " cancelled), %" PRIu64 " dead-lettered, %" PRIu64 " left for redelivery, %" PRIu64 " answer retries",
                w->n_received, w->n_results, w->n_rejected, w->n_cancelled, w->n_dead, w->n_abandoned, w->n_retries);
}

/* Publishes this worker's report (or, when gone, its tombstone) to the
 * workers topic: see worker_report.h.  Failures are logged by on_delivery;
 * a report is never worth failing the worker for. */
static void publish_report(cf_worker *w, bool gone)
{
    const cf_worker_config *c = w->cfg;
    if (!c->workers_topic || !c->workers_topic[0])
        return;
    char *json = NULL;
    if (!gone) {
        const char **topics = calloc(w->ntopics + 1, sizeof(*topics));
        const char **results = calloc(w->ntopics + 1, sizeof(*results));
        size_t n = 0, nr = 0;
        if (!topics || !results) {
            free(topics);
            free(results);
            cf_log_warn(LOG_SUB, "worker report: out of memory");
            return;
        }
        results[nr++] = c->result_topic;
        for (size_t i = 0; i < w->ntopics; i++) {
            topics[n++] = w->topics[i].name;
            bool dup = false;
            for (size_t k = 0; k < nr; k++)
                dup = dup || strcmp(results[k], w->topics[i].results) == 0;
            if (!dup)
                results[nr++] = w->topics[i].results;
        }
        char client_id[200];
        kafka_client_id(w, true, client_id, sizeof(client_id));
        cf_worker_load load = {.at_ms = cf_now_us() / 1000,
                               .busy = (int64_t)cf_exec_pool_running(w->pool),
                               .held = (int64_t)cf_exec_pool_queued(w->pool),
                               .paused = w->paused_all,
                               .draining = w->stopping,
                               .received = w->n_received,
                               .answered = w->n_results,
                               .rejected = w->n_rejected,
                               .dead_lettered = w->n_dead,
                               .retries = w->n_retries};
        /* The partitions the guard finds stalled, as "topic[N]" (a few:
         * the report stays small). */
        const char *stalled_names[CF_WORKER_LOAD_STALLED_MAX];
        char stalled_buf[CF_WORKER_LOAD_STALLED_MAX][280];
        for (size_t t = 0; t < w->ntopics; t++)
            for (size_t p = 0; p < w->topics[t].nparts; p++) {
                const part_state *ps = &w->topics[t].parts[p];
                if (!ps->assigned || !ps->guard.stalled_us || load.n_stalled >= CF_WORKER_LOAD_STALLED_MAX)
                    continue;
                snprintf(stalled_buf[load.n_stalled], sizeof(stalled_buf[0]), "%s[%zu]", w->topics[t].name, p);
                stalled_names[load.n_stalled] = stalled_buf[load.n_stalled];
                load.n_stalled++;
            }
        load.stalled = stalled_names;
        cf_pguard_counts gc;
        cf_pguard_counts_get(w->guard, &gc);
        load.stalls = gc.stalls;
        cf_worker_report_info info = {
            .worker_id = w->worker_id,
            .client_id = client_id,
            .group = c->group,
            .started_at_ms = w->started_ms,
            .slots = c->slots,
            .request_topics = topics,
            .n_request_topics = n,
            .result_topic = c->result_topic,
            .result_topics = results,
            .n_result_topics = nr,
            .max_output_bytes = c->max_output_bytes,
            /* stdout and stderr at the cap, the output file, collected
             * files, and room for everything else a result carries. */
            .largest_result_bytes =
                2 * c->max_output_bytes + c->max_output_file_bytes + c->collect_bytes + 64 * 1024,
            .redis = w->have_redis,
            .backends = w->backends,
            .compiled_languages = cf_pipeline_languages(w->pipeline),
            .load = &load,
        };
        json = cf_worker_report_json(&info);
        free(topics);
        free(results);
        if (!json) {
            cf_log_warn(LOG_SUB, "worker report: out of memory");
            return;
        }
    }
    rd_kafka_resp_err_t e = rd_kafka_producev(
        w->producer, RD_KAFKA_V_TOPIC(c->workers_topic), RD_KAFKA_V_KEY(w->worker_id, strlen(w->worker_id)),
        RD_KAFKA_V_VALUE(json, json ? strlen(json) : 0), RD_KAFKA_V_MSGFLAGS(json ? RD_KAFKA_MSG_F_FREE : 0),
        RD_KAFKA_V_OPAQUE(&report_tag), RD_KAFKA_V_END);
    if (e) {
        cf_log_warn(LOG_SUB, "worker report not queued for %s: %s", c->workers_topic, rd_kafka_err2str(e));
        free(json);
    }
}

int cf_worker_run(cf_worker *w, bool handle_signals, cf_error *err)
{
    int sig_fd = -1;
    if (handle_signals) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sig_fd < 0)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "signalfd");
    }
    char names[1024];
    rd_kafka_resp_err_t e = subscribe_all(w, names, sizeof(names));
    if (e) {
        if (sig_fd >= 0)
            close(sig_fd);
        return cf_error_set(err, CF_E_KAFKA, "subscribing to %s: %s", names, rd_kafka_err2str(e));
    }
    cf_log_info(LOG_SUB, "worker %s consuming %s (group %s, %" PRId64 " slot(s))", w->worker_id, names,
                w->cfg->group, w->cfg->slots);
    w->started_ms = cf_now_us() / 1000;
    w->report_next_us = cf_mono_us() + w->cfg->report_interval_us;
    publish_report(w, false);
    int rc = 0;
    while (!atomic_load(&w->stop_requested)) {
        if (rd_kafka_fatal_error(w->producer, NULL, 0)) {
            char buf[512];
            rd_kafka_fatal_error(w->producer, buf, sizeof(buf));
            rc = cf_error_set(err, CF_E_KAFKA, "producer fatal error: %s", buf);
            break;
        }
        /* E.g. a static member fenced by another with its id: it would
         * consume nothing ever again, so it stops (and is restarted). */
        if (rd_kafka_fatal_error(w->consumer, NULL, 0)) {
            char buf[512];
            rd_kafka_fatal_error(w->consumer, buf, sizeof(buf));
            rc = cf_error_set(err, CF_E_KAFKA, "consumer fatal error: %s", buf);
            break;
        }
        serve(w);
        if (w->cfg->report_interval_us > 0 && cf_mono_us() >= w->report_next_us) {
            w->report_next_us = cf_mono_us() + w->cfg->report_interval_us;
            publish_report(w, false);
        }
        /* A periodic wake keeps max.poll.interval.ms satisfied and commits
         * flowing even when nothing happens. */
        wait_events(w, sig_fd, 200);
    }
    shutdown_gracefully(w, sig_fd);
    if (sig_fd >= 0)
        close(sig_fd);
    return rc;
}

void cf_worker_destroy(cf_worker *w)
{
    if (!w)
        return;
    if (w->pool) {
        set_flag(&w->cancel_exec);
        if (w->running)
            cancel_running(w, NULL);
        drop_jobs(w, cf_exec_pool_drop_queued(w->pool, NULL, NULL));
        cf_exec_pool_destroy(w->pool);
    }
    if (w->keeper_started) {
        pthread_mutex_lock(&w->lock);
        w->keeper_stop = true;
        pthread_cond_signal(&w->keeper_cond);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->keeper, NULL);
    }
    w->destroying = true;
    /* Jobs the slots handed back, and answers still with the producer,
     * end here (unmarked: whatever was not delivered is read again by the
     * partitions' next owner); the producer is still alive for them. */
    drain_handoff(w);
    drop_retries(w, NULL);
    control_stop(w);
    memo_free(w);
    cf_pguard_destroy(w->guard); /* its thread uses the consumer */
    w->guard = NULL;
    if (w->consumer_q)
        rd_kafka_queue_destroy(w->consumer_q);
    if (w->consumer) {
        /* A close that did not finish (broker gone) is not tried again;
         * what it still has queued is answered without the worker's
         * waits: an (un)assign call left unmade blocks the destroy. */
        if (w->ran && !w->consumer_closed) {
            rd_kafka_event_t *ev;
            while (w->close_q && (ev = rd_kafka_queue_poll(w->close_q, 0))) {
                if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE) {
                    const rd_kafka_topic_partition_list_t *parts = rd_kafka_event_topic_partition_list(ev);
                    bool coop = strcmp(rd_kafka_rebalance_protocol(w->consumer), "COOPERATIVE") == 0;
                    if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
                        if (coop) {
                            rd_kafka_error_t *e2 = rd_kafka_incremental_unassign(w->consumer, parts);
                            rd_kafka_error_destroy(e2);
                        } else {
                            rd_kafka_assign(w->consumer, NULL);
                        }
                    } else if (coop) {
                        /* An assignment now is taken and dropped at once. */
                        rd_kafka_error_t *e2 = rd_kafka_incremental_assign(w->consumer, parts);
                        rd_kafka_error_destroy(e2);
                    } else {
                        rd_kafka_assign(w->consumer, parts);
                    }
                }
                rd_kafka_event_destroy(ev);
            }
            if (w->close_q)
                rd_kafka_queue_destroy(w->close_q);
            w->close_q = NULL;
            rd_kafka_destroy_flags(w->consumer, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        } else {
            if (w->close_q)
                rd_kafka_queue_destroy(w->close_q);
            w->close_q = NULL;
            rd_kafka_destroy(w->consumer);
        }
    }
    if (w->producer && w->producer_q) {
        producer_drain(w, 1000);
        rd_kafka_purge(w->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        /* The purged messages' reports free their jobs. */
        while (producer_serve(w, 0) == PRODUCER_SERVE_MAX)
            ;
    }
    if (w->flusher_started) {
        pthread_mutex_lock(&w->flush_mu);
        w->flush_stop = true;
        pthread_cond_signal(&w->flush_cv);
        pthread_mutex_unlock(&w->flush_mu);
        pthread_join(w->flusher, NULL);
        w->flusher_started = false;
    }
    if (w->producer_q)
        rd_kafka_queue_destroy(w->producer_q);
    if (w->producer)
        rd_kafka_destroy(w->producer);
    drop_retries(w, NULL);
    for (int64_t s = 0; w->wstate && s < w->cfg->slots; s++)
        cf_wstate_destroy(w->wstate[s]);
    free(w->wstate);
    free(w->running);
    free(w->recent);
    for (size_t t = 0; w->topics && t < w->ntopics; t++) {
        for (size_t p = 0; p < w->topics[t].nparts; p++)
            cf_offset_tracker_destroy(w->topics[t].parts[p].tracker);
        free(w->topics[t].parts);
    }
    free(w->topics);
    cf_profile_set_destroy(w->profiles);
    cf_backend_set_destroy(w->backends);
    cf_pipeline_destroy(w->pipeline);
    /* Last: delivery reports until here may count and export. */
    cf_observe_destroy(w->obs);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->keeper_cond);
    pthread_mutex_destroy(&w->flush_mu);
    pthread_mutex_destroy(&w->stream_mu);
    pthread_cond_destroy(&w->flush_cv);
    free(w);
}
