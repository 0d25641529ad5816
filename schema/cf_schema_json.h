/* cf_schema_json: the JSON view of schema v1, for humans and the CLI
 * (batch files, --json output).  Mapping rules are in SPEC.md ("JSON form"):
 * same field names; byte fields are UTF-8 strings, or {"base64": "..."} for
 * arbitrary bytes; input/output are any JSON value (converted to/from msgpack).
 */
#ifndef CF_SCHEMA_JSON_H
#define CF_SCHEMA_JSON_H

#include <jansson.h>

#include "cf_chunk.h"
#include "cf_schema.h"

/* Builds a request from a JSON object (borrowed).  Same validation as the
 * msgpack decoder, except "v" may be omitted (defaults to 1). */
int cf_request_from_json(const json_t *obj, cf_request *out, cf_error *err);

/* Returns a new JSON object (caller json_decref's).  Bytes that are valid
 * UTF-8 become strings, others {"base64": ...}.  NULL on ENOMEM. */
json_t *cf_request_to_json(const cf_request *req);
json_t *cf_result_to_json(const cf_result *res);
/* An output chunk (SPEC.md "Output chunks") as JSON: data as text when it
 * is UTF-8 without NUL, else {"base64": ...}, like stdout in a result. */
json_t *cf_chunk_to_json(const cf_chunk *c);
int cf_result_from_json(const json_t *obj, cf_result *out, cf_error *err);

/* msgpack value <-> JSON value (maps with non-string keys are rejected). */
json_t *cf_msgpack_to_json(const void *buf, size_t len, cf_error *err);
int cf_json_to_msgpack(const json_t *value, cf_bytes *out, cf_error *err);

/* base64 (RFC 4648, padded), as the JSON view carries binary values.
 * decode rejects bad characters and bad padding; whitespace is not
 * allowed; more than max decoded bytes is an error. */
char *cf_base64_encode(const uint8_t *data, size_t len, size_t *outlen);
int cf_base64_decode(const char *s, size_t slen, size_t max, cf_bytes *out, cf_error *err);

#endif
