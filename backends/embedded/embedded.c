/* The `wasm` and `js` backends: embedded runtimes (wasmtime, QuickJS-ng)
 * in pre-started helper processes, so an execution forks and execs nothing.
 *
 * Confinement.  The runtimes never run in the worker, which holds the
 * broker's and Redis's credentials: each slot has a helper process
 * (codefleet-embed-helper, exec'd, so none of the worker's memory is in
 * it) started through the sandbox's own machinery: new user, pid, mount,
 * ipc, uts and network namespaces (no network at all), a private read-only
 * root, no capabilities, no_new_privs, the sandbox's seccomp filter, and a
 * cgroup capping its memory and tasks.  Its uid outside is a run uid of its
 * own (run_uid_base + slots * (1 + backend index) + slot).
 *
 * One supervisor thread per slot starts the helper (cf_run, blocking for
 * the helper's life, with the job socket passed as fd 4) and starts a new
 * one whenever it ends.  An execution takes the slot's helper, sends the
 * job and waits for the reply until the job's deadline plus a grace; past
 * it (a blocking host call, a native built-in that ignores interrupts) it
 * kills the helper (the run's cancel flag: the cgroup and the namespace's
 * init go) and answers `timeout`.  A helper that dies during a job is
 * replaced and the job run once more on the new helper; a second death
 * answers internal_error.
 *
 * Files.  Each slot has a tmpfs (size and inode capped) at
 * <work_root>/cfem-<pid>.<n>/s<slot>, bound into its helper at /work; an
 * execution's work/ and run/ are made there as for the other backends
 * (exec_common), so workspace files, input.json, output.json and
 * collection behave the same, and removed after the execution.
 *
 * Known limit of pooling: a helper serves its slot's executions one after
 * another.  The runtimes give each execution a fresh store / runtime, but
 * a runtime bug that let a guest take over its helper would let it see the
 * slot's later executions (never the worker, the host, or other slots).
 */
#include "cf_backend.h"
#include "cf_log.h"
#include "cf_runner.h"
#include "cf_workdir.h"
#include "proto_int.h"
#include "cf_exec.h"
#include "cf_cgroup.h"
#include "cf_sandbox_exec.h"
#include "cf_sandbox_fs.h"
#include "cf_instance.h"
#include "cf_sandbox_probe.h"
#include "cf_seccomp.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EM_PREFIX "cfem-"
#define IN_ID 1000
#define SLOT_IN "/work"
#define DEFAULT_HELPER_MEMORY (1024LL << 20)
#define HELPER_OVERHEAD (128LL << 20) /* runtime, compiled code, the helper itself */
#define HELPER_PIDS 16                /* init, the helper, its threads */
#define DEFAULT_WORK (128LL << 20)
#define DEFAULT_INODES 16384
#define DEFAULT_MODULE_MAX (16LL << 20)
#define GRACE_US 500000               /* past the deadline before the watchdog kills */
#define START_WAIT_US (10 * 1000000LL) /* for a helper to be there */
#define MAX_JOIN_FDS 8
#define FALLBACK_OUTPUT_CAP (1024 * 1024) /* stdout/stderr when a request sets 0, as exec_common */

typedef struct em_slot {
    struct em_state *st;
    int index;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sock;          /* worker's end of the current helper's socket; -1: none */
    unsigned gen;      /* helper generation (bumped per start) */
    bool busy;         /* an execution uses sock */
    bool condemned;    /* the current helper is being killed: never handed out again */
    uint64_t seq;      /* jobs sent on this slot (the reply must echo it) */
    volatile int kill; /* the current helper's cf_run cancel flag */
    int quick_deaths;  /* helpers that died within a second of starting, in a row */
    char last_end[CF_ERROR_MSG_MAX + 64];
    /* sandbox */
    cf_cgroup *cg;
    int join_fds[MAX_JOIN_FDS];
    int n_join;
    cf_sandbox_fs *fs;
    char dir[PATH_MAX]; /* the slot's tmpfs (host path) */
    bool dir_mounted;
    uid_t host_id;
} em_slot;

typedef struct em_state {
    cf_exec_base base;
    const char *name;   /* "wasm" / "js" */
    int runtime;        /* cf_embed_runtime */
    cf_language language;
    cf_sandbox_probe probe;
    cf_seccomp_prog *seccomp;
    cf_cgroup_env *cgenv;
    char tag[64];
    char inst[PATH_MAX];
    char real_root[PATH_MAX];
    char helper[PATH_MAX];
    int helper_fd; /* the helper program, opened at create: every helper is executed from it */
    int slots;
    em_slot *slot;
    bool stopping;
    int64_t helper_memory, max_guest_memory, def_memory;
    int64_t work_bytes, inodes, module_max, fuel, cache_bytes;
} em_state;

static atomic_int instance_counter;

/* ---- the helper's life (supervisor thread) ---- */

/* Waits (s->mu held) for the slot's state to change, at most 20 ms: the
 * callers re-check their own deadline and the stopping flag. */
