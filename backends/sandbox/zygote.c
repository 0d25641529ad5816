/* sandbox_zygote: see sandbox_zygote.h. */
#include "zygote_int.h"

#include "cf_log.h"
#include "cf_util.h"
#include "cf_run_report.h"
#include "cf_sandbox_exec.h"
#include "cf_sandbox_fs.h"
#include "cf_instance.h"
#include "zygote_proto_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define IN_ID 1000
#define ZYGOTE_PIDS 64            /* the zygote and inits not yet moved to their execution's cgroup */
#define ZYGOTE_TMP (1LL << 20)    /* the zygote's own /tmp and /dev/shm (the executions get fresh ones) */
#define STARTED_WAIT_MS 5000      /* for the zygote to make an execution's init */
#define MAX_JOIN_FDS 8
#define SHARE_SIZE "size=64k,nr_inodes=16,mode=0711"

/* The capabilities the zygote keeps in its user namespace: building
 * namespaces and mounts (SYS_ADMIN), the loopback (NET_ADMIN), and
 * emptying the bounding set in each init (SETPCAP). */
#define ZYGOTE_CAPS ((1ULL << CAP_SYS_ADMIN) | (1ULL << CAP_NET_ADMIN) | (1ULL << CAP_SETPCAP))

struct cf_zygote {
    cf_zygote_opts o;
    char *tag, *inst, *zygote_path, *python_path, *preload, *exec_path;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sock;          /* the worker's end to the current zygote, -1 */
    bool ready;        /* it said HELLO */
    bool busy;         /* an execution holds it */
    bool condemned;    /* being killed: never handed out again */
    bool stop;
    volatile int kill; /* the current zygote's cf_run cancel flag */
    pid_t pid;         /* the current zygote (from its HELLO's credentials), -1 */
    unsigned gen;      /* zygote cgroup generation */
    unsigned xgen;     /* executions' cgroup generation */
    int quick_deaths;
    unsigned starts;
    uint64_t runs;
    unsigned runs_this; /* executions of the current zygote */
    unsigned owner_changes; /* zygotes replaced for another tenant */
    /* The profile (tenant) the current zygote serves, set by its first
     * acquire: its executions share its hash seed, address layout and
     * stack canary, so it never serves another. */
    bool owned;
    char owner[130];
    uint64_t seq;
    char last_end[256];
    /* from HELLO */
    char modules[CF_ZY_MODULES_BYTES + 2]; /* ",a,b,c," */
    bool lc_ctype;
    char python_version[32];
    /* sandbox */
    cf_cgroup *zcg;    /* the zygote's own */
    int zjoin[MAX_JOIN_FDS];
    int nzjoin;
    cf_cgroup *xcg;    /* the executions' */
    int xjoin[CF_ZY_MAX_JOIN]; /* v1: its tasks files, for the inits to join themselves */
    int nxjoin;
    cf_sandbox_fs *fs;
    char share[PATH_MAX];
    char mnt[PATH_MAX];
    bool share_made, share_mounted, mnt_made, mnt_mounted;
    uint8_t *bpf;      /* the executions' seccomp filter, the zygote's stdin */
    size_t bpf_len;
};

/* ---- the share ---- */

