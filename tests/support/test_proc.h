/* Whether a process is gone: no longer there, or a zombie nobody reaped
 * yet (its /proc/<pid>/stat state Z or X).  kill(pid, 0) alone calls a
 * zombie alive.  Header-only: the unit tests link no test library. */
#ifndef CF_TEST_PROC_H
#define CF_TEST_PROC_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

static inline bool cf_test_pid_dead(pid_t pid)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return true;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* the name may hold anything, even ')' */
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

#endif
