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
 *     every checkpoint a result names exists.
 * Prints the figures and exits 1 on any violation.
 *
 * Programs log each start to a host file ("<id> <worker pid>"): the chaos
 * workers run the process backend, which shares the host's file system. */
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
#include "cf_kafka_int.h"
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
} req_state;

static struct {
    const char *brokers, *config, *redis, *requests, *results, *runs_file, *killed_file, *logs_dir, *tag;
    int n, rate, groups, timeout_s;
} opt = {.n = 2000, .rate = 40, .groups = 20, .timeout_s = 600, .tag = "chaos"};

static req_state *reqs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int answered;
static atomic_long total_results;
static volatile sig_atomic_t stop_reader;
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
    if (i < 0 || i >= opt.n || strcmp(reqs[i].id, id) != 0)
        return NULL;
    return &reqs[i];
}

static void *reader_main(void *arg)
{
    rd_kafka_t *c = arg;
    while (!stop_reader) {
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
    snprintf(log, sizeof(log), "echo \"%s $PPID\" >> %s", r->id, opt.runs_file);
    char name[64];
    switch (r->k) {
    case K_TRIVIAL:
        snprintf(code, sizeof(code), "%s; echo ok", log);
        break;
    case K_SLOW:
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
        else die("unknown option %s", k);
    }
    if (!opt.brokers || !opt.redis || !opt.requests || !opt.results || !opt.runs_file || opt.n <= 0 ||
        opt.n > MAX_REQ || opt.rate <= 0 || opt.groups <= 0)
        die("usage: --brokers B --redis H:P --requests T --results T --runs-file F [--config F] [--n N] ...");
    if (opt.config)
        read_config(opt.config);
    srand(42);
    reqs = calloc((size_t)opt.n, sizeof(*reqs));
    for (int i = 0; i < opt.n; i++) {
        snprintf(reqs[i].id, sizeof(reqs[i].id), "%s-%d", opt.tag, i);
        reqs[i].k = (kind)(i % K__COUNT);
        reqs[i].group = (i / K__COUNT) % opt.groups;
    }

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

    cf_dispatcher_config dc = {.brokers = opt.brokers, .request_topic = opt.requests, .result_topic = opt.results,
                               .kafka = &kafka_props};
    cf_dispatcher *d = NULL;
    if (cf_dispatcher_new(&dc, &d, &err) < 0)
        die("dispatcher: %s", err.msg);
    int64_t t0 = cf_mono_us();
    for (int i = 0; i < opt.n; i++) {
        int64_t due = t0 + (int64_t)i * 1000000 / opt.rate;
        int64_t now = cf_mono_us();
        if (due > now)
            usleep((useconds_t)(due - now));
        cf_request req;
        build(&req, &reqs[i]);
        reqs[i].submitted_us = cf_mono_us();
        /* The broker may be down: the producer buffers and retries. */
        while (cf_dispatcher_submit(d, &req, &err) < 0) {
            fprintf(stderr, "chaos_driver: submit %s: %s (retrying)\n", reqs[i].id, err.msg);
            sleep(1);
        }
        cf_request_clear(&req);
        if (i % 200 == 199)
            fprintf(stderr, "chaos_driver: %d submitted, %d answered\n", i + 1, atomic_load(&answered));
    }
    while (cf_dispatcher_flush(d, 10 * 1000000LL, &err) < 0)
        fprintf(stderr, "chaos_driver: flush: %s (retrying)\n", err.msg);
    fprintf(stderr, "chaos_driver: all %d submitted in %.1f s\n", opt.n, (cf_mono_us() - t0) / 1e6);
    int64_t deadline = cf_mono_us() + (int64_t)opt.timeout_s * 1000000;
    while (atomic_load(&answered) < opt.n && cf_mono_us() < deadline)
        usleep(200 * 1000);
    sleep(3); /* late duplicates */
    stop_reader = 1;
    pthread_join(reader, NULL);
    cf_kafka_consumer_close(c);
    cf_dispatcher_destroy(d);
    int64_t elapsed = cf_mono_us() - t0;

    /* Executions, from the programs' own log. */
    FILE *f = fopen(opt.runs_file, "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        char id[128];
        long pid = 0;
        if (sscanf(line, "%127s %ld", id, &pid) != 2)
            continue;
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

    int lost = 0, mismatched = 0, dup_runs = 0, dup_explained = 0, dup_unexplained = 0, replays = 0, never_ran = 0;
    int ws_missing = 0, cp_missing = 0, ws_checked = 0, cp_checked = 0;
    int64_t max_answer = 0;
    int by_status[16] = {0};
    for (int i = 0; i < opt.n; i++) {
        req_state *q = &reqs[i];
        if (!q->nresults) {
            lost++;
            if (lost <= 10)
                fprintf(stderr, "LOST: %s (%s)\n", q->id, kind_names[q->k]);
            continue;
        }
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

    printf("requests            %d (%d per kind: trivial, slow, workspace, checkpoint)\n", opt.n, opt.n / K__COUNT);
    printf("elapsed             %.1f s\n", elapsed / 1e6);
    printf("answered            %d\n", opt.n - lost);
    printf("lost                %d\n", lost);
    printf("result messages     %ld (%ld more than ids: answers repeated after a kill)\n",
           atomic_load(&total_results), atomic_load(&total_results) - (opt.n - lost));
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
    bool ok = lost == 0 && mismatched == 0 && dup_unexplained == 0 && ws_missing == 0 && cp_missing == 0;
    printf("verdict             %s\n", ok ? "PASS" : "FAIL");
    free(reqs);
    return ok ? 0 : 1;
}
