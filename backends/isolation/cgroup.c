#include "cf_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "cf_util.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

/* v1 controllers we use; on v2 only slot 0 (the unified tree) is used. */
enum { C_MEM = 0, C_PIDS, C_FREEZER, C_CPU, C_CPUACCT, C__N };
static const char *const ctrl_names[C__N] = {"memory", "pids", "freezer", "cpu", "cpuacct"};

#define KILL_WAIT_US 2000000 /* bound on waiting for a killed cgroup to empty */

struct cf_cgroup_env {
    cf_cgroup_version version;
    bool fake_fs;
    bool avail[C__N];
    /* v1: cpuacct is co-mounted with cpu (one hierarchy): accounting then
     * comes from the cpu directory, which is always made. */
    bool acct_in_cpu;
    char parent[C__N][PATH_MAX]; /* absolute parent dir per controller (v2: [0]); own_dir included */
    /* With own_dir: the directory it sits in, per controller (the other
     * workers' own_dirs are there too), and its name. */
    bool has_own;
    char base[C__N][PATH_MAX];
    char own_name[130];
    /* v2: children may be created in a cgroup (clone3 CLONE_INTO_CGROUP),
     * probed at env creation (see clone_into_probe); kill_taints: but not
     * in one that cgroup.kill was used on. */
    bool clone_into;
    bool kill_taints;
};

struct cf_cgroup {
    cf_cgroup_env *env;
    bool made[C__N];
    char dir[C__N][PATH_MAX];
    bool removed;
    cf_cgroup_limits lim; /* what is set now */
    int peak_fd;          /* v2: memory.peak opened for a per-fd peak, -1 */
    int dir_fd;           /* v2: the directory, for CLONE_INTO_CGROUP; -1 until asked */
    bool killed;          /* v2: cgroup.kill was written (see kill_taints) */
};

/* ---- small file helpers ------------------------------------------- */

static int path_join(char *dst, size_t cap, const char *a, const char *b, cf_error *err)
{
    int n = snprintf(dst, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap)
        return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long: %s/%s", a, b);
    return 0;
}

static int write_str(const cf_cgroup_env *env, const char *dir, const char *file, const char *val, cf_error *err)
{
    char path[PATH_MAX];
    if (path_join(path, sizeof(path), dir, file, err) < 0)
        return -1;
    int flags = O_WRONLY | O_CLOEXEC | (env->fake_fs ? O_CREAT | O_TRUNC : 0);
    int fd = open(path, flags, 0644);
    if (fd < 0)
        return cf_error_set_errno(err, CF_E_SANDBOX, errno, "cgroup: open %s", path);
    size_t len = strlen(val);
    ssize_t n;
    do
        n = write(fd, val, len);
    while (n < 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    if (n < 0)
        return cf_error_set_errno(err, CF_E_SANDBOX, saved, "cgroup: write '%s' to %s", val, path);
    if ((size_t)n != len)
        return cf_error_set(err, CF_E_SANDBOX, "cgroup: short write to %s", path);
    return 0;
}

static int write_i64(const cf_cgroup_env *env, const char *dir, const char *file, int64_t v, cf_error *err)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)v);
    return write_str(env, dir, file, buf, err);
}

/* Reads a small file; returns length or -1 (errno set). */
static ssize_t read_small(const char *dir, const char *file, char *buf, size_t cap)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    return (ssize_t)got;
}

static bool file_exists(const char *dir, const char *file)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
    return n > 0 && (size_t)n < sizeof(path) && access(path, F_OK) == 0;
}

/* A whole-file integer ("max" reads as INT64_MAX); -1 when absent. */
static int64_t read_i64(const char *dir, const char *file)
{
    char buf[64];
    if (read_small(dir, file, buf, sizeof(buf)) <= 0)
        return -1;
    if (strncmp(buf, "max", 3) == 0)
        return INT64_MAX;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || end == buf || v < 0)
        return -1;
    return v;
}

/* "key value" line of a flat keyed file (memory.events, oom_control). */
static int64_t read_key(const char *dir, const char *file, const char *key)
{
    char buf[4096];
    if (read_small(dir, file, buf, sizeof(buf)) < 0)
        return -1;
    size_t klen = strlen(key);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            char *end;
            errno = 0;
            long long v = strtoll(line + klen + 1, &end, 10);
            if (errno || end == line + klen + 1 || v < 0)
                return -1;
            return v;
        }
    }
    return -1;
}

static void sleep_us(long us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Sends SIGKILL to every pid listed in dir/cgroup.procs; returns how many
 * were listed (0: empty), -1 if the file cannot be read. */
static int kill_listed(const cf_cgroup_env *env, const char *dir)
{
    char buf[65536];
    if (read_small(dir, "cgroup.procs", buf, sizeof(buf)) < 0)
        return -1;
    int count = 0;
    char *p = buf;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        /* pid 1 and below never belong to an execution: refuse to signal. */
        if (errno == 0 && v > 1 && v <= INT_MAX) {
            count++;
            if (!env->fake_fs)
                kill((pid_t)v, SIGKILL);
        }
        p = end;
        while (*p == '\n' || *p == ' ')
            p++;
    }
    return count;
}

/* ---- environment --------------------------------------------------- */

static bool valid_name(const char *name);
static int remove_dir(const cf_cgroup_env *env, const char *dir, cf_error *err);

/* rel + "/" + own_dir into rel (the parent), and the directory above into
 * base; no-op without own_dir. */
static int add_own_dir(cf_cgroup_env *env, const cf_cgroup_env_opts *o, int c, const char *mount_base, char *rel,
                       size_t cap, cf_error *err)
{
    if (!o->own_dir)
        return 0;
    if (snprintf(env->base[c], PATH_MAX, "%s%s%s", mount_base, rel[0] == '/' ? "" : "/", rel) >= PATH_MAX)
        return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
    size_t len = strlen(rel);
    if (len + 1 + strlen(o->own_dir) >= cap)
        return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
    snprintf(rel + len, cap - len, "/%s", o->own_dir);
    return 0;
}

/* Finds the worker's own cgroup path for controller ctrl (v1) or the
 * unified entry (ctrl NULL) in a /proc/self/cgroup style file. */
