/* cf_schema: wire schema v1 (msgpack).  Normative description: SPEC.md.
 *
 * Decoding never calls msgpack_unpack: a bounded cursor (mp_reader.c) reads
 * the bytes directly into the structs.  Each message is scanned twice: a
 * first pass checks the whole structure (sizes, counts, depth, trailing
 * bytes) and the version without allocating; the second pass decodes.
 * Encoding uses msgpack-c's packer with a fixed key order, omitting absent
 * fields, so equal structs give byte-identical messages.
 */
#include "cf_schema.h"

#include <openssl/evp.h>

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema_int.h"
#include "cf_util.h"

const cf_decode_limits cf_decode_limits_default = {
    .max_total_bytes = 16u << 20,
    .max_str_bytes = 64u << 10,
    .max_bin_bytes = 8u << 20,
    .max_elements = 65536,
    .max_depth = 32,
};

/* ---- names -------------------------------------------------------------- */

static const char *const lang_names[CF_LANG__COUNT] = {
    [CF_LANG_NONE] = "none",         [CF_LANG_COMMAND] = "command",       [CF_LANG_SHELL] = "shell",
    [CF_LANG_PYTHON] = "python",     [CF_LANG_JAVASCRIPT] = "javascript", [CF_LANG_WASM] = "wasm",
    [CF_LANG_C] = "c",               [CF_LANG_CPP] = "cpp",               [CF_LANG_RUST] = "rust",
    [CF_LANG_GO] = "go",             [CF_LANG_TYPESCRIPT] = "typescript",
};

bool cf_language_compiled(cf_language l)
{
    return l == CF_LANG_C || l == CF_LANG_CPP || l == CF_LANG_RUST || l == CF_LANG_GO || l == CF_LANG_TYPESCRIPT;
}

static const char *const harness_names[] = {"none", "function"};

static const char *const ws_op_names[CF_WS_OP__COUNT] = {
    [CF_WS_OP_NONE] = "none",     [CF_WS_OP_LIST] = "list",   [CF_WS_OP_READ] = "read",
    [CF_WS_OP_WRITE] = "write",   [CF_WS_OP_DELETE] = "delete", [CF_WS_OP_GREP] = "grep",
    [CF_WS_OP_STR_REPLACE] = "str_replace", [CF_WS_OP_INSERT] = "insert", [CF_WS_OP_APPLY_PATCH] = "apply_patch",
};

const char *cf_ws_op_name(cf_ws_op op)
{
    return (unsigned)op < CF_WS_OP__COUNT ? ws_op_names[op] : "unknown";
}

int cf_ws_op_parse(const char *name, cf_ws_op *out)
{
    for (int i = CF_WS_OP_NONE + 1; name && i < CF_WS_OP__COUNT; i++)
        if (strcmp(name, ws_op_names[i]) == 0) {
            *out = (cf_ws_op)i;
            return 0;
        }
    return -1;
}

bool cf_ws_op_writes(cf_ws_op op)
{
    return op == CF_WS_OP_WRITE || op == CF_WS_OP_DELETE || op == CF_WS_OP_STR_REPLACE || op == CF_WS_OP_INSERT ||
           op == CF_WS_OP_APPLY_PATCH;
}

static const char *const status_names[CF_STATUS__COUNT] = {
    [CF_STATUS_SUCCESS] = "success",
    [CF_STATUS_FAILED] = "failed",
    [CF_STATUS_TIMEOUT] = "timeout",
    [CF_STATUS_MEMORY_EXCEEDED] = "memory_exceeded",
    [CF_STATUS_COMPILE_FAILED] = "compile_failed",
    [CF_STATUS_REJECTED] = "rejected",
    [CF_STATUS_INTERNAL_ERROR] = "internal_error",
    [CF_STATUS_CANCELLED] = "cancelled",
};

static const char *const net_names[] = {"unspecified", "disabled", "enabled"};
static const char *const fs_names[] = {"unspecified", "none", "workspace_ro", "workspace_rw", "paths"};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *cf_language_name(cf_language l)
{
    return (unsigned)l < CF_LANG__COUNT ? lang_names[l] : "unknown";
}

int cf_language_parse(const char *name, cf_language *out)
{
    for (int i = CF_LANG_NONE + 1; name && i < CF_LANG__COUNT; i++)
        if (strcmp(name, lang_names[i]) == 0) {
            *out = (cf_language)i;
            return 0;
        }
    return -1;
}

const char *cf_status_name(cf_status s)
{
    return (unsigned)s < CF_STATUS__COUNT ? status_names[s] : "unknown";
}

int cf_status_parse(const char *name, cf_status *out)
{
    for (int i = 0; name && i < CF_STATUS__COUNT; i++)
        if (strcmp(name, status_names[i]) == 0) {
            *out = (cf_status)i;
            return 0;
        }
    return -1;
}

const char *cf_network_name(cf_network_policy n)
{
    return (unsigned)n < NELEM(net_names) ? net_names[n] : "unknown";
}

const char *cf_fs_mode_name(cf_fs_mode m)
{
    return (unsigned)m < NELEM(fs_names) ? fs_names[m] : "unknown";
}

/* ---- small helpers ---------------------------------------------------- */

bool cf_id_valid(const char *id, size_t len)
{
    if (!id || len == 0 || len > CF_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)id[i] < 0x21 || (unsigned char)id[i] > 0x7e)
            return false;
    return true;
}

bool cf_image_name_valid(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > CF_IMAGE_NAME_MAX || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

int cf_bytes_set(cf_bytes *b, const void *data, size_t len)
{
    /* One extra NUL so text fields can be used as C strings. */
    uint8_t *d = malloc(len + 1);
    if (!d)
        return -1;
    if (len)
        memcpy(d, data, len);
    d[len] = '\0';
    free(b->data);
    b->data = d;
    b->len = len;
    return 0;
}

int cf_str_set(char **dst, const char *src)
{
    char *s = NULL;
    if (src && !(s = strdup(src)))
        return -1;
    free(*dst);
    *dst = s;
    return 0;
}

int cf_result_set_reason(cf_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return -1;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    free(res->reason);
    res->reason = s;
    return 0;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static void free_strmap(cf_strmap_entry *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++) {
        free(m[i].key);
        free(m[i].value);
    }
    free(m);
}

void cf_request_clear(cf_request *req)
{
    if (!req)
        return;
    free(req->id);
    free(req->backend);
    free(req->image);
    free(req->code.data);
    free_strv(req->argv, req->argc);
    free(req->module.data);
    free(req->stdin_data.data);
    free(req->input.data);
    free_strmap(req->env, req->n_env);
    for (size_t i = 0; req->files && i < req->n_files; i++) {
        free(req->files[i].path);
        free(req->files[i].content.data);
    }
    free(req->files);
    free_strv(req->policy.fs_read_only, req->policy.n_fs_read_only);
    free_strv(req->policy.fs_read_write, req->policy.n_fs_read_write);
    free_strv(req->policy.env_allow, req->policy.n_env_allow);
    free(req->workspace);
    free(req->thread);
    free(req->identity);
    free(req->reply_to);
    free_strmap(req->trace, req->n_trace);
    free_strv(req->compile_flags, req->n_compile_flags);
    for (size_t i = 0; req->cases && i < req->n_cases; i++) {
        free(req->cases[i].name);
        free(req->cases[i].stdin_data.data);
        free(req->cases[i].input.data);
        free_strv(req->cases[i].argv, req->cases[i].argc);
        free(req->cases[i].expect_stdout.data);
    }
    free(req->cases);
    free_strv(req->collect, req->n_collect);
    if (req->workspace_op) {
        free(req->workspace_op->path);
        free(req->workspace_op->pattern);
        free(req->workspace_op->content.data);
        free(req->workspace_op->old_str.data);
        free(req->workspace_op->new_str.data);
        free(req->workspace_op);
    }
    free(req->session);
    memset(req, 0, sizeof(*req));
}

void cf_result_clear(cf_result *res)
{
    if (!res)
        return;
    free(res->id);
    free(res->stdout_data.data);
    free(res->stderr_data.data);
    free(res->output.data);
    cf_diagnostics_free(res->diagnostics, res->n_diagnostics);
    free(res->meta.backend);
    free(res->meta.isolation);
    free(res->meta.language);
    free(res->meta.worker);
    free(res->meta.identity);
    free(res->reason);
    free(res->reply_to_error);
    free_strv(res->changed_paths, res->n_changed_paths);
    free(res->checkpoint_id);
    free_strv(res->session_lost, res->n_session_lost);
    free(res->meta.toolchain);
    free(res->meta.sandbox);
    free(res->meta.run);
    free(res->meta.traceparent);
    for (size_t i = 0; res->cases && i < res->n_cases; i++)
        cf_case_result_clear(&res->cases[i]);
    free(res->cases);
    for (size_t i = 0; res->files && i < res->n_files; i++) {
        free(res->files[i].path);
        free(res->files[i].content.data);
    }
    free(res->files);
    memset(res, 0, sizeof(*res));
}

void cf_diagnostics_free(cf_diagnostic *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].level);
        free(v[i].message);
        free(v[i].file);
        free(v[i].code);
        cf_diagnostics_free(v[i].children, v[i].n_children);
    }
    free(v);
}

