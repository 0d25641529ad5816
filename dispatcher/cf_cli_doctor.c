/* codefleet doctor: checks the fleet the way an operator would, and says
 * what to fix.
 *
 * Each check gives one line: ok, warn, fail or skipped, with a fix for what
 * is wrong.  Checks, in order: the broker (reachable, authenticated), the
 * topics (present, partitions, a result-size limit that fits what the
 * workers produce), the worker group (members, assigned partitions, lag),
 * what the live workers serve (from their reports on the workers topic,
 * worker/worker_report.h), Redis, and one trivial request's round trip.
 * The exit code is 0 when nothing failed (warnings allowed), 1 otherwise;
 * --json prints the whole report as one object. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_cli.h"
#include "cf_dispatcher.h"
#include "cf_kafka_int.h"
#include "cf_log.h"
#include "cf_redis.h"
#include "cf_util.h"

#define DOCTOR_SUB "doctor"
#define DOCTOR_KAFKA_TIMEOUT_MS 5000
#define DOCTOR_MAX_TOPICS 64
#define DOCTOR_MAX_REPORTS 10000
/* Must match worker/worker_report.h (the dispatcher does not link the worker). */
#define DOCTOR_REPORT_MAX_BYTES (64 * 1024)
#define DOCTOR_REPORT_SCHEMA 1
#define DOCTOR_ROUNDTRIP_DEFAULT_US (15 * INT64_C(1000000))

typedef struct doctor {
    const cf_cli_globals *g;
    json_t *checks;
    int failed;
    int warned;
    rd_kafka_t *rk;       /* producer handle: metadata and admin requests */
    bool broker_ok;
    json_t *members;      /* live group members: [{client_id, host, partitions[], report?}] */
    json_t *reports;      /* worker_id -> latest report, tombstones removed */
    int64_t largest_result; /* max over live reports, 0 = unknown */
    bool workers_use_redis;
} doctor;

