/* cf_config: one property table feeds defaults, an INI file, the
 * environment, command-line flags, --help and the Markdown reference.
 *
 * Everything this file reads (files, environment, argv) is untrusted: sizes
 * are capped, numbers are range-checked, and every error names its source. */
#include "cf_config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cf_util.h"

#define CONF_NAME_MAX 256            /* longest key, flag or variable name we look at */
#define CONF_STRING_MAX_DEFAULT 4096 /* STRING props with max == 0 */
#define CONF_FILE_MAX (1024 * 1024)  /* a config file larger than this is a mistake */
#define CONF_KVLIST_MAX_ITEMS 256    /* pass-through entries per KVLIST prop */

/* ---- small helpers --------------------------------------------------- */

static void *prop_field(const cf_conf_prop *p, void *target)
{
    return (char *)target + p->offset;
}

static const void *prop_cfield(const cf_conf_prop *p, const void *target)
{
    return (const char *)target + p->offset;
}

static const char *type_name(cf_conf_type type)
{
    switch (type) {
    case CF_CONF_STRING: return "string";
    case CF_CONF_INT: return "int";
    case CF_CONF_BOOL: return "bool";
    case CF_CONF_DURATION: return "duration";
    case CF_CONF_SIZE: return "size";
    case CF_CONF_ENUM: return "enum";
    case CF_CONF_KVLIST: return "key/value list";
    }
    return "?";
}

/* '-' and '_' are interchangeable in names so "--max-slots" finds "max_slots". */
static bool name_char_eq(char a, char b)
{
    if ((a == '-' || a == '_') && (b == '-' || b == '_'))
        return true;
    return a == b;
}

static bool name_eq(const char *a, const char *b, size_t blen)
{
    size_t i = 0;
    for (; i < blen; i++) {
        if (a[i] == '\0' || !name_char_eq(a[i], b[i]))
            return false;
    }
    return a[i] == '\0';
}

static bool is_kvlist(const cf_conf_prop *p)
{
    return p->type == CF_CONF_KVLIST;
}

/* Finds the prop for key (length klen).  Exact names win over KVLIST
 * prefixes; *sub receives the key below a KVLIST prefix ("kafka.x" -> "x"). */
static const cf_conf_prop *find_prop(const cf_conf_table *t, const char *key, size_t klen, const char **sub)
{
    *sub = NULL;
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        if (!is_kvlist(p) && name_eq(p->name, key, klen))
            return p;
    }
    const cf_conf_prop *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        if (!is_kvlist(p))
            continue;
        size_t plen = strlen(p->name);
        if (plen > klen || plen <= best_len)
            continue;
        bool match = true;
        for (size_t j = 0; j < plen && match; j++)
            match = name_char_eq(p->name[j], key[j]);
        if (match) {
            best = p;
            best_len = plen;
        }
    }
    if (best)
        *sub = key + best_len;
    return best;
}

/* Edit distance, capped: only used to suggest a near miss. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = name_char_eq(a[i - 1], b[j - 1]) ? 0 : 1;
            size_t best = diag + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Writes " (did you mean 'x'?)" into buf when a prop name is close to key. */
static void suggest(const cf_conf_table *t, const char *key, const char *prefix, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t best = 3; /* only suggest within 2 edits */
    for (size_t i = 0; i < t->nprops; i++) {
        if (is_kvlist(&t->props[i]))
            continue;
        size_t d = edit_distance(key, t->props[i].name);
        if (d < best) {
            best = d;
            snprintf(buf, cap, " (did you mean '%s%s'?)", prefix, t->props[i].name);
        }
    }
}

/* Formats a duration with the largest unit that divides it exactly, so the
 * text parses back to the same value ("90s", "1500ms", "2h"). */
static void format_duration_exact(int64_t us, char *buf, size_t cap)
{
    static const struct {
        int64_t mul;
        const char *unit;
    } units[] = {{3600000000LL, "h"}, {60000000LL, "m"}, {1000000LL, "s"}, {1000LL, "ms"}};
    if (us != 0) {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (us % units[i].mul == 0) {
                snprintf(buf, cap, "%lld%s", (long long)(us / units[i].mul), units[i].unit);
                return;
            }
        }
    }
    snprintf(buf, cap, "%lldus", (long long)us);
}

static void format_size_exact(int64_t n, char *buf, size_t cap)
{
    static const struct {
        int64_t mul;
        const char *unit;
    } units[] = {{1LL << 30, "GiB"}, {1LL << 20, "MiB"}, {1LL << 10, "KiB"}};
    if (n != 0) {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (n % units[i].mul == 0) {
                snprintf(buf, cap, "%lld%s", (long long)(n / units[i].mul), units[i].unit);
                return;
            }
        }
    }
    snprintf(buf, cap, "%lld", (long long)n);
}

