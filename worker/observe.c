/* observe: see observe.h. */
#include "observe_int.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "cf_log.h"
#include "cf_redis.h"
#include "cf_util.h"
#include "metrics_int.h"
#include "ops_http_int.h"
#include "otlp_int.h"
#include "worker_state_int.h"

/* Consumers whose lag series are kept (one per request topic). */
#define LAG_SOURCES 68 /* CF_PROFILE_MAX (64) request topics, and spare */
#define LOG_SUB "observe"
#define REDIS_CHECK_EVERY_US (2 * 1000000LL)
/* Lag older than this is not shown: a partition's statistics stop when it
 * is revoked. */

static const double latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,      2.5,   5,    10,    30,   60,  300};
#define N_BUCKETS (sizeof(latency_buckets) / sizeof(latency_buckets[0]))

struct cf_observe {
    const cf_worker_config *cfg;
    char worker_id[256];
    int64_t started_unix_s;
    cf_metrics *reg;
    cf_ops_http *http;
    cf_otlp *otlp;
    /* families */
    cf_metric *info, *start_time, *requests, *exec_seconds, *e2e_seconds, *queue_seconds, *slots, *slots_busy, *held,
        *paused, *draining, *ready, *produced, *retries, *dead, *kafka_errors, *redis_errors, *result_store, *setup_failures,
        *compile_cache, *lag, *stalled, *stall_steps, *mem_reserved, *mem_budget, *pids_reserved, *pids_budget, *children_mem, *children_mem_max, *children_pids,
        *children_pids_max, *spans_exported, *spans_dropped, *p_cpu, *p_rss, *p_fds, *p_max_fds, *p_start;
    /* What the worker's children use now, read at each scrape. */
    _Atomic(cf_observe_children_fn) children_fn; /* published after children_arg */
    void *children_arg;
    /* liveness and readiness */
    _Atomic int64_t loop_mono_us;
    atomic_bool assigned, draining_now, broker_up, stats_seen, fatal;
    pthread_mutex_t redis_mu;
    /* Each consumer's latest lag series (cf_observe_kafka_stats). */
    pthread_mutex_t lag_mu;
    struct lag_source {
        char name[128];
        size_t n;
        char **topic, **part;
        double *val;
    } lag_src[LAG_SOURCES];
    cf_redis *redis;
    int64_t redis_checked_us;
    bool redis_ok;
    atomic_bool redis_last_ok;
    char redis_why[200];
};

int64_t cf_observe_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t cf_observe_mono_to_unix_ns(int64_t mono_us)
{
    if (mono_us <= 0)
        return 0;
    return cf_observe_now_ns() - (cf_mono_us() - mono_us) * 1000;
}

/* ---------------------------------------------------------------- traces */

void cf_job_obs_begin(cf_job_obs *j, const cf_request *req, int64_t msg_ts_ms)
{
    memset(j, 0, sizeof(*j));
    j->taken_ns = cf_observe_now_ns();
    j->backend = "none";
    j->language = "none";
    const char *tp = NULL;
    for (size_t i = 0; req && i < req->n_trace; i++)
        if (req->trace[i].key && strcmp(req->trace[i].key, "traceparent") == 0)
            tp = req->trace[i].value;
    cf_trace_ctx caller;
    if (tp && cf_traceparent_parse(tp, &caller) == 0) {
        memcpy(j->ctx.trace_id, caller.trace_id, 16);
        memcpy(j->parent_span, caller.span_id, 8);
        j->ctx.flags = caller.flags & 1; /* the other bits are reserved */
    } else {
        cf_trace_new_trace_id(j->ctx.trace_id);
        j->ctx.flags = 1; /* a trace we start is sampled: exported when there is an exporter */
    }
    cf_trace_new_span_id(j->ctx.span_id);
    cf_trace_hex(j->ctx.trace_id, 16, j->trace_hex);
    cf_trace_hex(j->ctx.span_id, 8, j->span_hex);
    /* End to end starts at the request's creation when it says so and the
     * claim is plausible (a sender's clock), else at the message's
     * timestamp, else now. */
    /* A sender's claim is believed only between the message's own
     * timestamp (the broker's or the producer's: a request cannot be older
     * than an hour before it, nor newer than it) and now. */
    int64_t now_us = j->taken_ns / 1000;
    int64_t ts_us = msg_ts_ms > 0 && msg_ts_ms < INT64_MAX / 1000 ? msg_ts_ms * 1000 : 0;
    if (ts_us > now_us || ts_us < now_us - 86400LL * 1000000)
        ts_us = 0;
    int64_t lo = ts_us ? ts_us - 3600LL * 1000000 : now_us - 3600LL * 1000000;
    int64_t hi = ts_us ? ts_us : now_us;
    if (req && req->created_us >= lo && req->created_us <= hi && req->created_us < INT64_MAX / 1000)
        j->created_ns = req->created_us * 1000;
    else if (ts_us)
        j->created_ns = ts_us * 1000;
    else
        j->created_ns = j->taken_ns;
}

