/* The compile / harness / cases / collect pipeline (see cf_pipeline.h). */
#include "cf_pipeline.h"

#include "cf_runner.h"

#include "cf_log.h"
#include "cf_msgpack.h"
#include "cf_util.h"
#include "cf_workdir.h"
#include "diagnostics_int.h"
#include "session_int.h"
#include "cf_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LOG_SUB "pipeline"
#define MAX_DIAGNOSTICS 200
#define MAX_TC_DIRS 8
#define VERSION_PROBE_US (10 * 1000000LL)
#define COLLECT_MAX_FILES 1000
#define ARGV_MAX 256
#define CASES_OUTPUT_BYTES (16u << 20) /* stdout + stderr of all cases of a request */

enum { H_PYTHON, H_JAVASCRIPT, H_TYPESCRIPT, H_RUST, H_SESSION_PYTHON, H_SESSION_SHELL, H__COUNT };
static const char *const harness_file[H__COUNT] = {"python.py", "javascript.js", "typescript.ts", "rust.rs",
                                                   "session_python.py", "session_shell.sh"};
#define HARNESS_MAX_BYTES (64 * 1024)

typedef struct toolchain {
    char *path;       /* resolved absolute path; NULL = off */
    char version[96]; /* "gcc 12.2.0" */
    char why[320];    /* why off */
} toolchain;

typedef struct cache_entry {
    struct cache_entry *prev, *next; /* LRU: head = most recent */
    char key[CF_DIGEST_HEX];
    cf_bytes artifact;
    cf_diagnostic *diags; /* warnings of the build */
    size_t n_diags;
    cf_compile_info info;
    size_t bytes;
} cache_entry;

struct cf_pipeline {
    toolchain tc[CF_LANG__COUNT];
    char *node;
    char *ts_types;   /* <node_modules>/@types for tsc --typeRoots */
    char *harness[H__COUNT];
    size_t harness_len[H__COUNT];
    char *allowed[CF_LANG__COUNT];
    char *tc_dirs[MAX_TC_DIRS + 1];
    cf_pipeline_config cfg;
    uint32_t languages;
    pthread_mutex_t lock; /* cache and stats */
    cache_entry *head, *tail;
    size_t cache_bytes, cache_entries;
    cf_pipeline_stats stats;
};

/* ---- set-up ---- */

static bool executable(const char *path)
{
    struct stat sb;
    return path && path[0] == '/' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0111);
}

/* First line a toolchain prints for its version (argv fixed by us; run
 * once at start, as the worker), through the runner: bounded in time and
 * bytes like any execution. */
static int probe_version(char *const argv[], char *out, size_t size, bool rustup_env)
{
    /* rustup's proxies find their toolchains through HOME (or RUSTUP_HOME
     * and CARGO_HOME): only the sysroot probe passes those on. */
    char home[PATH_MAX + 8], rhome[PATH_MAX + 16], chome[PATH_MAX + 16];
    const char *h = getenv("HOME"), *rh = getenv("RUSTUP_HOME"), *ch = getenv("CARGO_HOME");
    snprintf(home, sizeof(home), "HOME=%s", rustup_env && h ? h : "/nonexistent");
    snprintf(rhome, sizeof(rhome), "RUSTUP_HOME=%s", rh ? rh : "");
    snprintf(chome, sizeof(chome), "CARGO_HOME=%s", ch ? ch : "");
    char *envp[8] = {"PATH=/usr/local/bin:/usr/bin:/bin", home, "GOTOOLCHAIN=local", "GOTELEMETRY=off", "LC_ALL=C"};
    int ne = 5;
    if (rustup_env && rh)
        envp[ne++] = rhome;
    if (rustup_env && ch)
        envp[ne++] = chome;
    envp[ne] = NULL;
    cf_run_spec spec = {.path = argv[0], .argv = argv, .envp = envp, .cwd = "/", .max_stdout = 512,
                        .max_stderr = 512, .timeout_us = VERSION_PROBE_US};
    cf_run_outcome o;
    memset(&o, 0, sizeof(o));
    cf_error err;
    cf_error_clear(&err);
    int rc = -1;
    if (cf_run(&spec, &o, &err) == 0 && o.exited && o.exit_code == 0) {
        size_t len = 0;
        const char *text = (const char *)o.out.data;
        while (text && len < o.out.len && text[len] != '\n')
            len++;
        if (len > 0) {
            cf_sanitize_text(text, len, false, out, size);
            rc = 0;
        }
    }
    cf_run_outcome_free(&o);
    return rc;
}

/* Whether every uid may reach dir: each directory on the way searchable
 * by others, dir itself readable and searchable.  The sandbox binds a
 * toolchain as the run uid, which has no other right on host files; a
 * toolchain below /root (0700) would fail every execution's setup. */
static bool reachable_by_all(const char *dir, char *why, size_t wsz)
{
    char walk[PATH_MAX];
    cf_strlcpy(walk, dir, sizeof(walk));
    bool last = true;
    for (;;) {
        struct stat sb;
        unsigned need = last ? 05 : 01;
        if (stat(walk, &sb) < 0) {
            snprintf(why, wsz, "'%.100s': %s", walk, strerror(errno));
            return false;
        }
        if ((sb.st_mode & need) != need) {
            snprintf(why, wsz, "'%.100s' is not %s by other users (mode %03o)", walk,
                     last ? "readable and searchable" : "searchable", (unsigned)(sb.st_mode & 0777));
            return false;
        }
        char *slash = strrchr(walk, '/');
        if (!slash || slash == walk)
            return true;
        *slash = '\0';
        last = false;
    }
}

/* Adds the directory a toolchain lives in when it is outside the system
 * directories every sandbox already has. */
static void add_tc_dir(cf_pipeline *p, const char *dir)
{
    static const char *const system[] = {"/usr/", "/bin/", "/lib/", "/lib64/", "/sbin/"};
    char with_slash[PATH_MAX];
    snprintf(with_slash, sizeof(with_slash), "%s/", dir);
    for (size_t i = 0; i < sizeof(system) / sizeof(system[0]); i++)
        if (strncmp(with_slash, system[i], strlen(system[i])) == 0)
            return;
    size_t n = 0;
    while (p->tc_dirs[n]) {
        if (strcmp(p->tc_dirs[n], dir) == 0)
            return;
        n++;
    }
    if (n < MAX_TC_DIRS)
        p->tc_dirs[n] = cf_strdup(dir);
}

/* dirname applied `levels` times to a resolved path. */
static void up(char *path, int levels)
{
    for (int i = 0; i < levels; i++) {
        char *s = strrchr(path, '/');
        if (!s || s == path) {
            path[0] = '/';
            path[1] = '\0';
            return;
        }
        *s = '\0';
    }
}

static void setup_toolchain(cf_pipeline *p, cf_language l, const char *configured)
{
    toolchain *t = &p->tc[l];
    if (!configured || !configured[0]) {
        snprintf(t->why, sizeof(t->why), "no toolchain configured");
        return;
    }
    char real[PATH_MAX];
    if (configured[0] != '/' || !realpath(configured, real) || !executable(real)) {
        snprintf(t->why, sizeof(t->why), "'%.150s' is not an executable absolute path", configured);
        return;
    }
    if (l == CF_LANG_RUST) {
        /* The compiler itself, not a rustup proxy (which resolves to
         * rustup and needs a home the sandbox does not have): its
         * sysroot's bin/rustc. */
        char *sargv[] = {(char *)configured, "--print", "sysroot", NULL};
        char sysroot[PATH_MAX - 16], bin[PATH_MAX];
        if (probe_version(sargv, sysroot, sizeof(sysroot), true) < 0 || sysroot[0] != '/') {
            snprintf(t->why, sizeof(t->why), "'%.150s --print sysroot' failed", configured);
            return;
        }
        snprintf(bin, sizeof(bin), "%s/bin/rustc", sysroot);
        if (!realpath(bin, real) || !executable(real)) {
            snprintf(t->why, sizeof(t->why), "no rustc in the sysroot '%.150s'", sysroot);
            return;
        }
    }
    if (l == CF_LANG_TYPESCRIPT && !p->node) {
        snprintf(t->why, sizeof(t->why), "no node to run tsc");
        return;
    }
    char *argv[4];
    int ac = 0;
    if (l == CF_LANG_TYPESCRIPT)
        argv[ac++] = p->node;
    argv[ac++] = real;
    argv[ac++] = l == CF_LANG_C || l == CF_LANG_CPP ? "-dumpfullversion" : l == CF_LANG_GO ? "version" : "--version";
    argv[ac] = NULL;
    char v[96];
    if (probe_version(argv, v, sizeof(v), false) < 0) {
        snprintf(t->why, sizeof(t->why), "'%.150s' did not tell its version", real);
        return;
    }
    switch (l) {
    case CF_LANG_C: snprintf(t->version, sizeof(t->version), "gcc %.80s", v); break;
    case CF_LANG_CPP: snprintf(t->version, sizeof(t->version), "g++ %.80s", v); break;
    case CF_LANG_TYPESCRIPT: snprintf(t->version, sizeof(t->version), "tsc %.80s", strncmp(v, "Version ", 8) ? v : v + 8); break;
    default: cf_strlcpy(t->version, v, sizeof(t->version)); break; /* "rustc 1.63.0", "go version go1.19.8 ..." */
    }
    if (l == CF_LANG_GO && strncmp(t->version, "go version ", 11) == 0)
        memmove(t->version, t->version + 11, strlen(t->version + 11) + 1);
    /* The tree the toolchain needs at run time. */
    char dir[PATH_MAX];
    cf_strlcpy(dir, real, sizeof(dir));
    {
        char root[PATH_MAX], why[220];
        cf_strlcpy(root, real, sizeof(root));
        up(root, l == CF_LANG_TYPESCRIPT ? 3 : l == CF_LANG_RUST || l == CF_LANG_GO ? 2 : 1);
        if (!reachable_by_all(root, why, sizeof(why))) {
            snprintf(t->why, sizeof(t->why), "the sandbox's run uids cannot use it: %s", why);
            t->version[0] = '\0';
            return;
        }
    }
    t->path = cf_strdup(real);
    if (!t->path)
        return;
    p->languages |= 1u << l;
    switch (l) {
    case CF_LANG_RUST: up(dir, 2); add_tc_dir(p, dir); break; /* the sysroot: bin/rustc */
    case CF_LANG_GO: up(dir, 2); add_tc_dir(p, dir); break;   /* GOROOT: bin/go */
    case CF_LANG_TYPESCRIPT: {
        up(dir, 3); /* node_modules: typescript/bin/tsc */
        add_tc_dir(p, dir);
        char types[PATH_MAX];
        snprintf(types, sizeof(types), "%s/@types", dir);
        p->ts_types = cf_strdup(types);
        break;
    }
    default: up(dir, 1); add_tc_dir(p, dir); break;
    }
}

