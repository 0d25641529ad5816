/* Unit tests for sandbox_cgroup: real cgroup v1 here (OOM, pids, kill,
 * removal, sweep, tmpfs/shm accounting) and the v1/v2 path and file logic
 * against fake directory trees. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "cf_util.h"
#include "sandbox_cgroup.h"

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
    static const char *const ctrls[] = {"memory", "pids", "freezer", "cpu"};
    for (size_t i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof(p), "/sys/fs/cgroup/%s%s", ctrls[i], parent_rel);
        rmdir(p);
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

/* ---- real v1 ---------------------------------------------------------- */

static void test_env_detects_v1(void **state)
{
    SKIP_UNLESS_REAL();
    cf_cgroup_env *env = real_env();
    assert_int_equal(cf_cgroup_env_version(env), CF_CGROUP_V1);
    assert_true(cf_cgroup_env_has_freezer(env));
    assert_non_null(strstr(cf_cgroup_env_parent_dir(env), "/memory/cf-test-"));
    assert_true(path_exists(cf_cgroup_env_parent_dir(env)));
    cf_cgroup_env_destroy(env);
    cf_cgroup_env_destroy(NULL);
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
    if (mount("tmpfs", "/mnt", "tmpfs", 0, "size=256m") < 0)
        return 11;
    int fd = open("/mnt/big", O_WRONLY | O_CREAT, 0600);
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
    for (int i = 0; i < 2; i++) {
        cf_cgroup *cg = NULL;
        cf_error err;
        cf_cgroup_limits lim = {.memory_bytes = 32 * MiB};
        char name[16];
        snprintf(name, sizeof(name), "shm%d", i);
        assert_int_equal(cf_cgroup_new(env, name, &lim, &cg, &err), 0);
        int st = wait_status(spawn_in(cg, fns[i], NULL));
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

static void test_cpu_quota_v1(void **state)
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
    char path[4096], buf[64] = "";
    snprintf(path, sizeof(path), "/sys/fs/cgroup/cpu%s/cpu/cpu.cfs_quota_us", parent_rel);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "20000\n");
    assert_int_equal(cf_cgroup_remove(cg, &err), 0);
    assert_false(path_exists(path));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_detects_v1),
        cmocka_unit_test(test_oom_detected),
        cmocka_unit_test(test_small_use_is_not_oom),
        cmocka_unit_test(test_tmpfs_and_shm_count),
        cmocka_unit_test(test_pids_limit_stops_fork_loop),
        cmocka_unit_test(test_kill_all_kills_tree),
        cmocka_unit_test(test_names_and_conflicts),
        cmocka_unit_test(test_sweep_removes_stale),
        cmocka_unit_test(test_cpu_quota_v1),
        cmocka_unit_test(test_v2_fake_tree),
        cmocka_unit_test(test_v1_fake_tree),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
