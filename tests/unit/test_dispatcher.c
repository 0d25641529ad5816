/* Unit tests of the dispatcher's pure parts: CLI argument parsing, batch
 * JSON-lines parsing, percentile math, output formatting, exit codes and ids.
 * Nothing here needs a broker. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_cli.h"
#include "cf_dispatcher.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])) - 1)

/* A temporary file with the given content; path in buf. */
static void write_tmp(char *buf, size_t cap, const char *suffix, const void *data, size_t len)
{
    snprintf(buf, cap, "/tmp/cf-test-disp-%ld-XXXXXX%s", (long)getpid(), suffix);
    int fd = mkstemps(buf, (int)strlen(suffix));
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static char *capture(void (*fn)(FILE *, const void *), const void *arg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    fn(f, arg);
    fclose(f);
    return text;
}

/* ------------------------------------------------------------------------- */

static void test_globals_defaults_env_and_flags(void **state)
{
    (void)state;
    cf_cli_globals g;
    cf_error err = {0};
    int cmd = -1;
    bool help = true;
    unsetenv("CODEFLEET_BROKERS");
    unsetenv("CODEFLEET_CONFIG"); /* the test stack's env names the operator's settings file */
    char *a1[] = {"codefleet", "submit", "--id", "x", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a1), a1, &g, &cmd, &help, &err), 0);
    assert_int_equal(cmd, 1);
    assert_false(help);
    assert_string_equal(g.brokers, CF_DEFAULT_BROKERS);
    assert_string_equal(g.request_topic, CF_DEFAULT_REQUEST_TOPIC);
    assert_string_equal(g.result_topic, CF_DEFAULT_RESULT_TOPIC);
    assert_false(g.json);
    assert_int_equal(g.timeout_us, 30000000);
    assert_false(g.timeout_given);
    assert_int_equal(g.kafka.count, 0);
    cf_cli_globals_free(&g);

    /* Environment, then flags over it; -X in both spellings. */
    setenv("CODEFLEET_BROKERS", "envhost:1", 1);
    setenv("CODEFLEET_SLOTS", "4", 1); /* a worker setting: must not break the CLI */
    char *a2[] = {"codefleet", "--json", "--timeout", "250ms", "-X", "linger.ms=5", "-Xacks=1",
                  "--result-topic=res", "wait", "abc", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a2), a2, &g, &cmd, &help, &err), 0);
    assert_int_equal(cmd, 8);
    assert_string_equal(g.brokers, "envhost:1");
    assert_true(g.json);
    assert_int_equal(g.timeout_us, 250000);
    assert_true(g.timeout_given);
    assert_string_equal(g.result_topic, "res");
    assert_string_equal(cf_kvlist_get(&g.kafka, "linger.ms"), "5");
    assert_string_equal(cf_kvlist_get(&g.kafka, "acks"), "1");
    cf_cli_globals_free(&g);

    char *a3[] = {"codefleet", "--brokers", "flaghost:2", "tail", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a3), a3, &g, &cmd, &help, &err), 0);
    assert_string_equal(g.brokers, "flaghost:2");
    assert_int_equal(cmd, 3);
    cf_cli_globals_free(&g);
    unsetenv("CODEFLEET_BROKERS");
    unsetenv("CODEFLEET_SLOTS");
}

/* A settings file (--config or CODEFLEET_CONFIG) holds credentials; the
 * environment and flags override it. */
static void test_globals_config_file(void **state)
{
    (void)state;
    char path[] = "/tmp/cf-cliconf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char conf[] = "brokers = filehost:3\nkafka.sasl.username = alice\nkafka.sasl.password = pw\n"
                               "redis-user = alice\nredis-password = rpw\n";
    assert_int_equal(write(fd, conf, sizeof(conf) - 1), (ssize_t)(sizeof(conf) - 1));
    close(fd);
    unsetenv("CODEFLEET_BROKERS");
    unsetenv("CODEFLEET_CONFIG");
    cf_cli_globals g;
    cf_error err = {0};
    int cmd = -1;
    bool help = false;
    char *a1[] = {"codefleet", "--config", path, "tail", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a1), a1, &g, &cmd, &help, &err), 0);
    assert_int_equal(cmd, 3);
    assert_string_equal(g.brokers, "filehost:3");
    assert_string_equal(cf_kvlist_get(&g.kafka, "sasl.username"), "alice");
    assert_string_equal(cf_kvlist_get(&g.kafka, "sasl.password"), "pw");
    assert_string_equal(g.redis_user, "alice");
    assert_string_equal(g.redis_password, "rpw");
    cf_cli_globals_free(&g);

    /* CODEFLEET_CONFIG, with the environment and a flag over it. */
    setenv("CODEFLEET_CONFIG", path, 1);
    setenv("CODEFLEET_BROKERS", "envhost:4", 1);
    char *a2[] = {"codefleet", "-X", "sasl.username=bob", "tail", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a2), a2, &g, &cmd, &help, &err), 0);
    assert_string_equal(g.brokers, "envhost:4");
    assert_string_equal(cf_kvlist_get(&g.kafka, "sasl.username"), "bob");
    assert_string_equal(cf_kvlist_get(&g.kafka, "sasl.password"), "pw");
    cf_cli_globals_free(&g);
    unsetenv("CODEFLEET_BROKERS");

    /* A separate -X value is a value, not the end of the options: the
     * --config after it is the one that counts. */
    setenv("CODEFLEET_CONFIG", "/nonexistent/other.conf", 1);
    char *a4[] = {"codefleet", "-X", "debug=all", "--config", path, "tail", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a4), a4, &g, &cmd, &help, &err), 0);
    assert_int_equal(cmd, 5);
    assert_string_equal(g.brokers, "filehost:3");
    cf_cli_globals_free(&g);
    unsetenv("CODEFLEET_CONFIG");

    /* A missing or bad file is an error, not a silent default. */
    char *a3[] = {"codefleet", "--config=/nonexistent/cf.conf", "tail", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a3), a3, &g, &cmd, &help, &err), -1);
    cf_cli_globals_free(&g);
    unsetenv("CODEFLEET_CONFIG");
    unlink(path);
}

static void test_globals_errors(void **state)
{
    (void)state;
    cf_cli_globals g;
    cf_error err = {0};
    int cmd;
    bool help;
    char *a1[] = {"codefleet", "--bogus", "submit", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a1), a1, &g, &cmd, &help, &err), -1);
    assert_non_null(strstr(err.msg, "bogus"));
    cf_cli_globals_free(&g);
    char *a2[] = {"codefleet", "--timeout", "soon", "submit", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a2), a2, &g, &cmd, &help, &err), -1);
    cf_cli_globals_free(&g);
    char *a3[] = {"codefleet", "-X", "novalue", "submit", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a3), a3, &g, &cmd, &help, &err), -1);
    assert_non_null(strstr(err.msg, "-X"));
    cf_cli_globals_free(&g);
    char *a4[] = {"codefleet", "-q", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a4), a4, &g, &cmd, &help, &err), -1);
    cf_cli_globals_free(&g);
    char *a5[] = {"codefleet", "--help", NULL};
    assert_int_equal(cf_cli_parse_globals(ARGC(a5), a5, &g, &cmd, &help, &err), 0);
    assert_true(help);
    assert_int_equal(cmd, 2);
    cf_cli_globals_free(&g);
}

