/* Unit tests for sandbox_seccomp: each rule really fires, allowed calls and
 * real runtimes keep working, foreign ABIs die, the doc matches the table. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_seccomp.h"

/* A marker errno no kernel path returns for these calls: when a call
 * fails with it, the filter (built with errno_override) answered. */
#define MARK EHWPOISON

static cf_seccomp_prog *prog_marked; /* every ERRNO rule answers MARK */
static cf_seccomp_prog *prog_real;   /* production filter */

static int setup(void **state)
{
    cf_error err;
    cf_seccomp_opts o = {.errno_override = MARK};
    if (cf_seccomp_prog_new(&o, &prog_marked, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    if (cf_seccomp_prog_new(NULL, &prog_real, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    cf_seccomp_prog_destroy(prog_marked);
    cf_seccomp_prog_destroy(prog_real);
    return 0;
}

/* Runs fn in a forked child under prog; returns the wait status.  fn
 * returns the child's exit code. */
static int run_filtered(const cf_seccomp_prog *prog, int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setsid(); /* no controlling terminal: vhangup & co. cannot hurt */
        if (cf_seccomp_load(prog) < 0)
            _exit(90);
        _exit(fn(arg));
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return st;
}

static void assert_exit0(int st)
{
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "child status: exited=%d code=%d signaled=%d sig=%d\n", WIFEXITED(st),
                WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st), WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void assert_sigsys(int st)
{
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSYS);
}

static void test_prog_shape(void **state)
{
    size_t len = cf_seccomp_prog_len(prog_real);
    assert_true(len > 10);
    assert_true(len <= 4096);
    assert_non_null(cf_seccomp_prog_fprog(prog_real));
    cf_seccomp_prog_destroy(NULL);
    cf_seccomp_opts bad = {.errno_override = 5000};
    cf_seccomp_prog *p = (cf_seccomp_prog *)1;
    cf_error err;
    assert_int_equal(cf_seccomp_prog_new(&bad, &p, &err), -1);
    assert_null(p);
    assert_int_equal(err.code, CF_E_INVALID);
}

/* --- every unconditional rule fires --------------------------------- */

struct call {
    long nr;
    int expect_errno; /* 0: expect success */
};

static int do_zero_call(void *arg)
{
    const struct call *c = arg;
    errno = 0;
    long r = syscall(c->nr, 0L, 0L, 0L, 0L, 0L, 0L);
    if (c->expect_errno == 0)
        return r >= 0 ? 0 : 10;
    if (r != -1)
        return 11;
    return errno == c->expect_errno ? 0 : 12;
}

static void test_every_rule_fires(void **state)
{
    size_t n;
    const cf_seccomp_rule *tab = cf_seccomp_rules(&n);
    int checked = 0;
    for (size_t i = 0; i < n; i++) {
        if (tab[i].args != CF_SECCOMP_ARGS_NONE)
            continue; /* argument filters have their own tests */
        int nr = seccomp_syscall_resolve_name(tab[i].syscall);
        assert_true(nr >= 0);
        int want = tab[i].errnum == ENOSYS ? ENOSYS : MARK; /* ENOSYS is never overridden */
        struct call c = {.nr = nr, .expect_errno = want};
        int st = run_filtered(prog_marked, do_zero_call, &c);
        if (tab[i].action == CF_SECCOMP_KILL_PROCESS) {
            if (!WIFSIGNALED(st))
                fprintf(stderr, "%s was not killed\n", tab[i].syscall);
            assert_sigsys(st);
        } else {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fprintf(stderr, "%s: not answered by the filter\n", tab[i].syscall);
            assert_exit0(st);
        }
        checked++;
    }
    assert_true(checked > 40);
}

/* --- production errnos ---------------------------------------------- */

static int real_errnos(void *arg)
{
    if (syscall(SYS_clone3, NULL, 0) != -1 || errno != ENOSYS)
        return 20;
    if (syscall(SYS_io_uring_setup, 8, NULL) != -1 || errno != ENOSYS)
        return 21;
    /* As root these would succeed without the filter. */
    if (unshare(CLONE_NEWUSER) != -1 || errno != EPERM)
        return 22;
    if (unshare(0) != -1 || errno != EPERM)
        return 23;
    if (syscall(SYS_clone, (long)(CLONE_NEWNET | SIGCHLD), 0L, 0L, 0L, 0L) != -1 || errno != EPERM)
        return 24;
    if (socket(AF_PACKET, SOCK_RAW, 0) != -1 || errno != EAFNOSUPPORT)
        return 25;
    if (socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT) != -1 || errno != EPROTONOSUPPORT)
        return 26;
    if (chroot("/") != -1 || errno != EPERM)
        return 27;
    return 0;
}

static void test_real_errnos(void **state)
{
    assert_exit0(run_filtered(prog_real, real_errnos, NULL));
}

/* --- argument filters ----------------------------------------------- */

static void *thread_fn(void *arg)
{
    return arg;
}

static int clone_args(void *arg)
{
    static const long ns[] = {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                              CLONE_NEWCGROUP};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        /* Upper-half junk must not hide the flag either. */
        long flags = ns[i] | SIGCHLD | (long)(0x100000000L);
        long r = syscall(SYS_clone, flags, 0L, 0L, 0L, 0L);
        if (r == 0)
            _exit(0);
        if (r != -1 || errno != MARK)
            return 30 + (int)i;
    }
    /* fork() and threads still work (glibc falls back from clone3). */
    pid_t p = fork();
    if (p < 0)
        return 40;
    if (p == 0)
        _exit(7);
    int st;
    if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 7)
        return 41;
    pthread_t t;
    void *ret = NULL;
    if (pthread_create(&t, NULL, thread_fn, (void *)42) != 0)
        return 42;
    if (pthread_join(t, &ret) != 0 || ret != (void *)42)
        return 43;
    return 0;
}

