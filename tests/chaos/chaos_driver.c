/* The chaos suite's client (tests/chaos/run.sh drives the faults).
 *
 * Submits a mix of requests (trivial, slow, workspace-writing,
 * checkpointing) through the dispatcher at a steady rate, reads every result
 * message of the result topic (duplicates included), and when all are in
 * (or its time is up) checks what the fleet promised:
 *   - every id has a result (lost = 0);
 *   - all results of one id have the same status;
 *   - no id ran twice, unless its first run's worker was killed or stopped
 *     the run itself (run.sh lists both);
 *   - every workspace write a result acknowledged is in the workspace, and
 *     every checkpoint a result names exists;
 *   - every request is answered within the bound the run states (the broker
 *     outage, the session timeout, the slowest request: see bound_s).
 * Prints the figures (lost requests by partition and owner, the slowest
 * answers) and exits 1 on any violation.
 *
 * Programs log each start to a host file ("<id> <work directory>"): the
 * chaos workers run the process backend, which shares the host's file
 * system, and each worker's work-root is named after its pid (run.sh), so
 * every run is attributed to the worker that started it without trusting
 * the program's parent pid.
 *
 * Signals from run.sh: SIGUSR1 submits the burst (--burst slow requests at
 * once: every worker's intake fills and its partitions pause), SIGUSR2
 * records how many requests were unanswered as the broker went down. */
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "cf_checkpoint.h"
#include "cf_dispatcher.h"
#include "cf_kafka.h"
#include "cf_kafka_heal.h"
#include "cf_log.h"
#include "cf_redis.h"
#include "cf_schema.h"
#include "cf_util.h"
#include "cf_workspace.h"

#define MAX_REQ 20000
#define MAX_PIDS 4096

typedef enum kind { K_TRIVIAL, K_SLOW, K_WORKSPACE, K_CHECKPOINT, K__COUNT } kind;
static const char *const kind_names[K__COUNT] = {"trivial", "slow", "workspace", "checkpoint"};

typedef struct req_state {
    char id[64];
    kind k;
    int group; /* workspace / thread index */
    int64_t submitted_us;
    int64_t answered_us; /* first result, 0 = none */
    int nresults;
    cf_status status;
    bool status_mismatch;
    bool replayed;
    char checkpoint_id[CF_CHECKPOINT_ID_MAX + 1];
    bool ws_written; /* a success that wrote back (no conflict) */
    int runs;
    long first_run_pid;
    bool stopped; /* a worker stopped a run of it (revoke, shutdown) */
    int burst_sleep_ds; /* burst requests: tenths of a second they sleep (0: not one) */
} req_state;

static struct {
    const char *brokers, *config, *redis, *requests, *results, *runs_file, *killed_file, *logs_dir, *tag, *group,
        *outage_file;
    int n, rate, groups, timeout_s, burst;
    /* The bound on time to answer, in parts (seconds): see bound_s. */
    double session_s, rebalance_s, lease_s, stall_s, slowest_s, margin_s;
} opt = {.n = 2000, .rate = 40, .groups = 20, .timeout_s = 600, .tag = "chaos", .session_s = 6, .rebalance_s = 2,
         .lease_s = 3, .stall_s = 5, .slowest_s = 2, .margin_s = 20};

static req_state *reqs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int answered;
static atomic_long total_results;
static volatile sig_atomic_t stop_reader;
static volatile sig_atomic_t burst_wanted, broker_down_seen;
static atomic_int unanswered_at_outage = -1;
static int total; /* opt.n + opt.burst */
static cf_kvlist kafka_props;
static char redis_user[256], redis_password[1024];

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "chaos_driver: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* "key = value" lines: kafka.* properties and the Redis credentials. */
static void read_config(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("%s: %s", path, strerror(errno));
    char line[2048];
    while (fgets(line, sizeof(line), f)) {
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#')
            continue;
        *eq = '\0';
        char *k = line, *v = eq + 1;
        while (*k == ' ')
            k++;
        for (char *e = k + strlen(k); e > k && (e[-1] == ' ' || e[-1] == '\t'); e--)
            e[-1] = '\0';
        while (*v == ' ')
            v++;
        v[strcspn(v, "\r\n")] = '\0';
        if (strncmp(k, "kafka.", 6) == 0)
            cf_kvlist_set(&kafka_props, k + 6, v, NULL);
        else if (strcmp(k, "redis-user") == 0)
            cf_strlcpy(redis_user, v, sizeof(redis_user));
        else if (strcmp(k, "redis-password") == 0)
            cf_strlcpy(redis_password, v, sizeof(redis_password));
    }
    fclose(f);
}

