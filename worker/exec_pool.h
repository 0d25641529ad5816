/* exec_pool: execution slots with per-key ordering.
 *
 * A fixed set of slot threads runs jobs.  Jobs with the same non-empty key
 * (the Kafka message key: a workspace id, so one workspace's requests are
 * never run concurrently and run in arrival order) are run one after
 * another; jobs with different keys run in parallel. */
#ifndef CF_EXEC_POOL_H
#define CF_EXEC_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cf_pool_job {
    char *key;                  /* NULL or "" = no ordering constraint */
    int32_t partition;          /* for rebalance bookkeeping */
    struct cf_pool_job *next;   /* pool-internal */
    bool running;               /* pool-internal */
} cf_pool_job;

typedef struct cf_exec_pool cf_exec_pool;

/* run(job, slot, arg) executes one job in a slot thread.  After it returns
 * the pool forgets the job (ownership stays with the caller's run code) and
 * calls notify(arg) so the owner can wake up. */
typedef void (*cf_pool_run_fn)(cf_pool_job *job, int slot, void *arg);
typedef void (*cf_pool_notify_fn)(void *arg);

cf_exec_pool *cf_exec_pool_new(int slots, cf_pool_run_fn run, cf_pool_notify_fn notify, void *arg);
/* Stops the threads after the jobs already running finish; queued jobs
 * are not run (use drop first to reclaim them).  NULL-safe. */
void cf_exec_pool_destroy(cf_exec_pool *p);

void cf_exec_pool_submit(cf_exec_pool *p, cf_pool_job *job);

/* Jobs queued plus running. */
size_t cf_exec_pool_pending(cf_exec_pool *p);
size_t cf_exec_pool_running(cf_exec_pool *p);

/* Removes queued (not running) jobs for which match(job, arg) is true (all
 * when match is NULL) and returns them as a list linked through ->next. */
cf_pool_job *cf_exec_pool_drop_queued(cf_exec_pool *p, bool (*match)(const cf_pool_job *, void *), void *arg);

/* Counts running jobs for which match(job, arg) is true (all when NULL). */
size_t cf_exec_pool_count_running(cf_exec_pool *p, bool (*match)(const cf_pool_job *, void *), void *arg);

#endif
