/* Integration tests of `codefleet workspace|checkpoint|events` against the
 * real Redis and Kafka of deploy/stack.sh (CF_TEST_REDIS, CF_TEST_BROKERS):
 * the built binary is run as a child process, every command once, and every
 * bad-input class (path traversal, absolute path, NUL byte, control byte,
 * oversize file, too many files, non-map state) must give a clear error,
 * exit code 2, and leave the stored revision / checkpoints unchanged (checked
 * through the library, independently of the CLI). */
#include "it_support.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_checkpoint.h"
#include "cf_cli.h"
#include "cf_redis.h"
#include "cf_util.h"
#include "cf_workspace.h"


#define OUT_MAX (1 << 20)

typedef struct fx {
    char tmp[128];          /* scratch directory */
    char events_topic[96];
    cf_redis *r;
    cf_workspace_store *ws;
    cf_checkpoint_store *cs;
} fx;

typedef struct run_out {
    int rc;
    char out[OUT_MAX];
    char err[65536];
} run_out;

static run_out g_run; /* large: kept off the stack */

static void read_file_into(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
}

/* Runs codefleet with the stack's addresses; args NULL-terminated. */
static run_out *run(fx *f, const char *first, ...)
{
    const char *argv[64];
    int n = 0;
    char redis_flag[256], topic_flag[160];
    snprintf(redis_flag, sizeof(redis_flag), "--redis=%s", it_redis());
    snprintf(topic_flag, sizeof(topic_flag), "--events-topic=%s", f->events_topic);
    argv[n++] = redis_flag;
    argv[n++] = topic_flag;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    g_run.rc = it_cli_run(argv, f->tmp, g_run.out, sizeof(g_run.out), g_run.err, sizeof(g_run.err));
    assert_true(g_run.rc >= 0); /* exited, not killed */
    return &g_run;
}

static void expect_rc(const run_out *r, int rc, const char *what)
{
    if (r->rc != rc)
        fail_msg("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r->rc, rc, r->out, r->err);
}

static void expect_err(const run_out *r, const char *needle, const char *what)
{
    if (!strstr(r->err, needle))
        fail_msg("%s: stderr lacks '%s': %s", what, needle, r->err);
}

static void write_file(fx *f, const char *name, const void *data, size_t len, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", f->tmp, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static int setup(void **state)
{
    if (!it_brokers() || !it_redis())
        return 0;
    fx *f = calloc(1, sizeof(*f));
    snprintf(f->tmp, sizeof(f->tmp), "/tmp/cf-it-cli-state-XXXXXX");
    assert_non_null(mkdtemp(f->tmp));
    it_unique_name("it-cli-events", f->events_topic, sizeof(f->events_topic));
    const char *names[] = {f->events_topic};
    cf_error err = {0};
    if (cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 1, 3, -1, 30 * 1000000LL, &err) < 0)
        fail_msg("creating topic: %s", err.msg);
    f->r = it_redis_open();
    f->ws = cf_workspace_store_new(f->r, NULL, &err);
    f->cs = cf_checkpoint_store_new(f->r, NULL, &err);
    assert_non_null(f->ws);
    assert_non_null(f->cs);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    if (!f)
        return 0;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->tmp);
    assert_int_equal(system(cmd), 0);
    cf_checkpoint_store_destroy(f->cs);
    cf_workspace_store_destroy(f->ws);
    cf_redis_destroy(f->r);
    free(f);
    return 0;
}

#define REQUIRE_STACK()                                                                   \
    do {                                                                                  \
        IT_REQUIRE_BROKER();                                                              \
        if (!it_redis()) {                                                                \
            print_message("CF_TEST_REDIS not set: skipping\n");                          \
            skip();                                                                       \
        }                                                                                 \
    } while (0)

static int64_t ws_rev(fx *f, const char *id)
{
    cf_ws_info in = {0};
    cf_error err = {0};
    if (cf_workspace_info(f->ws, id, &in, &err) < 0)
        fail_msg("info %s: %s", id, err.msg);
    int64_t rev = in.rev;
    cf_ws_info_clear(&in);
    return rev;
}

