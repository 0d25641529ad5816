/* cf_dispatcher: the client side of codefleet.
 *
 * Submits execution requests (schema v1, msgpack) to the request topic and
 * collects results from the result topic.  One cf_dispatcher owns one
 * idempotent producer and, optionally, a background result collector (a
 * consumer thread that keeps every result it sees until someone waits for it).
 *
 * Thread safety: submit, flush, wait and wait_any may be called from several
 * threads at once; new/destroy may not race with anything else.
 */
#ifndef CF_DISPATCHER_H
#define CF_DISPATCHER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_chunk.h"
#include "cf_config.h"
#include "cf_error.h"
#include "cf_schema.h"

#define CF_DEFAULT_BROKERS "127.0.0.1:19092"
#define CF_DEFAULT_REQUEST_TOPIC "codefleet.requests"
#define CF_DEFAULT_RESULT_TOPIC "codefleet.results"
#define CF_DISPATCHER_MAX_PENDING_DEFAULT 100000
#define CF_DISPATCHER_MAX_PENDING_BYTES_DEFAULT ((size_t)256 << 20)

typedef struct cf_dispatcher cf_dispatcher;

/* Called for every output chunk read (SPEC.md "Output chunks"), of any
 * request: filter by chunk->id (and chunk->run).  Runs on the dispatcher's
 * chunk reader thread; chunk is only valid during the call. */
typedef void (*cf_chunk_fn)(void *ctx, const cf_chunk *chunk);

typedef struct cf_dispatcher_config {
    const char *brokers;       /* "127.0.0.1:19092"; NULL = CF_DEFAULT_BROKERS */
    const char *request_topic; /* NULL = CF_DEFAULT_REQUEST_TOPIC */
    const char *result_topic;  /* NULL = CF_DEFAULT_RESULT_TOPIC */
    const char *client_id;     /* NULL = "codefleet-dispatcher" */
    const cf_kvlist *kafka;    /* extra librdkafka properties (producer and consumers), may be NULL */
    bool collect_results;      /* start a result collector at creation (for wait) */
    size_t max_pending;        /* collector map bound; 0 = CF_DISPATCHER_MAX_PENDING_DEFAULT */
    size_t max_pending_bytes;  /* and in bytes of results; 0 = CF_DISPATCHER_MAX_PENDING_BYTES_DEFAULT.
                                  The newest result is always kept, whatever its size. */
    const char *cancel_topic;  /* cancels (cf_dispatcher_cancel); NULL = request_topic + ".cancel" */
    /* Streaming (requests with "stream"): with on_chunk set, a chunk reader
     * reads the output topic from its end as it is at creation (which
     * must exist) and calls on_chunk for every chunk that decodes; the
     * rest are counted (chunks_malformed) and skipped. */
    cf_chunk_fn on_chunk;
    void *on_chunk_ctx;
    const char *output_topic;  /* NULL = result_topic + ".output" */
    /* Replay (codefleet follow): with output_since_us > 0 the chunk reader
     * starts at the first output message at or after it (epoch us)
     * instead of the end, and with output_key (only with output_since_us)
     * only on that key's partition (chunks are keyed by their request's
     * id). */
    int64_t output_since_us;
    const char *output_key;
    /* No producer (nor its keeper thread): a reader of results or chunks
     * only; submit, cancel and flush then fail. */
    bool chunks_only;
    /* A flag the application sets (a signal handler: Ctrl-C) to end
     * cf_dispatcher_wait_since early; NULL: none. */
    volatile sig_atomic_t *interrupt;
} cf_dispatcher_config;

/* Counters, for tests and the CLI's diagnostics. */
typedef struct cf_dispatcher_stats {
    uint64_t submitted;        /* requests handed to the producer */
    uint64_t delivery_failed;  /* delivery reports with an error */
    uint64_t results_seen;     /* result messages the collector decoded */
    uint64_t results_malformed;/* result messages that failed to decode (skipped) */
    uint64_t results_evicted;  /* dropped from the collector map past max_pending(_bytes) */
    uint64_t results_pending;  /* currently held in the collector map */
    uint64_t chunks_seen;      /* output chunks handed to on_chunk */
    uint64_t chunks_malformed; /* output messages that failed to decode (skipped) */
    uint64_t producer_heals;   /* times the producer, knowing no broker, was given the bootstrap
                                  servers again (cf_kafka_heal.h) */
} cf_dispatcher_stats;

