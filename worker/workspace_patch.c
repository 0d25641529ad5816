/* workspace_patch.c: V4A patches (workspace_patch_int.h). */
#include "workspace_patch_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct line {
    const char *s;
    size_t len;
} line;

typedef struct lines {
    line *v;
    size_t n, cap;
} lines;

typedef struct hunk {
    line anchor; /* "@@ <text>": found first (len 0: none) */
    bool has_anchor, eof;
    size_t at;   /* its "@@" (or first) line in the patch, 1-based */
    lines old;   /* its context and removed lines, in order: what is looked for */
    lines body;  /* every line, with its kind in kinds: ' ', '-' or '+' */
    char *kinds;
} hunk;

/* Bounds on a patch, which is a tenant's: its work is linear in its size
 * and the files', except the search for a hunk's place, which is held to a
 * budget of bytes compared. */
#define PATCH_MAX_LINES 1000000
#define PATCH_MAX_FILES 1000
#define PATCH_MAX_HUNKS 10000
#define PATCH_SEARCH_BUDGET (64LL * 1024 * 1024)

typedef struct patch_state {
    cf_file **files;
    size_t *n;
    char *why;
    size_t wsz;
    int64_t budget; /* bytes the hunks' searches may still compare */
    size_t sections, hunks;
    /* The paths the patch touched so far: each at most once. */
    char **touched;
    size_t ntouched;
} patch_state;

static int refuse(patch_state *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(patch_state *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, p->wsz, fmt, ap);
    va_end(ap);
    return -1;
}

static int push(lines *l, const char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        line *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (line){s, len};
    return 0;
}

/* Lines without their '\n' (and a '\r' before it, in the patch);
 * *trailing: the text ended with a newline. */
static int split(const char *d, size_t len, bool strip_cr, lines *out, bool *trailing)
{
    size_t start = 0;
    *trailing = len > 0 && d[len - 1] == '\n';
    for (size_t i = 0; i <= len; i++) {
        if (i < len && d[i] != '\n')
            continue;
        if (i == len && start == len)
            break; /* nothing after the last newline */
        size_t l = i - start;
        if (strip_cr && l && d[start + l - 1] == '\r')
            l--;
        if (push(out, d + start, l) < 0)
            return -1;
        start = i + 1;
    }
    return 0;
}

static bool is(const line *l, const char *s)
{
    return l->len == strlen(s) && memcmp(l->s, s, l->len) == 0;
}

static bool starts(const line *l, const char *prefix, line *rest)
{
    size_t pl = strlen(prefix);
    if (l->len < pl || memcmp(l->s, prefix, pl) != 0)
        return false;
    if (rest)
        *rest = (line){l->s + pl, l->len - pl};
    return true;
}

static bool space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* The line with trailing (how 1) or surrounding (how 2) whitespace cut. */
static line trimmed(line l, int how)
{
    while (how >= 1 && l.len && space(l.s[l.len - 1]))
        l.len--;
    while (how >= 2 && l.len && space(l.s[0])) {
        l.s++;
        l.len--;
    }
    return l;
}

static bool same(line a, line b, int how, int64_t *budget)
{
    *budget -= (int64_t)(a.len < b.len ? a.len : b.len) + 1;
    a = trimmed(a, how);
    b = trimmed(b, how);
    return a.len == b.len && memcmp(a.s, b.s, a.len) == 0;
}

/* A file section's header, which ends the section before it. */
/* "*** End Patch", trailing whitespace aside (as "*** Begin Patch"). */
static bool end_patch(const line *l)
{
    line t = trimmed(*l, 1);
    return is(&t, "*** End Patch");
}

static bool header(const line *l)
{
    return starts(l, "*** Add File: ", NULL) || starts(l, "*** Delete File: ", NULL) ||
           starts(l, "*** Update File: ", NULL) || end_patch(l);
}