static void test_cli_main_usage_exit_codes(void **state)
{
    (void)state;
    /* Usage errors are detected before any broker is contacted. */
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    char *a1[] = {"codefleet", NULL};
    assert_int_equal(cf_cli_main(ARGC(a1), a1), CF_EXIT_USAGE);
    char *a2[] = {"codefleet", "frobnicate", NULL};
    assert_int_equal(cf_cli_main(ARGC(a2), a2), CF_EXIT_USAGE);
    char *a3[] = {"codefleet", "submit", "--language", "cobol", "--code", "x", NULL};
    assert_int_equal(cf_cli_main(ARGC(a3), a3), CF_EXIT_USAGE);
    char *a4[] = {"codefleet", "wait", NULL};
    assert_int_equal(cf_cli_main(ARGC(a4), a4), CF_EXIT_USAGE);
    char *a5[] = {"codefleet", "wait", "a", "b", NULL};
    assert_int_equal(cf_cli_main(ARGC(a5), a5), CF_EXIT_USAGE);
    char *a6[] = {"codefleet", "batch", "--concurrency", "0", "f.jsonl", NULL};
    assert_int_equal(cf_cli_main(ARGC(a6), a6), CF_EXIT_USAGE);
    char *a7[] = {"codefleet", "batch", "/nonexistent/x.jsonl", NULL};
    assert_int_equal(cf_cli_main(ARGC(a7), a7), CF_EXIT_USAGE);
    char *a8[] = {"codefleet", "topics", "delete", "x", NULL};
    assert_int_equal(cf_cli_main(ARGC(a8), a8), CF_EXIT_USAGE);
    char *a9[] = {"codefleet", "tail", "--count", "-1", NULL};
    assert_int_equal(cf_cli_main(ARGC(a9), a9), CF_EXIT_USAGE);
    fclose(stderr);
    stderr = saved;
}

static void test_exit_codes(void **state)
{
    (void)state;
    assert_int_equal(cf_cli_exit_for_status(CF_STATUS_SUCCESS), 0);
    assert_int_equal(cf_cli_exit_for_status(CF_STATUS_FAILED), 1);
    assert_int_equal(cf_cli_exit_for_status(CF_STATUS_TIMEOUT), 1);
    assert_int_equal(cf_cli_exit_for_status(CF_STATUS_MEMORY_EXCEEDED), 1);
    assert_int_equal(cf_cli_exit_for_status(CF_STATUS_COMPILE_FAILED), 1);
    assert_int_equal(cf_cli_exit_for_status(CF_STATUS_REJECTED), 3);
    assert_int_equal(cf_cli_exit_for_status(CF_STATUS_INTERNAL_ERROR), 4);
    cf_error e = {0};
    e.code = CF_E_TIMEOUT;
    assert_int_equal(cf_cli_exit_for_error(&e), 5);
    e.code = CF_E_KAFKA;
    assert_int_equal(cf_cli_exit_for_error(&e), 6);
    e.code = CF_E_INVALID;
    assert_int_equal(cf_cli_exit_for_error(&e), 2);
}

/* ------------------------------------------------------------------------- */

static void test_submit_flags_build_request(void **state)
{
    (void)state;
    char codef[128], dataf[128], stdinf[128];
    write_tmp(codef, sizeof(codef), ".py", "print(42)\n", 10);
    write_tmp(dataf, sizeof(dataf), ".csv", "a,b\n", 4);
    write_tmp(stdinf, sizeof(stdinf), ".in", "in\0put", 6);
    char filespec[200], codearg[160], stdinarg[160];
    snprintf(filespec, sizeof(filespec), "data/x.csv=%s", dataf);
    snprintf(codearg, sizeof(codearg), "%s", codef);
    snprintf(stdinarg, sizeof(stdinarg), "%s", stdinf);
    char *argv[] = {"submit", "--id", "req-1", "--code-file", codearg, "--file", filespec, "--stdin-file",
                    stdinarg, "--input", "{\"n\":[1,2]}", "--env", "A=1", "--env", "B=x=y", "--backend", "process",
                    "--timeout-exec", "2s", "--cpu-time", "500ms", "--memory", "64MiB", "--max-processes", "8",
                    "--max-stdout", "1k", "--max-stderr", "2k", "--max-file-size", "1M", "--network", "disabled",
                    "--filesystem", "workspace_ro", "--env-allow", "HOME", "--env-allow", "LANG", "--workspace",
                    "ws", "--thread", "th", "--identity", "me", "--reply-to", "rt", "--deadline", "10s", "--",
                    "arg1", "--arg2", NULL};
    cf_request req = {0};
    cf_cli_submit_opts o;
    cf_error err = {0};
    int64_t now = cf_now_us();
    if (cf_cli_parse_submit(ARGC(argv), argv, &req, &o, &err) < 0)
        fail_msg("%s", err.msg);
    assert_false(o.no_wait);
    assert_string_equal(req.id, "req-1");
    assert_int_equal(req.language, CF_LANG_PYTHON); /* from the .py extension */
    assert_int_equal(req.code.len, 10);
    assert_memory_equal(req.code.data, "print(42)\n", 10);
    assert_int_equal(req.n_files, 1);
    assert_string_equal(req.files[0].path, "data/x.csv");
    assert_int_equal(req.files[0].content.len, 4);
    assert_int_equal(req.stdin_data.len, 6);
    assert_memory_equal(req.stdin_data.data, "in\0put", 6);
    json_t *in = cf_msgpack_to_json(req.input.data, req.input.len, &err);
    assert_non_null(in);
    assert_int_equal(json_array_size(json_object_get(in, "n")), 2);
    json_decref(in);
    assert_int_equal(req.n_env, 2);
    assert_string_equal(req.env[1].key, "B");
    assert_string_equal(req.env[1].value, "x=y");
    assert_string_equal(req.backend, "process");
    assert_int_equal(req.policy.timeout_us, 2000000);
    assert_int_equal(req.policy.cpu_time_us, 500000);
    assert_int_equal(req.policy.memory_bytes, 64 << 20);
    assert_int_equal(req.policy.max_processes, 8);
    assert_int_equal(req.policy.max_stdout_bytes, 1024);
    assert_int_equal(req.policy.max_stderr_bytes, 2048);
    assert_true(req.policy.max_file_size_bytes > 0);
    assert_int_equal(req.policy.network, CF_NET_DISABLED);
    assert_int_equal(req.policy.fs_mode, CF_FS_WORKSPACE_RO);
    assert_true(req.policy.env_allow_set);
    assert_int_equal(req.policy.n_env_allow, 2);
    assert_string_equal(req.policy.env_allow[1], "LANG");
    assert_string_equal(req.workspace, "ws");
    assert_string_equal(req.thread, "th");
    assert_string_equal(req.identity, "me");
    assert_string_equal(req.reply_to, "rt");
    assert_true(req.deadline_us >= now + 10000000 && req.deadline_us < now + 20000000);
    assert_int_equal(req.argc, 2);
    assert_string_equal(req.argv[1], "--arg2");
    /* The built request goes through the real encoder. */
    cf_bytes enc = {0};
    assert_int_equal(cf_request_encode(&req, &enc, &err), 0);
    free(enc.data);
    cf_request_clear(&req);
    unlink(codef);
    unlink(dataf);
    unlink(stdinf);
}

