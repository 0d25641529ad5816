/* job.c: the job record and its one lifecycle (job_int.h draws it). */
#include "worker_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_log.h"
#include "cf_util.h"

#define LOG_SUB "job"

static const char *const state_names[JOB__STATES] = {
    [JOB_TAKEN] = "taken",
    [JOB_QUEUED] = "queued",
    [JOB_RUNNING] = "running",
    [JOB_PRODUCING] = "producing",
    [JOB_RETRY_WAIT] = "retry-wait",
    [JOB_BLOCKING] = "blocking",
    [JOB_ANSWERED] = "answered",
    [JOB_DEAD_LETTERED] = "dead-lettered",
    [JOB_DROPPED] = "dropped",
};

/* The legal transitions: legal[from] is the set of states a job in from
 * may move to.  Everything else is a bug. */
#define TO(s) (1u << (s))
static const unsigned legal[JOB__STATES] = {
    /* Admitted; or answered at once: rejected, a dead letter, a cancel
     * that came first; or no memory to go on. */
    [JOB_TAKEN] = TO(JOB_QUEUED) | TO(JOB_PRODUCING) | TO(JOB_DROPPED),
    /* A slot took it; cancelled while waiting (answered); its partition
     * given up before a slot took it. */
    [JOB_QUEUED] = TO(JOB_RUNNING) | TO(JOB_PRODUCING) | TO(JOB_DROPPED),
    /* Its answer; or stopped by the worker (revoke, shutdown), or no
     * memory for its answer. */
    [JOB_RUNNING] = TO(JOB_PRODUCING) | TO(JOB_DROPPED),
    /* Delivered; failed (retry, or a dead letter the broker refuses:
     * blocking); its partition gone meanwhile. */
    [JOB_PRODUCING] = TO(JOB_ANSWERED) | TO(JOB_DEAD_LETTERED) | TO(JOB_RETRY_WAIT) | TO(JOB_BLOCKING) |
                      TO(JOB_DROPPED),
    [JOB_RETRY_WAIT] = TO(JOB_PRODUCING) | TO(JOB_DROPPED),
    /* Produced again, and again, until it lands (the same state: intake
     * stays blocked meanwhile). */
    [JOB_BLOCKING] = TO(JOB_BLOCKING) | TO(JOB_DEAD_LETTERED) | TO(JOB_DROPPED),
    [JOB_ANSWERED] = 0,
    [JOB_DEAD_LETTERED] = 0,
    [JOB_DROPPED] = 0,
};

const char *job_state_name(job_state s)
{
    return s >= 0 && s < JOB__STATES ? state_names[s] : "?";
}

bool job_transition_legal(job_state from, job_state to)
{
    return from >= 0 && from < JOB__STATES && to >= 0 && to < JOB__STATES && (legal[from] & TO(to)) != 0;
}

job *job_new(cf_worker *w)
{
    (void)w;
    job *j = calloc(1, sizeof(*j));
    if (j)
        j->state = JOB_TAKEN;
    return j;
}

void job_out_clear(job_out *o)
{
    free(o->key);
    free(o->value.data);
    if (o->hdrs)
        rd_kafka_headers_destroy(o->hdrs);
    memset(o, 0, sizeof(*o));
}

void job_free(job *j)
{
    if (!j)
        return;
    cf_request_clear(&j->req);
    job_out_clear(&j->out);
    free(j->stream_topic);
    free(j->pj.key);
    free(j->key);
    free(j);
}

/* Moves a count of the worker's and of the caller's ledger. */
static void count(cf_worker *w, size_t field_offset, int64_t by)
{
    _Atomic uint64_t *mine = (_Atomic uint64_t *)((char *)&w->jobs + field_offset);
    atomic_fetch_add(mine, (uint64_t)by);
    if (w->ledger)
        atomic_fetch_add((_Atomic uint64_t *)((char *)w->ledger + field_offset), (uint64_t)by);
}

