/* The static backend registry, backend sets, and the policy check. */
#include "cf_backend.h"
#include "cf_util.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every backend compiled in.  Order is only cosmetic (describe output). */
extern const cf_backend_ops cf_backend_process_ops;
extern const cf_backend_ops cf_backend_sandbox_ops;
extern const cf_backend_ops cf_backend_container_ops;
extern const cf_backend_ops cf_backend_wasm_ops;
extern const cf_backend_ops cf_backend_js_ops;

static const cf_backend_ops *const registry[] = {
    &cf_backend_process_ops,
    &cf_backend_sandbox_ops,
    &cf_backend_container_ops,
    &cf_backend_wasm_ops,
    &cf_backend_js_ops,
    NULL,
};

#define SET_MAX 16      /* more backends than we will ever compile in */
#define NAME_MAX_LEN 64 /* a backend name in a names list */

/* A backend listed after the first whose create() said CF_E_UNSUPPORTED
 * (this build or host cannot offer it): the worker starts without it and
 * says why, at start-up and to every request that names it. */
typedef struct unavailable_backend {
    const cf_backend_ops *ops;
    char reason[256];
} unavailable_backend;

struct cf_backend_set {
    cf_backend items[SET_MAX];
    size_t n;
    unavailable_backend missing[SET_MAX];
    size_t n_missing;
};

const cf_backend_ops *const *cf_backend_registry(void)
{
    return registry;
}

const cf_backend_ops *cf_backend_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; registry[i]; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

/* ---- each family's settings ---- */

#define FAMILIES_MAX SET_MAX
static const cf_backend_settings *families[FAMILIES_MAX + 1];
static long family_offset[FAMILIES_MAX];
static pthread_once_t families_once = PTHREAD_ONCE_INIT;

/* Lays every family's settings out, once: in registry order, each at a
 * multiple of 16; -1 for what does not fit. */
static void families_lay_out(void)
{
    size_t n = 0, at = 0;
    for (size_t i = 0; registry[i] && n < FAMILIES_MAX; i++) {
        const cf_backend_settings *st = registry[i]->settings;
        bool seen = !st;
        for (size_t k = 0; k < n && !seen; k++)
            seen = families[k] == st;
        if (seen)
            continue;
        size_t size = (st->size + 15) & ~(size_t)15;
        family_offset[n] = at + size <= CF_BACKEND_SETTINGS_BYTES ? (long)at : -1;
        at += size;
        families[n++] = st;
    }
    families[n] = NULL;
}

const cf_backend_settings *const *cf_backend_settings_all(void)
{
    pthread_once(&families_once, families_lay_out);
    return families;
}

long cf_backend_settings_offset(const cf_backend_settings *s)
{
    pthread_once(&families_once, families_lay_out);
    for (size_t i = 0; families[i]; i++)
        if (families[i] == s)
            return family_offset[i];
    return -1;
}

void *cf_backend_settings_in(cf_backend_settings_area *area, const cf_backend_settings *s)
{
    long off = cf_backend_settings_offset(s);
    return off < 0 ? NULL : area->bytes + off;
}

/* One family's keys as a table of the configuration engine, over its own
 * struct. */
static cf_conf_table family_table(const cf_backend_settings *s)
{
    return (cf_conf_table){.program = "codefleet-worker", .env_prefix = "CODEFLEET_WORKER_", .props = s->props,
                           .nprops = s->nprops};
}

int cf_backend_settings_area_init(cf_backend_settings_area *area, cf_error *err)
{
    const cf_backend_settings *const *all = cf_backend_settings_all();
    for (size_t i = 0; all[i]; i++) {
        void *at = cf_backend_settings_in(area, all[i]);
        if (!at)
            return cf_error_set(err, CF_E_INVALID, "backend settings: %s's do not fit in %d bytes", all[i]->family,
                                CF_BACKEND_SETTINGS_BYTES);
        memset(at, 0, all[i]->size);
        cf_conf_table t = family_table(all[i]);
        if (cf_conf_init(&t, at, err) < 0)
            return -1;
    }
    return 0;
}

