/* Unit tests of the CLI's state and event parts that need no server:
 * --redis parsing, exit codes, JSON state conversion, safe snapshot
 * materialization (hostile listings, symlinks, non-empty targets), global
 * options from the environment, and usage errors that must be reported
 * before any connection is made. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_cli.h"
#include "cf_redis.h"
#include "cf_workspace.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])) - 1)

static void test_parse_redis_addr(void **state)
{
    (void)state;
    char host[256];
    int port = -1;
    cf_error err = {0};
    assert_int_equal(cf_cli_parse_redis_addr("127.0.0.1:24379", host, sizeof(host), &port, &err), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 24379);
    assert_int_equal(cf_cli_parse_redis_addr("redis.local", host, sizeof(host), &port, &err), 0);
    assert_string_equal(host, "redis.local");
    assert_int_equal(port, 6379);
    assert_int_equal(cf_cli_parse_redis_addr("[::1]:7000", host, sizeof(host), &port, &err), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 7000);
    assert_int_equal(cf_cli_parse_redis_addr("/run/redis.sock", host, sizeof(host), &port, &err), 0);
    assert_string_equal(host, "/run/redis.sock");
    assert_int_equal(port, 0);
    static const char *const bad[] = {"", ":6379", "host:", "host:0", "host:70000", "host:12x", "::1:6379",
                                      "[::1", "[::1]x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cf_cli_parse_redis_addr(bad[i], host, sizeof(host), &port, &err) == 0)
            fail_msg("'%s' accepted", bad[i]);
        assert_int_equal(err.code, CF_E_INVALID);
    }
    char tiny[4];
    assert_int_equal(cf_cli_parse_redis_addr("longhost:1", tiny, sizeof(tiny), &port, &err), -1);
}

static void test_exit_codes(void **state)
{
    (void)state;
    static const struct {
        cf_errcode code;
        int exit;
    } map[] = {
        {CF_E_INVALID, CF_EXIT_USAGE},      {CF_E_LIMIT, CF_EXIT_USAGE},        {CF_E_UNSUPPORTED, CF_EXIT_USAGE},
        {CF_E_NOT_FOUND, CF_EXIT_NOT_FOUND}, {CF_E_CONFLICT, CF_EXIT_CONFLICT}, {CF_E_TIMEOUT, CF_EXIT_NO_RESULT},
        {CF_E_REDIS, CF_EXIT_TRANSPORT},    {CF_E_KAFKA, CF_EXIT_TRANSPORT},    {CF_E_SYSTEM, CF_EXIT_TRANSPORT},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        cf_error e = {.code = map[i].code};
        assert_int_equal(cf_cli_exit_for_state_error(&e), map[i].exit);
    }
    /* the existing codes keep their values; the new ones are distinct */
    assert_int_equal(CF_EXIT_TRANSPORT, 6);
    assert_int_equal(CF_EXIT_NOT_FOUND, 7);
    assert_int_equal(CF_EXIT_CONFLICT, 8);
    cf_error nf = {.code = CF_E_NOT_FOUND};
    assert_int_equal(cf_cli_exit_for_error(&nf), CF_EXIT_USAGE); /* unchanged for the Kafka commands */
}

static void test_state_from_json(void **state)
{
    (void)state;
    cf_bytes out;
    cf_error err = {0};
    const char *ok = "{\"step\": 3, \"todo\": [\"a\"]}";
    assert_int_equal(cf_cli_state_from_json(ok, strlen(ok), "--state", &out, &err), 0);
    assert_true(out.len > 0);
    assert_int_equal(out.data[0], 0x82); /* fixmap of 2 */
    free(out.data);
    static const char *const bad[] = {"[1, 2]", "42", "\"text\"", "null", "true", "{", "{\"a\": 1, \"a\": 2}", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cf_cli_state_from_json(bad[i], strlen(bad[i]), "--state", &out, &err) == 0)
            fail_msg("'%s' accepted", bad[i]);
        assert_int_equal(err.code, CF_E_INVALID);
        assert_non_null(strstr(err.msg, "--state"));
        assert_null(out.data);
    }
    assert_int_equal(cf_cli_state_from_json("[1]", 3, "--state", &out, &err), -1);
    assert_non_null(strstr(err.msg, "must be a JSON object"));
}

/* ---- materialize ---------------------------------------------------------- */