void cf_case_result_clear(cf_case_result *c)
{
    if (!c)
        return;
    free(c->name);
    free(c->stdout_data.data);
    free(c->stderr_data.data);
    free(c->output.data);
    free(c->reason);
    memset(c, 0, sizeof(*c));
}

/* ---- encoder ----------------------------------------------------------- */

/* A map under construction: entries go to body while counted, then
 * enc_map_into() writes the header and body into the parent.  Failures are
 * sticky in rc so call sites stay linear. */
typedef struct enc {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint32_t n;
    int rc;
} enc;

static void enc_init(enc *e)
{
    msgpack_sbuffer_init(&e->sb);
    msgpack_packer_init(&e->pk, &e->sb, msgpack_sbuffer_write);
    e->n = 0;
    e->rc = 0;
}

static void enc_free(enc *e)
{
    msgpack_sbuffer_destroy(&e->sb);
}

static void enc_key(enc *e, const char *k)
{
    e->n++;
    if (msgpack_pack_str_with_body(&e->pk, k, strlen(k)) != 0)
        e->rc = -1;
}

static void enc_ok(enc *e, int rc)
{
    if (rc != 0)
        e->rc = -1;
}

static void pack_cstr(enc *e, const char *s)
{
    enc_ok(e, msgpack_pack_str_with_body(&e->pk, s, strlen(s)));
}

static void put_str(enc *e, const char *k, const char *s)
{
    if (!s)
        return;
    enc_key(e, k);
    pack_cstr(e, s);
}

static void put_int(enc *e, const char *k, int64_t v)
{
    if (v == 0)
        return;
    enc_key(e, k);
    enc_ok(e, msgpack_pack_int64(&e->pk, v));
}

/* An integer written whenever it is given, 0 included. */
static void put_int_given(enc *e, const char *k, bool given, int64_t v)
{
    if (!given)
        return;
    enc_key(e, k);
    enc_ok(e, msgpack_pack_int64(&e->pk, v));
}

static void put_true(enc *e, const char *k, bool v)
{
    if (!v)
        return;
    enc_key(e, k);
    enc_ok(e, msgpack_pack_true(&e->pk));
}

/* msgpack-c memcpy()s the body even when empty: never hand it NULL. */
static const void *bytes_ptr(const cf_bytes *b)
{
    return b->data ? (const void *)b->data : (const void *)"";
}

static void pack_bin(enc *e, const cf_bytes *b)
{
    enc_ok(e, msgpack_pack_bin_with_body(&e->pk, bytes_ptr(b), b->len));
}

/* Text-like byte fields travel as str when they are valid UTF-8 (what a
 * Python or Go client expects for source code), as bin otherwise. */
static void pack_text(enc *e, const cf_bytes *b)
{
    if (cf_utf8_valid(bytes_ptr(b), b->len))
        enc_ok(e, msgpack_pack_str_with_body(&e->pk, bytes_ptr(b), b->len));
    else
        pack_bin(e, b);
}

static void put_strv(enc *e, const char *k, char *const *v, size_t n, bool even_empty)
{
    if (n == 0 && !even_empty)
        return;
    enc_key(e, k);
    enc_ok(e, msgpack_pack_array(&e->pk, n));
    for (size_t i = 0; i < n; i++)
        pack_cstr(e, v[i]);
}

static void put_strmap(enc *e, const char *k, const cf_strmap_entry *m, size_t n)
{
    if (n == 0)
        return;
    enc_key(e, k);
    enc_ok(e, msgpack_pack_map(&e->pk, n));
    for (size_t i = 0; i < n; i++) {
        pack_cstr(e, m[i].key);
        pack_cstr(e, m[i].value);
    }
}

static void put_raw(enc *e, const char *k, const cf_bytes *v)
{
    if (v->len == 0)
        return;
    enc_key(e, k);
    enc_ok(e, msgpack_sbuffer_write(&e->sb, (const char *)v->data, v->len));
}

/* Writes child as a map value under key k (skipped when empty). */
static void put_map(enc *e, const char *k, enc *child)
{
    if (child->rc)
        e->rc = -1;
    if (child->n == 0)
        return;
    enc_key(e, k);
    enc_ok(e, msgpack_pack_map(&e->pk, child->n));
    enc_ok(e, msgpack_sbuffer_write(&e->sb, child->sb.data, child->sb.size));
}

/* Writes a finished child map as the next element of an array. */
static void put_map_elem(enc *e, enc *child)
{
    if (child->rc)
        e->rc = -1;
    enc_ok(e, msgpack_pack_map(&e->pk, child->n));
    if (child->sb.size)
        enc_ok(e, msgpack_sbuffer_write(&e->sb, child->sb.data, child->sb.size));
}

static void pack_diag(enc *e, const cf_diagnostic *dg, bool with_children)
{
    enc d;
    enc_init(&d);
    put_str(&d, "level", dg->level);
    put_str(&d, "message", dg->message);
    put_str(&d, "file", dg->file);
    put_int(&d, "line", dg->line);
    put_int(&d, "column", dg->column);
    put_str(&d, "code", dg->code);
    put_int(&d, "end_line", dg->end_line);
    put_int(&d, "end_column", dg->end_column);
    if (with_children && dg->n_children) {
        enc_key(&d, "children");
        enc_ok(&d, msgpack_pack_array(&d.pk, dg->n_children));
        for (size_t k = 0; k < dg->n_children; k++)
            pack_diag(&d, &dg->children[k], false);
    }
    put_map_elem(e, &d);
    enc_free(&d);
}

static int enc_finish(enc *top, cf_bytes *out, cf_error *err)
{
    enc whole;
    enc_init(&whole);
    if (top->rc == 0) {
        enc_ok(&whole, msgpack_pack_map(&whole.pk, top->n));
        enc_ok(&whole, msgpack_sbuffer_write(&whole.sb, top->sb.data, top->sb.size));
    }
    if (top->rc || whole.rc) {
        enc_free(&whole);
        return cf_error_set(err, CF_E_NOMEM, "out of memory encoding a message");
    }
    out->len = whole.sb.size;
    out->data = (uint8_t *)msgpack_sbuffer_release(&whole.sb);
    return 0;
}

