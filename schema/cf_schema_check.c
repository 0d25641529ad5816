/* cf_schema_check: the semantic checks of requests and results, shared by
 * the msgpack and JSON codecs and run by the encoders (SPEC.md is the rule
 * book; cf_schema.c decodes the structure, this file judges the content). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema.h"
#include "cf_schema_int.h"
#include "cf_util.h"

/* ---- semantic checks (shared by msgpack, JSON and the encoders) ------- */

static int strv_check(char *const *v, size_t n, const char *field, cf_error *err)
{
    if (n && !v)
        return cf_error_set(err, CF_E_INVALID, "%s: %zu entries but no array", field, n);
    for (size_t i = 0; i < n; i++)
        if (!v[i])
            return cf_error_set(err, CF_E_INVALID, "%s[%zu]: missing string", field, i);
    return 0;
}

static int strcmp_p(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Duplicate keys make env/files ambiguous: sort a copy (n log n, n is
 * bounded by max_elements) and compare neighbours. */
static int dup_check(const char **keys, size_t n, const char *field, cf_error *err)
{
    if (n < 2)
        return 0;
    qsort(keys, n, sizeof(*keys), strcmp_p);
    for (size_t i = 1; i < n; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            return cf_error_set(err, CF_E_INVALID, "%s: duplicate key", field);
    return 0;
}

static int strmap_check(const cf_strmap_entry *m, size_t n, const char *field, bool env_names, cf_error *err)
{
    if (n && !m)
        return cf_error_set(err, CF_E_INVALID, "%s: %zu entries but no array", field, n);
    const char **keys = malloc((n ? n : 1) * sizeof(*keys));
    if (!keys)
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", field);
    for (size_t i = 0; i < n; i++) {
        if (!m[i].key || !m[i].value) {
            free(keys);
            return cf_error_set(err, CF_E_INVALID, "%s[%zu]: missing key or value", field, i);
        }
        /* An environment name with '=' or an empty one cannot be set. */
        if (env_names && (m[i].key[0] == '\0' || strchr(m[i].key, '='))) {
            free(keys);
            return cf_error_set(err, CF_E_INVALID, "%s[%zu]: invalid variable name", field, i);
        }
        keys[i] = m[i].key;
    }
    int rc = dup_check(keys, n, field, err);
    free(keys);
    return rc;
}

int cf_value_check_nested(const cf_bytes *v, const char *field, unsigned outer_levels, cf_error *err)
{
    if (v->len == 0)
        return 0;
    /* The value sits inside outer_levels containers of the message: that
     * much less depth for it, or the whole message would not decode. */
    cf_decode_limits lim = cf_decode_limits_default;
    lim.max_depth = lim.max_depth > outer_levels ? lim.max_depth - outer_levels : 0;
    if (cf_msgpack_validate(v->data, v->len, &lim, err) < 0)
        return cf_error_wrap(err, "%s", field);
    return 0;
}

int cf_value_check(const cf_bytes *v, const char *field, cf_error *err)
{
    return cf_value_check_nested(v, field, 1, err); /* inside the top-level map */
}

#define NONNEG(val, name)                                                                          \
    do {                                                                                           \
        if ((val) < 0)                                                                             \
            return cf_error_set(err, CF_E_INVALID, "%s: expected non-negative integer", name);    \
    } while (0)

/* A workspace operation stands alone: its workspace, its op's fields and
 * the fields every request may carry (id, identity, reply_to, deadline,
 * trace, output caps); anything that belongs to a program is refused
 * rather than ignored. */
static int workspace_op_check(const cf_request *req, cf_error *err)
{
    const cf_workspace_op *o = req->workspace_op;
    if ((unsigned)o->op <= CF_WS_OP_NONE || (unsigned)o->op >= CF_WS_OP__COUNT)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.op: required (one of " CF_WS_OP_CHOICES ")");
    const char *on = cf_ws_op_name(o->op);
    if (!req->workspace)
        return cf_error_set(err, CF_E_INVALID, "workspace_op: needs \"workspace\"");
    const struct {
        const char *name;
        bool set;
    } program[] = {
        {"language", req->language != CF_LANG_NONE}, {"backend", req->backend != NULL},
        {"code", req->code.data != NULL},            {"argv", req->argc > 0},
        {"module", req->module.len > 0},             {"stdin", req->stdin_data.len > 0},
        {"input", req->input.len > 0},               {"env", req->n_env > 0},
        {"files", req->n_files > 0},                 {"thread", req->thread != NULL},
        {"harness", req->harness != CF_HARNESS_NONE}, {"compile_flags", req->n_compile_flags > 0},
        {"cases", req->n_cases > 0},                 {"collect", req->n_collect > 0},
        {"stream", req->stream},                     {"image", req->image != NULL},
        {"session", req->session != NULL},
        {"policy.network", req->policy.network != CF_NET_UNSPECIFIED},
        {"policy.filesystem", req->policy.fs_mode != CF_FS_UNSPECIFIED || req->policy.n_fs_read_only ||
                                  req->policy.n_fs_read_write},
        {"policy.env_allow", req->policy.env_allow_set},
    };
    for (size_t i = 0; i < sizeof(program) / sizeof(program[0]); i++)
        if (program[i].set)
            return cf_error_set(err, CF_E_INVALID, "%s: not with workspace_op (no program runs)", program[i].name);
    if (o->op == CF_WS_OP_APPLY_PATCH && o->path)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.path: not with apply_patch (the patch names its files)");
    bool needs_path = o->op != CF_WS_OP_LIST && o->op != CF_WS_OP_GREP && o->op != CF_WS_OP_APPLY_PATCH;
    if (needs_path && (!o->path || !o->path[0]))
        return cf_error_set(err, CF_E_INVALID, "workspace_op.path: required for %s", on);
    if (o->path && !o->path[0])
        return cf_error_set(err, CF_E_INVALID, "workspace_op.path: empty");
    if (o->path && o->op == CF_WS_OP_LIST)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.path: not with list (pattern narrows it)");
    if (o->pattern && o->op != CF_WS_OP_LIST && o->op != CF_WS_OP_GREP)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.pattern: only for list and grep");
    if (o->op == CF_WS_OP_GREP && (!o->pattern || !o->pattern[0]))
        return cf_error_set(err, CF_E_INVALID, "workspace_op.pattern: required and non-empty for grep");
    if (o->pattern && !o->pattern[0])
        return cf_error_set(err, CF_E_INVALID, "workspace_op.pattern: empty");
    bool takes_content = o->op == CF_WS_OP_WRITE || o->op == CF_WS_OP_APPLY_PATCH;
    if (takes_content != o->has_content)
        return cf_error_set(err, CF_E_INVALID, o->has_content ? "workspace_op.content: only for write and apply_patch"
                                                             : "workspace_op.content: required for %s", on);
    if (o->old_str.data && o->op != CF_WS_OP_STR_REPLACE)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.old_str: only for str_replace");
    if (o->op == CF_WS_OP_STR_REPLACE && o->old_str.len == 0)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.old_str: required and non-empty for str_replace");
    if (o->has_new_str && o->op != CF_WS_OP_STR_REPLACE && o->op != CF_WS_OP_INSERT)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.new_str: only for str_replace and insert");
    if (o->op == CF_WS_OP_INSERT && (!o->has_new_str || !o->has_insert_line))
        return cf_error_set(err, CF_E_INVALID, "workspace_op: insert needs insert_line and new_str");
    if (o->has_insert_line && o->op != CF_WS_OP_INSERT)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.insert_line: only for insert");
    if (o->has_insert_line && o->insert_line < 0)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.insert_line: expected non-negative integer");
    if ((o->has_first_line || o->has_last_line) && o->op != CF_WS_OP_READ)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.%s: only for read",
                            o->has_first_line ? "first_line" : "last_line");
    if (o->has_first_line && o->first_line < 1)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.first_line: lines count from 1");
    if (o->has_last_line && o->last_line < (o->has_first_line ? o->first_line : 1))
        return cf_error_set(err, CF_E_INVALID, "workspace_op.last_line: before first_line");
    if (o->has_expected_revision && !cf_ws_op_writes(o->op))
        return cf_error_set(err, CF_E_INVALID,
                            "workspace_op.expected_revision: only for write, delete, str_replace, insert and "
                            "apply_patch");
    if (o->has_expected_revision && o->expected_revision < 0)
        return cf_error_set(err, CF_E_INVALID, "workspace_op.expected_revision: expected non-negative integer");
    const cf_policy *p = &req->policy;
    NONNEG(p->max_stdout_bytes, "policy.max_stdout_bytes");
    NONNEG(req->deadline_us, "deadline_us");
    NONNEG(req->created_us, "created_us");
    return strmap_check(req->trace, req->n_trace, "trace", false, err);
}

/* A session cell (SPEC 3.6): python code run in the session's workspace,
 * whose variables the worker's session driver keeps; nothing that runs the
 * code another way, and no other view of the workspace. */
static int session_check(const cf_request *req, cf_error *err)
{
    const char *s = req->session;
    size_t n = strlen(s);
    if (n == 0 || n > 128 || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
        return cf_error_set(err, CF_E_INVALID, "session: must be 1..128 characters of [A-Za-z0-9._-]");
    if (req->language != CF_LANG_PYTHON && req->language != CF_LANG_SHELL)
        return cf_error_set(err, CF_E_INVALID,
                            "session: only languages \"python\" and \"shell\" have sessions (not \"%s\")",
                            cf_language_name(req->language));
    if (req->harness != CF_HARNESS_NONE || req->n_cases || req->thread)
        return cf_error_set(err, CF_E_INVALID, "session: not with %s (a cell is one run of the session's code)",
                            req->harness != CF_HARNESS_NONE ? "harness" : req->n_cases ? "cases" : "thread");
    if (req->policy.fs_mode != CF_FS_UNSPECIFIED && req->policy.fs_mode != CF_FS_WORKSPACE_RW)
        return cf_error_set(err, CF_E_INVALID,
                            "session: policy.filesystem.mode must be workspace_rw or absent (a cell saves its state "
                            "into the workspace)");
    return 0;
}

/* check_values: re-validate input/output.  The decoders skip it: they
 * already validated the value under the caller's (maybe larger) limits. */
int cf_request_check_mode(const cf_request *req, bool check_values, cf_error *err)
{
    if (!req->id)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"id\"");
    if (!cf_id_valid(req->id, strlen(req->id)))
        return cf_error_set(err, CF_E_INVALID, "id: must be 1..%d printable ASCII characters without spaces",
                            CF_ID_MAX);
    if (req->workspace_op)
        return workspace_op_check(req, err);
    if (req->language <= CF_LANG_NONE || req->language >= CF_LANG__COUNT)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"language\"");
    const char *ln = cf_language_name(req->language);
    switch (req->language) {
    case CF_LANG_COMMAND:
        if (req->argc == 0)
            return cf_error_set(err, CF_E_INVALID, "argv: required and non-empty for language \"%s\"", ln);
        break;
    case CF_LANG_WASM:
        if (!req->module.data || req->module.len == 0)
            return cf_error_set(err, CF_E_INVALID, "module: required for language \"%s\"", ln);
        break;
    default:
        if (!req->code.data)
            return cf_error_set(err, CF_E_INVALID, "code: required for language \"%s\"", ln);
        break;
    }
    if (req->session && session_check(req, err) < 0)
        return -1;
    if (strv_check(req->argv, req->argc, "argv", err) < 0)
        return -1;
    if (req->image && !cf_image_name_valid(req->image))
        return cf_error_set(err, CF_E_INVALID,
                            "image: must be 1..%d characters of a-z, 0-9, '.', '_' and '-', starting with a letter or "
                            "digit", CF_IMAGE_NAME_MAX);
    if (req->argc && req->argv[0][0] == '\0' && req->language == CF_LANG_COMMAND)
        return cf_error_set(err, CF_E_INVALID, "argv[0]: empty program name");
    if (check_values && cf_value_check(&req->input, "input", err) < 0)
        return -1;
    if (strmap_check(req->env, req->n_env, "env", true, err) < 0)
        return -1;
    if (req->n_files && !req->files)
        return cf_error_set(err, CF_E_INVALID, "files: %zu entries but no array", req->n_files);
    if (req->n_files) {
        const char **keys = malloc(req->n_files * sizeof(*keys));
        if (!keys)
            return cf_error_set(err, CF_E_NOMEM, "files: out of memory");
        for (size_t i = 0; i < req->n_files; i++) {
            if (!req->files[i].path || req->files[i].path[0] == '\0') {
                free(keys);
                return cf_error_set(err, CF_E_INVALID, "files[%zu]: empty path", i);
            }
            keys[i] = req->files[i].path;
        }
        int rc = dup_check(keys, req->n_files, "files", err);
        free(keys);
        if (rc < 0)
            return -1;
    }
    const cf_policy *p = &req->policy;
    if ((unsigned)p->network > CF_NET_ENABLED)
        return cf_error_set(err, CF_E_INVALID, "policy.network: unknown value");
    if ((unsigned)p->fs_mode > CF_FS_PATHS)
        return cf_error_set(err, CF_E_INVALID, "policy.filesystem.mode: unknown value");
    if (strv_check(p->fs_read_only, p->n_fs_read_only, "policy.filesystem.read_only", err) < 0 ||
        strv_check(p->fs_read_write, p->n_fs_read_write, "policy.filesystem.read_write", err) < 0 ||
        strv_check(p->env_allow, p->n_env_allow, "policy.env_allow", err) < 0)
        return -1;
    if ((p->n_fs_read_only || p->n_fs_read_write) && p->fs_mode != CF_FS_PATHS)
        return cf_error_set(err, CF_E_INVALID,
                            "policy.filesystem: read_only/read_write are only valid with mode \"paths\"");
    NONNEG(p->timeout_us, "policy.timeout_us");
    NONNEG(p->cpu_time_us, "policy.cpu_time_us");
    NONNEG(p->memory_bytes, "policy.memory_bytes");
    NONNEG(p->max_processes, "policy.max_processes");
    NONNEG(p->max_stdout_bytes, "policy.max_stdout_bytes");
    NONNEG(p->max_stderr_bytes, "policy.max_stderr_bytes");
    NONNEG(p->max_file_size_bytes, "policy.max_file_size_bytes");
    NONNEG(req->deadline_us, "deadline_us");
    NONNEG(req->created_us, "created_us");
    if (strmap_check(req->trace, req->n_trace, "trace", false, err) < 0)
        return -1;
    NONNEG(p->compile_timeout_us, "policy.compile_timeout_us");
    NONNEG(p->compile_memory_bytes, "policy.compile_memory_bytes");
    if ((unsigned)req->harness > CF_HARNESS_FUNCTION)
        return cf_error_set(err, CF_E_INVALID, "harness: unknown value");
    if (req->harness == CF_HARNESS_FUNCTION && req->language != CF_LANG_PYTHON &&
        req->language != CF_LANG_JAVASCRIPT && req->language != CF_LANG_TYPESCRIPT && req->language != CF_LANG_RUST)
        return cf_error_set(err, CF_E_INVALID,
                            "harness: \"function\" is available for python, javascript, typescript and rust, not %s",
                            ln);
    if (req->n_compile_flags > CF_COMPILE_FLAGS_MAX)
        return cf_error_set(err, CF_E_INVALID, "compile_flags: more than %d", CF_COMPILE_FLAGS_MAX);
    if (strv_check(req->compile_flags, req->n_compile_flags, "compile_flags", err) < 0)
        return -1;
    if (req->n_compile_flags && !cf_language_compiled(req->language))
        return cf_error_set(err, CF_E_INVALID, "compile_flags: language %s is not compiled", ln);
    if (req->n_collect > CF_COLLECT_MAX)
        return cf_error_set(err, CF_E_INVALID, "collect: more than %d patterns", CF_COLLECT_MAX);
    if (strv_check(req->collect, req->n_collect, "collect", err) < 0)
        return -1;
    for (size_t i = 0; i < req->n_collect; i++)
        if (req->collect[i][0] == '\0')
            return cf_error_set(err, CF_E_INVALID, "collect[%zu]: empty pattern", i);
    if (req->n_cases > CF_CASES_MAX)
        return cf_error_set(err, CF_E_INVALID, "cases: more than %d", CF_CASES_MAX);
    if (req->n_cases && !req->cases)
        return cf_error_set(err, CF_E_INVALID, "cases: %zu entries but no array", req->n_cases);
    if (req->stream && req->n_cases)
        return cf_error_set(err, CF_E_INVALID, "stream: not with cases (each case's output is in its result)");
    for (size_t i = 0; i < req->n_cases; i++) {
        const cf_case *c = &req->cases[i];
        char field[48];
        snprintf(field, sizeof(field), "cases[%zu].argv", i);
        if (strv_check(c->argv, c->argc, field, err) < 0)
            return -1;
        snprintf(field, sizeof(field), "cases[%zu].input", i);
        if (check_values && cf_value_check_nested(&c->input, field, CF_CASE_VALUE_LEVELS, err) < 0)
            return -1;
    }
    return 0;
}

