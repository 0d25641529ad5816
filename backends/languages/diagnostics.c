/* diagnostics: compiler output -> cf_diagnostic (see diagnostics.h).
 *
 * One line-driven loop serves all four formats: each line is noise, a
 * continuation of the entry being built, the start of a new entry, JSON (gcc,
 * rustc) or unparsed text.  The entry being built ("pending") is pushed when
 * the next one starts, so continuation lines can still be added to it.  What
 * goes into the result passes the "sink", which applies the caps.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_util.h"
#include "diagnostics_int.h"

#define ENTRY_OVERHEAD 32 /* budget for an entry's numbers and keys on the wire */
#define MESSAGE_MIN 16    /* room for a few characters and "..." */
#define DROPPED_NOTE_BYTES (ENTRY_OVERHEAD + 48) /* "note" + "N more notes dropped" */

/* ---- strings: bounded, valid UTF-8, no NUL ------------------------------ */

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Length of the valid UTF-8 sequence at s (len > 0 bytes available), or 0
 * when it is invalid (overlong, surrogate, past U+10FFFF, cut) or a NUL. */
static size_t utf8_seq(const uint8_t *s, size_t len)
{
    uint8_t c = s[0];
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)))
        return 0;
    if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))
        return 0;
    return n;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!is_space(s[i]))
            return false;
    return true;
}

