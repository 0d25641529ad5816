/* bench_cgroup: what putting a new process into its execution's cgroup
 * costs, by each way the sandbox can do it, against a bare fork+wait in
 * the same run (interleaved, medians):
 *
 *   parent attach   fork; the parent writes the pid to cgroup.procs
 *                   (v1: each controller's) while the child waits; the
 *                   write takes the cgroup threadgroup lock and waits for
 *                   an RCU grace period
 *   self join (v1)  fork; the single-threaded child writes "0" to the
 *                   tasks files it was handed (what the sandbox does on v1)
 *   clone into (v2) clone3 with CLONE_INTO_CGROUP (kernel 5.7+): the child
 *                   is born in the cgroup (what the sandbox does on v2)
 *
 *   bench_cgroup [--iterations N]     (root; a private parent cgroup)
 *
 * Prints one line per way and a RESULT line per way with the extra over
 * bare. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_util.h"
#include "cf_cgroup.h"

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

struct clone_args_v2 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
        cgroup;
};

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

static int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int64_t bare_once(void)
{
    int64_t t0 = cf_mono_us();
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    if (p < 0 || reap(p) < 0)
        return -1;
    return cf_mono_us() - t0;
}

static int64_t parent_attach_once(cf_cgroup *cg)
{
    int go[2];
    if (pipe(go) < 0)
        return -1;
    int64_t t0 = cf_mono_us();
    pid_t p = fork();
    if (p == 0) {
        char c;
        close(go[1]);
        _exit(read(go[0], &c, 1) == 1 ? 0 : 1);
    }
    close(go[0]);
    cf_error err;
    int rc = p < 0 ? -1 : cf_cgroup_attach(cg, p, &err);
    if (p > 0 && write(go[1], "g", 1) != 1)
        rc = -1;
    close(go[1]);
    if (p < 0 || reap(p) < 0 || rc < 0)
        return -1;
    return cf_mono_us() - t0;
}

static int64_t self_join_once(const int *fds, int n)
{
    int64_t t0 = cf_mono_us();
    pid_t p = fork();
    if (p == 0)
        _exit(cf_cgroup_join_self(fds, n) == 0 ? 0 : 1);
    if (p < 0 || reap(p) < 0)
        return -1;
    return cf_mono_us() - t0;
}

static int64_t clone_into_once(int dir_fd)
{
    struct clone_args_v2 ca;
    memset(&ca, 0, sizeof(ca));
    ca.flags = CLONE_INTO_CGROUP;
    ca.exit_signal = SIGCHLD;
    ca.cgroup = (uint64_t)dir_fd;
    int64_t t0 = cf_mono_us();
    long p = syscall(SYS_clone3, &ca, sizeof(ca));
    if (p == 0)
        _exit(0);
    if (p < 0 || reap((pid_t)p) < 0)
        return -1;
    return cf_mono_us() - t0;
}

int main(int argc, char **argv)
{
    int n = 300;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc)
            n = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_cgroup [--iterations N]\n");
            return 2;
        }
    }
    if (n < 10 || n > 1000000) {
        fprintf(stderr, "bench_cgroup: --iterations must be 10..1000000\n");
        return 2;
    }
    char parent[64];
    snprintf(parent, sizeof(parent), "/cf-bench-cg-%d", (int)getpid());
    cf_cgroup_env_opts o = {.parent = parent};
    cf_cgroup_env *env = NULL;
    cf_cgroup *cg = NULL;
    cf_error err;
    if (cf_cgroup_env_new(&o, &env, &err) < 0 || cf_cgroup_new(env, "exec", NULL, &cg, &err) < 0) {
        fprintf(stderr, "bench_cgroup: %s\n", err.msg);
        return 1;
    }
    bool v2 = cf_cgroup_env_version(env) == CF_CGROUP_V2;
    int fds[8], nfds = v2 ? 0 : cf_cgroup_join_fds(cg, fds, 8, &err);
    /* The raw cost of CLONE_INTO_CGROUP, whether or not the sandbox uses
     * it on this kernel (it does not where the probe found children of a
     * once-killed cgroup killed: cf_cgroup_env_clone_into). */
    int dir_fd = v2 ? open(cf_cgroup_path(cg), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (v2)
        printf("cgroup v2: the sandbox %s\n",
               !cf_cgroup_env_clone_into(env) ? "attaches children from the worker (no CLONE_INTO_CGROUP here)"
               : cf_cgroup_env_kill_taints(env)
                   ? "creates children in their cgroup (CLONE_INTO_CGROUP), replacing a cgroup once killed"
                   : "creates children in their cgroup (CLONE_INTO_CGROUP)");
    if (nfds < 0 || (v2 && dir_fd < 0)) {
        fprintf(stderr, "bench_cgroup: cannot open the cgroup for joining\n");
        return 1;
    }
    int64_t *bare = calloc((size_t)n, sizeof(int64_t)), *attach = calloc((size_t)n, sizeof(int64_t)),
            *own = calloc((size_t)n, sizeof(int64_t));
    int rc = 0;
    for (int i = 0; i < 10; i++) /* warm-up */
        bare_once();
    for (int i = 0; i < n && rc == 0; i++) {
        bare[i] = bare_once();
        attach[i] = parent_attach_once(cg);
        own[i] = v2 ? clone_into_once(dir_fd) : self_join_once(fds, nfds);
        if (bare[i] < 0 || attach[i] < 0 || own[i] < 0) {
            fprintf(stderr, "bench_cgroup: iteration %d failed (%s)\n", i, strerror(errno));
            rc = 1;
        }
    }
    if (rc == 0) {
        int64_t mb = median(bare, n), ma = median(attach, n), mo = median(own, n);
        const char *way = v2 ? "clone_into" : "self_join";
        printf("cgroup %s, n=%d: bare fork+wait median %lld us; parent attach %lld us; %s %lld us\n",
               v2 ? "v2" : "v1", n, (long long)mb, (long long)ma, way, (long long)mo);
        printf("RESULT cgroup_attach way=parent_attach cgroup=%s median_us=%lld extra_over_bare_us=%lld ratio=%.2f\n",
               v2 ? "v2" : "v1", (long long)ma, (long long)(ma - mb), (double)ma / (double)mb);
        printf("RESULT cgroup_attach way=%s cgroup=%s median_us=%lld extra_over_bare_us=%lld ratio=%.2f\n", way,
               v2 ? "v2" : "v1", (long long)mo, (long long)(mo - mb), (double)mo / (double)mb);
    }
    while (nfds > 0)
        close(fds[--nfds]);
    if (dir_fd >= 0)
        close(dir_fd);
    cf_cgroup_destroy(cg);
    cf_cgroup_sweep(env, "", &err);
    cf_cgroup_env_destroy(env);
    /* The private parent itself. */
    char dir[256];
    static const char *const roots[] = {"", "/memory", "/pids", "/freezer", "/cpu", "/cpuacct"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
        snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s%s", roots[i], parent);
        rmdir(dir);
    }
    free(bare);
    free(attach);
    free(own);
    return rc;
}
