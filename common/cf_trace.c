/* cf_trace: see cf_trace.h. */
#include "cf_trace.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* uppercase is invalid in traceparent */
}

static int unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static bool all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

int cf_traceparent_parse(const char *s, cf_trace_ctx *out)
{
    memset(out, 0, sizeof(*out));
    if (!s)
        return -1;
    size_t len = strnlen(s, 512);
    uint8_t version;
    if (len < CF_TRACEPARENT_LEN || unhex(s, &version, 1) < 0 || version == 0xff)
        return -1;
    /* Version 00 is exactly 55 characters; later versions may append
     * fields after a dash. */
    if ((version == 0 && len != CF_TRACEPARENT_LEN) || (len > CF_TRACEPARENT_LEN && s[CF_TRACEPARENT_LEN] != '-'))
        return -1;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return -1;
    if (unhex(s + 3, out->trace_id, 16) < 0 || unhex(s + 36, out->span_id, 8) < 0 ||
        unhex(s + 53, &out->flags, 1) < 0 || all_zero(out->trace_id, 16) || all_zero(out->span_id, 8)) {
        memset(out, 0, sizeof(*out));
        return -1;
    }
    return 0;
}

void cf_trace_hex(const uint8_t *b, size_t n, char *buf)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        buf[2 * i] = digits[b[i] >> 4];
        buf[2 * i + 1] = digits[b[i] & 15];
    }
    buf[2 * n] = '\0';
}

void cf_traceparent_format(const cf_trace_ctx *c, char *buf, size_t size)
{
    char t[33], s[17];
    cf_trace_hex(c->trace_id, 16, t);
    cf_trace_hex(c->span_id, 8, s);
    snprintf(buf, size, "00-%s-%s-%02x", t, s, c->flags);
}

static void random_id(uint8_t *b, size_t n)
{
    do {
        if (getrandom(b, n, GRND_NONBLOCK) != (ssize_t)n) {
            /* No entropy yet (early boot): ids need to be unique, not
             * secret. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)b;
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                b[i] = (uint8_t)x;
            }
        }
    } while (all_zero(b, n));
}

void cf_trace_new_trace_id(uint8_t id[16])
{
    random_id(id, 16);
}

void cf_trace_new_span_id(uint8_t id[8])
{
    random_id(id, 8);
}
