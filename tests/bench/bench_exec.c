/* bench_exec: per-execution cost of a backend against bare fork+exec+wait,
 * measured in the same run on the same program.
 *
 *   bench_exec [--backend process] [--iterations N] [--program /bin/true]
 *              [--bwrap | --no-bwrap] [--network]
 *
 * --network (sandbox) also times network=enabled against network=disabled,
 * interleaved, over a fifth of the iterations: the cost of the own network
 * namespace behind slirp4netns and its routes.
 *
 * Prints one line per variant: median, p90 and p99 in microseconds, and the
 * backend's median as a ratio and a difference against the bare anchor.
 * Iterations of all variants are interleaved so machine noise hits each.
 *
 * --bwrap (the default for --backend sandbox when /usr/bin/bwrap exists)
 * adds Debian's bubblewrap doing the same isolation as a second anchor:
 * new user, pid, mount, net, ipc, uts and cgroup namespaces, a new session,
 * die-with-parent, uid/gid 1000, no capabilities, a cleared environment, a
 * root of read-only /usr (+ the usrmerge symlinks or read-only binds of
 * /bin /lib /lib64 /sbin), fresh /proc, /dev and /tmp, and an empty /work.
 * (The sandbox does more on top: a cgroup, seccomp, a capped work tmpfs.) */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_util.h"
#include "support/backend_settings.h"

extern char **environ;

static int64_t tv_us(const struct timeval *t)
{
    return (int64_t)t->tv_sec * 1000000 + t->tv_usec;
}

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

#define BWRAP "/usr/bin/bwrap"

/* bwrap's argv for the isolation described above, ending with program. */
static int bwrap_argv(const char *program, char **av, int cap)
{
    int n = 0;
#define A(x) \
    do { \
        if (n + 1 >= cap) \
            return -1; \
        av[n++] = (char *)(x); \
    } while (0)
    A(BWRAP);
    A("--unshare-all");
    A("--die-with-parent");
    A("--new-session");
    A("--uid");
    A("1000");
    A("--gid");
    A("1000");
    A("--cap-drop");
    A("ALL");
    A("--clearenv");
    A("--setenv");
    A("PATH");
    A("/usr/bin:/bin");
    A("--ro-bind");
    A("/usr");
    A("/usr");
    static const char *const top[][2] = {{"/bin", "usr/bin"}, {"/lib", "usr/lib"}, {"/lib64", "usr/lib64"},
                                         {"/sbin", "usr/sbin"}};
    static char targets[4][64];
    for (int i = 0; i < 4; i++) {
        char buf[64];
        ssize_t l = readlink(top[i][0], buf, sizeof(buf) - 1);
        if (l > 0) {
            buf[l] = '\0';
            cf_strlcpy(targets[i], buf, sizeof(targets[i]));
            A("--symlink");
            A(targets[i]);
            A(top[i][0]);
        } else if (access(top[i][0], F_OK) == 0) {
            A("--ro-bind");
            A(top[i][0]);
            A(top[i][0]);
        }
    }
    A("--proc");
    A("/proc");
    A("--dev");
    A("/dev");
    A("--tmpfs");
    A("/tmp");
    A("--dir");
    A("/work");
    A("--chdir");
    A("/work");
    A(program);
#undef A
    av[n] = NULL;
    return n;
}

