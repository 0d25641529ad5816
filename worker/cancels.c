/* cancels.c: the cancel topics and the cancels remembered. */
#include "worker_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_util.h"
#include <sys/random.h>

#define LOG_SUB "worker"

static void cancels_refresh(cf_worker *w, bool now);

/* FNV-1a from a random per-process seed: senders choose the ids, and must
 * not be able to pile them into one bucket. */
static uint32_t memo_hash(const cf_worker *w, size_t topic, const char *id)
{
    uint64_t h = (14695981039346656037ull ^ w->memo_seed) + topic;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h ^= h >> 29;
    return (uint32_t)(h % MEMO_BUCKETS);
}

/* The bucket of (topic, id), its expired entries dropped on the way. */
static memo_entry **memo_bucket(cf_worker *w, size_t topic, const char *id)
{
    memo_entry **head = &w->memo[memo_hash(w, topic, id)];
    int64_t now = cf_mono_us();
    for (memo_entry **pp = head; *pp;) {
        if ((*pp)->expires_us <= now) {
            memo_entry *dead = *pp;
            *pp = dead->next;
            if (w->memo_per_topic && dead->topic < w->ntopics)
                w->memo_per_topic[dead->topic]--;
            free(dead);
            w->memo_n--;
        } else {
            pp = &(*pp)->next;
        }
    }
    return head;
}

