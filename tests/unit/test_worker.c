/* Unit tests of the worker's building blocks: the offset tracker (what may be
 * committed) and the execution pool (per-key ordering). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_worker.h"
#include "exec_pool.h"
#include "offset_tracker.h"

static void tracker_commits_only_contiguous_prefix(void **state)
{
    (void)state;
    cf_offset_tracker *t = cf_offset_tracker_new();
    assert_non_null(t);
    for (int64_t o = 10; o < 15; o++)
        assert_int_equal(cf_offset_tracker_add(t, o), 0);
    /* Nothing done: the position is the first pending offset. */
    assert_int_equal(cf_offset_tracker_take_committable(t), 10);
    assert_int_equal(cf_offset_tracker_take_committable(t), -1);
    /* Later offsets finishing first must not move the position. */
    assert_int_equal(cf_offset_tracker_done(t, 12), 0);
    assert_int_equal(cf_offset_tracker_done(t, 13), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), -1);
    assert_int_equal(cf_offset_tracker_done(t, 10), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 11);
    assert_int_equal(cf_offset_tracker_done(t, 11), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 14);
    assert_int_equal(cf_offset_tracker_pending(t), 1);
    assert_int_equal(cf_offset_tracker_done(t, 14), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 15);
    assert_int_equal(cf_offset_tracker_pending(t), 0);
    cf_offset_tracker_destroy(t);
}

static void tracker_rejects_replays_and_unknown(void **state)
{
    (void)state;
    cf_offset_tracker *t = cf_offset_tracker_new();
    assert_int_equal(cf_offset_tracker_add(t, 5), 0);
    assert_int_equal(cf_offset_tracker_add(t, 5), -1);
    assert_int_equal(cf_offset_tracker_add(t, 3), -1);
    assert_int_equal(cf_offset_tracker_done(t, 4), -1);
    assert_int_equal(cf_offset_tracker_done(t, 6), -1);
    /* Gaps (compacted or transactional offsets) are fine. */
    assert_int_equal(cf_offset_tracker_add(t, 9), 0);
    assert_int_equal(cf_offset_tracker_done(t, 5), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 9);
    assert_int_equal(cf_offset_tracker_done(t, 9), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 10);
    cf_offset_tracker_destroy(NULL);
    cf_offset_tracker_destroy(t);
}

static void tracker_grows_past_initial_ring(void **state)
{
    (void)state;
    cf_offset_tracker *t = cf_offset_tracker_new();
    for (int64_t o = 0; o < 1000; o++)
        assert_int_equal(cf_offset_tracker_add(t, o), 0);
    for (int64_t o = 999; o >= 1; o--)
        assert_int_equal(cf_offset_tracker_done(t, o), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 0);
    assert_int_equal(cf_offset_tracker_done(t, 0), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 1000);
    cf_offset_tracker_destroy(t);
}

/* ---- exec pool */

typedef struct test_job {
    cf_pool_job pj;
    int seq;
} test_job;

typedef struct pool_log {
    pthread_mutex_t lock;
    int order[64];
    int n;
    int concurrent_same_key; /* times two jobs of key "A" overlapped */
    int running_a;
    int max_parallel;
    int running;
    int notified;
} pool_log;

static void record_run(cf_pool_job *pj, int slot, void *arg)
{
    pool_log *log = arg;
    test_job *j = (test_job *)pj;
    assert_true(slot >= 0 && slot < 4);
    bool is_a = pj->key && strcmp(pj->key, "A") == 0;
    pthread_mutex_lock(&log->lock);
    if (is_a && log->running_a++ > 0)
        log->concurrent_same_key++;
    if (++log->running > log->max_parallel)
        log->max_parallel = log->running;
    pthread_mutex_unlock(&log->lock);
    usleep(20 * 1000);
    pthread_mutex_lock(&log->lock);
    if (is_a)
        log->running_a--;
    log->running--;
    log->order[log->n++] = j->seq;
    pthread_mutex_unlock(&log->lock);
}

static void count_notify(void *arg)
{
    pool_log *log = arg;
    pthread_mutex_lock(&log->lock);
    log->notified++;
    pthread_mutex_unlock(&log->lock);
}

static void pool_orders_same_key_and_parallelises_others(void **state)
{
    (void)state;
    pool_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    cf_exec_pool *p = cf_exec_pool_new(4, record_run, count_notify, &log);
    assert_non_null(p);
    test_job jobs[8];
    memset(jobs, 0, sizeof(jobs));
    /* Four jobs of key A interleaved with four unkeyed ones. */
    for (int i = 0; i < 8; i++) {
        jobs[i].seq = i;
        jobs[i].pj.key = (i % 2 == 0) ? "A" : NULL;
        cf_exec_pool_submit(p, &jobs[i].pj);
    }
    for (int waited = 0; waited < 5000; waited += 10) {
        pthread_mutex_lock(&log.lock);
        int n = log.n;
        pthread_mutex_unlock(&log.lock);
        if (n == 8)
            break;
        usleep(10 * 1000);
    }
    assert_int_equal(log.n, 8);
    assert_int_equal(log.concurrent_same_key, 0);
    assert_true(log.max_parallel >= 2);
    /* Key A's jobs finished in submission order. */
    int last_a = -1;
    for (int i = 0; i < 8; i++) {
        if (log.order[i] % 2 == 0) {
            assert_true(log.order[i] > last_a);
            last_a = log.order[i];
        }
    }
    assert_int_equal(cf_exec_pool_pending(p), 0);
    cf_exec_pool_destroy(p);
    assert_int_equal(log.notified, 8);
}

