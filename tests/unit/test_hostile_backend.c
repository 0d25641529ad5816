/* The hostile programs (tests/hostile) through the sandbox backend alone,
 * no broker: the resource, escape and leftover attacks whose stopping
 * depends on the host's cgroups, namespaces and seccomp.  It runs here on
 * the host's hierarchy (v1 on these machines) and, through tests/vm/run.sh,
 * on cgroup v2 kernels, with warm and cold sandboxes.  The fleet-level
 * suite (tests/integration/test_hostile.c) also shows each harm without the
 * sandbox; this driver keeps to what the sandbox must stop.  Needs root. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support/cgroup_host.h"
#include "support/sandbox_test.h"
#include "support/test_time.h"
#include "unit/request_builders.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_util.h"
#include "support/backend_settings.h"

#define SEC 1000000LL
#define MIB (1024LL * 1024LL)
#define UID_BASE 241000 /* apart from the other suites' sandbox uids */

static struct {
    bool cold;
    bool zygote;      /* every program started by a fork of the slot's zygote (zygote-exec) */
    char zygote_path[512];
    bool default_cg;  /* CF_TEST_CGROUP_DEFAULT: the default parent below the worker's own cgroup */
    char root[64];
    char cg_parent[64];
    uint8_t *bin;
    size_t bin_len;
    cf_backend_config cfg;
    cf_backend_set *set;
    const cf_backend *be;
} g;

static int load_binary(void)
{
    const char *dir = getenv("CF_BINARY_DIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/tests/hostile/hostile", dir ? dir : ".");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0 || sb.st_size <= 0) {
        fprintf(stderr, "hostile binary %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    g.bin = malloc((size_t)sb.st_size);
    g.bin_len = (size_t)sb.st_size;
    ssize_t n = g.bin ? read(fd, g.bin, g.bin_len) : -1;
    close(fd);
    return n == (ssize_t)g.bin_len ? 0 : -1;
}

/* The default parent (CF_TEST_CGROUP_DEFAULT): <the worker's cgroup, the
 * subtree's top when it moved into its leaf>/codefleet, as the sandbox
 * chose it (v2: read after the backend moved this process). */
static int default_parent(char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[512], own[512] = "";
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        /* v2 "0::/path"; v1 "N:memory:/path" */
        if (strncmp(line, "0::", 3) == 0 || strstr(line, ":memory:")) {
            cf_strlcpy(own, strrchr(line, ':') + 1, sizeof(own));
            if (strncmp(line, "0::", 3) != 0)
                break;
        }
    }
    if (f)
        fclose(f);
    char *leaf = strrchr(own, '/');
    if (leaf && strcmp(leaf + 1, "codefleet-worker") == 0)
        *leaf = '\0';
    if (strcmp(own, "/") == 0)
        own[0] = '\0';
    snprintf(out, cap, "%s/codefleet", own);
    fprintf(stderr, "default cgroup parent: %s\n", out);
    return 0;
}

static int run_quiet(cf_request *req, cf_result *res);

/* The zygote starts in the background: wait until it serves. */
static bool zygote_up(void)
{
    for (int i = 0; i < 200; i++) {
        cf_request req;
        cf_result res;
        req_init_timeout(&req, CF_LANG_SHELL, "true", 5 * SEC);
        bool up = run_quiet(&req, &res) == 0 && res.meta.sandbox && strcmp(res.meta.sandbox, "zygote") == 0;
        cf_result_clear(&res);
        cf_request_clear(&req);
        if (up)
            return true;
        usleep(100 * 1000);
    }
    fprintf(stderr, "the zygote never served\n");
    return false;
}