void job_taken(cf_worker *w, job *j)
{
    w->inflight++;
    w->topics[j->topic].inflight++;
    count(w, offsetof(cf_worker_jobs, taken), 1);
    atomic_fetch_add(&w->jobs.live, 1);
    if (w->ledger)
        atomic_fetch_add(&w->ledger->live, 1);
}

/* The end of a job (main thread): answered or dead-lettered marks its
 * offset done if its partition is still ours as it was when the job was
 * taken; dropped never does, so the partition's next owner reads it
 * again.  Nothing else frees a job that was taken. */
static void job_end(cf_worker *w, job *j, job_state how)
{
    part_state *ps = partitions_get(w, j->topic, j->partition, false);
    if (how != JOB_DROPPED && ps && ps->assigned && ps->gen == j->gen)
        cf_offset_tracker_done(ps->tracker, j->offset);
    switch (how) {
    case JOB_ANSWERED:
        count(w, offsetof(cf_worker_jobs, answered), 1);
        if (j->obs.status && strcmp(j->obs.status, cf_status_name(CF_STATUS_CANCELLED)) == 0)
            w->n_cancelled++;
        break;
    case JOB_DEAD_LETTERED:
        count(w, offsetof(cf_worker_jobs, dead_lettered), 1);
        break;
    default:
        count(w, offsetof(cf_worker_jobs, dropped), 1);
        break;
    }
    atomic_fetch_sub(&w->jobs.live, 1);
    if (w->ledger)
        atomic_fetch_sub(&w->ledger->live, 1);
    w->inflight--;
    w->topics[j->topic].inflight--;
    job_free(j);
}

bool job_set_state(cf_worker *w, job *j, job_state to)
{
    job_state from = j->state;
    if (!job_transition_legal(from, to)) {
        cf_log_error(LOG_SUB, "request %s (%s[%" PRId32 "]@%" PRId64 "): illegal transition %s -> %s refused",
                     j->req.id ? j->req.id : "?", w->topics[j->topic].name, j->partition, j->offset,
                     job_state_name(from), job_state_name(to));
        return false;
    }
    cf_log_debug(LOG_SUB, "request %s (%s[%" PRId32 "]@%" PRId64 "): %s -> %s", j->req.id ? j->req.id : "?",
                 w->topics[j->topic].name, j->partition, j->offset, job_state_name(from), job_state_name(to));
    /* No work is taken while a dead letter the broker refuses waits. */
    if (to == JOB_BLOCKING && from != JOB_BLOCKING)
        w->intake_blocked++;
    if (from == JOB_BLOCKING && to != JOB_BLOCKING)
        w->intake_blocked--;
    j->state = to;
    if (job_state_terminal(to))
        job_end(w, j, to);
    return true;
}

void job_request_stop(job *j, job_stop why, const char *reason)
{
    job_stop now = job_stop_of(j);
    /* The sender's cancel decides the answer, whenever it comes; the
     * worker's own stop only when nothing asked before. */
    if (now == JOB_STOP_SENDER || (why == JOB_STOP_WORKER && now != JOB_STOP_NONE))
        return;
    if (why == JOB_STOP_SENDER)
        cf_strlcpy(j->stop_reason, reason ? reason : "cancelled", sizeof(j->stop_reason));
    __atomic_store_n(&j->stop, (int)why, __ATOMIC_RELEASE);
}

void cf_worker_jobs_get(const cf_worker *w, cf_worker_jobs *out)
{
    cf_worker *m = (cf_worker *)w; /* read only */
    atomic_store(&out->taken, atomic_load(&m->jobs.taken));
    atomic_store(&out->answered, atomic_load(&m->jobs.answered));
    atomic_store(&out->dead_lettered, atomic_load(&m->jobs.dead_lettered));
    atomic_store(&out->dropped, atomic_load(&m->jobs.dropped));
    atomic_store(&out->live, atomic_load(&m->jobs.live));
}

void cf_worker_jobs_watch(cf_worker *w, cf_worker_jobs *ledger)
{
    cf_worker_jobs_get(w, ledger);
    w->ledger = ledger;
}
