/* Unit tests of the worker's building blocks: the offset tracker (what may be
 * committed) and the execution pool (per-key ordering). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_schema_json.h"
#include "cf_util.h"
#include "cf_worker.h"
#include "redis_test_server.h"
#include "worker_int.h"
#include "worker_state_int.h"
#include "exec_pool_int.h"
#include "offset_tracker_int.h"

static void tracker_commits_only_contiguous_prefix(void **state)
{
    (void)state;
    cf_offset_tracker *t = cf_offset_tracker_new(4096);
    assert_non_null(t);
    assert_int_equal(cf_offset_tracker_stored(t), -1);
    for (int64_t o = 10; o < 15; o++)
        assert_int_equal(cf_offset_tracker_add(t, o), 0);
    /* Nothing done: the position is the first pending offset. */
    assert_int_equal(cf_offset_tracker_take_committable(t), 10);
    assert_int_equal(cf_offset_tracker_stored(t), 10); /* what was handed out for commit */
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
    cf_offset_tracker *t = cf_offset_tracker_new(4096);
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
    cf_offset_tracker *t = cf_offset_tracker_new(4096);
    for (int64_t o = 0; o < 1000; o++)
        assert_int_equal(cf_offset_tracker_add(t, o), 0);
    for (int64_t o = 999; o >= 1; o--)
        assert_int_equal(cf_offset_tracker_done(t, o), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 0);
    assert_int_equal(cf_offset_tracker_done(t, 0), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 1000);
    cf_offset_tracker_destroy(t);
}

static void tracker_is_bounded(void **state)
{
    (void)state;
    cf_offset_tracker *t = cf_offset_tracker_new(100);
    for (int64_t o = 0; o < 100; o++)
        assert_int_equal(cf_offset_tracker_add(t, o), 0);
    /* Full: nothing recorded, and the same offset can be added once there
     * is room (the worker rewinds the partition to it). */
    assert_int_equal(cf_offset_tracker_add(t, 100), -2);
    assert_int_equal(cf_offset_tracker_pending(t), 100);
    assert_int_equal(cf_offset_tracker_done(t, 0), 0);
    assert_int_equal(cf_offset_tracker_add(t, 100), 0);
    assert_int_equal(cf_offset_tracker_add(t, 101), -2);
    for (int64_t o = 1; o <= 100; o++)
        assert_int_equal(cf_offset_tracker_done(t, o), 0);
    assert_int_equal(cf_offset_tracker_take_committable(t), 101);
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
        assert_int_equal(cf_exec_pool_submit(p, &jobs[i].pj), 0);
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
    /* run() returns before the pool forgets the job. */
    for (int waited = 0; waited < 2000 && cf_exec_pool_pending(p) > 0; waited++)
        usleep(1000);
    assert_int_equal(cf_exec_pool_pending(p), 0);
    cf_exec_pool_destroy(p);
    assert_int_equal(log.notified, 8);
}

static void block_run(cf_pool_job *pj, int slot, void *arg)
{
    (void)pj;
    (void)slot;
    atomic_int *release = arg;
    while (!atomic_load(release))
        usleep(1000);
}

static bool match_partition_one(int32_t partition, void *arg)
{
    (void)arg;
    return partition == 1;
}

static void pool_drops_only_queued_jobs(void **state)
{
    (void)state;
    atomic_int release = 0;
    cf_exec_pool *p = cf_exec_pool_new(1, block_run, NULL, (void *)&release);
    test_job jobs[4];
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < 4; i++) {
        jobs[i].pj.partition = i % 2;
        assert_int_equal(cf_exec_pool_submit(p, &jobs[i].pj), 0);
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
    assert_int_equal(cf_exec_pool_queued(p), 1);
    assert_int_equal(cf_exec_pool_count_running(p, NULL, NULL), 1);
    /* The dropped job 3 was the last: jobs submitted now must still be
     * linked in (the pool keeps a tail pointer) and run. */
    test_job more[2];
    memset(more, 0, sizeof(more));
    for (int i = 0; i < 2; i++)
        assert_int_equal(cf_exec_pool_submit(p, &more[i].pj), 0);
    assert_int_equal(cf_exec_pool_pending(p), 4);
    assert_int_equal(cf_exec_pool_queued(p), 3);
    atomic_store(&release, 1);
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
    cf_worker_print_config_markdown(m);
    fclose(m);
    if (strcmp(committed, generated) != 0)
        fail_msg("%s is out of date: regenerate it with codefleet-worker --help-config", path);
    free(generated);
}


/* ---- worker_state: the Redis side of executions */

static void state_addr_parse(void **state)
{
    (void)state;
    char host[64];
    int port = 0;
    assert_int_equal(cf_wstate_addr_parse("127.0.0.1:23379", host, sizeof(host), &port, NULL), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 23379);
    assert_int_equal(cf_wstate_addr_parse("redis", host, sizeof(host), &port, NULL), 0);
    assert_string_equal(host, "redis");
    assert_int_equal(port, 6379);
    assert_int_equal(cf_wstate_addr_parse("[::1]:7000", host, sizeof(host), &port, NULL), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 7000);
    assert_int_equal(cf_wstate_addr_parse("/run/redis.sock", host, sizeof(host), &port, NULL), 0);
    assert_string_equal(host, "/run/redis.sock");
    cf_error err;
    assert_int_equal(cf_wstate_addr_parse("host:0", host, sizeof(host), &port, &err), -1);
    assert_int_equal(cf_wstate_addr_parse("host:65536", host, sizeof(host), &port, &err), -1);
    assert_int_equal(cf_wstate_addr_parse("host:12x", host, sizeof(host), &port, &err), -1);
    assert_int_equal(cf_wstate_addr_parse(":6379", host, sizeof(host), &port, &err), -1);
    assert_int_equal(cf_wstate_addr_parse("::1:6379", host, sizeof(host), &port, &err), -1);
    assert_int_equal(cf_wstate_addr_parse("", host, sizeof(host), &port, &err), -1);
}

static void state_admission(void **state)
{
    (void)state;
    cf_request req;
    memset(&req, 0, sizeof(req));
    char reason[300];
    req.language = CF_LANG_SHELL;
    assert_int_equal(cf_wstate_admit(&req, false, reason, sizeof(reason)), 0);
    req.workspace = (char *)"ws-1";
    /* No Redis on this worker: named workspaces cannot run. */
    assert_int_equal(cf_wstate_admit(&req, false, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "no Redis"));
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), 0);
    req.policy.fs_mode = CF_FS_NONE;
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "contradicts workspace"));
    req.policy.fs_mode = CF_FS_PATHS;
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), -1);
    req.policy.fs_mode = CF_FS_WORKSPACE_RO;
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), 0);
    req.workspace = (char *)"../etc";
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "workspace"));
    req.workspace = NULL;
    /* workspace_rw without a workspace names nothing to write to. */
    req.policy.fs_mode = CF_FS_WORKSPACE_RW;
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "needs a workspace"));
    req.policy.fs_mode = CF_FS_UNSPECIFIED;
    req.thread = (char *)"t{1}";
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), -1);
    req.thread = (char *)"t-1";
    assert_int_equal(cf_wstate_admit(&req, true, reason, sizeof(reason)), 0);
    assert_int_equal(cf_wstate_admit(&req, false, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "thread"));
}

/* msgpack of a JSON text (for building fixtures). */
static void mp_of_json(const char *text, cf_bytes *out)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    assert_non_null(j);
    assert_int_equal(cf_json_to_msgpack(j, out, NULL), 0);
    json_decref(j);
}

static char *json_of_mp(const void *buf, size_t len)
{
    json_t *j = cf_msgpack_to_json(buf, len, NULL);
    assert_non_null(j);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(j);
    return s;
}

static void state_envelope_and_output(void **state)
{
    (void)state;
    cf_bytes in = {0}, st = {0}, env = {0};
    mp_of_json("[1,2]", &in);
    mp_of_json("{\"n\":3}", &st);
    assert_int_equal(cf_wstate_envelope(&in, st.data, st.len, "0000000000000001-000000000001", &env, NULL), 0);
    assert_int_equal(cf_msgpack_validate(env.data, env.len, NULL, NULL), 0);
    char *s = json_of_mp(env.data, env.len);
    assert_string_equal(s, "{\"checkpoint\":{\"n\":3},\"checkpoint_id\":\"0000000000000001-000000000001\",\"input\":[1,2]}");
    free(s);
    free(env.data);
    /* A new thread and a request without input: nils. */
    cf_bytes none = {0};
    assert_int_equal(cf_wstate_envelope(&none, NULL, 0, NULL, &env, NULL), 0);
    s = json_of_mp(env.data, env.len);
    assert_string_equal(s, "{\"checkpoint\":null,\"checkpoint_id\":null,\"input\":null}");
    free(s);
    free(env.data);
    free(in.data);

    /* The program's output: only a map under "checkpoint" is saved. */
    const uint8_t *cp;
    size_t len;
    cf_bytes out = {0};
    mp_of_json("{\"answer\":42,\"checkpoint\":{\"n\":4,\"deep\":[{}]}}", &out);
    assert_int_equal(cf_wstate_output_checkpoint(&out, &cp, &len, NULL), 1);
    s = json_of_mp(cp, len);
    assert_string_equal(s, "{\"deep\":[{}],\"n\":4}");
    free(s);
    free(out.data);
    static const char *const no_cp[] = {"{\"answer\":1}", "[1]", "7", "{\"checkpoint\":null}"};
    for (size_t i = 0; i < sizeof(no_cp) / sizeof(no_cp[0]); i++) {
        mp_of_json(no_cp[i], &out);
        assert_int_equal(cf_wstate_output_checkpoint(&out, &cp, &len, NULL), 0);
        free(out.data);
    }
    cf_error err;
    mp_of_json("{\"checkpoint\":[1,2]}", &out);
    assert_int_equal(cf_wstate_output_checkpoint(&out, &cp, &len, &err), -1);
    assert_non_null(strstr(err.msg, "must be a map"));
    free(out.data);
    assert_int_equal(cf_wstate_output_checkpoint(&none, &cp, &len, NULL), 0);
    free(st.data);
}

