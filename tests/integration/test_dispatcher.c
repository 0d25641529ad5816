/* Integration tests of cf_dispatcher against a real broker (CF_TEST_BROKERS).
 * No worker is involved: results are produced by the test itself with
 * cf_dispatcher_produce_raw, which is exactly what a worker puts on the wire. */
#include "it_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <unistd.h>

#include "cf_dispatcher.h"
#include "cf_util.h"

static const int64_t SEC = 1000000;

static void rmdir_tree(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static cf_dispatcher *plain_dispatcher(const it_topics *t)
{
    cf_dispatcher_config cfg = {
        .brokers = it_brokers(),
        .request_topic = t->requests,
        .result_topic = t->results,
        .collect_results = false,
        .kafka = it_kafka(),
    };
    cf_dispatcher *d = NULL;
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_new(&cfg, &d, &err) < 0)
        fail_msg("dispatcher: %s", err.msg);
    return d;
}

/* Produces an encoded result for id (keyed by id) and waits for the ack. */
static void produce_result(cf_dispatcher *d, const it_topics *t, const char *id, cf_status status, const char *out)
{
    cf_result r = {0};
    r.id = (char *)id;
    r.status = status;
    r.has_exit_code = true;
    r.exit_code = status == CF_STATUS_SUCCESS ? 0 : 1;
    r.stdout_data.data = (uint8_t *)out;
    r.stdout_data.len = strlen(out);
    r.wall_time_us = 4321;
    r.finished_us = cf_now_us();
    cf_bytes b = {0};
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_result_encode(&r, &b, &err), 0);
    assert_int_equal(cf_dispatcher_produce_raw(d, t->results, id, strlen(id), b.data, b.len, &err), 0);
    free(b.data);
    if (cf_dispatcher_flush(d, 10 * SEC, &err) < 0)
        fail_msg("flush: %s", err.msg);
}

static void produce_garbage(cf_dispatcher *d, const it_topics *t, const char *key)
{
    /* A map header promising 15 entries, then nothing: must be skipped. */
    static const uint8_t junk[] = {0x8f, 0xa2, 'i', 'd'};
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_produce_raw(d, t->results, key, strlen(key), junk, sizeof(junk), &err), 0);
    assert_int_equal(cf_dispatcher_produce_raw(d, t->results, key, strlen(key), "not msgpack at all", 18, &err), 0);
    if (cf_dispatcher_flush(d, 10 * SEC, &err) < 0)
        fail_msg("flush: %s", err.msg);
}

/* A plain client of the test broker (its credentials), for what the
 * dispatcher does not wrap: describing configs, reading offsets. */
static rd_kafka_t *admin_client(void)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", it_brokers(), errstr, sizeof(errstr));
    it_kafka_conf_apply(conf);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk)
        fail_msg("client: %s", errstr);
    return rk;
}

static void test_topics_create_idempotent(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    char a[96], b[96];
    it_unique_name("disp-topics-a", a, sizeof(a));
    it_unique_name("disp-topics-b", b, sizeof(b));
    const char *names[] = {a, b};
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 2, 4, -1, 30 * SEC, &err), 0);
    /* Again: TOPIC_ALREADY_EXISTS is success. */
    assert_int_equal(cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 2, 4, -1, 30 * SEC, &err), 0);
    /* Bad arguments are refused before the broker is asked. */
    assert_int_equal(cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 2, 0, -1, 30 * SEC, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    /* The topic exists with its partitions: a collector on it can be created. */
    it_topics t = {0};
    snprintf(t.requests, sizeof(t.requests), "%s", a);
    snprintf(t.results, sizeof(t.results), "%s", b);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_dispatcher_destroy(d);

    /* The topic says how large a message it takes (a stock broker's 1 MiB
     * would cut results with a few MiB of output). */
    rd_kafka_t *rk = admin_client();
    rd_kafka_ConfigResource_t *cr = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, b);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_DescribeConfigs(rk, &cr, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    assert_non_null(ev);
    const rd_kafka_DescribeConfigs_result_t *dr = rd_kafka_event_DescribeConfigs_result(ev);
    assert_non_null(dr);
    size_t nres = 0;
    const rd_kafka_ConfigResource_t **res = rd_kafka_DescribeConfigs_result_resources(dr, &nres);
    assert_int_equal(nres, 1);
    size_t nent = 0;
    const rd_kafka_ConfigEntry_t **ent = rd_kafka_ConfigResource_configs(res[0], &nent);
    const char *mmb = NULL;
    for (size_t i = 0; i < nent; i++)
        if (strcmp(rd_kafka_ConfigEntry_name(ent[i]), "max.message.bytes") == 0)
            mmb = rd_kafka_ConfigEntry_value(ent[i]);
    assert_non_null(mmb);
    assert_string_equal(mmb, "16777216");
    rd_kafka_event_destroy(ev);
    rd_kafka_ConfigResource_destroy(cr);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}

