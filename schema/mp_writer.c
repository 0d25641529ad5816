/* The small fixed messages other modules build (cf_msgpack.h, writers). */
#include "cf_msgpack.h"

#include <string.h>

/* A str of fewer than 256 bytes (fixstr or str8): what the keys and ids of
 * these messages are. */
static int put_str(cf_buf *b, const char *s, size_t n)
{
    uint8_t hdr[2];
    size_t hl;
    if (n < 32) {
        hdr[0] = (uint8_t)(0xa0 | n);
        hl = 1;
    } else if (n < 256) {
        hdr[0] = 0xd9;
        hdr[1] = (uint8_t)n;
        hl = 2;
    } else {
        return -1;
    }
    return cf_buf_append(b, hdr, hl, NULL) < 0 || cf_buf_append(b, s, n, NULL) < 0 ? -1 : 0;
}

static int put_nil(cf_buf *b)
{
    static const uint8_t nil = 0xc0;
    return cf_buf_append(b, &nil, 1, NULL);
}

/* An encoded value as it is, or nil when there is none. */
static int put_value(cf_buf *b, const void *v, size_t n)
{
    return n ? cf_buf_append(b, v, n, NULL) : put_nil(b);
}

static int put_map_header(cf_buf *b, unsigned n)
{
    uint8_t h = (uint8_t)(0x80 | n); /* fixmap: fewer than 16 entries here */
    return n < 16 ? cf_buf_append(b, &h, 1, NULL) : -1;
}

int cf_thread_envelope_encode(const cf_bytes *input, const void *state, size_t state_len, const char *checkpoint_id,
                              cf_bytes *out, cf_error *err)
{
    cf_buf b;
    cf_buf_init(&b, 0);
    bool has_id = checkpoint_id && checkpoint_id[0];
    if (put_map_header(&b, 3) < 0 || put_str(&b, "checkpoint", 10) < 0 || put_value(&b, state, state_len) < 0 ||
        put_str(&b, "checkpoint_id", 13) < 0 ||
        (has_id ? put_str(&b, checkpoint_id, strlen(checkpoint_id)) : put_nil(&b)) < 0 ||
        put_str(&b, "input", 5) < 0 || put_value(&b, input ? input->data : NULL, input ? input->len : 0) < 0) {
        cf_buf_free(&b);
        return cf_error_set(err, CF_E_NOMEM, "building the checkpoint input");
    }
    out->data = cf_buf_steal(&b, &out->len);
    return 0;
}

int cf_checkpoint_meta_encode(const char *request_id, const char *worker, cf_buf *b)
{
    return put_map_header(b, 2) < 0 || put_str(b, "request_id", 10) < 0 ||
                   put_str(b, request_id, strlen(request_id)) < 0 || put_str(b, "worker", 6) < 0 ||
                   put_str(b, worker, strlen(worker)) < 0
               ? -1
               : 0;
}
