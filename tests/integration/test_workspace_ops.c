/* Workspace operations through the fleet (issue 31 part 4, SPEC.md
 * section 3.5): a real codefleet-worker, the real broker and Redis.  The
 * worker does each op under the profile of the topic it came on, so a
 * tenant reaches its own workspaces, and only those, with no Redis user. */
#include "it_support.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_redis.h"
#include "cf_util.h"
#include "cf_workspace.h"
#include "worker_state_int.h"

#define SEC 1000000LL

typedef struct fleet {
    it_topics t;
    it_worker w;
    char prefix[2][80];   /* the tenants' state prefixes ("wsopa-....") */
    char topic[2][96];    /* their request topics */
    cf_dispatcher *d[2];  /* a client on each tenant's topic */
} fleet;

/* Two tenants, each a profile with its own request topic and state
 * prefix; tenant 0's workspaces are held to 64 KiB, tenant 1's files to
 * 2 MiB. */
static void fleet_start(fleet *f)
{
    memset(f, 0, sizeof(*f));
    it_topics_create(&f->t, "wsops", 1);
    static char a_redis[300], a[10][200];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    for (int i = 0; i < 2; i++) {
        char name[64];
        it_unique_name(i ? "wsopb" : "wsopa", name, sizeof(name));
        snprintf(f->prefix[i], sizeof(f->prefix[i]), "%s.", name);
        snprintf(f->topic[i], sizeof(f->topic[i]), "%s.req", name);
        it_request_topic_create(f->topic[i], 1);
        snprintf(a[5 * i], sizeof(a[0]), "--profile.%s.topic=%s", name, f->topic[i]);
        snprintf(a[5 * i + 1], sizeof(a[0]), "--profile.%s.backends=process", name);
        snprintf(a[5 * i + 2], sizeof(a[0]), "--profile.%s.state-prefix=%s", name, f->prefix[i]);
        snprintf(a[5 * i + 3], sizeof(a[0]), i ? "--profile.%s.network=enabled" : "--profile.%s.max-workspace-bytes=64KiB",
                 name);
        snprintf(a[5 * i + 4], sizeof(a[0]), i ? "--profile.%s.max-file-size=2MiB" : "--profile.%s.weight=1", name);
    }
    const char *extra[] = {a_redis, "--backends=process", "--profile.default.backends=process",
                           "--profile.default.network=enabled", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                           a[8], a[9], NULL};
    it_worker_start(&f->w, &f->t, "wsops-w1", extra);
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

static cf_workspace_op *op_request(cf_request *req, const char *ws, cf_ws_op op, const char *path)
{
    memset(req, 0, sizeof(*req));
    char id[64];
    it_unique_name("op", id, sizeof(id));
    req->id = strdup(id);
    req->workspace = strdup(ws);
    req->workspace_op = calloc(1, sizeof(*req->workspace_op));
    req->workspace_op->op = op;
    if (path)
        req->workspace_op->path = strdup(path);
    return req->workspace_op;
}

static void set_bytes(cf_bytes *b, const char *s)
{
    assert_int_equal(cf_bytes_set(b, s, strlen(s)), 0);
}

/* An op that carries content: a write of path, or a patch (path NULL). */
static cf_workspace_op *content_request(cf_request *req, const char *ws, cf_ws_op op, const char *path,
                                        const char *content)
{
    cf_workspace_op *o = op_request(req, ws, op, path);
    set_bytes(&o->content, content);
    o->has_content = true;
    return o;
}

/* Submits, waits, and checks the status (the reason shown when not). */
static void run_op(cf_dispatcher *d, cf_request *req, cf_result *res, cf_status want, const char *what)
{
    it_submit_wait(d, req, 60 * SEC, res);
    if (res->status != want)
        fail_msg("%s: status %s (want %s), reason: %s", what, cf_status_name(res->status), cf_status_name(want),
                 res->reason ? res->reason : "-");
    cf_request_clear(req);
}

static void assert_reason(const cf_result *res, const char *needle)
{
    if (!res->reason || !strstr(res->reason, needle))
        fail_msg("reason '%s' does not say '%s'", res->reason ? res->reason : "(none)", needle);
}

static void assert_content(const cf_result *res, const char *path, const char *want)
{
    assert_int_equal(res->n_files, 1);
    assert_string_equal(res->files[0].path, path);
    assert_int_equal(res->files[0].size, (int64_t)strlen(want));
    assert_false(res->files[0].listed);
    if (res->files[0].content.len != strlen(want) || memcmp(res->files[0].content.data, want, strlen(want)) != 0)
        fail_msg("%s holds '%.*s', not '%s'", path, (int)res->files[0].content.len,
                 (const char *)res->files[0].content.data, want);
}

/* Every op, its answers and its errors, in order with a program's run on
 * the same workspace. */
static void every_op_through_the_fleet(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    cf_dispatcher *d = f.d[1];
    char ws[128];
    snprintf(ws, sizeof(ws), "%sproject", f.prefix[1]);
    cf_request req;
    cf_result res;
    cf_workspace_op *o;

    /* A read of a workspace that does not exist creates nothing. */
    op_request(&req, ws, CF_WS_OP_READ, "a.py");
    run_op(d, &req, &res, CF_STATUS_REJECTED, "read before any write");
    assert_reason(&res, "does not exist");
    cf_result_clear(&res);

    o = content_request(&req, ws, CF_WS_OP_WRITE, "src/a.py", "x = 1\nprint(x)\n");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "write");
    assert_int_equal(res.workspace_revision, 1);
    assert_int_equal(res.n_changed_paths, 1);
    assert_string_equal(res.changed_paths[0], "src/a.py");
    cf_result_clear(&res);

    o = content_request(&req, ws, CF_WS_OP_WRITE, "README.md", "hello\nworld\n");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "second write");
    assert_int_equal(res.workspace_revision, 2);
    cf_result_clear(&res);

    /* The same bytes again: no new revision. */
    o = content_request(&req, ws, CF_WS_OP_WRITE, "README.md", "hello\nworld\n");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "same bytes");
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.n_changed_paths, 0);
    cf_result_clear(&res);

    /* list: paths and sizes, no content; a pattern narrows it. */
    op_request(&req, ws, CF_WS_OP_LIST, NULL);
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "list");
    assert_int_equal(res.n_files, 2);
    assert_string_equal(res.files[0].path, "README.md");
    assert_int_equal(res.files[0].size, 12);
    assert_true(res.files[0].listed);
    assert_int_equal(res.files[0].content.len, 0);
    assert_int_equal(res.workspace_revision, 2);
    cf_result_clear(&res);
    o = op_request(&req, ws, CF_WS_OP_LIST, NULL);
    o->pattern = strdup("**/*.py");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "list **/*.py");
    assert_int_equal(res.n_files, 1);
    assert_string_equal(res.files[0].path, "src/a.py");
    cf_result_clear(&res);

    /* read, whole and cut at the request's output cap. */
    op_request(&req, ws, CF_WS_OP_READ, "src/a.py");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "read");
    assert_content(&res, "src/a.py", "x = 1\nprint(x)\n");
    cf_result_clear(&res);
    op_request(&req, ws, CF_WS_OP_READ, "src/a.py");
    req.policy.max_stdout_bytes = 5;
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "read, capped");
    assert_int_equal(res.files[0].size, 15);
    assert_int_equal(res.files[0].content.len, 5);
    assert_true(res.files[0].truncated);
    assert_true(res.files_truncated);
    cf_result_clear(&res);

    /* grep: path:line:text of every line holding the text. */
    o = op_request(&req, ws, CF_WS_OP_GREP, NULL);
    o->pattern = strdup("x");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "grep");
    const char *want = "src/a.py:1:x = 1\nsrc/a.py:2:print(x)\n";
    assert_int_equal(res.stdout_data.len, strlen(want));
    assert_memory_equal(res.stdout_data.data, want, strlen(want));
    cf_result_clear(&res);

    /* str_replace: exactly one occurrence, or nothing written. */
    o = op_request(&req, ws, CF_WS_OP_STR_REPLACE, "src/a.py");
    set_bytes(&o->old_str, "x");
    set_bytes(&o->new_str, "y");
    o->has_new_str = true;
    run_op(d, &req, &res, CF_STATUS_FAILED, "str_replace, twice");
    assert_reason(&res, "occurs 2 times in src/a.py (lines 1, 2)");
    assert_int_equal(res.workspace_revision, 2);
    cf_result_clear(&res);
    o = op_request(&req, ws, CF_WS_OP_STR_REPLACE, "src/a.py");
    set_bytes(&o->old_str, "absent");
    set_bytes(&o->new_str, "y");
    o->has_new_str = true;
    run_op(d, &req, &res, CF_STATUS_FAILED, "str_replace, absent");
    assert_reason(&res, "does not occur in src/a.py");
    cf_result_clear(&res);
    o = op_request(&req, ws, CF_WS_OP_STR_REPLACE, "src/a.py");
    set_bytes(&o->old_str, "x = 1");
    set_bytes(&o->new_str, "x = 41");
    o->has_new_str = true;
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "str_replace");
    assert_int_equal(res.workspace_revision, 3);
    cf_result_clear(&res);

    /* insert: whole lines after insert_line; past the end is refused. */
    o = op_request(&req, ws, CF_WS_OP_INSERT, "README.md");
    o->insert_line = 1;
    o->has_insert_line = true;
    set_bytes(&o->new_str, "inserted");
    o->has_new_str = true;
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "insert");
    assert_int_equal(res.workspace_revision, 4);
    cf_result_clear(&res);
    o = op_request(&req, ws, CF_WS_OP_INSERT, "README.md");
    o->insert_line = 9;
    o->has_insert_line = true;
    set_bytes(&o->new_str, "late");
    o->has_new_str = true;
    run_op(d, &req, &res, CF_STATUS_FAILED, "insert past the end");
    assert_reason(&res, "past the end of README.md (3 line(s))");
    cf_result_clear(&res);

    /* A program on the workspace sees the ops' changes, in order. */
    it_request_init(&req, CF_LANG_SHELL, "cat README.md src/a.py");
    req.workspace = strdup(ws);
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "a run after the ops");
    want = "hello\ninserted\nworld\nx = 41\nprint(x)\n";
    assert_int_equal(res.stdout_data.len, strlen(want));
    assert_memory_equal(res.stdout_data.data, want, strlen(want));
    cf_result_clear(&res);

    /* expected_revision: compare-and-set. */
    o = op_request(&req, ws, CF_WS_OP_DELETE, "README.md");
    o->expected_revision = 1;
    o->has_expected_revision = true;
    run_op(d, &req, &res, CF_STATUS_FAILED, "delete at a stale revision");
    assert_true(res.workspace_conflict);
    assert_reason(&res, "not the expected 1");
    assert_int_equal(res.workspace_revision, 4);
    cf_result_clear(&res);
    o = op_request(&req, ws, CF_WS_OP_DELETE, "README.md");
    o->expected_revision = 4;
    o->has_expected_revision = true;
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "delete");
    assert_int_equal(res.workspace_revision, 5);
    cf_result_clear(&res);
    op_request(&req, ws, CF_WS_OP_READ, "README.md");
    run_op(d, &req, &res, CF_STATUS_FAILED, "read of a deleted file");
    assert_reason(&res, "no file README.md");
    cf_result_clear(&res);

    /* A str_replace that changes no byte makes no revision. */
    o = op_request(&req, ws, CF_WS_OP_STR_REPLACE, "src/a.py");
    set_bytes(&o->old_str, "x = 41");
    set_bytes(&o->new_str, "x = 41");
    o->has_new_str = true;
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "str_replace by itself");
    assert_int_equal(res.workspace_revision, 5);
    assert_int_equal(res.n_changed_paths, 0);
    cf_result_clear(&res);

    /* A file and a directory of one name: refused, nothing written. */
    o = content_request(&req, ws, CF_WS_OP_WRITE, "src/a.py/inner", "x");
    run_op(d, &req, &res, CF_STATUS_FAILED, "a file under a file");
    assert_reason(&res, "cannot be both a file and a directory");
    assert_int_equal(res.workspace_revision, 5);
    cf_result_clear(&res);
    o = content_request(&req, ws, CF_WS_OP_WRITE, "src", "x");
    run_op(d, &req, &res, CF_STATUS_FAILED, "a file over a directory");
    assert_reason(&res, "cannot be both a file and a directory");
    cf_result_clear(&res);

    /* Only write and apply_patch create a workspace; the others on a
     * missing one are refused and create nothing (a read after says so). */
    char missing[160];
    snprintf(missing, sizeof(missing), "%snot-there", f.prefix[1]);
    static const cf_ws_op no_create[] = {CF_WS_OP_DELETE, CF_WS_OP_STR_REPLACE, CF_WS_OP_INSERT};
    for (size_t i = 0; i < sizeof(no_create) / sizeof(no_create[0]); i++) {
        o = op_request(&req, missing, no_create[i], "a.txt");
        if (no_create[i] == CF_WS_OP_STR_REPLACE)
            set_bytes(&o->old_str, "x");
        if (no_create[i] != CF_WS_OP_DELETE) {
            set_bytes(&o->new_str, "y");
            o->has_new_str = true;
        }
        if (no_create[i] == CF_WS_OP_INSERT)
            o->has_insert_line = true;
        run_op(d, &req, &res, CF_STATUS_REJECTED, cf_ws_op_name(no_create[i]));
        assert_reason(&res, "does not exist");
        cf_result_clear(&res);
    }
    o = content_request(&req, missing, CF_WS_OP_WRITE, "a.txt", "x");
    o->expected_revision = 3;
    o->has_expected_revision = true;
    run_op(d, &req, &res, CF_STATUS_REJECTED, "a write at revision 3 of a missing workspace");
    cf_result_clear(&res);
    op_request(&req, missing, CF_WS_OP_LIST, NULL);
    run_op(d, &req, &res, CF_STATUS_REJECTED, "the missing workspace is still missing");
    assert_reason(&res, "does not exist");
    cf_result_clear(&res);

    /* Paths by the store's rules. */
    op_request(&req, ws, CF_WS_OP_READ, "../etc/passwd");
    run_op(d, &req, &res, CF_STATUS_REJECTED, "a path out of the workspace");
    assert_reason(&res, "workspace_op.path");
    cf_result_clear(&res);
    o = content_request(&req, ws, CF_WS_OP_WRITE, "/etc/x", "x");
    run_op(d, &req, &res, CF_STATUS_REJECTED, "an absolute path");
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* A tenant reaches its own workspaces only: every op on another tenant's
 * is refused by its topic's profile, and that workspace does not change. */