static void state_diff(void **state)
{
    (void)state;
    cf_ws_entry e[3] = {
        {.path = (char *)"b", .size = 1, .data = (uint8_t *)"B"},
        {.path = (char *)"a", .size = 1, .data = (uint8_t *)"A"},
        {.path = (char *)"gone/x", .size = 0, .data = (uint8_t *)""},
    };
    cf_ws_listing snap = {.rev = 3, .current_rev = 3, .entries = e, .n = 3};
    cf_file col[3] = {
        {.path = (char *)"a", .content = {(uint8_t *)"A", 1}},     /* unchanged */
        {.path = (char *)"b", .content = {(uint8_t *)"BB", 2}},    /* changed */
        {.path = (char *)"c/new", .content = {(uint8_t *)"", 0}},  /* added (empty) */
    };
    cf_ws_file *puts;
    const char **dels, **changed;
    size_t np, nd, nc;
    assert_int_equal(cf_wstate_diff(&snap, col, 3, &puts, &np, &dels, &nd, &changed, &nc, NULL), 0);
    assert_int_equal(np, 2);
    assert_string_equal(puts[0].path, "b");
    assert_int_equal(puts[0].len, 2);
    assert_string_equal(puts[1].path, "c/new");
    assert_int_equal(nd, 1);
    assert_string_equal(dels[0], "gone/x");
    assert_int_equal(nc, 3);
    assert_string_equal(changed[0], "b");
    assert_string_equal(changed[1], "c/new");
    assert_string_equal(changed[2], "gone/x");
    free(puts);
    free(dels);
    free(changed);
    /* Nothing collected from an empty workspace: no change. */
    cf_ws_listing empty = {0};
    assert_int_equal(cf_wstate_diff(&empty, NULL, 0, &puts, &np, &dels, &nd, &changed, &nc, NULL), 0);
    assert_int_equal(np + nd + nc, 0);
    free(puts);
    free(dels);
    free(changed);
}

/* The config table's workspace/checkpoint defaults are the libraries'. */
static void state_config_defaults_match_libraries(void **state)
{
    (void)state;
    cf_worker_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    assert_int_equal(cf_conf_init(&cf_worker_conf_table, &cfg, NULL), 0);
    cf_workspace_config wc;
    cf_workspace_config_init(&wc);
    assert_int_equal(cfg.workspace_max_file_bytes, (int64_t)wc.max_file_bytes);
    assert_int_equal(cfg.workspace_max_files, (int64_t)wc.max_files);
    assert_int_equal(cfg.workspace_max_total_bytes, (int64_t)wc.max_total_bytes);
    assert_int_equal(cfg.workspace_ttl_us, wc.ttl_us);
    assert_int_equal(cfg.workspace_history, (int64_t)wc.history);
    cf_checkpoint_config cc;
    cf_checkpoint_config_init(&cc);
    assert_int_equal(cfg.checkpoint_max_per_thread, (int64_t)cc.max_per_thread);
    assert_int_equal(cfg.checkpoint_ttl_us, cc.ttl_us);
    assert_string_equal(cfg.redis, "");
    /* The password never shows in a dump. */
    assert_int_equal(cf_conf_set(&cf_worker_conf_table, &cfg, "redis-password", "s3cret-pw", NULL), 0);
    char *dump = NULL;
    size_t dlen = 0;
    FILE *f = open_memstream(&dump, &dlen);
    cf_conf_dump(&cf_worker_conf_table, &cfg, f);
    fclose(f);
    assert_null(strstr(dump, "s3cret-pw"));
    free(dump);
    /* A user without a password is refused at start-up. */
    assert_int_equal(cf_conf_set(&cf_worker_conf_table, &cfg, "redis", "127.0.0.1:1", NULL), 0);
    assert_int_equal(cf_conf_set(&cf_worker_conf_table, &cfg, "redis-password", "", NULL), 0);
    assert_int_equal(cf_conf_set(&cf_worker_conf_table, &cfg, "redis-user", "bob", NULL), 0);
    assert_int_equal(cf_wstate_config_check(&cfg, NULL), -1);
    cf_conf_free(&cf_worker_conf_table, &cfg);
}

/* The additive result fields survive both wire forms. */
static void state_result_checkpoint_fields_roundtrip(void **state)
{
    (void)state;
    cf_result res = {0};
    res.id = strdup("r-1");
    res.status = CF_STATUS_SUCCESS;
    res.checkpoint_id = strdup("0001700000000000-000000000007");
    res.checkpoint_conflict = true;
    cf_bytes enc = {0};
    assert_int_equal(cf_result_encode(&res, &enc, NULL), 0);
    cf_result back = {0};
    assert_int_equal(cf_result_decode(enc.data, enc.len, NULL, &back, NULL), 0);
    assert_string_equal(back.checkpoint_id, res.checkpoint_id);
    assert_true(back.checkpoint_conflict);
    json_t *j = cf_result_to_json(&back);
    cf_result back2 = {0};
    assert_int_equal(cf_result_from_json(j, &back2, NULL), 0);
    assert_string_equal(back2.checkpoint_id, res.checkpoint_id);
    assert_true(back2.checkpoint_conflict);
    json_decref(j);
    free(enc.data);
    free(res.checkpoint_id);
    res.checkpoint_id = strdup("bad id");
    cf_bytes enc2 = {0};
    assert_int_equal(cf_result_encode(&res, &enc2, NULL) < 0, 1);
    free(enc2.data);
    cf_result_clear(&res);
    cf_result_clear(&back);
    cf_result_clear(&back2);
}

/* ---- worker_state against a real redis-server */

typedef struct rfix {
    cf_test_redis srv;
    cf_worker_config cfg;
    cf_wstate *st;
    cf_redis *r;                 /* a second client: "someone else" */
    cf_workspace_store *ws;
    cf_checkpoint_store *cp;
} rfix;

static int rfix_setup(void **state)
{
    if (!cf_test_redis_available())
        return -1;
    rfix *f = calloc(1, sizeof(*f));
    if (cf_test_redis_start(&f->srv, NULL, false) < 0)
        return -1;
    if (cf_conf_init(&cf_worker_conf_table, &f->cfg, NULL) < 0)
        return -1;
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->srv.port);
    cf_conf_set(&cf_worker_conf_table, &f->cfg, "redis", addr, NULL);
    cf_conf_set(&cf_worker_conf_table, &f->cfg, "redis-retry-budget", "300ms", NULL);
    cf_conf_set(&cf_worker_conf_table, &f->cfg, "redis-connect-timeout", "200ms", NULL);
    cf_conf_set(&cf_worker_conf_table, &f->cfg, "workspace-max-file", "1KiB", NULL);
    cf_conf_set(&cf_worker_conf_table, &f->cfg, "workspace-max-files", "4", NULL);
    f->st = cf_wstate_new(&f->cfg, "w-test", NULL, NULL);
    cf_redis_config rc;
    cf_test_redis_config(&f->srv, &rc);
    f->r = cf_redis_new(&rc, true, NULL);
    f->ws = cf_workspace_store_new(f->r, NULL, NULL);
    f->cp = cf_checkpoint_store_new(f->r, NULL, NULL);
    if (!f->st || !f->r || !f->ws || !f->cp)
        return -1;
    *state = f;
    return 0;
}

static int rfix_teardown(void **state)
{
    rfix *f = *state;
    cf_wstate_destroy(f->st);
    cf_workspace_store_destroy(f->ws);
    cf_checkpoint_store_destroy(f->cp);
    cf_redis_destroy(f->r);
    cf_test_redis_stop(&f->srv);
    cf_conf_free(&cf_worker_conf_table, &f->cfg);
    free(f);
    return 0;
}

static void req_init(cf_request *req, const char *id, const char *ws, const char *thread)
{
    memset(req, 0, sizeof(*req));
    req->id = strdup(id);
    req->language = CF_LANG_SHELL;
    req->workspace = ws ? strdup(ws) : NULL;
    req->thread = thread ? strdup(thread) : NULL;
}

/* Plays the backend: the program left `files` in its work directory. */
static void fake_collect(cf_wstate_run *run, const char *const *kv, size_t n)
{
    run->files.collected = calloc(n ? n : 1, sizeof(cf_file));
    for (size_t i = 0; i < n; i++) {
        run->files.collected[i].path = strdup(kv[2 * i]);
        cf_bytes_set(&run->files.collected[i].content, kv[2 * i + 1], strlen(kv[2 * i + 1]));
    }
    run->files.n_collected = n;
}

static char *ws_read(rfix *f, const char *ws, const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    if (cf_workspace_get(f->ws, ws, path, &data, &len, NULL, NULL) < 0)
        return NULL;
    return (char *)data;
}

