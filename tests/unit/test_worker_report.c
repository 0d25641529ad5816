/* Unit tests of the worker's report (worker/worker_report.c): the JSON
 * `codefleet doctor` reads must say what the worker serves, honestly (a
 * compiled language without a toolchain on this host is not listed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cf_backend.h"
#include "cf_schema.h"
#include "cf_util.h"
#include "worker_report_int.h"

static bool has_string(json_t *arr, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return true;
    }
    return false;
}

static void test_report_fields(void **state)
{
    (void)state;
    char root[] = "/tmp/cf-report-XXXXXX";
    assert_non_null(mkdtemp(root));
    cf_backend_config cfg = {.work_root = root, .python_path = "/usr/bin/python3", .node_path = "/nonexistent/node",
                             .shell_path = "/bin/sh", .slots = 1,
                             .compiled_languages = 1u << CF_LANG_C | 1u << CF_LANG_RUST};
    cf_backend_set *set = NULL;
    cf_error err = {0};
    assert_int_equal(cf_backend_set_new("process", &cfg, &set, &err), 0);
    const char *topics[] = {"codefleet.requests", "codefleet.requests.tenant-a"};
    cf_worker_report_info info = {
        .worker_id = "w1",
        .client_id = "codefleet-worker-w1",
        .group = "codefleet",
        .started_at_ms = 1700000000000,
        .slots = 4,
        .request_topics = topics,
        .n_request_topics = 2,
        .result_topic = "codefleet.results",
        .max_output_bytes = 4 << 20,
        .largest_result_bytes = 13 << 20,
        .redis = 1,
        .backends = set,
        .compiled_languages = 1u << CF_LANG_C, /* rust: no toolchain on this host */
    };
    char *s = cf_worker_report_json(&info);
    assert_non_null(s);
    assert_true(strlen(s) < CF_WORKER_REPORT_MAX_BYTES);
    json_error_t je;
    json_t *o = json_loads(s, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(o, "schema")), CF_WORKER_REPORT_SCHEMA);
    assert_string_equal(json_string_value(json_object_get(o, "worker_id")), "w1");
    assert_string_equal(json_string_value(json_object_get(o, "client_id")), "codefleet-worker-w1");
    assert_string_equal(json_string_value(json_object_get(o, "group")), "codefleet");
    assert_int_equal(json_integer_value(json_object_get(o, "pid")), getpid());
    assert_int_equal(json_integer_value(json_object_get(o, "slots")), 4);
    assert_int_equal(json_integer_value(json_object_get(o, "largest_result_bytes")), 13 << 20);
    assert_true(json_is_true(json_object_get(o, "redis")));
    assert_true(has_string(json_object_get(o, "request_topics"), "codefleet.requests.tenant-a"));
    json_t *b = json_array_get(json_object_get(o, "backends"), 0);
    assert_string_equal(json_string_value(json_object_get(b, "name")), "process");
    assert_string_equal(json_string_value(json_object_get(b, "isolation")), "host_local");
    assert_true(json_is_true(json_object_get(b, "default")));
    json_t *langs = json_object_get(b, "languages");
    assert_true(has_string(langs, "shell"));
    assert_true(has_string(langs, "python"));
    assert_false(has_string(langs, "javascript")); /* node configured but missing */
    assert_true(has_string(langs, "c"));
    assert_false(has_string(langs, "rust"));
    assert_true(has_string(json_object_get(b, "controls"), "timeout"));
    assert_true(has_string(json_object_get(b, "controls"), "env_allow"));
    assert_false(has_string(json_object_get(b, "controls"), "network=disabled")); /* host_local */
    assert_true(has_string(json_object_get(o, "languages"), "c"));
    assert_null(json_object_get(o, "load")); /* none given */
    json_decref(o);
    free(s);
    /* The periodic report carries the worker's load (codefleet top). */
    cf_worker_load load = {.at_ms = 1700000001000, .busy = 3, .held = 7, .paused = true, .received = 12,
                           .answered = 10, .rejected = 2, .dead_lettered = 1, .retries = 5};
    const char *stalled[] = {"req[1]", "req[4]"};
    load.stalled = stalled;
    load.n_stalled = 2;
    load.stalls = 3;
    info.load = &load;
    s = cf_worker_report_json(&info);
    o = json_loads(s, JSON_REJECT_DUPLICATES, &je);
    json_t *l = json_object_get(o, "load");
    assert_non_null(l);
    assert_int_equal(json_integer_value(json_object_get(l, "at_ms")), 1700000001000);
    assert_int_equal(json_integer_value(json_object_get(l, "busy")), 3);
    assert_int_equal(json_integer_value(json_object_get(l, "held")), 7);
    assert_true(json_is_true(json_object_get(l, "paused")));
    assert_true(json_is_false(json_object_get(l, "draining")));
    assert_int_equal(json_integer_value(json_object_get(l, "answered")), 10);
    assert_int_equal(json_integer_value(json_object_get(l, "dead_lettered")), 1);
    assert_int_equal(json_integer_value(json_object_get(l, "retries")), 5);
    /* The partition guard's picture (issue 28). */
    json_t *st = json_object_get(l, "stalled");
    assert_int_equal(json_array_size(st), 2);
    assert_string_equal(json_string_value(json_array_get(st, 1)), "req[4]");
    assert_int_equal(json_integer_value(json_object_get(l, "stalls")), 3);
    json_decref(o);
    free(s);
    cf_backend_set_destroy(set);
    assert_int_equal(rmdir(root), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
