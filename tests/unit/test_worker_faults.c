/* The worker under broker faults a real broker cannot inject on demand:
 * librdkafka's mock cluster fails Produce requests, goes down, and hosts a
 * group whose rebalance revokes a partition in the middle of a run.  The
 * worker itself is the real one (process backend, real programs).
 *
 * What each test proves: every request taken ends with exactly one answer
 * (its result, or a dead letter with origin headers), the group's committed
 * position passes every one of them, and no request runs on two workers at
 * once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cf_config.h"
#include "cf_schema.h"
#include "cf_util.h"
#include "cf_worker.h"
#include "request_builders.h"
#include "support/test_shard.h"

#define API_PRODUCE 0 /* Kafka protocol ApiKey of Produce */

typedef struct fx {
    rd_kafka_t *mrk; /* owns the mock cluster */
    rd_kafka_mock_cluster_t *mc;
    char bootstraps[256];
    char dir[64]; /* scratch directory for the programs */
} fx;

typedef struct running_worker {
    cf_worker_config cfg;
    cf_worker *w;
    pthread_t thread;
    int rc;
    cf_worker_jobs ledger; /* where every job taken ended (outlives the worker) */
} running_worker;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", NULL, 0);
    f->mrk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    assert_non_null(f->mrk);
    f->mc = rd_kafka_mock_cluster_new(f->mrk, 1);
    assert_non_null(f->mc);
    cf_strlcpy(f->bootstraps, rd_kafka_mock_cluster_bootstraps(f->mc), sizeof(f->bootstraps));
    assert_int_equal(rd_kafka_mock_topic_create(f->mc, "req", 2, 1), 0);
    assert_int_equal(rd_kafka_mock_topic_create(f->mc, "res", 1, 1), 0);
    assert_int_equal(rd_kafka_mock_topic_create(f->mc, "dlq", 1, 1), 0);
    assert_int_equal(rd_kafka_mock_topic_create(f->mc, "events", 1, 1), 0);
    cf_strlcpy(f->dir, "/tmp/cf-faults-XXXXXX", sizeof(f->dir));
    assert_non_null(mkdtemp(f->dir));
    chmod(f->dir, 0777);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    rd_kafka_mock_cluster_destroy(f->mc);
    rd_kafka_destroy(f->mrk);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return 0;
}

static void *worker_thread(void *arg)
{
    running_worker *rw = arg;
    cf_error err;
    cf_error_clear(&err);
    rw->rc = cf_worker_run(rw->w, false, &err);
    if (rw->rc < 0)
        fprintf(stderr, "worker: %s\n", err.msg);
    return NULL;
}

static void conf_set(cf_worker_config *c, const char *k, const char *v)
{
    cf_error err;
    cf_error_clear(&err);
    if (cf_conf_set(&cf_worker_conf_table, c, k, v, &err) < 0)
        fail_msg("%s=%s: %s", k, v, err.msg);
}

static running_worker *worker_start(fx *f, const char *id, const char *const *extra)
{
    running_worker *rw = calloc(1, sizeof(*rw));
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_conf_init(&cf_worker_conf_table, &rw->cfg, &err), 0);
    conf_set(&rw->cfg, "brokers", f->bootstraps);
    conf_set(&rw->cfg, "group", "faults");
    conf_set(&rw->cfg, "request-topic", "req");
    conf_set(&rw->cfg, "result-topic", "res");
    conf_set(&rw->cfg, "dlq-topic", "dlq");
    conf_set(&rw->cfg, "events-topic", "events");
    /* No report: its Produce request would take one of the injected
     * Produce errors meant for results. */
    conf_set(&rw->cfg, "workers-topic", "");
    /* No cancel reader: these cases are about delivery under injected
     * faults, and the mock cluster brings a broker back up on its old
     * ephemeral port, which one more client's connections can have taken
     * meanwhile (librdkafka's mock asserts then: seen once under TSan).
     * Cancels are tested against the real broker (it_test_cancel). */
    conf_set(&rw->cfg, "cancel-topic-suffix", "");
    conf_set(&rw->cfg, "worker-id", id);
    conf_set(&rw->cfg, "backends", "process");
    conf_set(&rw->cfg, "profile.default.backends", "process");
    conf_set(&rw->cfg, "profile.default.network", "enabled");
    conf_set(&rw->cfg, "work-root", f->dir);
    conf_set(&rw->cfg, "log-level", getenv("CF_TEST_VERBOSE") ? "debug" : "warn");
    conf_set(&rw->cfg, "kafka.session.timeout.ms", "6000");
    conf_set(&rw->cfg, "kafka.heartbeat.interval.ms", "300");
    conf_set(&rw->cfg, "kafka.message.timeout.ms", "2000");
    for (size_t i = 0; extra && extra[i]; i += 2)
        conf_set(&rw->cfg, extra[i], extra[i + 1]);
    assert_int_equal(cf_conf_validate(&cf_worker_conf_table, &rw->cfg, &err), 0);
    if (cf_worker_new(&rw->cfg, &rw->w, &err) < 0)
        fail_msg("worker: %s", err.msg);
    cf_worker_jobs_watch(rw->w, &rw->ledger);
    assert_int_equal(pthread_create(&rw->thread, NULL, worker_thread, rw), 0);
    return rw;
}

