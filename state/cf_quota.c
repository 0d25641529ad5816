/* Per-tenant quotas on expiring things in Redis: see cf_quota.h. */
#include "cf_quota.h"
#include "cf_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define KEY_MAX 320
#define STR_(x) #x
#define STR(x) STR_(x)
#define CLEAN_MAX "1000" /* expired slots dropped per call: bounds a call's time */

/* KEYS: 1 the totals and per-slot hash, 2 the slots by their end (zset).
 * ARGV: 1 mode (charge, refund, read), 2 bytes, 3 max bytes, 4 max items,
 * 5 ttl ms, 6 short ttl ms, 7 grace percent, 8 slot (refund), 9 extra
 * bytes of a short keep.  Returns {ttl kept (ms, 0 none), slot, bytes
 * held, items held, expires at (unix ms), bytes charged}. */
/* (Negations are written 0 - x: Lua's -0 reaches Redis as "-0", which
 * HINCRBY refuses as not an integer.) */
static const cf_redis_script quota_script = {
    "quota",
    "local G = " STR(CF_QUOTA_SLOT_MS) "\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, " CLEAN_MAX ")\n"
    "for _, s in ipairs(old) do\n"
    "  local v = redis.call('HMGET', KEYS[1], 'b:' .. s, 'n:' .. s)\n"
    /* (Nothing written for a part already gone: an expired hash is not
     * brought back without its expiry.) */
    "  local pb, pn = tonumber(v[1]) or 0, tonumber(v[2]) or 0\n"
    "  if pb ~= 0 then redis.call('HINCRBY', KEYS[1], 'bytes', 0 - pb) end\n"
    "  if pn ~= 0 then redis.call('HINCRBY', KEYS[1], 'count', 0 - pn) end\n"
    "  if v[1] or v[2] then redis.call('HDEL', KEYS[1], 'b:' .. s, 'n:' .. s) end\n"
    "  redis.call('ZREM', KEYS[2], s)\n"
    "end\n"
    "local b = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')\n"
    "local n = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')\n"
    "local add = tonumber(ARGV[2])\n"
    "if ARGV[1] == 'read' then return {0, 0, b, n, 0, 0} end\n"
    "if ARGV[1] == 'refund' then\n"
    "  local s = ARGV[8]\n"
    "  if redis.call('ZSCORE', KEYS[2], s) then\n"
    "    local v = redis.call('HMGET', KEYS[1], 'b:' .. s, 'n:' .. s)\n"
    "    local rb = math.min(add, tonumber(v[1]) or 0)\n"
    "    local rn = math.min(1, tonumber(v[2]) or 0)\n"
    "    redis.call('HINCRBY', KEYS[1], 'b:' .. s, 0 - rb)\n"
    "    redis.call('HINCRBY', KEYS[1], 'n:' .. s, 0 - rn)\n"
    "    redis.call('HINCRBY', KEYS[1], 'bytes', 0 - rb)\n"
    "    redis.call('HINCRBY', KEYS[1], 'count', 0 - rn)\n"
    "  end\n"
    "  return {0, 0, b, n, 0, 0}\n"
    "end\n"
    "local maxb, maxn = tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local ttl = tonumber(ARGV[5])\n"
    "local function fits(scale)\n"
    "  return (maxb == 0 or b + add <= maxb * scale) and (maxn == 0 or n + 1 <= maxn * scale)\n"
    "end\n"
    "if not fits(1) then\n"
    "  ttl = tonumber(ARGV[6])\n"
    "  add = add + tonumber(ARGV[9])\n"
    "  if ttl <= 0 or not fits(1 + tonumber(ARGV[7]) / 100) then return {0, 0, b, n, 0, 0} end\n"
    "end\n"
    "local s = math.ceil((now + ttl) / G)\n"
    "redis.call('HINCRBY', KEYS[1], 'b:' .. s, add)\n"
    "redis.call('HINCRBY', KEYS[1], 'n:' .. s, 1)\n"
    "redis.call('HINCRBY', KEYS[1], 'bytes', add)\n"
    "redis.call('HINCRBY', KEYS[1], 'count', 1)\n"
    "redis.call('ZADD', KEYS[2], s * G, s)\n"
    /* Both keys outlive their last slot by a slot, then vanish: an idle
     * profile leaves nothing behind. */
    "local keep = s * G - now + G\n"
    "for i = 1, 2 do\n"
    "  if redis.call('PTTL', KEYS[i]) < keep then redis.call('PEXPIRE', KEYS[i], keep) end\n"
    "end\n"
    "return {ttl, s, b, n, now + ttl, add}\n",
};

