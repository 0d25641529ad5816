/* sandbox_instance: instance directories and the start-up sweep. */
#include "cf_instance.h"

#include "cf_log.h"
#include "cf_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

long cf_instance_tag_pid(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0)
        return -1;
    const char *p = name + pl;
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (errno || end == p || *end != '.' || pid <= 0 || pid > INT_MAX)
        return -1;
    return pid;
}

bool cf_instance_pid_gone(long pid)
{
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

int cf_instance_umount_below(const char *dir)
{
    size_t dl = strlen(dir);
    int n = 0;
    for (int round = 0; round < 8; round++) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
            return n;
        char line[4096], best[PATH_MAX] = "";
        while (fgets(line, sizeof(line), f)) {
            /* id parent maj:min root mountpoint ... */
            char *save = NULL, *tok = strtok_r(line, " ", &save);
            for (int i = 0; tok && i < 4; i++)
                tok = strtok_r(NULL, " ", &save);
            if (!tok || strncmp(tok, dir, dl) != 0 || (tok[dl] != '/' && tok[dl] != '\0'))
                continue;
            if (strlen(tok) > strlen(best))
                cf_strlcpy(best, tok, sizeof(best));
        }
        fclose(f);
        if (!best[0] || umount2(best, MNT_DETACH) < 0)
            return n;
        n++;
    }
    return n;
}

/* rmdir relative to dfd; counts a directory that went. */
static void rmdir_at(int dfd, const char *name, int *dirs)
{
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0)
        (*dirs)++;
}

void cf_instance_remove_dir(const char *dir, int *mounts, int *dirs)
{
    int n_mounts = cf_instance_umount_below(dir), n_dirs = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_name[0] == 's') {
                /* A container slot's bundle (sN.bundle): its two files. */
                int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                    unlinkat(sub, "config.json", 0);
                    unlinkat(sub, "log", 0);
                    close(sub);
                }
                rmdir_at(dirfd(d), de->d_name, &n_dirs);
            } else if (de->d_name[0] == 'z') {
                /* A zygote's share (zN, its tmpfs unmounted above) and its
                 * mount point m: left by a killed worker, they kept the
                 * whole instance directory from going, for ever. */
                int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                    rmdir_at(sub, "m", &n_dirs);
                    close(sub);
                }
                rmdir_at(dirfd(d), de->d_name, &n_dirs);
            }
        unlinkat(dirfd(d), CF_INSTANCE_RESOLV_NAME, 0);
        closedir(d);
    }
    if (rmdir(dir) == 0)
        n_dirs++;
    if (mounts)
        *mounts = n_mounts;
    if (dirs)
        *dirs = n_dirs;
}

/* ---- the start-up sweep ---- */

/* "<prefix><pid>.<n>" at the start of name, followed by its end or '-'
 * (an instance directory; its cgroups and containers) -> the tag in
 * tag[size] and the pid; -1 when name is not one of ours. */
static long tag_of(const char *name, const char *prefix, char *tag, size_t size)
{
    long pid = cf_instance_tag_pid(name, prefix);
    if (pid < 0)
        return -1;
    const char *p = strchr(name + strlen(prefix), '.') + 1, *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q == p || (*q != '\0' && *q != '-') || (size_t)(q - name) >= size)
        return -1;
    memcpy(tag, name, (size_t)(q - name));
    tag[q - name] = '\0';
    return pid;
}

typedef struct dead_tags {
    char (*tag)[64];
    long *pid;
    size_t n, cap;
} dead_tags;

/* Adds the dead instances named in dir (once each). */
static void dead_tags_scan(dead_tags *t, const char *dir, const char *prefix)
{
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char tag[64];
        long pid = tag_of(de->d_name, prefix, tag, sizeof(tag));
        if (pid < 0 || !cf_instance_pid_gone(pid))
            continue;
        size_t i = 0;
        while (i < t->n && strcmp(t->tag[i], tag) != 0)
            i++;
        if (i < t->n)
            continue;
        if (t->n == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 8;
            char(*nt)[64] = realloc(t->tag, cap * sizeof(*nt));
            if (nt)
                t->tag = nt;
            long *np = realloc(t->pid, cap * sizeof(*np));
            if (np)
                t->pid = np;
            if (!nt || !np)
                break; /* the next worker's sweep takes the rest */
            t->cap = cap;
        }
        memcpy(t->tag[t->n], tag, sizeof(tag));
        t->pid[t->n++] = pid;
    }
    closedir(d);
}

void cf_instance_sweep(const cf_instance_sweep_opts *o, cf_instance_swept *out)
{
    cf_instance_swept total = {0};
    dead_tags t = {0};
    dead_tags_scan(&t, o->extra_dir, o->prefix);
    dead_tags_scan(&t, o->real_root, o->prefix);
    if (o->cgenv)
        dead_tags_scan(&t, cf_cgroup_env_parent_dir(o->cgenv), o->prefix);
    for (size_t i = 0; i < t.n; i++) {
        int runtime = 0, cgroups = 0, mounts = 0, dirs = 0;
        char cgleft[160] = "";
        if (o->extra && o->extra_dir)
            runtime = o->extra(o->extra_arg, t.tag[i]);
        if (o->cgenv) {
            char pre[72];
            snprintf(pre, sizeof(pre), "%s-", t.tag[i]);
            cf_error e;
            cf_error_clear(&e);
            cgroups = cf_cgroup_sweep(o->cgenv, pre, &e);
            if (cgroups < 0) {
                snprintf(cgleft, sizeof(cgleft), " (%.150s)", e.msg);
                cgroups = 0;
            }
        }
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/%s", o->real_root, t.tag[i]) < (int)sizeof(path))
            cf_instance_remove_dir(path, &mounts, &dirs);
        cf_log_warn(o->log_sub ? o->log_sub : "sweep",
                    "worker pid %ld died without cleaning up; swept its instance %s: cgroups=%d mounts=%d dirs=%d "
                    "crun_state=%d%s",
                    t.pid[i], t.tag[i], cgroups, mounts, dirs, runtime, cgleft);
        total.instances++;
        total.cgroups += cgroups;
        total.mounts += mounts;
        total.dirs += dirs;
        total.runtime += runtime;
    }
    free(t.tag);
    free(t.pid);
    if (out)
        *out = total;
}
