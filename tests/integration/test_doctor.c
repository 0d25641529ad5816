/* Integration tests of `codefleet doctor` against the real broker and Redis
 * of deploy/stack.sh: the built CLI is run as a child process with --json
 * and its report is checked check by check, on a healthy fleet and with
 * each part broken the way an operator meets it (broker down or refusing
 * the credentials, Redis down, no worker in the group, a result topic whose
 * message limit would cut results, partitions a worker reports stalled or
 * whose lag does not move under a member with room; `codefleet top` shows
 * the last two as well). */
#include "it_support.h"

#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_dispatcher.h"
#include "cf_util.h"


typedef struct fx {
    char tmp[128];
    it_topics t;
    char workers_topic[96];
    it_worker w;
    bool worker_started;
} fx;

typedef struct run_out {
    int rc;
    char out[1 << 18];
    char err[1 << 16];
} run_out;

static run_out g_run;

/* codefleet --json with the fixture's topics, then the given args (NULL-
 * terminated; later flags win over the defaults given here). */
static run_out *doctor(fx *f, const char *first, ...)
{
    static char a_redis[300], a_req[128], a_res[128], a_dlq[128], a_workers[128], a_group[128];
    const char *argv[48];
    int n = 0;
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    snprintf(a_req, sizeof(a_req), "--request-topic=%s", f->t.requests);
    snprintf(a_res, sizeof(a_res), "--result-topic=%s", f->t.results);
    snprintf(a_dlq, sizeof(a_dlq), "--dlq-topic=%s", f->t.dlq);
    snprintf(a_workers, sizeof(a_workers), "--workers-topic=%s", f->workers_topic);
    snprintf(a_group, sizeof(a_group), "--worker-group=%s", f->t.group);
    const char *fixed[] = {a_redis, a_req, a_res, a_dlq, a_workers, a_group, "--events-topic=", "--json"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[n++] = fixed[i];
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 46; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    g_run.rc = it_cli_run(argv, f->tmp, g_run.out, sizeof(g_run.out), g_run.err, sizeof(g_run.err));
    assert_true(g_run.rc >= 0); /* exited, not killed */
    return &g_run;
}

static json_t *report_of(const run_out *r, int want_rc)
{
    if (r->rc != want_rc)
        fail_msg("doctor exit %d, want %d\nstdout: %s\nstderr: %s", r->rc, want_rc, r->out, r->err);
    json_error_t je;
    json_t *j = json_loads(r->out, 0, &je);
    if (!j)
        fail_msg("doctor --json printed no single JSON object (%s): %s", je.text, r->out);
    assert_true(json_is_boolean(json_object_get(j, "ok")));
    assert_int_equal(json_is_true(json_object_get(j, "ok")), want_rc == 0);
    return j;
}

/* The check named name (exact), failing the test when it is absent. */
static json_t *check_of(json_t *rep, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(rep, "checks"), i, c)
    {
        const char *n = json_string_value(json_object_get(c, "check"));
        if (n && strcmp(n, name) == 0)
            return c;
    }
    char *dump = json_dumps(rep, JSON_INDENT(1));
    fail_msg("no check '%s' in %s", name, dump);
    return NULL;
}

static void expect_status(json_t *rep, const char *name, const char *status)
{
    json_t *c = check_of(rep, name);
    const char *s = json_string_value(json_object_get(c, "status"));
    if (!s || strcmp(s, status) != 0) {
        char *dump = json_dumps(c, 0);
        fail_msg("check %s: status %s, want %s: %s", name, s ? s : "?", status, dump);
    }
}

static void expect_text(json_t *rep, const char *name, const char *field, const char *needle)
{
    const char *s = json_string_value(json_object_get(check_of(rep, name), field));
    if (!s || !strstr(s, needle))
        fail_msg("check %s: %s '%s' lacks '%s'", name, field, s ? s : "(none)", needle);
}

/* The pictures `top --json` printed (one object a line): the index-th
 * (-1: the last), failing the test unless there are want of them. */
static json_t *top_picture_of(const run_out *r, size_t want, long index)
{
    if (r->rc != 0)
        fail_msg("top exit %d\nstdout: %s\nstderr: %s", r->rc, r->out, r->err);
    json_t *all = json_array();
    for (const char *line = r->out; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        json_error_t je;
        json_t *pic = json_loadb(line, n, 0, &je);
        if (!pic)
            fail_msg("top --json printed a line that is not JSON (%s): %.*s", je.text, (int)n, line);
        json_array_append_new(all, pic);
        line += n + (nl ? 1 : 0);
    }
    if (json_array_size(all) != want)
        fail_msg("top printed %zu picture(s), want %zu: %s", json_array_size(all), want, r->out);
    json_t *pic = json_incref(json_array_get(all, index < 0 ? want - 1 : (size_t)index));
    json_decref(all);
    return pic;
}

