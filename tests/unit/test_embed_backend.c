/* The `wasm` and `js` backends through the backend API, the way the worker
 * drives them (needs root: the runtime helpers are confined like sandbox
 * executions).  Hostile guests: each limit is shown stopping a program,
 * the helper replaced where it had to be, and the next request served.
 *
 * Guest modules are built by tests/embed (clang + wasi-libc, wat2wasm). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support/cgroup_host.h"

#include "unit/request_builders.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_util.h"
#include "cf_workdir.h"
#include "support/backend_settings.h"

#define SEC 1000000LL
#define MS 1000LL
#define UID_BASE 241000 /* the helpers' host uids: UID_BASE + slots * (1 + backend) + slot */
#define SLOTS 2

typedef struct fixture {
    char root[64];
    char cg_parent[64];
    char helper[4096];
    cf_backend_config cfg;
    cf_backend_set *set;
    const cf_backend *wasm, *js;
} fixture;

static fixture *F;

static bool runtimes_built(void)
{
#ifdef CF_TEST_EMBED_RUNTIMES
    return true;
#else
    return false;
#endif
}

static const char *binary_dir(void)
{
    const char *d = getenv("CF_BINARY_DIR");
    return d && d[0] ? d : ".";
}

/* A guest module built by tests/embed. */
static void load_guest(const char *name, cf_bytes *out)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/embed/%s.wasm", binary_dir(), name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("guest %s missing (%s): deploy/install.sh installs clang-14, wasi-libc and wabt", name, path);
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_true(n > 8 && n < sizeof(buf));
    assert_int_equal(cf_bytes_set(out, buf, n), 0);
}

/* ---- leftovers (cgroup v1 and v2) ---- */

static int count_cgroups(const fixture *f)
{
    return cgh_count_cgroups(f->cg_parent);
}

/* The real uid of a process (from its status: /proc/<pid> of a process
 * that is not dumpable belongs to root), or -1. */
static long proc_uid(const char *pid)
{
    char p[300], line[256];
    snprintf(p, sizeof(p), "/proc/%.255s/status", pid);
    FILE *fp = fopen(p, "r");
    long uid = -1;
    while (fp && fgets(line, sizeof(line), fp))
        if (strncmp(line, "Uid:", 4) == 0) {
            uid = strtol(line + 4, NULL, 10);
            break;
        }
    if (fp)
        fclose(fp);
    return uid;
}

/* Processes running as one of the helpers' host uids. */
static int count_helper_procs(void)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        long uid = proc_uid(de->d_name);
        if (uid >= UID_BASE && uid < UID_BASE + 4 * SLOTS)
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

/* The pids of the helpers of backend index b (1 wasm, 2 js), slot s. */
static int helper_pids(int b, int s, pid_t *out, int max)
{
    int n = 0;
    long want = UID_BASE + SLOTS * b + s;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d)) && n < max) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || proc_uid(de->d_name) != want)
            continue;
        char p[300], comm[64] = "";
        snprintf(p, sizeof(p), "/proc/%.255s/comm", de->d_name);
        FILE *fp = fopen(p, "r");
        if (fp) {
            if (!fgets(comm, sizeof(comm), fp))
                comm[0] = '\0';
            fclose(fp);
        }
        if (strncmp(comm, "embed-helper", 12) == 0)
            out[n++] = (pid_t)atoi(de->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

/* ---- fixture ---- */

static int group_setup(void **state)
{
    (void)state;
    F = calloc(1, sizeof(*F));
    if (!F)
        return -1;
    if (geteuid() != 0)
        return 0;
    cf_strlcpy(F->root, "/tmp/cf-emtest-XXXXXX", sizeof(F->root));
    if (!mkdtemp(F->root) || chmod(F->root, 0711) < 0)
        return -1;
    snprintf(F->cg_parent, sizeof(F->cg_parent), "/cf-emtest-%d", (int)getpid());
    snprintf(F->helper, sizeof(F->helper), "%s/backends/codefleet-embed-helper", binary_dir());
    cf_backend_config *c = &F->cfg;
    c->work_root = F->root;
    c->shell_path = "/bin/sh";
    c->exec_path = "/usr/bin:/bin";
    c->slots = SLOTS;
    c->max_files_bytes = 1 << 20;
    c->max_output_file_bytes = 1 << 16;
    c->cgroup_root = F->cg_parent;
    c->run_uid_base = UID_BASE;
    c->sandbox_memory_bytes = 64LL << 20; /* the guests' default memory limit */
    /* No compiled-module cache unless a test asks for one. */
    c->settings = test_backend_settings(
        (const char *[]){"wasm-cache", "0", runtimes_built() ? "embed-helper" : NULL, F->helper, NULL});
    cf_error err;
    if (cf_backend_set_new("process,wasm,js", c, &F->set, &err) < 0) {
        fprintf(stderr, "set: %s\n", err.msg);
        return -1;
    }
    char reason[256];
    cf_request probe;
    memset(&probe, 0, sizeof(probe));
    probe.language = CF_LANG_WASM;
    F->wasm = cf_backend_set_select_as(F->set, "wasm", &probe, reason, sizeof(reason));
    probe.language = CF_LANG_JAVASCRIPT;
    F->js = cf_backend_set_select_as(F->set, "js", &probe, reason, sizeof(reason));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (geteuid() == 0 && F) {
        cf_backend_set_destroy(F->set);
        if (count_cgroups(F) != 0) {
            fprintf(stderr, "cgroups left below %s\n", F->cg_parent);
            rc = -1;
        }
        if (count_helper_procs() != 0) {
            fprintf(stderr, "helper processes left\n");
            rc = -1;
        }
        if (cgh_remove(F->cg_parent) < 0) {
            fprintf(stderr, "cgroup %s not removable\n", F->cg_parent);
            rc = -1;
        }
        if (rmdir(F->root) < 0) {
            fprintf(stderr, "work root %s not empty\n", F->root);
            rc = -1;
        }
    }
    free(F);
    F = NULL;
    return rc;
}

static bool skip_unless_ready(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: needs root\n");
        return true;
    }
    if (!runtimes_built()) {
        fprintf(stderr, "skipped: built without the runtimes (checked by test_without_runtimes)\n");
        return true;
    }
    assert_non_null(F->wasm);
    assert_non_null(F->js);
    return false;
}

