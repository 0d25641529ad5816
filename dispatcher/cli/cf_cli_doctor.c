/* codefleet doctor: checks the fleet the way an operator would, and says
 * what to fix.
 *
 * Each check gives one line: ok, warn, fail or skipped, with a fix for what
 * is wrong.  Checks, in order: the broker (reachable, authenticated), the
 * topics (present, partitions, a result-size limit that fits what the
 * workers produce), the worker group (members, assigned partitions, lag),
 * what the live workers serve (from their reports on the workers topic,
 * worker/worker_report.h), Redis, one trivial request's round trip, and
 * the partitions: those the live workers' partition guards report stalled,
 * and those whose lag did not move during doctor's own run under an owner
 * with room (the group's committed offsets sampled at its start and end).
 * The exit code is 0 when nothing failed (warnings allowed), 1 otherwise;
 * --json prints the whole report as one object.  `codefleet top` (below)
 * reuses the gathering and watches the lag across its pictures. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_chunk.h"
#include "cf_cli.h"
#include "cf_control.h"
#include "cf_dispatcher.h"
#include "cf_kafka.h"
#include "cf_log.h"
#include "cf_redis.h"
#include "cf_util.h"

#define DOCTOR_SUB "doctor"
#define DOCTOR_KAFKA_TIMEOUT_MS 5000
#define DOCTOR_MAX_TOPICS 64
/* Must match worker/worker_report.h (the dispatcher does not link the worker). */
#define DOCTOR_REPORT_MAX_BYTES (64 * 1024)
#define DOCTOR_REPORT_SCHEMA 1
#define DOCTOR_ROUNDTRIP_DEFAULT_US (15 * INT64_C(1000000))
/* Counts in reports beyond this are not believed (a forged report must not
 * wrap sums or freeze rates). */
/* Doctor compares the committed offsets of its start and end only when at
 * least this long passed: the workers commit every 500 ms, so a partition
 * served in between moved. */
#define DOCTOR_STILL_MIN_US (3 * INT64_C(1000000))
/* top calls a lag not moving after max(this, 3 x --interval): as long as
 * the workers' own partition guard waits by default (partition-stall). */
#define TOP_STILL_MIN_MS INT64_C(10000)
/* The most "not moving" partitions named in one line or check. */
#define DOCTOR_STILL_SHOWN 16

typedef struct doctor {
    const cf_cli_globals *g;
    json_t *checks;
    int failed;
    int warned;
    rd_kafka_t *rk;       /* producer handle: metadata and admin requests */
    bool broker_ok;
    /* The group, as described (group_known) or why not (group_why). */
    bool group_known;
    bool group_denied;    /* not described: this principal may not */
    char group_why[512];
    const char *group_state;
    rd_kafka_consumer_group_type_t group_type; /* classic, consumer (KIP-848) or unknown */
    size_t assigned;
    int64_t lag;          /* -1: unknown */
    char lag_why[300];
    json_t *lag_parts;
    json_t *committed;    /* "topic[N]" -> the group's committed offset (-1: none) */
    /* Doctor's first sample of the lag: who holds what since when
     * (cf_cli_lag_watch), taken at watch_at_us; NULL: none taken. */
    json_t *watch;
    int64_t watch_at_us;
    json_t *members;      /* live group members: [{client_id, host, partitions[], report?}] */
    /* The workers topic: the live members' latest reports, and the groups
     * any report names (for "wrong --worker-group" hints). */
    bool reports_read;
    char reports_why[600];
    json_t *reports;      /* worker_id -> report of a live member (at most 2 per member) */
    json_t *report_groups;/* worker_id -> the group its newest valid report names */
    size_t matched;       /* live members whose report was found */
    bool roundtrip;       /* the round trip will run */
    int64_t deadline;     /* mono us: doctor's whole budget on a sick cluster */
    bool budget_spent;
    int64_t largest_result; /* max over live reports, 0 = unknown */
    bool workers_use_redis;
    bool json;            /* --json (global, or given after the command) */
} doctor;

#define DOCTOR_MAX_GROUP_HINTS 16
/* However sick the cluster, doctor answers within about this long. */
#define DOCTOR_BUDGET_US (60 * INT64_C(1000000))
#define DOCTOR_MAX_KAFKA_MESSAGE INT64_C(2147483647) /* max.message.bytes is an int32 */

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
                  "broker %s: no usable connection (%s)", g->brokers, rd_kafka_err2str(e));
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

static json_t *member_by_client_id(doctor *d, const char *cid);

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

/* The result event of one admin request (NULL on timeout; caller destroys). */
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

/* The group's committed offsets of `wanted` (offset < 0: none committed);
 * NULL when they cannot be read (why says why). */
static rd_kafka_topic_partition_list_t *group_committed(doctor *d, const rd_kafka_topic_partition_list_t *wanted,
                                                        char *why, size_t wsz)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(d->rk);
    rd_kafka_ListConsumerGroupOffsets_t *req = rd_kafka_ListConsumerGroupOffsets_new(d->g->worker_group, wanted);
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

/* Total lag: high watermark minus the committed offset, or minus the low
 * watermark where nothing is committed yet (a new fleet's backlog).  Per
 * partition "topic[N]": the lag into per_partition, the committed offset
 * (-1: none) into committed_out (may be NULL). */
static int64_t group_lag(doctor *d, const rd_kafka_topic_partition_list_t *committed, json_t *per_partition,
                         json_t *committed_out)
{
    int64_t total = 0;
    for (int i = 0; committed && i < committed->cnt; i++) {
        const rd_kafka_topic_partition_t *p = &committed->elems[i];
        int64_t lo = 0, hi = 0;
        if (cf_mono_us() > d->deadline) {
            d->budget_spent = true;
            break;
        }
        if (p->err || rd_kafka_query_watermark_offsets(d->rk, p->topic, p->partition, &lo, &hi,
                                                       DOCTOR_KAFKA_TIMEOUT_MS))
            continue;
        /* Below the log start (retention took them): those are gone, not waiting. */
        int64_t from = p->offset >= lo ? p->offset : lo;
        int64_t lag = hi > from ? hi - from : 0;
        total += lag;
        char key[300];
        snprintf(key, sizeof(key), "%s[%" PRId32 "]", p->topic, p->partition);
        json_object_set_new(per_partition, key, json_integer(lag));
        if (committed_out)
            json_object_set_new(committed_out, key, json_integer(p->offset >= 0 ? p->offset : -1));
    }
    return total;
}


/* Adds topic's partitions to l (no duplicates); quietly nothing when its
 * metadata cannot be read (the topic checks say why). */
static void add_topic_partitions(doctor *d, rd_kafka_topic_partition_list_t *l, const char *topic)
{
    int32_t np = 0;
    rd_kafka_resp_err_t kerr;
    cf_error err = {0};
    if (!topic || !topic[0] || cf_kafka_topic_partitions(d->rk, topic, false, &np, &kerr, &err) < 0)
        return;
    for (int32_t p = 0; p < np && p < CF_KAFKA_MAX_PARTITIONS; p++)
        if (!rd_kafka_topic_partition_list_find(l, topic, p))
            rd_kafka_topic_partition_list_add(l, topic, p);
}

/* Describes the group: members, their assignments, the lag. */
static void gather_group(doctor *d)
{
    const char *group = d->g->worker_group;
    d->lag = -1;
    d->lag_parts = json_object();
    d->committed = json_object();
    rd_kafka_queue_t *q = rd_kafka_queue_new(d->rk);
    rd_kafka_AdminOptions_t *o = admin_options(d, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS);
    const char *groups[] = {group};
    rd_kafka_DescribeConsumerGroups(d->rk, groups, 1, o, q);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_event_t *ev = admin_wait(q);
    const rd_kafka_ConsumerGroupDescription_t *desc = NULL;
    if (!ev) {
        snprintf(d->group_why, sizeof(d->group_why), "no answer within %d ms", DOCTOR_KAFKA_TIMEOUT_MS);
    } else if (rd_kafka_event_error(ev)) {
        snprintf(d->group_why, sizeof(d->group_why), "%s", rd_kafka_event_error_string(ev));
    } else {
        size_t n = 0;
        const rd_kafka_ConsumerGroupDescription_t **ds =
            rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(ev), &n);
        const rd_kafka_error_t *ge = n == 1 ? rd_kafka_ConsumerGroupDescription_error(ds[0]) : NULL;
        if (ge) {
            snprintf(d->group_why, sizeof(d->group_why), "%s", rd_kafka_error_string(ge));
            d->group_denied = rd_kafka_error_code(ge) == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED;
        } else if (n == 1) {
            desc = ds[0];
        } else {
            snprintf(d->group_why, sizeof(d->group_why), "the broker described %zu groups", n);
        }
    }
    if (desc) {
        d->group_known = true;
        d->group_state = rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(desc));
        d->group_type = rd_kafka_ConsumerGroupDescription_type(desc);
        size_t nm = rd_kafka_ConsumerGroupDescription_member_count(desc);
        for (size_t i = 0; i < nm; i++) {
            const rd_kafka_MemberDescription_t *m = rd_kafka_ConsumerGroupDescription_member(desc, i);
            const rd_kafka_topic_partition_list_t *parts =
                rd_kafka_MemberAssignment_partitions(rd_kafka_MemberDescription_assignment(m));
            d->assigned += parts ? (size_t)parts->cnt : 0;
            /* A worker is one member per request topic (consumer-per-topic),
             * all with its client id: one entry per worker. */
            const char *cid = rd_kafka_MemberDescription_client_id(m);
            json_t *same = member_by_client_id(d, cid);
            if (same) {
                json_t *more = partition_list_json(parts);
                json_array_extend(json_object_get(same, "partitions"), more);
                json_decref(more);
                continue;
            }
            json_array_append_new(d->members, json_pack("{s:s, s:s, s:o}", "client_id", cid, "host",
                                                        rd_kafka_MemberDescription_host(m), "partitions",
                                                        partition_list_json(parts)));
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    if (!d->group_known)
        return;

    /* The lag of the request topic and of every assigned partition. */
    rd_kafka_topic_partition_list_t *wanted = rd_kafka_topic_partition_list_new(16);
    add_topic_partitions(d, wanted, d->g->request_topic);
    size_t i;
    json_t *m;
    json_array_foreach(d->members, i, m)
    {
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "partitions"), k, p)
        {
            char topic[256];
            int32_t part;
            if (cf_cli_parse_partition(json_string_value(p), topic, sizeof(topic), &part) == 0 &&
                !rd_kafka_topic_partition_list_find(wanted, topic, part))
                rd_kafka_topic_partition_list_add(wanted, topic, part);
        }
    }
    if (wanted->cnt > 0) {
        rd_kafka_topic_partition_list_t *committed = group_committed(d, wanted, d->lag_why, sizeof(d->lag_why));
        if (committed) {
            d->lag = group_lag(d, committed, d->lag_parts, d->committed);
            rd_kafka_topic_partition_list_destroy(committed);
        }
    } else {
        snprintf(d->lag_why, sizeof(d->lag_why), "no partition to measure");
    }
    rd_kafka_topic_partition_list_destroy(wanted);
}