/* kafka.group.instance.id would name every consumer of the worker (one
 * per topic) alike, and they would fence each other: refused at start. */
static void instance_id_override_is_refused(void **state)
{
    fx *f = *state;
    cf_worker_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_conf_init(&cf_worker_conf_table, &cfg, &err), 0);
    conf_set(&cfg, "brokers", f->bootstraps);
    conf_set(&cfg, "backends", "process");
    conf_set(&cfg, "profile.default.backends", "process");
    conf_set(&cfg, "work-root", f->dir);
    conf_set(&cfg, "log-level", "error");
    conf_set(&cfg, "kafka.group.instance.id", "mine");
    assert_int_equal(cf_conf_validate(&cf_worker_conf_table, &cfg, &err), 0);
    cf_worker *w = NULL;
    assert_int_equal(cf_worker_new(&cfg, &w, &err), -1);
    assert_null(w);
    if (!strstr(err.msg, "static-membership"))
        fail_msg("refused for another reason: %s", err.msg);
    cf_conf_free(&cf_worker_conf_table, &cfg);
}

static void worker_finish(running_worker *rw)
{
    if (!rw)
        return;
    cf_worker_stop(rw->w);
    pthread_join(rw->thread, NULL);
    cf_worker_destroy(rw->w);
    cf_conf_free(&cf_worker_conf_table, &rw->cfg);
    /* Every job that entered reached exactly one terminal state, through
     * whatever fault the test made. */
    uint64_t taken = atomic_load(&rw->ledger.taken), answered = atomic_load(&rw->ledger.answered),
             dead = atomic_load(&rw->ledger.dead_lettered), dropped = atomic_load(&rw->ledger.dropped);
    fprintf(stderr, "jobs: %" PRIu64 " taken, %" PRIu64 " answered, %" PRIu64 " dead-lettered, %" PRIu64
                    " dropped\n", taken, answered, dead, dropped);
    assert_int_equal(atomic_load(&rw->ledger.live), 0);
    assert_int_equal(taken, answered + dead + dropped);
    free(rw);
}

/* Produces shell requests: ids[i] runs code[i], keyed by its id, onto the
 * given partition (-1: any). */
static void produce_requests_to(fx *f, size_t n, const char *const *ids, const char *const *code, int32_t partition,
                               const char *reply_to)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", f->bootstraps, NULL, 0);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        cf_request r;
        req_init_timeout(&r, CF_LANG_SHELL, code[i], 20 * 1000000LL);
        cf_str_set(&r.id, ids[i]);
        if (reply_to)
            cf_str_set(&r.reply_to, reply_to);
        cf_bytes enc = {0};
        assert_int_equal(cf_request_encode(&r, &enc, NULL), 0);
        assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC("req"), RD_KAFKA_V_PARTITION(partition),
                                           RD_KAFKA_V_KEY(ids[i], strlen(ids[i])), RD_KAFKA_V_VALUE(enc.data, enc.len),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
                         0);
        free(enc.data);
        cf_request_clear(&r);
    }
    assert_int_equal(rd_kafka_flush(p, 10000), 0);
    rd_kafka_destroy(p);
}

static void produce_requests(fx *f, size_t n, const char *const *ids, const char *const *code, int32_t partition)
{
    produce_requests_to(f, n, ids, code, partition, NULL);
}

/* Everything on topic (partition 0) within timeout_ms, or until want
 * messages arrived (want 0: read for the whole timeout). */
typedef struct got {
    cf_result res[32];
    char reason[32][512]; /* dead letters: the reason header */
    char origin[32][64];  /* dead letters: origin-topic/partition/offset */
    char key[32][128];    /* the message key */
    size_t n;
} got;