static json_t *out_json(const run_out *r)
{
    json_error_t je;
    json_t *j = json_loads(r->out, 0, &je);
    if (!j)
        fail_msg("stdout is not one JSON object (%s): %s", je.text, r->out);
    return j;
}

/* ---- workspace --------------------------------------------------------------- */

static void test_workspace_commands(void **state)
{
    REQUIRE_STACK();
    fx *f = *state;
    char id[96], a[256], b[256], spec_a[320], spec_b[320], outp[256], dir[256];
    it_unique_name("ws-cli", id, sizeof(id));
    write_file(f, "a.txt", "alpha\n", 6, a, sizeof(a));
    write_file(f, "b.bin", "\x00\xff\x01", 3, b, sizeof(b));
    snprintf(spec_a, sizeof(spec_a), "src/a.txt=%s", a);
    snprintf(spec_b, sizeof(spec_b), "b.bin=%s", b);

    run_out *r = run(f, "workspace", "create", id, "--project", "proj", NULL);
    expect_rc(r, 0, "create");
    r = run(f, "workspace", "create", id, NULL);
    expect_rc(r, CF_EXIT_CONFLICT, "create again");
    expect_err(r, "already exists", "create again");

    r = run(f, "--json", "workspace", "put", id, "--expect-rev", "0", spec_a, spec_b, NULL);
    expect_rc(r, 0, "put");
    json_t *j = out_json(r);
    assert_int_equal(json_integer_value(json_object_get(j, "rev")), 1);
    json_decref(j);
    assert_int_equal(ws_rev(f, id), 1);
    /* a stale --expect-rev is a conflict and writes nothing */
    r = run(f, "workspace", "put", id, "--expect-rev", "0", spec_a, NULL);
    expect_rc(r, CF_EXIT_CONFLICT, "stale put");
    assert_int_equal(ws_rev(f, id), 1);

    r = run(f, "--json", "workspace", "ls", id, NULL);
    expect_rc(r, 0, "ls");
    j = out_json(r);
    json_t *files = json_object_get(j, "files");
    assert_int_equal(json_array_size(files), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(files, 0), "path")), "b.bin");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(files, 0), "size")), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(files, 1), "path")), "src/a.txt");
    json_decref(j);
    r = run(f, "workspace", "ls", id, NULL);
    expect_rc(r, 0, "ls human");
    assert_non_null(strstr(r->out, "src/a.txt"));

    r = run(f, "workspace", "get", id, "src/a.txt", NULL);
    expect_rc(r, 0, "get");
    assert_string_equal(r->out, "alpha\n");
    snprintf(outp, sizeof(outp), "%s/got.bin", f->tmp);
    r = run(f, "workspace", "get", id, "b.bin", "-o", outp, NULL);
    expect_rc(r, 0, "get -o");
    char got[16];
    read_file_into(outp, got, sizeof(got));
    assert_memory_equal(got, "\x00\xff\x01", 3);
    r = run(f, "workspace", "get", id, "missing.txt", NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "get missing");
    r = run(f, "workspace", "get", "no-such-ws-x", "a", NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "get missing ws");

    r = run(f, "--json", "workspace", "info", id, NULL);
    expect_rc(r, 0, "info");
    j = out_json(r);
    assert_string_equal(json_string_value(json_object_get(j, "project")), "proj");
    assert_int_equal(json_integer_value(json_object_get(j, "files")), 2);
    json_decref(j);

    /* rm: one revision; rev 1 stays readable through snapshot --rev */
    r = run(f, "workspace", "rm", id, "b.bin", NULL);
    expect_rc(r, 0, "rm");
    assert_int_equal(ws_rev(f, id), 2);
    r = run(f, "workspace", "rm", id, "b.bin", NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "rm again");
    snprintf(dir, sizeof(dir), "%s/snap1", f->tmp);
    r = run(f, "workspace", "snapshot", id, "--rev", "1", "-o", dir, NULL);
    expect_rc(r, 0, "snapshot rev 1");
    char p[320];
    snprintf(p, sizeof(p), "%s/src/a.txt", dir);
    read_file_into(p, got, sizeof(got));
    assert_string_equal(got, "alpha\n");
    snprintf(p, sizeof(p), "%s/b.bin", dir);
    assert_int_equal(access(p, F_OK), 0);
    snprintf(dir, sizeof(dir), "%s/snap2", f->tmp);
    r = run(f, "workspace", "snapshot", id, "-o", dir, NULL);
    expect_rc(r, 0, "snapshot current");
    snprintf(p, sizeof(p), "%s/b.bin", dir);
    assert_int_equal(access(p, F_OK), -1);
    /* into a non-empty directory: refused */
    r = run(f, "workspace", "snapshot", id, "-o", dir, NULL);
    expect_rc(r, CF_EXIT_USAGE, "snapshot into non-empty");
    expect_err(r, "not empty", "snapshot into non-empty");
    r = run(f, "workspace", "snapshot", id, "--rev", "99", "-o", dir, NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "snapshot future rev");

    r = run(f, "workspace", "delete", id, NULL);
    expect_rc(r, 0, "delete");
    r = run(f, "workspace", "delete", id, NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "delete again");
}

