/* codefleet-container-init: pid 1 of every container of the container
 * backend, bound read-only into it at /run/codefleet-init.  A static
 * program (the image may have no libc, or another one).
 *
 * Usage: codefleet-container-init [--cpu SECONDS] [--fsize BYTES] [--msgqueue BYTES]
 *                                 [--userns [--ucount NAME=N]...] [--seccomp] -- PROGRAM [ARGS...]
 *        codefleet-container-init --version
 *
 * The program's RLIMIT_CPU (hard = soft + 1 s) and RLIMIT_FSIZE are set
 * here, not in config.json: the runtime applies those to itself before it
 * has written its state, and a small file size limit broke it.
 *
 * Like the runner's init of the sandbox: every signal blocked and taken
 * with sigwaitinfo; SIGCHLD reaps every zombie; any other signal goes to
 * the program; when the program ends, the rest of the namespace is killed.
 * What tini cannot do: report the program's own wait status.  The runtime
 * hands the worker's report pipe in as fd 4 (crun --preserve-fds=2); the
 * init writes one line there:
 *     "exited N\n" | "signaled N\n" | "exec-failed ERRNO\n"
 * and exits with N, or 128+N, as tini would.  The program never holds the
 * pipe (close-on-exec) and cannot reach it through /proc/1/fd: the init
 * is not dumpable.  Every other descriptor above stderr (fd 3 is the
 * runtime's own log file, which --preserve-fds passes along) is closed
 * before the program starts.  Only async-signal-safe calls after the
 * fork.
 *
 * --userns: first of all, a user namespace nested in the container's, in
 * which the init's own uid and gid map onto themselves ("1000 1000 1"):
 * the container's namespace maps uid 1000 onto the slot's host run uid,
 * and a program reading its own /proc/self/uid_map would see that host
 * uid; one level down it reads in container terms only (the sandbox's
 * programs see no host uid either).  setgroups is denied there (the
 * kernel wants that for an unprivileged gid map; the program had no
 * supplementary groups to change anyway).  The capabilities the new
 * namespace grants go at once, the bounding set included.
 * --ucount NAME=N (with --userns; repeated): the nested namespace's own
 * per-user limit /proc/sys/user/NAME, written while the init still holds
 * that namespace's capabilities.  What the program makes (inotify
 * instances and watches, ...) is counted at every level up to the host,
 * where the container's namespace, made by the runtime as root, charges
 * root; the nested limit keeps one execution to its share of root's (a
 * limit this kernel does not have is skipped).
 * --seccomp: the sandbox's seccomp filter, given as the base64 of its BPF
 * in CODEFLEET_INIT_SECCOMP (never passed on to the program), loaded next.
 * The runtime used to load it, but then the init could not create the
 * nested namespace (the filter refuses every CLONE_NEW*); loaded here it
 * still comes before anything the init does with the program or its
 * pipes, and the program inherits it as before.  A step that fails is
 * reported as "setup-failed-userns ERRNO\n" or "setup-failed-seccomp
 * ERRNO\n" (the container's fault, not the program's) and nothing runs. */
#include "cf_child.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define REPORT_FD 4
#define SECCOMP_ENV "CODEFLEET_INIT_SECCOMP"
#define BPF_MAX_INSNS 4096 /* the kernel's BPF_MAXINSNS */

static void report(const char *what, int n)
{
    char line[48];
    int len = snprintf(line, sizeof(line), "%s %d\n", what, n);
    if (len > 0)
        (void)!write(REPORT_FD, line, (size_t)len);
}

/* Writes text into the file at path in one write (a /proc file takes one
 * write as one value); -1 with errno. */
static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    int e = errno;
    close(fd);
    if (n != (ssize_t)len) {
        errno = n < 0 ? e : EIO;
        return -1;
    }
    return 0;
}

static int write_self(const char *file, const char *text)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/%s", file);
    return write_text(path, text);
}

#define MAX_UCOUNTS 8
static const char *ucounts[MAX_UCOUNTS]; /* "NAME=N" of --ucount */
static int n_ucounts;
static bool ucount_failed;

