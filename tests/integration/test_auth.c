/* An authenticated fleet (issue 7, part 3): the stack's broker takes
 * SASL/SCRAM only and authorizes with ACLs; Redis takes ACL users only.
 * A tenant principal may write only its own request topic and read only
 * its own results; the worker principal's ACLs are enough for the worker to
 * serve a tenant; nothing gets in without credentials. */
#include "it_support.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_util.h"

#define SEC 1000000LL

static const char *topic_of(const char *base_env, const char *fallback, const char *tenant, char *buf, size_t size)
{
    const char *b = getenv(base_env);
    snprintf(buf, size, "%s%s%s", b && *b ? b : fallback, tenant ? "." : "", tenant ? tenant : "");
    return buf;
}

#define REQUIRE_AUTH_STACK()                                                                      \
    do {                                                                                          \
        IT_REQUIRE_BROKER();                                                                      \
        char _b[256];                                                                             \
        if (!it_principal_config("tenant-a", _b, sizeof(_b))) {                                   \
            print_message("CF_TEST_SECRETS not set: not the stack of deploy/stack.sh; skipping\n"); \
            skip();                                                                               \
        }                                                                                         \
    } while (0)

static rd_kafka_t *client_as(const char *principal, rd_kafka_type_t type, const char *group)
{
    char path[512], errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", it_brokers(), errstr, sizeof(errstr)))
        fail_msg("%s", errstr);
    if (principal) {
        cf_kvlist kv = {0};
        it_load_kafka_props(it_principal_config(principal, path, sizeof(path)), &kv);
        for (size_t i = 0; i < kv.count; i++)
            if (rd_kafka_conf_set(conf, kv.items[i].key, kv.items[i].value, errstr, sizeof(errstr)))
                fail_msg("%s: %s", kv.items[i].key, errstr);
        cf_kvlist_free(&kv);
    }
    if (group && (rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)) ||
                  rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr))))
        fail_msg("%s", errstr);
    rd_kafka_conf_set(conf, "message.timeout.ms", "8000", errstr, sizeof(errstr));
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
    if (!rk)
        fail_msg("client: %s", errstr);
    return rk;
}

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    *(rd_kafka_resp_err_t *)m->_private = m->err;
}

/* Produces one message to partition 0 as principal; returns the delivery
 * error. */
static rd_kafka_resp_err_t produce_as(const char *principal, const char *topic)
{
    char path[512], errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", it_brokers(), errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "message.timeout.ms", "8000", errstr, sizeof(errstr));
    if (principal) {
        cf_kvlist kv = {0};
        it_load_kafka_props(it_principal_config(principal, path, sizeof(path)), &kv);
        for (size_t i = 0; i < kv.count; i++)
            rd_kafka_conf_set(conf, kv.items[i].key, kv.items[i].value, errstr, sizeof(errstr));
        cf_kvlist_free(&kv);
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_dr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk)
        fail_msg("producer: %s", errstr);
    rd_kafka_resp_err_t result = RD_KAFKA_RESP_ERR__IN_PROGRESS;
    rd_kafka_resp_err_t e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                                              RD_KAFKA_V_VALUE((void *)"x", 1),
                                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(&result),
                                              RD_KAFKA_V_END);
    if (e)
        result = e;
    rd_kafka_flush(rk, 10000);
    rd_kafka_destroy(rk);
    return result;
}

/* The topic's error in a metadata answer to principal (Describe). */
static rd_kafka_resp_err_t describe_as(const char *principal, const char *topic)
{
    rd_kafka_t *rk = client_as(principal, RD_KAFKA_PRODUCER, NULL);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 8000);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        e = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return e;
}

/* Reads every partition-0 message of topic from the start as principal
 * for up to 4 s; *n counts them.  Returns the first error, or NO_ERROR. */
