/* The compile / harness / cases / collect pipeline (cf_pipeline.h) on the
 * sandbox backend, the way the worker drives it (needs root: skipped
 * otherwise).  Toolchains are the worker's defaults, which
 * deploy/install.sh provides: gcc, g++, Debian's rustc and go, and tsc. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "support/cgroup_host.h"

#include "test_host.h"
#include "unit/request_builders.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_pipeline.h"
#include "cf_schema_json.h"
#include "cf_util.h"
#include "support/backend_settings.h"

#define SEC 1000000LL
#define UID_BASE 233000
#define TSC_PATH "/usr/local/lib/codefleet/typescript/node_modules/typescript/bin/tsc"

typedef struct fixture {
    char root[64];
    char cg_parent[64];
    char harness[1024];
    cf_backend_config cfg;
    cf_backend_set *set;
    const cf_backend *be;
    cf_pipeline *pl;
} fixture;

static fixture *F;

static bool have_root(void)
{
    return geteuid() == 0;
}

static void pipeline_config(cf_pipeline_config *pc, const char *harness_dir)
{
    memset(pc, 0, sizeof(*pc));
    pc->cc = "/usr/bin/gcc";
    pc->cxx = "/usr/bin/g++";
    /* Another rustc (a rustup proxy, say) can be tried with CF_TEST_RUSTC. */
    pc->rustc = getenv("CF_TEST_RUSTC") ? getenv("CF_TEST_RUSTC") : "/usr/bin/rustc";
    pc->go = "/usr/bin/go";
    pc->tsc = TSC_PATH;
    pc->node = "/usr/bin/node";
    pc->harness_dir = harness_dir;
    pc->allowed_flags[CF_LANG_C] = "-O0,-O1,-std=c*,-D*";
    pc->allowed_flags[CF_LANG_RUST] = "-Copt-level=*";
    pc->compile_timeout_us = 20 * SEC;
    pc->compile_memory_bytes = 1LL << 30;
    pc->compile_processes = 64;
    pc->compile_output_bytes = 256 * 1024;
    pc->artifact_bytes = 32LL << 20;
    pc->cache_bytes = 64LL << 20;
    pc->collect_bytes = 4096;
    pc->collect_scan_bytes = 8LL << 20;
}

static int setup_group(void **state)
{
    (void)state;
    F = calloc(1, sizeof(*F));
    if (!F || !have_root())
        return 0;
    const char *src = getenv("CF_SOURCE_DIR");
    if (src)
        snprintf(F->harness, sizeof(F->harness), "%s/backends/languages/harness", src);
    else /* run by hand: this file is tests/unit/ of the tree */
    {
        snprintf(F->harness, sizeof(F->harness), "%s", __FILE__);
        char *t = strstr(F->harness, "tests/unit/test_pipeline.c");
        if (t)
            snprintf(t, sizeof(F->harness) - (size_t)(t - F->harness), "backends/languages/harness");
    }
    cf_pipeline_config pc;
    pipeline_config(&pc, F->harness);
    cf_error err;
    if (cf_pipeline_new(&pc, &F->pl, &err) < 0) {
        fprintf(stderr, "pipeline: %s\n", err.msg);
        return -1;
    }
    char desc[1024];
    cf_pipeline_describe(F->pl, desc, sizeof(desc));
    fprintf(stderr, "toolchains: %s\n", desc);
    cf_strlcpy(F->root, "/tmp/cf-pltest-XXXXXX", sizeof(F->root));
    if (!mkdtemp(F->root) || chmod(F->root, 0711) < 0)
        return -1;
    snprintf(F->cg_parent, sizeof(F->cg_parent), "/cf-pltest-%d", (int)getpid());
    F->cfg.work_root = F->root;
    F->cfg.python_path = "/usr/bin/python3";
    F->cfg.node_path = "/usr/bin/node";
    F->cfg.shell_path = "/bin/sh";
    F->cfg.exec_path = "/usr/bin:/bin";
    F->cfg.slots = 1;
    F->cfg.max_files_bytes = 8 << 20;
    F->cfg.max_output_file_bytes = 1 << 16;
    F->cfg.cgroup_root = F->cg_parent;
    F->cfg.run_uid_base = UID_BASE;
    /* Warm sandboxes, no zygote: what these cases were written against. */
    F->cfg.settings = test_backend_settings((const char *[]){"sandbox-warm", "true", "sandbox-zygote", "false", NULL});
    F->cfg.compiled_languages = 1u << CF_LANG_C | 1u << CF_LANG_CPP | 1u << CF_LANG_RUST | 1u << CF_LANG_GO |
                                1u << CF_LANG_TYPESCRIPT;
    F->cfg.toolchain_dirs = cf_pipeline_toolchain_dirs(F->pl);
    if (cf_backend_set_new("sandbox", &F->cfg, &F->set, &err) < 0) {
        fprintf(stderr, "set: %s\n", err.msg);
        return -1;
    }
    F->be = cf_backend_set_get(F->set, 0);
    return 0;
}

static int teardown_group(void **state)
{
    (void)state;
    if (F && have_root()) {
        cf_backend_set_destroy(F->set);
        cf_pipeline_destroy(F->pl);
        cgh_remove(F->cg_parent);
        rmdir(F->root);
    }
    free(F);
    return 0;
}

