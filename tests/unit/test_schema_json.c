/* Unit tests of the JSON form of schema v1 (cf_schema_json.h) and the
 * small base64 codec behind it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema.h"
#include "cf_schema_int.h"
#include "cf_schema_json.h"

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j)
        fail_msg("bad test JSON: %s", jerr.text);
    return j;
}

static void expect_req_json_error(const char *text, const char *msg)
{
    json_t *j = parse(text);
    cf_request r;
    cf_error err = {0};
    if (cf_request_from_json(j, &r, &err) == 0)
        fail_msg("%s: accepted", text);
    if (!strstr(err.msg, msg))
        fail_msg("%s: error \"%s\" lacks \"%s\"", text, err.msg, msg);
    assert_null(r.id);
    json_decref(j);
}

static void test_base64(void **state)
{
    /* RFC 4648 section 10 vectors */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        size_t n;
        char *e = cf_base64_encode((const uint8_t *)plain[i], strlen(plain[i]), &n);
        assert_string_equal(e, coded[i]);
        assert_int_equal(n, strlen(coded[i]));
        free(e);
        cf_bytes b = {0};
        cf_error err = {0};
        assert_int_equal(cf_base64_decode(coded[i], strlen(coded[i]), 100, &b, &err), 0);
        assert_int_equal(b.len, strlen(plain[i]));
        assert_memory_equal(b.data, plain[i], b.len);
        free(b.data);
    }
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    char *e = cf_base64_encode(all, sizeof(all), NULL);
    cf_bytes b = {0};
    cf_error err = {0};
    assert_int_equal(cf_base64_decode(e, strlen(e), 256, &b, &err), 0);
    assert_memory_equal(b.data, all, 256);
    free(b.data);
    b.data = NULL;
    assert_int_equal(cf_base64_decode(e, strlen(e), 255, &b, &err), -1); /* cap */
    assert_int_equal(err.code, CF_E_LIMIT);
    free(e);
    static const char *const bad[] = {"Zg=", "Z===", "Zm9v!A==", "Zg==Zg==", "=Zg=", "Zm 9v"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        b.data = NULL;
        if (cf_base64_decode(bad[i], strlen(bad[i]), 100, &b, &err) == 0)
            fail_msg("accepted bad base64 \"%s\"", bad[i]);
        assert_null(b.data);
    }
}

