/* consumers.c: the request consumers.  One per request topic by default
 * (consumer-per-topic), all in the worker's group; or one for every topic.
 *
 * Why one per topic: the group's assignor (cooperative-sticky) balances
 * the number of partitions per member over all the topics its members
 * subscribe to, not each topic.  With two workers and three request topics
 * of six partitions, one worker could hold all six partitions of one
 * tenant's topic and the other none of them, so adding a worker did not
 * spread that tenant's work (issue 30).  A member that subscribes to one
 * topic only is balanced against the other members of that topic: each
 * topic is then spread over the live workers within one partition, by
 * Kafka's own group protocol, with nothing of ours coordinating.  The cost
 * is one librdkafka client (its threads and broker connections) per
 * request topic.
 *
 * Every consumer is created from the same configuration, shares the
 * rebalance callback (its rk says which one called) and wakes the main
 * loop through the same eventfd. */
#include "worker_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_log.h"
#include "cf_util.h"

#define LOG_SUB "worker"

int consumers_setup(cf_worker *w, cf_error *err)
{
    bool per_topic = w->cfg->consumer_per_topic && w->ntopics > 1;
    w->consumer_per_topic = per_topic;
    size_t n = per_topic ? w->ntopics : 1;
    w->consumers = calloc(n, sizeof(*w->consumers));
    if (!w->consumers)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    w->nconsumers = n;
    for (size_t t = 0; t < w->ntopics; t++)
        w->topics[t].consumer = per_topic ? t : 0;
    static const uint64_t one = 1;
    for (size_t i = 0; i < n; i++) {
        request_consumer *c = &w->consumers[i];
        char errstr[512];
        rd_kafka_conf_t *conf = kafka_conf_new(w, true, per_topic ? w->topics[i].name : NULL, err);
        if (!conf)
            return -1;
        c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
        if (!c->rk) {
            rd_kafka_conf_destroy(conf);
            return cf_error_set(err, CF_E_KAFKA, "creating consumer: %s", errstr);
        }
        rd_kafka_poll_set_consumer(c->rk);
        c->q = rd_kafka_queue_get_consumer(c->rk);
        rd_kafka_queue_io_event_enable(c->q, w->wake_fd, &one, sizeof(one));
    }
    return 0;
}

rd_kafka_t *consumers_of_topic(const cf_worker *w, size_t topic)
{
    return w->consumers[topic < w->ntopics ? w->topics[topic].consumer : 0].rk;
}

rd_kafka_t *consumers_of_topic_name(const cf_worker *w, const char *topic)
{
    long t = partitions_topic_index(w, topic);
    return consumers_of_topic(w, t < 0 ? 0 : (size_t)t);
}

/* Takes what the consumers fetched, one message of each in turn: a topic
 * with a deep backlog fetched does not go first wholesale. */
void consumers_take(cf_worker *w)
{
    bool more = true;
    while (more) {
        more = false;
        for (size_t i = 0; i < w->nconsumers; i++) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumers[i].rk, 0);
            if (!m)
                continue;
            more = true;
            /* A request, not an error event: librdkafka queues its fatal
             * error as one, which must not pass for work taken. */
            if (!m->err)
                w->consumed_any = true;
            intake_take(w, w->consumers[i].rk, m);
            rd_kafka_message_destroy(m);
        }
    }
}

int consumers_subscribe(cf_worker *w, char *names, size_t nsize)
{
    if (nsize)
        names[0] = '\0';
    for (size_t i = 0; i < w->ntopics; i++) {
        size_t n = strlen(names);
        if (n < nsize)
            snprintf(names + n, nsize - n, "%s%s", i ? "," : "", w->topics[i].name);
    }
    for (size_t c = 0; c < w->nconsumers; c++) {
        rd_kafka_resp_err_t e = consumers_subscribe_one(w, c);
        if (e)
            return (int)e;
    }
    return 0;
}

