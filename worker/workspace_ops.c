/* workspace_ops.c: a request's workspace operation (workspace_ops_int.h). */
#include "workspace_ops_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_util.h"
#include "cf_workdir.h"
#include "workspace_patch_int.h"

/* Up to this many lines are named when old_str is not unique. */
#define SHOWN_LINES 5

/* The op's answer: a status and the reason for it. */
#define fail(res, st, ...) ((res)->status = (st), cf_result_set_reason((res), __VA_ARGS__))

static const cf_ws_entry *find(const cf_wstate_run *run, const char *path)
{
    for (size_t i = 0; i < run->snap.n; i++)
        if (strcmp(run->snap.entries[i].path, path) == 0)
            return &run->snap.entries[i];
    return NULL;
}

/* 1-based line of byte offset off in data. */
static size_t line_of(const uint8_t *data, size_t off)
{
    size_t line = 1;
    for (size_t i = 0; i < off; i++)
        line += data[i] == '\n';
    return line;
}

/* e in the answer: listed (content NULL), or with content, cut short of
 * what was asked by the output cap when cut. */
static int add_listed(cf_result *res, const cf_ws_entry *e, const uint8_t *content, size_t len, bool cut)
{
    cf_out_file *v = realloc(res->files, (res->n_files + 1) * sizeof(*v));
    if (!v)
        return -1;
    res->files = v;
    cf_out_file *f = &v[res->n_files];
    memset(f, 0, sizeof(*f));
    if (cf_str_set(&f->path, e->path) < 0)
        return -1;
    res->n_files++;
    f->size = (int64_t)e->size;
    f->listed = !content;
    if (content) {
        if (cf_bytes_set(&f->content, content, len) < 0)
            return -1;
        f->truncated = cut;
        res->files_truncated |= cut;
    }
    return 0;
}

static int cmp_file_path(const void *a, const void *b)
{
    return strcmp(((const cf_file *)a)->path, ((const cf_file *)b)->path);
}

/* The new set as the write-back wants it: sorted by path (bytewise), as a
 * snapshot is (an ambiguous commit is checked against it entry by entry). */
static void set_collected(cf_wstate_run *run, cf_file *set, size_t n)
{
    qsort(set, n, sizeof(*set), cmp_file_path);
    run->files.collected = set;
    run->files.n_collected = n;
}

/* A file and a directory of one name cannot both be in a workspace (no
 * program could be given it): a new path under an existing file, or over
 * an existing directory, is refused.  Linear in the listing. */
/* True when one of a and b names a directory the other is in ("a" and
 * "a/b"). */
static bool nested(const char *a, const char *b)
{
    size_t al = strlen(a), bl = strlen(b);
    return (al < bl && strncmp(a, b, al) == 0 && b[al] == '/') || (bl < al && strncmp(a, b, bl) == 0 && a[bl] == '/');
}

static bool shadowed(const cf_wstate_run *run, const char *path, cf_result *res)
{
    for (size_t i = 0; i < run->snap.n; i++)
        if (nested(path, run->snap.entries[i].path)) {
            fail(res, CF_STATUS_FAILED, "%s: the workspace holds %s: a path cannot be both a file and a directory; "
                 "nothing written", path, run->snap.entries[i].path);
            return true;
        }
    return false;
}

/* The op's change, for the write-back: path gets data (a copy), or goes. */
static int change(cf_wstate_run *run, const char *path, const uint8_t *data, size_t len, bool remove)
{
    if (remove) {
        char **d = malloc(sizeof(*d));
        if (!d || !(d[0] = strdup(path))) {
            free(d);
            return -1;
        }
        run->op_dels = d;
        run->n_op_dels = 1;
    } else {
        cf_file *f = calloc(1, sizeof(*f));
        if (!f || !(f->path = strdup(path)) || cf_bytes_set(&f->content, data ? (const void *)data : "", len) < 0) {
            cf_workdir_files_free(f, f ? 1 : 0);
            return -1;
        }
        run->op_puts = f;
        run->n_op_puts = 1;
    }
    run->op_change = true;
    return 0;
}

/* read: the file, or its lines first_line..last_line (1-based, the last
 * included, each with its newline; last_line past the end: to the end),
 * cut at the output cap.  A first_line past the last line is an error,
 * as text_editor's view_range makes it. */
