/* Workspaces through the fleet: real codefleet-worker processes, the real
 * broker and Redis (CF_TEST_BROKERS, CF_TEST_REDIS), plus a private
 * redis-server for the crash test. */
#include "it_support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_redis.h"
#include "cf_util.h"
#include "cf_workspace.h"
#include "unit/redis_test_server.h"
#include "worker_state_int.h"

#define SEC 1000000LL

/* A library client on a Redis "host:port". */
typedef struct store {
    cf_redis *r;
    cf_workspace_store *ws;
} store;

static void store_open(store *s, const char *addr)
{
    char host[256];
    int port;
    assert_int_equal(cf_wstate_addr_parse(addr, host, sizeof(host), &port, NULL), 0);
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    rc.host = host;
    rc.port = port;
    /* The stack's Redis takes its ACL users only; a test's own server none. */
    if (it_redis() && strcmp(addr, it_redis()) == 0)
        it_redis_auth(&rc);
    rc.connect_timeout_us = 500000;
    rc.retry_initial_us = 20000;
    rc.retry_max_us = 200000;
    cf_error err;
    cf_error_clear(&err);
    s->r = cf_redis_new(&rc, false, &err);
    assert_non_null(s->r);
    s->ws = cf_workspace_store_new(s->r, NULL, &err);
    assert_non_null(s->ws);
}

static void store_close(store *s)
{
    cf_workspace_store_destroy(s->ws);
    cf_redis_destroy(s->r);
}

static char *ws_file(store *s, const char *id, const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    if (cf_workspace_get(s->ws, id, path, &data, &len, NULL, NULL) < 0)
        return NULL;
    return (char *)data;
}

static void check_status(const cf_result *res, cf_status want, const char *what)
{
    if (res->status != want)
        fail_msg("%s: status %s (want %s), reason: %s, stderr: %.*s", what, cf_status_name(res->status),
                 cf_status_name(want), res->reason ? res->reason : "-", (int)res->stderr_data.len,
                 res->stderr_data.data ? (const char *)res->stderr_data.data : "");
}

static bool has_diag(const cf_result *res, const char *needle)
{
    for (size_t i = 0; i < res->n_diagnostics; i++)
        if (res->diagnostics[i].message && strstr(res->diagnostics[i].message, needle))
            return true;
    return false;
}

static void start_worker(it_worker *w, const it_topics *t, const char *id, const char *redis, const char *extra1,
                         const char *extra2)
{
    char a_redis[300];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", redis);
    const char *args[] = {a_redis, extra1, extra2, NULL};
    it_worker_start(w, t, id, args);
}

static void shell_request(cf_request *req, const char *ws, const char *code)
{
    it_request_init(req, CF_LANG_SHELL, code);
    req->workspace = strdup(ws);
}

/* Issue 30 part 4: one tenant's workspaces are held to its profile's
 * max-workspace-bytes.  A run whose write-back would pass it keeps its
 * output and is told, naming the quota; another tenant's write of the same
 * size, on the same worker, lands. */
