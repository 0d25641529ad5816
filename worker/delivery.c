/* delivery.c: answers to the producer, delivery reports, retries, dead letters. */
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

/* What a result the result topic refused as too large keeps of each stream. */
#define SLIM_STREAM_BYTES (64 * 1024)
/* Deliveries of a result tried before its request is dead-lettered. */
#define RESULT_TRIES 5

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);

/* Results are batched only while there is a backlog.  The producer lingers
 * (result-batch, its linger.ms) so that under load many results share one
 * produce request: the broker's CPU per request is mostly per produce
 * request.  Without a backlog nothing should wait: whoever hands a result
 * to the producer then kicks this thread, which calls rd_kafka_flush(), the
 * one call that makes librdkafka send at once despite linger.ms.  It runs
 * here because flush blocks until the reports are served; delivery reports
 * are events (rd_kafka_conf_set_events), so flush only waits and the main
 * thread keeps serving them (delivery_serve_producer). */
void *flusher_main(void *arg)
{
    cf_worker *w = arg;
    pthread_mutex_lock(&w->flush_mu);
    for (;;) {
        while (!w->flush_wanted && !w->flush_stop)
            pthread_cond_wait(&w->flush_cv, &w->flush_mu);
        if (w->flush_stop)
            break;
        w->flush_wanted = false;
        pthread_mutex_unlock(&w->flush_mu);
        /* Bounded: with the broker gone this would wait for the message
         * timeout; a new kick starts another round. */
        (void)rd_kafka_flush(w->producer, 100);
        pthread_mutex_lock(&w->flush_mu);
    }
    pthread_mutex_unlock(&w->flush_mu);
    return NULL;
}

void delivery_kick(cf_worker *w)
{
    if (!w->flusher_started)
        return;
    pthread_mutex_lock(&w->flush_mu);
    w->flush_wanted = true;
    pthread_cond_signal(&w->flush_cv);
    pthread_mutex_unlock(&w->flush_mu);
}

/* After a result went to the producer: send it now unless requests wait
 * for a slot, whose results will soon follow it. */
void delivery_handed_over(cf_worker *w)
{
    /* Without a linger librdkafka sends at once by itself. */
    if (w->cfg->result_batch_us > 0 && (!w->pool || cf_exec_pool_queued(w->pool) == 0))
        delivery_kick(w);
}

/* Serves the producer's events on the main thread: delivery reports and
 * errors.  Waits up to timeout_ms for the first one; at most a bounded
 * number per call so intake is never starved (then the main loop is woken
 * again: librdkafka signals the queue only when something new arrives).
 * Returns how many were served. */
int delivery_serve_producer(cf_worker *w, int timeout_ms)
{
    rd_kafka_event_t *ev;
    int n = 0;
    for (; n < PRODUCER_SERVE_MAX && (ev = rd_kafka_queue_poll(w->producer_q, n == 0 ? timeout_ms : 0)) != NULL; n++) {
        switch (rd_kafka_event_type(ev)) {
        case RD_KAFKA_EVENT_DR: {
            const rd_kafka_message_t *m;
            while ((m = rd_kafka_event_message_next(ev)) != NULL)
                on_delivery(w->producer, m, w);
            break;
        }
        case RD_KAFKA_EVENT_ERROR:
            kafka_on_error(w->producer,
                           rd_kafka_event_error_is_fatal(ev) ? RD_KAFKA_RESP_ERR__FATAL : rd_kafka_event_error(ev),
                           rd_kafka_event_error_string(ev), w);
            break;
        default:
            break;
        }
        rd_kafka_event_destroy(ev);
    }
    if (n == PRODUCER_SERVE_MAX)
        worker_wake(w);
    return n;
}

/* Everything the producer holds delivered (or timeout_ms passed), its
 * reports served: rd_kafka_flush alone only waits when reports are
 * events, so the flusher flushes while this thread serves. */
rd_kafka_resp_err_t delivery_drain(cf_worker *w, int timeout_ms)
{
    int64_t until = cf_mono_us() + (int64_t)timeout_ms * 1000;
    while (rd_kafka_outq_len(w->producer) > 0 && cf_mono_us() < until) {
        delivery_kick(w);
        delivery_serve_producer(w, 10);
    }
    delivery_serve_producer(w, 0);
    return rd_kafka_outq_len(w->producer) > 0 ? RD_KAFKA_RESP_ERR__TIMED_OUT : RD_KAFKA_RESP_ERR_NO_ERROR;
}