void cf_job_obs_log(const cf_job_obs *j)
{
    if (j)
        cf_log_set_trace(j->trace_hex, j->span_hex);
    else
        cf_log_set_trace(NULL, NULL);
}

void cf_job_obs_traceparent(const cf_job_obs *j, char *buf, size_t size)
{
    cf_traceparent_format(&j->ctx, buf, size);
}

static void span_init(cf_span *s, const cf_job_obs *j, const char *name, const uint8_t parent[8], int64_t start,
                      int64_t end)
{
    memset(s, 0, sizeof(*s));
    memcpy(s->trace_id, j->ctx.trace_id, 16);
    cf_trace_new_span_id(s->span_id);
    memcpy(s->parent_id, parent, 8);
    s->name = name;
    s->kind = CF_SPAN_INTERNAL;
    s->start_ns = start;
    s->end_ns = end >= start ? end : start;
}

static void export_spans(cf_observe *o, const cf_job_obs *j, const char *request_id, int64_t end_ns)
{
    if (!o->otlp || !(j->ctx.flags & 1))
        return;
    /* The operator's share, by the trace id's low bytes (random): every
     * worker keeps the same traces. */
    uint32_t h = (uint32_t)j->ctx.trace_id[12] << 24 | (uint32_t)j->ctx.trace_id[13] << 16 |
                 (uint32_t)j->ctx.trace_id[14] << 8 | j->ctx.trace_id[15];
    if ((uint64_t)h * 100 >= (uint64_t)o->cfg->otlp_sample_percent * 4294967296ULL)
        return;
    cf_span sp[8];
    size_t n = 0;
    cf_span *root = &sp[n++];
    span_init(root, j, "codefleet.execute", j->parent_span, j->taken_ns, end_ns);
    memcpy(root->span_id, j->ctx.span_id, 8);
    root->kind = CF_SPAN_CONSUMER;
    root->error = j->setup_failed || j->dead_letter;
    cf_span_attr_add(root, "codefleet.request_id", request_id);
    cf_span_attr_add(root, "codefleet.status", j->status ? j->status : "dead_letter");
    cf_span_attr_add(root, "codefleet.backend", j->backend);
    cf_span_attr_add(root, "codefleet.language", j->language);
    cf_span_attr_add(root, "codefleet.worker", o->worker_id);
    cf_span_attr_add(root, "messaging.system", "kafka");
    const uint8_t *p = j->ctx.span_id;
    int64_t admitted = j->admitted_ns ? j->admitted_ns : j->taken_ns;
    span_init(&sp[n++], j, "admission", p, j->taken_ns, admitted);
    if (j->slot_ns)
        span_init(&sp[n++], j, "queue_wait", p, admitted, j->slot_ns);
    if (j->exec_start_ns && j->exec_end_ns) {
        if (j->run_start_ns && j->run_end_ns) {
            span_init(&sp[n++], j, "sandbox_setup", p, j->exec_start_ns, j->run_start_ns);
            span_init(&sp[n], j, "run", p, j->run_start_ns, j->run_end_ns);
            sp[n].error = j->setup_failed;
            n++;
            span_init(&sp[n++], j, "collect", p, j->run_end_ns, j->exec_end_ns);
        } else {
            /* A backend without phases (wasm, js) or one that broke
             * before its program started. */
            span_init(&sp[n], j, "run", p, j->exec_start_ns, j->exec_end_ns);
            sp[n].error = j->setup_failed;
            n++;
        }
    }
    if (j->produce_ns) {
        span_init(&sp[n], j, "produce", p, j->produce_ns, end_ns);
        sp[n].kind = CF_SPAN_PRODUCER;
        n++;
    }
    cf_otlp_export(o->otlp, sp, n);
}

