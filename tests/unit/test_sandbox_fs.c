/* Unit tests for sandbox_fs: the plan is replayed in a child inside fresh
 * user + mount + pid namespaces (uid 1000 inside = 100000 outside, as the
 * backend does it) and the child checks what it can and cannot see. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_util.h"
#include "cf_sandbox_fs.h"

#define HOST_ID 100000
#define IN_ID 1000

static char work[64];

static int setup(void **state)
{
    if (geteuid() != 0)
        return 0;
    cf_strlcpy(work, "/tmp/cf-fs-work-XXXXXX", sizeof(work));
    if (!mkdtemp(work))
        return -1;
    char p[128];
    snprintf(p, sizeof(p), "%s/hello.txt", work);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fputs("hello\n", f);
    fclose(f);
    /* 0700 and owned by the outside id: reachable only through the bind. */
    if (chown(p, HOST_ID, HOST_ID) < 0 || chown(work, HOST_ID, HOST_ID) < 0 || chmod(work, 0700) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    if (work[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work);
        if (system(cmd) != 0)
            return -1;
    }
    return 0;
}

static int write_map(pid_t pid, const char *file, const char *map)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, file);
    int fd = open(p, O_WRONLY);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, map, strlen(map));
    close(fd);
    return n == (ssize_t)strlen(map) ? 0 : -1;
}

/* Runs check() as uid/gid 1000 inside the sandbox tree; returns the wait
 * status of the in-sandbox process (exit code = check's result). */