static long find_file(patch_state *p, const char *path)
{
    for (size_t i = 0; i < *p->n; i++)
        if (strcmp((*p->files)[i].path, path) == 0)
            return (long)i;
    return -1;
}

static void remove_file(patch_state *p, size_t i)
{
    cf_file *f = *p->files;
    free(f[i].path);
    free(f[i].content.data);
    memmove(&f[i], &f[i + 1], (*p->n - i - 1) * sizeof(*f));
    (*p->n)--;
}

static int add_file(patch_state *p, const char *path, char *data, size_t len)
{
    cf_file *f = realloc(*p->files, (*p->n + 1) * sizeof(*f));
    if (!f)
        return -1;
    *p->files = f;
    char *dup = strdup(path);
    if (!dup)
        return -1;
    f[*p->n] = (cf_file){.path = dup, .content = {.data = (uint8_t *)data, .len = len}};
    (*p->n)++;
    return 0;
}

/* Checks a path the patch names (the caller's rule, and once per patch)
 * and returns a NUL-terminated copy in buf. */
static int take_path(patch_state *p, line raw, size_t at, ws_patch_path_ok ok, void *arg, char *buf, size_t bsz)
{
    line l = trimmed(raw, 2);
    if (l.len == 0 || l.len >= bsz)
        return refuse(p, "patch line %zu: %s path", at, l.len ? "too long a" : "an empty");
    memcpy(buf, l.s, l.len);
    buf[l.len] = '\0';
    if (memchr(buf, '\0', l.len))
        return refuse(p, "patch line %zu: a path with a NUL byte", at);
    if (++p->sections > PATCH_MAX_FILES)
        return refuse(p, "patch line %zu: more than %d files named in one patch", at, PATCH_MAX_FILES);
    char why[300] = "";
    if (ok && !ok(buf, arg, why, sizeof(why)))
        return refuse(p, "patch line %zu: %s", at, why);
    for (size_t i = 0; i < p->ntouched; i++)
        if (strcmp(p->touched[i], buf) == 0)
            return refuse(p, "patch line %zu: %s is named twice in one patch", at, buf);
    char **t = realloc(p->touched, (p->ntouched + 1) * sizeof(*t));
    if (!t || !(t[p->ntouched] = strdup(buf))) {
        if (t)
            p->touched = t;
        return refuse(p, "out of memory");
    }
    p->touched = t;
    p->ntouched++;
    return 0;
}

/* Where hunk h's old lines are, at or after start: exactly, else trailing
 * whitespace aside, else surrounding whitespace aside; -1 when nowhere,
 * -2 when the search ran out of budget. */
static long find_block(const lines *f, size_t start, const hunk *h, int64_t *budget)
{
    size_t k = h->old.n;
    if (k == 0)
        return h->eof ? (long)f->n : (long)(start < f->n ? start : f->n);
    if (k > f->n || start > f->n - k)
        return -1;
    size_t last = f->n - k;
    for (int how = 0; how <= 2; how++) {
        for (size_t pos = h->eof ? last : start; pos <= last; pos++) {
            size_t j = 0;
            while (j < k && same(f->v[pos + j], h->old.v[j], how, budget))
                j++;
            if (j == k)
                return (long)pos;
            if (*budget < 0)
                return -2;
            if (h->eof)
                break; /* only at the end */
        }
    }
    return -1;
}

static char *join(const lines *l, bool trailing, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total += l->v[i].len + 1;
    char *b = malloc(total + 1);
    if (!b)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].len)
            memcpy(b + k, l->v[i].s, l->v[i].len);
        k += l->v[i].len;
        if (i + 1 < l->n || trailing)
            b[k++] = '\n';
    }
    *len = k;
    return b;
}

static void hunks_free(hunk *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(h[i].old.v);
        free(h[i].body.v);
        free(h[i].kinds);
    }
    free(h);
}