/* Creates the producer (with a thread that heals it, cf_kafka_heal.h;
 * none with chunks_only) and, with collect_results, the collector: the result
 * topic must then exist (its partitions are assigned at their current high
 * watermarks before this returns, so no result of a later submit is missed).
 * The config strings are copied. */
int cf_dispatcher_new(const cf_dispatcher_config *cfg, cf_dispatcher **out, cf_error *err);

/* Flushes outstanding messages (up to 10 s), stops the collector; NULL-safe. */
void cf_dispatcher_destroy(cf_dispatcher *d);

/* Encodes and produces req to the request topic.  Key: req->workspace if set
 * (one workspace's requests stay ordered on one partition), else req->thread
 * (likewise for a thread's checkpoints), else req->id.
 * Sets created_us if 0 (on the encoded copy; req is not modified).
 * Asynchronous; a delivery failure of an earlier submit is reported by
 * cf_dispatcher_flush or by the next submit (CF_E_KAFKA, message prefixed
 * "earlier submit"; that next request is then not produced). */
int cf_dispatcher_submit(cf_dispatcher *d, const cf_request *req, cf_error *err);

/* Asks the fleet to stop request id, or never to start it (SPEC.md section
 * 12): a cancel to the cancel topic, keyed by id, waited for until the
 * broker acknowledged it (up to timeout_us).  The request is then answered
 * `cancelled` on its result topic, unless it had finished already (then
 * nothing changes).  reason (may be NULL) ends up in the result's reason.
 * Only requests sent to this dispatcher's request topic can be cancelled
 * through it. */
int cf_dispatcher_cancel(cf_dispatcher *d, const char *id, const char *reason, int64_t timeout_us, cf_error *err);
/* Where cf_dispatcher_cancel publishes. */
const char *cf_dispatcher_cancel_topic(const cf_dispatcher *d);

/* Waits until every submitted message is acknowledged or timeout_us passes
 * (CF_E_TIMEOUT); reports the first delivery failure since the last report. */
int cf_dispatcher_flush(cf_dispatcher *d, int64_t timeout_us, cf_error *err);

/* Waits for the result of request `id` (needs collect_results).  A result that
 * arrived before the call is not missed: the collector keeps every result it
 * sees (oldest evicted past max_pending) until it is waited for; the entry is
 * removed when returned.  *out must be zeroed or cleared; the caller clears it.
 * CF_E_TIMEOUT when nothing arrived within timeout_us. */
int cf_dispatcher_wait(cf_dispatcher *d, const char *id, int64_t timeout_us, cf_result *out, cf_error *err);

/* Like cf_dispatcher_wait for whichever result arrived first (any id); for
 * batch callers that track their own set of ids.  received_mono_us (may be
 * NULL) gets the cf_mono_us() time the collector decoded the message. */
int cf_dispatcher_wait_any(cf_dispatcher *d, int64_t timeout_us, cf_result *out, int64_t *received_mono_us,
                           cf_error *err);

/* Standalone wait (another process submitted): scans the result topic from
 * offsets_for_times(since_us) on every partition for a result whose key (or,
 * without a key, decoded id) is id.  Needs no collector; when one runs, its
 * map is checked first. */
int cf_dispatcher_wait_since(cf_dispatcher *d, const char *id, int64_t since_us, int64_t timeout_us,
                             cf_result *out, cf_error *err);

/* Whether a worker started request id (SPEC.md "Start notices": requests
 * sent with notify_start): scans the output topic (output_topic, or the
 * result topic + ".output") from since_us (epoch) to its end as it is now.
 * Returns 1 with the notice in out (cf_chunk_clear it; out->worker, at_us),
 * 0 when none was published by then (queued, or a worker too old to send
 * one), -1 when the topic could not be read within timeout_us. */