static void test_submit_defaults_and_inference(void **state)
{
    (void)state;
    cf_request req = {0};
    cf_cli_submit_opts o;
    cf_error err = {0};
    /* argv alone: a command, with a generated, valid id. */
    char *a1[] = {"submit", "--no-wait", "--", "echo", "hi", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a1), a1, &req, &o, &err), 0);
    assert_true(o.no_wait);
    assert_int_equal(req.language, CF_LANG_COMMAND);
    assert_int_equal(req.argc, 2);
    assert_non_null(req.id);
    assert_true(cf_id_valid(req.id, strlen(req.id)));
    cf_request_clear(&req);

    char *a2[] = {"submit", "-l", "shell", "--code", "echo hi", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a2), a2, &req, &o, &err), 0);
    assert_int_equal(req.language, CF_LANG_SHELL);
    assert_int_equal(req.argc, 0);
    cf_request_clear(&req);

    char *a3[] = {"submit", "--help", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a3), a3, &req, &o, &err), 0);
    assert_true(o.help);
    cf_request_clear(&req);

    /* The names users type, sent as the canonical ones; a near miss gets a
     * suggestion, anything else the list. */
    const struct {
        char *name;
        cf_language want;
    } alias[] = {{"py", CF_LANG_PYTHON}, {"bash", CF_LANG_SHELL},      {"sh", CF_LANG_SHELL},
                 {"node", CF_LANG_JAVASCRIPT}, {"ts", CF_LANG_TYPESCRIPT}, {"c++", CF_LANG_CPP},
                 {"golang", CF_LANG_GO}, {"rs", CF_LANG_RUST}};
    for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++) {
        char *a[] = {"submit", "-l", alias[i].name, "--code", "x", NULL};
        assert_int_equal(cf_cli_parse_submit(ARGC(a), a, &req, &o, &err), 0);
        assert_int_equal(req.language, alias[i].want);
        cf_request_clear(&req);
    }
    const struct {
        char *name;
        const char *want;
    } miss[] = {{"Python", "did you mean 'python'"}, {"PY", "did you mean 'python'"}, {"JS", "did you mean 'js'"},
                {"cobol", "also py, sh"}};
    for (size_t i = 0; i < sizeof(miss) / sizeof(miss[0]); i++) {
        char *a[] = {"submit", "-l", miss[i].name, "--code", "x", NULL};
        memset(&err, 0, sizeof(err));
        assert_int_equal(cf_cli_parse_submit(ARGC(a), a, &req, &o, &err), -1);
        if (!strstr(err.msg, miss[i].want))
            fail_msg("-l %s: '%s', want '%s'", miss[i].name, err.msg, miss[i].want);
        cf_request_clear(&req);
    }
}

/* The embedded runtimes from the CLI: --module, -l js, and the mistakes a
 * user makes with them refused with a reason. */
static void test_submit_wasm_and_js(void **state)
{
    (void)state;
    char path[] = "/tmp/cf-cli-wasm-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "\0asm\x01\0\0\0", 8), 8);
    close(fd);
    cf_request req = {0};
    cf_cli_submit_opts o;
    cf_error err = {0};
    char *a1[] = {"submit", "--module", path, "--", "x", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a1), a1, &req, &o, &err), 0);
    assert_int_equal(req.language, CF_LANG_WASM);
    assert_int_equal(req.module.len, 8);
    assert_int_equal(req.argc, 1);
    cf_request_clear(&req);

    char *a2[] = {"submit", "-l", "js", "--code", "1", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a2), a2, &req, &o, &err), 0);
    assert_int_equal(req.language, CF_LANG_JAVASCRIPT);
    assert_string_equal(req.backend, "js");
    cf_request_clear(&req);

    const struct {
        const char *why;
        char *argv[10];
    } bad[] = {
        {"--module is for language wasm", {"submit", "--module", path, "-l", "python", "--code", "x", NULL}},
        {"--module is for language wasm", {"submit", "-l", "python", "--module", path, NULL}},
        {"not --code", {"submit", "--module", path, "--code", "x", NULL}},
        {"-l js runs on the js backend", {"submit", "-l", "js", "--backend", "sandbox", "--code", "1", NULL}},
        {"-l js runs on the js backend", {"submit", "--backend", "sandbox", "-l", "js", "--code", "1", NULL}},
        {"no arguments", {"submit", "-l", "js", "--code", "1", "--", "a", NULL}},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int n = 0;
        while (bad[i].argv[n])
            n++;
        memset(&err, 0, sizeof(err));
        if (cf_cli_parse_submit(n, (char **)bad[i].argv, &req, &o, &err) != -1 || !strstr(err.msg, bad[i].why))
            fail_msg("case %zu: '%s', want '%s'", i, err.msg, bad[i].why);
        cf_request_clear(&req);
    }
    unlink(path);
}

/* Compiled languages from the CLI: --file SOURCE, --case with escapes,
 * --cases JSONL, --collect, --function, --compile-flag; typos refused. */
