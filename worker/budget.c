/* budget.c: the worker's memory and process budgets for executions (issue
 * 30 part 3).
 *
 * Every execution reserves its memory limit and its pids bound in the exec
 * pool before it starts, and the pool starts nothing that would take a sum
 * past its budget: the limits the worker promises never add up to more
 * memory or processes than it has, so no mix of requests can make the host
 * (or the pod) run out, nor one tenant's executions keep another's from
 * starting.  The process budget is children-pids less an eighth (below).
 * The budget is memory-budget when set; otherwise three quarters of the
 * memory the worker may use (its cgroup's limit, or the host's memory),
 * the rest left to the worker, its helpers, the page cache and, on a
 * shared host, the broker and Redis.
 *
 * The budget bounds what the executions are promised; the children's
 * cgroup bounds what everything the worker starts actually uses.  Every
 * backend makes its cgroups (executions, embedded-runtime helpers, Python
 * zygotes) below one directory of the worker's own, cfw-<ns>-<pid>-<start> below
 * cgroup-root, which is given children-memory and children-pids: helpers'
 * and zygotes' own memory, the tmpfs pages of work directories and any
 * mistake in the sums above stay inside it, and the kernel reclaims or
 * OOM-kills inside it, never on the rest of the host (Kafka, Redis). */
#include "worker_int.h"

#include "cf_cgroup.h"
#include "cf_instance.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_util.h"

#define LOG_SUB "worker"
#define MIB (1024LL * 1024)

/* A number in a file (cgroup limits: "max" or bytes), -1 when absent or
 * unlimited. */
static int64_t read_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64] = "";
    bool ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    if (!ok || strncmp(buf, "max", 3) == 0)
        return -1;
    long long v = strtoll(buf, NULL, 10);
    /* v1 says "unlimited" with a page-rounded LLONG_MAX. */
    return v > 0 && v < (1LL << 60) ? (int64_t)v : -1;
}

/* The lowest limit on the worker's own cgroup and its ancestors (v2: the
 * file v2_file; v1: v1_file in the hierarchy of controller v1_ctrl), -1
 * when none. */
static int64_t cgroup_limit(const char *v1_ctrl, const char *v1_file, const char *v2_file)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return -1;
    char line[4096], path[4200];
    int64_t best = -1;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!a || !b)
            continue;
        bool v2 = a + 1 == b;
        const char *ctl = v2 ? NULL : strstr(a + 1, v1_ctrl);
        if (!v2 && !(ctl && ctl < b))
            continue;
        char rel[4096];
        cf_strlcpy(rel, b + 1, sizeof(rel));
        for (;;) {
            const char *at = strcmp(rel, "/") == 0 ? "" : rel;
            if (v2)
                snprintf(path, sizeof(path), "/sys/fs/cgroup%s/%s", at, v2_file);
            else
                snprintf(path, sizeof(path), "/sys/fs/cgroup/%s%s/%s", v1_ctrl, at, v1_file);
            int64_t v = read_limit(path);
            if (v > 0 && (best < 0 || v < best))
                best = v;
            char *slash = strrchr(rel, '/');
            if (!slash || strcmp(rel, "/") == 0)
                break;
            /* Up to the mount's root too ("/": a container's own cgroup
             * where no cgroup namespace hides the host's path). */
            slash[slash == rel ? 1 : 0] = '\0';
        }
    }
    fclose(f);
    return best;
}

static int64_t cgroup_memory_limit(void)
{
    return cgroup_limit("memory", "memory.limit_in_bytes", "memory.max");
}

static int64_t host_memory(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb > 0 ? (int64_t)kb * 1024 : -1;
}

/* The memory the worker may use: its cgroup's limit, or the host's memory
 * when that is lower or there is none (-1: unknown); *from_cgroup says
 * which. */
static int64_t memory_have(bool *from_cgroup)
{
    int64_t host = host_memory(), cg = cgroup_memory_limit();
    *from_cgroup = cg > 0 && (host < 0 || cg < host);
    return *from_cgroup ? cg : host;
}

