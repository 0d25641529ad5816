/* The worker's Redis side: workspaces, checkpoints, delivery counts (see
 * worker_state.h and docs/STATE.md, "Through the fleet"). */
#include "worker_state_int.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cf_redis.h"
#include "cf_msgpack.h" /* the bounded msgpack cursor, the thread envelope */
#include "cf_util.h"
#include "cf_workdir.h"

#define ATTEMPT_TTL_MS "86400000" /* a partition's counts outlive its last delivery by a day */
#define RETRY_FIRST_US 50000
#define RETRY_MAX_US 500000
#define HOST_MAX 1024

struct cf_wstate {
    /* This run: its write-back or save refused by its tenant's quota with
     * nothing of it landed (cf_wstate_write_refused); something landed. */
    bool write_refused, wrote;
    const cf_worker_config *cfg;
    const char *worker_id;
    const volatile int *cancel;
    const volatile int *job_cancel; /* the current job's, when set */
    char host[HOST_MAX];
    int port;
    cf_redis *r;
    cf_workspace_store *ws;
    cf_checkpoint_store *cp;
};

/* Deliveries of the messages of one partition not yet committed: a field
 * per offset; the fields below the stored position (ARGV[3], -1 none) go. */
static const cf_redis_script attempt_script = {
    "attempt",
    "local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)\n"
    "local below = tonumber(ARGV[3])\n"
    "if below > 0 then\n"
    "  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do\n"
    "    if tonumber(f) < below then redis.call('HDEL', KEYS[1], f) end\n"
    "  end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[1])\n"
    "return n\n",
};

/* ---------------------------------------------------------------- config */

int cf_wstate_addr_parse(const char *addr, char *host, size_t hostsz, int *port, cf_error *err)
{
    if (!addr || !addr[0])
        return cf_error_set(err, CF_E_INVALID, "redis: empty address");
    size_t n = strlen(addr);
    if (addr[0] == '/') {
        if (n >= hostsz)
            return cf_error_set(err, CF_E_INVALID, "redis: socket path too long");
        memcpy(host, addr, n + 1);
        *port = 0;
        return 0;
    }
    const char *hs = addr, *he, *ps = NULL;
    if (addr[0] == '[') {
        he = strchr(addr, ']');
        if (!he)
            return cf_error_set(err, CF_E_INVALID, "redis: '%s': missing ']'", addr);
        hs = addr + 1;
        if (he[1] == ':')
            ps = he + 2;
        else if (he[1] != '\0')
            return cf_error_set(err, CF_E_INVALID, "redis: '%s': expected ':' after ']'", addr);
    } else {
        const char *colon = strrchr(addr, ':');
        if (colon && strchr(addr, ':') != colon)
            return cf_error_set(err, CF_E_INVALID, "redis: '%s': put IPv6 addresses in brackets", addr);
        he = colon ? colon : addr + n;
        ps = colon ? colon + 1 : NULL;
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= hostsz)
        return cf_error_set(err, CF_E_INVALID, "redis: '%s': bad host", addr);
    for (size_t i = 0; i < hl; i++)
        if ((unsigned char)hs[i] <= ' ' || hs[i] == 0x7f)
            return cf_error_set(err, CF_E_INVALID, "redis: '%s': bad host", addr);
    memcpy(host, hs, hl);
    host[hl] = '\0';
    *port = 6379;
    if (ps) {
        char *end = NULL;
        errno = 0;
        long v = strtol(ps, &end, 10);
        if (errno || end == ps || *end || v < 1 || v > 65535)
            return cf_error_set(err, CF_E_INVALID, "redis: '%s': bad port", addr);
        *port = (int)v;
    }
    return 0;
}

static void ws_config(const cf_worker_config *c, cf_workspace_config *wc)
{
    cf_workspace_config_init(wc);
    wc->max_file_bytes = (size_t)c->workspace_max_file_bytes;
    wc->max_files = (size_t)c->workspace_max_files;
    wc->max_total_bytes = (size_t)c->workspace_max_total_bytes;
    wc->ttl_us = c->workspace_ttl_us;
    wc->history = (unsigned)c->workspace_history;
}

static void cp_config(const cf_worker_config *c, cf_checkpoint_config *cc)
{
    cf_checkpoint_config_init(cc);
    cc->max_per_thread = (size_t)c->checkpoint_max_per_thread;
    cc->ttl_us = c->checkpoint_ttl_us;
}

int cf_wstate_redis_config(const cf_worker_config *cfg, char *host, size_t hostsz, cf_redis_config *rc,
                           cf_error *err)
{
    int port = 0;
    if (cf_wstate_addr_parse(cfg->redis, host, hostsz, &port, err) < 0)
        return -1;
    cf_redis_config_init(rc);
    rc->host = host;
    rc->port = port;
    rc->user = cfg->redis_user && cfg->redis_user[0] ? cfg->redis_user : NULL;
    rc->password = cfg->redis_password && cfg->redis_password[0] ? cfg->redis_password : NULL;
    rc->db = (int)cfg->redis_db;
    rc->connect_timeout_us = cfg->redis_connect_timeout_us;
    rc->command_timeout_us = cfg->redis_command_timeout_us;
    return 0;
}

int cf_wstate_config_check(const cf_worker_config *cfg, cf_error *err)
{
    if (!cfg->redis || !cfg->redis[0])
        return 0;
    char host[HOST_MAX];
    int port;
    if (cf_wstate_addr_parse(cfg->redis, host, sizeof(host), &port, err) < 0)
        return -1;
    if (cfg->redis_user && cfg->redis_user[0] && !(cfg->redis_password && cfg->redis_password[0]))
        return cf_error_set(err, CF_E_INVALID, "redis-user needs redis-password");
    if (cfg->workspace_ttl_us > 0 && cfg->workspace_ttl_us < 1000)
        return cf_error_set(err, CF_E_INVALID, "workspace-ttl: at least 1ms (or 0 for none)");
    if (cfg->checkpoint_ttl_us > 0 && cfg->checkpoint_ttl_us < 1000)
        return cf_error_set(err, CF_E_INVALID, "checkpoint-ttl: at least 1ms (or 0 for none)");
    /* Let the stores validate the rest exactly as they will at run time. */
    cf_wstate *st = cf_wstate_new(cfg, "check", NULL, err);
    if (!st)
        return -1;
    cf_wstate_destroy(st);
    return 0;
}

/* ---------------------------------------------------------------- lifecycle */

