/* Request ids as idempotency keys, through the fleet (real broker, real
 * Redis, real workers): a resubmitted request is answered from the store
 * without running again, a reused id with another body is refused, two
 * deliveries of one id never run side by side, and a run killed with its
 * worker is redelivered as attempt 2; a tenant's stored results are held
 * to its profile's quota. */
#include "it_support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_dispatcher.h"
#include "cf_redis.h"
#include "cf_schema.h"
#include "cf_util.h"

#define SEC 1000000LL

static void start_worker(it_worker *w, const it_topics *t, const char *id, const char *slots)
{
    static char a_redis[300], a_slots[64];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    snprintf(a_slots, sizeof(a_slots), "--slots=%s", slots);
    const char *extra[] = {a_redis, a_slots, "--idempotency-lease=3s", NULL};
    it_worker_start(w, t, id, extra);
    if (!it_worker_wait_log(w, "assigned", 30000)) {
        it_worker_dump_log(w);
        fail_msg("worker %s was never assigned", id);
    }
}

static void wait_result(cf_dispatcher *d, const char *id, const it_worker *w, cf_result *res)
{
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_wait(d, id, 60 * SEC, res, &err) < 0) {
        it_worker_dump_log(w);
        fail_msg("no result for %s: %s", id, err.msg);
    }
}

static bool same_stdout(const cf_result *a, const cf_result *b)
{
    return a->stdout_data.len == b->stdout_data.len && a->stdout_data.len > 0 &&
           memcmp(a->stdout_data.data, b->stdout_data.data, a->stdout_data.len) == 0;
}

/* Resubmitting an answered id: the stored result, marked replay, and the
 * program did not run again (its output is a fresh random value per run).
 * The same id with another body: rejected. */
static void resubmission_replays_and_reuse_is_refused(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "idem", 1);
    it_worker w;
    start_worker(&w, &t, "idem-w1", "2");
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "cat /proc/sys/kernel/random/uuid");
    cf_error err;
    cf_error_clear(&err);
    cf_result first = {0}, again = {0}, reused = {0};
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &first);
    assert_int_equal(first.status, CF_STATUS_SUCCESS);
    assert_false(first.meta.replay);
    assert_int_equal(first.meta.attempt, 1);

    /* The client submits it again (a new message, same id and body; the
     * dispatcher stamps a new created_us, which does not count). */
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &again);
    assert_int_equal(again.status, CF_STATUS_SUCCESS);
    assert_true(again.meta.replay);
    assert_int_equal(again.meta.attempt, 1); /* a resubmission, not a redelivery */
    assert_true(same_stdout(&first, &again));

    /* Resubmitted after its deadline: it was answered, so the answer is
     * replayed rather than refused (the deadline is delivery metadata). */
    cf_result late = {0};
    req.deadline_us = cf_now_us() - 1000000;
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &late);
    assert_int_equal(late.status, CF_STATUS_SUCCESS);
    assert_true(late.meta.replay);
    assert_true(same_stdout(&first, &late));
    cf_result_clear(&late);
    req.deadline_us = 0;

    /* Same id, different program. */
    cf_bytes_set(&req.code, "echo other", 10);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &reused);
    assert_int_equal(reused.status, CF_STATUS_REJECTED);
    assert_non_null(reused.reason);
    assert_non_null(strstr(reused.reason, "id reused"));
    assert_false(reused.meta.replay);

    cf_result_clear(&first);
    cf_result_clear(&again);
    cf_result_clear(&reused);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

/* A big result is published whole but stored cut to idempotency-max-result
 * (256 KiB): its replay says so.  One tenant's big outputs cannot fill
 * Redis. */