/* ---------------------------------------------------------------- metrics */

void cf_observe_answered(cf_observe *o, cf_job_obs *j, const char *request_id)
{
    if (!o || !j)
        return;
    int64_t now = cf_observe_now_ns();
    if (j->dead_letter) {
        cf_metric_inc(o->dead, 1, NULL);
    } else {
        const char *lv[] = {j->status ? j->status : "unknown", j->backend, j->language};
        cf_metric_inc(o->requests, 1, lv);
        cf_metric_inc(o->produced, 1, NULL);
        if (j->exec_wall_us > 0) {
            const char *ev[] = {j->backend, j->language};
            cf_metric_observe(o->exec_seconds, (double)j->exec_wall_us / 1e6, ev);
        }
        const char *bv[] = {j->backend};
        cf_metric_observe(o->e2e_seconds, now > j->created_ns ? (double)(now - j->created_ns) / 1e9 : 0, bv);
        if (j->setup_failed)
            cf_metric_inc(o->setup_failures, 1, bv);
        if (j->compile_cache) {
            const char *cv[] = {j->language, j->compile_cache > 0 ? "hit" : "miss"};
            cf_metric_inc(o->compile_cache, 1, cv);
        }
    }
    export_spans(o, j, request_id, now);
}

void cf_observe_queue_wait(cf_observe *o, const cf_job_obs *j)
{
    if (!o || !j || !j->slot_ns)
        return;
    int64_t from = j->admitted_ns ? j->admitted_ns : j->taken_ns;
    cf_metric_observe(o->queue_seconds, j->slot_ns > from ? (double)(j->slot_ns - from) / 1e9 : 0, NULL);
}

void cf_observe_loop(cf_observe *o, const cf_observe_loop_state *s)
{
    if (!o)
        return;
    atomic_store(&o->loop_mono_us, cf_mono_us());
    atomic_store(&o->draining_now, s->draining);
    cf_metric_set(o->slots, (double)s->slots, NULL);
    cf_metric_set(o->slots_busy, (double)s->busy, NULL);
    cf_metric_set(o->held, (double)s->held, NULL);
    cf_metric_set(o->paused, s->paused ? 1 : 0, NULL);
    cf_metric_set(o->draining, s->draining ? 1 : 0, NULL);
    cf_metric_set(o->stalled, (double)s->stalled, NULL);
    cf_metric_set(o->mem_reserved, (double)s->memory_reserved, NULL);
    cf_metric_set(o->mem_budget, (double)s->memory_budget, NULL);
    cf_metric_set(o->pids_reserved, (double)s->pids_reserved, NULL);
    cf_metric_set(o->pids_budget, (double)s->pids_budget, NULL);
}

void cf_observe_partition_stall(cf_observe *o, const char *step)
{
    if (!o)
        return;
    const char *l[] = {step};
    cf_metric_inc(o->stall_steps, 1, l);
}

void cf_observe_assigned(cf_observe *o, bool has_assignment)
{
    if (o)
        atomic_store(&o->assigned, has_assignment);
}

void cf_observe_kafka_error(cf_observe *o, bool fatal, bool all_brokers_down)
{
    if (!o)
        return;
    const char *kind[] = {fatal ? "fatal" : "transient"};
    cf_metric_inc(o->kafka_errors, 1, kind);
    if (all_brokers_down)
        atomic_store(&o->broker_up, false);
    if (fatal)
        atomic_store(&o->fatal, true); /* for good: the worker stops */
}

void cf_observe_redis_error(cf_observe *o)
{
    if (o)
        cf_metric_inc(o->redis_errors, 1, NULL);
}

void cf_observe_result_store(cf_observe *o, const char *profile, const char *outcome)
{
    if (!o)
        return;
    const char *lv[] = {profile, outcome};
    cf_metric_inc(o->result_store, 1, lv);
}

void cf_observe_produce_retry(cf_observe *o)
{
    if (o)
        cf_metric_inc(o->retries, 1, NULL);
}

static void lag_source_clear(struct lag_source *ls)
{
    for (size_t i = 0; i < ls->n; i++) {
        free(ls->topic[i]);
        free(ls->part[i]);
    }
    free(ls->topic);
    free(ls->part);
    free(ls->val);
    ls->topic = ls->part = NULL;
    ls->val = NULL;
    ls->n = 0;
}

