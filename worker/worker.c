/* The worker's Kafka loop: start, run, stop (the other rooms: worker_int.h).
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
#include "worker_int.h"

#include "cf_sandbox_exec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_util.h"
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

#include "cf_redis.h"
#include "worker_report_int.h"

#define LOG_SUB "worker"

static void publish_report(cf_worker *w, bool gone);

void worker_wake(cf_worker *w)
{
    uint64_t one = 1;
    ssize_t r = write(w->wake_fd, &one, sizeof(one));
    (void)r; /* EAGAIN means a worker_wake-up is already pending */
}

void worker_pool_notify(void *arg)
{
    worker_wake(arg);
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

/* The harnesses: configured, else the installed ones (an installed worker
 * never falls back to the build's), else the source tree's. */
static void resolve_default_paths(cf_worker *w)
{
    install_dirs d;
    find_install_dirs(&d);
    cf_strlcpy(w->helper_dir, d.installed ? d.libexec : "", sizeof(w->helper_dir));
    w->harness_dir[0] = '\0';
    struct stat st;
    if (!d.installed)
        cf_strlcpy(w->harness_dir, CF_DEFAULT_HARNESS_DIR, sizeof(w->harness_dir));
    else if (d.data[0]) {
        char cand[PATH_MAX];
        int m = snprintf(cand, sizeof(cand), "%s/harness", d.data);
        if (m > 0 && (size_t)m < sizeof(cand) && stat(cand, &st) == 0 && S_ISDIR(st.st_mode))
            cf_strlcpy(w->harness_dir, cand, sizeof(w->harness_dir));
    }
}

/* Identity, locks, the nonce of lease tokens. */
static int worker_identity(cf_worker *w, cf_error *err)
{
    const cf_worker_config *cfg = w->cfg;
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
    /* Built against 2.12 (kafka_clients.c); a shared librdkafka.so.1 of
     * an older release would load all the same. */
    if (rd_kafka_version() < 0x020c0000)
        return cf_error_set(err, CF_E_UNSUPPORTED,
                            "librdkafka %s is loaded; codefleet needs 2.12 or newer (deploy/librdkafka.sh)",
                            rd_kafka_version_str());
    /* The group protocol: KIP-848's unless the operator asked for the
     * classic one, by name or with one of its member-side settings. */
    const char *classic_key = kafka_classic_only_key(&cfg->kafka);
    switch ((cf_worker_group_protocol)cfg->group_protocol) {
    case CF_WORKER_GROUP_CONSUMER:
        if (classic_key)
            return cf_error_set(err, CF_E_INVALID,
                                "kafka.%s belongs to the classic group protocol; with group-protocol = consumer "
                                "(KIP-848) the broker holds it (group.consumer.session.timeout.ms, "
                                "group.consumer.heartbeat.interval.ms, or per group): drop it, or set "
                                "group-protocol = classic",
                                classic_key);
        w->group_protocol = CF_WORKER_GROUP_CONSUMER;
        break;
    case CF_WORKER_GROUP_CLASSIC:
        w->group_protocol = CF_WORKER_GROUP_CLASSIC;
        break;
    default:
        w->group_protocol = classic_key ? CF_WORKER_GROUP_CLASSIC : CF_WORKER_GROUP_CONSUMER;
        if (classic_key)
            cf_log_info(LOG_SUB, "group-protocol auto: classic, because kafka.%s (a classic-protocol setting) is set",
                        classic_key);
        break;
    }
    if (cfg->static_membership && !(cfg->worker_id && cfg->worker_id[0]))
        return cf_error_set(err, CF_E_INVALID,
                            "static-membership needs a worker-id that stays the same across restarts (e.g. the pod "
                            "name)");
    if (!cf_id_valid(w->worker_id, strlen(w->worker_id)))
        return cf_error_set(err, CF_E_INVALID, "worker-id '%s' must be printable ASCII without spaces",
                            w->worker_id);
    return 0;
}

/* How many profiles the configuration names (the default one counts when
 * it has a topic), before they are built: the slot count depends on it and
 * the backends, which the profiles are checked against, need the count. */
static size_t profiles_named(const cf_worker_config *cfg)
{
    char names[CF_PROFILE_MAX][CF_PROFILE_NAME_MAX + 1];
    size_t n = 0;
    bool default_topic = cfg->request_topic && cfg->request_topic[0];
    for (size_t i = 0; i < cfg->profiles.count && n < CF_PROFILE_MAX; i++) {
        const char *k = cfg->profiles.items[i].key, *dot = strchr(k, '.');
        size_t len = dot ? (size_t)(dot - k) : strlen(k);
        if (len == 0 || len > CF_PROFILE_NAME_MAX)
            continue;
        if (len == 7 && strncmp(k, "default", 7) == 0) {
            /* counted below, when it has a topic (request-topic or its own) */
            const char *v = cfg->profiles.items[i].value;
            if (strcmp(k, "default.topic") == 0 && v && v[0])
                default_topic = true;
            continue;
        }
        bool known = false;
        for (size_t j = 0; j < n && !known; j++)
            known = strlen(names[j]) == len && strncmp(names[j], k, len) == 0;
        if (!known) {
            memcpy(names[n], k, len);
            names[n++][len] = '\0';
        }
    }
    return n + (default_topic ? 1 : 0);
}

/* The slot threads: `slots`, and the reserve no one profile may fill
 * (reserve-slots; auto: one when the worker serves several profiles). */
static void worker_slot_count(cf_worker *w)
{
    const cf_worker_config *cfg = w->cfg;
    int64_t reserve = cfg->reserve_slots >= 0 ? cfg->reserve_slots : profiles_named(cfg) > 1 ? 1 : 0;
    w->nslots = (int)(cfg->slots + reserve);
}

/* Redis: the per-slot state, what the operator is told about it. */
static int worker_state_setup(cf_worker *w, cf_error *err)
{
    const cf_worker_config *cfg = w->cfg;
    worker_slot_count(w);
    w->have_redis = cfg->redis && cfg->redis[0];
    if (cf_wstate_config_check(cfg, err) < 0)
        return -1;
    if (cf_observe_new(cfg, w->worker_id, &w->obs, err) < 0)
        return -1;
    w->wstate = calloc((size_t)w->nslots, sizeof(*w->wstate));
    w->running = calloc((size_t)w->nslots, sizeof(*w->running));
    w->recent = calloc(RECENT_CANCELS, sizeof(*w->recent));
    if (!w->wstate || !w->running || !w->recent)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
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
    return 0;
}

/* The compile pipeline, then the backends (which take its toolchains). */
static int worker_backends_setup(cf_worker *w, cf_error *err)
{
    const cf_worker_config *cfg = w->cfg;
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
    if (cf_pipeline_new(&pcfg, &w->pipeline, err) < 0)
        return cf_error_wrap(err, "compile pipeline");
    char langs[1024];
    cf_pipeline_describe(w->pipeline, langs, sizeof(langs));
    cf_log_info(LOG_SUB, "compiled languages: %s", langs);

    w->bcfg = (cf_backend_config){
        .work_root = cfg->work_root,
        .python_path = cfg->python_path,
        .node_path = cfg->node_path,
        .shell_path = cfg->shell_path,
        .exec_path = cfg->exec_path,
        .slots = w->nslots,
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
        .settings = &cfg->backend_settings,
        .helper_dir = w->helper_dir,
        /* Every compiled language passes backend selection; the pipeline
         * answers one without a toolchain, naming what is missing. */
        .compiled_languages = 1u << CF_LANG_C | 1u << CF_LANG_CPP | 1u << CF_LANG_RUST | 1u << CF_LANG_GO |
                              1u << CF_LANG_TYPESCRIPT,
        .toolchain_dirs = cf_pipeline_toolchain_dirs(w->pipeline),
        .cc_path = cf_pipeline_toolchain_path(w->pipeline, CF_LANG_C),
        .cxx_path = cf_pipeline_toolchain_path(w->pipeline, CF_LANG_CPP),
    };
    /* Before any backend makes a cgroup: they all go below the worker's
     * own, bounded as a whole. */
    budget_children_setup(w);
    /* Before any sandbox starts: who creates their user namespaces (only
     * the sandbox and the embedded runtimes make any). */
    bool namespaced = false, other_uids = false;
    cf_list_item item;
    for (const char *cur = cfg->backends; cf_list_next(&cur, &item);) {
        namespaced |= (item.len == 7 && strncmp(item.s, "sandbox", 7) == 0) ||
                      (item.len == 4 && strncmp(item.s, "wasm", 4) == 0) ||
                      (item.len == 2 && strncmp(item.s, "js", 2) == 0);
        other_uids |= (item.len == 9 && strncmp(item.s, "container", 9) == 0) ||
                      (item.len == 7 && strncmp(item.s, "process", 7) == 0 && cfg->run_uid_base > 0);
    }
    /* Its run uids are its own on this host (run_uids.c): every block, as
     * each backend family takes its own. */
    if (geteuid() == 0 && (namespaced || other_uids) &&
        run_uids_claim(cfg->run_uid_base > 0 ? cfg->run_uid_base : CF_RUN_UID_BASE_DEFAULT,
                       (int64_t)CF_UID_BLOCKS * w->nslots, err) < 0)
        return -1;
    if (namespaced) {
        /* The sandbox's, wasm's and js's blocks of run uids (cf_uid_block). */
        int64_t base = cfg->run_uid_base > 0 ? cfg->run_uid_base : CF_RUN_UID_BASE_DEFAULT;
        char owner_why[400];
        int by_run_uid = cf_sandbox_exec_set_userns_owner((cf_userns_owner)cfg->userns_owner, base,
                                                          3 * (int64_t)w->nslots, owner_why, sizeof(owner_why), err);
        if (by_run_uid < 0)
            return -1;
        if (by_run_uid || cfg->userns_owner != CF_USERNS_OWNER_AUTO)
            cf_log_info(LOG_SUB, "executions' user namespaces are created %s", owner_why);
        else
            cf_log_warn(LOG_SUB, "executions' user namespaces are created %s", owner_why);
    }
    char helpers[3 * PATH_MAX];
    cf_backend_helpers_describe(&w->bcfg, helpers, sizeof(helpers));
    cf_log_info(LOG_SUB, "helpers: harnesses %s, %s", pcfg.harness_dir[0] ? pcfg.harness_dir : "(none)", helpers);
    if (cf_backend_set_new(cfg->backends, &w->bcfg, &w->backends, err) < 0)
        return cf_error_wrap(err, "backends");
    /* A line per backend: the whole block in one message was cut by the
     * log's line buffer, losing the last backends (an UNAVAILABLE one
     * included). */
    char matrix[16384];
    cf_backend_set_describe(w->backends, matrix, sizeof(matrix));
    cf_log_info(LOG_SUB, "worker %s capabilities:", w->worker_id);
    for (const char *line = matrix; *line;) {
        size_t len = strcspn(line, "\n");
        cf_log_info(LOG_SUB, "  %.*s", (int)len, line);
        line += len + (line[len] == '\n');
    }
    const char *name, *why;
    for (size_t i = 0; cf_backend_set_missing(w->backends, i, &name, &why); i++)
        cf_log_warn(LOG_SUB, "backend %s is not available on this worker (%s): requests for it are rejected", name,
                    why);
    return 0;
}

/* The profiles, and one request topic per profile that has one. */
static int worker_topics_setup(cf_worker *w, cf_error *err)
{
    const cf_worker_config *cfg = w->cfg;
    w->penv = (cf_profile_env){.request_topic = cfg->request_topic, .result_topic = cfg->result_topic,
                               .dlq_topic = cfg->dlq_topic, .events_topic = cfg->events_topic,
                               .workers_topic = cfg->workers_topic, .stream_suffix = cfg->stream_topic_suffix,
                               .env_prefix = cf_worker_conf_table.env_prefix, .backends = w->backends};
    if (cf_profile_set_new(&cfg->profiles, &w->penv, &w->profiles, err) < 0)
        return cf_error_wrap(err, "profiles");
    w->topics = calloc(cf_profile_set_count(w->profiles), sizeof(*w->topics));
    if (!w->topics)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
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
            if (over[k].v > over[k].max)
                return cf_error_set(err, CF_E_INVALID, "profile '%s': %s %" PRId64 " exceeds the worker's %" PRId64,
                                    pr->name, over[k].name, over[k].v, over[k].max);
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
        for (size_t b = 0; b < pr->n_backends; b++)
            if (cf_backend_set_unavailable(w->backends, pr->backend_names[b]))
                cf_log_warn(LOG_SUB, "profile %s: backend %s is listed but not available here: its requests for it "
                            "are rejected", pr->name, pr->backend_names[b]);
    }
    if (w->ntopics == 0)
        return cf_error_set(err, CF_E_INVALID, "no request topic: set request-topic or a profile's topic");
    return 0;
}