static void test_submit_compiled_flags(void **state)
{
    (void)state;
    char dir[] = "/tmp/cf-cli-cases-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char src[128], jsonl[128], typo[128];
    snprintf(src, sizeof(src), "%s/prog.rs", dir);
    snprintf(jsonl, sizeof(jsonl), "%s/cases.jsonl", dir);
    snprintf(typo, sizeof(typo), "%s/typo.jsonl", dir);
    FILE *f = fopen(src, "w");
    fputs("fn main() {}\n", f);
    fclose(f);
    f = fopen(jsonl, "w");
    fputs("# a comment\n\n{\"name\": \"j\", \"stdin\": \"5\", \"expect_stdout\": \"25\"}\n", f);
    fclose(f);
    f = fopen(typo, "w");
    fputs("{\"stdin\": \"1\", \"expect\": \"1\"}\n", f);
    fclose(f);

    cf_request req = {0};
    cf_cli_submit_opts o;
    cf_error err = {0};
    char *a1[] = {"submit", "--file", src, "--case", "stdin=1\\,2\\n,expect=3,name=n1,arg=-v", "--cases", jsonl,
                  "--collect", "out/*.png", "--compile-flag", "-Copt-level=1", "--stop-on-failure",
                  "--compile-timeout", "20s", NULL};
    if (cf_cli_parse_submit(ARGC(a1), a1, &req, &o, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(req.language, CF_LANG_RUST); /* from the extension */
    assert_int_equal(req.n_cases, 2);
    assert_int_equal(req.cases[0].stdin_data.len, 4);
    assert_memory_equal(req.cases[0].stdin_data.data, "1,2\n", 4);
    assert_true(req.cases[0].has_expect);
    assert_memory_equal(req.cases[0].expect_stdout.data, "3", 1);
    assert_string_equal(req.cases[0].name, "n1");
    assert_int_equal(req.cases[0].argc, 1);
    assert_string_equal(req.cases[0].argv[0], "-v");
    assert_string_equal(req.cases[1].name, "j");
    assert_int_equal(req.n_collect, 1);
    assert_string_equal(req.collect[0], "out/*.png");
    assert_int_equal(req.n_compile_flags, 1);
    assert_true(req.stop_on_failure);
    assert_int_equal(req.policy.compile_timeout_us, 20000000);
    cf_request_clear(&req);

    char *a2[] = {"submit", "-l", "python", "--function", "--code", "def run(i): return i", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a2), a2, &req, &o, &err), 0);
    assert_int_equal(req.harness, CF_HARNESS_FUNCTION);
    cf_request_clear(&req);

    /* Typos would silently drop an expectation: refused. */
    char *a3[] = {"submit", "--file", src, "--case", "stdin=1 2,expected=3", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a3), a3, &req, &o, &err), -1);
    assert_non_null(strstr(err.msg, "unknown key 'expected'"));
    char *a4[] = {"submit", "--file", src, "--cases", typo, NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a4), a4, &req, &o, &err), -1);
    assert_non_null(strstr(err.msg, "unknown key 'expect'"));
    /* A harness for a language that has none: the schema says so. */
    char *a5[] = {"submit", "-l", "c", "--function", "--code", "int main(){}", NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(a5), a5, &req, &o, &err), 0);
    cf_bytes enc = {0};
    assert_int_equal(cf_request_encode(&req, &enc, &err), -1);
    assert_non_null(strstr(err.msg, "harness"));
    cf_request_clear(&req);
    unlink(src);
    unlink(jsonl);
    unlink(typo);
    rmdir(dir);
}

/* Runs a shell command line; what it wrote (up to cap - 1 bytes) into out. */
static void shell_output(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    pclose(p);
}

/* A broker that is not there: one line saying what failed and what to
 * check, exit 6, none of librdkafka's own log lines. */
static void test_cli_explains_an_unreachable_broker(void **state)
{
    (void)state;
    const char *bin = getenv("CF_BINARY_DIR");
    char cli[1024], cmd[1400];
    snprintf(cli, sizeof(cli), "%s/dispatcher/codefleet", bin ? bin : "build");
    if (access(cli, X_OK) != 0)
        skip();
    snprintf(cmd, sizeof(cmd),
             "env -u CODEFLEET_LOG_LEVEL -u CODEFLEET_CONFIG %s --brokers 127.0.0.1:1 --timeout 3s submit -l shell "
             "--code 'echo hi' 2>&1 >/dev/null; echo rc=$?",
             cli);
    char out[8192];
    shell_output(cmd, out, sizeof(out));
    if (!strstr(out, "codefleet: cannot reach the Kafka broker at 127.0.0.1:1 (Connection refused): is it running? "
                     "check --brokers (CODEFLEET_BROKERS)\nrc=6"))
        fail_msg("unexpected output:\n%s", out);
    assert_null(strstr(out, "kafka:"));
}

/* A dispatcher that only submits (no collector, as the chaos driver's)
 * still heals its producer: once it knows no broker for a few seconds,
 * its bootstrap servers are added again.  Without that, a producer that
 * forgot the broker across a restart kept its requests for good (the
 * chaos suite lost 307 so).  A closed port is a broker it never knows. */
static void test_submit_only_dispatcher_heals_its_producer(void **state)
{
    (void)state;
    cf_dispatcher_config cfg = {.brokers = "127.0.0.1:1", .collect_results = false};
    cf_dispatcher *d = NULL;
    cf_error err;
    if (cf_dispatcher_new(&cfg, &d, &err) < 0)
        fail_msg("dispatcher: %s", err.msg);
    cf_dispatcher_stats st = {0};
    int64_t until = cf_mono_us() + 120 * 1000000LL;
    do {
        usleep(50 * 1000);
        cf_dispatcher_get_stats(d, &st);
    } while (st.producer_heals == 0 && cf_mono_us() < until);
    cf_dispatcher_destroy(d);
    assert_true(st.producer_heals >= 1);
}

/* With --json, an error is one JSON object on stderr and the same on
 * stdout (a script reading stdout gets an answer on every exit); a global
 * option after the command says where it goes. */