static void result_fill_meta(cf_worker *w, const job *j, cf_result *res)
{
    if (!res->id && j->req.id)
        cf_str_set(&res->id, j->req.id);
    if (!res->meta.backend && j->backend)
        cf_str_set(&res->meta.backend, j->backend->ops->name);
    if (!res->meta.isolation && j->backend)
        cf_str_set(&res->meta.isolation, j->backend->caps.isolation);
    if (!res->meta.language && j->req.language != CF_LANG_NONE)
        cf_str_set(&res->meta.language, cf_language_name(j->req.language));
    cf_str_set(&res->meta.worker, w->worker_id);
    char tp[64];
    cf_job_obs_traceparent(&j->obs, tp, sizeof(tp));
    cf_str_set(&res->meta.traceparent, tp);
    if (j->req.identity)
        cf_str_set(&res->meta.identity, j->req.identity);
    res->finished_us = cf_now_us();
}

/* Whether the caller is the main thread (which serves the producer's
 * queue and owns the retries) rather than a slot. */
static bool on_main_thread(const cf_worker *w)
{
    return pthread_equal(pthread_self(), w->main_thread) != 0;
}

/* Hands the job's answer (j->out) to the producer, which copies it: the job
 * keeps its own copy until the delivery report, to retry with.  The main
 * thread serves the producer's queue while the local queue is full; a
 * slot sleeps instead. */
static rd_kafka_resp_err_t produce_out(cf_worker *w, job *j)
{
    /* What the message is made of is read from the job before the release
     * below: once the producer has the message, its delivery report may
     * free the job on the main thread, which acquires j->produced first
     * (librdkafka's own locks order it too, but ThreadSanitizer cannot see
     * them in an uninstrumented library: a read after the release was
     * reported under load). */
    const job_out *o = &j->out;
    const char *topic = o->topic, *key = o->key;
    size_t key_len = key ? strlen(key) : 0;
    /* Kafka tells an empty value from a null one (a tombstone): a non-NULL
     * pointer with no bytes is the empty one. */
    const void *value = o->value.data ? (const void *)o->value.data : o->value_empty ? (const void *)"" : NULL;
    size_t value_len = o->value.len;
    const rd_kafka_headers_t *hdrs = o->hdrs;
    rd_kafka_headers_t *copy = hdrs ? rd_kafka_headers_copy(hdrs) : NULL;
    bool on_main = on_main_thread(w);
    job_set_state(w, j, j->state == JOB_BLOCKING ? JOB_BLOCKING : JOB_PRODUCING);
    __atomic_add_fetch(&j->produced, 1, __ATOMIC_RELEASE);
    for (int tries = 0;; tries++) {
        rd_kafka_resp_err_t e;
        /* A retry (the local queue was full) follows a refused produce:
         * no delivery report can have freed the job meanwhile. */
        if (!copy && hdrs && tries > 0)
            copy = rd_kafka_headers_copy(hdrs);
        if (copy)
            e = rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                                  RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_HEADERS(copy), RD_KAFKA_V_OPAQUE(j), RD_KAFKA_V_END);
        else
            e = rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                                  RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_OPAQUE(j), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
            delivery_handed_over(w);
            return e;
        }
        if (copy)
            rd_kafka_headers_destroy(copy);
        copy = NULL;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || tries > 6000) {
            cf_log_warn(LOG_SUB, "produce to %s failed: %s", topic, rd_kafka_err2str(e));
            return e;
        }
        if (on_main)
            delivery_serve_producer(w, 10);
        else
            nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
}

static bool too_large(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE || e == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

/* A slot gives a job back to the main thread: one it stopped or could not
 * answer (still running: dropped there), or one whose answer the producer
 * refused at once (producing: a failed delivery). */
void delivery_hand_back(cf_worker *w, job *j, rd_kafka_resp_err_t e)
{
    j->last_err = e;
    pthread_mutex_lock(&w->lock);
    j->list_next = w->handoff;
    w->handoff = j;
    pthread_mutex_unlock(&w->lock);
    worker_wake(w);
}

/* Produces j->out; an immediate failure goes the way of a failed delivery
 * (on a slot: through the main thread). */
void delivery_send(cf_worker *w, job *j)
{
    rd_kafka_resp_err_t e = produce_out(w, j);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    if (on_main_thread(w))
        delivery_failed(w, j, e);
    else
        delivery_hand_back(w, j, e);
}

/* Appends a warning diagnostic (best effort: dropped when out of memory). */
void result_add_warning(cf_result *res, const char *msg)
{
    cf_diagnostic *d = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*d));
    if (!d)
        return;
    res->diagnostics = d;
    memset(&d[res->n_diagnostics], 0, sizeof(*d));
    if (cf_str_set(&d[res->n_diagnostics].level, "warning") == 0 &&
        cf_str_set(&d[res->n_diagnostics].message, msg) == 0)
        res->n_diagnostics++;
}

