/* Unit tests of what `codefleet doctor` and `codefleet top` make of the
 * partitions (dispatcher/cli/cf_cli_doctor.c): a worker report's stalled list
 * read as untrusted data, whether a report says its worker has room, and
 * the watch that calls a lag "not moving" across samples.  The broker side
 * (describing the group, reading offsets) is in tests/integration/
 * test_doctor.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cf_cli.h"
#include "worker_report_int.h"

/* JSON_ALLOW_NUL: more than doctor's reader lets through, so the functions
 * are tried on strings with a NUL inside too. */
static json_t *parse(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_ALLOW_NUL, &je);
    if (!j)
        fail_msg("bad test JSON (%s): %s", je.text, text);
    return j;
}

/* The reader takes what the writer (worker/worker_report.c) writes: the
 * same field names, the same "topic[N]" form. */
static void test_stalled_from_the_writer(void **state)
{
    (void)state;
    const char *topics[] = {"codefleet.requests"};
    const char *stalled[] = {"codefleet.requests[1]", "codefleet.requests[4]"};
    cf_worker_load load = {.at_ms = 1700000001000, .busy = 1, .held = 0, .stalled = stalled, .n_stalled = 2,
                           .stalls = 3};
    cf_worker_report_info info = {.worker_id = "w1", .client_id = "codefleet-worker-w1", .group = "codefleet",
                                  .slots = 4, .request_topics = topics, .n_request_topics = 1,
                                  .result_topic = "codefleet.results", .load = &load};
    char *s = cf_worker_report_json(&info);
    assert_non_null(s);
    json_t *rep = parse(s);
    free(s);
    int64_t stalls = 0;
    json_t *got = cf_cli_report_stalled(rep, &stalls);
    assert_non_null(got);
    assert_int_equal(json_array_size(got), 2);
    assert_string_equal(json_string_value(json_array_get(got, 0)), "codefleet.requests[1]");
    assert_string_equal(json_string_value(json_array_get(got, 1)), "codefleet.requests[4]");
    assert_int_equal(stalls, 3);
    json_decref(got);
    assert_true(cf_cli_report_has_room(rep, NULL));
    json_decref(rep);

    /* Nothing stalled: an empty list, not "not reported". */
    load.n_stalled = 0;
    load.stalls = 0;
    load.paused = true;
    s = cf_worker_report_json(&info);
    rep = parse(s);
    free(s);
    got = cf_cli_report_stalled(rep, &stalls);
    assert_non_null(got);
    assert_int_equal(json_array_size(got), 0);
    assert_int_equal(stalls, 0);
    json_decref(got);
    assert_false(cf_cli_report_has_room(rep, NULL)); /* paused */
    json_decref(rep);

    /* One topic paused at its profile's cap, the worker not: no room for
     * that topic's lag, room for the others'. */
    load.paused = false;
    const char *paused_topics[] = {"codefleet.requests.tenant-a"};
    load.paused_topics = paused_topics;
    load.n_paused_topics = 1;
    s = cf_worker_report_json(&info);
    rep = parse(s);
    free(s);
    assert_false(cf_cli_report_has_room(rep, "codefleet.requests.tenant-a"));
    assert_true(cf_cli_report_has_room(rep, "codefleet.requests"));
    json_decref(rep);
}

/* Whoever may write the workers topic writes these: bounded, printable,
 * non-strings ignored. */