/* "use --worker-group a (or b)" when the reports name other groups. */
static void group_hint(doctor *d, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t len = 0, n = 0;
    const char *k;
    json_t *v;
    json_t *seen = json_object();
    json_object_foreach(d->report_groups, k, v)
    {
        const char *grp = json_string_value(v);
        if (!grp || strcmp(grp, d->g->worker_group) == 0 || !cf_topic_name_valid(grp) || json_object_get(seen, grp))
            continue;
        json_object_set_new(seen, grp, json_true());
        int w = snprintf(buf + len, cap - len, "%s%s", len ? " or " : "", grp);
        if (w < 0 || (size_t)w >= cap - len || ++n >= 4)
            break;
        len += (size_t)w;
    }
    json_decref(seen);
}

static void emit_group_check(doctor *d)
{
    const char *group = d->g->worker_group;
    char hint[300], fix[700];
    group_hint(d, hint, sizeof(hint));
    if (!d->group_known) {
        if (d->group_denied)
            snprintf(fix, sizeof(fix),
                     "run doctor with the operator's settings (a principal allowed to describe group %.200s)%s%.250s",
                     group, hint[0] ? "; the workers' reports name group " : "", hint);
        else
            snprintf(fix, sizeof(fix), "check --worker-group (CODEFLEET_WORKER_GROUP) and the broker%s%.250s",
                     hint[0] ? "; the workers' reports name group " : "", hint);
        add_check(d, "workers", d->group_denied ? "warn" : "fail", NULL, fix, "group %s cannot be described: %s%s",
                  group, d->group_why, d->roundtrip ? " (the round trip below still tests the workers)" : "");
        return;
    }
    char lagtxt[400];
    if (d->lag >= 0)
        snprintf(lagtxt, sizeof(lagtxt), "lag %" PRId64 " request(s)%s", d->lag,
                 d->budget_spent ? " (partial: the broker answers too slowly)" : "");
    else
        snprintf(lagtxt, sizeof(lagtxt), "lag unknown (%.300s)", d->lag_why);
    size_t nm = json_array_size(d->members);
    json_t *extra = json_pack("{s:s, s:s, s:O, s:I, s:I, s:O}", "group", group, "state", d->group_state, "members",
                              d->members, "assigned_partitions", (json_int_t)d->assigned, "lag", (json_int_t)d->lag,
                              "lag_by_partition", d->lag_parts);
    if (nm == 0) {
        if (hint[0])
            snprintf(fix, sizeof(fix),
                     "the workers' reports name group %.250s: pass --worker-group (CODEFLEET_WORKER_GROUP) if that "
                     "is the fleet; otherwise start a worker with group = %.200s",
                     hint, group);
        else
            snprintf(fix, sizeof(fix),
                     "start a worker: deploy/stack.sh up (local), or codefleet-worker --config FILE with group = "
                     "%.200s; or check --worker-group",
                     group);
        add_check(d, "workers", "fail", extra, fix, "no worker in group %s (state %s); %s", group, d->group_state,
                  lagtxt);
    } else if (d->assigned == 0) {
        add_check(d, "workers", "warn", extra, "wait for the rebalance to finish; if it persists, check the workers' logs",
                  "%zu worker(s) in group %s but no partition assigned yet (state %s), %s", nm, group, d->group_state,
                  lagtxt);
    } else {
        add_check(d, "workers", "ok", extra, NULL, "%zu worker(s) in group %s (%s), %zu partition(s) assigned, %s", nm,
                  group, d->group_state, d->assigned, lagtxt);
    }
}

/* ---------------------------------------------------------------- reports */

/* The live member whose client id is cid, or NULL. */
static json_t *member_by_client_id(doctor *d, const char *cid)
{
    size_t i;
    json_t *m;
    json_array_foreach(d->members, i, m)
    {
        if (strcmp(cf_cli_json_str(m, "client_id"), cid) == 0)
            return m;
    }
    return NULL;
}

/* One message of the workers topic.  Only the reports of live members are
 * kept (so what doctor holds is bounded by the group's size), each under
 * the key it was published with, which must be its worker_id. */
static void take_report(doctor *d, const rd_kafka_message_t *m)
{
    if (!m->key || m->key_len == 0 || m->key_len > CF_ID_MAX)
        return;
    char key[CF_ID_MAX + 1];
    memcpy(key, m->key, m->key_len);
    key[m->key_len] = '\0';
    if (!m->payload) {
        json_object_del(d->reports, key); /* tombstone: that worker stopped */
        json_object_del(d->report_groups, key);
        return;
    }
    json_t *rep = NULL;
    if (m->len <= DOCTOR_REPORT_MAX_BYTES)
        rep = json_loadb(m->payload, m->len, JSON_REJECT_DUPLICATES, NULL);
    bool valid = rep && json_is_object(rep) &&
                 json_integer_value(json_object_get(rep, "schema")) == DOCTOR_REPORT_SCHEMA &&
                 json_is_string(json_object_get(rep, "worker_id")) &&
                 strcmp(json_string_value(json_object_get(rep, "worker_id")), key) == 0 &&
                 json_is_string(json_object_get(rep, "client_id"));
    const char *grp = valid ? json_string_value(json_object_get(rep, "group")) : NULL;
    if (grp && (json_object_get(d->report_groups, key) ||
                json_object_size(d->report_groups) < DOCTOR_MAX_GROUP_HINTS * 64))
        json_object_set_new(d->report_groups, key, json_string(grp));
    else
        json_object_del(d->report_groups, key);
    /* Kept: a live member's report under its own key (client id
     * codefleet-worker-<key>), or, for workers with their own client.id,
     * under another key while there is room: at most two per member, so
     * forged keys cannot grow what doctor holds. */
    bool keep = false;
    if (valid) {
        const char *cid = cf_cli_json_str(rep, "client_id");
        char own[CF_ID_MAX + 32];
        snprintf(own, sizeof(own), "codefleet-worker-%s", key);
        if (member_by_client_id(d, cid))
            keep = strcmp(cid, own) == 0 || json_object_get(d->reports, key) ||
                   json_object_size(d->reports) < 2 * json_array_size(d->members);
    }
    if (keep)
        json_object_set_new(d->reports, key, rep); /* the newest report of that key wins */
    else {
        json_decref(rep);
        json_object_del(d->reports, key); /* superseded by something not live or unreadable */
    }
}

