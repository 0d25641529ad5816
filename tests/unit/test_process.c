/* The `process` backend, driven through the registry like the worker does. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support/test_proc.h"
#include "unit/request_builders.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define SEC 1000000LL

typedef struct fixture {
    char root[64];
    cf_backend_config cfg;
    cf_backend_set *set;
    const cf_backend *be;
} fixture;

static int make_set(fixture *f, int64_t uid_base)
{
    memset(&f->cfg, 0, sizeof(f->cfg));
    f->cfg.work_root = f->root;
    f->cfg.python_path = "/usr/bin/python3";
    f->cfg.node_path = "/usr/bin/node";
    f->cfg.shell_path = "/bin/sh";
    f->cfg.exec_path = "/usr/bin:/bin";
    f->cfg.slots = 2;
    f->cfg.run_uid_base = uid_base;
    f->cfg.max_files_bytes = 1 << 20;
    f->cfg.max_output_file_bytes = 1 << 16;
    cf_error err;
    if (cf_backend_set_new("process", &f->cfg, &f->set, &err) < 0) {
        fprintf(stderr, "set: %s\n", err.msg);
        return -1;
    }
    f->be = cf_backend_set_get(f->set, 0);
    return f->be ? 0 : -1;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    cf_strlcpy(f->root, "/tmp/cf-proctest-XXXXXX", sizeof(f->root));
    if (!mkdtemp(f->root) || chmod(f->root, 0711) < 0)
        return -1;
    if (make_set(f, 0) < 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cf_backend_set_destroy(f->set);
    /* Every execution removed its work dir: the root is empty again. */
    int rc = rmdir(f->root);
    free(f);
    return rc;
}

static void req_init(cf_request *r, cf_language lang, const char *code)
{
    req_init_timeout(r, lang, code, 10 * SEC);
}

static int run(fixture *f, int slot, const cf_request *req, cf_result *res)
{
    memset(res, 0, sizeof(*res));
    cf_exec_ctx ctx = {.slot = slot, .worker_id = "test"};
    cf_error err;
    cf_error_clear(&err);
    int rc = f->be->ops->execute(f->be->state, &ctx, req, res, &err);
    if (rc < 0)
        print_error("execute: %s\n", err.msg);
    return rc;
}

static bool out_is(const cf_bytes *b, const char *s)
{
    return b->len == strlen(s) && (b->len == 0 || memcmp(b->data, s, b->len) == 0);
}

static bool out_has(const cf_bytes *b, const char *s)
{
    return b->data && memmem(b->data, b->len, s, strlen(s)) != NULL;
}

static void test_caps(void **state)
{
    fixture *f = *state;
    const cf_backend_caps *c = &f->be->caps;
    assert_string_equal(f->be->ops->name, "process");
    assert_string_equal(c->isolation, "host_local");
    for (int l = CF_LANG_COMMAND; l <= CF_LANG_JAVASCRIPT; l++)
        assert_true(c->languages & (1u << l));
    assert_false(c->languages & (1u << CF_LANG_WASM));
    /* It claims only what it enforces. */
    assert_false(c->controls & (CF_CTL_NETWORK_DISABLED | CF_CTL_NETWORK_ENABLED | CF_CTL_FS_NONE |
                                CF_CTL_FS_WORKSPACE_RO | CF_CTL_FS_WORKSPACE_RW | CF_CTL_FS_PATHS));
    assert_false(c->controls & CF_CTL_MAX_PROCESSES); /* no per-slot uids in this fixture */
    uint32_t want = CF_CTL_TIMEOUT | CF_CTL_CPU_TIME | CF_CTL_MEMORY | CF_CTL_STDOUT_CAP | CF_CTL_STDERR_CAP |
                    CF_CTL_FILE_SIZE | CF_CTL_ENV_ALLOWLIST;
    assert_int_equal(c->controls & want, want);
    assert_non_null(c->notes);
    assert_non_null(strstr(c->notes, "RLIMIT_AS"));
    assert_non_null(strstr(c->notes, "cpu_time = RLIMIT_CPU per process, whole seconds"));
}

