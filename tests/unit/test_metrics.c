/* Unit tests of the worker's observability pieces that need no broker:
 * the metrics registry's exposition (escaping, histograms, the bound on
 * series), W3C traceparent parsing, the log lines' trace fields, the
 * OTLP exporter's configuration checks and the HTTP endpoints' routing.
 * The exposition is also linted by promtool in tests/integration/test_ops.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_trace.h"
#include "cf_util.h"
#include "metrics_int.h"
#include "observe_int.h"
#include "ops_http_int.h"
#include "otlp_int.h"

static void test_counter_gauge_render(void **state)
{
    (void)state;
    cf_metrics *m = cf_metrics_new();
    static const char *const l[] = {"status", "backend"};
    cf_metric *c = cf_metrics_add(m, CF_METRIC_COUNTER, "x_requests_total", "Requests.\nSecond \\ line.", 2, l, NULL, 0);
    cf_metric *g = cf_metrics_add(m, CF_METRIC_GAUGE, "x_slots", "Slots.", 0, NULL, NULL, 0);
    cf_metric *e = cf_metrics_add(m, CF_METRIC_COUNTER, "x_empty_total", "Nothing yet.", 1, l, NULL, 0);
    (void)e;
    const char *v1[] = {"success", "sandbox"};
    const char *v2[] = {"quote\"back\\slash\nnl", NULL};
    cf_metric_inc(c, 1, v1);
    cf_metric_inc(c, 2, v1);
    cf_metric_inc(c, 1, v2);
    cf_metric_set(g, 4, NULL);
    assert_true(cf_metric_get(c, v1) == 3);
    size_t len = 0;
    char *text = cf_metrics_render(m, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    assert_non_null(strstr(text, "# HELP x_requests_total Requests.\\nSecond \\\\ line.\n"));
    assert_non_null(strstr(text, "# TYPE x_requests_total counter\n"));
    assert_non_null(strstr(text, "x_requests_total{status=\"success\",backend=\"sandbox\"} 3\n"));
    assert_non_null(strstr(text, "x_requests_total{status=\"quote\\\"back\\\\slash\\nnl\",backend=\"\"} 1\n"));
    assert_non_null(strstr(text, "# TYPE x_slots gauge\nx_slots 4\n"));
    /* A labelled family with no series yet: its header only. */
    assert_non_null(strstr(text, "# TYPE x_empty_total counter\n"));
    assert_null(strstr(text, "x_empty_total{"));
    free(text);
    cf_metric_clear(g);
    text = cf_metrics_render(m, &len);
    assert_non_null(strstr(text, "x_slots 0\n"));
    free(text);
    /* A gauge family replaced as a whole: old series gone, new ones in. */
    static const char *const pl[] = {"topic", "partition"};
    cf_metric *lag = cf_metrics_add(m, CF_METRIC_GAUGE, "x_lag", "Lag.", 2, pl, NULL, 0);
    const char *first[] = {"t", "0", "t", "1"};
    const double fv[] = {5, 6};
    cf_metric_replace(lag, 2, first, fv);
    const char *second[] = {"t", "1"};
    const double sv[] = {7};
    cf_metric_replace(lag, 1, second, sv);
    text = cf_metrics_render(m, &len);
    assert_null(strstr(text, "x_lag{topic=\"t\",partition=\"0\"}"));
    assert_non_null(strstr(text, "x_lag{topic=\"t\",partition=\"1\"} 7\n"));
    free(text);
    cf_metrics_destroy(m);
    cf_metrics_destroy(NULL);
}

static void test_histogram_cumulative(void **state)
{
    (void)state;
    cf_metrics *m = cf_metrics_new();
    static const double b[] = {0.1, 1, 10};
    static const char *const l[] = {"backend"};
    cf_metric *h = cf_metrics_add(m, CF_METRIC_HISTOGRAM, "x_seconds", "Latency.", 1, l, b, 3);
    const char *v[] = {"process"};
    cf_metric_observe(h, 0.05, v);
    cf_metric_observe(h, 0.1, v); /* le is inclusive */
    cf_metric_observe(h, 5, v);
    cf_metric_observe(h, 100, v);
    char *text = cf_metrics_render(m, NULL);
    assert_non_null(strstr(text, "x_seconds_bucket{backend=\"process\",le=\"0.1\"} 2\n"));
    assert_null(strstr(text, "0.10000000000000001"));
    assert_non_null(strstr(text, "x_seconds_bucket{backend=\"process\",le=\"1\"} 2\n"));
    assert_non_null(strstr(text, "x_seconds_bucket{backend=\"process\",le=\"10\"} 3\n"));
    assert_non_null(strstr(text, "x_seconds_bucket{backend=\"process\",le=\"+Inf\"} 4\n"));
    assert_non_null(strstr(text, "x_seconds_count{backend=\"process\"} 4\n"));
    assert_non_null(strstr(text, "x_seconds_sum{backend=\"process\"} 105.15"));
    free(text);
    cf_metrics_destroy(m);
}