int cf_backend_settings_set(cf_backend_settings_area *area, const char *key, const char *value, cf_error *err)
{
    const cf_backend_settings *const *all = cf_backend_settings_all();
    for (size_t i = 0; all[i]; i++)
        for (size_t k = 0; k < all[i]->nprops; k++)
            if (strcmp(all[i]->props[k].name, key) == 0) {
                cf_conf_table t = family_table(all[i]);
                void *at = cf_backend_settings_in(area, all[i]);
                return at ? cf_conf_set(&t, at, key, value, err)
                          : cf_error_set(err, CF_E_INVALID, "backend settings: %s not laid out", all[i]->family);
            }
    return cf_error_set(err, CF_E_INVALID, "no backend has a setting '%s'", key);
}

void cf_backend_settings_area_free(cf_backend_settings_area *area)
{
    const cf_backend_settings *const *all = cf_backend_settings_all();
    for (size_t i = 0; all[i]; i++) {
        void *at = cf_backend_settings_in(area, all[i]);
        cf_conf_table t = family_table(all[i]);
        if (at)
            cf_conf_free(&t, at);
    }
}

/* The defaults of every family, for a worker (a test) that gave none. */
static cf_backend_settings_area default_area;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_area_fill(void)
{
    (void)cf_backend_settings_area_init(&default_area, NULL);
}

const void *cf_backend_settings_of(const cf_backend_config *cfg, const cf_backend_settings *s)
{
    const cf_backend_settings_area *area = cfg ? cfg->settings : NULL;
    if (!area) {
        pthread_once(&default_once, default_area_fill);
        area = &default_area;
    }
    long off = cf_backend_settings_offset(s);
    return off < 0 ? NULL : area->bytes + off;
}

void cf_backend_helper_path(const cf_backend_config *cfg, const char *configured, const char *name,
                            const char *built, char *out, size_t cap)
{
    out[0] = '\0';
    if (configured && configured[0]) {
        cf_strlcpy(out, configured, cap);
        return;
    }
    const char *dir = cfg ? cfg->helper_dir : NULL;
    if (!dir || !dir[0]) {
        /* Not installed: the build's own (a build tree is its builder's). */
        cf_strlcpy(out, built ? built : "", cap);
        return;
    }
    /* Installed: only its own libexec, never the build tree's. */
    char cand[PATH_MAX];
    struct stat st;
    int m = snprintf(cand, sizeof(cand), "%s/%s", dir, name);
    if (m > 0 && (size_t)m < sizeof(cand) && (size_t)m < cap && stat(cand, &st) == 0 && S_ISREG(st.st_mode) &&
        access(cand, X_OK) == 0)
        cf_strlcpy(out, cand, cap);
}

void cf_backend_helpers_describe(const cf_backend_config *cfg, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    const cf_backend_settings *const *all = cf_backend_settings_all();
    for (size_t i = 0; all[i] && used + 1 < cap; i++) {
        if (!all[i]->describe_helper)
            continue;
        char one[PATH_MAX + 64];
        all[i]->describe_helper(cfg, one, sizeof(one));
        int w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", one);
        if (w < 0)
            break;
        used += (size_t)w < cap - used ? (size_t)w : cap - used - 1;
    }
}

/* Names as they appear in policies and reasons ("network=disabled"), so a
 * rejection names the control the way the request spelled it. */
