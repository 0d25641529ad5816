/* bench_state: checkpoint and workspace costs against raw Redis, one run.
 *
 *   bench_state [--host H] [--port P] [--cp-ops N] [--state-bytes B]
 *               [--reps R] [--files F] [--file-bytes B] [--work-root DIR]
 *
 * 1. Checkpoints, sequential on one connection: cf_checkpoint_save of a
 *    msgpack map of --state-bytes (1 KiB), cf_checkpoint_latest and
 *    cf_checkpoint_get; anchor: plain hiredis SET/GET of the same number of
 *    bytes on another connection to the same server.  Blocks of the five
 *    variants are interleaved so machine noise hits all of them.
 * 2. Workspaces of --files files of --file-bytes random bytes (100 x 100 KiB
 *    = 10 MB), --reps repetitions:
 *      place:     cf_workspace_snapshot (current rev) + cf_workdir_create +
 *                 cf_workdir_put of every file;
 *      writeback: (10 modified, 5 deleted, 5 added in the directory, not
 *                 timed) cf_workdir_collect + diff against the snapshot +
 *                 cf_workspace_commit(expected_rev);
 *      full:      the same after rewriting every file;
 *    anchors: plain hiredis GET and SET of the same bytes (all files, or
 *    only the changed ones), one Lua script that GETs or SETs the same
 *    bytes (the floor for anything that moves them inside a script), and
 *    plain open/write/close of the files into a directory (the disk's share).
 * Medians of per-operation times, plus the server's share of each operation
 * (Lua time from INFO commandstats, main-thread CPU from INFO cpu).  Lines starting with RESULT are for
 * tests/bench/run_state.sh to collect. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cf_checkpoint.h"
#include "cf_redis.h"
#include "cf_util.h"
#include "cf_workdir.h"
#include "cf_workspace.h"

#define CP_THREAD "bench-cp"
#define WS_ID "bench-ws"

/* ---- small helpers ---- */

static void die(const char *what, const cf_error *err)
{
    fprintf(stderr, "bench_state: %s: %s\n", what, err ? err->msg : strerror(errno));
    exit(1);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct samples {
    int64_t *v;
    size_t n, cap;
    int64_t sum;
} samples;

static void add(samples *s, int64_t us)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (!s->v)
            die("out of memory", NULL);
    }
    s->v[s->n++] = us;
    s->sum += us;
}

static int64_t pct(samples *s, double p)
{
    if (s->n == 0)
        return 0;
    qsort(s->v, s->n, sizeof(*s->v), cmp_i64);
    return s->v[(size_t)(p * (double)(s->n - 1) + 0.5)];
}

static int64_t med(samples *s)
{
    return pct(s, 0.5);
}

/* Operations per second over the summed per-operation times. */
static double ops(const samples *s)
{
    return s->sum > 0 ? (double)s->n * 1e6 / (double)s->sum : 0.0;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        p[i] = (uint8_t)(rng_state >> 24);
    }
}

/* ---- plain hiredis anchor ---- */

static redisContext *raw_connect(const char *host, int port)
{
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "bench_state: raw connect: %s\n", c ? c->errstr : "out of memory");
        exit(1);
    }
    return c;
}

static void raw_set(redisContext *c, const char *key, const void *data, size_t len)
{
    const char *argv[3] = {"SET", key, data};
    size_t lens[3] = {3, strlen(key), len};
    redisReply *r = redisCommandArgv(c, 3, argv, lens);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "bench_state: raw SET failed\n");
        exit(1);
    }
    freeReplyObject(r);
}

static void raw_get(redisContext *c, const char *key, size_t expect)
{
    const char *argv[2] = {"GET", key};
    size_t lens[2] = {3, strlen(key)};
    redisReply *r = redisCommandArgv(c, 2, argv, lens);
    if (!r || r->type != REDIS_REPLY_STRING || (size_t)r->len != expect) {
        fprintf(stderr, "bench_state: raw GET failed\n");
        exit(1);
    }
    freeReplyObject(r);
}

static void raw_del(redisContext *c, const char *key)
{
    const char *argv[2] = {"DEL", key};
    size_t lens[2] = {3, strlen(key)};
    redisReply *r = redisCommandArgv(c, 2, argv, lens);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "bench_state: raw DEL failed\n");
        exit(1);
    }
    freeReplyObject(r);
}

typedef struct wfile {
    char path[64];
    uint8_t *data;
    size_t len;
} wfile;

/* The same bytes moved by one Lua script (EVAL of GETs or SETs over all
 * keys): the floor for any script that reads or writes them atomically. */
static const char LUA_GET_ALL[] =
    "local o = {} for i = 1, #KEYS do o[i] = redis.call('GET', KEYS[i]) end return o";
static const char LUA_SET_ALL[] =
    "for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[i]) end return #KEYS";

