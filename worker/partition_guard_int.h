/* partition_guard: notices a partition that is assigned, has requests
 * waiting, and is not being consumed although the worker has room, and
 * gets it moving again by the cheapest correct step (docs/RELIABILITY.md,
 * "The partition guard").
 *
 * Why it exists: the worker's liveness rests on librdkafka fetching every
 * partition it holds and has not paused.  Issue 28 found that promise broken
 * once (an application pause that outlived a lost assignment): a worker held
 * two partitions with 74 requests on them and took nothing for seven
 * minutes, and nothing noticed.  The cause is fixed at its depth; this guard
 * is the net under any other such cause.
 *
 * How: the worker tells the guard, per partition, when it last moved (a
 * message taken, the partition assigned or resumed, or paused by us, when
 * it is not expected to move).  A partition that has not moved for
 * `partition-stall` while it should be fetched is probed: its log end and,
 * when nothing was taken from it yet, its committed offset are asked of the
 * broker by the guard's own thread (both calls block).  Requests waiting
 * beyond the position make it a stall; the steps are, one per further
 * `partition-stall` without progress: resume the partition, seek it to the
 * position (never past a request not taken), leave and rejoin the group.
 * A message taken from it ends the stall.  Nothing is ever skipped.
 *
 * Threads: everything but the probe thread runs on the worker's main
 * thread; cf_pguard_counts may be read from any thread. */
#ifndef CF_PARTITION_GUARD_H
#define CF_PARTITION_GUARD_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdint.h>

#include "cf_error.h"

/* The steps, in the order they are tried. */
typedef enum cf_pguard_step {
    CF_PGUARD_RESUME = 0,
    CF_PGUARD_SEEK,
    CF_PGUARD_REJOIN,
    CF_PGUARD__STEPS,
} cf_pguard_step;

const char *cf_pguard_step_name(cf_pguard_step s);

/* The guard's record of one partition (part of the worker's partition
 * state; zeroed when the partition is assigned). */
typedef struct cf_pguard_part {
    int64_t moved_us;      /* monotonic: last progress, or when it should start moving */
    int64_t next_offset;   /* after the last message taken; -1: none taken yet */
    int64_t asked_us;      /* a probe is out since (0: none) */
    int64_t stalled_us;    /* a stall found at (0: none) */
    int steps;             /* steps taken in this stall */
    int64_t waiting;       /* requests beyond the position at the last probe */
} cf_pguard_part;

/* What one probe found. */
typedef struct cf_pguard_answer {
    char topic[256];
    int32_t partition;
    uint64_t gen;          /* the partition's assignment generation when asked */
    int64_t low, high;     /* the log's start and end */
    int64_t committed;     /* -1: not asked, or none committed */
    bool failed;           /* the broker did not answer: no verdict */
    char why[200];
} cf_pguard_answer;

typedef struct cf_pguard cf_pguard;

/* The worker's wake-up, called (from the probe thread) when an answer is
 * ready. */
typedef void (*cf_pguard_wake_fn)(void *arg);

/* stall_us: how long a partition that should move may stand still.
 * consumer is borrowed; the guard's thread is joined by destroy, which must
 * come before the consumer is destroyed. */
cf_pguard *cf_pguard_new(rd_kafka_t *consumer, int64_t stall_us, cf_pguard_wake_fn wake, void *wake_arg,
                         cf_error *err);
void cf_pguard_destroy(cf_pguard *g);
/* Stops probing (no join): called as the worker starts its shutdown, so
 * that destroy waits for one probe at most (2 s). */
void cf_pguard_stop(cf_pguard *g);

/* The partition starts anew (assigned, resumed or paused by the worker):
 * its clock restarts. */
void cf_pguard_restart(cf_pguard_part *p, int64_t now_us);

/* A message was taken from the partition at offset.  Returns the step that
 * ended a stall of this partition (it is counted as recovered by it), or -1
 * when it was not stalled. */
int cf_pguard_taken(cf_pguard *g, cf_pguard_part *p, const char *topic, int32_t partition, int64_t offset,
                    int64_t now_us);

/* Whether the partition is due for a probe; then the probe is queued and
 * true returned.  expected: the partition should be fetched now (assigned,
 * not paused by the worker, the worker has room).  When it is not
 * expected to move, its clock restarts. */
bool cf_pguard_check(cf_pguard *g, cf_pguard_part *p, const char *topic, int32_t partition, uint64_t gen,
                     bool expected, int64_t now_us);

/* The next answer of the probe thread, if any (main thread). */
bool cf_pguard_next_answer(cf_pguard *g, cf_pguard_answer *out);

/* Judges an answer for its partition: returns the step to take now, or -1
 * for none (not stalled, no verdict, or it moved meanwhile).  The caller
 * takes the step; a stall found is counted here.  fetch_position: the
 * consumer's own position of the partition (rd_kafka_position; -1 when
 * unknown), which steps over what the application never sees (a
 * transaction's commit marker, aborted records): past the last message
 * taken, nothing may be waiting although the log end is further. */
int cf_pguard_judge(cf_pguard *g, cf_pguard_part *p, const cf_pguard_answer *a, int64_t now_us,
                    int64_t fetch_position, int64_t *position);

/* A stalled partition given up (revoked, lost): no longer counted as
 * stalled. */
void cf_pguard_forget(cf_pguard *g, cf_pguard_part *p);

typedef struct cf_pguard_counts {
    int64_t stalled;                       /* stalled now */
    uint64_t stalls;                       /* found since start */
    uint64_t recovered[CF_PGUARD__STEPS];  /* by the step that got it moving */
    uint64_t steps[CF_PGUARD__STEPS];      /* steps taken */
} cf_pguard_counts;

void cf_pguard_counts_get(const cf_pguard *g, cf_pguard_counts *out);

#endif
