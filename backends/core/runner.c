/* cf_run: spawn one program and supervise it (see cf_runner.h).
 *
 * No global state, no signal handlers, no SIGCHLD: the child is watched
 * through a pidfd, so several threads may run cf_run at once.  Every fd is
 * opened O_CLOEXEC so children of other threads never keep our pipes past
 * their exec.
 */
#include "cf_runner.h"
#include "cf_run_report.h"
#include "cf_child.h"
#include "cf_util.h"

#include <errno.h>
#include <linux/capability.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* After the main process exits, output still held open by an escaped
 * descendant is drained at most this long. */
#define DRAIN_AFTER_EXIT_US 100000
/* How often *cancel is looked at while nothing else happens. */
#define CANCEL_POLL_US 50000
#define IO_CHUNK 65536

/* struct clone_args up to its third version (CLONE_ARGS_SIZE_VER2, with
 * the cgroup): declared here because glibc 2.36 does not export it and
 * <linux/sched.h> clashes with <sched.h>.  Only the first 64 bytes (VER0)
 * are passed unless a cgroup is asked for, so older kernels see the size
 * they know. */
struct run_clone_args {
    uint64_t flags;
    uint64_t pidfd;
    uint64_t child_tid;
    uint64_t parent_tid;
    uint64_t exit_signal;
    uint64_t stack;
    uint64_t stack_size;
    uint64_t tls;
    uint64_t set_tid;      /* VER1 */
    uint64_t set_tid_size;
    uint64_t cgroup;       /* VER2 */
};
#define RUN_CLONE_ARGS_VER0 64
#define RUN_CLONE_ARGS_VER2 88

/* Set once the kernel refused CLONE_INTO_CGROUP (before 5.7, or a cgroup
 * it will not take): later children are attached by the parent at once. */
static atomic_bool into_cgroup_refused;

/* AddressSanitizer's interceptors keep per-thread state that a child
 * sharing our memory on a foreign stack corrupts (seen: a false
 * stack-buffer-overflow in sigaltstack, then a hang in the parent's exit),
 * and ThreadSanitizer's shadow state fares no better (seen: false races
 * after joined threads): sanitizer builds use the fork path. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VFORK_USABLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define VFORK_USABLE 0
#endif
#endif
#ifndef VFORK_USABLE
#define VFORK_USABLE 1
#endif

/* What the child writes back over the report pipe: cf_run_report.h. */
enum { REPORT_SETUP = CF_REPORT_SETUP, REPORT_EXEC = CF_REPORT_EXEC, REPORT_STATUS = CF_REPORT_STATUS,
       REPORT_READY = CF_REPORT_READY };

/* Where the process's argv and environment strings live (fields 48-51 of
 * /proc/self/stat), read once in the parent; zero when unknown. */
struct cmdline_area {
    uintptr_t start, end;
    uintptr_t env_start, env_end;
};

static struct cmdline_area cmdline_area;
static pthread_once_t cmdline_once = PTHREAD_ONCE_INIT;

static void cmdline_area_read(void)
{
    unsigned long long v[52];
    if (cf_proc_self_stat(v, 52) >= 51 && v[49] > v[48] && v[51] > v[50]) {
        cmdline_area.start = (uintptr_t)v[48];
        cmdline_area.end = (uintptr_t)v[49];
        cmdline_area.env_start = (uintptr_t)v[50];
        cmdline_area.env_end = (uintptr_t)v[51];
    }
}

struct child_args {
    const cf_run_spec *spec;
    struct cmdline_area cmdline;
    int in_r, out_w, err_w, rep_w, bar_r, bar_w;
    bool barrier;  /* wait for the parent's go before anything else */
    bool prepared; /* cf_run_prepare: stop before the request's part, read it from bar_r */
    pid_t parent_pid;  /* the worker's getpid() */
    int parent_pidfd;  /* a pidfd of the worker, for a child in a new pid namespace (-1: none) */
};

/* The request's part of a run: from the spec (cf_run) or, for a prepared
 * child, from the go message (cf_run_start). */
struct run_go {
    const char *path;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    cf_run_rlimit rlimits[CF_RUN_MAX_RLIMITS];
    int n_rlimits;
    unsigned go_flags;
    int64_t go_arg;
};

/* The go message: this header, then NUL-terminated strings: path, cwd
 * ("" for none), argv[0..argc-1], envp[0..envc-1]; `total` bytes of them. */
#define GO_MAGIC 0x63666f67u
#define GO_MAX_BYTES (8u << 20)
#define GO_MAX_STRINGS 65536u
struct run_go_hdr {
    uint32_t magic;
    uint32_t total;
    uint32_t argc;
    uint32_t envc;
    int32_t n_rlimits;
    uint32_t go_flags;
    int64_t go_arg;
    struct {
        int64_t resource;
        uint64_t value;
    } rl[CF_RUN_MAX_RLIMITS];
};
/* Where a prepared child keeps the go pipe (close-on-exec). */
#define RUN_GO_FD 6
/* The worker's pidfd in a child in a new pid namespace: its init watches it
 * (cf_child_init_wait).  Close-on-exec: no program gets it. */
#define RUN_LIFELINE_FD 7

/* ---- child side: async-signal-safe calls only from here to execve ---- */

static void report(int fd, int kind, int e, int status, int64_t maxrss_kb, const char *msg)
{
    cf_run_report r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.err = e;
    r.status = status;
    r.maxrss_kb = maxrss_kb;
    r.cpu_us = -1;
    for (size_t i = 0; msg && msg[i] && i + 1 < sizeof(r.msg); i++)
        r.msg[i] = msg[i];
    ssize_t w;
    do
        w = write(fd, &r, sizeof(r));
    while (w < 0 && errno == EINTR);
}

static __attribute__((noreturn)) void child_fail(int fd, int e, const char *msg)
{
    report(fd, REPORT_SETUP, e, 0, 0, msg);
    _exit(127);
}

/* init is a copy of the worker that never execs, and the program can read
 * some of it: /proc/1/cmdline and comm by anyone, /proc/1/environ and
 * /proc/1/mem if init were dumpable (a change of its effective uid makes
 * it undumpable unless fs.suid_dumpable says otherwise, and with a
 * namespace created by the run uid its effective uid does not change at
 * all: made sure here).  Runs before the
 * program exists, so it never sees the worker's. */
static int scrub_worker_image(const struct cmdline_area *cmd)
{
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return -1;
    (void)prctl(PR_SET_NAME, "codefleet-init", 0, 0, 0);
    if (!cmd->start || cmd->end <= cmd->start || cmd->env_end <= cmd->env_start) {
        errno = ENODATA; /* where the command line lives is unknown: refuse rather than show it */
        return -1;
    }
    static const char name[] = "codefleet-init";
    char *p = (char *)cmd->start;
    size_t len = (size_t)(cmd->end - cmd->start);
    memset(p, 0, len);
    if (len > sizeof(name))
        memcpy(p, name, sizeof(name));
    memset((char *)cmd->env_start, 0, (size_t)(cmd->env_end - cmd->env_start));
    return 0;
}

/* Closes first..last (async-signal-safe; without close_range, the usual
 * descriptor numbers). */
static void close_range_or_loop(unsigned first, unsigned last)
{
    if (syscall(SYS_close_range, first, last, 0u) < 0)
        for (unsigned fd = first; fd <= last && fd < 65536; fd++)
            close((int)fd);
}

/* The init of a pid namespace (spec->init), in the spirit of tini and
 * bubblewrap's monitor: every signal stays blocked and is taken with
 * sigwaitinfo (a blocked signal is queued even for a namespace init, whose
 * default-action signals the kernel would otherwise drop); SIGCHLD reaps
 * every zombie, anything else is forwarded to the program.  When the
 * program ends, the rest of the namespace is killed, its wait status goes
 * to the report pipe and init exits with its exit code (128+signal when
 * signalled, for readers of the bare status).  Runs on the fds the runner
 * set up: stdio is closed so the program alone holds the output pipes. */