/* The hunks of an Update File section, from patch line *i on. */
static int parse_hunks(patch_state *p, const lines *pl, size_t *i, hunk **out, size_t *nout)
{
    hunk *h = NULL;
    size_t n = 0;
    for (; *i < pl->n && !header(&pl->v[*i]); (*i)++) {
        const line *l = &pl->v[*i];
        line rest;
        bool at_sign = starts(l, "@@", &rest);
        if (at_sign || n == 0) {
            if (++p->hunks > PATCH_MAX_HUNKS) {
                hunks_free(h, n);
                return refuse(p, "patch line %zu: more than %d hunks in one patch", *i + 1, PATCH_MAX_HUNKS);
            }
            hunk *v = realloc(h, (n + 1) * sizeof(*v));
            if (!v) {
                hunks_free(h, n);
                return refuse(p, "out of memory");
            }
            h = v;
            memset(&h[n], 0, sizeof(h[n]));
            h[n].at = *i + 1;
            if (at_sign) {
                h[n].anchor = trimmed(rest, 2);
                h[n].has_anchor = h[n].anchor.len > 0;
                n++;
                continue;
            }
            n++;
        }
        hunk *cur = &h[n - 1];
        if (is(l, "*** End of File")) {
            cur->eof = true;
            continue;
        }
        char c = l->len ? l->s[0] : ' '; /* an empty line: an empty context line */
        line text = l->len ? (line){l->s + 1, l->len - 1} : *l;
        int rc = 0;
        if (c == ' ' || c == '-')
            rc |= push(&cur->old, text.s, text.len);
        if (c == ' ' || c == '-' || c == '+') {
            rc |= push(&cur->body, text.s, text.len);
            char *k = rc ? NULL : realloc(cur->kinds, cur->body.n);
            if (k) {
                cur->kinds = k;
                k[cur->body.n - 1] = c;
            } else {
                rc = -1;
            }
        }
        if (c != ' ' && c != '-' && c != '+') {
            hunks_free(h, n);
            return refuse(p, "patch line %zu: a hunk's line starts with ' ', '-' or '+' (or is \"@@ ...\" or "
                          "\"*** End of File\")", *i + 1);
        }
        if (rc) {
            hunks_free(h, n);
            return refuse(p, "out of memory");
        }
    }
    *out = h;
    *nout = n;
    return 0;
}

static int push_all(lines *out, const line *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (push(out, v[i].s, v[i].len) < 0)
            return -1;
    return 0;
}

/* The hunks applied in one pass: the file's lines up to each hunk's place
 * copied, the hunk's lines put in (context as the file has it, so the
 * whitespace the match overlooked stays; removed lines dropped; added ones
 * from the patch), and the rest of the file after the last. */
