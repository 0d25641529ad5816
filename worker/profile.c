/* Operator policy profiles (cf_profile.h). */
#include "profile_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cf_util.h"
#include "cf_net.h"

#define OFF(field) offsetof(cf_profile, field)
#define SEC 1000000LL
#define MIB (1024LL * 1024)

static const cf_conf_prop profile_props[] = {
    {"topic", CF_CONF_STRING, OFF(topic), 0, 249, NULL, NULL,
     "Request topic this profile governs (required, one per profile); the worker consumes it. For `default`: "
     "the worker's request-topic. Who may write to it is the broker's ACLs' job.", NULL},
    {"result-topic", CF_CONF_STRING, OFF(result_topic), 0, 249, NULL, NULL,
     "Where results of this profile's requests go (and rejections, and results whose reply_to failed); "
     "default: the worker's result-topic. Give each tenant its own so ACLs can keep tenants' results apart.",
     NULL},
    {"backends", CF_CONF_STRING, OFF(backends), 0, 256, "sandbox", NULL,
     "Backends a request may name, comma-separated; the first runs requests that name none. `process` runs "
     "code on the host (host_local): for trusted tenants only.", NULL},
    {"languages", CF_CONF_STRING, OFF(languages), 0, 256, "*", NULL,
     "Languages a request may use, comma-separated, or `*` for every language of the backend.", NULL},
    {"network", CF_CONF_ENUM, OFF(network), 0, 0, "disabled", "disabled|enabled",
     "The most network a request may ask for: `disabled` refuses policy.network=enabled.", NULL},
    {"network-allow", CF_CONF_STRING, OFF(network_allow), 0, 4096, "", NULL,
     "With network enabled: IPv4 destinations (a.b.c.d/n, comma-separated) a program may reach although they "
     "are in a range refused by default (private, link-local, shared, reserved, the host's own addresses). "
     "Empty: public addresses only.", NULL},
    {"read-only-roots", CF_CONF_STRING, OFF(read_only_roots), 0, 4096, "", NULL,
     "Host directories under which policy.filesystem paths may be bound read-only, comma-separated; "
     "canonicalised at start (must exist). Empty: paths mode is refused.", NULL},
    {"read-write-roots", CF_CONF_STRING, OFF(read_write_roots), 0, 4096, "", NULL,
     "Host directories under which paths may be bound read-write (or read-only), comma-separated.", NULL},
    {"env-allow", CF_CONF_STRING, OFF(env_allow), 0, 4096, "", NULL,
     "Names of worker environment variables a request's policy.env_allow may pass to the program, "
     "comma-separated. Empty: none. Names starting with CODEFLEET_WORKER_ are never allowed.", NULL},
    {"reply-to", CF_CONF_STRING, OFF(reply_to), 0, 4096, "", NULL,
     "Topics a request's reply_to may name, comma-separated; an entry ending in `*` is a prefix (`*` alone: "
     "any). Empty: "
     "reply_to is refused. Request, dead-letter and events topics and `__*` are always refused, and so are "
     "other tenants' result topics: any other profile's, and by name any topic under the worker's "
     "result-topic or request-topic (`<result-topic>.*`) but this profile's own.", NULL},
    {"state-prefix", CF_CONF_STRING, OFF(state_prefix), 0, 128, "*", NULL,
     "Workspace and thread ids this profile's requests may name must start with it; it ends in `.`, `-` or `_` "
     "(`*`: any id, `none`: no workspaces or threads). Set it per tenant (e.g. `tenant-a.`) so one tenant cannot "
     "name another's workspaces.", NULL},
    {"max-timeout", CF_CONF_DURATION, OFF(max_timeout_us), 0, 24 * 3600 * SEC, "0", NULL,
     "Largest wall-clock timeout (0: the worker's max-timeout); requests setting none get the smaller of "
     "this and default-timeout.", NULL},
    {"max-cpu-time", CF_CONF_DURATION, OFF(max_cpu_time_us), 0, 24 * 3600 * SEC, "0", NULL,
     "Largest CPU time; requests setting none get this (0: no profile cap).", NULL},
    {"max-memory", CF_CONF_SIZE, OFF(max_memory_bytes), 0, 1024 * 1024 * MIB, "0", NULL,
     "Largest memory limit; requests setting none get default-memory, or else this (0: no profile cap, the "
     "backend's default applies).",
     NULL},
    {"default-memory", CF_CONF_SIZE, OFF(default_memory_bytes), 0, 1024 * 1024 * MIB, "0", NULL,
     "Memory limit of requests that set none (at most max-memory); what they reserve of the worker's "
     "memory-budget.  0: max-memory when set, else the backend's default (sandbox-memory).",
     NULL},
    {"max-processes", CF_CONF_INT, OFF(max_processes), 0, 1000000, "0", NULL,
     "Largest processes limit; requests setting none get this (0: no profile cap).", NULL},
    {"max-output", CF_CONF_SIZE, OFF(max_output_bytes), 0, 64 * MIB, "0", NULL,
     "Largest stdout/stderr cap (0: the worker's max-output).", NULL},
    {"max-file-size", CF_CONF_SIZE, OFF(max_file_size_bytes), 0, 1024 * 1024 * MIB, "0", NULL,
     "Largest file a program, or a workspace op, may write; requests setting none get this (0: no profile "
     "cap).", NULL},
    {"images", CF_CONF_STRING, OFF(images), 0, 1024, "*", NULL,
     "Container images (names from the worker's container-images) a request of the `container` backend may "
     "name, comma-separated; the first runs requests that name none. `*`: every image of the worker, the "
     "worker's first being the default.", NULL},
    {"weight", CF_CONF_INT, OFF(weight), 1, 1000, "1", NULL,
     "This profile's share of a worker's slots against the other profiles with work waiting: a free slot goes "
     "to the profile with the fewest running executions for its weight (docs/OPERATIONS.md, \"Fair shares\").",
     NULL},
    {"max-slots", CF_CONF_INT, OFF(max_slots), 0, 65536, "0", NULL,
     "The most of a worker's slots this profile's executions hold at once (at most `slots`).  0: `slots`; the "
     "worker's reserve-slots stay for the other profiles either way.",
     NULL},
    {"max-stored-results", CF_CONF_INT, OFF(max_stored_results), 0, 1000000000, "0", NULL,
     "The most results of this profile kept in Redis for replay at once (0: no cap on their number, only on their "
     "bytes; below 4, no room for the grace).  Past it, or past max-stored-result-bytes, a result is kept ten "
     "minutes (three idempotency-lease if longer; only when idempotency-ttl is longer still) while the profile "
     "stays within a quarter over its caps, and else not at all; either way it is answered, with "
     "a warning saying so, and one not kept runs again if redelivered (docs/OPERATIONS.md, \"Quotas\").",
     NULL},
    {"max-stored-result-bytes", CF_CONF_SIZE, OFF(max_stored_result_bytes), 0, 1024 * 1024 * MIB, "128MiB", NULL,
     "The most bytes of this profile's results kept in Redis for replay at once, each charged what Redis spends "
     "on it (its size plus a quarter, and about 700 bytes of keys), as max-stored-results.  Size the profiles' "
     "sum, with their quarter of grace, below Redis's maxmemory.  0: no cap.",
     NULL},
    {"max-workspace-bytes", CF_CONF_SIZE, OFF(max_workspace_bytes), 0, 1024 * 1024 * MIB, "128MiB", NULL,
     "The most bytes this profile's workspaces may hold in Redis together: each is charged the distinct file "
     "contents it keeps (its files and the revisions of its history), its history's undo logs and paths, and an "
     "estimate of its keys.  A run whose "
     "write-back would pass it keeps its output and is told its changes were not written back, naming this "
     "quota; other profiles' writes are not affected.  0: no cap (docs/OPERATIONS.md, \"Quotas\").",
     NULL},
    {"max-checkpoint-bytes", CF_CONF_SIZE, OFF(max_checkpoint_bytes), 0, 1024 * 1024 * MIB, "32MiB", NULL,
     "The most bytes this profile's checkpoint threads may hold in Redis together (their states and metadata, "
     "the newest's copy, an estimate of the keys).  A save past it is refused the same way, naming this quota.  "
     "0: no cap.",
     NULL},
};

