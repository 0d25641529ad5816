/* The cgroup hierarchy of the host a test runs on, seen the way the tests
 * need it (header-only: unit and integration tests both use it).
 *
 * A test gives the sandbox a parent such as "/cf-sbtest-1234"; on cgroup v1
 * that parent exists once per controller (/sys/fs/cgroup/memory/cf-...,
 * /sys/fs/cgroup/pids/cf-..., ...), on v2 once (/sys/fs/cgroup/cf-...).
 * These helpers count what lives below such a parent and remove it on
 * whichever hierarchy the host has, so "nothing left behind" checks
 * something on both and a teardown leaves nothing on either. */
#ifndef CF_TEST_CGROUP_HOST_H
#define CF_TEST_CGROUP_HOST_H

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

typedef enum { CGH_NONE = 0, CGH_V1 = 1, CGH_V2 = 2 } cgh_version;

/* v2 when /sys/fs/cgroup is the unified tree; v1 when the memory
 * controller is a v1 hierarchy (v1 or hybrid: the sandbox uses v1 there). */
static inline cgh_version cgh_detect(void)
{
    struct statfs sf;
    if (statfs("/sys/fs/cgroup", &sf) == 0 && (long)sf.f_type == CGROUP2_SUPER_MAGIC)
        return CGH_V2;
    if (statfs("/sys/fs/cgroup/memory", &sf) == 0 && (long)sf.f_type == CGROUP_SUPER_MAGIC)
        return CGH_V1;
    return CGH_NONE;
}

static inline const char *cgh_name(cgh_version v)
{
    return v == CGH_V2 ? "v2" : v == CGH_V1 ? "v1" : "none";
}

/* Whether the running kernel is at least major.minor. */
static inline bool cgh_kernel_at_least(int major, int minor)
{
    struct utsname u;
    int ma = 0, mi = 0;
    if (uname(&u) < 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2)
        return false;
    return ma > major || (ma == major && mi >= minor);
}

/* Whether the sandbox can read a per-execution memory peak from the
 * cgroup: v1 always (max_usage_in_bytes can be reset); v2 from kernel 6.12
 * (memory.peak reset through an open file), else getrusage's RSS. */
static inline bool cgh_expect_cgroup_peak(void)
{
    cgh_version v = cgh_detect();
    return v == CGH_V1 || (v == CGH_V2 && cgh_kernel_at_least(6, 12));
}

#define CGH_MAX_DIRS 5

/* Whether parent is one of the tests' own cgroups: "/.../cf-*" or
 * ".../codefleet" (the default parent).  Anything else (above all "" or
 * "/", which a failed setup would leave) is never counted, killed or
 * removed: that would be every process of the host. */
static inline bool cgh_parent_safe(const char *parent)
{
    if (!parent || parent[0] != '/' || strstr(parent, "..") || strlen(parent) > 200)
        return false;
    const char *last = strrchr(parent, '/') + 1;
    return strncmp(last, "cf-", 3) == 0 || strcmp(last, "codefleet") == 0;
}

/* The directories of parent (relative to each hierarchy's root, "/x/y") on
 * this host: one per v1 controller the sandbox may use, or the one v2
 * directory.  Returns how many were written (whether or not they exist);
 * none for a parent that is not a test's own (cgh_parent_safe). */
static inline int cgh_parent_dirs(const char *parent, char dirs[CGH_MAX_DIRS][256])
{
    static const char *const ctrls[] = {"memory", "pids", "freezer", "cpu", "cpuacct"};
    if (!cgh_parent_safe(parent))
        return 0;
    cgh_version v = cgh_detect();
    if (v == CGH_V2) {
        snprintf(dirs[0], 256, "/sys/fs/cgroup%s", parent);
        return 1;
    }
    if (v == CGH_NONE)
        return 0;
    int n = 0;
    for (size_t i = 0; i < sizeof(ctrls) / sizeof(ctrls[0]); i++) {
        char root[64];
        struct statfs sf;
        snprintf(root, sizeof(root), "/sys/fs/cgroup/%s", ctrls[i]);
        if (statfs(root, &sf) != 0 || (long)sf.f_type != CGROUP_SUPER_MAGIC)
            continue;
        snprintf(dirs[n++], 256, "%s%s", root, parent);
    }
    return n;
}

