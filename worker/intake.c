/* intake.c: taking a message: decode, admission, queueing. */
#include "worker_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_util.h"

#define LOG_SUB "worker"

static void intake_take_traced(cf_worker *w, rd_kafka_t *rk, rd_kafka_message_t *m);

static int64_t min_set(int64_t a, int64_t b)
{
    return b > 0 && b < a ? b : a;
}

/* A workspace op (SPEC.md section 3.5): the profile's rules for
 * workspaces, reply_to and output caps; no backend or processes (the
 * worker does it in the slot's thread), and what it reads charged to the
 * memory budget. */
static int admit_workspace_op(cf_worker *w, job *j, char *reason, size_t rsz)
{
    const cf_worker_config *c = w->cfg;
    cf_request *req = &j->req;
    cf_policy *p = &req->policy;
    if (p->max_stdout_bytes == 0)
        p->max_stdout_bytes = min_set(c->default_output_bytes, j->profile->max_output_bytes);
    /* What it holds in the worker's memory while it runs (the files it
     * reads, their copies and a patch's lines), against the budget like an
     * execution's limit: the one-file ops the largest file twice, grep and
     * apply_patch the largest workspace three times, plus what it carries. */
    const cf_workspace_op *op = req->workspace_op;
    bool whole = op->op == CF_WS_OP_GREP || op->op == CF_WS_OP_APPLY_PATCH;
    int64_t mem = (whole ? 3 * c->workspace_max_total_bytes : 2 * c->workspace_max_file_bytes) +
                  8 * (int64_t)(op->content.len + op->old_str.len + op->new_str.len);
    if (cf_profile_admit(j->profile, w->profiles, NULL, req, reason, rsz) < 0)
        return -1;
    if (p->max_stdout_bytes > c->max_output_bytes) {
        snprintf(reason, rsz, "policy.max_stdout_bytes exceeds this worker's maximum %" PRId64, c->max_output_bytes);
        return -1;
    }
    if (req->reply_to)
        j->result_topic = req->reply_to;
    req->notify_start = false; /* nothing waits long enough to be worth one */
    int64_t fits = w->memory_group_max > 0 ? w->memory_group_max : w->memory_budget;
    if (w->memory_budget > 0 && mem > fits)
        mem = fits; /* what one op holds is bounded by the caps: it fits alone */
    j->pj.cost[CF_POOL_MEMORY] = w->memory_budget > 0 ? mem : 0;
    j->pj.cost[CF_POOL_PIDS] = 0;
    return cf_wstate_admit(req, w->have_redis, reason, rsz);
}

/* Checks the request against its profile (what the operator allows this
 * topic's tenant), fills defaults, checks the worker's maxima and the
 * chosen backend's capabilities.  Returns -1 with a reason to reject. */