static void test_cli_errors_in_json(void **state)
{
    (void)state;
    const char *bin = getenv("CF_BINARY_DIR");
    char cli[1024], cmd[3200], out[8192];
    snprintf(cli, sizeof(cli), "%s/dispatcher/codefleet", bin ? bin : "build");
    if (access(cli, X_OK) != 0)
        skip();
    const char *env = "env -u CODEFLEET_LOG_LEVEL -u CODEFLEET_CONFIG";
    /* stdout only, then stderr only: the same object on both. */
    snprintf(cmd, sizeof(cmd), "%s %s --json bogus 2>/dev/null; echo rc=$?", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "{\"error\":{\"exit_code\":2,\"kind\":\"usage\",\"message\":\"unknown command 'bogus' "
                             "(see codefleet --help)\"}}\nrc=2\n");
    snprintf(cmd, sizeof(cmd), "%s %s --json bogus 2>&1 >/dev/null", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "{\"error\":{\"exit_code\":2,\"kind\":\"usage\",\"message\":\"unknown command 'bogus' "
                             "(see codefleet --help)\"}}\n");
    /* A transport failure names its kind and the command's exit code. */
    snprintf(cmd, sizeof(cmd),
             "%s %s --json --brokers 127.0.0.1:1 --timeout 3s submit -l shell --code 'echo hi' 2>/dev/null; echo rc=$?",
             env, cli);
    shell_output(cmd, out, sizeof(out));
    if (!strstr(out, "{\"error\":{\"exit_code\":6,\"kind\":\"transport\",\"message\":\"cannot reach the Kafka broker at "
                     "127.0.0.1:1") ||
        !strstr(out, "}}\nrc=6\n"))
        fail_msg("unexpected output:\n%s", out);
    /* A subcommand's usage error carries the command. */
    snprintf(cmd, sizeof(cmd), "%s %s --json workspace get --bogus x 2>/dev/null", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "{\"error\":{\"command\":\"workspace get\",\"exit_code\":2,\"kind\":\"usage\","
                             "\"message\":\"option --bogus: unknown or missing its value (see codefleet workspace get "
                             "--help)\"}}\n");
    /* Without --json: the text line, nothing on stdout. */
    snprintf(cmd, sizeof(cmd), "%s %s bogus 2>&1; echo rc=$?", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "codefleet: unknown command 'bogus' (see codefleet --help)\nrc=2\n");
    /* A global option after the command: where it goes. */
    snprintf(cmd, sizeof(cmd), "%s %s submit --json -l shell --code true 2>&1; echo rc=$?", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "codefleet submit: --json is a global option: give it before the command (codefleet "
                             "--json submit ...) (see codefleet submit --help)\nrc=2\n");
    snprintf(cmd, sizeof(cmd), "%s %s events tail --brokers=x:1 2>&1; echo rc=$?", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "codefleet events tail: --brokers is a global option: give it before the command "
                             "(codefleet --brokers VALUE events tail ...) (see codefleet events --help)\nrc=2\n");
    /* A whole global name after the command, even one a command flag
     * starts with (getopt would take --timeout for --timeout-exec). */
    snprintf(cmd, sizeof(cmd), "%s %s submit --timeout 60s -- true 2>&1; echo rc=$?", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "codefleet submit: --timeout is a global option: give it before the command (codefleet "
                             "--timeout VALUE submit ...) (see codefleet submit --help)\nrc=2\n");
    /* ...but a flag's value is no option, whatever it reads; and the hint
     * of a global given as --name=value still says it takes a value. */
    snprintf(cmd, sizeof(cmd),
             "%s %s --brokers 127.0.0.1:1 --timeout 2s submit -l rust --compile-flag --json=diagnostic-short "
             "--code 'fn main(){}' 2>&1 >/dev/null; echo rc=$?",
             env, cli);
    shell_output(cmd, out, sizeof(out));
    if (strstr(out, "global option") || !strstr(out, "rc=6"))
        fail_msg("a --compile-flag value was taken for a global option:\n%s", out);
    snprintf(cmd, sizeof(cmd), "%s %s submit --timeout=60s -- true 2>&1", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_non_null(strstr(out, "(codefleet --timeout VALUE submit ...)"));
    /* --json after another global option's value still makes errors JSON. */
    snprintf(cmd, sizeof(cmd), "%s %s --timeout 5s --json --nope x 2>/dev/null; echo rc=$?", env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "{\"error\":{\"exit_code\":2,\"kind\":\"usage\",\"message\":\"unknown flag --nope\"}}\nrc=2\n");
    /* reply_to "" is no topic: refused before anything is sent. */
    char rf[64] = "/tmp/cf-rt-XXXXXX";
    int fd = mkstemp(rf);
    assert_true(fd >= 0);
    const char *rj = "{\"v\":1,\"id\":\"rt-empty\",\"language\":\"shell\",\"code\":\"true\",\"reply_to\":\"\"}";
    assert_int_equal(write(fd, rj, strlen(rj)), (ssize_t)strlen(rj));
    close(fd);
    snprintf(cmd, sizeof(cmd), "%s %s --brokers 127.0.0.1:1 submit --request-file %s 2>&1; echo rc=$?", env, cli, rf);
    shell_output(cmd, out, sizeof(out));
    unlink(rf);
    if (!strstr(out, "codefleet submit: reply_to '' is not a topic name") || !strstr(out, "rc=2\n"))
        fail_msg("unexpected output:\n%s", out);
    /* An unknown option is named, whether long or short. */
    snprintf(cmd, sizeof(cmd), "%s %s wait --nope x 2>&1; %s %s tail -Z 2>&1", env, cli, env, cli);
    shell_output(cmd, out, sizeof(out));
    assert_string_equal(out, "codefleet wait: option --nope: unknown or missing its value (see codefleet wait --help)\n"
                             "codefleet tail: option -Z: unknown or missing its value (see codefleet tail --help)\n");
}

/* The CLI and the worker say one version, the build's (CF_VERSION, from
 * CMake's project()), and exit 0. */
static void test_version(void **state)
{
    (void)state;
    const char *bin = getenv("CF_BINARY_DIR");
    static const char *const progs[][2] = {{"dispatcher/codefleet", "--version"},
                                           {"dispatcher/codefleet", "version"},
                                           {"worker/codefleet-worker", "--version"}};
    for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
        char path[1024], cmd[1200], want[128];
        snprintf(path, sizeof(path), "%s/%s", bin ? bin : "build", progs[i][0]);
        if (access(path, X_OK) != 0)
            skip();
        snprintf(cmd, sizeof(cmd), "%s %s 2>&1; echo rc=$?", path, progs[i][1]);
        char out[1024];
        shell_output(cmd, out, sizeof(out));
        snprintf(want, sizeof(want), "%s " CF_VERSION " (librdkafka ", strrchr(progs[i][0], '/') + 1);
        if (strncmp(out, want, strlen(want)) != 0 || !strstr(out, ")\nrc=0\n"))
            fail_msg("%s %s said:\n%s", progs[i][0], progs[i][1], out);
    }
    /* After a global option too, and as JSON when asked. */
    static const char *const more[][2] = {{"--brokers 127.0.0.1:1 version", "codefleet " CF_VERSION " (librdkafka "},
                                          {"--json version", "{\"codefleet\":\"" CF_VERSION "\",\"librdkafka\":\""},
                                          {"version --json", "{\"codefleet\":\"" CF_VERSION "\",\"librdkafka\":\""}};
    for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
        char cmd[1200], out[1024];
        snprintf(cmd, sizeof(cmd), "%s/dispatcher/codefleet %s 2>&1; echo rc=$?", bin ? bin : "build", more[i][0]);
        shell_output(cmd, out, sizeof(out));
        if (strncmp(out, more[i][1], strlen(more[i][1])) != 0 || !strstr(out, "\nrc=0\n"))
            fail_msg("codefleet %s said:\n%s", more[i][0], out);
    }
}

