/* The `sandbox` backend: every execution in its own user, pid, mount, ipc,
 * uts, cgroup and (unless network is wanted) network namespaces, on a
 * private read-only root, with no capabilities, no_new_privs and a seccomp
 * filter, its memory and processes bounded by a cgroup.
 *
 * Built from sandbox_probe (what this host allows), sandbox_seccomp (the
 * filter, compiled once at create), sandbox_fs (the private root; one plan
 * per slot, its binds replaced per execution), sandbox_cgroup (one cgroup
 * per slot, reused: limits rewritten only when they change, OOM kills and
 * cpu time counted as deltas, the memory peak reset per execution) and
 * sandbox_exec (the runner hooks); the request handling is exec_common's.
 *
 * cpu_time is the execution's total CPU, from the cgroup's accounting
 * polled by the runner (cpu_usage_us hook), with RLIMIT_CPU a second past
 * it as a per-process backstop (soft = hard, so its SIGKILL acts even on a
 * program that handles SIGXCPU).
 *
 * pid 1 of the namespace is the runner's init (spec.init), the program its
 * child: signals it sends itself act as on a host, orphans are reaped, and
 * the program's own exit status or signal is reported.
 *
 * Per execution:
 *   <work_root>/cfsb-<pid>.<n>/s<slot>   a tmpfs mounted for this execution
 *                                        (size and inode capped), holding
 *     cf-XXXXXX  work/  -> /work (read-write, or read-only for workspace_ro)
 *     cf-XXXXXX  run/   -> /run/codefleet (read-only; out/ read-write)
 * then the runner, then collection, then the tmpfs is unmounted: whatever
 * the program left there goes with it.  The instance directory is a
 * private mount, so nothing of this propagates to other namespaces.
 *
 * Start-up sweep: instance directories and cgroups named cfsb-<pid>.* whose
 * worker process no longer exists are unmounted and removed (a crashed
 * worker's leftovers), a warning per dead instance; live workers' entries
 * are never touched.  (The worker's own mount namespace already took the
 * dead one's mounts with it: worker_main.c.)
 *
 * The program runs as uid/gid 1000 inside, mapped to run_uid_base + slot
 * outside (100000 + slot when run_uid_base is 0): never root on the host.
 */
#include "cf_backend.h"
#include "cf_log.h"
#include "cf_runner.h"
#include "cf_workdir.h"
#include "cf_exec.h"
#include "cf_cgroup.h"
#include "cf_sandbox_exec.h"
#include "cf_sandbox_fs.h"
#include "cf_instance.h"
#include "cf_net.h"
#include "cf_sandbox_probe.h"
#include "cf_seccomp.h"
#include "zygote_int.h"

#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define SB_PREFIX "cfsb-"
#define IN_ID 1000
#define DEFAULT_MEMORY (512LL << 20)
#define DEFAULT_PIDS 256
#define DEFAULT_TMP (64LL << 20)
#define DEFAULT_WORK (128LL << 20)
#define DEFAULT_INODES 16384
#define MIB (1024LL * 1024)

/* ---- the sandbox's own settings (its keys of the worker's configuration) ---- */

typedef struct sb_settings {
    bool warm;
    bool require_cgroups;
    bool zygote;
    bool zygote_exec;
    char *zygote_path;
    char *zygote_preload;
    int64_t zygote_memory_bytes;
    int64_t zygote_max_requests;
} sb_settings;

#define SOFF(f) offsetof(sb_settings, f)
static const cf_conf_prop sb_props[] = {
    {"sandbox-warm", CF_CONF_BOOL, SOFF(warm), 0, 0, "false", NULL,
     "Sandbox: each slot builds its next sandbox (namespaces, root, cgroup, work tmpfs) while idle, so a "
     "request only places its files and starts its program (about 1 ms less per execution).  Requests with "
     "network=enabled or fs_mode=paths always get one built for them.  Off by default: the waiting sandbox is a "
     "copy of the worker, and keeping one costs the busy worker about 0.75 ms of CPU per request (cross-CPU TLB "
     "flushes), which on a machine whose cores are all busy outweighs the gain (BENCHMARKS.md).", NULL},
    {"sandbox-require-cgroups", CF_CONF_BOOL, SOFF(require_cgroups), 0, 0, "false", NULL,
     "Sandbox: refuse to start without usable cgroups (a read-only /sys/fs/cgroup, a cgroup that is not "
     "delegated).  Otherwise the worker starts, requests asking for memory or max_processes are rejected, and "
     "every other execution runs without a memory or process cap of its own.", NULL},
    {"sandbox-zygote", CF_CONF_BOOL, SOFF(zygote), 0, 0, "true", NULL,
     "Sandbox: a Python interpreter per slot, started and initialised once inside the slot's confinement, "
     "forks a fresh child per Python execution (its own pid, mount, ipc, network and uts namespaces, work "
     "tmpfs, /tmp, cgroup, seccomp, no capabilities) instead of starting an interpreter: a few ms instead of "
     "tens.  Executions it cannot serve exactly as a cold start would (network=enabled, fs_mode=paths, an "
     "environment naming PYTHON*, LANG, LC_*, LD_*, GLIBC_*, MALLOC_*, OPENSSL_* or HOME, a work file named like a "
     "module it has loaded) take the other path; results say which (metadata.sandbox).", NULL},
    {"zygote-exec", CF_CONF_BOOL, SOFF(zygote_exec), 0, 0, "false", NULL,
     "Sandbox: the zygote also starts the other languages' programs (its fresh child execs them), so no "
     "sandbox is cloned from the worker at all.", NULL},
    {"zygote", CF_CONF_STRING, SOFF(zygote_path), 0, 1024, NULL, NULL,
     "Sandbox: the zygote program (absolute path); default: the codefleet-zygote installed with this worker "
     "(libexec/codefleet of its prefix; none if missing there), or for a worker run from its build tree the one "
     "built with it.  A build without python3-dev has none: sandbox-zygote then does nothing.", NULL},
    {"zygote-preload", CF_CONF_STRING, SOFF(zygote_preload), 0, 2000,
     "json,re,collections,itertools,functools,math,random,datetime,typing,dataclasses,decimal,fractions,"
     "statistics,string,heapq,bisect,copy,enum,pathlib,operator,hashlib,base64,struct,csv,textwrap,subprocess,"
     "tempfile,shutil",
     NULL,
     "Sandbox: standard modules the zygote imports at start (comma-separated); a program importing them finds "
     "them loaded.", NULL},
    {"zygote-memory", CF_CONF_SIZE, SOFF(zygote_memory_bytes), 32 * MIB, 64 * 1024 * MIB, "256MiB", NULL,
     "Sandbox: the memory cgroup of each slot's zygote (executions have their own).", NULL},
    {"zygote-max-requests", CF_CONF_INT, SOFF(zygote_max_requests), 1, 100000000, "200", NULL,
     "Sandbox: executions per zygote before it is replaced (while idle) by a fresh one: the executions of one "
     "zygote share its interpreter's hash seed, its address layout and its stack canary.", NULL},
};

static void sb_describe_helper(const cf_backend_config *cfg, char *buf, size_t cap);

const cf_backend_settings cf_sandbox_settings = {
    .family = "sandbox", .props = sb_props, .nprops = sizeof(sb_props) / sizeof(sb_props[0]),
    .size = sizeof(sb_settings), .describe_helper = sb_describe_helper};

static void sb_describe_helper(const cf_backend_config *cfg, char *buf, size_t cap)
{
    const sb_settings *ss = cf_backend_settings_of(cfg, &cf_sandbox_settings);
    char path[PATH_MAX] = "";
    if (ss->zygote)
        cf_backend_helper_path(cfg, ss->zygote_path, "codefleet-zygote", CF_DEFAULT_ZYGOTE, path, sizeof(path));
    snprintf(buf, cap, "zygote %s", !ss->zygote ? "(off)" : path[0] ? path : "(none)");
}
#define RUN_DIR "/run/codefleet"
#define RESOLV_NAME CF_INSTANCE_RESOLV_NAME

#define MAX_JOIN_FDS 8

/* A slot's warm sandbox, made by the slot's own preparer thread while the
 * slot is idle: a child cloned into its namespaces, in the slot's cgroup,
 * its private root built with work/ and run/ of a fresh tmpfs bound,
 * waiting in cf_run_prepare's barrier for the request.
 *   NONE -> BUILDING -> READY -> TAKEN (an execution runs in it) -> DIRTY
 *   (the preparer unmounts what the execution left, then builds again).
 * An execution holds `busy`; the preparer never builds while it is set, so
 * the cold path and the warm one never share the tmpfs or the cgroup. */
