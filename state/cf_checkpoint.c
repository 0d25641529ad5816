/* cf_checkpoint: per-thread checkpoint chains in Redis (see docs/STATE.md). */
#include "cf_checkpoint.h"
#include "cf_quota.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_state_int.h"
#include "cf_util.h"

#define CP_LIST_DEFAULT 100
#define CP_LIST_MAX 1000
#define CP_FIELDS 7

struct cf_checkpoint_store {
    cf_redis *r;
    const char *guard_key;   /* fencing (cf_checkpoint_set_guard): borrowed */
    const char *guard_value;
    char prefix[CF_STATE_PREFIX_MAX + 1];
    char scope[CF_STATE_NAME_MAX + 1]; /* cfg.id_prefix, "" for any */
    cf_checkpoint_config cfg;
    cf_decode_limits limits;
    /* The quota saves are charged to (cf_checkpoint_set_quota): "" none. */
    char quota_scope[CF_STATE_NAME_MAX + 1];
    int64_t quota_max_bytes;
    char quota_writer[CF_QUOTA_WRITER_MAX + 1]; /* its reservations' writer (the request): "" nameless */
};

#define CP_QUOTA_KIND "checkpoints"
#define CP_CHARGE_PER 512 /* a checkpoint's fields, and 3 x its key prefix: the save script's figure */


typedef struct cp_keys {
    char meta[CF_STATE_KEY_MAX];
    char idx[CF_STATE_KEY_MAX];
    char cpre[CF_STATE_KEY_MAX]; /* prefix of the per-checkpoint hashes */
    char latest[CF_STATE_KEY_MAX]; /* copy of the newest record */
    const char *v[3]; /* + the guard key, when one is set */
} cp_keys;

/* After a save (landed, failed, or its reply lost): the ledger measures
 * the thread again (cf_quota.h). */
static void quota_sync(cf_checkpoint_store *cs, const cp_keys *k)
{
    if (!cs->quota_scope[0])
        return;
    cf_error e;
    cf_error_clear(&e);
    (void)cf_quota_item(cs->r, CP_QUOTA_KIND, cs->quota_scope, k->meta, CF_QUOTA_THREAD, CF_QUOTA_ITEM_SYNC, 0, 0,
                        cs->quota_writer, NULL, NULL, &e);
}

void cf_checkpoint_config_init(cf_checkpoint_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->key_prefix = "cf:";
    cfg->max_per_thread = 100;
    cfg->ttl_us = INT64_C(7) * 24 * 3600 * 1000000;
    cfg->max_state_bytes = (size_t)16 << 20;
    cfg->max_meta_bytes = (size_t)64 << 10;
    cfg->limits = NULL;
}

cf_checkpoint_store *cf_checkpoint_store_new(cf_redis *r, const cf_checkpoint_config *cfg, cf_error *err)
{
    cf_checkpoint_config def;
    if (!cfg) {
        cf_checkpoint_config_init(&def);
        cfg = &def;
    }
    if (cf_state_store_check(r, cfg->key_prefix, "checkpoint store", err) < 0)
        return NULL;
    if (cfg->max_per_thread > 1000000 || cfg->ttl_us < 0 || (cfg->ttl_us > 0 && cfg->ttl_us < 1000) ||
        cfg->max_state_bytes == 0 || cfg->max_state_bytes > ((size_t)512 << 20) || cfg->max_meta_bytes == 0 ||
        cfg->max_meta_bytes > ((size_t)16 << 20)) {
        cf_error_set(err, CF_E_INVALID, "checkpoint store: max_per_thread, ttl_us or a size cap is out of range");
        return NULL;
    }
    cf_checkpoint_store *cs = calloc(1, sizeof(*cs));
    if (!cs) {
        cf_error_set(err, CF_E_NOMEM, "checkpoint store: out of memory");
        return NULL;
    }
    cs->r = r;
    cf_strlcpy(cs->prefix, cfg->key_prefix, sizeof(cs->prefix));
    cs->cfg = *cfg;
    cs->cfg.key_prefix = cs->prefix;
    if (cf_state_scope_set(cs->scope, sizeof(cs->scope), cfg->id_prefix, "checkpoint store", err) < 0) {
        free(cs);
        return NULL;
    }
    cs->cfg.id_prefix = cs->scope;
    if (cfg->limits) {
        cs->limits = *cfg->limits;
    } else {
        /* State is one big map: let its strings and blobs be as large as
         * the state itself, keep the default element and depth limits. */
        cs->limits = cf_decode_limits_default;
        size_t big = cfg->max_state_bytes > cfg->max_meta_bytes ? cfg->max_state_bytes : cfg->max_meta_bytes;
        cs->limits.max_total_bytes = big;
        cs->limits.max_str_bytes = big;
        cs->limits.max_bin_bytes = big;
    }
    cs->cfg.limits = &cs->limits;
    return cs;
}