static void test_workspace_bad_input(void **state)
{
    REQUIRE_STACK();
    fx *f = *state;
    char id[96], a[256], spec[400], manifest[256];
    it_unique_name("ws-bad", id, sizeof(id));
    write_file(f, "a.txt", "ok", 2, a, sizeof(a));
    snprintf(spec, sizeof(spec), "good.txt=%s", a);
    expect_rc(run(f, "workspace", "create", id, NULL), 0, "create");
    expect_rc(run(f, "workspace", "put", id, spec, NULL), 0, "good put");
    assert_int_equal(ws_rev(f, id), 1);

    struct {
        const char *rel, *needle;
    } paths[] = {
        {"../escape.txt", "'..'"},
        {"a/../../b", "'..'"},
        {"/etc/passwd", "absolute"},
        {"ctl\001name", "control"},
        {"a//b", "empty"},
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        /* a good file in the same batch must not be written either */
        char bad[400];
        snprintf(bad, sizeof(bad), "%s=%s", paths[i].rel, a);
        snprintf(spec, sizeof(spec), "also-good.txt=%s", a);
        run_out *r = run(f, "workspace", "put", id, spec, bad, NULL);
        expect_rc(r, CF_EXIT_USAGE, paths[i].rel);
        expect_err(r, paths[i].needle, paths[i].rel);
        assert_int_equal(ws_rev(f, id), 1);
    }

    /* NUL byte: argv cannot carry one, a manifest can */
    static const char nul_manifest[] = "[{\"path\": \"ok.txt\", \"content\": \"x\"},"
                                       " {\"path\": \"a\\u0000b\", \"content\": \"x\"}]";
    write_file(f, "nul.json", nul_manifest, strlen(nul_manifest), manifest, sizeof(manifest));
    run_out *r = run(f, "workspace", "put", id, "--manifest", manifest, NULL);
    expect_rc(r, CF_EXIT_USAGE, "NUL path");
    expect_err(r, "NUL", "NUL path");
    assert_int_equal(ws_rev(f, id), 1);

    /* oversize file: one byte over the 8 MiB per-file cap */
    size_t big = ((size_t)8 << 20) + 1;
    char *blob = calloc(1, big);
    char bigp[256];
    write_file(f, "big.bin", blob, big, bigp, sizeof(bigp));
    free(blob);
    snprintf(spec, sizeof(spec), "big.bin=%s", bigp);
    r = run(f, "workspace", "put", id, spec, NULL);
    expect_rc(r, CF_EXIT_USAGE, "oversize");
    expect_err(r, "big.bin", "oversize");
    assert_int_equal(ws_rev(f, id), 1);

    /* too many files in one batch (1001 > 1000): refused in C */
    FILE *mf = NULL;
    snprintf(manifest, sizeof(manifest), "%s/many.json", f->tmp);
    mf = fopen(manifest, "w");
    assert_non_null(mf);
    fputc('[', mf);
    for (int i = 0; i < 1001; i++)
        fprintf(mf, "%s{\"path\": \"m/f%04d\", \"content\": \"%d\"}", i ? "," : "", i, i);
    fputc(']', mf);
    fclose(mf);
    r = run(f, "workspace", "put", id, "--manifest", manifest, NULL);
    expect_rc(r, CF_EXIT_USAGE, "too many files (batch)");
    expect_err(r, "1000", "too many files (batch)");
    assert_int_equal(ws_rev(f, id), 1);
    /* ... and too many in the resulting workspace: 999 new + the 1 there = 1000 is
     * fine, one more is refused (checked inside Redis, atomically) */
    mf = fopen(manifest, "w");
    fputc('[', mf);
    for (int i = 0; i < 999; i++)
        fprintf(mf, "%s{\"path\": \"m/f%04d\", \"content\": \"%d\"}", i ? "," : "", i, i);
    fputc(']', mf);
    fclose(mf);
    r = run(f, "workspace", "put", id, "--manifest", manifest, NULL);
    expect_rc(r, 0, "1000 files");
    assert_int_equal(ws_rev(f, id), 2);
    snprintf(spec, sizeof(spec), "one-more.txt=%s", a);
    r = run(f, "workspace", "put", id, spec, NULL);
    expect_rc(r, CF_EXIT_USAGE, "too many files (result)");
    assert_int_equal(ws_rev(f, id), 2);

    /* the library directly: a NUL cannot be expressed in a C path at all,
     * control bytes and traversal are refused, and a bad path anywhere in a
     * batch writes nothing */
    cf_error err = {0};
    cf_ws_file batch[] = {{"fine.txt", "x", 1}, {"x/\x7f", "y", 1}};
    assert_int_equal(cf_workspace_commit(f->ws, id, CF_WS_ANY_REV, batch, 2, NULL, 0, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(ws_rev(f, id), 2);

    expect_rc(run(f, "workspace", "delete", id, NULL), 0, "delete");
}

/* ---- checkpoint -------------------------------------------------------------- */

static void trim_nl(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
}

static void test_checkpoint_commands(void **state)
{
    REQUIRE_STACK();
    fx *f = *state;
    char th[96], id1[160], id2[160], id3[160], sf[256];
    it_unique_name("th-cli", th, sizeof(th));

    run_out *r = run(f, "checkpoint", "save", th, "--state", "{\"step\": 1, \"todo\": [\"a\", \"b\"]}", NULL);
    expect_rc(r, 0, "save 1");
    cf_strlcpy(id1, r->out, sizeof(id1));
    trim_nl(id1);
    write_file(f, "state.json", "{\"step\": 2}", 11, sf, sizeof(sf));
    r = run(f, "--json", "checkpoint", "save", th, "--state-file", sf, "--expect-latest", id1, "--writer-seq", "5",
            "--meta", "{\"by\": \"cli\"}", NULL);
    expect_rc(r, 0, "save 2");
    json_t *j = out_json(r);
    cf_strlcpy(id2, json_string_value(json_object_get(j, "id")), sizeof(id2));
    json_decref(j);
    /* conflicts: a stale expect-latest, an older writer, a non-empty thread */
    r = run(f, "checkpoint", "save", th, "--state", "{}", "--expect-latest", id1, NULL);
    expect_rc(r, CF_EXIT_CONFLICT, "stale expect-latest");
    r = run(f, "checkpoint", "save", th, "--state", "{}", "--writer-seq", "4", NULL);
    expect_rc(r, CF_EXIT_CONFLICT, "older writer");
    r = run(f, "checkpoint", "save", th, "--state", "{}", "--expect-empty", NULL);
    expect_rc(r, CF_EXIT_CONFLICT, "expect empty");
    r = run(f, "checkpoint", "save", th, "--state", "{}", "--parent", "0000000000000001-000000000009", NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "missing parent");

    r = run(f, "checkpoint", "load", th, NULL);
    expect_rc(r, 0, "load latest");
    j = out_json(r);
    assert_int_equal(json_integer_value(json_object_get(j, "step")), 2);
    json_decref(j);
    r = run(f, "--json", "checkpoint", "load", th, id1, NULL);
    expect_rc(r, 0, "load id1");
    j = out_json(r);
    assert_string_equal(json_string_value(json_object_get(j, "id")), id1);
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "state"), "todo")), 2);
    json_decref(j);
    r = run(f, "--json", "checkpoint", "load", th, id2, NULL);
    j = out_json(r);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "meta"), "by")), "cli");
    assert_int_equal(json_integer_value(json_object_get(j, "writer_seq")), 5);
    json_decref(j);

    r = run(f, "--json", "checkpoint", "list", th, "--limit", "10", NULL);
    expect_rc(r, 0, "list");
    j = out_json(r);
    json_t *cps = json_object_get(j, "checkpoints");
    assert_int_equal(json_array_size(cps), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(cps, 0), "id")), id2); /* newest first */
    json_decref(j);
    r = run(f, "--json", "checkpoint", "list", th, "--after", "1", "--before", "2", NULL);
    expect_rc(r, 0, "list empty window");
    j = out_json(r);
    assert_int_equal(json_array_size(json_object_get(j, "checkpoints")), 0);
    json_decref(j);

    r = run(f, "checkpoint", "rollback", th, id1, NULL);
    expect_rc(r, 0, "rollback");
    cf_strlcpy(id3, r->out, sizeof(id3));
    trim_nl(id3);
    r = run(f, "--json", "checkpoint", "history", th, NULL);
    expect_rc(r, 0, "history");
    j = out_json(r);
    cps = json_object_get(j, "checkpoints");
    assert_int_equal(json_array_size(cps), 2); /* id3 -> id1 */
    assert_string_equal(json_string_value(json_object_get(json_array_get(cps, 0), "id")), id3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(cps, 1), "id")), id1);
    json_decref(j);
    r = run(f, "checkpoint", "load", th, NULL);
    j = out_json(r);
    assert_int_equal(json_integer_value(json_object_get(j, "step")), 1);
    json_decref(j);
    r = run(f, "checkpoint", "history", th, "--from", id2, "--limit", "1", NULL);
    expect_rc(r, 0, "history from");
    assert_non_null(strstr(r->out, id2));

    r = run(f, "checkpoint", "rm", th, id2, NULL);
    expect_rc(r, 0, "rm");
    r = run(f, "checkpoint", "rm", th, id2, NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "rm again");
    r = run(f, "checkpoint", "load", th, id2, NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "load removed");
    r = run(f, "checkpoint", "rm", th, "--thread-all", NULL);
    expect_rc(r, 0, "rm thread");
    r = run(f, "checkpoint", "load", th, NULL);
    expect_rc(r, CF_EXIT_NOT_FOUND, "load empty thread");
}