static void big_results_are_stored_cut(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "idem-big", 1);
    it_worker w;
    start_worker(&w, &t, "idem-big-w", "1");
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "head -c 400000 /dev/zero | tr '\\0' x");
    cf_error err;
    cf_error_clear(&err);
    cf_result first = {0}, again = {0};
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &first);
    assert_int_equal(first.status, CF_STATUS_SUCCESS);
    assert_int_equal(first.stdout_data.len, 400000);
    assert_false(first.stdout_truncated);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &again);
    assert_true(again.meta.replay);
    assert_int_equal(again.status, CF_STATUS_SUCCESS);
    assert_true(again.stdout_truncated);
    assert_true(again.stdout_data.len <= 64 * 1024);
    bool said = false;
    for (size_t i = 0; i < again.n_diagnostics; i++)
        said |= again.diagnostics[i].message && strstr(again.diagnostics[i].message, "idempotency store") != NULL;
    assert_true(said);
    cf_result_clear(&first);
    cf_result_clear(&again);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

/* The first two answers to one id, as read from the result topic. */
typedef struct two_answers {
    const char *id;
    int n;
    cf_status status[2];
    bool replay[2];
    char out[2][128];
    size_t len[2];
} two_answers;

static int collect_two(void *ctx, const cf_result *res, const cf_error *decode_err, int32_t partition,
                       int64_t offset)
{
    (void)decode_err, (void)partition, (void)offset;
    two_answers *t = ctx;
    if (!res || !res->id || strcmp(res->id, t->id) != 0 || t->n >= 2)
        return t->n >= 2;
    t->status[t->n] = res->status;
    t->replay[t->n] = res->meta.replay;
    t->len[t->n] = res->stdout_data.len < sizeof(t->out[0]) ? res->stdout_data.len : sizeof(t->out[0]);
    if (t->len[t->n])
        memcpy(t->out[t->n], res->stdout_data.data, t->len[t->n]);
    t->n++;
    return t->n >= 2;
}

/* Two copies of one request submitted at once, two free slots: one runs,
 * the other waits for its lease and replays its result. */
static void concurrent_duplicates_run_once(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "idem-dup", 1);
    it_worker w;
    start_worker(&w, &t, "idem-w2", "2");
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "sleep 1; cat /proc/sys/kernel/random/uuid");
    cf_error err;
    cf_error_clear(&err);
    /* Produced under two different message keys: the pool's per-key order
     * does not keep them apart, the lease does. */
    cf_bytes enc = {0};
    assert_int_equal(cf_request_encode(&req, &enc, NULL), 0);
    assert_int_equal(cf_dispatcher_produce_raw(d, NULL, "copy-1", 6, enc.data, enc.len, &err), 0);
    assert_int_equal(cf_dispatcher_produce_raw(d, NULL, "copy-2", 6, enc.data, enc.len, &err), 0);
    free(enc.data);
    /* Both answers, read from the result topic: the collector keeps one
     * result per id (a duplicate arriving before the first wait would be
     * dropped there). */
    two_answers got = {.id = req.id};
    if (cf_dispatcher_tail(d, true, NULL, 120 * SEC, collect_two, &got, &err) < 0 || got.n < 2) {
        it_worker_dump_log(&w);
        fail_msg("%d of the two answers to %s: %s", got.n, req.id, err.msg);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(got.status[i], CF_STATUS_SUCCESS);
    assert_true(got.len[0] > 0 && got.len[0] == got.len[1] && memcmp(got.out[0], got.out[1], got.len[0]) == 0);
    assert_true(got.replay[0] != got.replay[1]);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

/* A worker SIGKILLed mid-run: its lease lapses, the partition's next owner
 * runs the request (attempt 2: the same message again) and answers once. */
static void killed_run_is_redelivered_as_attempt_two(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "idem-kill", 1);
    it_worker w1, w2;
    start_worker(&w1, &t, "idem-k1", "1");
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "sleep 2; echo survived");
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    /* Killed once its delivery is counted (the first attempt), not merely
     * queued: under a sanitizer the gap between the two is long enough for
     * the kill to land before the count, and the next delivery is then
     * rightly the first. */
    char needle[160];
    snprintf(needle, sizeof(needle), "request %s: delivery 1 recorded", req.id);
    if (!it_worker_wait_log(&w1, needle, 30000)) {
        it_worker_dump_log(&w1);
        fail_msg("worker 1 never took the request");
    }
    it_worker_stop(&w1, SIGKILL, 5000);
    start_worker(&w2, &t, "idem-k2", "1");
    cf_result res = {0};
    wait_result(d, req.id, &w2, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_string_equal(res.meta.worker, "idem-k2");
    assert_false(res.meta.replay);
    assert_int_equal(res.meta.attempt, 2);
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w2, SIGTERM, 30000) >= 0);
}

