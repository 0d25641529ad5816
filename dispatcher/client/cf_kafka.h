/* cf_kafka: the client library's Kafka plumbing (producers, assigned
 * consumers, topic metadata, one-line explanations of librdkafka's
 * errors), shared by cf_dispatcher.c and cf_events.c and used by the CLI
 * and the project's tools.  Not installed: the public API for programs is
 * cf_dispatcher.h and cf_events.h. */
#ifndef CF_KAFKA_H
#define CF_KAFKA_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "cf_config.h"
#include "cf_error.h"

#include "cf_kafka_heal.h"

#define CF_KAFKA_ERRSTR 512
#define CF_KAFKA_MAX_PARTITIONS 100000
/* Poll slice of consumers and of a full producer queue: bounds how long a
 * stop request (destroy, signal) waits when a queue cannot be woken. */
#define CF_KAFKA_POLL_SLICE_MS 100
/* How long a client that knows no live broker waits before bootstrapping
 * again (cf_kafka_conf_new). */
#define CF_KAFKA_REBOOTSTRAP_MS "3000"
#define CF_KAFKA_METADATA_TIMEOUT_MS 10000

typedef struct cf_kafka_kv {
    const char *k, *v;
} cf_kafka_kv;

/* A conf with the base properties (brokers, client_id: both required), then
 * role's, then extra's (may be NULL; last, so -X can override anything).
 * Every property is checked; the log goes to cf_log.  NULL on error. */
rd_kafka_conf_t *cf_kafka_conf_new(const char *brokers, const char *client_id, const cf_kafka_kv *role,
                                   size_t nrole, const cf_kvlist *extra, cf_error *err);

/* Deep copy of src (may be NULL) into the empty dst.  -1 when out of memory;
 * dst then holds what was copied: free it with cf_kvlist_free. */
int cf_kafka_kvlist_copy(cf_kvlist *dst, const cf_kvlist *src);

/* Microseconds to librdkafka's int milliseconds: rounded up, clamped. */
int cf_kafka_ms_of_us(int64_t us);

/* Errors worth retrying for a moment (a topic created a moment ago is
 * briefly unknown or leaderless on its broker). */
bool cf_kafka_transient(rd_kafka_resp_err_t e);

/* rd_kafka_new with the error contract: conf is consumed, also on failure
 * (librdkafka takes it only on success); what names the client in the
 * error ("admin client"). */
rd_kafka_t *cf_kafka_client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, const char *what, cf_error *err);

/* ---- producer ------------------------------------------------------------- */

/* Delivery reports of one producer: the first unreported failure and a count
 * of every failed message.  Served by whichever thread polls the producer. */
typedef struct cf_kafka_dr {
    pthread_mutex_t mu;
    char error[CF_KAFKA_ERRSTR]; /* "" = none */
    bool retriable;
    atomic_uint_fast64_t failed;
} cf_kafka_dr;

void cf_kafka_dr_init(cf_kafka_dr *dr);
void cf_kafka_dr_destroy(cf_kafka_dr *dr);
/* Reports (as CF_E_KAFKA, -1) and resets the first delivery failure since the
 * last report; 0 when there was none. */
int cf_kafka_dr_take(cf_kafka_dr *dr, cf_error *err);

/* An idempotent, acks=all, murmur2-partitioned producer whose delivery
 * reports go to dr (borrowed: must outlive the producer).  what names it in
 * the error ("producer", "the events producer"). */
rd_kafka_t *cf_kafka_producer_new(const char *brokers, const char *client_id, const cf_kvlist *extra,
                                  cf_kafka_dr *dr, const char *what, cf_error *err);

/* Produces one message (msgflags: RD_KAFKA_MSG_F_FREE or _COPY; with FREE the
 * value is librdkafka's only on success).  A full queue is served and retried
 * for up to ~5 s.  Returns the librdkafka error (0 = queued). */
rd_kafka_resp_err_t cf_kafka_produce(rd_kafka_t *rk, const char *topic, const void *key, size_t keylen, void *value,
                                     size_t len, int msgflags);

