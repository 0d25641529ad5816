/* partitions.c: assignment, revocation, pause and hold, offsets, the partition guard. */
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

#define LOG_SUB "worker"

/* The index of a request topic, or -1. */
long partitions_topic_index(const cf_worker *w, const char *name)
{
    for (size_t i = 0; name && i < w->ntopics; i++)
        if (strcmp(w->topics[i].name, name) == 0)
            return (long)i;
    return -1;
}

part_state *partitions_get(cf_worker *w, size_t topic, int32_t partition, bool create)
{
    if (topic >= w->ntopics || partition < 0 || partition >= MAX_PARTITIONS)
        return NULL;
    topic_state *t = &w->topics[topic];
    if ((size_t)partition >= t->nparts) {
        if (!create)
            return NULL;
        size_t n = (size_t)partition + 1;
        part_state *p = realloc(t->parts, n * sizeof(*p));
        if (!p)
            return NULL;
        memset(p + t->nparts, 0, (n - t->nparts) * sizeof(*p));
        t->parts = p;
        t->nparts = n;
    }
    return &t->parts[partition];
}

part_state *partitions_of(cf_worker *w, const char *topic, int32_t partition, bool create)
{
    long ti = partitions_topic_index(w, topic);
    return ti < 0 ? NULL : partitions_get(w, (size_t)ti, partition, create);
}

/* The pool knows a job's partition only as one number: topic and
 * partition folded together (CF_PROFILE_MAX * MAX_PARTITIONS fits). */
int32_t partitions_lane(size_t topic, int32_t partition)
{
    return (int32_t)(topic * MAX_PARTITIONS + (size_t)partition);
}

/* A partition's tracker holds every offset from its oldest unanswered one
 * on, answered or not: one long request at the head and many short ones
 * behind it fill it although few are unanswered.  At partitions_tracker_soft the
 * partition is held (paused alone) until the head moves; the hard cap only
 * guards against what is already fetched. */
size_t partitions_tracker_soft(const cf_worker *w)
{
    size_t n = (size_t)(4 * (w->cfg->slots + w->cfg->prefetch) + 64);
    return n > 10000 ? n : 10000;
}

size_t partitions_tracker_cap(const cf_worker *w)
{
    return 2 * partitions_tracker_soft(w) + 1024;
}

static void wake_fetcher(cf_worker *w, size_t t, const rd_kafka_topic_partition_list_t *resumed);

void partitions_pause_one(cf_worker *w, size_t t, int32_t p, bool pause)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->topics[t].name, p);
    rd_kafka_t *rk = consumers_of_topic(w, t);
    rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(rk, l) : rd_kafka_resume_partitions(rk, l);
    if (e)
        cf_log_warn("kafka", "%s %s[%" PRId32 "]: %s", pause ? "pausing" : "resuming", w->topics[t].name, p,
                    rd_kafka_err2str(e));
    else if (!pause)
        wake_fetcher(w, t, l);
    rd_kafka_topic_partition_list_destroy(l);
}

/* Holds a partition whose tracker reached partitions_tracker_soft; releases held ones
 * whose tracker drained to half of it. */
void partitions_hold(cf_worker *w)
{
    size_t soft = partitions_tracker_soft(w);
    for (size_t t = 0; t < w->ntopics; t++)
        for (size_t p = 0; p < w->topics[t].nparts; p++) {
            part_state *ps = &w->topics[t].parts[p];
            if (!ps->assigned || !ps->tracker)
                continue;
            size_t pending = cf_offset_tracker_pending(ps->tracker);
            if (!ps->held && pending >= soft) {
                cf_log_warn(LOG_SUB, "%s[%zu]: %zu offsets behind its oldest unanswered request: holding the "
                            "partition until it is answered", w->topics[t].name, p, pending);
                ps->held = true;
                if (!ps->paused) {
                    partitions_pause_one(w, t, (int32_t)p, true);
                    ps->paused = true;
                }
            } else if (ps->held && pending <= soft / 2) {
                ps->held = false;
                if (ps->paused && !w->topics[t].paused && !w->stopping) {
                    partitions_pause_one(w, t, (int32_t)p, false);
                    ps->paused = false;
                }
            }
        }
}

/* Makes the consumer read a partition again from offset: a message we
 * could not take (tracker full, no memory) must not be skipped. */
