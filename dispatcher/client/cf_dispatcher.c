/* cf_dispatcher: producer, background result collector, standalone scans and
 * topic administration.  See cf_dispatcher.h for the contract. */
#include "cf_dispatcher.h"
#include "cf_control.h"

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

#include "cf_kafka.h"
#include "cf_log.h"
#include "cf_util.h"

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
    size_t bytes; /* the encoded result's size: what the entry holds, roughly */
} pending_entry;

typedef struct pending_map {
    pending_entry **buckets;
    size_t nbuckets; /* power of two */
    pending_entry *oldest, *newest;
    size_t count;
    size_t max;
    size_t bytes;     /* sum of the entries' bytes */
    size_t max_bytes; /* and its bound: results may be megabytes each */
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
    m->bytes -= e->bytes;
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
    m->bytes += e->bytes;
    while ((m->count > m->max || m->bytes > m->max_bytes) && m->oldest && m->oldest != e) {
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
    char *cancel_topic;
    atomic_bool cancel_warm; /* its metadata fetched (first cancel) */
    char *result_topic;
    char *client_id;
    cf_kvlist kafka; /* private copy */

    rd_kafka_t *producer;
    cf_kafka_dr dr; /* the producer's delivery reports */
    /* Keeper: heals the producer (cf_kafka_heal.h) whether or not a
     * collector runs; a dispatcher that only submits and flushes (no
     * collector) once kept 307 requests for good after a broker restart. */
    pthread_t keeper;
    bool keeper_started;
    pthread_mutex_t keeper_mu;
    pthread_cond_t keeper_cond; /* signalled by destroy */

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
    atomic_uint_fast64_t n_seen;
    atomic_uint_fast64_t n_malformed;
    atomic_uint_fast64_t n_evicted;

    /* Chunk reader (on_chunk). */
    char *output_topic;
    cf_chunk_fn on_chunk;
    void *on_chunk_ctx;
    rd_kafka_t *chunk_consumer;
    rd_kafka_queue_t *chunk_q;
    pthread_t chunk_thread;
    bool chunk_thread_started;
    atomic_uint_fast64_t n_chunks;
    atomic_uint_fast64_t n_chunks_malformed;
    atomic_uint_fast64_t n_producer_heals;
    volatile sig_atomic_t *interrupt; /* the application's (config) */
};

/* A consumer of the result topic, assigned by the caller. */
static rd_kafka_t *new_result_consumer(cf_dispatcher *d, cf_error *err)
{
    return cf_kafka_consumer_new(d->brokers, d->client_id, &d->kafka, "codefleet-dispatcher", "consumer", err);
}

static void set_last_error(cf_dispatcher *d, const char *what)
{
    pthread_mutex_lock(&d->mu);
    cf_strlcpy(d->last_error, what, sizeof(d->last_error));
    pthread_mutex_unlock(&d->mu);
}

/* A result this client cannot decode but whose id it can read: the waiter
 * gets an internal_error saying so, instead of waiting out its timeout
 * for a result that came.  Returns 0 with *out filled, -1 without an id. */
static int undecodable_result(const rd_kafka_message_t *m, const cf_error *derr, cf_result *out)
{
    char id[CF_ID_MAX + 1];
    if (cf_request_peek_id(m->payload, m->len, id, sizeof(id)) < 0)
        return -1;
    memset(out, 0, sizeof(*out));
    if (cf_str_set(&out->id, id) < 0)
        return -1;
    out->status = CF_STATUS_INTERNAL_ERROR;
    cf_result_set_reason(out, "a result for this request arrived (%s[%" PRId32 "]@%" PRId64 ") but cannot be decoded: %s",
                         rd_kafka_topic_name(m->rkt), m->partition, m->offset, derr->msg);
    return 0;
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
        cf_log_warn("dispatcher", "undecodable result at %s[%" PRId32 "]@%" PRId64 ": %s",
                    rd_kafka_topic_name(m->rkt), m->partition, m->offset, derr.msg);
        if (undecodable_result(m, &derr, &e->res) < 0) {
            free(e);
            return;
        }
    }
    e->received_mono_us = cf_mono_us();
    e->bytes = m->len + sizeof(*e);
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
    cf_kafka_heal consumer_heal = {0};
    while (!atomic_load(&d->stop)) {
        cf_kafka_heal_check(d->consumer, &consumer_heal, cf_mono_us());
        rd_kafka_message_t *m = rd_kafka_consumer_poll(d->consumer, CF_KAFKA_POLL_SLICE_MS);
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

static void *chunk_reader_main(void *arg)
{
    cf_dispatcher *d = arg;
    cf_kafka_heal heal = {0};
    while (!atomic_load(&d->stop)) {
        cf_kafka_heal_check(d->chunk_consumer, &heal, cf_mono_us());
        rd_kafka_message_t *m = rd_kafka_consumer_poll(d->chunk_consumer, CF_KAFKA_POLL_SLICE_MS);
        if (!m)
            continue;
        if (!m->err) {
            cf_chunk c;
            cf_error derr = {0};
            if (m->payload && cf_chunk_decode(m->payload, m->len, NULL, &c, &derr) == 0) {
                /* Start notices are not output (cf_dispatcher_find_start). */
                if (c.kind == CF_CHUNK_OUTPUT) {
                    atomic_fetch_add(&d->n_chunks, 1);
                    d->on_chunk(d->on_chunk_ctx, &c);
                }
                cf_chunk_clear(&c);
            } else {
                atomic_fetch_add(&d->n_chunks_malformed, 1);
                cf_log_warn("dispatcher", "undecodable output chunk at %s[%" PRId32 "]@%" PRId64 ": %s",
                            rd_kafka_topic_name(m->rkt), m->partition, m->offset,
                            m->payload ? derr.msg : "no value");
            }
        }
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

/* A CLOCK_MONOTONIC deadline (the condition variables here wait on it). */
static struct timespec abs_deadline(int64_t deadline_mono_us)
{
    struct timespec ts = {.tv_sec = deadline_mono_us / 1000000, .tv_nsec = (deadline_mono_us % 1000000) * 1000};
    return ts;
}

static void *producer_keeper_main(void *arg)
{
    cf_dispatcher *d = arg;
    cf_kafka_heal heal = {0};
    pthread_mutex_lock(&d->keeper_mu);
    while (!atomic_load(&d->stop)) {
        if (cf_kafka_heal_check(d->producer, &heal, cf_mono_us()))
            atomic_fetch_add(&d->n_producer_heals, 1);
        /* Heal checks want a look every second or more often. */
        struct timespec until = abs_deadline(cf_mono_us() + 500 * 1000LL);
        pthread_cond_timedwait(&d->keeper_cond, &d->keeper_mu, &until);
    }
    pthread_mutex_unlock(&d->keeper_mu);
    return NULL;
}

/* A condition variable whose timed waits take CLOCK_MONOTONIC deadlines
 * (abs_deadline): the wall clock may jump. */
static int cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int e = pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
    return e;
}

static int start_keeper(cf_dispatcher *d, cf_error *err)
{
    int e = cond_init_monotonic(&d->keeper_cond);
    if (e)
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "pthread_cond_init");
    pthread_mutex_init(&d->keeper_mu, NULL);
    e = pthread_create(&d->keeper, NULL, producer_keeper_main, d);
    if (e) {
        pthread_cond_destroy(&d->keeper_cond);
        pthread_mutex_destroy(&d->keeper_mu);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "starting the producer keeper");
    }
    d->keeper_started = true;
    return 0;
}

static int start_chunk_reader(cf_dispatcher *d, const cf_dispatcher_config *cfg, cf_error *err)
{
    d->chunk_consumer =
        cf_kafka_consumer_new(d->brokers, d->client_id, &d->kafka, "codefleet-dispatcher", "chunk reader", err);
    if (!d->chunk_consumer)
        return -1;
    bool replay = cfg->output_since_us > 0;
    if (cf_kafka_assign(d->chunk_consumer, d->output_topic, replay ? cfg->output_key : NULL, true,
                        replay ? CF_KAFKA_FROM_TIME : CF_KAFKA_FROM_END, cfg->output_since_us, err) < 0)
        return cf_error_wrap(err, "output chunk reader");
    d->chunk_q = rd_kafka_queue_get_consumer(d->chunk_consumer);
    int e = pthread_create(&d->chunk_thread, NULL, chunk_reader_main, d);
    if (e)
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "starting the output chunk reader");
    d->chunk_thread_started = true;
    return 0;
}