static __attribute__((noreturn)) void init_main(pid_t program, int rep, const sigset_t *all, int lifeline)
{
    /* Only the report pipe (fd 3) and the worker's pidfd stay: a copy of a
     * stdio pipe end here would keep the program's stdin or output from
     * ever reaching EOF. */
    for (int fd = 0; fd < 3; fd++)
        close(fd);
    unsigned keep = lifeline >= 0 ? (unsigned)lifeline : ~0u;
    close_range_or_loop(4u, lifeline >= 0 ? keep - 1 : ~0u);
    if (lifeline >= 0)
        close_range_or_loop(keep + 1, ~0u);
    /* The worker's death kills this init (its death signal, checked when
     * set); the lifeline covers the last microseconds of a worker whose
     * exit was under way as that check ran. */
    int status = cf_child_init_wait(program, all, lifeline, CF_LIFELINE_PIDFD);
    (void)kill(-1, SIGKILL); /* in a pid namespace: everyone but init */
    /* init's own rusage would be the worker's copy-on-write image: the
     * program's peak is that of init's children. */
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    (void)getrusage(RUSAGE_CHILDREN, &ru);
    report(rep, REPORT_STATUS, 0, status, ru.ru_maxrss, "init");
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

struct program_args {
    const cf_run_spec *spec;
    const struct run_go *go;
    int rep;
    struct rlimit nofile;
    int lifeline; /* RUN_LIFELINE_FD or -1 */
};

#define INIT_CHILD_STACK_BYTES (64 * 1024)

static __attribute__((noreturn)) void exec_program(const struct program_args *pa);

/* The program's side of spec->init: signals unblocked, then exec. */
static int program_under_init(void *arg)
{
    const struct program_args *pa = arg;
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        child_fail(pa->rep, errno, "sigprocmask");
    exec_program(pa);
}

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* A prepared child's wait for its request: the go message, decoded with
 * every length checked into memory of its own.  EOF before a header: the
 * sandbox was discarded, nobody waits for a report. */
static void go_receive(int fd, int rep, struct run_go *g)
{
    struct run_go_hdr h;
    if (read_full(fd, &h, sizeof(h)) < 0)
        _exit(127);
    if (h.magic != GO_MAGIC || h.total < 2 || h.total > GO_MAX_BYTES || h.argc == 0 || h.argc > GO_MAX_STRINGS ||
        h.envc > GO_MAX_STRINGS || h.n_rlimits < 0 || h.n_rlimits > CF_RUN_MAX_RLIMITS)
        child_fail(rep, EINVAL, "go message: bad header");
    size_t nptr = (size_t)h.argc + 1 + (size_t)h.envc + 1;
    size_t len = nptr * sizeof(char *) + (size_t)h.total + 1;
    char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        child_fail(rep, errno, "go message: memory");
    char **v = (char **)(void *)mem;
    char *s = mem + nptr * sizeof(char *);
    if (read_full(fd, s, h.total) < 0)
        child_fail(rep, EIO, "go message: short");
    s[h.total] = '\0';
    size_t want = 2 + (size_t)h.argc + (size_t)h.envc, off = 0;
    const char *path = NULL, *cwd = NULL;
    for (size_t i = 0; i < want; i++) {
        if (off >= h.total)
            child_fail(rep, EINVAL, "go message: too few strings");
        char *str = s + off;
        size_t l = strnlen(str, h.total - off);
        if (off + l >= h.total)
            child_fail(rep, EINVAL, "go message: unterminated string");
        if (i == 0)
            path = str;
        else if (i == 1)
            cwd = l ? str : NULL;
        else if (i < 2 + h.argc)
            v[i - 2] = str;
        else
            v[i - 1] = str; /* envp starts after argv's NULL */
        off += l + 1;
    }
    if (off != h.total || !path[0])
        child_fail(rep, EINVAL, "go message: bad strings");
    v[h.argc] = NULL;
    v[nptr - 1] = NULL;
    g->path = path;
    g->cwd = cwd;
    g->argv = v;
    g->envp = v + h.argc + 1;
    g->n_rlimits = h.n_rlimits;
    for (int i = 0; i < h.n_rlimits; i++)
        g->rlimits[i] = (cf_run_rlimit){(int)h.rl[i].resource, (rlim_t)h.rl[i].value};
    g->go_flags = h.go_flags;
    g->go_arg = h.go_arg;
}

static void apply_rlimits(const struct run_go *g, int rep)
{
    for (int i = 0; i < g->n_rlimits && i < CF_RUN_MAX_RLIMITS; i++) {
        const cf_run_rlimit *l = &g->rlimits[i];
        struct rlimit cur;
        if (getrlimit(l->resource, &cur) < 0)
            child_fail(rep, errno, "getrlimit");
        struct rlimit nl = {l->value, l->value};
        /* CPU: SIGXCPU at the soft limit, SIGKILL one second later. */
        if (l->resource == RLIMIT_CPU && l->value != RLIM_INFINITY)
            nl.rlim_max = l->value + 1;
        /* Never ask for more than the worker has: lower is stricter, and
         * raising would fail without CAP_SYS_RESOURCE. */
        if (cur.rlim_max != RLIM_INFINITY && (nl.rlim_max == RLIM_INFINITY || nl.rlim_max > cur.rlim_max))
            nl.rlim_max = cur.rlim_max;
        if (nl.rlim_cur == RLIM_INFINITY || nl.rlim_cur > nl.rlim_max)
            nl.rlim_cur = nl.rlim_max;
        if (setrlimit(l->resource, &nl) < 0)
            child_fail(rep, errno, "setrlimit");
    }
    struct rlimit nocore = {0, 0};
    if (setrlimit(RLIMIT_CORE, &nocore) < 0)
        child_fail(rep, errno, "setrlimit core");
}

/* Waits for the parent's go (parent_setup: uid maps, cgroups).  Our copy
 * of the write end goes first so a dead parent means EOF, not a hang. */
static void child_barrier(const struct child_args *a)
{
    close(a->bar_w);
    if (a->barrier) {
        char c;
        ssize_t r;
        do
            r = read(a->bar_r, &c, 1);
        while (r < 0 && errno == EINTR);
        if (r != 1)
            _exit(127);
    }
}

/* Signals are all blocked (the parent blocked them around clone); make
 * every disposition default before unblocking so no handler of the worker
 * runs here and no SIG_IGN (SIGPIPE!) leaks into the program. */
static void child_signals_default(const cf_run_spec *spec, int rep)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) {
        if (s == SIGKILL || s == SIGSTOP)
            continue;
        (void)sigaction(s, &sa, NULL); /* glibc-internal signals refuse: fine */
    }
    sigset_t none;
    sigemptyset(&none);
    /* With an init, signals stay blocked until the fork below: init takes
     * them with sigwaitinfo, the program unblocks them. */
    if (!spec->init && sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        child_fail(rep, errno, "sigprocmask");
}

/* Puts our pipe ends on their fixed numbers: stdio, the report pipe on 3,
 * the passed and program fds, the go pipe and the worker's pidfd.  Returns
 * the lifeline (RUN_LIFELINE_FD, or -1 when no pidfd was given); the
 * report pipe is fd 3 afterwards. */
