/* cf_checkpoint against a real redis-server started by the test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "cf_checkpoint.h"
#include "cf_redis.h"
#include "cf_util.h"
#include "unit/redis_test_server.h"

typedef struct fixture {
    cf_test_redis srv;
    cf_redis *r;
    cf_checkpoint_store *cs;
    redisContext *raw;
} fixture;

static int teardown(void **state);

static int setup(void **state)
{
    if (!cf_test_redis_available())
        return -1;
    fixture *f = calloc(1, sizeof(*f));
    if (!f || cf_test_redis_start(&f->srv, NULL, false) < 0) {
        free(f);
        return -1;
    }
    *state = f;
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cf_error err;
    f->r = cf_redis_new(&cfg, true, &err);
    f->cs = f->r ? cf_checkpoint_store_new(f->r, NULL, &err) : NULL;
    f->raw = cf_test_redis_raw(&f->srv);
    if (!f->cs || !f->raw) {
        teardown(state); /* cmocka skips teardown when setup fails */
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f) {
        cf_checkpoint_store_destroy(f->cs);
        cf_redis_destroy(f->r);
        if (f->raw)
            redisFree(f->raw);
        cf_test_redis_stop(&f->srv);
        free(f);
        *state = NULL;
    }
    return 0;
}

static cf_checkpoint_store *store_with(fixture *f, size_t max_per_thread, int64_t ttl_us)
{
    cf_checkpoint_config cfg;
    cf_checkpoint_config_init(&cfg);
    cfg.max_per_thread = max_per_thread;
    cfg.ttl_us = ttl_us;
    cf_error err;
    cf_checkpoint_store *cs = cf_checkpoint_store_new(f->r, &cfg, &err);
    assert_non_null(cs);
    return cs;
}

static void ok(int rc, const cf_error *err)
{
    if (rc < 0)
        print_message("unexpected failure: %s\n", err->msg);
    assert_int_equal(rc, 0);
}

/* {"n": <n>} as msgpack (uint16 value). */
static size_t mk_state(uint8_t buf[6], unsigned n)
{
    buf[0] = 0x81;
    buf[1] = 0xa1;
    buf[2] = 'n';
    buf[3] = 0xcd;
    buf[4] = (uint8_t)(n >> 8);
    buf[5] = (uint8_t)n;
    return 6;
}

static unsigned state_n(const cf_checkpoint *cp)
{
    assert_non_null(cp->state);
    assert_int_equal(cp->state_len, 6);
    return ((unsigned)cp->state[4] << 8) | cp->state[5];
}

static void save_n(cf_checkpoint_store *cs, const char *thread, unsigned n, const cf_checkpoint_save_opts *o,
                   char id[CF_CHECKPOINT_ID_MAX + 1])
{
    uint8_t st[6];
    cf_error err;
    ok(cf_checkpoint_save(cs, thread, st, mk_state(st, n), o, id, &err), &err);
}