static void block_run(cf_pool_job *pj, int slot, void *arg)
{
    (void)pj;
    (void)slot;
    volatile int *release = arg;
    while (!*release)
        usleep(1000);
}

static bool match_partition_one(const cf_pool_job *pj, void *arg)
{
    (void)arg;
    return pj->partition == 1;
}

static void pool_drops_only_queued_jobs(void **state)
{
    (void)state;
    volatile int release = 0;
    cf_exec_pool *p = cf_exec_pool_new(1, block_run, NULL, (void *)&release);
    test_job jobs[4];
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < 4; i++) {
        jobs[i].pj.partition = i % 2;
        cf_exec_pool_submit(p, &jobs[i].pj);
    }
    /* Wait until the single slot took job 0. */
    for (int i = 0; i < 1000 && cf_exec_pool_running(p) == 0; i++)
        usleep(1000);
    assert_int_equal(cf_exec_pool_running(p), 1);
    assert_int_equal(cf_exec_pool_pending(p), 4);
    cf_pool_job *dropped = cf_exec_pool_drop_queued(p, match_partition_one, NULL);
    int n = 0;
    for (cf_pool_job *j = dropped; j; j = j->next) {
        assert_int_equal(j->partition, 1);
        n++;
    }
    assert_int_equal(n, 2);
    assert_int_equal(cf_exec_pool_pending(p), 2);
    assert_int_equal(cf_exec_pool_count_running(p, NULL, NULL), 1);
    release = 1;
    for (int i = 0; i < 2000 && cf_exec_pool_pending(p) > 0; i++)
        usleep(1000);
    assert_int_equal(cf_exec_pool_pending(p), 0);
    cf_exec_pool_destroy(p);
    cf_exec_pool_destroy(NULL);
}

/* The configuration table's defaults must load and validate as shipped. */
static void worker_config_defaults_are_valid(void **state)
{
    (void)state;
    cf_worker_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_conf_init(&cf_worker_conf_table, &cfg, &err), 0);
    assert_int_equal(cf_conf_validate(&cf_worker_conf_table, &cfg, &err), 0);
    assert_string_equal(cfg.request_topic, "codefleet.requests");
    assert_int_equal(cfg.slots, 2);
    assert_int_equal(cfg.default_timeout_us, 30 * 1000000LL);
    assert_int_equal(cfg.default_output_bytes, 1024 * 1024);
    /* Out-of-range and unknown settings are refused. */
    assert_int_equal(cf_conf_set(&cf_worker_conf_table, &cfg, "slots", "0", &err), -1);
    assert_int_equal(cf_conf_set(&cf_worker_conf_table, &cfg, "slotz", "2", &err), -1);
    assert_int_equal(cf_conf_set(&cf_worker_conf_table, &cfg, "kafka.linger.ms", "5", &err), 0);
    assert_string_equal(cf_kvlist_get(&cfg.kafka, "linger.ms"), "5");
    cf_conf_free(&cf_worker_conf_table, &cfg);
}


/* docs/CONFIGURATION-worker.md is generated from the table; a table change
 * without regenerating it fails here (regenerate with
 * `codefleet-worker --help-config > docs/CONFIGURATION-worker.md`). */
static void worker_config_doc_is_current(void **state)
{
    (void)state;
    const char *src = getenv("CF_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/docs/CONFIGURATION-worker.md", src ? src : ".");
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char committed[1 << 16];
    size_t n = fread(committed, 1, sizeof(committed) - 1, f);
    fclose(f);
    committed[n] = '\0';
    char *generated = NULL;
    size_t glen = 0;
    FILE *m = open_memstream(&generated, &glen);
    assert_non_null(m);
    cf_conf_print_markdown(&cf_worker_conf_table, m);
    fclose(m);
    if (strcmp(committed, generated) != 0)
        fail_msg("%s is out of date: regenerate it with codefleet-worker --help-config", path);
    free(generated);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tracker_commits_only_contiguous_prefix),
        cmocka_unit_test(tracker_rejects_replays_and_unknown),
        cmocka_unit_test(tracker_grows_past_initial_ring),
        cmocka_unit_test(pool_orders_same_key_and_parallelises_others),
        cmocka_unit_test(pool_drops_only_queued_jobs),
        cmocka_unit_test(worker_config_defaults_are_valid),
        cmocka_unit_test(worker_config_doc_is_current),
    };
    return cmocka_run_group_tests_name("worker", tests, NULL, NULL);
}