static int own_cgroup_path(const char *proc_file, const char *ctrl, char *out, size_t cap, cf_error *err)
{
    char buf[8192];
    const char *dir_end = strrchr(proc_file, '/');
    char dir[PATH_MAX];
    size_t dlen = dir_end ? (size_t)(dir_end - proc_file) : 0;
    if (dlen >= sizeof(dir))
        return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
    memcpy(dir, proc_file, dlen);
    dir[dlen] = '\0';
    if (read_small(dlen ? dir : ".", dir_end ? dir_end + 1 : proc_file, buf, sizeof(buf)) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "cgroup: reading %s", proc_file);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        /* "id:controllers:path" */
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c1 && c2) {
            *c1 = '\0';
            *c2 = '\0';
            const char *ctrls = c1 + 1;
            bool match = false;
            if (!ctrl) {
                match = strcmp(line, "0") == 0 && *ctrls == '\0';
            } else {
                size_t cl = strlen(ctrl);
                for (const char *s = ctrls; s && *s; s = strchr(s, ',') ? strchr(s, ',') + 1 : NULL)
                    if (strncmp(s, ctrl, cl) == 0 && (s[cl] == ',' || s[cl] == '\0'))
                        match = true;
            }
            if (match) {
                const char *p = c2 + 1;
                if (strcmp(p, "/") == 0)
                    p = "";
                if (cf_strlcpy(out, p, cap) >= cap)
                    return cf_error_set(err, CF_E_LIMIT, "cgroup: own cgroup path too long");
                return 0;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return cf_error_set(err, CF_E_NOT_FOUND, "cgroup: no %s entry in %s", ctrl ? ctrl : "unified", proc_file);
}

/* mkdir -p below base (base must exist). */
static int mkdir_below(const char *base, const char *rel, cf_error *err)
{
    char path[PATH_MAX];
    size_t blen = cf_strlcpy(path, base, sizeof(path));
    if (blen >= sizeof(path))
        return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
    const char *p = rel;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return cf_error_set(err, CF_E_INVALID, "cgroup: '.' or '..' in parent path");
        if (blen + 1 + n >= sizeof(path))
            return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
        path[blen++] = '/';
        memcpy(path + blen, p, n);
        blen += n;
        path[blen] = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return cf_error_set_errno(err, CF_E_SANDBOX, errno, "cgroup: mkdir %s", path);
        p += n;
    }
    return 0;
}

static bool is_fs(const char *path, long magic)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

/* v2: enables the controllers we need in subtree_control of each directory
 * from own (exclusive: the worker's cgroup may hold processes only if it is
 * the root) down to the parent. */
static int v2_enable(cf_cgroup_env *env, const char *mount, const char *own, const char *rel, cf_error *err)
{
    /* Start at the worker's own cgroup when the parent is below it, else
     * at the root of the tree. */
    size_t own_len = strlen(own);
    bool under_own = own_len > 0 && strncmp(rel, own, own_len) == 0 && (rel[own_len] == '/' || rel[own_len] == '\0');
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s%s", mount, under_own ? own : "");
    if (n < 0 || (size_t)n >= sizeof(path))
        return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
    const char *below = under_own ? rel + own_len : rel;
    const char *p = below;
    for (;;) {
        char avail[512];
        if (read_small(path, "cgroup.controllers", avail, sizeof(avail)) < 0)
            return cf_error_set_errno(err, CF_E_UNSUPPORTED, errno, "cgroup: %s/cgroup.controllers", path);
        bool mem = false, pids = false, cpu = false;
        char *save = NULL;
        for (char *tok = strtok_r(avail, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
            mem |= strcmp(tok, "memory") == 0;
            pids |= strcmp(tok, "pids") == 0;
            cpu |= strcmp(tok, "cpu") == 0;
        }
        if (p == below) { /* the first level decides availability */
            env->avail[C_MEM] = mem;
            env->avail[C_PIDS] = pids;
            env->avail[C_CPU] = cpu;
        }
        while (*p == '/')
            p++;
        if (!*p)
            break; /* path is now the parent: its children get the controllers */
        char want[64] = "";
        snprintf(want, sizeof(want), "%s%s%s", mem ? "+memory " : "", pids ? "+pids " : "", cpu ? "+cpu" : "");
        if (want[0] && write_str(env, path, "cgroup.subtree_control", want, err) < 0) {
            if (err && err->sys_errno == EBUSY)
                cf_error_wrap(err, "cgroup v2: %s holds processes; move the worker into a leaf cgroup "
                                   "(no internal processes rule)", path);
            return -1;
        }
        const char *e = strchr(p, '/');
        size_t seg = e ? (size_t)(e - p) : strlen(p);
        size_t len = strlen(path);
        if (len + 1 + seg >= sizeof(path))
            return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
        path[len] = '/';
        memcpy(path + len + 1, p, seg);
        path[len + 1 + seg] = '\0';
        p += seg;
    }
    /* Children of the parent need the controllers too. */
    char want[64];
    snprintf(want, sizeof(want), "%s%s%s", env->avail[C_MEM] ? "+memory " : "", env->avail[C_PIDS] ? "+pids " : "",
             env->avail[C_CPU] ? "+cpu" : "");
    if (want[0] && write_str(env, path, "cgroup.subtree_control", want, err) < 0)
        return cf_error_wrap(err, "cgroup v2: enabling controllers for executions");
    return 0;
}

/* Whether the cgroup at dir was handed to us: systemd marks a unit's
 * cgroup with Delegate=yes by the trusted.delegate (or, for user
 * managers, user.delegate) extended attribute. */
static bool marked_delegated(const char *dir)
{
    static const char *const names[] = {"trusted.delegate", "user.delegate"};
    for (size_t i = 0; i < 2; i++) {
        char v[8] = "";
        ssize_t n = getxattr(dir, names[i], v, sizeof(v) - 1);
        if (n > 0 && v[0] == '1')
            return true;
    }
    return false;
}

/* Whether pid is still in the cgroup own (relative to the v2 mount): the
 * narrowest check against moving a pid that exited and was reused
 * between reading cgroup.procs and writing it. */
static bool pid_in(long pid, const char *own)
{
    char path[64], buf[PATH_MAX + 8], want[PATH_MAX + 8];
    snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
    if (read_small("/", path + 1, buf, sizeof(buf)) < 0)
        return false;
    snprintf(want, sizeof(want), "0::%s\n", own[0] ? own : "/");
    return strstr(buf, want) != NULL;
}

/* v2, default parent only.  The "no internal processes" rule: below the
 * root, a cgroup that passes controllers to children may not hold
 * processes.  A worker handed a cgroup of its own (a systemd unit with
 * Delegate=yes, a container's cgroup namespace as a Kubernetes pod has it)
 * sits in the top of that subtree, maybe with an init such as tini, so it
 * first moves every process there into the leaf CF_CGROUP_WORKER_LEAF, the
 * way systemd and container runtimes do.  Only a cgroup that is provably
 * the worker's is touched: marked delegated (trusted.delegate, or
 * user.delegate from a user manager) or the root of its cgroup namespace;
 * any other (a service without Delegate=yes, a login session) belongs to
 * its manager and is reported, not changed.  own (in/out): the worker's
 * cgroup, rewritten to the subtree's top; a worker already in the leaf (a
 * second env in the same process) keeps the layout. */
static int v2_own_to_leaf(const cf_cgroup_env *env, const char *mount, char *own, cf_error *err)
{
    char top[PATH_MAX], leaf[PATH_MAX];
    if (snprintf(top, sizeof(top), "%s%s", mount, own) >= (int)sizeof(top))
        return cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
    /* The real root is exempt from the rule (and has no cgroup.type); a
     * cgroup namespace's root, seen as "/" too, is not. */
    bool ns_root = !own[0];
    if (ns_root && !file_exists(top, "cgroup.type"))
        return 0;
    const char *slash = strrchr(own, '/');
    if (slash && strcmp(slash + 1, CF_CGROUP_WORKER_LEAF) == 0) {
        own[slash - own] = '\0';
        return 0;
    }
    if (path_join(leaf, sizeof(leaf), top, CF_CGROUP_WORKER_LEAF, err) < 0)
        return -1;
    if (!ns_root && !marked_delegated(top))
        return cf_error_set(err, CF_E_UNSUPPORTED,
                            "cgroup v2: the worker's cgroup %s is not delegated to it (no trusted.delegate or "
                            "user.delegate mark, not a cgroup namespace root), so it may not make cgroups there: run "
                            "the worker in a cgroup of its own (a systemd unit with Delegate=yes, a container) or set "
                            "cgroup-root",
                            top);
    if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
        return cf_error_set_errno(err, CF_E_UNSUPPORTED, errno,
                                  "cgroup v2: cannot make the worker's leaf %s (no write access to the worker's own "
                                  "cgroup: delegate it, or set cgroup-root)",
                                  leaf);
    /* A process forking meanwhile lands in top again: a few rounds, then
     * one last look. */
    for (int round = 0; round <= 10; round++) {
        char buf[65536];
        ssize_t n = read_small(top, "cgroup.procs", buf, sizeof(buf));
        if (n < 0)
            return cf_error_set_errno(err, CF_E_UNSUPPORTED, errno, "cgroup v2: reading %s/cgroup.procs", top);
        if ((size_t)n >= sizeof(buf) - 1)
            return cf_error_set(err, CF_E_UNSUPPORTED, "cgroup v2: %s holds too many processes to move", top);
        if (!buf[0])
            return 0;
        if (round == 10)
            break;
        for (char *p = buf; *p;) {
            char *end;
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            p = end + (*end == '\n');
            if (pid <= 0)
                return cf_error_set(err, CF_E_UNSUPPORTED,
                                    "cgroup v2: %s holds a process outside the worker's pid namespace, which it cannot "
                                    "move; set cgroup-root",
                                    top);
            if (!pid_in(pid, own))
                continue; /* gone (or reused) since the list was read */
            cf_error e;
            /* ESRCH: gone meanwhile. */
            if (write_i64(env, leaf, "cgroup.procs", pid, &e) < 0 && e.sys_errno != ESRCH)
                return cf_error_set_errno(err, CF_E_UNSUPPORTED, e.sys_errno, "cgroup v2: moving pid %ld of %s into %s",
                                          pid, top, leaf);
        }
    }
    return cf_error_set(err, CF_E_UNSUPPORTED, "cgroup v2: %s keeps getting new processes", top);
}

/* One child created in the cgroup at fd (clone3 CLONE_INTO_CGROUP) that
 * only exits: 1 it lived, 0 it was killed, -1 the kernel refused the flag. */
static int clone_into_once(int fd)
{
    struct {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
            cgroup;
    } ca;
    memset(&ca, 0, sizeof(ca));
    ca.flags = 0x200000000ULL; /* CLONE_INTO_CGROUP */
    ca.exit_signal = SIGCHLD;
    ca.cgroup = (uint64_t)fd;
    long pid = syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid == 0)
        _exit(0);
    if (pid < 0)
        return -1;
    int st = 0;
    pid_t w;
    do
        w = waitpid((pid_t)pid, &st, __WALL);
    while (w < 0 && errno == EINTR);
    return w == (pid_t)pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 1 : 0;
}