/* Redis unreachable: a request still runs, and its result says it ran
 * without replay protection; a request that needs a workspace fails with a
 * reason that says what to do, without the worker's internal addresses. */
static void redis_down_is_said_to_the_sender(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "idem-down", 1);
    /* A port nothing listens on (bound, then closed). */
    const char *extra[] = {"--redis=127.0.0.1:9", "--redis-retry-budget=300ms", NULL};
    it_worker w;
    it_worker_start(&w, &t, "idem-down-w", extra);
    assert_true(it_worker_wait_log(&w, "assigned", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo still here");
    cf_error err;
    cf_error_clear(&err);
    cf_result res = {0};
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    bool said = false;
    for (size_t i = 0; i < res.n_diagnostics; i++)
        said |= res.diagnostics[i].message && strstr(res.diagnostics[i].message, "without replay protection") != NULL;
    assert_true(said);
    cf_result_clear(&res);
    cf_request_clear(&req);

    it_request_init(&req, CF_LANG_SHELL, "echo x > f.txt");
    cf_str_set(&req.workspace, "idem-down-ws");
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    wait_result(d, req.id, &w, &res);
    assert_int_equal(res.status, CF_STATUS_INTERNAL_ERROR);
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "store unavailable"));
    assert_non_null(strstr(res.reason, "retry"));
    assert_null(strstr(res.reason, "127.0.0.1"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

/* A tenant's stored results are held to its profile's quota (issue 30,
 * part 4): past max-stored-results, or max-stored-result-bytes, a result
 * is kept a short while within the quota's grace (a quarter over it), then
 * not at all, answered all the same with a warning that says so; a
 * resubmission of one not kept runs again, what was kept is still
 * replayed, and another profile's results on the same worker are kept. */
static const char *quota_warning(const cf_result *res)
{
    for (size_t i = 0; i < res->n_diagnostics; i++)
        if (res->diagnostics[i].message && strstr(res->diagnostics[i].message, "for replay"))
            return res->diagnostics[i].message;
    return NULL;
}

typedef struct quota_fx {
    it_topics t;
    it_worker w;
    char by_count[64], by_bytes[64];            /* profile names, unique per run */
    char count_topic[90], bytes_topic[90];
} quota_fx;

static cf_dispatcher *dispatcher_on(const quota_fx *f, const char *topic)
{
    it_topics tt = f->t;
    snprintf(tt.requests, sizeof(tt.requests), "%s", topic);
    return it_dispatcher_new(&tt);
}

/* Submits code under id on d and waits for its answer. */
static void run_id(cf_dispatcher *d, const it_worker *w, const char *id, const char *code, cf_result *res)
{
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, code);
    free(req.id);
    req.id = strdup(id);
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_submit(d, &req, &err) < 0)
        fail_msg("submit %s: %s", id, err.msg);
    memset(res, 0, sizeof(*res));
    wait_result(d, id, w, res);
    cf_request_clear(&req);
    if (res->status != CF_STATUS_SUCCESS) {
        it_worker_dump_log(w);
        fail_msg("%s: %s (%s)", id, cf_status_name(res->status), res->reason ? res->reason : "");
    }
}

/* An integer command on one key of the stack's Redis (PTTL, EXISTS). */
static int64_t redis_key_int(const char *cmd, const char *key)
{
    cf_redis *r = it_redis_open();
    cf_error err;
    cf_error_clear(&err);
    const char *argv[2] = {cmd, key};
    redisReply *rep = NULL;
    if (cf_redis_command_argv(r, 2, argv, NULL, &rep, &err) < 0)
        fail_msg("%s %s: %s", cmd, key, err.msg);
    int64_t v = -3;
    cf_redis_reply_i64(rep, &v, NULL);
    cf_redis_reply_free(rep);
    cf_redis_destroy(r);
    return v;
}

