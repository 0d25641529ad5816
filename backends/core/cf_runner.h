/* cf_runner: spawn one program and supervise it to the end.
 *
 * Shared by every process-based backend (process, sandbox, container):
 * they differ only in what happens in the child before exec (child_setup)
 * and in the parent right after the child exists (parent_setup), and in how
 * "kill everything of this execution" is done (kill_all).
 *
 * What the runner guarantees:
 *   - the child starts in a new session and process group, with stdin,
 *     stdout and stderr on pipes and every other fd closed;
 *   - stdin is fed, stdout/stderr drained concurrently (poll), each capped:
 *     bytes past the cap are read and discarded (the flag says so), so a
 *     child never blocks on a full pipe and the worker never buffers more
 *     than the caps; a child that ignores its stdin does not block anyone;
 *   - the wall-clock timeout (and cancel) kill every process of the
 *     execution (kill_all, default: the process group);
 *   - with a cpu_usage_us hook, the execution's total CPU time is polled
 *     every CF_RUN_CPU_POLL_US while it runs (and once after the main
 *     process exited) and everything is killed once it exceeds
 *     cpu_limit_us;
 *   - when the main process exits, leftover processes are killed too and the
 *     pipes are drained without blocking;
 *   - failures in the child before exec travel back over a CLOEXEC pipe and
 *     are reported as setup failures (the sandbox broke), not user failures;
 *     a failing execve itself is reported apart (outcome.exec_failed): the
 *     caller decides whose mistake the program's path was.
 */
#ifndef CF_RUNNER_H
#define CF_RUNNER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "cf_error.h"
#include "cf_util.h"

#define CF_RUN_MAX_RLIMITS 8

/* How often the cpu_usage_us hook is polled while the program runs. */
#define CF_RUN_CPU_POLL_US 20000

typedef struct cf_run_rlimit {
    int resource; /* RLIMIT_* */
    rlim_t value; /* soft = hard = value, except RLIMIT_CPU (hard = soft + 1s) */
} cf_run_rlimit;

