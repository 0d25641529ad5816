/* mp_reader: bounded, allocation-free msgpack cursor (see cf_schema_int.h). */
#include "cf_schema_int.h"

#include <string.h>

void cf_mp_reader_init(cf_mp_reader *r, const void *buf, size_t len, const cf_decode_limits *lim)
{
    r->p = buf;
    r->end = r->p + (buf ? len : 0);
    r->lim = lim ? lim : &cf_decode_limits_default;
}

static unsigned depth_limit(const cf_mp_reader *r)
{
    return r->lim->max_depth < CF_MP_DEPTH_HARD ? r->lim->max_depth : CF_MP_DEPTH_HARD;
}

cf_mp_kind cf_mp_peek(const cf_mp_reader *r)
{
    if (r->p >= r->end)
        return CF_MP_END;
    uint8_t b = *r->p;
    if (b <= 0x7f)
        return CF_MP_UINT;
    if (b <= 0x8f)
        return CF_MP_MAP;
    if (b <= 0x9f)
        return CF_MP_ARRAY;
    if (b <= 0xbf)
        return CF_MP_STR;
    if (b >= 0xe0)
        return CF_MP_INT;
    switch (b) {
    case 0xc0: return CF_MP_NIL;
    case 0xc2: case 0xc3: return CF_MP_BOOL;
    case 0xc4: case 0xc5: case 0xc6: return CF_MP_BIN;
    case 0xc7: case 0xc8: case 0xc9: return CF_MP_EXT;
    case 0xca: case 0xcb: return CF_MP_FLOAT;
    case 0xcc: case 0xcd: case 0xce: case 0xcf: return CF_MP_UINT;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: return CF_MP_INT;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: return CF_MP_EXT;
    case 0xd9: case 0xda: case 0xdb: return CF_MP_STR;
    case 0xdc: case 0xdd: return CF_MP_ARRAY;
    case 0xde: case 0xdf: return CF_MP_MAP;
    default: return CF_MP_INVALID; /* 0xc1 */
    }
}

const char *cf_mp_kind_name(cf_mp_kind k)
{
    static const char *const names[] = {
        [CF_MP_END] = "end of data", [CF_MP_NIL] = "nil",     [CF_MP_BOOL] = "bool",
        [CF_MP_UINT] = "integer",    [CF_MP_INT] = "integer", [CF_MP_FLOAT] = "float",
        [CF_MP_STR] = "str",         [CF_MP_BIN] = "bin",     [CF_MP_ARRAY] = "array",
        [CF_MP_MAP] = "map",         [CF_MP_EXT] = "ext",     [CF_MP_INVALID] = "invalid byte 0xc1",
    };
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

static int truncated(cf_error *err)
{
    return cf_error_set(err, CF_E_INVALID, "truncated message");
}

/* Big-endian unsigned of n bytes (n <= 8), bounds-checked. */
static int take_be(cf_mp_reader *r, unsigned n, uint64_t *v, cf_error *err)
{
    *v = 0;
    if (cf_mp_remaining(r) < n)
        return truncated(err);
    uint64_t x = 0;
    for (unsigned i = 0; i < n; i++)
        x = (x << 8) | r->p[i];
    r->p += n;
    *v = x;
    return 0;
}

static int wrong_kind(const cf_mp_reader *r, const char *want, cf_error *err)
{
    cf_mp_kind k = cf_mp_peek(r);
    if (k == CF_MP_END)
        return truncated(err);
    return cf_error_set(err, CF_E_INVALID, "expected %s, got %s", want, cf_mp_kind_name(k));
}

/* Common part of every container header. */
static int check_count(cf_mp_reader *r, unsigned depth, uint64_t n, unsigned bytes_per, const char *what,
                       cf_error *err)
{
    if (depth > depth_limit(r))
        return cf_error_set(err, CF_E_LIMIT, "nesting deeper than %u levels", depth_limit(r));
    if (n > r->lim->max_elements)
        return cf_error_set(err, CF_E_LIMIT, "%s declares %llu entries, limit is %zu", what,
                            (unsigned long long)n, r->lim->max_elements);
    /* Every entry needs at least bytes_per bytes: a header that declares more
     * than the rest of the buffer can hold is a lie, refuse it before any
     * caller sizes an allocation from it. */
    if (n > cf_mp_remaining(r) / bytes_per)
        return cf_error_set(err, CF_E_INVALID, "%s declares %llu entries but only %zu bytes remain", what,
                            (unsigned long long)n, cf_mp_remaining(r));
    return 0;
}

int cf_mp_read_map(cf_mp_reader *r, unsigned depth, uint32_t *n, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_MAP)
        return wrong_kind(r, "map", err);
    uint8_t b = *r->p++;
    uint64_t c;
    if (b <= 0x8f)
        c = b & 0x0f;
    else if (take_be(r, b == 0xde ? 2 : 4, &c, err) < 0)
        return -1;
    if (check_count(r, depth, c, 2, "map", err) < 0)
        return -1;
    *n = (uint32_t)c;
    return 0;
}