/* Label values past the bound fold into one "other" series: no sender can
 * grow the registry without end. */
static void test_series_bounded(void **state)
{
    (void)state;
    cf_metrics *m = cf_metrics_new();
    static const char *const l[] = {"topic"};
    cf_metric *c = cf_metrics_add(m, CF_METRIC_COUNTER, "x_total", "X.", 1, l, NULL, 0);
    char name[32];
    for (int i = 0; i < CF_METRICS_MAX_SERIES + 500; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        const char *v[] = {name};
        cf_metric_inc(c, 1, v);
    }
    const char *other[] = {"other"};
    assert_true(cf_metric_get(c, other) == 501); /* all beyond the first MAX - 1 */
    char *text = cf_metrics_render(m, NULL);
    size_t lines = 0;
    for (const char *p = text; (p = strstr(p, "x_total{")); p++)
        lines++;
    assert_int_equal(lines, CF_METRICS_MAX_SERIES);
    free(text);
    cf_metrics_destroy(m);
}

static void test_traceparent(void **state)
{
    (void)state;
    cf_trace_ctx c;
    assert_int_equal(cf_traceparent_parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &c), 0);
    assert_int_equal(c.trace_id[0], 0x4b);
    assert_int_equal(c.span_id[7], 0xb7);
    assert_int_equal(c.flags, 1);
    char buf[64];
    cf_traceparent_format(&c, buf, sizeof(buf));
    assert_string_equal(buf, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    /* A later version may append fields after a dash. */
    assert_int_equal(cf_traceparent_parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra", &c), 0);
    const char *bad[] = {
        "", "00", NULL,
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", /* uppercase */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01", /* zero trace */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", /* zero span */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", /* version ff */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", /* 00 is exactly 55 */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (i == 2)
            assert_int_equal(cf_traceparent_parse(NULL, &c), -1);
        else
            assert_int_equal(cf_traceparent_parse(bad[i], &c), -1);
    }
    uint8_t a[16], b[16];
    cf_trace_new_trace_id(a);
    cf_trace_new_trace_id(b);
    assert_memory_not_equal(a, b, 16);
}

/* Log lines of a thread with a trace carry it; others do not. */
static void test_log_trace_fields(void **state)
{
    (void)state;
    char path[] = "/tmp/cf-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    cf_log_setup(CF_LOG_INFO, CF_LOG_JSON, "t");
    cf_log_set_trace("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    cf_log_info("x", "with");
    cf_log_set_trace(NULL, NULL);
    cf_log_info("x", "without");
    cf_log_set_trace("short", "00f067aa0ba902b7"); /* refused: no fields */
    cf_log_info("x", "bad");
    cf_log_setup(CF_LOG_INFO, CF_LOG_TEXT, "t");
    cf_log_set_trace("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    cf_log_info("x", "text");
    cf_log_set_trace(NULL, NULL);
    dup2(saved, 2);
    close(saved);
    char buf[4096] = "";
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    unlink(path);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\",\"span_id\":\"00f067aa0ba902b7\",\"msg\":\"with\""));
    assert_non_null(strstr(buf, "\"sub\":\"x\",\"msg\":\"without\""));
    assert_non_null(strstr(buf, "\"sub\":\"x\",\"msg\":\"bad\""));
    assert_non_null(strstr(buf, "x: text trace=4bf92f3577b34da6a3ce929d0e0e4736 span=00f067aa0ba902b7\n"));
}

static void test_otlp_config_checked(void **state)
{
    (void)state;
    cf_otlp *o = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_otlp_new("ftp://x", "", "w", &o, &err), -1);
    assert_non_null(strstr(err.msg, "otlp-endpoint"));
    assert_int_equal(cf_otlp_new("http://127.0.0.1:1", "NoEquals", "w", &o, &err), -1);
    assert_non_null(strstr(err.msg, "otlp-headers"));
    /* Nothing listens on port 1: spans are dropped and counted, and
     * destroy is bounded. */
    assert_int_equal(cf_otlp_new("http://127.0.0.1:1/", "Authorization=Bearer x", "w", &o, &err), 0);
    cf_span s = {.name = "t", .kind = CF_SPAN_INTERNAL, .start_ns = 1, .end_ns = 2};
    s.trace_id[0] = 1;
    s.span_id[0] = 1;
    cf_span_attr_add(&s, "k", "v");
    cf_otlp_export(o, &s, 1);
    /* The batch goes within about a second, and fails. */
    for (int i = 0; i < 100 && cf_otlp_get_stats(o).dropped == 0; i++)
        usleep(50000);
    assert_int_equal(cf_otlp_get_stats(o).dropped, 1);
    assert_int_equal(cf_otlp_get_stats(o).exported, 0);
    assert_int_equal(cf_otlp_get_stats(o).failed_batches, 1);
    int64_t t0 = cf_mono_us();
    cf_otlp_destroy(o, 3000);
    assert_true(cf_mono_us() - t0 < 8 * 1000000LL);
    /* An endpoint given with its path keeps it; one without a host is refused. */
    assert_int_equal(cf_otlp_new("http://", "", "w", &o, &err), -1);
    assert_int_equal(cf_otlp_new("http://user:pw@127.0.0.1:1/v1/traces", " A = b , C=d ", "w", &o, &err), 0);
    assert_string_equal(cf_otlp_url(o), "http://***@127.0.0.1:1/v1/traces");
    cf_otlp_destroy(o, 0);
    cf_otlp_destroy(NULL, 0);
}