static void lua_all(redisContext *c, bool set, char (*keys)[64], const wfile *f, int nf)
{
    int argc = 3 + nf + (set ? nf : 0);
    const char **argv = calloc((size_t)argc, sizeof(*argv));
    size_t *lens = calloc((size_t)argc, sizeof(*lens));
    char nk[16];
    if (!argv || !lens)
        die("out of memory", NULL);
    snprintf(nk, sizeof(nk), "%d", nf);
    argv[0] = "EVAL", lens[0] = 4;
    argv[1] = set ? LUA_SET_ALL : LUA_GET_ALL, lens[1] = strlen(argv[1]);
    argv[2] = nk, lens[2] = strlen(nk);
    for (int i = 0; i < nf; i++) {
        argv[3 + i] = keys[i], lens[3 + i] = strlen(keys[i]);
        if (set)
            argv[3 + nf + i] = (const char *)f[i].data, lens[3 + nf + i] = f[i].len;
    }
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    bool ok = r && (set ? r->type == REDIS_REPLY_INTEGER && r->integer == nf
                        : r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)nf);
    if (ok && !set)
        for (int i = 0; i < nf; i++)
            ok = ok && r->element[i]->type == REDIS_REPLY_STRING && (size_t)r->element[i]->len == f[i].len;
    if (!ok) {
        fprintf(stderr, "bench_state: Lua %s anchor failed: %s\n", set ? "SET" : "GET",
                r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        exit(1);
    }
    freeReplyObject(r);
    free(argv);
    free(lens);
}

/* Server-side cost so far: Lua script time (EVALSHA/EVAL usec in INFO
 * commandstats; inner redis.call commands are inside it) and the main
 * thread's CPU time (INFO cpu, protocol and networking included).  Only
 * deltas around one kind of operation mean anything. */
typedef struct srv {
    int64_t script_us, cpu_us;
} srv;

static int64_t info_field(const char *text, const char *line_prefix, const char *field)
{
    const char *l = strstr(text, line_prefix);
    if (!l)
        return 0;
    const char *eol = strchr(l, '\n');
    const char *f = strstr(l, field);
    if (!f || (eol && f > eol))
        return 0;
    f += strlen(field);
    /* "usec=123" or "used_cpu_sys_main_thread:1.234567" (seconds). */
    char *end;
    double v = strtod(f, &end);
    if (end == f)
        return 0;
    return strchr(field, ':') ? (int64_t)(v * 1e6 + 0.5) : (int64_t)v;
}

static srv srv_now(redisContext *c)
{
    srv s = {0, 0};
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "bench_state: INFO failed\n");
        exit(1);
    }
    s.script_us = info_field(r->str, "cmdstat_evalsha:", "usec=") + info_field(r->str, "cmdstat_eval:", "usec=");
    freeReplyObject(r);
    r = redisCommand(c, "INFO cpu");
    if (!r || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "bench_state: INFO failed\n");
        exit(1);
    }
    s.cpu_us = info_field(r->str, "used_cpu_sys_main_thread:", "used_cpu_sys_main_thread:") +
               info_field(r->str, "used_cpu_user_main_thread:", "used_cpu_user_main_thread:");
    freeReplyObject(r);
    return s;
}

/* Accumulates the server cost of a block of operations. */
typedef struct srv_acc {
    int64_t script_us, cpu_us;
    size_t n;
} srv_acc;

static void srv_add(srv_acc *a, srv before, srv after, size_t n)
{
    a->script_us += after.script_us - before.script_us;
    a->cpu_us += after.cpu_us - before.cpu_us;
    a->n += n;
}

static double srv_script(const srv_acc *a)
{
    return a->n ? (double)a->script_us / (double)a->n : 0.0;
}

static double srv_cpu(const srv_acc *a)
{
    return a->n ? (double)a->cpu_us / (double)a->n : 0.0;
}

/* ---- checkpoint state: a msgpack map of exactly `target` bytes ---- */

typedef struct mp {
    uint8_t *p;
    size_t n, cap;
} mp;

static void mp_raw(mp *m, const void *d, size_t n)
{
    if (m->n + n > m->cap) {
        fprintf(stderr, "bench_state: state buffer too small\n");
        exit(1);
    }
    memcpy(m->p + m->n, d, n);
    m->n += n;
}

static void mp_str(mp *m, const char *s, size_t n)
{
    uint8_t h[3];
    if (n < 32) {
        h[0] = (uint8_t)(0xa0 | n);
        mp_raw(m, h, 1);
    } else if (n < 256) {
        h[0] = 0xd9;
        h[1] = (uint8_t)n;
        mp_raw(m, h, 2);
    } else {
        h[0] = 0xda;
        h[1] = (uint8_t)(n >> 8);
        h[2] = (uint8_t)n;
        mp_raw(m, h, 3);
    }
    mp_raw(m, s, n);
}

static void mp_cstr(mp *m, const char *s)
{
    mp_str(m, s, strlen(s));
}

