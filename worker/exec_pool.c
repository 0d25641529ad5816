#include "exec_pool_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The pool's own record of a job: it outlives the job's run, so the slot
 * thread can unlink it after run() without touching the (possibly freed)
 * job. */
typedef struct pool_node {
    cf_pool_job *job; /* valid until run() is called */
    char *key;        /* copy; NULL = unordered */
    int32_t partition;
    int group;
    int64_t cost[CF_POOL_NRESOURCES];
    bool running;
    struct pool_node *next;
} pool_node;

struct cf_exec_pool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pool_node *head; /* queued and running, in arrival order */
    pool_node *tail; /* the last of them: submit is O(1) with a backlog of thousands */
    size_t queued;
    size_t running;
    bool stopping;
    int nslots;
    int ngroups;      /* 1 until cf_exec_pool_set_groups */
    int *weight;      /* per group */
    int *cap;         /* per group: most running at once */
    int *running_g;   /* per group */
    pool_node **cand; /* per group: scratch of next_runnable */
    int *offer_order; /* scratch of next_runnable: groups in the order their candidates were met */
    /* Per resource: */
    int64_t budget[CF_POOL_NRESOURCES];    /* 0: none */
    int64_t reserved[CF_POOL_NRESOURCES];  /* costs of the running jobs */
    int64_t (*group_max)[CF_POOL_NRESOURCES];  /* per group: the most it may reserve (0: the budget) */
    int64_t (*reserved_g)[CF_POOL_NRESOURCES]; /* per group */
    pthread_t *threads;
    cf_pool_run_fn run;
    cf_pool_notify_fn notify;
    void *arg;
};

typedef struct slot_arg {
    cf_exec_pool *pool;
    int slot;
} slot_arg;

/* A group's marks in next_runnable's scratch: its first job does not fit
 * the budget now; it does not fit the group's own share of it. */
static pool_node waits_for_budget;
static pool_node waits_for_own;

/* Whether an earlier node (queued or running) with n's key precedes it. */
static bool key_blocked(const cf_exec_pool *p, const pool_node *n)
{
    if (!n->key)
        return false;
    for (const pool_node *e = p->head; e != n; e = e->next)
        if (e->key && strcmp(e->key, n->key) == 0)
            return true;
    return false;
}

/* Whether group a has fewer running jobs for its weight than group b
 * (running_a / weight_a < running_b / weight_b, without division). */
static bool fewer_for_weight(const cf_exec_pool *p, int a, int b)
{
    return (long long)p->running_g[a] * p->weight[b] < (long long)p->running_g[b] * p->weight[a];
}

/* Whether n's costs fit: over its group's share of a budget
 * (&waits_for_own), over what is left of one (&waits_for_budget), or n. */
static pool_node *fit(const cf_exec_pool *p, pool_node *n)
{
    pool_node *mark = n;
    for (int r = 0; r < CF_POOL_NRESOURCES; r++) {
        if (p->budget[r] <= 0)
            continue;
        int64_t share = p->group_max[n->group][r];
        if (share > 0 && p->reserved_g[n->group][r] + n->cost[r] > share)
            return &waits_for_own;
        if (p->reserved[r] + n->cost[r] > p->budget[r])
            mark = &waits_for_budget;
    }
    return mark;
}

/* The next job to run: each group under its cap offers its first queued
 * node that no earlier node with the same key precedes; of those, the one
 * of the group with the fewest running jobs for its weight, the earliest
 * job on a tie (the scan meets the candidates in arrival order, so a
 * tenant whose job has waited longest goes first: with more busy tenants
 * than slots, each gets its turn).
 *
 * The budgets: a group whose first job does not fit one offers nothing (its
 * later jobs do not pass it), and while it is no better served than the
 * best candidate, nothing starts at all: the running jobs drain until it
 * fits.  Otherwise other tenants' small jobs, started as soon as one of
 * theirs ends, would keep the budget full and a large job waiting for
 * ever.  Caller holds the lock. */
