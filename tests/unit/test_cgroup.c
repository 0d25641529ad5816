/* Unit tests for sandbox_cgroup: the real hierarchy of the host, v1 or v2
 * (OOM, pids, kill, removal, sweep, tmpfs/shm accounting, cpu quota; on v2
 * also a delegated subtree), and the v1/v2 path and file logic against fake
 * directory trees.  tests/vm/run.sh runs this on cgroup v2 kernels. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_util.h"
#include "cf_cgroup.h"
#include "cf_instance.h"
#include "support/cgroup_host.h"

#define MiB (1024 * 1024)

static char parent_rel[64]; /* per-run parent below each hierarchy root */
static bool have_real;      /* root with a usable hierarchy */

static int group_setup(void **state)
{
    snprintf(parent_rel, sizeof(parent_rel), "/cf-test-%d", (int)getpid());
    cf_cgroup_env_opts o = {.parent = parent_rel};
    cf_cgroup_env *env = NULL;
    cf_error err;
    have_real = geteuid() == 0 && cf_cgroup_env_new(&o, &env, &err) == 0;
    if (!have_real)
        fprintf(stderr, "real cgroup tests skipped: %s\n", geteuid() ? "not root" : err.msg);
    cf_cgroup_env_destroy(env);
    return 0;
}

static int group_teardown(void **state)
{
    if (!have_real)
        return 0;
    cf_cgroup_env_opts o = {.parent = parent_rel};
    cf_cgroup_env *env = NULL;
    cf_error err;
    if (cf_cgroup_env_new(&o, &env, &err) == 0) {
        cf_cgroup_sweep(env, "", &err);
        cf_cgroup_env_destroy(env);
    }
    if (cgh_remove(parent_rel) < 0) {
        fprintf(stderr, "cgroup %s left on %s\n", parent_rel, cgh_name(cgh_detect()));
        return -1;
    }
    return 0;
}

static cf_cgroup_env *real_env(void)
{
    cf_cgroup_env_opts o = {.parent = parent_rel};
    cf_cgroup_env *env = NULL;
    cf_error err;
    if (cf_cgroup_env_new(&o, &env, &err) < 0)
        fail_msg("env: %s", err.msg);
    return env;
}

#define SKIP_UNLESS_REAL()                                                                                     \
    do {                                                                                                       \
        if (!have_real)                                                                                        \
            skip();                                                                                            \
    } while (0)

/* Forks a child that waits on a barrier, attaches it, releases it to run
 * fn; returns the child pid. */
static pid_t spawn_in(cf_cgroup *cg, int (*fn)(void *), void *arg)
{
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char c;
        close(p[1]);
        if (read(p[0], &c, 1) != 1)
            _exit(99);
        _exit(fn(arg));
    }
    close(p[0]);
    cf_error err;
    if (cf_cgroup_attach(cg, pid, &err) < 0) {
        kill(pid, SIGKILL);
        fail_msg("attach: %s", err.msg);
    }
    assert_int_equal(write(p[1], "x", 1), 1);
    close(p[1]);
    return pid;
}

static int wait_status(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return st;
}

static bool path_exists(const char *p)
{
    return access(p, F_OK) == 0;
}

/* ---- the host's hierarchy -------------------------------------------- */

static void read_file(const char *dir, const char *file, char *buf, size_t cap)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    FILE *f = fopen(p, "r");
    if (!f)
        fail_msg("cannot open %s", p);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void test_env_detects_hierarchy(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    const char *dir = cf_cgroup_env_parent_dir(env);
    assert_true(path_exists(dir));
    char want[256], buf[512];
    if (cgh_detect() == CGH_V2) {
        assert_int_equal(cf_cgroup_env_version(env), CF_CGROUP_V2);
        assert_false(cf_cgroup_env_has_freezer(env)); /* v2 kills with cgroup.kill */
        snprintf(want, sizeof(want), "/sys/fs/cgroup%s", parent_rel);
        assert_string_equal(dir, want);
        /* The parent hands memory and pids to the executions' cgroups. */
        read_file(dir, "cgroup.subtree_control", buf, sizeof(buf));
        assert_non_null(strstr(buf, "memory"));
        assert_non_null(strstr(buf, "pids"));
    } else {
        assert_int_equal(cgh_detect(), CGH_V1);
        assert_int_equal(cf_cgroup_env_version(env), CF_CGROUP_V1);
        assert_true(cf_cgroup_env_has_freezer(env));
        snprintf(want, sizeof(want), "/sys/fs/cgroup/memory%s", parent_rel);
        assert_string_equal(dir, want);
    }
    cf_cgroup_env_destroy(env);
    cf_cgroup_env_destroy(NULL);
}

static int sleep_forever(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return 0;
}

static int hog(void *arg)
{
    size_t total = (size_t)(uintptr_t)arg;
    for (size_t done = 0; done < total; done += MiB) {
        char *p = malloc(MiB);
        if (!p)
            return 3;
        memset(p, 0x5a, MiB);
    }
    return 0;
}