static int read_harness(cf_pipeline *p, int h, cf_error *err)
{
    if (!p->cfg.harness_dir || !p->cfg.harness_dir[0])
        return 0;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", p->cfg.harness_dir, harness_file[h]);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        cf_log_warn(LOG_SUB, "harness %s: %s: function harness unavailable", path, strerror(errno));
        return 0;
    }
    char *buf = malloc(HARNESS_MAX_BYTES + 1);
    if (!buf) {
        close(fd);
        return cf_error_set(err, CF_E_NOMEM, "pipeline: out of memory");
    }
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf + got, HARNESS_MAX_BYTES + 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got > HARNESS_MAX_BYTES)
            break;
    }
    close(fd);
    if (got == 0 || got > HARNESS_MAX_BYTES) {
        free(buf);
        cf_log_warn(LOG_SUB, "harness %s: empty or larger than %d bytes: function harness unavailable", path,
                    HARNESS_MAX_BYTES);
        return 0;
    }
    buf[got] = '\0';
    p->harness[h] = buf;
    p->harness_len[h] = got;
    return 0;
}

int cf_pipeline_new(const cf_pipeline_config *cfg, cf_pipeline **out, cf_error *err)
{
    *out = NULL;
    cf_pipeline *p = calloc(1, sizeof(*p));
    if (!p)
        return cf_error_set(err, CF_E_NOMEM, "pipeline: out of memory");
    p->cfg = *cfg;
    pthread_mutex_init(&p->lock, NULL);
    char real[PATH_MAX];
    if (cfg->node && cfg->node[0] == '/' && realpath(cfg->node, real) && executable(real))
        p->node = cf_strdup(real);
    setup_toolchain(p, CF_LANG_C, cfg->cc);
    setup_toolchain(p, CF_LANG_CPP, cfg->cxx);
    setup_toolchain(p, CF_LANG_RUST, cfg->rustc);
    setup_toolchain(p, CF_LANG_GO, cfg->go);
    setup_toolchain(p, CF_LANG_TYPESCRIPT, cfg->tsc);
    for (int l = 0; l < CF_LANG__COUNT; l++)
        if (cfg->allowed_flags[l] && cfg->allowed_flags[l][0] && !(p->allowed[l] = cf_strdup(cfg->allowed_flags[l]))) {
            cf_pipeline_destroy(p);
            return cf_error_set(err, CF_E_NOMEM, "pipeline: out of memory");
        }
    for (int h = 0; h < H__COUNT; h++)
        if (read_harness(p, h, err) < 0) {
            cf_pipeline_destroy(p);
            return -1;
        }
    /* Borrowed strings are not kept past this call. */
    p->cfg.harness_dir = NULL;
    p->cfg.cc = p->cfg.cxx = p->cfg.rustc = p->cfg.go = p->cfg.tsc = p->cfg.node = NULL;
    memset(p->cfg.allowed_flags, 0, sizeof(p->cfg.allowed_flags));
    *out = p;
    return 0;
}

static void entry_free(cache_entry *e)
{
    if (!e)
        return;
    free(e->artifact.data);
    cf_diagnostics_free(e->diags, e->n_diags);
    free(e);
}

void cf_pipeline_destroy(cf_pipeline *p)
{
    if (!p)
        return;
    for (int l = 0; l < CF_LANG__COUNT; l++) {
        free(p->tc[l].path);
        free(p->allowed[l]);
    }
    for (int h = 0; h < H__COUNT; h++)
        free(p->harness[h]);
    for (size_t i = 0; i < MAX_TC_DIRS && p->tc_dirs[i]; i++)
        free(p->tc_dirs[i]);
    free(p->node);
    free(p->ts_types);
    for (cache_entry *e = p->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

uint32_t cf_pipeline_languages(const cf_pipeline *p)
{
    return p ? p->languages : 0;
}

const char *cf_pipeline_toolchain_path(const cf_pipeline *p, cf_language lang)
{
    return p && (unsigned)lang < CF_LANG__COUNT ? p->tc[lang].path : NULL;
}

const char *const *cf_pipeline_toolchain_dirs(const cf_pipeline *p)
{
    return p ? (const char *const *)p->tc_dirs : NULL;
}

void cf_pipeline_describe(const cf_pipeline *p, char *buf, size_t size)
{
    static const cf_language order[] = {CF_LANG_C, CF_LANG_CPP, CF_LANG_RUST, CF_LANG_GO, CF_LANG_TYPESCRIPT};
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]) && used + 1 < size; i++) {
        const toolchain *t = &p->tc[order[i]];
        int n = t->path ? snprintf(buf + used, size - used, "%s%s (%s)", used ? ", " : "",
                                   cf_language_name(order[i]), t->version)
                        : snprintf(buf + used, size - used, "%s%s: off (%s)", used ? ", " : "",
                                   cf_language_name(order[i]), t->why);
        if (n < 0)
            break;
        used += (size_t)n < size - used ? (size_t)n : size - used - 1;
    }
    int n = snprintf(buf + used, size - used, "; function harness:%s%s%s%s", p->harness[H_PYTHON] ? " python" : "",
                     p->harness[H_JAVASCRIPT] ? " javascript" : "", p->harness[H_TYPESCRIPT] ? " typescript" : "",
                     p->harness[H_RUST] ? " rust" : "");
    if (n > 0 && (size_t)n < size - used)
        snprintf(buf + used + n, size - used - n, "; sessions: %s",
                 p->harness[H_SESSION_PYTHON] ? (p->harness[H_SESSION_SHELL] ? "python shell" : "python")
                 : p->harness[H_SESSION_SHELL]  ? "shell"
                                                : "none");
}

void cf_pipeline_stats_get(cf_pipeline *p, cf_pipeline_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    out->cache_bytes = p->cache_bytes;
    out->cache_entries = p->cache_entries;
    pthread_mutex_unlock(&p->lock);
}

bool cf_pipeline_needed(const cf_request *req)
{
    return cf_language_compiled(req->language) || req->harness != CF_HARNESS_NONE || req->n_cases > 0 ||
           req->n_collect > 0 || req->session;
}

/* ---- compile cache ---- */

static void lru_unlink(cf_pipeline *p, cache_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        p->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        p->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(cf_pipeline *p, cache_entry *e)
{
    e->next = p->head;
    e->prev = NULL;
    if (p->head)
        p->head->prev = e;
    p->head = e;
    if (!p->tail)
        p->tail = e;
}

static int diags_copy(const cf_diagnostic *src, size_t n, cf_diagnostic **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (n == 0)
        return 0;
    cf_diagnostic *v = calloc(n, sizeof(*v));
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const cf_diagnostic *s = &src[i];
        cf_diagnostic *d = &v[i];
        d->line = s->line;
        d->column = s->column;
        d->end_line = s->end_line;
        d->end_column = s->end_column;
        if (cf_str_set(&d->level, s->level) < 0 || cf_str_set(&d->message, s->message) < 0 ||
            cf_str_set(&d->file, s->file) < 0 || cf_str_set(&d->code, s->code) < 0 ||
            diags_copy(s->children, s->n_children, &d->children, &d->n_children) < 0) {
            cf_diagnostics_free(v, n);
            return -1;
        }
    }
    *out = v;
    *n_out = n;
    return 0;
}

/* A hit copies the entry out under the lock: the entry may be evicted
 * as soon as the lock is released. */
static bool cache_get(cf_pipeline *p, const char *key, cf_bytes *artifact, cf_diagnostic **diags, size_t *n_diags,
                      cf_compile_info *info)
{
    bool hit = false;
    pthread_mutex_lock(&p->lock);
    for (cache_entry *e = p->head; e; e = e->next) {
        if (strcmp(e->key, key) != 0)
            continue;
        if (cf_bytes_set(artifact, e->artifact.data, e->artifact.len) == 0 &&
            diags_copy(e->diags, e->n_diags, diags, n_diags) == 0) {
            *info = e->info;
            lru_unlink(p, e);
            lru_push_front(p, e);
            hit = true;
        } else {
            free(artifact->data);
            artifact->data = NULL;
            artifact->len = 0;
        }
        break;
    }
    if (hit)
        p->stats.cache_hits++;
    else
        p->stats.cache_misses++;
    pthread_mutex_unlock(&p->lock);
    return hit;
}

static size_t diags_bytes(const cf_diagnostic *v, size_t n)
{
    size_t b = n * sizeof(*v);
    for (size_t i = 0; i < n; i++)
        b += (v[i].message ? strlen(v[i].message) : 0) + (v[i].file ? strlen(v[i].file) : 0) +
             diags_bytes(v[i].children, v[i].n_children) + 32;
    return b;
}