/* v2: whether clone3's CLONE_INTO_CGROUP works here (kernel 5.7+), and
 * whether a child created so lives in a cgroup that cgroup.kill was used
 * on before.  Kernels that compare the cgroup.kill sequence of the
 * parent's cgroup with the child's kill it at birth (seen on Debian's
 * 6.12.95 and on 6.18; not on 6.1): such cgroups are then replaced
 * rather than reused (cf_cgroup_fresh_needed).  The probe cgroup is
 * named after our pid; ones of dead pids are removed first. */
static void clone_into_probe(const char *parent, bool *works, bool *kill_taints)
{
    *works = false;
    *kill_taints = false;
    DIR *d = opendir(parent);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        long pid;
        char extra;
        if (sscanf(de->d_name, "cf-clone-probe-%ld%c", &pid, &extra) == 1 && pid > 0 && kill((pid_t)pid, 0) < 0 &&
            errno == ESRCH) {
            char old[PATH_MAX];
            if (snprintf(old, sizeof(old), "%s/%s", parent, de->d_name) < (int)sizeof(old))
                rmdir(old);
        }
    }
    if (d)
        closedir(d);
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof(dir), "%s/cf-clone-probe-%d", parent, (int)getpid()) >= (int)sizeof(dir))
        return;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && clone_into_once(fd) == 1) {
        *works = true;
        /* cgroup.kill exists from 5.14; without it nothing taints. */
        char kill_file[PATH_MAX + 16];
        snprintf(kill_file, sizeof(kill_file), "%s/cgroup.kill", dir);
        int kfd = open(kill_file, O_WRONLY | O_CLOEXEC);
        if (kfd >= 0) {
            if (write(kfd, "1", 1) == 1)
                *kill_taints = clone_into_once(fd) != 1;
            close(kfd);
        }
    }
    if (fd >= 0)
        close(fd);
    rmdir(dir);
}

