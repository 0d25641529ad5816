/* cf_cli_fleet_view.c: what the group's description and the workers'
 * reports say, as pure functions over JSON (untrusted input: reports come
 * from the workers topic), shared by doctor and top. */
#include "cf_cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cf_util.h"

const char *cf_cli_json_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "?";
}

int cf_cli_parse_partition(const char *s, char *topic, size_t cap, int32_t *part)
{
    const char *br = s ? strrchr(s, '[') : NULL;
    if (!br || br == s || (size_t)(br - s) >= cap)
        return -1;
    char *end = NULL;
    errno = 0;
    long n = strtol(br + 1, &end, 10);
    if (errno || end == br + 1 || strcmp(end, "]") != 0 || n < 0 || n > INT32_MAX)
        return -1;
    memcpy(topic, s, (size_t)(br - s));
    topic[br - s] = '\0';
    *part = (int32_t)n;
    return 0;
}

json_t *cf_cli_report_stalled(const json_t *report, int64_t *stalls)
{
    json_t *load = json_object_get(report, "load");
    if (stalls) {
        json_t *n = json_object_get(load, "stalls");
        json_int_t v = json_is_integer(n) ? json_integer_value(n) : -1;
        *stalls = v >= 0 && v <= CF_CLI_REPORT_COUNT_MAX ? (int64_t)v : -1;
    }
    json_t *list = json_object_get(load, "stalled");
    if (!json_is_array(list))
        return NULL;
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        if (!out || json_array_size(out) >= CF_CLI_STALLED_MAX)
            break;
        const char *s = json_string_value(e);
        size_t n = s ? json_string_length(e) : 0;
        if (n == 0)
            continue;
        /* A real "topic[N]" is printable already and kept whole (topic
         * names reach 249 bytes); anything else is cut by cf_printable. */
        char topic[256], buf[96];
        int32_t part;
        if (strlen(s) == n && cf_cli_parse_partition(s, topic, sizeof(topic), &part) == 0 && cf_topic_name_valid(topic)) {
            json_array_append_new(out, json_string(s));
        } else {
            cf_printable(s, n, buf, sizeof(buf));
            json_array_append_new(out, json_string(buf));
        }
    }
    return out;
}

bool cf_cli_report_has_room(const json_t *report, const char *topic)
{
    json_t *load = json_object_get(report, "load");
    json_t *busy = json_object_get(load, "busy"), *slots = json_object_get(report, "slots");
    if (!json_is_integer(busy) || !json_is_integer(slots))
        return false;
    json_int_t b = json_integer_value(busy), n = json_integer_value(slots);
    /* Room only when the report says so: a report without the flags is not
     * taken to mean "running". */
    if (!(b >= 0 && n > 0 && n <= 65536 && b < n && json_is_false(json_object_get(load, "paused")) &&
          json_is_false(json_object_get(load, "draining"))))
        return false;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(load, "paused_topics"), i, t)
    {
        if (topic && json_is_string(t) && strcmp(json_string_value(t), topic) == 0)
            return false;
    }
    return true;
}

json_t *cf_cli_lag_watch(json_t *watch, json_t *sample, int64_t now_ms, int64_t min_ms)
{
    json_t *out = json_array();
    const char *key;
    json_t *v;
    void *tmp;
    /* What left the sample (revoked, or not read this time) starts again
     * when it comes back: the watch never outgrows one sample. */
    json_object_foreach_safe(watch, tmp, key, v)
    {
        if (!json_object_get(sample, key))
            json_object_del(watch, key);
    }
    json_object_foreach(sample, key, v)
    {
        json_t *jc = json_object_get(v, "committed"), *jl = json_object_get(v, "lag");
        const char *member = json_string_value(json_object_get(v, "member"));
        json_t *room = json_object_get(v, "room");
        /* Nothing waiting, or an owner that says it is full, paused or
         * draining: not moving is expected there. */
        if (!json_is_integer(jc) || !json_is_integer(jl) || json_integer_value(jl) <= 0 || !member ||
            json_is_false(room)) {
            json_object_del(watch, key);
            continue;
        }
        json_int_t committed = json_integer_value(jc);
        json_t *e = json_object_get(watch, key);
        /* A new offset or a new owner (a rebalance) gets a fresh start. */
        if (!e || json_integer_value(json_object_get(e, "committed")) != committed ||
            strcmp(cf_cli_json_str(e, "member"), member) != 0) {
            json_object_set_new(watch, key,
                                json_pack("{s:I, s:s, s:I}", "committed", committed, "member", member, "since_ms",
                                          (json_int_t)now_ms));
            continue;
        }
        int64_t since = json_integer_value(json_object_get(e, "since_ms"));
        if (!json_is_true(room) || now_ms - since < min_ms || !out)
            continue;
        const char *owner = json_string_value(json_object_get(v, "owner"));
        json_array_append_new(out, json_pack("{s:s, s:s, s:O, s:I, s:f}", "partition", key, "owner",
                                             owner ? owner : member, "lag", jl, "committed", committed, "for_s",
                                             (double)(now_ms - since) / 1000.0));
    }
    return out;
}

json_t *cf_cli_spread_by_topic(const json_t *members)
{
    json_t *topics = json_object();
    size_t i;
    json_t *m;
    json_array_foreach(members, i, m)
    {
        const char *cid = cf_cli_json_str(m, "client_id");
        const char *name = strncmp(cid, "codefleet-worker-", 17) == 0 && cid[17] ? cid + 17 : cid;
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "partitions"), k, p)
        {
            char topic[256];
            int32_t part;
            if (cf_cli_parse_partition(json_string_value(p), topic, sizeof(topic), &part) < 0)
                continue;
            json_t *by = json_object_get(topics, topic);
            if (!by) {
                by = json_object();
                json_object_set_new(topics, topic, by);
            }
            json_object_set_new(by, name, json_integer(json_integer_value(json_object_get(by, name)) + 1));
        }
    }
    return topics;
}

bool cf_cli_spread_uneven(const json_t *by, size_t nw, json_int_t *lo, json_int_t *hi)
{
    json_int_t total = 0;
    *lo = -1;
    *hi = 0;
    const char *w;
    json_t *n;
    json_object_foreach((json_t *)by, w, n)
    {
        json_int_t v = json_integer_value(n);
        total += v;
        *hi = v > *hi ? v : *hi;
        *lo = *lo < 0 || v < *lo ? v : *lo;
    }
    size_t holders = json_object_size(by);
    size_t could = (size_t)total < nw ? (size_t)total : nw;
    if (holders < nw)
        *lo = 0; /* a live worker holds none */
    return holders < could || *hi - *lo > 1;
}
