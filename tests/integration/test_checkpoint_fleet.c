/* Checkpoints through the fleet: a thread's state flows from run to run
 * (docs/STATE.md, "Through the fleet"), and a stale worker - one that was
 * frozen past its session timeout, lost its partition and finished late -
 * cannot overwrite newer state. */
#include "it_support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cf_checkpoint.h"
#include "cf_redis.h"
#include "cf_schema_json.h"
#include "cf_util.h"
#include "worker_state_int.h"

#define SEC 1000000LL

typedef struct store {
    cf_redis *r;
    cf_checkpoint_store *cp;
} store;

static void store_open(store *s)
{
    s->r = it_redis_open();
    cf_error err;
    cf_error_clear(&err);
    s->cp = cf_checkpoint_store_new(s->r, NULL, &err);
    assert_non_null(s->cp);
}

static void store_close(store *s)
{
    cf_checkpoint_store_destroy(s->cp);
    cf_redis_destroy(s->r);
}

static void check_status(const cf_result *res, cf_status want, const char *what)
{
    if (res->status != want)
        fail_msg("%s: status %s (want %s), reason: %s, stderr: %.*s", what, cf_status_name(res->status),
                 cf_status_name(want), res->reason ? res->reason : "-", (int)res->stderr_data.len,
                 res->stderr_data.data ? (const char *)res->stderr_data.data : "");
}

static void set_input_json(cf_request *req, const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    assert_non_null(j);
    assert_int_equal(cf_json_to_msgpack(j, &req->input, NULL), 0);
    json_decref(j);
}

/* Compact, key-sorted JSON of a msgpack value (caller frees). */
static char *json_of(const void *mp, size_t len)
{
    json_t *j = cf_msgpack_to_json(mp, len, NULL);
    assert_non_null(j);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(j);
    return s;
}

static const char *const STEP_PY =
    "import json, os\n"
    "inp = json.load(open(os.environ['CODEFLEET_INPUT']))\n"
    "cp = inp['checkpoint'] or {'n': 0}\n"
    "n = cp['n'] + 1\n"
    "out = {'checkpoint': {'n': n, 'by': inp['input']['tag']}, 'seen': inp['checkpoint_id']}\n"
    "json.dump(out, open(os.environ['CODEFLEET_OUTPUT'], 'w'))\n"
    "print(n)\n";

/* Three runs of one thread: each sees the previous run's state and id,
 * each result names the checkpoint it saved, the chain links up. */
static void thread_state_flows_between_runs(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    store s;
    store_open(&s);
    char thread[64];
    it_unique_name("th", thread, sizeof(thread));
    it_topics t;
    it_topics_create(&t, "cpflow", 2);
    it_worker w;
    char a_redis[300];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    const char *args[] = {a_redis, NULL};
    it_worker_start(&w, &t, "cpflow-w1", args);
    cf_dispatcher *d = it_dispatcher_new(&t);
    char prev[CF_CHECKPOINT_ID_MAX + 1] = "";
    for (int i = 1; i <= 3; i++) {
        cf_request req;
        it_request_init(&req, CF_LANG_PYTHON, STEP_PY);
        req.thread = strdup(thread);
        char tag[64];
        snprintf(tag, sizeof(tag), "{\"tag\":\"r%d\"}", i);
        set_input_json(&req, tag);
        cf_result res;
        it_submit_wait(d, &req, 60 * SEC, &res);
        check_status(&res, CF_STATUS_SUCCESS, "thread step");
        char want[8];
        snprintf(want, sizeof(want), "%d\n", i);
        assert_int_equal(res.stdout_data.len, strlen(want));
        assert_memory_equal(res.stdout_data.data, want, strlen(want));
        assert_non_null(res.checkpoint_id);
        assert_false(res.checkpoint_conflict);
        assert_int_equal(res.meta.attempt, 1);
        /* The program saw the previous checkpoint's id. */
        char *out = json_of(res.output.data, res.output.len);
        char seen[200];
        if (prev[0])
            snprintf(seen, sizeof(seen), "\"seen\":\"%s\"", prev);
        else
            snprintf(seen, sizeof(seen), "\"seen\":null");
        if (!strstr(out, seen))
            fail_msg("output %s lacks %s", out, seen);
        free(out);
        cf_checkpoint cp;
        assert_int_equal(cf_checkpoint_get(s.cp, thread, res.checkpoint_id, &cp, NULL), 0);
        assert_string_equal(cp.parent, prev);
        char *st = json_of(cp.state, cp.state_len);
        char want_state[64];
        snprintf(want_state, sizeof(want_state), "{\"by\":\"r%d\",\"n\":%d}", i, i);
        assert_string_equal(st, want_state);
        free(st);
        cf_checkpoint_clear(&cp);
        cf_strlcpy(prev, res.checkpoint_id, sizeof(prev));
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
    /* State that is not a map: a clear diagnostic, nothing saved. */
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "printf '{\"checkpoint\": [1, 2]}' > \"$CODEFLEET_OUTPUT\"");
    req.thread = strdup(thread);
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "non-map state");
    assert_null(res.checkpoint_id);
    assert_false(res.checkpoint_conflict);
    bool diag = false;
    for (size_t i = 0; i < res.n_diagnostics; i++)
        diag = diag || strstr(res.diagnostics[i].message, "must be a map") != NULL;
    assert_true(diag);
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_checkpoints hist;
    assert_int_equal(cf_checkpoint_history(s.cp, thread, NULL, 10, false, &hist, NULL), 0);
    assert_int_equal(hist.n, 3);
    assert_string_equal(hist.items[0].id, prev);
    cf_checkpoints_clear(&hist);
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
    cf_checkpoint_delete_thread(s.cp, thread, NULL);
    store_close(&s);
}

