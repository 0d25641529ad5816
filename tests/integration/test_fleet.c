/* The fleet end to end on the real broker: real codefleet-worker processes,
 * the dispatcher library, unique topics per test. */
#include "it_support.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_kafka.h"
#include "cf_util.h"

#define SEC 1000000LL

static void check_result(const cf_result *res, cf_status want, const char *what)
{
    if (res->status != want) {
        fail_msg("%s: status %s (want %s), reason: %s, stderr: %.*s", what, cf_status_name(res->status),
                 cf_status_name(want), res->reason ? res->reason : "-", (int)res->stderr_data.len,
                 res->stderr_data.data ? (const char *)res->stderr_data.data : "");
    }
}

static bool stdout_is(const cf_result *res, const char *want)
{
    size_t n = strlen(want);
    return res->stdout_data.len == n && memcmp(res->stdout_data.data, want, n) == 0;
}

/* One request per language, plus a timeout and a rejection. */
static void each_language_through_the_fleet(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "lang", 3);
    it_worker w;
    it_worker_start(&w, &t, "lang-w1", NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);

    struct {
        cf_language lang;
        const char *code;
        const char *want;
    } cases[] = {
        {CF_LANG_SHELL, "echo hello from sh", "hello from sh\n"},
        {CF_LANG_PYTHON, "import sys; print('py', sys.version_info[0])", "py 3\n"},
        {CF_LANG_JAVASCRIPT, "console.log('js', 1 + 1)", "js 2\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_request req;
        it_request_init(&req, cases[i].lang, cases[i].code);
        cf_result res;
        it_submit_wait(d, &req, 60 * SEC, &res);
        check_result(&res, CF_STATUS_SUCCESS, cf_language_name(cases[i].lang));
        assert_true(stdout_is(&res, cases[i].want));
        assert_string_equal(res.id, req.id);
        assert_string_equal(res.meta.worker, "lang-w1");
        assert_string_equal(res.meta.backend, "process");
        assert_string_equal(res.meta.isolation, "host_local");
        assert_true(res.has_exit_code && res.exit_code == 0);
        cf_request_clear(&req);
        cf_result_clear(&res);
    }

    /* command: argv, with an argument */
    cf_request req;
    it_request_init(&req, CF_LANG_COMMAND, "echo");
    req.argv = realloc(req.argv, 3 * sizeof(char *));
    req.argv[1] = strdup("argv works");
    req.argv[2] = NULL;
    req.argc = 2;
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_SUCCESS, "command");
    assert_true(stdout_is(&res, "argv works\n"));
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* a failing program: status failed with its exit code */
    it_request_init(&req, CF_LANG_SHELL, "echo oops >&2; exit 3");
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_FAILED, "exit 3");
    assert_true(res.has_exit_code);
    assert_int_equal(res.exit_code, 3);
    assert_int_equal(res.stderr_data.len, 5);
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* a timeout */
    it_request_init(&req, CF_LANG_SHELL, "sleep 30");
    req.policy.timeout_us = 500 * 1000;
    int64_t t0 = cf_mono_us();
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_TIMEOUT, "timeout");
    assert_true(cf_mono_us() - t0 < 10 * SEC);
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* rejected: the process backend cannot take the network away */
    it_request_init(&req, CF_LANG_SHELL, "echo should not run");
    req.policy.network = CF_NET_DISABLED;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_REJECTED, "unenforceable policy");
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "network"));
    assert_int_equal(res.stdout_data.len, 0);
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* rejected: deadline already passed */
    it_request_init(&req, CF_LANG_SHELL, "echo too late");
    req.deadline_us = cf_now_us() - SEC;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_REJECTED, "deadline");
    assert_non_null(strstr(res.reason, "deadline"));
    cf_request_clear(&req);
    cf_result_clear(&res);

    cf_dispatcher_destroy(d);
    int st = it_worker_stop(&w, SIGTERM, 30000);
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        it_worker_dump_log(&w);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Three workers in one group share a 6-partition topic: every request is
 * answered, and the work is spread. */