void cf_checkpoint_store_destroy(cf_checkpoint_store *cs)
{
    free(cs);
}

static int cp_keys_init(const cf_checkpoint_store *cs, const char *thread, cp_keys *k, cf_error *err)
{
    if (cf_state_name_check(thread, "checkpoint thread", err) < 0 ||
        cf_state_scope_check(cs->scope, thread, "thread", err) < 0)
        return -1;
    if (cf_state_key(k->meta, sizeof(k->meta), err, "%s{cp:%s}:meta", cs->prefix, thread) < 0 ||
        cf_state_key(k->idx, sizeof(k->idx), err, "%s{cp:%s}:idx", cs->prefix, thread) < 0 ||
        cf_state_key(k->cpre, sizeof(k->cpre), err, "%s{cp:%s}:c:", cs->prefix, thread) < 0 ||
        cf_state_key(k->latest, sizeof(k->latest), err, "%s{cp:%s}:latest", cs->prefix, thread) < 0)
        return -1;
    k->v[0] = k->meta;
    k->v[1] = k->idx;
    return 0;
}

int cf_checkpoint_state_check(const cf_checkpoint_store *cs, const void *buf, size_t len, size_t cap, cf_error *err)
{
    if (!buf || len == 0)
        return cf_error_set(err, CF_E_INVALID, "checkpoint: empty msgpack value");
    if (len > cap)
        return cf_error_set(err, CF_E_LIMIT, "checkpoint: %zu bytes exceed the cap of %zu", len, cap);
    unsigned char b = *(const unsigned char *)buf;
    /* fixmap, map16, map32: state is addressed by keys, so nothing else. */
    if (!((b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf))
        return cf_error_set(err, CF_E_INVALID, "checkpoint: top-level msgpack value is not a map");
    if (cf_msgpack_validate(buf, len, &cs->limits, err) < 0)
        return cf_error_wrap(err, "checkpoint");
    return 0;
}

void cf_checkpoint_clear(cf_checkpoint *cp)
{
    if (!cp)
        return;
    free(cp->state);
    free(cp->meta);
    memset(cp, 0, sizeof(*cp));
}

void cf_checkpoints_clear(cf_checkpoints *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        cf_checkpoint_clear(&l->items[i]);
    free(l->items);
    memset(l, 0, sizeof(*l));
}

static int copy_name(char *dst, const redisReply *rep, bool allow_empty)
{
    if (!rep || rep->type != REDIS_REPLY_STRING || rep->len > CF_CHECKPOINT_ID_MAX)
        return -1;
    memcpy(dst, rep->str, rep->len);
    dst[rep->len] = '\0';
    if (rep->len == 0)
        return allow_empty ? 0 : -1;
    return cf_state_name_check(dst, "id", NULL);
}

/* Fills cp from 7 reply strings (id thread parent state meta created seq);
 * all of it is re-validated since it comes from Redis. */
static int parse_record(const cf_checkpoint_store *cs, redisReply **f, bool with_state, cf_checkpoint *cp,
                        cf_error *err)
{
    memset(cp, 0, sizeof(*cp));
    if (copy_name(cp->id, f[0], false) < 0 || copy_name(cp->thread, f[1], false) < 0 ||
        copy_name(cp->parent, f[2], true) < 0)
        return cf_error_set(err, CF_E_REDIS, "checkpoint: malformed id, thread or parent in Redis");
    if (f[3]->type != REDIS_REPLY_STRING || f[4]->type != REDIS_REPLY_STRING ||
        cf_redis_reply_i64(f[5], &cp->created_us, NULL) < 0 || cf_redis_reply_i64(f[6], &cp->writer_seq, NULL) < 0)
        return cf_error_set(err, CF_E_REDIS, "checkpoint %s: malformed record in Redis", cp->id);
    if (with_state) {
        if (f[3]->len > cs->cfg.max_state_bytes)
            return cf_error_set(err, CF_E_LIMIT, "checkpoint %s: stored state exceeds %zu bytes", cp->id,
                                cs->cfg.max_state_bytes);
        cp->state = (uint8_t *)cf_state_reply_dup(f[3], &cp->state_len);
        if (!cp->state)
            return cf_error_set(err, CF_E_NOMEM, "checkpoint: out of memory");
    }
    if (f[4]->len > 0) {
        if (f[4]->len > cs->cfg.max_meta_bytes)
            return cf_error_set(err, CF_E_LIMIT, "checkpoint %s: stored metadata exceeds %zu bytes", cp->id,
                                cs->cfg.max_meta_bytes);
        cp->meta = (uint8_t *)cf_state_reply_dup(f[4], &cp->meta_len);
        if (!cp->meta)
            return cf_error_set(err, CF_E_NOMEM, "checkpoint: out of memory");
    }
    return 0;
}

static const cf_quota_refusal cp_refusal = {
    .quota = "checkpoint",
    .items = "threads",
    .write = "save",
    .setting = "max-checkpoint-bytes",
    .remedy = "delete threads it no longer needs, or their checkpoints expire",
};

static int save_impl(cf_checkpoint_store *cs, const char *thread, bool rollback, const char *target,
                     const void *state, size_t state_len, const cf_checkpoint_save_opts *opts,
                     char id_out[CF_CHECKPOINT_ID_MAX + 1], cf_error *err)
{
    cf_checkpoint_save_opts none = {0};
    if (!opts)
        opts = &none;
    cp_keys k;
    if (cp_keys_init(cs, thread, &k, err) < 0)
        return -1;
    const char *parent_mode = "latest";
    const char *parent = "";
    if (rollback) {
        if (cf_state_name_check(target, "rollback target", err) < 0)
            return -1;
        parent = target;
    } else {
        if (cf_checkpoint_state_check(cs, state, state_len, cs->cfg.max_state_bytes, err) < 0)
            return cf_error_wrap(err, "thread %s: state", thread);
        if (opts->parent && !opts->parent[0]) {
            parent_mode = "none";
        } else if (opts->parent) {
            if (cf_state_name_check(opts->parent, "parent checkpoint id", err) < 0)
                return -1;
            parent_mode = "id";
            parent = opts->parent;
        }
        if (opts->meta_len > 0 &&
            cf_checkpoint_state_check(cs, opts->meta, opts->meta_len, cs->cfg.max_meta_bytes, err) < 0)
            return cf_error_wrap(err, "thread %s: metadata", thread);
    }
    if (opts->expected_latest && opts->expected_latest[0] &&
        cf_state_name_check(opts->expected_latest, "expected latest id", err) < 0)
        return -1;
    if (opts->writer_seq < 0)
        return cf_error_set(err, CF_E_INVALID, "thread %s: negative writer_seq", thread);

    char seq[24], maxc[24], ttl[24];
    cf_state_i64(seq, sizeof(seq), (long long)opts->writer_seq);
    cf_state_i64(maxc, sizeof(maxc), (long long)cs->cfg.max_per_thread);
    cf_state_i64(ttl, sizeof(ttl), cf_state_ttl_ms(cs->cfg.ttl_us));
    const char *args[13] = {k.cpre,
                            thread,
                            rollback ? "rollback" : "save",
                            parent_mode,
                            parent,
                            opts->expected_latest ? "id" : "any",
                            opts->expected_latest ? opts->expected_latest : "",
                            seq,
                            rollback ? "" : (const char *)state,
                            (!rollback && opts->meta_len) ? (const char *)opts->meta : "",
                            maxc,
                            ttl,
                            cs->guard_value ? cs->guard_value : ""};
    bool guarded = cs->guard_key != NULL;
    if (guarded)
        k.v[2] = cs->guard_key;
    size_t lens[13];
    for (size_t i = 0; i < 13; i++) /* state and meta (8, 9) are binary: never strlen them */
        lens[i] = (i == 8 || i == 9) ? 0 : strlen(args[i]);
    lens[8] = rollback ? 0 : state_len;
    lens[9] = rollback ? 0 : opts->meta_len;
    /* The quota: what the save may add at most (a new checkpoint, the
     * newest's copy, a new thread's keys).  A rollback copies one of the
     * thread's own states, whose size this side does not know: it is
     * measured once it landed (only operators' tools roll back). */
    int64_t grow = (rollback ? 0 : 2 * (int64_t)(state_len + opts->meta_len)) + CP_CHARGE_PER +
                   3 * (int64_t)strlen(k.cpre) + CF_QUOTA_CP_BASE;
    if (cs->quota_scope[0] && cs->quota_max_bytes > 0) {
        bool fits = false;
        cf_quota_usage u;
        if (cf_quota_item(cs->r, CP_QUOTA_KIND, cs->quota_scope, k.meta, CF_QUOTA_THREAD, CF_QUOTA_ITEM_GROW, grow,
                          cs->quota_max_bytes, cs->quota_writer, &fits, &u, err) < 0)
            return cf_error_wrap(err, "thread %s: quota", thread);
        if (!fits) {
            char subject[CF_STATE_NAME_MAX + 16];
            snprintf(subject, sizeof(subject), "thread %s", thread);
            return cf_quota_refuse(err, &cp_refusal, subject, cs->quota_scope, &u, grow, cs->quota_max_bytes);
        }
    }
    redisReply *rep = NULL;
    if (cf_redis_eval(cs->r, &cf_cp_script_save, guarded ? 3 : 2, k.v, NULL, guarded ? 13 : 12, args, lens, &rep,
                      err) < 0) {
        quota_sync(cs, &k);
        return cf_error_wrap(err, "thread %s: %s", thread, rollback ? "rollback" : "save");
    }
    int rc = cf_state_reply_head(rep, "cp_save", err);
    const char *w = rollback ? "rollback" : "save";
    if (rc < 0) {
    } else if (cf_redis_reply_is(rep->element[0], "ok") && rep->elements == 4) {
        char id[CF_CHECKPOINT_ID_MAX + 1];
        if (copy_name(id, rep->element[1], false) < 0)
            rc = cf_error_set(err, CF_E_REDIS, "thread %s: %s: bad id in reply", thread, w);
        else if (id_out)
            cf_strlcpy(id_out, id, CF_CHECKPOINT_ID_MAX + 1);
    } else if (cf_redis_reply_is(rep->element[0], "fenced")) {
        rc = cf_error_set(err, CF_E_FENCED, "thread %s: %s: fenced: this writer no longer holds %s", thread, w,
                          cs->guard_key);
    } else if (cf_redis_reply_is(rep->element[0], "stale")) {
        rc = cf_error_set(err, CF_E_CONFLICT,
                          "thread %s: %s: stale writer: writer_seq %" PRId64 " is older than %" PRId64, thread, w,
                          opts->writer_seq, cf_state_reply_elem_i64(rep, 1));
    } else if (cf_redis_reply_is(rep->element[0], "conflict")) {
        char latest[CF_CHECKPOINT_ID_MAX + 1] = "?";
        if (rep->elements > 1 && copy_name(latest, rep->element[1], true) < 0)
            cf_strlcpy(latest, "?", sizeof(latest));
        rc = cf_error_set(err, CF_E_CONFLICT, "thread %s: %s: latest is \"%s\", expected \"%s\"", thread, w, latest,
                          opts->expected_latest);
    } else if (cf_redis_reply_is(rep->element[0], "notfound")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "thread %s: %s: checkpoint %s does not exist", thread, w, parent);
    } else {
        rc = cf_error_set(err, CF_E_REDIS, "thread %s: %s: unexpected reply", thread, w);
    }
    cf_redis_reply_free(rep);
    quota_sync(cs, &k);
    return rc;
}

