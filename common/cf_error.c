#include "cf_error.h"

#include "cf_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <errno.h>
#include <string.h>

static const char *const errcode_names[CF_E__COUNT] = {
    [CF_OK] = "ok",
    [CF_E_INVALID] = "invalid",
    [CF_E_LIMIT] = "limit",
    [CF_E_NOMEM] = "nomem",
    [CF_E_SYSTEM] = "system",
    [CF_E_TIMEOUT] = "timeout",
    [CF_E_NOT_FOUND] = "not_found",
    [CF_E_CONFLICT] = "conflict",
    [CF_E_FENCED] = "fenced",
    [CF_E_UNSUPPORTED] = "unsupported",
    [CF_E_KAFKA] = "kafka",
    [CF_E_REDIS] = "redis",
    [CF_E_SANDBOX] = "sandbox",
};

const char *cf_errcode_name(cf_errcode code)
{
    if ((unsigned)code >= CF_E__COUNT)
        return "unknown";
    return errcode_names[code];
}

void cf_error_clear(cf_error *err)
{
    if (!err)
        return;
    err->code = CF_OK;
    err->retriable = false;
    err->sys_errno = 0;
    err->msg[0] = '\0';
}

static void error_vset(cf_error *err, cf_errcode code, const char *fmt, va_list ap)
{
    err->code = code;
    err->retriable = false;
    err->sys_errno = 0;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
}

int cf_error_set(cf_error *err, cf_errcode code, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    error_vset(err, code, fmt, ap);
    va_end(ap);
    return -1;
}

int cf_error_set_errno(cf_error *err, cf_errcode code, int errnum, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    error_vset(err, code, fmt, ap);
    va_end(ap);
    err->sys_errno = errnum;
    size_t used = strnlen(err->msg, sizeof(err->msg));
    char ebuf[128];
    const char *estr = strerror_r(errnum, ebuf, sizeof(ebuf));
    snprintf(err->msg + used, sizeof(err->msg) - used, ": %s", estr);
    /* Interrupted or temporarily exhausted resources are worth another try. */
    err->retriable = errnum == EINTR || errnum == EAGAIN || errnum == ENOMEM || errnum == EMFILE ||
                     errnum == ENFILE || errnum == ENOSPC;
    return -1;
}

int cf_error_set_retriable(cf_error *err, bool retriable)
{
    if (err)
        err->retriable = retriable;
    return -1;
}

int cf_error_wrap(cf_error *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[CF_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    /* "prefix: old", truncated to fit (truncation is expected and fine). */
    char old[CF_ERROR_MSG_MAX];
    memcpy(old, err->msg, sizeof(old));
    old[sizeof(old) - 1] = '\0';
    size_t used = cf_strlcpy(err->msg, prefix, sizeof(err->msg));
    if (used < sizeof(err->msg) - 1) {
        used += cf_strlcpy(err->msg + used, ": ", sizeof(err->msg) - used);
        if (used < sizeof(err->msg) - 1)
            cf_strlcpy(err->msg + used, old, sizeof(err->msg) - used);
    }
    return -1;
}