/* One partition's lag from its statistics, -1 when not this consumer's
 * to report: only what it fetches (a revoked partition stays in the
 * statistics, "stopped", its lag frozen).  librdkafka says -1 until the
 * group committed an offset: a partition never committed is behind by
 * what it holds (the worker reads from the earliest), or from where it
 * is. */
static json_int_t partition_lag(const char *pname, const json_t *p)
{
    json_int_t lag = json_integer_value(json_object_get(p, "consumer_lag"));
    json_int_t hi = json_integer_value(json_object_get(p, "hi_offset"));
    json_int_t lo = json_integer_value(json_object_get(p, "lo_offset"));
    json_int_t pos = json_integer_value(json_object_get(p, "app_offset"));
    const char *fs = json_string_value(json_object_get(p, "fetch_state"));
    if (strcmp(pname, "-1") == 0 || !fs || strcmp(fs, "active") != 0 || hi < 0)
        return -1;
    if (lag < 0)
        lag = pos >= 0 ? hi - pos : lo >= 0 ? hi - lo : -1;
    return lag;
}

/* This source's series from its statistics, replacing its last ones. */
static void lag_source_set(struct lag_source *ls, const json_t *root)
{
    lag_source_clear(ls);
    size_t cap = 0;
    json_t *topics = json_object_get(root, "topics"), *t;
    const char *tname;
    json_object_foreach(topics, tname, t)
    {
        json_t *parts = json_object_get(t, "partitions"), *p;
        const char *pname;
        json_object_foreach(parts, pname, p)
        {
            json_int_t lag = partition_lag(pname, p);
            if (lag < 0 || ls->n >= CF_METRICS_MAX_SERIES - 1)
                continue;
            if (ls->n == cap) {
                cap = cap ? 2 * cap : 16;
                char **nt = realloc(ls->topic, cap * sizeof(*nt));
                if (nt)
                    ls->topic = nt;
                char **np = realloc(ls->part, cap * sizeof(*np));
                if (np)
                    ls->part = np;
                double *nv = realloc(ls->val, cap * sizeof(*nv));
                if (nv)
                    ls->val = nv;
                if (!nt || !np || !nv)
                    return;
            }
            ls->topic[ls->n] = strdup(tname);
            ls->part[ls->n] = strdup(pname);
            ls->val[ls->n] = (double)lag;
            if (!ls->topic[ls->n] || !ls->part[ls->n]) {
                free(ls->topic[ls->n]);
                free(ls->part[ls->n]);
                return;
            }
            ls->n++;
        }
    }
}

/* librdkafka's statistics: topics.<t>.partitions.<p>.consumer_lag for the
 * partitions this consumer fetches (-1: not known yet), brokers.<b>.state. */
void cf_observe_kafka_stats(cf_observe *o, const char *source, const char *json, size_t len)
{
    if (!o)
        return;
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return;
    bool up = false;
    json_t *brokers = json_object_get(root, "brokers"), *b;
    const char *bk;
    json_object_foreach(brokers, bk, b)
    {
        json_t *nodeid = json_object_get(b, "nodeid");
        const char *state = json_string_value(json_object_get(b, "state"));
        /* The bootstrap entries have no node id (-1): a broker of the
         * cluster must be up. */
        if (json_integer_value(nodeid) >= 0 && state && strcmp(state, "UP") == 0)
            up = true;
    }
    atomic_store(&o->broker_up, up);
    atomic_store(&o->stats_seen, true);
    pthread_mutex_lock(&o->lag_mu);
    struct lag_source *ls = NULL;
    for (size_t i = 0; i < LAG_SOURCES && !ls; i++)
        if (strcmp(o->lag_src[i].name, source ? source : "") == 0)
            ls = &o->lag_src[i];
    for (size_t i = 0; i < LAG_SOURCES && !ls; i++)
        if (!o->lag_src[i].name[0]) {
            ls = &o->lag_src[i];
            cf_strlcpy(ls->name, source && source[0] ? source : "?", sizeof(ls->name));
        }
    if (ls)
        lag_source_set(ls, root);
    /* Every source's latest, swapped in at once. */
    enum { LAG_MAX = CF_METRICS_MAX_SERIES - 1 };
    const char **lv = calloc(2 * LAG_MAX, sizeof(*lv));
    double *vals = calloc(LAG_MAX, sizeof(*vals));
    size_t n = 0;
    for (size_t i = 0; lv && vals && i < LAG_SOURCES; i++)
        for (size_t k = 0; k < o->lag_src[i].n && n < LAG_MAX; k++) {
            lv[2 * n] = o->lag_src[i].topic[k];
            lv[2 * n + 1] = o->lag_src[i].part[k];
            vals[n++] = o->lag_src[i].val[k];
        }
    if (lv && vals)
        cf_metric_replace(o->lag, n, lv, vals);
    pthread_mutex_unlock(&o->lag_mu);
    free(lv);
    free(vals);
    json_decref(root);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ., .. and the directory's own */
}

