/* cf_workspace against a real redis-server started by the test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "cf_redis.h"
#include "cf_state_int.h"
#include "cf_util.h"
#include "cf_workspace.h"
#include "unit/redis_test_server.h"

#include <openssl/evp.h>

/* Keys matching a pattern (white-box: blobs are one key each). */
static long long count_keys(redisContext *c, const char *pattern)
{
    redisReply *r = redisCommand(c, "KEYS %s", pattern);
    long long n = (r && r->type == REDIS_REPLY_ARRAY) ? (long long)r->elements : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* The blob id the store gives these bytes: sha256, lowercase hex. */
static void sha_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int n = 0;
    assert_int_equal(EVP_Digest(data, len, md, &n, EVP_sha256(), NULL), 1);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

typedef struct fixture {
    cf_test_redis srv;
    cf_redis *r;
    cf_workspace_store *ws;
    redisContext *raw;
} fixture;

static int fixture_open(fixture *f, const cf_workspace_config *wcfg)
{
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cf_error err;
    f->r = cf_redis_new(&cfg, true, &err);
    if (!f->r)
        return -1;
    f->ws = cf_workspace_store_new(f->r, wcfg, &err);
    f->raw = cf_test_redis_raw(&f->srv);
    return f->ws && f->raw ? 0 : -1;
}

static int teardown(void **state);

static int setup_with(void **state, const char *password, bool aof)
{
    if (!cf_test_redis_available())
        return -1;
    fixture *f = calloc(1, sizeof(*f));
    if (!f || cf_test_redis_start(&f->srv, password, aof) < 0) {
        free(f);
        return -1;
    }
    *state = f;
    if (fixture_open(f, NULL) < 0) {
        teardown(state); /* cmocka skips teardown when setup fails */
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, NULL, false);
}

static int setup_aof_auth(void **state)
{
    return setup_with(state, "ws-pw", true);
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f) {
        cf_workspace_store_destroy(f->ws);
        cf_redis_destroy(f->r);
        if (f->raw)
            redisFree(f->raw);
        cf_test_redis_stop(&f->srv);
        free(f);
        *state = NULL;
    }
    return 0;
}

/* A store with other settings on the fixture's connection. */
static cf_workspace_store *store_with(fixture *f, void (*tweak)(cf_workspace_config *))
{
    cf_workspace_config cfg;
    cf_workspace_config_init(&cfg);
    tweak(&cfg);
    cf_error err;
    cf_workspace_store *ws = cf_workspace_store_new(f->r, &cfg, &err);
    assert_non_null(ws);
    return ws;
}

static void ok(int rc, const cf_error *err)
{
    if (rc < 0)
        print_message("unexpected failure: %s\n", err->msg);
    assert_int_equal(rc, 0);
}

static int64_t current_rev(fixture *f, cf_workspace_store *ws, const char *id)
{
    cf_ws_info info;
    cf_error err;
    ok(cf_workspace_info(ws, id, &info, &err), &err);
    int64_t rev = info.rev;
    cf_ws_info_clear(&info);
    (void)f;
    return rev;
}

