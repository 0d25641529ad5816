/* libFuzzer harnesses for every decoder of untrusted wire bytes (issue 8,
 * part 6).  One source, one harness per FUZZ_TARGET:
 *   request, result, event  the msgpack decoders, then a re-encode of what
 *                           decoded (it must encode and decode again); the
 *                           event target also runs the cancel and chunk decoders
 *                           (control messages) on the same bytes;
 *   json                    the JSON view (CLI input, batch lines): request,
 *                           result and event from JSON text, and any value's
 *                           JSON <-> msgpack conversion;
 *   msgpack_value           cf_msgpack_validate and the msgpack -> JSON view.
 * Built by tests/fuzz/run.sh (clang, -fsanitize=fuzzer,address,undefined). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cf_control.h"
#include "cf_event.h"
#include "cf_schema.h"
#include "cf_schema_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STR(x) #x
#define XSTR(x) STR(x)

static void abort_if(int cond)
{
    if (cond)
        abort(); /* a finding: libFuzzer saves the input */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *target = XSTR(FUZZ_TARGET);
    cf_error err;
    cf_error_clear(&err);
    if (strcmp(target, "request") == 0) {
        cf_request req = {0}, back = {0};
        if (cf_request_decode(data, size, NULL, &req, &err) == 0) {
            cf_bytes enc = {0};
            /* What decoded is valid: it must encode, and that must decode. */
            abort_if(cf_request_encode(&req, &enc, &err) != 0);
            abort_if(cf_request_decode(enc.data, enc.len, NULL, &back, &err) != 0);
            json_t *j = cf_request_to_json(&req);
            json_decref(j);
            free(enc.data);
        }
        cf_request_clear(&req);
        cf_request_clear(&back);
        char id[CF_ID_MAX + 1];
        (void)cf_request_peek_id(data, size, id, sizeof(id));
    } else if (strcmp(target, "result") == 0) {
        cf_result res = {0}, back = {0};
        if (cf_result_decode(data, size, NULL, &res, &err) == 0) {
            cf_bytes enc = {0};
            abort_if(cf_result_encode(&res, &enc, &err) != 0);
            abort_if(cf_result_decode(enc.data, enc.len, NULL, &back, &err) != 0);
            json_t *j = cf_result_to_json(&res);
            json_decref(j);
            free(enc.data);
        }
        cf_result_clear(&res);
        cf_result_clear(&back);
    } else if (strcmp(target, "event") == 0) {
        cf_event ev = {0}, back = {0};
        if (cf_event_decode(data, size, NULL, &ev, &err) == 0) {
            cf_bytes enc = {0};
            abort_if(cf_event_encode(&ev, &enc, &err) != 0);
            abort_if(cf_event_decode(enc.data, enc.len, NULL, &back, &err) != 0);
            json_t *j = cf_event_to_json(&ev);
            json_decref(j);
            free(enc.data);
        }
        cf_event_clear(&ev);
        cf_event_clear(&back);
        cf_cancel c = {0}, cback = {0};
        if (cf_cancel_decode(data, size, NULL, &c, &err) == 0) {
            cf_bytes enc = {0};
            abort_if(cf_cancel_encode(&c, &enc, &err) != 0);
            abort_if(cf_cancel_decode(enc.data, enc.len, NULL, &cback, &err) != 0);
            free(enc.data);
        }
        cf_cancel_clear(&c);
        cf_cancel_clear(&cback);
        cf_chunk ch = {0}, chback = {0};
        if (cf_chunk_decode(data, size, NULL, &ch, &err) == 0) {
            cf_bytes enc = {0};
            abort_if(cf_chunk_encode(&ch, &enc, &err) != 0);
            abort_if(cf_chunk_decode(enc.data, enc.len, NULL, &chback, &err) != 0);
            abort_if(chback.data.len != ch.data.len || memcmp(chback.data.data, ch.data.data, ch.data.len) != 0);
            json_t *j = cf_chunk_to_json(&ch);
            json_decref(j);
            free(enc.data);
        }
        cf_chunk_clear(&ch);
        cf_chunk_clear(&chback);
    } else if (strcmp(target, "json") == 0) {
        json_error_t jerr;
        json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
        if (!j)
            return 0;
        cf_request req = {0};
        cf_result res = {0};
        cf_event ev = {0};
        if (json_is_object(j)) {
            (void)cf_request_from_json(j, &req, &err);
            (void)cf_result_from_json(j, &res, &err);
            (void)cf_event_from_json(j, &ev, &err);
        }
        cf_bytes mp = {0};
        if (cf_json_to_msgpack(j, &mp, &err) == 0) {
            abort_if(cf_msgpack_validate(mp.data, mp.len, NULL, &err) != 0);
            free(mp.data);
        }
        cf_request_clear(&req);
        cf_result_clear(&res);
        cf_event_clear(&ev);
        json_decref(j);
    } else if (strcmp(target, "msgpack_value") == 0) {
        if (cf_msgpack_validate(data, size, NULL, &err) == 0) {
            json_t *j = cf_msgpack_to_json(data, size, &err);
            json_decref(j);
        }
    } else {
        abort();
    }
    return 0;
}