void cf_checkpoint_set_quota(cf_checkpoint_store *cs, const char *scope, int64_t max_bytes, const char *writer)
{
    bool on = scope && *scope && strlen(scope) <= CF_STATE_NAME_MAX;
    snprintf(cs->quota_scope, sizeof(cs->quota_scope), "%s", on ? scope : "");
    cs->quota_max_bytes = on && max_bytes > 0 ? max_bytes : 0;
    cf_quota_writer_set(cs->quota_writer, on ? writer : NULL);
}

void cf_checkpoint_set_guard(cf_checkpoint_store *cs, const char *key, const char *value)
{
    cs->guard_key = key && value ? key : NULL;
    cs->guard_value = key && value ? value : NULL;
}

int cf_checkpoint_save(cf_checkpoint_store *cs, const char *thread, const void *state, size_t state_len,
                       const cf_checkpoint_save_opts *opts, char id_out[CF_CHECKPOINT_ID_MAX + 1], cf_error *err)
{
    return save_impl(cs, thread, false, NULL, state, state_len, opts, id_out, err);
}

int cf_checkpoint_rollback(cf_checkpoint_store *cs, const char *thread, const char *target_id,
                           const cf_checkpoint_save_opts *opts, char id_out[CF_CHECKPOINT_ID_MAX + 1], cf_error *err)
{
    return save_impl(cs, thread, true, target_id, NULL, 0, opts, id_out, err);
}