static void state_workspace_rw_write_back(void **state)
{
    rfix *f = *state;
    cf_request req;
    req_init(&req, "r1", "proj", NULL);
    cf_result res = {0};
    cf_wstate_run run;
    bool run_it = false;
    /* A read-write run on a new workspace creates it empty. */
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
    assert_true(run_it);
    assert_true(run.ws_active);
    assert_true(run.files.collect);
    assert_false(run.files.read_only);
    assert_int_equal(run.files.n_place, 0);
    assert_int_equal(run.files.max_files, 4);
    static const char *const out1[] = {"a.txt", "one", "dir/b.txt", "two"};
    fake_collect(&run, out1, 2);
    res.status = CF_STATUS_SUCCESS;
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    cf_wstate_run_clear(&run, &req);
    assert_int_equal(res.workspace_revision, 1);
    assert_false(res.workspace_conflict);
    assert_int_equal(res.n_changed_paths, 2);
    assert_string_equal(res.changed_paths[0], "a.txt");
    assert_string_equal(res.changed_paths[1], "dir/b.txt");
    cf_result_clear(&res);

    /* Second run: sees both files, changes one, deletes one, adds one. */
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
    assert_int_equal(run.files.n_place, 2);
    assert_string_equal(run.files.place[0].path, "a.txt");
    assert_memory_equal(run.files.place[0].content.data, "one", 3);
    static const char *const out2[] = {"a.txt", "ONE", "c", ""};
    fake_collect(&run, out2, 2);
    res.status = CF_STATUS_SUCCESS;
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    cf_wstate_run_clear(&run, &req);
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.n_changed_paths, 3);
    assert_string_equal(res.changed_paths[2], "dir/b.txt");
    char *a = ws_read(f, "proj", "a.txt");
    assert_string_equal(a, "ONE");
    free(a);
    assert_null(ws_read(f, "proj", "dir/b.txt"));
    cf_result_clear(&res);

    /* No change: no new revision. */
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
    static const char *const out3[] = {"a.txt", "ONE", "c", ""};
    fake_collect(&run, out3, 2);
    res.status = CF_STATUS_SUCCESS;
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    cf_wstate_run_clear(&run, &req);
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.n_changed_paths, 0);
    cf_result_clear(&res);

    /* A failed program writes nothing back. */
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
    static const char *const out4[] = {"a.txt", "half-written"};
    fake_collect(&run, out4, 1);
    res.status = CF_STATUS_FAILED;
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    cf_wstate_run_clear(&run, &req);
    assert_int_equal(res.workspace_revision, 2);
    a = ws_read(f, "proj", "a.txt");
    assert_string_equal(a, "ONE");
    free(a);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void state_workspace_conflict_and_bad_output(void **state)
{
    rfix *f = *state;
    cf_request req;
    req_init(&req, "r2", "shared", NULL);
    assert_int_equal(cf_workspace_create(f->ws, "shared", NULL, NULL, NULL), 0);
    assert_int_equal(cf_workspace_put(f->ws, "shared", 0, "n", "1", 1, NULL, NULL), 0);
    cf_result res = {0};
    cf_wstate_run run;
    bool run_it;
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
    assert_int_equal(run.ws_rev, 1);
    /* Someone else writes while the program runs. */
    assert_int_equal(cf_workspace_put(f->ws, "shared", 1, "n", "7", 1, NULL, NULL), 0);
    static const char *const out[] = {"n", "2"};
    fake_collect(&run, out, 1);
    res.status = CF_STATUS_SUCCESS;
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    cf_wstate_run_clear(&run, &req);
    assert_true(res.workspace_conflict);
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_non_null(strstr(res.reason, "conflict"));
    char *n = ws_read(f, "shared", "n");
    assert_string_equal(n, "7"); /* the other write is preserved */
    free(n);
    cf_result_clear(&res);

    /* Bad output: a file over the per-file cap, too many files, a path the
     * workspace refuses, a failed collection: clear diagnostic, nothing written. */
    char big[1100];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *const bad_big[] = {"n", "2", "big", big};
    const char *const bad_many[] = {"1", "", "2", "", "3", "", "4", "", "5", ""};
    const char *const bad_path[] = {"n", "2", "x\x01y", "ctl"};
    struct {
        const char *const *kv;
        size_t n;
        const char *collect_error;
        const char *expect;
    } cases[] = {
        {bad_big, 2, NULL, "big"},
        {bad_many, 5, NULL, "files"},
        {bad_path, 2, NULL, "path"},
        {bad_big, 0, "more than 4 files in the work directory", "more than 4 files"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
        fake_collect(&run, cases[i].kv, cases[i].n);
        if (cases[i].collect_error)
            run.files.collect_error = strdup(cases[i].collect_error);
        res.status = CF_STATUS_SUCCESS;
        assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
        cf_wstate_run_clear(&run, &req);
        assert_false(res.workspace_conflict);
        assert_int_equal(res.workspace_revision, 2);
        assert_int_equal(res.n_changed_paths, 0);
        assert_true(res.n_diagnostics >= 1);
        if (!strstr(res.diagnostics[res.n_diagnostics - 1].message, cases[i].expect))
            fail_msg("case %zu: diagnostic '%s' lacks '%s'", i, res.diagnostics[res.n_diagnostics - 1].message,
                     cases[i].expect);
        assert_non_null(strstr(res.reason, "not written back"));
        cf_ws_info info;
        assert_int_equal(cf_workspace_info(f->ws, "shared", &info, NULL), 0);
        assert_int_equal(info.rev, 2);
        assert_int_equal(info.nfiles, 1);
        cf_ws_info_clear(&info);
        cf_result_clear(&res);
    }
    cf_request_clear(&req);
}

static void state_workspace_read_only(void **state)
{
    rfix *f = *state;
    cf_request req;
    req_init(&req, "r3", "ro-ws", NULL);
    req.policy.fs_mode = CF_FS_WORKSPACE_RO;
    cf_result res = {0};
    cf_wstate_run run;
    bool run_it = true;
    /* A read-only run does not create the workspace. */
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
    assert_false(run_it);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "does not exist"));
    cf_wstate_run_clear(&run, &req);
    cf_result_clear(&res);
    assert_int_equal(cf_workspace_create(f->ws, "ro-ws", NULL, NULL, NULL), 0);
    assert_int_equal(cf_workspace_put(f->ws, "ro-ws", 0, "f", "x", 1, NULL, NULL), 0);
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, NULL), 0);
    assert_true(run_it);
    assert_true(run.files.read_only);
    assert_false(run.files.collect);
    assert_int_equal(run.files.n_place, 1);
    res.status = CF_STATUS_SUCCESS;
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    cf_wstate_run_clear(&run, &req);
    assert_int_equal(res.workspace_revision, 1);
    assert_int_equal(res.n_changed_paths, 0);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

/* Sets the program's output to a JSON text (as the backend would). */
static void set_output(cf_result *res, const char *json)
{
    free(res->output.data);
    mp_of_json(json, &res->output);
}

static void state_checkpoints_through_runs(void **state)
{
    rfix *f = *state;
    cf_request req;
    req_init(&req, "c1", NULL, "th");
    mp_of_json("{\"q\":\"hi\"}", &req.input);
    uint8_t *orig = req.input.data;
    cf_result res = {0};
    cf_wstate_run run;
    bool run_it;
    assert_int_equal(cf_wstate_prepare(f->st, &req, 11, &run, &run_it, &res, NULL), 0);
    /* The program sees the envelope ... */
    char *s = json_of_mp(req.input.data, req.input.len);
    assert_string_equal(s, "{\"checkpoint\":null,\"checkpoint_id\":null,\"input\":{\"q\":\"hi\"}}");
    free(s);
    res.status = CF_STATUS_SUCCESS;
    set_output(&res, "{\"checkpoint\":{\"step\":1}}");
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    /* ... and the request gets its own input back. */
    assert_ptr_equal(req.input.data, orig);
    cf_wstate_run_clear(&run, &req);
    assert_non_null(res.checkpoint_id);
    assert_false(res.checkpoint_conflict);
    char first[CF_CHECKPOINT_ID_MAX + 1];
    cf_strlcpy(first, res.checkpoint_id, sizeof(first));
    cf_result_clear(&res);

    /* The next run gets that state; two runs that started from it: the
     * one that saves second is a stale writer and is refused. */
    cf_request req2;
    req_init(&req2, "c2", NULL, "th");
    cf_wstate_run run_a, run_b;
    cf_result res_a = {0}, res_b = {0};
    assert_int_equal(cf_wstate_prepare(f->st, &req, 12, &run_a, &run_it, &res_a, NULL), 0);
    s = json_of_mp(req.input.data, req.input.len);
    char want[200];
    snprintf(want, sizeof(want), "{\"checkpoint\":{\"step\":1},\"checkpoint_id\":\"%s\",\"input\":{\"q\":\"hi\"}}", first);
    assert_string_equal(s, want);
    free(s);
    assert_int_equal(cf_wstate_prepare(f->st, &req2, 13, &run_b, &run_it, &res_b, NULL), 0);
    res_b.status = CF_STATUS_SUCCESS;
    set_output(&res_b, "{\"checkpoint\":{\"step\":2,\"by\":\"b\"}}");
    assert_int_equal(cf_wstate_finish(f->st, &req2, &run_b, true, &res_b, NULL), 0);
    assert_non_null(res_b.checkpoint_id);
    res_a.status = CF_STATUS_SUCCESS;
    set_output(&res_a, "{\"checkpoint\":{\"step\":2,\"by\":\"a\"}}");
    assert_int_equal(cf_wstate_finish(f->st, &req, &run_a, true, &res_a, NULL), 0);
    assert_true(res_a.checkpoint_conflict);
    assert_null(res_a.checkpoint_id);
    assert_int_equal(res_a.status, CF_STATUS_SUCCESS);
    cf_checkpoint latest;
    assert_int_equal(cf_checkpoint_latest(f->cp, "th", &latest, NULL), 0);
    assert_string_equal(latest.id, res_b.checkpoint_id);
    assert_string_equal(latest.parent, first);
    assert_int_equal(latest.writer_seq, 13);
    cf_checkpoint_clear(&latest);
    cf_wstate_run_clear(&run_a, &req);
    cf_wstate_run_clear(&run_b, &req2);
    cf_result_clear(&res_a);
    cf_result_clear(&res_b);

    /* A save with an older fencing token is refused even when the
     * expected latest matches (a worker that lost its partition). */
    assert_int_equal(cf_wstate_prepare(f->st, &req, 5, &run, &run_it, &res, NULL), 0);
    res.status = CF_STATUS_SUCCESS;
    set_output(&res, "{\"checkpoint\":{\"step\":3}}");
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    assert_true(res.checkpoint_conflict);
    cf_wstate_run_clear(&run, &req);
    cf_result_clear(&res);

    /* Not a map: a diagnostic, nothing saved, not a conflict; a failed
     * program saves nothing. */
    assert_int_equal(cf_wstate_prepare(f->st, &req, 20, &run, &run_it, &res, NULL), 0);
    res.status = CF_STATUS_SUCCESS;
    set_output(&res, "{\"checkpoint\":\"oops\"}");
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    assert_false(res.checkpoint_conflict);
    assert_null(res.checkpoint_id);
    assert_non_null(strstr(res.diagnostics[0].message, "must be a map"));
    cf_wstate_run_clear(&run, &req);
    cf_result_clear(&res);
    assert_int_equal(cf_wstate_prepare(f->st, &req, 21, &run, &run_it, &res, NULL), 0);
    res.status = CF_STATUS_FAILED;
    set_output(&res, "{\"checkpoint\":{\"step\":9}}");
    assert_int_equal(cf_wstate_finish(f->st, &req, &run, true, &res, NULL), 0);
    assert_null(res.checkpoint_id);
    cf_wstate_run_clear(&run, &req);
    cf_result_clear(&res);
    cf_checkpoints all;
    assert_int_equal(cf_checkpoint_list(f->cp, "th", NULL, &all, NULL), 0);
    assert_int_equal(all.n, 2);
    cf_checkpoints_clear(&all);
    cf_request_clear(&req);
    cf_request_clear(&req2);
}

