#include "cf_util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int64_t cf_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct timespec cf_realtime_after_us(int64_t us)
{
    struct timespec ts;
    if (us < 0)
        us = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += us / 1000000;
    ts.tv_nsec += (long)(us % 1000000) * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int64_t cf_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int cf_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char *what, cf_error *err)
{
    if (!s || !*s)
        return cf_error_set(err, CF_E_INVALID, "%s: empty value", what);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE)
        return cf_error_set(err, CF_E_INVALID, "%s: '%s' is out of range", what, s);
    if (end == s || *end != '\0')
        return cf_error_set(err, CF_E_INVALID, "%s: '%s' is not an integer", what, s);
    if (v < min || v > max)
        return cf_error_set(err, CF_E_INVALID, "%s: %lld is outside [%lld, %lld]", what, v, (long long)min,
                            (long long)max);
    *out = (int64_t)v;
    return 0;
}

/* Splits "123unit" into a number and a unit suffix. */
static int split_number_unit(const char *s, double *num, const char **unit, const char *what, cf_error *err)
{
    if (!s || !*s)
        return cf_error_set(err, CF_E_INVALID, "%s: empty value", what);
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || v < 0 || v != v)
        return cf_error_set(err, CF_E_INVALID, "%s: '%s' is not a non-negative number", what, s);
    while (*end == ' ')
        end++;
    *num = v;
    *unit = end;
    return 0;
}

int cf_parse_duration_us(const char *s, int64_t *out, const char *what, cf_error *err)
{
    double v;
    const char *unit;
    if (split_number_unit(s, &v, &unit, what, err) < 0)
        return -1;
    double mul;
    if (*unit == '\0' || strcmp(unit, "s") == 0)
        mul = 1e6;
    else if (strcmp(unit, "ms") == 0)
        mul = 1e3;
    else if (strcmp(unit, "us") == 0)
        mul = 1;
    else if (strcmp(unit, "m") == 0 || strcmp(unit, "min") == 0)
        mul = 60e6;
    else if (strcmp(unit, "h") == 0)
        mul = 3600e6;
    else
        return cf_error_set(err, CF_E_INVALID, "%s: unknown duration unit '%s' (use us, ms, s, m, h)", what, unit);
    double r = v * mul;
    if (r > 9.0e18)
        return cf_error_set(err, CF_E_INVALID, "%s: '%s' is too large", what, s);
    *out = (int64_t)r;
    return 0;
}

int cf_parse_size(const char *s, int64_t *out, const char *what, cf_error *err)
{
    double v;
    const char *unit;
    if (split_number_unit(s, &v, &unit, what, err) < 0)
        return -1;
    double mul;
    if (*unit == '\0' || strcasecmp(unit, "b") == 0)
        mul = 1;
    else if (strcasecmp(unit, "k") == 0 || strcasecmp(unit, "kb") == 0 || strcasecmp(unit, "kib") == 0)
        mul = 1024.0;
    else if (strcasecmp(unit, "m") == 0 || strcasecmp(unit, "mb") == 0 || strcasecmp(unit, "mib") == 0)
        mul = 1024.0 * 1024;
    else if (strcasecmp(unit, "g") == 0 || strcasecmp(unit, "gb") == 0 || strcasecmp(unit, "gib") == 0)
        mul = 1024.0 * 1024 * 1024;
    else
        return cf_error_set(err, CF_E_INVALID, "%s: unknown size unit '%s' (use B, KiB, MiB, GiB)", what, unit);
    double r = v * mul;
    if (r > 9.0e18)
        return cf_error_set(err, CF_E_INVALID, "%s: '%s' is too large", what, s);
    *out = (int64_t)r;
    return 0;
}

int cf_parse_bool(const char *s, bool *out, const char *what, cf_error *err)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return cf_error_set(err, CF_E_INVALID, "%s: '%s' is not a boolean (true/false)", what, s);
}

void cf_format_duration(int64_t us, char *buf, size_t cap)
{
    if (us < 1000)
        snprintf(buf, cap, "%lldus", (long long)us);
    else if (us < 1000000)
        snprintf(buf, cap, "%.2fms", (double)us / 1e3);
    else
        snprintf(buf, cap, "%.2fs", (double)us / 1e6);
}

void cf_format_size(int64_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    /* Exact in its unit: no decimal, so a limit reads as it was set
     * ("64 MiB"); "64.0 MiB" is kept for a size that only rounds to it. */
    if (u == 0)
        snprintf(buf, cap, "%lld B", (long long)bytes);
    else if (bytes % (INT64_C(1) << (10 * u)) == 0)
        snprintf(buf, cap, "%lld %s", (long long)(bytes >> (10 * u)), units[u]);
    else
        snprintf(buf, cap, "%.1f %s", v, units[u]);
}

void cf_format_time(int64_t epoch_us, char *buf, size_t cap)
{
    if (epoch_us <= 0) {
        snprintf(buf, cap, "-");
        return;
    }
    time_t t = (time_t)(epoch_us / 1000000);
    struct tm tm;
    char day[32];
    if (!gmtime_r(&t, &tm) || !strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm)) {
        snprintf(buf, cap, "%lld us", (long long)epoch_us);
        return;
    }
    snprintf(buf, cap, "%s.%03dZ", day, (int)(epoch_us / 1000 % 1000));
}