static void three_workers_share_partitions(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "three", 6);
    it_worker w[3];
    it_worker_start(&w[0], &t, "three-w1", NULL);
    it_worker_start(&w[1], &t, "three-w2", NULL);
    it_worker_start(&w[2], &t, "three-w3", NULL);
    /* Let the group settle so all three own partitions. */
    for (int i = 0; i < 3; i++)
        assert_true(it_worker_wait_log(&w[i], "assigned", 30000));
    sleep(2);
    cf_dispatcher *d = it_dispatcher_new(&t);
    enum { N = 60 };
    cf_request reqs[N];
    cf_error err;
    cf_error_clear(&err);
    for (int i = 0; i < N; i++) {
        char code[64];
        snprintf(code, sizeof(code), "echo %d", i);
        it_request_init(&reqs[i], CF_LANG_SHELL, code);
        assert_int_equal(cf_dispatcher_submit(d, &reqs[i], &err), 0);
    }
    int by_worker[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        cf_result res = {0};
        if (cf_dispatcher_wait(d, reqs[i].id, 60 * SEC, &res, &err) < 0)
            fail_msg("request %d: %s", i, err.msg);
        check_result(&res, CF_STATUS_SUCCESS, "shared");
        char want[16];
        snprintf(want, sizeof(want), "%d\n", i);
        assert_true(stdout_is(&res, want));
        for (int k = 0; k < 3; k++)
            if (strcmp(res.meta.worker, w[k].id) == 0)
                by_worker[k]++;
        cf_result_clear(&res);
        cf_request_clear(&reqs[i]);
    }
    assert_int_equal(by_worker[0] + by_worker[1] + by_worker[2], N);
    int used = (by_worker[0] > 0) + (by_worker[1] > 0) + (by_worker[2] > 0);
    print_message("requests per worker: %d %d %d\n", by_worker[0], by_worker[1], by_worker[2]);
    assert_true(used >= 2);
    cf_dispatcher_destroy(d);
    for (int i = 0; i < 3; i++)
        assert_true(it_worker_stop(&w[i], SIGTERM, 30000) >= 0);
}

/* A worker SIGKILLed in the middle of an execution loses nothing: the
 * request is redelivered to another worker of the group and answered. */
static void sigkill_mid_execution_is_redelivered(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "kill", 1);
    it_worker w1, w2;
    it_worker_start(&w1, &t, "kill-w1", NULL);
    assert_true(it_worker_wait_log(&w1, "assigned", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "sleep 2; echo survived");
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    char needle[160];
    snprintf(needle, sizeof(needle), "request %s", req.id);
    if (!it_worker_wait_log(&w1, needle, 30000)) {
        it_worker_dump_log(&w1);
        fail_msg("worker 1 never took the request");
    }
    it_worker_stop(&w1, SIGKILL, 5000);
    it_worker_start(&w2, &t, "kill-w2", NULL);
    cf_result res = {0};
    if (cf_dispatcher_wait(d, req.id, 90 * SEC, &res, &err) < 0) {
        it_worker_dump_log(&w2);
        fail_msg("no result after the SIGKILL: %s", err.msg);
    }
    check_result(&res, CF_STATUS_SUCCESS, "redelivered");
    assert_true(stdout_is(&res, "survived\n"));
    assert_string_equal(res.meta.worker, "kill-w2");
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w2, SIGTERM, 30000) >= 0);
}

/* An id that the dispatcher's partitioner puts on partition p of 2. */
static void id_on_partition(int p, const char *tag, char *id, size_t size)
{
    for (unsigned n = 0;; n++) {
        snprintf(id, size, "%s-%d-%u-%d", tag, p, n, (int)getpid());
        if (cf_kafka_partition_for_key(id, 2) == p)
            return;
    }
}

/* The failover bound (issue 15): after a worker is SIGKILLed, a request on
 * the partition it owned is answered by the other worker within 10 s
 * (session.timeout.ms 6 s, the worker's default, plus the rebalance). */
