/* cf_event: collaboration event codec (msgpack and JSON).  Normative
 * description: SPEC.md, "Events".
 *
 * Same discipline as cf_schema.c: decoding never calls msgpack_unpack; the
 * bounded reader (mp_reader.c) checks the whole structure and the version
 * in a first pass that allocates nothing, then a second pass decodes.
 * Encoding writes a fixed key order with the smallest forms, so equal
 * events give byte-identical messages.
 */
#include "cf_event.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema_int.h"
#include "cf_schema_json.h"
#include "cf_util.h"

static const char *const kind_names[CF_EVENT_KIND__COUNT] = {
    [CF_EVENT_ANY] = "any",
    [CF_EVENT_NEED_WORK] = "need_work",
    [CF_EVENT_WORK_CLAIMED] = "work_claimed",
    [CF_EVENT_WORK_PUBLISHED] = "work_published",
    [CF_EVENT_FEEDBACK_REQUESTED] = "feedback_requested",
    [CF_EVENT_FEEDBACK_PROVIDED] = "feedback_provided",
    [CF_EVENT_BLOCKED] = "blocked",
    [CF_EVENT_COMPLETED] = "completed",
};

/* Justified line by line in docs/EVENTS.md. */
static const char *const a2a_states[CF_EVENT_KIND__COUNT] = {
    [CF_EVENT_ANY] = "unknown",
    [CF_EVENT_NEED_WORK] = "submitted",
    [CF_EVENT_WORK_CLAIMED] = "working",
    [CF_EVENT_WORK_PUBLISHED] = "working",
    [CF_EVENT_FEEDBACK_REQUESTED] = "input-required",
    [CF_EVENT_FEEDBACK_PROVIDED] = "working",
    [CF_EVENT_BLOCKED] = "input-required",
    [CF_EVENT_COMPLETED] = "completed",
};

#define KIND_CHOICES "need_work, work_claimed, work_published, feedback_requested, feedback_provided, blocked, completed"

const char *cf_event_kind_name(cf_event_kind k)
{
    return (unsigned)k < CF_EVENT_KIND__COUNT ? kind_names[k] : "unknown";
}

static int kind_index(const uint8_t *s, size_t len)
{
    return cf_name_index(kind_names, CF_EVENT_ANY + 1, CF_EVENT_KIND__COUNT, s, len);
}

int cf_event_kind_parse(const char *name, cf_event_kind *out)
{
    int i = name ? kind_index((const uint8_t *)name, strlen(name)) : -1;
    if (i < 0)
        return -1;
    *out = (cf_event_kind)i;
    return 0;
}

const char *cf_event_kind_a2a_state(cf_event_kind k)
{
    return (unsigned)k < CF_EVENT_KIND__COUNT ? a2a_states[k] : "unknown";
}

bool cf_event_workspace_valid(const char *s, size_t len)
{
    return cf_name_valid(s, len, CF_EVENT_WORKSPACE_MAX);
}

/* topic, producer, consumer: shown to humans by tails, so no control bytes. */
static int text_check(const char *s, const char *field, cf_error *err)
{
    size_t len = strlen(s);
    if (len == 0 || len > CF_EVENT_TEXT_MAX)
        return cf_error_set(err, CF_E_INVALID, "%s: must be 1..%d bytes", field, CF_EVENT_TEXT_MAX);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return cf_error_set(err, CF_E_INVALID, "%s: control characters are not allowed", field);
    if (!cf_utf8_valid((const uint8_t *)s, len))
        return cf_error_set(err, CF_E_INVALID, "%s: not valid UTF-8", field);
    return 0;
}