static void workspaces_are_held_to_the_tenants_quota(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "wsquota", 1);
    char prof[64], topic[96], other[64], otopic[96], ws[3][64];
    it_unique_name("wsq", prof, sizeof(prof));
    snprintf(topic, sizeof(topic), "%s.req", prof);
    it_request_topic_create(topic, 1);
    /* The other tenant: a profile of its own too (a fresh ledger, whatever
     * earlier runs left in this Redis). */
    it_unique_name("wsq-b", other, sizeof(other));
    snprintf(otopic, sizeof(otopic), "%s.req", other);
    it_request_topic_create(otopic, 1);
    for (int i = 0; i < 3; i++)
        it_unique_name("wsq-ws", ws[i], sizeof(ws[i]));
    static char a_redis[300], a[7][200];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    snprintf(a[0], sizeof(a[0]), "--profile.%s.topic=%s", prof, topic);
    snprintf(a[1], sizeof(a[1]), "--profile.%s.backends=process", prof);
    snprintf(a[2], sizeof(a[2]), "--profile.%s.max-workspace-bytes=1MiB", prof);
    /* The process backend isolates no network: the profile must allow it. */
    snprintf(a[3], sizeof(a[3]), "--profile.%s.network=enabled", prof);
    snprintf(a[4], sizeof(a[4]), "--profile.%s.topic=%s", other, otopic);
    snprintf(a[5], sizeof(a[5]), "--profile.%s.backends=process", other);
    snprintf(a[6], sizeof(a[6]), "--profile.%s.network=enabled", other);
    const char *extra[] = {a_redis, "--backends=process", "--profile.default.backends=process",
                           "--profile.default.network=enabled", a[0], a[1], a[2], a[3], a[4], a[5], a[6], NULL};
    it_worker w;
    it_worker_start(&w, &t, "wsquota-w1", extra);
    if (!it_worker_wait_log(&w, "reading cancels from", 60000)) {
        it_worker_dump_log(&w);
        fail_msg("the worker did not start");
    }
    it_topics tq = t, tb = t;
    snprintf(tq.requests, sizeof(tq.requests), "%s", topic);
    snprintf(tb.requests, sizeof(tb.requests), "%s", otopic);
    cf_dispatcher *dq = it_dispatcher_new(&tq), *dd = it_dispatcher_new(&tb);
    const char *write = "head -c 700000 /dev/zero | tr '\\0' a > big && echo wrote";
    cf_request req;
    cf_result res;

    /* 700 kB of 1 MiB: written. */
    shell_request(&req, ws[0], write);
    it_submit_wait(dq, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "first write");
    assert_int_equal(res.workspace_revision, 1);
    cf_result_clear(&res);
    cf_request_clear(&req);
    /* Another 700 kB in a second workspace: over the quota, not written,
     * the output kept and the answer naming the quota. */
    shell_request(&req, ws[1], write);
    it_submit_wait(dq, &req, 60 * SEC, &res);
    print_message("over the quota: %s: %s\n", cf_status_name(res.status), res.reason ? res.reason : "");
    check_status(&res, CF_STATUS_SUCCESS, "second write");
    assert_true(res.stdout_data.len >= 5 && memcmp(res.stdout_data.data, "wrote", 5) == 0);
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "not written back"));
    assert_non_null(strstr(res.reason, "workspace quota of"));
    assert_non_null(strstr(res.reason, "max-workspace-bytes"));
    assert_int_equal(res.workspace_revision, 0);
    cf_result_clear(&res);
    /* Room made (an operator deletes the first workspace): the same
     * request again, same id, runs again instead of replaying the refusal
     * (a refused write changed nothing, so it is not kept for replay). */
    store s;
    store_open(&s, it_redis());
    cf_error derr;
    cf_error_clear(&derr);
    assert_int_equal(cf_workspace_delete(s.ws, ws[0], &derr), 0);
    store_close(&s);
    it_submit_wait(dq, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "the same request once there is room");
    assert_int_equal(res.workspace_revision, 1);
    assert_true(!res.reason || !strstr(res.reason, "quota"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    /* Another tenant on the same worker: written. */
    shell_request(&req, ws[2], write);
    it_submit_wait(dd, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "another tenant's write");
    assert_int_equal(res.workspace_revision, 1);
    assert_true(!res.reason || !strstr(res.reason, "quota"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    /* The second workspace rewritten with the same bytes: nothing more is
     * stored, so it fits. */
    shell_request(&req, ws[1], "head -c 700000 /dev/zero | tr '\\0' a > copy && echo wrote");
    it_submit_wait(dq, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "same bytes again");
    assert_int_equal(res.workspace_revision, 2);
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(dq);
    cf_dispatcher_destroy(dd);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 30000), 0);
}

/* Files visible, changes written back as one revision, changed paths
 * reported; a failed program writes nothing. */
static void read_write_round_trip(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    store s;
    store_open(&s, it_redis());
    char ws[64];
    it_unique_name("wsrw", ws, sizeof(ws));
    assert_int_equal(cf_workspace_create(s.ws, ws, "it", NULL, NULL), 0);
    cf_ws_file init[] = {{"data.txt", "hello\n", 6}, {"gone.txt", "bye", 3}, {"keep/k", "k", 1}};
    int64_t rev = 0;
    assert_int_equal(cf_workspace_commit(s.ws, ws, 0, init, 3, NULL, 0, &rev, NULL), 0);
    assert_int_equal(rev, 1);

    it_topics t;
    it_topics_create(&t, "wsrw", 2);
    it_worker w;
    start_worker(&w, &t, "wsrw-w1", it_redis(), NULL, NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);

    cf_request req;
    shell_request(&req, ws, "cat data.txt; echo changed > data.txt; mkdir -p sub; echo new > sub/out.txt; "
                            "rm gone.txt");
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "read-write run");
    assert_int_equal(res.stdout_data.len, 6);
    assert_memory_equal(res.stdout_data.data, "hello\n", 6);
    assert_int_equal(res.workspace_revision, 2);
    assert_false(res.workspace_conflict);
    assert_int_equal(res.n_changed_paths, 3);
    assert_string_equal(res.changed_paths[0], "data.txt");
    assert_string_equal(res.changed_paths[1], "gone.txt");
    assert_string_equal(res.changed_paths[2], "sub/out.txt");
    assert_int_equal(res.meta.attempt, 1);
    char *v = ws_file(&s, ws, "data.txt");
    assert_string_equal(v, "changed\n");
    free(v);
    v = ws_file(&s, ws, "sub/out.txt");
    assert_string_equal(v, "new\n");
    free(v);
    assert_null(ws_file(&s, ws, "gone.txt"));
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* A program that fails: nothing written back, revision unchanged. */
    shell_request(&req, ws, "echo junk > data.txt; exit 3");
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_FAILED, "failing run");
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.n_changed_paths, 0);
    v = ws_file(&s, ws, "data.txt");
    assert_string_equal(v, "changed\n");
    free(v);
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* A new workspace named by a read-write request starts empty. */
    char fresh[64];
    it_unique_name("wsnew", fresh, sizeof(fresh));
    shell_request(&req, fresh, "ls | wc -l; echo 1 > first");
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "new workspace");
    assert_int_equal(res.workspace_revision, 1);
    v = ws_file(&s, fresh, "first");
    assert_string_equal(v, "1\n");
    free(v);
    cf_request_clear(&req);
    cf_result_clear(&res);

    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
    cf_workspace_delete(s.ws, ws, NULL);
    cf_workspace_delete(s.ws, fresh, NULL);
    store_close(&s);
}

