/* The partition guard's judgement (worker/partition_guard.c): when a
 * partition is probed, what a probe's answer makes of it, and the order of
 * the steps.  The probe thread runs against a consumer with no broker (its
 * probes fail); the answers judged here are made by the tests. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_util.h"
#include "partition_guard_int.h"

#define SEC 1000000LL
#define STALL (10 * SEC)

typedef struct fx {
    rd_kafka_t *rk;
    cf_pguard *g;
} fx;

static void no_wake(void *arg)
{
    (void)arg;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", "127.0.0.1:1", NULL, 0);
    rd_kafka_conf_set(conf, "group.id", "guard-test", NULL, 0);
    rd_kafka_conf_set(conf, "log_level", "0", NULL, 0);
    f->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    assert_non_null(f->rk);
    cf_error err;
    cf_error_clear(&err);
    f->g = cf_pguard_new(f->rk, STALL, no_wake, NULL, &err);
    assert_non_null(f->g);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    cf_pguard_destroy(f->g);
    rd_kafka_destroy(f->rk);
    free(f);
    return 0;
}

static cf_pguard_answer answer(int64_t low, int64_t high, int64_t committed)
{
    cf_pguard_answer a;
    memset(&a, 0, sizeof(a));
    cf_strlcpy(a.topic, "t", sizeof(a.topic));
    a.low = low;
    a.high = high;
    a.committed = committed;
    return a;
}

static cf_pguard_part fresh(int64_t now)
{
    cf_pguard_part p = {.next_offset = -1};
    cf_pguard_restart(&p, now);
    return p;
}

/* No probe before partition-stall; none while the partition is not
 * expected to move (paused by the worker, no room), whose clock restarts. */
static void probes_only_what_should_move(void **state)
{
    fx *f = *state;
    int64_t t = 1000 * SEC;
    cf_pguard_part p = fresh(t);
    assert_false(cf_pguard_check(f->g, &p, "t", 0, 1, true, t + STALL - 1));
    assert_false(cf_pguard_check(f->g, &p, "t", 0, 1, false, t + 2 * STALL));
    /* The clock restarted at t + 2 STALL. */
    assert_false(cf_pguard_check(f->g, &p, "t", 0, 1, true, t + 3 * STALL - 1));
    assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t + 3 * STALL));
    /* One probe out at a time. */
    assert_false(cf_pguard_check(f->g, &p, "t", 0, 1, true, t + 3 * STALL + 1));
}

/* Requests waiting and nothing taken: resume, then seek, then rejoin, one
 * per further period; a message taken ends the stall, counted by the last
 * step. */
static void steps_in_order_until_it_moves(void **state)
{
    fx *f = *state;
    int64_t t = 1000 * SEC;
    cf_pguard_part p = fresh(t);
    cf_pguard_answer a = answer(0, 7, 3); /* committed 3, end 7: 4 waiting */
    int expect[] = {CF_PGUARD_RESUME, CF_PGUARD_SEEK, CF_PGUARD_REJOIN, CF_PGUARD_REJOIN};
    for (int i = 0; i < 4; i++) {
        t += STALL;
        assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t));
        int64_t pos = -1;
        assert_int_equal(cf_pguard_judge(f->g, &p, &a, t + 1000, -1, &pos), expect[i]);
        assert_int_equal(pos, 3);
        assert_int_equal(p.waiting, 4);
        t += 1000;
    }
    cf_pguard_counts c;
    cf_pguard_counts_get(f->g, &c);
    assert_int_equal(c.stalled, 1);
    assert_int_equal(c.stalls, 1);
    assert_int_equal(c.steps[CF_PGUARD_RESUME], 1);
    assert_int_equal(c.steps[CF_PGUARD_SEEK], 1);
    assert_int_equal(c.steps[CF_PGUARD_REJOIN], 2);
    assert_int_equal(cf_pguard_taken(f->g, &p, "t", 0, 3, t), CF_PGUARD_REJOIN);
    cf_pguard_counts_get(f->g, &c);
    assert_int_equal(c.stalled, 0);
    assert_int_equal(c.recovered[CF_PGUARD_REJOIN], 1);
    /* Not stalled any more: a message taken is just progress. */
    assert_int_equal(cf_pguard_taken(f->g, &p, "t", 0, 4, t), -1);
    assert_int_equal(p.next_offset, 5);
}