typedef struct cf_run_spec {
    const char *path;      /* absolute path of the program to exec */
    char *const *argv;
    char *const *envp;
    const char *cwd;       /* chdir() target in the child (after child_setup) */
    const uint8_t *stdin_data;
    size_t stdin_len;
    size_t max_stdout;
    size_t max_stderr;
    int64_t timeout_us;    /* wall clock; 0 = none (not allowed by backends) */
    cf_run_rlimit rlimits[CF_RUN_MAX_RLIMITS];
    int n_rlimits;
    bool set_ids;          /* setgid/setgroups/setuid to uid/gid before exec */
    uid_t uid;
    gid_t gid;
    /* The stdio pipes are the worker's (owner root, mode 0600): a program
     * running as another uid could not reopen them by name (/dev/stdin,
     * /proc/self/fd/1: EACCES).  They are given to uid/gid with set_ids,
     * and to stdio_uid/stdio_gid (host ids) when stdio_owner_set (ids that
     * change inside a user namespace).  Only these three pipes change. */
    bool stdio_owner_set;
    uid_t stdio_uid;
    gid_t stdio_gid;
    int clone_flags;       /* extra CLONE_NEW* flags for the child (sandbox) */
    /* With CLONE_NEWUSER, > 0: the user namespace is created by this host
     * uid instead of root.  The kernel charges per-user counters (inotify
     * instances and watches, user namespaces, queued signals, locked
     * memory) of everything inside a namespace to its creator as well, so
     * a namespace created by root lets its program use up root's share of
     * the host's; created by the run uid, it uses up only that uid's. */
    uid_t userns_owner;
    /* > 0: a cgroup v2 directory the child is created in (clone3 with
     * CLONE_INTO_CGROUP, kernel 5.7+): no parent-side attach, which takes
     * the cgroup's global lock and waits for an RCU grace period.  Where
     * the kernel refuses, the child is made as usual and *cgroup_joined
     * stays false: parent_setup attaches it then.  0: none. */
    int cgroup_fd;
    bool *cgroup_joined;
    /* Run a minimal init as the child (after child_setup) with the program
     * as its only child: init reaps every orphan, forwards the signals it
     * receives to the program, and reports the program's own exit status
     * or signal, which the outcome then shows.  For a new pid namespace,
     * where the first process is the namespace's init and the kernel drops
     * default-action signals sent to it from inside (so `kill -9 $$` would
     * otherwise do nothing).  Not with the vfork fast path. */
    bool init;

    /* Runs in the child before exec: only async-signal-safe calls.  Returns
     * 0 or -1 with errno set; msg (static text) says what failed. */
    int (*child_setup)(void *arg, const char **msg);
    void *child_setup_arg;
    /* Runs in the child after child_setup and the rlimits, right before
     * the program (or init) starts: only async-signal-safe calls, the same
     * contract as child_setup, with child_setup_arg.  go_flags and go_arg
     * are for it alone.  With cf_run_prepare, child_setup runs ahead of any
     * request and child_go once the request is known: what depends on the
     * request, and what must come last (dropping capabilities, seccomp),
     * belongs here. */
    int (*child_go)(void *arg, unsigned go_flags, int64_t go_arg, const char **msg);
    unsigned go_flags;
    int64_t go_arg;
    /* Runs in the parent after the child exists and before it is released
     * from its start barrier (uid maps, cgroup attach). */
    int (*parent_setup)(pid_t pid, void *arg, cf_error *err);
    void *parent_setup_arg;
    /* Kills every process of the execution.  NULL = kill(-pgid, SIGKILL). */
    void (*kill_all)(pid_t pid, void *arg);
    void *kill_all_arg;
    /* Total CPU time (us) of every process of the execution so far, or -1
     * when unknown (e.g. a cgroup's accounting).  With cpu_limit_us > 0 it
     * is polled every CF_RUN_CPU_POLL_US and once after the main process
     * was reaped; past the limit everything is killed (kill_all) and
     * cpu_exceeded is set.  pid is the main process (already reaped at
     * the final call: do not signal it).  Called from cf_run's thread. */
    int64_t (*cpu_usage_us)(pid_t pid, void *arg);
    void *cpu_usage_arg;
    int64_t cpu_limit_us;

    volatile int *cancel;  /* non-zero: stop now (shutdown) */
    /* Streaming (may be NULL): called on cf_run's thread with the outcome's
     * capture buffers (what was kept within the caps so far) whenever bytes
     * were added to them, when the time it last returned (cf_mono_us) has
     * come, and once with final after the last bytes were read, before
     * cf_run returns.  Returns when it next wants a call without new bytes,
     * INT64_MAX for never.  It must not block: the program's pipes wait. */
    int64_t (*on_output)(void *arg, const cf_buf *out, const cf_buf *err, bool final, int64_t now_us);
    void *on_output_arg;
    /* > 2: a descriptor handed to the program as CF_RUN_PASS_FD (a socket
     * to a long-lived helper); cf_run owns it from the call on and closes
     * its copy once the child has one (or on failure).  0: none. */
    int pass_fd;
    /* > 2: execute this open file (execveat AT_EMPTY_PATH) instead of
     * looking up path: a program outside the child's root, or in a
     * directory its uid may not search.  The caller keeps and closes it;
     * path is still what argv[0] and messages show.  0: none. */
    int exec_fd;
} cf_run_spec;

/* Where the program finds spec->pass_fd. */
#define CF_RUN_PASS_FD 4
/* Where the child keeps spec->exec_fd until exec (close-on-exec). */
#define CF_RUN_EXEC_FD 5

typedef struct cf_run_outcome {
    bool exited;           /* exited normally; exit_code valid */
    int exit_code;
    int signal;            /* terminating signal, 0 if exited */
    bool timed_out;        /* killed by the wall-clock timeout */
    bool cancelled;        /* killed because *cancel became non-zero */
    bool cpu_exceeded;     /* the cpu_usage_us hook went past cpu_limit_us */
    /* execve of spec->path failed (not found, not executable, bad format):
     * everything before it worked, so this is about the program chosen,
     * not the machinery.  exit_code is then 127. */
    bool exec_failed;
    int exec_errno;
    cf_buf out;            /* captured stdout (at most max_stdout) */
    cf_buf err;            /* captured stderr (at most max_stderr) */
    bool out_truncated;
    bool err_truncated;
    int64_t wall_us;
    int64_t cpu_us;        /* user+sys of the child and its reaped descendants */
    int64_t peak_rss_bytes;
    /* peak_rss_bytes is the execution cgroup's peak (all it charged:
     * every process, tmpfs, shm, kernel memory), not one process's RSS. */
    bool peak_is_cgroups;
} cf_run_outcome;