static void tenants_reach_only_their_own_workspaces(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char theirs[128];
    snprintf(theirs, sizeof(theirs), "%ssecret", f.prefix[1]);
    cf_request req;
    cf_result res;
    cf_workspace_op *o = content_request(&req, theirs, CF_WS_OP_WRITE, "key.txt", "s3cret");
    run_op(f.d[1], &req, &res, CF_STATUS_SUCCESS, "the owner's write");
    cf_result_clear(&res);
    for (int op = CF_WS_OP_LIST; op < CF_WS_OP__COUNT; op++) {
        bool no_path = op == CF_WS_OP_LIST || op == CF_WS_OP_GREP || op == CF_WS_OP_APPLY_PATCH;
        o = op_request(&req, theirs, (cf_ws_op)op, no_path ? NULL : "key.txt");
        if (op == CF_WS_OP_GREP)
            o->pattern = strdup("s3");
        if (op == CF_WS_OP_WRITE) {
            set_bytes(&o->content, "mine now");
            o->has_content = true;
        }
        if (op == CF_WS_OP_APPLY_PATCH) {
            set_bytes(&o->content, "*** Begin Patch\n*** Delete File: key.txt\n*** End Patch\n");
            o->has_content = true;
        }
        if (op == CF_WS_OP_STR_REPLACE)
            set_bytes(&o->old_str, "s3");
        if (op == CF_WS_OP_STR_REPLACE || op == CF_WS_OP_INSERT) {
            set_bytes(&o->new_str, "x");
            o->has_new_str = true;
        }
        if (op == CF_WS_OP_INSERT)
            o->has_insert_line = true;
        char what[80];
        snprintf(what, sizeof(what), "another tenant's %s", cf_ws_op_name((cf_ws_op)op));
        run_op(f.d[0], &req, &res, CF_STATUS_REJECTED, what);
        assert_reason(&res, "does not start with");
        assert_int_equal(res.n_files, 0);
        assert_int_equal(res.stdout_data.len, 0);
        cf_result_clear(&res);
    }
    /* Untouched: still its first revision, with its bytes. */
    op_request(&req, theirs, CF_WS_OP_READ, "key.txt");
    run_op(f.d[1], &req, &res, CF_STATUS_SUCCESS, "the owner's read");
    assert_int_equal(res.workspace_revision, 1);
    assert_content(&res, "key.txt", "s3cret");
    cf_result_clear(&res);
    fleet_stop(&f);
}

