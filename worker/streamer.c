/* cf_streamer: see streamer.h. */
#include "streamer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long the final round keeps trying a busy producer before the rest of
 * the stream is given up (the result still carries every byte). */
#define FINAL_PATIENCE_US 2000000
#define BUSY_RETRY_US 5000
#define SLOW_ROUND_US 1000000 /* the pace past max_chunks */

void cf_streamer_init(cf_streamer *s, const char *id, const char *run, int64_t interval_us, size_t chunk_bytes,
                      int64_t max_chunks, cf_streamer_publish_fn publish, void *publish_arg)
{
    memset(s, 0, sizeof(*s));
    s->id = id;
    snprintf(s->run, sizeof(s->run), "%s", run);
    s->interval_us = interval_us > 0 ? interval_us : 0;
    s->chunk_bytes = chunk_bytes > 0 && chunk_bytes <= CF_CHUNK_DATA_MAX ? chunk_bytes : CF_CHUNK_DATA_MAX;
    s->max_chunks = max_chunks > 0 ? max_chunks : INT64_MAX;
    s->publish = publish;
    s->publish_arg = publish_arg;
}

/* Publishes buf[sent..len) of one stream.  Returns 1 when all of it went,
 * 0 when the producer was busy (the rest waits for the next round), -1
 * when a chunk failed for good (the stream stops). */
static int publish_stream(cf_streamer *s, cf_chunk_stream which, const cf_buf *buf)
{
    size_t *sent = &s->sent[which];
    while (buf->len > *sent) {
        size_t n = buf->len - *sent;
        if (n > s->chunk_bytes)
            n = s->chunk_bytes;
        cf_chunk c = {.id = (char *)s->id,
                      .run = s->run,
                      .seq = s->seq,
                      .stream = which,
                      .offset = (int64_t)*sent,
                      .data = {.data = buf->data + *sent, .len = n},
                      .at_us = cf_now_us()};
        cf_bytes enc = {0};
        int rc = cf_chunk_encode(&c, &enc, NULL) < 0 ? -1 : s->publish(s->publish_arg, s->id, enc.data, enc.len);
        if (rc != 0) {
            free(enc.data);
            return rc == 1 ? 0 : -1;
        }
        s->seq++;
        *sent += n;
    }
    return 1;
}

int64_t cf_streamer_on_output(void *arg, const cf_buf *out, const cf_buf *err, bool final, int64_t now_us)
{
    cf_streamer *s = arg;
    bool pending = out->len > s->sent[CF_CHUNK_STDOUT] || err->len > s->sent[CF_CHUNK_STDERR];
    if (!pending || s->stopped)
        return INT64_MAX;
    if (!final && now_us < s->next_round_us)
        return s->next_round_us; /* coalesce until the next round */
    int64_t give_up = now_us + FINAL_PATIENCE_US;
    for (;;) {
        int rc = publish_stream(s, CF_CHUNK_STDOUT, out);
        if (rc == 1)
            rc = publish_stream(s, CF_CHUNK_STDERR, err);
        if (rc == 1) {
            s->next_round_us = now_us + (s->seq >= s->max_chunks && s->interval_us < SLOW_ROUND_US ? SLOW_ROUND_US
                                                                                                    : s->interval_us);
            return INT64_MAX;
        }
        if (rc < 0) {
            s->stopped = true;
            return INT64_MAX;
        }
        if (!final) { /* the producer is full: the rest soon, as its own round */
            s->next_round_us = now_us + BUSY_RETRY_US;
            return s->next_round_us;
        }
        if (cf_mono_us() >= give_up) {
            s->stopped = true;
            return INT64_MAX;
        }
        nanosleep(&(struct timespec){0, BUSY_RETRY_US * 1000}, NULL);
    }
}