static int run_on(const cf_backend *b, int slot, const cf_request *req, cf_result *res, cf_exec_files *files)
{
    memset(res, 0, sizeof(*res));
    volatile int cancel = 0;
    cf_exec_ctx ctx = {.slot = slot, .worker_id = "t", .cancel = &cancel, .files = files};
    cf_error err;
    cf_error_clear(&err);
    int rc = b->ops->execute(b->state, &ctx, req, res, &err);
    if (rc < 0)
        fprintf(stderr, "execute: %s\n", err.msg);
    return rc;
}

static void wasm_req(cf_request *r, const char *guest, int64_t timeout_us)
{
    req_init_timeout(r, CF_LANG_WASM, NULL, timeout_us);
    free(r->backend);
    r->backend = strdup("wasm");
    load_guest(guest, &r->module);
}

static void js_req(cf_request *r, const char *code, int64_t timeout_us)
{
    req_init_timeout(r, CF_LANG_JAVASCRIPT, code, timeout_us);
    free(r->backend);
    r->backend = strdup("js");
}

static bool out_has(const cf_result *res, const char *needle)
{
    return res->stdout_data.data && memmem(res->stdout_data.data, res->stdout_data.len, needle, strlen(needle));
}

static void expect(const cf_result *res, cf_status st, const char *reason_part)
{
    if (res->status != st || (reason_part && (!res->reason || !strstr(res->reason, reason_part))))
        fail_msg("status %s reason '%s' (want %s with '%s'); stdout '%.*s' stderr '%.*s'", cf_status_name(res->status),
                 res->reason ? res->reason : "", cf_status_name(st), reason_part ? reason_part : "",
                 (int)(res->stdout_data.len > 300 ? 300 : res->stdout_data.len),
                 res->stdout_data.data ? (const char *)res->stdout_data.data : "",
                 (int)(res->stderr_data.len > 300 ? 300 : res->stderr_data.len),
                 res->stderr_data.data ? (const char *)res->stderr_data.data : "");
}