static void op_read(const cf_workspace_op *o, const cf_ws_entry *e, int64_t cap, cf_result *res)
{
    const uint8_t *d = e->data ? e->data : (const uint8_t *)"";
    size_t from = 0, to = e->size;
    if (o->has_first_line || o->has_last_line) {
        int64_t first = o->has_first_line ? o->first_line : 1;
        int64_t last = o->has_last_line ? o->last_line : INT64_MAX;
        int64_t lines = 0;
        for (const uint8_t *p = d, *end = d + e->size; p < end; lines++) {
            const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
            p = nl ? nl + 1 : end;
        }
        if (first > (lines ? lines : 1)) {
            fail(res, CF_STATUS_FAILED, "read: %s has %" PRId64 " line(s): first_line %" PRId64 " is past its end",
                 o->path, lines, first);
            return;
        }
        int64_t line = 1;
        for (size_t i = 0; i < e->size; line++) {
            const uint8_t *nl = memchr(d + i, '\n', e->size - i);
            size_t next = nl ? (size_t)(nl - d) + 1 : e->size;
            if (line == first)
                from = i;
            if (line == last) {
                to = next;
                break;
            }
            i = next;
        }
    }
    size_t want = to - from;
    size_t keep = (uint64_t)want > (uint64_t)cap ? (size_t)cap : want;
    if (add_listed(res, e, d + from, keep, keep < want) < 0)
        fail(res, CF_STATUS_INTERNAL_ERROR, "read: out of memory");
}

static void op_grep(const cf_workspace_op *o, const cf_wstate_run *run, int64_t cap, cf_result *res)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f) {
        fail(res, CF_STATUS_INTERNAL_ERROR, "grep: out of memory");
        return;
    }
    size_t plen = strlen(o->pattern);
    bool cut = false;
    for (size_t i = 0; i < run->snap.n && !cut; i++) {
        const cf_ws_entry *e = &run->snap.entries[i];
        if (o->path && !cf_glob_match(o->path, e->path, CF_GLOB_ANY_DEPTH))
            continue;
        /* A file with a NUL byte is binary: not searched, as grep -I. */
        if (e->size && memchr(e->data, 0, e->size))
            continue;
        size_t line = 1, start = 0;
        for (size_t p = 0; p <= e->size && !cut; p++) {
            if (p < e->size && e->data[p] != '\n')
                continue;
            size_t ll = p - start;
            if (ll >= plen && memmem(e->data + start, ll, o->pattern, plen)) {
                fprintf(f, "%s:%zu:", e->path, line);
                fwrite(e->data + start, 1, ll, f);
                fputc('\n', f);
                fflush(f);
                if ((int64_t)tlen > cap)
                    cut = true;
            }
            line++;
            start = p + 1;
        }
    }
    if (fclose(f) != 0 || !text) {
        free(text);
        fail(res, CF_STATUS_INTERNAL_ERROR, "grep: out of memory");
        return;
    }
    size_t keep = (int64_t)tlen > cap ? (size_t)cap : tlen;
    if (cf_bytes_set(&res->stdout_data, text, keep) < 0)
        fail(res, CF_STATUS_INTERNAL_ERROR, "grep: out of memory");
    res->stdout_truncated = cut;
    free(text);
}

/* str_replace: old_str must occur exactly once. */
static int op_str_replace(const cf_workspace_op *o, const cf_ws_entry *e, uint8_t **out, size_t *olen,
                          cf_result *res)
{
    size_t at[SHOWN_LINES], n = 0;
    const uint8_t *d = e->data;
    for (size_t p = 0; e->size >= o->old_str.len && p <= e->size - o->old_str.len;) {
        const uint8_t *hit = memmem(d + p, e->size - p, o->old_str.data, o->old_str.len);
        if (!hit)
            break;
        if (n < SHOWN_LINES)
            at[n] = (size_t)(hit - d);
        n++;
        p = (size_t)(hit - d) + o->old_str.len;
    }
    if (n == 0) {
        fail(res, CF_STATUS_FAILED, "str_replace: old_str does not occur in %s: nothing written", e->path);
        return -1;
    }
    if (n > 1) {
        char lines[120] = "";
        size_t ll = 0;
        for (size_t i = 0; i < n && i < SHOWN_LINES && ll < sizeof(lines); i++)
            ll += (size_t)snprintf(lines + ll, sizeof(lines) - ll, "%s%zu", i ? ", " : "", line_of(d, at[i]));
        fail(res, CF_STATUS_FAILED,
             "str_replace: old_str occurs %zu times in %s (lines %s%s): give more context to make it unique; "
             "nothing written", n, e->path, lines, n > SHOWN_LINES ? ", ..." : "");
        return -1;
    }
    size_t len = e->size - o->old_str.len + o->new_str.len;
    uint8_t *b = malloc(len ? len : 1);
    if (!b) {
        fail(res, CF_STATUS_INTERNAL_ERROR, "str_replace: out of memory");
        return -1;
    }
    memcpy(b, d, at[0]);
    if (o->new_str.len)
        memcpy(b + at[0], o->new_str.data, o->new_str.len);
    memcpy(b + at[0] + o->new_str.len, d + at[0] + o->old_str.len, e->size - at[0] - o->old_str.len);
    *out = b;
    *olen = len;
    return 0;
}

