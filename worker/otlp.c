/* otlp: see otlp.h. */
#include "otlp_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cf_log.h"
#include "cf_trace.h"
#include "cf_util.h"

#define LOG_SUB "otlp"
#define BATCH_WAIT_MS 1000
#define POST_TIMEOUT_MS 5000

struct cf_otlp {
    char url[1100];
    char shown_url[1100]; /* for logs: without userinfo */
    struct curl_slist *headers;
    char instance[256];
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cf_span *queue; /* ring of CF_OTLP_QUEUE_MAX */
    size_t head, count;
    bool stop;
    int64_t stop_deadline_ms; /* monotonic: give up sending at stop */
    cf_otlp_stats stats;
    int64_t fail_logged_us;
};

void cf_span_attr_add(cf_span *s, const char *key, const char *value)
{
    if (!s || s->n_attrs >= CF_OTLP_ATTRS_MAX || !key)
        return;
    cf_span_attr *a = &s->attrs[s->n_attrs++];
    a->key = key;
    cf_strlcpy(a->value, value ? value : "", sizeof(a->value));
}

static json_t *span_json(const cf_span *s)
{
    char trace[33], span[17], parent[17], start[24], end[24];
    cf_trace_hex(s->trace_id, 16, trace);
    cf_trace_hex(s->span_id, 8, span);
    static const uint8_t zero[8];
    bool root = memcmp(s->parent_id, zero, 8) == 0;
    cf_trace_hex(s->parent_id, 8, parent);
    /* Nanosecond times are 64-bit: the JSON encoding takes them as
     * strings, which no JSON reader rounds. */
    snprintf(start, sizeof(start), "%lld", (long long)s->start_ns);
    snprintf(end, sizeof(end), "%lld", (long long)s->end_ns);
    json_t *attrs = json_array();
    for (size_t i = 0; attrs && i < s->n_attrs; i++)
        json_array_append_new(attrs, json_pack("{s:s, s:{s:s}}", "key", s->attrs[i].key, "value", "stringValue",
                                               s->attrs[i].value));
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:o, s:{s:i}}", "traceId", trace, "spanId", span, "name",
                          s->name, "kind", (int)s->kind, "startTimeUnixNano", start, "endTimeUnixNano", end,
                          "attributes", attrs ? attrs : json_array(), "status", "code", s->error ? 2 : 0);
    if (o && !root)
        json_object_set_new(o, "parentSpanId", json_string(parent));
    return o;
}

static char *batch_json(const cf_otlp *o, const cf_span *spans, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++)
        json_array_append_new(list, span_json(&spans[i]));
    json_t *doc = json_pack(
        "{s:[{s:{s:[{s:s, s:{s:s}}, {s:s, s:{s:s}}]}, s:[{s:{s:s}, s:o}]}]}", "resourceSpans", "resource",
        "attributes", "key", "service.name", "value", "stringValue", "codefleet-worker", "key", "service.instance.id",
        "value", "stringValue", o->instance, "scopeSpans", "scope", "name", "codefleet", "spans",
        list ? list : json_array());
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return s;
}

static size_t discard_body(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* One POST; returns 0 when the collector took the batch (2xx). */
static int post(cf_otlp *o, CURL *c, const char *body, char *why, size_t why_size)
{
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, o->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, o->headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)POST_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* Only http and https, and no redirects: an endpoint is the
     * operator's, it must not send us elsewhere. */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard_body);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK) {
        snprintf(why, why_size, "%s", curl_easy_strerror(rc));
        return -1;
    }
    if (code < 200 || code > 299) {
        snprintf(why, why_size, "HTTP status %ld", code);
        return -1;
    }
    return 0;
}

static int64_t mono_ms(void)
{
    return cf_mono_us() / 1000;
}