static void test_clone_flags(void **state)
{
    assert_exit0(run_filtered(prog_marked, clone_args, NULL));
}

static int socket_args(void *arg)
{
    static const int allowed[][2] = {
        {AF_UNIX, SOCK_STREAM}, {AF_INET, SOCK_DGRAM}, {AF_NETLINK, NETLINK_ROUTE}};
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
        int type = allowed[i][0] == AF_NETLINK ? SOCK_RAW : allowed[i][1];
        int proto = allowed[i][0] == AF_NETLINK ? allowed[i][1] : 0;
        int fd = socket(allowed[i][0], type, proto);
        if (fd < 0)
            return 50 + (int)i;
        close(fd);
    }
    /* AF_INET6 may be disabled in the kernel: only the filter must not answer. */
    int fd6 = socket(AF_INET6, SOCK_DGRAM, 0);
    if (fd6 < 0 && errno == MARK)
        return 55;
    if (fd6 >= 0)
        close(fd6);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return 56;
    close(sv[0]);
    close(sv[1]);

    static const long denied[] = {0, AF_PACKET, AF_VSOCK, AF_ALG, AF_KEY, AF_BLUETOOTH, 3, 15, 17, 44,
                                  0x100000000L | AF_UNIX, -1L};
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
        long r = syscall(SYS_socket, denied[i], (long)SOCK_DGRAM, 0L);
        if (r != -1 || errno != MARK)
            return 60 + (int)i;
    }
    if (socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT) != -1 || errno != MARK)
        return 80;
    if (socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER) != -1 || errno != MARK)
        return 81;
    if (socketpair(AF_PACKET, SOCK_DGRAM, 0, sv) != -1 || errno != MARK)
        return 82;
    return 0;
}

static void test_socket_families(void **state)
{
    assert_exit0(run_filtered(prog_marked, socket_args, NULL));
}

static int ioctl_args(void *arg)
{
    /* fd -1: an allowed ioctl fails with EBADF, a denied one with MARK. */
    if (syscall(SYS_ioctl, -1L, (long)TIOCSTI, 0L) != -1 || errno != MARK)
        return 1;
    if (syscall(SYS_ioctl, -1L, (long)TIOCLINUX, 0L) != -1 || errno != MARK)
        return 2;
    if (syscall(SYS_ioctl, -1L, (long)(0xdead00000000L | TIOCSTI), 0L) != -1 || errno != MARK)
        return 3;
    if (syscall(SYS_ioctl, -1L, (long)TCGETS, 0L) != -1 || errno != EBADF)
        return 4;
    if (syscall(SYS_ioctl, -1L, (long)FIONREAD, 0L) != -1 || errno != EBADF)
        return 5;
    return 0;
}

static void test_ioctl_tty_inject(void **state)
{
    assert_exit0(run_filtered(prog_marked, ioctl_args, NULL));
}

static int personality_args(void *arg)
{
    if (personality(0xffffffff) < 0)
        return 1;
    if (personality(PER_LINUX) < 0)
        return 2;
    /* Upper-half junk is ignored by the kernel and by the filter. */
    if (syscall(SYS_personality, 0x500000000L) < 0)
        return 3;
    static const unsigned long denied[] = {ADDR_NO_RANDOMIZE, PER_LINUX32, READ_IMPLIES_EXEC, 0x80000000UL,
                                           0xfffffffeUL, 0x7fffffffUL, 1};
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
        if (syscall(SYS_personality, denied[i]) != -1 || errno != MARK)
            return 10 + (int)i;
    return 0;
}

static void test_personality(void **state)
{
    assert_exit0(run_filtered(prog_marked, personality_args, NULL));
}

/* --- foreign ABIs --------------------------------------------------- */