void cf_format_span(int64_t us, char *buf, size_t cap)
{
    static const struct {
        int64_t s;
        const char *name;
    } units[] = {{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}};
    int64_t left = us < 0 ? 0 : us / 1000000;
    size_t n = 0, shown = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < 4 && shown < 2; i++) {
        int64_t v = left / units[i].s;
        if (!v && !shown)
            continue;
        left -= v * units[i].s;
        if (v && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%lld%s", shown ? " " : "", (long long)v, units[i].name);
        shown++;
    }
    if (!buf[0])
        snprintf(buf, cap, "%lldms", (long long)(us < 0 ? 0 : us / 1000));
}

size_t cf_strlcpy(char *dst, const char *src, size_t cap)
{
    size_t n = strlen(src);
    if (cap) {
        size_t c = n < cap - 1 ? n : cap - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}

char *cf_put_str(char *p, const char *s)
{
    size_t l = strlen(s) + 1;
    memcpy(p, s, l);
    return p + l;
}

char *cf_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *cf_strndup(const char *s, size_t n)
{
    char *r = malloc(n + 1);
    if (!r)
        return NULL;
    memcpy(r, s, n);
    r[n] = '\0';
    return r;
}

void cf_buf_init(cf_buf *b, size_t cap)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->cap = cap ? cap : SIZE_MAX;
}

static int buf_reserve(cf_buf *b, size_t need)
{
    if (need <= b->alloc)
        return 0;
    size_t n = b->alloc ? b->alloc : 256;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    uint8_t *d = realloc(b->data, n);
    if (!d)
        return -1;
    b->data = d;
    b->alloc = n;
    return 0;
}

int cf_buf_reserve(cf_buf *b, size_t need, cf_error *err)
{
    if (need > b->cap)
        need = b->cap;
    if (buf_reserve(b, need) < 0)
        return cf_error_set(err, CF_E_NOMEM, "out of memory growing a buffer to %zu bytes", need);
    return 0;
}

size_t cf_buf_append_capped(cf_buf *b, const void *data, size_t len)
{
    size_t room = b->cap - b->len;
    size_t n = len < room ? len : room;
    if (n == 0 || buf_reserve(b, b->len + n) < 0)
        return 0;
    memcpy(b->data + b->len, data, n);
    b->len += n;
    return n;
}

int cf_buf_append(cf_buf *b, const void *data, size_t len, cf_error *err)
{
    if (len > b->cap - b->len)
        return cf_error_set(err, CF_E_LIMIT, "buffer limit of %zu bytes exceeded", b->cap);
    if (len == 0)
        return 0;
    if (buf_reserve(b, b->len + len) < 0)
        return cf_error_set(err, CF_E_NOMEM, "out of memory growing a buffer to %zu bytes", b->len + len);
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

uint8_t *cf_buf_steal(cf_buf *b, size_t *len)
{
    uint8_t *d = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->alloc = 0;
    return d;
}

void cf_buf_free(cf_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->alloc = 0;
}

void cf_fd_close(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
        *fd = -1;
    }
}

void cf_printable(const char *s, size_t len, char *buf, size_t size)
{
    size_t j = 0;
    if (size == 0)
        return;
    if (!s)
        len = 0;
    for (size_t i = 0; i < len && j + 4 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        if (i == 80) {
            memcpy(buf + j, "...", 3);
            j += 3;
            break;
        }
    }
    buf[j] = '\0';
}

bool cf_name_valid(const char *s, size_t len, size_t max)
{
    if (!s || len == 0 || len > max)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

bool cf_topic_name_valid(const char *t)
{
    size_t n = t ? strlen(t) : 0;
    return cf_name_valid(t, n, 249) && strcmp(t, ".") != 0 && strcmp(t, "..") != 0;
}

size_t cf_sanitize_text(const char *s, size_t len, bool keep_newlines, char *buf, size_t size)
{
    size_t j = 0;
    if (size == 0)
        return 0;
    for (size_t i = 0; s && i < len && j + 1 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            /* a UTF-8 sequence: whole and well-formed (no overlong forms,
             * surrogates or code points past U+10FFFF), or a '?' */
            size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 1;
            if (n == 1 || i + n > len || j + n >= size) {
                if (n > 1 && i + n <= len && j + n >= size)
                    break;
                buf[j++] = '?';
                continue;
            }
            bool ok = true;
            uint32_t cp = n == 2 ? (c & 0x1fu) : n == 3 ? (c & 0x0fu) : (c & 0x07u);
            for (size_t k = 1; k < n; k++) {
                ok = ok && ((unsigned char)s[i + k] & 0xc0) == 0x80;
                cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3fu);
            }
            ok = ok && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
                 !(cp >= 0xd800 && cp <= 0xdfff);
            if (!ok) {
                buf[j++] = '?';
                continue;
            }
            /* Terminal controls spelled in UTF-8: the C1 set (U+0080-009F,
             * e.g. CSI) and the bidi overrides (U+202A-202E, U+2066-2069)
             * that make text display other than it reads. */
            if ((cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
                buf[j++] = '?';
                i += n - 1;
                continue;
            }
            memcpy(buf + j, s + i, n);
            j += n;
            i += n - 1;
            continue;
        }
        if ((c < 0x20 && c != '\t' && !(keep_newlines && c == '\n')) || c == 0x7f)
            c = '?';
        buf[j++] = (char)c;
    }
    buf[j] = '\0';
    return j;
}