static bool eq(const char *s, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

static bool starts(const char *s, size_t len, const char *lit)
{
    size_t l = strlen(lit);
    return len >= l && memcmp(s, lit, l) == 0;
}

/* s[0..len) trimmed, as valid UTF-8 without NUL (U+FFFD for each bad byte),
 * at most max bytes (max >= 3): a longer text is cut at a character boundary
 * and ends with "...", as does one whose source was cut already (more).
 * NULL only when out of memory. */
static char *clean_str(const char *s, size_t len, size_t max, bool more)
{
    const uint8_t *p = (const uint8_t *)s;
    while (len && is_space((char)p[0])) {
        p++;
        len--;
    }
    while (len && is_space((char)p[len - 1]))
        len--;
    /* At most 3 output bytes per input byte (U+FFFD), plus "...". */
    size_t cap = len < (max - 3) / 3 ? 3 * len + 3 : max;
    char *out = malloc(cap + 1);
    if (!out)
        return NULL;
    size_t o = 0, cut = 0;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(p + i, len - i);
        size_t cl = n ? n : 3;
        if (o + cl > max) {
            more = true;
            break;
        }
        memcpy(out + o, n ? (const char *)p + i : REPLACEMENT, cl);
        o += cl;
        if (o + 3 <= max)
            cut = o;
        i += n ? n : 1;
    }
    if (more) {
        if (o + 3 > max)
            o = cut;
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

/* ---- the sink: *v / *n with the caps ----------------------------------- */

typedef struct sink {
    cf_diagnostic **v;
    size_t *n;
    size_t alloc;   /* capacity of *v as far as we know */
    size_t kept;    /* top-level entries this call added */
    size_t dropped; /* top-level entries this call dropped */
    size_t bytes;   /* budget used by what this call added */
    size_t max_diags, max_msg, max_total;
    const char *strip;
    size_t strip_len;
    cf_buf scratch; /* a JSON line made valid UTF-8 */
    cf_error *err;
} sink;

static int oom(sink *s)
{
    return cf_error_set(s->err, CF_E_NOMEM, "diagnostics: out of memory");
}

static size_t one_size(const cf_diagnostic *d)
{
    size_t z = ENTRY_OVERHEAD;
    z += d->level ? strlen(d->level) : 0;
    z += d->message ? strlen(d->message) : 0;
    z += d->file ? strlen(d->file) : 0;
    z += d->code ? strlen(d->code) : 0;
    return z;
}

/* Children have no children of their own (we never build deeper ones). */
static size_t diag_size(const cf_diagnostic *d)
{
    size_t z = one_size(d);
    for (size_t i = 0; i < d->n_children; i++)
        z += one_size(&d->children[i]);
    return z;
}

static void diag_clear(cf_diagnostic *d)
{
    free(d->level);
    free(d->message);
    free(d->file);
    free(d->code);
    cf_diagnostics_free(d->children, d->n_children);
    memset(d, 0, sizeof(*d));
}

typedef struct loc {
    const char *file; /* raw bytes from the compiler, NULL = none */
    size_t file_len;
    int64_t line, column, end_line, end_column;
} loc;

/* "/work/main.c" -> "main.c" (strip_prefix "/work"), "./main.go" -> "main.go". */
static void strip_file(const sink *s, const char **file, size_t *len)
{
    const char *p = *file;
    size_t l = *len;
    if (s->strip_len && l > s->strip_len && memcmp(p, s->strip, s->strip_len) == 0 && p[s->strip_len] == '/') {
        p += s->strip_len;
        l -= s->strip_len;
        while (l && *p == '/') {
            p++;
            l--;
        }
    }
    while (l >= 2 && p[0] == '.' && p[1] == '/') {
        p += 2;
        l -= 2;
        while (l && *p == '/') {
            p++;
            l--;
        }
    }
    if (l) {
        *file = p;
        *len = l;
    }
}

/* Optional strings: NULL when absent or empty after trimming. */
static int opt_str(const char *s, size_t len, size_t max, char **out)
{
    *out = NULL;
    if (!s || blank(s, len))
        return 0;
    *out = clean_str(s, len, max, false);
    return *out ? 0 : -1;
}

/* Fills d (level is one of our literals); l and code may be NULL.  On -1
 * (out of memory) d is left empty. */
static int diag_set(sink *s, cf_diagnostic *d, const char *level, const char *msg, size_t msg_len, bool more,
                    const loc *l, const char *code, size_t code_len)
{
    memset(d, 0, sizeof(*d));
    d->level = cf_strdup(level);
    d->message = clean_str(msg ? msg : "", msg ? msg_len : 0, s->max_msg, more);
    int rc = d->level && d->message ? 0 : -1;
    if (rc == 0 && l && l->file) {
        const char *f = l->file;
        size_t fl = l->file_len;
        strip_file(s, &f, &fl);
        rc = opt_str(f, fl, CF_DIAG_FILE_MAX, &d->file);
    }
    if (rc == 0)
        rc = opt_str(code, code_len, CF_DIAG_CODE_MAX, &d->code);
    if (rc < 0) {
        diag_clear(d);
        return oom(s);
    }
    if (l) {
        d->line = l->line > 0 ? l->line : 0;
        d->column = l->column > 0 ? l->column : 0;
        d->end_line = l->end_line > 0 ? l->end_line : 0;
        d->end_column = l->end_column > 0 ? l->end_column : 0;
    }
    return 0;
}

/* Appends d's contents to *v without any cap; d is left empty. */
static int sink_append(sink *s, cf_diagnostic *d)
{
    if (*s->n >= s->alloc) {
        size_t na = s->alloc < 8 ? 16 : s->alloc * 2;
        if (na > SIZE_MAX / sizeof(cf_diagnostic)) {
            diag_clear(d);
            return oom(s);
        }
        cf_diagnostic *nv = realloc(*s->v, na * sizeof(cf_diagnostic));
        if (!nv) {
            diag_clear(d);
            return oom(s);
        }
        *s->v = nv;
        s->alloc = na;
    }
    (*s->v)[(*s->n)++] = *d;
    memset(d, 0, sizeof(*d));
    return 0;
}

/* Takes d's contents: appends them, or drops them when a cap is reached. */
static int sink_push(sink *s, cf_diagnostic *d)
{
    size_t z = diag_size(d);
    if (s->kept >= s->max_diags || z > s->max_total - s->bytes) {
        diag_clear(d);
        s->dropped++;
        return 0;
    }
    if (sink_append(s, d) < 0)
        return -1;
    s->kept++;
    s->bytes += z;
    return 0;
}

/* True when the next top-level entry would be dropped anyway: spares the
 * work of building it. */
static bool sink_full(sink *s)
{
    if (s->kept < s->max_diags)
        return false;
    s->dropped++;
    return true;
}

static int note_dropped(sink *s, cf_diagnostic *d, size_t count, const char *one, const char *many)
{
    char msg[96];
    int ml = snprintf(msg, sizeof(msg), "%zu more %s dropped", count, count == 1 ? one : many);
    return diag_set(s, d, "note", msg, ml > 0 ? (size_t)ml : 0, false, NULL, NULL, 0);
}

/* ---- children ------------------------------------------------------------ */

typedef struct kids {
    cf_diagnostic v[CF_DIAG_CHILDREN_MAX + 1]; /* + the "dropped" note */
    size_t n;
    size_t dropped;
    size_t bytes; /* the parent's and the children's */
} kids;

static void kids_init(kids *k, const cf_diagnostic *parent)
{
    k->n = 0;
    k->dropped = 0;
    k->bytes = one_size(parent);
}

static void kids_clear(kids *k)
{
    for (size_t i = 0; i < k->n; i++)
        diag_clear(&k->v[i]);
    k->n = 0;
}

static void kids_add(sink *s, kids *k, cf_diagnostic *d)
{
    size_t z = one_size(d);
    /* Room is kept for the "N more notes dropped" note, so that a parent
     * whose children fit is never dropped because of that note. */
    if (k->n >= CF_DIAG_CHILDREN_MAX || s->bytes + k->bytes + z + DROPPED_NOTE_BYTES > s->max_total) {
        diag_clear(d);
        k->dropped++;
        return;
    }
    k->v[k->n++] = *d;
    memset(d, 0, sizeof(*d));
    k->bytes += z;
}

/* Moves the children into parent (which has none yet). */
static int kids_finish(sink *s, kids *k, cf_diagnostic *parent)
{
    if (k->dropped && note_dropped(s, &k->v[k->n], k->dropped, "note", "notes") < 0) {
        kids_clear(k);
        return -1;
    }
    if (k->dropped)
        k->n++;
    if (!k->n)
        return 0;
    parent->children = malloc(k->n * sizeof(cf_diagnostic));
    if (!parent->children) {
        kids_clear(k);
        return oom(s);
    }
    memcpy(parent->children, k->v, k->n * sizeof(cf_diagnostic));
    parent->n_children = k->n;
    k->n = 0;
    return 0;
}

/* ---- JSON helpers ----------------------------------------------------------- */

static bool jstr(const json_t *o, const char *key, const char **p, size_t *len)
{
    json_t *x = json_object_get(o, key); /* NULL for a non-object o */
    if (!json_is_string(x))
        return false;
    *p = json_string_value(x);
    *len = json_string_length(x);
    return true;
}

/* A position: a non-negative integer, anything else is unknown (0). */
static int64_t jpos(const json_t *o, const char *key)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x))
        return 0;
    json_int_t i = json_integer_value(x);
    return i > 0 ? (int64_t)i : 0;
}

