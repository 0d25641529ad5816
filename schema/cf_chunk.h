/* cf_chunk: output chunks, wire schema v1 ("Output chunks" in SPEC.md).
 *
 * A request with "stream": true gets, while its program runs, the bytes the
 * program writes to stdout and stderr as chunks on the output topic of the
 * topic its result goes to (<result topic> + the worker's
 * stream-topic-suffix, ".output" by default), keyed by the request id.  The
 * final result says how many were published (cf_result.chunks) under which
 * run id (cf_result.meta.run): a reader that has seq 0..chunks-1 of that run
 * has them all.  The result's stdout/stderr stay the authoritative copy.
 *
 * Ownership: a decoded chunk owns its strings and data (cf_chunk_clear).
 * The encoder only reads, so the worker points data at its capture buffer.
 */
#ifndef CF_CHUNK_H
#define CF_CHUNK_H

#include <stdint.h>

#include "cf_error.h"
#include "cf_schema.h"

#define CF_CHUNK_TOPIC_SUFFIX ".output"
#define CF_CHUNK_RUN_MAX 64              /* bytes of a run id */
#define CF_CHUNK_DATA_MAX (256 * 1024)   /* bytes of one chunk's data */

typedef enum cf_chunk_stream {
    CF_CHUNK_STDOUT = 0,
    CF_CHUNK_STDERR = 1,
} cf_chunk_stream;

/* What an output-topic record is: a piece of output, or the notice a
 * worker publishes when it starts a request that asked for one
 * ("notify_start"; SPEC.md "Start notices"). */
typedef enum cf_chunk_kind {
    CF_CHUNK_OUTPUT = 0,
    CF_CHUNK_START = 1,
} cf_chunk_kind;

#define CF_CHUNK_WORKER_MAX 64           /* bytes of a start notice's worker id */

typedef struct cf_chunk {
    cf_chunk_kind kind;     /* CF_CHUNK_START: only id, run, worker and at_us */
    char *id;               /* the request id (cf_id_valid) */
    char *run;              /* the execution that wrote it: 1..64 bytes, as an id */
    int64_t seq;            /* 0, 1, 2 ... over both streams, in publishing order */
    cf_chunk_stream stream;
    int64_t offset;         /* where data starts in its stream's captured bytes */
    cf_bytes data;          /* 1..CF_CHUNK_DATA_MAX bytes */
    int64_t at_us;          /* epoch microseconds when the worker read the last of it (a start
                             * notice: when the worker took the request into a slot) */
    char *worker;           /* a start notice: the worker that started it (NULL: not said) */
} cf_chunk;

const char *cf_chunk_stream_name(cf_chunk_stream s);

/* The rules of SPEC.md "Output chunks" (run by the encoder and decoder). */
int cf_chunk_check(const cf_chunk *c, cf_error *err);
/* Canonical msgpack (fixed key order, smallest forms); out->data malloc'd. */
int cf_chunk_encode(const cf_chunk *c, cf_bytes *out, cf_error *err);
/* Hostile bytes in, a checked chunk out (or err naming the field).  limits
 * NULL = the defaults.  Unknown keys are ignored; "v" other than 1 is refused. */
int cf_chunk_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_chunk *out, cf_error *err);
void cf_chunk_clear(cf_chunk *c); /* NULL-safe; leaves c zeroed */

#endif