/* Effective numeric bounds: {0, 0} in the table means "no bound". */
static void numeric_bounds(const cf_conf_prop *p, int64_t *min, int64_t *max)
{
    if (p->min == 0 && p->max == 0) {
        *min = p->type == CF_CONF_INT ? INT64_MIN : 0;
        *max = INT64_MAX;
    } else {
        *min = p->min;
        *max = p->max;
    }
}

static void format_number(const cf_conf_prop *p, int64_t v, char *buf, size_t cap)
{
    if (p->type == CF_CONF_DURATION)
        format_duration_exact(v, buf, cap);
    else if (p->type == CF_CONF_SIZE)
        format_size_exact(v, buf, cap);
    else
        snprintf(buf, cap, "%lld", (long long)v);
}

/* Finds value in "a|b|c"; returns its index or -1. */
static int enum_index(const char *values, const char *value)
{
    if (!values)
        return -1;
    size_t vlen = strlen(value);
    int idx = 0;
    const char *s = values;
    for (;;) {
        const char *bar = strchr(s, '|');
        size_t len = bar ? (size_t)(bar - s) : strlen(s);
        if (len == vlen && strncmp(s, value, len) == 0)
            return idx;
        if (!bar)
            return -1;
        s = bar + 1;
        idx++;
    }
}

/* Copies the idx-th alternative of "a|b|c" into buf ("" if out of range). */
static void enum_name(const char *values, int idx, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!values || idx < 0)
        return;
    const char *s = values;
    for (int i = 0; i < idx; i++) {
        s = strchr(s, '|');
        if (!s)
            return;
        s++;
    }
    const char *bar = strchr(s, '|');
    size_t len = bar ? (size_t)(bar - s) : strlen(s);
    if (len >= cap)
        len = cap - 1;
    memcpy(buf, s, len);
    buf[len] = '\0';
}

static bool has_control_chars(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return true;
    }
    return false;
}

/* ---- kv lists -------------------------------------------------------- */

const char *cf_kvlist_get(const cf_kvlist *l, const char *key)
{
    if (!l || !key)
        return NULL;
    for (size_t i = 0; i < l->count; i++) {
        if (strcmp(l->items[i].key, key) == 0)
            return l->items[i].value;
    }
    return NULL;
}

int cf_kvlist_set(cf_kvlist *l, const char *key, const char *value, cf_error *err)
{
    if (!l || !key || !*key || !value)
        return cf_error_set(err, CF_E_INVALID, "key/value list: empty key or missing value");
    char *v = strdup(value);
    if (!v)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < l->count; i++) {
        if (strcmp(l->items[i].key, key) == 0) {
            free(l->items[i].value);
            l->items[i].value = v;
            return 0;
        }
    }
    char *k = strdup(key);
    cf_kvpair *items = k ? realloc(l->items, (l->count + 1) * sizeof(*items)) : NULL;
    if (!items) {
        free(k);
        free(v);
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    items[l->count].key = k;
    items[l->count].value = v;
    l->items = items;
    l->count++;
    return 0;
}

void cf_kvlist_free(cf_kvlist *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->count; i++) {
        free(l->items[i].key);
        free(l->items[i].value);
    }
    free(l->items);
    l->items = NULL;
    l->count = 0;
}

/* ---- setting one value ----------------------------------------------- */

/* Sets p (sub: key below a KVLIST prefix) from text.  Errors start with
 * the key so the caller only adds the source. */