static json_t *top_json(const run_out *r, size_t want)
{
    return top_picture_of(r, want, -1);
}

static int setup(void **state)
{
    if (!it_brokers() || !it_redis())
        return 0;
    fx *f = calloc(1, sizeof(*f));
    snprintf(f->tmp, sizeof(f->tmp), "/tmp/cf-it-doctor-XXXXXX");
    assert_non_null(mkdtemp(f->tmp));
    it_topics_create(&f->t, "it-doctor", 2);
    it_unique_name("it-doctor-workers", f->workers_topic, sizeof(f->workers_topic));
    const char *names[] = {f->workers_topic};
    cf_kafka_topic_opts o = {.partitions = 1, .replication_factor = -1, .compacted = f->workers_topic};
    cf_error err = {0};
    if (cf_kafka_create_topics_opts(it_brokers(), it_kafka(), names, 1, &o, 30 * 1000000LL, &err) < 0)
        fail_msg("creating %s: %s", f->workers_topic, err.msg);
    *state = f;
    return 0;
}

/* more: one more worker flag, or NULL. */
static void start_worker_with(fx *f, const char *max_output, const char *more)
{
    static char a_workers[128], a_redis[300], a_out[64];
    snprintf(a_workers, sizeof(a_workers), "--workers-topic=%s", f->workers_topic);
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    snprintf(a_out, sizeof(a_out), "--max-output=%s", max_output);
    const char *extra[] = {a_workers, a_redis, a_out, more, NULL};
    /* A fresh id (and so a fresh log file) per test: a log of an earlier
     * worker must not answer the wait below. */
    static int n;
    char id[32];
    snprintf(id, sizeof(id), "doctor-w%d", ++n);
    it_worker_start(&f->w, &f->t, id, extra);
    f->worker_started = true;
    if (!it_worker_wait_log(&f->w, "assigned 2 partition(s)", 20000)) {
        it_worker_dump_log(&f->w);
        fail_msg("the worker did not get its partitions");
    }
    /* The worker's report is published asynchronously at start: wait until
     * doctor sees it (what the tests below check is what doctor does with
     * it). */
    for (int i = 0; i < 50; i++) {
        run_out *r = doctor(f, "doctor", "--no-roundtrip", "--no-redis", NULL);
        if (strstr(r->out, "\"check\":\"capabilities\",\"status\":\"ok\"") ||
            strstr(r->out, "\"check\": \"capabilities\", \"status\": \"ok\""))
            return;
        usleep(200 * 1000);
    }
    it_worker_dump_log(&f->w);
    fail_msg("doctor never saw the worker's report: %s", g_run.out);
}

static void start_worker(fx *f, const char *max_output)
{
    start_worker_with(f, max_output, NULL);
}

static int teardown(void **state)
{
    fx *f = *state;
    if (!f)
        return 0;
    if (f->worker_started)
        it_worker_stop(&f->w, SIGTERM, 15000);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->tmp);
    assert_int_equal(system(cmd), 0);
    free(f);
    *state = NULL;
    return 0;
}

/* Everything up: every check ok, the worker's report joined to its group
 * membership, the round trip timed. */