static rd_kafka_resp_err_t consume_as(const char *principal, const char *topic, int *n)
{
    char group[96];
    it_unique_name("codefleet-authtest", group, sizeof(group));
    rd_kafka_t *rk = client_as(principal, RD_KAFKA_CONSUMER, group);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_resp_err_t got = RD_KAFKA_RESP_ERR_NO_ERROR;
    *n = 0;
    int64_t until = cf_mono_us() + 4 * SEC;
    while (cf_mono_us() < until && got == RD_KAFKA_RESP_ERR_NO_ERROR && *n == 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            got = m->err;
        else if (!m->err)
            (*n)++;
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got;
}

static bool denied(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED || e == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED ||
           e == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED;
}

/* Authenticates as principal with its stack credentials but mechanism
 * mech (and, when bad_password, a wrong password): whether a metadata
 * request was answered, and whether librdkafka reported an authentication
 * failure. */
static void on_auth_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    (void)reason;
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION)
        *(bool *)opaque = true;
}

static bool metadata_with_mechanism(const char *principal, const char *mech, bool bad_password, bool *auth_failed)
{
    char path[512], errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", it_brokers(), errstr, sizeof(errstr));
    cf_kvlist kv = {0};
    it_load_kafka_props(it_principal_config(principal, path, sizeof(path)), &kv);
    for (size_t i = 0; i < kv.count; i++)
        rd_kafka_conf_set(conf, kv.items[i].key, kv.items[i].value, errstr, sizeof(errstr));
    cf_kvlist_free(&kv);
    if (rd_kafka_conf_set(conf, "sasl.mechanisms", mech, errstr, sizeof(errstr)) ||
        (bad_password && rd_kafka_conf_set(conf, "sasl.password", "not-the-password", errstr, sizeof(errstr))))
        fail_msg("%s", errstr);
    *auth_failed = false;
    rd_kafka_conf_set_error_cb(conf, on_auth_error);
    rd_kafka_conf_set_opaque(conf, auth_failed);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk)
        fail_msg("client: %s", errstr);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, NULL, &md, 8000);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_metadata_destroy(md);
    /* The error callback is served by poll. */
    for (int i = 0; i < 10 && !*auth_failed; i++)
        rd_kafka_poll(rk, 50);
    rd_kafka_destroy(rk);
    return e == RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* SCRAM-SHA-512 is what the stack's clients use; every principal also has
 * SCRAM-SHA-256 credentials (a client with only that hash); a wrong
 * password is refused under both, and PLAIN is not offered unless the
 * stack was started for it (CODEFLEET_KAFKA_SASL=plain). */
static void test_scram_mechanisms(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    char path[512];
    cf_kvlist kv = {0};
    it_load_kafka_props(it_principal_config("tenant-a", path, sizeof(path)), &kv);
    const char *configured = cf_kvlist_get(&kv, "sasl.mechanisms");
    bool plain_stack = configured && strcmp(configured, "PLAIN") == 0;
    if (!plain_stack)
        assert_string_equal(configured, "SCRAM-SHA-512");
    cf_kvlist_free(&kv);
    bool auth_failed;
    assert_true(metadata_with_mechanism("tenant-a", "SCRAM-SHA-512", false, &auth_failed));
    assert_true(metadata_with_mechanism("tenant-a", "SCRAM-SHA-256", false, &auth_failed));
    assert_false(metadata_with_mechanism("tenant-a", "SCRAM-SHA-512", true, &auth_failed));
    assert_true(auth_failed);
    assert_false(metadata_with_mechanism("tenant-a", "SCRAM-SHA-256", true, &auth_failed));
    assert_true(auth_failed);
    if (!plain_stack) {
        assert_false(metadata_with_mechanism("tenant-a", "PLAIN", false, &auth_failed));
        assert_true(auth_failed);
    }
}

