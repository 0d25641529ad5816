/* Tries to read outside its preopened directories; prints one line per
 * attempt: "<what>: refused" or "<what>: READ <first bytes>". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void try_read(const char *what, const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("%s: refused (%s)\n", what, strerror(errno));
        return;
    }
    char buf[32] = {0};
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\n')
            buf[i] = ' ';
    printf("%s: READ %s\n", what, n > 0 ? buf : "(nothing)");
}

int main(void)
{
    try_read("dotdot", "../../../../../etc/passwd");
    try_read("absolute", "/etc/passwd");
    try_read("proc", "/proc/self/environ");
    int s = symlink("/etc/passwd", "link");
    printf("symlink: %s\n", s == 0 ? "made" : strerror(errno));
    try_read("via-symlink", "link");
    int s2 = symlink("../../../../etc/passwd", "link2");
    printf("symlink2: %s\n", s2 == 0 ? "made" : strerror(errno));
    try_read("via-relative-symlink", "link2");
    try_read("own-file", "data.txt");
    FILE *f = fopen("written.txt", "w");
    printf("write: %s\n", f ? "ok" : strerror(errno));
    if (f) {
        fputs("from the guest\n", f);
        fclose(f);
    }
    return 0;
}