static void test_doctor_healthy(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    start_worker(f, "1MiB");
    json_t *rep = report_of(doctor(f, "doctor", NULL), 0);
    expect_status(rep, "broker", "ok");
    expect_status(rep, "workers", "ok");
    json_t *w = check_of(rep, "workers");
    assert_int_equal(json_array_size(json_object_get(w, "members")), 1);
    assert_int_equal(json_integer_value(json_object_get(w, "assigned_partitions")), 2);
    assert_true(json_integer_value(json_object_get(w, "lag")) >= 0);
    expect_status(rep, "capabilities", "ok");
    expect_text(rep, "capabilities", "message", "shell");
    expect_text(rep, "capabilities", "message", "process [host_local:");
    char name[160];
    snprintf(name, sizeof(name), "topic %s", f->t.results);
    expect_status(rep, name, "ok");
    assert_int_equal(json_integer_value(json_object_get(check_of(rep, name), "max_message_bytes")), 16777216);
    /* 2 x 1 MiB + output file 1 MiB + collect 4 MiB + 64 KiB */
    assert_int_equal(json_integer_value(json_object_get(check_of(rep, name), "largest_result_bytes")),
                     7 * 1024 * 1024 + 64 * 1024);
    snprintf(name, sizeof(name), "topic %s", f->workers_topic);
    expect_status(rep, name, "ok");
    expect_status(rep, "redis", "ok");
    expect_status(rep, "roundtrip", "ok");
    json_t *rt = check_of(rep, "roundtrip");
    assert_true(json_real_value(json_object_get(rt, "latency_ms")) > 0);
    assert_string_equal(json_string_value(json_object_get(rt, "result_status")), "success");
    /* The worker's report says what its partition guard finds: nothing
     * (said, not merely absent: the message has no "do not report"). */
    expect_status(rep, "partitions", "ok");
    assert_string_equal(json_string_value(json_object_get(check_of(rep, "partitions"), "message")),
                        "no partition stalled under a live worker");
    assert_int_equal(json_array_size(json_object_get(check_of(rep, "partitions"), "stalled")), 0);
    assert_int_equal(json_array_size(json_object_get(check_of(rep, "partitions"), "not_moving")), 0);
    /* Failover: the worker runs KIP-848 (the default on the stack's Kafka
     * 4), so what a dead worker's partitions wait is the broker's session
     * for the group, which doctor reads (1.5 s on deploy/stack.sh's). */
    expect_status(rep, "failover", "ok");
    json_t *fo = check_of(rep, "failover");
    assert_string_equal(json_string_value(json_object_get(fo, "protocol")), "consumer");
    json_int_t session = json_integer_value(json_object_get(fo, "session_ms"));
    assert_true(session > 0 && session <= 10000);
    assert_int_equal(json_integer_value(json_object_get(rep, "failed")), 0);
    json_decref(rep);

    /* top: the same worker, its (empty) stalled list and its count. */
    json_t *pic = top_json(doctor(f, "top", "--once", NULL), 1);
    json_t *wk = json_array_get(json_object_get(pic, "workers"), 0);
    assert_non_null(wk);
    assert_true(json_is_array(json_object_get(wk, "stalled")));
    assert_int_equal(json_array_size(json_object_get(wk, "stalled")), 0);
    assert_int_equal(json_integer_value(json_object_get(wk, "stalls")), 0);
    assert_int_equal(json_array_size(json_object_get(pic, "not_moving")), 0);
    json_decref(pic);

    /* The text form: one line per check and a verdict. */
    run_out *r = doctor(f, "--json=false", "doctor", "--no-roundtrip", NULL);
    assert_int_equal(r->rc, 0);
    assert_non_null(strstr(r->out, "OK      broker"));
    assert_non_null(strstr(r->out, "healthy: 0 failed"));
    assert_null(strstr(r->out, "roundtrip"));

    /* top's table: the member's host as an address, not the broker's
     * "/127.0.0.1"; --json keeps what the broker said. */
    r = doctor(f, "--json=false", "top", "--once", NULL);
    assert_int_equal(r->rc, 0);
    char row[600];
    snprintf(row, sizeof(row), "\n%-28.28s /", f->w.id);
    if (strstr(r->out, row))
        fail_msg("top shows the broker's '/' before the host: %s", r->out);

    /* A live worker, but no report where top looks (an empty topic): no
     * stats, said as such. */
    char a_topic[160];
    snprintf(a_topic, sizeof(a_topic), "--workers-topic=%s", f->t.dlq);
    r = doctor(f, a_topic, "--json=false", "top", "--once", NULL);
    snprintf(row, sizeof(row), "codefleet top: no worker stats: none of the 1 live worker(s) in group %s published a "
                               "report on %s\n",
             f->t.group, f->t.dlq);
    if (r->rc != 1 || strcmp(r->err, row) != 0 || r->out[0])
        fail_msg("top without reports: exit %d\nstdout: %s\nstderr: %s", r->rc, r->out, r->err);
}

static void test_doctor_broker_down(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    json_t *rep = report_of(doctor(f, "--brokers=127.0.0.1:1", "doctor", NULL), 1);
    expect_status(rep, "broker", "fail");
    expect_text(rep, "broker", "fix", "cannot reach the Kafka broker at 127.0.0.1:1");
    expect_status(rep, "topics", "skipped");
    expect_status(rep, "workers", "skipped");
    expect_status(rep, "capabilities", "skipped");
    expect_status(rep, "roundtrip", "skipped");
    /* Redis is checked all the same. */
    expect_status(rep, "redis", "ok");
    json_decref(rep);

    /* top: the broker's line, as a JSON error on stdout and stderr. */
    run_out *r = doctor(f, "--brokers=127.0.0.1:1", "top", "--once", NULL);
    assert_int_equal(r->rc, 6);
    static const char want[] = "{\"error\":{\"command\":\"top\",\"exit_code\":6,\"kind\":\"transport\",\"message\":\"";
    if (strncmp(r->out, want, sizeof(want) - 1) != 0 || strcmp(r->out, r->err) != 0)
        fail_msg("top --json with the broker down:\nstdout: %s\nstderr: %s", r->out, r->err);
}