int cf_mp_read_array(cf_mp_reader *r, unsigned depth, uint32_t *n, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_ARRAY)
        return wrong_kind(r, "array", err);
    uint8_t b = *r->p++;
    uint64_t c;
    if (b <= 0x9f)
        c = b & 0x0f;
    else if (take_be(r, b == 0xdc ? 2 : 4, &c, err) < 0)
        return -1;
    if (check_count(r, depth, c, 1, "array", err) < 0)
        return -1;
    *n = (uint32_t)c;
    return 0;
}

static int take_span(cf_mp_reader *r, uint64_t len, size_t max, const char *what, const uint8_t **s, size_t *out,
                     cf_error *err)
{
    if (len > max)
        return cf_error_set(err, CF_E_LIMIT, "%s of %llu bytes exceeds the limit of %zu", what,
                            (unsigned long long)len, max);
    if (len > cf_mp_remaining(r))
        return truncated(err);
    *s = r->p;
    *out = (size_t)len;
    r->p += len;
    return 0;
}

int cf_mp_read_str(cf_mp_reader *r, size_t max, const uint8_t **s, size_t *len, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_STR)
        return wrong_kind(r, "string", err);
    uint8_t b = *r->p++;
    uint64_t l;
    if (b <= 0xbf)
        l = b & 0x1f;
    else if (take_be(r, b == 0xd9 ? 1 : b == 0xda ? 2 : 4, &l, err) < 0)
        return -1;
    return take_span(r, l, max, "string", s, len, err);
}

int cf_mp_read_bin(cf_mp_reader *r, size_t max, const uint8_t **s, size_t *len, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_BIN)
        return wrong_kind(r, "bin", err);
    uint8_t b = *r->p++;
    uint64_t l;
    if (take_be(r, b == 0xc4 ? 1 : b == 0xc5 ? 2 : 4, &l, err) < 0)
        return -1;
    return take_span(r, l, max, "binary", s, len, err);
}

int cf_mp_read_bytes(cf_mp_reader *r, size_t max, const uint8_t **s, size_t *len, cf_error *err)
{
    cf_mp_kind k = cf_mp_peek(r);
    if (k == CF_MP_STR)
        return cf_mp_read_str(r, max, s, len, err);
    if (k == CF_MP_BIN)
        return cf_mp_read_bin(r, max, s, len, err);
    return wrong_kind(r, "bin or string", err);
}

/* Reads any integer as sign + magnitude. */
static int read_integer(cf_mp_reader *r, bool *neg, uint64_t *mag, int64_t *sval, cf_error *err)
{
    cf_mp_kind k = cf_mp_peek(r);
    if (k != CF_MP_UINT && k != CF_MP_INT)
        return wrong_kind(r, "integer", err);
    uint8_t b = *r->p++;
    uint64_t x;
    if (b <= 0x7f) {
        *neg = false;
        *mag = b;
        return 0;
    }
    if (b >= 0xe0) {
        *neg = true;
        *sval = (int8_t)b;
        return 0;
    }
    unsigned n = 1u << (b & 0x03); /* cc..cf and d0..d3 encode 1,2,4,8 bytes */
    if (take_be(r, n, &x, err) < 0)
        return -1;
    if (b <= 0xcf) {
        *neg = false;
        *mag = x;
        return 0;
    }
    /* Sign-extend the n-byte two's complement value. */
    int64_t v;
    switch (n) {
    case 1: v = (int8_t)x; break;
    case 2: v = (int16_t)x; break;
    case 4: v = (int32_t)x; break;
    default: v = (int64_t)x; break;
    }
    if (v >= 0) {
        *neg = false;
        *mag = (uint64_t)v;
    } else {
        *neg = true;
        *sval = v;
    }
    return 0;
}

int cf_mp_read_int(cf_mp_reader *r, int64_t *v, cf_error *err)
{
    bool neg;
    uint64_t mag = 0;
    int64_t sval = 0;
    if (read_integer(r, &neg, &mag, &sval, err) < 0)
        return -1;
    if (neg) {
        *v = sval;
        return 0;
    }
    if (mag > INT64_MAX)
        return cf_error_set(err, CF_E_INVALID, "integer %llu out of range", (unsigned long long)mag);
    *v = (int64_t)mag;
    return 0;
}