static int start_collector(cf_dispatcher *d, cf_error *err)
{
    int e = cond_init_monotonic(&d->cond);
    if (e)
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "pthread_cond_init");
    d->collecting = true;
    if (pending_init(&d->map, d->map.max, err) < 0)
        return -1;
    d->consumer = new_result_consumer(d, err);
    if (!d->consumer)
        return -1;
    if (cf_kafka_assign(d->consumer, d->result_topic, NULL, true, CF_KAFKA_FROM_END, 0, err) < 0)
        return cf_error_wrap(err, "result collector");
    d->consumer_q = rd_kafka_queue_get_consumer(d->consumer);
    e = pthread_create(&d->thread, NULL, collector_main, d);
    if (e)
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "starting the result collector");
    d->thread_started = true;
    return 0;
}

int cf_dispatcher_new(const cf_dispatcher_config *cfg, cf_dispatcher **out, cf_error *err)
{
    *out = NULL;
    cf_dispatcher *d = calloc(1, sizeof(*d));
    if (!d)
        return cf_error_set(err, CF_E_NOMEM, "dispatcher: out of memory");
    cf_kafka_dr_init(&d->dr);
    pthread_mutex_init(&d->mu, NULL);
    atomic_init(&d->stop, false);
    d->interrupt = cfg->interrupt;
    d->map.max = cfg->max_pending ? cfg->max_pending : CF_DISPATCHER_MAX_PENDING_DEFAULT;
    d->map.max_bytes = cfg->max_pending_bytes ? cfg->max_pending_bytes : CF_DISPATCHER_MAX_PENDING_BYTES_DEFAULT;

    d->brokers = cf_strdup(cfg->brokers ? cfg->brokers : CF_DEFAULT_BROKERS);
    d->request_topic = cf_strdup(cfg->request_topic ? cfg->request_topic : CF_DEFAULT_REQUEST_TOPIC);
    d->result_topic = cf_strdup(cfg->result_topic ? cfg->result_topic : CF_DEFAULT_RESULT_TOPIC);
    d->client_id = cf_strdup(cfg->client_id ? cfg->client_id : "codefleet-dispatcher");
    if (d->request_topic) {
        size_t n = strlen(d->request_topic) + sizeof(CF_CANCEL_TOPIC_SUFFIX);
        d->cancel_topic = cfg->cancel_topic ? cf_strdup(cfg->cancel_topic) : malloc(n);
        if (d->cancel_topic && !cfg->cancel_topic)
            snprintf(d->cancel_topic, n, "%s%s", d->request_topic, CF_CANCEL_TOPIC_SUFFIX);
    }
    if (d->result_topic) {
        size_t n = strlen(d->result_topic) + sizeof(CF_CHUNK_TOPIC_SUFFIX);
        d->output_topic = cfg->output_topic ? cf_strdup(cfg->output_topic) : malloc(n);
        if (d->output_topic && !cfg->output_topic)
            snprintf(d->output_topic, n, "%s%s", d->result_topic, CF_CHUNK_TOPIC_SUFFIX);
        d->on_chunk = cfg->on_chunk;
        d->on_chunk_ctx = cfg->on_chunk_ctx;
    }
    if (!d->brokers || !d->request_topic || !d->result_topic || !d->client_id || !d->cancel_topic ||
        !d->output_topic) {
        cf_error_set(err, CF_E_NOMEM, "dispatcher: out of memory");
        goto fail;
    }
    if (cf_kafka_kvlist_copy(&d->kafka, cfg->kafka) < 0) {
        cf_error_set(err, CF_E_NOMEM, "dispatcher: out of memory");
        goto fail;
    }
    if (!cfg->chunks_only) {
        d->producer = cf_kafka_producer_new(d->brokers, d->client_id, &d->kafka, &d->dr, "producer", err);
        if (!d->producer)
            goto fail;
    }
    if (cfg->on_chunk && start_chunk_reader(d, cfg, err) < 0)
        goto fail;
    if (cfg->collect_results && start_collector(d, err) < 0)
        goto fail;
    /* The keeper last: while the readers' assigns wait on a broker that is
     * slow to answer, its warning ("has known no broker") would only add
     * to their one-line error. */
    if (d->producer) {
        if (start_keeper(d, err) < 0)
            goto fail;
        cf_kafka_warm_topic(d->producer, d->request_topic);
    }
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
    if (d->chunk_thread_started) {
        atomic_store(&d->stop, true);
        if (d->chunk_q)
            rd_kafka_queue_yield(d->chunk_q);
        pthread_join(d->chunk_thread, NULL);
    }
    if (d->keeper_started) {
        pthread_mutex_lock(&d->keeper_mu);
        atomic_store(&d->stop, true);
        pthread_cond_signal(&d->keeper_cond);
        pthread_mutex_unlock(&d->keeper_mu);
        pthread_join(d->keeper, NULL);
        pthread_cond_destroy(&d->keeper_cond);
        pthread_mutex_destroy(&d->keeper_mu);
    }
    if (d->chunk_q)
        rd_kafka_queue_destroy(d->chunk_q);
    cf_kafka_consumer_close(d->chunk_consumer);
    if (d->consumer_q)
        rd_kafka_queue_destroy(d->consumer_q);
    cf_kafka_consumer_close(d->consumer);
    cf_kafka_producer_destroy(d->producer, "dispatcher", "message");
    if (d->collecting) {
        pending_destroy(&d->map);
        pthread_cond_destroy(&d->cond);
    }
    pthread_mutex_destroy(&d->mu);
    cf_kafka_dr_destroy(&d->dr);
    cf_kvlist_free(&d->kafka);
    free(d->brokers);
    free(d->request_topic);
    free(d->cancel_topic);
    free(d->output_topic);
    free(d->result_topic);
    free(d->client_id);
    free(d);
}