int cf_cgroup_env_new(const cf_cgroup_env_opts *opts, cf_cgroup_env **out, cf_error *err)
{
    *out = NULL;
    cf_cgroup_env_opts o = {0};
    if (opts)
        o = *opts;
    const char *mount = o.mount_dir ? o.mount_dir : "/sys/fs/cgroup";
    const char *proc = o.proc_self_cgroup ? o.proc_self_cgroup : "/proc/self/cgroup";

    cf_cgroup_env *env = calloc(1, sizeof(*env));
    if (!env)
        return cf_error_set(err, CF_E_NOMEM, "cgroup: out of memory");
    env->fake_fs = o.fake_fs;
    env->version = o.version;
    if (env->version == CF_CGROUP_AUTO) {
        char mem[PATH_MAX];
        snprintf(mem, sizeof(mem), "%s/memory", mount);
        if (is_fs(mount, CGROUP2_SUPER_MAGIC))
            env->version = CF_CGROUP_V2;
        else if (is_fs(mem, CGROUP_SUPER_MAGIC))
            env->version = CF_CGROUP_V1; /* v1 or hybrid: the controllers are on v1 */
        else {
            free(env);
            return cf_error_set(err, CF_E_UNSUPPORTED, "cgroup: no cgroup v1 memory or v2 hierarchy at %s", mount);
        }
    }

    if (o.own_dir) {
        if (!valid_name(o.own_dir) || strlen(o.own_dir) >= sizeof(env->own_name)) {
            free(env);
            return cf_error_set(err, CF_E_INVALID, "cgroup: invalid own directory name");
        }
        env->has_own = true;
        cf_strlcpy(env->own_name, o.own_dir, sizeof(env->own_name));
    }
    char rel[PATH_MAX];
    if (env->version == CF_CGROUP_V2) {
        char own[PATH_MAX];
        if (own_cgroup_path(proc, NULL, own, sizeof(own), err) < 0)
            goto fail;
        if (!o.parent && !o.fake_fs && v2_own_to_leaf(env, mount, own, err) < 0)
            goto fail;
        if (o.parent)
            cf_strlcpy(rel, o.parent, sizeof(rel));
        else if (snprintf(rel, sizeof(rel), "%s/codefleet", own) >= (int)sizeof(rel))
            goto toolong;
        if (add_own_dir(env, &o, 0, mount, rel, sizeof(rel), err) < 0)
            goto fail;
        if (mkdir_below(mount, rel, err) < 0 || v2_enable(env, mount, own, rel, err) < 0)
            goto fail;
        if (snprintf(env->parent[0], PATH_MAX, "%s%s%s", mount, rel[0] == '/' ? "" : "/", rel) >= PATH_MAX)
            goto toolong;
        if (!env->avail[C_MEM] || !env->avail[C_PIDS]) {
            cf_error_set(err, CF_E_UNSUPPORTED, "cgroup v2: memory and pids controllers are not available at %s",
                         env->parent[0]);
            goto fail;
        }
        if (!o.fake_fs)
            clone_into_probe(env->parent[0], &env->clone_into, &env->kill_taints);
    } else {
        for (int c = 0; c < C__N; c++) {
            char base[PATH_MAX];
            if (snprintf(base, sizeof(base), "%s/%s", mount, ctrl_names[c]) >= (int)sizeof(base))
                goto toolong;
            if (c == C_CPUACCT && !o.cpuacct)
                continue;
            if (!o.fake_fs && !is_fs(base, CGROUP_SUPER_MAGIC))
                continue;
            if (o.fake_fs && access(base, F_OK) != 0)
                continue;
            char own[PATH_MAX];
            if (o.parent)
                cf_strlcpy(rel, o.parent, sizeof(rel));
            else if (own_cgroup_path(proc, ctrl_names[c], own, sizeof(own), err) < 0)
                goto fail;
            else if (snprintf(rel, sizeof(rel), "%s/codefleet", own) >= (int)sizeof(rel))
                goto toolong;
            if (add_own_dir(env, &o, c, base, rel, sizeof(rel), err) < 0)
                goto fail;
            if (mkdir_below(base, rel, err) < 0)
                goto fail;
            if (snprintf(env->parent[c], PATH_MAX, "%s%s%s", base, rel[0] == '/' ? "" : "/", rel) >= PATH_MAX)
                goto toolong;
            env->avail[c] = true;
        }
        if (!env->avail[C_MEM] || !env->avail[C_PIDS]) {
            cf_error_set(err, CF_E_UNSUPPORTED, "cgroup v1: memory and pids controllers are not both mounted under %s",
                         mount);
            goto fail;
        }
        struct stat a, b;
        if (env->avail[C_CPU] && env->avail[C_CPUACCT] && stat(env->parent[C_CPU], &a) == 0 &&
            stat(env->parent[C_CPUACCT], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            env->avail[C_CPUACCT] = false;
            env->acct_in_cpu = true;
        }
    }
    *out = env;
    return 0;
toolong:
    cf_error_set(err, CF_E_LIMIT, "cgroup: path too long");
fail:
    free(env);
    return -1;
}

void cf_cgroup_env_destroy(cf_cgroup_env *env)
{
    free(env);
}

cf_cgroup_version cf_cgroup_env_version(const cf_cgroup_env *env)
{
    return env->version;
}

const char *cf_cgroup_env_parent_dir(const cf_cgroup_env *env)
{
    return env->parent[env->version == CF_CGROUP_V2 ? 0 : C_MEM];
}

bool cf_cgroup_env_has_cpu(const cf_cgroup_env *env)
{
    return env->avail[C_CPU];
}

bool cf_cgroup_env_clone_into(const cf_cgroup_env *env)
{
    return env->version == CF_CGROUP_V2 && env->clone_into;
}

bool cf_cgroup_env_kill_taints(const cf_cgroup_env *env)
{
    return env->version == CF_CGROUP_V2 && env->clone_into && env->kill_taints;
}

bool cf_cgroup_fresh_needed(const cf_cgroup *cg)
{
    return cg && cg->killed && cf_cgroup_env_kill_taints(cg->env);
}

bool cf_cgroup_env_has_freezer(const cf_cgroup_env *env)
{
    return env->version == CF_CGROUP_V1 && env->avail[C_FREEZER];
}

/* ---- one execution --------------------------------------------------- */

static int n_slots(const cf_cgroup_env *env)
{
    return env->version == CF_CGROUP_V2 ? 1 : C__N;
}

static bool valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 128 || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (name[i] <= ' ' || name[i] > '~' || name[i] == '/')
            return false;
    return true;
}

static int set_limits_v2(cf_cgroup *cg, const cf_cgroup_limits *lim, cf_error *err)
{
    const cf_cgroup_env *env = cg->env;
    const char *d = cg->dir[0];
    if (lim->memory_bytes > 0) {
        if (write_i64(env, d, "memory.max", lim->memory_bytes, err) < 0)
            return -1;
        /* No swap on top: a swapping execution is slow, not bounded. */
        if ((env->fake_fs || file_exists(d, "memory.swap.max")) && write_str(env, d, "memory.swap.max", "0", err) < 0)
            return -1;
        /* One OOM kill takes the whole execution: no half-dead process trees. */
        if ((env->fake_fs || file_exists(d, "memory.oom.group")) && write_str(env, d, "memory.oom.group", "1", err) < 0)
            return -1;
    }
    if (lim->pids_max > 0 && write_i64(env, d, "pids.max", lim->pids_max, err) < 0)
        return -1;
    if (lim->cpu_quota_us > 0) {
        if (!env->avail[C_CPU])
            return cf_error_set(err, CF_E_UNSUPPORTED, "cgroup v2: cpu controller not available");
        char buf[64];
        snprintf(buf, sizeof(buf), "%lld %lld", (long long)lim->cpu_quota_us,
                 (long long)(lim->cpu_period_us > 0 ? lim->cpu_period_us : 100000));
        if (write_str(env, d, "cpu.max", buf, err) < 0)
            return -1;
    }
    return 0;
}