static void *exporter_main(void *arg)
{
    cf_otlp *o = arg;
    CURL *c = curl_easy_init();
    cf_span *batch = malloc(CF_OTLP_BATCH_MAX * sizeof(*batch));
    pthread_mutex_lock(&o->mu);
    for (;;) {
        if (!o->stop && o->count < CF_OTLP_BATCH_MAX) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += BATCH_WAIT_MS / 1000;
            pthread_cond_timedwait(&o->cv, &o->mu, &until);
        }
        if (o->count == 0) {
            if (o->stop)
                break;
            continue;
        }
        if (o->stop && mono_ms() > o->stop_deadline_ms) {
            o->stats.dropped += o->count;
            o->count = 0;
            break;
        }
        size_t n = o->count < CF_OTLP_BATCH_MAX ? o->count : CF_OTLP_BATCH_MAX;
        for (size_t i = 0; batch && i < n; i++)
            batch[i] = o->queue[(o->head + i) % CF_OTLP_QUEUE_MAX];
        o->head = (o->head + n) % CF_OTLP_QUEUE_MAX;
        o->count -= n;
        pthread_mutex_unlock(&o->mu);
        char *body = batch ? batch_json(o, batch, n) : NULL;
        char why[256] = "out of memory";
        int rc = body && c ? post(o, c, body, why, sizeof(why)) : -1;
        free(body);
        pthread_mutex_lock(&o->mu);
        if (rc == 0) {
            o->stats.exported += n;
        } else {
            o->stats.failed_batches++;
            o->stats.dropped += n;
            int64_t now = cf_mono_us();
            if (o->fail_logged_us == 0 || now - o->fail_logged_us > 60 * 1000000LL) {
                o->fail_logged_us = now;
                cf_log_warn(LOG_SUB, "spans not exported to %s: %s (%zu dropped; counted in "
                            "codefleet_spans_dropped_total)", o->shown_url, why, n);
            }
        }
    }
    pthread_mutex_unlock(&o->mu);
    free(batch);
    if (c)
        curl_easy_cleanup(c);
    return NULL;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int cf_otlp_new(const char *endpoint, const char *headers, const char *service_instance, cf_otlp **out,
                cf_error *err)
{
    *out = NULL;
    if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0)
        return cf_error_set(err, CF_E_INVALID, "otlp-endpoint '%s': expected http://host:port or https://...",
                            endpoint);
    pthread_once(&curl_once, curl_init_once);
    cf_otlp *o = calloc(1, sizeof(*o));
    if (!o)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    size_t el = strlen(endpoint);
    while (el && endpoint[el - 1] == '/')
        el--;
    const char *host = strstr(endpoint, "://") + 3;
    if ((size_t)(host - endpoint) >= el || *host == '/' || *host == ':') {
        free(o);
        return cf_error_set(err, CF_E_INVALID, "otlp-endpoint '%s': no host", endpoint);
    }
    /* Given with its path already: taken as it is. */
    static const char path[] = "/v1/traces";
    if (el >= sizeof(path) - 1 && strncmp(endpoint + el - (sizeof(path) - 1), path, sizeof(path) - 1) == 0)
        snprintf(o->url, sizeof(o->url), "%.*s", (int)el, endpoint);
    else
        snprintf(o->url, sizeof(o->url), "%.*s%s", (int)el, endpoint, path);
    /* user:password@host: logs show ***@host. */
    const char *at = strchr(host, '@'), *slash = strchr(host, '/');
    if (at && (!slash || at < slash))
        snprintf(o->shown_url, sizeof(o->shown_url), "%.*s***%s", (int)(host - endpoint), endpoint,
                 o->url + (at - endpoint));
    else
        cf_strlcpy(o->shown_url, o->url, sizeof(o->shown_url));
    cf_strlcpy(o->instance, service_instance ? service_instance : "", sizeof(o->instance));
    o->headers = curl_slist_append(NULL, "Content-Type: application/json");
    /* "Name=value,Name2=value2": each becomes "Name: value" (a trailing
     * comma ends the list). */
    const char *cursor = headers && headers[0] ? headers : NULL;
    cf_list_item it;
    while (o->headers && cf_list_next(&cursor, &it)) {
        if (it.len == 0 && !cursor)
            break;
        const char *eq = memchr(it.s, '=', it.len);
        if (!eq || eq == it.s) {
            curl_slist_free_all(o->headers);
            free(o);
            return cf_error_set(err, CF_E_INVALID, "otlp-headers: expected Name=value,... (an entry has no '=')");
        }
        /* Surrounding blanks of names and values are not theirs. */
        const char *ns = it.s, *ne = eq, *vs = eq + 1, *ve = it.s + it.len;
        while (ne > ns && (ne[-1] == ' ' || ne[-1] == '\t'))
            ne--;
        while (vs < ve && (*vs == ' ' || *vs == '\t'))
            vs++;
        char line[4200]; /* otlp-headers is at most 4096 bytes */
        snprintf(line, sizeof(line), "%.*s: %.*s", (int)(ne - ns), ns, (int)(ve - vs), vs);
        if (strpbrk(line, "\r\n")) {
            curl_slist_free_all(o->headers);
            free(o);
            return cf_error_set(err, CF_E_INVALID, "otlp-headers: a header may not contain a line break");
        }
        struct curl_slist *l = curl_slist_append(o->headers, line);
        if (!l)
            break;
        o->headers = l;
    }
    o->queue = calloc(CF_OTLP_QUEUE_MAX, sizeof(*o->queue));
    pthread_mutex_init(&o->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!o->headers || !o->queue || pthread_create(&o->thread, NULL, exporter_main, o) != 0) {
        cf_otlp_destroy(o, 0);
        return cf_error_set(err, CF_E_SYSTEM, "otlp: cannot start the exporter");
    }
    o->started = true;
    *out = o;
    return 0;
}

void cf_otlp_export(cf_otlp *o, const cf_span *spans, size_t n)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    for (size_t i = 0; i < n; i++) {
        if (o->count >= CF_OTLP_QUEUE_MAX) {
            o->stats.dropped += n - i;
            break;
        }
        o->queue[(o->head + o->count) % CF_OTLP_QUEUE_MAX] = spans[i];
        o->count++;
    }
    if (o->count >= CF_OTLP_BATCH_MAX)
        pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

const char *cf_otlp_url(const cf_otlp *o)
{
    return o ? o->shown_url : "";
}

cf_otlp_stats cf_otlp_get_stats(cf_otlp *o)
{
    cf_otlp_stats s = {0};
    if (!o)
        return s;
    pthread_mutex_lock(&o->mu);
    s = o->stats;
    pthread_mutex_unlock(&o->mu);
    return s;
}

void cf_otlp_destroy(cf_otlp *o, int timeout_ms)
{
    if (!o)
        return;
    if (o->started) {
        pthread_mutex_lock(&o->mu);
        o->stop = true;
        o->stop_deadline_ms = mono_ms() + timeout_ms;
        pthread_cond_signal(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    curl_slist_free_all(o->headers);
    free(o->queue);
    free(o);
}