static int apply_hunks(patch_state *p, const char *path, const lines *fl, const hunk *h, size_t nh, lines *out,
                       lines *crlf_copies)
{
    size_t cursor = 0; /* in the file: where the last hunk ended */
    /* A file whose lines end in "\r\n" gets its added lines so too (the
     * patch's own "\r" were taken off with its line ends). */
    bool crlf = fl->n && fl->v[0].len && fl->v[0].s[fl->v[0].len - 1] == '\r';
    for (size_t k = 0; k < nh; k++) {
        if (h[k].has_anchor) {
            size_t j = fl->n;
            for (int how = 0; how <= 2 && j == fl->n && p->budget >= 0; how++)
                for (j = cursor; j < fl->n && !same(fl->v[j], h[k].anchor, how, &p->budget); j++)
                    ;
            if (p->budget < 0)
                break;
            if (j == fl->n)
                return refuse(p, "%s: hunk %zu (patch line %zu): its \"@@ %.*s\" line is not in the file after line "
                              "%zu", path, k + 1, h[k].at, (int)(h[k].anchor.len > 80 ? 80 : h[k].anchor.len),
                              h[k].anchor.s, cursor);
            if (push_all(out, fl->v + cursor, j + 1 - cursor) < 0)
                return refuse(p, "out of memory");
            cursor = j + 1;
        }
        long pos = find_block(fl, cursor, &h[k], &p->budget);
        if (pos == -2)
            break;
        if (pos < 0) {
            const line *first = h[k].old.v;
            return refuse(p, "%s: hunk %zu (patch line %zu) does not apply: its %zu context and removed line(s), "
                          "from \"%.*s\", are not in the file %s line %zu%s", path, k + 1, h[k].at, h[k].old.n,
                          (int)(first->len > 80 ? 80 : first->len), first->s, h[k].eof ? "at its end, after" : "after",
                          cursor, cursor ? " (where the hunk before ended)" : "");
        }
        if (push_all(out, fl->v + cursor, (size_t)pos - cursor) < 0)
            return refuse(p, "out of memory");
        size_t j = (size_t)pos;
        for (size_t b = 0; b < h[k].body.n; b++) {
            char kind = h[k].kinds[b];
            line add = h[k].body.v[b];
            if (kind == '+' && crlf && (!add.len || add.s[add.len - 1] != '\r')) {
                char *c = malloc(add.len + 1);
                if (!c || push(crlf_copies, c, 0) < 0) {
                    free(c);
                    return refuse(p, "out of memory");
                }
                if (add.len)
                    memcpy(c, add.s, add.len);
                c[add.len] = '\r';
                add = (line){c, add.len + 1};
            }
            if ((kind == ' ' && push(out, fl->v[j].s, fl->v[j].len) < 0) ||
                (kind == '+' && push(out, add.s, add.len) < 0))
                return refuse(p, "out of memory");
            j += kind != '+';
        }
        cursor = (size_t)pos + h[k].old.n;
    }
    if (p->budget < 0)
        return refuse(p, "%s: placing its hunks compared more than %lld MiB of lines: give them more distinctive "
                      "context, or split the patch", path, PATCH_SEARCH_BUDGET >> 20);
    if (push_all(out, fl->v + cursor, fl->n - cursor) < 0)
        return refuse(p, "out of memory");
    return 0;
}

static int update_file(patch_state *p, const char *path, const char *to, const hunk *h, size_t nh)
{
    long idx = find_file(p, path);
    if (idx < 0)
        return refuse(p, "%s: Update File of a file that does not exist", path);
    cf_file *f = &(*p->files)[idx];
    lines fl = {0}, out = {0}, crlf_copies = {0};
    bool trailing;
    int rc = split((const char *)f->content.data, f->content.len, false, &fl, &trailing) < 0
                 ? refuse(p, "out of memory")
                 : apply_hunks(p, path, &fl, h, nh, &out, &crlf_copies);
    if (rc == 0) {
        size_t len;
        char *data = join(&out, trailing || f->content.len == 0, &len);
        if (!data)
            rc = refuse(p, "out of memory");
        else if (to) {
            remove_file(p, (size_t)idx);
            if (add_file(p, to, data, len) < 0) {
                free(data);
                rc = refuse(p, "out of memory");
            }
        } else {
            free(f->content.data);
            f->content = (cf_bytes){.data = (uint8_t *)data, .len = len};
        }
    }
    for (size_t i = 0; i < crlf_copies.n; i++)
        free((char *)crlf_copies.v[i].s);
    free(crlf_copies.v);
    free(fl.v);
    free(out.v);
    return rc;
}