static int share_up(cf_zygote *z, cf_error *err)
{
    if (mkdir(z->share, 0711) < 0 && errno != EEXIST)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: mkdir %s", z->share);
    z->share_made = true;
    if (mount("tmpfs", z->share, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, SHARE_SIZE) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: mounting the share on %s", z->share);
    z->share_mounted = true;
    /* Shared: what is mounted below it later shows up in the zygote. */
    if (mount(NULL, z->share, NULL, MS_SHARED, NULL) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: making %s shared", z->share);
    if (mkdir(z->mnt, 0711) < 0 && errno != EEXIST)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: mkdir %s", z->mnt);
    z->mnt_made = true;
    return 0;
}

int cf_zygote_mount(cf_zygote *z, cf_error *err)
{
    if (z->mnt_mounted)
        cf_zygote_umount(z);
    char opts[128];
    snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=%lld,mode=0711", (long long)z->o.work_bytes,
             (long long)z->o.inodes);
    if (mount("tmpfs", z->mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: mounting the execution's tmpfs on %s", z->mnt);
    z->mnt_mounted = true;
    return 0;
}

const char *cf_zygote_mount_dir(const cf_zygote *z)
{
    return z->mnt;
}

void cf_zygote_umount(cf_zygote *z)
{
    if (!z->mnt_mounted)
        return;
    /* Propagates to the zygote's copy (a slave of the share). */
    (void)umount2(z->mnt, MNT_DETACH);
    z->mnt_mounted = false;
}

/* ---- cgroups ---- */

/* Kills what runs in *cg, removes it and closes its join fds. */
static void cg_drop(cf_cgroup **cg, int *join, int *n_join)
{
    while (*n_join > 0)
        close(join[--*n_join]);
    if (*cg) {
        cf_cgroup_kill_all(*cg);
        (void)cf_cgroup_remove(*cg, NULL);
        cf_cgroup_destroy(*cg);
        *cg = NULL;
    }
}

static void drop_zcg(cf_zygote *z)
{
    cg_drop(&z->zcg, z->zjoin, &z->nzjoin);
}

static void drop_xcg(cf_zygote *z)
{
    cg_drop(&z->xcg, z->xjoin, &z->nxjoin);
}

cf_cgroup *cf_zygote_exec_cgroup(cf_zygote *z, const cf_cgroup_limits *lim, cf_error *err)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (z->xcg) {
            if (cf_cgroup_nprocs(z->xcg) != 0)
                cf_cgroup_kill_all(z->xcg);
            if (cf_cgroup_nprocs(z->xcg) == 0 && cf_cgroup_set_limits(z->xcg, lim, NULL) == 0)
                return z->xcg;
            drop_xcg(z);
            z->xgen++;
        }
        char name[96];
        snprintf(name, sizeof(name), "%s-z%d-x%u", z->tag, z->o.slot, z->xgen);
        if (cf_cgroup_new(z->o.cgenv, name, lim, &z->xcg, err) == 0) {
            int n = cf_cgroup_join_fds(z->xcg, z->xjoin, CF_ZY_MAX_JOIN, err);
            if (n < 0) {
                drop_xcg(z);
                return NULL;
            }
            z->nxjoin = n;
            return z->xcg;
        }
        if (err && err->code != CF_E_CONFLICT)
            return NULL;
        z->xgen++;
    }
    return NULL;
}

/* ---- HELLO ---- */

/* Reads the zygote's HELLO if it is there (never blocks).  Called with
 * z->mu held. */
static bool hello_take(cf_zygote *z)
{
    cf_zy_hello *hp = malloc(sizeof(*hp)); /* big: not on the stack */
    if (!hp)
        return false;
    union {
        char buf[CMSG_SPACE(sizeof(struct ucred))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = hp, .iov_len = sizeof(*hp)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n = recvmsg(z->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    bool ok = false;
    if (n == (ssize_t)sizeof(*hp) && !(mh.msg_flags & MSG_TRUNC) && hp->magic == CF_ZY_MAGIC &&
        hp->kind == CF_ZY_HELLO && hp->version == CF_ZY_VERSION) {
        hp->modules[sizeof(hp->modules) - 1] = '\0';
        hp->python_version[sizeof(hp->python_version) - 1] = '\0';
        snprintf(z->modules, sizeof(z->modules), ",%s,", hp->modules);
        z->lc_ctype = hp->flags & CF_ZY_HELLO_LC_CTYPE;
        cf_strlcpy(z->python_version, hp->python_version, sizeof(z->python_version));
        z->pid = -1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
                struct ucred cr;
                memcpy(&cr, CMSG_DATA(cm), sizeof(cr));
                z->pid = cr.pid;
            }
        ok = true;
    } else if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        /* Anything else first is a broken zygote. */
        cf_log_warn("sandbox", "slot %d: the zygote's first message is not a valid HELLO: replacing it", z->o.slot);
        z->condemned = true;
        __atomic_store_n(&z->kill, 1, __ATOMIC_RELAXED);
        shutdown(z->sock, SHUT_RDWR);
    }
    free(hp);
    return ok;
}

bool cf_zygote_acquire(cf_zygote *z, const char *owner)
{
    if (!z)
        return false;
    const char *o = owner ? owner : "";
    pthread_mutex_lock(&z->mu);
    bool ok = !z->stop && z->sock >= 0 && !z->busy && !z->condemned;
    if (ok && !z->ready)
        z->ready = hello_take(z);
    ok = ok && z->ready && !z->condemned;
    if (ok && z->owned && (strlen(o) >= sizeof(z->owner) || strcmp(z->owner, o) != 0)) {
        /* Another tenant's: replaced (this execution goes cold; the next
         * of this tenant finds a zygote of its own). */
        z->condemned = true;
        __atomic_store_n(&z->kill, 1, __ATOMIC_RELAXED);
        shutdown(z->sock, SHUT_RDWR);
        z->owner_changes++;
        ok = false;
    }
    if (ok && !z->owned && strlen(o) < sizeof(z->owner)) {
        z->owned = true;
        cf_strlcpy(z->owner, o, sizeof(z->owner));
    }
    ok = ok && z->owned;
    if (ok)
        z->busy = true;
    pthread_mutex_unlock(&z->mu);
    return ok;
}

void cf_zygote_release(cf_zygote *z)
{
    pthread_mutex_lock(&z->mu);
    z->busy = false;
    /* Retired while idle, never under an execution: its executions share
     * its hash seed, address layout and stack canary, so it serves only so
     * many. */
    if (z->runs_this >= (unsigned)(z->o.max_requests > 0 ? z->o.max_requests : 200) && !z->condemned) {
        z->condemned = true;
        __atomic_store_n(&z->kill, 1, __ATOMIC_RELAXED);
        if (z->sock >= 0)
            shutdown(z->sock, SHUT_RDWR);
    }
    pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);
}

bool cf_zygote_lc_ctype(const cf_zygote *z)
{
    return z->lc_ctype;
}

bool cf_zygote_shadows(const cf_zygote *z, const char *name)
{
    if (!name || !name[0])
        return false;
    if (strcmp(name, ".local") == 0)
        return true; /* the user site directory, looked for at start */
    char stem[256];
    size_t l = strcspn(name, ".");
    if (l == 0 || l >= sizeof(stem))
        return false;
    memcpy(stem, name, l);
    stem[l] = '\0';
    if (strcmp(stem, "sitecustomize") == 0 || strcmp(stem, "usercustomize") == 0)
        return true; /* imported by site at start from sys.path, /work included */
    char key[260];
    snprintf(key, sizeof(key), ",%s,", stem);
    return strstr(z->modules, key) != NULL;
}

/* ---- one execution ---- */

static void zy_kill_all(pid_t pid, void *arg)
{
    (void)pid; /* the runner signals the init through its pidfd */
    cf_cgroup_kill_all(arg);
}

static void condemn(cf_zygote *z, const char *why)
{
    pthread_mutex_lock(&z->mu);
    if (!z->condemned)
        cf_log_warn("sandbox", "slot %d: zygote: %s; replacing it", z->o.slot, why);
    z->condemned = true;
    __atomic_store_n(&z->kill, 1, __ATOMIC_RELAXED);
    if (z->sock >= 0)
        shutdown(z->sock, SHUT_RDWR);
    pthread_mutex_unlock(&z->mu);
}

/* The payload memfd (sealed), or -1. */
static int payload_fd(const cf_zygote_run_args *a, const cf_run_spec *spec, cf_error *err)
{
    size_t argc = 0, envc = 0;
    size_t total = strlen(a->top) + 1 + strlen(spec->path) + 1 + (spec->cwd ? strlen(spec->cwd) : 0) + 1;
    for (; spec->argv[argc]; argc++)
        total += strlen(spec->argv[argc]) + 1;
    for (; spec->envp && spec->envp[envc]; envc++)
        total += strlen(spec->envp[envc]) + 1;
    if (total > CF_ZY_PAYLOAD_MAX || argc > CF_ZY_MAX_STRINGS || envc > CF_ZY_MAX_STRINGS ||
        spec->n_rlimits > CF_ZY_MAX_RLIMITS) {
        cf_error_set(err, CF_E_LIMIT, "zygote: argv and environment too large (%zu bytes)", total);
        return -1;
    }
    size_t len = sizeof(cf_zy_payload) + total;
    char *buf = calloc(1, len);
    if (!buf) {
        cf_error_set(err, CF_E_NOMEM, "zygote: out of memory");
        return -1;
    }
    cf_zy_payload *h = (cf_zy_payload *)(void *)buf;
    h->magic = CF_ZY_MAGIC;
    h->version = CF_ZY_VERSION;
    h->flags = (a->python ? CF_ZY_PYTHON : 0) | (a->work_ro ? CF_ZY_WORK_RO : 0);
    h->argc = (uint32_t)argc;
    h->envc = (uint32_t)envc;
    h->n_rlimits = spec->n_rlimits;
    h->total = (uint32_t)total;
    h->cpu_rlimit_s = a->cpu_rlimit_s;
    h->tmp_bytes = a->tmp_bytes;
    h->inodes = a->inodes;
    for (int i = 0; i < spec->n_rlimits; i++) {
        h->rl[i].resource = spec->rlimits[i].resource;
        h->rl[i].value = (uint64_t)spec->rlimits[i].value;
    }
    char *p = buf + sizeof(*h);
    p = cf_put_str(p, a->top);
    p = cf_put_str(p, spec->path);
    p = cf_put_str(p, spec->cwd ? spec->cwd : "");
    for (size_t i = 0; i < argc; i++)
        p = cf_put_str(p, spec->argv[i]);
    for (size_t i = 0; i < envc; i++)
        p = cf_put_str(p, spec->envp[i]);
    int fd = memfd_create("cf-zygote-run", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    size_t off = 0;
    while (fd >= 0 && off < len) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    int saved = errno;
    free(buf);
    if (fd < 0 || off != len ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, fd < 0 || off != len ? saved : errno, "zygote: payload memfd");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* The pid of a pidfd's process in our pid namespace. */
static pid_t pidfd_pid(int pidfd)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strstr(buf, "\nPid:");
    if (!p)
        return -1;
    long v = strtol(p + 5, NULL, 10);
    return v > 0 && v < INT32_MAX ? (pid_t)v : -1;
}

static int send_run(int sock, uint64_t seq, const int fds[CF_ZY_RUN_FDS], const int *join, int n_join)
{
    cf_zy_run msg = {.magic = CF_ZY_MAGIC, .kind = CF_ZY_RUN, .seq = seq, .n_join = (uint32_t)n_join};
    union {
        char buf[CMSG_SPACE(sizeof(int) * (CF_ZY_RUN_FDS + CF_ZY_MAX_JOIN))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    int all[CF_ZY_RUN_FDS + CF_ZY_MAX_JOIN];
    memcpy(all, fds, sizeof(int) * CF_ZY_RUN_FDS);
    memcpy(all + CF_ZY_RUN_FDS, join, sizeof(int) * (size_t)n_join);
    size_t nfds = (size_t)(CF_ZY_RUN_FDS + n_join);
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof(msg)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * nfds)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(cm), all, sizeof(int) * nfds);
    ssize_t w;
    do
        w = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w == (ssize_t)sizeof(msg) ? 0 : -1;
}

/* STARTED for seq: 0 with *pidfd, or -1 (err says why). */
static int recv_started(int sock, uint64_t seq, int *pidfd, cf_error *err)
{
    *pidfd = -1;
    int64_t until = cf_mono_us() + STARTED_WAIT_MS * 1000LL;
    for (;;) {
        int64_t left = until - cf_mono_us();
        if (left <= 0)
            return cf_error_set(err, CF_E_SANDBOX, "zygote: no answer within %d ms", STARTED_WAIT_MS);
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)((left + 999) / 1000));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: poll");
        if (pr == 0)
            continue;
        cf_zy_started ans;
        union {
            char buf[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(struct ucred))];
            struct cmsghdr align;
        } u;
        struct iovec iov = {.iov_base = &ans, .iov_len = sizeof(ans)};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
        ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            return cf_error_set_errno(err, CF_E_SANDBOX, n < 0 ? errno : EPIPE, "zygote: gone before answering");
        int got = -1, extra = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                if (got < 0)
                    got = fd;
                else {
                    close(fd);
                    extra++;
                }
            }
        }
        if (n != (ssize_t)sizeof(ans) || ans.magic != CF_ZY_MAGIC || ans.kind != CF_ZY_STARTED || ans.seq != seq ||
            extra || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (ans.err == 0) != (got >= 0)) {
            if (got >= 0)
                close(got);
            return cf_error_set(err, CF_E_SANDBOX, "zygote: malformed answer");
        }
        if (ans.err != 0)
            return cf_error_set_errno(err, CF_E_SANDBOX, ans.err, "zygote: could not make the execution's init");
        *pidfd = got;
        return 0;
    }
}