static int run_in_tree(const cf_sandbox_fs *fs, int (*check)(void *), void *arg)
{
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        close(ready[0]);
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
            _exit(200);
        char c;
        if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(201);
        pid_t inner = fork(); /* pid 1 of the new pid namespace */
        if (inner < 0)
            _exit(202);
        if (inner == 0) {
            const char *msg = "?";
            if (cf_sandbox_become(IN_ID, IN_ID) < 0)
                _exit(204);
            if (cf_sandbox_fs_apply(fs, &msg) < 0) {
                fprintf(stderr, "fs apply failed at '%s': %s\n", msg, strerror(errno));
                _exit(203);
            }
            if (cf_sandbox_drop_caps() < 0)
                _exit(206);
            _exit(check(arg));
        }
        int st;
        if (waitpid(inner, &st, 0) != inner)
            _exit(205);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    close(go[0]);
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    char map[64];
    snprintf(map, sizeof(map), "%d %d 1\n", IN_ID, HOST_ID);
    assert_int_equal(write_map(pid, "uid_map", map), 0);
    assert_int_equal(write_map(pid, "gid_map", map), 0);
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    close(ready[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static void assert_child_ok(int st)
{
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "sandboxed check failed: status %d (exit %d)\n", st, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static bool missing(const char *p)
{
    struct stat st;
    return lstat(p, &st) < 0 && errno == ENOENT;
}

static int read_has(const char *p, const char *needle)
{
    char buf[1024];
    int fd = open(p, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0)
        return 0;
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

static int check_tree(void *arg)
{
    bool rw = arg != NULL;
    if (getpid() != 1)
        return 1;
    if (getuid() != IN_ID)
        return 2;
    /* What must be there. */
    if (access("/usr/bin/python3", X_OK) != 0 || access("/bin/sh", X_OK) != 0)
        return 3;
    if (!read_has("/etc/passwd", "sandbox:x:1000:1000") || !read_has("/etc/hostname", "sandbox"))
        return 4;
    if (access("/etc/ld.so.cache", R_OK) != 0)
        return 5;
    if (!read_has("/proc/self/status", "Name:"))
        return 6;
    if (!read_has("/work/hello.txt", "hello"))
        return 7;
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0 || write(fd, "x", 1) != 1)
        return 8;
    close(fd);
    fd = open("/dev/urandom", O_RDONLY);
    char b[8];
    if (fd < 0 || read(fd, b, sizeof(b)) != (ssize_t)sizeof(b))
        return 9;
    close(fd);
    /* What must not be there. */
    if (!missing("/etc/shadow") || !missing("/root") || !missing("/home") || !missing("/sys") ||
        !missing("/dev/vda") || !missing("/dev/sda") || !missing("/var") || !missing("/tmp/cf-fs-work-probe"))
        return 10;
    /* The old root is gone: nothing from the host's /tmp (our work dir's parent). */
    if (!missing(arg ? "/tmp/hello.txt" : "/tmp/x"))
        return 11;
    /* Read-only where it must be. */
    if (mkdir("/newdir", 0755) == 0 || errno != EROFS)
        return 12;
    if (open("/usr/cf-probe", O_WRONLY | O_CREAT, 0644) >= 0 || (errno != EROFS && errno != EACCES))
        return 13;
    if (open("/etc/passwd", O_WRONLY) >= 0)
        return 14;
    /* Writable where it must be. */
    fd = open("/tmp/t", O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || write(fd, "t", 1) != 1)
        return 15;
    close(fd);
    fd = open("/work/out.txt", O_WRONLY | O_CREAT, 0644);
    if (rw && (fd < 0 || write(fd, "o", 1) != 1))
        return 16;
    if (!rw && (fd >= 0 || errno != EROFS))
        return 17;
    if (fd >= 0)
        close(fd);
    /* /tmp is capped. */
    struct statvfs sv;
    if (statvfs("/tmp", &sv) < 0 || (uint64_t)sv.f_blocks * sv.f_frsize > 16u << 20)
        return 18;
    /* No setuid games on the binds. */
    if (statvfs("/usr", &sv) < 0 || !(sv.f_flag & ST_NOSUID) || !(sv.f_flag & ST_RDONLY))
        return 19;
    if (statvfs("/work", &sv) < 0 || !(sv.f_flag & ST_NOSUID) || !(sv.f_flag & ST_NODEV))
        return 20;
    /* Mounting again needs capabilities: all dropped. */
    if (mount("tmpfs", "/tmp", "tmpfs", 0, NULL) == 0)
        return 21;
    if (!read_has("/proc/self/status", "CapEff:\t0000000000000000") ||
        !read_has("/proc/self/status", "CapBnd:\t0000000000000000"))
        return 22;
    /* /dev is read-only, /dev/shm is not. */
    if (open("/dev/evil", O_WRONLY | O_CREAT, 0644) >= 0 || errno != EROFS)
        return 23;
    fd = open("/dev/shm/ok", O_WRONLY | O_CREAT, 0644);
    if (fd < 0)
        return 24;
    close(fd);
    /* No supplementary groups left (the worker runs with group root). */
    if (getgroups(0, NULL) != 0)
        return 25;
    return 0;
}

static void test_tree_rw_work(void **state)
{
    if (geteuid() != 0)
        skip();
    cf_sandbox_fs_spec spec = {.work_dir = work, .work_rw = true, .tmp_size_bytes = 16 << 20, .uid = IN_ID,
                               .gid = IN_ID};
    cf_sandbox_fs *fs = NULL;
    cf_error err;
    assert_int_equal(cf_sandbox_fs_new(&spec, &fs, &err), 0);
    assert_true(cf_sandbox_fs_steps(fs) > 20);
    assert_child_ok(run_in_tree(fs, check_tree, (void *)1));
    char p[128];
    snprintf(p, sizeof(p), "%s/out.txt", work);
    assert_int_equal(access(p, F_OK), 0); /* the write reached the host dir */
    unlink(p);
    cf_sandbox_fs_destroy(fs);
    cf_sandbox_fs_destroy(NULL);
}

static void test_tree_ro_work(void **state)
{
    if (geteuid() != 0)
        skip();
    cf_sandbox_fs_spec spec = {.work_dir = work, .work_rw = false, .tmp_size_bytes = 16 << 20, .uid = IN_ID,
                               .gid = IN_ID};
    cf_sandbox_fs *fs = NULL;
    cf_error err;
    assert_int_equal(cf_sandbox_fs_new(&spec, &fs, &err), 0);
    assert_child_ok(run_in_tree(fs, check_tree, NULL));
    cf_sandbox_fs_destroy(fs);
}

static int fill_tmp(void *arg)
{
    int fd = open("/tmp/big", O_WRONLY | O_CREAT, 0644);
    if (fd < 0)
        return 1;
    static char chunk[1 << 20];
    for (int i = 0; i < 8; i++) {
        if (write(fd, chunk, sizeof(chunk)) < 0)
            return errno == ENOSPC ? 0 : 2;
    }
    return 3; /* 8 MiB fit in a 4 MiB tmpfs */
}

static void test_tmp_size_cap(void **state)
{
    if (geteuid() != 0)
        skip();
    cf_sandbox_fs_spec spec = {.tmp_size_bytes = 4 << 20, .uid = IN_ID, .gid = IN_ID};
    cf_sandbox_fs *fs = NULL;
    cf_error err;
    assert_int_equal(cf_sandbox_fs_new(&spec, &fs, &err), 0);
    assert_child_ok(run_in_tree(fs, fill_tmp, NULL));
    cf_sandbox_fs_destroy(fs);
}

static int run_runtimes(void *arg)
{
    static char *const py[] = {"/usr/bin/python3", "-c",
                               "import json, os, subprocess, tempfile\n"
                               "assert os.getuid() == 1000\n"
                               "assert open('/work/hello.txt').read() == 'hello\\n'\n"
                               "subprocess.run(['/bin/sh', '-c', 'true'], check=True)\n"
                               "tempfile.TemporaryFile().write(b'x')\n",
                               NULL};
    static char *const node[] = {"/usr/bin/node", "-e",
                                 "const fs = require('fs'); if (fs.readFileSync('/work/hello.txt', 'utf8') !== "
                                 "'hello\\n') process.exit(3)",
                                 NULL};
    char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/work", NULL};
    char *const *progs[] = {py, node};
    for (int i = 0; i < 2; i++) {
        pid_t p = fork();
        if (p < 0)
            return 50;
        if (p == 0) {
            execve(progs[i][0], progs[i], env);
            _exit(127);
        }
        int st;
        if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 60 + i;
    }
    return 0;
}

static void test_runtimes_in_tree(void **state)
{
    if (geteuid() != 0)
        skip();
    cf_sandbox_fs_spec spec = {.work_dir = work, .work_rw = true, .uid = IN_ID, .gid = IN_ID};
    cf_sandbox_fs *fs = NULL;
    cf_error err;
    assert_int_equal(cf_sandbox_fs_new(&spec, &fs, &err), 0);
    assert_child_ok(run_in_tree(fs, run_runtimes, NULL));
    cf_sandbox_fs_destroy(fs);
}

static void test_bad_specs(void **state)
{
    cf_sandbox_fs *fs = NULL;
    cf_error err;
    cf_sandbox_fs_spec rel = {.work_dir = "relative/dir"};
    assert_int_equal(cf_sandbox_fs_new(&rel, &fs, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    const char *const bad_extra[] = {"/opt/../etc/shadow", NULL};
    cf_sandbox_fs_spec ex = {.extra_ro = bad_extra};
    assert_int_equal(cf_sandbox_fs_new(&ex, &fs, &err), -1);
    const char *const bad_extra2[] = {"relative", NULL};
    cf_sandbox_fs_spec ex2 = {.extra_ro = bad_extra2};
    assert_int_equal(cf_sandbox_fs_new(&ex2, &fs, &err), -1);
    cf_sandbox_fs_spec host = {.hostname = "a\nb"};
    assert_int_equal(cf_sandbox_fs_new(&host, &fs, &err), -1);
    assert_null(fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_rw_work),
        cmocka_unit_test(test_tree_ro_work),
        cmocka_unit_test(test_tmp_size_cap),
        cmocka_unit_test(test_runtimes_in_tree),
        cmocka_unit_test(test_bad_specs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