static int sections(patch_state *p, const lines *pl, size_t i, ws_patch_path_ok ok, void *arg)
{
    char path[1024], to[1024];
    while (i < pl->n) {
        const line *l = &pl->v[i];
        line rest;
        if (end_patch(l))
            return 0;
        if (l->len == 0) {
            i++;
            continue;
        }
        if (starts(l, "*** Add File: ", &rest)) {
            if (take_path(p, rest, i + 1, ok, arg, path, sizeof(path)) < 0)
                return -1;
            if (find_file(p, path) >= 0)
                return refuse(p, "patch line %zu: Add File of %s, which exists (Update File changes it)", i + 1, path);
            lines body = {0};
            for (i++; i < pl->n && !header(&pl->v[i]); i++) {
                if (!starts(&pl->v[i], "+", &rest)) {
                    free(body.v);
                    return refuse(p, "patch line %zu: an added file's lines start with '+'", i + 1);
                }
                if (push(&body, rest.s, rest.len) < 0) {
                    free(body.v);
                    return refuse(p, "out of memory");
                }
            }
            size_t len;
            char *data = join(&body, true, &len);
            free(body.v);
            if (!data || add_file(p, path, data, len) < 0) {
                free(data);
                return refuse(p, "out of memory");
            }
        } else if (starts(l, "*** Delete File: ", &rest)) {
            if (take_path(p, rest, i + 1, ok, arg, path, sizeof(path)) < 0)
                return -1;
            long idx = find_file(p, path);
            if (idx < 0)
                return refuse(p, "patch line %zu: Delete File of %s, which does not exist", i + 1, path);
            remove_file(p, (size_t)idx);
            i++;
        } else if (starts(l, "*** Update File: ", &rest)) {
            size_t at = i + 1;
            if (take_path(p, rest, at, ok, arg, path, sizeof(path)) < 0)
                return -1;
            bool move = ++i < pl->n && starts(&pl->v[i], "*** Move to: ", &rest);
            if (move) {
                if (take_path(p, rest, i + 1, ok, arg, to, sizeof(to)) < 0)
                    return -1;
                if (find_file(p, to) >= 0)
                    return refuse(p, "patch line %zu: Move to %s, which exists", i + 1, to);
                i++;
            }
            hunk *h = NULL;
            size_t nh = 0;
            if (parse_hunks(p, pl, &i, &h, &nh) < 0)
                return -1;
            int rc = nh == 0 && !move ? refuse(p, "patch line %zu: Update File of %s with no hunk", at, path)
                                      : update_file(p, path, move ? to : NULL, h, nh);
            hunks_free(h, nh);
            if (rc < 0)
                return -1;
        } else {
            return refuse(p, "patch line %zu: expected \"*** Add File: \", \"*** Delete File: \", \"*** Update "
                          "File: \" or \"*** End Patch\"", i + 1);
        }
    }
    return refuse(p, "the patch does not end with \"*** End Patch\"");
}

int ws_patch_apply(const uint8_t *patch, size_t len, cf_file **files, size_t *n, ws_patch_path_ok path_ok, void *arg,
                   char *why, size_t wsz)
{
    patch_state p = {.files = files, .n = n, .why = why, .wsz = wsz, .budget = PATCH_SEARCH_BUDGET};
    lines pl = {0};
    bool trailing;
    int rc;
    if (memchr(patch, '\0', len))
        rc = refuse(&p, "the patch holds a NUL byte: V4A patches are text");
    else if (split((const char *)patch, len, true, &pl, &trailing) < 0)
        rc = refuse(&p, "out of memory");
    else if (pl.n > PATCH_MAX_LINES)
        rc = refuse(&p, "the patch has more than %d lines: split it", PATCH_MAX_LINES);
    else {
        size_t i = 0;
        while (i < pl.n && trimmed(pl.v[i], 2).len == 0)
            i++;
        int64_t unbounded = INT64_MAX;
        if (i == pl.n || !same(pl.v[i], (line){"*** Begin Patch", 15}, 1, &unbounded))
            rc = refuse(&p, "the patch does not start with \"*** Begin Patch\"");
        else
            rc = sections(&p, &pl, i + 1, path_ok, arg);
    }
    free(pl.v);
    for (size_t i = 0; i < p.ntouched; i++)
        free(p.touched[i]);
    free(p.touched);
    return rc;
}
