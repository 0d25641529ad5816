/* Every request topic spread over the live workers (issue 30 part 1), on
 * the real broker: three request topics of six partitions (the default
 * profile's and two tenants'), served by 2 workers, then 3 (scale-out),
 * then 2 again (one SIGKILLed).  After each change the group settles and
 * every topic must sit on every worker, each holding its even share within
 * one partition.  With one consumer for all topics (consumer-per-topic
 * off) the group balances the total only, and one worker could hold all
 * of a topic's partitions: the case this exists for.  The workers run the
 * default group protocol (KIP-848: the broker's uniform assignor); before
 * librdkafka 2.6.1 the classic cooperative-sticky assignor hung with
 * members of different topics (#4783) and the worker fell back to one
 * consumer; the build now requires 2.12, and this test no longer skips.
 *
 * The group's assignment is read as an operator reads it: the broker's
 * description of the group, members folded by client id (a worker's
 * consumers share its client id). */
#include "it_support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cf_kafka.h"
#include "cf_util.h"

#define SEC 1000000LL
#define NTOPICS 3
#define NPARTS 6
#define MAXW 4

typedef struct spread {
    int held[NTOPICS][MAXW]; /* partitions of topic t held by worker w */
    int assigned;            /* partitions assigned in all */
    char why[256];           /* when the group could not be read */
} spread;

static const char *topic_names[NTOPICS];
static rd_kafka_t *admin; /* one client for every description */

/* The group's assignment now, by worker (client id codefleet-worker-<id>). */
static void describe(const char *group, it_worker *const *ws, int nw, spread *out)
{
    memset(out, 0, sizeof(*out));
    cf_error err;
    if (!admin)
        admin = cf_kafka_consumer_new(it_brokers(), "spread-describe", it_kafka(), "codefleet-spread", "admin", &err);
    if (!admin) {
        snprintf(out->why, sizeof(out->why), "%.200s", err.msg);
        return;
    }
    rd_kafka_t *rk = admin;
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS);
    rd_kafka_AdminOptions_set_request_timeout(o, 10000, NULL, 0);
    const char *groups[] = {group};
    rd_kafka_DescribeConsumerGroups(rk, groups, 1, o, q);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 15000);
    size_t n = 0;
    const rd_kafka_ConsumerGroupDescription_t **ds =
        ev && !rd_kafka_event_error(ev)
            ? rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(ev), &n)
            : NULL;
    if (!ev || rd_kafka_event_error(ev) || n != 1)
        snprintf(out->why, sizeof(out->why), "%s", ev ? rd_kafka_event_error_string(ev) : "no answer");
    for (size_t m = 0; n == 1 && m < rd_kafka_ConsumerGroupDescription_member_count(ds[0]); m++) {
        const rd_kafka_MemberDescription_t *md = rd_kafka_ConsumerGroupDescription_member(ds[0], m);
        const char *cid = rd_kafka_MemberDescription_client_id(md);
        int wi = -1;
        for (int i = 0; i < nw; i++) {
            char want[128];
            snprintf(want, sizeof(want), "codefleet-worker-%s", ws[i]->id);
            if (ws[i]->pid > 0 && strcmp(cid, want) == 0)
                wi = i;
        }
        const rd_kafka_topic_partition_list_t *l =
            rd_kafka_MemberAssignment_partitions(rd_kafka_MemberDescription_assignment(md));
        for (int i = 0; l && i < l->cnt; i++)
            for (int t = 0; t < NTOPICS; t++)
                if (strcmp(l->elems[i].topic, topic_names[t]) == 0) {
                    out->assigned++;
                    if (wi >= 0)
                        out->held[t][wi]++;
                }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
}

/* Whether every partition is assigned to a live worker and each topic is
 * on every live worker with its even share within one. */