static const struct {
    uint32_t bit;
    const char *name;
} control_names[] = {
    {CF_CTL_TIMEOUT, "timeout"},
    {CF_CTL_CPU_TIME, "cpu_time"},
    {CF_CTL_MEMORY, "memory"},
    {CF_CTL_MAX_PROCESSES, "max_processes"},
    {CF_CTL_STDOUT_CAP, "max_stdout"},
    {CF_CTL_STDERR_CAP, "max_stderr"},
    {CF_CTL_FILE_SIZE, "max_file_size"},
    {CF_CTL_NETWORK_DISABLED, "network=disabled"},
    {CF_CTL_NETWORK_ENABLED, "network=enabled"},
    {CF_CTL_FS_NONE, "fs_mode=none"},
    {CF_CTL_FS_WORKSPACE_RO, "fs_mode=workspace_ro"},
    {CF_CTL_FS_WORKSPACE_RW, "fs_mode=workspace_rw"},
    {CF_CTL_FS_PATHS, "fs_mode=paths"},
    {CF_CTL_ENV_ALLOWLIST, "env_allow"},
    {CF_CTL_STREAM, "stream"},
};

const char *cf_control_name(uint32_t control_bit)
{
    for (size_t i = 0; i < sizeof(control_names) / sizeof(control_names[0]); i++)
        if (control_names[i].bit == control_bit)
            return control_names[i].name;
    return "unknown";
}

static void set_destroy_items(cf_backend_set *set)
{
    for (size_t i = set->n; i > 0; i--) {
        cf_backend *b = &set->items[i - 1];
        if (b->ops->destroy)
            b->ops->destroy(b->state);
    }
    set->n = 0;
}

int cf_backend_set_new(const char *names, const cf_backend_config *cfg, cf_backend_set **out, cf_error *err)
{
    *out = NULL;
    if (!names || !cfg)
        return cf_error_set(err, CF_E_INVALID, "backends: no backend names given");
    cf_backend_set *set = calloc(1, sizeof(*set));
    if (!set)
        return cf_error_set(err, CF_E_NOMEM, "backends: out of memory");

    const char *cursor = names;
    cf_list_item it;
    while (cf_list_next(&cursor, &it)) {
        char name[NAME_MAX_LEN];
        if (it.len == 0) {
            cf_error_set(err, CF_E_INVALID, "backends: empty name in list '%s'", names);
            goto fail;
        }
        if (it.len >= sizeof(name)) {
            cf_error_set(err, CF_E_INVALID, "backends: name too long in list '%s'", names);
            goto fail;
        }
        memcpy(name, it.s, it.len);
        name[it.len] = '\0';

        const cf_backend_ops *ops = cf_backend_find(name);
        if (!ops) {
            cf_error_set(err, CF_E_NOT_FOUND, "backends: unknown backend '%s'", name);
            goto fail;
        }
        bool twice = false;
        for (size_t i = 0; i < set->n_missing; i++)
            twice = twice || set->missing[i].ops == ops;
        for (size_t i = 0; i < set->n; i++)
            twice = twice || set->items[i].ops == ops;
        if (twice) {
            cf_error_set(err, CF_E_INVALID, "backends: '%s' listed twice", name);
            goto fail;
        }
        if (set->n == SET_MAX) {
            cf_error_set(err, CF_E_LIMIT, "backends: more than %d backends", SET_MAX);
            goto fail;
        }
        cf_backend *b = &set->items[set->n];
        memset(b, 0, sizeof(*b));
        b->ops = ops;
        if (ops->create(cfg, &b->state, &b->caps, err) < 0) {
            if (err && err->code == CF_E_UNSUPPORTED && set->n > 0 && set->n_missing < SET_MAX) {
                unavailable_backend *u = &set->missing[set->n_missing++];
                u->ops = ops;
                cf_strlcpy(u->reason, err->msg, sizeof(u->reason));
                memset(b, 0, sizeof(*b));
                cf_error_clear(err);
                continue;
            }
            cf_error_wrap(err, "backend '%s'", name);
            goto fail;
        }
        set->n++;
    }
    *out = set;
    return 0;
fail:
    set_destroy_items(set);
    free(set);
    return -1;
}

void cf_backend_set_destroy(cf_backend_set *set)
{
    if (!set)
        return;
    set_destroy_items(set);
    free(set);
}

size_t cf_backend_set_count(const cf_backend_set *set)
{
    return set ? set->n : 0;
}

