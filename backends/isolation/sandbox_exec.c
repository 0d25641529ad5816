#include "cf_sandbox_exec.h"
#include "cf_child.h"

#include <errno.h>
#include <stdatomic.h>
#include <linux/capability.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdlib.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- child (async-signal-safe only) ----------------------------------- */

static int sx_child_setup(void *arg, const char **msg)
{
    const cf_sandbox_exec *sx = arg;
    /* The run uid before anything else: the capabilities of our user
     * namespace stay (its uid 0 is not mapped, so no uid change drops
     * them), and kernels before 5.16 check a v1 self-join against the
     * writer's uids, which must then be the run uid's own (with a
     * namespace created by the run uid, the effective uid already is, the
     * real and saved ones are still root's). */
    if (cf_sandbox_become(sx->uid, sx->gid) < 0) {
        *msg = "sandbox: set uid/gid";
        return -1;
    }
    /* Then the cgroup, so everything below is charged and counted there. */
    if (sx->cg && sx->n_join > 0 && cf_cgroup_join_self(sx->join_fds, sx->n_join) < 0) {
        *msg = "sandbox: join cgroup";
        return -1;
    }
    const char *hn = sx->hostname ? sx->hostname : "sandbox";
    if (sethostname(hn, strlen(hn)) < 0) {
        *msg = "sandbox: sethostname";
        return -1;
    }
    if (sx->egress_slirp) {
        /* Before the capabilities go: the program cannot change them. */
        if (cf_net_egress_routes(sx->routes) < 0) {
            *msg = "sandbox: egress routes";
            return -1;
        }
    } else if (sx->loopback && cf_child_loopback_up() < 0) {
        *msg = "sandbox: loopback up";
        return -1;
    }
    /* The parent attached us to the execution's cgroup before releasing
     * us: a cgroup namespace created now is rooted there, so the program
     * never sees the worker's cgroup path. */
    if (sx->cg && unshare(CLONE_NEWCGROUP) < 0) {
        *msg = "sandbox: cgroup namespace";
        return -1;
    }
    /* Bind sources are opened with the run uid's host credentials (set
     * above), never as host root: a path the run uid cannot reach on the
     * host (a file in a root-only directory) is refused here, not handed
     * over.  The capabilities we keep in our user namespace do not apply
     * to host files, whose owners are not mapped in it. */
    int fds[CF_SANDBOX_MAX_BINDS];
    if (cf_sandbox_fs_open_binds(sx->fs, fds, msg) < 0)
        return -1;
    if (cf_sandbox_fs_apply_fds(sx->fs, fds, msg) < 0)
        return -1;
    return 0;
}

/* A helper that builds namespaces itself (the zygote): every capability
 * but those in keep goes, those stay effective and ambient so they
 * survive its exec (it runs as a non-root uid of its user namespace). */
