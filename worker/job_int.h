/* job: one request message from the moment the worker takes it from its
 * partition until it leaves the worker, and the one record of where it is.
 *
 *   taken --> queued --> running --> producing --> answered        (result delivered)
 *     |         |           |          |  ^  `---> dead-lettered   (dead letter delivered)
 *     |         |           |          v  |
 *     |         |           |       retry-wait
 *     |         |           |          |
 *     |         |           |       blocking (a dead letter the broker refused: retried
 *     |         |           |                 until it lands; no intake meanwhile)
 *     `---------`-----------`----------`--------> dropped          (given up unanswered)
 *
 * taken and queued jobs may also go straight to producing (rejected at
 * admission, a dead letter, cancelled while waiting for a slot).  The
 * three terminal states are the only ways out, and each job reaches
 * exactly one: answered and dead-lettered mark the job's offset done (if
 * its partition is still ours as it was), dropped leaves it unmarked so
 * that the partition's next owner reads the request again (revoke, loss,
 * shutdown, out of memory).  job_set_state checks every transition
 * against one table (job.c), in the manner of librdkafka's
 * rd_kafka_toppar_set_fetch_state, and logs old -> new at debug level.
 *
 * Threads: the main thread owns a job except while a slot runs it
 * (running, and its first producing); terminal transitions happen on the
 * main thread only. */
#ifndef CF_WORKER_JOB_INT_H
#define CF_WORKER_JOB_INT_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdint.h>

#include "cf_backend.h"
#include "profile_int.h"
#include "cf_schema.h"
#include "exec_pool_int.h"
#include "observe_int.h"

typedef enum job_state {
    JOB_TAKEN,         /* read from its partition: being decoded and admitted */
    JOB_QUEUED,        /* admitted: waiting for a slot */
    JOB_RUNNING,       /* a slot runs it (idempotency claim, state steps, the backend) */
    JOB_PRODUCING,     /* its answer is with the producer */
    JOB_RETRY_WAIT,    /* its answer failed: produced again at next_try_us */
    JOB_BLOCKING,      /* a dead letter the broker refused: produced again until it lands; no intake meanwhile */
    JOB_ANSWERED,      /* terminal: its result was delivered */
    JOB_DEAD_LETTERED, /* terminal: its dead letter was delivered */
    JOB_DROPPED,       /* terminal: given up unanswered, read again by the partition's next owner */
    JOB__STATES,
} job_state;

/* Why a running job was told to stop (0: it was not).  One field, read by
 * the backend through cf_exec_ctx.cancel (nonzero = stop). */
typedef enum job_stop {
    JOB_STOP_NONE = 0,
    JOB_STOP_WORKER, /* its partition was given up, or the worker stops: no answer, the next owner runs it */
    JOB_STOP_SENDER, /* its sender cancelled it: answered `cancelled` */
} job_stop;

/* The idempotency store's part in a job (worker_state.h, claims). */
typedef enum job_claim {
    JOB_CLAIM_OFF,         /* no digest (no store, or the request could not be digested): at-least-once */
    JOB_CLAIM_WANTED,      /* digest taken at intake: the slot claims the id before running */
    JOB_CLAIM_LEASED,      /* holding the id's lease (renewed by the lease keeper) */
    JOB_CLAIM_UNPROTECTED, /* the store was unreachable: ran without it, and the result says so */
    JOB_CLAIM_DONE,        /* the lease released, or the result stored */
} job_claim;

typedef enum job_out_kind {
    JOB_OUT_NONE,
    JOB_OUT_RESULT,
    JOB_OUT_DEAD_LETTER,
} job_out_kind;

/* How the answer was adjusted after a refusal (each at most once). */
typedef enum job_out_cut {
    JOB_OUT_WHOLE,
    JOB_OUT_SLIMMED,       /* a result cut to fit the topic's message size */
    JOB_OUT_VALUE_DROPPED, /* a dead letter sent without its value */
} job_out_cut;

