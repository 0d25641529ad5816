/* bench_compile: compiled languages through the pipeline on the sandbox
 * backend, each figure next to the same compiler and program run directly
 * on the host in the same run (needs root).
 *
 *   bench_compile [--iterations N] [--cases-iterations M] [--lang c|rust|all]
 *
 * Per language (hello world, built with the worker's default flags):
 *   host_compile   the compiler invoked directly (same flags), bare fork+exec
 *   host_run       the built program, bare fork+exec+wait
 *   cold           a request: compile in the sandbox + one run (no cache)
 *   cached         the same request again with the compile cache warm
 *   cases100       one request with 100 cases (no cache): one compile + 100
 *                  sandboxed runs, against host_compile + 100 x host_run
 * Iterations of every variant are interleaved so machine noise hits each;
 * medians are reported, with ratios to the anchors.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_pipeline.h"
#include "cf_util.h"
#include "support/backend_settings.h"

#define SEC 1000000LL

extern char **environ;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    return v[n / 2];
}

/* fork+exec+wait with stdout/stderr to /dev/null; -1 on failure. */
static int64_t spawn_wait(char *const argv[], const char *cwd)
{
    int64_t t0 = cf_mono_us();
    pid_t p = fork();
    if (p == 0) {
        int fd = open("/dev/null", O_RDWR);
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (cwd && chdir(cwd) < 0)
            _exit(126);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    int st;
    if (p < 0 || waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return cf_mono_us() - t0;
}

typedef struct lang_bench {
    cf_language lang;
    const char *name;
    const char *src_name;
    const char *code;
    const char *const *host_argv; /* compiler argv, "OUT" and "SRC" replaced */
} lang_bench;

static const char c_code[] = "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n";
static const char rust_code[] = "fn main() {\n    println!(\"hello\");\n}\n";
static const char *const c_argv[] = {"/usr/bin/gcc", "-std=gnu17", "-O2", "-Wall", "-fdiagnostics-format=json",
                                     "-o", "OUT", "SRC", "-lm", NULL};
static const char *const rust_argv[] = {"/usr/bin/rustc", "--edition=2021", "-O", "--error-format=json",
                                        "--crate-type=bin", "--crate-name=main", "-Cstrip=debuginfo", "-o", "OUT",
                                        "SRC", NULL};

static int64_t run_request(cf_pipeline *pl, const cf_backend *be, const cf_request *req, int want_cases)
{
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "bench"};
    cf_error err;
    cf_error_clear(&err);
    int64_t t0 = cf_mono_us();
    int rc = cf_pipeline_execute(pl, be, "bench", &ctx, req, &res, &err);
    int64_t dt = cf_mono_us() - t0;
    bool ok = rc == 0 && res.status == CF_STATUS_SUCCESS && (size_t)want_cases == res.n_cases;
    if (!ok)
        fprintf(stderr, "request failed: rc %d status %s reason %s err %s\n", rc, cf_status_name(res.status),
                res.reason ? res.reason : "-", err.msg);
    cf_result_clear(&res);
    return ok ? dt : -1;
}

int main(int argc, char **argv)
{
    int iters = 20, case_iters = 5;
    const char *only = "all";
    static const struct option opts[] = {{"iterations", required_argument, NULL, 'n'},
                                         {"cases-iterations", required_argument, NULL, 'm'},
                                         {"lang", required_argument, NULL, 'l'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:m:l:", opts, NULL)) != -1) {
        if (c == 'n')
            iters = atoi(optarg);
        else if (c == 'm')
            case_iters = atoi(optarg);
        else if (c == 'l')
            only = optarg;
        else
            return 2;
    }
    if (iters < 3 || case_iters < 1 || geteuid() != 0) {
        fprintf(stderr, "bench_compile: needs root, --iterations >= 3, --cases-iterations >= 1\n");
        return 2;
    }
    const char *wr = getenv("CF_BENCH_WORK_ROOT") ? getenv("CF_BENCH_WORK_ROOT") : "/tmp";
    char host_dir[256];
    snprintf(host_dir, sizeof(host_dir), "%s/cf-bench-compile-XXXXXX", wr);
    if (!mkdtemp(host_dir) || chmod(host_dir, 0711) < 0) {
        perror("mkdtemp");
        return 1;
    }
    char src_root[300];
    snprintf(src_root, sizeof(src_root), "%s/.harness-unused", host_dir);

    cf_pipeline_config pc = {.cc = "/usr/bin/gcc", .cxx = "/usr/bin/g++", .rustc = "/usr/bin/rustc",
                             .node = "/usr/bin/node", .compile_timeout_us = 60 * SEC,
                             .compile_memory_bytes = 2LL << 30, .compile_processes = 128,
                             .compile_output_bytes = 1 << 20, .artifact_bytes = 64LL << 20,
                             .collect_bytes = 1 << 20, .collect_scan_bytes = 8 << 20};
    cf_pipeline *cold = NULL, *warm = NULL;
    cf_error err;
    pc.cache_bytes = 0;
    if (cf_pipeline_new(&pc, &cold, &err) < 0)
        return fprintf(stderr, "pipeline: %s\n", err.msg), 1;
    pc.cache_bytes = 256LL << 20;
    if (cf_pipeline_new(&pc, &warm, &err) < 0)
        return fprintf(stderr, "pipeline: %s\n", err.msg), 1;
    char desc[512];
    cf_pipeline_describe(cold, desc, sizeof(desc));
    printf("toolchains: %s\n", desc);

    char sb_root[300];
    snprintf(sb_root, sizeof(sb_root), "%s/sb", host_dir);
    mkdir(sb_root, 0711);
    cf_backend_config cfg = {.work_root = sb_root, .python_path = "/usr/bin/python3", .node_path = "/usr/bin/node",
                             .shell_path = "/bin/sh", .exec_path = "/usr/bin:/bin", .slots = 1,
                             .max_files_bytes = 64 << 20, .max_output_file_bytes = 1 << 20,
                             .compiled_languages = cf_pipeline_languages(cold),
                             .toolchain_dirs = cf_pipeline_toolchain_dirs(cold)};
    cfg.settings = test_backend_settings((const char *[]){"sandbox-warm", "true", "sandbox-zygote", "false", NULL});
    cf_backend_set *set = NULL;
    if (cf_backend_set_new("sandbox", &cfg, &set, &err) < 0)
        return fprintf(stderr, "sandbox: %s\n", err.msg), 1;
    const cf_backend *be = cf_backend_set_get(set, 0);

    lang_bench langs[] = {
        {CF_LANG_C, "c", "main.c", c_code, c_argv},
        {CF_LANG_RUST, "rust", "main.rs", rust_code, rust_argv},
    };
    int status = 0;
    for (size_t li = 0; li < sizeof(langs) / sizeof(langs[0]); li++) {
        lang_bench *L = &langs[li];
        if (strcmp(only, "all") != 0 && strcmp(only, L->name) != 0)
            continue;
        if (!(cf_pipeline_languages(cold) & (1u << L->lang))) {
            printf("%s: no toolchain, skipped\n", L->name);
            continue;
        }
        /* The host side: source and binary in a directory of their own. */
        char src[512], out[512];
        snprintf(src, sizeof(src), "%s/%s", host_dir, L->src_name);
        snprintf(out, sizeof(out), "%s/prog-%s", host_dir, L->name);
        FILE *f = fopen(src, "w");
        if (!f || fputs(L->code, f) < 0 || fclose(f) != 0)
            return perror("source"), 1;
        char *hargv[16];
        int k = 0;
        for (; L->host_argv[k]; k++)
            hargv[k] = strcmp(L->host_argv[k], "OUT") == 0   ? out
                       : strcmp(L->host_argv[k], "SRC") == 0 ? src
                                                             : (char *)L->host_argv[k];
        hargv[k] = NULL;
        char *rargv[] = {out, NULL};

        cf_request req;
        memset(&req, 0, sizeof(req));
        req.id = "bench-1";
        req.language = L->lang;
        req.code = (cf_bytes){(uint8_t *)L->code, strlen(L->code)};
        req.policy.timeout_us = 10 * SEC;
        req.policy.max_stdout_bytes = req.policy.max_stderr_bytes = 1 << 20;
        cf_request creq = req;
        cf_case cases[100];
        memset(cases, 0, sizeof(cases));
        for (int i = 0; i < 100; i++) {
            cases[i].has_expect = true;
            cases[i].expect_stdout = (cf_bytes){(uint8_t *)"hello\n", 6};
        }
        creq.cases = cases;
        creq.n_cases = 100;

        int64_t *hc = calloc((size_t)iters, sizeof(int64_t)), *hr = calloc((size_t)iters, sizeof(int64_t)),
                *co = calloc((size_t)iters, sizeof(int64_t)), *ca = calloc((size_t)iters, sizeof(int64_t)),
                *c100 = calloc((size_t)case_iters, sizeof(int64_t));
        if (run_request(warm, be, &req, 0) < 0) /* warms the cache */
            return 1;
        int ci = 0;
        for (int i = 0; i < iters; i++) {
            hc[i] = spawn_wait(hargv, host_dir);
            hr[i] = spawn_wait(rargv, host_dir);
            co[i] = run_request(cold, be, &req, 0);
            ca[i] = run_request(warm, be, &req, 0);
            if (hc[i] < 0 || hr[i] < 0 || co[i] < 0 || ca[i] < 0) {
                fprintf(stderr, "%s: iteration %d failed\n", L->name, i);
                return 1;
            }
            /* The 100-case requests, spread over the iterations. */
            if (ci < case_iters && i % (iters / case_iters > 0 ? iters / case_iters : 1) == 0) {
                c100[ci] = run_request(cold, be, &creq, 100);
                if (c100[ci++] < 0)
                    return 1;
            }
        }
        while (ci < case_iters) {
            c100[ci] = run_request(cold, be, &creq, 100);
            if (c100[ci++] < 0)
                return 1;
        }
        int64_t mhc = median(hc, iters), mhr = median(hr, iters), mco = median(co, iters), mca = median(ca, iters),
                mc100 = median(c100, case_iters);
        int64_t anchor100 = mhc + 100 * mhr;
        printf("%s: host compile %.1f ms, host run %.2f ms | cold compile+run %.1f ms (%.2fx host compile+run) | "
               "cached compile+run %.2f ms (%.2fx host run) | 100 cases %.1f ms (%.2fx host compile + 100 host runs)\n",
               L->name, mhc / 1e3, mhr / 1e3, mco / 1e3, (double)mco / (double)(mhc + mhr), mca / 1e3,
               (double)mca / (double)mhr, mc100 / 1e3, (double)mc100 / (double)anchor100);
        printf("RESULT compile lang=%s host_compile_us=%lld host_run_us=%lld cold_us=%lld cold_ratio=%.2f "
               "cached_us=%lld cached_ratio_run=%.2f cases100_us=%lld cases100_ratio=%.2f iterations=%d "
               "cases_iterations=%d\n",
               L->name, (long long)mhc, (long long)mhr, (long long)mco, (double)mco / (double)(mhc + mhr),
               (long long)mca, (double)mca / (double)mhr, (long long)mc100, (double)mc100 / (double)anchor100, iters,
               case_iters);
        free(hc);
        free(hr);
        free(co);
        free(ca);
        free(c100);
    }
    cf_backend_set_destroy(set);
    cf_pipeline_destroy(cold);
    cf_pipeline_destroy(warm);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", host_dir);
    if (system(cmd) != 0)
        status = 1;
    (void)src_root;
    return status;
}