typedef enum { WARM_NONE, WARM_BUILDING, WARM_READY, WARM_TAKEN, WARM_DIRTY } warm_state;
#define WARM_MAX_FAILURES 3
/* After that many failures in a row the slot serves cold for this long,
 * then tries again. */
#define WARM_RETRY_US (30 * 1000000LL)
/* A waiting sandbox is a copy-on-write image of the worker from when it
 * was made: pages the worker writes since are duplicated.  Replaced when
 * this old, so that cost stays bounded on an idle slot. */
#define WARM_MAX_AGE_US (60 * 1000000LL)

typedef struct sb_warm {
    bool on;              /* a preparer thread runs for this slot */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    warm_state state;
    bool busy;
    bool stop;
    int failures;         /* consecutive failed builds; at the cap the slot is cold until retry_at */
    int64_t retry_at;     /* monotonic us */
    int64_t built_at;     /* monotonic us of the READY sandbox */
    char why[256];        /* the last failure */
    uint64_t served_warm, served_cold;
    /* the prepared sandbox: READY and TAKEN (and DIRTY: dirs, mounted) */
    cf_run_prep *prep;
    cf_exec_dirs dirs;
    bool mounted;
    cf_sandbox_exec sx;   /* the hooks' argument: the parent's copy (kill_all) */
} sb_warm;

typedef struct sb_slot {
    cf_cgroup *cg;        /* reused across executions of the slot */
    int join_fds[MAX_JOIN_FDS]; /* v1 tasks files of cg (the child joins itself) */
    int n_join;
    unsigned gen;         /* bumped when a cgroup had to be thrown away */
    cf_sandbox_fs *fs;    /* the fixed tree; binds set per execution */
    char mnt[PATH_MAX];   /* mount point of the per-execution tmpfs */
    bool mnt_made;
    sb_warm warm;
    cf_zygote *zyg;       /* the slot's Python zygote, NULL: none */
    struct sb_state *st;  /* for the preparer thread */
    int index;
} sb_slot;

typedef struct sb_state {
    cf_exec_base base;
    cf_sandbox_probe probe;
    cf_seccomp_prog *seccomp;
    cf_cgroup_env *cgenv; /* NULL: no usable cgroups */
    char tag[64];         /* cfsb-<pid>.<n> */
    char inst[PATH_MAX];  /* <work_root>/<tag> */
    char real_root[PATH_MAX];
    bool inst_bound;      /* private bind of inst onto itself */
    char resolv[PATH_MAX]; /* <inst>/resolv.conf naming slirp's DNS forwarder, "" when none */
    char slirp[PATH_MAX];  /* slirp4netns, "" when network=enabled is not offered */
    int slots;
    sb_slot *slot;
    int64_t uid_base;
    int64_t def_memory, def_pids, tmp_bytes, work_bytes, inodes;
    bool cpu_total;       /* cpu_time from the cgroup's accounting */
    bool cg_peak;         /* peak memory from the cgroup, reset per execution */
    const char *const *toolchain_dirs; /* cfg's (outlives the backend): bound read-only */
    int zygote_fd;        /* codefleet-zygote, opened at create; -1: no zygotes */
    bool zygote_exec;     /* zygotes also start non-Python programs */
} sb_state;

/* sb_cpu_used's argument: the slot's cgroup and its CPU count when the
 * execution started. */
typedef struct sb_cpu {
    cf_cgroup *cg;
    int64_t before;
} sb_cpu;

/* The runner's cpu_usage_us hook: CPU of the slot's cgroup since this
 * execution started (the cgroup is reused, its count is cumulative). */
static int64_t sb_cpu_used(pid_t pid, void *arg)
{
    (void)pid;
    const sb_cpu *c = arg;
    int64_t now = cf_cgroup_cpu_usage_us(c->cg);
    return now < 0 || now < c->before ? -1 : now - c->before;
}

/* What an execution is measured against: the slot's cgroup counts before
 * it ran (the cgroup is reused, its counts are cumulative). */
typedef struct sb_meter {
    int64_t oom_before;
    sb_cpu cpu;    /* cpu.before: -1 when unknown */
    bool peak_ok;  /* the cgroup's peak was reset for this execution */
} sb_meter;

/* cpu_time is the execution's total, from the cgroup: RLIMIT_CPU is per
 * process.  The rlimit stays as a backstop, hard = soft, a second past the
 * limit so the cgroup check fires first.  Without accounting: RLIMIT_CPU
 * alone, its SIGKILL at the limit.  Sets spec's cpu hook; returns the
 * rlimit in seconds (0: none). */
static long meter_cpu_limit(const sb_state *st, const cf_policy *pol, sb_meter *m, cf_run_spec *spec)
{
    if (pol->cpu_time_us <= 0)
        return 0;
    long secs = (long)((pol->cpu_time_us + 999999) / 1000000);
    if (!st->cpu_total || m->cpu.before < 0)
        return secs;
    spec->cpu_usage_us = sb_cpu_used;
    spec->cpu_usage_arg = &m->cpu;
    spec->cpu_limit_us = pol->cpu_time_us;
    return secs + 1;
}

/* After the run: every process of the execution is gone before anything
 * is read (the pid namespace died with its init; this is the check), then
 * the OOM kills, CPU and peak memory of this execution (shared memory and
 * tmpfs pages count: a process's RSS does not show them). */
static void meter_collect(cf_cgroup *cg, const sb_meter *m, cf_run_outcome *o, bool *oom, int64_t *cpu_us)
{
    *oom = false;
    *cpu_us = -1;
    if (!cg)
        return;
    cf_cgroup_kill_all(cg);
    *oom = cf_cgroup_oom_kills(cg) > m->oom_before;
    int64_t cpu_after = cf_cgroup_cpu_usage_us(cg);
    if (m->cpu.before >= 0 && cpu_after >= m->cpu.before)
        *cpu_us = cpu_after - m->cpu.before;
    int64_t peak = m->peak_ok ? cf_cgroup_memory_peak(cg) : -1;
    if (peak >= 0) {
        o->peak_rss_bytes = peak;
        o->peak_is_cgroups = true;
    }
}

static atomic_int instance_counter;

static int warm_start(struct sb_state *st, sb_slot *s, int index, cf_error *err);
static void warm_stop(sb_slot *s);

/* Whether host uid `uid` (a slot's run uid: no supplementary groups, no
 * capabilities on host files) may access an inode with mode bits `need`
 * (4 read, 2 write, 1 search).  The permission bits only: the child opens
 * the sources as that uid, and the kernel's check there is the one that
 * holds; this one gives the caller a clear reason before anything runs.
 * A run's gid is its uid (its user namespace maps both to the slot's id), hence
 * the group test against uid. */
static bool run_uid_may(const struct stat *sb, uid_t uid, unsigned need)
{
    unsigned bits = sb->st_uid == uid ? (sb->st_mode >> 6) & 7
                    : sb->st_gid == uid ? (sb->st_mode >> 3) & 7
                                        : sb->st_mode & 7;
    return (bits & need) == need;
}

/* ---- start-up sweep ---- */

static void sweep(sb_state *st, cf_instance_swept *swept)
{
    cf_instance_sweep_opts so = {.real_root = st->real_root, .cgenv = st->cgenv, .prefix = SB_PREFIX,
                                 .log_sub = "sandbox"};
    cf_instance_sweep(&so, swept);
}

/* ---- create / destroy ---- */

static void slot_drop_cgroup(sb_slot *s)
{
    while (s->n_join > 0)
        close(s->join_fds[--s->n_join]);
    cf_cgroup_destroy(s->cg);
    s->cg = NULL;
}

static void slot_release(sb_state *st, sb_slot *s)
{
    (void)st;
    slot_drop_cgroup(s);
    cf_sandbox_fs_destroy(s->fs);
    s->fs = NULL;
    if (s->mnt_made) {
        cf_instance_umount_below(s->mnt);
        rmdir(s->mnt);
        s->mnt_made = false;
    }
}

static void sb_destroy(void *state)
{
    sb_state *st = state;
    if (!st)
        return;
    for (int i = 0; st->slot && i < st->slots; i++)
        warm_stop(&st->slot[i]);
    for (int i = 0; st->slot && i < st->slots; i++) {
        cf_zygote_destroy(st->slot[i].zyg);
        st->slot[i].zyg = NULL;
    }
    for (int i = 0; st->slot && i < st->slots; i++)
        slot_release(st, &st->slot[i]);
    if (st->zygote_fd >= 0)
        close(st->zygote_fd);
    free(st->slot);
    if (st->inst[0])
        cf_instance_remove_dir(st->inst, NULL, NULL);
    cf_cgroup_env_destroy(st->cgenv);
    cf_seccomp_prog_destroy(st->seccomp);
    cf_exec_base_free(&st->base);
    free(st);
}