static bool even(const spread *s, it_worker *const *ws, int nw)
{
    int live = 0;
    for (int i = 0; i < nw; i++)
        live += ws[i]->pid > 0;
    if (s->assigned != NTOPICS * NPARTS || live == 0)
        return false;
    for (int t = 0; t < NTOPICS; t++) {
        int sum = 0;
        for (int i = 0; i < nw; i++) {
            if (ws[i]->pid <= 0)
                continue;
            int h = s->held[t][i];
            sum += h;
            if (h < NPARTS / live || h > (NPARTS + live - 1) / live)
                return false;
        }
        if (sum != NPARTS)
            return false;
    }
    return true;
}

static void print_spread(const char *when, const spread *s, it_worker *const *ws, int nw)
{
    print_message("%s: %d partition(s) assigned%s%s\n", when, s->assigned, s->why[0] ? ", " : "", s->why);
    for (int t = 0; t < NTOPICS; t++) {
        print_message("  %-40s", topic_names[t]);
        for (int i = 0; i < nw; i++)
            if (ws[i]->pid > 0)
                print_message(" %s:%d", ws[i]->id, s->held[t][i]);
        print_message("\n");
    }
}

/* Waits (on the group's state, polled) until the spread is even. */
static void wait_even(const char *when, const char *group, it_worker *const *ws, int nw)
{
    spread s;
    int64_t until = cf_mono_us() + 120 * SEC;
    do {
        describe(group, ws, nw, &s);
        if (even(&s, ws, nw)) {
            print_spread(when, &s, ws, nw);
            return;
        }
        usleep(250 * 1000);
    } while (cf_mono_us() < until);
    print_spread(when, &s, ws, nw);
    for (int i = 0; i < nw; i++)
        if (ws[i]->pid > 0)
            it_worker_dump_log(ws[i]);
    fail_msg("%s: the topics were not spread evenly within 120 s", when);
}

/* codefleet doctor's "spread" check for the group: its status, and its
 * message into msg. */
static const char *doctor_spread(const it_topics *t, char *msg, size_t cap)
{
    char a_group[140], a_req[140], dir[] = "/tmp/cf-spread-XXXXXX";
    snprintf(a_group, sizeof(a_group), "--worker-group=%s", t->group);
    snprintf(a_req, sizeof(a_req), "--request-topic=%s", t->requests);
    assert_non_null(mkdtemp(dir));
    const char *args[] = {"--json", a_group, a_req, "--workers-topic=", "--events-topic=", "doctor",
                          "--no-roundtrip", NULL};
    static char out[65536], err[8192];
    it_cli_run(args, dir, out, sizeof(out), err, sizeof(err));
    rmdir(dir);
    json_t *j = json_loads(out, 0, NULL);
    if (!j)
        fail_msg("doctor --json printed no JSON: %s\n%s", out, err);
    static char status[16];
    status[0] = '\0';
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(j, "checks"), i, c)
        if (strcmp(json_string_value(json_object_get(c, "check")), "spread") == 0) {
            snprintf(status, sizeof(status), "%s", json_string_value(json_object_get(c, "status")));
            snprintf(msg, cap, "%s", json_string_value(json_object_get(c, "message")));
        }
    json_decref(j);
    if (!status[0])
        fail_msg("doctor has no spread check: %s", out);
    return status;
}

