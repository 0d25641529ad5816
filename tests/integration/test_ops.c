/* Integration tests of what operators see of a worker (issue 14), each
 * against a real consumer of it:
 *
 * - /metrics after real requests through the broker: the counts are
 *   checked series by series, `promtool check metrics` (Debian's
 *   prometheus package) lints the exposition, a real Prometheus server
 *   scrapes the worker and answers a PromQL query with the worker's count,
 *   and every metric the Grafana dashboard uses must be in the scrape.
 * - /healthz and /readyz: ready once assigned; not ready while draining on
 *   SIGTERM (a running execution still finishes and is answered); not
 *   ready with Redis unreachable; 404 and 405 for anything else.
 * - Traces: a request's traceparent is continued; the result carries the
 *   worker's span; the log lines carry the ids; the spans reach an OTLP/HTTP
 *   receiver (libmicrohttpd, in this test) with the right parents and order;
 *   a collector that refuses spans costs nothing but dropped spans.
 */
#include "it_support.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_dispatcher.h"
#include "cf_trace.h"
#include "cf_util.h"

extern char **environ;

/* ---------------------------------------------------------------- HTTP */

static bool wait_status(int port, const char *path, long want, int timeout_ms)
{
    for (int64_t until = cf_mono_us() + timeout_ms * 1000LL; cf_mono_us() < until; usleep(100000))
        if (it_http("GET", port, path, NULL) == want)
            return true;
    return false;
}

static int run_cmd(const char *const *argv, const char *out_path)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_path) {
        posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void submit(cf_dispatcher *d, cf_language lang, const char *code, const char *traceparent, cf_result *res)
{
    cf_request req;
    it_request_init(&req, lang, code);
    if (traceparent) {
        req.trace = calloc(1, sizeof(*req.trace));
        req.trace[0].key = strdup("traceparent");
        req.trace[0].value = strdup(traceparent);
        req.n_trace = 1;
    }
    it_submit_wait(d, &req, 60 * 1000000LL, res);
    cf_request_clear(&req);
}

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &l), 0);
    close(s);
    return ntohs(a.sin_port);
}

/* ---------------------------------------------------------------- metrics */