static int set_limits_v1(cf_cgroup *cg, const cf_cgroup_limits *lim, cf_error *err)
{
    const cf_cgroup_env *env = cg->env;
    if (lim->memory_bytes > 0) {
        const char *d = cg->dir[C_MEM];
        if (write_i64(env, d, "memory.limit_in_bytes", lim->memory_bytes, err) < 0)
            return -1;
        /* memsw must be >= limit_in_bytes, hence set second; absent when
         * swap accounting is off (then there is nothing to cap). */
        if ((env->fake_fs || file_exists(d, "memory.memsw.limit_in_bytes")) &&
            write_i64(env, d, "memory.memsw.limit_in_bytes", lim->memory_bytes, err) < 0)
            return -1;
    }
    if (lim->pids_max > 0 && write_i64(env, cg->dir[C_PIDS], "pids.max", lim->pids_max, err) < 0)
        return -1;
    if (lim->cpu_quota_us > 0) {
        if (!cg->made[C_CPU])
            return cf_error_set(err, CF_E_UNSUPPORTED, "cgroup v1: cpu controller not mounted");
        int64_t period = lim->cpu_period_us > 0 ? lim->cpu_period_us : 100000;
        if (write_i64(env, cg->dir[C_CPU], "cpu.cfs_period_us", period, err) < 0 ||
            write_i64(env, cg->dir[C_CPU], "cpu.cfs_quota_us", lim->cpu_quota_us, err) < 0)
            return -1;
    }
    return 0;
}

int cf_cgroup_new(cf_cgroup_env *env, const char *name, const cf_cgroup_limits *lim, cf_cgroup **out, cf_error *err)
{
    *out = NULL;
    if (!name || !valid_name(name))
        return cf_error_set(err, CF_E_INVALID, "cgroup: invalid cgroup name");
    cf_cgroup_limits none = {0};
    if (!lim)
        lim = &none;
    if (lim->memory_bytes < 0 || lim->pids_max < 0 || lim->cpu_quota_us < 0 || lim->cpu_period_us < 0)
        return cf_error_set(err, CF_E_INVALID, "cgroup: negative limit");
    if (lim->cpu_quota_us > 0 && lim->cpu_quota_us < 1000)
        return cf_error_set(err, CF_E_INVALID, "cgroup: cpu quota below 1ms");

    cf_cgroup *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return cf_error_set(err, CF_E_NOMEM, "cgroup: out of memory");
    cg->env = env;
    cg->peak_fd = -1;
    cg->dir_fd = -1;
    for (int c = 0; c < n_slots(env); c++) {
        if (!env->avail[c] && env->version == CF_CGROUP_V1)
            continue;
        /* cpu only when asked (or when it carries the accounting): fewer
         * directories, cheaper create/remove. */
        if (env->version == CF_CGROUP_V1 && c == C_CPU && lim->cpu_quota_us == 0 && !env->acct_in_cpu)
            continue;
        if (path_join(cg->dir[c], PATH_MAX, env->parent[c], name, err) < 0)
            goto fail;
        if (mkdir(cg->dir[c], 0755) < 0) {
            if (errno == EEXIST)
                cf_error_set(err, CF_E_CONFLICT, "cgroup: %s already exists", cg->dir[c]);
            else
                cf_error_set_errno(err, CF_E_SANDBOX, errno, "cgroup: mkdir %s", cg->dir[c]);
            goto fail;
        }
        cg->made[c] = true;
    }
    if ((env->version == CF_CGROUP_V2 ? set_limits_v2(cg, lim, err) : set_limits_v1(cg, lim, err)) < 0)
        goto fail;
    cg->lim = *lim;
    *out = cg;
    return 0;
fail:
    cf_cgroup_destroy(cg);
    return -1;
}

int cf_cgroup_set_limits(cf_cgroup *cg, const cf_cgroup_limits *lim, cf_error *err)
{
    const cf_cgroup_env *env = cg->env;
    if (lim->memory_bytes < 0 || lim->pids_max < 0 || lim->cpu_quota_us < 0 || lim->cpu_period_us < 0)
        return cf_error_set(err, CF_E_INVALID, "cgroup: negative limit");
    if (lim->cpu_quota_us > 0 && lim->cpu_quota_us < 1000)
        return cf_error_set(err, CF_E_INVALID, "cgroup: cpu quota below 1ms");
    bool v2 = env->version == CF_CGROUP_V2;
    if (lim->memory_bytes != cg->lim.memory_bytes) {
        int64_t v = lim->memory_bytes > 0 ? lim->memory_bytes : -1;
        if (v2) {
            int rc = v > 0 ? write_i64(env, cg->dir[0], "memory.max", v, err)
                           : write_str(env, cg->dir[0], "memory.max", "max", err);
            if (rc < 0)
                return -1;
            if ((env->fake_fs || file_exists(cg->dir[0], "memory.swap.max")) &&
                write_str(env, cg->dir[0], "memory.swap.max", v > 0 ? "0" : "max", err) < 0)
                return -1;
            if ((env->fake_fs || file_exists(cg->dir[0], "memory.oom.group")) &&
                write_str(env, cg->dir[0], "memory.oom.group", "1", err) < 0)
                return -1;
        } else {
            const char *d = cg->dir[C_MEM];
            bool memsw = env->fake_fs || file_exists(d, "memory.memsw.limit_in_bytes");
            /* memsw >= limit at every moment: raise memsw first, lower it last. */
            bool raise = v < 0 || (cg->lim.memory_bytes > 0 && v > cg->lim.memory_bytes);
            if (raise && memsw && write_i64(env, d, "memory.memsw.limit_in_bytes", v, err) < 0)
                return -1;
            if (write_i64(env, d, "memory.limit_in_bytes", v, err) < 0)
                return -1;
            if (!raise && memsw && write_i64(env, d, "memory.memsw.limit_in_bytes", v, err) < 0)
                return -1;
        }
        cg->lim.memory_bytes = lim->memory_bytes;
    }
    if (lim->pids_max != cg->lim.pids_max) {
        const char *d = v2 ? cg->dir[0] : cg->dir[C_PIDS];
        int rc = lim->pids_max > 0 ? write_i64(env, d, "pids.max", lim->pids_max, err)
                                   : write_str(env, d, "pids.max", "max", err);
        if (rc < 0)
            return -1;
        cg->lim.pids_max = lim->pids_max;
    }
    if (lim->cpu_quota_us != cg->lim.cpu_quota_us || lim->cpu_period_us != cg->lim.cpu_period_us) {
        bool have = v2 ? env->avail[C_CPU] : cg->made[C_CPU];
        if (!have) {
            if (lim->cpu_quota_us > 0)
                return cf_error_set(err, CF_E_UNSUPPORTED, "cgroup: cpu controller not available here");
        } else if (v2) {
            char buf[64];
            int64_t period = lim->cpu_period_us > 0 ? lim->cpu_period_us : 100000;
            if (lim->cpu_quota_us > 0)
                snprintf(buf, sizeof(buf), "%lld %lld", (long long)lim->cpu_quota_us, (long long)period);
            else
                snprintf(buf, sizeof(buf), "max %lld", (long long)period);
            if (write_str(env, cg->dir[0], "cpu.max", buf, err) < 0)
                return -1;
        } else {
            int64_t period = lim->cpu_period_us > 0 ? lim->cpu_period_us : 100000;
            if (write_i64(env, cg->dir[C_CPU], "cpu.cfs_quota_us", -1, err) < 0 ||
                write_i64(env, cg->dir[C_CPU], "cpu.cfs_period_us", period, err) < 0 ||
                (lim->cpu_quota_us > 0 && write_i64(env, cg->dir[C_CPU], "cpu.cfs_quota_us", lim->cpu_quota_us, err) < 0))
                return -1;
        }
        cg->lim.cpu_quota_us = lim->cpu_quota_us;
        cg->lim.cpu_period_us = lim->cpu_period_us;
    }
    return 0;
}

