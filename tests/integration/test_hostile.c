/* The hostile-program suite: every program of tests/hostile runs through a
 * real codefleet-worker (backends "sandbox,process", sandbox the default)
 * on private topics and must end with the expected status, while
 *   - the worker survives and the next request runs normally,
 *   - nothing leaks into the next execution,
 *   - no cgroup, mount, work directory or process is left behind.
 *
 * Each case first shows the program doing its harm WITHOUT the sandbox, on
 * this host but bounded (a cgroup with memory and pids limits, rlimits, an
 * unprivileged uid, a wall-clock timeout, loopback-only network, files in a
 * private temp dir), so a sandbox that stops protecting makes the test
 * fail instead of passing by accident.
 *
 * Needs root (namespaces, cgroups, the setuid and kill demonstrations) and
 * the local stack (CF_TEST_BROKERS).  Without root it skips with a message;
 * as root, a sandbox backend that does not start is a failure. */
#include "it_support.h"
#include "support/sandbox_test.h"
#include "support/test_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_runner.h"
#include "cf_util.h"
#include "cf_cgroup.h"

#define SEC 1000000LL
#define MIB (1024LL * 1024LL)
/* An unprivileged uid for demonstrations that must not run as root
 * (kill(-1), setuid, network): nothing else on the host uses it. */
#define DEMO_UID 62111
/* Limits the sandboxed requests ask for. */
#define SBX_MEMORY (64 * MIB)
#define SBX_PIDS 32
#define SBX_TIMEOUT (2 * SEC)
#define CANARY_ENV "HOSTILE_CANARY_SECRET"

static const char *const cg_controllers[] = {"memory", "pids", "freezer", "cpu", "cpuacct"};
#define N_CTRL (sizeof(cg_controllers) / sizeof(cg_controllers[0]))

static struct {
    bool ready;
    const char *skip_why;
    char base[64];        /* host temp dir of the suite */
    char work_root[128];  /* the worker's --work-root */
    char hostile[160];    /* copy of the hostile binary (0755, for demos) */
    uint8_t *bin;
    size_t bin_len;
    char canary[64];      /* planted in the worker's environment */
    char secret_file[160];/* a host file planted symlinks point at */
    char secret[64];
    char host_dir[160];   /* a host dir with a victim file */
    char broker_target[64], redis_target[64], listen_target[64], abstract_target[80];
    int listen_fd, abstract_fd;
    /* the private cgroup the suite (and so the worker) runs in */
    char cg_orig[N_CTRL][512];
    char cg_private[N_CTRL][600];
    bool cg_moved[N_CTRL];
    char **cg_baseline;
    size_t n_cg_baseline;
    char **mnt_baseline;
    size_t n_mnt_baseline;
    char **wr_baseline;
    size_t n_wr_baseline;
    int fd_baseline;
    it_topics t;
    it_worker w;
    bool worker_started;
    bool cold; /* the worker builds every sandbox for its request */
    bool zygote; /* every program is started by a fork of the slot's zygote */
    const char *backend; /* "sandbox", or "container" (CF_HOSTILE_SANDBOX=container) */
    cf_dispatcher *d;
    cf_cgroup_env *demo_env;
    int demo_seq;
} g;

/* ---- small helpers -------------------------------------------------------- */

static void random_hex(char *buf, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t r[32];
    size_t want = n / 2 < sizeof(r) ? n / 2 : sizeof(r);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, r, want) != (ssize_t)want)
        fail_msg("reading /dev/urandom");
    close(fd);
    size_t j = 0;
    for (size_t i = 0; i < want && j + 2 < n; i++) {
        buf[j++] = hex[r[i] >> 4];
        buf[j++] = hex[r[i] & 15];
    }
    buf[j] = '\0';
}

static int write_file(const char *path, const char *data, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -1;
    size_t len = strlen(data);
    ssize_t n = write(fd, data, len);
    close(fd);
    return n == (ssize_t)len ? 0 : -1;
}

static size_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        buf[0] = '\0';
        return 0;
    }
    size_t len = 0;
    while (len + 1 < size) {
        ssize_t n = read(fd, buf + len, size - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    return len;
}

static void rm_rf(const char *path)
{
    if (!path[0] || strncmp(path, "/tmp/cf-hostile-", 16) != 0)
        return; /* never anything but the suite's own temp dirs */
    pid_t p = fork();
    if (p == 0) {
        /* Planted 0000 dirs are opened up first: directories only, never
         * files (a planted hard link shares the inode of a host file). */
        execl("/bin/sh", "sh", "-c", "find \"$1\" -type d -exec chmod u+rwx {} + 2>/dev/null; rm -rf \"$1\"", "sh",
              path, (char *)NULL);
        _exit(127);
    }
    if (p > 0)
        waitpid(p, NULL, 0);
}

/* A fresh dir under the suite's base, optionally owned by uid. */
static void fresh_dir(char *buf, size_t size, uid_t owner)
{
    snprintf(buf, size, "%s/d-XXXXXX", g.base);
    if (!mkdtemp(buf))
        fail_msg("mkdtemp: %s", strerror(errno));
    if ((owner != 0 && chown(buf, owner, owner) < 0) || chmod(buf, 0755) < 0)
        fail_msg("chown %s: %s", buf, strerror(errno));
}

/* ---- results ------------------------------------------------------------- */

static const char *data_str(const cf_bytes *b, char *buf, size_t size)
{
    size_t n = b->len < size - 1 ? b->len : size - 1;
    if (n)
        memcpy(buf, b->data, n);
    buf[n] = '\0';
    return buf;
}

static const char *res_stdout(const cf_result *res)
{
    static char buf[16384];
    return data_str(&res->stdout_data, buf, sizeof(buf));
}

static void dump_result(const cf_result *res, const char *what)
{
    char e[2048];
    fprintf(stderr,
            "---- %s: status %s reason '%s' exit %d (has %d) signal %d wall %" PRId64 "us cpu %" PRId64
            "us peak %" PRId64 " backend %s\nstdout (%zu bytes%s):\n%s\nstderr (%zu bytes%s):\n%s\n",
            what, cf_status_name(res->status), res->reason ? res->reason : "-", res->exit_code, res->has_exit_code,
            res->signal, res->wall_time_us, res->cpu_time_us, res->peak_memory_bytes,
            res->meta.backend ? res->meta.backend : "-", res->stdout_data.len,
            res->stdout_truncated ? ", truncated" : "", res_stdout(res), res->stderr_data.len,
            res->stderr_truncated ? ", truncated" : "", data_str(&res->stderr_data, e, sizeof(e)));
    for (size_t i = 0; i < res->n_diagnostics; i++)
        fprintf(stderr, "diagnostic: %s %s\n", res->diagnostics[i].level ? res->diagnostics[i].level : "-",
                res->diagnostics[i].message ? res->diagnostics[i].message : "-");
}

static void expect_status(const cf_result *res, cf_status want, const char *what)
{
    if (res->status != want) {
        dump_result(res, what);
        fail_msg("%s: status %s, expected %s", what, cf_status_name(res->status), cf_status_name(want));
    }
}

/* ---- host demonstrations (no sandbox, bounded) ----------------------------- */

typedef struct demo_opts {
    const char *path;     /* default: the hostile binary */
    bool as_demo_uid;
    int64_t timeout_us;   /* default 5 s */
    int64_t memory_bytes; /* cgroup; default 512 MiB */
    int64_t pids;         /* cgroup; default 300 */
    const char *cwd;      /* default: a fresh dir */
    char *const *env;     /* default: PATH only */
    const char *stdin_data;
    rlim_t fsize;         /* RLIMIT_FSIZE; default 512 MiB */
    size_t max_out;       /* default 256 KiB */
} demo_opts;

typedef struct demo {
    cf_run_outcome out;
    char cwd[192];
    char text[16384];
} demo;

static int demo_parent_setup(pid_t pid, void *arg, cf_error *err)
{
    return cf_cgroup_attach(arg, pid, err);
}

/* Runs the hostile binary on the host: in a fresh cgroup (memory, pids),
 * with rlimits and a timeout, optionally as DEMO_UID.  Everything of it is
 * killed and the cgroup removed before this returns. */
static void demo_run(const char *const *args, const demo_opts *o, demo *dm)
{
    memset(dm, 0, sizeof(*dm));
    char name[64];
    snprintf(name, sizeof(name), "hostile-demo-%d", g.demo_seq++);
    cf_cgroup_limits lim = {.memory_bytes = o->memory_bytes ? o->memory_bytes : 512 * MIB,
                            .pids_max = o->pids ? o->pids : 300};
    cf_cgroup *cg = NULL;
    cf_error err;
    cf_error_clear(&err);
    if (cf_cgroup_new(g.demo_env, name, &lim, &cg, &err) < 0)
        fail_msg("demo cgroup: %s", err.msg);
    if (o->cwd)
        cf_strlcpy(dm->cwd, o->cwd, sizeof(dm->cwd));
    else
        fresh_dir(dm->cwd, sizeof(dm->cwd), o->as_demo_uid ? DEMO_UID : 0);
    const char *path = o->path ? o->path : g.hostile;
    char *argv[16];
    size_t n = 0;
    argv[n++] = (char *)path;
    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    static char *const default_env[] = {"PATH=/usr/bin:/bin", NULL};
    cf_run_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.path = path;
    spec.argv = argv;
    spec.envp = o->env ? o->env : default_env;
    spec.cwd = dm->cwd;
    spec.stdin_data = (const uint8_t *)o->stdin_data;
    spec.stdin_len = o->stdin_data ? strlen(o->stdin_data) : 0;
    spec.max_stdout = o->max_out ? o->max_out : 256 * 1024;
    spec.max_stderr = 64 * 1024;
    spec.timeout_us = o->timeout_us ? o->timeout_us : 5 * SEC;
    spec.rlimits[0] = (cf_run_rlimit){RLIMIT_FSIZE, o->fsize ? o->fsize : (rlim_t)(512 * MIB)};
    spec.rlimits[1] = (cf_run_rlimit){RLIMIT_NOFILE, 256};
    spec.n_rlimits = 2;
    if (o->as_demo_uid) {
        spec.set_ids = true;
        spec.uid = DEMO_UID;
        spec.gid = DEMO_UID;
        spec.rlimits[spec.n_rlimits++] = (cf_run_rlimit){RLIMIT_NPROC, 400};
    }
    spec.parent_setup = demo_parent_setup;
    spec.parent_setup_arg = cg;
    spec.kill_all = cf_cgroup_kill_all_hook;
    spec.kill_all_arg = cg;
    int rc = cf_run(&spec, &dm->out, &err);
    cf_cgroup_kill_all(cg);
    cf_error rerr;
    if (cf_cgroup_remove(cg, &rerr) < 0)
        fail_msg("demo cgroup remove: %s", rerr.msg);
    cf_cgroup_destroy(cg);
    if (rc < 0)
        fail_msg("demo run: %s", err.msg);
    size_t len = dm->out.out.len < sizeof(dm->text) - 1 ? dm->out.out.len : sizeof(dm->text) - 1;
    if (len)
        memcpy(dm->text, dm->out.out.data, len);
    dm->text[len] = '\0';
}

static void demo_free(demo *dm)
{
    cf_run_outcome_free(&dm->out);
    if (dm->cwd[0])
        rm_rf(dm->cwd);
}

static void demo_dump(const demo *dm, const char *what)
{
    fprintf(stderr, "---- demo %s: exited %d code %d signal %d timed_out %d wall %" PRId64 " cpu %" PRId64
                    "\nstdout:\n%s\nstderr: %.*s\n",
            what, dm->out.exited, dm->out.exit_code, dm->out.signal, dm->out.timed_out, dm->out.wall_us,
            dm->out.cpu_us, dm->text, (int)dm->out.err.len, dm->out.err.data ? (char *)dm->out.err.data : "");
}

#define DEMO_EXPECT(dm, cond, what)                                                                            \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            demo_dump(dm, what);                                                                               \
            fail_msg("harm not shown without the sandbox (%s): %s", what, #cond);                              \
        }                                                                                                      \
    } while (0)

