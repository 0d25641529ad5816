/* bench_fleet: fleet-level figures through the real broker.
 *
 *   bench_fleet latency    --brokers B --requests T --results T [-n 200]
 *   bench_fleet throughput --brokers B --requests T --results T [-n 2000]
 *   bench_fleet publish    --brokers B --requests T [-n 20000]
 *   bench_fleet cancel     --brokers B --requests T --results T [-n 20]
 *   bench_fleet wsops      --brokers B --requests T --results T [-n 15] (needs a worker with Redis; tests/bench/wsops.sh --mode session)
 *   bench_fleet session    --brokers B --requests T --results T [-n 15] (needs a worker with Redis; tests/bench/wsops.sh --mode session)
 *   (each with --kind command|wasm|js|python: the trivial request, see trivial_request;
 *   --notify-start: each request asks for a start notice, SPEC.md 13.1)
 *
 * latency:    one request at a time (command /bin/true), submit -> result;
 *             the bare fork+exec+wait of /bin/true (python: of
 *             /usr/bin/python3 -c 'print(1)', the worker's default python)
 *             is measured in the same run as the anchor.
 * throughput: n trivial requests submitted at once; requests/s from the
 *             first submit to the last result.
 * publish:    n requests produced and flushed; messages/s.
 * cancel:     n rounds of: /bin/sleep 60 submitted, 0.3 s to start, then a
 *             cancel; time from the cancel sent to the `cancelled` result
 *             received (the worker answers only once the program is dead
 *             and reaped, so this bounds cancel-to-kill from above).
 * wsops:      workspace operations (SPEC.md 3.5), n rounds, the variants
 *             interleaved, each on a workspace of its own holding 10 files of
 *             100 lines: one line of each of the 10 changed by one
 *             apply_patch, against the same change as 10 write ops in turn
 *             and as one run of `sed -i` on the 10 (the worker writes them
 *             back); and a read op of one file against a run of `cat`.
 * Lines starting with RESULT are for tests/bench/run.sh to collect. */
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stddef.h>

#include "cf_config.h"
#include "cf_dispatcher.h"
#include "cf_util.h"

#define SEC 1000000LL

extern char **environ;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(int64_t *v, int n, double p)
{
    return v[(int)(p * (n - 1) + 0.5)];
}

static const char *kind = "command";

static int64_t bare_median(int n)
{
    int64_t *v = calloc((size_t)n, sizeof(int64_t));
    bool py = strcmp(kind, "python") == 0;
    for (int i = 0; i < n; i++) {
        int64_t t0 = cf_mono_us();
        pid_t pid = fork();
        if (pid == 0) {
            if (py) {
                char *const argv[] = {(char *)"/usr/bin/python3", (char *)"-c", (char *)"print(1)", NULL};
                int dn = open("/dev/null", O_WRONLY);
                if (dn >= 0)
                    dup2(dn, 1);
                execve(argv[0], argv, environ);
            } else {
                char *const argv[] = {(char *)"/bin/true", NULL};
                execve("/bin/true", argv, environ);
            }
            _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        v[i] = cf_mono_us() - t0;
    }
    qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
    int64_t m = pct(v, n, 0.5);
    free(v);
    return m;
}

/* --kind: what a trivial request runs.  command: /bin/true on the
 * worker's default backend; wasm: the smallest WASI command (an empty
 * _start) on the wasm backend; js: the snippet `0` on the js backend;
 * python: print(1) on the worker's default backend; sleep:S: /bin/sleep S
 * on the worker's default backend. */

/* (module (func (export "_start"))) */
static const uint8_t empty_command[] = {0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x04, 0x01, 0x60, 0x00,
                                        0x00, 0x03, 0x02, 0x01, 0x00, 0x07, 0x0a, 0x01, 0x06, '_',  's',  't',  'a',
                                        'r',  't',  0x00, 0x00, 0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b};

static bool notify_start; /* --notify-start: every request asks for a start notice */

static void trivial_request(cf_request *req, char *av[3])
{
    memset(req, 0, sizeof(*req));
    req->notify_start = notify_start;
    if (strcmp(kind, "wasm") == 0) {
        req->language = CF_LANG_WASM;
        req->backend = (char *)"wasm";
        req->module.data = (uint8_t *)empty_command;
        req->module.len = sizeof(empty_command);
        return;
    }
    if (strcmp(kind, "js") == 0) {
        req->language = CF_LANG_JAVASCRIPT;
        req->backend = (char *)"js";
        req->code.data = (uint8_t *)"0";
        req->code.len = 1;
        return;
    }
    if (strcmp(kind, "python") == 0) {
        req->language = CF_LANG_PYTHON;
        req->code.data = (uint8_t *)"print(1)";
        req->code.len = 8;
        return;
    }
    if (strncmp(kind, "sleep:", 6) == 0) {
        /* /bin/sleep S: a request that holds its slot (makespan, fair
         * shares). */
        av[0] = (char *)"/bin/sleep";
        av[1] = (char *)kind + 6;
        av[2] = NULL;
        req->language = CF_LANG_COMMAND;
        req->argv = av;
        req->argc = 2;
        req->policy.timeout_us = 900 * SEC; /* the worker's default max-timeout */
        return;
    }
    av[0] = (char *)"/bin/true";
    av[1] = NULL;
    req->language = CF_LANG_COMMAND;
    req->argv = av;
    req->argc = 1;
}

static void die(const char *what, const cf_error *err)
{
    fprintf(stderr, "bench_fleet: %s: %s\n", what, err->msg);
    exit(1);
}

/* ---- wsops ---- */

#define WS_FILES 10

/* File i of a workspace at version v: 100 lines, the first naming v. */
static char *ws_file_text(int i, int v)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "version %d\n", v);
    for (int k = 1; k < 100; k++)
        fprintf(f, "line %d of file %d: some text an agent would edit\n", k, i);
    fclose(f);
    return text;
}

