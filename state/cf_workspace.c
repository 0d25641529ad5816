/* cf_workspace: versioned file workspaces in Redis (see docs/STATE.md). */
#include "cf_workspace.h"
#include "cf_quota.h"

#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema.h"
#include "cf_state_int.h"
#include "cf_util.h"

#define WS_META_STR_MAX 128
/* An uploaded blob nothing references yet expires after this, if the
 * client that uploaded it could not remove it (it died, or Redis went away
 * between upload and commit); a commit that finds it gone uploads it again.
 * The commit follows the upload within one round trip. */
#define WS_UPLOAD_GRACE_MS "60000"
/* Commit: times the blobs are uploaded when one vanished before the
 * commit; snapshot: times it is read when a blob vanished under it. */
#define WS_ATTEMPTS 3
#define WS_BLOB_ID_LEN 64 /* sha256, lowercase hex */
#define WS_BLOB_ID_MAX 128 /* ids read back (format-1 ids are shorter) */

struct cf_workspace_store {
    cf_redis *r;
    const char *guard_key;   /* fencing (cf_workspace_set_guard): borrowed */
    const char *guard_value;
    char prefix[CF_STATE_PREFIX_MAX + 1];
    char scope[CF_STATE_NAME_MAX + 1]; /* cfg.id_prefix, "" for any */
    cf_workspace_config cfg;
    /* The quota writes are charged to (cf_workspace_set_quota): "" none. */
    char quota_scope[CF_STATE_NAME_MAX + 1];
    int64_t quota_max_bytes;
    char quota_writer[CF_QUOTA_WRITER_MAX + 1]; /* its reservations' writer (the request): "" nameless */
};

/* The quota ledger's kind for workspaces (each charged what the ledger
 * measures: the distinct blobs it holds, files and retained history, and
 * an estimate of its keys: cf_quota.h). */
#define WS_QUOTA_KIND "workspaces"

typedef struct ws_keys {
    char meta[CF_STATE_KEY_MAX];
    char files[CF_STATE_KEY_MAX];
    char refs[CF_STATE_KEY_MAX];
    char hist[CF_STATE_KEY_MAX];
    char legacy_blobs[CF_STATE_KEY_MAX]; /* format 1's blob hash */
    char blob_prefix[CF_STATE_KEY_MAX];  /* + blob id = a blob's key */
    const char *v[5]; /* meta, files, refs, hist + the guard key or legacy_blobs */
} ws_keys;

void cf_workspace_config_init(cf_workspace_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->key_prefix = "cf:";
    cfg->max_file_bytes = (size_t)8 << 20;
    cfg->max_files = 1000;
    cfg->max_total_bytes = (size_t)64 << 20;
    cfg->max_path_bytes = 1024;
    cfg->max_component_bytes = 255;
    cfg->ttl_us = INT64_C(24) * 3600 * 1000000;
    cfg->history = 16;
}

cf_workspace_store *cf_workspace_store_new(cf_redis *r, const cf_workspace_config *cfg, cf_error *err)
{
    cf_workspace_config def;
    if (!cfg) {
        cf_workspace_config_init(&def);
        cfg = &def;
    }
    if (cf_state_store_check(r, cfg->key_prefix, "workspace store", err) < 0)
        return NULL;
    /* Bounds keep Lua arithmetic exact (doubles) and keys/args reasonable. */
    if (cfg->max_file_bytes == 0 || cfg->max_file_bytes > ((size_t)512 << 20) || cfg->max_files == 0 ||
        cfg->max_files > 1000000 || cfg->max_total_bytes == 0 || cfg->max_total_bytes > ((size_t)1 << 30) ||
        cfg->max_path_bytes == 0 || cfg->max_path_bytes > 4096 || cfg->max_component_bytes == 0 ||
        cfg->max_component_bytes > 4096 || cfg->ttl_us < 0 || (cfg->ttl_us > 0 && cfg->ttl_us < 1000) ||
        cfg->history > 100000) {
        cf_error_set(err, CF_E_INVALID, "workspace store: a cap, ttl_us or history is out of range");
        return NULL;
    }
    cf_workspace_store *ws = calloc(1, sizeof(*ws));
    if (!ws) {
        cf_error_set(err, CF_E_NOMEM, "workspace store: out of memory");
        return NULL;
    }
    ws->r = r;
    cf_strlcpy(ws->prefix, cfg->key_prefix, sizeof(ws->prefix));
    ws->cfg = *cfg;
    ws->cfg.key_prefix = ws->prefix;
    if (cf_state_scope_set(ws->scope, sizeof(ws->scope), cfg->id_prefix, "workspace store", err) < 0) {
        free(ws);
        return NULL;
    }
    ws->cfg.id_prefix = ws->scope;
    return ws;
}

void cf_workspace_store_destroy(cf_workspace_store *ws)
{
    free(ws);
}

static int ws_keys_init(const cf_workspace_store *ws, const char *id, ws_keys *k, cf_error *err)
{
    if (cf_state_name_check(id, "workspace id", err) < 0 || cf_state_scope_check(ws->scope, id, "workspace", err) < 0)
        return -1;
    if (cf_state_key(k->meta, sizeof(k->meta), err, "%s{ws:%s}:meta", ws->prefix, id) < 0 ||
        cf_state_key(k->files, sizeof(k->files), err, "%s{ws:%s}:files", ws->prefix, id) < 0 ||
        cf_state_key(k->refs, sizeof(k->refs), err, "%s{ws:%s}:refs", ws->prefix, id) < 0 ||
        cf_state_key(k->hist, sizeof(k->hist), err, "%s{ws:%s}:hist", ws->prefix, id) < 0 ||
        cf_state_key(k->legacy_blobs, sizeof(k->legacy_blobs), err, "%s{ws:%s}:blobs", ws->prefix, id) < 0 ||
        cf_state_key(k->blob_prefix, sizeof(k->blob_prefix), err, "%s{ws:%s}:b:", ws->prefix, id) < 0)
        return -1;
    k->v[0] = k->meta;
    k->v[1] = k->files;
    k->v[2] = k->refs;
    k->v[3] = k->hist;
    k->v[4] = k->legacy_blobs;
    return 0;
}

static bool reply_says_format(const redisReply *rep)
{
    return rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 && cf_redis_reply_is(rep->element[0], "format");
}

/* Moves a workspace written by a codefleet before content-addressed blobs
 * (format 1) to format 2, in place and atomically. */
