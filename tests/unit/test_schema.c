/* Unit tests of the wire schema v1 (msgpack form): round trips, golden
 * vectors both ways, every malformed-input class, peek_id, validation.
 *
 * Golden vectors live in schema/golden/ (found through CF_SOURCE_DIR).
 * To regenerate them after an intentional schema change:
 *   CF_SCHEMA_WRITE_GOLDEN=1 ./unit_test_schema
 * then review the diff (and SPEC.md's hex dumps) before committing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cf_chunk.h"
#include "cf_schema.h"
#include "cf_schema_int.h"
#include "cf_schema_json.h"

extern char **environ;

/* ---- fixtures: the structs behind the golden vectors ------------------- */

static char **strv(int n, ...)
{
    va_list ap;
    char **v = calloc((size_t)n, sizeof(*v));
    assert_non_null(v);
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        v[i] = strdup(va_arg(ap, const char *));
    va_end(ap);
    return v;
}

static void set_bytes(cf_bytes *b, const void *d, size_t n)
{
    assert_int_equal(cf_bytes_set(b, d, n), 0);
}

/* {"n": 3, "tags": ["a", "b"], "ok": true, "pi": 1.5, "none": nil} */
static void pack_sample_input(cf_bytes *out)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    msgpack_pack_str_with_body(&pk, "n", 1);
    msgpack_pack_int64(&pk, 3);
    msgpack_pack_str_with_body(&pk, "tags", 4);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "a", 1);
    msgpack_pack_str_with_body(&pk, "b", 1);
    msgpack_pack_str_with_body(&pk, "ok", 2);
    msgpack_pack_true(&pk);
    msgpack_pack_str_with_body(&pk, "pi", 2);
    msgpack_pack_double(&pk, 1.5);
    msgpack_pack_str_with_body(&pk, "none", 4);
    msgpack_pack_nil(&pk);
    set_bytes(out, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void make_min_request(cf_request *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-min-0001");
    r->language = CF_LANG_PYTHON;
    set_bytes(&r->code, "print(1)\n", 9);
}

/* A shell request asking for its output as it comes. */
static void make_stream_request(cf_request *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-stream-0001");
    r->language = CF_LANG_SHELL;
    set_bytes(&r->code, "echo a; sleep 1; echo b >&2\n", 28);
    r->stream = true;
}

/* A workspace op (section 3.5): str_replace, compare-and-set at revision 3. */
static void make_workspace_op_request(cf_request *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-wsop-0001");
    r->workspace = strdup("tenant-a.repo");
    r->workspace_op = calloc(1, sizeof(*r->workspace_op));
    r->workspace_op->op = CF_WS_OP_STR_REPLACE;
    r->workspace_op->path = strdup("src/app.py");
    set_bytes(&r->workspace_op->old_str, "x = 1", 5);
    set_bytes(&r->workspace_op->new_str, "x = 41", 6);
    r->workspace_op->has_new_str = true;
    r->workspace_op->expected_revision = 3;
    r->workspace_op->has_expected_revision = true;
}

/* A read of lines 10..20 of a file (a big file read in parts). */
static void make_workspace_read_request(cf_request *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-wsop-0002");
    r->workspace = strdup("tenant-a.repo");
    r->workspace_op = calloc(1, sizeof(*r->workspace_op));
    r->workspace_op->op = CF_WS_OP_READ;
    r->workspace_op->path = strdup("src/app.py");
    r->workspace_op->first_line = 10;
    r->workspace_op->has_first_line = true;
    r->workspace_op->last_line = 20;
    r->workspace_op->has_last_line = true;
}

/* A session's cell (SPEC 3.6): its workspace is the session's own. */
static void make_session_request(cf_request *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-cell-0002");
    r->language = CF_LANG_PYTHON;
    set_bytes(&r->code, "print(x + 1)\n", 13);
    r->session = strdup("tenant-a.s1");
}

/* Its answer: the second cell, restored, one name not saved. */
static void make_session_result(cf_result *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-cell-0002");
    r->status = CF_STATUS_SUCCESS;
    r->has_exit_code = true;
    set_bytes(&r->stdout_data, "42\n", 3);
    r->workspace_revision = 3;
    r->changed_paths = strv(1, ".codefleet/sessions/tenant-a.s1.python");
    r->n_changed_paths = 1;
    r->session_cell = 2;
    r->session_restored = true;
    r->session_lost = strv(1, "lock");
    r->n_session_lost = 1;
}

/* Its result: two chunks published by run "3f2a9c0d1e4b5a67-42". */
static void make_stream_result(cf_result *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-stream-0001");
    r->status = CF_STATUS_SUCCESS;
    r->has_exit_code = true;
    set_bytes(&r->stdout_data, "a\n", 2);
    set_bytes(&r->stderr_data, "b\n", 2);
    r->meta.backend = strdup("sandbox");
    r->meta.run = strdup("3f2a9c0d1e4b5a67-42");
    r->chunks = 2;
}

static void make_full_request(cf_request *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-full-0001");
    r->language = CF_LANG_PYTHON;
    r->backend = strdup("process");
    const char *code = "import sys\nprint(sys.stdin.read())\n";
    set_bytes(&r->code, code, strlen(code));
    r->argv = strv(2, "--verbose", "x");
    r->argc = 2;
    set_bytes(&r->module, "\x00" "asm\x01\x00\x00\x00", 8);
    set_bytes(&r->stdin_data, "\xff\xfe\x00\x01", 4); /* not UTF-8: travels as bin */
    pack_sample_input(&r->input);
    r->n_env = 2;
    r->env = calloc(2, sizeof(*r->env));
    r->env[0].key = strdup("LANG");
    r->env[0].value = strdup("C.UTF-8");
    r->env[1].key = strdup("DEBUG");
    r->env[1].value = strdup("1");
    r->n_files = 2;
    r->files = calloc(2, sizeof(*r->files));
    r->files[0].path = strdup("main.py");
    set_bytes(&r->files[0].content, "print(1)\n", 9);
    r->files[1].path = strdup("data.bin");
    set_bytes(&r->files[1].content, "\x00\xff", 2);
    cf_policy *p = &r->policy;
    p->network = CF_NET_DISABLED;
    p->fs_mode = CF_FS_PATHS;
    p->fs_read_only = strv(2, "/usr", "/lib");
    p->n_fs_read_only = 2;
    p->fs_read_write = strv(1, "/tmp/out");
    p->n_fs_read_write = 1;
    p->env_allow_set = true;
    p->env_allow = strv(2, "PATH", "HOME");
    p->n_env_allow = 2;
    p->timeout_us = 5000000;
    p->cpu_time_us = 2000000;
    p->memory_bytes = 268435456;
    p->max_processes = 16;
    p->max_stdout_bytes = 1048576;
    p->max_stderr_bytes = 65536;
    p->max_file_size_bytes = 10485760;
    r->workspace = strdup("ws-42");
    r->thread = strdup("thread-7");
    r->identity = strdup("agent:alice");
    r->reply_to = strdup("codefleet.results.alice");
    r->deadline_us = 1767225600000000;
    r->created_us = 1767225590000000;
    r->n_trace = 1;
    r->trace = calloc(1, sizeof(*r->trace));
    r->trace[0].key = strdup("traceparent");
    r->trace[0].value = strdup("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
}

static void make_min_result(cf_result *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-min-0001");
    r->status = CF_STATUS_SUCCESS;
}

static void make_full_result(cf_result *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-full-0001");
    r->status = CF_STATUS_FAILED;
    r->has_exit_code = true;
    r->exit_code = 3;
    r->signal = 9;
    set_bytes(&r->stdout_data, "hello\n", 6);
    set_bytes(&r->stderr_data, "oops\xff\n", 6);
    r->stdout_truncated = true;
    r->stderr_truncated = true;
    set_bytes(&r->output, "\x81\xa6" "answer" "\x2a", 9); /* {"answer": 42} */
    r->n_diagnostics = 2;
    r->diagnostics = calloc(2, sizeof(*r->diagnostics));
    r->diagnostics[0].level = strdup("error");
    r->diagnostics[0].message = strdup("NameError: name 'x' is not defined");
    r->diagnostics[0].file = strdup("main.py");
    r->diagnostics[0].line = 3;
    r->diagnostics[0].column = 5;
    r->diagnostics[1].level = strdup("warning");
    r->diagnostics[1].message = strdup("unused import");
    r->wall_time_us = 12345;
    r->cpu_time_us = 6789;
    r->peak_memory_bytes = 10485760;
    r->meta.backend = strdup("process");
    r->meta.isolation = strdup("host_local");
    r->meta.language = strdup("python");
    r->meta.worker = strdup("worker-1");
    r->meta.identity = strdup("agent:alice");
    r->meta.attempt = 2;
    r->reason = strdup("exited with status 3");
    r->workspace_revision = 43;
    r->changed_paths = strv(2, "out/report.txt", "main.py");
    r->n_changed_paths = 2;
    r->workspace_conflict = true;
    r->finished_us = 1767225600123456;
}

/* A compiled-language request with cases, a harness and collect patterns
 * (issue 9's fields). */
static void make_compiled_request(cf_request *r)
{
    static const char code[] = "fn run(input: &str) -> String { input.to_string() }\n";
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-compiled-0001");
    r->language = CF_LANG_RUST;
    set_bytes(&r->code, code, strlen(code));
    r->harness = CF_HARNESS_FUNCTION;
    r->compile_flags = strv(1, "-Copt-level=1");
    r->n_compile_flags = 1;
    r->policy.timeout_us = 2000000;
    r->policy.compile_timeout_us = 30000000;
    r->policy.compile_memory_bytes = 1073741824;
    r->n_cases = 2;
    r->cases = calloc(2, sizeof(*r->cases));
    r->cases[0].name = strdup("small");
    set_bytes(&r->cases[0].stdin_data, "1 2\n", 4);
    r->cases[0].has_expect = true;
    set_bytes(&r->cases[0].expect_stdout, "3\n", 2);
    set_bytes(&r->cases[1].input, "\x81\xa1" "n" "\x07", 4); /* {"n": 7} */
    r->cases[1].argv = strv(1, "--fast");
    r->cases[1].argc = 1;
    r->cases[1].has_expect = true; /* an empty expectation is one */
    r->stop_on_failure = true;
    r->collect = strv(2, "out/*.png", "report/");
    r->n_collect = 2;
}

static void make_compiled_result(cf_result *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-compiled-0001");
    r->status = CF_STATUS_FAILED;
    r->n_diagnostics = 1;
    r->diagnostics = calloc(1, sizeof(*r->diagnostics));
    cf_diagnostic *d = &r->diagnostics[0];
    d->level = strdup("warning");
    d->message = strdup("unused variable: `x`");
    d->file = strdup("main.rs");
    d->line = 2;
    d->column = 9;
    d->code = strdup("unused_variables");
    d->end_line = 2;
    d->end_column = 10;
    d->n_children = 1;
    d->children = calloc(1, sizeof(*d->children));
    d->children[0].level = strdup("help");
    d->children[0].message = strdup("if this is intentional, prefix it with an underscore: `_x`");
    d->children[0].file = strdup("main.rs");
    d->children[0].line = 2;
    d->children[0].column = 9;
    r->wall_time_us = 3000;
    r->cpu_time_us = 2000;
    r->peak_memory_bytes = 2097152;
    r->meta.backend = strdup("sandbox");
    r->meta.isolation = strdup("sandbox");
    r->meta.language = strdup("rust");
    r->meta.toolchain = strdup("rustc 1.63.0");
    r->reason = strdup("1 of 2 cases did not pass (1 stdout mismatch); first: case 1 (small): stdout does not match");
    r->compile.present = true;
    r->compile.cached = true;
    r->compile.wall_time_us = 412000;
    r->compile.cpu_time_us = 380000;
    r->compile.peak_memory_bytes = 134217728;
    r->n_cases = 2;
    r->cases = calloc(2, sizeof(*r->cases));
    r->cases[0].name = strdup("small");
    r->cases[0].status = CF_STATUS_SUCCESS;
    r->cases[0].has_exit_code = true;
    r->cases[0].exit_code = 0;
    set_bytes(&r->cases[0].stdout_data, "4\n", 2);
    r->cases[0].wall_time_us = 1500;
    r->cases[0].match = -1;
    r->cases[1].status = CF_STATUS_SUCCESS;
    r->cases[1].has_exit_code = true;
    set_bytes(&r->cases[1].output, "\x07", 1);
    r->cases[1].wall_time_us = 1500;
    r->cases[1].match = 1;
    r->n_files = 1;
    r->files = calloc(1, sizeof(*r->files));
    r->files[0].path = strdup("out/plot.png");
    r->files[0].size = 70000;
    set_bytes(&r->files[0].content, "\x89PNG", 4);
    r->files[0].truncated = true;
    r->files_truncated = true;
}

/* ---- comparisons -------------------------------------------------------- */

static void assert_str_eq(const char *a, const char *b)
{
    if (!a || !b) {
        assert_ptr_equal(a, b);
        return;
    }
    assert_string_equal(a, b);
}

static void assert_bytes_eq(const cf_bytes *a, const cf_bytes *b)
{
    assert_int_equal(a->len, b->len);
    if (a->len)
        assert_memory_equal(a->data, b->data, a->len);
}

static void assert_strv_eq(char **a, size_t na, char **b, size_t nb)
{
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++)
        assert_str_eq(a[i], b[i]);
}

static void assert_strmap_eq(const cf_strmap_entry *a, size_t na, const cf_strmap_entry *b, size_t nb)
{
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        assert_str_eq(a[i].key, b[i].key);
        assert_str_eq(a[i].value, b[i].value);
    }
}

