#include "exec_pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct cf_exec_pool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    cf_pool_job *head; /* queued and running jobs, in arrival order */
    size_t queued;
    size_t running;
    bool stopping;
    int nslots;
    pthread_t *threads;
    cf_pool_run_fn run;
    cf_pool_notify_fn notify;
    void *arg;
};

typedef struct slot_arg {
    cf_exec_pool *pool;
    int slot;
} slot_arg;

static bool has_key(const cf_pool_job *j)
{
    return j->key && j->key[0];
}

/* The first queued job that no earlier job (queued or running) with the same
 * key precedes.  Caller holds the lock. */
static cf_pool_job *next_runnable(cf_exec_pool *p)
{
    for (cf_pool_job *j = p->head; j; j = j->next) {
        if (j->running)
            continue;
        if (!has_key(j))
            return j;
        bool blocked = false;
        for (cf_pool_job *e = p->head; e != j; e = e->next) {
            if (has_key(e) && strcmp(e->key, j->key) == 0) {
                blocked = true;
                break;
            }
        }
        if (!blocked)
            return j;
    }
    return NULL;
}

static void unlink_job(cf_exec_pool *p, cf_pool_job *job)
{
    for (cf_pool_job **pp = &p->head; *pp; pp = &(*pp)->next) {
        if (*pp == job) {
            *pp = job->next;
            job->next = NULL;
            return;
        }
    }
}

static void *slot_main(void *argp)
{
    slot_arg *sa = argp;
    cf_exec_pool *p = sa->pool;
    int slot = sa->slot;
    free(sa);

    pthread_mutex_lock(&p->lock);
    for (;;) {
        cf_pool_job *job = NULL;
        while (!p->stopping && !(job = next_runnable(p)))
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->stopping)
            break;
        job->running = true;
        p->queued--;
        p->running++;
        pthread_mutex_unlock(&p->lock);

        p->run(job, slot, p->arg);

        pthread_mutex_lock(&p->lock);
        unlink_job(p, job);
        p->running--;
        /* A finished keyed job may unblock a follower. */
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        if (p->notify)
            p->notify(p->arg);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

cf_exec_pool *cf_exec_pool_new(int slots, cf_pool_run_fn run, cf_pool_notify_fn notify, void *arg)
{
    cf_exec_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->run = run;
    p->notify = notify;
    p->arg = arg;
    p->threads = calloc((size_t)slots, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < slots; i++) {
        slot_arg *sa = malloc(sizeof(*sa));
        if (!sa) {
            cf_exec_pool_destroy(p);
            return NULL;
        }
        sa->pool = p;
        sa->slot = i;
        if (pthread_create(&p->threads[i], NULL, slot_main, sa) != 0) {
            free(sa);
            cf_exec_pool_destroy(p);
            return NULL;
        }
        p->nslots = i + 1;
    }
    return p;
}

void cf_exec_pool_destroy(cf_exec_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nslots; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

void cf_exec_pool_submit(cf_exec_pool *p, cf_pool_job *job)
{
    job->next = NULL;
    job->running = false;
    pthread_mutex_lock(&p->lock);
    cf_pool_job **pp = &p->head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = job;
    p->queued++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

size_t cf_exec_pool_pending(cf_exec_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->queued + p->running;
    pthread_mutex_unlock(&p->lock);
    return n;
}

size_t cf_exec_pool_running(cf_exec_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->running;
    pthread_mutex_unlock(&p->lock);
    return n;
}

cf_pool_job *cf_exec_pool_drop_queued(cf_exec_pool *p, bool (*match)(const cf_pool_job *, void *), void *arg)
{
    cf_pool_job *dropped = NULL, **tail = &dropped;
    pthread_mutex_lock(&p->lock);
    cf_pool_job **pp = &p->head;
    while (*pp) {
        cf_pool_job *j = *pp;
        if (!j->running && (!match || match(j, arg))) {
            *pp = j->next;
            j->next = NULL;
            *tail = j;
            tail = &j->next;
            p->queued--;
        } else {
            pp = &j->next;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return dropped;
}

size_t cf_exec_pool_count_running(cf_exec_pool *p, bool (*match)(const cf_pool_job *, void *), void *arg)
{
    size_t n = 0;
    pthread_mutex_lock(&p->lock);
    for (cf_pool_job *j = p->head; j; j = j->next)
        if (j->running && (!match || match(j, arg)))
            n++;
    pthread_mutex_unlock(&p->lock);
    return n;
}