typedef struct relaunch {
    cf_test_redis *srv;
    atomic_int done;
} relaunch;

/* Restarts the server after 400 ms, then stays alive until told: the
 * server dies with the thread that forked it (PR_SET_PDEATHSIG). */
static void *relaunch_later(void *arg)
{
    relaunch *rl = arg;
    cf_test_sleep_us(400000);
    cf_test_redis_launch(rl->srv);
    while (!atomic_load(&rl->done))
        cf_test_sleep_us(10000);
    return NULL;
}

/* librdkafka's security.protocol hint comes with every connection a broker
 * drops during its handshake: before the worker has joined it is most
 * likely its settings; after, the broker is away (or its listener changed),
 * and the log must say that rather than blame the settings alone. */
static void kafka_errors_read_as_what_they_are(void **state)
{
    (void)state;
    const char *hint = "sasl_plaintext://127.0.0.1:19092/1: Disconnected while requesting ApiVersion: might be caused "
                       "by incorrect security.protocol configuration (connecting to a SSL listener?) or broker "
                       "version is < 0.10 (see api.version.request)";
    assert_int_equal(kafka_classify_error(RD_KAFKA_RESP_ERR__TRANSPORT, hint, false), KP_PROTOCOL);
    assert_int_equal(kafka_classify_error(RD_KAFKA_RESP_ERR__TRANSPORT, hint, true), KP_HANDSHAKE);
    const char *refused = "127.0.0.1:19092/bootstrap: Connect to ipv4#127.0.0.1:19092 failed: Connection refused";
    assert_int_equal(kafka_classify_error(RD_KAFKA_RESP_ERR__TRANSPORT, refused, false), KP_UNREACHABLE);
    assert_int_equal(kafka_classify_error(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, "1/1 brokers are down", true),
                     KP_UNREACHABLE);
    const char *auth = "SASL authentication error: Authentication failed: Invalid username or password";
    assert_int_equal(kafka_classify_error(RD_KAFKA_RESP_ERR__TRANSPORT, auth, true), KP_AUTH);
    assert_int_equal(kafka_classify_error(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, "x", false), KP_ACL);
    assert_int_equal(kafka_classify_error(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, "x", true), KP_NONE);
}

/* The quota ledger (cf_quota.h) on a real Redis: a charge that does not fit
 * changes nothing, a short keep within the grace, refunds, scopes and kinds
 * apart, and a minute whose things have all expired leaves the totals (its
 * end moved into the past by hand: the ledger runs on Redis's clock, and
 * every expectation comes from the slots the charges report, so a minute
 * turning during the test changes nothing). */
static int64_t redis_now_ms(redisContext *raw)
{
    return cf_test_redis_int(raw, "EVAL %s 0",
                             "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)");
}

/* What the ledger should charge an item, from its keys' own figures
 * (state/cf_quota.c, measure), and what Redis spends on all its keys
 * (MEMORY USAGE of every key under its hash tag). */
static int64_t reply_i64(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
}

static int64_t ws_measure(redisContext *raw, const char *id)
{
    redisReply *r = redisCommand(raw, "HMGET cf:{ws:%s}:meta stored nfiles nblobs hist_bytes path_bytes", id);
    assert_non_null(r);
    size_t meta_len = strlen("cf:{ws:}:meta") + strlen(id);
    int64_t v = reply_i64(r->element[0]) + reply_i64(r->element[3]) + reply_i64(r->element[4]) + CF_QUOTA_WS_BASE +
                CF_QUOTA_WS_PER_FILE * reply_i64(r->element[1]) +
                (CF_QUOTA_WS_PER_BLOB + CF_QUOTA_WS_BLOB_NAME(meta_len)) * reply_i64(r->element[2]);
    freeReplyObject(r);
    return v;
}

