/* Cancel through the fleet on the real broker (SPEC.md section 12): a
 * running request is killed and answered `cancelled`, a waiting one is
 * answered without running, one that has not arrived yet never runs, a
 * finished one is left alone, and a cancel only ever reaches requests of
 * its own request topic. */
#include "it_support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_kafka.h"
#include "cf_util.h"

#define SEC 1000000LL

static void pid_file(const char *id, char *buf, size_t size)
{
    snprintf(buf, size, "/tmp/cf-it-cancel-%s.pid", id);
}

/* A request that writes its pid to a file named after its id, then runs
 * for `seconds` (exec: the pid is the long-running program's). */
static void long_request(cf_request *req, int seconds)
{
    it_request_init(req, CF_LANG_SHELL, NULL);
    char pf[200], code[700];
    pid_file(req->id, pf, sizeof(pf));
    snprintf(code, sizeof(code), "echo $$ > %s.tmp && mv %s.tmp %s && exec sleep %d", pf, pf, pf, seconds);
    cf_bytes_set(&req->code, code, strlen(code));
}

/* The pid the request wrote, once it runs (0 on timeout). */
static pid_t wait_running(const char *id, int64_t timeout_us)
{
    char pf[200];
    pid_file(id, pf, sizeof(pf));
    int64_t until = cf_mono_us() + timeout_us;
    while (cf_mono_us() < until) {
        FILE *f = fopen(pf, "r");
        if (f) {
            long pid = 0;
            int n = fscanf(f, "%ld", &pid);
            fclose(f);
            if (n == 1 && pid > 0)
                return (pid_t)pid;
        }
        usleep(20000);
    }
    return 0;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void check_cancelled(const cf_result *res, const char *what, const char *want_reason)
{
    if (res->status != CF_STATUS_CANCELLED)
        fail_msg("%s: status %s (%s), want cancelled", what, cf_status_name(res->status),
                 res->reason ? res->reason : "-");
    if (!res->reason || !strstr(res->reason, want_reason))
        fail_msg("%s: reason \"%s\" lacks \"%s\"", what, res->reason ? res->reason : "", want_reason);
}

static void cancel_running_request(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "cancel-run", 2);
    it_worker w;
    it_worker_start(&w, &t, "cancel-run-w1", NULL);
    assert_true(it_worker_wait_log(&w, "reading cancels from", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);
    cf_request req;
    long_request(&req, 60);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    pid_t pid = wait_running(req.id, 60 * SEC);
    if (!pid) {
        it_worker_dump_log(&w);
        fail_msg("the request never ran");
    }
    int64_t t0 = cf_mono_us();
    if (cf_dispatcher_cancel(d, req.id, "the user pressed stop", 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    cf_result res = {0};
    if (cf_dispatcher_wait(d, req.id, 30 * SEC, &res, &err) < 0)
        fail_msg("waiting: %s", err.msg);
    int64_t took = cf_mono_us() - t0;
    print_message("cancel to result: %lld ms\n", (long long)(took / 1000));
    check_cancelled(&res, "running", "cancelled by its sender: the user pressed stop; the program was killed while it ran");
    assert_true(took < 20 * SEC); /* the program would have run 60 s */
    /* The program itself is gone, not only its answer. */
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(errno, ESRCH);
    char pf[200];
    pid_file(req.id, pf, sizeof(pf));
    unlink(pf);
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
    assert_true(it_worker_log_contains(&w, "cancelled while it ran"));
}

static void cancel_waiting_request(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "cancel-wait", 1);
    it_worker w;
    const char *args[] = {"--slots=1", NULL};
    it_worker_start(&w, &t, "cancel-wait-w1", args);
    assert_true(it_worker_wait_log(&w, "reading cancels from", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);
    cf_request first, second;
    long_request(&first, 3);
    long_request(&second, 1);
    assert_int_equal(cf_dispatcher_submit(d, &first, &err), 0);
    assert_int_equal(cf_dispatcher_submit(d, &second, &err), 0);
    assert_true(wait_running(first.id, 60 * SEC) > 0);
    usleep(300000); /* the second is taken and waits for the slot */
    if (cf_dispatcher_cancel(d, second.id, NULL, 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    cf_result res = {0};
    int64_t at = 0;
    /* The cancelled one answers first, long before the slot is free. */
    if (cf_dispatcher_wait_any(d, 30 * SEC, &res, &at, &err) < 0)
        fail_msg("waiting: %s", err.msg);
    assert_string_equal(res.id, second.id);
    check_cancelled(&res, "waiting", "cancelled by its sender; it never started");
    cf_result_clear(&res);
    if (cf_dispatcher_wait(d, first.id, 30 * SEC, &res, &err) < 0)
        fail_msg("waiting for the first: %s", err.msg);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    /* It never ran. */
    char pf[200];
    pid_file(second.id, pf, sizeof(pf));
    assert_false(file_exists(pf));
    pid_file(first.id, pf, sizeof(pf));
    unlink(pf);
    cf_request_clear(&first);
    cf_request_clear(&second);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
    /* It was taken out of the slot queue, not stopped at intake. */
    assert_true(it_worker_log_contains(&w, "cancelled while it waited for a slot"));
}

/* A cancel that comes before its request (the request still queued in
 * Kafka, on another worker, or simply sent later): the request never runs.
 * A finished request is not changed by a late cancel, and a cancel no one
 * can read (garbage) is skipped. */
static void cancel_before_and_after(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "cancel-early", 2);
    it_worker w;
    it_worker_start(&w, &t, "cancel-early-w1", NULL);
    assert_true(it_worker_wait_log(&w, "reading cancels from", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);

    assert_int_equal(cf_dispatcher_produce_raw(d, t.cancels, "k", 1, "\xc1garbage", 8, &err), 0);

    cf_request early;
    long_request(&early, 30);
    if (cf_dispatcher_cancel(d, early.id, "changed my mind", 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    usleep(500000);
    cf_result res = {0};
    it_submit_wait(d, &early, 30 * SEC, &res);
    check_cancelled(&res, "early", "changed my mind");
    cf_result_clear(&res);
    char pf[200];
    pid_file(early.id, pf, sizeof(pf));
    assert_false(file_exists(pf));

    cf_request done;
    it_request_init(&done, CF_LANG_SHELL, "echo finished");
    it_submit_wait(d, &done, 30 * SEC, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    if (cf_dispatcher_cancel(d, done.id, NULL, 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    /* No second answer for it, and the worker goes on serving. */
    assert_int_equal(cf_dispatcher_wait(d, done.id, 2 * SEC, &res, &err), -1);
    cf_request after;
    it_request_init(&after, CF_LANG_SHELL, "echo still here");
    it_submit_wait(d, &after, 30 * SEC, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    cf_request_clear(&early);
    cf_request_clear(&done);
    cf_request_clear(&after);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
    assert_true(it_worker_log_contains(&w, "skipped"));
}

/* A cancel only reaches requests of its own request topic: one worker
 * serving two (a tenant's profile beside the default), a cancel on the
 * default topic's cancel topic for the id of a request on the tenant's
 * topic changes nothing.  (Who may write which cancel topic is the
 * broker's ACLs: it_test_auth.) */
static void cancel_stays_on_its_topic(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t, other;
    it_topics_create(&t, "cancel-own", 1);
    it_topics_create(&other, "cancel-other", 1);
    char a_topic[200], a_res[200];
    snprintf(a_topic, sizeof(a_topic), "--profile.other.topic=%s", other.requests);
    snprintf(a_res, sizeof(a_res), "--profile.other.result-topic=%s", other.results);
    const char *args[] = {a_topic, a_res, "--profile.other.backends=process", "--profile.other.network=enabled", NULL};
    it_worker w;
    it_worker_start(&w, &t, "cancel-own-w1", args);
    assert_true(it_worker_wait_log(&w, "reading cancels from 2 partition(s)", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_dispatcher *d2 = it_dispatcher_new(&other);
    cf_error err;
    cf_error_clear(&err);
    cf_request req;
    long_request(&req, 2);
    assert_int_equal(cf_dispatcher_submit(d2, &req, &err), 0);
    assert_true(wait_running(req.id, 60 * SEC) > 0);
    if (cf_dispatcher_cancel(d, req.id, "not mine to cancel", 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    cf_result res = {0};
    if (cf_dispatcher_wait(d2, req.id, 30 * SEC, &res, &err) < 0)
        fail_msg("waiting: %s", err.msg);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    /* Through its own topic it is cancellable. */
    cf_request req2;
    long_request(&req2, 60);
    assert_int_equal(cf_dispatcher_submit(d2, &req2, &err), 0);
    assert_true(wait_running(req2.id, 60 * SEC) > 0);
    if (cf_dispatcher_cancel(d2, req2.id, NULL, 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    if (cf_dispatcher_wait(d2, req2.id, 30 * SEC, &res, &err) < 0)
        fail_msg("waiting: %s", err.msg);
    check_cancelled(&res, "own topic", "cancelled by its sender");
    cf_result_clear(&res);
    char pf[200];
    pid_file(req.id, pf, sizeof(pf));
    unlink(pf);
    pid_file(req2.id, pf, sizeof(pf));
    unlink(pf);
    cf_request_clear(&req);
    cf_request_clear(&req2);
    cf_dispatcher_destroy(d);
    cf_dispatcher_destroy(d2);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

/* With the idempotency store, a request that finished and is then
 * cancelled and sent again (a redelivery, or its client retrying) is
 * answered with its stored result, not contradicted by `cancelled`. */
static void cancel_after_finish_keeps_stored_result(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "cancel-store", 1);
    static char a_redis[300];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    const char *args[] = {a_redis, NULL};
    it_worker w;
    it_worker_start(&w, &t, "cancel-store-w1", args);
    assert_true(it_worker_wait_log(&w, "reading cancels from", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_error err;
    cf_error_clear(&err);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo stored");
    cf_result res = {0};
    it_submit_wait(d, &req, 30 * SEC, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    if (cf_dispatcher_cancel(d, req.id, "too late", 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    usleep(500000);
    it_submit_wait(d, &req, 30 * SEC, &res);
    if (res.status != CF_STATUS_SUCCESS) {
        it_worker_dump_log(&w);
        fail_msg("replay: status %s (%s), want the stored success", cf_status_name(res.status),
                 res.reason ? res.reason : "-");
    }
    assert_int_equal(res.stdout_data.len, 7);
    cf_result_clear(&res);
    /* A new request with a remembered cancel still never runs. */
    cf_request early;
    long_request(&early, 30);
    if (cf_dispatcher_cancel(d, early.id, NULL, 10 * SEC, &err) < 0)
        fail_msg("cancel: %s", err.msg);
    usleep(500000);
    it_submit_wait(d, &early, 30 * SEC, &res);
    check_cancelled(&res, "remembered, with the store", "cancelled by its sender");
    cf_result_clear(&res);
    char pf[200];
    pid_file(early.id, pf, sizeof(pf));
    assert_false(file_exists(pf));
    cf_request_clear(&req);
    cf_request_clear(&early);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cancel_running_request),
        cmocka_unit_test(cancel_waiting_request),
        cmocka_unit_test(cancel_before_and_after),
        cmocka_unit_test(cancel_stays_on_its_topic),
        cmocka_unit_test(cancel_after_finish_keeps_stored_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