static void test_stalled_hostile(void **state)
{
    (void)state;
    int64_t stalls = 0;
    /* No report, no load, no list: not reported (NULL), never a crash. */
    assert_null(cf_cli_report_stalled(NULL, &stalls));
    assert_int_equal(stalls, -1);
    json_t *rep = parse("{\"load\":{\"stalled\":\"t[0]\",\"stalls\":2}}");
    assert_null(cf_cli_report_stalled(rep, &stalls));
    assert_int_equal(stalls, 2);
    json_decref(rep);
    rep = parse("{\"load\":[1,2]}");
    assert_null(cf_cli_report_stalled(rep, NULL));
    json_decref(rep);

    /* Counts out of range or of the wrong type are unknown. */
    static const char *const bad_counts[] = {"-1", "1152921504606846977", "\"3\"", "1.5", "true", "null"};
    for (size_t i = 0; i < sizeof(bad_counts) / sizeof(bad_counts[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "{\"load\":{\"stalled\":[],\"stalls\":%s}}", bad_counts[i]);
        rep = parse(text);
        json_t *got = cf_cli_report_stalled(rep, &stalls);
        assert_int_equal(stalls, -1);
        json_decref(got);
        json_decref(rep);
    }

    /* Escapes, a C1 control, an embedded NUL, non-strings, empty strings,
     * a long name that is not a partition, one that is (kept whole). */
    char longtopic[250];
    memset(longtopic, 'a', 249);
    longtopic[249] = '\0';
    char junk[400];
    memset(junk, 'x', sizeof(junk) - 1);
    junk[sizeof(junk) - 1] = '\0';
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"load\":{\"stalled\":[\"\\u001b[31mred[0]\",7,null,{\"a\":1},[\"t[1]\"],\"\",\"x\\u009by[2]\","
             "\"a\\u0000b[3]\",\"%s\",\"%s[7]\",true]}}",
             junk, longtopic);
    rep = parse(text);
    json_t *got = cf_cli_report_stalled(rep, NULL);
    assert_non_null(got);
    assert_int_equal(json_array_size(got), 5);
    assert_string_equal(json_string_value(json_array_get(got, 0)), "?[31mred[0]");
    assert_string_equal(json_string_value(json_array_get(got, 1)), "x??y[2]"); /* U+009B is 2 bytes */
    assert_string_equal(json_string_value(json_array_get(got, 2)), "a?b[3]");
    const char *cut = json_string_value(json_array_get(got, 3));
    assert_true(strlen(cut) < 100);
    assert_non_null(strstr(cut, "..."));
    char whole[300];
    snprintf(whole, sizeof(whole), "%s[7]", longtopic);
    assert_string_equal(json_string_value(json_array_get(got, 4)), whole);
    size_t i;
    json_t *v;
    json_array_foreach(got, i, v)
    {
        for (const unsigned char *p = (const unsigned char *)json_string_value(v); *p; p++)
            assert_true(*p >= 0x20 && *p < 0x7f);
    }
    json_decref(got);
    json_decref(rep);

    /* At most CF_CLI_STALLED_MAX entries, however many are sent. */
    json_t *list = json_array();
    for (int n = 0; n < 1000; n++) {
        char name[32];
        snprintf(name, sizeof(name), "t[%d]", n);
        json_array_append_new(list, json_string(name));
    }
    rep = json_pack("{s:{s:o}}", "load", "stalled", list);
    got = cf_cli_report_stalled(rep, NULL);
    assert_int_equal(json_array_size(got), CF_CLI_STALLED_MAX);
    assert_string_equal(json_string_value(json_array_get(got, CF_CLI_STALLED_MAX - 1)), "t[15]");
    json_decref(got);
    json_decref(rep);
}

static void test_has_room(void **state)
{
    (void)state;
    static const struct {
        const char *report;
        bool room;
    } cases[] = {
        {"{\"slots\":2,\"load\":{\"busy\":1,\"paused\":false,\"draining\":false}}", true},
        {"{\"slots\":2,\"load\":{\"busy\":0,\"paused\":false,\"draining\":false}}", true},
        {"{\"slots\":2,\"load\":{\"busy\":2,\"paused\":false,\"draining\":false}}", false},  /* full */
        {"{\"slots\":2,\"load\":{\"busy\":3,\"paused\":false,\"draining\":false}}", false},
        {"{\"slots\":2,\"load\":{\"busy\":0,\"paused\":true,\"draining\":false}}", false},   /* paused */
        {"{\"slots\":2,\"load\":{\"busy\":0,\"paused\":false,\"draining\":true}}", false},   /* draining */
        {"{\"slots\":2,\"load\":{\"busy\":0,\"draining\":false}}", false},                   /* does not say */
        {"{\"slots\":2,\"load\":{\"busy\":0,\"paused\":0,\"draining\":false}}", false},
        {"{\"slots\":2,\"load\":{\"paused\":false,\"draining\":false}}", false},             /* busy unknown */
        {"{\"slots\":2,\"load\":{\"busy\":-1,\"paused\":false,\"draining\":false}}", false},
        {"{\"slots\":0,\"load\":{\"busy\":0,\"paused\":false,\"draining\":false}}", false},
        {"{\"slots\":1000000,\"load\":{\"busy\":0,\"paused\":false,\"draining\":false}}", false},
        {"{\"slots\":\"2\",\"load\":{\"busy\":0,\"paused\":false,\"draining\":false}}", false},
        {"{\"slots\":2}", false},                                                           /* no load */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *rep = parse(cases[i].report);
        if (cf_cli_report_has_room(rep, NULL) != cases[i].room)
            fail_msg("has_room(%s) should be %d", cases[i].report, cases[i].room);
        json_decref(rep);
    }
    assert_false(cf_cli_report_has_room(NULL, NULL));
}

