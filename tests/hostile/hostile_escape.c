/* hostile: escape syscalls, foreign ABIs, terminal injection, setuid,
 * signals to processes outside.
 *
 * Each escape call runs in its own child so one SIGSYS kill does not hide
 * the others, and so whatever a call changes (namespaces, personality,
 * keyrings) dies with that child.  The calls are chosen to be harmless
 * even when they succeed on a host (which is what the "without the
 * sandbox" run shows): a mount goes on a fresh empty directory and is
 * undone at once, setns joins the namespace the caller is already in,
 * reboot is called with a bad magic number. */
#include "hostile.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* A child that blocks until killed: a target for ptrace and friends. */
static pid_t sleeper(void)
{
    pid_t p = fork();
    if (p == 0) {
        for (;;)
            pause();
    }
    return p;
}

static void reap(pid_t p)
{
    if (p > 0) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
    }
}

static long try_ptrace_attach(void)
{
    pid_t t = sleeper();
    long rc = ptrace(PTRACE_ATTACH, t, NULL, NULL);
    reap(t);
    return rc;
}

static long try_ptrace_traceme(void)
{
    return ptrace(PTRACE_TRACEME, 0, NULL, NULL);
}

static long try_process_vm_readv(void)
{
    static int secret = 42;
    pid_t t = sleeper();
    int got = 0;
    struct iovec local = {&got, sizeof(got)}, remote = {&secret, sizeof(secret)};
    long rc = process_vm_readv(t, &local, 1, &remote, 1, 0);
    reap(t);
    return rc < 0 ? -1 : 0;
}

static long try_mount(void)
{
    char dir[] = "hostile-mnt-XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    long rc = mount("hostile", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k");
    int saved = errno;
    if (rc == 0)
        umount2(dir, MNT_DETACH);
    rmdir(dir);
    errno = saved;
    return rc;
}

static long try_unshare_user(void) { return unshare(CLONE_NEWUSER); }
static long try_unshare_mount(void) { return unshare(CLONE_NEWNS); }
static long try_unshare_net(void) { return unshare(CLONE_NEWNET); }

static long try_setns(void)
{
    int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    return setns(fd, CLONE_NEWNS);
}

static long try_clone_newuser(void)
{
    long p = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
    if (p == 0)
        _exit(0);
    if (p > 0)
        waitpid((pid_t)p, NULL, 0);
    return p < 0 ? -1 : 0;
}

static long try_clone3_newuser(void)
{
    struct clone_args ca;
    memset(&ca, 0, sizeof(ca));
    ca.flags = CLONE_NEWUSER;
    ca.exit_signal = SIGCHLD;
    long p = syscall(SYS_clone3, &ca, sizeof(ca));
    if (p == 0)
        _exit(0);
    if (p > 0)
        waitpid((pid_t)p, NULL, 0);
    return p < 0 ? -1 : 0;
}

static long try_chroot(void) { return chroot("."); }

static long try_keyctl(void)
{
    /* A fresh anonymous session keyring for this child only. */
    long rc = syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL);
    return rc < 0 ? -1 : 0;
}

static long try_add_key(void)
{
    long rc = syscall(SYS_add_key, "user", "hostile", "x", 1, KEY_SPEC_PROCESS_KEYRING);
    return rc < 0 ? -1 : 0;
}

static long try_bpf(void)
{
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.map_type = BPF_MAP_TYPE_ARRAY;
    a.key_size = 4;
    a.value_size = 4;
    a.max_entries = 1;
    long fd = syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof(a));
    return fd < 0 ? -1 : 0;
}

static long try_userfaultfd(void)
{
    long fd = syscall(SYS_userfaultfd, O_CLOEXEC);
    return fd < 0 ? -1 : 0;
}

static long try_io_uring(void)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    long fd = syscall(SYS_io_uring_setup, 4, &p);
    return fd < 0 ? -1 : 0;
}

static long try_perf_event_open(void)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof(a));
    a.size = sizeof(a);
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.disabled = 1;
    long fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    return fd < 0 ? -1 : 0;
}