/* For demos the runner cannot express (a pty as stdin, a leaked fd, a
 * soft-only CPU rlimit): fork, setup, exec; stdout collected until exit or
 * timeout (then the process group is killed). */
typedef void (*raw_setup_fn)(void *arg);

/* Runs the hostile binary outside the sandbox until it ends, timeout_us
 * passes or (stop_at not NULL) its output holds stop_at; then kills it.
 * *timed_out: it was still running when stopped. */
static int raw_run(const char *const *args, raw_setup_fn setup, void *arg, int64_t timeout_us, const char *stop_at,
                   char *out, size_t outsz, bool *timed_out)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        fail_msg("pipe: %s", strerror(errno));
    char *argv[16];
    size_t n = 0;
    argv[n++] = g.hostile;
    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    pid_t p = fork();
    if (p < 0)
        fail_msg("fork: %s", strerror(errno));
    if (p == 0) {
        setpgid(0, 0);
        dup2(pfd[1], 1);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0)
            dup2(nul, 2);
        if (setup)
            setup(arg);
        char *env[] = {"PATH=/usr/bin:/bin", NULL};
        execve(g.hostile, argv, env);
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0;
    int64_t until = cf_mono_us() + timeout_us;
    *timed_out = false;
    for (;;) {
        int64_t left = until - cf_mono_us();
        if (left <= 0) {
            *timed_out = true;
            break;
        }
        struct pollfd pp = {.fd = pfd[0], .events = POLLIN};
        int r = poll(&pp, 1, (int)(left / 1000) + 1);
        if (r <= 0)
            continue;
        char tmp[4096];
        ssize_t got = read(pfd[0], tmp, sizeof(tmp));
        if (got <= 0)
            break;
        size_t take = (size_t)got < outsz - 1 - len ? (size_t)got : outsz - 1 - len;
        memcpy(out + len, tmp, take);
        len += take;
        out[len] = '\0';
        if (stop_at && strstr(out, stop_at)) {
            *timed_out = waitpid(p, NULL, WNOHANG) == 0; /* still running */
            break;
        }
    }
    out[len] = '\0';
    kill(-p, SIGKILL);
    int st = 0;
    waitpid(p, &st, 0);
    close(pfd[0]);
    return st;
}

/* ---- the sandboxed side ------------------------------------------------------ */

/* A request running "./hostile <args>" from a shell: the binary travels as
 * a request file (files are placed 0644, so the shell makes it
 * executable). */
static void hostile_request(cf_request *req, const char *args)
{
    char code[1024];
    snprintf(code, sizeof(code), "chmod 755 hostile && exec ./hostile %s\n", args);
    it_request_init(req, CF_LANG_SHELL, code);
    req->backend = strdup(g.backend);
    req->files = calloc(1, sizeof(cf_file));
    req->files[0].path = strdup("hostile");
    cf_bytes_set(&req->files[0].content, g.bin, g.bin_len);
    req->n_files = 1;
    req->policy.timeout_us = SBX_TIMEOUT;
    req->policy.memory_bytes = SBX_MEMORY;
    req->policy.max_processes = SBX_PIDS;
    req->policy.network = CF_NET_DISABLED;
    req->policy.max_stdout_bytes = 256 * 1024;
    req->policy.max_stderr_bytes = 64 * 1024;
}

/* Waits for the result of id in slices, failing at once when the worker
 * died (instead of after the full timeout). */
static void wait_result(const char *id, cf_result *res)
{
    cf_error err;
    cf_error_clear(&err);
    memset(res, 0, sizeof(*res));
    int64_t until = cf_mono_us() + 120 * SEC;
    while (cf_dispatcher_wait(g.d, id, 500 * 1000, res, &err) < 0) {
        if (err.code != CF_E_TIMEOUT)
            fail_msg("waiting for %s: %s", id, err.msg);
        int st = 0;
        if (g.worker_started && waitpid(g.w.pid, &st, WNOHANG) != 0) {
            g.worker_started = false;
            it_worker_dump_log(&g.w);
            fail_msg("the worker died (status 0x%x) while %s ran", st, id);
        }
        if (!g.worker_started)
            fail_msg("no worker (it died earlier)");
        if (cf_mono_us() > until)
            fail_msg("no result for %s within 120 s", id);
    }
}

static void submit(const cf_request *req)
{
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_submit(g.d, req, &err) < 0)
        fail_msg("submit %s: %s", req->id, err.msg);
}

static void run_request(const cf_request *req, cf_result *res)
{
    submit(req);
    wait_result(req->id, res);
    if (getenv("CF_HOSTILE_VERBOSE"))
        dump_result(res, req->id);
    if (res->status == CF_STATUS_INTERNAL_ERROR || res->status == CF_STATUS_REJECTED) {
        dump_result(res, req->id);
        it_worker_dump_log(&g.w);
    }
    if (res->status != CF_STATUS_REJECTED && (!res->meta.backend || strcmp(res->meta.backend, g.backend) != 0))
        fail_msg("%s ran on backend %s, not %s", req->id, res->meta.backend ? res->meta.backend : "-", g.backend);
    /* The path under test served it: warm unless cold was asked for or the
     * request needs one built for it. */
    if (res->status != CF_STATUS_REJECTED && res->status != CF_STATUS_INTERNAL_ERROR) {
        bool fits = req->policy.network != CF_NET_ENABLED && req->policy.fs_mode != CF_FS_PATHS;
        const char *want = strcmp(g.backend, "container") == 0 ? "default" /* the image */
                           : !fits ? "cold" : g.zygote ? "zygote" : g.cold ? "cold" : "warm";
        if (!res->meta.sandbox || strcmp(res->meta.sandbox, want) != 0)
            fail_msg("%s ran in a %s sandbox, not %s", req->id, res->meta.sandbox ? res->meta.sandbox : "-", want);
    }
}

/* Runs "hostile <args>" in the sandbox with the default policy changed by
 * the caller through req (NULL: defaults). */
static void sandboxed(const char *args, void (*adjust)(cf_request *), cf_result *res)
{
    cf_request req;
    hostile_request(&req, args);
    if (adjust)
        adjust(&req);
    run_request(&req, res);
    cf_request_clear(&req);
}

/* ---- leftovers ------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void strv_add(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 1) * sizeof(char *));
    if (!nv)
        fail_msg("out of memory");
    *v = nv;
    (*v)[(*n)++] = strdup(s);
}

static void walk_dirs(const char *dir, int depth, char ***v, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        strv_add(v, n, path);
        if (depth < 6)
            walk_dirs(path, depth + 1, v, n);
    }
    closedir(d);
}

/* Every cgroup directory below the suite's private cgroups. */
static void cg_snapshot(char ***v, size_t *n)
{
    *v = NULL;
    *n = 0;
    for (size_t i = 0; i < N_CTRL; i++)
        if (g.cg_moved[i])
            walk_dirs(g.cg_private[i], 0, v, n);
    if (*n)
        qsort(*v, *n, sizeof(char *), cmp_str);
}

/* Mount points of the worker's mount namespace below the suite's temp dir
 * (the worker's work root is there; other tests' workers mount elsewhere
 * at any time). */
static void mnt_snapshot(char ***v, size_t *n)
{
    *v = NULL;
    *n = 0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)g.w.pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint ... */
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        for (int i = 0; tok && i < 4; i++)
            tok = strtok_r(NULL, " ", &save);
        if (tok && strncmp(tok, g.base, strlen(g.base)) == 0)
            strv_add(v, n, tok);
    }
    fclose(f);
    if (*n)
        qsort(*v, *n, sizeof(char *), cmp_str);
}