static int child_place_fds(const struct child_args *a)
{
    const cf_run_spec *spec = a->spec;
    int rep = a->rep_w;
    /* Move them above the fixed slots first so dup2 onto them cannot
     * clobber one another (the worker's stdio might have been closed). */
    int src[8] = {a->in_r,         a->out_w,       a->err_w,
                  a->rep_w,        spec->pass_fd,  spec->exec_fd,
                  a->prepared ? a->bar_r : -1, a->parent_pidfd};
    int hi[8];
    for (int i = 0; i < 8; i++) {
        hi[i] = -1;
        if ((i >= 4 && i < 6 && src[i] <= 2) || (i >= 6 && src[i] < 0))
            continue; /* not given */
        hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, RUN_LIFELINE_FD + 1);
        if (hi[i] < 0)
            child_fail(rep, errno, "dup stdio");
    }
    rep = hi[3];
    for (int i = 0; i < 3; i++)
        if (dup2(hi[i], i) < 0)
            child_fail(rep, errno, "dup stdio");
    if (dup3(hi[3], 3, O_CLOEXEC) < 0)
        child_fail(rep, errno, "dup report pipe");
    rep = 3;
    if (hi[4] >= 0 && dup2(hi[4], CF_RUN_PASS_FD) < 0) /* dup2: not CLOEXEC, the program keeps it */
        child_fail(rep, errno, "dup passed fd");
    if (hi[5] >= 0 && dup3(hi[5], CF_RUN_EXEC_FD, O_CLOEXEC) < 0)
        child_fail(rep, errno, "dup program fd");
    if (hi[6] >= 0 && dup3(hi[6], RUN_GO_FD, O_CLOEXEC) < 0)
        child_fail(rep, errno, "dup go pipe");
    if (hi[7] < 0)
        return -1;
    if (dup3(hi[7], RUN_LIFELINE_FD, O_CLOEXEC) < 0)
        child_fail(rep, errno, "dup the worker's pidfd");
    return RUN_LIFELINE_FD;
}

/* spec's rlimits into g. */
static void go_rlimits_from_spec(const cf_run_spec *spec, struct run_go *g)
{
    g->n_rlimits = spec->n_rlimits;
    for (int i = 0; i < spec->n_rlimits && i < CF_RUN_MAX_RLIMITS; i++)
        g->rlimits[i] = spec->rlimits[i];
}

/* The run uid and gid, no supplementary groups.  Raw syscalls: glibc's
 * wrappers would try to broadcast to the worker's other threads, which do
 * not exist in this child. */
static void child_set_ids(const cf_run_spec *spec, int rep)
{
    if (syscall(SYS_setgroups, 0, NULL) < 0)
        child_fail(rep, errno, "setgroups");
    if (syscall(SYS_setresgid, spec->gid, spec->gid, spec->gid) < 0)
        child_fail(rep, errno, "setgid");
    if (syscall(SYS_setresuid, spec->uid, spec->uid, spec->uid) < 0)
        child_fail(rep, errno, "setuid");
}

/* Ties this child's life to the worker's: its death signal, then a check
 * that the worker is still there. */
static void child_tie_to_parent(const struct child_args *a, int rep, int lifeline)
{
    /* A worker that dies (SIGKILL, OOM kill) takes its executions with it:
     * the kernel kills this process (init: and so its whole pid namespace)
     * when the worker thread that started it exits.  Set after every
     * credential change (here and in child_setup), which would clear it;
     * exec keeps it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        child_fail(rep, errno, "prctl(PR_SET_PDEATHSIG)");
    /* A worker that died before that (between the clone and here: the
     * sandbox's mounts take milliseconds) never sends it: nobody would
     * stop this execution, and the request's next worker runs it again. */
    if (cf_child_parent_gone(a->parent_pid, lifeline))
        _exit(127);
}

/* A prepared child: says it is ready, then waits for its request's part
 * (the go message) into g. */
static void child_wait_go(int rep, struct run_go *g)
{
    /* Waiting, possibly for long: no descriptor of the worker stays
     * here (another execution's output pipe held open would delay its
     * end; the broker's and Redis's sockets are no business of ours). */
    close_range_or_loop(CF_RUN_PASS_FD, RUN_GO_FD - 1); /* never given to it */
    close_range_or_loop(RUN_LIFELINE_FD + 1, ~0u);
    report(rep, REPORT_READY, 0, 0, 0, "ready");
    go_receive(RUN_GO_FD, rep, g);
    close(RUN_GO_FD);
}

/* spec->init: starts the program as init's child, then becomes its init. */
static __attribute__((noreturn)) void child_become_init(struct program_args *pa, int rep, int lifeline)
{
    /* The program borrows init's memory until it execs (as on the
     * runner's vfork path): init is a copy of the large worker, and a
     * plain fork would copy all its page tables again, charged to the
     * execution's memory cgroup.  Sanitizer builds fork (see
     * VFORK_USABLE). */
    pid_t p;
    if (VFORK_USABLE) {
        void *stack = mmap(NULL, INIT_CHILD_STACK_BYTES, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
        if (stack == MAP_FAILED)
            child_fail(rep, errno, "stack for the program under init");
        p = clone(program_under_init, (char *)stack + INIT_CHILD_STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD,
                  pa);
        if (p < 0)
            child_fail(rep, errno, "starting the program under init");
        munmap(stack, INIT_CHILD_STACK_BYTES);
    } else {
        long r = syscall(SYS_clone, (unsigned long)SIGCHLD, 0L, 0L, 0L, 0L);
        if (r == 0)
            program_under_init(pa);
        if (r < 0)
            child_fail(rep, errno, "starting the program under init");
        p = (pid_t)r;
    }
    sigset_t all;
    sigfillset(&all);
    init_main(p, rep, &all, lifeline);
}

/* The child from clone to exec: each step's place matters (see the
 * comments); async-signal-safe calls only, no malloc, no stdio. */
static __attribute__((noreturn)) void child_main(const struct child_args *a)
{
    const cf_run_spec *spec = a->spec;
    int rep = a->rep_w;

    child_barrier(a);
    if (setsid() < 0)
        child_fail(rep, errno, "setsid");
    child_signals_default(spec, rep);

    /* The fd limit before our rlimits apply, for the close fallback. */
    struct rlimit nofile = {1024, 1024};
    (void)getrlimit(RLIMIT_NOFILE, &nofile);

    int lifeline = child_place_fds(a);
    rep = 3;

    /* With set_ids the limits come first, as they always did: the kernel
     * checks RLIMIT_NPROC at the uid change (a uid already over it cannot
     * exec).  Otherwise after child_setup (below), whose own writes (a
     * sandbox's root) the request's file size limit must not bound. */
    bool rlimits_first = spec->set_ids && !a->prepared;
    struct run_go go;
    if (rlimits_first) {
        go = (struct run_go){0};
        go_rlimits_from_spec(spec, &go);
        apply_rlimits(&go, rep);
    }
    if (spec->set_ids)
        child_set_ids(spec, rep);
    if (spec->child_setup) {
        const char *msg = "child_setup";
        if (spec->child_setup(spec->child_setup_arg, &msg) < 0)
            child_fail(rep, errno, msg);
    }
    child_tie_to_parent(a, rep, lifeline);

    if (spec->init && scrub_worker_image(&a->cmdline) < 0)
        child_fail(rep, errno, "init: scrubbing the worker's command line");

    if (a->prepared) {
        child_wait_go(rep, &go);
    } else {
        go = (struct run_go){.path = spec->path, .argv = spec->argv, .envp = spec->envp, .cwd = spec->cwd,
                             .go_flags = spec->go_flags, .go_arg = spec->go_arg};
        go_rlimits_from_spec(spec, &go);
    }
    if (!rlimits_first)
        apply_rlimits(&go, rep);
    if (spec->child_go) {
        const char *msg = "child_go";
        if (spec->child_go(spec->child_setup_arg, go.go_flags, go.go_arg, &msg) < 0)
            child_fail(rep, errno, msg);
    }

    struct program_args pa = {spec, &go, rep, nofile, lifeline};
    if (spec->init)
        child_become_init(&pa, rep, lifeline);
    exec_program(&pa);
}

/* The last steps before the program: cwd, fds, execve. */
static __attribute__((noreturn)) void exec_program(const struct program_args *pa)
{
    const cf_run_spec *spec = pa->spec;
    const struct run_go *go = pa->go;
    int rep = pa->rep;
    struct rlimit nofile = pa->nofile;
    if (go->cwd && chdir(go->cwd) < 0)
        child_fail(rep, errno, "chdir");

    /* Everything but stdio, the report pipe (CLOEXEC, closes at exec) and
     * the passed descriptor. */
    unsigned first = spec->exec_fd > 2 ? CF_RUN_EXEC_FD + 1 : spec->pass_fd > 2 ? CF_RUN_PASS_FD + 1 : CF_RUN_PASS_FD;
    if (syscall(SYS_close_range, first, ~0u, 0u) < 0) {
        rlim_t max = nofile.rlim_cur == RLIM_INFINITY || nofile.rlim_cur > 65536 ? 65536 : nofile.rlim_cur;
        for (rlim_t fd = first; fd < max; fd++)
            close((int)fd);
    }

    if (spec->exec_fd > 2)
        syscall(SYS_execveat, CF_RUN_EXEC_FD, "", go->argv, go->envp, AT_EMPTY_PATH);
    else
        execve(go->path, go->argv, go->envp);
    report(rep, REPORT_EXEC, errno, 0, 0, "execve");
    _exit(127);
}

/* ---- parent side ---- */

/* clone's entry point of spawn_vfork's child. */
static int vfork_child(void *arg)
{
    child_main(arg);
}

#define VFORK_STACK_BYTES (256 * 1024)

/* The fast path when nothing has to happen between clone and the child's
 * own setup (no parent_setup, no namespaces): the child borrows our address
 * space until it execs (CLONE_VM|CLONE_VFORK, as posix_spawn does), so no
 * page tables of the large, multi-threaded worker are copied.  That was
 * about 1 ms of kernel time per execution.  The child runs on its own
 * stack and only makes async-signal-safe calls; this thread waits. */
static pid_t spawn_vfork(struct child_args *a, int *pidfd)
{
    void *stack = mmap(NULL, VFORK_STACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (stack == MAP_FAILED)
        return -1;
    a->barrier = false;
    int fd = -1;
    pid_t pid = clone(vfork_child, (char *)stack + VFORK_STACK_BYTES,
                      CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, a, &fd);
    int e = errno;
    munmap(stack, VFORK_STACK_BYTES);
    if (pid < 0) {
        a->barrier = true;
        errno = e;
        return -1;
    }
    *pidfd = fd;
    return pid;
}

/* The calling thread's effective uid becomes uid (its real and saved uids
 * stay root) for the clone that creates a user namespace, so that the
 * namespace is uid's (spec->userns_owner).  Only the effective uid: with
 * the real uid root, no process of uid may signal the thread during the
 * window, and the namespace's process limit stays unlimited (the kernel
 * takes the creator's RLIMIT_NPROC unless its real uid is root).  Raw syscalls: glibc's setresuid would
 * change every thread of the worker.  The kernel clears the effective
 * capabilities on the way from euid 0; they are raised again from the
 * permitted set (clone3 into a cgroup needs write access to its
 * ancestor, hosts may limit user namespaces to CAP_SYS_ADMIN).  A change
 * of euid also makes the process undumpable (fs.suid_dumpable): what it
 * was is put back after. */
static int dumpable_at_start = -1;
static pthread_once_t dumpable_once = PTHREAD_ONCE_INIT;
/* Threads inside the window: dumpable is put back only when the last one
 * leaves (before, another thread still runs as a run uid, and a dumpable
 * process would hand that uid its /proc/<pid>/task/<tid> files). */
static pthread_mutex_t owner_mu = PTHREAD_MUTEX_INITIALIZER;
static int owners_inside;

static void dumpable_read(void)
{
    dumpable_at_start = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
}

static int owner_enter(uid_t uid)
{
    pthread_once(&dumpable_once, dumpable_read);
    pthread_mutex_lock(&owner_mu);
    owners_inside++;
    pthread_mutex_unlock(&owner_mu);
    if (syscall(SYS_setresuid, -1L, (long)uid, -1L) < 0)
        return -1;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) < 0)
        return -1;
    data[0].effective = data[0].permitted;
    data[1].effective = data[1].permitted;
    return (int)syscall(SYS_capset, &hdr, data);
}