static void test_tenant_topics(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    char req_a[200], req_b[200], res_a[200], res_b[200], req[200], res[200];
    topic_of("CF_TEST_TOPIC_REQUESTS", "codefleet.requests", "tenant-a", req_a, sizeof(req_a));
    topic_of("CF_TEST_TOPIC_REQUESTS", "codefleet.requests", "tenant-b", req_b, sizeof(req_b));
    topic_of("CF_TEST_TOPIC_RESULTS", "codefleet.results", "tenant-a", res_a, sizeof(res_a));
    topic_of("CF_TEST_TOPIC_RESULTS", "codefleet.results", "tenant-b", res_b, sizeof(res_b));
    topic_of("CF_TEST_TOPIC_REQUESTS", "codefleet.requests", NULL, req, sizeof(req));
    topic_of("CF_TEST_TOPIC_RESULTS", "codefleet.results", NULL, res, sizeof(res));

    /* Its own request topic: yes.  Another tenant's, the default one, a
     * result topic: no. */
    rd_kafka_resp_err_t e = produce_as("tenant-a", req_a);
    if (e)
        fail_msg("tenant-a writing %s: %s", req_a, rd_kafka_err2str(e));
    /* Its own cancel topic: yes; another tenant's, the default one: no
     * (so it can cancel only its own requests). */
    char can_a[220], can_b[220], can[220];
    snprintf(can_a, sizeof(can_a), "%s.cancel", req_a);
    snprintf(can_b, sizeof(can_b), "%s.cancel", req_b);
    snprintf(can, sizeof(can), "%s.cancel", req);
    e = produce_as("tenant-a", can_a);
    if (e)
        fail_msg("tenant-a writing %s: %s", can_a, rd_kafka_err2str(e));
    const char *not_writable[] = {req_b, req, res_a, res, can_b, can};
    for (size_t i = 0; i < 6; i++) {
        e = produce_as("tenant-a", not_writable[i]);
        if (!denied(e))
            fail_msg("tenant-a writing %s: %s (want an authorization failure)", not_writable[i],
                     rd_kafka_err2str(e));
    }
    /* Its own results: yes.  Another tenant's, the default ones: no (a
     * message the admin put there first never arrives, and the broker does
     * not even describe the topic to tenant-a). */
    const char *readable_and_not[] = {res_a, res_b, res, req_b};
    for (size_t i = 0; i < 4; i++) {
        int got = 0;
        e = produce_as("admin", readable_and_not[i]);
        if (e)
            fail_msg("admin writing %s: %s", readable_and_not[i], rd_kafka_err2str(e));
        e = consume_as("tenant-a", readable_and_not[i], &got);
        rd_kafka_resp_err_t de = describe_as("tenant-a", readable_and_not[i]);
        if (i == 0) {
            if (e || got == 0 || de)
                fail_msg("tenant-a reading %s: %s, %d message(s), describe %s", res_a, rd_kafka_err2str(e), got,
                         rd_kafka_err2str(de));
        } else if (got != 0 || !denied(de)) {
            fail_msg("tenant-a reading %s: %d message(s), describe %s (want none, an authorization failure)",
                     readable_and_not[i], got, rd_kafka_err2str(de));
        }
    }
    /* The workers' reports (codefleet doctor trusts what live workers say
     * there): a tenant may neither forge one nor read the fleet's. */
    char workers_topic[200];
    const char *wt = getenv("CF_TEST_TOPIC_WORKERS");
    snprintf(workers_topic, sizeof(workers_topic), "%s", wt && *wt ? wt : "codefleet.workers");
    e = produce_as("tenant-a", workers_topic);
    if (!denied(e))
        fail_msg("tenant-a writing %s: %s (want an authorization failure)", workers_topic, rd_kafka_err2str(e));
    {
        /* (A compacted topic takes keyed messages only: the describe
         * refusal is the proof; nothing may be read either.) */
        int got = 0;
        consume_as("tenant-a", workers_topic, &got);
        rd_kafka_resp_err_t de = describe_as("tenant-a", workers_topic);
        if (got != 0 || !denied(de))
            fail_msg("tenant-a reading %s: %d message(s), describe %s (want none, an authorization failure)",
                     workers_topic, got, rd_kafka_err2str(de));
    }
    /* The worker principal cannot write requests (it only reads them). */
    e = produce_as("worker", req_a);
    if (!denied(e))
        fail_msg("worker writing %s: %s (want an authorization failure)", req_a, rd_kafka_err2str(e));
    /* No credentials: no session at all (the broker speaks SASL only). */
    e = produce_as(NULL, req_a);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        fail_msg("an unauthenticated producer wrote to %s", req_a);
}

/* A worker running as the worker principal serves tenant-a, which submits
 * and reads its results with its own credentials. */
