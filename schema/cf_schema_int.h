/* cf_schema_int: internals of the schema module shared by cf_schema.c,
 * cf_schema_json.c and mp_reader.c.  Not a public interface.
 *
 * cf_mp_reader is a small bounded cursor over msgpack bytes.  It never
 * allocates and never reads past `end`; every declared length or element
 * count is checked against the bytes that remain and against the
 * cf_decode_limits before the caller can act on it.  We do not use
 * msgpack_unpack on wire bytes: msgpack-c 4.0.0 reserves memory for declared
 * counts before checking them (see /work/shared/NOTES.md).
 */
#ifndef CF_SCHEMA_INT_H
#define CF_SCHEMA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <msgpack.h>

#include "cf_schema.h"

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

/* Validation shared by the msgpack and JSON forms (and run by encoders). */
int cf_request_check(const cf_request *req, cf_error *err);
int cf_result_check(const cf_result *res, cf_error *err);
/* Validates an input/output value that sits at depth 2 of a message. */
int cf_value_check(const cf_bytes *v, const char *field, cf_error *err);

/* base64 (RFC 4648, padded).  decode rejects bad characters and bad
 * padding; whitespace is not allowed. */
char *cf_base64_encode(const uint8_t *data, size_t len, size_t *outlen);
int cf_base64_decode(const char *s, size_t slen, size_t max, cf_bytes *out, cf_error *err);

/* ---- helpers shared by the codecs (cf_schema_util.c) ---- */

/* Index of the name s[0..len) in table[first..n), or -1. */
int cf_name_index(const char *const *table, size_t first, size_t n, const uint8_t *s, size_t len);
/* "parent.key", or "key" at the top level (parent ""); truncated to size. */
void cf_field_path(char *buf, size_t size, const char *parent, const char *key);
/* A str value, zero-copy, capped by lim->max_str_bytes; errors name path
 * ("truncated message", "expected <what>"). */
int cf_mp_read_str_field(cf_mp_reader *r, const char *path, const char *what, const uint8_t **s, size_t *len,
                         cf_error *err);
/* A str value copied into *out (replacing it): valid UTF-8, no NUL bytes. */
int cf_mp_read_cstr(cf_mp_reader *r, const char *path, char **out, cf_error *err);
/* First decode pass over a top-level message: one well-formed map within
 * lim, nothing after it, "v" == CF_SCHEMA_VERSION.  Allocates nothing.
 * When a value fails to skip, its key is echoed only if it is in known
 * (or, with known NULL, if it is short printable ASCII). */
int cf_msg_prescan(const void *buf, size_t len, const cf_decode_limits *lim, const char *const *known, size_t nknown,
                   cf_error *err);
/* JSON form: a string member value (no NUL, within the default limits)
 * copied into *out; and the optional "v" member. */
int cf_json_str_of(const json_t *v, const char *path, char **out, cf_error *err);
int cf_json_version_check(const json_t *o, cf_error *err);

/* Packs one string key and string value of a map; *rc = -1 on failure
 * (encoders check it once at the end). */
void cf_mp_pack_kv_str(msgpack_packer *pk, int *rc, const char *k, const char *v);

/* Both passes over a flat top-level message (an event, a cancel, a chunk):
 * cf_msg_prescan, then each key of the map once: a known one (its index in
 * keys, at most 32) handed to field with obj, an unknown one skipped
 * (forward compatibility), a repeated one refused.  *seen (may be NULL)
 * gets a bit per key present.  The caller clears obj on failure. */
typedef int (*cf_mp_field_fn)(cf_mp_reader *r, void *obj, int idx, cf_error *err);
int cf_mp_decode_flat(const void *buf, size_t len, const cf_decode_limits *lim, const char *const *keys, int nkeys,
                      cf_mp_field_fn field, void *obj, unsigned *seen, cf_error *err);

#endif
