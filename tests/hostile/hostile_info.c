/* hostile: network egress, secrets in env and /proc, writes to kernel and
 * cgroup files, inherited fds, planted symlinks, leftovers for the next
 * execution. */
#include "hostile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Non-blocking connect with a bounded wait; 0 or an errno. */
static int connect_wait(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return errno;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n = poll(&p, 1, 1500);
    if (n == 0)
        return ETIMEDOUT;
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
        return errno;
    return soerr;
}

/* Targets: "a.b.c.d:port" (TCP) or "@name" (abstract unix socket). */
int h_connect(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *t = argv[i];
        int fd, e;
        if (t[0] == '@') {
            fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                say("connect %s: %s (socket)\n", t, ename(errno));
                continue;
            }
            struct sockaddr_un sun;
            memset(&sun, 0, sizeof(sun));
            sun.sun_family = AF_UNIX;
            size_t n = strlen(t + 1);
            if (n > sizeof(sun.sun_path) - 1)
                n = sizeof(sun.sun_path) - 1;
            memcpy(sun.sun_path + 1, t + 1, n);
            e = connect_wait(fd, (struct sockaddr *)&sun, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
        } else {
            char host[64];
            snprintf(host, sizeof(host), "%s", t);
            char *colon = strrchr(host, ':');
            if (!colon) {
                say("connect %s: bad target\n", t);
                continue;
            }
            *colon = '\0';
            struct sockaddr_in sin;
            memset(&sin, 0, sizeof(sin));
            sin.sin_family = AF_INET;
            sin.sin_port = htons((uint16_t)arg_long(colon + 1));
            if (inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
                say("connect %s: bad address\n", t);
                continue;
            }
            fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                say("connect %s: %s (socket)\n", t, ename(errno));
                continue;
            }
            e = connect_wait(fd, (struct sockaddr *)&sin, sizeof(sin));
        }
        if (e == 0) {
            (void)!write(fd, "hostile\n", 8);
            say("connect %s: ok\n", t);
        } else {
            say("connect %s: %s\n", t, ename(e));
        }
        close(fd);
    }
    say("connect: finished\n");
    return 0;
}