/* Admission: contradictions and unenforceable read-only requests are
 * rejected with a reason; a worker without Redis rejects workspaces. */
static void admission_through_the_fleet(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "wsadm", 1);
    it_worker w;
    start_worker(&w, &t, "wsadm-w1", it_redis(), NULL, NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);
    struct {
        const char *ws;
        cf_fs_mode mode;
        const char *want;
    } cases[] = {
        /* The process backend cannot make files read-only for the program. */
        {"wsadm-ro", CF_FS_WORKSPACE_RO, "fs_mode=workspace_ro"},
        {"wsadm-none", CF_FS_NONE, "contradicts workspace"},
        {"../etc", CF_FS_UNSPECIFIED, "workspace"},
        {NULL, CF_FS_WORKSPACE_RW, "needs a workspace"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_request req;
        it_request_init(&req, CF_LANG_SHELL, "echo x > f");
        if (cases[i].ws)
            req.workspace = strdup(cases[i].ws);
        req.policy.fs_mode = cases[i].mode;
        cf_result res;
        it_submit_wait(d, &req, 60 * SEC, &res);
        check_status(&res, CF_STATUS_REJECTED, cases[i].want);
        if (!res.reason || !strstr(res.reason, cases[i].want))
            fail_msg("case %zu: reason '%s' lacks '%s'", i, res.reason ? res.reason : "", cases[i].want);
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);

    /* No Redis configured. */
    it_worker_start(&w, &t, "wsadm-w2", NULL);
    cf_request req;
    shell_request(&req, "wsadm-x", "true");
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_REJECTED, "no redis");
    assert_non_null(strstr(res.reason, "no Redis"));
    assert_int_equal(res.meta.attempt, 0);
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
}