static req_state *find(const char *id)
{
    /* ids are "<tag>-<n>" */
    const char *dash = strrchr(id, '-');
    if (!dash)
        return NULL;
    long i = strtol(dash + 1, NULL, 10);
    if (i < 0 || i >= total || strcmp(reqs[i].id, id) != 0)
        return NULL;
    return &reqs[i];
}

static void *reader_main(void *arg)
{
    rd_kafka_t *c = arg;
    /* The reader heals as the fleet's own clients do: librdkafka 2.12 can
     * stall after a broker's restart (cf_kafka_heal.h).  Without it this
     * reader once stopped at 149 answers while the workers answered 372. */
    cf_kafka_heal heal = {0};
    while (!stop_reader) {
        cf_kafka_heal_check(c, &heal, cf_mono_us());
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
        if (!m)
            continue;
        if (!m->err && m->payload) {
            cf_result res = {0};
            if (cf_result_decode(m->payload, m->len, NULL, &res, NULL) == 0 && res.id) {
                pthread_mutex_lock(&mu);
                req_state *r = find(res.id);
                if (r) {
                    atomic_fetch_add(&total_results, 1);
                    if (r->nresults++ == 0) {
                        r->answered_us = cf_mono_us();
                        r->status = res.status;
                        atomic_fetch_add(&answered, 1);
                    } else if (res.status != r->status) {
                        r->status_mismatch = true;
                    }
                    r->replayed |= res.meta.replay;
                    if (res.checkpoint_id && !r->checkpoint_id[0])
                        cf_strlcpy(r->checkpoint_id, res.checkpoint_id, sizeof(r->checkpoint_id));
                    if (r->k == K_WORKSPACE && res.status == CF_STATUS_SUCCESS && !res.workspace_conflict &&
                        res.workspace_revision > 0)
                        r->ws_written = true;
                }
                pthread_mutex_unlock(&mu);
            }
            cf_result_clear(&res);
        }
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static void build(cf_request *req, req_state *r)
{
    memset(req, 0, sizeof(*req));
    req->id = strdup(r->id);
    req->language = CF_LANG_SHELL;
    char code[1024], log[512];
    snprintf(log, sizeof(log), "echo \"%s $PWD\" >> %s", r->id, opt.runs_file);
    char name[64];
    switch (r->k) {
    case K_TRIVIAL:
        snprintf(code, sizeof(code), "%s; echo ok", log);
        break;
    case K_SLOW:
        if (r->burst_sleep_ds)
            snprintf(code, sizeof(code), "%s; sleep %d.%d; echo ok", log, r->burst_sleep_ds / 10,
                     r->burst_sleep_ds % 10);
        else
            snprintf(code, sizeof(code), "%s; sleep 0.%d; echo ok", log, 3 + rand() % 7);
        break;
    case K_WORKSPACE:
        snprintf(code, sizeof(code), "%s; echo %s > %s.txt", log, r->id, r->id);
        snprintf(name, sizeof(name), "%s-ws-%d", opt.tag, r->group);
        req->workspace = strdup(name);
        break;
    default:
        snprintf(code, sizeof(code), "%s; printf '{\"checkpoint\": {\"by\": \"%s\"}}' > \"$CODEFLEET_OUTPUT\"", log,
                 r->id);
        snprintf(name, sizeof(name), "%s-th-%d", opt.tag, r->group);
        req->thread = strdup(name);
        break;
    }
    cf_bytes_set(&req->code, code, strlen(code));
    req->policy.timeout_us = 30 * 1000000LL;
}

static bool in_list(const char *path, const char *needle)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n ")] = '\0';
        found = strcmp(line, needle) == 0;
    }
    fclose(f);
    return found;
}

static cf_redis *redis_open(void)
{
    char host[256];
    cf_strlcpy(host, opt.redis, sizeof(host));
    char *colon = strrchr(host, ':');
    if (!colon)
        die("--redis host:port");
    *colon = '\0';
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    rc.host = host;
    rc.port = atoi(colon + 1);
    rc.user = redis_user[0] ? redis_user : NULL;
    rc.password = redis_password[0] ? redis_password : NULL;
    cf_error err;
    cf_redis *r = cf_redis_new(&rc, true, &err);
    if (!r)
        die("redis: %s", err.msg);
    return r;
}