/* One sample entry; room: 1 yes, 0 no, -1 unknown (absent). */
static void put(json_t *sample, const char *part, json_int_t committed, json_int_t lag, const char *member,
                const char *owner, int room)
{
    json_t *e = json_pack("{s:I, s:I, s:s}", "committed", committed, "lag", lag, "member", member);
    if (owner)
        json_object_set_new(e, "owner", json_string(owner));
    if (room >= 0)
        json_object_set_new(e, "room", json_boolean(room));
    json_object_set_new(sample, part, e);
}

/* The partitions cf_cli_lag_watch names for sample at now (the sample is
 * consumed), as "part@for_s" joined by spaces into buf. */
static const char *watch(json_t *w, json_t *sample, int64_t now_ms, int64_t min_ms, char *buf, size_t cap)
{
    json_t *out = cf_cli_lag_watch(w, sample, now_ms, min_ms);
    assert_non_null(out);
    buf[0] = '\0';
    size_t len = 0, i;
    json_t *p;
    json_array_foreach(out, i, p)
    {
        int n = snprintf(buf + len, cap - len, "%s%s@%s@%g", i ? " " : "",
                         json_string_value(json_object_get(p, "partition")),
                         json_string_value(json_object_get(p, "owner")),
                         json_real_value(json_object_get(p, "for_s")));
        assert_true(n > 0 && (size_t)n < cap - len);
        len += (size_t)n;
    }
    json_decref(out);
    json_decref(sample);
    return buf;
}

/* top: a lag is "not moving" once its committed offset stood, with lag,
 * under one owner with room, for the threshold; anything that explains it
 * (moved, no lag, no room, another owner) starts the clock again. */
