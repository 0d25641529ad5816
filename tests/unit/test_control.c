/* Unit tests of control messages (SPEC.md section 12): the cancel codec,
 * canonical bytes, and every hostile input class it must refuse. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "cf_control.h"
#include "unit/msgpack_builders.h"

static void round_trip(void **state)
{
    (void)state;
    cf_cancel c = {.id = "req-1", .reason = "user stopped it", .created_us = 1700000000000000};
    cf_bytes b = {0};
    cf_error err;
    assert_int_equal(cf_cancel_encode(&c, &b, &err), 0);
    /* Canonical: map of 5, "v": 1 first, then type, id, reason, created_us. */
    assert_int_equal(b.data[0], 0x85);
    assert_memory_equal(b.data + 1, "\xa1v\x01\xa4type\xa6" "cancel\xa2id\xa5req-1", 22);
    cf_cancel out;
    assert_int_equal(cf_cancel_decode(b.data, b.len, NULL, &out, &err), 0);
    assert_string_equal(out.id, "req-1");
    assert_string_equal(out.reason, "user stopped it");
    assert_int_equal(out.created_us, 1700000000000000);
    cf_cancel_clear(&out);
    cf_cancel_clear(NULL);
    free(b.data);
    /* Optional fields absent: 3 keys. */
    cf_cancel bare = {.id = "x"};
    assert_int_equal(cf_cancel_encode(&bare, &b, &err), 0);
    assert_int_equal(b.data[0], 0x83);
    assert_int_equal(cf_cancel_decode(b.data, b.len, NULL, &out, &err), 0);
    assert_null(out.reason);
    assert_int_equal(out.created_us, 0);
    cf_cancel_clear(&out);
    free(b.data);
}

static void refuse(cf_bytes b, const char *want)
{
    cf_cancel out;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_cancel_decode(b.data, b.len, NULL, &out, &err), -1);
    if (!strstr(err.msg, want))
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, want);
    assert_null(out.id);
    free(b.data);
}

static void hostile_input_is_refused(void **state)
{
    (void)state;
    refuse(pack(2, "s:v", "i:1", "s:id", "s:x"), "type");
    refuse(pack(3, "s:v", "i:1", "s:type", "s:launch", "s:id", "s:x"), "unknown control message type");
    refuse(pack(2, "s:v", "i:1", "s:type", "s:cancel"), "id");
    refuse(pack(3, "s:v", "i:2", "s:type", "s:cancel", "s:id", "s:x"), "version");
    refuse(pack(2, "s:type", "s:cancel", "s:id", "s:x"), "\"v\"");
    refuse(pack(3, "s:v", "i:1", "s:type", "s:cancel", "s:id", "s:has space"), "id");
    refuse(pack(4, "s:v", "i:1", "s:type", "s:cancel", "s:id", "s:x", "s:id", "s:y"), "duplicate");
    refuse(pack(4, "s:v", "i:1", "s:type", "s:cancel", "s:id", "s:x", "s:reason", "s:line\nbreak"), "control");
    refuse(pack(4, "s:v", "i:1", "s:type", "s:cancel", "s:id", "s:x", "s:created_us", "i:-5"), "created_us");
    refuse(pack(3, "s:v", "i:1", "s:type", "s:cancel", "s:id", "b"), "id");
    char long_reason[400];
    memset(long_reason, 'r', sizeof(long_reason));
    strcpy(long_reason, "s:");
    memset(long_reason + 2, 'r', 300);
    long_reason[302] = '\0';
    refuse(pack(4, "s:v", "i:1", "s:type", "s:cancel", "s:id", "s:x", "s:reason", long_reason), "reason");
    /* Truncated and trailing bytes, not a map. */
    cf_bytes ok = pack(3, "s:v", "i:1", "s:type", "s:cancel", "s:id", "s:x");
    cf_cancel out;
    cf_error err;
    assert_int_equal(cf_cancel_decode(ok.data, ok.len - 1, NULL, &out, &err), -1);
    uint8_t *more = malloc(ok.len + 1);
    memcpy(more, ok.data, ok.len);
    more[ok.len] = 0xc0;
    assert_int_equal(cf_cancel_decode(more, ok.len + 1, NULL, &out, &err), -1);
    free(more);
    assert_int_equal(cf_cancel_decode("\xc1garbage", 8, NULL, &out, &err), -1);
    assert_int_equal(cf_cancel_decode("", 0, NULL, &out, &err), -1);
    /* Unknown keys are skipped, nil means absent. */
    cf_bytes fwd = pack(5, "s:v", "i:1", "s:type", "s:cancel", "s:id", "s:x", "s:later", "i:7", "s:reason", "n");
    assert_int_equal(cf_cancel_decode(fwd.data, fwd.len, NULL, &out, &err), 0);
    assert_null(out.reason);
    cf_cancel_clear(&out);
    free(fwd.data);
    free(ok.data);
    /* The encoder refuses what the decoder would. */
    cf_cancel bad = {.id = "a b"};
    cf_bytes b = {0};
    assert_int_equal(cf_cancel_encode(&bad, &b, &err), -1);
    assert_null(b.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(hostile_input_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