static void read_topic(fx *f, const char *topic, size_t want, int timeout_ms, got *out)
{
    memset(out, 0, sizeof(*out));
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", f->bootstraps, NULL, 0);
    rd_kafka_conf_set(conf, "group.id", "reader", NULL, 0);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", NULL, 0);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    assert_non_null(c);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    assert_int_equal(rd_kafka_assign(c, l), 0);
    rd_kafka_topic_partition_list_destroy(l);
    int64_t until = cf_mono_us() + (int64_t)timeout_ms * 1000;
    while (cf_mono_us() < until && (want == 0 || out->n < want)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
        if (!m)
            continue;
        if (!m->err && out->n < 32) {
            size_t i = out->n++;
            snprintf(out->key[i], sizeof(out->key[i]), "%.*s", (int)m->key_len, (const char *)m->key);
            if (strcmp(topic, "dlq") == 0) {
                rd_kafka_headers_t *h = NULL;
                const void *v;
                size_t vl;
                if (rd_kafka_message_headers(m, &h) == 0) {
                    if (rd_kafka_header_get_last(h, "codefleet-reason", &v, &vl) == 0)
                        snprintf(out->reason[i], sizeof(out->reason[i]), "%.*s", (int)vl, (const char *)v);
                    const void *t, *p, *o;
                    size_t tl, pl, ol;
                    if (rd_kafka_header_get_last(h, "codefleet-origin-topic", &t, &tl) == 0 &&
                        rd_kafka_header_get_last(h, "codefleet-origin-partition", &p, &pl) == 0 &&
                        rd_kafka_header_get_last(h, "codefleet-origin-offset", &o, &ol) == 0)
                        snprintf(out->origin[i], sizeof(out->origin[i]), "%.*s/%.*s/%.*s", (int)tl,
                                 (const char *)t, (int)pl, (const char *)p, (int)ol, (const char *)o);
                }
            } else {
                cf_decode_limits lim = cf_decode_limits_default;
                assert_int_equal(cf_result_decode(m->payload, m->len, &lim, &out->res[i], NULL), 0);
            }
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
}

static void got_clear(got *g)
{
    for (size_t i = 0; i < g->n; i++)
        cf_result_clear(&g->res[i]);
}

/* The group's committed position on req[partition]. */
static int64_t committed(fx *f, int32_t partition)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", f->bootstraps, NULL, 0);
    rd_kafka_conf_set(conf, "group.id", "faults", NULL, 0);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, "req", partition);
    int64_t off = -1;
    if (rd_kafka_committed(c, l, 5000) == 0)
        off = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(c);
    return off;
}

/* Waits until the committed position of req[partition] reaches want. */
static int64_t wait_committed(fx *f, int32_t partition, int64_t want, int timeout_ms)
{
    int64_t until = cf_mono_us() + (int64_t)timeout_ms * 1000, off = -1;
    while (cf_mono_us() < until) {
        off = committed(f, partition);
        if (off >= want)
            return off;
        usleep(200 * 1000);
    }
    return off;
}

static size_t count_id(const got *g, const char *id)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->res[i].id && strcmp(g->res[i].id, id) == 0)
            n++;
    return n;
}

/* Produce errors on the result: retried with backoff, then delivered once;
 * the offset is committed. */
static void failed_deliveries_are_retried(void **state)
{
    fx *f = *state;
    const char *ids[] = {"retry-1"};
    const char *code[] = {"echo hello"};
    produce_requests(f, 1, ids, code, 0);
    /* The worker's next three Produce requests fail; its consumer only
     * fetches, so these hit its result. */
    rd_kafka_mock_push_request_errors(f->mc, API_PRODUCE, 3, RD_KAFKA_RESP_ERR_INVALID_RECORD,
                                      RD_KAFKA_RESP_ERR_INVALID_RECORD,
                                      RD_KAFKA_RESP_ERR_INVALID_RECORD);
    running_worker *rw = worker_start(f, "w-retry", NULL);
    got res;
    read_topic(f, "res", 1, 20000, &res);
    assert_int_equal(wait_committed(f, 0, 1, 10000), 1);
    worker_finish(rw);
    got again, dead;
    read_topic(f, "res", 0, 1500, &again);
    read_topic(f, "dlq", 0, 500, &dead);
    assert_int_equal(again.n, 1);
    assert_string_equal(again.res[0].id, "retry-1");
    assert_int_equal(again.res[0].status, CF_STATUS_SUCCESS);
    assert_int_equal(dead.n, 0);
    got_clear(&res);
    got_clear(&again);
}

/* A result that cannot be delivered after its tries: the request itself is
 * dead-lettered with its origin and the reason, and committed. */
static void undeliverable_result_is_dead_lettered(void **state)
{
    fx *f = *state;
    const char *ids[] = {"undeliverable-1"};
    const char *code[] = {"echo hello"};
    produce_requests(f, 1, ids, code, 0);
    rd_kafka_mock_push_request_errors(f->mc, API_PRODUCE, 5, RD_KAFKA_RESP_ERR_INVALID_RECORD,
                                      RD_KAFKA_RESP_ERR_INVALID_RECORD,
                                      RD_KAFKA_RESP_ERR_INVALID_RECORD,
                                      RD_KAFKA_RESP_ERR_INVALID_RECORD,
                                      RD_KAFKA_RESP_ERR_INVALID_RECORD);
    running_worker *rw = worker_start(f, "w-dead", NULL);
    got dead;
    read_topic(f, "dlq", 1, 30000, &dead);
    assert_int_equal(wait_committed(f, 0, 1, 10000), 1);
    worker_finish(rw);
    assert_int_equal(dead.n, 1);
    assert_string_equal(dead.origin[0], "req/0/0");
    assert_non_null(strstr(dead.reason[0], "result could not be delivered"));
    got res;
    read_topic(f, "res", 0, 1000, &res);
    assert_int_equal(res.n, 0);
}