/* The producer (its topics' metadata fetched now, so the first answer is
 * not held back), the consumer, the partition guard, the flusher: all
 * waking the main loop through one eventfd. */
static int worker_kafka_setup(cf_worker *w, cf_error *err)
{
    const cf_worker_config *cfg = w->cfg;
    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->wake_fd < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "eventfd");
    char errstr[512];
    rd_kafka_conf_t *pconf = kafka_conf_new(w, false, NULL, err);
    if (!pconf)
        return -1;
    w->producer = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, errstr, sizeof(errstr));
    if (!w->producer) {
        rd_kafka_conf_destroy(pconf);
        return cf_error_set(err, CF_E_KAFKA, "creating producer: %s", errstr);
    }
    bool reachable = kafka_warm_topic(w->producer, cfg->result_topic);
    for (size_t i = 0; reachable && i < w->ntopics; i++)
        if (strcmp(w->topics[i].results, cfg->result_topic) != 0)
            reachable = kafka_warm_topic(w->producer, w->topics[i].results);
    if (reachable)
        reachable = kafka_warm_topic(w->producer, cfg->dlq_topic);
    if (reachable && cfg->workers_topic && cfg->workers_topic[0])
        kafka_warm_topic(w->producer, cfg->workers_topic);
    if (consumers_setup(w, err) < 0)
        return -1;
    /* One consumer asks for every topic: committed offsets are the
     * group's, and watermarks any client may read. */
    w->guard = cf_pguard_new(w->consumers[0].rk, cfg->partition_stall_us, worker_pool_notify, w, err);
    if (!w->guard)
        return -1;
    w->producer_q = rd_kafka_queue_get_main(w->producer);
    if (pthread_create(&w->flusher, NULL, flusher_main, w) != 0)
        return cf_error_set(err, CF_E_SYSTEM, "starting the result flusher thread");
    w->flusher_started = true;
    static const uint64_t one = 1;
    rd_kafka_queue_io_event_enable(w->producer_q, w->wake_fd, &one, sizeof(one));
    return 0;
}

