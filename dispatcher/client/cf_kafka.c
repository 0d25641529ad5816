/* cf_kafka: Kafka plumbing shared by the dispatcher and the events
 * library.  See cf_kafka.h. */
#include "cf_kafka.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cf_log.h"
#include "cf_util.h"

/* How long a missing or leaderless topic is retried before giving up: long
 * enough for a topic created a moment ago, short enough that a typo in a
 * topic name is reported promptly. */
#define CF_KAFKA_UNKNOWN_TOPIC_RETRY_US 3000000
#define CF_KAFKA_TRANSIENT_RETRY_US 10000000
/* A broker that refuses connections (nothing listens there), whose name
 * does not resolve, or that dropped the handshake as if it wanted SASL or
 * TLS is reported after this long instead of the full metadata timeout or
 * retry: a person should not wait 10 s to read "cannot reach". Long
 * enough for a broker restarting on the same port to be back. */
#define CF_KAFKA_UNREACHABLE_GIVE_UP_US 2000000

/* The last problem librdkafka reported about a broker connection: the
 * error a caller gets ("Broker transport failure") does not say what a
 * person can act on, this line does ("Connect to ...: Connection
 * refused", "SASL authentication error: Authentication failed"). */
static pthread_mutex_t problem_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_problem[300];
static int64_t last_problem_us; /* when (monotonic): evidence for a wait that began before it only */
static atomic_bool quiet_logs;
/* librdkafka says once, at debug or info level, when a broker closed the
 * connection in a way that means it wants SASL or TLS: a later "all brokers
 * down" hides it. */
static atomic_bool protocol_hint;
static _Atomic int64_t protocol_hint_us;

bool cf_kafka_saw_protocol_hint(void)
{
    return atomic_load(&protocol_hint);
}

void cf_kafka_quiet_logs(bool quiet)
{
    atomic_store(&quiet_logs, quiet);
}

size_t cf_kafka_last_problem(char *buf, size_t size)
{
    pthread_mutex_lock(&problem_mu);
    size_t n = cf_strlcpy(buf, last_problem, size);
    pthread_mutex_unlock(&problem_mu);
    return n;
}

static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    /* librdkafka uses syslog levels. */
    cf_log_level l = level <= 3 ? CF_LOG_ERROR : level == 4 ? CF_LOG_WARN : level <= 6 ? CF_LOG_INFO : CF_LOG_DEBUG;
    /* Pass-through properties go to producer and consumers alike; the
     * "is a producer property" notices that causes are expected. */
    if (strcmp(fac, "CONFWARN") == 0 &&
        (strstr(buf, "is a producer property") || strstr(buf, "is a consumer property")))
        l = CF_LOG_DEBUG;
    /* A consumer closed while its group coordinator connection is still in
     * its SASL handshake reports the aborted handshake as an error (seen at
     * every exit of 'events wait' against the authenticated stack).  Wrong
     * credentials say "Authentication failed" instead and stay errors; the
     * operation that needed the broker fails on its own. */
    if (l == CF_LOG_ERROR && strstr(buf, "SaslAuthenticateRequest failed: Local: Broker ") &&
        (strstr(buf, "transport failure") || strstr(buf, "handle destroyed")))
        l = CF_LOG_INFO;
    if (strstr(buf, "security.protocol") || strstr(buf, "might require SASL")) {
        atomic_store(&protocol_hint, true);
        atomic_store(&protocol_hint_us, cf_mono_us());
    }
    if (level <= 4 && l <= CF_LOG_WARN) {
        /* "[thrd:...]: name: 127.0.0.1:1/bootstrap: Connect to ..." -> from the broker name on */
        const char *msg = buf;
        const char *thr = strstr(msg, "]: ");
        if (thr)
            msg = thr + 3;
        pthread_mutex_lock(&problem_mu);
        cf_strlcpy(last_problem, msg, sizeof(last_problem));
        last_problem_us = cf_mono_us();
        pthread_mutex_unlock(&problem_mu);
    }
    if (atomic_load(&quiet_logs))
        l = CF_LOG_DEBUG; /* the caller turns the failure into one line */
    CF_LOG(l, "kafka", "%s: %s: %s", rk ? rd_kafka_name(rk) : "rdkafka", fac, buf);
}

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, cf_error *err)
{
    char errstr[CF_KAFKA_ERRSTR];
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
        return cf_error_set(err, CF_E_INVALID, "kafka property %s=%s: %s", key, value, errstr);
    return 0;
}