int cf_request_encode(const cf_request *req, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    if (cf_request_check(req, err) < 0)
        return cf_error_wrap(err, "cannot encode request");
    enc e, pol, fs;
    enc_init(&e);
    enc_init(&pol);
    enc_init(&fs);

    const cf_policy *p = &req->policy;
    if (p->fs_mode != CF_FS_UNSPECIFIED) {
        enc_key(&fs, "mode");
        pack_cstr(&fs, cf_fs_mode_name(p->fs_mode));
    }
    put_strv(&fs, "read_only", p->fs_read_only, p->n_fs_read_only, false);
    put_strv(&fs, "read_write", p->fs_read_write, p->n_fs_read_write, false);
    if (p->network != CF_NET_UNSPECIFIED) {
        enc_key(&pol, "network");
        pack_cstr(&pol, cf_network_name(p->network));
    }
    put_map(&pol, "filesystem", &fs);
    put_strv(&pol, "env_allow", p->env_allow, p->n_env_allow, p->env_allow_set);
    put_int(&pol, "timeout_us", p->timeout_us);
    put_int(&pol, "cpu_time_us", p->cpu_time_us);
    put_int(&pol, "memory_bytes", p->memory_bytes);
    put_int(&pol, "max_processes", p->max_processes);
    put_int(&pol, "max_stdout_bytes", p->max_stdout_bytes);
    put_int(&pol, "max_stderr_bytes", p->max_stderr_bytes);
    put_int(&pol, "max_file_size_bytes", p->max_file_size_bytes);
    put_int(&pol, "compile_timeout_us", p->compile_timeout_us);
    put_int(&pol, "compile_memory_bytes", p->compile_memory_bytes);

    put_int(&e, "v", CF_SCHEMA_VERSION);
    put_str(&e, "id", req->id);
    if (req->language != CF_LANG_NONE)
        put_str(&e, "language", cf_language_name(req->language));
    put_str(&e, "backend", req->backend);
    if (req->code.data) {
        enc_key(&e, "code");
        pack_text(&e, &req->code);
    }
    put_strv(&e, "argv", req->argv, req->argc, false);
    if (req->module.len) {
        enc_key(&e, "module");
        pack_bin(&e, &req->module);
    }
    if (req->stdin_data.len) {
        enc_key(&e, "stdin");
        pack_text(&e, &req->stdin_data);
    }
    put_raw(&e, "input", &req->input);
    put_strmap(&e, "env", req->env, req->n_env);
    if (req->n_files) {
        enc_key(&e, "files");
        enc_ok(&e, msgpack_pack_map(&e.pk, req->n_files));
        for (size_t i = 0; i < req->n_files; i++) {
            pack_cstr(&e, req->files[i].path);
            pack_text(&e, &req->files[i].content);
        }
    }
    put_map(&e, "policy", &pol);
    put_str(&e, "workspace", req->workspace);
    put_str(&e, "thread", req->thread);
    put_str(&e, "identity", req->identity);
    put_str(&e, "reply_to", req->reply_to);
    put_int(&e, "deadline_us", req->deadline_us);
    put_int(&e, "created_us", req->created_us);
    put_strmap(&e, "trace", req->trace, req->n_trace);
    if (req->harness != CF_HARNESS_NONE)
        put_str(&e, "harness", harness_names[req->harness]);
    put_strv(&e, "compile_flags", req->compile_flags, req->n_compile_flags, false);
    if (req->n_cases) {
        enc_key(&e, "cases");
        enc_ok(&e, msgpack_pack_array(&e.pk, req->n_cases));
        for (size_t i = 0; i < req->n_cases; i++) {
            const cf_case *c = &req->cases[i];
            enc ce;
            enc_init(&ce);
            put_str(&ce, "name", c->name);
            if (c->stdin_data.len) {
                enc_key(&ce, "stdin");
                pack_text(&ce, &c->stdin_data);
            }
            put_raw(&ce, "input", &c->input);
            put_strv(&ce, "argv", c->argv, c->argc, false);
            if (c->has_expect) {
                enc_key(&ce, "expect_stdout");
                pack_text(&ce, &c->expect_stdout);
            }
            put_map_elem(&e, &ce);
            enc_free(&ce);
        }
    }
    put_true(&e, "stop_on_failure", req->stop_on_failure);
    put_strv(&e, "collect", req->collect, req->n_collect, false);
    put_true(&e, "stream", req->stream);
    put_str(&e, "image", req->image);
    put_true(&e, "notify_start", req->notify_start);
    if (req->workspace_op) {
        const cf_workspace_op *o = req->workspace_op;
        enc oe;
        enc_init(&oe);
        put_str(&oe, "op", ws_op_names[o->op]);
        put_str(&oe, "path", o->path);
        put_str(&oe, "pattern", o->pattern);
        if (o->has_content) {
            enc_key(&oe, "content");
            pack_text(&oe, &o->content);
        }
        if (o->old_str.data) {
            enc_key(&oe, "old_str");
            pack_text(&oe, &o->old_str);
        }
        if (o->has_new_str) {
            enc_key(&oe, "new_str");
            pack_text(&oe, &o->new_str);
        }
        put_int_given(&oe, "insert_line", o->has_insert_line, o->insert_line);
        put_int_given(&oe, "expected_revision", o->has_expected_revision, o->expected_revision);
        put_int_given(&oe, "first_line", o->has_first_line, o->first_line);
        put_int_given(&oe, "last_line", o->has_last_line, o->last_line);
        put_map(&e, "workspace_op", &oe);
        enc_free(&oe);
    }
    put_str(&e, "session", req->session);

    int rc = enc_finish(&e, out, err);
    enc_free(&fs);
    enc_free(&pol);
    enc_free(&e);
    return rc;
}

static int cmp_env(const void *a, const void *b)
{
    return strcmp(((const cf_strmap_entry *)a)->key, ((const cf_strmap_entry *)b)->key);
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const cf_file *)a)->path, ((const cf_file *)b)->path);
}

int cf_request_digest(const cf_request *req, char hex[CF_DIGEST_HEX], cf_error *err)
{
    /* Shallow copy; the maps (env, files) get sorted copies of their entry
     * arrays, since a client's map order is not part of the request. */
    cf_request canon = *req;
    canon.created_us = 0;
    canon.deadline_us = 0;
    canon.trace = NULL;
    canon.n_trace = 0;
    canon.reply_to = NULL; /* where the answer goes is the new message's say */
    cf_strmap_entry *env = NULL;
    cf_file *files = NULL;
    if (req->n_env) {
        env = malloc(req->n_env * sizeof(*env));
        if (!env)
            return cf_error_set(err, CF_E_NOMEM, "request digest: out of memory");
        memcpy(env, req->env, req->n_env * sizeof(*env));
        qsort(env, req->n_env, sizeof(*env), cmp_env);
        canon.env = env;
    }
    if (req->n_files) {
        files = malloc(req->n_files * sizeof(*files));
        if (!files) {
            free(env);
            return cf_error_set(err, CF_E_NOMEM, "request digest: out of memory");
        }
        memcpy(files, req->files, req->n_files * sizeof(*files));
        qsort(files, req->n_files, sizeof(*files), cmp_file);
        canon.files = files;
    }
    cf_bytes bytes = {0};
    int erc = cf_request_encode(&canon, &bytes, err);
    free(env);
    free(files);
    if (erc < 0)
        return -1;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int ok = EVP_Digest(bytes.data, bytes.len, md, &mdlen, EVP_sha256(), NULL);
    free(bytes.data);
    if (!ok || mdlen != 32)
        return cf_error_set(err, CF_E_NOMEM, "request digest: SHA-256 failed");
    static const char digits[] = "0123456789abcdef";
    for (unsigned int k = 0; k < mdlen; k++) {
        hex[2 * k] = digits[md[k] >> 4];
        hex[2 * k + 1] = digits[md[k] & 15];
    }
    hex[2 * mdlen] = '\0';
    return 0;
}

