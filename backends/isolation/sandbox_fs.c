#include "cf_sandbox_fs.h"
#include "cf_child.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cf_util.h"

/* Where the new root is assembled before pivot_root.  Host content below
 * it becomes invisible to later binds, which is why the work dir (often
 * under /tmp) is bound through an fd opened before. */
#define STAGE "/tmp"

enum op_kind {
    OP_MKDIR,   /* a: path; mode */
    OP_TMPFS,   /* a: target; data: options; flags */
    OP_BIND,    /* a: source, b: target (exists); ro; flags: extra MS_* for the remount */
    OP_SYMLINK, /* a: link target, b: link path */
    OP_FILE,    /* a: path; data/len: content; mode */
    OP_TOUCH,   /* a: path (an empty file to bind a file onto) */
    OP_PROC,    /* a: target */
    OP_RDONLY,  /* a: mount point to make read-only; flags: extra MS_* */
};

struct op {
    enum op_kind kind;
    char *a, *b, *data;
    size_t len;
    unsigned long flags;
    mode_t mode;
    bool ro;
    bool dev;   /* OP_BIND of a device node: no nodev */
    char *desc; /* what failed, for the child's error report */
};

/* A bind made after the fixed tree (cf_sandbox_bind, resolved). */
struct late_bind {
    char *src;
    char *dst;  /* staged */
    char *desc; /* "open ..." for a failing open */
    char *bdesc; /* "bind ..." for a failing mount */
    bool rw, dir, check_id;
    dev_t dev;
    ino_t ino;
};

struct cf_sandbox_fs {
    struct op *ops;
    size_t n, cap;
    struct late_bind *binds;
    size_t n_binds;
    char *stage_opts;    /* tmpfs options of the root */
    bool receive_host_mounts; /* MS_SLAVE instead of MS_PRIVATE (see the spec) */
    char *receive_below;      /* ... for the mounts there only (private_except) */
};

/* ---- plan building (parent) ------------------------------------------ */

/* Concatenation of two strings (malloc'd, NULL on failure). */
static char *cat2(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 1);
    if (p) {
        memcpy(p, a, la);
        memcpy(p + la, b, lb + 1);
    }
    return p;
}

static struct op *add_op(cf_sandbox_fs *fs, enum op_kind kind, cf_error *err)
{
    if (fs->n == fs->cap) {
        size_t ncap = fs->cap ? fs->cap * 2 : 64;
        struct op *nops = realloc(fs->ops, ncap * sizeof(*nops));
        if (!nops) {
            cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
            return NULL;
        }
        fs->ops = nops;
        fs->cap = ncap;
    }
    struct op *o = &fs->ops[fs->n++];
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    return o;
}

/* Path inside the stage for an absolute sandbox path. */
static char *staged(const char *path)
{
    return cat2(STAGE, path);
}

static int check_alloc(struct op *o, cf_error *err)
{
    if (!o->a || !o->desc || (o->kind == OP_BIND && !o->b) || (o->kind == OP_SYMLINK && !o->b))
        return cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
    return 0;
}

static int plan_mkdir(cf_sandbox_fs *fs, const char *path, mode_t mode, cf_error *err)
{
    struct op *o = add_op(fs, OP_MKDIR, err);
    if (!o)
        return -1;
    o->a = staged(path);
    o->mode = mode;
    o->desc = cat2("mkdir ", path);
    return check_alloc(o, err);
}

/* mkdir -p for every component of an absolute path. */
static int plan_mkdir_p(cf_sandbox_fs *fs, const char *path, cf_error *err)
{
    char buf[PATH_MAX];
    if (cf_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
        return cf_error_set(err, CF_E_LIMIT, "sandbox fs: path too long");
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (plan_mkdir(fs, buf, 0755, err) < 0)
            return -1;
        *p = '/';
    }
    return plan_mkdir(fs, buf, 0755, err);
}