static bool contains(const char *s, size_t len, const char *lit)
{
    return memmem(s, len, lit, strlen(lit)) != NULL;
}

/* Compiler levels -> ours: gcc's "fatal error", "sorry, unimplemented",
 * rustc's "error: internal compiler error" and "failure-note" included. */
static const char *map_level(const char *k, size_t len)
{
    if (eq(k, len, "help"))
        return "help";
    if (eq(k, len, "note") || eq(k, len, "failure-note"))
        return "note";
    if (contains(k, len, "error") || contains(k, len, "sorry"))
        return "error";
    if (contains(k, len, "warning") || contains(k, len, "pedwarn") || contains(k, len, "anachronism"))
        return "warning";
    return "note";
}

typedef int (*conv_fn)(sink *s, json_t *o, cf_diagnostic *d); /* 0, 1 = not a diagnostic, -1 */

/* Adds the entries of children (and of their children, flattened, at most
 * CF_DIAG_NEST_MAX levels) to k: an explicit stack, never recursion. */
static int kids_collect(sink *s, kids *k, json_t *children, conv_fn conv)
{
    struct {
        json_t *arr;
        size_t i;
    } st[CF_DIAG_NEST_MAX];
    if (!json_array_size(children)) /* 0 for a non-array too */
        return 0;
    size_t depth = 1;
    st[0].arr = children;
    st[0].i = 0;
    while (depth) {
        if (st[depth - 1].i >= json_array_size(st[depth - 1].arr)) {
            depth--;
            continue;
        }
        json_t *o = json_array_get(st[depth - 1].arr, st[depth - 1].i++);
        if (k->n >= CF_DIAG_CHILDREN_MAX) {
            k->dropped++; /* full: count it without building it */
        } else {
            cf_diagnostic d;
            int r = conv(s, o, &d);
            if (r < 0)
                return -1;
            if (r == 0)
                kids_add(s, k, &d);
        }
        json_t *sub = json_object_get(o, "children");
        size_t nsub = json_array_size(sub);
        if (!nsub)
            continue;
        if (depth < CF_DIAG_NEST_MAX) {
            st[depth].arr = sub;
            st[depth].i = 0;
            depth++;
        } else {
            k->dropped += nsub;
        }
    }
    return 0;
}