static void cache_put(cf_pipeline *p, const char *key, const cf_bytes *artifact, const cf_diagnostic *diags,
                      size_t n_diags, const cf_compile_info *info)
{
    size_t bytes = sizeof(cache_entry) + artifact->len + diags_bytes(diags, n_diags);
    if (p->cfg.cache_bytes <= 0 || bytes > (size_t)p->cfg.cache_bytes)
        return;
    cache_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return;
    cf_strlcpy(e->key, key, sizeof(e->key));
    if (cf_bytes_set(&e->artifact, artifact->data, artifact->len) < 0 ||
        diags_copy(diags, n_diags, &e->diags, &e->n_diags) < 0) {
        entry_free(e);
        return;
    }
    e->info = *info;
    e->bytes = bytes;
    pthread_mutex_lock(&p->lock);
    /* Two slots may build the same program at once: the first one stays. */
    for (cache_entry *x = p->head; x; x = x->next)
        if (strcmp(x->key, key) == 0) {
            pthread_mutex_unlock(&p->lock);
            entry_free(e);
            return;
        }
    while (p->tail && p->cache_bytes + bytes > (size_t)p->cfg.cache_bytes) {
        cache_entry *old = p->tail;
        lru_unlink(p, old);
        p->cache_bytes -= old->bytes;
        p->cache_entries--;
        p->stats.cache_evictions++;
        entry_free(old);
    }
    lru_push_front(p, e);
    p->cache_bytes += bytes;
    p->cache_entries++;
    pthread_mutex_unlock(&p->lock);
}

/* ---- request checks ---- */

static bool flag_allowed(const char *allowed, const char *flag)
{
    if (!allowed)
        return false;
    const char *cursor = allowed;
    cf_list_item it;
    while (cf_list_next(&cursor, &it)) {
        if (!it.len)
            continue;
        if (it.s[it.len - 1] == '*') {
            if (strncmp(flag, it.s, it.len - 1) == 0)
                return true;
        } else if (strlen(flag) == it.len && strncmp(flag, it.s, it.len) == 0) {
            return true;
        }
    }
    return false;
}

static const char *source_name(cf_language l)
{
    switch (l) {
    case CF_LANG_C: return "main.c";
    case CF_LANG_CPP: return "main.cpp";
    case CF_LANG_RUST: return "main.rs";
    case CF_LANG_GO: return "main.go";
    case CF_LANG_TYPESCRIPT: return "main.ts";
    default: return NULL;
    }
}

/* The session driver of a session request's language (python or shell). */
static int session_driver(const cf_request *req)
{
    return req->language == CF_LANG_SHELL ? H_SESSION_SHELL : H_SESSION_PYTHON;
}

static int harness_index(cf_language l)
{
    switch (l) {
    case CF_LANG_PYTHON: return H_PYTHON;
    case CF_LANG_JAVASCRIPT: return H_JAVASCRIPT;
    case CF_LANG_TYPESCRIPT: return H_TYPESCRIPT;
    case CF_LANG_RUST: return H_RUST;
    default: return -1;
    }
}

/* ---- building ---- */

/* A C/C++ source file among the request's files ("util.c", "lib/x.cpp"). */
static bool is_unit(cf_language l, const char *path)
{
    const char *dot = strrchr(path, '.');
    if (!dot || strchr(dot, '/'))
        return false;
    if (l == CF_LANG_C)
        return strcmp(dot, ".c") == 0;
    return strcmp(dot, ".cpp") == 0 || strcmp(dot, ".cc") == 0 || strcmp(dot, ".cxx") == 0;
}

typedef struct build {
    const char *argv[ARGV_MAX];
    size_t argc;
    bool overflow;        /* more arguments than ARGV_MAX: the request is refused */
    char *owned[ARGV_MAX]; /* "./unit.c" strings made here */
    size_t n_owned;
    cf_strmap_entry env[8];
    size_t n_env;
    const char *take;     /* artifact name in the output directory */
    cf_language run_with; /* interpreter of the artifact */
    cf_diag_format diag;
    bool diag_stdout;     /* tsc writes its diagnostics to stdout */
} build;

static void add_arg(build *b, const char *a)
{
    if (b->argc < ARGV_MAX - 1)
        b->argv[b->argc++] = a;
    else
        b->overflow = true;
}

/* A file name as an argument: "./" first, so nothing the request names
 * ("@opts.c", "-x.c") is ever read as an option or a response file. */
static void add_path_arg(build *b, const char *path)
{
    size_t n = strlen(path) + 3;
    char *a = b->n_owned < ARGV_MAX ? malloc(n) : NULL;
    if (!a) {
        b->overflow = true;
        return;
    }
    snprintf(a, n, "./%s", path);
    b->owned[b->n_owned++] = a;
    add_arg(b, a);
}

static void build_free(build *b)
{
    for (size_t i = 0; i < b->n_owned; i++)
        free(b->owned[i]);
    b->n_owned = 0;
}

static void add_env(build *b, const char *k, const char *v)
{
    if (b->n_env < sizeof(b->env) / sizeof(b->env[0]))
        b->env[b->n_env++] = (cf_strmap_entry){(char *)k, (char *)v};
}

static void build_plan(const cf_pipeline *p, const cf_request *req, build *b)
{
    memset(b, 0, sizeof(*b));
    const char *tool = p->tc[req->language].path;
    b->take = "prog";
    b->run_with = CF_LANG_NONE;
    switch (req->language) {
    case CF_LANG_C:
    case CF_LANG_CPP:
        add_arg(b, tool);
        add_arg(b, req->language == CF_LANG_C ? "-std=gnu17" : "-std=gnu++17");
        add_arg(b, "-O2");
        add_arg(b, "-Wall");
        add_arg(b, "-fdiagnostics-format=json");
        for (size_t i = 0; i < req->n_compile_flags; i++)
            add_arg(b, req->compile_flags[i]);
        add_arg(b, "-o");
        add_arg(b, CF_EXEC_OUT_MARK "/prog");
        add_arg(b, source_name(req->language));
        /* The request's other translation units are part of the program
         * (headers are found next to main.c as usual). */
        for (size_t i = 0; i < req->n_files; i++)
            if (is_unit(req->language, req->files[i].path))
                add_path_arg(b, req->files[i].path);
        add_arg(b, "-lm");
        b->diag = CF_DIAG_GCC_JSON;
        break;
    case CF_LANG_RUST: {
        add_arg(b, tool);
        bool own_edition = false;
        for (size_t i = 0; i < req->n_compile_flags; i++)
            own_edition = own_edition || strncmp(req->compile_flags[i], "--edition", 9) == 0;
        if (!own_edition)
            add_arg(b, "--edition=2021");
        add_arg(b, "-O");
        add_arg(b, "--error-format=json");
        add_arg(b, "--crate-type=bin");
        add_arg(b, "--crate-name=main");
        /* std's debug info makes a hello world 11 MiB (placed into every
         * run and held by the cache); symbols stay for panics. */
        add_arg(b, "-Cstrip=debuginfo");
        for (size_t i = 0; i < req->n_compile_flags; i++)
            add_arg(b, req->compile_flags[i]);
        add_arg(b, "-o");
        add_arg(b, CF_EXEC_OUT_MARK "/prog");
        add_arg(b, "main.rs");
        b->diag = CF_DIAG_RUSTC_JSON;
        break;
    }
    case CF_LANG_GO:
        add_arg(b, tool);
        add_arg(b, "build");
        /* No -trimpath: it makes the toolchain's prebuilt std stale, and a
         * hello world then takes 3.6 s instead of 0.2 s (go 1.19). */
        for (size_t i = 0; i < req->n_compile_flags; i++)
            add_arg(b, req->compile_flags[i]);
        add_arg(b, "-o");
        add_arg(b, CF_EXEC_OUT_MARK "/prog");
        add_arg(b, "."); /* package main: main.go and the request's other .go files */
        /* No network, no module lookups, no other toolchain, no cgo (it
         * would run the C compiler on whatever the source asks). */
        add_env(b, "GOCACHE", CF_EXEC_OUT_MARK "/gocache");
        add_env(b, "GOPATH", CF_EXEC_OUT_MARK "/gopath");
        add_env(b, "XDG_CONFIG_HOME", CF_EXEC_OUT_MARK "/config");
        add_env(b, "GO111MODULE", "off");
        add_env(b, "GOTOOLCHAIN", "local");
        add_env(b, "GOPROXY", "off");
        add_env(b, "CGO_ENABLED", "0");
        add_env(b, "GOFLAGS", "");
        b->diag = CF_DIAG_GO_TEXT;
        break;
    case CF_LANG_TYPESCRIPT:
        add_arg(b, p->node);
        add_arg(b, tool);
        add_arg(b, "--pretty");
        add_arg(b, "false");
        add_arg(b, "--strict");
        add_arg(b, "--target");
        add_arg(b, "es2022");
        add_arg(b, "--module");
        add_arg(b, "commonjs");
        add_arg(b, "--lib");
        add_arg(b, "es2023");
        add_arg(b, "--types");
        add_arg(b, "node");
        if (p->ts_types) {
            add_arg(b, "--typeRoots");
            add_arg(b, p->ts_types);
        }
        add_arg(b, "--skipLibCheck");
        add_arg(b, "--noEmitOnError");
        for (size_t i = 0; i < req->n_compile_flags; i++)
            add_arg(b, req->compile_flags[i]);
        add_arg(b, "--outDir");
        add_arg(b, CF_EXEC_OUT_MARK);
        add_arg(b, "main.ts");
        b->take = "main.js";
        b->run_with = CF_LANG_JAVASCRIPT;
        b->diag = CF_DIAG_TSC_TEXT;
        b->diag_stdout = true;
        break;
    default: break;
    }
    b->argv[b->argc] = NULL;
}