/* A write is charged to the tenant's workspace quota like a run's: one
 * that would pass it fails, naming the quota, and nothing is written. */
static void a_write_over_the_quota_is_refused(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char ws[128];
    snprintf(ws, sizeof(ws), "%sbig", f.prefix[0]);
    size_t n = 100 * 1024;
    char *big = malloc(n + 1);
    memset(big, 'a', n);
    big[n] = '\0';
    cf_request req;
    cf_result res;
    content_request(&req, ws, CF_WS_OP_WRITE, "small", "fits");
    run_op(f.d[0], &req, &res, CF_STATUS_SUCCESS, "a small write");
    assert_int_equal(res.workspace_revision, 1);
    cf_result_clear(&res);
    content_request(&req, ws, CF_WS_OP_WRITE, "big", big);
    run_op(f.d[0], &req, &res, CF_STATUS_FAILED, "100 KiB over a 64 KiB quota");
    assert_reason(&res, "max-workspace-bytes");
    assert_int_equal(res.workspace_revision, 1);
    assert_int_equal(res.n_changed_paths, 0);
    cf_result_clear(&res);
    op_request(&req, ws, CF_WS_OP_LIST, NULL);
    run_op(f.d[0], &req, &res, CF_STATUS_SUCCESS, "list after the refusal");
    assert_int_equal(res.n_files, 1);
    assert_string_equal(res.files[0].path, "small");
    cf_result_clear(&res);
    free(big);
    fleet_stop(&f);
}