const cf_backend *cf_backend_set_get(const cf_backend_set *set, size_t i)
{
    if (!set || i >= set->n)
        return NULL;
    return &set->items[i];
}

bool cf_backend_set_unavailable(const cf_backend_set *set, const char *name)
{
    for (size_t i = 0; set && name && i < set->n_missing; i++)
        if (strcmp(set->missing[i].ops->name, name) == 0)
            return true;
    return false;
}

bool cf_backend_set_missing(const cf_backend_set *set, size_t i, const char **name, const char **reason)
{
    if (!set || i >= set->n_missing)
        return false;
    *name = set->missing[i].ops->name;
    *reason = set->missing[i].reason;
    return true;
}

const cf_backend *cf_backend_set_select(const cf_backend_set *set, const cf_request *req, char *reason,
                                        size_t reason_size)
{
    return cf_backend_set_select_as(set, req->backend, req, reason, reason_size);
}

const cf_backend *cf_backend_set_select_as(const cf_backend_set *set, const char *want, const cf_request *req,
                                           char *reason, size_t reason_size)
{
    if (!set || set->n == 0) {
        snprintf(reason, reason_size, "no backend is enabled on this worker");
        return NULL;
    }
    const cf_backend *b = NULL;
    if (want && want[0]) {
        for (size_t i = 0; i < set->n; i++)
            if (strcmp(set->items[i].ops->name, want) == 0)
                b = &set->items[i];
        if (!b) {
            char name[80];
            cf_printable(want, strlen(want), name, sizeof(name));
            const unavailable_backend *u = NULL;
            for (size_t i = 0; i < set->n_missing; i++)
                if (strcmp(set->missing[i].ops->name, want) == 0)
                    u = &set->missing[i];
            if (u)
                snprintf(reason, reason_size, "backend '%s' is unavailable on this worker (%s)", name, u->reason);
            else if (cf_backend_find(want))
                snprintf(reason, reason_size, "backend '%s' is not enabled on this worker", name);
            else
                snprintf(reason, reason_size, "unknown backend '%s'", name);
            return NULL;
        }
    } else {
        b = &set->items[0];
    }
    unsigned lang = (unsigned)req->language;
    if (lang == CF_LANG_NONE || lang >= CF_LANG__COUNT || !(b->caps.languages & (1u << lang))) {
        snprintf(reason, reason_size, "language %s not supported by backend '%s'",
                 lang < CF_LANG__COUNT ? cf_language_name(req->language) : "unknown", b->ops->name);
        return NULL;
    }
    return b;
}

/* The controls req asks for, in the order a rejection reports them. */
static uint32_t requested_controls(const cf_policy *p, uint32_t order[], size_t *n)
{
    uint32_t want = 0;
    *n = 0;
#define WANT(bit)                                                                         \
    do {                                                                                  \
        want |= (bit);                                                                    \
        order[(*n)++] = (bit);                                                            \
    } while (0)
    if (p->network == CF_NET_DISABLED)
        WANT(CF_CTL_NETWORK_DISABLED);
    else if (p->network == CF_NET_ENABLED)
        WANT(CF_CTL_NETWORK_ENABLED);
    switch (p->fs_mode) {
    case CF_FS_NONE: WANT(CF_CTL_FS_NONE); break;
    case CF_FS_WORKSPACE_RO: WANT(CF_CTL_FS_WORKSPACE_RO); break;
    case CF_FS_WORKSPACE_RW: WANT(CF_CTL_FS_WORKSPACE_RW); break;
    case CF_FS_PATHS: WANT(CF_CTL_FS_PATHS); break;
    default: break;
    }
    if (p->env_allow_set)
        WANT(CF_CTL_ENV_ALLOWLIST);
    if (p->timeout_us)
        WANT(CF_CTL_TIMEOUT);
    if (p->cpu_time_us)
        WANT(CF_CTL_CPU_TIME);
    if (p->memory_bytes)
        WANT(CF_CTL_MEMORY);
    if (p->max_processes)
        WANT(CF_CTL_MAX_PROCESSES);
    if (p->max_stdout_bytes)
        WANT(CF_CTL_STDOUT_CAP);
    if (p->max_stderr_bytes)
        WANT(CF_CTL_STDERR_CAP);
    if (p->max_file_size_bytes)
        WANT(CF_CTL_FILE_SIZE);
#undef WANT
    return want;
}