void partitions_rewind(cf_worker *w, const char *topic, int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    rd_kafka_error_t *e = rd_kafka_seek_partitions(consumers_of_topic_name(w, topic), l, 0);
    if (e) {
        cf_log_error("kafka", "rewinding %s[%" PRId32 "] to %" PRId64 ": %s", topic, partition, offset,
                     rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Whether the job's partition is still ours as it was when the job was
 * taken (not revoked, not reassigned since). */
bool partitions_job_owned(cf_worker *w, const job *j)
{
    part_state *ps = partitions_get(w, j->topic, j->partition, false);
    return ps && ps->assigned && ps->gen == j->gen;
}


bool partitions_lane_matches(int32_t lane, void *arg)
{
    const lane_match *lm = arg;
    for (int i = 0; i < lm->parts->cnt; i++) {
        long ti = partitions_topic_index(lm->w, lm->parts->elems[i].topic);
        if (ti >= 0 && partitions_lane((size_t)ti, lm->parts->elems[i].partition) == lane)
            return true;
    }
    return false;
}

void jobs_drop(cf_worker *w, cf_pool_job *list)
{
    while (list) {
        cf_pool_job *next = list->next;
        job_set_state(w, (job *)list, JOB_DROPPED);
        list = next;
    }
}

/* Stores every committable position (the next auto-commit, or an explicit
 * commit, sends them), each with the consumer of its topic. */
void partitions_store_offsets(cf_worker *w)
{
    for (size_t c = 0; c < w->nconsumers; c++) {
        rd_kafka_topic_partition_list_t *l = NULL;
        for (size_t t = 0; t < w->ntopics; t++) {
            if (w->topics[t].consumer != c)
                continue;
            for (size_t p = 0; p < w->topics[t].nparts; p++) {
                part_state *ps = &w->topics[t].parts[p];
                if (!ps->assigned)
                    continue;
                int64_t pos = cf_offset_tracker_take_committable(ps->tracker);
                if (pos < 0)
                    continue;
                if (!l)
                    l = rd_kafka_topic_partition_list_new(4);
                rd_kafka_topic_partition_list_add(l, w->topics[t].name, (int32_t)p)->offset = pos;
            }
        }
        if (!l)
            continue;
        rd_kafka_resp_err_t e = rd_kafka_offsets_store(w->consumers[c].rk, l);
        if (e)
            cf_log_warn("kafka", "storing offsets: %s", rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_destroy(l);
    }
}

/* After a resume, when the topic's consumer may have had nothing else to
 * fetch.  librdkafka applies a resume on its main thread and does not wake
 * the broker thread, which, with every partition it fetches paused, sleeps
 * up to a second (rd_kafka_max_block_ms): with one consumer per topic, each
 * pause of a tenant's backlog then cost up to a second of idle slots
 * (fetch debug: 851 ms from resume to the next fetch decision; fair
 * throughput 0.59x of one consumer's, BENCHMARKS.md; confluent-kafka-go
 * #630 shows the same).  A change of fetch state does wake it: a seek of
 * each resumed partition to the offset after the last request this worker
 * took from it.  That is where the fetch resumes anyway (a pause dropped
 * what librdkafka had prefetched, and an intake that could not take a
 * request rewinds to that same offset), so nothing is skipped or read
 * twice; without a leader epoch librdkafka skips validation and goes back
 * to fetching.  Partitions this worker took nothing from yet are left
 * alone: librdkafka's resume starts those itself.  The seek clears
 * librdkafka's own position until the next message, which the partition
 * guard then does without (it has the same offset of its own). */
static void wake_fetcher(cf_worker *w, size_t t, const rd_kafka_topic_partition_list_t *resumed)
{
    if (!w->consumer_per_topic)
        return; /* one consumer: the other topics' partitions keep it fetching */
    rd_kafka_topic_partition_list_t *seek = rd_kafka_topic_partition_list_new(resumed->cnt);
    for (int i = 0; i < resumed->cnt; i++) {
        part_state *ps = partitions_of(w, resumed->elems[i].topic, resumed->elems[i].partition, false);
        if (ps && ps->assigned && ps->guard.next_offset >= 0)
            rd_kafka_topic_partition_list_add(seek, resumed->elems[i].topic, resumed->elems[i].partition)->offset =
                ps->guard.next_offset;
    }
    if (seek->cnt) {
        rd_kafka_error_t *e = rd_kafka_seek_partitions(consumers_of_topic(w, t), seek, 0);
        if (e) {
            cf_log_debug("kafka", "waking the fetcher of %s: %s", w->topics[t].name, rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    }
    rd_kafka_topic_partition_list_destroy(seek);
}

/* Pauses or resumes one topic's intake: its partitions not held for
 * their tracker (those stay paused until it drains). */
void partitions_set_topic_paused(cf_worker *w, size_t t, bool pause)
{
    topic_state *ts = &w->topics[t];
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    for (size_t p = 0; p < ts->nparts; p++) {
        part_state *ps = &ts->parts[p];
        if (ps->assigned && ps->paused != pause && !(ps->held && !pause)) {
            rd_kafka_topic_partition_list_add(l, ts->name, (int32_t)p);
            ps->paused = pause;
        }
    }
    if (l->cnt) {
        rd_kafka_t *rk = consumers_of_topic(w, t);
        rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(rk, l) : rd_kafka_resume_partitions(rk, l);
        if (e)
            cf_log_warn("kafka", "%s %s: %s", pause ? "pausing" : "resuming", ts->name, rd_kafka_err2str(e));
        else
            cf_log_debug("kafka", "%s %d partition(s) of %s", pause ? "paused" : "resumed", l->cnt, ts->name);
        if (!e && !pause)
            wake_fetcher(w, t, l);
    }
    rd_kafka_topic_partition_list_destroy(l);
    ts->paused = pause;
    bool all = w->ntopics > 0;
    for (size_t i = 0; i < w->ntopics; i++)
        all = all && w->topics[i].paused;
    w->paused_all = all;
}

void partitions_set_paused(cf_worker *w, bool pause)
{
    for (size_t t = 0; t < w->ntopics; t++)
        partitions_set_topic_paused(w, t, pause);
}

/* The guard's last step: leave the group and join again.  Every partition
 * is revoked (its running executions get rebalance-wait, as in any
 * rebalance) and the group assigns afresh: a consumer-side state that
 * neither resume nor seek cleared does not survive it. */
static void rejoin_group(cf_worker *w, size_t topic)
{
    size_t c = w->topics[topic].consumer;
    rd_kafka_resp_err_t e = rd_kafka_unsubscribe(w->consumers[c].rk);
    if (e)
        cf_log_error("kafka", "partition guard: leaving the group: %s", rd_kafka_err2str(e));
    e = consumers_subscribe_one(w, c);
    if (e)
        cf_log_error("kafka", "partition guard: subscribing again: %s", rd_kafka_err2str(e));
}

static void guard_step(cf_worker *w, size_t t, int32_t p, part_state *ps, int step, int64_t position)
{
    const char *topic = w->topics[t].name;
    int64_t stalled_s = (cf_mono_us() - ps->guard.stalled_us) / 1000000;
    cf_log_warn(LOG_SUB,
                "partition guard: %s[%" PRId32 "] has %" PRId64 " request(s) waiting after offset %" PRId64
                " and nothing was taken from it for %" PRId64 " s while this worker had room (stalled %" PRId64
                " s): %s",
                topic, p, ps->guard.waiting, position, w->cfg->partition_stall_us / 1000000 + stalled_s, stalled_s,
                step == CF_PGUARD_RESUME ? "resuming it"
                : step == CF_PGUARD_SEEK ? "seeking it to its position"
                                         : "leaving the group and joining again");
    switch (step) {
    case CF_PGUARD_RESUME:
        partitions_pause_one(w, t, p, false);
        break;
    case CF_PGUARD_SEEK:
        partitions_rewind(w, topic, p, position);
        break;
    default:
        rejoin_group(w, t);
        break;
    }
    if (w->obs)
        cf_observe_partition_stall(w->obs, cf_pguard_step_name((cf_pguard_step)step));
    w->report_next_us = 0; /* operators see it now, not a report-interval later */
}

/* The consumer's position of a partition (-1 when unknown). */
static int64_t fetch_position(cf_worker *w, size_t t, int32_t partition)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->topics[t].name, partition);
    int64_t pos = -1;
    if (rd_kafka_position(consumers_of_topic(w, t), l) == RD_KAFKA_RESP_ERR_NO_ERROR && !l->elems[0].err)
        pos = l->elems[0].offset >= 0 ? l->elems[0].offset : -1;
    rd_kafka_topic_partition_list_destroy(l);
    return pos;
}

/* Whether the worker would take a request of topic t now. */
bool partitions_topic_has_room(const cf_worker *w, size_t t)
{
    const topic_state *ts = &w->topics[t];
    return !ts->paused && !w->stopping && w->intake_blocked == 0 &&
           ts->inflight < (size_t)(ts->slot_cap + w->cfg->prefetch);
}

/* Looks at every held partition twice a second: those that should move
 * and have not for partition-stall are probed (on the guard's thread);
 * answers are judged here and the step they call for is taken. */
void partitions_guard_serve(cf_worker *w)
{
    if (!w->guard)
        return;
    int64_t now = cf_mono_us();
    cf_pguard_answer a;
    while (cf_pguard_next_answer(w->guard, &a)) {
        part_state *ps = partitions_of(w, a.topic, a.partition, false);
        if (!ps || !ps->assigned || ps->gen != a.gen)
            continue; /* given up meanwhile: its record started anew */
        if (a.failed)
            cf_log_debug(LOG_SUB, "partition guard: probing %s[%" PRId32 "]: %s", a.topic, a.partition, a.why);
        /* An answer to a picture that changed: paused by us since, out of
         * room, or stopping, the partition is not expected to move (and a
         * step would undo our own pause).  Its clock starts again. */
        long ti = partitions_topic_index(w, a.topic);
        if (ps->paused || w->stopping || ti < 0 || !partitions_topic_has_room(w, (size_t)ti)) {
            ps->guard.asked_us = 0;
            cf_pguard_restart(&ps->guard, now);
            continue;
        }
        size_t t = (size_t)partitions_topic_index(w, a.topic);
        int64_t position = -1;
        int step = cf_pguard_judge(w->guard, &ps->guard, &a, now, fetch_position(w, t, a.partition), &position);
        if (step >= 0)
            guard_step(w, t, a.partition, ps, step, position);
    }
    if (now < w->guard_next_us)
        return;
    w->guard_next_us = now + 500 * 1000;
    for (size_t t = 0; t < w->ntopics; t++) {
        bool room = partitions_topic_has_room(w, t);
        for (size_t p = 0; p < w->topics[t].nparts; p++) {
            part_state *ps = &w->topics[t].parts[p];
            if (ps->assigned)
                cf_pguard_check(w->guard, &ps->guard, w->topics[t].name, (int32_t)p, ps->gen, room && !ps->paused,
                                now);
        }
    }
}

static void partitions_assigned(cf_worker *w, rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++) {
        part_state *ps = partitions_of(w, parts->elems[i].topic, parts->elems[i].partition, true);
        if (!ps)
            continue;
        cf_offset_tracker_destroy(ps->tracker);
        ps->tracker = cf_offset_tracker_new(partitions_tracker_cap(w));
        ps->assigned = ps->tracker != NULL;
        ps->paused = false;
        ps->held = false;
        ps->gen = ++w->gen_counter;
        ps->guard = (cf_pguard_part){.next_offset = -1};
        cf_pguard_restart(&ps->guard, cf_mono_us());
        if (ps->assigned)
            atomic_fetch_add(&w->n_assigned, 1);
    }
}

/* Revocation: queued jobs of the partitions are dropped (the new owner gets
 * them from the committed position); running ones get rebalance_wait to
 * finish so their offsets can be committed before we let go, and are then
 * stopped, so that no request runs here and at its new owner at once.
 * Lost partitions (the group moved on without us) are stopped at once. */
static void partitions_revoked(cf_worker *w, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts, bool lost,
                               rd_kafka_topic_partition_list_t *was_paused)
{
    lane_match lm = {w, parts};
    jobs_drop(w, cf_exec_pool_drop_queued(w->pool, partitions_lane_matches, &lm));
    int64_t until = cf_mono_us() + (lost ? 0 : w->cfg->rebalance_wait_us);
    while (cf_exec_pool_count_running(w->pool, partitions_lane_matches, &lm) > 0 && cf_mono_us() < until) {
        delivery_serve_producer(w, 20);
        delivery_take_handed_back(w);
    }
    size_t n = slots_stop_running(w, &lm);
    if (n)
        cf_log_warn(LOG_SUB, "stopping %zu execution(s) of %s partition(s): their next owner runs them", n,
                    lost ? "lost" : "revoked");
    /* A stopped execution ends within the runner's cancel poll (tens of
     * ms); Redis retries stop early too.  Bounded all the same. */
    int64_t stop_until = cf_mono_us() + 30 * 1000000LL;
    while (cf_exec_pool_count_running(w->pool, partitions_lane_matches, &lm) > 0 && cf_mono_us() < stop_until) {
        delivery_serve_producer(w, 20);
        delivery_take_handed_back(w);
        slots_stop_running(w, &lm); /* jobs that started meanwhile */
    }
    if (!lost) {
        /* Shutting down: flushed and committed already, under the
         * shutdown deadline; a synchronous commit here could wait a
         * minute for a broker that is gone. */
        if (!w->kafka_closing)
            delivery_drain(w, 2000);
        delivery_take_handed_back(w);
        partitions_store_offsets(w);
        rd_kafka_resp_err_t e = rd_kafka_commit(rk, NULL, w->kafka_closing ? 1 : 0);
        if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
            cf_log_warn("kafka", "commit on revoke: %s", rd_kafka_err2str(e));
    }
    delivery_drop_retries(w, &lm);
    for (int i = 0; i < parts->cnt; i++) {
        part_state *ps = partitions_of(w, parts->elems[i].topic, parts->elems[i].partition, false);
        if (!ps)
            continue;
        if (ps->paused)
            rd_kafka_topic_partition_list_add(was_paused, parts->elems[i].topic, parts->elems[i].partition);
        if (ps->assigned)
            atomic_fetch_sub(&w->n_assigned, 1);
        if (w->guard)
            cf_pguard_forget(w->guard, &ps->guard);
        ps->assigned = false;
        ps->paused = false;
        ps->held = false;
        cf_offset_tracker_destroy(ps->tracker);
        ps->tracker = NULL;
    }
}

void partitions_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque)
{
    cf_worker *w = opaque;
    bool cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        atomic_store(&w->kafka_joined, true);
        consumers_joined(w, rk);
        cf_log_info("kafka", "assigned %d partition(s)", parts->cnt);
        partitions_assigned(w, parts);
        cf_observe_assigned(w->obs, true);
        rd_kafka_error_t *e = NULL;
        if (cooperative)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        if (e) {
            cf_log_error("kafka", "assign: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
        /* Partitions assigned while their topic's intake is paused (or we
         * are stopping) arrive unpaused. */
        rd_kafka_topic_partition_list_t *busy = rd_kafka_topic_partition_list_new(parts->cnt);
        for (int i = 0; i < parts->cnt; i++) {
            long ti = partitions_topic_index(w, parts->elems[i].topic);
            part_state *ps = ti < 0 ? NULL : partitions_get(w, (size_t)ti, parts->elems[i].partition, false);
            if (ps && (w->topics[ti].paused || w->stopping)) {
                rd_kafka_topic_partition_list_add(busy, parts->elems[i].topic, parts->elems[i].partition);
                ps->paused = true;
            }
        }
        if (busy->cnt)
            rd_kafka_pause_partitions(rk, busy);
        rd_kafka_topic_partition_list_destroy(busy);
    } else {
        bool lost = err != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS || rd_kafka_assignment_lost(rk);
        cf_log_info("kafka", "%s %d partition(s)", lost ? "lost" : "revoked", parts->cnt);
        rd_kafka_topic_partition_list_t *was_paused = rd_kafka_topic_partition_list_new(parts->cnt);
        partitions_revoked(w, rk, parts, lost, was_paused);
        /* Lost: out of the group until it rejoins.  A cooperative revoke
         * is followed by the rest of the rebalance's assignment. */
        if (lost)
            cf_observe_assigned(w->obs, false);
        if (cooperative) {
            rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, parts);
            if (e) {
                cf_log_error("kafka", "unassign: %s", rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
            }
        } else {
            rd_kafka_assign(rk, NULL);
        }
        /* librdkafka keeps the application's pause on a partition across
         * its revocation (only its own pause is reset by an assign), while
         * our record of the partition starts afresh when it comes back: a
         * partition paused here, lost, and assigned to us again would then
         * never be fetched (issue 28: seven minutes without a message after
         * a broker outage).  So what we paused is resumed as we let it go;
         * it is no longer fetched by then, so nothing is read here. */
        if (was_paused->cnt) {
            rd_kafka_resp_err_t re = rd_kafka_resume_partitions(rk, was_paused);
            if (re)
                cf_log_warn("kafka", "resuming %d given-up partition(s): %s", was_paused->cnt, rd_kafka_err2str(re));
            else
                cf_log_debug("kafka", "resumed %d given-up partition(s) paused here", was_paused->cnt);
        }
        rd_kafka_topic_partition_list_destroy(was_paused);
    }
}