/* What an op writes is held to the profile's max-file-size, as what a
 * program writes is: a write, a str_replace that grows a file past it and
 * a patch that adds one are refused and change nothing; exactly the cap
 * is fine. */
static void ops_are_held_to_max_file_size(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char ws[128];
    snprintf(ws, sizeof(ws), "%scap", f.prefix[1]);
    enum { CAP = 2 * 1024 * 1024 };
    char *at_cap = malloc(CAP + 1), *over = malloc(CAP + 2);
    memset(at_cap, 'a', CAP);
    at_cap[0] = 'X'; /* one place for the str_replace below */
    at_cap[CAP] = '\0';
    memset(over, 'b', CAP + 1);
    over[CAP + 1] = '\0';
    cf_request req;
    cf_result res;
    content_request(&req, ws, CF_WS_OP_WRITE, "fits", at_cap);
    run_op(f.d[1], &req, &res, CF_STATUS_SUCCESS, "a write of exactly max-file-size");
    assert_int_equal(res.workspace_revision, 1);
    cf_result_clear(&res);
    content_request(&req, ws, CF_WS_OP_WRITE, "over", over);
    run_op(f.d[1], &req, &res, CF_STATUS_FAILED, "a write one byte over max-file-size");
    assert_reason(&res, "over max-file-size (2097152 bytes");
    assert_int_equal(res.workspace_revision, 1);
    cf_result_clear(&res);
    cf_workspace_op *o = op_request(&req, ws, CF_WS_OP_STR_REPLACE, "fits");
    set_bytes(&o->old_str, "X");
    set_bytes(&o->new_str, "XY");
    o->has_new_str = true;
    run_op(f.d[1], &req, &res, CF_STATUS_FAILED, "a str_replace that grows a file past max-file-size");
    assert_reason(&res, "max-file-size");
    cf_result_clear(&res);
    char *patch = malloc(CAP + 80);
    snprintf(patch, CAP + 80, "*** Begin Patch\n*** Add File: added\n+%s\n*** End Patch\n", over);
    content_request(&req, ws, CF_WS_OP_APPLY_PATCH, NULL, patch);
    run_op(f.d[1], &req, &res, CF_STATUS_FAILED, "a patch adding a file past max-file-size");
    assert_reason(&res, "apply_patch: added would be");
    cf_result_clear(&res);
    op_request(&req, ws, CF_WS_OP_LIST, NULL);
    run_op(f.d[1], &req, &res, CF_STATUS_SUCCESS, "list after the refusals");
    assert_int_equal(res.workspace_revision, 1);
    assert_int_equal(res.n_files, 1);
    assert_string_equal(res.files[0].path, "fits");
    assert_int_equal(res.files[0].size, CAP);
    cf_result_clear(&res);
    free(patch);
    free(at_cap);
    free(over);
    fleet_stop(&f);
}