rd_kafka_conf_t *cf_kafka_conf_new(const char *brokers, const char *client_id, const cf_kafka_kv *role,
                                   size_t nrole, const cf_kvlist *extra, cf_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        cf_error_set(err, CF_E_NOMEM, "rd_kafka_conf_new failed");
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    if (conf_set(conf, "bootstrap.servers", brokers, err) < 0 || conf_set(conf, "client.id", client_id, err) < 0 ||
        /* Latency: small request/response exchanges on loopback. */
        conf_set(conf, "socket.nagle.disable", "true", err) < 0 ||
        /* A KRaft broker fenced for a moment (a pause longer than its
         * broker.session.timeout.ms, 9 s) answers metadata without itself;
         * librdkafka >= 2.10 then forgets it and only bootstraps again
         * after this long (default 5 minutes: every fetch and produce
         * stalls that long on a one-broker fleet).  The worker sets the
         * same (worker/kafka_clients.c); docs/RELIABILITY.md. */
        conf_set(conf, "metadata.recovery.rebootstrap.trigger.ms", CF_KAFKA_REBOOTSTRAP_MS, err) < 0)
        goto fail;
    for (size_t i = 0; i < nrole; i++)
        if (conf_set(conf, role[i].k, role[i].v, err) < 0)
            goto fail;
    if (extra)
        for (size_t i = 0; i < extra->count; i++)
            if (conf_set(conf, extra->items[i].key, extra->items[i].value, err) < 0)
                goto fail;
    return conf;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

int cf_kafka_kvlist_copy(cf_kvlist *dst, const cf_kvlist *src)
{
    if (!src || src->count == 0)
        return 0;
    dst->items = calloc(src->count, sizeof(*dst->items));
    if (!dst->items)
        return -1;
    for (size_t i = 0; i < src->count; i++) {
        dst->items[i].key = cf_strdup(src->items[i].key);
        dst->items[i].value = cf_strdup(src->items[i].value);
        dst->count++; /* counted before the check, so a partial pair is freed too */
        if (!dst->items[i].key || !dst->items[i].value)
            return -1;
    }
    return 0;
}

int cf_kafka_ms_of_us(int64_t us)
{
    if (us <= 0)
        return 0;
    int64_t ms = (us + 999) / 1000;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

bool cf_kafka_transient(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
    case RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        return true;
    default:
        return false;
    }
}

rd_kafka_t *cf_kafka_client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, const char *what, cf_error *err)
{
    char errstr[CF_KAFKA_ERRSTR];
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        cf_error_set(err, CF_E_KAFKA, "creating %s: %s", what, errstr);
    }
    return rk;
}

/* ---- producer ------------------------------------------------------------- */

void cf_kafka_dr_init(cf_kafka_dr *dr)
{
    pthread_mutex_init(&dr->mu, NULL);
    dr->error[0] = '\0';
    dr->retriable = false;
    atomic_init(&dr->failed, 0);
}

