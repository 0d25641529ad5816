/* sandbox_instance: what a sandbox-type backend leaves on the host while it
 * runs, and the start-up sweep that removes what a dead worker left.
 *
 * Each backend instance owns a directory <work_root>/<prefix><pid>.<n>
 * (slot tmpfs mounts below it, a resolv.conf) and cgroups named
 * <prefix><pid>.<n>-...  The sweep removes the directories and cgroups
 * whose worker pid no longer exists; a live worker's are never touched.
 */
#ifndef CF_SANDBOX_INSTANCE_H
#define CF_SANDBOX_INSTANCE_H

#include "cf_cgroup.h"

#define CF_INSTANCE_RESOLV_NAME "resolv.conf"

/* "<prefix><pid>.<n>..." -> pid, or -1 when name is not one of ours. */
long cf_instance_tag_pid(const char *name, const char *prefix);
/* Whether no process has that pid any more (its worker is dead). */
bool cf_instance_pid_gone(long pid);

/* Unmounts every mount at or below dir (deepest first, from mountinfo). */
void cf_instance_umount_below(const char *dir);
/* Removes an instance directory: its mounts, the slot mount points (names
 * starting with 's'; a container slot's bundle directory with its
 * config.json and log) and resolv.conf, then the directory itself.
 * Anything else in it is left. */
void cf_instance_remove_dir(const char *dir);
/* Sweeps dead workers' instance directories below real_root and their
 * cgroups below cgenv's parent (cgenv may be NULL). */
void cf_instance_sweep(const char *real_root, cf_cgroup_env *cgenv, const char *prefix, int *dirs, int *cgroups);

#endif