static int ws_migrate(cf_workspace_store *ws, const ws_keys *k, const char *id, cf_error *err)
{
    const char *keys[5] = {k->meta, k->files, k->refs, k->hist, k->legacy_blobs};
    redisReply *rep = NULL;
    if (cf_redis_eval(ws->r, &cf_ws_script_migrate, 5, keys, NULL, 0, NULL, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "workspace %s: migrate to format 2", id);
    int rc = cf_state_reply_head(rep, "ws_migrate", err);
    if (rc == 0 && !cf_redis_reply_is(rep->element[0], "ok") && !cf_redis_reply_is(rep->element[0], "notfound"))
        rc = cf_error_set(err, CF_E_REDIS, "workspace %s: migrate: unexpected reply", id);
    cf_redis_reply_free(rep);
    return rc;
}

/* Runs a workspace script; one that answers {'format'} met a format-1
 * workspace, which is migrated before the script is asked again (once). */
static int ws_eval(cf_workspace_store *ws, const ws_keys *k, const char *id, const cf_redis_script *script, int nkeys,
                   const char *const *keys, int nargs, const char *const *args, const size_t *lens, redisReply **rep,
                   cf_error *err)
{
    for (int attempt = 0;; attempt++) {
        if (cf_redis_eval(ws->r, script, nkeys, keys, NULL, nargs, args, lens, rep, err) < 0)
            return -1;
        if (attempt > 0 || !reply_says_format(*rep))
            return 0;
        cf_redis_reply_free(*rep);
        *rep = NULL;
        if (ws_migrate(ws, k, id, err) < 0)
            return -1;
    }
}

int cf_workspace_path_check(const cf_workspace_store *ws, const char *path, cf_error *err)
{
    if (!path || !path[0])
        return cf_error_set(err, CF_E_INVALID, "workspace path is empty");
    size_t max = ws->cfg.max_path_bytes;
    size_t n = strnlen(path, max + 1);
    if (n > max)
        return cf_error_set(err, CF_E_INVALID, "workspace path longer than %zu bytes", max);
    /* Paths travel as msgpack strings (a listing, changed_paths): one that
     * is not UTF-8 would make every later answer naming it undecodable. */
    if (!cf_utf8_valid((const uint8_t *)path, n))
        return cf_error_set(err, CF_E_INVALID, "workspace path is not valid UTF-8");
    /* What the messages show of it: at most 64 bytes, never half a
     * character. */
    int shown = (int)(n < 64 ? n : 64 - cf_utf8_incomplete_tail((const uint8_t *)path, 64));
    if (path[0] == '/')
        return cf_error_set(err, CF_E_INVALID, "workspace path is absolute: %.*s", shown, path);
    size_t comp_start = 0;
    for (size_t i = 0; i <= n; i++) {
        unsigned char c = (unsigned char)path[i];
        if (i < n && (c < 0x20 || c == 0x7f))
            return cf_error_set(err, CF_E_INVALID, "workspace path has a control byte at offset %zu", i);
        if (i == n || c == '/') {
            size_t clen = i - comp_start;
            const char *comp = path + comp_start;
            if (clen == 0)
                return cf_error_set(err, CF_E_INVALID, "workspace path has an empty component: %.*s", shown, path);
            if ((clen == 1 && comp[0] == '.') || (clen == 2 && comp[0] == '.' && comp[1] == '.'))
                return cf_error_set(err, CF_E_INVALID, "workspace path has a '.' or '..' component: %.*s", shown,
                                    path);
            if (clen > ws->cfg.max_component_bytes)
                return cf_error_set(err, CF_E_INVALID, "workspace path component longer than %zu bytes",
                                    ws->cfg.max_component_bytes);
            comp_start = i + 1;
        }
    }
    return 0;
}

static int meta_str_check(const char *s, const char *what, cf_error *err)
{
    size_t n = strnlen(s, WS_META_STR_MAX + 1);
    if (n > WS_META_STR_MAX)
        return cf_error_set(err, CF_E_INVALID, "workspace %s longer than %d bytes", what, WS_META_STR_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
            return cf_error_set(err, CF_E_INVALID, "workspace %s has a control byte", what);
    return 0;
}

void cf_workspace_set_quota(cf_workspace_store *ws, const char *scope, int64_t max_bytes, const char *writer)
{
    bool on = scope && *scope && strlen(scope) <= CF_STATE_NAME_MAX;
    snprintf(ws->quota_scope, sizeof(ws->quota_scope), "%s", on ? scope : "");
    ws->quota_max_bytes = on && max_bytes > 0 ? max_bytes : 0;
    cf_quota_writer_set(ws->quota_writer, on ? writer : NULL);
}

static const cf_quota_refusal ws_refusal = {
    .quota = "workspace",
    .items = "workspaces",
    .write = "write",
    .setting = "max-workspace-bytes",
    .remedy = "delete workspaces it no longer needs, or they expire when idle",
};

/* Before a write that may add up to `grow` bytes to workspace id: reserve
 * them in its profile's ledger, refused (CF_E_LIMIT) past its quota.
 * Nothing without a quota, and no reservation without a cap (the write is
 * then only measured afterwards). */
static int quota_grow(cf_workspace_store *ws, const char *id, const ws_keys *k, int64_t grow, cf_error *err)
{
    if (!ws->quota_scope[0] || ws->quota_max_bytes <= 0)
        return 0;
    bool fits = false;
    cf_quota_usage held;
    if (cf_quota_item(ws->r, WS_QUOTA_KIND, ws->quota_scope, k->meta, CF_QUOTA_WORKSPACE, CF_QUOTA_ITEM_GROW, grow,
                      ws->quota_max_bytes, ws->quota_writer, &fits, &held, err) < 0)
        return cf_error_wrap(err, "workspace %s: quota", id);
    if (!fits) {
        char subject[CF_STATE_NAME_MAX + 16];
        snprintf(subject, sizeof(subject), "workspace %s", id);
        return cf_quota_refuse(err, &ws_refusal, subject, ws->quota_scope, &held, grow, ws->quota_max_bytes);
    }
    return 0;
}

/* After the write (landed, failed, or its reply lost): the ledger measures
 * the workspace again.  A failure here leaves the reservation until the
 * item is next measured (its next write, its due time, or a refusal's
 * pass): it errs towards refusing. */
static void quota_sync(cf_workspace_store *ws, const ws_keys *k)
{
    if (!ws->quota_scope[0])
        return;
    cf_error e;
    cf_error_clear(&e);
    (void)cf_quota_item(ws->r, WS_QUOTA_KIND, ws->quota_scope, k->meta, CF_QUOTA_WORKSPACE, CF_QUOTA_ITEM_SYNC, 0, 0,
                        ws->quota_writer, NULL, NULL, &e);
}

int cf_workspace_create(cf_workspace_store *ws, const char *id, const char *project, const char *session,
                        cf_error *err)
{
    ws_keys k;
    if (ws_keys_init(ws, id, &k, err) < 0)
        return -1;
    project = project ? project : "";
    session = session ? session : "";
    if (meta_str_check(project, "project", err) < 0 || meta_str_check(session, "session", err) < 0)
        return -1;
    char now[24], ttl[24], hist[24];
    cf_state_i64(now, sizeof(now), (long long)cf_now_us());
    cf_state_i64(ttl, sizeof(ttl), cf_state_ttl_ms(ws->cfg.ttl_us));
    cf_state_i64(hist, sizeof(hist), (long long)ws->cfg.history);
    const char *args[5] = {project, session, now, ttl, hist};
    if (quota_grow(ws, id, &k, CF_QUOTA_WS_BASE, err) < 0)
        return -1;
    redisReply *rep = NULL;
    if (cf_redis_eval(ws->r, &cf_ws_script_create, 4, k.v, NULL, 5, args, NULL, &rep, err) < 0) {
        quota_sync(ws, &k);
        return cf_error_wrap(err, "workspace %s: create", id);
    }
    int rc = cf_state_reply_head(rep, "ws_create", err);
    if (rc == 0 && cf_redis_reply_is(rep->element[0], "exists"))
        rc = cf_error_set(err, CF_E_CONFLICT, "workspace %s already exists", id);
    else if (rc == 0 && !cf_redis_reply_is(rep->element[0], "ok"))
        rc = cf_error_set(err, CF_E_REDIS, "workspace %s: create: unexpected reply", id);
    cf_redis_reply_free(rep);
    quota_sync(ws, &k);
    return rc;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Validates a whole batch in C so that bad input never reaches Redis. */
static int commit_check(const cf_workspace_store *ws, const cf_ws_file *puts, size_t nputs,
                        const char *const *deletes, size_t ndeletes, cf_error *err)
{
    if ((nputs && !puts) || (ndeletes && !deletes))
        return cf_error_set(err, CF_E_INVALID, "workspace commit: NULL file list");
    if (nputs > ws->cfg.max_files)
        return cf_error_set(err, CF_E_LIMIT, "workspace commit: %zu files exceed the cap of %zu", nputs,
                            ws->cfg.max_files);
    if (ndeletes > ws->cfg.max_files)
        return cf_error_set(err, CF_E_LIMIT, "workspace commit: %zu deletes exceed the file cap of %zu", ndeletes,
                            ws->cfg.max_files);
    size_t total = 0;
    for (size_t i = 0; i < nputs; i++) {
        if (cf_workspace_path_check(ws, puts[i].path, err) < 0)
            return -1;
        if (puts[i].len && !puts[i].data)
            return cf_error_set(err, CF_E_INVALID, "workspace commit: %s: NULL data", puts[i].path);
        if (puts[i].len > ws->cfg.max_file_bytes)
            return cf_error_set(err, CF_E_LIMIT, "workspace commit: %s: %zu bytes exceed the file cap of %zu",
                                puts[i].path, puts[i].len, ws->cfg.max_file_bytes);
        total += puts[i].len;
        if (total > ws->cfg.max_total_bytes)
            return cf_error_set(err, CF_E_LIMIT, "workspace commit: files exceed the total cap of %zu bytes",
                                ws->cfg.max_total_bytes);
    }
    for (size_t i = 0; i < ndeletes; i++)
        if (cf_workspace_path_check(ws, deletes[i], err) < 0)
            return -1;
    size_t n = nputs + ndeletes;
    if (n < 2)
        return 0;
    const char **sorted = malloc(n * sizeof(*sorted));
    if (!sorted)
        return cf_error_set(err, CF_E_NOMEM, "workspace commit: out of memory");
    for (size_t i = 0; i < nputs; i++)
        sorted[i] = puts[i].path;
    for (size_t i = 0; i < ndeletes; i++)
        sorted[nputs + i] = deletes[i];
    qsort(sorted, n, sizeof(*sorted), cmp_str_ptr);
    int rc = 0;
    for (size_t i = 1; i < n; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            rc = cf_error_set(err, CF_E_INVALID, "workspace commit: path listed twice: %.64s", sorted[i]);
            break;
        }
    free(sorted);
    return rc;
}

void cf_workspace_set_guard(cf_workspace_store *ws, const char *key, const char *value)
{
    ws->guard_key = key && value ? key : NULL;
    ws->guard_value = key && value ? value : NULL;
}

static int blob_id(const void *data, size_t len, char out[WS_BLOB_ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[32];
    unsigned int mdlen = 0;
    static const unsigned char none[1] = {0};
    if (EVP_Digest(len ? data : none, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != sizeof(md))
        return -1;
    for (size_t i = 0; i < sizeof(md); i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[WS_BLOB_ID_LEN] = '\0';
    return 0;
}

/* Whether bytes are those their blob id names (sha256).  Ids that are not
 * a sha256 (kept from format 1) cannot be checked. */
static bool blob_matches(const redisReply *bid, const void *data, size_t len)
{
    if (bid->len != WS_BLOB_ID_LEN)
        return true;
    char want[WS_BLOB_ID_LEN + 1];
    if (blob_id(data, len, want) < 0)
        return false;
    return memcmp(want, bid->str, WS_BLOB_ID_LEN) == 0;
}

/* Uploads the bytes of each distinct blob, in one pipeline:
 *   SET <blob key> <bytes> NX PX <grace>
 * A blob already there is normally the same bytes under a longer TTL (a
 * referenced one) and must keep that TTL; but it may be damaged (a bad
 * write, a hand edit), so those are written again with XX KEEPTTL in a
 * second pipeline.  created[i] tells whether this call made blob i (so a
 * commit that does not land can remove what it added). */
static int upload_blobs(cf_workspace_store *ws, const ws_keys *k, const cf_ws_file *puts, size_t nputs,
                        const char (*bid)[WS_BLOB_ID_LEN + 1], bool *created, cf_error *err)
{
    if (nputs == 0)
        return 0;
    cf_redis_cmd *cmds = calloc(nputs, sizeof(*cmds));
    const char **argv = calloc(nputs * 6, sizeof(*argv));
    size_t *lens = calloc(nputs * 6, sizeof(*lens));
    size_t *which = calloc(nputs, sizeof(*which));
    char(*keys)[CF_STATE_KEY_MAX + WS_BLOB_ID_LEN] = calloc(nputs, sizeof(*keys));
    redisReply **replies = calloc(nputs, sizeof(*replies));
    int rc = 0;
    if (!cmds || !argv || !lens || !which || !keys || !replies) {
        rc = cf_error_set(err, CF_E_NOMEM, "workspace: out of memory");
        goto out;
    }
    static const char empty[1] = "";
    size_t n = 0;
    for (size_t i = 0; i < nputs; i++) {
        created[i] = false;
        bool dup = false;
        for (size_t j = 0; j < i && !dup; j++)
            dup = memcmp(bid[i], bid[j], WS_BLOB_ID_LEN) == 0;
        if (dup)
            continue;
        snprintf(keys[n], sizeof(keys[n]), "%s%s", k->blob_prefix, bid[i]);
        const char **a = argv + n * 6;
        size_t *l = lens + n * 6;
        a[0] = "SET";
        a[1] = keys[n];
        a[2] = puts[i].len ? (const char *)puts[i].data : empty;
        a[3] = "NX";
        a[4] = "PX";
        a[5] = WS_UPLOAD_GRACE_MS;
        for (int j = 0; j < 6; j++)
            l[j] = j == 2 ? puts[i].len : strlen(a[j]);
        cmds[n] = (cf_redis_cmd){.argc = 6, .argv = a, .lens = l};
        which[n] = i;
        n++;
    }
    if (cf_redis_pipeline(ws->r, cmds, n, replies, err) < 0) {
        rc = cf_error_wrap(err, "upload of file contents");
        goto out;
    }
    size_t again = 0;
    for (size_t c = 0; c < n; c++) {
        bool made = replies[c]->type != REDIS_REPLY_NIL;
        created[which[c]] = made;
        cf_redis_reply_free(replies[c]);
        replies[c] = NULL;
        if (!made) { /* rewrite in place, same command slots */
            const char **a = argv + c * 6;
            size_t *l = lens + c * 6;
            a[3] = "XX";
            a[4] = "KEEPTTL";
            l[3] = 2;
            l[4] = 7;
            cmds[again++] = (cf_redis_cmd){.argc = 5, .argv = a, .lens = l};
        }
    }
    if (again > 0) {
        if (cf_redis_pipeline(ws->r, cmds, again, replies, err) < 0) {
            rc = cf_error_wrap(err, "upload of file contents");
            goto out;
        }
        for (size_t c = 0; c < again; c++)
            cf_redis_reply_free(replies[c]);
    }
out:
    free(cmds);
    free(argv);
    free(lens);
    free(which);
    free(keys);
    free(replies);
    return rc;
}

/* A commit that did not land: the blobs this client created go again,
 * unless a commit of the same bytes by someone else references them by
 * now (checked in the script).  Best effort: what stays expires. */
static void unupload(cf_workspace_store *ws, const ws_keys *k, const char (*bid)[WS_BLOB_ID_LEN + 1],
                     const bool *created, size_t nputs)
{
    const char **args = calloc(nputs ? nputs : 1, sizeof(*args));
    if (!args)
        return;
    int n = 0;
    for (size_t i = 0; i < nputs; i++)
        if (created[i])
            args[n++] = bid[i];
    if (n > 0) {
        cf_error e;
        redisReply *rep = NULL;
        if (cf_redis_eval(ws->r, &cf_ws_script_unupload, 4, k->v, NULL, n, args, NULL, &rep, &e) == 0)
            cf_redis_reply_free(rep);
    }
    free(args);
}

/* Blob ids: the sha256 of the bytes, so equal contents are stored once
 * and an upload repeated after a lost reply writes nothing new.  *out
 * (NULL for no puts) is the caller's to free. */
static int blob_ids(const char *id, const cf_ws_file *puts, size_t nputs, char (**out)[WS_BLOB_ID_LEN + 1],
                    cf_error *err)
{
    char(*bid)[WS_BLOB_ID_LEN + 1] = nputs ? calloc(nputs, sizeof(*bid)) : NULL;
    *out = NULL;
    if (nputs && !bid)
        return cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
    for (size_t i = 0; i < nputs; i++) {
        if (blob_id(puts[i].data, puts[i].len, bid[i]) < 0) {
            free(bid);
            return cf_error_set(err, CF_E_NOMEM, "workspace %s: cannot hash %s", id, puts[i].path);
        }
    }
    *out = bid;
    return 0;
}

/* The commit script's arguments: nine numbers, then each put's path,
 * size and blob id, each delete's path, and the guard's value last. */
typedef struct commit_args {
    const char **args;
    size_t *lens;
    size_t nargs;
    char (*sizes)[24]; /* the puts' sizes as text */
    char num[9][24];
} commit_args;

/* Frees what commit_args_build allocated (the numbers live in ca). */
static void commit_args_free(commit_args *ca)
{
    free(ca->args);
    free(ca->lens);
    free(ca->sizes);
}

/* The nine numbers: expected revision, now, the caps, the counts and
 * whether a delete of a missing file fails (strict). */
static void commit_args_numbers(const cf_workspace_store *ws, int64_t expected_rev, size_t nputs, size_t ndeletes,
                                bool strict, commit_args *ca)
{
    cf_state_i64(ca->num[0], 24, (long long)expected_rev);
    cf_state_i64(ca->num[1], 24, (long long)cf_now_us());
    cf_state_i64(ca->num[2], 24, (long long)ws->cfg.max_files);
    cf_state_i64(ca->num[3], 24, (long long)ws->cfg.max_total_bytes);
    cf_state_i64(ca->num[4], 24, (long long)ws->cfg.max_file_bytes);
    cf_state_i64(ca->num[5], 24, (long long)ws->cfg.max_path_bytes);
    cf_state_i64(ca->num[6], 24, (long long)nputs);
    cf_state_i64(ca->num[7], 24, (long long)ndeletes);
    cf_strlcpy(ca->num[8], strict ? "1" : "0", 24);
    for (size_t i = 0; i < 9; i++) {
        ca->args[i] = ca->num[i];
        ca->lens[i] = strlen(ca->num[i]);
    }
}

/* Builds ca (commit_args_free frees it; nothing is left on failure). */
static int commit_args_build(const cf_workspace_store *ws, const char *id, int64_t expected_rev,
                             const cf_ws_file *puts, size_t nputs, const char (*bid)[WS_BLOB_ID_LEN + 1],
                             const char *const *deletes, size_t ndeletes, bool strict, commit_args *ca,
                             cf_error *err)
{
    bool guarded = ws->guard_key != NULL;
    ca->nargs = 9 + 3 * nputs + ndeletes + (guarded ? 1 : 0);
    ca->args = calloc(ca->nargs, sizeof(*ca->args));
    ca->lens = calloc(ca->nargs, sizeof(*ca->lens));
    ca->sizes = nputs ? calloc(nputs, sizeof(*ca->sizes)) : NULL;
    if (!ca->args || !ca->lens || (nputs && !ca->sizes)) {
        commit_args_free(ca);
        return cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
    }
    commit_args_numbers(ws, expected_rev, nputs, ndeletes, strict, ca);
    const char **args = ca->args;
    size_t *lens = ca->lens;
    for (size_t i = 0; i < nputs; i++) {
        cf_state_i64(ca->sizes[i], sizeof(ca->sizes[i]), (long long)puts[i].len);
        args[9 + i] = puts[i].path;
        lens[9 + i] = strlen(puts[i].path);
        args[9 + nputs + i] = ca->sizes[i];
        lens[9 + nputs + i] = strlen(ca->sizes[i]);
        args[9 + 2 * nputs + i] = bid[i];
        lens[9 + 2 * nputs + i] = WS_BLOB_ID_LEN;
    }
    for (size_t i = 0; i < ndeletes; i++) {
        args[9 + 3 * nputs + i] = deletes[i];
        lens[9 + 3 * nputs + i] = strlen(deletes[i]);
    }
    if (guarded) {
        args[ca->nargs - 1] = ws->guard_value;
        lens[ca->nargs - 1] = strlen(ws->guard_value);
    }
    return 0;
}

/* The bytes go first, with plain pipelined SETs outside the script; the
 * script then only checks they are there and swaps the manifest.  A blob
 * can vanish in between (an unreferenced one whose grace ran out): the
 * script says so and the upload is repeated.  *rep: the script's last
 * reply (the caller frees it). */
static int commit_send(cf_workspace_store *ws, const ws_keys *k, const char *id, const cf_ws_file *puts, size_t nputs,
                       const char (*bid)[WS_BLOB_ID_LEN + 1], const commit_args *ca, redisReply **rep, cf_error *err)
{
    bool guarded = ws->guard_key != NULL;
    const char *keys[5] = {k->meta, k->files, k->refs, k->hist, ws->guard_key};
    int rc = 0;
    bool *created = nputs ? calloc(nputs, sizeof(*created)) : NULL;
    bool *made = nputs ? calloc(nputs, sizeof(*made)) : NULL;
    if (nputs && (!created || !made))
        rc = cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
    for (int attempt = 0; rc == 0 && attempt < WS_ATTEMPTS; attempt++) {
        cf_redis_reply_free(*rep);
        *rep = NULL;
        if (upload_blobs(ws, k, puts, nputs, bid, made, err) < 0) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < nputs; i++)
            created[i] = created[i] || made[i];
        if (ws_eval(ws, k, id, &cf_ws_script_commit, guarded ? 5 : 4, keys, (int)ca->nargs, ca->args, ca->lens, rep,
                    err) < 0) {
            rc = -1;
            break;
        }
        if (!((*rep)->type == REDIS_REPLY_ARRAY && (*rep)->elements >= 1 &&
              cf_redis_reply_is((*rep)->element[0], "missing")))
            break;
    }
    /* Anything but a landed commit leaves no bytes behind (an ambiguous
     * outcome, a lost connection, is the exception: the grace TTL). */
    bool landed = rc == 0 && *rep && (*rep)->type == REDIS_REPLY_ARRAY && (*rep)->elements >= 1 &&
                  cf_redis_reply_is((*rep)->element[0], "ok");
    if (!landed && rc == 0)
        unupload(ws, k, bid, created, nputs);
    free(created);
    free(made);
    return rc;
}

/* The commit script's "limit" answer: which cap the commit would break. */
static int commit_limit_error(const cf_workspace_store *ws, const char *id, const redisReply *rep, cf_error *err)
{
    const redisReply *kind = rep->elements > 1 ? rep->element[1] : NULL;
    if (cf_redis_reply_is(kind, "files"))
        return cf_error_set(err, CF_E_LIMIT, "workspace %s: commit would leave %" PRId64 " files, cap is %zu", id,
                            cf_state_reply_elem_i64(rep, 2), ws->cfg.max_files);
    if (cf_redis_reply_is(kind, "bytes"))
        return cf_error_set(err, CF_E_LIMIT, "workspace %s: commit would leave %" PRId64 " bytes, cap is %zu", id,
                            cf_state_reply_elem_i64(rep, 2), ws->cfg.max_total_bytes);
    return cf_error_set(err, CF_E_LIMIT, "workspace %s: a file exceeds the cap of %zu bytes", id,
                        ws->cfg.max_file_bytes);
}

/* What the commit script answered: the new revision, or why not. */
static int commit_reply(const cf_workspace_store *ws, const char *id, int64_t expected_rev, const redisReply *rep,
                        int64_t *new_rev, cf_error *err)
{
    int rc = cf_state_reply_head(rep, "ws_commit", err);
    if (rc < 0)
        return rc;
    const redisReply *what = rep->element[0];
    if (cf_redis_reply_is(what, "ok")) {
        int64_t rev = cf_state_reply_elem_i64(rep, 1);
        if (rev < 0)
            return cf_error_set(err, CF_E_REDIS, "workspace %s: commit: bad revision in reply", id);
        if (new_rev)
            *new_rev = rev;
        return rc;
    }
    if (cf_redis_reply_is(what, "fenced"))
        return cf_error_set(err, CF_E_FENCED, "workspace %s: fenced: this writer no longer holds %s", id,
                            ws->guard_key);
    if (cf_redis_reply_is(what, "conflict")) {
        int64_t cur = cf_state_reply_elem_i64(rep, 1);
        if (new_rev)
            *new_rev = cur;
        return cf_error_set(err, CF_E_CONFLICT, "workspace %s: revision is %" PRId64 ", expected %" PRId64, id, cur,
                            expected_rev);
    }
    if (cf_redis_reply_is(what, "notfound"))
        return cf_error_set(err, CF_E_NOT_FOUND, "workspace %s does not exist", id);
    if (cf_redis_reply_is(what, "nofile"))
        return cf_error_set(err, CF_E_NOT_FOUND, "workspace %s: no such file", id);
    if (cf_redis_reply_is(what, "invalid"))
        return cf_error_set(err, CF_E_INVALID, "workspace %s: bad or repeated path (checked by Redis)", id);
    if (cf_redis_reply_is(what, "missing")) {
        rc = cf_error_set(err, CF_E_REDIS, "workspace %s: commit: an uploaded blob vanished %d times", id,
                          WS_ATTEMPTS);
        cf_error_set_retriable(err, true);
        return rc;
    }
    if (cf_redis_reply_is(what, "limit"))
        return commit_limit_error(ws, id, rep, err);
    return cf_error_set(err, CF_E_REDIS, "workspace %s: commit: unexpected reply", id);
}

/* What a commit may add to what the workspace holds, at most: the bytes
 * of each blob it does not reference yet (once per blob, with its key),
 * each file's manifest entry and path, and the revision's undo log (each
 * path written or deleted, with its old entry).  The blobs are asked of
 * Redis (one script on the workspace's keys); one the commit finds
 * referenced after all only makes the bound high. */
#define WS_UNDO_ENTRY 96 /* an undo log's old entry ("size:blobid") and its msgpack framing */
static int commit_growth(cf_workspace_store *ws, const ws_keys *k, const cf_ws_file *puts, size_t nputs,
                         const char *const *deletes, size_t ndeletes, const char (*bid)[WS_BLOB_ID_LEN + 1],
                         int64_t *grow, cf_error *err)
{
    *grow = 0;
    for (size_t i = 0; i < nputs; i++)
        *grow += CF_QUOTA_WS_PER_FILE + 2 * (int64_t)strlen(puts[i].path) + WS_UNDO_ENTRY;
    for (size_t i = 0; i < ndeletes; i++)
        *grow += (int64_t)strlen(deletes[i]) + WS_UNDO_ENTRY;
    if (nputs == 0)
        return 0;
    const char **args = calloc(nputs, sizeof(*args));
    if (!args)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < nputs; i++)
        args[i] = bid[i];
    const char *keys[1] = {k->refs};
    redisReply *rep = NULL;
    int rc = cf_redis_eval(ws->r, &cf_ws_script_referenced, 1, keys, NULL, (int)nputs, args, NULL, &rep, err);
    free(args);
    if (rc < 0)
        return -1;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != nputs) {
        cf_redis_reply_free(rep);
        return cf_error_set(err, CF_E_REDIS, "unexpected reply");
    }
    for (size_t i = 0; i < nputs; i++) {
        bool seen = rep->element[i]->type == REDIS_REPLY_INTEGER && rep->element[i]->integer == 1;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(bid[j], bid[i]) == 0;
        if (!seen)
            *grow += (int64_t)puts[i].len + CF_QUOTA_WS_PER_BLOB + CF_QUOTA_WS_BLOB_NAME(strlen(k->meta));
    }
    cf_redis_reply_free(rep);
    return 0;
}

static int commit_impl(cf_workspace_store *ws, const char *id, int64_t expected_rev, const cf_ws_file *puts,
                       size_t nputs, const char *const *deletes, size_t ndeletes, bool strict, int64_t *new_rev,
                       cf_error *err)
{
    ws_keys k;
    if (ws_keys_init(ws, id, &k, err) < 0)
        return -1;
    if (expected_rev < CF_WS_ANY_REV)
        return cf_error_set(err, CF_E_INVALID, "workspace %s: bad expected revision %" PRId64, id, expected_rev);
    if (commit_check(ws, puts, nputs, deletes, ndeletes, err) < 0)
        return cf_error_wrap(err, "workspace %s", id);

    char(*bid)[WS_BLOB_ID_LEN + 1];
    if (blob_ids(id, puts, nputs, &bid, err) < 0)
        return -1;
    const char(*cbid)[WS_BLOB_ID_LEN + 1] = (const char(*)[WS_BLOB_ID_LEN + 1])bid;
    commit_args ca;
    if (commit_args_build(ws, id, expected_rev, puts, nputs, cbid, deletes, ndeletes, strict, &ca, err) < 0) {
        free(bid);
        return -1;
    }
    int64_t grow = 0;
    if (ws->quota_scope[0] && ws->quota_max_bytes > 0 && commit_growth(ws, &k, puts, nputs, deletes, ndeletes, cbid, &grow, err) < 0) {
        commit_args_free(&ca);
        free(bid);
        return cf_error_wrap(err, "workspace %s: quota", id);
    }
    if (quota_grow(ws, id, &k, grow, err) < 0) {
        commit_args_free(&ca);
        free(bid);
        return -1;
    }
    redisReply *rep = NULL;
    int rc = commit_send(ws, &k, id, puts, nputs, cbid, &ca, &rep, err);
    commit_args_free(&ca);
    free(bid);
    if (rc < 0) {
        cf_redis_reply_free(rep);
        quota_sync(ws, &k); /* perhaps written (a reply lost): measured either way */
        return cf_error_wrap(err, "workspace %s: commit", id);
    }
    rc = commit_reply(ws, id, expected_rev, rep, new_rev, err);
    cf_redis_reply_free(rep);
    quota_sync(ws, &k);
    return rc;
}

int cf_workspace_commit(cf_workspace_store *ws, const char *id, int64_t expected_rev, const cf_ws_file *puts,
                        size_t nputs, const char *const *deletes, size_t ndeletes, int64_t *new_rev, cf_error *err)
{
    return commit_impl(ws, id, expected_rev, puts, nputs, deletes, ndeletes, false, new_rev, err);
}

int cf_workspace_put(cf_workspace_store *ws, const char *id, int64_t expected_rev, const char *path, const void *data,
                     size_t len, int64_t *new_rev, cf_error *err)
{
    cf_ws_file f = {.path = path, .data = data, .len = len};
    return commit_impl(ws, id, expected_rev, &f, 1, NULL, 0, false, new_rev, err);
}

int cf_workspace_delete_file(cf_workspace_store *ws, const char *id, int64_t expected_rev, const char *path,
                             int64_t *new_rev, cf_error *err)
{
    const char *d[1] = {path};
    return commit_impl(ws, id, expected_rev, NULL, 0, d, 1, true, new_rev, err);
}

int cf_workspace_get(cf_workspace_store *ws, const char *id, const char *path, uint8_t **data, size_t *len,
                     int64_t *rev, cf_error *err)
{
    *data = NULL;
    *len = 0;
    ws_keys k;
    if (ws_keys_init(ws, id, &k, err) < 0 || cf_workspace_path_check(ws, path, err) < 0)
        return -1;
    const char *args[1] = {path};
    redisReply *rep = NULL;
    if (ws_eval(ws, &k, id, &cf_ws_script_get, 4, k.v, 1, args, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "workspace %s: get", id);
    int rc = cf_state_reply_head(rep, "ws_get", err);
    if (rc < 0) {
    } else if (cf_redis_reply_is(rep->element[0], "ok") && rep->elements == 4) {
        if (rep->element[2]->type != REDIS_REPLY_STRING || rep->element[2]->len > ws->cfg.max_file_bytes ||
            rep->element[3]->type != REDIS_REPLY_STRING) {
            rc = cf_error_set(err, CF_E_REDIS, "workspace %s: get: bad file in reply", id);
        } else if (!blob_matches(rep->element[3], rep->element[2]->str, rep->element[2]->len)) {
            rc = cf_error_set(err, CF_E_REDIS, "workspace %s: corrupt: %.64s does not match its blob id", id, path);
        } else {
            *data = (uint8_t *)cf_state_reply_dup(rep->element[2], len);
            if (!*data)
                rc = cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
            else if (rev)
                *rev = cf_state_reply_elem_i64(rep, 1);
        }
    } else if (cf_redis_reply_is(rep->element[0], "nofile")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "workspace %s: no file %.64s", id, path);
    } else if (cf_redis_reply_is(rep->element[0], "notfound")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "workspace %s does not exist", id);
    } else {
        rc = cf_error_set(err, CF_E_REDIS, "workspace %s: get: unexpected reply", id);
    }
    cf_redis_reply_free(rep);
    return rc;
}

void cf_ws_listing_clear(cf_ws_listing *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->entries[i].path);
        free(l->entries[i].data);
    }
    free(l->entries);
    memset(l, 0, sizeof(*l));
}