static int cmp_file_path(const void *a, const void *b)
{
    return strcmp((*(const cf_file *const *)a)->path, (*(const cf_file *const *)b)->path);
}

/* Path and content of each file, in path order, length-prefixed. */
static int feed_files(EVP_MD_CTX *md, const cf_file *files, size_t n)
{
    if (n == 0)
        return 0;
    const cf_file **sorted = malloc(n * sizeof(*sorted));
    if (!sorted)
        return -1;
    for (size_t i = 0; i < n; i++)
        sorted[i] = &files[i];
    qsort(sorted, n, sizeof(*sorted), cmp_file_path);
    for (size_t i = 0; i < n; i++) {
        const char *path = sorted[i]->path ? sorted[i]->path : "";
        uint64_t l = strlen(path);
        EVP_DigestUpdate(md, &l, sizeof(l));
        EVP_DigestUpdate(md, path, (size_t)l);
        l = sorted[i]->content.len;
        EVP_DigestUpdate(md, &l, sizeof(l));
        if (l)
            EVP_DigestUpdate(md, sorted[i]->content.data, (size_t)l);
    }
    free(sorted);
    return 0;
}

/* The cache key: everything that makes a build what it is, and the
 * profile, so tenants never share builds (or learn of each other's). */
static int build_key(const cf_pipeline *p, const char *profile, const char *backend, const cf_request *req,
                     const cf_bytes *source, const cf_exec_files *ws, char hex[CF_DIGEST_HEX])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return -1;
    }
    /* Length-prefixed fields: no two different inputs hash alike. */
#define FEED(ptr, len)                                                                                             \
    do {                                                                                                           \
        uint64_t l_ = (uint64_t)(len);                                                                             \
        EVP_DigestUpdate(md, &l_, sizeof(l_));                                                                     \
        if (l_)                                                                                                    \
            EVP_DigestUpdate(md, (ptr), (size_t)l_);                                                               \
    } while (0)
#define FEEDS(s) FEED((s), strlen(s))
    FEEDS("codefleet-build-1");
    FEEDS(profile ? profile : "");
    /* What a compiler can reach differs per backend (the host's files on
     * process): a build never crosses backends. */
    FEEDS(backend);
    /* and never crosses container images (another image, another compiler) */
    FEEDS(req->image ? req->image : "");
    FEEDS(cf_language_name(req->language));
    FEEDS(p->tc[req->language].version);
    FEEDS(p->tc[req->language].path);
    uint64_t nflags = req->n_compile_flags;
    EVP_DigestUpdate(md, &nflags, sizeof(nflags));
    for (size_t i = 0; i < req->n_compile_flags; i++)
        FEEDS(req->compile_flags[i]);
    FEEDS("--sources--");
    FEED(source->data, source->len);
    /* Files in path order (the request's order is the client's, the
     * workspace's the store's). */
    FEEDS("--files--");
    if (feed_files(md, req->files, req->n_files) < 0) {
        EVP_MD_CTX_free(md);
        return -1;
    }
    FEEDS("--workspace--");
    if (ws && feed_files(md, ws->place, ws->n_place) < 0) {
        EVP_MD_CTX_free(md);
        return -1;
    }
#undef FEED
#undef FEEDS
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    int ok = EVP_DigestFinal_ex(md, d, &dl);
    EVP_MD_CTX_free(md);
    if (ok != 1 || dl != 32)
        return -1;
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < dl; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
    return 0;
}

/* code + "\n" + harness (the user's lines keep their numbers). */
static int with_harness(const cf_pipeline *p, const cf_request *req, cf_bytes *out)
{
    int h = harness_index(req->language);
    size_t hl = p->harness_len[h];
    size_t n = req->code.len + 1 + hl;
    out->data = malloc(n);
    if (!out->data)
        return -1;
    if (req->code.len)
        memcpy(out->data, req->code.data, req->code.len);
    out->data[req->code.len] = '\n';
    memcpy(out->data + req->code.len + 1, p->harness[h], hl);
    out->len = n;
    return 0;
}

static void set_reason(cf_result *res, cf_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_reason(cf_result *res, cf_status status, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    res->status = status;
    cf_result_set_reason(res, "%s", msg);
}

/* The first error diagnostic, as a compiler would print it. */
static void first_error(const cf_diagnostic *v, size_t n, char *buf, size_t size)
{
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!v[i].level || strcmp(v[i].level, "error") != 0 || !v[i].message)
            continue;
        /* Its first line, whole (a linker error says what is undefined at
         * its end). */
        const char *m = v[i].message;
        const char *nl = strchr(m, '\n');
        char msg[400];
        cf_sanitize_text(m, nl ? (size_t)(nl - m) : strlen(m), false, msg, sizeof(msg));
        if (v[i].file && v[i].line)
            snprintf(buf, size, "%.100s:%lld:%lld: %s", v[i].file, (long long)v[i].line, (long long)v[i].column,
                     msg);
        else
            snprintf(buf, size, "%s", msg);
        return;
    }
}

typedef struct artifact {
    cf_bytes data;
    const char *name;
    cf_language run_with;
} artifact;

/* A cached build of the same program: copied into art and res, logged. */
static bool compile_from_cache(cf_pipeline *p, const cf_request *req, const char *key, artifact *art, cf_result *res)
{
    cf_compile_info info;
    cf_diagnostic *diags = NULL;
    size_t nd = 0;
    if (!cache_get(p, key, &art->data, &diags, &nd, &info))
        return false;
    res->compile = info;
    res->compile.present = true;
    res->compile.cached = true;
    res->diagnostics = diags;
    res->n_diagnostics = nd;
    cf_pipeline_stats st;
    cf_pipeline_stats_get(p, &st);
    cf_log_info(LOG_SUB,
                "request %s: compile cache hit (%s; %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
                " builds in %" PRIu64 " bytes)",
                req->id, cf_language_name(req->language), st.cache_hits, st.cache_misses, st.cache_entries,
                st.cache_bytes);
    return true;
}

/* The request's files and the source under src_name (borrowed, not
 * copied); NULL when out of memory. */
static cf_file *compile_files(const cf_request *req, const char *src_name, const cf_bytes *source)
{
    cf_file *files = calloc(req->n_files + 1, sizeof(*files));
    if (!files)
        return NULL;
    for (size_t i = 0; i < req->n_files; i++)
        files[i] = req->files[i];
    files[req->n_files] = (cf_file){.path = (char *)src_name, .content = *source};
    return files;
}

/* The compile limits: the operator's, narrowed by the request, what is
 * left of its time and the tenant's profile.  True when the time left
 * (budget_us) is what bounds the compile. */
static bool compile_policy(const cf_pipeline *p, const cf_backend *b, const cf_exec_ctx *ctx, const cf_request *req,
                           int64_t budget_us, cf_policy *cp)
{
    cp->timeout_us = p->cfg.compile_timeout_us;
    if (req->policy.compile_timeout_us > 0 && req->policy.compile_timeout_us < cp->timeout_us)
        cp->timeout_us = req->policy.compile_timeout_us;
    bool budget_cut = false;
    if (budget_us > 0 && budget_us < cp->timeout_us) {
        cp->timeout_us = budget_us;
        budget_cut = true;
    }
    cp->memory_bytes = p->cfg.compile_memory_bytes;
    if (req->policy.compile_memory_bytes > 0 && req->policy.compile_memory_bytes < cp->memory_bytes)
        cp->memory_bytes = req->policy.compile_memory_bytes;
    if (b->caps.controls & CF_CTL_MAX_PROCESSES)
        cp->max_processes = p->cfg.compile_processes;
    /* A tenant's profile caps bound its compiles too (a compile runs
     * whatever the compiler is made to do). */
    if (ctx->profile_max_memory_bytes > 0 && ctx->profile_max_memory_bytes < cp->memory_bytes)
        cp->memory_bytes = ctx->profile_max_memory_bytes;
    if (ctx->profile_max_timeout_us > 0 && ctx->profile_max_timeout_us < cp->timeout_us)
        cp->timeout_us = ctx->profile_max_timeout_us;
    if (cp->max_processes > 0 && ctx->profile_max_processes > 0 && ctx->profile_max_processes < cp->max_processes)
        cp->max_processes = ctx->profile_max_processes;
    cp->max_stdout_bytes = p->cfg.compile_output_bytes;
    cp->max_stderr_bytes = p->cfg.compile_output_bytes;
    cp->max_file_size_bytes = p->cfg.artifact_bytes;
    if (b->caps.controls & CF_CTL_NETWORK_DISABLED)
        cp->network = CF_NET_DISABLED;
    if (b->caps.controls & CF_CTL_FS_NONE)
        cp->fs_mode = CF_FS_NONE;
    cp->env_allow_set = true; /* nothing of the worker's environment */
    return budget_cut;
}

/* The compile as a command request: the plan's argv and environment, the
 * given files (borrowed), the request's backend and image. */
static void compile_request(const cf_request *req, build *plan, cf_file *files, size_t n_files,
                            cf_request *creq)
{
    memset(creq, 0, sizeof(*creq));
    creq->id = req->id;
    creq->language = CF_LANG_COMMAND;
    creq->backend = req->backend;
    creq->image = req->image; /* the container backend compiles in the request's image */
    creq->argv = (char **)plan->argv;
    creq->argc = plan->argc;
    creq->env = plan->env;
    creq->n_env = plan->n_env;
    creq->files = files;
    creq->n_files = n_files;
}

/* The context of the compile: it takes the artifact and no output
 * callback, network allowance or program of the request's. */