static bool strv_equal(char **a, size_t na, char **b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

/* The worker's own mounts, once they hold still: after its last execution
 * a warm slot prepares its next sandbox (its work tmpfs) in the background,
 * which on a busy machine can take a while.  A baseline taken before that
 * mount existed counted it as left behind by every case (seen under load).
 * Bounded: 20 s. */
static void mnt_snapshot_settled(char ***v, size_t *n)
{
    mnt_snapshot(v, n);
    for (int i = 0; i < 40; i++) {
        usleep(500 * 1000);
        char **b;
        size_t nb;
        mnt_snapshot(&b, &nb);
        bool same = strv_equal(*v, *n, b, nb);
        strv_free(*v, *n);
        *v = b;
        *n = nb;
        if (same)
            return;
    }
}

/* Items of b not in a (both sorted), joined into buf. */
static size_t diff_new(char **a, size_t na, char **b, size_t nb, char *buf, size_t size)
{
    size_t i = 0, found = 0, used = 0;
    buf[0] = '\0';
    for (size_t j = 0; j < nb; j++) {
        while (i < na && strcmp(a[i], b[j]) < 0)
            i++;
        if (i < na && strcmp(a[i], b[j]) == 0) {
            i++;
            continue;
        }
        found++;
        int w = snprintf(buf + used, size - used, "%s ", b[j]);
        if (w > 0 && (size_t)w < size - used)
            used += (size_t)w;
    }
    return found;
}

static int count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static bool cg_moved_any(void)
{
    for (size_t i = 0; i < N_CTRL; i++)
        if (g.cg_moved[i])
            return true;
    return false;
}

/* The suite's own: below the cgroup it moved itself into (cf-hostile-<its
 * pid>), where everything it starts lands, so that another test run's
 * hostile programs on the same host are not taken for this one's
 * leftovers; every "hostile" process when it could not move itself. */
static bool hostile_ours(const char *pid)
{
    if (!cg_moved_any())
        return true;
    char path[300], pcg[2048], mark[48];
    snprintf(path, sizeof(path), "/proc/%s/cgroup", pid);
    read_small(path, pcg, sizeof(pcg));
    snprintf(mark, sizeof(mark), "/cf-hostile-%d", (int)getpid());
    for (const char *f = strstr(pcg, mark); f; f = strstr(f + 1, mark)) {
        char next = f[strlen(mark)];
        if (next == '/' || next == '\n' || next == '\0')
            return true;
    }
    return false;
}

/* This suite's processes whose name starts with "hostile" (every hostile
 * program, its daemons and setuid probe), as "pid:comm " into buf. */
static int hostile_processes(char *buf, size_t size)
{
    DIR *d = opendir("/proc");
    int n = 0;
    size_t used = 0;
    buf[0] = '\0';
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], comm[64];
        snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
        read_small(path, comm, sizeof(comm));
        comm[strcspn(comm, "\n")] = '\0';
        if (strncmp(comm, "hostile", 7) == 0 && hostile_ours(de->d_name)) {
            n++;
            /* State, parent, uid and cgroup say whose it is. */
            char st[2048], pcg[512], state[32] = "?", ppid[16] = "?", uid[16] = "?";
            snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
            read_small(path, st, sizeof(st));
            const char *f;
            if ((f = strstr(st, "\nState:\t")))
                snprintf(state, sizeof(state), "%.*s", (int)strcspn(f + 8, "\n"), f + 8);
            if ((f = strstr(st, "\nPPid:\t")))
                snprintf(ppid, sizeof(ppid), "%.*s", (int)strcspn(f + 7, "\n"), f + 7);
            if ((f = strstr(st, "\nUid:\t")))
                snprintf(uid, sizeof(uid), "%.*s", (int)strcspn(f + 6, "\t\n"), f + 6);
            snprintf(path, sizeof(path), "/proc/%s/cgroup", de->d_name);
            read_small(path, pcg, sizeof(pcg));
            const char *mem = strstr(pcg, ":memory:");
            int w = snprintf(buf + used, size - used, "%s:%s(state %s ppid %s uid %s cg %.*s) ", de->d_name, comm,
                             state, ppid, uid, mem ? (int)strcspn(mem + 8, "\n") : 0, mem ? mem + 8 : "");
            if (w > 0 && (size_t)w < size - used)
                used += (size_t)w;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* Every entry (files too) below the work root.  The sandbox backend keeps
 * its instance directory and one mount point per slot there for the
 * worker's lifetime; everything of an execution lives in a tmpfs mounted
 * on the slot's mount point and unmounted afterwards. */
static void walk_all(const char *dir, int depth, char ***v, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        strv_add(v, n, path);
        if (de->d_type == DT_DIR && depth < 6)
            walk_all(path, depth + 1, v, n);
    }
    closedir(d);
}

/* Whether path is part of a warm sandbox's empty skeleton: <slot mount
 * point>/cf-XXXXXX and its run, run/out and work directories, made before
 * any request (anything inside them is not). */
static bool warm_skeleton(const char *path)
{
    const char *p = strstr(path, "/s0/cf-");
    if (!p || strlen(p + 3) < 10)
        return false;
    p += 3;
    const char *rest = p + 10; /* "/cf-" + 6 random characters */
    return !*rest || strcmp(rest, "/run") == 0 || strcmp(rest, "/run/out") == 0 || strcmp(rest, "/work") == 0;
}

static void wr_snapshot(char ***v, size_t *n)
{
    *v = NULL;
    *n = 0;
    walk_all(g.work_root, 0, v, n);
    if (!g.cold) {
        /* The one slot's next sandbox, once: a second skeleton would be an
         * earlier execution's tmpfs left mounted, and stays in the list. */
        size_t kept = 0, tops = 0;
        for (size_t i = 0; i < *n; i++)
            tops += warm_skeleton((*v)[i]) && !strchr(strstr((*v)[i], "/s0/cf-") + 4, '/');
        for (size_t i = 0; i < *n; i++) {
            if (tops <= 1 && warm_skeleton((*v)[i]))
                free((*v)[i]);
            else
                (*v)[kept++] = (*v)[i];
        }
        *n = kept;
    }
    if (*n)
        qsort(*v, *n, sizeof(char *), cmp_str);
}

/* After every case: the worker is alive and answers a trivial request in
 * the sandbox; no execution directory, cgroup, mount or hostile process is
 * left (polled briefly: the result may overtake the last exits). */
static void after_case(const char *what)
{
    int st = 0;
    if (!g.worker_started)
        fail_msg("%s: no worker (it died earlier)", what);
    if (waitpid(g.w.pid, &st, WNOHANG) != 0) {
        it_worker_dump_log(&g.w);
        g.worker_started = false;
        fail_msg("%s: the worker died (status 0x%x)", what, st);
    }
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo still-here");
    req.backend = strdup(g.backend);
    req.policy.timeout_us = 10 * SEC;
    cf_result res;
    run_request(&req, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "trivial request after the case");
    assert_string_equal(res_stdout(&res), "still-here\n");
    cf_request_clear(&req);
    cf_result_clear(&res);

    char wr[4096], cg[4096], mnt[4096], procs[4096];
    size_t n_wr = 0, n_cg = 0, n_mnt = 0, cg_count = 0;
    int n_procs = 0;
    /* A condition with a ceiling: on a busy machine the last exits and
     * unmounts can trail the answer by seconds (30 s is far past that). */
    int64_t deadline = cf_mono_us() + 30 * SEC * cf_test_time_scale();
    for (;;) {
        n_procs = hostile_processes(procs, sizeof(procs));
        char **v;
        size_t n;
        wr_snapshot(&v, &n);
        n_wr = diff_new(g.wr_baseline, g.n_wr_baseline, v, n, wr, sizeof(wr));
        strv_free(v, n);
        /* The backend may replace a slot's cgroup by a fresh one (new
         * name): a leak is more cgroups than at the start. */
        cg_snapshot(&v, &n);
        n_cg = diff_new(g.cg_baseline, g.n_cg_baseline, v, n, cg, sizeof(cg));
        cg_count = n;
        if (n_cg && n == g.n_cg_baseline) {
            strv_free(g.cg_baseline, g.n_cg_baseline);
            g.cg_baseline = v;
            n_cg = 0;
        } else {
            strv_free(v, n);
        }
        /* As with cgroups: a slot may replace its mount by a fresh one (a
         * new warm sandbox); a leak is more mounts than at the start. */
        mnt_snapshot(&v, &n);
        n_mnt = diff_new(g.mnt_baseline, g.n_mnt_baseline, v, n, mnt, sizeof(mnt));
        if (n_mnt && n == g.n_mnt_baseline) {
            strv_free(g.mnt_baseline, g.n_mnt_baseline);
            g.mnt_baseline = v;
            n_mnt = 0;
        } else {
            strv_free(v, n);
        }
        if (n_wr == 0 && n_procs == 0 && n_cg == 0 && n_mnt == 0)
            return;
        if (cf_mono_us() > deadline)
            break;
        usleep(50 * 1000);
    }
    fail_msg("%s: left behind: work root entries [%s] processes [%s] cgroups (%zu, was %zu) [%s] mounts [%s]", what,
             wr, procs, cg_count, g.n_cg_baseline, cg, mnt);
}

/* ---- fixture -------------------------------------------------------------------- */

/* Moves this process into a private child of its cgroup in each v1
 * controller, so the worker (our child) makes its execution cgroups where
 * no other test's workers do, and the leftover check sees only ours. */
static void cg_move_private(void)
{
    char buf[4096];
    read_small("/proc/self/cgroup", buf, sizeof(buf));
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *rel = c2 + 1;
        for (size_t i = 0; i < N_CTRL; i++) {
            if (strcmp(ctrls, cg_controllers[i]) != 0)
                continue;
            snprintf(g.cg_orig[i], sizeof(g.cg_orig[i]), "/sys/fs/cgroup/%s%s", ctrls, strcmp(rel, "/") ? rel : "");
            snprintf(g.cg_private[i], sizeof(g.cg_private[i]), "%s/cf-hostile-%d", g.cg_orig[i], (int)getpid());
            if (mkdir(g.cg_private[i], 0755) < 0 && errno != EEXIST)
                continue;
            char procs[700], pid[32];
            snprintf(procs, sizeof(procs), "%s/cgroup.procs", g.cg_private[i]);
            snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
            int fd = open(procs, O_WRONLY | O_CLOEXEC);
            if (fd >= 0 && write(fd, pid, strlen(pid)) == (ssize_t)strlen(pid))
                g.cg_moved[i] = true;
            if (fd >= 0)
                close(fd);
            if (!g.cg_moved[i])
                rmdir(g.cg_private[i]);
        }
    }
}

static void rmdir_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        rmdir_tree(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static void cg_move_back(void)
{
    for (size_t i = 0; i < N_CTRL; i++) {
        if (!g.cg_moved[i])
            continue;
        char procs[700], pid[32];
        snprintf(procs, sizeof(procs), "%s/cgroup.procs", g.cg_orig[i]);
        snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        int fd = open(procs, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, pid, strlen(pid));
            close(fd);
        }
        /* Retried: the last exits of the worker's executions may still be
         * settling (rmdir answers EBUSY meanwhile). */
        for (int t = 0; t < 100 && access(g.cg_private[i], F_OK) == 0; t++) {
            rmdir_tree(g.cg_private[i]);
            if (access(g.cg_private[i], F_OK) == 0)
                usleep(20 * 1000);
        }
        if (access(g.cg_private[i], F_OK) == 0)
            fprintf(stderr, "hostile: could not remove %s: %s\n", g.cg_private[i], strerror(errno));
        g.cg_moved[i] = false;
    }
}

static int listen_tcp(char *target, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &sl) < 0)
        return -1;
    snprintf(target, size, "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
    return fd;
}

static int listen_abstract(char *target, size_t size)
{
    char name[64];
    snprintf(name, sizeof(name), "cf-hostile-%d", (int)getpid());
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    memcpy(sun.sun_path + 1, name, strlen(name));
    if (fd < 0 || bind(fd, (struct sockaddr *)&sun, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))) < 0 ||
        listen(fd, 16) < 0)
        return -1;
    snprintf(target, size, "@%s", name);
    return fd;
}

/* Accepts (and closes) every pending connection; returns how many. */
static int drain_accepts(int fd)
{
    int n = 0;
    for (;;) {
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return n;
        close(c);
        n++;
    }
}