/* Parses {'ok', rev, current, path, size, blob id, [content], ...};
 * everything in it is checked again (sizes, paths, ids, caps, and content
 * against its id) because Redis content is hostile.  bids[i] (borrowed from
 * rep) gets entry i's blob id. */
static int parse_listing(const cf_workspace_store *ws, const char *id, const redisReply *rep, bool with_content,
                         cf_ws_listing *out, const redisReply ***bids, cf_error *err)
{
    size_t per = with_content ? 4 : 3;
    if (rep->elements < 3 || (rep->elements - 3) % per != 0)
        return cf_error_set(err, CF_E_REDIS, "workspace %s: malformed listing", id);
    size_t n = (rep->elements - 3) / per;
    if (n > ws->cfg.max_files)
        return cf_error_set(err, CF_E_LIMIT, "workspace %s: listing has %zu files, cap is %zu", id, n,
                            ws->cfg.max_files);
    out->rev = cf_state_reply_elem_i64(rep, 1);
    out->current_rev = cf_state_reply_elem_i64(rep, 2);
    if (out->rev < 0 || out->current_rev < 0)
        return cf_error_set(err, CF_E_REDIS, "workspace %s: bad revision in listing", id);
    out->entries = n ? calloc(n, sizeof(*out->entries)) : NULL;
    *bids = n ? calloc(n, sizeof(**bids)) : NULL;
    if (n && (!out->entries || !*bids))
        return cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const redisReply *p = rep->element[3 + i * per];
        const redisReply *s = rep->element[4 + i * per];
        const redisReply *b = rep->element[5 + i * per];
        int64_t size = -1;
        if (p->type != REDIS_REPLY_STRING || p->len > ws->cfg.max_path_bytes || memchr(p->str, 0, p->len) ||
            cf_redis_reply_i64(s, &size, NULL) < 0 || size < 0 || (uint64_t)size > ws->cfg.max_file_bytes ||
            b->type != REDIS_REPLY_STRING || b->len == 0 || b->len > WS_BLOB_ID_MAX || memchr(b->str, 0, b->len))
            return cf_error_set(err, CF_E_REDIS, "workspace %s: bad entry %zu in listing", id, i);
        cf_ws_entry *e = &out->entries[out->n++];
        e->size = (size_t)size;
        e->path = cf_state_reply_dup(p, NULL);
        if (!e->path)
            return cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
        (*bids)[i] = b;
        total += (uint64_t)size;
        if (with_content) {
            const redisReply *c = rep->element[6 + i * per];
            if (c->type != REDIS_REPLY_STRING || c->len != e->size)
                return cf_error_set(err, CF_E_REDIS, "workspace %s: %.64s: content does not match its size", id,
                                    e->path);
            if (!blob_matches(b, c->str, c->len))
                return cf_error_set(err, CF_E_REDIS, "workspace %s: corrupt: %.64s does not match its blob id", id,
                                    e->path);
            size_t len = 0;
            e->data = (uint8_t *)cf_state_reply_dup(c, &len);
            if (!e->data)
                return cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
        }
    }
    if (total > ws->cfg.max_total_bytes)
        return cf_error_set(err, CF_E_LIMIT, "workspace %s: listing totals %" PRIu64 " bytes, cap is %zu", id, total,
                            ws->cfg.max_total_bytes);
    return 0;
}