static void assert_request_eq(const cf_request *a, const cf_request *b)
{
    assert_str_eq(a->id, b->id);
    assert_int_equal(a->language, b->language);
    assert_str_eq(a->backend, b->backend);
    assert_int_equal(a->code.data != NULL, b->code.data != NULL);
    assert_bytes_eq(&a->code, &b->code);
    assert_strv_eq(a->argv, a->argc, b->argv, b->argc);
    assert_bytes_eq(&a->module, &b->module);
    assert_bytes_eq(&a->stdin_data, &b->stdin_data);
    assert_bytes_eq(&a->input, &b->input);
    assert_strmap_eq(a->env, a->n_env, b->env, b->n_env);
    assert_int_equal(a->n_files, b->n_files);
    for (size_t i = 0; i < a->n_files; i++) {
        assert_str_eq(a->files[i].path, b->files[i].path);
        assert_bytes_eq(&a->files[i].content, &b->files[i].content);
    }
    const cf_policy *p = &a->policy, *q = &b->policy;
    assert_int_equal(p->network, q->network);
    assert_int_equal(p->fs_mode, q->fs_mode);
    assert_strv_eq(p->fs_read_only, p->n_fs_read_only, q->fs_read_only, q->n_fs_read_only);
    assert_strv_eq(p->fs_read_write, p->n_fs_read_write, q->fs_read_write, q->n_fs_read_write);
    assert_int_equal(p->env_allow_set, q->env_allow_set);
    assert_strv_eq(p->env_allow, p->n_env_allow, q->env_allow, q->n_env_allow);
    assert_int_equal(p->timeout_us, q->timeout_us);
    assert_int_equal(p->cpu_time_us, q->cpu_time_us);
    assert_int_equal(p->memory_bytes, q->memory_bytes);
    assert_int_equal(p->max_processes, q->max_processes);
    assert_int_equal(p->max_stdout_bytes, q->max_stdout_bytes);
    assert_int_equal(p->max_stderr_bytes, q->max_stderr_bytes);
    assert_int_equal(p->max_file_size_bytes, q->max_file_size_bytes);
    assert_str_eq(a->workspace, b->workspace);
    assert_str_eq(a->thread, b->thread);
    assert_str_eq(a->identity, b->identity);
    assert_str_eq(a->reply_to, b->reply_to);
    assert_int_equal(a->deadline_us, b->deadline_us);
    assert_int_equal(a->created_us, b->created_us);
    assert_strmap_eq(a->trace, a->n_trace, b->trace, b->n_trace);
    assert_int_equal(a->harness, b->harness);
    assert_strv_eq(a->compile_flags, a->n_compile_flags, b->compile_flags, b->n_compile_flags);
    assert_int_equal(p->compile_timeout_us, q->compile_timeout_us);
    assert_int_equal(p->compile_memory_bytes, q->compile_memory_bytes);
    assert_int_equal(a->workspace_op != NULL, b->workspace_op != NULL);
    if (a->workspace_op) {
        const cf_workspace_op *x = a->workspace_op, *y = b->workspace_op;
        assert_int_equal(x->op, y->op);
        assert_str_eq(x->path, y->path);
        assert_str_eq(x->pattern, y->pattern);
        assert_bytes_eq(&x->content, &y->content);
        assert_bytes_eq(&x->old_str, &y->old_str);
        assert_bytes_eq(&x->new_str, &y->new_str);
        assert_int_equal(x->has_content, y->has_content);
        assert_int_equal(x->has_new_str, y->has_new_str);
        assert_int_equal(x->has_insert_line, y->has_insert_line);
        assert_int_equal(x->insert_line, y->insert_line);
        assert_int_equal(x->has_expected_revision, y->has_expected_revision);
        assert_int_equal(x->expected_revision, y->expected_revision);
        assert_int_equal(x->has_first_line, y->has_first_line);
        assert_int_equal(x->first_line, y->first_line);
        assert_int_equal(x->has_last_line, y->has_last_line);
        assert_int_equal(x->last_line, y->last_line);
    }
    assert_int_equal(a->n_cases, b->n_cases);
    for (size_t i = 0; i < a->n_cases; i++) {
        assert_str_eq(a->cases[i].name, b->cases[i].name);
        assert_bytes_eq(&a->cases[i].stdin_data, &b->cases[i].stdin_data);
        assert_bytes_eq(&a->cases[i].input, &b->cases[i].input);
        assert_strv_eq(a->cases[i].argv, a->cases[i].argc, b->cases[i].argv, b->cases[i].argc);
        assert_int_equal(a->cases[i].has_expect, b->cases[i].has_expect);
        assert_bytes_eq(&a->cases[i].expect_stdout, &b->cases[i].expect_stdout);
    }
    assert_int_equal(a->stop_on_failure, b->stop_on_failure);
    assert_strv_eq(a->collect, a->n_collect, b->collect, b->n_collect);
    assert_int_equal(a->stream, b->stream);
}

static void assert_diag_eq(const cf_diagnostic *a, const cf_diagnostic *b)
{
    assert_str_eq(a->level, b->level);
    assert_str_eq(a->message, b->message);
    assert_str_eq(a->file, b->file);
    assert_int_equal(a->line, b->line);
    assert_int_equal(a->column, b->column);
    assert_str_eq(a->code, b->code);
    assert_int_equal(a->end_line, b->end_line);
    assert_int_equal(a->end_column, b->end_column);
    assert_int_equal(a->n_children, b->n_children);
    for (size_t k = 0; k < a->n_children; k++)
        assert_diag_eq(&a->children[k], &b->children[k]);
}

static void assert_result_eq(const cf_result *a, const cf_result *b)
{
    assert_str_eq(a->id, b->id);
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->has_exit_code, b->has_exit_code);
    assert_int_equal(a->exit_code, b->exit_code);
    assert_int_equal(a->signal, b->signal);
    assert_bytes_eq(&a->stdout_data, &b->stdout_data);
    assert_bytes_eq(&a->stderr_data, &b->stderr_data);
    assert_int_equal(a->stdout_truncated, b->stdout_truncated);
    assert_int_equal(a->stderr_truncated, b->stderr_truncated);
    assert_bytes_eq(&a->output, &b->output);
    assert_int_equal(a->n_diagnostics, b->n_diagnostics);
    for (size_t i = 0; i < a->n_diagnostics; i++)
        assert_diag_eq(&a->diagnostics[i], &b->diagnostics[i]);
    assert_int_equal(a->wall_time_us, b->wall_time_us);
    assert_int_equal(a->cpu_time_us, b->cpu_time_us);
    assert_int_equal(a->peak_memory_bytes, b->peak_memory_bytes);
    assert_str_eq(a->meta.backend, b->meta.backend);
    assert_str_eq(a->meta.isolation, b->meta.isolation);
    assert_str_eq(a->meta.language, b->meta.language);
    assert_str_eq(a->meta.worker, b->meta.worker);
    assert_str_eq(a->meta.identity, b->meta.identity);
    assert_int_equal(a->meta.attempt, b->meta.attempt);
    assert_str_eq(a->reason, b->reason);
    assert_int_equal(a->workspace_revision, b->workspace_revision);
    assert_strv_eq(a->changed_paths, a->n_changed_paths, b->changed_paths, b->n_changed_paths);
    assert_int_equal(a->workspace_conflict, b->workspace_conflict);
    assert_int_equal(a->finished_us, b->finished_us);
    assert_str_eq(a->meta.toolchain, b->meta.toolchain);
    assert_str_eq(a->meta.sandbox, b->meta.sandbox);
    assert_str_eq(a->meta.run, b->meta.run);
    assert_int_equal(a->chunks, b->chunks);
    assert_int_equal(a->compile.present, b->compile.present);
    assert_int_equal(a->compile.cached, b->compile.cached);
    assert_int_equal(a->compile.wall_time_us, b->compile.wall_time_us);
    assert_int_equal(a->compile.cpu_time_us, b->compile.cpu_time_us);
    assert_int_equal(a->compile.peak_memory_bytes, b->compile.peak_memory_bytes);
    assert_int_equal(a->n_cases, b->n_cases);
    for (size_t i = 0; i < a->n_cases; i++) {
        const cf_case_result *x = &a->cases[i], *y = &b->cases[i];
        assert_str_eq(x->name, y->name);
        assert_int_equal(x->status, y->status);
        assert_int_equal(x->has_exit_code, y->has_exit_code);
        assert_int_equal(x->exit_code, y->exit_code);
        assert_int_equal(x->signal, y->signal);
        assert_bytes_eq(&x->stdout_data, &y->stdout_data);
        assert_bytes_eq(&x->stderr_data, &y->stderr_data);
        assert_int_equal(x->stdout_truncated, y->stdout_truncated);
        assert_int_equal(x->stderr_truncated, y->stderr_truncated);
        assert_bytes_eq(&x->output, &y->output);
        assert_int_equal(x->wall_time_us, y->wall_time_us);
        assert_int_equal(x->cpu_time_us, y->cpu_time_us);
        assert_int_equal(x->peak_memory_bytes, y->peak_memory_bytes);
        assert_int_equal(x->match, y->match);
        assert_str_eq(x->reason, y->reason);
    }
    assert_int_equal(a->n_files, b->n_files);
    for (size_t i = 0; i < a->n_files; i++) {
        assert_str_eq(a->files[i].path, b->files[i].path);
        assert_int_equal(a->files[i].size, b->files[i].size);
        assert_bytes_eq(&a->files[i].content, &b->files[i].content);
        assert_int_equal(a->files[i].truncated, b->files[i].truncated);
    }
    assert_int_equal(a->files_truncated, b->files_truncated);
}