static void test_oom_detected(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.memory_bytes = 32 * MiB, .pids_max = 16};
    assert_int_equal(cf_cgroup_new(env, "oom", &lim, &cg, &err), 0);

    pid_t pid = spawn_in(cg, hog, (void *)(uintptr_t)(100 * MiB));
    int st = wait_status(pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);

    cf_cgroup_stats s;
    assert_int_equal(cf_cgroup_stats_read(cg, &s, &err), 0);
    assert_true(s.oom_kills >= 1);
    assert_true(s.memory_limit_hit);
    assert_true(s.memory_peak_bytes > 16 * MiB);
    assert_true(s.memory_peak_bytes <= 32 * MiB);

    char dir[4096];
    cf_strlcpy(dir, cf_cgroup_path(cg), sizeof(dir));
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    assert_false(path_exists(dir));
    assert_int_equal(cf_cgroup_remove(cg, &err), 0); /* idempotent */
    cf_cgroup_destroy(cg);
    cf_cgroup_destroy(NULL);
    cf_cgroup_env_destroy(env);
}

static void test_small_use_is_not_oom(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.memory_bytes = 64 * MiB};
    assert_int_equal(cf_cgroup_new(env, "fine", &lim, &cg, &err), 0);
    pid_t pid = spawn_in(cg, hog, (void *)(uintptr_t)(8 * MiB));
    int st = wait_status(pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    cf_cgroup_stats s;
    assert_int_equal(cf_cgroup_stats_read(cg, &s, &err), 0);
    assert_int_equal(s.oom_kills, 0);
    assert_false(s.memory_limit_hit);
    assert_true(s.memory_peak_bytes >= 8 * MiB);
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

/* tmpfs written in a private mount namespace is charged to the writer. */
static int fill_tmpfs(void *arg)
{
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return 10;
    const char *dir = arg; /* made by the test: no host directory assumed */
    if (mount("tmpfs", dir, "tmpfs", 0, "size=256m") < 0)
        return 11;
    char path[256];
    snprintf(path, sizeof(path), "%s/big", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0600);
    if (fd < 0)
        return 12;
    static char chunk[MiB];
    memset(chunk, 1, sizeof(chunk));
    for (int i = 0; i < 100; i++)
        if (write(fd, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
            return 13;
    return 0;
}

static int fill_memfd(void *arg)
{
    int fd = memfd_create("shm", 0);
    if (fd < 0)
        return 20;
    static char chunk[MiB];
    memset(chunk, 1, sizeof(chunk));
    for (int i = 0; i < 100; i++)
        if (write(fd, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
            return 21;
    return 0;
}

static void test_tmpfs_and_shm_count(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    int (*fns[])(void *) = {fill_tmpfs, fill_memfd};
    char dir[] = "/tmp/cf-cgtest-tmpfs-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < 2; i++) {
        cf_cgroup *cg = NULL;
        cf_error err;
        cf_cgroup_limits lim = {.memory_bytes = 32 * MiB};
        char name[16];
        snprintf(name, sizeof(name), "shm%d", i);
        assert_int_equal(cf_cgroup_new(env, name, &lim, &cg, &err), 0);
        int st = wait_status(spawn_in(cg, fns[i], dir));
        /* Either killed by the OOM killer or the write failed: never 100 MiB stored. */
        assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (WIFEXITED(st))
            assert_true(WEXITSTATUS(st) == 13 || WEXITSTATUS(st) == 21);
        cf_cgroup_stats s;
        assert_int_equal(cf_cgroup_stats_read(cg, &s, &err), 0);
        assert_true(s.memory_limit_hit);
        assert_int_equal(cf_cgroup_remove(cg, &err), 0);
        cf_cgroup_destroy(cg);
    }
    rmdir(dir);
    cf_cgroup_env_destroy(env);
}

static int fork_loop(void *arg)
{
    int made = 0;
    for (int i = 0; i < 200; i++) {
        pid_t p = fork();
        if (p < 0)
            return errno == EAGAIN ? made : 250;
        if (p == 0) {
            pause();
            _exit(0);
        }
        made++;
    }
    return 251; /* never stopped */
}

static void test_pids_limit_stops_fork_loop(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.pids_max = 8};
    assert_int_equal(cf_cgroup_new(env, "forks", &lim, &cg, &err), 0);
    int st = wait_status(spawn_in(cg, fork_loop, NULL));
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 7); /* 8 pids: the looper + 7 children */
    /* The orphans still sleep in the cgroup until killed. */
    assert_int_equal(cf_cgroup_nprocs(cg), 7);
    assert_int_equal(cf_cgroup_kill_all(cg), 0);
    assert_int_equal(cf_cgroup_nprocs(cg), 0);
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

/* A tree that escapes its process group and session: only the cgroup
 * still knows it. */
static int tree(void *arg)
{
    for (int depth = 0; depth < 3; depth++) {
        pid_t p = fork();
        if (p < 0)
            return 1;
        if (p > 0)
            break;
        setsid();
    }
    for (;;)
        pause();
}

static void test_kill_all_kills_tree(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.pids_max = 32};
    assert_int_equal(cf_cgroup_new(env, "tree", &lim, &cg, &err), 0);
    pid_t pid = spawn_in(cg, tree, NULL);
    int64_t deadline = cf_mono_us() + 2000000;
    while (cf_cgroup_nprocs(cg) < 4 && cf_mono_us() < deadline)
        usleep(1000);
    assert_int_equal(cf_cgroup_nprocs(cg), 4);
    cf_cgroup_kill_all_hook(pid, cg);
    int st = wait_status(pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(cf_cgroup_nprocs(cg), 0);
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

static void test_names_and_conflicts(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    cf_cgroup *cg = NULL, *cg2 = NULL;
    cf_error err;
    static const char *const bad[] = {"", "..", ".hidden", "a/b", "sp ace", "tab\t"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cf_cgroup_new(env, bad[i], NULL, &cg, &err), -1);
        assert_int_equal(err.code, CF_E_INVALID);
    }
    cf_cgroup_limits neg = {.memory_bytes = -1};
    assert_int_equal(cf_cgroup_new(env, "neg", &neg, &cg, &err), -1);
    assert_int_equal(cf_cgroup_new(env, "dup", NULL, &cg, &err), 0);
    assert_int_equal(cf_cgroup_new(env, "dup", NULL, &cg2, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    assert_null(cg2);
    assert_true(path_exists(cf_cgroup_path(cg))); /* the failed twin did not remove it */
    assert_int_equal(cf_cgroup_attach(cg, 1, &err), -1);
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

static int sleeper(void *arg)
{
    for (;;)
        pause();
    return 0;
}

static void test_sweep_removes_stale(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    cf_cgroup *stale = NULL, *other = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.pids_max = 4, .memory_bytes = 16 * MiB};
    assert_int_equal(cf_cgroup_new(env, "w1-stale", &lim, &stale, &err), 0);
    assert_int_equal(cf_cgroup_new(env, "w2-keep", &lim, &other, &err), 0);
    pid_t pid = spawn_in(stale, sleeper, NULL);
    char stale_dir[4096];
    cf_strlcpy(stale_dir, cf_cgroup_path(stale), sizeof(stale_dir));
    free(stale); /* simulate a crashed worker: the handle is gone, the cgroup is not */

    /* A fresh env (the restarted worker) sweeps its prefix. */
    cf_cgroup_env *env2 = real_env();
    assert_int_equal(cf_cgroup_sweep(env2, "w1-", &err), 1);
    int st = wait_status(pid);
    assert_true(WIFSIGNALED(st));
    assert_false(path_exists(stale_dir));
    assert_true(path_exists(cf_cgroup_path(other)));
    cf_cgroup_destroy(other);
    cf_cgroup_env_destroy(env2);
    cf_cgroup_env_destroy(env);
}

/* A worker killed with a zygote running leaves its instance directory
 * with the zygotes' shares (zN/m) and a slot's directory; the next
 * worker's sweep removes all of it (it kept z0, z1 and so the whole
 * directory, for ever). */
static void test_sweep_removes_a_dead_instance_dir(void **state)
{
    (void)state;
    char root[] = "/tmp/cf-sweep-XXXXXX";
    assert_non_null(mkdtemp(root));
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0)
        _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    char inst[256], path[320];
    snprintf(inst, sizeof(inst), "%s/cfsb-%d.0", root, (int)dead);
    assert_int_equal(mkdir(inst, 0711), 0);
    const char *dirs[] = {"z0", "z0/m", "z1", "s0"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", inst, dirs[i]);
        assert_int_equal(mkdir(path, 0711), 0);
    }
    /* A live instance (this process's) stays. */
    char live[256];
    snprintf(live, sizeof(live), "%s/cfsb-%d.0", root, (int)getpid());
    assert_int_equal(mkdir(live, 0711), 0);
    cf_instance_swept swept;
    cf_instance_sweep_opts so = {.real_root = root, .prefix = "cfsb-", .log_sub = "test"};
    cf_instance_sweep(&so, &swept);
    assert_int_equal(swept.instances, 1);
    assert_int_equal(swept.dirs, 5); /* z0/m, z0, z1, s0 and the instance's */
    assert_int_equal(swept.cgroups, 0);
    assert_false(path_exists(inst));
    assert_true(path_exists(live));
    assert_int_equal(rmdir(live), 0);
    assert_int_equal(rmdir(root), 0);
}

static int spin(void *arg)
{
    int64_t end = cf_mono_us() + (int64_t)(uintptr_t)arg;
    volatile unsigned long x = 0;
    while (cf_mono_us() < end)
        x++;
    return 0;
}

/* The quota is written where the hierarchy keeps it (v1 cpu.cfs_quota_us,
 * v2 cpu.max) and holds: a spinning process is throttled to about its
 * share of the wall time. */
static void test_cpu_quota(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    if (!cf_cgroup_env_has_cpu(env)) {
        cf_cgroup_env_destroy(env);
        skip();
    }
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.cpu_quota_us = 20000, .cpu_period_us = 100000};
    assert_int_equal(cf_cgroup_new(env, "cpu", &lim, &cg, &err), 0);
    char dir[4096], buf[256] = "";
    bool v2 = cgh_detect() == CGH_V2;
    if (v2) {
        cf_strlcpy(dir, cf_cgroup_path(cg), sizeof(dir));
        read_file(dir, "cpu.max", buf, sizeof(buf));
        assert_string_equal(buf, "20000 100000\n");
    } else {
        snprintf(dir, sizeof(dir), "/sys/fs/cgroup/cpu%s/cpu", parent_rel);
        read_file(dir, "cpu.cfs_quota_us", buf, sizeof(buf));
        assert_string_equal(buf, "20000\n");
        read_file(dir, "cpu.cfs_period_us", buf, sizeof(buf));
        assert_string_equal(buf, "100000\n");
    }
    /* Enforced: 600 ms of spinning gets about 120 ms of CPU, and the
     * kernel counts the throttled periods.  On a machine so busy that the
     * spinner never gets its 20 ms within a period it is not throttled
     * (CI once saw that at a load of 15 on 2 cores): spin again, up to 30
     * times, until the kernel says it throttled. */
    int64_t wall = 600000;
    long throttled = 0;
    for (int round = 1; round <= 30 && throttled == 0; round++) {
        int st = wait_status(spawn_in(cg, spin, (void *)(uintptr_t)wall));
        assert_true(WIFEXITED(st));
        int64_t used = cf_cgroup_cpu_usage_us(cg);
        if (used >= 0) /* v1 without cpuacct beside cpu cannot say */
            assert_true(used < round * wall / 2);
        read_file(dir, "cpu.stat", buf, sizeof(buf));
        char *t = strstr(buf, "nr_throttled ");
        assert_non_null(t);
        throttled = strtol(t + 13, NULL, 10);
    }
    assert_true(throttled > 0);

    cf_cgroup_limits none = {0};
    assert_int_equal(cf_cgroup_set_limits(cg, &none, &err), 0);
    read_file(dir, v2 ? "cpu.max" : "cpu.cfs_quota_us", buf, sizeof(buf));
    assert_string_equal(buf, v2 ? "max 100000\n" : "-1\n");
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    assert_false(path_exists(dir));
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

/* A per-execution peak on a reused cgroup: the kernel can reset it on v1
 * and on v2 from 6.12 (memory.peak written through an open file); on older
 * v2 kernels the env says so and the sandbox falls back to RSS. */
static void test_peak_reset(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    bool want = cgh_expect_cgroup_peak();
    assert_int_equal(cf_cgroup_env_has_peak(env), want);
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.memory_bytes = 128 * MiB};
    assert_int_equal(cf_cgroup_new(env, "peak", &lim, &cg, &err), 0);
    assert_int_equal(cf_cgroup_peak_reset(cg), want ? 0 : -1);
    assert_int_equal(wait_status(spawn_in(cg, hog, (void *)(uintptr_t)(40 * MiB))), 0);
    if (want) {
        assert_true(cf_cgroup_memory_peak(cg) >= 40 * MiB);
        /* A new execution starts a new peak. */
        assert_int_equal(cf_cgroup_peak_reset(cg), 0);
        assert_int_equal(wait_status(spawn_in(cg, hog, (void *)(uintptr_t)(4 * MiB))), 0);
        int64_t p = cf_cgroup_memory_peak(cg);
        assert_true(p >= 4 * MiB && p < 20 * MiB);
    } else {
        assert_int_equal(cf_cgroup_memory_peak(cg), -1);
    }
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

/* v2 in production: the worker is started in a delegated subtree (a
 * systemd unit with Delegate=yes, a Kubernetes pod) together with another
 * process, and uses the default parent.  It must move both into a leaf
 * before it can enable controllers (no internal processes), then run an
 * execution whose memory limit holds.  The worker here is a forked child
 * that reports by exit code. */
static int delegated_worker(void)
{
    cf_cgroup_env *env = NULL, *again = NULL;
    cf_error err;
    cf_cgroup_env_opts o = {.parent = NULL};
    if (cf_cgroup_env_new(&o, &env, &err) < 0) {
        fprintf(stderr, "delegated env: %s\n", err.msg);
        return strstr(err.msg, "not delegated") ? 10 : 19; /* 10: refused for the right reason */
    }
    char want[256], own[512] = "";
    snprintf(want, sizeof(want), "/sys/fs/cgroup/cf-deleg-%d/codefleet", (int)getppid());
    if (strcmp(cf_cgroup_env_parent_dir(env), want) != 0) {
        fprintf(stderr, "parent %s, want %s\n", cf_cgroup_env_parent_dir(env), want);
        return 11;
    }
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f || !fgets(own, sizeof(own), f))
        return 12;
    fclose(f);
    snprintf(want, sizeof(want), "0::/cf-deleg-%d/" CF_CGROUP_WORKER_LEAF "\n", (int)getppid());
    if (strcmp(own, want) != 0) {
        fprintf(stderr, "own cgroup %s", own);
        return 13;
    }
    /* A second backend in the same worker finds the same layout. */
    if (cf_cgroup_env_new(&o, &again, &err) < 0 ||
        strcmp(cf_cgroup_env_parent_dir(again), cf_cgroup_env_parent_dir(env)) != 0)
        return 14;
    cf_cgroup_env_destroy(again);
    cf_cgroup *cg = NULL;
    cf_cgroup_limits lim = {.memory_bytes = 32 * MiB, .pids_max = 16};
    if (cf_cgroup_new(env, "exec", &lim, &cg, &err) < 0) {
        fprintf(stderr, "delegated cgroup: %s\n", err.msg);
        return 15;
    }
    int p[2];
    if (pipe(p) < 0)
        return 16;
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        close(p[1]);
        _exit(read(p[0], &c, 1) == 1 ? hog((void *)(uintptr_t)(100 * MiB)) : 99);
    }
    close(p[0]);
    if (pid < 0 || cf_cgroup_attach(cg, pid, &err) < 0 || write(p[1], "x", 1) != 1)
        return 16;
    close(p[1]);
    int st = wait_status(pid);
    cf_cgroup_stats s;
    if (!WIFSIGNALED(st) || cf_cgroup_stats_read(cg, &s, &err) < 0 || s.oom_kills < 1)
        return 17;
    if (cf_cgroup_remove(cg, &err) < 0)
        return 18;
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
    return 0;
}

/* One round: a sibling (the unit's init, say tini) and the worker, both
 * placed in the subtree's top before the worker starts.  Returns the
 * worker's wait status (-1: the round could not be set up); *top_procs
 * gets what is left in the top.  Asserts nothing itself, so both
 * processes are always gone when it returns. */
static int delegated_round(const char *top, char *top_procs, size_t cap, char *subtree, size_t scap)
{
    char procs[192], pidbuf[32];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", top);
    int go[2];
    if (pipe(go) < 0)
        return -1;
    fflush(NULL);
    pid_t sibling = fork();
    if (sibling == 0) {
        for (;;)
            pause();
    }
    pid_t worker = fork();
    if (worker == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(99);
        _exit(delegated_worker());
    }
    close(go[0]);
    bool placed = sibling > 0 && worker > 0;
    for (int i = 0; placed && i < 2; i++) {
        FILE *f = fopen(procs, "w");
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)(i ? worker : sibling));
        placed = f && fputs(pidbuf, f) >= 0;
        if (f && fclose(f) != 0)
            placed = false;
    }
    int st = -1;
    if (placed && write(go[1], "x", 1) == 1)
        st = wait_status(worker);
    close(go[1]);
    read_file(top, "cgroup.procs", top_procs, cap);
    read_file(top, "cgroup.subtree_control", subtree, scap);
    if (sibling > 0) {
        kill(sibling, SIGKILL);
        wait_status(sibling);
    }
    if (worker > 0 && st == -1) {
        kill(worker, SIGKILL);
        wait_status(worker);
    }
    return st;
}