/* Reads the workers topic to the end it had when doctor started. */
static int read_reports(doctor *d, char *why, size_t wsz)
{
    const cf_cli_globals *g = d->g;
    cf_error err = {0};
    char group[96];
    snprintf(group, sizeof(group), "codefleet-doctor-%" PRId64, cf_mono_us());
    const cf_kafka_kv role[] = {
        {"group.id", group},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        /* A compacted topic's last offsets may be gone (removed
         * tombstones): the end is where the broker says it is. */
        {"enable.partition.eof", "true"},
        {"isolation.level", "read_committed"},
        {"allow.auto.create.topics", "false"},
    };
    rd_kafka_conf_t *conf =
        cf_kafka_conf_new(g->brokers, "codefleet-doctor", role, sizeof(role) / sizeof(role[0]), &g->kafka, &err);
    rd_kafka_t *c = conf ? cf_kafka_client_new(RD_KAFKA_CONSUMER, conf, "the reports consumer", &err) : NULL;
    if (!c) {
        snprintf(why, wsz, "%s", err.msg);
        return -1;
    }
    rd_kafka_poll_set_consumer(c);
    int32_t np = 0;
    rd_kafka_resp_err_t kerr;
    int rc = -1;
    int64_t *end = NULL;
    rd_kafka_topic_partition_list_t *l = NULL;
    if (cf_kafka_topic_partitions(c, g->workers_topic, false, &np, &kerr, &err) < 0) {
        snprintf(why, wsz, "%s", err.msg);
        goto out;
    }
    end = calloc((size_t)np, sizeof(*end));
    l = rd_kafka_topic_partition_list_new(np);
    if (!end || !l) {
        snprintf(why, wsz, "out of memory");
        goto out;
    }
    int32_t open_parts = 0;
    for (int32_t p = 0; p < np; p++) {
        int64_t lo = 0, hi = 0;
        if (cf_mono_us() > d->deadline) {
            snprintf(why, wsz, "the broker answers too slowly");
            goto out;
        }
        rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(c, g->workers_topic, p, &lo, &hi,
                                                                 DOCTOR_KAFKA_TIMEOUT_MS);
        if (e) {
            snprintf(why, wsz, "watermarks of %s[%" PRId32 "]: %s", g->workers_topic, p, rd_kafka_err2str(e));
            goto out;
        }
        end[p] = hi > lo ? hi : -1;
        if (hi > lo) {
            rd_kafka_topic_partition_list_add(l, g->workers_topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
            open_parts++;
        }
    }
    if (open_parts && rd_kafka_assign(c, l)) {
        snprintf(why, wsz, "cannot read %s", g->workers_topic);
        goto out;
    }
    int64_t deadline = cf_mono_us() + 2 * INT64_C(1000) * DOCTOR_KAFKA_TIMEOUT_MS;
    while (open_parts > 0 && cf_mono_us() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
        if (!m)
            continue;
        bool ours = m->partition >= 0 && m->partition < np && end[m->partition] >= 0;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (ours) {
                end[m->partition] = -1;
                open_parts--;
            }
        } else if (m->err) {
            /* Not allowed to read it, or it went away: say so now rather
             * than after the deadline. */
            snprintf(why, wsz, "%s", rd_kafka_message_errstr(m));
            if (m->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
                rd_kafka_message_destroy(m);
                goto out;
            }
        } else if (ours) {
            take_report(d, m);
            if (m->offset + 1 >= end[m->partition]) {
                end[m->partition] = -1;
                open_parts--;
            }
        }
        rd_kafka_message_destroy(m);
    }
    if (open_parts > 0) {
        size_t n = strlen(why);
        snprintf(why + n, wsz - n, "%s%s not read to its end within %d s", n ? "; " : "", g->workers_topic,
                 2 * DOCTOR_KAFKA_TIMEOUT_MS / 1000);
        goto out;
    }
    rc = 0;
out:
    free(end);
    if (l)
        rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return rc;
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

/* "sandbox [sandbox: python shell]; process [host_local: ...]" */
static void describe_backends(json_t *report, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t i, len = 0;
    json_t *b;
    json_array_foreach(json_object_get(report, "backends"), i, b)
    {
        int w = snprintf(buf + len, cap - len, "%s%s [%s:", i ? "; " : "", cf_cli_json_str(b, "name"), cf_cli_json_str(b, "isolation"));
        if (w < 0 || (size_t)w >= cap - len)
            return;
        len += (size_t)w;
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(b, "languages"), k, l)
        {
            const char *s = json_string_value(l);
            w = snprintf(buf + len, cap - len, " %s", s ? s : "?");
            if (w < 0 || (size_t)w >= cap - len)
                return;
            len += (size_t)w;
        }
        w = snprintf(buf + len, cap - len, "]");
        if (w < 0 || (size_t)w >= cap - len)
            return;
        len += (size_t)w;
    }
}

/* The report of a live member, or NULL.  Reports are data anyone allowed to
 * write the topic could forge: the one published under the member's own
 * worker id (its client id is codefleet-worker-<id>) wins; a report under
 * another key claiming that client id counts only when it is the only one
 * (a worker whose kafka.client.id is set), never when two disagree. */
static json_t *report_of_member(doctor *d, json_t *member)
{
    const char *cid = cf_cli_json_str(member, "client_id");
    static const char prefix[] = "codefleet-worker-";
    const char *own = strncmp(cid, prefix, sizeof(prefix) - 1) == 0 ? cid + sizeof(prefix) - 1 : NULL;
    json_t *mine = own ? json_object_get(d->reports, own) : NULL;
    if (mine && strcmp(cf_cli_json_str(mine, "client_id"), cid) == 0)
        return mine;
    const char *key;
    json_t *rep, *found = NULL;
    size_t n = 0;
    json_object_foreach(d->reports, key, rep)
    {
        if (strcmp(cf_cli_json_str(rep, "client_id"), cid) == 0) {
            found = rep;
            n++;
        }
    }
    return n == 1 ? found : NULL;
}

static void check_reports(doctor *d)
{
    if (!d->g->workers_topic || !d->g->workers_topic[0]) {
        add_check(d, "capabilities", "skipped", NULL, NULL, "no workers topic configured (--workers-topic)");
        return;
    }
    if (!d->group_known) {
        add_check(d, "capabilities", "skipped", NULL, NULL,
                  "the group could not be described, so the live workers are unknown");
        return;
    }
    if (!d->reports_read) {
        char fix[400];
        if (strstr(d->reports_why, "uthoriz"))
            snprintf(fix, sizeof(fix), "run doctor with the operator's settings (a principal allowed to read %.200s)",
                     d->g->workers_topic);
        else if (strstr(d->reports_why, "nknown topic"))
            snprintf(fix, sizeof(fix), "create it (codefleet topics create '%.200s') and let the workers write it",
                     d->g->workers_topic);
        else
            snprintf(fix, sizeof(fix), "run doctor again; if it persists, check the broker's log");
        add_check(d, "capabilities", "warn", NULL, fix, "worker reports unavailable: %s", d->reports_why);
        return;
    }
    size_t i, missing = 0, live = json_array_size(d->members);
    json_t *m;
    json_t *serving = json_array();
    json_t *langs = json_object();
    json_array_foreach(d->members, i, m)
    {
        json_t *found = report_of_member(d, m);
        if (!found) {
            missing++;
            continue;
        }
        json_object_set(m, "report", found);
        d->matched++;
        int64_t lr = json_integer_value(json_object_get(found, "largest_result_bytes"));
        if (lr > DOCTOR_MAX_KAFKA_MESSAGE)
            lr = DOCTOR_MAX_KAFKA_MESSAGE; /* no topic takes more: a larger claim says nothing more */
        if (lr > d->largest_result)
            d->largest_result = lr;
        if (json_is_true(json_object_get(found, "redis")))
            d->workers_use_redis = true;
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(found, "languages"), k, l)
        {
            if (json_is_string(l) && json_object_size(langs) < 64)
                json_object_set_new(langs, json_string_value(l), json_true());
        }
        char bdesc[1500];
        describe_backends(found, bdesc, sizeof(bdesc));
        json_array_append_new(serving, json_pack("{s:s, s:s, s:s}", "worker_id", cf_cli_json_str(found, "worker_id"), "host",
                                                 cf_cli_json_str(found, "host"), "backends", bdesc));
    }
    char all[600] = "";
    size_t len = 0;
    const char *lk;
    json_t *lv;
    json_object_foreach(langs, lk, lv)
    {
        (void)lv;
        int w = snprintf(all + len, sizeof(all) - len, "%s%s", len ? ", " : "", lk);
        if (w < 0 || (size_t)w >= sizeof(all) - len)
            break;
        len += (size_t)w;
    }
    json_t *extra = json_pack("{s:o, s:o}", "workers", serving, "languages", keys_array(langs));
    json_decref(langs);
    if (live == 0) {
        add_check(d, "capabilities", "skipped", extra, NULL, "no live worker in the group");
    } else if (missing == live) {
        add_check(d, "capabilities", "warn", extra,
                  "let the workers write the workers topic (ACL write) and check their workers-topic setting",
                  "none of the %zu live worker(s) published a report on %s", live, d->g->workers_topic);
    } else {
        json_t *w0 = json_array_get(json_object_get(extra, "workers"), 0);
        add_check(d, "capabilities", missing ? "warn" : "ok", extra,
                  missing ? "workers without a report: check their workers-topic setting and ACLs" : NULL,
                  "%zu live worker(s) serve: %s; backends of %s: %s%s", live - missing, all[0] ? all : "(nothing)",
                  cf_cli_json_str(w0, "worker_id"), cf_cli_json_str(w0, "backends"),
                  missing ? " (some workers published no report)" : "");
    }
}

/* ---------------------------------------------------------------- topics */

/* The value of a resource's (a topic's, a group's) configuration entry
 * `name` into buf; -1 when it cannot be read (why says why). */
static int resource_config(doctor *d, rd_kafka_ResourceType_t type, const char *resource, const char *name,
                           char *buf, size_t cap, char *why, size_t wsz)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(d->rk);
    rd_kafka_ConfigResource_t *cr = rd_kafka_ConfigResource_new(type, resource);
    rd_kafka_AdminOptions_t *o = admin_options(d, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_DescribeConfigs(d->rk, &cr, 1, o, q);
    rd_kafka_ConfigResource_destroy(cr);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_event_t *ev = admin_wait(q);
    int rc = -1;
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
            for (size_t i = 0; i < nc && rc < 0; i++)
                if (strcmp(rd_kafka_ConfigEntry_name(ce[i]), name) == 0 && rd_kafka_ConfigEntry_value(ce[i])) {
                    snprintf(buf, cap, "%s", rd_kafka_ConfigEntry_value(ce[i]));
                    rc = 0;
                }
            if (rc < 0)
                snprintf(why, wsz, "%s not in the answer", name);
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    return rc;
}

typedef enum topic_kind {
    TOPIC_PLAIN,    /* exists, partitions */
    TOPIC_RESULTS,  /* and its message limit fits the workers' results */
    TOPIC_REPORTS,  /* and it is compacted */
} topic_kind;

typedef struct topic_want {
    char name[256];
    bool required;   /* missing: fail (else warn) */
    topic_kind kind;
    char role[128];
} topic_want;