/* Through the library on the shared Redis: a save with a smaller fencing
 * token than the thread has seen is refused and changes nothing. */
static void decreasing_writer_seq_is_refused(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    store s;
    store_open(&s);
    char thread[64];
    it_unique_name("thseq", thread, sizeof(thread));
    static const uint8_t st1[] = {0x81, 0xa1, 'a', 0x01}; /* {"a": 1} */
    static const uint8_t st2[] = {0x81, 0xa1, 'a', 0x02};
    cf_checkpoint_save_opts o = {.writer_seq = 100};
    char id1[CF_CHECKPOINT_ID_MAX + 1], id2[CF_CHECKPOINT_ID_MAX + 1];
    assert_int_equal(cf_checkpoint_save(s.cp, thread, st1, sizeof(st1), &o, id1, NULL), 0);
    o.writer_seq = 99;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_checkpoint_save(s.cp, thread, st2, sizeof(st2), &o, id2, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    cf_checkpoint latest;
    assert_int_equal(cf_checkpoint_latest(s.cp, thread, &latest, NULL), 0);
    assert_string_equal(latest.id, id1);
    assert_int_equal(latest.writer_seq, 100);
    cf_checkpoint_clear(&latest);
    cf_checkpoint_delete_thread(s.cp, thread, NULL);
    store_close(&s);
}

/* Issue 30, part 4 through the fleet: a tenant's threads are held to its
 * profile's max-checkpoint-bytes.  A save past it is refused with the
 * quota named in the answer (the run's output kept), another tenant's save
 * on the same worker lands, and the same request sent again once room is
 * made runs and saves (a refused save changed nothing, so it is not kept
 * for replay). */
static void threads_are_held_to_the_tenants_quota(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    store s;
    store_open(&s);
    it_topics t;
    it_topics_create(&t, "cpquota", 1);
    char prof[64], topic[96], other[64], otopic[96], th[3][64];
    it_unique_name("cpq", prof, sizeof(prof));
    snprintf(topic, sizeof(topic), "%s.req", prof);
    it_request_topic_create(topic, 1);
    it_unique_name("cpq-b", other, sizeof(other));
    snprintf(otopic, sizeof(otopic), "%s.req", other);
    it_request_topic_create(otopic, 1);
    for (int i = 0; i < 3; i++)
        it_unique_name("cpq-th", th[i], sizeof(th[i]));
    static char a_redis[300], a[7][200];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    snprintf(a[0], sizeof(a[0]), "--profile.%s.topic=%s", prof, topic);
    snprintf(a[1], sizeof(a[1]), "--profile.%s.max-checkpoint-bytes=160KiB", prof);
    snprintf(a[2], sizeof(a[2]), "--profile.%s.topic=%s", other, otopic);
    /* The process backend isolates no network: the profiles must allow it. */
    snprintf(a[3], sizeof(a[3]), "--profile.%s.network=enabled", prof);
    snprintf(a[4], sizeof(a[4]), "--profile.%s.network=enabled", other);
    snprintf(a[5], sizeof(a[5]), "--profile.%s.backends=process", prof);
    snprintf(a[6], sizeof(a[6]), "--profile.%s.backends=process", other);
    const char *extra[] = {a_redis, "--backends=process", "--profile.default.backends=process",
                           "--profile.default.network=enabled", a[0], a[1], a[2], a[3], a[4], a[5], a[6], NULL};
    it_worker w;
    it_worker_start(&w, &t, "cpquota-w1", extra);
    if (!it_worker_wait_log(&w, "reading cancels from", 60000)) {
        it_worker_dump_log(&w);
        fail_msg("the worker did not start");
    }
    it_topics tq = t, tb = t;
    snprintf(tq.requests, sizeof(tq.requests), "%s", topic);
    snprintf(tb.requests, sizeof(tb.requests), "%s", otopic);
    cf_dispatcher *dq = it_dispatcher_new(&tq), *dd = it_dispatcher_new(&tb);
    /* A 60 kB state: a thread holds it twice (the checkpoint and the
     * newest's copy), about 120 kB of the 160 KiB. */
    const char *save = "{ printf '{\"checkpoint\": {\"s\": \"'; head -c 60000 /dev/zero | tr '\\0' a; "
                       "printf '\"}}'; } > \"$CODEFLEET_OUTPUT\" && echo saved";
    cf_request req;
    cf_result res;

    it_request_init(&req, CF_LANG_SHELL, save);
    req.thread = strdup(th[0]);
    it_submit_wait(dq, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "first save");
    assert_non_null(res.checkpoint_id);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* A second thread of the same size: over the quota, not saved, the
     * output kept and the answer naming the quota. */
    it_request_init(&req, CF_LANG_SHELL, save);
    req.thread = strdup(th[1]);
    it_submit_wait(dq, &req, 60 * SEC, &res);
    print_message("over the quota: %s: %s\n", cf_status_name(res.status), res.reason ? res.reason : "");
    check_status(&res, CF_STATUS_SUCCESS, "second save");
    assert_null(res.checkpoint_id);
    assert_true(res.stdout_data.len >= 5 && memcmp(res.stdout_data.data, "saved", 5) == 0);
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "checkpoint not saved"));
    assert_non_null(strstr(res.reason, "checkpoint quota of"));
    assert_non_null(strstr(res.reason, "max-checkpoint-bytes"));
    cf_result_clear(&res);
    cf_checkpoint latest;
    cf_error lerr;
    cf_error_clear(&lerr);
    assert_int_equal(cf_checkpoint_latest(s.cp, th[1], &latest, &lerr), -1);
    assert_int_equal(lerr.code, CF_E_NOT_FOUND);

    /* Room made (the first thread deleted): the same request, same id,
     * runs again and saves. */
    cf_error derr;
    cf_error_clear(&derr);
    assert_int_equal(cf_checkpoint_delete_thread(s.cp, th[0], &derr), 0);
    it_submit_wait(dq, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "the same request once there is room");
    assert_non_null(res.checkpoint_id);
    assert_true(!res.reason || !strstr(res.reason, "quota"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Another tenant on the same worker, no quota of its own set: its
     * default (32 MiB) holds it. */
    it_request_init(&req, CF_LANG_SHELL, save);
    req.thread = strdup(th[2]);
    it_submit_wait(dd, &req, 60 * SEC, &res);
    check_status(&res, CF_STATUS_SUCCESS, "another tenant's save");
    assert_non_null(res.checkpoint_id);
    assert_true(!res.reason || !strstr(res.reason, "quota"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    cf_dispatcher_destroy(dq);
    cf_dispatcher_destroy(dd);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 20000), 0);
    for (int i = 0; i < 3; i++)
        cf_checkpoint_delete_thread(s.cp, th[i], NULL);
    store_close(&s);
}

static const char *owner_of(it_worker *a, it_worker *b, const char *needle)
{
    if (it_worker_log_contains(a, needle))
        return a->id;
    if (it_worker_log_contains(b, needle))
        return b->id;
    return NULL;
}

/* Produces req keyed by its thread (so the worker fences with the offset). */
static void produce_keyed(cf_dispatcher *d, const cf_request *req)
{
    cf_bytes enc = {0};
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_request_encode(req, &enc, &err), 0);
    if (cf_dispatcher_produce_raw(d, NULL, req->thread, strlen(req->thread), enc.data, enc.len, &err) < 0)
        fail_msg("produce: %s", err.msg);
    free(enc.data);
}