/* Submits req, waits, and returns the round trip (us); a status other
 * than success ends the benchmark. */
static int64_t ws_round_trip(cf_dispatcher *d, cf_request *req, const char *what)
{
    char id[64];
    cf_error err;
    cf_error_clear(&err);
    cf_dispatcher_new_id(id, sizeof(id), NULL);
    req->id = id;
    int64_t t0 = cf_mono_us();
    if (cf_dispatcher_submit(d, req, &err) < 0)
        die("submit", &err);
    cf_result res = {0};
    if (cf_dispatcher_wait(d, id, 60 * SEC, &res, &err) < 0)
        die("wait", &err);
    int64_t dt = cf_mono_us() - t0;
    if (res.status != CF_STATUS_SUCCESS) {
        fprintf(stderr, "bench_fleet: %s: %s: %s\n", what, cf_status_name(res.status), res.reason ? res.reason : "");
        exit(1);
    }
    cf_result_clear(&res);
    req->id = NULL;
    return dt;
}

static int64_t ws_write(cf_dispatcher *d, const char *ws, int i, const char *text)
{
    char path[32];
    snprintf(path, sizeof(path), "f%d.txt", i);
    cf_workspace_op op = {.op = CF_WS_OP_WRITE, .path = path, .has_content = true,
                          .content = {.data = (uint8_t *)text, .len = strlen(text)}};
    cf_request req = {.workspace = (char *)ws, .workspace_op = &op};
    return ws_round_trip(d, &req, "write");
}

static int64_t ws_patch(cf_dispatcher *d, const char *ws, int v)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "*** Begin Patch\n");
    for (int i = 0; i < WS_FILES; i++)
        fprintf(f, "*** Update File: f%d.txt\n@@\n-version %d\n+version %d\n", i, v - 1, v);
    fprintf(f, "*** End Patch\n");
    fclose(f);
    cf_workspace_op op = {.op = CF_WS_OP_APPLY_PATCH, .has_content = true,
                          .content = {.data = (uint8_t *)text, .len = len}};
    cf_request req = {.workspace = (char *)ws, .workspace_op = &op};
    int64_t dt = ws_round_trip(d, &req, "apply_patch");
    free(text);
    return dt;
}

/* A program on the workspace (read-write, the default on any backend). */
static int64_t ws_run(cf_dispatcher *d, const char *ws, char **argv)
{
    size_t argc = 0;
    while (argv[argc])
        argc++;
    cf_request req = {.language = CF_LANG_COMMAND, .argv = argv, .argc = argc, .workspace = (char *)ws};
    return ws_round_trip(d, &req, "run");
}

