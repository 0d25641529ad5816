/* Safe per-execution work directories (see cf_workdir.h). */
#include "cf_workdir.h"

#include "cf_schema.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Directory levels destroy descends before flattening (moving the deeper
 * part up to the top) so a hostile deep tree never costs more fds. */
#define DESTROY_MAX_DEPTH 16
#define DESTROY_MAX_PASSES 100000

struct cf_workdir {
    int root_fd;    /* the parent (work_root) */
    int fd;         /* the work directory itself */
    char name[32];  /* its name under root */
    char *path;     /* absolute path */
    uid_t owner;    /* (uid_t)-1 = keep */
    gid_t group;
    unsigned flat_counter;
    bool sub;       /* made by cf_workdir_create_in: removed with its parent */
};

int cf_workdir_create(const char *root, uid_t owner, gid_t group, cf_workdir **out, cf_error *err)
{
    *out = NULL;
    if (!root || !*root)
        return cf_error_set(err, CF_E_INVALID, "workdir: no root directory");
    cf_workdir *wd = calloc(1, sizeof(*wd));
    if (!wd)
        return cf_error_set(err, CF_E_NOMEM, "workdir: out of memory");
    wd->root_fd = wd->fd = -1;
    wd->owner = owner;
    wd->group = group;

    /* An absolute, symlink-free root: the path is handed to user code and
     * used for chdir, so it must mean the same directory later. */
    char *real = realpath(root, NULL);
    if (!real) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: root '%s'", root);
        free(wd);
        return -1;
    }
    size_t rl = strlen(real);
    size_t cap = rl + 1 + sizeof("cf-XXXXXX");
    wd->path = malloc(cap);
    if (!wd->path) {
        free(real);
        free(wd);
        return cf_error_set(err, CF_E_NOMEM, "workdir: out of memory");
    }
    snprintf(wd->path, cap, "%s/cf-XXXXXX", strcmp(real, "/") == 0 ? "" : real);
    free(real);

    wd->root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (wd->root_fd < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: open root '%s'", root);
        goto fail;
    }
    if (!mkdtemp(wd->path)) { /* mode 0700 */
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: mkdtemp under '%s'", root);
        goto fail;
    }
    const char *slash = strrchr(wd->path, '/');
    cf_strlcpy(wd->name, slash + 1, sizeof(wd->name));
    wd->fd = openat(wd->root_fd, wd->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (wd->fd < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: open '%s'", wd->path);
        unlinkat(wd->root_fd, wd->name, AT_REMOVEDIR);
        goto fail;
    }
    if (owner != (uid_t)-1 && fchown(wd->fd, owner, group) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: chown '%s' to %u", wd->path, (unsigned)owner);
        cf_workdir_destroy(wd);
        return -1;
    }
    *out = wd;
    return 0;

fail:
    cf_fd_close(&wd->fd);
    cf_fd_close(&wd->root_fd);
    free(wd->path);
    free(wd);
    return -1;
}

const char *cf_workdir_path(const cf_workdir *wd)
{
    return wd->path;
}

int cf_workdir_dirfd(const cf_workdir *wd)
{
    return wd->fd;
}

static int reason_set(char *reason, size_t rsz, const char *text)
{
    if (reason && rsz)
        cf_strlcpy(reason, text, rsz);
    return -1;
}

int cf_path_check(const char *path, size_t len, char *reason, size_t rsz)
{
    if (!path || len == 0)
        return reason_set(reason, rsz, "empty path");
    if (len > CF_PATH_MAX_BYTES)
        return reason_set(reason, rsz, "path longer than 4096 bytes");
    if (memchr(path, '\0', len))
        return reason_set(reason, rsz, "NUL byte in path");
    if (path[0] == '/')
        return reason_set(reason, rsz, "absolute path");
    size_t start = 0, depth = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len) {
            unsigned char c = (unsigned char)path[i];
            if (c < 0x20 || c == 0x7f)
                return reason_set(reason, rsz, "control character in path");
            if (c != '/')
                continue;
        }
        size_t clen = i - start;
        if (clen == 0)
            return reason_set(reason, rsz, "empty path component");
        if (clen == 1 && path[start] == '.')
            return reason_set(reason, rsz, "'.' component");
        if (clen == 2 && path[start] == '.' && path[start + 1] == '.')
            return reason_set(reason, rsz, "'..' component");
        if (clen > CF_PATH_MAX_COMPONENT)
            return reason_set(reason, rsz, "path component longer than 255 bytes");
        if (++depth > CF_WORKDIR_MAX_DEPTH)
            return reason_set(reason, rsz, "path nested too deeply");
        start = i + 1;
    }
    return 0;
}