/* Waits for every queued message (CF_E_TIMEOUT, retriable, after timeout_us)
 * and reports the first delivery failure.  noun names the messages in the
 * error ("message", "event"). */
int cf_kafka_flush(rd_kafka_t *rk, cf_kafka_dr *dr, int64_t timeout_us, const char *noun, cf_error *err);

/* Flushes (up to 10 s, a warning in subsys's log when messages are left) and
 * destroys rk.  NULL-safe. */
void cf_kafka_producer_destroy(rd_kafka_t *rk, const char *subsys, const char *noun);

/* ---- manually assigned consumers ---------------------------------------- */

/* A consumer without group membership or commits (partitions are assigned
 * with cf_kafka_assign).  group_prefix names its throwaway group; what names
 * it in the error ("consumer", "an events consumer"). */
rd_kafka_t *cf_kafka_consumer_new(const char *brokers, const char *client_id, const cf_kvlist *extra,
                                  const char *group_prefix, const char *what, cf_error *err);
void cf_kafka_consumer_close(rd_kafka_t *rk); /* NULL-safe */

/* Partition count of topic (which must exist; with need_leaders, with a
 * leader for every partition).  *kerr gets the Kafka error for retry
 * decisions. */
int cf_kafka_topic_partitions(rd_kafka_t *rk, const char *topic, bool need_leaders, int32_t *out,
                              rd_kafka_resp_err_t *kerr, cf_error *err);

/* The partition a murmur2-partitioned producer puts key in. */
int32_t cf_kafka_partition_for_key(const char *key, int32_t partition_cnt);

/* max.message.bytes of the topics codefleet creates (the local stack's
 * broker takes the same): a result with several MiB of output fits. */
#define CF_KAFKA_TOPIC_MAX_MESSAGE_BYTES "16777216"

/* librdkafka's own log lines at debug level only (a command-line tool
 * explains failures in one line instead); the last connection problem it
 * logged is kept for that explanation ("" when none). */
void cf_kafka_quiet_logs(bool quiet);
size_t cf_kafka_last_problem(char *buf, size_t size);
/* True once librdkafka said a broker closed a connection in a way that
 * means it expects SASL or TLS (a missing or wrong security.protocol). */
bool cf_kafka_saw_protocol_hint(void);

typedef enum cf_kafka_start {
    CF_KAFKA_FROM_END,       /* the high watermark, read now */
    CF_KAFKA_FROM_BEGINNING, /* everything the topic still holds */
    CF_KAFKA_FROM_TIME,      /* the first message at or after since_us (epoch) */
} cf_kafka_start;

/* Assigns every partition of topic (only key's when key is not NULL) to rk
 * at an explicit offset.  need_leaders: see cf_kafka_topic_partitions.
 * Transient metadata errors (a just-created topic) are retried for a few
 * seconds. */
int cf_kafka_assign(rd_kafka_t *rk, const char *topic, const char *key, bool need_leaders, cf_kafka_start start,
                    int64_t since_us, cf_error *err);

/* The next message of rk without an error, or NULL once deadline (mono us)
 * passes or *stop (may be NULL) is set; the caller destroys it.  Error
 * messages are skipped: each but PARTITION_EOF is copied into last (may be
 * NULL, cap bytes) and, when log_subsys is not NULL, logged at debug level. */
rd_kafka_message_t *cf_kafka_consume(rd_kafka_t *rk, int64_t deadline, volatile sig_atomic_t *stop,
                                     const char *log_subsys, char *last, size_t cap);

/* Fetches topic's metadata now so the first message to it is not held
 * until the broker thread's periodic wake-up (~1 s with linger.ms=0). */
void cf_kafka_warm_topic(rd_kafka_t *rk, const char *topic);
/* The same, saying what the broker answered for the topic
 * (RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART when it does not exist). */
rd_kafka_resp_err_t cf_kafka_topic_check(rd_kafka_t *rk, const char *topic);

#endif