static void check_one_topic(doctor *d, const topic_want *t)
{
    int32_t np = 0;
    rd_kafka_resp_err_t kerr;
    cf_error err = {0};
    char name[300];
    snprintf(name, sizeof(name), "topic %s", t->name);
    if (cf_kafka_topic_partitions(d->rk, t->name, false, &np, &kerr, &err) < 0) {
        if (kerr == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED) {
            add_check(d, name, "warn", NULL, "run doctor with the operator's settings (a principal that may describe it)",
                      "%s (%s): not visible to this principal", t->name, t->role);
        } else if (kerr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || kerr == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
            char fix[400];
            snprintf(fix, sizeof(fix), "codefleet topics create '%.250s'", t->name);
            add_check(d, name, t->required ? "fail" : "warn", NULL, fix, "%s (%s) is missing", t->name, t->role);
        } else {
            add_check(d, name, "warn", NULL, "run doctor again; if it persists, check the broker's log",
                      "%s (%s) cannot be checked: %s", t->name, t->role, err.msg);
        }
        return;
    }
    json_t *extra = json_pack("{s:s, s:i}", "topic", t->name, "partitions", (int)np);
    char val[64] = "", why[300] = "";
    if (t->kind == TOPIC_PLAIN) {
        add_check(d, name, "ok", extra, NULL, "%s (%s): %d partition(s)", t->name, t->role, (int)np);
    } else if (t->kind == TOPIC_REPORTS) {
        if (resource_config(d, RD_KAFKA_RESOURCE_TOPIC, t->name, "cleanup.policy", val, sizeof(val), why, sizeof(why)) < 0)
            add_check(d, name, "warn", extra, "grant this principal describe_configs on the topic",
                      "%s (%s): %d partition(s); its cleanup policy cannot be read (%s)", t->name, t->role, (int)np,
                      why);
        else if (!strstr(val, "compact"))
            add_check(d, name, "warn", extra,
                      "compact it: kafka-configs.sh --alter --entity-type topics --entity-name <topic> "
                      "--add-config cleanup.policy=compact",
                      "%s (%s): cleanup.policy is %s, so the reports of stopped workers are deleted with age, not "
                      "replaced by the newest",
                      t->name, t->role, val);
        else
            add_check(d, name, "ok", extra, NULL, "%s (%s): %d partition(s), compacted", t->name, t->role, (int)np);
    } else {
        int64_t mmb = -1;
        if (resource_config(d, RD_KAFKA_RESOURCE_TOPIC, t->name, "max.message.bytes", val, sizeof(val), why, sizeof(why)) == 0)
            mmb = strtoll(val, NULL, 10);
        json_object_set_new(extra, "max_message_bytes", json_integer(mmb));
        json_object_set_new(extra, "largest_result_bytes", json_integer(d->largest_result));
        if (mmb < 0) {
            add_check(d, name, "warn", extra, "grant this principal describe_configs on the topic",
                      "%s (%s): %d partition(s); its message size limit cannot be read (%s)", t->name, t->role,
                      (int)np, why);
        } else if (d->largest_result > 0 && mmb < d->largest_result) {
            char fix[500];
            snprintf(fix, sizeof(fix),
                     "raise it: kafka-configs.sh --alter --entity-type topics --entity-name '%.200s' --add-config "
                     "max.message.bytes=%" PRId64 " (and the broker's message.max.bytes), or lower the workers' "
                     "max-output",
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
}

typedef struct topic_set {
    topic_want v[DOCTOR_MAX_TOPICS];
    size_t n;
    size_t dropped;
} topic_set;

static void want_topic(topic_set *ts, const char *name, bool required, topic_kind kind, const char *role,
                       const char *worker)
{
    if (!name || !name[0])
        return;
    for (size_t j = 0; j < ts->n; j++)
        if (strcmp(ts->v[j].name, name) == 0)
            return;
    if (ts->n >= DOCTOR_MAX_TOPICS) {
        ts->dropped++;
        return;
    }
    topic_want *t = &ts->v[ts->n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->required = required;
    t->kind = kind;
    if (worker)
        snprintf(t->role, sizeof(t->role), "%s, named by worker %.60s", role, worker);
    else
        snprintf(t->role, sizeof(t->role), "%s", role);
}

static void check_topics(doctor *d)
{
    const cf_cli_globals *g = d->g;
    topic_set *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return;
    want_topic(ts, g->request_topic, true, TOPIC_PLAIN, "requests", NULL);
    want_topic(ts, g->result_topic, true, TOPIC_RESULTS, "results", NULL);
    want_topic(ts, g->dlq_topic, true, TOPIC_RESULTS, "dead letters", NULL);
    want_topic(ts, g->events_topic, false, TOPIC_PLAIN, "events", NULL);
    want_topic(ts, g->workers_topic, false, TOPIC_REPORTS, "worker reports", NULL);
    /* Without it cancels of these requests reach no worker (a warning: the
     * fleet runs, cancels do not). */
    char cancels[300];
    if (g->request_topic && snprintf(cancels, sizeof(cancels), "%s%s", g->request_topic, CF_CANCEL_TOPIC_SUFFIX) <
                                (int)sizeof(cancels))
        want_topic(ts, cancels, false, TOPIC_PLAIN, "cancels", NULL);
    /* Without it requests asking for "stream" are rejected (a warning too). */
    char outputs[300];
    if (g->result_topic && snprintf(outputs, sizeof(outputs), "%s%s", g->result_topic, CF_CHUNK_TOPIC_SUFFIX) <
                               (int)sizeof(outputs))
        want_topic(ts, outputs, false, TOPIC_PLAIN, "output chunks", NULL);
    /* The live workers' other topics (tenant profiles); a report is data:
     * names that are not Kafka topic names are said, not used. */
    size_t i;
    json_t *m;
    json_array_foreach(d->members, i, m)
    {
        json_t *rep = json_object_get(m, "report");
        const char *wid = cf_cli_json_str(rep, "worker_id");
        static const struct {
            const char *field, *role;
            topic_kind kind;
        } lists[] = {{"request_topics", "requests (profile)", TOPIC_PLAIN},
                     {"result_topics", "results (profile)", TOPIC_RESULTS}};
        for (size_t li = 0; rep && li < 2; li++) {
            size_t k;
            json_t *t;
            json_array_foreach(json_object_get(rep, lists[li].field), k, t)
            {
                const char *s = json_string_value(t);
                if (s && cf_topic_name_valid(s))
                    want_topic(ts, s, true, lists[li].kind, lists[li].role, wid);
                else
                    ts->dropped++;
            }
        }
    }
    for (size_t j = 0; j < ts->n; j++) {
        if (cf_mono_us() > d->deadline) {
            add_check(d, "topics", "warn", NULL, "run doctor again; if it persists, check the broker's log",
                      "%zu topic(s) not checked: the broker answers too slowly (doctor's %d s budget)", ts->n - j,
                      (int)(DOCTOR_BUDGET_US / 1000000));
            break;
        }
        check_one_topic(d, &ts->v[j]);
    }
    if (ts->dropped)
        add_check(d, "topics", "warn", NULL, "look at the workers' reports (codefleet doctor --json)",
                  "%zu topic name(s) from the workers' reports not checked (over %d topics, or not a valid name)",
                  ts->dropped, DOCTOR_MAX_TOPICS);
    free(ts);
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
    err.code = CF_E_REDIS;
    char hint[600];
    cf_cli_explain(&err, hint, sizeof(hint));
    /* Only workspaces, checkpoints and idempotency need Redis: whether the
     * fleet does is in the live workers' reports, when they were read. */
    bool known = d->group_known && d->reports_read && json_array_size(d->members) > 0 &&
                 d->matched == json_array_size(d->members);
    const char *note = d->workers_use_redis ? ""
                       : known ? " (the live workers do not use Redis: only workspace and checkpoint commands need it)"
                               : " (whether the workers use it is unknown: no worker report was read)";
    add_check(d, "redis", d->workers_use_redis ? "fail" : "warn", json_pack("{s:s}", "redis", g->redis),
              hint[0] ? hint : "check --redis, --redis-user and --redis-password", "%s%s", err.msg, note);
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
    if (shell || !any_report || (!python && !command)) {
        req->language = CF_LANG_SHELL;
        cf_bytes_set(&req->code, "exit 0", 6);
    } else if (python) {
        req->language = CF_LANG_PYTHON;
        cf_bytes_set(&req->code, "pass", 4);
    } else {
        req->language = CF_LANG_COMMAND;
        req->argv = calloc(1, sizeof(char *));
        if (req->argv && cf_str_set(&req->argv[0], "true") == 0)
            req->argc = 1;
    }
}

static void check_roundtrip(doctor *d, int64_t timeout_us, bool timeout_given)
{
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
    int64_t t0 = cf_mono_us(), us = 0;
    /* One deadline for the flush and the wait. */
    int64_t deadline = t0 + timeout_us;
    if (cf_dispatcher_new(&cfg, &disp, &err) < 0 || cf_dispatcher_new_id(id, sizeof(id), &err) < 0)
        goto fail;
    trivial_request(d, &req);
    if (cf_str_set(&req.id, id) < 0 || cf_str_set(&req.identity, "codefleet-doctor") < 0) {
        cf_error_set(&err, CF_E_NOMEM, "out of memory");
        goto fail;
    }
    req.created_us = cf_now_us();
    t0 = cf_mono_us();
    if (cf_dispatcher_submit(disp, &req, &err) < 0)
        goto fail;
    if (cf_dispatcher_flush(disp, deadline - cf_mono_us(), &err) < 0) {
        /* Not sent at all: nothing about the workers is known from it. */
        char hint[600];
        cf_cli_explain(&err, hint, sizeof(hint));
        add_check(d, "roundtrip", "fail", NULL, hint[0] ? hint : "check the request topic and the broker",
                  "the trivial request could not be sent to %s: %s", g->request_topic, err.msg);
        cf_request_clear(&req);
        cf_dispatcher_destroy(disp);
        return;
    }
    int64_t left = deadline - cf_mono_us();
    if (cf_dispatcher_wait(disp, id, left > 1000 ? left : 1000, &res, &err) < 0)
        goto fail;
    us = cf_mono_us() - t0;
    json_t *extra = json_pack("{s:s, s:s, s:s, s:f}", "id", id, "language", cf_language_name(req.language),
                              "result_status", cf_status_name(res.status), "latency_ms", us / 1e3);
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
    if (err.code == CF_E_TIMEOUT) {
        char fix[600];
        if (d->group_known && json_array_size(d->members) == 0)
            snprintf(fix, sizeof(fix), "no worker consumes %.200s: see the workers check above", g->request_topic);
        else
            snprintf(fix, sizeof(fix),
                     "look at the workers' logs (a busy, paused or stuck worker answers late or not at all)%s",
                     timeout_given ? "; or give it longer (--timeout)" : "");
        add_check(d, "roundtrip", "fail", NULL, fix, "no answer to a trivial request on %s within %.1f s%s",
                  g->request_topic, timeout_us / 1e6, timeout_given ? " (--timeout)" : "");
    } else {
        add_check(d, "roundtrip", "fail", NULL, hint[0] ? hint : NULL, "round trip: %s", err.msg);
    }
    cf_request_clear(&req);
    cf_result_clear(&res);
    cf_dispatcher_destroy(disp);
}

/* ---------------------------------------------------------------- partitions */

/* Appends to buf (*len bytes so far); false once it is full (the text then
 * ends with "..." where it fit). */
static bool buf_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static bool buf_add(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len + 1 >= cap)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= cap - *len) {
        if (cap >= 4)
            memcpy(buf + cap - 4, "...", 4);
        *len = cap - 1;
        return false;
    }
    *len += (size_t)w;
    return true;
}




/* One sample for cf_cli_lag_watch: each partition a live member holds
 * whose lag and committed offset were read, with its member, the owner's
 * name (its worker id when its report is known) and, when with_room,
 * whether its report says it has room. */
static json_t *lag_sample(doctor *d, json_t *lag, json_t *committed, bool with_room)
{
    json_t *sample = json_object();
    size_t i;
    json_t *m;
    json_array_foreach(d->members, i, m)
    {
        json_t *rep = with_room ? report_of_member(d, m) : NULL;
        const char *cid = cf_cli_json_str(m, "client_id");
        const char *owner = rep ? cf_cli_json_str(rep, "worker_id") : cid;
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "partitions"), k, p)
        {
            const char *key = json_string_value(p);
            json_t *l = key ? json_object_get(lag, key) : NULL;
            json_t *c = key ? json_object_get(committed, key) : NULL;
            if (!sample || !l || !c)
                continue;
            char topic[256];
            int32_t part;
            bool room = cf_cli_parse_partition(key, topic, sizeof(topic), &part) == 0 && cf_cli_report_has_room(rep, topic);
            json_t *e = json_pack("{s:O, s:O, s:s, s:s}", "committed", c, "lag", l, "member", cid, "owner", owner);
            if (e && with_room)
                json_object_set_new(e, "room", json_boolean(room));
            if (e)
                json_object_set_new(sample, key, e);
        }
    }
    return sample;
}

