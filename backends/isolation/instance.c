/* sandbox_instance: instance directories and the start-up sweep. */
#include "cf_instance.h"

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

void cf_instance_umount_below(const char *dir)
{
    size_t dl = strlen(dir);
    for (int round = 0; round < 8; round++) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
            return;
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
            return;
    }
}

void cf_instance_remove_dir(const char *dir)
{
    cf_instance_umount_below(dir);
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
                unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
            } else if (de->d_name[0] == 'z') {
                /* A zygote's share (zN, its tmpfs unmounted above) and its
                 * mount point m: left by a killed worker, they kept the
                 * whole instance directory from going, for ever. */
                int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                    unlinkat(sub, "m", AT_REMOVEDIR);
                    close(sub);
                }
                unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
            }
        unlinkat(dirfd(d), CF_INSTANCE_RESOLV_NAME, 0);
        closedir(d);
    }
    rmdir(dir);
}

void cf_instance_sweep(const char *real_root, cf_cgroup_env *cgenv, const char *prefix, int *dirs, int *cgroups)
{
    *dirs = *cgroups = 0;
    DIR *d = opendir(real_root);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            long pid = cf_instance_tag_pid(de->d_name, prefix);
            if (pid < 0 || !cf_instance_pid_gone(pid))
                continue;
            char path[PATH_MAX];
            if (snprintf(path, sizeof(path), "%s/%s", real_root, de->d_name) >= (int)sizeof(path))
                continue;
            cf_instance_remove_dir(path);
            (*dirs)++;
        }
        closedir(d);
    }
    if (!cgenv)
        return;
    d = opendir(cf_cgroup_env_parent_dir(cgenv));
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        long pid = cf_instance_tag_pid(de->d_name, prefix);
        if (pid < 0 || !cf_instance_pid_gone(pid))
            continue;
        char pre[64];
        snprintf(pre, sizeof(pre), "%s%ld.", prefix, pid);
        cf_error e;
        int n = cf_cgroup_sweep(cgenv, pre, &e);
        if (n > 0)
            *cgroups += n;
    }
    closedir(d);
}