/* One line of JSON: made valid UTF-8 without NUL first (a message may quote
 * the user's bytes; jansson refuses invalid UTF-8).  *out is NULL when the
 * line is not JSON.  -1 only when out of memory. */
static int json_line(sink *s, const char *line, size_t len, json_t **out)
{
    *out = NULL;
    cf_buf *b = &s->scratch;
    b->len = 0;
    const uint8_t *p = (const uint8_t *)line;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(p + i, len - i);
        if (cf_buf_append(b, n ? (const void *)(p + i) : REPLACEMENT, n ? n : 3, s->err) < 0)
            return oom(s);
        i += n ? n : 1;
    }
    json_error_t jerr;
    *out = json_loadb((const char *)b->data, b->len, JSON_ALLOW_NUL, &jerr);
    if (!*out && json_error_code(&jerr) == json_error_out_of_memory)
        return oom(s);
    return 0;
}

/* An element nobody understands: kept as an error with its JSON text. */
static int push_json_text(sink *s, json_t *o)
{
    char *txt = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt)
        return oom(s);
    cf_diagnostic d;
    int rc = diag_set(s, &d, "error", txt, strlen(txt), false, NULL, NULL, 0);
    free(txt);
    return rc < 0 ? -1 : sink_push(s, &d);
}

/* ---- gcc -fdiagnostics-format=json ------------------------------------- */

/* {"kind", "message", "option", "locations": [{"caret": {"file", "line",
 * "column"}, "finish": {...}}], "children": [...]}.  gcc leaves "finish"
 * out when it equals the caret, so then the caret is the end too. */
static int gcc_conv(sink *s, json_t *o, cf_diagnostic *d)
{
    const char *msg, *kind = "error", *code = NULL;
    size_t msg_len, kind_len = 5, code_len = 0;
    if (!jstr(o, "message", &msg, &msg_len))
        return 1;
    jstr(o, "kind", &kind, &kind_len);
    jstr(o, "option", &code, &code_len);
    json_t *first = json_array_get(json_object_get(o, "locations"), 0);
    json_t *caret = json_object_get(first, "caret");
    json_t *finish = json_object_get(first, "finish");
    json_t *end = json_is_object(finish) ? finish : caret;
    loc l = {.line = jpos(caret, "line"), .column = jpos(caret, "column"),
             .end_line = jpos(end, "line"), .end_column = jpos(end, "column")};
    jstr(caret, "file", &l.file, &l.file_len);
    return diag_set(s, d, map_level(kind, kind_len), msg, msg_len, false, &l, code, code_len);
}

/* An array, or an object that is a diagnostic. */
static bool gcc_mine(const json_t *j)
{
    const char *m;
    size_t ml;
    return json_is_array(j) || jstr(j, "message", &m, &ml);
}

static bool gcc_is_note(const json_t *o)
{
    const char *k, *m;
    size_t kl, ml;
    return jstr(o, "kind", &k, &kl) && eq(k, kl, "note") && jstr(o, "message", &m, &ml);
}

/* One top-level entry, with the top-level notes arr[from..to) that follow it. */
static int gcc_entry(sink *s, json_t *o, json_t *arr, size_t from, size_t to)
{
    cf_diagnostic d;
    int r = gcc_conv(s, o, &d);
    if (r < 0)
        return -1;
    if (r > 0)
        return push_json_text(s, o);
    kids k;
    kids_init(&k, &d);
    if (kids_collect(s, &k, json_object_get(o, "children"), gcc_conv) < 0)
        goto fail;
    for (size_t i = from; i < to; i++) {
        json_t *note = json_array_get(arr, i);
        json_t *one = json_array(); /* the note and its children, through the same walk */
        if (!one || json_array_append(one, note) < 0) {
            json_decref(one);
            oom(s);
            goto fail;
        }
        r = kids_collect(s, &k, one, gcc_conv);
        json_decref(one);
        if (r < 0)
            goto fail;
    }
    if (kids_finish(s, &k, &d) < 0) {
        diag_clear(&d);
        return -1;
    }
    return sink_push(s, &d);
fail:
    kids_clear(&k);
    diag_clear(&d);
    return -1;
}

/* gcc 12 writes one array per translation unit; a lone object is taken as a
 * one-element array.  Top-level notes attach to the entry before them. */