void cf_kafka_dr_destroy(cf_kafka_dr *dr)
{
    pthread_mutex_destroy(&dr->mu);
}

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    cf_kafka_dr *dr = opaque;
    if (!m->err)
        return;
    atomic_fetch_add(&dr->failed, 1);
    pthread_mutex_lock(&dr->mu);
    if (!dr->error[0]) {
        if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
            char fatal[CF_KAFKA_ERRSTR - 32];
            rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
            snprintf(dr->error, sizeof(dr->error), "fatal producer error: %s", fatal);
            dr->retriable = false;
        } else {
            snprintf(dr->error, sizeof(dr->error), "delivery to %s failed: %s",
                     m->rkt ? rd_kafka_topic_name(m->rkt) : "?", rd_kafka_err2str(m->err));
            dr->retriable = true;
        }
    }
    pthread_mutex_unlock(&dr->mu);
}

int cf_kafka_dr_take(cf_kafka_dr *dr, cf_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&dr->mu);
    if (dr->error[0]) {
        cf_error_set(err, CF_E_KAFKA, "%s", dr->error);
        cf_error_set_retriable(err, dr->retriable);
        dr->error[0] = '\0';
        rc = -1;
    }
    pthread_mutex_unlock(&dr->mu);
    return rc;
}

rd_kafka_t *cf_kafka_producer_new(const char *brokers, const char *client_id, const cf_kvlist *extra,
                                  cf_kafka_dr *dr, const char *what, cf_error *err)
{
    static const cf_kafka_kv role[] = {
        {"enable.idempotence", "true"}, /* keeps per-partition order across retries */
        {"acks", "all"},
        /* 0, not 1: measured here, a 1 ms linger costs ~1.7 ms per hop (p50
         * round trip 4.8 ms vs 1.4 ms); under load messages still batch
         * behind in-flight requests. */
        {"linger.ms", "0"},
        /* Same partition as Java clients for a key; event waits find a
         * workspace's partition with the same function. */
        {"partitioner", "murmur2_random"},
        /* A request may carry a file of up to the decoders' 8 MiB cap (a
         * workspace op's write, request files): librdkafka's 1 MB default
         * refused it before the broker saw it.  The worker's max-request
         * is 16 MiB, as is the local stack's broker; a broker that allows
         * less says so. */
        {"message.max.bytes", "16777216"},
    };
    rd_kafka_conf_t *conf = cf_kafka_conf_new(brokers, client_id, role, sizeof(role) / sizeof(role[0]), extra, err);
    if (!conf)
        return NULL;
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_opaque(conf, dr);
    return cf_kafka_client_new(RD_KAFKA_PRODUCER, conf, what, err);
}

rd_kafka_resp_err_t cf_kafka_produce(rd_kafka_t *rk, const char *topic, const void *key, size_t keylen, void *value,
                                     size_t len, int msgflags)
{
    /* Queue full: serve delivery reports and retry for up to ~5 s. */
    for (int attempt = 0;; attempt++) {
        rd_kafka_resp_err_t e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                                  RD_KAFKA_V_KEY((void *)key, key ? keylen : 0),
                                                  RD_KAFKA_V_VALUE(value, len), RD_KAFKA_V_MSGFLAGS(msgflags),
                                                  RD_KAFKA_V_END);
        if (!e)
            break;
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL && attempt < 50) {
            rd_kafka_poll(rk, CF_KAFKA_POLL_SLICE_MS);
            continue;
        }
        return e;
    }
    rd_kafka_poll(rk, 0); /* serve delivery reports */
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

int cf_kafka_flush(rd_kafka_t *rk, cf_kafka_dr *dr, int64_t timeout_us, const char *noun, cf_error *err)
{
    rd_kafka_resp_err_t e = rd_kafka_flush(rk, cf_kafka_ms_of_us(timeout_us));
    if (cf_kafka_dr_take(dr, err) < 0)
        return -1;
    if (e == RD_KAFKA_RESP_ERR__TIMED_OUT) {
        cf_error_set(err, CF_E_TIMEOUT, "flush: %d %s(s) still in flight", rd_kafka_outq_len(rk), noun);
        return cf_error_set_retriable(err, true);
    }
    if (e)
        return cf_error_set(err, CF_E_KAFKA, "flush: %s", rd_kafka_err2str(e));
    return 0;
}