static void add_check(doctor *d, const char *name, const char *status, json_t *extra, const char *fix,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void add_check(doctor *d, const char *name, const char *status, json_t *extra, const char *fix,
                      const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *c = extra ? extra : json_object();
    json_object_set_new(c, "check", json_string(name));
    json_object_set_new(c, "status", json_string(status));
    json_object_set_new(c, "message", json_string(msg));
    if (fix && fix[0])
        json_object_set_new(c, "fix", json_string(fix));
    json_array_append_new(d->checks, c);
    if (strcmp(status, "fail") == 0)
        d->failed++;
    else if (strcmp(status, "warn") == 0)
        d->warned++;
}

/* ---------------------------------------------------------------- broker */

static void check_broker(doctor *d)
{
    const cf_cli_globals *g = d->g;
    cf_error err = {0};
    static const cf_kafka_kv role[] = {{"allow.auto.create.topics", "false"}};
    rd_kafka_conf_t *conf = cf_kafka_conf_new(g->brokers, "codefleet-doctor", role, 1, &g->kafka, &err);
    if (conf)
        d->rk = cf_kafka_client_new(RD_KAFKA_PRODUCER, conf, "doctor client", &err);
    if (!d->rk) {
        add_check(d, "broker", "fail", NULL, "check the kafka.* settings of --config (CODEFLEET_CONFIG)", "%s",
                  err.msg);
        return;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(d->rk, 0, NULL, &md, DOCTOR_KAFKA_TIMEOUT_MS);
    if (e) {
        cf_error_set(&err, CF_E_KAFKA, "broker metadata: %s", rd_kafka_err2str(e));
        char hint[600];
        cf_cli_explain(&err, hint, sizeof(hint));
        add_check(d, "broker", "fail", NULL, hint[0] ? hint : "check --brokers (CODEFLEET_BROKERS) and the broker's log",
                  "broker %s: %s", g->brokers, rd_kafka_err2str(e));
        return;
    }
    const char *user = cf_kvlist_get(&g->kafka, "sasl.username");
    const char *mech = cf_kvlist_get(&g->kafka, "sasl.mechanisms");
    if (!mech)
        mech = cf_kvlist_get(&g->kafka, "sasl.mechanism");
    char auth[300];
    if (user)
        snprintf(auth, sizeof(auth), "authenticated as %.100s (SASL/%.40s)", user, mech ? mech : "GSSAPI");
    else
        snprintf(auth, sizeof(auth), "no authentication configured");
    json_t *extra = json_pack("{s:s, s:i, s:i}", "brokers", g->brokers, "broker_count", md->broker_cnt,
                              "controller_id", (int)rd_kafka_controllerid(d->rk, 0));
    add_check(d, "broker", "ok", extra, NULL, "broker %s reachable: %d broker(s), %s", g->brokers, md->broker_cnt,
              auth);
    rd_kafka_metadata_destroy(md);
    d->broker_ok = true;
}

/* ---------------------------------------------------------------- group */

static json_t *partition_list_json(const rd_kafka_topic_partition_list_t *l)
{
    json_t *a = json_array();
    for (int i = 0; l && i < l->cnt; i++) {
        char s[300];
        snprintf(s, sizeof(s), "%s[%" PRId32 "]", l->elems[i].topic, l->elems[i].partition);
        json_array_append_new(a, json_string(s));
    }
    return a;
}

/* Runs one admin request on a temporary queue and returns its event (NULL
 * on timeout; the caller destroys it). */
static rd_kafka_event_t *admin_wait(rd_kafka_queue_t *q)
{
    return rd_kafka_queue_poll(q, DOCTOR_KAFKA_TIMEOUT_MS + 1000);
}

static rd_kafka_AdminOptions_t *admin_options(doctor *d, rd_kafka_admin_op_t op)
{
    rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(d->rk, op);
    char es[256];
    if (o)
        rd_kafka_AdminOptions_set_request_timeout(o, DOCTOR_KAFKA_TIMEOUT_MS, es, sizeof(es));
    return o;
}

/* Committed offsets of the group (NULL when they cannot be read). */
static rd_kafka_topic_partition_list_t *group_committed(doctor *d, char *why, size_t wsz)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(d->rk);
    rd_kafka_ListConsumerGroupOffsets_t *req = rd_kafka_ListConsumerGroupOffsets_new(d->g->worker_group, NULL);
    rd_kafka_AdminOptions_t *o = admin_options(d, RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS);
    rd_kafka_ListConsumerGroupOffsets(d->rk, &req, 1, o, q);
    rd_kafka_ListConsumerGroupOffsets_destroy(req);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_event_t *ev = admin_wait(q);
    rd_kafka_topic_partition_list_t *out = NULL;
    if (!ev) {
        snprintf(why, wsz, "no answer within %d ms", DOCTOR_KAFKA_TIMEOUT_MS);
    } else if (rd_kafka_event_error(ev)) {
        snprintf(why, wsz, "%s", rd_kafka_event_error_string(ev));
    } else {
        const rd_kafka_ListConsumerGroupOffsets_result_t *r = rd_kafka_event_ListConsumerGroupOffsets_result(ev);
        size_t n = 0;
        const rd_kafka_group_result_t **gr = rd_kafka_ListConsumerGroupOffsets_result_groups(r, &n);
        if (n == 1 && rd_kafka_group_result_error(gr[0]))
            snprintf(why, wsz, "%s", rd_kafka_error_string(rd_kafka_group_result_error(gr[0])));
        else if (n == 1 && rd_kafka_group_result_partitions(gr[0]))
            out = rd_kafka_topic_partition_list_copy(rd_kafka_group_result_partitions(gr[0]));
        else
            snprintf(why, wsz, "no offsets in the answer");
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    return out;
}

/* Total lag of the group's committed partitions: high watermark minus the
 * committed offset (minus the low watermark when nothing is committed). */
static int64_t group_lag(doctor *d, const rd_kafka_topic_partition_list_t *committed, json_t *per_partition)
{
    int64_t total = 0;
    for (int i = 0; committed && i < committed->cnt; i++) {
        const rd_kafka_topic_partition_t *p = &committed->elems[i];
        int64_t lo = 0, hi = 0;
        if (rd_kafka_query_watermark_offsets(d->rk, p->topic, p->partition, &lo, &hi, DOCTOR_KAFKA_TIMEOUT_MS))
            continue;
        int64_t from = p->offset >= 0 ? p->offset : lo;
        int64_t lag = hi > from ? hi - from : 0;
        total += lag;
        char key[300];
        snprintf(key, sizeof(key), "%s[%" PRId32 "]", p->topic, p->partition);
        json_object_set_new(per_partition, key, json_integer(lag));
    }
    return total;
}

static void check_group(doctor *d)
{
    const char *group = d->g->worker_group;
    rd_kafka_queue_t *q = rd_kafka_queue_new(d->rk);
    rd_kafka_AdminOptions_t *o = admin_options(d, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS);
    const char *groups[] = {group};
    rd_kafka_DescribeConsumerGroups(d->rk, groups, 1, o, q);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_event_t *ev = admin_wait(q);
    const rd_kafka_ConsumerGroupDescription_t *desc = NULL;
    char why[512] = "";
    if (!ev) {
        snprintf(why, sizeof(why), "no answer within %d ms", DOCTOR_KAFKA_TIMEOUT_MS);
    } else if (rd_kafka_event_error(ev)) {
        snprintf(why, sizeof(why), "%s", rd_kafka_event_error_string(ev));
    } else {
        size_t n = 0;
        const rd_kafka_ConsumerGroupDescription_t **ds =
            rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(ev), &n);
        if (n == 1 && rd_kafka_ConsumerGroupDescription_error(ds[0]))
            snprintf(why, sizeof(why), "%s", rd_kafka_error_string(rd_kafka_ConsumerGroupDescription_error(ds[0])));
        else if (n == 1)
            desc = ds[0];
        else
            snprintf(why, sizeof(why), "the broker described %zu groups", n);
    }
    if (!desc) {
        char fix[400];
        snprintf(fix, sizeof(fix), "grant this principal describe on group %.200s (codefleet acl allow PRINCIPAL "
                                   "describe:group:%.60s), or check --worker-group", group, group);
        add_check(d, "workers", strstr(why, "uthoriz") ? "warn" : "fail", NULL, strstr(why, "uthoriz") ? fix : NULL,
                  "group %s cannot be described: %s", group, why);
        if (ev)
            rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        return;
    }
    const char *state = rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(desc));
    size_t nm = rd_kafka_ConsumerGroupDescription_member_count(desc);
    size_t assigned = 0;
    for (size_t i = 0; i < nm; i++) {
        const rd_kafka_MemberDescription_t *m = rd_kafka_ConsumerGroupDescription_member(desc, i);
        const rd_kafka_topic_partition_list_t *parts =
            rd_kafka_MemberAssignment_partitions(rd_kafka_MemberDescription_assignment(m));
        assigned += parts ? (size_t)parts->cnt : 0;
        json_array_append_new(d->members,
                              json_pack("{s:s, s:s, s:o}", "client_id", rd_kafka_MemberDescription_client_id(m),
                                        "host", rd_kafka_MemberDescription_host(m), "partitions",
                                        partition_list_json(parts)));
    }
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);

    char lwhy[300] = "";
    rd_kafka_topic_partition_list_t *committed = group_committed(d, lwhy, sizeof(lwhy));
    json_t *lag_parts = json_object();
    int64_t lag = committed ? group_lag(d, committed, lag_parts) : -1;
    rd_kafka_topic_partition_list_destroy(committed);
    char lagtxt[400];
    if (lag >= 0)
        snprintf(lagtxt, sizeof(lagtxt), "lag %" PRId64 " request(s)", lag);
    else
        snprintf(lagtxt, sizeof(lagtxt), "lag unknown (%.300s)", lwhy);
    json_t *extra = json_pack("{s:s, s:s, s:O, s:I, s:I, s:o}", "group", group, "state", state, "members",
                              d->members, "assigned_partitions", (json_int_t)assigned, "lag", (json_int_t)lag,
                              "lag_by_partition", lag_parts);
    if (nm == 0) {
        char fix[300];
        snprintf(fix, sizeof(fix), "start a worker: deploy/stack.sh up (local), or codefleet-worker --config FILE "
                                   "with group = %.100s", group);
        add_check(d, "workers", "fail", extra, fix, "no worker in group %s (state %s): requests wait, %s", group,
                  state, lagtxt);
    } else if (assigned == 0) {
        add_check(d, "workers", "warn", extra, "wait for the rebalance to finish; if it persists, check the workers' logs",
                  "%zu worker(s) in group %s but no partition assigned yet (state %s), %s", nm, group, state, lagtxt);
    } else {
        add_check(d, "workers", "ok", extra, NULL, "%zu worker(s) in group %s (%s), %zu partition(s) assigned, %s", nm,
                  group, state, assigned, lagtxt);
    }
}