static const char *why_not(uint32_t bit)
{
    if (bit & (CF_CTL_NETWORK_DISABLED | CF_CTL_NETWORK_ENABLED))
        return "no network isolation on";
    if (bit & (CF_CTL_FS_NONE | CF_CTL_FS_WORKSPACE_RO | CF_CTL_FS_WORKSPACE_RW | CF_CTL_FS_PATHS))
        return "no filesystem isolation on";
    if (bit & CF_CTL_STREAM)
        return "output is only known at the end on";
    return "not available on";
}

int cf_policy_check(const cf_backend_caps *caps, const char *backend_name, const cf_request *req, char *reason,
                    size_t reason_size)
{
    uint32_t order[16];
    size_t n;
    uint32_t want = requested_controls(&req->policy, order, &n);
    if (req->stream) {
        want |= CF_CTL_STREAM;
        order[n++] = CF_CTL_STREAM;
    }
    if ((want & ~caps->controls) == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (caps->controls & order[i])
            continue;
        if (order[i] == CF_CTL_STREAM) {
            snprintf(reason, reason_size, "stream: backend '%s' cannot stream output (it has the output only when "
                     "the program ended): ask without \"stream\" or use the process or sandbox backend", backend_name);
            return -1;
        }
        /* A backend isolating files that binds no host paths (container). */
        const char *why = order[i] == CF_CTL_FS_PATHS && (caps->controls & CF_CTL_FS_NONE)
                              ? "no host paths are bound on"
                              : why_not(order[i]);
        snprintf(reason, reason_size, "backend '%s' cannot enforce %s (%s %s)", backend_name,
                 cf_control_name(order[i]), why, caps->isolation ? caps->isolation : "this host");
        return -1;
    }
    return -1; /* not reached: some wanted bit was missing */
}

/* Appends to buf at *used, never past size. */
static void appendf(char *buf, size_t size, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void appendf(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    if (r < 0)
        return;
    *used += (size_t)r;
    if (*used >= size)
        *used = size - 1;
}

void cf_backend_set_describe(const cf_backend_set *set, char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; set && i < set->n; i++) {
        const cf_backend *b = &set->items[i];
        appendf(buf, size, &used, "%s%s: isolation=%s languages=", b->ops->name, i == 0 ? " (default)" : "",
                b->caps.isolation ? b->caps.isolation : "?");
        bool first = true;
        for (unsigned l = 1; l < CF_LANG__COUNT; l++) {
            if (!(b->caps.languages & (1u << l)))
                continue;
            appendf(buf, size, &used, "%s%s", first ? "" : ",", cf_language_name((cf_language)l));
            first = false;
        }
        if (first)
            appendf(buf, size, &used, "none");
        appendf(buf, size, &used, " controls=");
        first = true;
        for (size_t c = 0; c < sizeof(control_names) / sizeof(control_names[0]); c++) {
            if (!(b->caps.controls & control_names[c].bit))
                continue;
            appendf(buf, size, &used, "%s%s", first ? "" : ",", control_names[c].name);
            first = false;
        }
        if (first)
            appendf(buf, size, &used, "none");
        if (b->caps.notes)
            appendf(buf, size, &used, " notes=\"%s\"", b->caps.notes);
        appendf(buf, size, &used, "\n");
    }
    for (size_t i = 0; set && i < set->n_missing; i++)
        appendf(buf, size, &used, "%s: UNAVAILABLE (%s)\n", set->missing[i].ops->name, set->missing[i].reason);
}