typedef struct quota_keys {
    char totals[KEY_MAX];
    char slots[KEY_MAX];
} quota_keys;

static int keys_init(quota_keys *k, const char *kind, const char *scope, cf_error *err)
{
    int a = snprintf(k->totals, KEY_MAX, "cf:quota:{%s/%s}", kind, scope);
    int b = snprintf(k->slots, KEY_MAX, "cf:quota:{%s/%s}:slots", kind, scope);
    if (a < 0 || a >= KEY_MAX || b < 0 || b >= KEY_MAX)
        return cf_error_set(err, CF_E_INVALID, "quota %s: scope name too long", kind);
    return 0;
}

static int quota_eval(cf_redis *r, const char *kind, const char *scope, const char *mode, const cf_quota *q,
                      int64_t ttl_ms, int64_t bytes, int64_t slot, cf_quota_outcome *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    if (bytes < 0 || (strcmp(mode, "charge") == 0 && ttl_ms <= 0))
        return cf_error_set(err, CF_E_INVALID, "quota %s: size and ttl must be positive", kind);
    quota_keys k;
    if (keys_init(&k, kind, scope, err) < 0)
        return -1;
    const char *keys[2] = {k.totals, k.slots};
    char a[8][24];
    snprintf(a[0], sizeof(a[0]), "%" PRId64, bytes);
    snprintf(a[1], sizeof(a[1]), "%" PRId64, q ? q->max_bytes : 0);
    snprintf(a[2], sizeof(a[2]), "%" PRId64, q ? q->max_count : 0);
    snprintf(a[3], sizeof(a[3]), "%" PRId64, ttl_ms);
    snprintf(a[4], sizeof(a[4]), "%" PRId64, q ? q->short_ttl_ms : 0);
    snprintf(a[5], sizeof(a[5]), "%" PRId64, q ? q->grace_percent : 0);
    snprintf(a[6], sizeof(a[6]), "%" PRId64, slot);
    snprintf(a[7], sizeof(a[7]), "%" PRId64, q ? q->short_extra_bytes : 0);
    const char *args[9] = {mode, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]};
    redisReply *rep = NULL;
    if (cf_redis_eval(r, &quota_script, 2, keys, NULL, 9, args, NULL, &rep, err) < 0)
        return -1;
    int rc = 0;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 6 ||
        cf_redis_reply_i64(rep->element[0], &out->ttl_ms, err) < 0 ||
        cf_redis_reply_i64(rep->element[1], &out->slot, err) < 0 ||
        cf_redis_reply_i64(rep->element[2], &out->held.bytes, err) < 0 ||
        cf_redis_reply_i64(rep->element[3], &out->held.count, err) < 0 ||
        cf_redis_reply_i64(rep->element[4], &out->expire_at_ms, err) < 0 ||
        cf_redis_reply_i64(rep->element[5], &out->charged_bytes, err) < 0) {
        memset(out, 0, sizeof(*out));
        rc = cf_error_set(err, CF_E_REDIS, "quota %s: unexpected reply", kind);
    }
    cf_redis_reply_free(rep);
    return rc;
}

int cf_quota_charge(cf_redis *r, const char *kind, const char *scope, const cf_quota *q, int64_t ttl_ms,
                    int64_t bytes, cf_quota_outcome *out, cf_error *err)
{
    return quota_eval(r, kind, scope, "charge", q, ttl_ms, bytes, 0, out, err);
}

int cf_quota_refund(cf_redis *r, const char *kind, const char *scope, int64_t slot, int64_t bytes, cf_error *err)
{
    cf_quota_outcome out;
    return quota_eval(r, kind, scope, "refund", NULL, 0, bytes, slot, &out, err);
}

int cf_quota_usage_get(cf_redis *r, const char *kind, const char *scope, cf_quota_usage *used, cf_error *err)
{
    cf_quota_outcome out;
    int rc = quota_eval(r, kind, scope, "read", NULL, 0, 0, 0, &out, err);
    *used = out.held;
    return rc;
}