static int keep_only(uint64_t keep)
{
    for (int cap = 0; cap <= 63; cap++)
        if (!(keep & (1ULL << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return -1;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -1;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    data[0].effective = data[0].permitted = data[0].inheritable = (uint32_t)keep;
    data[1].effective = data[1].permitted = data[1].inheritable = (uint32_t)(keep >> 32);
    if (syscall(SYS_capset, &hdr, data) < 0)
        return -1;
    for (int cap = 0; cap <= 63; cap++)
        if ((keep & (1ULL << cap)) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
            return -1;
    return 0;
}

/* The request's part, after the runner's rlimits (a warm sandbox waited
 * for it with its root built): the cpu backstop, /work read-only when the
 * request wants it so, then the capabilities go and the filter comes. */
static int sx_child_go(void *arg, unsigned go_flags, int64_t cpu_rlimit_s, const char **msg)
{
    const cf_sandbox_exec *sx = arg;
    if (cpu_rlimit_s > 0) {
        /* Raising the soft limit up to the hard one and lowering the hard
         * one need no privilege; never above what the runner left. */
        struct rlimit cur;
        if (getrlimit(RLIMIT_CPU, &cur) < 0) {
            *msg = "sandbox: getrlimit cpu";
            return -1;
        }
        rlim_t v = (rlim_t)cpu_rlimit_s;
        if (cur.rlim_max != RLIM_INFINITY && v > cur.rlim_max)
            v = cur.rlim_max;
        struct rlimit nl = {v, v};
        if (setrlimit(RLIMIT_CPU, &nl) < 0) {
            *msg = "sandbox: setrlimit cpu";
            return -1;
        }
    }
    if ((go_flags & CF_SANDBOX_GO_WORK_RO) && cf_sandbox_fs_remount_ro(CF_SANDBOX_WORK_DIR) < 0) {
        *msg = "sandbox: /work read-only";
        return -1;
    }
    if (sx->keep_caps ? keep_only(sx->keep_caps) < 0 : cf_sandbox_drop_caps() < 0) {
        *msg = "sandbox: drop capabilities";
        return -1;
    }
    /* Last: everything above uses calls the filter denies. */
    if (sx->seccomp && cf_seccomp_load(sx->seccomp) < 0) {
        *msg = "sandbox: load seccomp filter";
        return -1;
    }
    return 0;
}

/* ---- parent ----------------------------------------------------------- */

static atomic_bool userns_by_run_uid;

/* Whether any of the count uids from first is a local account's
 * (/etc/passwd): a process of that uid in the host's user namespace would
 * own a namespace created by it.  Read directly, not through NSS, so that
 * a directory service that is down cannot hold the worker's start.
 * Subordinate ranges (/etc/subuid) are no such risk: a rootless
 * container's processes live in a user namespace of their own, and owning
 * a namespace takes the owner's uid in its parent, the host's. */
static bool uids_foreign(int64_t first, int64_t count, char *which, size_t cap)
{
    FILE *f = fopen("/etc/passwd", "re");
    char line[1024];
    bool hit = false;
    while (!hit && f && fgets(line, sizeof(line), f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        char *end;
        errno = 0;
        unsigned long long u = strtoull(c2 + 1, &end, 10);
        if (errno || end == c2 + 1 || *end != ':')
            continue;
        if (u >= (unsigned long long)first && u < (unsigned long long)(first + count)) {
            *c1 = '\0';
            snprintf(which, cap, "run uid %llu is the account %.64s's (/etc/passwd)", u, line);
            hit = true;
        }
    }
    if (f)
        fclose(f);
    return hit;
}

int cf_sandbox_exec_set_userns_owner(cf_userns_owner mode, int64_t uid_first, int64_t uid_count, char *why,
                                     size_t cap, cf_error *err)
{
    if (mode == CF_USERNS_OWNER_ROOT) {
        atomic_store(&userns_by_run_uid, false);
        snprintf(why, cap, "by root (userns-owner = root)");
        return 0;
    }
    static const struct {
        int cap;
        const char *name;
    } need[] = {{CAP_KILL, "CAP_KILL"},         {CAP_SYS_PTRACE, "CAP_SYS_PTRACE"},
                {CAP_SETUID, "CAP_SETUID"},     {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
                {CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}};
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    char missing[320] = "";
    if (geteuid() != 0 || syscall(SYS_capget, &hdr, data) < 0) {
        snprintf(missing, sizeof(missing), "the worker is not root");
    } else {
        for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
            if (data[need[i].cap / 32].effective & (1u << (need[i].cap % 32)))
                continue;
            size_t len = strlen(missing);
            snprintf(missing + len, sizeof(missing) - len, "%s%s", len ? ", " : "", need[i].name);
        }
    }
    /* A local account's run uid would own the namespaces from outside. */
    if (!missing[0] && uids_foreign(uid_first, uid_count, missing, sizeof(missing)))
        snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " (give the worker a run-uid-base no one "
                 "else uses)");
    else if (!missing[0]) {
        atomic_store(&userns_by_run_uid, true);
        snprintf(why, cap, "by their run uid: what a program makes inside (inotify instances, ...) counts against "
                 "its slot's per-user limits, never root's");
        return 1;
    } else {
        size_t len = strlen(missing);
        snprintf(missing + len, sizeof(missing) - len, " missing (the worker must keep control over namespaces "
                 "it does not own)");
    }
    atomic_store(&userns_by_run_uid, false);
    if (mode == CF_USERNS_OWNER_RUN_UID)
        return cf_error_set(err, CF_E_UNSUPPORTED, "userns-owner = run-uid refused: %s", missing);
    snprintf(why, cap, "by root, because: %s; what a program makes inside (inotify instances, ...) counts against "
             "root's per-user limits (docs/SECURITY.md)", missing);
    return 0;
}

/* How long slirp4netns may take to configure the namespace. */
#define EGRESS_READY_US (5 * 1000000LL)

static int write_proc(pid_t pid, const char *file, const char *val, cf_error *err)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return cf_error_set_errno(err, CF_E_SANDBOX, errno, "sandbox: open %s", path);
    size_t len = strlen(val);
    ssize_t n = write(fd, val, len);
    int saved = errno;
    close(fd);
    if (n != (ssize_t)len)
        return cf_error_set_errno(err, CF_E_SANDBOX, n < 0 ? saved : EIO, "sandbox: write %s", path);
    return 0;
}

static int sx_parent_setup(pid_t pid, void *arg, cf_error *err)
{
    cf_sandbox_exec *sx = arg;
    /* setgroups stays "allow": the child must be able to drop the worker's
     * supplementary groups (root's group 0 would otherwise stay attached to
     * it, unmapped but effective for permission checks on host files). */
    if (write_proc(pid, "uid_map", sx->uid_map, err) < 0 || write_proc(pid, "gid_map", sx->gid_map, err) < 0)
        return -1;
    if (sx->cg && sx->n_join == 0 && !sx->cg_joined && cf_cgroup_attach(sx->cg, pid, err) < 0)
        return -1;
    /* The child waits at its barrier: its network namespace gets its TAP
     * device before it sets up the routes. */
    if (sx->egress_slirp && cf_net_egress_start(sx->egress_slirp, pid, EGRESS_READY_US, &sx->egress, err) < 0)
        return -1;
    /* slirp4netns works for the program: its CPU and memory are the
     * execution's, bounded by its limits, and it dies with its cgroup. */
    if (sx->egress.pid > 0 && sx->cg && cf_cgroup_attach(sx->cg, sx->egress.pid, err) < 0)
        return -1;
    return 0;
}

static void sx_kill_all(pid_t pid, void *arg)
{
    cf_sandbox_exec *sx = arg;
    /* The pid namespace's init: its death kills every process in it. */
    kill(pid, SIGKILL);
    if (sx->cg)
        cf_cgroup_kill_all(sx->cg);
}

int cf_sandbox_exec_prepare(cf_sandbox_exec *sx, cf_run_spec *spec, cf_error *err)
{
    if (!sx->fs)
        return cf_error_set(err, CF_E_INVALID, "sandbox: no filesystem plan");
    if (sx->host_uid == 0 || sx->host_gid == 0)
        return cf_error_set(err, CF_E_INVALID, "sandbox: refusing to map host root into the sandbox");
    snprintf(sx->uid_map, sizeof(sx->uid_map), "%u %u 1\n", (unsigned)sx->uid, (unsigned)sx->host_uid);
    snprintf(sx->gid_map, sizeof(sx->gid_map), "%u %u 1\n", (unsigned)sx->gid, (unsigned)sx->host_gid);
    /* Always an own network namespace: with network it gets slirp4netns. */
    spec->clone_flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
    /* The run uid creates the namespace: what the program makes inside
     * (inotify instances, ...) counts against the run uid's per-user
     * limits, never root's (cf_run_spec.userns_owner). */
    spec->userns_owner = atomic_load(&userns_by_run_uid) ? sx->host_uid : 0;
    sx->egress = (cf_net_egress){.pid = 0, .exit_fd = -1};
    if (sx->egress_slirp && !sx->routes)
        return cf_error_set(err, CF_E_INVALID, "sandbox: network without routes");
    /* The program is not the namespace's init: signals it sends itself act
     * as on a host, orphans are reaped, its own status is reported. */
    spec->init = true;
    spec->set_ids = false; /* ids are set inside the user namespace */
    spec->stdio_owner_set = true;
    spec->stdio_uid = sx->host_uid;
    spec->stdio_gid = sx->host_gid;
    spec->child_setup = sx_child_setup;
    spec->child_setup_arg = sx;
    spec->child_go = sx_child_go;
    spec->go_arg = sx->cpu_rlimit_s;
    spec->go_flags = 0;
    spec->parent_setup = sx_parent_setup;
    spec->parent_setup_arg = sx;
    /* v2: created in its cgroup, so no parent-side attach (v1 children
     * join themselves through join_fds). */
    sx->cg_joined = false;
    spec->cgroup_fd = sx->cg && sx->n_join == 0 ? cf_cgroup_dir_fd(sx->cg) : -1;
    if (spec->cgroup_fd < 0)
        spec->cgroup_fd = 0;
    spec->cgroup_joined = &sx->cg_joined;
    spec->kill_all = sx_kill_all;
    spec->kill_all_arg = sx;
    return 0;
}
