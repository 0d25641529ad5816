/* sandbox_instance: what a sandbox-type backend leaves on the host while it
 * runs, and the start-up sweep that removes what a dead worker left.
 *
 * Each backend instance owns a directory <work_root>/<prefix><pid>.<n>
 * (slot tmpfs mounts below it, a resolv.conf) and cgroups named
 * <prefix><pid>.<n>-...  The sweep removes the directories and cgroups
 * whose worker pid no longer exists, and says so; a live worker's are
 * never touched.
 */
#ifndef CF_SANDBOX_INSTANCE_H
#define CF_SANDBOX_INSTANCE_H

#include "cf_cgroup.h"

#define CF_INSTANCE_RESOLV_NAME "resolv.conf"

/* "<prefix><pid>.<n>..." -> pid, or -1 when name is not one of ours. */
long cf_instance_tag_pid(const char *name, const char *prefix);
/* Whether no process has that pid any more (its worker is dead). */
bool cf_instance_pid_gone(long pid);

/* Unmounts every mount at or below dir (deepest first, from mountinfo);
 * returns how many it unmounted. */
int cf_instance_umount_below(const char *dir);
/* Removes an instance directory: its mounts, the slot mount points (names
 * starting with 's'; a container slot's bundle directory with its
 * config.json and log), the zygotes' shares (zN and zN/m) and resolv.conf,
 * then the directory itself.  Anything else in it is left.  mounts and
 * dirs (either may be NULL) get how many mounts and directories went. */
void cf_instance_remove_dir(const char *dir, int *mounts, int *dirs);

/* Removes a dead instance's entries from a runtime's own state (the
 * container backend: crun's state directory, entries <tag>-...); returns
 * how many went. */
typedef int (*cf_instance_sweep_extra_fn)(void *arg, const char *tag);

typedef struct cf_instance_sweep_opts {
    const char *real_root;   /* the work root, resolved */
    cf_cgroup_env *cgenv;    /* may be NULL: no cgroups swept */
    const char *prefix;      /* "cfsb-" ... */
    const char *log_sub;     /* the log lines' subsystem ("sandbox") */
    const char *extra_dir;   /* may be NULL: a runtime's state, scanned for dead tags too */
    cf_instance_sweep_extra_fn extra;
    void *extra_arg;
} cf_instance_sweep_opts;

/* What a sweep removed, over all the dead instances it found. */
typedef struct cf_instance_swept {
    int instances, cgroups, mounts, dirs, runtime;
} cf_instance_swept;

/* Sweeps what dead workers' instances (<prefix><pid>.<n>, pid gone) left:
 * their runtime state (extra), cgroups, mounts and directories, in that
 * order (their processes die before their files go).  Logs one warning per
 * dead instance with its pid and the counts per kind: it is the evidence
 * that a worker died without cleaning up.  Live workers' entries are never
 * touched.  out (may be NULL) gets the totals. */
void cf_instance_sweep(const cf_instance_sweep_opts *o, cf_instance_swept *out);

#endif
