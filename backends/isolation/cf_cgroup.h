/* sandbox_cgroup: one cgroup per execution, on cgroup v1 or v2.
 *
 * A cf_cgroup_env says where cgroups live on this host (detected once at
 * backend create); cf_cgroup_new() makes the execution's cgroup and sets its
 * limits; the parent attaches the child (cf_cgroup_attach) before releasing
 * it to exec; afterwards cf_cgroup_stats() says whether the OOM killer
 * struck and how much memory was used at peak; cf_cgroup_kill_all() kills
 * every process in it; cf_cgroup_remove() deletes it.
 *
 * Layout: <mount>/<parent>/<exec-id> on v2 and
 * <mount>/<controller>/<parent>/<exec-id> on v1, for the memory, pids,
 * freezer (kill) and, when a cpu quota is asked, cpu controllers.  The
 * parent defaults to the worker's own cgroup plus "/codefleet", so limits
 * set on the worker (a container, a systemd unit) still bound its
 * executions.  On v2 the parent's ancestors up to the worker's own cgroup
 * must delegate the controllers (a systemd unit with Delegate=yes, a
 * Kubernetes pod's cgroup namespace); the worker first moves the processes
 * of its own cgroup into the leaf <own>/codefleet-worker (v2's "no
 * internal processes" rule), but other processes only when the cgroup is
 * provably its own (marked delegated, or a cgroup namespace's root).  A
 * tree it cannot use is reported, not forced: the backends then say memory
 * and pids are not enforced.
 *
 * Memory accounting includes tmpfs and shm pages written by the execution
 * (memcg charges shmem to the writer), so a private /tmp cannot be used to
 * escape the limit.
 */
#ifndef CF_SANDBOX_CGROUP_H
#define CF_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cf_error.h"

/* v2: the leaf the worker's own processes move to (see above). */
#define CF_CGROUP_WORKER_LEAF "codefleet-worker"

typedef enum cf_cgroup_version {
    CF_CGROUP_AUTO = 0, /* detect from the mount (opts only) */
    CF_CGROUP_V1,
    CF_CGROUP_V2,
} cf_cgroup_version;

typedef struct cf_cgroup_env_opts {
    cf_cgroup_version version; /* AUTO: detect */
    const char *mount_dir;     /* NULL: /sys/fs/cgroup */
    /* Parent of the executions' cgroups, relative to each hierarchy root
     * ("/codefleet").  NULL: the worker's own cgroup + "/codefleet". */
    const char *parent;
    const char *proc_self_cgroup; /* NULL: /proc/self/cgroup (tests point elsewhere) */
    /* Tests only: the tree is a plain directory; create interface files on
     * write and delete them on remove, never signal anything. */
    bool fake_fs;
    /* v1: also make a cpuacct cgroup per execution (exact cpu time); v2
     * always has cpu.stat. */
    bool cpuacct;
    /* A directory of one worker's own below the parent ("cfw-<ns>-<pid>-<start>"), where
     * the cgroups go instead: every execution, helper and zygote of that
     * worker then sits below it, so one limit bounds them all together
     * (cf_cgroup_env_bound), and workers sharing a parent never share a
     * bound.  NULL: none (the cgroups go in the parent). */
    const char *own_dir;
} cf_cgroup_env_opts;

typedef struct cf_cgroup_env cf_cgroup_env;

/* Detects the hierarchy and prepares the parent directory (created if
 * missing; on v2 the needed controllers are enabled in subtree_control of
 * the parent and of its ancestors below the worker's own cgroup).
 * opts may be NULL.  Fails with CF_E_UNSUPPORTED when no usable memory and
 * pids controllers are found. */
int cf_cgroup_env_new(const cf_cgroup_env_opts *opts, cf_cgroup_env **out, cf_error *err);
void cf_cgroup_env_destroy(cf_cgroup_env *env); /* NULL-safe */

cf_cgroup_version cf_cgroup_env_version(const cf_cgroup_env *env);
/* The parent directory of the memory controller (v1) or the unified tree. */
const char *cf_cgroup_env_parent_dir(const cf_cgroup_env *env);
bool cf_cgroup_env_has_cpu(const cf_cgroup_env *env);
bool cf_cgroup_env_has_freezer(const cf_cgroup_env *env); /* v1 only; v2 uses cgroup.kill */

