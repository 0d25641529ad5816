/* kafka_clients.c: the Kafka clients' configuration and callbacks. */
#include "worker_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_util.h"

/* Built against the project's librdkafka (deploy/librdkafka.sh): the KIP-848
 * group protocol, SCRAM against Kafka 4 (#4895) and a cooperative-sticky
 * assignor that does not hang when members subscribe to different topics
 * (#4783, which one consumer per topic makes the rule) all need it. */
#if RD_KAFKA_VERSION < 0x020c0000
#error "codefleet needs librdkafka 2.12 or newer: deploy/librdkafka.sh builds it"
#endif

#define LOG_SUB "worker"

/* How often one kind of Kafka problem is explained in the log. */
#define KAFKA_EXPLAIN_EVERY_US (30 * INT64_C(1000000))

kafka_problem kafka_classify_error(int err, const char *reason, bool joined)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__RESOLVE:
        if (reason && strstr(reason, "SASL authentication"))
            return KP_AUTH;
        /* librdkafka suspects security.protocol whenever a broker drops the
         * connection during its first request, which is also what a broker
         * that is stopping or starting does.  Before the worker has joined
         * that most likely is its settings; after, the broker took them
         * once, so it is away, or its listener changed. */
        if (reason && (strstr(reason, "security.protocol") || strstr(reason, "might require SASL")))
            return joined ? KP_HANDSHAKE : KP_PROTOCOL;
        return KP_UNREACHABLE;
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
        return KP_AUTH;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        return KP_ACL;
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        return KP_TOPIC;
    default:
        return KP_NONE;
    }
}

void kafka_on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    cf_worker *w = opaque;
    cf_observe_kafka_error(w->obs, err == RD_KAFKA_RESP_ERR__FATAL, err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_fatal_error(rk, buf, sizeof(buf));
        cf_log_error("kafka", "%s: fatal error: %s", rd_kafka_name(rk), buf);
        return;
    }
    kafka_problem kp = kafka_classify_error(err, reason, atomic_load(&w->kafka_joined));
    if (kp == KP_NONE) {
        cf_log_warn("kafka", "%s: %s: %s", rd_kafka_name(rk), rd_kafka_err2name(err), reason);
        return;
    }
    cf_log_debug("kafka", "%s: %s: %s", rd_kafka_name(rk), rd_kafka_err2name(err), reason);
    int64_t now = cf_mono_us();
    /* A refused login drops the connection: "all brokers down" follows,
     * and is not the problem to fix. */
    if (kp == KP_UNREACHABLE) {
        static const kafka_problem causes[] = {KP_AUTH, KP_PROTOCOL, KP_HANDSHAKE};
        for (size_t i = 0; i < sizeof(causes) / sizeof(causes[0]); i++) {
            int64_t at = atomic_load(&w->kafka_explained_us[causes[i]]);
            if (at && now - at < KAFKA_EXPLAIN_EVERY_US)
                return;
        }
    }
    /* Both clients report the same outage, over and over while it lasts:
     * one line per kind of problem every 30 s is what a person reads. */
    int64_t last = atomic_load(&w->kafka_explained_us[kp]);
    if (last && now - last < KAFKA_EXPLAIN_EVERY_US)
        return;
    atomic_store(&w->kafka_explained_us[kp], now);
    const cf_worker_config *c = w->cfg;
    switch (kp) {
    case KP_UNREACHABLE:
        cf_log_error("kafka",
                     "cannot reach the Kafka broker at %s (%.200s): is it running? check brokers "
                     "(CODEFLEET_WORKER_BROKERS); the worker retries and loses nothing meanwhile",
                     c->brokers, reason && reason[0] ? reason : rd_kafka_err2str(err));
        break;
    case KP_AUTH:
        cf_log_error("kafka",
                     "the Kafka broker at %s refused the worker's credentials (%.200s): check "
                     "kafka.sasl.mechanisms, kafka.sasl.username and kafka.sasl.password in the worker's --config",
                     c->brokers, reason && reason[0] ? reason : rd_kafka_err2str(err));
        break;
    case KP_PROTOCOL:
        cf_log_error("kafka",
                     "the Kafka broker at %s closed the connection as if it expects SASL or TLS (%.200s): check "
                     "kafka.security.protocol and kafka.sasl.* in the worker's --config",
                     c->brokers, reason);
        break;
    case KP_HANDSHAKE: {
        /* librdkafka's reason starts with the broker ("sasl_plaintext://
         * host:port/id: Disconnected ..."); its guess at the cause is left
         * out. */
        const char *colon = reason ? strstr(reason, ": ") : NULL;
        int blen = colon ? (int)(colon - reason) : 0;
        cf_log_error("kafka",
                     "the Kafka broker at %s dropped the connection during its handshake (%.*s%s%s): it is "
                     "restarting or away, and the worker retries and loses nothing meanwhile; if it stays so while "
                     "the broker is up, its listener's security settings changed since this worker joined: check "
                     "kafka.security.protocol and kafka.sasl.* in the worker's --config",
                     c->brokers, blen > 200 ? 200 : blen, blen ? reason : "", blen ? ": " : "", rd_kafka_err2str(err));
        break;
    }
    case KP_ACL:
        cf_log_error("kafka",
                     "the broker denied this worker an operation (%s): its principal needs read on the request "
                     "topics and group %s, write on the result, dead-letter and workers topics",
                     reason && reason[0] ? reason : rd_kafka_err2str(err), c->group);
        break;
    case KP_TOPIC:
        cf_log_error("kafka", "a topic the worker uses does not exist (%s): create the fleet's topics with "
                              "'codefleet topics create', or check request-topic / result-topic / dlq-topic",
                     reason && reason[0] ? reason : rd_kafka_err2str(err));
        break;
    default:
        break;
    }
}