/* Doctor's first lag sample, right after the group was described (the
 * reports are not read yet: the owners' room is judged at the second). */
static void lag_first_sample(doctor *d)
{
    json_t *sample = lag_sample(d, d->lag_parts, d->committed, false);
    d->watch = json_object();
    d->watch_at_us = cf_mono_us();
    if (sample && d->watch)
        json_decref(cf_cli_lag_watch(d->watch, sample, d->watch_at_us / 1000, DOCTOR_STILL_MIN_US / 1000));
    json_decref(sample);
}

/* The second sample, at the end of doctor's run: the partitions of the
 * first that had lag under an owner whose report says it has room, read
 * again.  NULL (nothing to say) when less than DOCTOR_STILL_MIN_US passed
 * (doctor does not wait for it), nothing qualifies, or they cannot be read;
 * else what did not move, and *window_s how long it was watched. */
static json_t *lag_second_sample(doctor *d, double *window_s)
{
    int64_t now = cf_mono_us();
    if (!d->watch || json_object_size(d->watch) == 0 || now - d->watch_at_us < DOCTOR_STILL_MIN_US ||
        now > d->deadline)
        return NULL;
    rd_kafka_topic_partition_list_t *wanted = rd_kafka_topic_partition_list_new(16);
    const char *key;
    json_t *e;
    json_object_foreach(d->watch, key, e)
    {
        /* Only what can still qualify is read again: each costs a
         * watermark request. */
        json_t *m = member_by_client_id(d, cf_cli_json_str(e, "member"));
        char topic[256];
        int32_t part;
        if (m && cf_cli_parse_partition(key, topic, sizeof(topic), &part) == 0 &&
            cf_cli_report_has_room(report_of_member(d, m), topic))
            rd_kafka_topic_partition_list_add(wanted, topic, part);
    }
    json_t *out = NULL;
    char why[300];
    rd_kafka_topic_partition_list_t *committed = wanted->cnt ? group_committed(d, wanted, why, sizeof(why)) : NULL;
    if (committed) {
        json_t *lag = json_object(), *offs = json_object();
        group_lag(d, committed, lag, offs);
        json_t *sample = lag_sample(d, lag, offs, true);
        int64_t at = cf_mono_us();
        if (sample)
            out = cf_cli_lag_watch(d->watch, sample, at / 1000, DOCTOR_STILL_MIN_US / 1000);
        *window_s = (double)(at - d->watch_at_us) / 1e6;
        json_decref(sample);
        json_decref(lag);
        json_decref(offs);
        rd_kafka_topic_partition_list_destroy(committed);
    }
    rd_kafka_topic_partition_list_destroy(wanted);
    return out;
}

/* "partitions": what the live workers' partition guards find stalled (their
 * reports), and the lag that did not move during this run. */
static void check_partitions(doctor *d)
{
    const char *skip = NULL;
    if (!d->broker_ok)
        skip = "the broker check failed";
    else if (!d->g->workers_topic || !d->g->workers_topic[0])
        skip = "no workers topic configured (--workers-topic)";
    else if (!d->group_known)
        skip = "the group could not be described, so the live workers are unknown";
    else if (!d->reports_read)
        skip = "the worker reports are unavailable (see capabilities)";
    else if (json_array_size(d->members) == 0)
        skip = "no live worker in the group";
    if (skip) {
        add_check(d, "partitions", "skipped", NULL, NULL, "%s", skip);
        return;
    }
    /* Two parts, each bounded, so that many stalled names do not push the
     * lag that did not move out of the message. */
    char msg[560] = "", nm[400] = "";
    size_t len = 0, nlen = 0, silent = 0, i;
    json_t *stalled = json_array(), *m;
    json_array_foreach(d->members, i, m)
    {
        json_t *rep = report_of_member(d, m);
        int64_t stalls = -1;
        json_t *parts = cf_cli_report_stalled(rep, &stalls);
        if (!parts) {
            silent++; /* no report, or one from before workers said */
            continue;
        }
        if (json_array_size(parts) == 0) {
            json_decref(parts);
            continue;
        }
        char wid[100];
        const char *sid = cf_cli_json_str(rep, "worker_id");
        cf_printable(sid, strlen(sid), wid, sizeof(wid));
        buf_add(msg, sizeof(msg), &len, "%sworker %s reports stalled:", len ? "; " : "", wid);
        size_t k;
        json_t *p;
        json_array_foreach(parts, k, p)
            buf_add(msg, sizeof(msg), &len, "%s %s", k ? "," : "", json_string_value(p));
        if (stalls >= 0)
            buf_add(msg, sizeof(msg), &len, " (%" PRId64 " stall(s) since it started)", stalls);
        json_t *entry = json_pack("{s:s, s:o}", "worker_id", sid, "partitions", parts);
        if (entry && stalls >= 0)
            json_object_set_new(entry, "stalls", json_integer(stalls));
        json_array_append_new(stalled, entry);
    }
    double window_s = 0;
    json_t *still = lag_second_sample(d, &window_s);
    size_t nstill = json_array_size(still);
    json_t *p;
    json_array_foreach(still, i, p)
    {
        if (i == DOCTOR_STILL_SHOWN) {
            buf_add(nm, sizeof(nm), &nlen, " and %zu more", nstill - i);
            break;
        }
        char part[100], owner[100];
        const char *sp = cf_cli_json_str(p, "partition"), *so = cf_cli_json_str(p, "owner");
        cf_printable(sp, strlen(sp), part, sizeof(part));
        cf_printable(so, strlen(so), owner, sizeof(owner));
        buf_add(nm, sizeof(nm), &nlen, "%s%s (owner %s, for %.0f s)", i ? ", " : "not moving during this check: ",
                part, owner, json_real_value(json_object_get(p, "for_s")));
    }
    json_t *extra = json_pack("{s:o, s:o}", "stalled", stalled, "not_moving", still ? still : json_array());
    if (extra && still)
        json_object_set_new(extra, "window_s", json_real(window_s));
    if (json_array_size(stalled) == 0 && nstill == 0) {
        if (silent)
            add_check(d, "partitions", "ok", extra, NULL,
                      "no partition stalled under a live worker (%zu of %zu live worker(s) do not report on their "
                      "partitions: no report, or an older worker)",
                      silent, json_array_size(d->members));
        else
            add_check(d, "partitions", "ok", extra, NULL, "no partition stalled under a live worker");
        return;
    }
    char fix[600] = "";
    size_t flen = 0;
    if (json_array_size(stalled))
        buf_add(fix, sizeof(fix), &flen,
                "a worker's partition guard moves a stalled partition again by itself (resume, seek, rejoin); if it "
                "stays stalled, read that worker's log and restart it");
    if (nstill)
        buf_add(fix, sizeof(fix), &flen,
                "%slook at what the owner runs: a request running longer than this check holds its partition's "
                "commit; if it runs nothing, read its log and restart it",
                flen ? "; for the lag not moving, " : "");
    add_check(d, "partitions", "warn", extra, fix, "%s%s%s", msg, len && nlen ? "; " : "", nm);
}

