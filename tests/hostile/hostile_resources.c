/* hostile: exhausting processes, memory, disk, output and CPU. */
#include "hostile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SLEEPERS 4096

/* Phase 1 counts how many processes the program gets (each child blocks),
 * phase 2 ("explode") is the classic bomb: every process forks forever.
 * Without explode the sleepers are killed and reaped before exit, so a
 * bounded demonstration leaves nothing behind. */
int h_forkbomb(int argc, char **argv)
{
    long target = arg_long(argv[1]);
    int explode = argc > 2 && strcmp(argv[2], "explode") == 0;
    if (target > MAX_SLEEPERS)
        target = MAX_SLEEPERS;
    static pid_t kids[MAX_SLEEPERS];
    long n = 0;
    int err = 0;
    for (; n < target; n++) {
        pid_t p = fork();
        if (p < 0) {
            err = errno;
            break;
        }
        if (p == 0) {
            for (;;)
                pause();
        }
        kids[n] = p;
    }
    say("forked: %ld\nfork-error: %s\n", n, err ? ename(err) : "none");
    if (explode) {
        for (;;)
            (void)fork();
    }
    for (long i = 0; i < n; i++)
        kill(kids[i], SIGKILL);
    for (long i = 0; i < n; i++)
        waitpid(kids[i], NULL, 0);
    return 0;
}

static void touch(volatile char *p, size_t len)
{
    for (size_t off = 0; off < len; off += 4096)
        p[off] = (char)(off >> 12);
}

int h_heap(int argc, char **argv)
{
    long mib = arg_long(argv[1]);
    for (long i = 0; i < mib; i++) {
        char *p = malloc(MiB);
        if (!p) {
            say("heap-error: %s at %ld MiB\n", ename(errno), i);
            return 1;
        }
        touch(p, MiB);
        if ((i + 1) % 16 == 0)
            say("heap: %ld MiB\n", i + 1);
    }
    say("done: %ld MiB\n", mib);
    return 0;
}

/* A mapping far larger than any limit: only the touched pages count, so
 * an address-space limit alone would stop this at mmap time, a memory
 * cgroup only when the pages are used. */
int h_mmap(int argc, char **argv)
{
    long mib = arg_long(argv[1]);
    size_t huge = (size_t)64 << 30;
    char *p = mmap(NULL, huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        say("mmap-error: %s\n", ename(errno));
        return 1;
    }
    say("mapped: 64 GiB\n");
    for (long i = 0; i < mib; i++) {
        touch(p + (size_t)i * MiB, MiB);
        if ((i + 1) % 16 == 0)
            say("touched: %ld MiB\n", i + 1);
    }
    say("done: %ld MiB\n", mib);
    return 0;
}

static int fill_fd(int fd, long mib, const char *what)
{
    static char buf[MiB];
    memset(buf, 'S', sizeof(buf));
    for (long i = 0; i < mib; i++) {
        size_t off = 0;
        while (off < sizeof(buf)) {
            ssize_t w = write(fd, buf + off, sizeof(buf) - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                say("%s-error: %s at %ld MiB\n", what, ename(errno), i);
                return -1;
            }
            off += (size_t)w;
        }
        if ((i + 1) % 16 == 0)
            say("%s: %ld MiB\n", what, i + 1);
    }
    return 0;
}

/* shm pages are charged to the writer's memory cgroup: a private /dev/shm
 * must not be a way around the memory limit. */
