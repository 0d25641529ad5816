/* hostile: subcommand dispatch and output helpers (see hostile.h). */
#include "hostile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void say(const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(1, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        off += (size_t)w;
    }
}

const char *ename(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

long arg_long(const char *s)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : -1;
    if (!s || errno || end == s || *end || v < 0) {
        say("bad number '%s'\n", s ? s : "(missing)");
        exit(2);
    }
    return v;
}

static int h_ok(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    say("ok\n");
    return 0;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *usage;
} cmds[] = {
    {"ok", h_ok, "prints ok"},
    {"forkbomb", h_forkbomb, "<target> [explode]: fork target sleepers, report, then fork forever"},
    {"heap", h_heap, "<MiB>: malloc and touch"},
    {"inotify", h_inotify, "[hold]: inotify instances until refused; hold: keep them until ./.hostile-inotify-release"},
    {"mmap", h_mmap, "<MiB>: one 64 GiB NORESERVE mapping, touch MiB of it"},
    {"shm", h_shm, "<MiB>: fill a /dev/shm file"},
    {"memfd", h_memfd, "<MiB>: fill a memfd"},
    {"write", h_write, "<MiB>: one large file in the cwd"},
    {"fallocate", h_fallocate, "<MiB>: reserve disk blocks in the cwd"},
    {"files", h_files, "<count>: many small files in the cwd"},
    {"stdout", h_stdout, ": endless stdout"},
    {"stderrline", h_stderrline, "<MiB>: one huge stderr line, then exit 0"},
    {"cpu", h_cpu, ": spin forever"},
    {"threads", h_threads, "<n>: n spinning threads"},
    {"sleep", h_sleep, ": sleep forever"},
    {"sigxcpu", h_sigxcpu, ": spin, ignoring SIGXCPU"},
    {"escape", h_escape, ": try every escape syscall, one child each"},
    {"int80", h_int80, ": getpid through the i386 ABI"},
    {"x32", h_x32, ": getpid through the x32 ABI"},
    {"tiocsti", h_tiocsti, ": inject terminal input"},
    {"suidwait", h_suidwait, ": wait for ./hostile-suid-probe and exec it"},
    {"whoami", h_whoami, ": print ids, try to become root"},
    {"killer", h_killer, "<pid>: kill pid, the parent, init, everything"},
    {"connect", h_connect, "<host:port|@abstract>...: try to connect"},
    {"secrets", h_secrets, ": look for the canary (from stdin) in env and /proc"},
    {"procsys", h_procsys, ": open /proc/sys, /sys and cgroup files for writing"},
    {"fds", h_fds, ": list open fds"},
    {"plant", h_plant, "<host-file> <host-dir>: plant symlinks for the worker"},
    {"leave", h_leave, "<token>: leave files, IPC and a daemon behind"},
    {"look", h_look, "<token>: look for what leave left"},
};

int main(int argc, char **argv)
{
    if (argc >= 2) {
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
            if (strcmp(argv[1], cmds[i].name) == 0)
                return cmds[i].fn(argc - 1, argv + 1);
    }
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        fprintf(stderr, "hostile %s %s\n", cmds[i].name, cmds[i].usage);
    return 2;
}
