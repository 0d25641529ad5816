/* Unit tests for cf_util and cf_error: number parsing edge cases, the
 * capped buffer, error wrapping, bounded copies. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_error.h"
#include "cf_util.h"

static void test_parse_i64(void **state)
{
    (void)state;
    cf_error err;
    int64_t v = 7;
    assert_int_equal(cf_parse_i64("0", 0, 10, &v, "n", &err), 0);
    assert_int_equal(v, 0);
    assert_int_equal(cf_parse_i64("-5", -10, 10, &v, "n", &err), 0);
    assert_int_equal(v, -5);
    assert_int_equal(cf_parse_i64("+7", 0, 10, &v, "n", &err), 0);
    assert_int_equal(v, 7);
    assert_int_equal(cf_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v, "n", &err), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(cf_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v, "n", &err), 0);
    assert_true(v == INT64_MIN);
    /* Bounds are inclusive. */
    assert_int_equal(cf_parse_i64("10", 0, 10, &v, "n", &err), 0);
    assert_int_equal(cf_parse_i64("-10", -10, 10, &v, "n", &err), 0);

    v = 42;
    assert_int_equal(cf_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v, "n", &err), -1);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_int_equal(cf_parse_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v, "n", &err), -1);
    assert_int_equal(cf_parse_i64("", 0, 10, &v, "count", &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_non_null(strstr(err.msg, "count: empty"));
    assert_int_equal(cf_parse_i64(NULL, 0, 10, &v, "n", &err), -1);
    assert_int_equal(cf_parse_i64("12abc", 0, 100, &v, "n", &err), -1);
    assert_int_equal(cf_parse_i64("abc", 0, 100, &v, "n", &err), -1);
    assert_int_equal(cf_parse_i64("1.5", 0, 100, &v, "n", &err), -1);
    assert_int_equal(cf_parse_i64("5 ", 0, 100, &v, "n", &err), -1);
    assert_int_equal(cf_parse_i64("-", 0, 100, &v, "n", &err), -1);
    assert_int_equal(cf_parse_i64("11", 0, 10, &v, "slots", &err), -1);
    assert_string_equal(err.msg, "slots: 11 is outside [0, 10]");
    assert_int_equal(cf_parse_i64("-1", 0, 10, &v, "n", &err), -1);
    assert_int_equal(v, 42); /* untouched on failure */
    /* A NULL error is allowed. */
    assert_int_equal(cf_parse_i64("x", 0, 10, &v, "n", NULL), -1);
}

static void test_parse_duration(void **state)
{
    (void)state;
    cf_error err;
    int64_t v = 0;
    struct {
        const char *text;
        int64_t us;
    } ok[] = {
        {"250ms", 250000}, {"5s", 5000000},   {"2m", 120000000}, {"2min", 120000000}, {"1h", 3600000000LL},
        {"100us", 100},    {"5", 5000000},    {"0", 0},          {"1.5s", 1500000},   {"0.5ms", 500},
        {"10 ms", 10000},  {"0us", 0},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (cf_parse_duration_us(ok[i].text, &v, "d", &err) < 0)
            fail_msg("'%s' rejected: %s", ok[i].text, err.msg);
        if (v != ok[i].us)
            fail_msg("'%s' -> %lld, want %lld", ok[i].text, (long long)v, (long long)ok[i].us);
    }
    const char *bad[] = {"", "ms", "-1s", "5x", "5 parsecs", "1e30h", "nan", "inf", "5S", "s5", "5ns"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cf_parse_duration_us(bad[i], &v, "timeout", &err) == 0)
            fail_msg("'%s' accepted as %lld", bad[i], (long long)v);
        assert_int_equal(err.code, CF_E_INVALID);
        assert_non_null(strstr(err.msg, "timeout"));
    }
}

static void test_parse_size(void **state)
{
    (void)state;
    cf_error err;
    int64_t v = 0;
    struct {
        const char *text;
        int64_t bytes;
    } ok[] = {
        {"512", 512}, {"0", 0}, {"1k", 1024}, {"1KiB", 1024}, {"1kb", 1024}, {"64MiB", 64LL << 20},
        {"10M", 10LL << 20}, {"2gb", 2LL << 30}, {"1G", 1LL << 30}, {"1.5KiB", 1536}, {"7B", 7},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (cf_parse_size(ok[i].text, &v, "s", &err) < 0)
            fail_msg("'%s' rejected: %s", ok[i].text, err.msg);
        if (v != ok[i].bytes)
            fail_msg("'%s' -> %lld, want %lld", ok[i].text, (long long)v, (long long)ok[i].bytes);
    }
    const char *bad[] = {"", "-1", "1T", "MiB", "1 parsec", "1e30G", "nan", "x1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cf_parse_size(bad[i], &v, "cap", &err) == 0)
            fail_msg("'%s' accepted as %lld", bad[i], (long long)v);
        assert_int_equal(err.code, CF_E_INVALID);
        assert_non_null(strstr(err.msg, "cap"));
    }
}