static int64_t or_default(int64_t v, int64_t def)
{
    return v > 0 ? v : def;
}

/* A zygote per slot when one is configured and can serve: it needs the
 * interpreter it stands for and cgroups (its executions' limits).  A
 * zygote that cannot be had is a note, not a failure: executions then
 * take the other paths. */
static int zygotes_start(sb_state *st, const cf_backend_config *cfg, const sb_settings *ss, cf_error *err)
{
    const char *why = NULL;
    char zygote_path[PATH_MAX] = "";
    if (ss->zygote)
        cf_backend_helper_path(cfg, ss->zygote_path, "codefleet-zygote", CF_DEFAULT_ZYGOTE, zygote_path,
                               sizeof(zygote_path));
    if (!zygote_path[0])
        return 0; /* off, or built without it: nothing to say */
    if (!st->base.python_path)
        why = "no Python interpreter configured";
    else if (!st->cgenv)
        why = "no usable cgroups";
    else if (zygote_path[0] != '/')
        why = "zygote path is not absolute";
    if (!why) {
        st->zygote_fd = open(zygote_path, O_PATH | O_CLOEXEC);
        if (st->zygote_fd < 0)
            why = "zygote program not found";
    }
    if (why) {
        cf_exec_notes_add(&st->base, "zygote NOT used (%s): Python starts an interpreter per execution", why);
        return 0;
    }
    st->zygote_exec = ss->zygote_exec;
    for (int i = 0; i < st->slots; i++) {
        cf_zygote_opts zo = {.slot = i, .tag = st->tag, .inst = st->inst, .cgenv = st->cgenv,
                             .seccomp = st->seccomp, .zygote_path = zygote_path, .zygote_fd = st->zygote_fd,
                             .python_path = st->base.python_path, .preload = ss->zygote_preload,
                             .exec_path = st->base.exec_path, .host_id = (uid_t)(st->uid_base + i),
                             .zygote_memory = ss->zygote_memory_bytes > 0 ? ss->zygote_memory_bytes : 256LL << 20,
                             .work_bytes = st->work_bytes, .tmp_bytes = st->tmp_bytes, .inodes = st->inodes,
                             .max_requests = ss->zygote_max_requests > 0 ? (int)ss->zygote_max_requests : 200,
                             .toolchain_dirs = st->toolchain_dirs};
        if (cf_zygote_new(&zo, &st->slot[i].zyg, err) < 0)
            return cf_error_wrap(err, "sandbox: slot %d", i);
    }
    cf_exec_notes_add(&st->base,
                      "zygote: each slot keeps a pre-initialised Python (%s) that forks a fresh, fully isolated "
                      "child per Python execution%s; executions it cannot serve as a cold start would take the "
                      "other path (metadata.sandbox says which)",
                      zygote_path, st->zygote_exec ? " and per other program (which it execs)" : "");
    return 0;
}

/* The slot count, run uids and default limits, from the worker's
 * configuration. */
static void sb_limits(sb_state *st, const cf_backend_config *cfg)
{
    st->base.exec_where = " inside the sandbox";
    st->slots = cfg->slots > 0 ? cfg->slots : 1;
    st->uid_base = cfg->run_uid_base > 0 ? cfg->run_uid_base : CF_RUN_UID_BASE_DEFAULT;
    st->def_memory = or_default(cfg->sandbox_memory_bytes, DEFAULT_MEMORY);
    st->def_pids = or_default(cfg->sandbox_pids_max, DEFAULT_PIDS);
    st->tmp_bytes = or_default(cfg->sandbox_tmp_bytes, DEFAULT_TMP);
    st->work_bytes = or_default(cfg->sandbox_work_bytes, DEFAULT_WORK);
    st->inodes = or_default(cfg->sandbox_inodes, DEFAULT_INODES);
    st->toolchain_dirs = cfg->toolchain_dirs;
}

/* The canonical work root, every directory down to it passable by the
 * run uids: the child opens its work directories as the slot's run uid. */
static int sb_check_work_root(sb_state *st, const cf_backend_config *cfg, cf_error *err)
{
    if (!realpath(st->base.work_root, st->real_root))
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox: work_root '%s'", st->base.work_root);
    char walk[PATH_MAX];
    cf_strlcpy(walk, st->real_root, sizeof(walk));
    uid_t first = (uid_t)(cfg->run_uid_base > 0 ? cfg->run_uid_base : CF_RUN_UID_BASE_DEFAULT);
    for (;;) {
        struct stat sb;
        if (stat(walk, &sb) < 0 || !run_uid_may(&sb, first, 1))
            return cf_error_set(err, CF_E_INVALID,
                                "sandbox: work_root '%s': '%s' does not let the run uids through (needs o+x, e.g. "
                                "mode 0711)",
                                st->real_root, walk);
        char *slash = strrchr(walk, '/');
        if (!slash || walk[1] == '\0')
            return 0; /* "/" checked */
        slash[slash == walk ? 1 : 0] = '\0';
    }
}

/* What this host allows, tried for real; matrix gets the probe's report
 * (a line per item).  Without every namespace and seccomp the backend is
 * not offered. */
static int sb_probe(sb_state *st, const cf_cgroup_env_opts *cgo, char *matrix, size_t msize, cf_error *err)
{
    if (cf_sandbox_probe_run(cgo, &st->probe, err) < 0)
        return -1;
    cf_sandbox_probe_describe(&st->probe, matrix, msize);
    if (!st->probe.userns || !st->probe.pidns || !st->probe.mountns || !st->probe.netns || !st->probe.ipcns ||
        !st->probe.utsns || !st->probe.seccomp) {
        for (char *p = matrix; *p; p++)
            if (*p == '\n')
                *p = ';';
        return cf_error_set(err, CF_E_UNSUPPORTED, "sandbox: this host cannot isolate executions (%s)", matrix);
    }
    return 0;
}

/* The cgroup environment when the probe found one; none is a failure
 * only under sandbox-require-cgroups. */
static int sb_cgroups(sb_state *st, const sb_settings *ss, const cf_cgroup_env_opts *cgo, cf_error *err)
{
    cf_error cgerr;
    cf_error_clear(&cgerr);
    if (st->probe.cgroup_version != 0) {
        if (cf_cgroup_env_new(cgo, &st->cgenv, &cgerr) < 0)
            st->cgenv = NULL; /* the probe said yes a moment ago; caps follow reality */
    }
    if (!st->cgenv && ss->require_cgroups) {
        /* INVALID, not UNSUPPORTED: the worker stops rather than start without the sandbox. */
        return cf_error_set(err, CF_E_INVALID, "sandbox: no usable cgroups (%s) and sandbox-require-cgroups is set",
                            cgerr.msg[0] ? cgerr.msg : st->probe.cgroup_note[0] ? st->probe.cgroup_note : "none found");
    }
    return 0;
}

/* This instance's directory, a private mount so the per-execution tmpfs
 * mounts below it never propagate to other namespaces. */
static int sb_make_inst(sb_state *st, cf_error *err)
{
    snprintf(st->tag, sizeof(st->tag), SB_PREFIX "%d.%d", (int)getpid(), atomic_fetch_add(&instance_counter, 1));
    if (snprintf(st->inst, sizeof(st->inst), "%s/%s", st->real_root, st->tag) >= (int)sizeof(st->inst)) {
        st->inst[0] = '\0';
        return cf_error_set(err, CF_E_LIMIT, "sandbox: work_root path too long");
    }
    if (mkdir(st->inst, 0711) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox: mkdir %s", st->inst);
        st->inst[0] = '\0';
        return -1;
    }
    if (mount(st->inst, st->inst, NULL, MS_BIND, NULL) == 0) {
        st->inst_bound = true;
        (void)mount(NULL, st->inst, NULL, MS_PRIVATE, NULL);
    }
    return 0;
}

/* The slots and the path of each one's per-execution tmpfs. */
static int sb_make_slots(sb_state *st, cf_error *err)
{
    st->slot = calloc((size_t)st->slots, sizeof(*st->slot));
    if (!st->slot)
        return cf_error_set(err, CF_E_NOMEM, "sandbox: out of memory");
    for (int i = 0; i < st->slots; i++) {
        int n = snprintf(st->slot[i].mnt, sizeof(st->slot[i].mnt), "%.4000s/s%d", st->inst, i);
        if (n < 0 || (size_t)n >= sizeof(st->slot[i].mnt))
            return cf_error_set(err, CF_E_LIMIT, "sandbox: work_root path too long");
    }
    return 0;
}

/* What the backend offers; memory and processes only with cgroups (the
 * note says which). */