static void test_doctor_bad_credentials(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    if (!it_client_config())
        skip();
    char path[256];
    snprintf(path, sizeof(path), "%s/wrong.conf", f->tmp);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    /* The stack's own mechanism, a principal that exists, a wrong password. */
    const char *mech = cf_kvlist_get(it_kafka(), "sasl.mechanisms");
    fprintf(fp, "kafka.security.protocol = SASL_PLAINTEXT\nkafka.sasl.mechanisms = %s\n"
                "kafka.sasl.username = cli\nkafka.sasl.password = not-the-password\n",
            mech ? mech : "PLAIN");
    fclose(fp);
    char a_config[300];
    snprintf(a_config, sizeof(a_config), "--config=%s", path);
    json_t *rep = report_of(doctor(f, a_config, "doctor", "--no-redis", NULL), 1);
    expect_status(rep, "broker", "fail");
    expect_text(rep, "broker", "fix", "refused the credentials");
    json_decref(rep);
}

static void test_doctor_redis_down(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    start_worker(f, "1MiB"); /* a worker that uses Redis makes Redis required */
    json_t *rep = report_of(doctor(f, "--redis=127.0.0.1:1", "doctor", "--no-roundtrip", NULL), 1);
    expect_status(rep, "redis", "fail");
    expect_text(rep, "redis", "fix", "cannot reach Redis at 127.0.0.1:1");
    expect_status(rep, "broker", "ok");
    expect_status(rep, "workers", "ok");
    json_decref(rep);
}

static void test_doctor_no_workers(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    json_t *rep = report_of(doctor(f, "doctor", NULL), 1);
    expect_status(rep, "broker", "ok");
    expect_status(rep, "workers", "fail");
    expect_text(rep, "workers", "message", "no worker in group");
    expect_text(rep, "workers", "fix", "start a worker");
    /* The round trip still runs, with a short wait, and says why nobody
     * answered. */
    expect_status(rep, "roundtrip", "fail");
    expect_text(rep, "roundtrip", "message", "within 5.0 s");
    expect_text(rep, "roundtrip", "fix", "no worker consumes");
    json_decref(rep);

    /* top --once with no worker's stats to show is no answer: exit 1, one
     * line that says why, and with --json that line is a JSON error on
     * stderr and the only thing on stdout. */
    char want[300];
    snprintf(want, sizeof(want),
             "{\"error\":{\"command\":\"top\",\"exit_code\":1,\"kind\":\"failed\",\"message\":\"no worker "
             "stats: no live worker in group %s (state ",
             f->t.group);
    run_out *r = doctor(f, "top", "--once", NULL);
    if (r->rc != 1 || strncmp(r->out, want, strlen(want)) != 0 || strchr(r->out, '\n') != r->out + strlen(r->out) - 1 ||
        strcmp(r->out, r->err) != 0)
        fail_msg("top --once --json without workers: exit %d\nstdout: %s\nstderr: %s", r->rc, r->out, r->err);
    r = doctor(f, "--json=false", "top", "--once", NULL);
    snprintf(want, sizeof(want), "codefleet top: no worker stats: no live worker in group %s (state ", f->t.group);
    if (r->rc != 1 || r->out[0] || strncmp(r->err, want, strlen(want)) != 0 ||
        strchr(r->err, '\n') != r->err + strlen(r->err) - 1)
        fail_msg("top --once without workers: exit %d\nstdout: %s\nstderr: %s", r->rc, r->out, r->err);
    /* Several pictures: each shown, and the same verdict after them. */
    r = doctor(f, "top", "--count", "2", "--interval", "0.2", NULL);
    assert_int_equal(r->rc, 1);
    const char *last = strstr(r->out, "{\"error\":");
    assert_non_null(last);
    assert_non_null(strstr(last, "no live worker in group"));
    assert_int_equal(strncmp(r->out, "{\"group\":", 9), 0);
    assert_non_null(strstr(strchr(r->out, '\n') + 1, "{\"group\":"));
}

/* A mistyped --worker-group: the workers' reports name the right one, and
 * the round trip shows the fleet itself answering. */
static void test_doctor_wrong_group(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    start_worker(f, "1MiB");
    json_t *rep = report_of(doctor(f, "--worker-group=not-the-fleet", "doctor", NULL), 1);
    expect_status(rep, "workers", "fail");
    expect_text(rep, "workers", "fix", f->t.group);
    expect_text(rep, "workers", "fix", "--worker-group");
    expect_status(rep, "roundtrip", "ok");
    json_decref(rep);
}

static void produce_report(cf_dispatcher *disp, fx *f, const char *key, const char *value)
{
    cf_error err = {0};
    if (cf_dispatcher_produce_raw(disp, f->workers_topic, key, strlen(key), value, value ? strlen(value) : 0, &err) <
        0)
        fail_msg("producing a report: %s", err.msg);
}

/* Reports are data: whoever may write the workers topic (a compromised or
 * buggy worker principal) must not drive the operator's terminal, get
 * hostile names pasted into fix lines, or make doctor hold unbounded data. */