/* A broker shows a new partition's leader in its metadata before the
 * leader serves it; a produce in that gap can be reordered behind the next
 * one (KAFKA-15591).  Measured here, 28 of 40 fresh topics had a partition
 * answering "not leader" once metadata showed leaders.  Topic creation
 * returns only when every partition answers. */
static void test_topics_create_returns_served_partitions(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    rd_kafka_t *rk = admin_client();
    for (int round = 0; round < 8; round++) {
        char name[96];
        it_unique_name("disp-served", name, sizeof(name));
        const char *names[] = {name};
        cf_error err;
        cf_error_clear(&err);
        if (cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 1, 3, -1, 30 * SEC, &err) < 0)
            fail_msg("create: %s", err.msg);
        for (int32_t p = 0; p < 3; p++) {
            int64_t lo = -1, hi = -1;
            rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, name, p, &lo, &hi, 10000);
            if (e)
                fail_msg("round %d: %s[%d] not served right after creation: %s", round, name, (int)p,
                         rd_kafka_err2str(e));
            assert_int_equal(hi, 0);
        }
    }
    rd_kafka_destroy(rk);
}

static void test_collector_needs_existing_topic(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    char missing[96];
    it_unique_name("disp-missing", missing, sizeof(missing));
    cf_dispatcher_config cfg = {
        .brokers = it_brokers(), .result_topic = missing, .collect_results = true, .kafka = it_kafka()};
    cf_dispatcher *d = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_new(&cfg, &d, &err), -1);
    assert_null(d);
    assert_int_equal(err.code, CF_E_KAFKA);
    assert_non_null(strstr(err.msg, missing));
}

static void test_submit_reads_back(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-submit", 3);
    cf_dispatcher *d = plain_dispatcher(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_PYTHON, "print('hi')");
    static const char *env_allow[] = {"HOME"};
    req.policy.timeout_us = 2 * SEC;
    req.policy.memory_bytes = 64 << 20;
    req.policy.network = CF_NET_DISABLED;
    req.policy.env_allow = calloc(1, sizeof(char *));
    req.policy.env_allow[0] = strdup(env_allow[0]);
    req.policy.n_env_allow = 1;
    req.policy.env_allow_set = true;
    cf_error err;
    cf_error_clear(&err);
    int64_t before = cf_now_us();
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    assert_int_equal(req.created_us, 0); /* the caller's struct is not modified */
    assert_int_equal(cf_dispatcher_flush(d, 10 * SEC, &err), 0);

    it_message *m = it_consume_first(t.requests, 15000);
    assert_non_null(m);
    assert_string_equal(m->key, req.id); /* no workspace: keyed by id */
    cf_request got = {0};
    if (cf_request_decode(m->payload, m->len, NULL, &got, &err) < 0)
        fail_msg("decode: %s", err.msg);
    assert_string_equal(got.id, req.id);
    assert_int_equal(got.language, CF_LANG_PYTHON);
    assert_int_equal(got.code.len, req.code.len);
    assert_memory_equal(got.code.data, req.code.data, req.code.len);
    assert_int_equal(got.policy.timeout_us, 2 * SEC);
    assert_int_equal(got.policy.memory_bytes, 64 << 20);
    assert_int_equal(got.policy.network, CF_NET_DISABLED);
    assert_true(got.policy.env_allow_set);
    assert_int_equal(got.policy.n_env_allow, 1);
    assert_string_equal(got.policy.env_allow[0], "HOME");
    assert_true(got.created_us >= before && got.created_us <= cf_now_us());
    cf_request_clear(&got);
    it_message_free(m);

    cf_dispatcher_stats st;
    cf_dispatcher_get_stats(d, &st);
    assert_int_equal(st.submitted, 1);
    assert_int_equal(st.delivery_failed, 0);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
}