/* Also after a failed owner_enter: whatever it changed goes back. */
static void owner_leave(void)
{
    /* Back to root: the effective set is the permitted one again.  The
     * kernel may fail it for want of memory (a new uid's accounting):
     * retried, and a worker thread left running as a program's uid must
     * not go on. */
    int tries = 0;
    while (syscall(SYS_setresuid, -1L, 0L, -1L) < 0) {
        if (++tries >= 100)
            abort();
        usleep(1000);
    }
    pthread_mutex_lock(&owner_mu);
    if (--owners_inside == 0 && dumpable_at_start >= 0)
        (void)prctl(PR_SET_DUMPABLE, dumpable_at_start, 0, 0, 0);
    pthread_mutex_unlock(&owner_mu);
}

/* clone3 gives the pidfd atomically with the child; fork + pidfd_open is
 * the fallback for kernels without clone3 (no namespaces then). */
static pid_t spawn(struct child_args *a, int *pidfd)
{
    *pidfd = -1;
    if (VFORK_USABLE && !a->prepared && !a->spec->parent_setup && !a->spec->clone_flags && !a->spec->init) {
        pid_t pid = spawn_vfork(a, pidfd);
        if (pid > 0 || (errno != EINVAL && errno != ENOSYS))
            return pid;
    }
#ifdef SYS_clone3
    struct run_clone_args ca;
    memset(&ca, 0, sizeof(ca));
    ca.flags = CLONE_PIDFD | (uint64_t)(unsigned)a->spec->clone_flags;
    ca.pidfd = (uint64_t)(uintptr_t)pidfd;
    /* SIGCHLD: execve resets the exit signal to SIGCHLD anyway, so the
     * worker must not ignore SIGCHLD (SIG_IGN/SA_NOCLDWAIT auto-reap and
     * wait4 would fail with ECHILD); it never needs a handler for it. */
    ca.exit_signal = SIGCHLD;
    size_t size = RUN_CLONE_ARGS_VER0;
    bool into = a->spec->cgroup_fd > 0 && !atomic_load(&into_cgroup_refused);
    if (into) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)a->spec->cgroup_fd;
        size = RUN_CLONE_ARGS_VER2;
    }
    bool as_owner = (a->spec->clone_flags & CLONE_NEWUSER) && a->spec->userns_owner > 0;
    if (as_owner && owner_enter(a->spec->userns_owner) < 0) {
        int e = errno;
        owner_leave();
        errno = e;
        return -1;
    }
    long r = syscall(SYS_clone3, &ca, size);
    if (r < 0 && into && (errno == E2BIG || errno == EINVAL || errno == EBADF || errno == EOPNOTSUPP)) {
        /* Not this kernel, or not this cgroup: the parent attaches. */
        atomic_store(&into_cgroup_refused, true);
        into = false;
        ca.flags &= ~(uint64_t)CLONE_INTO_CGROUP;
        ca.cgroup = 0;
        r = syscall(SYS_clone3, &ca, RUN_CLONE_ARGS_VER0);
    }
    if (r == 0)
        child_main(a);
    if (as_owner) {
        int e = errno;
        owner_leave();
        errno = e;
    }
    if (r > 0) {
        if (a->spec->cgroup_joined)
            *a->spec->cgroup_joined = into;
        return (pid_t)r;
    }
    if (errno != ENOSYS)
        return -1;
#endif
    if (a->spec->clone_flags) {
        errno = ENOSYS;
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0)
        child_main(a);
    if (pid < 0)
        return -1;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        errno = e;
        return -1;
    }
    *pidfd = fd;
    return pid;
}

static void kill_everything(const cf_run_spec *spec, pid_t pid)
{
    if (spec->kill_all)
        spec->kill_all(pid, spec->kill_all_arg);
    else
        kill(-pid, SIGKILL); /* the child leads its own process group */
}