int cf_zygote_run(cf_zygote *z, const cf_zygote_run_args *a, cf_cgroup *cg, const cf_run_spec *spec,
                  cf_run_outcome *out, bool *nothing_ran, cf_error *err)
{
    *nothing_ran = true;
    memset(out, 0, sizeof(*out));
    cf_run_spec rs = *spec;
    rs.kill_all = zy_kill_all;
    rs.kill_all_arg = cg;
    int child[4], bar[2] = {-1, -1}, memfd = -1, pidfd = -1;
    cf_run_adoptee ad;
    if (cf_run_adopt_pipes(&rs, child, &ad, err) < 0)
        return -1;
    int rc = -1;
    if (pipe2(bar, O_CLOEXEC) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: pipe2");
        goto fail;
    }
    if ((memfd = payload_fd(a, &rs, err)) < 0)
        goto fail;
    /* v1: the init joins its cgroup itself (tasks files, no global lock
     * taken): nothing to wait for, the barrier goes out released. */
    bool self_join = z->nxjoin > 0 && cg == z->xcg;
    if (self_join && write(bar[1], "g", 1) != 1) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: barrier");
        goto fail;
    }
    uint64_t seq = ++z->seq;
    int fds[CF_ZY_RUN_FDS] = {memfd, child[0], child[1], child[2], child[3], bar[0]};
    if (send_run(z->sock, seq, fds, z->xjoin, self_join ? z->nxjoin : 0) < 0) {
        cf_error_set_errno(err, CF_E_SANDBOX, errno, "zygote: sending the execution");
        condemn(z, "it does not take executions");
        goto fail;
    }
    /* The init has its copies now (or never will). */
    for (int i = 0; i < 4; i++) {
        close(child[i]);
        child[i] = -1;
    }
    close(memfd);
    memfd = -1;
    close(bar[0]);
    bar[0] = -1;
    if (recv_started(z->sock, seq, &pidfd, err) < 0) {
        if (err && err->code == CF_E_SANDBOX && err->sys_errno == 0)
            condemn(z, err->msg);
        else if (err && err->sys_errno == EPIPE)
            condemn(z, "it went away");
        goto fail; /* closing the barrier ends an init waiting there */
    }
    /* v1: the init was released with RUN, so from here on the program
     * may have run (or even ended, its pid gone): it is supervised through
     * its pidfd whatever happens, never run again another way. */
    if (self_join)
        *nothing_ran = false;
    pid_t pid = pidfd_pid(pidfd);
    if (pid <= 0 && !self_join) {
        /* v2: still at its barrier, or dead before it: nothing ran. */
        cf_error_set(err, CF_E_SANDBOX, "zygote: the init's pid is unknown (no pidfd fdinfo)");
        goto fail;
    }
    if (!self_join) {
        /* In the execution's cgroup before it does anything: every page
         * and process it makes from here on is counted there.  (v2: the
         * zygote may not create it there itself, as it is no owner of
         * the cgroups the two have in common.) */
        if (cf_cgroup_attach(cg, pid, err) < 0) {
            cf_error_wrap(err, "zygote: execution cgroup");
            goto fail;
        }
        /* An init dead meanwhile: EPIPE, not the worker's SIGPIPE. */
        sigset_t pipe_only, old_mask;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
        ssize_t w;
        do
            w = write(bar[1], "g", 1);
        while (w < 0 && errno == EINTR);
        int werr = errno;
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_only, NULL, &zero) > 0)
            ;
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        errno = werr;
        if (w != 1) {
            cf_error_set_errno(err, CF_E_SANDBOX, errno, "zygote: releasing the execution's init");
            goto fail;
        }
    }
    close(bar[1]);
    bar[1] = -1;
    z->runs++;
    z->runs_this++;
    *nothing_ran = false;
    /* (v1, pid unknown: the init has ended already; its pidfd and report
     * tell the rest.) */
    ad.pid = pid;
    ad.pidfd = pidfd;
    rc = cf_run_adopt(&ad, &rs, out, err);
    /* A zygote that died meanwhile took the execution with it (its pid
     * namespace is the execution's parent): the sandbox broke, not the
     * program, whatever the outcome looks like. */
    struct pollfd pfd = {.fd = z->sock, .events = 0};
    if (rc == 0 && out->signal == SIGKILL && !out->timed_out && !out->cancelled && !out->cpu_exceeded &&
        poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLHUP | POLLERR))) {
        condemn(z, "it died during an execution");
        cf_error_set(err, CF_E_SANDBOX, "zygote: it died during the execution");
        if (err)
            err->retriable = true;
        rc = -1;
    }
    return rc;