static int set_prop(const cf_conf_prop *p, const char *sub, void *target, const char *value, cf_error *err)
{
    void *field = prop_field(p, target);
    if (!value)
        return cf_error_set(err, CF_E_INVALID, "%s: missing value", p->name);
    switch (p->type) {
    case CF_CONF_STRING: {
        size_t max = p->max > 0 ? (size_t)p->max : CONF_STRING_MAX_DEFAULT;
        size_t len = strnlen(value, max + 1);
        if (len > max)
            return cf_error_set(err, CF_E_INVALID, "%s: value is longer than %zu bytes", p->name, max);
        if (p->min > 0 && len < (size_t)p->min)
            return cf_error_set(err, CF_E_INVALID, "%s: value is shorter than %lld bytes", p->name,
                                (long long)p->min);
        if (has_control_chars(value))
            return cf_error_set(err, CF_E_INVALID, "%s: value contains control characters", p->name);
        char *copy = strdup(value);
        if (!copy)
            return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", p->name);
        char **slot = field;
        free(*slot);
        *slot = copy;
        return 0;
    }
    case CF_CONF_BOOL:
        return cf_parse_bool(value, (bool *)field, p->name, err);
    case CF_CONF_INT:
    case CF_CONF_DURATION:
    case CF_CONF_SIZE: {
        int64_t min, max, v;
        numeric_bounds(p, &min, &max);
        int rc;
        if (p->type == CF_CONF_INT)
            rc = cf_parse_i64(value, INT64_MIN, INT64_MAX, &v, p->name, err);
        else if (p->type == CF_CONF_DURATION)
            rc = cf_parse_duration_us(value, &v, p->name, err);
        else
            rc = cf_parse_size(value, &v, p->name, err);
        if (rc < 0)
            return -1;
        if (v < min || v > max) {
            char lo[48], hi[48];
            format_number(p, min, lo, sizeof(lo));
            format_number(p, max, hi, sizeof(hi));
            return cf_error_set(err, CF_E_INVALID, "%s: '%s' is outside [%s, %s]", p->name, value, lo, hi);
        }
        *(int64_t *)field = v;
        return 0;
    }
    case CF_CONF_ENUM: {
        int idx = enum_index(p->enum_values, value);
        if (idx < 0)
            return cf_error_set(err, CF_E_INVALID, "%s: '%s' is not one of %s", p->name, value,
                                p->enum_values ? p->enum_values : "(none)");
        *(int *)field = idx;
        return 0;
    }
    case CF_CONF_KVLIST: {
        cf_kvlist *l = field;
        if (!sub || !*sub)
            return cf_error_set(err, CF_E_INVALID, "%s: needs a key after the prefix ('%sKEY')", p->name, p->name);
        for (const char *k = sub; *k; k++) {
            if (!isalnum((unsigned char)*k) && *k != '.' && *k != '_' && *k != '-')
                return cf_error_set(err, CF_E_INVALID, "%s: key '%s' may only hold letters, digits, '.', '_', '-'",
                                    p->name, sub);
        }
        size_t max = p->max > 0 ? (size_t)p->max : CONF_STRING_MAX_DEFAULT;
        if (strnlen(value, max + 1) > max)
            return cf_error_set(err, CF_E_INVALID, "%s%s: value is longer than %zu bytes", p->name, sub, max);
        if (!cf_kvlist_get(l, sub) && l->count >= CONF_KVLIST_MAX_ITEMS)
            return cf_error_set(err, CF_E_LIMIT, "%s%s: more than %d '%s*' settings", p->name, sub,
                                CONF_KVLIST_MAX_ITEMS, p->name);
        if (cf_kvlist_set(l, sub, value, err) < 0)
            return cf_error_wrap(err, "%s%s", p->name, sub);
        return 0;
    }
    }
    return cf_error_set(err, CF_E_INVALID, "%s: unknown property type", p->name);
}

/* A KVLIST default is "key=value,key=value". */
static int set_kvlist_default(const cf_conf_prop *p, void *target, cf_error *err)
{
    char *copy = strdup(p->def);
    if (!copy)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item) {
            rc = cf_error_set(err, CF_E_INVALID, "%s: default item '%s' is not key=value", p->name, item);
            break;
        }
        *eq = '\0';
        rc = cf_kvlist_set(prop_field(p, target), item, eq + 1, err);
    }
    free(copy);
    return rc;
}

int cf_conf_set(const cf_conf_table *t, void *target, const char *name, const char *value, cf_error *err)
{
    if (!t || !target || !name)
        return cf_error_set(err, CF_E_INVALID, "cf_conf_set: missing argument");
    size_t len = strnlen(name, CONF_NAME_MAX + 1);
    const char *sub = NULL;
    const cf_conf_prop *p = len <= CONF_NAME_MAX ? find_prop(t, name, len, &sub) : NULL;
    if (!p) {
        char hint[CONF_NAME_MAX + 32];
        suggest(t, name, "", hint, sizeof(hint));
        return cf_error_set(err, CF_E_INVALID, "unknown key '%.*s'%s", CONF_NAME_MAX, name, hint);
    }
    return set_prop(p, sub, target, value, err);
}

/* ---- init / free / validate ------------------------------------------ */

/* Catches table mistakes early: they are programming errors, but a clear
 * message beats a silent misparse. */
static int check_table(const cf_conf_table *t, cf_error *err)
{
    if (!t || (!t->props && t->nprops))
        return cf_error_set(err, CF_E_INVALID, "config table: missing");
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        if (!p->name || !*p->name || strlen(p->name) > CONF_NAME_MAX)
            return cf_error_set(err, CF_E_INVALID, "config table: prop %zu has no usable name", i);
        size_t nlen = strlen(p->name);
        if (is_kvlist(p) != (p->name[nlen - 1] == '.'))
            return cf_error_set(err, CF_E_INVALID, "config table: '%s': only key/value lists end in '.'", p->name);
        if (p->type == CF_CONF_ENUM && (!p->enum_values || !*p->enum_values))
            return cf_error_set(err, CF_E_INVALID, "config table: enum '%s' has no values", p->name);
        for (size_t j = 0; j < i; j++) {
            if (name_eq(t->props[j].name, p->name, nlen))
                return cf_error_set(err, CF_E_INVALID, "config table: '%s' is listed twice", p->name);
        }
    }
    return 0;
}