static int gcc_json(sink *s, json_t *j)
{
    if (!json_is_array(j)) {
        if (sink_full(s))
            return 0;
        return gcc_entry(s, j, NULL, 0, 0);
    }
    size_t n = json_array_size(j);
    for (size_t i = 0; i < n;) {
        json_t *o = json_array_get(j, i++);
        size_t to = i;
        if (json_is_object(o) && !gcc_is_note(o))
            while (to < n && gcc_is_note(json_array_get(j, to)))
                to++;
        size_t from = i;
        i = to;
        if (sink_full(s))
            continue;
        if (gcc_entry(s, o, j, from, to) < 0)
            return -1;
    }
    return 0;
}

/* ---- rustc --error-format=json ------------------------------------------------ */

/* The primary span (the first one marked), else the first one. */
static json_t *rustc_span(json_t *o)
{
    json_t *spans = json_object_get(o, "spans");
    size_t n = json_array_size(spans);
    for (size_t i = 0; i < n; i++) {
        json_t *sp = json_array_get(spans, i);
        if (json_is_true(json_object_get(sp, "is_primary")))
            return sp;
    }
    return json_array_get(spans, 0);
}

static loc span_loc(json_t *sp)
{
    loc l = {.line = jpos(sp, "line_start"), .column = jpos(sp, "column_start"),
             .end_line = jpos(sp, "line_end"), .end_column = jpos(sp, "column_end")};
    jstr(sp, "file_name", &l.file, &l.file_len);
    return l;
}

/* A child's one suggestion, as the human output shows it:
 * "help: if this is intentional, prefix it with an underscore: `_x`".
 * Only when exactly one span suggests something that fits on one line and
 * the message does not quote it already. */
static bool rustc_suggestion(json_t *o, const char **r, size_t *rl)
{
    json_t *spans = json_object_get(o, "spans");
    size_t n = json_array_size(spans), found = 0;
    for (size_t i = 0; i < n; i++)
        if (jstr(json_array_get(spans, i), "suggested_replacement", r, rl))
            found++;
    return found == 1 && !blank(*r, *rl) && !memchr(*r, '\n', *rl);
}

/* "add `;` here" already shows its suggestion. */
static bool quotes(const char *msg, size_t len, const char *r, size_t rl)
{
    for (const char *p = msg; (p = memchr(p, '`', (size_t)(msg + len - p))) != NULL; p++)
        if ((size_t)(msg + len - p) >= rl + 2 && memcmp(p + 1, r, rl) == 0 && p[rl + 1] == '`')
            return true;
    return false;
}

static int append_bounded(sink *s, cf_buf *b, bool *more, const char *p, size_t len)
{
    size_t room = s->max_msg + 1 > b->len ? s->max_msg + 1 - b->len : 0;
    if (len > room) {
        len = room;
        *more = true;
    }
    if (len && cf_buf_append(b, p, len, s->err) < 0)
        return oom(s);
    return 0;
}

static int rustc_conv_any(sink *s, json_t *o, cf_diagnostic *d, bool child)
{
    const char *msg, *level = "error", *code = NULL, *repl = NULL;
    size_t msg_len, level_len = 5, code_len = 0, repl_len = 0;
    if (!jstr(o, "message", &msg, &msg_len))
        return 1;
    jstr(o, "level", &level, &level_len);
    jstr(json_object_get(o, "code"), "code", &code, &code_len);
    loc l = span_loc(rustc_span(o));
    if (!child || !rustc_suggestion(o, &repl, &repl_len) || quotes(msg, msg_len, repl, repl_len))
        return diag_set(s, d, map_level(level, level_len), msg, msg_len, false, &l, code, code_len);
    cf_buf b;
    cf_buf_init(&b, 0);
    bool more = false;
    int rc = append_bounded(s, &b, &more, msg, msg_len);
    if (rc == 0)
        rc = append_bounded(s, &b, &more, ": `", 3);
    if (rc == 0)
        rc = append_bounded(s, &b, &more, repl, repl_len);
    if (rc == 0)
        rc = append_bounded(s, &b, &more, "`", 1);
    if (rc == 0)
        rc = diag_set(s, d, map_level(level, level_len), (const char *)b.data, b.len, more, &l, code, code_len);
    cf_buf_free(&b);
    return rc;
}

static int rustc_conv_child(sink *s, json_t *o, cf_diagnostic *d)
{
    return rustc_conv_any(s, o, d, true);
}

/* rustc's closing summaries: no spans, no code, no children, and one of
 * these exact shapes.  Anything else without spans ("couldn't read
 * `main.rs`") is a real diagnostic and stays. */