rd_kafka_resp_err_t consumers_subscribe_one(cf_worker *w, size_t c)
{
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new((int)w->ntopics);
    for (size_t t = 0; t < w->ntopics; t++)
        if (w->topics[t].consumer == c)
            rd_kafka_topic_partition_list_add(topics, w->topics[t].name, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = topics->cnt ? rd_kafka_subscribe(w->consumers[c].rk, topics) : RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_partition_list_destroy(topics);
    return e;
}

bool consumers_watch_join(cf_worker *w, int64_t now_us)
{
    if (w->group_joined || now_us < w->join_check_us)
        return false;
    /* Each check is a round trip to librdkafka's group thread: 4 a second
     * until every consumer joined, then none. */
    w->join_check_us = now_us + 250000;
    bool all = true;
    for (size_t i = 0; i < w->nconsumers; i++) {
        request_consumer *c = &w->consumers[i];
        if (c->joined)
            continue;
        /* The classic protocol calls the rebalance callback with an empty
         * assignment too: only KIP-848's silent joins are looked for. */
        if (w->group_protocol != CF_WORKER_GROUP_CONSUMER) {
            all = false;
            continue;
        }
        rd_kafka_consumer_group_metadata_t *md = rd_kafka_consumer_group_metadata(c->rk);
        int32_t epoch = md ? rd_kafka_consumer_group_metadata_generation_id(md) : -1;
        if (md)
            rd_kafka_consumer_group_metadata_destroy(md);
        if (epoch <= 0) {
            all = false;
            continue;
        }
        /* A member epoch comes before the assignment that goes with it is
         * reconciled: joined without one only after a second of none. */
        if (c->epoch_seen_us == 0)
            c->epoch_seen_us = now_us;
        if (now_us - c->epoch_seen_us < 1000000) {
            all = false;
            continue;
        }
        c->joined = true;
        atomic_store(&w->kafka_joined, true);
        cf_log_info("kafka", "assigned 0 partition(s) (%s joined the group with none, member epoch %" PRId32 ")",
                    rd_kafka_name(c->rk), epoch);
    }
    if (all) {
        w->group_joined = true;
        return false;
    }
    if (w->group_protocol != CF_WORKER_GROUP_CONSUMER || w->cfg->group_protocol != CF_WORKER_GROUP_AUTO)
        return false;
    /* Under auto, on KIP-848, not joined yet: a refusal only once the
     * broker has been answering (a broker that is away is not one without
     * KIP-848) for as long as a join takes with plenty of room. */
    if (rd_kafka_controllerid(w->producer, 0) < 0) {
        w->join_deadline_us = now_us + CONSUMERS_JOIN_WAIT_US;
        return false;
    }
    return now_us >= w->join_deadline_us;
}

void consumers_joined(cf_worker *w, rd_kafka_t *rk)
{
    for (size_t i = 0; i < w->nconsumers; i++)
        if (w->consumers[i].rk == rk)
            w->consumers[i].joined = true;
}

rd_kafka_resp_err_t consumers_fatal(cf_worker *w, char *buf, size_t size)
{
    for (size_t i = 0; i < w->nconsumers; i++) {
        rd_kafka_resp_err_t e = rd_kafka_fatal_error(w->consumers[i].rk, buf, size);
        if (e)
            return e;
    }
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

void consumers_commit(cf_worker *w, bool async)
{
    for (size_t i = 0; i < w->nconsumers; i++) {
        rd_kafka_resp_err_t e = rd_kafka_commit(w->consumers[i].rk, NULL, async ? 1 : 0);
        if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
            cf_log_warn("kafka", "final commit: %s", rd_kafka_err2str(e));
    }
}

/* Closes every consumer by `until` (monotonic us): all the closes are
 * started first, so they leave the group together and share the deadline.
 * Rebalance events of the closes get the same handling as during the run.
 * Returns whether all finished. */
bool consumers_close(cf_worker *w, int64_t until)
{
    for (size_t i = 0; i < w->nconsumers; i++) {
        request_consumer *c = &w->consumers[i];
        c->close_q = rd_kafka_queue_new(c->rk);
        rd_kafka_error_t *cerr = c->close_q ? rd_kafka_consumer_close_queue(c->rk, c->close_q) : NULL;
        if (!c->close_q || cerr) {
            cf_log_warn("kafka", "consumer close: %s", cerr ? rd_kafka_error_string(cerr) : "out of memory");
            rd_kafka_error_destroy(cerr);
            c->close_failed = true;
        }
    }
    for (;;) {
        int64_t left = until - cf_mono_us();
        bool open = false;
        for (size_t i = 0; i < w->nconsumers; i++) {
            request_consumer *c = &w->consumers[i];
            if (c->close_failed || rd_kafka_consumer_closed(c->rk))
                continue;
            /* The first open one is waited on (briefly: the others may
             * finish meanwhile), the rest only looked at. */
            int wait_ms = !open && left > 0 ? (int)(left / 1000 > 10 ? 10 : left / 1000 + 1) : 0;
            open = true;
            rd_kafka_event_t *ev;
            while ((ev = rd_kafka_queue_poll(c->close_q, wait_ms)) != NULL) {
                wait_ms = 0;
                if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE)
                    partitions_on_rebalance(c->rk, rd_kafka_event_error(ev),
                                            (rd_kafka_topic_partition_list_t *)rd_kafka_event_topic_partition_list(ev),
                                            w);
                rd_kafka_event_destroy(ev);
            }
        }
        if (!open || cf_mono_us() >= until)
            break;
    }
    bool all = true;
    for (size_t i = 0; i < w->nconsumers; i++) {
        request_consumer *c = &w->consumers[i];
        c->closed = !c->close_failed && rd_kafka_consumer_closed(c->rk);
        all = all && c->closed;
    }
    return all;
}

/* What a close that did not finish still has queued is answered without
 * the worker's waits: an (un)assign call left unmade blocks the destroy. */
static void answer_leftover_rebalances(request_consumer *c)
{
    rd_kafka_event_t *ev;
    while (c->close_q && (ev = rd_kafka_queue_poll(c->close_q, 0))) {
        if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE) {
            const rd_kafka_topic_partition_list_t *parts = rd_kafka_event_topic_partition_list(ev);
            bool coop = strcmp(rd_kafka_rebalance_protocol(c->rk), "COOPERATIVE") == 0;
            if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
                if (coop)
                    rd_kafka_error_destroy(rd_kafka_incremental_unassign(c->rk, parts));
                else
                    rd_kafka_assign(c->rk, NULL);
            } else if (coop) {
                /* An assignment now is taken and dropped at once. */
                rd_kafka_error_destroy(rd_kafka_incremental_assign(c->rk, parts));
            } else {
                rd_kafka_assign(c->rk, parts);
            }
        }
        rd_kafka_event_destroy(ev);
    }
}