static int check_event(const cf_event *ev, bool check_payload, cf_error *err)
{
    if (!ev->id)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"id\"");
    if (!cf_id_valid(ev->id, strlen(ev->id)))
        return cf_error_set(err, CF_E_INVALID, "id: must be 1..%d printable ASCII characters without spaces",
                            CF_ID_MAX);
    if (!ev->workspace)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"workspace\"");
    if (!cf_event_workspace_valid(ev->workspace, strlen(ev->workspace)))
        return cf_error_set(err, CF_E_INVALID, "workspace: must be 1..%d characters of [A-Za-z0-9._-]",
                            CF_EVENT_WORKSPACE_MAX);
    if (!ev->correlation_id)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"correlation_id\"");
    if (!cf_id_valid(ev->correlation_id, strlen(ev->correlation_id)))
        return cf_error_set(err, CF_E_INVALID,
                            "correlation_id: must be 1..%d printable ASCII characters without spaces", CF_ID_MAX);
    if (!ev->topic)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"topic\"");
    if (text_check(ev->topic, "topic", err) < 0)
        return -1;
    if (!ev->producer)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"producer\"");
    if (text_check(ev->producer, "producer", err) < 0)
        return -1;
    if (ev->consumer && text_check(ev->consumer, "consumer", err) < 0)
        return -1;
    if (ev->kind <= CF_EVENT_ANY || ev->kind >= CF_EVENT_KIND__COUNT)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"kind\"");
    if (ev->payload.len > CF_EVENT_PAYLOAD_MAX)
        return cf_error_set(err, CF_E_LIMIT, "payload: %zu bytes exceed the limit of %u", ev->payload.len,
                            CF_EVENT_PAYLOAD_MAX);
    if (check_payload && cf_value_check(&ev->payload, "payload", err) < 0)
        return -1;
    if (ev->timestamp_us <= 0)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"timestamp_us\" (positive epoch microseconds)");
    return 0;
}

int cf_event_check(const cf_event *ev, cf_error *err)
{
    return check_event(ev, true, err);
}

void cf_event_clear(cf_event *ev)
{
    if (!ev)
        return;
    free(ev->id);
    free(ev->workspace);
    free(ev->correlation_id);
    free(ev->topic);
    free(ev->producer);
    free(ev->consumer);
    free(ev->payload.data);
    memset(ev, 0, sizeof(*ev));
}

int cf_event_copy(cf_event *dst, const cf_event *src, cf_error *err)
{
    cf_event_clear(dst);
    if (cf_str_set(&dst->id, src->id) < 0 || cf_str_set(&dst->workspace, src->workspace) < 0 ||
        cf_str_set(&dst->correlation_id, src->correlation_id) < 0 || cf_str_set(&dst->topic, src->topic) < 0 ||
        cf_str_set(&dst->producer, src->producer) < 0 || cf_str_set(&dst->consumer, src->consumer) < 0 ||
        (src->payload.len && cf_bytes_set(&dst->payload, src->payload.data, src->payload.len) < 0)) {
        cf_event_clear(dst);
        return cf_error_set(err, CF_E_NOMEM, "event copy: out of memory");
    }
    dst->kind = src->kind;
    dst->timestamp_us = src->timestamp_us;
    return 0;
}

/* ---- encoder ----------------------------------------------------------- */

int cf_event_encode(const cf_event *ev, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    if (cf_event_check(ev, err) < 0)
        return cf_error_wrap(err, "cannot encode event");
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = 0;
    size_t n = 8 + (ev->consumer ? 1 : 0) + (ev->payload.len ? 1 : 0);
    if (msgpack_pack_map(&pk, n))
        rc = -1;
    if (msgpack_pack_str_with_body(&pk, "v", 1) || msgpack_pack_int64(&pk, CF_SCHEMA_VERSION))
        rc = -1;
    cf_mp_pack_kv_str(&pk, &rc, "id", ev->id);
    cf_mp_pack_kv_str(&pk, &rc, "workspace", ev->workspace);
    cf_mp_pack_kv_str(&pk, &rc, "correlation_id", ev->correlation_id);
    cf_mp_pack_kv_str(&pk, &rc, "topic", ev->topic);
    cf_mp_pack_kv_str(&pk, &rc, "producer", ev->producer);
    if (ev->consumer)
        cf_mp_pack_kv_str(&pk, &rc, "consumer", ev->consumer);
    cf_mp_pack_kv_str(&pk, &rc, "kind", cf_event_kind_name(ev->kind));
    if (ev->payload.len &&
        (msgpack_pack_str_with_body(&pk, "payload", 7) ||
         msgpack_sbuffer_write(&sb, (const char *)ev->payload.data, ev->payload.len)))
        rc = -1;
    if (msgpack_pack_str_with_body(&pk, "timestamp_us", 12) || msgpack_pack_int64(&pk, ev->timestamp_us))
        rc = -1;
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return cf_error_set(err, CF_E_NOMEM, "out of memory encoding an event");
    }
    out->len = sb.size;
    out->data = (uint8_t *)msgpack_sbuffer_release(&sb);
    return 0;
}