static void test_v2_delegated_subtree(void **state)
{
    SKIP_UNLESS_REAL();
    if (cgh_detect() != CGH_V2) {
        fprintf(stderr, "v2 only (this host: %s); tests/vm/run.sh runs it on v2 kernels\n", cgh_name(cgh_detect()));
        skip();
    }
    char svc[64], top[128], procs_left[512], subtree[512];
    snprintf(svc, sizeof(svc), "/cf-deleg-%d", (int)getpid());
    snprintf(top, sizeof(top), "/sys/fs/cgroup%s", svc);
    assert_int_equal(mkdir(top, 0755), 0);

    /* Not marked as delegated: another process shares the worker's cgroup
     * (a login session, say), so the worker must not move it: refused
     * with a reason (exit 10), the sibling left where it was. */
    int st = delegated_round(top, procs_left, sizeof(procs_left), subtree, sizeof(subtree));
    bool refused = WIFEXITED(st) && WEXITSTATUS(st) == 10;
    bool sibling_stayed = procs_left[0] != '\0';

    /* Marked as systemd marks a unit with Delegate=yes: both move to the
     * leaf, the controllers are enabled, an execution's limit holds. */
    int mark = setxattr(top, "trusted.delegate", "1", 1, 0);
    int st2 = mark == 0 ? delegated_round(top, procs_left, sizeof(procs_left), subtree, sizeof(subtree)) : -1;
    assert_int_equal(cgh_remove(svc), 0);
    assert_true(refused);
    assert_true(sibling_stayed);
    assert_int_equal(mark, 0);
    assert_true(WIFEXITED(st2));
    assert_int_equal(WEXITSTATUS(st2), 0);
    assert_string_equal(procs_left, ""); /* the sibling went to the leaf too */
    assert_non_null(strstr(subtree, "memory"));
    assert_non_null(strstr(subtree, "pids"));
}

