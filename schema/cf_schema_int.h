/* cf_schema_int: internals of the schema module shared by its codecs
 * (cf_schema.c, cf_schema_json.c, cf_event.c, ...).  Private to schema/:
 * what other folders need is in cf_msgpack.h. */
#ifndef CF_SCHEMA_INT_H
#define CF_SCHEMA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <msgpack.h>

#include "cf_msgpack.h"
#include "cf_schema.h"

/* The workspace ops, as an error message lists them. */
#define CF_WS_OP_CHOICES "list, read, write, delete, grep, str_replace, insert, apply_patch"

/* Validation shared by the msgpack and JSON forms (and run by encoders). */
int cf_request_check(const cf_request *req, cf_error *err);
int cf_result_check(const cf_result *res, cf_error *err);
/* The same, with check_values false for decoders, whose first pass already
 * checked the values' structure. */
int cf_request_check_mode(const cf_request *req, bool check_values, cf_error *err);
int cf_result_check_mode(const cf_result *res, bool check_values, cf_error *err);
/* Validates an input/output value that sits at depth 2 of a message. */
int cf_value_check(const cf_bytes *v, const char *field, cf_error *err);


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
