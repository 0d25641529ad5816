/* Streaming output through the fleet on the real broker (SPEC.md "Output
 * chunks"): a program printing lines with pauses is seen chunk by chunk
 * before it ends, on the process backend and in the sandbox (built for the
 * request and prepared ahead); the chunks add up to the result's output,
 * numbered without gaps and counted by the result; output caps hold in
 * streaming mode; and a request gets `rejected`, never a weaker run, where
 * its chunks cannot go (a backend that cannot stream, streaming off, a
 * missing output topic, an output topic that is one of the fleet's own). */
#include "it_support.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_kafka.h"
#include "cf_util.h"

#define SEC 1000000LL
#define MAX_SEEN 4096

typedef struct seen_chunk {
    int64_t seq;
    cf_chunk_stream stream;
    int64_t offset;
    size_t len;
    int64_t arrived_us; /* cf_mono_us */
} seen_chunk;

typedef struct collector {
    pthread_mutex_t mu;
    char id[CF_ID_MAX + 1];
    char run[CF_CHUNK_RUN_MAX + 1];
    bool other_run;
    seen_chunk seen[MAX_SEEN];
    size_t n;
    cf_buf bytes[2]; /* concatenated data per stream, in arrival order */
} collector;

static void on_chunk(void *ctx, const cf_chunk *c)
{
    collector *col = ctx;
    pthread_mutex_lock(&col->mu);
    if (strcmp(c->id, col->id) == 0 && col->n < MAX_SEEN) {
        if (!col->run[0])
            snprintf(col->run, sizeof(col->run), "%s", c->run);
        col->other_run |= strcmp(col->run, c->run) != 0;
        col->seen[col->n++] = (seen_chunk){.seq = c->seq, .stream = c->stream, .offset = c->offset,
                                           .len = c->data.len, .arrived_us = cf_mono_us()};
        cf_buf_append(&col->bytes[c->stream == CF_CHUNK_STDERR], c->data.data, c->data.len, NULL);
    }
    pthread_mutex_unlock(&col->mu);
}

static cf_dispatcher *stream_dispatcher(const it_topics *t, collector *col)
{
    memset(col, 0, sizeof(*col));
    pthread_mutex_init(&col->mu, NULL);
    cf_buf_init(&col->bytes[0], 0);
    cf_buf_init(&col->bytes[1], 0);
    cf_dispatcher_config cfg = {
        .brokers = it_brokers(),
        .request_topic = t->requests,
        .result_topic = t->results,
        .collect_results = true,
        .kafka = it_kafka(),
        .on_chunk = on_chunk,
        .on_chunk_ctx = col,
    };
    cf_dispatcher *d = NULL;
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_new(&cfg, &d, &err) < 0)
        fail_msg("dispatcher: %s", err.msg);
    return d;
}

static void collector_free(collector *col)
{
    cf_buf_free(&col->bytes[0]);
    cf_buf_free(&col->bytes[1]);
    pthread_mutex_destroy(&col->mu);
}

/* Waits until the collector holds `want` chunks (the result may come
 * first: it is another topic). */
static size_t wait_chunks(collector *col, int64_t want, int64_t timeout_us)
{
    int64_t until = cf_mono_us() + timeout_us;
    for (;;) {
        pthread_mutex_lock(&col->mu);
        size_t n = col->n;
        pthread_mutex_unlock(&col->mu);
        if ((int64_t)n >= want || cf_mono_us() >= until)
            return n;
        usleep(10000);
    }
}

/* The chunks of one run, numbered 0..n-1 in arrival order, each stream's
 * offsets contiguous, and together exactly the result's stdout and stderr. */
static void check_chunks_match(collector *col, const cf_result *res)
{
    assert_false(col->other_run);
    assert_non_null(res->meta.run);
    assert_string_equal(res->meta.run, col->run);
    assert_int_equal((int64_t)col->n, res->chunks);
    size_t next_off[2] = {0, 0};
    for (size_t i = 0; i < col->n; i++) {
        const seen_chunk *s = &col->seen[i];
        assert_int_equal(s->seq, (int64_t)i);
        int k = s->stream == CF_CHUNK_STDERR;
        assert_int_equal(s->offset, (int64_t)next_off[k]);
        next_off[k] += s->len;
    }
    assert_int_equal(col->bytes[0].len, res->stdout_data.len);
    assert_int_equal(col->bytes[1].len, res->stderr_data.len);
    assert_memory_equal(col->bytes[0].data, res->stdout_data.data, res->stdout_data.len);
    assert_memory_equal(col->bytes[1].data, res->stderr_data.data, res->stderr_data.len);
}