static void test_doctor_treats_reports_as_data(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    start_worker(f, "1MiB");
    char cid[128];
    snprintf(cid, sizeof(cid), "codefleet-worker-%s", f->w.id);
    cf_dispatcher *disp = it_dispatcher_new(&f->t);
    /* Under the worker's own key, newer than its real report: this one is
     * what doctor uses.  Escapes (ESC, BEL, C1 CSI, a bidi override), a
     * huge result size, names that are not topic names. */
    char hostile[2048];
    snprintf(hostile, sizeof(hostile),
             "{\"schema\":1,\"worker_id\":\"%s\",\"client_id\":\"%s\",\"group\":\"%s\","
             "\"largest_result_bytes\":9000000000000000000,\"request_topics\":[\"bad name; rm -rf /\"],"
             "\"result_topics\":[\"\\u001b[31mred\"],\"backends\":[{\"name\":\"\\u001b]0;pwned\\u0007\","
             "\"isolation\":\"x\\u009b31m\\u202e\",\"languages\":[\"shell\"]}],\"languages\":[\"shell\"]}",
             f->w.id, cid, f->t.group);
    produce_report(disp, f, f->w.id, hostile);
    /* Another key claiming the same client id loses to the worker's own key. */
    char forged[512];
    snprintf(forged, sizeof(forged),
             "{\"schema\":1,\"worker_id\":\"forged\",\"client_id\":\"%s\",\"languages\":[\"cobol\"]}", cid);
    produce_report(disp, f, "forged", forged);
    produce_report(disp, f, "garbage", "{not json");
    cf_error err = {0};
    assert_int_equal(cf_dispatcher_flush(disp, 10 * 1000000LL, &err), 0);

    json_t *rep = report_of(doctor(f, "doctor", "--no-roundtrip", NULL), 1);
    char *dump = json_dumps(rep, 0);
    assert_null(strstr(dump, "cobol"));
    free(dump);
    /* The size claim is clamped to what a topic can take, and flagged. */
    char name[160];
    snprintf(name, sizeof(name), "topic %s", f->t.results);
    expect_status(rep, name, "fail");
    assert_int_equal(json_integer_value(json_object_get(check_of(rep, name), "largest_result_bytes")), 2147483647);
    /* The two bad names are counted, not checked. */
    expect_status(rep, "topics", "warn");
    expect_text(rep, "topics", "message", "2 topic name(s)");
    json_decref(rep);
    run_out *r = doctor(f, "--json=false", "doctor", "--no-roundtrip", NULL);
    assert_int_equal(r->rc, 1);
    assert_null(strstr(r->out, "rm -rf"));
    for (const unsigned char *p = (const unsigned char *)r->out; *p; p++) {
        if ((*p < 0x20 && *p != '\n') || *p == 0x7f)
            fail_msg("control byte 0x%02x in doctor's text output", *p);
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            fail_msg("a C1 control in doctor's text output");
        if (p[0] == 0xe2 && p[1] == 0x80 && p[2] >= 0xaa && p[2] <= 0xae)
            fail_msg("a bidi override in doctor's text output");
    }

    /* A valid report over the 64 KiB limit is not read: the worker is said
     * to have no report rather than doctor holding whatever it is sent. */
    static char big[80 * 1024];
    int n = snprintf(big, sizeof(big), "{\"schema\":1,\"worker_id\":\"%s\",\"client_id\":\"%s\",\"pad\":\"", f->w.id,
                     cid);
    memset(big + n, 'x', sizeof(big) - (size_t)n - 3);
    memcpy(big + sizeof(big) - 3, "\"}", 3);
    /* (The other claimant is withdrawn first: as the only report naming
     * that client id it would be taken, like a worker's whose kafka.client.id
     * differs from its worker id.) */
    produce_report(disp, f, "forged", NULL);
    produce_report(disp, f, f->w.id, big);
    assert_int_equal(cf_dispatcher_flush(disp, 10 * 1000000LL, &err), 0);
    cf_dispatcher_destroy(disp);
    rep = report_of(doctor(f, "doctor", "--no-roundtrip", NULL), 0);
    expect_status(rep, "capabilities", "warn");
    expect_text(rep, "capabilities", "message", "none of the 1 live worker(s) published a report");
    json_decref(rep);
}

/* A worker whose results may outgrow the result topic's message limit:
 * doctor says which topic and by how much, before any result is cut. */
static void test_doctor_topic_limit_too_small(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    start_worker(f, "16MiB");
    json_t *rep = report_of(doctor(f, "doctor", "--no-roundtrip", NULL), 1);
    char name[160];
    snprintf(name, sizeof(name), "topic %s", f->t.results);
    expect_status(rep, name, "fail");
    expect_text(rep, name, "message", "is below the");
    expect_text(rep, name, "fix", "max.message.bytes=");
    json_decref(rep);
}

/* A report as a worker writes it (schema/SPEC.md section 11), with load:
 * busy of slots, and load_extra (JSON members) at the end of "load". */