/* "spread": each request topic over the live workers.  A worker holds
 * its even share of every topic (consumer-per-topic); a topic that sits on
 * fewer workers than could hold it is served by fewer slots than the fleet
 * has (an older worker, or consumer-per-topic off, where the group
 * balances only the total). */
static void check_spread(doctor *d)
{
    if (!d->group_known || json_array_size(d->members) == 0) {
        add_check(d, "spread", "skipped", NULL, NULL, "%s",
                  d->group_known ? "no live worker in the group" : "the group could not be described");
        return;
    }
    size_t nw = json_array_size(d->members);
    json_t *topics = cf_cli_spread_by_topic(d->members);
    char msg[700] = "";
    size_t len = 0, uneven = 0;
    const char *topic;
    json_t *by;
    json_object_foreach(topics, topic, by)
    {
        json_int_t lo, hi;
        if (!cf_cli_spread_uneven(by, nw, &lo, &hi))
            continue;
        uneven++;
        char shown[100];
        cf_printable(topic, strlen(topic), shown, sizeof(shown));
        buf_add(msg, sizeof(msg), &len,
                "%s%s on %zu of %zu worker(s) (%" JSON_INTEGER_FORMAT "-%" JSON_INTEGER_FORMAT " partition(s) each)",
                len ? "; " : "", shown, json_object_size(by), nw, lo, hi);
    }
    json_t *extra = json_pack("{s:o}", "topics", topics);
    if (uneven == 0)
        add_check(d, "spread", "ok", extra, NULL, "every request topic spread over the %zu live worker(s)", nw);
    else
        add_check(d, "spread", "warn", extra,
                  "run every worker with consumer-per-topic (the default, in effect with librdkafka 2.6.1 or newer): "
                  "the group then spreads each topic over the workers; with one consumer for all topics it balances "
                  "only the total",
                  "%s", msg);
}

/* ---------------------------------------------------------------- failover */

/* How long a dead worker's partitions wait: under KIP-848 the broker's
 * group session, which an operator must set (Kafka's default is 45 s,
 * where the classic protocol's member-side 6 s gave 6.5 s). */
static void check_failover(doctor *d)
{
    const char *group = d->g->worker_group;
    if (!d->group_known || json_array_size(d->members) == 0) {
        add_check(d, "failover", "skipped", NULL, NULL, "group %s: %s", group,
                  d->group_known ? "no worker in it" : "not described");
        return;
    }
    if (d->group_type == RD_KAFKA_CONSUMER_GROUP_TYPE_CLASSIC) {
        add_check(d, "failover", "ok", json_pack("{s:s}", "protocol", "classic"), NULL,
                  "group %s uses the classic protocol: a dead worker's partitions move after its own session "
                  "(session.timeout.ms, 6 s by default)", group);
        return;
    }
    if (d->group_type != RD_KAFKA_CONSUMER_GROUP_TYPE_CONSUMER) {
        add_check(d, "failover", "skipped", NULL, NULL, "group %s: the broker did not say which protocol it uses",
                  group);
        return;
    }
    char val[64], why[400];
    if (resource_config(d, RD_KAFKA_RESOURCE_GROUP, group, "consumer.session.timeout.ms", val, sizeof(val), why,
                        sizeof(why)) < 0) {
        add_check(d, "failover", "skipped", json_pack("{s:s}", "protocol", "consumer"),
                  "grant this principal describe_configs on the group", "group %s (KIP-848): its session is not "
                  "readable: %s", group, why);
        return;
    }
    long long ms = strtoll(val, NULL, 10);
    json_t *extra = json_pack("{s:s, s:I}", "protocol", "consumer", "session_ms", (json_int_t)ms);
    if (ms > 10000)
        add_check(d, "failover", "warn", extra,
                  "lower group.consumer.session.timeout.ms (and group.consumer.min.session.timeout.ms) on the "
                  "brokers, or the group's consumer.session.timeout.ms (kafka-configs --entity-type groups), or "
                  "run the workers with group-protocol = classic (docs/RELIABILITY.md, \"Failover\")",
                  "group %s (KIP-848): the broker's session is %lld ms, so a dead worker's partitions wait that "
                  "long", group, ms);
    else
        add_check(d, "failover", "ok", extra, NULL,
                  "group %s (KIP-848): the broker's session is %lld ms: a dead worker's partitions move in about "
                  "that long", group, ms);
}


/* ---------------------------------------------------------------- command */

static const char doctor_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] doctor [--json] [--no-roundtrip] [--no-redis]\n"
    "\n"
    "Checks the fleet and prints one line per check (ok, warn, fail, skipped) with\n"
    "a fix for what is wrong: the broker is reachable and authenticates; the\n"
    "workers' group (members, assigned partitions, lag); what the live workers\n"
    "serve (their reports on the workers topic); the topics exist, with their\n"
    "partitions, result topics whose message limit fits the largest result a\n"
    "worker may send, a compacted workers topic; Redis answers; a trivial request\n"
    "round-trips, with its latency (15 s to answer, 5 s when no worker is known;\n"
    "--timeout sets it); no live worker reports a stalled partition, and no\n"
    "partition's lag stood still during this run under an owner with room\n"
    "(compared only when the run took 3 s or more).\n"
    "\n"
    "  --json           one object {\"ok\", \"failed\", \"warnings\", \"checks\": [...]}\n"
    "                   (the global --json does the same)\n"
    "  --no-roundtrip   do not send the trivial request\n"
    "  --no-redis       do not check Redis\n"
    "\n"
    "Exit code 0 when no check failed (warnings allowed), 1 when one did (or\n"
    "doctor itself could not run), 2 on a usage error.\n";

/* --json among a command's own arguments (before any other is judged, so a
 * usage error is JSON too when --json comes after the bad argument). */
static bool json_in_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0)
            return true;
    return false;
}

/* A report's text is data from the broker: no terminal control through it. */
static void print_clean(const char *prefix, const char *s)
{
    char buf[2048];
    cf_sanitize_text(s, strlen(s), false, buf, sizeof(buf));
    printf("%s%s\n", prefix, buf);
}

static void print_text(doctor *d)
{
    size_t i;
    json_t *c;
    json_array_foreach(d->checks, i, c)
    {
        const char *st = cf_cli_json_str(c, "status");
        const char *tag = strcmp(st, "ok") == 0     ? "OK"
                          : strcmp(st, "warn") == 0 ? "WARN"
                          : strcmp(st, "fail") == 0 ? "FAIL"
                                                    : "SKIP";
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "%-7s %-12s ", tag,
                 strncmp(cf_cli_json_str(c, "check"), "topic ", 6) == 0 ? "topic" : cf_cli_json_str(c, "check"));
        print_clean(prefix, cf_cli_json_str(c, "message"));
        const char *fix = json_string_value(json_object_get(c, "fix"));
        if (fix)
            print_clean("                     fix: ", fix);
    }
    printf("%s: %d failed, %d warning(s)\n", d->failed ? "problems found" : "healthy", d->failed, d->warned);
}

int cf_cli_cmd_doctor(const cf_cli_globals *g, int argc, char **argv)
{
    bool roundtrip = true, redis = true, json = g->json || json_in_args(argc, argv);
    cf_cli_set_report_json(json);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-roundtrip") == 0) {
            roundtrip = false;
        } else if (strcmp(argv[i], "--no-redis") == 0) {
            redis = false;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(doctor_help, stdout);
            return CF_EXIT_OK;
        } else {
            char msg[300];
            snprintf(msg, sizeof(msg), "unknown argument '%.200s'", argv[i]);
            return cf_cli_report_usage("doctor", "doctor", msg);
        }
    }
    doctor d = {.g = g, .json = json, .roundtrip = roundtrip, .deadline = cf_mono_us() + DOCTOR_BUDGET_US};
    d.checks = json_array();
    d.members = json_array();
    d.reports = json_object();
    d.report_groups = json_object();
    if (!d.checks || !d.members || !d.reports || !d.report_groups) {
        cf_cli_report("doctor", CF_EXIT_FAILED, "out of memory");
        json_decref(d.checks);
        json_decref(d.members);
        json_decref(d.reports);
        json_decref(d.report_groups);
        return CF_EXIT_FAILED;
    }
    check_broker(&d);
    if (d.broker_ok) {
        gather_group(&d);
        if (d.lag >= 0)
            lag_first_sample(&d);
        if (g->workers_topic && g->workers_topic[0])
            d.reports_read = read_reports(&d, d.reports_why, sizeof(d.reports_why)) == 0;
        emit_group_check(&d);
        check_reports(&d);
        check_topics(&d);
    } else {
        static const char *const skipped[] = {"workers", "capabilities", "topics"};
        for (size_t i = 0; i < 3; i++)
            add_check(&d, skipped[i], "skipped", NULL, NULL, "the broker check failed");
    }
    if (redis)
        check_redis(&d);
    if (roundtrip && d.broker_ok) {
        bool known = d.group_known && json_array_size(d.members) > 0;
        int64_t t = g->timeout_given ? g->timeout_us : known ? DOCTOR_ROUNDTRIP_DEFAULT_US : 5 * INT64_C(1000000);
        check_roundtrip(&d, t, g->timeout_given);
    } else if (roundtrip) {
        add_check(&d, "roundtrip", "skipped", NULL, NULL, "the broker check failed");
    }
    /* Last: the longer doctor ran (the round trip), the more its second
     * lag sample says. */
    check_partitions(&d);
    check_spread(&d);
    if (d.broker_ok)
        check_failover(&d);
    if (d.rk)
        rd_kafka_destroy(d.rk);

    if (json) {
        json_t *out = json_pack("{s:b, s:i, s:i, s:O}", "ok", d.failed == 0, "failed", d.failed, "warnings", d.warned,
                                "checks", d.checks);
        char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(out);
    } else {
        print_text(&d);
    }
    fflush(stdout);
    int rc = d.failed ? CF_EXIT_FAILED : CF_EXIT_OK;
    json_decref(d.checks);
    json_decref(d.members);
    json_decref(d.reports);
    json_decref(d.report_groups);
    json_decref(d.lag_parts);
    json_decref(d.committed);
    json_decref(d.watch);
    return rc;
}