static int group_setup(void **state)
{
    (void)state;
    if (geteuid() != 0)
        return 0;
    if (!g.bin && load_binary() < 0)
        return -1;
    cf_strlcpy(g.root, "/tmp/cf-hbtest-XXXXXX", sizeof(g.root));
    if (!mkdtemp(g.root) || chmod(g.root, 0711) < 0)
        return -1;
    snprintf(g.cg_parent, sizeof(g.cg_parent), "/cf-hbtest-%d", (int)getpid());
    memset(&g.cfg, 0, sizeof(g.cfg));
    if (g.zygote)
        g.cfg.settings = test_backend_settings((const char *[]){"sandbox-warm", g.cold ? "false" : "true", "zygote",
                                                                g.zygote_path, "zygote-exec", "true",
                                                                "zygote-max-requests", "1000", NULL});
    else
        g.cfg.settings = test_backend_settings(
            (const char *[]){"sandbox-warm", g.cold ? "false" : "true", "sandbox-zygote", "false", NULL});
    g.cfg.work_root = g.root;
    g.cfg.python_path = "/usr/bin/python3";
    g.cfg.shell_path = "/bin/sh";
    g.cfg.exec_path = "/usr/bin:/bin";
    g.cfg.slots = 1;
    g.cfg.max_files_bytes = 8 << 20;
    g.cfg.max_output_file_bytes = 1 << 16;
    g.cfg.cgroup_root = g.default_cg ? NULL : g.cg_parent;
    g.cfg.run_uid_base = UID_BASE;
    cf_error err;
    if (cf_backend_set_new("sandbox", &g.cfg, &g.set, &err) < 0) {
        fprintf(stderr, "sandbox backend: %s\n", err.msg);
        return -1;
    }
    g.be = cf_backend_set_get(g.set, 0);
    if (g.default_cg && default_parent(g.cg_parent, sizeof(g.cg_parent)) < 0)
        return -1;
    fprintf(stderr, "hostile through the sandbox backend, %s, cgroup %s, parent %s\n",
            g.zygote ? "zygote" : g.cold ? "cold" : "warm", cgh_name(cgh_detect()), g.cg_parent);
    if (g.zygote && !zygote_up())
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (geteuid() != 0)
        return 0;
    cf_backend_set_destroy(g.set);
    g.set = NULL;
    int rc = 0;
    if (cgh_count_cgroups(g.cg_parent) != 0) {
        fprintf(stderr, "cgroups left below %s\n", g.cg_parent);
        rc = -1;
    }
    if (cgh_remove(g.cg_parent) < 0 || rmdir(g.root) < 0)
        rc = -1;
    return rc;
}

#define REQUIRE_ROOT()                                                                                         \
    do {                                                                                                       \
        if (geteuid() != 0)                                                                                    \
            skip();                                                                                            \
    } while (0)

/* ---- running one attack ---------------------------------------------------- */

static void hostile_request(cf_request *req, const char *args)
{
    char code[256];
    snprintf(code, sizeof(code), "chmod 755 hostile && exec ./hostile %s\n", args);
    req_init_timeout(req, CF_LANG_SHELL, code, 5 * SEC);
    req->files = calloc(1, sizeof(cf_file));
    req->files[0].path = strdup("hostile");
    cf_bytes_set(&req->files[0].content, g.bin, g.bin_len);
    req->n_files = 1;
    req->policy.memory_bytes = 64 * MIB;
    req->policy.max_processes = 32;
    req->policy.network = CF_NET_DISABLED;
    req->policy.max_stdout_bytes = 256 * 1024;
    req->policy.max_stderr_bytes = 64 * 1024;
}

/* The slot's zygote itself (in its own cgroup, "<tag>-z<slot>-g<n>"),
 * and any process of it that is still a zygote: not an execution's. */
static bool is_zygote(long pid)
{
    char p[64], comm[32] = "", cg[512] = "";
    snprintf(p, sizeof(p), "/proc/%ld/comm", pid);
    FILE *fp = fopen(p, "r");
    if (!fp)
        return false;
    bool named = fgets(comm, sizeof(comm), fp) && strcmp(comm, "codefleet-zygot\n") == 0;
    fclose(fp);
    snprintf(p, sizeof(p), "/proc/%ld/cgroup", pid);
    fp = fopen(p, "r");
    bool own = false;
    while (named && fp && fgets(cg, sizeof(cg), fp))
        own = own || (strstr(cg, "-z0-g") != NULL);
    if (fp)
        fclose(fp);
    return named && own;
}

static bool not_an_execution(long pid, void *arg)
{
    (void)arg;
    return is_waiting_prepared(pid) || is_zygote(pid);
}