/* ---- file helpers ------------------------------------------------------- */

static void golden_path(char *buf, size_t cap, const char *name)
{
    const char *src = getenv("CF_SOURCE_DIR");
    struct stat st;
    if (!src || !*src) {
        /* Run by hand from a build tree: try a few relative roots. */
        static const char *const roots[] = {".", "..", "../..", "../../.."};
        src = ".";
        for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
            snprintf(buf, cap, "%s/schema/golden", roots[i]);
            if (stat(buf, &st) == 0) {
                src = roots[i];
                break;
            }
        }
    }
    snprintf(buf, cap, "%s/schema/golden/%s", src, name);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_error("cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

static void write_all(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Plain hex, 16 bytes a line: the human-readable twin of each vector. */
static char *to_hex(const uint8_t *d, size_t n)
{
    char *s = malloc(n * 3 + n / 16 + 2);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(s + o, 4, "%02x%s", d[i], (i % 16 == 15 || i + 1 == n) ? "" : " ");
        o += 2 + ((i % 16 == 15 || i + 1 == n) ? 0 : 1);
        if (i % 16 == 15 || i + 1 == n)
            s[o++] = '\n';
    }
    s[o] = '\0';
    return s;
}

static bool write_golden_mode(void)
{
    const char *w = getenv("CF_SCHEMA_WRITE_GOLDEN");
    return w && strcmp(w, "1") == 0;
}

/* ---- golden vectors ----------------------------------------------------- */

static void golden_check_bytes(const char *base, const cf_bytes *enc, json_t *js)
{
    char path[1024], name[128];
    snprintf(name, sizeof(name), "%s.msgpack", base);
    golden_path(path, sizeof(path), name);
    char *hex = to_hex(enc->data, enc->len);
    char *jtext = json_dumps(js, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    assert_non_null(jtext);
    if (write_golden_mode()) {
        write_all(path, enc->data, enc->len);
        snprintf(name, sizeof(name), "%s.hex", base);
        golden_path(path, sizeof(path), name);
        write_all(path, hex, strlen(hex));
        snprintf(name, sizeof(name), "%s.json", base);
        golden_path(path, sizeof(path), name);
        size_t jl = strlen(jtext);
        jtext[jl] = '\n'; /* overwrites the NUL: written by length */
        write_all(path, jtext, jl + 1);
        jtext[jl] = '\0';
    }
    snprintf(name, sizeof(name), "%s.msgpack", base);
    golden_path(path, sizeof(path), name);
    size_t glen;
    uint8_t *g = read_all(path, &glen);
    assert_non_null(g);
    /* encode(expected struct) == committed bytes, byte for byte */
    assert_int_equal(glen, enc->len);
    assert_memory_equal(g, enc->data, glen);
    /* the hex twin describes the same bytes */
    snprintf(name, sizeof(name), "%s.hex", base);
    golden_path(path, sizeof(path), name);
    size_t hlen;
    uint8_t *h = read_all(path, &hlen);
    assert_non_null(h);
    assert_int_equal(hlen, strlen(hex));
    assert_memory_equal(h, hex, hlen);
    /* the JSON twin is the JSON form of the same message */
    snprintf(name, sizeof(name), "%s.json", base);
    golden_path(path, sizeof(path), name);
    json_error_t jerr;
    json_t *gj = json_load_file(path, 0, &jerr);
    if (!gj)
        print_error("%s: %s\n", path, jerr.text);
    assert_non_null(gj);
    assert_true(json_equal(gj, js));
    json_decref(gj);
    free(h);
    free(g);
    free(hex);
    free(jtext);
}

static uint8_t *load_golden(const char *base, const char *ext, size_t *len)
{
    char path[1024], name[128];
    snprintf(name, sizeof(name), "%s.%s", base, ext);
    golden_path(path, sizeof(path), name);
    uint8_t *g = read_all(path, len);
    assert_non_null(g);
    return g;
}

static void golden_request(const char *base, void (*make)(cf_request *))
{
    cf_request want, got, fromj;
    cf_error err = {0};
    cf_bytes enc;
    make(&want);
    assert_int_equal(cf_request_encode(&want, &enc, &err), 0);
    json_t *js = cf_request_to_json(&want);
    assert_non_null(js);
    golden_check_bytes(base, &enc, js);

    /* decode(committed bytes) == expected struct */
    size_t glen;
    uint8_t *g = load_golden(base, "msgpack", &glen);
    assert_int_equal(cf_request_decode(g, glen, NULL, &got, &err), 0);
    assert_request_eq(&got, &want);
    /* JSON twin decodes to the same struct */
    size_t jlen;
    uint8_t *jt = load_golden(base, "json", &jlen);
    json_t *gj = json_loadb((const char *)jt, jlen, 0, NULL);
    assert_non_null(gj);
    assert_int_equal(cf_request_from_json(gj, &fromj, &err), 0);
    assert_request_eq(&fromj, &want);

    json_decref(gj);
    json_decref(js);
    free(jt);
    free(g);
    free(enc.data);
    cf_request_clear(&fromj);
    cf_request_clear(&got);
    cf_request_clear(&want);
}

static void golden_result(const char *base, void (*make)(cf_result *))
{
    cf_result want, got, fromj;
    cf_error err = {0};
    cf_bytes enc;
    make(&want);
    assert_int_equal(cf_result_encode(&want, &enc, &err), 0);
    json_t *js = cf_result_to_json(&want);
    assert_non_null(js);
    golden_check_bytes(base, &enc, js);

    size_t glen;
    uint8_t *g = load_golden(base, "msgpack", &glen);
    assert_int_equal(cf_result_decode(g, glen, NULL, &got, &err), 0);
    assert_result_eq(&got, &want);
    size_t jlen;
    uint8_t *jt = load_golden(base, "json", &jlen);
    json_t *gj = json_loadb((const char *)jt, jlen, 0, NULL);
    assert_non_null(gj);
    assert_int_equal(cf_result_from_json(gj, &fromj, &err), 0);
    assert_result_eq(&fromj, &want);

    json_decref(gj);
    json_decref(js);
    free(jt);
    free(g);
    free(enc.data);
    cf_result_clear(&fromj);
    cf_result_clear(&got);
    cf_result_clear(&want);
}

static void test_golden_request_min(void **state)
{
    golden_request("request_min", make_min_request);
}

static void test_golden_request_full(void **state)
{
    golden_request("request_full", make_full_request);
}

static void test_golden_result_min(void **state)
{
    golden_result("result_min", make_min_result);
}

static void test_golden_result_full(void **state)
{
    golden_result("result_full", make_full_result);
}

static void test_golden_request_compiled(void **state)
{
    golden_request("request_compiled", make_compiled_request);
}

static void test_golden_result_compiled(void **state)
{
    golden_result("result_compiled", make_compiled_result);
}

static void test_golden_request_stream(void **state)
{
    golden_request("request_stream", make_stream_request);
}

static void test_golden_request_workspace_op(void **state)
{
    (void)state;
    golden_request("request_workspace_op", make_workspace_op_request);
}

static void test_golden_request_workspace_read(void **state)
{
    (void)state;
    golden_request("request_workspace_read", make_workspace_read_request);
}

static void test_golden_request_session(void **state)
{
    (void)state;
    golden_request("request_session_cell", make_session_request);
}

static void test_golden_result_session(void **state)
{
    golden_result("result_session_cell", make_session_result);
}

static void test_golden_result_stream(void **state)
{
    golden_result("result_stream", make_stream_result);
}

/* The second chunk of that run: its stderr line. */
static void test_golden_chunk(void **state)
{
    cf_chunk want = {.id = "req-stream-0001", .run = "3f2a9c0d1e4b5a67-42", .seq = 1, .stream = CF_CHUNK_STDERR,
                     .offset = 0, .data = {(uint8_t *)"b\n", 2}, .at_us = 1764000000500000};
    cf_error err = {0};
    cf_bytes enc;
    assert_int_equal(cf_chunk_encode(&want, &enc, &err), 0);
    json_t *js = cf_chunk_to_json(&want);
    assert_non_null(js);
    golden_check_bytes("chunk", &enc, js);
    size_t glen;
    uint8_t *g = load_golden("chunk", "msgpack", &glen);
    cf_chunk got;
    assert_int_equal(cf_chunk_decode(g, glen, NULL, &got, &err), 0);
    assert_string_equal(got.id, want.id);
    assert_string_equal(got.run, want.run);
    assert_int_equal(got.seq, want.seq);
    assert_int_equal(got.stream, want.stream);
    assert_int_equal(got.offset, want.offset);
    assert_int_equal(got.data.len, want.data.len);
    assert_memory_equal(got.data.data, want.data.data, want.data.len);
    assert_int_equal(got.at_us, want.at_us);
    cf_chunk_clear(&got);
    json_decref(js);
    free(g);
    free(enc.data);
}

/* The start notice a worker publishes for a request sent with
 * notify_start (SPEC.md "Start notices"). */
static void test_golden_start_notice(void **state)
{
    cf_chunk want = {.kind = CF_CHUNK_START, .id = "req-stream-0001", .run = "3f2a9c0d1e4b5a67-42",
                     .worker = "w1", .at_us = 1764000000400000};
    cf_error err = {0};
    cf_bytes enc;
    assert_int_equal(cf_chunk_encode(&want, &enc, &err), 0);
    json_t *js = cf_chunk_to_json(&want);
    assert_non_null(js);
    golden_check_bytes("start_notice", &enc, js);
    size_t glen;
    uint8_t *g = load_golden("start_notice", "msgpack", &glen);
    cf_chunk got;
    assert_int_equal(cf_chunk_decode(g, glen, NULL, &got, &err), 0);
    assert_int_equal(got.kind, CF_CHUNK_START);
    assert_string_equal(got.id, want.id);
    assert_string_equal(got.run, want.run);
    assert_string_equal(got.worker, want.worker);
    assert_int_equal(got.at_us, want.at_us);
    assert_int_equal(got.data.len, 0);
    cf_chunk_clear(&got);
    /* A notice with output fields, or a chunk with a worker, is neither. */
    cf_chunk bad = want;
    bad.seq = 1;
    cf_bytes enc1 = {0};
    assert_int_equal(cf_chunk_encode(&bad, &enc1, &err), -1);
    bad = (cf_chunk){.id = "req-stream-0001", .run = "r1", .stream = CF_CHUNK_STDOUT, .data = {(uint8_t *)"x", 1},
                     .worker = "w1"};
    cf_bytes enc2 = {0};
    assert_int_equal(cf_chunk_encode(&bad, &enc2, &err), -1);
    /* An old reader's required fields in a notice are refused by name. */
    static const uint8_t with_seq[] = {0x85, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0xa1, 'x', 0xa3, 'r', 'u', 'n',
                                       0xa1, 'r', 0xa5, 'e', 'v', 'e', 'n', 't', 0xa5, 's', 't', 'a', 'r', 't',
                                       0xa3, 's', 'e', 'q', 0x00};
    assert_int_equal(cf_chunk_decode(with_seq, sizeof(with_seq), NULL, &got, &err), -1);
    assert_non_null(strstr(err.msg, "seq"));
    static const uint8_t with_data[] = {0x85, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0xa1, 'x', 0xa3, 'r', 'u', 'n',
                                        0xa1, 'r', 0xa5, 'e', 'v', 'e', 'n', 't', 0xa5, 's', 't', 'a', 'r', 't',
                                        0xa4, 'd', 'a', 't', 'a', 0xc4, 0x00};
    assert_int_equal(cf_chunk_decode(with_data, sizeof(with_data), NULL, &got, &err), -1);
    assert_non_null(strstr(err.msg, "data"));
    static const uint8_t other_event[] = {0x84, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0xa1, 'x', 0xa3, 'r', 'u', 'n',
                                          0xa1, 'r', 0xa5, 'e', 'v', 'e', 'n', 't', 0xa3, 'e', 'n', 'd'};
    assert_int_equal(cf_chunk_decode(other_event, sizeof(other_event), NULL, &got, &err), -1);
    assert_non_null(strstr(err.msg, "event"));
    json_decref(js);
    free(g);
    free(enc.data);
}

/* The first bytes of the minimal request, spelled out by hand from the
 * msgpack spec (SPEC.md annotates the same bytes). */
static void test_golden_min_request_bytes_by_hand(void **state)
{
    static const uint8_t want[] = {
        0x84,                                     /* map of 4 */
        0xa1, 'v', 0x01,                          /* "v": 1 */
        0xa2, 'i', 'd', 0xac, 'r', 'e', 'q', '-', /* "id": "req-min-0001" */
        'm', 'i', 'n', '-', '0', '0', '0', '1',
        0xa8, 'l', 'a', 'n', 'g', 'u', 'a', 'g', 'e', 0xa6, 'p', 'y', 't', 'h', 'o', 'n',
        0xa4, 'c', 'o', 'd', 'e', 0xa9, 'p', 'r', 'i', 'n', 't', '(', '1', ')', '\n',
    };
    size_t glen;
    uint8_t *g = load_golden("request_min", "msgpack", &glen);
    assert_int_equal(glen, sizeof(want));
    assert_memory_equal(g, want, glen);
    free(g);
}

/* An independent decoder/encoder (pure Python, schema/tools/mp_check.py)
 * must agree with the committed bytes. */
static void test_golden_python(void **state)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        skip();
    char script[1024], dir[1024];
    golden_path(script, sizeof(script), "../tools/mp_check.py");
    golden_path(dir, sizeof(dir), "");
    char *argv[] = {"/usr/bin/python3", "-I", "-S", script, dir, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- round trips --------------------------------------------------------- */

static void roundtrip_request(cf_request *want)
{
    cf_error err = {0};
    cf_bytes a, b;
    cf_request got;
    assert_int_equal(cf_request_encode(want, &a, &err), 0);
    if (cf_request_decode(a.data, a.len, NULL, &got, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_request_eq(&got, want);
    assert_int_equal(cf_request_encode(&got, &b, &err), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    free(a.data);
    free(b.data);
    cf_request_clear(&got);
}

static void test_request_roundtrip(void **state)
{
    cf_request r;
    make_full_request(&r);
    roundtrip_request(&r);
    cf_request_clear(&r);

    /* each language's requirements; empty code is a valid (empty) program */
    make_min_request(&r);
    r.code.len = 0;
    roundtrip_request(&r);
    cf_request_clear(&r);

    memset(&r, 0, sizeof(r));
    r.id = strdup("cmd-1");
    r.language = CF_LANG_COMMAND;
    r.argv = strv(3, "/bin/echo", "hi", "");
    r.argc = 3;
    r.policy.env_allow_set = true; /* empty allowlist is kept distinct from absent */
    r.policy.fs_mode = CF_FS_WORKSPACE_RO;
    r.policy.network = CF_NET_ENABLED;
    roundtrip_request(&r);
    cf_request_clear(&r);

    memset(&r, 0, sizeof(r));
    r.id = strdup("wasm-1");
    r.language = CF_LANG_WASM;
    set_bytes(&r.module, "\x00" "asm", 4);
    set_bytes(&r.input, "\xc0", 1); /* input nil is a present value */
    /* a file with no content (data NULL) travels as an empty str */
    r.n_files = 1;
    r.files = calloc(1, sizeof(*r.files));
    r.files[0].path = strdup("empty.txt");
    roundtrip_request(&r);
    cf_request_clear(&r);
}

static void roundtrip_result(cf_result *want)
{
    cf_error err = {0};
    cf_bytes a, b;
    cf_result got;
    assert_int_equal(cf_result_encode(want, &a, &err), 0);
    if (cf_result_decode(a.data, a.len, NULL, &got, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_result_eq(&got, want);
    assert_int_equal(cf_result_encode(&got, &b, &err), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    free(a.data);
    free(b.data);
    cf_result_clear(&got);
}

static void test_result_roundtrip(void **state)
{
    cf_result r;
    make_full_result(&r);
    roundtrip_result(&r);
    cf_result_clear(&r);

    for (int s = 0; s < CF_STATUS__COUNT; s++) {
        make_min_result(&r);
        r.status = (cf_status)s;
        r.has_exit_code = true;
        r.exit_code = -2147483647 - 1; /* negative ints survive */
        assert_int_equal(cf_result_set_reason(&r, "status %s #%d", cf_status_name(r.status), s), 0);
        roundtrip_result(&r);
        cf_result_clear(&r);
    }
    /* exit code 0 present differs from absent */
    make_min_result(&r);
    r.has_exit_code = true;
    roundtrip_result(&r);
    cf_result_clear(&r);
}

/* Absent/zero fields are omitted: the minimal result is exactly 3 entries. */
static void test_encoder_omits_zero_fields(void **state)
{
    cf_result r;
    cf_error err = {0};
    cf_bytes b;
    make_min_result(&r);
    r.stdout_data.data = malloc(1); /* present but empty: still omitted */
    assert_int_equal(cf_result_encode(&r, &b, &err), 0);
    assert_int_equal(b.data[0], 0x83);
    free(b.data);
    r.has_exit_code = true;
    assert_int_equal(cf_result_encode(&r, &b, &err), 0);
    assert_int_equal(b.data[0], 0x84);
    /* exit_code 0 is the last entry: key then positive fixint 0 */
    assert_int_equal(b.data[b.len - 1], 0x00);
    assert_memory_equal(b.data + b.len - 1 - 10, "\xa9" "exit_code", 10);
    free(b.data);
    cf_result_clear(&r);
}

static void test_encoder_rejects_invalid(void **state)
{
    cf_request r;
    cf_error err = {0};
    cf_bytes b = {(uint8_t *)"x", 1};
    memset(&r, 0, sizeof(r));
    assert_int_equal(cf_request_encode(&r, &b, &err), -1);
    assert_null(b.data);
    assert_non_null(strstr(err.msg, "missing required field \"id\""));

    make_min_request(&r);
    r.policy.timeout_us = -1;
    assert_int_equal(cf_request_encode(&r, &b, &err), -1);
    assert_non_null(strstr(err.msg, "policy.timeout_us: expected non-negative integer"));
    r.policy.timeout_us = 0;
    set_bytes(&r.input, "\x92\x01", 2); /* array of 2 with one element */
    assert_int_equal(cf_request_encode(&r, &b, &err), -1);
    assert_non_null(strstr(err.msg, "input"));
    cf_request_clear(&r);

    cf_result res;
    make_min_result(&res);
    res.status = CF_STATUS__COUNT;
    assert_int_equal(cf_result_encode(&res, &b, &err), -1);
    assert_non_null(strstr(err.msg, "status"));
    cf_result_clear(&res);
}

/* SPEC 3.6: what a session's cell may not be, each refused by name. */
static void test_session_rules(void **state)
{
    (void)state;
    cf_request r;
    cf_error err = {0};
    cf_bytes b = {0};
    struct {
        const char *session;
        cf_language lang;
        bool cases_, thread, ro;
        const char *says;
    } bad[] = {
        {"tenant-a.s1", CF_LANG_JAVASCRIPT, false, false, false, "only languages \"python\" and \"shell\""},
        {"tenant a", CF_LANG_PYTHON, false, false, false, "session: must be 1..128 characters"},
        {"", CF_LANG_PYTHON, false, false, false, "session: must be 1..128 characters"},
        {"tenant-a.s1", CF_LANG_PYTHON, false, true, false, "session: not with thread"},
        {"tenant-a.s1", CF_LANG_PYTHON, true, false, false, "session: not with harness"},
        {"tenant-a.s1", CF_LANG_PYTHON, false, false, true, "policy.filesystem.mode must be workspace_rw"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        make_session_request(&r);
        free(r.session);
        r.session = strdup(bad[i].session);
        r.language = bad[i].lang;
        if (bad[i].thread)
            r.thread = strdup("t1");
        if (bad[i].cases_)
            r.harness = CF_HARNESS_FUNCTION;
        if (bad[i].ro)
            r.policy.fs_mode = CF_FS_WORKSPACE_RO;
        assert_int_equal(cf_request_encode(&r, &b, &err), -1);
        if (!strstr(err.msg, bad[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, err.msg, bad[i].says);
        cf_request_clear(&r);
    }
    /* And not on a workspace op. */
    make_workspace_read_request(&r);
    r.session = strdup("tenant-a.repo");
    assert_int_equal(cf_request_encode(&r, &b, &err), -1);
    assert_non_null(strstr(err.msg, "session: not with workspace_op"));
    cf_request_clear(&r);
    /* A valid one encodes; rw given explicitly is fine. */
    make_session_request(&r);
    r.policy.fs_mode = CF_FS_WORKSPACE_RW;
    assert_int_equal(cf_request_encode(&r, &b, &err), 0);
    free(b.data);
    cf_request_clear(&r);
}

/* ---- hand-built messages for malformed-input tests ---------------------- */

typedef void (*pack_fn)(msgpack_packer *pk);

typedef struct field {
    const char *key;
    pack_fn pack; /* NULL: leave the field out */
} field;

static void pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void p_v1(msgpack_packer *pk) { msgpack_pack_int(pk, 1); }
static void p_v2(msgpack_packer *pk) { msgpack_pack_int(pk, 2); }
static void p_vstr(msgpack_packer *pk) { pk_str(pk, "1"); }
static void p_id(msgpack_packer *pk) { pk_str(pk, "req-1"); }
static void p_python(msgpack_packer *pk) { pk_str(pk, "python"); }
static void p_code(msgpack_packer *pk) { pk_str(pk, "print(1)"); }
static void p_int5(msgpack_packer *pk) { msgpack_pack_int(pk, 5); }
static void p_neg5(msgpack_packer *pk) { msgpack_pack_int(pk, -5); }
static void p_true(msgpack_packer *pk) { msgpack_pack_true(pk); }
static void p_nil(msgpack_packer *pk) { msgpack_pack_nil(pk); }
static void p_float(msgpack_packer *pk) { msgpack_pack_double(pk, 1.5); }
static void p_strx(msgpack_packer *pk) { pk_str(pk, "x"); }
static void p_ruby(msgpack_packer *pk) { pk_str(pk, "ruby"); }
static void p_u64max(msgpack_packer *pk) { msgpack_pack_uint64(pk, UINT64_MAX); }
static void p_arr_int(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    msgpack_pack_int(pk, 1);
}
static void p_arr_str(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    pk_str(pk, "a");
}
static void p_map_int(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "A");
    msgpack_pack_int(pk, 1);
}
static void p_map_intkey(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    msgpack_pack_int(pk, 1);
    pk_str(pk, "A");
}
static void p_pol_timeout_neg(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "timeout_us");
    msgpack_pack_int(pk, -5);
}
static void p_pol_timeout_str(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "timeout_us");
    pk_str(pk, "5s");
}
static void p_pol_network_bad(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "network");
    pk_str(pk, "maybe");
}
static void p_pol_fs_mode_int(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "filesystem");
    msgpack_pack_map(pk, 1);
    pk_str(pk, "mode");
    msgpack_pack_int(pk, 3);
}
static void p_pol_fs_ro_nomode(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "filesystem");
    msgpack_pack_map(pk, 1);
    pk_str(pk, "read_only");
    p_arr_str(pk);
}
static void p_pol_env_allow_int(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "env_allow");
    p_arr_int(pk);
}
static void p_pol_mem_float(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "memory_bytes");
    msgpack_pack_double(pk, 1e9);
}
static void p_files_int(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "a.txt");
    msgpack_pack_int(pk, 5);
}
static void p_bad_utf8(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "a\xc3(", 3); }
static void p_nul_str(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "a\0b", 3); }
static void p_bad_id(msgpack_packer *pk) { pk_str(pk, "has space"); }
static void p_long_id(msgpack_packer *pk)
{
    char id[CF_ID_MAX + 2];
    memset(id, 'a', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    pk_str(pk, id);
}
static void p_empty_arr(msgpack_packer *pk) { msgpack_pack_array(pk, 0); }
static void p_command(msgpack_packer *pk) { pk_str(pk, "command"); }
static void p_wasm(msgpack_packer *pk) { pk_str(pk, "wasm"); }
static void p_env_dup(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    pk_str(pk, "A");
    pk_str(pk, "1");
    pk_str(pk, "A");
    pk_str(pk, "2");
}
static void p_env_eq(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "A=B");
    pk_str(pk, "1");
}
/* {"future": {"a": {"b": [1, 2, {"c": nil}]}}} style nested unknown value */
static void p_nested_unknown(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    pk_str(pk, "a");
    msgpack_pack_map(pk, 1);
    pk_str(pk, "b");
    msgpack_pack_array(pk, 3);
    msgpack_pack_int(pk, 1);
    msgpack_pack_bin_with_body(pk, "\x00\x01", 2);
    msgpack_pack_map(pk, 1);
    msgpack_pack_int(pk, 7); /* non-string keys are fine inside unknown values */
    msgpack_pack_nil(pk);
    pk_str(pk, "z");
    msgpack_pack_ext_with_body(pk, "abcd", 4, 5);
}
static void p_pol_with_unknown(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_str(pk, "future_knob");
    p_nested_unknown(pk);
    pk_str(pk, "timeout_us");
    msgpack_pack_int(pk, 1000);
    pk_str(pk, "filesystem");
    msgpack_pack_map(pk, 2);
    pk_str(pk, "mode");
    pk_str(pk, "none");
    pk_str(pk, "later");
    msgpack_pack_array(pk, 0);
}

/* Builds {v, id, language, code} with `over` replacing or adding fields
 * (a field with pack == NULL is removed). */
static cf_bytes build_msg(const field *base, size_t nbase, const field *over, size_t nover)
{
    field all[32];
    size_t n = 0;
    for (size_t i = 0; i < nbase; i++)
        all[n++] = base[i];
    for (size_t j = 0; j < nover; j++) {
        size_t i;
        for (i = 0; i < n; i++)
            if (strcmp(all[i].key, over[j].key) == 0)
                break;
        if (i == n)
            all[n++] = over[j];
        else
            all[i] = over[j];
    }
    size_t live = 0;
    for (size_t i = 0; i < n; i++)
        live += all[i].pack != NULL;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, live);
    for (size_t i = 0; i < n; i++) {
        if (!all[i].pack)
            continue;
        pk_str(&pk, all[i].key);
        all[i].pack(&pk);
    }
    cf_bytes b = {(uint8_t *)sb.data, sb.size};
    return b;
}