/* Produces one message.  With own_value the payload (malloc'd) is handed to
 * librdkafka on success (RD_KAFKA_MSG_F_FREE) and stays the caller's on error. */
/* A dispatcher made with chunks_only sends nothing. */
static int need_producer(const cf_dispatcher *d, cf_error *err)
{
    return d->producer ? 0 : cf_error_set(err, CF_E_INVALID, "dispatcher: made with chunks_only, it sends nothing");
}

static int produce(cf_dispatcher *d, const char *topic, const void *key, size_t keylen, void *value, size_t len,
                   bool own_value, cf_error *err)
{
    if (need_producer(d, err) < 0)
        return -1;
    rd_kafka_resp_err_t e = cf_kafka_produce(d->producer, topic, key, keylen, value, len,
                                             own_value ? RD_KAFKA_MSG_F_FREE : RD_KAFKA_MSG_F_COPY);
    if (!e)
        return 0;
    cf_error_set(err, CF_E_KAFKA, "produce to %s: %s", topic, rd_kafka_err2str(e));
    return cf_error_set_retriable(err, e == RD_KAFKA_RESP_ERR__QUEUE_FULL);
}

int cf_dispatcher_submit(cf_dispatcher *d, const cf_request *req, cf_error *err)
{
    if (cf_kafka_dr_take(&d->dr, err) < 0)
        return cf_error_wrap(err, "earlier submit");
    if (!req->id || !cf_id_valid(req->id, strlen(req->id)))
        return cf_error_set(err, CF_E_INVALID, "request id missing or invalid");
    cf_request copy = *req; /* shallow: only created_us differs */
    if (!copy.created_us)
        copy.created_us = cf_now_us();
    cf_bytes enc = {0};
    if (cf_request_encode(&copy, &enc, err) < 0)
        return cf_error_wrap(err, "request %s", req->id);
    /* One workspace's requests, or else one thread's, share a partition:
     * they run in order and the worker can fence checkpoint writers by
     * offset. */
    const char *key = req->workspace && req->workspace[0] ? req->workspace
                      : req->session && req->session[0]   ? req->session /* its workspace (SPEC 3.6) */
                      : req->thread && req->thread[0]     ? req->thread
                                                          : req->id;
    if (produce(d, d->request_topic, key, strlen(key), enc.data, enc.len, true, err) < 0) {
        free(enc.data);
        return cf_error_wrap(err, "request %s", req->id);
    }
    atomic_fetch_add(&d->n_submitted, 1);
    return 0;
}