int64_t budget_memory(const cf_worker_config *cfg, char *why, size_t cap)
{
    if (cfg->memory_budget_bytes > 0) {
        snprintf(why, cap, "memory-budget");
        return cfg->memory_budget_bytes;
    }
    bool from_cg;
    int64_t have = memory_have(&from_cg);
    if (have <= 0) {
        snprintf(why, cap, "unknown (no cgroup limit, no /proc/meminfo): not enforced");
        return 0;
    }
    snprintf(why, cap, "3/4 of the %s's %" PRId64 " MiB", from_cg ? "cgroup limit" : "host memory",
             (int64_t)(have / MIB));
    return have / 4 * 3;
}

int64_t budget_cost(const cf_worker *w, const cf_request *req, const char **what)
{
    /* A request without a memory limit gets the backend's default one
     * (sandbox-memory; the process backend sets none, and is charged as
     * if it did). */
    const cf_policy *pol = &req->policy;
    int64_t run = pol->memory_bytes > 0 ? pol->memory_bytes : w->cfg->sandbox_memory_bytes;
    *what = pol->memory_bytes > 0 ? "its memory limit (policy.memory_bytes, or the profile's default-memory)"
                                  : "sandbox-memory (the default limit)";
    /* A compiled language's compile step runs in the same slot before the
     * program, under its own limit (compile-memory, which a request may
     * only lower): the slot holds the larger of the two. */
    if (cf_language_compiled(req->language)) {
        int64_t compile = w->cfg->compile_memory_bytes;
        if (pol->compile_memory_bytes > 0 && pol->compile_memory_bytes < compile)
            compile = pol->compile_memory_bytes;
        if (compile > run) {
            *what = "its compile step's memory (compile-memory, or policy.compile_memory_bytes)";
            return compile;
        }
    }
    return run;
}

int64_t budget_pids_cost(const cf_worker *w, const cf_backend *b, const cf_request *req, const cf_profile *prof,
                         const char **what)
{
    *what = "its processes (policy.max_processes, or its profile's max-processes, or the backend's default)";
    if (!b || !b->ops->pids_bound)
        return 0;
    int64_t run = b->ops->pids_bound(b->state, &req->policy);
    if (!cf_language_compiled(req->language) || !(b->caps.controls & CF_CTL_MAX_PROCESSES))
        return run;
    /* The compile step's bound: compile-processes, within the profile's
     * max-processes (languages/pipeline.c, compile_policy), no network. */
    cf_policy cp = req->policy;
    cp.max_processes = w->cfg->compile_processes;
    if (prof && prof->max_processes > 0 && prof->max_processes < cp.max_processes)
        cp.max_processes = prof->max_processes;
    cp.network = CF_NET_DISABLED;
    int64_t compile = b->ops->pids_bound(b->state, &cp);
    if (compile <= run)
        return run;
    *what = "its compile step's processes (compile-processes, within its profile's max-processes)";
    return compile;
}

#define CHILDREN_PREFIX "cfw-"
/* Half of what the kernel allows in all (pid_max, threads-max), and at
 * most seven eighths of the worker's own cgroup's pids limit (a pod's or
 * a container's: the children count against it too, and the worker's own
 * threads need the rest). */
static int64_t default_children_pids(void)
{
    int64_t cg = cgroup_limit("pids", "pids.max", "pids.max");
    int64_t lowest = -1;
    static const char *const files[] = {"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        FILE *f = fopen(files[i], "r");
        long long v = 0;
        if (f && fscanf(f, "%lld", &v) == 1 && v > 0 && (lowest < 0 || v < lowest))
            lowest = v;
        if (f)
            fclose(f);
    }
    int64_t half = lowest > 0 ? lowest / 2 : 0;
    if (cg > 0 && (half <= 0 || cg - cg / 8 < half))
        return cg - cg / 8 > 1 ? cg - cg / 8 : 1;
    return half;
}