static pool_node *next_runnable(cf_exec_pool *p)
{
    int offered = 0;
    for (int g = 0; g < p->ngroups; g++)
        p->cand[g] = NULL;
    for (pool_node *n = p->head; n && offered < p->ngroups; n = n->next) {
        int g = n->group;
        if (n->running || p->cand[g] || p->running_g[g] >= p->cap[g] || key_blocked(p, n))
            continue;
        p->cand[g] = fit(p, n);
        p->offer_order[offered++] = g;
    }
    pool_node *best = NULL;
    int waiting = -1; /* the least served group whose job waits for the budget */
    for (int i = 0; i < offered; i++) {
        int g = p->offer_order[i];
        if (p->cand[g] == &waits_for_own)
            continue;
        if (p->cand[g] == &waits_for_budget) {
            if (waiting < 0 || fewer_for_weight(p, g, waiting))
                waiting = g;
        } else if (!best || fewer_for_weight(p, g, best->group)) {
            best = p->cand[g]; /* strictly fewer: on a tie the earlier stays */
        }
    }
    if (best && waiting >= 0 && !fewer_for_weight(p, best->group, waiting))
        return NULL; /* drain for the waiting job */
    return best;
}

static void unlink_node(cf_exec_pool *p, pool_node *node)
{
    pool_node *prev = NULL;
    for (pool_node **pp = &p->head; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp == node) {
            *pp = node->next;
            if (p->tail == node)
                p->tail = prev;
            return;
        }
    }
}

static void node_free(pool_node *n)
{
    free(n->key);
    free(n);
}