/* Cases and collected files share the budget: each case gets its part,
 * the files one budget between them. */
static bool cut_cases_and_files(cf_result *res, size_t each)
{
    bool dropped = false;
    size_t share = res->n_cases ? each / res->n_cases : each;
    if (share < 64)
        share = 64;
    for (size_t i = 0; i < res->n_cases; i++) {
        cf_case_result *c = &res->cases[i];
        if (c->stdout_data.len > share) {
            c->stdout_data.len = share;
            c->stdout_truncated = true;
        }
        if (c->stderr_data.len > share) {
            c->stderr_data.len = share;
            c->stderr_truncated = true;
        }
        if (c->output.len > share) {
            free(c->output.data);
            c->output = (cf_bytes){0};
            dropped = true;
        }
    }
    size_t budget = each;
    for (size_t i = 0; i < res->n_files; i++) {
        cf_out_file *f = &res->files[i];
        if (f->content.len > budget) {
            f->content.len = budget;
            f->truncated = true;
            res->files_truncated = true;
        }
        budget -= f->content.len;
    }
    return dropped;
}

/* Cuts stdout and stderr to each bytes (marking them truncated) and drops
 * a structured output larger than that; true when the output was dropped. */
bool result_cut_bulk(cf_result *res, size_t each)
{
    bool dropped_cases = cut_cases_and_files(res, each);
    if (res->stdout_data.len > each) {
        res->stdout_data.len = each;
        res->stdout_truncated = true;
    }
    if (res->stderr_data.len > each) {
        res->stderr_data.len = each;
        res->stderr_truncated = true;
    }
    if (res->output.len <= each)
        return dropped_cases;
    free(res->output.data);
    res->output.data = NULL;
    res->output.len = 0;
    return true;
}

/* A result the result topic refused as too large keeps its status and
 * metadata but loses most of its bulk, and says so: better a truncated
 * answer than none (or an endless redelivery of the request). */
static void slim_result(cf_result *res, size_t refused_bytes)
{
    bool dropped_output = result_cut_bulk(res, SLIM_STREAM_BYTES);
    char msg[256];
    snprintf(msg, sizeof(msg),
             "the result (%zu bytes) exceeded the result topic's message size limit: stdout and stderr were cut "
             "to %d KiB%s",
             refused_bytes, SLIM_STREAM_BYTES / 1024, dropped_output ? " and the structured output dropped" : "");
    result_add_warning(res, msg);
}

/* Encodes res into j->out (for j->result_topic).  Only allocation failure
 * can fail an encode; then a bare internal_error is tried. */
int delivery_set_result(cf_worker *w, job *j, cf_result *res)
{
    result_fill_meta(w, j, res);
    /* What the metrics count once it is delivered: names of the worker's
     * own (enum names, its backends), never a request's strings. */
    j->obs.status = cf_status_name(res->status);
    j->obs.backend = j->backend ? j->backend->ops->name : "none";
    j->obs.language = j->req.language != CF_LANG_NONE ? cf_language_name(j->req.language) : "none";
    j->obs.dead_letter = false;
    j->obs.produce_ns = cf_observe_now_ns();
    cf_bytes enc = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_result_encode(res, &enc, &err) < 0) {
        cf_log_error(LOG_SUB, "request %s: encoding result: %s", j->req.id ? j->req.id : "?", err.msg);
        cf_result bare = {0};
        bare.status = CF_STATUS_INTERNAL_ERROR;
        cf_str_set(&bare.id, res->id);
        cf_result_set_reason(&bare, "worker could not encode the result: %s", err.msg);
        int r = cf_result_encode(&bare, &enc, &err);
        cf_result_clear(&bare);
        if (r < 0)
            return -1;
    }
    free(j->out.value.data);
    j->out.kind = JOB_OUT_RESULT;
    j->out.value = enc;
    j->out.topic = j->result_topic;
    if (!j->out.key && res->id)
        j->out.key = cf_strdup(res->id);
    return 0;
}