static void sb_fill_caps(sb_state *st, cf_backend_caps *caps)
{
    memset(caps, 0, sizeof(*caps));
    caps->isolation = "sandbox";
    caps->languages = st->base.languages;
    caps->controls = CF_CTL_TIMEOUT | CF_CTL_CPU_TIME | CF_CTL_STDOUT_CAP | CF_CTL_STDERR_CAP | CF_CTL_FILE_SIZE |
                     CF_CTL_ENV_ALLOWLIST | CF_CTL_NETWORK_DISABLED | CF_CTL_FS_NONE | CF_CTL_FS_WORKSPACE_RO |
                     CF_CTL_FS_WORKSPACE_RW | CF_CTL_FS_PATHS | CF_CTL_STREAM;
    if (st->slirp[0])
        caps->controls |= CF_CTL_NETWORK_ENABLED;
    if (st->cgenv) {
        caps->controls |= CF_CTL_MEMORY | CF_CTL_MAX_PROCESSES;
        cf_exec_notes_add(&st->base,
                          "memory = cgroup v%d memory%s limit incl. tmpfs/shm (default %lld MiB), OOM -> "
                          "memory_exceeded; max_processes = pids cgroup, threads count (default %lld)",
                          st->probe.cgroup_version, st->probe.cg_memsw ? "+swap" : "",
                          (long long)(st->def_memory >> 20), (long long)st->def_pids);
    } else {
        cf_exec_notes_add(&st->base, "NO cgroups (%s): memory and max_processes are NOT enforced, requests asking "
                                     "for them are rejected and other executions run without a memory cap",
                          st->probe.cgroup_note[0] ? st->probe.cgroup_note : "unusable");
    }
}

/* How executions are measured (cpu_time, peak memory: from the cgroup
 * where it counts them), set and noted. */
static void sb_measures(sb_state *st)
{
    if (st->cgenv && cf_cgroup_env_version(st->cgenv) == CF_CGROUP_V2)
        cf_exec_notes_add(&st->base, "cgroup join: %s",
                          !cf_cgroup_env_clone_into(st->cgenv)
                              ? "attached by the worker (this kernel lacks CLONE_INTO_CGROUP)"
                          : cf_cgroup_env_kill_taints(st->cgenv)
                              ? "created in its cgroup (clone3 CLONE_INTO_CGROUP); a slot cgroup that had to be "
                                "killed is replaced, since this kernel kills children created in such a cgroup"
                              : "created in its cgroup (clone3 CLONE_INTO_CGROUP)");
    st->cpu_total = st->cgenv && cf_cgroup_env_has_cpuacct(st->cgenv);
    st->cg_peak = st->cgenv && cf_cgroup_env_has_peak(st->cgenv);
    if (st->cpu_total)
        cf_exec_notes_add(&st->base,
                          "cpu_time = total CPU of the execution (cgroup accounting, checked every %d ms; "
                          "RLIMIT_CPU at the limit rounded up + 1 s as a backstop)",
                          CF_RUN_CPU_POLL_US / 1000);
    else
        cf_exec_notes_add(&st->base, "cpu_time = RLIMIT_CPU per process, whole seconds (NO cgroup cpu accounting "
                                     "here: not a total for the execution)");
    cf_exec_notes_add(&st->base, "peak_memory = %s",
                      st->cg_peak ? "the cgroup's peak incl. tmpfs/shm and page cache (reset per execution)"
                                  : "the largest process's peak RSS (getrusage; NO per-execution cgroup peak here)");
}

/* The notes on the init, the network, the run uids, the tmpfs sizes,
 * warm sandboxes and the sweep. */
static void sb_note_isolation(sb_state *st, const sb_settings *ss, size_t n_host, const char *netwhy, int swept_dirs,
                              int swept_cgroups)
{
    cf_exec_notes_add(&st->base,
                      "pid 1 of the pid namespace is a minimal init (reaps orphans, forwards signals, reports the "
                      "program's own exit or signal); one more process than max_processes is allowed for it");
    if (st->slirp[0])
        cf_exec_notes_add(&st->base,
                          "network=enabled = egress only: an own network namespace behind slirp4netns (host loopback "
                          "unreachable; private, link-local, shared, reserved and multicast ranges and the host's %zu "
                          "own addresses refused unless a profile allows a destination; no IPv6)",
                          n_host);
    else
        cf_exec_notes_add(&st->base, "network=enabled NOT offered (%s)", netwhy);
    cf_exec_notes_add(&st->base,
                      "otherwise an empty network namespace (loopback only); "
                      "host uids %lld..%lld; work dir tmpfs %lld MiB, /tmp %lld MiB",
                      (long long)st->uid_base, (long long)(st->uid_base + st->slots - 1),
                      (long long)(st->work_bytes >> 20), (long long)(st->tmp_bytes >> 20));
    if (ss->warm)
        cf_exec_notes_add(&st->base, "warm: each slot prepares its next sandbox while idle (not for network=enabled "
                                     "or fs_mode=paths, which get one built for them)");
    if (swept_dirs || swept_cgroups)
        cf_exec_notes_add(&st->base, "swept %d stale dir(s) and %d cgroup(s) of dead workers", swept_dirs,
                          swept_cgroups);
}

/* The probe matrix appended to the notes, one line per item joined with
 * " | " (matrix is cut into lines in place). */
static void sb_note_probe(sb_state *st, char *matrix)
{
    size_t used = strlen(st->base.notes);
    for (char *line = matrix; *line && used + 8 < sizeof(st->base.notes);) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (*line) {
            int w = snprintf(st->base.notes + used, sizeof(st->base.notes) - used, "%s%s",
                             used ? (line == matrix ? "; probe: " : " | ") : "probe: ", line);
            if (w > 0)
                used += (size_t)w < sizeof(st->base.notes) - used ? (size_t)w : sizeof(st->base.notes) - used - 1;
        }
        if (!nl)
            break;
        line = nl + 1;
    }
}

static int sb_create(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err)
{
    *state = NULL;
    sb_state *st = calloc(1, sizeof(*st));
    if (!st)
        return cf_error_set(err, CF_E_NOMEM, "sandbox: out of memory");
    st->zygote_fd = -1;
    const sb_settings *ss = cf_backend_settings_of(cfg, &cf_sandbox_settings);
    if (cf_exec_base_init(&st->base, "sandbox", cfg, err) < 0)
        goto fail;
    sb_limits(st, cfg);
    if (st->uid_base + st->slots > INT32_MAX) {
        cf_error_set(err, CF_E_INVALID, "sandbox: run_uid_base %lld too large", (long long)st->uid_base);
        goto fail;
    }
    if (geteuid() != 0) {
        /* uid maps to other uids and the per-execution tmpfs need root. */
        cf_error_set(err, CF_E_UNSUPPORTED, "sandbox: the worker must run as root to use this backend");
        goto fail;
    }
    if (sb_check_work_root(st, cfg, err) < 0)
        goto fail;

    cf_cgroup_env_opts cgo = {.own_dir = cfg->cgroup_own_dir,
                              .parent = cfg->cgroup_root && cfg->cgroup_root[0] ? cfg->cgroup_root : NULL,
                              .cpuacct = true};
    char matrix[1024];
    if (sb_probe(st, &cgo, matrix, sizeof(matrix), err) < 0 || cf_seccomp_prog_new(NULL, &st->seccomp, err) < 0 ||
        sb_cgroups(st, ss, &cgo, err) < 0)
        goto fail;

    cf_instance_swept swept;
    sweep(st, &swept);
    if (sb_make_inst(st, err) < 0 || sb_make_slots(st, err) < 0)
        goto fail;
    /* network=enabled: an own network namespace behind slirp4netns, never
     * the host's.  Without slirp4netns or /dev/net/tun it is not offered. */
    char netwhy[200] = "";
    size_t n_host = 0;
    if (cf_net_offer_check(cfg->slirp4netns_path, st->inst, netwhy, sizeof(netwhy), &n_host, st->resolv,
                           sizeof(st->resolv), err) < 0)
        goto fail;
    if (!netwhy[0])
        cf_strlcpy(st->slirp, cfg->slirp4netns_path, sizeof(st->slirp));

    sb_fill_caps(st, caps);
    sb_measures(st);
    sb_note_isolation(st, ss, n_host, netwhy, swept.dirs, swept.cgroups);
    sb_note_probe(st, matrix);
    if (ss->warm) {
        for (int i = 0; i < st->slots; i++)
            if (warm_start(st, &st->slot[i], i, err) < 0)
                goto fail;
    }
    if (zygotes_start(st, cfg, ss, err) < 0)
        goto fail;
    caps->notes = st->base.notes;
    *state = st;
    return 0;
fail:
    sb_destroy(st);
    return -1;
}

/* ---- per execution ---- */

/* fs_mode=paths: an absolute, normalized host path without a symlink in
 * any component, not in /proc, /sys, /dev or the worker's work root, that
 * the run uid (host_id) itself may reach and read (and write, when rw): it
 * never gets more of the host than that uid has.  Fills b (dst = src) with
 * the identity the child re-checks. */