void cf_conf_free(const cf_conf_table *t, void *target)
{
    if (!t || !target)
        return;
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        if (p->type == CF_CONF_STRING) {
            char **slot = prop_field(p, target);
            free(*slot);
            *slot = NULL;
        } else if (p->type == CF_CONF_KVLIST) {
            cf_kvlist_free(prop_field(p, target));
        }
    }
}

int cf_conf_init(const cf_conf_table *t, void *target, cf_error *err)
{
    if (check_table(t, err) < 0)
        return -1;
    if (!target)
        return cf_error_set(err, CF_E_INVALID, "config: no target");
    /* Re-initialising resets: drop values a previous load left behind. */
    cf_conf_free(t, target);
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        void *field = prop_field(p, target);
        switch (p->type) {
        case CF_CONF_STRING: break; /* already NULL */
        case CF_CONF_BOOL: *(bool *)field = false; break;
        case CF_CONF_INT:
        case CF_CONF_DURATION:
        case CF_CONF_SIZE: *(int64_t *)field = 0; break;
        case CF_CONF_ENUM: *(int *)field = 0; break;
        case CF_CONF_KVLIST: break; /* already empty */
        }
        if (!p->def)
            continue;
        int rc = p->type == CF_CONF_KVLIST ? set_kvlist_default(p, target, err) : set_prop(p, NULL, target, p->def, err);
        if (rc < 0) {
            cf_error_wrap(err, "config table: bad default for '%s'", p->name);
            cf_conf_free(t, target);
            return -1;
        }
    }
    return 0;
}

int cf_conf_validate(const cf_conf_table *t, void *target, cf_error *err)
{
    if (!t || !target)
        return cf_error_set(err, CF_E_INVALID, "config: missing table or target");
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        if (!p->validate)
            continue;
        if (err)
            cf_error_clear(err);
        if (p->validate(p, target, err) < 0) {
            if (err && err->code == CF_OK)
                cf_error_set(err, CF_E_INVALID, "%s: invalid value", p->name);
            return -1;
        }
    }
    return 0;
}

/* ---- file ------------------------------------------------------------ */

typedef struct file_ctx {
    const cf_conf_table *t;
    void *target;
    const char *path;
    cf_error *err;
    const char *pos; /* reader position in the file text */
    int lineno;      /* line the reader last handed out */
    int error_line;  /* first line with an error we reported */
    int long_line;   /* first line that exceeded inih's line buffer */
} file_ctx;

/* Reader for ini_parse_stream: one line at a time, counting lines, and
 * refusing lines inih would silently split at INI_MAX_LINE. */
static char *file_reader(char *str, int num, void *stream)
{
    file_ctx *c = stream;
    if (*c->pos == '\0' || c->long_line)
        return NULL;
    const char *nl = strchr(c->pos, '\n');
    size_t len = nl ? (size_t)(nl - c->pos) + 1 : strlen(c->pos);
    c->lineno++;
    if (num < 2 || len > (size_t)num - 1) {
        c->long_line = c->lineno;
        return NULL;
    }
    memcpy(str, c->pos, len);
    str[len] = '\0';
    c->pos += len;
    return str;
}

static int file_handler(void *user, const char *section, const char *name, const char *value)
{
    file_ctx *c = user;
    if (c->error_line)
        return 1; /* keep only the first error */
    char key[CONF_NAME_MAX + 1];
    int n = section && *section ? snprintf(key, sizeof(key), "%s.%s", section, name)
                                : snprintf(key, sizeof(key), "%s", name);
    int rc;
    if (n < 0 || (size_t)n >= sizeof(key)) {
        rc = cf_error_set(c->err, CF_E_INVALID, "key '%.40s...' is too long", key);
    } else {
        /* Accept "value" in quotes, as most INI dialects do. */
        size_t vlen = strlen(value);
        char *unq = NULL;
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
            unq = cf_strndup(value + 1, vlen - 2);
            rc = unq ? 0 : cf_error_set(c->err, CF_E_NOMEM, "out of memory");
        } else {
            rc = 0;
        }
        bool foreign = false;
        for (size_t i = 0; c->t->file_foreign && c->t->file_foreign[i]; i++)
            foreign = foreign || strcmp(c->t->file_foreign[i], key) == 0;
        if (rc == 0 && !foreign)
            rc = cf_conf_set(c->t, c->target, key, unq ? unq : value, c->err);
        free(unq);
    }
    if (rc < 0) {
        c->error_line = c->lineno;
        cf_error_wrap(c->err, "config file %s line %d", c->path, c->lineno);
        return 0;
    }
    return 1;
}

