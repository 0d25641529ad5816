/* cf_workdir: private per-execution work directories, handled safely.
 *
 * Everything inside a work directory is hostile once user code has run in
 * it: it may have planted symlinks, FIFOs, deep trees or read-only
 * directories.  So every operation here works relative to directory fds,
 * never follows a symlink (O_NOFOLLOW on every component), opens files
 * O_NONBLOCK and accepts only regular files, and bounds depth, counts and
 * sizes.  Paths handed in by requests are checked with cf_path_check first.
 *
 * A cf_workdir is used by one thread at a time.
 */
#ifndef CF_WORKDIR_H
#define CF_WORKDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "cf_error.h"
#include "cf_schema.h"
#include "cf_util.h"

#define CF_PATH_MAX_BYTES 4096  /* a whole relative path */
#define CF_PATH_MAX_COMPONENT 255
#define CF_WORKDIR_MAX_DEPTH 32 /* directory levels put/collect accept */

typedef struct cf_workdir cf_workdir;

/* Creates root/cf-XXXXXX (mode 0700; root must exist).  When owner is not
 * (uid_t)-1 the directory, and everything cf_workdir_put creates in it, is
 * chowned to owner:group so a program running as that uid can use it.
 * *out is owned by the caller (cf_workdir_destroy). */
int cf_workdir_create(const char *root, uid_t owner, gid_t group, cf_workdir **out, cf_error *err);

/* Absolute path of the directory (for chdir and CODEFLEET_* variables). */
const char *cf_workdir_path(const cf_workdir *wd);
/* An O_DIRECTORY fd of the directory, owned by wd. */
int cf_workdir_dirfd(const cf_workdir *wd);

/* Checks a relative path from a request: not empty, not absolute, no empty,
 * "." or ".." components, no NUL byte within len, no control characters,
 * at most CF_PATH_MAX_BYTES in total and CF_PATH_MAX_COMPONENT per
 * component, at most CF_WORKDIR_MAX_DEPTH components.  Returns 0, or -1 with
 * a short reason ("'..' component") in reason (may be NULL). */
int cf_path_check(const char *path, size_t len, char *reason, size_t rsz);

/* Creates relpath (checked with cf_path_check) holding data, with missing
 * parent directories (0755).  Never follows symlinks and never replaces an
 * existing entry (O_EXCL).  mode is masked to 0777.  Errors: CF_E_INVALID
 * for an unacceptable path or an existing/conflicting entry (the request's
 * fault), CF_E_SYSTEM otherwise. */
int cf_workdir_put(cf_workdir *wd, const char *relpath, const void *data, size_t len, mode_t mode, cf_error *err);

/* Reads regular file relpath into out (appended; out's own cap applies
 * too).  When the file is larger than max, returns 0 with *too_big set and
 * nothing appended.  Symlinks, FIFOs, devices and directories are refused
 * (CF_E_INVALID); a missing file is CF_E_NOT_FOUND.  too_big may be NULL. */
int cf_workdir_read(cf_workdir *wd, const char *relpath, size_t max, cf_buf *out, bool *too_big, cf_error *err);

/* Collects every regular file below the directory (symlinks, FIFOs,
 * sockets and devices are skipped), sorted by path.  More than max_files
 * files, more than max_total_bytes of content, or a tree deeper than
 * CF_WORKDIR_MAX_DEPTH fail with CF_E_LIMIT.  *files (caller frees with
 * cf_workdir_files_free) holds *n entries. */
int cf_workdir_collect(cf_workdir *wd, size_t max_files, size_t max_total_bytes, cf_file **files, size_t *n,
                       cf_error *err);
void cf_workdir_files_free(cf_file *files, size_t n);

/* The same, for the regular files want() accepts (path relative to the
 * directory); the others are neither read nor counted against the limits.
 * Entries whose name is not UTF-8 text without control characters are
 * skipped (a result could not carry them) and counted in *skipped_names
 * (may be NULL); cf_workdir_collect skips them too. */
typedef bool (*cf_workdir_want_fn)(const char *path, void *arg);
int cf_workdir_collect_matching(cf_workdir *wd, size_t max_files, size_t max_total_bytes, cf_workdir_want_fn want,
                                void *want_arg, cf_file **files, size_t *n, size_t *skipped_names, cf_error *err);

/* Creates the fixed-name subdirectory name (one component) inside parent
 * and returns a handle to it with the same guarantees.  Cheaper than
 * cf_workdir_create (no mkdtemp, no realpath); its destroy only closes it:
 * the parent's destroy removes it.  It must be destroyed before parent. */
int cf_workdir_create_in(cf_workdir *parent, const char *name, uid_t owner, gid_t group, cf_workdir **out,
                         cf_error *err);

/* Removes the whole tree (without following symlinks; read-only
 * directories are made writable first; deep trees are flattened so fd use
 * stays bounded) and frees wd.  NULL-safe. */
void cf_workdir_destroy(cf_workdir *wd);

/* Frees wd and closes its descriptors without removing anything: for a
 * tree on a file system about to be unmounted as a whole.  NULL-safe. */
void cf_workdir_release(cf_workdir *wd);

#endif