static bool rustc_summary(json_t *o)
{
    const char *level, *msg;
    size_t ll, ml;
    json_t *code = json_object_get(o, "code");
    if (json_array_size(json_object_get(o, "spans")) || json_array_size(json_object_get(o, "children")) ||
        (code && !json_is_null(code)) || !jstr(o, "level", &level, &ll) || !jstr(o, "message", &msg, &ml))
        return false;
    if (eq(level, ll, "error"))
        return starts(msg, ml, "aborting due to "); /* "; N warnings emitted" may follow */
    if (eq(level, ll, "failure-note"))
        return starts(msg, ml, "Some errors have detailed explanations: ") ||
               starts(msg, ml, "For more information about this error, try `rustc --explain ") ||
               starts(msg, ml, "For more information about an error, try `rustc --explain ");
    if (eq(level, ll, "warning")) { /* "1 warning emitted", "3 warnings emitted" */
        size_t i = 0;
        while (i < ml && msg[i] >= '0' && msg[i] <= '9')
            i++;
        return i > 0 && (eq(msg + i, ml - i, " warning emitted") || eq(msg + i, ml - i, " warnings emitted"));
    }
    return false;
}

/* Labelled spans ("expected due to this", "value moved here") become notes
 * at their place, before rustc's own children. */
static int rustc_labels(sink *s, kids *k, json_t *o)
{
    json_t *spans = json_object_get(o, "spans");
    size_t n = json_array_size(spans);
    for (size_t i = 0; i < n; i++) {
        json_t *sp = json_array_get(spans, i);
        const char *label;
        size_t label_len;
        if (!jstr(sp, "label", &label, &label_len) || blank(label, label_len))
            continue;
        if (k->n >= CF_DIAG_CHILDREN_MAX) {
            k->dropped++;
            continue;
        }
        loc l = span_loc(sp);
        cf_diagnostic d;
        if (diag_set(s, &d, "note", label, label_len, false, &l, NULL, 0) < 0)
            return -1;
        kids_add(s, k, &d);
    }
    return 0;
}

/* NULL (not JSON) is nobody's. */
static bool rustc_mine(const json_t *j)
{
    const char *m;
    size_t ml;
    return json_is_object(j) && (jstr(j, "$message_type", &m, &ml) || jstr(j, "message", &m, &ml));
}

static int rustc_json(sink *s, json_t *j)
{
    const char *mt;
    size_t mtl;
    if (jstr(j, "$message_type", &mt, &mtl) && !eq(mt, mtl, "diagnostic"))
        return 0; /* artifact, future_incompat, ... */
    if (rustc_summary(j))
        return 0;
    if (sink_full(s))
        return 0;
    cf_diagnostic d;
    int r = rustc_conv_any(s, j, &d, false);
    if (r < 0)
        return -1;
    if (r > 0)
        return push_json_text(s, j);
    kids k;
    kids_init(&k, &d);
    if (rustc_labels(s, &k, j) < 0 || kids_collect(s, &k, json_object_get(j, "children"), rustc_conv_child) < 0 ||
        kids_finish(s, &k, &d) < 0) {
        kids_clear(&k);
        diag_clear(&d);
        return -1;
    }
    return sink_push(s, &d);
}

/* ---- text formats (go, tsc) ------------------------------------------------ */

typedef struct lineinfo {
    const char *level;
    loc l;
    const char *code;
    size_t code_len;
    const char *msg;
    size_t msg_len;
} lineinfo;

/* Digits at p[*i..len): at least one; a value of more than 18 digits is
 * unknown (0). */
static bool digits(const char *p, size_t len, size_t *i, int64_t *out)
{
    size_t st = *i;
    int64_t v = 0;
    while (*i < len && p[*i] >= '0' && p[*i] <= '9') {
        if (*i - st < 18)
            v = v * 10 + (p[*i] - '0');
        (*i)++;
    }
    if (*i == st)
        return false;
    *out = *i - st > 18 ? 0 : v;
    return true;
}

/* "file:line:col: msg" or "file:line: msg"; the first ':' that starts such a
 * tail ends the file name. */
static bool go_loc(const char *p, size_t len, lineinfo *li)
{
    for (size_t c = 1; c < len; c++) {
        if (p[c] != ':')
            continue;
        size_t i = c + 1, j;
        int64_t line, col = 0;
        if (!digits(p, len, &i, &line) || i >= len || p[i] != ':')
            continue;
        j = ++i;
        if (digits(p, len, &j, &col) && j < len && p[j] == ':')
            i = j + 1;
        else
            col = 0;
        if (i >= len || p[i] != ' ')
            continue;
        li->l = (loc){.file = p, .file_len = c, .line = line, .column = col};
        li->msg = p + i + 1;
        li->msg_len = len - i - 1;
        return true;
    }
    return false;
}