static void test_tenant_through_the_fleet(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    it_topics t;
    memset(&t, 0, sizeof(t));
    topic_of("CF_TEST_TOPIC_REQUESTS", "codefleet.requests", "tenant-a", t.requests, sizeof(t.requests));
    topic_of("CF_TEST_TOPIC_RESULTS", "codefleet.results", "tenant-a", t.results, sizeof(t.results));
    topic_of("CF_TEST_TOPIC_DLQ", "codefleet.dlq", NULL, t.dlq, sizeof(t.dlq));
    /* A group of its own (the stack's workers may be serving tenant-a in
     * theirs), which the worker principal may use only once the admin
     * grants it: what an operator adding a worker group does. */
    it_unique_name("auth-workers", t.group, sizeof(t.group));
    cf_kafka_acl grant = {.principal = "User:worker", .operation = "read", .resource = "group", .name = t.group};
    cf_error gerr;
    cf_error_clear(&gerr);
    if (cf_kafka_acls_create(it_brokers(), it_kafka(), &grant, 1, 30 * SEC, &gerr) < 0)
        fail_msg("granting the worker group: %s", gerr.msg);
    char wconf[512], a_conf[600], a_topic[300], a_res[300];
    snprintf(a_conf, sizeof(a_conf), "--config=%s", it_principal_config("worker", wconf, sizeof(wconf)));
    snprintf(a_topic, sizeof(a_topic), "--profile.tenant-a.topic=%s", t.requests);
    snprintf(a_res, sizeof(a_res), "--profile.tenant-a.result-topic=%s", t.results);
    char def_req[200];
    topic_of("CF_TEST_TOPIC_REQUESTS", "codefleet.requests", NULL, def_req, sizeof(def_req));
    char a_defreq[260];
    snprintf(a_defreq, sizeof(a_defreq), "--request-topic=%s", def_req);
    char def_res[200], a_defres[260];
    topic_of("CF_TEST_TOPIC_RESULTS", "codefleet.results", NULL, def_res, sizeof(def_res));
    snprintf(a_defres, sizeof(a_defres), "--result-topic=%s", def_res);
    const char *extra[] = {a_conf, a_defreq, a_defres, a_topic, a_res, "--profile.tenant-a.backends=process",
                           "--profile.tenant-a.network=enabled", NULL};
    it_worker w;
    it_worker_start(&w, &t, "auth-w1", extra);

    char tconf[512];
    cf_kvlist kv = {0};
    it_load_kafka_props(it_principal_config("tenant-a", tconf, sizeof(tconf)), &kv);
    cf_dispatcher_config cfg = {.brokers = it_brokers(),
                                .request_topic = t.requests,
                                .result_topic = t.results,
                                .collect_results = true,
                                .kafka = &kv};
    cf_dispatcher *d = NULL;
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_new(&cfg, &d, &err) < 0)
        fail_msg("tenant-a dispatcher: %s", err.msg);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo served");
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    if (res.status != CF_STATUS_SUCCESS) {
        it_worker_dump_log(&w);
        fail_msg("status %s: %s", cf_status_name(res.status), res.reason ? res.reason : "-");
    }
    assert_int_equal(res.stdout_data.len, 7);
    assert_int_equal(memcmp(res.stdout_data.data, "served\n", 7), 0);
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
    cf_kvlist_free(&kv);
    assert_true(it_worker_stop(&w, SIGTERM, 20000) >= 0);
    /* The worker never needed more than its own principal (librdkafka
     * says it both ways). */
    assert_false(it_worker_log_contains(&w, "AUTHORIZATION_FAILED"));
    assert_false(it_worker_log_contains(&w, "authorization failed"));
}

/* Redis: no default user; the worker user reaches only codefleet keys and
 * no administrative command. */
/* The worker turns broker refusals into one line an operator can act on
 * (issue 15): a wrong password names the credentials to check, a principal
 * without the worker's ACLs names the grants it needs; librdkafka's raw
 * lines stay at debug level. */