const cf_conf_table cf_profile_conf_table = {
    .program = "codefleet-worker profile",
    .env_prefix = "CODEFLEET_WORKER_PROFILE_",
    .props = profile_props,
    .nprops = sizeof(profile_props) / sizeof(profile_props[0]),
};

struct cf_profile_set {
    cf_profile *items;
    size_t n;
    char *result_topic, *dlq_topic, *events_topic, *workers_topic;
    char *stream_suffix; /* "" = no output topics */
    char *request_topic; /* the worker's own (may be empty) */
};

/* ---------------------------------------------------------------- helpers */

/* t is base itself or below it ("base.<anything>"). */
static bool in_namespace(const char *t, const char *base)
{
    size_t n = base ? strlen(base) : 0;
    return n > 0 && strncmp(t, base, n) == 0 && (t[n] == '\0' || t[n] == '.');
}

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* Splits a comma list into trimmed, non-empty items. */
static int split_list(const char *s, char ***out, size_t *n, cf_error *err)
{
    *out = NULL;
    *n = 0;
    if (!s)
        return 0;
    size_t cap = 1;
    for (const char *c = s; *c; c++)
        cap += *c == ',';
    char **v = calloc(cap, sizeof(char *));
    if (!v)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    size_t k = 0;
    const char *cursor = s;
    cf_list_item it;
    while (cf_list_next(&cursor, &it)) {
        if (!it.len)
            continue;
        v[k] = cf_strndup(it.s, it.len);
        if (!v[k]) {
            strv_free(v, k);
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
        }
        k++;
    }
    *out = v;
    *n = k;
    return 0;
}

static bool in_list(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return true;
    return false;
}

static bool env_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

