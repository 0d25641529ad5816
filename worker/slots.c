/* slots.c: what a slot thread does with a job. */
#include "worker_int.h"
#include "workspace_ops_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_util.h"
#include "streamer_int.h"

#define LOG_SUB "worker"

static void run_job_traced(cf_worker *w, job *j, int slot);

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
void flag_set(volatile int *f)
{
    __atomic_store_n(f, 1, __ATOMIC_RELAXED);
}

static bool cancelled(const cf_worker *w, const job *j)
{
    return __atomic_load_n(&w->cancel_exec, __ATOMIC_RELAXED) || job_stop_of(j) != JOB_STOP_NONE;
}

/* A job stopped by the worker: true (res filled: `cancelled`) when the
 * stop was its sender's cancel and the worker is not shutting down;
 * false when it is to be left for the partition's next owner. */
static bool user_cancel_answer(cf_worker *w, job *j, cf_result *res, int64_t wall_us)
{
    if (__atomic_load_n(&w->cancel_exec, __ATOMIC_RELAXED) || job_stop_of(j) != JOB_STOP_SENDER)
        return false;
    res->status = CF_STATUS_CANCELLED;
    res->wall_time_us = wall_us;
    /* SPEC.md 4.1: the reason says whether the program was killed. */
    cf_result_set_reason(res, "%s; %s", j->stop_reason,
                         wall_us ? "the program was killed while it ran" : "it never started");
    cf_log_info(LOG_SUB, "request %s cancelled %s", j->req.id, wall_us ? "while it ran" : "before it started");
    return true;
}

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
                                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE), RD_KAFKA_V_OPAQUE(&delivery_chunk_tag),
                                              RD_KAFKA_V_END);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        delivery_handed_over(sk->w);
        return 0;
    }
    if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        return 1;
    delivery_chunk_failed(sk->w, sk->topic, e);
    return -1;
}

/* A request that asked for one gets a start notice on its output topic
 * (SPEC.md "Start notices") as a slot takes it, before its workspace is
 * restored: from here on it is running, not queued.  A courtesy: it is
 * left out when the output topic is missing or the producer is busy, and
 * the request runs all the same. */
