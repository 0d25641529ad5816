/* cf_error: the one error contract of codefleet.
 *
 * Fallible functions return 0 on success or -1 on failure and fill a
 * caller-provided cf_error (which may be NULL when the caller does not care).
 * Callers add context on the way up with cf_error_wrap().  Errors carry a
 * class (retriable or not) so the worker can decide between "try again" and
 * "answer internal_error".
 */
#ifndef CF_ERROR_H
#define CF_ERROR_H

#include <stdbool.h>
#include <stddef.h>

typedef enum cf_errcode {
    CF_OK = 0,
    CF_E_INVALID,     /* bad input: request, config, flags, wire bytes */
    CF_E_LIMIT,       /* a size, count or depth limit was exceeded */
    CF_E_NOMEM,       /* allocation failed */
    CF_E_SYSTEM,      /* a system call failed; sys_errno says which */
    CF_E_TIMEOUT,     /* an operation (not user code) timed out */
    CF_E_NOT_FOUND,
    CF_E_CONFLICT,    /* compare-and-set lost, stale writer */
    CF_E_UNSUPPORTED, /* control, language or feature not available */
    CF_E_KAFKA,       /* broker or client error */
    CF_E_REDIS,       /* Redis server or connection error */
    CF_E_SANDBOX,     /* the sandbox itself broke: never the user's fault */
    CF_E_FENCED,      /* a write refused: the writer no longer holds its lease */
    CF_E__COUNT
} cf_errcode;

#define CF_ERROR_MSG_MAX 512

typedef struct cf_error {
    cf_errcode code;
    bool retriable;   /* worth retrying the same operation later */
    int sys_errno;    /* errno saved at the failure point, 0 if none */
    char msg[CF_ERROR_MSG_MAX];
} cf_error;

/* Sets code and message (printf-style); returns -1 so callers can
 * `return cf_error_set(err, ...)`.  err may be NULL. */
int cf_error_set(cf_error *err, cf_errcode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like cf_error_set, appends ": strerror(errnum)" and records errnum. */
int cf_error_set_errno(cf_error *err, cf_errcode code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Marks err retriable (or not); returns -1.  err may be NULL. */
int cf_error_set_retriable(cf_error *err, bool retriable);

/* Prefixes the existing message with context: "context: old message".
 * Keeps code, errno and class.  Returns -1.  err may be NULL. */
int cf_error_wrap(cf_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void cf_error_clear(cf_error *err);

/* Stable lower-case name of a code ("invalid", "kafka", ...). */
const char *cf_errcode_name(cf_errcode code);

#endif