/* Sends res as the job's answer.  When not even an encoding can be made
 * (out of memory), the job is dropped unmarked: the partition's position
 * stays before it and the request is read again after a restart or
 * rebalance; the worker logs it loudly. */
void delivery_send_result(cf_worker *w, job *j, cf_result *res)
{
    if (delivery_set_result(w, j, res) < 0) {
        cf_log_error(LOG_SUB, "request %s: no memory for its result: left for redelivery", j->req.id);
        if (on_main_thread(w))
            job_set_state(w, j, JOB_DROPPED);
        else
            delivery_hand_back(w, j, 0);
        return;
    }
    delivery_send(w, j);
}

void delivery_answer_rejected(cf_worker *w, job *j, const char *id, const char *reason)
{
    cf_result res = {0};
    res.status = CF_STATUS_REJECTED;
    cf_str_set(&res.id, id);
    cf_result_set_reason(&res, "%s", reason);
    w->n_rejected++;
    cf_log_info(LOG_SUB, "request %s rejected: %s", id, reason);
    delivery_send_result(w, j, &res);
    cf_result_clear(&res);
}

/* Answers j `cancelled` without running it (main thread). */
void delivery_answer_cancelled(cf_worker *w, job *j, const char *reason)
{
    cf_result res = {0};
    res.status = CF_STATUS_CANCELLED;
    cf_str_set(&res.id, j->req.id);
    cf_result_set_reason(&res, "%s; it never started", reason); /* SPEC.md 4.1: killed or never started */
    cf_log_info(LOG_SUB, "request %s cancelled while it waited for a slot", j->req.id);
    delivery_send_result(w, j, &res);
    cf_result_clear(&res);
}

/* Makes bytes the job's answer as a dead letter: origin and reason in
 * headers. */
static int set_dead_letter_out(cf_worker *w, job *j, const char *key, const void *value, size_t len,
                               const char *reason)
{
    job_out_clear(&j->out);
    j->out.kind = JOB_OUT_DEAD_LETTER;
    j->delivery_tries = 0;
    j->obs.dead_letter = true;
    j->obs.produce_ns = cf_observe_now_ns();
    const char *origin = w->topics[j->topic].name;
    cf_log_warn(LOG_SUB, "dead-lettering %s[%" PRId32 "]@%" PRId64 ": %s", origin, j->partition, j->offset, reason);
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);
    char num[32];
    rd_kafka_header_add(h, HDR_PREFIX "origin-topic", -1, origin, -1);
    snprintf(num, sizeof(num), "%" PRId32, j->partition);
    rd_kafka_header_add(h, HDR_PREFIX "origin-partition", -1, num, -1);
    snprintf(num, sizeof(num), "%" PRId64, j->offset);
    rd_kafka_header_add(h, HDR_PREFIX "origin-offset", -1, num, -1);
    rd_kafka_header_add(h, HDR_PREFIX "reason", -1, reason, -1);
    rd_kafka_header_add(h, HDR_PREFIX "worker", -1, w->worker_id, -1);
    j->out.hdrs = h;
    j->out.topic = w->cfg->dlq_topic;
    j->out.key = key ? cf_strdup(key) : NULL;
    if (len) {
        j->out.value.data = malloc(len);
        if (!j->out.value.data)
            return -1;
        memcpy(j->out.value.data, value, len);
        j->out.value.len = len;
    }
    j->out.value_empty = value && !len; /* SPEC 4.2: the original bytes, empty ones too */
    return 0;
}

void delivery_dead_letter(cf_worker *w, job *j, const rd_kafka_message_t *m, const char *reason)
{
    char *key = m->key_len ? cf_strndup(m->key, m->key_len) : NULL;
    int rc = set_dead_letter_out(w, j, key, m->payload, m->len, reason);
    free(key);
    if (rc < 0) {
        cf_log_error(LOG_SUB, "out of memory dead-lettering offset %" PRId64 ": left for redelivery", j->offset);
        job_set_state(w, j, JOB_DROPPED);
        return;
    }
    delivery_send(w, j);
}

/* Backoff before producing a failed answer again: 100 ms doubling, capped
 * at 10 s (results) or 30 s (dead letters, retried until they land). */
static int64_t retry_delay_us(const job *j)
{
    int n = j->delivery_tries < 12 ? j->delivery_tries : 12;
    int64_t d = 100000LL << (n > 0 ? n - 1 : 0);
    int64_t cap = j->out.kind == JOB_OUT_DEAD_LETTER ? 30000000 : 10000000;
    return d < cap ? d : cap;
}