/* ---------------------------------------------------------------- top */

static const char top_help[] =
    "usage: codefleet top [--once] [--interval SECONDS] [--count N] [--json]\n"
    "\n"
    "The fleet at a glance, for people without Grafana: the workers' group\n"
    "(live members), each worker's slots, busy slots, waiting requests, state\n"
    "and answer rate (from the load its report carries, republished every\n"
    "report-interval), the partitions its partition guard finds stalled, and\n"
    "the group's lag on the request topic, per partition.  A partition whose\n"
    "committed offset stays put with lag under a member that reports room, for\n"
    "max(10 s, 3 x --interval), is shown as \"lag not moving\".\n"
    "Refreshes every --interval (2 s) until interrupted; --once prints one\n"
    "picture, --json one JSON object per picture.  Uses --workers-topic,\n"
    "--worker-group and --request-topic.\n"
    "\n"
    "Exit code 0 when a picture showed a live worker's stats; 1 when none did\n"
    "(no live worker in the group, the group not described, no report read:\n"
    "--once then prints only the line that says which); 6 when the broker\n"
    "cannot be reached; 2 on a usage error.  With --json an error is a JSON\n"
    "object {\"error\": {...}} on stderr and stdout, as for every command.\n";

/* The previous picture's counts per worker: rates are differences between
 * two reports of one worker. */
typedef struct top_prev {
    json_t *seen; /* worker_id -> [at_ms, answered, rate] */
    json_t *watch;        /* the lag watch across pictures (cf_cli_lag_watch) */
    int64_t still_min_ms; /* how long a lag stands before it is "not moving" */
} top_prev;

static json_t *top_picture(doctor *d, top_prev *prev)
{
    json_t *workers = json_array();
    int64_t slots = 0, busy = 0, held = 0;
    double rate_sum = 0;
    int64_t now_ms = cf_now_us() / 1000;
    size_t i;
    json_t *m;
    json_array_foreach(d->members, i, m)
    {
        json_t *rep = report_of_member(d, m);
        json_t *load = rep ? json_object_get(rep, "load") : NULL;
        const char *id = rep ? cf_cli_json_str(rep, "worker_id") : cf_cli_json_str(m, "client_id");
        json_t *w = json_pack("{s:s, s:s, s:O}", "worker_id", id, "host", cf_cli_json_str(m, "host"), "partitions",
                              json_object_get(m, "partitions"));
        if (!w)
            continue;
        /* Reports are data from the workers topic: numbers out of range
         * are not shown (a forged report must not wrap the sums or freeze
         * the rates). */
        json_int_t s = rep ? json_integer_value(json_object_get(rep, "slots")) : -1;
        if (s >= 0 && s <= 65536) {
            json_object_set_new(w, "slots", json_integer(s));
            slots += s;
        }
        json_int_t at = load ? json_integer_value(json_object_get(load, "at_ms")) : 0;
        json_int_t ans = load ? json_integer_value(json_object_get(load, "answered")) : -1;
        json_int_t b = load ? json_integer_value(json_object_get(load, "busy")) : -1;
        json_int_t h = load ? json_integer_value(json_object_get(load, "held")) : -1;
        if (load && (at <= 0 || at > now_ms + 60000 || ans < 0 || ans > CF_CLI_REPORT_COUNT_MAX || b < 0 || b > 65536 ||
                     h < 0 || h > CF_CLI_REPORT_COUNT_MAX))
            load = NULL;
        if (load) {
            busy += b;
            held += h;
            json_object_set_new(w, "busy", json_integer(b));
            json_object_set_new(w, "held", json_integer(h));
            json_object_set_new(w, "answered", json_integer(ans));
            json_object_set_new(w, "state", json_string(json_is_true(json_object_get(load, "draining")) ? "draining"
                                                        : json_is_true(json_object_get(load, "paused")) ? "paused"
                                                                                                          : "running"));
            json_object_set_new(w, "report_age_s", json_real((double)(now_ms - at) / 1000.0));
            /* The rate between this report and the previous one seen. */
            json_t *p = json_object_get(prev->seen, id);
            double rate = -1;
            if (p) {
                json_int_t pat = json_integer_value(json_array_get(p, 0));
                json_int_t pans = json_integer_value(json_array_get(p, 1));
                rate = json_real_value(json_array_get(p, 2));
                if (at > pat && ans >= pans)
                    rate = ((double)ans - (double)pans) * 1000.0 / ((double)at - (double)pat);
                else if (at < pat || ans < pans)
                    p = NULL, rate = -1; /* went backwards: start again from this one */
            }
            if (!p || at > json_integer_value(json_array_get(p, 0)))
                json_object_set_new(prev->seen, id, json_pack("[I, I, f]", at, ans, rate));
            if (rate >= 0) {
                json_object_set_new(w, "answers_per_s", json_real(rate));
                rate_sum += rate;
            }
            int64_t stalls = -1;
            json_t *stalled = cf_cli_report_stalled(rep, &stalls);
            if (stalled)
                json_object_set_new(w, "stalled", stalled);
            if (stalls >= 0)
                json_object_set_new(w, "stalls", json_integer(stalls));
        }
        json_array_append_new(workers, w);
    }
    json_t *pic = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:o}", "group", d->g->worker_group, "state",
                            d->group_state ? d->group_state : "unknown", "workers_live",
                            (json_int_t)json_array_size(d->members), "slots", (json_int_t)slots, "busy",
                            (json_int_t)busy, "held", (json_int_t)held, "workers", workers);
    if (!pic)
        return NULL;
    json_object_set_new(pic, "lag", json_integer(d->lag));
    json_object_set(pic, "lag_by_partition", d->lag_parts ? d->lag_parts : json_object());
    json_object_set_new(pic, "answers_per_s", json_real(rate_sum));
    /* Lag unknown this time (offsets not read): the watch keeps what it
     * had rather than starting again over a passing error. */
    json_t *still = NULL;
    if (d->lag >= 0) {
        json_t *sample = lag_sample(d, d->lag_parts, d->committed, true);
        if (sample)
            still = cf_cli_lag_watch(prev->watch, sample, cf_mono_us() / 1000, prev->still_min_ms);
        json_decref(sample);
    }
    json_object_set_new(pic, "not_moving", still ? still : json_array());
    json_object_set_new(pic, "spread", cf_cli_spread_by_topic(d->members));
    if (!d->group_known)
        json_object_set_new(pic, "why", json_string(d->group_why));
    if (!d->reports_read && d->reports_why[0])
        json_object_set_new(pic, "reports_why", json_string(d->reports_why));
    return pic;
}

/* Why a picture holds no worker's stats (no live worker whose report
 * gave its load): false when it holds some. */
static bool top_no_stats(const doctor *d, const json_t *pic, char *why, size_t cap)
{
    size_t i, live = json_array_size(d->members);
    json_t *w;
    json_array_foreach(json_object_get(pic, "workers"), i, w)
    {
        if (json_object_get(w, "state"))
            return false;
    }
    const char *topic = d->g->workers_topic;
    if (!d->group_known)
        snprintf(why, cap, "no worker stats: the group %s could not be described (%s)", d->g->worker_group,
                 d->group_why);
    else if (live == 0)
        snprintf(why, cap, "no worker stats: no live worker in group %s (state %s)", d->g->worker_group,
                 d->group_state ? d->group_state : "unknown");
    else if (!topic || !topic[0])
        snprintf(why, cap, "no worker stats: no workers topic to read them from (--workers-topic)");
    else if (!d->reports_read)
        snprintf(why, cap, "no worker stats: the workers' reports on %s could not be read (%s)", topic,
                 d->reports_why[0] ? d->reports_why : "no reason given");
    else
        snprintf(why, cap, "no worker stats: none of the %zu live worker(s) in group %s published a report on %s",
                 live, d->g->worker_group, topic);
    return true;
}

/* Below the table: each worker's stalled partitions, then the lag that
 * does not move.  Names come from reports and the broker: printable ASCII
 * only. */