/* The process's start as Prometheus clients report it: its start in clock
 * ticks after boot (/proc/self/stat, field 22) plus the boot time
 * (/proc/stat btime).  0 when either is unreadable. */
static double process_start_unix(void)
{
    unsigned long long v[23];
    long hz = sysconf(_SC_CLK_TCK);
    if (cf_proc_self_stat(v, 23) < 22 || hz <= 0)
        return 0;
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return 0;
    char line[256];
    long long btime = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &btime) == 1)
            break;
    fclose(f);
    return btime > 0 ? (double)btime + (double)v[22] / (double)hz : 0;
}

static void process_metrics(cf_observe *o)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        cf_metric_set(o->p_cpu,
                      (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                          ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6,
                      NULL);
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        unsigned long size = 0, resident = 0;
        if (fscanf(f, "%lu %lu", &size, &resident) == 2)
            cf_metric_set(o->p_rss, (double)resident * (double)sysconf(_SC_PAGESIZE), NULL);
        fclose(f);
    }
    int fds = count_fds();
    if (fds >= 0)
        cf_metric_set(o->p_fds, fds, NULL);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        cf_metric_set(o->p_max_fds, (double)rl.rlim_cur, NULL);
}

/* ---------------------------------------------------------------- health */

static bool redis_reachable(cf_observe *o, char *why, size_t size)
{
    const cf_worker_config *c = o->cfg;
    if (pthread_mutex_trylock(&o->redis_mu) != 0) {
        /* Another request is checking: its answer comes soon; this one
         * says what the last check found rather than wait. */
        bool ok = atomic_load(&o->redis_last_ok);
        if (!ok)
            snprintf(why, size, "redis %s unreachable (checking again)", c->redis);
        return ok;
    }
    int64_t now = cf_mono_us();
    if (o->redis_checked_us == 0 || now - o->redis_checked_us >= REDIS_CHECK_EVERY_US) {
        cf_error err;
        cf_error_clear(&err);
        if (!o->redis) {
            char host[256];
            cf_redis_config rc;
            if (cf_wstate_redis_config(c, host, sizeof(host), &rc, &err) == 0) {
                /* A probe answers within a second or says no. */
                rc.connect_timeout_us = 500000;
                rc.command_timeout_us = 500000;
                o->redis = cf_redis_new(&rc, true, &err);
            }
        }
        o->redis_ok = o->redis && cf_redis_ping(o->redis, &err) == 0;
        if (!o->redis_ok) {
            cf_redis_destroy(o->redis);
            o->redis = NULL;
            snprintf(o->redis_why, sizeof(o->redis_why), "redis %s unreachable: %.150s", c->redis, err.msg);
        }
        o->redis_checked_us = cf_mono_us();
    }
    bool ok = o->redis_ok;
    atomic_store(&o->redis_last_ok, ok);
    if (!ok)
        snprintf(why, size, "%s", o->redis_why);
    pthread_mutex_unlock(&o->redis_mu);
    return ok;
}

static bool hook_live(void *arg, char *why, size_t size)
{
    cf_observe *o = arg;
    int64_t last = atomic_load(&o->loop_mono_us);
    if (atomic_load(&o->fatal)) {
        snprintf(why, size, "a Kafka client had a fatal error: the worker is stopping");
        return false;
    }
    if (!last) {
        /* Still starting (probing the host, zygotes): a startup probe
         * waits for this, a liveness probe starts after it. */
        snprintf(why, size, "starting");
        return false;
    }
    int64_t stalled = cf_mono_us() - last;
    /* A revoke holds the loop up to rebalance-wait and ~35 s more while it
     * stops what runs: that is not a hang. */
    int64_t allowed = o->cfg->liveness_stall_us;
    if (allowed < o->cfg->rebalance_wait_us + 35 * 1000000LL)
        allowed = o->cfg->rebalance_wait_us + 35 * 1000000LL;
    if (stalled > allowed) {
        snprintf(why, size, "main loop stalled for %" PRId64 " ms", stalled / 1000);
        return false;
    }
    return true;
}