static void test_worker_explains_refusals(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    it_topics t;
    it_topics_create(&t, "it-auth-explain", 1);
    const char *bad_password[] = {"--kafka.sasl.password=not-the-password", "--log-level=info", NULL};
    it_worker w;
    it_worker_start(&w, &t, "explain-pw", bad_password);
    bool said = it_worker_wait_log(&w, "refused the worker's credentials (", 20000) &&
                it_worker_log_contains(&w, "check kafka.sasl.mechanisms, kafka.sasl.username and kafka.sasl.password");
    /* librdkafka's own connection-failure lines (facility FAIL) only at
     * debug level. */
    bool raw = it_worker_log_contains(&w, "kafka: FAIL:");
    bool misleading = it_worker_log_contains(&w, "cannot reach the Kafka broker");
    it_worker_stop(&w, SIGTERM, 15000);
    if (!said || raw || misleading) {
        it_worker_dump_log(&w);
        fail_msg("wrong password: explained %d, raw librdkafka line %d, 'cannot reach' %d", said, raw, misleading);
    }

    char tconf[512], a_conf[600];
    snprintf(a_conf, sizeof(a_conf), "--config=%s", it_principal_config("tenant-a", tconf, sizeof(tconf)));
    const char *tenant[] = {a_conf, "--log-level=info", NULL};
    it_worker_start(&w, &t, "explain-acl", tenant);
    said = it_worker_wait_log(&w, "the broker denied this worker an operation", 20000);
    bool names_grants = it_worker_log_contains(&w, "its principal needs read on the request topics");
    it_worker_stop(&w, SIGTERM, 15000);
    if (!said || !names_grants) {
        it_worker_dump_log(&w);
        fail_msg("a principal without the worker's ACLs: no actionable line");
    }

    /* Redis refusing the worker's password: one line at start, naming the
     * settings to check. */
    if (it_redis()) {
        char a_redis[300];
        snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
        const char *bad_redis[] = {a_redis, "--redis-password=not-the-password", "--log-level=info", NULL};
        it_worker_start(&w, &t, "explain-redis", bad_redis);
        said = it_worker_wait_log(&w, "refused the worker's credentials", 20000) &&
               it_worker_log_contains(&w, "check redis-user and redis-password");
        it_worker_stop(&w, SIGTERM, 15000);
        if (!said) {
            it_worker_dump_log(&w);
            fail_msg("Redis refusing the password: no actionable line");
        }
    }
}

static void test_redis_acl_users(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    const char *r = it_redis();
    if (!r)
        skip();
    char host[128];
    snprintf(host, sizeof(host), "%s", r);
    char *colon = strrchr(host, ':');
    assert_non_null(colon);
    *colon = '\0';
    int port = atoi(colon + 1);
    redisContext *c = redisConnect(host, port);
    assert_true(c && !c->err);
    redisReply *rep = redisCommand(c, "GET cf:anything");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(rep->str, "NOAUTH"));
    freeReplyObject(rep);
    rep = redisCommand(c, "AUTH default nopass");
    assert_int_equal(rep->type, REDIS_REPLY_ERROR);
    freeReplyObject(rep);

    /* The worker user, from its settings file. */
    char path[512], line[256], user[64] = "", pass[128] = "";
    FILE *f = fopen(it_principal_config("worker", path, sizeof(path)), "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "redis-user = %63s", user) == 1)
            continue;
        sscanf(line, "redis-password = %127s", pass);
    }
    fclose(f);
    rep = redisCommand(c, "AUTH %s %s", user, pass);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    rep = redisCommand(c, "SET cf:authtest:%d x", (int)getpid());
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    /* Harmless if they did run: a regression must not wipe the stack. */
    static const char *const refused[] = {"SET other:key x", "KEYS cf:none-such*", "SWAPDB 0 0", "CONFIG GET maxmemory",
                                          "ACL LIST", "CLIENT LIST"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        rep = redisCommand(c, refused[i]);
        assert_non_null(rep);
        if (rep->type != REDIS_REPLY_ERROR || !strstr(rep->str, "NOPERM"))
            fail_msg("worker user ran '%s' (reply type %d)", refused[i], rep->type);
        freeReplyObject(rep);
    }
    rep = redisCommand(c, "DEL cf:authtest:%d", (int)getpid());
    freeReplyObject(rep);
    redisFree(c);
}

/* A topic the principal may not read is an ACL refusal, said as one: not
 * "the broker refused the credentials" (issue 33). */