static int64_t keys_memory(redisContext *raw, const char *pattern)
{
    int64_t total = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(raw, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        assert_non_null(r);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            redisReply *m = redisCommand(raw, "MEMORY USAGE %s", r->element[1]->element[i]->str);
            if (m && m->type == REDIS_REPLY_INTEGER)
                total += m->integer;
            freeReplyObject(m);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return total;
}

/* Workspaces and checkpoint threads are charged to their profile's ledger
 * (issue 30, part 4): what each holds, history included; a write past the
 * quota is refused naming it, another profile's is not; a deleted
 * workspace leaves the ledger before a refusal, and one made again under
 * its id starts from nothing; the charge stays within a small factor of
 * what Redis spends, whatever the shape (long paths, undo logs). */
static void state_item_quotas(void **state)
{
    rfix *f = *state;
    redisContext *raw = cf_test_redis_raw(&f->srv);
    static char big[60 * 1024], other[60 * 1024];
    memset(big, 'x', sizeof(big));
    memset(other, 'y', sizeof(other));
    cf_error err;
    cf_quota_usage u;
    cf_workspace_set_quota(f->ws, "qa", 100 * 1024, NULL);
    assert_int_equal(cf_workspace_create(f->ws, "qa-1", NULL, NULL, &err), 0);
    assert_int_equal(cf_workspace_put(f->ws, "qa-1", CF_WS_ANY_REV, "f", big, sizeof(big), NULL, &err), 0);
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qa", NULL, NULL, &u, &err), 0);
    int64_t one = ws_measure(raw, "qa-1");
    assert_int_equal(u.bytes, one);
    assert_int_equal(u.count, 1);
    assert_true(one > (int64_t)sizeof(big) && one < (int64_t)sizeof(big) + 4096);
    /* A second workspace of the same size does not fit 100 KiB. */
    assert_int_equal(cf_workspace_create(f->ws, "qa-2", NULL, NULL, &err), 0);
    cf_error_clear(&err);
    assert_int_equal(cf_workspace_put(f->ws, "qa-2", CF_WS_ANY_REV, "f", big, sizeof(big), NULL, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_non_null(strstr(err.msg, "workspace quota of 'qa'"));
    assert_non_null(strstr(err.msg, "the quota is 100 KiB"));
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qa", NULL, NULL, &u, &err), 0);
    assert_int_equal(u.bytes, one + ws_measure(raw, "qa-2"));
    /* Another profile's ledger is its own. */
    cf_workspace_set_quota(f->ws, "qb", 100 * 1024, NULL);
    assert_int_equal(cf_workspace_create(f->ws, "qb-1", NULL, NULL, &err), 0);
    assert_int_equal(cf_workspace_put(f->ws, "qb-1", CF_WS_ANY_REV, "f", big, sizeof(big), NULL, &err), 0);
    /* Deleted (by an operator: no quota in the way): it leaves the ledger
     * when a write would otherwise be refused. */
    cf_workspace_set_quota(f->ws, NULL, 0, NULL);
    assert_int_equal(cf_workspace_delete(f->ws, "qa-1", &err), 0);
    cf_workspace_set_quota(f->ws, "qa", 100 * 1024, NULL);
    assert_int_equal(cf_workspace_put(f->ws, "qa-2", CF_WS_ANY_REV, "f", big, sizeof(big), NULL, &err), 0);
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qa", NULL, NULL, &u, &err), 0);
    assert_int_equal(u.bytes, ws_measure(raw, "qa-2"));
    assert_int_equal(u.count, 1);
    /* History holds what was overwritten: a second content does not fit. */
    cf_error_clear(&err);
    assert_int_equal(cf_workspace_put(f->ws, "qa-2", CF_WS_ANY_REV, "f", other, sizeof(other), NULL, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    /* A small new file fits. */
    assert_int_equal(cf_workspace_put(f->ws, "qa-2", CF_WS_ANY_REV, "g", big, 100, NULL, &err), 0);
    /* With room: the overwritten content stays stored (history keeps it). */
    cf_workspace_set_quota(f->ws, "qa", 200 * 1024, NULL);
    assert_int_equal(cf_workspace_put(f->ws, "qa-2", CF_WS_ANY_REV, "f", other, sizeof(other), NULL, &err), 0);
    redisReply *sr = redisCommand(raw, "HGET cf:{ws:qa-2}:meta stored");
    assert_int_equal(reply_i64(sr), 2 * (int64_t)sizeof(big) + 100);
    freeReplyObject(sr);
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qa", NULL, NULL, &u, &err), 0);
    assert_int_equal(u.bytes, ws_measure(raw, "qa-2"));
    /* Deleted and made again under the same id: its old charge goes. */
    cf_workspace_set_quota(f->ws, NULL, 0, NULL);
    assert_int_equal(cf_workspace_delete(f->ws, "qa-2", &err), 0);
    cf_workspace_set_quota(f->ws, "qa", 100 * 1024, NULL);
    assert_int_equal(cf_workspace_create(f->ws, "qa-2", NULL, NULL, &err), 0);
    assert_int_equal(cf_workspace_put(f->ws, "qa-2", CF_WS_ANY_REV, "f", big, sizeof(big), NULL, &err), 0);
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qa", NULL, NULL, &u, &err), 0);
    assert_int_equal(u.bytes, one);
    assert_int_equal(u.count, 1);

    /* The shape that costs Redis most beside the bytes: long paths, added
     * and deleted revision after revision (the undo logs hold them all). */
    cf_workspace_set_quota(f->ws, "qc", 0, NULL); /* charged, never refused */
    assert_int_equal(cf_workspace_create(f->ws, "qc-1", NULL, NULL, &err), 0);
    enum { NP = 40 };
    static char paths[NP][920];
    cf_ws_file fl[NP];
    const char *dl[NP];
    for (int i = 0; i < NP; i++) {
        memset(paths[i], 'p', 900);
        for (int c = 200; c < 900; c += 201)
            paths[i][c] = '/'; /* components of at most 255 bytes */
        snprintf(paths[i] + 900, 20, "%d", i);
        fl[i] = (cf_ws_file){.path = paths[i], .data = "0123456789", .len = 10};
        dl[i] = paths[i];
    }
    for (int rev = 0; rev < 10; rev++)
        if (rev % 2 == 0)
            assert_int_equal(cf_workspace_commit(f->ws, "qc-1", CF_WS_ANY_REV, fl, NP, NULL, 0, NULL, &err), 0);
        else
            assert_int_equal(cf_workspace_commit(f->ws, "qc-1", CF_WS_ANY_REV, NULL, 0, dl, NP, NULL, &err), 0);
    int64_t charged = 0;
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qc", "cf:{ws:qc-1}:meta", &charged, NULL, &err), 0);
    int64_t real = keys_memory(raw, "cf:{ws:qc-1}:*");
    print_message("long paths, 10 revisions: charged %lld, Redis spends %lld\n", (long long)charged, (long long)real);
    assert_true(charged * 2 >= real && charged <= 3 * real);

    /* Many tiny files under a long workspace id: each blob's key names the
     * id and its 64-digit hash, which the charge counts (without it, half
     * of what Redis spends). */
    char long_id[128 + 1], long_pat[128 + 16]; /* the longest id (CF_STATE_NAME_MAX) */
    memset(long_id, 'i', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    memcpy(long_id, "qc-", 3);
    snprintf(long_pat, sizeof(long_pat), "cf:{ws:%s}:*", long_id);
    assert_int_equal(cf_workspace_create(f->ws, long_id, NULL, NULL, &err), 0);
    enum { NT = 400 };
    static char tpath[NT][8], tdata[NT][8];
    cf_ws_file tf[NT];
    for (int i = 0; i < NT; i++) {
        snprintf(tpath[i], sizeof(tpath[i]), "%d", i);
        snprintf(tdata[i], sizeof(tdata[i]), "%d", i);
        tf[i] = (cf_ws_file){.path = tpath[i], .data = tdata[i], .len = strlen(tdata[i])};
    }
    assert_int_equal(cf_workspace_commit(f->ws, long_id, CF_WS_ANY_REV, tf, NT, NULL, 0, NULL, &err), 0);
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qc", NULL, NULL, NULL, &err), 0);
    char long_meta[128 + 16];
    snprintf(long_meta, sizeof(long_meta), "cf:{ws:%s}:meta", long_id);
    assert_int_equal(cf_quota_item_get(f->r, "workspaces", "qc", long_meta, &charged, NULL, &err), 0);
    assert_int_equal(charged, ws_measure(raw, long_id));
    real = keys_memory(raw, long_pat);
    print_message("%d tiny files, a %zu-byte id: charged %lld, Redis spends %lld\n", NT, strlen(long_id),
                  (long long)charged, (long long)real);
    assert_true(charged * 4 >= real * 3 && charged <= 2 * real);
    cf_workspace_set_quota(f->ws, NULL, 0, NULL);

    /* Checkpoints: 20 KiB states against 50 KiB. */
    static uint8_t st[6 + 20000]; /* msgpack {"s": <20000 bytes str 16>} */
    memcpy(st, "\x81\xa1s\xda", 4);
    st[4] = 20000 >> 8;
    st[5] = 20000 & 0xff;
    memset(st + 6, 'z', 20000);
    cf_checkpoint_set_quota(f->cp, "qa", 50 * 1024, NULL);
    char id[CF_CHECKPOINT_ID_MAX + 1];
    assert_int_equal(cf_checkpoint_save(f->cp, "qa-t", st, sizeof(st), NULL, id, &err), 0);
    assert_int_equal(cf_quota_item_get(f->r, "checkpoints", "qa", NULL, NULL, &u, &err), 0);
    assert_true(u.bytes > 2 * (int64_t)sizeof(st) && u.bytes < 2 * (int64_t)sizeof(st) + 4096);
    cf_error_clear(&err);
    assert_int_equal(cf_checkpoint_save(f->cp, "qa-t", st, sizeof(st), NULL, id, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_non_null(strstr(err.msg, "checkpoint quota of 'qa'"));
    /* The thread deleted: a new one under the same id fits again. */
    cf_checkpoint_set_quota(f->cp, NULL, 0, NULL);
    assert_true(cf_checkpoint_delete_thread(f->cp, "qa-t", &err) >= 0);
    cf_checkpoint_set_quota(f->cp, "qa", 50 * 1024, NULL);
    assert_int_equal(cf_checkpoint_save(f->cp, "qa-t", st, sizeof(st), NULL, id, &err), 0);
    cf_checkpoint_set_quota(f->cp, "qb", 50 * 1024, NULL);
    assert_int_equal(cf_checkpoint_save(f->cp, "qb-t", st, sizeof(st), NULL, id, &err), 0);
    /* Small states on a long thread name: the keys' cost dominates. */
    char thread[130];
    memset(thread, 't', 120);
    thread[120] = '\0';
    cf_checkpoint_set_quota(f->cp, "qc", 0, NULL);
    for (int i = 0; i < 20; i++)
        assert_int_equal(cf_checkpoint_save(f->cp, thread, "\x81\xa1s\x01", 4, NULL, id, &err), 0);
    char item[200], pattern[200];
    snprintf(item, sizeof(item), "cf:{cp:%s}:meta", thread);
    snprintf(pattern, sizeof(pattern), "cf:{cp:%s}:*", thread);
    assert_int_equal(cf_quota_item_get(f->r, "checkpoints", "qc", item, &charged, NULL, &err), 0);
    real = keys_memory(raw, pattern);
    print_message("20 small checkpoints on a 120-byte thread: charged %lld, Redis spends %lld\n", (long long)charged,
                  (long long)real);
    assert_true(charged * 2 >= real && charged <= 3 * real);
    cf_checkpoint_set_quota(f->cp, NULL, 0, NULL);

    /* A write in flight keeps its reservation: another item's refusal,
     * which measures items again, does not take it away (it is not there
     * yet, and would measure 0). */
    bool fits = false;
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-1}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_GROW, 10000, 20000, "req-1", &fits, &u, &err), 0);
    assert_true(fits);
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-2}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_GROW, 15000, 20000, "req-x", &fits, &u, &err), 0);
    assert_false(fits);
    assert_int_equal(u.bytes, 10000);
    /* The same request again, as when its worker died between reserving
     * and syncing and it was redelivered: it replaces its own reservation
     * (stacked, 20000 would be held, and near the quota the retry itself
     * would be refused for five minutes). */
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-1}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_GROW, 10000, 20000, "req-1", &fits, &u, &err), 0);
    assert_true(fits);
    assert_int_equal(u.bytes, 10000);
    /* Another request writing the same item stacks on it, and so does a
     * nameless writer (refused here: 15000 + 6000 is past 20000). */
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-1}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_GROW, 5000, 20000, "req-2", &fits, &u, &err), 0);
    assert_true(fits);
    assert_int_equal(u.bytes, 15000);
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-1}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_GROW, 6000, 20000, NULL, &fits, &u, &err), 0);
    assert_false(fits);
    assert_int_equal(u.bytes, 15000);
    /* A writer counts only beside the reservation it was written with: one
     * left by another reservation (an older worker's, which writes no
     * writer, during a rolling upgrade) does not make a grow its own. */
    cf_test_redis_int(raw, "HSET cf:quota:{workspaces/qd}:writers cf:{ws:qd-1}:meta %s", "1 req-2");
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-1}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_GROW, 1000, 20000, "req-2", &fits, &u, &err), 0);
    assert_true(fits);
    assert_int_equal(u.bytes, 16000);
    /* A writer the ledger cannot name is refused as an argument. */
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-1}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_GROW, 1, 20000, "a b", &fits, &u, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    /* Its sync measures it (never written: out of the ledger). */
    assert_int_equal(cf_quota_item(f->r, "workspaces", "qd", "cf:{ws:qd-1}:meta", CF_QUOTA_WORKSPACE,
                                   CF_QUOTA_ITEM_SYNC, 0, 0, "req-1", NULL, &u, &err), 0);
    assert_int_equal(u.bytes, 0);
    assert_int_equal(u.count, 0);

    /* A thread whose held an older codefleet did not keep is counted again
     * from its index at its next save. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(cf_checkpoint_save(f->cp, "qe-t", st, sizeof(st), NULL, id, &err), 0);
    cf_test_redis_int(raw, "HDEL cf:{cp:qe-t}:meta held");
    assert_int_equal(cf_checkpoint_save(f->cp, "qe-t", "\x81\xa1s\x01", 4, NULL, id, &err), 0);
    redisReply *hv = redisCommand(raw, "HVALS cf:{cp:qe-t}:sz");
    int64_t sum = 0;
    for (size_t i = 0; hv && i < hv->elements; i++)
        sum += reply_i64(hv->element[i]);
    assert_int_equal(hv ? hv->elements : 0, 4);
    freeReplyObject(hv);
    redisReply *hr = redisCommand(raw, "HGET cf:{cp:qe-t}:meta held");
    assert_int_equal(reply_i64(hr), sum);
    freeReplyObject(hr);
    assert_true(sum > 3 * (int64_t)sizeof(st));
    redisFree(raw);
}

static void state_quota_ledger(void **state)
{
    rfix *f = *state;
    redisContext *raw = cf_test_redis_raw(&f->srv);
    const int64_t day = 24 * 3600 * 1000LL;
    cf_quota q = {.max_bytes = 1000, .max_count = 3, .short_ttl_ms = 600000, .grace_percent = 50,
                  .short_extra_bytes = 10};
    cf_quota_outcome c1, c2, c;
    cf_quota_usage u;
    int64_t before = redis_now_ms(raw);
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, day, 400, &c1, NULL), 0);
    int64_t after = redis_now_ms(raw);
    assert_int_equal(c1.ttl_ms, day);
    assert_int_equal(c1.held.bytes, 0);
    assert_int_equal(c1.charged_bytes, 400);
    /* It expires a day after the charge, on Redis's clock; its minute ends
     * at most a minute after that, and the ledger's keys outlive it by at
     * most another. */
    assert_true(c1.expire_at_ms >= before + day && c1.expire_at_ms <= after + day);
    int64_t end = c1.slot * CF_QUOTA_SLOT_MS;
    assert_true(end >= c1.expire_at_ms && end < c1.expire_at_ms + CF_QUOTA_SLOT_MS);
    int64_t pttl = cf_test_redis_int(raw, "PTTL cf:quota:{results/a}");
    assert_true(pttl > day && pttl <= end - before + CF_QUOTA_SLOT_MS);
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, day, 400, &c2, NULL), 0);
    assert_int_equal(c2.ttl_ms, day);
    assert_int_equal(c2.held.bytes, 400);
    assert_int_equal(c2.held.count, 1);
    /* 800 + 300 > 1000: kept the short while, within 1.5 x the caps, and
     * charged its extra. */
    cf_quota_outcome c3;
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, day, 300, &c3, NULL), 0);
    assert_int_equal(c3.ttl_ms, 600000);
    assert_int_equal(c3.held.bytes, 800);
    assert_int_equal(c3.charged_bytes, 310);
    assert_true(c3.slot < c1.slot);
    /* 1110 + 500 > 1500: not kept at all, nothing charged. */
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, day, 500, &c, NULL), 0);
    assert_int_equal(c.ttl_ms, 0);
    assert_int_equal(cf_quota_usage_get(f->r, "results", "a", &u, NULL), 0);
    assert_int_equal(u.bytes, 1110);
    assert_int_equal(u.count, 3);
    /* By count: the fourth item is past max_count 3 but within the grace;
     * the fifth (5 > 4.5) is not kept. */
    cf_quota_outcome c4;
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, day, 1, &c4, NULL), 0);
    assert_int_equal(c4.ttl_ms, 600000);
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, day, 1, &c, NULL), 0);
    assert_int_equal(c.ttl_ms, 0);
    assert_int_equal(c.held.count, 4);
    /* A refund takes back exactly what its charge added. */
    assert_int_equal(cf_quota_refund(f->r, "results", "a", c3.slot, c3.charged_bytes, NULL), 0);
    assert_int_equal(cf_quota_refund(f->r, "results", "a", c4.slot, c4.charged_bytes, NULL), 0);
    assert_int_equal(cf_quota_usage_get(f->r, "results", "a", &u, NULL), 0);
    assert_int_equal(u.bytes, 800);
    assert_int_equal(u.count, 2);
    /* Without a short ttl, past the caps is not kept. */
    cf_quota strict = {.max_bytes = 1000};
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &strict, day, 300, &c, NULL), 0);
    assert_int_equal(c.ttl_ms, 0);
    /* Another scope, another kind: untouched. */
    assert_int_equal(cf_quota_charge(f->r, "results", "b", &q, day, 900, &c, NULL), 0);
    assert_int_equal(c.ttl_ms, day);
    assert_int_equal(c.held.bytes, 0);
    assert_int_equal(cf_quota_usage_get(f->r, "checkpoints", "a", &u, NULL), 0);
    assert_int_equal(u.bytes, 0);
    /* The day charges' minutes pass: their 800 bytes and 2 items leave,
     * with their parts. */
    const int64_t slots[2] = {c1.slot, c2.slot};
    for (int i = 0; i < 2; i++)
        (void)cf_test_redis_int(raw, "ZADD cf:quota:{results/a}:slots 1000 %lld", (long long)slots[i]);
    assert_int_equal(cf_quota_usage_get(f->r, "results", "a", &u, NULL), 0);
    assert_int_equal(u.bytes, 0);
    assert_int_equal(u.count, 0);
    assert_int_equal(cf_test_redis_int(raw, "HEXISTS cf:quota:{results/a} b:%lld", (long long)c1.slot), 0);
    /* What is left: the short keeps' minutes (refunded, not yet ended). */
    assert_int_equal(cf_test_redis_int(raw, "ZCARD cf:quota:{results/a}:slots"), c3.slot == c4.slot ? 1 : 2);
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, day, 1000, &c, NULL), 0);
    assert_int_equal(c.ttl_ms, day);
    /* Nonsense is refused, not charged. */
    cf_error err;
    assert_int_equal(cf_quota_charge(f->r, "results", "a", &q, 0, 1, &c, &err), -1);
    assert_int_equal(c.ttl_ms, 0);
    redisFree(raw);
}