int cf_result_encode(const cf_result *res, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    if (cf_result_check(res, err) < 0)
        return cf_error_wrap(err, "cannot encode result");
    enc e, meta;
    enc_init(&e);
    enc_init(&meta);

    put_int(&e, "v", CF_SCHEMA_VERSION);
    put_str(&e, "id", res->id);
    put_str(&e, "status", cf_status_name(res->status));
    put_int_given(&e, "exit_code", res->has_exit_code, res->exit_code);
    put_int(&e, "signal", res->signal);
    if (res->stdout_data.len) {
        enc_key(&e, "stdout");
        pack_bin(&e, &res->stdout_data);
    }
    if (res->stderr_data.len) {
        enc_key(&e, "stderr");
        pack_bin(&e, &res->stderr_data);
    }
    put_true(&e, "stdout_truncated", res->stdout_truncated);
    put_true(&e, "stderr_truncated", res->stderr_truncated);
    put_raw(&e, "output", &res->output);
    if (res->n_diagnostics) {
        enc_key(&e, "diagnostics");
        enc_ok(&e, msgpack_pack_array(&e.pk, res->n_diagnostics));
        for (size_t i = 0; i < res->n_diagnostics; i++)
            pack_diag(&e, &res->diagnostics[i], true);
    }
    put_int(&e, "wall_time_us", res->wall_time_us);
    put_int(&e, "cpu_time_us", res->cpu_time_us);
    put_int(&e, "peak_memory_bytes", res->peak_memory_bytes);
    put_str(&meta, "backend", res->meta.backend);
    put_str(&meta, "isolation", res->meta.isolation);
    put_str(&meta, "language", res->meta.language);
    put_str(&meta, "worker", res->meta.worker);
    put_str(&meta, "identity", res->meta.identity);
    put_int(&meta, "attempt", res->meta.attempt);
    put_true(&meta, "replay", res->meta.replay);
    put_str(&meta, "toolchain", res->meta.toolchain);
    put_str(&meta, "sandbox", res->meta.sandbox);
    put_str(&meta, "run", res->meta.run);
    put_str(&meta, "traceparent", res->meta.traceparent);
    put_map(&e, "metadata", &meta);
    put_str(&e, "reason", res->reason);
    put_str(&e, "reply_to_error", res->reply_to_error);
    put_int(&e, "workspace_revision", res->workspace_revision);
    put_strv(&e, "changed_paths", res->changed_paths, res->n_changed_paths, false);
    put_true(&e, "workspace_conflict", res->workspace_conflict);
    put_str(&e, "checkpoint_id", res->checkpoint_id);
    put_true(&e, "checkpoint_conflict", res->checkpoint_conflict);
    put_int(&e, "finished_us", res->finished_us);
    if (res->compile.present) {
        enc cp;
        enc_init(&cp);
        enc_key(&cp, "cached");
        enc_ok(&cp, res->compile.cached ? msgpack_pack_true(&cp.pk) : msgpack_pack_false(&cp.pk));
        put_int(&cp, "wall_time_us", res->compile.wall_time_us);
        put_int(&cp, "cpu_time_us", res->compile.cpu_time_us);
        put_int(&cp, "peak_memory_bytes", res->compile.peak_memory_bytes);
        put_map(&e, "compile", &cp);
        enc_free(&cp);
    }
    if (res->n_cases) {
        enc_key(&e, "cases");
        enc_ok(&e, msgpack_pack_array(&e.pk, res->n_cases));
        for (size_t i = 0; i < res->n_cases; i++) {
            const cf_case_result *c = &res->cases[i];
            enc ce;
            enc_init(&ce);
            put_str(&ce, "name", c->name);
            put_str(&ce, "status", cf_status_name(c->status));
            put_int_given(&ce, "exit_code", c->has_exit_code, c->exit_code);
            put_int(&ce, "signal", c->signal);
            if (c->stdout_data.len) {
                enc_key(&ce, "stdout");
                pack_bin(&ce, &c->stdout_data);
            }
            if (c->stderr_data.len) {
                enc_key(&ce, "stderr");
                pack_bin(&ce, &c->stderr_data);
            }
            put_true(&ce, "stdout_truncated", c->stdout_truncated);
            put_true(&ce, "stderr_truncated", c->stderr_truncated);
            put_raw(&ce, "output", &c->output);
            put_int(&ce, "wall_time_us", c->wall_time_us);
            put_int(&ce, "cpu_time_us", c->cpu_time_us);
            put_int(&ce, "peak_memory_bytes", c->peak_memory_bytes);
            if (c->match) {
                enc_key(&ce, "match");
                enc_ok(&ce, c->match > 0 ? msgpack_pack_true(&ce.pk) : msgpack_pack_false(&ce.pk));
            }
            put_str(&ce, "reason", c->reason);
            put_map_elem(&e, &ce);
            enc_free(&ce);
        }
    }
    if (res->n_files) {
        enc_key(&e, "files");
        enc_ok(&e, msgpack_pack_array(&e.pk, res->n_files));
        for (size_t i = 0; i < res->n_files; i++) {
            const cf_out_file *f = &res->files[i];
            enc fe;
            enc_init(&fe);
            put_str(&fe, "path", f->path);
            put_int_given(&fe, "size", true, f->size);
            if (!f->listed) {
                enc_key(&fe, "content");
                pack_bin(&fe, &f->content);
            }
            put_true(&fe, "truncated", f->truncated);
            put_map_elem(&e, &fe);
            enc_free(&fe);
        }
    }
    put_true(&e, "files_truncated", res->files_truncated);
    put_int(&e, "chunks", res->chunks);
    put_int(&e, "session_cell", res->session_cell);
    put_true(&e, "session_restored", res->session_restored);
    put_strv(&e, "session_lost", res->session_lost, res->n_session_lost, false);

    int rc = enc_finish(&e, out, err);
    enc_free(&meta);
    enc_free(&e);
    return rc;
}

/* ---- decoder ----------------------------------------------------------- */

#define PATH_MAX_LEN 96

typedef struct dec {
    cf_mp_reader r;
    const cf_decode_limits *lim;
    cf_error *err;
} dec;

/* Adds the field path to an error from the reader. */
static int dec_wrap(dec *d, const char *path)
{
    return cf_error_wrap(d->err, "%s", path);
}

static int dec_expect(dec *d, const char *path, const char *what)
{
    if (cf_mp_peek(&d->r) == CF_MP_END)
        return cf_error_set(d->err, CF_E_INVALID, "%s: truncated message", path);
    return cf_error_set(d->err, CF_E_INVALID, "%s: expected %s", path, what);
}

static void idx_path(char *buf, const char *parent, size_t i)
{
    snprintf(buf, PATH_MAX_LEN, "%s[%zu]", parent, i);
}

/* nil stands for "absent" on optional fields (what Python's None and Go's
 * nil encode to); consumes it. */
static bool dec_nil(dec *d)
{
    if (cf_mp_peek(&d->r) != CF_MP_NIL)
        return false;
    d->r.p++;
    return true;
}

static int dec_str(dec *d, const char *path, char **out)
{
    return cf_mp_read_cstr(&d->r, path, out, d->err);
}

/* Integers are type-checked before reading so that a value read but out
 * of range still reports "expected ...", not a cursor state. */
static int dec_integer(dec *d, const char *path, int64_t lo, int64_t hi, int64_t *out, const char *what)
{
    cf_mp_kind k = cf_mp_peek(&d->r);
    if (k == CF_MP_END)
        return cf_error_set(d->err, CF_E_INVALID, "%s: truncated message", path);
    int64_t v;
    if ((k != CF_MP_UINT && k != CF_MP_INT) || cf_mp_read_int(&d->r, &v, NULL) < 0 || v < lo || v > hi)
        return cf_error_set(d->err, CF_E_INVALID, "%s: expected %s", path, what);
    *out = v;
    return 0;
}

static int dec_nonneg(dec *d, const char *path, int64_t *out)
{
    return dec_integer(d, path, 0, INT64_MAX, out, "non-negative integer");
}

static int dec_bool(dec *d, const char *path, bool *out)
{
    if (cf_mp_peek(&d->r) != CF_MP_BOOL)
        return dec_expect(d, path, "bool");
    return cf_mp_read_bool(&d->r, out, d->err);
}

static int dec_bytes(dec *d, const char *path, cf_bytes *out)
{
    cf_mp_kind k = cf_mp_peek(&d->r);
    if (k != CF_MP_BIN && k != CF_MP_STR)
        return dec_expect(d, path, "bin or string");
    const uint8_t *s;
    size_t len;
    if (cf_mp_read_bytes(&d->r, d->lim->max_bin_bytes, &s, &len, d->err) < 0)
        return dec_wrap(d, path);
    if (cf_bytes_set(out, s, len) < 0)
        return cf_error_set(d->err, CF_E_NOMEM, "%s: out of memory", path);
    return 0;
}

/* Reads an array or map header of the given kind and allocates n zeroed
 * elements of elsize bytes (one when n is 0).  n is bounded by the bytes
 * that remain (checked by the reader), so the allocation is too. */
static void *dec_list(dec *d, const char *path, unsigned depth, cf_mp_kind kind, const char *what, size_t elsize,
                      uint32_t *n)
{
    if (cf_mp_peek(&d->r) != kind) {
        dec_expect(d, path, what);
        return NULL;
    }
    int rc = kind == CF_MP_MAP ? cf_mp_read_map(&d->r, depth, n, d->err) : cf_mp_read_array(&d->r, depth, n, d->err);
    if (rc < 0) {
        dec_wrap(d, path);
        return NULL;
    }
    void *v = calloc(*n ? *n : 1, elsize);
    if (!v)
        cf_error_set(d->err, CF_E_NOMEM, "%s: out of memory", path);
    return v;
}