/* The slots, and the lease keeper that renews their leases. */
static int worker_slots_setup(cf_worker *w, cf_error *err)
{
    w->pool = cf_exec_pool_new(w->nslots, slots_run_job, worker_pool_notify, w);
    if (!w->pool)
        return cf_error_set(err, CF_E_NOMEM, "starting %d execution slots", w->nslots);
    /* Fair shares: the pool's groups are the topics (so the profiles). */
    int weights[CF_PROFILE_MAX], caps[CF_PROFILE_MAX];
    int slots = (int)w->cfg->slots;
    for (size_t t = 0; t < w->ntopics && t < CF_PROFILE_MAX; t++) {
        const cf_profile *p = w->topics[t].profile;
        /* A profile fills at most `slots` (or its max-slots): the reserve
         * stays for the others. */
        int cap = p->max_slots > 0 ? (int)p->max_slots : slots;
        w->topics[t].slot_cap = cap < slots ? cap : slots;
        weights[t] = (int)p->weight;
        caps[t] = w->topics[t].slot_cap;
    }
    if (w->ntopics > 0 && cf_exec_pool_set_groups(w->pool, (int)w->ntopics, weights, caps) < 0)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    char why[160];
    w->memory_budget = budget_memory(w->cfg, why, sizeof(why));
    cf_exec_pool_set_budget(w->pool, CF_POOL_MEMORY, w->memory_budget);
    cf_log_info(LOG_SUB, "memory budget for executions: %" PRId64 " MiB (%s)", w->memory_budget / (1024 * 1024), why);
    /* The reserve slots' memory: what a request of any profile reserves
     * by default, kept out of each profile's share, so one tenant's large
     * runs cannot hold the whole budget while another's request waits. */
    int64_t reserve = w->nslots - (int)w->cfg->slots, dflt = 0;
    for (size_t t = 0; t < w->ntopics; t++) {
        const cf_profile *p = w->topics[t].profile;
        int64_t d = p->default_memory_bytes > 0 ? p->default_memory_bytes : w->cfg->sandbox_memory_bytes;
        dflt = d > dflt ? d : dflt;
    }
    if (w->memory_budget > 0 && reserve > 0) {
        if (reserve * dflt < w->memory_budget) {
            w->memory_group_max = w->memory_budget - reserve * dflt;
            cf_exec_pool_set_group_budget(w->pool, CF_POOL_MEMORY, -1, w->memory_group_max);
            cf_log_info(LOG_SUB, "a profile's executions reserve at most %" PRId64 " MiB of it (the reserve slots keep %" PRId64
                        " MiB)", w->memory_group_max >> 20, (reserve * dflt) >> 20);
        } else {
            cf_log_warn(LOG_SUB, "memory budget %" PRId64 " MiB: too small to keep the reserve slots' %" PRId64
                        " MiB out of each profile's share; one profile may hold all of it",
                        w->memory_budget >> 20, (reserve * dflt) >> 20);
        }
    }
    budget_pids_setup(w);
    if (w->idempotent) {
        if (pthread_create(&w->keeper, NULL, slots_lease_keeper, w) != 0)
            return cf_error_set(err, CF_E_SYSTEM, "starting the lease keeper thread");
        w->keeper_started = true;
    }
    return 0;
}