fail:
    if (pidfd >= 0) {
        (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        close(pidfd);
    }
    for (int i = 0; i < 4; i++)
        if (child[i] >= 0)
            close(child[i]);
    if (memfd >= 0)
        close(memfd);
    if (bar[0] >= 0)
        close(bar[0]);
    if (bar[1] >= 0)
        close(bar[1]);
    cf_run_adoptee_close(&ad);
    if (err)
        err->retriable = true;
    return rc;
}

/* ---- the zygote's life ---- */

static int zygote_prepare(cf_zygote *z, cf_error *err)
{
    if (!z->zcg) {
        cf_cgroup_limits lim = {.memory_bytes = z->o.zygote_memory, .pids_max = ZYGOTE_PIDS};
        char name[96];
        snprintf(name, sizeof(name), "%s-z%d-g%u", z->tag, z->o.slot, z->gen);
        if (cf_cgroup_new(z->o.cgenv, name, &lim, &z->zcg, err) < 0) {
            z->gen++;
            return -1;
        }
        int n = cf_cgroup_join_fds(z->zcg, z->zjoin, MAX_JOIN_FDS, err);
        if (n < 0) {
            drop_zcg(z);
            return -1;
        }
        z->nzjoin = n;
    }
    /* The last zygote's processes must be gone before a new one joins. */
    for (int tries = 0; cf_cgroup_nprocs(z->zcg) != 0; tries++) {
        if (tries == 20) {
            drop_zcg(z);
            z->gen++;
            return cf_error_set(err, CF_E_SANDBOX, "zygote: the last zygote's processes do not go away");
        }
        cf_cgroup_kill_all(z->zcg);
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    if (!z->fs) {
        static const char *const mountpoints[] = {"/run/codefleet", NULL};
        cf_sandbox_bind binds[1] = {{.src = z->share, .dst = CF_ZY_SHARE_IN, .rw = true}};
        cf_sandbox_fs_spec fspec = {.tmp_size_bytes = ZYGOTE_TMP, .nr_inodes = 256, .uid = IN_ID, .gid = IN_ID,
                                    .extra_ro = z->o.toolchain_dirs, .binds = binds, .n_binds = 1,
                                    .mountpoints = mountpoints, .receive_host_mounts = true,
                                    .receive_below = CF_ZY_SHARE_IN};
        if (cf_sandbox_fs_new(&fspec, &z->fs, err) < 0)
            return -1;
    }
    return 0;
}

/* Runs one zygote to its end.  0 when it ran (whatever it did). */
static int zygote_run_one(cf_zygote *z, cf_error *err)
{
    if (zygote_prepare(z, err) < 0)
        return -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "zygote: socketpair");
    int one = 1;
    /* Its HELLO then carries its pid as we see it. */
    (void)setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
    char pathenv[PATH_MAX + 8];
    snprintf(pathenv, sizeof(pathenv), "PATH=%s", z->exec_path);
    char *argv[] = {"codefleet-zygote", "--python", z->python_path, "--preload", z->preload, NULL};
    /* What a `python3` of a request sees at start, for what decides how
     * the interpreter starts (exec_common sets the same). */
    char *envp[] = {"PYTHONPATH=/work", "PYTHONDONTWRITEBYTECODE=1", "HOME=/work", pathenv, NULL};
    cf_run_spec spec = {.path = z->zygote_path, .argv = argv, .envp = envp, .cwd = "/", .max_stdout = 4096,
                        .max_stderr = 16384, .pass_fd = sv[1], .exec_fd = z->o.zygote_fd, .cancel = &z->kill,
                        .stdin_data = z->bpf, .stdin_len = z->bpf_len,
                        .rlimits = {{RLIMIT_CORE, 0}}, .n_rlimits = 1};
    cf_sandbox_exec sx = {.seccomp = NULL, .fs = z->fs, .cg = z->zcg, .uid = IN_ID, .gid = IN_ID,
                          .host_uid = z->o.host_id, .host_gid = z->o.host_id, .loopback = false,
                          .join_fds = z->zjoin, .n_join = z->nzjoin, .keep_caps = ZYGOTE_CAPS};
    if (cf_sandbox_exec_prepare(&sx, &spec, err) < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    /* The zygote is pid 1 of its namespace itself: it reaps its inits,
     * and its death takes every execution with it. */
    spec.init = false;
    pthread_mutex_lock(&z->mu);
    if (z->stop) {
        pthread_mutex_unlock(&z->mu);
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    z->sock = sv[0];
    z->ready = false;
    z->condemned = false;
    z->pid = -1;
    z->starts++;
    z->runs_this = 0;
    z->owned = false;
    z->owner[0] = '\0';
    __atomic_store_n(&z->kill, 0, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);

    int64_t started = cf_mono_us();
    cf_run_outcome o;
    int rc = cf_run(&spec, &o, err); /* until the zygote ends */

    pthread_mutex_lock(&z->mu);
    z->condemned = true; /* never handed out again */
    while (z->busy)
        pthread_cond_wait(&z->cv, &z->mu);
    close(z->sock);
    z->sock = -1;
    z->ready = false;
    z->pid = -1;
    bool killed = __atomic_load_n(&z->kill, __ATOMIC_RELAXED) != 0;
    if (rc == 0) {
        cf_run_outcome_describe(&o, z->last_end, sizeof(z->last_end));
    } else {
        snprintf(z->last_end, sizeof(z->last_end), "could not start: %.200s", err->msg);
    }
    bool clean = rc == 0 && o.exited && o.exit_code == 0;
    z->quick_deaths = cf_mono_us() - started < 1000000 && !killed && !clean ? z->quick_deaths + 1 : 0;
    bool stopping = z->stop;
    pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);
    if (rc == 0 && !killed && !clean && !stopping)
        cf_log_warn("sandbox", "slot %d: zygote ended (%s); starting a new one", z->o.slot, z->last_end);
    cf_run_outcome_free(&o);
    return rc;
}

static void *zygote_main(void *arg)
{
    cf_zygote *z = arg;
    for (;;) {
        pthread_mutex_lock(&z->mu);
        bool stop = z->stop;
        pthread_mutex_unlock(&z->mu);
        if (stop)
            break;
        cf_error err;
        cf_error_clear(&err);
        if (zygote_run_one(z, &err) < 0) {
            pthread_mutex_lock(&z->mu);
            snprintf(z->last_end, sizeof(z->last_end), "could not start: %.200s", err.msg);
            z->quick_deaths++;
            pthread_mutex_unlock(&z->mu);
            cf_log_error("sandbox", "slot %d: cannot start the zygote: %s", z->o.slot, err.msg);
        }
        /* One that keeps dying at once must not spin: back off up to 5 s. */
        if (z->quick_deaths > 1) {
            int64_t ms = 100LL << (z->quick_deaths > 7 ? 6 : z->quick_deaths - 1);
            if (ms > 5000)
                ms = 5000;
            int64_t until = cf_mono_us() + ms * 1000;
            pthread_mutex_lock(&z->mu);
            while (!z->stop && cf_mono_us() < until) {
                struct timespec ts;
                int64_t t = until;
                ts.tv_sec = (time_t)(t / 1000000);
                ts.tv_nsec = (long)(t % 1000000) * 1000;
                (void)pthread_cond_timedwait(&z->cv, &z->mu, &ts);
            }
            pthread_mutex_unlock(&z->mu);
        }
    }
    return NULL;
}

/* ---- create / destroy ---- */

static char *dup_or(const char *s, const char *def)
{
    return cf_strdup(s && s[0] ? s : def);
}

int cf_zygote_new(const cf_zygote_opts *opts, cf_zygote **out, cf_error *err)
{
    *out = NULL;
    if (!opts || !opts->cgenv || !opts->seccomp || opts->zygote_fd < 0 || !opts->tag || !opts->inst ||
        !opts->python_path || opts->python_path[0] != '/' || opts->host_id == 0)
        return cf_error_set(err, CF_E_INVALID, "zygote: incomplete options");
    cf_zygote *z = calloc(1, sizeof(*z));
    if (!z)
        return cf_error_set(err, CF_E_NOMEM, "zygote: out of memory");
    z->o = *opts;
    z->sock = -1;
    z->pid = -1;
    z->tag = cf_strdup(opts->tag);
    z->inst = cf_strdup(opts->inst);
    z->zygote_path = dup_or(opts->zygote_path, "codefleet-zygote");
    z->python_path = cf_strdup(opts->python_path);
    z->preload = dup_or(opts->preload, "");
    z->exec_path = dup_or(opts->exec_path, "/usr/local/bin:/usr/bin:/bin");
    if (!z->tag || !z->inst || !z->zygote_path || !z->python_path || !z->preload || !z->exec_path) {
        cf_error_set(err, CF_E_NOMEM, "zygote: out of memory");
        goto fail;
    }
    z->o.tag = z->tag;
    z->o.inst = z->inst;
    const struct sock_fprog *fp = cf_seccomp_prog_fprog(opts->seccomp);
    if (!fp || !fp->len) {
        cf_error_set(err, CF_E_INVALID, "zygote: no seccomp filter");
        goto fail;
    }
    z->bpf_len = (size_t)fp->len * sizeof(struct sock_filter);
    z->bpf = malloc(z->bpf_len);
    if (!z->bpf) {
        cf_error_set(err, CF_E_NOMEM, "zygote: out of memory");
        goto fail;
    }
    memcpy(z->bpf, fp->filter, z->bpf_len);
    if (snprintf(z->share, sizeof(z->share), "%s/z%d", z->inst, opts->slot) >= (int)sizeof(z->share) ||
        snprintf(z->mnt, sizeof(z->mnt), "%s/m", z->share) >= (int)sizeof(z->mnt)) {
        cf_error_set(err, CF_E_LIMIT, "zygote: path too long");
        goto fail;
    }
    if (share_up(z, err) < 0)
        goto fail;
    if (pthread_mutex_init(&z->mu, NULL) != 0) {
        cf_error_set(err, CF_E_SYSTEM, "zygote: mutex");
        goto fail;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&z->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&z->mu);
        cf_error_set(err, CF_E_SYSTEM, "zygote: condition variable");
        goto fail;
    }
    /* The zygote dies with this thread (PR_SET_PDEATHSIG): it lives as
     * long as the backend. */
    if ((rc = pthread_create(&z->thread, NULL, zygote_main, z)) != 0) {
        pthread_cond_destroy(&z->cv);
        pthread_mutex_destroy(&z->mu);
        cf_error_set_errno(err, CF_E_SYSTEM, rc, "zygote: starting its thread");
        goto fail;
    }
    z->thread_started = true;
    *out = z;
    return 0;
fail:
    cf_zygote_destroy(z);
    return -1;
}