typedef struct mfx {
    char root[256]; /* scratch dir */
    cf_redis *r;
    cf_workspace_store *ws;
} mfx;

static int m_setup(void **state)
{
    mfx *f = calloc(1, sizeof(*f));
    snprintf(f->root, sizeof(f->root), "/tmp/cf-test-cli-state-XXXXXX");
    assert_non_null(mkdtemp(f->root));
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    cf_error err = {0};
    f->r = cf_redis_new(&rc, false, &err); /* never connects: only path rules are used */
    assert_non_null(f->r);
    f->ws = cf_workspace_store_new(f->r, NULL, &err);
    assert_non_null(f->ws);
    *state = f;
    return 0;
}

static void rm_rf(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static int m_teardown(void **state)
{
    mfx *f = *state;
    rm_rf(f->root);
    cf_workspace_store_destroy(f->ws);
    cf_redis_destroy(f->r);
    free(f);
    return 0;
}

static void listing(cf_ws_listing *l, int n, ...)
{
    memset(l, 0, sizeof(*l));
    l->entries = calloc((size_t)n, sizeof(*l->entries));
    l->n = (size_t)n;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *p = va_arg(ap, const char *);
        const char *d = va_arg(ap, const char *);
        l->entries[i].path = strdup(p);
        l->entries[i].size = strlen(d);
        l->entries[i].data = (uint8_t *)strdup(d);
    }
    va_end(ap);
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return buf;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void test_materialize_ok(void **state)
{
    mfx *f = *state;
    char dir[512], p[600];
    snprintf(dir, sizeof(dir), "%s/out", f->root); /* created by materialize */
    cf_ws_listing l;
    listing(&l, 3, "a.txt", "alpha", "d/e/f.bin", "deep", "d/g", "");
    cf_error err = {0};
    if (cf_cli_materialize(dir, &l, f->ws, &err) < 0)
        fail_msg("materialize: %s", err.msg);
    snprintf(p, sizeof(p), "%s/a.txt", dir);
    assert_string_equal(slurp(p), "alpha");
    snprintf(p, sizeof(p), "%s/d/e/f.bin", dir);
    assert_string_equal(slurp(p), "deep");
    snprintf(p, sizeof(p), "%s/d/g", dir);
    assert_string_equal(slurp(p), "");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    cf_ws_listing_clear(&l);

    /* an existing empty directory is fine too */
    snprintf(dir, sizeof(dir), "%s/empty", f->root);
    assert_int_equal(mkdir(dir, 0755), 0);
    listing(&l, 1, "x", "1");
    assert_int_equal(cf_cli_materialize(dir, &l, f->ws, &err), 0);
    assert_int_equal(count_entries(dir), 1);
    cf_ws_listing_clear(&l);
}

static void test_materialize_refuses_targets(void **state)
{
    mfx *f = *state;
    char dir[512], target[512], p[600];
    cf_error err = {0};
    cf_ws_listing l;
    listing(&l, 1, "x", "1");
    /* non-empty directory: nothing is written */
    snprintf(dir, sizeof(dir), "%s/full", f->root);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(p, sizeof(p), "%s/keep", dir);
    FILE *fp = fopen(p, "w");
    fclose(fp);
    assert_int_equal(cf_cli_materialize(dir, &l, f->ws, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_non_null(strstr(err.msg, "not empty"));
    assert_int_equal(count_entries(dir), 1);
    /* the target is a symlink to an (empty) directory: refused, untouched */
    snprintf(target, sizeof(target), "%s/real", f->root);
    assert_int_equal(mkdir(target, 0755), 0);
    snprintf(dir, sizeof(dir), "%s/link", f->root);
    assert_int_equal(symlink(target, dir), 0);
    assert_int_equal(cf_cli_materialize(dir, &l, f->ws, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(count_entries(target), 0);
    /* the target is a regular file */
    assert_int_equal(cf_cli_materialize(p, &l, f->ws, &err), -1);
    cf_ws_listing_clear(&l);
}

/* A listing is hostile (it comes from Redis): bad paths are refused and
 * nothing lands outside the target. */
static void test_materialize_hostile_listing(void **state)
{
    mfx *f = *state;
    static const char *const bad[] = {"../escape", "/abs/olute", "a/../../escape", "a//b", "./x", "a/.",
                                      "ctl\001x", "trail/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/h%zu", f->root, i);
        cf_ws_listing l;
        listing(&l, 1, bad[i], "pwned");
        cf_error err = {0};
        if (cf_cli_materialize(dir, &l, f->ws, &err) == 0)
            fail_msg("path '%s' accepted", bad[i]);
        assert_int_equal(err.code, CF_E_INVALID);
        assert_int_equal(count_entries(dir), 0);
        cf_ws_listing_clear(&l);
    }
    char p[600];
    snprintf(p, sizeof(p), "%s/escape", f->root);
    assert_int_equal(access(p, F_OK), -1);

    /* a file and a directory of the same name: the second cannot be made */
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/clash", f->root);
    cf_ws_listing l;
    listing(&l, 2, "a", "file", "a/b", "under a file");
    cf_error err = {0};
    assert_int_equal(cf_cli_materialize(dir, &l, f->ws, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    cf_ws_listing_clear(&l);
    /* the same path twice: O_EXCL refuses to overwrite */
    snprintf(dir, sizeof(dir), "%s/dup", f->root);
    listing(&l, 2, "same", "1", "same", "2");
    assert_int_equal(cf_cli_materialize(dir, &l, f->ws, &err), -1);
    snprintf(p, sizeof(p), "%s/same", dir);
    assert_string_equal(slurp(p), "1");
    cf_ws_listing_clear(&l);
    /* an entry claiming bytes it does not carry */
    snprintf(dir, sizeof(dir), "%s/nodata", f->root);
    listing(&l, 1, "x", "abc");
    free(l.entries[0].data);
    l.entries[0].data = NULL;
    assert_int_equal(cf_cli_materialize(dir, &l, f->ws, &err), -1);
    assert_int_equal(count_entries(dir), 0);
    cf_ws_listing_clear(&l);
}

/* ---- globals and usage ------------------------------------------------------ */

static void test_globals_redis_env(void **state)
{
    (void)state;
    unsetenv("CODEFLEET_CONFIG");
    setenv("CODEFLEET_REDIS", "10.0.0.1:7000", 1);
    setenv("CODEFLEET_REDIS_PASSWORD", "s3cret", 1);
    setenv("CODEFLEET_EVENTS_TOPIC", "my.events", 1);
    char *a1[] = {"codefleet", "workspace", "ls", "x", NULL};
    cf_cli_globals g;
    cf_error err = {0};
    int cmd;
    bool help;
    assert_int_equal(cf_cli_parse_globals(ARGC(a1), a1, &g, &cmd, &help, &err), 0);
    assert_string_equal(g.redis, "10.0.0.1:7000");
    assert_string_equal(g.redis_password, "s3cret");
    assert_null(g.redis_user);
    assert_string_equal(g.redis_prefix, "cf:");
    assert_string_equal(g.events_topic, "my.events");
    assert_int_equal(cmd, 1);
    cf_cli_globals_free(&g);
    /* flags win over the environment */
    char *a2[] = {"codefleet", "--redis", "/tmp/r.sock", "--redis-user", "agent", "--events-topic=t2", "events",
                  NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a2), a2, &g, &cmd, &help, &err), 0);
    assert_string_equal(g.redis, "/tmp/r.sock");
    assert_string_equal(g.redis_user, "agent");
    assert_string_equal(g.events_topic, "t2");
    assert_int_equal(cmd, 6);
    cf_cli_globals_free(&g);
    unsetenv("CODEFLEET_REDIS");
    unsetenv("CODEFLEET_REDIS_PASSWORD");
    unsetenv("CODEFLEET_EVENTS_TOPIC");
    assert_int_equal(cf_cli_parse_globals(ARGC(a1), a1, &g, &cmd, &help, &err), 0);
    assert_string_equal(g.redis, "127.0.0.1:6379");
    assert_string_equal(g.events_topic, "codefleet.events");
    cf_cli_globals_free(&g);
}

/* Bad input is refused before any server is contacted: these run with the
 * Redis address and brokers pointing at a closed port, and must answer 2
 * (not 6, which a connection attempt would give). */
static void test_usage_errors_before_connecting(void **state)
{
    (void)state;
    unsetenv("CODEFLEET_CONFIG");
    setenv("CODEFLEET_REDIS", "127.0.0.1:1", 1);
    setenv("CODEFLEET_BROKERS", "127.0.0.1:1", 1);
    char tmp[] = "/tmp/cf-test-cli-XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hi", 2), 2);
    close(fd);
    char spec_trav[600], spec_abs[600], spec_ctl[600];
    snprintf(spec_trav, sizeof(spec_trav), "../x=%s", tmp);
    snprintf(spec_abs, sizeof(spec_abs), "/etc/x=%s", tmp);
    snprintf(spec_ctl, sizeof(spec_ctl), "a\001b=%s", tmp);
    char *cases[][10] = {
        {"codefleet", "workspace", NULL},
        {"codefleet", "workspace", "frobnicate", "x", NULL},
        {"codefleet", "workspace", "put", "ws1", NULL},
        {"codefleet", "workspace", "put", "bad/id", spec_trav + 5, NULL},
        {"codefleet", "workspace", "put", "ws1", spec_trav, NULL},
        {"codefleet", "workspace", "put", "ws1", spec_abs, NULL},
        {"codefleet", "workspace", "put", "ws1", spec_ctl, NULL},
        {"codefleet", "workspace", "put", "ws1", "a=/nonexistent/file", NULL},
        {"codefleet", "workspace", "put", "ws1", "--expect-rev", "-3", "a=/etc/hostname", NULL},
        {"codefleet", "workspace", "snapshot", "ws1", NULL},
        {"codefleet", "checkpoint", "save", "t1", NULL},
        {"codefleet", "checkpoint", "save", "t1", "--state", "[1,2]", NULL},
        {"codefleet", "checkpoint", "save", "t1", "--state", "{\"a\":1}", "--root", "--parent", "x", NULL},
        {"codefleet", "checkpoint", "save", "t1", "--state-file", "/nonexistent", NULL},
        {"codefleet", "checkpoint", "rm", "t1", NULL},
        {"codefleet", "checkpoint", "list", "t1", "--from", "x", NULL},
        {"codefleet", "checkpoint", "list", "t1", "--limit", "0", NULL},
        {"codefleet", "events", "publish", "--workspace", "w", "--kind", "blocked", NULL},
        {"codefleet", "events", "publish", "--workspace", "../w", NULL},
        {"codefleet", "events", "wait", NULL},
        {"codefleet", "events", "wait", "c1", "--kind", "any", NULL},
        {"codefleet", "events", "tail", "--from-beginning", "--since", "5m", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int argc = 0;
        while (cases[i][argc])
            argc++;
        int rc = cf_cli_main(argc, cases[i]);
        if (rc != CF_EXIT_USAGE)
            fail_msg("case %zu (%s %s %s): exit %d, want %d", i, cases[i][1], cases[i][2] ? cases[i][2] : "",
                     cases[i][2] && cases[i][3] ? cases[i][3] : "", rc, CF_EXIT_USAGE);
    }
    /* and --help answers 0 */
    char *h1[] = {"codefleet", "workspace", "--help", NULL};
    char *h2[] = {"codefleet", "checkpoint", "save", "--help", NULL};
    char *h3[] = {"codefleet", "events", "wait", "--help", NULL};
    assert_int_equal(cf_cli_main(ARGC(h1), h1), CF_EXIT_OK);
    assert_int_equal(cf_cli_main(ARGC(h2), h2), CF_EXIT_OK);
    assert_int_equal(cf_cli_main(ARGC(h3), h3), CF_EXIT_OK);
    /* a valid request against the closed port is a transport error */
    char *t1[] = {"codefleet", "workspace", "ls", "ws1", NULL};
    assert_int_equal(cf_cli_main(ARGC(t1), t1), CF_EXIT_TRANSPORT);
    unlink(tmp);
    unsetenv("CODEFLEET_REDIS");
    unsetenv("CODEFLEET_BROKERS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_redis_addr),
        cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_state_from_json),
        cmocka_unit_test_setup_teardown(test_materialize_ok, m_setup, m_teardown),
        cmocka_unit_test_setup_teardown(test_materialize_refuses_targets, m_setup, m_teardown),
        cmocka_unit_test_setup_teardown(test_materialize_hostile_listing, m_setup, m_teardown),
        cmocka_unit_test(test_globals_redis_env),
        cmocka_unit_test(test_usage_errors_before_connecting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
