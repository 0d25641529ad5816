/* ops_http: see ops_http.h. */
#include "ops_http_int.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cf_util.h"

/* A slow client holds at most PER_IP of them for at most TIMEOUT_S each,
 * so one cannot starve the kubelet's probes (which the port must not be
 * open to more than: docs/OPERATIONS.md). */
#define CONNECTIONS_MAX 64
#define CONNECTIONS_PER_IP 4
#define CONNECTION_TIMEOUT_S 5

struct cf_ops_http {
    struct MHD_Daemon *d;
    cf_ops_hooks hooks;
    int port;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, const char *text)
{
    size_t n = strlen(text);
    char *body = malloc(n + 1);
    if (!body)
        return MHD_NO;
    memcpy(body, text, n);
    body[n] = '\n';
    return reply(c, status, "text/plain; charset=utf-8", body, n + 1, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    cf_ops_http *h = cls;
    /* The first call only announces the request (headers read). */
    if (*con_cls == NULL) {
        *con_cls = h;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0; /* bodies are ignored */
        return MHD_YES;
    }
    bool head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && !head) {
        struct MHD_Response *r = MHD_create_response_from_buffer(18, (void *)"only GET and HEAD\n", MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, r);
        MHD_destroy_response(r);
        return rc;
    }
    char why[300] = "";
    if (strcmp(url, "/metrics") == 0) {
        size_t len = 0;
        char *text = h->hooks.metrics(h->hooks.arg, &len);
        if (!text)
            return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len, MHD_RESPMEM_MUST_FREE);
    }
    if (strcmp(url, "/healthz") == 0 || strcmp(url, "/livez") == 0) {
        bool ok = h->hooks.live(h->hooks.arg, why, sizeof(why));
        return reply_text(c, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, ok ? "ok" : why);
    }
    if (strcmp(url, "/readyz") == 0) {
        bool ok = h->hooks.ready(h->hooks.arg, why, sizeof(why));
        return reply_text(c, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, ok ? "ready" : why);
    }
    return reply_text(c, MHD_HTTP_NOT_FOUND, "not found: /metrics, /healthz, /readyz");
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *sl, cf_error *err)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1])
        return cf_error_set(err, CF_E_INVALID,
                            "metrics-listen '%s': expected host:port (e.g. 0.0.0.0:9464 for every address, "
                            "127.0.0.1:9464 for this host only)", listen);
    size_t hl = (size_t)(colon - listen);
    if (listen[0] == '[') {
        if (hl < 3 || listen[hl - 1] != ']')
            return cf_error_set(err, CF_E_INVALID, "metrics-listen '%s': expected [v6addr]:port", listen);
        snprintf(host, sizeof(host), "%.*s", (int)(hl - 2), listen + 1);
    } else {
        snprintf(host, sizeof(host), "%.*s", (int)hl, listen);
    }
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535)
        return cf_error_set(err, CF_E_INVALID, "metrics-listen '%s': bad port", listen);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0 || !ai)
        return cf_error_set(err, CF_E_INVALID, "metrics-listen '%s': %s", listen, gai_strerror(rc));
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *sl = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

int cf_ops_http_start(const char *listen, const cf_ops_hooks *hooks, cf_ops_http **out, cf_error *err)
{
    *out = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    if (parse_listen(listen, &ss, &sl, err) < 0)
        return -1;
    (void)sl; /* MHD takes the length from the family */
    cf_ops_http *h = calloc(1, sizeof(*h));
    if (!h)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    h->hooks = *hooks;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTIONS_MAX,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)CONNECTIONS_PER_IP,
                            /* /readyz may wait for a Redis PING: /healthz
                             * is served by another thread meanwhile. */
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)4,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return cf_error_set(err, CF_E_SYSTEM, "metrics-listen '%s': cannot listen there (in use, or not an address "
                            "of this host)", listen);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? (int)info->port : 0;
    *out = h;
    return 0;
}

int cf_ops_http_port(const cf_ops_http *h)
{
    return h ? h->port : 0;
}

void cf_ops_http_stop(cf_ops_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