/* ---------------------------------------------------------------- reports */

/* Reads the workers topic to its end, keeping the latest report per key. */
static int read_reports(doctor *d, char *why, size_t wsz)
{
    const cf_cli_globals *g = d->g;
    cf_error err = {0};
    rd_kafka_t *c = cf_kafka_consumer_new(g->brokers, "codefleet-doctor", &g->kafka, "codefleet-doctor",
                                          "the reports consumer", &err);
    if (!c) {
        snprintf(why, wsz, "%s", err.msg);
        return -1;
    }
    int32_t np = 0;
    rd_kafka_resp_err_t kerr;
    if (cf_kafka_topic_partitions(c, g->workers_topic, false, &np, &kerr, &err) < 0) {
        snprintf(why, wsz, "%s", err.msg);
        cf_kafka_consumer_close(c);
        return -1;
    }
    /* Where each partition ends now: reading stops there. */
    int64_t *end = calloc((size_t)np, sizeof(*end));
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(np);
    int32_t open_parts = 0;
    for (int32_t p = 0; end && p < np; p++) {
        int64_t lo = 0, hi = 0;
        rd_kafka_resp_err_t e =
            rd_kafka_query_watermark_offsets(c, g->workers_topic, p, &lo, &hi, DOCTOR_KAFKA_TIMEOUT_MS);
        if (e) {
            snprintf(why, wsz, "watermarks of %s[%" PRId32 "]: %s", g->workers_topic, p, rd_kafka_err2str(e));
            free(end);
            rd_kafka_topic_partition_list_destroy(l);
            cf_kafka_consumer_close(c);
            return -1;
        }
        end[p] = hi;
        if (hi > lo) {
            rd_kafka_topic_partition_list_add(l, g->workers_topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
            open_parts++;
        }
    }
    if (!end || (open_parts && rd_kafka_assign(c, l))) {
        snprintf(why, wsz, "cannot read %s", g->workers_topic);
        free(end);
        rd_kafka_topic_partition_list_destroy(l);
        cf_kafka_consumer_close(c);
        return -1;
    }
    rd_kafka_topic_partition_list_destroy(l);
    int64_t deadline = cf_mono_us() + 2 * INT64_C(1000) * DOCTOR_KAFKA_TIMEOUT_MS;
    size_t seen = 0;
    while (open_parts > 0 && cf_mono_us() < deadline) {
        rd_kafka_message_t *m = cf_kafka_consume(c, deadline, NULL, DOCTOR_SUB, NULL, 0);
        if (!m)
            break;
        if (m->partition >= 0 && m->partition < np && end[m->partition] >= 0) {
            if (m->key && m->key_len > 0 && m->key_len <= CF_ID_MAX && seen < DOCTOR_MAX_REPORTS) {
                char key[CF_ID_MAX + 1];
                memcpy(key, m->key, m->key_len);
                key[m->key_len] = '\0';
                json_t *rep = NULL;
                if (m->payload && m->len > 0 && m->len <= DOCTOR_REPORT_MAX_BYTES)
                    rep = json_loadb(m->payload, m->len, JSON_REJECT_DUPLICATES, NULL);
                if (rep && json_is_object(rep) &&
                    json_integer_value(json_object_get(rep, "schema")) == DOCTOR_REPORT_SCHEMA) {
                    json_object_set_new(d->reports, key, rep);
                    seen++;
                } else {
                    /* A tombstone, or something unreadable: no report for that key. */
                    json_decref(rep);
                    json_object_del(d->reports, key);
                }
            }
            if (m->offset + 1 >= end[m->partition]) {
                end[m->partition] = -1;
                open_parts--;
            }
        }
        rd_kafka_message_destroy(m);
    }
    free(end);
    cf_kafka_consumer_close(c);
    if (open_parts > 0) {
        snprintf(why, wsz, "%s not read to its end within %d s", g->workers_topic, 2 * DOCTOR_KAFKA_TIMEOUT_MS / 1000);
        return -1;
    }
    return 0;
}

static json_t *keys_array(json_t *obj)
{
    json_t *a = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        (void)v;
        json_array_append_new(a, json_string(k));
    }
    return a;
}