/* This pid namespace's inode: pids are only comparable within one. */
static unsigned long long pid_ns_ino(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* A process's start time (clock ticks since boot); false when it cannot
 * be read (gone, or hidden: hidepid). */
static bool start_ticks(pid_t pid, unsigned long long *ticks)
{
    unsigned long long v[23];
    if (cf_proc_stat(pid, v, 23) < 22)
        return false;
    *ticks = v[22];
    return true;
}

/* Whether a directory of the parent is a dead worker's of this pid
 * namespace: cfw-<ns>-<pid>-<start> whose pid is gone, or is another
 * process now (pid reused).  A pid whose start cannot be read (hidden by
 * hidepid) counts as alive.  Another namespace's never: its pids mean
 * nothing here (a container's worker is often pid 1).  Cgroups that the
 * backends left in the parent before cfw- (cfsb-, cfct-, cfem-) are not
 * judged: their names carry no pid namespace. */
static bool children_dir_dead(const char *name, void *arg)
{
    unsigned long long ns = *(const unsigned long long *)arg, dns = 0, start = 0, now = 0;
    long pid = 0;
    int used = 0;
    if (strncmp(name, CHILDREN_PREFIX, strlen(CHILDREN_PREFIX)) != 0)
        return false;
    if (sscanf(name + strlen(CHILDREN_PREFIX), "%llu-%ld-%llu%n", &dns, &pid, &start, &used) != 3 ||
        name[strlen(CHILDREN_PREFIX) + (size_t)used] != '\0' || dns != ns || pid <= 0)
        return false;
    if (cf_instance_pid_gone(pid))
        return true;
    return start_ticks((pid_t)pid, &now) && now != start;
}

static void children_source(void *arg, cf_observe_children *out)
{
    const cf_worker *w = arg;
    budget_children_usage(w, &out->memory_bytes, &out->pids);
    out->memory_max = w->children_memory;
    out->pids_max = w->children_pids;
}

void budget_children_setup(cf_worker *w)
{
    const cf_worker_config *cfg = w->cfg;
    unsigned long long ns = pid_ns_ino(), started = 0;
    (void)start_ticks(getpid(), &started);
    snprintf(w->children_dir, sizeof(w->children_dir), CHILDREN_PREFIX "%llu-%ld-%llu", ns, (long)getpid(), started);

    char why[160];
    int64_t budget = budget_memory(cfg, why, sizeof(why));
    bool from_cg;
    int64_t have = memory_have(&from_cg);
    int64_t mem = cfg->children_memory_bytes;
    const char *from = "children-memory";
    if (mem <= 0 && budget > 0) {
        mem = budget + budget / 8;
        from = "an eighth over the memory budget";
        if (have > 0 && mem > have / 8 * 7) {
            mem = have / 8 * 7;
            from = from_cg ? "7/8 of the cgroup limit" : "7/8 of the host's memory";
        }
    }
    int64_t pids = cfg->children_pids > 0 ? cfg->children_pids : default_children_pids();

    /* The same controllers as the backends (cpuacct too), so that sweeping
     * and removing reach every copy of the directory. */
    cf_cgroup_env_opts o = {.own_dir = w->children_dir, .parent = w->bcfg.cgroup_root, .cpuacct = true};
    cf_error err;
    cf_error_clear(&err);
    if (cf_cgroup_env_new(&o, &w->children_cg, &err) < 0) {
        /* The backends then use the parent itself, as before cfw-: a
         * directory no one would sweep or bound is worse. */
        cf_log_warn(LOG_SUB, "the executions, helpers and zygotes are not bounded together (%s): each has "
                    "only its own limits", err.msg);
        goto publish;
    }
    w->bcfg.cgroup_own_dir = w->children_dir;
    int swept = cf_cgroup_sweep_own_dirs(w->children_cg, "", children_dir_dead, &ns, &err);
    if (swept > 0)
        cf_log_warn(LOG_SUB, "swept %d cgroup director%s of dead workers, with what still ran in them", swept,
                    swept == 1 ? "y" : "ies");
    else if (swept < 0)
        cf_log_warn(LOG_SUB, "%s", err.msg);
    cf_error_clear(&err);
    if (cf_cgroup_env_bound(w->children_cg, mem, pids, &err) < 0) {
        cf_log_warn(LOG_SUB, "the executions, helpers and zygotes are not bounded together: %s", err.msg);
        goto publish;
    }
    w->children_memory = mem;
    w->children_pids = pids;
    w->bcfg.children_bounded = mem > 0;
    if (mem > 0 && budget > mem)
        cf_log_warn(LOG_SUB, "memory-budget (%" PRId64 " MiB) is above children-memory (%" PRId64 " MiB): executions "
                    "may be OOM-killed by the worker's bound before their own limits", (int64_t)(budget / MIB), (int64_t)(mem / MIB));
    if (mem > 0)
        cf_log_info(LOG_SUB, "the executions, helpers and zygotes together: at most %" PRId64 " MiB (%s) and %" PRId64
                    " processes, in %s", (int64_t)(mem / MIB), from, pids, w->children_dir);
    else
        cf_log_warn(LOG_SUB, "the executions, helpers and zygotes together: memory not bounded (no memory figure for "
                    "this host), at most %" PRId64 " processes", pids);
publish:
    /* Last: the scrape thread runs already, and reads what is set above
     * (-1: unknown, 0: no bound). */
    cf_observe_set_children_source(w->obs, children_source, w);
}

void budget_children_usage(const cf_worker *w, int64_t *memory_bytes, int64_t *pids)
{
    *memory_bytes = *pids = -1;
    if (w->children_cg)
        cf_cgroup_env_usage(w->children_cg, memory_bytes, pids);
}

/* After cf_observe_destroy: a scrape in flight may still read the usage. */
void budget_children_teardown(cf_worker *w)
{
    cf_cgroup_env_remove_own(w->children_cg);
    cf_cgroup_env_destroy(w->children_cg);
    w->children_cg = NULL;
}

/* Whether profile p's requests may run on backend `name` (no list: any). */
static bool profile_uses(const cf_profile *p, const char *name)
{
    for (size_t i = 0; i < p->n_backends; i++)
        if (strcmp(p->backend_names[i], name) == 0)
            return true;
    return p->n_backends == 0;
}

/* The most processes a request of profile p that asks for none reserves
 * (its max-processes, else the backend's default, on the backends it may
 * use), and in *compile its compile step's when a backend compiles. */
static int64_t pids_default(const cf_worker *w, const cf_profile *p, int64_t *compile)
{
    int64_t most = 0;
    *compile = 0;
    for (size_t i = 0; i < cf_backend_set_count(w->backends); i++) {
        const cf_backend *b = cf_backend_set_get(w->backends, i);
        if (!b->ops->pids_bound || !profile_uses(p, b->ops->name))
            continue;
        cf_request none = {.language = CF_LANG_SHELL, .policy = {.max_processes = p->max_processes}};
        const char *what;
        int64_t d = b->ops->pids_bound(b->state, &none.policy);
        most = d > most ? d : most;
        none.language = CF_LANG_C;
        int64_t c = budget_pids_cost(w, b, &none, p, &what);
        *compile = c > *compile ? c : *compile;
    }
    return most;
}

void budget_pids_setup(cf_worker *w)
{
    if (w->children_pids <= 0) {
        cf_log_info(LOG_SUB, "process budget for executions: none (no children-pids bound on this host)");
        return;
    }
    /* Kept back for what no execution reserves: the helpers, the zygotes
     * and their threads.  An eighth (as children-memory's over the memory
     * budget), at least 8, and at least 4 per slot (a slot's zygote and
     * helper hold a process or two each while idle). */
    int64_t keep = w->children_pids / 8;
    keep = keep > 8 ? keep : 8;
    keep = keep > 4 * (int64_t)w->nslots ? keep : 4 * (int64_t)w->nslots;
    if (4 * (int64_t)w->nslots > w->children_pids / 2) {
        keep = keep < w->children_pids / 2 ? keep : w->children_pids / 2;
        cf_log_warn(LOG_SUB, "children-pids %" PRId64 " leaves the %d slots' helpers and zygotes less than 4 "
                    "processes each: raise children-pids", w->children_pids, w->nslots);
    }
    w->pids_budget = w->children_pids > keep ? w->children_pids - keep : 1;
    cf_exec_pool_set_budget(w->pool, CF_POOL_PIDS, w->pids_budget);
    cf_log_info(LOG_SUB, "process budget for executions: %" PRId64 " of children-pids %" PRId64 " (%" PRId64
                " kept for helpers and zygotes)", w->pids_budget, w->children_pids, w->children_pids - w->pids_budget);
    /* Each profile's share, as for memory: the reserve slots keep what a
     * request of another profile that asks for nothing holds (the most of
     * theirs that can fit at all: larger ones are rejected anyway), so one
     * tenant's runs can never hold the processes another's next request
     * needs. */
    int64_t reserve = w->nslots - (int)w->cfg->slots;
    int64_t dflt[CF_PROFILE_MAX] = {0}, compile[CF_PROFILE_MAX] = {0};
    size_t n = w->ntopics < CF_PROFILE_MAX ? w->ntopics : CF_PROFILE_MAX;
    for (size_t t = 0; t < n; t++)
        dflt[t] = pids_default(w, w->topics[t].profile, &compile[t]);
    for (size_t t = 0; t < n; t++) {
        int64_t others = 0;
        for (size_t u = 0; u < n; u++)
            if (u != t && dflt[u] <= w->pids_budget && dflt[u] > others)
                others = dflt[u];
        const char *name = w->topics[t].profile->name;
        if (reserve > 0 && others > 0 && reserve * others < w->pids_budget) {
            w->topics[t].pids_share = w->pids_budget - reserve * others;
            cf_exec_pool_set_group_budget(w->pool, CF_POOL_PIDS, (int)t, w->topics[t].pids_share);
            cf_log_info(LOG_SUB, "profile '%s': its executions hold at most %" PRId64 " of them (the reserve slots "
                        "keep %" PRId64 " for the others)", name, w->topics[t].pids_share, reserve * others);
        } else if (reserve > 0 && others > 0) {
            cf_log_warn(LOG_SUB, "profile '%s': the process budget of %" PRId64 " is too small to keep the reserve "
                        "slots' %" PRId64 " for the other profiles; it may hold all of it", name, w->pids_budget,
                        reserve * others);
        }
        int64_t fits = w->topics[t].pids_share > 0 ? w->topics[t].pids_share : w->pids_budget;
        if (dflt[t] > fits)
            cf_log_warn(LOG_SUB, "profile '%s': a request asking no max_processes holds up to %" PRId64 " processes, "
                        "more than its %" PRId64 ": such requests are rejected; raise children-pids or lower its "
                        "max-processes or sandbox-pids", name, dflt[t], fits);
        if (compile[t] > dflt[t] && compile[t] > fits)
            cf_log_warn(LOG_SUB, "profile '%s': a compiled language's request holds %" PRId64 " processes for its "
                        "compile step (compile-processes), more than its %" PRId64 ": such requests are rejected; "
                        "raise children-pids or lower compile-processes", name, compile[t], fits);
        /* Not an error: executions then wait for each other's processes. */
        if (dflt[t] > 0 && dflt[t] <= fits && dflt[t] * (int64_t)w->cfg->slots > fits)
            cf_log_info(LOG_SUB, "profile '%s': %d requests of %" PRId64 " processes each (asking no max_processes) "
                        "do not fit its %" PRId64 " at once: fewer of them run at a time", name, (int)w->cfg->slots,
                        dflt[t], fits);
    }
    if (w->pids_budget < 2)
        cf_log_warn(LOG_SUB, "process budget of %" PRId64 ": no sandboxed execution fits (one holds at least 2); "
                    "raise children-pids", w->pids_budget);
}