static const field req_base[] = {{"v", p_v1}, {"id", p_id}, {"language", p_python}, {"code", p_code}};
static const field res_base[] = {{"v", p_v1}, {"id", p_id}, {"status", p_strx}};

static void p_success(msgpack_packer *pk) { pk_str(pk, "success"); }

/* Decodes a request built from req_base + one override; returns rc and
 * fills err. */
static int decode_req_with(const field *over, size_t nover, const cf_decode_limits *lim, cf_request *out,
                           cf_error *err)
{
    cf_bytes b = build_msg(req_base, 4, over, nover);
    int rc = cf_request_decode(b.data, b.len, lim, out, err);
    free(b.data);
    return rc;
}

static void expect_req_error(field f, const char *msg)
{
    cf_request r;
    cf_error err = {0};
    if (decode_req_with(&f, 1, NULL, &r, &err) == 0)
        fail_msg("field %s: decode unexpectedly succeeded", f.key);
    if (!strstr(err.msg, msg))
        fail_msg("field %s: error \"%s\" lacks \"%s\"", f.key, err.msg, msg);
    /* the struct is cleared on failure */
    assert_null(r.id);
    assert_null(r.code.data);
}

static void expect_res_error(field f, const char *msg)
{
    field fixed[2] = {{"status", p_success}, f};
    cf_bytes b = build_msg(res_base, 3, fixed, 2);
    cf_result r;
    cf_error err = {0};
    if (cf_result_decode(b.data, b.len, NULL, &r, &err) == 0)
        fail_msg("field %s: decode unexpectedly succeeded", f.key);
    if (!strstr(err.msg, msg))
        fail_msg("field %s: error \"%s\" lacks \"%s\"", f.key, err.msg, msg);
    assert_null(r.id);
    free(b.data);
}