static int run_quiet(cf_request *req, cf_result *res)
{
    memset(res, 0, sizeof(*res));
    cf_error err;
    cf_error_clear(&err);
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "hostile"};
    return g.be->ops->execute(g.be->state, &ctx, req, res, &err);
}

/* Runs the request; afterwards no process of it is left in any cgroup
 * below the test's parent (a slot's next warm sandbox and its zygote
 * aside). */
static void run(cf_request *req, cf_result *res)
{
    memset(res, 0, sizeof(*res));
    cf_error err;
    cf_error_clear(&err);
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "hostile"};
    if (g.be->ops->execute(g.be->state, &ctx, req, res, &err) < 0)
        fail_msg("execute: %s", err.msg);
    /* On the zygote run every attack goes through the zygote, none falls
     * back to another path. */
    if (g.zygote && (!res->meta.sandbox || strcmp(res->meta.sandbox, "zygote") != 0))
        fail_msg("served by '%s', not the zygote", res->meta.sandbox ? res->meta.sandbox : "(none)");
    int left = -1;
    for (int i = 0; i < 200 && left != 0; i++) {
        left = cgh_count_procs(g.cg_parent, not_an_execution, NULL);
        if (left)
            usleep(10000);
    }
    assert_int_equal(left, 0);
    cf_request_clear(req);
}

static const char *out(const cf_result *res)
{
    /* The capture is NUL-terminated past its length by the runner's
     * buffers only by chance: copy to be sure. */
    static char buf[256 * 1024 + 1];
    size_t n = res->stdout_data.len < sizeof(buf) - 1 ? res->stdout_data.len : sizeof(buf) - 1;
    if (n)
        memcpy(buf, res->stdout_data.data, n);
    buf[n] = '\0';
    return buf;
}

static void dump(const cf_result *res, const char *what)
{
    print_message("%s: status %s reason %s signal %d\nstdout:\n%.2000s\nstderr:\n%.*s\n", what,
                  cf_status_name(res->status), res->reason ? res->reason : "-", res->signal, out(res),
                  (int)(res->stderr_data.len < 2000 ? res->stderr_data.len : 2000),
                  res->stderr_data.data ? (const char *)res->stderr_data.data : "");
}

/* ---- the attacks ------------------------------------------------------------ */

static void test_fork_bomb(void **state)
{
    REQUIRE_ROOT();
    cf_request req;
    cf_result res;
    hostile_request(&req, "forkbomb 1000 explode");
    run(&req, &res);
    char v[64];
    const char *forked = line_value(out(&res), "forked", v, sizeof(v));
    /* Contained is what counts: the pids limit held (the bomb then spins
     * until the timeout, or its failed forks' kernel memory reaches the
     * memory limit first). */
    if (!forked || strtol(forked, NULL, 10) >= 32 ||
        (res.status != CF_STATUS_TIMEOUT && res.status != CF_STATUS_FAILED &&
         res.status != CF_STATUS_MEMORY_EXCEEDED)) {
        dump(&res, "fork bomb");
        fail_msg("fork bomb: the pids limit of 32 did not hold (forked: %s)", forked ? forked : "?");
    }
    cf_result_clear(&res);
}

static void memory_case(const char *prog, int64_t limit)
{
    cf_request req;
    cf_result res;
    char args[64];
    snprintf(args, sizeof(args), "%s 256", prog);
    hostile_request(&req, args);
    req.policy.memory_bytes = limit;
    req.policy.timeout_us = 20 * SEC;
    run(&req, &res);
    long reached = progress_mib(out(&res), prog);
    if (res.status != CF_STATUS_MEMORY_EXCEEDED || strstr(out(&res), "done:") || reached * MIB > limit ||
        !res.reason || !strstr(res.reason, "memory")) {
        dump(&res, prog);
        fail_msg("%s: want memory_exceeded within %lld MiB, got %s at %ld MiB", prog, (long long)(limit / MIB),
                 cf_status_name(res.status), reached);
    }
    cf_result_clear(&res);
}

static void test_memory_heap(void **state)
{
    REQUIRE_ROOT();
    memory_case("heap", 64 * MIB);
}

