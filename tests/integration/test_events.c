/* Integration tests of collaboration events against the real broker
 * (CF_TEST_BROKERS): publish, wait (started after the publish, kind filter,
 * timeout, live), tail order per workspace, subscribers, malformed input.
 * Each test uses its own 3-partition events topic. */
#include "it_support.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_events.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define PARTS 3

typedef struct fx {
    char topic[96];
    cf_events *ev;
} fx;

static int setup(void **state)
{
    if (!it_brokers())
        return 0; /* each test skips */
    fx *f = calloc(1, sizeof(*f));
    it_unique_name("it-events", f->topic, sizeof(f->topic));
    const char *names[] = {f->topic};
    cf_error err = {0};
    if (cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 1, PARTS, -1, 30 * 1000000LL, &err) < 0)
        fail_msg("creating topic: %s", err.msg);
    cf_events_config cfg = {.brokers = it_brokers(), .topic = f->topic, .client_id = "it-events", .kafka = it_kafka()};
    if (cf_events_new(&cfg, &f->ev, &err) < 0)
        fail_msg("cf_events_new: %s", err.msg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    if (f) {
        cf_events_destroy(f->ev);
        free(f);
    }
    return 0;
}

/* Fills an event (caller clears); payload {"seq": seq}. */
static void make_event(cf_event *e, const char *ws, const char *corr, cf_event_kind kind, int seq)
{
    memset(e, 0, sizeof(*e));
    e->workspace = strdup(ws);
    e->correlation_id = strdup(corr);
    e->topic = strdup("integration");
    e->producer = strdup("agent:test");
    e->kind = kind;
    json_t *p = json_pack("{s:i}", "seq", seq);
    cf_error err = {0};
    assert_int_equal(cf_json_to_msgpack(p, &e->payload, &err), 0);
    json_decref(p);
}

static void publish(fx *f, const char *ws, const char *corr, cf_event_kind kind, int seq, cf_event *copy)
{
    cf_event e;
    cf_error err = {0};
    make_event(&e, ws, corr, kind, seq);
    if (cf_events_publish(f->ev, &e, &err) < 0)
        fail_msg("publish: %s", err.msg);
    assert_non_null(e.id);
    assert_true(e.timestamp_us > 0);
    if (copy)
        *copy = e;
    else
        cf_event_clear(&e);
}

static void flush(fx *f)
{
    cf_error err = {0};
    if (cf_events_flush(f->ev, 10 * 1000000LL, &err) < 0)
        fail_msg("flush: %s", err.msg);
}

static int payload_seq(const cf_event *e)
{
    json_t *j = cf_msgpack_to_json(e->payload.data, e->payload.len, NULL);
    assert_non_null(j);
    int s = (int)json_integer_value(json_object_get(j, "seq"));
    json_decref(j);
    return s;
}

static void unique(const char *prefix, char *buf, size_t n)
{
    it_unique_name(prefix, buf, n);
}

static void assert_same_event(const cf_event *a, const cf_event *b)
{
    assert_string_equal(a->id, b->id);
    assert_string_equal(a->workspace, b->workspace);
    assert_string_equal(a->correlation_id, b->correlation_id);
    assert_string_equal(a->topic, b->topic);
    assert_string_equal(a->producer, b->producer);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->timestamp_us, b->timestamp_us);
    assert_int_equal(a->payload.len, b->payload.len);
    assert_memory_equal(a->payload.data, b->payload.data, a->payload.len);
}

/* The core promise: a wait that starts after its event was
 * published still returns it. */