int cf_dispatcher_cancel(cf_dispatcher *d, const char *id, const char *reason, int64_t timeout_us, cf_error *err)
{
    if (need_producer(d, err) < 0)
        return -1;
    if (cf_kafka_dr_take(&d->dr, err) < 0)
        return cf_error_wrap(err, "earlier submit");
    /* librdkafka holds a message for a topic it has no metadata for until
     * its next periodic wake-up (~1 s): the first cancel asks first. */
    if (!atomic_load(&d->cancel_warm)) {
        rd_kafka_resp_err_t e = cf_kafka_topic_check(d->producer, d->cancel_topic);
        if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC)
            return cf_error_set(err, CF_E_KAFKA,
                                "cancel topic %s does not exist: no worker would read the cancel (codefleet topics "
                                "create makes it)", d->cancel_topic);
        if (e == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
            return cf_error_set(err, CF_E_KAFKA,
                                "cancel topic %s: it does not exist, or this principal may not write it (topics "
                                "create makes it; a tenant cancels through its own request topic)",
                                d->cancel_topic);
        atomic_store(&d->cancel_warm, true);
    }
    cf_cancel c = {.id = (char *)id, .reason = (char *)reason, .created_us = cf_now_us()};
    cf_bytes enc = {0};
    if (!id || cf_cancel_encode(&c, &enc, err) < 0)
        return id ? -1 : cf_error_set(err, CF_E_INVALID, "cancel: no request id");
    if (produce(d, d->cancel_topic, id, strlen(id), enc.data, enc.len, true, err) < 0) {
        free(enc.data);
        return cf_error_wrap(err, "cancel of %s", id);
    }
    if (cf_dispatcher_flush(d, timeout_us, err) < 0)
        return cf_error_wrap(err, "cancel of %s", id);
    return 0;
}

int cf_dispatcher_produce_raw(cf_dispatcher *d, const char *topic, const void *key, size_t keylen,
                              const void *value, size_t len, cf_error *err)
{
    return produce(d, topic ? topic : d->request_topic, key, keylen, (void *)value, len, false, err);
}

