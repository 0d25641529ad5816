#include "cf_sandbox_probe.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_util.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Bits of the namespace child's exit code. */
enum { NS_USER = 1, NS_PID = 2, NS_MNT = 4, NS_NET = 8, NS_IPC = 16, NS_UTS = 32, NS_CGROUP = 64 };

static int probe_namespaces(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        static const struct {
            int flag, bit;
        } ns[] = {{CLONE_NEWUSER, NS_USER}, {CLONE_NEWPID, NS_PID}, {CLONE_NEWNS, NS_MNT}, {CLONE_NEWNET, NS_NET},
                  {CLONE_NEWIPC, NS_IPC},   {CLONE_NEWUTS, NS_UTS}, {CLONE_NEWCGROUP, NS_CGROUP}};
        int bits = 0;
        for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
            if (unshare(ns[i].flag) == 0)
                bits |= ns[i].bit;
        _exit(bits);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

static void probe_seccomp(cf_sandbox_probe *p)
{
    /* PR_GET_SECCOMP fails with EINVAL when seccomp is compiled out. */
    p->seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
    uint32_t action = SECCOMP_RET_KILL_PROCESS;
    p->seccomp_kill_process = p->seccomp && syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
}

static void probe_pidfd(cf_sandbox_probe *p)
{
    long fd = syscall(SYS_pidfd_open, (long)getpid(), 0L);
    p->pidfd = fd >= 0;
    if (fd >= 0)
        close((int)fd);
}

static void probe_cgroups(const cf_cgroup_env_opts *opts, cf_sandbox_probe *p)
{
    cf_cgroup_env *env = NULL;
    cf_error err;
    if (cf_cgroup_env_new(opts, &env, &err) < 0) {
        cf_strlcpy(p->cgroup_note, err.msg, sizeof(p->cgroup_note));
        return;
    }
    cf_strlcpy(p->cgroup_parent, cf_cgroup_env_parent_dir(env), sizeof(p->cgroup_parent));
    /* Writable for real: create a probe cgroup with both limits set. */
    char name[64];
    snprintf(name, sizeof(name), "probe-%d", (int)getpid());
    cf_cgroup *cg = NULL;
    cf_cgroup_limits lim = {.memory_bytes = 64 << 20, .pids_max = 64};
    if (cf_cgroup_new(env, name, &lim, &cg, &err) < 0) {
        cf_strlcpy(p->cgroup_note, err.msg, sizeof(p->cgroup_note));
        cf_cgroup_env_destroy(env);
        return;
    }
    bool v2 = cf_cgroup_env_version(env) == CF_CGROUP_V2;
    p->cgroup_version = v2 ? 2 : 1;
    p->cg_memory = p->cg_pids = true;
    p->cg_cpu = cf_cgroup_env_has_cpu(env);
    p->cg_freezer = cf_cgroup_env_has_freezer(env);
    char f[512];
    snprintf(f, sizeof(f), "%s/%s", cf_cgroup_path(cg), v2 ? "cgroup.kill" : "memory.memsw.limit_in_bytes");
    if (v2) {
        p->cg_kill = access(f, F_OK) == 0;
        snprintf(f, sizeof(f), "%s/memory.swap.max", cf_cgroup_path(cg));
    }
    p->cg_memsw = access(f, F_OK) == 0;
    if (cf_cgroup_remove(cg, &err) < 0)
        cf_strlcpy(p->cgroup_note, err.msg, sizeof(p->cgroup_note));
    cf_cgroup_destroy(cg);
    cf_cgroup_env_destroy(env);
}

int cf_sandbox_probe_run(const cf_cgroup_env_opts *cg_opts, cf_sandbox_probe *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    int bits = probe_namespaces();
    if (bits < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "probe: fork");
    out->userns = bits & NS_USER;
    out->pidns = bits & NS_PID;
    out->mountns = bits & NS_MNT;
    out->netns = bits & NS_NET;
    out->ipcns = bits & NS_IPC;
    out->utsns = bits & NS_UTS;
    out->cgroupns = bits & NS_CGROUP;
    probe_seccomp(out);
    probe_pidfd(out);
    probe_cgroups(cg_opts, out);
    return 0;
}

bool cf_sandbox_probe_usable(const cf_sandbox_probe *p)
{
    return p->userns && p->pidns && p->mountns && p->netns && p->seccomp && p->cgroup_version != 0 && p->cg_memory &&
           p->cg_pids;
}

static const char *yes_no(bool b)
{
    return b ? "yes" : "no";
}

void cf_sandbox_probe_describe(const cf_sandbox_probe *p, char *buf, size_t size)
{
    if (size == 0)
        return;
    char cg[96];
    if (p->cgroup_version)
        snprintf(cg, sizeof(cg), "v%d", p->cgroup_version);
    else
        cf_strlcpy(cg, "unusable", sizeof(cg));
    int n = snprintf(buf, size,
                     "namespaces: user %s, pid %s, mount %s, net %s, ipc %s, uts %s, cgroup %s\n"
                     "seccomp: %s (kill_process %s)\n"
                     "pidfd: %s\n"
                     "cgroups: %s at %s%s%s\n"
                     "cgroup controllers: memory %s, pids %s, cpu %s, swap limit %s, kill %s\n"
                     "sandbox backend: %s\n",
                     yes_no(p->userns), yes_no(p->pidns), yes_no(p->mountns), yes_no(p->netns), yes_no(p->ipcns), yes_no(p->utsns),
                     yes_no(p->cgroupns), yes_no(p->seccomp), yes_no(p->seccomp_kill_process), yes_no(p->pidfd), cg,
                     p->cgroup_parent[0] ? p->cgroup_parent : "-", p->cgroup_note[0] ? ": " : "", p->cgroup_note,
                     yes_no(p->cg_memory), yes_no(p->cg_pids), yes_no(p->cg_cpu), yes_no(p->cg_memsw),
                     p->cgroup_version == 2 ? yes_no(p->cg_kill) : (p->cg_freezer ? "freezer" : "loop"),
                     cf_sandbox_probe_usable(p) ? "usable" : "NOT usable");
    (void)n; /* truncation is acceptable for a log line */
}