static int load_binary(void)
{
    const char *bindir = getenv("CF_BINARY_DIR");
    char src[1024];
    snprintf(src, sizeof(src), "%s/tests/hostile/hostile", bindir ? bindir : "build");
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0 || sb.st_size <= 0) {
        fprintf(stderr, "hostile binary %s: %s (build the 'hostile' target)\n", src, strerror(errno));
        return -1;
    }
    g.bin_len = (size_t)sb.st_size;
    g.bin = malloc(g.bin_len);
    if (!g.bin || read(fd, g.bin, g.bin_len) != (ssize_t)g.bin_len) {
        close(fd);
        return -1;
    }
    close(fd);
    snprintf(g.hostile, sizeof(g.hostile), "%s/hostile", g.base);
    int out = open(g.hostile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    if (out < 0 || write(out, g.bin, g.bin_len) != (ssize_t)g.bin_len) {
        if (out >= 0)
            close(out);
        return -1;
    }
    close(out);
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    g.listen_fd = g.abstract_fd = -1;
    if (geteuid() != 0) {
        g.skip_why = "not root: the hostile suite needs root (namespaces, cgroups, setuid and kill demonstrations)";
        return 0;
    }
    if (!it_brokers()) {
        g.skip_why = "CF_TEST_BROKERS not set (run tests/run_all.sh)";
        return 0;
    }
    cf_strlcpy(g.base, "/tmp/cf-hostile-XXXXXX", sizeof(g.base));
    if (!mkdtemp(g.base) || chmod(g.base, 0755) < 0) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    snprintf(g.work_root, sizeof(g.work_root), "%s/work-root", g.base);
    if (mkdir(g.work_root, 0711) < 0 || load_binary() < 0)
        return -1;

    char hex[40];
    random_hex(hex, 33);
    snprintf(g.canary, sizeof(g.canary), "CANARY-%s", hex);
    random_hex(hex, 33);
    snprintf(g.secret, sizeof(g.secret), "HOST-SECRET-%s", hex);
    snprintf(g.secret_file, sizeof(g.secret_file), "%s/host-secret", g.base);
    snprintf(g.host_dir, sizeof(g.host_dir), "%s/host-dir", g.base);
    char victim[200];
    snprintf(victim, sizeof(victim), "%s/victim", g.host_dir);
    if (write_file(g.secret_file, g.secret, 0600) < 0 || mkdir(g.host_dir, 0755) < 0 ||
        write_file(victim, "victim", 0644) < 0)
        return -1;

    g.listen_fd = listen_tcp(g.listen_target, sizeof(g.listen_target));
    g.abstract_fd = listen_abstract(g.abstract_target, sizeof(g.abstract_target));
    if (g.listen_fd < 0 || g.abstract_fd < 0) {
        fprintf(stderr, "listeners: %s\n", strerror(errno));
        return -1;
    }
    const char *r = it_redis();
    snprintf(g.broker_target, sizeof(g.broker_target), "%s", it_brokers());
    g.broker_target[strcspn(g.broker_target, ",")] = '\0';
    snprintf(g.redis_target, sizeof(g.redis_target), "%s", r ? r : "127.0.0.1:6379");

    cg_move_private();
    cf_error err;
    cf_error_clear(&err);
    if (cf_cgroup_env_new(NULL, &g.demo_env, &err) < 0) {
        fprintf(stderr, "demo cgroups: %s\n", err.msg);
        return -1;
    }

    it_topics_create(&g.t, "hostile", 1);
    char a_root[200];
    snprintf(a_root, sizeof(a_root), "--work-root=%s", g.work_root);
    /* CF_HOSTILE_SANDBOX=cold: every sandbox built for its request (the
     * default is the warm one its slot prepared ahead). */
    /* CF_HOSTILE_SANDBOX=zygote: every program started by the slot's
     * zygote (zygote-exec), none from a sandbox of the worker's. */
    const char *mode = getenv("CF_HOSTILE_SANDBOX") ? getenv("CF_HOSTILE_SANDBOX") : "warm";
    g.cold = strcmp(mode, "cold") == 0;
    g.zygote = strcmp(mode, "zygote") == 0;
    /* CF_HOSTILE_SANDBOX=container: every program in the container backend
     * (crun, the default image of deploy/images.sh). */
    bool container = strcmp(mode, "container") == 0;
    g.backend = container ? "container" : "sandbox";
    char a_images[4200];
    const char *images_dir = getenv("CODEFLEET_IMAGES");
    snprintf(a_images, sizeof(a_images), "--container-images=default=%.2000s/default/rootfs",
             images_dir && images_dir[0] ? images_dir : "/var/lib/codefleet/images");
    const char *extra[] = {container ? "--backends=container,sandbox,process" : "--backends=sandbox,process", a_root,
                           "--slots=1", "--max-timeout=60s",
                           g.cold || g.zygote ? "--sandbox-warm=false" : "--sandbox-warm=true",
                           g.zygote ? "--zygote-exec=true" : "--zygote-exec=false",
                           container ? a_images : "--container-images=", NULL};
    /* The canary lives in the worker's environment only. */
    setenv(CANARY_ENV, g.canary, 1);
    it_worker_start(&g.w, &g.t, "hostile-w1", extra);
    unsetenv(CANARY_ENV);
    g.worker_started = true;

    cf_kvlist kv = {0};
    for (size_t i = 0; i < it_kafka()->count; i++)
        cf_kvlist_set(&kv, it_kafka()->items[i].key, it_kafka()->items[i].value, &err);
    cf_kvlist_set(&kv, "message.max.bytes", "16777216", &err);
    cf_dispatcher_config cfg = {
        .brokers = it_brokers(),
        .request_topic = g.t.requests,
        .result_topic = g.t.results,
        .collect_results = true,
        .kafka = &kv,
    };
    int rc = cf_dispatcher_new(&cfg, &g.d, &err);
    cf_kvlist_free(&kv);
    if (rc < 0) {
        fprintf(stderr, "dispatcher: %s\n", err.msg);
        return -1;
    }

    /* The sandbox must work here: a worker that could not start it exits
     * (unknown backend) or answers internal_error/rejected. */
    usleep(300 * 1000);
    int st;
    if (waitpid(g.w.pid, &st, WNOHANG) != 0) {
        it_worker_dump_log(&g.w);
        g.worker_started = false;
        fprintf(stderr, "FAILED: the worker with --backends=sandbox,process did not start (sandbox unavailable?)\n");
        return -1;
    }
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "cat /proc/self/uid_map; echo warm");
    req.backend = strdup(g.backend);
    req.policy.timeout_us = 20 * SEC;
    cf_result res;
    memset(&res, 0, sizeof(res));
    if (cf_dispatcher_submit(g.d, &req, &err) < 0) {
        fprintf(stderr, "warm-up request: %s\n", err.msg);
        return -1;
    }
    /* Waited for in slices, so a worker that dies (a backend that fails to
     * start exits the worker) fails the suite at once. */
    for (int64_t until = cf_mono_us() + 120 * SEC;;) {
        if (cf_dispatcher_wait(g.d, req.id, 500 * 1000, &res, &err) == 0)
            break;
        bool died = waitpid(g.w.pid, &st, WNOHANG) != 0;
        if (died)
            g.worker_started = false;
        if (err.code != CF_E_TIMEOUT || cf_mono_us() > until || died) {
            fprintf(stderr, "FAILED: no answer from the worker with --backends=sandbox,process: %s\n", err.msg);
            it_worker_dump_log(&g.w);
            return -1;
        }
    }
    if (res.status != CF_STATUS_SUCCESS || !res.meta.isolation || strcmp(res.meta.isolation, g.backend) != 0) {
        dump_result(&res, "warm-up in the sandbox");
        it_worker_dump_log(&g.w);
        fprintf(stderr, "FAILED: the %s backend does not run programs on this host\n", g.backend);
        return -1;
    }
    fprintf(stderr, "hostile: sandbox ready; uid_map of an execution: %s", res_stdout(&res));
    cf_request_clear(&req);
    cf_result_clear(&res);
    /* The zygote comes up in the background: the suite starts once it
     * serves. */
    for (int i = 0; g.zygote; i++) {
        it_request_init(&req, CF_LANG_SHELL, "true");
        req.backend = strdup(g.backend);
        req.policy.timeout_us = 20 * SEC;
        memset(&res, 0, sizeof(res));
        bool up = cf_dispatcher_submit(g.d, &req, &err) == 0 && cf_dispatcher_wait(g.d, req.id, 20 * SEC, &res, &err) == 0 &&
                  res.meta.sandbox && strcmp(res.meta.sandbox, "zygote") == 0;
        cf_request_clear(&req);
        cf_result_clear(&res);
        if (up)
            break;
        if (i == 100) {
            it_worker_dump_log(&g.w);
            fprintf(stderr, "FAILED: the zygote never served\n");
            return -1;
        }
        usleep(200 * 1000);
    }

    /* Once the slots are ready: their mounts settled (see there). */
    mnt_snapshot_settled(&g.mnt_baseline, &g.n_mnt_baseline);
    cg_snapshot(&g.cg_baseline, &g.n_cg_baseline);
    wr_snapshot(&g.wr_baseline, &g.n_wr_baseline);
    fprintf(stderr, "hostile: baseline: %zu cgroup dirs, %zu work root entries\n", g.n_cg_baseline, g.n_wr_baseline);
    g.fd_baseline = count_fds(g.w.pid);
    g.ready = true;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (g.d)
        cf_dispatcher_destroy(g.d);
    if (g.worker_started) {
        int fds = count_fds(g.w.pid);
        if (g.ready && fds > g.fd_baseline + 16) {
            fprintf(stderr, "FAILED: the worker's open fds grew from %d to %d over the suite\n", g.fd_baseline, fds);
            rc = -1;
        }
        int st = it_worker_stop(&g.w, SIGTERM, 30000);
        if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            it_worker_dump_log(&g.w);
            fprintf(stderr, "FAILED: the worker did not shut down cleanly (status %d)\n", st);
            rc = -1;
        } else {
            unlink(g.w.log_path);
        }
        /* A clean shutdown takes the slot cgroups, the instance directory
         * and its mounts with it. */
        char **v;
        size_t n;
        char left[4096];
        cg_snapshot(&v, &n);
        size_t used = 0;
        left[0] = '\0';
        for (size_t i = 0; i < n; i++) {
            if (!strstr(v[i], "/cfsb-"))
                continue;
            int w = snprintf(left + used, sizeof(left) - used, "%s ", v[i]);
            if (w > 0 && (size_t)w < sizeof(left) - used)
                used += (size_t)w;
        }
        strv_free(v, n);
        wr_snapshot(&v, &n);
        for (size_t i = 0; i < n; i++) {
            int w = snprintf(left + used, sizeof(left) - used, "%s ", v[i]);
            if (w > 0 && (size_t)w < sizeof(left) - used)
                used += (size_t)w;
        }
        strv_free(v, n);
        if (left[0]) {
            fprintf(stderr, "FAILED: left behind after the worker's shutdown: %s\n", left);
            rc = -1;
        }
    }
    cf_cgroup_env_destroy(g.demo_env);
    cg_move_back();
    if (g.listen_fd >= 0)
        close(g.listen_fd);
    if (g.abstract_fd >= 0)
        close(g.abstract_fd);
    strv_free(g.cg_baseline, g.n_cg_baseline);
    strv_free(g.mnt_baseline, g.n_mnt_baseline);
    strv_free(g.wr_baseline, g.n_wr_baseline);
    free(g.bin);
    if (g.base[0])
        rm_rf(g.base);
    return rc;
}

#define REQUIRE_SUITE()                                                                                        \
    do {                                                                                                       \
        if (g.skip_why) {                                                                                      \
            print_message("skipping: %s\n", g.skip_why);                                                       \
            skip();                                                                                            \
        }                                                                                                      \
        assert_true(g.ready);                                                                                  \
    } while (0)

/* ---- processes ------------------------------------------------------------------ */

static void pids_policy(cf_request *req)
{
    req->policy.timeout_us = 2 * SEC;
}

static void test_fork_bomb(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox: 200 processes, far past the sandbox's 32 (as an
     * unprivileged uid in a 300-pids cgroup, killed and reaped after). */
    demo dm;
    demo_run((const char *[]){"forkbomb", "200", NULL}, &(demo_opts){.as_demo_uid = true}, &dm);
    DEMO_EXPECT(&dm, has_line(dm.text, "forked: 200"), "fork 200 processes");
    demo_free(&dm);

    cf_result res;
    int64_t t0 = cf_mono_us();
    sandboxed("forkbomb 1000 explode", pids_policy, &res);
    char v[64];
    const char *forked = line_value(res_stdout(&res), "forked", v, sizeof(v));
    /* Contained is what counts: the pids limit held.  The bomb then spins
     * on failing forks until the timeout, unless the kernel memory those
     * failed forks take (task structs, stacks, page tables freed after an
     * RCU grace period: 16-34 MiB seen) reaches the 64 MiB limit first and
     * the OOM killer ends it (measured on kernel 6.18 with and without the
     * sandbox's init: most runs). */
    if (res.status != CF_STATUS_TIMEOUT && res.status != CF_STATUS_FAILED &&
        res.status != CF_STATUS_MEMORY_EXCEEDED)
        expect_status(&res, CF_STATUS_TIMEOUT, "fork bomb");
    if (!forked || strtol(forked, NULL, 10) >= SBX_PIDS) {
        dump_result(&res, "fork bomb");
        fail_msg("fork bomb: the pids limit of %d did not hold (forked: %s)", SBX_PIDS, forked ? forked : "?");
    }
    assert_true(cf_mono_us() - t0 < 30 * SEC);
    cf_result_clear(&res);
    after_case("fork bomb");
}

/* ---- memory ---------------------------------------------------------------------- */

static void memory_case(const char *what, const char *prog, const char *progress, int64_t limit)
{
    char args[64];
    snprintf(args, sizeof(args), "%s 256", prog);
    /* Without the sandbox: 256 MiB (4x the sandbox's limit) in a 512 MiB cgroup. */
    demo dm;
    demo_run((const char *[]){prog, "256", NULL}, &(demo_opts){0}, &dm);
    DEMO_EXPECT(&dm, has_line(dm.text, "done: 256 MiB"), what);
    demo_free(&dm);

    cf_request req;
    hostile_request(&req, args);
    req.policy.memory_bytes = limit;
    req.policy.timeout_us = 20 * SEC;
    cf_result res;
    run_request(&req, &res);
    expect_status(&res, CF_STATUS_MEMORY_EXCEEDED, what);
    long reached = progress_mib(res_stdout(&res), progress);
    if (strstr(res_stdout(&res), "done:") || reached * MIB > limit) {
        dump_result(&res, what);
        fail_msg("%s: got %ld MiB past a %lld MiB limit", what, reached, (long long)(limit / MIB));
    }
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "memory"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    after_case(what);
}

static void test_memory_heap(void **state)
{
    REQUIRE_SUITE();
    memory_case("heap hog", "heap", "heap", SBX_MEMORY);
}