/* librdkafka's connection failures (facility FAIL) are the raw detail
 * behind kafka_on_error's one-line explanations: debug level only.  Its
 * other warnings stay warnings: some (a failed offset commit, a session
 * timeout, a max.poll.interval overrun) reach no callback at all. */
void kafka_on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    cf_log_level l = level <= 3 ? CF_LOG_ERROR : level <= 4 ? CF_LOG_WARN : level <= 6 ? CF_LOG_INFO : CF_LOG_DEBUG;
    if (strcmp(fac, "FAIL") == 0 || l > CF_LOG_WARN)
        l = CF_LOG_DEBUG;
    CF_LOG(l, "kafka", "%s: %s", fac, buf);
}

int kafka_on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    cf_worker *w = opaque;
    cf_observe_kafka_stats(w->obs, rd_kafka_name(rk), json, len);
    return 0; /* librdkafka frees json */
}

int kafka_conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, cf_error *err)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, k, v, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
        return cf_error_set(err, CF_E_INVALID, "kafka property %s=%s: %s", k, v, errstr);
    return 0;
}

void kafka_heal_all(cf_worker *w)
{
    int64_t now = cf_mono_us();
    for (size_t i = 0; i < w->nconsumers; i++)
        cf_kafka_heal_check(w->consumers[i].rk, &w->consumers[i].heal, now);
    cf_kafka_heal_check(w->producer, &w->producer_heal, now);
    cf_kafka_heal_check(w->control, &w->control_heal, now);
}

const char *kafka_classic_only_key(const cf_kvlist *kafka)
{
    static const char *const keys[] = {"session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy",
                                       "group.protocol.type"};
    for (size_t i = 0; i < kafka->count; i++)
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
            if (strcmp(kafka->items[i].key, keys[k]) == 0)
                return keys[k];
    return NULL;
}

bool kafka_key_consumer_only(const char *k)
{
    static const char *const keys[] = {"group.", "session.timeout.ms", "max.poll.interval.ms", "heartbeat.interval.ms",
                                       "partition.assignment.strategy", "auto.", "enable.auto", "fetch.",
                                       "isolation.level", "queued.", "enable.partition.eof", "check.crcs"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strncmp(k, keys[i], strlen(keys[i])) == 0)
            return true;
    return false;
}

bool kafka_key_producer_only(const char *k)
{
    static const char *const keys[] = {"enable.idempotence", "acks", "linger.ms", "queue.buffering.", "batch.",
                                       "message.timeout.ms", "retries", "retry.", "compression.", "partitioner",
                                       "delivery.timeout.ms", "max.in.flight", "request.required.acks",
                                       "transactional.id", "transaction.timeout.ms"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strncmp(k, keys[i], strlen(keys[i])) == 0)
            return true;
    return false;
}

/* The client.id the worker's consumer (or producer) gets, as the group lists
 * it: ours unless kafka.client.id overrides it (applied after ours). */
