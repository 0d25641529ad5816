/* cf_dispatcher: producer, background result collector, standalone scans and
 * topic administration.  See cf_dispatcher.h for the contract. */
#include "cf_dispatcher.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "cf_log.h"
#include "cf_util.h"

#define CF_KAFKA_ERRSTR 512
#define CF_MAX_PARTITIONS 100000
/* Poll slice of the collector and scanners: bounds how long a stop request
 * (destroy, signal) waits when the queue cannot be woken directly. */
#define CF_POLL_SLICE_MS 100
#define CF_METADATA_TIMEOUT_MS 10000

/* ---------------------------------------------------------------------------
 * Pending-result map: hash chains for lookup by id plus an arrival-ordered
 * list for eviction of the oldest and for wait_any.
 */
typedef struct pending_entry {
    struct pending_entry *hnext;
    struct pending_entry *prev, *next;
    uint64_t hash;
    int64_t received_mono_us;
    cf_result res;
} pending_entry;

typedef struct pending_map {
    pending_entry **buckets;
    size_t nbuckets; /* power of two */
    pending_entry *oldest, *newest;
    size_t count;
    size_t max;
} pending_map;

static uint64_t hash_id(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static int pending_init(pending_map *m, size_t max, cf_error *err)
{
    size_t n = 64;
    while (n < max && n < ((size_t)1 << 17))
        n <<= 1;
    m->buckets = calloc(n, sizeof(*m->buckets));
    if (!m->buckets)
        return cf_error_set(err, CF_E_NOMEM, "result map: out of memory");
    m->nbuckets = n;
    m->oldest = m->newest = NULL;
    m->count = 0;
    m->max = max;
    return 0;
}

static pending_entry *pending_find(pending_map *m, const char *id, uint64_t h, pending_entry ***link)
{
    pending_entry **pp = &m->buckets[h & (m->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->hnext) {
        if ((*pp)->hash == h && strcmp((*pp)->res.id, id) == 0) {
            if (link)
                *link = pp;
            return *pp;
        }
    }
    return NULL;
}

/* Unlinks e from both structures; the caller owns it afterwards. */
static void pending_unlink(pending_map *m, pending_entry *e)
{
    pending_entry **pp = &m->buckets[e->hash & (m->nbuckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        m->oldest = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        m->newest = e->prev;
    e->hnext = e->prev = e->next = NULL;
    m->count--;
}

static void pending_entry_free(pending_entry *e)
{
    if (!e)
        return;
    cf_result_clear(&e->res);
    free(e);
}

/* Takes ownership of e.  Returns the number of entries evicted; a duplicate id
 * (redelivered result) is dropped: the first result is the answer. */
static size_t pending_insert(pending_map *m, pending_entry *e, bool *duplicate)
{
    size_t evicted = 0;
    *duplicate = false;
    e->hash = hash_id(e->res.id);
    if (pending_find(m, e->res.id, e->hash, NULL)) {
        *duplicate = true;
        pending_entry_free(e);
        return 0;
    }
    pending_entry **b = &m->buckets[e->hash & (m->nbuckets - 1)];
    e->hnext = *b;
    *b = e;
    e->next = NULL;
    e->prev = m->newest;
    if (m->newest)
        m->newest->next = e;
    else
        m->oldest = e;
    m->newest = e;
    m->count++;
    while (m->count > m->max && m->oldest) {
        pending_entry *old = m->oldest;
        pending_unlink(m, old);
        pending_entry_free(old);
        evicted++;
    }
    return evicted;
}

static void pending_destroy(pending_map *m)
{
    pending_entry *e = m->oldest;
    while (e) {
        pending_entry *next = e->next;
        pending_entry_free(e);
        e = next;
    }
    free(m->buckets);
    memset(m, 0, sizeof(*m));
}

/* ---------------------------------------------------------------------------
 * The dispatcher.
 */
struct cf_dispatcher {
    char *brokers;
    char *request_topic;
    char *result_topic;
    char *client_id;
    cf_kvlist kafka; /* private copy */

    rd_kafka_t *producer;

    /* Delivery reports: served by whichever thread polls the producer. */
    pthread_mutex_t dr_mu;
    char dr_error[CF_KAFKA_ERRSTR]; /* first unreported failure, "" = none */
    bool dr_error_retriable;

    /* Collector. */
    bool collecting;
    rd_kafka_t *consumer;
    rd_kafka_queue_t *consumer_q;
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
    pthread_mutex_t mu; /* guards map, last_error, collector_done */
    pthread_cond_t cond;
    pending_map map;
    char last_error[CF_KAFKA_ERRSTR];

    atomic_uint_fast64_t n_submitted;
    atomic_uint_fast64_t n_delivery_failed;
    atomic_uint_fast64_t n_seen;
    atomic_uint_fast64_t n_malformed;
    atomic_uint_fast64_t n_evicted;
};

static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    /* librdkafka uses syslog levels. */
    cf_log_level l = level <= 3 ? CF_LOG_ERROR : level == 4 ? CF_LOG_WARN : level <= 6 ? CF_LOG_INFO : CF_LOG_DEBUG;
    /* Pass-through properties go to producer and consumers alike; the
     * "is a producer property" notices that causes are expected. */
    if (strcmp(fac, "CONFWARN") == 0 && (strstr(buf, "is a producer property") || strstr(buf, "is a consumer property")))
        l = CF_LOG_DEBUG;
    CF_LOG(l, "kafka", "%s: %s: %s", rk ? rd_kafka_name(rk) : "rdkafka", fac, buf);
}

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, cf_error *err)
{
    char errstr[CF_KAFKA_ERRSTR];
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
        return cf_error_set(err, CF_E_INVALID, "kafka property %s=%s: %s", key, value, errstr);
    return 0;
}

typedef struct kv {
    const char *k, *v;
} kv;

/* Base properties, then role-specific ones, then the user's pass-through
 * (last, so -X can override anything). */
static rd_kafka_conf_t *make_conf(const char *brokers, const char *client_id, const kv *role, size_t nrole,
                                  const cf_kvlist *extra, cf_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        cf_error_set(err, CF_E_NOMEM, "rd_kafka_conf_new failed");
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    if (conf_set(conf, "bootstrap.servers", brokers, err) < 0 ||
        conf_set(conf, "client.id", client_id ? client_id : "codefleet-dispatcher", err) < 0 ||
        /* Latency: small request/response exchanges on loopback. */
        conf_set(conf, "socket.nagle.disable", "true", err) < 0)
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

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    cf_dispatcher *d = opaque;
    if (!m->err)
        return;
    atomic_fetch_add(&d->n_delivery_failed, 1);
    pthread_mutex_lock(&d->dr_mu);
    if (!d->dr_error[0]) {
        if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
            char fatal[CF_KAFKA_ERRSTR - 32];
            rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
            snprintf(d->dr_error, sizeof(d->dr_error), "fatal producer error: %s", fatal);
            d->dr_error_retriable = false;
        } else {
            snprintf(d->dr_error, sizeof(d->dr_error), "delivery to %s failed: %s",
                     m->rkt ? rd_kafka_topic_name(m->rkt) : "?", rd_kafka_err2str(m->err));
            d->dr_error_retriable = true;
        }
    }
    pthread_mutex_unlock(&d->dr_mu);
}

/* Reports (and resets) the first delivery failure since the last report. */
static int take_delivery_error(cf_dispatcher *d, cf_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&d->dr_mu);
    if (d->dr_error[0]) {
        cf_error_set(err, CF_E_KAFKA, "%s", d->dr_error);
        cf_error_set_retriable(err, d->dr_error_retriable);
        d->dr_error[0] = '\0';
        rc = -1;
    }
    pthread_mutex_unlock(&d->dr_mu);
    return rc;
}