bool cf_cgroup_env_has_cpuacct(const cf_cgroup_env *env)
{
    return env->version == CF_CGROUP_V2 || env->avail[C_CPUACCT] || env->acct_in_cpu;
}

int64_t cf_cgroup_cpu_usage_us(cf_cgroup *cg)
{
    if (cg->env->version == CF_CGROUP_V2)
        return read_key(cg->dir[0], "cpu.stat", "usage_usec");
    const char *d = cg->made[C_CPUACCT] ? cg->dir[C_CPUACCT] : (cg->env->acct_in_cpu && cg->made[C_CPU]) ? cg->dir[C_CPU] : NULL;
    if (!d)
        return -1;
    int64_t ns = read_i64(d, "cpuacct.usage");
    return ns < 0 ? -1 : ns / 1000;
}

/* v2 (kernel 6.12+): a write to memory.peak resets the peak seen through
 * that open file only; older kernels refuse the write.  Returns the fd, or
 * -1. */
static int open_peak_v2(const char *dir)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/memory.peak", dir);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -1;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t w;
    do
        w = write(fd, "reset\n", 6);
    while (w < 0 && errno == EINTR);
    if (w != 6) {
        close(fd);
        return -1;
    }
    return fd;
}

bool cf_cgroup_env_has_peak(const cf_cgroup_env *env)
{
    if (env->fake_fs)
        return false;
    if (env->version == CF_CGROUP_V1)
        return file_exists(env->parent[C_MEM], "memory.max_usage_in_bytes");
    int fd = open_peak_v2(env->parent[0]);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

int cf_cgroup_peak_reset(cf_cgroup *cg)
{
    if (cg->env->fake_fs)
        return -1;
    if (cg->env->version == CF_CGROUP_V1)
        return write_str(cg->env, cg->dir[C_MEM], "memory.max_usage_in_bytes", "0", NULL);
    if (cg->peak_fd >= 0)
        close(cg->peak_fd);
    cg->peak_fd = open_peak_v2(cg->dir[0]);
    return cg->peak_fd >= 0 ? 0 : -1;
}

int64_t cf_cgroup_memory_peak(cf_cgroup *cg)
{
    if (cg->env->fake_fs)
        return -1;
    if (cg->env->version == CF_CGROUP_V1)
        return read_i64(cg->dir[C_MEM], "memory.max_usage_in_bytes");
    if (cg->peak_fd < 0)
        return -1;
    char buf[64];
    ssize_t r;
    do
        r = pread(cg->peak_fd, buf, sizeof(buf) - 1, 0);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return -1;
    buf[r] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || end == buf || v < 0)
        return -1;
    return v;
}

int64_t cf_cgroup_oom_kills(cf_cgroup *cg)
{
    if (cg->env->version == CF_CGROUP_V2)
        return read_key(cg->dir[0], "memory.events", "oom_kill");
    return read_key(cg->dir[C_MEM], "memory.oom_control", "oom_kill");
}

int cf_cgroup_join_fds(cf_cgroup *cg, int *fds, int max, cf_error *err)
{
    if (cg->env->version != CF_CGROUP_V1 || cg->env->fake_fs)
        return 0;
    int n = 0;
    for (int c = 0; c < C__N; c++) {
        if (!cg->made[c])
            continue;
        char path[PATH_MAX];
        if (n == max || path_join(path, sizeof(path), cg->dir[c], "tasks", err) < 0)
            goto fail;
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            cf_error_set_errno(err, CF_E_SANDBOX, errno, "cgroup: open %s", path);
            goto fail;
        }
        /* Above stdio and the runner's report pipe: the runner's child
         * puts its own pipes on 0..3 before the sandbox setup runs. */
        fds[n] = fcntl(fd, F_DUPFD_CLOEXEC, 10);
        int saved = errno;
        close(fd);
        if (fds[n] < 0) {
            cf_error_set_errno(err, CF_E_SANDBOX, saved, "cgroup: dup %s", path);
            goto fail;
        }
        n++;
    }
    return n;
fail:
    while (n > 0)
        close(fds[--n]);
    return -1;
}

int cf_cgroup_join_self(const int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        ssize_t w;
        do
            w = write(fds[i], "0", 1);
        while (w < 0 && errno == EINTR);
        if (w != 1)
            return -1;
    }
    return 0;
}