/* The bytes of every entry, with one pipeline of GETs.  1: a blob was
 * missing (the revision was trimmed meanwhile, or the data is damaged). */
static int fetch_contents(cf_workspace_store *ws, const ws_keys *k, const char *id, cf_ws_listing *l,
                          const redisReply **bids, cf_error *err)
{
    size_t n = l->n;
    if (n == 0)
        return 0;
    cf_redis_cmd *cmds = calloc(n, sizeof(*cmds));
    const char **argv = calloc(n * 2, sizeof(*argv));
    size_t *lens = calloc(n * 2, sizeof(*lens));
    char(*keys)[CF_STATE_KEY_MAX + WS_BLOB_ID_MAX] = calloc(n, sizeof(*keys));
    redisReply **replies = calloc(n, sizeof(*replies));
    int rc = 0;
    if (!cmds || !argv || !lens || !keys || !replies) {
        rc = cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        size_t pl = strlen(k->blob_prefix);
        memcpy(keys[i], k->blob_prefix, pl);
        memcpy(keys[i] + pl, bids[i]->str, bids[i]->len);
        argv[2 * i] = "GET";
        lens[2 * i] = 3;
        argv[2 * i + 1] = keys[i];
        lens[2 * i + 1] = pl + bids[i]->len;
        cmds[i] = (cf_redis_cmd){.argc = 2, .argv = argv + 2 * i, .lens = lens + 2 * i};
    }
    if (cf_redis_pipeline(ws->r, cmds, n, replies, err) < 0) {
        rc = cf_error_wrap(err, "workspace %s: read file contents", id);
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        cf_ws_entry *e = &l->entries[i];
        if (replies[i]->type == REDIS_REPLY_NIL) {
            rc = 1;
        } else if (replies[i]->type != REDIS_REPLY_STRING || replies[i]->len != e->size) {
            rc = cf_error_set(err, CF_E_REDIS, "workspace %s: %.64s: content does not match its size", id, e->path);
        } else if (!blob_matches(bids[i], replies[i]->str, replies[i]->len)) {
            rc = cf_error_set(err, CF_E_REDIS, "workspace %s: corrupt: %.64s does not match its blob id", id,
                              e->path);
        } else {
            size_t len = 0;
            e->data = (uint8_t *)cf_state_reply_dup(replies[i], &len);
            if (!e->data)
                rc = cf_error_set(err, CF_E_NOMEM, "workspace %s: out of memory", id);
        }
    }
    for (size_t i = 0; i < n; i++)
        cf_redis_reply_free(replies[i]);
out:
    free(cmds);
    free(argv);
    free(lens);
    free(keys);
    free(replies);
    return rc;
}