/* insert: new_str as whole lines after line insert_line (0: at the top). */
static int op_insert(const cf_workspace_op *o, const cf_ws_entry *e, uint8_t **out, size_t *olen, cf_result *res)
{
    size_t lines = 0;
    for (size_t i = 0; i < e->size; i++)
        lines += e->data[i] == '\n';
    if (e->size && e->data[e->size - 1] != '\n')
        lines++; /* a last line without its newline */
    if ((uint64_t)o->insert_line > lines) {
        fail(res, CF_STATUS_FAILED, "insert: insert_line %" PRId64 " is past the end of %s (%zu line(s)); nothing "
             "written", o->insert_line, e->path, lines);
        return -1;
    }
    size_t at = 0;
    for (int64_t l = 0; l < o->insert_line; l++) {
        const uint8_t *nl = memchr(e->data + at, '\n', e->size - at);
        at = nl ? (size_t)(nl - e->data) + 1 : e->size;
    }
    bool lead = at == e->size && at > 0 && e->data[at - 1] != '\n'; /* after a last line without newline */
    bool trail = o->new_str.len == 0 || o->new_str.data[o->new_str.len - 1] != '\n';
    size_t len = e->size + o->new_str.len + lead + trail;
    uint8_t *b = malloc(len);
    if (!b) {
        fail(res, CF_STATUS_INTERNAL_ERROR, "insert: out of memory");
        return -1;
    }
    size_t k = 0;
    memcpy(b, e->data ? e->data : (const uint8_t *)"", at);
    k = at;
    if (lead)
        b[k++] = '\n';
    if (o->new_str.len)
        memcpy(b + k, o->new_str.data, o->new_str.len);
    k += o->new_str.len;
    if (trail)
        b[k++] = '\n';
    memcpy(b + k, e->data ? e->data + at : (const uint8_t *)"", e->size - at);
    *out = b;
    *olen = len;
    return 0;
}

static bool patch_path_ok(const char *path, void *arg, char *why, size_t wsz)
{
    cf_error err;
    cf_error_clear(&err);
    if (cf_wstate_path_check(arg, path, &err) == 0)
        return true;
    snprintf(why, wsz, "%s", err.msg);
    return false;
}

/* apply_patch: the checkout copied, the patch applied to the copy. */
/* The profile's max-file-size (the request's policy, which admission
 * lowered to it) holds for what an op writes as for what a program
 * writes: the operator decides, not the op. */
static bool over_file_cap(int64_t max, const char *op, const char *path, size_t len, cf_result *res)
{
    if (max <= 0 || (uint64_t)len <= (uint64_t)max)
        return false;
    fail(res, CF_STATUS_FAILED, "%s: %s would be %zu bytes, over max-file-size (%" PRId64 " bytes, the profile's "
         "or the request's); nothing written", op, path, len, max);
    return true;
}

static bool op_apply_patch(const cf_wstate *st, const cf_workspace_op *o, int64_t max_file, cf_wstate_run *run,
                           cf_result *res)
{
    cf_file *set = calloc(run->snap.n ? run->snap.n : 1, sizeof(*set));
    size_t n = 0;
    for (size_t i = 0; set && i < run->snap.n; i++, n++) {
        const cf_ws_entry *e = &run->snap.entries[i];
        set[i].path = strdup(e->path);
        if (!set[i].path || cf_bytes_set(&set[i].content, e->data ? (const void *)e->data : "", e->size) < 0) {
            cf_workdir_files_free(set, n + 1);
            set = NULL;
        }
    }
    if (!set) {
        fail(res, CF_STATUS_INTERNAL_ERROR, "apply_patch: out of memory");
        return false;
    }
    char why[500];
    if (ws_patch_apply(o->content.data, o->content.len, &set, &n, patch_path_ok, (void *)st, why, sizeof(why)) < 0) {
        cf_workdir_files_free(set, n);
        fail(res, CF_STATUS_FAILED, "apply_patch: %s; nothing written", why);
        return false;
    }
    set_collected(run, set, n);
    /* Only what the patch changes is held to the cap: a file the cap was
     * lowered under stays as it is. */
    for (size_t i = 0; i < n; i++) {
        const cf_ws_entry *e = find(run, set[i].path);
        bool same = e && e->size == set[i].content.len &&
                    (e->size == 0 || memcmp(e->data, set[i].content.data, e->size) == 0);
        if (!same && over_file_cap(max_file, "apply_patch", set[i].path, set[i].content.len, res))
            return false;
    }
    /* Sorted, a file and a directory of one name are neighbours but for
     * names between them ("a", "a-b", "a/c"): each path against the ones
     * after it up to the first that no longer starts with it. */
    for (size_t i = 0; i + 1 < n; i++) {
        size_t pl = strlen(set[i].path);
        for (size_t k = i + 1; k < n && strncmp(set[k].path, set[i].path, pl) == 0; k++)
            if (nested(set[i].path, set[k].path)) {
                fail(res, CF_STATUS_FAILED, "apply_patch: %s and %s: a path cannot be both a file and a directory; "
                     "nothing written", set[i].path, set[k].path);
                run->ws_rw = false;
                return false;
            }
    }
    run->ws_rw = true;
    return true;
}