static int dec_strv(dec *d, const char *path, unsigned depth, char ***out, size_t *n_out)
{
    uint32_t n;
    char **v = dec_list(d, path, depth, CF_MP_ARRAY, "array of strings", sizeof(*v), &n);
    if (!v)
        return -1;
    free_strv(*out, *n_out);
    *out = v;
    *n_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        char ip[PATH_MAX_LEN];
        idx_path(ip, path, i);
        if (dec_str(d, ip, &v[i]) < 0)
            return -1;
        *n_out = i + 1;
    }
    return 0;
}

static int dec_strmap(dec *d, const char *path, unsigned depth, cf_strmap_entry **out, size_t *n_out)
{
    uint32_t n;
    cf_strmap_entry *m = dec_list(d, path, depth, CF_MP_MAP, "map of string to string", sizeof(*m), &n);
    if (!m)
        return -1;
    free_strmap(*out, *n_out);
    *out = m;
    *n_out = n; /* entries are zeroed: clear() copes with partial fills */
    for (uint32_t i = 0; i < n; i++) {
        char ip[PATH_MAX_LEN];
        idx_path(ip, path, i);
        if (dec_str(d, ip, &m[i].key) < 0 || dec_str(d, ip, &m[i].value) < 0)
            return -1;
    }
    return 0;
}

static int dec_files(dec *d, const char *path, unsigned depth, cf_request *req)
{
    uint32_t n;
    cf_file *f = dec_list(d, path, depth, CF_MP_MAP, "map of path to bytes", sizeof(*f), &n);
    if (!f)
        return -1;
    req->files = f;
    req->n_files = n;
    for (uint32_t i = 0; i < n; i++) {
        char ip[PATH_MAX_LEN];
        idx_path(ip, path, i);
        if (dec_str(d, ip, &f[i].path) < 0 || dec_bytes(d, ip, &f[i].content) < 0)
            return -1;
    }
    return 0;
}

/* Any msgpack value, kept as its raw bytes. */
static int dec_value(dec *d, const char *path, unsigned depth, cf_bytes *out)
{
    const uint8_t *start = d->r.p;
    if (cf_mp_skip(&d->r, depth, d->err) < 0)
        return dec_wrap(d, path);
    if (cf_bytes_set(out, start, (size_t)(d->r.p - start)) < 0)
        return cf_error_set(d->err, CF_E_NOMEM, "%s: out of memory", path);
    return 0;
}

static int dec_enum(dec *d, const char *path, const char *const *table, size_t n, int *out, const char *choices)
{
    const uint8_t *s;
    size_t len;
    if (cf_mp_read_str_field(&d->r, path, "string", &s, &len, d->err) < 0)
        return -1;
    int i = cf_name_index(table, 1, n, s, len); /* index 0 is "unspecified" */
    /* The value itself is not echoed: it is hostile and may be anything. */
    if (i < 0)
        return cf_error_set(d->err, CF_E_INVALID, "%s: unknown value (expected one of %s)", path, choices);
    *out = i;
    return 0;
}

/* Iterates a schema map: reads the header, then for each entry the key
 * (which must be a string) and hands known keys to the caller by index.
 * Unknown keys have their value skipped; duplicates of known keys are
 * refused. */
typedef int (*field_fn)(dec *d, void *obj, int idx, const char *path, unsigned depth);

static int dec_object(dec *d, const char *path, unsigned depth, const char *const *keys, size_t nkeys,
                      field_fn fn, void *obj, uint64_t *seen_out)
{
    if (cf_mp_peek(&d->r) != CF_MP_MAP)
        return dec_expect(d, path[0] ? path : "message", "map");
    uint32_t n;
    if (cf_mp_read_map(&d->r, depth, &n, d->err) < 0)
        return dec_wrap(d, path[0] ? path : "message");
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        size_t klen;
        if (cf_mp_read_str_field(&d->r, path[0] ? path : "message", "string keys", &k, &klen, d->err) < 0)
            return -1;
        int idx = cf_name_index(keys, 0, nkeys, k, klen);
        char fp[PATH_MAX_LEN];
        if (idx < 0) {
            /* Forward compatibility: newer minor versions add fields. */
            cf_field_path(fp, sizeof(fp), path, "(unknown field)");
            if (cf_mp_skip(&d->r, depth + 1, d->err) < 0)
                return dec_wrap(d, fp);
            continue;
        }
        cf_field_path(fp, sizeof(fp), path, keys[idx]);
        if (seen & (1ull << idx))
            return cf_error_set(d->err, CF_E_INVALID, "%s: duplicate field", fp);
        seen |= 1ull << idx;
        if (fn(d, obj, idx, fp, depth + 1) < 0)
            return -1;
    }
    if (seen_out)
        *seen_out = seen;
    return 0;
}

/* Request fields, in encoding order. */
enum {
    RQ_V, RQ_ID, RQ_LANGUAGE, RQ_BACKEND, RQ_CODE, RQ_ARGV, RQ_MODULE, RQ_STDIN, RQ_INPUT, RQ_ENV, RQ_FILES,
    RQ_POLICY, RQ_WORKSPACE, RQ_THREAD, RQ_IDENTITY, RQ_REPLY_TO, RQ_DEADLINE, RQ_CREATED, RQ_TRACE,
    RQ_HARNESS, RQ_COMPILE_FLAGS, RQ_CASES, RQ_STOP_ON_FAILURE, RQ_COLLECT, RQ_STREAM, RQ_IMAGE, RQ_NOTIFY_START,
    RQ_WORKSPACE_OP, RQ_SESSION, RQ__COUNT
};
static const char *const rq_keys[RQ__COUNT] = {
    "v", "id", "language", "backend", "code", "argv", "module", "stdin", "input", "env", "files",
    "policy", "workspace", "thread", "identity", "reply_to", "deadline_us", "created_us", "trace",
    "harness", "compile_flags", "cases", "stop_on_failure", "collect", "stream", "image", "notify_start",
    "workspace_op", "session",
};

enum { WO_OP, WO_PATH, WO_PATTERN, WO_CONTENT, WO_OLD, WO_NEW, WO_INSERT_LINE, WO_EXPECTED_REV, WO_FIRST_LINE,
       WO_LAST_LINE, WO__COUNT };
static const char *const wo_keys[WO__COUNT] = {"op", "path", "pattern", "content", "old_str", "new_str",
                                               "insert_line", "expected_revision", "first_line", "last_line"};

enum { CA_NAME, CA_STDIN, CA_INPUT, CA_ARGV, CA_EXPECT, CA__COUNT };
static const char *const ca_keys[CA__COUNT] = {"name", "stdin", "input", "argv", "expect_stdout"};

enum { PO_NETWORK, PO_FILESYSTEM, PO_ENV_ALLOW, PO_TIMEOUT, PO_CPU, PO_MEMORY, PO_PROCS, PO_STDOUT, PO_STDERR,
       PO_FSIZE, PO_COMPILE_TIMEOUT, PO_COMPILE_MEMORY, PO__COUNT };
static const char *const po_keys[PO__COUNT] = {
    "network", "filesystem", "env_allow", "timeout_us", "cpu_time_us", "memory_bytes", "max_processes",
    "max_stdout_bytes", "max_stderr_bytes", "max_file_size_bytes", "compile_timeout_us", "compile_memory_bytes",
};

enum { FS_MODE, FS_RO, FS_RW, FS__COUNT };
static const char *const fs_keys[FS__COUNT] = {"mode", "read_only", "read_write"};

static int fs_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_policy *p = obj;
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case FS_MODE: {
        int m;
        if (dec_enum(d, path, fs_names, NELEM(fs_names), &m, "none, workspace_ro, workspace_rw, paths") < 0)
            return -1;
        p->fs_mode = (cf_fs_mode)m;
        return 0;
    }
    case FS_RO: return dec_strv(d, path, depth, &p->fs_read_only, &p->n_fs_read_only);
    default: return dec_strv(d, path, depth, &p->fs_read_write, &p->n_fs_read_write);
    }
}