static void test_crud(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "w1", "proj", "sess-1", &err), &err);
    assert_int_equal(cf_workspace_create(f->ws, "w1", "proj", "sess-1", &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);

    const char bin[] = {'x', '\0', 'y', (char)0x80};
    int64_t rev = -5;
    ok(cf_workspace_put(f->ws, "w1", 0, "src/main.py", bin, sizeof(bin), &rev, &err), &err);
    assert_int_equal(rev, 1);
    ok(cf_workspace_put(f->ws, "w1", CF_WS_ANY_REV, "README", "hello", 5, &rev, &err), &err);
    assert_int_equal(rev, 2);
    ok(cf_workspace_put(f->ws, "w1", 2, "empty", "", 0, &rev, &err), &err);
    assert_int_equal(rev, 3);

    uint8_t *data = NULL;
    size_t len = 0;
    int64_t grev = 0;
    ok(cf_workspace_get(f->ws, "w1", "src/main.py", &data, &len, &grev, &err), &err);
    assert_int_equal(len, sizeof(bin));
    assert_memory_equal(data, bin, sizeof(bin));
    assert_int_equal(grev, 3);
    free(data);
    ok(cf_workspace_get(f->ws, "w1", "empty", &data, &len, NULL, &err), &err);
    assert_int_equal(len, 0);
    free(data);

    cf_ws_listing l;
    ok(cf_workspace_list(f->ws, "w1", &l, &err), &err);
    assert_int_equal(l.rev, 3);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.entries[0].path, "README");
    assert_int_equal(l.entries[0].size, 5);
    assert_null(l.entries[0].data);
    assert_string_equal(l.entries[1].path, "empty");
    assert_string_equal(l.entries[2].path, "src/main.py");
    assert_int_equal(l.entries[2].size, sizeof(bin));
    cf_ws_listing_clear(&l);

    cf_ws_info info;
    ok(cf_workspace_info(f->ws, "w1", &info, &err), &err);
    assert_string_equal(info.project, "proj");
    assert_string_equal(info.session, "sess-1");
    assert_int_equal(info.rev, 3);
    assert_int_equal(info.nfiles, 3);
    assert_int_equal(info.total_bytes, sizeof(bin) + 5);
    assert_true(info.created_us > 0 && info.updated_us >= info.created_us);
    assert_int_equal(info.history, 16);
    cf_ws_info_clear(&info);

    ok(cf_workspace_delete_file(f->ws, "w1", 3, "README", &rev, &err), &err);
    assert_int_equal(rev, 4);
    assert_int_equal(cf_workspace_get(f->ws, "w1", "README", &data, &len, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_null(data);
    assert_int_equal(cf_workspace_delete_file(f->ws, "w1", CF_WS_ANY_REV, "README", &rev, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(current_rev(f, f->ws, "w1"), 4);

    /* A batch is one revision; absent deletes are ignored. */
    cf_ws_file puts[2] = {{"a/b.txt", "bbb", 3}, {"a/c.txt", "cc", 2}};
    const char *dels[2] = {"empty", "never-existed"};
    ok(cf_workspace_commit(f->ws, "w1", 4, puts, 2, dels, 2, &rev, &err), &err);
    assert_int_equal(rev, 5);
    /* An empty change keeps the revision. */
    ok(cf_workspace_commit(f->ws, "w1", 5, NULL, 0, NULL, 0, &rev, &err), &err);
    assert_int_equal(rev, 5);
    ok(cf_workspace_list(f->ws, "w1", &l, &err), &err);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.entries[0].path, "a/b.txt");
    assert_string_equal(l.entries[1].path, "a/c.txt");
    cf_ws_listing_clear(&l);

    assert_true(count_keys(f->raw, "cf:{ws:w1}:b:*") > 0);
    ok(cf_workspace_delete(f->ws, "w1", &err), &err);
    /* Nothing of it is left: the four keys and every blob. */
    assert_int_equal(count_keys(f->raw, "cf:{ws:w1}:*"), 0);
    assert_int_equal(cf_workspace_delete(f->ws, "w1", &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_workspace_get(f->ws, "w1", "a/b.txt", &data, &len, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_workspace_put(f->ws, "w1", CF_WS_ANY_REV, "x", "1", 1, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_workspace_list(f->ws, "w1", &l, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(cf_test_redis_int(f->raw, "EXISTS cf:{ws:w1}:meta"), 0);
}

static void test_cas_conflict(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "cas", NULL, NULL, &err), &err);
    int64_t rev = 0;
    ok(cf_workspace_put(f->ws, "cas", 0, "f", "one", 3, &rev, &err), &err);
    int64_t cur = -7;
    assert_int_equal(cf_workspace_put(f->ws, "cas", 0, "f", "two", 3, &cur, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    assert_false(err.retriable);
    assert_int_equal(cur, 1); /* the current revision, for the retry */
    assert_non_null(strstr(err.msg, "revision is 1"));
    cf_ws_file p = {"g", "x", 1};
    const char *d[1] = {"f"};
    assert_int_equal(cf_workspace_commit(f->ws, "cas", 7, &p, 1, d, 1, &cur, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    uint8_t *data;
    size_t len;
    ok(cf_workspace_get(f->ws, "cas", "f", &data, &len, &rev, &err), &err);
    assert_int_equal(rev, 1);
    assert_memory_equal(data, "one", 3);
    free(data);
    assert_int_equal(cf_test_redis_int(f->raw, "HEXISTS cf:{ws:cas}:files g"), 0);
}

/* A guarded writer writes only while its guard key holds its value. */
static void test_guard_fences_writes(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "fence", NULL, NULL, &err), &err);
    (void)cf_test_redis_int(f->raw, "SET lease mine");
    cf_workspace_set_guard(f->ws, "lease", "mine");
    int64_t rev = 0;
    ok(cf_workspace_put(f->ws, "fence", 0, "a", "1", 1, &rev, &err), &err);
    assert_int_equal(rev, 1);
    /* The lease passes to another writer (or lapses): refused, nothing written. */
    (void)cf_test_redis_int(f->raw, "SET lease theirs");
    assert_int_equal(cf_workspace_put(f->ws, "fence", 1, "b", "2", 1, &rev, &err), -1);
    assert_int_equal(err.code, CF_E_FENCED);
    assert_int_equal(cf_test_redis_int(f->raw, "DEL lease"), 1);
    assert_int_equal(cf_workspace_put(f->ws, "fence", 1, "b", "2", 1, &rev, &err), -1);
    assert_int_equal(err.code, CF_E_FENCED);
    assert_int_equal(cf_test_redis_int(f->raw, "HEXISTS cf:{ws:fence}:files b"), 0);
    /* Unguarded again: writes as before. */
    cf_workspace_set_guard(f->ws, NULL, NULL);
    ok(cf_workspace_put(f->ws, "fence", 1, "b", "2", 1, &rev, &err), &err);
    assert_int_equal(rev, 2);
}

typedef struct incr_arg {
    int port;
    int iterations;
    atomic_int conflicts;
    int failures;
} incr_arg;

static void *incr_thread(void *p)
{
    incr_arg *a = p;
    cf_redis_config cfg;
    cf_redis_config_init(&cfg);
    cfg.port = a->port;
    cf_error err;
    cf_redis *r = cf_redis_new(&cfg, true, &err);
    cf_workspace_store *ws = r ? cf_workspace_store_new(r, NULL, &err) : NULL;
    if (!ws) {
        a->failures++;
        cf_redis_destroy(r);
        return NULL;
    }
    for (int i = 0; i < a->iterations; i++) {
        for (;;) {
            uint8_t *data = NULL;
            size_t len = 0;
            int64_t rev = 0;
            if (cf_workspace_get(ws, "counter", "n", &data, &len, &rev, &err) < 0) {
                a->failures++;
                break;
            }
            int64_t n = 0;
            cf_parse_i64((const char *)data, 0, 1000000, &n, "counter", NULL);
            free(data);
            char buf[24];
            snprintf(buf, sizeof(buf), "%lld", (long long)(n + 1));
            if (cf_workspace_put(ws, "counter", rev, "n", buf, strlen(buf), NULL, &err) == 0)
                break;
            if (err.code != CF_E_CONFLICT) {
                a->failures++;
                break;
            }
            atomic_fetch_add(&a->conflicts, 1);
        }
    }
    cf_workspace_store_destroy(ws);
    cf_redis_destroy(r);
    return NULL;
}

static void test_concurrent_writers_lose_nothing(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "counter", NULL, NULL, &err), &err);
    ok(cf_workspace_put(f->ws, "counter", 0, "n", "0", 1, NULL, &err), &err);
    enum { NT = 4 };
    pthread_t th[NT];
    incr_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (incr_arg){.port = f->srv.port, .iterations = 50};
        assert_int_equal(pthread_create(&th[i], NULL, incr_thread, &args[i]), 0);
    }
    int conflicts = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
        conflicts += atomic_load(&args[i].conflicts);
    }
    uint8_t *data;
    size_t len;
    int64_t rev;
    ok(cf_workspace_get(f->ws, "counter", "n", &data, &len, &rev, &err), &err);
    assert_string_equal((char *)data, "200");
    assert_int_equal(rev, 201);
    free(data);
    print_message("concurrent increments: %d CAS conflicts retried\n", conflicts);
}

static void tweak_ttl(cf_workspace_config *c)
{
    c->ttl_us = 1000000;
}

static void test_ttl_refresh_and_expiry(void **state)
{
    fixture *f = *state;
    cf_workspace_store *ws = store_with(f, tweak_ttl);
    cf_error err;
    ok(cf_workspace_create(ws, "short", NULL, NULL, &err), &err);
    ok(cf_workspace_put(ws, "short", 0, "f", "v", 1, NULL, &err), &err);
    long long pttl = cf_test_redis_int(f->raw, "PTTL cf:{ws:short}:refs");
    assert_true(pttl > 0 && pttl <= 1000);
    /* Blobs keep 1.5 x the TTL (renewed every half TTL, not every access). */
    char v[65], blob[128];
    sha_hex("v", 1, v);
    snprintf(blob, sizeof(blob), "PTTL cf:{ws:short}:b:%s", v);
    pttl = cf_test_redis_int(f->raw, blob);
    assert_true(pttl > 1000 && pttl <= 1500);
    cf_test_sleep_us(600000);
    uint8_t *data;
    size_t len;
    ok(cf_workspace_get(ws, "short", "f", &data, &len, NULL, &err), &err); /* refreshes */
    free(data);
    cf_test_sleep_us(600000); /* 1.2 s after the write, 0.6 s after the read */
    ok(cf_workspace_get(ws, "short", "f", &data, &len, NULL, &err), &err);
    free(data);
    cf_test_sleep_us(1300000);
    assert_int_equal(cf_workspace_get(ws, "short", "f", &data, &len, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(
        cf_test_redis_int(f->raw,
                          "EXISTS cf:{ws:short}:meta cf:{ws:short}:files cf:{ws:short}:refs cf:{ws:short}:hist"),
        0);
    /* A blob outlives the metadata by at most half a TTL. */
    cf_test_sleep_us(500000);
    assert_int_equal(count_keys(f->raw, "cf:{ws:short}:*"), 0);
    cf_workspace_store_destroy(ws);
}

static void tweak_history3(cf_workspace_config *c)
{
    c->history = 3;
}

static void test_snapshot_history(void **state)
{
    fixture *f = *state;
    cf_workspace_store *ws = store_with(f, tweak_history3);
    cf_error err;
    ok(cf_workspace_create(ws, "h", NULL, NULL, &err), &err);
    /* rev 1: a=v1 b=b1; rev 2: a=v2; rev 3: delete b, c=c3; rev 4: a=v4; rev 5: b=b5 */
    cf_ws_file r1[2] = {{"a", "v1", 2}, {"b", "b1", 2}};
    ok(cf_workspace_commit(ws, "h", 0, r1, 2, NULL, 0, NULL, &err), &err);
    cf_ws_listing l;
    ok(cf_workspace_snapshot(ws, "h", 0, &l, &err), &err); /* the empty start */
    assert_int_equal(l.rev, 0);
    assert_int_equal(l.n, 0);
    cf_ws_listing_clear(&l);
    ok(cf_workspace_put(ws, "h", 1, "a", "v2", 2, NULL, &err), &err);
    cf_ws_file r3[1] = {{"c", "c3", 2}};
    const char *d3[1] = {"b"};
    ok(cf_workspace_commit(ws, "h", 2, r3, 1, d3, 1, NULL, &err), &err);
    ok(cf_workspace_put(ws, "h", 3, "a", "v4", 2, NULL, &err), &err);

    ok(cf_workspace_snapshot(ws, "h", 1, &l, &err), &err);
    assert_int_equal(l.rev, 1);
    assert_int_equal(l.current_rev, 4);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.entries[0].path, "a");
    assert_memory_equal(l.entries[0].data, "v1", 2);
    assert_string_equal(l.entries[1].path, "b");
    assert_memory_equal(l.entries[1].data, "b1", 2);
    cf_ws_listing_clear(&l);
    ok(cf_workspace_snapshot(ws, "h", 3, &l, &err), &err);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.entries[0].path, "a");
    assert_memory_equal(l.entries[0].data, "v2", 2);
    assert_string_equal(l.entries[1].path, "c");
    cf_ws_listing_clear(&l);
    /* history 3 = the current revision and 3 older ones: 0 is gone. */
    assert_int_equal(cf_workspace_snapshot(ws, "h", 0, &l, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);

    ok(cf_workspace_put(ws, "h", 4, "b", "b5", 2, NULL, &err), &err);
    /* history 3: revisions 2..5 remain, 0 and 1 are gone. */
    assert_int_equal(cf_workspace_snapshot(ws, "h", 1, &l, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no longer retained"));
    assert_int_equal(cf_workspace_snapshot(ws, "h", 6, &l, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    ok(cf_workspace_snapshot(ws, "h", 2, &l, &err), &err);
    assert_int_equal(l.n, 2);
    assert_memory_equal(l.entries[0].data, "v2", 2);
    assert_memory_equal(l.entries[1].data, "b1", 2);
    cf_ws_listing_clear(&l);
    ok(cf_workspace_snapshot(ws, "h", CF_WS_ANY_REV, &l, &err), &err);
    assert_int_equal(l.rev, 5);
    assert_int_equal(l.n, 3);
    assert_memory_equal(l.entries[0].data, "v4", 2);
    assert_memory_equal(l.entries[1].data, "b5", 2);
    assert_memory_equal(l.entries[2].data, "c3", 2);
    cf_ws_listing_clear(&l);

    /* Old blobs are freed: 20 more writes of one file, the last 17 with
     * one content, keep that content once (referenced by the manifest and
     * the 3 retained undo logs), plus the other current files. */
    char name[32];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "%d", i < 3 ? i : 99);
        ok(cf_workspace_put(ws, "h", CF_WS_ANY_REV, "a", name, strlen(name), NULL, &err), &err);
    }
    assert_int_equal(cf_test_redis_int(f->raw, "HLEN cf:{ws:h}:refs"), 3);
    assert_int_equal(count_keys(f->raw, "cf:{ws:h}:b:*"), 3);
    char zz[65], cmd[160];
    sha_hex("99", 2, zz);
    snprintf(cmd, sizeof(cmd), "HGET cf:{ws:h}:refs %s", zz);
    redisReply *refs = redisCommand(f->raw, cmd);
    assert_non_null(refs);
    assert_int_equal(refs->type, REDIS_REPLY_STRING);
    assert_string_equal(refs->str, "4");
    freeReplyObject(refs);
    assert_int_equal(cf_test_redis_int(f->raw, "HLEN cf:{ws:h}:hist"), 3);
    cf_ws_info info;
    ok(cf_workspace_info(ws, "h", &info, &err), &err);
    assert_int_equal(info.rev, 25);
    assert_int_equal(info.oldest_rev, 22);
    cf_ws_info_clear(&info);
    cf_workspace_store_destroy(ws);
}

static void tweak_small_caps(cf_workspace_config *c)
{
    c->max_files = 3;
    c->max_total_bytes = 100;
    c->max_file_bytes = 64;
    c->max_path_bytes = 32;
    c->max_component_bytes = 10;
}

static void test_bad_input_writes_nothing(void **state)
{
    fixture *f = *state;
    cf_workspace_store *ws = store_with(f, tweak_small_caps);
    cf_error err;
    ok(cf_workspace_create(ws, "bad", NULL, NULL, &err), &err);
    ok(cf_workspace_put(ws, "bad", 0, "ok.txt", "1", 1, NULL, &err), &err);

    static const char *bad_paths[] = {"../evil", "a/../../evil", "/etc/passwd", "a//b", "a/./b", "./a", "a/",
                                      "", "tab\there", "x/verylongcomponent", "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q"};
    for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
        assert_int_equal(cf_workspace_put(ws, "bad", CF_WS_ANY_REV, bad_paths[i], "x", 1, NULL, &err), -1);
        assert_int_equal(err.code, CF_E_INVALID);
        /* A bad path in a batch with good ones rejects the whole batch. */
        cf_ws_file puts[2] = {{"good", "g", 1}, {bad_paths[i], "x", 1}};
        assert_int_equal(cf_workspace_commit(ws, "bad", CF_WS_ANY_REV, puts, 2, NULL, 0, NULL, &err), -1);
        assert_int_equal(err.code, CF_E_INVALID);
    }
    assert_int_equal(cf_workspace_put(ws, "bad", CF_WS_ANY_REV, NULL, "x", 1, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    ok(cf_workspace_put(ws, "bad", CF_WS_ANY_REV, "f", "x", 1, NULL, &err), &err);

    char big[65];
    memset(big, 'b', sizeof(big));
    assert_int_equal(cf_workspace_put(ws, "bad", CF_WS_ANY_REV, "big", big, sizeof(big), NULL, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    cf_ws_file many[4] = {{"m1", "1", 1}, {"m2", "1", 1}, {"m3", "1", 1}, {"m4", "1", 1}};
    assert_int_equal(cf_workspace_commit(ws, "bad", CF_WS_ANY_REV, many, 4, NULL, 0, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    /* Caps over the whole workspace are checked in Lua: 2 existing + 3 new
     * = 5 files > 3, and 1 + 1 + 60 + 60 bytes > 100. */
    assert_int_equal(cf_workspace_commit(ws, "bad", CF_WS_ANY_REV, many, 3, NULL, 0, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_non_null(strstr(err.msg, "5 files"));
    ok(cf_workspace_put(ws, "bad", CF_WS_ANY_REV, "sixty", big, 60, NULL, &err), &err);
    int64_t before = current_rev(f, ws, "bad");
    assert_int_equal(cf_workspace_put(ws, "bad", CF_WS_ANY_REV, "sixty2", big, 60, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    /* Replacing a file counts its old size out. */
    ok(cf_workspace_put(ws, "bad", CF_WS_ANY_REV, "sixty", big, 64, NULL, &err), &err);
    before++;
    /* Duplicates. */
    cf_ws_file dup[2] = {{"d", "1", 1}, {"d", "2", 1}};
    assert_int_equal(cf_workspace_commit(ws, "bad", CF_WS_ANY_REV, dup, 2, NULL, 0, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    const char *dd[1] = {"d"};
    assert_int_equal(cf_workspace_commit(ws, "bad", CF_WS_ANY_REV, dup, 1, dd, 1, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    /* Bad workspace ids never reach Redis keys. */
    assert_int_equal(cf_workspace_create(ws, "a}b", NULL, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_workspace_create(ws, "a b", NULL, NULL, &err), -1);
    assert_int_equal(cf_workspace_create(ws, "ok", "bad\nproject", NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);

    assert_int_equal(current_rev(f, ws, "bad"), before);
    assert_int_equal(cf_test_redis_int(f->raw, "HLEN cf:{ws:bad}:files"), 3); /* ok.txt f sixty */
    assert_int_equal(cf_test_redis_int(f->raw, "HEXISTS cf:{ws:bad}:files good"), 0);
    assert_int_equal(cf_test_redis_int(f->raw, "HEXISTS cf:{ws:bad}:files big"), 0);
    assert_int_equal(cf_test_redis_int(f->raw, "HEXISTS cf:{ws:bad}:files m1"), 0);
    assert_int_equal(cf_test_redis_int(f->raw, "HEXISTS cf:{ws:bad}:files sixty2"), 0);
    assert_int_equal(cf_test_redis_int(f->raw, "EXISTS cf:{ws:ok}:meta"), 0);

    /* Defense in depth: the commit script itself refuses traversal even
     * when the C checks are bypassed. */
    const char *keys[4] = {"cf:{ws:bad}:meta", "cf:{ws:bad}:files", "cf:{ws:bad}:refs", "cf:{ws:bad}:hist"};
    char x[65];
    sha_hex("x", 1, x);
    const char *args[12] = {"-1", "1", "1000", "100000", "1000", "100", "1", "0", "0", "../escape", "1", x};
    redisReply *rep = NULL;
    ok(cf_redis_eval(f->r, &cf_ws_script_commit, 4, keys, NULL, 12, args, NULL, &rep, &err), &err);
    assert_true(cf_redis_reply_is(rep->element[0], "invalid"));
    cf_redis_reply_free(rep);
    args[9] = "/abs";
    ok(cf_redis_eval(f->r, &cf_ws_script_commit, 4, keys, NULL, 12, args, NULL, &rep, &err), &err);
    assert_true(cf_redis_reply_is(rep->element[0], "invalid"));
    cf_redis_reply_free(rep);
    args[9] = "fine";
    /* A blob id must be a sha256 in hex: nothing else can name a key. */
    args[11] = "../../meta";
    ok(cf_redis_eval(f->r, &cf_ws_script_commit, 4, keys, NULL, 12, args, NULL, &rep, &err), &err);
    assert_true(cf_redis_reply_is(rep->element[0], "invalid"));
    cf_redis_reply_free(rep);
    args[11] = x;
    args[10] = "-1";
    ok(cf_redis_eval(f->r, &cf_ws_script_commit, 4, keys, NULL, 12, args, NULL, &rep, &err), &err);
    assert_true(cf_redis_reply_is(rep->element[0], "invalid"));
    cf_redis_reply_free(rep);
    args[10] = "1";
    /* Bytes never uploaded: the script refuses to reference them. */
    char never[65];
    sha_hex("never uploaded", 14, never);
    args[11] = never;
    args[10] = "14";
    ok(cf_redis_eval(f->r, &cf_ws_script_commit, 4, keys, NULL, 12, args, NULL, &rep, &err), &err);
    assert_true(cf_redis_reply_is(rep->element[0], "missing"));
    cf_redis_reply_free(rep);
    args[11] = x;
    args[10] = "1";
    args[4] = "0"; /* max_file 0: the 1-byte file is too large for Lua */
    ok(cf_redis_eval(f->r, &cf_ws_script_commit, 4, keys, NULL, 12, args, NULL, &rep, &err), &err);
    assert_true(cf_redis_reply_is(rep->element[0], "limit"));
    cf_redis_reply_free(rep);
    assert_int_equal(current_rev(f, ws, "bad"), before);
    cf_workspace_store_destroy(ws);
}

/* ---- Content-addressed blobs ------------------------------------------- */

static void test_blobs_dedup_and_upload_grace(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "d", NULL, NULL, &err), &err);
    cf_ws_file two[2] = {{"a", "same", 4}, {"b/c", "same", 4}};
    int64_t rev = 0;
    ok(cf_workspace_commit(f->ws, "d", 0, two, 2, NULL, 0, &rev, &err), &err);
    assert_int_equal(count_keys(f->raw, "cf:{ws:d}:b:*"), 1);
    char same[65], cmd[200];
    sha_hex("same", 4, same);
    snprintf(cmd, sizeof(cmd), "HGET cf:{ws:d}:refs %s", same);
    redisReply *r = redisCommand(f->raw, cmd);
    assert_non_null(r);
    assert_string_equal(r->str, "2");
    freeReplyObject(r);

    /* A commit that does not land (lost CAS, over a cap, no such
     * workspace) takes the bytes it uploaded away again. */
    cf_ws_file lost = {"lost", "never referenced", 16};
    assert_int_equal(cf_workspace_commit(f->ws, "d", 0, &lost, 1, NULL, 0, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_CONFLICT);
    char lid[65];
    sha_hex("never referenced", 16, lid);
    snprintf(cmd, sizeof(cmd), "EXISTS cf:{ws:d}:b:%s", lid);
    assert_int_equal(cf_test_redis_int(f->raw, cmd), 0);
    assert_int_equal(cf_workspace_commit(f->ws, "nosuch", CF_WS_ANY_REV, &lost, 1, NULL, 0, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    assert_int_equal(count_keys(f->raw, "cf:{ws:nosuch}:*"), 0);
    /* ... but never bytes another commit references: "same" is in use. */
    cf_ws_file same_lost = {"other", "same", 4};
    assert_int_equal(cf_workspace_commit(f->ws, "d", 0, &same_lost, 1, NULL, 0, NULL, &err), -1);
    snprintf(cmd, sizeof(cmd), "EXISTS cf:{ws:d}:b:%s", same);
    assert_int_equal(cf_test_redis_int(f->raw, cmd), 1);

    /* The same bytes committed later are referenced and kept with the
     * workspace's TTL, not the grace. */
    ok(cf_workspace_commit(f->ws, "d", rev, &lost, 1, NULL, 0, &rev, &err), &err);
    snprintf(cmd, sizeof(cmd), "PTTL cf:{ws:d}:b:%s", lid);
    assert_true(cf_test_redis_int(f->raw, cmd) > 60000);

    /* A blob stored damaged (here: the wrong bytes under the id) is
     * written again by the next commit of that content, keeping its TTL. */
    cf_ws_file odd = {"odd", "12345", 5};
    char oid[65];
    sha_hex("12345", 5, oid);
    snprintf(cmd, sizeof(cmd), "SET cf:{ws:d}:b:%s 123", oid);
    r = redisCommand(f->raw, cmd);
    freeReplyObject(r);
    ok(cf_workspace_commit(f->ws, "d", rev, &odd, 1, NULL, 0, &rev, &err), &err);
    uint8_t *data = NULL;
    size_t len = 0;
    ok(cf_workspace_get(f->ws, "d", "odd", &data, &len, NULL, &err), &err);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "12345", 5);
    free(data);
}

static void test_damaged_blobs_are_reported(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "dmg", NULL, NULL, &err), &err);
    ok(cf_workspace_put(f->ws, "dmg", 0, "f", "content", 7, NULL, &err), &err);
    char id[65], cmd[200];
    sha_hex("content", 7, id);
    /* Wrong length: every reader says so. */
    snprintf(cmd, sizeof(cmd), "SET cf:{ws:dmg}:b:%s short", id);
    freeReplyObject(redisCommand(f->raw, cmd));
    cf_ws_listing l;
    assert_int_equal(cf_workspace_snapshot(f->ws, "dmg", CF_WS_ANY_REV, &l, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_non_null(strstr(err.msg, "does not match its size"));
    uint8_t *data = NULL;
    size_t len = 0;
    assert_int_equal(cf_workspace_get(f->ws, "dmg", "f", &data, &len, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    /* The right length but other bytes (a bad write, a hand edit): every
     * reader checks the bytes against their id. */
    snprintf(cmd, sizeof(cmd), "SET cf:{ws:dmg}:b:%s CONTENT", id);
    freeReplyObject(redisCommand(f->raw, cmd));
    assert_int_equal(cf_workspace_snapshot(f->ws, "dmg", CF_WS_ANY_REV, &l, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_non_null(strstr(err.msg, "does not match its blob id"));
    assert_int_equal(cf_workspace_get(f->ws, "dmg", "f", &data, &len, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "does not match its blob id"));
    /* Gone (evicted): a clear error after a bounded number of reads. */
    snprintf(cmd, sizeof(cmd), "DEL cf:{ws:dmg}:b:%s", id);
    freeReplyObject(redisCommand(f->raw, cmd));
    assert_int_equal(cf_workspace_snapshot(f->ws, "dmg", CF_WS_ANY_REV, &l, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_non_null(strstr(err.msg, "missing"));
    /* A listing needs no bytes and still works. */
    ok(cf_workspace_list(f->ws, "dmg", &l, &err), &err);
    assert_int_equal(l.n, 1);
    cf_ws_listing_clear(&l);
}

/* A workspace as the store wrote it before content-addressed blobs (format
 * 1: blobs in one hash, ids "<rev>.<n>") is migrated on first use. */
static void test_format1_is_migrated(void **state)
{
    fixture *f = *state;
    cf_error err;
    const char *setup[] = {
        "HSET cf:{ws:old}:meta project p session s created_us 1 updated_us 2 rev 2 oldest 0 nfiles 2 bytes 7 "
        "history 16 ttl_ms 0",
        "HSET cf:{ws:old}:files a 3:2.1 b 4:1.2",
        "HSET cf:{ws:old}:blobs 1.1 old 1.2 bbbb 2.1 new",
    };
    for (size_t i = 0; i < sizeof(setup) / sizeof(setup[0]); i++)
        freeReplyObject(redisCommand(f->raw, setup[i]));
    /* Undo log of revision 2: a was "3:1.1"; of revision 1: a and b were absent. */
    const unsigned char undo2[] = {0x92, 0xa1, 'a', 0xa5, '3', ':', '1', '.', '1'};
    const unsigned char undo1[] = {0x94, 0xa1, 'a', 0xa1, '-', 0xa1, 'b', 0xa1, '-'};
    freeReplyObject(redisCommand(f->raw, "HSET cf:{ws:old}:hist 2 %b 1 %b", undo2, sizeof(undo2), undo1,
                                 sizeof(undo1)));

    cf_ws_listing l;
    ok(cf_workspace_snapshot(f->ws, "old", CF_WS_ANY_REV, &l, &err), &err);
    assert_int_equal(l.n, 2);
    assert_memory_equal(l.entries[0].data, "new", 3);
    assert_memory_equal(l.entries[1].data, "bbbb", 4);
    cf_ws_listing_clear(&l);
    ok(cf_workspace_snapshot(f->ws, "old", 1, &l, &err), &err);
    assert_memory_equal(l.entries[0].data, "old", 3);
    cf_ws_listing_clear(&l);
    assert_int_equal(cf_test_redis_int(f->raw, "EXISTS cf:{ws:old}:blobs"), 0);
    assert_int_equal(count_keys(f->raw, "cf:{ws:old}:b:*"), 3);
    /* It is an ordinary workspace now: writes, retention, delete. */
    int64_t rev = 0;
    ok(cf_workspace_put(f->ws, "old", 2, "a", "newer", 5, &rev, &err), &err);
    assert_int_equal(rev, 3);
    ok(cf_workspace_delete(f->ws, "old", &err), &err);
    assert_int_equal(count_keys(f->raw, "cf:{ws:old}:*"), 0);
}

/* Damaged metadata or counts never make a script loop or write half a
 * commit. */
static void test_hostile_metadata_writes_nothing(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "hm", NULL, NULL, &err), &err);
    ok(cf_workspace_put(f->ws, "hm", 0, "a", "one", 3, NULL, &err), &err);
    /* A reference count that is not a number: refused before any write. */
    char two[65], cmd[200];
    sha_hex("two", 3, two);
    snprintf(cmd, sizeof(cmd), "HSET cf:{ws:hm}:refs %s junk", two);
    freeReplyObject(redisCommand(f->raw, cmd));
    assert_int_equal(cf_workspace_put(f->ws, "hm", 1, "b", "two", 3, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_int_equal(cf_test_redis_int(f->raw, "HLEN cf:{ws:hm}:files"), 1);
    assert_int_equal(current_rev(f, f->ws, "hm"), 1);
    snprintf(cmd, sizeof(cmd), "HDEL cf:{ws:hm}:refs %s", two);
    freeReplyObject(redisCommand(f->raw, cmd));
    /* An oldest revision far below the current one (a runaway trim loop
     * before): metadata out of range, refused at once. */
    freeReplyObject(redisCommand(f->raw, "HSET cf:{ws:hm}:meta oldest_rev -30000000"));
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_workspace_put(f->ws, "hm", 1, "b", "two", 3, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_non_null(strstr(err.msg, "bad metadata"));
    assert_true(cf_mono_us() - t0 < 1000000);
    freeReplyObject(redisCommand(f->raw, "HSET cf:{ws:hm}:meta oldest_rev 0"));
    ok(cf_workspace_put(f->ws, "hm", 1, "b", "two", 3, NULL, &err), &err);
    /* Format 2 has no `oldest` field: scripts of an older codefleet read
     * it, find none and stop before writing (white-box). */
    assert_int_equal(cf_test_redis_int(f->raw, "HEXISTS cf:{ws:hm}:meta oldest"), 0);
}

typedef struct churn_arg {
    cf_test_redis *srv;
    atomic_bool stop;
    int commits;
} churn_arg;

static void *churn_main(void *p)
{
    churn_arg *a = p;
    cf_redis_config cfg;
    cf_test_redis_config(a->srv, &cfg);
    cf_error err;
    cf_redis *r = cf_redis_new(&cfg, true, &err);
    cf_workspace_config wc;
    cf_workspace_config_init(&wc);
    wc.history = 0;
    cf_workspace_store *ws = r ? cf_workspace_store_new(r, &wc, &err) : NULL;
    static char big[64 * 1024];
    for (int i = 0; ws && !atomic_load(&a->stop); i++) {
        memset(big, 'a' + i % 26, sizeof(big));
        snprintf(big, 16, "%d", i);
        cf_ws_file fs[4] = {{"f0", big, sizeof(big)}, {"f1", big, sizeof(big) - 1}, {"f2", big, 100}, {"f3", big, 7}};
        if (cf_workspace_commit(ws, "churn", CF_WS_ANY_REV, fs, 4, NULL, 0, NULL, &err) == 0)
            a->commits++;
    }
    cf_workspace_store_destroy(ws);
    cf_redis_destroy(r);
    return NULL;
}

/* With history 0 every commit frees the blobs it replaced: a snapshot
 * read next to a writer must still succeed (its fallback is one atomic
 * read), never report corruption. */
static void test_snapshot_beside_a_writer(void **state)
{
    fixture *f = *state;
    cf_workspace_config wc;
    cf_workspace_config_init(&wc);
    wc.history = 0;
    cf_error err;
    cf_workspace_store *ws = cf_workspace_store_new(f->r, &wc, &err);
    assert_non_null(ws);
    ok(cf_workspace_create(ws, "churn", NULL, NULL, &err), &err);
    churn_arg a = {.srv = &f->srv};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn_main, &a), 0);
    int failed = 0;
    for (int i = 0; i < 300; i++) {
        cf_ws_listing l;
        if (cf_workspace_snapshot(ws, "churn", CF_WS_ANY_REV, &l, &err) < 0) {
            print_message("snapshot %d: %s\n", i, err.msg);
            failed++;
        } else {
            for (size_t k = 0; k < l.n; k++) /* one revision: all files start with its number */
                assert_memory_equal(l.entries[k].data, l.entries[0].data, l.entries[k].size < 4 ? l.entries[k].size : 4);
            cf_ws_listing_clear(&l);
        }
    }
    atomic_store(&a.stop, true);
    pthread_join(th, NULL);
    print_message("300 snapshots beside %d commits, %d failed\n", a.commits, failed);
    assert_true(a.commits > 0);
    assert_int_equal(failed, 0);
    cf_workspace_store_destroy(ws);
}

/* ---- Redis killed and restarted under load ------------------------------ */

typedef struct load_arg {
    int port;
    const char *password;
    atomic_bool stop;
    atomic_llong last_acked; /* highest revision acknowledged by Redis */
    int ok_total;
    int retriable_failures;
    int other_failures;
    char other_msg[CF_ERROR_MSG_MAX];
} load_arg;

enum { LOAD_FILES = 5 };

static void *load_thread(void *p)
{
    load_arg *a = p;
    cf_redis_config cfg;
    cf_redis_config_init(&cfg);
    cfg.port = a->port;
    cfg.password = a->password;
    cfg.connect_timeout_us = 200000;
    cfg.command_timeout_us = 1000000;
    cfg.retry_initial_us = 20000;
    cfg.retry_max_us = 100000;
    cf_error err;
    cf_redis *r = cf_redis_new(&cfg, true, &err);
    cf_workspace_store *ws = r ? cf_workspace_store_new(r, NULL, &err) : NULL;
    if (!ws) {
        a->other_failures++;
        cf_redis_destroy(r);
        return NULL;
    }
    /* Every commit rewrites all files with one token of a size that varies:
     * a consistent workspace has identical files whose sizes match. */
    char buf[LOAD_FILES][200];
    for (long i = 0; !atomic_load(&a->stop); i++) {
        cf_ws_file puts[LOAD_FILES];
        static const char *const names[LOAD_FILES] = {"f0", "d/f1", "d/f2", "d/e/f3", "f4"};
        int len = snprintf(buf[0], sizeof(buf[0]), "token-%ld-", i);
        memset(buf[0] + len, 'x', (size_t)(i % 100));
        len += (int)(i % 100);
        for (int k = 0; k < LOAD_FILES; k++) {
            memcpy(buf[k], buf[0], (size_t)len);
            puts[k] = (cf_ws_file){names[k], buf[k], (size_t)len};
        }
        int64_t rev = 0;
        if (cf_workspace_commit(ws, "load", CF_WS_ANY_REV, puts, LOAD_FILES, NULL, 0, &rev, &err) == 0) {
            a->ok_total++;
            atomic_store(&a->last_acked, rev);
        } else if (err.code == CF_E_REDIS && err.retriable) {
            a->retriable_failures++;
            cf_test_sleep_us(5000);
        } else {
            a->other_failures++;
            snprintf(a->other_msg, sizeof(a->other_msg), "%s", err.msg);
            cf_test_sleep_us(5000);
        }
    }
    cf_workspace_store_destroy(ws);
    cf_redis_destroy(r);
    return NULL;
}

static void check_consistent(cf_workspace_store *ws, const char *id, int64_t rev)
{
    cf_ws_listing l;
    cf_error err;
    ok(cf_workspace_snapshot(ws, id, rev, &l, &err), &err);
    if (l.rev > 0) {
        assert_int_equal(l.n, LOAD_FILES);
        for (size_t k = 1; k < l.n; k++) {
            assert_int_equal(l.entries[k].size, l.entries[0].size);
            assert_memory_equal(l.entries[k].data, l.entries[0].data, l.entries[0].size);
        }
    }
    cf_ws_listing_clear(&l);
}

static void test_restart_under_load(void **state)
{
    fixture *f = *state;
    cf_error err;
    ok(cf_workspace_create(f->ws, "load", NULL, NULL, &err), &err);
    load_arg a = {.port = f->srv.port, .password = f->srv.password};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, load_thread, &a), 0);
    cf_test_sleep_us(400000);
    cf_test_redis_kill(&f->srv); /* crash: AOF with fsync always keeps acked writes */
    long long acked_before_crash = atomic_load(&a.last_acked);
    int ok_before = a.ok_total;
    cf_test_sleep_us(400000);
    int failures_while_down = a.retriable_failures;
    assert_int_equal(cf_test_redis_launch(&f->srv), 0);
    cf_test_sleep_us(700000);
    atomic_store(&a.stop, true);
    pthread_join(th, NULL);
    print_message("load: %d ok (%d before crash), %d retriable failures, %d others (%s)\n", a.ok_total, ok_before,
                  a.retriable_failures, a.other_failures, a.other_msg);
    assert_true(ok_before > 0);
    assert_true(failures_while_down > 0);
    assert_int_equal(a.other_failures, 0);
    assert_true(a.ok_total > ok_before); /* resumed after the restart */

    /* The fixture's own client reconnects by itself too (AUTH re-applied). */
    int64_t deadline = cf_mono_us() + 3000000;
    cf_ws_info info;
    int rc;
    while ((rc = cf_workspace_info(f->ws, "load", &info, &err)) < 0 && err.retriable && cf_mono_us() < deadline)
        cf_test_sleep_us(20000);
    ok(rc, &err);
    assert_true(info.rev >= acked_before_crash);
    assert_int_equal(info.rev, atomic_load(&a.last_acked));
    assert_int_equal(info.nfiles, LOAD_FILES);
    int64_t oldest = info.oldest_rev, cur = info.rev;
    cf_ws_info_clear(&info);
    /* Every retained revision reads back whole: manifest and blobs agree. */
    for (int64_t rev = oldest; rev <= cur; rev++)
        check_consistent(f->ws, "load", rev);
    assert_true(cf_redis_reconnect_count(f->r) >= 1);
}

static void id_prefix_tenant_a(cf_workspace_config *c)
{
    c->id_prefix = "tenant-a.";
}

static void id_prefix_none(cf_workspace_config *c)
{
    c->id_prefix = "none";
}

/* A tenant's client sets its state-prefix as the store's id_prefix: ids
 * outside it are refused before Redis is asked anything (issue 33). */
static void test_id_prefix_scopes_ids(void **state)
{
    fixture *f = *state;
    cf_error err;
    cf_workspace_config bad;
    cf_workspace_config_init(&bad);
    bad.id_prefix = "tenant-a"; /* would also match tenant-ab.x */
    assert_null(cf_workspace_store_new(f->r, &bad, &err));
    assert_int_equal(err.code, CF_E_INVALID);

    cf_workspace_store *a = store_with(f, id_prefix_tenant_a);
    ok(cf_workspace_create(a, "tenant-a.w", NULL, NULL, &err), &err);
    int64_t rev = 0;
    ok(cf_workspace_put(a, "tenant-a.w", CF_WS_ANY_REV, "f", "x", 1, &rev, &err), &err);
    /* Another tenant's, the bare prefix, a longer tenant name: refused. */
    const char *theirs[] = {"tenant-b.w", "tenant-a.", "tenant-ab.w", "w"};
    for (size_t i = 0; i < sizeof(theirs) / sizeof(theirs[0]); i++) {
        cf_error_clear(&err);
        assert_int_equal(cf_workspace_create(a, theirs[i], NULL, NULL, &err), -1);
        assert_int_equal(err.code, CF_E_INVALID);
        assert_non_null(strstr(err.msg, "tenant-a."));
        assert_non_null(strstr(err.msg, "state-prefix"));
        uint8_t *data = NULL;
        size_t len = 0;
        assert_int_equal(cf_workspace_get(a, theirs[i], "f", &data, &len, NULL, &err), -1);
        assert_null(data);
    }
    /* Nothing was written for them. */
    redisReply *rep = redisCommand(f->raw, "EXISTS cf:{ws:tenant-b.w}:meta");
    assert_non_null(rep);
    assert_int_equal(rep->integer, 0);
    freeReplyObject(rep);
    cf_workspace_store_destroy(a);

    cf_workspace_store *none = store_with(f, id_prefix_none);
    assert_int_equal(cf_workspace_create(none, "tenant-a.v", NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "state-prefix none"));
    cf_workspace_store_destroy(none);
    /* The fixture's store (no id_prefix) names any id. */
    ok(cf_workspace_create(f->ws, "tenant-b.w", NULL, NULL, &err), &err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_crud, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cas_conflict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_fences_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_writers_lose_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_refresh_and_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_history, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blobs_dedup_and_upload_grace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_blobs_are_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_format1_is_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_metadata_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_beside_a_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_id_prefix_scopes_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_under_load, setup_aof_auth, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