/* Reads what is available; keeps up to cap bytes, discards the rest. */
static void read_capped(int *fd, cf_buf *b, size_t cap, bool *truncated)
{
    char chunk[IO_CHUNK];
    /* A bounded number of reads per wake-up keeps the other pipe served. */
    for (int i = 0; i < 16 && *fd >= 0; i++) {
        ssize_t r = read(*fd, chunk, sizeof(chunk));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                cf_fd_close(fd);
            return;
        }
        if (r == 0) {
            cf_fd_close(fd);
            return;
        }
        size_t room = b->len < cap ? cap - b->len : 0;
        size_t keep = (size_t)r < room ? (size_t)r : room;
        if (keep < (size_t)r)
            *truncated = true;
        if (keep && cf_buf_append(b, chunk, keep, NULL) < 0)
            *truncated = true; /* out of memory: drop, never fail the run for it */
    }
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void cf_run_outcome_describe(const cf_run_outcome *o, char *buf, size_t cap)
{
    char tail[160] = "";
    if (o->err.len) {
        size_t from = o->err.len > 150 ? o->err.len - 150 : 0;
        cf_sanitize_text((const char *)o->err.data + from, o->err.len - from, false, tail, sizeof(tail));
    }
    if (o->signal)
        snprintf(buf, cap, "killed by signal %d%s%s", o->signal, tail[0] ? ": " : "", tail);
    else
        snprintf(buf, cap, "exited %d%s%s", o->exit_code, tail[0] ? ": " : "", tail);
}

void cf_run_outcome_free(cf_run_outcome *out)
{
    if (!out)
        return;
    cf_buf_free(&out->out);
    cf_buf_free(&out->err);
}

/* The parent's side of one child: its pid and our ends of its pipes. */
struct cf_run_prep {
    pid_t pid;
    int pidfd;
    /* Not our child (cf_run_adopt): its end is seen through pidfd only,
     * signals go through pidfd, and the status comes from the report. */
    bool adopted;
    int in_w, out_r, err_r, rep_r, bar_w;
    /* kill_all and its argument, fixed when the child was made */
    void (*kill_all)(pid_t pid, void *arg);
    void *kill_all_arg;
};

/* SIGKILL to the main process: through its pidfd when it is not our
 * child (its pid could be reused once its parent reaps it). */
static void kill_main(const struct cf_run_prep *c)
{
    if (c->adopted) {
        if (c->pidfd >= 0)
            (void)syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL, 0);
    } else if (c->pid > 0) {
        kill(c->pid, SIGKILL);
    }
}

static void child_close(struct cf_run_prep *c)
{
    cf_fd_close(&c->in_w);
    cf_fd_close(&c->out_r);
    cf_fd_close(&c->err_r);
    cf_fd_close(&c->rep_r);
    cf_fd_close(&c->bar_w);
    cf_fd_close(&c->pidfd);
}

static void child_kill_reap(struct cf_run_prep *c)
{
    if (c->pid <= 0)
        return;
    if (c->kill_all)
        c->kill_all(c->pid, c->kill_all_arg);
    kill(c->pid, SIGKILL);
    pid_t wr;
    do
        wr = waitpid(c->pid, NULL, __WALL);
    while (wr < 0 && errno == EINTR);
    c->pid = -1;
}

/* SIGPIPE blocked while we write to a child (a reader gone is EPIPE, not
 * our death); a SIGPIPE raised meanwhile is swallowed when restoring. */
struct sigpipe_guard {
    sigset_t old_mask;
    bool was_pending;
};

static void sigpipe_block(struct sigpipe_guard *g)
{
    sigset_t pipe_only, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &g->old_mask);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE) == 1;
}

static void sigpipe_restore(const struct sigpipe_guard *g)
{
    if (!g->was_pending) {
        sigset_t p;
        sigpending(&p);
        if (sigismember(&p, SIGPIPE) == 1) {
            sigset_t only;
            sigemptyset(&only);
            sigaddset(&only, SIGPIPE);
            struct timespec zero = {0, 0};
            while (sigtimedwait(&only, NULL, &zero) < 0 && errno == EINTR)
                ;
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL);
}

static int spec_check(const cf_run_spec *spec, cf_error *err)
{
    /* init kills every process it can see when the program ends: only
     * ever inside a pid namespace of its own. */
    if (spec->init && !(spec->clone_flags & CLONE_NEWPID))
        return cf_error_set(err, CF_E_INVALID, "runner: init needs a new pid namespace");
    if (spec->n_rlimits < 0 || spec->n_rlimits > CF_RUN_MAX_RLIMITS)
        return cf_error_set(err, CF_E_INVALID, "runner: too many rlimits");
    return 0;
}

/* Makes the child up to its start barrier, runs parent_setup and releases
 * it.  Called with SIGPIPE blocked.  On failure nothing is left. */
static int child_start(const cf_run_spec *spec, bool prepared, struct cf_run_prep *c, int *pass_fd, cf_error *err)
{
    *c = (struct cf_run_prep){.pid = -1, .pidfd = -1, .in_w = -1, .out_r = -1, .err_r = -1, .rep_r = -1,
                              .bar_w = -1, .kill_all = spec->kill_all, .kill_all_arg = spec->kill_all_arg};
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, rep_p[2] = {-1, -1}, bar_p[2] = {-1, -1};
    int rc = -1;
    if (pipe2(in_p, O_CLOEXEC) < 0 || pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0 ||
        pipe2(rep_p, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(bar_p, O_CLOEXEC) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: pipe2");
        goto done;
    }
    if (spec->set_ids || spec->stdio_owner_set) {
        uid_t u = spec->set_ids ? spec->uid : spec->stdio_uid;
        gid_t g = spec->set_ids ? spec->gid : spec->stdio_gid;
        /* A pipe's two ends share one inode: the program's end is enough. */
        if (fchown(in_p[0], u, g) < 0 || fchown(out_p[1], u, g) < 0 || fchown(err_p[1], u, g) < 0) {
            cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: giving the stdio pipes to uid %u",
                               (unsigned)u);
            goto done;
        }
    }

    /* All signals blocked across clone: the child must not run a worker
     * handler before it has reset them. */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    struct child_args ca = {.spec = spec, .in_r = in_p[0], .out_w = out_p[1], .err_w = err_p[1], .rep_w = rep_p[1],
                            .bar_r = bar_p[0], .bar_w = bar_p[1], .barrier = true, .prepared = prepared,
                            .parent_pid = getpid(), .parent_pidfd = -1};
    /* A child in a new pid namespace sees its parent as pid 0: it checks
     * the worker's liveness through a pidfd of the worker instead. */
    if (spec->clone_flags & CLONE_NEWPID) {
        ca.parent_pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
        if (ca.parent_pidfd < 0) {
            cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: pidfd_open of the worker");
            pthread_sigmask(SIG_SETMASK, &before, NULL);
            goto done;
        }
    }
    if (spec->init) {
        pthread_once(&cmdline_once, cmdline_area_read);
        ca.cmdline = cmdline_area;
    }
    c->pid = spawn(&ca, &c->pidfd);
    int spawn_errno = errno;
    if (ca.parent_pidfd >= 0)
        close(ca.parent_pidfd); /* the child has its copy */
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    cf_fd_close(pass_fd); /* the child has its copy (or there is no child) */
    if (c->pid < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, spawn_errno, "runner: clone");
        if (err)
            err->retriable = true;
        goto done;
    }
    c->in_w = in_p[1];
    c->out_r = out_p[0];
    c->err_r = err_p[0];
    c->rep_r = rep_p[0];
    c->bar_w = bar_p[1];
    in_p[1] = out_p[0] = err_p[0] = rep_p[0] = bar_p[1] = -1;

    if (spec->parent_setup && spec->parent_setup(c->pid, spec->parent_setup_arg, err) < 0) {
        cf_error_wrap(err, "runner: parent setup");
        goto fail;
    }
    if (ca.barrier) {
        ssize_t w;
        do
            w = write(c->bar_w, "g", 1);
        while (w < 0 && errno == EINTR);
        if (w != 1) {
            cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: releasing the child");
            goto fail;
        }
    }
    if (!prepared)
        cf_fd_close(&c->bar_w);
    if (set_nonblock(c->in_w) < 0 || set_nonblock(c->out_r) < 0 || set_nonblock(c->err_r) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: fcntl");
        goto fail;
    }
    rc = 0;
    goto done;
fail:
    cf_fd_close(&c->bar_w); /* a child still at the barrier sees EOF and exits */
    child_kill_reap(c);
    child_close(c);
done:
    cf_fd_close(&in_p[0]);
    cf_fd_close(&in_p[1]);
    cf_fd_close(&out_p[0]);
    cf_fd_close(&out_p[1]);
    cf_fd_close(&err_p[0]);
    cf_fd_close(&err_p[1]);
    cf_fd_close(&rep_p[0]);
    cf_fd_close(&rep_p[1]);
    cf_fd_close(&bar_p[0]);
    cf_fd_close(&bar_p[1]);
    return rc;
}

