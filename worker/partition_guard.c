/* partition_guard: see partition_guard.h. */
#include "partition_guard_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_util.h"

/* Probes waiting for the thread, and answers waiting for the main thread:
 * a partition is probed at most once per partition-stall, so a few hundred
 * is a worker with hundreds of idle partitions; more wait for the next
 * round. */
#define PGUARD_QUEUE 256
/* A probe's broker calls, both together: long enough for a loaded
 * broker, short enough that a dead one holds neither the thread nor the
 * worker's shutdown, which joins it (a failed probe is asked again one
 * partition-stall later). */
#define PGUARD_PROBE_TIMEOUT_MS 2000

typedef struct probe {
    char topic[256];
    int32_t partition;
    uint64_t gen;
    bool want_committed;
} probe;

struct cf_pguard {
    rd_kafka_t *consumer;
    int64_t stall_us;
    cf_pguard_wake_fn wake;
    void *wake_arg;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;                      /* guarded by mu */
    probe asks[PGUARD_QUEUE];       /* ring, guarded by mu */
    size_t ask_head, ask_n;
    cf_pguard_answer answers[PGUARD_QUEUE];
    size_t ans_head, ans_n;
    /* A rejoin's partition: a message taken from it later is its recovery. */
    char rejoin_topic[256];
    int32_t rejoin_partition;
    _Atomic int64_t stalled;
    atomic_uint_fast64_t stalls;
    atomic_uint_fast64_t recovered[CF_PGUARD__STEPS];
    atomic_uint_fast64_t steps[CF_PGUARD__STEPS];
};

static const char *const step_names[CF_PGUARD__STEPS] = {"resume", "seek", "rejoin"};

const char *cf_pguard_step_name(cf_pguard_step s)
{
    return s >= 0 && s < CF_PGUARD__STEPS ? step_names[s] : "?";
}

static void run_probe(cf_pguard *g, const probe *pr, cf_pguard_answer *a)
{
    memset(a, 0, sizeof(*a));
    cf_strlcpy(a->topic, pr->topic, sizeof(a->topic));
    a->partition = pr->partition;
    a->gen = pr->gen;
    a->committed = -1;
    int64_t deadline = cf_mono_us() + PGUARD_PROBE_TIMEOUT_MS * 1000LL;
    int64_t lo = -1, hi = -1;
    rd_kafka_resp_err_t e =
        rd_kafka_query_watermark_offsets(g->consumer, pr->topic, pr->partition, &lo, &hi, PGUARD_PROBE_TIMEOUT_MS);
    if (e) {
        a->failed = true;
        snprintf(a->why, sizeof(a->why), "log end: %s", rd_kafka_err2str(e));
        return;
    }
    a->low = lo;
    a->high = hi;
    if (!pr->want_committed)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, pr->topic, pr->partition);
    int64_t left_ms = (deadline - cf_mono_us()) / 1000;
    e = rd_kafka_committed(g->consumer, l, left_ms > 100 ? (int)left_ms : 100);
    if (!e)
        e = l->elems[0].err;
    if (e) {
        a->failed = true;
        snprintf(a->why, sizeof(a->why), "committed offset: %s", rd_kafka_err2str(e));
    } else {
        a->committed = l->elems[0].offset >= 0 ? l->elems[0].offset : -1;
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static void *probe_main(void *arg)
{
    cf_pguard *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->ask_n == 0)
            pthread_cond_wait(&g->cv, &g->mu);
        if (g->stop)
            break;
        probe pr = g->asks[g->ask_head];
        g->ask_head = (g->ask_head + 1) % PGUARD_QUEUE;
        g->ask_n--;
        pthread_mutex_unlock(&g->mu);
        cf_pguard_answer a;
        run_probe(g, &pr, &a);
        pthread_mutex_lock(&g->mu);
        if (g->ans_n < PGUARD_QUEUE) {
            g->answers[(g->ans_head + g->ans_n) % PGUARD_QUEUE] = a;
            g->ans_n++;
        }
        /* (Full: dropped; its partition's asked_us times out and it is
         * asked again.) */
        pthread_mutex_unlock(&g->mu);
        g->wake(g->wake_arg);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

cf_pguard *cf_pguard_new(rd_kafka_t *consumer, int64_t stall_us, cf_pguard_wake_fn wake, void *wake_arg,
                         cf_error *err)
{
    cf_pguard *g = calloc(1, sizeof(*g));
    if (!g) {
        cf_error_set(err, CF_E_NOMEM, "partition guard: out of memory");
        return NULL;
    }
    g->consumer = consumer;
    g->stall_us = stall_us;
    g->wake = wake;
    g->wake_arg = wake_arg;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    int e = pthread_create(&g->thread, NULL, probe_main, g);
    if (e) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        cf_error_set_errno(err, CF_E_SYSTEM, e, "partition guard: starting its thread");
        return NULL;
    }
    return g;
}