/* After a hostile case: the same slot serves a trivial request at once. */
static void next_request_fine(int slot)
{
    cf_request r;
    cf_result res;
    wasm_req(&r, "hello", 5 * SEC);
    assert_int_equal(run_on(F->wasm, slot, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(out_has(&res, "hello from wasm\n")); /* its own reply, nobody else's */
    assert_false(out_has(&res, "LATE REPLY"));
    cf_request_clear(&r);
    cf_result_clear(&res);
    js_req(&r, "1+1", 5 * SEC);
    assert_int_equal(run_on(F->js, slot, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(res.output.len == 1 && res.output.data[0] == 2); /* msgpack fixint 2 */
    cf_request_clear(&r);
    cf_result_clear(&res);
}

/* ---- the build without runtimes ---- */

static void test_without_runtimes(void **state)
{
    (void)state;
    if (geteuid() != 0 || runtimes_built()) {
        fprintf(stderr, "skipped: this build has the runtimes (the other tests cover them)\n");
        return;
    }
    cf_request r;
    wasm_req(&r, "hello", SEC);
    char reason[512];
    assert_null(cf_backend_set_select(F->set, &r, reason, sizeof(reason)));
    assert_non_null(strstr(reason, "unavailable"));
    assert_true(cf_backend_set_unavailable(F->set, "wasm"));
    cf_request_clear(&r);
}

/* ---- wasm ---- */

static void test_wasm_hello_c(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    wasm_req(&r, "hello", 10 * SEC);
    const char *argv[] = {"one", "two"};
    req_argv(&r, 2, argv);
    req_env(&r, "GREETING", "hi");
    setenv("CF_TEST_WORKER_SECRET", "s3cret", 1);
    cf_bytes_set(&r.stdin_data, "from stdin", 10);
    assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(out_has(&res, "hello from wasm\n"));
    assert_true(out_has(&res, "arg one\narg two\n"));
    assert_true(out_has(&res, "GREETING=hi\n"));
    assert_true(out_has(&res, "SECRET=(unset)\n")); /* nothing of the worker's environment */
    assert_true(out_has(&res, "stdin=from stdin\n"));
    assert_true(res.stderr_data.len == 10 && memcmp(res.stderr_data.data, "to stderr\n", 10) == 0);
    assert_string_equal(res.meta.isolation, "wasm");
    assert_string_equal(res.meta.backend, "wasm");
    assert_true(res.output.len > 0); /* {"argc":3} written through CODEFLEET_OUTPUT */
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* proc_exit's code is the exit code */
    wasm_req(&r, "hello", 10 * SEC);
    const char *fail[] = {"fail"};
    req_argv(&r, 1, fail);
    assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_FAILED, "exited with code 7");
    assert_int_equal(res.exit_code, 7);
    cf_request_clear(&r);
    cf_result_clear(&res);
}

static void test_wasm_hello_wat(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    wasm_req(&r, "hello_wat", 5 * SEC);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_int_equal(res.stdout_data.len, 10);
    assert_memory_equal(res.stdout_data.data, "hello wat\n", 10);
    cf_request_clear(&r);
    cf_result_clear(&res);
}

static void test_wasm_infinite_loop(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    wasm_req(&r, "loop", 300 * MS);
    int64_t t0 = cf_mono_us();
    assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
    int64_t took = cf_mono_us() - t0;
    expect(&res, CF_STATUS_TIMEOUT, "wall-clock timeout");
    assert_true(took < 2 * SEC); /* the epoch, not the watchdog's grace */
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* cpu_time: the thread's CPU clock, checked at every epoch tick */
    wasm_req(&r, "loop", 10 * SEC);
    r.policy.cpu_time_us = 200 * MS;
    t0 = cf_mono_us();
    assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_TIMEOUT, "cpu time limit");
    assert_true(cf_mono_us() - t0 < 3 * SEC);
    cf_request_clear(&r);
    cf_result_clear(&res);
    next_request_fine(0);
}

static void test_wasm_memory_bomb(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    const char *guests[] = {"membomb", "grow"};
    for (size_t i = 0; i < 2; i++) {
        cf_request r;
        cf_result res;
        wasm_req(&r, guests[i], 10 * SEC);
        r.policy.memory_bytes = 32LL << 20;
        assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
        expect(&res, CF_STATUS_MEMORY_EXCEEDED, "memory limit of 32 MiB exceeded");
        cf_request_clear(&r);
        cf_result_clear(&res);
    }
    next_request_fine(1);
}

static void test_wasm_stack_overflow(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    wasm_req(&r, "recurse", 10 * SEC);
    assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_FAILED, "stack overflow");
    cf_request_clear(&r);
    cf_result_clear(&res);
    wasm_req(&r, "unreachable", 10 * SEC);
    assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_FAILED, "wasm trap: unreachable");
    cf_request_clear(&r);
    cf_result_clear(&res);
    next_request_fine(0);
}

/* Blocking host call: the epoch cannot stop it, the watchdog does, and the
 * slot gets a new helper that serves the next request.  The helper's own
 * deadline is the request's less the watchdog's 500 ms grace: with a
 * 200 ms request it was already past when the module started, and on a
 * busy machine an epoch tick could come before the sleeper reached its
 * host call, so the helper itself said timeout and was (rightly) kept
 * (fresh26: the pid assertion below failed).  With 2 s the sleeper is in
 * its call long before the helper's 1.5 s are up. */