static size_t cp_count(fx *f, const char *th)
{
    cf_checkpoints l = {0};
    cf_error err = {0};
    if (cf_checkpoint_list(f->cs, th, NULL, &l, &err) < 0)
        fail_msg("list: %s", err.msg);
    size_t n = l.n;
    cf_checkpoints_clear(&l);
    return n;
}

static void test_checkpoint_non_map_state(void **state)
{
    REQUIRE_STACK();
    fx *f = *state;
    char th[96], sf[256];
    it_unique_name("th-bad", th, sizeof(th));
    expect_rc(run(f, "checkpoint", "save", th, "--state", "{\"ok\": true}", NULL), 0, "good save");
    assert_int_equal(cp_count(f, th), 1);
    static const char *const bad[] = {"[1, 2, 3]", "42", "\"a string\"", "null", "{\"a\": 1,", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_out *r = run(f, "checkpoint", "save", th, "--state", bad[i], NULL);
        expect_rc(r, CF_EXIT_USAGE, bad[i]);
        expect_err(r, "--state", bad[i]);
        assert_int_equal(cp_count(f, th), 1);
    }
    write_file(f, "list.json", "[{\"a\": 1}]", 10, sf, sizeof(sf));
    run_out *r = run(f, "checkpoint", "save", th, "--state-file", sf, NULL);
    expect_rc(r, CF_EXIT_USAGE, "state file array");
    expect_err(r, "must be a JSON object", "state file array");
    r = run(f, "checkpoint", "save", th, "--state", "{}", "--meta", "[1]", NULL);
    expect_rc(r, CF_EXIT_USAGE, "non-map meta");
    assert_int_equal(cp_count(f, th), 1);
    /* the library refuses non-map msgpack too */
    cf_error err = {0};
    assert_int_equal(cf_checkpoint_save(f->cs, th, "\x93\x01\x02\x03", 4, NULL, NULL, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cp_count(f, th), 1);
    expect_rc(run(f, "checkpoint", "rm", th, "--thread-all", NULL), 0, "cleanup");
}

/* ---- events --------------------------------------------------------------- */

static void test_events_commands(void **state)
{
    REQUIRE_STACK();
    fx *f = *state;
    char corr[96];
    it_unique_name("corr-cli", corr, sizeof(corr));
    run_out *r = run(f, "events", "publish", "--workspace", "ws-cli", "--correlation-id", corr, "--kind", "need_work",
                     "--topic", "parser", "--producer", "agent:a", "--payload", "{\"n\": 1}", NULL);
    expect_rc(r, 0, "publish 1");
    char id1[160];
    cf_strlcpy(id1, r->out, sizeof(id1));
    trim_nl(id1);
    r = run(f, "--json", "events", "publish", "--workspace", "ws-cli", "--correlation-id", corr, "--kind",
            "completed", "--topic", "parser", "--producer", "agent:b", "--consumer", "agent:a", NULL);
    expect_rc(r, 0, "publish 2");
    json_t *j = out_json(r);
    assert_string_equal(json_string_value(json_object_get(j, "kind")), "completed");
    json_decref(j);

    /* a wait started after the publish still returns it */
    r = run(f, "--json", "--timeout", "15s", "events", "wait", corr, NULL);
    expect_rc(r, 0, "wait");
    j = out_json(r);
    assert_string_equal(json_string_value(json_object_get(j, "id")), id1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "payload"), "n")), 1);
    json_decref(j);
    r = run(f, "--json", "--timeout", "15s", "events", "wait", corr, "--kind", "completed", "--workspace", "ws-cli",
            NULL);
    expect_rc(r, 0, "wait kind");
    j = out_json(r);
    assert_string_equal(json_string_value(json_object_get(j, "producer")), "agent:b");
    json_decref(j);
    r = run(f, "--timeout", "1s", "events", "wait", corr, "--kind", "blocked", NULL);
    expect_rc(r, CF_EXIT_NO_RESULT, "wait timeout");
    expect_err(r, corr, "wait timeout");

    r = run(f, "--timeout", "15s", "events", "tail", "--since", "10m", "--workspace", "ws-cli", "--count", "2", NULL);
    expect_rc(r, 0, "tail");
    char *second = strchr(r->out, '\n');
    assert_non_null(second);
    assert_non_null(strstr(r->out, "need_work"));
    assert_non_null(strstr(second, "completed")); /* publish order */

    r = run(f, "events", "publish", "--workspace", "ws-cli", "--correlation-id", corr, "--kind", "blocked",
            "--topic", "bad\ttopic", "--producer", "p", NULL);
    expect_rc(r, CF_EXIT_USAGE, "publish bad topic");
    expect_err(r, "topic", "publish bad topic");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_workspace_commands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_workspace_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_commands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_non_map_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events_commands, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