static int ms_of_us(int64_t us)
{
    if (us <= 0)
        return 0;
    int64_t ms = (us + 999) / 1000;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* Errors worth retrying for a moment: a topic that was just created is
 * briefly unknown or leaderless on its broker. */
static bool kafka_transient(rd_kafka_resp_err_t e)
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

/* How long a missing or leaderless topic is retried before giving up: long
 * enough for a topic created a moment ago, short enough that a typo in a
 * topic name is reported promptly. */
#define CF_UNKNOWN_TOPIC_RETRY_US 3000000
#define CF_TRANSIENT_RETRY_US 10000000

/* Partition count of topic (which must exist, with a leader for every
 * partition).  *kerr gets the Kafka error for retry decisions. */
static int topic_partitions(rd_kafka_t *rk, const char *topic, int32_t *out, rd_kafka_resp_err_t *kerr,
                            cf_error *err)
{
    *kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return cf_error_set(err, CF_E_KAFKA, "topic %s: %s", topic, rd_kafka_err2str(rd_kafka_last_error()));
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, CF_METADATA_TIMEOUT_MS);
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
    } else if (md->topics[0].partition_cnt <= 0 || md->topics[0].partition_cnt > CF_MAX_PARTITIONS) {
        rc = cf_error_set(err, CF_E_KAFKA, "topic %s: unusable partition count %d", topic,
                          md->topics[0].partition_cnt);
    } else {
        for (int i = 0; i < md->topics[0].partition_cnt; i++) {
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

typedef enum start_mode { START_BEGINNING, START_END, START_TIME } start_mode;

/* One attempt of assign_all (below). */
static int assign_all_once(rd_kafka_t *rk, const char *topic, start_mode mode, int64_t since_us,
                           rd_kafka_resp_err_t *kerr, cf_error *err)
{
    int32_t np = 0;
    if (topic_partitions(rk, topic, &np, kerr, err) < 0)
        return -1;
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(np);
    if (!parts)
        return cf_error_set(err, CF_E_NOMEM, "partition list: out of memory");
    int rc = -1;
    for (int32_t p = 0; p < np; p++) {
        rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_add(parts, topic, p);
        tp->offset = mode == START_BEGINNING ? RD_KAFKA_OFFSET_BEGINNING
                     : mode == START_TIME   ? (since_us > 0 ? since_us / 1000 : 0)
                                            : RD_KAFKA_OFFSET_END;
    }
    if (mode == START_TIME) {
        rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, parts, CF_METADATA_TIMEOUT_MS);
        if (e) {
            *kerr = e;
            cf_error_set(err, CF_E_KAFKA, "offsets_for_times on %s: %s", topic, rd_kafka_err2str(e));
            goto out;
        }
    }
    for (int i = 0; i < parts->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &parts->elems[i];
        if (mode == START_TIME && tp->err) {
            *kerr = tp->err;
            cf_error_set(err, CF_E_KAFKA, "offsets_for_times on %s[%" PRId32 "]: %s", topic, tp->partition,
                         rd_kafka_err2str(tp->err));
            goto out;
        }
        /* offsets_for_times answers -1 when no message is that recent. */
        if (tp->offset == RD_KAFKA_OFFSET_END) {
            int64_t lo = 0, hi = 0;
            rd_kafka_resp_err_t e =
                rd_kafka_query_watermark_offsets(rk, topic, tp->partition, &lo, &hi, CF_METADATA_TIMEOUT_MS);
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

/* Assigns every partition of topic to the consumer rk at an explicit offset.
 * START_END queries the high watermark now (not the lazy OFFSET_END, which is
 * resolved later and could skip a message produced in between).  Transient
 * metadata errors (a just-created topic) are retried for a few seconds. */
static int assign_all(rd_kafka_t *rk, const char *topic, start_mode mode, int64_t since_us, cf_error *err)
{
    int64_t t0 = cf_mono_us();
    for (;;) {
        rd_kafka_resp_err_t kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (assign_all_once(rk, topic, mode, since_us, &kerr, err) == 0)
            return 0;
        int64_t waited = cf_mono_us() - t0;
        int64_t limit =
            kerr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ? CF_UNKNOWN_TOPIC_RETRY_US : CF_TRANSIENT_RETRY_US;
        if (!kafka_transient(kerr) || waited >= limit)
            return -1;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* A manually assigned consumer: no group membership, no commits. */
static rd_kafka_t *new_result_consumer(cf_dispatcher *d, cf_error *err)
{
    char group[64], errstr[CF_KAFKA_ERRSTR];
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)cf_mono_us();
    /* librdkafka needs a group.id for assign()/consumer_poll(); it is never
     * joined or committed to, so a unique throwaway name is right. */
    snprintf(group, sizeof(group), "codefleet-dispatcher-%016" PRIx64, rnd);
    const kv role[] = {
        {"group.id", group},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"enable.partition.eof", "false"},
        {"isolation.level", "read_committed"},
        {"fetch.wait.max.ms", "5"},
        {"fetch.error.backoff.ms", "10"},
        {"allow.auto.create.topics", "false"},
    };
    rd_kafka_conf_t *conf = make_conf(d->brokers, d->client_id, role, sizeof(role) / sizeof(role[0]), &d->kafka, err);
    if (!conf)
        return NULL;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!rk) {
        rd_kafka_conf_destroy(conf); /* consumed only on success */
        cf_error_set(err, CF_E_KAFKA, "creating consumer: %s", errstr);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

static void close_consumer(rd_kafka_t *rk)
{
    if (!rk)
        return;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

static void set_last_error(cf_dispatcher *d, const char *what)
{
    pthread_mutex_lock(&d->mu);
    cf_strlcpy(d->last_error, what, sizeof(d->last_error));
    pthread_mutex_unlock(&d->mu);
}

static void collector_handle(cf_dispatcher *d, const rd_kafka_message_t *m)
{
    cf_error derr = {0};
    pending_entry *e = calloc(1, sizeof(*e));
    if (!e) {
        atomic_fetch_add(&d->n_malformed, 1);
        return;
    }
    if (cf_result_decode(m->payload, m->len, NULL, &e->res, &derr) < 0) {
        atomic_fetch_add(&d->n_malformed, 1);
        cf_log_debug("dispatcher", "skipping undecodable result at %s[%" PRId32 "]@%" PRId64 ": %s",
                     rd_kafka_topic_name(m->rkt), m->partition, m->offset, derr.msg);
        free(e);
        return;
    }
    e->received_mono_us = cf_mono_us();
    atomic_fetch_add(&d->n_seen, 1);
    bool dup = false;
    pthread_mutex_lock(&d->mu);
    size_t ev = pending_insert(&d->map, e, &dup);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->mu);
    if (ev)
        atomic_fetch_add(&d->n_evicted, ev);
}

static void *collector_main(void *arg)
{
    cf_dispatcher *d = arg;
    while (!atomic_load(&d->stop)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(d->consumer, CF_POLL_SLICE_MS);
        if (!m)
            continue;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                set_last_error(d, rd_kafka_message_errstr(m));
        } else if (m->payload) {
            collector_handle(d, m);
        } else {
            atomic_fetch_add(&d->n_malformed, 1); /* tombstone: not a result */
        }
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static int start_collector(cf_dispatcher *d, cf_error *err)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int e = pthread_cond_init(&d->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (e)
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "pthread_cond_init");
    d->collecting = true;
    if (pending_init(&d->map, d->map.max, err) < 0)
        return -1;
    d->consumer = new_result_consumer(d, err);
    if (!d->consumer)
        return -1;
    if (assign_all(d->consumer, d->result_topic, START_END, 0, err) < 0)
        return cf_error_wrap(err, "result collector");
    d->consumer_q = rd_kafka_queue_get_consumer(d->consumer);
    e = pthread_create(&d->thread, NULL, collector_main, d);
    if (e)
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "starting the result collector");
    d->thread_started = true;
    return 0;
}

/* librdkafka holds the first message for a topic whose metadata it has not
 * seen yet and, with linger.ms=0, sends it only at the broker thread's next
 * periodic wake-up (about 1 s later).  Asking for the topic's metadata up
 * front takes that second off the first submit. */
static void warm_topic_metadata(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return;
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
}

int cf_dispatcher_new(const cf_dispatcher_config *cfg, cf_dispatcher **out, cf_error *err)
{
    *out = NULL;
    cf_dispatcher *d = calloc(1, sizeof(*d));
    if (!d)
        return cf_error_set(err, CF_E_NOMEM, "dispatcher: out of memory");
    pthread_mutex_init(&d->dr_mu, NULL);
    pthread_mutex_init(&d->mu, NULL);
    atomic_init(&d->stop, false);
    d->map.max = cfg->max_pending ? cfg->max_pending : CF_DISPATCHER_MAX_PENDING_DEFAULT;

    d->brokers = cf_strdup(cfg->brokers ? cfg->brokers : CF_DEFAULT_BROKERS);
    d->request_topic = cf_strdup(cfg->request_topic ? cfg->request_topic : CF_DEFAULT_REQUEST_TOPIC);
    d->result_topic = cf_strdup(cfg->result_topic ? cfg->result_topic : CF_DEFAULT_RESULT_TOPIC);
    d->client_id = cf_strdup(cfg->client_id ? cfg->client_id : "codefleet-dispatcher");
    if (!d->brokers || !d->request_topic || !d->result_topic || !d->client_id) {
        cf_error_set(err, CF_E_NOMEM, "dispatcher: out of memory");
        goto fail;
    }
    if (cfg->kafka) {
        d->kafka.items = calloc(cfg->kafka->count ? cfg->kafka->count : 1, sizeof(*d->kafka.items));
        if (!d->kafka.items) {
            cf_error_set(err, CF_E_NOMEM, "dispatcher: out of memory");
            goto fail;
        }
        for (size_t i = 0; i < cfg->kafka->count; i++) {
            d->kafka.items[i].key = cf_strdup(cfg->kafka->items[i].key);
            d->kafka.items[i].value = cf_strdup(cfg->kafka->items[i].value);
            d->kafka.count++;
            if (!d->kafka.items[i].key || !d->kafka.items[i].value) {
                cf_error_set(err, CF_E_NOMEM, "dispatcher: out of memory");
                goto fail;
            }
        }
    }

    const kv role[] = {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        /* 0, not 1: measured here, a 1 ms linger costs ~1.7 ms per hop (p50
         * round trip 4.8 ms vs 1.4 ms); under load messages still batch
         * behind in-flight requests. */
        {"linger.ms", "0"},
        {"partitioner", "murmur2_random"}, /* same partition as Java clients for a key */
    };
    rd_kafka_conf_t *conf =
        make_conf(d->brokers, d->client_id, role, sizeof(role) / sizeof(role[0]), &d->kafka, err);
    if (!conf)
        goto fail;
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_opaque(conf, d);
    char errstr[CF_KAFKA_ERRSTR];
    d->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!d->producer) {
        rd_kafka_conf_destroy(conf);
        cf_error_set(err, CF_E_KAFKA, "creating producer: %s", errstr);
        goto fail;
    }
    if (cfg->collect_results && start_collector(d, err) < 0)
        goto fail;
    warm_topic_metadata(d->producer, d->request_topic);
    *out = d;
    return 0;
fail:
    cf_dispatcher_destroy(d);
    return -1;
}

void cf_dispatcher_destroy(cf_dispatcher *d)
{
    if (!d)
        return;
    if (d->thread_started) {
        atomic_store(&d->stop, true);
        if (d->consumer_q)
            rd_kafka_queue_yield(d->consumer_q); /* wake the poll at once */
        pthread_join(d->thread, NULL);
    }
    if (d->consumer_q)
        rd_kafka_queue_destroy(d->consumer_q);
    close_consumer(d->consumer);
    if (d->producer) {
        if (rd_kafka_flush(d->producer, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
            cf_log_warn("dispatcher", "%d message(s) not delivered at shutdown", rd_kafka_outq_len(d->producer));
        rd_kafka_destroy(d->producer);
    }
    if (d->collecting) {
        pending_destroy(&d->map);
        pthread_cond_destroy(&d->cond);
    }
    pthread_mutex_destroy(&d->mu);
    pthread_mutex_destroy(&d->dr_mu);
    for (size_t i = 0; i < d->kafka.count; i++) {
        free(d->kafka.items[i].key);
        free(d->kafka.items[i].value);
    }
    free(d->kafka.items);
    free(d->brokers);
    free(d->request_topic);
    free(d->result_topic);
    free(d->client_id);
    free(d);
}

/* Produces one message.  With own_value the payload (malloc'd) is handed to
 * librdkafka on success (RD_KAFKA_MSG_F_FREE) and stays the caller's on error. */
static int produce(cf_dispatcher *d, const char *topic, const void *key, size_t keylen, void *value, size_t len,
                   bool own_value, cf_error *err)
{
    int flags = own_value ? RD_KAFKA_MSG_F_FREE : RD_KAFKA_MSG_F_COPY;
    /* Queue full: serve delivery reports and retry for up to ~5 s. */
    for (int attempt = 0;; attempt++) {
        rd_kafka_resp_err_t e = rd_kafka_producev(d->producer, RD_KAFKA_V_TOPIC(topic),
                                                  RD_KAFKA_V_KEY((void *)key, key ? keylen : 0),
                                                  RD_KAFKA_V_VALUE(value, len), RD_KAFKA_V_MSGFLAGS(flags),
                                                  RD_KAFKA_V_END);
        if (!e)
            break;
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL && attempt < 50) {
            rd_kafka_poll(d->producer, CF_POLL_SLICE_MS);
            continue;
        }
        cf_error_set(err, CF_E_KAFKA, "produce to %s: %s", topic, rd_kafka_err2str(e));
        return cf_error_set_retriable(err, e == RD_KAFKA_RESP_ERR__QUEUE_FULL);
    }
    rd_kafka_poll(d->producer, 0); /* serve delivery reports */
    return 0;
}

int cf_dispatcher_submit(cf_dispatcher *d, const cf_request *req, cf_error *err)
{
    if (take_delivery_error(d, err) < 0)
        return cf_error_wrap(err, "earlier submit");
    if (!req->id || !cf_id_valid(req->id, strlen(req->id)))
        return cf_error_set(err, CF_E_INVALID, "request id missing or invalid");
    cf_request copy = *req; /* shallow: only created_us differs */
    if (!copy.created_us)
        copy.created_us = cf_now_us();
    cf_bytes enc = {0};
    if (cf_request_encode(&copy, &enc, err) < 0)
        return cf_error_wrap(err, "request %s", req->id);
    const char *key = req->workspace && req->workspace[0] ? req->workspace : req->id;
    if (produce(d, d->request_topic, key, strlen(key), enc.data, enc.len, true, err) < 0) {
        free(enc.data);
        return cf_error_wrap(err, "request %s", req->id);
    }
    atomic_fetch_add(&d->n_submitted, 1);
    return 0;
}

int cf_dispatcher_produce_raw(cf_dispatcher *d, const char *topic, const void *key, size_t keylen,
                              const void *value, size_t len, cf_error *err)
{
    return produce(d, topic ? topic : d->request_topic, key, keylen, (void *)value, len, false, err);
}

int cf_dispatcher_flush(cf_dispatcher *d, int64_t timeout_us, cf_error *err)
{
    rd_kafka_resp_err_t e = rd_kafka_flush(d->producer, ms_of_us(timeout_us));
    if (take_delivery_error(d, err) < 0)
        return -1;
    if (e == RD_KAFKA_RESP_ERR__TIMED_OUT) {
        cf_error_set(err, CF_E_TIMEOUT, "flush: %d message(s) still in flight", rd_kafka_outq_len(d->producer));
        return cf_error_set_retriable(err, true);
    }
    if (e)
        return cf_error_set(err, CF_E_KAFKA, "flush: %s", rd_kafka_err2str(e));
    return 0;
}

static struct timespec abs_deadline(int64_t deadline_mono_us)
{
    struct timespec ts = {.tv_sec = deadline_mono_us / 1000000, .tv_nsec = (deadline_mono_us % 1000000) * 1000};
    return ts;
}

/* Shared wait loop: id NULL takes the oldest entry of any id. */
static int wait_common(cf_dispatcher *d, const char *id, int64_t timeout_us, cf_result *out, int64_t *received,
                       cf_error *err)
{
    if (!d->collecting)
        return cf_error_set(err, CF_E_INVALID, "wait needs a dispatcher created with collect_results");
    int64_t deadline = cf_mono_us() + (timeout_us > 0 ? timeout_us : 0);
    uint64_t h = id ? hash_id(id) : 0;
    struct timespec ts = abs_deadline(deadline);
    pending_entry *e = NULL;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        e = id ? pending_find(&d->map, id, h, NULL) : d->map.oldest;
        if (e) {
            pending_unlink(&d->map, e);
            break;
        }
        if (cf_mono_us() >= deadline)
            break;
        int rc = pthread_cond_timedwait(&d->cond, &d->mu, &ts);
        if (rc && rc != ETIMEDOUT && rc != EINTR)
            break;
    }
    char last[CF_KAFKA_ERRSTR];
    cf_strlcpy(last, d->last_error, sizeof(last));
    pthread_mutex_unlock(&d->mu);
    if (!e) {
        cf_error_set(err, CF_E_TIMEOUT, "no result for %s within %" PRId64 " ms%s%s", id ? id : "any request",
                     timeout_us / 1000, last[0] ? "; last Kafka error: " : "", last);
        return cf_error_set_retriable(err, true);
    }
    cf_result_clear(out);
    *out = e->res; /* move */
    if (received)
        *received = e->received_mono_us;
    memset(&e->res, 0, sizeof(e->res));
    free(e);
    return 0;
}

int cf_dispatcher_wait(cf_dispatcher *d, const char *id, int64_t timeout_us, cf_result *out, cf_error *err)
{
    if (!id)
        return cf_error_set(err, CF_E_INVALID, "wait: id is NULL");
    return wait_common(d, id, timeout_us, out, NULL, err);
}

int cf_dispatcher_wait_any(cf_dispatcher *d, int64_t timeout_us, cf_result *out, int64_t *received_mono_us,
                           cf_error *err)
{
    return wait_common(d, NULL, timeout_us, out, received_mono_us, err);
}

/* ---------------------------------------------------------------------------
 * Standalone scans: wait_since and tail.
 */
typedef int (*scan_fn)(void *ctx, const rd_kafka_message_t *m);

static int scan_results(cf_dispatcher *d, start_mode mode, int64_t since_us, volatile sig_atomic_t *stop,
                        int64_t timeout_us, scan_fn fn, void *ctx, bool *stopped_by_fn, cf_error *err)
{
    *stopped_by_fn = false;
    rd_kafka_t *rk = new_result_consumer(d, err);
    if (!rk)
        return -1;
    int rc = 0;
    if (assign_all(rk, d->result_topic, mode, since_us, err) < 0) {
        close_consumer(rk);
        return -1;
    }
    int64_t deadline = timeout_us > 0 ? cf_mono_us() + timeout_us : INT64_MAX;
    char last[CF_KAFKA_ERRSTR] = "";
    for (;;) {
        if (stop && *stop)
            break;
        int64_t left = deadline - cf_mono_us();
        if (left <= 0)
            break;
        int slice = left > CF_POLL_SLICE_MS * 1000 ? CF_POLL_SLICE_MS : ms_of_us(left);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, slice);
        if (!m)
            continue;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                snprintf(last, sizeof(last), "%s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        int r = fn(ctx, m);
        rd_kafka_message_destroy(m);
        if (r) {
            *stopped_by_fn = true;
            break;
        }
    }
    if (!*stopped_by_fn && last[0])
        cf_log_debug("dispatcher", "result scan: last Kafka error: %s", last);
    close_consumer(rk);
    return rc;
}

typedef struct find_ctx {
    const char *id;
    size_t idlen;
    cf_result *out;
    uint64_t malformed;
} find_ctx;

static int find_cb(void *arg, const rd_kafka_message_t *m)
{
    find_ctx *f = arg;
    if (!m->payload)
        return 0;
    /* Cheap pre-filter: the key is the id by convention, but a result keyed
     * otherwise (e.g. by workspace) is still found through its "id" field. */
    if (m->key && !(m->key_len == f->idlen && memcmp(m->key, f->id, f->idlen) == 0)) {
        char peek[CF_ID_MAX + 1];
        if (cf_request_peek_id(m->payload, m->len, peek, sizeof(peek)) < 0 || strcmp(peek, f->id) != 0)
            return 0;
    }
    cf_result res = {0};
    cf_error derr = {0};
    if (cf_result_decode(m->payload, m->len, NULL, &res, &derr) < 0) {
        f->malformed++;
        return 0;
    }
    if (!res.id || strcmp(res.id, f->id) != 0) {
        cf_result_clear(&res);
        return 0;
    }
    cf_result_clear(f->out);
    *f->out = res;
    return 1;
}

int cf_dispatcher_wait_since(cf_dispatcher *d, const char *id, int64_t since_us, int64_t timeout_us,
                             cf_result *out, cf_error *err)
{
    if (!id || !cf_id_valid(id, strlen(id)))
        return cf_error_set(err, CF_E_INVALID, "wait: invalid request id");
    if (d->collecting) {
        /* Already collected?  Take it without a scan. */
        if (wait_common(d, id, 0, out, NULL, NULL) == 0)
            return 0;
    }
    find_ctx f = {.id = id, .idlen = strlen(id), .out = out};
    bool found = false;
    if (scan_results(d, START_TIME, since_us, NULL, timeout_us > 0 ? timeout_us : 1, find_cb, &f, &found, err) < 0)
        return cf_error_wrap(err, "wait for %s", id);
    if (!found) {
        cf_error_set(err, CF_E_TIMEOUT, "no result for %s within %" PRId64 " ms", id, timeout_us / 1000);
        return cf_error_set_retriable(err, true);
    }
    return 0;
}

typedef struct tail_ctx {
    cf_tail_fn fn;
    void *ctx;
} tail_ctx;

static int tail_cb(void *arg, const rd_kafka_message_t *m)
{
    tail_ctx *t = arg;
    cf_result res = {0};
    cf_error derr = {0};
    int r;
    if (!m->payload) {
        cf_error_set(&derr, CF_E_INVALID, "empty message (tombstone)");
        return t->fn(t->ctx, NULL, &derr, m->partition, m->offset);
    }
    if (cf_result_decode(m->payload, m->len, NULL, &res, &derr) < 0)
        return t->fn(t->ctx, NULL, &derr, m->partition, m->offset);
    r = t->fn(t->ctx, &res, NULL, m->partition, m->offset);
    cf_result_clear(&res);
    return r;
}

int cf_dispatcher_tail(cf_dispatcher *d, bool from_beginning, volatile sig_atomic_t *stop, int64_t timeout_us,
                       cf_tail_fn fn, void *ctx, cf_error *err)
{
    tail_ctx t = {.fn = fn, .ctx = ctx};
    bool by_fn = false;
    if (scan_results(d, from_beginning ? START_BEGINNING : START_END, 0, stop, timeout_us, tail_cb, &t, &by_fn,
                     err) < 0)
        return cf_error_wrap(err, "tail %s", d->result_topic);
    return 0;
}

void cf_dispatcher_get_stats(cf_dispatcher *d, cf_dispatcher_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->submitted = atomic_load(&d->n_submitted);
    out->delivery_failed = atomic_load(&d->n_delivery_failed);
    out->results_seen = atomic_load(&d->n_seen);
    out->results_malformed = atomic_load(&d->n_malformed);
    out->results_evicted = atomic_load(&d->n_evicted);
    if (d->collecting) {
        pthread_mutex_lock(&d->mu);
        out->results_pending = d->map.count;
        pthread_mutex_unlock(&d->mu);
    }
}

const char *cf_dispatcher_request_topic(const cf_dispatcher *d)
{
    return d->request_topic;
}

const char *cf_dispatcher_result_topic(const cf_dispatcher *d)
{
    return d->result_topic;
}

/* ---------------------------------------------------------------------------
 * Admin.
 */
int cf_kafka_create_topics_ex(const char *brokers, const cf_kvlist *kafka, const char *const *names, size_t n,
                              int partitions, int replication_factor, int64_t timeout_us, cf_error *err)
{
    if (n == 0)
        return 0;
    if (partitions < 1 || partitions > CF_MAX_PARTITIONS)
        return cf_error_set(err, CF_E_INVALID, "partitions must be in [1, %d]", CF_MAX_PARTITIONS);
    char errstr[CF_KAFKA_ERRSTR];
    rd_kafka_conf_t *conf =
        make_conf(brokers ? brokers : CF_DEFAULT_BROKERS, "codefleet-admin", NULL, 0, kafka, err);
    if (!conf)
        return -1;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        return cf_error_set(err, CF_E_KAFKA, "creating admin client: %s", errstr);
    }
    int rc = -1;
    rd_kafka_NewTopic_t **topics = calloc(n, sizeof(*topics));
    rd_kafka_AdminOptions_t *opts = NULL;
    rd_kafka_queue_t *q = NULL;
    rd_kafka_event_t *ev = NULL;
    if (!topics) {
        cf_error_set(err, CF_E_NOMEM, "create topics: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        topics[i] = rd_kafka_NewTopic_new(names[i], partitions, replication_factor, errstr, sizeof(errstr));
        if (!topics[i]) {
            cf_error_set(err, CF_E_INVALID, "topic %s: %s", names[i], errstr);
            goto out;
        }
    }
    opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    int tmo = ms_of_us(timeout_us > 0 ? timeout_us : 30000000);
    if (!opts || rd_kafka_AdminOptions_set_request_timeout(opts, tmo, errstr, sizeof(errstr)) ||
        rd_kafka_AdminOptions_set_operation_timeout(opts, tmo, errstr, sizeof(errstr))) {
        cf_error_set(err, CF_E_KAFKA, "admin options: %s", opts ? errstr : "out of memory");
        goto out;
    }
    q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, topics, n, opts, q);
    ev = rd_kafka_queue_poll(q, tmo + 1000);
    if (!ev) {
        cf_error_set(err, CF_E_TIMEOUT, "create topics: no answer within %d ms", tmo);
        goto out;
    }
    if (rd_kafka_event_error(ev)) {
        cf_error_set(err, CF_E_KAFKA, "create topics: %s", rd_kafka_event_error_string(ev));
        goto out;
    }
    const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
    size_t cnt = 0;
    const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreateTopics_result_topics(res, &cnt) : NULL;
    if (!res) {
        cf_error_set(err, CF_E_KAFKA, "create topics: unexpected event %s", rd_kafka_event_name(ev));
        goto out;
    }
    for (size_t i = 0; i < cnt; i++) {
        rd_kafka_resp_err_t te = rd_kafka_topic_result_error(tr[i]);
        if (te && te != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            const char *es = rd_kafka_topic_result_error_string(tr[i]);
            cf_error_set(err, CF_E_KAFKA, "create topic %s: %s", rd_kafka_topic_result_name(tr[i]),
                         es ? es : rd_kafka_err2str(te));
            goto out;
        }
    }
    /* Return once every topic is usable (metadata with a leader per
     * partition), so callers can consume from it at once. */
    int64_t until = cf_mono_us() + (timeout_us > 0 ? timeout_us : 30000000);
    for (size_t i = 0; i < n; i++) {
        for (;;) {
            int32_t np = 0;
            rd_kafka_resp_err_t kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
            if (topic_partitions(rk, names[i], &np, &kerr, err) == 0)
                break;
            if (!kafka_transient(kerr) || cf_mono_us() >= until) {
                cf_error_wrap(err, "created, but not usable yet");
                goto out;
            }
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    rc = 0;
out:
    if (ev)
        rd_kafka_event_destroy(ev);
    if (q)
        rd_kafka_queue_destroy(q);
    if (opts)
        rd_kafka_AdminOptions_destroy(opts);
    if (topics) {
        for (size_t i = 0; i < n; i++)
            if (topics[i])
                rd_kafka_NewTopic_destroy(topics[i]);
        free(topics);
    }
    rd_kafka_destroy(rk);
    return rc;
}

int cf_kafka_create_topics(const char *brokers, const char *const *names, size_t n, int partitions,
                           int64_t timeout_us, cf_error *err)
{
    /* -1: the broker's default.replication.factor (KIP-464). */
    return cf_kafka_create_topics_ex(brokers, NULL, names, n, partitions, -1, timeout_us, err);
}

int cf_dispatcher_new_id(char *buf, size_t cap, cf_error *err)
{
    uint64_t rnd;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "getrandom");
    int64_t now = cf_now_us();
    int n = snprintf(buf, cap, "%013" PRIx64 "-%016" PRIx64, (uint64_t)now, rnd);
    if (n < 0 || (size_t)n >= cap)
        return cf_error_set(err, CF_E_LIMIT, "id buffer too small");
    return 0;
}