/* A read of some lines (a big file read in parts): each line with its
 * newline, the last line without one as it is, past the end clipped;
 * a first line past the end is a failure that says how many there are;
 * and the CLI's cat FIRST:LAST. */
static void a_read_of_some_lines(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char ws[128];
    snprintf(ws, sizeof(ws), "%slines", f.prefix[0]);
    cf_request req;
    cf_result res;
    content_request(&req, ws, CF_WS_OP_WRITE, "five.txt", "l1\nl2\nl3\nl4\nl5");
    run_op(f.d[0], &req, &res, CF_STATUS_SUCCESS, "write five lines");
    cf_result_clear(&res);
    static const struct {
        int64_t first, last; /* 0: absent */
        const char *want;
    } reads[] = {{2, 3, "l2\nl3\n"}, {4, 0, "l4\nl5"}, {0, 1, "l1\n"}, {5, 99, "l5"}, {3, 3, "l3\n"}};
    for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
        cf_workspace_op *o = op_request(&req, ws, CF_WS_OP_READ, "five.txt");
        o->first_line = reads[i].first;
        o->has_first_line = reads[i].first > 0;
        o->last_line = reads[i].last;
        o->has_last_line = reads[i].last > 0;
        run_op(f.d[0], &req, &res, CF_STATUS_SUCCESS, "a read of some lines");
        assert_int_equal(res.n_files, 1);
        assert_int_equal(res.files[0].size, 14); /* the whole file's */
        assert_false(res.files[0].truncated);
        if (res.files[0].content.len != strlen(reads[i].want) ||
            memcmp(res.files[0].content.data, reads[i].want, strlen(reads[i].want)) != 0)
            fail_msg("read %zu: '%.*s', not '%s'", i, (int)res.files[0].content.len,
                     (const char *)res.files[0].content.data, reads[i].want);
        cf_result_clear(&res);
    }
    cf_workspace_op *o = op_request(&req, ws, CF_WS_OP_READ, "five.txt");
    o->first_line = 6;
    o->has_first_line = true;
    run_op(f.d[0], &req, &res, CF_STATUS_FAILED, "a first line past the end");
    assert_reason(&res, "five.txt has 5 line(s): first_line 6 is past its end");
    cf_result_clear(&res);
    char tmp[] = "/tmp/cf-it-lines-XXXXXX", out[4096], err[4096];
    assert_non_null(mkdtemp(tmp));
    char topic[160], result_topic[160];
    snprintf(topic, sizeof(topic), "--request-topic=%s", f.topic[0]);
    snprintf(result_topic, sizeof(result_topic), "--result-topic=%s", f.t.results);
    const char *cat[] = {topic, result_topic, "files", "cat", ws, "five.txt", "2:3", NULL};
    assert_int_equal(it_cli_run(cat, tmp, out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "l2\nl3\n");
    const char *bad[] = {topic, result_topic, "files", "cat", ws, "five.txt", "3:2", NULL};
    assert_int_equal(it_cli_run(bad, tmp, out, sizeof(out), err, sizeof(err)), 2);
    assert_non_null(strstr(err, "FIRST:LAST"));
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
    fleet_stop(&f);
}