/* One read of a listing.  inline_content: the atomic form, the bytes read
 * by the script itself.  1: a blob was missing (see listing_impl). */
static int listing_once(cf_workspace_store *ws, const ws_keys *k, const char *id, int64_t rev, bool with_content,
                        bool inline_content, cf_ws_listing *out, cf_error *err)
{
    char revs[24];
    cf_state_i64(revs, sizeof(revs), (long long)rev);
    const char *args[2] = {revs, inline_content ? "1" : "0"};
    redisReply *rep = NULL;
    const char *what = with_content ? "snapshot" : "list";
    if (ws_eval(ws, k, id, &cf_ws_script_snapshot, 4, k->v, 2, args, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "workspace %s: %s", id, what);
    int rc = cf_state_reply_head(rep, "ws_snapshot", err);
    if (rc < 0) {
    } else if (cf_redis_reply_is(rep->element[0], "ok")) {
        const redisReply **bids = NULL;
        rc = parse_listing(ws, id, rep, inline_content, out, &bids, err);
        if (rc == 0 && with_content && !inline_content)
            rc = fetch_contents(ws, k, id, out, bids, err);
        free(bids);
    } else if (cf_redis_reply_is(rep->element[0], "notfound")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "workspace %s does not exist", id);
    } else if (cf_redis_reply_is(rep->element[0], "gone")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND,
                          "workspace %s: revision %" PRId64 " is no longer retained (oldest is %" PRId64 ")", id, rev,
                          cf_state_reply_elem_i64(rep, 1));
    } else if (cf_redis_reply_is(rep->element[0], "future")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "workspace %s: revision %" PRId64 " is newer than %" PRId64, id, rev,
                          cf_state_reply_elem_i64(rep, 1));
    } else {
        rc = cf_error_set(err, CF_E_REDIS, "workspace %s: %s: unexpected reply", id, what);
    }
    cf_redis_reply_free(rep);
    if (rc != 0)
        cf_ws_listing_clear(out);
    return rc;
}