static size_t read_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len = 0;
    while (len < size) {
        ssize_t n = read(fd, buf + len, size - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    return len;
}

static int contains(const char *hay, size_t len, const char *needle)
{
    return memmem(hay, len, needle, strlen(needle)) != NULL;
}

/* The canary comes on stdin, so it appears in no argv or environment of
 * this program itself. */
int h_secrets(int argc, char **argv)
{
    char canary[256];
    size_t cl = 0;
    while (cl < sizeof(canary) - 1) {
        ssize_t n = read(0, canary + cl, sizeof(canary) - 1 - cl);
        if (n <= 0)
            break;
        cl += (size_t)n;
    }
    while (cl > 0 && (canary[cl - 1] == '\n' || canary[cl - 1] == '\r'))
        cl--;
    canary[cl] = '\0';
    if (cl < 8) {
        say("secrets-error: no canary on stdin\n");
        return 2;
    }
    int leaks = 0;
    for (char **e = environ; e && *e; e++) {
        if (strstr(*e, canary)) {
            say("env-leak: %.40s\n", *e);
            leaks++;
        }
    }
    say("env: %s\n", leaks ? "LEAK" : "clean");
    static char buf[1 << 20];
    DIR *d = opendir("/proc");
    if (!d) {
        say("proc: %s\n", ename(errno));
        return 0;
    }
    int proc_leaks = 0, nprocs = 0;
    say("procs:");
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
        size_t n = read_file(path, buf, 64);
        while (n > 0 && buf[n - 1] == '\n')
            n--;
        say(" %s:%.*s", de->d_name, (int)n, buf);
        nprocs++;
    }
    say("\n");
    rewinddir(d);
    while ((de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        static const char *const files[] = {"environ", "cmdline"};
        for (size_t i = 0; i < 2; i++) {
            char path[300];
            snprintf(path, sizeof(path), "/proc/%s/%s", de->d_name, files[i]);
            size_t n = read_file(path, buf, sizeof(buf));
            if (contains(buf, n, canary)) {
                say("proc-leak: %s %s\n", de->d_name, files[i]);
                proc_leaks++;
            }
        }
    }
    closedir(d);
    say("proc-count: %d\nproc: %s\n", nprocs, proc_leaks ? "LEAK" : "clean");
    return 0;
}

/* Opens each for writing and writes nothing: opening is already the
 * breach, and writing host values (sysrq-trigger!) is never safe. */
int h_procsys(int argc, char **argv)
{
    static const char *const paths[] = {
        "/proc/sys/kernel/hostname",
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/modprobe",
        "/proc/sys/vm/drop_caches",
        "/proc/sys/vm/overcommit_memory",
        "/proc/sys/net/ipv4/ip_forward",
        "/proc/sys/fs/file-max",
        "/proc/sysrq-trigger",
        "/sys/fs/cgroup/cgroup.procs",
        "/sys/fs/cgroup/memory/cgroup.procs",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/pids/cgroup.procs",
        "/sys/fs/cgroup/pids/pids.max",
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/pids.max",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        int fd = open(paths[i], O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            say("%s: opened\n", paths[i]);
            close(fd);
        } else {
            say("%s: %s\n", paths[i], ename(errno));
        }
    }
    /* The program's own cgroup, wherever /proc/self/cgroup says it is. */
    char cg[4096];
    size_t n = read_file("/proc/self/cgroup", cg, sizeof(cg) - 1);
    cg[n] = '\0';
    for (char *line = strtok(cg, "\n"); line; line = strtok(NULL, "\n")) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1, *rel = c2 + 1;
        static const char *const files[] = {"memory.limit_in_bytes", "pids.max", "memory.max", "cgroup.procs"};
        for (size_t i = 0; i < 4; i++) {
            char path[4400];
            if (!ctrl[0])
                snprintf(path, sizeof(path), "/sys/fs/cgroup%s/%s", rel, files[i]);
            else if (strncmp(ctrl, "name=", 5) == 0)
                continue;
            else
                snprintf(path, sizeof(path), "/sys/fs/cgroup/%s%s/%s", ctrl, rel, files[i]);
            int fd = open(path, O_WRONLY | O_CLOEXEC);
            if (fd >= 0) {
                say("%s: opened\n", path);
                close(fd);
            } else if (errno != ENOENT) {
                say("%s: %s\n", path, ename(errno));
            }
        }
    }
    say("procsys: finished\n");
    return 0;
}

int h_fds(int argc, char **argv)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        say("fds-error: %s\n", ename(errno));
        return 1;
    }
    int self = dirfd(d);
    char list[4096] = "";
    size_t used = 0;
    struct dirent *de;
    int extra = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        int fd = (int)strtol(de->d_name, NULL, 10);
        if (fd == self)
            continue;
        int n = snprintf(list + used, sizeof(list) - used, " %d", fd);
        if (n > 0 && (size_t)n < sizeof(list) - used)
            used += (size_t)n;
        if (fd > 2) {
            char path[64], target[256];
            snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
            ssize_t tl = readlink(path, target, sizeof(target) - 1);
            target[tl > 0 ? tl : 0] = '\0';
            say("extra-fd %d: %s\n", fd, target);
            extra++;
        }
    }
    closedir(d);
    say("fds:%s\nextra: %d\n", list, extra);
    /* Not an attack: reopening the stdin pipe by name, as "cat /dev/stdin"
     * does (informational). */
    int fd = open("/dev/stdin", O_RDONLY | O_CLOEXEC);
    say("reopen-stdin: %s\n", fd >= 0 ? "ok" : ename(errno));
    fd = open("/dev/stdout", O_WRONLY | O_CLOEXEC);
    say("reopen-stdout: %s\n", fd >= 0 ? "ok" : ename(errno));
    return 0;
}

static void report(const char *what, int rc)
{
    if (rc == 0)
        say("%s: ok\n", what);
    else
        say("%s: %s\n", what, ename(errno));
}