static void test_command(void **state)
{
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_COMMAND, NULL);
    const char *argv[] = {"echo", "hello", "world"};
    req_argv(&req, 3, argv);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(res.has_exit_code);
    assert_int_equal(res.exit_code, 0);
    assert_true(out_is(&res.stdout_data, "hello world\n"));
    assert_string_equal(res.meta.backend, "process");
    assert_string_equal(res.meta.isolation, "host_local");
    assert_string_equal(res.meta.language, "command");
    assert_true(res.wall_time_us > 0);
    assert_null(res.reason);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Names resolve against exec_path only; missing ones are rejected. */
    req_init(&req, CF_LANG_COMMAND, NULL);
    const char *argv2[] = {"no-such-program-xyz"};
    req_argv(&req, 1, argv2);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "no-such-program-xyz"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_COMMAND, NULL);
    const char *argv3[] = {"/bin/sh", "-c", "echo err >&2; exit 7"};
    req_argv(&req, 3, argv3);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_int_equal(res.exit_code, 7);
    assert_true(out_is(&res.stderr_data, "err\n"));
    assert_non_null(strstr(res.reason, "7"));
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void test_shell_python_javascript(void **state)
{
    fixture *f = *state;
    cf_request req;
    cf_result res;

    req_init(&req, CF_LANG_SHELL, "echo $((6*7)) \"$1\"; pwd");
    const char *a[] = {"arg1"};
    req_argv(&req, 1, a);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_has(&res.stdout_data, "42 arg1\n"));
    assert_true(out_has(&res.stdout_data, f->root)); /* runs inside its work dir */
    assert_string_equal(res.meta.language, "shell");
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_PYTHON, "import sys\nprint(sys.version_info[0], sys.argv[1:])\n");
    req_argv(&req, 1, a);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "3 ['arg1']\n"));
    assert_true(res.peak_memory_bytes > 1000000);
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_PYTHON, "raise SystemExit(3)\n");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_int_equal(res.exit_code, 3);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* The reason carries the line that says why: Python's exception (the
     * last line of its traceback), node's error headline; a program
     * without one gets the plain reason. */
    req_init(&req, CF_LANG_PYTHON, "def f(x):\n    return 1 / x\nprint('before')\nf(0)\n");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_string_equal(res.reason, "exited with code 1: ZeroDivisionError: division by zero");
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_JAVASCRIPT, "const o = null;\nconsole.log(o.field);\n");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "exited with code 1: TypeError: Cannot read properties of null"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* A message of several lines: its first; the program's own stderr
     * before the uncaught error does not win. */
    req_init(&req, CF_LANG_PYTHON, "import sys\nprint('Error: just a log line', file=sys.stderr)\n"
                                   "raise ValueError('first line\\nsecond line')\n");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_string_equal(res.reason, "exited with code 1: ValueError: first line");
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_JAVASCRIPT, "console.error('Error loading config, using defaults');\n"
                                       "null.x;\n");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_non_null(res.reason);
    assert_non_null(strstr(res.reason, "exited with code 1: TypeError: "));
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_SHELL, "echo 'Traceback (most recent call last):' >&2; echo 'Fake: no' >&2; exit 4");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_string_equal(res.reason, "exited with code 4"); /* a shell's stderr is not parsed */
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* The program's text reaches the reason without control characters. */
    req_init(&req, CF_LANG_PYTHON, "raise ValueError('bad \\x1b[2J value')\n");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_non_null(strstr(res.reason, "exited with code 1: ValueError: bad "));
    assert_null(strchr(res.reason, 0x1b));
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_JAVASCRIPT, "console.log(6*7, process.argv.slice(2).join(','))");
    req_argv(&req, 1, a);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "42 arg1\n"));
    assert_true(res.cpu_time_us > 0);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* node under a memory (RLIMIT_AS) limit it can live with. */
    req_init(&req, CF_LANG_JAVASCRIPT, "console.log('ok')");
    req.policy.memory_bytes = 1024LL << 20;
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    cf_request_clear(&req);

    req_init(&req, CF_LANG_WASM, NULL);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void test_env_isolation(void **state)
{
    fixture *f = *state;
    setenv("CF_TEST_CANARY", "leaked", 1);
    setenv("CF_TEST_ALLOWED", "passed-through", 1);
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_SHELL, "env");
    req.policy.env_allow_set = true;
    req.policy.env_allow = calloc(2, sizeof(char *));
    req.policy.env_allow[0] = strdup("CF_TEST_ALLOWED");
    req.policy.env_allow[1] = strdup("CF_TEST_UNSET_VAR");
    req.policy.n_env_allow = 2;
    req_env(&req, "REQ_VAR", "from request");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_false(out_has(&res.stdout_data, "CF_TEST_CANARY"));
    assert_false(out_has(&res.stdout_data, "leaked"));
    assert_true(out_has(&res.stdout_data, "CF_TEST_ALLOWED=passed-through\n"));
    assert_false(out_has(&res.stdout_data, "CF_TEST_UNSET_VAR"));
    assert_true(out_has(&res.stdout_data, "REQ_VAR=from request\n"));
    assert_true(out_has(&res.stdout_data, "PATH=/usr/bin:/bin\n"));
    assert_true(out_has(&res.stdout_data, "CODEFLEET_OUTPUT=/"));
    char home[128];
    snprintf(home, sizeof(home), "HOME=%s/cf-", f->root);
    assert_true(out_has(&res.stdout_data, home));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Invalid names are rejected, not passed on. */
    req_init(&req, CF_LANG_SHELL, "env");
    req_env(&req, "BAD=NAME", "x");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    cf_result_clear(&res);
    cf_request_clear(&req);
    unsetenv("CF_TEST_CANARY");
    unsetenv("CF_TEST_ALLOWED");
}