/* The message a job answers with, kept until it is delivered so that a
 * failed delivery can be retried as it was. */
typedef struct job_out {
    job_out_kind kind;
    job_out_cut cut;
    const char *topic;
    char *key;
    cf_bytes value;
    bool value_empty;         /* no bytes, but not null: a dead letter of an empty (not tombstone) message */
    rd_kafka_headers_t *hdrs; /* dead letters: origin and reason */
} job_out;

#define JOB_CANCEL_REASON_MAX (CF_CANCEL_REASON_MAX + 64)

typedef struct job {
    cf_pool_job pj; /* first: the pool hands this pointer back */
    job_state state;
    size_t topic;   /* index into the worker's request topics */
    char *key;      /* the message's key (pj.key is it qualified by the topic) */
    const cf_profile *profile;
    int32_t partition;
    int64_t offset;
    int64_t stored_below; /* when taken: the partition's offsets below it were stored for commit (-1: none) */
    uint64_t gen;   /* assignment generation of the partition when taken */
    cf_request req;
    const cf_backend *backend;
    const char *result_topic; /* req.reply_to or the profile's result topic */
    char *stream_topic;       /* req.stream: result_topic + stream-topic-suffix (owned) */
    volatile int stop;        /* job_stop; set (release) after stop_reason */
    char stop_reason[JOB_CANCEL_REASON_MAX];
    bool write_refused;       /* its workspace write-back or checkpoint save was refused: not kept for replay */
    job_out out;
    /* Bumped (release) just before each produce of out, read (acquire) by
     * the delivery report: the main thread then sees everything the slot
     * wrote into the job, by our own ordering rather than librdkafka's
     * internal hand-offs (ThreadSanitizer saw no order through those). */
    unsigned produced;
    int delivery_tries;          /* failed deliveries of the current answer */
    int64_t next_try_us;         /* retry-wait and blocking: when (monotonic) */
    rd_kafka_resp_err_t last_err; /* a slot's produce that failed at once (handed back) */
    /* Idempotency (slot thread; claim is read by the lease keeper under
     * the worker's lock). */
    job_claim claim;
    char digest[CF_DIGEST_HEX];
    char token[CF_ID_MAX + 48];
    char lease_key[CF_ID_MAX + 200];   /* fences the run's state writes */
    char lease_value[CF_ID_MAX + 200];
    cf_job_obs obs;         /* trace context and timeline (observe.h) */
    struct job *list_next;  /* the hand-back or retry list */
} job;

struct cf_worker;

const char *job_state_name(job_state s);
/* Whether from -> to is a transition of the table. */
bool job_transition_legal(job_state from, job_state to);
static inline bool job_state_terminal(job_state s)
{
    return s == JOB_ANSWERED || s == JOB_DEAD_LETTERED || s == JOB_DROPPED;
}

/* A new job in state taken (NULL: out of memory). */
job *job_new(struct cf_worker *w);
/* Counts j as taken (its message tracked by its partition): from here on
 * it ends exactly once, through job_set_state. */
void job_taken(struct cf_worker *w, job *j);
/* Moves j to state to; an illegal transition is a bug: logged, refused
 * (false).  A terminal state ends the job (main thread only): its offset
 * is marked done when it was answered and its partition is still ours as
 * it was, the counters move, and j is freed. */
bool job_set_state(struct cf_worker *w, job *j, job_state to);
/* Frees a job that was never taken (its message not tracked). */
void job_free(job *j);
void job_out_clear(job_out *o);

/* The stop request of a job (0: none), with acquire ordering for the
 * reason. */
static inline job_stop job_stop_of(const job *j)
{
    return (job_stop)__atomic_load_n(&j->stop, __ATOMIC_ACQUIRE);
}

/* Asks the job's execution to stop (any thread).  A sender's cancel is
 * not overridden by the worker's own stop, nor the reverse: the first
 * reason stays. */
void job_request_stop(job *j, job_stop why, const char *reason);

#endif