int cf_dispatcher_find_start(cf_dispatcher *d, const char *id, int64_t since_us, int64_t timeout_us, cf_chunk *out,
                             cf_error *err);

/* Callback of cf_dispatcher_tail: res is decoded (NULL when the message did
 * not decode; then decode_err says why).  Return non-zero to stop. */
typedef int (*cf_tail_fn)(void *ctx, const cf_result *res, const cf_error *decode_err, int32_t partition,
                          int64_t offset);

/* Streams results from the result topic: from the beginning or from the
 * current end, until the callback returns non-zero, *stop becomes non-zero
 * (a signal handler's flag, may be NULL) or timeout_us passes (0 = forever;
 * reaching it is not an error). */
int cf_dispatcher_tail(cf_dispatcher *d, bool from_beginning, volatile sig_atomic_t *stop, int64_t timeout_us,
                       cf_tail_fn fn, void *ctx, cf_error *err);

/* Raw produce for tests and tools (e.g. inject malformed bytes).  topic NULL =
 * the request topic; key may be NULL.  Asynchronous like submit. */
int cf_dispatcher_produce_raw(cf_dispatcher *d, const char *topic, const void *key, size_t keylen,
                              const void *value, size_t len, cf_error *err);

void cf_dispatcher_get_stats(cf_dispatcher *d, cf_dispatcher_stats *out);

const char *cf_dispatcher_request_topic(const cf_dispatcher *d);
const char *cf_dispatcher_result_topic(const cf_dispatcher *d);

/* Admin: creates topics with `partitions` partitions, replication factor 1
 * (idempotent: an existing topic is fine).  kafka (may be NULL) adds
 * librdkafka properties.  timeout_us bounds the whole operation. */
int cf_kafka_create_topics(const char *brokers, const char *const *names, size_t n, int partitions,
                           int64_t timeout_us, cf_error *err);
int cf_kafka_create_topics_ex(const char *brokers, const cf_kvlist *kafka, const char *const *names, size_t n,
                              int partitions, int replication_factor, int64_t timeout_us, cf_error *err);
/* Per-topic settings beyond partitions (every topic gets max.message.bytes
 * CF_KAFKA_TOPIC_MAX_MESSAGE_BYTES). */
typedef struct cf_kafka_topic_opts {
    int partitions;
    int replication_factor;       /* -1: the broker's default */
    const char *compacted;        /* this topic (if among names) gets cleanup.policy=compact */
    int64_t retention_ms;         /* 0: the broker's default; else retention.ms of the other topics */
} cf_kafka_topic_opts;
int cf_kafka_create_topics_opts(const char *brokers, const cf_kvlist *kafka, const char *const *names, size_t n,
                                const cf_kafka_topic_opts *opts, int64_t timeout_us, cf_error *err);

/* One ALLOW rule of the broker's authorizer (KRaft StandardAuthorizer),
 * for any host. */
typedef struct cf_kafka_acl {
    const char *principal; /* "User:name" */
    const char *operation; /* read, write, create, describe, alter, delete, all, idempotent_write ... */
    const char *resource;  /* topic, group, cluster, transactional_id */
    const char *name;      /* resource name ("kafka-cluster" for the cluster) */
    bool prefixed;         /* name is a prefix (else the literal name) */
} cf_kafka_acl;

/* Admin: creates ALLOW ACLs (idempotent: an existing binding is fine).
 * Needs a principal allowed to alter ACLs (a super user). */
int cf_kafka_acls_create(const char *brokers, const cf_kvlist *kafka, const cf_kafka_acl *acls, size_t n,
                         int64_t timeout_us, cf_error *err);

/* Parses "operation:resource:name[*]" ('*' at the end: a prefix) into acl
 * (pointing into a copy kept in buf); principal is set by the caller. */
int cf_kafka_acl_parse(const char *spec, cf_kafka_acl *acl, char *buf, size_t bufsz, cf_error *err);

/* A fresh request id: 13 hex digits of epoch microseconds, '-', 16 random hex
 * digits (getrandom), so ids sort by creation time.  cap >= 31. */
int cf_dispatcher_new_id(char *buf, size_t cap, cf_error *err);

#endif