static void publish_start_notice(cf_worker *w, stream_sink *sink, const job *j, const char *run)
{
    if (stream_topic_exists(w, sink->topic) != 1)
        return;
    cf_chunk c = {.kind = CF_CHUNK_START,
                  .id = j->req.id,
                  .run = (char *)run,
                  .worker = strlen(w->worker_id) <= CF_CHUNK_WORKER_MAX ? w->worker_id : NULL,
                  .at_us = cf_now_us()};
    cf_bytes enc = {0};
    cf_error err = {0};
    if (cf_chunk_encode(&c, &enc, &err) < 0) {
        cf_log_warn(LOG_SUB, "request %s: start notice not published: %s", j->req.id, err.msg);
        return;
    }
    if (publish_chunk(sink, j->req.id, enc.data, enc.len) != 0)
        free(enc.data);
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

/* No program: the worker does the op on the checkout, and cf_wstate_end
 * writes its change back like a run's.  True when it changes something. */
static bool workspace_op_run(job *j, const cf_wstate *st, cf_wstate_run *run, cf_result *res)
{
    int64_t t0 = cf_mono_us();
    j->obs.exec_start_ns = cf_observe_now_ns();
    bool changes = ws_op_apply(st, &j->req, run, res);
    j->obs.exec_end_ns = cf_observe_now_ns();
    res->wall_time_us = cf_mono_us() - t0;
    return changes;
}

/* After the write-back of an op's change: one that did not land (a
 * conflict, a cap, the quota, a lapsed lease: the reason says which) is
 * the op's failure, not a success with a note as for a program that ran.
 * (One that changed no byte wrote nothing and said nothing: a success at
 * the same revision.) */
static void workspace_op_landed(const job *j, cf_result *res)
{
    /* Landed: its paths are in changed_paths.  Nothing to write: no paths,
     * no reason.  Otherwise (a conflict's answer carries the other
     * writer's revision, so the revision cannot tell) it did not land. */
    bool landed = !res->workspace_conflict && (res->n_changed_paths > 0 || !res->reason);
    if (res->status != CF_STATUS_SUCCESS || landed)
        return;
    res->status = CF_STATUS_FAILED;
    if (!res->reason)
        cf_result_set_reason(res, "workspace %s: the change was not written", j->req.workspace);
}

/* Runs a request that names a workspace or thread, or neither, with the
 * Redis steps around the backend.  Returns false when the execution was
 * cancelled by the worker (revoke, shutdown): then there is no result and
 * nothing was written back. */
static bool execute_job(cf_worker *w, job *j, int slot, cf_result *res)
{
    cf_exec_ctx ctx = {.slot = slot, .worker_id = w->worker_id, .cancel = &j->stop, .profile = j->profile->name,
                       .profile_max_timeout_us = j->profile->max_timeout_us,
                       .profile_max_memory_bytes = j->profile->max_memory_bytes,
                       .profile_max_processes = j->profile->max_processes,
                       .net_allow = j->profile->net_allow, .n_net_allow = j->profile->n_net_allow};
    cf_error err;
    cf_error_clear(&err);
    cf_streamer streamer;
    stream_sink sink = {.w = w, .topic = j->stream_topic};
    char run_id[CF_CHUNK_RUN_MAX + 1] = ""; /* this execution, in its chunks and start notice */
    if (j->req.stream || j->req.notify_start)
        snprintf(run_id, sizeof(run_id), "%s-%" PRIu64, w->nonce, (uint64_t)atomic_fetch_add(&w->run_seq, 1));
    if (j->req.notify_start && !j->req.stream && j->stream_topic)
        publish_start_notice(w, &sink, j, run_id);
    if (j->req.stream) {
        int exists = j->stream_topic ? stream_topic_exists(w, j->stream_topic) : 0;
        if (exists > 0 && j->req.notify_start)
            publish_start_notice(w, &sink, j, run_id);
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
        cf_streamer_init(&streamer, j->req.id, run_id, w->cfg->stream_interval_us, (size_t)w->cfg->stream_chunk_bytes,
                         w->cfg->stream_max_chunks, publish_chunk, &sink);
        ctx.on_output = cf_streamer_on_output;
        ctx.on_output_arg = &streamer;
    }
    bool needs_state = j->req.workspace || j->req.thread;
    cf_wstate *st = slot_state(w, slot, &err);
    cf_wstate_run run;
    memset(&run, 0, sizeof(run));
    bool run_it = true, completed = true, executed = false;
    /* Holding the lease, the run's workspace and checkpoint writes are
     * fenced by it: if it lapses and another worker takes the request
     * over, this run writes nothing. */
    bool fenced = st && j->claim == JOB_CLAIM_LEASED &&
                  cf_wstate_lease_ref(j->profile->name, j->req.id, j->digest, j->token, j->lease_key,
                                      sizeof(j->lease_key), j->lease_value, sizeof(j->lease_value)) == 0;
    /* This tenant's quotas for what the run writes (cf_wstate_end clears
     * them).  Its reservations name the request only when the run holds
     * the request's lease: then no other run of that id writes meanwhile,
     * and a redelivery's grow may replace a dead run's reservation; without
     * one, runs of one id (the tenant chooses ids) could run at once and
     * each replace the other's, so they stay nameless and stack. */
    if (st)
        cf_wstate_set_quota(st, j->profile->name, j->profile->max_workspace_bytes, j->profile->max_checkpoint_bytes,
                            fenced ? j->req.id : NULL);
    if (needs_state && !st) {
        cf_observe_redis_error(w->obs);
        cf_log_error(LOG_SUB, "request %s: workspace store unavailable: %s", j->req.id, err.msg);
        state_failed(res, &err, "before the run");
        run_it = false;
    } else if (st && cf_wstate_begin(st, &j->req, writer_seq_for(w, j), fenced ? j->lease_key : NULL,
                                     j->lease_value, &run, &run_it, res, &err) < 0) {
        cf_observe_redis_error(w->obs);
        cf_log_error(LOG_SUB, "request %s: %s", j->req.id, err.msg);
        cf_result_clear(res);
        state_failed(res, &err, "before the run");
        run_it = false;
    }
    if (run_it && cancelled(w, j)) {
        run_it = false;
        completed = user_cancel_answer(w, j, res, 0);
    }
    bool op_changes = false; /* a workspace op that changes the workspace */
    if (run_it && j->req.workspace_op) {
        op_changes = workspace_op_run(j, st, &run, res);
        executed = true;
    } else if (run_it) {
        ctx.files = run.ws_active ? &run.files : NULL;
        cf_exec_phases phases = {0};
        ctx.phases = &phases;
        int64_t t0 = cf_mono_us();
        j->obs.exec_start_ns = cf_observe_now_ns();
        executed =
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
            /* A spawn refused for want of processes, while the children's
             * bound is (nearly) full: say whose bound, not a bare EAGAIN. */
            int64_t cmem, cpids;
            budget_children_usage(w, &cmem, &cpids);
            char why[200] = "";
            if (err.sys_errno == EAGAIN && w->children_pids > 0 && cpids >= w->children_pids * 9 / 10)
                snprintf(why, sizeof(why), " (this worker's executions, helpers and zygotes together hold their bound "
                         "of %" PRId64 " processes, children-pids: not the request's fault, try again)",
                         w->children_pids);
            cf_result_set_reason(res, "%s backend failed (%s): %s%s", j->backend->ops->name, cf_errcode_name(err.code),
                                 err.msg, why);
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
                result_add_warning(res, msg);
            }
        }
    }
    int64_t rev_before = run.ws_rev;
    bool ws_active = run.ws_active;
    if (st && cf_wstate_end(st, &j->req, &run, run_it && completed, executed, res, &err) < 0) {
        /* The program ran but its changes could not be stored: the
         * caller must not take the run as applied. */
        cf_observe_redis_error(w->obs);
        cf_log_error(LOG_SUB, "request %s: %s", j->req.id, err.msg);
        state_failed(res, &err, "after the run: its changes were not stored");
    }
    j->write_refused = cf_wstate_write_refused(st);
    if (op_changes)
        workspace_op_landed(j, res);
    if (run_it && completed && ws_active)
        cf_log_debug(LOG_SUB, "request %s: workspace %s revision %" PRId64 " -> %" PRId64 "%s", j->req.id,
                     j->req.workspace, rev_before, res->workspace_revision,
                     res->workspace_conflict ? " (conflict)" : "");
    return completed;
}