static void test_request_json_roundtrip(void **state)
{
    json_t *j = parse("{\"id\": \"j-1\", \"language\": \"shell\", \"code\": \"echo hi\","
                      " \"stdin\": {\"base64\": \"AP8=\"},"
                      " \"input\": {\"list\": [1, -2, 2.5, true, null, \"s\"], \"deep\": {\"k\": {}}},"
                      " \"env\": {\"A\": \"1\"}, \"files\": {\"a.txt\": \"hello\", \"b.bin\": {\"base64\": \"/wA=\"}},"
                      " \"policy\": {\"network\": \"disabled\", \"filesystem\": {\"mode\": \"workspace_rw\"},"
                      "  \"env_allow\": [], \"timeout_us\": 1000000, \"memory_bytes\": 1048576},"
                      " \"deadline_us\": 1767225600000000, \"trace\": {\"traceparent\": \"00-ab-cd-01\"},"
                      " \"unknown_field\": {\"ignored\": [1, 2]}}");
    cf_request r;
    cf_error err = {0};
    if (cf_request_from_json(j, &r, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(r.id, "j-1");
    assert_int_equal(r.language, CF_LANG_SHELL);
    assert_int_equal(r.stdin_data.len, 2);
    assert_memory_equal(r.stdin_data.data, "\x00\xff", 2);
    assert_int_equal(r.n_files, 2);
    assert_memory_equal(r.files[1].content.data, "\xff\x00", 2);
    assert_int_equal(r.policy.network, CF_NET_DISABLED);
    assert_int_equal(r.policy.fs_mode, CF_FS_WORKSPACE_RW);
    assert_true(r.policy.env_allow_set);
    assert_int_equal(r.policy.n_env_allow, 0);
    assert_int_equal(r.policy.timeout_us, 1000000);
    assert_int_equal(r.deadline_us, 1767225600000000);
    assert_true(r.input.len > 0);
    assert_int_equal(cf_msgpack_validate(r.input.data, r.input.len, NULL, &err), 0);

    /* JSON -> struct -> msgpack -> struct -> JSON gives the same JSON */
    cf_bytes wire;
    assert_int_equal(cf_request_encode(&r, &wire, &err), 0);
    cf_request back;
    assert_int_equal(cf_request_decode(wire.data, wire.len, NULL, &back, &err), 0);
    json_t *out = cf_request_to_json(&back);
    assert_non_null(out);
    /* the output adds "v" and drops the unknown field */
    json_object_del(j, "unknown_field");
    json_object_set_new(j, "v", json_integer(1));
    if (!json_equal(out, j)) {
        char *a = json_dumps(out, JSON_SORT_KEYS), *b = json_dumps(j, JSON_SORT_KEYS);
        fail_msg("JSON differs:\n%s\n%s", a, b);
    }
    json_decref(out);
    json_decref(j);
    free(wire.data);
    cf_request_clear(&back);
    cf_request_clear(&r);
}

static void test_request_json_errors(void **state)
{
    expect_req_json_error("[]", "expected a JSON object");
    expect_req_json_error("{\"v\": 2, \"id\": \"a\", \"language\": \"shell\", \"code\": \"\"}",
                          "unsupported schema version 2");
    expect_req_json_error("{\"v\": \"1\", \"id\": \"a\"}", "v: expected integer");
    expect_req_json_error("{\"language\": \"shell\", \"code\": \"\"}", "missing required field \"id\"");
    expect_req_json_error("{\"id\": \"a b\", \"language\": \"shell\", \"code\": \"\"}", "id: must be");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"cobol\", \"code\": \"\"}", "language: unknown value");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\"}", "code: required");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"command\", \"argv\": []}", "argv: required");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"command\", \"argv\": [1]}", "argv[0]: expected string");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": 5}",
                          "code: expected string or {\"base64\": string}");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": {\"base64\": \"!!!!\"}}",
                          "code: invalid base64");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\", \"policy\": {\"timeout_us\": 1.5}}",
                          "policy.timeout_us: expected non-negative integer");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\", \"policy\": {\"cpu_time_us\": -1}}",
                          "policy.cpu_time_us: expected non-negative integer");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\", \"deadline_us\": \"soon\"}",
                          "deadline_us: expected non-negative integer");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\", \"policy\": {\"network\": \"on\"}}",
                          "policy.network: unknown value");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\","
                          " \"policy\": {\"filesystem\": {\"mode\": \"all\"}}}",
                          "policy.filesystem.mode: unknown value");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\", \"env\": {\"A\": 1}}",
                          "env[0]: expected string");
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\", \"input\": 1,"
                          " \"input_msgpack\": {\"base64\": \"wA==\"}}",
                          "give either");
    /* raw msgpack input must itself be one valid value */
    expect_req_json_error("{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\","
                          " \"input_msgpack\": {\"base64\": \"kgE=\"}}",
                          "input");
    /* JSON input nested deeper than the msgpack limits */
    char deep[512];
    size_t o = 0;
    o += (size_t)snprintf(deep + o, sizeof(deep) - o, "{\"id\": \"a\", \"language\": \"shell\", \"code\": \"\", \"input\": ");
    for (int i = 0; i < 40; i++)
        deep[o++] = '[';
    for (int i = 0; i < 40; i++)
        deep[o++] = ']';
    snprintf(deep + o, sizeof(deep) - o, "}");
    expect_req_json_error(deep, "nesting deeper");
}

static void test_json_v_optional_and_null_absent(void **state)
{
    json_t *j = parse("{\"id\": \"a\", \"language\": \"python\", \"code\": \"pass\", \"backend\": null,"
                      " \"input\": null}");
    cf_request r;
    cf_error err = {0};
    assert_int_equal(cf_request_from_json(j, &r, &err), 0);
    assert_null(r.backend);
    /* input null is a value (msgpack nil), not absence */
    assert_int_equal(r.input.len, 1);
    assert_int_equal(r.input.data[0], 0xc0);
    cf_request_clear(&r);
    json_decref(j);
}