/* apply_patch (OpenAI's V4A format): several files as one revision; a hunk
 * that does not apply is said with its file and line, and nothing of the
 * patch is written, not even its files that would apply. */
static void apply_patch_through_the_fleet(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    cf_dispatcher *d = f.d[1];
    char ws[128];
    snprintf(ws, sizeof(ws), "%spatched", f.prefix[1]);
    cf_request req;
    cf_result res;
    content_request(&req, ws, CF_WS_OP_APPLY_PATCH, NULL,
                    "*** Begin Patch\n*** Add File: app.py\n+def main():\n+    return 1\n"
                    "*** Add File: notes.txt\n+draft\n*** End Patch\n");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "a patch adding two files");
    assert_int_equal(res.workspace_revision, 1);
    assert_int_equal(res.n_changed_paths, 2);
    cf_result_clear(&res);

    content_request(&req, ws, CF_WS_OP_APPLY_PATCH, NULL,
                    "*** Begin Patch\n*** Update File: app.py\n@@ def main():\n-    return 1\n+    return 2\n"
                    "*** Delete File: notes.txt\n*** Add File: b.txt\n+b\n*** End Patch\n");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "update, delete and add in one patch");
    assert_int_equal(res.workspace_revision, 2);
    assert_int_equal(res.n_changed_paths, 3);
    cf_result_clear(&res);

    /* Its first file would apply, its second does not: nothing written. */
    content_request(&req, ws, CF_WS_OP_APPLY_PATCH, NULL,
                    "*** Begin Patch\n*** Update File: b.txt\n@@\n-b\n+B\n"
                    "*** Update File: app.py\n@@\n-    return 1\n+    return 3\n*** End Patch\n");
    run_op(d, &req, &res, CF_STATUS_FAILED, "a patch with a stale hunk");
    assert_reason(&res, "app.py: hunk 1 (patch line 7) does not apply");
    assert_reason(&res, "nothing written");
    assert_int_equal(res.workspace_revision, 2);
    cf_result_clear(&res);
    op_request(&req, ws, CF_WS_OP_READ, "b.txt");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "b.txt after the refused patch");
    assert_content(&res, "b.txt", "b\n");
    cf_result_clear(&res);
    op_request(&req, ws, CF_WS_OP_READ, "app.py");
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "app.py");
    assert_content(&res, "app.py", "def main():\n    return 2\n");
    cf_result_clear(&res);

    /* A path out of the workspace, named in a patch: refused. */
    content_request(&req, ws, CF_WS_OP_APPLY_PATCH, NULL,
                    "*** Begin Patch\n*** Add File: ../../escape\n+x\n*** End Patch\n");
    run_op(d, &req, &res, CF_STATUS_FAILED, "a patch adding a file out of the workspace");
    assert_reason(&res, "patch line 2");
    assert_int_equal(res.workspace_revision, 2);
    cf_result_clear(&res);
    fleet_stop(&f);
}