/* One record by one HMGET (atomic on one key: no script needed).  1: the
 * key does not exist. */
static int read_record(cf_checkpoint_store *cs, const char *thread, const char *key, const char *what,
                       cf_checkpoint *out, cf_error *err)
{
    const char *argv[2 + CP_FIELDS] = {"HMGET", key, "id", "thread", "parent", "state", "meta", "created_us", "seq"};
    redisReply *rep = NULL;
    if (cf_redis_command_argv(cs->r, 2 + CP_FIELDS, argv, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "thread %s: %s", thread, what);
    int rc = 0;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != CP_FIELDS)
        rc = cf_error_set(err, CF_E_REDIS, "thread %s: %s: unexpected reply", thread, what);
    else if (rep->element[0]->type == REDIS_REPLY_NIL)
        rc = 1;
    else {
        /* Missing optional fields come back nil: treat as malformed. */
        for (size_t i = 0; i < CP_FIELDS && rc == 0; i++)
            if (rep->element[i]->type != REDIS_REPLY_STRING)
                rc = cf_error_set(err, CF_E_REDIS, "thread %s: %s: the record is incomplete", thread, what);
        if (rc == 0)
            rc = parse_record(cs, rep->element, true, out, err);
        if (rc < 0)
            cf_checkpoint_clear(out);
    }
    cf_redis_reply_free(rep);
    return rc;
}