static int policy_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_policy *p = obj;
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case PO_NETWORK: {
        int m;
        if (dec_enum(d, path, net_names, NELEM(net_names), &m, "disabled, enabled") < 0)
            return -1;
        p->network = (cf_network_policy)m;
        return 0;
    }
    case PO_FILESYSTEM: return dec_object(d, path, depth, fs_keys, FS__COUNT, fs_field, p, NULL);
    case PO_ENV_ALLOW:
        p->env_allow_set = true;
        return dec_strv(d, path, depth, &p->env_allow, &p->n_env_allow);
    case PO_TIMEOUT: return dec_nonneg(d, path, &p->timeout_us);
    case PO_CPU: return dec_nonneg(d, path, &p->cpu_time_us);
    case PO_MEMORY: return dec_nonneg(d, path, &p->memory_bytes);
    case PO_PROCS: return dec_nonneg(d, path, &p->max_processes);
    case PO_STDOUT: return dec_nonneg(d, path, &p->max_stdout_bytes);
    case PO_STDERR: return dec_nonneg(d, path, &p->max_stderr_bytes);
    case PO_COMPILE_TIMEOUT: return dec_nonneg(d, path, &p->compile_timeout_us);
    case PO_COMPILE_MEMORY: return dec_nonneg(d, path, &p->compile_memory_bytes);
    default: return dec_nonneg(d, path, &p->max_file_size_bytes);
    }
}

static int case_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_case *c = obj;
    if (idx == CA_INPUT)
        return dec_value(d, path, depth, &c->input);
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case CA_NAME: return dec_str(d, path, &c->name);
    case CA_STDIN: return dec_bytes(d, path, &c->stdin_data);
    case CA_ARGV: return dec_strv(d, path, depth, &c->argv, &c->argc);
    default:
        c->has_expect = true;
        return dec_bytes(d, path, &c->expect_stdout);
    }
}

static int dec_cases(dec *d, const char *path, unsigned depth, cf_request *req)
{
    uint32_t n;
    cf_case *v = dec_list(d, path, depth, CF_MP_ARRAY, "array of maps", sizeof(*v), &n);
    if (!v)
        return -1;
    req->cases = v;
    req->n_cases = n;
    for (uint32_t i = 0; i < n; i++) {
        char ip[PATH_MAX_LEN];
        idx_path(ip, path, i);
        if (dec_object(d, ip, depth + 1, ca_keys, CA__COUNT, case_field, &v[i], NULL) < 0)
            return -1;
    }
    return 0;
}

static int workspace_op_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    (void)depth;
    cf_workspace_op *o = obj;
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case WO_OP: {
        int v;
        if (dec_enum(d, path, ws_op_names, CF_WS_OP__COUNT, &v, CF_WS_OP_CHOICES) < 0)
            return -1;
        o->op = (cf_ws_op)v;
        return 0;
    }
    case WO_PATH: return dec_str(d, path, &o->path);
    case WO_PATTERN: return dec_str(d, path, &o->pattern);
    case WO_CONTENT: o->has_content = true; return dec_bytes(d, path, &o->content);
    case WO_OLD: return dec_bytes(d, path, &o->old_str);
    case WO_NEW: o->has_new_str = true; return dec_bytes(d, path, &o->new_str);
    case WO_INSERT_LINE: o->has_insert_line = true; return dec_nonneg(d, path, &o->insert_line);
    case WO_FIRST_LINE: o->has_first_line = true; return dec_nonneg(d, path, &o->first_line);
    case WO_LAST_LINE: o->has_last_line = true; return dec_nonneg(d, path, &o->last_line);
    default: o->has_expected_revision = true; return dec_nonneg(d, path, &o->expected_revision);
    }
}

static int request_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_request *req = obj;
    switch (idx) {
    case RQ_V: return cf_mp_skip(&d->r, depth, d->err); /* checked by the first pass */
    case RQ_ID: return dec_str(d, path, &req->id);
    case RQ_LANGUAGE: {
        int l;
        if (dec_enum(d, path, lang_names, CF_LANG__COUNT, &l,
                     "command, shell, python, javascript, wasm, c, cpp, rust, go, typescript") < 0)
            return -1;
        req->language = (cf_language)l;
        return 0;
    }
    case RQ_INPUT: return dec_value(d, path, depth, &req->input); /* nil is a value here */
    default: break;
    }
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case RQ_BACKEND: return dec_str(d, path, &req->backend);
    case RQ_CODE: return dec_bytes(d, path, &req->code);
    case RQ_ARGV: return dec_strv(d, path, depth, &req->argv, &req->argc);
    case RQ_MODULE: return dec_bytes(d, path, &req->module);
    case RQ_STDIN: return dec_bytes(d, path, &req->stdin_data);
    case RQ_ENV: return dec_strmap(d, path, depth, &req->env, &req->n_env);
    case RQ_FILES: return dec_files(d, path, depth, req);
    case RQ_POLICY: return dec_object(d, path, depth, po_keys, PO__COUNT, policy_field, &req->policy, NULL);
    case RQ_WORKSPACE: return dec_str(d, path, &req->workspace);
    case RQ_THREAD: return dec_str(d, path, &req->thread);
    case RQ_IDENTITY: return dec_str(d, path, &req->identity);
    case RQ_REPLY_TO: return dec_str(d, path, &req->reply_to);
    case RQ_DEADLINE: return dec_nonneg(d, path, &req->deadline_us);
    case RQ_CREATED: return dec_nonneg(d, path, &req->created_us);
    case RQ_HARNESS: {
        int h;
        if (dec_enum(d, path, harness_names, NELEM(harness_names), &h, "function") < 0)
            return -1;
        req->harness = (cf_harness)h;
        return 0;
    }
    case RQ_COMPILE_FLAGS: return dec_strv(d, path, depth, &req->compile_flags, &req->n_compile_flags);
    case RQ_CASES: return dec_cases(d, path, depth, req);
    case RQ_STOP_ON_FAILURE: return dec_bool(d, path, &req->stop_on_failure);
    case RQ_COLLECT: return dec_strv(d, path, depth, &req->collect, &req->n_collect);
    case RQ_STREAM: return dec_bool(d, path, &req->stream);
    case RQ_NOTIFY_START: return dec_bool(d, path, &req->notify_start);
    case RQ_IMAGE: return dec_str(d, path, &req->image);
    case RQ_WORKSPACE_OP:
        if (!(req->workspace_op = calloc(1, sizeof(*req->workspace_op))))
            return cf_error_set(d->err, CF_E_NOMEM, "%s: out of memory", path);
        return dec_object(d, path, depth, wo_keys, WO__COUNT, workspace_op_field, req->workspace_op, NULL);
    case RQ_SESSION: return dec_str(d, path, &req->session);
    case RQ_TRACE: return dec_strmap(d, path, depth, &req->trace, &req->n_trace);
    default: return cf_error_set(d->err, CF_E_INVALID, "%s: unexpected field", path);
    }
}

enum {
    RS_V, RS_ID, RS_STATUS, RS_EXIT, RS_SIGNAL, RS_STDOUT, RS_STDERR, RS_STDOUT_TR, RS_STDERR_TR, RS_OUTPUT,
    RS_DIAG, RS_WALL, RS_CPU, RS_PEAK, RS_META, RS_REASON, RS_REPLY_ERR, RS_WSREV, RS_CHANGED, RS_CONFLICT,
    RS_CP_ID, RS_CP_CONFLICT, RS_FINISHED, RS_COMPILE, RS_CASES, RS_FILES, RS_FILES_TR, RS_CHUNKS,
    RS_SESSION_CELL, RS_SESSION_RESTORED, RS_SESSION_LOST, RS__COUNT
};
static const char *const rs_keys[RS__COUNT] = {
    "v", "id", "status", "exit_code", "signal", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
    "output", "diagnostics", "wall_time_us", "cpu_time_us", "peak_memory_bytes", "metadata", "reason",
    "reply_to_error", "workspace_revision", "changed_paths", "workspace_conflict", "checkpoint_id", "checkpoint_conflict",
    "finished_us", "compile", "cases", "files", "files_truncated", "chunks",
    "session_cell", "session_restored", "session_lost",
};