/* The broker stops answering for delay_ms (0: answers again): a network
 * partition, where requests hang rather than fail fast.  Not
 * rd_kafka_mock_broker_set_down(): librdkafka 2.0.2 closes the listener and
 * re-binds its port at once, and when the kernel has handed that port to
 * another socket in between, the mock cluster asserts and takes the test
 * process with it (seen once in the TSan run). */
static void broker_unreachable(fx *f, int delay_ms)
{
    assert_int_equal(rd_kafka_mock_broker_set_rtt(f->mc, 1, delay_ms), RD_KAFKA_RESP_ERR_NO_ERROR);
}

/* The broker goes away while results are being produced and comes back:
 * every request gets its answer and the position passes them all. */
static void broker_outage_loses_nothing(void **state)
{
    fx *f = *state;
    const char *ids[] = {"outage-1", "outage-2", "outage-3", "outage-4"};
    char code[4][256];
    const char *codes[4];
    for (int i = 0; i < 4; i++) {
        snprintf(code[i], sizeof(code[i]), "touch %s/started-%d; sleep 1; echo %d", f->dir, i, i);
        codes[i] = code[i];
    }
    produce_requests(f, 4, ids, codes, 0);
    running_worker *rw = worker_start(f, "w-outage", NULL);
    char first[128];
    snprintf(first, sizeof(first), "%s/started-0", f->dir);
    int64_t until = cf_mono_us() + 20 * 1000000LL;
    while (access(first, F_OK) != 0 && cf_mono_us() < until)
        usleep(20 * 1000);
    assert_int_equal(access(first, F_OK), 0);
    /* The first results come due while the broker is away. */
    broker_unreachable(f, 6000);
    sleep(4); /* they time out (message.timeout.ms 2 s) and are retried */
    broker_unreachable(f, 0);
    /* The group rejoins after its session timed out, and the requests are
     * read again: the committed position says when all are answered. */
    got res, dead;
    assert_int_equal(wait_committed(f, 0, 4, 60000), 4);
    worker_finish(rw);
    read_topic(f, "res", 0, 3000, &res);
    read_topic(f, "dlq", 0, 500, &dead);
    for (size_t i = 0; i < 4; i++) {
        /* At least once: a result whose delivery timed out may have been
         * written too, before the retry; never none. */
        size_t answered = count_id(&res, ids[i]);
        for (size_t d = 0; d < dead.n; d++)
            if (strcmp(dead.key[d], ids[i]) == 0)
                answered++; /* its dead letter */
        if (answered == 0)
            fail_msg("%s has no answer", ids[i]);
    }
    got_clear(&res);
}

/* SIGTERM with the broker gone: the worker stops within shutdown-grace plus
 * max(shutdown-kafka-timeout, session timeout) (it used to hang for minutes
 * in its final synchronous commit), leaving what it did not commit for
 * redelivery. */
static void shutdown_is_bounded_without_a_broker(void **state)
{
    fx *f = *state;
    const char *ids[] = {"bye-1", "bye-2"};
    char code[2][256];
    const char *codes[2];
    for (int i = 0; i < 2; i++) {
        snprintf(code[i], sizeof(code[i]), "touch %s/bye-%d; sleep 30", f->dir, i);
        codes[i] = code[i];
    }
    produce_requests(f, 2, ids, codes, 0);
    const char *extra[] = {"shutdown-grace", "1s", NULL};
    running_worker *rw = worker_start(f, "w-bye", extra);
    char first[128];
    snprintf(first, sizeof(first), "%s/bye-0", f->dir);
    int64_t until = cf_mono_us() + 20 * 1000000LL;
    while (access(first, F_OK) != 0 && cf_mono_us() < until)
        usleep(20 * 1000);
    assert_int_equal(access(first, F_OK), 0);
    broker_unreachable(f, 60000);
    int64_t t0 = cf_mono_us();
    worker_finish(rw);
    int64_t took = cf_mono_us() - t0;
    fprintf(stderr, "shutdown without a broker took %.1f s\n", took / 1e6);
    /* 1 s grace + max(shutdown-kafka-timeout 5 s, session timeout 6 s: the
     * destroy waits for librdkafka's pending commits that long) + slack */
    assert_true(took < 9 * 1000000LL);
    broker_unreachable(f, 0);
}

/* A reply_to topic the broker does not have: the result reaches the
 * profile's result topic with reply_to_error, and the offset is committed
 * (before: the partition stalled behind it). */