static void compile_ctx(const cf_exec_ctx *ctx, cf_exec_take *take, cf_exec_files *ws_ro, cf_exec_ctx *cctx)
{
    *cctx = *ctx;
    /* The workspace, when there is one, read-only: a project's headers and
     * modules build with it; nothing is collected from a compile. */
    cctx->files = NULL;
    if (ctx->files && ctx->files->n_place) {
        memset(ws_ro, 0, sizeof(*ws_ro));
        ws_ro->place = ctx->files->place;
        ws_ro->n_place = ctx->files->n_place;
        ws_ro->read_only = true;
        cctx->files = ws_ro;
    }
    cctx->program = NULL;
    cctx->take = take;
    cctx->on_output = NULL; /* the compiler's output is diagnostics, not the program's */
    cctx->net_allow = NULL;
    cctx->n_net_allow = 0;
}

/* Counts the compile and turns a backend failure (rc < 0) or a toolchain
 * that would not start into -1, freeing cres and the taken bytes. */
static int compile_ran(cf_pipeline *p, const cf_request *req, int rc, cf_result *cres, cf_exec_take *take,
                       cf_error *err)
{
    if (rc == 0 && take->exec_failed) {
        /* The operator's toolchain does not start where it runs (not
         * bound, not readable by the run uid, a library missing): the
         * worker's fault, never the request's. */
        cf_error_set(err, CF_E_SANDBOX, "compile step: the %s toolchain cannot be executed: %s",
                     cf_language_name(req->language), cres->reason ? cres->reason : "exec failed");
        cf_result_clear(cres);
        free(take->data.data);
        return -1;
    }
    pthread_mutex_lock(&p->lock);
    p->stats.compiles++;
    pthread_mutex_unlock(&p->lock);
    if (rc < 0) {
        cf_error_wrap(err, "compile step");
        cf_result_clear(cres);
        free(take->data.data);
        return -1;
    }
    return 0;
}

/* The compile's times and who ran it (moved out of cres) into res. */
static void compile_note_run(cf_result *res, cf_result *cres)
{
    res->compile.wall_time_us = cres->wall_time_us;
    res->compile.cpu_time_us = cres->cpu_time_us;
    res->compile.peak_memory_bytes = cres->peak_memory_bytes;
    free(res->meta.backend);
    free(res->meta.isolation);
    res->meta.backend = cres->meta.backend;
    res->meta.isolation = cres->meta.isolation;
    cres->meta.backend = cres->meta.isolation = NULL;
}

/* The compiler's diagnostics into res, paths relative to the work
 * directory where the backend has its own root. */
static int compile_diagnostics(const cf_backend *b, const build *plan, const cf_bytes *diag_text, cf_result *res,
                               cf_error *err)
{
    bool own_root = b->caps.isolation &&
                    (strcmp(b->caps.isolation, "sandbox") == 0 || strcmp(b->caps.isolation, "container") == 0);
    cf_diag_opts dopts = {.strip_prefix = own_root ? "/work" : NULL,
                          .max_diagnostics = MAX_DIAGNOSTICS};
    cf_error derr;
    cf_error_clear(&derr);
    if (cf_diag_parse(plan->diag, (const char *)diag_text->data, diag_text->len, &dopts, &res->diagnostics,
                      &res->n_diagnostics, &derr) < 0)
        return cf_error_set(err, CF_E_NOMEM, "pipeline: diagnostics: %s", derr.msg);
    return 0;
}

/* Why no program came out of the compile, in one sentence. */
static void compile_failure_reason(const cf_pipeline *p, const cf_result *cres, const cf_exec_take *take,
                                   const cf_policy *cp, bool budget_cut, cf_result *res)
{
    char d[32];
    cf_status why = cres->status;
    if (why == CF_STATUS_TIMEOUT) {
        cf_format_duration(cp->timeout_us, d, sizeof(d));
        set_reason(res, CF_STATUS_COMPILE_FAILED, "compilation stopped: compile timeout of %s exceeded%s", d,
                   budget_cut ? " (what was left of the request's max-timeout)" : "");
    } else if (why == CF_STATUS_MEMORY_EXCEEDED) {
        cf_format_size(cp->memory_bytes, d, sizeof(d));
        set_reason(res, CF_STATUS_COMPILE_FAILED,
                   "compilation stopped: the compiler exceeded the compile memory limit of %s", d);
    } else if (why == CF_STATUS_SUCCESS && take->too_big) {
        cf_format_size(p->cfg.artifact_bytes, d, sizeof(d));
        set_reason(res, CF_STATUS_COMPILE_FAILED, "the build artifact exceeds the limit of %s", d);
    } else if (why == CF_STATUS_SUCCESS) {
        set_reason(res, CF_STATUS_COMPILE_FAILED, "the compiler reported success but produced no program");
    } else if (cres->signal) {
        set_reason(res, CF_STATUS_COMPILE_FAILED, "the compiler was stopped: %s",
                   cres->reason ? cres->reason : "killed by a signal");
    } else {
        size_t ne = cf_diag_count_errors(res->diagnostics, res->n_diagnostics);
        char first[600];
        first_error(res->diagnostics, res->n_diagnostics, first, sizeof(first));
        if (ne && first[0])
            set_reason(res, CF_STATUS_COMPILE_FAILED, "compilation failed with %zu error%s; first: %s", ne,
                       ne == 1 ? "" : "s", first);
        else
            set_reason(res, CF_STATUS_COMPILE_FAILED, "compilation failed (%s)",
                       cres->reason ? cres->reason : "compiler exited non-zero");
    }
}

/* A failed compile into res: counted, its reason, a note when the
 * compiler's output was cut, and the raw output when nothing could be
 * made of it (moved out of cres). */
static void compile_failed(cf_pipeline *p, const build *plan, const cf_policy *cp, bool budget_cut, cf_result *cres,
                           const cf_exec_take *take, cf_result *res)
{
    pthread_mutex_lock(&p->lock);
    p->stats.compile_failures++;
    pthread_mutex_unlock(&p->lock);
    res->status = CF_STATUS_COMPILE_FAILED;
    compile_failure_reason(p, cres, take, cp, budget_cut, res);
    if (cres->stdout_truncated || cres->stderr_truncated) {
        /* Say the list may be incomplete. */
        cf_diagnostic *v = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*v));
        if (v) {
            res->diagnostics = v;
            memset(&v[res->n_diagnostics], 0, sizeof(*v));
            cf_str_set(&v[res->n_diagnostics].level, "note");
            cf_str_set(&v[res->n_diagnostics].message,
                       "the compiler's output was cut at the compile output limit: diagnostics may be missing");
            res->n_diagnostics++;
        }
    }
    /* The raw output when nothing could be made of it. */
    if (res->n_diagnostics == 0) {
        res->stderr_data = plan->diag_stdout ? cres->stdout_data : cres->stderr_data;
        res->stderr_truncated = plan->diag_stdout ? cres->stdout_truncated : cres->stderr_truncated;
        if (plan->diag_stdout)
            cres->stdout_data = (cf_bytes){0};
        else
            cres->stderr_data = (cf_bytes){0};
    }
}

/* A new build into the cache under key, logged. */
static void compile_cache_store(cf_pipeline *p, const cf_request *req, const char *key, const artifact *art,
                                const cf_result *res)
{
    cache_put(p, key, &art->data, res->diagnostics, res->n_diagnostics, &res->compile);
    cf_pipeline_stats st;
    cf_pipeline_stats_get(p, &st);
    cf_log_info(LOG_SUB,
                "request %s: compile cache miss, built (%s in %" PRId64 " ms; %" PRIu64 " hits, %" PRIu64
                " misses, %" PRIu64 " builds in %" PRIu64 " bytes, %" PRIu64 " evicted)",
                req->id, cf_language_name(req->language), res->compile.wall_time_us / 1000, st.cache_hits,
                st.cache_misses, st.cache_entries, st.cache_bytes, st.cache_evictions);
}

/* Builds (or finds in the cache) the program.  Returns 0 with *ok set when
 * there is an artifact; 0 with res filled (compile_failed, rejected) when
 * not; -1 when the backend broke. */
static int compile_step_planned(cf_pipeline *p, const cf_backend *b, const char *profile, const cf_exec_ctx *ctx,
                                const cf_request *req, const cf_bytes *source, int64_t budget_us, build *planp,
                                artifact *art, bool *ok, cf_result *res, cf_error *err)
{
    build plan = *planp; /* shallow: the owned strings stay the caller's */
    if (plan.overflow) {
        set_reason(res, CF_STATUS_REJECTED, "too many compile flags and source files together (more than %d "
                                            "compiler arguments)", ARGV_MAX - 1);
        return 0;
    }
    art->name = plan.take;
    art->run_with = plan.run_with;
    res->compile.present = true;
    cf_str_set(&res->meta.toolchain, p->tc[req->language].version);

    char key[CF_DIGEST_HEX];
    bool keyed = p->cfg.cache_bytes > 0 && build_key(p, profile, b->ops->name, req, source, ctx->files, key) == 0;
    if (keyed && compile_from_cache(p, req, key, art, res)) {
        *ok = true;
        return 0;
    }

    /* The compile request: the operator's toolchain and flags, the
     * request's files and source, the compile limits. */
    const char *src_name = source_name(req->language);
    for (size_t i = 0; i < req->n_files; i++)
        if (strcmp(req->files[i].path, src_name) == 0) {
            set_reason(res, CF_STATUS_REJECTED, "files: '%s' is the program's source file; name it differently",
                       src_name);
            return 0;
        }
    cf_file *files = compile_files(req, src_name, source);
    if (!files)
        return cf_error_set(err, CF_E_NOMEM, "pipeline: out of memory");
    cf_request creq;
    compile_request(req, &plan, files, req->n_files + 1, &creq);
    cf_policy *cp = &creq.policy;
    bool budget_cut = compile_policy(p, b, ctx, req, budget_us, cp);

    cf_exec_take take = {.name = plan.take, .max = (size_t)p->cfg.artifact_bytes};
    cf_exec_ctx cctx;
    cf_exec_files ws_ro;
    compile_ctx(ctx, &take, &ws_ro, &cctx);

    cf_result cres;
    memset(&cres, 0, sizeof(cres));
    int rc = b->ops->execute(b->state, &cctx, &creq, &cres, err);
    free(files);
    if (compile_ran(p, req, rc, &cres, &take, err) < 0)
        return -1;
    compile_note_run(res, &cres);

    if (cres.status == CF_STATUS_REJECTED) {
        set_reason(res, CF_STATUS_REJECTED, "compile step: %s", cres.reason ? cres.reason : "rejected");
        cf_result_clear(&cres);
        free(take.data.data);
        return 0;
    }
    const cf_bytes *diag_text = plan.diag_stdout ? &cres.stdout_data : &cres.stderr_data;
    if (compile_diagnostics(b, &plan, diag_text, res, err) < 0) {
        cf_result_clear(&cres);
        free(take.data.data);
        return -1;
    }
    bool built = cres.status == CF_STATUS_SUCCESS && take.data.data && !take.too_big;
    if (!built) {
        compile_failed(p, &plan, cp, budget_cut, &cres, &take, res);
        cf_result_clear(&cres);
        free(take.data.data);
        return 0;
    }
    cf_result_clear(&cres);
    art->data = take.data;
    if (keyed)
        compile_cache_store(p, req, key, art, res);
    *ok = true;
    return 0;
}