/* How long Redis keeps the stored result of id under profile (ms; -2 none). */
static int64_t stored_pttl(const char *profile, const char *id)
{
    char key[300];
    snprintf(key, sizeof(key), "cf:idem:{%s/%s}", profile, id);
    return redis_key_int("PTTL", key);
}

static void results_are_kept_within_the_tenants_quota(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    quota_fx *f = calloc(1, sizeof(*f));
    it_topics_create(&f->t, "idem-quota", 1);
    it_unique_name("quota-n", f->by_count, sizeof(f->by_count));
    it_unique_name("quota-b", f->by_bytes, sizeof(f->by_bytes));
    snprintf(f->count_topic, sizeof(f->count_topic), "%s.req", f->by_count);
    snprintf(f->bytes_topic, sizeof(f->bytes_topic), "%s.req", f->by_bytes);
    it_request_topic_create(f->count_topic, 1);
    it_request_topic_create(f->bytes_topic, 1);
    static char a_redis[300], a[8][200];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    snprintf(a[0], sizeof(a[0]), "--profile.%s.topic=%s", f->by_count, f->count_topic);
    snprintf(a[1], sizeof(a[1]), "--profile.%s.backends=process", f->by_count);
    snprintf(a[2], sizeof(a[2]), "--profile.%s.max-stored-results=4", f->by_count);
    snprintf(a[3], sizeof(a[3]), "--profile.%s.topic=%s", f->by_bytes, f->bytes_topic);
    snprintf(a[4], sizeof(a[4]), "--profile.%s.backends=process", f->by_bytes);
    snprintf(a[5], sizeof(a[5]), "--profile.%s.max-stored-result-bytes=8KiB", f->by_bytes);
    /* The process backend isolates no network: the profiles must allow it. */
    snprintf(a[6], sizeof(a[6]), "--profile.%s.network=enabled", f->by_count);
    snprintf(a[7], sizeof(a[7]), "--profile.%s.network=enabled", f->by_bytes);
    const char *extra[] = {a_redis, "--slots=2", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], NULL};
    it_worker_start(&f->w, &f->t, "idem-quota-w", extra);
    if (!it_worker_wait_log(&f->w, "reading cancels from", 60000)) {
        it_worker_dump_log(&f->w);
        fail_msg("the worker did not start");
    }
    cf_dispatcher *dn = dispatcher_on(f, f->count_topic), *db = dispatcher_on(f, f->bytes_topic);
    cf_dispatcher *dd = it_dispatcher_new(&f->t); /* the default profile: the default quota, far off */
    const char *uuid = "cat /proc/sys/kernel/random/uuid";
    char ids[7][80];
    for (int i = 0; i < 7; i++)
        it_unique_name("quota-id", ids[i], sizeof(ids[i]));

    /* By count (4): four kept, the fifth kept the short while (5 is within
     * 4 x 1.25), the sixth answered but not kept. */
    cf_result r[6], again = {0};
    for (int i = 0; i < 6; i++)
        run_id(dn, &f->w, ids[i], uuid, &r[i]);
    for (int i = 0; i < 4; i++)
        if (quota_warning(&r[i]))
            fail_msg("result %d within the quota: warning '%s'", i, quota_warning(&r[i]));
    const char *why = quota_warning(&r[4]);
    if (!why || !strstr(why, "kept for replay for ") || !strstr(why, f->by_count) ||
        !strstr(why, "keeps 4 result(s)") || !strstr(why, "max-stored-results 4"))
        fail_msg("fifth result: warning '%s'", why ? why : "(none)");
    /* The short keep is stored for its short while, the others a day. */
    int64_t kept_short = stored_pttl(f->by_count, ids[4]), kept_long = stored_pttl(f->by_count, ids[3]);
    if (kept_short <= 0 || kept_short > 600000 || kept_long <= 600000)
        fail_msg("stored for %lld ms (short) and %lld ms (within the quota)", (long long)kept_short,
                 (long long)kept_long);
    why = quota_warning(&r[5]);
    if (!why || !strstr(why, "not kept for replay") || !strstr(why, "keeps 5 result(s)"))
        fail_msg("sixth result: warning '%s'", why ? why : "(none)");
    /* What was kept is replayed (the short one too, within its while);
     * what was not runs again. */
    for (int i = 0; i < 5; i += 4) {
        run_id(dn, &f->w, ids[i], uuid, &again);
        if (!again.meta.replay || !same_stdout(&r[i], &again))
            fail_msg("result %d was not replayed", i);
        cf_result_clear(&again);
    }
    run_id(dn, &f->w, ids[5], uuid, &again);
    assert_false(again.meta.replay);
    assert_false(same_stdout(&r[5], &again));
    assert_non_null(quota_warning(&again));
    cf_result_clear(&again);

    /* No delivery count per request: what a tenant's request rate leaves in
     * Redis is its stored results, under the quota (the counts of messages
     * not yet committed are one hash per partition, tests/unit/test_worker.c). */
    char deliveries[700];
    for (int i = 0; i < 6; i++) { /* no key per request (as before) */
        snprintf(deliveries, sizeof(deliveries), "cf:deliveries:{%s/%s}", f->by_count, ids[i]);
        assert_int_equal(redis_key_int("EXISTS", deliveries), 0);
    }

    /* Another profile on the same worker is untouched. */
    cf_result other = {0};
    run_id(dd, &f->w, ids[6], uuid, &other);
    assert_null(quota_warning(&other));
    run_id(dd, &f->w, ids[6], uuid, &again);
    assert_true(again.meta.replay);
    assert_true(same_stdout(&other, &again));
    cf_result_clear(&again);
    cf_result_clear(&other);

    /* By bytes: a 3 KiB output (charged about 5.4 KiB with what Redis
     * spends on it) fits the 8 KiB quota once; twice is past even its
     * grace. */
    const char *big = "cat /proc/sys/kernel/random/uuid; head -c 3072 /dev/zero | tr '\\0' a";
    cf_result b1 = {0}, b2 = {0};
    char bid[2][80];
    it_unique_name("quota-big", bid[0], sizeof(bid[0]));
    it_unique_name("quota-big", bid[1], sizeof(bid[1]));
    run_id(db, &f->w, bid[0], big, &b1);
    assert_null(quota_warning(&b1));
    run_id(db, &f->w, bid[1], big, &b2);
    why = quota_warning(&b2);
    if (!why || !strstr(why, "not kept for replay") || !strstr(why, f->by_bytes) ||
        !strstr(why, "max-stored-results uncapped") || !strstr(why, "max-stored-result-bytes 8 KiB"))
        fail_msg("second big result: warning '%s'", why ? why : "(none)");
    assert_true(b2.stdout_data.len > 3072); /* answered whole all the same */
    assert_int_equal(stored_pttl(f->by_bytes, bid[1]), -2);

    for (int i = 0; i < 6; i++)
        cf_result_clear(&r[i]);
    cf_result_clear(&b1);
    cf_result_clear(&b2);
    cf_dispatcher_destroy(dn);
    cf_dispatcher_destroy(db);
    cf_dispatcher_destroy(dd);
    assert_true(it_worker_stop(&f->w, SIGTERM, 30000) >= 0);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(resubmission_replays_and_reuse_is_refused),
        cmocka_unit_test(big_results_are_stored_cut),
        cmocka_unit_test(concurrent_duplicates_run_once),
        cmocka_unit_test(killed_run_is_redelivered_as_attempt_two),
        cmocka_unit_test(redis_down_is_said_to_the_sender),
        cmocka_unit_test(results_are_kept_within_the_tenants_quota),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