static bool profile_name_valid(const char *s, size_t n)
{
    if (n == 0 || n > CF_PROFILE_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Canonicalises each root once: symlinks resolved now, so the lexical
 * containment check per request is exact (requested paths may hold no
 * symlink at all: the sandbox walks them with O_NOFOLLOW). */
static int roots_load(const cf_profile *p, const char *what, const char *list, char ***out, size_t *n,
                      cf_error *err)
{
    if (split_list(list, out, n, err) < 0)
        return -1;
    for (size_t i = 0; i < *n; i++) {
        char *r = (*out)[i];
        if (r[0] != '/')
            return cf_error_set(err, CF_E_INVALID, "profile '%s': %s '%s' is not an absolute path", p->name, what, r);
        char real[PATH_MAX];
        if (!realpath(r, real))
            return cf_error_set_errno(err, CF_E_INVALID, errno, "profile '%s': %s '%s'", p->name, what, r);
        struct stat sb;
        if (stat(real, &sb) < 0 || !S_ISDIR(sb.st_mode))
            return cf_error_set(err, CF_E_INVALID, "profile '%s': %s '%s' is not a directory", p->name, what, r);
        char *c = cf_strdup(real);
        if (!c)
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
        free(r);
        (*out)[i] = c;
    }
    return 0;
}

static void profile_free(cf_profile *p)
{
    cf_conf_free(&cf_profile_conf_table, p);
    strv_free(p->backend_names, p->n_backends);
    strv_free(p->image_names, p->n_images);
    strv_free(p->ro_roots, p->n_ro_roots);
    strv_free(p->rw_roots, p->n_rw_roots);
    strv_free(p->env_names, p->n_env_names);
    strv_free(p->reply_rules, p->n_reply_rules);
    free(p->net_allow);
    memset(p, 0, sizeof(*p));
}

/* The profile's topic and result topic: usable names, never one of the
 * fleet's own topics. */
static int check_topics(const cf_profile *p, const cf_profile_env *env, cf_error *err)
{
    if (!cf_topic_name_valid(p->topic) || strncmp(p->topic, "__", 2) == 0)
        return cf_error_set(err, CF_E_INVALID, "profile '%s': '%s' is not a usable topic name", p->name, p->topic);
    const char *fleet[] = {env->result_topic, env->dlq_topic, env->events_topic, env->workers_topic};
    for (size_t i = 0; i < 4; i++)
        if (fleet[i] && fleet[i][0] && strcmp(fleet[i], p->topic) == 0)
            return cf_error_set(err, CF_E_INVALID,
                                "profile '%s': topic '%s' is a result, dead-letter, events or workers topic", p->name,
                                p->topic);
    for (size_t i = 1; p->result_topic && i < 4; i++)
        if (fleet[i] && fleet[i][0] && strcmp(fleet[i], p->result_topic) == 0)
            return cf_error_set(err, CF_E_INVALID,
                                "profile '%s': result-topic '%s' is the dead-letter, events or workers topic", p->name,
                                p->result_topic);
    if (p->result_topic && p->result_topic[0] &&
        (!cf_topic_name_valid(p->result_topic) || strncmp(p->result_topic, "__", 2) == 0))
        return cf_error_set(err, CF_E_INVALID, "profile '%s': result-topic '%s' is not a usable topic name", p->name,
                            p->result_topic);
    return 0;
}

/* images: "*" or a list of image names. */
static int compile_images(cf_profile *p, cf_error *err)
{
    if (!p->images || strcmp(p->images, "*") == 0)
        return 0;
    if (split_list(p->images, &p->image_names, &p->n_images, err) < 0)
        return -1;
    if (p->n_images == 0)
        return cf_error_set(err, CF_E_INVALID, "profile '%s': images is empty (use * for all)", p->name);
    for (size_t i = 0; i < p->n_images; i++)
        if (!cf_image_name_valid(p->image_names[i]))
            return cf_error_set(err, CF_E_INVALID, "profile '%s': images: '%s' is not an image name", p->name,
                                p->image_names[i]);
    return 0;
}

/* Images the profile names must be the worker's (container-images): the
 * images of each backend of the profile that has some. */
static int check_images_known(const cf_profile *p, const cf_profile_env *env, cf_error *err)
{
    for (size_t k = 0; p->image_names && env->backends && k < cf_backend_set_count(env->backends); k++) {
        const cf_backend *b = cf_backend_set_get(env->backends, k);
        if (!b->caps.images || !in_list(p->backend_names, p->n_backends, b->ops->name))
            continue;
        for (size_t i = 0; i < p->n_images; i++) {
            bool known = false;
            const char *c = b->caps.images;
            size_t want = strlen(p->image_names[i]);
            while (*c && !known) {
                size_t len = strcspn(c, ",");
                known = len == want && strncmp(c, p->image_names[i], len) == 0;
                c += len + (c[len] == ',');
            }
            if (!known)
                return cf_error_set(err, CF_E_INVALID,
                                    "profile '%s': images: '%s' is not one of the worker's container-images (%s)",
                                    p->name, p->image_names[i], b->caps.images);
        }
    }
    return 0;
}

/* backends (each one the worker's) and images. */
static int compile_backends(cf_profile *p, const cf_profile_env *env, cf_error *err)
{
    if (split_list(p->backends, &p->backend_names, &p->n_backends, err) < 0 || compile_images(p, err) < 0)
        return -1;
    if (p->n_backends == 0)
        return cf_error_set(err, CF_E_INVALID, "profile '%s': backends is empty", p->name);
    for (size_t i = 0; i < p->n_backends; i++) {
        bool found = false;
        for (size_t k = 0; env->backends && k < cf_backend_set_count(env->backends); k++)
            found |= strcmp(cf_backend_set_get(env->backends, k)->ops->name, p->backend_names[i]) == 0;
        /* Listed for the worker but unavailable here (a build without the
         * runtimes): requests naming it are refused with that reason. */
        found |= env->backends && cf_backend_set_unavailable(env->backends, p->backend_names[i]);
        if (!found)
            return cf_error_set(err, CF_E_INVALID, "profile '%s': backend '%s' is not enabled on this worker (backends)",
                                p->name, p->backend_names[i]);
    }
    return check_images_known(p, env, err);
}

/* languages into language_mask ("*": all). */
static int compile_languages(cf_profile *p, cf_error *err)
{
    char **langs = NULL;
    size_t nl = 0;
    if (split_list(p->languages, &langs, &nl, err) < 0)
        return -1;
    p->language_mask = 0;
    for (size_t i = 0; i < nl; i++) {
        cf_language l;
        if (strcmp(langs[i], "*") == 0) {
            p->language_mask = ~0u;
        } else if (cf_language_parse(langs[i], &l) == 0 && l != CF_LANG_NONE) {
            p->language_mask |= 1u << l;
        } else {
            cf_error_set(err, CF_E_INVALID, "profile '%s': unknown language '%s'", p->name, langs[i]);
            strv_free(langs, nl);
            return -1;
        }
    }
    strv_free(langs, nl);
    return 0;
}

/* network-allow into net_allow: at most 32 IPv4 CIDRs, only with network
 * enabled. */
static int compile_net_allow(cf_profile *p, cf_error *err)
{
    char **nets = NULL;
    size_t nn = 0;
    if (split_list(p->network_allow, &nets, &nn, err) < 0)
        return -1;
    if (nn > 32) {
        strv_free(nets, nn);
        return cf_error_set(err, CF_E_LIMIT, "profile '%s': network-allow: more than 32 destinations", p->name);
    }
    p->net_allow = nn ? calloc(nn, sizeof(*p->net_allow)) : NULL;
    if (nn && !p->net_allow) {
        strv_free(nets, nn);
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nn; i++) {
        if (cf_cidr4_parse(nets[i], &p->net_allow[i]) < 0) {
            cf_error_set(err, CF_E_INVALID, "profile '%s': network-allow: '%s' is not an IPv4 CIDR (a.b.c.d/n, no host "
                         "bits)", p->name, nets[i]);
            strv_free(nets, nn);
            return -1;
        }
        p->n_net_allow++;
    }
    strv_free(nets, nn);
    if (p->n_net_allow && p->network == 0)
        return cf_error_set(err, CF_E_INVALID, "profile '%s': network-allow needs network = enabled", p->name);
    return 0;
}

/* env-allow: variable names, never the worker's own configuration. */
static int compile_env_allow(cf_profile *p, const cf_profile_env *env, cf_error *err)
{
    if (split_list(p->env_allow, &p->env_names, &p->n_env_names, err) < 0)
        return -1;
    size_t pl = env->env_prefix ? strlen(env->env_prefix) : 0;
    for (size_t i = 0; i < p->n_env_names; i++) {
        if (!env_name_valid(p->env_names[i]))
            return cf_error_set(err, CF_E_INVALID, "profile '%s': env-allow: '%s' is not a variable name", p->name,
                                p->env_names[i]);
        if (pl && strncmp(p->env_names[i], env->env_prefix, pl) == 0)
            return cf_error_set(err, CF_E_INVALID,
                                "profile '%s': env-allow: '%s' is the worker's own configuration (never passed)",
                                p->name, p->env_names[i]);
    }
    return 0;
}

/* reply-to: "*", topic names or prefixes ending in '*'. */
static int compile_reply_to(cf_profile *p, cf_error *err)
{
    if (split_list(p->reply_to, &p->reply_rules, &p->n_reply_rules, err) < 0)
        return -1;
    for (size_t i = 0; i < p->n_reply_rules; i++) {
        char *r = p->reply_rules[i];
        size_t n = strlen(r);
        if (strcmp(r, "*") == 0)
            continue; /* any topic (the fleet's own still refused) */
        if (n > 249)
            return cf_error_set(err, CF_E_INVALID, "profile '%s': reply-to entry longer than a topic name", p->name);
        bool prefix = n > 1 && r[n - 1] == '*';
        char body[256];
        cf_strlcpy(body, r, sizeof(body));
        if (prefix)
            body[n - 1] = '\0';
        if (!cf_topic_name_valid(body) || strncmp(body, "__", 2) == 0 || (!prefix && strchr(r, '*')))
            return cf_error_set(err, CF_E_INVALID, "profile '%s': reply-to entry '%s' is not a topic or prefix*",
                                p->name, r);
    }
    return 0;
}

/* state-prefix: "*", "none", or [A-Za-z0-9._-] ending in a separator. */
static int check_state_prefix(const cf_profile *p, cf_error *err)
{
    if (!p->state_prefix || strcmp(p->state_prefix, "*") == 0 || strcmp(p->state_prefix, "none") == 0)
        return 0;
    size_t n = strlen(p->state_prefix);
    if (n && !cf_name_valid(p->state_prefix, n, n))
        return cf_error_set(err, CF_E_INVALID, "profile '%s': state-prefix may hold [A-Za-z0-9._-] only", p->name);
    /* "tenant-a" would also match "tenant-ab.x": a prefix ends in a
     * separator (and an empty one would match everything). */
    char last = n ? p->state_prefix[n - 1] : '\0';
    if (last != '.' && last != '-' && last != '_')
        return cf_error_set(err, CF_E_INVALID,
                            "profile '%s': state-prefix '%s' must end in '.', '-' or '_' (or be '*' or 'none')",
                            p->name, p->state_prefix);
    return 0;
}

/* Derives the parsed forms and checks them against the worker. */
static int profile_compile(cf_profile *p, const cf_profile_env *env, cf_error *err)
{
    if (strcmp(p->name, "default") == 0 && (!p->topic || !p->topic[0])) {
        free(p->topic);
        p->topic = cf_strdup(env->request_topic ? env->request_topic : "");
        if (!p->topic)
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    if (!p->topic || !p->topic[0]) {
        if (strcmp(p->name, "default") == 0)
            return 0; /* the worker consumes no default topic */
        return cf_error_set(err, CF_E_INVALID, "profile '%s': topic is required", p->name);
    }
    if (check_topics(p, env, err) < 0 || compile_backends(p, env, err) < 0 || compile_languages(p, err) < 0 ||
        compile_net_allow(p, err) < 0)
        return -1;
    if (roots_load(p, "read-only-roots", p->read_only_roots, &p->ro_roots, &p->n_ro_roots, err) < 0 ||
        roots_load(p, "read-write-roots", p->read_write_roots, &p->rw_roots, &p->n_rw_roots, err) < 0)
        return -1;
    if (compile_env_allow(p, env, err) < 0 || compile_reply_to(p, err) < 0 || check_state_prefix(p, err) < 0)
        return -1;
    return 0;
}

static cf_profile *set_find_name(cf_profile_set *s, const char *name, size_t n)
{
    for (size_t i = 0; i < s->n; i++)
        if (strlen(s->items[i].name) == n && strncmp(s->items[i].name, name, n) == 0)
            return &s->items[i];
    return NULL;
}

static cf_profile *set_add(cf_profile_set *s, const char *name, size_t n, cf_error *err)
{
    if (s->n >= CF_PROFILE_MAX) {
        cf_error_set(err, CF_E_LIMIT, "more than %d profiles", CF_PROFILE_MAX);
        return NULL;
    }
    cf_profile *items = realloc(s->items, (s->n + 1) * sizeof(*items));
    if (!items) {
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        return NULL;
    }
    s->items = items;
    cf_profile *p = &s->items[s->n];
    memset(p, 0, sizeof(*p));
    memcpy(p->name, name, n);
    p->name[n] = '\0';
    if (cf_conf_init(&cf_profile_conf_table, p, err) < 0) {
        profile_free(p);
        return NULL;
    }
    s->n++;
    return p;
}

/* ---------------------------------------------------------------- set */

/* Tenants' state prefixes must not nest: with "acme-" and "acme-eu-", the
 * requests of the first could name the second's workspaces (the worker's
 * own Redis user reaches every id). */
static int check_prefixes_apart(const cf_profile_set *s, cf_error *err)
{
    for (size_t i = 0; i < s->n; i++)
        for (size_t k = 0; k < s->n; k++) {
            const char *a = s->items[i].state_prefix, *b = s->items[k].state_prefix;
            if (i == k || !a || !b || !strcmp(a, "*") || !strcmp(a, "none") || !strcmp(b, "*") ||
                !strcmp(b, "none"))
                continue;
            if (strncmp(b, a, strlen(a)) == 0)
                return cf_error_set(err, CF_E_INVALID,
                                    "profiles '%s' and '%s': state-prefix '%s' %s '%s' (one tenant could name the "
                                    "other's workspaces and threads): make them distinct, neither starting with the "
                                    "other",
                                    s->items[i].name, s->items[k].name, a,
                                    strcmp(a, b) == 0 ? "is the same as" : "is the start of", b);
        }
    return 0;
}

int cf_profile_set_new(const cf_kvlist *kv, const cf_profile_env *env, cf_profile_set **out, cf_error *err)
{
    *out = NULL;
    cf_profile_set *s = calloc(1, sizeof(*s));
    if (!s)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    s->result_topic = cf_strdup(env->result_topic);
    s->dlq_topic = cf_strdup(env->dlq_topic);
    s->events_topic = cf_strdup(env->events_topic);
    s->workers_topic = env->workers_topic && env->workers_topic[0] ? cf_strdup(env->workers_topic) : NULL;
    s->request_topic = cf_strdup(env->request_topic ? env->request_topic : "");
    s->stream_suffix = cf_strdup(env->stream_suffix ? env->stream_suffix : "");
    if ((env->result_topic && !s->result_topic) || (env->dlq_topic && !s->dlq_topic) ||
        (env->events_topic && !s->events_topic) || !s->request_topic || !s->stream_suffix ||
        (env->workers_topic && env->workers_topic[0] && !s->workers_topic)) {
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        goto fail;
    }
    if (!set_add(s, "default", 7, err))
        goto fail;
    for (size_t i = 0; kv && i < kv->count; i++) {
        const char *k = kv->items[i].key;
        const char *dot = strchr(k, '.');
        if (!dot || !profile_name_valid(k, (size_t)(dot - k))) {
            cf_error_set(err, CF_E_INVALID,
                         "profile key 'profile.%.80s': expected profile.<name>.<key>, name of [A-Za-z0-9_-]", k);
            goto fail;
        }
        cf_profile *p = set_find_name(s, k, (size_t)(dot - k));
        if (!p && !(p = set_add(s, k, (size_t)(dot - k), err)))
            goto fail;
        if (cf_conf_set(&cf_profile_conf_table, p, dot + 1, kv->items[i].value, err) < 0) {
            cf_error_wrap(err, "profile '%s'", p->name);
            goto fail;
        }
    }
    for (size_t i = 0; i < s->n; i++)
        if (profile_compile(&s->items[i], env, err) < 0)
            goto fail;
    for (size_t i = 0; i < s->n; i++)
        for (size_t k = i + 1; k < s->n; k++)
            if (s->items[i].topic[0] && strcmp(s->items[i].topic, s->items[k].topic) == 0) {
                cf_error_set(err, CF_E_INVALID, "profiles '%s' and '%s' both govern topic '%s'", s->items[i].name,
                             s->items[k].name, s->items[i].topic);
                goto fail;
            }
    for (size_t i = 0; i < s->n; i++)
        for (size_t k = 0; k < s->n; k++) {
            const char *rt = s->items[k].result_topic;
            if (rt && rt[0] && s->items[i].topic[0] && strcmp(rt, s->items[i].topic) == 0) {
                cf_error_set(err, CF_E_INVALID, "profile '%s': result-topic '%s' is the request topic of '%s'",
                             s->items[k].name, rt, s->items[i].name);
                goto fail;
            }
        }
    if (check_prefixes_apart(s, err) < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    cf_profile_set_destroy(s);
    return -1;
}

void cf_profile_set_destroy(cf_profile_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        profile_free(&s->items[i]);
    free(s->items);
    free(s->result_topic);
    free(s->dlq_topic);
    free(s->events_topic);
    free(s->workers_topic);
    free(s->request_topic);
    free(s->stream_suffix);
    free(s);
}

size_t cf_profile_set_count(const cf_profile_set *s)
{
    return s ? s->n : 0;
}

const cf_profile *cf_profile_set_get(const cf_profile_set *s, size_t i)
{
    return s && i < s->n ? &s->items[i] : NULL;
}

const cf_profile *cf_profile_set_for_topic(const cf_profile_set *s, const char *topic)
{
    for (size_t i = 0; s && topic && i < s->n; i++)
        if (s->items[i].topic[0] && strcmp(s->items[i].topic, topic) == 0)
            return &s->items[i];
    return NULL;
}

bool cf_profile_set_is_request_topic(const cf_profile_set *s, const char *topic)
{
    return cf_profile_set_for_topic(s, topic) != NULL;
}

const char *cf_profile_result_topic(const cf_profile *p, const cf_profile_env *env)
{
    return p->result_topic && p->result_topic[0] ? p->result_topic : env->result_topic;
}

const char *cf_profile_backend_for(const cf_profile *p, const cf_request *req)
{
    if (req->backend && req->backend[0])
        return req->backend;
    /* A module runs only on the wasm backend: no need to name it. */
    if (req->language == CF_LANG_WASM)
        for (size_t i = 0; i < p->n_backends; i++)
            if (strcmp(p->backend_names[i], "wasm") == 0)
                return p->backend_names[i];
    return p->backend_names[0];
}

/* ---------------------------------------------------------------- admission */

/* Whether path (absolute, normalized: checked by the backend too) lies at
 * or below one of roots. */
static bool under_root(char *const *roots, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++) {
        size_t rl = strlen(roots[i]);
        if (rl == 1 && roots[i][0] == '/')
            return path[0] == '/';
        if (strncmp(path, roots[i], rl) == 0 && (path[rl] == '\0' || path[rl] == '/'))
            return true;
    }
    return false;
}

static bool path_normalized(const char *p)
{
    size_t len = strlen(p);
    if (len == 0 || p[0] != '/' || strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../"))
        return false;
    if ((len >= 2 && strcmp(p + len - 2, "/.") == 0) || (len >= 3 && strcmp(p + len - 3, "/..") == 0))
        return false;
    return len == 1 || p[len - 1] != '/';
}

static bool reply_allowed(const cf_profile *p, const char *topic)
{
    for (size_t i = 0; i < p->n_reply_rules; i++) {
        const char *r = p->reply_rules[i];
        size_t n = strlen(r);
        if (r[n - 1] == '*' ? strncmp(topic, r, n - 1) == 0 : strcmp(topic, r) == 0)
            return true;
    }
    return false;
}

#define REFUSE(...)                                                                                                \
    do {                                                                                                           \
        int _n = snprintf(reason, rsz, "profile '%s': ", p->name);                                                 \
        if (_n >= 0 && (size_t)_n < rsz)                                                                           \
            snprintf(reason + _n, rsz - (size_t)_n, __VA_ARGS__);                                                  \
        return -1;                                                                                                 \
    } while (0)

static void shown(const char *s, char *buf, size_t size)
{
    cf_printable(s, s ? strlen(s) : 0, buf, size);
}

/* A limit: a request above the profile's maximum is refused; one setting
 * none gets the maximum (when the profile has one). */
static int limit_fit(const cf_profile *p, const char *name, int64_t max, int64_t *v, char *reason, size_t rsz)
{
    if (max <= 0)
        return 0;
    if (*v > max)
        REFUSE("policy.%s %" PRId64 " exceeds the profile's maximum %" PRId64, name, *v, max);
    if (*v == 0)
        *v = max;
    return 0;
}

int cf_profile_admit(const cf_profile *p, const cf_profile_set *set, const char *backend, cf_request *req,
                     char *reason, size_t rsz)
{
    char buf[100];
    cf_policy *pol = &req->policy;
    /* A workspace op runs no program: no backend, language, image, network
     * or host paths (and its request is left as sent: a dead letter is
     * encoded from it, and SPEC.md refuses those fields with an op). */
    if (req->workspace_op)
        goto reply;
    if (!in_list(p->backend_names, p->n_backends, backend)) {
        shown(backend, buf, sizeof(buf));
        REFUSE("backend '%s' is not allowed (allowed: %s)", buf, p->backends);
    }
    unsigned lang = (unsigned)req->language;
    if (lang >= 32 || !(p->language_mask & (1u << lang)))
        REFUSE("language %s is not allowed", cf_language_name(req->language));
    /* Images: only the container backend runs one, and only those the
     * profile lists; a request naming none gets the profile's first. */
    if (strcmp(backend, "container") != 0) {
        if (req->image)
            REFUSE("image: only the container backend runs images (this request runs on '%s')", backend);
    } else if (p->image_names) {
        if (req->image && !in_list(p->image_names, p->n_images, req->image)) {
            shown(req->image, buf, sizeof(buf));
            REFUSE("image '%s' is not allowed (allowed: %s)", buf, p->images);
        }
        if (!req->image && !(req->image = strdup(p->image_names[0])))
            REFUSE("out of memory");
    }

    if (pol->network == CF_NET_ENABLED && p->network == 0)
        REFUSE("network=enabled is not allowed");
    /* "No network" is the profile's rule even for a request that does not
     * mention it: a backend that cannot take the network away refuses. */
    if (pol->network == CF_NET_UNSPECIFIED && p->network == 0)
        pol->network = CF_NET_DISABLED;

    if (pol->fs_mode == CF_FS_PATHS) {
        if (p->n_ro_roots + p->n_rw_roots == 0)
            REFUSE("filesystem mode paths is not allowed (no host path roots)");
        for (size_t i = 0; i < pol->n_fs_read_only + pol->n_fs_read_write; i++) {
            bool rw = i >= pol->n_fs_read_only;
            const char *path = rw ? pol->fs_read_write[i - pol->n_fs_read_only] : pol->fs_read_only[i];
            shown(path, buf, sizeof(buf));
            if (!path || !path_normalized(path))
                REFUSE("filesystem path '%s' is not an absolute, normalized path", buf);
            bool ok = under_root(p->rw_roots, p->n_rw_roots, path) ||
                      (!rw && under_root(p->ro_roots, p->n_ro_roots, path));
            if (!ok)
                REFUSE("%s path '%s' is outside the allowed roots", rw ? "read-write" : "read-only", buf);
        }
    }

    for (size_t i = 0; pol->env_allow_set && i < pol->n_env_allow; i++) {
        const char *name = pol->env_allow[i];
        if (!name || !in_list(p->env_names, p->n_env_names, name)) {
            shown(name, buf, sizeof(buf));
            REFUSE("env_allow: '%s' is not allowed", buf);
        }
    }

reply:
    if (req->reply_to) {
        const char *t = req->reply_to;
        shown(t, buf, sizeof(buf));
        if (!cf_topic_name_valid(t))
            REFUSE("reply_to '%s' is not a valid topic name", buf);
        /* The fleet's own topics: a result there would be taken for a
         * request, a dead letter or an event. */
        if (strncmp(t, "__", 2) == 0 || cf_profile_set_is_request_topic(set, t) ||
            (set->dlq_topic && strcmp(t, set->dlq_topic) == 0) ||
            (set->events_topic && strcmp(t, set->events_topic) == 0) ||
            (set->workers_topic && strcmp(t, set->workers_topic) == 0))
            REFUSE("reply_to '%s' is one of the fleet's own topics", buf);
        /* An output topic, of any tenant of any worker group: results
         * there would be taken for chunks by that tenant's readers.  By its
         * suffix, so tenants this worker does not know are covered too. */
        size_t sl = set->stream_suffix ? strlen(set->stream_suffix) : 0, tl = strlen(t);
        if (sl && tl > sl && strcmp(t + tl - sl, set->stream_suffix) == 0)
            REFUSE("reply_to '%s' ends in '%s': that names an output topic, not a result topic", buf,
                   set->stream_suffix);
        /* Another tenant's results: the worker would write, with its own
         * credentials, where only that tenant reads. */
        const char *own = p->result_topic && p->result_topic[0] ? p->result_topic : set->result_topic;
        bool others = false;
        for (size_t i = 0; i < set->n; i++) {
            const cf_profile *q = &set->items[i];
            const char *rt = q->result_topic && q->result_topic[0] ? q->result_topic : set->result_topic;
            others |= rt && strcmp(rt, t) == 0 && strcmp(rt, own) != 0;
        }
        /* The same by name, for tenants this worker does not serve (a
         * fleet split over several worker groups): the namespaces
         * <result-topic>.* and <request-topic>.* belong to the fleet's
         * tenants, and a request may reach only its own result topic
         * there. */
        if (others)
            REFUSE("reply_to '%s' is another profile's result topic", buf);
        if (strcmp(t, own) != 0 && in_namespace(t, set->request_topic))
            REFUSE("reply_to '%s' is in the namespace of the fleet's request topics ('%s.*': tenants' request and "
                   "cancel topics), not a result topic", buf, set->request_topic);
        if (strcmp(t, own) != 0 && in_namespace(t, set->result_topic))
            REFUSE("reply_to '%s' is in the namespace of the fleet's tenants' result topics ('%s.*'): a request "
                   "may reply there only to its own result topic", buf, set->result_topic);
        if (!reply_allowed(p, t))
            REFUSE("reply_to '%s' is not allowed", buf);
    }

    if (req->workspace || req->thread) {
        const char *pre = p->state_prefix;
        if (!pre || strcmp(pre, "none") == 0)
            REFUSE("workspaces and threads are not allowed (state-prefix none)");
        if (strcmp(pre, "*") != 0) {
            size_t n = strlen(pre);
            const char *ids[2] = {req->workspace, req->thread};
            for (int i = 0; i < 2; i++)
                /* The prefix alone is no id of the tenant's (its clients'
                 * stores refuse it too: cf_state_scope_check). */
                if (ids[i] && (strncmp(ids[i], pre, n) != 0 || !ids[i][n])) {
                    shown(ids[i], buf, sizeof(buf));
                    REFUSE("%s '%s' does not start with '%s' followed by a name", i ? "thread" : "workspace", buf,
                           pre);
                }
        }
    }

    if (limit_fit(p, "timeout_us", p->max_timeout_us, &pol->timeout_us, reason, rsz) < 0 ||
        limit_fit(p, "cpu_time_us", p->max_cpu_time_us, &pol->cpu_time_us, reason, rsz) < 0 ||
        limit_fit(p, "memory_bytes", p->max_memory_bytes, &pol->memory_bytes, reason, rsz) < 0 ||
        limit_fit(p, "max_processes", p->max_processes, &pol->max_processes, reason, rsz) < 0 ||
        limit_fit(p, "max_stdout_bytes", p->max_output_bytes, &pol->max_stdout_bytes, reason, rsz) < 0 ||
        limit_fit(p, "max_stderr_bytes", p->max_output_bytes, &pol->max_stderr_bytes, reason, rsz) < 0 ||
        limit_fit(p, "max_file_size_bytes", p->max_file_size_bytes, &pol->max_file_size_bytes, reason, rsz) < 0)
        return -1;
    return 0;
}

bool cf_profile_output_topic_ok(const cf_profile *p, const cf_profile_set *set, const char *topic, char *reason,
                                size_t rsz)
{
    char buf[160];
    shown(topic, buf, sizeof(buf));
    if (!cf_topic_name_valid(topic)) {
        snprintf(reason, rsz, "stream: output topic '%s' is not a valid topic name", buf);
        return false;
    }
    bool own_topic = strncmp(topic, "__", 2) == 0 || cf_profile_set_is_request_topic(set, topic) ||
                     (set->dlq_topic && strcmp(topic, set->dlq_topic) == 0) ||
                     (set->events_topic && strcmp(topic, set->events_topic) == 0) ||
                     (set->workers_topic && strcmp(topic, set->workers_topic) == 0) ||
                     (set->result_topic && strcmp(topic, set->result_topic) == 0);
    for (size_t i = 0; !own_topic && i < set->n; i++) {
        const cf_profile *q = &set->items[i];
        own_topic = q->result_topic && strcmp(q->result_topic, topic) == 0;
    }
    const char *own = p->result_topic && p->result_topic[0] ? p->result_topic : set->result_topic;
    if (!own_topic && !in_namespace(topic, own) &&
        (in_namespace(topic, set->result_topic) || in_namespace(topic, set->request_topic)))
        own_topic = true;
    if (own_topic) {
        snprintf(reason, rsz, "stream: output topic '%s' is one of the fleet's own or another tenant's topics", buf);
        return false;
    }
    return true;
}
