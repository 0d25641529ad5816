/* budget.c: the worker's memory budget for executions (issue 30 part 3).
 *
 * Every execution reserves its memory limit in the exec pool before it
 * starts, and the pool starts nothing that would take the sum past the
 * budget: the limits the worker promises never add up to more memory than
 * it has, so no mix of requests can make the host (or the pod) run out.
 * The budget is memory-budget when set; otherwise three quarters of the
 * memory the worker may use (its cgroup's limit, or the host's memory),
 * the rest left to the worker, its helpers, the page cache and, on a
 * shared host, the broker and Redis. */
#include "worker_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The smallest memory limit on the worker's own cgroup and its ancestors
 * (v2, or v1's memory hierarchy), -1 when none. */
static int64_t cgroup_memory_limit(void)
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
        bool v1mem = !v2 && strstr(a + 1, "memory") && strstr(a + 1, "memory") < b;
        if (!v2 && !v1mem)
            continue;
        char rel[4096];
        cf_strlcpy(rel, b + 1, sizeof(rel));
        for (;;) {
            snprintf(path, sizeof(path), v2 ? "/sys/fs/cgroup%s/memory.max" : "/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
                     strcmp(rel, "/") == 0 ? "" : rel);
            int64_t v = read_limit(path);
            if (v > 0 && (best < 0 || v < best))
                best = v;
            char *slash = strrchr(rel, '/');
            if (!slash || slash == rel)
                break;
            *slash = '\0';
        }
    }
    fclose(f);
    return best;
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

int64_t budget_memory(const cf_worker_config *cfg, char *why, size_t cap)
{
    if (cfg->memory_budget_bytes > 0) {
        snprintf(why, cap, "memory-budget");
        return cfg->memory_budget_bytes;
    }
    int64_t host = host_memory(), cg = cgroup_memory_limit();
    int64_t have = cg > 0 && (host < 0 || cg < host) ? cg : host;
    if (have <= 0) {
        snprintf(why, cap, "unknown (no cgroup limit, no /proc/meminfo): not enforced");
        return 0;
    }
    snprintf(why, cap, "3/4 of the %s's %" PRId64 " MiB", have == cg ? "cgroup limit" : "host memory",
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