static void ws_bench(cf_dispatcher *d, int n)
{
    char ws[3][64];
    for (int k = 0; k < 3; k++) {
        cf_dispatcher_new_id(ws[k], sizeof(ws[k]), NULL);
        memcpy(ws[k], k == 0 ? "bpatch" : k == 1 ? "bwrite" : "brun__", 6);
        for (int i = 0; i < WS_FILES; i++) {
            char *t = ws_file_text(i, 0);
            ws_write(d, ws[k], i, t);
            free(t);
        }
    }
    int64_t *lat[5];
    for (int k = 0; k < 5; k++)
        lat[k] = calloc((size_t)n, sizeof(int64_t));
    char *cat_av[] = {(char *)"/bin/cat", (char *)"f0.txt", NULL};
    for (int r = 0; r < n + 3; r++) { /* 3 rounds to warm up */
        int v = r + 1, at = r - 3;
        int64_t t[5];
        t[0] = ws_patch(d, ws[0], v);
        t[1] = 0;
        for (int i = 0; i < WS_FILES; i++) {
            char *text = ws_file_text(i, v);
            t[1] += ws_write(d, ws[1], i, text);
            free(text);
        }
        /* sed -i 1s/.*\/version V/ f0.txt ... f9.txt */
        char expr[64], paths[WS_FILES][32], *sed_av[WS_FILES + 4] = {(char *)"/bin/sed", (char *)"-i", expr};
        snprintf(expr, sizeof(expr), "1s/.*/version %d/", v);
        for (int i = 0; i < WS_FILES; i++) {
            snprintf(paths[i], sizeof(paths[i]), "f%d.txt", i);
            sed_av[3 + i] = paths[i];
        }
        sed_av[3 + WS_FILES] = NULL;
        t[2] = ws_run(d, ws[2], sed_av);
        cf_workspace_op op = {.op = CF_WS_OP_READ, .path = (char *)"f0.txt"};
        cf_request rreq = {.workspace = ws[0], .workspace_op = &op};
        t[3] = ws_round_trip(d, &rreq, "read");
        t[4] = ws_run(d, ws[0], cat_av);
        for (int k = 0; at >= 0 && k < 5; k++)
            lat[k][at] = t[k];
    }
    int64_t p50[5];
    for (int k = 0; k < 5; k++) {
        qsort(lat[k], (size_t)n, sizeof(int64_t), cmp_i64);
        p50[k] = pct(lat[k], n, 0.5);
        free(lat[k]);
    }
    printf("wsops n=%d: apply_patch of %d files p50=%lldus; %d write ops p50=%lldus; a run of sed -i on them "
           "p50=%lldus; read op p50=%lldus; a run of cat p50=%lldus\n", n, WS_FILES, (long long)p50[0], WS_FILES,
           (long long)p50[1], (long long)p50[2], (long long)p50[3], (long long)p50[4]);
    printf("RESULT ws_patch files=%d p50_us=%lld writes_p50_us=%lld run_p50_us=%lld ratio_to_writes=%.2f "
           "ratio_to_run=%.2f\n", WS_FILES, (long long)p50[0], (long long)p50[1], (long long)p50[2],
           (double)p50[0] / (double)p50[1], (double)p50[0] / (double)p50[2]);
    printf("RESULT ws_read p50_us=%lld cat_run_p50_us=%lld ratio_to_run=%.2f\n", (long long)p50[3],
           (long long)p50[4], (double)p50[3] / (double)p50[4]);
}

/* ---- sessions ---- */

/* One program on a workspace (python or shell), as a session's cell when
 * session is set; the round trip (us). */
static int64_t sess_run(cf_dispatcher *d, cf_language lang, const char *ws, const char *session, const char *code)
{
    cf_request req = {.language = lang, .code = {.data = (uint8_t *)code, .len = strlen(code)},
                      .workspace = session ? NULL : (char *)ws, .session = (char *)session};
    return ws_round_trip(d, &req, session ? "session cell" : "run");
}

/* Issue 31 part 9 as far as sessions go today (no live interpreter): a
 * trivial cell against a trivial run on a workspace that changes one file
 * (the anchor: the same snapshot, write-back of one file and interpreter
 * start), for python and shell, and a python cell whose session holds about
 * 1 MiB of state. */