/* Calls fn on every cgroup directory below dir (depth first, children
 * before their parent); dir itself is not visited. */
static inline void cgh_walk(const char *dir, void (*fn)(const char *path, void *arg), void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        char sub[PATH_MAX];
        int n = snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
        if (n < 0 || (size_t)n >= sizeof(sub))
            continue;
        cgh_walk(sub, fn, arg);
        fn(sub, arg);
    }
    closedir(d);
}

static inline void cgh_count_one(const char *path, void *arg)
{
    (void)path;
    (*(int *)arg)++;
}

/* Cgroups below parent, summed over the hierarchies (v1: a cgroup made in
 * memory and pids counts twice). */
static inline int cgh_count_cgroups(const char *parent)
{
    char dirs[CGH_MAX_DIRS][256];
    int nd = cgh_parent_dirs(parent, dirs), n = 0;
    for (int i = 0; i < nd; i++)
        cgh_walk(dirs[i], cgh_count_one, &n);
    return n;
}

typedef struct cgh_proc_count {
    bool (*exclude)(long pid, void *arg); /* NULL: count every process */
    void *arg;
    int n;
} cgh_proc_count;

static inline void cgh_count_procs_in(const char *path, void *arg)
{
    cgh_proc_count *c = arg;
    char f[PATH_MAX + 16];
    snprintf(f, sizeof(f), "%s/cgroup.procs", path);
    FILE *fp = fopen(f, "r");
    if (!fp)
        return;
    long pid;
    while (fscanf(fp, "%ld", &pid) == 1)
        if (!c->exclude || !c->exclude(pid, c->arg))
            c->n++;
    fclose(fp);
}

/* Processes in the cgroups below parent (not in parent itself), summed
 * over the hierarchies; exclude may leave some out (and look at them). */
static inline int cgh_count_procs(const char *parent, bool (*exclude)(long pid, void *arg), void *arg)
{
    char dirs[CGH_MAX_DIRS][256];
    int nd = cgh_parent_dirs(parent, dirs);
    cgh_proc_count c = {.exclude = exclude, .arg = arg};
    for (int i = 0; i < nd; i++)
        cgh_walk(dirs[i], cgh_count_procs_in, &c);
    return c.n;
}

static inline void cgh_kill_in(const char *path, void *arg)
{
    (void)arg;
    char f[PATH_MAX + 16];
    snprintf(f, sizeof(f), "%s/cgroup.procs", path);
    FILE *fp = fopen(f, "r");
    if (!fp)
        return;
    long pid;
    while (fscanf(fp, "%ld", &pid) == 1)
        if (pid > 1 && pid != (long)getpid())
            kill((pid_t)pid, SIGKILL);
    fclose(fp);
}

static inline void cgh_rmdir_one(const char *path, void *arg)
{
    (void)arg;
    for (int i = 0; i < 200 && rmdir(path) < 0 && errno == EBUSY; i++)
        usleep(10000);
}

/* Teardown: kills what runs below parent, removes every cgroup below it
 * and parent itself on each hierarchy.  0 when nothing is left. */
static inline int cgh_remove(const char *parent)
{
    char dirs[CGH_MAX_DIRS][256];
    int nd = cgh_parent_dirs(parent, dirs), left = 0;
    for (int i = 0; i < nd; i++) {
        cgh_kill_in(dirs[i], NULL);
        cgh_walk(dirs[i], cgh_kill_in, NULL);
        cgh_walk(dirs[i], cgh_rmdir_one, NULL);
        cgh_rmdir_one(dirs[i], NULL);
        if (access(dirs[i], F_OK) == 0)
            left++;
    }
    return left ? -1 : 0;
}

#endif