/* Worker X runs r1 and is frozen (SIGSTOP) mid-run; it loses its
 * partition, Y runs r1 again and then r2.  When X wakes up (SIGCONT) it
 * finishes r1 and tries to save: refused, reported as
 * checkpoint_conflict, and the thread keeps Y's newer state. */
static void stale_worker_cannot_overwrite(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    store s;
    store_open(&s);
    char thread[64], marker[128];
    it_unique_name("thstale", thread, sizeof(thread));
    snprintf(marker, sizeof(marker), "/tmp/cf-it-%s.started", thread);
    unlink(marker);
    it_topics t;
    it_topics_create(&t, "cpstale", 1);
    char a_redis[300];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    const char *args[] = {a_redis, NULL};
    it_worker a, b;
    it_worker_start(&a, &t, "cpstale-a", args);
    assert_true(it_worker_wait_log(&a, "assigned 1 partition", 30000));
    it_worker_start(&b, &t, "cpstale-b", args);
    assert_true(it_worker_wait_log(&b, "consuming", 30000));
    cf_dispatcher *d = it_dispatcher_new(&t);

    cf_request r1;
    char code[400];
    snprintf(code, sizeof(code),
             "touch %s; sleep 3; printf '{\"checkpoint\": {\"by\": \"r1\"}}' > \"$CODEFLEET_OUTPUT\"", marker);
    it_request_init(&r1, CF_LANG_SHELL, code);
    r1.thread = strdup(thread);
    produce_keyed(d, &r1);
    struct stat sb;
    int64_t until = cf_mono_us() + 60 * SEC;
    while (stat(marker, &sb) < 0 && cf_mono_us() < until)
        usleep(10000);
    assert_int_equal(stat(marker, &sb), 0);
    char needle[200];
    /* The job's transitions are logged as "request ID (topic[p]@off): a -> b". */
    snprintf(needle, sizeof(needle), "request %s (", r1.id);
    const char *xid = owner_of(&a, &b, needle);
    assert_non_null(xid);
    it_worker *x = strcmp(xid, a.id) == 0 ? &a : &b;
    it_worker *y = x == &a ? &b : &a;
    assert_int_equal(kill(x->pid, SIGSTOP), 0);

    /* Y takes over after X's session times out and runs r1 again. */
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_wait(d, r1.id, 90 * SEC, &res, &err) < 0) {
        kill(x->pid, SIGCONT);
        it_worker_dump_log(y);
        fail_msg("r1 on the survivor: %s", err.msg);
    }
    check_status(&res, CF_STATUS_SUCCESS, "r1 on the survivor");
    assert_string_equal(res.meta.worker, y->id);
    assert_int_equal(res.meta.attempt, 2); /* X's delivery was the first */
    assert_non_null(res.checkpoint_id);
    char c1[CF_CHECKPOINT_ID_MAX + 1];
    cf_strlcpy(c1, res.checkpoint_id, sizeof(c1));
    cf_result_clear(&res);

    cf_request r2;
    it_request_init(&r2, CF_LANG_SHELL, "printf '{\"checkpoint\": {\"by\": \"r2\"}}' > \"$CODEFLEET_OUTPUT\"");
    r2.thread = strdup(thread);
    produce_keyed(d, &r2);
    assert_int_equal(cf_dispatcher_wait(d, r2.id, 60 * SEC, &res, &err), 0);
    check_status(&res, CF_STATUS_SUCCESS, "r2");
    assert_string_equal(res.meta.worker, y->id);
    assert_non_null(res.checkpoint_id);
    char c2[CF_CHECKPOINT_ID_MAX + 1];
    cf_strlcpy(c2, res.checkpoint_id, sizeof(c2));
    cf_result_clear(&res);

    /* X wakes up and finishes its copy of r1 late. */
    assert_int_equal(kill(x->pid, SIGCONT), 0);
    if (cf_dispatcher_wait(d, r1.id, 60 * SEC, &res, &err) < 0) {
        it_worker_dump_log(x);
        fail_msg("late r1 from the stale worker: %s", err.msg);
    }
    assert_string_equal(res.meta.worker, x->id);
    check_status(&res, CF_STATUS_SUCCESS, "late r1");
    assert_true(res.checkpoint_conflict);
    assert_null(res.checkpoint_id);
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "checkpoint conflict"));
    cf_result_clear(&res);

    /* The thread kept the newer state: r2's checkpoint on top of r1's. */
    cf_checkpoint latest;
    assert_int_equal(cf_checkpoint_latest(s.cp, thread, &latest, NULL), 0);
    assert_string_equal(latest.id, c2);
    assert_string_equal(latest.parent, c1);
    char *st = json_of(latest.state, latest.state_len);
    assert_string_equal(st, "{\"by\":\"r2\"}");
    free(st);
    cf_checkpoint_clear(&latest);
    cf_checkpoints all;
    assert_int_equal(cf_checkpoint_list(s.cp, thread, NULL, &all, NULL), 0);
    assert_int_equal(all.n, 2);
    cf_checkpoints_clear(&all);

    unlink(marker);
    cf_request_clear(&r1);
    cf_request_clear(&r2);
    cf_dispatcher_destroy(d);
    it_worker_stop(&a, SIGTERM, 20000);
    it_worker_stop(&b, SIGTERM, 20000);
    cf_checkpoint_delete_thread(s.cp, thread, NULL);
    store_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(thread_state_flows_between_runs),
        cmocka_unit_test(decreasing_writer_seq_is_refused),
        cmocka_unit_test(threads_are_held_to_the_tenants_quota),
        cmocka_unit_test(stale_worker_cannot_overwrite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