/* Read-only on a backend that enforces it: the program cannot change the
 * workspace and nothing is written back.  Needs the sandbox backend. */
static void workspace_modes_on_sandbox(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    if (!cf_backend_find("sandbox")) {
        print_message("sandbox backend not registered: skipping\n");
        skip();
    }
    store s;
    store_open(&s, it_redis());
    char ws[64];
    it_unique_name("wsro", ws, sizeof(ws));
    assert_int_equal(cf_workspace_create(s.ws, ws, NULL, NULL, NULL), 0);
    assert_int_equal(cf_workspace_put(s.ws, ws, 0, "f.txt", "orig", 4, NULL, NULL), 0);
    it_topics t;
    it_topics_create(&t, "wsro", 1);
    it_worker w;
    start_worker(&w, &t, "wsro-w1", it_redis(), "--backends=sandbox,process", NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    shell_request(&req, ws, "cat f.txt; if (echo changed > f.txt) 2>/dev/null; then echo ' writable'; "
                            "else echo ' read-only'; fi; echo new > n.txt 2>/dev/null; true");
    req.backend = strdup("sandbox");
    req.policy.fs_mode = CF_FS_WORKSPACE_RO;
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    if (res.status == CF_STATUS_REJECTED || res.status == CF_STATUS_INTERNAL_ERROR) {
        it_worker_dump_log(&w);
        fail_msg("sandbox read-only run: %s: %s", cf_status_name(res.status), res.reason ? res.reason : "-");
    }
    /* The program saw the file and could not change it. */
    assert_int_equal(res.stdout_data.len, 15);
    assert_memory_equal(res.stdout_data.data, "orig read-only\n", 15);
    assert_int_equal(res.workspace_revision, 1);
    assert_int_equal(res.n_changed_paths, 0);
    char *v = ws_file(&s, ws, "f.txt");
    assert_string_equal(v, "orig");
    free(v);
    assert_null(ws_file(&s, ws, "n.txt"));
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* The same workspace, explicitly read-write on the sandbox. */
    shell_request(&req, ws, "echo changed > f.txt");
    req.backend = strdup("sandbox");
    req.policy.fs_mode = CF_FS_WORKSPACE_RW;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "sandbox read-write run");
    assert_string_equal(res.meta.backend, "sandbox");
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.n_changed_paths, 1);
    v = ws_file(&s, ws, "f.txt");
    assert_string_equal(v, "changed\n");
    free(v);
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
    cf_workspace_delete(s.ws, ws, NULL);
    store_close(&s);
}

/* N increments of one counter file, submitted at once, across two
 * workers: requests keyed by the workspace run in order, no update is lost. */