static void mp_u32(mp *m, uint32_t v)
{
    uint8_t h[5] = {0xce, (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    mp_raw(m, h, 5);
}

/* Shaped like an agent's state: a step counter, recent messages, a few
 * variables, then a padding string that brings the total to `target`.
 * Returns the offset of the step counter's 4 bytes so each save can change
 * it in place. */
static size_t build_state(uint8_t *buf, size_t cap, size_t target, size_t *len)
{
    static const char filler[] = "The quick brown fox jumps over the lazy dog while the agent plans its next "
                                 "tool call and summarises what it has seen so far. ";
    mp m = {buf, 0, cap};
    uint8_t h = 0x84; /* fixmap of 4 */
    mp_raw(&m, &h, 1);
    mp_cstr(&m, "step");
    size_t step_off = m.n + 1;
    mp_u32(&m, 0);
    mp_cstr(&m, "messages");
    h = 0x96; /* fixarray of 6 */
    mp_raw(&m, &h, 1);
    for (int i = 0; i < 6; i++)
        mp_str(&m, filler, 40 + (size_t)i * 10);
    mp_cstr(&m, "vars");
    h = 0x88; /* fixmap of 8 */
    mp_raw(&m, &h, 1);
    for (int i = 0; i < 8; i++) {
        char k[8];
        snprintf(k, sizeof(k), "var%d", i);
        mp_cstr(&m, k);
        mp_str(&m, filler + i, 20);
    }
    mp_cstr(&m, "pad");
    /* Padding header is 2 bytes (str8) or 3 (str16); a target that falls
     * between the two comes out one byte short (the real size is printed). */
    if (target < m.n + 2) {
        fprintf(stderr, "bench_state: --state-bytes too small (min %zu)\n", m.n + 2);
        exit(1);
    }
    size_t rest = target - m.n;
    size_t pad = rest - 2 < 256 ? rest - 2 : rest - 3;
    char *p = malloc(pad ? pad : 1);
    if (!p)
        die("out of memory", NULL);
    memset(p, 'x', pad);
    mp_str(&m, p, pad);
    free(p);
    *len = m.n;
    return step_off;
}

static void set_step(uint8_t *buf, size_t off, uint32_t v)
{
    buf[off] = (uint8_t)(v >> 24);
    buf[off + 1] = (uint8_t)(v >> 16);
    buf[off + 2] = (uint8_t)(v >> 8);
    buf[off + 3] = (uint8_t)v;
}

/* ---- 1. checkpoints ---- */

static void bench_checkpoints(cf_redis *r, redisContext *raw, int n_ops, size_t state_bytes)
{
    cf_error err;
    cf_error_clear(&err);
    cf_checkpoint_store *cs = cf_checkpoint_store_new(r, NULL, &err);
    if (!cs)
        die("checkpoint store", &err);
    if (cf_checkpoint_delete_thread(cs, CP_THREAD, &err) < 0 && err.code != CF_E_NOT_FOUND)
        die("delete thread", &err);

    size_t cap = state_bytes + 64, len = 0;
    uint8_t *state = malloc(cap);
    if (!state)
        die("out of memory", NULL);
    size_t step_off = build_state(state, cap, state_bytes, &len);

    /* Ids of the retained checkpoints (max_per_thread is 100 by default),
     * read back round-robin by the get variant. */
    enum { RING = 100 };
    static char ring[RING][CF_CHECKPOINT_ID_MAX + 1];
    size_t ring_n = 0, ring_next = 0;
    uint32_t step = 0;

    /* Warm-up: script SHAs, connections, allocator, server caches. */
    for (int i = 0; i < 200; i++) {
        set_step(state, step_off, ++step);
        if (cf_checkpoint_save(cs, CP_THREAD, state, len, NULL, ring[ring_next], &err) < 0)
            die("save", &err);
        ring_next = (ring_next + 1) % RING;
        ring_n += ring_n < RING;
        raw_set(raw, "bench:raw1k", state, len);
        raw_get(raw, "bench:raw1k", len);
    }

    samples s_save = {0}, s_latest = {0}, s_get = {0}, s_rset = {0}, s_rget = {0};
    srv_acc v_save = {0}, v_latest = {0}, v_get = {0}, v_rset = {0}, v_rget = {0};
    const int block = 100;
    for (int done = 0; done < n_ops; done += block) {
        int k = n_ops - done < block ? n_ops - done : block;
        srv sv = srv_now(raw);
        for (int i = 0; i < k; i++) {
            set_step(state, step_off, ++step);
            int64_t t0 = cf_mono_us();
            if (cf_checkpoint_save(cs, CP_THREAD, state, len, NULL, ring[ring_next], &err) < 0)
                die("save", &err);
            add(&s_save, cf_mono_us() - t0);
            ring_next = (ring_next + 1) % RING;
            ring_n += ring_n < RING;
        }
        srv sv2 = srv_now(raw);
        srv_add(&v_save, sv, sv2, (size_t)k);
        for (int i = 0; i < k; i++) {
            int64_t t0 = cf_mono_us();
            raw_set(raw, "bench:raw1k", state, len);
            add(&s_rset, cf_mono_us() - t0);
        }
        sv = srv_now(raw);
        srv_add(&v_rset, sv2, sv, (size_t)k);
        for (int i = 0; i < k; i++) {
            cf_checkpoint cp = {0};
            int64_t t0 = cf_mono_us();
            if (cf_checkpoint_latest(cs, CP_THREAD, &cp, &err) < 0)
                die("latest", &err);
            add(&s_latest, cf_mono_us() - t0);
            if (cp.state_len != len) {
                fprintf(stderr, "bench_state: latest returned %zu state bytes, want %zu\n", cp.state_len, len);
                exit(1);
            }
            cf_checkpoint_clear(&cp);
        }
        sv2 = srv_now(raw);
        srv_add(&v_latest, sv, sv2, (size_t)k);
        for (int i = 0; i < k; i++) {
            cf_checkpoint cp = {0};
            const char *id = ring[(size_t)i % ring_n];
            int64_t t0 = cf_mono_us();
            if (cf_checkpoint_get(cs, CP_THREAD, id, &cp, &err) < 0)
                die("get", &err);
            add(&s_get, cf_mono_us() - t0);
            cf_checkpoint_clear(&cp);
        }
        sv = srv_now(raw);
        srv_add(&v_get, sv2, sv, (size_t)k);
        for (int i = 0; i < k; i++) {
            int64_t t0 = cf_mono_us();
            raw_get(raw, "bench:raw1k", len);
            add(&s_rget, cf_mono_us() - t0);
        }
        srv_add(&v_rget, sv, srv_now(raw), (size_t)k);
    }

    struct {
        const char *name;
        samples *s;
        srv_acc *v;
    } rows[] = {{"cp_save", &s_save, &v_save},
                {"cp_latest", &s_latest, &v_latest},
                {"cp_get", &s_get, &v_get},
                {"raw_set_state", &s_rset, &v_rset},
                {"raw_get_state", &s_rget, &v_rget}};
    printf("checkpoints: state %zu bytes, %d sequential ops each, one connection\n", len, n_ops);
    printf("  (server: mean per op of Lua script time and of redis-server main-thread CPU)\n");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        samples *s = rows[i].s;
        double o = ops(s);
        int64_t p50 = med(s), p99 = pct(s, 0.99);
        printf("  %-14s p50=%6lldus p99=%6lldus %8.0f ops/s   server: script %5.1fus cpu %5.1fus\n", rows[i].name,
               (long long)p50, (long long)p99, o, srv_script(rows[i].v), srv_cpu(rows[i].v));
        printf("RESULT %s p50_us=%lld p99_us=%lld ops_per_s=%.0f n=%zu bytes=%zu server_script_us=%.1f "
               "server_cpu_us=%.1f\n",
               rows[i].name, (long long)p50, (long long)p99, o, s->n, len, srv_script(rows[i].v),
               srv_cpu(rows[i].v));
    }
    printf("  save/raw SET ops ratio %.2f, latest/raw GET %.2f, get/raw GET %.2f\n", ops(&s_save) / ops(&s_rset),
           ops(&s_latest) / ops(&s_rget), ops(&s_get) / ops(&s_rget));
    printf("RESULT cp_vs_raw save_ratio=%.2f latest_ratio=%.2f get_ratio=%.2f\n", ops(&s_save) / ops(&s_rset),
           ops(&s_latest) / ops(&s_rget), ops(&s_get) / ops(&s_rget));

    if (cf_checkpoint_delete_thread(cs, CP_THREAD, &err) < 0)
        die("delete thread", &err);
    raw_del(raw, "bench:raw1k");
    free(s_save.v), free(s_latest.v), free(s_get.v), free(s_rset.v), free(s_rget.v);
    free(state);
    cf_checkpoint_store_destroy(cs);
}

/* ---- 2. workspaces ---- */

static void file_path(char *out, size_t n, int i, const char *tag)
{
    /* Ten directories so placement creates parents as a real tree would. */
    snprintf(out, n, "src/d%d/%s%03d.bin", i % 10, tag, i);
}

/* Replaces (O_TRUNC) or creates a file below the work directory, as the
 * user's program would (parents exist: every directory holds files). */
static void user_write(cf_workdir *wd, const char *rel, const void *data, size_t len)
{
    int fd = openat(cf_workdir_dirfd(wd), rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd) < 0)
        die(rel, NULL);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const cf_ws_entry *)a)->path, ((const cf_ws_entry *)b)->path);
}