static void test_save_get_latest_history(void **state)
{
    fixture *f = *state;
    char ids[3][CF_CHECKPOINT_ID_MAX + 1];
    const uint8_t meta[] = {0x81, 0xa4, 's', 't', 'e', 'p', 0x07}; /* {"step": 7} */
    cf_checkpoint_save_opts o = {.meta = meta, .meta_len = sizeof(meta)};
    for (unsigned i = 0; i < 3; i++) {
        save_n(f->cs, "t1", 10 + i, i == 1 ? &o : NULL, ids[i]);
        cf_test_sleep_us(2000); /* distinct microsecond timestamps for the bounds below */
    }
    assert_true(strcmp(ids[0], ids[1]) < 0 && strcmp(ids[1], ids[2]) < 0);
    assert_int_equal(strlen(ids[0]), 29);

    cf_checkpoint cp;
    cf_error err;
    ok(cf_checkpoint_latest(f->cs, "t1", &cp, &err), &err);
    assert_string_equal(cp.id, ids[2]);
    assert_string_equal(cp.parent, ids[1]);
    assert_string_equal(cp.thread, "t1");
    assert_int_equal(state_n(&cp), 12);
    assert_null(cp.meta);
    cf_checkpoint_clear(&cp);

    ok(cf_checkpoint_get(f->cs, "t1", ids[1], &cp, &err), &err);
    assert_int_equal(state_n(&cp), 11);
    assert_string_equal(cp.parent, ids[0]);
    assert_int_equal(cp.meta_len, sizeof(meta));
    assert_memory_equal(cp.meta, meta, sizeof(meta));
    int64_t created1 = cp.created_us;
    assert_true(created1 > 0);
    cf_checkpoint_clear(&cp);
    ok(cf_checkpoint_get(f->cs, "t1", ids[0], &cp, &err), &err);
    assert_string_equal(cp.parent, "");
    int64_t created0 = cp.created_us;
    cf_checkpoint_clear(&cp);
    assert_int_equal(cf_checkpoint_get(f->cs, "t1", "0000000000000000-000000000009", &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_checkpoint_get(f->cs, "other", ids[0], &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);

    cf_checkpoints l;
    ok(cf_checkpoint_history(f->cs, "t1", NULL, 0, true, &l, &err), &err);
    assert_int_equal(l.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(l.items[i].id, ids[2 - i]);
        assert_int_equal(state_n(&l.items[i]), 12 - i);
    }
    cf_checkpoints_clear(&l);
    ok(cf_checkpoint_history(f->cs, "t1", ids[1], 0, false, &l, &err), &err);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.items[0].id, ids[1]);
    assert_null(l.items[0].state);
    cf_checkpoints_clear(&l);
    ok(cf_checkpoint_history(f->cs, "t1", NULL, 1, false, &l, &err), &err);
    assert_int_equal(l.n, 1);
    cf_checkpoints_clear(&l);
    assert_int_equal(cf_checkpoint_history(f->cs, "t1", "0000000000000000-000000000009", 0, false, &l, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);

    /* list: newest first, limit, exclusive time bounds */
    cf_checkpoint_query q = {.limit = 2};
    ok(cf_checkpoint_list(f->cs, "t1", &q, &l, &err), &err);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.items[0].id, ids[2]);
    assert_string_equal(l.items[1].id, ids[1]);
    assert_null(l.items[0].state);
    cf_checkpoints_clear(&l);
    ok(cf_checkpoint_latest(f->cs, "t1", &cp, &err), &err);
    int64_t created2 = cp.created_us;
    cf_checkpoint_clear(&cp);
    q = (cf_checkpoint_query){.after_us = created0, .before_us = created2, .with_state = true};
    ok(cf_checkpoint_list(f->cs, "t1", &q, &l, &err), &err);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.items[0].id, ids[1]);
    assert_int_equal(state_n(&l.items[0]), 11);
    cf_checkpoints_clear(&l);
    q = (cf_checkpoint_query){.before_us = created1};
    ok(cf_checkpoint_list(f->cs, "t1", &q, &l, &err), &err);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.items[0].id, ids[0]);
    cf_checkpoints_clear(&l);
    ok(cf_checkpoint_list(f->cs, "empty-thread", NULL, &l, &err), &err);
    assert_int_equal(l.n, 0);
    cf_checkpoints_clear(&l);
    assert_int_equal(cf_checkpoint_latest(f->cs, "empty-thread", &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);

    /* an explicit parent and a new root */
    char side[CF_CHECKPOINT_ID_MAX + 1], root[CF_CHECKPOINT_ID_MAX + 1];
    cf_checkpoint_save_opts po = {.parent = ids[0]};
    save_n(f->cs, "t1", 50, &po, side);
    ok(cf_checkpoint_latest(f->cs, "t1", &cp, &err), &err);
    assert_string_equal(cp.id, side);
    assert_string_equal(cp.parent, ids[0]);
    cf_checkpoint_clear(&cp);
    po.parent = "";
    save_n(f->cs, "t1", 51, &po, root);
    ok(cf_checkpoint_get(f->cs, "t1", root, &cp, &err), &err);
    assert_string_equal(cp.parent, "");
    cf_checkpoint_clear(&cp);
    po.parent = "0000000000000000-000000000009";
    uint8_t st[6];
    assert_int_equal(cf_checkpoint_save(f->cs, "t1", st, mk_state(st, 1), &po, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
}

/* Saves and rollbacks of a guarded writer land only while it holds its guard. */
static void test_guard_fences_saves(void **state)
{
    fixture *f = *state;
    char id[CF_CHECKPOINT_ID_MAX + 1];
    (void)cf_test_redis_int(f->raw, "SET lease mine");
    cf_checkpoint_set_guard(f->cs, "lease", "mine");
    save_n(f->cs, "g1", 1, NULL, id);
    (void)cf_test_redis_int(f->raw, "SET lease theirs");
    uint8_t st[6];
    cf_error err;
    assert_int_equal(cf_checkpoint_save(f->cs, "g1", st, mk_state(st, 2), NULL, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_FENCED);
    assert_int_equal(cf_checkpoint_rollback(f->cs, "g1", id, NULL, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_FENCED);
    cf_checkpoint cp;
    ok(cf_checkpoint_latest(f->cs, "g1", &cp, &err), &err);
    assert_string_equal(cp.id, id); /* nothing written */
    cf_checkpoint_clear(&cp);
    cf_checkpoint_set_guard(f->cs, NULL, NULL);
    save_n(f->cs, "g1", 3, NULL, id);
}

static void test_rollback_keeps_old_chain(void **state)
{
    fixture *f = *state;
    char ids[3][CF_CHECKPOINT_ID_MAX + 1];
    for (unsigned i = 0; i < 3; i++)
        save_n(f->cs, "rb", i, NULL, ids[i]);
    char nid[CF_CHECKPOINT_ID_MAX + 1];
    cf_error err;
    ok(cf_checkpoint_rollback(f->cs, "rb", ids[0], NULL, nid, &err), &err);
    assert_true(strcmp(nid, ids[2]) > 0);
    cf_checkpoint cp;
    ok(cf_checkpoint_latest(f->cs, "rb", &cp, &err), &err);
    assert_string_equal(cp.id, nid);
    assert_string_equal(cp.parent, ids[0]);
    assert_int_equal(state_n(&cp), 0);
    cf_checkpoint_clear(&cp);
    /* The abandoned chain is intact. */
    cf_checkpoints l;
    ok(cf_checkpoint_history(f->cs, "rb", ids[2], 0, true, &l, &err), &err);
    assert_int_equal(l.n, 3);
    assert_int_equal(state_n(&l.items[0]), 2);
    cf_checkpoints_clear(&l);
    ok(cf_checkpoint_history(f->cs, "rb", NULL, 0, false, &l, &err), &err);
    assert_int_equal(l.n, 2); /* new -> ids[0] */
    cf_checkpoints_clear(&l);
    ok(cf_checkpoint_list(f->cs, "rb", NULL, &l, &err), &err);
    assert_int_equal(l.n, 4);
    cf_checkpoints_clear(&l);
    assert_int_equal(cf_checkpoint_rollback(f->cs, "rb", "0000000000000000-000000000009", NULL, nid, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    /* Rollback honours the fencing checks too. */
    cf_checkpoint_save_opts o = {.expected_latest = ids[2]};
    assert_int_equal(cf_checkpoint_rollback(f->cs, "rb", ids[1], &o, nid, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
}

static void test_delete_and_delete_thread(void **state)
{
    fixture *f = *state;
    char ids[3][CF_CHECKPOINT_ID_MAX + 1];
    for (unsigned i = 0; i < 3; i++)
        save_n(f->cs, "del", i, NULL, ids[i]);
    cf_error err;
    ok(cf_checkpoint_delete(f->cs, "del", ids[1], &err), &err);
    cf_checkpoint cp;
    assert_int_equal(cf_checkpoint_get(f->cs, "del", ids[1], &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_checkpoint_delete(f->cs, "del", ids[1], &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    cf_checkpoints l;
    ok(cf_checkpoint_history(f->cs, "del", NULL, 0, false, &l, &err), &err);
    assert_int_equal(l.n, 1); /* its parent is gone: the walk stops */
    cf_checkpoints_clear(&l);
    ok(cf_checkpoint_delete(f->cs, "del", ids[2], &err), &err);
    ok(cf_checkpoint_latest(f->cs, "del", &cp, &err), &err);
    assert_string_equal(cp.id, ids[0]);
    cf_checkpoint_clear(&cp);

    save_n(f->cs, "del", 9, NULL, ids[1]);
    ok(cf_checkpoint_delete_thread(f->cs, "del", &err), &err);
    assert_int_equal(cf_checkpoint_latest(f->cs, "del", &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_checkpoint_delete_thread(f->cs, "del", &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_test_redis_int(f->raw, "DBSIZE"), 0);
}

static void test_retention_by_count(void **state)
{
    fixture *f = *state;
    cf_checkpoint_store *cs = store_with(f, 5, 0);
    char ids[12][CF_CHECKPOINT_ID_MAX + 1];
    for (unsigned i = 0; i < 12; i++)
        save_n(cs, "ret", i, NULL, ids[i]);
    cf_checkpoints l;
    cf_error err;
    ok(cf_checkpoint_list(cs, "ret", NULL, &l, &err), &err);
    assert_int_equal(l.n, 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(l.items[i].id, ids[11 - i]);
    cf_checkpoints_clear(&l);
    cf_checkpoint cp;
    assert_int_equal(cf_checkpoint_get(cs, "ret", ids[6], &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_test_redis_int(f->raw, "ZCARD cf:{cp:ret}:idx"), 5);
    /* 5 hashes, meta, index, the copy of the newest, their sizes (the
     * quota's; the trimmed ones' gone from it too) */
    assert_int_equal(cf_test_redis_int(f->raw, "DBSIZE"), 5 + 4);
    assert_int_equal(cf_test_redis_int(f->raw, "HLEN cf:{cp:ret}:sz"), 5);
    ok(cf_checkpoint_history(cs, "ret", NULL, 0, false, &l, &err), &err);
    assert_int_equal(l.n, 5);
    cf_checkpoints_clear(&l);
    cf_checkpoint_store_destroy(cs);
}

/* Loading the latest is one HMGET of a copy every save writes; the copy
 * follows deletes, and a thread without one (saved by an older codefleet,
 * or the copy lost) still answers and gets its copy back. */
static void test_latest_copy(void **state)
{
    fixture *f = *state;
    char ids[3][CF_CHECKPOINT_ID_MAX + 1];
    for (unsigned i = 0; i < 3; i++)
        save_n(f->cs, "lc", i, NULL, ids[i]);
    cf_checkpoint cp;
    cf_error err;
    ok(cf_checkpoint_latest(f->cs, "lc", &cp, &err), &err);
    assert_string_equal(cp.id, ids[2]);
    assert_string_equal(cp.parent, ids[1]);
    cf_checkpoint_clear(&cp);
    ok(cf_checkpoint_delete(f->cs, "lc", ids[2], &err), &err);
    ok(cf_checkpoint_latest(f->cs, "lc", &cp, &err), &err);
    assert_string_equal(cp.id, ids[1]);
    cf_checkpoint_clear(&cp);
    /* The copy is gone (as for a thread from before it existed). */
    assert_int_equal(cf_test_redis_int(f->raw, "DEL cf:{cp:lc}:latest"), 1);
    ok(cf_checkpoint_latest(f->cs, "lc", &cp, &err), &err);
    assert_string_equal(cp.id, ids[1]);
    cf_checkpoint_clear(&cp);
    assert_int_equal(cf_test_redis_int(f->raw, "EXISTS cf:{cp:lc}:latest"), 1);
    /* A save on a thread without a copy still chains to the newest. */
    assert_int_equal(cf_test_redis_int(f->raw, "DEL cf:{cp:lc}:latest"), 1);
    char next[CF_CHECKPOINT_ID_MAX + 1];
    save_n(f->cs, "lc", 7, NULL, next);
    ok(cf_checkpoint_latest(f->cs, "lc", &cp, &err), &err);
    assert_string_equal(cp.id, next);
    assert_string_equal(cp.parent, ids[1]);
    cf_checkpoint_clear(&cp);
    /* A damaged copy is reported, not trusted. */
    assert_int_equal(cf_test_redis_int(f->raw, "HDEL cf:{cp:lc}:latest seq"), 1);
    assert_int_equal(cf_checkpoint_latest(f->cs, "lc", &cp, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    ok(cf_checkpoint_delete_thread(f->cs, "lc", &err), &err);
    assert_int_equal(cf_test_redis_int(f->raw, "DBSIZE"), 0);
}

/* An older codefleet saving or deleting beside this one (a rolling
 * upgrade) knows nothing of the copy: its changes must make the copy
 * distrusted, never served.  Emulated with the commands its scripts run. */
static void test_latest_copy_beside_old_writers(void **state)
{
    fixture *f = *state;
    char ids[2][CF_CHECKPOINT_ID_MAX + 1];
    for (unsigned i = 0; i < 2; i++)
        save_n(f->cs, "mix", i, NULL, ids[i]);
    cf_checkpoint cp;
    cf_error err;
    /* An old save: a record, the index entry, the counter; no copy. */
    const char *old_id = "9999999999999999-000000000003";
    redisReply *r = redisCommand(f->raw,
                                 "HSET cf:{cp:mix}:c:%s id %s thread mix parent %s state %b meta \"\" created_us "
                                 "9999999999999999 seq 0",
                                 old_id, old_id, ids[1], "\x80", (size_t)1);
    freeReplyObject(r);
    freeReplyObject(redisCommand(f->raw, "ZADD cf:{cp:mix}:idx 9999999999999999 %s", old_id));
    freeReplyObject(redisCommand(f->raw, "HINCRBY cf:{cp:mix}:meta n 1"));
    ok(cf_checkpoint_latest(f->cs, "mix", &cp, &err), &err);
    assert_string_equal(cp.id, old_id);
    cf_checkpoint_clear(&cp);
    /* A save now chains to it. */
    char next[CF_CHECKPOINT_ID_MAX + 1];
    save_n(f->cs, "mix", 5, NULL, next);
    ok(cf_checkpoint_latest(f->cs, "mix", &cp, &err), &err);
    assert_string_equal(cp.id, next);
    cf_checkpoint_clear(&cp);
    /* An old delete of the newest: the index and the record go, the copy
     * stays; it must not be served. */
    freeReplyObject(redisCommand(f->raw, "ZREM cf:{cp:mix}:idx %s", next));
    freeReplyObject(redisCommand(f->raw, "DEL cf:{cp:mix}:c:%s", next));
    ok(cf_checkpoint_latest(f->cs, "mix", &cp, &err), &err);
    assert_string_equal(cp.id, old_id);
    cf_checkpoint_clear(&cp);
    /* An old delete of the whole thread (meta and index only). */
    freeReplyObject(redisCommand(f->raw, "DEL cf:{cp:mix}:meta cf:{cp:mix}:idx"));
    assert_int_equal(cf_checkpoint_latest(f->cs, "mix", &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
}

static void test_ttl(void **state)
{
    fixture *f = *state;
    cf_checkpoint_store *cs = store_with(f, 100, 1000000);
    char a[CF_CHECKPOINT_ID_MAX + 1], b[CF_CHECKPOINT_ID_MAX + 1];
    save_n(cs, "ttl", 1, NULL, a);
    cf_test_sleep_us(600000);
    save_n(cs, "ttl", 2, NULL, b);
    cf_test_sleep_us(600000);
    /* a expired (1.2 s old), b still lives (0.6 s old) */
    cf_checkpoint cp;
    cf_error err;
    assert_int_equal(cf_checkpoint_get(cs, "ttl", a, &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    ok(cf_checkpoint_latest(cs, "ttl", &cp, &err), &err);
    assert_string_equal(cp.id, b);
    cf_checkpoint_clear(&cp);
    cf_checkpoints l;
    ok(cf_checkpoint_list(cs, "ttl", NULL, &l, &err), &err);
    assert_int_equal(l.n, 1);
    cf_checkpoints_clear(&l);
    cf_test_sleep_us(600000);
    assert_int_equal(cf_checkpoint_latest(cs, "ttl", &cp, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_test_redis_int(f->raw, "DBSIZE"), 0);
    cf_checkpoint_store_destroy(cs);
}

static void test_stale_writer_rejected(void **state)
{
    fixture *f = *state;
    char id5[CF_CHECKPOINT_ID_MAX + 1], id[CF_CHECKPOINT_ID_MAX + 1];
    cf_checkpoint_save_opts o = {.writer_seq = 5};
    save_n(f->cs, "fence", 1, &o, id5);
    o.writer_seq = 4;
    uint8_t st[6];
    cf_error err;
    assert_int_equal(cf_checkpoint_save(f->cs, "fence", st, mk_state(st, 2), &o, id, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    assert_non_null(strstr(err.msg, "stale writer"));
    cf_checkpoint cp;
    ok(cf_checkpoint_latest(f->cs, "fence", &cp, &err), &err);
    assert_string_equal(cp.id, id5);
    assert_int_equal(cp.writer_seq, 5);
    cf_checkpoint_clear(&cp);
    o.writer_seq = 5; /* the same writer may keep saving */
    save_n(f->cs, "fence", 3, &o, id);
    o.writer_seq = 6; /* a newer writer fences the old one out */
    save_n(f->cs, "fence", 4, &o, id);
    o.writer_seq = 5;
    assert_int_equal(cf_checkpoint_save(f->cs, "fence", st, mk_state(st, 5), &o, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    ok(cf_checkpoint_latest(f->cs, "fence", &cp, &err), &err);
    assert_int_equal(state_n(&cp), 4);
    cf_checkpoint_clear(&cp);

    /* expected_latest: compare-and-set on the latest id */
    cf_checkpoint_save_opts e = {.expected_latest = ""};
    char first[CF_CHECKPOINT_ID_MAX + 1];
    save_n(f->cs, "cas", 1, &e, first);
    assert_int_equal(cf_checkpoint_save(f->cs, "cas", st, mk_state(st, 2), &e, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    e.expected_latest = first;
    save_n(f->cs, "cas", 2, &e, id);
    assert_int_equal(cf_checkpoint_save(f->cs, "cas", st, mk_state(st, 3), &e, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    cf_checkpoints l;
    ok(cf_checkpoint_list(f->cs, "cas", NULL, &l, &err), &err);
    assert_int_equal(l.n, 2);
    cf_checkpoints_clear(&l);
}

static void test_non_map_state_rejected(void **state)
{
    fixture *f = *state;
    static const struct {
        const uint8_t b[8];
        size_t n;
    } bad[] = {
        {{0x91, 0x01}, 2},             /* [1] */
        {{0x05}, 1},                   /* 5 */
        {{0xa3, 'a', 'b', 'c'}, 4},    /* "abc" */
        {{0x81, 0xa1}, 2},             /* truncated map */
        {{0x81, 0xa1, 'k', 0x01, 0x02}, 5}, /* trailing byte */
        {{0xdf, 0xff, 0xff, 0xff, 0xff}, 5}, /* map32 claiming 4G entries */
        {{0xc1}, 1},                   /* never-used byte */
    };
    cf_error err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cf_checkpoint_save(f->cs, "nm", bad[i].b, bad[i].n, NULL, NULL, &err), -1);
        assert_true(err.code == CF_E_INVALID || err.code == CF_E_LIMIT);
    }
    assert_int_equal(cf_checkpoint_save(f->cs, "nm", NULL, 0, NULL, NULL, &err), -1);
    uint8_t st[6];
    const uint8_t arr[] = {0x90};
    cf_checkpoint_save_opts o = {.meta = arr, .meta_len = 1};
    assert_int_equal(cf_checkpoint_save(f->cs, "nm", st, mk_state(st, 1), &o, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_checkpoint_save(f->cs, "bad thread", st, mk_state(st, 1), NULL, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_checkpoint_save(f->cs, "x}y", st, mk_state(st, 1), NULL, NULL, &err), -1);
    assert_int_equal(cf_test_redis_int(f->raw, "DBSIZE"), 0);
    const uint8_t empty_map[] = {0x80};
    ok(cf_checkpoint_save(f->cs, "nm", empty_map, 1, NULL, NULL, &err), &err);
}

static void test_ids_sort_in_creation_order(void **state)
{
    fixture *f = *state;
    enum { N = 60 };
    char ids[N][CF_CHECKPOINT_ID_MAX + 1];
    for (unsigned i = 0; i < N; i++)
        save_n(f->cs, "fast", i, NULL, ids[i]);
    for (unsigned i = 1; i < N; i++)
        assert_true(strcmp(ids[i - 1], ids[i]) < 0);
    cf_checkpoints l;
    cf_error err;
    cf_checkpoint_query q = {.limit = N, .with_state = true};
    ok(cf_checkpoint_list(f->cs, "fast", &q, &l, &err), &err);
    assert_int_equal(l.n, N);
    for (unsigned i = 0; i < N; i++) {
        assert_string_equal(l.items[i].id, ids[N - 1 - i]);
        assert_int_equal(state_n(&l.items[i]), N - 1 - i);
    }
    cf_checkpoints_clear(&l);
}

/* Writers racing with expected_latest: every save lands, the chain is linear. */
typedef struct race_arg {
    int port;
    int saves;
    int failures;
} race_arg;

static void *race_thread(void *p)
{
    race_arg *a = p;
    cf_redis_config cfg;
    cf_redis_config_init(&cfg);
    cfg.port = a->port;
    cf_error err;
    cf_redis *r = cf_redis_new(&cfg, true, &err);
    cf_checkpoint_store *cs = r ? cf_checkpoint_store_new(r, NULL, &err) : NULL;
    for (int i = 0; cs && i < a->saves; i++) {
        for (;;) {
            cf_checkpoint cp;
            char latest[CF_CHECKPOINT_ID_MAX + 1] = "";
            if (cf_checkpoint_latest(cs, "race", &cp, &err) == 0) {
                cf_strlcpy(latest, cp.id, sizeof(latest));
                cf_checkpoint_clear(&cp);
            } else if (err.code != CF_E_NOT_FOUND) {
                a->failures++;
                break;
            }
            uint8_t st[6];
            cf_checkpoint_save_opts o = {.expected_latest = latest};
            if (cf_checkpoint_save(cs, "race", st, mk_state(st, (unsigned)i), &o, NULL, &err) == 0)
                break;
            if (err.code != CF_E_CONFLICT) {
                a->failures++;
                break;
            }
        }
    }
    if (!cs)
        a->failures++;
    cf_checkpoint_store_destroy(cs);
    cf_redis_destroy(r);
    return NULL;
}

static void test_racing_writers_build_linear_chain(void **state)
{
    fixture *f = *state;
    enum { NT = 3, SAVES = 20 };
    pthread_t th[NT];
    race_arg a[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (race_arg){.port = f->srv.port, .saves = SAVES};
        assert_int_equal(pthread_create(&th[i], NULL, race_thread, &a[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].failures, 0);
    }
    cf_checkpoints l;
    cf_error err;
    ok(cf_checkpoint_history(f->cs, "race", NULL, 1000, false, &l, &err), &err);
    assert_int_equal(l.n, NT * SAVES);
    assert_string_equal(l.items[l.n - 1].parent, "");
    cf_checkpoints_clear(&l);
}

/* Thread ids outside the store's id_prefix are refused before Redis. */
static void test_id_prefix_scopes_threads(void **state)
{
    fixture *f = *state;
    cf_checkpoint_config cfg;
    cf_checkpoint_config_init(&cfg);
    cfg.id_prefix = "tenant-a.";
    cf_error err;
    cf_checkpoint_store *a = cf_checkpoint_store_new(f->r, &cfg, &err);
    assert_non_null(a);
    char id[CF_CHECKPOINT_ID_MAX + 1];
    save_n(a, "tenant-a.t", 1, NULL, id);
    uint8_t st[6];
    assert_int_equal(cf_checkpoint_save(a, "tenant-b.t", st, mk_state(st, 2), NULL, id, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_non_null(strstr(err.msg, "tenant-a."));
    cf_checkpoint cp;
    memset(&cp, 0, sizeof(cp));
    assert_int_equal(cf_checkpoint_latest(a, "tenant-b.t", &cp, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    redisReply *rep = redisCommand(f->raw, "EXISTS cf:{cp:tenant-b.t}:meta");
    assert_non_null(rep);
    assert_int_equal(rep->integer, 0);
    freeReplyObject(rep);
    cf_checkpoint_store_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_save_get_latest_history, setup, teardown),
        cmocka_unit_test_setup_teardown(test_id_prefix_scopes_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_fences_saves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rollback_keeps_old_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_and_delete_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_by_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_latest_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_latest_copy_beside_old_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_writer_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_map_state_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_sort_in_creation_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_racing_writers_build_linear_chain, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