/* ---- decoder ----------------------------------------------------------- */

enum { EV_V, EV_ID, EV_WORKSPACE, EV_CORR, EV_TOPIC, EV_PRODUCER, EV_CONSUMER, EV_KIND, EV_PAYLOAD, EV_TS, EV__COUNT };
static const char *const ev_keys[EV__COUNT] = {
    "v", "id", "workspace", "correlation_id", "topic", "producer", "consumer", "kind", "payload", "timestamp_us",
};

static int dec_field(cf_mp_reader *r, void *obj, int idx, cf_error *err)
{
    cf_event *ev = obj;
    const char *f = ev_keys[idx];
    if (idx == EV_V)
        return cf_mp_skip(r, 2, err); /* checked by the prescan */
    if (idx == EV_PAYLOAD) {
        /* nil is a real payload value, not "absent". */
        const uint8_t *start = r->p;
        if (cf_mp_skip(r, 2, err) < 0)
            return cf_error_wrap(err, "payload");
        size_t n = (size_t)(r->p - start);
        if (n > CF_EVENT_PAYLOAD_MAX)
            return cf_error_set(err, CF_E_LIMIT, "payload: %zu bytes exceed the limit of %u", n,
                                CF_EVENT_PAYLOAD_MAX);
        if (cf_bytes_set(&ev->payload, start, n) < 0)
            return cf_error_set(err, CF_E_NOMEM, "payload: out of memory");
        return 0;
    }
    if (cf_mp_peek(r) == CF_MP_NIL) { /* nil = absent for every other field */
        r->p++;
        return 0;
    }
    switch (idx) {
    case EV_ID: return cf_mp_read_cstr(r, f, &ev->id, err);
    case EV_WORKSPACE: return cf_mp_read_cstr(r, f, &ev->workspace, err);
    case EV_CORR: return cf_mp_read_cstr(r, f, &ev->correlation_id, err);
    case EV_TOPIC: return cf_mp_read_cstr(r, f, &ev->topic, err);
    case EV_PRODUCER: return cf_mp_read_cstr(r, f, &ev->producer, err);
    case EV_CONSUMER: return cf_mp_read_cstr(r, f, &ev->consumer, err);
    case EV_KIND: {
        const uint8_t *s;
        size_t len;
        if (cf_mp_read_str_field(r, "kind", "string", &s, &len, err) < 0)
            return -1;
        int i = kind_index(s, len);
        /* The value is hostile: it is not echoed. */
        if (i < 0)
            return cf_error_set(err, CF_E_INVALID, "kind: unknown value (expected one of " KIND_CHOICES ")");
        ev->kind = (cf_event_kind)i;
        return 0;
    }
    default: {
        cf_mp_kind k = cf_mp_peek(r);
        int64_t v;
        if ((k != CF_MP_UINT && k != CF_MP_INT) || cf_mp_read_int(r, &v, NULL) < 0 || v <= 0)
            return cf_error_set(err, CF_E_INVALID, "timestamp_us: %s",
                                k == CF_MP_END ? "truncated message" : "expected positive integer");
        ev->timestamp_us = v;
        return 0;
    }
    }
}

int cf_event_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_event *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    const cf_decode_limits *lim = limits ? limits : &cf_decode_limits_default;
    /* Pass 1 (the prescan) checks the version before any field type
     * (SPEC.md section 5). */
    if (cf_mp_decode_flat(buf, len, lim, ev_keys, EV__COUNT, dec_field, out, NULL, err) < 0)
        goto fail;
    /* The payload was validated by the skip above under the caller's limits. */
    if (check_event(out, false, err) < 0)
        goto fail;
    return 0;
fail:
    cf_event_clear(out);
    return -1;
}

/* ---- JSON -------------------------------------------------------------- */

static void jset(json_t *o, const char *k, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(o, k, v) < 0)
        *ok = false;
}

