/* bench_embed: per-execution cost of the wasm and js backends, beside the
 * process backend running /bin/true and `node -e 0`, and bare
 * fork+exec+wait of /bin/true as the anchor, all in one run with their
 * iterations interleaved (machine noise hits each alike).
 *
 *   bench_embed [--iterations N] [--helper PATH] [--node PATH]
 *
 * The wasm request is the smallest WASI command (an empty _start), the js
 * request the snippet `0`: what is measured is the backend's own cost per
 * execution (directories, the job to the helper and back, a fresh store or
 * runtime, the result).  Needs root (the helpers are confined).  Prints one
 * line per variant (median, p90, p99) and RESULT lines for scripts. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_util.h"
#include "support/backend_settings.h"

extern char **environ;

/* (module (func (export "_start"))) */
static const uint8_t empty_command[] = {0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x04, 0x01, 0x60, 0x00,
                                        0x00, 0x03, 0x02, 0x01, 0x00, 0x07, 0x0a, 0x01, 0x06, '_',  's',  't',  'a',
                                        'r',  't',  0x00, 0x00, 0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b};

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(const int64_t *v, int n, double p)
{
    return v[(int)(p * (n - 1) + 0.5)];
}

static int64_t bare_once(void)
{
    int64_t t0 = cf_mono_us();
    pid_t pid = fork();
    if (pid == 0) {
        char *const argv[] = {(char *)"/bin/true", NULL};
        execve(argv[0], argv, environ);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return cf_mono_us() - t0;
}

enum { V_BARE, V_TRUE, V_NODE, V_WASM, V_JS, V_COUNT };
static const char *const vname[V_COUNT] = {"bare fork+exec /bin/true", "process /bin/true", "process node -e 0",
                                           "wasm empty _start", "js `0`"};

int main(int argc, char **argv)
{
    int iterations = 1000;
    char helper[4096] = "";
    const char *node = "/usr/bin/node";
    const char *bin = getenv("CF_BINARY_DIR");
    if (bin)
        snprintf(helper, sizeof(helper), "%s/backends/codefleet-embed-helper", bin);
    static const struct option opts[] = {{"iterations", required_argument, NULL, 'n'},
                                         {"helper", required_argument, NULL, 'h'},
                                         {"node", required_argument, NULL, 'N'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        switch (c) {
        case 'n': iterations = (int)strtol(optarg, NULL, 10); break;
        case 'h': cf_strlcpy(helper, optarg, sizeof(helper)); break;
        case 'N': node = optarg; break;
        default: return 2;
        }
    }
    if (iterations < 20 || iterations > 1000000 || !helper[0]) {
        fprintf(stderr, "bench_embed: --iterations 20..1000000 and --helper PATH (or CF_BINARY_DIR) needed\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    cf_backend_config cfg = {
        .work_root = getenv("CF_BENCH_WORK_ROOT") ? getenv("CF_BENCH_WORK_ROOT") : "/tmp",
        .node_path = node,
        .shell_path = "/bin/sh",
        .exec_path = "/usr/local/bin:/usr/bin:/bin",
        .slots = 1,
        .max_files_bytes = 64 << 20,
        .max_output_file_bytes = 1 << 20,
    };
    cfg.settings = test_backend_settings((const char *[]){"embed-helper", helper, "wasm-cache", "64MiB", NULL});
    cf_backend_set *set = NULL;
    cf_error err;
    cf_error_clear(&err);
    if (cf_backend_set_new("process,wasm,js", &cfg, &set, &err) < 0 || cf_backend_set_count(set) != 3) {
        fprintf(stderr, "bench_embed: backends: %s\n", err.msg[0] ? err.msg : "wasm or js unavailable");
        return 1;
    }
    const cf_backend *be[V_COUNT] = {NULL, cf_backend_set_get(set, 0), cf_backend_set_get(set, 0),
                                     cf_backend_set_get(set, 1), cf_backend_set_get(set, 2)};
    cf_request req[V_COUNT];
    memset(req, 0, sizeof(req));
    char *true_av[] = {(char *)"/bin/true", NULL};
    char *node_av[] = {(char *)node, (char *)"-e", (char *)"0", NULL};
    for (int v = 1; v < V_COUNT; v++) {
        req[v].id = (char *)"bench";
        req[v].policy.timeout_us = 10 * 1000000LL;
        req[v].policy.max_stdout_bytes = 1 << 20;
        req[v].policy.max_stderr_bytes = 1 << 20;
    }
    req[V_TRUE].language = CF_LANG_COMMAND;
    req[V_TRUE].argv = true_av;
    req[V_TRUE].argc = 1;
    req[V_NODE].language = CF_LANG_COMMAND;
    req[V_NODE].argv = node_av;
    req[V_NODE].argc = 3;
    req[V_WASM].language = CF_LANG_WASM;
    req[V_WASM].module.data = (uint8_t *)empty_command;
    req[V_WASM].module.len = sizeof(empty_command);
    req[V_JS].language = CF_LANG_JAVASCRIPT;
    req[V_JS].code.data = (uint8_t *)"0";
    req[V_JS].code.len = 1;

    int64_t *t[V_COUNT];
    for (int v = 0; v < V_COUNT; v++)
        t[v] = calloc((size_t)iterations, sizeof(int64_t));
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "bench"};
    /* node costs ~40 ms: a tenth of the iterations is plenty for its median */
    int node_every = 10;
    int n_node = 0;
    for (int i = -20; i < iterations; i++) { /* 20 warm-up rounds */
        for (int v = 0; v < V_COUNT; v++) {
            if (v == V_NODE && (i < 0 || i % node_every != 0))
                continue;
            int64_t t0 = cf_mono_us(), dt;
            if (v == V_BARE) {
                dt = bare_once();
            } else {
                cf_result res = {0};
                int r = be[v]->ops->execute(be[v]->state, &ctx, &req[v], &res, &err);
                dt = cf_mono_us() - t0;
                if (r < 0 || res.status != CF_STATUS_SUCCESS) {
                    fprintf(stderr, "bench_embed: %s failed: %s %s\n", vname[v],
                            r < 0 ? err.msg : cf_status_name(res.status), res.reason ? res.reason : "");
                    return 1;
                }
                cf_result_clear(&res);
            }
            if (i < 0)
                continue;
            if (v == V_NODE)
                t[v][n_node++] = dt;
            else
                t[v][i] = dt;
        }
    }
    int64_t med[V_COUNT];
    for (int v = 0; v < V_COUNT; v++) {
        int n = v == V_NODE ? n_node : iterations;
        qsort(t[v], (size_t)n, sizeof(int64_t), cmp_i64);
        med[v] = pct(t[v], n, 0.5);
        printf("%-26s n=%-6d median=%lldus p90=%lldus p99=%lldus\n", vname[v], n, (long long)med[v],
               (long long)pct(t[v], n, 0.9), (long long)pct(t[v], n, 0.99));
    }
    for (int v = V_WASM; v <= V_JS; v++)
        printf("RESULT embed_exec backend=%s median_us=%lld p99_us=%lld bare_true_us=%lld ratio_to_bare=%.2f "
               "ratio_to_process_true=%.2f ratio_to_node=%.3f\n",
               v == V_WASM ? "wasm" : "js", (long long)med[v], (long long)pct(t[v], iterations, 0.99),
               (long long)med[V_BARE], (double)med[v] / (double)med[V_BARE], (double)med[v] / (double)med[V_TRUE],
               (double)med[v] / (double)med[V_NODE]);
    cf_backend_set_destroy(set);
    for (int v = 0; v < V_COUNT; v++)
        free(t[v]);
    return 0;
}