/* The resume step is the one that worked: counted so. */
static void recovery_is_counted_by_its_step(void **state)
{
    fx *f = *state;
    int64_t t = 1000 * SEC;
    cf_pguard_part p = fresh(t);
    cf_pguard_answer a = answer(0, 2, -1); /* nothing committed: from the log start */
    t += STALL;
    assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t));
    int64_t pos = -1;
    assert_int_equal(cf_pguard_judge(f->g, &p, &a, t, -1, &pos), CF_PGUARD_RESUME);
    assert_int_equal(pos, 0);
    assert_int_equal(cf_pguard_taken(f->g, &p, "t", 0, 0, t + 1), CF_PGUARD_RESUME);
    cf_pguard_counts c;
    cf_pguard_counts_get(f->g, &c);
    assert_int_equal(c.recovered[CF_PGUARD_RESUME], 1);
    assert_int_equal(c.stalled, 0);
}

/* No verdict without reason: nothing waiting (idle), a probe that failed,
 * or a message taken while the probe was out. */
static void idle_failed_or_moved_is_no_stall(void **state)
{
    fx *f = *state;
    int64_t t = 1000 * SEC;
    cf_pguard_part p = fresh(t);
    /* Taken up to 9: position 10 = the end. */
    cf_pguard_taken(f->g, &p, "t", 0, 9, t);
    t += STALL;
    assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t));
    cf_pguard_answer idle = answer(0, 10, 4); /* committed lags the position: the position rules */
    assert_int_equal(cf_pguard_judge(f->g, &p, &idle, t, -1, NULL), -1);
    /* A failed probe: no verdict, asked again a period later. */
    t += STALL;
    assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t));
    cf_pguard_answer failed = answer(0, 99, -1);
    failed.failed = true;
    assert_int_equal(cf_pguard_judge(f->g, &p, &failed, t, -1, NULL), -1);
    assert_false(cf_pguard_check(f->g, &p, "t", 0, 1, true, t + STALL - 1));
    /* Moved while the probe was out. */
    t += STALL;
    assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t));
    cf_pguard_taken(f->g, &p, "t", 0, 10, t + 5);
    cf_pguard_answer behind = answer(0, 50, -1);
    assert_int_equal(cf_pguard_judge(f->g, &p, &behind, t + 10, -1, NULL), -1);
    cf_pguard_counts c;
    cf_pguard_counts_get(f->g, &c);
    assert_int_equal(c.stalls, 0);
    assert_int_equal(c.stalled, 0);
}

/* A transaction's commit marker after the last request: the application
 * never sees it, so the last offset taken stays one short of the log end;
 * the consumer's own position steps over it, and with it nothing is
 * waiting (review of issue 28: without it, an idle transactional topic
 * looked stalled and was rejoined every 40 s). */
static void commit_marker_is_not_a_stall(void **state)
{
    fx *f = *state;
    int64_t t = 1000 * SEC;
    cf_pguard_part p = fresh(t);
    cf_pguard_taken(f->g, &p, "t", 0, 9, t); /* the last request at 9, the marker at 10 */
    t += STALL;
    assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t));
    cf_pguard_answer a = answer(0, 11, 10);
    assert_int_equal(cf_pguard_judge(f->g, &p, &a, t, 11, NULL), -1);
    /* Without the position the same answer is a stall: the check can fail. */
    t += STALL;
    assert_true(cf_pguard_check(f->g, &p, "t", 0, 1, true, t));
    assert_int_equal(cf_pguard_judge(f->g, &p, &a, t, -1, NULL), CF_PGUARD_RESUME);
}

/* A stalled partition given up is no longer counted as stalled. */
static void forget_ends_the_count(void **state)
{
    fx *f = *state;
    int64_t t = 1000 * SEC;
    cf_pguard_part p = fresh(t);
    t += STALL;
    assert_true(cf_pguard_check(f->g, &p, "t", 3, 1, true, t));
    cf_pguard_answer a = answer(0, 5, 0);
    a.partition = 3;
    assert_int_equal(cf_pguard_judge(f->g, &p, &a, t, -1, NULL), CF_PGUARD_RESUME);
    cf_pguard_counts c;
    cf_pguard_counts_get(f->g, &c);
    assert_int_equal(c.stalled, 1);
    cf_pguard_forget(f->g, &p);
    cf_pguard_counts_get(f->g, &c);
    assert_int_equal(c.stalled, 0);
    assert_int_equal(c.stalls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(probes_only_what_should_move, setup, teardown),
        cmocka_unit_test_setup_teardown(steps_in_order_until_it_moves, setup, teardown),
        cmocka_unit_test_setup_teardown(recovery_is_counted_by_its_step, setup, teardown),
        cmocka_unit_test_setup_teardown(commit_marker_is_not_a_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_failed_or_moved_is_no_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(forget_ends_the_count, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