/* Collect + diff + commit: what a worker does after the program ran.
 * Returns the number of puts and deletes in *nput / *ndel; fills the
 * per-phase times. */
static void write_back(cf_workspace_store *ws, redisContext *raw, srv_acc *v_commit, cf_workdir *wd,
                       cf_ws_listing *snap, size_t max_files, size_t max_total, int64_t *t_collect, int64_t *t_diff, int64_t *t_commit, size_t *nput,
                       size_t *ndel, int64_t *rev)
{
    cf_error err;
    cf_error_clear(&err);
    cf_file *files = NULL;
    size_t n = 0;
    int64_t t0 = cf_mono_us();
    if (cf_workdir_collect(wd, max_files, max_total, &files, &n, &err) < 0)
        die("collect", &err);
    int64_t t1 = cf_mono_us();

    /* Both sides are sorted by path (strcmp); sort the snapshot again in
     * case the store's bytewise order and strcmp ever disagree. */
    qsort(snap->entries, snap->n, sizeof(*snap->entries), entry_cmp);
    cf_ws_file *puts = calloc(n ? n : 1, sizeof(*puts));
    const char **dels = calloc(snap->n ? snap->n : 1, sizeof(*dels));
    if (!puts || !dels)
        die("out of memory", NULL);
    size_t np = 0, nd = 0, i = 0, j = 0;
    while (i < n || j < snap->n) {
        int c = i == n ? 1 : j == snap->n ? -1 : strcmp(files[i].path, snap->entries[j].path);
        if (c < 0) { /* new file */
            puts[np++] = (cf_ws_file){files[i].path, files[i].content.data, files[i].content.len};
            i++;
        } else if (c > 0) { /* gone */
            dels[nd++] = snap->entries[j].path;
            j++;
        } else {
            const cf_ws_entry *e = &snap->entries[j];
            if (files[i].content.len != e->size || memcmp(files[i].content.data, e->data, e->size) != 0)
                puts[np++] = (cf_ws_file){files[i].path, files[i].content.data, files[i].content.len};
            i++, j++;
        }
    }
    srv sv = srv_now(raw);
    int64_t t2 = cf_mono_us();
    int64_t new_rev = 0;
    if (cf_workspace_commit(ws, WS_ID, snap->rev, puts, np, dels, nd, &new_rev, &err) < 0)
        die("commit", &err);
    int64_t t3 = cf_mono_us();
    if (v_commit)
        srv_add(v_commit, sv, srv_now(raw), 1);
    *t_collect = t1 - t0;
    *t_diff = t2 - t1;
    *t_commit = t3 - t2;
    *nput = np;
    *ndel = nd;
    *rev = new_rev;
    free(puts);
    free(dels);
    cf_workdir_files_free(files, n);
}

