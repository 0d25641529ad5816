/* Support for integration tests: they run against the real broker and Redis
 * started by deploy/stack.sh (addresses in CF_TEST_BROKERS / CF_TEST_REDIS)
 * and spawn real codefleet-worker processes from the build tree. */
#ifndef IT_SUPPORT_H
#define IT_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <sys/types.h>

#include "cf_config.h"
#include "cf_dispatcher.h"

const char *it_brokers(void); /* NULL when no broker is configured */
const char *it_redis(void);   /* "host:port" or NULL */

/* The stack is authenticated: CF_TEST_CLIENT_CONFIG names a settings file
 * (deploy/stack.sh's admin.conf: kafka.sasl.*, redis-user, redis-password)
 * that every client of the tests uses.  NULL/empty when not set. */
const char *it_client_config(void);
/* Its kafka.* properties (prefix removed), for cf_dispatcher_config.kafka
 * and the like; never NULL. */
const cf_kvlist *it_kafka(void);
/* Applies them to a librdkafka configuration (fails the test on error). */
void it_kafka_conf_apply(rd_kafka_conf_t *conf);
/* Fills the Redis user and password of rc from the settings file. */
struct cf_redis;
struct cf_redis_config;
void it_redis_auth(struct cf_redis_config *rc);
/* A connection to the stack's Redis as the client principal (fails the
 * test when it cannot connect). */
struct cf_redis *it_redis_open(void);
/* The settings file of another principal of the stack ("tenant-a"...),
 * from CF_TEST_SECRETS; NULL when not set. */
const char *it_principal_config(const char *principal, char *buf, size_t size);
/* Loads a settings file's kafka.* properties into out (caller frees). */
void it_load_kafka_props(const char *path, cf_kvlist *out);

/* Skips the current test (cmocka skip) when no broker is configured. */
#define IT_REQUIRE_BROKER()                                                               \
    do {                                                                                  \
        if (!it_brokers()) {                                                              \
            print_message("CF_TEST_BROKERS not set: skipping (run tests/run_all.sh)\n");   \
            skip();                                                                       \
        }                                                                                 \
    } while (0)

/* Skips the current test when no broker or no Redis is configured. */
#define IT_REQUIRE_REDIS()                                                                \
    do {                                                                                  \
        IT_REQUIRE_BROKER();                                                              \
        if (!it_redis()) {                                                                \
            print_message("CF_TEST_REDIS not set: skipping (run tests/run_all.sh)\n");    \
            skip();                                                                       \
        }                                                                                 \
    } while (0)

/* "<prefix>-<pid>-<counter>-<random>": unique topic / group / id names. */
void it_unique_name(const char *prefix, char *buf, size_t size);

/* A private set of topics for one test. */
typedef struct it_topics {
    char requests[96];
    char results[96];
    char dlq[96];
    char group[96];
    char cancels[104]; /* requests + ".cancel" */
    char outputs[104]; /* results + ".output" */
} it_topics;

/* Creates unique request/result/dlq topics, the request topic's cancel
 * topic and the result topic's output topic (partitions each) and a group
 * name. */
void it_topics_create(it_topics *t, const char *prefix, int partitions);
/* Creates a profile's request topic and its cancel topic (<topic>.cancel). */
void it_request_topic_create(const char *topic, int partitions);

typedef struct it_worker {
    pid_t pid;
    char log_path[256];
    char id[64];
} it_worker;

/* Starts codefleet-worker for topics t with extra "--k=v" args (NULL-terminated,
 * may be NULL).  Fails the test on error. */
void it_worker_start(it_worker *w, const it_topics *t, const char *id, const char *const *extra_args);
/* Sends sig and waits up to timeout_ms; returns the wait status or -1 on timeout
 * (the worker is then SIGKILLed). */
int it_worker_stop(it_worker *w, int sig, int timeout_ms);
/* True when the worker's log contains needle. */
bool it_worker_log_contains(const it_worker *w, const char *needle);
/* Waits until the log contains needle (polling), up to timeout_ms. */
bool it_worker_wait_log(const it_worker *w, const char *needle, int timeout_ms);
/* Prints the worker's log to stderr (for failure diagnosis). */
void it_worker_dump_log(const it_worker *w);

/* GET (or another method) of http://127.0.0.1:port/path: the status (0 when
 * nothing answered), the body in *out (caller frees; may be NULL). */
long it_http(const char *method, int port, const char *path, char **out);
/* The port a worker started with --metrics-listen=127.0.0.1:0 chose. */
int it_worker_metrics_port(const it_worker *w);
/* The value of one exposition line "name{labels} value" of text (the exact
 * series up to the space); -1 when absent. */
double it_metric_sample(const char *text, const char *series);

/* A dispatcher with a result collector on t. */
cf_dispatcher *it_dispatcher_new(const it_topics *t);

/* Fills a minimal request (caller clears): language, code (or argv for
 * command), network/fs unspecified, generated id. */
void it_request_init(cf_request *req, cf_language lang, const char *code);

/* Submits and waits for the result; fails the test on transport errors. */
void it_submit_wait(cf_dispatcher *d, const cf_request *req, int64_t timeout_us, cf_result *res);

/* Runs the `codefleet` CLI (CF_BINARY_DIR/dispatcher/codefleet) with the
 * stack's --config and --brokers first, then args (NULL-terminated), stdin
 * from /dev/null.  stdout and stderr are captured (through files in tmpdir)
 * into out/err, NUL-terminated and truncated to their sizes.  Returns the
 * exit status, or -1 when the CLI died of a signal. */
int it_cli_run(const char *const *args, const char *tmpdir, char *out, size_t out_size, char *err,
               size_t err_size);
/* The same CLI in the background (a follower the test watches), stdout
 * and stderr to those files; its pid (the test fails if it cannot start). */
pid_t it_cli_start(const char *const *args, const char *out_path, const char *err_path);

/* A consumed message, copied out of librdkafka. */
typedef struct it_message {
    void *payload; /* a copy, NUL-terminated */
    size_t len;
    bool null_value; /* the message's value was null (a tombstone), not empty */
    char *key; /* NUL-terminated copy */
    size_t key_len;
    int32_t partition;
    int64_t offset;
    rd_kafka_headers_t *headers; /* may be NULL */
} it_message;

/* Reads the first message of topic (from the beginning, all partitions)
 * within timeout_ms; NULL on timeout.  Free with it_message_free. */
it_message *it_consume_first(const char *topic, int timeout_ms);
void it_message_free(it_message *m);
/* Header value as a NUL-terminated string in buf, or NULL. */
const char *it_message_header(const it_message *m, const char *name, char *buf, size_t size);

#endif