/* One child created in the cgroup at fd (clone3 CLONE_INTO_CGROUP) that
 * only exits: 1 lived, 0 killed, -1 refused. */
static int clone_into_child(int fd)
{
    struct {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
            cgroup;
    } ca;
    memset(&ca, 0, sizeof(ca));
    ca.flags = 0x200000000ULL;
    ca.exit_signal = SIGCHLD;
    ca.cgroup = (uint64_t)fd;
    long pid = syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid == 0)
        _exit(0);
    if (pid < 0)
        return -1;
    int st = wait_status((pid_t)pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 1 : 0;
}

/* v2: what the env says about clone3 CLONE_INTO_CGROUP holds on this
 * kernel.  A fresh cgroup takes children; after cgroup.kill some kernels
 * kill every child created in it (6.12.95, 6.18), others do not (6.1):
 * where they do, the cgroup stops offering its directory fd (the sandbox
 * then replaces it), where they do not it keeps offering it. */
static void test_clone_into_after_kill(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    if (cf_cgroup_env_version(env) != CF_CGROUP_V2) {
        assert_false(cf_cgroup_env_clone_into(env));
        assert_false(cf_cgroup_env_kill_taints(env));
        cf_cgroup_env_destroy(env);
        fprintf(stderr, "v2 only (this host: %s); tests/vm/run.sh runs it on v2 kernels\n", cgh_name(cgh_detect()));
        skip();
    }
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_cgroup_limits lim = {.memory_bytes = 64 * MiB, .pids_max = 8};
    assert_int_equal(cf_cgroup_new(env, "cinto", &lim, &cg, &err), 0);
    char path[4200];
    snprintf(path, sizeof(path), "%s", cf_cgroup_path(cg));
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    int fresh = clone_into_child(fd);
    assert_int_equal(fresh == 1, cf_cgroup_env_clone_into(env));
    assert_int_equal(fresh == -1, !cgh_kernel_at_least(5, 7));
    if (fresh == 1)
        assert_true(cf_cgroup_dir_fd(cg) >= 0);
    /* A process in it, so the kill really uses cgroup.kill (an empty
     * cgroup is not written to). */
    pid_t sleeper = spawn_in(cg, sleep_forever, NULL);
    assert_true(sleeper > 0);
    assert_int_equal(cf_cgroup_nprocs(cg), 1);
    assert_int_equal(cf_cgroup_kill_all(cg), 0);
    int sst = wait_status(sleeper);
    assert_true(WIFSIGNALED(sst) && WTERMSIG(sst) == SIGKILL);
    bool has_kill = cgh_kernel_at_least(5, 14);
    if (fresh == 1 && has_kill) {
        int after = clone_into_child(fd);
        fprintf(stderr, "kernel: a child created in a killed cgroup %s; env: kill taints %s\n",
                after == 1 ? "lives" : "is killed", cf_cgroup_env_kill_taints(env) ? "yes" : "no");
        assert_int_equal(after != 1, cf_cgroup_env_kill_taints(env));
        assert_int_equal(cf_cgroup_fresh_needed(cg), after != 1);
        if (after != 1)
            assert_int_equal(cf_cgroup_dir_fd(cg), -1);
        else
            assert_true(cf_cgroup_dir_fd(cg) >= 0);
    } else {
        assert_false(cf_cgroup_env_kill_taints(env));
    }
    close(fd);
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

/* ---- fake trees ------------------------------------------------------- */

static void put(const char *dir, const char *file, const char *content)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static void expect(const char *dir, const char *file, const char *content)
{
    char p[4096], buf[256] = "";
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    FILE *f = fopen(p, "r");
    if (!f)
        fail_msg("missing %s", p);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_string_equal(buf, content);
}

static void rm_rf(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_v2_fake_tree(void **state)
{
    char root[] = "/tmp/cf-cgv2-XXXXXX";
    assert_non_null(mkdtemp(root));
    char d[4096];
    /* The worker lives in /svc/cf.service/worker (a leaf); executions go
     * below /svc/cf.service/codefleet. */
    put(root, "proc_cgroup", "0::/svc/cf.service/worker\n");
    snprintf(d, sizeof(d), "%s/svc/cf.service/codefleet", root);
    char mk[4400];
    snprintf(mk, sizeof(mk), "mkdir -p %s", d);
    assert_int_equal(system(mk), 0);
    char svc[4096];
    snprintf(svc, sizeof(svc), "%s/svc/cf.service", root);
    put(root, "cgroup.controllers", "cpuset cpu io memory hugetlb pids\n");
    char mid[4096];
    snprintf(mid, sizeof(mid), "%s/svc", root);
    put(mid, "cgroup.controllers", "cpuset cpu io memory pids\n");
    put(svc, "cgroup.controllers", "cpuset cpu io memory pids\n");
    put(d, "cgroup.controllers", "cpu memory pids\n");

    char proc[4096];
    snprintf(proc, sizeof(proc), "%s/proc_cgroup", root);
    cf_cgroup_env_opts o = {.version = CF_CGROUP_V2, .mount_dir = root, .parent = "/svc/cf.service/codefleet",
                            .proc_self_cgroup = proc, .fake_fs = true};
    cf_cgroup_env *env = NULL;
    cf_error err;
    if (cf_cgroup_env_new(&o, &env, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cf_cgroup_env_version(env), CF_CGROUP_V2);
    assert_string_equal(cf_cgroup_env_parent_dir(env), d);
    assert_true(cf_cgroup_env_has_cpu(env));
    assert_false(cf_cgroup_env_has_freezer(env));
    /* Not below the worker's own cgroup: enabling starts at the root. */
    expect(root, "cgroup.subtree_control", "+memory +pids +cpu");
    expect(mid, "cgroup.subtree_control", "+memory +pids +cpu");
    expect(svc, "cgroup.subtree_control", "+memory +pids +cpu");
    expect(d, "cgroup.subtree_control", "+memory +pids +cpu");

    cf_cgroup *cg = NULL;
    cf_cgroup_limits lim = {.memory_bytes = 32 * MiB, .pids_max = 10, .cpu_quota_us = 50000};
    if (cf_cgroup_new(env, "exec-1", &lim, &cg, &err) < 0)
        fail_msg("%s", err.msg);
    char e[4200];
    snprintf(e, sizeof(e), "%s/exec-1", d);
    assert_string_equal(cf_cgroup_path(cg), e);
    expect(e, "memory.max", "33554432");
    expect(e, "memory.swap.max", "0");
    expect(e, "memory.oom.group", "1");
    expect(e, "pids.max", "10");
    expect(e, "cpu.max", "50000 100000");
    assert_int_equal(cf_cgroup_attach(cg, 4242, &err), 0);
    expect(e, "cgroup.procs", "4242");

    put(e, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 1\n");
    put(e, "memory.peak", "33550000\n");
    put(e, "pids.current", "3\n");
    cf_cgroup_stats s;
    assert_int_equal(cf_cgroup_stats_read(cg, &s, &err), 0);
    assert_int_equal(s.oom_kills, 2);
    assert_true(s.memory_limit_hit);
    assert_int_equal(s.memory_peak_bytes, 33550000);
    assert_int_equal(s.pids_current, 3);

    put(e, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
    snprintf(mk, sizeof(mk), "%s/memory.peak", e);
    unlink(mk); /* old kernels: no memory.peak */
    assert_int_equal(cf_cgroup_stats_read(cg, &s, &err), 0);
    assert_int_equal(s.oom_kills, 0);
    assert_false(s.memory_limit_hit);
    assert_int_equal(s.memory_peak_bytes, -1);

    put(e, "cgroup.procs", "");
    assert_int_equal(cf_cgroup_kill_all(cg), 0);
    expect(e, "cgroup.kill", "1");
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    assert_false(path_exists(e));
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);

    /* Default parent: the worker's own cgroup + /codefleet; the worker's
     * cgroup is not the root, so enabling starts there. */
    put(root, "proc_cgroup", "0::/svc/cf.service\n");
    snprintf(d, sizeof(d), "%s/svc/cf.service/codefleet", root);
    put(d, "cgroup.subtree_control", "");
    put(root, "cgroup.subtree_control", "untouched");
    cf_cgroup_env_opts o2 = {.version = CF_CGROUP_V2, .mount_dir = root, .proc_self_cgroup = proc, .fake_fs = true};
    if (cf_cgroup_env_new(&o2, &env, &err) < 0)
        fail_msg("%s", err.msg);
    assert_string_equal(cf_cgroup_env_parent_dir(env), d);
    expect(root, "cgroup.subtree_control", "untouched");
    expect(d, "cgroup.subtree_control", "+memory +pids +cpu");
    cf_cgroup_env_destroy(env);

    /* No memory controller delegated: unsupported, said so. */
    put(svc, "cgroup.controllers", "cpu pids\n");
    assert_int_equal(cf_cgroup_env_new(&o2, &env, &err), -1);
    assert_int_equal(err.code, CF_E_UNSUPPORTED);
    rm_rf(root);
}

static void test_v1_fake_tree(void **state)
{
    char root[] = "/tmp/cf-cgv1-XXXXXX";
    assert_non_null(mkdtemp(root));
    char mk[4200];
    snprintf(mk, sizeof(mk), "mkdir -p %s/memory %s/pids %s/freezer", root, root, root);
    assert_int_equal(system(mk), 0);
    put(root, "proc_cgroup", "9:name=systemd:/\n8:pids:/b\n6:freezer:/\n4:memory:/a/x\n0::/\n");
    char proc[4096];
    snprintf(proc, sizeof(proc), "%s/proc_cgroup", root);
    cf_cgroup_env_opts o = {.version = CF_CGROUP_V1, .mount_dir = root, .proc_self_cgroup = proc, .fake_fs = true};
    cf_cgroup_env *env = NULL;
    cf_error err;
    if (cf_cgroup_env_new(&o, &env, &err) < 0)
        fail_msg("%s", err.msg);
    char want[4200];
    snprintf(want, sizeof(want), "%s/memory/a/x/codefleet", root);
    assert_string_equal(cf_cgroup_env_parent_dir(env), want);
    assert_false(cf_cgroup_env_has_cpu(env)); /* not mounted in the fake tree */
    assert_true(cf_cgroup_env_has_freezer(env));

    cf_cgroup *cg = NULL;
    cf_cgroup_limits lim = {.memory_bytes = 64 * MiB, .pids_max = 5};
    assert_int_equal(cf_cgroup_new(env, "e", &lim, &cg, &err), 0);
    char e[4300];
    snprintf(e, sizeof(e), "%s/e", want);
    expect(e, "memory.limit_in_bytes", "67108864");
    expect(e, "memory.memsw.limit_in_bytes", "67108864");
    snprintf(e, sizeof(e), "%s/pids/b/codefleet/e", root);
    expect(e, "pids.max", "5");
    assert_int_equal(cf_cgroup_attach(cg, 777, &err), 0);
    expect(e, "cgroup.procs", "777");
    snprintf(e, sizeof(e), "%s/freezer/codefleet/e", root);
    expect(e, "cgroup.procs", "777");
    /* A cpu quota without a cpu hierarchy is refused, not ignored. */
    cf_cgroup *cg2 = NULL;
    cf_cgroup_limits cpu = {.cpu_quota_us = 10000};
    assert_int_equal(cf_cgroup_new(env, "c", &cpu, &cg2, &err), -1);
    assert_int_equal(err.code, CF_E_UNSUPPORTED);

    snprintf(e, sizeof(e), "%s/e", want);
    put(e, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
    put(e, "memory.failcnt", "12\n");
    put(e, "memory.max_usage_in_bytes", "67100000\n");
    cf_cgroup_stats s;
    assert_int_equal(cf_cgroup_stats_read(cg, &s, &err), 0);
    assert_int_equal(s.oom_kills, 1);
    assert_true(s.memory_limit_hit);
    assert_int_equal(s.memory_peak_bytes, 67100000);
    cf_cgroup_destroy(cg);
    assert_false(path_exists(e));
    cf_cgroup_env_destroy(env);

    /* Missing pids hierarchy: unsupported. */
    snprintf(mk, sizeof(mk), "rm -rf %s/pids", root);
    assert_int_equal(system(mk), 0);
    assert_int_equal(cf_cgroup_env_new(&o, &env, &err), -1);
    assert_int_equal(err.code, CF_E_UNSUPPORTED);
    rm_rf(root);
}

/* A worker's own directory (issue 30 part 3): its cgroups go below
 * cfw-<ns>-<pid>-<start>, which alone gets the worker's bound; dead workers' directories
 * next to it are swept with what is below them, live ones never. */
static bool dead_200(const char *name, void *arg)
{
    (void)arg;
    return strcmp(name, "cfw-200") == 0 || strcmp(name, "cfw-100") == 0 || strcmp(name, "other") == 0;
}

static void test_v2_own_dir(void **state)
{
    (void)state;
    char root[] = "/tmp/cf-cgown-XXXXXX";
    assert_non_null(mkdtemp(root));
    char base[1024], own[1100], dead[1100], live[1100], nested[1200], mk[6000];
    snprintf(base, sizeof(base), "%s/svc/codefleet", root);
    snprintf(own, sizeof(own), "%s/cfw-100", base);
    snprintf(dead, sizeof(dead), "%s/cfw-200", base);
    snprintf(live, sizeof(live), "%s/cfw-300", base);
    snprintf(nested, sizeof(nested), "%s/x-1", dead);
    snprintf(mk, sizeof(mk), "mkdir -p %s %s %s %s %s/other", own, dead, live, nested, base);
    assert_int_equal(system(mk), 0);
    put(root, "proc_cgroup", "0::/svc/worker\n");
    const char *const dirs[] = {root, base, own};
    for (size_t i = 0; i < 3; i++)
        put(dirs[i], "cgroup.controllers", "cpu memory pids\n");
    char svc[4096];
    snprintf(svc, sizeof(svc), "%s/svc", root);
    put(svc, "cgroup.controllers", "cpu memory pids\n");
    put(nested, "cgroup.procs", "");
    char proc[4200];
    snprintf(proc, sizeof(proc), "%s/proc_cgroup", root);

    /* No own directory: nothing to bound (the parent may be shared). */
    cf_cgroup_env_opts o = {.version = CF_CGROUP_V2, .mount_dir = root, .parent = "/svc/codefleet",
                            .proc_self_cgroup = proc, .fake_fs = true};
    cf_cgroup_env *env = NULL;
    cf_error err;
    if (cf_cgroup_env_new(&o, &env, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cf_cgroup_env_bound(env, 1 << 20, 10, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    cf_cgroup_env_destroy(env);

    o.own_dir = "../x";
    assert_int_equal(cf_cgroup_env_new(&o, &env, &err), -1);
    o.own_dir = "cfw-100";
    if (cf_cgroup_env_new(&o, &env, &err) < 0)
        fail_msg("%s", err.msg);
    assert_string_equal(cf_cgroup_env_parent_dir(env), own);
    expect(base, "cgroup.subtree_control", "+memory +pids +cpu");
    expect(own, "cgroup.subtree_control", "+memory +pids +cpu");

    assert_int_equal(cf_cgroup_env_bound(env, 64 * MiB, 50, &err), 0);
    expect(own, "memory.max", "67108864");
    expect(own, "memory.swap.max", "0");
    expect(own, "pids.max", "50");
    put(own, "memory.current", "12345\n");
    put(own, "pids.current", "7\n");
    int64_t mem = 0, pids = 0;
    cf_cgroup_env_usage(env, &mem, &pids);
    assert_int_equal(mem, 12345);
    assert_int_equal(pids, 7);

    /* An execution's cgroup goes below the own directory. */
    cf_cgroup *cg = NULL;
    if (cf_cgroup_new(env, "exec-1", NULL, &cg, &err) < 0)
        fail_msg("%s", err.msg);
    char e[4300];
    snprintf(e, sizeof(e), "%s/exec-1", own);
    assert_string_equal(cf_cgroup_path(cg), e);
    cf_cgroup_destroy(cg);

    /* The sweep: the dead one goes with its execution's cgroup; its own,
     * a live one and a name without the prefix stay, whatever dead says. */
    assert_int_equal(cf_cgroup_sweep_own_dirs(env, "cfw-", dead_200, NULL, &err), 1);
    assert_false(path_exists(dead));
    assert_true(path_exists(own));
    assert_true(path_exists(live));
    char other[4200];
    snprintf(other, sizeof(other), "%s/other", base);
    assert_true(path_exists(other));

    cf_cgroup_env_remove_own(env);
    assert_false(path_exists(own));
    cf_cgroup_env_destroy(env);
    rm_rf(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_own_dir),
        cmocka_unit_test(test_env_detects_hierarchy),
        cmocka_unit_test(test_oom_detected),
        cmocka_unit_test(test_small_use_is_not_oom),
        cmocka_unit_test(test_tmpfs_and_shm_count),
        cmocka_unit_test(test_pids_limit_stops_fork_loop),
        cmocka_unit_test(test_kill_all_kills_tree),
        cmocka_unit_test(test_names_and_conflicts),
        cmocka_unit_test(test_sweep_removes_stale),
        cmocka_unit_test(test_sweep_removes_a_dead_instance_dir),
        cmocka_unit_test(test_cpu_quota),
        cmocka_unit_test(test_peak_reset),
        cmocka_unit_test(test_v2_delegated_subtree),
        cmocka_unit_test(test_clone_into_after_kill),
        cmocka_unit_test(test_v2_fake_tree),
        cmocka_unit_test(test_v1_fake_tree),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