static void test_memory_mmap(void **state)
{
    REQUIRE_ROOT();
    memory_case("mmap", 64 * MIB);
}

/* tmpfs and memfd pages are charged to the execution's cgroup. */
static void test_memory_shm(void **state)
{
    REQUIRE_ROOT();
    memory_case("shm", 40 * MIB);
}

static void test_memory_memfd(void **state)
{
    REQUIRE_ROOT();
    memory_case("memfd", 64 * MIB);
}

/* cpu_time is the whole execution's CPU (the cgroup's), so 16 spinning
 * threads are stopped after about 1 s of CPU in all, not 16. */
static void cpu_case(const char *args)
{
    cf_request req;
    cf_result res;
    hostile_request(&req, args);
    req.policy.cpu_time_us = 1 * SEC;
    req.policy.timeout_us = 30 * SEC;
    run(&req, &res);
    if (res.status != CF_STATUS_TIMEOUT || !res.reason || !strstr(res.reason, "cpu") ||
        res.cpu_time_us > 3 * SEC) {
        dump(&res, args);
        fail_msg("%s: want a cpu time timeout near 1 s, got %s after %lld us of CPU", args,
                 cf_status_name(res.status), (long long)res.cpu_time_us);
    }
    cf_result_clear(&res);
}

static void test_cpu_loop(void **state)
{
    REQUIRE_ROOT();
    cpu_case("cpu");
}

static void test_spinning_threads(void **state)
{
    REQUIRE_ROOT();
    cpu_case("threads 16");
}

static void test_endless_stdout(void **state)
{
    REQUIRE_ROOT();
    cf_request req;
    cf_result res;
    hostile_request(&req, "stdout");
    /* Long enough to fill the cap (in an emulated guest, 10 s). */
    req.policy.timeout_us = 2 * SEC * cf_test_time_scale();
    req.policy.max_stdout_bytes = 64 * 1024;
    run(&req, &res);
    assert_int_equal(res.status, CF_STATUS_TIMEOUT);
    assert_true(res.stdout_truncated);
    assert_int_equal(res.stdout_data.len, 64 * 1024);
    cf_result_clear(&res);
}

/* No kernel or cgroup knob is writable from inside (v2: the cgroup files
 * of the hierarchy, v1: each controller's). */
static void test_proc_sys_and_cgroup_writes(void **state)
{
    REQUIRE_ROOT();
    cf_request req;
    cf_result res;
    hostile_request(&req, "procsys");
    run(&req, &res);
    if (res.status != CF_STATUS_SUCCESS || !has_line(out(&res), "procsys: finished") || strstr(out(&res), ": opened")) {
        dump(&res, "procsys");
        fail_msg("a kernel or cgroup file is writable from the sandbox");
    }
    cf_result_clear(&res);
}