/* The item ledger (cf_quota_item).  KEYS: 1 totals (bytes, count, the
 * reconcile cursor), 2 items (item -> bytes), 3 due (item by when to look
 * at it again, Unix ms), 4 reserved (item -> when a grow reserved it: a
 * write in flight, whose charge nothing but its own sync lowers for
 * RESERVED_MS), 5 writers (item -> "<that ms> <writer>").  ARGV: 1 mode (grow, sync, get), 2 item, 3 kind
 * of item ('ws' | 'cp'), 4 bytes to grow by, 5 max bytes, 6 the writer
 * ("" nameless).  Returns {fits
 * (1/0), bytes held, items held, the item's charge}.
 *
 * An item's charge is measured from its own keys, read by name: a
 * workspace's meta (stored: the distinct blobs it references; nfiles), a
 * thread's meta (held: its checkpoints) and newest copy.  So whatever
 * writers did, and in whatever order their replies came, a sync sets what
 * is there; a grow is that measure plus the write's worst case, until the
 * write's own sync.  Integers always go to Redis as fmt() strings (Lua's
 * tostring gives 1e+08 for large numbers, which some Redis versions pass
 * on). */
static const cf_redis_script item_script = {
    "quota_item",
    "local function fmt(n) return string.format('%d', n) end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local kind = ARGV[3]\n"
    "local RESERVED_MS = 300000\n"
    /* A write in flight on it (reserved in the last five minutes): the
     * time its reservation is kept until, else nil. */
    /* A reservation is "<Unix ms>" in KEYS[4], as an older codefleet
     * writes and reads it; its writer "<the same ms> <writer>" in KEYS[5],
     * which older scripts neither read nor clear, so a writer counts only
     * beside the very reservation it was written with.  Returns when the
     * reservation lapses, and its writer (nil: nameless). */
    "local function in_flight(it)\n"
    /* (A leading number only: a build of 62a43a5 wrote "<ms> <writer>"
     * here, read as a nameless reservation.) */
    "  local at = tonumber(string.match(redis.call('HGET', KEYS[4], it) or '', '^%d+') or '')\n"
    "  if not at or now - at >= RESERVED_MS then return nil end\n"
    "  local w = redis.call('HGET', KEYS[5], it)\n"
    "  local wat, who = string.match(w or '', '^(%d+) (.+)$')\n"
    "  if tonumber(wat or '') ~= at then who = nil end\n"
    "  return at + RESERVED_MS, who\n"
    "end\n"
    "local function unreserve(it)\n"
    "  redis.call('HDEL', KEYS[4], it)\n"
    "  redis.call('HDEL', KEYS[5], it)\n"
    "end\n"
    /* What an item holds now (0: its key is gone). */
    "local function measure(it)\n"
    "  if redis.call('EXISTS', it) == 0 then return 0 end\n"
    "  if kind == 'ws' then\n"
    "    local m = redis.call('HMGET', it, 'stored', 'nfiles', 'bytes', 'nblobs', 'hist_bytes', 'path_bytes')\n"
    "    local function n(i) return tonumber(m[i] or '') or 0 end\n"
    "    local stored = tonumber(m[1] or '') or n(3)\n"
    "    return stored + n(5) + n(6) + " STR(CF_QUOTA_WS_BASE) " + " STR(CF_QUOTA_WS_PER_FILE) " * n(2)\n"
    "           + (" STR(CF_QUOTA_WS_PER_BLOB) " + #it - 4 + 2 + 64) * n(4)\n"
    "  end\n"
    "  local base = string.sub(it, 1, #it - 4)\n"
    "  local latest = base .. 'latest'\n"
    "  return (tonumber(redis.call('HGET', it, 'held') or '') or 0) + " STR(CF_QUOTA_CP_BASE) "\n"
    "         + redis.call('HSTRLEN', latest, 'state') + redis.call('HSTRLEN', latest, 'meta')\n"
    "end\n"
    "local function set(it, v)\n"
    "  local old = tonumber(redis.call('HGET', KEYS[2], it) or '')\n"
    "  if v <= 0 then\n"
    "    if old then\n"
    "      if old ~= 0 then redis.call('HINCRBY', KEYS[1], 'bytes', fmt(0 - old)) end\n"
    "      redis.call('HINCRBY', KEYS[1], 'count', -1)\n"
    "      redis.call('HDEL', KEYS[2], it)\n"
    "    end\n"
    "    redis.call('ZREM', KEYS[3], it)\n"
    "    return\n"
    "  end\n"
    "  if not old then redis.call('HINCRBY', KEYS[1], 'count', 1) end\n"
    "  redis.call('HSET', KEYS[2], it, fmt(v))\n"
    "  if v ~= (old or 0) then redis.call('HINCRBY', KEYS[1], 'bytes', fmt(v - (old or 0))) end\n"
    /* When to look again: its key's expiry; a day for a key without one or
     * not there yet (a reservation for a write still to come). */
    "  local p = redis.call('PTTL', it)\n"
    "  if p < 0 then p = 86400000 end\n"
    "  redis.call('ZADD', KEYS[3], fmt(now + p), it)\n"
    "end\n"
    /* Due items are measured again (a reservation whose write never came
     * back, a key gone, a TTL renewed meanwhile). */
    "local function remeasure(it)\n"
    "  local until_ms = in_flight(it)\n"
    "  if until_ms then redis.call('ZADD', KEYS[3], fmt(until_ms), it) return end\n"
    "  unreserve(it)\n"
    "  set(it, measure(it))\n"
    "end\n"
    "local it, mode = ARGV[2], ARGV[1]\n"
    "if mode ~= 'get' then\n"
    "  for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', fmt(now), 'LIMIT', 0, 100)) do remeasure(d) end\n"
    "end\n"
    "local function totals()\n"
    "  local v = redis.call('HMGET', KEYS[1], 'bytes', 'count')\n"
    "  return tonumber(v[1] or '0') or 0, tonumber(v[2] or '0') or 0\n"
    "end\n"
    "if mode == 'sync' then\n"
    "  unreserve(it)\n"
    "  set(it, measure(it))\n"
    "end\n"
    "if mode == 'grow' then\n"
    "  local old = tonumber(redis.call('HGET', KEYS[2], it) or '0') or 0\n"
    /* Another writer's reservation on the same item still in flight: this
     * one stacks on it rather than replacing it.  The same writer's own
     * (a request redelivered after its worker died between reserving and
     * syncing) is replaced: stacking on it would refuse the retry near the
     * quota until the dead reservation lapsed.  A nameless writer always
     * stacks. */
    "  local base = measure(it)\n"
    "  local until_ms, who = in_flight(it)\n"
    "  if until_ms and old > base and (ARGV[6] == '' or who ~= ARGV[6]) then base = old end\n"
    "  local want = base + tonumber(ARGV[4])\n"
    "  local maxb = tonumber(ARGV[5])\n"
    "  local b, n = totals()\n"
    "  if maxb > 0 and want > old and b - old + want > maxb then\n"
    /* Before refusing: measure the next few hundred items again (a cursor
     * in the totals: each refusal goes on where the last stopped), so that
     * deleted workspaces and writes that never came back stop counting
     * without one script walking every item. */
    "    local r = redis.call('HSCAN', KEYS[2], redis.call('HGET', KEYS[1], 'cursor') or '0', 'COUNT', 500)\n"
    "    redis.call('HSET', KEYS[1], 'cursor', r[1])\n"
    "    for i = 1, #r[2], 2 do\n"
    "      if r[2][i] ~= it then remeasure(r[2][i]) end\n"
    "    end\n"
    "    b, n = totals()\n"
    "    if b - old + want > maxb then return {0, fmt(b), fmt(n), fmt(old)} end\n"
    "  end\n"
    "  set(it, want)\n"
    "  redis.call('HSET', KEYS[4], it, fmt(now))\n"
    "  if ARGV[6] ~= '' then redis.call('HSET', KEYS[5], it, fmt(now) .. ' ' .. ARGV[6])\n"
    "  else redis.call('HDEL', KEYS[5], it) end\n"
    "end\n"
    "local b, n = totals()\n"
    "return {1, fmt(b), fmt(n), redis.call('HGET', KEYS[2], it) or '0'}\n",
};