static void test_submit_keyed_by_workspace(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-ws", 1);
    cf_dispatcher *d = plain_dispatcher(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo hi");
    req.workspace = strdup("ws-42");
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    assert_int_equal(cf_dispatcher_flush(d, 10 * SEC, &err), 0);
    it_message *m = it_consume_first(t.requests, 15000);
    assert_non_null(m);
    assert_string_equal(m->key, "ws-42");
    it_message_free(m);
    /* An invalid id is refused locally. */
    free(req.id);
    req.id = strdup("has space");
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
}

static void test_result_before_wait_is_kept(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-early", 3);
    cf_dispatcher *d = it_dispatcher_new(&t);
    produce_result(d, &t, "early-1", CF_STATUS_SUCCESS, "early bird\n");
    /* Let the collector read it well before anyone waits. */
    cf_dispatcher_stats st = {0};
    for (int i = 0; i < 100 && st.results_pending == 0; i++) {
        usleep(50000);
        cf_dispatcher_get_stats(d, &st);
    }
    assert_int_equal(st.results_pending, 1);

    cf_result res = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_wait(d, "early-1", 5 * SEC, &res, &err) < 0)
        fail_msg("wait: %s", err.msg);
    assert_string_equal(res.id, "early-1");
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(res.wall_time_us, 4321);
    assert_int_equal(res.stdout_data.len, strlen("early bird\n"));
    assert_memory_equal(res.stdout_data.data, "early bird\n", res.stdout_data.len);
    cf_result_clear(&res);
    /* Taken: a second wait does not find it again. */
    cf_dispatcher_get_stats(d, &st);
    assert_int_equal(st.results_pending, 0);
    assert_int_equal(cf_dispatcher_wait(d, "early-1", 200000, &res, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    cf_dispatcher_destroy(d);
}

static void test_wait_picks_its_id(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-block", 2);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_dispatcher *p = plain_dispatcher(&t);
    /* Results for other ids first, then ours: wait picks the right one and
     * wait_any hands out the others in arrival order. */
    produce_result(p, &t, "other-1", CF_STATUS_FAILED, "");
    produce_result(p, &t, "mine-1", CF_STATUS_TIMEOUT, "");
    produce_result(p, &t, "other-2", CF_STATUS_SUCCESS, "");
    cf_result res = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_wait(d, "mine-1", 10 * SEC, &res, &err) < 0)
        fail_msg("wait: %s", err.msg);
    assert_int_equal(res.status, CF_STATUS_TIMEOUT);
    int64_t rcv = 0;
    assert_int_equal(cf_dispatcher_wait_any(d, 10 * SEC, &res, &rcv, &err), 0);
    assert_string_equal(res.id, "other-1");
    assert_true(rcv > 0 && rcv <= cf_mono_us());
    assert_int_equal(cf_dispatcher_wait_any(d, 10 * SEC, &res, NULL, &err), 0);
    assert_string_equal(res.id, "other-2");
    cf_result_clear(&res);
    cf_dispatcher_destroy(p);
    cf_dispatcher_destroy(d);
}

static void test_wait_since_finds_older_result(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-since", 3);
    cf_dispatcher *p = plain_dispatcher(&t);
    int64_t t0 = cf_now_us();
    produce_result(p, &t, "old-1", CF_STATUS_REJECTED, "");
    produce_garbage(p, &t, "old-2"); /* same key as the next, undecodable */
    produce_result(p, &t, "old-2", CF_STATUS_SUCCESS, "second\n");
    cf_dispatcher_destroy(p);

    /* A different dispatcher, created after the results were written. */
    cf_dispatcher *d = plain_dispatcher(&t);
    cf_result res = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_wait_since(d, "old-1", t0 - 60 * SEC, 10 * SEC, &res, &err) < 0)
        fail_msg("wait_since: %s", err.msg);
    assert_string_equal(res.id, "old-1");
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    if (cf_dispatcher_wait_since(d, "old-2", t0 - 60 * SEC, 10 * SEC, &res, &err) < 0)
        fail_msg("wait_since: %s", err.msg);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_memory_equal(res.stdout_data.data, "second\n", 7);
    cf_result_clear(&res);
    /* A since after every message: nothing older is considered. */
    assert_int_equal(cf_dispatcher_wait_since(d, "old-1", cf_now_us() + 1000000, 500000, &res, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    cf_dispatcher_destroy(d);
}

static void test_wait_times_out(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-tmo", 1);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_result res = {0};
    cf_error err;
    cf_error_clear(&err);
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_dispatcher_wait(d, "never", 300000, &res, &err), -1);
    int64_t took = cf_mono_us() - t0;
    assert_int_equal(err.code, CF_E_TIMEOUT);
    assert_true(err.retriable);
    assert_true(took >= 300000);
    assert_true(took < 3 * SEC);
    assert_null(res.id);
    assert_int_equal(cf_dispatcher_wait_since(d, "never", cf_now_us() - SEC, 300000, &res, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    /* Waiting without a collector is a usage error, not a hang. */
    cf_dispatcher *p = plain_dispatcher(&t);
    assert_int_equal(cf_dispatcher_wait(p, "never", 300000, &res, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    cf_dispatcher_destroy(p);
    cf_dispatcher_destroy(d);
}

static void test_malformed_result_skipped(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-bad", 1);
    cf_dispatcher *d = it_dispatcher_new(&t);
    produce_garbage(d, &t, "bad-1");
    produce_result(d, &t, "good-1", CF_STATUS_SUCCESS, "ok\n");
    cf_result res = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_wait(d, "good-1", 10 * SEC, &res, &err) < 0)
        fail_msg("wait: %s", err.msg);
    assert_string_equal(res.id, "good-1");
    cf_result_clear(&res);
    cf_dispatcher_stats st;
    cf_dispatcher_get_stats(d, &st);
    assert_int_equal(st.results_malformed, 2);
    assert_int_equal(st.results_seen, 1);
    /* The garbage's key is not a result. */
    assert_int_equal(cf_dispatcher_wait(d, "bad-1", 200000, &res, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    cf_dispatcher_destroy(d);

    /* codefleet tail --json: what it skips is a JSON error line each on
     * stderr; the result is the line on stdout. */
    char tmp[] = "/tmp/cf-it-tail-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char a_res[160];
    snprintf(a_res, sizeof(a_res), "--result-topic=%s", t.results);
    const char *args[] = {"--json", a_res, "--timeout=30s", "tail", "--from-beginning", "--count", "1", NULL};
    static char out[8192], errs[8192];
    int rc = it_cli_run(args, tmp, out, sizeof(out), errs, sizeof(errs));
    if (rc != 0 || !strstr(out, "\"id\":\"good-1\""))
        fail_msg("tail: exit %d\nstdout: %s\nstderr: %s", rc, out, errs);
    size_t lines = 0;
    for (char *line = errs, *nl; (nl = strchr(line, '\n')); line = nl + 1, lines++) {
        json_t *j = json_loadb(line, (size_t)(nl - line), 0, NULL);
        json_t *e = json_object_get(j, "error");
        if (!e || strcmp(json_string_value(json_object_get(e, "kind")), "malformed") != 0 ||
            strcmp(json_string_value(json_object_get(e, "command")), "tail") != 0 ||
            !json_is_integer(json_object_get(e, "offset")) || json_object_get(e, "exit_code"))
            fail_msg("tail's stderr line %zu is not a malformed-result error: %s", lines + 1, errs);
        json_decref(j);
    }
    assert_int_equal(lines, 2);
    rmdir_tree(tmp);
}

/* codefleet batch --json: a line it cannot use is a JSON error on stderr
 * naming the file and line (the batch goes on), requests left without a
 * result are one JSON error listing their ids, and the summary is still
 * the answer on stdout.  No worker: the one good request stays missing. */
static void test_cli_batch_errors_in_json(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-batch", 1);
    char tmp[] = "/tmp/cf-it-batch-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char path[200];
    snprintf(path, sizeof(path), "%s/in.jsonl", tmp);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("not json\n"
          "# a comment\n"
          "{\"id\":\"b-1\",\"language\":\"shell\",\"code\":\"true\"}\n"
          "\n"
          "{\"id\":\"b-1\",\"language\":\"shell\",\"code\":\"true\"}\n",
          fp);
    fclose(fp);
    char a_req[160], a_res[160];
    snprintf(a_req, sizeof(a_req), "--request-topic=%s", t.requests);
    snprintf(a_res, sizeof(a_res), "--result-topic=%s", t.results);
    const char *args[] = {"--json", a_req, a_res, "--timeout=2s", "batch", path, NULL};
    static char out[8192], errs[8192];
    int rc = it_cli_run(args, tmp, out, sizeof(out), errs, sizeof(errs));
    assert_int_equal(rc, 1);
    /* stdout: the summary alone. */
    json_t *sum = json_loads(out, 0, NULL);
    if (!sum || json_integer_value(json_object_get(sum, "bad_lines")) != 2 ||
        json_integer_value(json_object_get(sum, "missing")) != 1)
        fail_msg("batch --json summary:\n%s\nstderr: %s", out, errs);
    json_decref(sum);
    /* stderr: line 1, line 5 (duplicate id), then the missing one. */
    json_t *e[3] = {0};
    size_t n = 0;
    for (char *line = errs, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        json_t *j = json_loadb(line, (size_t)(nl - line), 0, NULL);
        if (!j || n == 3)
            fail_msg("batch --json wrote a stderr line that is not one of three JSON objects:\n%s", errs);
        e[n++] = j;
    }
    if (n != 3)
        fail_msg("batch --json: %zu stderr line(s), want 3:\n%s", n, errs);
    json_t *l1 = json_object_get(e[0], "error"), *l5 = json_object_get(e[1], "error"),
           *miss = json_object_get(e[2], "error");
    assert_string_equal(json_string_value(json_object_get(l1, "command")), "batch");
    assert_string_equal(json_string_value(json_object_get(l1, "kind")), "usage");
    assert_string_equal(json_string_value(json_object_get(l1, "file")), path);
    assert_int_equal(json_integer_value(json_object_get(l1, "line")), 1);
    assert_null(json_object_get(l1, "exit_code")); /* the batch went on */
    assert_int_equal(json_integer_value(json_object_get(l5, "line")), 5);
    assert_string_equal(json_string_value(json_object_get(l5, "id")), "b-1");
    assert_non_null(strstr(json_string_value(json_object_get(l5, "message")), "duplicate id b-1"));
    assert_string_equal(json_string_value(json_object_get(miss, "kind")), "no_result");
    assert_string_equal(json_string_value(json_array_get(json_object_get(miss, "missing"), 0)), "b-1");
    for (size_t i = 0; i < n; i++)
        json_decref(e[i]);

    /* Without --json: the text lines as before. */
    const char *text_args[] = {a_req, a_res, "--timeout=2s", "batch", path, NULL};
    rc = it_cli_run(text_args, tmp, out, sizeof(out), errs, sizeof(errs));
    assert_int_equal(rc, 1);
    char want[400];
    snprintf(want, sizeof(want), "codefleet batch: %s:1: ", path);
    if (strncmp(errs, want, strlen(want)) != 0 || !strstr(errs, ":5: duplicate id b-1 (still in flight)\n") ||
        !strstr(errs, "codefleet batch: 1 request(s) without a result within 2000 ms\n  missing: b-1\n"))
        fail_msg("batch's text errors:\n%s", errs);
    rmdir_tree(tmp);
}

static void test_collector_bound_evicts_oldest(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-evict", 1);
    cf_dispatcher_config cfg = {
        .brokers = it_brokers(),
        .request_topic = t.requests,
        .result_topic = t.results,
        .collect_results = true,
        .max_pending = 2,
        .kafka = it_kafka(),
    };
    cf_dispatcher *d = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_new(&cfg, &d, &err), 0);
    produce_result(d, &t, "e-1", CF_STATUS_SUCCESS, "");
    produce_result(d, &t, "e-2", CF_STATUS_SUCCESS, "");
    produce_result(d, &t, "e-3", CF_STATUS_SUCCESS, "");
    cf_result res = {0};
    assert_int_equal(cf_dispatcher_wait(d, "e-3", 10 * SEC, &res, &err), 0);
    assert_int_equal(cf_dispatcher_wait(d, "e-2", SEC, &res, &err), 0);
    assert_int_equal(cf_dispatcher_wait(d, "e-1", 200000, &res, &err), -1); /* evicted */
    cf_dispatcher_stats st;
    cf_dispatcher_get_stats(d, &st);
    assert_int_equal(st.results_evicted, 1);
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
}

/* The collector is bounded in bytes too: results may be megabytes each. */
static void test_collector_byte_bound_evicts_oldest(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "disp-evict-bytes", 1);
    cf_dispatcher_config cfg = {
        .brokers = it_brokers(),
        .request_topic = t.requests,
        .result_topic = t.results,
        .collect_results = true,
        .max_pending = 1000,
        .max_pending_bytes = 3500, /* two results of ~1.5 KB, not three */
        .kafka = it_kafka(),
    };
    cf_dispatcher *d = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_new(&cfg, &d, &err), 0);
    char big[1001];
    memset(big, 'x', 1000);
    big[1000] = '\0';
    produce_result(d, &t, "b-1", CF_STATUS_SUCCESS, big);
    produce_result(d, &t, "b-2", CF_STATUS_SUCCESS, big);
    produce_result(d, &t, "b-3", CF_STATUS_SUCCESS, big);
    cf_result res = {0};
    assert_int_equal(cf_dispatcher_wait(d, "b-3", 10 * SEC, &res, &err), 0);
    cf_result_clear(&res);
    assert_int_equal(cf_dispatcher_wait(d, "b-2", SEC, &res, &err), 0);
    cf_result_clear(&res);
    assert_int_equal(cf_dispatcher_wait(d, "b-1", 200000, &res, &err), -1); /* evicted */
    cf_dispatcher_stats st;
    cf_dispatcher_get_stats(d, &st);
    assert_int_equal(st.results_evicted, 1);
    cf_dispatcher_destroy(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topics_create_idempotent),
        cmocka_unit_test(test_topics_create_returns_served_partitions),
        cmocka_unit_test(test_collector_needs_existing_topic),
        cmocka_unit_test(test_submit_reads_back),
        cmocka_unit_test(test_submit_keyed_by_workspace),
        cmocka_unit_test(test_result_before_wait_is_kept),
        cmocka_unit_test(test_wait_picks_its_id),
        cmocka_unit_test(test_wait_since_finds_older_result),
        cmocka_unit_test(test_wait_times_out),
        cmocka_unit_test(test_malformed_result_skipped),
        cmocka_unit_test(test_cli_batch_errors_in_json),
        cmocka_unit_test(test_collector_bound_evicts_oldest),
        cmocka_unit_test(test_collector_byte_bound_evicts_oldest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