#if defined(__x86_64__)
static int int80_getpid(void *arg)
{
    long ret;
    /* i386 getpid is 20; through int 0x80 the arch is AUDIT_ARCH_I386. */
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
    return ret > 0 ? 1 : 2;
}

static int x32_getpid(void *arg)
{
    long r = syscall(0x40000000L | SYS_getpid);
    return r > 0 ? 1 : 2;
}

static void test_foreign_abi_killed(void **state)
{
    assert_sigsys(run_filtered(prog_real, int80_getpid, NULL));
    assert_sigsys(run_filtered(prog_real, x32_getpid, NULL));
}
#endif

/* --- common calls and real runtimes ---------------------------------- */

static int common_calls(void *arg)
{
    char buf[64];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, buf, sizeof(buf)) <= 0)
        return 1;
    close(fd);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0 || write(p[1], "x", 1) != 1 || read(p[0], buf, 1) != 1)
        return 2;
    if (getpid() <= 0 || ioctl(p[0], FIONREAD, &fd) < 0)
        return 3;
    char tmpl[] = "/tmp/cf-seccomp-XXXXXX";
    int t = mkstemp(tmpl);
    if (t < 0)
        return 4;
    unlink(tmpl);
    close(t);
    return 0;
}

static void test_common_calls_allowed(void **state)
{
    assert_exit0(run_filtered(prog_real, common_calls, NULL));
}

static int exec_argv(void *arg)
{
    char *const *argv = arg;
    char *envp[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", NULL};
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
        dup2(devnull, 1);
    }
    execve(argv[0], argv, envp);
    return 127;
}

static void run_runtime(char *const *argv)
{
    if (access(argv[0], X_OK) != 0) {
        fprintf(stderr, "skipping %s: not installed\n", argv[0]);
        return;
    }
    int st = run_filtered(prog_real, exec_argv, (void *)argv);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "runtime failed under the filter: %s\n", argv[0]);
    assert_exit0(st);
}

static void test_runtimes_run(void **state)
{
    char *sh[] = {"/bin/sh", "-c", "true && ls / >/dev/null && (exit 0)", NULL};
    char *py[] = {"/usr/bin/python3", "-c", "pass", NULL};
    char *py2[] = {"/usr/bin/python3", "-c",
                   "import threading, subprocess, socket, os\n"
                   "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
                   "subprocess.run(['/bin/true'], check=True)\n"
                   "a, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'\n"
                   "os.listdir('/tmp')\n",
                   NULL};
    char *node[] = {"/usr/bin/node", "-e", "0", NULL};
    char *node2[] = {"/usr/bin/node", "-e",
                     "require('child_process').execFileSync('/bin/true');"
                     "require('fs').readdirSync('/tmp');"
                     "setTimeout(() => {}, 1)",
                     NULL};
    run_runtime(sh);
    run_runtime(py);
    run_runtime(py2);
    run_runtime(node);
    run_runtime(node2);
}

/* --- docs ----------------------------------------------------------- */

static void test_doc_in_sync(void **state)
{
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    assert_non_null(f);
    cf_error err;
    assert_int_equal(cf_seccomp_doc_markdown(f, &err), 0);
    fclose(f);

    const char *src = getenv("CF_SOURCE_DIR");
    if (!src)
        src = ".";
    char path[4096];
    snprintf(path, sizeof(path), "%s/docs/SECCOMP.md", src);
    if (getenv("CF_REGEN_DOCS")) {
        FILE *o = fopen(path, "w");
        assert_non_null(o);
        assert_int_equal(fwrite(mem, 1, len, o), len);
        fclose(o);
    }
    FILE *d = fopen(path, "r");
    if (!d)
        fprintf(stderr, "%s missing: run with CF_REGEN_DOCS=1\n", path);
    assert_non_null(d);
    char *disk = calloc(1, len + 2);
    size_t got = fread(disk, 1, len + 1, d);
    fclose(d);
    if (got != len || memcmp(disk, mem, len) != 0)
        fprintf(stderr, "%s is stale: run with CF_REGEN_DOCS=1\n", path);
    assert_int_equal(got, len);
    assert_memory_equal(disk, mem, len);
    free(disk);
    free(mem);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prog_shape),
        cmocka_unit_test(test_every_rule_fires),
        cmocka_unit_test(test_real_errnos),
        cmocka_unit_test(test_clone_flags),
        cmocka_unit_test(test_socket_families),
        cmocka_unit_test(test_ioctl_tty_inject),
        cmocka_unit_test(test_personality),
#if defined(__x86_64__)
        cmocka_unit_test(test_foreign_abi_killed),
#endif
        cmocka_unit_test(test_common_calls_allowed),
        cmocka_unit_test(test_runtimes_run),
        cmocka_unit_test(test_doc_in_sync),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