enum { CP_CACHED, CP_WALL, CP_CPU, CP_PEAK, CP__COUNT };
static const char *const cp_keys[CP__COUNT] = {"cached", "wall_time_us", "cpu_time_us", "peak_memory_bytes"};

enum { CR_NAME, CR_STATUS, CR_EXIT, CR_SIGNAL, CR_STDOUT, CR_STDERR, CR_STDOUT_TR, CR_STDERR_TR, CR_OUTPUT, CR_WALL,
       CR_CPU, CR_PEAK, CR_MATCH, CR_REASON, CR__COUNT };
static const char *const cr_keys[CR__COUNT] = {
    "name", "status", "exit_code", "signal", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
    "output", "wall_time_us", "cpu_time_us", "peak_memory_bytes", "match", "reason",
};

enum { OF_PATH, OF_SIZE, OF_CONTENT, OF_TRUNCATED, OF__COUNT };
static const char *const of_keys[OF__COUNT] = {"path", "size", "content", "truncated"};

enum { MD_BACKEND, MD_ISOLATION, MD_LANGUAGE, MD_WORKER, MD_IDENTITY, MD_ATTEMPT, MD_REPLAY, MD_TOOLCHAIN, MD_SANDBOX,
       MD_RUN, MD_TRACEPARENT, MD__COUNT };
static const char *const md_keys[MD__COUNT] = {"backend",  "isolation", "language", "worker", "identity",
                                               "attempt",  "replay",    "toolchain", "sandbox", "run",
                                               "traceparent"};

enum { DG_LEVEL, DG_MESSAGE, DG_FILE, DG_LINE, DG_COLUMN, DG_CODE, DG_END_LINE, DG_END_COLUMN, DG_CHILDREN,
       DG__COUNT };
static const char *const dg_keys[DG__COUNT] = {"level",    "message",    "file",      "line",    "column",
                                               "code",     "end_line",   "end_column", "children"};

static int meta_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_result_meta *m = obj;
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case MD_BACKEND: return dec_str(d, path, &m->backend);
    case MD_ISOLATION: return dec_str(d, path, &m->isolation);
    case MD_LANGUAGE: return dec_str(d, path, &m->language);
    case MD_WORKER: return dec_str(d, path, &m->worker);
    case MD_IDENTITY: return dec_str(d, path, &m->identity);
    case MD_REPLAY: return dec_bool(d, path, &m->replay);
    case MD_TOOLCHAIN: return dec_str(d, path, &m->toolchain);
    case MD_SANDBOX: return dec_str(d, path, &m->sandbox);
    case MD_RUN: return dec_str(d, path, &m->run);
    case MD_TRACEPARENT: return dec_str(d, path, &m->traceparent);
    default: return dec_nonneg(d, path, &m->attempt);
    }
}

static int dec_diag_list(dec *d, const char *path, unsigned depth, cf_diagnostic **out, size_t *n_out);

static int diag_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_diagnostic *dg = obj;
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case DG_LEVEL: return dec_str(d, path, &dg->level);
    case DG_MESSAGE: return dec_str(d, path, &dg->message);
    case DG_FILE: return dec_str(d, path, &dg->file);
    case DG_LINE: return dec_nonneg(d, path, &dg->line);
    case DG_CODE: return dec_str(d, path, &dg->code);
    case DG_END_LINE: return dec_nonneg(d, path, &dg->end_line);
    case DG_END_COLUMN: return dec_nonneg(d, path, &dg->end_column);
    case DG_CHILDREN: return dec_diag_list(d, path, depth, &dg->children, &dg->n_children);
    default: return dec_nonneg(d, path, &dg->column);
    }
}

/* Children nest one level only (result_check refuses deeper ones); the
 * depth limit bounds the recursion before that. */
static int dec_diag_list(dec *d, const char *path, unsigned depth, cf_diagnostic **out, size_t *n_out)
{
    uint32_t n;
    cf_diagnostic *v = dec_list(d, path, depth, CF_MP_ARRAY, "array of maps", sizeof(*v), &n);
    if (!v)
        return -1;
    *out = v;
    *n_out = n;
    for (uint32_t i = 0; i < n; i++) {
        char ip[PATH_MAX_LEN];
        idx_path(ip, path, i);
        if (dec_object(d, ip, depth + 1, dg_keys, DG__COUNT, diag_field, &v[i], NULL) < 0)
            return -1;
    }
    return 0;
}

static int dec_diagnostics(dec *d, const char *path, unsigned depth, cf_result *res)
{
    return dec_diag_list(d, path, depth, &res->diagnostics, &res->n_diagnostics);
}

static int compile_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    (void)depth;
    cf_compile_info *c = obj;
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case CP_CACHED: return dec_bool(d, path, &c->cached);
    case CP_WALL: return dec_nonneg(d, path, &c->wall_time_us);
    case CP_CPU: return dec_nonneg(d, path, &c->cpu_time_us);
    default: return dec_nonneg(d, path, &c->peak_memory_bytes);
    }
}

static int dec_status(dec *d, const char *path, cf_status *out)
{
    const uint8_t *sv;
    size_t len;
    if (cf_mp_read_str_field(&d->r, path, "string", &sv, &len, d->err) < 0)
        return -1;
    /* status names have no "unspecified" slot: index from 0 */
    int s = cf_name_index(status_names, 0, CF_STATUS__COUNT, sv, len);
    if (s < 0)
        return cf_error_set(d->err, CF_E_INVALID, "%s: unknown value", path);
    *out = (cf_status)s;
    return 0;
}

static int case_result_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_case_result *c = obj;
    if (idx == CR_OUTPUT)
        return dec_value(d, path, depth, &c->output);
    if (dec_nil(d))
        return 0;
    int64_t v;
    bool b;
    switch (idx) {
    case CR_NAME: return dec_str(d, path, &c->name);
    case CR_STATUS: return dec_status(d, path, &c->status);
    case CR_EXIT:
        if (dec_integer(d, path, INT32_MIN, INT32_MAX, &v, "32-bit integer") < 0)
            return -1;
        c->has_exit_code = true;
        c->exit_code = (int)v;
        return 0;
    case CR_SIGNAL:
        if (dec_integer(d, path, 0, INT32_MAX, &v, "non-negative 32-bit integer") < 0)
            return -1;
        c->signal = (int)v;
        return 0;
    case CR_STDOUT: return dec_bytes(d, path, &c->stdout_data);
    case CR_STDERR: return dec_bytes(d, path, &c->stderr_data);
    case CR_STDOUT_TR: return dec_bool(d, path, &c->stdout_truncated);
    case CR_STDERR_TR: return dec_bool(d, path, &c->stderr_truncated);
    case CR_WALL: return dec_nonneg(d, path, &c->wall_time_us);
    case CR_CPU: return dec_nonneg(d, path, &c->cpu_time_us);
    case CR_PEAK: return dec_nonneg(d, path, &c->peak_memory_bytes);
    case CR_MATCH:
        if (dec_bool(d, path, &b) < 0)
            return -1;
        c->match = b ? 1 : -1;
        return 0;
    default: return dec_str(d, path, &c->reason);
    }
}

static int dec_case_results(dec *d, const char *path, unsigned depth, cf_result *res)
{
    uint32_t n;
    cf_case_result *v = dec_list(d, path, depth, CF_MP_ARRAY, "array of maps", sizeof(*v), &n);
    if (!v)
        return -1;
    res->cases = v;
    res->n_cases = n;
    for (uint32_t i = 0; i < n; i++) {
        char ip[PATH_MAX_LEN];
        idx_path(ip, path, i);
        uint64_t seen = 0;
        if (dec_object(d, ip, depth + 1, cr_keys, CR__COUNT, case_result_field, &v[i], &seen) < 0)
            return -1;
        if (!(seen & (1ull << CR_STATUS)))
            return cf_error_set(d->err, CF_E_INVALID, "%s: missing required field \"status\"", ip);
    }
    return 0;
}

static int out_file_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    (void)depth;
    cf_out_file *f = obj;
    if (dec_nil(d))
        return 0;
    switch (idx) {
    case OF_PATH: return dec_str(d, path, &f->path);
    case OF_SIZE: return dec_nonneg(d, path, &f->size);
    case OF_CONTENT: return dec_bytes(d, path, &f->content);
    default: return dec_bool(d, path, &f->truncated);
    }
}

