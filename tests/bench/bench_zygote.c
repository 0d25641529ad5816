/* bench_zygote: what the sandbox's zygote saves, against bare processes
 * and the other sandbox paths, measured interleaved in one run.
 *
 *   bench_zygote [--iterations N] [--zygote PATH]
 *
 * Two programs, each through:
 *   bare      fork+exec+wait of the same program, no sandbox (the anchor)
 *   zygote    the sandbox backend with a zygote per slot (sandbox-zygote,
 *             zygote-exec): Python runs in a fork of the pre-initialised
 *             interpreter, /bin/true is exec'd by a fork of the zygote
 *   warm      the sandbox backend with sandbox-warm (a sandbox cloned from
 *             the worker ahead of the request)
 *   cold      the sandbox backend building every sandbox for its request
 *   bwrap     bubblewrap with the isolation bench_exec describes (/bin/true)
 * Programs: /bin/true, and Python `print(1)` (bare: `python3 -c 'print(1)'`).
 *
 * Per path: the median, p90 and p99 of one execution's wall time as its
 * caller sees it (the critical path), and the total CPU per execution:
 * this process's own CPU plus the CPU charged to the backend's cgroups
 * (the zygote, the executions, their inits) over a separate run of
 * executions with a pause after each, so whatever a path does ahead of the
 * next request is counted too.  Needs root (the sandbox). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_util.h"
#include "support/backend_settings.h"

extern char **environ;

#define BWRAP "/usr/bin/bwrap"

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

static int64_t tv_us(const struct timeval *t)
{
    return (int64_t)t->tv_sec * 1000000 + t->tv_usec;
}

static int64_t self_cpu_us(void)
{
    struct rusage s, c;
    getrusage(RUSAGE_SELF, &s);
    getrusage(RUSAGE_CHILDREN, &c);
    return tv_us(&s.ru_utime) + tv_us(&s.ru_stime) + tv_us(&c.ru_utime) + tv_us(&c.ru_stime);
}

/* CPU (us) charged to the cgroup parent rel (and below): v2 cpu.stat, v1
 * cpuacct.usage (or cpu,cpuacct); -1 when unknown. */
static int64_t cgroup_cpu_us(const char *rel)
{
    char path[512], buf[4096];
    struct statfs sf;
    bool v2 = statfs("/sys/fs/cgroup", &sf) == 0 && (long)sf.f_type == 0x63677270;
    if (v2)
        snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpu.stat", rel);
    else if (access("/sys/fs/cgroup/cpuacct", F_OK) == 0)
        snprintf(path, sizeof(path), "/sys/fs/cgroup/cpuacct%s/cpuacct.usage", rel);
    else
        snprintf(path, sizeof(path), "/sys/fs/cgroup/cpu,cpuacct%s/cpuacct.usage", rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (v2) {
        const char *p = strstr(buf, "usage_usec ");
        return p ? strtoll(p + 11, NULL, 10) : -1;
    }
    return strtoll(buf, NULL, 10) / 1000;
}

static int64_t argv_once(char *const *av)
{
    int64_t t0 = cf_mono_us();
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 1);
        execve(av[0], av, environ);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return cf_mono_us() - t0;
}

/* bubblewrap as bench_exec runs it (--unshare-all, uid 1000, no caps, a
 * /usr-only root, fresh /proc /dev /tmp). */
static int bwrap_argv(const char *program, char **av, int cap)
{
    static const char *const fixed[] = {BWRAP, "--unshare-all", "--die-with-parent", "--new-session", "--uid", "1000",
                                        "--gid", "1000", "--cap-drop", "ALL", "--clearenv", "--setenv", "PATH",
                                        "/usr/bin:/bin", "--ro-bind", "/usr", "/usr"};
    int n = 0;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        av[n++] = (char *)fixed[i];
    static const char *const top[] = {"/bin", "/lib", "/lib64", "/sbin"};
    static char targets[4][64];
    for (int i = 0; i < 4; i++) {
        char buf[64];
        ssize_t l = readlink(top[i], buf, sizeof(buf) - 1);
        if (n + 4 >= cap)
            return -1;
        if (l > 0) {
            buf[l] = '\0';
            cf_strlcpy(targets[i], buf, sizeof(targets[i]));
            av[n++] = "--symlink";
            av[n++] = targets[i];
            av[n++] = (char *)top[i];
        } else if (access(top[i], F_OK) == 0) {
            av[n++] = "--ro-bind";
            av[n++] = (char *)top[i];
            av[n++] = (char *)top[i];
        }
    }
    static const char *const tail[] = {"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/work",
                                       "--chdir", "/work"};
    for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]); i++)
        av[n++] = (char *)tail[i];
    av[n++] = (char *)program;
    av[n] = NULL;
    return n;
}

typedef struct path {
    const char *name;
    char cg[64];
    void *st;
    const cf_backend_ops *ops;
} path;