/* "<category> TS<n>: msg" at p[i..len). */
static bool tsc_tail(const char *p, size_t len, size_t i, lineinfo *li)
{
    static const struct {
        const char *name, *level;
    } cats[] = {{"error", "error"}, {"warning", "warning"}, {"message", "note"}, {"suggestion", "help"}};
    for (size_t c = 0; c < sizeof(cats) / sizeof(cats[0]); c++) {
        size_t nl = strlen(cats[c].name);
        if (!starts(p + i, len - i, cats[c].name) || !starts(p + i + nl, len - i - nl, " TS"))
            continue;
        size_t k = i + nl + 1, d = k + 2;
        int64_t num;
        if (!digits(p, len, &d, &num) || !starts(p + d, len - d, ": "))
            return false;
        li->level = cats[c].level;
        li->code = p + k;
        li->code_len = d - k;
        li->msg = p + d + 2;
        li->msg_len = len - d - 2;
        return true;
    }
    return false;
}

/* "file(line,col): error TS2322: msg" or "error TS5023: msg". */
static bool tsc_line(const char *p, size_t len, lineinfo *li)
{
    if (tsc_tail(p, len, 0, li))
        return true;
    for (size_t c = 1; c < len; c++) {
        if (p[c] != '(')
            continue;
        size_t i = c + 1;
        int64_t line, col;
        if (!digits(p, len, &i, &line) || i >= len || p[i] != ',')
            continue;
        i++;
        if (!digits(p, len, &i, &col) || !starts(p + i, len - i, "): "))
            continue;
        if (!tsc_tail(p, len, i + 3, li))
            continue;
        li->l = (loc){.file = p, .file_len = c, .line = line, .column = col};
        return true;
    }
    return false;
}

/* ---- the line loop ------------------------------------------------------------------ */

typedef enum line_kind { L_NOISE, L_CONT, L_DIAG, L_TEXT } line_kind;

/* The entry being built: a parsed diagnostic or a run of unparsed lines. */
typedef struct pending {
    bool open;
    bool text;   /* a run of unparsed lines */
    lineinfo li; /* li.msg unused: the message is in msg */
    cf_buf msg;
    bool more;
} pending;

static int pend_flush(sink *s, pending *p)
{
    if (!p->open)
        return 0;
    p->open = false;
    cf_diagnostic d;
    int rc = diag_set(s, &d, p->li.level, (const char *)p->msg.data, p->msg.len, p->more, &p->li.l, p->li.code,
                      p->li.code_len);
    p->msg.len = 0;
    p->more = false;
    return rc < 0 ? -1 : sink_push(s, &d);
}

static int pend_add(sink *s, pending *p, const char *text, size_t len)
{
    if (p->msg.len && append_bounded(s, &p->msg, &p->more, "\n", 1) < 0)
        return -1;
    return append_bounded(s, &p->msg, &p->more, text, len);
}

static int pend_start(sink *s, pending *p, const lineinfo *li)
{
    if (pend_flush(s, p) < 0)
        return -1;
    p->open = true;
    p->text = false;
    p->li = *li;
    return pend_add(s, p, li->msg, li->msg_len);
}

static int pend_text(sink *s, pending *p, const char *line, size_t len)
{
    if (p->open && p->text)
        return pend_add(s, p, line, len); /* the run goes on */
    if (pend_flush(s, p) < 0)
        return -1;
    p->open = true;
    p->text = true;
    p->li = (lineinfo){.level = "error"};
    return pend_add(s, p, line, len);
}

static line_kind go_classify(const char *line, size_t len, lineinfo *li)
{
    if (line[0] == '\t')
        return L_CONT;
    if (starts(line, len, "# ") && len > 2 && !memchr(line + 2, ' ', len - 2))
        return L_NOISE; /* "# command-line-arguments", "# example.com/m/sub" */
    if (go_loc(line, len, li)) {
        /* After 10 errors: "./main.go:13:8: too many errors". */
        li->level = eq(li->msg, li->msg_len, "too many errors") ? "note" : "error";
        return L_DIAG;
    }
    if (starts(line, len, "note: ")) { /* "note: module requires Go 1.22" */
        li->level = "note";
        li->msg = line + 6;
        li->msg_len = len - 6;
        return L_DIAG;
    }
    return L_TEXT;
}