static bool hook_ready(void *arg, char *why, size_t size)
{
    cf_observe *o = arg;
    bool ok = true;
    if (atomic_load(&o->draining_now)) {
        snprintf(why, size, "draining: the worker is stopping");
        ok = false;
    } else if (!atomic_load(&o->loop_mono_us)) {
        snprintf(why, size, "starting");
        ok = false;
    } else if (!atomic_load(&o->stats_seen) || !atomic_load(&o->broker_up)) {
        snprintf(why, size, "not connected to a broker of %s", o->cfg->brokers);
        ok = false;
    } else if (!atomic_load(&o->assigned)) {
        snprintf(why, size, "no assignment from group %s yet", o->cfg->group);
        ok = false;
    } else if (o->cfg->redis && o->cfg->redis[0] && !redis_reachable(o, why, size)) {
        ok = false;
    } else if (!hook_live(arg, why, size)) {
        ok = false;
    }
    cf_metric_set(o->ready, ok ? 1 : 0, NULL);
    return ok;
}

char *cf_observe_render(cf_observe *o, size_t *len)
{
    if (!o)
        return NULL;
    process_metrics(o);
    cf_observe_children_fn children = atomic_load_explicit(&o->children_fn, memory_order_acquire);
    if (children) {
        cf_observe_children c = {-1, -1, -1, -1};
        children(o->children_arg, &c);
        cf_metric_set(o->children_mem, (double)c.memory_bytes, NULL);
        cf_metric_set(o->children_mem_max, (double)c.memory_max, NULL);
        cf_metric_set(o->children_pids, (double)c.pids, NULL);
        cf_metric_set(o->children_pids_max, (double)c.pids_max, NULL);
    }
    cf_otlp_stats st = cf_otlp_get_stats(o->otlp);
    cf_metric_set(o->spans_exported, (double)st.exported, NULL);
    cf_metric_set(o->spans_dropped, (double)st.dropped, NULL);
    return cf_metrics_render(o->reg, len);
}

static char *hook_metrics(void *arg, size_t *len)
{
    cf_observe *o = arg;
    char why[8];
    /* The ready gauge says what /readyz would. */
    (void)hook_ready(arg, why, sizeof(why));
    return cf_observe_render(o, len);
}

/* ---------------------------------------------------------------- setup */