static void failover_within_ten_seconds(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "failover", 2);
    it_worker a, b;
    it_worker_start(&a, &t, "fo-a", NULL);
    assert_true(it_worker_wait_log(&a, "assigned", 30000));
    it_worker_start(&b, &t, "fo-b", NULL);
    assert_true(it_worker_wait_log(&b, "assigned", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);
    /* Which partition is A's?  Probe both until the split has settled. */
    int pa = -1;
    int64_t until = cf_mono_us() + 60 * SEC;
    while (pa < 0 && cf_mono_us() < until) {
        int owners = 0;
        for (int p = 0; p < 2; p++) {
            char id[96];
            id_on_partition(p, "fo-probe", id, sizeof(id));
            cf_request req;
            it_request_init(&req, CF_LANG_COMMAND, "/bin/true");
            free(req.id);
            req.id = strdup(id);
            cf_result res = {0};
            it_submit_wait(d, &req, 30 * SEC, &res);
            if (res.meta.worker && strcmp(res.meta.worker, "fo-a") == 0) {
                pa = p;
                owners++;
            }
            cf_result_clear(&res);
            cf_request_clear(&req);
        }
        if (owners > 1)
            pa = -1; /* A still has both: B has not got its share yet */
        if (pa < 0)
            usleep(300 * 1000);
    }
    if (pa < 0) {
        it_worker_dump_log(&a);
        fail_msg("worker A never owned exactly one partition");
    }
    it_worker_stop(&a, SIGKILL, 5000);
    int64_t t0 = cf_mono_us();
    char id[96];
    id_on_partition(pa, "fo-after", id, sizeof(id));
    cf_request req;
    it_request_init(&req, CF_LANG_COMMAND, "/bin/true");
    free(req.id);
    req.id = strdup(id);
    cf_result res = {0};
    if (cf_dispatcher_submit(d, &req, &err) < 0 || cf_dispatcher_wait(d, id, 60 * SEC, &res, &err) < 0) {
        it_worker_dump_log(&b);
        fail_msg("no answer after the kill: %s", err.msg);
    }
    int64_t took = cf_mono_us() - t0;
    print_message("failover: answered %.2f s after the SIGKILL\n", took / 1e6);
    check_result(&res, CF_STATUS_SUCCESS, "after failover");
    assert_string_equal(res.meta.worker, "fo-b");
    assert_true(took < 10 * SEC);
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&b, SIGTERM, 30000) >= 0);
}

/* Whether this (the host's) mount namespace has a mount at or below any
 * path starting with prefix. */
static bool host_mount_below(const char *prefix)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint ... */
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        for (int i = 0; tok && i < 4; i++)
            tok = strtok_r(NULL, " ", &save);
        found = tok && strncmp(tok, prefix, strlen(prefix)) == 0;
    }
    fclose(f);
    return found;
}

/* Entries of dir whose names start with prefix. */
static int entries_named(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Whether a cgroup named <prefix>... exists in any hierarchy. */
static bool cgroup_named(const char *prefix)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "find /sys/fs/cgroup -maxdepth 7 -type d -name '%s*' 2>/dev/null | grep -q .",
             prefix);
    return system(cmd) == 0;
}

/* A SIGKILLed sandbox worker (dead, its program gone): its executions'
 * tmpfs with the tenant's files went with it (the worker's own mount
 * namespace), what stays (directories, cgroups) the next worker's sweep
 * removes and says so, and that worker's normal shutdown leaves nothing
 * (no zygote share z0, z1). */