static const char *str_of(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "?";
}

/* "sandbox (sandbox: python, shell), process (host_local: ...)" */
static void describe_backends(json_t *report, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t i, len = 0;
    json_t *b;
    json_array_foreach(json_object_get(report, "backends"), i, b)
    {
        len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%s [%s:", i ? "; " : "", str_of(b, "name"),
                                str_of(b, "isolation"));
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(b, "languages"), k, l)
        {
            const char *s = json_string_value(l);
            len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, " %s", s ? s : "?");
        }
        len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "]");
        if (len >= cap)
            break;
    }
}

static void check_reports(doctor *d)
{
    char why[600] = "";
    if (!d->g->workers_topic || !d->g->workers_topic[0]) {
        add_check(d, "capabilities", "skipped", NULL, NULL, "no workers topic configured (--workers-topic)");
        return;
    }
    if (read_reports(d, why, sizeof(why)) < 0) {
        char fix[300];
        snprintf(fix, sizeof(fix), "create it (codefleet topics create %.200s) and let this principal read it",
                 d->g->workers_topic);
        add_check(d, "capabilities", "warn", NULL, fix, "worker reports unavailable: %s", why);
        return;
    }
    size_t i, missing = 0, live = json_array_size(d->members);
    json_t *m;
    json_t *serving = json_array();
    json_t *langs = json_object();
    json_array_foreach(d->members, i, m)
    {
        const char *cid = str_of(m, "client_id");
        const char *key;
        json_t *rep, *found = NULL;
        json_object_foreach(d->reports, key, rep)
        {
            if (strcmp(str_of(rep, "client_id"), cid) == 0)
                found = rep;
        }
        if (!found) {
            missing++;
            continue;
        }
        json_object_set(m, "report", found);
        int64_t lr = json_integer_value(json_object_get(found, "largest_result_bytes"));
        if (lr > d->largest_result)
            d->largest_result = lr;
        if (json_is_true(json_object_get(found, "redis")))
            d->workers_use_redis = true;
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(found, "languages"), k, l)
        {
            if (json_is_string(l))
                json_object_set_new(langs, json_string_value(l), json_true());
        }
        char bdesc[1500];
        describe_backends(found, bdesc, sizeof(bdesc));
        json_array_append_new(serving, json_pack("{s:s, s:s, s:s}", "worker_id", str_of(found, "worker_id"), "host",
                                                 str_of(found, "host"), "backends", bdesc));
    }
    char all[600] = "";
    size_t len = 0;
    const char *lk;
    json_t *lv;
    json_object_foreach(langs, lk, lv)
    {
        (void)lv;
        len += (size_t)snprintf(all + len, len < sizeof(all) ? sizeof(all) - len : 0, "%s%s", len ? ", " : "", lk);
    }
    json_t *extra = json_pack("{s:o, s:o}", "workers", serving, "languages", keys_array(langs));
    json_decref(langs);
    if (live == 0) {
        add_check(d, "capabilities", "skipped", extra, NULL, "no live worker (%zu report(s) of workers not running)",
                  json_object_size(d->reports));
    } else if (missing == live) {
        add_check(d, "capabilities", "warn", extra,
                  "let the workers write the workers topic (ACL write) and check their workers-topic setting",
                  "none of the %zu live worker(s) published a report on %s", live, d->g->workers_topic);
    } else {
        char first[1500] = "";
        json_t *w0 = json_array_get(json_object_get(extra, "workers"), 0);
        snprintf(first, sizeof(first), "%s", str_of(w0, "backends"));
        add_check(d, "capabilities", missing ? "warn" : "ok", extra,
                  missing ? "workers without a report: check their workers-topic setting and ACLs" : NULL,
                  "%zu live worker(s) serve: %s; backends of %s: %s%s", live - missing, all[0] ? all : "(nothing)",
                  str_of(w0, "worker_id"), first, missing ? " (some workers published no report)" : "");
    }
}