static void sess_bench(cf_dispatcher *d, int n)
{
    char ws[5][64];
    for (int k = 0; k < 5; k++)
        cf_dispatcher_new_id(ws[k], sizeof(ws[k]), NULL);
    sess_run(d, CF_LANG_PYTHON, NULL, ws[1], "x = 1");
    sess_run(d, CF_LANG_PYTHON, NULL, ws[2], "blob = bytes(1 << 20)\nrows = list(range(10000))");
    sess_run(d, CF_LANG_SHELL, NULL, ws[4], "x=1; f() { :; }");
    static const char *const what[5] = {"python run on a workspace", "python cell", "python cell, 1 MiB state",
                                        "shell run on a workspace", "shell cell"};
    int64_t *lat[5];
    for (int k = 0; k < 5; k++)
        lat[k] = calloc((size_t)n, sizeof(int64_t));
    for (int r = 0; r < n + 3; r++) { /* 3 rounds to warm up */
        int64_t v[5];
        /* The anchors change a file too, as every cell changes its state:
         * both pay one write-back. */
        v[0] = sess_run(d, CF_LANG_PYTHON, ws[0], NULL, "import os\nopen('mark', 'w').write(str(os.getpid()))");
        v[1] = sess_run(d, CF_LANG_PYTHON, NULL, ws[1], "x = 1");
        v[2] = sess_run(d, CF_LANG_PYTHON, NULL, ws[2], "x = 1");
        v[3] = sess_run(d, CF_LANG_SHELL, ws[3], NULL, "echo $$ > mark");
        v[4] = sess_run(d, CF_LANG_SHELL, NULL, ws[4], "x=1");
        for (int k = 0; r >= 3 && k < 5; k++)
            lat[k][r - 3] = v[k];
    }
    int64_t p50[5];
    for (int k = 0; k < 5; k++) {
        qsort(lat[k], (size_t)n, sizeof(int64_t), cmp_i64);
        p50[k] = pct(lat[k], n, 0.5);
        free(lat[k]);
        printf("%-28s p50=%lldus\n", what[k], (long long)p50[k]);
    }
    printf("RESULT session_cell lang=python p50_us=%lld run_p50_us=%lld ratio_to_run=%.2f\n", (long long)p50[1],
           (long long)p50[0], (double)p50[1] / (double)p50[0]);
    printf("RESULT session_cell_1mib lang=python p50_us=%lld run_p50_us=%lld ratio_to_run=%.2f\n",
           (long long)p50[2], (long long)p50[0], (double)p50[2] / (double)p50[0]);
    printf("RESULT session_cell lang=shell p50_us=%lld run_p50_us=%lld ratio_to_run=%.2f\n", (long long)p50[4],
           (long long)p50[3], (double)p50[4] / (double)p50[3]);
}

/* A stack settings file: kafka.sasl.* for the authenticated broker; its
 * Redis keys are accepted and unused. */
typedef struct bench_settings {
    cf_kvlist kafka;
    char *redis_user;
    char *redis_password;
} bench_settings;

static const cf_conf_prop sprops[] = {
    {"kafka.", CF_CONF_KVLIST, offsetof(bench_settings, kafka), 0, 0, NULL, NULL, "librdkafka properties", NULL},
    {"redis-user", CF_CONF_STRING, offsetof(bench_settings, redis_user), 0, 256, NULL, NULL, "unused", NULL},
    {"redis-password", CF_CONF_STRING, offsetof(bench_settings, redis_password), 0, 1024, NULL, NULL, "unused", NULL},
};
static const cf_conf_table stable = {.program = "bench_fleet", .props = sprops, .nprops = 3};

/* One trivial request submitted and waited for: its round trip in us;
 * *status (may be NULL) gets its status. */