static void sweep_after_sigkill(const it_topics *t, cf_dispatcher *d, const char *id, pid_t dead,
                                const char *work_root, const char *const *extra)
{
    char tag[64], inst[PATH_MAX], needle[128];
    snprintf(tag, sizeof(tag), "cfsb-%d.", (int)dead);
    snprintf(inst, sizeof(inst), "%s/%s", work_root, tag);
    int64_t until = cf_mono_us() + 10 * SEC;
    while (host_mount_below(inst) && cf_mono_us() < until)
        usleep(50 * 1000);
    if (host_mount_below(inst))
        fail_msg("the SIGKILLed worker's mounts below %s stayed on the host", inst);
    assert_true(entries_named(work_root, tag) > 0); /* what the sweep is for */

    it_worker w;
    it_worker_start(&w, t, "orphan-sbx2", extra);
    snprintf(needle, sizeof(needle), "worker pid %d died without cleaning up; swept its instance %s", (int)dead,
             tag);
    if (!it_worker_wait_log(&w, needle, 60000) || !it_worker_wait_log(&w, "assigned", 30000)) {
        it_worker_dump_log(&w);
        fail_msg("the next worker did not say it swept the dead worker's instance");
    }
    if (entries_named(work_root, tag) || cgroup_named(tag))
        fail_msg("the dead worker's %s* directories or cgroups outlived the sweep", tag);
    /* The SIGKILLed worker's request is redelivered to this one and sleeps
     * 30-39 s: a SIGTERM would wait it out (shutdown-grace, 30 s).  Cancel
     * it and wait for its answer, so that the stop below is prompt. */
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_cancel(d, id, "test over", 60 * SEC, &err), 0);
    cf_result res = {0};
    if (cf_dispatcher_wait(d, id, 120 * SEC, &res, &err) < 0) {
        it_worker_dump_log(&w);
        fail_msg("the redelivered request was never answered: %s", err.msg);
    }
    cf_result_clear(&res);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 30000), 0);
    if (entries_named(work_root, "cfsb-")) {
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof(cmd), "find '%s' -ls", work_root);
        if (system(cmd) != 0)
            print_message("find failed\n");
        fail_msg("a normal shutdown left directories in %s", work_root);
    }
}

/* Whether a process whose command line contains needle runs.  The first
 * character goes in brackets so that the shell running pgrep, whose own
 * command line holds the pattern, does not match it. */
static bool process_running(const char *needle)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "pgrep -f '[%c]%s' >/dev/null", needle[0], needle + 1);
    return system(cmd) == 0;
}

/* A SIGKILLed worker takes the programs it was running with it (they
 * would otherwise run on beside the request's redelivery): the program of
 * the process backend, and on the sandbox its whole pid namespace, its
 * mounts; the next sandbox worker sweeps the rest (sweep_after_sigkill). */
static void sigkill_takes_its_programs_along(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    const char *backends[] = {"process", "sandbox"};
    for (int b = 0; b < 2; b++) {
        if (b == 1 && geteuid() != 0) {
            print_message("not root: the sandbox part is skipped\n");
            break;
        }
        it_topics t;
        it_topics_create(&t, "orphan", 1);
        char a_backend[64], work_root[] = "/tmp/cf-orphan-XXXXXX", a_root[64];
        snprintf(a_backend, sizeof(a_backend), "--backends=%s", backends[b]);
        /* Its own work root: the leftovers counted are this test's. */
        assert_non_null(mkdtemp(work_root));
        assert_int_equal(chmod(work_root, 0711), 0); /* the run uids pass through */
        snprintf(a_root, sizeof(a_root), "--work-root=%s", work_root);
        const char *extra[] = {a_backend, a_root, NULL};
        it_worker w;
        it_worker_start(&w, &t, b ? "orphan-sbx" : "orphan-proc", extra);
        assert_true(it_worker_wait_log(&w, "assigned", 30000));
        cf_dispatcher *d = it_dispatcher_new(&t);
        /* A unique sleep to find it by; on the sandbox also a child of the
         * program's, which only the pid namespace's end stops. */
        char marker[64], code[200];
        snprintf(marker, sizeof(marker), "sleep 3%d.%d", (int)(getpid() % 10), b);
        snprintf(code, sizeof(code), b ? "%s & exec %s" : "exec %s", marker, marker);
        cf_request req;
        it_request_init(&req, CF_LANG_SHELL, code);
        req.policy.timeout_us = 60 * 1000000LL;
        cf_error err;
        cf_error_clear(&err);
        assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
        int64_t until = cf_mono_us() + 30 * 1000000LL;
        while (!process_running(marker) && cf_mono_us() < until)
            usleep(100 * 1000);
        if (!process_running(marker)) {
            it_worker_dump_log(&w);
            fail_msg("%s: the program never started", backends[b]);
        }
        pid_t dead = w.pid;
        it_worker_stop(&w, SIGKILL, 5000);
        until = cf_mono_us() + 5 * 1000000LL;
        while (process_running(marker) && cf_mono_us() < until)
            usleep(100 * 1000);
        if (process_running(marker)) {
            char cmd[128];
            snprintf(cmd, sizeof(cmd), "pkill -KILL -f '[%c]%s'", marker[0], marker + 1);
            if (system(cmd) != 0)
                print_message("pkill failed\n");
            fail_msg("%s: the program outlived its SIGKILLed worker", backends[b]);
        }
        if (b == 1)
            sweep_after_sigkill(&t, d, req.id, dead, work_root, extra);
        rmdir(work_root);
        cf_request_clear(&req);
        cf_dispatcher_destroy(d);
    }
}