/* How many times this message was delivered (0 when unknown). */
static int64_t delivery_count(cf_worker *w, const job *j, cf_wstate *st)
{
    if (!st)
        return 0;
    int64_t attempt = 0;
    cf_error err;
    cf_error_clear(&err);
    if (cf_wstate_attempt(st, w->topics[j->topic].name, j->partition, j->offset, j->stored_below, &attempt, &err) <
        0) {
        cf_observe_redis_error(w->obs);
        cf_log_warn(LOG_SUB, "request %s: delivery count unavailable: %s", j->req.id, err.msg);
    } else
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
    if (!w->idempotent || !st || j->claim == JOB_CLAIM_OFF)
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
            cf_observe_redis_error(w->obs);
            cf_log_warn(LOG_SUB, "request %s: idempotency store unavailable (%s): run without it", j->req.id, err.msg);
            pthread_mutex_lock(&w->lock); /* the lease keeper reads claim under it */
            j->claim = JOB_CLAIM_UNPROTECTED;
            pthread_mutex_unlock(&w->lock);
            return CLAIM_RUN;
        }
        switch (c.kind) {
        case CF_CLAIM_RUN:
            pthread_mutex_lock(&w->lock);
            j->claim = JOB_CLAIM_LEASED;
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
 * workspace or checkpoint write lost a conflict, or was refused by its
 * tenant's quota with nothing written (cf_wstate_write_refused), changed
 * nothing: running it again is what its sender wants, once it made room. */
static bool replayable(const job *j, const cf_result *res)
{
    return res->status != CF_STATUS_INTERNAL_ERROR && res->status != CF_STATUS_REJECTED &&
           res->status != CF_STATUS_CANCELLED && !res->workspace_conflict && !res->checkpoint_conflict &&
           !j->write_refused;
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
    result_cut_bulk(res, max / 4);
    char msg[200];
    snprintf(msg, sizeof(msg),
             "replayed from the idempotency store, which keeps results of at most %zu bytes: stdout, stderr and "
             "output were cut (the original was %zu bytes)", max, published->len);
    result_add_warning(res, msg);
    if (cf_result_encode(res, out, NULL) < 0)
        return -1;
    if (out->len > max) {
        free(out->data);
        *out = (cf_bytes){0};
    }
    return 0;
}

/* What keeping a result for replay was charged to its profile's quota. */
typedef struct result_charge {
    int64_t ttl_ms;       /* how long it may be kept (0: not) */
    int64_t expire_at_ms; /* when, on Redis's clock (0: ttl_ms from the store) */
    int64_t slot;         /* where it was charged, for a refund */
    int64_t bytes;        /* what was charged */
    bool charged;
    bool charge_failed; /* the quota could not be charged */
    bool over_quota;    /* refused by the quota */
    bool store_failed; /* Redis failed past its retry budget: no second wait for the lease's release */
} result_charge;

static void quota_cap(int64_t v, bool bytes, char *buf, size_t cap)
{
    if (!v)
        snprintf(buf, cap, "uncapped");
    else if (bytes)
        cf_format_size(v, buf, cap);
    else
        snprintf(buf, cap, "%" PRId64, v);
}

/* A tenant's share of the idempotency store (issue 30): a result that fits
 * its profile's quota is kept idempotency-ttl; past it, a short while
 * within the quota's grace (recent answers are what a redelivery needs);
 * past that, not at all.  Whatever is not kept the full ttl is published
 * with a warning that says so (res gets it and is encoded again); other
 * tenants' results are kept as before.  The charge is the size the kept
 * copy has at most plus the keys' overhead.  False when the result is not
 * to be kept. */
static bool result_keep(cf_worker *w, cf_wstate *st, job *j, cf_result *res, result_charge *rc)
{
    const cf_profile *p = j->profile;
    int64_t ttl_ms = w->cfg->idempotency_ttl_us / 1000;
    rc->ttl_ms = ttl_ms;
    if (!p->max_stored_result_bytes && !p->max_stored_results)
        return true;
    /* Past the quota: kept long enough for a crashed worker's redelivery
     * (three leases) or a client's retry, within a quarter over the caps. */
    int64_t short_ms = 3 * w->cfg->idempotency_lease_us / 1000;
    if (short_ms < 600000)
        short_ms = 600000;
    char msg[600], held[32], this[32], caps[2][32];
    cf_quota q = {.max_bytes = p->max_stored_result_bytes,
                  .max_count = p->max_stored_results,
                  .short_ttl_ms = short_ms < ttl_ms ? short_ms : 0,
                  .grace_percent = 25,
                  .short_extra_bytes = (int64_t)sizeof(msg) + 64}; /* its warning, in the stored copy */
    /* What Redis spends on it, measured (issue 30 attack): the value plus
     * up to a quarter for the allocator's size classes, and about 640
     * bytes of keys, fields and expiry besides the id and profile names. */
    size_t max = (size_t)w->cfg->idempotency_max_result_bytes;
    int64_t value = (int64_t)(j->out.value.len < max ? j->out.value.len : max);
    rc->bytes = value + value / 4 + 2 * (int64_t)strlen(j->req.id) + 2 * (int64_t)strlen(p->name) + 640;
    cf_quota_outcome c;
    cf_error err;
    cf_error_clear(&err);
    if (cf_wstate_quota_charge(st, "results", p->name, &q, ttl_ms, rc->bytes, &c, &err) < 0) {
        /* Not kept rather than kept past the quota unchecked.  The
         * tenant reads the warning: Redis's own words stay in the log. */
        cf_log_warn(LOG_SUB, "request %s: result quota: %s: the result is not kept", j->req.id, err.msg);
        cf_observe_redis_error(w->obs);
        rc->ttl_ms = 0;
        rc->charge_failed = true;
        rc->store_failed = err.retriable; /* else Redis answers: the lease can be released */
        snprintf(msg, sizeof(msg), "not kept for replay: the result store was unavailable; a redelivery or "
                                   "resubmission of this request runs it again");
    } else {
        rc->ttl_ms = c.ttl_ms;
        rc->expire_at_ms = c.expire_at_ms;
        rc->slot = c.slot;
        rc->charged = c.ttl_ms > 0;
        rc->over_quota = c.ttl_ms == 0;
        if (rc->charged)
            rc->bytes = c.charged_bytes;
        if (c.ttl_ms == ttl_ms)
            return true;
        cf_format_size(c.held.bytes, held, sizeof(held));
        cf_format_size(rc->bytes, this, sizeof(this));
        quota_cap(q.max_count, false, caps[0], sizeof(caps[0]));
        quota_cap(q.max_bytes, true, caps[1], sizeof(caps[1]));
        char kept[64];
        if (c.ttl_ms > 0) {
            char d[32];
            if (c.ttl_ms % 60000 == 0)
                snprintf(d, sizeof(d), "%" PRId64 " min", c.ttl_ms / 60000);
            else
                cf_format_duration(c.ttl_ms * 1000, d, sizeof(d));
            snprintf(kept, sizeof(kept), "kept for replay for %s only", d);
        } else {
            snprintf(kept, sizeof(kept), "not kept for replay");
        }
        snprintf(msg, sizeof(msg),
                 "%s: profile '%s' keeps %" PRId64 " result(s) (%s) in Redis against its quota (max-stored-results "
                 "%s, max-stored-result-bytes %s), and this one (%s) did not fit; %s of this request runs it "
                 "again, workspace and checkpoint writes included",
                 kept, p->name, c.held.count, held, caps[0], caps[1], this,
                 c.ttl_ms > 0 ? "after that, a redelivery or resubmission" : "a redelivery or resubmission");
    }
    cf_log_info(LOG_SUB, "request %s: result %s", j->req.id, msg);
    result_add_warning(res, msg);
    if (delivery_set_result(w, j, res) < 0) /* the one without the warning stays */
        cf_log_warn(LOG_SUB, "request %s: no memory to add the quota warning", j->req.id);
    return rc->ttl_ms > 0;
}

void slots_run_job(cf_pool_job *pj, int slot, void *arg)
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
    job_set_state(w, j, JOB_RUNNING);
    pthread_mutex_lock(&w->lock);
    w->running[slot] = j;
    /* A cancel applied while the pool handed this job over. */
    int64_t now = cf_mono_us();
    int64_t window = w->cfg->cancel_memory_us < RECENT_CANCEL_US ? w->cfg->cancel_memory_us : RECENT_CANCEL_US;
    for (size_t i = 0; w->recent && i < RECENT_CANCELS && i < w->recent_next; i++) {
        const recent_cancel *rc = &w->recent[i];
        if (now - rc->at_us < window && rc->topic == j->topic && j->req.id &&
            strcmp(rc->id, j->req.id) == 0) {
            job_request_stop(j, JOB_STOP_SENDER, rc->reason);
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
        cf_wstate_set_cancel(st, &j->stop);
    int64_t attempt = delivery_count(w, j, st);
    claim_outcome o = claim(w, j, slot, st, &res);
    if (o == CLAIM_RUN && intake_deadline_passed(&j->req, reason, sizeof(reason))) {
        /* It waited in the queue past its deadline (an answered request was
         * replayed above instead). */
        res.status = CF_STATUS_REJECTED;
        cf_result_set_reason(&res, "%s", reason);
    } else {
        if (o == CLAIM_RUN) {
            completed = execute_job(w, j, slot, &res);
        } else if (o == CLAIM_STOPPED) {
            completed = user_cancel_answer(w, j, &res, 0);
        }
    }
    res.meta.attempt = attempt;
    if (j->claim == JOB_CLAIM_UNPROTECTED && completed)
        result_add_warning(&res, "the idempotency store could not be reached: this request ran without replay "
                          "protection, and a redelivery of it would run again");
    if (st)
        cf_wstate_set_cancel(st, NULL);
    /* From here on the main thread may free j (after its delivery): it
     * must not find it among the running ones. */
    pthread_mutex_lock(&w->lock);
    w->running[slot] = NULL;
    bool leased = j->claim == JOB_CLAIM_LEASED;
    if (leased)
        j->claim = JOB_CLAIM_DONE; /* the lease keeper renews it no more */
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
        delivery_hand_back(w, j, 0); /* running: dropped by the main thread */
        return;
    }
    cf_log_debug(LOG_SUB, "request %s finished: %s", j->req.id, cf_status_name(res.status));
    if (delivery_set_result(w, j, &res) < 0) {
        cf_log_error(LOG_SUB, "request %s: no memory for its result: left for redelivery", j->req.id);
        if (leased)
            cf_wstate_lease_release(st, j->profile->name, j->req.id, j->digest, j->token, &err);
        cf_result_clear(&res);
        delivery_hand_back(w, j, 0);
        return;
    }
    if (leased) {
        /* Stored before it is published: a crash between the two replays
         * it on redelivery instead of running it again. */
        cf_bytes copy = {0};
        result_charge charge = {0};
        bool store = replayable(j, &res) && result_keep(w, st, j, &res, &charge) &&
                     stored_copy(&res, &j->out.value, (size_t)w->cfg->idempotency_max_result_bytes, &copy) == 0 &&
                     copy.len > 0;
        bool stored = false;
        int rc = 0;
        if (store)
            rc = cf_wstate_store_result(st, j->profile->name, j->req.id, j->digest, j->token, &copy, charge.ttl_ms,
                                        charge.expire_at_ms, &stored, &err);
        else if (!charge.store_failed) /* else the lease lapses: another retry budget would delay the answer */
            rc = cf_wstate_lease_release(st, j->profile->name, j->req.id, j->digest, j->token, &err);
        free(copy.data);
        if (rc < 0) {
            cf_observe_redis_error(w->obs);
            cf_log_warn(LOG_SUB, "request %s: idempotency store: %s (the result is published all the same)",
                        j->req.id, err.msg);
        }
        /* One outcome per result offered to the store. */
        if (replayable(j, &res)) {
            const char *outcome = "not_kept"; /* another run answered first, or even the cut copy was too big */
            if (stored)
                outcome = charge.ttl_ms < w->cfg->idempotency_ttl_us / 1000 ? "kept_short" : "kept";
            else if (rc < 0 || charge.charge_failed)
                outcome = "unavailable";
            else if (charge.over_quota)
                outcome = "over_quota";
            cf_observe_result_store(w->obs, j->profile->name, outcome);
        }
        /* Charged but not kept (another run answered first, the cut copy
         * did not fit): the charge goes back.  Not after a failed store,
         * which may have stored (the ledger errs towards refusing). */
        if (charge.charged && !stored && rc == 0) {
            cf_error e;
            if (cf_wstate_quota_refund(st, "results", j->profile->name, charge.slot, charge.bytes, &e) < 0)
                cf_log_debug(LOG_SUB, "request %s: result quota refund: %s", j->req.id, e.msg);
        }
    }
    cf_result_clear(&res);
    delivery_send(w, j);
}

/* Tells the running executions that match (lm NULL = all) to stop. */
size_t slots_stop_running(cf_worker *w, lane_match *lm)
{
    size_t n = 0;
    pthread_mutex_lock(&w->lock);
    for (int64_t s = 0; s < w->nslots; s++) {
        job *j = w->running[s];
        if (j && (!lm || partitions_lane_matches(j->pj.partition, lm))) {
            job_request_stop(j, JOB_STOP_WORKER, NULL);
            n++;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return n;
}

/* Renews the leases of running executions every third of their length,
 * on its own Redis connection. */
void *slots_lease_keeper(void *arg)
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
    held *h = calloc((size_t)w->nslots, sizeof(*h));
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
        for (int64_t s = 0; s < w->nslots; s++) {
            const job *j = w->running[s];
            if (j && j->claim == JOB_CLAIM_LEASED) {
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