/* Removes leftover execution cgroups whose name starts with prefix ("" =
 * all) under the parent, killing what still runs in them: call at start-up
 * to clean up after a crashed worker.  Returns the number removed, or -1
 * (err filled) if one could not be removed. */
int cf_cgroup_sweep(cf_cgroup_env *env, const char *prefix, cf_error *err);

/* With own_dir: limits what every cgroup below it may use together
 * (memory, with no swap on top where the kernel accounts swap; pids), so
 * that no mix of executions,
 * helpers and zygotes takes the host's memory or pids, whatever their own
 * limits add up to.  0 leaves that limit as it is.  Without own_dir:
 * CF_E_INVALID (a shared parent would be bounded for every worker). */
int cf_cgroup_env_bound(cf_cgroup_env *env, int64_t memory_bytes, int64_t pids_max, cf_error *err);

/* What everything below own_dir (or the parent) uses now: memory in bytes
 * (page cache and tmpfs included) and processes; -1 when unknown. */
void cf_cgroup_env_usage(const cf_cgroup_env *env, int64_t *memory_bytes, int64_t *pids);

/* Removes the own_dirs next to this env's own one (name starting with
 * prefix) for which dead(name, arg) says their worker is gone: kills what
 * still runs below them, removes their cgroups, then them.  Never touches
 * this env's own.  Returns how many went, or -1 (err filled) when one
 * could not be removed. */
int cf_cgroup_sweep_own_dirs(cf_cgroup_env *env, const char *prefix, bool (*dead)(const char *name, void *arg),
                             void *arg, cf_error *err);

/* Removes this env's own_dir, once the cgroups below it are gone
 * (best-effort: what is left stays for the next start's sweep). */
void cf_cgroup_env_remove_own(cf_cgroup_env *env);

typedef struct cf_cgroup_limits {
    int64_t memory_bytes;  /* 0: none; also caps swap at 0 extra */
    int64_t pids_max;      /* 0: none */
    int64_t cpu_quota_us;  /* 0: none; CPU time allowed per period */
    int64_t cpu_period_us; /* 0: 100000 */
} cf_cgroup_limits;

typedef struct cf_cgroup cf_cgroup;

/* Creates the cgroup of one execution.  name: printable, no '/', no
 * leading '.', at most 128 bytes.  An existing cgroup of that name is a
 * conflict (CF_E_CONFLICT), never reused.  env must outlive the cgroup. */
int cf_cgroup_new(cf_cgroup_env *env, const char *name, const cf_cgroup_limits *lim, cf_cgroup **out,
                  cf_error *err);

/* Changes the limits of an existing cgroup so one cgroup can serve many
 * executions (one per slot): only values that differ from what is set are
 * written.  Lowering memory below what the cgroup holds may fail (EBUSY on
 * v1). */
int cf_cgroup_set_limits(cf_cgroup *cg, const cf_cgroup_limits *lim, cf_error *err);

/* Cumulative counters, for per-execution deltas on a reused cgroup:
 * processes killed by the OOM killer, and cpu time (v1 cpuacct, v2
 * cpu.stat).  -1 when the kernel does not say. */
int64_t cf_cgroup_oom_kills(cf_cgroup *cg);
int64_t cf_cgroup_cpu_usage_us(cf_cgroup *cg);
/* Whether cpu accounting is available (v2, or v1 cpuacct mounted). */
bool cf_cgroup_env_has_cpuacct(const cf_cgroup_env *env);

/* Per-execution memory peak on a reused cgroup.  cf_cgroup_peak_reset
 * starts a new peak (v1: memory.max_usage_in_bytes reset to the current
 * usage; v2: memory.peak reopened and reset through that fd, which needs
 * kernel 6.12+); 0 when it worked, -1 otherwise.  cf_cgroup_memory_peak
 * says the peak since (bytes, incl. tmpfs/shm and page cache charged to
 * the cgroup), -1 when unknown.  cf_cgroup_env_has_peak says whether this
 * host can do it at all (for capability notes). */