/* Opens the directory holding relpath's last component, walking every
 * component with O_NOFOLLOW (creating missing ones when create is set).
 * buf receives a copy of relpath; *last points into it.  Returns an owned
 * fd, or -1 with err set. */
static int open_parent(cf_workdir *wd, const char *relpath, bool create, char *buf, size_t bufsz, char **last,
                       cf_error *err)
{
    char reason[96];
    size_t len = strlen(relpath);
    if (cf_path_check(relpath, len, reason, sizeof(reason)) < 0)
        return cf_error_set(err, CF_E_INVALID, "unsafe path: %s", reason);
    if (len >= bufsz)
        return cf_error_set(err, CF_E_INVALID, "unsafe path: too long");
    memcpy(buf, relpath, len + 1);

    int cur = openat(wd->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: reopen");
    char *comp = buf;
    for (;;) {
        char *slash = strchr(comp, '/');
        if (!slash)
            break;
        *slash = '\0';
        int next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                close(cur);
                return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: mkdir '%s'", comp);
            }
            next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (next >= 0 && wd->owner != (uid_t)-1 && fchown(next, wd->owner, wd->group) < 0) {
                int e = errno;
                close(next);
                close(cur);
                return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: chown '%s'", comp);
            }
        }
        if (next < 0) {
            int e = errno;
            close(cur);
            if (e == ELOOP || e == ENOTDIR)
                return cf_error_set(err, CF_E_INVALID, "'%s' is not a directory (symlink or file)", comp);
            if (e == ENOENT)
                return cf_error_set(err, CF_E_NOT_FOUND, "'%s' does not exist", comp);
            return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: open '%s'", comp);
        }
        close(cur);
        cur = next;
        *slash = '/';
        comp = slash + 1;
    }
    *last = comp;
    return cur;
}

int cf_workdir_put(cf_workdir *wd, const char *relpath, const void *data, size_t len, mode_t mode, cf_error *err)
{
    char buf[CF_PATH_MAX_BYTES + 1];
    char *last;
    int dfd = open_parent(wd, relpath, true, buf, sizeof(buf), &last, err);
    if (dfd < 0)
        return -1;
    int fd = openat(dfd, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
    int e = errno;
    close(dfd);
    if (fd < 0) {
        if (e == EEXIST || e == ELOOP || e == EISDIR || e == ENOTDIR)
            return cf_error_set(err, CF_E_INVALID, "'%s' already exists", relpath);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: create '%s'", relpath);
    }
    /* The umask must not decide what the program may do with its files. */
    if (fchmod(fd, mode & 0777) < 0 ||
        (wd->owner != (uid_t)-1 && fchown(fd, wd->owner, wd->group) < 0)) {
        e = errno;
        close(fd);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: chmod/chown '%s'", relpath);
    }
    const uint8_t *p = data;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            e = errno;
            close(fd);
            return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: write '%s'", relpath);
        }
        off += (size_t)w;
    }
    if (close(fd) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: close '%s'", relpath);
    return 0;
}

/* Reads an open regular file: at most max bytes appended to out, *too_big
 * (and nothing kept) when there are more.  Reads straight into out, sized
 * from size_hint (fstat's size) plus one byte to see the end: most files
 * take one read() and no copy. */
static int read_fd_capped(int fd, size_t max, size_t size_hint, cf_buf *out, bool *too_big, const char *what,
                          cf_error *err)
{
    size_t orig = out->len;
    size_t hint = size_hint < max ? size_hint : max;
    if (cf_buf_reserve(out, orig + hint + 1, err) < 0)
        return cf_error_wrap(err, "workdir: read '%s'", what);
    for (;;) {
        if (out->alloc == out->len && cf_buf_reserve(out, out->len + 16384, err) < 0) {
            out->len = orig;
            return cf_error_wrap(err, "workdir: read '%s'", what);
        }
        size_t limit = out->alloc < out->cap ? out->alloc : out->cap;
        if (limit <= out->len) { /* the buffer's own cap: is there more? */
            char probe;
            ssize_t r = read(fd, &probe, 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r == 0)
                break;
            out->len = orig;
            if (r < 0)
                return cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: read '%s'", what);
            *too_big = true;
            return 0;
        }
        ssize_t r = read(fd, out->data + out->len, limit - out->len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            out->len = orig;
            return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: read '%s'", what);
        }
        if (r == 0)
            break;
        out->len += (size_t)r;
        if (out->len - orig > max) { /* the file grew past what fstat said */
            out->len = orig;
            *too_big = true;
            return 0;
        }
    }
    return 0;
}