static void top_print_partitions(const json_t *pic)
{
    size_t i, k;
    json_t *w, *p;
    char buf[100], buf2[100];
    json_array_foreach(json_object_get(pic, "workers"), i, w)
    {
        json_t *st = json_object_get(w, "stalled");
        if (json_array_size(st) == 0)
            continue;
        const char *sid = cf_cli_json_str(w, "worker_id");
        cf_printable(sid, strlen(sid), buf, sizeof(buf));
        printf("stalled on %s:", buf);
        json_array_foreach(st, k, p)
        {
            const char *s = json_string_value(p);
            cf_printable(s ? s : "", s ? strlen(s) : 0, buf2, sizeof(buf2));
            printf(" %s", buf2);
        }
        if (json_object_get(w, "stalls"))
            printf(" (%" JSON_INTEGER_FORMAT " stall(s) since it started)",
                   json_integer_value(json_object_get(w, "stalls")));
        putchar('\n');
    }
    json_t *still = json_object_get(pic, "not_moving");
    json_array_foreach(still, i, p)
    {
        if (i == DOCTOR_STILL_SHOWN) {
            printf("lag not moving: %zu more\n", json_array_size(still) - i);
            break;
        }
        const char *sp = cf_cli_json_str(p, "partition"), *so = cf_cli_json_str(p, "owner");
        cf_printable(sp, strlen(sp), buf, sizeof(buf));
        cf_printable(so, strlen(so), buf2, sizeof(buf2));
        printf("lag not moving: %s (owner %s, for %.0f s)\n", buf, buf2,
               json_real_value(json_object_get(p, "for_s")));
    }
}

/* Each request topic's partitions by worker, marked when uneven. */
static void top_print_spread(const json_t *pic)
{
    size_t nw = (size_t)json_integer_value(json_object_get(pic, "workers_live"));
    const char *topic;
    json_t *by;
    json_object_foreach((json_t *)json_object_get(pic, "spread"), topic, by)
    {
        char buf[100];
        cf_printable(topic, strlen(topic), buf, sizeof(buf));
        json_int_t lo, hi;
        bool uneven = cf_cli_spread_uneven(by, nw, &lo, &hi);
        printf("%s %s:", uneven ? "UNEVEN" : "spread", buf);
        const char *w;
        json_t *n;
        json_object_foreach(by, w, n)
        {
            cf_printable(w, strlen(w), buf, sizeof(buf));
            printf(" %s %" JSON_INTEGER_FORMAT, buf, json_integer_value(n));
        }
        if (uneven)
            printf("  (on %zu of %zu workers)", json_object_size(by), nw);
        putchar('\n');
    }
}

static void top_print(const json_t *pic, bool clear)
{
    if (clear)
        fputs("\033[H\033[2J", stdout);
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof(when), "%H:%M:%SZ", &tm);
    json_int_t lag = json_integer_value(json_object_get(pic, "lag"));
    printf("codefleet top  %s  group %s (%s)  workers %" JSON_INTEGER_FORMAT "  slots %" JSON_INTEGER_FORMAT
           " busy %" JSON_INTEGER_FORMAT " waiting %" JSON_INTEGER_FORMAT "  %.1f answers/s\n",
           when, json_string_value(json_object_get(pic, "group")), json_string_value(json_object_get(pic, "state")),
           json_integer_value(json_object_get(pic, "workers_live")), json_integer_value(json_object_get(pic, "slots")),
           json_integer_value(json_object_get(pic, "busy")), json_integer_value(json_object_get(pic, "held")),
           json_real_value(json_object_get(pic, "answers_per_s")));
    if (lag >= 0) {
        printf("lag %" JSON_INTEGER_FORMAT " request(s):", lag);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)json_object_get(pic, "lag_by_partition"), k, v)
            printf(" %s=%" JSON_INTEGER_FORMAT, k, json_integer_value(v));
        putchar('\n');
    } else {
        printf("lag unknown\n");
    }
    const char *why = json_string_value(json_object_get(pic, "why"));
    if (why)
        printf("group not described: %s\n", why);
    why = json_string_value(json_object_get(pic, "reports_why"));
    if (why)
        printf("reports not read: %s\n", why);
    printf("\n%-28s %-16s %5s %5s %7s %-9s %7s %9s %9s %6s\n", "WORKER", "HOST", "SLOTS", "BUSY", "WAITING", "STATE",
           "STALLED", "ANSWERED", "ANSWERS/S", "AGE");
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(pic, "workers"), i, w)
    {
        /* Names come from reports: only printable ASCII reaches the
         * terminal. */
        char id[100], host[100];
        const char *sid = json_string_value(json_object_get(w, "worker_id"));
        const char *shost = json_string_value(json_object_get(w, "host"));
        /* The broker gives a member's host as Java prints an address,
         * "/127.0.0.1" (a name, when it has one, before the slash): the
         * address alone for people, the broker's text in --json. */
        if (shost && shost[0] == '/' && shost[1])
            shost++;
        cf_printable(sid ? sid : "", sid ? strlen(sid) : 0, id, sizeof(id));
        cf_printable(shost ? shost : "", shost ? strlen(shost) : 0, host, sizeof(host));
        char rate[32] = "-", age[32] = "-", slots[16] = "-", busy[16] = "-", held[16] = "-", ans[32] = "-";
        if (json_object_get(w, "answers_per_s"))
            snprintf(rate, sizeof(rate), "%.1f", json_real_value(json_object_get(w, "answers_per_s")));
        if (json_object_get(w, "report_age_s"))
            snprintf(age, sizeof(age), "%.0fs", json_real_value(json_object_get(w, "report_age_s")));
        if (json_object_get(w, "slots"))
            snprintf(slots, sizeof(slots), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(w, "slots")));
        if (json_object_get(w, "busy"))
            snprintf(busy, sizeof(busy), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(w, "busy")));
        if (json_object_get(w, "held"))
            snprintf(held, sizeof(held), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(w, "held")));
        if (json_object_get(w, "answered"))
            snprintf(ans, sizeof(ans), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(w, "answered")));
        char stalled[16] = "-";
        if (json_object_get(w, "stalled"))
            snprintf(stalled, sizeof(stalled), "%zu", json_array_size(json_object_get(w, "stalled")));
        const char *state = json_string_value(json_object_get(w, "state"));
        printf("%-28.28s %-16.16s %5s %5s %7s %-9s %7s %9s %9s %6s\n", id, host, slots, busy, held,
               state ? state : "no report", stalled, ans, rate, age);
    }
    top_print_spread(pic);
    top_print_partitions(pic);
    fflush(stdout);
}

int cf_cli_cmd_top(const cf_cli_globals *g, int argc, char **argv)
{
    bool once = false, json = g->json || json_in_args(argc, argv);
    double interval = 2;
    long count = -1;
    cf_cli_set_report_json(json);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--once") == 0) {
            once = true;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
            char *end = NULL;
            interval = strtod(argv[++i], &end);
            if (*end || !(interval >= 0.2 && interval <= 3600))
                return cf_cli_report_usage("top", "top", "--interval takes seconds, 0.2 to 3600");
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            char *end = NULL;
            count = strtol(argv[++i], &end, 10);
            if (*end || count < 1)
                return cf_cli_report_usage("top", "top", "--count takes a positive number");
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(top_help, stdout);
            return CF_EXIT_OK;
        } else {
            char msg[300];
            snprintf(msg, sizeof(msg), "unknown argument '%.200s'", argv[i]);
            return cf_cli_report_usage("top", "top", msg);
        }
    }
    if (once)
        count = 1;
    /* max(10 s, 3 intervals): a slow --interval still wants three looks. */
    int64_t three = (int64_t)(3 * interval * 1000);
    top_prev prev = {.seen = json_object(),
                     .watch = json_object(),
                     .still_min_ms = three > TOP_STILL_MIN_MS ? three : TOP_STILL_MIN_MS};
    int rc = CF_EXIT_OK;
    bool tty = isatty(STDOUT_FILENO), stats_seen = false;
    char no_stats[1400] = "";
    for (long n = 0; count < 0 || n < count; n++) {
        if (n > 0)
            usleep((useconds_t)(interval * 1e6));
        doctor d = {.g = g, .json = json, .deadline = cf_mono_us() + DOCTOR_BUDGET_US};
        d.checks = json_array();
        d.members = json_array();
        d.reports = json_object();
        d.report_groups = json_object();
        check_broker(&d);
        json_t *pic = NULL;
        if (d.broker_ok) {
            gather_group(&d);
            if (g->workers_topic && g->workers_topic[0])
                d.reports_read = read_reports(&d, d.reports_why, sizeof(d.reports_why)) == 0;
            pic = top_picture(&d, &prev);
        } else {
            json_t *c = json_array_get(d.checks, 0);
            rc = cf_cli_report("top", CF_EXIT_TRANSPORT,
                               c ? cf_cli_json_str(c, "message") : "the broker is unreachable");
        }
        if (pic && !top_no_stats(&d, pic, no_stats, sizeof(no_stats))) {
            stats_seen = true;
        } else if (pic && once) {
            /* One picture asked for, and it holds nothing of a worker:
             * the line that says why is the answer, not an empty table. */
            json_decref(pic);
            pic = NULL;
            rc = cf_cli_report("top", CF_EXIT_FAILED, no_stats);
        }
        if (pic) {
            if (json) {
                char *s = json_dumps(pic, JSON_COMPACT);
                if (s)
                    printf("%s\n", s);
                free(s);
                fflush(stdout);
            } else {
                top_print(pic, tty && !once);
            }
            rc = CF_EXIT_OK;
        }
        json_decref(pic);
        if (d.rk)
            rd_kafka_destroy(d.rk);
        json_decref(d.checks);
        json_decref(d.members);
        json_decref(d.reports);
        json_decref(d.report_groups);
        json_decref(d.lag_parts);
        json_decref(d.committed);
        if (rc != CF_EXIT_OK && once)
            break;
    }
    /* Several pictures, none with a worker's stats: said once, at the end. */
    if (!once && rc == CF_EXIT_OK && !stats_seen && no_stats[0])
        rc = cf_cli_report("top", CF_EXIT_FAILED, no_stats);
    json_decref(prev.seen);
    json_decref(prev.watch);
    return rc;
}