static void concurrent_writers_lose_nothing(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    enum { N = 16 };
    store s;
    store_open(&s, it_redis());
    char ws[64];
    it_unique_name("wscnt", ws, sizeof(ws));
    assert_int_equal(cf_workspace_create(s.ws, ws, NULL, NULL, NULL), 0);
    assert_int_equal(cf_workspace_put(s.ws, ws, 0, "counter", "0", 1, NULL, NULL), 0);
    it_topics t;
    it_topics_create(&t, "wscnt", 4);
    it_worker w1, w2;
    start_worker(&w1, &t, "wscnt-w1", it_redis(), "--slots=2", NULL);
    start_worker(&w2, &t, "wscnt-w2", it_redis(), "--slots=2", NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request reqs[N];
    for (int i = 0; i < N; i++) {
        shell_request(&reqs[i], ws, "n=$(cat counter); echo $((n + 1)) > counter");
        cf_error err;
        cf_error_clear(&err);
        if (cf_dispatcher_submit(d, &reqs[i], &err) < 0)
            fail_msg("submit: %s", err.msg);
    }
    bool revs[N + 2] = {false};
    for (int i = 0; i < N; i++) {
        cf_result res;
        memset(&res, 0, sizeof(res));
        cf_error err;
        cf_error_clear(&err);
        if (cf_dispatcher_wait(d, reqs[i].id, 90 * SEC, &res, &err) < 0)
            fail_msg("waiting for %s: %s", reqs[i].id, err.msg);
        check_status(&res, CF_STATUS_SUCCESS, "increment");
        assert_false(res.workspace_conflict);
        assert_true(res.workspace_revision >= 2 && res.workspace_revision <= N + 1);
        assert_false(revs[res.workspace_revision]);
        revs[res.workspace_revision] = true;
        cf_result_clear(&res);
        cf_request_clear(&reqs[i]);
    }
    char *v = ws_file(&s, ws, "counter");
    char want[16];
    snprintf(want, sizeof(want), "%d\n", N);
    assert_string_equal(v, want);
    free(v);
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w1, SIGTERM, 20000), 0);
    assert_int_equal(it_worker_stop(&w2, SIGTERM, 20000), 0);
    cf_workspace_delete(s.ws, ws, NULL);
    store_close(&s);
}

/* A write through the library while a request runs: the run's changes are
 * not written back, the result says so, the library write stays. */
static void conflict_is_reported_not_overwritten(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    store s;
    store_open(&s, it_redis());
    char ws[64], marker[128];
    it_unique_name("wscfl", ws, sizeof(ws));
    snprintf(marker, sizeof(marker), "/tmp/cf-it-%s.started", ws);
    unlink(marker);
    assert_int_equal(cf_workspace_create(s.ws, ws, NULL, NULL, NULL), 0);
    assert_int_equal(cf_workspace_put(s.ws, ws, 0, "f", "base", 4, NULL, NULL), 0);
    it_topics t;
    it_topics_create(&t, "wscfl", 1);
    it_worker w;
    start_worker(&w, &t, "wscfl-w1", it_redis(), NULL, NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);
    char code[300];
    /* The process backend runs on the host: the marker tells the test the
     * program has its snapshot. */
    snprintf(code, sizeof(code), "touch %s; sleep 1.5; echo mine > f; echo extra > g", marker);
    cf_request req;
    shell_request(&req, ws, code);
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    struct stat sb;
    int64_t until = cf_mono_us() + 60 * SEC;
    while (stat(marker, &sb) < 0 && cf_mono_us() < until)
        usleep(20000);
    assert_int_equal(stat(marker, &sb), 0);
    assert_int_equal(cf_workspace_put(s.ws, ws, 1, "f", "theirs", 6, NULL, NULL), 0);
    cf_result res;
    memset(&res, 0, sizeof(res));
    assert_int_equal(cf_dispatcher_wait(d, req.id, 60 * SEC, &res, &err), 0);
    check_status(&res, CF_STATUS_SUCCESS, "conflicting run");
    assert_true(res.workspace_conflict);
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.n_changed_paths, 0);
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "conflict"));
    char *v = ws_file(&s, ws, "f");
    assert_string_equal(v, "theirs");
    free(v);
    assert_null(ws_file(&s, ws, "g"));
    unlink(marker);
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
    cf_workspace_delete(s.ws, ws, NULL);
    store_close(&s);
}

/* Programs leaving too many files or an oversized file: a clear
 * diagnostic, nothing written.  Unsafe request paths are rejected. */