/* Five lines on stdout and five on stderr, 300 ms apart: each is seen
 * while the program still runs. */
static void lines_arrive_while_running(const char *backend, const char *warm)
{
    IT_REQUIRE_BROKER();
    if (strcmp(backend, "sandbox") == 0 && geteuid() != 0) {
        print_message("sandbox needs root: skipped\n");
        skip();
    }
    it_topics t;
    it_topics_create(&t, "stream-lines", 2);
    it_worker w;
    char a_backends[64];
    snprintf(a_backends, sizeof(a_backends), "--backends=%s", backend);
    const char *args[] = {a_backends, warm, NULL};
    it_worker_start(&w, &t, "stream-lines-w1", args);
    collector col;
    cf_dispatcher *d = stream_dispatcher(&t, &col);
    cf_request req;
    if (warm) {
        /* The slots build their sandboxes once the worker runs: one
         * request through, and a moment, so the next one finds them. */
        cf_result wres = {0};
        it_request_init(&req, CF_LANG_SHELL, "true");
        it_submit_wait(d, &req, 120 * SEC, &wres);
        assert_int_equal(wres.status, CF_STATUS_SUCCESS);
        cf_result_clear(&wres);
        cf_request_clear(&req);
        usleep(1500 * 1000);
    }
    it_request_init(&req, CF_LANG_SHELL,
                    "for i in 1 2 3 4 5; do echo \"line $i\"; echo \"err $i\" >&2; sleep 0.3; done");
    req.stream = true;
    snprintf(col.id, sizeof(col.id), "%s", req.id);
    cf_result res = {0};
    int64_t t0 = cf_mono_us();
    it_submit_wait(d, &req, 60 * SEC, &res);
    int64_t result_at = cf_mono_us();
    if (res.status != CF_STATUS_SUCCESS) {
        it_worker_dump_log(&w);
        fail_msg("status %s: %s", cf_status_name(res.status), res.reason ? res.reason : "-");
    }
    /* The sandbox path asked for is the one taken (warm: prepared ahead). */
    if (warm)
        assert_string_equal(res.meta.sandbox, strstr(warm, "true") ? "warm" : "cold");
    wait_chunks(&col, res.chunks, 10 * SEC);
    check_chunks_match(&col, &res);
    assert_true(res.chunks >= 5); /* lines 300 ms apart are not coalesced into fewer */
    /* The first line was seen long before the program ended (it runs 1.5 s). */
    int64_t first_stdout = 0, last_stdout = 0;
    for (size_t i = 0; i < col.n; i++)
        if (col.seen[i].stream == CF_CHUNK_STDOUT) {
            if (!first_stdout)
                first_stdout = col.seen[i].arrived_us;
            last_stdout = col.seen[i].arrived_us;
        }
    print_message("%s%s: %" PRId64 " chunks, first stdout chunk %lld ms after submit, result %lld ms\n", backend,
                  warm ? warm : "", res.chunks, (long long)((first_stdout - t0) / 1000),
                  (long long)((result_at - t0) / 1000));
    assert_true(first_stdout > 0);
    assert_true(result_at - first_stdout > 900 * 1000LL);
    assert_true(last_stdout - first_stdout > 900 * 1000LL); /* spread over the run, not one burst */
    assert_memory_equal(res.stdout_data.data, "line 1\nline 2\n", 14);
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    collector_free(&col);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

static void stream_process(void **state)
{
    (void)state;
    lines_arrive_while_running("process", NULL);
}

static void stream_sandbox_cold(void **state)
{
    (void)state;
    lines_arrive_while_running("sandbox", "--sandbox-warm=false");
}

static void stream_sandbox_warm(void **state)
{
    (void)state;
    lines_arrive_while_running("sandbox", "--sandbox-warm=true");
}

/* A flood with a 1000-byte stdout cap: the chunks carry exactly the 1000
 * bytes the result keeps, nothing past the cap. */
static void stream_caps_hold(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "stream-caps", 1);
    it_worker w;
    it_worker_start(&w, &t, "stream-caps-w1", NULL);
    collector col;
    cf_dispatcher *d = stream_dispatcher(&t, &col);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "i=0; while [ $i -lt 20000 ]; do echo xxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; "
                                         "head -c 5000 /dev/zero >&2");
    req.stream = true;
    req.policy.max_stdout_bytes = 1000;
    req.policy.max_stderr_bytes = 700;
    snprintf(col.id, sizeof(col.id), "%s", req.id);
    cf_result res = {0};
    it_submit_wait(d, &req, 60 * SEC, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(res.stdout_truncated);
    assert_true(res.stderr_truncated);
    assert_int_equal(res.stdout_data.len, 1000);
    assert_int_equal(res.stderr_data.len, 700);
    wait_chunks(&col, res.chunks, 10 * SEC);
    check_chunks_match(&col, &res);
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    collector_free(&col);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

/* codefleet submit --follow: the program's stdout and stderr come out on
 * the CLI's own, whole and in order, the summary on stderr; --json gives one
 * chunk line per chunk, then the result. */
static void stream_cli_follow(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "stream-cli", 2);
    it_worker w;
    it_worker_start(&w, &t, "stream-cli-w1", NULL);
    char tmp[] = "/tmp/cf-it-follow-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    static char out[65536], err[65536];
    const char *code = "for i in 1 2 3; do echo out $i; echo err $i >&2; sleep 0.2; done; printf 'tail-no-newline'";
    const char *args[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "60s", "submit",
                          "--follow", "-l", "shell", "--code", code, NULL};
    int rc = it_cli_run(args, tmp, out, sizeof(out), err, sizeof(err));
    if (rc != 0)
        fail_msg("exit %d; stdout: %s; stderr: %s", rc, out, err);
    assert_string_equal(out, "out 1\nout 2\nout 3\ntail-no-newline");
    assert_non_null(strstr(err, "err 1\nerr 2\nerr 3\n"));
    assert_non_null(strstr(err, "status:   success"));
    assert_null(strstr(out, "status:")); /* the summary is not mixed into the program's stdout */

    const char *jargs[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "60s", "--json",
                           "submit", "--follow", "-l", "shell", "--code", "echo a; sleep 0.3; echo b", NULL};
    rc = it_cli_run(jargs, tmp, out, sizeof(out), err, sizeof(err));
    assert_int_equal(rc, 0);
    int chunk_lines = 0, result_lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "{\"chunk\":", 9) == 0) {
            assert_int_equal(result_lines, 0); /* chunks come before the result */
            chunk_lines++;
        } else if (strstr(line, "\"status\":\"success\"")) {
            result_lines++;
        }
    }
    assert_int_equal(chunk_lines, 2);
    assert_int_equal(result_lines, 1);
    /* --follow with --no-wait is a usage error. */
    const char *bad[] = {"--request-topic", t.requests, "submit", "--follow", "--no-wait", "--", "/bin/true", NULL};
    assert_int_equal(it_cli_run(bad, tmp, out, sizeof(out), err, sizeof(err)), 2);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