static int make_path(path *p, const char *name, const char *root, const char *zygote, bool warm, int uid_base)
{
    p->name = name;
    snprintf(p->cg, sizeof(p->cg), "/cf-bench-zy-%s-%d", name, (int)getpid());
    p->ops = cf_backend_find("sandbox");
    cf_backend_config cfg = {.work_root = root, .python_path = "/usr/bin/python3", .node_path = "/usr/bin/node",
                             .shell_path = "/bin/sh", .exec_path = "/usr/local/bin:/usr/bin:/bin", .slots = 1,
                             .max_files_bytes = 64 << 20, .max_output_file_bytes = 1 << 20,
                             .cgroup_root = p->cg, .run_uid_base = uid_base};
    if (zygote)
        cfg.settings = test_backend_settings((const char *[]){
            "sandbox-warm", warm ? "true" : "false", "zygote", zygote, "zygote-exec", "true", "zygote-preload",
            "json,re,collections,itertools,functools,math,random,datetime,typing,dataclasses", "zygote-max-requests",
            "100000000", NULL});
    else
        cfg.settings = test_backend_settings(
            (const char *[]){"sandbox-warm", warm ? "true" : "false", "sandbox-zygote", "false", NULL});
    cf_backend_caps caps;
    cf_error err;
    if (p->ops->create(&cfg, &p->st, &caps, &err) < 0) {
        fprintf(stderr, "bench_zygote: %s: %s\n", name, err.msg);
        return -1;
    }
    return 0;
}

static int64_t exec_once(path *p, const cf_request *req, const char **sandbox)
{
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "bench"};
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_error err;
    int64_t t0 = cf_mono_us();
    int r = p->ops->execute(p->st, &ctx, req, &res, &err);
    int64_t dt = cf_mono_us() - t0;
    static char last[16];
    cf_strlcpy(last, res.meta.sandbox ? res.meta.sandbox : "", sizeof(last));
    if (sandbox)
        *sandbox = last;
    bool ok = r == 0 && res.status == CF_STATUS_SUCCESS;
    if (!ok)
        fprintf(stderr, "bench_zygote: %s failed: %s %s\n", p->name, r < 0 ? err.msg : cf_status_name(res.status),
                res.reason ? res.reason : "");
    cf_result_clear(&res);
    return ok ? dt : -1;
}

static void report_line(const char *prog, const char *name, int64_t *v, int n, int64_t anchor)
{
    qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
    int64_t m = pct(v, n, 0.5);
    printf("%-8s %-7s n=%d median=%lldus p90=%lldus p99=%lldus", prog, name, n, (long long)m,
           (long long)pct(v, n, 0.9), (long long)pct(v, n, 0.99));
    if (anchor > 0)
        printf(" extra_over_bare=%lldus ratio=%.2f", (long long)(m - anchor), (double)m / (double)anchor);
    printf("\n");
}