void consumers_destroy(cf_worker *w)
{
    for (size_t i = 0; i < w->nconsumers; i++) {
        request_consumer *c = &w->consumers[i];
        if (c->q) {
            /* No more wake-ups into the eventfd, which closes soon. */
            rd_kafka_queue_io_event_enable(c->q, -1, NULL, 0);
            rd_kafka_queue_destroy(c->q);
        }
        if (!c->rk)
            continue;
        /* A close that did not finish (broker gone) is not tried again. */
        bool unclosed = w->ran && !c->closed;
        if (unclosed)
            answer_leftover_rebalances(c);
        if (c->close_q)
            rd_kafka_queue_destroy(c->close_q);
        /* The process ends next (cf_worker_exiting): its destroy would
         * wait for the commits it holds for an absent coordinator (45 s
         * under KIP-848); the exit ends its threads.  Only the log
         * callback runs on them, and it does not use the worker. */
        if (unclosed && w->exiting) {
            cf_log_warn("kafka", "%s: its close did not finish: left to the process's exit (what it did not "
                        "commit is read again by the partitions' next owner)",
                        rd_kafka_name(c->rk));
            continue;
        }
        /* Nor is one made for a worker that never ran (its start failed
         * after subscribing): a close would serve a rebalance into the
         * worker's half-torn-down state, and it consumed nothing. */
        if (unclosed || !w->ran)
            rd_kafka_destroy_flags(c->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        else
            rd_kafka_destroy(c->rk);
    }
    free(w->consumers);
    w->consumers = NULL;
    w->nconsumers = 0;
}