/* Symlinks, a hard link, a FIFO and an unreadable directory, all waiting
 * for the worker to read, collect or clean up the work directory. */
int h_plant(int argc, char **argv)
{
    if (argc < 3) {
        say("usage: plant <host-file> <host-dir>\n");
        return 2;
    }
    const char *file = argv[1], *dir = argv[2];
    const char *out = getenv("CODEFLEET_OUTPUT");
    if (out) {
        unlink(out);
        report("plant-output", symlink(file, out));
    } else {
        say("plant-output: no CODEFLEET_OUTPUT\n");
    }
    const char *in = getenv("CODEFLEET_INPUT");
    if (in) {
        unlink(in);
        report("plant-input", symlink(file, in));
    }
    report("plant-file-link", symlink(file, "secret-link"));
    report("plant-dir-link", symlink(dir, "dir-link"));
    report("plant-root-link", symlink("/", "root-link"));
    report("plant-hard-link", link(file, "hard-link"));
    report("plant-output-in-cwd", symlink(file, "output.json") == 0 || errno == EEXIST ? 0 : -1);
    report("plant-fifo", mkfifo("fifo", 0644));
    int rc = mkdir("locked", 0755) == 0 && mkdir("locked/inner", 0755) == 0 ? 0 : -1;
    if (rc == 0) {
        int fd = open("locked/inner/f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
        rc = chmod("locked/inner", 0) == 0 && chmod("locked", 0) == 0 ? 0 : -1;
    }
    report("plant-locked-dir", rc);
    /* What a direct read of the host file gives here. */
    char buf[256];
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        say("direct-read: %s\n", buf);
        close(fd);
    } else {
        say("direct-read: %s\n", ename(errno));
    }
    say("plant: finished\n");
    return 0;
}

static key_t token_key(const char *token)
{
    unsigned h = 2166136261u;
    for (const char *p = token; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return (key_t)(h & 0x3fffffff) | 1;
}

static const char *const leave_dirs[] = {"/tmp", "/dev/shm", "/var/tmp", "."};

int h_leave(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *token = argv[1];
    for (size_t i = 0; i < sizeof(leave_dirs) / sizeof(leave_dirs[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/hostile-%s", leave_dirs[i], token);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) {
            say("left %s: %s\n", path, ename(errno));
            continue;
        }
        (void)!write(fd, token, strlen(token));
        close(fd);
        say("left %s: ok\n", path);
    }
    int id = shmget(token_key(token), 4096, IPC_CREAT | 0666);
    say("left sysv-shm: %s\n", id >= 0 ? "ok" : ename(errno));
    /* A daemon: new session, double fork, renamed, lives 30 s at most. */
    pid_t p = fork();
    if (p == 0) {
        setsid();
        if (fork() != 0)
            _exit(0);
        prctl(PR_SET_NAME, "hostile-daemon");
        for (int fd = 0; fd < 1024; fd++)
            close(fd);
        sleep(30);
        _exit(0);
    }
    if (p > 0) {
        waitpid(p, NULL, 0);
        say("left daemon: ok\n");
    }
    return 0;
}

int h_look(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *token = argv[1];
    int found = 0;
    for (size_t i = 0; i < sizeof(leave_dirs) / sizeof(leave_dirs[0]); i++) {
        char path[256];
        struct stat sb;
        snprintf(path, sizeof(path), "%s/hostile-%s", leave_dirs[i], token);
        if (lstat(path, &sb) == 0) {
            say("found: %s\n", path);
            found++;
        }
    }
    if (shmget(token_key(token), 0, 0) >= 0) {
        say("found: sysv-shm\n");
        found++;
    }
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char path[300], comm[64];
        snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
        size_t n = read_file(path, comm, sizeof(comm) - 1);
        comm[n] = '\0';
        if (strncmp(comm, "hostile-daemon", 14) == 0) {
            say("found: daemon %s\n", de->d_name);
            found++;
        }
    }
    if (d)
        closedir(d);
    say("look: %s\n", found ? "found" : "clean");
    return 0;
}