/* Into retry-wait (or, for a dead letter the broker refuses, blocking)
 * until delay_us from now. */
static void schedule_retry(cf_worker *w, job *j, job_state wait_in, int64_t delay_us)
{
    job_set_state(w, j, wait_in);
    j->next_try_us = cf_mono_us() + delay_us;
    j->list_next = w->retry;
    w->retry = j;
    w->n_retries++;
}

/* An answer could not be delivered (main thread).  A result is adjusted
 * when that can help (too large: cut; reply_to topic refused: the default
 * topic with reply_to_error) and retried with backoff; after RESULT_TRIES
 * the request itself is dead-lettered.  A dead letter is retried until it
 * lands, and while one waits the worker takes no new work (blocking): it
 * never skips an offset, and no offset waits longer than the broker does. */
void delivery_failed(cf_worker *w, job *j, rd_kafka_resp_err_t e)
{
    if (!partitions_job_owned(w, j) || w->destroying) {
        /* Its partition went to another worker, which reads the request
         * again: retrying here would only answer it twice. */
        job_set_state(w, j, JOB_DROPPED);
        return;
    }
    j->delivery_tries++;
    cf_observe_produce_retry(w->obs);
    bool dead = j->out.kind == JOB_OUT_DEAD_LETTER;
    cf_log_warn(LOG_SUB, "delivery of %s for %s failed (try %d): %s", dead ? "dead letter" : "result",
                j->req.id ? j->req.id : "?", j->delivery_tries, rd_kafka_err2str(e));
    if (rd_kafka_fatal_error(w->producer, NULL, 0)) {
        job_set_state(w, j, JOB_DROPPED); /* the worker stops; the request is redelivered */
        return;
    }
    if (dead) {
        bool blocking = j->state == JOB_BLOCKING;
        if (too_large(e) && j->out.cut == JOB_OUT_WHOLE) {
            free(j->out.value.data);
            j->out.value = (cf_bytes){0};
            j->out.cut = JOB_OUT_VALUE_DROPPED;
            rd_kafka_header_add(j->out.hdrs, HDR_PREFIX "value-dropped", -1, "too large for the dead-letter topic",
                                -1);
            schedule_retry(w, j, blocking ? JOB_BLOCKING : JOB_RETRY_WAIT, 0);
            return;
        }
        if (!blocking)
            cf_log_error(LOG_SUB, "the dead-letter topic %s cannot be written (%s): taking no work until it can",
                         w->cfg->dlq_topic, rd_kafka_err2str(e));
        schedule_retry(w, j, JOB_BLOCKING, retry_delay_us(j));
        return;
    }
    /* A result. */
    bool to_default = j->out.topic != w->topics[j->topic].results;
    if ((too_large(e) && j->out.cut == JOB_OUT_WHOLE) || to_default) {
        cf_result res = {0};
        cf_decode_limits lim = cf_decode_limits_default;
        lim.max_total_bytes = lim.max_bin_bytes = j->out.value.len;
        if (cf_result_decode(j->out.value.data, j->out.value.len, &lim, &res, NULL) == 0) {
            if (too_large(e)) {
                slim_result(&res, j->out.value.len);
            } else {
                /* A reply_to topic that does not take it: the profile's
                 * result topic, saying why. */
                const char *results = w->topics[j->topic].results;
                char why[300];
                snprintf(why, sizeof(why), "reply_to topic '%.64s' could not take the result (%s): sent to '%s'",
                         j->out.topic, rd_kafka_err2str(e), results);
                free(res.reply_to_error);
                res.reply_to_error = cf_strdup(why);
                j->result_topic = results;
            }
            int rc = delivery_set_result(w, j, &res);
            cf_result_clear(&res);
            if (rc == 0) {
                if (too_large(e))
                    j->out.cut = JOB_OUT_SLIMMED;
                schedule_retry(w, j, JOB_RETRY_WAIT, 0);
                return;
            }
        }
    }
    if (j->delivery_tries >= RESULT_TRIES) {
        /* The result cannot be delivered: dead-letter the request itself
         * (re-encoded) so it is neither lost nor retried forever. */
        char reason[300];
        snprintf(reason, sizeof(reason), "result could not be delivered to %s: %s", j->out.topic, rd_kafka_err2str(e));
        cf_bytes enc = {0};
        if (cf_request_encode(&j->req, &enc, NULL) < 0 ||
            set_dead_letter_out(w, j, j->key, enc.data, enc.len, reason) < 0) {
            free(enc.data);
            cf_log_error(LOG_SUB, "request %s: out of memory dead-lettering: left for redelivery", j->req.id);
            job_set_state(w, j, JOB_DROPPED);
            return;
        }
        free(enc.data);
        schedule_retry(w, j, JOB_RETRY_WAIT, 0);
        return;
    }
    schedule_retry(w, j, JOB_RETRY_WAIT, retry_delay_us(j));
}