static void test_escape_syscalls(void **state)
{
    REQUIRE_ROOT();
    static const char *const refused[] = {"ptrace_attach", "process_vm_readv", "mount", "unshare_user",
                                          "unshare_mount", "unshare_net", "setns", "clone_newuser",
                                          "clone3_newuser", "chroot", "keyctl", "bpf", "userfaultfd",
                                          "io_uring_setup", "perf_event_open", "open_by_handle_at",
                                          "socket_packet", NULL};
    static const char *const denied[] = {"EPERM", "ENOSYS", "EACCES", "EAFNOSUPPORT", "EPROTONOSUPPORT",
                                         "killed SIGSYS", NULL};
    cf_request req;
    cf_result res;
    hostile_request(&req, "escape");
    run(&req, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    const char *text = out(&res);
    assert_true(has_line(text, "escape: finished"));
    char v[64];
    for (size_t i = 0; refused[i]; i++) {
        const char *r = line_value(text, refused[i], v, sizeof(v));
        bool ok = false;
        for (size_t j = 0; r && denied[j]; j++)
            ok = ok || strcmp(r, denied[j]) == 0;
        if (!ok) {
            dump(&res, "escape");
            fail_msg("%s not denied: %s", refused[i], r ? r : "(no line)");
        }
    }
    for (const char *k = "reboot"; k; k = strcmp(k, "reboot") == 0 ? "init_module" : NULL) {
        const char *r = line_value(text, k, v, sizeof(v));
        if (!r || strcmp(r, "killed SIGSYS") != 0) {
            dump(&res, "escape");
            fail_msg("%s: want killed SIGSYS, got %s", k, r ? r : "(no line)");
        }
    }
    cf_result_clear(&res);
}

/* kill(-1) and kill(pid) from inside reach nothing outside. */
static void test_kill_everything(void **state)
{
    REQUIRE_ROOT();
    pid_t victim = fork();
    if (victim == 0) {
        for (;;)
            pause();
    }
    char args[64];
    snprintf(args, sizeof(args), "killer %d", (int)victim);
    cf_request req;
    cf_result res;
    hostile_request(&req, args);
    run(&req, &res);
    bool alive = kill(victim, 0) == 0;
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    if (res.status != CF_STATUS_SUCCESS || !has_line(out(&res), "survived") || !alive ||
        has_line(out(&res), "kill-target: ok") || has_line(out(&res), "kill-parent: ok")) {
        dump(&res, "killer");
        fail_msg("a process outside the sandbox was signalled (victim alive: %d)", alive);
    }
    cf_result_clear(&res);
}

/* Files, a SysV segment and a daemon left by one execution are not there
 * for the next. */
static void test_leftovers_next_execution(void **state)
{
    REQUIRE_ROOT();
    char args[64];
    cf_request req;
    cf_result res;
    hostile_request(&req, "leave cfhb42");
    run(&req, &res);
    if (res.status != CF_STATUS_SUCCESS || !has_line(out(&res), "left sysv-shm: ok")) {
        dump(&res, "leave");
        fail_msg("leave: the leftovers were not even created inside the sandbox");
    }
    cf_result_clear(&res);
    snprintf(args, sizeof(args), "look cfhb42");
    hostile_request(&req, args);
    run(&req, &res);
    if (res.status != CF_STATUS_SUCCESS || !has_line(out(&res), "look: clean")) {
        dump(&res, "look");
        fail_msg("the next execution saw what the previous one left");
    }
    cf_result_clear(&res);
    assert_int_equal(access("/tmp/hostile-cfhb42", F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_bomb),
        cmocka_unit_test(test_memory_heap),
        cmocka_unit_test(test_memory_mmap),
        cmocka_unit_test(test_memory_shm),
        cmocka_unit_test(test_memory_memfd),
        cmocka_unit_test(test_cpu_loop),
        cmocka_unit_test(test_spinning_threads),
        cmocka_unit_test(test_endless_stdout),
        cmocka_unit_test(test_proc_sys_and_cgroup_writes),
        cmocka_unit_test(test_escape_syscalls),
        cmocka_unit_test(test_kill_everything),
        cmocka_unit_test(test_leftovers_next_execution),
    };
    if (geteuid() != 0)
        fprintf(stderr, "hostile backend suite skipped: not root\n");
    g.default_cg = getenv("CF_TEST_CGROUP_DEFAULT") != NULL;
    const char *bin = getenv("CF_BINARY_DIR");
    snprintf(g.zygote_path, sizeof(g.zygote_path), "%s/backends/codefleet-zygote", bin ? bin : ".");
    /* CF_HOSTILE_MODES: which paths to run (default all three). */
    const char *modes = getenv("CF_HOSTILE_MODES") ? getenv("CF_HOSTILE_MODES") : "warm,cold,zygote";
    int failed = 0;
    if (strstr(modes, "warm")) {
        g.cold = false;
        failed += cmocka_run_group_tests_name("hostile, warm sandbox", tests, group_setup, group_teardown);
    }
    if (strstr(modes, "cold")) {
        g.cold = true;
        failed += cmocka_run_group_tests_name("hostile, cold sandbox", tests, group_setup, group_teardown);
    }
    if (strstr(modes, "zygote")) {
        if (access(g.zygote_path, X_OK) == 0) {
            g.cold = true;
            g.zygote = true;
            failed += cmocka_run_group_tests_name("hostile, zygote", tests, group_setup, group_teardown);
        } else {
            fprintf(stderr, "no zygote at %s: its run is left out\n", g.zygote_path);
        }
    }
    free(g.bin);
    return failed;
}