static void test_memory_huge_mapping(void **state)
{
    REQUIRE_SUITE();
    memory_case("huge mapping", "mmap", "touched", SBX_MEMORY);
}

/* /dev/shm is a tmpfs: its pages must count against the memory limit.  The
 * limit is below the sandbox's tmpfs size so that the cgroup, not the
 * tmpfs cap, is what stops it. */
static void test_memory_shm(void **state)
{
    REQUIRE_SUITE();
    memory_case("/dev/shm hog", "shm", "shm", 40 * MIB);
}

static void test_memory_memfd(void **state)
{
    REQUIRE_SUITE();
    memory_case("memfd hog", "memfd", "memfd", SBX_MEMORY);
}

/* ---- disk -------------------------------------------------------------------------- */

static int64_t host_free_bytes(void)
{
    struct statvfs sv;
    if (statvfs(g.work_root, &sv) < 0)
        return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

/* Runs a disk hog in the sandbox while watching the host filesystem of
 * the work root: it must fail, and the host must not lose the space. */
static void disk_case(const char *what, const char *args, int64_t max_file_size, const char *err_key,
                      const char *const *errnos, cf_result *res)
{
    int64_t free0 = host_free_bytes();
    cf_request req;
    hostile_request(&req, args);
    req.policy.timeout_us = 30 * SEC;
    /* Above the work dir's size cap: tmpfs pages count as memory, and this
     * case is about the disk cap, not the memory limit. */
    req.policy.memory_bytes = 512 * MIB;
    req.policy.max_file_size_bytes = max_file_size;
    cf_error err;
    cf_error_clear(&err);
    memset(res, 0, sizeof(*res));
    submit(&req);
    int64_t min_free = free0, until = cf_mono_us() + 120 * SEC;
    for (;;) {
        int64_t f = host_free_bytes();
        if (f >= 0 && f < min_free)
            min_free = f;
        int rc = cf_dispatcher_wait(g.d, req.id, 100 * 1000, res, &err);
        if (rc == 0)
            break;
        int st = 0;
        bool died = !g.worker_started || waitpid(g.w.pid, &st, WNOHANG) != 0;
        if (err.code != CF_E_TIMEOUT || cf_mono_us() > until || died) {
            if (died)
                g.worker_started = false;
            it_worker_dump_log(&g.w);
            fail_msg("%s: no result (%s)%s", what, err.msg, died ? ": the worker died" : "");
        }
    }
    if (getenv("CF_HOSTILE_VERBOSE"))
        dump_result(res, what);
    expect_status(res, CF_STATUS_FAILED, what);
    char v[128];
    const char *e = line_value(res_stdout(res), err_key, v, sizeof(v));
    bool known = false;
    for (size_t i = 0; e && errnos[i]; i++)
        known = known || strncmp(e, errnos[i], strlen(errnos[i])) == 0;
    if (!known) {
        dump_result(res, what);
        fail_msg("%s: expected %s to fail with a space error, got '%s'", what, err_key, e ? e : "(no error line)");
    }
    /* The work dir is a 128 MiB tmpfs; a disk-backed one would lose up to
     * the whole write here.  Slack for whatever else uses this disk. */
    if (free0 - min_free > 256 * MIB) {
        dump_result(res, what);
        fail_msg("%s: the host filesystem of the work root lost %lld MiB during the run", what,
                 (long long)((free0 - min_free) / MIB));
    }
    cf_request_clear(&req);
}

static const char *const space_errors[] = {"ENOSPC", "EDQUOT", "EFBIG", NULL};

static void test_disk_large_write(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"write", "200", NULL}, &(demo_opts){.timeout_us = 30 * SEC}, &dm);
    DEMO_EXPECT(&dm, has_line(dm.text, "done: 200 MiB"), "write 200 MiB to the host disk");
    demo_free(&dm);

    cf_result res;
    disk_case("large write", "write 1024", 0, "write-error", space_errors, &res);
    assert_true(progress_mib(res_stdout(&res), "write") < 1024);
    cf_result_clear(&res);
    after_case("large write");
}

static void test_disk_file_size_limit(void **state)
{
    REQUIRE_SUITE();
    cf_result res;
    disk_case("write past max_file_size", "write 1024", 8 * MIB, "write-error",
              (const char *const[]){"EFBIG at 8 MiB", NULL}, &res);
    cf_result_clear(&res);
    after_case("write past max_file_size");
}

static void test_disk_fallocate(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"fallocate", "1024", NULL}, &(demo_opts){.fsize = 2048 * MIB}, &dm);
    DEMO_EXPECT(&dm, strstr(dm.text, "done: 1024 MiB allocated"), "fallocate 1 GiB on the host disk");
    demo_free(&dm);

    cf_result res;
    disk_case("fallocate", "fallocate 8192", 0, "fallocate-error", space_errors, &res);
    cf_result_clear(&res);
    after_case("fallocate");
}

static void test_disk_many_files(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    /* A bound, not a measure: a few seconds when idle, far longer when
     * the machine is busy (CI once ran out of 30 s there). */
    demo_run((const char *[]){"files", "20000", NULL}, &(demo_opts){.timeout_us = 180 * SEC}, &dm);
    DEMO_EXPECT(&dm, has_line(dm.text, "done: 20000 files"), "20000 files on the host disk");
    demo_free(&dm);

    cf_result res;
    disk_case("many files", "files 200000", 0, "files-error", space_errors, &res);
    cf_result_clear(&res);
    after_case("many files");
}

/* ---- output ---------------------------------------------------------------------------- */

/* 64 KiB of endless output take microseconds; 5 s leave room for a busy
 * machine to schedule the writer at all (1 s once did not, in CI). */
static void stdout_policy(cf_request *req)
{
    req->policy.timeout_us = 5 * SEC;
    req->policy.max_stdout_bytes = 64 * 1024;
}

static void test_endless_stdout(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"stdout", NULL}, &(demo_opts){.timeout_us = 5 * SEC, .max_out = 64 * 1024}, &dm);
    DEMO_EXPECT(&dm, dm.out.timed_out && dm.out.out_truncated, "endless output");
    demo_free(&dm);

    cf_result res;
    sandboxed("stdout", stdout_policy, &res);
    expect_status(&res, CF_STATUS_TIMEOUT, "endless stdout");
    assert_true(res.stdout_truncated);
    assert_int_equal(res.stdout_data.len, 64 * 1024);
    assert_int_equal(res.stdout_data.data[0], 'O');
    assert_int_equal(res.stdout_data.data[64 * 1024 - 1], 'O');
    assert_true(res.wall_time_us < 10 * SEC);
    cf_result_clear(&res);
    after_case("endless stdout");
}

static void stderr_policy(cf_request *req)
{
    req->policy.timeout_us = 10 * SEC;
    req->policy.max_stderr_bytes = 64 * 1024;
}

static void test_huge_stderr_line(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"stderrline", "16", NULL}, &(demo_opts){0}, &dm);
    DEMO_EXPECT(&dm, dm.out.exited && dm.out.err_truncated, "a 16 MiB stderr line");
    demo_free(&dm);

    cf_result res;
    sandboxed("stderrline 16", stderr_policy, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "huge stderr line");
    assert_true(res.stderr_truncated);
    assert_int_equal(res.stderr_data.len, 64 * 1024);
    assert_int_equal(res.stderr_data.data[100], 'E');
    assert_true(has_line(res_stdout(&res), "stderr-written: 16 MiB"));
    cf_result_clear(&res);
    after_case("huge stderr line");
}

/* ---- CPU and time ---------------------------------------------------------------------- */

static void cpu_policy(cf_request *req)
{
    req->policy.cpu_time_us = 1 * SEC;
    req->policy.timeout_us = 20 * SEC;
}

/* cpu_time 1 s ended the run between 1.0 and 1.3 s of CPU. */
static void assert_cpu_near_limit(const cf_result *res, const char *what)
{
    if (res->cpu_time_us < 1 * SEC || res->cpu_time_us > 1300 * 1000) {
        dump_result(res, what);
        fail_msg("%s: cpu_time_us %" PRId64 ", expected 1.0..1.3 s", what, res->cpu_time_us);
    }
}

static void test_cpu_loop(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"cpu", NULL}, &(demo_opts){.timeout_us = 1 * SEC}, &dm);
    DEMO_EXPECT(&dm, dm.out.timed_out && dm.out.cpu_us > 100 * 1000, "an endless CPU loop");
    demo_free(&dm);

    cf_result res;
    sandboxed("cpu", cpu_policy, &res);
    expect_status(&res, CF_STATUS_TIMEOUT, "cpu loop");
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "cpu"));
    /* The cpu limit, not the 20 s wall clock, ended it. */
    assert_true(res.wall_time_us < 10 * SEC);
    /* At the limit (the cgroup's count), not at the RLIMIT_CPU backstop a
     * second later (pid 1 of the namespace ignores SIGXCPU). */
    assert_cpu_near_limit(&res, "cpu loop");
    cf_result_clear(&res);
    after_case("cpu loop");
}

static void threads_policy(cf_request *req)
{
    req->policy.timeout_us = 1 * SEC;
    req->policy.max_processes = 64;
}

static void test_spinning_threads(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"threads", "16", NULL}, &(demo_opts){.timeout_us = 1500 * 1000}, &dm);
    DEMO_EXPECT(&dm, dm.out.timed_out && has_line(dm.text, "threads: 16"), "16 spinning threads");
    demo_free(&dm);

    cf_result res;
    int64_t t0 = cf_mono_us();
    sandboxed("threads 16", threads_policy, &res);
    expect_status(&res, CF_STATUS_TIMEOUT, "spinning threads");
    assert_true(has_line(res_stdout(&res), "threads: 16"));
    assert_true(cf_mono_us() - t0 < 15 * SEC);
    cf_result_clear(&res);
    after_case("spinning threads");
}

static void sleep_policy(cf_request *req)
{
    req->policy.timeout_us = 500 * 1000;
}

static void test_long_sleep(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"sleep", NULL}, &(demo_opts){.timeout_us = 500 * 1000}, &dm);
    DEMO_EXPECT(&dm, dm.out.timed_out, "an endless sleep");
    demo_free(&dm);

    cf_result res;
    sandboxed("sleep", sleep_policy, &res);
    expect_status(&res, CF_STATUS_TIMEOUT, "long sleep");
    assert_true(has_line(res_stdout(&res), "sleeping"));
    assert_true(res.wall_time_us < 5 * SEC);
    cf_result_clear(&res);
    after_case("long sleep");
}

static void soft_cpu_limit(void *arg)
{
    (void)arg;
    struct rlimit rl = {.rlim_cur = 1, .rlim_max = RLIM_INFINITY};
    setrlimit(RLIMIT_CPU, &rl);
}

static void test_ignores_sigxcpu(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox: a soft CPU limit alone is ignored; the program
     * is still running after its SIGXCPU (it prints "ignored" then, after
     * 1 s of CPU: on a busy machine many seconds of wall time). */
    char out[4096];
    bool timed_out = false;
    raw_run((const char *[]){"sigxcpu", NULL}, soft_cpu_limit, NULL, 120 * SEC, "sigxcpu: ignored", out, sizeof(out),
            &timed_out);
    if (!timed_out || !has_line(out, "sigxcpu: ignored"))
        fail_msg("harm not shown: a program ignoring SIGXCPU (timed out %d, output '%s')", timed_out, out);

    cf_result res;
    sandboxed("sigxcpu", cpu_policy, &res);
    expect_status(&res, CF_STATUS_TIMEOUT, "ignoring SIGXCPU");
    assert_true(res.wall_time_us < 10 * SEC);
    assert_cpu_near_limit(&res, "ignoring SIGXCPU");
    cf_result_clear(&res);
    after_case("ignoring SIGXCPU");
}