/* `codefleet files` drives the same ops through the fleet with only the
 * client's Kafka settings: the answers on stdout, a refusal as its exit
 * code and reason. */
static void the_cli_does_them_through_the_fleet(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    char ws[128], theirs[128], tmp[] = "/tmp/cf-wsops-XXXXXX", patch[200], topic[160];
    snprintf(ws, sizeof(ws), "%scli", f.prefix[1]);
    snprintf(theirs, sizeof(theirs), "%scli", f.prefix[0]);
    snprintf(topic, sizeof(topic), "--request-topic=%s", f.topic[1]);
    char result_topic[160];
    snprintf(result_topic, sizeof(result_topic), "--result-topic=%s", f.t.results);
    assert_non_null(mkdtemp(tmp));
    snprintf(patch, sizeof(patch), "%s/change.patch", tmp);
    FILE *pf = fopen(patch, "w");
    assert_non_null(pf);
    fputs("*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Add File: b/c.txt\n+c\n*** End Patch\n", pf);
    fclose(pf);
    char out[8192], err[8192];
    const char *patch_args[] = {topic, result_topic, "files", "patch", ws, patch, NULL};
    int rc = it_cli_run(patch_args, tmp, out, sizeof(out), err, sizeof(err));
    if (rc != 0)
        fail_msg("files patch: exit %d: %s", rc, err);
    assert_non_null(strstr(out, "revision 1: a.txt b/c.txt"));
    const char *replace_args[] = {topic, result_topic, "files", "replace", ws, "a.txt", "two", "2", NULL};
    assert_int_equal(it_cli_run(replace_args, tmp, out, sizeof(out), err, sizeof(err)), 0);
    const char *cat_args[] = {topic, result_topic, "files", "cat", ws, "a.txt", NULL};
    assert_int_equal(it_cli_run(cat_args, tmp, out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "one\n2\n");
    const char *ls_args[] = {topic, result_topic, "files", "ls", ws, "**/*.txt", NULL};
    assert_int_equal(it_cli_run(ls_args, tmp, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "a.txt"));
    assert_non_null(strstr(out, "b/c.txt"));
    /* A stale revision: exit 8 and nothing written. */
    const char *stale_args[] = {topic, result_topic, "files", "rm", ws, "a.txt", "--expect-rev", "1", NULL};
    assert_int_equal(it_cli_run(stale_args, tmp, out, sizeof(out), err, sizeof(err)), 8);
    assert_non_null(strstr(err, "not the expected 1"));
    /* Another tenant's workspace, from this tenant's topic: exit 3. */
    const char *theirs_args[] = {topic, result_topic, "files", "ls", theirs, NULL};
    assert_int_equal(it_cli_run(theirs_args, tmp, out, sizeof(out), err, sizeof(err)), 3);
    assert_non_null(strstr(err, "does not start with"));
    /* A usage mistake is said before anything is sent. */
    const char *bad_args[] = {topic, result_topic, "files", "insert", ws, "a.txt", "x", "text", NULL};
    assert_int_equal(it_cli_run(bad_args, tmp, out, sizeof(out), err, sizeof(err)), 2);
    assert_non_null(strstr(err, "LINE 'x'"));
    unlink(patch);
    rmdir(tmp);
    fleet_stop(&f);
}


/* A change that loses its compare-and-set to another writer is the op's
 * failure, never a success: while a writer outside the fleet (the
 * operator's store) commits to the workspace in a loop, every op answered
 * success has its change in the file, and every other one says why. */
typedef struct noise {
    const char *ws;
    volatile int stop;
    int commits;
} noise;

static void *noise_main(void *arg)
{
    noise *n = arg;
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    char host[256];
    int port;
    assert_int_equal(cf_wstate_addr_parse(it_redis(), host, sizeof(host), &port, NULL), 0);
    rc.host = host;
    rc.port = port;
    it_redis_auth(&rc);
    cf_error err;
    cf_error_clear(&err);
    cf_redis *r = cf_redis_new(&rc, false, &err);
    cf_workspace_store *ws = r ? cf_workspace_store_new(r, NULL, &err) : NULL;
    for (int i = 0; ws && !n->stop; i++) {
        char body[32];
        snprintf(body, sizeof(body), "noise %d\n", i);
        if (cf_workspace_put(ws, n->ws, CF_WS_ANY_REV, "noise.txt", body, strlen(body), NULL, &err) == 0)
            n->commits++;
        cf_error_clear(&err);
        nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL); /* pacing: some ops land between commits */
    }
    cf_workspace_store_destroy(ws);
    cf_redis_destroy(r);
    return NULL;
}