static void on_usr1(int sig)
{
    (void)sig;
    burst_wanted = 1;
}

static void on_usr2(int sig)
{
    (void)sig;
    broker_down_seen = 1;
}

/* The worker pid in a run's work directory: run.sh gives each worker the
 * work-root <dir>/root-<pid>; -1 when the path has none. */
static long pid_of_workdir(const char *path)
{
    const char *p = strstr(path, "/root-");
    if (!p)
        return -1;
    char *end;
    long pid = strtol(p + 6, &end, 10);
    return end != p + 6 && (*end == '/' || *end == '\0') && pid > 0 ? pid : -1;
}

/* The key the dispatcher produced a request with (cf_dispatcher_submit). */
static void key_of(const req_state *q, char *buf, size_t cap)
{
    if (q->k == K_WORKSPACE)
        snprintf(buf, cap, "%s-ws-%d", opt.tag, q->group);
    else if (q->k == K_CHECKPOINT)
        snprintf(buf, cap, "%s-th-%d", opt.tag, q->group);
    else
        snprintf(buf, cap, "%s", q->id);
}

/* The group's members now: for each partition of the request topic, the
 * client id of its owner ("" = none).  owners[p] must hold 256 bytes. */
static void describe_owners(int32_t nparts, char (*owners)[256])
{
    for (int32_t p = 0; p < nparts; p++)
        owners[p][0] = '\0';
    if (!opt.group)
        return;
    cf_error err;
    rd_kafka_t *rk = cf_kafka_consumer_new(opt.brokers, "chaos-describe", &kafka_props, "codefleet-chaos", "admin",
                                           &err);
    if (!rk)
        return;
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS);
    rd_kafka_AdminOptions_set_request_timeout(o, 10000, NULL, 0);
    const char *groups[] = {opt.group};
    rd_kafka_DescribeConsumerGroups(rk, groups, 1, o, q);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 15000);
    if (ev && !rd_kafka_event_error(ev)) {
        size_t n = 0;
        const rd_kafka_ConsumerGroupDescription_t **ds =
            rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(ev), &n);
        for (size_t m = 0; n == 1 && m < rd_kafka_ConsumerGroupDescription_member_count(ds[0]); m++) {
            const rd_kafka_MemberDescription_t *md = rd_kafka_ConsumerGroupDescription_member(ds[0], m);
            const rd_kafka_topic_partition_list_t *l =
                rd_kafka_MemberAssignment_partitions(rd_kafka_MemberDescription_assignment(md));
            for (int i = 0; l && i < l->cnt; i++)
                if (strcmp(l->elems[i].topic, opt.requests) == 0 && l->elems[i].partition >= 0 &&
                    l->elems[i].partition < nparts)
                    cf_strlcpy(owners[l->elems[i].partition], rd_kafka_MemberDescription_client_id(md), 256);
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    cf_kafka_consumer_close(rk);
}

/* The bound on a request's time to answer has three parts.  What the
 * broker's outage costs every request waiting through it: the outage
 * (measured by run.sh) and the group's own recovery after it (the members
 * rejoin the restarted coordinator: a session timeout and a rebalance).
 * What each worker kill around the request costs it: a session timeout
 * and the rebalance after it (a dead member holds its partitions until its
 * session expires, and every kill starts that again; kills come every
 * 3-8 s, so several may fall in one request's wait).  Then a fixed part:
 * the idempotency lease of a run a killed worker left, the partition
 * guard's period, its own run, and a margin for a machine kept busy by
 * another process.  And the queue ahead of it: the requests submitted
 * before it and not yet answered, at the rate the fleet answered over the
 * whole run (a fleet offered more than it can do answers late, but in
 * order).  A partition that stands still answers late beyond all of it. */
static double fault_allowance_s(double outage_s, int kills, char *why, size_t cap)
{
    double cycle = opt.session_s + opt.rebalance_s;
    double b = outage_s + (outage_s > 0 ? cycle : 0) + kills * cycle + opt.lease_s + opt.stall_s + opt.slowest_s +
               opt.margin_s;
    snprintf(why, cap,
             "broker outage %.1f + its recovery %.0f + %d kill(s) around it x (session timeout %.0f + rebalance-wait "
             "%.0f) + idempotency lease %.0f + partition-stall %.0f + slowest request %.1f + margin %.0f",
             outage_s, outage_s > 0 ? cycle : 0, kills, opt.session_s, opt.rebalance_s, opt.lease_s, opt.stall_s,
             opt.slowest_s, opt.margin_s);
    return b;
}

