/* cf_control: control message codec (msgpack).  Normative description:
 * SPEC.md, "Control messages".  Same discipline as cf_event.c: a first pass
 * over the hostile bytes checks structure and version without allocating,
 * a second decodes with every field checked. */
#include "cf_control.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema_int.h"
#include "cf_util.h"

int cf_cancel_check(const cf_cancel *c, cf_error *err)
{
    if (!c->id)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"id\"");
    if (!cf_id_valid(c->id, strlen(c->id)))
        return cf_error_set(err, CF_E_INVALID, "id: must be 1..%d bytes of printable ASCII without space", CF_ID_MAX);
    if (c->reason) {
        size_t len = strlen(c->reason);
        if (len > CF_CANCEL_REASON_MAX)
            return cf_error_set(err, CF_E_INVALID, "reason: at most %d bytes", CF_CANCEL_REASON_MAX);
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)c->reason[i] < 0x20 || c->reason[i] == 0x7f)
                return cf_error_set(err, CF_E_INVALID, "reason: control characters are not allowed");
        if (!cf_utf8_valid((const uint8_t *)c->reason, len))
            return cf_error_set(err, CF_E_INVALID, "reason: not valid UTF-8");
    }
    if (c->created_us < 0)
        return cf_error_set(err, CF_E_INVALID, "created_us: must not be negative");
    return 0;
}

void cf_cancel_clear(cf_cancel *c)
{
    if (!c)
        return;
    free(c->id);
    free(c->reason);
    memset(c, 0, sizeof(*c));
}

int cf_cancel_encode(const cf_cancel *c, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    if (cf_cancel_check(c, err) < 0)
        return cf_error_wrap(err, "cannot encode cancel");
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = 0;
    size_t n = 3 + (c->reason && c->reason[0] ? 1 : 0) + (c->created_us > 0 ? 1 : 0);
    if (msgpack_pack_map(&pk, n))
        rc = -1;
    if (msgpack_pack_str_with_body(&pk, "v", 1) || msgpack_pack_int64(&pk, CF_SCHEMA_VERSION))
        rc = -1;
    cf_mp_pack_kv_str(&pk, &rc, "type", "cancel");
    cf_mp_pack_kv_str(&pk, &rc, "id", c->id);
    if (c->reason && c->reason[0])
        cf_mp_pack_kv_str(&pk, &rc, "reason", c->reason);
    if (c->created_us > 0 &&
        (msgpack_pack_str_with_body(&pk, "created_us", 10) || msgpack_pack_int64(&pk, c->created_us)))
        rc = -1;
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return cf_error_set(err, CF_E_NOMEM, "out of memory encoding a cancel");
    }
    out->len = sb.size;
    out->data = (uint8_t *)msgpack_sbuffer_release(&sb);
    return 0;
}

enum { CT_V, CT_TYPE, CT_ID, CT_REASON, CT_CREATED, CT__COUNT };
static const char *const ct_keys[CT__COUNT] = {"v", "type", "id", "reason", "created_us"};

typedef struct cancel_dec {
    cf_cancel *c;
    bool typed; /* a "type" that is not nil was read */
} cancel_dec;

static int dec_field(cf_mp_reader *r, void *obj, int idx, cf_error *err)
{
    cancel_dec *d = obj;
    cf_cancel *c = d->c;
    const char *f = ct_keys[idx];
    if (idx == CT_V)
        return cf_mp_skip(r, 2, err); /* checked by the prescan */
    if (cf_mp_peek(r) == CF_MP_NIL) { /* nil = absent */
        r->p++;
        return 0;
    }
    switch (idx) {
    case CT_TYPE: {
        const uint8_t *s;
        size_t len;
        if (cf_mp_read_str_field(r, f, "string", &s, &len, err) < 0)
            return -1;
        /* The value is hostile: it is not echoed. */
        if (len != 6 || memcmp(s, "cancel", 6) != 0)
            return cf_error_set(err, CF_E_INVALID, "type: unknown control message type (expected \"cancel\")");
        d->typed = true;
        return 0;
    }
    case CT_ID: return cf_mp_read_cstr(r, f, &c->id, err);
    case CT_REASON: return cf_mp_read_cstr(r, f, &c->reason, err);
    default: {
        cf_mp_kind k = cf_mp_peek(r);
        int64_t v;
        if ((k != CF_MP_UINT && k != CF_MP_INT) || cf_mp_read_int(r, &v, NULL) < 0 || v < 0)
            return cf_error_set(err, CF_E_INVALID, "created_us: %s",
                                k == CF_MP_END ? "truncated message" : "expected a non-negative integer");
        c->created_us = v;
        return 0;
    }
    }
}

int cf_cancel_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_cancel *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    const cf_decode_limits *lim = limits ? limits : &cf_decode_limits_default;
    cancel_dec d = {.c = out};
    if (cf_mp_decode_flat(buf, len, lim, ct_keys, CT__COUNT, dec_field, &d, NULL, err) < 0)
        goto fail;
    if (!d.typed) {
        cf_error_set(err, CF_E_INVALID, "missing required field \"type\"");
        goto fail;
    }
    if (cf_cancel_check(out, err) < 0)
        goto fail;
    return 0;
fail:
    cf_cancel_clear(out);
    return -1;
}