bool ws_op_apply(const cf_wstate *st, const cf_request *req, cf_wstate_run *run, cf_result *res)
{
    const cf_workspace_op *o = req->workspace_op;
    const char *ws = req->workspace;
    int64_t cap = req->policy.max_stdout_bytes > 0 ? req->policy.max_stdout_bytes : INT64_MAX;
    bool writes = cf_ws_op_writes(o->op);
    run->ws_rw = false; /* written back only when the op changes something */
    res->status = CF_STATUS_SUCCESS;
    res->workspace_revision = run->ws_rev;
    /* (Its path was checked by the checkout, before anything was read.) */
    if (writes && o->has_expected_revision && o->expected_revision != run->ws_rev) {
        res->workspace_conflict = true;
        fail(res, CF_STATUS_FAILED, "workspace %s is at revision %" PRId64 ", not the expected %" PRId64
             ": nothing written (read it again)", ws, run->ws_rev, o->expected_revision);
        return false;
    }
    const cf_ws_entry *e = o->path ? find(run, o->path) : NULL;
    switch (o->op) {
    case CF_WS_OP_LIST:
        for (size_t i = 0; i < run->snap.n; i++)
            if ((!o->pattern || cf_glob_match(o->pattern, run->snap.entries[i].path, CF_GLOB_ANY_DEPTH)) &&
                add_listed(res, &run->snap.entries[i], NULL, 0, false) < 0) {
                fail(res, CF_STATUS_INTERNAL_ERROR, "list: out of memory");
                return false;
            }
        return false;
    case CF_WS_OP_GREP:
        op_grep(o, run, cap, res);
        return false;
    case CF_WS_OP_APPLY_PATCH:
        return op_apply_patch(st, o, req->policy.max_file_size_bytes, run, res);
    default:
        break;
    }
    if (!e && o->op != CF_WS_OP_WRITE) {
        fail(res, CF_STATUS_FAILED, "%s: no file %s in workspace %s (revision %" PRId64 ")", cf_ws_op_name(o->op),
             o->path, ws, run->ws_rev);
        return false;
    }
    uint8_t *data = NULL;
    size_t len = 0;
    switch (o->op) {
    case CF_WS_OP_READ:
        op_read(o, e, cap, res);
        return false;
    case CF_WS_OP_WRITE:
        if (e && e->size == o->content.len && (e->size == 0 || memcmp(e->data, o->content.data, e->size) == 0))
            return false; /* the same bytes: no new revision */
        if ((!e && shadowed(run, o->path, res)) ||
            over_file_cap(req->policy.max_file_size_bytes, "write", o->path, o->content.len, res))
            return false;
        if (change(run, o->path, o->content.data, o->content.len, false) < 0)
            goto nomem;
        break;
    case CF_WS_OP_DELETE:
        if (change(run, o->path, NULL, 0, true) < 0)
            goto nomem;
        break;
    case CF_WS_OP_STR_REPLACE:
    case CF_WS_OP_INSERT: {
        int rc = o->op == CF_WS_OP_INSERT ? op_insert(o, e, &data, &len, res) : op_str_replace(o, e, &data, &len, res);
        if (rc < 0)
            return false;
        if ((len == e->size && (len == 0 || memcmp(data, e->data, len) == 0)) ||
            over_file_cap(req->policy.max_file_size_bytes, cf_ws_op_name(o->op), o->path, len, res)) {
            free(data); /* the same bytes (new_str == old_str): no new revision; or too big */
            return false;
        }
        rc = change(run, o->path, data, len, false);
        free(data);
        if (rc < 0)
            goto nomem;
        break;
    }
    default:
        fail(res, CF_STATUS_REJECTED, "workspace_op: unknown op");
        return false;
    }
    run->ws_rw = true;
    return true;
nomem:
    fail(res, CF_STATUS_INTERNAL_ERROR, "%s: out of memory", cf_ws_op_name(o->op));
    return false;
}