static void test_wrong_types(void **state)
{
    expect_req_error((field){"id", p_int5}, "id: expected string");
    expect_req_error((field){"language", p_ruby}, "language: unknown value");
    expect_req_error((field){"language", p_int5}, "language: expected string");
    expect_req_error((field){"backend", p_true}, "backend: expected string");
    expect_req_error((field){"code", p_int5}, "code: expected bin or string");
    expect_req_error((field){"argv", p_strx}, "argv: expected array of strings");
    expect_req_error((field){"argv", p_arr_int}, "argv[0]: expected string");
    expect_req_error((field){"module", p_arr_str}, "module: expected bin or string");
    expect_req_error((field){"stdin", p_true}, "stdin: expected bin or string");
    expect_req_error((field){"env", p_arr_str}, "env: expected map");
    expect_req_error((field){"env", p_map_int}, "env[0]: expected string");
    expect_req_error((field){"env", p_map_intkey}, "env[0]: expected string");
    expect_req_error((field){"env", p_env_dup}, "env: duplicate key");
    expect_req_error((field){"env", p_env_eq}, "env[0]: invalid variable name");
    expect_req_error((field){"files", p_files_int}, "files[0]: expected bin or string");
    expect_req_error((field){"files", p_arr_str}, "files: expected map");
    expect_req_error((field){"policy", p_strx}, "policy: expected map");
    expect_req_error((field){"policy", p_pol_timeout_neg}, "policy.timeout_us: expected non-negative integer");
    expect_req_error((field){"policy", p_pol_timeout_str}, "policy.timeout_us: expected non-negative integer");
    expect_req_error((field){"policy", p_pol_mem_float}, "policy.memory_bytes: expected non-negative integer");
    expect_req_error((field){"policy", p_pol_network_bad}, "policy.network: unknown value");
    expect_req_error((field){"policy", p_pol_fs_mode_int}, "policy.filesystem.mode: expected string");
    expect_req_error((field){"policy", p_pol_fs_ro_nomode}, "only valid with mode \"paths\"");
    expect_req_error((field){"policy", p_pol_env_allow_int}, "policy.env_allow[0]: expected string");
    expect_req_error((field){"workspace", p_int5}, "workspace: expected string");
    expect_req_error((field){"thread", p_bad_utf8}, "thread: string is not valid UTF-8");
    expect_req_error((field){"identity", p_nul_str}, "identity: string is not valid UTF-8 without NUL");
    expect_req_error((field){"reply_to", p_arr_str}, "reply_to: expected string");
    expect_req_error((field){"deadline_us", p_float}, "deadline_us: expected non-negative integer");
    expect_req_error((field){"deadline_us", p_neg5}, "deadline_us: expected non-negative integer");
    expect_req_error((field){"created_us", p_u64max}, "created_us: expected non-negative integer");
    expect_req_error((field){"trace", p_int5}, "trace: expected map");

    expect_res_error((field){"status", p_strx}, "status: unknown value");
    expect_res_error((field){"status", p_int5}, "status: expected string");
    expect_res_error((field){"exit_code", p_strx}, "exit_code: expected 32-bit integer");
    expect_res_error((field){"exit_code", p_u64max}, "exit_code: expected 32-bit integer");
    expect_res_error((field){"signal", p_neg5}, "signal: expected non-negative 32-bit integer");
    expect_res_error((field){"stdout", p_int5}, "stdout: expected bin or string");
    expect_res_error((field){"stdout_truncated", p_int5}, "stdout_truncated: expected bool");
    expect_res_error((field){"workspace_conflict", p_strx}, "workspace_conflict: expected bool");
    expect_res_error((field){"diagnostics", p_map_int}, "diagnostics: expected array");
    expect_res_error((field){"diagnostics", p_arr_int}, "diagnostics[0]: expected map");
    expect_res_error((field){"metadata", p_arr_str}, "metadata: expected map");
    expect_res_error((field){"wall_time_us", p_neg5}, "wall_time_us: expected non-negative integer");
    expect_res_error((field){"changed_paths", p_arr_int}, "changed_paths[0]: expected string");
    expect_res_error((field){"reason", p_int5}, "reason: expected string");
}

static void p_diag_neg_line(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 2);
    pk_str(pk, "message");
    pk_str(pk, "m");
    pk_str(pk, "line");
    msgpack_pack_int(pk, -1);
}
static void p_meta_attempt_str(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    pk_str(pk, "attempt");
    pk_str(pk, "x");
}

static void test_wrong_types_nested_result(void **state)
{
    expect_res_error((field){"diagnostics", p_diag_neg_line}, "diagnostics[0].line: expected non-negative integer");
    expect_res_error((field){"metadata", p_meta_attempt_str}, "metadata.attempt: expected non-negative integer");
}

