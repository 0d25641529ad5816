/* cf_kafka_heal.h: gets a librdkafka client that has forgotten every broker
 * talking again.  Header-only: the worker and the dispatcher library both
 * link librdkafka, the common library does not.
 *
 * Why: librdkafka (>= 2.10) removes a broker that a metadata answer leaves
 * out, and a KRaft broker fenced for a moment (paused longer than its
 * broker.session.timeout.ms: a GC pause, a frozen VM, SIGSTOP) answers
 * metadata without itself and with every partition leaderless.  A client
 * of a one-broker cluster is then left with no broker at all; its
 * partitions wait on the internal broker for a leader it can never ask
 * for ("broker is internal: re-query"), and its re-bootstrap timer only
 * starts with a metadata request it cannot send (seen with 2.12.1 in
 * tests/integration/test_outage.c: a result consumer stalled for good; the
 * same family as confluentinc/librdkafka#5430).  Such a client knows no
 * controller either; once that has lasted CF_KAFKA_HEAL_AFTER_US, the
 * bootstrap servers are added again, which it connects to and asks.  A
 * client that simply cannot reach its broker also knows no controller:
 * for it an add changes nothing (the servers are there), hence the
 * back-off. */
#ifndef CF_KAFKA_HEAL_H
#define CF_KAFKA_HEAL_H

#include <stdbool.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "cf_log.h"

#define CF_KAFKA_HEAL_AFTER_US (3 * 1000000LL)
#define CF_KAFKA_HEAL_MAX_US (300 * 1000000LL)

/* Zeroed to start.  Each add also appends to a list librdkafka keeps for
 * the client's life, so they back off: 3 s, 6 s, 12 s ... 5 minutes
 * apart while no controller is known, and again from 3 s once one was. */
typedef struct cf_kafka_heal {
    int64_t brokerless_since_us; /* 0: a controller is known */
    int64_t wait_us;             /* how long until the next add (0: CF_KAFKA_HEAL_AFTER_US) */
    unsigned heals;              /* bootstrap servers added again */
} cf_kafka_heal;

/* Call every second or more often, from one thread per client (h is that
 * thread's); now_us is a monotonic clock.  Returns whether it added the
 * client's bootstrap.servers again. */
static inline bool cf_kafka_heal_check(rd_kafka_t *rk, cf_kafka_heal *h, int64_t now_us)
{
    if (!rk)
        return false;
    if (rd_kafka_controllerid(rk, 0) >= 0) {
        h->brokerless_since_us = 0;
        h->wait_us = 0;
        return false;
    }
    if (h->brokerless_since_us == 0) {
        h->brokerless_since_us = now_us;
        return false;
    }
    int64_t wait = h->wait_us > 0 ? h->wait_us : CF_KAFKA_HEAL_AFTER_US;
    if (now_us - h->brokerless_since_us < wait)
        return false;
    h->brokerless_since_us = now_us;
    h->wait_us = wait * 2 < CF_KAFKA_HEAL_MAX_US ? wait * 2 : CF_KAFKA_HEAL_MAX_US;
    char bootstrap[1024];
    size_t size = sizeof(bootstrap);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), "bootstrap.servers", bootstrap, &size) != RD_KAFKA_CONF_OK ||
        !bootstrap[0])
        return false;
    h->heals++;
    cf_log_warn("kafka", "%s has known no broker for %lld s (unreachable, or it answered metadata without itself): "
                "adding the bootstrap servers %s again",
                rd_kafka_name(rk), (long long)(wait / 1000000), bootstrap);
    rd_kafka_brokers_add(rk, bootstrap);
    return true;
}

#endif