#define NEED_ROOT()                                                                                                \
    do {                                                                                                           \
        if (!have_root() || !F->be)                                                                                \
            skip();                                                                                                \
    } while (0)

static int run(const char *profile, const cf_request *req, cf_result *res)
{
    memset(res, 0, sizeof(*res));
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "test"};
    cf_error err;
    cf_error_clear(&err);
    int rc = cf_pipeline_execute(F->pl, F->be, profile, &ctx, req, res, &err);
    if (rc < 0)
        fprintf(stderr, "pipeline_execute: %s\n", err.msg);
    return rc;
}

static void show(const cf_result *res)
{
    json_t *j = cf_result_to_json(res);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    fprintf(stderr, "result: %.3000s\n", s ? s : "?");
    free(s);
    json_decref(j);
}

static bool has_bytes(const cf_bytes *b, const char *s)
{
    return b->data && memmem(b->data, b->len, s, strlen(s)) != NULL;
}

static void add_case(cf_request *r, const char *name, const char *stdin_text, const char *expect)
{
    r->cases = realloc(r->cases, (r->n_cases + 1) * sizeof(*r->cases));
    cf_case *c = &r->cases[r->n_cases++];
    memset(c, 0, sizeof(*c));
    c->name = name ? strdup(name) : NULL;
    if (stdin_text)
        cf_bytes_set(&c->stdin_data, stdin_text, strlen(stdin_text));
    if (expect) {
        c->has_expect = true;
        cf_bytes_set(&c->expect_stdout, expect, strlen(expect));
    }
}

static const cf_diagnostic *first_level(const cf_result *res, const char *level)
{
    for (size_t i = 0; i < res->n_diagnostics; i++)
        if (res->diagnostics[i].level && strcmp(res->diagnostics[i].level, level) == 0)
            return &res->diagnostics[i];
    return NULL;
}

/* ---- C / C++ ---- */

