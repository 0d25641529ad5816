/* cf_event: collaboration events, wire schema v1 ("Events" in SPEC.md).
 *
 * Agents working on one workspace tell each other what they need, claim,
 * publish and are blocked on.  An event is one msgpack map with string keys
 * and "v": 1, published to the events topic keyed by its workspace (so the
 * events of one workspace stay ordered on one partition).  The decoder
 * treats bytes as hostile, with the same bounded reader and limits as
 * requests and results.  The mapping of kinds to A2A task states is in
 * docs/EVENTS.md.
 *
 * Ownership: every pointer inside a cf_event is owned by it and released by
 * cf_event_clear.  Structs start zeroed.
 */
#ifndef CF_EVENT_H
#define CF_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cf_error.h"
#include "cf_schema.h"

#define CF_EVENT_WORKSPACE_MAX 128          /* bytes of a workspace id ([A-Za-z0-9._-]) */
#define CF_EVENT_TEXT_MAX 256               /* bytes of topic, producer, consumer */
#define CF_EVENT_PAYLOAD_MAX (512u * 1024u) /* bytes of the msgpack payload */

typedef enum cf_event_kind {
    CF_EVENT_ANY = 0, /* not a wire value: "any kind" in filters */
    CF_EVENT_NEED_WORK,
    CF_EVENT_WORK_CLAIMED,
    CF_EVENT_WORK_PUBLISHED,
    CF_EVENT_FEEDBACK_REQUESTED,
    CF_EVENT_FEEDBACK_PROVIDED,
    CF_EVENT_BLOCKED,
    CF_EVENT_COMPLETED,
    CF_EVENT_KIND__COUNT
} cf_event_kind;

typedef struct cf_event {
    char *id;             /* required: unique, printable ASCII (cf_id_valid) */
    char *workspace;      /* required: workspace id, also the Kafka key */
    char *correlation_id; /* required: ties a conversation together (cf_id_valid) */
    char *topic;          /* required: the collaboration subject, free text (not the Kafka topic) */
    char *producer;       /* required: who published it */
    char *consumer;       /* optional: whom it is addressed to; NULL = everyone */
    cf_event_kind kind;   /* required */
    cf_bytes payload;     /* optional: one msgpack value; len 0 = absent */
    int64_t timestamp_us; /* required: epoch microseconds, > 0 */
} cf_event;

/* "need_work", ... ; "any" for CF_EVENT_ANY, "unknown" out of range. */
const char *cf_event_kind_name(cf_event_kind k);
/* Wire names only ("any" is refused); -1 for unknown names. */
int cf_event_kind_parse(const char *name, cf_event_kind *out);
/* The A2A TaskState a task is in after an event of kind k
 * ("submitted", "working", "input-required", "completed"); docs/EVENTS.md. */
const char *cf_event_kind_a2a_state(cf_event_kind k);

/* Workspace id rule: 1..CF_EVENT_WORKSPACE_MAX bytes of [A-Za-z0-9._-]. */
bool cf_event_workspace_valid(const char *s, size_t len);

/* Every field rule of SPEC.md "Events" (run by the encoder and decoders). */
int cf_event_check(const cf_event *ev, cf_error *err);

/* *out is malloc'd (caller frees out->data).  Canonical: fixed key order,
 * smallest forms, absent fields omitted. */
int cf_event_encode(const cf_event *ev, cf_bytes *out, cf_error *err);

/* On failure out is cleared and err names the field.  limits NULL = the
 * defaults.  Unknown keys are ignored; "v" other than 1 is refused. */
int cf_event_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_event *out, cf_error *err);

/* JSON form (SPEC.md): the same keys; payload is any JSON value, or
 * "payload_msgpack": {"base64": ...} when it has no JSON equivalent.
 * to_json returns a new object (NULL on ENOMEM); from_json borrows obj and
 * applies the same checks as the decoder ("v" may be omitted). */
json_t *cf_event_to_json(const cf_event *ev);
int cf_event_from_json(const json_t *obj, cf_event *out, cf_error *err);

/* Deep copy; dst is overwritten (cleared first). */
int cf_event_copy(cf_event *dst, const cf_event *src, cf_error *err);

void cf_event_clear(cf_event *ev); /* NULL-safe; leaves ev zeroed */

#endif