int cf_conf_load_file(const cf_conf_table *t, void *target, const char *path, cf_error *err)
{
    if (!t || !target || !path)
        return cf_error_set(err, CF_E_INVALID, "config file: missing argument");
    FILE *f = fopen(path, "re");
    if (!f)
        return cf_error_set_errno(err, errno == ENOENT ? CF_E_NOT_FOUND : CF_E_SYSTEM, errno,
                                  "config file %s", path);
    struct stat st;
    if (fstat(fileno(f), &st) < 0) {
        int e = errno;
        fclose(f);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "config file %s", path);
    }
    if (!S_ISREG(st.st_mode) || st.st_size > CONF_FILE_MAX) {
        fclose(f);
        return cf_error_set(err, CF_E_INVALID, "config file %s: not a regular file of at most %d bytes", path,
                            CONF_FILE_MAX);
    }
    char *text = malloc((size_t)st.st_size + 1);
    if (!text) {
        fclose(f);
        return cf_error_set(err, CF_E_NOMEM, "config file %s: out of memory", path);
    }
    size_t len = fread(text, 1, (size_t)st.st_size, f);
    bool read_err = ferror(f);
    int e = errno;
    fclose(f);
    if (read_err) {
        free(text);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "config file %s: read failed", path);
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        return cf_error_set(err, CF_E_INVALID, "config file %s: contains NUL bytes", path);
    }

    file_ctx c = {.t = t, .target = target, .path = path, .err = err, .pos = text};
    int rc = ini_parse_stream(file_reader, &c, file_handler, &c);
    free(text);
    if (c.error_line)
        return -1; /* message already set and wrapped by the handler */
    if (c.long_line)
        return cf_error_set(err, CF_E_INVALID, "config file %s line %d: line is longer than %d bytes", path,
                            c.long_line, INI_MAX_LINE - 2);
    if (rc > 0)
        return cf_error_set(err, CF_E_INVALID,
                            "config file %s line %d: syntax error (expected 'key = value' or '[section]')", path, rc);
    if (rc < 0)
        return cf_error_set(err, CF_E_NOMEM, "config file %s: parser failed (%d)", path, rc);
    return 0;
}

/* ---- environment ----------------------------------------------------- */

/* "kafka.brokers" -> "KAFKA_BROKERS" (no prefix). */
static int env_stem(const char *name, char *buf, size_t cap)
{
    size_t i = 0;
    for (; name[i]; i++) {
        if (i + 1 >= cap)
            return -1;
        char ch = name[i];
        buf[i] = (ch == '.' || ch == '-') ? '_' : (char)toupper((unsigned char)ch);
    }
    buf[i] = '\0';
    return 0;
}

static bool in_list(const char *const *list, const char *name, size_t nlen)
{
    for (; list && *list; list++) {
        if (strlen(*list) == nlen && strncmp(*list, name, nlen) == 0)
            return true;
    }
    return false;
}

/* Maps the part of a variable name after the prefix to a prop. */
static const cf_conf_prop *env_find(const cf_conf_table *t, const char *rest, size_t rlen, char *subkey, size_t cap)
{
    char stem[CONF_NAME_MAX + 1];
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        if (is_kvlist(p) || env_stem(p->name, stem, sizeof(stem)) < 0)
            continue;
        if (strlen(stem) == rlen && strncmp(stem, rest, rlen) == 0)
            return p;
    }
    const cf_conf_prop *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        if (!is_kvlist(p) || env_stem(p->name, stem, sizeof(stem)) < 0)
            continue;
        size_t slen = strlen(stem);
        if (slen < rlen && slen > best_len && strncmp(stem, rest, slen) == 0) {
            best = p;
            best_len = slen;
        }
    }
    if (!best)
        return NULL;
    /* KAFKA_SOCKET_TIMEOUT_MS -> "socket.timeout.ms": librdkafka-style keys. */
    size_t n = rlen - best_len;
    if (n >= cap)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = rest[best_len + i];
        subkey[i] = ch == '_' ? '.' : (char)tolower((unsigned char)ch);
    }
    subkey[n] = '\0';
    return best;
}