static void test_wasm_sleep_past_deadline(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    pid_t before[4], after[4];
    assert_int_equal(helper_pids(1, 1, before, 4), 1);
    cf_request r;
    cf_result res;
    wasm_req(&r, "sleeper", 2 * SEC);
    int64_t t0 = cf_mono_us();
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    int64_t took = cf_mono_us() - t0;
    expect(&res, CF_STATUS_TIMEOUT, "wall-clock timeout");
    assert_true(took < 10 * SEC); /* the sleeper alone would take 30 s */
    cf_request_clear(&r);
    cf_result_clear(&res);
    next_request_fine(1);
    assert_int_equal(helper_pids(1, 1, after, 4), 1);
    assert_true(after[0] != before[0]); /* replaced */
}

/* A helper that answers just after the watchdog gave up on it: its late
 * reply must never be taken for the next job's (the next job goes to a
 * new helper, and replies carry the job's sequence number). */
static void test_wasm_late_reply_goes_nowhere(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    /* The watchdog fires 800 ms after the job was sent (deadline + grace);
     * the sleeper answers 5..45 ms later, while the next job may already
     * be on its way. */
    static const char *const sleeps[] = {"805", "815", "825", "835", "845"};
    for (int round = 0; round < 5; round++) {
        cf_request r;
        cf_result res;
        wasm_req(&r, "sleeper", 300 * MS);
        const char *argv[] = {sleeps[round]};
        req_argv(&r, 1, argv);
        assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
        expect(&res, CF_STATUS_TIMEOUT, NULL);
        assert_false(out_has(&res, "LATE REPLY"));
        cf_request_clear(&r);
        cf_result_clear(&res);
        next_request_fine(0);
    }
}

static void test_wasm_output_flood(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    wasm_req(&r, "flood", 10 * SEC);
    r.policy.max_stdout_bytes = 4096;
    assert_int_equal(run_on(F->wasm, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_int_equal(res.stdout_data.len, 4096);
    assert_true(res.stdout_truncated);
    cf_request_clear(&r);
    cf_result_clear(&res);
}

static void test_wasm_filesystem(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    wasm_req(&r, "escape", 10 * SEC);
    req_file(&r, "data.txt", "request file\n");
    cf_exec_files files = {.collect = true, .max_files = 100, .max_bytes = 1 << 20};
    assert_int_equal(run_on(F->wasm, 0, &r, &res, &files), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(out_has(&res, "dotdot: refused"));
    assert_true(out_has(&res, "absolute: refused"));
    assert_true(out_has(&res, "proc: refused"));
    assert_true(out_has(&res, "via-symlink: refused"));
    assert_true(out_has(&res, "via-relative-symlink: refused"));
    assert_false(out_has(&res, "root:"));
    assert_true(out_has(&res, "own-file: READ request file"));
    assert_true(out_has(&res, "write: ok"));
    /* what the guest wrote is collected like any backend's work directory */
    bool found = false;
    for (size_t i = 0; i < files.n_collected; i++)
        if (strcmp(files.collected[i].path, "written.txt") == 0)
            found = files.collected[i].content.len == 15;
    assert_true(found);
    cf_workdir_files_free(files.collected, files.n_collected);
    free(files.collect_error);
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* workspace_ro: the work directory is preopened read-only */
    wasm_req(&r, "escape", 10 * SEC);
    req_file(&r, "data.txt", "request file\n");
    r.policy.fs_mode = CF_FS_WORKSPACE_RO;
    cf_exec_files ro = {.read_only = true};
    assert_int_equal(run_on(F->wasm, 0, &r, &res, &ro), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(out_has(&res, "own-file: READ request file"));
    assert_false(out_has(&res, "write: ok"));
    cf_request_clear(&r);
    cf_result_clear(&res);
}

static void test_wasm_bad_modules(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    req_init_timeout(&r, CF_LANG_WASM, NULL, 5 * SEC);
    r.backend = strdup("wasm");
    cf_bytes_set(&r.module, "\0asm\x01\0\0\0garbage", 15);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_COMPILE_FAILED, "invalid WebAssembly module");
    cf_request_clear(&r);
    cf_result_clear(&res);

    wasm_req(&r, "import_missing", 5 * SEC);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_FAILED, "spawn_process");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* a second linear memory would escape the memory limit: refused */
    wasm_req(&r, "two_memories", 5 * SEC);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_FAILED, "cannot instantiate");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* a start function that never returns is stopped by the deadline */
    wasm_req(&r, "start_loop", 300 * MS);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_TIMEOUT, "wall-clock timeout");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* proc_exit from a start function is an exit, not a link failure */
    wasm_req(&r, "start_exit", 5 * SEC);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_FAILED, "exited with code 3");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* initial memory beyond the limit */
    wasm_req(&r, "big_memory", 5 * SEC);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_MEMORY_EXCEEDED, "initial memory exceeds");
    cf_request_clear(&r);
    cf_result_clear(&res);

    wasm_req(&r, "table_bomb", 5 * SEC);
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_FAILED, "cannot instantiate");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* larger than the backend accepts */
    req_init_timeout(&r, CF_LANG_WASM, NULL, 5 * SEC);
    r.backend = strdup("wasm");
    r.module.data = calloc(1, (16u << 20) + 1);
    r.module.len = (16u << 20) + 1;
    assert_int_equal(run_on(F->wasm, 1, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_REJECTED, "exceeds this backend's limit");
    cf_request_clear(&r);
    cf_result_clear(&res);
    next_request_fine(1);
}