/* cpu_time is the execution's total: loops in children of a waiting shell
 * (each with its own per-process rlimit count) and spinning threads end
 * the run at the limit; the shell does not go on. */
static void test_cpu_total(void **state)
{
    REQUIRE_SUITE();
    cf_request req;
    cf_result res;
    hostile_request(&req, "cpu");
    const char *code = "chmod 755 hostile && { ./hostile cpu & ./hostile cpu & wait; }; echo parent-went-on\n";
    cf_bytes_set(&req.code, code, strlen(code));
    cpu_policy(&req);
    run_request(&req, &res);
    expect_status(&res, CF_STATUS_TIMEOUT, "cpu loops in children");
    assert_non_null(strstr(res.reason, "cpu time"));
    assert_false(has_line(res_stdout(&res), "parent-went-on"));
    assert_cpu_near_limit(&res, "cpu loops in children");
    cf_request_clear(&req);
    cf_result_clear(&res);

    sandboxed("threads 4", cpu_policy, &res);
    expect_status(&res, CF_STATUS_TIMEOUT, "four spinning threads");
    assert_non_null(strstr(res.reason, "cpu time"));
    assert_cpu_near_limit(&res, "four spinning threads");
    cf_result_clear(&res);
    after_case("cpu total");
}

/* The program's stdio can be reopened by name (the pipes are the slot
 * uid's, not the worker's). */
static void test_stdio_by_name(void **state)
{
    REQUIRE_SUITE();
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "cat /dev/stdin; echo x > /dev/stdout; echo y > /dev/stderr");
    req.backend = strdup(g.backend);
    req.policy.timeout_us = 10 * SEC;
    cf_bytes_set(&req.stdin_data, "from stdin\n", 11);
    cf_result res;
    run_request(&req, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "stdio by name");
    char e[64];
    if (strcmp(res_stdout(&res), "from stdin\nx\n") != 0 || strcmp(data_str(&res.stderr_data, e, sizeof(e)), "y\n") != 0) {
        dump_result(&res, "stdio by name");
        fail_msg("stdio by name: unexpected output");
    }
    cf_request_clear(&req);
    cf_result_clear(&res);
    after_case("stdio by name");
}

/* peak_memory_bytes counts shared memory (the cgroup's peak, per
 * execution), not only the process's own pages. */
static void test_shm_peak(void **state)
{
    REQUIRE_SUITE();
    cf_result res;
    sandboxed("shm 30", NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "30 MiB in /dev/shm");
    assert_true(has_line(res_stdout(&res), "done: 30 MiB"));
    if (res.peak_memory_bytes < 30 * MIB || res.peak_memory_bytes > SBX_MEMORY) {
        dump_result(&res, "30 MiB in /dev/shm");
        fail_msg("peak_memory_bytes %" PRId64 ", expected 30..64 MiB", res.peak_memory_bytes);
    }
    cf_result_clear(&res);
    after_case("shm peak");
}

/* ---- network ------------------------------------------------------------------------------ */

static void test_network_egress(void **state)
{
    REQUIRE_SUITE();
    drain_accepts(g.listen_fd);
    drain_accepts(g.abstract_fd);
    /* Without the sandbox (as an unprivileged uid): the broker, Redis, a
     * listener of ours and an abstract unix socket all answer. */
    demo dm;
    demo_run((const char *[]){"connect", g.broker_target, g.redis_target, g.listen_target, g.abstract_target, NULL},
             &(demo_opts){.as_demo_uid = true}, &dm);
    char key[128];
    const char *targets[] = {g.broker_target, g.redis_target, g.listen_target, g.abstract_target};
    for (size_t i = 0; i < 4; i++) {
        char line[160];
        snprintf(line, sizeof(line), "connect %s: ok", targets[i]);
        DEMO_EXPECT(&dm, has_line(dm.text, line), targets[i]);
    }
    DEMO_EXPECT(&dm, drain_accepts(g.listen_fd) >= 1 && drain_accepts(g.abstract_fd) >= 1, "listeners reached");
    demo_free(&dm);

    char args[512];
    snprintf(args, sizeof(args), "connect %s %s %s %s", g.broker_target, g.redis_target, g.listen_target,
             g.abstract_target);
    cf_result res;
    sandboxed(args, NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "network egress");
    const char *out = res_stdout(&res);
    assert_true(has_line(out, "connect: finished"));
    for (size_t i = 0; i < 4; i++) {
        char v[64];
        snprintf(key, sizeof(key), "connect %s", targets[i]);
        const char *e = line_value(out, key, v, sizeof(v));
        if (!e || strcmp(e, "ok") == 0) {
            dump_result(&res, "network egress");
            fail_msg("network egress: %s: %s", targets[i], e ? e : "(no line)");
        }
    }
    usleep(100 * 1000);
    assert_int_equal(drain_accepts(g.listen_fd), 0);
    assert_int_equal(drain_accepts(g.abstract_fd), 0);
    cf_result_clear(&res);
    after_case("network egress");
}

/* ---- secrets, /proc, /sys ------------------------------------------------------------------ */

static void test_secrets_env_and_proc(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox: the canary is read from the worker's environ
     * through /proc, and the worker shows up in the process list. */
    demo dm;
    char canary_nl[80];
    snprintf(canary_nl, sizeof(canary_nl), "%s\n", g.canary);
    demo_run((const char *[]){"secrets", NULL}, &(demo_opts){.stdin_data = canary_nl}, &dm);
    char leak[64];
    snprintf(leak, sizeof(leak), "proc-leak: %d environ", (int)g.w.pid);
    DEMO_EXPECT(&dm, has_line(dm.text, leak), "reading the worker's environ");
    DEMO_EXPECT(&dm, strstr(dm.text, ":codefleet-worke"), "seeing the worker process");
    demo_free(&dm);

    cf_request req;
    hostile_request(&req, "secrets");
    cf_bytes_set(&req.stdin_data, canary_nl, strlen(canary_nl));
    cf_result res;
    run_request(&req, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "secrets");
    const char *out = res_stdout(&res);
    char v[64];
    const char *env = line_value(out, "env", v, sizeof(v));
    assert_non_null(env);
    assert_string_equal(env, "clean");
    const char *proc = line_value(out, "proc", v, sizeof(v));
    if (!proc || strcmp(proc, "clean") != 0 || strstr(out, "codefleet-worke") || strstr(out, g.canary)) {
        dump_result(&res, "secrets");
        fail_msg("secrets: the canary or the worker is visible from the sandbox");
    }
    /* Only the execution's own processes: the shell exec'd into hostile. */
    const char *count = line_value(out, "proc-count", v, sizeof(v));
    assert_non_null(count);
    assert_true(strtol(count, NULL, 10) <= 2);
    cf_request_clear(&req);
    cf_result_clear(&res);
    after_case("secrets");
}

static void test_proc_sys_and_cgroup_writes(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox (as root): kernel and cgroup knobs open for
     * writing.  Nothing is written. */
    demo dm;
    demo_run((const char *[]){"procsys", NULL}, &(demo_opts){0}, &dm);
    DEMO_EXPECT(&dm, has_line(dm.text, "/proc/sys/kernel/hostname: opened"), "/proc/sys writable");
    DEMO_EXPECT(&dm, strstr(dm.text, "cgroup.procs: opened"), "cgroup files writable");
    demo_free(&dm);

    cf_result res;
    sandboxed("procsys", NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "procsys");
    const char *out = res_stdout(&res);
    assert_true(has_line(out, "procsys: finished"));
    if (strstr(out, ": opened")) {
        dump_result(&res, "procsys");
        fail_msg("a kernel or cgroup file is writable from the sandbox");
    }
    cf_result_clear(&res);
    after_case("/proc/sys and cgroup writes");
}

/* ---- escape syscalls ------------------------------------------------------------------------- */

/* Calls that work for root on this host (shown by the demo) and must not
 * inside the sandbox. */
static const char *const escape_calls[] = {
    "ptrace_attach", "ptrace_traceme", "process_vm_readv", "mount", "unshare_user", "unshare_mount",
    "unshare_net", "setns", "clone_newuser", "clone3_newuser", "chroot", "keyctl", "add_key", "bpf",
    "userfaultfd", "io_uring_setup", "perf_event_open", "open_by_handle_at", "personality", "socket_packet",
    "socket_netlink_uevent", "int80", NULL};
/* Calls the filter answers by killing the process; on the host they reach
 * the kernel (and fail harmlessly by their arguments). */
static const char *const killed_calls[] = {"reboot", "init_module", "iopl", "int80", "x32", NULL};

static void test_escape_syscalls(void **state)
{
    REQUIRE_SUITE();
    demo dm;
    demo_run((const char *[]){"escape", NULL}, &(demo_opts){0}, &dm);
    char v[64];
    for (size_t i = 0; escape_calls[i]; i++) {
        const char *r = line_value(dm.text, escape_calls[i], v, sizeof(v));
        DEMO_EXPECT(&dm, r && strcmp(r, "ok") == 0, escape_calls[i]);
    }
    for (size_t i = 0; killed_calls[i]; i++) {
        const char *r = line_value(dm.text, killed_calls[i], v, sizeof(v));
        DEMO_EXPECT(&dm, r && strncmp(r, "killed", 6) != 0, killed_calls[i]);
    }
    demo_free(&dm);

    cf_result res;
    sandboxed("escape", NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "escape syscalls");
    const char *out = res_stdout(&res);
    assert_true(has_line(out, "escape: finished"));
    static const char *const denied[] = {"EPERM", "ENOSYS", "EACCES", "EAFNOSUPPORT", "EPROTONOSUPPORT",
                                         "killed SIGSYS", NULL};
    char bad[2048] = "";
    size_t used = 0;
    for (size_t i = 0; escape_calls[i]; i++) {
        const char *r = line_value(out, escape_calls[i], v, sizeof(v));
        bool ok = false;
        for (size_t j = 0; r && denied[j]; j++)
            ok = ok || strcmp(r, denied[j]) == 0;
        if (!ok) {
            int w = snprintf(bad + used, sizeof(bad) - used, "%s=%s ", escape_calls[i], r ? r : "(none)");
            if (w > 0 && (size_t)w < sizeof(bad) - used)
                used += (size_t)w;
        }
    }
    for (size_t i = 0; killed_calls[i]; i++) {
        const char *r = line_value(out, killed_calls[i], v, sizeof(v));
        if (!r || strcmp(r, "killed SIGSYS") != 0) {
            int w = snprintf(bad + used, sizeof(bad) - used, "%s=%s(want killed SIGSYS) ", killed_calls[i],
                             r ? r : "(none)");
            if (w > 0 && (size_t)w < sizeof(bad) - used)
                used += (size_t)w;
        }
    }
    if (bad[0]) {
        dump_result(&res, "escape syscalls");
        fail_msg("escape syscalls not denied: %s", bad);
    }
    cf_result_clear(&res);
    after_case("escape syscalls");
}

static void foreign_abi_case(const char *prog)
{
    demo dm;
    demo_run((const char *[]){prog, NULL}, &(demo_opts){0}, &dm);
    char key[32], v[64];
    snprintf(key, sizeof(key), "%s", prog);
    /* On this host int 0x80 works (IA32 emulation); x32 is not built in,
     * but the call still reaches the kernel (ENOSYS) instead of killing. */
    DEMO_EXPECT(&dm, dm.out.exited && dm.out.exit_code == 0 && strstr(dm.text, "returned"), prog);
    demo_free(&dm);

    cf_result res;
    sandboxed(prog, NULL, &res);
    expect_status(&res, CF_STATUS_FAILED, prog);
    if (res.signal != SIGSYS || strstr(res_stdout(&res), "returned")) {
        dump_result(&res, prog);
        fail_msg("%s: expected the process killed by SIGSYS (31), got signal %d", prog, res.signal);
    }
    assert_non_null(line_value(res_stdout(&res), key, v, sizeof(v)));
    cf_result_clear(&res);
    after_case(prog);
}