int cf_checkpoint_get(cf_checkpoint_store *cs, const char *thread, const char *id, cf_checkpoint *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    cp_keys k;
    if (cp_keys_init(cs, thread, &k, err) < 0 || cf_state_name_check(id, "checkpoint id", err) < 0)
        return -1;
    char key[CF_STATE_KEY_MAX + CF_CHECKPOINT_ID_MAX];
    if (cf_state_key(key, sizeof(key), err, "%s%s", k.cpre, id) < 0)
        return -1;
    int rc = read_record(cs, thread, key, "get", out, err);
    if (rc == 1)
        return cf_error_set(err, CF_E_NOT_FOUND, "thread %s: no checkpoint %s", thread, id);
    return rc;
}

/* Parses {'ok', 7 fields * n}. */
static int parse_records(const cf_checkpoint_store *cs, const redisReply *rep, bool with_state, size_t max,
                         cf_checkpoints *out, cf_error *err)
{
    if ((rep->elements - 1) % CP_FIELDS != 0)
        return cf_error_set(err, CF_E_REDIS, "checkpoint: malformed list reply");
    size_t n = (rep->elements - 1) / CP_FIELDS;
    if (n > max)
        return cf_error_set(err, CF_E_REDIS, "checkpoint: list reply has %zu entries, asked for %zu", n, max);
    if (n == 0)
        return 0;
    out->items = calloc(n, sizeof(*out->items));
    if (!out->items)
        return cf_error_set(err, CF_E_NOMEM, "checkpoint: out of memory");
    for (size_t i = 0; i < n; i++) {
        redisReply **f = rep->element + 1 + i * CP_FIELDS;
        for (size_t j = 0; j < CP_FIELDS; j++)
            if (f[j]->type != REDIS_REPLY_STRING)
                return cf_error_set(err, CF_E_REDIS, "checkpoint: malformed record in list");
        out->n++;
        if (parse_record(cs, f, with_state, &out->items[i], err) < 0)
            return -1;
    }
    return 0;
}

/* The copy of the newest record, with what says whether to trust it: the
 * thread's id counter and index size must still be what they were when
 * the copy was written (copy_n, copy_card; docs/STATE.md).  0: *out is the
 * latest; 1: no usable copy (ask the script). */