json_t *cf_event_to_json(const cf_event *ev)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = true;
    jset(o, "v", json_integer(CF_SCHEMA_VERSION), &ok);
    if (ev->id)
        jset(o, "id", json_string(ev->id), &ok);
    if (ev->workspace)
        jset(o, "workspace", json_string(ev->workspace), &ok);
    if (ev->correlation_id)
        jset(o, "correlation_id", json_string(ev->correlation_id), &ok);
    if (ev->topic)
        jset(o, "topic", json_string(ev->topic), &ok);
    if (ev->producer)
        jset(o, "producer", json_string(ev->producer), &ok);
    if (ev->consumer)
        jset(o, "consumer", json_string(ev->consumer), &ok);
    if (ev->kind > CF_EVENT_ANY && ev->kind < CF_EVENT_KIND__COUNT)
        jset(o, "kind", json_string(cf_event_kind_name(ev->kind)), &ok);
    if (ev->payload.len) {
        json_t *j = cf_msgpack_to_json(ev->payload.data, ev->payload.len, NULL);
        if (j) {
            jset(o, "payload", j, &ok);
        } else {
            /* No JSON equivalent (ext, non-string keys, ...): raw msgpack. */
            char *b = cf_base64_encode(ev->payload.data, ev->payload.len, NULL);
            jset(o, "payload_msgpack", b ? json_pack("{s:s}", "base64", b) : NULL, &ok);
            free(b);
        }
    }
    if (ev->timestamp_us)
        jset(o, "timestamp_us", json_integer((json_int_t)ev->timestamp_us), &ok);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int jstr(const json_t *o, const char *k, char **out, cf_error *err)
{
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    return cf_json_str_of(v, k, out, err);
}

static int event_from_json(const json_t *o, cf_event *ev, cf_error *err)
{
    if (!json_is_object(o))
        return cf_error_set(err, CF_E_INVALID, "event: expected a JSON object");
    if (cf_json_version_check(o, err) < 0)
        return -1;
    if (jstr(o, "id", &ev->id, err) < 0 || jstr(o, "workspace", &ev->workspace, err) < 0 ||
        jstr(o, "correlation_id", &ev->correlation_id, err) < 0 || jstr(o, "topic", &ev->topic, err) < 0 ||
        jstr(o, "producer", &ev->producer, err) < 0 || jstr(o, "consumer", &ev->consumer, err) < 0)
        return -1;
    const json_t *k = json_object_get(o, "kind");
    if (k && !json_is_null(k)) {
        if (!json_is_string(k))
            return cf_error_set(err, CF_E_INVALID, "kind: expected string");
        if (cf_event_kind_parse(json_string_value(k), &ev->kind) < 0)
            return cf_error_set(err, CF_E_INVALID, "kind: unknown value (expected one of " KIND_CHOICES ")");
    }
    const json_t *p = json_object_get(o, "payload"); /* null is a value here */
    const json_t *raw = json_object_get(o, "payload_msgpack");
    if (json_is_null(raw))
        raw = NULL;
    if (p && raw)
        return cf_error_set(err, CF_E_INVALID, "payload: give either payload or payload_msgpack");
    if (p && cf_json_to_msgpack(p, &ev->payload, err) < 0)
        return cf_error_wrap(err, "payload");
    if (raw) {
        const json_t *b = json_is_object(raw) && json_object_size(raw) == 1 ? json_object_get(raw, "base64") : NULL;
        if (!json_is_string(b))
            return cf_error_set(err, CF_E_INVALID, "payload_msgpack: expected {\"base64\": string}");
        if (cf_base64_decode(json_string_value(b), json_string_length(b), CF_EVENT_PAYLOAD_MAX, &ev->payload, err) <
            0)
            return cf_error_wrap(err, "payload_msgpack");
        if (ev->payload.len == 0)
            return cf_error_set(err, CF_E_INVALID, "payload_msgpack: empty");
    }
    const json_t *ts = json_object_get(o, "timestamp_us");
    if (ts && !json_is_null(ts)) {
        if (!json_is_integer(ts) || json_integer_value(ts) <= 0)
            return cf_error_set(err, CF_E_INVALID, "timestamp_us: expected positive integer");
        ev->timestamp_us = (int64_t)json_integer_value(ts);
    }
    return cf_event_check(ev, err);
}

int cf_event_from_json(const json_t *obj, cf_event *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    if (event_from_json(obj, out, err) < 0) {
        cf_event_clear(out);
        return -1;
    }
    return 0;
}
