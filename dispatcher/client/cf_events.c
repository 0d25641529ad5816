/* cf_events: collaboration events on Kafka.  See cf_events.h. */
#include "cf_events.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "cf_dispatcher.h"
#include "cf_kafka.h"
#include "cf_log.h"
#include "cf_util.h"

struct cf_events {
    char *brokers;
    char *topic;
    char *client_id;
    cf_kvlist kafka; /* private copy */
    int64_t lookback_us;

    pthread_mutex_t mu; /* guards producer creation */
    rd_kafka_t *producer;
    cf_kafka_dr dr; /* the producer's delivery reports */
};

/* ---- lifecycle ------------------------------------------------------------ */

int cf_events_new(const cf_events_config *cfg, cf_events **out, cf_error *err)
{
    *out = NULL;
    cf_events *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return cf_error_set(err, CF_E_NOMEM, "events: out of memory");
    pthread_mutex_init(&ev->mu, NULL);
    cf_kafka_dr_init(&ev->dr);
    ev->brokers = cf_strdup(cfg->brokers ? cfg->brokers : CF_DEFAULT_BROKERS);
    ev->topic = cf_strdup(cfg->topic ? cfg->topic : CF_DEFAULT_EVENTS_TOPIC);
    ev->client_id = cf_strdup(cfg->client_id ? cfg->client_id : "codefleet-events");
    ev->lookback_us = cfg->lookback_us > 0 ? cfg->lookback_us : CF_EVENTS_LOOKBACK_DEFAULT_US;
    if (!ev->brokers || !ev->topic || !ev->client_id)
        goto nomem;
    if (cf_kafka_kvlist_copy(&ev->kafka, cfg->kafka) < 0)
        goto nomem;
    *out = ev;
    return 0;
nomem:
    cf_events_destroy(ev);
    return cf_error_set(err, CF_E_NOMEM, "events: out of memory");
}

void cf_events_destroy(cf_events *ev)
{
    if (!ev)
        return;
    cf_kafka_producer_destroy(ev->producer, "events", "event");
    cf_kafka_dr_destroy(&ev->dr);
    pthread_mutex_destroy(&ev->mu);
    cf_kvlist_free(&ev->kafka);
    free(ev->brokers);
    free(ev->topic);
    free(ev->client_id);
    free(ev);
}

const char *cf_events_topic(const cf_events *ev)
{
    return ev->topic;
}

static rd_kafka_t *get_producer(cf_events *ev, cf_error *err)
{
    pthread_mutex_lock(&ev->mu);
    if (!ev->producer) {
        ev->producer =
            cf_kafka_producer_new(ev->brokers, ev->client_id, &ev->kafka, &ev->dr, "the events producer", err);
        if (ev->producer)
            cf_kafka_warm_topic(ev->producer, ev->topic);
    }
    rd_kafka_t *rk = ev->producer;
    pthread_mutex_unlock(&ev->mu);
    return rk;
}

/* ---- publish ---------------------------------------------------------------- */