static int compile_step(cf_pipeline *p, const cf_backend *b, const char *profile, const cf_exec_ctx *ctx,
                        const cf_request *req, const cf_bytes *source, int64_t budget_us, artifact *art, bool *ok,
                        cf_result *res, cf_error *err)
{
    *ok = false;
    build plan;
    build_plan(p, req, &plan);
    int rc = compile_step_planned(p, b, profile, ctx, req, source, budget_us, &plan, art, ok, res, err);
    build_free(&plan);
    return rc;
}

/* ---- running ---- */

/* The harness's own last words ("codefleet harness: ..."), if any. */
static void harness_reason(const cf_bytes *err_out, char *buf, size_t size)
{
    buf[0] = '\0';
    static const char tag[] = "codefleet harness: ";
    const uint8_t *d = err_out->data;
    size_t n = err_out->len;
    for (size_t i = n; d && i-- > 0;) {
        if (i == 0 || d[i - 1] == '\n') {
            if (n - i >= sizeof(tag) - 1 && memcmp(d + i, tag, sizeof(tag) - 1) == 0) {
                size_t len = n - i - (sizeof(tag) - 1);
                const char *s = (const char *)d + i + sizeof(tag) - 1;
                const char *nl = memchr(s, '\n', len);
                if (nl)
                    len = (size_t)(nl - s);
                cf_sanitize_text(s, len, false, buf, size);
                return;
            }
        }
    }
}

/* After a harnessed run: only output.json is the answer. */
static void harness_outcome(cf_result *r)
{
    char why[400];
    harness_reason(&r->stderr_data, why, sizeof(why));
    if (r->status == CF_STATUS_SUCCESS && r->output.len == 0) {
        r->status = CF_STATUS_FAILED;
        cf_result_set_reason(r, "run(input) gave no JSON value%s%s", why[0] ? ": " : "", why);
        for (size_t i = 0; i < r->n_diagnostics; i++)
            if (r->diagnostics[i].file && strcmp(r->diagnostics[i].file, "output.json") == 0 &&
                r->diagnostics[i].message) {
                cf_result_set_reason(r, "run(input) returned something that is not JSON: %s",
                                     r->diagnostics[i].message);
                break;
            }
    } else if (r->status == CF_STATUS_FAILED && why[0]) {
        cf_result_set_reason(r, "%s", why);
    }
}

/* Trailing whitespace does not count, as in most judges. */
static bool stdout_matches(const cf_bytes *got, const cf_bytes *want)
{
    size_t a = got->len, b = want->len;
    while (a && (got->data[a - 1] == '\n' || got->data[a - 1] == ' ' || got->data[a - 1] == '\r' ||
                 got->data[a - 1] == '\t'))
        a--;
    while (b && (want->data[b - 1] == '\n' || want->data[b - 1] == ' ' || want->data[b - 1] == '\r' ||
                 want->data[b - 1] == '\t'))
        b--;
    return a == b && (a == 0 || memcmp(got->data, want->data, a) == 0);
}

/* One line of program text for a reason: quoted, cut at 60 bytes,
 * control characters replaced. */
static void quote_line(const uint8_t *p, size_t len, char *out, size_t size)
{
    char clean[256];
    cf_sanitize_text((const char *)p, len > 60 ? 60 : len, false, clean, sizeof(clean));
    snprintf(out, size, "\"%s\"%s", clean, len > 60 ? "..." : "");
}

/* Why a case's stdout does not match, for a person: the first line that
 * differs, expected against got (the comparison's trailing whitespace
 * aside). */
static void mismatch_reason(const cf_bytes *got, const cf_bytes *want, bool truncated, char *out, size_t size)
{
    if (truncated) {
        snprintf(out, size, "stdout does not match: it was cut at its cap");
        return;
    }
    const uint8_t *g = got->data, *w = want->data;
    size_t gl = got->len, wl = want->len, line = 1;
    while (gl && wl) {
        const uint8_t *gn = memchr(g, '\n', gl), *wn = memchr(w, '\n', wl);
        size_t a = gn ? (size_t)(gn - g) : gl, b = wn ? (size_t)(wn - w) : wl;
        if (a != b || memcmp(g, w, a) != 0) {
            char e[270], o[270];
            quote_line(w, b, e, sizeof(e));
            quote_line(g, a, o, sizeof(o));
            snprintf(out, size, "stdout does not match at line %zu: expected %s, got %s", line, e, o);
            return;
        }
        g += a + (gn != NULL), gl -= a + (gn != NULL);
        w += b + (wn != NULL), wl -= b + (wn != NULL);
        line++;
    }
    if (gl) {
        const uint8_t *gn = memchr(g, '\n', gl);
        char o[270];
        quote_line(g, gn ? (size_t)(gn - g) : gl, o, sizeof(o));
        snprintf(out, size, "stdout does not match at line %zu: expected no more output, got %s", line, o);
    } else {
        const uint8_t *wn = memchr(w, '\n', wl);
        char e[270];
        quote_line(w, wn ? (size_t)(wn - w) : wl, e, sizeof(e));
        snprintf(out, size, "stdout does not match at line %zu: expected %s, got no more output", line, e);
    }
}

/* Shrinks a cut buffer to what is kept (the rest is never sent: it must
 * not stay allocated either, or 1000 cases hold gigabytes). */
static void shrink(cf_bytes *b, size_t keep)
{
    if (keep >= b->len)
        return;
    if (keep == 0) {
        free(b->data);
        b->data = NULL;
        b->len = 0;
        return;
    }
    uint8_t *n = realloc(b->data, keep);
    if (n)
        b->data = n;
    b->len = keep;
}

/* Each case has the request's output caps; all cases together have
 * CASES_OUTPUT_BYTES for stdout, stderr and output, so 1000 cases stay one
 * message.  An output that does not fit, or that would nest deeper than a
 * case's place in the result allows, is dropped and the case says so. */
static void keep_case_within(cf_case_result *c, size_t *used)
{
    size_t left = *used < CASES_OUTPUT_BYTES ? CASES_OUTPUT_BYTES - *used : 0;
    size_t keep_out = c->stdout_data.len < left ? c->stdout_data.len : left;
    if (keep_out < c->stdout_data.len) {
        shrink(&c->stdout_data, keep_out);
        c->stdout_truncated = true;
    }
    left -= keep_out;
    size_t keep_err = c->stderr_data.len < left ? c->stderr_data.len : left;
    if (keep_err < c->stderr_data.len) {
        shrink(&c->stderr_data, keep_err);
        c->stderr_truncated = true;
    }
    left -= keep_err;
    const char *dropped = NULL;
    cf_error verr;
    cf_error_clear(&verr);
    if (c->output.len > left)
        dropped = "the cases' output budget (16 MiB in all) is used up";
    else if (cf_value_check_nested(&c->output, "output", CF_CASE_VALUE_LEVELS, &verr) < 0)
        dropped = "it nests too deeply for a case's place in the result";
    if (dropped) {
        shrink(&c->output, 0);
        /* Whole: a reason cut inside a UTF-8 character made the result
         * undecodable (the readers want valid UTF-8). */
        char *why = NULL;
        if (asprintf(&why, "%s%soutput dropped: %s", c->reason ? c->reason : "", c->reason ? "; " : "", dropped) >= 0) {
            free(c->reason);
            c->reason = why;
        }
    }
    *used += c->stdout_data.len + c->stderr_data.len + c->output.len;
}

static void steal_into_case(cf_result *r, cf_case_result *c)
{
    c->status = r->status;
    c->has_exit_code = r->has_exit_code;
    c->exit_code = r->exit_code;
    c->signal = r->signal;
    c->stdout_data = r->stdout_data;
    c->stderr_data = r->stderr_data;
    c->stdout_truncated = r->stdout_truncated;
    c->stderr_truncated = r->stderr_truncated;
    c->output = r->output;
    c->wall_time_us = r->wall_time_us;
    c->cpu_time_us = r->cpu_time_us;
    c->peak_memory_bytes = r->peak_memory_bytes;
    c->reason = r->reason;
    r->stdout_data = r->stderr_data = r->output = (cf_bytes){0};
    r->reason = NULL;
}

