/* Helpers shared by cf_workspace and cf_checkpoint. */
#include "cf_state_int.h"
#include "cf_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cf_state_name_check(const char *name, const char *what, cf_error *err)
{
    if (!name || !name[0])
        return cf_error_set(err, CF_E_INVALID, "%s is empty", what);
    size_t n = strnlen(name, CF_STATE_NAME_MAX + 1);
    if (n > CF_STATE_NAME_MAX)
        return cf_error_set(err, CF_E_INVALID, "%s longer than %d bytes", what, CF_STATE_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-';
        if (!ok)
            return cf_error_set(err, CF_E_INVALID, "%s has a byte outside [A-Za-z0-9._-] at offset %zu", what, i);
    }
    return 0;
}

int cf_state_scope_set(char *dst, size_t cap, const char *scope, const char *what, cf_error *err)
{
    dst[0] = '\0';
    if (!scope || !scope[0] || strcmp(scope, "*") == 0)
        return 0;
    size_t n = strlen(scope);
    char last = scope[n - 1];
    if (strcmp(scope, "none") != 0 &&
        (n >= cap || !cf_name_valid(scope, n, n) || (last != '.' && last != '-' && last != '_')))
        return cf_error_set(err, CF_E_INVALID,
                            "%s: id prefix must be '*', 'none' or [A-Za-z0-9._-] ending in '.', '-' or '_'", what);
    cf_strlcpy(dst, scope, cap);
    return 0;
}

int cf_state_scope_check(const char *scope, const char *id, const char *what, cf_error *err)
{
    if (!scope[0])
        return 0;
    size_t n = strlen(scope);
    if (strcmp(scope, "none") != 0 && strncmp(id, scope, n) == 0 && id[n])
        return 0;
    /* id passed cf_state_name_check: it is printable. */
    if (strcmp(scope, "none") == 0)
        return cf_error_set(err, CF_E_INVALID, "%s '%s' refused: this client may name no workspace or thread "
                                               "(state-prefix none)", what, id);
    return cf_error_set(err, CF_E_INVALID,
                        "%s '%s' is not this client's: its ids start with '%s' (state-prefix)", what, id, scope);
}

int cf_state_prefix_check(const char *prefix, cf_error *err)
{
    if (!prefix)
        return cf_error_set(err, CF_E_INVALID, "key prefix is NULL");
    size_t n = strnlen(prefix, CF_STATE_PREFIX_MAX + 1);
    if (n > CF_STATE_PREFIX_MAX)
        return cf_error_set(err, CF_E_INVALID, "key prefix longer than %d bytes", CF_STATE_PREFIX_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)prefix[i];
        if (c <= 0x20 || c >= 0x7f || c == '{' || c == '}')
            return cf_error_set(err, CF_E_INVALID, "key prefix: bad byte at offset %zu", i);
    }
    return 0;
}

int cf_state_key(char *buf, size_t cap, cf_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap)
        return cf_error_set(err, CF_E_LIMIT, "redis key too long");
    return 0;
}

char *cf_state_reply_dup(const redisReply *rep, size_t *len)
{
    if (!rep || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_STATUS))
        return NULL;
    char *s = malloc(rep->len + 1);
    if (!s)
        return NULL;
    if (rep->len)
        memcpy(s, rep->str, rep->len);
    s[rep->len] = '\0';
    if (len)
        *len = rep->len;
    return s;
}

const char *cf_state_i64(char *buf, size_t cap, long long v)
{
    snprintf(buf, cap, "%lld", v);
    return buf;
}

int cf_state_store_check(const cf_redis *r, const char *key_prefix, const char *what, cf_error *err)
{
    if (!r)
        return cf_error_set(err, CF_E_INVALID, "%s: no redis handle", what);
    if (cf_state_prefix_check(key_prefix, err) < 0)
        return cf_error_wrap(err, "%s", what);
    return 0;
}

long long cf_state_ttl_ms(int64_t ttl_us)
{
    /* Round a positive TTL up so sub-millisecond values do not mean "none". */
    return (long long)((ttl_us + 999) / 1000);
}

int cf_state_reply_head(const redisReply *rep, const char *script, cf_error *err)
{
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 || !rep->element[0] ||
        rep->element[0]->type != REDIS_REPLY_STRING)
        return cf_error_set(err, CF_E_REDIS, "%s: malformed script reply", script);
    return 0;
}

int64_t cf_state_reply_elem_i64(const redisReply *rep, size_t i)
{
    int64_t v = -1;
    if (i < rep->elements && cf_redis_reply_i64(rep->element[i], &v, NULL) == 0)
        return v;
    return -1;
}

int cf_state_eval_i64(cf_redis *r, const cf_redis_script *script, int nkeys, const char *const *keys, int nargs,
                      const char *const *args, int64_t *out, cf_error *err)
{
    redisReply *rep = NULL;
    if (cf_redis_eval(r, script, nkeys, keys, NULL, nargs, args, NULL, &rep, err) < 0)
        return -1;
    int rc = cf_redis_reply_i64(rep, out, err);
    cf_redis_reply_free(rep);
    return rc;
}
