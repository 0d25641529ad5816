/* cf_schema_util: decode helpers shared by cf_schema.c, cf_event.c and
 * cf_schema_json.c, so that the request, result and event codecs check the
 * same things with the same error texts.  Declared in cf_schema_int.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema_int.h"
#include "cf_util.h"

int cf_name_index(const char *const *table, size_t first, size_t n, const uint8_t *s, size_t len)
{
    for (size_t i = first; i < n; i++)
        if (strlen(table[i]) == len && memcmp(table[i], s, len) == 0)
            return (int)i;
    return -1;
}

void cf_field_path(char *buf, size_t size, const char *parent, const char *key)
{
    if (parent[0])
        snprintf(buf, size, "%s.%s", parent, key);
    else
        snprintf(buf, size, "%s", key);
}

int cf_mp_read_str_field(cf_mp_reader *r, const char *path, const char *what, const uint8_t **s, size_t *len,
                         cf_error *err)
{
    cf_mp_kind k = cf_mp_peek(r);
    if (k == CF_MP_END)
        return cf_error_set(err, CF_E_INVALID, "%s: truncated message", path);
    if (k != CF_MP_STR)
        return cf_error_set(err, CF_E_INVALID, "%s: expected %s", path, what);
    if (cf_mp_read_str(r, r->lim->max_str_bytes, s, len, err) < 0)
        return cf_error_wrap(err, "%s", path);
    return 0;
}

int cf_mp_read_cstr(cf_mp_reader *r, const char *path, char **out, cf_error *err)
{
    const uint8_t *s;
    size_t len;
    if (cf_mp_read_str_field(r, path, "string", &s, &len, err) < 0)
        return -1;
    /* char * fields must be usable as C strings and as JSON strings. */
    if (memchr(s, 0, len) || !cf_utf8_valid(s, len))
        return cf_error_set(err, CF_E_INVALID, "%s: string is not valid UTF-8 without NUL bytes", path);
    char *c = cf_strndup((const char *)s, len);
    if (!c)
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", path);
    free(*out);
    *out = c;
    return 0;
}

/* Names the field whose value failed to skip.  The key bytes are hostile:
 * with a table, only one of our own names is echoed; without, the key is
 * echoed only when it is short printable ASCII. */
static int wrap_skipped(const uint8_t *k, size_t klen, const char *const *known, size_t nknown, cf_error *err)
{
    if (known) {
        int j = cf_name_index(known, 0, nknown, k, klen);
        return cf_error_wrap(err, "%s", j >= 0 ? known[j] : "(field)");
    }
    char key[48];
    size_t kl = klen < sizeof(key) - 1 ? klen : sizeof(key) - 1;
    bool printable = cf_id_valid((const char *)k, kl);
    if (printable) {
        memcpy(key, k, kl);
        key[kl] = '\0';
    }
    return cf_error_wrap(err, "%s", printable ? key : "(field)");
}