/* Opens relpath (last component in dfd) only if it is a regular file. */
static int open_regular(int dfd, const char *name, const char *what, struct stat *st, cf_error *err)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a
     * planted symlink must not make us read a host file. */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return cf_error_set(err, CF_E_NOT_FOUND, "'%s' does not exist", what);
        if (e == ELOOP)
            return cf_error_set(err, CF_E_INVALID, "'%s' is a symlink", what);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: open '%s'", what);
    }
    if (fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "workdir: stat '%s'", what);
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return cf_error_set(err, CF_E_INVALID, "'%s' is not a regular file", what);
    }
    return fd;
}

int cf_workdir_read(cf_workdir *wd, const char *relpath, size_t max, cf_buf *out, bool *too_big, cf_error *err)
{
    bool dummy;
    if (!too_big)
        too_big = &dummy;
    *too_big = false;
    char buf[CF_PATH_MAX_BYTES + 1];
    char *last;
    int dfd = open_parent(wd, relpath, false, buf, sizeof(buf), &last, err);
    if (dfd < 0)
        return -1;
    struct stat st;
    int fd = open_regular(dfd, last, relpath, &st, err);
    close(dfd);
    if (fd < 0)
        return -1;
    if ((uint64_t)st.st_size > (uint64_t)max) {
        close(fd);
        *too_big = true;
        return 0;
    }
    int rc = read_fd_capped(fd, max, (size_t)st.st_size, out, too_big, relpath, err);
    close(fd);
    return rc;
}

/* ---- collect ---- */

typedef struct collect_ctx {
    cf_file *files;
    size_t n, alloc;
    size_t max_files, max_total, total;
    cf_workdir_want_fn want;
    void *want_arg;
    size_t skipped_names;
    char path[CF_PATH_MAX_BYTES + 1];
} collect_ctx;

/* A name that can travel in a result: UTF-8 text without control
 * characters (a str field that does not decode loses the whole result). */
static bool name_ok(const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return false;
    return cf_utf8_valid((const uint8_t *)name, len);
}

static int collect_dir(collect_ctx *c, int dfd, size_t plen, int depth, cf_error *err);

static int collect_entry(collect_ctx *c, int dfd, const char *name, size_t plen, int depth, cf_error *err)
{
    size_t nl = strlen(name);
    if (!name_ok(name, nl)) {
        c->skipped_names++;
        return 0;
    }
    if (plen + (plen ? 1 : 0) + nl > CF_PATH_MAX_BYTES)
        return cf_error_set(err, CF_E_LIMIT, "collect: path longer than %d bytes", CF_PATH_MAX_BYTES);
    size_t newlen = plen;
    if (plen)
        c->path[newlen++] = '/';
    memcpy(c->path + newlen, name, nl + 1);
    newlen += nl;

    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            goto out; /* vanished meanwhile */
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "collect: stat '%s'", c->path);
    }
    if (S_ISDIR(st.st_mode)) {
        if (depth + 1 >= CF_WORKDIR_MAX_DEPTH)
            return cf_error_set(err, CF_E_LIMIT, "collect: '%s' nested deeper than %d levels", c->path,
                                CF_WORKDIR_MAX_DEPTH);
        int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            if (errno == ELOOP || errno == ENOTDIR || errno == ENOENT)
                goto out; /* swapped for something else: not a directory any more */
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "collect: open '%s'", c->path);
        }
        return collect_dir(c, sub, newlen, depth + 1, err); /* consumes sub */
    }
    if (!S_ISREG(st.st_mode))
        goto out; /* symlinks, FIFOs, sockets, devices are never collected */
    if (c->want && !c->want(c->path, c->want_arg))
        goto out; /* not asked for: not read, not counted */

    cf_error e2;
    struct stat st2;
    int fd = open_regular(dfd, name, c->path, &st2, &e2);
    if (fd < 0) {
        if (e2.code == CF_E_SYSTEM)
            return cf_error_set(err, e2.code, "collect: %s", e2.msg);
        goto out; /* replaced by a non-regular file meanwhile */
    }
    if (c->n == c->max_files) {
        close(fd);
        return cf_error_set(err, CF_E_LIMIT, "collect: more than %zu files", c->max_files);
    }
    cf_buf b;
    cf_buf_init(&b, 0);
    bool too_big = false;
    size_t budget = c->max_total - c->total;
    int rc = (uint64_t)st2.st_size > (uint64_t)budget ? (too_big = true, 0)
                                                       : read_fd_capped(fd, budget, (size_t)st2.st_size, &b,
                                                                        &too_big, c->path, err);
    close(fd);
    if (rc < 0) {
        cf_buf_free(&b);
        return -1;
    }
    if (too_big) {
        cf_buf_free(&b);
        return cf_error_set(err, CF_E_LIMIT, "collect: files exceed %zu bytes in total (at '%s')", c->max_total,
                            c->path);
    }
    if (c->n == c->alloc) {
        size_t na = c->alloc ? c->alloc * 2 : 16;
        cf_file *nf = realloc(c->files, na * sizeof(*nf));
        if (!nf) {
            cf_buf_free(&b);
            return cf_error_set(err, CF_E_NOMEM, "collect: out of memory");
        }
        c->files = nf;
        c->alloc = na;
    }
    cf_file *f = &c->files[c->n];
    f->path = cf_strndup(c->path, newlen);
    if (!f->path) {
        cf_buf_free(&b);
        return cf_error_set(err, CF_E_NOMEM, "collect: out of memory");
    }
    size_t blen;
    f->content.data = cf_buf_steal(&b, &blen);
    f->content.len = blen;
    c->n++;
    c->total += blen;