static int plan_tmpfs(cf_sandbox_fs *fs, const char *path, mode_t mode, int64_t size, int64_t inodes,
                      unsigned long flags, cf_error *err)
{
    if (plan_mkdir(fs, path, 0755, err) < 0)
        return -1;
    struct op *o = add_op(fs, OP_TMPFS, err);
    if (!o)
        return -1;
    char opts[128];
    snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=%lld,mode=%o", (long long)size, (long long)inodes,
             (unsigned)mode);
    o->a = staged(path);
    o->data = cf_strdup(opts);
    o->flags = flags;
    o->desc = cat2("mount tmpfs on ", path);
    if (!o->data)
        return cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
    return check_alloc(o, err);
}

/* Binds host path src at the same path inside, as a file or a directory;
 * mirrors a host symlink as a symlink.  Missing sources are skipped when
 * optional. */
static int plan_bind(cf_sandbox_fs *fs, const char *src, const char *dst, bool ro, bool dev, bool optional,
                     cf_error *err)
{
    struct stat st;
    if (lstat(src, &st) < 0) {
        if (optional && errno == ENOENT)
            return 0;
        return cf_error_set_errno(err, CF_E_SANDBOX, errno, "sandbox fs: %s", src);
    }
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(src, target, sizeof(target) - 1);
        if (n < 0)
            return cf_error_set_errno(err, CF_E_SANDBOX, errno, "sandbox fs: readlink %s", src);
        target[n] = '\0';
        struct op *o = add_op(fs, OP_SYMLINK, err);
        if (!o)
            return -1;
        o->a = cf_strdup(target);
        o->b = staged(dst);
        o->desc = cat2("symlink ", dst);
        return check_alloc(o, err);
    }
    if (S_ISDIR(st.st_mode)) {
        if (plan_mkdir(fs, dst, 0755, err) < 0)
            return -1;
    } else {
        struct op *t = add_op(fs, OP_TOUCH, err);
        if (!t)
            return -1;
        t->a = staged(dst);
        t->desc = cat2("create ", dst);
        if (check_alloc(t, err) < 0)
            return -1;
    }
    struct op *o = add_op(fs, OP_BIND, err);
    if (!o)
        return -1;
    o->a = cf_strdup(src);
    o->b = staged(dst);
    o->ro = ro;
    o->dev = dev;
    o->desc = cat2("bind ", dst);
    return check_alloc(o, err);
}

static int plan_file(cf_sandbox_fs *fs, const char *path, const char *content, mode_t mode, cf_error *err)
{
    struct op *o = add_op(fs, OP_FILE, err);
    if (!o)
        return -1;
    o->a = staged(path);
    o->data = cf_strdup(content);
    o->len = content ? strlen(content) : 0;
    o->mode = mode;
    o->desc = cat2("write ", path);
    if (!o->data)
        return cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
    return check_alloc(o, err);
}

static int plan_symlink(cf_sandbox_fs *fs, const char *target, const char *path, cf_error *err)
{
    struct op *o = add_op(fs, OP_SYMLINK, err);
    if (!o)
        return -1;
    o->a = cf_strdup(target);
    o->b = staged(path);
    o->desc = cat2("symlink ", path);
    return check_alloc(o, err);
}