static void test_submit_rejects_bad_flags(void **state)
{
    (void)state;
    cf_request req = {0};
    cf_cli_submit_opts o;
    cf_error err = {0};
    struct {
        char *argv[8];
        const char *needle;
    } cases[] = {
        {{"submit", "--code", "x", NULL}, "--language"},
        {{"submit", "-l", "python", NULL}, "--code"},
        {{"submit", "-l", "command", NULL}, "program"},
        {{"submit", "-l", "wasm", "--code", "x", NULL}, "wasm"},
        {{"submit", "-l", "perl", "--code", "x", NULL}, "perl"},
        {{"submit", "--network", "maybe", "--", "x", NULL}, "--network"},
        {{"submit", "--filesystem", "all", "--", "x", NULL}, "--filesystem"},
        {{"submit", "--memory", "lots", "--", "x", NULL}, "--memory"},
        {{"submit", "--timeout-exec", "0", "--", "x", NULL}, "--timeout-exec"},
        {{"submit", "--env", "=v", "--", "x", NULL}, "--env"},
        {{"submit", "--file", "nolocal", "--", "x", NULL}, "--file"},
        {{"submit", "--file", "a=/nonexistent/zz", "--", "x", NULL}, "/nonexistent/zz"},
        {{"submit", "--id", "has space", "--", "x", NULL}, "--id"},
        {{"submit", "--input", "{bad", "--", "x", NULL}, "--input"},
        {{"submit", "stray", NULL}, "stray"},
        {{"submit", "--nope", NULL}, "--nope"},
        {{"submit", "--code", NULL}, "--code"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int argc = 0;
        while (cases[i].argv[argc])
            argc++;
        memset(&err, 0, sizeof(err));
        int rc = cf_cli_parse_submit(argc, cases[i].argv, &req, &o, &err);
        if (rc != -1 || !strstr(err.msg, cases[i].needle))
            fail_msg("case %zu: rc %d, message '%s' lacks '%s'", i, rc, err.msg, cases[i].needle);
        assert_null(req.id); /* cleared on failure */
    }
}

static void test_submit_request_file_with_overrides(void **state)
{
    (void)state;
    const char *json = "{\"id\":\"from-file\",\"language\":\"python\",\"code\":\"print(1)\","
                       "\"env\":{\"A\":\"1\"},\"policy\":{\"timeout_us\":1000000}}";
    char path[128];
    write_tmp(path, sizeof(path), ".json", json, strlen(json));
    char *argv[] = {"submit", "--request-file", path, "--env", "B=2", "--timeout-exec", "3s", NULL};
    cf_request req = {0};
    cf_cli_submit_opts o;
    cf_error err = {0};
    if (cf_cli_parse_submit(ARGC(argv), argv, &req, &o, &err) < 0)
        fail_msg("%s", err.msg);
    assert_string_equal(req.id, "from-file");
    assert_int_equal(req.language, CF_LANG_PYTHON);
    assert_int_equal(req.n_env, 2); /* appended to the file's */
    assert_int_equal(req.policy.timeout_us, 3000000);
    cf_request_clear(&req);

    const char *bad = "{\"language\":\"python\",";
    char bpath[128];
    write_tmp(bpath, sizeof(bpath), ".json", bad, strlen(bad));
    char *argv2[] = {"submit", "--request-file", bpath, NULL};
    assert_int_equal(cf_cli_parse_submit(ARGC(argv2), argv2, &req, &o, &err), -1);
    assert_non_null(strstr(err.msg, bpath));
    unlink(path);
    unlink(bpath);
}

/* ------------------------------------------------------------------------- */

static void test_request_lines(void **state)
{
    (void)state;
    cf_request req;
    cf_error err = {0};
    assert_int_equal(cf_cli_parse_request_line("", 0, &req, &err), 1);
    assert_int_equal(cf_cli_parse_request_line("  \t\r\n", 5, &req, &err), 1);
    assert_int_equal(cf_cli_parse_request_line("# {\"id\":1}\n", 11, &req, &err), 1);
    assert_int_equal(cf_cli_parse_request_line("   # indented comment", 21, &req, &err), 1);

    const char *l1 = "{\"id\":\"a-1\",\"language\":\"shell\",\"code\":\"echo hi\"}\n";
    assert_int_equal(cf_cli_parse_request_line(l1, strlen(l1), &req, &err), 0);
    assert_string_equal(req.id, "a-1");
    assert_int_equal(req.language, CF_LANG_SHELL);
    cf_request_clear(&req);

    /* Missing id: generated. */
    const char *l2 = "{\"language\":\"command\",\"argv\":[\"true\"]}";
    assert_int_equal(cf_cli_parse_request_line(l2, strlen(l2), &req, &err), 0);
    assert_non_null(req.id);
    assert_true(cf_id_valid(req.id, strlen(req.id)));
    cf_request_clear(&req);

    /* Only the first len bytes count (lines are not NUL-terminated in general). */
    const char *l3 = "{\"id\":\"b\",\"language\":\"shell\",\"code\":\"x\"}GARBAGE";
    assert_int_equal(cf_cli_parse_request_line(l3, strlen(l3) - 7, &req, &err), 0);
    cf_request_clear(&req);

    const char *bad[] = {"{not json", "[1,2]", "\"str\"", "{\"id\":\"a\",\"id\":\"b\",\"language\":\"shell\"}",
                         "{\"id\":\"x\",\"language\":\"klingon\",\"code\":\"x\"}", "{} trailing"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        if (cf_cli_parse_request_line(bad[i], strlen(bad[i]), &req, &err) != -1)
            fail_msg("line accepted: %s", bad[i]);
        assert_true(err.msg[0] != '\0');
        assert_null(req.id);
    }
}

/* ------------------------------------------------------------------------- */

static void test_percentiles(void **state)
{
    (void)state;
    assert_int_equal(cf_cli_percentile(NULL, 0, 50), 0);
    int64_t one[] = {7};
    assert_int_equal(cf_cli_percentile(one, 1, 50), 7);
    assert_int_equal(cf_cli_percentile(one, 1, 99), 7);
    int64_t v[100];
    for (int i = 0; i < 100; i++)
        v[i] = i + 1; /* 1..100 */
    assert_int_equal(cf_cli_percentile(v, 100, 50), 50);
    assert_int_equal(cf_cli_percentile(v, 100, 90), 90);
    assert_int_equal(cf_cli_percentile(v, 100, 99), 99);
    assert_int_equal(cf_cli_percentile(v, 100, 100), 100);
    assert_int_equal(cf_cli_percentile(v, 100, 0.5), 1);
    int64_t four[] = {10, 20, 30, 40};
    assert_int_equal(cf_cli_percentile(four, 4, 50), 20); /* nearest rank: ceil(2) = 2nd */
    assert_int_equal(cf_cli_percentile(four, 4, 51), 30);
    assert_int_equal(cf_cli_percentile(four, 4, 99), 40);

    /* No latency at all (every request unanswered): 0, and no qsort of
     * NULL (UBSan stops the program on that). */
    cf_cli_batch_stats none = {0};
    assert_int_equal(cf_cli_stats_percentile(&none, 50), 0);

    /* Stats sort unsorted input and count statuses. */
    cf_cli_batch_stats s = {0};
    int64_t lat[] = {5000, 1000, 3000, 2000, 4000};
    for (int i = 0; i < 5; i++)
        assert_int_equal(cf_cli_stats_add(&s, i == 4 ? CF_STATUS_FAILED : CF_STATUS_SUCCESS, lat[i]), 0);
    s.submitted = 5;
    assert_int_equal(cf_cli_stats_percentile(&s, 50), 3000);
    assert_int_equal(cf_cli_stats_percentile(&s, 100), 5000);
    assert_int_equal(s.by_status[CF_STATUS_SUCCESS], 4);
    assert_int_equal(s.by_status[CF_STATUS_FAILED], 1);
    assert_false(cf_cli_stats_all_success(&s));
    s.by_status[CF_STATUS_FAILED] = 0;
    s.by_status[CF_STATUS_SUCCESS] = 5;
    assert_true(cf_cli_stats_all_success(&s));
    s.missing = 1;
    assert_false(cf_cli_stats_all_success(&s));
    s.missing = 0;
    s.bad_lines = 1;
    assert_false(cf_cli_stats_all_success(&s));
    cf_cli_stats_free(&s);
}

static void test_summary_output(void **state)
{
    (void)state;
    cf_cli_batch_stats s = {0};
    for (int i = 1; i <= 10; i++)
        cf_cli_stats_add(&s, i <= 8 ? CF_STATUS_SUCCESS : CF_STATUS_TIMEOUT, i * 1000);
    s.submitted = 11;
    s.missing = 1;
    s.elapsed_us = 2000000;
    json_t *j = cf_cli_stats_to_json(&s);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "submitted")), 11);
    assert_int_equal(json_integer_value(json_object_get(j, "received")), 10);
    assert_int_equal(json_integer_value(json_object_get(j, "missing")), 1);
    json_t *by = json_object_get(j, "by_status");
    assert_int_equal(json_integer_value(json_object_get(by, "success")), 8);
    assert_int_equal(json_integer_value(json_object_get(by, "timeout")), 2);
    json_t *lat = json_object_get(j, "latency_ms");
    assert_true(json_real_value(json_object_get(lat, "p50")) == 5.0);
    assert_true(json_real_value(json_object_get(lat, "p90")) == 9.0);
    assert_true(json_real_value(json_object_get(lat, "max")) == 10.0);
    assert_true(json_real_value(json_object_get(j, "throughput_per_s")) == 5.0);
    json_decref(j);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cf_cli_print_summary(f, &s);
    fclose(f);
    assert_non_null(strstr(text, "success 8"));
    assert_non_null(strstr(text, "timeout 2"));
    assert_non_null(strstr(text, "p50 5.00"));
    assert_non_null(strstr(text, "p99 10.00"));
    assert_non_null(strstr(text, "throughput 5.0"));
    free(text);

    char line[256];
    cf_cli_format_progress(&s, line, sizeof(line));
    assert_string_equal(line, "submitted 11  received 10  success 8  timeout 2");
    char tiny[12];
    cf_cli_format_progress(&s, tiny, sizeof(tiny));
    assert_int_equal(strlen(tiny), sizeof(tiny) - 1); /* truncated, terminated */
    cf_cli_stats_free(&s);
}

