/* sandbox_probe: what this host lets the sandbox backend enforce.
 *
 * Each item is tried for real (a namespace is created in a throw-away
 * child, a probe cgroup is created and removed), not guessed from version
 * numbers or config files.  The result feeds the backend's capabilities and
 * a one-line-per-item matrix for the worker's start-up log.
 */
#ifndef CF_SANDBOX_PROBE_H
#define CF_SANDBOX_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "cf_error.h"
#include "cf_cgroup.h"

#define CF_PROBE_NOTE_MAX 256

typedef struct cf_sandbox_probe {
    /* namespaces, created in a child the way the sandbox creates them
     * (user namespace first, the others inside it) */
    bool userns, pidns, mountns, netns, ipcns, utsns, cgroupns;
    bool seccomp;              /* filter mode usable */
    bool seccomp_kill_process; /* SECCOMP_RET_KILL_PROCESS known to the kernel */
    bool pidfd;                /* pidfd_open works */
    /* cgroups: version 0 when unusable (cgroup_note says why) */
    int cgroup_version;        /* 0, 1 or 2 */
    bool cg_memory, cg_pids, cg_cpu, cg_freezer, cg_kill, cg_memsw;
    char cgroup_parent[CF_PROBE_NOTE_MAX]; /* where executions' cgroups go */
    char cgroup_note[CF_PROBE_NOTE_MAX];   /* first failure, "" when none */
} cf_sandbox_probe;

/* Runs every check.  cg_opts: how to find cgroups (NULL: autodetect).
 * Never fails because a feature is missing (that is what the struct
 * reports); returns -1 only when probing itself broke (fork failed). */
int cf_sandbox_probe_run(const cf_cgroup_env_opts *cg_opts, cf_sandbox_probe *out, cf_error *err);

/* True when everything the sandbox backend needs is there: user, pid,
 * mount, net namespaces, seccomp, memory and pids cgroups. */
bool cf_sandbox_probe_usable(const cf_sandbox_probe *p);

/* One line per item ("userns: yes"), NUL-terminated, truncated to size. */
void cf_sandbox_probe_describe(const cf_sandbox_probe *p, char *buf, size_t size);

#endif
