/* sandbox_child: the async-signal-safe steps a sandboxed child takes on
 * its own, shared by the sandbox's children (isolation/sandbox_exec.c, sandbox_fs.c)
 * and by codefleet-zygote's execution inits (sandbox/zygote_main.c), which
 * is a program of its own linking none of the worker's libraries: hence
 * header-only.  Plain syscalls, no malloc, no stdio. */
#ifndef CF_SANDBOX_CHILD_H
#define CF_SANDBOX_CHILD_H

#include <errno.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Brings loopback up in a new, empty network namespace: programs that
 * talk to themselves over 127.0.0.1 work; nothing else is reachable. */
static inline int cf_child_loopback_up(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* Empties the bounding, ambient, effective, permitted and inheritable
 * capability sets: the bounding set first (needs CAP_SETPCAP, still
 * held), so no exec can ever regain a capability; then ambient, then the
 * rest. */
static inline int cf_child_drop_caps(void)
{
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return -1;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -1;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    return (int)syscall(SYS_capset, &hdr, data);
}

/* What a lifeline descriptor is: how its holder learns that the process
 * it serves is gone. */
typedef enum cf_child_lifeline {
    CF_LIFELINE_PIDFD,       /* a pidfd of that process: readable once it exited */
    CF_LIFELINE_PIPE_WRITER, /* the write end of a pipe it reads: an error once no reader is left */
} cf_child_lifeline;

/* Whether the lifeline says its process is gone (no verdict: false). */
static inline bool cf_child_lifeline_cut(int fd, cf_child_lifeline kind)
{
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = kind == CF_LIFELINE_PIDFD ? POLLIN : POLLOUT};
    if (poll(&p, 1, 0) <= 0 || (p.revents & POLLNVAL))
        return false;
    return kind == CF_LIFELINE_PIDFD ? (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0 : (p.revents & POLLERR) != 0;
}

/* Whether the process that started this one is gone.  Called right after
 * PR_SET_PDEATHSIG: a parent that died before the death signal was set
 * never sends it, and the child would run its program with nobody to
 * stop it, beside the run its request gets from the next worker (issue
 * 28).  parent_pid: the parent's getpid(), for a child in the parent's pid
 * namespace (reparented, getppid() tells another pid).  In a new pid
 * namespace getppid() is 0: then parent_pidfd (a pidfd of the parent
 * process, -1: none) decides.  Either check comes after the signal was
 * set, so a parent that dies later does send it. */
static inline bool cf_child_parent_gone(pid_t parent_pid, int parent_pidfd)
{
    pid_t pp = getppid();
    if (pp != 0 && parent_pid > 0)
        return pp != parent_pid;
    return cf_child_lifeline_cut(parent_pidfd, CF_LIFELINE_PIDFD);
}

/* How often an init with a lifeline looks at it. */
#define CF_CHILD_LIFELINE_LOOK_NS (100 * 1000 * 1000L)

/* The wait of a pid namespace's init (every signal blocked, taken with
 * sigwaitinfo, as tini and bubblewrap's monitor do): SIGCHLD reaps every
 * zombie, any other signal is forwarded to the program.  Returns the
 * program's wait status once it ended; the caller kills the rest of the
 * namespace and reports.  With a lifeline (>= 0) the init also looks at it
 * every 100 ms and, once its supervisor is gone, kills the program and
 * returns as if it had been killed: whatever slipped past the death
 * signal's setting ends within that time. */
static inline int cf_child_init_wait(pid_t program, const sigset_t *all, int lifeline, cf_child_lifeline kind)
{
    for (;;) {
        siginfo_t si;
        int sig;
        if (lifeline >= 0) {
            struct timespec look = {0, CF_CHILD_LIFELINE_LOOK_NS};
            sig = sigtimedwait(all, &si, &look);
            if (cf_child_lifeline_cut(lifeline, kind)) {
                (void)kill(program, SIGKILL);
                return SIGKILL; /* a wait status: killed by SIGKILL */
            }
        } else {
            sig = sigwaitinfo(all, &si);
        }
        if (sig < 0)
            continue; /* EINTR, or the lifeline's look */
        if (sig != SIGCHLD) {
            (void)kill(program, sig);
            continue;
        }
        bool done = false;
        int status = 0;
        for (;;) {
            int st;
            pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
            if (p <= 0)
                break;
            if (p == program) {
                status = st;
                done = true;
            }
        }
        if (done)
            return status;
    }
}

#endif
