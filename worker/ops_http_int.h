/* ops_http: the worker's HTTP endpoints for operators, on libmicrohttpd.
 *
 *   GET /metrics   Prometheus text format 0.0.4
 *   GET /healthz   liveness: 200 while the worker's main loop turns
 *   GET /readyz    readiness: 200 when it can take work, 503 and why not
 *
 * Read-only: nothing served changes the worker.  Other paths are 404,
 * other methods 405.  The server runs on a thread of its own with a
 * bounded number of connections and a timeout per connection, so a slow
 * or hostile scraper cannot hold the worker.
 */
#ifndef CF_OPS_HTTP_H
#define CF_OPS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "cf_error.h"

typedef struct cf_ops_hooks {
    void *arg;
    /* The exposition text (malloc'd; NULL: 500). */
    char *(*metrics)(void *arg, size_t *len);
    /* Write a one-line reason when returning false. */
    bool (*live)(void *arg, char *why, size_t size);
    bool (*ready)(void *arg, char *why, size_t size);
} cf_ops_hooks;

typedef struct cf_ops_http cf_ops_http;

/* listen: "host:port" (IPv4 or a name), or "[v6addr]:port"; port 0 picks
 * one (cf_ops_http_port tells which). */
int cf_ops_http_start(const char *listen, const cf_ops_hooks *hooks, cf_ops_http **out, cf_error *err);
int cf_ops_http_port(const cf_ops_http *h);
void cf_ops_http_stop(cf_ops_http *h); /* NULL-safe */

#endif
