/* codefleet-container-init: pid 1 of every container of the container
 * backend, bound read-only into it at /run/codefleet-init.  A static
 * program (the image may have no libc, or another one).
 *
 * Usage: codefleet-container-init -- PROGRAM [ARGS...]
 *        codefleet-container-init --version
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
#include "sandbox_child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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
    if (argc < 3 || strcmp(argv[1], "--") != 0) {
        static const char u[] = "usage: codefleet-container-init -- PROGRAM [ARGS...]\n";
        (void)!write(2, u, sizeof(u) - 1);
        return 125;
    }
    /* No report pipe (run by hand): report nowhere. */
    bool have_report = fcntl(REPORT_FD, F_GETFD) >= 0;
    if (have_report)
        (void)fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC);
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
        execvp(argv[2], argv + 2);
        int e = errno;
        if (have_report)
            report("exec-failed", e);
        static const char m[] = "codefleet-container-init: cannot execute the program\n";
        (void)!write(2, m, sizeof(m) - 1);
        _exit(e == ENOENT ? 127 : 126);
    }
    int status = cf_child_init_wait(program, &all);
    (void)kill(-1, SIGKILL); /* everyone else of the namespace */
    if (have_report) {
        if (WIFEXITED(status))
            report("exited", WEXITSTATUS(status));
        else
            report("signaled", WTERMSIG(status));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