out:
    c->path[plen] = '\0';
    return 0;
}

static int collect_dir(collect_ctx *c, int dfd, size_t plen, int depth, cf_error *err)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "collect: opendir");
    }
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                rc = cf_error_set_errno(err, CF_E_SYSTEM, errno, "collect: readdir");
            break;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (collect_entry(c, dirfd(d), de->d_name, plen, depth, err) < 0) {
            rc = -1;
            break;
        }
    }
    closedir(d);
    c->path[plen] = '\0';
    return rc;
}

static int file_cmp(const void *a, const void *b)
{
    return strcmp(((const cf_file *)a)->path, ((const cf_file *)b)->path);
}

void cf_workdir_files_free(cf_file *files, size_t n)
{
    if (!files)
        return;
    for (size_t i = 0; i < n; i++) {
        free(files[i].path);
        free(files[i].content.data);
    }
    free(files);
}

int cf_workdir_collect(cf_workdir *wd, size_t max_files, size_t max_total_bytes, cf_file **files, size_t *n,
                       cf_error *err)
{
    return cf_workdir_collect_matching(wd, max_files, max_total_bytes, NULL, NULL, files, n, NULL, err);
}

int cf_workdir_collect_matching(cf_workdir *wd, size_t max_files, size_t max_total_bytes, cf_workdir_want_fn want,
                                void *want_arg, cf_file **files, size_t *n, size_t *skipped_names, cf_error *err)
{
    *files = NULL;
    *n = 0;
    if (skipped_names)
        *skipped_names = 0;
    collect_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return cf_error_set(err, CF_E_NOMEM, "collect: out of memory");
    c->max_files = max_files;
    c->max_total = max_total_bytes;
    c->want = want;
    c->want_arg = want_arg;
    int top = openat(wd->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (top < 0) {
        free(c);
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "collect: reopen");
    }
    if (collect_dir(c, top, 0, 0, err) < 0) {
        cf_workdir_files_free(c->files, c->n);
        free(c);
        return -1;
    }
    if (c->n > 1)
        qsort(c->files, c->n, sizeof(*c->files), file_cmp);
    *files = c->files;
    *n = c->n;
    if (skipped_names)
        *skipped_names = c->skipped_names;
    free(c);
    return 0;
}

/* ---- destroy ---- */

/* Removes what is below dfd.  Directories deeper than DESTROY_MAX_DEPTH are
 * moved to the top (wd->fd) instead, and *progress counts every entry
 * removed or moved so the caller repeats until nothing is left. */