/* Runs spec to completion.  Returns 0 when the program ran (whatever it
 * did), -1 when it could not be started or supervised (err filled;
 * CF_E_SANDBOX when child_setup/exec failed in the child).
 * out must be freed with cf_run_outcome_free even on failure. */
int cf_run(const cf_run_spec *spec, cf_run_outcome *out, cf_error *err);
void cf_run_outcome_free(cf_run_outcome *out);
/* How a long-lived helper ended, for logs: "exited N: <last of its
 * stderr>" or "killed by signal N: ...", sanitised. */
void cf_run_outcome_describe(const cf_run_outcome *o, char *buf, size_t cap);

/* A child made ahead of its request (a warm sandbox): cf_run_prepare
 * clones it, runs parent_setup and child_setup and returns once the child
 * reported that it is ready (or failed: err, CF_E_SANDBOX), with every
 * descriptor of the worker closed in it.  It then waits, for as long as
 * it takes, for cf_run_start, which hands it the request's part of a spec
 * (path, argv, envp, cwd, rlimits, go_flags, go_arg: sent over a pipe and
 * decoded with bounds in the child, which is a copy of the worker from
 * before the request) and supervises it exactly as cf_run does (stdin,
 * caps, timeout, cancel, cpu hook, on_output).  Everything else of the
 * spec, the hooks other than on_output included, is the prepare's.  No pass_fd or exec_fd.
 * cf_run_start consumes prep whatever it returns; cf_run_prep_destroy
 * kills an unused one (kill_all, then the child) and reaps it.  Any
 * thread of the process may start or destroy it, but the child dies with
 * the thread that prepared it (PR_SET_PDEATHSIG): prepare on a thread
 * that lives as long as the child may wait. */
typedef struct cf_run_prep cf_run_prep;
int cf_run_prepare(const cf_run_spec *spec, cf_run_prep **prep, cf_error *err);
int cf_run_start(cf_run_prep *prep, const cf_run_spec *spec, cf_run_outcome *out, cf_error *err);
void cf_run_prep_destroy(cf_run_prep *prep);
/* Whether the prepared child is still waiting (not dead or killed). */
bool cf_run_prep_alive(const cf_run_prep *prep);
/* Its pid (in the worker's pid namespace), for logs and tests. */
pid_t cf_run_prep_pid(const cf_run_prep *prep);

/* A process made for an execution by someone else (a zygote's child,
 * cf_run_report.h on its report pipe): not the worker's child, so its end is
 * seen through its pidfd, signals go through the pidfd, and the program's
 * status comes from the status record its init writes.  cf_run_adopt_pipes
 * makes the four pipes (child_fds: stdin's read end, stdout's and stderr's
 * write ends, the report's write end; all close-on-exec, the program's
 * given to spec's stdio owner as cf_run does; the caller hands them over
 * and closes its copies) and fills a with the worker's ends.  Once the
 * process exists, set a->pidfd (and a->pid, in the worker's pid
 * namespace, -1 when unknown: only the pidfd is used to signal it and to
 * see its end): cf_run_adopt owns every descriptor of a from then on (closed
 * whatever it returns) and supervises as cf_run does: stdin, caps,
 * timeout, cancel, the cpu hook, on_output, and spec->kill_all, which is
 * required (the only way to end the process's own children).  A process
 * that ends without a status record was killed: the outcome says SIGKILL.
 * cf_run_adoptee_close releases a not handed to cf_run_adopt. */
typedef struct cf_run_adoptee {
    pid_t pid;
    int pidfd;
    int in_w, out_r, err_r, rep_r;
} cf_run_adoptee;
int cf_run_adopt_pipes(const cf_run_spec *spec, int child_fds[4], cf_run_adoptee *a, cf_error *err);
int cf_run_adopt(cf_run_adoptee *a, const cf_run_spec *spec, cf_run_outcome *out, cf_error *err);
void cf_run_adoptee_close(cf_run_adoptee *a);

#endif