/* supervise's view of a released child: its limits, where its stdin is,
 * and how it ended. */
struct run_watch {
    struct cf_run_prep *c;
    const cf_run_spec *spec;
    cf_run_spec kspec; /* kill_all and its argument only: for kill_everything */
    pid_t pid;
    size_t in_off;     /* stdin bytes written */
    bool child_done, killed, reaped, cpu_watch;
    int64_t deadline, next_cpu, exit_at, drain_deadline, out_wake;
    int status;
    struct rusage ru;
};

/* Where each descriptor sits in a poll set (-1: not in it). */
struct run_watch_fds {
    int pid, in, out, err;
};

/* Kills the run when it is cancelled, out of time or (polled every
 * CF_RUN_CPU_POLL_US) over its CPU limit, and says which. */
static void watch_limits(struct run_watch *w, cf_run_outcome *out, int64_t now)
{
    const cf_run_spec *spec = w->spec;
    bool cancel = spec->cancel && __atomic_load_n(spec->cancel, __ATOMIC_RELAXED);
    if (cancel || now >= w->deadline) {
        kill_everything(&w->kspec, w->pid);
        kill_main(w->c); /* in case a custom kill_all missed it */
        w->killed = true;
        if (cancel)
            out->cancelled = true;
        else
            out->timed_out = true;
    } else if (now >= w->next_cpu) {
        int64_t used = spec->cpu_usage_us(w->pid, spec->cpu_usage_arg);
        w->next_cpu = now + CF_RUN_CPU_POLL_US;
        if (used > spec->cpu_limit_us) {
            kill_everything(&w->kspec, w->pid);
            kill_main(w->c);
            w->killed = true;
            out->cpu_exceeded = true;
        }
    }
}

/* The poll set: the pidfd until the main process ended, and the pipes
 * still open.  Returns its size. */
static int watch_pollfds(const struct run_watch *w, struct pollfd pfd[4], struct run_watch_fds *ix)
{
    const struct cf_run_prep *c = w->c;
    int n = 0;
    *ix = (struct run_watch_fds){-1, -1, -1, -1};
    if (!w->child_done) {
        ix->pid = n;
        pfd[n++] = (struct pollfd){.fd = c->pidfd, .events = POLLIN};
    }
    if (c->in_w >= 0) {
        ix->in = n;
        pfd[n++] = (struct pollfd){.fd = c->in_w, .events = POLLOUT};
    }
    if (c->out_r >= 0) {
        ix->out = n;
        pfd[n++] = (struct pollfd){.fd = c->out_r, .events = POLLIN};
    }
    if (c->err_r >= 0) {
        ix->err = n;
        pfd[n++] = (struct pollfd){.fd = c->err_r, .events = POLLIN};
    }
    return n;
}

/* How long poll may wait: until the next deadline, CPU check, cancel
 * check, output callback or the end of the drain (at most a minute). */
static int watch_timeout_ms(const struct run_watch *w, int64_t now)
{
    int64_t wake = INT64_MAX;
    if (w->child_done)
        wake = w->drain_deadline;
    else if (!w->killed) {
        wake = w->deadline < w->next_cpu ? w->deadline : w->next_cpu;
        if (w->spec->cancel && now + CANCEL_POLL_US < wake)
            wake = now + CANCEL_POLL_US;
    }
    if (w->out_wake < wake)
        wake = w->out_wake;
    int timeout_ms = -1;
    if (wake != INT64_MAX) {
        int64_t ms = (wake - now + 999) / 1000;
        timeout_ms = ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
    }
    return timeout_ms;
}

/* Reads what stdout and stderr have (within their caps) and tells
 * on_output when something came. */
static void watch_read_output(struct run_watch *w, const struct pollfd *pfd, const struct run_watch_fds *ix,
                              cf_run_outcome *out)
{
    const cf_run_spec *spec = w->spec;
    size_t had_out = out->out.len, had_err = out->err.len;
    if (ix->out >= 0 && pfd[ix->out].revents)
        read_capped(&w->c->out_r, &out->out, spec->max_stdout, &out->out_truncated);
    if (ix->err >= 0 && pfd[ix->err].revents)
        read_capped(&w->c->err_r, &out->err, spec->max_stderr, &out->err_truncated);
    if (spec->on_output && (out->out.len != had_out || out->err.len != had_err))
        w->out_wake = spec->on_output(spec->on_output_arg, &out->out, &out->err, false, cf_mono_us());
}

/* Writes the next chunk of stdin; closes it at its end or when the
 * program stopped reading. */
static void watch_feed_stdin(struct run_watch *w, short revents)
{
    struct cf_run_prep *c = w->c;
    const cf_run_spec *spec = w->spec;
    if (revents & (POLLERR | POLLHUP)) {
        cf_fd_close(&c->in_w);
        return;
    }
    size_t left = spec->stdin_len - w->in_off;
    ssize_t wr = write(c->in_w, spec->stdin_data + w->in_off, left < IO_CHUNK ? left : IO_CHUNK);
    if (wr > 0) {
        w->in_off += (size_t)wr;
        if (w->in_off == spec->stdin_len)
            cf_fd_close(&c->in_w); /* EOF for the program */
    } else if (wr < 0 && errno != EAGAIN && errno != EINTR) {
        cf_fd_close(&c->in_w); /* EPIPE: the program stopped reading */
    }
}

/* The main process ended: kills what is left of the run, reaps it (not
 * an adopted one: its parent does) and starts the output drain. */
static int watch_reap(struct run_watch *w, cf_run_outcome *out, cf_error *err)
{
    const cf_run_spec *spec = w->spec;
    /* The main process is a zombie: its pid (our process group id)
     * cannot be reused yet, so killing the group is still safe. */
    kill_everything(&w->kspec, w->pid);
    if (w->c->adopted) {
        /* Its parent reaps it; the program's status is in the report. */
        w->status = W_EXITCODE(0, SIGKILL);
    } else {
        pid_t wr;
        do
            wr = wait4(w->pid, &w->status, __WALL, &w->ru);
        while (wr < 0 && errno == EINTR);
        if (wr != w->pid)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: wait4%s",
                                      errno == ECHILD ? " (is SIGCHLD ignored in the worker?)" : "");
    }
    w->reaped = true;
    w->child_done = true;
    w->exit_at = cf_mono_us();
    /* What was used between the last poll and the end counts too
     * (the count of a cgroup survives its processes). */
    if (w->cpu_watch && !w->killed && spec->cpu_usage_us(w->pid, spec->cpu_usage_arg) > spec->cpu_limit_us)
        out->cpu_exceeded = true;
    w->drain_deadline = w->exit_at + DRAIN_AFTER_EXIT_US;
    cf_fd_close(&w->c->in_w);
    return 0;
}

/* Feeds, drains and watches the child until it ended and its output is
 * drained (or the drain's time is up).  -1: poll or wait4 failed. */
static int watch_loop(struct run_watch *w, cf_run_outcome *out, cf_error *err)
{
    const cf_run_spec *spec = w->spec;
    struct cf_run_prep *c = w->c;
    for (;;) {
        int64_t now = cf_mono_us();
        if (!w->child_done && !w->killed)
            watch_limits(w, out, now);
        if (spec->on_output && now >= w->out_wake)
            w->out_wake = spec->on_output(spec->on_output_arg, &out->out, &out->err, false, now);
        if (w->child_done && (now >= w->drain_deadline || (c->out_r < 0 && c->err_r < 0)))
            return 0;

        struct pollfd pfd[4];
        struct run_watch_fds ix;
        int n = watch_pollfds(w, pfd, &ix);
        int pr = poll(pfd, (nfds_t)n, watch_timeout_ms(w, now));
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: poll");
        }
        watch_read_output(w, pfd, &ix, out);
        if (ix.in >= 0 && pfd[ix.in].revents)
            watch_feed_stdin(w, pfd[ix.in].revents);
        if (ix.pid >= 0 && (pfd[ix.pid].revents & POLLIN) && watch_reap(w, out, err) < 0)
            return -1;
    }
}

