/* cf_chunk: output chunk codec (msgpack).  Normative description: SPEC.md,
 * "Output chunks".  Same discipline as cf_control.c: a first pass over the
 * hostile bytes checks structure and version without allocating, a second
 * decodes with every field checked. */
#include "cf_chunk.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema_int.h"
#include "cf_util.h"

const char *cf_chunk_stream_name(cf_chunk_stream s)
{
    return s == CF_CHUNK_STDERR ? "stderr" : "stdout";
}

int cf_chunk_check(const cf_chunk *c, cf_error *err)
{
    if (!c->id)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"id\"");
    if (!cf_id_valid(c->id, strlen(c->id)))
        return cf_error_set(err, CF_E_INVALID, "id: must be 1..%d bytes of printable ASCII without space", CF_ID_MAX);
    if (!c->run)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"run\"");
    size_t rl = strlen(c->run);
    if (rl > CF_CHUNK_RUN_MAX || !cf_id_valid(c->run, rl))
        return cf_error_set(err, CF_E_INVALID, "run: must be 1..%d bytes of printable ASCII without space",
                            CF_CHUNK_RUN_MAX);
    if (c->at_us < 0)
        return cf_error_set(err, CF_E_INVALID, "at_us: must not be negative");
    if (c->kind == CF_CHUNK_START) {
        size_t wl = c->worker ? strlen(c->worker) : 0;
        if (c->worker && (wl > CF_CHUNK_WORKER_MAX || !cf_id_valid(c->worker, wl)))
            return cf_error_set(err, CF_E_INVALID, "worker: must be 1..%d bytes of printable ASCII without space",
                                CF_CHUNK_WORKER_MAX);
        if (c->seq || c->offset || c->data.len)
            return cf_error_set(err, CF_E_INVALID, "a start notice carries no seq, offset or data");
        return 0;
    }
    if (c->kind != CF_CHUNK_OUTPUT)
        return cf_error_set(err, CF_E_INVALID, "event: must be \"start\" when present");
    if (c->worker)
        return cf_error_set(err, CF_E_INVALID, "worker: only in a start notice");
    if (c->seq < 0)
        return cf_error_set(err, CF_E_INVALID, "seq: must not be negative");
    if (c->stream != CF_CHUNK_STDOUT && c->stream != CF_CHUNK_STDERR)
        return cf_error_set(err, CF_E_INVALID, "stream: must be \"stdout\" or \"stderr\"");
    if (c->offset < 0)
        return cf_error_set(err, CF_E_INVALID, "offset: must not be negative");
    if (c->data.len == 0 || !c->data.data)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"data\" (1..%d bytes)", CF_CHUNK_DATA_MAX);
    if (c->data.len > CF_CHUNK_DATA_MAX)
        return cf_error_set(err, CF_E_INVALID, "data: at most %d bytes", CF_CHUNK_DATA_MAX);
    return 0;
}

void cf_chunk_clear(cf_chunk *c)
{
    if (!c)
        return;
    free(c->id);
    free(c->run);
    free(c->data.data);
    free(c->worker);
    memset(c, 0, sizeof(*c));
}

static void pack_kv_int(msgpack_packer *pk, int *rc, const char *k, int64_t v)
{
    if (msgpack_pack_str_with_body(pk, k, strlen(k)) || msgpack_pack_int64(pk, v))
        *rc = -1;
}

int cf_chunk_encode(const cf_chunk *c, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    if (cf_chunk_check(c, err) < 0)
        return cf_error_wrap(err, "cannot encode chunk");
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = 0;
    bool start = c->kind == CF_CHUNK_START;
    if (msgpack_pack_map(&pk, (start ? 4 + (c->worker ? 1 : 0) : 7) + (c->at_us > 0 ? 1 : 0)))
        rc = -1;
    pack_kv_int(&pk, &rc, "v", CF_SCHEMA_VERSION);
    cf_mp_pack_kv_str(&pk, &rc, "id", c->id);
    cf_mp_pack_kv_str(&pk, &rc, "run", c->run);
    if (start) {
        cf_mp_pack_kv_str(&pk, &rc, "event", "start");
        if (c->worker)
            cf_mp_pack_kv_str(&pk, &rc, "worker", c->worker);
        goto tail;
    }
    pack_kv_int(&pk, &rc, "seq", c->seq);
    cf_mp_pack_kv_str(&pk, &rc, "stream", cf_chunk_stream_name(c->stream));
    pack_kv_int(&pk, &rc, "offset", c->offset);
    if (msgpack_pack_str_with_body(&pk, "data", 4) || msgpack_pack_bin_with_body(&pk, c->data.data, c->data.len))
        rc = -1;
tail:
    if (c->at_us > 0)
        pack_kv_int(&pk, &rc, "at_us", c->at_us);
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return cf_error_set(err, CF_E_NOMEM, "out of memory encoding a chunk");
    }
    out->len = sb.size;
    out->data = (uint8_t *)msgpack_sbuffer_release(&sb);
    return 0;
}

