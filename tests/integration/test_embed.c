/* The wasm and js backends through the fleet: a real broker, a real worker
 * running them in confined helpers, the dispatcher library and the CLI.
 * Every limit's hostile case is in tests/unit/test_embed_backend.c; this
 * suite proves requests reach the helpers and results come back over Kafka,
 * including after the watchdog replaced a helper. */
#include "it_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_dispatcher.h"
#include "cf_schema.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define SEC 1000000LL

typedef struct suite {
    it_topics t;
    it_worker w;
    cf_dispatcher *d;
    char tmp[64];
} suite;

static suite g;
static char g_out[65536], g_err[65536];

static int setup_suite(void **state)
{
    (void)state;
    if (!it_brokers())
        return 0;
    it_topics_create(&g.t, "embed", 1);
    const char *extra[] = {"--slots=2", "--backends=sandbox,wasm,js", NULL};
    it_worker_start(&g.w, &g.t, "embed-w", extra);
    if (!it_worker_wait_log(&g.w, "assigned", 30000)) {
        it_worker_dump_log(&g.w);
        return -1;
    }
    g.d = it_dispatcher_new(&g.t);
    snprintf(g.tmp, sizeof(g.tmp), "/tmp/cf-it-embed-XXXXXX");
    return mkdtemp(g.tmp) ? 0 : -1;
}

static int teardown_suite(void **state)
{
    (void)state;
    if (!it_brokers())
        return 0;
    cf_dispatcher_destroy(g.d);
    int rc = it_worker_stop(&g.w, SIGTERM, 20000);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g.tmp);
    if (system(cmd) != 0)
        return -1;
    return rc == 0 ? 0 : -1;
}

static void guest_path(const char *name, char *buf, size_t size)
{
    const char *b = getenv("CF_BINARY_DIR");
    snprintf(buf, size, "%s/tests/embed/%s.wasm", b ? b : "build", name);
}

static void load_guest(const char *name, cf_bytes *out)
{
    char path[1024];
    guest_path(name, path, sizeof(path));
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("guest %s missing (%s)", name, path);
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_int_equal(cf_bytes_set(out, buf, n), 0);
}

static void show(const cf_result *res)
{
    json_t *j = cf_result_to_json(res);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    fprintf(stderr, "result: %.3000s\n", s ? s : "?");
    free(s);
    json_decref(j);
}

static void expect_status(const cf_result *res, cf_status st)
{
    if (res->status != st) {
        show(res);
        fail_msg("status %s, want %s", cf_status_name(res->status), cf_status_name(st));
    }
}

/* A module needs no backend named: the profile's wasm backend takes it. */
static void wasm_module_runs_through_the_fleet(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    cf_request req;
    it_request_init(&req, CF_LANG_WASM, NULL);
    load_guest("hello", &req.module);
    cf_bytes_set(&req.stdin_data, "via kafka", 9);
    cf_result res;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_SUCCESS);
    assert_string_equal(res.meta.backend, "wasm");
    assert_string_equal(res.meta.isolation, "wasm");
    assert_non_null(memmem(res.stdout_data.data, res.stdout_data.len, "stdin=via kafka", 15));
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void js_runs_with_input_and_output(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    cf_request req;
    it_request_init(&req, CF_LANG_JAVASCRIPT, "function run(input) { console.log('n is', input.n); return input.n * 2 }");
    req.backend = strdup("js");
    static const uint8_t input[] = {0x81, 0xa1, 'n', 0x15};
    cf_bytes_set(&req.input, input, sizeof(input));
    cf_result res;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_SUCCESS);
    assert_string_equal(res.meta.isolation, "in_process");
    assert_int_equal(res.output.len, 1);
    assert_int_equal(res.output.data[0], 42);
    assert_int_equal(res.stdout_data.len, 8);
    assert_memory_equal(res.stdout_data.data, "n is 21\n", 8);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