/* Malformed messages: without a readable id they go to the dead-letter
 * topic with their origin in headers; with one they are answered
 * "rejected".  Either way the worker keeps serving. */
static void malformed_messages_dead_letter_or_rejected(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "bad", 1);
    it_worker w;
    it_worker_start(&w, &t, "bad-w1", NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);

    static const char garbage[] = "\xc1\xc1 this is not msgpack";
    assert_int_equal(cf_dispatcher_produce_raw(d, t.requests, "k1", 2, garbage, sizeof(garbage) - 1, &err), 0);
    /* A map with an id but a wrong type for language. */
    static const unsigned char with_id[] = {0x83, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0xa6, 'b', 'a', 'd', '-', 'i',
                                            'd', 0xa8, 'l', 'a', 'n', 'g', 'u', 'a', 'g', 'e', 0x2a};
    assert_int_equal(cf_dispatcher_produce_raw(d, t.requests, "k2", 2, with_id, sizeof(with_id), &err), 0);
    assert_int_equal(cf_dispatcher_flush(d, 10 * SEC, &err), 0);

    cf_result res = {0};
    if (cf_dispatcher_wait(d, "bad-id", 60 * SEC, &res, &err) < 0) {
        it_worker_dump_log(&w);
        fail_msg("no rejected result for the malformed request: %s", err.msg);
    }
    check_result(&res, CF_STATUS_REJECTED, "malformed with id");
    assert_non_null(strstr(res.reason, "language"));
    cf_result_clear(&res);

    it_message *dl = it_consume_first(t.dlq, 30000);
    assert_non_null(dl);
    assert_int_equal(dl->len, sizeof(garbage) - 1);
    assert_memory_equal(dl->payload, garbage, dl->len);
    char buf[256];
    assert_non_null(it_message_header(dl, "codefleet-origin-topic", buf, sizeof(buf)));
    assert_string_equal(buf, t.requests);
    assert_non_null(it_message_header(dl, "codefleet-origin-partition", buf, sizeof(buf)));
    assert_string_equal(buf, "0");
    assert_non_null(it_message_header(dl, "codefleet-origin-offset", buf, sizeof(buf)));
    assert_string_equal(buf, "0");
    assert_non_null(it_message_header(dl, "codefleet-reason", buf, sizeof(buf)));
    assert_non_null(strstr(buf, "malformed"));
    it_message_free(dl);

    /* Still up and serving. */
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo still here");
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_SUCCESS, "after malformed");
    assert_true(stdout_is(&res, "still here\n"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(kill(w.pid, 0) == 0);
    int st = it_worker_stop(&w, SIGTERM, 30000);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* SPEC 4.2: a dead letter carries the original value, and an empty one is
 * empty, not a null (a tombstone, which compaction would treat as a
 * delete). */
static void empty_request_dead_letters_as_empty(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "empty", 1);
    it_worker w;
    it_worker_start(&w, &t, "empty-w1", NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_produce_raw(d, t.requests, "e1", 2, "", 0, &err), 0);
    assert_int_equal(cf_dispatcher_flush(d, 10 * SEC, &err), 0);
    /* What the request topic holds is an empty value (not a null). */
    it_message *in = it_consume_first(t.requests, 30000);
    assert_non_null(in);
    assert_false(in->null_value);
    it_message_free(in);
    it_message *dl = it_consume_first(t.dlq, 60000);
    if (!dl) {
        it_worker_dump_log(&w);
        fail_msg("no dead letter for the empty request");
    }
    assert_int_equal(dl->len, 0);
    assert_false(dl->null_value);
    assert_string_equal(dl->key, "e1");
    char buf[256];
    assert_non_null(it_message_header(dl, "codefleet-reason", buf, sizeof(buf)));
    it_message_free(dl);
    cf_dispatcher_destroy(d);
    int st = it_worker_stop(&w, SIGTERM, 30000);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* SIGTERM while busy: running executions finish within the grace period,
 * queued ones stay uncommitted; a worker started afterwards answers the
 * rest.  Every request gets exactly its result. */
static void graceful_shutdown_loses_nothing(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "term", 2);
    it_worker w1, w2;
    static const char *const args[] = {"--slots=2", "--prefetch=8", NULL};
    it_worker_start(&w1, &t, "term-w1", args);
    assert_true(it_worker_wait_log(&w1, "assigned", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    enum { N = 16 };
    cf_request reqs[N];
    cf_error err;
    cf_error_clear(&err);
    for (int i = 0; i < N; i++) {
        char code[64];
        /* Long enough that the batch outlasts the dispatcher's start (its
         * result consumer may take a second or two to be assigned on a
         * loaded machine; at 0.3 s a request the whole batch was once done
         * before the first wait returned). */
        snprintf(code, sizeof(code), "sleep %s; echo %d", i == 0 ? "0.3" : "1", i);
        it_request_init(&reqs[i], CF_LANG_SHELL, code);
        assert_int_equal(cf_dispatcher_submit(d, &reqs[i], &err), 0);
    }
    /* Let a few finish, then stop the worker in the middle of the batch. */
    cf_result res = {0};
    assert_int_equal(cf_dispatcher_wait(d, reqs[0].id, 60 * SEC, &res, &err), 0);
    cf_result_clear(&res);
    int st = it_worker_stop(&w1, SIGTERM, 60000);
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        it_worker_dump_log(&w1);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(it_worker_log_contains(&w1, "stopped:"));
    /* The running executions finished within the grace period. */
    assert_false(it_worker_log_contains(&w1, "abandoning"));

    it_worker_start(&w2, &t, "term-w2", args);
    int from_w2 = 0;
    for (int i = 0; i < N; i++) {
        if (i > 0 && cf_dispatcher_wait(d, reqs[i].id, 90 * SEC, &res, &err) < 0) {
            it_worker_dump_log(&w2);
            fail_msg("request %d lost: %s", i, err.msg);
        }
        if (i == 0)
            continue;
        check_result(&res, CF_STATUS_SUCCESS, "after shutdown");
        char want[16];
        snprintf(want, sizeof(want), "%d\n", i);
        assert_true(stdout_is(&res, want));
        from_w2 += strcmp(res.meta.worker, "term-w2") == 0;
        cf_result_clear(&res);
    }
    print_message("answered by the second worker: %d of %d\n", from_w2, N - 1);
    assert_true(from_w2 > 0);
    for (int i = 0; i < N; i++)
        cf_request_clear(&reqs[i]);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w2, SIGTERM, 30000) >= 0);
}

/* An execution longer than max.poll.interval.ms does not get the worker
 * evicted from the group (the main loop keeps polling while slots run). */
static void long_execution_keeps_membership(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "long", 1);
    it_worker w;
    static const char *const args[] = {"--kafka.max.poll.interval.ms=7000", NULL};
    it_worker_start(&w, &t, "long-w1", args);
    assert_true(it_worker_wait_log(&w, "assigned", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "sleep 10; echo done");
    req.policy.timeout_us = 30 * SEC;
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_SUCCESS, "long");
    assert_true(stdout_is(&res, "done\n"));
    assert_true(res.wall_time_us >= 10 * SEC);
    assert_false(it_worker_log_contains(&w, "revoked"));
    assert_false(it_worker_log_contains(&w, "lost"));
    assert_false(it_worker_log_contains(&w, "MAX_POLL_EXCEEDED"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}


/* A result larger than the result topic accepts is still answered: its
 * streams are cut and a diagnostic says why (here the producer's own
 * message.max.bytes plays the topic's limit). */
static void oversized_result_is_slimmed_not_lost(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "big", 1);
    it_worker w;
    static const char *const args[] = {"--kafka.message.max.bytes=1000000", NULL};
    it_worker_start(&w, &t, "big-w1", args);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_PYTHON, "import sys; sys.stdout.write('x' * (3 << 20))");
    req.policy.max_stdout_bytes = 4 << 20;
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_result(&res, CF_STATUS_SUCCESS, "oversized");
    assert_true(res.stdout_truncated);
    assert_int_equal(res.stdout_data.len, 64 * 1024);
    assert_true(res.n_diagnostics >= 1);
    assert_non_null(strstr(res.diagnostics[res.n_diagnostics - 1].message, "message size limit"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

/* Results wait for company only while requests wait for a slot
 * (result-batch, the producer's linger): with a linger of 1 s, a lone
 * request is still answered at once, and under a backlog results come in
 * batches. */
static void results_wait_only_under_a_backlog(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "batch", 1);
    it_worker w;
    const char *args[] = {"--result-batch=1s", "--slots=1", NULL};
    it_worker_start(&w, &t, "batch-w1", args);
    assert_true(it_worker_wait_log(&w, "assigned", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);
    /* No backlog: each answer comes well before the linger would send it. */
    for (int i = 0; i < 4; i++) {
        cf_request req;
        it_request_init(&req, CF_LANG_SHELL, "echo alone");
        int64_t t0 = cf_mono_us();
        cf_result res = {0};
        it_submit_wait(d, &req, 60 * SEC, &res);
        int64_t took = cf_mono_us() - t0;
        check_result(&res, CF_STATUS_SUCCESS, "alone");
        print_message("alone %d: answered in %lld ms\n", i, (long long)(took / 1000));
        if (i > 0) /* the first may wait for the producer's metadata */
            assert_true(took < 500000);
        cf_result_clear(&res);
        cf_request_clear(&req);
    }
    /* A backlog: 6 requests of 0.2 s on one slot.  The first results wait
     * (up to the 1 s linger, or until the backlog is gone) and arrive
     * together with later ones; nothing is lost. */
    enum { N = 6 };
    cf_request reqs[N];
    int64_t t0 = cf_mono_us();
    for (int i = 0; i < N; i++) {
        it_request_init(&reqs[i], CF_LANG_SHELL, "sleep 0.2; echo queued");
        assert_int_equal(cf_dispatcher_submit(d, &reqs[i], &err), 0);
    }
    int64_t at[N];
    for (int i = 0; i < N; i++) {
        cf_result res = {0};
        if (cf_dispatcher_wait_any(d, 60 * SEC, &res, &at[i], &err) < 0)
            fail_msg("backlog result %d: %s", i, err.msg);
        check_result(&res, CF_STATUS_SUCCESS, "queued");
        cf_result_clear(&res);
        print_message("backlog result %d after %lld ms\n", i, (long long)((at[i] - t0) / 1000));
    }
    /* Without batching the first would arrive after ~0.2 s. */
    assert_true(at[0] - t0 >= 900000);
    /* ... and it came with company: the next one within 100 ms of it. */
    assert_true(at[1] - at[0] < 100000);
    for (int i = 0; i < N; i++)
        cf_request_clear(&reqs[i]);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_language_through_the_fleet),
        cmocka_unit_test(malformed_messages_dead_letter_or_rejected),
        cmocka_unit_test(empty_request_dead_letters_as_empty),
        cmocka_unit_test(three_workers_share_partitions),
        cmocka_unit_test(sigkill_mid_execution_is_redelivered),
        cmocka_unit_test(sigkill_takes_its_programs_along),
        cmocka_unit_test(failover_within_ten_seconds),
        cmocka_unit_test(graceful_shutdown_loses_nothing),
        cmocka_unit_test(long_execution_keeps_membership),
        cmocka_unit_test(oversized_result_is_slimmed_not_lost),
        cmocka_unit_test(results_wait_only_under_a_backlog),
    };
    return cmocka_run_group_tests_name("fleet", tests, NULL, NULL);
}