int cf_dispatcher_flush(cf_dispatcher *d, int64_t timeout_us, cf_error *err)
{
    if (need_producer(d, err) < 0)
        return -1;
    return cf_kafka_flush(d->producer, &d->dr, timeout_us, "message", err);
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

static int scan_results(cf_dispatcher *d, cf_kafka_start mode, int64_t since_us, volatile sig_atomic_t *stop,
                        int64_t timeout_us, scan_fn fn, void *ctx, bool *stopped_by_fn, cf_error *err)
{
    *stopped_by_fn = false;
    rd_kafka_t *rk = new_result_consumer(d, err);
    if (!rk)
        return -1;
    int rc = 0;
    if (cf_kafka_assign(rk, d->result_topic, NULL, true, mode, since_us, err) < 0) {
        cf_kafka_consumer_close(rk);
        return -1;
    }
    int64_t deadline = timeout_us > 0 ? cf_mono_us() + timeout_us : INT64_MAX;
    char last[CF_KAFKA_ERRSTR] = "";
    rd_kafka_message_t *m;
    while ((m = cf_kafka_consume(rk, deadline, stop, NULL, last, sizeof(last)))) {
        int r = fn(ctx, m);
        rd_kafka_message_destroy(m);
        if (r) {
            *stopped_by_fn = true;
            break;
        }
    }
    if (!*stopped_by_fn && last[0])
        cf_log_debug("dispatcher", "result scan: last Kafka error: %s", last);
    cf_kafka_consumer_close(rk);
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
        if (undecodable_result(m, &derr, &res) < 0)
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
    if (scan_results(d, CF_KAFKA_FROM_TIME, since_us, d->interrupt, timeout_us > 0 ? timeout_us : 1, find_cb, &f,
                     &found, err) < 0)
        return cf_error_wrap(err, "wait for %s", id);
    if (!found && d->interrupt && *d->interrupt) { /* the caller's time ran out early */
        cf_error_set(err, CF_E_TIMEOUT, "interrupted before the result of %s came", id);
        return cf_error_set_retriable(err, true);
    }
    if (!found) {
        cf_error_set(err, CF_E_TIMEOUT, "no result for %s within %" PRId64 " ms", id, timeout_us / 1000);
        return cf_error_set_retriable(err, true);
    }
    return 0;
}

static int ms_left(int64_t deadline)
{
    int64_t left = deadline - cf_mono_us();
    return left <= 0 ? 0 : cf_kafka_ms_of_us(left);
}

/* Start notices (SPEC.md "Start notices"): the worker publishes one on the
 * output topic, keyed by the request id, when a slot takes a request that
 * asked for it.  The scan reads the id's partition from since_us up to the
 * end it had when the scan began, so "not found" means no worker had
 * started it by then; it never waits for one to come. */
int cf_dispatcher_find_start(cf_dispatcher *d, const char *id, int64_t since_us, int64_t timeout_us, cf_chunk *out,
                             cf_error *err)
{
    memset(out, 0, sizeof(*out));
    if (!id || !cf_id_valid(id, strlen(id)))
        return cf_error_set(err, CF_E_INVALID, "find start: invalid request id");
    /* One deadline for every step: a caller whose own wait already ran
     * out must not wait again on a slow broker. */
    const int64_t deadline = cf_mono_us() + (timeout_us > 0 ? timeout_us : 1);
    const char *topic = d->output_topic;
    rd_kafka_t *rk = cf_kafka_consumer_new(d->brokers, d->client_id, &d->kafka, "codefleet-dispatcher",
                                           "start notice reader", err);
    if (!rk)
        return -1;
    int rc = -1;
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rkt ? rd_kafka_metadata(rk, 0, rkt, &md, ms_left(deadline)) : RD_KAFKA_RESP_ERR__FAIL;
    if (!e && (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt <= 0 ||
               md->topics[0].partition_cnt > CF_KAFKA_MAX_PARTITIONS))
        e = md->topic_cnt == 1 && md->topics[0].err ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    if (e || !parts) {
        if (ms_left(deadline) == 0)
            cf_error_set(err, CF_E_TIMEOUT, "start notices on %s: no answer within %" PRId64 " ms", topic,
                         timeout_us / 1000);
        else
            cf_error_set(err, CF_E_KAFKA, "start notices on %s: %s", topic,
                         parts ? rd_kafka_err2str(e) : "out of memory");
        goto out;
    }
    /* The worker's producer partitions by murmur2 of the key, as here. */
    int32_t partition = cf_kafka_partition_for_key(id, md->topics[0].partition_cnt);
    rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_add(parts, topic, partition);
    tp->offset = since_us > 0 ? since_us / 1000 : 0;
    int64_t lo = 0, hi = 0;
    if ((e = rd_kafka_offsets_for_times(rk, parts, ms_left(deadline))) || (e = tp->err) ||
        (e = rd_kafka_query_watermark_offsets(rk, topic, partition, &lo, &hi, ms_left(deadline)))) {
        cf_error_set(err, ms_left(deadline) == 0 ? CF_E_TIMEOUT : CF_E_KAFKA, "start notices on %s[%" PRId32 "]: %s",
                     topic, partition, rd_kafka_err2str(e));
        goto out;
    }
    rc = 0;
    if (tp->offset < 0 || tp->offset >= hi) /* nothing that recent */
        goto out;
    if ((e = rd_kafka_assign(rk, parts))) {
        rc = cf_error_set(err, CF_E_KAFKA, "start notices on %s: assign: %s", topic, rd_kafka_err2str(e));
        goto out;
    }
    /* To the end as it is now, keeping the last notice: a request run
     * again after a worker died has one per run, and the last is the run
     * that may still answer. */
    size_t idlen = strlen(id);
    char last[CF_KAFKA_ERRSTR] = "";
    rd_kafka_message_t *m;
    bool at_end = false;
    while (!at_end && (m = cf_kafka_consume(rk, deadline, NULL, NULL, last, sizeof(last)))) {
        at_end = m->offset >= hi - 1;
        if (m->payload && m->key && m->key_len == idlen && memcmp(m->key, id, idlen) == 0) {
            cf_chunk c;
            cf_error derr = {0};
            if (cf_chunk_decode(m->payload, m->len, NULL, &c, &derr) == 0 && c.kind == CF_CHUNK_START &&
                strcmp(c.id, id) == 0) {
                cf_chunk_clear(out);
                *out = c;
                rc = 1;
            } else {
                cf_chunk_clear(&c); /* NULL-safe after a failed decode */
            }
        }
        rd_kafka_message_destroy(m);
    }
    if (rc == 0 && !at_end) {
        cf_error_set(err, CF_E_TIMEOUT, "start notices on %s: not read to the end within %" PRId64 " ms%s%s", topic,
                     timeout_us / 1000, last[0] ? ": " : "", last);
        rc = -1;
    }
out:
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (parts)
        rd_kafka_topic_partition_list_destroy(parts);
    cf_kafka_consumer_close(rk);
    return rc;
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
    cf_kafka_start start = from_beginning ? CF_KAFKA_FROM_BEGINNING : CF_KAFKA_FROM_END;
    if (scan_results(d, start, 0, stop, timeout_us, tail_cb, &t, &by_fn, err) < 0)
        return cf_error_wrap(err, "tail %s", d->result_topic);
    return 0;
}

void cf_dispatcher_get_stats(cf_dispatcher *d, cf_dispatcher_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->submitted = atomic_load(&d->n_submitted);
    out->delivery_failed = atomic_load(&d->dr.failed);
    out->results_seen = atomic_load(&d->n_seen);
    out->results_malformed = atomic_load(&d->n_malformed);
    out->results_evicted = atomic_load(&d->n_evicted);
    out->chunks_seen = atomic_load(&d->n_chunks);
    out->chunks_malformed = atomic_load(&d->n_chunks_malformed);
    out->producer_heals = atomic_load(&d->n_producer_heals);
    if (d->collecting) {
        pthread_mutex_lock(&d->mu);
        out->results_pending = d->map.count;
        pthread_mutex_unlock(&d->mu);
    }
}

const char *cf_dispatcher_cancel_topic(const cf_dispatcher *d)
{
    return d->cancel_topic;
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
/* The plumbing every admin request shares: a short-lived client, options
 * with the timeout, a queue, and the one event that answers. */
typedef struct admin_call {
    rd_kafka_t *rk;
    rd_kafka_AdminOptions_t *opts;
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    int tmo_ms;
} admin_call;

static int admin_begin(admin_call *a, const char *brokers, const cf_kvlist *kafka, rd_kafka_admin_op_t op,
                       int64_t timeout_us, cf_error *err)
{
    memset(a, 0, sizeof(*a));
    char errstr[CF_KAFKA_ERRSTR];
    rd_kafka_conf_t *conf =
        cf_kafka_conf_new(brokers ? brokers : CF_DEFAULT_BROKERS, "codefleet-admin", NULL, 0, kafka, err);
    if (!conf)
        return -1;
    a->rk = cf_kafka_client_new(RD_KAFKA_PRODUCER, conf, "admin client", err);
    if (!a->rk)
        return -1;
    a->tmo_ms = cf_kafka_ms_of_us(timeout_us > 0 ? timeout_us : 30000000);
    a->opts = rd_kafka_AdminOptions_new(a->rk, op);
    if (!a->opts || rd_kafka_AdminOptions_set_request_timeout(a->opts, a->tmo_ms, errstr, sizeof(errstr)) ||
        (op == RD_KAFKA_ADMIN_OP_CREATETOPICS &&
         rd_kafka_AdminOptions_set_operation_timeout(a->opts, a->tmo_ms, errstr, sizeof(errstr))))
        return cf_error_set(err, CF_E_KAFKA, "admin options: %s", a->opts ? errstr : "out of memory");
    a->q = rd_kafka_queue_new(a->rk);
    return a->q ? 0 : cf_error_set(err, CF_E_NOMEM, "admin queue: out of memory");
}

/* Waits for the answer to the request just sent on a->q. */
static int admin_wait(admin_call *a, const char *what, cf_error *err)
{
    a->ev = rd_kafka_queue_poll(a->q, a->tmo_ms + 1000);
    if (!a->ev)
        return cf_error_set(err, CF_E_TIMEOUT, "%s: no answer within %d ms", what, a->tmo_ms);
    if (rd_kafka_event_error(a->ev))
        return cf_error_set(err, CF_E_KAFKA, "%s: %s", what, rd_kafka_event_error_string(a->ev));
    return 0;
}

static void admin_end(admin_call *a)
{
    if (a->ev)
        rd_kafka_event_destroy(a->ev);
    if (a->q)
        rd_kafka_queue_destroy(a->q);
    if (a->opts)
        rd_kafka_AdminOptions_destroy(a->opts);
    if (a->rk)
        rd_kafka_destroy(a->rk);
    memset(a, 0, sizeof(*a));
}

/* A broker publishes a new partition's leader in its metadata a moment
 * before its replica manager serves the partition.  A produce arriving in
 * that gap fails and is retried while the next one is appended, so an
 * idempotent producer's first two messages can land in the wrong order
 * (KAFKA-15591, seen here as a reordered event stream).  A partition that
 * answers ListOffsets is served by its leader: wait for that.  One
 * offsets_for_times call asks every leader at once (batched per broker);
 * only the partitions that failed are asked again. */
static bool serve_wait_transient(rd_kafka_resp_err_t e)
{
    return cf_kafka_transient(e) || e == RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE ||
           e == RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT || e == RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR ||
           e == RD_KAFKA_RESP_ERR__TIMED_OUT || e == RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE;
}

static int wait_partitions_serve(rd_kafka_t *rk, const char *topic, int32_t np, int64_t until, cf_error *err)
{
    rd_kafka_topic_partition_list_t *todo = rd_kafka_topic_partition_list_new(np);
    if (!todo)
        return cf_error_set(err, CF_E_NOMEM, "partition list: out of memory");
    for (int32_t p = 0; p < np; p++)
        rd_kafka_topic_partition_list_add(todo, topic, p)->offset = RD_KAFKA_OFFSET_END; /* "latest" */
    int rc = -1;
    for (;;) {
        int64_t left_us = until - cf_mono_us();
        int tmo = left_us > 2000000 ? 2000 : left_us > 1000 ? cf_kafka_ms_of_us(left_us) : 1;
        rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, todo, tmo);
        rd_kafka_resp_err_t last = e;
        rd_kafka_topic_partition_list_t *again = rd_kafka_topic_partition_list_new(todo->cnt);
        if (!again) {
            cf_error_set(err, CF_E_NOMEM, "partition list: out of memory");
            break;
        }
        for (int i = 0; i < todo->cnt; i++) {
            rd_kafka_topic_partition_t *tp = &todo->elems[i];
            rd_kafka_resp_err_t pe = e ? e : tp->err;
            if (!pe)
                continue;
            last = pe;
            if (!serve_wait_transient(pe)) {
                cf_error_set(err, CF_E_KAFKA, "topic %s partition %" PRId32 ": %s", topic, tp->partition,
                             rd_kafka_err2str(pe));
                rd_kafka_topic_partition_list_destroy(again);
                goto out;
            }
            rd_kafka_topic_partition_list_add(again, topic, tp->partition)->offset = RD_KAFKA_OFFSET_END;
        }
        rd_kafka_topic_partition_list_destroy(todo);
        todo = again;
        if (todo->cnt == 0) {
            rc = 0;
            break;
        }
        if (cf_mono_us() >= until) {
            cf_error_set(err, CF_E_KAFKA, "topic %s: %d of %" PRId32 " partitions created, but not served yet: %s",
                         topic, todo->cnt, np, rd_kafka_err2str(last));
            cf_error_set_retriable(err, true);
            break;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
out:
    rd_kafka_topic_partition_list_destroy(todo);
    return rc;
}

int cf_kafka_create_topics_ex(const char *brokers, const cf_kvlist *kafka, const char *const *names, size_t n,
                              int partitions, int replication_factor, int64_t timeout_us, cf_error *err)
{
    cf_kafka_topic_opts o = {.partitions = partitions, .replication_factor = replication_factor};
    return cf_kafka_create_topics_opts(brokers, kafka, names, n, &o, timeout_us, err);
}

int cf_kafka_create_topics_opts(const char *brokers, const cf_kvlist *kafka, const char *const *names, size_t n,
                                const cf_kafka_topic_opts *opts, int64_t timeout_us, cf_error *err)
{
    int partitions = opts->partitions, replication_factor = opts->replication_factor;
    if (n == 0)
        return 0;
    if (partitions < 1 || partitions > CF_KAFKA_MAX_PARTITIONS)
        return cf_error_set(err, CF_E_INVALID, "partitions must be in [1, %d]", CF_KAFKA_MAX_PARTITIONS);
    char errstr[CF_KAFKA_ERRSTR];
    admin_call a;
    int rc = -1;
    rd_kafka_NewTopic_t **topics = calloc(n, sizeof(*topics));
    if (!topics)
        return cf_error_set(err, CF_E_NOMEM, "create topics: out of memory");
    if (admin_begin(&a, brokers, kafka, RD_KAFKA_ADMIN_OP_CREATETOPICS, timeout_us, err) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        topics[i] = rd_kafka_NewTopic_new(names[i], partitions, replication_factor, errstr, sizeof(errstr));
        if (!topics[i]) {
            cf_error_set(err, CF_E_INVALID, "topic %s: %s", names[i], errstr);
            goto out;
        }
        /* A stock broker takes 1 MiB per message: results with a few MiB of
         * output (max-output is 4 MiB per stream) would be cut to the
         * worker's 64 KiB fallback.  The topic says what it takes. */
        if (rd_kafka_NewTopic_set_config(topics[i], "max.message.bytes", CF_KAFKA_TOPIC_MAX_MESSAGE_BYTES) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
            cf_error_set(err, CF_E_INVALID, "topic %s: cannot set max.message.bytes", names[i]);
            goto out;
        }
        /* The workers' reports: the latest per worker is what matters. */
        bool compact = opts->compacted && strcmp(names[i], opts->compacted) == 0;
        char retention[32];
        snprintf(retention, sizeof(retention), "%" PRId64, opts->retention_ms);
        /* Workers republish their reports (report-interval): segments roll
         * and are compacted every 10 minutes, so readers that scan the
         * topic from its start (doctor, top) read about one report per
         * worker plus the last minutes', not days of them. */
        if ((compact && (rd_kafka_NewTopic_set_config(topics[i], "cleanup.policy", "compact") ||
                         rd_kafka_NewTopic_set_config(topics[i], "segment.ms", "600000") ||
                         rd_kafka_NewTopic_set_config(topics[i], "max.compaction.lag.ms", "600000") ||
                         rd_kafka_NewTopic_set_config(topics[i], "min.cleanable.dirty.ratio", "0.1"))) ||
            (!compact && opts->retention_ms > 0 && rd_kafka_NewTopic_set_config(topics[i], "retention.ms", retention))) {
            cf_error_set(err, CF_E_INVALID, "topic %s: cannot set its cleanup policy or retention", names[i]);
            goto out;
        }
    }
    rd_kafka_CreateTopics(a.rk, topics, n, a.opts, a.q);
    if (admin_wait(&a, "create topics", err) < 0)
        goto out;
    const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(a.ev);
    size_t cnt = 0;
    const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreateTopics_result_topics(res, &cnt) : NULL;
    if (!res) {
        cf_error_set(err, CF_E_KAFKA, "create topics: unexpected event %s", rd_kafka_event_name(a.ev));
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
        int32_t np = 0;
        for (;;) {
            rd_kafka_resp_err_t kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
            if (cf_kafka_topic_partitions(a.rk, names[i], true, &np, &kerr, err) == 0)
                break;
            if (!cf_kafka_transient(kerr) || cf_mono_us() >= until) {
                cf_error_wrap(err, "created, but not usable yet");
                goto out;
            }
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (wait_partitions_serve(a.rk, names[i], np, until, err) < 0)
            goto out;
    }
    rc = 0;
out:
    for (size_t i = 0; i < n; i++)
        if (topics[i])
            rd_kafka_NewTopic_destroy(topics[i]);
    free(topics);
    admin_end(&a);
    return rc;
}

static const struct {
    const char *name;
    rd_kafka_AclOperation_t op;
} acl_ops[] = {
    {"all", RD_KAFKA_ACL_OPERATION_ALL},           {"read", RD_KAFKA_ACL_OPERATION_READ},
    {"write", RD_KAFKA_ACL_OPERATION_WRITE},       {"create", RD_KAFKA_ACL_OPERATION_CREATE},
    {"delete", RD_KAFKA_ACL_OPERATION_DELETE},     {"alter", RD_KAFKA_ACL_OPERATION_ALTER},
    {"describe", RD_KAFKA_ACL_OPERATION_DESCRIBE}, {"cluster_action", RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION},
    {"describe_configs", RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS},
    {"alter_configs", RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS},
    {"idempotent_write", RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE},
};

static const struct {
    const char *name;
    rd_kafka_ResourceType_t type;
} acl_resources[] = {
    {"topic", RD_KAFKA_RESOURCE_TOPIC},
    {"group", RD_KAFKA_RESOURCE_GROUP},
    {"cluster", RD_KAFKA_RESOURCE_BROKER}, /* librdkafka names the cluster resource BROKER */
};

int cf_kafka_acl_parse(const char *spec, cf_kafka_acl *acl, char *buf, size_t bufsz, cf_error *err)
{
    memset(acl, 0, sizeof(*acl));
    if (!spec || cf_strlcpy(buf, spec, bufsz) >= bufsz)
        return cf_error_set(err, CF_E_INVALID, "acl '%.80s': too long", spec ? spec : "");
    char *op = buf, *res = strchr(op, ':');
    char *name = res ? strchr(res + 1, ':') : NULL;
    if (!res || !name || name[1] == '\0')
        return cf_error_set(err, CF_E_INVALID, "acl '%.80s': expected operation:resource:name[*]", spec);
    *res++ = '\0';
    *name++ = '\0';
    size_t nl = strlen(name);
    if (nl > 1 && name[nl - 1] == '*') {
        name[nl - 1] = '\0';
        acl->prefixed = true;
    }
    bool op_ok = false, res_ok = false;
    for (size_t i = 0; i < sizeof(acl_ops) / sizeof(acl_ops[0]); i++)
        op_ok |= strcmp(acl_ops[i].name, op) == 0;
    for (size_t i = 0; i < sizeof(acl_resources) / sizeof(acl_resources[0]); i++)
        res_ok |= strcmp(acl_resources[i].name, res) == 0;
    if (!op_ok)
        return cf_error_set(err, CF_E_INVALID, "acl '%.80s': unknown operation '%s'", spec, op);
    if (!res_ok)
        return cf_error_set(err, CF_E_INVALID, "acl '%.80s': unknown resource type '%s'", spec, res);
    acl->operation = op;
    acl->resource = res;
    acl->name = name;
    return 0;
}

int cf_kafka_acls_create(const char *brokers, const cf_kvlist *kafka, const cf_kafka_acl *acls, size_t n,
                         int64_t timeout_us, cf_error *err)
{
    if (n == 0)
        return 0;
    char errstr[CF_KAFKA_ERRSTR];
    admin_call a;
    int rc = -1;
    rd_kafka_AclBinding_t **b = calloc(n, sizeof(*b));
    if (!b)
        return cf_error_set(err, CF_E_NOMEM, "create acls: out of memory");
    if (admin_begin(&a, brokers, kafka, RD_KAFKA_ADMIN_OP_CREATEACLS, timeout_us, err) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        rd_kafka_AclOperation_t op = RD_KAFKA_ACL_OPERATION_UNKNOWN;
        rd_kafka_ResourceType_t rt = RD_KAFKA_RESOURCE_UNKNOWN;
        for (size_t k = 0; k < sizeof(acl_ops) / sizeof(acl_ops[0]); k++)
            if (acls[i].operation && strcmp(acl_ops[k].name, acls[i].operation) == 0)
                op = acl_ops[k].op;
        for (size_t k = 0; k < sizeof(acl_resources) / sizeof(acl_resources[0]); k++)
            if (acls[i].resource && strcmp(acl_resources[k].name, acls[i].resource) == 0)
                rt = acl_resources[k].type;
        if (op == RD_KAFKA_ACL_OPERATION_UNKNOWN || rt == RD_KAFKA_RESOURCE_UNKNOWN || !acls[i].principal ||
            !acls[i].name) {
            cf_error_set(err, CF_E_INVALID, "acl %zu: incomplete or unknown operation/resource", i);
            goto out;
        }
        b[i] = rd_kafka_AclBinding_new(rt, acls[i].name,
                                       acls[i].prefixed ? RD_KAFKA_RESOURCE_PATTERN_PREFIXED
                                                        : RD_KAFKA_RESOURCE_PATTERN_LITERAL,
                                       acls[i].principal, "*", op, RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW, errstr,
                                       sizeof(errstr));
        if (!b[i]) {
            cf_error_set(err, CF_E_INVALID, "acl %s %s %s:%s: %s", acls[i].principal, acls[i].operation,
                         acls[i].resource, acls[i].name, errstr);
            goto out;
        }
    }
    rd_kafka_CreateAcls(a.rk, b, n, a.opts, a.q);
    if (admin_wait(&a, "create acls", err) < 0)
        goto out;
    const rd_kafka_CreateAcls_result_t *res = rd_kafka_event_CreateAcls_result(a.ev);
    if (!res) {
        cf_error_set(err, CF_E_KAFKA, "create acls: unexpected event %s", rd_kafka_event_name(a.ev));
        goto out;
    }
    size_t cnt = 0;
    const rd_kafka_acl_result_t **ar = rd_kafka_CreateAcls_result_acls(res, &cnt);
    for (size_t i = 0; i < cnt; i++) {
        const rd_kafka_error_t *e = rd_kafka_acl_result_error(ar[i]);
        if (e) {
            /* The broker's text for a refusal is its request's whole
             * internal state (sessions, buffers): said plainly instead,
             * and anything else cut. */
            rd_kafka_resp_err_t code = rd_kafka_error_code(e);
            if (code == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED ||
                code == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                code == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED || strstr(rd_kafka_error_string(e), "uthoriz"))
                cf_error_set(err, CF_E_KAFKA, "create acl %zu: not authorized: creating ACLs needs a super user's "
                             "credentials (--config), and these are not", i);
            else
                cf_error_set(err, CF_E_KAFKA, "create acl %zu: %.200s (%s)", i, rd_kafka_error_string(e),
                             rd_kafka_err2name(code));
            goto out;
        }
    }
    rc = 0;
out:
    for (size_t i = 0; i < n; i++)
        if (b[i])
            rd_kafka_AclBinding_destroy(b[i]);
    free(b);
    admin_end(&a);
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
