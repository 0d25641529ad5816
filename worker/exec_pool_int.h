/* exec_pool: execution slots with per-key ordering and shares by group.
 *
 * A fixed set of slot threads runs jobs.  Jobs with the same non-empty key
 * (the Kafka message key: a workspace or thread id, so one workspace's
 * requests are never run concurrently and run in arrival order) are run one
 * after another; jobs with different keys run in parallel.
 *
 * Each job belongs to a group (the worker's: its profile, so its tenant).
 * A free slot goes to the group with the fewest running jobs for its
 * weight among those with a runnable job (ties: the earliest job), and a
 * group never runs more than its cap at once: one tenant's long runs
 * cannot take every slot, and a tenant with work never waits behind
 * another's backlog (the queue is not first-come-first-served across
 * groups; within a group it is).  With budgets (memory, processes), a job
 * that does not fit one waits, and while its group is no better served
 * than the others nothing else starts: the running jobs drain until it
 * fits.
 *
 * Ownership: the pool never touches a job once run() has been called on it
 * (the job's owner may free it as soon as its result is delivered, possibly
 * before run() returns): what the pool needs for ordering and bookkeeping
 * (key, partition) is copied at submit. */
#ifndef CF_EXEC_POOL_H
#define CF_EXEC_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a running job reserves, each against a budget of its own. */
typedef enum cf_pool_resource {
    CF_POOL_MEMORY, /* bytes: the execution's memory limit */
    CF_POOL_PIDS,   /* processes: its pids limit (0 when its backend counts none) */
    CF_POOL_NRESOURCES
} cf_pool_resource;

typedef struct cf_pool_job {
    char *key;                  /* NULL or "" = no ordering constraint */
    int32_t partition;          /* for rebalance bookkeeping */
    int group;                  /* 0..groups-1 (cf_exec_pool_set_groups); 0 without groups */
    int64_t cost[CF_POOL_NRESOURCES]; /* what it reserves of each budget while it runs */
    struct cf_pool_job *next;   /* links jobs returned by cf_exec_pool_drop_queued */
} cf_pool_job;

typedef struct cf_exec_pool cf_exec_pool;

/* run(job, slot, arg) executes one job in a slot thread and takes the job
 * over; afterwards the pool calls notify(arg) so the owner can wake up. */
typedef void (*cf_pool_run_fn)(cf_pool_job *job, int slot, void *arg);
typedef void (*cf_pool_notify_fn)(void *arg);

cf_exec_pool *cf_exec_pool_new(int slots, cf_pool_run_fn run, cf_pool_notify_fn notify, void *arg);
/* Stops the threads after the jobs already running finish; queued jobs
 * are not run (use drop first to reclaim them).  NULL-safe. */
void cf_exec_pool_destroy(cf_exec_pool *p);

/* The groups' weights (> 0) and caps (1..slots: the most of its jobs that
 * run at once), n of each; before the first submit.  Without: one group,
 * weight 1, cap slots.  -1 when out of memory. */
int cf_exec_pool_set_groups(cf_exec_pool *p, int n, const int *weights, const int *caps);

/* The budget the running jobs' costs of resource r may add up to (0:
 * none).  A job that does not fit waits (its group offers it first, so a
 * group's order holds); one larger than the whole budget must be refused
 * before submit. */
void cf_exec_pool_set_budget(cf_exec_pool *p, cf_pool_resource r, int64_t budget);
/* The most of that budget group's running jobs may hold (0: all of it;
 * group -1: every group's), after cf_exec_pool_set_groups: the rest stays
 * for the others, as the reserve slots do.  A group at it waits for its
 * own jobs; it does not make the others drain. */
void cf_exec_pool_set_group_budget(cf_exec_pool *p, cf_pool_resource r, int group, int64_t group_max);
/* The costs of resource r of the jobs running now. */
int64_t cf_exec_pool_reserved(cf_exec_pool *p, cf_pool_resource r);

/* Jobs of a group running now. */
size_t cf_exec_pool_group_running(cf_exec_pool *p, int group);

/* Queues a job; -1 when out of memory (the job stays the caller's). */
int cf_exec_pool_submit(cf_exec_pool *p, cf_pool_job *job);

/* Jobs queued plus running. */
size_t cf_exec_pool_pending(cf_exec_pool *p);
size_t cf_exec_pool_running(cf_exec_pool *p);
/* Jobs waiting for a slot. */
size_t cf_exec_pool_queued(cf_exec_pool *p);

/* Removes the queued (not running) jobs pred selects and returns them as a
 * list linked through job->next. */
typedef bool (*cf_pool_job_pred)(const cf_pool_job *job, void *arg);
cf_pool_job *cf_exec_pool_drop_queued_if(cf_exec_pool *p, cf_pool_job_pred pred, void *arg);

/* Selects jobs by partition (NULL = all). */
typedef bool (*cf_pool_match_fn)(int32_t partition, void *arg);

/* Removes queued (not running) jobs that match and returns them, linked
 * through ->next, back to the caller. */
cf_pool_job *cf_exec_pool_drop_queued(cf_exec_pool *p, cf_pool_match_fn match, void *arg);

/* Counts running jobs that match. */
size_t cf_exec_pool_count_running(cf_exec_pool *p, cf_pool_match_fn match, void *arg);

#endif