int main(int argc, char **argv)
{
    int n = 200;
    const char *zygote = NULL;
    static const struct option opts[] = {{"iterations", required_argument, NULL, 'n'},
                                         {"zygote", required_argument, NULL, 'z'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:z:", opts, NULL)) != -1) {
        switch (c) {
        case 'n': n = (int)strtol(optarg, NULL, 10); break;
        case 'z': zygote = optarg; break;
        default: return 2;
        }
    }
    if (n < 10 || n > 100000) {
        fprintf(stderr, "bench_zygote: --iterations must be 10..100000\n");
        return 2;
    }
    static char zbuf[512];
    if (!zygote) {
        const char *bin = getenv("CF_BINARY_DIR");
        snprintf(zbuf, sizeof(zbuf), "%s/backends/codefleet-zygote", bin ? bin : "build");
        zygote = zbuf;
    }
    if (geteuid() != 0 || access(zygote, X_OK) < 0) {
        fprintf(stderr, "bench_zygote: needs root and the zygote (%s)\n", zygote);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *root = getenv("CF_BENCH_WORK_ROOT") ? getenv("CF_BENCH_WORK_ROOT") : "/tmp";
    path paths[3];
    if (make_path(&paths[0], "zygote", root, zygote, false, 261000) < 0 ||
        make_path(&paths[1], "warm", root, NULL, true, 261010) < 0 ||
        make_path(&paths[2], "cold", root, NULL, false, 261020) < 0)
        return 1;

    cf_request rtrue = {0}, rpy = {0};
    char *av[] = {"/bin/true", NULL};
    rtrue.id = rpy.id = "bench";
    rtrue.language = CF_LANG_COMMAND;
    rtrue.argv = av;
    rtrue.argc = 1;
    rpy.language = CF_LANG_PYTHON;
    cf_bytes_set(&rpy.code, "print(1)\n", 9);
    for (cf_request *r = &rtrue; r; r = r == &rtrue ? &rpy : NULL) {
        r->policy.timeout_us = 20 * 1000000LL;
        r->policy.max_stdout_bytes = 1 << 20;
        r->policy.max_stderr_bytes = 1 << 20;
    }
    /* The zygote comes up in the background. */
    for (int i = 0; i < 200; i++) {
        const char *sb = "";
        if (exec_once(&paths[0], &rpy, &sb) >= 0 && strcmp(sb, "zygote") == 0)
            break;
        if (i == 199) {
            fprintf(stderr, "bench_zygote: the zygote never served\n");
            return 1;
        }
        usleep(100000);
    }
    char *bw_av[64];
    bool bwrap = access(BWRAP, X_OK) == 0 && bwrap_argv("/bin/true", bw_av, 60) > 0;
    char *bare_true[] = {"/bin/true", NULL};
    char *bare_py[] = {"/usr/bin/python3", "-c", "print(1)", NULL};

    struct {
        const char *prog;
        cf_request *req;
        char **bare;
    } progs[2] = {{"true", &rtrue, bare_true}, {"python", &rpy, bare_py}};
    for (int pi = 0; pi < 2; pi++) {
        int64_t *v[5];
        for (int k = 0; k < 5; k++)
            v[k] = calloc((size_t)n, sizeof(int64_t));
        for (int i = 0; i < 10; i++) /* warm-up */
            for (int k = 0; k < 3; k++)
                exec_once(&paths[k], progs[pi].req, NULL);
        int zyg_served = 0;
        for (int i = 0; i < n; i++) {
            v[0][i] = argv_once(progs[pi].bare);
            for (int k = 0; k < 3; k++) {
                const char *sb = "";
                v[k + 1][i] = exec_once(&paths[k], progs[pi].req, &sb);
                if (v[k + 1][i] < 0)
                    return 1;
                if (k == 0)
                    zyg_served += strcmp(sb, "zygote") == 0;
            }
            if (pi == 0 && bwrap)
                v[4][i] = argv_once(bw_av);
            /* Time for the warm path to build its next sandbox: it is
             * meant for slots with a pause between requests. */
            usleep(3000);
        }
        qsort(v[0], (size_t)n, sizeof(int64_t), cmp_i64);
        int64_t bare = pct(v[0], n, 0.5);
        report_line(progs[pi].prog, "bare", v[0], n, 0);
        for (int k = 0; k < 3; k++)
            report_line(progs[pi].prog, paths[k].name, v[k + 1], n, bare);
        if (pi == 0 && bwrap)
            report_line(progs[pi].prog, "bwrap", v[4], n, bare);
        printf("RESULT zygote_latency program=%s bare_us=%lld zygote_us=%lld warm_us=%lld cold_us=%lld%s%lld "
               "zygote_extra_us=%lld zygote_served=%d/%d\n",
               progs[pi].prog, (long long)bare, (long long)pct(v[1], n, 0.5), (long long)pct(v[2], n, 0.5),
               (long long)pct(v[3], n, 0.5), pi == 0 && bwrap ? " bwrap_us=" : " p99_zygote_us=",
               (long long)(pi == 0 && bwrap ? pct(v[4], n, 0.5) : pct(v[1], n, 0.99)),
               (long long)(pct(v[1], n, 0.5) - bare), zyg_served, n);

        /* Total CPU per execution. */
        int ncpu = n / 2 > 20 ? n / 2 : 20;
        double cpu[4];
        for (int k = -1; k < 3; k++) {
            int64_t s0 = self_cpu_us(), g0 = k >= 0 ? cgroup_cpu_us(paths[k].cg) : 0;
            for (int i = 0; i < ncpu; i++) {
                if (k < 0)
                    argv_once(progs[pi].bare);
                else if (exec_once(&paths[k], progs[pi].req, NULL) < 0)
                    return 1;
                usleep(5000);
            }
            int64_t g1 = k >= 0 ? cgroup_cpu_us(paths[k].cg) : 0;
            cpu[k + 1] = (double)(self_cpu_us() - s0 + (g0 >= 0 && g1 >= 0 ? g1 - g0 : 0)) / ncpu;
        }
        printf("RESULT zygote_cpu_per_execution program=%s n=%d bare_us=%.0f zygote_us=%.0f warm_us=%.0f cold_us=%.0f\n",
               progs[pi].prog, ncpu, cpu[0], cpu[1], cpu[2], cpu[3]);
        for (int k = 0; k < 5; k++)
            free(v[k]);
    }
    free(rpy.code.data);
    for (int k = 0; k < 3; k++) {
        paths[k].ops->destroy(paths[k].st);
        char d[256];
        static const char *const roots[] = {"", "/memory", "/pids", "/freezer", "/cpu", "/cpuacct", "/cpu,cpuacct"};
        for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
            snprintf(d, sizeof(d), "/sys/fs/cgroup%s%s", roots[i], paths[k].cg);
            rmdir(d);
        }
    }
    return 0;
}