static void test_cli_names_an_acl_refusal(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    char conf[256], req_a[200], res_a[200], res_b[200], reqf[260], resf[260], tmp[] = "/tmp/cf-auth-cli-XXXXXX";
    assert_non_null(it_principal_config("tenant-a", conf, sizeof(conf)));
    topic_of("CF_TEST_TOPIC_REQUESTS", "codefleet.requests", "tenant-a", req_a, sizeof(req_a));
    topic_of("CF_TEST_TOPIC_RESULTS", "codefleet.results", "tenant-a", res_a, sizeof(res_a));
    topic_of("CF_TEST_TOPIC_RESULTS", "codefleet.results", "tenant-b", res_b, sizeof(res_b));
    snprintf(reqf, sizeof(reqf), "--request-topic=%s", req_a);
    snprintf(resf, sizeof(resf), "--result-topic=%s", res_a);
    assert_non_null(mkdtemp(tmp));
    const char *args[] = {"--config", conf, reqf, resf, "--timeout=30s", "submit", "--reply-to", res_b, "--",
                          "/bin/true", NULL};
    static char out[16384], err[16384];
    int rc = it_cli_run(args, tmp, out, sizeof(out), err, sizeof(err));
    rmdir(tmp);
    if (rc != 6 || !strstr(err, "Topic authorization failed") || !strstr(err, "not allowed to use that topic") ||
        strstr(err, "refused the credentials"))
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
}

/* A wrong password is said as such, within the 2 s give-up the
 * unreachable cases have (it took the whole 10 s metadata wait before);
 * the bound asserted, 8 s, leaves room for a busy machine. */
static void test_cli_wrong_password_is_said_quickly(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    char conf[256], tmp[] = "/tmp/cf-auth-pw-XXXXXX", wrong[300];
    assert_non_null(it_principal_config("tenant-a", conf, sizeof(conf)));
    assert_non_null(mkdtemp(tmp));
    snprintf(wrong, sizeof(wrong), "%s/wrong.conf", tmp);
    FILE *in = fopen(conf, "r"), *out = fopen(wrong, "w");
    assert_non_null(in);
    assert_non_null(out);
    char line[1024];
    while (fgets(line, sizeof(line), in))
        fputs(strncmp(line, "kafka.sasl.password", 19) == 0 ? "kafka.sasl.password = not-the-password\n" : line, out);
    fclose(in);
    fclose(out);
    const char *args[] = {"--config", wrong, "submit", "--", "/bin/true", NULL};
    static char so[16384], se[16384];
    int64_t t0 = cf_mono_us();
    int rc = it_cli_run(args, tmp, so, sizeof(so), se, sizeof(se));
    int64_t took = cf_mono_us() - t0;
    unlink(wrong);
    rmdir(tmp);
    print_message("wrong password said after %.1f s\n", took / 1e6);
    if (rc == 0 || !strstr(se, "refused the credentials") || strstr(se, "not-the-password") || took >= 8 * SEC)
        fail_msg("rc %d after %.1f s\nstdout:\n%s\nstderr:\n%s", rc, took / 1e6, so, se);
}

/* A tenant that tries to grant itself another tenant's topic is refused,
 * in a line that says why, not the broker's internal request dump. */
static void test_tenant_acl_allow_is_refused_plainly(void **state)
{
    (void)state;
    REQUIRE_AUTH_STACK();
    char conf[256], req_b[200], rule[260], tmp[] = "/tmp/cf-auth-acl-XXXXXX";
    assert_non_null(it_principal_config("tenant-a", conf, sizeof(conf)));
    topic_of("CF_TEST_TOPIC_REQUESTS", "codefleet.requests", "tenant-b", req_b, sizeof(req_b));
    snprintf(rule, sizeof(rule), "write:topic:%s", req_b);
    assert_non_null(mkdtemp(tmp));
    const char *args[] = {"--config", conf, "acl", "allow", "User:tenant-a", rule, NULL};
    static char out[16384], err[16384];
    int rc = it_cli_run(args, tmp, out, sizeof(out), err, sizeof(err));
    rmdir(tmp);
    if (rc == 0 || !strstr(err, "not authorized: creating ACLs needs a super user's credentials") ||
        strstr(err, "connectionId") || strlen(err) > 400)
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scram_mechanisms),
        cmocka_unit_test(test_tenant_topics),
        cmocka_unit_test(test_tenant_through_the_fleet),
        cmocka_unit_test(test_redis_acl_users),
        cmocka_unit_test(test_worker_explains_refusals),
        cmocka_unit_test(test_cli_names_an_acl_refusal),
        cmocka_unit_test(test_cli_wrong_password_is_said_quickly),
        cmocka_unit_test(test_tenant_acl_allow_is_refused_plainly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
