/* Helpers shared by the sandbox tests (header-only: unit and integration
 * tests both use it): reading the hostile programs' reports, and telling
 * a waiting warm sandbox from an execution's process. */
#ifndef CF_TEST_SANDBOX_TEST_H
#define CF_TEST_SANDBOX_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value of "key: value" in text (first occurrence), or NULL. */
static inline const char *line_value(const char *text, const char *key, char *buf, size_t size)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, kl) == 0 && p[kl] == ':' && p[kl + 1] == ' ') {
            const char *v = p + kl + 2;
            size_t n = strcspn(v, "\n");
            if (n >= size)
                n = size - 1;
            memcpy(buf, v, n);
            buf[n] = '\0';
            return buf;
        }
    }
    return NULL;
}

/* Whether text has line as a whole line. */
static inline bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

/* Largest N of the lines "<prefix>: N MiB" (progress of the memory and
 * disk hogs). */
static inline long progress_mib(const char *text, const char *prefix)
{
    long best = 0;
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, pl) == 0 && p[pl] == ':') {
            long v = strtol(p + pl + 1, NULL, 10);
            if (v > best)
                best = v;
        }
    return best;
}

/* A warm sandbox waiting for its request: the runner's init-to-be, named
 * codefleet-init, still before its program (no child).  Any other process
 * of a sandbox is an execution's. */
static inline bool is_waiting_prepared(long pid)
{
    char p[64], comm[32] = "";
    snprintf(p, sizeof(p), "/proc/%ld/comm", pid);
    FILE *fp = fopen(p, "r");
    if (!fp)
        return false;
    bool named = fgets(comm, sizeof(comm), fp) && strcmp(comm, "codefleet-init\n") == 0;
    fclose(fp);
    if (!named)
        return false;
    snprintf(p, sizeof(p), "/proc/%ld/task/%ld/children", pid, pid);
    fp = fopen(p, "r");
    if (!fp)
        return false;
    int c = fgetc(fp);
    fclose(fp);
    return c == EOF;
}

#endif