int cf_observe_new(const cf_worker_config *cfg, const char *worker_id, cf_observe **out, cf_error *err)
{
    *out = NULL;
    cf_observe *o = calloc(1, sizeof(*o));
    if (!o)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    o->cfg = cfg;
    cf_strlcpy(o->worker_id, worker_id, sizeof(o->worker_id));
    pthread_mutex_init(&o->redis_mu, NULL);
    pthread_mutex_init(&o->lag_mu, NULL);
    cf_metrics *r = o->reg = cf_metrics_new();
    if (!r) {
        cf_observe_destroy(o);
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    static const char *const info_l[] = {"worker_id", "group", "version"};
    static const char *const req_l[] = {"status", "backend", "language"};
    static const char *const bl_l[] = {"backend", "language"};
    static const char *const b_l[] = {"backend"};
    static const char *const kind_l[] = {"kind"};
    static const char *const cc_l[] = {"language", "result"};
    static const char *const lag_l[] = {"topic", "partition"};
    o->info = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_worker_info", "The worker's identity (always 1).", 3,
                             info_l, NULL, 0);
    o->start_time = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_worker_start_time_seconds",
                                   "When the worker started, Unix time.", 0, NULL, NULL, 0);
    o->requests = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_requests_total",
                                 "Requests answered (result delivered), by status, backend and language.", 3, req_l,
                                 NULL, 0);
    o->exec_seconds = cf_metrics_add(r, CF_METRIC_HISTOGRAM, "codefleet_execution_duration_seconds",
                                     "Wall time of the program's run.", 2, bl_l, latency_buckets, N_BUCKETS);
    o->e2e_seconds = cf_metrics_add(r, CF_METRIC_HISTOGRAM, "codefleet_request_duration_seconds",
                                    "From the request's creation to its result acknowledged by the broker.", 1, b_l,
                                    latency_buckets, N_BUCKETS);
    o->queue_seconds = cf_metrics_add(r, CF_METRIC_HISTOGRAM, "codefleet_queue_wait_seconds",
                                      "From admission to a slot taking the request.", 0, NULL, latency_buckets,
                                      N_BUCKETS);
    o->slots = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_slots", "Execution slots of this worker.", 0, NULL,
                              NULL, 0);
    o->slots_busy = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_slots_busy", "Slots running an execution.", 0,
                                   NULL, NULL, 0);
    o->mem_reserved = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_memory_reserved_bytes",
                                     "Memory limits of the executions running now (reserved against the budget).", 0,
                                     NULL, NULL, 0);
    o->mem_budget = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_memory_budget_bytes",
                                   "What the running executions' memory limits may add up to (0: not enforced).", 0,
                                   NULL, NULL, 0);
    o->pids_reserved = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_pids_reserved",
                                      "Processes the executions running now may hold (their pids bounds, reserved "
                                      "against the budget).", 0, NULL, NULL, 0);
    o->pids_budget = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_pids_budget",
                                    "What the running executions' pids bounds may add up to: children-pids less "
                                    "what helpers and zygotes keep (0: not enforced).", 0, NULL, NULL, 0);
    o->children_mem = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_children_memory_bytes",
                                     "Memory the worker's executions, helpers and zygotes use together (-1: unknown).",
                                     0, NULL, NULL, 0);
    o->children_mem_max = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_children_memory_max_bytes",
                                         "Their bound together (children-memory; 0: none).", 0, NULL, NULL, 0);
    o->children_pids = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_children_pids",
                                      "Processes and threads of the worker's executions, helpers and zygotes "
                                      "(-1: unknown).", 0, NULL, NULL, 0);
    o->children_pids_max = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_children_pids_max",
                                          "Their bound together (children-pids; 0: none).", 0, NULL, NULL, 0);
    o->held = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_requests_held",
                             "Requests taken and waiting for a slot.", 0, NULL, NULL, 0);
    o->paused = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_partitions_paused",
                               "1 while intake is paused (slots and prefetch full, or a dead letter waits).", 0,
                               NULL, NULL, 0);
    o->draining = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_draining", "1 once the worker is stopping.", 0,
                                 NULL, NULL, 0);
    o->ready = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_ready", "What /readyz says: 1 ready, 0 not.", 0, NULL,
                              NULL, 0);
    o->produced = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_results_produced_total",
                                 "Results acknowledged by the broker.", 0, NULL, NULL, 0);
    o->retries = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_produce_retries_total",
                                "Answers produced again after a failed delivery.", 0, NULL, NULL, 0);
    o->dead = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_dead_lettered_total",
                             "Messages answered with a dead letter.", 0, NULL, NULL, 0);
    o->kafka_errors = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_kafka_errors_total",
                                     "Errors reported by the Kafka clients, transient or fatal.", 1, kind_l, NULL, 0);
    static const char *const outcome_l[] = {"profile", "outcome"};
    o->result_store = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_result_store_total",
                                     "Results offered to the idempotency store, by outcome: kept, kept_short (past "
                                     "the profile's quota, kept a short while), over_quota (not kept), unavailable "
                                     "(the store failed), not_kept (another run's answer is kept, or even the cut "
                                     "copy was too big), by profile (the operator's names).",
                                     2, outcome_l, NULL, 0);
    o->redis_errors = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_redis_errors_total",
                                     "Redis operations that failed (workspaces, checkpoints, idempotency, quotas, delivery counts).", 0, NULL,
                                     NULL, 0);
    o->setup_failures = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_sandbox_setup_failures_total",
                                       "Executions the backend's machinery failed (internal_error), not the program.",
                                       1, b_l, NULL, 0);
    o->compile_cache = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_compile_cache_requests_total",
                                      "Compile steps of compiled languages, by cache result (hit, miss).", 2, cc_l,
                                      NULL, 0);
    o->lag = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_consumer_lag",
                            "Messages behind the partition's end, for the partitions this worker consumes.", 2, lag_l,
                            NULL, 0);
    static const char *const step_l[] = {"step"};
    o->stalled = cf_metrics_add(r, CF_METRIC_GAUGE, "codefleet_partitions_stalled",
                                "Partitions with requests waiting that this worker holds, has not paused, and took "
                                "nothing from for partition-stall while it had room (the partition guard).",
                                0, NULL, NULL, 0);
    o->stall_steps = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_partition_stall_steps_total",
                                    "Steps the partition guard took to move a stalled partition again, by step "
                                    "(resume, seek, rejoin).",
                                    1, step_l, NULL, 0);
    o->spans_exported = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_spans_exported_total",
                                       "Spans the OTLP collector accepted.", 0, NULL, NULL, 0);
    o->spans_dropped = cf_metrics_add(r, CF_METRIC_COUNTER, "codefleet_spans_dropped_total",
                                      "Spans dropped: the queue was full or the collector refused them.", 0, NULL,
                                      NULL, 0);
    o->p_cpu = cf_metrics_add(r, CF_METRIC_COUNTER, "process_cpu_seconds_total",
                              "User and system CPU time of the worker process (not its executions).", 0, NULL, NULL,
                              0);
    o->p_rss = cf_metrics_add(r, CF_METRIC_GAUGE, "process_resident_memory_bytes", "Resident memory size in bytes.",
                              0, NULL, NULL, 0);
    o->p_fds = cf_metrics_add(r, CF_METRIC_GAUGE, "process_open_fds", "Open file descriptors.", 0, NULL, NULL, 0);
    o->p_max_fds = cf_metrics_add(r, CF_METRIC_GAUGE, "process_max_fds", "The open file descriptor limit.", 0, NULL,
                                  NULL, 0);
    o->p_start = cf_metrics_add(r, CF_METRIC_GAUGE, "process_start_time_seconds",
                                "Start time of the process, Unix time.", 0, NULL, NULL, 0);
    o->started_unix_s = cf_now_us() / 1000000;
    const char *iv[] = {worker_id, cfg->group, CF_VERSION};
    cf_metric_set(o->info, 1, iv);
    cf_metric_set(o->start_time, (double)o->started_unix_s, NULL);
    double pstart = process_start_unix();
    cf_metric_set(o->p_start, pstart > 0 ? pstart : (double)o->started_unix_s, NULL);
    cf_metric_set(o->slots, (double)cfg->slots, NULL);
    if (cfg->otlp_endpoint && cfg->otlp_endpoint[0]) {
        if (cf_otlp_new(cfg->otlp_endpoint, cfg->otlp_headers, worker_id, &o->otlp, err) < 0) {
            cf_observe_destroy(o);
            return -1;
        }
        cf_log_info(LOG_SUB, "exporting spans to %s (%" PRId64 "%% of sampled traces)", cf_otlp_url(o->otlp),
                    cfg->otlp_sample_percent);
    }
    if (cfg->metrics_listen && cfg->metrics_listen[0]) {
        cf_ops_hooks hooks = {.arg = o, .metrics = hook_metrics, .live = hook_live, .ready = hook_ready};
        if (cf_ops_http_start(cfg->metrics_listen, &hooks, &o->http, err) < 0) {
            cf_observe_destroy(o);
            return -1;
        }
        cf_log_info(LOG_SUB, "serving /metrics, /healthz and /readyz on %s (port %d)", cfg->metrics_listen,
                    cf_ops_http_port(o->http));
    }
    *out = o;
    return 0;
}

int cf_observe_port(const cf_observe *o)
{
    return o ? cf_ops_http_port(o->http) : 0;
}

void cf_observe_destroy(cf_observe *o)
{
    if (!o)
        return;
    cf_ops_http_stop(o->http);
    cf_otlp_destroy(o->otlp, 2000);
    cf_redis_destroy(o->redis);
    pthread_mutex_destroy(&o->redis_mu);
    for (size_t i = 0; i < LAG_SOURCES; i++)
        lag_source_clear(&o->lag_src[i]);
    pthread_mutex_destroy(&o->lag_mu);
    cf_metrics_destroy(o->reg);
    free(o);
}

void cf_observe_set_children_source(cf_observe *o, cf_observe_children_fn fn, void *arg)
{
    if (!o)
        return;
    o->children_arg = arg;
    atomic_store_explicit(&o->children_fn, fn, memory_order_release); /* the scrape thread runs already */
}