/* A helper killed in the middle of a job: the job runs again on a new one. */
typedef struct killer {
    int backend, slot;
    int kills;
} killer;

/* utime + stime of pid, in clock ticks (-1: gone). */
static long proc_cpu_ticks(pid_t pid)
{
    unsigned long long v[18];
    return cf_proc_stat(pid, v, 18) >= 15 ? (long)(v[14] + v[15]) : -1;
}

/* Kills the slot's helper k->kills times, each time once a helper it has
 * not killed yet is running the job: its CPU time grew by 100 ms since
 * the killer first saw it (the job spins).  A condition, not a delay:
 * on a busy machine a fixed delay killed the retry's helper before it
 * had the job, or nothing at all. */
static void *kill_helper(void *arg)
{
    killer *k = arg;
    pid_t killed[8];
    int n_killed = 0;
    long need = sysconf(_SC_CLK_TCK) / 10;
    for (int i = 0; i < k->kills && n_killed < 8; i++) {
        int64_t until = cf_mono_us() + 120 * SEC;
        pid_t seen = 0;
        long base = 0;
        while (cf_mono_us() < until) {
            pid_t p[4], cand = 0;
            int n = helper_pids(k->backend, k->slot, p, 4);
            for (int j = 0; j < n; j++) {
                bool old = false;
                for (int m = 0; m < n_killed; m++)
                    old = old || killed[m] == p[j];
                if (!old)
                    cand = p[j];
            }
            long ticks = cand ? proc_cpu_ticks(cand) : -1;
            if (cand != seen) {
                seen = cand;
                base = ticks;
            } else if (cand && ticks >= 0 && base >= 0 && ticks - base >= need) {
                kill(cand, SIGKILL);
                killed[n_killed++] = cand;
                break;
            }
            usleep(10 * 1000);
        }
    }
    return NULL;
}

static void test_helper_crash_is_retried(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    /* busy for ~3 s (the killer waits for its CPU time to grow), then
     * answers */
    const char *code = "const t = Date.now(); while (Date.now() - t < 3000) {} 'done'";
    cf_request r;
    cf_result res;
    js_req(&r, code, 60 * SEC);
    killer k = {.backend = 2, .slot = 0, .kills = 1};
    pthread_t t;
    pthread_create(&t, NULL, kill_helper, &k);
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    pthread_join(t, NULL);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* killed on both attempts: internal error, not a user failure */
    js_req(&r, code, 60 * SEC);
    k.kills = 2;
    pthread_create(&t, NULL, kill_helper, &k);
    memset(&res, 0, sizeof(res));
    volatile int cancel = 0;
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "t", .cancel = &cancel};
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(F->js->ops->execute(F->js->state, &ctx, &r, &res, &err), -1);
    pthread_join(t, NULL);
    assert_int_equal(err.code, CF_E_SANDBOX);
    assert_non_null(strstr(err.msg, "the runtime helper failed on this request"));
    cf_request_clear(&r);
    cf_result_clear(&res);
    next_request_fine(0);
}

/* wasm-fuel: a deterministic instruction budget per execution, here on a
 * set of its own (fuel metering is an engine setting). */