static int read_latest_copy(cf_checkpoint_store *cs, const char *thread, const cp_keys *k, cf_checkpoint *out,
                            cf_error *err)
{
    const char *a0[2 + CP_FIELDS] = {"HMGET", k->latest, "id", "thread", "parent", "state", "meta", "created_us", "seq"};
    const char *a1[5] = {"HMGET", k->meta, "n", "copy_n", "copy_card"};
    const char *a2[2] = {"ZCARD", k->idx};
    cf_redis_cmd cmds[3] = {{2 + CP_FIELDS, a0, NULL}, {5, a1, NULL}, {2, a2, NULL}};
    redisReply *rep[3] = {NULL, NULL, NULL};
    if (cf_redis_pipeline(cs->r, cmds, 3, rep, err) < 0)
        return cf_error_wrap(err, "thread %s: latest", thread);
    int rc = 1;
    const redisReply *c = rep[0], *m = rep[1];
    int64_t card = -1, copy_card = -2;
    if (c->type != REDIS_REPLY_ARRAY || c->elements != CP_FIELDS || m->type != REDIS_REPLY_ARRAY ||
        m->elements != 3 || cf_redis_reply_i64(rep[2], &card, NULL) < 0) {
        rc = cf_error_set(err, CF_E_REDIS, "thread %s: latest: unexpected reply", thread);
    } else if (c->element[0]->type == REDIS_REPLY_STRING && m->element[0]->type == REDIS_REPLY_STRING &&
               m->element[1]->type == REDIS_REPLY_STRING && m->element[0]->len == m->element[1]->len &&
               memcmp(m->element[0]->str, m->element[1]->str, m->element[0]->len) == 0 &&
               cf_redis_reply_i64(m->element[2], &copy_card, NULL) == 0 && copy_card == card) {
        rc = 0;
        for (size_t i = 0; i < CP_FIELDS && rc == 0; i++)
            if (c->element[i]->type != REDIS_REPLY_STRING)
                rc = cf_error_set(err, CF_E_REDIS, "thread %s: latest: the record is incomplete", thread);
        if (rc == 0)
            rc = parse_record(cs, c->element, true, out, err);
        if (rc < 0)
            cf_checkpoint_clear(out);
    }
    for (int i = 0; i < 3; i++)
        cf_redis_reply_free(rep[i]);
    return rc;
}

int cf_checkpoint_latest(cf_checkpoint_store *cs, const char *thread, cf_checkpoint *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    cp_keys k;
    if (cp_keys_init(cs, thread, &k, err) < 0)
        return -1;
    /* Every save copies its record to the thread's latest key: one round
     * trip of plain reads.  Without a valid copy (no checkpoint, a thread
     * saved or trimmed by an older codefleet) the script finds the newest
     * and makes the copy. */
    int rc = read_latest_copy(cs, thread, &k, out, err);
    if (rc <= 0)
        return rc;
    const char *args[1] = {k.cpre};
    redisReply *rep = NULL;
    if (cf_redis_eval(cs->r, &cf_cp_script_latest, 2, k.v, NULL, 1, args, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "thread %s: latest", thread);
    rc = cf_state_reply_head(rep, "cp_latest", err);
    if (rc < 0) {
    } else if (cf_redis_reply_is(rep->element[0], "none")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "thread %s has no checkpoint", thread);
    } else if (cf_redis_reply_is(rep->element[0], "ok")) {
        cf_checkpoints l = {0};
        rc = parse_records(cs, rep, true, 1, &l, err);
        if (rc == 0 && l.n != 1)
            rc = cf_error_set(err, CF_E_REDIS, "thread %s: latest: malformed reply", thread);
        if (rc == 0) {
            *out = l.items[0];
            memset(&l.items[0], 0, sizeof(l.items[0]));
        }
        cf_checkpoints_clear(&l);
    } else {
        rc = cf_error_set(err, CF_E_REDIS, "thread %s: latest: unexpected reply", thread);
    }
    cf_redis_reply_free(rep);
    return rc;
}

static size_t clamp_limit(size_t limit)
{
    if (limit == 0)
        return CP_LIST_DEFAULT;
    return limit > CP_LIST_MAX ? CP_LIST_MAX : limit;
}