static void test_lag_watch_top(void **state)
{
    (void)state;
    char b[512];
    json_t *w = json_object();
    json_t *s;
#define SAMPLE(c0, l0, m0, r0, c2, l2)                                                                                \
    (s = json_object(), put(s, "t[0]", c0, l0, m0, "w-" m0, r0), put(s, "t[1]", 9, 0, "m1", "w-m1", 1),              \
     put(s, "t[2]", c2, l2, "m1", NULL, 1), s)
    assert_string_equal(watch(w, SAMPLE(5, 3, "m1", 1, 1, 2), 0, 10000, b, sizeof(b)), "");
    assert_int_equal(json_object_size(w), 2); /* t[1] has no lag: not watched */
    assert_string_equal(watch(w, SAMPLE(5, 3, "m1", 1, 1, 2), 9999, 10000, b, sizeof(b)), "");
    assert_string_equal(watch(w, SAMPLE(5, 4, "m1", 1, 1, 2), 10000, 10000, b, sizeof(b)),
                        "t[0]@w-m1@10 t[2]@m1@10"); /* more lag, same offset; no owner name: the member */
    /* t[0] moves: its clock starts again; t[2] stays named. */
    assert_string_equal(watch(w, SAMPLE(6, 4, "m1", 1, 1, 2), 12000, 10000, b, sizeof(b)), "t[2]@m1@12");
    assert_string_equal(watch(w, SAMPLE(6, 4, "m1", 1, 1, 0), 21999, 10000, b, sizeof(b)), "");
    assert_string_equal(watch(w, SAMPLE(6, 4, "m1", 1, 1, 2), 22000, 10000, b, sizeof(b)),
                        "t[0]@w-m1@10"); /* t[2] had no lag at 21999: fresh */
    /* A rebalance: another owner gets its own time. */
    assert_string_equal(watch(w, SAMPLE(6, 4, "m2", 1, 1, 2), 23000, 10000, b, sizeof(b)), "");
    assert_string_equal(watch(w, SAMPLE(6, 4, "m2", 1, 1, 2), 33000, 10000, b, sizeof(b)),
                        "t[0]@w-m2@10 t[2]@m1@11");
    /* The owner says it is full, paused or draining: not counted, and the
     * clock starts again when it has room. */
    assert_string_equal(watch(w, SAMPLE(6, 4, "m2", 0, 1, 2), 34000, 10000, b, sizeof(b)), "t[2]@m1@12");
    assert_string_equal(watch(w, SAMPLE(6, 4, "m2", 1, 1, 2), 35000, 10000, b, sizeof(b)), "t[2]@m1@13");
    assert_string_equal(watch(w, SAMPLE(6, 4, "m2", 1, 1, 2), 45000, 10000, b, sizeof(b)),
                        "t[0]@w-m2@10 t[2]@m1@23");
    /* A partition missing from a sample (revoked, or not read) leaves the
     * watch: the watch never holds more than one sample. */
    s = json_object();
    put(s, "t[0]", 6, 4, "m2", NULL, 1);
    assert_string_equal(watch(w, s, 46000, 10000, b, sizeof(b)), "t[0]@m2@11");
    assert_int_equal(json_object_size(w), 1);
    assert_null(json_object_get(w, "t[2]"));
    /* Malformed entries are dropped, not believed. */
    s = json_object();
    json_object_set_new(s, "t[0]", json_pack("{s:s, s:I, s:s}", "committed", "6", "lag", (json_int_t)4, "member",
                                             "m2"));
    json_object_set_new(s, "t[3]", json_pack("{s:I, s:I}", "committed", (json_int_t)1, "lag", (json_int_t)4));
    json_object_set_new(s, "t[4]", json_string("x"));
    assert_string_equal(watch(w, s, 60000, 10000, b, sizeof(b)), "");
    assert_int_equal(json_object_size(w), 0);
#undef SAMPLE
    json_decref(w);
}

/* doctor: a first sample before the reports are read (room unknown: kept,
 * never named), a second with room at least min_ms later. */
static void test_lag_watch_doctor(void **state)
{
    (void)state;
    char b[512];
    for (int64_t second = 2999; second <= 3000; second++) {
        json_t *w = json_object();
        json_t *s = json_object();
        put(s, "t[0]", -1, 2, "m1", NULL, -1); /* nothing committed yet: still a stand */
        put(s, "t[1]", 4, 1, "m1", NULL, -1);
        put(s, "t[2]", 4, 1, "m2", NULL, -1);
        assert_string_equal(watch(w, s, 1000, 3000, b, sizeof(b)), "");
        s = json_object();
        put(s, "t[0]", -1, 3, "m1", "w1", 1);
        put(s, "t[1]", 5, 1, "m1", "w1", 1);   /* moved */
        put(s, "t[2]", 4, 1, "m2", "w2", 0);   /* owner full */
        assert_string_equal(watch(w, s, 1000 + second, 3000, b, sizeof(b)), second >= 3000 ? "t[0]@w1@3" : "");
        json_decref(w);
    }
    /* Unknown room keeps an unbroken stand, yet names nothing however long. */
    json_t *w = json_object();
    json_t *s = json_object();
    put(s, "t[0]", 4, 1, "m1", NULL, -1);
    assert_string_equal(watch(w, s, 0, 3000, b, sizeof(b)), "");
    s = json_object();
    put(s, "t[0]", 4, 1, "m1", NULL, -1);
    assert_string_equal(watch(w, s, 60000, 3000, b, sizeof(b)), "");
    s = json_object();
    put(s, "t[0]", 4, 1, "m1", NULL, 1);
    assert_string_equal(watch(w, s, 61000, 3000, b, sizeof(b)), "t[0]@m1@61");
    json_decref(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_from_the_writer),
        cmocka_unit_test(test_stalled_hostile),
        cmocka_unit_test(test_has_room),
        cmocka_unit_test(test_lag_watch_top),
        cmocka_unit_test(test_lag_watch_doctor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