int cf_cgroup_dir_fd(cf_cgroup *cg)
{
    if (cg->env->version != CF_CGROUP_V2 || cg->env->fake_fs || !cg->env->clone_into || cg->removed ||
        cf_cgroup_fresh_needed(cg))
        return -1;
    if (cg->dir_fd < 0)
        cg->dir_fd = open(cg->dir[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return cg->dir_fd;
}

int cf_cgroup_attach(cf_cgroup *cg, pid_t pid, cf_error *err)
{
    if (pid <= 1)
        return cf_error_set(err, CF_E_INVALID, "cgroup: bad pid %d", (int)pid);
    for (int c = 0; c < C__N; c++) {
        if (!cg->made[c])
            continue;
        if (write_i64(cg->env, cg->dir[c], "cgroup.procs", pid, err) < 0)
            return cf_error_wrap(err, "cgroup: attaching pid %d", (int)pid);
    }
    return 0;
}

/* The directory whose cgroup.procs lists every process of the execution. */
static const char *procs_dir(const cf_cgroup *cg)
{
    if (cg->env->version == CF_CGROUP_V2)
        return cg->dir[0];
    return cg->made[C_PIDS] ? cg->dir[C_PIDS] : cg->dir[C_MEM];
}

int cf_cgroup_nprocs(cf_cgroup *cg)
{
    char buf[65536];
    if (read_small(procs_dir(cg), "cgroup.procs", buf, sizeof(buf)) < 0)
        return -1;
    int n = 0;
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            n++;
    return n;
}

int cf_cgroup_stats_read(cf_cgroup *cg, cf_cgroup_stats *st, cf_error *err)
{
    memset(st, 0, sizeof(*st));
    st->memory_peak_bytes = -1;
    st->pids_current = -1;
    st->cpu_usage_us = cf_cgroup_cpu_usage_us(cg);
    if (cg->env->version == CF_CGROUP_V2) {
        const char *d = cg->dir[0];
        int64_t oom = read_key(d, "memory.events", "oom_kill");
        int64_t max = read_key(d, "memory.events", "max");
        if (oom < 0)
            return cf_error_set_errno(err, CF_E_SANDBOX, errno ? errno : EIO, "cgroup: reading %s/memory.events", d);
        st->oom_kills = oom;
        st->memory_limit_hit = max > 0;
        st->memory_peak_bytes = read_i64(d, "memory.peak");
        st->memory_current_bytes = read_i64(d, "memory.current");
        st->pids_current = read_i64(d, "pids.current");
    } else {
        const char *d = cg->dir[C_MEM];
        int64_t oom = read_key(d, "memory.oom_control", "oom_kill");
        /* With memsw set to the same limit, the memsw counter is charged
         * first and takes the failures: look at both. */
        int64_t failcnt = read_i64(d, "memory.failcnt");
        int64_t swfail = read_i64(d, "memory.memsw.failcnt");
        if (swfail > failcnt)
            failcnt = swfail;
        if (oom < 0 && failcnt < 0)
            return cf_error_set_errno(err, CF_E_SANDBOX, errno ? errno : EIO, "cgroup: reading %s/memory.oom_control",
                                      d);
        /* Kernels before 4.13 have no oom_kill line: failcnt is the sign. */
        st->oom_kills = oom >= 0 ? oom : 0;
        st->memory_peak_bytes = read_i64(d, "memory.max_usage_in_bytes");
        /* failcnt stays 0 on recent kernels even after an OOM kill, so a
         * peak within one charge batch (64 pages) of the limit counts too. */
        int64_t limit = read_i64(d, "memory.limit_in_bytes");
        st->memory_limit_hit = failcnt > 0 || (limit > 0 && limit != INT64_MAX && st->memory_peak_bytes >= 0 &&
                                               st->memory_peak_bytes + 64 * 4096 >= limit);
        st->memory_current_bytes = read_i64(d, "memory.usage_in_bytes");
        if (cg->made[C_PIDS])
            st->pids_current = read_i64(cg->dir[C_PIDS], "pids.current");
    }
    return 0;
}

static int wait_empty(cf_cgroup *cg)
{
    int64_t deadline = cf_mono_us() + KILL_WAIT_US;
    long nap = 200;
    for (;;) {
        int n = kill_listed(cg->env, procs_dir(cg));
        if (n <= 0)
            return n;
        if (cg->env->fake_fs || cf_mono_us() > deadline)
            return -1;
        sleep_us(nap);
        if (nap < 20000)
            nap *= 2;
    }
}

int cf_cgroup_kill_all(cf_cgroup *cg)
{
    if (!cg || cg->removed)
        return 0;
    const cf_cgroup_env *env = cg->env;
    /* The common case after a normal exit (the pid namespace took every
     * process with it): nothing to freeze or kill. */
    if (!env->fake_fs && cf_cgroup_nprocs(cg) == 0)
        return 0;
    if (env->version == CF_CGROUP_V2) {
        /* cgroup.kill (5.14+) kills atomically, forks included. */
        if (env->fake_fs || file_exists(cg->dir[0], "cgroup.kill")) {
            write_str(env, cg->dir[0], "cgroup.kill", "1", NULL);
            cg->killed = true;
        }
    } else if (cg->made[C_FREEZER]) {
        /* Freeze so nothing forks between reading the list and killing;
         * SIGKILL is delivered when thawed. */
        const char *fz = cg->dir[C_FREEZER];
        if (write_str(env, fz, "freezer.state", "FROZEN", NULL) == 0) {
            int64_t deadline = cf_mono_us() + 500000;
            char st[32];
            while (!env->fake_fs && read_small(fz, "freezer.state", st, sizeof(st)) > 0 &&
                   strncmp(st, "FROZEN", 6) != 0 && cf_mono_us() < deadline)
                sleep_us(500);
            kill_listed(env, fz);
            write_str(env, fz, "freezer.state", "THAWED", NULL);
        }
    }
    /* Fallback and final check: kill what is listed until empty. */
    return wait_empty(cg) == 0 ? 0 : -1;
}

void cf_cgroup_kill_all_hook(pid_t pid, void *cg)
{
    (void)pid;
    cf_cgroup_kill_all(cg);
}

static int remove_dir(const cf_cgroup_env *env, const char *dir, cf_error *err)
{
    if (env->fake_fs) {
        DIR *d = opendir(dir);
        if (d) {
            struct dirent *de;
            while ((de = readdir(d)))
                if (de->d_type == DT_REG)
                    unlinkat(dirfd(d), de->d_name, 0);
            closedir(d);
        }
    }
    /* The last exits may still be in flight after a kill: retry briefly. */
    int64_t deadline = cf_mono_us() + KILL_WAIT_US;
    long nap = 200;
    for (;;) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY || cf_mono_us() > deadline)
            return cf_error_set_errno(err, CF_E_SANDBOX, errno, "cgroup: rmdir %s", dir);
        sleep_us(nap);
        if (nap < 20000)
            nap *= 2;
    }
}

int cf_cgroup_remove(cf_cgroup *cg, cf_error *err)
{
    if (cg->removed)
        return 0;
    if (cg->dir_fd >= 0) {
        close(cg->dir_fd);
        cg->dir_fd = -1;
    }
    cf_cgroup_kill_all(cg);
    int rc = 0;
    for (int c = 0; c < C__N; c++) {
        if (!cg->made[c])
            continue;
        if (remove_dir(cg->env, cg->dir[c], err) < 0)
            rc = -1;
        else
            cg->made[c] = false;
    }
    if (rc == 0)
        cg->removed = true;
    return rc;
}

void cf_cgroup_destroy(cf_cgroup *cg)
{
    if (!cg)
        return;
    if (cg->peak_fd >= 0)
        close(cg->peak_fd);
    if (cg->dir_fd >= 0) {
        close(cg->dir_fd);
        cg->dir_fd = -1; /* remove would close it again */
    }
    cf_cgroup_remove(cg, NULL);
    free(cg);
}

const char *cf_cgroup_path(const cf_cgroup *cg)
{
    return cg->env->version == CF_CGROUP_V2 ? cg->dir[0] : cg->dir[C_MEM];
}

/* ---- start-up sweep -------------------------------------------------- */