int cf_mp_read_uint(cf_mp_reader *r, uint64_t *v, cf_error *err)
{
    bool neg;
    uint64_t mag = 0;
    int64_t sval = 0;
    if (read_integer(r, &neg, &mag, &sval, err) < 0)
        return -1;
    if (neg)
        return cf_error_set(err, CF_E_INVALID, "expected non-negative integer");
    *v = mag;
    return 0;
}

int cf_mp_read_bool(cf_mp_reader *r, bool *v, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_BOOL)
        return wrong_kind(r, "bool", err);
    *v = *r->p++ == 0xc3;
    return 0;
}

int cf_mp_read_nil(cf_mp_reader *r, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_NIL)
        return wrong_kind(r, "nil", err);
    r->p++;
    return 0;
}

int cf_mp_read_float(cf_mp_reader *r, double *v, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_FLOAT)
        return wrong_kind(r, "float", err);
    uint8_t b = *r->p++;
    uint64_t x;
    if (b == 0xca) {
        if (take_be(r, 4, &x, err) < 0)
            return -1;
        uint32_t u = (uint32_t)x;
        float f;
        memcpy(&f, &u, sizeof(f));
        *v = f;
    } else {
        if (take_be(r, 8, &x, err) < 0)
            return -1;
        memcpy(v, &x, sizeof(*v));
    }
    return 0;
}

int cf_mp_read_ext(cf_mp_reader *r, int8_t *type, const uint8_t **s, size_t *len, cf_error *err)
{
    if (cf_mp_peek(r) != CF_MP_EXT)
        return wrong_kind(r, "ext", err);
    uint8_t b = *r->p++;
    uint64_t l;
    if (b >= 0xd4 && b <= 0xd8) {
        l = 1u << (b - 0xd4); /* fixext 1,2,4,8,16 */
    } else if (take_be(r, b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4, &l, err) < 0) {
        return -1;
    }
    if (cf_mp_remaining(r) < 1)
        return truncated(err);
    *type = (int8_t)*r->p++;
    return take_span(r, l, r->lim->max_bin_bytes, "ext", s, len, err);
}

int cf_mp_skip(cf_mp_reader *r, unsigned depth, cf_error *err)
{
    /* Iterative: stack[i] counts the values still to skip in the container
     * open at level i.  The stack is bounded by CF_MP_DEPTH_HARD. */
    uint64_t stack[CF_MP_DEPTH_HARD + 1];
    unsigned top = 0;
    stack[0] = 1;
    for (;;) {
        while (top > 0 && stack[top] == 0)
            top--;
        if (stack[top] == 0)
            return 0;
        stack[top]--;
        unsigned d = depth + top; /* depth of the value being read */
        const uint8_t *s;
        size_t len;
        uint32_t n;
        int8_t et;
        int rc;
        switch (cf_mp_peek(r)) {
        case CF_MP_END: return truncated(err);
        case CF_MP_INVALID: return cf_error_set(err, CF_E_INVALID, "invalid msgpack byte 0xc1");
        case CF_MP_NIL: r->p++; rc = 0; break;
        case CF_MP_BOOL: r->p++; rc = 0; break;
        case CF_MP_UINT:
        case CF_MP_INT: {
            int64_t ignored;
            uint64_t uignored;
            rc = cf_mp_peek(r) == CF_MP_UINT ? cf_mp_read_uint(r, &uignored, err) : cf_mp_read_int(r, &ignored, err);
            break;
        }
        case CF_MP_FLOAT: {
            double ignored;
            rc = cf_mp_read_float(r, &ignored, err);
            break;
        }
        case CF_MP_STR: rc = cf_mp_read_str(r, r->lim->max_bin_bytes, &s, &len, err); break;
        case CF_MP_BIN: rc = cf_mp_read_bin(r, r->lim->max_bin_bytes, &s, &len, err); break;
        case CF_MP_EXT: rc = cf_mp_read_ext(r, &et, &s, &len, err); break;
        case CF_MP_ARRAY:
        case CF_MP_MAP: {
            bool is_map = cf_mp_peek(r) == CF_MP_MAP;
            rc = is_map ? cf_mp_read_map(r, d, &n, err) : cf_mp_read_array(r, d, &n, err);
            if (rc == 0 && n > 0) {
                if (top + 1 > CF_MP_DEPTH_HARD) /* unreachable: read_* checked depth */
                    return cf_error_set(err, CF_E_LIMIT, "nesting too deep");
                stack[++top] = is_map ? 2 * (uint64_t)n : n;
            }
            break;
        }
        default: rc = cf_error_set(err, CF_E_INVALID, "unknown msgpack type"); break;
        }
        if (rc < 0)
            return -1;
    }
}

bool cf_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (len - i - 1 < n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}