int cf_conf_load_env(const cf_conf_table *t, void *target, char *const *envp, const char *const *ignore,
                     cf_error *err)
{
    if (!t || !target)
        return cf_error_set(err, CF_E_INVALID, "config: missing table or target");
    /* Without a prefix we cannot tell our variables from anybody else's. */
    if (!envp || !t->env_prefix || !*t->env_prefix)
        return 0;
    size_t plen = strlen(t->env_prefix);
    for (; *envp; envp++) {
        const char *var = *envp;
        if (strncmp(var, t->env_prefix, plen) != 0)
            continue;
        const char *eq = strchr(var, '=');
        if (!eq)
            continue;
        size_t nlen = (size_t)(eq - var);
        const char *rest = var + plen;
        size_t rlen = nlen > plen ? nlen - plen : 0;
        if (nlen < plen || in_list(ignore, var, nlen))
            continue;
        /* <prefix>CONFIG names the config file (cf_conf_load_all). */
        if (rlen == 6 && strncmp(rest, "CONFIG", 6) == 0)
            continue;
        char subkey[CONF_NAME_MAX + 1];
        const cf_conf_prop *p = rlen && rlen <= CONF_NAME_MAX ? env_find(t, rest, rlen, subkey, sizeof(subkey)) : NULL;
        if (!p)
            return cf_error_set(err, CF_E_INVALID,
                                "environment variable %.*s: unknown setting (variables starting with %s must name a "
                                "known key; see --help)",
                                (int)(nlen > CONF_NAME_MAX ? CONF_NAME_MAX : nlen), var, t->env_prefix);
        if (set_prop(p, is_kvlist(p) ? subkey : NULL, target, eq + 1, err) < 0)
            return cf_error_wrap(err, "environment variable %.*s", (int)nlen, var);
    }
    return 0;
}

/* ---- flags ----------------------------------------------------------- */

typedef struct flag_opts {
    bool meta;              /* understand --config, --help, --help-config, -h */
    bool apply;             /* false: only scan (find --config and --help) */
    const char *config;     /* out: --config value */
    int wants_help;         /* out */
} flag_opts;

static int parse_flags_int(const cf_conf_table *t, void *target, int argc, char **argv, int *next, flag_opts *o,
                           cf_error *err)
{
    int i = argc > 0 ? 1 : 0;
    int rc = 0;
    while (i < argc && argv && argv[i]) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* first positional argument ("-" is one too) */
        if (a[1] != '-') {
            if (o->meta && strcmp(a, "-h") == 0) {
                o->wants_help = 1;
                i++;
                continue;
            }
            rc = cf_error_set(err, CF_E_INVALID, "unknown flag %.*s (flags are --name=value; see --help)",
                              CONF_NAME_MAX, a);
            break;
        }
        const char *body = a + 2;
        const char *eq = strchr(body, '=');
        size_t nlen = eq ? (size_t)(eq - body) : strlen(body);
        if (nlen > CONF_NAME_MAX) {
            rc = cf_error_set(err, CF_E_INVALID, "unknown flag --%.40s... (name too long)", body);
            break;
        }
        char name[CONF_NAME_MAX + 1];
        memcpy(name, body, nlen);
        name[nlen] = '\0';

        if (o->meta && strcmp(name, "config") == 0) {
            const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
            if (!v || !*v) {
                rc = cf_error_set(err, CF_E_INVALID, "flag --config needs a file name");
                break;
            }
            o->config = v;
            i += eq ? 1 : 2;
            continue;
        }
        if (o->meta && !eq && (strcmp(name, "help") == 0 || strcmp(name, "help-config") == 0)) {
            o->wants_help = name[4] == '\0' ? 1 : 2;
            i++;
            continue;
        }

        const char *sub = NULL;
        const cf_conf_prop *p = find_prop(t, name, nlen, &sub);
        const char *value = eq ? eq + 1 : NULL;
        if (!p && !eq && nlen > 3 && strncmp(name, "no-", 3) == 0) {
            /* --no-NAME turns a bool off. */
            const cf_conf_prop *np = find_prop(t, name + 3, nlen - 3, &sub);
            if (np && np->type == CF_CONF_BOOL) {
                p = np;
                value = "false";
            }
        }
        if (!p) {
            char hint[CONF_NAME_MAX + 32];
            suggest(t, name, "--", hint, sizeof(hint));
            rc = cf_error_set(err, CF_E_INVALID, "unknown flag --%s%s", name, hint);
            break;
        }
        int used = 1;
        if (!value) {
            if (p->type == CF_CONF_BOOL) {
                value = "true"; /* bare --name */
            } else if (i + 1 < argc && argv[i + 1]) {
                value = argv[i + 1];
                used = 2;
            } else {
                rc = cf_error_set(err, CF_E_INVALID, "flag --%s needs a value", name);
                break;
            }
        }
        if (o->apply && set_prop(p, sub, target, value, err) < 0) {
            rc = cf_error_wrap(err, "flag --%s", name);
            break;
        }
        i += used;
    }
    if (next)
        *next = i;
    return rc;
}

int cf_conf_parse_flags(const cf_conf_table *t, void *target, int argc, char **argv, int *next, cf_error *err)
{
    if (!t || !target)
        return cf_error_set(err, CF_E_INVALID, "config: missing table or target");
    flag_opts o = {.meta = false, .apply = true};
    return parse_flags_int(t, target, argc, argv, next, &o, err);
}