int cf_events_publish(cf_events *ev, cf_event *event, cf_error *err)
{
    if (cf_kafka_dr_take(&ev->dr, err) < 0)
        return cf_error_wrap(err, "earlier publish");
    if (!event->id) {
        char id[64];
        if (cf_dispatcher_new_id(id, sizeof(id), err) < 0)
            return -1;
        if (cf_str_set(&event->id, id) < 0)
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    if (event->timestamp_us == 0)
        event->timestamp_us = cf_now_us();
    cf_bytes enc = {0};
    if (cf_event_encode(event, &enc, err) < 0)
        return -1;
    rd_kafka_t *rk = get_producer(ev, err);
    if (!rk) {
        free(enc.data);
        return -1;
    }
    rd_kafka_resp_err_t e = cf_kafka_produce(rk, ev->topic, event->workspace, strlen(event->workspace), enc.data,
                                             enc.len, RD_KAFKA_MSG_F_FREE);
    if (!e)
        return 0;
    free(enc.data); /* still ours: produce failed */
    cf_error_set(err, CF_E_KAFKA, "publish event %s to %s: %s", event->id, ev->topic, rd_kafka_err2str(e));
    return cf_error_set_retriable(err, e == RD_KAFKA_RESP_ERR__QUEUE_FULL);
}

int cf_events_flush(cf_events *ev, int64_t timeout_us, cf_error *err)
{
    pthread_mutex_lock(&ev->mu);
    rd_kafka_t *rk = ev->producer;
    pthread_mutex_unlock(&ev->mu);
    if (!rk)
        return 0; /* nothing published, so nothing to report */
    return cf_kafka_flush(rk, &ev->dr, timeout_us, "event", err);
}

/* ---- readers ------------------------------------------------------------------ */

int32_t cf_events_partition_for(const char *workspace, int32_t partition_cnt)
{
    if (!workspace || partition_cnt <= 0)
        return 0;
    return cf_kafka_partition_for_key(workspace, partition_cnt);
}

/* A manually assigned consumer: no group membership, no commits. */
static rd_kafka_t *new_consumer(const cf_events *ev, cf_error *err)
{
    return cf_kafka_consumer_new(ev->brokers, ev->client_id, &ev->kafka, "codefleet-events", "an events consumer",
                                 err);
}

/* Assigns the topic's partitions (or workspace's one) at the start point;
 * transient metadata errors (a topic created a moment ago) are retried.
 * Unlike the dispatcher's, it does not insist on a leader for every
 * partition (with a workspace only one partition is read). */
static int assign_parts(rd_kafka_t *rk, const char *topic, const char *workspace, cf_events_start start,
                        int64_t since_us, cf_error *err)
{
    cf_kafka_start ks = start == CF_EVENTS_FROM_BEGINNING ? CF_KAFKA_FROM_BEGINNING
                        : start == CF_EVENTS_FROM_TIME    ? CF_KAFKA_FROM_TIME
                                                          : CF_KAFKA_FROM_END;
    return cf_kafka_assign(rk, topic, workspace, false, ks, since_us, err);
}

/* Polls one message until deadline (mono us).  Returns 1 with *out decoded,
 * 2 for an undecodable message (derr says why), 0 on timeout or stop.
 * Messages of other workspaces (key) are skipped without decoding. */
static int poll_event(rd_kafka_t *rk, const char *workspace, int64_t deadline, volatile sig_atomic_t *stop,
                      cf_event *out, cf_error *derr, int32_t *partition, int64_t *offset)
{
    size_t wlen = workspace ? strlen(workspace) : 0;
    for (;;) {
        rd_kafka_message_t *m = cf_kafka_consume(rk, deadline, stop, "events", NULL, 0);
        if (!m)
            return 0;
        if (workspace && !(m->key && m->key_len == wlen && memcmp(m->key, workspace, wlen) == 0)) {
            rd_kafka_message_destroy(m);
            continue;
        }
        if (partition)
            *partition = m->partition;
        if (offset)
            *offset = m->offset;
        int r = 1;
        if (!m->payload || m->len == 0) {
            cf_error_set(derr, CF_E_INVALID, "empty message (tombstone)");
            r = 2;
        } else if (cf_event_decode(m->payload, m->len, NULL, out, derr) < 0) {
            r = 2;
        } else if (workspace && strcmp(out->workspace, workspace) != 0) {
            /* The key said this workspace, the event another: not ours. */
            cf_event_clear(out);
            rd_kafka_message_destroy(m);
            continue;
        }
        rd_kafka_message_destroy(m);
        return r;
    }
}

static bool event_matches(const cf_event *e, const char *corr, cf_event_kind kind)
{
    return strcmp(e->correlation_id, corr) == 0 && (kind == CF_EVENT_ANY || e->kind == kind);
}

static int check_workspace_arg(const char *workspace, cf_error *err)
{
    if (workspace && !cf_event_workspace_valid(workspace, strlen(workspace)))
        return cf_error_set(err, CF_E_INVALID, "workspace: must be 1..%d characters of [A-Za-z0-9._-]",
                            CF_EVENT_WORKSPACE_MAX);
    return 0;
}

int cf_events_wait(cf_events *ev, const cf_events_wait_opts *o, cf_event *out, cf_error *err)
{
    if (!o->correlation_id || !cf_id_valid(o->correlation_id, strlen(o->correlation_id)))
        return cf_error_set(err, CF_E_INVALID, "wait: correlation id missing or invalid");
    if ((unsigned)o->kind >= CF_EVENT_KIND__COUNT)
        return cf_error_set(err, CF_E_INVALID, "wait: unknown kind");
    if (check_workspace_arg(o->workspace, err) < 0)
        return -1;
    int64_t since = o->since_us > 0 ? o->since_us : cf_now_us() - ev->lookback_us;
    rd_kafka_t *rk = new_consumer(ev, err);
    if (!rk)
        return -1;
    if (assign_parts(rk, ev->topic, o->workspace, CF_EVENTS_FROM_TIME, since, err) < 0) {
        cf_kafka_consumer_close(rk);
        return cf_error_wrap(err, "wait on %s", ev->topic);
    }
    int64_t deadline = cf_mono_us() + (o->timeout_us > 0 ? o->timeout_us : 1);
    uint64_t malformed = 0;
    int rc = -1;
    for (;;) {
        cf_event e = {0};
        cf_error derr = {0};
        int r = poll_event(rk, o->workspace, deadline, o->stop, &e, &derr, NULL, NULL);
        if (r == 0)
            break;
        if (r == 2) {
            malformed++;
            continue;
        }
        if (event_matches(&e, o->correlation_id, o->kind)) {
            cf_event_clear(out);
            *out = e; /* move */
            rc = 0;
            break;
        }
        cf_event_clear(&e);
    }
    cf_kafka_consumer_close(rk);
    if (rc < 0) {
        cf_error_set(err, CF_E_TIMEOUT, "no %s event for correlation id %s within %" PRId64 " ms%s",
                     o->kind == CF_EVENT_ANY ? "matching" : cf_event_kind_name(o->kind), o->correlation_id,
                     o->timeout_us / 1000, malformed ? " (undecodable messages were skipped)" : "");
        cf_error_set_retriable(err, true);
    }
    return rc;
}

int cf_events_tail(cf_events *ev, const cf_events_tail_opts *o, cf_events_tail_fn fn, void *ctx, cf_error *err)
{
    if (check_workspace_arg(o->workspace, err) < 0)
        return -1;
    rd_kafka_t *rk = new_consumer(ev, err);
    if (!rk)
        return -1;
    if (assign_parts(rk, ev->topic, o->workspace, o->start, o->since_us, err) < 0) {
        cf_kafka_consumer_close(rk);
        return cf_error_wrap(err, "tail %s", ev->topic);
    }
    int64_t deadline = o->timeout_us > 0 ? cf_mono_us() + o->timeout_us : INT64_MAX;
    for (;;) {
        cf_event e = {0};
        cf_error derr = {0};
        int32_t part = -1;
        int64_t off = -1;
        int r = poll_event(rk, o->workspace, deadline, o->stop, &e, &derr, &part, &off);
        if (r == 0)
            break;
        int stop = fn(ctx, r == 1 ? &e : NULL, r == 2 ? &derr : NULL, part, off);
        cf_event_clear(&e);
        if (stop)
            break;
    }
    cf_kafka_consumer_close(rk);
    return 0;
}

/* ---- subscriber --------------------------------------------------------------- */

typedef struct held_event {
    struct held_event *next;
    cf_event e;
} held_event;

struct cf_event_subscriber {
    rd_kafka_t *rk;
    char *workspace;
    held_event *head, *tail;
    size_t held, max;
    uint64_t seen, malformed, dropped;
};

int cf_event_subscriber_new(cf_events *ev, const char *workspace, size_t buffer_max, cf_event_subscriber **out,
                            cf_error *err)
{
    *out = NULL;
    if (check_workspace_arg(workspace, err) < 0)
        return -1;
    cf_event_subscriber *s = calloc(1, sizeof(*s));
    if (!s)
        return cf_error_set(err, CF_E_NOMEM, "subscriber: out of memory");
    s->max = buffer_max ? buffer_max : CF_EVENT_SUBSCRIBER_BUFFER_DEFAULT;
    if (workspace && !(s->workspace = cf_strdup(workspace))) {
        free(s);
        return cf_error_set(err, CF_E_NOMEM, "subscriber: out of memory");
    }
    s->rk = new_consumer(ev, err);
    if (!s->rk || assign_parts(s->rk, ev->topic, workspace, CF_EVENTS_FROM_END, 0, err) < 0) {
        cf_event_subscriber_destroy(s);
        return cf_error_wrap(err, "subscribe to %s", ev->topic);
    }
    *out = s;
    return 0;
}

void cf_event_subscriber_destroy(cf_event_subscriber *s)
{
    if (!s)
        return;
    cf_kafka_consumer_close(s->rk);
    while (s->head) {
        held_event *h = s->head;
        s->head = h->next;
        cf_event_clear(&h->e);
        free(h);
    }
    free(s->workspace);
    free(s);
}

/* Reads the next decodable event from Kafka: 1 = got one, 0 = timeout. */
static int sub_read(cf_event_subscriber *s, int64_t deadline, cf_event *out)
{
    for (;;) {
        cf_error derr = {0};
        int r = poll_event(s->rk, s->workspace, deadline, NULL, out, &derr, NULL, NULL);
        if (r == 2) {
            s->malformed++;
            cf_log_debug("events", "subscriber: skipping an undecodable event: %s", derr.msg);
            continue;
        }
        if (r == 1)
            s->seen++;
        return r;
    }
}

static void hold(cf_event_subscriber *s, cf_event *e)
{
    held_event *h = calloc(1, sizeof(*h));
    if (!h) {
        s->dropped++;
        cf_event_clear(e);
        return;
    }
    h->e = *e; /* move */
    memset(e, 0, sizeof(*e));
    if (s->tail)
        s->tail->next = h;
    else
        s->head = h;
    s->tail = h;
    s->held++;
    while (s->held > s->max) {
        held_event *old = s->head;
        s->head = old->next;
        if (!s->head)
            s->tail = NULL;
        cf_event_clear(&old->e);
        free(old);
        s->held--;
        s->dropped++;
    }
}

static void take_held(cf_event_subscriber *s, held_event *prev, held_event *h, cf_event *out)
{
    if (prev)
        prev->next = h->next;
    else
        s->head = h->next;
    if (s->tail == h)
        s->tail = prev;
    s->held--;
    cf_event_clear(out);
    *out = h->e; /* move */
    free(h);
}

int cf_event_subscriber_next(cf_event_subscriber *s, int64_t timeout_us, cf_event *out, cf_error *err)
{
    if (s->head) {
        take_held(s, NULL, s->head, out);
        return 0;
    }
    cf_event e = {0};
    if (sub_read(s, cf_mono_us() + (timeout_us > 0 ? timeout_us : 0), &e) == 1) {
        cf_event_clear(out);
        *out = e;
        return 0;
    }
    cf_error_set(err, CF_E_TIMEOUT, "no event within %" PRId64 " ms", timeout_us / 1000);
    return cf_error_set_retriable(err, true);
}

int cf_event_subscriber_wait(cf_event_subscriber *s, const char *correlation_id, cf_event_kind kind,
                             int64_t timeout_us, cf_event *out, cf_error *err)
{
    if (!correlation_id || !cf_id_valid(correlation_id, strlen(correlation_id)))
        return cf_error_set(err, CF_E_INVALID, "wait: correlation id missing or invalid");
    if ((unsigned)kind >= CF_EVENT_KIND__COUNT)
        return cf_error_set(err, CF_E_INVALID, "wait: unknown kind");
    for (held_event *prev = NULL, *h = s->head; h; prev = h, h = h->next)
        if (event_matches(&h->e, correlation_id, kind)) {
            take_held(s, prev, h, out);
            return 0;
        }
    int64_t deadline = cf_mono_us() + (timeout_us > 0 ? timeout_us : 0);
    for (;;) {
        cf_event e = {0};
        if (sub_read(s, deadline, &e) != 1)
            break;
        if (event_matches(&e, correlation_id, kind)) {
            cf_event_clear(out);
            *out = e;
            return 0;
        }
        hold(s, &e);
    }
    cf_error_set(err, CF_E_TIMEOUT, "no %s event for correlation id %s within %" PRId64 " ms",
                 kind == CF_EVENT_ANY ? "matching" : cf_event_kind_name(kind), correlation_id, timeout_us / 1000);
    return cf_error_set_retriable(err, true);
}

void cf_event_subscriber_get_stats(const cf_event_subscriber *s, cf_event_subscriber_stats *out)
{
    out->seen = s->seen;
    out->malformed = s->malformed;
    out->dropped = s->dropped;
    out->held = s->held;
}
