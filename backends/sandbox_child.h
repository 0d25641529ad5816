/* sandbox_child: the async-signal-safe steps a sandboxed child takes on
 * its own, shared by the sandbox's children (sandbox_exec.c, sandbox_fs.c)
 * and by codefleet-zygote's execution inits (zygote/zygote_main.c), which
 * is a program of its own linking none of the worker's libraries: hence
 * header-only.  Plain syscalls, no malloc, no stdio. */
#ifndef CF_SANDBOX_CHILD_H
#define CF_SANDBOX_CHILD_H

#include <errno.h>
#include <linux/capability.h>
#include <net/if.h>
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

/* The wait of a pid namespace's init (every signal blocked, taken with
 * sigwaitinfo, as tini and bubblewrap's monitor do): SIGCHLD reaps every
 * zombie, any other signal is forwarded to the program.  Returns the
 * program's wait status once it ended; the caller kills the rest of the
 * namespace and reports. */
static inline int cf_child_init_wait(pid_t program, const sigset_t *all)
{
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(all, &si);
        if (sig < 0)
            continue; /* EINTR */
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