void kafka_client_id(const cf_worker *w, bool consumer, char *buf, size_t size)
{
    const char *cid = cf_kvlist_get(&w->cfg->kafka, "client.id");
    if (cid)
        snprintf(buf, size, "%s", cid);
    else
        snprintf(buf, size, "codefleet-worker-%s%s", w->worker_id, consumer ? "" : "-producer");
}

rd_kafka_conf_t *kafka_conf_new(cf_worker *w, bool consumer, const char *own_topic, cf_error *err)
{
    const cf_worker_config *c = w->cfg;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char client_id[200];
    kafka_client_id(w, consumer, client_id, sizeof(client_id));
    if (kafka_conf_set(conf, "bootstrap.servers", c->brokers, err) < 0 || kafka_conf_set(conf, "client.id", client_id, err) < 0 ||
        /* Small request/response exchanges: Nagle would only add delay. */
        kafka_conf_set(conf, "socket.nagle.disable", "true", err) < 0 ||
        /* A KRaft broker fenced for a moment (paused longer than its
         * broker.session.timeout.ms) answers metadata without itself;
         * librdkafka >= 2.10 then forgets it and bootstraps again only
         * after this (default 5 minutes, in which a one-broker fleet's
         * worker neither fetches nor produces).  The dispatcher sets the
         * same (CF_KAFKA_REBOOTSTRAP_MS); docs/RELIABILITY.md. */
        kafka_conf_set(conf, "metadata.recovery.rebootstrap.trigger.ms", KAFKA_REBOOTSTRAP_MS, err) < 0)
        goto fail;
    if (consumer) {
        /* Offsets are stored by us after delivery, committed by the
         * auto-committer (and explicitly on revoke and shutdown). */
        static const char *const kv[][2] = {
            {"enable.auto.commit", "true"},     {"enable.auto.offset.store", "false"},
            {"auto.commit.interval.ms", "500"}, {"auto.offset.reset", "earliest"},
            {"fetch.wait.max.ms", "10"},        {"fetch.error.backoff.ms", "50"},
            /* librdkafka >= 2.4 waits this long before fetching a partition
             * whose prefetch queue was full (default 1000 ms); the queue is
             * kept small above, so a backlog would be read in 1 s steps. */
            {"fetch.queue.backoff.ms", "10"},
            {"isolation.level", "read_committed"},
            /* A request the broker does not answer fails after this (not
             * librdkafka's 60 s).  It bounds the stop: a consumer's close
             * waits for its last commit, and under KIP-848 nothing else
             * ends that wait (no member-side session), so with a frozen
             * broker a worker took 60 s to stop; the classic protocol's 6 s
             * session bounded it before.  Fetches wait at most
             * fetch.wait.max.ms at the broker, so only a broker that has
             * stopped answering meets this. */
            {"socket.timeout.ms", "6000"},
        };
        /* The classic protocol's member-side settings; KIP-848's live on
         * the broker (group.consumer.session.timeout.ms and
         * group.consumer.heartbeat.interval.ms, or per group), and
         * librdkafka refuses them there.  A dead worker's partitions move
         * within seconds, not the 45 s default: heartbeats come from
         * librdkafka's own thread, so long executions and paused
         * partitions never miss one (docs/RELIABILITY.md, "Failover"). */
        static const char *const classic_kv[][2] = {
            {"partition.assignment.strategy", "cooperative-sticky"},
            {"session.timeout.ms", "6000"},
            {"heartbeat.interval.ms", "1000"},
        };
        /* Static membership: with one consumer per topic each is a member
         * of its own, named by the worker id and its topic (a hash of the
         * name: a topic's consumer keeps its id when profiles are added,
         * and the id stays within Kafka's 249 characters). */
        char instance[CF_ID_MAX + 32];
        if (own_topic) {
            uint32_t h = 2166136261u; /* FNV-1a */
            for (const char *s = own_topic; *s; s++)
                h = (h ^ (uint8_t)*s) * 16777619u;
            snprintf(instance, sizeof(instance), "%s.topic-%08x", w->worker_id, h);
        } else {
            snprintf(instance, sizeof(instance), "%s", w->worker_id);
        }
        if (kafka_conf_set(conf, "group.id", c->group, err) < 0 ||
            (c->static_membership && kafka_conf_set(conf, "group.instance.id", instance, err) < 0))
            goto fail;
        /* What librdkafka prefetches per partition beyond what we took:
         * bounds each drain of its queue, so the offset trackers stay small
         * (the default, 100000 per partition, lets one drain take tens of
         * thousands of small requests). */
        char qmin[32];
        int64_t qm = 2 * (c->slots + c->prefetch);
        snprintf(qmin, sizeof(qmin), "%" PRId64, qm > 100 ? qm : 100);
        if (kafka_conf_set(conf, "queued.min.messages", qmin, err) < 0)
            goto fail;
        for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
            if (kafka_conf_set(conf, kv[i][0], kv[i][1], err) < 0)
                goto fail;
        if (w->group_protocol == CF_WORKER_GROUP_CLASSIC) {
            for (size_t i = 0; i < sizeof(classic_kv) / sizeof(classic_kv[0]); i++)
                if (kafka_conf_set(conf, classic_kv[i][0], classic_kv[i][1], err) < 0)
                    goto fail;
        } else if (kafka_conf_set(conf, "group.protocol", "consumer", err) < 0) {
            goto fail;
        }
        rd_kafka_conf_set_rebalance_cb(conf, partitions_on_rebalance);
        /* Lag per partition and brokers' state for /metrics and /readyz:
         * librdkafka's statistics, served on the consumer's queue. */
        if (c->metrics_listen && c->metrics_listen[0]) {
            if (kafka_conf_set(conf, "statistics.interval.ms", "2000", err) < 0)
                goto fail;
            rd_kafka_conf_set_stats_cb(conf, kafka_on_stats);
        }
    } else {
        static const char *const kv[][2] = {
            {"enable.idempotence", "true"}, {"acks", "all"},
            {"partitioner", "murmur2_random"},
            {"message.max.bytes", "33554432"},
            /* A reply_to topic that does not exist fails its message after
             * this long (default 30 s), and the result goes to the default
             * topic with reply_to_error: every topic of the fleet exists
             * before results are sent to it. */
            {"topic.metadata.propagation.max.ms", "5000"},
            /* A topic named by a request (reply_to, its output topic) is
             * never created by the worker's metadata requests, whatever
             * the broker's auto.create.topics.enable says. */
            {"allow.auto.create.topics", "false"},
        };
        for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
            if (kafka_conf_set(conf, kv[i][0], kv[i][1], err) < 0)
                goto fail;
        /* Batching under a backlog only: see flusher_main. */
        char linger[32];
        snprintf(linger, sizeof(linger), "%.3f", (double)c->result_batch_us / 1000.0);
        if (kafka_conf_set(conf, "linger.ms", linger, err) < 0)
            goto fail;
        rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR);
    }
    for (size_t i = 0; i < c->kafka.count; i++) {
        const char *k = c->kafka.items[i].key;
        if ((consumer && kafka_key_producer_only(k)) || (!consumer && kafka_key_consumer_only(k)))
            continue;
        /* One id for every consumer of the worker (one per topic) would
         * have them fence each other out of the group. */
        /* The protocol is chosen by group-protocol (and the classic-only
         * properties then), not past it. */
        if (consumer && (strcmp(k, "group.protocol") == 0 || strcmp(k, "group.remote.assignor") == 0)) {
            cf_error_set(err, CF_E_INVALID, "kafka.%s: not settable; use group-protocol", k);
            goto fail;
        }
        if (consumer && strcmp(k, "group.instance.id") == 0) {
            cf_error_set(err, CF_E_INVALID,
                         "kafka.group.instance.id: not settable; use static-membership = true (the worker names each "
                         "of its consumers from worker-id)");
            goto fail;
        }
        if (kafka_conf_set(conf, k, c->kafka.items[i].value, err) < 0)
            goto fail;
    }
    rd_kafka_conf_set_error_cb(conf, kafka_on_error);
    rd_kafka_conf_set_log_cb(conf, kafka_on_log);
    rd_kafka_conf_set_opaque(conf, w);
    return conf;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

/* Returns false when the broker could not be reached: warming the other
 * topics would only add 5 s each to the start-up. */
/* librdkafka holds the first message for a topic whose metadata it has not
 * seen and, with linger.ms=0, sends it at the broker thread's next periodic
 * wake-up (about 1 s later): fetching the metadata at start-up takes that
 * second off the first result. */
bool kafka_warm_topic(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return true;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_metadata_destroy(md);
    else
        cf_log_debug("kafka", "metadata of %s: %s", topic, rd_kafka_err2str(e));
    rd_kafka_topic_destroy(rkt);
    return e != RD_KAFKA_RESP_ERR__TRANSPORT && e != RD_KAFKA_RESP_ERR__TIMED_OUT;
}