static void test_c_compiles_and_runs(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "#include <stdio.h>\nint main(void) { puts(\"hello from c\"); return 0; }\n",
                     10 * SEC);
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(has_bytes(&res.stdout_data, "hello from c\n"));
    assert_true(res.compile.present);
    assert_false(res.compile.cached);
    assert_true(res.compile.wall_time_us > 0);
    assert_non_null(res.meta.toolchain);
    assert_memory_equal(res.meta.toolchain, "gcc ", 4);
    assert_string_equal(res.meta.language, "c");
    assert_string_equal(res.meta.isolation, "sandbox");
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_c_syntax_error_has_exact_diagnostic(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "int main(void)\n{\n    return 0\n}\n", 10 * SEC);
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    const cf_diagnostic *d = first_level(&res, "error");
    assert_non_null(d);
    assert_string_equal(d->file, "main.c");
    assert_int_equal(d->line, 3);
    assert_int_equal(d->column, 13);
    assert_string_equal(d->message, "expected ';' before '}' token");
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "main.c:3:13: expected ';' before '}' token"));
    assert_false(res.has_exit_code); /* nothing ran */
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_cpp_type_error(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_CPP, "#include <string>\nint main() {\n    int x = std::string(\"a\");\n    return x;\n}\n",
                     10 * SEC);
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    const cf_diagnostic *d = first_level(&res, "error");
    assert_non_null(d);
    assert_string_equal(d->file, "main.cpp");
    assert_int_equal(d->line, 3);
    assert_non_null(strstr(d->message, "cannot convert"));
    assert_memory_equal(res.meta.toolchain, "g++ ", 4);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_c_warning_on_success_is_reported(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "int main(void)\n{\n    int unused;\n    return 0;\n}\n", 10 * SEC);
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    const cf_diagnostic *d = first_level(&res, "warning");
    assert_non_null(d);
    assert_string_equal(d->code, "-Wunused-variable");
    assert_int_equal(d->line, 3);
    assert_int_equal(d->column, 9);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_c_include_of_host_file_gets_nothing(void **state)
{
    (void)state;
    NEED_ROOT();
    /* /etc/shadow exists on the host (root-only); the compiler sees a
     * root of its own where it does not. */
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "#include \"/etc/shadow\"\nint main(void) { return 0; }\n", 10 * SEC);
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    const cf_diagnostic *d = first_level(&res, "error");
    assert_non_null(d);
    assert_non_null(strstr(d->message, "No such file or directory"));
    for (size_t i = 0; i < res.n_diagnostics; i++)
        assert_null(strstr(res.diagnostics[i].message, "root:"));
    assert_false(has_bytes(&res.stderr_data, "root:"));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_c_include_dev_zero_stopped_by_compile_limits(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "#include \"/dev/zero\"\nint main(void) { return 0; }\n", 10 * SEC);
    r.policy.compile_timeout_us = 3 * SEC;
    r.policy.compile_memory_bytes = 256LL << 20;
    int64_t t0 = cf_mono_us();
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    int64_t took = cf_mono_us() - t0;
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    assert_non_null(res.reason);
    /* Stopped by the compile timeout or memory limit, not the program's. */
    assert_true(strstr(res.reason, "compile timeout") || strstr(res.reason, "compile memory"));
    assert_true(took < 15 * SEC);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_c_huge_array_stopped_by_artifact_limit(void **state)
{
    (void)state;
    NEED_ROOT();
    /* 64 MiB of initialised data: past the 32 MiB artifact cap. */
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "char big[64 << 20] = {1};\nint main(void) { return big[5]; }\n", 10 * SEC);
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_cpp_template_bomb_stopped(void **state)
{
    (void)state;
    NEED_ROOT();
    /* Compile-time evaluation of 4e10 steps: gcc memoises template
     * instantiations and constexpr calls, not loop iterations. */
    cf_request r;
    req_init_timeout(&r, CF_LANG_CPP,
                     "constexpr long g() {\n"
                     "    long s = 0;\n"
                     "    for (long i = 0; i < 200000; i++)\n"
                     "        for (long j = 0; j < 200000; j++)\n"
                     "            s += i ^ j;\n"
                     "    return s;\n"
                     "}\n"
                     "static_assert(g() != 1, \"spin\");\n"
                     "int main() { return 0; }\n",
                     10 * SEC);
    /* gcc's own operation limit stops it after ~3 s here: the compile
     * timeout comes first. */
    r.policy.compile_timeout_us = 1 * SEC;
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    if (!strstr(res.reason, "compile timeout of 1.00s exceeded"))
        show(&res);
    assert_non_null(strstr(res.reason, "compile timeout of 1.00s exceeded"));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_flag_outside_allowlist_rejected(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "int main(void) { return 0; }\n", 10 * SEC);
    const char *flags[] = {"-O1", "-fplugin=./x.so"};
    r.compile_flags = calloc(2, sizeof(char *));
    r.compile_flags[0] = strdup(flags[0]);
    r.compile_flags[1] = strdup(flags[1]);
    r.n_compile_flags = 2;
    cf_result res;
    assert_int_equal(run("t-c", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "'-fplugin=./x.so' is not allowed"));
    cf_result_clear(&res);
    /* The allowed one alone builds. */
    free(r.compile_flags[1]);
    r.n_compile_flags = 1;
    assert_int_equal(run("t-c", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* ---- cases and the cache ---- */

static const char doubler[] = "#include <stdio.h>\n"
                              "int main(void) {\n"
                              "    long n;\n"
                              "    if (scanf(\"%ld\", &n) != 1) { for (;;) ; }\n"
                              "    printf(\"%ld\\n\", 2 * n);\n"
                              "    return 0;\n"
                              "}\n";

static void test_cases_match_mismatch_and_timeout(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_pipeline_stats before, after;
    cf_pipeline_stats_get(F->pl, &before);
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, doubler, 1 * SEC);
    add_case(&r, "two", "2\n", "4\n");
    add_case(&r, "three", "3\n", "7");
    add_case(&r, "spins", "x", "0");
    add_case(&r, "ten", "10", "20");
    cf_result res;
    assert_int_equal(run("t-cases", &r, &res), 0);
    cf_pipeline_stats_get(F->pl, &after);
    if (res.n_cases != 4)
        show(&res);
    assert_int_equal(res.n_cases, 4);
    assert_int_equal(after.compiles - before.compiles, 1); /* built once */
    assert_string_equal(res.cases[0].name, "two");
    assert_int_equal(res.cases[0].status, CF_STATUS_SUCCESS);
    assert_int_equal(res.cases[0].match, 1);
    assert_int_equal(res.cases[1].status, CF_STATUS_SUCCESS);
    assert_int_equal(res.cases[1].match, -1);
    assert_true(has_bytes(&res.cases[1].stdout_data, "6\n"));
    assert_int_equal(res.cases[2].status, CF_STATUS_TIMEOUT);
    assert_int_equal(res.cases[2].match, 0);
    assert_int_equal(res.cases[3].status, CF_STATUS_SUCCESS);
    assert_int_equal(res.cases[3].match, 1);
    assert_true(res.cases[3].has_exit_code);
    assert_int_equal(res.cases[3].exit_code, 0);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_non_null(strstr(res.reason, "2 of 4 cases did not pass"));
    assert_non_null(strstr(res.reason, "case 2 (three): stdout does not match"));
    /* What did not match, in the case's reason and the request's. */
    assert_string_equal(res.cases[1].reason, "stdout does not match at line 1: expected \"7\", got \"6\"");
    assert_non_null(strstr(res.reason, "expected \"7\", got \"6\""));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_cases_stop_on_failure(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, doubler, 2 * SEC);
    add_case(&r, NULL, "1", "2");
    add_case(&r, NULL, "2", "5");
    add_case(&r, NULL, "3", "6");
    r.stop_on_failure = true;
    cf_result res;
    assert_int_equal(run("t-cases", &r, &res), 0);
    assert_int_equal(res.n_cases, 2);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_non_null(strstr(res.reason, "stopped there"));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_cache_hit_on_second_identical_request(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "#include <stdio.h>\nint main(void) { int w; puts(\"cached?\"); return 0; }\n",
                     10 * SEC);
    cf_pipeline_stats s0, s1, s2;
    cf_pipeline_stats_get(F->pl, &s0);
    cf_result a, b, c;
    assert_int_equal(run("t-cache", &r, &a), 0);
    assert_int_equal(run("t-cache", &r, &b), 0);
    cf_pipeline_stats_get(F->pl, &s1);
    assert_int_equal(a.status, CF_STATUS_SUCCESS);
    assert_int_equal(b.status, CF_STATUS_SUCCESS);
    assert_false(a.compile.cached);
    assert_true(b.compile.cached);
    assert_int_equal(s1.cache_hits - s0.cache_hits, 1);
    assert_int_equal(s1.compiles - s0.compiles, 1);
    assert_true(has_bytes(&b.stdout_data, "cached?"));
    /* The build's warnings come with the cached build. */
    assert_non_null(first_level(&b, "warning"));
    /* Another tenant does not share it. */
    assert_int_equal(run("t-other", &r, &c), 0);
    assert_false(c.compile.cached);
    cf_pipeline_stats_get(F->pl, &s2);
    assert_int_equal(s2.compiles - s1.compiles, 1);
    cf_result_clear(&a);
    cf_result_clear(&b);
    cf_result_clear(&c);
    cf_request_clear(&r);
}

/* ---- Rust, Go, TypeScript ---- */

static void test_rust_compiles_runs_and_reports_errors(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_RUST, "fn main() {\n    println!(\"hello from rust\");\n}\n", 10 * SEC);
    cf_result res;
    assert_int_equal(run("t-rust", &r, &res), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(has_bytes(&res.stdout_data, "hello from rust\n"));
    assert_memory_equal(res.meta.toolchain, "rustc ", 6);
    cf_result_clear(&res);
    cf_request_clear(&r);

    req_init_timeout(&r, CF_LANG_RUST, "fn main() {\n    let x: i32 = \"a\";\n    println!(\"{}\", x);\n}\n",
                     10 * SEC);
    assert_int_equal(run("t-rust", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    const cf_diagnostic *d = first_level(&res, "error");
    assert_non_null(d);
    assert_string_equal(d->message, "mismatched types");
    assert_string_equal(d->code, "E0308");
    assert_string_equal(d->file, "main.rs");
    assert_int_equal(d->line, 2);
    assert_int_equal(d->column, 18);
    assert_int_equal(d->end_line, 2);
    assert_int_equal(d->end_column, 21);
    cf_result_clear(&res);
    cf_request_clear(&r);

    req_init_timeout(&r, CF_LANG_RUST, "fn main() {\n    let x = ;\n}\n", 10 * SEC);
    assert_int_equal(run("t-rust", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    d = first_level(&res, "error");
    assert_non_null(d);
    assert_string_equal(d->message, "expected expression, found `;`");
    assert_int_equal(d->line, 2);
    assert_int_equal(d->column, 13);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_go_compiles_runs_and_reports_errors(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_GO, "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello from go\")\n}\n",
                     20 * SEC);
    cf_result res;
    assert_int_equal(run("t-go", &r, &res), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(has_bytes(&res.stdout_data, "hello from go\n"));
    assert_memory_equal(res.meta.toolchain, "go", 2);
    cf_result_clear(&res);
    cf_request_clear(&r);

    req_init_timeout(&r, CF_LANG_GO, "package main\n\nfunc main() {\n\tx := 1\n\ty = 2\n}\n", 20 * SEC);
    assert_int_equal(run("t-go", &r, &res), 0);
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    bool undefined_y = false;
    for (size_t i = 0; i < res.n_diagnostics; i++) {
        const cf_diagnostic *d = &res.diagnostics[i];
        if (d->message && strcmp(d->message, "undefined: y") == 0) {
            assert_string_equal(d->file, "main.go");
            assert_int_equal(d->line, 5);
            assert_int_equal(d->column, 2);
            undefined_y = true;
        }
    }
    assert_true(undefined_y);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_typescript_compiles_runs_and_reports_errors(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_TYPESCRIPT,
                     "const greet = (who: string): string => `hello from ${who}`;\nconsole.log(greet(\"typescript\"));\n",
                     20 * SEC);
    cf_result res;
    assert_int_equal(run("t-ts", &r, &res), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(has_bytes(&res.stdout_data, "hello from typescript\n"));
    assert_memory_equal(res.meta.toolchain, "tsc 5.", 6);
    cf_result_clear(&res);
    cf_request_clear(&r);

    req_init_timeout(&r, CF_LANG_TYPESCRIPT, "let n: number = 1;\nn = \"two\";\nconsole.log(n);\n", 20 * SEC);
    assert_int_equal(run("t-ts", &r, &res), 0);
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    const cf_diagnostic *d = first_level(&res, "error");
    assert_non_null(d);
    assert_string_equal(d->code, "TS2322");
    assert_string_equal(d->file, "main.ts");
    assert_int_equal(d->line, 2);
    assert_int_equal(d->column, 1);
    assert_string_equal(d->message, "Type 'string' is not assignable to type 'number'.");
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* ---- harnesses ---- */

static void set_input(cf_request *r, const char *json)
{
    json_error_t je;
    json_t *j = json_loads(json, JSON_DECODE_ANY, &je);
    assert_non_null(j);
    cf_error err;
    assert_int_equal(cf_json_to_msgpack(j, &r->input, &err), 0);
    json_decref(j);
}

static void assert_output_json(const cf_result *res, const char *want)
{
    assert_true(res->output.len > 0);
    json_t *j = cf_msgpack_to_json(res->output.data, res->output.len, NULL);
    assert_non_null(j);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (strcmp(s, want) != 0)
        fprintf(stderr, "output %s, want %s\n", s, want);
    assert_string_equal(s, want);
    free(s);
    json_decref(j);
}

static void harness_case(cf_language lang, const char *code, const char *input, cf_status want, const char *want_out,
                         const char *reason_part)
{
    cf_request r;
    req_init_timeout(&r, lang, code, 20 * SEC);
    r.harness = CF_HARNESS_FUNCTION;
    if (input)
        set_input(&r, input);
    cf_result res;
    assert_int_equal(run("t-harness", &r, &res), 0);
    if (res.status != want)
        show(&res);
    assert_int_equal(res.status, want);
    if (want_out)
        assert_output_json(&res, want_out);
    else
        assert_int_equal(res.output.len, 0);
    if (reason_part) {
        assert_non_null(res.reason);
        if (!strstr(res.reason, reason_part))
            fprintf(stderr, "reason: %s\n", res.reason);
        assert_non_null(strstr(res.reason, reason_part));
    }
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_harness_python(void **state)
{
    (void)state;
    NEED_ROOT();
    /* A stray print of something JSON-looking does not pass as the output. */
    harness_case(CF_LANG_PYTHON, "print('{\"sum\": 0}')\ndef run(input):\n    return {'sum': input['a'] + input['b']}\n",
                 "{\"a\": 2, \"b\": 3}", CF_STATUS_SUCCESS, "{\"sum\":5}", NULL);
    harness_case(CF_LANG_PYTHON, "def run(input):\n    raise ValueError('bad input')\n", "1", CF_STATUS_FAILED, NULL,
                 "ValueError: bad input");
    harness_case(CF_LANG_PYTHON, "print('no run here')\n", NULL, CF_STATUS_FAILED, NULL, "run(input)");
}

static void test_harness_javascript_and_typescript(void **state)
{
    (void)state;
    NEED_ROOT();
    harness_case(CF_LANG_JAVASCRIPT, "async function run(input) { return input.map(x => x * 2); }\n", "[1, 2, 3]",
                 CF_STATUS_SUCCESS, "[2,4,6]", NULL);
    harness_case(CF_LANG_JAVASCRIPT, "function run(input) { throw new TypeError('nope'); }\n", NULL, CF_STATUS_FAILED,
                 NULL, "TypeError: nope");
    harness_case(CF_LANG_TYPESCRIPT,
                 "function run(input: { n: number }): { squared: number } {\n    return { squared: input.n * input.n };\n}\n",
                 "{\"n\": 7}", CF_STATUS_SUCCESS, "{\"squared\":49}", NULL);
}

static void test_harness_rust(void **state)
{
    (void)state;
    NEED_ROOT();
    harness_case(CF_LANG_RUST,
                 "fn run(input: &str) -> String {\n    println!(\"stray\");\n    format!(\"{{\\\"len\\\": {}}}\", input.len())\n}\n",
                 "\"abc\"", CF_STATUS_SUCCESS, "{\"len\":5}", NULL);
    harness_case(CF_LANG_RUST, "fn run(_input: &str) -> String {\n    panic!(\"boom\");\n}\n", NULL, CF_STATUS_FAILED,
                 NULL, "boom");
    harness_case(CF_LANG_RUST, "fn run(_input: &str) -> String {\n    \"not json\".to_string()\n}\n", NULL,
                 CF_STATUS_FAILED, NULL, "not JSON");
}

/* ---- collect ---- */

static void test_collect_files_regular_only_within_cap(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_SHELL,
                     "mkdir -p out/sub && printf 'alpha' > out/a.txt && head -c 10000 /dev/zero > out/big.bin && "
                     "ln -s /etc/passwd out/link.txt && mkfifo out/fifo && echo x > out/sub/deep.txt && "
                     "echo no > other.txt",
                     10 * SEC);
    r.collect = calloc(2, sizeof(char *));
    r.collect[0] = strdup("out/*");
    r.collect[1] = strdup("nothing/");
    r.n_collect = 2;
    cf_result res;
    assert_int_equal(run("t-collect", &r, &res), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    /* a.txt and big.bin: no symlink, no FIFO, '*' stops at '/'. */
    assert_int_equal(res.n_files, 2);
    assert_string_equal(res.files[0].path, "out/a.txt");
    assert_int_equal(res.files[0].size, 5);
    assert_int_equal(res.files[0].content.len, 5);
    assert_memory_equal(res.files[0].content.data, "alpha", 5);
    assert_false(res.files[0].truncated);
    assert_string_equal(res.files[1].path, "out/big.bin");
    assert_int_equal(res.files[1].size, 10000);
    assert_int_equal(res.files[1].content.len, 4096 - 5); /* the collect cap */
    assert_true(res.files[1].truncated);
    assert_true(res.files_truncated);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* ---- several source files; a workspace ---- */

static void test_several_source_files(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "#include <stdio.h>\n#include \"util.h\"\nint main(void) { printf(\"%d\\n\", twice(21)); return 0; }\n",
                     10 * SEC);
    req_file(&r, "util.h", "int twice(int x);\n");
    req_file(&r, "util.c", "#include \"util.h\"\nint twice(int x) { return 2 * x; }\n");
    cf_result res;
    assert_int_equal(run("t-multi", &r, &res), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(has_bytes(&res.stdout_data, "42\n"));
    cf_result_clear(&res);
    cf_request_clear(&r);

    req_init_timeout(&r, CF_LANG_GO, "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(answer())\n}\n",
                     20 * SEC);
    req_file(&r, "answer.go", "package main\n\nfunc answer() int { return 42 }\n");
    assert_int_equal(run("t-multi", &r, &res), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(has_bytes(&res.stdout_data, "42\n"));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* The compiler sees the workspace (read-only); another revision of it is
 * another build, never the cached one. */
static void test_workspace_is_part_of_the_build(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "#include <stdio.h>\n#include \"version.h\"\nint main(void) { puts(VERSION); return 0; }\n",
                     10 * SEC);
    cf_file ws1[] = {{.path = "version.h", .content = {(uint8_t *)"#define VERSION \"one\"\n", 22}}};
    cf_file ws2[] = {{.path = "version.h", .content = {(uint8_t *)"#define VERSION \"two\"\n", 22}}};
    cf_exec_files f1 = {.place = ws1, .n_place = 1, .read_only = true};
    cf_exec_files f2 = {.place = ws2, .n_place = 1, .read_only = true};
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "test", .files = &f1};
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_error err;
    assert_int_equal(cf_pipeline_execute(F->pl, F->be, "t-ws", &ctx, &r, &res, &err), 0);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(has_bytes(&res.stdout_data, "one\n"));
    cf_result_clear(&res);
    ctx.files = &f2;
    memset(&res, 0, sizeof(res));
    assert_int_equal(cf_pipeline_execute(F->pl, F->be, "t-ws", &ctx, &r, &res, &err), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_false(res.compile.cached);
    assert_true(has_bytes(&res.stdout_data, "two\n"));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* ---- review findings ---- */

/* A request file named "@r.c" is a source file, never gcc's response file
 * (which could name -wrapper and run anything as the compiler). */
static void test_response_file_names_are_sources(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "int main(void) { return 0; }\n", 10 * SEC);
    req_file(&r, "@r.c", "int helper(void) { return 1; }\n");
    req_file(&r, "r.c", "-wrapper /bin/sh,-c,exit\\ 0\n");
    cf_result res;
    assert_int_equal(run("t-at", &r, &res), 0);
    /* r.c is not C: the build fails on it; nothing ran instead of gcc. */
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    bool on_r_c = false;
    for (size_t i = 0; i < res.n_diagnostics; i++)
        if (res.diagnostics[i].file && strcmp(res.diagnostics[i].file, "r.c") == 0)
            on_r_c = true;
    assert_true(on_r_c);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* A stdout cut at the case's own cap never matches; the verdict is taken
 * before the cases' shared budget cuts anything. */
static void test_truncated_stdout_never_matches(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_SHELL, "echo 42; echo this is wrong; head -c 100000 /dev/zero", 10 * SEC);
    r.policy.max_stdout_bytes = 3;
    add_case(&r, "cut", NULL, "42\n");
    cf_result res;
    assert_int_equal(run("t-trunc", &r, &res), 0);
    assert_int_equal(res.n_cases, 1);
    assert_true(res.cases[0].stdout_truncated);
    assert_int_equal(res.cases[0].match, -1);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* 20 cases of 1 MiB stdout each: all match (verdict before the cut), the
 * result keeps 16 MiB of output in all, and the buffers it dropped are
 * gone (a case's stdout holds no more than what is sent). */
static void test_cases_output_budget(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_SHELL, "head -c 1048576 /dev/zero | tr '\\0' x", 10 * SEC);
    r.policy.max_stdout_bytes = 2 << 20;
    char *want = malloc(1 << 20);
    memset(want, 'x', 1 << 20);
    for (int i = 0; i < 20; i++) {
        add_case(&r, NULL, NULL, NULL);
        r.cases[i].has_expect = true;
        cf_bytes_set(&r.cases[i].expect_stdout, want, 1 << 20);
    }
    free(want);
    cf_result res;
    assert_int_equal(run("t-budget", &r, &res), 0);
    assert_int_equal(res.n_cases, 20);
    size_t total = 0;
    for (size_t i = 0; i < res.n_cases; i++) {
        assert_int_equal(res.cases[i].match, 1);
        total += res.cases[i].stdout_data.len + res.cases[i].stderr_data.len;
    }
    assert_true(total <= 16u << 20);
    assert_true(res.cases[19].stdout_truncated);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* A case output nested as deep as a top-level output may be cannot sit in
 * a case: dropped with a reason, and the result still decodes. */
static void test_case_output_too_deep_is_dropped(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_PYTHON,
                     "import json, os\nv = 1\nfor _ in range(30):\n    v = [v]\n"
                     "json.dump(v, open(os.environ['CODEFLEET_OUTPUT'], 'w'))\n",
                     10 * SEC);
    add_case(&r, NULL, NULL, NULL);
    cf_result res;
    assert_int_equal(run("t-deep", &r, &res), 0);
    assert_int_equal(res.n_cases, 1);
    assert_int_equal(res.cases[0].output.len, 0);
    assert_non_null(res.cases[0].reason);
    assert_non_null(strstr(res.cases[0].reason, "nests too deeply"));
    res.id = strdup("x");
    cf_bytes enc = {0};
    cf_error err;
    assert_int_equal(cf_result_encode(&res, &enc, &err), 0);
    cf_result back;
    assert_int_equal(cf_result_decode(enc.data, enc.len, NULL, &back, &err), 0);
    cf_result_clear(&back);
    free(enc.data);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* A profile's memory cap bounds its compiles too. */
static void test_profile_caps_bound_the_compile(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "#include \"/dev/zero\"\nint main(void) { return 0; }\n", 10 * SEC);
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "test", .profile_max_memory_bytes = 64LL << 20,
                       .profile_max_timeout_us = 8 * SEC};
    cf_error err;
    assert_int_equal(cf_pipeline_execute(F->pl, F->be, "t-prof", &ctx, &r, &res, &err), 0);
    if (res.status != CF_STATUS_COMPILE_FAILED || !strstr(res.reason, "64 MiB"))
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    assert_non_null(strstr(res.reason, "compile memory limit of 64 MiB"));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* The compile step and all cases together stay within max-timeout. */
static void test_request_time_is_bounded(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_pipeline_config pc;
    pipeline_config(&pc, F->harness);
    pc.max_total_us = 2 * SEC;
    cf_pipeline *p2;
    cf_error err;
    assert_int_equal(cf_pipeline_new(&pc, &p2, &err), 0);
    cf_request r;
    req_init_timeout(&r, CF_LANG_SHELL, "sleep 0.8", 10 * SEC);
    for (int i = 0; i < 10; i++)
        add_case(&r, NULL, NULL, NULL);
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "test"};
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_pipeline_execute(p2, F->be, "t", &ctx, &r, &res, &err), 0);
    int64_t took = cf_mono_us() - t0;
    assert_true(took < 4 * SEC);
    assert_int_equal(res.status, CF_STATUS_TIMEOUT);
    assert_true(res.n_cases < 10);
    assert_non_null(strstr(res.reason, "was used up"));
    cf_result_clear(&res);
    cf_request_clear(&r);
    cf_pipeline_destroy(p2);
}

/* A toolchain that cannot start inside the sandbox is the worker's
 * failure (internal_error), never the request's compile_failed. */
/* Writes an executable script from a child process: the fixture's warm
 * preparers clone children at any moment, and a clone made while this
 * process held the script open for writing would keep a writer alive a
 * moment longer, so running the script would fail with ETXTBSY.  The
 * child's descriptor is never in this process. */
static void write_script_apart(const char *path, const char *text)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        size_t len = strlen(text);
        _exit(fd >= 0 && write(fd, text, len) == (ssize_t)len && fchmod(fd, 0755) == 0 && close(fd) == 0 ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_toolchain_that_cannot_start_is_internal(void **state)
{
    (void)state;
    NEED_ROOT();
    char dir[64] = "/tmp/cf-pltc-XXXXXX", bin[128], gcc[160];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0755), 0);
    snprintf(bin, sizeof(bin), "%s/bin", dir);
    assert_int_equal(mkdir(bin, 0755), 0);
    snprintf(gcc, sizeof(gcc), "%s/gcc", bin);
    /* Answers the version probe on the host; inside, its interpreter is
     * not there. */
    write_script_apart(gcc, "#!/bin/sh\necho 99.0\n");
    cf_pipeline_config pc;
    pipeline_config(&pc, F->harness);
    pc.cc = gcc;
    cf_pipeline *p2;
    cf_error err;
    assert_int_equal(cf_pipeline_new(&pc, &p2, &err), 0);
    assert_true(cf_pipeline_languages(p2) & (1u << CF_LANG_C));
    /* Now break it: the interpreter line names nothing. */
    write_script_apart(gcc, "#!/nonexistent/sh\n");
    cf_request r;
    req_init_timeout(&r, CF_LANG_C, "int main(void) { return 0; }\n", 10 * SEC);
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "test"};
    cf_error_clear(&err);
    assert_int_equal(cf_pipeline_execute(p2, F->be, "t", &ctx, &r, &res, &err), -1);
    assert_int_equal(err.code, CF_E_SANDBOX);
    assert_non_null(strstr(err.msg, "toolchain cannot be executed"));
    cf_result_clear(&res);
    cf_request_clear(&r);
    cf_pipeline_destroy(p2);
    unlink(gcc);
    rmdir(bin);
    rmdir(dir);
}

/* A file whose name is not UTF-8 cannot travel in a result (the client
 * would drop the whole result): left out, with a warning. */
static void test_collect_skips_names_that_are_not_text(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_SHELL, "printf x > \"$(printf 'bad\\377name.txt')\"; printf ok > good.txt", 10 * SEC);
    r.collect = calloc(1, sizeof(char *));
    r.collect[0] = strdup("*");
    r.n_collect = 1;
    cf_result res;
    assert_int_equal(run("t-utf8", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(res.n_files, 1);
    assert_string_equal(res.files[0].path, "good.txt");
    const cf_diagnostic *w = first_level(&res, "warning");
    assert_non_null(w);
    assert_non_null(strstr(w->message, "not UTF-8"));
    res.id = strdup("x");
    cf_bytes enc = {0};
    cf_error err;
    assert_int_equal(cf_result_encode(&res, &enc, &err), 0);
    cf_result back;
    assert_int_equal(cf_result_decode(enc.data, enc.len, NULL, &back, &err), 0);
    cf_result_clear(&back);
    free(enc.data);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* Collection reads only what matches: a large unrelated file does not
 * empty the answer. */
static void test_collect_reads_only_matches(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_SHELL, "head -c 9000000 /dev/zero > big.bin; echo hi > want.txt", 10 * SEC);
    r.collect = calloc(1, sizeof(char *));
    r.collect[0] = strdup("*.txt");
    r.n_collect = 1;
    cf_result res;
    assert_int_equal(run("t-match", &r, &res), 0); /* the scan limit is 8 MiB here */
    assert_int_equal(res.n_files, 1);
    assert_string_equal(res.files[0].path, "want.txt");
    assert_false(res.files_truncated);
    cf_result_clear(&res);
    cf_request_clear(&r);
}

static void test_typescript_is_one_file(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_request r;
    req_init_timeout(&r, CF_LANG_TYPESCRIPT, "import { x } from './util';\nconsole.log(x);\n", 10 * SEC);
    req_file(&r, "util.ts", "export const x = 1;\n");
    cf_result res;
    assert_int_equal(run("t-ts1", &r, &res), 0);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "one source file"));
    cf_result_clear(&res);
    cf_request_clear(&r);
}

/* ---- toolchain missing ---- */

static void test_missing_toolchain_rejected_by_name(void **state)
{
    (void)state;
    NEED_ROOT();
    cf_pipeline_config pc;
    pipeline_config(&pc, F->harness);
    pc.rustc = "/nonexistent/rustc";
    cf_pipeline *p2;
    cf_error err;
    assert_int_equal(cf_pipeline_new(&pc, &p2, &err), 0);
    assert_false(cf_pipeline_languages(p2) & (1u << CF_LANG_RUST));
    cf_request r;
    req_init_timeout(&r, CF_LANG_RUST, "fn main() {}\n", 10 * SEC);
    cf_result res;
    memset(&res, 0, sizeof(res));
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "test"};
    assert_int_equal(cf_pipeline_execute(p2, F->be, "t", &ctx, &r, &res, &err), 0);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "language rust: no toolchain on this worker"));
    assert_non_null(strstr(res.reason, "/nonexistent/rustc"));
    cf_result_clear(&res);
    cf_request_clear(&r);
    cf_pipeline_destroy(p2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c_compiles_and_runs),
        cmocka_unit_test(test_c_syntax_error_has_exact_diagnostic),
        cmocka_unit_test(test_cpp_type_error),
        cmocka_unit_test(test_c_warning_on_success_is_reported),
        cmocka_unit_test(test_c_include_of_host_file_gets_nothing),
        cmocka_unit_test(test_c_include_dev_zero_stopped_by_compile_limits),
        cmocka_unit_test(test_c_huge_array_stopped_by_artifact_limit),
        cmocka_unit_test(test_cpp_template_bomb_stopped),
        cmocka_unit_test(test_flag_outside_allowlist_rejected),
        cmocka_unit_test(test_cases_match_mismatch_and_timeout),
        cmocka_unit_test(test_cases_stop_on_failure),
        cmocka_unit_test(test_cache_hit_on_second_identical_request),
        cmocka_unit_test(test_rust_compiles_runs_and_reports_errors),
        cmocka_unit_test(test_go_compiles_runs_and_reports_errors),
        cmocka_unit_test(test_typescript_compiles_runs_and_reports_errors),
        cmocka_unit_test(test_harness_python),
        cmocka_unit_test(test_harness_javascript_and_typescript),
        cmocka_unit_test(test_harness_rust),
        cmocka_unit_test(test_collect_files_regular_only_within_cap),
        cmocka_unit_test(test_several_source_files),
        cmocka_unit_test(test_workspace_is_part_of_the_build),
        cmocka_unit_test(test_response_file_names_are_sources),
        cmocka_unit_test(test_truncated_stdout_never_matches),
        cmocka_unit_test(test_cases_output_budget),
        cmocka_unit_test(test_case_output_too_deep_is_dropped),
        cmocka_unit_test(test_request_time_is_bounded),
        cmocka_unit_test(test_profile_caps_bound_the_compile),
        cmocka_unit_test(test_toolchain_that_cannot_start_is_internal),
        cmocka_unit_test(test_collect_skips_names_that_are_not_text),
        cmocka_unit_test(test_collect_reads_only_matches),
        cmocka_unit_test(test_typescript_is_one_file),
        cmocka_unit_test(test_missing_toolchain_rejected_by_name),
    };
    return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
