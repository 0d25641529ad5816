/* cf_msgpack: msgpack for the rest of the project, bounded.
 *
 * cf_mp_reader is a small bounded cursor over msgpack bytes.  It never
 * allocates and never reads past `end`; every declared length or element
 * count is checked against the bytes that remain and against the
 * cf_decode_limits before the caller can act on it.  We do not use
 * msgpack_unpack on wire bytes: msgpack-c 4.0.0 reserves memory for declared
 * counts before checking them (docs/SECURITY.md, "Hostile input").
 *
 * The writers at the end build the small fixed messages other modules
 * need (the thread envelope, checkpoint metadata): nothing outside schema/
 * writes msgpack by hand.
 */
#ifndef CF_MSGPACK_H
#define CF_MSGPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_schema.h"
#include "cf_util.h"

/* Hard ceiling on nesting whatever the caller's limits say: it bounds the
 * skip stack and the recursion of the JSON converters. */
#define CF_MP_DEPTH_HARD 128

typedef enum cf_mp_kind {
    CF_MP_END = 0, /* no bytes left */
    CF_MP_NIL,
    CF_MP_BOOL,
    CF_MP_UINT,
    CF_MP_INT, /* negative integer */
    CF_MP_FLOAT,
    CF_MP_STR,
    CF_MP_BIN,
    CF_MP_ARRAY,
    CF_MP_MAP,
    CF_MP_EXT,
    CF_MP_INVALID, /* 0xc1, never used by msgpack */
} cf_mp_kind;

typedef struct cf_mp_reader {
    const uint8_t *p;
    const uint8_t *end;
    const cf_decode_limits *lim;
} cf_mp_reader;

void cf_mp_reader_init(cf_mp_reader *r, const void *buf, size_t len, const cf_decode_limits *lim);
static inline size_t cf_mp_remaining(const cf_mp_reader *r)
{
    return (size_t)(r->end - r->p);
}

/* Kind of the next value without consuming it. */
cf_mp_kind cf_mp_peek(const cf_mp_reader *r);
const char *cf_mp_kind_name(cf_mp_kind k);

/* Container headers.  `depth` is the depth of this container (top-level
 * map = 1); checked against lim->max_depth.  The count is checked against
 * lim->max_elements and the remaining bytes (>= 1 byte per array element,
 * >= 2 per map entry). */
int cf_mp_read_map(cf_mp_reader *r, unsigned depth, uint32_t *n, cf_error *err);
int cf_mp_read_array(cf_mp_reader *r, unsigned depth, uint32_t *n, cf_error *err);

/* Zero-copy: *s points into the buffer.  max caps the length. */
int cf_mp_read_str(cf_mp_reader *r, size_t max, const uint8_t **s, size_t *len, cf_error *err);
int cf_mp_read_bin(cf_mp_reader *r, size_t max, const uint8_t **s, size_t *len, cf_error *err);
/* Either str or bin. */
int cf_mp_read_bytes(cf_mp_reader *r, size_t max, const uint8_t **s, size_t *len, cf_error *err);
/* Signed integer: any msgpack int that fits int64. */
int cf_mp_read_int(cf_mp_reader *r, int64_t *v, cf_error *err);
/* Raw uint64 (for values above INT64_MAX in conversions). */
int cf_mp_read_uint(cf_mp_reader *r, uint64_t *v, cf_error *err);
int cf_mp_read_bool(cf_mp_reader *r, bool *v, cf_error *err);
int cf_mp_read_nil(cf_mp_reader *r, cf_error *err);
int cf_mp_read_float(cf_mp_reader *r, double *v, cf_error *err);
/* Ext header + payload span. */
int cf_mp_read_ext(cf_mp_reader *r, int8_t *type, const uint8_t **s, size_t *len, cf_error *err);

/* Skips one complete value whose own depth would be `depth`.  Strings and
 * binaries inside are capped by lim->max_bin_bytes (they are payload). */
int cf_mp_skip(cf_mp_reader *r, unsigned depth, cf_error *err);

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
bool cf_utf8_valid(const uint8_t *s, size_t len);


/* ---- writers ---- */

/* The input a thread's run gets (SPEC "Threads and checkpoints"): a map
 * {"checkpoint": <state or nil>, "checkpoint_id": <id or nil>, "input":
 * <input or nil>}, where state and input are msgpack values as they are
 * (not re-encoded).  out->data is the caller's to free. */
int cf_thread_envelope_encode(const cf_bytes *input, const void *state, size_t state_len, const char *checkpoint_id,
                              cf_bytes *out, cf_error *err);

/* A checkpoint's metadata: {"request_id": id, "worker": worker}, appended
 * to b (short strings only: ids).  -1 when out of memory or too long. */
int cf_checkpoint_meta_encode(const char *request_id, const char *worker, cf_buf *b);

#endif