static void bad_output_writes_nothing(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    store s;
    store_open(&s, it_redis());
    char ws[64];
    it_unique_name("wsbad", ws, sizeof(ws));
    assert_int_equal(cf_workspace_create(s.ws, ws, NULL, NULL, NULL), 0);
    assert_int_equal(cf_workspace_put(s.ws, ws, 0, "f", "x", 1, NULL, NULL), 0);
    it_topics t;
    it_topics_create(&t, "wsbad", 1);
    it_worker w;
    start_worker(&w, &t, "wsbad-w1", it_redis(), "--workspace-max-files=5", "--workspace-max-file=1KiB");
    cf_dispatcher *d = it_dispatcher_new(&t);
    struct {
        const char *code;
        const char *want;
    } cases[] = {
        {"for i in 1 2 3 4 5 6 7 8; do echo $i > n$i; done", "not written back"},
        {"head -c 5000 /dev/zero > big", "not written back"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_request req;
        shell_request(&req, ws, cases[i].code);
        cf_result res;
        it_submit_wait(d, &req, 60 * SEC, &res);
        check_status(&res, CF_STATUS_SUCCESS, cases[i].code);
        if (!has_diag(&res, cases[i].want))
            fail_msg("case %zu: no diagnostic with '%s' (reason %s)", i, cases[i].want, res.reason ? res.reason : "-");
        assert_int_equal(res.workspace_revision, 1);
        assert_int_equal(res.n_changed_paths, 0);
        cf_ws_info info;
        assert_int_equal(cf_workspace_info(s.ws, ws, &info, NULL), 0);
        assert_int_equal(info.rev, 1);
        assert_int_equal(info.nfiles, 1);
        cf_ws_info_clear(&info);
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
    /* Request files escaping the work directory never run. */
    static const char *const bad_paths[] = {"../escape", "/etc/escape", "a/../../b"};
    for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
        cf_request req;
        shell_request(&req, ws, "true");
        req.files = calloc(1, sizeof(cf_file));
        req.files[0].path = strdup(bad_paths[i]);
        cf_bytes_set(&req.files[0].content, "x", 1);
        req.n_files = 1;
        cf_result res;
        it_submit_wait(d, &req, 60 * SEC, &res);
        check_status(&res, CF_STATUS_REJECTED, bad_paths[i]);
        assert_non_null(res.reason);
        cf_ws_info info;
        assert_int_equal(cf_workspace_info(s.ws, ws, &info, NULL), 0);
        assert_int_equal(info.rev, 1);
        cf_ws_info_clear(&info);
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
    cf_workspace_delete(s.ws, ws, NULL);
    store_close(&s);
}

/* Redis SIGKILLed and restarted under a stream of workspace requests (two
 * workspaces in flight at once, on two slots): requests during the outage
 * fail cleanly (internal_error naming the store) or succeed after retries;
 * afterwards they succeed again; every retained revision reads back whole. */
enum { CRASH_WS = 2 };

static void crash_check_workspace(store *s, const char *ws, int ok)
{
    cf_ws_info info;
    /* The test's own connection died with the server: the first command
     * notices, the client reconnects on a later one. */
    int rc = -1;
    for (int tries = 0; tries < 50 && rc < 0; tries++)
        if ((rc = cf_workspace_info(s->ws, ws, &info, NULL)) < 0)
            usleep(50000);
    assert_int_equal(rc, 0);
    assert_true(info.rev >= ok);
    /* Every retained revision reads back (the library checks manifest
     * against blobs) and the log grew by exactly one line per revision. */
    for (int64_t r = info.oldest_rev; r <= info.rev; r++) {
        cf_ws_listing l;
        cf_error err;
        cf_error_clear(&err);
        if (cf_workspace_snapshot(s->ws, ws, r, &l, &err) < 0)
            fail_msg("%s revision %lld: %s", ws, (long long)r, err.msg);
        bool seen_log = false;
        for (size_t k = 0; k < l.n; k++) {
            if (strcmp(l.entries[k].path, "log") != 0)
                continue;
            seen_log = true;
            size_t lines = 0;
            for (size_t b = 0; b < l.entries[k].size; b++)
                lines += l.entries[k].data[b] == '\n';
            assert_int_equal((int64_t)lines, r);
        }
        assert_true(seen_log || r == 0);
        cf_ws_listing_clear(&l);
    }
    cf_ws_info_clear(&info);
}

static void redis_crash_under_load(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    if (!cf_test_redis_available())
        skip();
    cf_test_redis srv;
    assert_int_equal(cf_test_redis_start(&srv, NULL, true), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    store s;
    store_open(&s, addr);
    char ws[CRASH_WS][64];
    for (int k = 0; k < CRASH_WS; k++) {
        it_unique_name("wscrash", ws[k], sizeof(ws[k]));
        assert_int_equal(cf_workspace_create(s.ws, ws[k], NULL, NULL, NULL), 0);
    }
    it_topics t;
    it_topics_create(&t, "wscrash", 4);
    it_worker w;
    /* Its own Redis, without the stack's users: no AUTH. */
    char a_redis[300];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", addr);
    const char *wargs[] = {a_redis, "--redis-retry-budget=500ms", "--redis-connect-timeout=200ms", "--redis-user=",
                           "--redis-password=", NULL};
    it_worker_start(&w, &t, "wscrash-w1", wargs);
    cf_dispatcher *d = it_dispatcher_new(&t);

    enum { N = 20, KILL_AT = 6, RESTART_AT = 12 };
    int ok[CRASH_WS] = {0}, failed = 0, ok_after = 0;
    for (int i = 0; i < N; i++) {
        if (i == KILL_AT)
            cf_test_redis_kill(&srv);
        if (i == RESTART_AT)
            assert_int_equal(cf_test_redis_launch(&srv), 0);
        cf_request req[CRASH_WS];
        for (int k = 0; k < CRASH_WS; k++) {
            char code[128];
            snprintf(code, sizeof(code), "echo %d >> log; echo %d > last", i, i);
            shell_request(&req[k], ws[k], code);
            cf_error err;
            cf_error_clear(&err);
            if (cf_dispatcher_submit(d, &req[k], &err) < 0)
                fail_msg("submit: %s", err.msg);
        }
        for (int k = 0; k < CRASH_WS; k++) {
            cf_result res;
            memset(&res, 0, sizeof(res));
            cf_error err;
            cf_error_clear(&err);
            if (cf_dispatcher_wait(d, req[k].id, 60 * SEC, &res, &err) < 0)
                fail_msg("waiting: %s", err.msg);
            if (res.status == CF_STATUS_SUCCESS) {
                ok[k]++;
                if (i >= RESTART_AT)
                    ok_after++;
                assert_false(res.workspace_conflict);
            } else {
                check_status(&res, CF_STATUS_INTERNAL_ERROR, "during the outage");
                if (!(i >= KILL_AT && i < RESTART_AT + 2))
                    fail_msg("request %d failed outside the outage: %s", i, res.reason ? res.reason : "-");
                assert_non_null(strstr(res.reason, "store unavailable"));
                failed++;
            }
            cf_request_clear(&req[k]);
            cf_result_clear(&res);
        }
    }
    print_message("redis crash: %d+%d succeeded, %d internal_error, %d after restart\n", ok[0], ok[1], failed,
                  ok_after);
    assert_true(failed >= 1);
    assert_true(ok_after >= CRASH_WS * (N - RESTART_AT - 2));
    for (int k = 0; k < CRASH_WS; k++)
        crash_check_workspace(&s, ws[k], ok[k]);
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
    store_close(&s);
    cf_test_redis_stop(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(read_write_round_trip),
        cmocka_unit_test(workspaces_are_held_to_the_tenants_quota),
        cmocka_unit_test(admission_through_the_fleet),
        cmocka_unit_test(workspace_modes_on_sandbox),
        cmocka_unit_test(concurrent_writers_lose_nothing),
        cmocka_unit_test(conflict_is_reported_not_overwritten),
        cmocka_unit_test(bad_output_writes_nothing),
        cmocka_unit_test(redis_crash_under_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