static int admit(cf_worker *w, job *j, char *reason, size_t rsz)
{
    if (j->req.workspace_op)
        return admit_workspace_op(w, j, reason, rsz);
    const cf_worker_config *c = w->cfg;
    const cf_profile *prof = j->profile;
    cf_request *req = &j->req;
    /* A session lives in its workspace (SPEC 3.6): the session's own id
     * when the request names no other, so that the profile's state prefix
     * and the workspace's lease, fence and quota apply as to any run. */
    bool session_ws = req->session && !req->workspace;
    if (session_ws && cf_str_set(&req->workspace, req->session) < 0) {
        snprintf(reason, rsz, "out of memory");
        return -1;
    }
    const char *bname = cf_profile_backend_for(prof, req);
    cf_policy *p = &req->policy;
    /* Defaults first, never above the profile's maxima. */
    if (p->timeout_us == 0)
        p->timeout_us = min_set(c->default_timeout_us, prof->max_timeout_us);
    if (p->max_stdout_bytes == 0)
        p->max_stdout_bytes = min_set(c->default_output_bytes, prof->max_output_bytes);
    if (p->max_stderr_bytes == 0)
        p->max_stderr_bytes = min_set(c->default_output_bytes, prof->max_output_bytes);
    if (p->memory_bytes == 0 && prof->default_memory_bytes > 0)
        p->memory_bytes = min_set(prof->default_memory_bytes, prof->max_memory_bytes);
    if (cf_profile_admit(prof, w->profiles, bname, req, reason, rsz) < 0) {
        size_t used = strlen(reason);
        if (session_ws && used < rsz)
            snprintf(reason + used, rsz - used, " (session '%s' lives in the workspace of its own id)", req->session);
        return -1;
    }
    j->backend = cf_backend_set_select_as(w->backends, bname, req, reason, rsz);
    if (!j->backend)
        return -1;
    if (req->reply_to)
        j->result_topic = req->reply_to;
    if (req->stream || req->notify_start) {
        /* The output topic: chunks need it (else the request is refused);
         * a start notice is only a courtesy and is left out without one. */
        const char *suffix = c->stream_topic_suffix;
        free(j->stream_topic);
        j->stream_topic = NULL;
        if (!suffix || !suffix[0]) {
            if (req->stream) {
                snprintf(reason, rsz, "stream: streaming is off on this worker (stream-topic-suffix is empty)");
                return -1;
            }
        } else {
            size_t tl = strlen(j->result_topic) + strlen(suffix) + 1;
            j->stream_topic = malloc(tl);
            if (j->stream_topic)
                snprintf(j->stream_topic, tl, "%s%s", j->result_topic, suffix);
            else if (req->stream) {
                snprintf(reason, rsz, "stream: out of memory");
                return -1;
            }
            if (j->stream_topic && !cf_profile_output_topic_ok(prof, w->profiles, j->stream_topic, reason, rsz)) {
                if (req->stream)
                    return -1;
                reason[0] = '\0';
                free(j->stream_topic);
                j->stream_topic = NULL;
            }
        }
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
    /* What it reserves of the memory and process budgets while it runs;
     * one that could never fit is refused now rather than waiting for ever.
     * One its sender already cancelled never runs: it reserves nothing. */
    if (job_stop_of(j) == JOB_STOP_SENDER) {
        j->pj.cost[CF_POOL_MEMORY] = j->pj.cost[CF_POOL_PIDS] = 0;
        goto policy;
    }
    const char *charged;
    int64_t mem = j->pj.cost[CF_POOL_MEMORY] = budget_cost(w, req, &charged);
    int64_t fits = w->memory_group_max > 0 ? w->memory_group_max : w->memory_budget;
    if (w->memory_budget > 0 && mem > fits) {
        snprintf(reason, rsz,
                 "%s, %" PRId64 " (%" PRId64 " MiB), does not fit this worker's memory budget of %" PRId64 " MiB%s",
                 charged, mem, mem >> 20, fits >> 20,
                 w->memory_group_max > 0 ? " for one profile's executions (memory-budget, less what its reserve "
                                           "slots keep for the other profiles)"
                                         : " (memory-budget: what the executions running at once may reserve)");
        return -1;
    }
    int64_t pids = j->pj.cost[CF_POOL_PIDS] = budget_pids_cost(w, j->backend, req, j->profile, &charged);
    int64_t share = w->topics[j->pj.group].pids_share;
    fits = share > 0 ? share : w->pids_budget;
    if (w->pids_budget > 0 && pids > fits) {
        snprintf(reason, rsz, "%s, %" PRId64 " with what the backend adds, do not fit this worker's %" PRId64
                 " for executions%s", charged, pids, fits,
                 share > 0 ? " of this profile (children-pids less what helpers and zygotes keep, less what the "
                             "reserve slots keep for the other profiles)"
                           : " (children-pids less what helpers and zygotes keep: what the executions running at "
                             "once may hold)");
        return -1;
    }
policy:
    if (cf_wstate_admit(req, w->have_redis, reason, rsz) < 0)
        return -1;
    return cf_policy_check(&j->backend->caps, j->backend->ops->name, req, reason, rsz);
}

bool intake_deadline_passed(const cf_request *req, char *reason, size_t rsz)
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

void intake_take(cf_worker *w, rd_kafka_t *rk, rd_kafka_message_t *m)
{
    intake_take_traced(w, rk, m);
    cf_job_obs_log(NULL);
}

static void intake_take_traced(cf_worker *w, rd_kafka_t *rk, rd_kafka_message_t *m)
{
    if (m->err) {
        /* The same one-line explanations as the clients' errors. */
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            kafka_on_error(rk, m->err, rd_kafka_message_errstr(m), w);
        return;
    }
    const char *tname = m->rkt ? rd_kafka_topic_name(m->rkt) : NULL;
    long ti = partitions_topic_index(w, tname);
    part_state *ps = ti < 0 ? NULL : partitions_get(w, (size_t)ti, m->partition, false);
    if (!ps || !ps->assigned || w->stopping)
        return; /* not ours (any more): not tracked, so never committed */
    job *j = job_new(w);
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
        job_free(j);
        return;
    }
    if (added < 0) {
        cf_log_error(LOG_SUB, "cannot take %s[%" PRId32 "]@%" PRId64 " (%zu pending, or no memory): reading it again",
                     tname, m->partition, m->offset, cf_offset_tracker_pending(ps->tracker));
        job_free(j);
        partitions_rewind(w, tname, m->partition, m->offset);
        return;
    }
    int64_t msg_ts = rd_kafka_message_timestamp(m, NULL);
    cf_job_obs_begin(&j->obs, NULL, msg_ts > 0 ? msg_ts : 0);
    if (!ps->held && cf_offset_tracker_pending(ps->tracker) >= partitions_tracker_soft(w))
        partitions_hold(w);
    j->topic = (size_t)ti;
    j->profile = w->topics[ti].profile;
    j->partition = m->partition;
    j->offset = m->offset;
    j->stored_below = cf_offset_tracker_stored(ps->tracker);
    j->gen = ps->gen;
    j->result_topic = w->topics[ti].results;
    j->pj.partition = partitions_lane((size_t)ti, m->partition);
    j->pj.group = (int)ti;
    job_taken(w, j); /* from here on it ends exactly once */
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
        /* The request's size exactly (never rounded to look like the
         * limit), the limit as it was configured. */
        char max[32];
        cf_format_size(w->cfg->max_request_bytes, max, sizeof(max));
        snprintf(reason, sizeof(reason), "request of %zu bytes exceeds this worker's max-request of %s", m->len, max);
    } else {
        cf_decode_limits lim = cf_decode_limits_default;
        lim.max_total_bytes = (size_t)w->cfg->max_request_bytes;
        if (cf_request_decode(m->payload, m->len, &lim, &j->req, &err) == 0) {
            /* Its caller's trace, continued: this thread's lines about it
             * carry the trace (cleared by intake_take). */
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
                j->claim = cf_request_digest(&j->req, j->digest, &derr) == 0 ? JOB_CLAIM_WANTED : JOB_CLAIM_OFF;
                if (j->claim == JOB_CLAIM_OFF)
                    cf_log_warn(LOG_SUB, "request %s: no digest (%s): it runs without the idempotency store",
                                j->req.id, derr.msg);
            }
            /* Its sender cancelled it before it came here: it goes the
             * usual way (admission: its reply_to; the slot: a result the
             * idempotency store holds is replayed, a redelivered request
             * that already finished is not contradicted) but never runs. */
            const memo_entry *me = cancels_remembered(w, ti, j->req.id);
            if (me)
                job_request_stop(j, JOB_STOP_SENDER, me->reason);
            /* With the store, a passed deadline is judged in the slot, after
             * the store is asked: an answered request is replayed, not
             * refused. */
            if ((j->claim == JOB_CLAIM_OFF && intake_deadline_passed(&j->req, reason, sizeof(reason))) ||
                admit(w, j, reason, sizeof(reason)) < 0) {
                j->obs.admitted_ns = cf_observe_now_ns();
                delivery_answer_rejected(w, j, j->req.id, reason);
                return;
            }
            j->obs.admitted_ns = cf_observe_now_ns();
            job_set_state(w, j, JOB_QUEUED);
            if (cf_exec_pool_submit(w->pool, &j->pj) < 0) {
                cf_log_error(LOG_SUB, "out of memory queueing request %s", j->req.id);
                cf_result res = {0};
                res.status = CF_STATUS_INTERNAL_ERROR;
                cf_result_set_reason(&res, "worker %s is out of memory: the request was not run", w->worker_id);
                delivery_send_result(w, j, &res);
                cf_result_clear(&res);
            }
            return;
        }
        snprintf(reason, sizeof(reason), "malformed request: %s", err.msg);
    }
    char id[CF_ID_MAX + 1];
    if (m->len && cf_request_peek_id(m->payload, m->len, id, sizeof(id)) == 0)
        delivery_answer_rejected(w, j, id, reason);
    else
        delivery_dead_letter(w, j, m, reason);
}