static int dec_out_files(dec *d, const char *path, unsigned depth, cf_result *res)
{
    uint32_t n;
    cf_out_file *v = dec_list(d, path, depth, CF_MP_ARRAY, "array of maps", sizeof(*v), &n);
    if (!v)
        return -1;
    res->files = v;
    res->n_files = n;
    for (uint32_t i = 0; i < n; i++) {
        char ip[PATH_MAX_LEN];
        idx_path(ip, path, i);
        uint64_t seen = 0;
        if (dec_object(d, ip, depth + 1, of_keys, OF__COUNT, out_file_field, &v[i], &seen) < 0)
            return -1;
        v[i].listed = !(seen & (1ull << OF_CONTENT)); /* a listing's entry */
    }
    return 0;
}

static int result_field(dec *d, void *obj, int idx, const char *path, unsigned depth)
{
    cf_result *res = obj;
    switch (idx) {
    case RS_V: return cf_mp_skip(&d->r, depth, d->err);
    case RS_ID: return dec_str(d, path, &res->id);
    case RS_STATUS: return dec_status(d, path, &res->status);
    case RS_OUTPUT: return dec_value(d, path, depth, &res->output);
    default: break;
    }
    if (dec_nil(d))
        return 0;
    int64_t v;
    switch (idx) {
    case RS_EXIT:
        if (dec_integer(d, path, INT32_MIN, INT32_MAX, &v, "32-bit integer") < 0)
            return -1;
        res->has_exit_code = true;
        res->exit_code = (int)v;
        return 0;
    case RS_SIGNAL:
        if (dec_integer(d, path, 0, INT32_MAX, &v, "non-negative 32-bit integer") < 0)
            return -1;
        res->signal = (int)v;
        return 0;
    case RS_STDOUT: return dec_bytes(d, path, &res->stdout_data);
    case RS_STDERR: return dec_bytes(d, path, &res->stderr_data);
    case RS_STDOUT_TR: return dec_bool(d, path, &res->stdout_truncated);
    case RS_STDERR_TR: return dec_bool(d, path, &res->stderr_truncated);
    case RS_DIAG: return dec_diagnostics(d, path, depth, res);
    case RS_WALL: return dec_nonneg(d, path, &res->wall_time_us);
    case RS_CPU: return dec_nonneg(d, path, &res->cpu_time_us);
    case RS_PEAK: return dec_nonneg(d, path, &res->peak_memory_bytes);
    case RS_META: return dec_object(d, path, depth, md_keys, MD__COUNT, meta_field, &res->meta, NULL);
    case RS_REASON: return dec_str(d, path, &res->reason);
    case RS_REPLY_ERR: return dec_str(d, path, &res->reply_to_error);
    case RS_WSREV: return dec_nonneg(d, path, &res->workspace_revision);
    case RS_CHANGED: return dec_strv(d, path, depth, &res->changed_paths, &res->n_changed_paths);
    case RS_CONFLICT: return dec_bool(d, path, &res->workspace_conflict);
    case RS_CP_ID: return dec_str(d, path, &res->checkpoint_id);
    case RS_CP_CONFLICT: return dec_bool(d, path, &res->checkpoint_conflict);
    case RS_COMPILE:
        res->compile.present = true;
        return dec_object(d, path, depth, cp_keys, CP__COUNT, compile_field, &res->compile, NULL);
    case RS_CASES: return dec_case_results(d, path, depth, res);
    case RS_FILES: return dec_out_files(d, path, depth, res);
    case RS_FILES_TR: return dec_bool(d, path, &res->files_truncated);
    case RS_CHUNKS: return dec_nonneg(d, path, &res->chunks);
    case RS_SESSION_CELL: return dec_nonneg(d, path, &res->session_cell);
    case RS_SESSION_RESTORED: return dec_bool(d, path, &res->session_restored);
    case RS_SESSION_LOST: return dec_strv(d, path, depth, &res->session_lost, &res->n_session_lost);
    default: return dec_nonneg(d, path, &res->finished_us);
    }
}

int cf_request_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_request *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    dec d = {.lim = limits ? limits : &cf_decode_limits_default, .err = err};
    if (cf_msg_prescan(buf, len, d.lim, NULL, 0, err) < 0)
        return -1;
    cf_mp_reader_init(&d.r, buf, len, d.lim);
    if (dec_object(&d, "", 1, rq_keys, RQ__COUNT, request_field, out, NULL) < 0 || cf_request_check_mode(out, false, err) < 0) {
        cf_request_clear(out);
        return -1;
    }
    return 0;
}

int cf_result_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_result *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    dec d = {.lim = limits ? limits : &cf_decode_limits_default, .err = err};
    if (cf_msg_prescan(buf, len, d.lim, NULL, 0, err) < 0)
        return -1;
    cf_mp_reader_init(&d.r, buf, len, d.lim);
    uint64_t seen = 0;
    if (dec_object(&d, "", 1, rs_keys, RS__COUNT, result_field, out, &seen) < 0) {
        cf_result_clear(out);
        return -1;
    }
    /* status is required: its zero value is "success", so check presence
     * on the wire rather than in the struct. */
    if (out->id && !(seen & (1ull << RS_STATUS))) {
        cf_error_set(err, CF_E_INVALID, "missing required field \"status\"");
        cf_result_clear(out);
        return -1;
    }
    if (cf_result_check_mode(out, false, err) < 0) {
        cf_result_clear(out);
        return -1;
    }
    return 0;
}

int cf_request_peek_id(const void *buf, size_t len, char *id, size_t idsz)
{
    if (!id || idsz == 0)
        return -1;
    id[0] = '\0';
    if (!buf || len == 0)
        return -1;
    cf_mp_reader r;
    cf_mp_reader_init(&r, buf, len, NULL);
    uint8_t b = *r.p;
    uint64_t n;
    /* Read the header by hand: a lying count must not stop us from finding
     * an "id" that comes early; the loop below stops at the buffer end. */
    if (b >= 0x80 && b <= 0x8f) {
        n = b & 0x0f;
        r.p++;
    } else if ((b == 0xde && len >= 3) || (b == 0xdf && len >= 5)) {
        unsigned w = b == 0xde ? 2 : 4;
        n = 0;
        for (unsigned i = 1; i <= w; i++)
            n = (n << 8) | r.p[i];
        r.p += 1 + w;
    } else {
        return -1;
    }
    for (uint64_t i = 0; i < n && r.p < r.end; i++) {
        const uint8_t *k;
        size_t klen;
        if (cf_mp_peek(&r) == CF_MP_STR) {
            if (cf_mp_read_str(&r, cf_decode_limits_default.max_str_bytes, &k, &klen, NULL) < 0)
                return -1;
        } else {
            k = NULL;
            klen = 0;
            if (cf_mp_skip(&r, 2, NULL) < 0)
                return -1;
        }
        if (klen == 2 && memcmp(k, "id", 2) == 0) {
            const uint8_t *s;
            size_t slen;
            if (cf_mp_read_str(&r, CF_ID_MAX, &s, &slen, NULL) < 0)
                return -1;
            if (!cf_id_valid((const char *)s, slen) || slen >= idsz)
                return -1;
            memcpy(id, s, slen);
            id[slen] = '\0';
            return 0;
        }
        if (cf_mp_skip(&r, 2, NULL) < 0)
            return -1;
    }
    return -1;
}

int cf_msgpack_validate(const void *buf, size_t len, const cf_decode_limits *limits, cf_error *err)
{
    const cf_decode_limits *lim = limits ? limits : &cf_decode_limits_default;
    if (!buf || len == 0)
        return cf_error_set(err, CF_E_INVALID, "empty value");
    if (len > lim->max_total_bytes)
        return cf_error_set(err, CF_E_LIMIT, "value of %zu bytes exceeds the limit of %zu", len,
                            lim->max_total_bytes);
    cf_mp_reader r;
    cf_mp_reader_init(&r, buf, len, lim);
    if (cf_mp_skip(&r, 1, err) < 0)
        return -1;
    if (r.p != r.end)
        return cf_error_set(err, CF_E_INVALID, "%zu trailing bytes after the value", cf_mp_remaining(&r));
    return 0;
}