static bool file_has(const char *path, const char *text)
{
    char buf[4096] = {0};
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* codefleet follow (issue 31, reattach): a client that did not send the
 * request attaches to it while it runs, after its first output was
 * published, and gets that output (replayed from the output topic), what
 * it prints after, and the result;
 * attached after the end, the same output and result; an id nobody sent
 * ends in "no result" (exit 5), saying what it knows. */
static void stream_cli_reattach(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "stream-follow", 2);
    it_worker w;
    it_worker_start(&w, &t, "stream-follow-w1", NULL);
    char tmp[] = "/tmp/cf-it-reattach-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    assert_int_equal(chmod(tmp, 0777), 0);
    char release[96], code[512], out_path[96];
    snprintf(release, sizeof(release), "%s/release", tmp);
    snprintf(out_path, sizeof(out_path), "%s/follow.out", tmp);
    /* Blocks until the test releases it: "before" is printed (and
     * published) before anyone follows. */
    snprintf(code, sizeof(code), "echo before; while [ ! -e %s ]; do sleep 0.05; done; echo after", release);
    static char out[65536], err[65536];
    const char *sub[] = {"--request-topic", t.requests, "--result-topic", t.results, "submit", "--no-wait",
                         "--stream", "-l", "shell", "--code", code, NULL};
    assert_int_equal(it_cli_run(sub, tmp, out, sizeof(out), err, sizeof(err)), 0);
    char id[128];
    snprintf(id, sizeof(id), "%.*s", (int)strcspn(out, "\n"), out);
    assert_true(cf_id_valid(id, strlen(id)));

    /* Until "before" is on the output topic (a short follow shows it as a
     * chunk line, then ends without a result): the follow below then
     * attaches after it was published, and must replay it. */
    const char *peek[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "1s", "--json",
                          "follow", id, NULL};
    int64_t published_by = cf_mono_us() + 90 * SEC;
    bool published = false;
    while (!published && cf_mono_us() < published_by) {
        assert_int_equal(it_cli_run(peek, tmp, out, sizeof(out), err, sizeof(err)), 5);
        published = strstr(out, "{\"chunk\":") != NULL;
    }
    if (!published) {
        it_worker_dump_log(&w);
        fail_msg("'before' was not published within 90 s");
    }
    const char *fol[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "120s",
                         "follow", id, NULL};
    char err_path[120];
    snprintf(err_path, sizeof(err_path), "%s/follow.err", tmp);
    pid_t pid = it_cli_start(fol, out_path, err_path);
    int64_t until = cf_mono_us() + 90 * SEC;
    while (!file_has(out_path, "before\n") && cf_mono_us() < until)
        usleep(20 * 1000);
    if (!file_has(out_path, "before\n")) {
        kill(pid, SIGKILL);
        it_worker_dump_log(&w);
        fail_msg("follow printed no 'before' within 90 s");
    }
    FILE *rf = fopen(release, "w");
    assert_non_null(rf);
    fclose(rf);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char whole[4096] = {0};
    FILE *of = fopen(out_path, "r");
    assert_non_null(of);
    size_t n = fread(whole, 1, sizeof(whole) - 1, of);
    fclose(of);
    whole[n] = '\0';
    assert_string_equal(whole, "before\nafter\n");

    /* After the end: the chunks replayed, then the result. */
    const char *jfol[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "60s",
                          "--json", "follow", id, NULL};
    assert_int_equal(it_cli_run(jfol, tmp, out, sizeof(out), err, sizeof(err)), 0);
    int chunk_lines = 0, result_lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "{\"chunk\":", 9) == 0) {
            assert_int_equal(result_lines, 0);
            chunk_lines++;
        } else if (strstr(line, "\"status\":\"success\"")) {
            result_lines++;
        }
    }
    assert_int_equal(chunk_lines, 2);
    assert_int_equal(result_lines, 1);

    /* An id nobody sent. */
    const char *none[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "3s", "follow",
                          "never-sent-0001", NULL};
    assert_int_equal(it_cli_run(none, tmp, out, sizeof(out), err, sizeof(err)), 5);
    assert_non_null(strstr(err, "no result for never-sent-0001"));
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

