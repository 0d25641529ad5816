/* codefleet-container-init: pid 1 of every container of the container
 * backend, bound read-only into it at /run/codefleet-init.  A static
 * program (the image may have no libc, or another one).
 *
 * Usage: codefleet-container-init [--cpu SECONDS] [--fsize BYTES] -- PROGRAM [ARGS...]
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
 * fork. */
#include "cf_child.h"

#include <errno.h>
#include <fcntl.h>
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

static void report(const char *what, int n)
{
    char line[48];
    int len = snprintf(line, sizeof(line), "%s %d\n", what, n);
    if (len > 0)
        (void)!write(REPORT_FD, line, (size_t)len);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        static const char v[] = "codefleet-container-init 1\n";
        (void)!write(1, v, sizeof(v) - 1);
        return 0;
    }
    /* Dies with the runtime, which dies with the worker: an execution
     * never outlives its supervisor (the kernel then kills the namespace). */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    long long cpu = 0, fsize = -1;
    int a = 1;
    while (a + 1 < argc && argv[a][0] == '-' && argv[a][1] == '-' && argv[a][2]) {
        char *end;
        if (strcmp(argv[a], "--cpu") == 0)
            cpu = strtoll(argv[a + 1], &end, 10);
        else if (strcmp(argv[a], "--fsize") == 0)
            fsize = strtoll(argv[a + 1], &end, 10);
        else
            break;
        if (*end)
            return 125;
        a += 2;
    }
    if (a + 1 >= argc || strcmp(argv[a], "--") != 0) {
        static const char u[] = "usage: codefleet-container-init [--cpu S] [--fsize B] -- PROGRAM [ARGS...]\n";
        (void)!write(2, u, sizeof(u) - 1);
        return 125;
    }
    char **prog = argv + a + 1;
    /* No report pipe (run by hand): report nowhere. */
    bool have_report = fcntl(REPORT_FD, F_GETFD) >= 0;
    if (have_report)
        (void)fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC);
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
    (void)kill(-1, SIGKILL); /* everyone else of the namespace */
    if (have_report) {
        if (WIFEXITED(status))
            report("exited", WEXITSTATUS(status));
        else
            report("signaled", WTERMSIG(status));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