static void test_required_fields_and_version(void **state)
{
    expect_req_error((field){"v", NULL}, "missing required field \"v\"");
    expect_req_error((field){"v", p_v2}, "unsupported schema version 2");
    expect_req_error((field){"v", p_vstr}, "v: expected integer");
    expect_req_error((field){"id", NULL}, "missing required field \"id\"");
    expect_req_error((field){"id", p_bad_id}, "id: must be");
    expect_req_error((field){"id", p_long_id}, "id: must be");
    expect_req_error((field){"language", NULL}, "missing required field \"language\"");
    expect_req_error((field){"code", NULL}, "code: required for language \"python\"");

    /* version is checked before field types: a v2 message may differ */
    {
        field over[] = {{"v", p_v2}, {"policy", p_strx}};
        cf_request r;
        cf_error err = {0};
        assert_int_equal(decode_req_with(over, 2, NULL, &r, &err), -1);
        assert_string_equal(err.msg, "unsupported schema version 2");
        assert_int_equal(err.code, CF_E_UNSUPPORTED);
    }
    {
        field over[] = {{"language", p_command}, {"code", NULL}, {"argv", p_empty_arr}};
        cf_request r;
        cf_error err = {0};
        assert_int_equal(decode_req_with(over, 3, NULL, &r, &err), -1);
        assert_non_null(strstr(err.msg, "argv: required and non-empty"));
        over[2].pack = p_arr_str;
        assert_int_equal(decode_req_with(over, 3, NULL, &r, &err), 0);
        assert_int_equal(r.argc, 1);
        cf_request_clear(&r);
    }
    {
        field over[] = {{"language", p_wasm}, {"code", NULL}};
        cf_request r;
        cf_error err = {0};
        assert_int_equal(decode_req_with(over, 2, NULL, &r, &err), -1);
        assert_non_null(strstr(err.msg, "module: required"));
    }
    /* duplicate known field */
    {
        field over[] = {{"id", p_id}};
        cf_bytes b = build_msg(req_base, 4, over, 1);
        /* append a second "id": bump the fixmap count and add the pair */
        uint8_t *m = malloc(b.len + 16);
        memcpy(m, b.data, b.len);
        m[0]++;
        memcpy(m + b.len, "\xa2" "id" "\xa1" "z", 5);
        cf_request r;
        cf_error err = {0};
        assert_int_equal(cf_request_decode(m, b.len + 5, NULL, &r, &err), -1);
        assert_non_null(strstr(err.msg, "id: duplicate field"));
        free(m);
        free(b.data);
    }
    /* result: status is required even though its zero value is success */
    {
        field over[] = {{"status", NULL}};
        cf_bytes b = build_msg(res_base, 3, over, 1);
        cf_result r;
        cf_error err = {0};
        assert_int_equal(cf_result_decode(b.data, b.len, NULL, &r, &err), -1);
        assert_non_null(strstr(err.msg, "missing required field \"status\""));
        free(b.data);
    }
    /* non-map and non-string keys */
    {
        cf_request r;
        cf_error err = {0};
        assert_int_equal(cf_request_decode("\x93\x01\x02\x03", 4, NULL, &r, &err), -1);
        assert_non_null(strstr(err.msg, "expected a msgpack map"));
        assert_int_equal(cf_request_decode("\x81\x01\x01", 3, NULL, &r, &err), -1);
        assert_non_null(strstr(err.msg, "expected string keys"));
        assert_int_equal(cf_request_decode("", 0, NULL, &r, &err), -1);
        assert_int_equal(cf_request_decode(NULL, 0, NULL, &r, &err), -1);
    }
}

static void test_nil_means_absent(void **state)
{
    field over[] = {{"backend", p_nil}, {"policy", p_nil}, {"deadline_us", p_nil}, {"argv", p_nil}};
    cf_request r;
    cf_error err = {0};
    assert_int_equal(decode_req_with(over, 4, NULL, &r, &err), 0);
    assert_null(r.backend);
    assert_int_equal(r.deadline_us, 0);
    assert_int_equal(r.argc, 0);
    cf_request_clear(&r);
    /* but not for required fields */
    expect_req_error((field){"id", p_nil}, "id: expected string");
}

