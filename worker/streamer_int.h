/* cf_streamer: turns a streaming request's captured output into chunks
 * (schema/cf_chunk.h) while its program runs.
 *
 * The runner calls cf_streamer_on_output (its on_output hook) with the
 * capture buffers; the streamer publishes what it has not published yet,
 * split into pieces of at most chunk_bytes, at most one round of chunks
 * per interval (bytes written in between are coalesced into the next
 * round; past max_chunks, one round a second), and everything left once
 * the program ended.  Only bytes the runner kept within the request's caps
 * are ever seen, so a stream never carries more than the result's
 * stdout/stderr would.
 *
 * What a reader gets is always a prefix of each stream, without gaps: a
 * chunk the producer cannot take now (its queue is full) is kept and tried
 * in the next round; one it refuses for good, or a final round that cannot
 * get through within 2 s, stops the stream (`stopped`: the result says so).
 * seq numbers are dense, and `seq` counts exactly the chunks handed over.
 */
#ifndef CF_STREAMER_H
#define CF_STREAMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_chunk.h"
#include "cf_util.h"

/* Hands one encoded chunk (malloc'd; the callee takes it on success) to
 * the producer.  Returns 0 when taken, 1 when busy (try later), -1 when
 * it failed for good. */
typedef int (*cf_streamer_publish_fn)(void *arg, const char *id, uint8_t *value, size_t len);

typedef struct cf_streamer {
    const char *id;            /* the request id (borrowed) */
    char run[CF_CHUNK_RUN_MAX + 1];
    int64_t interval_us;
    size_t chunk_bytes;
    int64_t max_chunks;        /* past it, one round a second */
    cf_streamer_publish_fn publish;
    void *publish_arg;
    int64_t seq;               /* chunks handed over so far */
    size_t sent[2];            /* bytes of stdout/stderr published */
    int64_t next_round_us;     /* cf_mono_us time of the next allowed round */
    bool stopped;              /* a chunk could not be published: no more */
} cf_streamer;

void cf_streamer_init(cf_streamer *s, const char *id, const char *run, int64_t interval_us, size_t chunk_bytes,
                      int64_t max_chunks, cf_streamer_publish_fn publish, void *publish_arg);
/* The runner's on_output hook (arg: the cf_streamer). */
int64_t cf_streamer_on_output(void *arg, const cf_buf *out, const cf_buf *err, bool final, int64_t now_us);

#endif