static void fake_report(char *buf, size_t cap, fx *f, const char *id, const char *client_id, int slots, int busy,
                        const char *load_extra)
{
    int n = snprintf(buf, cap,
                     "{\"schema\":1,\"worker_id\":\"%s\",\"client_id\":\"%s\",\"group\":\"%s\",\"host\":\"h\","
                     "\"slots\":%d,\"request_topics\":[\"%s\"],\"result_topic\":\"%s\",\"result_topics\":[\"%s\"],"
                     "\"backends\":[{\"name\":\"process\",\"isolation\":\"host_local\",\"languages\":[\"shell\"]}],"
                     "\"languages\":[\"shell\"],\"load\":{\"at_ms\":%lld,\"busy\":%d,\"held\":0,\"paused\":false,"
                     "\"draining\":false,\"received\":0,\"answered\":0%s%s}}",
                     id, client_id, f->t.group, slots, f->t.requests, f->t.results, f->t.results,
                     (long long)(cf_now_us() / 1000), busy, load_extra ? "," : "", load_extra ? load_extra : "");
    assert_true(n > 0 && (size_t)n < cap);
}

/* What a live worker's partition guard reports stalled (load.stalled of its
 * report) is a doctor warning naming the worker and the partitions, and a
 * STALLED count and line in top.  A real worker cannot be made to stall
 * from outside its process (the fault hook is in-process): its report is
 * replaced by one under its own key, which is what a stalled worker
 * publishes, hostile entries included (the report is data). */
static void test_doctor_reports_stalled_partitions(void **state)
{
    IT_REQUIRE_REDIS();
    fx *f = *state;
    /* It publishes once, at start: the report below stays the newest. */
    start_worker_with(f, "1MiB", "--report-interval=0");
    char cid[128];
    snprintf(cid, sizeof(cid), "codefleet-worker-%s", f->w.id);
    char extra[1024], report[4096];
    snprintf(extra, sizeof(extra),
             "\"stalled\":[\"%s[1]\",17,null,{\"x\":1},\"\",\"\\u001b]0;pwned\\u0007[2]\","
             "\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"],"
             "\"stalls\":5",
             f->t.requests);
    fake_report(report, sizeof(report), f, f->w.id, cid, 2, 0, extra);
    cf_dispatcher *disp = it_dispatcher_new(&f->t);
    produce_report(disp, f, f->w.id, report);
    cf_error err = {0};
    assert_int_equal(cf_dispatcher_flush(disp, 10 * 1000000LL, &err), 0);
    cf_dispatcher_destroy(disp);

    json_t *rep = report_of(doctor(f, "doctor", "--no-roundtrip", NULL), 0); /* a warning, not a failure */
    expect_status(rep, "partitions", "warn");
    char want[300];
    snprintf(want, sizeof(want), "worker %s reports stalled: %s[1], ?]0;pwned?[2], a,", f->w.id, f->t.requests);
    expect_text(rep, "partitions", "message", want);
    expect_text(rep, "partitions", "message", "(5 stall(s) since it started)");
    expect_text(rep, "partitions", "fix", "partition guard");
    json_t *st = json_array_get(json_object_get(check_of(rep, "partitions"), "stalled"), 0);
    assert_string_equal(json_string_value(json_object_get(st, "worker_id")), f->w.id);
    assert_int_equal(json_array_size(json_object_get(st, "partitions")), 16); /* capped like the writer */
    assert_int_equal(json_integer_value(json_object_get(st, "stalls")), 5);
    json_decref(rep);

    json_t *pic = top_json(doctor(f, "top", "--once", NULL), 1);
    json_t *wk = json_array_get(json_object_get(pic, "workers"), 0);
    json_t *list = json_object_get(wk, "stalled");
    assert_int_equal(json_array_size(list), 16);
    snprintf(want, sizeof(want), "%s[1]", f->t.requests);
    assert_string_equal(json_string_value(json_array_get(list, 0)), want);
    assert_string_equal(json_string_value(json_array_get(list, 1)), "?]0;pwned?[2]");
    assert_int_equal(json_integer_value(json_object_get(wk, "stalls")), 5);
    json_decref(pic);

    /* The text form: the count in the table, the names below it, and no
     * control byte from the report on the terminal. */
    run_out *r = doctor(f, "--json=false", "top", "--once", NULL);
    assert_int_equal(r->rc, 0);
    assert_non_null(strstr(r->out, "STALLED"));
    snprintf(want, sizeof(want), "stalled on %s: %s[1] ?]0;pwned?[2] a b", f->w.id, f->t.requests);
    if (!strstr(r->out, want))
        fail_msg("top's text lacks '%s': %s", want, r->out);
    assert_non_null(strstr(r->out, "(5 stall(s) since it started)"));
    for (const unsigned char *p = (const unsigned char *)r->out; *p; p++)
        if ((*p < 0x20 && *p != '\n') || *p >= 0x7f)
            fail_msg("byte 0x%02x in top's text output", *p);
}