static int item_eval(cf_redis *r, const char *kind, const char *scope, const char *item, const char *item_kind,
                     const char *mode, int64_t bytes, int64_t max_bytes, const char *writer, bool *fits,
                     cf_quota_usage *held, int64_t *charge, cf_error *err)
{
    if (bytes < 0 || !item || !*item)
        return cf_error_set(err, CF_E_INVALID, "quota %s: bad item", kind);
    if (!writer)
        writer = "";
    if (strlen(writer) > CF_QUOTA_WRITER_MAX || strpbrk(writer, " \n"))
        return cf_error_set(err, CF_E_INVALID, "quota %s: bad writer", kind);
    char totals[KEY_MAX], items[KEY_MAX], due[KEY_MAX], resv[KEY_MAX], writers[KEY_MAX];
    int a = snprintf(totals, KEY_MAX, "cf:quota:{%s/%s}", kind, scope);
    int b = snprintf(items, KEY_MAX, "cf:quota:{%s/%s}:items", kind, scope);
    int c = snprintf(due, KEY_MAX, "cf:quota:{%s/%s}:due", kind, scope);
    int d = snprintf(resv, KEY_MAX, "cf:quota:{%s/%s}:reserved", kind, scope);
    int e = snprintf(writers, KEY_MAX, "cf:quota:{%s/%s}:writers", kind, scope);
    if (a < 0 || a >= KEY_MAX || b < 0 || b >= KEY_MAX || c < 0 || c >= KEY_MAX || d < 0 || d >= KEY_MAX || e < 0 ||
        e >= KEY_MAX)
        return cf_error_set(err, CF_E_INVALID, "quota %s: scope name too long", kind);
    const char *keys[5] = {totals, items, due, resv, writers};
    char sb[24], sm[24];
    snprintf(sb, sizeof(sb), "%" PRId64, bytes);
    snprintf(sm, sizeof(sm), "%" PRId64, max_bytes > 0 ? max_bytes : 0);
    const char *args[6] = {mode, item, item_kind, sb, sm, writer};
    redisReply *rep = NULL;
    if (cf_redis_eval(r, &item_script, 5, keys, NULL, 6, args, NULL, &rep, err) < 0)
        return -1;
    int64_t ok = 0, hb = 0, hn = 0, ch = 0;
    int rc = 0;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 || cf_redis_reply_i64(rep->element[0], &ok, err) < 0 ||
        cf_redis_reply_i64(rep->element[1], &hb, err) < 0 || cf_redis_reply_i64(rep->element[2], &hn, err) < 0 ||
        cf_redis_reply_i64(rep->element[3], &ch, err) < 0)
        rc = cf_error_set(err, CF_E_REDIS, "quota %s: unexpected reply", kind);
    cf_redis_reply_free(rep);
    if (rc == 0) {
        if (fits)
            *fits = ok == 1;
        if (held)
            *held = (cf_quota_usage){.bytes = hb, .count = hn};
        if (charge)
            *charge = ch;
    }
    return rc;
}

