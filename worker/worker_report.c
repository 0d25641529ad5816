/* worker_report: see worker_report.h. */
#include "worker_report_int.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_schema.h"

static json_t *languages_json(uint32_t bits)
{
    json_t *a = json_array();
    for (int l = CF_LANG_NONE + 1; a && l < CF_LANG__COUNT; l++)
        if (bits & (1u << l))
            json_array_append_new(a, json_string(cf_language_name((cf_language)l)));
    return a;
}

static json_t *controls_json(uint32_t bits)
{
    json_t *a = json_array();
    for (int i = 0; a && i < 32; i++) {
        const char *name = (bits & (1u << i)) ? cf_control_name(1u << i) : NULL;
        if (name)
            json_array_append_new(a, json_string(name));
    }
    return a;
}

static char *report_json(const cf_worker_report_info *info, size_t max_topics, bool truncated);

/* A report over CF_WORKER_REPORT_MAX_BYTES would be dropped by readers:
 * with hundreds of profiles, the topic lists are cut (and the report says
 * so) until it fits. */
char *cf_worker_report_json(const cf_worker_report_info *info)
{
    size_t most = info->n_request_topics > info->n_result_topics ? info->n_request_topics : info->n_result_topics;
    char *s = report_json(info, most, false);
    while (s && strlen(s) >= CF_WORKER_REPORT_MAX_BYTES && most > 0) {
        free(s);
        most /= 2;
        s = report_json(info, most, true);
    }
    return s;
}

static char *report_json(const cf_worker_report_info *info, size_t max_topics, bool truncated)
{
    char host[256] = "";
    if (gethostname(host, sizeof(host) - 1) < 0)
        host[0] = '\0';
    json_t *topics = json_array();
    for (size_t i = 0; topics && i < info->n_request_topics && i < max_topics; i++)
        json_array_append_new(topics, json_string(info->request_topics[i]));
    json_t *results = json_array();
    for (size_t i = 0; results && i < info->n_result_topics && i < max_topics; i++)
        json_array_append_new(results, json_string(info->result_topics[i]));
    json_t *backends = json_array();
    uint32_t all_languages = 0;
    for (size_t i = 0; backends && i < cf_backend_set_count(info->backends); i++) {
        const cf_backend *b = cf_backend_set_get(info->backends, i);
        /* A compiled language reaches a backend only through the pipeline:
         * list it where this host can compile it. */
        uint32_t langs = b->caps.languages;
        for (int l = CF_LANG_NONE + 1; l < CF_LANG__COUNT; l++)
            if ((langs & (1u << l)) && cf_language_compiled((cf_language)l) &&
                !(info->compiled_languages & (1u << l)))
                langs &= ~(1u << l);
        all_languages |= langs;
        json_array_append_new(backends, json_pack("{s:s, s:s, s:b, s:o, s:o}", "name", b->ops->name, "isolation",
                                                  b->caps.isolation ? b->caps.isolation : "", "default", i == 0,
                                                  "languages", languages_json(langs), "controls",
                                                  controls_json(b->caps.controls)));
    }
    json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:o, s:s, s:o, s:I, s:I, s:b, s:o, s:o}", "schema",
                          CF_WORKER_REPORT_SCHEMA, "worker_id", info->worker_id, "client_id", info->client_id,
                          "host", host, "group", info->group, "pid", (json_int_t)getpid(), "started_at_ms",
                          (json_int_t)info->started_at_ms, "slots", (json_int_t)info->slots, "request_topics",
                          topics ? topics : json_array(), "result_topic", info->result_topic, "result_topics",
                          results ? results : json_array(), "max_output_bytes",
                          (json_int_t)info->max_output_bytes, "largest_result_bytes",
                          (json_int_t)info->largest_result_bytes, "redis", info->redis != 0, "backends",
                          backends ? backends : json_array(), "languages", languages_json(all_languages));
    if (!o)
        return NULL;
    if (truncated)
        json_object_set_new(o, "truncated", json_true());
    const cf_worker_load *l = info->load;
    if (l) {
        json_t *stalled = json_array();
        for (size_t i = 0; stalled && i < l->n_stalled && i < CF_WORKER_LOAD_STALLED_MAX; i++)
            json_array_append_new(stalled, json_string(l->stalled[i]));
        json_object_set_new(o, "load",
                            json_pack("{s:I, s:I, s:I, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:o, s:I}", "at_ms",
                                      (json_int_t)l->at_ms, "busy", (json_int_t)l->busy, "held", (json_int_t)l->held,
                                      "paused", l->paused, "draining", l->draining, "received",
                                      (json_int_t)l->received, "answered", (json_int_t)l->answered, "rejected",
                                      (json_int_t)l->rejected, "dead_lettered", (json_int_t)l->dead_lettered,
                                      "retries", (json_int_t)l->retries, "stalled",
                                      stalled ? stalled : json_array(), "stalls", (json_int_t)l->stalls));
        json_t *lo = json_object_get(o, "load");
        if (lo) {
            json_object_set_new(lo, "memory_reserved", json_integer(l->memory_reserved));
            json_object_set_new(lo, "memory_budget", json_integer(l->memory_budget));
            json_object_set_new(lo, "pids_reserved", json_integer(l->pids_reserved));
            json_object_set_new(lo, "pids_budget", json_integer(l->pids_budget));
            json_t *pt = json_array();
            for (size_t i = 0; pt && i < l->n_paused_topics; i++)
                json_array_append_new(pt, json_string(l->paused_topics[i]));
            if (pt)
                json_object_set_new(lo, "paused_topics", pt);
        }
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}
