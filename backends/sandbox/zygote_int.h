/* sandbox_zygote: the worker's side of a slot's codefleet-zygote.
 *
 * A zygote (backends/sandbox/zygote_main.c) is a Python interpreter started
 * and initialised once per sandbox slot, inside the sandbox's confinement,
 * which makes each execution's namespaces by forking itself: a Python
 * program then costs a fork instead of an interpreter start, and any other
 * program a fork of a small process instead of one of the worker.
 *
 * Per slot this module owns:
 *   - a supervisor thread that starts the zygote (cf_run, for the
 *     zygote's whole life) and replaces it when it ends, with back-off;
 *   - the zygote's cgroup (its own memory and process caps);
 *   - the executions' cgroup (reused: emptied and given the request's
 *     limits before each execution, replaced when it will not empty);
 *   - the share: a small shared tmpfs at <inst>/z<slot>, bound into the
 *     zygote (which receives mounts made below it), where each execution's
 *     own tmpfs is mounted at m/ before the request and unmounted after.
 *
 * An execution: cf_zygote_acquire (never waits: a zygote not up serves
 * nothing, the caller takes another path), cf_zygote_exec_cgroup,
 * cf_zygote_mount, the request's files placed below cf_zygote_mount_dir,
 * cf_zygote_run, cf_zygote_umount, cf_zygote_release.  One execution at a
 * time per zygote. */
#ifndef CF_SANDBOX_ZYGOTE_H
#define CF_SANDBOX_ZYGOTE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cf_error.h"
#include "cf_runner.h"
#include "cf_cgroup.h"
#include "cf_seccomp.h"

typedef struct cf_zygote_opts {
    int slot;
    const char *tag;            /* the backend instance's tag (cgroup names), e.g. cfsb-<pid>.<n> */
    const char *inst;           /* the instance directory (a private mount), the share goes below it */
    cf_cgroup_env *cgenv;       /* required: the zygote is offered only with cgroups */
    const cf_seccomp_prog *seccomp; /* the executions' filter (required) */
    const char *zygote_path;    /* codefleet-zygote (for messages) */
    int zygote_fd;              /* the program, opened by the caller (kept open by it) */
    const char *python_path;    /* the interpreter it embeds stands for */
    const char *preload;        /* comma-separated module names */
    const char *exec_path;      /* PATH of the zygote's own environment */
    uid_t host_id;              /* the slot's run uid/gid outside */
    int64_t zygote_memory;      /* the zygote's own cgroup */
    int64_t work_bytes, tmp_bytes, inodes;
    int max_requests;           /* executions per zygote before it is replaced */
    const char *const *toolchain_dirs; /* bound read-only, as for the sandbox (may be NULL) */
} cf_zygote_opts;

typedef struct cf_zygote cf_zygote;

/* Makes the share and starts the supervisor thread; the zygote itself
 * comes up in the background.  *out owned by the caller. */
int cf_zygote_new(const cf_zygote_opts *opts, cf_zygote **out, cf_error *err);
/* Stops the zygote (killing what runs in it) and removes what was made. */
void cf_zygote_destroy(cf_zygote *z);

/* Takes the zygote for one execution of `owner` (the request's profile,
 * its tenant; NULL: none) when it is up and free; false otherwise (it is
 * starting, restarting or in use).  A zygote serves one owner, the first
 * that takes it: executions of one zygote share its hash seed, address
 * layout and stack canary.  Asked by another, it is replaced (false: that
 * execution starts cold, the next finds a zygote of its own). */
bool cf_zygote_acquire(cf_zygote *z, const char *owner);
void cf_zygote_release(cf_zygote *z);

/* What the zygote said when it came up (valid while acquired). */
bool cf_zygote_lc_ctype(const cf_zygote *z);
/* Whether a top-level entry of the work directory named `name` (a file
 * "json.py", a package directory "json", an extension "_json.cpython...so")
 * could shadow a module the zygote has loaded, or be picked up at start
 * (sitecustomize, usercustomize, .local): such executions go cold, where
 * the file would have been seen. */
bool cf_zygote_shadows(const cf_zygote *z, const char *name);

/* The executions' cgroup, emptied and with lim set; NULL with err when it
 * cannot be had. */
cf_cgroup *cf_zygote_exec_cgroup(cf_zygote *z, const cf_cgroup_limits *lim, cf_error *err);

/* Mounts this execution's tmpfs (work_bytes, inodes) in the share;
 * cf_zygote_mount_dir is its host path.  cf_zygote_umount takes it down
 * with everything in it. */
int cf_zygote_mount(cf_zygote *z, cf_error *err);
const char *cf_zygote_mount_dir(const cf_zygote *z);
void cf_zygote_umount(cf_zygote *z);

typedef struct cf_zygote_run_args {
    const char *top;      /* the execution's directory name in the mount (cf-XXXXXX) */
    bool python;          /* run spec->argv[1] in the interpreter; else execve spec->path */
    bool work_ro;
    int64_t cpu_rlimit_s; /* the RLIMIT_CPU backstop, 0: none */
    int64_t tmp_bytes;    /* the execution's fresh /tmp and /dev/shm */
    int64_t inodes;
} cf_zygote_run_args;

/* Runs one execution: the zygote makes its init, which the worker puts in
 * cg before releasing it; then supervised as cf_run does (spec: path,
 * argv, envp, cwd, rlimits, stdin, caps, timeout, cancel, on_output, cpu
 * hook; kill_all is set here: cg's processes).  Returns 0 when it ran.  -1
 * with *nothing_ran when the zygote could not start it (it is then
 * replaced and the caller may run the request another way), -1 otherwise
 * when supervising failed. */
int cf_zygote_run(cf_zygote *z, const cf_zygote_run_args *a, cf_cgroup *cg, const cf_run_spec *spec,
                  cf_run_outcome *out, bool *nothing_ran, cf_error *err);

/* For tests and logs. */
typedef struct cf_zygote_stats {
    bool up;              /* a zygote is running and said HELLO */
    pid_t pid;            /* its pid in the worker's namespace, -1 */
    unsigned starts;      /* zygotes started so far */
    uint64_t runs;        /* executions started in zygotes */
    char last_end[256];   /* how the last zygote ended */
    unsigned owner_changes; /* zygotes replaced because another tenant asked */
    char owner[130];      /* the tenant the current zygote serves ("" none yet) */
    char python_version[32];
} cf_zygote_stats;
void cf_zygote_get_stats(cf_zygote *z, cf_zygote_stats *s);

#endif