int cf_sandbox_fs_new(const cf_sandbox_fs_spec *spec, cf_sandbox_fs **out, cf_error *err)
{
    *out = NULL;
    int64_t root_size = spec->root_size_bytes > 0 ? spec->root_size_bytes : 8 << 20;
    int64_t tmp_size = spec->tmp_size_bytes > 0 ? spec->tmp_size_bytes : 64 << 20;
    int64_t inodes = spec->nr_inodes > 0 ? spec->nr_inodes : 4096;
    const char *hostname = spec->hostname ? spec->hostname : "sandbox";
    if (spec->work_dir && spec->work_dir[0] != '/')
        return cf_error_set(err, CF_E_INVALID, "sandbox fs: work dir must be absolute");
    if (strchr(hostname, '\n'))
        return cf_error_set(err, CF_E_INVALID, "sandbox fs: bad hostname");

    if (spec->n_binds + 1 > CF_SANDBOX_MAX_BINDS)
        return cf_error_set(err, CF_E_LIMIT, "sandbox fs: more than %d binds", CF_SANDBOX_MAX_BINDS - 1);

    cf_sandbox_fs *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
    char opts[128];
    snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=%lld,mode=0755", (long long)root_size, (long long)inodes);
    fs->stage_opts = cf_strdup(opts);
    if (!fs->stage_opts) {
        cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
        goto fail;
    }
    cf_sandbox_bind all[CF_SANDBOX_MAX_BINDS];
    size_t nb = 0;
    if (spec->work_dir)
        all[nb++] = (cf_sandbox_bind){.src = spec->work_dir, .dst = "/work", .rw = spec->work_rw};
    for (size_t i = 0; i < spec->n_binds; i++)
        all[nb++] = spec->binds[i];
    if (cf_sandbox_fs_set_binds(fs, all, nb, err) < 0)
        goto fail;

    /* Runtimes: /usr and the top-level library/binary dirs (symlinks on
     * usrmerge systems, directories elsewhere). */
    if (plan_bind(fs, "/usr", "/usr", true, false, false, err) < 0)
        goto fail;
    static const char *const top[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
        if (plan_bind(fs, top[i], top[i], true, false, true, err) < 0)
            goto fail;

    /* /etc: only what dynamic linking, locale/time and TLS need. */
    if (plan_mkdir(fs, "/etc", 0755, err) < 0)
        goto fail;
    static const char *const etc[] = {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
                                      "/etc/alternatives", "/etc/ssl",        "/etc/localtime",
                                      "/etc/nsswitch.conf", "/etc/mime.types", "/etc/protocols",
                                      "/etc/services"};
    for (size_t i = 0; i < sizeof(etc) / sizeof(etc[0]); i++)
        if (plan_bind(fs, etc[i], etc[i], true, false, true, err) < 0)
            goto fail;
    char buf[512];
    snprintf(buf, sizeof(buf),
             "root:x:0:0:root:/root:/bin/sh\n"
             "sandbox:x:%u:%u:sandbox:/work:/bin/sh\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             (unsigned)spec->uid, (unsigned)spec->gid);
    if (plan_file(fs, "/etc/passwd", buf, 0644, err) < 0)
        goto fail;
    snprintf(buf, sizeof(buf), "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n", (unsigned)spec->gid);
    if (plan_file(fs, "/etc/group", buf, 0644, err) < 0)
        goto fail;
    snprintf(buf, sizeof(buf), "127.0.0.1 localhost %s\n::1 localhost\n", hostname);
    if (plan_file(fs, "/etc/hosts", buf, 0644, err) < 0)
        goto fail;
    snprintf(buf, sizeof(buf), "%s\n", hostname);
    if (plan_file(fs, "/etc/hostname", buf, 0644, err) < 0)
        goto fail;

    for (const char *const *x = spec->extra_ro; x && *x; x++) {
        if ((*x)[0] != '/' || strstr(*x, "/..") || strncmp(*x, STAGE, strlen(STAGE)) == 0) {
            cf_error_set(err, CF_E_INVALID, "sandbox fs: bad extra path %s", *x);
            goto fail;
        }
        char parent[PATH_MAX];
        cf_strlcpy(parent, *x, sizeof(parent));
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = '\0';
            if (plan_mkdir_p(fs, parent, err) < 0)
                goto fail;
        }
        if (plan_bind(fs, *x, *x, true, false, true, err) < 0)
            goto fail;
    }

    /* /proc of the new pid namespace. */
    if (plan_mkdir(fs, "/proc", 0555, err) < 0)
        goto fail;
    struct op *o = add_op(fs, OP_PROC, err);
    if (!o || !(o->a = staged("/proc")) || !(o->desc = cf_strdup("mount /proc"))) {
        cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
        goto fail;
    }

    /* /dev: a tmpfs holding binds of the harmless host devices. */
    if (plan_tmpfs(fs, "/dev", 0755, 1 << 20, 64, MS_NOSUID | MS_NOEXEC, err) < 0)
        goto fail;
    static const char *const devs[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
        if (plan_bind(fs, devs[i], devs[i], false, true, false, err) < 0)
            goto fail;
    if (plan_symlink(fs, "/proc/self/fd", "/dev/fd", err) < 0 ||
        plan_symlink(fs, "/proc/self/fd/0", "/dev/stdin", err) < 0 ||
        plan_symlink(fs, "/proc/self/fd/1", "/dev/stdout", err) < 0 ||
        plan_symlink(fs, "/proc/self/fd/2", "/dev/stderr", err) < 0)
        goto fail;
    if (plan_tmpfs(fs, "/dev/shm", 01777, tmp_size, inodes, MS_NOSUID | MS_NODEV, err) < 0)
        goto fail;
    /* Read-only from here on: /dev holds mount points and symlinks only
     * (its tmpfs would otherwise be writable by the sandbox uid). */
    struct op *ro = add_op(fs, OP_RDONLY, err);
    if (!ro || !(ro->a = staged("/dev")) || !(ro->desc = cf_strdup("remount /dev read-only"))) {
        cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
        goto fail;
    }
    ro->flags = MS_NOSUID | MS_NOEXEC;

    if (plan_tmpfs(fs, "/tmp", 01777, tmp_size, inodes, MS_NOSUID | MS_NODEV, err) < 0)
        goto fail;
    if (plan_mkdir(fs, "/work", 0755, err) < 0)
        goto fail;
    for (const char *const *m = spec->mountpoints; m && *m; m++) {
        if ((*m)[0] != '/' || strstr(*m, "/..") || strlen(*m) + sizeof(STAGE) >= PATH_MAX) {
            cf_error_set(err, CF_E_INVALID, "sandbox fs: bad mount point %s", *m);
            goto fail;
        }
        if (plan_mkdir_p(fs, *m, err) < 0)
            goto fail;
    }
    if (spec->receive_host_mounts) {
        if (!spec->receive_below || spec->receive_below[0] != '/' || !(fs->receive_below = cf_strdup(spec->receive_below))) {
            cf_error_set(err, CF_E_INVALID, "sandbox fs: receive_host_mounts needs receive_below");
            goto fail;
        }
        fs->receive_host_mounts = true;
    }
    *out = fs;
    return 0;
fail:
    cf_sandbox_fs_destroy(fs);
    return -1;
}

static void binds_free(cf_sandbox_fs *fs)
{
    for (size_t i = 0; i < fs->n_binds; i++) {
        free(fs->binds[i].src);
        free(fs->binds[i].dst);
        free(fs->binds[i].desc);
        free(fs->binds[i].bdesc);
    }
    free(fs->binds);
    fs->binds = NULL;
    fs->n_binds = 0;
}

int cf_sandbox_fs_set_binds(cf_sandbox_fs *fs, const cf_sandbox_bind *binds, size_t n, cf_error *err)
{
    binds_free(fs);
    if (n == 0)
        return 0;
    if (n > CF_SANDBOX_MAX_BINDS)
        return cf_error_set(err, CF_E_LIMIT, "sandbox fs: more than %d binds", CF_SANDBOX_MAX_BINDS);
    fs->binds = calloc(n, sizeof(*fs->binds));
    if (!fs->binds)
        return cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
    for (size_t i = 0; i < n; i++) {
        const cf_sandbox_bind *b = &binds[i];
        if (!b->src || !b->dst || b->src[0] != '/' || b->dst[0] != '/' || strcmp(b->dst, "/") == 0 ||
            strstr(b->dst, "/..") || strlen(b->dst) + sizeof(STAGE) >= PATH_MAX) {
            binds_free(fs);
            return cf_error_set(err, CF_E_INVALID, "sandbox fs: bad bind %s -> %s", b->src ? b->src : "(null)",
                                b->dst ? b->dst : "(null)");
        }
        struct stat st;
        if (lstat(b->src, &st) < 0) {
            /* Gone now: the child's open fails and says which bind. */
            if (errno != ENOENT) {
                cf_error_set_errno(err, CF_E_SANDBOX, errno, "sandbox fs: bind source %s", b->src);
                binds_free(fs);
                return -1;
            }
            st.st_mode = S_IFDIR;
        }
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
            binds_free(fs);
            return cf_error_set(err, CF_E_INVALID, "sandbox fs: bind source %s is not a directory or file", b->src);
        }
        struct late_bind *l = &fs->binds[fs->n_binds++];
        l->src = cf_strdup(b->src);
        l->dst = staged(b->dst);
        l->desc = strcmp(b->dst, "/work") == 0 ? cf_strdup("fs: open work dir") : cat2("fs: open bind source of ", b->dst);
        l->bdesc = cat2("fs: bind ", b->dst);
        l->rw = b->rw;
        l->dir = S_ISDIR(st.st_mode);
        l->check_id = b->check_id;
        l->dev = b->dev;
        l->ino = b->ino;
        if (!l->src || !l->dst || !l->desc || !l->bdesc) {
            binds_free(fs);
            return cf_error_set(err, CF_E_NOMEM, "sandbox fs: out of memory");
        }
    }
    return 0;
}

void cf_sandbox_fs_destroy(cf_sandbox_fs *fs)
{
    if (!fs)
        return;
    binds_free(fs);
    for (size_t i = 0; i < fs->n; i++) {
        free(fs->ops[i].a);
        free(fs->ops[i].b);
        free(fs->ops[i].data);
        free(fs->ops[i].desc);
    }
    free(fs->ops);
    free(fs->stage_opts);
    free(fs->receive_below);
    free(fs);
}

size_t cf_sandbox_fs_steps(const cf_sandbox_fs *fs)
{
    return fs->n;
}

/* ---- replay (child: async-signal-safe only) -------------------------- */

/* The host mount's flags that a user namespace may not clear (ro, nosuid,
 * nodev, noexec, atime) so a read-only remount keeps them. */
static unsigned long locked_flags(const char *path)
{
    struct statvfs sv;
    if (statvfs(path, &sv) < 0)
        return 0;
    unsigned long f = 0;
    if (sv.f_flag & ST_RDONLY)
        f |= MS_RDONLY;
    if (sv.f_flag & ST_NOSUID)
        f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV)
        f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
    return f;
}

