/* Python sessions through the fleet (issue 31 parts 1 and 3, SPEC.md
 * section 3.6): a real codefleet-worker, the real broker and Redis.  A
 * cell's variables, functions and classes persist in the session's
 * workspace; what cannot be saved is named; a failing cell changes
 * nothing; a broken state is an error, never an empty namespace; a worker
 * killed between two cells loses nothing; a tenant reaches only its own
 * sessions. */
#include "it_support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_util.h"

#define SEC 1000000LL

typedef struct fleet {
    it_topics t;
    it_worker w;
    char prefix[2][80]; /* the tenants' state prefixes */
    char topic[2][96];  /* their request topics */
    cf_dispatcher *d[2];
    char args[10][200];
    char redis[300];
} fleet;

static const char *const *worker_args(fleet *f)
{
    static const char *v[16];
    size_t n = 0;
    v[n++] = f->redis;
    v[n++] = "--backends=process";
    v[n++] = "--profile.default.backends=process";
    v[n++] = "--profile.default.network=enabled";
    v[n++] = "--workspace-max-file=256KiB"; /* a state past it is not saved */
    for (int i = 0; i < 8; i++)
        v[n++] = f->args[i];
    v[n] = NULL;
    return v;
}

/* Two tenants, each a profile with its own request topic and state prefix. */
static void fleet_start(fleet *f)
{
    memset(f, 0, sizeof(*f));
    it_topics_create(&f->t, "sess", 1);
    snprintf(f->redis, sizeof(f->redis), "--redis=%s", it_redis());
    for (int i = 0; i < 2; i++) {
        char name[64];
        it_unique_name(i ? "sessb" : "sessa", name, sizeof(name));
        snprintf(f->prefix[i], sizeof(f->prefix[i]), "%s.", name);
        snprintf(f->topic[i], sizeof(f->topic[i]), "%s.req", name);
        it_request_topic_create(f->topic[i], 1);
        snprintf(f->args[4 * i], sizeof(f->args[0]), "--profile.%s.topic=%s", name, f->topic[i]);
        snprintf(f->args[4 * i + 1], sizeof(f->args[0]), "--profile.%s.backends=process", name);
        snprintf(f->args[4 * i + 2], sizeof(f->args[0]), "--profile.%s.state-prefix=%s", name, f->prefix[i]);
        /* The process backend cannot take the network away: allow it. */
        snprintf(f->args[4 * i + 3], sizeof(f->args[0]), "--profile.%s.network=enabled", name);
    }
    it_worker_start(&f->w, &f->t, "sess-w1", worker_args(f));
    if (!it_worker_wait_log(&f->w, "reading cancels from", 60000)) {
        it_worker_dump_log(&f->w);
        fail_msg("the worker did not start");
    }
    for (int i = 0; i < 2; i++) {
        it_topics ti = f->t;
        snprintf(ti.requests, sizeof(ti.requests), "%s", f->topic[i]);
        f->d[i] = it_dispatcher_new(&ti);
    }
}

static void fleet_stop(fleet *f)
{
    for (int i = 0; i < 2; i++)
        cf_dispatcher_destroy(f->d[i]);
    assert_int_equal(it_worker_stop(&f->w, SIGTERM, 30000), 0);
}

/* One cell of session s in language lang; the result in *res, its status
 * checked. */
static void cell_in(cf_dispatcher *d, cf_language lang, const char *s, const char *code, cf_status want,
                    cf_result *res)
{
    cf_request req = {0};
    char id[64];
    it_unique_name("cell", id, sizeof(id));
    req.id = strdup(id);
    req.language = lang;
    assert_int_equal(cf_bytes_set(&req.code, code, strlen(code)), 0);
    req.session = strdup(s);
    it_submit_wait(d, &req, 120 * SEC, res);
    cf_request_clear(&req);
    if (res->status != want)
        fail_msg("cell '%s': status %s (want %s), reason: %s, stderr: %.*s", code, cf_status_name(res->status),
                 cf_status_name(want), res->reason ? res->reason : "-", (int)res->stderr_data.len,
                 (const char *)res->stderr_data.data);
}

static void cell(cf_dispatcher *d, const char *s, const char *code, cf_status want, cf_result *res)
{
    cell_in(d, CF_LANG_PYTHON, s, code, want, res);
}

static bool has(const cf_bytes *b, const char *needle)
{
    return b->data && memmem(b->data, b->len, needle, strlen(needle)) != NULL;
}