/* ---------------------------------------------------------------- topics */

/* max.message.bytes of topic, -1 when it cannot be read (why says why). */
static int64_t topic_max_message_bytes(doctor *d, const char *topic, char *why, size_t wsz)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(d->rk);
    rd_kafka_ConfigResource_t *cr = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_AdminOptions_t *o = admin_options(d, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_DescribeConfigs(d->rk, &cr, 1, o, q);
    rd_kafka_ConfigResource_destroy(cr);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_event_t *ev = admin_wait(q);
    int64_t out = -1;
    if (!ev) {
        snprintf(why, wsz, "no answer within %d ms", DOCTOR_KAFKA_TIMEOUT_MS);
    } else if (rd_kafka_event_error(ev)) {
        snprintf(why, wsz, "%s", rd_kafka_event_error_string(ev));
    } else {
        size_t nres = 0, nc = 0;
        const rd_kafka_ConfigResource_t **res =
            rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(ev), &nres);
        if (nres == 1 && rd_kafka_ConfigResource_error(res[0])) {
            snprintf(why, wsz, "%s", rd_kafka_ConfigResource_error_string(res[0]));
        } else if (nres == 1) {
            const rd_kafka_ConfigEntry_t **ce = rd_kafka_ConfigResource_configs(res[0], &nc);
            for (size_t i = 0; i < nc; i++)
                if (strcmp(rd_kafka_ConfigEntry_name(ce[i]), "max.message.bytes") == 0 &&
                    rd_kafka_ConfigEntry_value(ce[i]))
                    out = strtoll(rd_kafka_ConfigEntry_value(ce[i]), NULL, 10);
            if (out < 0)
                snprintf(why, wsz, "max.message.bytes not in the answer");
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    return out;
}

typedef struct topic_want {
    const char *name;
    bool required;   /* missing: fail (else warn) */
    bool carries_results;
    const char *role;
} topic_want;

static void check_one_topic(doctor *d, const topic_want *t)
{
    int32_t np = 0;
    rd_kafka_resp_err_t kerr;
    cf_error err = {0};
    char name[300];
    snprintf(name, sizeof(name), "topic %s", t->name);
    if (cf_kafka_topic_partitions(d->rk, t->name, false, &np, &kerr, &err) < 0) {
        char fix[400];
        if (kerr == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED) {
            add_check(d, name, "warn", NULL, "run doctor as a principal that may describe it (e.g. the admin)",
                      "%s (%s): not visible to this principal", t->name, t->role);
            return;
        }
        snprintf(fix, sizeof(fix), "codefleet topics create %.250s", t->name);
        add_check(d, name, t->required ? "fail" : "warn", NULL, fix, "%s (%s) is missing: %s", t->name, t->role,
                  rd_kafka_err2str(kerr ? kerr : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        return;
    }
    json_t *extra = json_pack("{s:s, s:i}", "topic", t->name, "partitions", (int)np);
    if (!t->carries_results) {
        add_check(d, name, "ok", extra, NULL, "%s (%s): %d partition(s)", t->name, t->role, (int)np);
        return;
    }
    char why[300] = "";
    int64_t mmb = topic_max_message_bytes(d, t->name, why, sizeof(why));
    json_object_set_new(extra, "max_message_bytes", json_integer(mmb));
    json_object_set_new(extra, "largest_result_bytes", json_integer(d->largest_result));
    if (mmb < 0) {
        add_check(d, name, "warn", extra, "grant this principal describe_configs on the topic",
                  "%s (%s): %d partition(s); its message size limit cannot be read (%s)", t->name, t->role, (int)np,
                  why);
    } else if (d->largest_result > 0 && mmb < d->largest_result) {
        char fix[400];
        snprintf(fix, sizeof(fix),
                 "raise it: kafka-configs.sh --alter --entity-type topics --entity-name %.200s --add-config "
                 "max.message.bytes=%" PRId64 " (and the broker's message.max.bytes), or lower the workers' max-output",
                 t->name, d->largest_result);
        add_check(d, name, "fail", extra, fix,
                  "%s (%s): max.message.bytes %" PRId64 " is below the %" PRId64
                  " bytes a worker's result may need: larger results are cut to 64 KiB per stream",
                  t->name, t->role, mmb, d->largest_result);
    } else {
        add_check(d, name, "ok", extra, NULL, "%s (%s): %d partition(s), max.message.bytes %" PRId64 "%s", t->name,
                  t->role, (int)np, mmb, d->largest_result > 0 ? " (fits the workers' largest result)" : "");
    }
}

static void check_topics(doctor *d)
{
    const cf_cli_globals *g = d->g;
    topic_want want[DOCTOR_MAX_TOPICS];
    size_t n = 0;
    want[n++] = (topic_want){g->request_topic, true, false, "requests"};
    want[n++] = (topic_want){g->result_topic, true, true, "results"};
    want[n++] = (topic_want){g->dlq_topic, true, true, "dead letters"};
    if (g->events_topic && g->events_topic[0])
        want[n++] = (topic_want){g->events_topic, false, false, "events"};
    if (g->workers_topic && g->workers_topic[0])
        want[n++] = (topic_want){g->workers_topic, false, false, "worker reports"};
    /* The live workers' other request and result topics (tenant profiles). */
    size_t i;
    json_t *m;
    json_array_foreach(d->members, i, m)
    {
        json_t *rep = json_object_get(m, "report");
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(rep, "request_topics"), k, t)
        {
            const char *s = json_string_value(t);
            bool dup = !s;
            for (size_t j = 0; s && j < n; j++)
                dup = dup || strcmp(want[j].name, s) == 0;
            if (!dup && n < DOCTOR_MAX_TOPICS)
                want[n++] = (topic_want){s, true, false, "requests (profile)"};
        }
    }
    for (size_t j = 0; j < n; j++)
        check_one_topic(d, &want[j]);
}

/* ---------------------------------------------------------------- redis */

static void check_redis(doctor *d)
{
    const cf_cli_globals *g = d->g;
    char host[512];
    int port = 0;
    cf_error err = {0};
    if (cf_cli_parse_redis_addr(g->redis, host, sizeof(host), &port, &err) < 0) {
        add_check(d, "redis", "fail", NULL, "fix --redis (CODEFLEET_REDIS)", "%s", err.msg);
        return;
    }
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    rc.host = host;
    rc.port = port;
    rc.user = g->redis_user;
    rc.password = g->redis_password;
    rc.connect_timeout_us = 2 * INT64_C(1000000);
    int64_t t0 = cf_mono_us();
    cf_redis *r = cf_redis_new(&rc, true, &err);
    int rc_ping = r ? cf_redis_ping(r, &err) : -1;
    int64_t us = cf_mono_us() - t0;
    cf_redis_destroy(r);
    if (rc_ping == 0) {
        add_check(d, "redis", "ok", json_pack("{s:s}", "redis", g->redis), NULL,
                  "Redis %s answers PING (%.1f ms, %s)", g->redis, us / 1e3,
                  g->redis_user ? "authenticated" : "no user configured");
        return;
    }
    if (err.code != CF_E_REDIS)
        err.code = CF_E_REDIS;
    char hint[600];
    cf_cli_explain(&err, hint, sizeof(hint));
    /* Only workspaces, checkpoints and idempotency need Redis: when no live
     * worker uses it, its absence costs the CLI's state commands only. */
    add_check(d, "redis", d->workers_use_redis ? "fail" : "warn", json_pack("{s:s}", "redis", g->redis),
              hint[0] ? hint : "check --redis, --redis-user and --redis-password", "Redis %s: %s%s", g->redis, err.msg,
              d->workers_use_redis ? "" : " (the live workers do not use Redis; workspace and checkpoint commands will fail)");
}

/* ---------------------------------------------------------------- round trip */

/* The cheapest request the fleet serves: from the live workers' languages. */
static void trivial_request(doctor *d, cf_request *req)
{
    bool shell = false, python = false, command = false, any_report = false;
    size_t i;
    json_t *m;
    json_array_foreach(d->members, i, m)
    {
        json_t *rep = json_object_get(m, "report");
        json_t *b0 = json_array_get(json_object_get(rep, "backends"), 0);
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(b0, "languages"), k, l)
        {
            any_report = true;
            const char *s = json_string_value(l);
            shell = shell || (s && strcmp(s, "shell") == 0);
            python = python || (s && strcmp(s, "python") == 0);
            command = command || (s && strcmp(s, "command") == 0);
        }
    }
    if (shell || !any_report) {
        req->language = CF_LANG_SHELL;
        cf_bytes_set(&req->code, "exit 0", 6);
    } else if (python) {
        req->language = CF_LANG_PYTHON;
        cf_bytes_set(&req->code, "pass", 4);
    } else if (command) {
        static char *argv_true[] = {"true"};
        req->language = CF_LANG_COMMAND;
        req->argv = calloc(1, sizeof(char *));
        if (req->argv && cf_str_set(&req->argv[0], argv_true[0]) == 0)
            req->argc = 1;
    } else {
        req->language = CF_LANG_SHELL;
        cf_bytes_set(&req->code, "exit 0", 6);
    }
}

static void check_roundtrip(doctor *d, int64_t timeout_us)
{
    if (json_array_size(d->members) == 0) {
        add_check(d, "roundtrip", "skipped", NULL, NULL, "no worker to answer a request");
        return;
    }
    const cf_cli_globals *g = d->g;
    cf_dispatcher_config cfg = {
        .brokers = g->brokers,
        .request_topic = g->request_topic,
        .result_topic = g->result_topic,
        .client_id = "codefleet-doctor",
        .kafka = &g->kafka,
        .collect_results = true,
    };
    cf_error err = {0};
    cf_dispatcher *disp = NULL;
    cf_request req = {0};
    cf_result res = {0};
    char id[CF_ID_MAX + 1];
    int64_t t0 = 0, us = 0;
    if (cf_dispatcher_new(&cfg, &disp, &err) < 0 || cf_dispatcher_new_id(id, sizeof(id), &err) < 0)
        goto fail;
    trivial_request(d, &req);
    if (cf_str_set(&req.id, id) < 0 || cf_str_set(&req.identity, "codefleet-doctor") < 0) {
        cf_error_set(&err, CF_E_NOMEM, "out of memory");
        goto fail;
    }
    req.created_us = cf_now_us();
    t0 = cf_mono_us();
    if (cf_dispatcher_submit(disp, &req, &err) < 0 || cf_dispatcher_flush(disp, timeout_us, &err) < 0 ||
        cf_dispatcher_wait(disp, id, timeout_us, &res, &err) < 0)
        goto fail;
    us = cf_mono_us() - t0;
    json_t *extra = json_pack("{s:s, s:s, s:s, s:f}", "id", id, "language", cf_language_name(req.language), "result_status",
                              cf_status_name(res.status), "latency_ms", us / 1e3);
    if (res.status == CF_STATUS_SUCCESS)
        add_check(d, "roundtrip", "ok", extra, NULL, "a trivial %s request round-tripped in %.1f ms (worker %s)",
                  cf_language_name(req.language), us / 1e3, res.meta.worker ? res.meta.worker : "?");
    else
        add_check(d, "roundtrip", "fail", extra, "read the reason; check the worker's log and its profile",
                  "a trivial %s request came back %s after %.1f ms: %s", cf_language_name(req.language),
                  cf_status_name(res.status), us / 1e3, res.reason ? res.reason : "(no reason)");
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_dispatcher_destroy(disp);
    return;
fail:;
    char hint[600];
    cf_cli_explain(&err, hint, sizeof(hint));
    if (err.code == CF_E_TIMEOUT)
        add_check(d, "roundtrip", "fail", NULL,
                  "look at the workers' logs; a worker that is busy, paused or cannot reach the result topic "
                  "answers late or not at all",
                  "no answer to a trivial request within %.1f s", timeout_us / 1e6);
    else
        add_check(d, "roundtrip", "fail", NULL, hint[0] ? hint : NULL, "round trip: %s", err.msg);
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_dispatcher_destroy(disp);
}

/* ---------------------------------------------------------------- command */

static const char doctor_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] doctor [--no-roundtrip] [--no-redis]\n"
    "\n"
    "Checks the fleet and prints one line per check (ok, warn, fail, skipped) with\n"
    "a fix for what is wrong: the broker is reachable and authenticates; the\n"
    "topics exist, with their partitions, and the result topics' message size fits\n"
    "the largest result a worker may send; the workers' group (members, assigned\n"
    "partitions, lag); what the live workers serve (their reports on the workers\n"
    "topic); Redis answers; a trivial request round-trips, with its latency.\n"
    "\n"
    "  --no-roundtrip   do not send the trivial request\n"
    "  --no-redis       do not check Redis\n"
    "\n"
    "With --json: one object {\"ok\": bool, \"checks\": [...]}.  Exit code 0 when no\n"
    "check failed (warnings allowed), 1 when one did, 2 on a usage error.\n";