void cf_kafka_producer_destroy(rd_kafka_t *rk, const char *subsys, const char *noun)
{
    if (!rk)
        return;
    if (rd_kafka_flush(rk, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        cf_log_warn(subsys, "%d %s(s) not delivered at shutdown", rd_kafka_outq_len(rk), noun);
    rd_kafka_destroy(rk);
}

/* ---- manually assigned consumers ---------------------------------------- */

rd_kafka_t *cf_kafka_consumer_new(const char *brokers, const char *client_id, const cf_kvlist *extra,
                                  const char *group_prefix, const char *what, cf_error *err)
{
    char group[96];
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)cf_mono_us();
    /* librdkafka needs a group.id for assign()/consumer_poll(); it is never
     * joined or committed to, so a unique throwaway name is right. */
    snprintf(group, sizeof(group), "%s-%016" PRIx64, group_prefix, rnd);
    const cf_kafka_kv role[] = {
        {"group.id", group},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"enable.partition.eof", "false"},
        {"isolation.level", "read_committed"},
        {"fetch.wait.max.ms", "5"},
        {"fetch.error.backoff.ms", "10"},
        {"allow.auto.create.topics", "false"},
    };
    rd_kafka_conf_t *conf = cf_kafka_conf_new(brokers, client_id, role, sizeof(role) / sizeof(role[0]), extra, err);
    if (!conf)
        return NULL;
    rd_kafka_t *rk = cf_kafka_client_new(RD_KAFKA_CONSUMER, conf, what, err);
    if (rk)
        rd_kafka_poll_set_consumer(rk);
    return rk;
}