int h_shm(int argc, char **argv)
{
    long mib = arg_long(argv[1]);
    char path[64];
    snprintf(path, sizeof(path), "/dev/shm/hostile-shm-%ld", (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        say("shm-error: %s opening %s\n", ename(errno), path);
        return 1;
    }
    int rc = fill_fd(fd, mib, "shm");
    close(fd);
    /* Only a completed run cleans up: when killed, the file stays, which is
     * exactly what the next execution must not see. */
    if (rc < 0)
        return 1;
    unlink(path);
    say("done: %ld MiB\n", mib);
    return 0;
}

int h_memfd(int argc, char **argv)
{
    long mib = arg_long(argv[1]);
    int fd = memfd_create("hostile", MFD_CLOEXEC);
    if (fd < 0) {
        say("memfd-error: %s\n", ename(errno));
        return 1;
    }
    if (fill_fd(fd, mib, "memfd") < 0)
        return 1;
    say("done: %ld MiB\n", mib);
    return 0;
}

/* SIGXFSZ ignored: a file size limit then shows up as EFBIG. */
int h_write(int argc, char **argv)
{
    long mib = arg_long(argv[1]);
    signal(SIGXFSZ, SIG_IGN);
    int fd = open("big", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("write-error: %s opening\n", ename(errno));
        return 1;
    }
    if (fill_fd(fd, mib, "write") < 0)
        return 1;
    if (fsync(fd) < 0) {
        say("write-error: %s at fsync\n", ename(errno));
        return 1;
    }
    say("done: %ld MiB\n", mib);
    return 0;
}

int h_fallocate(int argc, char **argv)
{
    long mib = arg_long(argv[1]);
    signal(SIGXFSZ, SIG_IGN);
    int fd = open("reserved", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("fallocate-error: %s opening\n", ename(errno));
        return 1;
    }
    if (fallocate(fd, 0, 0, (off_t)mib * MiB) < 0) {
        say("fallocate-error: %s\n", ename(errno));
        return 1;
    }
    struct stat sb;
    fstat(fd, &sb);
    say("done: %ld MiB allocated, %lld blocks\n", mib, (long long)sb.st_blocks);
    return 0;
}

int h_files(int argc, char **argv)
{
    long count = arg_long(argv[1]);
    if (mkdir("many", 0755) < 0) {
        say("files-error: %s at mkdir\n", ename(errno));
        return 1;
    }
    char name[64];
    for (long i = 0; i < count; i++) {
        snprintf(name, sizeof(name), "many/f%ld", i);
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, "x", 1) != 1) {
            say("files-error: %s after %ld files\n", ename(errno), i);
            return 1;
        }
        close(fd);
    }
    say("done: %ld files\n", count);
    return 0;
}

int h_stdout(int argc, char **argv)
{
    static char buf[65536];
    memset(buf, 'O', sizeof(buf));
    for (;;) {
        if (write(1, buf, sizeof(buf)) < 0 && errno != EINTR)
            return 1;
    }
}

int h_stderrline(int argc, char **argv)
{
    long mib = arg_long(argv[1]);
    static char buf[MiB];
    memset(buf, 'E', sizeof(buf));
    for (long i = 0; i < mib; i++) {
        size_t off = 0;
        while (off < sizeof(buf)) {
            ssize_t w = write(2, buf + off, sizeof(buf) - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return 1;
            off += (size_t)w;
        }
    }
    say("stderr-written: %ld MiB\n", mib);
    return 0;
}

static volatile uint64_t spins;

__attribute__((noreturn)) static void spin(void)
{
    for (;;)
        spins++;
}

int h_cpu(int argc, char **argv)
{
    spin();
}

static void *spin_thread(void *arg)
{
    (void)arg;
    spin();
    return NULL;
}

int h_threads(int argc, char **argv)
{
    long n = arg_long(argv[1]);
    long started = 0;
    for (long i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, spin_thread, NULL) != 0)
            break;
        started++;
    }
    say("threads: %ld\n", started);
    spin();
}

int h_sleep(int argc, char **argv)
{
    say("sleeping\n");
    for (;;)
        sleep(1000);
}

static volatile sig_atomic_t xcpu_seen;

static void on_xcpu(int sig)
{
    (void)sig;
    if (!xcpu_seen) {
        static const char msg[] = "sigxcpu: ignored\n";
        (void)!write(1, msg, sizeof(msg) - 1);
    }
    xcpu_seen++;
}

int h_sigxcpu(int argc, char **argv)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_xcpu;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGXCPU, &sa, NULL);
    say("spinning\n");
    spin();
}

/* Takes inotify instances until the kernel refuses one (the per-user
 * limit, fs.inotify.max_user_instances, counted for the user that created
 * each user namespace on the way up).  hold: says so in the marker
 * .hostile-inotify-held (for the test to find the work directory) and
 * keeps them until ./.hostile-inotify-release appears (bounded). */
int h_inotify(int argc, char **argv)
{
    bool hold = argc >= 2 && strcmp(argv[1], "hold") == 0;
    int n = 0, err = 0;
    for (; n < 100000; n++) {
        if (inotify_init1(IN_CLOEXEC) < 0) {
            err = errno;
            break;
        }
    }
    say("inotify: %d\n", n);
    say("inotify-refused: %s\n", err ? ename(err) : "never");
    if (!hold)
        return 0;
    int fd = open(".hostile-inotify-held", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("inotify-error: %s\n", ename(errno));
        return 1;
    }
    close(fd);
    for (int i = 0; i < 1000; i++) {
        struct stat sb;
        if (stat(".hostile-inotify-release", &sb) == 0) {
            say("inotify-released: yes\n");
            return 0;
        }
        usleep(20000);
    }
    say("inotify-released: no\n");
    return 0;
}
