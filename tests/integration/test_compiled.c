/* Compiled languages, cases, harnesses and collected files through the
 * fleet: a real broker, a real worker running the sandbox backend, the
 * dispatcher library and the `codefleet` CLI.  The pipeline's own corner
 * cases are in tests/unit/test_pipeline.c; this suite proves the new
 * request and result fields travel the wire and the CLI shows them. */
#include "it_support.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_dispatcher.h"
#include "cf_schema.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define SEC 1000000LL


typedef struct suite {
    it_topics t;
    it_worker w;
    cf_dispatcher *d;
    char tmp[64];
} suite;

static suite g;

static int setup_suite(void **state)
{
    (void)state;
    if (!it_brokers())
        return 0;
    it_topics_create(&g.t, "compiled", 1);
    const char *extra[] = {"--slots=2", "--backends=sandbox,process", NULL};
    it_worker_start(&g.w, &g.t, "compiled-w", extra);
    if (!it_worker_wait_log(&g.w, "assigned", 30000)) {
        it_worker_dump_log(&g.w);
        return -1;
    }
    g.d = it_dispatcher_new(&g.t);
    snprintf(g.tmp, sizeof(g.tmp), "/tmp/cf-it-compiled-XXXXXX");
    return mkdtemp(g.tmp) ? 0 : -1;
}

static int teardown_suite(void **state)
{
    (void)state;
    if (!it_brokers())
        return 0;
    cf_dispatcher_destroy(g.d);
    it_worker_stop(&g.w, SIGTERM, 20000);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g.tmp);
    if (system(cmd) != 0)
        return -1;
    return 0;
}

static void submit(cf_request *req, cf_result *res)
{
    it_submit_wait(g.d, req, 120 * SEC, res);
}

static void show(const cf_result *res)
{
    json_t *j = cf_result_to_json(res);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    fprintf(stderr, "result: %.3000s\n", s ? s : "?");
    free(s);
    json_decref(j);
}

static void compile_error_comes_back_with_diagnostics(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    cf_request req;
    it_request_init(&req, CF_LANG_C, "#include <stdio.h>\nint main(void)\n{\n    puts(\"x\")\n}\n");
    cf_result res;
    submit(&req, &res);
    if (res.status != CF_STATUS_COMPILE_FAILED)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_COMPILE_FAILED);
    assert_true(res.n_diagnostics >= 1);
    assert_string_equal(res.diagnostics[0].level, "error");
    assert_string_equal(res.diagnostics[0].file, "main.c");
    assert_int_equal(res.diagnostics[0].line, 4);
    assert_string_equal(res.diagnostics[0].message, "expected ';' before '}' token");
    assert_true(res.compile.present);
    assert_memory_equal(res.meta.toolchain, "gcc ", 4);
    assert_string_equal(res.meta.language, "c");
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void add_case(cf_request *r, const char *stdin_text, const char *expect)
{
    r->cases = realloc(r->cases, (r->n_cases + 1) * sizeof(*r->cases));
    cf_case *c = &r->cases[r->n_cases++];
    memset(c, 0, sizeof(*c));
    cf_bytes_set(&c->stdin_data, stdin_text, strlen(stdin_text));
    c->has_expect = true;
    cf_bytes_set(&c->expect_stdout, expect, strlen(expect));
}

static const char adder[] = "#include <stdio.h>\n"
                            "int main(void) {\n"
                            "    long a, b;\n"
                            "    if (scanf(\"%ld %ld\", &a, &b) != 2) return 2;\n"
                            "    printf(\"%ld\\n\", a + b);\n"
                            "    return 0;\n"
                            "}\n";