int cf_request_check(const cf_request *req, cf_error *err)
{
    return cf_request_check_mode(req, true, err);
}

int cf_result_check_mode(const cf_result *res, bool check_values, cf_error *err)
{
    if (!res->id)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"id\"");
    if (!cf_id_valid(res->id, strlen(res->id)))
        return cf_error_set(err, CF_E_INVALID, "id: must be 1..%d printable ASCII characters without spaces",
                            CF_ID_MAX);
    if ((unsigned)res->status >= CF_STATUS__COUNT)
        return cf_error_set(err, CF_E_INVALID, "status: unknown value");
    NONNEG(res->signal, "signal");
    if (check_values && cf_value_check(&res->output, "output", err) < 0)
        return -1;
    if (res->n_diagnostics && !res->diagnostics)
        return cf_error_set(err, CF_E_INVALID, "diagnostics: %zu entries but no array", res->n_diagnostics);
    for (size_t i = 0; i < res->n_diagnostics; i++) {
        const cf_diagnostic *dg = &res->diagnostics[i];
        if (!dg->message)
            return cf_error_set(err, CF_E_INVALID, "diagnostics[%zu]: missing required field \"message\"", i);
        if (dg->line < 0 || dg->column < 0 || dg->end_line < 0 || dg->end_column < 0)
            return cf_error_set(err, CF_E_INVALID, "diagnostics[%zu].line: expected non-negative integer", i);
        if (dg->n_children && !dg->children)
            return cf_error_set(err, CF_E_INVALID, "diagnostics[%zu].children: entries but no array", i);
        for (size_t k = 0; k < dg->n_children; k++) {
            const cf_diagnostic *ch = &dg->children[k];
            if (!ch->message)
                return cf_error_set(err, CF_E_INVALID,
                                    "diagnostics[%zu].children[%zu]: missing required field \"message\"", i, k);
            if (ch->n_children)
                return cf_error_set(err, CF_E_INVALID, "diagnostics[%zu].children[%zu]: nested children", i, k);
            if (ch->line < 0 || ch->column < 0 || ch->end_line < 0 || ch->end_column < 0)
                return cf_error_set(err, CF_E_INVALID,
                                    "diagnostics[%zu].children[%zu].line: expected non-negative integer", i, k);
        }
    }
    NONNEG(res->wall_time_us, "wall_time_us");
    NONNEG(res->session_cell, "session_cell");
    NONNEG(res->cpu_time_us, "cpu_time_us");
    NONNEG(res->peak_memory_bytes, "peak_memory_bytes");
    NONNEG(res->meta.attempt, "metadata.attempt");
    NONNEG(res->workspace_revision, "workspace_revision");
    NONNEG(res->finished_us, "finished_us");
    NONNEG(res->chunks, "chunks");
    if (strv_check(res->session_lost, res->n_session_lost, "session_lost", err) < 0)
        return -1;
    if (strv_check(res->changed_paths, res->n_changed_paths, "changed_paths", err) < 0)
        return -1;
    if (res->checkpoint_id && !cf_id_valid(res->checkpoint_id, strlen(res->checkpoint_id)))
        return cf_error_set(err, CF_E_INVALID, "checkpoint_id: must be 1..%d printable ASCII characters without spaces",
                            CF_ID_MAX);
    NONNEG(res->compile.wall_time_us, "compile.wall_time_us");
    NONNEG(res->compile.cpu_time_us, "compile.cpu_time_us");
    NONNEG(res->compile.peak_memory_bytes, "compile.peak_memory_bytes");
    if (res->n_cases && !res->cases)
        return cf_error_set(err, CF_E_INVALID, "cases: %zu entries but no array", res->n_cases);
    for (size_t i = 0; i < res->n_cases; i++) {
        const cf_case_result *c = &res->cases[i];
        if ((unsigned)c->status >= CF_STATUS__COUNT)
            return cf_error_set(err, CF_E_INVALID, "cases[%zu].status: unknown value", i);
        if (c->signal < 0 || c->wall_time_us < 0 || c->cpu_time_us < 0 || c->peak_memory_bytes < 0)
            return cf_error_set(err, CF_E_INVALID, "cases[%zu]: expected non-negative integers", i);
        if (c->match < -1 || c->match > 1)
            return cf_error_set(err, CF_E_INVALID, "cases[%zu].match: invalid", i);
        char field[48];
        snprintf(field, sizeof(field), "cases[%zu].output", i);
        if (check_values && cf_value_check_nested(&c->output, field, CF_CASE_VALUE_LEVELS, err) < 0)
            return -1;
    }
    if (res->n_files && !res->files)
        return cf_error_set(err, CF_E_INVALID, "files: %zu entries but no array", res->n_files);
    for (size_t i = 0; i < res->n_files; i++) {
        if (!res->files[i].path || !res->files[i].path[0])
            return cf_error_set(err, CF_E_INVALID, "files[%zu]: missing required field \"path\"", i);
        if (res->files[i].size < 0)
            return cf_error_set(err, CF_E_INVALID, "files[%zu].size: expected non-negative integer", i);
    }
    return 0;
}

int cf_result_check(const cf_result *res, cf_error *err)
{
    return cf_result_check_mode(res, true, err);
}
