/* sandbox_fs: the private root filesystem of a sandboxed child.
 *
 * The parent builds a plan once per execution (cf_sandbox_fs_new: every
 * path string, every file's content, the host layout decisions such as
 * usrmerge symlinks), and the child, already in its new user + mount + pid
 * namespaces, replays it with async-signal-safe calls only
 * (cf_sandbox_fs_apply: mount, mkdir, open, write, symlink, pivot_root; no
 * malloc, no stdio).
 *
 * The resulting tree:
 *   /            tmpfs (size/inode capped), read-only after pivot_root
 *   /usr /bin /sbin /lib /lib32 /lib64 ...   read-only binds, or the host's
 *                usrmerge symlinks when they are symlinks there
 *   /etc         tmpfs dir holding read-only binds of what runtimes need
 *                (ld.so.cache, ld.so.conf(.d), alternatives, ssl, localtime,
 *                nsswitch.conf) and fresh passwd, group, hosts, hostname
 *   /proc        a fresh proc of the new pid namespace (nosuid,nodev,noexec)
 *   /dev         tmpfs with binds of null, zero, full, random, urandom,
 *                the fd/stdin/stdout/stderr symlinks and a /dev/shm tmpfs
 *   /tmp         tmpfs, size capped, 1777, nosuid,nodev
 *   /work        the execution's work directory, read-write or read-only
 * Every bind is nosuid,nodev; read-only binds keep the host mount's locked
 * flags (a user namespace may not clear them).
 */
#ifndef CF_SANDBOX_FS_H
#define CF_SANDBOX_FS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cf_error.h"

#define CF_SANDBOX_MAX_BINDS 64

/* A host path bound into the sandbox after the fixed tree (in order, so a
 * later bind may sit inside an earlier one).  The child opens src with
 * O_PATH|O_NOFOLLOW before it changes uid and, when dev/ino are given
 * (check_id), refuses a source that is no longer the object the parent
 * validated. */
typedef struct cf_sandbox_bind {
    const char *src; /* absolute host path: a directory or a regular file */
    const char *dst; /* absolute path inside */
    bool rw;
    bool check_id;
    dev_t dev;
    ino_t ino;
} cf_sandbox_bind;

typedef struct cf_sandbox_fs_spec {
    const char *work_dir;     /* host path bound at /work; NULL: /work is an empty tmpfs dir */
    bool work_rw;
    int64_t root_size_bytes;  /* 0: 8 MiB (the root holds only dirs and small files) */
    int64_t tmp_size_bytes;   /* 0: 64 MiB; also counts against the memory cgroup */
    int64_t nr_inodes;        /* per tmpfs; 0: 4096 */
    uid_t uid;                /* the user code's ids inside the namespace, for passwd/group */
    gid_t gid;
    const char *hostname;     /* NULL: "sandbox" */
    /* Extra read-only host paths needed by a runtime (absolute, may be
     * NULL-terminated list or NULL).  Missing ones are skipped. */
    const char *const *extra_ro;
    /* Binds made after the fixed tree (see cf_sandbox_bind); at most
     * CF_SANDBOX_MAX_BINDS - 1 (work_dir counts as one).  Replaceable per
     * execution with cf_sandbox_fs_set_binds. */
    const cf_sandbox_bind *binds;
    size_t n_binds;
    /* Empty directories made in the root (absolute, NULL-terminated, may
     * be NULL): places a process of the sandbox mounts on later. */
    const char *const *mountpoints;
    /* Mounts the host makes later below a shared mount that is bound in
     * at receive_below (a bind's destination) show up inside there: the
     * tree is built MS_SLAVE instead of MS_PRIVATE, and every other mount
     * is made private once the root is in place.  Either way nothing
     * mounted inside reaches the host. */
    bool receive_host_mounts;
    const char *receive_below;
} cf_sandbox_fs_spec;

typedef struct cf_sandbox_fs cf_sandbox_fs;

/* Builds the plan.  *out is owned by the caller (cf_sandbox_fs_destroy). */
int cf_sandbox_fs_new(const cf_sandbox_fs_spec *spec, cf_sandbox_fs **out, cf_error *err);
void cf_sandbox_fs_destroy(cf_sandbox_fs *fs); /* NULL-safe */

/* Replaces the plan's binds (work_dir and spec->binds included: pass the
 * whole list) so one plan of the fixed tree serves many executions.  The
 * plan must not be in use by a child being set up. */
int cf_sandbox_fs_set_binds(cf_sandbox_fs *fs, const cf_sandbox_bind *binds, size_t n, cf_error *err);

/* Child side, async-signal-safe.  Must run in a fresh mount namespace (and
 * a fresh pid namespace for /proc) with CAP_SYS_ADMIN over it.  Ends with
 * cwd "/" in the new root.  Returns 0, or -1 with errno set and *msg naming
 * the step that failed (a string owned by fs).
 * = cf_sandbox_fs_open_binds + cf_sandbox_fs_apply_fds. */
int cf_sandbox_fs_apply(const cf_sandbox_fs *fs, const char **msg);

/* Child: makes the bind mounted at path (inside the new root) read-only,
 * keeping its other flags.  Needs the capabilities still held. */
int cf_sandbox_fs_remount_ro(const char *path);

/* The two halves, for a child that changes uid in between (the bind
 * sources are opened with the child's original host credentials, so a
 * source in a directory only root may search still works).  fds holds
 * CF_SANDBOX_MAX_BINDS entries; apply_fds closes them. */
int cf_sandbox_fs_open_binds(const cf_sandbox_fs *fs, int *fds, const char **msg);
int cf_sandbox_fs_apply_fds(const cf_sandbox_fs *fs, int *fds, const char **msg);

/* Child side, async-signal-safe: clears supplementary groups and sets
 * real/effective/saved uid and gid.  Call it before cf_sandbox_fs_apply:
 * files the setup creates must be owned by a mapped id (an unmapped fsuid
 * gets EOVERFLOW), and the capabilities of the user namespace survive the
 * change because the old uid was not the namespace's root. */
int cf_sandbox_become(uid_t uid, gid_t gid);

/* Child side, async-signal-safe: empties the bounding, ambient, effective,
 * permitted and inheritable capability sets. */
int cf_sandbox_drop_caps(void);

/* Number of steps in the plan (for tests and debug logs). */
size_t cf_sandbox_fs_steps(const cf_sandbox_fs *fs);

#endif