/* "NAME=N": NAME of [a-z_] only (a file of /proc/sys/user), N digits. */
static bool ucount_valid(const char *s)
{
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || eq - s > 40 || !eq[1] || strlen(eq + 1) > 19)
        return false;
    for (const char *p = s; p < eq; p++)
        if (!((*p >= 'a' && *p <= 'z') || *p == '_'))
            return false;
    for (const char *p = eq + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* Writes each --ucount into this (the nested) namespace's limits. */
static int set_ucounts(void)
{
    for (int i = 0; i < n_ucounts; i++) {
        const char *eq = strchr(ucounts[i], '=');
        char path[80];
        snprintf(path, sizeof(path), "/proc/sys/user/%.*s", (int)(eq - ucounts[i]), ucounts[i]);
        if (write_text(path, eq + 1) < 0 && errno != ENOENT) /* ENOENT: not a limit this kernel has */
            return -1;
    }
    return 0;
}

/* The nested user namespace of --userns, its maps, its limits (--ucount),
 * and no capabilities in it (nor a bounding set that execve could draw
 * on). */
static int nest_userns(void)
{
    unsigned uid = (unsigned)getuid(), gid = (unsigned)getgid();
    char map[48];
    if (unshare(CLONE_NEWUSER) < 0 || write_self("setgroups", "deny") < 0)
        return -1;
    snprintf(map, sizeof(map), "%u %u 1\n", uid, uid);
    if (write_self("uid_map", map) < 0)
        return -1;
    snprintf(map, sizeof(map), "%u %u 1\n", gid, gid);
    if (write_self("gid_map", map) < 0)
        return -1;
    if (set_ucounts() < 0) {
        ucount_failed = true;
        return -1;
    }
    return cf_child_drop_caps();
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* The filter of --seccomp, from SECCOMP_ENV (removed from the
 * environment), loaded with no_new_privs. */
static int load_seccomp(void)
{
    static struct sock_filter insns[BPF_MAX_INSNS];
    const char *b64 = getenv(SECCOMP_ENV);
    if (!b64 || !*b64) {
        errno = ENOENT;
        return -1;
    }
    unsigned char *out = (unsigned char *)insns;
    size_t cap = sizeof(insns), n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (const char *p = b64; *p && *p != '='; p++) {
        int v = b64_value((unsigned char)*p);
        if (v < 0 || n == cap) {
            errno = EINVAL;
            return -1;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    unsetenv(SECCOMP_ENV);
    if (n == 0 || n % sizeof(struct sock_filter)) {
        errno = EINVAL;
        return -1;
    }
    struct sock_fprog prog = {.len = (unsigned short)(n / sizeof(struct sock_filter)), .filter = insns};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        static const char v[] = "codefleet-container-init 2\n";
        (void)!write(1, v, sizeof(v) - 1);
        return 0;
    }
    long long cpu = 0, fsize = -1, msgqueue = -1;
    bool userns = false, seccomp = false;
    int a = 1;
    while (a + 1 < argc && argv[a][0] == '-' && argv[a][1] == '-' && argv[a][2]) {
        char *end;
        if (strcmp(argv[a], "--userns") == 0 || strcmp(argv[a], "--seccomp") == 0) {
            *(argv[a][2] == 'u' ? &userns : &seccomp) = true;
            a++;
            continue;
        }
        if (strcmp(argv[a], "--ucount") == 0) {
            if (n_ucounts == MAX_UCOUNTS || !ucount_valid(argv[a + 1]))
                return 125;
            ucounts[n_ucounts++] = argv[a + 1];
            a += 2;
            continue;
        }
        if (strcmp(argv[a], "--cpu") == 0)
            cpu = strtoll(argv[a + 1], &end, 10);
        else if (strcmp(argv[a], "--fsize") == 0)
            fsize = strtoll(argv[a + 1], &end, 10);
        else if (strcmp(argv[a], "--msgqueue") == 0)
            msgqueue = strtoll(argv[a + 1], &end, 10);
        else
            break;
        if (*end)
            return 125;
        a += 2;
    }
    if (a + 1 >= argc || strcmp(argv[a], "--") != 0) {
        static const char u[] = "usage: codefleet-container-init [--cpu S] [--fsize B] [--msgqueue B] [--userns [--ucount NAME=N]...] "
                                "[--seccomp] -- PROGRAM [ARGS...]\n";
        (void)!write(2, u, sizeof(u) - 1);
        return 125;
    }
    char **prog = argv + a + 1;
    /* No report pipe (run by hand): report nowhere. */
    bool have_report = fcntl(REPORT_FD, F_GETFD) >= 0;
    if (have_report)
        (void)fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC);
    /* The program's RLIMIT_MSGQUEUE first: a user namespace records its
     * creator's as the cap at the level above, so the nested one made next
     * holds this execution alone to it, while the container's namespace
     * (the runtime's) keeps the worker's (--msgqueue in the usage above). */
    if (msgqueue >= 0) {
        struct rlimit mq = {.rlim_cur = (rlim_t)msgqueue, .rlim_max = (rlim_t)msgqueue};
        if (setrlimit(RLIMIT_MSGQUEUE, &mq) < 0) {
            if (have_report)
                report("setup-failed-ucounts", errno);
            return 125;
        }
    }
    /* In this order: the filter refuses the namespace.  Still dumpable
     * here, or /proc/self/uid_map would not be ours to write. */
    const char *failed = userns && nest_userns() < 0   ? (ucount_failed ? "ucounts" : "userns")
                         : seccomp && load_seccomp() < 0 ? "seccomp"
                                                         : NULL;
    if (failed) {
        int e = errno;
        /* Which step: the worker runs without the nested namespace where a
         * host forbids it, never without the filter. */
        if (have_report) {
            char what[32];
            snprintf(what, sizeof(what), "setup-failed-%s", failed);
            report(what, e > 0 ? e : EIO);
        }
        static const char m[] = "codefleet-container-init: cannot confine the program (nested user namespace "
                                "or seccomp filter)\n";
        (void)!write(2, m, sizeof(m) - 1);
        return 125;
    }
    /* Dies with the runtime, which dies with the worker: an execution
     * never outlives its supervisor (the kernel then kills the namespace). */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    /* The death signal above is the runtime's, set after the runtime had
     * started us: a worker (and so a runtime) gone by then sends nothing.
     * The report pipe's reader is the worker: without one, nobody
     * supervises this execution and its request runs again elsewhere. */
    if (have_report && cf_child_lifeline_cut(REPORT_FD, CF_LIFELINE_PIPE_WRITER))
        return 125;
    (void)close(3);
    if (syscall(SYS_close_range, (unsigned)REPORT_FD + 1, ~0u, 0u) < 0)
        for (int fd = REPORT_FD + 1; fd < 4096; fd++)
            (void)close(fd);
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t program = fork();
    if (program < 0) {
        if (have_report)
            report("exec-failed", errno);
        return 126;
    }
    if (program == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        (void)prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
        struct rlimit rl;
        if (cpu > 0) {
            rl.rlim_cur = (rlim_t)cpu;
            rl.rlim_max = (rlim_t)cpu + 1;
            if (setrlimit(RLIMIT_CPU, &rl) < 0)
                _exit(126);
        }
        if (fsize >= 0) {
            rl.rlim_cur = rl.rlim_max = (rlim_t)fsize;
            if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
                _exit(126);
        }
        /* A path, never a PATH search or a shell fallback (execvp runs a
         * file without #! as a shell script): as in the sandbox. */
        execve(prog[0], prog, environ);
        int e = errno;
        if (have_report)
            report("exec-failed", e);
        static const char m[] = "codefleet-container-init: cannot execute the program\n";
        (void)!write(2, m, sizeof(m) - 1);
        _exit(e == ENOENT ? 127 : 126);
    }
    /* And while it runs: a worker gone ends it within 100 ms, whatever
     * slipped between the check above and the runtime's death. */
    int status = cf_child_init_wait(program, &all, have_report ? REPORT_FD : -1, CF_LIFELINE_PIPE_WRITER);
    /* Everyone else of the namespace; only as its pid 1: run by hand on a
     * host (as root, or in a user namespace mapping root), kill(-1) would
     * reach every process of that uid on the host. */
    if (getpid() == 1)
        (void)kill(-1, SIGKILL);
    if (have_report) {
        if (WIFEXITED(status))
            report("exited", WEXITSTATUS(status));
        else
            report("signaled", WTERMSIG(status));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