static int listing_impl(cf_workspace_store *ws, const char *id, int64_t rev, bool with_content, cf_ws_listing *out,
                        cf_error *err)
{
    memset(out, 0, sizeof(*out));
    ws_keys k;
    if (ws_keys_init(ws, id, &k, err) < 0)
        return -1;
    if (rev < CF_WS_ANY_REV)
        return cf_error_set(err, CF_E_INVALID, "workspace %s: bad revision %" PRId64, id, rev);
    /* The manifest is read atomically; the bytes after it, by plain GETs.
     * Blobs never change, so what is read is that revision's content.  A
     * blob gone meanwhile means commits trimmed the revision in between
     * (history 0 does at every commit): read once more, then fall back to
     * one atomic script that reads the bytes itself, slower but sure. */
    int rc = listing_once(ws, &k, id, rev, with_content, false, out, err);
    if (rc == 1)
        rc = listing_once(ws, &k, id, rev, with_content, false, out, err);
    if (rc == 1)
        rc = listing_once(ws, &k, id, rev, with_content, true, out, err);
    if (rc == 1) /* the atomic read never answers 1: defensive */
        rc = cf_error_set(err, CF_E_REDIS, "workspace %s: corrupt: a blob the manifest names is missing", id);
    return rc;
}

int cf_workspace_list(cf_workspace_store *ws, const char *id, cf_ws_listing *out, cf_error *err)
{
    return listing_impl(ws, id, CF_WS_ANY_REV, false, out, err);
}