static void test_unknown_fields_ignored(void **state)
{
    field over[] = {{"future", p_nested_unknown}, {"policy", p_pol_with_unknown}, {"zzz", p_float}};
    cf_request r;
    cf_error err = {0};
    if (decode_req_with(over, 3, NULL, &r, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(r.id, "req-1");
    assert_int_equal(r.policy.timeout_us, 1000);
    assert_int_equal(r.policy.fs_mode, CF_FS_NONE);
    cf_request_clear(&r);

    /* unknown fields in a result and its metadata */
    field rover[] = {{"status", p_success}, {"metadata", p_pol_with_unknown}, {"later", p_nested_unknown}};
    cf_bytes b = build_msg(res_base, 3, rover, 3);
    cf_result res;
    if (cf_result_decode(b.data, b.len, NULL, &res, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_null(res.meta.backend);
    cf_result_clear(&res);
    free(b.data);
}

static void test_trailing_garbage(void **state)
{
    cf_request want, r;
    cf_error err = {0};
    cf_bytes b;
    make_min_request(&want);
    assert_int_equal(cf_request_encode(&want, &b, &err), 0);
    uint8_t *m = malloc(b.len + 1);
    memcpy(m, b.data, b.len);
    m[b.len] = 0xc0;
    assert_int_equal(cf_request_decode(m, b.len + 1, NULL, &r, &err), -1);
    assert_non_null(strstr(err.msg, "1 trailing bytes"));
    assert_int_equal(cf_request_decode(m, b.len, NULL, &r, &err), 0);
    cf_request_clear(&r);
    free(m);
    free(b.data);
    cf_request_clear(&want);
}

/* Every proper prefix of a valid message must fail cleanly. */
static void test_truncated_every_offset(void **state)
{
    cf_request req, r;
    cf_result res, rr;
    cf_error err;
    cf_bytes b;
    make_full_request(&req);
    assert_int_equal(cf_request_encode(&req, &b, &err), 0);
    for (size_t n = 0; n < b.len; n++) {
        /* copy to an exact-size buffer so ASan sees any over-read */
        uint8_t *m = malloc(n ? n : 1);
        memcpy(m, b.data, n);
        cf_error_clear(&err);
        if (cf_request_decode(m, n, NULL, &r, &err) == 0)
            fail_msg("prefix of %zu/%zu bytes decoded", n, b.len);
        assert_true(err.msg[0] != '\0');
        assert_null(r.id);
        /* peek_id finds the id once its bytes are all there: the full
         * request starts 0xde 00 13, "v" 1, "id" (3 bytes) + 0xad + 13 */
        char id[CF_ID_MAX + 1];
        int prc = cf_request_peek_id(m, n, id, sizeof(id));
        size_t id_end = 3 + 3 + 3 + 1 + 13;
        if (n >= id_end) {
            assert_int_equal(prc, 0);
            assert_string_equal(id, "req-full-0001");
        } else {
            assert_int_equal(prc, -1);
        }
        free(m);
    }
    free(b.data);
    cf_request_clear(&req);

    make_full_result(&res);
    assert_int_equal(cf_result_encode(&res, &b, &err), 0);
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *m = malloc(n ? n : 1);
        memcpy(m, b.data, n);
        assert_int_equal(cf_result_decode(m, n, NULL, &rr, &err), -1);
        assert_null(rr.id);
        assert_int_equal(cf_msgpack_validate(m, n, NULL, &err), -1);
        free(m);
    }
    free(b.data);
    cf_result_clear(&res);
}

static void p_big_str(msgpack_packer *pk)
{
    char s[17];
    memset(s, 'b', 17);
    msgpack_pack_str_with_body(pk, s, 17);
}
static void p_big_bin(msgpack_packer *pk)
{
    char s[65] = {0};
    msgpack_pack_bin_with_body(pk, s, 65);
}
static void p_arr6(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 6);
    for (int i = 0; i < 6; i++)
        pk_str(pk, "a");
}

static void test_limits(void **state)
{
    cf_decode_limits lim = {.max_total_bytes = 4096, .max_str_bytes = 16, .max_bin_bytes = 64, .max_elements = 5,
                            .max_depth = 8};
    cf_request r;
    cf_error err = {0};
    field f1 = {"backend", p_big_str};
    assert_int_equal(decode_req_with(&f1, 1, &lim, &r, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    if (!strstr(err.msg, "backend: string of 17 bytes exceeds the limit of 16"))
        fail_msg("%s", err.msg);
    field f2 = {"module", p_big_bin};
    assert_int_equal(decode_req_with(&f2, 1, &lim, &r, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_non_null(strstr(err.msg, "module: binary of 65 bytes exceeds the limit of 64"));
    /* code may be a str longer than max_str: it is a byte field */
    field f3 = {"code", p_big_str};
    assert_int_equal(decode_req_with(&f3, 1, &lim, &r, &err), 0);
    assert_int_equal(r.code.len, 17);
    cf_request_clear(&r);
    field f4 = {"argv", p_arr6};
    assert_int_equal(decode_req_with(&f4, 1, &lim, &r, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_non_null(strstr(err.msg, "argv: array declares 6 entries, limit is 5"));
    /* total size */
    cf_request want;
    cf_bytes b;
    make_full_request(&want);
    assert_int_equal(cf_request_encode(&want, &b, &err), 0);
    cf_decode_limits small = cf_decode_limits_default;
    small.max_total_bytes = b.len - 1;
    assert_int_equal(cf_request_decode(b.data, b.len, &small, &r, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_non_null(strstr(err.msg, "exceeds the limit"));
    small.max_total_bytes = b.len;
    assert_int_equal(cf_request_decode(b.data, b.len, &small, &r, &err), 0);
    cf_request_clear(&r);
    free(b.data);
    cf_request_clear(&want);

    /* the documented defaults */
    assert_int_equal(cf_decode_limits_default.max_total_bytes, 16u << 20);
    assert_int_equal(cf_decode_limits_default.max_str_bytes, 64u << 10);
    assert_int_equal(cf_decode_limits_default.max_bin_bytes, 8u << 20);
    assert_int_equal(cf_decode_limits_default.max_elements, 65536);
    assert_int_equal(cf_decode_limits_default.max_depth, 32);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A 5-byte header declaring 2^28 entries must be refused at once: the
 * count is checked against the bytes that remain before anything is
 * sized from it (msgpack-c would reserve gigabytes here). */
static void test_huge_declared_counts(void **state)
{
    cf_request r;
    cf_result res;
    cf_error err = {0};
    static const uint8_t top[] = {0xdf, 0x10, 0x00, 0x00, 0x00, 0xa1, 'v', 0x01};
    /* even with an unlimited element cap, the remaining-bytes check holds */
    cf_decode_limits huge = cf_decode_limits_default;
    huge.max_elements = SIZE_MAX;
    double t0 = now_s();
    assert_int_equal(cf_request_decode(top, sizeof(top), &huge, &r, &err), -1);
    assert_non_null(strstr(err.msg, "declares 268435456 entries but only 3 bytes remain"));
    assert_int_equal(cf_result_decode(top, sizeof(top), NULL, &res, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_int_equal(cf_msgpack_validate(top, sizeof(top), &huge, &err), -1);

    /* nested: argv declared as array32 of 0x10000000 */
    uint8_t m[64];
    size_t n = 0;
    memcpy(m + n, "\x84\xa1v\x01\xa2id\xa1x\xa8language\xa7" "command\xa4" "argv", 31);
    n += 31;
    memcpy(m + n, "\xdd\x10\x00\x00\x00\xa1x", 7);
    n += 7;
    assert_int_equal(cf_request_decode(m, n, &huge, &r, &err), -1);
    if (!strstr(err.msg, "declares 268435456 entries but only 2 bytes remain"))
        fail_msg("%s", err.msg);
    /* same bytes with a truthful count decode */
    m[n - 7 + 1] = 0;
    m[n - 7 + 4] = 1;
    if (cf_request_decode(m, n, &huge, &r, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(r.argc, 1);
    cf_request_clear(&r);
    /* a map count that fits the bytes only as an array (1 byte/entry) */
    static const uint8_t half[] = {0x81, 0xde, 0x00, 0x03, 0x01, 0x02, 0x03, 0x04};
    assert_int_equal(cf_msgpack_validate(half + 1, sizeof(half) - 1, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "but only 4 bytes remain"));
    /* a str/bin length beyond the buffer */
    assert_int_equal(cf_msgpack_validate("\xdb\x7f\xff\xff\xff" "ab", 7, NULL, &err), -1);
    assert_int_equal(cf_msgpack_validate("\xc6\x00\x00\x10\x00" "ab", 7, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "truncated"));
    assert_true(now_s() - t0 < 1.0);
}

/* Wraps value bytes as the "input" of an otherwise valid request. */
static int decode_with_input_lim(const uint8_t *val, size_t vlen, const cf_decode_limits *lim, cf_error *err)
{
    cf_bytes base = build_msg(req_base, 4, NULL, 0);
    size_t n = base.len + 6 + vlen;
    uint8_t *m = malloc(n);
    memcpy(m, base.data, base.len);
    m[0]++; /* one more entry in the fixmap */
    memcpy(m + base.len, "\xa5input", 6);
    memcpy(m + base.len + 6, val, vlen);
    cf_request r;
    int rc = cf_request_decode(m, n, lim, &r, err);
    if (rc == 0) {
        assert_int_equal(r.input.len, vlen);
        assert_memory_equal(r.input.data, val, vlen);
    }
    cf_request_clear(&r);
    free(m);
    free(base.data);
    return rc;
}

static int decode_with_input(const uint8_t *val, size_t vlen, cf_error *err)
{
    return decode_with_input_lim(val, vlen, NULL, err);
}

static void test_deep_nesting(void **state)
{
    uint8_t v[128];
    cf_error err = {0};
    /* 100 nested one-element arrays around nil */
    memset(v, 0x91, 100);
    v[100] = 0xc0;
    assert_int_equal(decode_with_input(v, 101, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_non_null(strstr(err.msg, "input: nesting deeper than 32 levels"));
    /* a caller's larger limits are honoured for the value as a whole */
    cf_decode_limits big = cf_decode_limits_default;
    big.max_depth = 101;
    assert_int_equal(decode_with_input_lim(v, 101, &big, &err), 0);
    big.max_depth = 100;
    assert_int_equal(decode_with_input_lim(v, 101, &big, &err), -1);
    /* the top-level map is depth 1, so input may nest 31 containers */
    memset(v, 0x91, 31);
    v[31] = 0xc0;
    assert_int_equal(decode_with_input(v, 32, &err), 0);
    memset(v, 0x91, 32);
    v[32] = 0xc0;
    assert_int_equal(decode_with_input(v, 33, &err), -1);
    /* also in maps, and in unknown fields */
    for (int i = 0; i < 50; i++) {
        v[2 * i] = 0x81;
        v[2 * i + 1] = 0xa0; /* key "" */
    }
    v[100] = 0x01;
    assert_int_equal(decode_with_input(v, 101, &err), -1);
    cf_bytes base = build_msg(req_base, 4, NULL, 0);
    uint8_t *m = malloc(base.len + 4 + 101);
    memcpy(m, base.data, base.len);
    m[0]++;
    memcpy(m + base.len, "\xa3zzz", 4);
    memset(m + base.len + 4, 0x91, 100);
    m[base.len + 4 + 100] = 0xc0;
    cf_request r;
    assert_int_equal(cf_request_decode(m, base.len + 105, NULL, &r, &err), -1);
    assert_non_null(strstr(err.msg, "nesting deeper"));
    /* cf_msgpack_validate counts the value itself as depth 1 */
    assert_int_equal(cf_msgpack_validate(m + base.len + 4 + 68, 33, NULL, &err), 0);
    assert_int_equal(cf_msgpack_validate(m + base.len + 4 + 67, 34, NULL, &err), -1);
    /* a caller's huge max_depth is clamped, the skip stack stays bounded */
    uint8_t *deep = malloc(1001);
    memset(deep, 0x91, 1000);
    deep[1000] = 0xc0;
    cf_decode_limits lim = cf_decode_limits_default;
    lim.max_depth = 100000;
    assert_int_equal(cf_msgpack_validate(deep, 1001, &lim, &err), -1);
    assert_int_equal(cf_msgpack_validate(deep + 1000 - CF_MP_DEPTH_HARD, CF_MP_DEPTH_HARD + 1, &lim, &err), 0);
    free(deep);
    free(m);
    free(base.data);
}

static void test_peek_id(void **state)
{
    char id[CF_ID_MAX + 1];
    /* well-formed */
    field over[] = {{"zz", p_nested_unknown}};
    cf_bytes b = build_msg(req_base, 4, over, 1);
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, sizeof(id)), 0);
    assert_string_equal(id, "req-1");
    /* idsz too small for the id */
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, 5), -1);
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, 6), 0);
    free(b.data);
    /* malformed elsewhere: wrong types, unsupported version, junk after the id */
    field bad[] = {{"v", p_v2}, {"language", p_int5}, {"policy", p_pol_timeout_neg}};
    b = build_msg(req_base, 4, bad, 3);
    cf_request r;
    cf_error err = {0};
    assert_int_equal(cf_request_decode(b.data, b.len, NULL, &r, &err), -1);
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, sizeof(id)), 0);
    assert_string_equal(id, "req-1");
    free(b.data);
    /* id after a field with a non-string key and a lying map count */
    static const uint8_t lying[] = {0xdf, 0x10, 0x00, 0x00, 0x00, 0x01, 0x02, 0xa2, 'i', 'd', 0xa3, 'a', 'b', 'c'};
    assert_int_equal(cf_request_peek_id(lying, sizeof(lying), id, sizeof(id)), 0);
    assert_string_equal(id, "abc");
    /* unusable ids */
    field nos[] = {{"id", p_bad_id}};
    b = build_msg(req_base, 4, nos, 1);
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, sizeof(id)), -1);
    assert_string_equal(id, "");
    free(b.data);
    field noid[] = {{"id", NULL}};
    b = build_msg(req_base, 4, noid, 1);
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, sizeof(id)), -1);
    free(b.data);
    field intid[] = {{"id", p_int5}};
    b = build_msg(req_base, 4, intid, 1);
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, sizeof(id)), -1);
    free(b.data);
    field longid[] = {{"id", p_long_id}};
    b = build_msg(req_base, 4, longid, 1);
    assert_int_equal(cf_request_peek_id(b.data, b.len, id, sizeof(id)), -1);
    free(b.data);
    assert_int_equal(cf_request_peek_id("\x93\xa2id\xa1x", 6, id, sizeof(id)), -1);
    assert_int_equal(cf_request_peek_id("", 0, id, sizeof(id)), -1);
    assert_int_equal(cf_request_peek_id(NULL, 10, id, sizeof(id)), -1);
    assert_int_equal(cf_request_peek_id("\xdf\x00", 2, id, sizeof(id)), -1);
    /* a broken field before the id hides it (best effort, no over-read) */
    static const uint8_t broken[] = {0x82, 0xa1, 'x', 0xdb, 0xff, 0xff, 0xff, 0xff, 0xa2, 'i', 'd', 0xa1, 'q'};
    assert_int_equal(cf_request_peek_id(broken, sizeof(broken), id, sizeof(id)), -1);
}

/* Deterministic mutation fuzz: random byte flips, inserts and cuts of the
 * golden messages must never crash or leak (run under ASan). */
static void test_mutation_fuzz(void **state)
{
    cf_request req, r;
    cf_result res, rr;
    cf_error err;
    cf_bytes rb, sb;
    make_full_request(&req);
    make_full_result(&res);
    assert_int_equal(cf_request_encode(&req, &rb, &err), 0);
    assert_int_equal(cf_result_encode(&res, &sb, &err), 0);
    uint32_t seed = 12345;
    int decoded = 0;
    for (int iter = 0; iter < 3000; iter++) {
        const cf_bytes *src = (iter & 1) ? &sb : &rb;
        uint8_t *m = malloc(src->len);
        memcpy(m, src->data, src->len);
        size_t n = src->len;
        int muts = 1 + (int)((seed >> 8) % 4);
        for (int k = 0; k < muts; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 4) % n;
            uint8_t val = (uint8_t)(seed >> 20);
            switch ((seed >> 28) % 3) {
            case 0: m[pos] = val; break;
            case 1: m[pos] ^= (uint8_t)(1u << (val % 8)); break;
            default: n = pos + 1; break;
            }
        }
        char id[CF_ID_MAX + 1];
        (void)cf_request_peek_id(m, n, id, sizeof(id));
        if (iter & 1) {
            if (cf_result_decode(m, n, NULL, &rr, &err) == 0) {
                decoded++;
                cf_result_clear(&rr);
            }
        } else if (cf_request_decode(m, n, NULL, &r, &err) == 0) {
            decoded++;
            cf_request_clear(&r);
        }
        (void)cf_msgpack_validate(m, n, NULL, &err);
        free(m);
    }
    /* some mutations (inside strings) leave valid messages */
    assert_true(decoded > 0);
    free(rb.data);
    free(sb.data);
    cf_request_clear(&req);
    cf_result_clear(&res);
}

static void test_msgpack_validate(void **state)
{
    cf_error err = {0};
    assert_int_equal(cf_msgpack_validate("\xc0", 1, NULL, &err), 0);
    assert_int_equal(cf_msgpack_validate("\x92\x01\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00", 11, NULL, &err), 0);
    assert_int_equal(cf_msgpack_validate("\xd6\xff\x00\x00\x00\x01", 6, NULL, &err), 0); /* timestamp ext */
    assert_int_equal(cf_msgpack_validate("\xc0\xc0", 2, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "trailing"));
    assert_int_equal(cf_msgpack_validate("\xc1", 1, NULL, &err), -1);
    assert_int_equal(cf_msgpack_validate("", 0, NULL, &err), -1);
    assert_int_equal(cf_msgpack_validate("\x92\x01", 2, NULL, &err), -1);
    assert_int_equal(cf_msgpack_validate("\xd8\x01" "0123456789abcde", 17, NULL, &err), -1); /* fixext16 short */
}

static void test_helpers(void **state)
{
    assert_true(cf_id_valid("a", 1));
    assert_true(cf_id_valid("req-1:x/y_z.~", 13));
    assert_false(cf_id_valid("", 0));
    assert_false(cf_id_valid(NULL, 0));
    assert_false(cf_id_valid("a b", 3));
    assert_false(cf_id_valid("a\tb", 3));
    assert_false(cf_id_valid("a\0b", 3));
    assert_false(cf_id_valid("\xc3\xa9", 2));
    char big[CF_ID_MAX + 1];
    memset(big, 'x', sizeof(big));
    assert_true(cf_id_valid(big, CF_ID_MAX));
    assert_false(cf_id_valid(big, CF_ID_MAX + 1));

    for (int l = CF_LANG_COMMAND; l < CF_LANG__COUNT; l++) {
        cf_language out;
        assert_int_equal(cf_language_parse(cf_language_name((cf_language)l), &out), 0);
        assert_int_equal(out, l);
    }
    cf_language lo;
    assert_int_equal(cf_language_parse("none", &lo), -1);
    assert_int_equal(cf_language_parse("Python", &lo), -1);
    assert_int_equal(cf_language_parse(NULL, &lo), -1);
    for (int s = 0; s < CF_STATUS__COUNT; s++) {
        cf_status out;
        assert_int_equal(cf_status_parse(cf_status_name((cf_status)s), &out), 0);
        assert_int_equal(out, s);
    }
    cf_status so;
    assert_int_equal(cf_status_parse("ok", &so), -1);
    assert_string_equal(cf_status_name(CF_STATUS_MEMORY_EXCEEDED), "memory_exceeded");
    assert_string_equal(cf_status_name((cf_status)99), "unknown");
    assert_string_equal(cf_network_name(CF_NET_DISABLED), "disabled");
    assert_string_equal(cf_fs_mode_name(CF_FS_WORKSPACE_RW), "workspace_rw");

    cf_result r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(cf_result_set_reason(&r, "limit %s hit after %d us", "timeout_us", 42), 0);
    assert_string_equal(r.reason, "limit timeout_us hit after 42 us");
    assert_int_equal(cf_result_set_reason(&r, "%s", ""), 0);
    assert_string_equal(r.reason, "");
    assert_int_equal(cf_str_set(&r.id, "abc"), 0);
    assert_string_equal(r.id, "abc");
    assert_int_equal(cf_str_set(&r.id, NULL), 0);
    assert_null(r.id);
    assert_int_equal(cf_bytes_set(&r.stdout_data, "xy", 2), 0);
    assert_int_equal(r.stdout_data.len, 2);
    assert_int_equal(r.stdout_data.data[2], 0); /* NUL-terminated copy */
    cf_result_clear(&r);
    assert_null(r.stdout_data.data);
    cf_result_clear(NULL);
    cf_request_clear(NULL);
}

/* reply_to_error (additive, v1): through msgpack and the JSON view, apart
 * from reason. */
static void test_result_reply_to_error(void **state)
{
    (void)state;
    cf_result r = {0}, back = {0};
    r.id = strdup("r-1");
    r.status = CF_STATUS_SUCCESS;
    r.has_exit_code = true;
    r.reply_to_error = strdup("reply_to topic 'x' could not take the result (Broker: Unknown topic or partition)");
    cf_bytes enc = {0};
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_result_encode(&r, &enc, &err), 0);
    assert_int_equal(cf_result_decode(enc.data, enc.len, NULL, &back, &err), 0);
    assert_string_equal(back.reply_to_error, r.reply_to_error);
    assert_null(back.reason);
    cf_result_clear(&back);
    json_t *j = cf_result_to_json(&r);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "reply_to_error")), r.reply_to_error);
    assert_int_equal(cf_result_from_json(j, &back, &err), 0);
    assert_string_equal(back.reply_to_error, r.reply_to_error);
    json_decref(j);
    free(enc.data);
    cf_result_clear(&back);
    cf_result_clear(&r);
}