static void test_structured_io(void **state)
{
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_PYTHON,
             "import json, os\n"
             "d = json.load(open(os.environ['CODEFLEET_INPUT']))\n"
             "json.dump({'sum': sum(d['xs']), 'name': d['name'].upper()}, open(os.environ['CODEFLEET_OUTPUT'], 'w'))\n");
    json_error_t jerr;
    json_t *in = json_loads("{\"xs\": [1, 2, 39], \"name\": \"fleet\"}", 0, &jerr);
    assert_non_null(in);
    cf_error err;
    assert_int_equal(cf_json_to_msgpack(in, &req.input, &err), 0);
    json_decref(in);
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(res.output.len > 0);
    json_t *out = cf_msgpack_to_json(res.output.data, res.output.len, &err);
    assert_non_null(out);
    json_t *expect = json_loads("{\"sum\": 42, \"name\": \"FLEET\"}", 0, &jerr);
    assert_true(json_equal(out, expect));
    json_decref(out);
    json_decref(expect);
    assert_int_equal(res.n_diagnostics, 0);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* No input: CODEFLEET_INPUT is not set; bad output JSON is a
     * diagnostic, not a failure. */
    req_init(&req, CF_LANG_SHELL, "test -z \"$CODEFLEET_INPUT\" && printf '{broken' > \"$CODEFLEET_OUTPUT\"");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(res.output.len, 0);
    assert_int_equal(res.n_diagnostics, 1);
    assert_non_null(strstr(res.diagnostics[0].message, "JSON"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* output.json as a symlink to a host file is not read. */
    req_init(&req, CF_LANG_SHELL, "ln -s /etc/hostname \"$CODEFLEET_OUTPUT\"");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(res.output.len, 0);
    assert_int_equal(res.n_diagnostics, 1);
    assert_non_null(strstr(res.diagnostics[0].message, "symlink"));
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void test_limits(void **state)
{
    fixture *f = *state;
    cf_request req;
    cf_result res;

    /* CPU limit: timeout with the reason. */
    req_init(&req, CF_LANG_SHELL, "while :; do :; done");
    req.policy.cpu_time_us = 1 * SEC;
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_TIMEOUT);
    assert_non_null(strstr(res.reason, "cpu time"));
    /* rusage can read well below what RLIMIT_CPU enforced on a loaded
     * machine (seen: 10 %+ under stress-ng); the worker takes any kill past
     * half the limit as the CPU limit (backends/core/exec.c map_outcome). */
    assert_true(res.cpu_time_us >= 500000);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Wall clock. */
    req_init(&req, CF_LANG_SHELL, "sleep 10");
    req.policy.timeout_us = 200000;
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_TIMEOUT);
    assert_non_null(strstr(res.reason, "wall-clock"));
    assert_true(res.wall_time_us < 2 * SEC);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* File size: the writer dies of SIGXFSZ. */
    req_init(&req, CF_LANG_SHELL, "exec head -c 200000 /dev/zero > big");
    req.policy.max_file_size_bytes = 10000;
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_int_equal(res.signal, SIGXFSZ);
    assert_non_null(strstr(res.reason, "file size"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Memory (address space): a big allocation fails, a small one works. */
    req_init(&req, CF_LANG_PYTHON, "import sys\nx = bytearray(int(sys.argv[1]) << 20)\nprint('allocated')\n");
    const char *big[] = {"600"};
    req_argv(&req, 1, big);
    req.policy.memory_bytes = 200LL << 20;
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_true(out_has(&res.stderr_data, "MemoryError"));
    cf_result_clear(&res);
    free(req.argv[0]);
    req.argv[0] = strdup("20");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "allocated\n"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Output caps. */
    req_init(&req, CF_LANG_SHELL, "head -c 100000 /dev/zero | tr '\\0' a; echo tail >&2");
    req.policy.max_stdout_bytes = 1000;
    req.policy.max_stderr_bytes = 2;
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(res.stdout_data.len, 1000);
    assert_true(res.stdout_truncated);
    assert_true(out_is(&res.stderr_data, "ta"));
    assert_true(res.stderr_truncated);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void test_files(void **state)
{
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_PYTHON, "import helper\nprint(helper.VALUE, open('data/in.txt').read())\n");
    req_file(&req, "helper.py", "VALUE = 'from helper'\n");
    req_file(&req, "data/in.txt", "hello");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "from helper hello\n"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Unsafe paths: rejected, named in the reason, and nothing ran. */
    char marker[128];
    snprintf(marker, sizeof(marker), "/tmp/cf-proctest-marker-%d", (int)getpid());
    unlink(marker);
    const char *bad[] = {"../evil.txt", "/etc/evil", "a//b", "ok/../../x"};
    for (size_t i = 0; i < 4; i++) {
        char code[200];
        snprintf(code, sizeof(code), "touch %s", marker);
        req_init(&req, CF_LANG_SHELL, code);
        req_file(&req, "fine.txt", "x");
        req_file(&req, bad[i], "x");
        assert_int_equal(run(f, 0, &req, &res), 0);
        assert_int_equal(res.status, CF_STATUS_REJECTED);
        assert_non_null(strstr(res.reason, bad[i]));
        assert_int_equal(access(marker, F_OK), -1);
        cf_result_clear(&res);
        cf_request_clear(&req);
    }

    /* The code lives outside the work directory: a request file named
     * like it neither clashes nor replaces it. */
    req_init(&req, CF_LANG_SHELL, "echo hi; cat main.sh; test ! -e input.json");
    req_file(&req, "main.sh", "echo other");
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "hi\necho other"));
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static void test_workdir_removed(void **state)
{
    fixture *f = *state;
    cf_request req;
    cf_result res;
    /* Even after a timeout, with read-only leftovers. */
    req_init(&req, CF_LANG_SHELL, "mkdir -p ro/x; touch ro/x/f; chmod 0500 ro/x ro; pwd; sleep 10");
    req.policy.timeout_us = 1000000; /* room for a loaded machine to get to pwd */
    assert_int_equal(run(f, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_TIMEOUT);
    char dir[256];
    size_t n = res.stdout_data.len < sizeof(dir) ? res.stdout_data.len : sizeof(dir) - 1;
    memcpy(dir, res.stdout_data.data, n);
    dir[n] = '\0';
    char *nl = strchr(dir, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_int_equal(strncmp(dir, f->root, strlen(f->root)), 0);
    assert_int_equal(access(dir, F_OK), -1);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

static bool pid_gone(pid_t pid)
{
    for (int i = 0; i < 100; i++) {
        if (cf_test_pid_dead(pid))
            return true;
        usleep(10000);
    }
    return false;
}

/* A child idling as uid (gid the same), returned once it holds that uid
 * (a pipe, not a sleep: a child still root would prove nothing). */
static pid_t fork_idle_as(uid_t uid)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        if (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
            _exit(3);
        if (write(ready[1], "u", 1) != 1)
            _exit(4);
        close(ready[1]);
        for (;;)
            pause();
    }
    close(ready[1]);
    char got = 0;
    assert_int_equal(read(ready[0], &got, 1), 1);
    close(ready[0]);
    return pid;
}

static void test_per_slot_uid(void **state)
{
    fixture *f = *state;
    if (geteuid() != 0)
        skip();
    fixture g;
    memset(&g, 0, sizeof(g));
    cf_strlcpy(g.root, f->root, sizeof(g.root));
    assert_int_equal(make_set(&g, 61000), 0);
    assert_true(g.be->caps.controls & CF_CTL_MAX_PROCESSES);

    cf_request req;
    cf_result res;
    /* Runs as base+slot, in a work dir it owns; a setsid-escaped
     * grandchild does not survive the execution. */
    req_init(&req, CF_LANG_SHELL, "id -u; id -g; stat -c %u .; touch mine; setsid sleep 30 >/dev/null 2>&1 & echo $!");
    assert_int_equal(run(&g, 1, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    char text[256];
    size_t n = res.stdout_data.len < sizeof(text) - 1 ? res.stdout_data.len : sizeof(text) - 1;
    memcpy(text, res.stdout_data.data, n);
    text[n] = '\0';
    char *save = NULL;
    /* The process backend's block of uids: base + 3 * slots + slot. */
    assert_string_equal(strtok_r(text, "\n", &save), "61007");
    assert_string_equal(strtok_r(NULL, "\n", &save), "61007");
    assert_string_equal(strtok_r(NULL, "\n", &save), "61007");
    pid_t escaped = (pid_t)strtol(strtok_r(NULL, "\n", &save), NULL, 10);
    assert_true(escaped > 1);
    assert_true(pid_gone(escaped));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* A process of the slot's sandbox uid (what its zygote or a warm
     * sandbox runs as) survives a program that kills everything it may,
     * and the clean-up by uid after it. */
    pid_t zyg = fork_idle_as((uid_t)cf_run_uid(61000, 2, CF_UID_BLOCK_SANDBOX, 1));
    req_init(&req, CF_LANG_SHELL, "kill -9 -1; echo done");
    assert_int_equal(run(&g, 1, &req, &res), 0);
    int zst = 0;
    assert_int_equal(waitpid(zyg, &zst, WNOHANG), 0); /* still running */
    kill(zyg, SIGKILL);
    assert_int_equal(waitpid(zyg, &zst, 0), zyg);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* A leftover of the process block (a crashed worker's escaped
     * program) is killed when the backend starts. */
    pid_t left = fork_idle_as((uid_t)cf_run_uid(61000, 2, CF_UID_BLOCK_PROCESS, 0));
    fixture h;
    memset(&h, 0, sizeof(h));
    cf_strlcpy(h.root, f->root, sizeof(h.root));
    assert_int_equal(make_set(&h, 61000), 0);
    assert_int_equal(waitpid(left, &zst, 0), left);
    assert_true(WIFSIGNALED(zst) && WTERMSIG(zst) == SIGKILL);
    cf_backend_set_destroy(h.set);

    /* The stdio pipes are the slot uid's: reopening them by name works. */
    req_init(&req, CF_LANG_SHELL, "cat /dev/stdin; echo x > /dev/stdout; echo y > /dev/stderr");
    cf_bytes_set(&req.stdin_data, "from stdin\n", 11);
    assert_int_equal(run(&g, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "from stdin\nx\n"));
    assert_true(out_is(&res.stderr_data, "y\n"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* max_processes is real for a non-root uid. */
    req_init(&req, CF_LANG_PYTHON,
             "import os, time\nn = 0\ntry:\n    for i in range(40):\n        if os.fork() == 0:\n"
             "            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
             "except OSError:\n    print('limited', n)\n");
    req.policy.max_processes = 5;
    int64_t t0 = cf_mono_us();
    assert_int_equal(run(&g, 0, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_has(&res.stdout_data, "limited"));
    char num[32];
    size_t nn = res.stdout_data.len < sizeof(num) ? res.stdout_data.len : sizeof(num) - 1;
    memcpy(num, res.stdout_data.data, nn);
    num[nn] = '\0';
    long forked = strtol(num + strlen("limited "), NULL, 10);
    assert_true(forked < 5);
    /* The sleeping children were killed, not waited for. */
    assert_true(cf_mono_us() - t0 < 4 * SEC);
    cf_result_clear(&res);
    cf_request_clear(&req);

    cf_backend_set_destroy(g.set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_caps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shell_python_javascript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_isolation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_structured_io, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_workdir_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_slot_uid, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