static void *slot_main(void *argp)
{
    slot_arg *sa = argp;
    cf_exec_pool *p = sa->pool;
    int slot = sa->slot;
    free(sa);

    pthread_mutex_lock(&p->lock);
    for (;;) {
        pool_node *node = NULL;
        while (!p->stopping && !(node = next_runnable(p)))
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->stopping)
            break;
        node->running = true;
        cf_pool_job *job = node->job;
        node->job = NULL; /* handed over: may be freed before run() returns */
        p->queued--;
        p->running++;
        p->running_g[node->group]++;
        for (int r = 0; r < CF_POOL_NRESOURCES; r++) {
            p->reserved[r] += node->cost[r];
            p->reserved_g[node->group][r] += node->cost[r];
        }
        pthread_mutex_unlock(&p->lock);

        p->run(job, slot, p->arg);

        pthread_mutex_lock(&p->lock);
        p->running_g[node->group]--;
        for (int r = 0; r < CF_POOL_NRESOURCES; r++) {
            p->reserved[r] -= node->cost[r];
            p->reserved_g[node->group][r] -= node->cost[r];
        }
        unlink_node(p, node);
        node_free(node);
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
    p->nslots = 0;
    int one_weight = 1, one_cap = slots;
    p->threads = calloc((size_t)slots, sizeof(pthread_t));
    if (!p->threads || cf_exec_pool_set_groups(p, 1, &one_weight, &one_cap) < 0) {
        free(p->threads);
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
    while (p->head) {
        pool_node *n = p->head;
        p->head = n->next;
        node_free(n);
    }
    p->tail = NULL;
    free(p->threads);
    free(p->weight);
    free(p->cap);
    free(p->running_g);
    free(p->cand);
    free(p->offer_order);
    free(p->reserved_g);
    free(p->group_max);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

int cf_exec_pool_set_groups(cf_exec_pool *p, int n, const int *weights, const int *caps)
{
    if (n < 1)
        return -1;
    int *w = calloc((size_t)n, sizeof(*w)), *c = calloc((size_t)n, sizeof(*c)), *r = calloc((size_t)n, sizeof(*r));
    pool_node **cand = calloc((size_t)n, sizeof(*cand));
    int *order = calloc((size_t)n, sizeof(*order));
    int64_t (*rg)[CF_POOL_NRESOURCES] = calloc((size_t)n, sizeof(*rg));
    int64_t (*gm)[CF_POOL_NRESOURCES] = calloc((size_t)n, sizeof(*gm));
    if (!w || !c || !r || !cand || !order || !rg || !gm) {
        free(gm);
        free(w);
        free(c);
        free(r);
        free(cand);
        free(order);
        free(rg);
        return -1;
    }
    for (int g = 0; g < n; g++) {
        w[g] = weights[g] > 0 ? weights[g] : 1;
        c[g] = caps[g] > 0 ? caps[g] : 1;
    }
    pthread_mutex_lock(&p->lock);
    free(p->weight);
    free(p->cap);
    free(p->running_g);
    free(p->cand);
    free(p->offer_order);
    free(p->reserved_g);
    free(p->group_max);
    p->group_max = gm;
    p->weight = w;
    p->cap = c;
    p->running_g = r;
    p->cand = cand;
    p->offer_order = order;
    p->reserved_g = rg;
    p->ngroups = n;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void cf_exec_pool_set_budget(cf_exec_pool *p, cf_pool_resource r, int64_t budget)
{
    pthread_mutex_lock(&p->lock);
    p->budget[r] = budget > 0 ? budget : 0;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

void cf_exec_pool_set_group_budget(cf_exec_pool *p, cf_pool_resource r, int group, int64_t group_max)
{
    pthread_mutex_lock(&p->lock);
    for (int g = 0; g < p->ngroups; g++)
        if (group < 0 || g == group)
            p->group_max[g][r] = group_max > 0 ? group_max : 0;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

int64_t cf_exec_pool_reserved(cf_exec_pool *p, cf_pool_resource r)
{
    pthread_mutex_lock(&p->lock);
    int64_t v = p->reserved[r];
    pthread_mutex_unlock(&p->lock);
    return v;
}

size_t cf_exec_pool_group_running(cf_exec_pool *p, int group)
{
    pthread_mutex_lock(&p->lock);
    size_t n = group >= 0 && group < p->ngroups ? (size_t)p->running_g[group] : 0;
    pthread_mutex_unlock(&p->lock);
    return n;
}

int cf_exec_pool_submit(cf_exec_pool *p, cf_pool_job *job)
{
    pool_node *n = calloc(1, sizeof(*n));
    if (!n)
        return -1;
    if (job->key && job->key[0] && !(n->key = strdup(job->key))) {
        free(n);
        return -1;
    }
    n->job = job;
    n->partition = job->partition;
    n->group = job->group >= 0 && job->group < p->ngroups ? job->group : 0;
    for (int r = 0; r < CF_POOL_NRESOURCES; r++)
        n->cost[r] = job->cost[r] > 0 ? job->cost[r] : 0;
    job->next = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->tail)
        p->tail->next = n;
    else
        p->head = n;
    p->tail = n;
    p->queued++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

size_t cf_exec_pool_pending(cf_exec_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->queued + p->running;
    pthread_mutex_unlock(&p->lock);
    return n;
}

size_t cf_exec_pool_queued(cf_exec_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->queued;
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

cf_pool_job *cf_exec_pool_drop_queued_if(cf_exec_pool *p, cf_pool_job_pred pred, void *arg)
{
    cf_pool_job *dropped = NULL, **tail = &dropped;
    pthread_mutex_lock(&p->lock);
    pool_node **pp = &p->head;
    pool_node *last = NULL;
    while (*pp) {
        pool_node *n = *pp;
        if (!n->running && pred(n->job, arg)) {
            *pp = n->next;
            n->job->next = NULL;
            *tail = n->job;
            tail = &n->job->next;
            p->queued--;
            node_free(n);
        } else {
            last = n;
            pp = &n->next;
        }
    }
    p->tail = last;
    /* A dropped job may have held others back (a keyed predecessor, or a
     * large job the running ones were draining for): wake the slots. */
    if (dropped)
        pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return dropped;
}

typedef struct partition_match {
    cf_pool_match_fn match;
    void *arg;
} partition_match;

static bool in_partitions(const cf_pool_job *job, void *arg)
{
    const partition_match *pm = arg;
    return !pm->match || pm->match(job->partition, pm->arg);
}

cf_pool_job *cf_exec_pool_drop_queued(cf_exec_pool *p, cf_pool_match_fn match, void *arg)
{
    partition_match pm = {match, arg};
    return cf_exec_pool_drop_queued_if(p, in_partitions, &pm);
}

size_t cf_exec_pool_count_running(cf_exec_pool *p, cf_pool_match_fn match, void *arg)
{
    size_t count = 0;
    pthread_mutex_lock(&p->lock);
    for (pool_node *n = p->head; n; n = n->next)
        if (n->running && (!match || match(n->partition, arg)))
            count++;
    pthread_mutex_unlock(&p->lock);
    return count;
}