void cf_zygote_destroy(cf_zygote *z)
{
    if (!z)
        return;
    if (z->thread_started) {
        pthread_mutex_lock(&z->mu);
        z->stop = true;
        z->condemned = true;
        __atomic_store_n(&z->kill, 1, __ATOMIC_RELAXED);
        if (z->sock >= 0)
            shutdown(z->sock, SHUT_RDWR);
        pthread_cond_broadcast(&z->cv);
        pthread_mutex_unlock(&z->mu);
        pthread_join(z->thread, NULL);
        pthread_cond_destroy(&z->cv);
        pthread_mutex_destroy(&z->mu);
    }
    drop_xcg(z);
    drop_zcg(z);
    cf_sandbox_fs_destroy(z->fs);
    cf_zygote_umount(z);
    if (z->mnt_made)
        rmdir(z->mnt);
    if (z->share_mounted)
        (void)umount2(z->share, MNT_DETACH);
    if (z->share_made)
        rmdir(z->share);
    free(z->bpf);
    free(z->tag);
    free(z->inst);
    free(z->zygote_path);
    free(z->python_path);
    free(z->preload);
    free(z->exec_path);
    free(z);
}

void cf_zygote_get_stats(cf_zygote *z, cf_zygote_stats *s)
{
    memset(s, 0, sizeof(*s));
    s->pid = -1;
    if (!z)
        return;
    pthread_mutex_lock(&z->mu);
    if (!z->ready && z->sock >= 0 && !z->busy && !z->condemned)
        z->ready = hello_take(z);
    s->up = z->ready && !z->condemned;
    s->pid = z->pid;
    s->starts = z->starts;
    s->runs = z->runs;
    cf_strlcpy(s->last_end, z->last_end, sizeof(s->last_end));
    s->owner_changes = z->owner_changes;
    cf_strlcpy(s->owner, z->owned ? z->owner : "", sizeof(s->owner));
    cf_strlcpy(s->python_version, z->python_version, sizeof(s->python_version));
    pthread_mutex_unlock(&z->mu);
}