int cf_conf_load_all_ex(const cf_conf_table *t, void *target, int argc, char **argv, char *const *envp,
                        const char *const *env_ignore, int *next, int *wants_help, cf_error *err)
{
    if (wants_help)
        *wants_help = 0;
    if (cf_conf_init(t, target, err) < 0)
        return -1;

    /* First pass only looks for --config and --help: the file must be
     * applied before the environment and flags override it. */
    flag_opts scan = {.meta = true, .apply = false};
    int rc = parse_flags_int(t, target, argc, argv, next, &scan, err);
    if (scan.wants_help) {
        if (wants_help)
            *wants_help = scan.wants_help;
        return 0; /* --help wins over anything else on the line */
    }
    if (rc < 0)
        return -1;

    const char *path = scan.config;
    char varname[CONF_NAME_MAX + 8];
    if (!path && envp && t->env_prefix && *t->env_prefix) {
        int n = snprintf(varname, sizeof(varname), "%sCONFIG=", t->env_prefix);
        size_t vlen = n > 0 ? (size_t)n : 0;
        for (char *const *e = envp; *e && vlen < sizeof(varname); e++) {
            if (strncmp(*e, varname, vlen) == 0 && (*e)[vlen]) {
                path = *e + vlen;
                break;
            }
        }
    }
    if (path && cf_conf_load_file(t, target, path, err) < 0)
        return -1;
    if (cf_conf_load_env(t, target, envp, env_ignore, err) < 0)
        return -1;
    flag_opts apply = {.meta = true, .apply = true};
    return parse_flags_int(t, target, argc, argv, next, &apply, err);
}

int cf_conf_load_all(const cf_conf_table *t, void *target, int argc, char **argv, char *const *envp, int *next,
                     int *wants_help, cf_error *err)
{
    return cf_conf_load_all_ex(t, target, argc, argv, envp, NULL, next, wants_help, err);
}

/* ---- printing -------------------------------------------------------- */

static void default_text(const cf_conf_prop *p, char *buf, size_t cap)
{
    if (!p->def) {
        snprintf(buf, cap, "%s", p->type == CF_CONF_ENUM ? "" : "(unset)");
        if (p->type == CF_CONF_ENUM)
            enum_name(p->enum_values, 0, buf, cap);
        else if (p->type == CF_CONF_BOOL)
            snprintf(buf, cap, "false");
        else if (p->type != CF_CONF_STRING && p->type != CF_CONF_KVLIST)
            format_number(p, 0, buf, cap);
        return;
    }
    snprintf(buf, cap, "%s", p->def);
}

static void range_text(const cf_conf_prop *p, char *buf, size_t cap)
{
    buf[0] = '\0';
    switch (p->type) {
    case CF_CONF_INT:
    case CF_CONF_DURATION:
    case CF_CONF_SIZE:
        if (p->min != 0 || p->max != 0) {
            char lo[48], hi[48];
            format_number(p, p->min, lo, sizeof(lo));
            format_number(p, p->max, hi, sizeof(hi));
            snprintf(buf, cap, "%s .. %s", lo, hi);
        }
        break;
    case CF_CONF_ENUM: snprintf(buf, cap, "%s", p->enum_values); break;
    case CF_CONF_STRING:
        snprintf(buf, cap, "max %lld bytes", (long long)(p->max > 0 ? p->max : CONF_STRING_MAX_DEFAULT));
        break;
    default: break;
    }
}

static const char *value_placeholder(const cf_conf_prop *p)
{
    switch (p->type) {
    case CF_CONF_STRING: return "TEXT";
    case CF_CONF_INT: return "N";
    case CF_CONF_BOOL: return "BOOL";
    case CF_CONF_DURATION: return "DURATION";
    case CF_CONF_SIZE: return "SIZE";
    case CF_CONF_ENUM: return p->enum_values;
    case CF_CONF_KVLIST: return "VALUE";
    }
    return "VALUE";
}

void cf_conf_print_help(const cf_conf_table *t, FILE *out)
{
    if (!t || !out)
        return;
    fprintf(out, "Options (each also settable in the --config file as 'name = value'");
    if (t->env_prefix && *t->env_prefix)
        fprintf(out, " and as %sNAME in the environment", t->env_prefix);
    fprintf(out, "):\n");
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        char def[256], range[256];
        default_text(p, def, sizeof(def));
        range_text(p, range, sizeof(range));
        if (p->type == CF_CONF_BOOL)
            fprintf(out, "  --%s[=BOOL]\n", p->name);
        else if (p->type == CF_CONF_KVLIST)
            fprintf(out, "  --%sKEY=VALUE\n", p->name);
        else
            fprintf(out, "  --%s=%s\n", p->name, value_placeholder(p));
        fprintf(out, "      %s", p->doc ? p->doc : "");
        bool numeric = p->type == CF_CONF_INT || p->type == CF_CONF_DURATION || p->type == CF_CONF_SIZE;
        if (p->type != CF_CONF_KVLIST)
            fprintf(out, " (default: %s%s%s)", def, (numeric && range[0]) ? "; range " : "",
                    (numeric && range[0]) ? range : "");
        fputc('\n', out);
    }
    fprintf(out, "  --config FILE\n      Read settings from an INI file first (also %sCONFIG).\n",
            t->env_prefix ? t->env_prefix : "");
    fprintf(out, "  --help, -h\n      Print this help.\n");
    fprintf(out, "  --help-config\n      Print the configuration reference as Markdown.\n");
}