cf_wstate *cf_wstate_new(const cf_worker_config *cfg, const char *worker_id, const volatile int *cancel,
                         cf_error *err)
{
    cf_wstate *st = calloc(1, sizeof(*st));
    if (!st) {
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        return NULL;
    }
    st->cfg = cfg;
    st->worker_id = worker_id;
    st->cancel = cancel;
    cf_redis_config rc;
    if (cf_wstate_redis_config(cfg, st->host, sizeof(st->host), &rc, err) < 0)
        goto fail;
    st->port = rc.port;
    /* A reconnect backoff longer than the retry budget would let the budget
     * run out without a single new connection attempt. */
    int64_t backoff_cap = cfg->redis_retry_budget_us / 4;
    if (backoff_cap < rc.retry_initial_us)
        backoff_cap = rc.retry_initial_us;
    if (backoff_cap < rc.retry_max_us)
        rc.retry_max_us = backoff_cap;
    /* A snapshot reply carries up to max_total bytes plus per-file framing. */
    size_t need = (size_t)cfg->workspace_max_total_bytes + (size_t)cfg->workspace_max_files * 2048 + ((size_t)1 << 20);
    if (need > rc.max_reply_bytes)
        rc.max_reply_bytes = need;
    st->r = cf_redis_new(&rc, false, err);
    if (!st->r)
        goto fail;
    cf_workspace_config wc;
    ws_config(cfg, &wc);
    st->ws = cf_workspace_store_new(st->r, &wc, err);
    if (!st->ws)
        goto fail;
    cf_checkpoint_config cc;
    cp_config(cfg, &cc);
    st->cp = cf_checkpoint_store_new(st->r, &cc, err);
    if (!st->cp)
        goto fail;
    return st;
fail:
    cf_wstate_destroy(st);
    return NULL;
}

void cf_wstate_destroy(cf_wstate *st)
{
    if (!st)
        return;
    cf_checkpoint_store_destroy(st->cp);
    cf_workspace_store_destroy(st->ws);
    cf_redis_destroy(st->r);
    free(st);
}

/* ---------------------------------------------------------------- retries */

typedef struct retry {
    int64_t until;
    int64_t delay;
    int tries;
} retry;

static void retry_init(const cf_wstate *st, retry *r)
{
    r->until = cf_mono_us() + st->cfg->redis_retry_budget_us;
    r->delay = RETRY_FIRST_US;
    r->tries = 0;
}

/* After a failed try: true (having slept) when err is transient and the
 * budget allows another try. */