enum { CK_V, CK_ID, CK_RUN, CK_SEQ, CK_STREAM, CK_OFFSET, CK_DATA, CK_AT, CK_EVENT, CK_WORKER, CK__COUNT };
static const char *const ck_keys[CK__COUNT] = {"v",    "id",    "run",   "seq",    "stream",
                                               "offset", "data", "at_us", "event", "worker"};

static int dec_nonneg_field(cf_mp_reader *r, const char *f, int64_t *out, cf_error *err)
{
    cf_mp_kind k = cf_mp_peek(r);
    int64_t v;
    if ((k != CF_MP_UINT && k != CF_MP_INT) || cf_mp_read_int(r, &v, NULL) < 0 || v < 0)
        return cf_error_set(err, CF_E_INVALID, "%s: %s", f,
                            k == CF_MP_END ? "truncated message" : "expected a non-negative integer");
    *out = v;
    return 0;
}

static int dec_field(cf_mp_reader *r, void *obj, int idx, cf_error *err)
{
    cf_chunk *c = obj;
    const char *f = ck_keys[idx];
    if (idx == CK_V)
        return cf_mp_skip(r, 2, err); /* checked by the prescan */
    switch (idx) {
    case CK_ID: return cf_mp_read_cstr(r, f, &c->id, err);
    case CK_RUN: return cf_mp_read_cstr(r, f, &c->run, err);
    case CK_WORKER: return cf_mp_read_cstr(r, f, &c->worker, err);
    case CK_EVENT: {
        const uint8_t *s;
        size_t len;
        if (cf_mp_read_str_field(r, f, "string", &s, &len, err) < 0)
            return -1;
        if (!(len == 5 && memcmp(s, "start", 5) == 0))
            return cf_error_set(err, CF_E_INVALID, "event: must be \"start\" when present");
        c->kind = CF_CHUNK_START;
        return 0;
    }
    case CK_STREAM: {
        const uint8_t *s;
        size_t len;
        if (cf_mp_read_str_field(r, f, "string", &s, &len, err) < 0)
            return -1;
        if (len == 6 && memcmp(s, "stdout", 6) == 0)
            c->stream = CF_CHUNK_STDOUT;
        else if (len == 6 && memcmp(s, "stderr", 6) == 0)
            c->stream = CF_CHUNK_STDERR;
        else
            return cf_error_set(err, CF_E_INVALID, "stream: must be \"stdout\" or \"stderr\"");
        return 0;
    }
    case CK_DATA: {
        const uint8_t *s;
        size_t len;
        if (cf_mp_peek(r) != CF_MP_BIN)
            return cf_error_set(err, CF_E_INVALID, "data: expected bin");
        if (cf_mp_read_bin(r, CF_CHUNK_DATA_MAX, &s, &len, err) < 0)
            return cf_error_wrap(err, "data");
        c->data.data = malloc(len ? len : 1);
        if (!c->data.data)
            return cf_error_set(err, CF_E_NOMEM, "out of memory decoding a chunk");
        memcpy(c->data.data, s, len);
        c->data.len = len;
        return 0;
    }
    case CK_SEQ: return dec_nonneg_field(r, f, &c->seq, err);
    case CK_OFFSET: return dec_nonneg_field(r, f, &c->offset, err);
    default: return dec_nonneg_field(r, f, &c->at_us, err);
    }
}

int cf_chunk_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_chunk *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    const cf_decode_limits *lim = limits ? limits : &cf_decode_limits_default;
    unsigned seen = 0;
    if (cf_mp_decode_flat(buf, len, lim, ck_keys, CK__COUNT, dec_field, out, &seen, err) < 0)
        goto fail;
    if (out->kind == CF_CHUNK_START && (seen & (1u << CK_DATA))) {
        cf_error_set(err, CF_E_INVALID, "a start notice carries no \"data\"");
        goto fail;
    }
    const int required[] = {CK_SEQ, CK_STREAM, CK_OFFSET};
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        if (out->kind == CF_CHUNK_START ? (seen & (1u << required[i])) != 0 : !(seen & (1u << required[i]))) {
            if (out->kind == CF_CHUNK_START) {
                cf_error_set(err, CF_E_INVALID, "a start notice carries no \"%s\"", ck_keys[required[i]]);
                goto fail;
            }
            cf_error_set(err, CF_E_INVALID, "missing required field \"%s\"", ck_keys[required[i]]);
            goto fail;
        }
    if (cf_chunk_check(out, err) < 0)
        goto fail;
    return 0;
fail:
    cf_chunk_clear(out);
    return -1;
}