void cf_kafka_consumer_close(rd_kafka_t *rk)
{
    if (!rk)
        return;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

/* Whether librdkafka said, since the wait that began at since_us, that no
 * broker is going to answer soon (as opposed to a slow one): evidence from
 * before it (a broker that restarted an hour ago) does not count. */
static bool broker_unreachable(int64_t since_us)
{
    pthread_mutex_lock(&problem_mu);
    /* Refused credentials too: the broker will not take these whatever
     * the wait (the attack found submit saying so only after 10 s). */
    bool refused = last_problem_us >= since_us &&
                   (strstr(last_problem, "Connection refused") || strstr(last_problem, "Failed to resolve") ||
                    strstr(last_problem, "SASL authentication error") || strstr(last_problem, "Authentication failed"));
    pthread_mutex_unlock(&problem_mu);
    return refused || atomic_load(&protocol_hint_us) >= since_us;
}

/* rd_kafka_metadata in slices, so that an unreachable broker ends the
 * wait after CF_KAFKA_UNREACHABLE_GIVE_UP_US: short ones while no broker
 * connection is usable, and once a slice timed out with a request on its
 * way, slices of that length, so that a slow broker (up to 2 s a request)
 * still answers within one. */
static rd_kafka_resp_err_t metadata_of(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const struct rd_kafka_metadata **md)
{
    const int64_t t0 = cf_mono_us(), budget = CF_KAFKA_METADATA_TIMEOUT_MS * INT64_C(1000);
    int slice_ms = 250;
    for (;;) {
        int64_t left = budget - (cf_mono_us() - t0);
        rd_kafka_resp_err_t e =
            rd_kafka_metadata(rk, 0, rkt, md, left < slice_ms * INT64_C(1000) ? cf_kafka_ms_of_us(left) : slice_ms);
        int64_t waited = cf_mono_us() - t0;
        if ((e != RD_KAFKA_RESP_ERR__TRANSPORT && e != RD_KAFKA_RESP_ERR__TIMED_OUT) || waited >= budget ||
            (waited >= CF_KAFKA_UNREACHABLE_GIVE_UP_US && broker_unreachable(t0)))
            return e;
        if (e == RD_KAFKA_RESP_ERR__TIMED_OUT)
            slice_ms = (int)(CF_KAFKA_UNREACHABLE_GIVE_UP_US / 1000);
    }
}

int cf_kafka_topic_partitions(rd_kafka_t *rk, const char *topic, bool need_leaders, int32_t *out,
                              rd_kafka_resp_err_t *kerr, cf_error *err)
{
    *kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return cf_error_set(err, CF_E_KAFKA, "topic %s: %s", topic, rd_kafka_err2str(rd_kafka_last_error()));
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = metadata_of(rk, rkt, &md);
    rd_kafka_topic_destroy(rkt);
    if (e) {
        *kerr = e;
        cf_error_set(err, CF_E_KAFKA, "metadata for topic %s: %s", topic, rd_kafka_err2str(e));
        return cf_error_set_retriable(err, true);
    }
    int rc = 0;
    if (md->topic_cnt != 1 || md->topics[0].err) {
        rd_kafka_resp_err_t te = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
        *kerr = te;
        rc = cf_error_set(err, CF_E_KAFKA, "topic %s: %s%s", topic, rd_kafka_err2str(te),
                          te == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ? " (create it: codefleet topics create)" : "");
    } else if (md->topics[0].partition_cnt <= 0 || md->topics[0].partition_cnt > CF_KAFKA_MAX_PARTITIONS) {
        rc = cf_error_set(err, CF_E_KAFKA, "topic %s: unusable partition count %d", topic,
                          md->topics[0].partition_cnt);
    } else {
        for (int i = 0; need_leaders && i < md->topics[0].partition_cnt; i++) {
            const rd_kafka_metadata_partition_t *mp = &md->topics[0].partitions[i];
            if (mp->err || mp->leader < 0) {
                *kerr = mp->err ? mp->err : RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE;
                rc = cf_error_set(err, CF_E_KAFKA, "topic %s partition %d: %s", topic, mp->id,
                                  rd_kafka_err2str(*kerr));
                break;
            }
        }
        *out = md->topics[0].partition_cnt;
    }
    rd_kafka_metadata_destroy(md);
    return rc;
}

int32_t cf_kafka_partition_for_key(const char *key, int32_t partition_cnt)
{
    /* The function ignores rkt and the opaques (librdkafka 2.0.2). */
    return rd_kafka_msg_partitioner_murmur2(NULL, key, strlen(key), partition_cnt, NULL, NULL);
}

/* One attempt of cf_kafka_assign. */
static int assign_once(rd_kafka_t *rk, const char *topic, const char *key, bool need_leaders, cf_kafka_start start,
                       int64_t since_us, rd_kafka_resp_err_t *kerr, cf_error *err)
{
    int32_t np = 0;
    if (cf_kafka_topic_partitions(rk, topic, need_leaders, &np, kerr, err) < 0)
        return -1;
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(key ? 1 : np);
    if (!parts)
        return cf_error_set(err, CF_E_NOMEM, "partition list: out of memory");
    int32_t first = key ? cf_kafka_partition_for_key(key, np) : 0;
    int32_t last = key ? first + 1 : np;
    for (int32_t p = first; p < last; p++) {
        rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_add(parts, topic, p);
        tp->offset = start == CF_KAFKA_FROM_BEGINNING ? RD_KAFKA_OFFSET_BEGINNING
                     : start == CF_KAFKA_FROM_TIME    ? (since_us > 0 ? since_us / 1000 : 0)
                                                      : RD_KAFKA_OFFSET_END;
    }
    int rc = -1;
    if (start == CF_KAFKA_FROM_TIME) {
        rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, parts, CF_KAFKA_METADATA_TIMEOUT_MS);
        if (e) {
            *kerr = e;
            cf_error_set(err, CF_E_KAFKA, "offsets_for_times on %s: %s", topic, rd_kafka_err2str(e));
            goto out;
        }
    }
    for (int i = 0; i < parts->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &parts->elems[i];
        if (start == CF_KAFKA_FROM_TIME && tp->err) {
            *kerr = tp->err;
            cf_error_set(err, CF_E_KAFKA, "offsets_for_times on %s[%" PRId32 "]: %s", topic, tp->partition,
                         rd_kafka_err2str(tp->err));
            goto out;
        }
        /* The end is read now, not resolved lazily by the fetcher (the lazy
         * OFFSET_END), which could skip a message produced in between.
         * offsets_for_times also answers END (-1) when nothing is that
         * recent. */
        if (tp->offset == RD_KAFKA_OFFSET_END) {
            int64_t lo = 0, hi = 0;
            rd_kafka_resp_err_t e =
                rd_kafka_query_watermark_offsets(rk, topic, tp->partition, &lo, &hi, CF_KAFKA_METADATA_TIMEOUT_MS);
            if (e) {
                *kerr = e;
                cf_error_set(err, CF_E_KAFKA, "watermarks of %s[%" PRId32 "]: %s", topic, tp->partition,
                             rd_kafka_err2str(e));
                goto out;
            }
            tp->offset = hi;
        }
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(rk, parts);
    if (e) {
        *kerr = e;
        cf_error_set(err, CF_E_KAFKA, "assign %s: %s", topic, rd_kafka_err2str(e));
        goto out;
    }
    rc = 0;
out:
    rd_kafka_topic_partition_list_destroy(parts);
    return rc;
}

int cf_kafka_assign(rd_kafka_t *rk, const char *topic, const char *key, bool need_leaders, cf_kafka_start start,
                    int64_t since_us, cf_error *err)
{
    int64_t t0 = cf_mono_us();
    for (;;) {
        rd_kafka_resp_err_t kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (assign_once(rk, topic, key, need_leaders, start, since_us, &kerr, err) == 0)
            return 0;
        int64_t limit = kerr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ? CF_KAFKA_UNKNOWN_TOPIC_RETRY_US
                                                                        : CF_KAFKA_TRANSIENT_RETRY_US;
        int64_t waited = cf_mono_us() - t0;
        if (!cf_kafka_transient(kerr) || waited >= limit ||
            ((kerr == RD_KAFKA_RESP_ERR__TRANSPORT || kerr == RD_KAFKA_RESP_ERR__TIMED_OUT) &&
             waited >= CF_KAFKA_UNREACHABLE_GIVE_UP_US && broker_unreachable(t0)))
            return -1;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

rd_kafka_message_t *cf_kafka_consume(rd_kafka_t *rk, int64_t deadline, volatile sig_atomic_t *stop,
                                     const char *log_subsys, char *last, size_t cap)
{
    cf_kafka_heal heal = {0};
    for (;;) {
        if (stop && *stop)
            return NULL;
        cf_kafka_heal_check(rk, &heal, cf_mono_us());
        int64_t left = deadline - cf_mono_us();
        if (left <= 0)
            return NULL;
        int slice = left > CF_KAFKA_POLL_SLICE_MS * 1000 ? CF_KAFKA_POLL_SLICE_MS : cf_kafka_ms_of_us(left);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, slice);
        if (!m)
            continue;
        if (!m->err)
            return m;
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (last)
                snprintf(last, cap, "%s", rd_kafka_message_errstr(m));
            if (log_subsys)
                cf_log_debug(log_subsys, "consumer: %s", rd_kafka_message_errstr(m));
        }
        rd_kafka_message_destroy(m);
    }
}

/* librdkafka holds the first message for a topic whose metadata it has not
 * seen yet and, with linger.ms=0, sends it only at the broker thread's next
 * periodic wake-up (about 1 s later).  Asking for the topic's metadata up
 * front takes that second off the first submit. */
void cf_kafka_warm_topic(rd_kafka_t *rk, const char *topic)
{
    (void)cf_kafka_topic_check(rk, topic);
}

rd_kafka_resp_err_t cf_kafka_topic_check(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return RD_KAFKA_RESP_ERR__FAIL;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && md->topics[0].err)
            e = md->topics[0].err;
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(rkt);
    return e;
}
