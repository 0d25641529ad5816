/* cf_control: control messages, wire schema v1 ("Control messages" in
 * SPEC.md).  Today one type: a cancel, asking the fleet to stop (or never
 * start) the request with a given id.  Published to the control topic of
 * the request topic the request went to (<request topic> + the worker's
 * cancel-topic-suffix, ".cancel" by default), keyed by the request id: a
 * cancel on a topic can only ever affect requests of its request topic, so
 * the broker's ACLs that decide who may write a request topic decide who
 * may cancel its requests.  Every worker reads every partition of it.
 *
 * Ownership: the strings inside a cf_cancel are owned by it and released by
 * cf_cancel_clear.  Structs start zeroed.
 */
#ifndef CF_CONTROL_H
#define CF_CONTROL_H

#include <stdint.h>

#include "cf_error.h"
#include "cf_schema.h"

#define CF_CANCEL_REASON_MAX 256 /* bytes of the reason */
#define CF_CANCEL_TOPIC_SUFFIX ".cancel"

typedef struct cf_cancel {
    char *id;           /* required: the request id to cancel (cf_id_valid) */
    char *reason;       /* optional: why, free text; NULL = none */
    int64_t created_us; /* optional: epoch microseconds, 0 = unknown */
} cf_cancel;

/* The rules of SPEC.md "Control messages" (run by the encoder and decoder). */
int cf_cancel_check(const cf_cancel *c, cf_error *err);
/* Canonical msgpack (fixed key order, smallest forms); out->data malloc'd. */
int cf_cancel_encode(const cf_cancel *c, cf_bytes *out, cf_error *err);
/* Hostile bytes in, a checked cancel out (or err naming the field).
 * limits NULL = the defaults.  Unknown keys are ignored; "v" other than 1
 * and "type" other than "cancel" are refused. */
int cf_cancel_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_cancel *out, cf_error *err);
void cf_cancel_clear(cf_cancel *c); /* NULL-safe; leaves c zeroed */

#endif