static int bind_remount(const char *src, const char *dst, bool ro, unsigned long extra)
{
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        return -1;
    unsigned long f = MS_REMOUNT | MS_BIND | MS_NOSUID | extra | locked_flags(dst);
    if (ro)
        f |= MS_RDONLY;
    return mount(NULL, dst, NULL, f, NULL);
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* "/proc/self/fd/N" without snprintf. */
static void fd_path(char *buf, int fd)
{
    static const char pre[] = "/proc/self/fd/";
    memcpy(buf, pre, sizeof(pre) - 1);
    char digits[12];
    int n = 0;
    do {
        digits[n++] = (char)('0' + fd % 10);
        fd /= 10;
    } while (fd && n < 11);
    size_t pos = sizeof(pre) - 1;
    while (n)
        buf[pos++] = digits[--n];
    buf[pos] = '\0';
}

static int run_op(const struct op *o)
{
    switch (o->kind) {
    case OP_MKDIR:
        if (mkdir(o->a, o->mode) < 0 && errno != EEXIST)
            return -1;
        return 0;
    case OP_TMPFS:
        return mount("tmpfs", o->a, "tmpfs", o->flags, o->data);
    case OP_BIND:
        /* Device nodes must stay usable (no nodev) but never executable. */
        return bind_remount(o->a, o->b, o->ro, o->dev ? MS_NOEXEC : MS_NODEV);
    case OP_SYMLINK:
        return symlink(o->a, o->b);
    case OP_TOUCH: {
        int fd = open(o->a, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            return -1;
        close(fd);
        return 0;
    }
    case OP_FILE: {
        int fd = open(o->a, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, o->mode);
        if (fd < 0)
            return -1;
        int rc = write_all(fd, o->data, o->len);
        int saved = errno;
        close(fd);
        errno = saved;
        return rc;
    }
    case OP_PROC:
        return mount("proc", o->a, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    case OP_RDONLY:
        return mount(NULL, o->a, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | o->flags, NULL);
    }
    errno = EINVAL;
    return -1;
}

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

int cf_sandbox_fs_open_binds(const cf_sandbox_fs *fs, int *fds, const char **msg)
{
    for (size_t i = 0; i < CF_SANDBOX_MAX_BINDS; i++)
        fds[i] = -1;
    for (size_t i = 0; i < fs->n_binds && i < CF_SANDBOX_MAX_BINDS; i++) {
        const struct late_bind *l = &fs->binds[i];
        fds[i] = open(l->src, O_PATH | O_NOFOLLOW | O_CLOEXEC | (l->dir ? O_DIRECTORY : 0));
        struct stat st;
        bool bad = fds[i] < 0 || fstat(fds[i], &st) < 0;
        if (!bad && (l->dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
            bad = (errno = ENOTDIR, true);
        if (!bad && l->check_id && (st.st_dev != l->dev || st.st_ino != l->ino))
            bad = (errno = ESTALE, true);
        if (bad) {
            int saved = errno;
            close_fds(fds, i + 1);
            errno = saved;
            *msg = l->desc;
            return -1;
        }
    }
    return 0;
}

/* mkdir -p of an absolute staged path (a stack copy: no allocation). */
static int mkdir_p_child(const char *path, bool last_is_file)
{
    char buf[PATH_MAX];
    size_t n = 0;
    while (path[n] && n + 1 < sizeof(buf)) {
        buf[n] = path[n];
        n++;
    }
    buf[n] = '\0';
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (c == '\0' && last_is_file) {
            int fd = open(buf, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
            if (fd < 0)
                return -1;
            close(fd);
        } else if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
            return -1;
        }
        buf[i] = c;
    }
    return 0;
}

/* After pivot_root, with receive_host_mounts: every mount is made private
 * again but the ones at keep (and below it), so of the host's later mount
 * events only those below the bound share arrive (a toolchain or /usr
 * mounted on the host afterwards does not).  Reads /proc/self/mountinfo
 * with plain syscalls (field 5 is the mount point, octal escapes undone);
 * async-signal-safe. */
static int private_except(const char *keep)
{
    static char buf[65536]; /* the child's own copy: no other thread here */
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == sizeof(buf) - 1) {
            close(fd);
            errno = E2BIG;
            return -1;
        }
    }
    close(fd);
    buf[len] = '\0';
    size_t klen = strlen(keep);
    for (char *line = buf; *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        /* id parent major:minor root mountpoint ... */
        char *f = line;
        for (int i = 0; i < 4 && f; i++) {
            f = strchr(f, ' ');
            if (f)
                f++;
        }
        if (f) {
            char mp[PATH_MAX];
            size_t n = 0;
            for (char *c = f; *c && *c != ' ' && n + 1 < sizeof(mp); c++) {
                if (c[0] == '\\' && c[1] >= '0' && c[1] <= '7' && c[2] >= '0' && c[2] <= '7' && c[3] >= '0' &&
                    c[3] <= '7') {
                    mp[n++] = (char)((c[1] - '0') * 64 + (c[2] - '0') * 8 + (c[3] - '0'));
                    c += 3;
                } else {
                    mp[n++] = *c;
                }
            }
            mp[n] = '\0';
            bool kept = strncmp(mp, keep, klen) == 0 && (mp[klen] == '\0' || mp[klen] == '/');
            if (!kept && mount(NULL, mp, NULL, MS_PRIVATE, NULL) < 0 && errno != EINVAL && errno != ENOENT)
                return -1;
        }
        if (!nl)
            break;
        line = nl + 1;
    }
    return 0;
}

int cf_sandbox_fs_apply_fds(const cf_sandbox_fs *fs, int *fds, const char **msg)
{
    size_t nb = fs->n_binds < CF_SANDBOX_MAX_BINDS ? fs->n_binds : CF_SANDBOX_MAX_BINDS;
    /* Nothing we mount may propagate back to the host (a slave receives
     * the host's mount events below shared mounts, never sends). */
    if (mount(NULL, "/", NULL, MS_REC | (fs->receive_host_mounts ? MS_SLAVE : MS_PRIVATE), NULL) < 0) {
        *msg = "fs: make / private";
        goto fail;
    }
    if (mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, fs->stage_opts) < 0) {
        *msg = "fs: mount root tmpfs";
        goto fail;
    }
    for (size_t i = 0; i < fs->n; i++) {
        if (run_op(&fs->ops[i]) < 0) {
            *msg = fs->ops[i].desc;
            goto fail;
        }
    }
    /* Binds of host paths through the fds opened before the stage hid
     * whatever lived below it. */
    for (size_t i = 0; i < nb; i++) {
        const struct late_bind *l = &fs->binds[i];
        char src[32];
        fd_path(src, fds[i]);
        if (mkdir_p_child(l->dst, !l->dir) < 0 || bind_remount(src, l->dst, !l->rw, MS_NODEV) < 0) {
            *msg = l->bdesc;
            goto fail;
        }
        close(fds[i]);
        fds[i] = -1;
    }
    /* pivot_root(".", ".") stacks the old root on the new one; detaching
     * it leaves only the new tree (no old-root directory needed). */
    if (chdir(STAGE) < 0) {
        *msg = "fs: chdir to new root";
        return -1;
    }
    if (syscall(SYS_pivot_root, ".", ".") < 0) {
        *msg = "fs: pivot_root";
        return -1;
    }
    if (umount2(".", MNT_DETACH) < 0) {
        *msg = "fs: detach old root";
        return -1;
    }
    if (chdir("/") < 0) {
        *msg = "fs: chdir /";
        return -1;
    }
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0) {
        *msg = "fs: remount / read-only";
        return -1;
    }
    if (fs->receive_host_mounts && private_except(fs->receive_below) < 0) {
        *msg = "fs: make the mounts private but the shared one";
        return -1;
    }
    return 0;
fail:;
    int saved = errno;
    close_fds(fds, nb);
    errno = saved;
    return -1;
}

int cf_sandbox_fs_remount_ro(const char *path)
{
    return mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(path), NULL);
}

int cf_sandbox_fs_apply(const cf_sandbox_fs *fs, const char **msg)
{
    int fds[CF_SANDBOX_MAX_BINDS];
    if (cf_sandbox_fs_open_binds(fs, fds, msg) < 0)
        return -1;
    return cf_sandbox_fs_apply_fds(fs, fds, msg);
}

int cf_sandbox_become(uid_t uid, gid_t gid)
{
    /* Raw syscalls: glibc's set*id wrappers signal the other threads of
     * the process, which a forked child of a threaded worker does not have. */
    if (syscall(SYS_setgroups, 0, NULL) < 0)
        return -1;
    if (syscall(SYS_setresgid, gid, gid, gid) < 0)
        return -1;
    return (int)syscall(SYS_setresuid, uid, uid, uid);
}

int cf_sandbox_drop_caps(void)
{
    return cf_child_drop_caps();
}