static int64_t argv_once(char *const *av)
{
    int64_t t0 = cf_mono_us();
    pid_t pid = fork();
    if (pid == 0) {
        execve(av[0], av, environ);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return cf_mono_us() - t0;
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
    int want_bwrap = -1; /* -1: default (sandbox backend and bwrap installed) */
    int want_net = 0;    /* also time network=enabled (egress through slirp4netns) */
    static const struct option opts[] = {{"backend", required_argument, NULL, 'b'},
                                         {"iterations", required_argument, NULL, 'n'},
                                         {"program", required_argument, NULL, 'p'},
                                         {"bwrap", no_argument, NULL, 'w'},
                                         {"no-bwrap", no_argument, NULL, 'W'},
                                         {"network", no_argument, NULL, 'N'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "b:n:p:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': backend_name = optarg; break;
        case 'n': iterations = (int)strtol(optarg, NULL, 10); break;
        case 'p': program = optarg; break;
        case 'w': want_bwrap = 1; break;
        case 'W': want_bwrap = 0; break;
        case 'N': want_net = 1; break;
        default: return 2;
        }
    }
    if (want_bwrap < 0)
        want_bwrap = strcmp(backend_name, "sandbox") == 0 && access(BWRAP, X_OK) == 0;
    char *bwrap_av[64];
    if (want_bwrap && (access(BWRAP, X_OK) != 0 || bwrap_argv(program, bwrap_av, 64) < 0)) {
        fprintf(stderr, "bench_exec: %s is not usable\n", BWRAP);
        return 2;
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
        .work_root = getenv("CF_BENCH_WORK_ROOT") ? getenv("CF_BENCH_WORK_ROOT") : "/tmp",
        .python_path = "/usr/bin/python3",
        .node_path = "/usr/bin/node",
        .shell_path = "/bin/sh",
        .exec_path = "/usr/local/bin:/usr/bin:/bin",
        .slots = 1,
        .max_files_bytes = 64 << 20,
        .max_output_file_bytes = 1 << 20,
        .slirp4netns_path = "/usr/bin/slirp4netns",
    };
    /* container: the default image of deploy/images.sh and the init built
     * beside this program (build/backends/codefleet-container-init). */
    char images[4200], init[4200];
    if (strcmp(backend_name, "container") == 0) {
        const char *dir = getenv("CF_BENCH_IMAGE") ? getenv("CF_BENCH_IMAGE")
                                                   : "/var/lib/codefleet/images/default/rootfs";
        snprintf(images, sizeof(images), "default=%.4000s", dir);
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        snprintf(init, sizeof(init), "%.4000s/../backends/codefleet-container-init", self);
        cfg.settings = test_backend_settings((const char *[]){"sandbox-warm", "true", "sandbox-zygote", "false",
                                                              "container-images", images, "container-init", init, NULL});
    } else {
        cfg.settings =
            test_backend_settings((const char *[]){"sandbox-warm", "true", "sandbox-zygote", "false", NULL});
    }
    void *state = NULL;
    cf_backend_caps caps;
    cf_error err;
    cf_error_clear(&err);
    if (ops->create(&cfg, &state, &caps, &err) < 0) {
        fprintf(stderr, "bench_exec: %s: %s\n", backend_name, err.msg);
        return 1;
    }
    /* sandbox: the same backend with every sandbox built on the critical
     * path (sandbox_cold), timed interleaved with the warm one. */
    bool is_sandbox = strcmp(backend_name, "sandbox") == 0;
    void *cold_state = NULL;
    if (is_sandbox) {
        cf_backend_config ccfg = cfg;
        ccfg.settings =
            test_backend_settings((const char *[]){"sandbox-warm", "false", "sandbox-zygote", "false", NULL});
        cf_backend_caps ccaps;
        if (ops->create(&ccfg, &cold_state, &ccaps, &err) < 0) {
            fprintf(stderr, "bench_exec: sandbox (cold): %s\n", err.msg);
            return 1;
        }
    }
    int64_t *cold = calloc((size_t)iterations, sizeof(int64_t));
    int64_t *bare = calloc((size_t)iterations, sizeof(int64_t));
    int64_t *be = calloc((size_t)iterations, sizeof(int64_t));
    int64_t *bw = calloc((size_t)iterations, sizeof(int64_t));
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
    for (int i = 0; i < 10; i++) {
        bare_once(program);
        if (want_bwrap && argv_once(bwrap_av) < 0) {
            fprintf(stderr, "bench_exec: bwrap run failed\n");
            return 1;
        }
    }
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
        if (want_bwrap && (bw[i] = argv_once(bwrap_av)) < 0) {
            fprintf(stderr, "bench_exec: bwrap execution %d failed\n", i);
            return 1;
        }
        if (cold_state) {
            cf_result cres = {0};
            t0 = cf_mono_us();
            r = ops->execute(cold_state, &ctx, &req, &cres, &err);
            cold[i] = cf_mono_us() - t0;
            if (r < 0 || cres.status != CF_STATUS_SUCCESS) {
                fprintf(stderr, "bench_exec: cold execution %d failed\n", i);
                return 1;
            }
            cf_result_clear(&cres);
        }
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
    if (want_bwrap) {
        qsort(bw, (size_t)iterations, sizeof(int64_t), cmp_i64);
        int64_t mw = pct(bw, iterations, 0.5);
        printf("bubblewrap %-10s %-10s n=%d median=%lldus p90=%lldus p99=%lldus\n", "0.8.0", program, iterations,
               (long long)mw, (long long)pct(bw, iterations, 0.9), (long long)pct(bw, iterations, 0.99));
        printf("RESULT exec_overhead backend=bwrap median_ratio=%.2f median_extra_us=%lld\n",
               (double)mw / (double)mb, (long long)(mw - mb));
        printf("RESULT sandbox_vs_bwrap backend=%s median_us=%lld bwrap_median_us=%lld overhead_ratio=%.2f "
               "(extra over bare: %lld us vs %lld us)\n",
               backend_name, (long long)mk, (long long)mw, (double)(mk - mb) / (double)(mw - mb > 0 ? mw - mb : 1),
               (long long)(mk - mb), (long long)(mw - mb));
    }
    if (cold_state) {
        qsort(cold, (size_t)iterations, sizeof(int64_t), cmp_i64);
        int64_t mc = pct(cold, iterations, 0.5);
        printf("sandbox, cold        %-10s n=%d median=%lldus p90=%lldus p99=%lldus\n", program, iterations,
               (long long)mc, (long long)pct(cold, iterations, 0.9), (long long)pct(cold, iterations, 0.99));
        printf("RESULT sandbox_warm_vs_cold warm_median_extra_us=%lld warm_p99_us=%lld cold_median_extra_us=%lld "
               "cold_p99_us=%lld bare_median_us=%lld\n",
               (long long)(mk - mb), (long long)pct(be, iterations, 0.99), (long long)(mc - mb),
               (long long)pct(cold, iterations, 0.99), (long long)mb);

        /* Back to back: nothing between two executions, so the next warm
         * sandbox is built while... nothing runs: its build is on the
         * critical path whenever it is not finished (a saturated slot). */
        int nb2 = iterations / 2 > 10 ? iterations / 2 : 10;
        int64_t *b2b = calloc((size_t)nb2, sizeof(int64_t));
        for (int i = 0; i < nb2; i++) {
            cf_result res = {0};
            int64_t t0 = cf_mono_us();
            int r = ops->execute(state, &ctx, &req, &res, &err);
            b2b[i] = cf_mono_us() - t0;
            if (r < 0 || res.status != CF_STATUS_SUCCESS)
                return 1;
            cf_result_clear(&res);
        }
        qsort(b2b, (size_t)nb2, sizeof(int64_t), cmp_i64);
        printf("RESULT sandbox_warm_back_to_back n=%d median_us=%lld p99_us=%lld\n", nb2,
               (long long)pct(b2b, nb2, 0.5), (long long)pct(b2b, nb2, 0.99));
        free(b2b);

        /* Total CPU per execution (this process's threads, the preparer's
         * included, and every reaped child: the sandbox's init and the
         * program): each execution followed by a pause long enough for
         * the next warm sandbox to be built, so all of it is counted.
         * Kernel work deferred to kernel threads (a network namespace's
         * teardown) is not in it. */
        struct {
            const char *name;
            void *st;
        } kinds[3] = {{"bare", NULL}, {"warm", state}, {"cold", cold_state}};
        int ncpu = iterations / 2 > 20 ? iterations / 2 : 20;
        double cpu_us[3];
        for (int k = 0; k < 3; k++) {
            struct rusage s0, c0, s1, c1;
            getrusage(RUSAGE_SELF, &s0);
            getrusage(RUSAGE_CHILDREN, &c0);
            for (int i = 0; i < ncpu; i++) {
                if (!kinds[k].st) {
                    bare_once(program);
                } else {
                    cf_result res = {0};
                    if (ops->execute(kinds[k].st, &ctx, &req, &res, &err) < 0)
                        return 1;
                    cf_result_clear(&res);
                }
                usleep(5000);
            }
            getrusage(RUSAGE_SELF, &s1);
            getrusage(RUSAGE_CHILDREN, &c1);
            cpu_us[k] = (double)(tv_us(&s1.ru_utime) + tv_us(&s1.ru_stime) - tv_us(&s0.ru_utime) -
                                 tv_us(&s0.ru_stime) + tv_us(&c1.ru_utime) + tv_us(&c1.ru_stime) -
                                 tv_us(&c0.ru_utime) - tv_us(&c0.ru_stime)) /
                        ncpu;
        }
        printf("RESULT sandbox_cpu_per_execution n=%d bare_us=%.0f warm_us=%.0f cold_us=%.0f warm_extra_us=%.0f "
               "cold_extra_us=%.0f\n",
               ncpu, cpu_us[0], cpu_us[1], cpu_us[2], cpu_us[1] - cpu_us[0], cpu_us[2] - cpu_us[0]);
        ops->destroy(cold_state);
    }
    free(cold);
    if (want_net) {
        /* network=enabled against network=disabled, interleaved: what the
         * own namespace, slirp4netns and the routes cost per execution. */
        int nn = iterations / 5 > 10 ? iterations / 5 : 10;
        int64_t *on = calloc((size_t)nn, sizeof(int64_t)), *off = calloc((size_t)nn, sizeof(int64_t));
        for (int i = 0; i < nn; i++) {
            for (int k = 0; k < 2; k++) {
                req.policy.network = k ? CF_NET_ENABLED : CF_NET_DISABLED;
                cf_result res = {0};
                int64_t t0 = cf_mono_us();
                int r = ops->execute(state, &ctx, &req, &res, &err);
                (k ? on : off)[i] = cf_mono_us() - t0;
                if (r < 0 || res.status != CF_STATUS_SUCCESS) {
                    fprintf(stderr, "bench_exec: network=%s execution %d failed: %s %s\n", k ? "enabled" : "disabled",
                            i, r < 0 ? err.msg : cf_status_name(res.status), res.reason ? res.reason : "");
                    return 1;
                }
                cf_result_clear(&res);
            }
        }
        qsort(on, (size_t)nn, sizeof(int64_t), cmp_i64);
        qsort(off, (size_t)nn, sizeof(int64_t), cmp_i64);
        int64_t mon = pct(on, nn, 0.5), moff = pct(off, nn, 0.5);
        printf("RESULT sandbox_network n=%d enabled_median_us=%lld disabled_median_us=%lld extra_us=%lld ratio=%.2f\n",
               nn, (long long)mon, (long long)moff, (long long)(mon - moff), (double)mon / (double)moff);
        free(on);
        free(off);
    }
    ops->destroy(state);
    free(bare);
    free(be);
    free(bw);
    return 0;
}