static void test_wait_after_publish(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    char corr[64];
    unique("corr", corr, sizeof(corr));
    cf_event sent;
    publish(f, "ws-a", corr, CF_EVENT_WORK_PUBLISHED, 1, &sent);
    flush(f);
    usleep(200 * 1000);

    cf_error err = {0};
    cf_event got = {0};
    /* every partition (workspace unknown) */
    cf_events_wait_opts o = {.correlation_id = corr, .timeout_us = 15 * 1000000LL};
    if (cf_events_wait(f->ev, &o, &got, &err) < 0)
        fail_msg("wait: %s", err.msg);
    assert_same_event(&got, &sent);
    cf_event_clear(&got);
    /* only the workspace's partition */
    o.workspace = "ws-a";
    if (cf_events_wait(f->ev, &o, &got, &err) < 0)
        fail_msg("wait (workspace): %s", err.msg);
    assert_same_event(&got, &sent);
    cf_event_clear(&got);
    /* another workspace does not see it */
    o.workspace = "ws-other";
    o.timeout_us = 1000000;
    assert_int_equal(cf_events_wait(f->ev, &o, &got, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    /* a since after the publish excludes it */
    o.workspace = NULL;
    o.since_us = cf_now_us() + 1000000;
    assert_int_equal(cf_events_wait(f->ev, &o, &got, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    cf_event_clear(&sent);
}

static void test_wait_kind_filter(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    char corr[64];
    unique("corr", corr, sizeof(corr));
    publish(f, "ws-k", corr, CF_EVENT_NEED_WORK, 1, NULL);
    publish(f, "ws-k", corr, CF_EVENT_WORK_CLAIMED, 2, NULL);
    publish(f, "ws-k", "other-corr", CF_EVENT_COMPLETED, 3, NULL);
    publish(f, "ws-k", corr, CF_EVENT_COMPLETED, 4, NULL);
    flush(f);

    cf_error err = {0};
    cf_event got = {0};
    cf_events_wait_opts o = {.correlation_id = corr, .kind = CF_EVENT_COMPLETED, .timeout_us = 15000000};
    if (cf_events_wait(f->ev, &o, &got, &err) < 0)
        fail_msg("wait completed: %s", err.msg);
    assert_int_equal(got.kind, CF_EVENT_COMPLETED);
    assert_int_equal(payload_seq(&got), 4); /* skipped need_work, work_claimed and the other correlation */
    o.kind = CF_EVENT_WORK_CLAIMED;
    o.workspace = "ws-k";
    if (cf_events_wait(f->ev, &o, &got, &err) < 0)
        fail_msg("wait claimed: %s", err.msg);
    assert_int_equal(payload_seq(&got), 2);
    o.kind = CF_EVENT_ANY; /* the first of the correlation id, in publish order */
    if (cf_events_wait(f->ev, &o, &got, &err) < 0)
        fail_msg("wait any: %s", err.msg);
    assert_int_equal(payload_seq(&got), 1);
    o.kind = CF_EVENT_BLOCKED; /* never published */
    o.timeout_us = 1000000;
    assert_int_equal(cf_events_wait(f->ev, &o, &got, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    cf_event_clear(&got);
}

static void test_wait_timeout(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    cf_error err = {0};
    cf_event got = {0};
    cf_events_wait_opts o = {.correlation_id = "never-published", .timeout_us = 1500000};
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_events_wait(f->ev, &o, &got, &err), -1);
    int64_t took = cf_mono_us() - t0;
    assert_int_equal(err.code, CF_E_TIMEOUT);
    assert_true(err.retriable);
    assert_non_null(strstr(err.msg, "never-published"));
    assert_true(took >= 1400000);
    assert_true(took < 8000000);
    assert_null(got.id);
    /* bad arguments fail at once */
    o.correlation_id = "has space";
    assert_int_equal(cf_events_wait(f->ev, &o, &got, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    o.correlation_id = "ok";
    o.workspace = "../x";
    assert_int_equal(cf_events_wait(f->ev, &o, &got, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
}

typedef struct live_wait {
    fx *f;
    const char *corr;
    int rc;
    cf_event got;
    cf_error err;
} live_wait;

static void *live_wait_main(void *arg)
{
    live_wait *w = arg;
    cf_events_wait_opts o = {.correlation_id = w->corr, .workspace = "ws-live", .timeout_us = 20000000};
    w->rc = cf_events_wait(w->f->ev, &o, &w->got, &w->err);
    return NULL;
}

/* A wait that starts first keeps reading live until the event comes. */
static void test_wait_live(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    char corr[64];
    unique("corr", corr, sizeof(corr));
    live_wait w = {.f = f, .corr = corr};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, live_wait_main, &w), 0);
    usleep(1500 * 1000);
    publish(f, "ws-live", corr, CF_EVENT_FEEDBACK_PROVIDED, 7, NULL);
    flush(f);
    pthread_join(t, NULL);
    if (w.rc < 0)
        fail_msg("live wait: %s", w.err.msg);
    assert_int_equal(payload_seq(&w.got), 7);
    cf_event_clear(&w.got);
}

typedef struct tail_col {
    int n, want;
    cf_event ev[64];
    int32_t part[64];
    int malformed;
} tail_col;

static int tail_collect(void *ctx, const cf_event *e, const cf_error *derr, int32_t partition, int64_t offset)
{
    (void)offset;
    tail_col *c = ctx;
    if (!e) {
        assert_non_null(derr);
        c->malformed++;
        return 0;
    }
    if (c->n < 64) {
        cf_event_copy(&c->ev[c->n], e, NULL);
        c->part[c->n] = partition;
        c->n++;
    }
    return c->n >= c->want;
}

static void tail_col_clear(tail_col *c)
{
    for (int i = 0; i < c->n; i++)
        cf_event_clear(&c->ev[i]);
}

static void test_tail_order_per_workspace(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    int64_t t0 = cf_now_us() - 1000000;
    static const char *const ws[] = {"ws-t1", "ws-t2", "ws-t3"};
    for (int i = 0; i < 30; i++)
        publish(f, ws[i % 3], "tail-corr", CF_EVENT_WORK_PUBLISHED, i, NULL);
    flush(f);

    cf_error err = {0};
    tail_col c = {.want = 30};
    cf_events_tail_opts o = {.start = CF_EVENTS_FROM_TIME, .since_us = t0, .timeout_us = 20000000};
    assert_int_equal(cf_events_tail(f->ev, &o, tail_collect, &c, &err), 0);
    assert_int_equal(c.n, 30);
    int last[3] = {-1, -1, -1};
    for (int i = 0; i < c.n; i++) {
        int w = -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(c.ev[i].workspace, ws[k]) == 0)
                w = k;
        assert_true(w >= 0);
        int seq = payload_seq(&c.ev[i]);
        assert_true(seq > last[w]); /* publish order within a workspace */
        assert_int_equal(seq % 3, w);
        last[w] = seq;
        /* each workspace lives on the partition the readers compute */
        assert_int_equal(c.part[i], cf_events_partition_for(ws[w], PARTS));
    }
    tail_col_clear(&c);

    /* a workspace filter sees only that workspace, in order */
    tail_col c2 = {.want = 10};
    o.workspace = "ws-t2";
    assert_int_equal(cf_events_tail(f->ev, &o, tail_collect, &c2, &err), 0);
    assert_int_equal(c2.n, 10);
    for (int i = 0; i < c2.n; i++) {
        assert_string_equal(c2.ev[i].workspace, "ws-t2");
        assert_int_equal(payload_seq(&c2.ev[i]), 1 + 3 * i);
    }
    tail_col_clear(&c2);

    /* from the end with a short timeout: nothing old, and no error */
    tail_col c3 = {.want = 1};
    cf_events_tail_opts oe = {.start = CF_EVENTS_FROM_END, .timeout_us = 700000};
    assert_int_equal(cf_events_tail(f->ev, &oe, tail_collect, &c3, &err), 0);
    assert_int_equal(c3.n, 0);
}

static void test_subscriber_misses_nothing(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    cf_error err = {0};
    cf_event_subscriber *all = NULL, *only_b = NULL;
    if (cf_event_subscriber_new(f->ev, NULL, 0, &all, &err) < 0 ||
        cf_event_subscriber_new(f->ev, "ws-sb", 0, &only_b, &err) < 0)
        fail_msg("subscriber: %s", err.msg);
    /* published right after creation, before any next/wait */
    char corr[5][64];
    for (int i = 0; i < 5; i++) {
        unique("sub", corr[i], sizeof(corr[i]));
        publish(f, "ws-sa", corr[i], CF_EVENT_NEED_WORK, i, NULL);
    }
    publish(f, "ws-sb", "for-b", CF_EVENT_BLOCKED, 99, NULL);
    flush(f);

    cf_event got = {0};
    /* wait for the third: the first two are held back, not lost */
    if (cf_event_subscriber_wait(all, corr[2], CF_EVENT_NEED_WORK, 15000000, &got, &err) < 0)
        fail_msg("subscriber wait: %s", err.msg);
    assert_int_equal(payload_seq(&got), 2);
    cf_event_subscriber_stats st;
    cf_event_subscriber_get_stats(all, &st);
    assert_true(st.held >= 2);
    int want[] = {0, 1, 3, 4};
    bool seen_b = false;
    for (int i = 0; i < 4;) {
        if (cf_event_subscriber_next(all, 15000000, &got, &err) < 0)
            fail_msg("subscriber next %d: %s", i, err.msg);
        if (strcmp(got.workspace, "ws-sb") == 0) { /* another partition: any position */
            seen_b = true;
            continue;
        }
        assert_int_equal(payload_seq(&got), want[i]);
        i++;
    }
    if (!seen_b) {
        if (cf_event_subscriber_next(all, 15000000, &got, &err) < 0)
            fail_msg("subscriber next (b): %s", err.msg);
        assert_string_equal(got.workspace, "ws-sb");
    }
    /* nothing else */
    assert_int_equal(cf_event_subscriber_next(all, 500000, &got, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);

    /* the filtered subscriber sees only ws-sb */
    if (cf_event_subscriber_next(only_b, 15000000, &got, &err) < 0)
        fail_msg("subscriber b: %s", err.msg);
    assert_string_equal(got.workspace, "ws-sb");
    assert_string_equal(got.correlation_id, "for-b");
    assert_int_equal(cf_event_subscriber_next(only_b, 500000, &got, &err), -1);
    cf_event_clear(&got);
    cf_event_subscriber_destroy(only_b);
    cf_event_subscriber_destroy(all);
}

/* Garbage on the topic is skipped by waits and reported by tails; an
 * invalid event is never produced. */
static void test_malformed_and_invalid(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    cf_error err = {0};
    cf_event_subscriber *s = NULL;
    if (cf_event_subscriber_new(f->ev, "ws-m", 0, &s, &err) < 0)
        fail_msg("subscriber: %s", err.msg);
    int64_t t0 = cf_now_us() - 1000000;

    /* invalid events are refused before producing */
    cf_event bad;
    make_event(&bad, "ws-m", "c-bad", CF_EVENT_BLOCKED, 1);
    free(bad.topic);
    bad.topic = strdup("evil\nline");
    assert_int_equal(cf_events_publish(f->ev, &bad, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    cf_event_clear(&bad);

    /* raw garbage keyed by the workspace, then a good event */
    cf_dispatcher *d = NULL;
    cf_dispatcher_config dc = {
        .brokers = it_brokers(), .request_topic = f->topic, .result_topic = f->topic, .kafka = it_kafka()};
    if (cf_dispatcher_new(&dc, &d, &err) < 0)
        fail_msg("dispatcher: %s", err.msg);
    static const uint8_t junk[] = {0xdf, 0x10, 0x00, 0x00, 0x00, 0xa1, 'v', 0x01};
    assert_int_equal(cf_dispatcher_produce_raw(d, f->topic, "ws-m", 4, junk, sizeof(junk), &err), 0);
    assert_int_equal(cf_dispatcher_flush(d, 10000000, &err), 0);
    cf_dispatcher_destroy(d);
    publish(f, "ws-m", "c-good", CF_EVENT_COMPLETED, 5, NULL);
    flush(f);

    cf_event got = {0};
    cf_events_wait_opts o = {.correlation_id = "c-good", .workspace = "ws-m", .timeout_us = 15000000};
    if (cf_events_wait(f->ev, &o, &got, &err) < 0)
        fail_msg("wait: %s", err.msg);
    assert_int_equal(payload_seq(&got), 5);
    /* the subscriber saw only the good one (the invalid one was never sent) */
    if (cf_event_subscriber_next(s, 15000000, &got, &err) < 0)
        fail_msg("next: %s", err.msg);
    assert_string_equal(got.correlation_id, "c-good");
    cf_event_subscriber_stats st;
    cf_event_subscriber_get_stats(s, &st);
    assert_int_equal(st.malformed, 1);
    assert_int_equal(cf_event_subscriber_next(s, 300000, &got, &err), -1);
    cf_event_clear(&got);
    cf_event_subscriber_destroy(s);

    tail_col c = {.want = 1};
    cf_events_tail_opts to = {.workspace = "ws-m", .start = CF_EVENTS_FROM_TIME, .since_us = t0,
                              .timeout_us = 15000000};
    assert_int_equal(cf_events_tail(f->ev, &to, tail_collect, &c, &err), 0);
    assert_int_equal(c.malformed, 1);
    assert_int_equal(c.n, 1);
    tail_col_clear(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wait_after_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_kind_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_order_per_workspace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subscriber_misses_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_and_invalid, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
