/* cf_workdir: path checks, no symlink following, FIFOs, collect, destroy. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_workdir.h"

typedef struct fixture {
    char root[64];
    char outside[128]; /* a "host" file user code would like us to read or clobber */
    cf_workdir *wd;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    cf_strlcpy(f->root, "/tmp/cf-wdtest-XXXXXX", sizeof(f->root));
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->outside, sizeof(f->outside), "%s/host-secret", f->root);
    FILE *fp = fopen(f->outside, "w");
    if (!fp)
        return -1;
    fputs("secret", fp);
    fclose(fp);
    cf_error err;
    if (cf_workdir_create(f->root, (uid_t)-1, (gid_t)-1, &f->wd, &err) < 0) {
        fprintf(stderr, "create: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cf_workdir_destroy(f->wd);
    unlink(f->outside);
    rmdir(f->root);
    free(f);
    return 0;
}

static char *wpath(fixture *f, const char *rel, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", cf_workdir_path(f->wd), rel);
    return buf;
}

static void test_path_check(void **state)
{
    (void)state;
    char why[96];
    assert_int_equal(cf_path_check("a.txt", 5, why, sizeof(why)), 0);
    assert_int_equal(cf_path_check("dir/sub/file.py", 15, why, sizeof(why)), 0);
    assert_int_equal(cf_path_check(".hidden", 7, why, sizeof(why)), 0);
    assert_int_equal(cf_path_check("a..b", 4, why, sizeof(why)), 0);

    assert_int_equal(cf_path_check("", 0, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "empty"));
    assert_int_equal(cf_path_check("/etc/passwd", 11, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "absolute"));
    assert_int_equal(cf_path_check("../x", 4, why, sizeof(why)), -1);
    assert_non_null(strstr(why, ".."));
    assert_int_equal(cf_path_check("a/../../x", 9, why, sizeof(why)), -1);
    assert_int_equal(cf_path_check("a/..", 4, why, sizeof(why)), -1);
    assert_int_equal(cf_path_check("./a", 3, why, sizeof(why)), -1);
    assert_int_equal(cf_path_check("a//b", 4, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "empty"));
    assert_int_equal(cf_path_check("a/", 2, why, sizeof(why)), -1);
    assert_int_equal(cf_path_check("a\0b", 3, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "NUL"));
    assert_int_equal(cf_path_check("a\nb", 3, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "control"));

    char longc[300];
    memset(longc, 'c', 256);
    longc[256] = '\0';
    assert_int_equal(cf_path_check(longc, 256, why, sizeof(why)), -1);
    assert_int_equal(cf_path_check(longc, 255, why, sizeof(why)), 0);
    char *longp = malloc(5000);
    for (size_t i = 0; i < 4999; i++)
        longp[i] = (i % 100 == 99) ? '/' : 'p';
    longp[4999] = '\0';
    assert_int_equal(cf_path_check(longp, 4999, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "4096"));
    free(longp);
    /* Deeper than CF_WORKDIR_MAX_DEPTH components. */
    char deep[200] = "";
    for (int i = 0; i < CF_WORKDIR_MAX_DEPTH + 1; i++)
        strncat(deep, i ? "/d" : "d", sizeof(deep) - strlen(deep) - 1);
    assert_int_equal(cf_path_check(deep, strlen(deep), why, sizeof(why)), -1);
    /* reason may be NULL */
    assert_int_equal(cf_path_check("/x", 2, NULL, 0), -1);
}

static void test_create_layout(void **state)
{
    fixture *f = *state;
    struct stat st;
    const char *p = cf_workdir_path(f->wd);
    assert_true(p[0] == '/');
    assert_int_equal(strncmp(p, f->root, strlen(f->root)), 0);
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_true(cf_workdir_dirfd(f->wd) >= 0);

    cf_workdir *bad = NULL;
    cf_error err;
    assert_int_equal(cf_workdir_create("/nonexistent-root-xyz", (uid_t)-1, (gid_t)-1, &bad, &err), -1);
    assert_null(bad);
}

static void test_put_and_read(void **state)
{
    fixture *f = *state;
    cf_error err;
    assert_int_equal(cf_workdir_put(f->wd, "a/b/c.txt", "hello", 5, 0640, &err), 0);
    char path[256];
    struct stat st;
    assert_int_equal(stat(wpath(f, "a/b/c.txt", path, sizeof(path)), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    assert_int_equal(st.st_size, 5);

    cf_buf b;
    cf_buf_init(&b, 0);
    bool too_big = true;
    assert_int_equal(cf_workdir_read(f->wd, "a/b/c.txt", 100, &b, &too_big, &err), 0);
    assert_false(too_big);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, "hello", 5);
    cf_buf_free(&b);

    /* Over the cap: nothing read, flag set. */
    cf_buf_init(&b, 0);
    assert_int_equal(cf_workdir_read(f->wd, "a/b/c.txt", 4, &b, &too_big, &err), 0);
    assert_true(too_big);
    assert_int_equal(b.len, 0);
    cf_buf_free(&b);

    /* Never replaces an existing entry; a file cannot be a directory. */
    assert_int_equal(cf_workdir_put(f->wd, "a/b/c.txt", "x", 1, 0644, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_workdir_put(f->wd, "a/b/c.txt/d", "x", 1, 0644, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    /* Unsafe paths never touch the disk. */
    assert_int_equal(cf_workdir_put(f->wd, "../escape", "x", 1, 0644, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_workdir_put(f->wd, "/tmp/escape", "x", 1, 0644, &err), -1);
    assert_int_equal(cf_workdir_read(f->wd, "missing", 10, &b, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
}

static void test_symlinks_not_followed(void **state)
{
    fixture *f = *state;
    cf_error err;
    char path[256];
    /* User code planted: link -> host file, dir -> host directory. */
    assert_int_equal(symlink(f->outside, wpath(f, "link", path, sizeof(path))), 0);
    assert_int_equal(symlink(f->root, wpath(f, "dirlink", path, sizeof(path))), 0);

    cf_buf b;
    cf_buf_init(&b, 0);
    assert_int_equal(cf_workdir_read(f->wd, "link", 100, &b, NULL, &err), -1);
    assert_int_equal(b.len, 0);
    assert_int_equal(cf_workdir_read(f->wd, "dirlink/host-secret", 100, &b, NULL, &err), -1);
    assert_int_equal(b.len, 0);

    /* put through a symlinked directory or onto a symlink is refused and
     * leaves the host untouched. */
    assert_int_equal(cf_workdir_put(f->wd, "dirlink/planted", "x", 1, 0644, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    char planted[160];
    snprintf(planted, sizeof(planted), "%s/planted", f->root);
    assert_int_equal(access(planted, F_OK), -1);
    assert_int_equal(cf_workdir_put(f->wd, "link", "clobber", 7, 0644, &err), -1);
    FILE *fp = fopen(f->outside, "r");
    char buf[32] = "";
    assert_non_null(fgets(buf, sizeof(buf), fp));
    fclose(fp);
    assert_string_equal(buf, "secret");
    cf_buf_free(&b);
}

static void test_fifo_read_does_not_hang(void **state)
{
    fixture *f = *state;
    char path[256];
    assert_int_equal(mkfifo(wpath(f, "output.json", path, sizeof(path)), 0600), 0);
    cf_buf b;
    cf_buf_init(&b, 0);
    cf_error err;
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_workdir_read(f->wd, "output.json", 100, &b, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_non_null(strstr(err.msg, "regular"));
    assert_true(cf_mono_us() - t0 < 1000000);
    /* A directory is not a regular file either. */
    assert_int_equal(mkdir(wpath(f, "d", path, sizeof(path)), 0700), 0);
    assert_int_equal(cf_workdir_read(f->wd, "d", 100, &b, NULL, &err), -1);
    cf_buf_free(&b);
}

static void test_collect(void **state)
{
    fixture *f = *state;
    cf_error err;
    char path[256];
    assert_int_equal(cf_workdir_put(f->wd, "z.txt", "zz", 2, 0644, &err), 0);
    assert_int_equal(cf_workdir_put(f->wd, "src/main.py", "print(1)", 8, 0644, &err), 0);
    assert_int_equal(cf_workdir_put(f->wd, "src/lib/util.py", "", 0, 0644, &err), 0);
    assert_int_equal(symlink(f->outside, wpath(f, "src/secret", path, sizeof(path))), 0);
    assert_int_equal(symlink(f->root, wpath(f, "rootlink", path, sizeof(path))), 0);
    assert_int_equal(mkfifo(wpath(f, "fifo", path, sizeof(path)), 0600), 0);

    cf_file *files = NULL;
    size_t n = 0;
    assert_int_equal(cf_workdir_collect(f->wd, 100, 1 << 20, &files, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(files[0].path, "src/lib/util.py");
    assert_int_equal(files[0].content.len, 0);
    assert_string_equal(files[1].path, "src/main.py");
    assert_int_equal(files[1].content.len, 8);
    assert_memory_equal(files[1].content.data, "print(1)", 8);
    assert_string_equal(files[2].path, "z.txt");
    cf_workdir_files_free(files, n);

    /* Limits. */
    assert_int_equal(cf_workdir_collect(f->wd, 2, 1 << 20, &files, &n, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_null(files);
    assert_int_equal(cf_workdir_collect(f->wd, 100, 9, &files, &n, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_int_equal(cf_workdir_collect(f->wd, 100, 10, &files, &n, &err), 0);
    assert_int_equal(n, 3);
    cf_workdir_files_free(files, n);
}

static void test_destroy_everything(void **state)
{
    fixture *f = *state;
    cf_error err;
    char path[512];
    char wdcopy[256];
    cf_strlcpy(wdcopy, cf_workdir_path(f->wd), sizeof(wdcopy));

    assert_int_equal(cf_workdir_put(f->wd, "ro/inner/file", "x", 1, 0444, &err), 0);
    assert_int_equal(chmod(wpath(f, "ro/inner", path, sizeof(path)), 0500), 0);
    assert_int_equal(chmod(wpath(f, "ro", path, sizeof(path)), 0000), 0);
    assert_int_equal(symlink(f->outside, wpath(f, "link", path, sizeof(path))), 0);
    assert_int_equal(symlink(f->root, wpath(f, "rootlink", path, sizeof(path))), 0);
    assert_int_equal(mkfifo(wpath(f, "fifo", path, sizeof(path)), 0600), 0);
    /* A tree deeper than destroy descends at once (it flattens). */
    int fd = openat(cf_workdir_dirfd(f->wd), ".", O_RDONLY | O_DIRECTORY);
    for (int i = 0; i < 60; i++) {
        assert_int_equal(mkdirat(fd, "deep", 0700), 0);
        int nfd = openat(fd, "deep", O_RDONLY | O_DIRECTORY);
        assert_true(nfd >= 0);
        close(fd);
        fd = nfd;
    }
    int ffd = openat(fd, "leaf", O_WRONLY | O_CREAT, 0644);
    assert_true(ffd >= 0);
    close(ffd);
    close(fd);
    /* The workdir itself made read-only by the program. */
    assert_int_equal(chmod(wdcopy, 0500), 0);

    cf_workdir_destroy(f->wd);
    f->wd = NULL;
    assert_int_equal(access(wdcopy, F_OK), -1);
    assert_int_equal(errno, ENOENT);
    /* Symlink targets survived. */
    assert_int_equal(access(f->outside, F_OK), 0);
    struct stat st;
    assert_int_equal(stat(f->root, &st), 0);
    cf_workdir_destroy(NULL);
}

/* Root ignores permissions, so the read-only handling is only really
 * exercised by an unprivileged owner: run the same steps as nobody. */
static void test_destroy_readonly_unprivileged(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        /* Already unprivileged: test_destroy_everything covered it. */
        skip();
    }
    char root[64];
    cf_strlcpy(root, "/tmp/cf-wdtest-nobody-XXXXXX", sizeof(root));
    assert_non_null(mkdtemp(root));
    assert_int_equal(chmod(root, 0777), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) < 0 || setuid(65534) < 0)
            _exit(10);
        cf_workdir *wd;
        cf_error err;
        if (cf_workdir_create(root, (uid_t)-1, (gid_t)-1, &wd, &err) < 0)
            _exit(11);
        char copy[256], p[512];
        cf_strlcpy(copy, cf_workdir_path(wd), sizeof(copy));
        if (cf_workdir_put(wd, "ro/inner/file", "x", 1, 0444, &err) < 0)
            _exit(12);
        snprintf(p, sizeof(p), "%s/ro/inner", copy);
        if (chmod(p, 0500) < 0)
            _exit(13);
        snprintf(p, sizeof(p), "%s/ro", copy);
        if (chmod(p, 0) < 0)
            _exit(14);
        if (chmod(copy, 0500) < 0)
            _exit(15);
        cf_workdir_destroy(wd);
        _exit(access(copy, F_OK) == -1 && errno == ENOENT ? 0 : 16);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(rmdir(root), 0); /* empty: nothing was left behind */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_check),
        cmocka_unit_test_setup_teardown(test_create_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_and_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlinks_not_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_read_does_not_hang, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_everything, setup, teardown),
        cmocka_unit_test(test_destroy_readonly_unprivileged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