/* Which collected files the request asked for. */
static bool collect_match(const cf_request *req, const char *path)
{
    for (size_t i = 0; i < req->n_collect; i++) {
        const char *pat = req->collect[i];
        size_t pl = strlen(pat);
        if (pl && pat[pl - 1] == '/' && strncmp(path, pat, pl) == 0)
            return true; /* "dir/": everything below */
        if (cf_glob_match(pat, path, CF_GLOB_PERIOD))
            return true;
    }
    return false;
}

/* The workdir scan's filter (cf_exec_files.collect_want): unwanted files
 * are not read. */
static bool collect_want(const char *path, void *arg)
{
    return collect_match(arg, path);
}

static void collect_into(const cf_pipeline *p, const cf_request *req, const cf_exec_files *f, cf_result *res)
{
    if (!f->collected) {
        if (f->collect_error) {
            res->files_truncated = true;
            cf_result_add_warning(res, "collect: the work directory could not be read: %.300s", f->collect_error);
        }
        return;
    }
    size_t budget = p->cfg.collect_bytes > 0 ? (size_t)p->cfg.collect_bytes : 0;
    size_t n = 0;
    for (size_t i = 0; i < f->n_collected; i++)
        if (collect_match(req, f->collected[i].path))
            n++;
    if (n == 0)
        return;
    if (n > COLLECT_MAX_FILES) {
        n = COLLECT_MAX_FILES;
        res->files_truncated = true;
    }
    res->files = calloc(n, sizeof(*res->files));
    if (!res->files)
        return;
    size_t k = 0;
    for (size_t i = 0; i < f->n_collected && k < n; i++) {
        const cf_file *src = &f->collected[i];
        if (!collect_match(req, src->path))
            continue;
        cf_out_file *o = &res->files[k++];
        cf_str_set(&o->path, src->path);
        o->size = (int64_t)src->content.len;
        size_t take = src->content.len <= budget ? src->content.len : budget;
        if (take < src->content.len) {
            o->truncated = true;
            res->files_truncated = true;
        }
        if (take)
            cf_bytes_set(&o->content, src->content.data, take);
        budget -= take;
    }
    res->n_files = k;
}

/* One execution of the program (or the request as it is) with a case's
 * stdin, input and arguments. */
static int run_once(const cf_backend *b, const cf_exec_ctx *ctx, const cf_request *req, const cf_case *c,
                    const cf_exec_program *prog, int64_t timeout_cap_us, cf_result *r, cf_error *err)
{
    cf_request rq = *req; /* shallow: never cleared */
    /* What is left of the request's time (compile and earlier cases). */
    if (timeout_cap_us > 0 && (rq.policy.timeout_us <= 0 || rq.policy.timeout_us > timeout_cap_us))
        rq.policy.timeout_us = timeout_cap_us;
    char *argv_merged[CF_EXEC_ARGV_MAX + 1];
    if (c) {
        rq.stdin_data = c->stdin_data;
        rq.input = c->input;
        if (c->argc) {
            /* The request's arguments, then the case's. */
            if (req->argc + c->argc > CF_EXEC_ARGV_MAX)
                return cf_exec_reject(r, "case arguments: more than %d in all", CF_EXEC_ARGV_MAX);
            for (size_t i = 0; i < req->argc; i++)
                argv_merged[i] = req->argv[i];
            for (size_t i = 0; i < c->argc; i++)
                argv_merged[req->argc + i] = c->argv[i];
            rq.argv = argv_merged;
            rq.argc = req->argc + c->argc;
        }
    }
    cf_exec_ctx rctx = *ctx;
    rctx.program = prog;
    rctx.take = NULL;
    return b->ops->execute(b->state, &rctx, &rq, r, err);
}

static int check_request(const cf_pipeline *p, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res)
{
    const char *ln = cf_language_name(req->language);
    if (cf_language_compiled(req->language)) {
        if (!p || !p->tc[req->language].path)
            return cf_exec_reject(res, "language %s: no toolchain on this worker (%s)", ln,
                                         p ? p->tc[req->language].why : "compiled languages are not configured");
        for (size_t i = 0; i < req->n_compile_flags; i++)
            if (!flag_allowed(p->allowed[req->language], req->compile_flags[i])) {
                char shown[100];
                cf_printable(req->compile_flags[i], strlen(req->compile_flags[i]), shown, sizeof(shown));
                return cf_exec_reject(res, "compile flag '%s' is not allowed for %s on this worker (allowed: %s)",
                                             shown, ln, p->allowed[req->language] ? p->allowed[req->language] : "none");
            }
    }
    if (req->language == CF_LANG_TYPESCRIPT) {
        /* tsc would build an imported module, but only main.js runs: say
         * so now rather than "Cannot find module" at run time. */
        for (size_t i = 0; i < req->n_files; i++) {
            const char *path = req->files[i].path;
            size_t n = strlen(path);
            bool ts = (n > 3 && strcmp(path + n - 3, ".ts") == 0) || (n > 4 && strcmp(path + n - 4, ".tsx") == 0);
            bool dts = n > 5 && strcmp(path + n - 5, ".d.ts") == 0;
            if (ts && !dts) {
                char shown[100];
                cf_printable(path, n, shown, sizeof(shown));
                return cf_exec_reject(res, "typescript: one source file (main.ts): '%s' would compile but not be "
                                           "there at run time; put the code in main.ts (.d.ts files are fine)",
                                      shown);
            }
        }
    }
    if (req->harness == CF_HARNESS_FUNCTION) {
        int h = harness_index(req->language);
        if (!p || h < 0 || !p->harness[h])
            return cf_exec_reject(res, "harness function: not available for %s on this worker", ln);
    }
    if (req->session && req->language == CF_LANG_SHELL && req->code.len &&
        memchr(req->code.data, '\0', req->code.len))
        return cf_exec_reject(res, "session: a shell cell cannot hold a NUL byte");
    if (req->session && (!p || !p->harness[session_driver(req)]))
        return cf_exec_reject(res, "session: this worker has no %s session driver (harness/%s)", ln,
                              harness_file[session_driver(req)]);
    if (req->n_cases) {
        if (ctx->files && ctx->files->collect)
            return cf_exec_reject(res, "cases cannot write a workspace back: use fs_mode workspace_ro");
        if (req->thread)
            return cf_exec_reject(res, "cases cannot be combined with a thread (checkpoint)");
        if (req->n_collect)
            return cf_exec_reject(res, "collect is not available with cases");
    }
    if (req->n_collect && !p)
        return cf_exec_reject(res, "collect: not configured on this worker");
    return -1;
}

/* What the build said (warnings, compile info, toolchain), kept out of
 * the result while the program runs. */
typedef struct build_said {
    cf_diagnostic *diags;
    size_t n_diags;
    cf_compile_info info;
    char *tc_version;
} build_said;

/* Moves what the build said out of res (the runs clear it). */
static void build_said_keep(cf_result *res, build_said *bs)
{
    bs->diags = res->diagnostics;
    bs->n_diags = res->n_diagnostics;
    res->diagnostics = NULL;
    res->n_diagnostics = 0;
    bs->info = res->compile;
    bs->tc_version = res->meta.toolchain;
    res->meta.toolchain = NULL;
}

/* Puts what the build said back into res: build diagnostics first, then
 * whatever the run added; and the request's language. */
static void build_said_merge(cf_result *res, build_said *bs, const cf_request *req)
{
    if (bs->n_diags) {
        cf_diagnostic *v = realloc(bs->diags, (bs->n_diags + res->n_diagnostics) * sizeof(*v));
        if (v) {
            if (res->n_diagnostics)
                memcpy(v + bs->n_diags, res->diagnostics, res->n_diagnostics * sizeof(*v));
            free(res->diagnostics);
            res->diagnostics = v;
            res->n_diagnostics += bs->n_diags;
        } else {
            cf_diagnostics_free(bs->diags, bs->n_diags);
        }
    }
    res->compile = bs->info;
    if (bs->tc_version) {
        free(res->meta.toolchain);
        res->meta.toolchain = bs->tc_version;
    }
    free(res->meta.language);
    res->meta.language = cf_strdup(cf_language_name(req->language));
}

/* The request's time for its compile and runs together (0: none): the
 * worker's max-total, narrowed by the tenant's profile. */
static int64_t request_total_us(const cf_pipeline *p, const cf_exec_ctx *ctx)
{
    int64_t total_us = p ? p->cfg.max_total_us : 0;
    if (ctx->profile_max_timeout_us > 0 && (total_us == 0 || ctx->profile_max_timeout_us < total_us))
        total_us = ctx->profile_max_timeout_us;
    return total_us;
}

/* The collection of a run that collects on its own account: ctx's
 * placement (workspace_ro), only the files the request wants read. */
static void collect_setup(const cf_pipeline *p, const cf_exec_ctx *ctx, const cf_request *req, cf_exec_files *local)
{
    if (ctx->files)
        *local = *ctx->files; /* its placement (workspace_ro), our collection */
    local->collect = true;
    local->collect_want = collect_want; /* unwanted files are not read */
    local->collect_want_arg = (void *)req;
    local->max_files = 10000;
    local->max_bytes = p->cfg.collect_scan_bytes > 0 ? (size_t)p->cfg.collect_scan_bytes : 0;
    local->collected = NULL;
    local->n_collected = 0;
    local->collect_error = NULL;
}

/* A request without cases: one run within what is left of its time, then
 * the harness's answer and the files it asked for. */