static int check_host_path(const sb_state *st, const char *path, bool rw, uid_t host_id, cf_sandbox_bind *b,
                           char *why, size_t wsz)
{
    size_t len = path ? strlen(path) : 0;
    if (len == 0 || path[0] != '/' || len >= PATH_MAX - 64) {
        snprintf(why, wsz, "not an absolute path");
        return -1;
    }
    if (strcmp(path, "/") == 0) {
        snprintf(why, wsz, "the host root cannot be bound");
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c < 0x20 || c == 0x7f) {
            snprintf(why, wsz, "control character");
            return -1;
        }
    }
    if (path[len - 1] == '/' || strstr(path, "//") || strstr(path, "/./") || strstr(path, "/../") ||
        (len >= 2 && strcmp(path + len - 2, "/.") == 0) || (len >= 3 && strcmp(path + len - 3, "/..") == 0)) {
        snprintf(why, wsz, "not normalized");
        return -1;
    }
    static const char *const banned[] = {"/proc", "/sys", "/dev", "/work", RUN_DIR};
    for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++) {
        size_t bl = strlen(banned[i]);
        if (strncmp(path, banned[i], bl) == 0 && (path[bl] == '/' || path[bl] == '\0')) {
            snprintf(why, wsz, "%s is off limits", banned[i]);
            return -1;
        }
    }
    size_t rl = strlen(st->real_root);
    if ((strncmp(path, st->real_root, rl) == 0 && (path[rl] == '/' || path[rl] == '\0' || rl == 1)) ||
        (strncmp(st->real_root, path, len) == 0 && st->real_root[len] == '/')) {
        snprintf(why, wsz, "overlaps the worker's work root");
        return -1;
    }
    /* Walk it one component at a time, never following a symlink. */
    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, wsz, "cannot open /");
        return -1;
    }
    char comp[NAME_MAX + 1];
    const char *p = path + 1;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !run_uid_may(&sb, host_id, 1)) {
        close(fd);
        snprintf(why, wsz, "the run uid cannot search /");
        return -1;
    }
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > NAME_MAX) {
            close(fd);
            snprintf(why, wsz, "component too long");
            return -1;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        int nfd = openat(fd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        int saved = errno;
        close(fd);
        if (nfd < 0) {
            snprintf(why, wsz, "%s", saved == ENOENT ? "does not exist" : strerror(saved));
            return -1;
        }
        fd = nfd;
        if (fstat(fd, &sb) < 0 || S_ISLNK(sb.st_mode)) {
            close(fd);
            snprintf(why, wsz, "symlink in path");
            return -1;
        }
        if (e && !S_ISDIR(sb.st_mode)) {
            close(fd);
            snprintf(why, wsz, "not a directory on the way");
            return -1;
        }
        if (e && !run_uid_may(&sb, host_id, 1)) {
            close(fd);
            snprintf(why, wsz, "permission denied on the host for the run uid (a directory on the way)");
            return -1;
        }
        p = e ? e + 1 : p + n;
    }
    close(fd);
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) {
        snprintf(why, wsz, "neither a directory nor a regular file");
        return -1;
    }
    unsigned need = 4u | (rw ? 2u : 0u) | (S_ISDIR(sb.st_mode) ? 1u : 0u);
    if (!run_uid_may(&sb, host_id, need)) {
        snprintf(why, wsz, "permission denied on the host for the run uid (%s)", rw ? "read-write" : "read");
        return -1;
    }
    *b = (cf_sandbox_bind){.src = path, .dst = path, .rw = rw, .check_id = true, .dev = sb.st_dev, .ino = sb.st_ino};
    return 0;
}

/* The slot's cgroup with this execution's limits; a cgroup that cannot
 * take them (or still holds processes) is replaced by a fresh one. */
static int slot_cgroup(sb_state *st, sb_slot *s, int slot, const cf_cgroup_limits *lim, cf_error *err)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (s->cg) {
            /* A cgroup that was killed is replaced where the kernel would
             * kill the children created in it (cf_cgroup_fresh_needed). */
            if (!cf_cgroup_fresh_needed(s->cg) && cf_cgroup_nprocs(s->cg) == 0 &&
                cf_cgroup_set_limits(s->cg, lim, NULL) == 0)
                return 0;
            slot_drop_cgroup(s);
            s->gen++;
        }
        char name[96];
        snprintf(name, sizeof(name), "%s-s%d-g%u", st->tag, slot, s->gen);
        if (cf_cgroup_new(st->cgenv, name, lim, &s->cg, err) == 0) {
            int n = cf_cgroup_join_fds(s->cg, s->join_fds, MAX_JOIN_FDS, err);
            if (n < 0) {
                slot_drop_cgroup(s);
                return -1;
            }
            s->n_join = n;
            return 0;
        }
        if (err && err->code != CF_E_CONFLICT)
            return -1;
        s->gen++;
    }
    return -1;
}

