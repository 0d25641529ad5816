/* Per-tenant quotas on expiring things in Redis: see cf_quota.h. */
#include "cf_quota.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define NKEYS (CF_QUOTA_BUCKETS + 1) /* the current bucket and the ones before it that may hold live things */
#define KEY_MAX 320

/* KEYS: the buckets, oldest first, the current one last.  ARGV: 1 bytes,
 * 2 max bytes (0: none), 3 max items (0: none), 4 when the current bucket
 * expires (unix ms), 5 "charge" or "read".  Returns {charged, bytes held,
 * items held}, what was held before any charge. */
static const cf_redis_script quota_script = {
    "quota",
    "local b, n = 0, 0\n"
    "for i = 1, #KEYS do\n"
    "  local v = redis.call('HMGET', KEYS[i], 'bytes', 'count')\n"
    "  b = b + (tonumber(v[1]) or 0)\n"
    "  n = n + (tonumber(v[2]) or 0)\n"
    "end\n"
    "if ARGV[5] ~= 'charge' then return {0, b, n} end\n"
    "local add, maxb, maxn = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "if (maxb > 0 and b + add > maxb) or (maxn > 0 and n + 1 > maxn) then return {0, b, n} end\n"
    "local k = KEYS[#KEYS]\n"
    "redis.call('HINCRBY', k, 'bytes', add)\n"
    "redis.call('HINCRBY', k, 'count', 1)\n"
    "redis.call('PEXPIREAT', k, ARGV[4])\n"
    "return {1, b, n}\n",
};

static int quota_eval(cf_redis *r, const char *kind, const char *scope, int64_t ttl_ms, int64_t now_ms,
                      const cf_quota *q, int64_t bytes, bool charge, bool *charged, cf_quota_usage *used,
                      cf_error *err)
{
    if (charged)
        *charged = false;
    memset(used, 0, sizeof(*used));
    if (ttl_ms <= 0 || now_ms <= 0 || bytes < 0)
        return cf_error_set(err, CF_E_INVALID, "quota %s: ttl, time and size must be positive", kind);
    /* The width is part of the key: buckets of another ttl (the operator
     * changed it) count times of their own, not these. */
    int64_t width = (ttl_ms + CF_QUOTA_BUCKETS - 1) / CF_QUOTA_BUCKETS;
    int64_t now_bucket = now_ms / width;
    char keys_store[NKEYS][KEY_MAX];
    const char *keys[NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        int64_t bucket = now_bucket - CF_QUOTA_BUCKETS + i;
        int n = snprintf(keys_store[i], KEY_MAX, "cf:quota:{%s/%s}:%" PRId64 ":%" PRId64, kind, scope, width,
                         bucket);
        if (n < 0 || n >= KEY_MAX)
            return cf_error_set(err, CF_E_INVALID, "quota %s: scope name too long", kind);
        keys[i] = keys_store[i];
    }
    char a_bytes[24], a_maxb[24], a_maxn[24], a_expire[24];
    snprintf(a_bytes, sizeof(a_bytes), "%" PRId64, bytes);
    snprintf(a_maxb, sizeof(a_maxb), "%" PRId64, q ? q->max_bytes : 0);
    snprintf(a_maxn, sizeof(a_maxn), "%" PRId64, q ? q->max_count : 0);
    snprintf(a_expire, sizeof(a_expire), "%" PRId64, (now_bucket + 1) * width + ttl_ms);
    const char *args[5] = {a_bytes, a_maxb, a_maxn, a_expire, charge ? "charge" : "read"};
    redisReply *rep = NULL;
    if (cf_redis_eval(r, &quota_script, NKEYS, keys, NULL, 5, args, NULL, &rep, err) < 0)
        return -1;
    int rc = 0;
    int64_t ok = 0;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 || cf_redis_reply_i64(rep->element[0], &ok, err) < 0 ||
        cf_redis_reply_i64(rep->element[1], &used->bytes, err) < 0 ||
        cf_redis_reply_i64(rep->element[2], &used->count, err) < 0)
        rc = cf_error_set(err, CF_E_REDIS, "quota %s: unexpected reply", kind);
    else if (charged)
        *charged = ok == 1;
    cf_redis_reply_free(rep);
    return rc;
}

int cf_quota_charge(cf_redis *r, const char *kind, const char *scope, int64_t ttl_ms, int64_t now_ms,
                    const cf_quota *q, int64_t bytes, bool *charged, cf_quota_usage *used, cf_error *err)
{
    return quota_eval(r, kind, scope, ttl_ms, now_ms, q, bytes, true, charged, used, err);
}

int cf_quota_usage_get(cf_redis *r, const char *kind, const char *scope, int64_t ttl_ms, int64_t now_ms,
                       cf_quota_usage *used, cf_error *err)
{
    return quota_eval(r, kind, scope, ttl_ms, now_ms, NULL, 0, false, NULL, used, err);
}