/* A member of the workers' group that holds partitions, says it has room,
 * and takes nothing: the lag stands.  It is a plain consumer joined under a
 * worker's client id with a report under its key, which from outside is
 * exactly what a worker looks like whose partition is stuck. */
typedef struct fake_member {
    rd_kafka_t *rk;
    char id[64];
    char client_id[96];
} fake_member;

static void fake_member_join(fake_member *fm, fx *f)
{
    it_unique_name("fake", fm->id, sizeof(fm->id));
    snprintf(fm->client_id, sizeof(fm->client_id), "codefleet-worker-%s", fm->id);
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", it_brokers(), errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "group.id", f->t.group, errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "client.id", fm->client_id, errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr)))
        fail_msg("conf: %s", errstr);
    it_kafka_conf_apply(conf);
    fm->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!fm->rk)
        fail_msg("consumer: %s", errstr);
    rd_kafka_poll_set_consumer(fm->rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, f->t.requests, RD_KAFKA_PARTITION_UA);
    assert_int_equal(rd_kafka_subscribe(fm->rk, l), 0);
    rd_kafka_topic_partition_list_destroy(l);
    /* Polled only until both partitions are its own; from then on it takes
     * nothing (its heartbeats keep it in the group). */
    int64_t until = cf_mono_us() + 30 * 1000000LL;
    int cnt = 0;
    while (cnt < 2 && cf_mono_us() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(fm->rk, 100);
        if (m)
            rd_kafka_message_destroy(m);
        rd_kafka_topic_partition_list_t *a = NULL;
        if (rd_kafka_assignment(fm->rk, &a) == 0) {
            cnt = a->cnt;
            rd_kafka_topic_partition_list_destroy(a);
        }
    }
    if (cnt < 2)
        fail_msg("the fake member got %d partition(s)", cnt);
}

static void fake_member_leave(fake_member *fm)
{
    rd_kafka_consumer_close(fm->rk);
    rd_kafka_destroy(fm->rk);
}

/* A few requests' worth of bytes in each partition of the request topic
 * (nobody decodes them: nobody takes them). */
static void fill_partitions(fx *f)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", it_brokers(), errstr, sizeof(errstr)))
        fail_msg("conf: %s", errstr);
    it_kafka_conf_apply(conf);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!p)
        fail_msg("producer: %s", errstr);
    for (int32_t part = 0; part < 2; part++)
        for (int i = 0; i < 3; i++)
            assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC(f->t.requests), RD_KAFKA_V_PARTITION(part),
                                               RD_KAFKA_V_VALUE("x", 1), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                               RD_KAFKA_V_END),
                             0);
    assert_int_equal(rd_kafka_flush(p, 10000), 0);
    rd_kafka_destroy(p);
}

static void publish(fx *f, const char *key, const char *value)
{
    cf_dispatcher *disp = it_dispatcher_new(&f->t);
    produce_report(disp, f, key, value);
    cf_error err = {0};
    assert_int_equal(cf_dispatcher_flush(disp, 10 * 1000000LL, &err), 0);
    cf_dispatcher_destroy(disp);
}

static void expect_not_moving(json_t *list, fx *f, const char *owner, double at_least_s)
{
    if (json_array_size(list) != 2) {
        char *dump = json_dumps(list, 0);
        fail_msg("want both partitions not moving: %s", dump);
    }
    for (int32_t part = 0; part < 2; part++) {
        json_t *e = json_array_get(list, (size_t)part);
        char name[128];
        snprintf(name, sizeof(name), "%s[%d]", f->t.requests, (int)part);
        assert_string_equal(json_string_value(json_object_get(e, "partition")), name);
        assert_string_equal(json_string_value(json_object_get(e, "owner")), owner);
        assert_true(json_integer_value(json_object_get(e, "lag")) >= 3);
        assert_true(json_real_value(json_object_get(e, "for_s")) >= at_least_s);
    }
}