static void test_foreign_abi_int80(void **state)
{
    REQUIRE_SUITE();
    foreign_abi_case("int80");
}

static void test_foreign_abi_x32(void **state)
{
    REQUIRE_SUITE();
    foreign_abi_case("x32");
}

/* ---- terminal injection ------------------------------------------------------------------- */

static void on_pty(void *arg)
{
    int slave = *(int *)arg;
    setsid();
    ioctl(slave, TIOCSCTTY, 0);
    dup2(slave, 0);
}

static void test_terminal_injection(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox: TIOCSTI on a terminal that is the program's
     * stdin injects input (a pty of ours, never a real console). */
    int master = -1, slave = -1;
    if (openpty(&master, &slave, NULL, NULL, NULL) < 0)
        fail_msg("openpty: %s", strerror(errno));
    char out[4096];
    bool timed_out;
    raw_run((const char *[]){"tiocsti", "fdonly", NULL}, on_pty, &slave, 5 * SEC, NULL, out, sizeof(out), &timed_out);
    close(slave);
    char injected[8] = "";
    struct pollfd pp = {.fd = master, .events = POLLIN};
    if (poll(&pp, 1, 500) == 1)
        (void)!read(master, injected, sizeof(injected) - 1);
    close(master);
    if (!has_line(out, "tiocsti-fd0: ok"))
        fail_msg("harm not shown: TIOCSTI on a pty (output '%s')", out);

    cf_result res;
    sandboxed("tiocsti", NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "terminal injection");
    const char *o = res_stdout(&res);
    assert_true(has_line(o, "tiocsti: finished"));
    /* EPERM (the filter) and not ENOTTY (the kernel on a pipe): the
     * filter answers before the kernel looks at the fd. */
    char v[64];
    for (int fd = 0; fd < 3; fd++) {
        char key[32];
        snprintf(key, sizeof(key), "tiocsti-fd%d", fd);
        const char *r = line_value(o, key, v, sizeof(v));
        if (!r || strcmp(r, "EPERM") != 0) {
            dump_result(&res, "terminal injection");
            fail_msg("%s: %s (want EPERM from the filter)", key, r ? r : "(none)");
        }
    }
    if (strstr(o, ": ok\n")) {
        dump_result(&res, "terminal injection");
        fail_msg("terminal injection succeeded inside the sandbox");
    }
    cf_result_clear(&res);
    after_case("terminal injection");
}

/* ---- setuid --------------------------------------------------------------------------------- */

/* Puts a setuid-root copy of the hostile binary at dir/hostile-suid-probe
 * (written under another name first, so it appears complete). */
static void place_suid_probe(const char *dir)
{
    char tmp[512], dst[512];
    snprintf(tmp, sizeof(tmp), "%s/.probe-tmp", dir);
    snprintf(dst, sizeof(dst), "%s/hostile-suid-probe", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0700);
    if (fd < 0 || write(fd, g.bin, g.bin_len) != (ssize_t)g.bin_len)
        fail_msg("writing the setuid probe: %s", strerror(errno));
    if (fchown(fd, 0, 0) < 0 || fchmod(fd, 04755) < 0)
        fail_msg("chmod 4755: %s", strerror(errno));
    close(fd);
    if (rename(tmp, dst) < 0)
        fail_msg("rename: %s", strerror(errno));
}

/* Finds the execution's work directory on the host by the marker the
 * program creates in it. */
static bool find_marker(const char *dir, int depth, const char *marker, char *found, size_t size)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    struct dirent *de;
    bool hit = false;
    while (!hit && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (strcmp(de->d_name, marker) == 0) {
            cf_strlcpy(found, dir, size);
            hit = true;
        } else if (de->d_type == DT_DIR && depth < 5) {
            hit = find_marker(path, depth + 1, marker, found, size);
        }
    }
    closedir(d);
    return hit;
}

/* Waits (up to timeout) for the execution's marker file in its work
 * directory, reached through the worker's root: the worker's mounts live
 * in its own mount namespace (worker_main.c).  wd: that directory. */
static bool wait_for_marker(const char *marker, int64_t timeout_us, char *wd, size_t size)
{
    char in_worker[400];
    snprintf(in_worker, sizeof(in_worker), "/proc/%d/root%s", (int)g.w.pid, g.work_root);
    for (int64_t until = cf_mono_us() + timeout_us; cf_mono_us() < until; usleep(50 * 1000))
        if (find_marker(in_worker, 0, marker, wd, size))
            return true;
    fprintf(stderr, "no %s under %s\n", marker, in_worker);
    return false;
}

static void test_setuid_binary(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox: a setuid-root binary run by an unprivileged uid
     * runs as root. */
    char dir[192];
    fresh_dir(dir, sizeof(dir), 0);
    place_suid_probe(dir);
    char probe[512];
    snprintf(probe, sizeof(probe), "%s/hostile-suid-probe", dir);
    demo dm;
    demo_run((const char *[]){"whoami", NULL}, &(demo_opts){.path = probe, .as_demo_uid = true}, &dm);
    DEMO_EXPECT(&dm, has_line(dm.text, "euid: 0"), "setuid root");
    demo_free(&dm);
    rm_rf(dir);

    /* In the sandbox: the program waits for the probe, the test puts it
     * into the execution's work directory from the host (as root, mode
     * 4755), the program runs it. */
    cf_request req;
    hostile_request(&req, "suidwait");
    req.policy.timeout_us = 15 * SEC;
    submit(&req);
    char wd[512];
    bool placed = wait_for_marker(".hostile-suid-wait", 10 * SEC, wd, sizeof(wd));
    if (placed)
        place_suid_probe(wd);
    cf_result res;
    wait_result(req.id, &res);
    if (!placed) {
        dump_result(&res, "setuid");
        fail_msg("setuid: the execution's work directory was not found");
    }
    expect_status(&res, CF_STATUS_SUCCESS, "setuid binary");
    const char *out = res_stdout(&res);
    char uid[32], euid[32];
    if (!line_value(out, "uid", uid, sizeof(uid)) || !line_value(out, "euid", euid, sizeof(euid)) ||
        strcmp(uid, euid) != 0 || strcmp(euid, "0") == 0 || has_line(out, "setuid0: ok") ||
        has_line(out, "shadow: opened")) {
        dump_result(&res, "setuid binary");
        fail_msg("setuid: the probe gained privileges in the sandbox");
    }
    cf_request_clear(&req);
    cf_result_clear(&res);
    after_case("setuid binary");
}

/* ---- per-user kernel counters -------------------------------------------------------------- */