static int mount_work(sb_state *st, sb_slot *s, cf_error *err)
{
    if (!s->mnt_made) {
        if (mkdir(s->mnt, 0711) < 0 && errno != EEXIST)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox: mkdir %s", s->mnt);
        s->mnt_made = true;
    }
    char opts[128];
    snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=%lld,mode=0711", (long long)st->work_bytes,
             (long long)st->inodes);
    if (mount("tmpfs", s->mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox: mounting the work tmpfs on %s", s->mnt);
    return 0;
}

static int dir_bind(cf_workdir *wd, const char *sub, const char *dst, bool rw, cf_sandbox_bind *b, char *buf,
                    size_t bufsz, cf_error *err)
{
    struct stat sb;
    int rc = sub ? fstatat(cf_workdir_dirfd(wd), sub, &sb, AT_SYMLINK_NOFOLLOW) : fstat(cf_workdir_dirfd(wd), &sb);
    if (rc < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox: stat of %s", cf_workdir_path(wd));
    if (sub)
        snprintf(buf, bufsz, "%s/%s", cf_workdir_path(wd), sub);
    else
        cf_strlcpy(buf, cf_workdir_path(wd), bufsz);
    *b = (cf_sandbox_bind){.src = buf, .dst = dst, .rw = rw, .check_id = true, .dev = sb.st_dev, .ino = sb.st_ino};
    return 0;
}

/* ---- warm sandboxes ---- */

/* Takes down a prepared or used warm sandbox: its child (if still
 * waiting), every process left in the cgroup, and the work tmpfs with all
 * that was placed or written in it.  The caller owns the slot (busy, or
 * the preparer thread). */
static void warm_discard(sb_slot *s)
{
    sb_warm *w = &s->warm;
    cf_run_prep_destroy(w->prep);
    w->prep = NULL;
    if (s->cg && cf_cgroup_nprocs(s->cg) != 0)
        cf_cgroup_kill_all(s->cg);
    cf_exec_dirs_release(&w->dirs);
    if (w->mounted) {
        (void)umount2(s->mnt, MNT_DETACH);
        w->mounted = false;
    }
}

static int slot_cgroup(sb_state *st, sb_slot *s, int slot, const cf_cgroup_limits *lim, cf_error *err);
static int mount_work(sb_state *st, sb_slot *s, cf_error *err);
static int dir_bind(cf_workdir *wd, const char *sub, const char *dst, bool rw, cf_sandbox_bind *b, char *buf,
                    size_t bufsz, cf_error *err);

/* Builds the slot's next sandbox: the same steps as a cold execution up
 * to the request, into a cgroup that is new or emptied (nothing of an
 * earlier execution survives: fresh tmpfs for work/ and run/, fresh
 * namespaces, /tmp and /dev/shm, a fresh child). */
static int warm_build(sb_state *st, sb_slot *s, cf_error *err)
{
    sb_warm *w = &s->warm;
    int slot = s->index;
    if (st->cgenv) {
        cf_cgroup_limits lim = {.memory_bytes = st->def_memory, .pids_max = st->def_pids + 1};
        if (s->cg && cf_cgroup_nprocs(s->cg) != 0)
            cf_cgroup_kill_all(s->cg);
        if (slot_cgroup(st, s, slot, &lim, err) < 0)
            return cf_error_wrap(err, "sandbox: warm: slot cgroup");
    }
    if (!s->fs) {
        cf_sandbox_fs_spec fspec = {.tmp_size_bytes = st->tmp_bytes, .nr_inodes = st->inodes, .uid = IN_ID,
                                    .gid = IN_ID, .extra_ro = st->toolchain_dirs};
        if (cf_sandbox_fs_new(&fspec, &s->fs, err) < 0)
            return cf_error_wrap(err, "sandbox: warm");
    }
    if (mount_work(st, s, err) < 0)
        return -1;
    w->mounted = true;
    uid_t host_id = (uid_t)(st->uid_base + slot);
    if (cf_exec_dirs_create(s->mnt, host_id, host_id, "sandbox", &w->dirs, err) < 0)
        goto fail;
    cf_sandbox_bind binds[3];
    char wbuf[PATH_MAX], rbuf[PATH_MAX], obuf[PATH_MAX];
    /* /work read-write; a request that wants it read-only gets it
     * remounted so before its program starts (CF_SANDBOX_GO_WORK_RO). */
    if (dir_bind(w->dirs.work, NULL, CF_SANDBOX_WORK_DIR, true, &binds[0], wbuf, sizeof(wbuf), err) < 0 ||
        dir_bind(w->dirs.run, NULL, RUN_DIR, false, &binds[1], rbuf, sizeof(rbuf), err) < 0 ||
        dir_bind(w->dirs.run, "out", RUN_DIR "/out", true, &binds[2], obuf, sizeof(obuf), err) < 0)
        goto fail;
    if (cf_sandbox_fs_set_binds(s->fs, binds, 3, err) < 0) {
        cf_error_wrap(err, "sandbox: warm");
        goto fail;
    }
    cf_run_spec spec;
    memset(&spec, 0, sizeof(spec));
    w->sx = (cf_sandbox_exec){.seccomp = st->seccomp, .fs = s->fs, .cg = s->cg, .uid = IN_ID, .gid = IN_ID,
                              .host_uid = host_id, .host_gid = host_id, .loopback = true,
                              .join_fds = s->join_fds, .n_join = s->n_join};
    if (cf_sandbox_exec_prepare(&w->sx, &spec, err) < 0 || cf_run_prepare(&spec, &w->prep, err) < 0)
        goto fail;
    return 0;
fail:
    warm_discard(s);
    return -1;
}

/* Waits on w->cv until the monotonic time `until` (INT64_MAX: no limit). */
static void warm_wait_until(sb_warm *w, int64_t until)
{
    if (until == INT64_MAX) {
        pthread_cond_wait(&w->cv, &w->mu);
        return;
    }
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000), .tv_nsec = (long)(until % 1000000) * 1000};
    (void)pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

static void *warm_main(void *arg)
{
    sb_slot *s = arg;
    sb_warm *w = &s->warm;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int64_t now = cf_mono_us();
        if (w->stop)
            break;
        bool rebuild = false;
        if (w->busy || w->state == WARM_TAKEN) {
            warm_wait_until(w, INT64_MAX);
            continue;
        }
        if (w->state == WARM_READY) {
            if (now < w->built_at + WARM_MAX_AGE_US) {
                warm_wait_until(w, w->built_at + WARM_MAX_AGE_US);
                continue;
            }
            rebuild = true; /* too old: replaced below */
        } else if (w->state == WARM_NONE && w->failures >= WARM_MAX_FAILURES) {
            if (now < w->retry_at) {
                warm_wait_until(w, w->retry_at);
                continue;
            }
            w->failures = 0; /* try again */
        }
        bool dirty = rebuild || w->state == WARM_DIRTY;
        w->state = WARM_BUILDING;
        pthread_mutex_unlock(&w->mu);
        if (dirty)
            warm_discard(s);
        cf_error err;
        cf_error_clear(&err);
        int rc = warm_build(s->st, s, &err);
        pthread_mutex_lock(&w->mu);
        if (rc == 0) {
            w->state = WARM_READY;
            w->built_at = cf_mono_us();
            w->failures = 0;
        } else {
            w->state = WARM_NONE;
            w->failures++;
            cf_strlcpy(w->why, err.msg, sizeof(w->why));
            if (w->failures >= WARM_MAX_FAILURES)
                w->retry_at = cf_mono_us() + WARM_RETRY_US;
            cf_log_warn("sandbox", "slot %d: warm sandbox not built (%s)%s", s->index, w->why,
                        w->failures >= WARM_MAX_FAILURES ? "; serving cold, trying again in 30 s" : "");
        }
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int warm_start(sb_state *st, sb_slot *s, int index, cf_error *err)
{
    sb_warm *w = &s->warm;
    s->st = st;
    s->index = index;
    if (pthread_mutex_init(&w->mu, NULL) != 0)
        return cf_error_set(err, CF_E_SYSTEM, "sandbox: warm: mutex");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* cf_mono_us's clock, for the timed waits */
    int rc = pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&w->mu);
        return cf_error_set(err, CF_E_SYSTEM, "sandbox: warm: condition variable");
    }
    /* The prepared children die with this thread (PR_SET_PDEATHSIG): it
     * lives as long as the backend. */
    if ((rc = pthread_create(&w->thread, NULL, warm_main, s)) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return cf_error_set_errno(err, CF_E_SYSTEM, rc, "sandbox: warm: starting the preparer thread");
    }
    w->on = true;
    return 0;
}

static void warm_stop(sb_slot *s)
{
    sb_warm *w = &s->warm;
    if (!w->on)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    warm_discard(s);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->on = false;
}

/* The request in the slot's warm sandbox.  *fallback: the sandbox could
 * not take it (its cgroup refused the request's limits); nothing ran, the
 * caller builds one for the request. */
static int warm_execute(sb_state *st, sb_slot *s, cf_exec_job *job, const cf_exec_ctx *ctx, const cf_request *req,
                        const cf_cgroup_limits *lim, bool *fallback, cf_error *err)
{
    sb_warm *w = &s->warm;
    const cf_policy *pol = &req->policy;
    cf_exec_files *files = ctx->files;
    cf_run_outcome outcome;
    memset(&outcome, 0, sizeof(outcome));
    int rc = -1;
    sb_meter m = {.cpu = {.cg = s->cg, .before = -1}};
    *fallback = false;
    if (s->cg) {
        /* Baselines first: a limit below what the waiting child holds can
         * make the kernel kill it inside the write (cgroup v2), and that
         * kill is not the program's. */
        m.oom_before = cf_cgroup_oom_kills(s->cg);
        m.cpu.before = cf_cgroup_cpu_usage_us(s->cg);
        if (cf_cgroup_set_limits(s->cg, lim, NULL) < 0) {
            *fallback = true;
            return 0;
        }
        m.peak_ok = st->cg_peak && cf_cgroup_peak_reset(s->cg) == 0;
    }
    /* A child that died while it waited (or just now, under the new
     * limits) serves nothing: one built for the request does. */
    if (!cf_run_prep_alive(w->prep)) {
        *fallback = true;
        return 0;
    }
    cf_exec_job_adopt_dirs(job, &w->dirs);
    cf_exec_view view = {.work = CF_SANDBOX_WORK_DIR, .run = RUN_DIR};
    if (cf_exec_job_fill(job, files, &view, err) < 0)
        goto out;
    if (job->rejected) {
        rc = 0;
        goto out;
    }
    cf_run_spec spec;
    cf_exec_job_spec(job, ctx, &spec);
    bool work_rw = !(pol->fs_mode == CF_FS_WORKSPACE_RO || (files && files->read_only));
    spec.go_flags = work_rw ? 0 : CF_SANDBOX_GO_WORK_RO;
    spec.go_arg = meter_cpu_limit(st, pol, &m, &spec);
    int run_rc = cf_run_start(w->prep, &spec, &outcome, err);
    w->prep = NULL;
    if (run_rc < 0) {
        cf_error_wrap(err, "sandbox");
        goto out;
    }
    bool oom;
    int64_t cpu_us;
    meter_collect(s->cg, &m, &outcome, &oom, &cpu_us);
    rc = cf_exec_job_finish(job, ctx, &outcome, oom, cpu_us, err);
out:
    /* A rejected placement leaves the prepared child unused: it goes, like
     * everything else of this sandbox, when the preparer cleans the slot. */
    cf_run_prep_destroy(w->prep);
    w->prep = NULL;
    if (s->cg && cf_cgroup_nprocs(s->cg) != 0)
        cf_cgroup_kill_all(s->cg);
    cf_exec_job_return_dirs(job, &w->dirs);
    cf_exec_job_free(job);
    cf_run_outcome_free(&outcome);
    return rc;
}