bool cf_cgroup_env_has_peak(const cf_cgroup_env *env);
int cf_cgroup_peak_reset(cf_cgroup *cg);
int64_t cf_cgroup_memory_peak(cf_cgroup *cg);

/* v1 only: opens (O_WRONLY|O_CLOEXEC) the "tasks" file of each of the
 * cgroup's controllers into fds (at most max).  A single-threaded child
 * that writes "0" to each (cf_cgroup_join_self) moves itself without the
 * global threadgroup lock a write to cgroup.procs takes (one RCU grace
 * period, milliseconds, per attach).  The fds are >= 10 (the runner's
 * child owns 0..3).  Returns the number of fds, 0 on v2
 * (use cf_cgroup_attach there), -1 on error.  The caller closes them. */
int cf_cgroup_join_fds(cf_cgroup *cg, int *fds, int max, cf_error *err);

/* Child side, async-signal-safe: writes "0" to each fd.  0 or -1 (errno). */
int cf_cgroup_join_self(const int *fds, int n);

/* v2: whether children can be created in a cgroup (clone3 with
 * CLONE_INTO_CGROUP), probed at env creation: false before kernel 5.7
 * (then the parent attaches). */
bool cf_cgroup_env_clone_into(const cf_cgroup_env *env);
/* v2: whether this kernel kills a child created in a cgroup that
 * cgroup.kill was used on before (seen on 6.12.95 and 6.18, not on 6.1):
 * such a cgroup gives no directory fd any more (cf_cgroup_dir_fd), and a
 * caller that reuses cgroups replaces it instead (cf_cgroup_fresh_needed). */
bool cf_cgroup_env_kill_taints(const cf_cgroup_env *env);
bool cf_cgroup_fresh_needed(const cf_cgroup *cg);

/* v2: a directory fd of the cgroup (O_RDONLY|O_DIRECTORY|O_CLOEXEC),
 * owned by cg and closed with it, for clone3's CLONE_INTO_CGROUP; -1 on v1,
 * where cf_cgroup_env_clone_into is false, or when it cannot be opened:
 * attach instead. */
int cf_cgroup_dir_fd(cf_cgroup *cg);

/* Moves pid (a whole process) into the cgroup.  For parent_setup. */
int cf_cgroup_attach(cf_cgroup *cg, pid_t pid, cf_error *err);

typedef struct cf_cgroup_stats {
    int64_t oom_kills;          /* processes killed by the OOM killer in this cgroup */
    bool memory_limit_hit;      /* the limit was reached at least once (v1 failcnt, v2 max events) */
    int64_t memory_peak_bytes;  /* -1 when the kernel does not say */
    int64_t memory_current_bytes;
    int64_t pids_current;       /* -1 when unknown */
    int64_t cpu_usage_us;       /* cumulative cpu time of the cgroup, -1 when unknown */
} cf_cgroup_stats;

int cf_cgroup_stats_read(cf_cgroup *cg, cf_cgroup_stats *st, cf_error *err);

/* Kills every process of the cgroup and waits (briefly, bounded) until it
 * is empty.  Safe to call from any thread of the parent; fits the runner's
 * kill_all hook via cf_cgroup_kill_all_hook(pid, cg).  Returns 0 when the
 * cgroup is empty, -1 otherwise. */
int cf_cgroup_kill_all(cf_cgroup *cg);
void cf_cgroup_kill_all_hook(pid_t pid, void *cg);

/* Number of processes in the cgroup, -1 on error. */
int cf_cgroup_nprocs(cf_cgroup *cg);

/* Kills what is left, removes the directories (retrying while the kernel
 * finishes the last exits).  Idempotent. */
int cf_cgroup_remove(cf_cgroup *cg, cf_error *err);

/* Best-effort remove, then frees.  NULL-safe. */
void cf_cgroup_destroy(cf_cgroup *cg);

/* The directory of the cgroup in the memory (v1) / unified (v2) tree. */
const char *cf_cgroup_path(const cf_cgroup *cg);

#endif
