/* Unit tests of common/cf_util.c's text sanitizer: what the CLI and doctor
 * print from results and worker reports must not drive a terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cf_util.h"

static const char *clean(const char *s, bool keep_newlines)
{
    static char buf[256];
    cf_sanitize_text(s, strlen(s), keep_newlines, buf, sizeof(buf));
    return buf;
}

static void test_sanitize_controls(void **state)
{
    (void)state;
    assert_string_equal(clean("plain text", false), "plain text");
    assert_string_equal(clean("a\x1b[31mred", false), "a?[31mred");
    assert_string_equal(clean("line\r\nnext", false), "line??next");
    assert_string_equal(clean("line\nnext", true), "line\nnext");
    assert_string_equal(clean("del\x7f", false), "del?");
    /* C1 CSI (U+009B) and a bidi override (U+202E), spelled in UTF-8. */
    assert_string_equal(clean("x\xc2\x9b" "31m", false), "x?31m");
    assert_string_equal(clean("abc\xe2\x80\xae" "cba", false), "abc?cba");
    assert_string_equal(clean("\xe2\x81\xa6isolate", false), "?isolate");
    /* Ordinary non-ASCII stays. */
    assert_string_equal(clean("caf\xc3\xa9 \xe2\x82\xac", false), "caf\xc3\xa9 \xe2\x82\xac");
    /* Broken UTF-8 becomes '?'. */
    assert_string_equal(clean("bad\xc3(", false), "bad?(");
    /* Not UTF-8 at all, though shaped like it: overlong forms (C0 AF is
     * '/', C0 9B a CSI), a surrogate, past U+10FFFF, F8+ leads. */
    assert_string_equal(clean("a\xc0\xaf" "b", false), "a??b");
    assert_string_equal(clean("\xc0\x9b" "31m", false), "??31m");
    assert_string_equal(clean("\xe0\x80\xaf", false), "???");
    assert_string_equal(clean("s\xed\xa0\x80" "e", false), "s???e");
    assert_string_equal(clean("\xf4\x90\x80\x80", false), "????");
    assert_string_equal(clean("\xf8\x88\x80\x80\x80", false), "?????");
    /* The highest code point and a 4-byte emoji stay. */
    assert_string_equal(clean("\xf4\x8f\xbf\xbf \xf0\x9f\x98\x80", false), "\xf4\x8f\xbf\xbf \xf0\x9f\x98\x80");
}

static void test_utf8_incomplete_tail(void **state)
{
    (void)state;
    assert_int_equal(cf_utf8_incomplete_tail((const uint8_t *)"abc", 3), 0);
    assert_int_equal(cf_utf8_incomplete_tail((const uint8_t *)"a\xe2\x82", 3), 2);  /* euro sign, cut */
    assert_int_equal(cf_utf8_incomplete_tail((const uint8_t *)"a\xe2\x82\xac", 4), 0);
    assert_int_equal(cf_utf8_incomplete_tail((const uint8_t *)"\xf0", 1), 1);
    assert_int_equal(cf_utf8_incomplete_tail((const uint8_t *)"\xf0\x9f\x98", 3), 3);
    assert_int_equal(cf_utf8_incomplete_tail((const uint8_t *)"\xc3", 1), 1);
    assert_int_equal(cf_utf8_incomplete_tail((const uint8_t *)"\x80\x80\x80\x80", 4), 0); /* no lead: nothing to wait for */
    assert_int_equal(cf_utf8_incomplete_tail(NULL, 0), 0);
}

static void test_sanitize_bounds(void **state)
{
    (void)state;
    char buf[4];
    assert_int_equal(cf_sanitize_text("abcdef", 6, false, buf, sizeof(buf)), 3);
    assert_string_equal(buf, "abc");
    /* A multi-byte character that does not fit is left out whole. */
    cf_sanitize_text("ab\xe2\x82\xac", 5, false, buf, sizeof(buf));
    assert_string_equal(buf, "ab");
    assert_int_equal(cf_sanitize_text("x", 1, false, buf, 0), 0);
}

/* The one comma-list splitter: blanks trimmed, empty items kept, a NULL
 * list has none. */
static void test_list_items(void **state)
{
    (void)state;
    const char *cur = " sandbox ,process,\twasm\t,,";
    const char *want[] = {"sandbox", "process", "wasm", "", ""};
    cf_list_item it;
    size_t n = 0;
    while (cf_list_next(&cur, &it)) {
        assert_true(n < 5);
        assert_int_equal(it.len, strlen(want[n]));
        assert_memory_equal(it.s, want[n], it.len);
        n++;
    }
    assert_int_equal(n, 5);
    assert_null(cur);
    cur = NULL;
    assert_false(cf_list_next(&cur, &it));
    cur = "";
    assert_true(cf_list_next(&cur, &it));
    assert_int_equal(it.len, 0);
    assert_false(cf_list_next(&cur, &it));
}

/* Sizes, times and spans as a person reads them (issue 33: raw
 * microseconds and byte counts in workspace info). */
static void test_human_formats(void **state)
{
    (void)state;
    char b[64];
    cf_format_size(512, b, sizeof(b));
    assert_string_equal(b, "512 B");
    cf_format_size(67108864, b, sizeof(b));
    assert_string_equal(b, "64 MiB");
    cf_format_size(67108865, b, sizeof(b)); /* not exact: rounded, so it says so */
    assert_string_equal(b, "64.0 MiB");
    cf_format_time(INT64_C(1796581462123456), b, sizeof(b));
    assert_string_equal(b, "2026-12-06T18:24:22.123Z");
    cf_format_time(0, b, sizeof(b));
    assert_string_equal(b, "-");
    cf_format_span(INT64_C(86400) * 1000000, b, sizeof(b));
    assert_string_equal(b, "1d");
    cf_format_span(INT64_C(5400) * 1000000, b, sizeof(b));
    assert_string_equal(b, "1h 30m");
    cf_format_span(INT64_C(183845) * 1000000, b, sizeof(b)); /* 2d 3h 4m 5s: two largest units */
    assert_string_equal(b, "2d 3h");
    cf_format_span(45 * 1000000, b, sizeof(b));
    assert_string_equal(b, "45s");
    cf_format_span(250000, b, sizeof(b));
    assert_string_equal(b, "250ms");
    cf_format_span(INT64_C(3600) * 1000000 + 5 * 1000000, b, sizeof(b)); /* a zero unit in between is skipped */
    assert_string_equal(b, "1h");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sanitize_controls),
        cmocka_unit_test(test_sanitize_bounds),
        cmocka_unit_test(test_list_items),
        cmocka_unit_test(test_utf8_incomplete_tail),
        cmocka_unit_test(test_human_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