/* Markdown table cells must not contain '|' or newlines. */
static void md_cell(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', out);
        else
            fputc(*s, out);
    }
}

void cf_conf_print_markdown(const cf_conf_table *t, FILE *out)
{
    if (!t || !out)
        return;
    fprintf(out, "# %s configuration\n\n", t->program ? t->program : "codefleet");
    fprintf(out,
            "Sources, lowest precedence first: defaults, the file given by `--config FILE`");
    if (t->env_prefix && *t->env_prefix)
        fprintf(out, " (or `%sCONFIG`), environment variables `%sNAME`", t->env_prefix, t->env_prefix);
    fprintf(out, ", command-line flags `--name=value`.\n"
                 "Durations take us/ms/s/m/h (bare numbers are seconds); sizes take KiB/MiB/GiB (bare numbers are "
                 "bytes).\n\n");
    cf_conf_print_markdown_table(t, out, true);
}

void cf_conf_print_markdown_table(const cf_conf_table *t, FILE *out, bool with_env)
{
    if (!t || !out)
        return;
    if (!with_env) {
        fprintf(out, "| Key | Type | Default | Range / values | Description |\n");
        fprintf(out, "|---|---|---|---|---|\n");
    } else {
        fprintf(out, "| Name | Type | Default | Range / values | Environment | Description |\n");
        fprintf(out, "|---|---|---|---|---|---|\n");
    }
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        char def[256], range[256], stem[CONF_NAME_MAX + 1];
        default_text(p, def, sizeof(def));
        range_text(p, range, sizeof(range));
        if (env_stem(p->name, stem, sizeof(stem)) < 0)
            stem[0] = '\0';
        fprintf(out, "| `%s%s` | %s | ", p->name, is_kvlist(p) ? "*" : "", type_name(p->type));
        md_cell(out, def);
        fputs(" | ", out);
        md_cell(out, range);
        fputs(" | ", out);
        if (with_env) {
            if (t->env_prefix && *t->env_prefix)
                fprintf(out, "`%s%s%s`", t->env_prefix, stem, is_kvlist(p) ? "*" : "");
            fputs(" | ", out);
        }
        md_cell(out, p->doc);
        fputs(" |\n", out);
    }
}

static bool is_secret(const char *name)
{
    return name && strcasestr(name, "password") != NULL;
}

/* Values may come from hostile sources: escape control bytes in dumps. */
static void print_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
}

void cf_conf_dump(const cf_conf_table *t, const void *target, FILE *out)
{
    if (!t || !target || !out)
        return;
    for (size_t i = 0; i < t->nprops; i++) {
        const cf_conf_prop *p = &t->props[i];
        const void *field = prop_cfield(p, target);
        char buf[64];
        switch (p->type) {
        case CF_CONF_STRING: {
            const char *s = *(char *const *)field;
            if (!s) {
                fprintf(out, "; %s is unset\n", p->name);
            } else {
                fprintf(out, "%s = ", p->name);
                if (is_secret(p->name))
                    fputs("***", out);
                else
                    print_escaped(out, s);
                fputc('\n', out);
            }
            break;
        }
        case CF_CONF_BOOL: fprintf(out, "%s = %s\n", p->name, *(const bool *)field ? "true" : "false"); break;
        case CF_CONF_INT:
        case CF_CONF_DURATION:
        case CF_CONF_SIZE:
            if (is_secret(p->name)) {
                fprintf(out, "%s = ***\n", p->name);
            } else {
                format_number(p, *(const int64_t *)field, buf, sizeof(buf));
                fprintf(out, "%s = %s\n", p->name, buf);
            }
            break;
        case CF_CONF_ENUM:
            enum_name(p->enum_values, *(const int *)field, buf, sizeof(buf));
            fprintf(out, "%s = %s\n", p->name, buf);
            break;
        case CF_CONF_KVLIST: {
            const cf_kvlist *l = field;
            for (size_t k = 0; k < l->count; k++) {
                fprintf(out, "%s", p->name);
                print_escaped(out, l->items[k].key);
                fputs(" = ", out);
                if (is_secret(p->name) || is_secret(l->items[k].key))
                    fputs("***", out);
                else
                    print_escaped(out, l->items[k].value);
                fputc('\n', out);
            }
            break;
        }
        }
    }
}