static bool host_inotify_ok(void)
{
    int fd = inotify_init1(IN_CLOEXEC);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

static void test_inotify_instances(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox (as DEMO_UID): the program takes every inotify
     * instance its user may have. */
    demo dm;
    demo_run((const char *[]){"inotify", NULL}, &(demo_opts){.as_demo_uid = true}, &dm);
    DEMO_EXPECT(&dm, has_line(dm.text, "inotify-refused: EMFILE"), "use up its user's inotify instances");
    demo_free(&dm);
    bool container = strcmp(g.backend, "container") == 0;

    /* The run uid's own limit must be below the execution's open files
     * (256), or EMFILE would not say which limit stopped it. */
    long limit = 0;
    FILE *lf = fopen("/proc/sys/fs/inotify/max_user_instances", "r");
    if (!lf || fscanf(lf, "%ld", &limit) != 1)
        limit = 0;
    if (lf)
        fclose(lf);
    if (limit <= 0 || limit >= 250) {
        print_message("fs.inotify.max_user_instances is %ld here: not below the execution's 256 open files\n", limit);
        skip();
    }
    /* The container's user namespace is made by crun as root: the init
     * holds the execution to a share of root's instances in its nested
     * namespace, the host's limit over twice the slots (one slot here). */
    long share = limit / 2;
    if (container) {
        char want[96];
        snprintf(want, sizeof(want), "max_inotify_instances=%ld", share);
        if (it_worker_log_contains(&g.w, "per-user kernel counters NOT limited")) {
            print_message("this worker's containers have no nested user namespace (its log says why)\n");
            skip();
        }
        if (!it_worker_log_contains(&g.w, want)) {
            it_worker_dump_log(&g.w);
            fail_msg("inotify: the container backend did not say it holds executions to %s", want);
        }
    }

    /* Host root must have one to spare before, or "after" says nothing. */
    if (!host_inotify_ok()) {
        print_message("host root holds all its inotify instances already\n");
        skip();
    }
    /* The suite's worker runs as root with every capability: the run uid
     * creates the namespaces (userns-owner = auto). */
    if (!container && it_worker_log_contains(&g.w, "user namespaces are created by root, because")) {
        print_message("this worker creates the namespaces as root (its log says why): nothing to show\n");
        skip();
    }
    if (!container && !it_worker_log_contains(&g.w, "user namespaces are created by their run uid")) {
        it_worker_dump_log(&g.w);
        fail_msg("inotify: the worker did not say who creates the namespaces");
    }

    /* In the sandbox: it takes what it can and holds it; meanwhile host
     * root (whose share every namespace created by root would use up)
     * still gets one. */
    cf_request req;
    hostile_request(&req, "inotify hold");
    req.policy.timeout_us = 40 * SEC;
    submit(&req);
    char wd[512];
    bool held = wait_for_marker(".hostile-inotify-held", 30 * SEC, wd, sizeof(wd));
    bool host_ok = host_inotify_ok();
    if (held) { /* wd: the directory holding the marker */
        char rel[600];
        snprintf(rel, sizeof(rel), "%s/.hostile-inotify-release", wd);
        int fd = open(rel, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
    }
    cf_result res;
    wait_result(req.id, &res);
    if (!held) {
        dump_result(&res, "inotify");
        fail_msg("inotify: the execution's marker was not found");
    }
    expect_status(&res, CF_STATUS_SUCCESS, "inotify instances");
    char v[64];
    const char *n = line_value(res_stdout(&res), "inotify", v, sizeof(v));
    print_message("inotify: the execution took %s instance(s); host root %s one meanwhile\n", n ? n : "?",
                  host_ok ? "still got" : "could NOT get");
    /* Its slot's own limit, all of it (the run uid holds nothing else);
     * in a container, exactly its share of root's. */
    long took = n ? strtol(n, NULL, 10) : -1;
    bool took_right = container ? took == share : took >= limit - 2;
    if (!host_ok || !took_right || !has_line(res_stdout(&res), "inotify-refused: EMFILE") ||
        !has_line(res_stdout(&res), "inotify-released: yes")) {
        dump_result(&res, "inotify");
        fail_msg("inotify: the execution's instances counted against root's (host root refused one)");
    }
    cf_request_clear(&req);
    cf_result_clear(&res);
    after_case("inotify instances");
}

/* ---- signals ------------------------------------------------------------------------------ */

static void test_kill_everything(void **state)
{
    REQUIRE_SUITE();
    /* Without the sandbox (as DEMO_UID): kill(-1) and kill(pid) take a
     * victim of the same uid with them. */
    pid_t victim = fork();
    if (victim == 0) {
        if (setgid(DEMO_UID) < 0 || setuid(DEMO_UID) < 0)
            _exit(1);
        for (;;)
            pause();
    }
    usleep(50 * 1000);
    char vpid[32];
    snprintf(vpid, sizeof(vpid), "%d", (int)victim);
    demo dm;
    demo_run((const char *[]){"killer", vpid, NULL}, &(demo_opts){.as_demo_uid = true}, &dm);
    int st = 0;
    pid_t w = 0;
    for (int i = 0; i < 100 && w == 0; i++) {
        w = waitpid(victim, &st, WNOHANG);
        if (w == 0)
            usleep(20 * 1000);
    }
    if (w == 0) {
        kill(victim, SIGKILL);
        waitpid(victim, &st, 0);
    }
    DEMO_EXPECT(&dm, w == victim && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "killing a process of the same uid");
    DEMO_EXPECT(&dm, has_line(dm.text, "kill-target: ok"), "kill(pid)");
    demo_free(&dm);

    char args[64];
    snprintf(args, sizeof(args), "killer %d", (int)g.w.pid);
    cf_result res;
    sandboxed(args, NULL, &res);
    /* Whatever kill(-1) did inside, the program itself survives it. */
    expect_status(&res, CF_STATUS_SUCCESS, "kill everything");
    const char *out = res_stdout(&res);
    assert_true(has_line(out, "survived"));
    if (has_line(out, "kill-target: ok") || has_line(out, "kill-parent: ok") || has_line(out, "kill-target-group: ok")) {
        dump_result(&res, "kill everything");
        fail_msg("a process outside the sandbox could be signalled");
    }
    cf_result_clear(&res);
    assert_int_equal(kill(g.w.pid, 0), 0);
    after_case("kill everything");
}

/* ---- fds ------------------------------------------------------------------------------------ */

static void leak_fd(void *arg)
{
    int fd = open((const char *)arg, O_RDONLY | O_DIRECTORY);
    if (fd >= 0 && fd != 7) {
        dup2(fd, 7);
        close(fd);
    }
}

static void test_inherited_fds(void **state)
{
    REQUIRE_SUITE();
    /* Without care (a plain fork/exec): an open fd is inherited. */
    char out[4096];
    bool timed_out;
    raw_run((const char *[]){"fds", NULL}, leak_fd, g.base, 5 * SEC, NULL, out, sizeof(out), &timed_out);
    char want[256];
    snprintf(want, sizeof(want), "extra-fd 7: %s", g.base);
    if (!has_line(out, want))
        fail_msg("harm not shown: an inherited fd (output '%s')", out);

    cf_result res;
    sandboxed("fds", NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "inherited fds");
    const char *o = res_stdout(&res);
    if (!has_line(o, "fds: 0 1 2") || !has_line(o, "extra: 0")) {
        dump_result(&res, "inherited fds");
        fail_msg("the sandboxed program inherited fds beyond 0, 1, 2");
    }
    cf_result_clear(&res);
    after_case("inherited fds");
}

/* ---- planted symlinks ------------------------------------------------------------------- */

static void test_planted_symlinks(void **state)
{
    REQUIRE_SUITE();
    struct stat before;
    assert_int_equal(stat(g.secret_file, &before), 0);
    /* Without the sandbox: a reader that follows the planted output.json
     * gets the host file. */
    char dir[192], outpath[256], env_out[300];
    fresh_dir(dir, sizeof(dir), 0);
    snprintf(outpath, sizeof(outpath), "%s/output.json", dir);
    snprintf(env_out, sizeof(env_out), "CODEFLEET_OUTPUT=%s", outpath);
    char *env[] = {"PATH=/usr/bin:/bin", env_out, NULL};
    demo dm;
    demo_run((const char *[]){"plant", g.secret_file, g.host_dir, NULL}, &(demo_opts){.cwd = dir, .env = env}, &dm);
    char followed[128];
    read_small(outpath, followed, sizeof(followed));
    DEMO_EXPECT(&dm, strcmp(followed, g.secret) == 0, "a planted output.json read by a naive reader");
    demo_free(&dm); /* removes dir */

    cf_request req;
    char args[512];
    snprintf(args, sizeof(args), "plant %s %s", g.secret_file, g.host_dir);
    hostile_request(&req, args);
    cf_result res;
    run_request(&req, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "planted symlinks");
    const char *out = res_stdout(&res);
    assert_true(has_line(out, "plant: finished"));
    assert_true(has_line(out, "plant-output: ok")); /* the attack was really set up */
    /* The host file is not visible, the worker did not read through the
     * links, and nothing it pointed at was changed or removed. */
    bool leaked = strstr(out, g.secret) != NULL ||
                  (res.output.len && memmem(res.output.data, res.output.len, g.secret, strlen(g.secret))) ||
                  (res.stderr_data.len && memmem(res.stderr_data.data, res.stderr_data.len, g.secret, strlen(g.secret))) ||
                  (res.reason && strstr(res.reason, g.secret));
    for (size_t i = 0; i < res.n_diagnostics; i++)
        leaked = leaked || (res.diagnostics[i].message && strstr(res.diagnostics[i].message, g.secret));
    if (getenv("CF_HOSTILE_VERBOSE"))
        dump_result(&res, "planted symlinks");
    if (leaked || res.output.len) {
        dump_result(&res, "planted symlinks");
        fail_msg("planted symlinks: the host file reached the result");
    }
    /* The worker saw the planted output.json and refused it, saying so. */
    bool refused = false;
    for (size_t i = 0; i < res.n_diagnostics; i++)
        refused = refused || (res.diagnostics[i].message && strstr(res.diagnostics[i].message, "symlink"));
    if (!refused) {
        dump_result(&res, "planted symlinks");
        fail_msg("planted symlinks: no diagnostic about the refused output.json symlink");
    }
    struct stat after;
    char content[128], victim[256];
    assert_int_equal(stat(g.secret_file, &after), 0);
    read_small(g.secret_file, content, sizeof(content));
    assert_string_equal(content, g.secret);
    assert_int_equal(after.st_mode, before.st_mode);
    assert_int_equal(after.st_uid, before.st_uid);
    assert_int_equal(after.st_nlink, 1);
    snprintf(victim, sizeof(victim), "%s/victim", g.host_dir);
    assert_int_equal(access(victim, F_OK), 0);
    cf_request_clear(&req);
    cf_result_clear(&res);
    after_case("planted symlinks");
}

/* ---- leftovers for the next execution ---------------------------------------------------- */

static void host_leftovers_cleanup(const char *token)
{
    static const char *const dirs[] = {"/tmp", "/dev/shm", "/var/tmp"};
    for (size_t i = 0; i < 3; i++) {
        char p[256];
        snprintf(p, sizeof(p), "%s/hostile-%s", dirs[i], token);
        unlink(p);
    }
    unsigned h = 2166136261u;
    for (const char *p = token; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    int id = shmget((key_t)(h & 0x3fffffff) | 1, 0, 0);
    if (id >= 0)
        shmctl(id, IPC_RMID, NULL);
    /* The daemon keeps "hostile leave <token>" as its command line (it
     * never execs), whatever its name is yet. */
    char procs[4096];
    for (int i = 0; i < 100 && hostile_processes(procs, sizeof(procs)) > 0; i++) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        while (d && (de = readdir(d))) {
            char path[300], cmd[512];
            snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
            size_t n = read_small(path, cmd, sizeof(cmd));
            if (memmem(cmd, n, token, strlen(token)))
                kill((pid_t)strtol(de->d_name, NULL, 10), SIGKILL);
        }
        if (d)
            closedir(d);
        usleep(20 * 1000);
    }
    if (hostile_processes(procs, sizeof(procs)) > 0)
        fail_msg("leftover demonstration processes could not be killed: %s", procs);
}

static void in_dir(void *arg)
{
    if (chdir((const char *)arg) < 0)
        _exit(126);
}

static void test_leftovers_next_execution(void **state)
{
    REQUIRE_SUITE();
    char token[24];
    random_hex(token, 17);
    /* Without the sandbox (a plain runner that kills the process group
     * at the end): the next program finds the files, the SysV segment and
     * the daemon (it left the process group) the previous one left. */
    char da[192], db[192], out_a[4096], out_b[4096];
    fresh_dir(da, sizeof(da), 0);
    fresh_dir(db, sizeof(db), 0);
    bool timed_out;
    raw_run((const char *[]){"leave", token, NULL}, in_dir, da, 5 * SEC, NULL, out_a, sizeof(out_a), &timed_out);
    usleep(100 * 1000); /* the daemon names itself after the double fork */
    raw_run((const char *[]){"look", token, NULL}, in_dir, db, 5 * SEC, NULL, out_b, sizeof(out_b), &timed_out);
    char f[128];
    snprintf(f, sizeof(f), "found: /tmp/hostile-%s", token);
    bool shown = has_line(out_b, f) && has_line(out_b, "found: sysv-shm") && strstr(out_b, "found: daemon");
    host_leftovers_cleanup(token);
    rm_rf(da);
    rm_rf(db);
    if (!shown)
        fail_msg("harm not shown: leftovers found by the next program (leave: '%s', look: '%s')", out_a, out_b);

    random_hex(token, 17);
    char args[64];
    snprintf(args, sizeof(args), "leave %s", token);
    cf_result res;
    sandboxed(args, NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "leave");
    char v[64];
    snprintf(f, sizeof(f), "left /tmp/hostile-%s", token);
    const char *r = line_value(res_stdout(&res), f, v, sizeof(v));
    if (!r || strcmp(r, "ok") != 0 || !has_line(res_stdout(&res), "left sysv-shm: ok")) {
        dump_result(&res, "leave");
        fail_msg("leave: the leftovers were not even created inside the sandbox");
    }
    cf_result_clear(&res);

    snprintf(args, sizeof(args), "look %s", token);
    sandboxed(args, NULL, &res);
    expect_status(&res, CF_STATUS_SUCCESS, "look");
    if (!has_line(res_stdout(&res), "look: clean")) {
        dump_result(&res, "look");
        fail_msg("the next execution saw what the previous one left");
    }
    cf_result_clear(&res);

    /* Nor did anything reach the host. */
    static const char *const dirs[] = {"/tmp", "/dev/shm", "/var/tmp"};
    for (size_t i = 0; i < 3; i++) {
        char p[256];
        snprintf(p, sizeof(p), "%s/hostile-%s", dirs[i], token);
        if (access(p, F_OK) == 0) {
            host_leftovers_cleanup(token);
            fail_msg("%s appeared on the host", p);
        }
    }
    host_leftovers_cleanup(token);
    after_case("leftovers");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_bomb),
        cmocka_unit_test(test_memory_heap),
        cmocka_unit_test(test_memory_huge_mapping),
        cmocka_unit_test(test_memory_shm),
        cmocka_unit_test(test_memory_memfd),
        cmocka_unit_test(test_disk_large_write),
        cmocka_unit_test(test_disk_file_size_limit),
        cmocka_unit_test(test_disk_fallocate),
        cmocka_unit_test(test_disk_many_files),
        cmocka_unit_test(test_endless_stdout),
        cmocka_unit_test(test_huge_stderr_line),
        cmocka_unit_test(test_cpu_loop),
        cmocka_unit_test(test_spinning_threads),
        cmocka_unit_test(test_long_sleep),
        cmocka_unit_test(test_ignores_sigxcpu),
        cmocka_unit_test(test_cpu_total),
        cmocka_unit_test(test_stdio_by_name),
        cmocka_unit_test(test_shm_peak),
        cmocka_unit_test(test_network_egress),
        cmocka_unit_test(test_secrets_env_and_proc),
        cmocka_unit_test(test_proc_sys_and_cgroup_writes),
        cmocka_unit_test(test_escape_syscalls),
        cmocka_unit_test(test_foreign_abi_int80),
        cmocka_unit_test(test_foreign_abi_x32),
        cmocka_unit_test(test_terminal_injection),
        cmocka_unit_test(test_inotify_instances),
        cmocka_unit_test(test_setuid_binary),
        cmocka_unit_test(test_kill_everything),
        cmocka_unit_test(test_inherited_fds),
        cmocka_unit_test(test_planted_symlinks),
        cmocka_unit_test(test_leftovers_next_execution),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