static void a_lost_race_is_a_failure(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    fleet f;
    fleet_start(&f);
    cf_dispatcher *d = f.d[1];
    char ws[128];
    snprintf(ws, sizeof(ws), "%srace", f.prefix[1]);
    /* 1.1 MB of numbered lines: its upload is the window another commit
     * hits (and more than librdkafka's default message size, which the
     * dispatcher raises). */
    enum { LINES = 40000, OPS = 40 };
    size_t cap = (size_t)LINES * 32 + 1, len = 0; /* 28 bytes a line */
    char *text = malloc(cap);
    for (int i = 0; i < LINES; i++)
        len += (size_t)snprintf(text + len, cap - len, "line %06d of the file....\n", i);
    cf_request req;
    cf_result res;
    cf_workspace_op *o = op_request(&req, ws, CF_WS_OP_WRITE, "f.txt");
    assert_int_equal(cf_bytes_set(&o->content, text, len), 0);
    o->has_content = true;
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "the big file");
    cf_result_clear(&res);
    noise n = {.ws = ws};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, noise_main, &n), 0);
    bool landed[OPS];
    int succeeded = 0, failed = 0;
    for (int i = 0; i < OPS; i++) {
        char old[32], new[32];
        snprintf(old, sizeof(old), "line %06d of", i * 997);
        snprintf(new, sizeof(new), "EDIT %06d of", i * 997);
        o = op_request(&req, ws, CF_WS_OP_STR_REPLACE, "f.txt");
        set_bytes(&o->old_str, old);
        set_bytes(&o->new_str, new);
        o->has_new_str = true;
        it_submit_wait(d, &req, 60 * SEC, &res);
        cf_request_clear(&req);
        landed[i] = res.status == CF_STATUS_SUCCESS;
        if (landed[i]) {
            succeeded++;
            assert_int_equal(res.n_changed_paths, 1);
            assert_false(res.workspace_conflict);
        } else {
            failed++;
            if (res.status != CF_STATUS_FAILED || !res.reason)
                fail_msg("op %d: %s without a reason: %s", i, cf_status_name(res.status), res.reason ? res.reason : "-");
        }
        cf_result_clear(&res);
    }
    n.stop = 1;
    pthread_join(th, NULL);
    op_request(&req, ws, CF_WS_OP_READ, "f.txt");
    req.policy.max_stdout_bytes = 4 * 1024 * 1024;
    run_op(d, &req, &res, CF_STATUS_SUCCESS, "the file after the race");
    assert_false(res.files[0].truncated);
    char *got = strndup((const char *)res.files[0].content.data, res.files[0].content.len);
    for (int i = 0; i < OPS; i++) {
        char edit[32];
        snprintf(edit, sizeof(edit), "EDIT %06d of", i * 997);
        if ((strstr(got, edit) != NULL) != landed[i])
            fail_msg("op %d was answered %s but its change is %s", i, landed[i] ? "success" : "failed",
                     strstr(got, edit) ? "there" : "missing");
    }
    print_message("%d ops landed, %d lost the race to %d outside commits\n", succeeded, failed, n.commits);
    free(got);
    free(text);
    cf_result_clear(&res);
    fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_op_through_the_fleet),
        cmocka_unit_test(tenants_reach_only_their_own_workspaces),
        cmocka_unit_test(a_write_over_the_quota_is_refused),
        cmocka_unit_test(ops_are_held_to_max_file_size),
        cmocka_unit_test(a_read_of_some_lines),
        cmocka_unit_test(apply_patch_through_the_fleet),
        cmocka_unit_test(the_cli_does_them_through_the_fleet),
        cmocka_unit_test(a_lost_race_is_a_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