int cf_msg_prescan(const void *buf, size_t len, const cf_decode_limits *lim, const char *const *known, size_t nknown,
                   cf_error *err)
{
    if (!buf || len == 0)
        return cf_error_set(err, CF_E_INVALID, "empty message");
    if (len > lim->max_total_bytes)
        return cf_error_set(err, CF_E_LIMIT, "message of %zu bytes exceeds the limit of %zu", len,
                            lim->max_total_bytes);
    cf_mp_reader r;
    cf_mp_reader_init(&r, buf, len, lim);
    if (cf_mp_peek(&r) != CF_MP_MAP)
        return cf_error_set(err, CF_E_INVALID, "message: expected a msgpack map, got %s",
                            cf_mp_kind_name(cf_mp_peek(&r)));
    uint32_t n;
    if (cf_mp_read_map(&r, 1, &n, err) < 0)
        return cf_error_wrap(err, "message");
    bool have_v = false;
    int64_t v = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        size_t klen;
        if (cf_mp_read_str_field(&r, "message", "string keys", &k, &klen, err) < 0)
            return -1;
        if (klen == 1 && k[0] == 'v') {
            cf_mp_kind kind = cf_mp_peek(&r);
            if (have_v)
                return cf_error_set(err, CF_E_INVALID, "v: duplicate field");
            if (kind == CF_MP_END)
                return cf_error_set(err, CF_E_INVALID, "v: truncated message");
            if ((kind != CF_MP_UINT && kind != CF_MP_INT) || cf_mp_read_int(&r, &v, NULL) < 0)
                return cf_error_set(err, CF_E_INVALID, "v: expected integer");
            have_v = true;
            continue;
        }
        if (cf_mp_skip(&r, 2, err) < 0)
            return wrap_skipped(k, klen, known, nknown, err);
    }
    if (r.p != r.end)
        return cf_error_set(err, CF_E_INVALID, "%zu trailing bytes after the message", cf_mp_remaining(&r));
    if (!have_v)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"v\"");
    if (v != CF_SCHEMA_VERSION)
        return cf_error_set(err, CF_E_UNSUPPORTED, "unsupported schema version %lld", (long long)v);
    return 0;
}

int cf_json_str_of(const json_t *v, const char *path, char **out, cf_error *err)
{
    if (!json_is_string(v))
        return cf_error_set(err, CF_E_INVALID, "%s: expected string", path);
    size_t len = json_string_length(v);
    if (len > cf_decode_limits_default.max_str_bytes)
        return cf_error_set(err, CF_E_LIMIT, "%s: string of %zu bytes exceeds the limit of %zu", path, len,
                            cf_decode_limits_default.max_str_bytes);
    if (strlen(json_string_value(v)) != len)
        return cf_error_set(err, CF_E_INVALID, "%s: string contains a NUL byte", path);
    if (cf_str_set(out, json_string_value(v)) < 0)
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", path);
    return 0;
}

int cf_json_version_check(const json_t *o, cf_error *err)
{
    const json_t *v = json_object_get(o, "v");
    if (!v)
        return 0; /* the JSON form defaults to the current version */
    if (!json_is_integer(v))
        return cf_error_set(err, CF_E_INVALID, "v: expected integer");
    if (json_integer_value(v) != CF_SCHEMA_VERSION)
        return cf_error_set(err, CF_E_UNSUPPORTED, "unsupported schema version %lld",
                            (long long)json_integer_value(v));
    return 0;
}

void cf_mp_pack_kv_str(msgpack_packer *pk, int *rc, const char *k, const char *v)
{
    if (msgpack_pack_str_with_body(pk, k, strlen(k)) || msgpack_pack_str_with_body(pk, v, strlen(v)))
        *rc = -1;
}

int cf_mp_decode_flat(const void *buf, size_t len, const cf_decode_limits *lim, const char *const *keys, int nkeys,
                      cf_mp_field_fn field, void *obj, unsigned *seen, cf_error *err)
{
    if (cf_msg_prescan(buf, len, lim, keys, (size_t)nkeys, err) < 0)
        return -1;
    cf_mp_reader r;
    cf_mp_reader_init(&r, buf, len, lim);
    uint32_t n;
    if (cf_mp_read_map(&r, 1, &n, err) < 0)
        return -1;
    unsigned got = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        size_t klen;
        if (cf_mp_read_str(&r, lim->max_str_bytes, &k, &klen, err) < 0)
            return -1;
        int idx = cf_name_index(keys, 0, (size_t)nkeys, k, klen);
        if (idx < 0) { /* forward compatibility: newer minor versions add fields */
            if (cf_mp_skip(&r, 2, err) < 0)
                return -1;
            continue;
        }
        if (got & (1u << idx))
            return cf_error_set(err, CF_E_INVALID, "%s: duplicate field", keys[idx]);
        got |= 1u << idx;
        if (field(&r, obj, idx, err) < 0)
            return -1;
    }
    if (seen)
        *seen = got;
    return 0;
}