/* A sandbox built for this request (warm ones unavailable or unsuitable). */
static int cold_execute(sb_state *st, sb_slot *s, int slot, cf_exec_job *job, const cf_exec_ctx *ctx,
                        const cf_request *req, cf_result *res, cf_sandbox_bind *binds, size_t nb,
                        const cf_cgroup_limits *limp, cf_error *err)
{
    const cf_policy *pol = &req->policy;
    cf_exec_files *files = ctx->files;
    cf_cgroup_limits lim = *limp;
    cf_run_outcome outcome;
    memset(&outcome, 0, sizeof(outcome));
    bool mounted = false;
    int rc = -1;
    (void)res;
    sb_meter m = {.cpu = {.before = -1}};
    if (st->cgenv) {
        if (slot_cgroup(st, s, slot, &lim, err) < 0) {
            cf_error_wrap(err, "sandbox: slot cgroup");
            if (err)
                err->retriable = true;
            goto out;
        }
        m.cpu.cg = s->cg;
        m.oom_before = cf_cgroup_oom_kills(s->cg);
        m.cpu.before = cf_cgroup_cpu_usage_us(s->cg);
        m.peak_ok = st->cg_peak && cf_cgroup_peak_reset(s->cg) == 0;
    }
    if (!s->fs) {
        cf_sandbox_fs_spec fspec = {.tmp_size_bytes = st->tmp_bytes, .nr_inodes = st->inodes, .uid = IN_ID,
                                    .gid = IN_ID, .extra_ro = st->toolchain_dirs};
        if (cf_sandbox_fs_new(&fspec, &s->fs, err) < 0) {
            cf_error_wrap(err, "sandbox");
            goto out;
        }
    }

    if (mount_work(st, s, err) < 0) {
        if (err)
            err->retriable = true;
        goto out;
    }
    mounted = true;
    uid_t host_id = (uid_t)(st->uid_base + slot);
    if (cf_exec_job_dirs(job, s->mnt, host_id, host_id, err) < 0)
        goto out;
    cf_exec_view view = {.work = "/work", .run = RUN_DIR};
    if (cf_exec_job_fill(job, files, &view, err) < 0)
        goto out;
    if (job->rejected) {
        rc = 0;
        goto out;
    }

    bool work_rw = !(pol->fs_mode == CF_FS_WORKSPACE_RO || (files && files->read_only));
    bool network = pol->network == CF_NET_ENABLED;
    char wbuf[PATH_MAX], rbuf[PATH_MAX], obuf[PATH_MAX];
    if (dir_bind(job->work, NULL, "/work", work_rw, &binds[0], wbuf, sizeof(wbuf), err) < 0 ||
        dir_bind(job->run, NULL, RUN_DIR, false, &binds[1], rbuf, sizeof(rbuf), err) < 0 ||
        dir_bind(job->run, "out", RUN_DIR "/out", true, &binds[2], obuf, sizeof(obuf), err) < 0)
        goto out;
    /* Name resolution through slirp's forwarder, only with network. */
    size_t first = 0;
    if (network && st->resolv[0]) {
        binds[3] = (cf_sandbox_bind){.src = st->resolv, .dst = "/etc/resolv.conf"};
    } else {
        binds[3] = binds[2];
        binds[2] = binds[1];
        binds[1] = binds[0];
        first = 1;
    }
    if (cf_sandbox_fs_set_binds(s->fs, binds + first, nb - first, err) < 0) {
        cf_error_wrap(err, "sandbox");
        goto out;
    }

    cf_run_spec spec;
    cf_exec_job_spec(job, ctx, &spec);
    cf_sandbox_exec sx = {.seccomp = st->seccomp, .fs = s->fs, .cg = s->cg, .uid = IN_ID, .gid = IN_ID,
                          .host_uid = host_id, .host_gid = host_id, .loopback = true,
                          .join_fds = s->join_fds, .n_join = s->n_join};
    cf_net_routes routes;
    if (network) {
        /* The host's addresses as they are now (an interface added since
         * start is the host's too). */
        if (cf_net_default_blocks(&routes, err) < 0 ||
            cf_net_set_allows(&routes, ctx->net_allow, ctx->n_net_allow, err) < 0)
            goto out;
        sx.egress_slirp = st->slirp;
        sx.routes = &routes;
    }
    sx.cpu_rlimit_s = meter_cpu_limit(st, pol, &m, &spec);
    if (cf_sandbox_exec_prepare(&sx, &spec, err) < 0)
        goto out;
    int run_rc = cf_run(&spec, &outcome, err);
    cf_net_egress_stop(&sx.egress);
    if (run_rc < 0) {
        cf_error_wrap(err, "sandbox");
        goto out;
    }
    bool oom;
    int64_t cpu_us;
    meter_collect(s->cg, &m, &outcome, &oom, &cpu_us);
    rc = cf_exec_job_finish(job, ctx, &outcome, oom, cpu_us, err);

out:
    if (s->cg && cf_cgroup_nprocs(s->cg) != 0)
        cf_cgroup_kill_all(s->cg);
    cf_exec_job_free(job);
    /* Whatever the program left in work/ and run/ goes with the tmpfs.  A
     * failed unmount leaves it stacked: the next execution mounts over it
     * and destroy unmounts everything below the instance directory. */
    if (mounted)
        (void)umount2(s->mnt, MNT_DETACH);
    cf_run_outcome_free(&outcome);
    return rc;
}

/* ---- the zygote ---- */

/* The first cheap look: a slot with a zygote, a request whose sandbox
 * needs nothing built for it, and (for other languages) zygote-exec.
 * *python: run in the zygote's interpreter. */
static bool zygote_fits(const sb_state *st, const sb_slot *s, const cf_exec_ctx *ctx, const cf_request *req,
                        bool *python)
{
    const cf_policy *pol = &req->policy;
    *python = false;
    if (!s->zyg || pol->network == CF_NET_ENABLED || pol->fs_mode == CF_FS_PATHS)
        return false;
    *python = req->language == CF_LANG_PYTHON && !(ctx && ctx->program);
    return *python || st->zygote_exec;
}

/* Environment names read once at a process's or interpreter's start (the
 * zygote started long ago, without them): the interpreter's own settings,
 * the locale, what the dynamic loader and the C library read at exec,
 * OpenSSL's configuration, and HOME (where site looks for the user's
 * packages).  TZ is read again in the program (time.tzset). */