static void test_parse_bool(void **state)
{
    (void)state;
    cf_error err;
    const char *yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
    const char *no[] = {"0", "false", "False", "no", "NO", "off", "Off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        bool b = false;
        assert_int_equal(cf_parse_bool(yes[i], &b, "b", &err), 0);
        assert_true(b);
        b = true;
        assert_int_equal(cf_parse_bool(no[i], &b, "b", &err), 0);
        assert_false(b);
    }
    const char *bad[] = {"", "maybe", "2", "t", "yess", " true", "true "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bool b = true;
        if (cf_parse_bool(bad[i], &b, "verbose", &err) == 0)
            fail_msg("'%s' accepted", bad[i]);
        assert_true(b);
        assert_non_null(strstr(err.msg, "verbose"));
    }
}

static void test_format_duration(void **state)
{
    (void)state;
    char buf[32];
    cf_format_duration(830, buf, sizeof(buf));
    assert_string_equal(buf, "830us");
    cf_format_duration(1250000, buf, sizeof(buf));
    assert_string_equal(buf, "1.25s");
    cf_format_duration(2500, buf, sizeof(buf));
    assert_string_equal(buf, "2.50ms");
    char tiny[4];
    cf_format_duration(123456, tiny, sizeof(tiny));
    assert_int_equal(strlen(tiny), 3); /* truncated, still terminated */
}