static void cases_run_against_one_build_and_the_cache_answers_again(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    cf_request req;
    it_request_init(&req, CF_LANG_C, adder);
    add_case(&req, "1 2", "3");
    add_case(&req, "20 22", "42");
    add_case(&req, "2 2", "5");
    add_case(&req, "nonsense", "");
    cf_result res;
    submit(&req, &res);
    if (res.n_cases != 4)
        show(&res);
    assert_int_equal(res.n_cases, 4);
    assert_int_equal(res.cases[0].match, 1);
    assert_int_equal(res.cases[1].match, 1);
    assert_int_equal(res.cases[2].match, -1);
    assert_int_equal(res.cases[3].status, CF_STATUS_FAILED);
    assert_int_equal(res.cases[3].exit_code, 2);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_false(res.compile.cached);
    cf_result_clear(&res);

    /* The same program again, as a new request: the build is cached. */
    free(req.id);
    req.id = NULL;
    char id[64];
    cf_error err;
    assert_int_equal(cf_dispatcher_new_id(id, sizeof(id), &err), 0);
    req.id = strdup(id);
    submit(&req, &res);
    assert_int_equal(res.n_cases, 4);
    assert_true(res.compile.cached);
    assert_true(it_worker_wait_log(&g.w, "compile cache hit", 5000));
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void rust_go_and_typescript_run(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    const struct {
        cf_language lang;
        const char *code;
        const char *want;
    } progs[] = {
        {CF_LANG_RUST, "fn main() {\n    let v: Vec<u32> = (1..=4).collect();\n    println!(\"{}\", v.iter().sum::<u32>());\n}\n", "10\n"},
        {CF_LANG_GO, "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(6 * 7)\n}\n", "42\n"},
        {CF_LANG_TYPESCRIPT, "const xs: number[] = [1, 2, 3];\nconsole.log(xs.map((x) => x * x).join(\",\"));\n", "1,4,9\n"},
    };
    for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
        cf_request req;
        it_request_init(&req, progs[i].lang, progs[i].code);
        cf_result res;
        submit(&req, &res);
        if (res.status != CF_STATUS_SUCCESS)
            show(&res);
        assert_int_equal(res.status, CF_STATUS_SUCCESS);
        assert_int_equal(res.stdout_data.len, strlen(progs[i].want));
        assert_memory_equal(res.stdout_data.data, progs[i].want, strlen(progs[i].want));
        assert_non_null(res.meta.toolchain);
        assert_string_equal(res.meta.isolation, "sandbox");
        cf_result_clear(&res);
        cf_request_clear(&req);
    }
}

