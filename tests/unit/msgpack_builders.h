/* Test helper: hand-made msgpack maps for the decoders' hostile cases. */
#ifndef CF_TEST_MSGPACK_BUILDERS_H
#define CF_TEST_MSGPACK_BUILDERS_H

#include <msgpack.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema.h"

/* A map of n entries from 2n specs, key then value: "s:text" (a str),
 * "i:123" (an int), "n" (nil), "b:text" (a bin of text; "b" alone: "id").
 * The caller frees .data. */
static inline cf_bytes pack(int n, ...)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (size_t)n);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < 2 * n; i++) {
        const char *s = va_arg(ap, const char *);
        if (s[0] == 's') {
            msgpack_pack_str_with_body(&pk, s + 2, strlen(s + 2));
        } else if (s[0] == 'i') {
            msgpack_pack_int64(&pk, strtoll(s + 2, NULL, 10));
        } else if (s[0] == 'n') {
            msgpack_pack_nil(&pk);
        } else {
            const char *body = s[1] == ':' ? s + 2 : "id";
            msgpack_pack_bin_with_body(&pk, body, strlen(body));
        }
    }
    va_end(ap);
    cf_bytes b = {(uint8_t *)sb.data, sb.size};
    return b;
}

#endif