/* Snapshot + create + put every file; returns the work directory and the
 * snapshot (kept for the diff). */
static cf_workdir *place(cf_workspace_store *ws, redisContext *raw, srv_acc *v_snap, const char *root,
                         cf_ws_listing *snap, int64_t *t_snap, int64_t *t_put)
{
    cf_error err;
    cf_error_clear(&err);
    cf_workdir *wd = NULL;
    srv sv = srv_now(raw);
    int64_t t0 = cf_mono_us();
    if (cf_workspace_snapshot(ws, WS_ID, CF_WS_ANY_REV, snap, &err) < 0)
        die("snapshot", &err);
    int64_t t1 = cf_mono_us();
    if (v_snap)
        srv_add(v_snap, sv, srv_now(raw), 1);
    int64_t t2 = cf_mono_us(); /* the INFO round trip belongs to neither */
    if (cf_workdir_create(root, (uid_t)-1, (gid_t)-1, &wd, &err) < 0)
        die("workdir create", &err);
    for (size_t i = 0; i < snap->n; i++)
        if (cf_workdir_put(wd, snap->entries[i].path, snap->entries[i].data, snap->entries[i].size, 0644, &err) < 0)
            die("workdir put", &err);
    int64_t t3 = cf_mono_us();
    *t_snap = t1 - t0;
    *t_put = t3 - t2;
    return wd;
}

/* Plain open/write/close of the files into a fresh directory, then reading
 * them back: what the disk alone costs. */
static void disk_anchor(const char *root, wfile *f, int nf, int64_t *t_write, int64_t *t_read)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/cf-bench-XXXXXX", root);
    if (!mkdtemp(dir))
        die("mkdtemp", NULL);
    char p[4200];
    uint8_t *buf = malloc(f[0].len);
    if (!buf)
        die("out of memory", NULL);
    int64_t t0 = cf_mono_us();
    for (int i = 0; i < nf; i++) {
        snprintf(p, sizeof(p), "%s/f%03d", dir, i);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, f[i].data, f[i].len) != (ssize_t)f[i].len || close(fd) < 0)
            die(p, NULL);
    }
    int64_t t1 = cf_mono_us();
    for (int i = 0; i < nf; i++) {
        snprintf(p, sizeof(p), "%s/f%03d", dir, i);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, buf, f[i].len) != (ssize_t)f[i].len || close(fd) < 0)
            die(p, NULL);
    }
    int64_t t2 = cf_mono_us();
    for (int i = 0; i < nf; i++) {
        snprintf(p, sizeof(p), "%s/f%03d", dir, i);
        unlink(p);
    }
    rmdir(dir);
    free(buf);
    *t_write = t1 - t0;
    *t_read = t2 - t1;
}

static void report(const char *name, samples *s, const char *extra)
{
    printf("RESULT %s p50_us=%lld min_us=%lld max_us=%lld n=%zu%s%s\n", name, (long long)med(s),
           (long long)s->v[0], (long long)s->v[s->n - 1], s->n, extra ? " " : "", extra ? extra : "");
}

