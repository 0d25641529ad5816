/* cf_events: publishing and following collaboration events (cf_event.h)
 * on the events topic.  Guide: docs/EVENTS.md.
 *
 * Every event is produced with its workspace as the Kafka key, by an
 * idempotent producer using librdkafka's murmur2 partitioner (the Java
 * client's), so one workspace's events stay in publish order on one
 * partition.  Readers never join a consumer group: they assign partitions
 * at explicit offsets, read, and commit nothing.
 *
 * Three ways to read:
 *  - cf_events_wait: a one-shot wait for a correlation id (and optionally a
 *    kind).  It starts reading at the first event published at or after
 *    `since` (offsets_for_times), so an event published before the wait
 *    began is still found; then it keeps reading live until a match or the
 *    timeout.  With a workspace only that workspace's partition is read.
 *  - cf_events_tail: streams events to a callback.
 *  - cf_event_subscriber: assigned at the high watermarks when created, so a
 *    program that creates it before publishing (or before asking someone
 *    else to) misses nothing; then next/wait on it.
 *
 * Thread safety: publish and flush may be called from several threads;
 * wait and tail too (each uses its own consumer).  A subscriber is used by
 * one thread at a time.
 */
#ifndef CF_EVENTS_H
#define CF_EVENTS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_config.h"
#include "cf_error.h"
#include "cf_event.h"

#define CF_DEFAULT_EVENTS_TOPIC "codefleet.events"
#define CF_EVENTS_LOOKBACK_DEFAULT_US (INT64_C(600) * 1000000) /* 10 minutes */
#define CF_EVENT_SUBSCRIBER_BUFFER_DEFAULT 10000

typedef struct cf_events cf_events;

typedef struct cf_events_config {
    const char *brokers;    /* NULL = CF_DEFAULT_BROKERS */
    const char *topic;      /* NULL = CF_DEFAULT_EVENTS_TOPIC */
    const char *client_id;  /* NULL = "codefleet-events" */
    const cf_kvlist *kafka; /* extra librdkafka properties (producer and consumers), may be NULL.
                             * Do not change "partitioner": waits compute a workspace's partition
                             * with murmur2. */
    int64_t lookback_us;    /* default `since` of waits: now - lookback; 0 = CF_EVENTS_LOOKBACK_DEFAULT_US */
} cf_events_config;

/* Copies the config.  The producer is created on the first publish, so a
 * reader-only handle costs no producer. */
int cf_events_new(const cf_events_config *cfg, cf_events **out, cf_error *err);
/* Flushes outstanding events (up to 10 s); NULL-safe. */
void cf_events_destroy(cf_events *ev);

const char *cf_events_topic(const cf_events *ev);

/* Validates, encodes and produces *event (key = event->workspace).  Fills
 * event->id (a time-ordered id, like cf_dispatcher_new_id) when NULL and
 * event->timestamp_us (now) when 0, so the caller learns both.
 * Asynchronous: a delivery failure is reported by cf_events_flush or the
 * next publish ("earlier publish"; that next event is then not produced). */
int cf_events_publish(cf_events *ev, cf_event *event, cf_error *err);

/* Waits until every published event is acknowledged (CF_E_TIMEOUT after
 * timeout_us); reports the first delivery failure since the last report. */
int cf_events_flush(cf_events *ev, int64_t timeout_us, cf_error *err);

typedef struct cf_events_wait_opts {
    const char *correlation_id;  /* required */
    cf_event_kind kind;          /* CF_EVENT_ANY = any kind */
    const char *workspace;       /* NULL = read every partition; else only this workspace's */
    int64_t since_us;            /* epoch us (Kafka publish time); 0 = now - lookback */
    int64_t timeout_us;          /* > 0 */
    volatile sig_atomic_t *stop; /* may be NULL; non-zero ends the wait (CF_E_TIMEOUT) */
} cf_events_wait_opts;

/* The first matching event at or after since_us (per partition, in
 * publish order; across partitions, in arrival order).  *out must be zeroed
 * or cleared; the caller clears it.  CF_E_TIMEOUT when nothing matched in
 * time.  Undecodable messages are skipped. */
int cf_events_wait(cf_events *ev, const cf_events_wait_opts *opts, cf_event *out, cf_error *err);

typedef enum cf_events_start {
    CF_EVENTS_FROM_END = 0,   /* only events published from now on */
    CF_EVENTS_FROM_BEGINNING, /* everything the topic still holds */
    CF_EVENTS_FROM_TIME,      /* from since_us */
} cf_events_start;

typedef struct cf_events_tail_opts {
    const char *workspace;       /* NULL = every workspace */
    cf_events_start start;
    int64_t since_us;            /* CF_EVENTS_FROM_TIME */
    int64_t timeout_us;          /* 0 = until stopped; reaching it is not an error */
    volatile sig_atomic_t *stop; /* may be NULL */
} cf_events_tail_opts;

/* Callback of cf_events_tail: e is NULL when the message did not decode
 * (decode_err says why).  Return non-zero to stop. */
typedef int (*cf_events_tail_fn)(void *ctx, const cf_event *e, const cf_error *decode_err, int32_t partition,
                                 int64_t offset);

int cf_events_tail(cf_events *ev, const cf_events_tail_opts *opts, cf_events_tail_fn fn, void *ctx, cf_error *err);

/* The partition a workspace's events go to when the topic has
 * partition_cnt partitions (librdkafka's murmur2, as the producer uses). */
int32_t cf_events_partition_for(const char *workspace, int32_t partition_cnt);

/* ---- subscriber ---------------------------------------------------------- */

typedef struct cf_event_subscriber cf_event_subscriber;

/* Assigns the events topic's partitions (only workspace's when not NULL) at
 * their high watermarks, read from the broker before this returns: every
 * event published after it returns is seen.  ev is borrowed and must outlive
 * the subscriber.  buffer_max bounds events held back by
 * cf_event_subscriber_wait (0 = CF_EVENT_SUBSCRIBER_BUFFER_DEFAULT). */
int cf_event_subscriber_new(cf_events *ev, const char *workspace, size_t buffer_max, cf_event_subscriber **out,
                            cf_error *err);
void cf_event_subscriber_destroy(cf_event_subscriber *s); /* NULL-safe */

/* The next event in arrival order (held-back events first).  CF_E_TIMEOUT
 * when none arrived within timeout_us. */
int cf_event_subscriber_next(cf_event_subscriber *s, int64_t timeout_us, cf_event *out, cf_error *err);

/* The first event (held back or new) with this correlation id and kind
 * (CF_EVENT_ANY = any).  Events read meanwhile that do not match are held
 * back for later next/wait calls (the oldest dropped past buffer_max), so
 * nothing is lost between calls.  CF_E_TIMEOUT when none within timeout_us. */
int cf_event_subscriber_wait(cf_event_subscriber *s, const char *correlation_id, cf_event_kind kind,
                             int64_t timeout_us, cf_event *out, cf_error *err);

typedef struct cf_event_subscriber_stats {
    uint64_t seen;      /* events decoded */
    uint64_t malformed; /* messages skipped: undecodable */
    uint64_t dropped;   /* held-back events dropped past buffer_max */
    size_t held;        /* currently held back */
} cf_event_subscriber_stats;

void cf_event_subscriber_get_stats(const cf_event_subscriber *s, cf_event_subscriber_stats *out);

#endif