static void fill_result(cf_result *r)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("r-1");
    r->status = CF_STATUS_FAILED;
    r->has_exit_code = true;
    r->exit_code = 2;
    cf_bytes_set(&r->stdout_data, "first\x1b[31m line\nsecond\n", 23);
    cf_bytes_set(&r->stderr_data, "oops", 4);
    r->stderr_truncated = true;
    r->wall_time_us = 1500;
    r->cpu_time_us = 700;
    r->peak_memory_bytes = 5 << 20;
    r->meta.backend = strdup("process");
    r->meta.isolation = strdup("host_local");
    r->reason = strdup("exit status 2");
}

static void print_result_adapter(FILE *f, const void *r)
{
    cf_cli_print_result(f, r);
}

static void test_result_output(void **state)
{
    (void)state;
    cf_result r;
    fill_result(&r);
    char *text = capture(print_result_adapter, &r);
    assert_non_null(strstr(text, "id:       r-1\n"));
    assert_non_null(strstr(text, "status:   failed (exit 2)\n"));
    assert_non_null(strstr(text, "peak memory 5 MiB"));
    assert_non_null(strstr(text, "backend:  process (host_local)"));
    assert_non_null(strstr(text, "reason:   exit status 2\n"));
    assert_null(strstr(text, "sandbox,"));
    assert_non_null(strstr(text, "--- stdout ---\nfirst"));
    /* stderr has no trailing newline: one is added before the marker. */
    assert_non_null(strstr(text, "--- stderr ---\noops\n[truncated]\n"));
    free(text);

    char line[256];
    cf_cli_format_result_line(&r, line, sizeof(line));
    /* Control characters of hostile output are neutralised. */
    assert_string_equal(line, "r-1  failed  exit=2  1.50ms  first?[31m line");
    r.signal = 9;
    cf_cli_format_result_line(&r, line, sizeof(line));
    assert_non_null(strstr(line, "sig=9"));

    char *js = NULL;
    size_t jl = 0;
    FILE *f = open_memstream(&js, &jl);
    cf_error err = {0};
    assert_int_equal(cf_cli_print_result_json(f, &r, &err), 0);
    fclose(f);
    assert_int_equal(js[jl - 1], '\n');
    assert_ptr_equal(strchr(js, '\n'), js + jl - 1); /* exactly one line */
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "r-1");
    assert_string_equal(json_string_value(json_object_get(j, "status")), "failed");
    json_decref(j);
    free(js);
    cf_result_clear(&r);

    char sz[32];
    cf_format_size(512, sz, sizeof(sz));
    assert_string_equal(sz, "512 B");
    cf_format_size(1536, sz, sizeof(sz));
    assert_string_equal(sz, "1.5 KiB");
    cf_format_size(INT64_C(3) << 30, sz, sizeof(sz));
    assert_string_equal(sz, "3 GiB");
}

/* Sizes for people: an exact size in its unit without a decimal, others to
 * a tenth (so a rounded one says so).  A reason is the worker's text, limits
 * already in those units, and may carry the program's own words: the CLI
 * prints it as it came, never rewriting a size in it. */