static line_kind tsc_classify(const char *line, size_t len, lineinfo *li)
{
    if (starts(line, len, "  "))
        return L_CONT;
    return tsc_line(line, len, li) ? L_DIAG : L_TEXT;
}

static int do_line(sink *s, cf_diag_format fmt, pending *p, const char *line, size_t len)
{
    if (blank(line, len))
        return 0;
    lineinfo li = {0};
    line_kind kind = L_TEXT;
    switch (fmt) {
    case CF_DIAG_GCC_JSON:
    case CF_DIAG_RUSTC_JSON: {
        size_t k = 0;
        while (k < len && is_space(line[k]))
            k++;
        if (k < len && (line[k] == '{' || (fmt == CF_DIAG_GCC_JSON && line[k] == '['))) {
            json_t *j;
            if (json_line(s, line, len, &j) < 0)
                return -1;
            bool mine = fmt == CF_DIAG_GCC_JSON ? gcc_mine(j) : rustc_mine(j);
            if (mine) {
                int rc = pend_flush(s, p);
                if (rc == 0)
                    rc = fmt == CF_DIAG_GCC_JSON ? gcc_json(s, j) : rustc_json(s, j);
                json_decref(j);
                return rc;
            }
            json_decref(j);
        }
        if (fmt == CF_DIAG_GCC_JSON && eq(line, len, "compilation terminated."))
            return 0; /* follows a "fatal error" */
        break;
    }
    case CF_DIAG_GO_TEXT:
        kind = go_classify(line, len, &li);
        break;
    case CF_DIAG_TSC_TEXT:
        kind = tsc_classify(line, len, &li);
        break;
    }
    switch (kind) {
    case L_NOISE: return 0;
    case L_CONT: return p->open ? pend_add(s, p, line, len) : pend_text(s, p, line, len);
    case L_DIAG: return pend_start(s, p, &li);
    case L_TEXT: break;
    }
    return pend_text(s, p, line, len);
}

int cf_diag_parse(cf_diag_format fmt, const char *text, size_t len, const cf_diag_opts *opts, cf_diagnostic **v,
                  size_t *n, cf_error *err)
{
    if (!v || !n)
        return cf_error_set(err, CF_E_INVALID, "cf_diag_parse: v and n are required");
    static const cf_diag_opts defaults = {0};
    if (!opts)
        opts = &defaults;
    sink s = {
        .v = v,
        .n = n,
        .alloc = *n,
        .max_diags = opts->max_diagnostics ? opts->max_diagnostics : CF_DIAG_MAX_DEFAULT,
        .max_msg = opts->max_message_bytes ? opts->max_message_bytes : CF_DIAG_MESSAGE_MAX_DEFAULT,
        .max_total = opts->max_total_bytes ? opts->max_total_bytes : CF_DIAG_TOTAL_MAX_DEFAULT,
        .strip = opts->strip_prefix,
        .err = err,
    };
    if (s.max_msg < MESSAGE_MIN)
        s.max_msg = MESSAGE_MIN;
    if (s.strip) {
        s.strip_len = strlen(s.strip);
        while (s.strip_len && s.strip[s.strip_len - 1] == '/')
            s.strip_len--; /* "/work/" is "/work"; "/" strips nothing */
    }
    cf_buf_init(&s.scratch, 0);
    pending p = {0};
    cf_buf_init(&p.msg, 0);
    if (!text)
        len = 0;

    int rc = 0;
    for (size_t pos = 0; pos < len && rc == 0;) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + (nl ? 1 : 0);
        if (ll && line[ll - 1] == '\r')
            ll--;
        rc = do_line(&s, fmt, &p, line, ll);
    }
    if (rc == 0)
        rc = pend_flush(&s, &p);
    if (rc == 0 && s.dropped) {
        cf_diagnostic d;
        rc = note_dropped(&s, &d, s.dropped, "diagnostic", "diagnostics");
        if (rc == 0)
            rc = sink_append(&s, &d);
    }
    cf_buf_free(&p.msg);
    cf_buf_free(&s.scratch);
    return rc;
}

size_t cf_diag_count_errors(const cf_diagnostic *v, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; v && i < n; i++)
        if (v[i].level && strcmp(v[i].level, "error") == 0)
            c++;
    return c;
}