int cf_quota_item(cf_redis *r, const char *kind, const char *scope, const char *item, cf_quota_item_kind item_kind,
                  cf_quota_item_mode mode, int64_t grow, int64_t max_bytes, const char *writer, bool *fits,
                  cf_quota_usage *held, cf_error *err)
{
    return item_eval(r, kind, scope, item, item_kind == CF_QUOTA_WORKSPACE ? "ws" : "cp",
                     mode == CF_QUOTA_ITEM_GROW ? "grow" : "sync", grow, max_bytes, writer, fits, held, NULL, err);
}

int cf_quota_item_get(cf_redis *r, const char *kind, const char *scope, const char *item, int64_t *bytes,
                      cf_quota_usage *held, cf_error *err)
{
    return item_eval(r, kind, scope, item ? item : "-", "ws", "get", 0, 0, NULL, NULL, held, bytes, err);
}

int cf_quota_refuse(cf_error *err, const cf_quota_refusal *how, const char *subject, const char *scope,
                    const cf_quota_usage *held, int64_t grow, int64_t max_bytes)
{
    char h[32], g[32], q[32];
    cf_format_size(held->bytes, h, sizeof(h));
    cf_format_size(grow, g, sizeof(g));
    cf_format_size(max_bytes, q, sizeof(q));
    int rc = cf_error_set(err, CF_E_LIMIT,
                          "%s: over the %s quota of '%s': its %" PRId64 " %s hold %s, this %s may add %s, the quota "
                          "is %s (%s; %s)",
                          subject, how->quota, scope, held->count, how->items, h, how->write, g, q, how->setting,
                          how->remedy);
    /* Unlike a cap, it may pass later: once the tenant made room. */
    cf_error_set_retriable(err, true);
    return rc;
}

void cf_quota_writer_set(char *dst, const char *writer)
{
    bool named = writer && strlen(writer) <= CF_QUOTA_WRITER_MAX && !strpbrk(writer, " \n");
    snprintf(dst, CF_QUOTA_WRITER_MAX + 1, "%s", named ? writer : "");
}