/* One run per id: the lease, the stored result replayed, a reused id
 * refused, tenants apart. */
static void state_idempotency(void **state)
{
    rfix *f = *state;
    const char *d1 = "1111111111111111111111111111111111111111111111111111111111111111";
    const char *d2 = "2222222222222222222222222222222222222222222222222222222222222222";
    cf_claim c;
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-1", d1, "w1/0/1", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_RUN);
    /* While it runs: the same request waits, another body is refused, the
     * same id of another tenant is independent. */
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-1", d1, "w2/0/1", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_BUSY);
    assert_true(c.wait_ms > 0 && c.wait_ms <= 5000);
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-1", d2, "w2/0/2", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_REUSED);
    assert_int_equal(cf_wstate_claim(f->st, "q", "id-1", d2, "w2/0/3", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_RUN);
    bool held = false;
    assert_int_equal(cf_wstate_lease_renew(f->st, "p", "id-1", d1, "w1/0/1", 5000, &held, NULL), 0);
    assert_true(held);
    assert_int_equal(cf_wstate_lease_renew(f->st, "p", "id-1", d1, "w2/0/1", 5000, &held, NULL), 0);
    assert_false(held);
    /* Stored: both bodies now get their answer without a lease. */
    cf_bytes result = {(uint8_t *)"RESULT", 6};
    bool stored = false;
    assert_int_equal(cf_wstate_store_result(f->st, "p", "id-1", d1, "w1/0/1", &result, 60000, 0, &stored, NULL), 0);
    assert_true(stored);
    /* Its retry after a lost reply knows the stored result is its own. */
    assert_int_equal(cf_wstate_store_result(f->st, "p", "id-1", d1, "w1/0/1", &result, 60000, 0, &stored, NULL), 0);
    assert_true(stored);
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-1", d1, "w3/0/1", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_REPLAY);
    assert_int_equal(c.stored.len, 6);
    assert_memory_equal(c.stored.data, "RESULT", 6);
    cf_claim_clear(&c);
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-1", d2, "w3/0/2", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_REUSED);
    /* The first answer stays the answer. */
    cf_bytes other = {(uint8_t *)"OTHER", 5};
    assert_int_equal(cf_wstate_store_result(f->st, "p", "id-1", d1, "w9/0/1", &other, 60000, 0, &stored, NULL), 0);
    assert_false(stored);
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-1", d1, "w3/0/3", 5000, &c, NULL), 0);
    assert_memory_equal(c.stored.data, "RESULT", 6);
    cf_claim_clear(&c);
    /* A run that lost its lease to another stores nothing: the holder's
     * answer will be the answer. */
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-4", d1, "w1/2/1", 60000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_RUN);
    redisContext *raw = cf_test_redis_raw(&f->srv);
    (void)cf_test_redis_int(raw, "SET cf:lease:{p/id-4} %s:w2/2/1", d1);
    cf_bytes stale = {(uint8_t *)"STALE", 5};
    assert_int_equal(cf_wstate_store_result(f->st, "p", "id-4", d1, "w1/2/1", &stale, 60000, 0, &stored, NULL), 0);
    assert_false(stored);
    assert_int_equal(cf_test_redis_int(raw, "EXISTS cf:idem:{p/id-4}"), 0);
    assert_int_equal(cf_wstate_lease_renew(f->st, "p", "id-4", d1, "w1/2/1", 5000, &held, NULL), 0);
    assert_false(held);
    /* A lease that lapsed with nobody taking over is taken back by renewal;
     * once an answer is stored it is not. */
    assert_int_equal(cf_test_redis_int(raw, "DEL cf:lease:{p/id-4}"), 1);
    assert_int_equal(cf_wstate_lease_renew(f->st, "p", "id-4", d1, "w1/2/1", 5000, &held, NULL), 0);
    assert_true(held);
    assert_int_equal(cf_test_redis_int(raw, "EXISTS cf:lease:{p/id-4}"), 1);
    assert_int_equal(cf_wstate_store_result(f->st, "p", "id-4", d1, "w1/2/1", &result, 60000, 0, NULL, NULL), 0);
    assert_int_equal(cf_test_redis_int(raw, "EXISTS cf:lease:{p/id-4}"), 0);
    assert_int_equal(cf_wstate_lease_renew(f->st, "p", "id-4", d1, "w1/2/1", 5000, &held, NULL), 0);
    assert_false(held);
    redisFree(raw);
    /* A released lease (a stopped run) lets the next delivery run at once. */
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-2", d1, "w1/1/1", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_RUN);
    assert_int_equal(cf_wstate_lease_release(f->st, "p", "id-2", d1, "w1/1/1", NULL), 0);
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-2", d1, "w2/1/1", 5000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_RUN);
    /* A lease that is not renewed lapses (a dead worker). */
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-3", d1, "w1/1/2", 1000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_RUN);
    cf_test_sleep_us(1200 * 1000);
    assert_int_equal(cf_wstate_claim(f->st, "p", "id-3", d1, "w2/1/2", 1000, &c, NULL), 0);
    assert_int_equal(c.kind, CF_CLAIM_RUN);
}

static void state_attempts_and_outage(void **state)
{
    rfix *f = *state;
    int64_t n = 0;
    assert_int_equal(cf_wstate_attempt(f->st, "t", 0, 5, -1, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(cf_wstate_attempt(f->st, "t", 0, 5, -1, &n, NULL), 0);
    assert_int_equal(n, 2);
    /* Another message (a resubmission of the id is one): counted apart. */
    assert_int_equal(cf_wstate_attempt(f->st, "t", 0, 9, -1, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(cf_wstate_attempt(f->st, "t", 1, 5, -1, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(cf_wstate_attempt(f->st, "u", 0, 5, -1, &n, NULL), 0);
    assert_int_equal(n, 1);
    redisContext *raw = cf_test_redis_raw(&f->srv);
    /* The worker's group names the key: another fleet on the same Redis
     * counts apart. */
    char key[200];
    snprintf(key, sizeof(key), "cf:deliveries:{%s/t/0}", f->cfg.group);
    long long ttl = cf_test_redis_int(raw, "PTTL %s", key);
    assert_true(ttl > 0 && ttl <= 86400000);
    assert_int_equal(cf_test_redis_int(raw, "HLEN %s", key), 2);
    /* Once the partition's position stored for commit passes them, the
     * counts go with the next delivery: Redis holds the messages not yet
     * committed, whatever the request rate. */
    assert_int_equal(cf_wstate_attempt(f->st, "t", 0, 12, 9, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(cf_test_redis_int(raw, "HLEN %s", key), 2); /* 9 is not below 9 */
    assert_int_equal(cf_wstate_attempt(f->st, "t", 0, 13, 13, &n, NULL), 0);
    assert_int_equal(cf_test_redis_int(raw, "HLEN %s", key), 1);
    assert_int_equal(cf_test_redis_int(raw, "HEXISTS %s 13", key), 1);
    /* Not committed yet: a redelivery still counts on. */
    assert_int_equal(cf_wstate_attempt(f->st, "t", 0, 13, 13, &n, NULL), 0);
    assert_int_equal(n, 2);
    redisFree(raw);

    /* Redis gone: prepare retries for the budget (300 ms) then fails with a
     * clear, retriable error; after a restart it works again. */
    cf_test_redis_kill(&f->srv);
    cf_request req;
    req_init(&req, "r-out", "outage", "th-out");
    cf_result res = {0};
    cf_wstate_run run;
    bool run_it;
    cf_error err;
    cf_error_clear(&err);
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, &err), -1);
    int64_t took = cf_mono_us() - t0;
    assert_true(took >= 250000 && took < 3000000);
    assert_non_null(strstr(err.msg, "workspace store unavailable"));
    assert_true(err.retriable);
    cf_wstate_run_clear(&run, &req);
    cf_result_clear(&res);
    assert_int_equal(cf_test_redis_launch(&f->srv), 0);
    assert_int_equal(cf_wstate_prepare(f->st, &req, 0, &run, &run_it, &res, &err), 0);
    assert_true(run_it);
    assert_true(run.cp_active);
    cf_wstate_run_clear(&run, &req);
    cf_result_clear(&res);

    /* A blip shorter than the budget is ridden out by the retries. */
    cf_conf_set(&cf_worker_conf_table, &f->cfg, "redis-retry-budget", "5s", NULL);
    cf_wstate *patient = cf_wstate_new(&f->cfg, "w-patient", NULL, NULL);
    assert_non_null(patient);
    assert_int_equal(cf_wstate_attempt(patient, "warm-up", 0, 0, -1, &n, NULL), 0);
    cf_test_redis_kill(&f->srv);
    pthread_t th;
    relaunch rl = {.srv = &f->srv, .done = 0};
    assert_int_equal(pthread_create(&th, NULL, relaunch_later, &rl), 0);
    t0 = cf_mono_us();
    int rc = cf_wstate_prepare(patient, &req, 0, &run, &run_it, &res, &err);
    took = cf_mono_us() - t0;
    atomic_store(&rl.done, 1);
    pthread_join(th, NULL);
    if (rc < 0)
        fail_msg("prepare across a blip: %s", err.msg);
    assert_true(run_it);
    assert_true(took >= 300000);
    cf_wstate_run_clear(&run, &req);
    cf_result_clear(&res);
    cf_wstate_destroy(patient);
    cf_request_clear(&req);
}


/* The worker frees a job as soon as its result is delivered, which can be
 * before run() returns: the pool must not touch a job after handing it to
 * run().  (Under ASan the old pool read the freed job when unlinking it.) */
typedef struct freeing_job {
    cf_pool_job pj;
    int seq;
} freeing_job;

static void run_and_free(cf_pool_job *pj, int slot, void *arg)
{
    (void)slot;
    int *done = arg;
    free(pj->key);
    memset(pj, 0xab, sizeof(freeing_job)); /* poison: a later read would see garbage */
    free(pj);
    __atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST);
}

/* Fair shares: each job waits for its own release, so what starts when
 * is decided by the pool alone, not by timing. */
typedef struct gated_job {
    cf_pool_job pj; /* first: the pool hands this pointer back */
    bool go;
} gated_job;

typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int started[4];      /* per group */
    int order[64];       /* groups in start order */
    gated_job *jobs[64]; /* in start order */
    bool released[64];   /* jobs[i] let go (and so freed): never touched again */
    int n;
} gate;

static void gated_run(cf_pool_job *pj, int slot, void *arg)
{
    (void)slot;
    gate *g = arg;
    gated_job *j = (gated_job *)pj;
    pthread_mutex_lock(&g->lock);
    g->started[pj->group]++;
    g->order[g->n] = pj->group;
    g->jobs[g->n++] = j;
    pthread_cond_broadcast(&g->cv);
    while (!j->go)
        pthread_cond_wait(&g->cv, &g->lock);
    pthread_mutex_unlock(&g->lock);
    free(j);
}

static void wait_started(gate *g, int total)
{
    pthread_mutex_lock(&g->lock);
    while (g->n < total)
        pthread_cond_wait(&g->cv, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

/* Lets the i-th started job end (once: it frees itself). */
static void release(gate *g, int i)
{
    pthread_mutex_lock(&g->lock);
    if (!g->released[i])
        g->jobs[i]->go = true;
    g->released[i] = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->lock);
}

static void gate_init(gate *g)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cv, NULL);
}

static void submit_gated(cf_exec_pool *p, int group)
{
    gated_job *j = calloc(1, sizeof(*j));
    assert_non_null(j);
    j->pj.group = group;
    assert_int_equal(cf_exec_pool_submit(p, &j->pj), 0);
}

static void submit_gated_costs(cf_exec_pool *p, int group, int64_t memory, int64_t pids)
{
    gated_job *j = calloc(1, sizeof(*j));
    assert_non_null(j);
    j->pj.group = group;
    j->pj.cost[CF_POOL_MEMORY] = memory;
    j->pj.cost[CF_POOL_PIDS] = pids;
    assert_int_equal(cf_exec_pool_submit(p, &j->pj), 0);
}

static void submit_gated_cost(cf_exec_pool *p, int group, int64_t cost)
{
    submit_gated_costs(p, group, cost, 0);
}

/* Releases every job, started or to start, and waits for the pool. */
static void drain_gated(cf_exec_pool *p, gate *g, int total)
{
    for (int i = 0; i < total; i++) {
        wait_started(g, i + 1);
        release(g, i);
    }
    while (cf_exec_pool_pending(p) > 0)
        usleep(1000);
}

/* Issue 30 part 2: a tenant's backlog (group 0) takes at most its cap of
 * the slots, and a job of another tenant (group 1) queued behind that
 * backlog starts in the slot left, before the backlog's next. */
static void pool_shares_slots_between_groups(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(2, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[2] = {1, 1}, caps[2] = {1, 2};
    assert_int_equal(cf_exec_pool_set_groups(p, 2, weights, caps), 0);
    for (int i = 0; i < 6; i++)
        submit_gated(p, 0);
    wait_started(&g, 1);
    submit_gated(p, 1);
    wait_started(&g, 2);
    pthread_mutex_lock(&g.lock);
    assert_int_equal(g.started[0], 1); /* the cap held the second slot free */
    assert_int_equal(g.started[1], 1);
    pthread_mutex_unlock(&g.lock);
    drain_gated(p, &g, 7);
    assert_int_equal(g.started[0], 6);
    cf_exec_pool_destroy(p);
}

/* Weights 3:1, both backlogged: as slots free, they go 3 to 1.  Four jobs
 * of group 1 hold the four slots; group 1 then queues more before group 0
 * does (first come is not first served across groups). */
static void pool_weights_share_the_slots(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(4, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[2] = {3, 1}, caps[2] = {4, 4};
    assert_int_equal(cf_exec_pool_set_groups(p, 2, weights, caps), 0);
    for (int i = 0; i < 4; i++)
        submit_gated(p, 1);
    wait_started(&g, 4);
    for (int i = 0; i < 8; i++)
        submit_gated(p, 1);
    for (int i = 0; i < 8; i++)
        submit_gated(p, 0);
    /* Free the four slots one by one, each time waiting for its new job:
     * running (g0, g1) goes (0,3) -> g0, (1,2) -> g0, (2,1) -> g0, (3,0) -> g1. */
    for (int i = 0; i < 4; i++) {
        release(&g, i);
        wait_started(&g, 5 + i);
    }
    pthread_mutex_lock(&g.lock);
    int want[4] = {0, 0, 0, 1};
    for (int i = 0; i < 4; i++)
        assert_int_equal(g.order[4 + i], want[i]);
    pthread_mutex_unlock(&g.lock);
    for (int i = 4; i < 20; i++) {
        wait_started(&g, i + 1);
        release(&g, i);
    }
    while (cf_exec_pool_pending(p) > 0)
        usleep(1000);
    cf_exec_pool_destroy(p);
}

/* More busy tenants than slots: a tie goes to the earliest waiting job,
 * not to the group listed first.  Three groups fill the three slots, a
 * fourth queues one job, then the three queue more; when group 0's job
 * ends, groups 0 and 3 both run none: group 3's job came first and starts
 * (choosing by group number, group 3 would wait while the others have
 * work). */
static void pool_ties_go_to_the_earliest_job(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(3, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[4] = {1, 1, 1, 1}, caps[4] = {3, 3, 3, 3};
    assert_int_equal(cf_exec_pool_set_groups(p, 4, weights, caps), 0);
    for (int grp = 0; grp < 3; grp++)
        submit_gated(p, grp);
    wait_started(&g, 3);
    submit_gated(p, 3);
    for (int i = 0; i < 3; i++)
        for (int grp = 0; grp < 3; grp++)
            submit_gated(p, grp);
    release(&g, 0); /* group 0's */
    wait_started(&g, 4);
    pthread_mutex_lock(&g.lock);
    assert_int_equal(g.order[3], 3);
    pthread_mutex_unlock(&g.lock);
    drain_gated(p, &g, 13);
    cf_exec_pool_destroy(p);
}

/* The memory budget cannot starve a large job: three small jobs of group
 * 0 (3 units each) hold 9 of a budget of 10, group 1 queues one of 8, then
 * group 0 more small ones.  As the small ones end, none starts in their
 * place (each would fit, and would keep the large one out for ever): the
 * running ones drain, and the large one starts before the small ones
 * queued after it. */
static void pool_budget_drains_for_a_large_job(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(4, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[2] = {1, 1}, caps[2] = {4, 4};
    assert_int_equal(cf_exec_pool_set_groups(p, 2, weights, caps), 0);
    cf_exec_pool_set_budget(p, CF_POOL_MEMORY, 10);
    for (int i = 0; i < 3; i++)
        submit_gated_cost(p, 0, 3);
    wait_started(&g, 3);
    submit_gated_cost(p, 1, 8);
    for (int i = 0; i < 4; i++)
        submit_gated_cost(p, 0, 3);
    for (int i = 0; i < 2; i++) {
        release(&g, i);
        /* The released job leaves the pool: then nothing may have started. */
        while (cf_exec_pool_running(p) > (size_t)(2 - i))
            usleep(1000);
        pthread_mutex_lock(&g.lock);
        assert_int_equal(g.n, 3);
        pthread_mutex_unlock(&g.lock);
    }
    release(&g, 2);
    wait_started(&g, 4);
    pthread_mutex_lock(&g.lock);
    assert_int_equal(g.order[3], 1);
    pthread_mutex_unlock(&g.lock);
    drain_gated(p, &g, 8);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_MEMORY), 0);
    cf_exec_pool_destroy(p);
}

/* One group's share of the budget: with 7 of 10 for each group, group 0's
 * second job of 4 waits for its first (8 > 7) without holding the rest,
 * and group 1's job of 3, queued after it, starts at once: the memory the
 * reserve slot keeps is there for another tenant. */
static void pool_group_share_of_the_budget(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(3, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[2] = {1, 1}, caps[2] = {2, 2};
    assert_int_equal(cf_exec_pool_set_groups(p, 2, weights, caps), 0);
    cf_exec_pool_set_budget(p, CF_POOL_MEMORY, 10);
    cf_exec_pool_set_group_budget(p, CF_POOL_MEMORY, -1, 7);
    submit_gated_cost(p, 0, 4);
    wait_started(&g, 1);
    submit_gated_cost(p, 0, 4);
    submit_gated_cost(p, 1, 3);
    wait_started(&g, 2);
    pthread_mutex_lock(&g.lock);
    assert_int_equal(g.order[1], 1);
    pthread_mutex_unlock(&g.lock);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_MEMORY), 7);
    drain_gated(p, &g, 3);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_MEMORY), 0);
    cf_exec_pool_destroy(p);
}

/* Processes are a budget of their own: group 1's job fits the memory left
 * but not the processes (6 + 6 > 10), so it waits, and the running job
 * drains for it (group 0's small job, queued after, does not pass it);
 * when they run, both budgets hold their costs. */
static void pool_process_budget(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(3, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[2] = {1, 1}, caps[2] = {3, 3};
    assert_int_equal(cf_exec_pool_set_groups(p, 2, weights, caps), 0);
    cf_exec_pool_set_budget(p, CF_POOL_MEMORY, 10);
    cf_exec_pool_set_budget(p, CF_POOL_PIDS, 10);
    submit_gated_costs(p, 0, 1, 6);
    wait_started(&g, 1);
    submit_gated_costs(p, 1, 1, 6);
    submit_gated_costs(p, 0, 1, 1);
    /* Nothing else may start while the first runs: poll a while. */
    for (int i = 0; i < 50; i++) {
        usleep(1000);
        pthread_mutex_lock(&g.lock);
        assert_int_equal(g.n, 1);
        pthread_mutex_unlock(&g.lock);
    }
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_PIDS), 6);
    /* Then both fit (7 of 10): which of their threads reaches the gate
     * first is the scheduler's business, not the pool's. */
    release(&g, 0);
    wait_started(&g, 3);
    pthread_mutex_lock(&g.lock);
    assert_int_equal(g.started[1], 1);
    pthread_mutex_unlock(&g.lock);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_PIDS), 7);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_MEMORY), 2);
    drain_gated(p, &g, 3);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_PIDS), 0);
    cf_exec_pool_destroy(p);
}