/* The outcome as the main process's wait status and rusage tell it. */
static void outcome_from_wait(const struct run_watch *w, int64_t start, cf_run_outcome *out)
{
    const struct rusage *ru = &w->ru;
    out->wall_us = w->exit_at - start;
    out->cpu_us = (int64_t)ru->ru_utime.tv_sec * 1000000 + ru->ru_utime.tv_usec +
                  (int64_t)ru->ru_stime.tv_sec * 1000000 + ru->ru_stime.tv_usec;
    out->peak_rss_bytes = (int64_t)ru->ru_maxrss * 1024;
    if (WIFEXITED(w->status)) {
        out->exited = true;
        out->exit_code = WEXITSTATUS(w->status);
    } else if (WIFSIGNALED(w->status)) {
        out->signal = WTERMSIG(w->status);
    }
}

/* What the child reported: a failure before exec, a failed execve, or
 * (init) the program's own status.  Each was written before its writer
 * exited, so it is all there now.  -1: the child's setup failed. */
static int read_reports(int rep_r, const cf_run_spec *spec, cf_run_outcome *out, cf_error *err)
{
    for (int nrep = 0; nrep < 4; nrep++) {
        cf_run_report rep;
        ssize_t rr;
        do
            rr = read(rep_r, &rep, sizeof(rep));
        while (rr < 0 && errno == EINTR);
        if (rr != (ssize_t)sizeof(rep))
            break;
        rep.msg[sizeof(rep.msg) - 1] = '\0';
        if (rep.kind == REPORT_EXEC) {
            out->exec_failed = true;
            out->exec_errno = rep.err;
            out->exited = true;
            out->exit_code = 127;
            out->signal = 0;
        } else if (rep.kind == REPORT_STATUS) {
            if (out->exec_failed)
                continue;
            out->exited = WIFEXITED(rep.status);
            out->exit_code = out->exited ? WEXITSTATUS(rep.status) : 0;
            out->signal = WIFSIGNALED(rep.status) ? WTERMSIG(rep.status) : 0;
            out->peak_rss_bytes = rep.maxrss_kb * 1024;
            if (rep.cpu_us >= 0)
                out->cpu_us = rep.cpu_us;
        } else if (rep.kind == REPORT_READY) {
            continue;
        } else {
            cf_error_set_errno(err, CF_E_SANDBOX, rep.err, "runner: child setup failed before exec (%s of %s)",
                               rep.msg, spec->path);
            if (err)
                err->retriable = false;
            return -1;
        }
    }
    return 0;
}

/* Feeds, drains and waits for a released child to the end; always reaps
 * it and closes c's descriptors.  Called with SIGPIPE blocked. */
static int supervise(struct cf_run_prep *c, const cf_run_spec *spec, int64_t start, cf_run_outcome *out,
                     cf_error *err)
{
    struct run_watch w = {.c = c, .spec = spec, .kspec = {.kill_all = c->kill_all, .kill_all_arg = c->kill_all_arg},
                          .pid = c->pid};
    if (spec->stdin_len == 0 || !spec->stdin_data)
        cf_fd_close(&c->in_w);
    w.deadline = spec->timeout_us > 0 ? start + spec->timeout_us : INT64_MAX;
    w.cpu_watch = spec->cpu_usage_us && spec->cpu_limit_us > 0;
    w.next_cpu = w.cpu_watch ? start + CF_RUN_CPU_POLL_US : INT64_MAX;
    w.out_wake = INT64_MAX;

    int rc = -1;
    if (watch_loop(&w, out, err) < 0) {
        kill_everything(&w.kspec, w.pid);
    } else {
        if (spec->on_output)
            spec->on_output(spec->on_output_arg, &out->out, &out->err, true, cf_mono_us());
        outcome_from_wait(&w, start, out);
        rc = read_reports(c->rep_r, spec, out, err);
    }
    if (!w.reaped && c->adopted) {
        kill_main(c); /* its parent reaps it */
    } else if (!w.reaped) {
        /* Never leave a process behind. */
        kill(w.pid, SIGKILL);
        pid_t wr;
        do
            wr = waitpid(w.pid, NULL, __WALL);
        while (wr < 0 && errno == EINTR);
    }
    c->pid = -1;
    child_close(c);
    return rc;
}

static void outcome_init(cf_run_outcome *out)
{
    memset(out, 0, sizeof(*out));
    cf_buf_init(&out->out, 0);
    cf_buf_init(&out->err, 0);
}

int cf_run(const cf_run_spec *spec, cf_run_outcome *out, cf_error *err)
{
    outcome_init(out);
    int pass_fd = spec && spec->pass_fd > 2 ? spec->pass_fd : -1; /* ours to close, whatever happens */
    if (!spec || !spec->path || !spec->argv || !spec->argv[0]) {
        cf_fd_close(&pass_fd);
        return cf_error_set(err, CF_E_INVALID, "runner: no program given");
    }
    if (spec_check(spec, err) < 0) {
        cf_fd_close(&pass_fd);
        return -1;
    }
    struct sigpipe_guard guard;
    sigpipe_block(&guard);
    struct cf_run_prep c;
    int rc = -1;
    if (child_start(spec, false, &c, &pass_fd, err) == 0)
        rc = supervise(&c, spec, cf_mono_us(), out, err);
    sigpipe_restore(&guard);
    cf_fd_close(&pass_fd);
    return rc;
}

int cf_run_adopt_pipes(const cf_run_spec *spec, int child_fds[4], cf_run_adoptee *a, cf_error *err)
{
    int p[4][2] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    for (int i = 0; i < 4; i++)
        child_fds[i] = -1;
    *a = (cf_run_adoptee){.pid = -1, .pidfd = -1, .in_w = -1, .out_r = -1, .err_r = -1, .rep_r = -1};
    for (int i = 0; i < 4; i++) {
        if (pipe2(p[i], O_CLOEXEC) < 0) {
            cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: pipe2");
            goto fail;
        }
    }
    /* The program's ends (stdin's read end, the others' write ends) are
     * given to its uid, as cf_run does. */
    if (spec && (spec->set_ids || spec->stdio_owner_set)) {
        uid_t u = spec->set_ids ? spec->uid : spec->stdio_uid;
        gid_t g = spec->set_ids ? spec->gid : spec->stdio_gid;
        if (fchown(p[0][0], u, g) < 0 || fchown(p[1][1], u, g) < 0 || fchown(p[2][1], u, g) < 0) {
            cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: giving the stdio pipes to uid %u", (unsigned)u);
            goto fail;
        }
    }
    if (set_nonblock(p[0][1]) < 0 || set_nonblock(p[1][0]) < 0 || set_nonblock(p[2][0]) < 0 ||
        set_nonblock(p[3][0]) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "runner: fcntl");
        goto fail;
    }
    child_fds[0] = p[0][0];
    child_fds[1] = p[1][1];
    child_fds[2] = p[2][1];
    child_fds[3] = p[3][1];
    a->in_w = p[0][1];
    a->out_r = p[1][0];
    a->err_r = p[2][0];
    a->rep_r = p[3][0];
    return 0;
fail:
    for (int i = 0; i < 4; i++) {
        cf_fd_close(&p[i][0]);
        cf_fd_close(&p[i][1]);
    }
    return -1;
}

void cf_run_adoptee_close(cf_run_adoptee *a)
{
    if (!a)
        return;
    cf_fd_close(&a->pidfd);
    cf_fd_close(&a->in_w);
    cf_fd_close(&a->out_r);
    cf_fd_close(&a->err_r);
    cf_fd_close(&a->rep_r);
    a->pid = -1;
}