static void test_lag_not_moving(void **state)
{
    IT_REQUIRE_REDIS(); /* (the fixture needs both) */
    fx *f = *state;
    fake_member fm;
    fake_member_join(&fm, f);
    fill_partitions(f);
    char report[4096];
    fake_report(report, sizeof(report), f, fm.id, fm.client_id, 4, 0, "\"stalled\":[],\"stalls\":0");
    publish(f, fm.id, report);

    /* top: nothing at first; after 10 s (2 s pictures: max(10 s, 6 s))
     * both partitions, under the member, never before 10 s. */
    run_out *r = doctor(f, "top", "--interval", "2", "--count", "8", NULL);
    json_t *first = top_picture_of(r, 8, 0);
    assert_int_equal(json_array_size(json_object_get(first, "not_moving")), 0);
    assert_int_equal(json_integer_value(json_object_get(first, "lag")), 6);
    json_decref(first);
    for (long i = 1; i < 8; i++) {
        json_t *pic = top_picture_of(r, 8, i);
        size_t k;
        json_t *e;
        json_array_foreach(json_object_get(pic, "not_moving"), k, e)
            assert_true(json_real_value(json_object_get(e, "for_s")) >= 10.0);
        json_decref(pic);
    }
    json_t *last = top_json(r, 8);
    expect_not_moving(json_object_get(last, "not_moving"), f, fm.id, 10.0);
    json_decref(last);
    r = doctor(f, "--json=false", "top", "--interval", "1", "--count", "12", NULL);
    assert_int_equal(r->rc, 0);
    char want[300];
    snprintf(want, sizeof(want), "lag not moving: %s[0] (owner %s, for ", f->t.requests, fm.id);
    if (!strstr(r->out, want))
        fail_msg("top's text lacks '%s': %s", want, r->out);

    /* doctor: the round trip goes unanswered for 4 s, so its two samples
     * are more than 3 s apart. */
    json_t *rep = report_of(doctor(f, "--timeout=4s", "doctor", "--no-redis", NULL), 1);
    expect_status(rep, "roundtrip", "fail");
    expect_status(rep, "partitions", "warn");
    expect_text(rep, "partitions", "message", "not moving during this check: ");
    snprintf(want, sizeof(want), "[1] (owner %s, for ", fm.id);
    expect_text(rep, "partitions", "message", want);
    expect_text(rep, "partitions", "fix", "holds its partition's commit");
    json_t *c = check_of(rep, "partitions");
    expect_not_moving(json_object_get(c, "not_moving"), f, fm.id, 3.0);
    assert_true(json_real_value(json_object_get(c, "window_s")) >= 3.0);
    assert_int_equal(json_array_size(json_object_get(c, "stalled")), 0);
    json_decref(rep);

    /* A shorter run says nothing about it: doctor does not wait for 3 s. */
    int64_t t0 = cf_mono_us();
    rep = report_of(doctor(f, "doctor", "--no-roundtrip", "--no-redis", NULL), 0);
    if (cf_mono_us() - t0 < 3 * 1000000LL) {
        expect_status(rep, "partitions", "ok");
        assert_null(json_object_get(check_of(rep, "partitions"), "window_s"));
    } else {
        print_message("doctor --no-roundtrip took 3 s or more: its short-run case is not checked\n");
    }
    json_decref(rep);

    /* An owner that says it is full explains the standing lag. */
    fake_report(report, sizeof(report), f, fm.id, fm.client_id, 4, 4, "\"stalled\":[],\"stalls\":0");
    publish(f, fm.id, report);
    rep = report_of(doctor(f, "--timeout=4s", "doctor", "--no-redis", NULL), 1);
    expect_status(rep, "partitions", "ok");
    assert_int_equal(json_array_size(json_object_get(check_of(rep, "partitions"), "not_moving")), 0);
    json_decref(rep);
    fake_member_leave(&fm);
}

static void test_doctor_usage(void **state)
{
    IT_REQUIRE_BROKER();
    fx *f = *state;
    run_out *r = doctor(f, "--json=false", "doctor", "--bogus", NULL);
    assert_int_equal(r->rc, 2);
    assert_string_equal(r->err, "codefleet doctor: unknown argument '--bogus' (see codefleet doctor --help)\n");
    assert_string_equal(r->out, "");
    /* With --json (global, or the command's own after the bad argument),
     * a usage error is JSON on stderr and stdout. */
    static const char *const forms[][4] = {{"doctor", "--bogus", NULL, "doctor"},
                                           {"--json=false", "doctor", "--bogus", "doctor"},
                                           {"top", "--count", "0", "top"},
                                           {"--json=false", "top", "--nope", "top"}};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        if (forms[i][2])
            r = doctor(f, forms[i][0], forms[i][1], forms[i][2], "--json", NULL);
        else
            r = doctor(f, forms[i][0], forms[i][1], NULL);
        char want[200];
        snprintf(want, sizeof(want), "{\"error\":{\"command\":\"%s\",\"exit_code\":2,\"kind\":\"usage\",",
                 forms[i][3]);
        if (r->rc != 2 || strncmp(r->out, want, strlen(want)) != 0 || strcmp(r->out, r->err) != 0)
            fail_msg("%s %s: exit %d\nstdout: %s\nstderr: %s", forms[i][0], forms[i][1], r->rc, r->out, r->err);
    }
    /* --json after the command, as the help says. */
    r = doctor(f, "--json=false", "--brokers=127.0.0.1:1", "doctor", "--json", "--no-redis", NULL);
    assert_int_equal(r->rc, 1);
    assert_non_null(strstr(r->out, "\"ok\":false"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_doctor_healthy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_broker_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_bad_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_redis_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_no_workers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_topic_limit_too_small, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_wrong_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_treats_reports_as_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_reports_stalled_partitions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lag_not_moving, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doctor_usage, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