int cf_cgroup_sweep(cf_cgroup_env *env, const char *prefix, cf_error *err)
{
    if (!prefix)
        prefix = "";
    size_t plen = strlen(prefix);
    int removed = 0, failed = 0;
    /* Kill everywhere first (v1: the freezer and pids copies list the same
     * processes), then remove. */
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < n_slots(env); c++) {
            if (!env->avail[c] && env->version == CF_CGROUP_V1)
                continue;
            DIR *d = opendir(env->parent[c]);
            if (!d)
                continue;
            struct dirent *de;
            while ((de = readdir(d))) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.' || strncmp(de->d_name, prefix, plen) != 0)
                    continue;
                char dir[PATH_MAX];
                if (path_join(dir, sizeof(dir), env->parent[c], de->d_name, NULL) < 0)
                    continue;
                if (pass == 0) {
                    if (env->version == CF_CGROUP_V2 && file_exists(dir, "cgroup.kill"))
                        write_str(env, dir, "cgroup.kill", "1", NULL);
                    for (int i = 0; i < 50 && kill_listed(env, dir) > 0 && !env->fake_fs; i++)
                        sleep_us(2000);
                    continue;
                }
                if (remove_dir(env, dir, err) < 0)
                    failed++;
                else if (c == 0 || env->version == CF_CGROUP_V2)
                    removed++;
            }
            closedir(d);
        }
    }
    if (failed)
        return cf_error_wrap(err, "cgroup sweep: %d cgroup(s) left", failed);
    return removed;
}

/* ---- one worker's own directory ----------------------------------------- */

/* v1: memsw must stay >= limit_in_bytes, so the order depends on whether
 * the limit goes up or down: try one order, then the other. */
static int v1_memory_limit(const cf_cgroup_env *env, const char *d, int64_t bytes, cf_error *err)
{
    bool memsw = env->fake_fs || file_exists(d, "memory.memsw.limit_in_bytes");
    if (write_i64(env, d, "memory.limit_in_bytes", bytes, NULL) == 0)
        return memsw ? write_i64(env, d, "memory.memsw.limit_in_bytes", bytes, err) : 0;
    if (memsw && write_i64(env, d, "memory.memsw.limit_in_bytes", bytes, err) < 0)
        return -1;
    return write_i64(env, d, "memory.limit_in_bytes", bytes, err);
}

int cf_cgroup_env_bound(cf_cgroup_env *env, int64_t memory_bytes, int64_t pids_max, cf_error *err)
{
    if (!env->has_own)
        return cf_error_set(err, CF_E_INVALID, "cgroup: no directory of the worker's own to bound");
    if (memory_bytes < 0 || pids_max < 0)
        return cf_error_set(err, CF_E_INVALID, "cgroup: negative limit");
    if (env->version == CF_CGROUP_V2) {
        const char *d = env->parent[0];
        if (memory_bytes > 0) {
            if (write_i64(env, d, "memory.max", memory_bytes, err) < 0)
                return -1;
            if ((env->fake_fs || file_exists(d, "memory.swap.max")) && write_str(env, d, "memory.swap.max", "0", err) < 0)
                return -1;
        }
        if (pids_max > 0 && write_i64(env, d, "pids.max", pids_max, err) < 0)
            return -1;
        return 0;
    }
    if (memory_bytes > 0) {
        /* Before 5.11 (without systemd) a v1 cgroup may not count its
         * children: its limit would then bound nothing. */
        const char *d = env->parent[C_MEM];
        if (!env->fake_fs && read_i64(d, "memory.use_hierarchy") != 1) {
            write_i64(env, d, "memory.use_hierarchy", 1, NULL);
            if (read_i64(d, "memory.use_hierarchy") != 1)
                return cf_error_set(err, CF_E_UNSUPPORTED, "cgroup v1: %s does not count its children "
                                    "(memory.use_hierarchy is not 1)", d);
        }
        if (v1_memory_limit(env, d, memory_bytes, err) < 0)
            return -1;
    }
    if (pids_max > 0 && write_i64(env, env->parent[C_PIDS], "pids.max", pids_max, err) < 0)
        return -1;
    return 0;
}

void cf_cgroup_env_usage(const cf_cgroup_env *env, int64_t *memory_bytes, int64_t *pids)
{
    bool v2 = env->version == CF_CGROUP_V2;
    *memory_bytes = read_i64(env->parent[v2 ? 0 : C_MEM], v2 ? "memory.current" : "memory.usage_in_bytes");
    *pids = read_i64(env->parent[v2 ? 0 : C_PIDS], "pids.current");
}

/* Kills what runs at or below dir (pass 0), or removes dir and what is
 * below it, deepest first (pass 1).  Executions' cgroups are one level
 * down; depth bounds a tree someone else made. */
static int own_tree_pass(const cf_cgroup_env *env, const char *dir, int pass, int depth, cf_error *err)
{
    int failed = 0;
    DIR *d = depth < 4 ? opendir(dir) : NULL;
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            char sub[PATH_MAX];
            if (de->d_type != DT_DIR || de->d_name[0] == '.' || path_join(sub, sizeof(sub), dir, de->d_name, NULL) < 0)
                continue;
            failed += own_tree_pass(env, sub, pass, depth + 1, err);
        }
        closedir(d);
    }
    if (pass == 0) {
        if (env->version == CF_CGROUP_V2 && depth == 0 && file_exists(dir, "cgroup.kill"))
            write_str(env, dir, "cgroup.kill", "1", NULL); /* the whole subtree at once */
        for (int i = 0; i < 50 && kill_listed(env, dir) > 0 && !env->fake_fs; i++)
            sleep_us(2000);
        return 0;
    }
    return failed + (remove_dir(env, dir, err) < 0);
}

int cf_cgroup_sweep_own_dirs(cf_cgroup_env *env, const char *prefix, bool (*dead)(const char *name, void *arg),
                             void *arg, cf_error *err)
{
    if (!env->has_own)
        return 0;
    size_t plen = strlen(prefix);
    int removed = 0, failed = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < n_slots(env); c++) {
            if (!env->base[c][0])
                continue;
            DIR *d = opendir(env->base[c]);
            if (!d)
                continue;
            struct dirent *de;
            while ((de = readdir(d))) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.' || strncmp(de->d_name, prefix, plen) != 0 ||
                    strcmp(de->d_name, env->own_name) == 0 || !dead(de->d_name, arg))
                    continue;
                char dir[PATH_MAX];
                if (path_join(dir, sizeof(dir), env->base[c], de->d_name, NULL) < 0)
                    continue;
                int f = own_tree_pass(env, dir, pass, 0, err);
                if (pass == 1) {
                    failed += f > 0;
                    removed += f == 0 && (c == 0 || env->version == CF_CGROUP_V2);
                }
            }
            closedir(d);
        }
    }
    if (failed)
        return cf_error_wrap(err, "cgroup sweep: %d dead worker's director%s left", failed, failed == 1 ? "y" : "ies");
    return removed;
}

void cf_cgroup_env_remove_own(cf_cgroup_env *env)
{
    if (!env || !env->has_own)
        return;
    for (int c = 0; c < n_slots(env); c++)
        if (env->base[c][0]) {
            if (env->fake_fs)
                remove_dir(env, env->parent[c], NULL);
            else
                rmdir(env->parent[c]); /* no wait at exit: what is left goes at the next start */
        }
}