/* A workspace op (SPEC.md section 3.5): round trip through msgpack and
 * JSON; no language; a program's fields and an op's missing or misplaced
 * fields refused with the field named. */
static void test_workspace_op(void **state)
{
    (void)state;
    cf_request a;
    memset(&a, 0, sizeof(a));
    a.id = strdup("wsop-1");
    a.workspace = strdup("ws-1");
    a.workspace_op = calloc(1, sizeof(*a.workspace_op));
    cf_workspace_op *o = a.workspace_op;
    o->op = CF_WS_OP_STR_REPLACE;
    o->path = strdup("src/a.py");
    cf_bytes_set(&o->old_str, "x = 1", 5);
    cf_bytes_set(&o->new_str, "", 0);
    o->has_new_str = true;
    o->expected_revision = 0;
    o->has_expected_revision = true;
    cf_bytes enc = {0};
    assert_int_equal(cf_request_encode(&a, &enc, NULL), 0);
    cf_request b;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_request_decode(enc.data, enc.len, NULL, &b, &err), 0);
    assert_int_equal(b.language, CF_LANG_NONE);
    assert_non_null(b.workspace_op);
    assert_int_equal(b.workspace_op->op, CF_WS_OP_STR_REPLACE);
    assert_string_equal(b.workspace_op->path, "src/a.py");
    assert_int_equal(b.workspace_op->old_str.len, 5);
    assert_true(b.workspace_op->has_new_str);
    assert_int_equal(b.workspace_op->new_str.len, 0);
    assert_true(b.workspace_op->has_expected_revision);
    assert_int_equal(b.workspace_op->expected_revision, 0);
    assert_false(b.workspace_op->has_insert_line);
    json_t *j = cf_request_to_json(&b);
    assert_non_null(j);
    assert_null(json_object_get(j, "language"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "workspace_op"), "op")), "str_replace");
    cf_request c;
    assert_int_equal(cf_request_from_json(j, &c, &err), 0);
    cf_bytes enc2 = {0};
    assert_int_equal(cf_request_encode(&c, &enc2, NULL), 0);
    assert_int_equal(enc.len, enc2.len);
    assert_memory_equal(enc.data, enc2.data, enc.len);
    json_decref(j);
    free(enc2.data);
    cf_request_clear(&b);
    cf_request_clear(&c);
    /* Refusals, each naming the field. */
    static const struct {
        const char *json, *says;
    } bad[] = {
        {"{\"v\":1,\"id\":\"x\",\"workspace_op\":{\"op\":\"list\"}}", "needs \"workspace\""},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"language\":\"shell\",\"code\":\"\","
         "\"workspace_op\":{\"op\":\"list\"}}", "language: not with workspace_op"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"files\":{\"a\":\"b\"},\"workspace_op\":{\"op\":\"list\"}}",
         "files: not with workspace_op"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{}}", "workspace_op.op: required"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"chmod\"}}", "unknown value"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"read\"}}",
         "workspace_op.path: required for read"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"write\",\"path\":\"a\"}}",
         "content: required for write"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"grep\"}}",
         "pattern: required and non-empty for grep"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"str_replace\",\"path\":\"a\","
         "\"old_str\":\"\"}}", "old_str: required and non-empty"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"insert\",\"path\":\"a\","
         "\"new_str\":\"l\"}}", "insert needs insert_line and new_str"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"read\",\"path\":\"a\","
         "\"expected_revision\":3}}", "expected_revision: only for"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"grep\",\"pattern\":\"a\","
         "\"first_line\":3}}", "first_line: only for read"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"read\",\"path\":\"a\","
         "\"first_line\":0}}", "first_line: lines count from 1"},
        {"{\"v\":1,\"id\":\"x\",\"workspace\":\"w\",\"workspace_op\":{\"op\":\"read\",\"path\":\"a\","
         "\"first_line\":5,\"last_line\":4}}", "last_line: before first_line"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_error_t je;
        json_t *bj = json_loads(bad[i].json, 0, &je);
        assert_non_null(bj);
        cf_request r;
        cf_error_clear(&err);
        assert_int_equal(cf_request_from_json(bj, &r, &err), -1);
        if (!strstr(err.msg, bad[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, err.msg, bad[i].says);
        json_decref(bj);
    }
    free(enc.data);
    cf_request_clear(&a);
}

/* The idempotency digest: delivery metadata and map order do not count,
 * anything the program sees does. */
static void test_request_digest(void **state)
{
    (void)state;
    cf_request a;
    memset(&a, 0, sizeof(a));
    a.id = strdup("dig-1");
    a.language = CF_LANG_SHELL;
    cf_bytes_set(&a.code, "echo hi", 7);
    a.env = calloc(2, sizeof(*a.env));
    a.env[0].key = strdup("A");
    a.env[0].value = strdup("1");
    a.env[1].key = strdup("B");
    a.env[1].value = strdup("2");
    a.n_env = 2;
    char d1[CF_DIGEST_HEX], d2[CF_DIGEST_HEX];
    assert_int_equal(cf_request_digest(&a, d1, NULL), 0);
    assert_int_equal(strlen(d1), 64);
    /* Resubmitted: new created_us, deadline, trace; env in another order. */
    a.created_us = 123;
    a.deadline_us = 456;
    cf_strmap_entry tmp = a.env[0];
    a.env[0] = a.env[1];
    a.env[1] = tmp;
    assert_int_equal(cf_request_digest(&a, d2, NULL), 0);
    assert_string_equal(d1, d2);
    /* A different program is a different request. */
    cf_bytes_set(&a.code, "echo ho", 7);
    assert_int_equal(cf_request_digest(&a, d2, NULL), 0);
    assert_string_not_equal(d1, d2);
    cf_bytes_set(&a.code, "echo hi", 7);
    a.policy.timeout_us = 5;
    assert_int_equal(cf_request_digest(&a, d2, NULL), 0);
    assert_string_not_equal(d1, d2);
    cf_request_clear(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_request_min),
        cmocka_unit_test(test_golden_request_full),
        cmocka_unit_test(test_golden_result_min),
        cmocka_unit_test(test_golden_result_full),
        cmocka_unit_test(test_golden_request_compiled),
        cmocka_unit_test(test_golden_result_compiled),
        cmocka_unit_test(test_golden_request_stream),
        cmocka_unit_test(test_golden_request_workspace_op),
        cmocka_unit_test(test_golden_request_workspace_read),
        cmocka_unit_test(test_golden_start_notice),
        cmocka_unit_test(test_golden_request_session),
        cmocka_unit_test(test_session_rules),
        cmocka_unit_test(test_golden_result_session),
        cmocka_unit_test(test_golden_result_stream),
        cmocka_unit_test(test_golden_chunk),
        cmocka_unit_test(test_result_reply_to_error),
        cmocka_unit_test(test_golden_min_request_bytes_by_hand),
        cmocka_unit_test(test_golden_python),
        cmocka_unit_test(test_request_roundtrip),
        cmocka_unit_test(test_result_roundtrip),
        cmocka_unit_test(test_encoder_omits_zero_fields),
        cmocka_unit_test(test_encoder_rejects_invalid),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_wrong_types_nested_result),
        cmocka_unit_test(test_required_fields_and_version),
        cmocka_unit_test(test_nil_means_absent),
        cmocka_unit_test(test_unknown_fields_ignored),
        cmocka_unit_test(test_trailing_garbage),
        cmocka_unit_test(test_truncated_every_offset),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_huge_declared_counts),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_peek_id),
        cmocka_unit_test(test_mutation_fuzz),
        cmocka_unit_test(test_msgpack_validate),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_request_digest),
        cmocka_unit_test(test_workspace_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