static long try_open_by_handle(void)
{
    struct {
        struct file_handle fh;
        unsigned char buf[128];
    } h;
    h.fh.handle_bytes = sizeof(h.buf);
    int mount_id = 0;
    if (syscall(SYS_name_to_handle_at, AT_FDCWD, ".", &h.fh, &mount_id, 0) < 0)
        return -1;
    int mfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    long fd = syscall(SYS_open_by_handle_at, mfd, &h.fh, O_RDONLY);
    return fd < 0 ? -1 : 0;
}

static long try_personality(void)
{
    int rc = personality(PER_LINUX | ADDR_NO_RANDOMIZE);
    return rc < 0 ? -1 : 0;
}

static long try_packet_socket(void)
{
    int fd = socket(AF_PACKET, SOCK_RAW, 0);
    return fd < 0 ? -1 : 0;
}

static long try_netlink_uevent(void)
{
    int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT);
    return fd < 0 ? -1 : 0;
}

/* Calls the sandbox kills the process for.  On a host as root they are
 * made harmless by their arguments (bad magic, no module image, level 0). */
static long try_reboot(void) { return syscall(SYS_reboot, 0, 0, 0, NULL); }
static long try_init_module(void) { return syscall(SYS_init_module, NULL, 0, ""); }
static long try_iopl(void) { return syscall(SYS_iopl, 0); }

/* getpid through the i386 entry point: eax=20. */
static long int80_getpid(void)
{
    long ret = 20;
    __asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
    return ret;
}

/* getpid (39) with the x32 bit. */
static long x32_getpid(void)
{
    long ret = 0x40000000L | 39;
    __asm__ volatile("syscall" : "+a"(ret) : : "rcx", "r11", "memory");
    return ret;
}