static void bench_workspaces(cf_redis *r, redisContext *raw, int reps, int nf, size_t fbytes, const char *root)
{
    cf_error err;
    cf_error_clear(&err);
    cf_workspace_store *ws = cf_workspace_store_new(r, NULL, &err);
    if (!ws)
        die("workspace store", &err);
    if (cf_workspace_delete(ws, WS_ID, &err) < 0 && err.code != CF_E_NOT_FOUND)
        die("workspace delete", &err);
    if (cf_workspace_create(ws, WS_ID, "bench", "bench", &err) < 0)
        die("workspace create", &err);

    wfile *f = calloc((size_t)nf, sizeof(*f));
    cf_ws_file *puts = calloc((size_t)nf, sizeof(*puts));
    if (!f || !puts)
        die("out of memory", NULL);
    for (int i = 0; i < nf; i++) {
        file_path(f[i].path, sizeof(f[i].path), i, "f");
        f[i].len = fbytes;
        f[i].data = malloc(fbytes);
        if (!f[i].data)
            die("out of memory", NULL);
        fill_random(f[i].data, fbytes);
        puts[i] = (cf_ws_file){f[i].path, f[i].data, f[i].len};
    }
    int64_t rev = 0;
    int64_t t0 = cf_mono_us();
    if (cf_workspace_commit(ws, WS_ID, 0, puts, (size_t)nf, NULL, 0, &rev, &err) < 0)
        die("initial commit", &err);
    int64_t t_initial = cf_mono_us() - t0;
    size_t total = (size_t)nf * fbytes;
    size_t max_files = (size_t)nf * 2, max_total = total * 2;
    /* The partial write-back: 10 modified, 5 deleted, 5 added (scaled for
     * other --files values). */
    int n_mod = nf / 10, n_del = nf / 20, n_add = nf / 20;
    uint8_t *scratch = malloc(fbytes);
    if (!scratch)
        die("out of memory", NULL);

    samples a_place = {0}, a_snap = {0}, a_put = {0};
    samples b_all = {0}, b_collect = {0}, b_diff = {0}, b_commit = {0};
    samples q_all = {0}, q_commit = {0}; /* the partial write-back charged to a profile's quota (every other rep) */
    samples c_all = {0}, c_collect = {0}, c_diff = {0}, c_commit = {0};
    samples l_get = {0}, l_set = {0}, r_get = {0}, r_set = {0}, r_setpart = {0}, d_write = {0}, d_read = {0}, destroy = {0};
    srv_acc v_snap = {0}, v_part = {0}, v_full = {0}, v_rset = {0}, v_rget = {0};
    size_t last_np = 0, last_nd = 0, full_np = 0;

    for (int rep = -1; rep < reps; rep++) { /* rep -1 warms up */
        bool keep = rep >= 0;
        int64_t ts, tp, tc, td, tm;
        size_t np, nd;
        cf_ws_listing snap = {0};

        /* (a) place, then (b) a partial change written back. */
        cf_workdir *wd = place(ws, raw, keep ? &v_snap : NULL, root, &snap, &ts, &tp);
        if (snap.n != (size_t)nf) {
            fprintf(stderr, "bench_state: snapshot has %zu files, want %d\n", snap.n, nf);
            exit(1);
        }
        if (keep)
            add(&a_place, ts + tp), add(&a_snap, ts), add(&a_put, tp);
        /* Which files change rotates with the repetition; the deleted ones
         * come back as additions under new names. */
        for (int k = 0; k < n_mod; k++) {
            const cf_ws_entry *e = &snap.entries[(size_t)(k * 7 + rep + 1) % snap.n];
            fill_random(scratch, fbytes);
            user_write(wd, e->path, scratch, fbytes);
        }
        for (int k = 0; k < n_del; k++) {
            const cf_ws_entry *e = &snap.entries[(size_t)(k * 7 + 3 + rep + 1) % snap.n];
            if (unlinkat(cf_workdir_dirfd(wd), e->path, 0) < 0)
                die("unlink", NULL);
        }
        for (int k = 0; k < n_add; k++) {
            char p[64], tag[16];
            snprintf(tag, sizeof(tag), "n%d-", rep + 1);
            file_path(p, sizeof(p), k, tag);
            fill_random(scratch, fbytes);
            user_write(wd, p, scratch, fbytes);
        }
        /* Every other repetition charges the write to a profile's quota (a
         * worker's write-back for a tenant: the growth asked first, the
         * ledger reserved, the write, the ledger measured; a cap far off). */
        bool quota = rep % 2 == 1;
        cf_workspace_set_quota(ws, quota ? "bench" : NULL, (int64_t)1 << 40, NULL);
        write_back(ws, raw, keep && !quota ? &v_part : NULL, wd, &snap, max_files, max_total, &tc, &td, &tm, &np, &nd,
                   &rev);
        cf_workspace_set_quota(ws, NULL, 0, NULL);
        if (keep && quota)
            add(&q_all, tc + td + tm), add(&q_commit, tm);
        else if (keep)
            add(&b_all, tc + td + tm), add(&b_collect, tc), add(&b_diff, td), add(&b_commit, tm);
        last_np = np, last_nd = nd;
        t0 = cf_mono_us();
        cf_workdir_destroy(wd);
        if (keep)
            add(&destroy, cf_mono_us() - t0);
        cf_ws_listing_clear(&snap);

        /* (c) every file changes. */
        wd = place(ws, raw, keep ? &v_snap : NULL, root, &snap, &ts, &tp);
        if (keep)
            add(&a_place, ts + tp), add(&a_snap, ts), add(&a_put, tp);
        for (size_t k = 0; k < snap.n; k++) {
            fill_random(scratch, fbytes);
            user_write(wd, snap.entries[k].path, scratch, fbytes);
        }
        write_back(ws, raw, keep ? &v_full : NULL, wd, &snap, max_files, max_total, &tc, &td, &tm, &np, &nd, &rev);
        if (keep)
            add(&c_all, tc + td + tm), add(&c_collect, tc), add(&c_diff, td), add(&c_commit, tm);
        full_np = np;
        cf_workdir_destroy(wd);
        cf_ws_listing_clear(&snap);

        /* Anchors: the same bytes through plain hiredis, and the disk. */
        char key[64];
        srv sv0 = srv_now(raw);
        int64_t t1 = cf_mono_us();
        for (int i = 0; i < nf; i++) {
            snprintf(key, sizeof(key), "bench:raw:%d", i);
            raw_set(raw, key, f[i].data, f[i].len);
        }
        int64_t dur_set = cf_mono_us() - t1;
        srv sv1 = srv_now(raw);
        t1 = cf_mono_us();
        for (int i = 0; i < nf; i++) {
            snprintf(key, sizeof(key), "bench:raw:%d", i);
            raw_get(raw, key, f[i].len);
        }
        int64_t dur_get = cf_mono_us() - t1;
        srv sv2 = srv_now(raw);
        if (keep)
            srv_add(&v_rset, sv0, sv1, 1), srv_add(&v_rget, sv1, sv2, 1);
        /* What the partial write-back changes, written plainly: the
         * modified and added files and the deletions. */
        t1 = cf_mono_us();
        for (int i = 0; i < n_mod + n_add; i++) {
            snprintf(key, sizeof(key), "bench:part:%d", i);
            raw_set(raw, key, f[i].data, f[i].len);
        }
        for (int i = 0; i < n_del; i++) {
            snprintf(key, sizeof(key), "bench:raw:%d", i);
            raw_del(raw, key);
        }
        int64_t dur_part = cf_mono_us() - t1;
        char(*lkeys)[64] = calloc((size_t)nf, 64);
        if (!lkeys)
            die("out of memory", NULL);
        for (int i = 0; i < nf; i++)
            snprintf(lkeys[i], 64, "bench:lua:%d", i);
        t1 = cf_mono_us();
        lua_all(raw, true, lkeys, f, nf);
        int64_t dur_lset = cf_mono_us() - t1;
        t1 = cf_mono_us();
        lua_all(raw, false, lkeys, f, nf);
        int64_t dur_lget = cf_mono_us() - t1;
        free(lkeys);
        int64_t tw, tr;
        disk_anchor(root, f, nf, &tw, &tr);
        if (keep) {
            add(&r_set, dur_set), add(&r_get, dur_get), add(&r_setpart, dur_part);
            add(&l_set, dur_lset), add(&l_get, dur_lget);
            add(&d_write, tw), add(&d_read, tr);
        }
    }

    cf_ws_info info = {0};
    if (cf_workspace_info(ws, WS_ID, &info, &err) < 0)
        die("info", &err);

    printf("\nworkspace: %d files x %zu bytes = %zu bytes, %d repetitions (initial commit %lldus), work root %s\n",
           nf, fbytes, total, reps, (long long)t_initial, root);
    printf("  place (snapshot + put)      p50 %7lldus  = snapshot %lldus + workdir put %lldus (n=%zu)\n",
           (long long)med(&a_place), (long long)med(&a_snap), (long long)med(&a_put), a_place.n);
    printf("  write-back partial (+%zu puts, %zu deletes) p50 %7lldus = collect %lldus + diff %lldus + commit %lldus\n",
           last_np, last_nd, (long long)med(&b_all), (long long)med(&b_collect), (long long)med(&b_diff),
           (long long)med(&b_commit));
    printf("  write-back partial charged to a quota p50 %7lldus, commit %lldus (n=%zu; without: %lldus, commit %lldus, "
           "n=%zu)\n",
           (long long)med(&q_all), (long long)med(&q_commit), q_all.n, (long long)med(&b_all), (long long)med(&b_commit),
           b_all.n);
    printf("  write-back full (%zu puts)  p50 %7lldus = collect %lldus + diff %lldus + commit %lldus\n", full_np,
           (long long)med(&c_all), (long long)med(&c_collect), (long long)med(&c_diff), (long long)med(&c_commit));
    printf("  workdir destroy             p50 %7lldus\n", (long long)med(&destroy));
    printf("  server per operation (mean): snapshot script %.0fus cpu %.0fus; partial commit script %.0fus cpu %.0fus; "
           "full commit script %.0fus cpu %.0fus; raw %d x GET cpu %.0fus, %d x SET cpu %.0fus\n",
           srv_script(&v_snap), srv_cpu(&v_snap), srv_script(&v_part), srv_cpu(&v_part), srv_script(&v_full),
           srv_cpu(&v_full), nf, srv_cpu(&v_rget), nf, srv_cpu(&v_rset));
    printf("  anchors: raw %d x GET %lldus, %d x SET %lldus, partial SET/DEL %lldus; plain file write %lldus, "
           "read %lldus\n",
           nf, (long long)med(&r_get), nf, (long long)med(&r_set), (long long)med(&r_setpart),
           (long long)med(&d_write), (long long)med(&d_read));
    double ra = (double)med(&a_place) / (double)med(&r_get);
    double ra_disk = (double)med(&a_place) / (double)(med(&r_get) + med(&d_write));
    double rb = (double)med(&b_all) / (double)med(&r_setpart);
    double rb_disk = (double)med(&b_all) / (double)(med(&r_setpart) + med(&d_read));
    double rc = (double)med(&c_all) / (double)med(&r_set);
    double rc_disk = (double)med(&c_all) / (double)(med(&r_set) + med(&d_read));
    printf("  anchors in one Lua script (EVAL of %d GETs / SETs): get %lldus, set %lldus\n", nf,
           (long long)med(&l_get), (long long)med(&l_set));
    printf("  ratios (time ours / time raw): place %.2f (vs raw GET + plain write %.2f), partial %.2f (vs raw "
           "SET + plain read %.2f), full %.2f (vs raw SET + plain read %.2f)\n",
           ra, ra_disk, rb, rb_disk, rc, rc_disk);
    printf("  workspace after the run: rev %lld, %zu files, %llu bytes, oldest readable rev %lld\n",
           (long long)info.rev, info.nfiles, (unsigned long long)info.total_bytes, (long long)info.oldest_rev);

    char extra[256];
    snprintf(extra, sizeof(extra), "snapshot_p50_us=%lld put_p50_us=%lld raw_get_p50_us=%lld ratio=%.2f ratio_disk=%.2f",
             (long long)med(&a_snap), (long long)med(&a_put), (long long)med(&r_get), ra, ra_disk);
    report("ws_place", &a_place, extra);
    snprintf(extra, sizeof(extra),
             "collect_p50_us=%lld diff_p50_us=%lld commit_p50_us=%lld puts=%zu deletes=%zu raw_p50_us=%lld "
             "ratio=%.2f ratio_disk=%.2f",
             (long long)med(&b_collect), (long long)med(&b_diff), (long long)med(&b_commit), last_np, last_nd,
             (long long)med(&r_setpart), rb, rb_disk);
    report("ws_writeback_partial", &b_all, extra);
    snprintf(extra, sizeof(extra), "commit_p50_us=%lld unquoted_p50_us=%lld unquoted_commit_p50_us=%lld ratio=%.2f",
             (long long)med(&q_commit), (long long)med(&b_all), (long long)med(&b_commit),
             med(&b_all) > 0 ? (double)med(&q_all) / (double)med(&b_all) : 0.0);
    report("ws_writeback_partial_quota", &q_all, extra);
    snprintf(extra, sizeof(extra),
             "collect_p50_us=%lld diff_p50_us=%lld commit_p50_us=%lld puts=%zu raw_set_p50_us=%lld ratio=%.2f "
             "ratio_disk=%.2f",
             (long long)med(&c_collect), (long long)med(&c_diff), (long long)med(&c_commit), full_np,
             (long long)med(&r_set), rc, rc_disk);
    report("ws_writeback_full", &c_all, extra);
    snprintf(extra, sizeof(extra),
             "snapshot_script_us=%.0f snapshot_cpu_us=%.0f partial_commit_script_us=%.0f partial_commit_cpu_us=%.0f "
             "full_commit_script_us=%.0f full_commit_cpu_us=%.0f raw_get_all_cpu_us=%.0f raw_set_all_cpu_us=%.0f",
             srv_script(&v_snap), srv_cpu(&v_snap), srv_script(&v_part), srv_cpu(&v_part), srv_script(&v_full),
             srv_cpu(&v_full), srv_cpu(&v_rget), srv_cpu(&v_rset));
    printf("RESULT ws_server %s\n", extra);
    report("ws_raw_get_all", &r_get, NULL);
    report("ws_raw_set_all", &r_set, NULL);
    report("ws_raw_set_partial", &r_setpart, NULL);
    report("ws_lua_get_all", &l_get, NULL);
    report("ws_lua_set_all", &l_set, NULL);
    report("ws_file_write_all", &d_write, NULL);
    report("ws_file_read_all", &d_read, NULL);
    report("ws_workdir_destroy", &destroy, NULL);

    cf_ws_info_clear(&info);
    if (cf_workspace_delete(ws, WS_ID, &err) < 0)
        die("workspace delete", &err);
    char key[64];
    for (int i = 0; i < nf; i++) {
        snprintf(key, sizeof(key), "bench:raw:%d", i);
        raw_del(raw, key);
        snprintf(key, sizeof(key), "bench:part:%d", i);
        raw_del(raw, key);
        snprintf(key, sizeof(key), "bench:lua:%d", i);
        raw_del(raw, key);
    }
    samples *all[] = {&a_place, &a_snap, &a_put, &b_all, &b_collect, &b_diff, &b_commit, &c_all, &c_collect,
                      &c_diff, &c_commit, &r_get, &r_set, &r_setpart, &l_get, &l_set, &d_write, &d_read, &destroy};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]->v);
    for (int i = 0; i < nf; i++)
        free(f[i].data);
    free(f);
    free(puts);
    free(scratch);
    cf_workspace_store_destroy(ws);
}