static bool retry_again(const cf_wstate *st, retry *r, const cf_error *err)
{
    r->tries++;
    if (!err->retriable || (st->cancel && __atomic_load_n(st->cancel, __ATOMIC_RELAXED)) ||
        (st->job_cancel && __atomic_load_n(st->job_cancel, __ATOMIC_RELAXED)))
        return false;
    int64_t now = cf_mono_us();
    if (now >= r->until)
        return false;
    int64_t d = r->delay;
    if (now + d > r->until)
        d = r->until - now;
    struct timespec ts = {.tv_sec = d / 1000000, .tv_nsec = (long)(d % 1000000) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
    r->delay = r->delay * 2 > RETRY_MAX_US ? RETRY_MAX_US : r->delay * 2;
    return true;
}

/* ---------------------------------------------------------------- admission */

int cf_wstate_path_check(const cf_wstate *st, const char *path, cf_error *err)
{
    return cf_workspace_path_check(st->ws, path, err);
}

bool cf_wstate_name_ok(const char *s)
{
    return s && cf_name_valid(s, strlen(s), 128);
}

int cf_wstate_admit(const cf_request *req, bool have_redis, char *reason, size_t rsz)
{
    cf_fs_mode m = req->policy.fs_mode;
    if (req->workspace) {
        if (!cf_wstate_name_ok(req->workspace)) {
            snprintf(reason, rsz, "workspace: an id is 1..128 characters of A-Z a-z 0-9 . _ -");
            return -1;
        }
        if (m == CF_FS_NONE || m == CF_FS_PATHS) {
            snprintf(reason, rsz, "policy.filesystem.mode=%s contradicts workspace '%s' (use workspace_ro, "
                     "workspace_rw or leave it unspecified)", cf_fs_mode_name(m), req->workspace);
            return -1;
        }
    } else if (m == CF_FS_WORKSPACE_RO || m == CF_FS_WORKSPACE_RW) {
        snprintf(reason, rsz, "policy.filesystem.mode=%s needs a workspace", cf_fs_mode_name(m));
        return -1;
    }
    if (req->thread && !cf_wstate_name_ok(req->thread)) {
        snprintf(reason, rsz, "thread: an id is 1..128 characters of A-Z a-z 0-9 . _ -");
        return -1;
    }
    if ((req->workspace || req->thread) && !have_redis) {
        snprintf(reason, rsz, "this worker has no Redis configured: requests naming a %s cannot run here",
                 req->workspace ? "workspace" : "thread");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- msgpack (cf_msgpack.h) */

int cf_wstate_envelope(const cf_bytes *input, const void *state, size_t state_len, const char *checkpoint_id,
                       cf_bytes *out, cf_error *err)
{
    return cf_thread_envelope_encode(input, state, state_len, checkpoint_id, out, err);
}

int cf_wstate_output_checkpoint(const cf_bytes *output, const uint8_t **state, size_t *len, cf_error *err)
{
    *state = NULL;
    *len = 0;
    if (!output || !output->data || output->len == 0)
        return 0;
    cf_decode_limits lim = cf_decode_limits_default;
    lim.max_total_bytes = lim.max_bin_bytes = lim.max_str_bytes = output->len;
    cf_mp_reader r;
    cf_mp_reader_init(&r, output->data, output->len, &lim);
    if (cf_mp_peek(&r) != CF_MP_MAP)
        return 0;
    uint32_t n;
    if (cf_mp_read_map(&r, 1, &n, err) < 0)
        return cf_error_wrap(err, "output");
    for (uint32_t i = 0; i < n; i++) {
        bool is_cp = false;
        if (cf_mp_peek(&r) == CF_MP_STR) {
            const uint8_t *k;
            size_t kl;
            if (cf_mp_read_str(&r, output->len, &k, &kl, err) < 0)
                return cf_error_wrap(err, "output");
            is_cp = kl == 10 && memcmp(k, "checkpoint", 10) == 0;
        } else if (cf_mp_skip(&r, 2, err) < 0) {
            return cf_error_wrap(err, "output");
        }
        const uint8_t *vstart = r.p;
        cf_mp_kind kind = cf_mp_peek(&r);
        if (cf_mp_skip(&r, 2, err) < 0)
            return cf_error_wrap(err, "output");
        if (!is_cp)
            continue;
        if (kind == CF_MP_NIL)
            return 0;
        if (kind != CF_MP_MAP)
            return cf_error_set(err, CF_E_INVALID, "output.checkpoint must be a map (JSON object), not %s",
                                cf_mp_kind_name(kind));
        *state = vstart;
        *len = (size_t)(r.p - vstart);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- diff */

static int cmp_entry(const void *a, const void *b)
{
    return strcmp((*(const cf_ws_entry *const *)a)->path, (*(const cf_ws_entry *const *)b)->path);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int cf_wstate_diff(const cf_ws_listing *snap, const cf_file *collected, size_t ncollected, cf_ws_file **puts,
                   size_t *nputs, const char ***deletes, size_t *ndeletes, const char ***changed, size_t *nchanged,
                   cf_error *err)
{
    *puts = NULL;
    *deletes = NULL;
    *changed = NULL;
    *nputs = *ndeletes = *nchanged = 0;
    size_t ns = snap ? snap->n : 0;
    const cf_ws_entry **idx = calloc(ns ? ns : 1, sizeof(*idx));
    bool *seen = calloc(ns ? ns : 1, sizeof(*seen));
    cf_ws_file *p = calloc(ncollected ? ncollected : 1, sizeof(*p));
    const char **d = calloc(ns ? ns : 1, sizeof(*d));
    const char **c = calloc(ncollected + ns ? ncollected + ns : 1, sizeof(*c));
    if (!idx || !seen || !p || !d || !c) {
        free(idx);
        free(seen);
        free(p);
        free(d);
        free(c);
        return cf_error_set(err, CF_E_NOMEM, "workspace diff: out of memory");
    }
    for (size_t i = 0; i < ns; i++)
        idx[i] = &snap->entries[i];
    qsort(idx, ns, sizeof(*idx), cmp_entry);
    size_t np = 0, nd = 0, nc = 0;
    for (size_t i = 0; i < ncollected; i++) {
        const cf_file *f = &collected[i];
        cf_ws_entry key = {.path = f->path};
        const cf_ws_entry *kp = &key;
        const cf_ws_entry **hit = ns ? bsearch(&kp, idx, ns, sizeof(*idx), cmp_entry) : NULL;
        if (hit) {
            seen[hit - idx] = true;
            const cf_ws_entry *e = *hit;
            if (e->size == f->content.len && (e->size == 0 || memcmp(e->data, f->content.data, e->size) == 0))
                continue;
        }
        p[np++] = (cf_ws_file){.path = f->path, .data = f->content.data ? (const void *)f->content.data : "",
                               .len = f->content.len};
        c[nc++] = f->path;
    }
    for (size_t i = 0; i < ns; i++)
        if (!seen[i]) {
            d[nd++] = idx[i]->path;
            c[nc++] = idx[i]->path;
        }
    qsort(c, nc, sizeof(*c), cmp_str);
    free(idx);
    free(seen);
    *puts = p;
    *nputs = np;
    *deletes = d;
    *ndeletes = nd;
    *changed = c;
    *nchanged = nc;
    return 0;
}

/* ---------------------------------------------------------------- results */

static void add_diag(cf_result *res, const char *level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_diag(cf_result *res, const char *level, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cf_diagnostic *d = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*d));
    if (!d)
        return;
    res->diagnostics = d;
    memset(&d[res->n_diagnostics], 0, sizeof(*d));
    if (cf_str_set(&d[res->n_diagnostics].level, level) == 0 && cf_str_set(&d[res->n_diagnostics].message, msg) == 0)
        res->n_diagnostics++;
    else {
        free(d[res->n_diagnostics].level);
        free(d[res->n_diagnostics].message);
    }
}

/* Appends to the reason ("a; b") so an existing one is kept. */
static void add_reason(cf_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_reason(cf_result *res, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (res->reason && res->reason[0])
        cf_result_set_reason(res, "%s; %s", res->reason, msg);
    else
        cf_result_set_reason(res, "%s", msg);
}

static int set_changed_paths(cf_result *res, const char *const *paths, size_t n)
{
    if (n == 0)
        return 0;
    char **v = calloc(n, sizeof(*v));
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        v[i] = cf_strdup(paths[i]);
        if (!v[i]) {
            for (size_t k = 0; k < i; k++)
                free(v[k]);
            free(v);
            return -1;
        }
    }
    res->changed_paths = v;
    res->n_changed_paths = n;
    return 0;
}

/* ---------------------------------------------------------------- prepare */

static void restore_input(cf_wstate_run *run, cf_request *req)
{
    if (!run->input_swapped)
        return;
    free(req->input.data);
    req->input = run->orig_input;
    run->orig_input = (cf_bytes){0};
    run->input_swapped = false;
}

void cf_wstate_run_clear(cf_wstate_run *run, cf_request *req)
{
    if (!run)
        return;
    if (req)
        restore_input(run, req);
    else
        free(run->orig_input.data);
    cf_ws_listing_clear(&run->snap);
    free(run->place);
    cf_workdir_files_free(run->files.collected, run->files.n_collected);
    free(run->files.collect_error);
    cf_workdir_files_free(run->op_puts, run->n_op_puts);
    for (size_t i = 0; i < run->n_op_dels; i++)
        free(run->op_dels[i]);
    free(run->op_dels);
    memset(run, 0, sizeof(*run));
}

/* The ops that need one file at most: a listing and that file's bytes,
 * instead of every file of the workspace (list, read, write, delete,
 * str_replace, insert). */
static bool light_op(const cf_request *req)
{
    return req->workspace_op && req->workspace_op->op != CF_WS_OP_GREP &&
           req->workspace_op->op != CF_WS_OP_APPLY_PATCH;
}

/* A light checkout: the listing, and the bytes of `path` (when listed) read
 * at the listing's revision; a write in between makes it read again. */
static int checkout_light(cf_wstate *st, const char *id, const char *path, cf_ws_listing *out, cf_error *err)
{
    for (int tries = 0;; tries++) {
        cf_ws_listing_clear(out);
        if (cf_workspace_list(st->ws, id, out, err) < 0)
            return -1;
        cf_ws_entry *e = NULL;
        for (size_t i = 0; path && i < out->n && !e; i++)
            if (strcmp(out->entries[i].path, path) == 0)
                e = &out->entries[i];
        if (!e)
            return 0;
        uint8_t *data = NULL;
        size_t len = 0;
        int64_t rev = -1;
        if (cf_workspace_get(st->ws, id, path, &data, &len, &rev, err) < 0 && err->code != CF_E_NOT_FOUND)
            return -1;
        if (data && rev == out->rev) {
            e->data = data;
            e->size = len;
            return 0;
        }
        free(data);
        if (tries == 3)
            return cf_error_set(err, CF_E_REDIS, "workspace %s: %s kept changing while it was read", id, path);
        cf_error_clear(err);
    }
}

static int prepare_workspace(cf_wstate *st, const cf_request *req, cf_wstate_run *run, bool *run_it, cf_result *res,
                             cf_error *err)
{
    run->ws_active = true;
    run->light = light_op(req);
    /* Unspecified means read-write on any backend; explicit modes are
     * enforced by the backend (admission checked its capabilities).  An
     * op's own kind says it. */
    const cf_workspace_op *op = req->workspace_op;
    run->ws_rw = op ? cf_ws_op_writes(op->op) : req->policy.fs_mode != CF_FS_WORKSPACE_RO;
    /* Which requests may create a missing workspace: a read-write run, and
     * of the ops those that bring files (write, apply_patch) without a
     * revision to compare with other than 0's. */
    bool may_create = !op || ((op->op == CF_WS_OP_WRITE || op->op == CF_WS_OP_APPLY_PATCH) &&
                              (!op->has_expected_revision || op->expected_revision == 0));
    /* An op's path is checked before anything is read or created. */
    cf_error perr;
    cf_error_clear(&perr);
    if (op && op->path && op->op != CF_WS_OP_GREP && cf_workspace_path_check(st->ws, op->path, &perr) < 0) {
        res->status = CF_STATUS_REJECTED;
        cf_result_set_reason(res, "workspace_op.path: %s", perr.msg);
        *run_it = false;
        return 0;
    }
    retry r;
    retry_init(st, &r);
    bool created = false;
    for (;;) {
        cf_error_clear(err);
        if ((run->light ? checkout_light(st, req->workspace, req->workspace_op->path, &run->snap, err)
                        : cf_workspace_snapshot(st->ws, req->workspace, CF_WS_ANY_REV, &run->snap, err)) == 0)
            break;
        if (err->code == CF_E_NOT_FOUND && !created) {
            if (!run->ws_rw || !may_create) {
                res->status = CF_STATUS_REJECTED;
                if (op)
                    cf_result_set_reason(res, "workspace '%s' does not exist (%s does not create one%s)",
                                         req->workspace, cf_ws_op_name(op->op),
                                         op->has_expected_revision &&
                                                 (op->op == CF_WS_OP_WRITE || op->op == CF_WS_OP_APPLY_PATCH)
                                             ? " at that expected_revision"
                                             : "");
                else
                    cf_result_set_reason(res, "workspace '%s' does not exist (a read-only run cannot create it)",
                                         req->workspace);
                *run_it = false;
                return 0;
            }
            /* A read-write run on a new workspace starts it empty. */
            cf_error cerr;
            cf_error_clear(&cerr);
            if (cf_workspace_create(st->ws, req->workspace, NULL, NULL, &cerr) == 0 || cerr.code == CF_E_CONFLICT) {
                created = true;
                continue;
            }
            *err = cerr;
        }
        if (err->code == CF_E_INVALID || err->code == CF_E_LIMIT) {
            /* The stored workspace breaks our caps (written by a more
             * permissive store): refuse rather than run on part of it. */
            res->status = CF_STATUS_REJECTED;
            cf_result_set_reason(res, "workspace '%s' cannot be used: %s", req->workspace, err->msg);
            *run_it = false;
            return 0;
        }
        if (!retry_again(st, &r, err))
            return cf_error_wrap(err, "workspace store unavailable");
    }
    run->ws_rev = run->snap.rev;
    res->workspace_revision = run->ws_rev;
    if (req->workspace_op)
        return 0; /* no program: nothing is placed */
    run->place = calloc(run->snap.n ? run->snap.n : 1, sizeof(*run->place));
    if (!run->place)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < run->snap.n; i++) {
        run->place[i].path = run->snap.entries[i].path;
        run->place[i].content.data = run->snap.entries[i].data;
        run->place[i].content.len = run->snap.entries[i].size;
    }
    run->files = (cf_exec_files){
        .place = run->place,
        .n_place = run->snap.n,
        .read_only = !run->ws_rw,
        .collect = run->ws_rw,
        .max_files = (size_t)st->cfg->workspace_max_files,
        .max_bytes = (size_t)st->cfg->workspace_max_total_bytes,
    };
    res->workspace_revision = run->ws_rev;
    return 0;
}

static int prepare_thread(cf_wstate *st, cf_request *req, cf_wstate_run *run, bool *run_it, cf_result *res,
                          cf_error *err)
{
    run->cp_active = true;
    cf_checkpoint cp;
    memset(&cp, 0, sizeof(cp));
    retry r;
    retry_init(st, &r);
    bool have = false;
    for (;;) {
        cf_error_clear(err);
        if (cf_checkpoint_latest(st->cp, req->thread, &cp, err) == 0) {
            have = true;
            break;
        }
        if (err->code == CF_E_NOT_FOUND)
            break;
        if (err->code == CF_E_INVALID || err->code == CF_E_LIMIT) {
            res->status = CF_STATUS_REJECTED;
            cf_result_set_reason(res, "thread '%s': latest checkpoint cannot be used: %s", req->thread, err->msg);
            *run_it = false;
            return 0;
        }
        if (!retry_again(st, &r, err))
            return cf_error_wrap(err, "checkpoint store unavailable");
    }
    cf_strlcpy(run->cp_expected, have ? cp.id : "", sizeof(run->cp_expected));
    cf_bytes env = {0};
    int rc = cf_wstate_envelope(&req->input, have ? cp.state : NULL, have ? cp.state_len : 0,
                                have ? cp.id : NULL, &env, err);
    cf_checkpoint_clear(&cp);
    if (rc < 0)
        return -1;
    run->orig_input = req->input;
    req->input = env;
    run->input_swapped = true;
    return 0;
}

int cf_wstate_prepare(cf_wstate *st, cf_request *req, int64_t writer_seq, cf_wstate_run *run, bool *run_it,
                      cf_result *res, cf_error *err)
{
    cf_error local;
    if (!err)
        err = &local; /* the steps below inspect error codes */
    memset(run, 0, sizeof(*run));
    *run_it = true;
    run->writer_seq = writer_seq;
    if (req->workspace && (prepare_workspace(st, req, run, run_it, res, err) < 0 || !*run_it))
        return *run_it ? -1 : 0;
    if (req->thread && (prepare_thread(st, req, run, run_it, res, err) < 0 || !*run_it))
        return *run_it ? -1 : 0;
    return 0;
}

/* ---------------------------------------------------------------- finish */

/* After a commit whose outcome was ambiguous (a retry got CF_E_CONFLICT):
 * did our own earlier try land?  True when the revision right after ours
 * holds exactly the files we meant to write. */
static int commit_landed(cf_wstate *st, const char *id, int64_t expected_rev, const cf_file *want, size_t nwant)
{
    cf_ws_listing l;
    memset(&l, 0, sizeof(l));
    cf_error e;
    cf_error_clear(&e);
    if (cf_workspace_snapshot(st->ws, id, expected_rev + 1, &l, &e) < 0)
        return e.code == CF_E_NOT_FOUND || e.code == CF_E_INVALID ? 0 : -1; /* -1: cannot tell */
    bool same = l.n == nwant;
    for (size_t i = 0; same && i < nwant; i++) {
        /* Both sorted by path (bytewise). */
        same = strcmp(l.entries[i].path, want[i].path) == 0 && l.entries[i].size == want[i].content.len &&
               (want[i].content.len == 0 || memcmp(l.entries[i].data, want[i].content.data, want[i].content.len) == 0);
    }
    cf_ws_listing_clear(&l);
    return same ? 1 : 0;
}

/* A workspace op's change as the commit takes it: its puts and deletes,
 * and every path changed, sorted. */
static int op_change_set(const cf_wstate_run *run, cf_ws_file **puts, size_t *np, const char ***dels, size_t *nd,
                         const char ***changed, size_t *nc, cf_error *err)
{
    size_t n = run->n_op_puts + run->n_op_dels;
    *puts = calloc(run->n_op_puts ? run->n_op_puts : 1, sizeof(**puts));
    *dels = calloc(run->n_op_dels ? run->n_op_dels : 1, sizeof(**dels));
    *changed = calloc(n ? n : 1, sizeof(**changed));
    if (!*puts || !*dels || !*changed)
        return cf_error_set(err, CF_E_NOMEM, "workspace op: out of memory");
    for (size_t i = 0; i < run->n_op_puts; i++) {
        const cf_file *f = &run->op_puts[i];
        (*puts)[i] = (cf_ws_file){.path = f->path, .data = f->content.data ? (const void *)f->content.data : "",
                                  .len = f->content.len};
        (*changed)[i] = f->path;
    }
    for (size_t i = 0; i < run->n_op_dels; i++) {
        (*dels)[i] = run->op_dels[i];
        (*changed)[run->n_op_puts + i] = run->op_dels[i];
    }
    qsort(*changed, n, sizeof(**changed), cmp_str);
    *np = run->n_op_puts;
    *nd = run->n_op_dels;
    *nc = n;
    return 0;
}

/* After an ambiguous commit of an op's change: does the revision right
 * after ours hold it (its puts with their bytes, its deletes gone)? */
static int op_change_landed(cf_wstate *st, const char *id, const cf_wstate_run *run)
{
    cf_ws_listing l;
    memset(&l, 0, sizeof(l));
    cf_error e;
    cf_error_clear(&e);
    if (cf_workspace_snapshot(st->ws, id, run->ws_rev + 1, &l, &e) < 0)
        return e.code == CF_E_NOT_FOUND || e.code == CF_E_INVALID ? 0 : -1;
    bool same = true;
    for (size_t i = 0; same && i < run->n_op_puts; i++) {
        const cf_file *f = &run->op_puts[i];
        const cf_ws_entry *hit = NULL;
        for (size_t k = 0; k < l.n && !hit; k++)
            if (strcmp(l.entries[k].path, f->path) == 0)
                hit = &l.entries[k];
        same = hit && hit->size == f->content.len &&
               (f->content.len == 0 || memcmp(hit->data, f->content.data, f->content.len) == 0);
    }
    for (size_t i = 0; same && i < run->n_op_dels; i++)
        for (size_t k = 0; k < l.n && same; k++)
            same = strcmp(l.entries[k].path, run->op_dels[i]) != 0;
    cf_ws_listing_clear(&l);
    return same ? 1 : 0;
}

/* 0: done (res says how); -1: Redis failed past the budget. */
static int finish_workspace(cf_wstate *st, const cf_request *req, cf_wstate_run *run, cf_result *res, bool *written,
                            cf_error *err)
{
    *written = false;
    res->workspace_revision = run->ws_rev;
    if (!run->ws_rw)
        return 0;
    if (res->status != CF_STATUS_SUCCESS) {
        add_diag(res, "note", "workspace '%s': the program did not succeed (%s): changes not written back",
                 req->workspace, cf_status_name(res->status));
        return 0;
    }
    if (run->files.collect_error) {
        add_diag(res, "error", "workspace '%s': changes not written back: %s", req->workspace,
                 run->files.collect_error);
        add_reason(res, "workspace changes not written back: %s", run->files.collect_error);
        return 0;
    }
    cf_ws_file *puts = NULL;
    const char **dels = NULL, **changed = NULL;
    size_t np = 0, nd = 0, nc = 0;
    if ((run->op_change ? op_change_set(run, &puts, &np, &dels, &nd, &changed, &nc, err)
                        : cf_wstate_diff(&run->snap, run->files.collected, run->files.n_collected, &puts, &np, &dels,
                                         &nd, &changed, &nc, err)) < 0) {
        free(puts);
        free(dels);
        free(changed);
        return -1;
    }
    int rc = 0;
    if (nc == 0) {
        *written = true; /* nothing to write: the workspace stays as it was */
        goto out;
    }
    retry r;
    retry_init(st, &r);
    int64_t new_rev = 0;
    for (;;) {
        cf_error_clear(err);
        if (cf_workspace_commit(st->ws, req->workspace, run->ws_rev, puts, np, dels, nd, &new_rev, err) == 0)
            break;
        if (err->code == CF_E_FENCED) {
            /* Another worker took this request over while it ran (this
             * worker stalled past its lease): nothing written. */
            res->workspace_conflict = true;
            res->workspace_revision = run->ws_rev;
            add_diag(res, "error", "workspace '%s': changes not written back: another worker took this request "
                     "over while it ran (the run's lease lapsed)", req->workspace);
            add_reason(res, "workspace conflict: the request's lease lapsed while it ran (another worker took it "
                       "over); changes not written back");
            cf_error_clear(err);
            goto out;
        }
        /* After a try whose reply was lost, a conflict (or a quota the
         * first try's own bytes now fill) may be that try having landed;
         * when that cannot be told, the store is asked again (or the run
         * ends as the store being unavailable), never "not written". */
        int landed = (err->code == CF_E_CONFLICT || err->code == CF_E_LIMIT) && r.tries > 0
                         ? run->op_change ? op_change_landed(st, req->workspace, run)
                                          : commit_landed(st, req->workspace, run->ws_rev, run->files.collected,
                                                          run->files.n_collected)
                         : 0;
        if (landed < 0) {
            if (!retry_again(st, &r, err)) {
                rc = cf_error_wrap(err, "workspace store unavailable: write-back of '%s'", req->workspace);
                goto out;
            }
            continue;
        }
        if (landed) {
            new_rev = run->ws_rev + 1;
            break;
        }
        if (err->code == CF_E_CONFLICT) {
            res->workspace_conflict = true;
            res->workspace_revision = new_rev > 0 ? new_rev : run->ws_rev;
            add_diag(res, "error",
                     "workspace '%s' changed while the program ran (revision %" PRId64 " -> %" PRId64
                     "): its changes were not written back",
                     req->workspace, run->ws_rev, res->workspace_revision);
            add_reason(res, "workspace conflict: '%s' moved from revision %" PRId64 " to %" PRId64
                       " meanwhile; changes not written back", req->workspace, run->ws_rev, res->workspace_revision);
            goto out;
        }
        if (err->code == CF_E_INVALID || err->code == CF_E_LIMIT || err->code == CF_E_NOT_FOUND) {
            /* Bad paths or caps (checked before anything is written), or the
             * workspace was deleted meanwhile: nothing written. */
            add_diag(res, "error", "workspace '%s': changes not written back: %s", req->workspace, err->msg);
            add_reason(res, "workspace changes not written back: %s", err->msg);
            st->write_refused = err->code == CF_E_LIMIT && err->retriable; /* a quota, not a cap */
            cf_error_clear(err);
            goto out;
        }
        if (!retry_again(st, &r, err)) {
            rc = cf_error_wrap(err, "workspace store unavailable: write-back of '%s'", req->workspace);
            goto out;
        }
    }
    *written = true;
    st->wrote = true;
    res->workspace_revision = new_rev;
    if (set_changed_paths(res, changed, nc) < 0)
        rc = cf_error_set(err, CF_E_NOMEM, "out of memory");
out:
    free(puts);
    free(dels);
    free(changed);
    return rc;
}

/* Checkpoint metadata: who saved it, so an ambiguous retry can recognise
 * its own save.  {"request_id": id, "worker": worker_id} */
static int cp_meta(const cf_wstate *st, const cf_request *req, cf_buf *b)
{
    return cf_checkpoint_meta_encode(req->id, st->worker_id, b);
}

static int save_landed(cf_wstate *st, const cf_request *req, const cf_wstate_run *run, const cf_buf *meta,
                       char id_out[CF_CHECKPOINT_ID_MAX + 1])
{
    cf_checkpoint cp;
    memset(&cp, 0, sizeof(cp));
    cf_error e;
    cf_error_clear(&e);
    if (cf_checkpoint_latest(st->cp, req->thread, &cp, &e) < 0)
        return e.code == CF_E_NOT_FOUND ? 0 : -1; /* -1: cannot tell */
    bool mine = strcmp(cp.parent, run->cp_expected) == 0 && cp.meta && cp.meta_len == meta->len &&
                memcmp(cp.meta, meta->data, meta->len) == 0;
    if (mine)
        cf_strlcpy(id_out, cp.id, CF_CHECKPOINT_ID_MAX + 1);
    cf_checkpoint_clear(&cp);
    return mine ? 1 : 0;
}

static int finish_thread(cf_wstate *st, const cf_request *req, cf_wstate_run *run, bool ws_ok, cf_result *res,
                         cf_error *err)
{
    if (res->status != CF_STATUS_SUCCESS)
        return 0;
    const uint8_t *state;
    size_t len;
    cf_error perr;
    cf_error_clear(&perr);
    int found = cf_wstate_output_checkpoint(&res->output, &state, &len, &perr);
    if (found < 0) {
        add_diag(res, "error", "thread '%s': checkpoint not saved: %s", req->thread, perr.msg);
        return 0;
    }
    if (found == 0)
        return 0;
    if (!ws_ok) {
        add_diag(res, "error", "thread '%s': checkpoint not saved because the workspace changes were not written back",
                 req->thread);
        return 0;
    }
    cf_buf meta;
    cf_buf_init(&meta, 0);
    if (cp_meta(st, req, &meta) < 0) {
        cf_buf_free(&meta);
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    cf_checkpoint_save_opts o = {
        .parent = NULL,
        .expected_latest = run->cp_expected,
        .writer_seq = run->writer_seq,
        .meta = meta.data,
        .meta_len = meta.len,
    };
    char id[CF_CHECKPOINT_ID_MAX + 1] = "";
    retry r;
    retry_init(st, &r);
    int rc = 0;
    for (;;) {
        cf_error_clear(err);
        if (cf_checkpoint_save(st->cp, req->thread, state, len, &o, id, err) == 0)
            break;
        if (err->code == CF_E_FENCED) {
            res->checkpoint_conflict = true;
            add_diag(res, "error", "thread '%s': checkpoint not saved: another worker took this request over while "
                     "it ran (the run's lease lapsed)", req->thread);
            add_reason(res, "checkpoint conflict on thread '%s': not saved (the request's lease lapsed while it ran)",
                       req->thread);
            cf_error_clear(err);
            id[0] = '\0';
            break;
        }
        int landed = (err->code == CF_E_CONFLICT || err->code == CF_E_LIMIT) && r.tries > 0
                         ? save_landed(st, req, run, &meta, id)
                         : 0;
        if (landed < 0) {
            if (!retry_again(st, &r, err)) {
                rc = cf_error_wrap(err, "checkpoint store unavailable: saving thread '%s'", req->thread);
                id[0] = '\0';
                break;
            }
            continue;
        }
        if (landed)
            break;
        if (err->code == CF_E_CONFLICT) {
            res->checkpoint_conflict = true;
            add_diag(res, "error",
                     "thread '%s': checkpoint not saved: the thread moved on while the program ran (stale writer): %s",
                     req->thread, err->msg);
            add_reason(res, "checkpoint conflict on thread '%s': not saved", req->thread);
            cf_error_clear(err);
            id[0] = '\0';
            break;
        }
        if (err->code == CF_E_INVALID || err->code == CF_E_LIMIT || err->code == CF_E_NOT_FOUND) {
            add_diag(res, "error", "thread '%s': checkpoint not saved: %s", req->thread, err->msg);
            /* In the answer's reason too: the workspace (written first) may
             * have moved on while the thread's latest did not. */
            add_reason(res, "checkpoint not saved: %s", err->msg);
            /* Kept for replay when the workspace was written: running it
             * again would apply those changes twice. */
            st->write_refused = err->code == CF_E_LIMIT && err->retriable && !st->wrote;
            cf_error_clear(err);
            id[0] = '\0';
            break;
        }
        if (!retry_again(st, &r, err)) {
            rc = cf_error_wrap(err, "checkpoint store unavailable: saving thread '%s'", req->thread);
            id[0] = '\0';
            break;
        }
    }
    cf_buf_free(&meta);
    if (id[0] && cf_str_set(&res->checkpoint_id, id) < 0)
        rc = cf_error_set(err, CF_E_NOMEM, "out of memory");
    return rc;
}

int cf_wstate_finish(cf_wstate *st, cf_request *req, cf_wstate_run *run, bool executed, cf_result *res,
                     cf_error *err)
{
    cf_error local;
    if (!err)
        err = &local;
    restore_input(run, req);
    if (!executed)
        return 0;
    bool ws_ok = true;
    bool ran_ok = res->status == CF_STATUS_SUCCESS;
    if (run->ws_active && finish_workspace(st, req, run, res, &ws_ok, err) < 0)
        return -1;
    if (req->session && run->ws_active && run->ws_rw && ran_ok && !ws_ok) {
        /* A session's cell is all or nothing (SPEC 3.6): one whose state
         * did not land (a cap, the quota, a conflict) did not happen, and
         * the next cell will not see it. */
        char *why = res->reason ? cf_strdup(res->reason) : NULL;
        res->status = CF_STATUS_FAILED;
        cf_result_set_reason(res, "session '%s': the cell ran, but nothing of it was saved: %s", req->session,
                             why ? why : "its changes were not written back");
        free(why);
    }
    if (run->cp_active && finish_thread(st, req, run, !run->ws_active || !run->ws_rw || ws_ok, res, err) < 0)
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- attempts */

/* One script, its transient failures retried within the budget (a dropped
 * connection reconnects on the retry).  *out may be NULL. */
static int eval_retrying(cf_wstate *st, const cf_redis_script *script, int nkeys, const char *const *keys, int nargs,
                         const char *const *args, const size_t *lens, redisReply **out, cf_error *err)
{
    retry r;
    retry_init(st, &r);
    while (cf_redis_eval(st->r, script, nkeys, keys, NULL, nargs, args, lens, out, err) < 0)
        if (!retry_again(st, &r, err))
            return -1;
    return 0;
}

typedef struct delivery_ref {
    char key[600];
    char field[24];
} delivery_ref;

static int delivery_ref_init(delivery_ref *d, const char *group, const char *topic, int32_t partition,
                             int64_t offset, cf_error *err)
{
    int n = snprintf(d->key, sizeof(d->key), "cf:deliveries:{%s/%s/%" PRId32 "}", group, topic, partition);
    if (n < 0 || (size_t)n >= sizeof(d->key))
        return cf_error_set(err, CF_E_INVALID, "topic name too long");
    snprintf(d->field, sizeof(d->field), "%" PRId64, offset);
    return 0;
}

int cf_wstate_attempt(cf_wstate *st, const char *topic, int32_t partition, int64_t offset, int64_t stored_below,
                      int64_t *attempt, cf_error *err)
{
    *attempt = 0;
    delivery_ref d;
    if (delivery_ref_init(&d, st->cfg->group, topic, partition, offset, err) < 0)
        return -1;
    char below[24];
    snprintf(below, sizeof(below), "%" PRId64, stored_below);
    const char *keys[1] = {d.key};
    const char *args[3] = {ATTEMPT_TTL_MS, d.field, below};
    redisReply *rep = NULL;
    if (eval_retrying(st, &attempt_script, 1, keys, 3, args, NULL, &rep, err) < 0)
        return -1;
    int rc = cf_redis_reply_i64(rep, attempt, err);
    cf_redis_reply_free(rep);
    if (rc == 0 && *attempt < 1)
        rc = cf_error_set(err, CF_E_REDIS, "attempt counter: unexpected value");
    return rc;
}

int cf_wstate_begin(cf_wstate *st, cf_request *req, int64_t writer_seq, const char *fence_key,
                    const char *fence_value, cf_wstate_run *run, bool *run_it, cf_result *res, cf_error *err)
{
    memset(run, 0, sizeof(*run));
    *run_it = true;
    st->write_refused = st->wrote = false;
    if (fence_key)
        cf_wstate_set_guard(st, fence_key, fence_value);
    if (!req->workspace && !req->thread)
        return 0;
    if (cf_wstate_prepare(st, req, writer_seq, run, run_it, res, err) < 0)
        return -1;
    run->prepared = *run_it;
    return 0;
}

int cf_wstate_end(cf_wstate *st, cf_request *req, cf_wstate_run *run, bool ran_to_completion, bool executed,
                  cf_result *res, cf_error *err)
{
    int rc = 0;
    if (ran_to_completion && run->prepared)
        rc = cf_wstate_finish(st, req, run, executed, res, err);
    cf_wstate_set_guard(st, NULL, NULL);
    cf_wstate_set_quota(st, NULL, 0, 0, NULL);
    cf_wstate_run_clear(run, req);
    return rc;
}

bool cf_wstate_write_refused(const cf_wstate *st)
{
    return st && st->write_refused;
}

void cf_wstate_set_quota(cf_wstate *st, const char *profile, int64_t workspace_bytes, int64_t checkpoint_bytes,
                         const char *request_id)
{
    cf_workspace_set_quota(st->ws, profile, workspace_bytes, request_id);
    cf_checkpoint_set_quota(st->cp, profile, checkpoint_bytes, request_id);
}

void cf_wstate_set_cancel(cf_wstate *st, const volatile int *job_cancel)
{
    st->job_cancel = job_cancel;
}

void cf_wstate_set_guard(cf_wstate *st, const char *key, const char *value)
{
    cf_workspace_set_guard(st->ws, key, value);
    cf_checkpoint_set_guard(st->cp, key, value);
}

/* ---------------------------------------------------------------- idempotency */

static const cf_redis_script claim_script = {
    "idem_claim",
    "-- KEYS: 1 idem hash, 2 lease; ARGV: 1 digest, 2 token, 3 lease ms\n"
    "local d = redis.call('HGET', KEYS[1], 'digest')\n"
    "if d then\n"
    "  if d ~= ARGV[1] then return {'reused'} end\n"
    "  return {'replay', redis.call('HGET', KEYS[1], 'result') or ''}\n"
    "end\n"
    "local mine = ARGV[1] .. ':' .. ARGV[2]\n"
    "local cur = redis.call('GET', KEYS[2])\n"
    "if not cur or cur == mine then\n"
    "  redis.call('SET', KEYS[2], mine, 'PX', ARGV[3])\n"
    "  return {'run'}\n"
    "end\n"
    "if string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. ':' then return {'reused'} end\n"
    "return {'busy', tostring(redis.call('PTTL', KEYS[2]))}\n",
};

/* Extends our lease; a lease that lapsed (Redis was away longer than it)
 * is taken back when nobody else took it and no answer is stored, so the
 * run's fenced writes do not fail for nothing. */
static const cf_redis_script renew_script = {
    "idem_renew",
    "-- KEYS: 1 idem hash, 2 lease; ARGV: 1 lease value, 2 lease ms\n"
    "local cur = redis.call('GET', KEYS[2])\n"
    "if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) return 1 end\n"
    "if not cur and redis.call('EXISTS', KEYS[1]) == 0 then\n"
    "  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
};

/* The first answer stays the answer, and only a run that still holds the
 * lease (or whose lease lapsed with nobody else taking it) may give it: a
 * run that lost its lease to another must not store a stale result over
 * the one its successor will store. */
static const cf_redis_script store_script = {
    "idem_store",
    "-- KEYS: 1 idem hash, 2 lease; ARGV: 1 digest, 2 lease value, 3 result, 4 ttl ms,\n"
    "-- 5 expires at (unix ms; 0: ttl from now)\n"
    "local cur = redis.call('GET', KEYS[2])\n"
    "if cur and cur ~= ARGV[2] then return 0 end\n"
    "local stored = 0\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then\n"
    "  redis.call('HSET', KEYS[1], 'digest', ARGV[1], 'result', ARGV[3], 'by', ARGV[2])\n"
    "  if tonumber(ARGV[5]) > 0 then redis.call('PEXPIREAT', KEYS[1], ARGV[5])\n"
    "  else redis.call('PEXPIRE', KEYS[1], ARGV[4]) end\n"
    "  stored = 1\n"
    "elseif redis.call('HGET', KEYS[1], 'by') == ARGV[2] then\n"
    "  stored = 1 -- ours, from a try whose reply was lost\n"
    "end\n"
    "if cur then redis.call('DEL', KEYS[2]) end\n"
    "return stored\n",
};

static const cf_redis_script release_script = {
    "idem_release",
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end\n"
    "return 0\n",
};

typedef struct idem_keys {
    char idem[CF_ID_MAX + 160];
    char lease[CF_ID_MAX + 160];
    char mine[CF_DIGEST_HEX + 256]; /* the lease's value: digest:token */
} idem_keys;

static int idem_keys_init(idem_keys *k, const char *scope, const char *id, const char *digest, const char *token,
                          cf_error *err)
{
    int a = snprintf(k->idem, sizeof(k->idem), "cf:idem:{%s/%s}", scope ? scope : "", id);
    int b = snprintf(k->lease, sizeof(k->lease), "cf:lease:{%s/%s}", scope ? scope : "", id);
    int c = snprintf(k->mine, sizeof(k->mine), "%s:%s", digest, token);
    if (a < 0 || (size_t)a >= sizeof(k->idem) || b < 0 || (size_t)b >= sizeof(k->lease) || c < 0 ||
        (size_t)c >= sizeof(k->mine))
        return cf_error_set(err, CF_E_INVALID, "request id or lease token too long");
    return 0;
}

int cf_wstate_lease_ref(const char *scope, const char *id, const char *digest, const char *token, char *key,
                        size_t keysz, char *value, size_t valuesz)
{
    idem_keys k;
    if (idem_keys_init(&k, scope, id, digest, token, NULL) < 0)
        return -1;
    if (cf_strlcpy(key, k.lease, keysz) >= keysz || cf_strlcpy(value, k.mine, valuesz) >= valuesz)
        return -1;
    return 0;
}

void cf_claim_clear(cf_claim *c)
{
    if (!c)
        return;
    free(c->stored.data);
    memset(c, 0, sizeof(*c));
}

int cf_wstate_claim(cf_wstate *st, const char *scope, const char *id, const char *digest, const char *token,
                    int64_t lease_ms, cf_claim *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    idem_keys k;
    if (idem_keys_init(&k, scope, id, digest, token, err) < 0)
        return -1;
    char ms[24];
    snprintf(ms, sizeof(ms), "%" PRId64, lease_ms);
    const char *keys[2] = {k.idem, k.lease};
    const char *args[3] = {digest, token, ms};
    redisReply *rep = NULL;
    if (cf_redis_eval(st->r, &claim_script, 2, keys, NULL, 3, args, NULL, &rep, err) < 0)
        return -1;
    int rc = 0;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 || rep->element[0]->type != REDIS_REPLY_STRING) {
        rc = cf_error_set(err, CF_E_REDIS, "idempotency claim: unexpected reply");
    } else if (cf_redis_reply_is(rep->element[0], "run")) {
        out->kind = CF_CLAIM_RUN;
    } else if (cf_redis_reply_is(rep->element[0], "reused")) {
        out->kind = CF_CLAIM_REUSED;
    } else if (cf_redis_reply_is(rep->element[0], "replay") && rep->elements == 2 &&
               rep->element[1]->type == REDIS_REPLY_STRING) {
        out->kind = CF_CLAIM_REPLAY;
        if (cf_bytes_set(&out->stored, rep->element[1]->str, rep->element[1]->len) < 0)
            rc = cf_error_set(err, CF_E_NOMEM, "out of memory");
    } else if (cf_redis_reply_is(rep->element[0], "busy") && rep->elements == 2 &&
               rep->element[1]->type == REDIS_REPLY_STRING) {
        out->kind = CF_CLAIM_BUSY;
        out->wait_ms = strtoll(rep->element[1]->str, NULL, 10);
    } else {
        rc = cf_error_set(err, CF_E_REDIS, "idempotency claim: unexpected reply");
    }
    cf_redis_reply_free(rep);
    if (rc < 0)
        cf_claim_clear(out);
    return rc;
}

int cf_wstate_lease_renew(cf_wstate *st, const char *scope, const char *id, const char *digest, const char *token,
                          int64_t lease_ms, bool *held, cf_error *err)
{
    *held = false;
    idem_keys k;
    if (idem_keys_init(&k, scope, id, digest, token, err) < 0)
        return -1;
    char ms[24];
    snprintf(ms, sizeof(ms), "%" PRId64, lease_ms);
    const char *keys[2] = {k.idem, k.lease};
    const char *args[2] = {k.mine, ms};
    redisReply *rep = NULL;
    if (cf_redis_eval(st->r, &renew_script, 2, keys, NULL, 2, args, NULL, &rep, err) < 0)
        return -1;
    int64_t v = 0;
    int rc = cf_redis_reply_i64(rep, &v, err);
    cf_redis_reply_free(rep);
    *held = v == 1;
    return rc;
}

int cf_wstate_store_result(cf_wstate *st, const char *scope, const char *id, const char *digest, const char *token,
                           const cf_bytes *result, int64_t ttl_ms, int64_t expire_at_ms, bool *stored,
                           cf_error *err)
{
    if (stored)
        *stored = false;
    idem_keys k;
    if (idem_keys_init(&k, scope, id, digest, token, err) < 0)
        return -1;
    char ms[24];
    snprintf(ms, sizeof(ms), "%" PRId64, ttl_ms);
    const char *keys[2] = {k.idem, k.lease};
    char at[24];
    snprintf(at, sizeof(at), "%" PRId64, expire_at_ms > 0 ? expire_at_ms : 0);
    const char *args[5] = {digest, k.mine, (const char *)result->data, ms, at};
    size_t lens[5] = {strlen(digest), strlen(k.mine), result->len, strlen(ms), strlen(at)};
    redisReply *rep = NULL;
    if (eval_retrying(st, &store_script, 2, keys, 5, args, lens, &rep, err) < 0)
        return -1;
    int64_t v = 0;
    int rc = cf_redis_reply_i64(rep, &v, err);
    cf_redis_reply_free(rep);
    if (stored)
        *stored = rc == 0 && v == 1;
    return rc;
}

int cf_wstate_quota_charge(cf_wstate *st, const char *kind, const char *scope, const cf_quota *q, int64_t ttl_ms,
                           int64_t bytes, cf_quota_outcome *out, cf_error *err)
{
    retry r;
    retry_init(st, &r);
    while (cf_quota_charge(st->r, kind, scope, q, ttl_ms, bytes, out, err) < 0)
        if (!retry_again(st, &r, err))
            return -1;
    return 0;
}

int cf_wstate_quota_refund(cf_wstate *st, const char *kind, const char *scope, int64_t slot, int64_t bytes,
                           cf_error *err)
{
    return cf_quota_refund(st->r, kind, scope, slot, bytes, err);
}

int cf_wstate_lease_release(cf_wstate *st, const char *scope, const char *id, const char *digest,
                            const char *token, cf_error *err)
{
    idem_keys k;
    if (idem_keys_init(&k, scope, id, digest, token, err) < 0)
        return -1;
    const char *keys[1] = {k.lease};
    const char *args[1] = {k.mine};
    return eval_retrying(st, &release_script, 1, keys, 1, args, NULL, NULL, err);
}