static void test_every_topic_on_every_worker(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "spread", NPARTS);
    char base[64], ta[96], tb[96];
    it_unique_name("spread-tenant", base, sizeof(base));
    snprintf(ta, sizeof(ta), "%s-a.req", base);
    snprintf(tb, sizeof(tb), "%s-b.req", base);
    const char *more[] = {ta, tb};
    cf_error err;
    cf_error_clear(&err);
    if (cf_kafka_create_topics_ex(it_brokers(), it_kafka(), more, 2, NPARTS, -1, 30 * SEC, &err) < 0)
        fail_msg("creating topics: %s", err.msg);
    topic_names[0] = t.requests;
    topic_names[1] = ta;
    topic_names[2] = tb;
    char a_topic[140], b_topic[140];
    snprintf(a_topic, sizeof(a_topic), "--profile.tenant-a.topic=%s", ta);
    snprintf(b_topic, sizeof(b_topic), "--profile.tenant-b.topic=%s", tb);
    /* process: the test is about the group, not isolation (network must
     * be allowed where the backend cannot take it away). */
    const char *extra[] = {a_topic, "--profile.tenant-a.backends=process", "--profile.tenant-a.network=enabled",
                           b_topic, "--profile.tenant-b.backends=process", "--profile.tenant-b.network=enabled",
                           "--slots=2", NULL};

    it_worker w1, w2, w3;
    memset(&w3, 0, sizeof(w3));
    it_worker *ws[3] = {&w1, &w2, &w3};
    it_worker_start(&w1, &t, "spread-w1", extra);
    it_worker_start(&w2, &t, "spread-w2", extra);
    wait_even("two workers", t.group, ws, 2);

    /* Scale-out: the new worker takes its share of every topic. */
    it_worker_start(&w3, &t, "spread-w3", extra);
    wait_even("a third worker added", t.group, ws, 3);

    /* A worker killed: the two left share every topic again (after the
     * group's session timeout: the broker's, under KIP-848). */
    it_worker_stop(&w2, SIGKILL, 10000);
    wait_even("one of three killed", t.group, ws, 3);
    char msg[1024] = "";
    const char *st = doctor_spread(&t, msg, sizeof(msg));
    print_message("doctor: %s %s\n", st, msg);
    assert_string_equal(st, "ok");

    /* A worker that serves the default topic only (its tenant profiles
     * forgotten): the tenants' topics now sit on 2 of 3 workers, which
     * doctor says. */
    it_worker w4;
    const char *plain[] = {"--slots=2", NULL};
    it_worker_start(&w4, &t, "spread-w4", plain);
    it_worker *ws4[MAXW] = {&w1, &w2, &w3, &w4};
    spread s;
    int64_t until = cf_mono_us() + 120 * SEC;
    do {
        describe(t.group, ws4, 4, &s);
        if (s.assigned == NTOPICS * NPARTS && s.held[0][3] == 2)
            break;
        usleep(250 * 1000);
    } while (cf_mono_us() < until);
    print_spread("a worker without the tenant profiles", &s, ws4, 4);
    assert_int_equal(s.held[0][3], 2);
    st = doctor_spread(&t, msg, sizeof(msg));
    print_message("doctor: %s %s\n", st, msg);
    assert_string_equal(st, "warn");
    assert_non_null(strstr(msg, ta));
    assert_non_null(strstr(msg, "on 2 of 3 worker(s)"));
    assert_null(strstr(msg, t.requests));
    it_worker_stop(&w4, SIGTERM, 30000);

    /* And the fleet still answers on every topic. */
    cf_dispatcher *d = it_dispatcher_new(&t);
    for (int i = 0; i < NTOPICS; i++) {
        cf_request req;
        it_request_init(&req, CF_LANG_SHELL, "echo spread");
        cf_result res;
        memset(&res, 0, sizeof(res));
        it_topics tt = t;
        snprintf(tt.requests, sizeof(tt.requests), "%s", topic_names[i]);
        cf_dispatcher *di = i == 0 ? d : it_dispatcher_new(&tt);
        it_submit_wait(di, &req, 60 * SEC, &res);
        if (res.status != CF_STATUS_SUCCESS)
            fail_msg("%s: %s: %s", topic_names[i], cf_status_name(res.status), res.reason ? res.reason : "");
        cf_result_clear(&res);
        cf_request_clear(&req);
        if (di != d)
            cf_dispatcher_destroy(di);
    }
    cf_dispatcher_destroy(d);
    it_worker_stop(&w1, SIGTERM, 30000);
    it_worker_stop(&w3, SIGTERM, 30000);
    cf_kafka_consumer_close(admin);
    admin = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_topic_on_every_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