/* The worker kills run.sh made ("pid epoch_us" lines in the killed file),
 * as monotonic times of this process; *n gets how many. */
static int64_t *kill_times(int *n)
{
    *n = 0;
    FILE *f = opt.killed_file ? fopen(opt.killed_file, "r") : NULL;
    if (!f)
        return NULL;
    int64_t shift = cf_mono_us() - cf_now_us();
    int64_t *t = NULL;
    int cap = 0;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        long long pid, at;
        if (sscanf(line, "%lld %lld", &pid, &at) != 2)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *g = realloc(t, (size_t)cap * sizeof(*t));
            if (!g)
                break;
            t = g;
        }
        t[(*n)++] = at + shift;
    }
    fclose(f);
    return t;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void submit_one(cf_dispatcher *d, req_state *q)
{
    cf_request req;
    cf_error err;
    build(&req, q);
    q->submitted_us = cf_mono_us();
    /* The broker may be down: the producer buffers and retries. */
    while (cf_dispatcher_submit(d, &req, &err) < 0) {
        fprintf(stderr, "chaos_driver: submit %s: %s (retrying)\n", q->id, err.msg);
        sleep(1);
    }
    cf_request_clear(&req);
}

static void serve_signals(cf_dispatcher *d, bool *burst_done)
{
    if (burst_wanted && !*burst_done) {
        *burst_done = true;
        for (int i = opt.n; i < total; i++)
            submit_one(d, &reqs[i]);
        cf_error err;
        while (cf_dispatcher_flush(d, 10 * 1000000LL, &err) < 0)
            fprintf(stderr, "chaos_driver: flush: %s (retrying)\n", err.msg);
        fprintf(stderr, "chaos_driver: burst of %d slow requests submitted\n", opt.burst);
    }
    if (broker_down_seen && atomic_load(&unanswered_at_outage) < 0) {
        int submitted = 0;
        pthread_mutex_lock(&mu);
        for (int i = 0; i < total; i++)
            submitted += reqs[i].submitted_us != 0;
        pthread_mutex_unlock(&mu);
        atomic_store(&unanswered_at_outage, submitted - atomic_load(&answered));
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--brokers")) opt.brokers = v;
        else if (!strcmp(k, "--config")) opt.config = v;
        else if (!strcmp(k, "--redis")) opt.redis = v;
        else if (!strcmp(k, "--requests")) opt.requests = v;
        else if (!strcmp(k, "--results")) opt.results = v;
        else if (!strcmp(k, "--runs-file")) opt.runs_file = v;
        else if (!strcmp(k, "--killed-file")) opt.killed_file = v;
        else if (!strcmp(k, "--logs-dir")) opt.logs_dir = v;
        else if (!strcmp(k, "--tag")) opt.tag = v;
        else if (!strcmp(k, "--n")) opt.n = atoi(v);
        else if (!strcmp(k, "--rate")) opt.rate = atoi(v);
        else if (!strcmp(k, "--groups")) opt.groups = atoi(v);
        else if (!strcmp(k, "--timeout")) opt.timeout_s = atoi(v);
        else if (!strcmp(k, "--group")) opt.group = v;
        else if (!strcmp(k, "--burst")) opt.burst = atoi(v);
        else if (!strcmp(k, "--outage-file")) opt.outage_file = v;
        else if (!strcmp(k, "--session-s")) opt.session_s = atof(v);
        else if (!strcmp(k, "--rebalance-s")) opt.rebalance_s = atof(v);
        else if (!strcmp(k, "--lease-s")) opt.lease_s = atof(v);
        else if (!strcmp(k, "--stall-s")) opt.stall_s = atof(v);
        else if (!strcmp(k, "--margin-s")) opt.margin_s = atof(v);
        else die("unknown option %s", k);
    }
    if (opt.burst < 0 || opt.burst > 5000 || opt.n + opt.burst > MAX_REQ)
        die("--burst: 0 to 5000, with --n at most %d in all", MAX_REQ);
    if (!opt.brokers || !opt.redis || !opt.requests || !opt.results || !opt.runs_file || opt.n <= 0 ||
        opt.n > MAX_REQ || opt.rate <= 0 || opt.groups <= 0)
        die("usage: --brokers B --redis H:P --requests T --results T --runs-file F [--config F] [--n N] ...");
    if (opt.config)
        read_config(opt.config);
    srand(42);
    total = opt.n + opt.burst;
    reqs = calloc((size_t)total, sizeof(*reqs));
    for (int i = 0; i < total; i++) {
        snprintf(reqs[i].id, sizeof(reqs[i].id), "%s-%d", opt.tag, i);
        reqs[i].k = (kind)(i % K__COUNT);
        reqs[i].group = (i / K__COUNT) % opt.groups;
        if (i >= opt.n) {
            /* The burst: slow, each keyed by its own id (any partition). */
            reqs[i].k = K_SLOW;
            reqs[i].burst_sleep_ds = 10 + rand() % 10;
        }
    }
    if (opt.burst)
        opt.slowest_s = 2;
    signal(SIGUSR1, on_usr1);
    signal(SIGUSR2, on_usr2);

    /* Workspaces must exist before requests name them. */
    cf_redis *r = redis_open();
    cf_workspace_store *ws = cf_workspace_store_new(r, NULL, NULL);
    cf_checkpoint_store *cp = cf_checkpoint_store_new(r, NULL, NULL);
    if (!ws || !cp)
        die("state stores");
    for (int g = 0; g < opt.groups; g++) {
        char name[64];
        snprintf(name, sizeof(name), "%s-ws-%d", opt.tag, g);
        cf_error err;
        int tries = 0;
        while (cf_workspace_create(ws, name, "chaos", NULL, &err) < 0 && err.code != CF_E_CONFLICT)
            if (!err.retriable || ++tries > 50)
                die("workspace %s: %s", name, err.msg);
    }

    cf_error err;
    rd_kafka_t *c = cf_kafka_consumer_new(opt.brokers, "chaos-reader", &kafka_props, "codefleet-chaos", "consumer",
                                          &err);
    if (!c || cf_kafka_assign(c, opt.results, NULL, true, CF_KAFKA_FROM_BEGINNING, 0, &err) < 0)
        die("result reader: %s", err.msg);
    pthread_t reader;
    pthread_create(&reader, NULL, reader_main, c);

    /* librdkafka's own account of the producer, when run.sh asks for it
     * (CF_CHAOS_PRODUCER_DEBUG, its debug contexts): once, requests never
     * left this producer after the broker's restart, and the log without
     * it could not say why. */
    cf_kvlist producer_props = {0};
    if (cf_kafka_kvlist_copy(&producer_props, &kafka_props) < 0)
        die("out of memory");
    const char *producer_debug = getenv("CF_CHAOS_PRODUCER_DEBUG");
    if (producer_debug && producer_debug[0]) {
        cf_kvlist_set(&producer_props, "debug", producer_debug, NULL);
        cf_log_setup(CF_LOG_DEBUG, CF_LOG_TEXT, "chaos_driver");
    }
    cf_dispatcher_config dc = {.brokers = opt.brokers, .request_topic = opt.requests, .result_topic = opt.results,
                               .kafka = &producer_props};
    cf_dispatcher *d = NULL;
    if (cf_dispatcher_new(&dc, &d, &err) < 0)
        die("dispatcher: %s", err.msg);
    int64_t t0 = cf_mono_us();
    bool burst_done = opt.burst == 0;
    for (int i = 0; i < opt.n; i++) {
        int64_t due = t0 + (int64_t)i * 1000000 / opt.rate;
        int64_t now = cf_mono_us();
        if (due > now)
            usleep((useconds_t)(due - now));
        serve_signals(d, &burst_done);
        submit_one(d, &reqs[i]);
        if (i % 200 == 199)
            fprintf(stderr, "chaos_driver: %d submitted, %d answered\n", i + 1, atomic_load(&answered));
    }
    while (cf_dispatcher_flush(d, 10 * 1000000LL, &err) < 0)
        fprintf(stderr, "chaos_driver: flush: %s (retrying)\n", err.msg);
    fprintf(stderr, "chaos_driver: all %d submitted in %.1f s\n", opt.n, (cf_mono_us() - t0) / 1e6);
    int64_t deadline = cf_mono_us() + (int64_t)opt.timeout_s * 1000000;
    /* A burst asked for late (run.sh's choreography waits for a worker's
     * assignment) is still submitted; its requests are then waited for. */
    while ((atomic_load(&answered) < total || !burst_done) && cf_mono_us() < deadline) {
        serve_signals(d, &burst_done);
        usleep(100 * 1000);
    }
    sleep(3); /* late duplicates */
    stop_reader = 1;
    pthread_join(reader, NULL);
    cf_kafka_consumer_close(c);
    cf_dispatcher_destroy(d);
    cf_kvlist_free(&producer_props);
    int64_t elapsed = cf_mono_us() - t0;

    /* Executions, from the programs' own log. */
    FILE *f = fopen(opt.runs_file, "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        char id[128], wd[1024];
        if (sscanf(line, "%127s %1023s", id, wd) != 2)
            continue;
        long pid = pid_of_workdir(wd);
        req_state *q = find(id);
        if (!q)
            continue;
        if (q->runs++ == 0)
            q->first_run_pid = pid;
    }
    if (f)
        fclose(f);

    /* Runs the workers stopped themselves, from their logs. */
    DIR *dd = opt.logs_dir ? opendir(opt.logs_dir) : NULL;
    struct dirent *de;
    while (dd && (de = readdir(dd)) != NULL) {
        if (de->d_name[0] != 'w' || !strstr(de->d_name, ".log"))
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", opt.logs_dir, de->d_name);
        FILE *lf = fopen(path, "r");
        char l[4096];
        while (lf && fgets(l, sizeof(l), lf)) {
            const char *p = strstr(l, "request ");
            if (!p || !strstr(l, ": execution stopped by the worker"))
                continue;
            char id[128];
            if (sscanf(p + 8, "%127[^:]", id) == 1) {
                req_state *q = find(id);
                if (q)
                    q->stopped = true;
            }
        }
        if (lf)
            fclose(lf);
    }
    if (dd)
        closedir(dd);

    /* Where lost requests sit: their partition (from the key, as the
     * producer chose it) and its owner now. */
    int32_t nparts = 0;
    {
        rd_kafka_resp_err_t kerr;
        rd_kafka_t *rk = cf_kafka_consumer_new(opt.brokers, "chaos-meta", &kafka_props, "codefleet-chaos", "consumer",
                                               &err);
        if (!rk || cf_kafka_topic_partitions(rk, opt.requests, false, &nparts, &kerr, &err) < 0)
            nparts = 0;
        cf_kafka_consumer_close(rk);
    }
    if (nparts > 256)
        nparts = 256;
    int lost_by_part[256] = {0};
    int lost = 0, mismatched = 0, dup_runs = 0, dup_explained = 0, dup_unexplained = 0, replays = 0, never_ran = 0;
    int ws_missing = 0, cp_missing = 0, ws_checked = 0, cp_checked = 0;
    int64_t max_answer = 0;
    int64_t *times = calloc((size_t)total, sizeof(*times));
    int ntimes = 0;
    int by_status[16] = {0};
    for (int i = 0; i < total; i++) {
        req_state *q = &reqs[i];
        if (!q->nresults) {
            lost++;
            char key[128];
            key_of(q, key, sizeof(key));
            int32_t part = nparts > 0 ? cf_kafka_partition_for_key(key, nparts) : -1;
            if (part >= 0 && part < nparts)
                lost_by_part[part]++;
            if (lost <= 10)
                fprintf(stderr, "LOST: %s (%s, partition %d)\n", q->id, kind_names[q->k], (int)part);
            continue;
        }
        if (times)
            times[ntimes++] = q->answered_us - q->submitted_us;
        if ((int)q->status >= 0 && q->status < 16)
            by_status[q->status]++;
        if (q->answered_us - q->submitted_us > max_answer)
            max_answer = q->answered_us - q->submitted_us;
        if (q->status_mismatch) {
            mismatched++;
            fprintf(stderr, "STATUS MISMATCH: %s\n", q->id);
        }
        replays += q->replayed;
        if (q->runs == 0)
            never_ran++;
        if (q->runs > 1) {
            dup_runs++;
            char pid[32];
            snprintf(pid, sizeof(pid), "%ld", q->first_run_pid);
            if (in_list(opt.killed_file, pid) || q->stopped) {
                dup_explained++;
            } else {
                dup_unexplained++;
                fprintf(stderr, "RAN TWICE without a kill: %s (%d runs, first by worker pid %ld)\n", q->id, q->runs,
                        q->first_run_pid);
            }
        }
    }
    /* Acknowledged state is in Redis. */
    for (int g = 0; g < opt.groups; g++) {
        char name[64];
        snprintf(name, sizeof(name), "%s-ws-%d", opt.tag, g);
        cf_ws_listing l = {0};
        int tries = 0;
        while (cf_workspace_list(ws, name, &l, &err) < 0) {
            if (!err.retriable || ++tries > 50)
                die("listing %s: %s", name, err.msg);
            usleep(200 * 1000); /* Redis was restarted under us: reconnect */
        }
        for (int i = 0; i < opt.n; i++) {
            req_state *q = &reqs[i];
            if (q->k != K_WORKSPACE || q->group != g || !q->ws_written)
                continue;
            ws_checked++;
            char path[96];
            snprintf(path, sizeof(path), "%s.txt", q->id);
            bool found = false;
            for (size_t e = 0; e < l.n && !found; e++)
                found = strcmp(l.entries[e].path, path) == 0;
            if (!found) {
                ws_missing++;
                fprintf(stderr, "WORKSPACE WRITE LOST: %s in %s\n", path, name);
            }
        }
        cf_ws_listing_clear(&l);
    }
    for (int i = 0; i < opt.n; i++) {
        req_state *q = &reqs[i];
        if (q->k != K_CHECKPOINT || !q->checkpoint_id[0])
            continue;
        cp_checked++;
        char name[64];
        snprintf(name, sizeof(name), "%s-th-%d", opt.tag, q->group);
        cf_checkpoint got;
        int rc, tries = 0;
        while ((rc = cf_checkpoint_get(cp, name, q->checkpoint_id, &got, &err)) < 0 && err.retriable && ++tries < 50)
            usleep(200 * 1000);
        if (rc < 0) {
            cp_missing++;
            fprintf(stderr, "CHECKPOINT LOST: %s of %s (%s)\n", q->checkpoint_id, q->id, err.msg);
        } else {
            cf_checkpoint_clear(&got);
        }
    }
    cf_checkpoint_store_destroy(cp);
    cf_workspace_store_destroy(ws);
    cf_redis_destroy(r);

    printf("requests            %d (%d per kind: trivial, slow, workspace, checkpoint; %d more in the burst)\n",
           total, opt.n / K__COUNT, opt.burst);
    printf("elapsed             %.1f s\n", elapsed / 1e6);
    printf("answered            %d\n", total - lost);
    printf("lost                %d\n", lost);
    printf("result messages     %ld (%ld more than ids: answers repeated after a kill)\n",
           atomic_load(&total_results), atomic_load(&total_results) - (total - lost));
    printf("statuses            success %d, failed %d, timeout %d, rejected %d, internal_error %d\n",
           by_status[CF_STATUS_SUCCESS], by_status[CF_STATUS_FAILED], by_status[CF_STATUS_TIMEOUT],
           by_status[CF_STATUS_REJECTED], by_status[CF_STATUS_INTERNAL_ERROR]);
    printf("status mismatches   %d\n", mismatched);
    printf("replayed answers    %d\n", replays);
    printf("ran twice           %d (%d after their worker was killed or stopped the run, %d otherwise)\n", dup_runs,
           dup_explained, dup_unexplained);
    printf("answered, never ran %d\n", never_ran);
    printf("workspace writes    %d checked, %d lost\n", ws_checked, ws_missing);
    printf("checkpoints         %d checked, %d lost\n", cp_checked, cp_missing);
    printf("max time to answer  %.1f s\n", max_answer / 1e6);
    double p50 = 0, p99 = 0;
    if (times && ntimes) {
        qsort(times, (size_t)ntimes, sizeof(*times), cmp_i64);
        p50 = times[(ntimes - 1) / 2] / 1e6;
        p99 = times[(size_t)((ntimes - 1) * 0.99)] / 1e6;
    }
    printf("time to answer      p50 %.2f s, p99 %.1f s, max %.1f s\n", p50, p99, max_answer / 1e6);
    /* The bound: with the outage run.sh measured (none: 0). */
    double outage = 0;
    FILE *of = opt.outage_file ? fopen(opt.outage_file, "r") : NULL;
    if (of) {
        if (fscanf(of, "%lf", &outage) != 1)
            outage = 0;
        fclose(of);
    }
    char why[512];
    int nkills = 0;
    int64_t *kills = kill_times(&nkills);
    int most_kills = 0;
    /* The fleet's rate: answers over the time from the first submission to
     * the last first answer. */
    int64_t first_sub = 0, last_ans = 0;
    int nans = 0;
    for (int i = 0; i < total; i++) {
        if (reqs[i].submitted_us && (!first_sub || reqs[i].submitted_us < first_sub))
            first_sub = reqs[i].submitted_us;
        if (reqs[i].nresults) {
            nans++;
            if (reqs[i].answered_us > last_ans)
                last_ans = reqs[i].answered_us;
        }
    }
    double rate = last_ans > first_sub ? nans / ((last_ans - first_sub) / 1e6) : 1;
    /* Per request: the queue ahead of it when it was submitted. */
    int64_t *answers = calloc((size_t)total + 1, sizeof(*answers));
    int na = 0;
    for (int i = 0; answers && i < total; i++)
        if (reqs[i].nresults)
            answers[na++] = reqs[i].answered_us;
    if (answers)
        qsort(answers, (size_t)na, sizeof(*answers), cmp_i64);
    int over_bound = 0;
    double worst_room = 1e9, worst_queue = 0;
    for (int i = 0; i < total; i++) {
        req_state *q = &reqs[i];
        if (!q->nresults)
            continue;
        int ahead = 0, done = 0;
        for (int k = 0; k < total; k++)
            ahead += reqs[k].submitted_us && reqs[k].submitted_us < q->submitted_us;
        for (int lo = 0, hi = na; answers && lo < hi;) { /* answers before its submission */
            int mid = (lo + hi) / 2;
            if (answers[mid] < q->submitted_us)
                lo = done = mid + 1;
            else
                hi = mid;
        }
        double queue_s = ahead > done ? (ahead - done) / rate : 0;
        double took = (q->answered_us - q->submitted_us) / 1e6;
        /* Kills from one cycle before its submission (its partition's
         * owner may have died just before) to its answer. */
        int64_t cycle_us = (int64_t)((opt.session_s + opt.rebalance_s) * 1e6);
        int around = 0;
        for (int k = 0; k < nkills; k++)
            around += kills[k] >= q->submitted_us - cycle_us && kills[k] <= q->answered_us;
        most_kills = around > most_kills ? around : most_kills;
        double faults = fault_allowance_s(outage, around, why, sizeof(why));
        double room = faults + queue_s - took;
        if (room < worst_room) {
            worst_room = room;
            worst_queue = queue_s;
        }
        if (room < 0 && ++over_bound <= 10)
            fprintf(stderr, "OVER THE BOUND: %s answered after %.1f s (bound %.1f s: %.1f s of queue ahead, %d kill(s) "
                    "around it)\n", q->id, took, faults + queue_s, queue_s, around);
    }
    free(answers);
    free(kills);
    fault_allowance_s(outage, most_kills, why, sizeof(why));
    printf("bound               per request: faults (at most: %s) + the queue ahead at the fleet's %.1f answers/s; "
           "%d over; closest %.1f s under (its queue %.1f s)\n",
           why, rate, over_bound, worst_room, worst_queue);
    if (opt.burst)
        printf("burst               %d slow requests; %d unanswered as the broker went down\n", opt.burst,
               atomic_load(&unanswered_at_outage));
    if (lost) {
        char (*owners)[256] = calloc(nparts > 0 ? (size_t)nparts : 1, sizeof(*owners));
        if (owners)
            describe_owners(nparts, owners);
        printf("lost by partition  ");
        for (int32_t p = 0; p < nparts; p++)
            if (lost_by_part[p])
                printf(" %s[%d]: %d (owner now: %s)", opt.requests, (int)p, lost_by_part[p],
                       owners && owners[p][0] ? owners[p] : "none");
        printf("\n");
        free(owners);
    }
    free(times);
    bool ok = lost == 0 && mismatched == 0 && dup_unexplained == 0 && ws_missing == 0 && cp_missing == 0 &&
              over_bound == 0;
    printf("verdict             %s\n", ok ? "PASS" : "FAIL");
    free(reqs);
    return ok ? 0 : 1;
}