static void expect_rejected(cf_dispatcher *d, cf_request *req, const char *want)
{
    cf_result res = {0};
    it_submit_wait(d, req, 60 * SEC, &res);
    if (res.status != CF_STATUS_REJECTED || !res.reason || !strstr(res.reason, want))
        fail_msg("status %s, reason \"%s\": want rejected with \"%s\"", cf_status_name(res.status),
                 res.reason ? res.reason : "", want);
    print_message("rejected: %s\n", res.reason);
    assert_int_equal(res.chunks, 0);
    cf_result_clear(&res);
}

/* Where chunks cannot go, the request is rejected with the reason, and its
 * program never runs. */
static void stream_rejections(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "stream-rej", 1);
    char a_dlq[160], a_reply[160], reply_to[128];
    /* A reply_to topic whose output topic would be the dead-letter topic. */
    snprintf(reply_to, sizeof(reply_to), "%s.rt", t.dlq);
    snprintf(a_dlq, sizeof(a_dlq), "--dlq-topic=%s.output", reply_to);
    snprintf(a_reply, sizeof(a_reply), "--profile.default.reply-to=%s", reply_to);
    cf_error err;
    cf_error_clear(&err);
    const char *rt_names[2] = {reply_to, a_dlq + strlen("--dlq-topic=")};
    if (cf_kafka_create_topics_ex(it_brokers(), it_kafka(), rt_names, 2, 1, -1, 30 * SEC, &err) < 0)
        fail_msg("creating topics: %s", err.msg);

    it_worker w;
    const char *args[] = {a_dlq, a_reply, NULL};
    it_worker_start(&w, &t, "stream-rej-w1", args);
    cf_dispatcher *d = it_dispatcher_new(&t);
    /* The answer goes where reply_to says (that was allowed). */
    it_topics rt = t;
    snprintf(rt.results, sizeof(rt.results), "%.95s", reply_to);
    cf_dispatcher *drt = it_dispatcher_new(&rt);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo ran > /tmp/cf-it-stream-ran; echo hi");
    unlink("/tmp/cf-it-stream-ran");
    req.stream = true;
    cf_str_set(&req.reply_to, reply_to);
    expect_rejected(drt, &req, "is one of the fleet's own");
    cf_request_clear(&req);
    cf_dispatcher_destroy(drt);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);

    /* Streaming off. */
    const char *off[] = {"--stream-topic-suffix=", NULL};
    it_worker_start(&w, &t, "stream-rej-w2", off);
    it_request_init(&req, CF_LANG_SHELL, "echo ran > /tmp/cf-it-stream-ran; echo hi");
    req.stream = true;
    expect_rejected(d, &req, "streaming is off");
    cf_request_clear(&req);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);

    /* The output topic does not exist. */
    const char *missing[] = {"--stream-topic-suffix=.nosuchtopic", NULL};
    it_worker_start(&w, &t, "stream-rej-w3", missing);
    it_request_init(&req, CF_LANG_SHELL, "echo ran > /tmp/cf-it-stream-ran; echo hi");
    req.stream = true;
    expect_rejected(d, &req, "does not exist");
    cf_request_clear(&req);
    /* The same request without streaming runs: the rejections were about
     * the stream alone. */
    cf_result res = {0};
    it_request_init(&req, CF_LANG_SHELL, "echo hi");
    it_submit_wait(d, &req, 60 * SEC, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    cf_request_clear(&req);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
    assert_int_equal(access("/tmp/cf-it-stream-ran", F_OK), -1); /* no rejected program ran */

    /* A backend that only knows its output at the end (the embedded js
     * runtime, when this build has it). */
    const char *js[] = {"--backends=js,process", NULL};
    it_worker_start(&w, &t, "stream-rej-w4", js);
    if (it_worker_wait_log(&w, "isolation=", 20000) && it_worker_log_contains(&w, "js (default): isolation=")) {
        it_request_init(&req, CF_LANG_JAVASCRIPT, "console.log(1)");
        cf_str_set(&req.backend, "js");
        req.stream = true;
        expect_rejected(d, &req, "stream: backend 'js' cannot stream");
        cf_request_clear(&req);
    } else {
        print_message("no js backend in this build: that case skipped\n");
    }
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
    cf_dispatcher_destroy(d);
}