void cf_pguard_stop(cf_pguard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void cf_pguard_destroy(cf_pguard *g)
{
    if (!g)
        return;
    cf_pguard_stop(g);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void cf_pguard_restart(cf_pguard_part *p, int64_t now_us)
{
    p->moved_us = now_us;
}

static void stall_over(cf_pguard *g, cf_pguard_part *p)
{
    if (p->stalled_us)
        atomic_fetch_sub(&g->stalled, 1);
    p->stalled_us = 0;
    p->steps = 0;
    p->waiting = 0;
}

int cf_pguard_taken(cf_pguard *g, cf_pguard_part *p, const char *topic, int32_t partition, int64_t offset,
                    int64_t now_us)
{
    p->moved_us = now_us;
    p->next_offset = offset + 1;
    int step = -1;
    if (p->stalled_us) {
        step = p->steps > 0 ? p->steps - 1 : CF_PGUARD_RESUME;
        if (step >= CF_PGUARD__STEPS)
            step = CF_PGUARD_REJOIN;
        atomic_fetch_add(&g->recovered[step], 1);
        stall_over(g, p);
    } else if (g->rejoin_topic[0] && g->rejoin_partition == partition && strcmp(g->rejoin_topic, topic) == 0) {
        /* Given up by the rejoin and assigned again: moving now. */
        step = CF_PGUARD_REJOIN;
        atomic_fetch_add(&g->recovered[step], 1);
    }
    if (step == CF_PGUARD_REJOIN)
        g->rejoin_topic[0] = '\0';
    return step;
}

void cf_pguard_forget(cf_pguard *g, cf_pguard_part *p)
{
    stall_over(g, p);
    p->asked_us = 0;
}

bool cf_pguard_check(cf_pguard *g, cf_pguard_part *p, const char *topic, int32_t partition, uint64_t gen,
                     bool expected, int64_t now_us)
{
    if (!expected) {
        /* Paused by us, or no room: not standing still by fault.  Any
         * probe out is for an older picture. */
        p->moved_us = now_us;
        return false;
    }
    if (p->asked_us) {
        /* An answer lost (queue full) or very late: ask again. */
        if (now_us - p->asked_us < 2 * g->stall_us)
            return false;
        p->asked_us = 0;
    }
    if (now_us - p->moved_us < g->stall_us)
        return false;
    pthread_mutex_lock(&g->mu);
    bool queued = false;
    if (g->ask_n < PGUARD_QUEUE) {
        probe *pr = &g->asks[(g->ask_head + g->ask_n) % PGUARD_QUEUE];
        cf_strlcpy(pr->topic, topic, sizeof(pr->topic));
        pr->partition = partition;
        pr->gen = gen;
        pr->want_committed = p->next_offset < 0;
        g->ask_n++;
        queued = true;
        pthread_cond_signal(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (queued)
        p->asked_us = now_us;
    return queued;
}

bool cf_pguard_next_answer(cf_pguard *g, cf_pguard_answer *out)
{
    pthread_mutex_lock(&g->mu);
    bool have = g->ans_n > 0;
    if (have) {
        *out = g->answers[g->ans_head];
        g->ans_head = (g->ans_head + 1) % PGUARD_QUEUE;
        g->ans_n--;
    }
    pthread_mutex_unlock(&g->mu);
    return have;
}

int cf_pguard_judge(cf_pguard *g, cf_pguard_part *p, const cf_pguard_answer *a, int64_t now_us,
                    int64_t fetch_position, int64_t *position)
{
    int64_t asked = p->asked_us;
    p->asked_us = 0;
    if (!asked || p->moved_us > asked)
        return -1; /* it moved (or started anew) while the probe was out */
    if (a->failed) {
        /* No verdict without the broker: the next probe is one
         * partition-stall away. */
        p->moved_us = now_us;
        return -1;
    }
    int64_t pos = p->next_offset >= 0 ? p->next_offset : a->committed >= 0 ? a->committed : a->low;
    if (fetch_position > pos)
        pos = fetch_position;
    if (position)
        *position = pos;
    if (a->high <= pos) {
        /* Nothing waiting: idle, not stalled. */
        p->moved_us = now_us;
        stall_over(g, p);
        return -1;
    }
    p->waiting = a->high - pos;
    if (!p->stalled_us) {
        p->stalled_us = now_us;
        atomic_fetch_add(&g->stalled, 1);
        atomic_fetch_add(&g->stalls, 1);
    }
    int step = p->steps < CF_PGUARD__STEPS ? p->steps : CF_PGUARD_REJOIN;
    p->steps++;
    atomic_fetch_add(&g->steps[step], 1);
    p->moved_us = now_us; /* the step gets one partition-stall to work */
    if (step == CF_PGUARD_REJOIN) {
        cf_strlcpy(g->rejoin_topic, a->topic, sizeof(g->rejoin_topic));
        g->rejoin_partition = a->partition;
    }
    return step;
}

void cf_pguard_counts_get(const cf_pguard *g, cf_pguard_counts *out)
{
    memset(out, 0, sizeof(*out));
    if (!g)
        return;
    cf_pguard *m = (cf_pguard *)g; /* atomics are read, not changed */
    out->stalled = atomic_load(&m->stalled);
    out->stalls = atomic_load(&m->stalls);
    for (int i = 0; i < CF_PGUARD__STEPS; i++) {
        out->recovered[i] = atomic_load(&m->recovered[i]);
        out->steps[i] = atomic_load(&m->steps[i]);
    }
}