static void test_metrics_scraped_by_real_consumers(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t, tw;
    it_topics_create(&t, "ops-metrics", 2);
    it_topics_create(&tw, "ops-workers", 1); /* its result topic is the workers topic */
    char a_workers[160];
    snprintf(a_workers, sizeof(a_workers), "--workers-topic=%s", tw.results);
    it_worker w;
    const char *extra[] = {"--metrics-listen=127.0.0.1:0", a_workers, "--report-interval=1s", NULL};
    it_worker_start(&w, &t, "ops-m", extra);
    int port = it_worker_metrics_port(&w);
    assert_true(wait_status(port, "/readyz", 200, 60000));
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_result res = {0};
    submit(d, CF_LANG_PYTHON, "print(1)", NULL, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    submit(d, CF_LANG_PYTHON, "print(2)", NULL, &res);
    cf_result_clear(&res);
    submit(d, CF_LANG_SHELL, "exit 3", NULL, &res);
    assert_int_equal(res.status, CF_STATUS_FAILED);
    cf_result_clear(&res);
    /* Rejected: a backend this worker does not run (a request's own string
     * never becomes a label: the series says backend "none"). */
    cf_request req;
    it_request_init(&req, CF_LANG_PYTHON, "print(3)");
    req.backend = strdup("no-such-backend-\"x\"");
    it_submit_wait(d, &req, 60 * 1000000LL, &res);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* A request is counted when the broker acknowledges its answer, which
     * the client can see first: wait until all four are counted. */
    char *text = NULL;
    for (int64_t until = cf_mono_us() + 60 * 1000000LL;; usleep(100000)) {
        free(text);
        text = NULL;
        assert_int_equal(it_http("GET", port, "/metrics", &text), 200);
        if (it_metric_sample(text, "codefleet_results_produced_total") >= 4 || cf_mono_us() >= until)
            break;
    }
    assert_true(it_metric_sample(text, "codefleet_requests_total{status=\"success\",backend=\"process\",language=\"python\"}") == 2);
    assert_true(it_metric_sample(text, "codefleet_requests_total{status=\"failed\",backend=\"process\",language=\"shell\"}") == 1);
    assert_true(it_metric_sample(text, "codefleet_requests_total{status=\"rejected\",backend=\"none\",language=\"python\"}") == 1);
    assert_null(strstr(text, "no-such-backend"));
    assert_true(it_metric_sample(text, "codefleet_results_produced_total") == 4);
    assert_true(it_metric_sample(text, "codefleet_execution_duration_seconds_count{backend=\"process\",language=\"python\"}") == 2);
    assert_true(it_metric_sample(text, "codefleet_execution_duration_seconds_bucket{backend=\"process\",language=\"python\",le=\"+Inf\"}") == 2);
    assert_true(it_metric_sample(text, "codefleet_request_duration_seconds_count{backend=\"process\"}") == 3);
    assert_true(it_metric_sample(text, "codefleet_queue_wait_seconds_count") == 3);
    assert_true(it_metric_sample(text, "codefleet_slots") == 2);
    assert_true(it_metric_sample(text, "codefleet_ready") == 1);
    assert_true(it_metric_sample(text, "codefleet_draining") == 0);
    assert_true(it_metric_sample(text, "codefleet_dead_lettered_total") == 0);
    /* The bound on all the worker starts, and what that uses now. */
    assert_true(it_metric_sample(text, "codefleet_children_memory_max_bytes") > 0);
    assert_true(it_metric_sample(text, "codefleet_children_pids_max") > 0);
    assert_true(it_metric_sample(text, "codefleet_children_memory_bytes") >= 0);
    assert_true(it_metric_sample(text, "codefleet_children_pids") >= 0);
    /* Lag of both partitions of the request topic, from librdkafka's
     * statistics (every 2 s): all answered, nothing behind. */
    char series[300];
    snprintf(series, sizeof(series), "codefleet_consumer_lag{topic=\"%s\",partition=\"0\"}", t.requests);
    for (int i = 0; i < 50 && it_metric_sample(text, series) < 0; i++) {
        free(text);
        usleep(200000);
        it_http("GET", port, "/metrics", &text);
    }
    assert_true(it_metric_sample(text, series) == 0);

    /* promtool lints the exposition as Prometheus itself parses it. */
    char dir[] = "/tmp/cf-ops-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char scrape[128], lint[128];
    snprintf(scrape, sizeof(scrape), "%s/metrics.txt", dir);
    snprintf(lint, sizeof(lint), "%s/promtool.out", dir);
    FILE *f = fopen(scrape, "w");
    fputs(text, f);
    fclose(f);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s > %s 2>&1", scrape, lint);
    const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    int rc = run_cmd(sh, NULL);
    if (rc != 0) {
        snprintf(cmd, sizeof(cmd), "cat %s >&2", lint);
        run_cmd(sh, NULL);
    }
    assert_int_equal(rc, 0);

    /* The dashboard uses only metrics the worker has. */
    const char *src = getenv("CF_SOURCE_DIR");
    char dash_check[512];
    snprintf(dash_check, sizeof(dash_check), "%s/tests/k8s/check_dashboard.py", src ? src : ".");
    const char *dc[] = {"python3", dash_check, scrape, NULL};
    assert_int_equal(run_cmd(dc, NULL), 0);

    /* A real Prometheus scrapes the worker and answers PromQL. */
    int pport = free_port();
    char conf[128], data[128], plog[128], listen[64];
    snprintf(conf, sizeof(conf), "%s/prometheus.yml", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(plog, sizeof(plog), "%s/prometheus.log", dir);
    snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", pport);
    f = fopen(conf, "w");
    fprintf(f, "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: codefleet\n    static_configs:\n"
               "      - targets: ['127.0.0.1:%d']\n", port);
    fclose(f);
    char a_conf[160], a_data[160];
    snprintf(a_conf, sizeof(a_conf), "--config.file=%s", conf);
    snprintf(a_data, sizeof(a_data), "--storage.tsdb.path=%s", data);
    pid_t prom;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, plog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const char *pargv[] = {"prometheus", a_conf, a_data, listen, NULL};
    assert_int_equal(posix_spawnp(&prom, "prometheus", &fa, NULL, (char *const *)pargv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    double got = -1;
    for (int i = 0; i < 120 && got != 4; i++) {
        usleep(500000);
        char *q = NULL;
        if (it_http("GET", pport, "/api/v1/query?query=codefleet_results_produced_total", &q) == 200) {
            json_t *j = json_loads(q, 0, NULL);
            json_t *v = json_array_get(json_object_get(json_object_get(j, "data"), "result"), 0);
            const char *val = json_string_value(json_array_get(json_object_get(v, "value"), 1));
            if (val)
                got = strtod(val, NULL);
            json_decref(j);
        }
        free(q);
    }
    char *q = NULL;
    long up = it_http("GET", pport, "/api/v1/query?query=up%7Bjob%3D%22codefleet%22%7D", &q);
    json_t *uj = json_loads(q, 0, NULL);
    const char *upv = json_string_value(
        json_array_get(json_object_get(json_array_get(json_object_get(json_object_get(uj, "data"), "result"), 0), "value"), 1));
    bool up_one = upv && strcmp(upv, "1") == 0;
    json_decref(uj);
    kill(prom, SIGTERM);
    waitpid(prom, NULL, 0);
    if (got != 4) {
        snprintf(cmd, sizeof(cmd), "tail -n 30 %s >&2", plog);
        run_cmd(sh, NULL);
    }
    assert_true(got == 4);
    assert_int_equal(up, 200);
    assert_true(up_one); /* Prometheus itself says the target is up */
    free(q);
    free(text);

    /* codefleet top: the worker, its slots and what it answered, from its
     * periodic report; the group's lag. */
    char a_rt[160], a_wg[160];
    snprintf(a_rt, sizeof(a_rt), "--request-topic=%s", t.requests);
    snprintf(a_wg, sizeof(a_wg), "--worker-group=%s", t.group);
    const char *top[] = {a_workers, a_rt, a_wg, "top", "--once", "--json", NULL};
    static char out[1 << 16], errb[1 << 14];
    bool seen = false;
    for (int i = 0; i < 20 && !seen; i++) {
        /* Until the worker's report is read, --once has no stats to show
         * and says so (exit 1). */
        int trc = it_cli_run(top, dir, out, sizeof(out), errb, sizeof(errb));
        if (trc != 0 && !(trc == 1 && strstr(out, "no worker stats")))
            fail_msg("codefleet top --once: exit %d: %s %s", trc, out, errb);
        json_t *pic = json_loads(out, 0, NULL);
        json_t *wk = json_array_get(json_object_get(pic, "workers"), 0);
        const char *wid = json_string_value(json_object_get(wk, "worker_id"));
        seen = wk && wid && strcmp(wid, "ops-m") == 0 &&
               json_integer_value(json_object_get(wk, "slots")) == 2 &&
               json_integer_value(json_object_get(wk, "answered")) == 4 &&
               json_integer_value(json_object_get(pic, "lag")) == 0;
        json_decref(pic);
        if (!seen)
            usleep(500000);
    }
    if (!seen)
        fail_msg("codefleet top never showed the worker: %s %s", out, errb);
    const char *top_text[] = {a_workers, a_rt, a_wg, "top", "--once", NULL};
    assert_int_equal(it_cli_run(top_text, dir, out, sizeof(out), errb, sizeof(errb)), 0);
    assert_non_null(strstr(out, "ops-m"));
    assert_non_null(strstr(out, "ANSWERS/S"));
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    run_cmd(sh, NULL);
    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 30000), 0);
}

/* ---------------------------------------------------------------- health */

static void test_health_and_drain(void **state)
{
    (void)state;
    IT_REQUIRE_REDIS();
    it_topics t;
    it_topics_create(&t, "ops-health", 1);
    char a_redis[300];
    snprintf(a_redis, sizeof(a_redis), "--redis=%s", it_redis());
    it_worker w;
    const char *extra[] = {"--metrics-listen=127.0.0.1:0", a_redis, "--shutdown-grace=30s", NULL};
    it_worker_start(&w, &t, "ops-h", extra);
    int port = it_worker_metrics_port(&w);
    /* Live once the main loop turns (503 "starting" before). */
    assert_true(wait_status(port, "/healthz", 200, 60000));
    assert_true(wait_status(port, "/readyz", 200, 60000));
    assert_int_equal(it_http("GET", port, "/nope", NULL), 404);
    assert_int_equal(it_http("POST", port, "/metrics", NULL), 405);

    /* A long execution, then SIGTERM: not ready at once, alive, and the
     * execution is still answered. */
    cf_dispatcher *d = it_dispatcher_new(&t);
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "sleep 3; echo done");
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_submit(d, &req, &err), 0);
    bool busy = false;
    for (int i = 0; i < 100 && !busy; i++) {
        char *m = NULL;
        it_http("GET", port, "/metrics", &m);
        busy = it_metric_sample(m, "codefleet_slots_busy") == 1;
        free(m);
        usleep(100000);
    }
    assert_true(busy);
    kill(w.pid, SIGTERM);
    char *why = NULL;
    bool draining = false;
    for (int i = 0; i < 50 && !draining; i++) {
        free(why);
        why = NULL;
        draining = it_http("GET", port, "/readyz", &why) == 503 && strstr(why, "draining");
        if (!draining)
            usleep(50000);
    }
    assert_true(draining);
    free(why);
    assert_int_equal(it_http("GET", port, "/healthz", NULL), 200);
    char *m = NULL;
    it_http("GET", port, "/metrics", &m);
    assert_true(it_metric_sample(m, "codefleet_draining") == 1);
    assert_true(it_metric_sample(m, "codefleet_ready") == 0);
    free(m);
    cf_result res = {0};
    assert_int_equal(cf_dispatcher_wait(d, req.id, 60 * 1000000LL, &res, &err), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_non_null(strstr((const char *)res.stdout_data.data, "done"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 30000), 0);

    /* Redis configured but unreachable: alive, not ready, and why. */
    it_worker w2;
    const char *extra2[] = {"--metrics-listen=127.0.0.1:0", "--redis=127.0.0.1:1", NULL};
    it_worker_start(&w2, &t, "ops-h2", extra2);
    port = it_worker_metrics_port(&w2);
    assert_true(wait_status(port, "/healthz", 200, 60000));
    bool redis_said = false;
    for (int i = 0; i < 100 && !redis_said; i++) {
        char *b = NULL;
        redis_said = it_http("GET", port, "/readyz", &b) == 503 && strstr(b, "redis");
        free(b);
        usleep(200000);
    }
    assert_true(redis_said);
    assert_int_equal(it_worker_stop(&w2, SIGTERM, 30000), 0);
    cf_dispatcher_destroy(d);
}

/* ---------------------------------------------------------------- traces */

typedef struct receiver {
    pthread_mutex_t mu;
    json_t *spans; /* every span received */
    int posts;
    int refuse;    /* answer 500 */
    char path[64];
} receiver;

typedef struct upload {
    char *p;
    size_t len;
} upload;

static enum MHD_Result on_post(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **con_cls)
{
    (void)version;
    receiver *r = cls;
    upload *u = *con_cls;
    if (!u) {
        *con_cls = calloc(1, sizeof(upload));
        return MHD_YES;
    }
    if (*size) {
        char *p = realloc(u->p, u->len + *size + 1);
        if (!p)
            return MHD_NO;
        memcpy(p + u->len, data, *size);
        u->p = p;
        u->len += *size;
        u->p[u->len] = '\0';
        *size = 0;
        return MHD_YES;
    }
    unsigned status = 200;
    pthread_mutex_lock(&r->mu);
    snprintf(r->path, sizeof(r->path), "%s", url);
    r->posts++;
    if (r->refuse) {
        status = 500;
    } else if (strcmp(method, "POST") == 0 && u->p) {
        json_t *doc = json_loads(u->p, 0, NULL);
        json_t *rs, *ss, *sp;
        size_t i, k, m;
        json_array_foreach(json_object_get(doc, "resourceSpans"), i, rs)
            json_array_foreach(json_object_get(rs, "scopeSpans"), k, ss)
                json_array_foreach(json_object_get(ss, "spans"), m, sp)
                    json_array_append(r->spans, sp);
        json_decref(doc);
    }
    pthread_mutex_unlock(&r->mu);
    free(u->p);
    free(u);
    *con_cls = NULL;
    struct MHD_Response *resp = MHD_create_response_from_buffer(2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static json_t *span_named(receiver *r, const char *trace, const char *name)
{
    json_t *sp, *found = NULL;
    size_t i;
    pthread_mutex_lock(&r->mu);
    json_array_foreach(r->spans, i, sp)
    {
        const char *t = json_string_value(json_object_get(sp, "traceId"));
        const char *n = json_string_value(json_object_get(sp, "name"));
        if (t && n && strcmp(t, trace) == 0 && strcmp(n, name) == 0)
            found = json_incref(sp);
    }
    pthread_mutex_unlock(&r->mu);
    return found;
}

static long long ns(json_t *sp, const char *k)
{
    return strtoll(json_string_value(json_object_get(sp, k)), NULL, 10);
}

static void test_traces_continued_and_exported(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    receiver r = {.spans = json_array()};
    pthread_mutex_init(&r.mu, NULL);
    int rport = free_port();
    struct MHD_Daemon *mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, (uint16_t)rport, NULL,
                                              NULL, on_post, &r, MHD_OPTION_END);
    assert_non_null(mhd);
    it_topics t;
    it_topics_create(&t, "ops-trace", 1);
    char a_otlp[100];
    snprintf(a_otlp, sizeof(a_otlp), "--otlp-endpoint=http://127.0.0.1:%d/", rport);
    it_worker w;
    const char *extra[] = {a_otlp, "--metrics-listen=127.0.0.1:0", NULL};
    it_worker_start(&w, &t, "ops-t", extra);
    int port = it_worker_metrics_port(&w);
    cf_dispatcher *d = it_dispatcher_new(&t);

    const char *trace = "4bf92f3577b34da6a3ce929d0e0e4736", *caller = "00f067aa0ba902b7";
    char tp[64];
    snprintf(tp, sizeof(tp), "00-%s-%s-01", trace, caller);
    cf_result res = {0};
    submit(d, CF_LANG_PYTHON, "print('traced')", tp, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_non_null(res.meta.traceparent);
    cf_trace_ctx got;
    assert_int_equal(cf_traceparent_parse(res.meta.traceparent, &got), 0);
    char got_trace[33], span[17];
    cf_trace_hex(got.trace_id, 16, got_trace);
    cf_trace_hex(got.span_id, 8, span);
    assert_string_equal(got_trace, trace);
    assert_string_not_equal(span, caller);
    assert_int_equal(got.flags, 1);
    cf_result_clear(&res);

    /* The worker's lines about the request carry the trace (text format:
     * " trace=... span=..."). */
    char needle[100];
    snprintf(needle, sizeof(needle), "trace=%s span=%s", trace, span);
    assert_true(it_worker_wait_log(&w, needle, 5000));

    /* The spans arrive (batches go every second). */
    json_t *root = NULL;
    for (int i = 0; i < 100 && !(root = span_named(&r, trace, "codefleet.execute")); i++)
        usleep(100000);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "spanId")), span);
    assert_string_equal(json_string_value(json_object_get(root, "parentSpanId")), caller);
    assert_int_equal(json_integer_value(json_object_get(root, "kind")), 5);
    pthread_mutex_lock(&r.mu);
    assert_string_equal(r.path, "/v1/traces");
    pthread_mutex_unlock(&r.mu);
    const char *children[] = {"admission", "queue_wait", "sandbox_setup", "run", "collect", "produce"};
    long long prev_end = ns(root, "startTimeUnixNano");
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++) {
        json_t *c = span_named(&r, trace, children[i]);
        if (!c)
            fail_msg("span %s missing", children[i]);
        assert_string_equal(json_string_value(json_object_get(c, "parentSpanId")), span);
        /* In order, inside the request's span. */
        assert_true(ns(c, "startTimeUnixNano") >= prev_end - 1000);
        assert_true(ns(c, "endTimeUnixNano") >= ns(c, "startTimeUnixNano"));
        assert_true(ns(c, "endTimeUnixNano") <= ns(root, "endTimeUnixNano"));
        prev_end = ns(c, "endTimeUnixNano");
        json_decref(c);
    }
    json_decref(root);

    /* An invalid traceparent: a new trace, the request runs all the same. */
    submit(d, CF_LANG_PYTHON, "print(1)", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(cf_traceparent_parse(res.meta.traceparent, &got), 0);
    cf_trace_hex(got.trace_id, 16, got_trace);
    assert_string_not_equal(got_trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    cf_result_clear(&res);

    /* A collector that refuses: the worker answers, spans are counted as
     * dropped. */
    pthread_mutex_lock(&r.mu);
    r.refuse = 1;
    int posts = r.posts;
    pthread_mutex_unlock(&r.mu);
    submit(d, CF_LANG_PYTHON, "print(2)", NULL, &res);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    cf_result_clear(&res);
    bool dropped = false;
    for (int i = 0; i < 100 && !dropped; i++) {
        char *m = NULL;
        it_http("GET", port, "/metrics", &m);
        dropped = it_metric_sample(m, "codefleet_spans_dropped_total") >= 1 && it_metric_sample(m, "codefleet_spans_exported_total") >= 7;
        free(m);
        usleep(100000);
    }
    assert_true(dropped);
    pthread_mutex_lock(&r.mu);
    assert_true(r.posts > posts);
    pthread_mutex_unlock(&r.mu);

    cf_dispatcher_destroy(d);
    assert_int_equal(it_worker_stop(&w, SIGTERM, 30000), 0);
    MHD_stop_daemon(mhd);
    json_decref(r.spans);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_scraped_by_real_consumers),
        cmocka_unit_test(test_health_and_drain),
        cmocka_unit_test(test_traces_continued_and_exported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