static int64_t trivial_round_trip(cf_dispatcher *d, char **av, cf_status *status)
{
    cf_request req;
    char id[64];
    cf_error err;
    cf_error_clear(&err);
    trivial_request(&req, av);
    cf_dispatcher_new_id(id, sizeof(id), NULL);
    req.id = id;
    int64_t t0 = cf_mono_us();
    if (cf_dispatcher_submit(d, &req, &err) < 0)
        die("submit", &err);
    cf_result res = {0};
    if (cf_dispatcher_wait(d, id, 30 * SEC, &res, &err) < 0)
        die("wait", &err);
    int64_t took = cf_mono_us() - t0;
    if (status)
        *status = res.status;
    if (res.status != CF_STATUS_SUCCESS)
        fprintf(stderr, "bench_fleet: request failed: %s %s\n", cf_status_name(res.status), res.reason ? res.reason : "");
    cf_result_clear(&res);
    return took;
}

/* stream mode: each chunk's lines are epoch nanoseconds the program took
 * right before writing them; the latency is the chunk's arrival here. */
typedef struct chunk_lat {
    pthread_mutex_t mu;
    int64_t *v;
    size_t n, cap;
    char partial[64]; /* a line cut at a chunk boundary */
    size_t plen;
} chunk_lat;

static void on_chunk_lat(void *ctx, const cf_chunk *c)
{
    int64_t now = cf_now_us();
    chunk_lat *cl = ctx;
    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; i < c->data.len; i++) {
        char ch = (char)c->data.data[i];
        if (ch != '\n') {
            if (cl->plen < sizeof(cl->partial) - 1)
                cl->partial[cl->plen++] = ch;
            continue;
        }
        cl->partial[cl->plen] = '\0';
        cl->plen = 0;
        long long ns = strtoll(cl->partial, NULL, 10);
        /* Only lines whose end is in this chunk: their arrival is now. */
        if (ns > 0 && cl->n < cl->cap)
            cl->v[cl->n++] = now - ns / 1000;
    }
    pthread_mutex_unlock(&cl->mu);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_fleet latency|throughput|publish|cancel|stream|wsops|session --brokers B --requests T --results T "
                        "[-n N]\n");
        return 2;
    }
    const char *mode = argv[1];
    const char *brokers = "127.0.0.1:19092", *requests = "codefleet.requests", *results = "codefleet.results";
    const char *config = NULL;
    int n = 0;
    static const struct option opts[] = {{"brokers", required_argument, NULL, 'b'},
                                         {"requests", required_argument, NULL, 'q'},
                                         {"results", required_argument, NULL, 'r'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"kind", required_argument, NULL, 'k'},
                                         {"notify-start", no_argument, NULL, 's'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': brokers = optarg; break;
        case 'q': requests = optarg; break;
        case 'r': results = optarg; break;
        case 'c': config = optarg; break;
        case 'k': kind = optarg; break;
        case 's': notify_start = true; break;
        case 'n': n = (int)strtol(optarg, NULL, 10); break;
        default: return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    bool publish = strcmp(mode, "publish") == 0;
    bench_settings settings = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_conf_init(&stable, &settings, &err) < 0 || (config && cf_conf_load_file(&stable, &settings, config, &err) < 0))
        die("config", &err);
    chunk_lat cl = {.mu = PTHREAD_MUTEX_INITIALIZER};
    bool stream = strcmp(mode, "stream") == 0;
    cf_dispatcher_config cfg = {.brokers = brokers,
                                .request_topic = requests,
                                .result_topic = results,
                                .collect_results = !publish,
                                .kafka = &settings.kafka,
                                .on_chunk = stream ? on_chunk_lat : NULL,
                                .on_chunk_ctx = &cl};
    cf_dispatcher *d = NULL;
    if (cf_dispatcher_new(&cfg, &d, &err) < 0)
        die("dispatcher", &err);
    char *av[3];
    cf_request req;
    char id[64];

    if (strcmp(mode, "latency") == 0) {
        n = n ? n : 200;
        /* Warm the path (connections, partition leaders, the worker's caches). */
        for (int i = 0; i < 200; i++)
            trivial_round_trip(d, av, NULL);
        int64_t *lat = calloc((size_t)n, sizeof(int64_t));
        for (int i = 0; i < n; i++) {
            cf_status st;
            lat[i] = trivial_round_trip(d, av, &st);
            if (st != CF_STATUS_SUCCESS)
                return 1;
        }
        qsort(lat, (size_t)n, sizeof(int64_t), cmp_i64);
        int64_t bare = bare_median(strcmp(kind, "python") == 0 ? 50 : 300);
        int64_t p50 = pct(lat, n, 0.5), p99 = pct(lat, n, 0.99);
        printf("end-to-end n=%d p50=%lldus p90=%lldus p99=%lldus max=%lldus; bare fork+exec median=%lldus\n", n,
               (long long)p50, (long long)pct(lat, n, 0.9), (long long)p99, (long long)lat[n - 1], (long long)bare);
        printf("RESULT e2e_latency kind=%s p50_us=%lld p99_us=%lld bare_us=%lld p50_minus_bare_us=%lld p50_ratio=%.1f\n",
               kind, (long long)p50, (long long)p99, (long long)bare, (long long)(p50 - bare), (double)p50 / (double)bare);
        free(lat);
    } else if (strcmp(mode, "throughput") == 0) {
        n = n ? n : 2000;
        char (*ids)[64] = calloc((size_t)n, 64);
        int64_t t0 = cf_mono_us();
        for (int i = 0; i < n; i++) {
            trivial_request(&req, av);
            cf_dispatcher_new_id(ids[i], 64, NULL);
            req.id = ids[i];
            if (cf_dispatcher_submit(d, &req, &err) < 0)
                die("submit", &err);
        }
        int ok = 0;
        for (int i = 0; i < n; i++) {
            cf_result res = {0};
            if (cf_dispatcher_wait_any(d, 120 * SEC, &res, NULL, &err) < 0)
                die("wait", &err);
            ok += res.status == CF_STATUS_SUCCESS;
            if (res.status != CF_STATUS_SUCCESS) /* say which and why: a figure left out needs a reason */
                fprintf(stderr, "bench_fleet: %s: %s: %s\n", res.id ? res.id : "?", cf_status_name(res.status),
                        res.reason ? res.reason : "");
            cf_result_clear(&res);
        }
        int64_t dt = cf_mono_us() - t0;
        printf("throughput n=%d in %.3fs: %.0f requests/s (%d success)\n", n, dt / 1e6, n / (dt / 1e6), ok);
        free(ids);
        if (ok != n) {
            /* Rejections are answered fast: a rate of them is no throughput. */
            fprintf(stderr, "bench_fleet: only %d of %d requests succeeded: the figure is not reported\n", ok, n);
            return 1;
        }
        printf("RESULT throughput kind=%s requests_per_s=%.0f n=%d success=%d elapsed_s=%.3f\n", kind, n / (dt / 1e6), n,
               ok, dt / 1e6);
    } else if (strcmp(mode, "cancel") == 0) {
        n = n ? n : 20;
        int64_t *lat = calloc((size_t)n, sizeof(int64_t));
        char *sleep_av[3] = {(char *)"/bin/sleep", (char *)"60", NULL};
        for (int i = 0; i < n; i++) {
            memset(&req, 0, sizeof(req));
            req.language = CF_LANG_COMMAND;
            req.argv = sleep_av;
            req.argc = 2;
            cf_dispatcher_new_id(id, sizeof(id), NULL);
            req.id = id;
            if (cf_dispatcher_submit(d, &req, &err) < 0)
                die("submit", &err);
            usleep(300000);
            int64_t t0 = cf_mono_us();
            if (cf_dispatcher_cancel(d, id, "bench", 10 * SEC, &err) < 0)
                die("cancel", &err);
            cf_result res = {0};
            if (cf_dispatcher_wait(d, id, 30 * SEC, &res, &err) < 0)
                die("wait", &err);
            lat[i] = cf_mono_us() - t0;
            if (res.status != CF_STATUS_CANCELLED) {
                fprintf(stderr, "bench_fleet: round %d: status %s, want cancelled\n", i, cf_status_name(res.status));
                return 1;
            }
            cf_result_clear(&res);
        }
        qsort(lat, (size_t)n, sizeof(int64_t), cmp_i64);
        printf("cancel n=%d: cancel sent -> cancelled result p50=%lldus p99=%lldus max=%lldus\n", n,
               (long long)pct(lat, n, 0.5), (long long)pct(lat, n, 0.99), (long long)lat[n - 1]);
        printf("RESULT cancel_to_result n=%d p50_us=%lld p99_us=%lld\n", n, (long long)pct(lat, n, 0.5),
               (long long)pct(lat, n, 0.99));
        free(lat);
    } else if (stream) {
        /* Anchor: a trivial request's end-to-end latency, same stack, now. */
        int n_e2e = 200;
        int64_t *e2e = calloc((size_t)n_e2e, sizeof(int64_t));
        for (int i = 0; i < 100 + n_e2e; i++) {
            int64_t took = trivial_round_trip(d, av, NULL);
            if (i >= 100)
                e2e[i - 100] = took;
        }
        qsort(e2e, (size_t)n_e2e, sizeof(int64_t), cmp_i64);
        /* n requests, each writing 100 timestamps 20 ms apart. */
        n = n ? n : 5;
        cl.cap = (size_t)n * 100;
        cl.v = calloc(cl.cap, sizeof(int64_t));
        int64_t chunks = 0;
        for (int i = 0; i < n; i++) {
            memset(&req, 0, sizeof(req));
            req.language = CF_LANG_SHELL;
            static const char code[] = "i=0; while [ $i -lt 100 ]; do date +%s%N; sleep 0.02; i=$((i+1)); done";
            req.code.data = (uint8_t *)code;
            req.code.len = sizeof(code) - 1;
            req.stream = true;
            cf_dispatcher_new_id(id, sizeof(id), NULL);
            req.id = id;
            if (cf_dispatcher_submit(d, &req, &err) < 0)
                die("submit", &err);
            cf_result res = {0};
            if (cf_dispatcher_wait(d, id, 60 * SEC, &res, &err) < 0)
                die("wait", &err);
            if (res.status != CF_STATUS_SUCCESS) {
                fprintf(stderr, "bench_fleet: stream request: %s %s\n", cf_status_name(res.status),
                        res.reason ? res.reason : "");
                return 1;
            }
            chunks += res.chunks;
            cf_result_clear(&res);
        }
        usleep(500000); /* the last chunks */
        pthread_mutex_lock(&cl.mu);
        size_t m = cl.n;
        qsort(cl.v, m, sizeof(int64_t), cmp_i64);
        pthread_mutex_unlock(&cl.mu);
        if (m < (size_t)n * 90) {
            fprintf(stderr, "bench_fleet: only %zu of %d lines arrived as chunks\n", m, n * 100);
            return 1;
        }
        int64_t p50 = pct(cl.v, (int)m, 0.5), p99 = pct(cl.v, (int)m, 0.99);
        int64_t e50 = pct(e2e, n_e2e, 0.5);
        printf("stream n=%d requests, %zu lines in %lld chunks: write -> subscriber p50=%lldus p90=%lldus p99=%lldus "
               "max=%lldus; trivial request end to end p50=%lldus\n",
               n, m, (long long)chunks, (long long)p50, (long long)pct(cl.v, (int)m, 0.9), (long long)p99,
               (long long)cl.v[m - 1], (long long)e50);
        printf("RESULT chunk_latency lines=%zu p50_us=%lld p99_us=%lld e2e_p50_us=%lld ratio_to_e2e=%.2f\n", m,
               (long long)p50, (long long)p99, (long long)e50, (double)p50 / (double)e50);
        free(e2e);
        free(cl.v);
    } else if (strcmp(mode, "wsops") == 0) {
        ws_bench(d, n ? n : 15);
    } else if (strcmp(mode, "session") == 0) {
        sess_bench(d, n ? n : 15);
    } else if (publish) {
        n = n ? n : 20000;
        int64_t t0 = cf_mono_us();
        for (int i = 0; i < n; i++) {
            trivial_request(&req, av);
            cf_dispatcher_new_id(id, sizeof(id), NULL);
            req.id = id;
            if (cf_dispatcher_submit(d, &req, &err) < 0)
                die("submit", &err);
        }
        if (cf_dispatcher_flush(d, 120 * SEC, &err) < 0)
            die("flush", &err);
        int64_t dt = cf_mono_us() - t0;
        printf("publish n=%d in %.3fs: %.0f requests/s (acknowledged)\n", n, dt / 1e6, n / (dt / 1e6));
        printf("RESULT publish requests_per_s=%.0f n=%d\n", n / (dt / 1e6), n);
    } else {
        fprintf(stderr, "bench_fleet: unknown mode %s\n", mode);
        return 2;
    }
    cf_dispatcher_destroy(d);
    return 0;
}