static void rm_contents(cf_workdir *wd, int dfd, int depth, unsigned long *progress)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    for (;;) {
        struct dirent *de = readdir(d);
        if (!de)
            break;
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (!S_ISDIR(st.st_mode)) {
            if (unlinkat(dirfd(d), name, 0) == 0)
                (*progress)++;
            continue;
        }
        /* A read-only (or unsearchable) directory cannot be emptied by a
         * non-root owner: make it ours again.  Never follows a symlink. */
        if ((st.st_mode & 0700) != 0700 && fchmodat(dirfd(d), name, 0700, AT_SYMLINK_NOFOLLOW) < 0) {
            /* unlinkat below fails too and the retry logic reports it */
        }
        if (unlinkat(dirfd(d), name, AT_REMOVEDIR) == 0) {
            (*progress)++;
            continue;
        }
        if (depth + 1 >= DESTROY_MAX_DEPTH) {
            char flat[48];
            for (int tries = 0; tries < 8; tries++) {
                snprintf(flat, sizeof(flat), ".cf-flat-%u", wd->flat_counter++);
                if (renameat2(dirfd(d), name, wd->fd, flat, RENAME_NOREPLACE) == 0) {
                    (*progress)++;
                    break;
                }
                if (errno != EEXIST)
                    break;
            }
            continue;
        }
        int sub = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            continue;
        rm_contents(wd, sub, depth + 1, progress);
        close(sub);
        if (unlinkat(dirfd(d), name, AT_REMOVEDIR) == 0)
            (*progress)++;
    }
    closedir(d);
}

void cf_workdir_release(cf_workdir *wd)
{
    if (!wd)
        return;
    cf_fd_close(&wd->fd);
    cf_fd_close(&wd->root_fd);
    free(wd->path);
    free(wd);
}

void cf_workdir_destroy(cf_workdir *wd)
{
    if (!wd)
        return;
    if (wd->fd >= 0 && !wd->sub) {
        if (fchmod(wd->fd, 0700) < 0) {
            /* the passes below report nothing either: best effort */
        }
        for (int pass = 0; pass < DESTROY_MAX_PASSES; pass++) {
            unsigned long progress = 0;
            rm_contents(wd, wd->fd, 0, &progress);
            /* Usually the first pass empties the tree: stop as soon as the
             * directory itself goes, without another full walk. */
            if (wd->root_fd >= 0 && wd->name[0] && unlinkat(wd->root_fd, wd->name, AT_REMOVEDIR) == 0) {
                wd->name[0] = '\0';
                break;
            }
            if (progress == 0)
                break;
        }
    }
    cf_fd_close(&wd->fd);
    if (wd->root_fd >= 0) {
        if (wd->name[0] && !wd->sub)
            (void)unlinkat(wd->root_fd, wd->name, AT_REMOVEDIR);
        cf_fd_close(&wd->root_fd);
    }
    free(wd->path);
    free(wd);
}

int cf_workdir_create_in(cf_workdir *parent, const char *name, uid_t owner, gid_t group, cf_workdir **out,
                         cf_error *err)
{
    *out = NULL;
    if (!parent || !name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
        strlen(name) >= sizeof(((cf_workdir *)0)->name))
        return cf_error_set(err, CF_E_INVALID, "workdir: bad subdirectory name");
    cf_workdir *wd = calloc(1, sizeof(*wd));
    if (!wd)
        return cf_error_set(err, CF_E_NOMEM, "workdir: out of memory");
    wd->root_fd = wd->fd = -1;
    wd->owner = owner;
    wd->group = group;
    wd->sub = true;
    size_t cap = strlen(parent->path) + 1 + strlen(name) + 1;
    wd->path = malloc(cap);
    if (!wd->path) {
        free(wd);
        return cf_error_set(err, CF_E_NOMEM, "workdir: out of memory");
    }
    snprintf(wd->path, cap, "%s/%s", parent->path, name);
    cf_strlcpy(wd->name, name, sizeof(wd->name));
    if (mkdirat(parent->fd, name, 0700) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: mkdir '%s'", wd->path);
        goto fail;
    }
    wd->fd = openat(parent->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (wd->fd < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: open '%s'", wd->path);
        goto fail;
    }
    if (owner != (uid_t)-1 && fchown(wd->fd, owner, group) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "workdir: chown '%s' to %u", wd->path, (unsigned)owner);
        goto fail;
    }
    *out = wd;
    return 0;
fail:
    cf_fd_close(&wd->fd);
    free(wd->path);
    free(wd);
    return -1;
}