static long try_int80(void)
{
    long r = int80_getpid();
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

static long try_x32(void)
{
    long r = x32_getpid();
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

static const struct {
    const char *name;
    long (*fn)(void);
} calls[] = {
    {"ptrace_attach", try_ptrace_attach},
    {"ptrace_traceme", try_ptrace_traceme},
    {"process_vm_readv", try_process_vm_readv},
    {"mount", try_mount},
    {"unshare_user", try_unshare_user},
    {"unshare_mount", try_unshare_mount},
    {"unshare_net", try_unshare_net},
    {"setns", try_setns},
    {"clone_newuser", try_clone_newuser},
    {"clone3_newuser", try_clone3_newuser},
    {"chroot", try_chroot},
    {"keyctl", try_keyctl},
    {"add_key", try_add_key},
    {"bpf", try_bpf},
    {"userfaultfd", try_userfaultfd},
    {"io_uring_setup", try_io_uring},
    {"perf_event_open", try_perf_event_open},
    {"open_by_handle_at", try_open_by_handle},
    {"personality", try_personality},
    {"socket_packet", try_packet_socket},
    {"socket_netlink_uevent", try_netlink_uevent},
    {"reboot", try_reboot},
    {"init_module", try_init_module},
    {"iopl", try_iopl},
    {"int80", try_int80},
    {"x32", try_x32},
};

/* Prints "name: ok", "name: EPERM" or "name: killed SIGSYS" per call. */
int h_escape(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        if (only && strcmp(only, calls[i].name) != 0)
            continue;
        int pfd[2];
        if (pipe(pfd) < 0) {
            say("%s: harness-error %s\n", calls[i].name, ename(errno));
            continue;
        }
        pid_t p = fork();
        if (p < 0) {
            say("%s: harness-error fork %s\n", calls[i].name, ename(errno));
            close(pfd[0]);
            close(pfd[1]);
            continue;
        }
        if (p == 0) {
            close(pfd[0]);
            errno = 0;
            long rc = calls[i].fn();
            int e = rc < 0 ? errno : 0;
            (void)!write(pfd[1], &e, sizeof(e));
            _exit(0);
        }
        close(pfd[1]);
        int e = -1;
        ssize_t n = read(pfd[0], &e, sizeof(e));
        close(pfd[0]);
        int st = 0;
        waitpid(p, &st, 0);
        if (WIFSIGNALED(st) && n != (ssize_t)sizeof(e))
            say("%s: killed SIG%s\n", calls[i].name, sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
        else if (n != (ssize_t)sizeof(e))
            say("%s: harness-error no answer\n", calls[i].name);
        else if (e == 0)
            say("%s: ok\n", calls[i].name);
        else
            say("%s: %s\n", calls[i].name, ename(e));
    }
    say("escape: finished\n");
    return 0;
}

/* The foreign-ABI calls straight from the main process: the sandbox must
 * kill the process (the execution ends with SIGSYS). */
int h_int80(int argc, char **argv)
{
    say("int80: trying\n");
    long r = int80_getpid();
    say("int80: returned %ld (pid %ld)\n", r, (long)getpid());
    return 0;
}

int h_x32(int argc, char **argv)
{
    say("x32: trying\n");
    long r = x32_getpid();
    say("x32: returned %ld\n", r);
    return 0;
}

static void sti(const char *what, int fd)
{
    char c = '#';
    if (ioctl(fd, TIOCSTI, &c) == 0)
        say("%s: ok\n", what);
    else
        say("%s: %s\n", what, ename(errno));
}

int h_tiocsti(int argc, char **argv)
{
    sti("tiocsti-fd0", 0);
    sti("tiocsti-fd1", 1);
    sti("tiocsti-fd2", 2);
    /* fdonly: for a run on a host, where /dev/console is the real one. */
    if (argc > 1 && strcmp(argv[1], "fdonly") == 0) {
        say("tiocsti: finished\n");
        return 0;
    }
    static const char *const ttys[] = {"/dev/tty", "/dev/console", "/dev/tty0", "/dev/pts/0", "/dev/ptmx"};
    for (size_t i = 0; i < sizeof(ttys) / sizeof(ttys[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "tiocsti-%s", ttys[i]);
        int fd = open(ttys[i], O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            say("%s: %s (open)\n", what, ename(errno));
            continue;
        }
        sti(what, fd);
        close(fd);
    }
    say("tiocsti: finished\n");
    return 0;
}

/* Waits (bounded) for a setuid probe the test places into the work
 * directory from the host, then runs it.  The marker tells the test where
 * the work directory is on the host. */
int h_suidwait(int argc, char **argv)
{
    int fd = open(".hostile-suid-wait", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("suidwait-error: %s\n", ename(errno));
        return 1;
    }
    close(fd);
    for (int i = 0; i < 400; i++) {
        struct stat sb;
        if (stat("hostile-suid-probe", &sb) == 0 && (sb.st_mode & S_ISUID)) {
            say("probe: mode %o owner %u\n", (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid);
            char *args[] = {"./hostile-suid-probe", "whoami", NULL};
            execv(args[0], args);
            say("exec-error: %s\n", ename(errno));
            return 1;
        }
        usleep(20000);
    }
    say("suidwait-error: no probe appeared\n");
    return 1;
}

int h_whoami(int argc, char **argv)
{
    uid_t r, e, s;
    getresuid(&r, &e, &s);
    say("uid: %u\neuid: %u\n", (unsigned)r, (unsigned)e);
    if (setuid(0) == 0)
        say("setuid0: ok\n");
    else
        say("setuid0: %s\n", ename(errno));
    int fd = open("/etc/shadow", O_RDONLY | O_CLOEXEC);
    say("shadow: %s\n", fd >= 0 ? "opened" : ename(errno));
    return 0;
}

static void try_kill(const char *what, pid_t pid)
{
    if (kill(pid, SIGKILL) == 0)
        say("%s: ok\n", what);
    else
        say("%s: %s\n", what, ename(errno));
}

/* kill(target), kill(parent), kill(1), kill(-1): the worker must survive
 * all of them.  kill(getppid()) is skipped when the parent is outside the
 * pid namespace (getppid() is 0 there and kill(0) would only hit us). */
int h_killer(int argc, char **argv)
{
    long target = arg_long(argv[1]);
    pid_t ppid = getppid();
    say("pid: %ld\nppid: %ld\n", (long)getpid(), (long)ppid);
    try_kill("kill-target", (pid_t)target);
    if (ppid > 1)
        try_kill("kill-parent", ppid);
    else
        say("kill-parent: no parent visible\n");
    if (getpid() != 1)
        try_kill("kill-init", 1);
    try_kill("kill-all", -1);
    if (kill(-(pid_t)target, SIGKILL) == 0)
        say("kill-target-group: ok\n");
    else
        say("kill-target-group: %s\n", ename(errno));
    say("survived\n");
    return 0;
}