/* Produces the answers whose retry time has come (main thread). */
void delivery_run_retries(cf_worker *w)
{
    int64_t now = cf_mono_us();
    job *due = NULL;
    for (job **pp = &w->retry; *pp;) {
        job *j = *pp;
        if (j->next_try_us <= now || w->stopping) {
            *pp = j->list_next;
            j->list_next = due;
            due = j;
        } else {
            pp = &j->list_next;
        }
    }
    while (due) {
        job *j = due;
        due = j->list_next;
        j->list_next = NULL;
        if (partitions_job_owned(w, j))
            delivery_send(w, j);
        else
            job_set_state(w, j, JOB_DROPPED);
    }
}

/* Marks the messages of worker reports (not jobs) in delivery reports. */
char delivery_report_tag;

char delivery_chunk_tag; /* the opaque of output chunks */

void delivery_chunk_failed(cf_worker *w, const char *topic, rd_kafka_resp_err_t e)
{
    uint64_t n = atomic_fetch_add(&w->chunks_failed, 1) + 1;
    int64_t now = cf_mono_us(), last = atomic_load(&w->chunk_fail_logged_us);
    if ((last == 0 || now - last > 10 * 1000000LL) && atomic_compare_exchange_strong(&w->chunk_fail_logged_us, &last, now))
        cf_log_warn(LOG_SUB, "output chunk not published to %s: %s (%" PRIu64 " so far; the results still carry "
                    "all output)", topic, rd_kafka_err2str(e), n);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    cf_worker *w = opaque;
    if (m->_private == &delivery_report_tag) {
        /* Purged: the worker is stopping with the broker gone.  Reports
         * repeat every report-interval: their failure is said once every
         * 10 minutes. */
        static int64_t report_fail_logged_us;
        int64_t now_us = cf_mono_us();
        bool failed = m->err && m->err != RD_KAFKA_RESP_ERR__PURGE_QUEUE && m->err != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
        if (failed && (report_fail_logged_us == 0 || now_us - report_fail_logged_us > 600 * 1000000LL)) {
            report_fail_logged_us = now_us;
            cf_log_warn(LOG_SUB,
                        "worker report not published to %s: %s (codefleet doctor will not see what this worker "
                        "serves: check that the topic exists and this principal may write it)",
                        rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err));
        }
        return;
    }
    if (m->_private == &delivery_chunk_tag) {
        if (m->err)
            delivery_chunk_failed(w, rd_kafka_topic_name(m->rkt), m->err);
        return;
    }
    job *j = m->_private;
    if (!j)
        return;
    (void)__atomic_load_n(&j->produced, __ATOMIC_ACQUIRE); /* pairs with produce_out's */
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        cf_observe_answered(w->obs, &j->obs, j->req.id);
        job_set_state(w, j, j->out.kind == JOB_OUT_DEAD_LETTER ? JOB_DEAD_LETTERED : JOB_ANSWERED);
        return;
    }
    delivery_failed(w, j, m->err);
}

/* Takes the jobs slots handed back. */
void delivery_take_handed_back(cf_worker *w)
{
    pthread_mutex_lock(&w->lock);
    job *list = w->handoff;
    w->handoff = NULL;
    pthread_mutex_unlock(&w->lock);
    while (list) {
        job *j = list;
        list = j->list_next;
        j->list_next = NULL;
        if (j->state == JOB_RUNNING)
            job_set_state(w, j, JOB_DROPPED); /* stopped by the worker, or no memory for its answer */
        else
            delivery_failed(w, j, j->last_err);
    }
}

/* Drops answers waiting for a retry whose partition is given up (lm NULL:
 * all): the next owner reads those requests again. */
void delivery_drop_retries(cf_worker *w, lane_match *lm)
{
    for (job **pp = &w->retry; *pp;) {
        job *j = *pp;
        if (!lm || partitions_lane_matches(j->pj.partition, lm)) {
            *pp = j->list_next;
            job_set_state(w, j, JOB_DROPPED);
        } else {
            pp = &j->list_next;
        }
    }
}