/* A group's share of the process budget: with 7 of 10 for each, group 0's
 * second job of 4 processes waits for its first (8 > 7) without holding
 * the others back, though memory is plenty: group 1's jobs start at once,
 * up to the whole budget (their 6 within their own share). */
static void pool_process_share(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(4, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[2] = {1, 1}, caps[2] = {3, 3};
    assert_int_equal(cf_exec_pool_set_groups(p, 2, weights, caps), 0);
    cf_exec_pool_set_budget(p, CF_POOL_MEMORY, 100);
    cf_exec_pool_set_budget(p, CF_POOL_PIDS, 10);
    cf_exec_pool_set_group_budget(p, CF_POOL_PIDS, -1, 7);
    submit_gated_costs(p, 0, 1, 4);
    wait_started(&g, 1);
    submit_gated_costs(p, 0, 1, 4); /* 8 > 7: waits for its own */
    submit_gated_costs(p, 1, 1, 3);
    wait_started(&g, 2);
    pthread_mutex_lock(&g.lock);
    assert_int_equal(g.order[1], 1);
    pthread_mutex_unlock(&g.lock);
    /* Group 1 again, 3 more: 10 of 10 held, fits its share (6 <= 7). */
    submit_gated_costs(p, 1, 1, 3);
    wait_started(&g, 3);
    pthread_mutex_lock(&g.lock);
    assert_int_equal(g.order[2], 1);
    pthread_mutex_unlock(&g.lock);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_PIDS), 10);
    drain_gated(p, &g, 4);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_PIDS), 0);
    assert_int_equal(cf_exec_pool_reserved(p, CF_POOL_MEMORY), 0);
    cf_exec_pool_destroy(p);
}