static int run_single(cf_pipeline *p, const cf_backend *b, const cf_exec_ctx *ctx, const cf_request *req,
                      const cf_exec_program *progp, int64_t deadline_us, int64_t total_us, cf_result *res,
                      cf_error *err)
{
    cf_exec_ctx rctx = *ctx;
    cf_exec_files local;
    memset(&local, 0, sizeof(local));
    if (req->n_collect && !(ctx->files && ctx->files->collect)) {
        collect_setup(p, ctx, req, &local);
        rctx.files = &local;
    }
    cf_result_clear(res);
    int64_t left_us = deadline_us ? deadline_us - cf_mono_us() : 0;
    if (deadline_us && left_us <= 0) {
        char d[32];
        cf_format_duration(total_us, d, sizeof(d));
        res->status = CF_STATUS_TIMEOUT;
        cf_result_set_reason(res, "the compile step used up the request's time (max-timeout %s)", d);
        return 0;
    }
    int rc = run_once(b, &rctx, req, NULL, progp, left_us, res, err);
    if (rc == 0 && req->harness == CF_HARNESS_FUNCTION && res->status != CF_STATUS_REJECTED)
        harness_outcome(res);
    if (rc == 0 && req->n_collect && res->status != CF_STATUS_REJECTED)
        collect_into(p, req, rctx.files, res);
    if (rctx.files == &local) {
        cf_workdir_files_free(local.collected, local.n_collected);
        free(local.collect_error);
    }
    return rc;
}

/* How the cases went so far. */
typedef struct case_tally {
    size_t failed_at, mismatches, not_ok, output_used;
    bool stopped, budget_spent;
} case_tally;

/* Case i's result r moved into res: who ran it (the first case), its
 * verdict, its share of the output budget, the totals.  Returns whether
 * the case did not pass. */
static bool case_record(cf_result *res, const cf_request *req, size_t i, cf_result *r, case_tally *t)
{
    if (i == 0) {
        /* Who ran it (the same backend for every case). */
        res->meta.backend = r->meta.backend;
        res->meta.isolation = r->meta.isolation;
        free(res->meta.sandbox);
        res->meta.sandbox = r->meta.sandbox;
        r->meta.backend = r->meta.isolation = r->meta.sandbox = NULL;
    }
    cf_case_result *c = &res->cases[i];
    steal_into_case(r, c);
    if (req->cases[i].name)
        cf_str_set(&c->name, req->cases[i].name);
    /* The verdict is on the whole stdout the program was allowed:
     * before any cut below, and a stdout cut at its own cap is
     * not the expected one (the rest is unknown). */
    if (req->cases[i].has_expect && c->status == CF_STATUS_SUCCESS) {
        c->match = !c->stdout_truncated && stdout_matches(&c->stdout_data, &req->cases[i].expect_stdout) ? 1 : -1;
        if (c->match < 0) {
            char why[700];
            mismatch_reason(&c->stdout_data, &req->cases[i].expect_stdout, c->stdout_truncated, why, sizeof(why));
            cf_str_set(&c->reason, why);
        }
    }
    keep_case_within(c, &t->output_used);
    res->n_cases = i + 1;
    res->wall_time_us += c->wall_time_us;
    res->cpu_time_us += c->cpu_time_us;
    if (c->peak_memory_bytes > res->peak_memory_bytes)
        res->peak_memory_bytes = c->peak_memory_bytes;
    bool bad = c->status != CF_STATUS_SUCCESS || c->match < 0;
    if (c->match < 0)
        t->mismatches++;
    if (bad && t->not_ok++ == 0)
        t->failed_at = i;
    return bad;
}

/* The request's status and reason from its cases: the first that did not
 * pass, and whether the time ran out before the last. */
static void cases_verdict(cf_result *res, const cf_request *req, const case_tally *t, int64_t total_us)
{
    if (t->not_ok == 0) {
        res->status = CF_STATUS_SUCCESS;
    } else {
        const cf_case_result *c = &res->cases[t->failed_at];
        /* A rejected case (its arguments) rejects nothing else:
         * the request ran; it failed. */
        res->status = c->status == CF_STATUS_SUCCESS || c->status == CF_STATUS_REJECTED ? CF_STATUS_FAILED
                                                                                           : c->status;
        char label[160] = "";
        if (c->name)
            snprintf(label, sizeof(label), " (%.120s)", c->name);
        cf_result_set_reason(res, "%zu of %zu case%s did not pass (%zu stdout mismatch%s); first: case %zu%s: %s%s",
                             t->not_ok, res->n_cases, res->n_cases == 1 ? "" : "s", t->mismatches,
                             t->mismatches == 1 ? "" : "es", t->failed_at + 1, label,
                             c->reason ? c->reason : cf_status_name(c->status),
                             t->stopped ? "; stopped there (stop_on_failure)" : "");
    }
    if (t->budget_spent) {
        char d[32], why[900];
        cf_format_duration(total_us, d, sizeof(d));
        snprintf(why, sizeof(why), "%s%sran %zu of %zu cases: the request's time (max-timeout %s for the "
                                   "compile and all cases) was used up",
                 res->reason ? res->reason : "", res->reason ? "; " : "", res->n_cases, req->n_cases, d);
        if (t->not_ok == 0)
            res->status = CF_STATUS_TIMEOUT;
        cf_result_set_reason(res, "%s", why);
    }
}

/* A request with cases: one run per case, each in what is left of the
 * request's time, until the last, a failure (stop_on_failure) or a
 * cancel. */
static int run_cases(const cf_backend *b, const cf_exec_ctx *ctx, const cf_request *req, const cf_exec_program *progp,
                     int64_t deadline_us, int64_t total_us, cf_result *res, cf_error *err)
{
    cf_result_clear(res);
    res->cases = calloc(req->n_cases, sizeof(*res->cases));
    if (!res->cases)
        return cf_error_set(err, CF_E_NOMEM, "pipeline: out of memory");
    int rc = 0;
    case_tally t = {0};
    for (size_t i = 0; i < req->n_cases; i++) {
        cf_result r;
        memset(&r, 0, sizeof(r));
        int64_t left_us = deadline_us ? deadline_us - cf_mono_us() : 0;
        if (deadline_us && left_us <= 0) {
            t.budget_spent = true;
            break;
        }
        if (run_once(b, ctx, req, &req->cases[i], progp, left_us, &r, err) < 0) {
            cf_result_clear(&r);
            rc = -1;
            break;
        }
        if (req->harness == CF_HARNESS_FUNCTION && r.status != CF_STATUS_REJECTED)
            harness_outcome(&r);
        bool bad = case_record(res, req, i, &r, &t);
        cf_result_clear(&r);
        if (bad && req->stop_on_failure && i + 1 < req->n_cases) {
            t.stopped = true;
            break;
        }
        if (ctx->cancel && __atomic_load_n(ctx->cancel, __ATOMIC_RELAXED)) {
            rc = cf_error_set(err, CF_E_TIMEOUT, "pipeline: cancelled between cases");
            if (err)
                err->retriable = true;
            break;
        }
    }
    if (rc == 0)
        cases_verdict(res, req, &t, total_us);
    return rc;
}

int cf_pipeline_execute(cf_pipeline *p, const cf_backend *b, const char *profile, const cf_exec_ctx *ctx,
                        const cf_request *req, cf_result *res, cf_error *err)
{
    if (!cf_pipeline_needed(req))
        return b->ops->execute(b->state, ctx, req, res, err);
    cf_exec_ctx base_ctx;
    if (!ctx) {
        memset(&base_ctx, 0, sizeof(base_ctx));
        ctx = &base_ctx;
    }
    if (check_request(p, ctx, req, res) == 0) {
        cf_str_set(&res->meta.language, cf_language_name(req->language));
        return 0;
    }

    /* The program: built, harnessed, or the request's own code. */
    artifact art = {0};
    cf_exec_program prog = {0};
    const cf_exec_program *progp = NULL;
    cf_bytes source = req->code;
    cf_bytes harnessed = {0};
    int rc = -1;
    if (req->harness == CF_HARNESS_FUNCTION || req->session) {
        if ((req->session ? cf_session_program(p->harness[session_driver(req)], p->harness_len[session_driver(req)],
                                               req, &harnessed)
                          : with_harness(p, req, &harnessed)) < 0)
            return cf_error_set(err, CF_E_NOMEM, "pipeline: out of memory");
        source = harnessed;
    }
    /* A request's compile and runs together stay within max-timeout:
     * whoever waits for a duplicate to finish counts on that. */
    int64_t total_us = request_total_us(p, ctx);
    int64_t deadline_us = total_us > 0 ? cf_mono_us() + total_us : 0;
    if (cf_language_compiled(req->language)) {
        bool ok;
        if (compile_step(p, b, profile, ctx, req, &source, total_us, &art, &ok, res, err) < 0)
            goto out;
        if (!ok) {
            cf_str_set(&res->meta.language, cf_language_name(req->language));
            rc = 0;
            goto out;
        }
        prog = (cf_exec_program){.name = art.name, .data = art.data.data, .len = art.data.len,
                                 .interp = art.run_with};
        progp = &prog;
    } else if (req->harness == CF_HARNESS_FUNCTION || req->session) {
        prog = (cf_exec_program){.name = req->language == CF_LANG_PYTHON  ? "main.py"
                                         : req->language == CF_LANG_SHELL ? "main.sh"
                                                                          : "main.js",
                                 .data = harnessed.data, .len = harnessed.len, .interp = req->language};
        progp = &prog;
    }

    /* Keep what the build said (warnings, compile info) across the run. */
    build_said said;
    build_said_keep(res, &said);
    if (req->n_cases == 0)
        rc = run_single(p, b, ctx, req, progp, deadline_us, total_us, res, err);
    else
        rc = run_cases(b, ctx, req, progp, deadline_us, total_us, res, err);
    build_said_merge(res, &said, req);
    if (rc == 0 && req->session)
        cf_session_outcome(req, res);
out:
    free(art.data.data);
    free(harnessed.data);
    return rc;
}