static void harness_and_collected_files(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    cf_request req;
    it_request_init(&req, CF_LANG_PYTHON,
                    "import os\n"
                    "def run(input):\n"
                    "    os.makedirs('out', exist_ok=True)\n"
                    "    open('out/report.txt', 'w').write('n=%d' % input['n'])\n"
                    "    os.symlink('/etc/hostname', 'out/link.txt')\n"
                    "    print('not the answer')\n"
                    "    return {'square': input['n'] ** 2}\n");
    req.harness = CF_HARNESS_FUNCTION;
    json_t *in = json_pack("{s:i}", "n", 12);
    cf_error err;
    assert_int_equal(cf_json_to_msgpack(in, &req.input, &err), 0);
    json_decref(in);
    req.collect = calloc(1, sizeof(char *));
    req.collect[0] = strdup("out/*.txt");
    req.n_collect = 1;
    cf_result res;
    submit(&req, &res);
    if (res.status != CF_STATUS_SUCCESS)
        show(&res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    json_t *out = cf_msgpack_to_json(res.output.data, res.output.len, NULL);
    assert_non_null(out);
    assert_int_equal(json_integer_value(json_object_get(out, "square")), 144);
    json_decref(out);
    assert_int_equal(res.n_files, 1); /* the symlink is not collected */
    assert_string_equal(res.files[0].path, "out/report.txt");
    assert_int_equal(res.files[0].content.len, 4);
    assert_memory_equal(res.files[0].content.data, "n=12", 4);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

/* ---- the CLI ---- */

static char g_out[65536], g_err[65536];

static int cli(const char *const *args)
{
    const char *argv[48];
    int n = 0;
    char reqt[160], rest[160];
    snprintf(reqt, sizeof(reqt), "--request-topic=%s", g.t.requests);
    snprintf(rest, sizeof(rest), "--result-topic=%s", g.t.results);
    argv[n++] = reqt;
    argv[n++] = rest;
    argv[n++] = "--timeout=120s";
    for (size_t i = 0; args[i] && n < 47; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return it_cli_run(argv, g.tmp, g_out, sizeof(g_out), g_err, sizeof(g_err));
}

static void expect_out(const char *needle)
{
    if (!strstr(g_out, needle))
        fail_msg("CLI output lacks '%s':\n%s\nstderr:\n%s", needle, g_out, g_err);
}

static void cli_shows_diagnostics_like_a_compiler_and_a_case_table(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    char src[128];
    snprintf(src, sizeof(src), "%s/main.rs", g.tmp);
    FILE *f = fopen(src, "w");
    assert_non_null(f);
    fputs("fn main() {\n    let n: u8 = \"three\";\n}\n", f);
    fclose(f);
    const char *a1[] = {"submit", "--file", src, NULL};
    int rc = cli(a1);
    expect_out("status:   compile_failed");
    expect_out("main.rs:2:17: error[E0308]: mismatched types");
    assert_int_not_equal(rc, 0);

    snprintf(src, sizeof(src), "%s/add.c", g.tmp);
    f = fopen(src, "w");
    assert_non_null(f);
    fputs(adder, f);
    fclose(f);
    char cases[128];
    snprintf(cases, sizeof(cases), "%s/cases.jsonl", g.tmp);
    f = fopen(cases, "w");
    assert_non_null(f);
    fputs("# name, stdin, expected stdout\n{\"name\": \"big\", \"stdin\": \"1000 2000\", \"expect_stdout\": \"3000\\n\"}\n",
          f);
    fclose(f);
    const char *a2[] = {"submit", "-l", "c", "--code-file", src, "--case", "stdin=1 1,expect=2,name=tiny",
                        "--case", "stdin=2 2,expect=5,name=wrong", "--cases", cases, NULL};
    rc = cli(a2);
    expect_out("cases:    3");
    expect_out("tiny");
    expect_out("MISMATCH");
    expect_out("big");
    expect_out("compile:  gcc ");
    assert_int_not_equal(rc, 0); /* one case failed */
}

/* Answers a person can act on (issue 33): a program that only defines
 * run() is told about --function; a wait that ends before the result says
 * whether a worker started it, and how to pick it up; a cancel of an
 * id nobody submitted does not blame the workers. */
static void cli_answers_a_user_can_act_on(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    const char *a1[] = {"submit", "-l", "python", "--code", "def run(input): return 1", NULL};
    int rc = cli(a1);
    if (rc != 0 || !strstr(g_err, "the code defines run() but nothing called it") || !strstr(g_err, "--function"))
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, g_out, g_err);
    const char *a2[] = {"submit", "-l", "python", "--function", "--input", "{\"n\": 2}", "--code",
                        "def run(input): return input['n'] * 21", NULL};
    rc = cli(a2);
    if (rc != 0 || !strstr(g_out, "output:   42") || strstr(g_err, "defines run()"))
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, g_out, g_err);
    const char *a3[] = {"--timeout=1s", "submit", "--timeout-exec", "3s", "--", "/bin/sleep", "10", NULL};
    rc = cli(a3);
    /* Running (a worker's start notice, naming the run limit asked), or,
     * where a loaded worker has not taken it within the second, queued. */
    if (rc != 5 ||
        !(strstr(g_err, "within 1.0 s: it is running: worker ") ? strstr(g_err, "(its run limit: 3.0 s)") != NULL
                                                                : strstr(g_err, "within 1.0 s: it is most likely queued") != NULL) ||
        !strstr(g_err, "'codefleet wait ") || strstr(g_err, "no worker answered"))
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, g_out, g_err);
    const char *a4[] = {"--timeout=2s", "cancel", "no-such-request-for-this-test", "--wait", NULL};
    rc = cli(a4);
    if (rc != 5 || !strstr(g_err, "no request with this id is known to have run or waited") ||
        strstr(g_err, "no worker answered"))
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, g_out, g_err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(compile_error_comes_back_with_diagnostics),
        cmocka_unit_test(cases_run_against_one_build_and_the_cache_answers_again),
        cmocka_unit_test(rust_go_and_typescript_run),
        cmocka_unit_test(harness_and_collected_files),
        cmocka_unit_test(cli_shows_diagnostics_like_a_compiler_and_a_case_table),
        cmocka_unit_test(cli_answers_a_user_can_act_on),
    };
    return cmocka_run_group_tests(tests, setup_suite, teardown_suite);
}