static char *fake_metrics(void *arg, size_t *len)
{
    (void)arg;
    *len = 4;
    return strdup("m 1\n");
}
static bool fake_live(void *arg, char *why, size_t size)
{
    (void)arg;
    (void)why;
    (void)size;
    return true;
}
static bool fake_ready(void *arg, char *why, size_t size)
{
    snprintf(why, size, "not yet");
    return *(int *)arg != 0;
}

static long get(int port, const char *method, const char *path)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_NOBODY, strcmp(method, "HEAD") == 0 ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L); /* the server sees the path as written */
    FILE *null = fopen("/dev/null", "w");
    curl_easy_setopt(c, CURLOPT_WRITEDATA, null);
    long code = 0;
    /* The server allows 4 connections per address (ops_http.c) and counts
     * a closed one until its polling thread notices the close: on a busy
     * machine the next request can be refused meanwhile.  Routing is what
     * is under test here, so a refused connection is tried again (a
     * condition with a ceiling, not a time). */
    int64_t until = cf_mono_us() + 30 * 1000000LL;
    while (curl_easy_perform(c) != CURLE_OK && cf_mono_us() < until) {
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    fclose(null);
    return code;
}

/* process_start_time_seconds is the process's start (what Prometheus
 * clients report), not the observer's creation: created 1.2 s after this
 * process started, it must say so. */
static void test_process_start_time(void **state)
{
    (void)state;
    struct timespec nap = {1, 200 * 1000 * 1000};
    nanosleep(&nap, NULL);
    cf_worker_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.slots = 1;
    cf_observe *o = NULL;
    cf_error err = {0};
    if (cf_observe_new(&cfg, "w-start", &o, &err) < 0)
        fail_msg("observe: %s", err.msg);
    double now = (double)cf_now_us() / 1e6;
    size_t len = 0;
    char *text = cf_observe_render(o, &len);
    assert_non_null(text);
    const char *line = strstr(text, "\nprocess_start_time_seconds ");
    assert_non_null(line);
    double start = strtod(line + strlen("\nprocess_start_time_seconds "), NULL);
    assert_true(start <= now - 1.15);
    assert_true(start > now - 600);
    free(text);
    cf_observe_destroy(o);
}

static void test_ops_http_routes(void **state)
{
    (void)state;
    int ready = 0;
    cf_ops_hooks hooks = {.arg = &ready, .metrics = fake_metrics, .live = fake_live, .ready = fake_ready};
    cf_ops_http *h = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_ops_http_start("nonsense", &hooks, &h, &err), -1);
    assert_int_equal(cf_ops_http_start("127.0.0.1:99999", &hooks, &h, &err), -1);
    assert_int_equal(cf_ops_http_start("127.0.0.1:0", &hooks, &h, &err), 0);
    int port = cf_ops_http_port(h);
    assert_true(port > 0);
    /* The port is taken: a second server says so. */
    char taken[64];
    snprintf(taken, sizeof(taken), "127.0.0.1:%d", port);
    cf_ops_http *h2 = NULL;
    assert_int_equal(cf_ops_http_start(taken, &hooks, &h2, &err), -1);
    assert_int_equal(get(port, "GET", "/metrics"), 200);
    assert_int_equal(get(port, "HEAD", "/metrics"), 200);
    assert_int_equal(get(port, "GET", "/healthz"), 200);
    assert_int_equal(get(port, "GET", "/readyz"), 503);
    ready = 1;
    assert_int_equal(get(port, "GET", "/readyz"), 200);
    assert_int_equal(get(port, "GET", "/"), 404);
    assert_int_equal(get(port, "GET", "/metrics/../x"), 404);
    assert_int_equal(get(port, "DELETE", "/metrics"), 405);
    cf_ops_http_stop(h);
    cf_ops_http_stop(NULL);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_gauge_render), cmocka_unit_test(test_histogram_cumulative),
        cmocka_unit_test(test_series_bounded),       cmocka_unit_test(test_traceparent),
        cmocka_unit_test(test_log_trace_fields),     cmocka_unit_test(test_otlp_config_checked),
        cmocka_unit_test(test_ops_http_routes),      cmocka_unit_test(test_process_start_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