int cf_workspace_snapshot(cf_workspace_store *ws, const char *id, int64_t rev, cf_ws_listing *out, cf_error *err)
{
    return listing_impl(ws, id, rev, true, out, err);
}

void cf_ws_info_clear(cf_ws_info *info)
{
    if (!info)
        return;
    free(info->project);
    free(info->session);
    memset(info, 0, sizeof(*info));
}

int cf_workspace_info(cf_workspace_store *ws, const char *id, cf_ws_info *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    ws_keys k;
    if (ws_keys_init(ws, id, &k, err) < 0)
        return -1;
    redisReply *rep = NULL;
    if (ws_eval(ws, &k, id, &cf_ws_script_info, 4, k.v, 0, NULL, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "workspace %s: info", id);
    int rc = cf_state_reply_head(rep, "ws_info", err);
    if (rc == 0 && cf_redis_reply_is(rep->element[0], "notfound")) {
        rc = cf_error_set(err, CF_E_NOT_FOUND, "workspace %s does not exist", id);
    } else if (rc == 0 && (!cf_redis_reply_is(rep->element[0], "ok") || rep->elements % 2 != 1)) {
        rc = cf_error_set(err, CF_E_REDIS, "workspace %s: info: unexpected reply", id);
    } else if (rc == 0) {
        int64_t ttl_ms = 0, history = 0, nfiles = 0, bytes = 0;
        for (size_t i = 1; i + 1 < rep->elements && rc == 0; i += 2) {
            const redisReply *f = rep->element[i], *v = rep->element[i + 1];
            if (v->type != REDIS_REPLY_STRING || v->len > WS_META_STR_MAX) {
                rc = cf_error_set(err, CF_E_REDIS, "workspace %s: info: bad field", id);
            } else if (cf_redis_reply_is(f, "project")) {
                free(out->project);
                out->project = cf_state_reply_dup(v, NULL);
            } else if (cf_redis_reply_is(f, "session")) {
                free(out->session);
                out->session = cf_state_reply_dup(v, NULL);
            } else {
                int64_t *dst = cf_redis_reply_is(f, "created_us") ? &out->created_us
                               : cf_redis_reply_is(f, "updated_us") ? &out->updated_us
                               : cf_redis_reply_is(f, "rev")        ? &out->rev
                               : cf_redis_reply_is(f, "oldest_rev") ? &out->oldest_rev
                               : cf_redis_reply_is(f, "nfiles")     ? &nfiles
                               : cf_redis_reply_is(f, "bytes")      ? &bytes
                               : cf_redis_reply_is(f, "ttl_ms")     ? &ttl_ms
                               : cf_redis_reply_is(f, "history")    ? &history
                                                                    : NULL;
                if (dst && (cf_redis_reply_i64(v, dst, NULL) < 0 || *dst < 0))
                    rc = cf_error_set(err, CF_E_REDIS, "workspace %s: info: bad number", id);
            }
        }
        if (rc == 0 && (!out->project || !out->session))
            rc = cf_error_set(err, CF_E_REDIS, "workspace %s: info: missing fields or out of memory", id);
        out->nfiles = (size_t)nfiles;
        out->total_bytes = (uint64_t)bytes;
        out->ttl_us = ttl_ms * 1000;
        out->history = history > 100000 ? 100000u : (unsigned)history;
        if (rc < 0)
            cf_ws_info_clear(out);
    }
    cf_redis_reply_free(rep);
    return rc;
}

int cf_workspace_delete(cf_workspace_store *ws, const char *id, cf_error *err)
{
    ws_keys k;
    if (ws_keys_init(ws, id, &k, err) < 0)
        return -1;
    int64_t existed = 0;
    if (cf_state_eval_i64(ws->r, &cf_ws_script_delete, 5, k.v, 0, NULL, &existed, err) < 0)
        return cf_error_wrap(err, "workspace %s: delete", id);
    if (existed != 1)
        return cf_error_set(err, CF_E_NOT_FOUND, "workspace %s does not exist", id);
    return 0;
}