const memo_entry *cancels_remembered(cf_worker *w, size_t topic, const char *id)
{
    if (!id || w->memo_n == 0)
        return NULL;
    for (memo_entry *e = *memo_bucket(w, topic, id); e; e = e->next)
        if (e->topic == topic && strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

static void memo_add(cf_worker *w, size_t topic, const char *id, const char *reason, int64_t ttl_us)
{
    if (ttl_us <= 0 || !w->memo_per_topic)
        return;
    memo_entry **head = memo_bucket(w, topic, id);
    for (memo_entry *e = *head; e; e = e->next)
        if (e->topic == topic && strcmp(e->id, id) == 0)
            return;
    if (w->memo_n >= MEMO_MAX || w->memo_per_topic[topic] >= MEMO_MAX_TOPIC) {
        int64_t now = cf_mono_us();
        if (now - w->memo_full_logged_us > 60 * 1000000LL)
            cf_log_warn(LOG_SUB, "cancels remembered: %zu in all, %zu for %s (caps %d, %d per topic): cancels for "
                        "requests not here yet are not kept for now", w->memo_n, w->memo_per_topic[topic],
                        w->topics[topic].name, MEMO_MAX, MEMO_MAX_TOPIC);
        w->memo_full_logged_us = now;
        return;
    }
    size_t il = strlen(id) + 1, rl = strlen(reason) + 1;
    memo_entry *e = calloc(1, sizeof(*e) + il + rl);
    if (!e)
        return;
    e->topic = topic;
    e->expires_us = cf_mono_us() + ttl_us;
    memcpy(e->id, id, il);
    memcpy(e->id + il, reason, rl);
    e->reason = e->id + il;
    e->next = *head;
    *head = e;
    w->memo_n++;
    w->memo_per_topic[topic]++;
}

void cancels_free(cf_worker *w)
{
    for (size_t b = 0; b < MEMO_BUCKETS; b++) {
        while (w->memo[b]) {
            memo_entry *e = w->memo[b];
            w->memo[b] = e->next;
            free(e);
        }
    }
    w->memo_n = 0;
    free(w->memo_per_topic);
    w->memo_per_topic = NULL;
}

typedef struct cancel_match {
    size_t topic;
    const char *id;
} cancel_match;

static bool queued_is(const cf_pool_job *pj, void *arg)
{
    const cancel_match *cm = arg;
    const job *j = (const job *)pj;
    return j->topic == cm->topic && j->req.id && strcmp(j->req.id, cm->id) == 0;
}

/* A cancel of request id on request topic ti: stop it if it runs here,
 * answer it if it waits here, remember it either way (a redelivery, or
 * the request itself still to come). */
static void apply_cancel(cf_worker *w, size_t ti, const char *id, const char *reason, int64_t remember_us)
{
    memo_add(w, ti, id, reason, remember_us);
    size_t running = 0, queued = 0;
    pthread_mutex_lock(&w->lock);
    if (w->recent) {
        recent_cancel *rc = &w->recent[w->recent_next++ % RECENT_CANCELS];
        rc->at_us = cf_mono_us();
        rc->topic = ti;
        cf_strlcpy(rc->id, id, sizeof(rc->id));
        cf_strlcpy(rc->reason, reason, sizeof(rc->reason));
    }
    for (int64_t s = 0; s < w->nslots; s++) {
        job *j = w->running[s];
        if (j && j->topic == ti && j->req.id && strcmp(j->req.id, id) == 0 && job_stop_of(j) != JOB_STOP_SENDER) {
            job_request_stop(j, JOB_STOP_SENDER, reason);
            running++;
        }
    }
    pthread_mutex_unlock(&w->lock);
    cancel_match cm = {ti, id};
    cf_pool_job *list = cf_exec_pool_drop_queued_if(w->pool, queued_is, &cm);
    while (list) {
        job *j = (job *)list;
        list = list->next;
        delivery_answer_cancelled(w, j, reason);
        queued++;
    }
    cf_log_debug(LOG_SUB, "cancel of %s on %s: %zu running, %zu queued here", id, w->topics[ti].name, running, queued);
}

/* The request topic whose cancel topic is name, or -1. */
static long cancel_topic_index(const cf_worker *w, const char *name)
{
    const char *suffix = w->cfg->cancel_topic_suffix;
    size_t n = strlen(name), sl = strlen(suffix);
    if (n <= sl || strcmp(name + n - sl, suffix) != 0)
        return -1;
    for (size_t i = 0; i < w->ntopics; i++)
        if (strlen(w->topics[i].name) == n - sl && strncmp(w->topics[i].name, name, n - sl) == 0)
            return (long)i;
    return -1;
}

static void on_cancel_message(cf_worker *w, const rd_kafka_message_t *m)
{
    if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            kafka_on_error(w->control, m->err, rd_kafka_message_errstr(m), w);
        return;
    }
    const char *tname = rd_kafka_topic_name(m->rkt);
    long ti = cancel_topic_index(w, tname);
    if (ti < 0)
        return;
    cf_decode_limits lim = cf_decode_limits_default;
    lim.max_total_bytes = 4096; /* a cancel is a few hundred bytes */
    cf_cancel c;
    cf_error err;
    cf_error_clear(&err);
    if (cf_cancel_decode(m->payload, m->len, &lim, &c, &err) < 0) {
        /* Every worker reads every cancel: one line per 10 s, not one per
         * message, whatever a writer floods the topic with. */
        w->cancels_skipped++;
        int64_t now = cf_mono_us();
        if (now - w->cancel_skip_logged_us >= 10 * 1000000LL) {
            cf_log_warn(LOG_SUB, "cancel at %s[%" PRId32 "]@%" PRId64 " skipped: %s (%" PRIu64 " skipped so far)",
                        tname, m->partition, m->offset, err.msg, w->cancels_skipped);
            w->cancel_skip_logged_us = now;
        }
        return;
    }
    /* Remembered cancel-memory from when it was written (the broker's or
     * producer's timestamp): one read again at a restart is not kept
     * longer, and one older than that is stale. */
    int64_t remember_us = w->cfg->cancel_memory_us;
    int64_t ts_ms = rd_kafka_message_timestamp(m, NULL);
    if (ts_ms > 0) {
        int64_t age_us = cf_now_us() - ts_ms * 1000;
        if (age_us > 0)
            remember_us -= age_us;
    }
    if (remember_us > 0) {
        char reason[CF_CANCEL_REASON_MAX + 64];
        if (c.reason && c.reason[0])
            snprintf(reason, sizeof(reason), "cancelled by its sender: %s", c.reason);
        else
            snprintf(reason, sizeof(reason), "cancelled by its sender");
        apply_cancel(w, (size_t)ti, c.id, reason, remember_us);
    }
    cf_cancel_clear(&c);
}

void cancels_serve(cf_worker *w)
{
    if (!w->control)
        return;
    rd_kafka_message_t *m;
    int n = 0;
    for (; n < 1000 && (m = rd_kafka_consumer_poll(w->control, 0)) != NULL; n++) {
        on_cancel_message(w, m);
        rd_kafka_message_destroy(m);
    }
    if (n == 1000)
        worker_wake(w); /* librdkafka signals the queue only when it was empty */
    cancels_refresh(w, false);
}

void cancels_stop(cf_worker *w)
{
    free(w->control_parts);
    w->control_parts = NULL;
    if (w->control_q)
        rd_kafka_queue_destroy(w->control_q);
    w->control_q = NULL;
    if (w->control) {
        rd_kafka_destroy_flags(w->control, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        w->control = NULL;
    }
}

/* (Re)assigns every partition of every cancel topic.  A cancel topic that
 * is missing (created after the worker started, a broker not up yet) or
 * that gained partitions is picked up here: every 30 s while one is
 * missing, every 5 min otherwise.  Partitions already read keep their
 * position; new ones start cancel-memory back. */
static void cancels_refresh(cf_worker *w, bool now)
{
    if (!w->control || !w->control_parts)
        return;
    int64_t t = cf_mono_us();
    if (!now && t < w->control_next_refresh_us)
        return;
    const cf_worker_config *c = w->cfg;
    bool changed = false, missing = false, unreachable = false;
    rd_kafka_topic_partition_list_t *want = rd_kafka_topic_partition_list_new(16);
    int *counts = calloc(w->ntopics ? w->ntopics : 1, sizeof(*counts));
    for (size_t i = 0; counts && i < w->ntopics; i++) {
        char name[512];
        snprintf(name, sizeof(name), "%s%s", w->topics[i].name, c->cancel_topic_suffix);
        int cnt = 0;
        if (!unreachable) {
            rd_kafka_topic_t *rkt = rd_kafka_topic_new(w->control, name, NULL);
            const struct rd_kafka_metadata *md = NULL;
            rd_kafka_resp_err_t e = rkt ? rd_kafka_metadata(w->control, 0, rkt, &md, 2000) : RD_KAFKA_RESP_ERR__FAIL;
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 && md->topics[0].err == 0) {
                cnt = md->topics[0].partition_cnt;
                for (int p = 0; p < cnt; p++)
                    rd_kafka_topic_partition_list_add(want, name, md->topics[0].partitions[p].id);
            }
            unreachable = e == RD_KAFKA_RESP_ERR__TRANSPORT || e == RD_KAFKA_RESP_ERR__TIMED_OUT;
            if (cnt == 0 && !w->control_missing_logged)
                cf_log_warn(LOG_SUB, "cancel topic %s unavailable (%s): cancels of %s's requests are not read until "
                            "it exists (codefleet topics create makes it; checked again every 30 s)", name,
                            rd_kafka_err2str(e ? e : md && md->topic_cnt == 1 ? md->topics[0].err
                                                                              : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC),
                            w->topics[i].name);
            if (md)
                rd_kafka_metadata_destroy(md);
            if (rkt)
                rd_kafka_topic_destroy(rkt);
        }
        if (unreachable && cnt == 0)
            cnt = w->control_parts[i]; /* unknown: keep what is assigned */
        counts[i] = cnt;
        missing = missing || cnt == 0;
        changed = changed || cnt != w->control_parts[i];
    }
    if (missing)
        w->control_missing_logged = true;
    w->control_next_refresh_us = t + (missing || unreachable ? 30 : 300) * 1000000LL;
    if (!counts || !changed || unreachable) {
        free(counts);
        rd_kafka_topic_partition_list_destroy(want);
        return;
    }
    /* Positions of what is read already; the rest from cancel-memory back. */
    rd_kafka_topic_partition_list_t *cur = NULL;
    if (rd_kafka_assignment(w->control, &cur) == RD_KAFKA_RESP_ERR_NO_ERROR && cur)
        (void)rd_kafka_position(w->control, cur);
    rd_kafka_topic_partition_list_t *fresh = rd_kafka_topic_partition_list_new(16);
    int64_t since_ms = (cf_now_us() - c->cancel_memory_us) / 1000;
    for (int i = 0; i < want->cnt; i++) {
        rd_kafka_topic_partition_t *p = &want->elems[i];
        rd_kafka_topic_partition_t *had = cur ? rd_kafka_topic_partition_list_find(cur, p->topic, p->partition) : NULL;
        if (had && had->offset >= 0)
            p->offset = had->offset;
        else
            rd_kafka_topic_partition_list_add(fresh, p->topic, p->partition)->offset = since_ms;
    }
    if (fresh->cnt > 0 && rd_kafka_offsets_for_times(w->control, fresh, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        cf_log_warn(LOG_SUB, "cancel topics: no offsets for the last %" PRId64 " s: reading new cancels only",
                    c->cancel_memory_us / 1000000);
        for (int i = 0; i < fresh->cnt; i++)
            fresh->elems[i].offset = RD_KAFKA_OFFSET_END;
    }
    for (int i = 0; i < fresh->cnt; i++) {
        rd_kafka_topic_partition_t *f = &fresh->elems[i];
        int64_t off = f->offset;
        if (f->err || off < 0) {
            /* Nothing that recent: from the end as it is now, as a number.
             * (OFFSET_END would be resolved later, when the fetch starts,
             * and skip a cancel written in between.) */
            int64_t lo = 0, hi = -1;
            if (rd_kafka_query_watermark_offsets(w->control, f->topic, f->partition, &lo, &hi, 5000) !=
                    RD_KAFKA_RESP_ERR_NO_ERROR ||
                hi < 0)
                hi = RD_KAFKA_OFFSET_END;
            off = hi;
        }
        rd_kafka_topic_partition_list_find(want, f->topic, f->partition)->offset = off;
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(w->control, want);
    if (e) {
        cf_log_warn(LOG_SUB, "cancel topics: assign failed: %s", rd_kafka_err2str(e));
    } else {
        memcpy(w->control_parts, counts, w->ntopics * sizeof(*counts));
        cf_log_info(LOG_SUB, "reading cancels from %d partition(s)", want->cnt);
    }
    free(counts);
    if (cur)
        rd_kafka_topic_partition_list_destroy(cur);
    rd_kafka_topic_partition_list_destroy(fresh);
    rd_kafka_topic_partition_list_destroy(want);
}

/* Cancels are read by every worker from every partition of each request
 * topic's cancel topic: an assign-only consumer (it never joins the group,
 * commits nothing), starting cancel-memory back so a cancel sent just before
 * this worker started still finds its request. */
int cancels_start(cf_worker *w, cf_error *err)
{
    const cf_worker_config *c = w->cfg;
    if (!c->cancel_topic_suffix || !c->cancel_topic_suffix[0])
        return 0;
    /* A request topic that is another's cancel topic would take cancels
     * for requests (and the reverse): refused. */
    size_t sl = strlen(c->cancel_topic_suffix);
    for (size_t i = 0; i < w->ntopics; i++)
        for (size_t k = 0; k < w->ntopics; k++) {
            const char *a = w->topics[i].name, *b = w->topics[k].name;
            size_t al = strlen(a), bl = strlen(b);
            if (al == bl + sl && strncmp(a, b, bl) == 0 && strcmp(a + bl, c->cancel_topic_suffix) == 0)
                return cf_error_set(err, CF_E_INVALID,
                                    "request topic %s is the cancel topic of request topic %s (cancel-topic-suffix "
                                    "%s): rename one or change the suffix", a, b, c->cancel_topic_suffix);
        }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char cid[260];
    kafka_client_id(w, true, cid, sizeof(cid));
    strncat(cid, "-cancels", sizeof(cid) - strlen(cid) - 1);
    /* Cancels are tiny (the decoder refuses more than 4 KiB): librdkafka's
     * prefetch is bounded far below its defaults (64 MiB per partition),
     * so a flood of them costs the worker little memory. */
    static const char *const kv[][2] = {
        {"enable.auto.commit", "false"},        {"enable.auto.offset.store", "false"},
        {"fetch.wait.max.ms", "10"},            {"socket.nagle.disable", "true"},
        {"queued.max.messages.kbytes", "2048"}, {"queued.min.messages", "1000"},
        {"fetch.max.bytes", "1048576"},         {"max.partition.fetch.bytes", "262144"},
        {"metadata.recovery.rebootstrap.trigger.ms", KAFKA_REBOOTSTRAP_MS},
    };
    if (kafka_conf_set(conf, "bootstrap.servers", c->brokers, err) < 0 || kafka_conf_set(conf, "client.id", cid, err) < 0 ||
        kafka_conf_set(conf, "group.id", c->group, err) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
        if (kafka_conf_set(conf, kv[i][0], kv[i][1], err) < 0)
            goto fail;
    for (size_t i = 0; i < c->kafka.count; i++) {
        const char *k = c->kafka.items[i].key;
        if (kafka_key_producer_only(k) || kafka_key_consumer_only(k) || strcmp(k, "client.id") == 0)
            continue;
        if (kafka_conf_set(conf, k, c->kafka.items[i].value, err) < 0)
            goto fail;
    }
    rd_kafka_conf_set_error_cb(conf, kafka_on_error);
    rd_kafka_conf_set_log_cb(conf, kafka_on_log);
    rd_kafka_conf_set_opaque(conf, w);
    char errstr[512];
    w->control = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!w->control) {
        rd_kafka_conf_destroy(conf);
        return cf_error_set(err, CF_E_KAFKA, "creating the cancel consumer: %s", errstr);
    }
    rd_kafka_poll_set_consumer(w->control);
    w->control_q = rd_kafka_queue_get_consumer(w->control);
    static const uint64_t one = 1;
    rd_kafka_queue_io_event_enable(w->control_q, w->wake_fd, &one, sizeof(one));

    w->control_parts = calloc(w->ntopics ? w->ntopics : 1, sizeof(*w->control_parts));
    w->memo_per_topic = calloc(w->ntopics ? w->ntopics : 1, sizeof(*w->memo_per_topic));
    if (!w->control_parts || !w->memo_per_topic)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    if (getrandom(&w->memo_seed, sizeof(w->memo_seed), 0) != (ssize_t)sizeof(w->memo_seed))
        w->memo_seed = (uint64_t)cf_mono_us() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    cancels_refresh(w, true);
    /* Catch up before taking requests: cancels sent in the last
     * cancel-memory must be remembered before their requests come. */
    int64_t until = cf_mono_us() + 2000000;
    rd_kafka_message_t *m;
    while (cf_mono_us() < until && (m = rd_kafka_consumer_poll(w->control, 100)) != NULL) {
        on_cancel_message(w, m);
        rd_kafka_message_destroy(m);
    }
    return 0;
fail:
    rd_kafka_conf_destroy(conf);
    return -1;
}