int cf_worker_new(const cf_worker_config *cfg, cf_worker **out, cf_error *err)
{
    *out = NULL;
    cf_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    w->cfg = cfg;
    w->wake_fd = -1;
    w->main_thread = pthread_self(); /* until cf_worker_run: cancels caught up at start */
    resolve_default_paths(w);
    /* In this order: the backends' capabilities decide what the profiles
     * may allow; the topics come from the profiles; Kafka needs them;
     * catching up on cancels (last) applies them to the pool and slots. */
    if (worker_identity(w, err) < 0 || worker_state_setup(w, err) < 0 || worker_backends_setup(w, err) < 0 ||
        worker_topics_setup(w, err) < 0 || worker_kafka_setup(w, err) < 0 || worker_slots_setup(w, err) < 0 ||
        cancels_start(w, err) < 0) {
        cf_worker_destroy(w);
        return -1;
    }
    *out = w;
    return 0;
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
    rd_kafka_resp_err_t e = rd_kafka_pause_partitions(consumers_of_topic_name(w, topic), l);
    rd_kafka_topic_partition_list_destroy(l);
    return e ? -1 : 0;
}

void cf_worker_stop(cf_worker *w)
{
    atomic_store(&w->stop_requested, 1);
    worker_wake(w);
}

/* Serves everything that is ready, without blocking. */
static void serve(cf_worker *w)
{
    uint64_t v;
    while (read(w->wake_fd, &v, sizeof(v)) > 0)
        ;
    /* Everything librdkafka has fetched is taken (its local queue is
     * bounded by queued.min.messages per partition, set from slots +
     * prefetch), then a topic's partitions pause once its slot cap +
     * prefetch requests are taken and unanswered.  Pausing in the middle
     * of a fetched batch was tried: librdkafka 2.0.2 then needs ~1 s to
     * deliver again after a resume, and throughput fell to tens per second.
     * Hysteresis: resume once half the prefetch is used up. */
    /* Cancels first: a request fetched together with its cancel must find
     * it remembered. */
    cancels_serve(w);
    consumers_take(w);
    delivery_serve_producer(w, 0);
    delivery_take_handed_back(w);
    delivery_run_retries(w);
    partitions_hold(w);
    partitions_guard_serve(w);
    /* Each topic's intake on its own: one tenant's backlog pauses its
     * topic only, and another tenant's requests are still fetched. */
    for (size_t t = 0; !w->stopping && t < w->ntopics; t++) {
        topic_state *ts = &w->topics[t];
        size_t high = (size_t)(ts->slot_cap + w->cfg->prefetch);
        size_t low = (size_t)(ts->slot_cap + w->cfg->prefetch / 2);
        bool want_pause = w->intake_blocked > 0 || ts->inflight >= high || (ts->paused && ts->inflight > low);
        if (want_pause != ts->paused)
            partitions_set_topic_paused(w, t, want_pause);
    }
    partitions_store_offsets(w);
    if (w->obs) {
        cf_observe_loop_state ls = {.slots = w->nslots,
                                    .busy = (int64_t)cf_exec_pool_running(w->pool),
                                    .held = (int64_t)cf_exec_pool_queued(w->pool),
                                    .paused = w->paused_all,
                                    .draining = w->stopping,
                                    .memory_reserved = cf_exec_pool_reserved(w->pool, CF_POOL_MEMORY),
                                    .memory_budget = w->memory_budget,
                                    .pids_reserved = cf_exec_pool_reserved(w->pool, CF_POOL_PIDS),
                                    .pids_budget = w->pids_budget};
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

static void shutdown_gracefully(cf_worker *w, int sig_fd)
{
    w->ran = true;
    w->stopping = true;
    cf_pguard_stop(w->guard);
    /* Not ready from now on: a load balancer or the group's next
     * rebalance moves work elsewhere while this one drains. */
    if (w->obs)
        cf_observe_loop(w->obs, &(cf_observe_loop_state){.slots = w->nslots, .draining = true});
    partitions_set_paused(w, true);
    jobs_drop(w, cf_exec_pool_drop_queued(w->pool, NULL, NULL));
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
        flag_set(&w->cancel_exec);
        while (cf_exec_pool_running(w->pool) > 0) {
            slots_stop_running(w, NULL);
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
    rd_kafka_resp_err_t e = delivery_drain(w, flush_ms);
    if (e)
        cf_log_warn("kafka",
                    "flush: %s after %d ms: %d message(s) unsent (results among them: their requests stay "
                    "uncommitted and run again on the partitions' next owner)",
                    rd_kafka_err2str(e), flush_ms, rd_kafka_outq_len(w->producer));
    serve(w);
    /* Answers still failing are left to the partitions' next owner. */
    delivery_drop_retries(w, NULL);
    partitions_store_offsets(w);
    /* Asynchronous: the close below sends it; a broker that does not
     * answer costs no more than the deadline. */
    consumers_commit(w, true);
    int64_t t_close = cf_mono_us();
    /* The closes' queues are kept until the consumers are destroyed: a
     * rebalance left unserved in one would make that destroy wait forever
     * (consumers_destroy drains them). */
    if (!consumers_close(w, kafka_until))
        cf_log_warn("kafka",
                    "the broker did not answer the group leave within shutdown-kafka-timeout (%.1fs): leaving "
                    "without it; the group reassigns the partitions after its session timeout",
                    w->cfg->shutdown_kafka_timeout_us / 1e6);
    cf_log_info(LOG_SUB, "kafka shutdown: flush %.2fs, commit and close %.2fs", (t_close - t_flush) / 1e6,
                (cf_mono_us() - t_close) / 1e6);
    cf_log_info(LOG_SUB,
                "stopped: %" PRIu64 " received, %" PRIu64 " answered (%" PRIu64 " rejected, %" PRIu64
                " cancelled), %" PRIu64 " dead-lettered, %" PRIu64 " left for redelivery, %" PRIu64 " answer retries",
                (uint64_t)atomic_load(&w->jobs.taken), (uint64_t)atomic_load(&w->jobs.answered), w->n_rejected,
                w->n_cancelled, (uint64_t)atomic_load(&w->jobs.dead_lettered), (uint64_t)atomic_load(&w->jobs.dropped),
                w->n_retries);
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
                               .received = atomic_load(&w->jobs.taken),
                               .answered = atomic_load(&w->jobs.answered),
                               .rejected = w->n_rejected,
                               .dead_lettered = atomic_load(&w->jobs.dead_lettered),
                               .retries = w->n_retries,
                               .memory_reserved = cf_exec_pool_reserved(w->pool, CF_POOL_MEMORY),
                               .memory_budget = w->memory_budget,
                               .pids_reserved = cf_exec_pool_reserved(w->pool, CF_POOL_PIDS),
                               .pids_budget = w->pids_budget};
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
        /* A topic paused on its own is no room for its lag, though the
         * worker as a whole has some (doctor reads it so). */
        const char *paused_names[CF_PROFILE_MAX];
        for (size_t t = 0; t < w->ntopics && load.n_paused_topics < CF_PROFILE_MAX; t++)
            if (w->topics[t].paused)
                paused_names[load.n_paused_topics++] = w->topics[t].name;
        load.paused_topics = paused_names;
        cf_pguard_counts gc;
        cf_pguard_counts_get(w->guard, &gc);
        load.stalls = gc.stalls;
        cf_worker_report_info info = {
            .worker_id = w->worker_id,
            .client_id = client_id,
            .group = c->group,
            .started_at_ms = w->started_ms,
            .slots = w->nslots,
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
        RD_KAFKA_V_OPAQUE(&delivery_report_tag), RD_KAFKA_V_END);
    if (e) {
        cf_log_warn(LOG_SUB, "worker report not queued for %s: %s", c->workers_topic, rd_kafka_err2str(e));
        free(json);
    }
}

bool cf_worker_group_protocol_refused(const cf_worker *w)
{
    return w->group_protocol == CF_WORKER_GROUP_CONSUMER && !w->consumed_any &&
           (w->join_refused || w->consumer_fatal == RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION ||
            w->consumer_fatal == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE);
}

bool cf_worker_instance_id_held(const cf_worker *w)
{
    return w->consumer_fatal == RD_KAFKA_RESP_ERR_UNRELEASED_INSTANCE_ID && !w->consumed_any;
}

int cf_worker_run(cf_worker *w, bool handle_signals, cf_error *err)
{
    /* Delivery's main-thread work (retries, failed deliveries) happens on
     * this thread from now on. */
    w->main_thread = pthread_self();
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
    rd_kafka_resp_err_t e = (rd_kafka_resp_err_t)consumers_subscribe(w, names, sizeof(names));
    if (e) {
        if (sig_fd >= 0)
            close(sig_fd);
        return cf_error_set(err, CF_E_KAFKA, "subscribing to %s: %s", names, rd_kafka_err2str(e));
    }
    cf_log_info(LOG_SUB, "worker %s consuming %s (group %s, %" PRId64 " slot(s) + %" PRId64 " reserve)", w->worker_id,
                names, w->cfg->group, w->cfg->slots, (int64_t)w->nslots - w->cfg->slots);
    w->started_ms = cf_now_us() / 1000;
    w->join_deadline_us = cf_mono_us() + CONSUMERS_JOIN_WAIT_US;
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
        char fatal[512];
        rd_kafka_resp_err_t fe = consumers_fatal(w, fatal, sizeof(fatal));
        if (fe) {
            w->consumer_fatal = fe;
            if (cf_worker_group_protocol_refused(w))
                rc = cf_error_set(err, CF_E_UNSUPPORTED,
                                  "the broker does not offer the consumer group protocol of KIP-848 (Kafka 4.0 and "
                                  "newer do; group.coordinator.rebalance.protocols must list consumer): %s; set "
                                  "group-protocol = classic (or auto)",
                                  fatal);
            else if (cf_worker_instance_id_held(w))
                rc = cf_error_set(err, CF_E_CONFLICT,
                                  "another member holds this worker's instance id (%s.*): an earlier run of it whose "
                                  "session has not expired, or a second worker with the same worker-id: %s",
                                  w->worker_id, fatal);
            else
                rc = cf_error_set(err, CF_E_KAFKA, "consumer fatal error: %s", fatal);
            break;
        }
        if (consumers_watch_join(w, cf_mono_us()) && !w->consumed_any) {
            w->join_refused = true;
            rc = cf_error_set(err, CF_E_UNSUPPORTED,
                              "the consumers have not joined the group %lld s after the broker answered: it does not "
                              "offer the consumer group protocol of KIP-848 (Kafka 3.x, or "
                              "group.coordinator.rebalance.protocols without consumer)",
                              (long long)(CONSUMERS_JOIN_WAIT_US / 1000000));
            break;
        }
        serve(w);
        kafka_heal_all(w);
        if (w->cfg->report_interval_us > 0 && cf_mono_us() >= w->report_next_us) {
            w->report_next_us = cf_mono_us() + w->cfg->report_interval_us;
            publish_report(w, false);
        }
        /* A periodic worker_wake keeps max.poll.interval.ms satisfied and commits
         * flowing even when nothing happens. */
        wait_events(w, sig_fd, 200);
    }
    shutdown_gracefully(w, sig_fd);
    if (sig_fd >= 0)
        close(sig_fd);
    return rc;
}

void cf_worker_exiting(cf_worker *w)
{
    if (w)
        w->exiting = true;
}

void cf_worker_destroy(cf_worker *w)
{
    if (!w)
        return;
    if (w->pool) {
        flag_set(&w->cancel_exec);
        if (w->running)
            slots_stop_running(w, NULL);
        jobs_drop(w, cf_exec_pool_drop_queued(w->pool, NULL, NULL));
        cf_exec_pool_destroy(w->pool);
        w->pool = NULL; /* what runs later (the consumers' destroy) must not reach it */
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
    delivery_take_handed_back(w);
    delivery_drop_retries(w, NULL);
    cancels_stop(w);
    cancels_free(w);
    cf_pguard_destroy(w->guard); /* its thread uses the consumer */
    w->guard = NULL;
    consumers_destroy(w);
    if (w->producer && w->producer_q) {
        delivery_drain(w, 1000);
        rd_kafka_purge(w->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        /* The purged messages' reports free their jobs. */
        while (delivery_serve_producer(w, 0) == PRODUCER_SERVE_MAX)
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
    delivery_drop_retries(w, NULL);
    for (int64_t s = 0; w->wstate && s < w->nslots; s++)
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
    budget_children_teardown(w); /* after the backends' cgroups, and the last scrape */
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->keeper_cond);
    pthread_mutex_destroy(&w->flush_mu);
    pthread_mutex_destroy(&w->stream_mu);
    pthread_cond_destroy(&w->flush_cv);
    free(w);
}