/* The watchdog replaces a helper stuck in a host call; the fleet keeps
 * answering (several requests, both slots). */
static void stuck_helper_is_replaced_and_the_fleet_goes_on(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    cf_request req;
    it_request_init(&req, CF_LANG_WASM, NULL);
    load_guest("sleeper", &req.module);
    req.policy.timeout_us = 300000;
    cf_result res;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_TIMEOUT);
    cf_result_clear(&res);
    cf_request_clear(&req);

    it_request_init(&req, CF_LANG_JAVASCRIPT, "const s = 'a'.repeat(200000); s.indexOf('a'.repeat(100000) + 'b')");
    req.backend = strdup("js");
    req.policy.timeout_us = 100000;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_TIMEOUT);
    cf_result_clear(&res);
    cf_request_clear(&req);

    for (int i = 0; i < 6; i++) {
        it_request_init(&req, CF_LANG_JAVASCRIPT, "6 * 7");
        req.backend = strdup("js");
        it_submit_wait(g.d, &req, 60 * SEC, &res);
        expect_status(&res, CF_STATUS_SUCCESS);
        assert_true(res.output.len == 1 && res.output.data[0] == 42);
        cf_result_clear(&res);
        cf_request_clear(&req);
    }
}

static void limits_and_refusals_come_back(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    cf_request req;
    cf_result res;
    it_request_init(&req, CF_LANG_JAVASCRIPT, "const a = []; for (;;) a.push(new Array(100000).fill(1.5))");
    req.backend = strdup("js");
    req.policy.memory_bytes = 32LL << 20;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_MEMORY_EXCEEDED);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* js has no workspace: a control it cannot enforce is refused, never run weaker */
    it_request_init(&req, CF_LANG_JAVASCRIPT, "1");
    req.backend = strdup("js");
    req.policy.network = CF_NET_ENABLED;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "network=enabled"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    it_request_init(&req, CF_LANG_WASM, NULL);
    cf_bytes_set(&req.module, "\0asm\x01\0\0\0\x01", 9);
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_COMPILE_FAILED);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void cli_submits_modules_and_js(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    char module[1024], reqt[160], rest[160];
    guest_path("hello", module, sizeof(module));
    snprintf(reqt, sizeof(reqt), "--request-topic=%s", g.t.requests);
    snprintf(rest, sizeof(rest), "--result-topic=%s", g.t.results);
    const char *wasm[] = {reqt, rest, "submit", "--timeout-exec=60s", "--module", module, "--", "fail", "arg1", NULL};
    int rc = it_cli_run(wasm, g.tmp, g_out, sizeof(g_out), g_err, sizeof(g_err));
    if (!strstr(g_out, "arg fail\narg arg1") || !strstr(g_out, "status:   failed (exit 7)") || rc == 0)
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, g_out, g_err);
    const char *js[] = {reqt, rest, "submit", "--timeout-exec=60s", "-l", "js", "--code", "[1, 2, 3].map(x => x * x)", NULL};
    rc = it_cli_run(js, g.tmp, g_out, sizeof(g_out), g_err, sizeof(g_err));
    if (rc != 0 || !strstr(g_out, "output:   [1,4,9]") || !strstr(g_out, "backend:  js (in_process)"))
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, g_out, g_err);
}

int main(void)
{
#ifndef CF_TEST_EMBED_RUNTIMES
    fprintf(stderr, "skipped: built without the runtimes (-DCF_EMBED_RUNTIMES=OFF)\n");
    return 0;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wasm_module_runs_through_the_fleet),
        cmocka_unit_test(js_runs_with_input_and_output),
        cmocka_unit_test(stuck_helper_is_replaced_and_the_fleet_goes_on),
        cmocka_unit_test(limits_and_refusals_come_back),
        cmocka_unit_test(cli_submits_modules_and_js),
    };
    return cmocka_run_group_tests(tests, setup_suite, teardown_suite);
}