static void test_result_json(void **state)
{
    cf_result res;
    memset(&res, 0, sizeof(res));
    res.id = strdup("r-1");
    res.status = CF_STATUS_TIMEOUT;
    res.has_exit_code = true;
    res.exit_code = -1;
    assert_int_equal(cf_bytes_set(&res.stdout_data, "ok\n", 3), 0);
    assert_int_equal(cf_bytes_set(&res.stderr_data, "\xff\xfe", 2), 0);
    /* output with an ext value has no JSON form: travels as raw msgpack */
    assert_int_equal(cf_bytes_set(&res.output, "\xd4\x05\x01", 3), 0);
    res.wall_time_us = 2000000;
    res.meta.attempt = 1;
    res.meta.worker = strdup("w");
    assert_int_equal(cf_result_set_reason(&res, "wall-clock limit of %d us", 2000000), 0);

    json_t *j = cf_result_to_json(&res);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "timeout");
    assert_string_equal(json_string_value(json_object_get(j, "stdout")), "ok\n");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "stderr"), "base64")), "//4=");
    assert_null(json_object_get(j, "output"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "output_msgpack"), "base64")), "1AUB");
    assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), -1);
    assert_true(json_is_integer(json_object_get(j, "wall_time_us")));

    cf_result back;
    cf_error err = {0};
    if (cf_result_from_json(j, &back, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(back.id, "r-1");
    assert_int_equal(back.status, CF_STATUS_TIMEOUT);
    assert_true(back.has_exit_code);
    assert_int_equal(back.exit_code, -1);
    assert_int_equal(back.output.len, 3);
    assert_memory_equal(back.output.data, "\xd4\x05\x01", 3);
    assert_memory_equal(back.stderr_data.data, "\xff\xfe", 2);
    assert_string_equal(back.reason, "wall-clock limit of 2000000 us");
    assert_string_equal(back.meta.worker, "w");
    cf_result_clear(&back);
    json_decref(j);
    cf_result_clear(&res);

    /* errors */
    static const char *const bad[][2] = {
        {"{\"id\": \"r\"}", "missing required field \"status\""},
        {"{\"id\": \"r\", \"status\": \"great\"}", "status: unknown value"},
        {"{\"id\": \"r\", \"status\": \"failed\", \"exit_code\": 4294967296}", "exit_code: expected 32-bit"},
        {"{\"id\": \"r\", \"status\": \"failed\", \"stdout_truncated\": 1}", "stdout_truncated: expected bool"},
        {"{\"id\": \"r\", \"status\": \"failed\", \"diagnostics\": [{\"line\": 1}]}", "missing required field \"message\""},
        {"{\"id\": \"r\", \"status\": \"failed\", \"metadata\": {\"attempt\": -1}}", "metadata.attempt: expected non-negative"},
        {"{\"status\": \"failed\"}", "missing required field \"id\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *b = parse(bad[i][0]);
        if (cf_result_from_json(b, &back, &err) == 0)
            fail_msg("%s: accepted", bad[i][0]);
        if (!strstr(err.msg, bad[i][1]))
            fail_msg("%s: error \"%s\" lacks \"%s\"", bad[i][0], err.msg, bad[i][1]);
        json_decref(b);
    }
}

static void test_value_conversions(void **state)
{
    cf_error err = {0};
    /* msgpack -> JSON */
    json_t *j = cf_msgpack_to_json("\x83\xa1" "a\x01\xa1" "b\xc4\x02\x00\xff\xa1" "c\x92\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\xc2",
                                   23, &err);
    if (!j)
        fail_msg("%s", err.msg);
    json_t *want = parse("{\"a\": 1, \"b\": {\"base64\": \"AP8=\"}, \"c\": [1.5, false]}");
    assert_true(json_equal(j, want));
    json_decref(j);
    json_decref(want);
    assert_null(cf_msgpack_to_json("\x81\x01\x02", 3, &err)); /* integer key */
    assert_non_null(strstr(err.msg, "not a string"));
    assert_null(cf_msgpack_to_json("\xd4\x01\x00", 3, &err)); /* ext */
    assert_null(cf_msgpack_to_json("\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9, &err)); /* > int64 */
    assert_null(cf_msgpack_to_json("\xa2\xc3\x28", 3, &err));                         /* bad UTF-8 str */
    assert_null(cf_msgpack_to_json("\x92\x01", 2, &err));                             /* truncated */
    assert_null(cf_msgpack_to_json("\xdf\x10\x00\x00\x00", 5, &err));                 /* lying count */

    /* JSON -> msgpack: smallest encodings, insertion order */
    j = parse("{\"k\": [0, -1, 128, \"x\", null, true]}");
    cf_bytes b;
    assert_int_equal(cf_json_to_msgpack(j, &b, &err), 0);
    static const uint8_t mp[] = {0x81, 0xa1, 'k', 0x96, 0x00, 0xff, 0xcc, 0x80, 0xa1, 'x', 0xc0, 0xc3};
    assert_int_equal(b.len, sizeof(mp));
    assert_memory_equal(b.data, mp, sizeof(mp));
    json_t *back = cf_msgpack_to_json(b.data, b.len, &err);
    assert_true(json_equal(back, j));
    json_decref(back);
    free(b.data);
    json_decref(j);
    assert_int_equal(cf_json_to_msgpack(NULL, &b, &err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_request_json_roundtrip),
        cmocka_unit_test(test_request_json_errors),
        cmocka_unit_test(test_json_v_optional_and_null_absent),
        cmocka_unit_test(test_result_json),
        cmocka_unit_test(test_value_conversions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
