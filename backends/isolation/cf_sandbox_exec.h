/* sandbox_exec: turns a cf_run_spec into a sandboxed one.
 *
 * Glue between the runner and the sandbox building blocks: the child is
 * cloned into new user, pid, mount, ipc, uts (and, unless network is
 * wanted, net) namespaces; the parent maps one inside uid/gid to one
 * outside uid/gid and attaches the execution's cgroup before the child
 * runs; the child then (async-signal-safe, in this order) sets the
 * hostname, enters a cgroup namespace rooted at its own cgroup, becomes
 * the inside uid/gid, builds its root filesystem (sandbox_fs), drops every
 * capability and loads the seccomp filter last.  kill_all kills the
 * cgroup and the pid namespace's init (which takes the namespace with it).
 */
#ifndef CF_SANDBOX_EXEC_H
#define CF_SANDBOX_EXEC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cf_runner.h"
#include "cf_cgroup.h"
#include "cf_sandbox_fs.h"
#include "cf_net.h"
#include "cf_seccomp.h"

typedef struct cf_sandbox_exec {
    const cf_seccomp_prog *seccomp; /* NULL: no filter (tests only) */
    const cf_sandbox_fs *fs;        /* required */
    cf_cgroup *cg;                  /* NULL: no cgroup (limits then rest on rlimits) */
    /* v1: the cgroup's tasks fds (cf_cgroup_join_fds): the child joins
     * itself, the parent does not attach.  n_join 0: parent attaches. */
    const int *join_fds;
    int n_join;
    /* v2: the child was created in cg (CLONE_INTO_CGROUP); set per spawn. */
    bool cg_joined;
    uid_t uid, gid;                 /* ids inside the namespace */
    uid_t host_uid, host_gid;       /* what they are outside (never 0) */
    /* network=enabled: slirp4netns to start for the child's own network
     * namespace (NULL: an empty namespace) and the routes the child
     * installs before it drops its capabilities. */
    const char *egress_slirp;
    const cf_net_routes *routes;
    bool loopback;                  /* no network: bring lo up in the empty namespace */
    const char *hostname;           /* NULL: "sandbox" */
    /* >0: RLIMIT_CPU soft = hard = this many seconds, set in the child
     * after the runner's rlimits: the hard limit's SIGKILL acts even on a
     * program that catches SIGXCPU.  cf_sandbox_exec_prepare puts it in
     * spec->go_arg (a prepared child gets it from cf_run_start's spec). */
    long cpu_rlimit_s;
    /* 0: every capability goes before the program starts.  Otherwise
     * (the zygote, which builds its executions' namespaces) these
     * capabilities of the user namespace stay, raised as ambient so they
     * survive the exec; all others go. */
    uint64_t keep_caps;
    /* filled by cf_sandbox_exec_prepare */
    char uid_map[64], gid_map[64];
    /* the running slirp4netns (parent_setup): stop it with
     * cf_net_egress_stop after cf_run, whatever cf_run returned */
    cf_net_egress egress;
} cf_sandbox_exec;

/* Where the program's work directory is mounted inside. */
#define CF_SANDBOX_WORK_DIR "/work"
/* spec->go_flags for a prepared sandbox: remount /work read-only before
 * the program starts (its bind was made read-write ahead of the request). */
#define CF_SANDBOX_GO_WORK_RO 1u

/* Sets spec's clone flags, the child_setup/parent_setup/kill_all hooks
 * (with sx as their argument; sx must outlive cf_run) and gives the stdio
 * pipes to host_uid/host_gid (so the program can reopen /dev/stdin...).  Fails when
 * host ids are 0 or fs is missing. */
int cf_sandbox_exec_prepare(cf_sandbox_exec *sx, cf_run_spec *spec, cf_error *err);

/* Who creates the executions' user namespaces (cf_run_spec.userns_owner),
 * decided once per process before any sandbox starts. */
typedef enum cf_userns_owner {
    CF_USERNS_OWNER_AUTO = 0, /* the run uid when this process may, else root */
    CF_USERNS_OWNER_RUN_UID,  /* the run uid, or an error */
    CF_USERNS_OWNER_ROOT,     /* root (the default until this is called) */
} cf_userns_owner;

/* The run uid may create them only if this process keeps control over
 * namespaces it does not own: signalling their processes (CAP_KILL),
 * slirp4netns opening their namespaces (CAP_SYS_PTRACE), becoming the run
 * uid (CAP_SETUID), clone3 into a cgroup as it (CAP_DAC_OVERRIDE) and
 * writing the maps (CAP_SYS_ADMIN), all effective, as root; and only if
 * none of the uid_count run uids from uid_first is a local account's,
 * whose processes would own the namespaces.
 * Returns 1 (the run uid creates them), 0 (root) or -1 (RUN_UID asked
 * without those; err says why); why says what was decided and why, for the
 * log. */
int cf_sandbox_exec_set_userns_owner(cf_userns_owner mode, int64_t uid_first, int64_t uid_count, char *why,
                                     size_t cap, cf_error *err);

#endif