static void slot_wait(em_slot *s)
{
    struct timespec ts = cf_realtime_after_us(20 * 1000);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

static void slot_drop_cgroup(em_slot *s)
{
    while (s->n_join > 0)
        close(s->join_fds[--s->n_join]);
    cf_cgroup_destroy(s->cg);
    s->cg = NULL;
}

static int slot_prepare(em_state *st, em_slot *s, cf_error *err)
{
    if (!s->dir_mounted) {
        if (mkdir(s->dir, 0711) < 0 && errno != EEXIST)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: mkdir %s", st->name, s->dir);
        char opts[128];
        snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=%lld,mode=0711", (long long)st->work_bytes,
                 (long long)st->inodes);
        if (mount("tmpfs", s->dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: mounting the slot tmpfs on %s", st->name, s->dir);
        s->dir_mounted = true;
    }
    if (!s->cg && st->cgenv) {
        cf_cgroup_limits lim = {.memory_bytes = st->helper_memory, .pids_max = HELPER_PIDS};
        char name[96];
        snprintf(name, sizeof(name), "%s-s%d-g%u", st->tag, s->index, s->gen);
        if (cf_cgroup_new(st->cgenv, name, &lim, &s->cg, err) < 0)
            return -1;
        int n = cf_cgroup_join_fds(s->cg, s->join_fds, MAX_JOIN_FDS, err);
        if (n < 0) {
            slot_drop_cgroup(s);
            return -1;
        }
        s->n_join = n;
    }
    if (!s->fs) {
        cf_sandbox_bind binds[1] = {{.src = s->dir, .dst = SLOT_IN, .rw = true}};
        cf_sandbox_fs_spec fspec = {.tmp_size_bytes = 1 << 20, .nr_inodes = 256, .uid = IN_ID, .gid = IN_ID,
                                    .hostname = "embed", .binds = binds, .n_binds = 1};
        if (cf_sandbox_fs_new(&fspec, &s->fs, err) < 0)
            return -1;
    }
    return 0;
}

/* Runs one helper to its end.  Returns 0 when it ran (whatever it did). */
static int run_helper(em_state *st, em_slot *s, cf_error *err)
{
    if (slot_prepare(st, s, err) < 0)
        return -1;
    /* The last helper's processes must be gone before a new one joins.  The
     * slot keeps its cgroup for its whole life (executions read its OOM
     * count without a lock): a cgroup that does not empty is an error. */
    for (int tries = 0; s->cg && cf_cgroup_nprocs(s->cg) != 0; tries++) {
        if (tries == 20)
            return cf_error_set(err, CF_E_SANDBOX, "%s: slot %d: the last helper's processes do not go away", st->name,
                                s->index);
        cf_cgroup_kill_all(s->cg);
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: socketpair", st->name);
    char fuel_env[32], cache_env[64];
    snprintf(fuel_env, sizeof(fuel_env), "CODEFLEET_WASM_FUEL=%d", st->fuel > 0 ? 1 : 0);
    snprintf(cache_env, sizeof(cache_env), "CODEFLEET_WASM_CACHE_BYTES=%lld", (long long)st->cache_bytes);
    char *argv[] = {"embed-helper", st->runtime == CF_EMBED_WASM ? "wasm" : "js", NULL};
    char *envp[] = {fuel_env, cache_env, "PATH=/usr/bin:/bin", NULL};
    /* No init: the helper itself is pid 1 of its namespace (it forks
     * nothing), so no copy of the worker's image lives beside it. */
    /* The helper is executed from the file the worker opened at start
     * (execveat): it needs no path inside the helper's root, nor a
     * directory the run uid may search. */
    cf_run_spec spec = {.path = st->helper, .argv = argv, .envp = envp, .cwd = "/", .max_stdout = 4096,
                        .max_stderr = 16384, .pass_fd = sv[1], .exec_fd = st->helper_fd, .cancel = &s->kill,
                        .rlimits = {{RLIMIT_CORE, 0}}, .n_rlimits = 1};
    cf_sandbox_exec sx = {.seccomp = st->seccomp, .fs = s->fs, .cg = s->cg, .uid = IN_ID, .gid = IN_ID,
                          .host_uid = s->host_id, .host_gid = s->host_id, .loopback = false,
                          .hostname = "embed", .join_fds = s->join_fds, .n_join = s->n_join};
    if (cf_sandbox_exec_prepare(&sx, &spec, err) < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    if (__atomic_load_n(&st->stopping, __ATOMIC_ACQUIRE)) {
        /* destroy began meanwhile: its kill and shutdown would miss this one */
        pthread_mutex_unlock(&s->mu);
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    s->sock = sv[0];
    s->gen++;
    s->condemned = false;
    __atomic_store_n(&s->kill, 0, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);

    int64_t started = cf_mono_us();
    cf_run_outcome o;
    int rc = cf_run(&spec, &o, err); /* until the helper ends */

    pthread_mutex_lock(&s->mu);
    while (s->busy) /* the execution using it sees the end of the stream first */
        pthread_cond_wait(&s->cv, &s->mu);
    close(s->sock);
    s->sock = -1;
    if (rc == 0) {
        cf_run_outcome_describe(&o, s->last_end, sizeof(s->last_end));
    } else {
        snprintf(s->last_end, sizeof(s->last_end), "could not start: %s", err->msg);
    }
    /* Only deaths of its own count: the watchdog's kills are not the helper's fault. */
    bool killed_by_us = __atomic_load_n(&s->kill, __ATOMIC_RELAXED) != 0;
    s->quick_deaths = cf_mono_us() - started < 1000000 && !killed_by_us ? s->quick_deaths + 1 : 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (rc == 0 && !killed_by_us && !(o.exited && o.exit_code == 0) &&
        !__atomic_load_n(&st->stopping, __ATOMIC_RELAXED))
        cf_log_warn(st->name, "slot %d helper ended (%s); starting a new one", s->index, s->last_end);
    cf_run_outcome_free(&o);
    return rc;
}

static void *slot_main(void *arg)
{
    em_slot *s = arg;
    em_state *st = s->st;
    for (;;) {
        if (__atomic_load_n(&st->stopping, __ATOMIC_ACQUIRE))
            break;
        cf_error err;
        cf_error_clear(&err);
        if (run_helper(st, s, &err) < 0) {
            pthread_mutex_lock(&s->mu);
            snprintf(s->last_end, sizeof(s->last_end), "could not start: %s", err.msg);
            s->quick_deaths++;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            cf_log_error(st->name, "slot %d: cannot start the runtime helper: %s", s->index, err.msg);
        }
        /* A helper that keeps dying at once must not spin: back off up to 2 s. */
        if (s->quick_deaths > 2) {
            int64_t ms = 100LL << (s->quick_deaths > 6 ? 4 : s->quick_deaths - 2);
            if (ms > 2000)
                ms = 2000;
            for (int64_t waited = 0; waited < ms && !__atomic_load_n(&st->stopping, __ATOMIC_RELAXED); waited += 50) {
                struct timespec ts = {0, 50 * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
    }
    return NULL;
}

/* ---- create / destroy ---- */

static void em_destroy(void *state)
{
    em_state *st = state;
    if (!st)
        return;
    __atomic_store_n(&st->stopping, true, __ATOMIC_RELEASE);
    for (int i = 0; st->slot && i < st->slots; i++) {
        em_slot *s = &st->slot[i];
        pthread_mutex_lock(&s->mu);
        __atomic_store_n(&s->kill, 1, __ATOMIC_RELAXED);
        if (s->sock >= 0)
            shutdown(s->sock, SHUT_RDWR); /* the helper sees the end and exits */
        pthread_mutex_unlock(&s->mu);
    }
    for (int i = 0; st->slot && i < st->slots; i++) {
        em_slot *s = &st->slot[i];
        if (s->thread_started)
            pthread_join(s->thread, NULL);
        if (s->cg) {
            cf_cgroup_kill_all(s->cg);
            cf_error e;
            (void)cf_cgroup_remove(s->cg, &e);
        }
        slot_drop_cgroup(s);
        cf_sandbox_fs_destroy(s->fs);
        if (s->dir_mounted) {
            cf_instance_umount_below(s->dir);
            rmdir(s->dir);
        }
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    free(st->slot);
    if (st->inst[0])
        cf_instance_remove_dir(st->inst, NULL, NULL);
    cf_cgroup_env_destroy(st->cgenv);
    cf_seccomp_prog_destroy(st->seccomp);
    cf_exec_base_free(&st->base);
    if (st->helper_fd >= 0)
        close(st->helper_fd);
    free(st);
}

/* ---- the embedded runtimes' own settings (wasm and js share them) ---- */

#define MIB (1024LL * 1024)

typedef struct em_settings {
    char *helper_path;
    int64_t helper_memory_bytes;
    int64_t wasm_module_max_bytes;
    int64_t wasm_fuel;
    int64_t wasm_cache_bytes;
} em_settings;

#define EOFF(f) offsetof(em_settings, f)
static const cf_conf_prop em_props[] = {
    {"embed-helper", CF_CONF_STRING, EOFF(helper_path), 0, 1024, NULL, NULL,
     "wasm and js backends: the runtime helper program (absolute path); default: the codefleet-embed-helper "
     "installed with this worker (libexec/codefleet of its prefix; none if missing there), or for a worker run "
     "from its build tree the one built with it.  A build without the runtimes has none: those backends are then "
     "unavailable.", NULL},
    {"embed-helper-memory", CF_CONF_SIZE, EOFF(helper_memory_bytes), 256 * MIB, 1024 * 1024 * MIB, "1GiB", NULL,
     "wasm and js backends: memory cgroup of each slot's helper; a guest may use up to 128 MiB less (its "
     "default limit is sandbox-memory).", NULL},
    {"wasm-module-max", CF_CONF_SIZE, EOFF(wasm_module_max_bytes), 1024, 1024 * MIB, "16MiB", NULL,
     "wasm backend: largest module accepted; larger ones are rejected.", NULL},
    {"wasm-fuel", CF_CONF_INT, EOFF(wasm_fuel), 0, INT64_MAX, "0", NULL,
     "wasm backend: a deterministic budget of instructions per execution (wasmtime fuel); past it the result "
     "is timeout.  0: no fuel metering (it costs some speed).", NULL},
    {"wasm-cache", CF_CONF_SIZE, EOFF(wasm_cache_bytes), 0, 64 * 1024 * MIB, "64MiB", NULL,
     "wasm backend: compiled modules kept per slot, counted by module size (least recently used out).", NULL},
};

static void em_describe_helper(const cf_backend_config *cfg, char *buf, size_t cap);

const cf_backend_settings cf_embedded_settings = {
    .family = "embedded", .props = em_props, .nprops = sizeof(em_props) / sizeof(em_props[0]),
    .size = sizeof(em_settings), .describe_helper = em_describe_helper};

static void em_describe_helper(const cf_backend_config *cfg, char *buf, size_t cap)
{
    const em_settings *es = cf_backend_settings_of(cfg, &cf_embedded_settings);
    char path[PATH_MAX];
    cf_backend_helper_path(cfg, es->helper_path, "codefleet-embed-helper", CF_DEFAULT_EMBED_HELPER, path,
                           sizeof(path));
    snprintf(buf, cap, "embed helper %s", path[0] ? path : "(none)");
}

/* The slot count, the helper's memory and the guests' default limits,
 * from the worker's configuration and the backend's settings. */
static void em_limits(em_state *st, const cf_backend_config *cfg, const em_settings *es, int runtime)
{
    st->base.embedded_languages = 1u << st->language;
    st->base.embedded_runtime = runtime == CF_EMBED_WASM ? "wasmtime" : "quickjs";
    st->base.exec_where = " inside the runtime";
    st->slots = cfg->slots > 0 ? cfg->slots : 1;
    st->helper_memory = es->helper_memory_bytes > 0 ? es->helper_memory_bytes : DEFAULT_HELPER_MEMORY;
    st->max_guest_memory = st->helper_memory - HELPER_OVERHEAD;
    st->def_memory = cfg->sandbox_memory_bytes > 0 ? cfg->sandbox_memory_bytes : 256LL << 20;
    if (st->def_memory > st->max_guest_memory)
        st->def_memory = st->max_guest_memory;
    st->work_bytes = cfg->sandbox_work_bytes > 0 ? cfg->sandbox_work_bytes : DEFAULT_WORK;
    st->inodes = cfg->sandbox_inodes > 0 ? cfg->sandbox_inodes : DEFAULT_INODES;
    st->module_max = es->wasm_module_max_bytes > 0 ? es->wasm_module_max_bytes : DEFAULT_MODULE_MAX;
    st->fuel = es->wasm_fuel;
    st->cache_bytes = es->wasm_cache_bytes; /* 0: no cache (the worker's default is 64 MiB) */
}

/* The runtime helper program, checked and opened: every helper is
 * executed from that descriptor. */
static int em_open_helper(em_state *st, const cf_backend_config *cfg, const em_settings *es, cf_error *err)
{
    cf_backend_helper_path(cfg, es->helper_path, "codefleet-embed-helper", CF_DEFAULT_EMBED_HELPER, st->helper,
                           sizeof(st->helper));
    if (!st->helper[0])
        return cf_error_set(err, CF_E_UNSUPPORTED, "%s: this build has no embedded runtimes (codefleet-embed-helper)",
                            st->name);
    if (st->helper[0] != '/' || access(st->helper, X_OK) < 0)
        return cf_error_set(err, CF_E_UNSUPPORTED, "%s: the runtime helper '%s' is not an executable absolute path",
                            st->name, st->helper);
    st->helper_fd = open(st->helper, O_RDONLY | O_CLOEXEC);
    struct stat hsb;
    if (st->helper_fd < 0 || fstat(st->helper_fd, &hsb) < 0 || !S_ISREG(hsb.st_mode) || !(hsb.st_mode & S_IXOTH))
        return cf_error_set(err, CF_E_UNSUPPORTED,
                            "%s: the runtime helper '%s' is not a regular file every uid may execute", st->name,
                            st->helper);
    return 0;
}

/* What this host allows, tried for real: every namespace and seccomp, or
 * the helpers cannot be confined.  Then the filter and, where the probe
 * found them, cgroups. */
static int em_probe(em_state *st, const cf_backend_config *cfg, cf_error *err)
{
    cf_cgroup_env_opts cgo = {.own_dir = cfg->cgroup_own_dir,
                              .parent = cfg->cgroup_root && cfg->cgroup_root[0] ? cfg->cgroup_root : NULL};
    if (cf_sandbox_probe_run(&cgo, &st->probe, err) < 0)
        return -1;
    if (!st->probe.userns || !st->probe.pidns || !st->probe.mountns || !st->probe.netns || !st->probe.ipcns ||
        !st->probe.utsns || !st->probe.seccomp) {
        char matrix[1024];
        cf_sandbox_probe_describe(&st->probe, matrix, sizeof(matrix));
        for (char *p = matrix; *p; p++)
            if (*p == '\n')
                *p = ';';
        return cf_error_set(err, CF_E_UNSUPPORTED, "%s: this host cannot confine the runtime helpers (%s)", st->name,
                            matrix);
    }
    if (cf_seccomp_prog_new(NULL, &st->seccomp, err) < 0)
        return -1;
    if (st->probe.cgroup_version != 0) {
        cf_error cgerr;
        if (cf_cgroup_env_new(&cgo, &st->cgenv, &cgerr) < 0)
            st->cgenv = NULL;
    }
    return 0;
}

/* This instance's directory, a private mount so the slots' tmpfs mounts
 * below it never propagate. */
static int em_make_inst(em_state *st, cf_error *err)
{
    snprintf(st->tag, sizeof(st->tag), EM_PREFIX "%d.%d", (int)getpid(), atomic_fetch_add(&instance_counter, 1));
    if (snprintf(st->inst, sizeof(st->inst), "%s/%s", st->real_root, st->tag) >= (int)sizeof(st->inst)) {
        st->inst[0] = '\0';
        return cf_error_set(err, CF_E_LIMIT, "%s: work_root path too long", st->name);
    }
    if (mkdir(st->inst, 0711) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: mkdir %s", st->name, st->inst);
        st->inst[0] = '\0';
        return -1;
    }
    if (mount(st->inst, st->inst, NULL, MS_BIND, NULL) == 0)
        (void)mount(NULL, st->inst, NULL, MS_PRIVATE, NULL);
    return 0;
}

/* The slots: their run uids from first_uid on, locks and tmpfs paths. */
static int em_make_slots(em_state *st, int64_t first_uid, cf_error *err)
{
    st->slot = calloc((size_t)st->slots, sizeof(*st->slot));
    if (!st->slot)
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", st->name);
    for (int i = 0; i < st->slots; i++) {
        em_slot *s = &st->slot[i];
        s->st = st;
        s->index = i;
        s->sock = -1;
        s->host_id = (uid_t)(first_uid + i);
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
    }
    /* Paths in a second pass: em_destroy walks every slot, so each must
     * have its lock and sock = -1 before any can fail. */
    for (int i = 0; i < st->slots; i++) {
        em_slot *s = &st->slot[i];
        if (snprintf(s->dir, sizeof(s->dir), "%.4000s/s%d", st->inst, i) >= (int)sizeof(s->dir))
            return cf_error_set(err, CF_E_LIMIT, "%s: work_root path too long", st->name);
    }
    return 0;
}

/* The slots' supervisor threads.  The first helper is started here,
 * synchronously, and waited for, so a host where it cannot run says so at
 * start-up instead of at the first request. */
static int em_start_helpers(em_state *st, cf_error *err)
{
    if (slot_prepare(st, &st->slot[0], err) < 0)
        return -1;
    for (int i = 0; i < st->slots; i++) {
        if (pthread_create(&st->slot[i].thread, NULL, slot_main, &st->slot[i]) != 0)
            return cf_error_set(err, CF_E_SYSTEM, "%s: cannot start a supervisor thread", st->name);
        st->slot[i].thread_started = true;
    }
    em_slot *s = &st->slot[0];
    int64_t until = cf_mono_us() + START_WAIT_US;
    pthread_mutex_lock(&s->mu);
    while (s->sock < 0 && s->quick_deaths == 0 && cf_mono_us() < until) {
        slot_wait(s);
    }
    bool up = s->sock >= 0;
    char why[sizeof(s->last_end)];
    cf_strlcpy(why, s->last_end[0] ? s->last_end : "no helper within 10 s", sizeof(why));
    pthread_mutex_unlock(&s->mu);
    if (!up)
        return cf_error_set(err, CF_E_SANDBOX, "%s: the runtime helper does not start: %s", st->name, why);
    return 0;
}

/* What the backend offers, and the note on how its runtime is confined
 * and limited. */
static void em_fill_caps(em_state *st, cf_backend_caps *caps, int runtime)
{
    memset(caps, 0, sizeof(*caps));
    caps->isolation = runtime == CF_EMBED_WASM ? "wasm" : "in_process";
    caps->languages = 1u << st->language;
    caps->controls = CF_CTL_TIMEOUT | CF_CTL_CPU_TIME | CF_CTL_MEMORY | CF_CTL_MAX_PROCESSES | CF_CTL_STDOUT_CAP |
                     CF_CTL_STDERR_CAP | CF_CTL_NETWORK_DISABLED | CF_CTL_FS_NONE | CF_CTL_ENV_ALLOWLIST;
    if (runtime == CF_EMBED_WASM) {
        caps->controls |= CF_CTL_FS_WORKSPACE_RO | CF_CTL_FS_WORKSPACE_RW;
        cf_exec_notes_add(&st->base,
                          "wasmtime (WASI preview 1) in a confined helper per slot; timeout and cpu_time = epoch "
                          "deadline checked every 2 ms (blocking host calls: the watchdog replaces the helper at "
                          "the deadline + %d ms); memory = store limiter on the one linear memory a module may have "
                          "(default %lld MiB, at most %lld MiB; tables <= 2 x 200000 elements); peak_memory = the "
                          "linear memory's final size; max_processes = none can be created (WASI p1 has no process or thread "
                          "calls); network = none (no sockets preopened, empty network namespace); filesystem = "
                          "the work directory preopened only; env = exactly the request's and the allowlist; "
                          "fuel = %lld%s; modules up to %lld MiB, compiled ones cached per slot and profile (%lld MiB, 0 = off)",
                          GRACE_US / 1000, (long long)(st->def_memory >> 20),
                          (long long)(st->max_guest_memory >> 20), (long long)st->fuel,
                          st->fuel > 0 ? " instructions" : " (off)", (long long)(st->module_max >> 20),
                          (long long)(st->cache_bytes >> 20));
    } else {
        cf_exec_notes_add(&st->base,
                          "QuickJS-ng %s in a confined helper per slot, a fresh runtime per execution; timeout and "
                          "cpu_time = interrupt handler (bytecode, regexp, job queue; native built-ins: the watchdog "
                          "replaces the helper at the deadline + %d ms); memory = the runtime's allocator (default "
                          "%lld MiB, at most %lld MiB); peak_memory = the heap's largest size; max_processes, network, filesystem, env = none exist: no "
                          "host APIs but console, input and the result",
                          "0.18", GRACE_US / 1000, (long long)(st->def_memory >> 20),
                          (long long)(st->max_guest_memory >> 20));
    }
}

static int em_create(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err,
                     int runtime)
{
    *state = NULL;
    em_state *st = calloc(1, sizeof(*st));
    if (!st)
        return cf_error_set(err, CF_E_NOMEM, "embedded backend: out of memory");
    st->runtime = runtime;
    st->helper_fd = -1;
    const em_settings *es = cf_backend_settings_of(cfg, &cf_embedded_settings);
    st->name = runtime == CF_EMBED_WASM ? "wasm" : "js";
    st->language = runtime == CF_EMBED_WASM ? CF_LANG_WASM : CF_LANG_JAVASCRIPT;
    if (cf_exec_base_init(&st->base, st->name, cfg, err) < 0)
        goto fail;
    em_limits(st, cfg, es, runtime);
    int64_t uid_base = cfg->run_uid_base > 0 ? cfg->run_uid_base : CF_RUN_UID_BASE_DEFAULT;
    /* Blocks 1 and 2 (cf_uid_block): the sandbox has base .. base+slots-1. */
    int64_t first_uid = cf_run_uid(uid_base, st->slots, runtime == CF_EMBED_WASM ? CF_UID_BLOCK_WASM : CF_UID_BLOCK_JS, 0);
    if (first_uid + st->slots > INT32_MAX) {
        cf_error_set(err, CF_E_INVALID, "%s: run_uid_base %lld too large", st->name, (long long)uid_base);
        goto fail;
    }
    if (em_open_helper(st, cfg, es, err) < 0)
        goto fail;
    if (geteuid() != 0) {
        cf_error_set(err, CF_E_UNSUPPORTED, "%s: the worker must run as root to confine the runtime helpers",
                     st->name);
        goto fail;
    }
    if (!realpath(st->base.work_root, st->real_root)) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: work_root '%s'", st->name, st->base.work_root);
        goto fail;
    }
    if (em_probe(st, cfg, err) < 0)
        goto fail;
    cf_instance_swept swept;
    cf_instance_sweep_opts so = {.real_root = st->real_root, .cgenv = st->cgenv, .prefix = EM_PREFIX,
                                 .log_sub = st->name};
    cf_instance_sweep(&so, &swept);
    if (em_make_inst(st, err) < 0 || em_make_slots(st, first_uid, err) < 0 || em_start_helpers(st, err) < 0)
        goto fail;

    em_fill_caps(st, caps, runtime);
    if (!st->cgenv)
        cf_exec_notes_add(&st->base, "NO cgroup around the helpers (%s): a runtime bug could use the host's memory",
                          st->probe.cgroup_note[0] ? st->probe.cgroup_note : "cgroups unusable");
    if (swept.instances)
        cf_exec_notes_add(&st->base, "swept %d stale dir(s) and %d cgroup(s) of dead workers", swept.dirs,
                          swept.cgroups);
    caps->notes = st->base.notes;
    *state = st;
    return 0;
fail:
    em_destroy(st);
    return -1;
}

static int wasm_create(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err)
{
    return em_create(cfg, state, caps, err, CF_EMBED_WASM);
}

static int js_create(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err)
{
    return em_create(cfg, state, caps, err, CF_EMBED_JS);
}

/* ---- per execution ---- */

/* Waits for the slot's helper of a generation newer than `after` (0: any)
 * and takes it.  Returns the socket or -1 (err: none came up). */
static int take_helper(em_slot *s, unsigned after, unsigned *gen, cf_error *err)
{
    int64_t until = cf_mono_us() + START_WAIT_US;
    pthread_mutex_lock(&s->mu);
    while ((s->sock < 0 || s->gen == after || s->condemned) && cf_mono_us() < until &&
           !__atomic_load_n(&s->st->stopping, __ATOMIC_ACQUIRE)) {
        slot_wait(s);
    }
    int fd = -1;
    if (s->sock >= 0 && s->gen != after && !s->condemned) {
        fd = s->sock;
        *gen = s->gen;
        s->busy = true;
    } else {
        cf_error_set(err, CF_E_SANDBOX, "%s: no runtime helper on slot %d (%s)", s->st->name, s->index,
                     s->last_end[0] ? s->last_end : "not started");
        if (err)
            err->retriable = true;
    }
    pthread_mutex_unlock(&s->mu);
    return fd;
}

/* kill_it: the helper is dead, late or talking nonsense.  It is condemned
 * at once (no execution gets its socket again, and shutting the socket
 * down makes a late reply impossible to read), then killed by its
 * supervisor's cf_run. */
static void release_helper(em_slot *s, bool kill_it)
{
    pthread_mutex_lock(&s->mu);
    s->busy = false;
    if (kill_it) {
        s->condemned = true;
        if (s->sock >= 0)
            shutdown(s->sock, SHUT_RDWR);
        __atomic_store_n(&s->kill, 1, __ATOMIC_RELAXED);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static char *dup_path(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* Text from the helper (which may be compromised) as the result shows it:
 * printable, bounded; newlines kept only where asked. */
static char *clean_text(const char *s, bool keep_newlines)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *buf = malloc(n);
    if (buf)
        cf_sanitize_text(s, n - 1, keep_newlines, buf, n);
    return buf;
}

static void add_diag(cf_result *res, const char *level, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add_diag(cf_result *res, const char *level, const char *file, const char *fmt, ...)
{
    char text[CF_EMBED_TEXT_MAX * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    cf_diagnostic *v = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*v));
    if (!v)
        return;
    res->diagnostics = v;
    cf_diagnostic *d = &v[res->n_diagnostics];
    memset(d, 0, sizeof(*d));
    d->level = cf_strdup(level);
    d->message = clean_text(text, true);
    d->file = file ? cf_strdup(file) : NULL;
    if (!d->level || !d->message || (file && !d->file)) {
        free(d->level);
        free(d->message);
        free(d->file);
        return;
    }
    res->n_diagnostics++;
}

/* The helper's diagnostic text as one error (it is already bounded by the
 * reply's decoder, 64 KiB). */
static void add_error_diag(cf_result *res, const char *text)
{
    cf_diagnostic *v = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*v));
    if (!v)
        return;
    res->diagnostics = v;
    cf_diagnostic *d = &v[res->n_diagnostics];
    memset(d, 0, sizeof(*d));
    d->level = cf_strdup("error");
    d->message = clean_text(text, true);
    if (!d->level || !d->message) {
        free(d->level);
        free(d->message);
        return;
    }
    res->n_diagnostics++;
}

/* Fills the job the helper gets from the execution's prepared directories. */
static int build_job(em_state *st, const cf_exec_ctx *ctx, const cf_request *req, const cf_exec_job *job,
                     cf_embed_job *ej, cf_error *err)
{
    const cf_policy *pol = &req->policy;
    const char *top = strrchr(cf_workdir_path(job->top), '/');
    const char *wname = strrchr(cf_workdir_path(job->work), '/');
    const char *rname = strrchr(cf_workdir_path(job->run), '/');
    if (!top || !wname || !rname)
        return cf_error_set(err, CF_E_SANDBOX, "%s: unexpected work directory layout", st->name);
    char topin[PATH_MAX];
    snprintf(topin, sizeof(topin), SLOT_IN "%s", top);
    ej->runtime = st->runtime;
    ej->cache_scope = cf_strdup(ctx->profile ? ctx->profile : "");
    ej->work_dir = dup_path(topin, wname + 1);
    ej->run_dir = dup_path(topin, rname + 1);
    ej->out_dir = ej->run_dir ? dup_path(ej->run_dir, "out") : NULL;
    ej->code_path = ej->run_dir ? dup_path(ej->run_dir, job->code_file) : NULL;
    ej->output_path = ej->out_dir ? dup_path(ej->out_dir, "output.json") : NULL;
    ej->input_path = req->input.len > 0 && ej->run_dir ? dup_path(ej->run_dir, "input.json") : NULL;
    ej->work_rw = !(pol->fs_mode == CF_FS_WORKSPACE_RO || (ctx->files && ctx->files->read_only));
    /* argv[0] is the program's own name, as a WASI program expects. */
    ej->argc = req->argc + 1;
    ej->argv = calloc(ej->argc + 1, sizeof(char *));
    ej->envc = job->env.n;
    ej->env = calloc(ej->envc + 1, sizeof(char *));
    if (!ej->cache_scope || !ej->work_dir || !ej->run_dir || !ej->out_dir || !ej->code_path || !ej->output_path ||
        (req->input.len > 0 && !ej->input_path) || !ej->argv || !ej->env)
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", st->name);
    ej->argv[0] = cf_strdup(job->code_file);
    for (size_t i = 0; i < req->argc; i++)
        ej->argv[i + 1] = cf_strdup(req->argv[i]);
    for (size_t i = 0; i < ej->envc; i++)
        ej->env[i] = cf_strdup(job->env.v[i]);
    for (size_t i = 0; i < ej->argc; i++)
        if (!ej->argv[i])
            return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", st->name);
    for (size_t i = 0; i < ej->envc; i++)
        if (!ej->env[i])
            return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", st->name);
    if (req->stdin_data.len > 0) {
        ej->stdin_data = malloc(req->stdin_data.len);
        if (!ej->stdin_data)
            return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", st->name);
        memcpy(ej->stdin_data, req->stdin_data.data, req->stdin_data.len);
        ej->stdin_len = req->stdin_data.len;
    }
    ej->cpu_time_us = pol->cpu_time_us;
    ej->memory_bytes = pol->memory_bytes > 0 ? pol->memory_bytes : st->def_memory;
    /* 0 = the default cap, as exec_common gives the other backends */
    ej->max_stdout = pol->max_stdout_bytes > 0 ? pol->max_stdout_bytes : FALLBACK_OUTPUT_CAP;
    ej->max_stderr = pol->max_stderr_bytes > 0 ? pol->max_stderr_bytes : FALLBACK_OUTPUT_CAP;
    ej->fuel = st->fuel;
    return 0;
}

/* The js backend places no files (a script sees none): the job carries
 * the code and the input inline and the output comes back in the reply. */
static int build_inline_job(em_state *st, const cf_exec_ctx *ctx, const cf_request *req, cf_exec_job *job,
                            cf_embed_job *ej, cf_error *err)
{
    const cf_policy *pol = &req->policy;
    ej->runtime = st->runtime;
    ej->cache_scope = cf_strdup(ctx->profile ? ctx->profile : "");
    ej->code = malloc(req->code.len ? req->code.len : 1);
    ej->argc = 1;
    ej->argv = calloc(2, sizeof(char *));
    ej->env = calloc(1, sizeof(char *));
    if (!ej->cache_scope || !ej->code || !ej->argv || !ej->env || !(ej->argv[0] = cf_strdup("main.js")))
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", st->name);
    if (req->code.len)
        memcpy(ej->code, req->code.data, req->code.len);
    ej->code_len = req->code.len;
    if (req->input.len > 0 && (cf_exec_input_json(job, &ej->input_json, err) < 0 || job->rejected))
        return job->rejected ? 0 : -1;
    /* JSON can be several times the input's msgpack size (control
     * characters become \u00XX): refuse what the helper would not read. */
    size_t total = req->code.len + (ej->input_json ? strlen(ej->input_json) : 0);
    if (total > CF_EMBED_JOB_FRAME_MAX - (1u << 20)) {
        cf_exec_reject(job->res, "code and input (as JSON) together are %zu bytes, more than backend 'js' takes (%u MiB)",
                       total, (CF_EMBED_JOB_FRAME_MAX >> 20) - 1);
        job->rejected = true;
        return 0;
    }
    ej->cpu_time_us = pol->cpu_time_us;
    ej->memory_bytes = pol->memory_bytes > 0 ? pol->memory_bytes : st->def_memory;
    ej->max_stdout = pol->max_stdout_bytes > 0 ? pol->max_stdout_bytes : FALLBACK_OUTPUT_CAP;
    ej->max_stderr = pol->max_stderr_bytes > 0 ? pol->max_stderr_bytes : FALLBACK_OUTPUT_CAP;
    ej->max_output = (int64_t)st->base.max_output_file_bytes;
    return 0;
}

typedef enum attempt_end {
    ATTEMPT_REPLY,     /* the helper answered this job */
    ATTEMPT_TIMEOUT,   /* the watchdog gave up on it */
    ATTEMPT_CANCELLED, /* the worker cancelled the execution */
    ATTEMPT_BROKEN,    /* the helper died or talked nonsense (died says how) */
    ATTEMPT_ERROR,     /* no helper, or ours broke (err) */
} attempt_end;

/* One job on the slot's current helper, until deadline_us. */
static attempt_end attempt(em_slot *s, const cf_exec_ctx *ctx, cf_embed_job *ej, int64_t deadline_us,
                           unsigned *gen, cf_embed_reply *reply, char *died, size_t died_size, cf_error *err)
{
    int fd = take_helper(s, *gen, gen, err);
    if (fd < 0)
        return ATTEMPT_ERROR;
    ej->seq = ++s->seq; /* busy: only this execution touches the slot's seq now */
    cf_buf frame, in;
    cf_buf_init(&frame, 0);
    cf_buf_init(&in, 0);
    if (cf_embed_job_encode(ej, &frame, err) < 0) {
        release_helper(s, false);
        cf_buf_free(&frame);
        return ATTEMPT_ERROR;
    }
    cf_error ioerr;
    cf_error_clear(&ioerr);
    size_t max_frame =
        (size_t)ej->max_stdout + (size_t)ej->max_stderr + (size_t)ej->max_output + 16 * CF_EMBED_TEXT_MAX + 4096;
    attempt_end end;
    if (cf_embed_write_frame(fd, &frame, deadline_us, ctx->cancel, &ioerr) == 0 &&
        cf_embed_read_frame(fd, max_frame, deadline_us, ctx->cancel, &in, &ioerr) == 0 &&
        cf_embed_reply_decode(in.data, in.len, (size_t)ej->max_stdout, (size_t)ej->max_stderr, (size_t)ej->max_output,
                              reply, &ioerr) == 0) {
        if (reply->seq == ej->seq && (reply->has_output || reply->output_too_big) &&
            (reply->end != CF_EMBED_EXITED || (reply->has_output && reply->output_too_big) || ej->max_output == 0)) {
            snprintf(died, died_size, "an output with a reply that cannot carry one");
            cf_embed_reply_free(reply);
            cf_embed_reply_init(reply);
            end = ATTEMPT_BROKEN;
        } else if (reply->seq == ej->seq) {
            end = ATTEMPT_REPLY;
        } else {
            snprintf(died, died_size, "a reply for job %llu, not %llu", (unsigned long long)reply->seq,
                     (unsigned long long)ej->seq);
            cf_embed_reply_free(reply);
            cf_embed_reply_init(reply);
            end = ATTEMPT_BROKEN;
        }
    } else if (ioerr.code == CF_E_TIMEOUT) {
        end = ioerr.sys_errno == ECANCELED ? ATTEMPT_CANCELLED : ATTEMPT_TIMEOUT;
    } else {
        snprintf(died, died_size, "%s", ioerr.msg);
        end = ATTEMPT_BROKEN;
    }
    /* Anything but an answer to this very job: the helper goes. */
    release_helper(s, end != ATTEMPT_REPLY);
    cf_buf_free(&frame);
    cf_buf_free(&in);
    return end;
}

/* One execution on an embedded backend: what its steps share. */
typedef struct em_exec {
    em_state *st;
    em_slot *s;
    const cf_exec_ctx *ctx;
    const cf_request *req;
    cf_result *res;
    cf_exec_job job;
    cf_embed_job ej;
    cf_embed_reply reply;
    cf_run_outcome outcome;
    int64_t timeout;    /* the request's, or the fallback */
    int64_t deadline;   /* monotonic: the whole execution, a retry included, with the grace */
    int64_t oom_before; /* the slot cgroup's OOM kills before, -1: unknown */
    char died[CF_ERROR_MSG_MAX]; /* how the helper broke */
} em_exec;

/* What this backend refuses of an otherwise valid request; true with res
 * filled (rejected). */
static bool em_refused(const em_state *st, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res)
{
    const cf_policy *pol = &req->policy;
    if (ctx->program) {
        if (st->runtime == CF_EMBED_JS)
            cf_exec_reject(res, "backend 'js' needs no function harness: a global run(input) is called "
                                "automatically (schema/SPEC.md 3.4)");
        else
            cf_exec_reject(res, "backend 'wasm' runs modules, not compiled programs");
        return true;
    }
    if (st->runtime == CF_EMBED_JS && (req->argc > 0 || req->stdin_data.len > 0 || req->n_files > 0)) {
        cf_exec_reject(res, "backend 'js' gives a script no %s (use input)",
                       req->argc > 0 ? "arguments" : req->stdin_data.len > 0 ? "stdin" : "files");
        return true;
    }
    /* The request's own size and number exactly, the limit for people. */
    char max[32];
    if (req->language == CF_LANG_WASM && (int64_t)req->module.len > st->module_max) {
        cf_format_size(st->module_max, max, sizeof(max));
        cf_exec_reject(res, "module of %zu bytes exceeds this backend's limit of %s", req->module.len, max);
        return true;
    }
    if (pol->memory_bytes > st->max_guest_memory) {
        cf_format_size(st->max_guest_memory, max, sizeof(max));
        cf_exec_reject(res, "memory_bytes %lld exceeds backend '%s''s maximum of %s", (long long)pol->memory_bytes,
                       st->name, max);
        return true;
    }
    return false;
}

/* What a result's meta.isolation says of this runtime. */
static const char *em_isolation(const em_state *st)
{
    return st->runtime == CF_EMBED_WASM ? "wasm" : "in_process";
}

/* Before a second attempt: the first one's job, files and result go, and
 * the request is checked into a fresh job. */
static int em_reset_job(em_exec *x, cf_error *err)
{
    em_state *st = x->st;
    cf_exec_job_free(&x->job);
    cf_embed_job_free(&x->ej);
    memset(&x->ej, 0, sizeof(x->ej));
    cf_result_clear(x->res);
    memset(x->res, 0, sizeof(*x->res));
    return cf_exec_job_check(&x->job, &st->base, st->name, em_isolation(st), x->ctx, x->req, x->res, err);
}

/* The helper's job: inline for js; for wasm the execution's directories
 * in the slot's tmpfs, filled, then the job naming them. */
static int em_prepare_job(em_exec *x, cf_error *err)
{
    em_state *st = x->st;
    em_slot *s = x->s;
    if (st->runtime == CF_EMBED_JS)
        return build_inline_job(st, x->ctx, x->req, &x->job, &x->ej, err);
    if (cf_exec_job_dirs(&x->job, s->dir, s->host_id, s->host_id, err) < 0)
        return -1;
    cf_exec_view view = {.work = "/work", .run = "/run/codefleet"};
    if (cf_exec_job_fill(&x->job, x->ctx->files, &view, err) < 0)
        return -1;
    if (!x->job.rejected && build_job(st, x->ctx, x->req, &x->job, &x->ej, err) < 0)
        return -1;
    return 0;
}

/* The job on the slot's helper.  A helper that dies during the job is
 * replaced and the job runs once more, from freshly placed files, in the
 * time that is left.  Returns how the last attempt ended (ATTEMPT_ERROR
 * also when preparing failed, or *rejected when the request was). */
static attempt_end em_attempts(em_exec *x, bool *rejected, cf_error *err)
{
    attempt_end end = ATTEMPT_ERROR;
    unsigned gen = 0;
    for (int attempt_no = 0; attempt_no < 2; attempt_no++) {
        if (attempt_no > 0 && em_reset_job(x, err) < 0)
            return ATTEMPT_ERROR;
        if (em_prepare_job(x, err) < 0)
            return ATTEMPT_ERROR;
        if (x->job.rejected) {
            *rejected = true;
            return ATTEMPT_ERROR;
        }
        /* the helper's own deadline: what is left, the grace is the watchdog's */
        x->ej.timeout_us = x->deadline - GRACE_US - cf_mono_us();
        if (attempt_no > 0 && x->ej.timeout_us < 1000)
            break; /* no time left for a second run: the first death stands */
        if (x->ej.timeout_us < 1)
            x->ej.timeout_us = 1; /* preparing took the whole (tiny) timeout: the helper says timeout */
        end = attempt(x->s, x->ctx, &x->ej, x->deadline, &gen, &x->reply, x->died, sizeof(x->died), err);
        if (end != ATTEMPT_BROKEN)
            break;
        if (x->s->cg && x->oom_before >= 0 && cf_cgroup_oom_kills(x->s->cg) > x->oom_before)
            break; /* the memory cgroup's OOM killer: not worth a retry */
    }
    return end;
}

/* A helper that broke on this request (not the memory cgroup's doing):
 * the backend's fault, not retried elsewhere. */
static int em_broken(const em_exec *x, cf_error *err)
{
    em_slot *s = x->s;
    pthread_mutex_lock(&s->mu);
    char how[sizeof(s->last_end)];
    cf_strlcpy(how, s->last_end, sizeof(how));
    pthread_mutex_unlock(&s->mu);
    cf_error_set(err, CF_E_SANDBOX, "%s: the runtime helper failed on this request (%s; last helper: %s)",
                 x->st->name, x->died[0] ? x->died : "no answer", how[0] ? how : "?");
    if (err)
        err->retriable = false;
    return -1;
}

/* The reply (or how the attempt ended) as a runner outcome, so
 * exec_common maps it like any run; the reply's output is moved. */
static void em_outcome(em_exec *x, attempt_end end)
{
    cf_run_outcome *o = &x->outcome;
    cf_embed_reply *r = &x->reply;
    cf_buf_init(&o->out, 0);
    cf_buf_init(&o->err, 0);
    if (end == ATTEMPT_REPLY) {
        bool stopped = r->end == CF_EMBED_TIMEOUT || r->end == CF_EMBED_CPU_EXCEEDED || r->end == CF_EMBED_MEMORY;
        o->exited = !stopped;
        o->exit_code = r->end == CF_EMBED_EXITED ? r->exit_code : stopped ? 0 : 1;
        o->out = r->out;
        o->err = r->err;
        cf_buf_init(&r->out, 0);
        cf_buf_init(&r->err, 0);
        o->out_truncated = r->out_truncated;
        o->err_truncated = r->err_truncated;
        o->wall_us = r->wall_us;
        o->cpu_us = r->cpu_us;
        o->peak_rss_bytes = r->peak_memory_bytes;
        o->timed_out = r->end == CF_EMBED_TIMEOUT;
        o->cpu_exceeded = r->end == CF_EMBED_CPU_EXCEEDED;
    } else if (end == ATTEMPT_TIMEOUT) {
        o->timed_out = true;
        o->wall_us = x->timeout + GRACE_US;
    } else if (end == ATTEMPT_CANCELLED) {
        o->cancelled = true;
    } /* else: killed by the memory cgroup */
}

/* The status and reason the helper's reply gives the result (beyond
 * what the outcome said).  -1: the helper itself failed. */
static int em_reply_status(const em_exec *x, cf_result *res, cf_error *err)
{
    const cf_embed_reply *r = &x->reply;
    int rc = 0;
    char *why = clean_text(r->reason, false);
    switch (r->end) {
    case CF_EMBED_FAILED:
        res->status = CF_STATUS_FAILED;
        if (why)
            cf_result_set_reason(res, "%s", why);
        if (r->diagnostics)
            add_error_diag(res, r->diagnostics);
        break;
    case CF_EMBED_MEMORY: {
        char lim[32];
        cf_format_size(x->ej.memory_bytes, lim, sizeof(lim));
        res->status = CF_STATUS_MEMORY_EXCEEDED;
        if (why && strstr(why, "memory limit"))
            cf_result_set_reason(res, "%s", why);
        else if (why)
            cf_result_set_reason(res, "memory limit of %s exceeded (%s)", lim, why);
        else
            cf_result_set_reason(res, "memory limit of %s exceeded", lim);
        break;
    }
    case CF_EMBED_CPU_EXCEEDED:
        if (why && x->st->fuel > 0 && strstr(why, "fuel"))
            cf_result_set_reason(res, "%s", why);
        break;
    case CF_EMBED_BAD_PROGRAM:
        res->status = CF_STATUS_COMPILE_FAILED;
        cf_result_set_reason(res, "%s", why ? why : "the module could not be compiled");
        break;
    case CF_EMBED_LINK_FAILED:
        res->status = CF_STATUS_FAILED;
        cf_result_set_reason(res, "%s", why ? why : "the module could not be linked");
        break;
    case CF_EMBED_HELPER_ERROR:
        cf_error_set(err, CF_E_SANDBOX, "%s: runtime helper: %s", x->st->name, why ? why : "error");
        rc = -1;
        break;
    default:
        break;
    }
    free(why);
    return rc;
}

/* The result from how the execution ended: exec_common's mapping of the
 * outcome, then the reply's output, its warnings and its status. */
static int em_finish(em_exec *x, attempt_end end, bool oom_killed, cf_error *err)
{
    cf_result *res = x->res;
    const cf_embed_reply *r = &x->reply;
    em_outcome(x, end);
    int rc = cf_exec_job_finish(&x->job, x->ctx, &x->outcome,
                                oom_killed || (end == ATTEMPT_REPLY && r->end == CF_EMBED_MEMORY), -1, err);
    if (rc == 0 && end == ATTEMPT_REPLY && r->has_output)
        cf_exec_output_json(&x->job, (const char *)r->output.data, r->output.len);
    if (rc == 0 && end == ATTEMPT_REPLY && r->output_too_big)
        add_diag(res, "warning", "output.json", "the result was ignored: its JSON is larger than %lld bytes",
                 (long long)x->ej.max_output);
    if (rc == 0 && end == ATTEMPT_REPLY)
        rc = em_reply_status(x, res, err);
    return rc;
}

static int em_execute(void *state, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err)
{
    em_state *st = state;
    const cf_policy *pol = &req->policy;
    em_exec x = {.st = st, .ctx = ctx, .req = req, .res = res};
    cf_embed_reply_init(&x.reply);

    int open = cf_exec_job_open(&x.job, &st->base, st->name, em_isolation(st), st->slots, ctx, req, res, err);
    if (open <= 0)
        return open;
    if (em_refused(st, ctx, req, res))
        return 0;
    x.s = &st->slot[ctx->slot];
    x.timeout = pol->timeout_us > 0 ? pol->timeout_us : CF_EXEC_FALLBACK_TIMEOUT_US;
    /* The whole execution, a retry included, ends by the deadline + grace. */
    x.deadline = cf_mono_us() + x.timeout + GRACE_US;
    x.oom_before = x.s->cg ? cf_cgroup_oom_kills(x.s->cg) : -1;

    int rc = -1;
    bool rejected = false;
    attempt_end end = em_attempts(&x, &rejected, err);
    if (rejected) {
        rc = 0;
    } else if (end != ATTEMPT_ERROR) {
        bool oom_killed = x.s->cg && x.oom_before >= 0 && cf_cgroup_oom_kills(x.s->cg) > x.oom_before;
        if (end == ATTEMPT_BROKEN && !oom_killed)
            rc = em_broken(&x, err);
        else
            rc = em_finish(&x, end, oom_killed, err);
    }
    cf_embed_reply_free(&x.reply);
    cf_exec_job_free(&x.job);
    cf_embed_job_free(&x.ej);
    cf_run_outcome_free(&x.outcome);
    return rc;
}

const cf_backend_ops cf_backend_wasm_ops = {
    .name = "wasm",
    .description = "WebAssembly (WASI preview 1) modules in wasmtime, in confined pre-started helpers (wasm)",
    .settings = &cf_embedded_settings,
    .create = wasm_create,
    .destroy = em_destroy,
    .execute = em_execute,
};

const cf_backend_ops cf_backend_js_ops = {
    .name = "js",
    .description = "JavaScript in QuickJS-ng, a fresh runtime per execution, in confined pre-started helpers "
                   "(in_process)",
    .settings = &cf_embedded_settings,
    .create = js_create,
    .destroy = em_destroy,
    .execute = em_execute,
};