int cf_cli_cmd_doctor(const cf_cli_globals *g, int argc, char **argv)
{
    bool roundtrip = true, redis = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-roundtrip") == 0) {
            roundtrip = false;
        } else if (strcmp(argv[i], "--no-redis") == 0) {
            redis = false;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(doctor_help, stdout);
            return CF_EXIT_OK;
        } else {
            fprintf(stderr, "codefleet doctor: unknown argument '%s'\n%s", argv[i], doctor_help);
            return CF_EXIT_USAGE;
        }
    }
    doctor d = {.g = g, .checks = json_array(), .members = json_array(), .reports = json_object()};
    if (!d.checks || !d.members || !d.reports) {
        fprintf(stderr, "codefleet doctor: out of memory\n");
        return CF_EXIT_TRANSPORT;
    }
    check_broker(&d);
    if (d.broker_ok) {
        check_group(&d);
        check_reports(&d);
        check_topics(&d);
    } else {
        add_check(&d, "topics", "skipped", NULL, NULL, "the broker is not reachable");
        add_check(&d, "workers", "skipped", NULL, NULL, "the broker is not reachable");
    }
    if (redis)
        check_redis(&d);
    if (roundtrip && d.broker_ok)
        check_roundtrip(&d, g->timeout_given ? g->timeout_us : DOCTOR_ROUNDTRIP_DEFAULT_US);
    if (d.rk)
        rd_kafka_destroy(d.rk);

    if (g->json) {
        json_t *out = json_pack("{s:b, s:i, s:i, s:O}", "ok", d.failed == 0, "failed", d.failed, "warnings", d.warned,
                                "checks", d.checks);
        char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(out);
    } else {
        size_t i;
        json_t *c;
        json_array_foreach(d.checks, i, c)
        {
            const char *st = str_of(c, "status");
            printf("%-7s %-12s %s\n", strcmp(st, "ok") == 0 ? "OK" : strcmp(st, "warn") == 0 ? "WARN"
                                                                 : strcmp(st, "fail") == 0 ? "FAIL"
                                                                                           : "SKIP",
                   strncmp(str_of(c, "check"), "topic ", 6) == 0 ? "topic" : str_of(c, "check"),
                   str_of(c, "message"));
            const char *fix = json_string_value(json_object_get(c, "fix"));
            if (fix)
                printf("%-7s %-12s fix: %s\n", "", "", fix);
        }
        printf("%s: %d failed, %d warning(s)\n", d.failed ? "problems found" : "healthy", d.failed, d.warned);
    }
    fflush(stdout);
    int rc = d.failed ? CF_EXIT_FAILED : CF_EXIT_OK;
    json_decref(d.checks);
    json_decref(d.members);
    json_decref(d.reports);
    return rc;
}