static bool starts_python_differently(const char *name)
{
    static const char *const prefixes[] = {"PYTHON", "LC_", "LD_", "GLIBC_", "MALLOC_", "OPENSSL_"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return strcmp(name, "LANG") == 0 || strcmp(name, "LANGUAGE") == 0 || strcmp(name, "HOME") == 0;
}

/* The top-level entry a work-relative path lives in. */
static bool top_shadows(const cf_zygote *z, const char *path)
{
    char top[256];
    size_t l = path ? strcspn(path, "/") : 0;
    if (l == 0 || l >= sizeof(top))
        return false;
    memcpy(top, path, l);
    top[l] = '\0';
    return cf_zygote_shadows(z, top);
}

/* With the zygote taken: whether this Python execution would start
 * exactly as the zygote's interpreter did (nothing in its environment
 * that changes start-up, no file that a cold start would have imported
 * or found first). */
static bool zygote_python_ok(const cf_zygote *z, const cf_exec_ctx *ctx, const cf_request *req)
{
    const cf_policy *pol = &req->policy;
    for (size_t i = 0; i < req->n_env; i++)
        if (req->env[i].key && starts_python_differently(req->env[i].key))
            return false;
    for (size_t i = 0; pol->env_allow_set && i < pol->n_env_allow; i++)
        if (pol->env_allow[i] && starts_python_differently(pol->env_allow[i]) && getenv(pol->env_allow[i]))
            return false;
    for (size_t i = 0; i < req->n_files; i++)
        if (top_shadows(z, req->files[i].path))
            return false;
    for (size_t i = 0; ctx && ctx->files && i < ctx->files->n_place; i++)
        if (top_shadows(z, ctx->files->place[i].path))
            return false;
    return true;
}

/* The request in a fork of the slot's zygote.  *fallback: nothing ran
 * (the zygote could not take it); the job is freed and the caller starts
 * over on another path. */
static int zygote_execute(sb_state *st, sb_slot *s, cf_exec_job *job, const cf_exec_ctx *ctx, const cf_request *req,
                          const cf_cgroup_limits *lim, bool python, bool *fallback, cf_error *err)
{
    cf_zygote *z = s->zyg;
    const cf_policy *pol = &req->policy;
    cf_run_outcome outcome;
    memset(&outcome, 0, sizeof(outcome));
    int rc = -1;
    *fallback = false;
    cf_cgroup *cg = cf_zygote_exec_cgroup(z, lim, NULL);
    if (!cg || cf_zygote_mount(z, NULL) < 0) {
        *fallback = true;
        return 0;
    }
    sb_meter m = {.cpu = {.cg = cg, .before = cf_cgroup_cpu_usage_us(cg)}, .oom_before = cf_cgroup_oom_kills(cg)};
    m.peak_ok = st->cg_peak && cf_cgroup_peak_reset(cg) == 0;
    uid_t host_id = (uid_t)(st->uid_base + ctx->slot);
    if (cf_exec_job_dirs(job, cf_zygote_mount_dir(z), host_id, host_id, err) < 0)
        goto out;
    cf_exec_view view = {.work = CF_SANDBOX_WORK_DIR, .run = RUN_DIR};
    if (cf_exec_job_fill(job, ctx->files, &view, err) < 0)
        goto out;
    if (job->rejected) {
        rc = 0;
        goto out;
    }
    cf_run_spec spec;
    cf_exec_job_spec(job, ctx, &spec);
    spec.stdio_owner_set = true;
    spec.stdio_uid = host_id;
    spec.stdio_gid = host_id;
    /* A cold `python3` coerces the C locale and shows it in its
     * environment (appended last): so does the zygote's program. */
    char *envp[CF_EXEC_ENV_MAX + 2];
    if (python && cf_zygote_lc_ctype(z)) {
        size_t n = 0;
        bool has = false;
        for (; n < job->env.n && n < CF_EXEC_ENV_MAX; n++) {
            envp[n] = job->env.v[n];
            has = has || strncmp(envp[n], "LC_CTYPE=", 9) == 0;
        }
        if (!has)
            envp[n++] = "LC_CTYPE=C.UTF-8";
        envp[n] = NULL;
        spec.envp = envp;
    }
    int64_t cpu_secs = meter_cpu_limit(st, pol, &m, &spec);
    bool work_rw = !(pol->fs_mode == CF_FS_WORKSPACE_RO || (ctx->files && ctx->files->read_only));
    const char *topdir = strrchr(cf_workdir_path(job->top), '/');
    cf_zygote_run_args a = {.top = topdir ? topdir + 1 : cf_workdir_path(job->top), .python = python,
                            .work_ro = !work_rw, .cpu_rlimit_s = cpu_secs, .tmp_bytes = st->tmp_bytes,
                            .inodes = st->inodes};
    bool nothing_ran = false;
    if (cf_zygote_run(z, &a, cg, &spec, &outcome, &nothing_ran, err) < 0) {
        if (nothing_ran) {
            *fallback = true;
            rc = 0;
        } else {
            cf_error_wrap(err, "sandbox (zygote)");
        }
        goto out;
    }
    bool oom;
    int64_t cpu_us;
    meter_collect(cg, &m, &outcome, &oom, &cpu_us);
    rc = cf_exec_job_finish(job, ctx, &outcome, oom, cpu_us, err);
out:
    if (cf_cgroup_nprocs(cg) != 0)
        cf_cgroup_kill_all(cg);
    cf_exec_job_free(job);
    /* Whatever the program left in work/ and run/ goes with the tmpfs. */
    cf_zygote_umount(z);
    cf_run_outcome_free(&outcome);
    return rc;
}

/* The execution's pids bound: its max_processes (or sandbox-pids), +1 for
 * the namespace's init (the runner's), which is not the program's, +1 with
 * network for slirp4netns, which joins the cgroup. */
static int64_t sb_pids_bound(void *state, const cf_policy *pol)
{
    const sb_state *st = state;
    return (pol->max_processes > 0 ? pol->max_processes : st->def_pids) + 1 + (pol->network == CF_NET_ENABLED ? 1 : 0);
}

static int sb_execute(void *state, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err)
{
    sb_state *st = state;
    const cf_policy *pol = &req->policy;
    cf_exec_job job;

    int open = cf_exec_job_open(&job, &st->base, "sandbox", "sandbox", st->slots, ctx, req, res, err);
    if (open <= 0)
        return open;
    int slot = ctx->slot;
    sb_slot *s = &st->slot[slot];

    /* Host paths first: a bad one must not cost a mount. */
    cf_sandbox_bind binds[CF_SANDBOX_MAX_BINDS];
    size_t nb = 4; /* work, run, run/out, resolv.conf */
    if (pol->fs_mode == CF_FS_PATHS) {
        if (pol->n_fs_read_only + pol->n_fs_read_write > CF_SANDBOX_MAX_BINDS - nb)
            return cf_exec_reject(res, "fs_mode=paths: more than %zu paths", (size_t)CF_SANDBOX_MAX_BINDS - nb);
        for (size_t i = 0; i < pol->n_fs_read_only + pol->n_fs_read_write; i++) {
            bool rw = i >= pol->n_fs_read_only;
            const char *p = rw ? pol->fs_read_write[i - pol->n_fs_read_only] : pol->fs_read_only[i];
            char why[128], shown[100];
            if (check_host_path(st, p, rw, (uid_t)(st->uid_base + slot), &binds[nb], why, sizeof(why)) < 0) {
                cf_printable(p ? p : "", p ? strlen(p) : 0, shown, sizeof(shown));
                return cf_exec_reject(res, "fs_mode=paths: %s path '%s' refused: %s", rw ? "read-write" : "read-only",
                                      shown, why);
            }
            nb++;
        }
    }
    if (!st->cgenv && (pol->memory_bytes > 0 || pol->max_processes > 0))
        return cf_exec_reject(res, "backend 'sandbox' cannot enforce %s on this host (no usable cgroups)",
                              pol->memory_bytes > 0 ? "memory" : "max_processes");

    cf_cgroup_limits lim = {.memory_bytes = pol->memory_bytes > 0 ? pol->memory_bytes : st->def_memory,
                            .pids_max = sb_pids_bound(st, pol)};
    /* The slot's zygote when it is up and the request is one it serves
     * exactly as a cold start would; otherwise (or when it cannot take
     * the request after all) the paths below. */
    bool zpython = false;
    if (zygote_fits(st, s, ctx, req, &zpython) && cf_zygote_acquire(s->zyg, ctx ? ctx->profile : NULL)) {
        bool ok = !zpython || zygote_python_ok(s->zyg, ctx, req);
        bool fallback = true;
        int zrc = 0;
        if (ok)
            zrc = zygote_execute(st, s, &job, ctx, req, &lim, zpython, &fallback, err);
        cf_zygote_release(s->zyg);
        if (!fallback) {
            if (zrc == 0 && res->status != CF_STATUS_REJECTED) {
                free(res->meta.sandbox);
                res->meta.sandbox = strdup("zygote");
            }
            return zrc;
        }
        if (ok) {
            /* zygote_execute freed the job: start it again. */
            open = cf_exec_job_open(&job, &st->base, "sandbox", "sandbox", st->slots, ctx, req, res, err);
            if (open <= 0)
                return open;
        }
    }

    /* A warm sandbox when the request fits one: its own network namespace
     * stays empty and only work/, run/ and run/out are bound. */
    bool fits = pol->network != CF_NET_ENABLED && pol->fs_mode != CF_FS_PATHS;
    sb_warm *w = &s->warm;
    bool took = false;
    if (w->on) {
        pthread_mutex_lock(&w->mu);
        /* A sandbox being built or about to be (the preparer is on its
         * way) is worth the wait: building another costs the same. */
        while (w->state == WARM_BUILDING || w->state == WARM_DIRTY ||
               (w->state == WARM_NONE && w->failures < WARM_MAX_FAILURES))
            pthread_cond_wait(&w->cv, &w->mu);
        w->busy = true;
        bool discard = false;
        if (w->state == WARM_READY) {
            if (fits) {
                w->state = WARM_TAKEN;
                took = true;
            } else {
                discard = true;
                w->state = WARM_NONE;
            }
        }
        pthread_mutex_unlock(&w->mu);
        if (discard)
            warm_discard(s);
    }
    int rc;
    if (took) {
        bool fallback = false;
        rc = warm_execute(st, s, &job, ctx, req, &lim, &fallback, err);
        if (fallback) {
            /* The slot's cgroup could not take this request's limits with
             * the prepared child in it: build one for the request. */
            warm_discard(s);
            took = false;
            rc = cold_execute(st, s, slot, &job, ctx, req, res, binds, nb, &lim, err);
        }
    } else {
        rc = cold_execute(st, s, slot, &job, ctx, req, res, binds, nb, &lim, err);
    }
    if (w->on) {
        pthread_mutex_lock(&w->mu);
        w->busy = false;
        w->state = took ? WARM_DIRTY : WARM_NONE;
        w->served_warm += took;
        w->served_cold += !took;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    if (rc == 0 && res->status != CF_STATUS_REJECTED) {
        free(res->meta.sandbox);
        res->meta.sandbox = strdup(took ? "warm" : "cold"); /* NULL on OOM: the field is informative */
    }
    return rc;
}

const cf_backend_ops cf_backend_sandbox_ops = {
    .pids_bound = sb_pids_bound,
    .name = "sandbox",
    .description = "namespaces, private read-only root, seccomp, no capabilities, cgroup limits (sandbox)",
    .settings = &cf_sandbox_settings,
    .create = sb_create,
    .destroy = sb_destroy,
    .execute = sb_execute,
};
