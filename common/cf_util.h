/* cf_util: small shared helpers: clocks, bounded number parsing, durations
 * and sizes with units, a growable byte buffer with a hard cap. */
#ifndef CF_UTIL_H
#define CF_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>
#include <time.h>

#include "cf_error.h"

/* Microseconds: the one time unit of codefleet (wire schema, config, logs). */
int64_t cf_now_us(void);  /* wall clock, since the Unix epoch */
int64_t cf_mono_us(void); /* monotonic, for measuring intervals */
/* The wall-clock instant us from now, as pthread_cond_timedwait wants its
 * deadline (conditions use CLOCK_REALTIME by default). */
struct timespec cf_realtime_after_us(int64_t us);

/* Parses a whole decimal integer in [min, max]; rejects empty strings,
 * trailing garbage and overflow.  what names the value in the error. */
int cf_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char *what, cf_error *err);

/* "250ms", "5s", "2m", "1h", "100us"; a bare number means seconds.
 * Result in microseconds. */
int cf_parse_duration_us(const char *s, int64_t *out, const char *what, cf_error *err);

/* "64MiB", "1k" (=1024), "10M", "512"; bare number = bytes. */
int cf_parse_size(const char *s, int64_t *out, const char *what, cf_error *err);

/* "true/false/yes/no/on/off/1/0" */
int cf_parse_bool(const char *s, bool *out, const char *what, cf_error *err);

/* Formats a duration in microseconds for humans ("1.25s", "830us"). */
void cf_format_duration(int64_t us, char *buf, size_t cap);
/* Formats a size in bytes for humans, in the largest unit (up to TiB) it
 * reaches: without a decimal when it is an exact number of that unit
 * ("512 B", "64 MiB", "3 GiB"), else to a tenth ("1.5 KiB", "64.0 MiB" for
 * one byte more than 64 MiB). */
void cf_format_size(int64_t bytes, char *buf, size_t cap);
/* Formats a Unix time in microseconds as ISO 8601 in UTC, to the
 * millisecond ("2026-12-06T18:16:22.123Z"); "-" for 0 or less. */
void cf_format_time(int64_t epoch_us, char *buf, size_t cap);
/* Formats a long span for humans, to its two largest units ("24h",
 * "1h 30m", "2d 3h", "45s"). */
void cf_format_span(int64_t us, char *buf, size_t cap);

/* Hostile text going into a message (a rejection reason, a log line):
 * printable ASCII, non-printable bytes as '?', at most ~80 bytes then
 * "...".  s may be NULL (""). */
void cf_printable(const char *s, size_t len, char *buf, size_t size);

/* Bounded copy that always NUL-terminates; returns strlen(src). */
size_t cf_strlcpy(char *dst, const char *src, size_t cap);

/* Copies s with its NUL to p, which must have room; returns the byte past
 * it (for packing NUL-separated strings into a sized buffer). */
char *cf_put_str(char *p, const char *s);

/* Whether s[0..len) is 1..max characters of [A-Za-z0-9._-]: the one rule
 * of names the fleet takes from others (workspace and thread ids, topic
 * names, state prefixes).  s may be NULL (false). */
bool cf_name_valid(const char *s, size_t len, size_t max);
/* A Kafka topic name: 1..249 of [A-Za-z0-9._-], not "." or "..". */
bool cf_topic_name_valid(const char *t);

/* Text from elsewhere (a compiler, a program) made safe for a terminal or
 * a log line, without cf_printable's short cut: control characters other
 * than tab become '?' (newlines too, unless keep_newlines), the rest, UTF-8
 * included, is kept; cut at size - 1 bytes on a character boundary.
 * Returns the bytes written. */
size_t cf_sanitize_text(const char *s, size_t len, bool keep_newlines, char *buf, size_t size);
/* How many bytes at the end of s[0..len) start a UTF-8 sequence that is
 * not complete yet (0..3): text arriving in pieces keeps them for the next
 * piece instead of showing a cut character as '?'. */
size_t cf_utf8_incomplete_tail(const uint8_t *s, size_t len);

/* One item of a comma-separated list ("sandbox, process"), the blanks
 * (space, tab) around it trimmed; not NUL-terminated. */
typedef struct cf_list_item {
    const char *s;
    size_t len;
} cf_list_item;
/* The next item of a list: *cursor starts at the list (NULL: no items)
 * and is NULL after the last one.  Empty items are returned too ("a,,b"
 * has three): the caller decides whether one is an error. */
bool cf_list_next(const char **cursor, cf_list_item *item);

/* strdup that returns NULL for NULL. */
char *cf_strdup(const char *s);
char *cf_strndup(const char *s, size_t n);

/* A growable byte buffer that refuses to grow past cap. */
typedef struct cf_buf {
    uint8_t *data;
    size_t len;
    size_t alloc;
    size_t cap; /* hard limit on len; 0 means SIZE_MAX */
} cf_buf;

void cf_buf_init(cf_buf *b, size_t cap);
/* Appends up to the cap; returns the number of bytes actually stored. */
size_t cf_buf_append_capped(cf_buf *b, const void *data, size_t len);
/* Appends all or fails with CF_E_LIMIT / CF_E_NOMEM. */
int cf_buf_append(cf_buf *b, const void *data, size_t len, cf_error *err);
/* Makes room for at least need bytes in total (at most cap) without
 * changing len: for reading straight into data + len. */
int cf_buf_reserve(cf_buf *b, size_t need, cf_error *err);
/* Hands the bytes to the caller (who frees them) and resets b. */
uint8_t *cf_buf_steal(cf_buf *b, size_t *len);
void cf_buf_free(cf_buf *b);

/* Closes *fd when it is open and leaves it -1 (errno kept): the one
 * close-and-forget of descriptors kept in structs or locals. */
void cf_fd_close(int *fd);
/* A descriptor closed when its variable goes out of scope (crun's
 * cleanup_fd); multi-resource functions keep their goto-based cleanup,
 * as librdkafka and redis do. */
#define cf_autoclose __attribute__((cleanup(cf_fd_close)))
#define cf_steal_fd(pfd)                                                                  \
    ({                                                                                    \
        int _stolen = *(pfd);                                                             \
        *(pfd) = -1;                                                                      \
        _stolen;                                                                          \
    })

/* Reads /proc/self/stat into v[0..n-1] by field number (man 5 proc: 1 is
 * the pid; fields before the command name's closing parenthesis and
 * non-numeric ones read as 0).  Returns the last field number read, or -1
 * when the file cannot be read. */
int cf_proc_self_stat(unsigned long long *v, int n);
/* The same for process pid (0: this one); -1 when it is gone. */
int cf_proc_stat(pid_t pid, unsigned long long *v, int n);

/* Glob matching of '/'-separated paths, as fnmatch(FNM_PATHNAME) does it
 * ('*', '?' and '[...]' within one component; '\\' escapes), in time
 * bounded by the product of the lengths: glibc's fnmatch backtracks
 * without bound on patterns like "*a*a*a*a*b", and patterns here are a
 * tenant's.  CF_GLOB_PERIOD: a component's leading '.' matches only a '.'
 * of the pattern (FNM_PERIOD).  CF_GLOB_ANY_DEPTH: a leading "**" + "/"
 * (repeated or not) matches any number of leading components. */
enum { CF_GLOB_PERIOD = 1u << 0, CF_GLOB_ANY_DEPTH = 1u << 1 };
bool cf_glob_match(const char *pattern, const char *path, unsigned flags);

#endif