static void test_buf_caps(void **state)
{
    (void)state;
    cf_error err;
    cf_buf b;
    cf_buf_init(&b, 10);
    assert_int_equal(cf_buf_append(&b, "abcdef", 6, &err), 0);
    assert_int_equal(b.len, 6);
    /* All or nothing: 5 more would pass the cap. */
    assert_int_equal(cf_buf_append(&b, "ghijk", 5, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_int_equal(b.len, 6);
    /* The capped variant stores what fits. */
    assert_int_equal(cf_buf_append_capped(&b, "ghijk", 5), 4);
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.data, "abcdefghij", 10);
    assert_int_equal(cf_buf_append_capped(&b, "z", 1), 0);
    assert_int_equal(cf_buf_append(&b, "", 0, &err), 0);
    assert_int_equal(cf_buf_append(&b, "z", 1, &err), -1);

    size_t len = 0;
    uint8_t *data = cf_buf_steal(&b, &len);
    assert_int_equal(len, 10);
    assert_memory_equal(data, "abcdefghij", 10);
    free(data);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    /* The cap survives a steal. */
    assert_int_equal(cf_buf_append_capped(&b, "0123456789AB", 12), 10);
    cf_buf_free(&b);
    assert_null(b.data);
    cf_buf_free(NULL);

    /* cap 0: unlimited; growth across many reallocations keeps the bytes. */
    cf_buf_init(&b, 0);
    char chunk[1000];
    for (int i = 0; i < 100; i++) {
        memset(chunk, 'a' + (i % 26), sizeof(chunk));
        assert_int_equal(cf_buf_append(&b, chunk, sizeof(chunk), &err), 0);
    }
    assert_int_equal(b.len, 100000);
    assert_int_equal(b.data[0], 'a');
    assert_int_equal(b.data[99999], 'a' + (99 % 26));
    cf_buf_free(&b);
}

static void test_error_wrap(void **state)
{
    (void)state;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(err.code, CF_OK);
    assert_string_equal(err.msg, "");
    assert_int_equal(cf_error_set(&err, CF_E_KAFKA, "broker %d down", 3), -1);
    cf_error_set_retriable(&err, true);
    assert_int_equal(cf_error_wrap(&err, "producing to %s", "t1"), -1);
    assert_int_equal(cf_error_wrap(&err, "request %s", "r9"), -1);
    assert_string_equal(err.msg, "request r9: producing to t1: broker 3 down");
    assert_int_equal(err.code, CF_E_KAFKA); /* code and class survive wrapping */
    assert_true(err.retriable);

    /* A message at the size limit stays NUL-terminated when wrapped. */
    char big[CF_ERROR_MSG_MAX + 100];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cf_error_set(&err, CF_E_INVALID, "%s", big);
    assert_int_equal(strlen(err.msg), CF_ERROR_MSG_MAX - 1);
    cf_error_wrap(&err, "ctx");
    assert_int_equal(strlen(err.msg), CF_ERROR_MSG_MAX - 1);
    assert_memory_equal(err.msg, "ctx: xx", 7);

    /* NULL errors are allowed everywhere. */
    assert_int_equal(cf_error_set(NULL, CF_E_INVALID, "x"), -1);
    assert_int_equal(cf_error_wrap(NULL, "x"), -1);
    assert_int_equal(cf_error_set_errno(NULL, CF_E_SYSTEM, EIO, "x"), -1);
    assert_int_equal(cf_error_set_retriable(NULL, true), -1);
    cf_error_clear(NULL);
}

static void test_error_errno(void **state)
{
    (void)state;
    cf_error err;
    assert_int_equal(cf_error_set_errno(&err, CF_E_SYSTEM, ENOENT, "open %s", "/x"), -1);
    assert_int_equal(err.code, CF_E_SYSTEM);
    assert_int_equal(err.sys_errno, ENOENT);
    assert_false(err.retriable);
    char want[128];
    snprintf(want, sizeof(want), "open /x: %s", strerror(ENOENT));
    assert_string_equal(err.msg, want);
    cf_error_set_errno(&err, CF_E_SYSTEM, EAGAIN, "fork");
    assert_true(err.retriable);
    cf_error_set_errno(&err, CF_E_SYSTEM, EMFILE, "pipe");
    assert_true(err.retriable);
    /* A later cf_error_set resets errno and class. */
    cf_error_set(&err, CF_E_INVALID, "bad");
    assert_int_equal(err.sys_errno, 0);
    assert_false(err.retriable);

    assert_string_equal(cf_errcode_name(CF_E_INVALID), "invalid");
    assert_string_equal(cf_errcode_name(CF_E_SANDBOX), "sandbox");
    assert_string_equal(cf_errcode_name(CF_OK), "ok");
    assert_string_equal(cf_errcode_name((cf_errcode)999), "unknown");
    for (int c = 0; c < CF_E__COUNT; c++)
        assert_non_null(cf_errcode_name((cf_errcode)c));
}

static void test_strlcpy(void **state)
{
    (void)state;
    char buf[6];
    memset(buf, '#', sizeof(buf));
    assert_int_equal(cf_strlcpy(buf, "hello world", sizeof(buf)), 11); /* returns strlen(src) */
    assert_string_equal(buf, "hello");
    assert_int_equal(cf_strlcpy(buf, "hello", sizeof(buf)), 5); /* exact fit */
    assert_string_equal(buf, "hello");
    assert_int_equal(cf_strlcpy(buf, "", sizeof(buf)), 0);
    assert_string_equal(buf, "");
    memset(buf, '#', sizeof(buf));
    assert_int_equal(cf_strlcpy(buf, "abc", 0), 3); /* cap 0 writes nothing */
    assert_int_equal(buf[0], '#');
    assert_int_equal(cf_strlcpy(buf, "abc", 1), 3);
    assert_string_equal(buf, "");
}

static void test_strdup_and_clocks(void **state)
{
    (void)state;
    assert_null(cf_strdup(NULL));
    char *s = cf_strdup("abc");
    assert_string_equal(s, "abc");
    free(s);
    s = cf_strndup("abcdef", 3);
    assert_string_equal(s, "abc");
    free(s);
    s = cf_strndup("ab\0cd", 5); /* copies n bytes, embedded NULs included */
    assert_memory_equal(s, "ab\0cd", 6);
    free(s);

    /* Epoch microseconds: after 2020-01-01 and before 2100. */
    int64_t now = cf_now_us();
    assert_true(now > 1577836800LL * 1000000);
    assert_true(now < 4102444800LL * 1000000);
    int64_t a = cf_mono_us(), b = cf_mono_us();
    assert_true(b >= a);
}

static void test_cleanup_steal(void **state)
{
    (void)state;
    char *kept;
    {
        cf_autofree char *p = cf_strdup("owned");
        kept = cf_steal_ptr(&p);
        assert_null(p); /* cleanup then frees NULL */
    }
    assert_string_equal(kept, "owned");
    free(kept);
    int fd_out;
    {
        cf_autoclose int fd = 5;
        fd_out = cf_steal_fd(&fd);
        assert_int_equal(fd, -1);
    }
    assert_int_equal(fd_out, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_i64),      cmocka_unit_test(test_parse_duration),
        cmocka_unit_test(test_parse_size),     cmocka_unit_test(test_parse_bool),
        cmocka_unit_test(test_format_duration), cmocka_unit_test(test_buf_caps),
        cmocka_unit_test(test_error_wrap),     cmocka_unit_test(test_error_errno),
        cmocka_unit_test(test_strlcpy),        cmocka_unit_test(test_strdup_and_clocks),
        cmocka_unit_test(test_cleanup_steal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