static long num(const char *s, long lo, long hi, const char *what)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_state: bad %s '%s' (%ld..%ld)\n", what, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *root = "/tmp";
    int port = 25379, cp_ops = 2000, reps = 15, nf = 100;
    size_t state_bytes = 1024, fbytes = 100 * 1024;
    static const struct option opts[] = {{"host", required_argument, NULL, 'h'},
                                         {"port", required_argument, NULL, 'p'},
                                         {"cp-ops", required_argument, NULL, 'c'},
                                         {"state-bytes", required_argument, NULL, 's'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"files", required_argument, NULL, 'f'},
                                         {"file-bytes", required_argument, NULL, 'b'},
                                         {"work-root", required_argument, NULL, 'w'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'h': host = optarg; break;
        case 'p': port = (int)num(optarg, 1, 65535, "port"); break;
        case 'c': cp_ops = (int)num(optarg, 1, 1000000, "cp-ops"); break;
        case 's': state_bytes = (size_t)num(optarg, 128, 1 << 20, "state-bytes"); break;
        case 'r': reps = (int)num(optarg, 1, 1000, "reps"); break;
        case 'f': nf = (int)num(optarg, 20, 1000, "files"); break;
        case 'b': fbytes = (size_t)num(optarg, 1, 1 << 20, "file-bytes"); break;
        case 'w': root = optarg; break;
        default:
            fprintf(stderr, "usage: bench_state [--host H] [--port P] [--cp-ops N] [--state-bytes B] [--reps R] "
                            "[--files F] [--file-bytes B] [--work-root DIR]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    rc.host = host;
    rc.port = port;
    cf_error err;
    cf_error_clear(&err);
    cf_redis *r = cf_redis_new(&rc, true, &err);
    if (!r)
        die("connect", &err);
    redisContext *raw = raw_connect(host, port);

    bench_checkpoints(r, raw, cp_ops, state_bytes);
    bench_workspaces(r, raw, reps, nf, fbytes, root);

    redisFree(raw);
    cf_redis_destroy(r);
    return 0;
}