/* Start notices (SPEC.md 13.1): a request sent with notify_start is "queued"
 * until a worker's slot takes it and "running" after; the CLI's wait says
 * which.  A notice is never taken for output, and only requests that ask
 * get one. */
static int find_start(cf_dispatcher *d, const char *id, int64_t since_us, cf_chunk *out)
{
    cf_error err;
    cf_error_clear(&err);
    int rc = cf_dispatcher_find_start(d, id, since_us, 30 * SEC, out, &err);
    if (rc < 0)
        fail_msg("find_start %s: %s", id, err.msg);
    return rc;
}

static void stream_start_notices(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "stream-start", 2);
    char tmp[] = "/tmp/cf-it-start-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    static char out[65536], err[65536];
    char id[64];
    snprintf(id, sizeof(id), "start-%" PRIx64, (uint64_t)cf_now_us());
    int64_t since = cf_now_us();

    /* No worker yet: the CLI's wait runs out and says the request is queued. */
    const char *q[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "2s", "submit",
                       "--id", id, "-l", "shell", "--code", "sleep 20; echo slept", NULL};
    int rc = it_cli_run(q, tmp, out, sizeof(out), err, sizeof(err));
    print_message("queued: exit %d: %s", rc, err);
    assert_int_equal(rc, 5);
    assert_non_null(strstr(err, "it is most likely queued: no worker has reported starting it"));

    /* A worker takes it: the notice names the worker, and the CLI says running. */
    it_worker w;
    it_worker_start(&w, &t, "stream-start-w1", NULL);
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_chunk notice = {0};
    int64_t until = cf_mono_us() + 120 * SEC;
    while (find_start(d, id, since, &notice) == 0 && cf_mono_us() < until)
        usleep(100 * 1000);
    if (notice.kind != CF_CHUNK_START) {
        it_worker_dump_log(&w);
        fail_msg("no start notice for %s within 120 s", id);
    }
    assert_string_equal(notice.id, id);
    assert_string_equal(notice.worker, "stream-start-w1");
    assert_true(notice.at_us >= since);
    cf_chunk_clear(&notice);
    const char *r[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "1s", "wait", id,
                       NULL};
    rc = it_cli_run(r, tmp, out, sizeof(out), err, sizeof(err));
    print_message("running: exit %d: %s", rc, err);
    assert_int_equal(rc, 5);
    assert_non_null(strstr(err, "it is running: worker stream-start-w1 started it"));
    /* And its result comes as usual. */
    const char *f[] = {"--request-topic", t.requests, "--result-topic", t.results, "--timeout", "120s", "wait", id,
                       NULL};
    rc = it_cli_run(f, tmp, out, sizeof(out), err, sizeof(err));
    if (rc != 0 || !strstr(out, "slept")) {
        it_worker_dump_log(&w);
        fail_msg("wait: exit %d; stdout: %s; stderr: %s", rc, out, err);
    }

    /* With stream: the notice is not a chunk, and it names the run the
     * chunks and the result name. */
    collector col;
    cf_dispatcher *ds = stream_dispatcher(&t, &col);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo a; echo b >&2");
    req.stream = true;
    req.notify_start = true;
    snprintf(col.id, sizeof(col.id), "%s", req.id);
    cf_result res = {0};
    since = cf_now_us();
    it_submit_wait(ds, &req, 60 * SEC, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    wait_chunks(&col, res.chunks, 10 * SEC);
    check_chunks_match(&col, &res);
    assert_int_equal(find_start(d, req.id, since, &notice), 1);
    assert_string_equal(notice.run, res.meta.run);
    cf_chunk_clear(&notice);
    cf_dispatcher_stats st;
    cf_dispatcher_get_stats(ds, &st);
    assert_int_equal(st.chunks_malformed, 0);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Without notify_start, no notice. */
    it_request_init(&req, CF_LANG_SHELL, "echo quiet");
    since = cf_now_us();
    it_submit_wait(d, &req, 60 * SEC, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(find_start(d, req.id, since, &notice), 0);
    cf_result_clear(&res);
    cf_request_clear(&req);

    cf_dispatcher_destroy(ds);
    collector_free(&col);
    cf_dispatcher_destroy(d);
    snprintf(out, sizeof(out), "rm -rf %s", tmp);
    assert_int_equal(system(out), 0);
    assert_true(it_worker_stop(&w, SIGTERM, 30000) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stream_process),
        cmocka_unit_test(stream_sandbox_cold),
        cmocka_unit_test(stream_sandbox_warm),
        cmocka_unit_test(stream_caps_hold),
        cmocka_unit_test(stream_cli_follow),
        cmocka_unit_test(stream_cli_reattach),
        cmocka_unit_test(stream_rejections),
        cmocka_unit_test(stream_start_notices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