static void assert_stdout(const cf_result *res, const char *want)
{
    if (res->stdout_data.len != strlen(want) || memcmp(res->stdout_data.data, want, strlen(want)) != 0)
        fail_msg("stdout '%.*s', want '%s'", (int)res->stdout_data.len, (const char *)res->stdout_data.data, want);
}

/* Fifty cells build on each other: numbers, a function, a class instance
 * and a module, each restored by the next cell; the last expression's
 * value is printed as the REPL does. */
static void variables_survive_fifty_cells(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char s[128];
    snprintf(s, sizeof(s), "%snotebook", f.prefix[0]);
    cf_result res = {0};
    cell(f.d[0], s,
         "import json as j\nn = 0\ndef bump(k):\n    return k + 1\nclass Box:\n    def __init__(self):\n"
         "        self.v = []\nbox = Box()\nsame = box.v\n",
         CF_STATUS_SUCCESS, &res);
    assert_int_equal(res.session_cell, 1);
    assert_false(res.session_restored);
    assert_int_equal(res.n_session_lost, 0);
    assert_true(res.workspace_revision > 0);
    cf_result_clear(&res);
    for (int i = 2; i <= 50; i++) {
        cell(f.d[0], s, "n = bump(n)\nbox.v.append(n)\n", CF_STATUS_SUCCESS, &res);
        assert_int_equal(res.session_cell, i);
        assert_true(res.session_restored);
        assert_int_equal(res.n_session_lost, 0);
        cf_result_clear(&res);
    }
    cell(f.d[0], s, "print(n, len(box.v), box.v is same, j.dumps(box.v[:2]))\nn * 2", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "49 49 True [1, 2]\n98\n");
    assert_int_equal(res.session_cell, 51);
    assert_true(res.session_restored);
    cf_result_clear(&res);

    /* Restored functions read and set the namespace the cells see, and a
     * module of the workspace's own imports again on the next cell. */
    cell(f.d[0], s,
         "def get():\n    return n\ndef bump_n():\n    global n\n    n += 100\nimport os, sys\n"
         "os.makedirs('lib', exist_ok=True)\nopen('lib/helper.py', 'w').write('def hi():\\n    return \"hi\"\\n')\n"
         "sys.path.insert(0, 'lib')\nimport helper\n",
         CF_STATUS_SUCCESS, &res);
    cf_result_clear(&res);
    cell(f.d[0], s, "n = 1\nbump_n()\nprint(get(), n, helper.hi())", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "101 101 hi\n");
    cf_result_clear(&res);
    /* A name bound by reference to that module (from ... import) loads
     * again too: the session's sys.path comes back before the names. */
    cell(f.d[0], s, "from helper import hi as greet", CF_STATUS_SUCCESS, &res);
    cf_result_clear(&res);
    cell(f.d[0], s, "greet()", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "'hi'\n");
    cf_result_clear(&res);
    /* A last value without a form on the wire (an int past 64 bits) is
     * printed, not the output, and does not fail the cell. */
    cell(f.d[0], s, "2 ** 64", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "18446744073709551616\n");
    assert_int_equal(res.output.len, 0);
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* Rich outputs (issue 31 part 5): numpy and pandas import, a matplotlib
 * figure comes back as a PNG file of the result, and a last expression
 * with a JSON form is the result's output besides its repr on stdout. */
static void figures_and_values_come_back(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char s[128];
    snprintf(s, sizeof(s), "%splots", f.prefix[0]);
    cf_result res = {0};
    cell(f.d[0], s,
         "import numpy as np, pandas as pd, matplotlib.pyplot as plt\n"
         "df = pd.DataFrame({'x': np.arange(10)})\nplt.plot(df.x, df.x ** 2)\n{'total': int(df.x.sum())}",
         CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "{'total': 45}\n");
    assert_int_equal(res.n_files, 1);
    assert_string_equal(res.files[0].path, "figure-1.png");
    assert_true(res.files[0].content.len > 1000);
    assert_int_equal(res.files[0].size, (int64_t)res.files[0].content.len);
    assert_memory_equal(res.files[0].content.data, "\x89PNG\r\n\x1a\n", 8);
    /* {"total": 45} in msgpack */
    assert_int_equal(res.output.len, 8);
    assert_memory_equal(res.output.data, "\x81\xa5total\x2d", 8);
    cf_result_clear(&res);
    /* The figure was shown once: the next cell has none; the frame stays. */
    cell(f.d[0], s, "len(df)", CF_STATUS_SUCCESS, &res);
    assert_int_equal(res.n_files, 0);
    assert_stdout(&res, "10\n");
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* A lock cannot be pickled: the cell succeeds, the result names it (and a
 * warning says why), the next cell has everything else. */
static void what_cannot_be_saved_is_named(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char s[128];
    snprintf(s, sizeof(s), "%slocks", f.prefix[0]);
    cf_result res = {0};
    cell(f.d[0], s, "import threading\nlock = threading.Lock()\nkeep = 7\n", CF_STATUS_SUCCESS, &res);
    assert_int_equal(res.n_session_lost, 1);
    assert_string_equal(res.session_lost[0], "lock");
    bool warned = false;
    for (size_t i = 0; i < res.n_diagnostics; i++)
        warned |= res.diagnostics[i].message && strstr(res.diagnostics[i].message, "'lock' was not saved") &&
                  strstr(res.diagnostics[i].message, "cannot pickle '_thread.lock' object");
    assert_true(warned);
    cf_result_clear(&res);
    cell(f.d[0], s, "print(keep, 'lock' in dir())", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "7 False\n");
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* A cell that raises is failed with the traceback of the cell's own lines
 * and saves nothing; a state file that does not load is an explicit
 * error, not a fresh session. */
static void a_failing_cell_changes_nothing_and_a_broken_state_is_an_error(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char s[128];
    snprintf(s, sizeof(s), "%sfragile", f.prefix[0]);
    cf_result res = {0};
    cell(f.d[0], s, "x = 1\n", CF_STATUS_SUCCESS, &res);
    cf_result_clear(&res);
    cell(f.d[0], s, "x = 2\nopen('made.txt', 'w').write('1')\nraise ValueError('no')\n", CF_STATUS_FAILED, &res);
    assert_non_null(res.stderr_data.data);
    assert_true(has(&res.stderr_data, "File \"<cell>\", line 3"));
    assert_false(has(&res.stderr_data, "__codefleet"));
    assert_non_null(strstr(res.reason, "ValueError: no"));
    cf_result_clear(&res);
    cell(f.d[0], s, "import os\nprint(x, os.path.exists('made.txt'))", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "1 False\n");
    cf_result_clear(&res);

    /* A cell that leaves without the driver (os._exit) keeps nothing:
     * neither its names nor its files. */
    cell(f.d[0], s, "x = 3\nopen('exited.txt', 'w').write('1')\nimport os\nos._exit(0)\n", CF_STATUS_FAILED, &res);
    assert_non_null(strstr(res.reason, "ended without the session driver"));
    cf_result_clear(&res);
    cell(f.d[0], s, "import os\nprint(x, os.path.exists('exited.txt'))", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "1 False\n");
    cf_result_clear(&res);

    /* A state past workspace-max-file: the cell ran, nothing of it stays. */
    cell(f.d[0], s, "big = 'x' * 400000\nopen('also.txt', 'w').write('1')\nx = 5\n", CF_STATUS_FAILED, &res);
    assert_non_null(strstr(res.reason, "the cell ran, but nothing of it was saved"));
    cf_result_clear(&res);
    cell(f.d[0], s, "import os\nprint(x, 'big' in dir(), os.path.exists('also.txt'))", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "1 False False\n");
    cf_result_clear(&res);

    /* The state is a workspace file like any other: overwrite it. */
    cf_request req = {0};
    req.id = strdup("sess-break-state");
    req.workspace = strdup(s);
    req.workspace_op = calloc(1, sizeof(*req.workspace_op));
    req.workspace_op->op = CF_WS_OP_WRITE;
    char path[300];
    snprintf(path, sizeof(path), "%s/%s.python", CF_SESSION_STATE_DIR, s);
    req.workspace_op->path = strdup(path);
    assert_int_equal(cf_bytes_set(&req.workspace_op->content, "not a pickle", 12), 0);
    req.workspace_op->has_content = true;
    it_submit_wait(f.d[0], &req, 60 * SEC, &res);
    cf_request_clear(&req);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    cell(f.d[0], s, "print('ran')\n", CF_STATUS_FAILED, &res);
    assert_non_null(strstr(res.reason, "cannot be restored"));
    assert_int_equal(res.stdout_data.len, 0);
    assert_int_equal(res.session_cell, 0);
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* The session lives in Redis, not in the worker: SIGKILL the worker
 * between two cells and the next cell, on a new worker, has the state and
 * says it was restored. */
static void a_killed_worker_loses_nothing(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char s[128];
    snprintf(s, sizeof(s), "%ssurvivor", f.prefix[0]);
    cf_result res = {0};
    cell(f.d[0], s, "secret = 1234\nsquare = lambda v: v * v\n", CF_STATUS_SUCCESS, &res);
    cf_result_clear(&res);
    it_worker_stop(&f.w, SIGKILL, 30000);
    it_worker_start(&f.w, &f.t, "sess-w2", worker_args(&f));
    cell(f.d[0], s, "square(secret)", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "1522756\n");
    assert_true(res.session_restored);
    assert_int_equal(res.session_cell, 2);
    assert_string_equal(res.meta.worker, "sess-w2");
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* A shell session keeps its working directory, exported and plain
 * variables and functions; the environment reaches its children; a
 * failing cell saves nothing. */
static void a_shell_session_keeps_dir_variables_and_functions(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char s[128];
    snprintf(s, sizeof(s), "%sterm", f.prefix[0]);
    cf_result res = {0};
    cell_in(f.d[0], CF_LANG_SHELL, s,
            "x=41\nexport GREETING='hello there'\nsay() { echo \"$GREETING $1\"; }\nmkdir -p src/lib && cd src/lib\n",
            CF_STATUS_SUCCESS, &res);
    assert_int_equal(res.session_cell, 1);
    cf_result_clear(&res);
    cell_in(f.d[0], CF_LANG_SHELL, s, "say $x\nbasename \"$PWD\"\nsh -c 'echo child: $GREETING'\n",
            CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "hello there 41\nlib\nchild: hello there\n");
    assert_true(res.session_restored);
    assert_int_equal(res.session_cell, 2);
    cf_result_clear(&res);
    cell_in(f.d[0], CF_LANG_SHELL, s, "x=1\ncd /\nfalse\n", CF_STATUS_FAILED, &res);
    cf_result_clear(&res);
    cell_in(f.d[0], CF_LANG_SHELL, s, "echo $x; basename \"$PWD\"", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "41\nlib\n");
    cf_result_clear(&res);
    /* What the cell leaves for the driver (IFS, functions named like the
     * commands it uses) does not stop the save. */
    cell_in(f.d[0], CF_LANG_SHELL, s,
            "y=2\nIFS=,\nset -Cu\ncd() { echo no; }\nmv() { :; }\nmkdir() { :; }\nprintf() { :; }\n",
            CF_STATUS_SUCCESS, &res);
    cf_result_clear(&res);
    cell_in(f.d[0], CF_LANG_SHELL, s, "echo $x $y; say y", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "41 2\nhello there y\n");
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* Tenant b names tenant a's session, directly or as the workspace of a
 * session of its own: both rejected, and tenant a's state is untouched. */
static void a_tenant_reaches_only_its_own_sessions(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char s[128], mine[128];
    snprintf(s, sizeof(s), "%sprivate", f.prefix[0]);
    snprintf(mine, sizeof(mine), "%smine", f.prefix[1]);
    cf_result res = {0};
    cell(f.d[0], s, "token = 's3cret'\n", CF_STATUS_SUCCESS, &res);
    cf_result_clear(&res);
    cell(f.d[1], s, "print(token)\ntoken = 'stolen'\n", CF_STATUS_REJECTED, &res);
    assert_non_null(strstr(res.reason, "does not start with"));
    cf_result_clear(&res);

    cf_request req = {0};
    req.id = strdup("sess-foreign-ws");
    req.language = CF_LANG_PYTHON;
    assert_int_equal(cf_bytes_set(&req.code, "print(token)\n", 13), 0);
    req.session = strdup(mine);
    req.workspace = strdup(s);
    it_submit_wait(f.d[1], &req, 60 * SEC, &res);
    cf_request_clear(&req);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "does not start with"));
    assert_int_equal(res.stdout_data.len, 0);
    cf_result_clear(&res);

    cell(f.d[0], s, "token", CF_STATUS_SUCCESS, &res);
    assert_stdout(&res, "'s3cret'\n");
    cf_result_clear(&res);
    fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(variables_survive_fifty_cells),
        cmocka_unit_test(what_cannot_be_saved_is_named),
        cmocka_unit_test(figures_and_values_come_back),
        cmocka_unit_test(a_failing_cell_changes_nothing_and_a_broken_state_is_an_error),
        cmocka_unit_test(a_killed_worker_loses_nothing),
        cmocka_unit_test(a_shell_session_keeps_dir_variables_and_functions),
        cmocka_unit_test(a_tenant_reaches_only_its_own_sessions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