int cf_run_adopt(cf_run_adoptee *a, const cf_run_spec *spec, cf_run_outcome *out, cf_error *err)
{
    outcome_init(out);
    struct cf_run_prep c = {.pid = a->pid, .pidfd = a->pidfd, .adopted = true, .in_w = a->in_w,
                            .out_r = a->out_r, .err_r = a->err_r, .rep_r = a->rep_r, .bar_w = -1,
                            .kill_all = spec ? spec->kill_all : NULL,
                            .kill_all_arg = spec ? spec->kill_all_arg : NULL};
    *a = (cf_run_adoptee){.pid = -1, .pidfd = -1, .in_w = -1, .out_r = -1, .err_r = -1, .rep_r = -1};
    /* The pid may be unknown (-1): everything goes through the pidfd. */
    if (!spec || !spec->kill_all || c.pidfd < 0 || c.out_r < 0 || c.err_r < 0 || c.rep_r < 0) {
        /* Without a kill_all the process's own tree could not be ended. */
        kill_main(&c);
        child_close(&c);
        return cf_error_set(err, CF_E_INVALID, "runner: cannot adopt (no kill_all hook or descriptors missing)");
    }
    struct sigpipe_guard guard;
    sigpipe_block(&guard);
    int rc = supervise(&c, spec, cf_mono_us(), out, err);
    sigpipe_restore(&guard);
    return rc;
}

/* How long a prepared child may take to report that it is ready. */
#define PREPARE_READY_MS 10000

int cf_run_prepare(const cf_run_spec *spec, cf_run_prep **prep, cf_error *err)
{
    *prep = NULL;
    if (!spec)
        return cf_error_set(err, CF_E_INVALID, "runner: no spec");
    if (spec->pass_fd > 2 || spec->exec_fd > 2)
        return cf_error_set(err, CF_E_INVALID, "runner: a prepared child takes no passed or program descriptor");
    if (spec_check(spec, err) < 0)
        return -1;
    struct cf_run_prep *c = malloc(sizeof(*c));
    if (!c)
        return cf_error_set(err, CF_E_NOMEM, "runner: out of memory");
    struct sigpipe_guard guard;
    sigpipe_block(&guard);
    int none = -1;
    int rc = child_start(spec, true, c, &none, err);
    if (rc == 0) {
        /* Ready, or a setup failure (report, then exit), or a death. */
        cf_run_report rep;
        memset(&rep, 0, sizeof(rep));
        bool ready = false, got = false;
        int64_t until = cf_mono_us() + PREPARE_READY_MS * 1000LL;
        for (;;) {
            ssize_t rr = read(c->rep_r, &rep, sizeof(rep));
            if (rr == (ssize_t)sizeof(rep)) {
                got = true;
                ready = rep.kind == REPORT_READY;
                break;
            }
            if (rr == 0 || (rr < 0 && errno != EAGAIN && errno != EINTR))
                break;
            int64_t left = until - cf_mono_us();
            if (left <= 0)
                break;
            struct pollfd pfd[2] = {{.fd = c->rep_r, .events = POLLIN}, {.fd = c->pidfd, .events = POLLIN}};
            if (poll(pfd, 2, (int)((left + 999) / 1000)) < 0 && errno != EINTR)
                break;
            if ((pfd[1].revents & POLLIN) && !(pfd[0].revents & POLLIN)) {
                /* dead: one last look for its report */
                rr = read(c->rep_r, &rep, sizeof(rep));
                got = rr == (ssize_t)sizeof(rep);
                break;
            }
        }
        if (!ready) {
            rep.msg[sizeof(rep.msg) - 1] = '\0';
            if (got)
                cf_error_set_errno(err, CF_E_SANDBOX, rep.err, "runner: child setup failed (%s)", rep.msg);
            else
                cf_error_set(err, CF_E_SANDBOX, "runner: the prepared child did not become ready");
            child_kill_reap(c);
            child_close(c);
            rc = -1;
        }
    }
    sigpipe_restore(&guard);
    if (rc < 0) {
        free(c);
        return -1;
    }
    *prep = c;
    return 0;
}

/* The go message for spec's request part (malloc'd; *len its size). */
static char *go_encode(const cf_run_spec *spec, size_t *len, cf_error *err)
{
    size_t argc = 0, envc = 0, total = strlen(spec->path) + 1 + (spec->cwd ? strlen(spec->cwd) : 0) + 1;
    for (; spec->argv[argc]; argc++)
        total += strlen(spec->argv[argc]) + 1;
    for (; spec->envp && spec->envp[envc]; envc++)
        total += strlen(spec->envp[envc]) + 1;
    if (total > GO_MAX_BYTES || argc > GO_MAX_STRINGS || envc > GO_MAX_STRINGS) {
        cf_error_set(err, CF_E_LIMIT, "runner: argv and environment too large (%zu bytes)", total);
        return NULL;
    }
    struct run_go_hdr h;
    memset(&h, 0, sizeof(h));
    h.magic = GO_MAGIC;
    h.total = (uint32_t)total;
    h.argc = (uint32_t)argc;
    h.envc = (uint32_t)envc;
    h.n_rlimits = spec->n_rlimits;
    h.go_flags = spec->go_flags;
    h.go_arg = spec->go_arg;
    for (int i = 0; i < spec->n_rlimits; i++) {
        h.rl[i].resource = spec->rlimits[i].resource;
        h.rl[i].value = (uint64_t)spec->rlimits[i].value;
    }
    char *buf = malloc(sizeof(h) + total);
    if (!buf) {
        cf_error_set(err, CF_E_NOMEM, "runner: out of memory");
        return NULL;
    }
    memcpy(buf, &h, sizeof(h));
    char *p = buf + sizeof(h);
    p = cf_put_str(p, spec->path);
    p = cf_put_str(p, spec->cwd ? spec->cwd : "");
    for (size_t i = 0; i < argc; i++)
        p = cf_put_str(p, spec->argv[i]);
    for (size_t i = 0; i < envc; i++)
        p = cf_put_str(p, spec->envp[i]);
    *len = sizeof(h) + total;
    return buf;
}

int cf_run_start(cf_run_prep *prep, const cf_run_spec *spec, cf_run_outcome *out, cf_error *err)
{
    outcome_init(out);
    if (!prep)
        return cf_error_set(err, CF_E_INVALID, "runner: nothing prepared");
    if (!spec || !spec->path || !spec->path[0] || !spec->argv || !spec->argv[0] || spec->n_rlimits < 0 ||
        spec->n_rlimits > CF_RUN_MAX_RLIMITS || spec->pass_fd > 2 || spec->exec_fd > 2) {
        cf_run_prep_destroy(prep);
        return cf_error_set(err, CF_E_INVALID, "runner: bad spec for a prepared child");
    }
    size_t len = 0;
    char *msg = go_encode(spec, &len, err);
    if (!msg) {
        cf_run_prep_destroy(prep);
        return -1;
    }
    struct sigpipe_guard guard;
    sigpipe_block(&guard);
    int64_t start = cf_mono_us();
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(prep->bar_w, msg + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    int saved = errno;
    free(msg);
    cf_fd_close(&prep->bar_w);
    int rc;
    if (off != len) {
        cf_error_set_errno(err, CF_E_SANDBOX, saved, "runner: handing the request to the prepared child");
        if (err)
            err->retriable = true;
        child_kill_reap(prep);
        child_close(prep);
        rc = -1;
    } else {
        rc = supervise(prep, spec, start, out, err);
    }
    sigpipe_restore(&guard);
    free(prep);
    return rc;
}

pid_t cf_run_prep_pid(const cf_run_prep *prep)
{
    return prep ? prep->pid : -1;
}

bool cf_run_prep_alive(const cf_run_prep *prep)
{
    if (!prep || prep->pidfd < 0)
        return false;
    struct pollfd pfd = {.fd = prep->pidfd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 0;
}

void cf_run_prep_destroy(cf_run_prep *prep)
{
    if (!prep)
        return;
    cf_fd_close(&prep->bar_w);
    child_kill_reap(prep);
    child_close(prep);
    free(prep);
}