static void test_sizes_for_people(void **state)
{
    (void)state;
    char sz[32];
    static const struct {
        int64_t in;
        const char *want;
    } sizes[] = {{0, "0 B"},
                 {512, "512 B"},
                 {1023, "1023 B"},
                 {1024, "1 KiB"},
                 {1536, "1.5 KiB"},
                 {67108864, "64 MiB"},
                 {67108865, "64.0 MiB"},
                 {(INT64_C(3) << 20) / 2, "1.5 MiB"}, /* exact in KiB, not in MiB: its unit is MiB */
                 {(INT64_C(3) << 30), "3 GiB"},
                 {(INT64_C(5) << 40), "5 TiB"},
                 {(INT64_C(2048) << 40), "2048 TiB"}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        cf_format_size(sizes[i].in, sz, sizeof(sz));
        assert_string_equal(sz, sizes[i].want);
    }

    static const char *const reasons[] = {
        "exited with code 1: ValueError: got 1024 bytes",
        "memory limit of 64 MiB exceeded (killed by the OOM killer)",
        "memory limit of 67108864 bytes exceeded" /* an older worker's words */};
    cf_result r;
    fill_result(&r);
    r.peak_memory_bytes = 67108864;
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
        free(r.reason);
        r.reason = strdup(reasons[i]);
        char *text = capture(print_result_adapter, &r), want[200];
        snprintf(want, sizeof(want), "reason:   %s\n", reasons[i]);
        if (!strstr(text, want))
            fail_msg("reason not printed as it came: %s", text);
        assert_non_null(strstr(text, "peak memory 64 MiB\n"));
        free(text);
    }
    /* Words as they came, but no terminal control: a program's exception
     * line may carry escape sequences. */
    free(r.reason);
    r.reason = strdup("exited with code 1: Boom: \x1b[2J\x1b]0;owned\x07 cleared");
    char *esc = capture(print_result_adapter, &r);
    /* (the program's stdout, fill_result's, keeps its own escapes: it is
     * the program's output, shown as a terminal would) */
    assert_null(strchr(esc, '\x07'));
    assert_non_null(strstr(esc, "reason:   exited with code 1: Boom: ?[2J?]0;owned? cleared\n"));
    free(esc);
    char line[256];
    cf_cli_format_result_line(&r, line, sizeof(line));
    assert_null(strchr(line, '\x1b'));
    /* The one-line form and a case's reason the same. */
    free(r.reason);
    r.reason = strdup(reasons[0]);
    r.stdout_data.len = 0;
    cf_cli_format_result_line(&r, line, sizeof(line));
    assert_non_null(strstr(line, "(exited with code 1: ValueError: got 1024 bytes)"));
    r.cases = calloc(1, sizeof(*r.cases));
    assert_non_null(r.cases);
    r.n_cases = 1;
    r.cases[0].name = strdup("big");
    r.cases[0].status = CF_STATUS_FAILED;
    r.cases[0].has_exit_code = true;
    r.cases[0].exit_code = 1;
    r.cases[0].reason = strdup("exited with code 1: ValueError: got 2048 bytes");
    char *text = capture(print_result_adapter, &r);
    assert_non_null(strstr(text, "       exited with code 1: ValueError: got 2048 bytes\n"));
    free(text);
    /* --json: the worker's words and numbers too. */
    char *js = NULL;
    size_t jl = 0;
    FILE *f = open_memstream(&js, &jl);
    cf_error err = {0};
    assert_int_equal(cf_cli_print_result_json(f, &r, &err), 0);
    fclose(f);
    assert_non_null(strstr(js, "\"reason\":\"exited with code 1: ValueError: got 1024 bytes\""));
    assert_non_null(strstr(js, "\"peak_memory_bytes\":67108864"));
    free(js);
    cf_result_clear(&r);
}

/* Which sandbox served a result is shown; a value the schema does not
 * know is not (it could be anything a worker wrote). */
static void test_result_output_sandbox_path(void **state)
{
    (void)state;
    cf_result r;
    fill_result(&r);
    r.meta.sandbox = strdup("warm");
    char *text = capture(print_result_adapter, &r);
    assert_non_null(strstr(text, "backend:  process (host_local), warm sandbox"));
    free(text);
    free(r.meta.sandbox);
    r.meta.sandbox = strdup("\x1b[31mhot");
    text = capture(print_result_adapter, &r);
    assert_null(strstr(text, "hot"));
    free(text);
    cf_result_clear(&r);
}

static void test_new_id(void **state)
{
    (void)state;
    char a[64], b[64];
    cf_error err = {0};
    assert_int_equal(cf_dispatcher_new_id(a, sizeof(a), &err), 0);
    usleep(2000);
    assert_int_equal(cf_dispatcher_new_id(b, sizeof(b), &err), 0);
    assert_int_equal(strlen(a), 30);
    assert_true(cf_id_valid(a, strlen(a)));
    assert_true(strcmp(a, b) < 0); /* time-ordered */
    char small[16];
    assert_int_equal(cf_dispatcher_new_id(small, sizeof(small), &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
}

static void test_read_file_cap(void **state)
{
    (void)state;
    char path[128];
    write_tmp(path, sizeof(path), ".bin", "0123456789", 10);
    cf_bytes b;
    cf_error err = {0};
    assert_int_equal(cf_cli_read_file(path, 10, &b, &err), 0);
    assert_int_equal(b.len, 10);
    free(b.data);
    assert_int_equal(cf_cli_read_file(path, 9, &b, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_int_equal(cf_cli_read_file("/tmp", 100, &b, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_cli_read_file("/nonexistent/file", 100, &b, &err), -1);
    assert_int_equal(err.code, CF_E_NOT_FOUND);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_globals_defaults_env_and_flags),
        cmocka_unit_test(test_globals_config_file),
        cmocka_unit_test(test_globals_errors),
        cmocka_unit_test(test_cli_main_usage_exit_codes),
        cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_submit_flags_build_request),
        cmocka_unit_test(test_submit_defaults_and_inference),
        cmocka_unit_test(test_submit_rejects_bad_flags),
        cmocka_unit_test(test_submit_request_file_with_overrides),
        cmocka_unit_test(test_request_lines),
        cmocka_unit_test(test_percentiles),
        cmocka_unit_test(test_summary_output),
        cmocka_unit_test(test_result_output),
        cmocka_unit_test(test_sizes_for_people),
        cmocka_unit_test(test_result_output_sandbox_path),
        cmocka_unit_test(test_submit_compiled_flags),
        cmocka_unit_test(test_submit_wasm_and_js),
        cmocka_unit_test(test_cli_explains_an_unreachable_broker),
        cmocka_unit_test(test_submit_only_dispatcher_heals_its_producer),
        cmocka_unit_test(test_cli_errors_in_json),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_new_id),
        cmocka_unit_test(test_read_file_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