static bool in_group_1(const cf_pool_job *j, void *arg)
{
    (void)arg;
    return j->group == 1;
}

/* The running jobs drain for group 1's large job; when that job is dropped
 * (its request cancelled, its partition revoked), group 0's small one,
 * which the drain held back, starts at once: the drop wakes the slots. */
static void pool_drop_ends_a_drain(void **state)
{
    (void)state;
    gate g;
    gate_init(&g);
    cf_exec_pool *p = cf_exec_pool_new(2, gated_run, NULL, &g);
    assert_non_null(p);
    int weights[2] = {1, 1}, caps[2] = {2, 2};
    assert_int_equal(cf_exec_pool_set_groups(p, 2, weights, caps), 0);
    cf_exec_pool_set_budget(p, CF_POOL_MEMORY, 10);
    submit_gated_cost(p, 0, 6);
    wait_started(&g, 1);
    submit_gated_cost(p, 1, 8); /* waits: the pool drains for it */
    submit_gated_cost(p, 0, 1);
    cf_pool_job *dropped = cf_exec_pool_drop_queued_if(p, in_group_1, NULL);
    assert_non_null(dropped);
    assert_null(dropped->next);
    free(dropped);
    /* Bounded: without the wake-up nothing else would start it. */
    bool started = false;
    for (int i = 0; i < 10000 && !started; i++) {
        pthread_mutex_lock(&g.lock);
        started = g.n == 2;
        pthread_mutex_unlock(&g.lock);
        if (!started)
            usleep(1000);
    }
    assert_true(started);
    drain_gated(p, &g, 2);
    cf_exec_pool_destroy(p);
}

static void pool_never_touches_a_job_after_run(void **state)
{
    (void)state;
    int done = 0;
    cf_exec_pool *p = cf_exec_pool_new(3, run_and_free, NULL, &done);
    assert_non_null(p);
    for (int i = 0; i < 300; i++) {
        freeing_job *j = calloc(1, sizeof(*j));
        assert_non_null(j);
        j->seq = i;
        j->pj.partition = i % 3;
        if (i % 2)
            j->pj.key = strdup(i % 4 == 1 ? "A" : "B");
        assert_int_equal(cf_exec_pool_submit(p, &j->pj), 0);
    }
    /* run() returns before the pool forgets the job: wait for both. */
    for (int waited = 0;
         waited < 5000 && (__atomic_load_n(&done, __ATOMIC_SEQ_CST) < 300 || cf_exec_pool_pending(p) > 0); waited++)
        usleep(1000);
    assert_int_equal(done, 300);
    assert_int_equal(cf_exec_pool_pending(p), 0);
    cf_exec_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tracker_commits_only_contiguous_prefix),
        cmocka_unit_test(tracker_rejects_replays_and_unknown),
        cmocka_unit_test(tracker_grows_past_initial_ring),
        cmocka_unit_test(tracker_is_bounded),
        cmocka_unit_test(pool_orders_same_key_and_parallelises_others),
        cmocka_unit_test(pool_shares_slots_between_groups),
        cmocka_unit_test(pool_weights_share_the_slots),
        cmocka_unit_test(pool_ties_go_to_the_earliest_job),
        cmocka_unit_test(pool_budget_drains_for_a_large_job),
        cmocka_unit_test(pool_group_share_of_the_budget),
        cmocka_unit_test(pool_process_budget),
        cmocka_unit_test(pool_process_share),
        cmocka_unit_test(pool_drop_ends_a_drain),
        cmocka_unit_test(pool_drops_only_queued_jobs),
        cmocka_unit_test(pool_never_touches_a_job_after_run),
        cmocka_unit_test(worker_config_defaults_are_valid),
        cmocka_unit_test(worker_config_doc_is_current),
        cmocka_unit_test(state_addr_parse),
        cmocka_unit_test(state_admission),
        cmocka_unit_test(state_envelope_and_output),
        cmocka_unit_test(state_diff),
        cmocka_unit_test(state_config_defaults_match_libraries),
        cmocka_unit_test(state_result_checkpoint_fields_roundtrip),
        cmocka_unit_test_setup_teardown(state_workspace_rw_write_back, rfix_setup, rfix_teardown),
        cmocka_unit_test_setup_teardown(state_workspace_conflict_and_bad_output, rfix_setup, rfix_teardown),
        cmocka_unit_test_setup_teardown(state_workspace_read_only, rfix_setup, rfix_teardown),
        cmocka_unit_test_setup_teardown(state_checkpoints_through_runs, rfix_setup, rfix_teardown),
        cmocka_unit_test_setup_teardown(state_idempotency, rfix_setup, rfix_teardown),
        cmocka_unit_test_setup_teardown(state_quota_ledger, rfix_setup, rfix_teardown),
        cmocka_unit_test_setup_teardown(state_item_quotas, rfix_setup, rfix_teardown),
        cmocka_unit_test(kafka_errors_read_as_what_they_are),
        cmocka_unit_test_setup_teardown(state_attempts_and_outage, rfix_setup, rfix_teardown),
    };
    return cmocka_run_group_tests_name("worker", tests, NULL, NULL);
}