static void unknown_reply_to_topic_falls_back(void **state)
{
    fx *f = *state;
    const char *ids[] = {"nowhere-1", "after-1"};
    const char *code[] = {"echo lost?", "echo next"};
    produce_requests_to(f, 1, &ids[0], &code[0], 0, "no.such.topic");
    produce_requests(f, 1, &ids[1], &code[1], 0);
    /* The mock broker would create any topic asked for: make it answer as
     * a broker without the topic does. */
    rd_kafka_mock_topic_set_error(f->mc, "no.such.topic", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
    const char *extra[] = {"profile.default.reply-to", "*", "kafka.topic.metadata.propagation.max.ms", "1000", NULL};
    running_worker *rw = worker_start(f, "w-reply", extra);
    got res;
    read_topic(f, "res", 2, 30000, &res);
    assert_int_equal(wait_committed(f, 0, 2, 10000), 2);
    worker_finish(rw);
    assert_int_equal(res.n, 2);
    size_t fell_back = 0;
    for (size_t i = 0; i < res.n; i++) {
        assert_int_equal(res.res[i].status, CF_STATUS_SUCCESS);
        if (strcmp(res.res[i].id, "nowhere-1") == 0) {
            assert_non_null(res.res[i].reply_to_error);
            assert_non_null(strstr(res.res[i].reply_to_error, "no.such.topic"));
            fell_back++;
        }
    }
    assert_int_equal(fell_back, 1);
    got_clear(&res);
}

/* A rebalance moves a partition while its request runs: the old owner
 * stops it (after rebalance-wait) before the new owner starts it, so the
 * two runs never overlap and only the new owner answers. */
static void revoke_stops_the_running_execution(void **state)
{
    fx *f = *state;
    char code[2][512];
    const char *ids[] = {"moving-0", "moving-1"};
    for (int i = 0; i < 2; i++)
        snprintf(code[i], sizeof(code[i]),
                 "exec 9>>%s/lock-%d; if ! flock -n 9; then echo overlap >> %s/overlap; exit 3; fi; "
                 "echo start >> %s/starts-%d; sleep 12; echo done-%d",
                 f->dir, i, f->dir, f->dir, i, i);
    const char *c0[] = {code[0]}, *c1[] = {code[1]};
    produce_requests(f, 1, &ids[0], c0, 0);
    produce_requests(f, 1, &ids[1], c1, 1);
    const char *extra[] = {"rebalance-wait", "1s", NULL};
    running_worker *a = worker_start(f, "w-a", extra);
    /* Both partitions are A's and both requests run. */
    char p0[128], p1[128];
    snprintf(p0, sizeof(p0), "%s/starts-0", f->dir);
    snprintf(p1, sizeof(p1), "%s/starts-1", f->dir);
    int64_t until = cf_mono_us() + 15 * 1000000LL;
    while ((access(p0, F_OK) != 0 || access(p1, F_OK) != 0) && cf_mono_us() < until)
        usleep(50 * 1000);
    assert_int_equal(access(p0, F_OK), 0);
    assert_int_equal(access(p1, F_OK), 0);
    running_worker *b = worker_start(f, "w-b", extra);
    got res;
    read_topic(f, "res", 2, 60000, &res);
    assert_int_equal(wait_committed(f, 0, 1, 10000), 1);
    assert_int_equal(wait_committed(f, 1, 1, 10000), 1);
    worker_finish(b);
    worker_finish(a);
    got all;
    read_topic(f, "res", 0, 1500, &all);
    char ov[128];
    snprintf(ov, sizeof(ov), "%s/overlap", f->dir);
    assert_int_not_equal(access(ov, F_OK), 0); /* no run found another still going */
    assert_int_equal(all.n, 2);
    size_t by_b = 0;
    for (size_t i = 0; i < all.n; i++) {
        assert_int_equal(all.res[i].status, CF_STATUS_SUCCESS);
        assert_int_equal(count_id(&all, all.res[i].id), 1);
        if (strcmp(all.res[i].meta.worker, "w-b") == 0)
            by_b++;
    }
    /* One partition moved to B: its request ran again there, once. */
    assert_int_equal(by_b, 1);
    got_clear(&res);
    got_clear(&all);
}

/* The pid a program wrote to dir/name, or -1. */
static long read_pid(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *fp = fopen(path, "r");
    long pid = -1;
    if (fp) {
        if (fscanf(fp, "%ld", &pid) != 1)
            pid = -1;
        fclose(fp);
    }
    return pid;
}

static bool results_for(fx *f, const char *const *ids, size_t n, int timeout_ms, got *res)
{
    read_topic(f, "res", 0, 10, res); /* nothing to wait for: read once */
    got_clear(res);
    int64_t until = cf_mono_us() + (int64_t)timeout_ms * 1000;
    for (;;) {
        read_topic(f, "res", 32, 1500, res);
        size_t have = 0;
        for (size_t i = 0; i < n; i++)
            have += count_id(res, ids[i]) > 0;
        if (have == n)
            return true;
        if (cf_mono_us() >= until)
            return false;
        got_clear(res);
    }
}

extern char **environ;

/* Where the worker program is: CF_BINARY_DIR's; false (and the test
 * skips) in a tree that builds only the unit targets (the TSan stage of
 * tests/run_all.sh), where the program is not there to start. */
static bool worker_program(char *bin, size_t size)
{
    const char *bindir = getenv("CF_BINARY_DIR");
    snprintf(bin, size, "%s/worker/codefleet-worker", bindir ? bindir : ".");
    if (access(bin, X_OK) == 0)
        return true;
    print_message("%s not built in this tree: skipping\n", bin);
    return false;
}

/* The worker program (worker_program's), on the mock cluster, its output
 * in logp; extra: more flags (NULL-terminated) or NULL. */
static pid_t spawn_worker_program(fx *f, const char *id, const char *logp, const char *const *extra)
{
    char bin[1024];
    if (!worker_program(bin, sizeof(bin)))
        fail_msg("%s not found (CF_BINARY_DIR)", bin);
    const char *argv[48] = {bin, "--brokers", f->bootstraps, "--group", "program", "--worker-id", id,
                            "--request-topic", "req", "--result-topic", "res", "--dlq-topic", "dlq",
                            "--events-topic", "events", "--workers-topic=", "--cancel-topic-suffix=",
                            "--backends", "process", "--profile.default.backends=process",
                            "--profile.default.network=enabled", "--work-root", f->dir, "--log-level", "info"};
    size_t n = 25;
    for (size_t i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        /* Not the settings of a stack this test may run beside
         * (CODEFLEET_WORKER_CONFIG and the like): the mock cluster's. */
        for (;;) {
            char name[256] = "";
            for (char **e = environ; *e; e++)
                if (strncmp(*e, "CODEFLEET_", 10) == 0) {
                    size_t l = strcspn(*e, "=");
                    snprintf(name, sizeof(name), "%.*s", (int)(l < 255 ? l : 255), *e);
                    break;
                }
            if (!name[0] || unsetenv(name) != 0)
                break;
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* The worker program stopping while the broker refuses connections, with
 * an answered request's offset not yet committed (the auto-commit put
 * off): under KIP-848 librdkafka holds that commit for the coordinator for
 * its fixed 45 s session default, and the worker's stop took grace + 45 s;
 * the program now leaves such a consumer to its exit (cf_worker_exiting):
 * grace (1 s) + shutdown-kafka-timeout (5 s) + a margin for a busy
 * machine, against the 45 s it took. */
static void stop_without_a_broker_is_bounded_on_kip848(void **state)
{
    fx *f = *state;
    char bin[1024];
    if (!worker_program(bin, sizeof(bin)))
        skip();
    const char *ids[] = {"stop-1"}, *code[] = {"echo stop"};
    produce_requests(f, 1, ids, code, 0);
    char logp[300];
    snprintf(logp, sizeof(logp), "%s/stop.log", f->dir);
    const char *extra[] = {"--shutdown-grace=1s", "--kafka.auto.commit.interval.ms=600000", NULL};
    pid_t pid = spawn_worker_program(f, "w-stop", logp, extra);
    got res;
    bool answered = results_for(f, ids, 1, 60000, &res);
    got_clear(&res);
    /* The answer's offset is stored by the worker's next turn (every 200 ms
     * at most): its stop must then commit it.  Stored or not, the bound
     * below holds; stored is the case that took 45 s. */
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "grep -q 'group-protocol auto: classic' %s", logp);
    bool classic = system(cmd) == 0;
    assert_int_equal(rd_kafka_mock_broker_set_down(f->mc, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    int64_t t0 = cf_mono_us();
    kill(pid, SIGTERM);
    int status = 0;
    pid_t r;
    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && cf_mono_us() - t0 < 120 * 1000000LL)
        usleep(20 * 1000);
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    int64_t took = cf_mono_us() - t0;
    fprintf(stderr, "the worker program stopped %.1f s after SIGTERM without a broker\n", took / 1e6);
    if (took >= 25 * 1000000LL) {
        snprintf(cmd, sizeof(cmd), "tail -n 30 %s >&2", logp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no worker log)\n");
    }
    assert_true(answered);
    assert_false(classic);
    assert_true(took < 25 * 1000000LL);
}

/* group-protocol auto against a broker without KIP-848: the worker (the
 * program: its main starts it again) joins with the classic protocol and
 * answers.  The mock broker stops offering ConsumerGroupHeartbeat, as
 * Kafka 3.x does not offer it; librdkafka then looks for another
 * coordinator for ever instead of failing, so the worker's join watchdog
 * has to notice (CONSUMERS_JOIN_WAIT_US, 20 s, after the broker answered). */
static void auto_falls_back_to_classic_without_kip848(void **state)
{
    fx *f = *state;
    char bin[1024];
    if (!worker_program(bin, sizeof(bin)))
        skip();
    assert_int_equal(rd_kafka_mock_set_apiversion(f->mc, 68 /* ConsumerGroupHeartbeat */, -1, -1),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    const char *ids[] = {"fallback-1"}, *code[] = {"echo on-classic"};
    produce_requests(f, 1, ids, code, 0);
    char logp[300];
    snprintf(logp, sizeof(logp), "%s/fallback.log", f->dir);
    pid_t pid = spawn_worker_program(f, "w-fallback", logp, NULL);
    got res;
    bool answered = results_for(f, ids, 1, 120000, &res);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "grep -q 'starting again with the classic group protocol' %s", logp);
    bool fell_back = system(cmd) == 0;
    if (!answered || !fell_back) {
        snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", logp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no worker log)\n");
    }
    assert_true(fell_back);
    assert_true(answered);
    if (res.res[0].status != CF_STATUS_SUCCESS)
        fail_msg("fallback-1: status %d: %s", (int)res.res[0].status, res.res[0].reason ? res.res[0].reason : "");
    got_clear(&res);
}

/* The shape of the worker when its session times out during a broker
 * outage (issue 28): every partition paused (its slots full), one
 * execution running, or nothing to do. */
typedef enum outage_shape { OUTAGE_PAUSED, OUTAGE_BUSY, OUTAGE_IDLE } outage_shape;

/* The broker stops answering long enough for the group session to time
 * out: the worker loses its partitions, stops their executions, and when
 * the broker is back the group gives the same partitions to the same
 * worker.  It must then consume them: every request is answered, within a
 * bound (the session timeout, the rejoin, the runs), never "some unrelated
 * rebalance later".  Before the fix, the PAUSED shape never answered: the
 * application pause flag stays on a partition across its revocation in
 * librdkafka, while the worker's own record of it was reset. */
static void lost_and_reassigned(fx *f, outage_shape shape)
{
    /* r0 runs long the first time (it is running when the session times
     * out), quickly when run again; the others are quick. */
    enum { N = 6 };
    char ids_buf[N][32], code_buf[N][512];
    const char *ids[N], *codes[N];
    for (int i = 0; i < N; i++) {
        snprintf(ids_buf[i], sizeof(ids_buf[i]), "outage-%d-%d", (int)shape, i);
        if (i == 0)
            snprintf(code_buf[i], sizeof(code_buf[i]),
                     "if mkdir %s/once-%d 2>/dev/null; then echo $$ > %s/pid-%d; exec sleep 120; fi; echo again-%d",
                     f->dir, i, f->dir, i, i);
        else
            snprintf(code_buf[i], sizeof(code_buf[i]), "echo ok-%d", i);
        ids[i] = ids_buf[i];
        codes[i] = code_buf[i];
    }
    /* PAUSED: one slot, no prefetch: the running r0 fills the worker and
     * every partition is paused.  BUSY: room left, nothing paused. */
    /* The partition guard off: the fix itself is under test here. */
    const char *paused_extra[] = {"slots", "1", "prefetch", "0", "partition-stall", "1h", NULL};
    const char *busy_extra[] = {"slots", "2", "prefetch", "8", "partition-stall", "1h", NULL};
    running_worker *rw = NULL;
    if (shape == OUTAGE_IDLE) {
        rw = worker_start(f, "w-idle", busy_extra);
        /* Idle and assigned: one request answered first. */
        const char *warm_id[] = {"outage-idle-warm"}, *warm_code[] = {"echo warm"};
        produce_requests(f, 1, warm_id, warm_code, 0);
        got warm;
        assert_true(results_for(f, warm_id, 1, 30000, &warm));
        got_clear(&warm);
    } else {
        /* r0 first, alone on partition 0, then the rest on both. */
        produce_requests(f, 1, &ids[0], &codes[0], 0);
        rw = worker_start(f, shape == OUTAGE_PAUSED ? "w-paused" : "w-busy",
                          shape == OUTAGE_PAUSED ? paused_extra : busy_extra);
        int64_t until = cf_mono_us() + 30 * 1000000LL;
        while (read_pid(f->dir, "pid-0") < 0 && cf_mono_us() < until)
            usleep(20 * 1000);
        assert_true(read_pid(f->dir, "pid-0") > 0);
        if (shape == OUTAGE_PAUSED) {
            /* More work behind r0: taken only once r0 is done. */
            produce_requests(f, 2, &ids[1], &codes[1], 0);
            produce_requests(f, 3, &ids[3], &codes[3], 1);
        }
    }
    /* The outage: nothing answers until the worker has given up its
     * session, which it shows by stopping r0 (lost partitions' runs stop at
     * once); idle, by the time the session timeout has surely passed. */
    broker_unreachable(f, 30000);
    if (shape == OUTAGE_IDLE) {
        /* No execution to watch: the worker says it holds nothing. */
        cf_worker_partitions wp;
        int64_t until = cf_mono_us() + 30 * 1000000LL;
        do {
            usleep(50 * 1000);
            cf_worker_partitions_get(rw->w, &wp);
        } while (wp.assigned > 0 && cf_mono_us() < until);
        assert_int_equal(wp.assigned, 0);
    } else {
        long pid = read_pid(f->dir, "pid-0");
        int64_t until = cf_mono_us() + 30 * 1000000LL;
        while (kill((pid_t)pid, 0) == 0 && cf_mono_us() < until)
            usleep(50 * 1000);
        assert_int_not_equal(kill((pid_t)pid, 0), 0);
    }
    broker_unreachable(f, 0);
    int64_t back = cf_mono_us();
    if (shape != OUTAGE_PAUSED) {
        produce_requests(f, 2, &ids[1], &codes[1], 0);
        produce_requests(f, 3, &ids[3], &codes[3], 1);
    }
    /* Bound: the rejoin (a session timeout at most) plus the runs, with
     * room for a slow machine; the bug never answered at all. */
    got res;
    bool all = results_for(f, shape == OUTAGE_PAUSED || shape == OUTAGE_BUSY ? ids : ids + 1,
                           shape == OUTAGE_IDLE ? N - 1 : N, 45000, &res);
    double took = (cf_mono_us() - back) / 1e6;
    fprintf(stderr, "shape %d: answered %s %.1f s after the broker came back\n", (int)shape,
            all ? "all" : "NOT all", took);
    worker_finish(rw);
    assert_true(all);
    got_clear(&res);
}

static void lost_while_paused_then_reassigned(void **state)
{
    lost_and_reassigned(*state, OUTAGE_PAUSED);
}

static void lost_while_busy_then_reassigned(void **state)
{
    lost_and_reassigned(*state, OUTAGE_BUSY);
}

static void lost_while_idle_then_reassigned(void **state)
{
    lost_and_reassigned(*state, OUTAGE_IDLE);
}

/* The partition guard (issue 28, part 2): a partition held, not paused by
 * the worker, with requests waiting, and nothing taken from it for
 * partition-stall while the worker has room, is noticed and moved again;
 * nothing is skipped.  The stall is injected: the partition is paused in
 * the consumer behind the worker's back (what librdkafka 2.0.2 did after a
 * lost assignment). */
static void guard_moves_a_stalled_partition(void **state)
{
    fx *f = *state;
    const char *extra[] = {"partition-stall", "2s", NULL};
    running_worker *rw = worker_start(f, "w-guard", extra);
    const char *warm_id[] = {"guard-warm"}, *warm_code[] = {"echo warm"};
    produce_requests(f, 1, warm_id, warm_code, 0);
    got res;
    assert_true(results_for(f, warm_id, 1, 30000, &res));
    got_clear(&res);
    assert_int_equal(cf_worker_fault_pause_unrecorded(rw->w, "req", 0), 0);
    enum { N = 5 };
    char ids_buf[N][32];
    const char *ids[N], *codes[N];
    for (int i = 0; i < N; i++) {
        snprintf(ids_buf[i], sizeof(ids_buf[i]), "guard-%d", i);
        ids[i] = ids_buf[i];
        codes[i] = "echo after-the-stall";
    }
    produce_requests(f, N, ids, codes, 0);
    int64_t t0 = cf_mono_us();
    /* Bound: partition-stall (2 s) + its twice-a-second look + the probe +
     * the runs, with room for a busy machine. */
    bool all = results_for(f, ids, N, 30000, &res);
    double took = (cf_mono_us() - t0) / 1e6;
    cf_worker_partitions wp;
    cf_worker_partitions_get(rw->w, &wp);
    fprintf(stderr, "guard: answered %s in %.1f s; stalls %" PRIu64 ", recovered by resume %" PRIu64
                    ", seek %" PRIu64 ", rejoin %" PRIu64 ", stalled now %" PRId64 "\n",
            all ? "all" : "NOT all", took, wp.stalls, wp.recoveries[0], wp.recoveries[1], wp.recoveries[2],
            wp.stalled);
    worker_finish(rw);
    assert_true(all);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(count_id(&res, ids[i]), 1); /* nothing skipped, nothing twice */
    assert_true(wp.stalls >= 1);
    assert_true(wp.recoveries[0] >= 1); /* the cheapest step did it */
    assert_int_equal(wp.stalled, 0);
    assert_int_equal(wait_committed(f, 0, N + 1, 10000), N + 1);
    got_clear(&res);
}

int main(void)
{
    struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(instance_id_override_is_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(failed_deliveries_are_retried, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(undeliverable_result_is_dead_lettered, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(broker_outage_loses_nothing, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(shutdown_is_bounded_without_a_broker, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(unknown_reply_to_topic_falls_back, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(revoke_stops_the_running_execution, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(lost_while_paused_then_reassigned, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(lost_while_busy_then_reassigned, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(lost_while_idle_then_reassigned, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(guard_moves_a_stalled_partition, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(auto_falls_back_to_classic_without_kip848, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(stop_without_a_broker_is_bounded_on_kip848, fx_setup, fx_teardown),
    };
    return cf_run_group_shard(tests);
}