static void test_wasm_fuel(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_backend_config c = F->cfg;
    c.slots = 1;
    c.settings = test_backend_settings(
        (const char *[]){"wasm-cache", "0", "wasm-fuel", "5000000", runtimes_built() ? "embed-helper" : NULL, F->helper,
                         NULL});
    cf_backend_set *set = NULL;
    cf_error err;
    if (cf_backend_set_new("process,wasm", &c, &set, &err) < 0)
        fail_msg("%s", err.msg);
    const cf_backend *b = cf_backend_set_get(set, 1);
    assert_string_equal(b->ops->name, "wasm");
    cf_request r;
    cf_result res;
    wasm_req(&r, "loop", 10 * SEC);
    int64_t t0 = cf_mono_us();
    assert_int_equal(run_on(b, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_TIMEOUT, "fuel budget of 5000000 exhausted");
    assert_true(cf_mono_us() - t0 < 5 * SEC);
    cf_request_clear(&r);
    cf_result_clear(&res);
    /* a program within the budget runs as without fuel */
    wasm_req(&r, "hello_wat", 10 * SEC);
    assert_int_equal(run_on(b, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    cf_request_clear(&r);
    cf_result_clear(&res);
    cf_backend_set_destroy(set);
}

/* The worker cancels (a revoked partition, shutdown past its grace): the
 * execution ends within tens of milliseconds, not at its deadline. */
typedef struct canceller {
    volatile int *flag;
    int64_t after_us;
} canceller;

static void *cancel_later(void *arg)
{
    canceller *c = arg;
    struct timespec ts = {0, (long)c->after_us * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n(c->flag, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void test_cancel_is_prompt(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    js_req(&r, "while (true) {}", 10 * SEC);
    memset(&res, 0, sizeof(res));
    volatile int cancel = 0;
    cf_exec_ctx ctx = {.slot = 1, .worker_id = "t", .cancel = &cancel};
    canceller c = {.flag = &cancel, .after_us = 100 * MS};
    pthread_t t;
    pthread_create(&t, NULL, cancel_later, &c);
    cf_error err;
    cf_error_clear(&err);
    int64_t t0 = cf_mono_us();
    assert_int_equal(F->js->ops->execute(F->js->state, &ctx, &r, &res, &err), -1);
    int64_t took = cf_mono_us() - t0;
    pthread_join(t, NULL);
    assert_true(err.retriable);
    assert_non_null(strstr(err.msg, "cancelled"));
    assert_true(took < 1 * SEC);
    cf_request_clear(&r);
    cf_result_clear(&res);
    next_request_fine(1);
}

/* Creating and destroying the backends while their helpers start: never
 * hangs, leaves nothing (the group teardown counts cgroups and processes). */
static void test_create_destroy_churn(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_backend_config c = F->cfg;
    c.slots = 8;
    for (int i = 0; i < 6; i++) {
        cf_backend_set *set = NULL;
        cf_error err;
        if (cf_backend_set_new(i % 2 ? "process,js" : "process,wasm", &c, &set, &err) < 0)
            fail_msg("round %d: %s", i, err.msg);
        cf_backend_set_destroy(set);
    }
}

/* ---- js ---- */

typedef struct js_case {
    const char *name;
    const char *code;
    int64_t timeout_us;
    int64_t memory;
    cf_status status;
    const char *reason;
} js_case;

static void test_js_hostile(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    static const js_case cases[] = {
        {"while(true) in try/catch", "try { while (true) {} } catch (e) {} 'escaped'", 300 * MS, 0, CF_STATUS_TIMEOUT,
         "wall-clock timeout"},
        {"catastrophic regexp", "/^(a+)+$/.test('a'.repeat(40) + 'b')", 300 * MS, 0, CF_STATUS_TIMEOUT,
         "wall-clock timeout"},
        {"allocation loop", "const a = []; for (;;) a.push(new Array(100000).fill(1.5))", 10 * SEC, 32LL << 20,
         CF_STATUS_MEMORY_EXCEEDED, "memory limit of 32 MiB exceeded"},
        {"string allocation", "const k = []; for (;;) k.push('x'.repeat(1 << 20) + Math.random())", 10 * SEC,
         32LL << 20, CF_STATUS_MEMORY_EXCEEDED, "memory limit"},
        {"deep recursion", "function f(n) { return f(n + 1) + 1 } f(0)", 10 * SEC, 0, CF_STATUS_FAILED,
         "RangeError"},
        {"endless promise chain", "(async () => { for (;;) await null })()", 300 * MS, 0, CF_STATUS_TIMEOUT,
         "wall-clock timeout"},
        {"endless microtasks", "function again() { Promise.resolve().then(again) } again(); 1", 300 * MS, 0,
         CF_STATUS_TIMEOUT, "wall-clock timeout"},
        {"uncaught", "throw new TypeError('bad input')", 5 * SEC, 0, CF_STATUS_FAILED, "uncaught TypeError: bad input"},
        {"rejected promise", "Promise.reject(new Error('nope'))", 5 * SEC, 0, CF_STATUS_FAILED, "uncaught Error: nope"},
        {"never settles", "new Promise(() => {})", 5 * SEC, 0, CF_STATUS_FAILED, "never settled"},
        {"BigInt result", "10n", 5 * SEC, 0, CF_STATUS_FAILED, "the result is not JSON"},
        {"toJSON that loops", "({ toJSON() { for (;;) {} } })", 300 * MS, 0, CF_STATUS_TIMEOUT, "wall-clock timeout"},
        {"exception whose toString loops", "throw { toString() { for (;;) {} } }", 300 * MS, 0, CF_STATUS_TIMEOUT,
         "wall-clock timeout"},
        {"run getter that throws", "Object.defineProperty(globalThis, 'run', { get() { throw new Error('g') } }); 5",
         5 * SEC, 0, CF_STATUS_FAILED, "uncaught Error: g"},
        {"native sort past the deadline", "new Float64Array(3e6).map(Math.random).sort(); 1", 1 * MS, 0,
         CF_STATUS_TIMEOUT, "wall-clock timeout"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const js_case *c = &cases[i];
        cf_request r;
        cf_result res;
        js_req(&r, c->code, c->timeout_us);
        r.policy.memory_bytes = c->memory;
        /* Stopped by the interrupt handler means the helper lives on: a
         * hard kill at the deadline would replace it (a condition, not a
         * time, so a busy machine cannot fail it).  A killed helper is
         * reaped and replaced when the slot is next used, so a request
         * runs on the slot before the pids are compared. */
        bool judge = c->status == CF_STATUS_TIMEOUT && c->timeout_us >= 100 * MS;
        pid_t before[4], after[4];
        if (judge) {
            next_request_fine(1);
            assert_int_equal(helper_pids(2, 1, before, 4), 1);
        }
        assert_int_equal(run_on(F->js, 1, &r, &res, NULL), 0);
        if (res.status != c->status || !res.reason || !strstr(res.reason, c->reason))
            fail_msg("%s: status %s reason '%s'", c->name, cf_status_name(res.status), res.reason ? res.reason : "");
        if (judge) {
            next_request_fine(1);
            if (helper_pids(2, 1, after, 4) != 1 || after[0] != before[0])
                fail_msg("%s: the helper was replaced, so the interrupt handler did not stop it", c->name);
        }
        cf_request_clear(&r);
        cf_result_clear(&res);
    }
    next_request_fine(1);
}

static void test_js_slow_builtin(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    /* A native search that never calls the interrupt handler: O(n*m). */
    const char *code = "const s = 'a'.repeat(200000); s.indexOf('a'.repeat(100000) + 'b')";
    pid_t before[4], after[4];
    assert_int_equal(helper_pids(2, 0, before, 4), 1);
    cf_request r;
    cf_result res;
    js_req(&r, code, 100 * MS);
    int64_t t0 = cf_mono_us();
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    int64_t took = cf_mono_us() - t0;
    expect(&res, CF_STATUS_TIMEOUT, "wall-clock timeout");
    assert_true(took < 2 * SEC);
    cf_request_clear(&r);
    cf_result_clear(&res);
    next_request_fine(0);
    assert_int_equal(helper_pids(2, 0, after, 4), 1);
    assert_true(after[0] != before[0]);
}

static void test_js_output_and_apis(void **state)
{
    (void)state;
    if (skip_unless_ready())
        return;
    cf_request r;
    cf_result res;
    js_req(&r, "for (let i = 0; i < 100000; i++) console.log('x'.repeat(100)); 'ok'", 10 * SEC);
    r.policy.max_stdout_bytes = 1000;
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_int_equal(res.stdout_data.len, 1000);
    assert_true(res.stdout_truncated);
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* No host APIs: nothing to reach files, processes, the network or the environment. */
    js_req(&r,
           "[typeof require, typeof process, typeof fetch, typeof std, typeof os, typeof setTimeout, "
           "typeof XMLHttpRequest, typeof WebAssembly].join(',')",
           5 * SEC);
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    static const char want[] = "\xd9\x4fundefined,undefined,undefined,undefined,undefined,undefined,undefined,undefined";
    assert_int_equal(res.output.len, sizeof(want) - 1);
    assert_memory_equal(res.output.data, want, sizeof(want) - 1);
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* input, run(input), async run, ES2023 */
    js_req(&r,
           "class C { #v; constructor(v) { this.#v = v } get v() { return this.#v } }\n"
           "async function run(input) { await null; return { doubled: input.n * 2, last: [1, 2, 3].at(-1), "
           "c: new C(input.n).v, sorted: [3, 1, 2].toSorted() } }",
           5 * SEC);
    static const uint8_t input[] = {0x81, 0xa1, 'n', 0x15}; /* {"n": 21} */
    cf_bytes_set(&r.input, input, sizeof(input));
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(res.output.len > 0 && res.output.data[0] == 0x84); /* a map of four entries */
    assert_non_null(memmem(res.output.data, res.output.len, "\xa7" "doubled\x2a", 9));
    assert_string_equal(res.meta.isolation, "in_process");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* console shows what has no JSON form; peak memory is this execution's */
    js_req(&r, "console.log(Symbol('s'), 1n, undefined, [1, 'a']); 0", 5 * SEC);
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(out_has(&res, "Symbol(s) 1 undefined [1,\"a\"]\n"));
    assert_true(res.peak_memory_bytes > 0 && res.peak_memory_bytes < (16LL << 20));
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* stdout cap 0 means the default cap, as for the other backends */
    js_req(&r, "console.log('hi'); 1", 5 * SEC);
    r.policy.max_stdout_bytes = 0;
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(out_has(&res, "hi\n"));
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* a result past max-output-file is left out with a warning, as an
     * oversized output.json is on the other backends; the status is the
     * program's own */
    js_req(&r, "'x'.repeat(4 << 20)", 10 * SEC);
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_int_equal(res.output.len, 0);
    assert_int_equal(res.n_diagnostics, 1);
    assert_string_equal(res.diagnostics[0].level, "warning");
    assert_non_null(strstr(res.diagnostics[0].message, "larger than 65536 bytes"));
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* an output far larger than the output caps still comes back whole */
    js_req(&r, "'y'.repeat(50000)", 10 * SEC);
    r.policy.max_stdout_bytes = 100;
    r.policy.max_stderr_bytes = 100;
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_int_equal(res.output.len, 50003); /* str16 header + the text */
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* input whose JSON would not fit a job (control characters become
     * \u00XX): rejected with a reason, no helper harmed */
    js_req(&r, "input.length", 10 * SEC);
    size_t n = 6u << 20; /* two strings of 6 MiB: 72 MiB of JSON */
    uint8_t *big = malloc(1 + 2 * (n + 5));
    big[0] = 0x92; /* fixarray of 2 */
    for (int k = 0; k < 2; k++) {
        uint8_t *q = big + 1 + (size_t)k * (n + 5);
        q[0] = 0xdb; /* str32 */
        q[1] = (uint8_t)(n >> 24);
        q[2] = (uint8_t)(n >> 16);
        q[3] = (uint8_t)(n >> 8);
        q[4] = (uint8_t)n;
        memset(q + 5, 0x01, n);
    }
    r.input.data = big;
    r.input.len = 1 + 2 * (n + 5);
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_REJECTED, "more than backend 'js' takes");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* an output that is valid JSON of any kind comes back converted */
    js_req(&r, "({ s: 'é', n: -1.5, a: [true, null] })", 10 * SEC);
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_SUCCESS, NULL);
    assert_true(res.output.len > 0 && res.output.data[0] == 0x83);
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* what a script cannot see is refused, not silently dropped */
    js_req(&r, "1", 5 * SEC);
    const char *args[] = {"x"};
    req_argv(&r, 1, args);
    assert_int_equal(run_on(F->js, 0, &r, &res, NULL), 0);
    expect(&res, CF_STATUS_REJECTED, "no arguments");
    cf_request_clear(&r);
    cf_result_clear(&res);

    /* js runs no workspace: the backend does not claim the control */
    js_req(&r, "1", 5 * SEC);
    r.policy.fs_mode = CF_FS_WORKSPACE_RW;
    char reason[256];
    assert_int_equal(cf_policy_check(&F->js->caps, "js", &r, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "fs_mode=workspace_rw"));
    cf_request_clear(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_runtimes),
        cmocka_unit_test(test_wasm_hello_c),
        cmocka_unit_test(test_wasm_hello_wat),
        cmocka_unit_test(test_wasm_infinite_loop),
        cmocka_unit_test(test_wasm_memory_bomb),
        cmocka_unit_test(test_wasm_stack_overflow),
        cmocka_unit_test(test_wasm_sleep_past_deadline),
        cmocka_unit_test(test_wasm_late_reply_goes_nowhere),
        cmocka_unit_test(test_wasm_output_flood),
        cmocka_unit_test(test_wasm_filesystem),
        cmocka_unit_test(test_wasm_bad_modules),
        cmocka_unit_test(test_helper_crash_is_retried),
        cmocka_unit_test(test_cancel_is_prompt),
        cmocka_unit_test(test_wasm_fuel),
        cmocka_unit_test(test_create_destroy_churn),
        cmocka_unit_test(test_js_hostile),
        cmocka_unit_test(test_js_slow_builtin),
        cmocka_unit_test(test_js_output_and_apis),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