size_t cf_utf8_incomplete_tail(const uint8_t *s, size_t len)
{
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        uint8_t c = s[len - back];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back for the lead */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

int cf_proc_self_stat(unsigned long long *v, int n)
{
    return cf_proc_stat(0, v, n);
}

int cf_proc_stat(pid_t pid, unsigned long long *v, int n)
{
    char buf[2048], path[64];
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/stat");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (got <= 0)
        return -1;
    buf[got] = '\0';
    memset(v, 0, (size_t)n * sizeof(*v));
    /* The command name (field 2) may hold spaces and parentheses: count
     * from its last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    int field = 2;
    for (char *tok = p + 1; *tok && field < n - 1;) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            break;
        field++;
        v[field] = strtoull(tok, NULL, 10); /* field 3 is a letter: 0 */
        while (*tok && *tok != ' ')
            tok++;
    }
    return field;
}

bool cf_list_next(const char **cursor, cf_list_item *item)
{
    const char *p = *cursor;
    if (!p)
        return false;
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    *cursor = comma ? comma + 1 : NULL;
    while (len && (*p == ' ' || *p == '\t')) {
        p++;
        len--;
    }
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
        len--;
    item->s = p;
    item->len = len;
    return true;
}

/* ---------------------------------------------------------------- glob */

/* One character of the pattern at p[*i] against c: a literal, '?', an
 * escape or a class; *i moves past it.  A '[' without its ']' is a
 * literal, as in fnmatch. */
static bool glob_one(const char *p, size_t plen, size_t *i, char c)
{
    char pc = p[*i];
    if (pc == '?') {
        (*i)++;
        return true;
    }
    if (pc == '\\' && *i + 1 < plen) {
        *i += 2;
        return p[*i - 1] == c;
    }
    if (pc == '[') {
        size_t k = *i + 1;
        bool neg = k < plen && (p[k] == '!' || p[k] == '^');
        if (neg)
            k++;
        size_t first = k;
        bool hit = false;
        for (; k < plen && (p[k] != ']' || k == first); k++) {
            char lo = p[k], hi = lo;
            if (lo == '\\' && k + 1 < plen)
                lo = hi = p[++k];
            if (k + 2 < plen && p[k + 1] == '-' && p[k + 2] != ']') {
                hi = p[k + 2];
                k += 2;
            }
            hit |= (unsigned char)c >= (unsigned char)lo && (unsigned char)c <= (unsigned char)hi;
        }
        if (k < plen) { /* its ']' */
            *i = k + 1;
            return hit != neg;
        }
    }
    (*i)++;
    return pc == c;
}

/* One component against one pattern component: the two-pointer walk that
 * goes back only to the last '*' (O(plen * slen)). */
static bool glob_component(const char *p, size_t plen, const char *s, size_t slen, bool period)
{
    if (period && slen && s[0] == '.' && plen && p[0] != '.')
        return false;
    size_t i = 0, j = 0, star = SIZE_MAX, mark = 0;
    while (j < slen) {
        if (i < plen && p[i] == '*') {
            star = i++;
            mark = j;
            continue;
        }
        size_t next = i;
        if (i < plen && glob_one(p, plen, &next, s[j])) {
            i = next;
            j++;
            continue;
        }
        if (star == SIZE_MAX)
            return false;
        i = star + 1;
        j = ++mark;
    }
    while (i < plen && p[i] == '*')
        i++;
    return i == plen;
}

static size_t components(const char *s)
{
    size_t n = 1;
    for (; *s; s++)
        n += *s == '/';
    return n;
}

bool cf_glob_match(const char *pattern, const char *path, unsigned flags)
{
    bool any_depth = false;
    while ((flags & CF_GLOB_ANY_DEPTH) && strncmp(pattern, "**/", 3) == 0) {
        pattern += 3;
        any_depth = true;
    }
    size_t m = components(pattern), n = components(path);
    if (m > n || (!any_depth && m != n))
        return false;
    /* The path's last m components: any depth leaves only one choice. */
    for (size_t skip = n - m; skip > 0; skip--)
        path = strchr(path, '/') + 1;
    for (;;) {
        const char *pe = strchr(pattern, '/'), *se = strchr(path, '/');
        size_t pl = pe ? (size_t)(pe - pattern) : strlen(pattern), sl = se ? (size_t)(se - path) : strlen(path);
        if (!glob_component(pattern, pl, path, sl, flags & CF_GLOB_PERIOD))
            return false;
        if (!pe)
            return true;
        pattern = pe + 1;
        path = se + 1;
    }
}