static int run_list_script(cf_checkpoint_store *cs, const char *thread, const cf_redis_script *script,
                           const cp_keys *k, int nargs, const char **args, bool with_state, size_t limit,
                           cf_checkpoints *out, cf_error *err)
{
    redisReply *rep = NULL;
    if (cf_redis_eval(cs->r, script, 2, k->v, NULL, nargs, args, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "thread %s: %s", thread, script->name);
    int rc = cf_state_reply_head(rep, script->name, err);
    if (rc < 0) {
    } else if (cf_redis_reply_is(rep->element[0], "notfound")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "thread %s: start checkpoint does not exist", thread);
    } else if (cf_redis_reply_is(rep->element[0], "ok")) {
        rc = parse_records(cs, rep, with_state, limit, out, err);
        if (rc < 0)
            cf_checkpoints_clear(out);
    } else {
        rc = cf_error_set(err, CF_E_REDIS, "thread %s: %s: unexpected reply", thread, script->name);
    }
    cf_redis_reply_free(rep);
    return rc;
}

int cf_checkpoint_list(cf_checkpoint_store *cs, const char *thread, const cf_checkpoint_query *q,
                       cf_checkpoints *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    cf_checkpoint_query def = {0};
    if (!q)
        q = &def;
    cp_keys k;
    if (cp_keys_init(cs, thread, &k, err) < 0)
        return -1;
    if (q->before_us < 0 || q->after_us < 0)
        return cf_error_set(err, CF_E_INVALID, "thread %s: list: negative time bound", thread);
    size_t limit = clamp_limit(q->limit);
    char maxs[32] = "+inf", mins[32] = "-inf", lim[24];
    if (q->before_us > 0)
        snprintf(maxs, sizeof(maxs), "(%" PRId64, q->before_us);
    if (q->after_us > 0)
        snprintf(mins, sizeof(mins), "(%" PRId64, q->after_us);
    cf_state_i64(lim, sizeof(lim), (long long)limit);
    const char *args[5] = {k.cpre, maxs, mins, lim, q->with_state ? "1" : "0"};
    return run_list_script(cs, thread, &cf_cp_script_list, &k, 5, args, q->with_state, limit, out, err);
}

int cf_checkpoint_history(cf_checkpoint_store *cs, const char *thread, const char *from_id, size_t limit,
                          bool with_state, cf_checkpoints *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    cp_keys k;
    if (cp_keys_init(cs, thread, &k, err) < 0)
        return -1;
    if (from_id && cf_state_name_check(from_id, "checkpoint id", err) < 0)
        return -1;
    limit = clamp_limit(limit);
    char lim[24];
    cf_state_i64(lim, sizeof(lim), (long long)limit);
    const char *args[4] = {k.cpre, from_id ? from_id : "", lim, with_state ? "1" : "0"};
    return run_list_script(cs, thread, &cf_cp_script_history, &k, 4, args, with_state, limit, out, err);
}

int cf_checkpoint_delete(cf_checkpoint_store *cs, const char *thread, const char *id, cf_error *err)
{
    cp_keys k;
    if (cp_keys_init(cs, thread, &k, err) < 0 || cf_state_name_check(id, "checkpoint id", err) < 0)
        return -1;
    const char *args[2] = {k.cpre, id};
    int64_t existed = 0;
    if (cf_state_eval_i64(cs->r, &cf_cp_script_delete, 2, k.v, 2, args, &existed, err) < 0)
        return cf_error_wrap(err, "thread %s: delete %s", thread, id);
    if (existed != 1)
        return cf_error_set(err, CF_E_NOT_FOUND, "thread %s: no checkpoint %s", thread, id);
    return 0;
}

int cf_checkpoint_delete_thread(cf_checkpoint_store *cs, const char *thread, cf_error *err)
{
    cp_keys k;
    if (cp_keys_init(cs, thread, &k, err) < 0)
        return -1;
    const char *args[1] = {k.cpre};
    int64_t n = 0;
    if (cf_state_eval_i64(cs->r, &cf_cp_script_delete_thread, 2, k.v, 1, args, &n, err) < 0)
        return cf_error_wrap(err, "thread %s: delete thread", thread);
    if (n < 0)
        return cf_error_set(err, CF_E_NOT_FOUND, "thread %s does not exist", thread);
    return 0;
}
