/* cf_redis against a real redis-server started by the test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cf_redis.h"
#include "cf_util.h"
#include "unit/redis_test_server.h"

typedef struct fixture {
    cf_test_redis srv;
    cf_redis *r;
} fixture;

static int setup_plain(void **state)
{
    if (!cf_test_redis_available())
        return -1;
    fixture *f = calloc(1, sizeof(*f));
    if (!f || cf_test_redis_start(&f->srv, NULL, false) < 0) {
        free(f);
        return -1;
    }
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cf_error err;
    f->r = cf_redis_new(&cfg, true, &err);
    if (!f->r) { /* cmocka skips teardown when setup fails */
        cf_test_redis_stop(&f->srv);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int setup_auth(void **state)
{
    if (!cf_test_redis_available())
        return -1;
    fixture *f = calloc(1, sizeof(*f));
    if (!f || cf_test_redis_start(&f->srv, "s3cret-pw", false) < 0) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f) {
        cf_redis_destroy(f->r);
        cf_test_redis_stop(&f->srv);
        free(f);
        *state = NULL;
    }
    return 0;
}

static redisReply *cmd(cf_redis *r, int argc, const char **argv, const size_t *lens)
{
    redisReply *rep = NULL;
    cf_error err;
    int rc = cf_redis_command_argv(r, argc, argv, lens, &rep, &err);
    if (rc < 0)
        print_message("command failed: %s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_non_null(rep);
    return rep;
}

static void test_binary_safe_roundtrip(void **state)
{
    fixture *f = *state;
    const char val[] = {'a', '\0', 'b', '\r', '\n', (char)0xff};
    const char *set[3] = {"SET", "bin\0key", val};
    size_t set_lens[3] = {3, 7, sizeof(val)};
    cf_redis_reply_free(cmd(f->r, 3, set, set_lens));
    const char *get[2] = {"GET", "bin\0key"};
    size_t get_lens[2] = {3, 7};
    redisReply *rep = cmd(f->r, 2, get, get_lens);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_int_equal(rep->len, sizeof(val));
    assert_memory_equal(rep->str, val, sizeof(val));
    cf_redis_reply_free(rep);

    const char *incr3[3] = {"INCRBY", "n", "41"};
    rep = cmd(f->r, 3, incr3, NULL);
    int64_t v = 0;
    assert_int_equal(cf_redis_reply_i64(rep, &v, NULL), 0);
    assert_int_equal(v, 41);
    cf_redis_reply_free(rep);
    assert_int_equal(cf_redis_ping(f->r, NULL), 0);
    assert_true(cf_redis_connected(f->r));
}

static void test_error_replies_are_classified(void **state)
{
    fixture *f = *state;
    const char *set[3] = {"SET", "str", "x"};
    cf_redis_reply_free(cmd(f->r, 3, set, NULL));
    const char *lpush[3] = {"LPUSH", "str", "y"};
    cf_error err;
    redisReply *rep = (redisReply *)0x1;
    assert_int_equal(cf_redis_command_argv(f->r, 3, lpush, NULL, &rep, &err), -1);
    assert_null(rep);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_false(err.retriable);
    assert_non_null(strstr(err.msg, "WRONGTYPE"));

    const char *bogus[1] = {"NOSUCHCOMMAND"};
    assert_int_equal(cf_redis_command_argv(f->r, 1, bogus, NULL, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_false(err.retriable);
    /* An error reply does not break the connection. */
    assert_true(cf_redis_connected(f->r));
    assert_int_equal(cf_redis_ping(f->r, NULL), 0);

    static const struct {
        const char *msg;
        bool retriable;
    } cases[] = {
        {"LOADING Redis is loading the dataset in memory", true},
        {"BUSY Redis is busy running a script", true},
        {"TRYAGAIN Multiple keys request during rehashing", true},
        {"READONLY You can't write against a read only replica.", true},
        {"MASTERDOWN Link with MASTER is down", true},
        /* Full (noeviction): it frees only as keys expire; retrying for
         * seconds per request only slows everyone down. */
        {"OOM command not allowed when used memory > 'maxmemory'.", false},
        {"BUSYKEY Target key name already exists.", false},
        {"WRONGTYPE Operation against a key holding the wrong kind of value", false},
        {"NOSCRIPT No matching script.", false},
        {"ERR Error running script", false},
        {"NOAUTH Authentication required.", false},
        {"LOADINGX", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(cf_redis_error_is_retriable(cases[i].msg, strlen(cases[i].msg)), cases[i].retriable);
}

static void test_reply_cap(void **state)
{
    fixture *f = *state;
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cfg.max_reply_bytes = 4096;
    cf_error err;
    cf_redis *small = cf_redis_new(&cfg, true, &err);
    assert_non_null(small);
    char *big = malloc(10000);
    assert_non_null(big);
    memset(big, 'z', 10000);
    const char *set[3] = {"SET", "big", big};
    size_t lens[3] = {3, 3, 10000};
    cf_redis_reply_free(cmd(small, 3, set, lens)); /* requests are not capped, replies are */
    free(big);
    const char *get[2] = {"GET", "big"};
    redisReply *rep = NULL;
    assert_int_equal(cf_redis_command_argv(small, 2, get, NULL, &rep, &err), -1);
    assert_null(rep);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_false(cf_redis_connected(small)); /* mid-reply stream is dropped */
    /* The next command reconnects and works. */
    assert_int_equal(cf_redis_ping(small, &err), 0);
    assert_int_equal(cf_redis_reconnect_count(small), 1);
    const char *strlen_cmd[2] = {"STRLEN", "big"};
    rep = cmd(small, 2, strlen_cmd, NULL);
    assert_int_equal(rep->integer, 10000);
    cf_redis_reply_free(rep);
    cf_redis_destroy(small);
}

/* Pipelines: n commands, n replies in order, one budget for all of them;
 * an error reply fails the call and the connection stays usable. */
static void test_pipeline(void **state)
{
    fixture *f = *state;
    cf_error err;
    enum { N = 300 };
    static char keys[N][16], vals[N][16];
    const char *argv[N][3];
    cf_redis_cmd cmds[N];
    redisReply *rep[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "p%d", i);
        snprintf(vals[i], sizeof(vals[i]), "v%d", i * 7);
        argv[i][0] = "SET";
        argv[i][1] = keys[i];
        argv[i][2] = vals[i];
        cmds[i] = (cf_redis_cmd){.argc = 3, .argv = argv[i], .lens = NULL};
    }
    assert_int_equal(cf_redis_pipeline(f->r, cmds, N, rep, &err), 0);
    for (int i = 0; i < N; i++) {
        assert_true(cf_redis_reply_is(rep[i], "OK"));
        cf_redis_reply_free(rep[i]);
    }
    for (int i = 0; i < N; i++) {
        argv[i][0] = "GET";
        cmds[i].argc = 2;
    }
    assert_int_equal(cf_redis_pipeline(f->r, cmds, N, rep, &err), 0);
    for (int i = 0; i < N; i++) {
        assert_true(cf_redis_reply_is(rep[i], vals[i]));
        cf_redis_reply_free(rep[i]);
    }
    /* One bad command in the middle: the call fails, every reply is freed
     * and set to NULL, and the connection is still in step. */
    const char *bad[3] = {"HGET", "p5", "field"}; /* WRONGTYPE */
    cmds[150] = (cf_redis_cmd){.argc = 3, .argv = bad, .lens = NULL};
    assert_int_equal(cf_redis_pipeline(f->r, cmds, N, rep, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_non_null(strstr(err.msg, "WRONGTYPE"));
    for (int i = 0; i < N; i++)
        assert_null(rep[i]);
    assert_true(cf_redis_connected(f->r));
    const char *get[2] = {"GET", "p1"};
    redisReply *one = cmd(f->r, 2, get, NULL);
    assert_true(cf_redis_reply_is(one, "v7"));
    cf_redis_reply_free(one);
    assert_int_equal(cf_redis_pipeline(f->r, cmds, 0, rep, &err), 0);

    /* The reply cap holds for the pipeline as a whole. */
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cfg.max_reply_bytes = 2048;
    cf_redis *small = cf_redis_new(&cfg, true, &err);
    assert_non_null(small);
    cmds[150] = (cf_redis_cmd){.argc = 2, .argv = argv[150], .lens = NULL};
    assert_int_equal(cf_redis_pipeline(small, cmds, N, rep, &err), -1); /* ~3 KB of replies */
    assert_int_equal(err.code, CF_E_LIMIT);
    for (int i = 0; i < N; i++)
        assert_null(rep[i]);
    assert_false(cf_redis_connected(small));
    assert_int_equal(cf_redis_pipeline(small, cmds, 50, rep, &err), 0);
    for (int i = 0; i < 50; i++)
        cf_redis_reply_free(rep[i]);
    cf_redis_destroy(small);
}

/* A hostile "server": answers whatever comes with fixed bytes. */
typedef struct evil_server {
    int lfd;
    int port;
    const char *reply;
    pthread_t thread;
} evil_server;

static void *evil_main(void *arg)
{
    evil_server *e = arg;
    int c = accept(e->lfd, NULL, NULL);
    if (c < 0)
        return NULL;
    char buf[512];
    if (read(c, buf, sizeof(buf)) > 0 && write(c, e->reply, strlen(e->reply)) < 0)
        perror("evil server write");
    /* Keep the connection open: the client must decide on the header alone. */
    struct timeval tv = {2, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (read(c, buf, sizeof(buf)) > 0) {
    }
    close(c);
    return NULL;
}

static void evil_start(evil_server *e, const char *reply)
{
    e->reply = reply;
    e->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(e->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(e->lfd, (struct sockaddr *)&a, &len);
    e->port = ntohs(a.sin_port);
    assert_int_equal(listen(e->lfd, 1), 0);
    assert_int_equal(pthread_create(&e->thread, NULL, evil_main, e), 0);
}

/* Aggregate headers declaring more elements than the byte cap could carry
 * are refused before hiredis allocates for them (hiredis 0.14 would reserve
 * 16 GB for the first one). */
static void test_absurd_aggregate_headers_refused(void **state)
{
    (void)state;
    static const char *const replies[] = {
        "*2000000000\r\n",
        "*2\r\n$3\r\nabc\r\n*1999999999\r\n",
        "$99999999999\r\n",
    };
    for (size_t k = 0; k < sizeof(replies) / sizeof(replies[0]); k++) {
        evil_server e;
        evil_start(&e, replies[k]);
        cf_redis_config cfg;
        cf_redis_config_init(&cfg);
        cfg.host = "127.0.0.1";
        cfg.port = e.port;
        cfg.max_reply_bytes = 1 << 20;
        cfg.command_timeout_us = 3000000;
        cf_error err;
        cf_redis *r = cf_redis_new(&cfg, false, &err);
        assert_non_null(r);
        const char *get[2] = {"GET", "k"};
        int64_t t0 = cf_mono_us();
        assert_int_equal(cf_redis_command_argv(r, 2, get, NULL, NULL, &err), -1);
        assert_int_equal(err.code, CF_E_LIMIT);
        assert_true(cf_mono_us() - t0 < 1000000); /* decided on the header, not by a timeout */
        cf_redis_destroy(r);
        pthread_join(e.thread, NULL);
        close(e.lfd);
    }
}

static void test_command_timeout(void **state)
{
    fixture *f = *state;
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cfg.command_timeout_us = 200000;
    cf_error err;
    cf_redis *r = cf_redis_new(&cfg, true, &err);
    assert_non_null(r);
    const char *blpop[3] = {"BLPOP", "nothing-here", "3"};
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_redis_command_argv(r, 3, blpop, NULL, NULL, &err), -1);
    int64_t took = cf_mono_us() - t0;
    assert_int_equal(err.code, CF_E_REDIS);
    assert_true(err.retriable);
    assert_non_null(strstr(err.msg, "timed out"));
    assert_true(took >= 150000 && took < 1500000);
    /* Reconnect at once (no backoff after a command failure) and the
     * timeout is still applied on the new connection. */
    assert_int_equal(cf_redis_ping(r, &err), 0);
    t0 = cf_mono_us();
    assert_int_equal(cf_redis_command_argv(r, 3, blpop, NULL, NULL, &err), -1);
    took = cf_mono_us() - t0;
    assert_true(err.retriable);
    assert_true(took < 1500000);
    assert_int_equal(cf_redis_reconnect_count(r), 1); /* dropped again, not yet reconnected */
    assert_false(cf_redis_connected(r));
    cf_redis_destroy(r);
}

static const cf_redis_script echo_script = {
    .name = "echo",
    .source = "return {KEYS[1], ARGV[1], #ARGV[2]}",
};
static const cf_redis_script failing_script = {
    .name = "failing",
    .source = "return redis.call('LPUSH', KEYS[1], 'x')",
};

static void test_eval_noscript_fallback(void **state)
{
    fixture *f = *state;
    const char *keys[1] = {"k1"};
    const char *args[2] = {"hello", "a\0b"};
    size_t arg_lens[2] = {5, 3};
    for (int round = 0; round < 3; round++) {
        redisReply *rep = NULL;
        cf_error err;
        int rc = cf_redis_eval(f->r, &echo_script, 1, keys, NULL, 2, args, arg_lens, &rep, &err);
        if (rc < 0)
            print_message("eval: %s\n", err.msg);
        assert_int_equal(rc, 0);
        assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
        assert_int_equal(rep->elements, 3);
        assert_true(cf_redis_reply_is(rep->element[0], "k1"));
        assert_true(cf_redis_reply_is(rep->element[1], "hello"));
        assert_int_equal(rep->element[2]->integer, 3);
        cf_redis_reply_free(rep);
        /* Forget the script server-side: the next call must fall back. */
        const char *flush[2] = {"SCRIPT", "FLUSH"};
        cf_redis_reply_free(cmd(f->r, 2, flush, NULL));
    }
    const char *set[3] = {"SET", "k2", "x"};
    cf_redis_reply_free(cmd(f->r, 3, set, NULL));
    const char *k2[1] = {"k2"};
    cf_error err;
    assert_int_equal(cf_redis_eval(f->r, &failing_script, 1, k2, NULL, 0, NULL, NULL, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_REDIS);
    assert_false(err.retriable);
    assert_non_null(strstr(err.msg, "failing"));
}

static void test_select_db(void **state)
{
    fixture *f = *state;
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cfg.db = 3;
    cf_error err;
    cf_redis *r = cf_redis_new(&cfg, true, &err);
    assert_non_null(r);
    const char *set[3] = {"SET", "in-db3", "1"};
    cf_redis_reply_free(cmd(r, 3, set, NULL));
    cf_redis_disconnect(r);
    /* Reconnected: still db 3. */
    const char *exists[2] = {"EXISTS", "in-db3"};
    redisReply *rep = cmd(r, 2, exists, NULL);
    assert_int_equal(rep->integer, 1);
    cf_redis_reply_free(rep);
    rep = cmd(f->r, 2, exists, NULL); /* db 0 */
    assert_int_equal(rep->integer, 0);
    cf_redis_reply_free(rep);
    cf_redis_destroy(r);
}

static void test_bad_config(void **state)
{
    (void)state;
    cf_redis_config cfg;
    cf_redis_config_init(&cfg);
    cf_error err;
    cfg.port = 0;
    assert_null(cf_redis_new(&cfg, false, &err));
    assert_int_equal(err.code, CF_E_INVALID);
    cf_redis_config_init(&cfg);
    cfg.user = "alice";
    assert_null(cf_redis_new(&cfg, false, &err));
    assert_int_equal(err.code, CF_E_INVALID);
    cf_redis_destroy(NULL);
    cf_redis_reply_free(NULL);
}

static void test_unreachable_is_retriable_with_backoff(void **state)
{
    (void)state;
    int port = cf_test_redis_free_port();
    assert_true(port > 0);
    cf_redis_config cfg;
    cf_redis_config_init(&cfg);
    cfg.port = port;
    cfg.connect_timeout_us = 200000;
    cfg.retry_initial_us = 300000;
    cfg.retry_max_us = 600000;
    cf_error err;
    assert_null(cf_redis_new(&cfg, true, &err));
    assert_int_equal(err.code, CF_E_REDIS);
    assert_true(err.retriable);
    cf_redis *r = cf_redis_new(&cfg, false, &err); /* lazy */
    assert_non_null(r);
    assert_int_equal(cf_redis_ping(r, &err), -1);
    assert_true(err.retriable);
    assert_non_null(strstr(err.msg, "connect failed"));
    /* Within the backoff: fails fast without trying. */
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_redis_ping(r, &err), -1);
    assert_true(err.retriable);
    assert_non_null(strstr(err.msg, "next reconnect in"));
    assert_true(cf_mono_us() - t0 < 100000);
    cf_redis_destroy(r);
}

static void test_auth_password_and_acl_user(void **state)
{
    fixture *f = *state;
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cf_error err;

    cfg.password = "wrong";
    assert_null(cf_redis_new(&cfg, true, &err));
    assert_int_equal(err.code, CF_E_REDIS);
    assert_false(err.retriable); /* bad credentials do not heal by waiting */

    cfg.password = NULL;
    cf_redis *anon = cf_redis_new(&cfg, true, &err);
    assert_non_null(anon);
    assert_int_equal(cf_redis_ping(anon, &err), -1);
    assert_non_null(strstr(err.msg, "NOAUTH"));
    assert_false(err.retriable);
    cf_redis_destroy(anon);

    cf_test_redis_config(&f->srv, &cfg);
    f->r = cf_redis_new(&cfg, true, &err);
    assert_non_null(f->r);
    const char *acl[7] = {"ACL", "SETUSER", "alice", "on", ">alice-pw", "~*", "+@all"};
    cf_redis_reply_free(cmd(f->r, 7, acl, NULL));

    cfg.user = "alice";
    cfg.password = "alice-pw";
    cf_redis *alice = cf_redis_new(&cfg, true, &err);
    assert_non_null(alice);
    const char *whoami[2] = {"ACL", "WHOAMI"};
    redisReply *rep = cmd(alice, 2, whoami, NULL);
    assert_true(cf_redis_reply_is(rep, "alice"));
    cf_redis_reply_free(rep);
    cf_redis_destroy(alice);
}

/* Kill the server under a client: retriable failures while it is down,
 * then the client reconnects on its own, re-applying AUTH, db and timeout. */
static void test_server_restart_reapplies_options(void **state)
{
    fixture *f = *state;
    cf_redis_config cfg;
    cf_test_redis_config(&f->srv, &cfg);
    cfg.db = 2;
    cfg.command_timeout_us = 300000;
    cf_error err;
    f->r = cf_redis_new(&cfg, true, &err);
    assert_non_null(f->r);
    const char *set[3] = {"SET", "before", "1"};
    cf_redis_reply_free(cmd(f->r, 3, set, NULL));

    cf_test_redis_kill(&f->srv);
    int failures = 0;
    for (int i = 0; i < 10; i++) {
        int rc = cf_redis_command_argv(f->r, 3, set, NULL, NULL, &err);
        assert_int_equal(rc, -1);
        assert_int_equal(err.code, CF_E_REDIS);
        assert_true(err.retriable);
        failures++;
        cf_test_sleep_us(20000);
    }
    assert_int_equal(failures, 10);
    assert_int_equal(cf_test_redis_launch(&f->srv), 0);

    int64_t deadline = cf_mono_us() + 5000000;
    int rc = -1;
    while (rc < 0 && cf_mono_us() < deadline) {
        rc = cf_redis_ping(f->r, &err);
        if (rc < 0) {
            assert_true(err.retriable);
            cf_test_sleep_us(20000);
        }
    }
    assert_int_equal(rc, 0);
    assert_true(cf_redis_reconnect_count(f->r) >= 1);
    /* AUTH was re-applied (the ping passed requirepass); db 2 too: */
    const char *set2[3] = {"SET", "after", "1"};
    cf_redis_reply_free(cmd(f->r, 3, set2, NULL));
    redisContext *raw = cf_test_redis_raw(&f->srv);
    assert_non_null(raw);
    assert_int_equal(cf_test_redis_int(raw, "EXISTS after"), 0);
    redisReply *sel = redisCommand(raw, "SELECT 2");
    freeReplyObject(sel);
    assert_int_equal(cf_test_redis_int(raw, "EXISTS after"), 1);
    redisFree(raw);
    /* ...and the command timeout. */
    const char *blpop[3] = {"BLPOP", "nothing", "3"};
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_redis_command_argv(f->r, 3, blpop, NULL, NULL, &err), -1);
    assert_true(err.retriable);
    assert_true(cf_mono_us() - t0 < 1500000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_binary_safe_roundtrip, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_error_replies_are_classified, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_reply_cap, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_pipeline, setup_plain, teardown),
        cmocka_unit_test(test_absurd_aggregate_headers_refused),
        cmocka_unit_test_setup_teardown(test_command_timeout, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_eval_noscript_fallback, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_select_db, setup_plain, teardown),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_unreachable_is_retriable_with_backoff),
        cmocka_unit_test_setup_teardown(test_auth_password_and_acl_user, setup_auth, teardown),
        cmocka_unit_test_setup_teardown(test_server_restart_reapplies_options, setup_auth, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
