/* bench_exec: per-execution cost of a backend against bare fork+exec+wait,
 * measured in the same run on the same program.
 *
 *   bench_exec [--backend process] [--iterations N] [--program /bin/true]
 *
 * Prints one line per variant: median, p90 and p99 in microseconds, and the
 * backend's median as a ratio and a difference against the bare anchor.
 * Iterations of both variants are interleaved so machine noise hits both. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_util.h"

extern char **environ;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(int64_t *v, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static int64_t bare_once(const char *program)
{
    int64_t t0 = cf_mono_us();
    pid_t pid = fork();
    if (pid == 0) {
        char *const argv[] = {(char *)program, NULL};
        execve(program, argv, environ);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return cf_mono_us() - t0;
}

int main(int argc, char **argv)
{
    const char *backend_name = "process";
    const char *program = "/bin/true";
    int iterations = 300;
    static const struct option opts[] = {{"backend", required_argument, NULL, 'b'},
                                         {"iterations", required_argument, NULL, 'n'},
                                         {"program", required_argument, NULL, 'p'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "b:n:p:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': backend_name = optarg; break;
        case 'n': iterations = (int)strtol(optarg, NULL, 10); break;
        case 'p': program = optarg; break;
        default: return 2;
        }
    }
    if (iterations < 10 || iterations > 1000000) {
        fprintf(stderr, "bench_exec: --iterations must be 10..1000000\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const cf_backend_ops *ops = cf_backend_find(backend_name);
    if (!ops) {
        fprintf(stderr, "bench_exec: unknown backend %s\n", backend_name);
        return 2;
    }
    cf_backend_config cfg = {
        .work_root = "/tmp",
        .python_path = "/usr/bin/python3",
        .node_path = "/usr/bin/node",
        .shell_path = "/bin/sh",
        .exec_path = "/usr/local/bin:/usr/bin:/bin",
        .slots = 1,
        .max_files_bytes = 64 << 20,
        .max_output_file_bytes = 1 << 20,
    };
    void *state = NULL;
    cf_backend_caps caps;
    cf_error err;
    cf_error_clear(&err);
    if (ops->create(&cfg, &state, &caps, &err) < 0) {
        fprintf(stderr, "bench_exec: %s: %s\n", backend_name, err.msg);
        return 1;
    }
    int64_t *bare = calloc((size_t)iterations, sizeof(int64_t));
    int64_t *be = calloc((size_t)iterations, sizeof(int64_t));
    cf_request req = {0};
    req.id = (char *)"bench";
    req.language = CF_LANG_COMMAND;
    char *av[] = {(char *)program, NULL};
    req.argv = av;
    req.argc = 1;
    req.policy.timeout_us = 10 * 1000000LL;
    req.policy.max_stdout_bytes = 1 << 20;
    req.policy.max_stderr_bytes = 1 << 20;
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "bench"};
    /* Warm-up: page cache, first-touch costs. */
    for (int i = 0; i < 10; i++)
        bare_once(program);
    for (int i = 0; i < iterations; i++) {
        bare[i] = bare_once(program);
        cf_result res = {0};
        int64_t t0 = cf_mono_us();
        int r = ops->execute(state, &ctx, &req, &res, &err);
        be[i] = cf_mono_us() - t0;
        if (r < 0 || res.status != CF_STATUS_SUCCESS) {
            fprintf(stderr, "bench_exec: execution %d failed: %s %s\n", i, r < 0 ? err.msg : cf_status_name(res.status),
                    res.reason ? res.reason : "");
            return 1;
        }
        cf_result_clear(&res);
    }
    qsort(bare, (size_t)iterations, sizeof(int64_t), cmp_i64);
    qsort(be, (size_t)iterations, sizeof(int64_t), cmp_i64);
    int64_t mb = pct(bare, iterations, 0.5), mk = pct(be, iterations, 0.5);
    printf("bare fork+exec+wait  %-10s n=%d median=%lldus p90=%lldus p99=%lldus\n", program, iterations,
           (long long)mb, (long long)pct(bare, iterations, 0.9), (long long)pct(bare, iterations, 0.99));
    printf("backend %-12s %-10s n=%d median=%lldus p90=%lldus p99=%lldus\n", backend_name, program, iterations,
           (long long)mk, (long long)pct(be, iterations, 0.9), (long long)pct(be, iterations, 0.99));
    printf("RESULT exec_overhead backend=%s median_ratio=%.2f median_extra_us=%lld executions_per_s_one_slot=%.0f\n",
           backend_name, (double)mk / (double)mb, (long long)(mk - mb), 1e6 / (double)mk);
    ops->destroy(state);
    free(bare);
    free(be);
    return 0;
}
