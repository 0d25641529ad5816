/* Unit tests of streaming output: the chunk codec against hostile bytes
 * (SPEC.md "Output chunks"), and the worker's streamer (rounds, splitting,
 * coalescing, a busy producer, the final flush). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "cf_chunk.h"
#include "cf_util.h"
#include "streamer_int.h"
#include "unit/msgpack_builders.h"

/* ---- the codec ---------------------------------------------------------- */

static void refuse(cf_bytes b, const char *want)
{
    cf_chunk out;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_chunk_decode(b.data, b.len, NULL, &out, &err), -1);
    if (!strstr(err.msg, want))
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, want);
    assert_null(out.id);
    assert_null(out.data.data);
    free(b.data);
}

#define OK_FIELDS "s:v", "i:1", "s:id", "s:r1", "s:run", "s:w-1", "s:seq", "i:0", "s:stream", "s:stdout"

static void chunk_codec(void **state)
{
    (void)state;
    cf_chunk c = {.id = "r1", .run = "w-1", .seq = 3, .stream = CF_CHUNK_STDOUT, .offset = 10,
                  .data = {(uint8_t *)"\xff\x00x", 3}};
    cf_bytes b = {0};
    cf_error err;
    assert_int_equal(cf_chunk_encode(&c, &b, &err), 0);
    assert_int_equal(b.data[0], 0x87); /* at_us 0: left out */
    cf_chunk out;
    assert_int_equal(cf_chunk_decode(b.data, b.len, NULL, &out, &err), 0);
    assert_int_equal(out.seq, 3);
    assert_int_equal(out.offset, 10);
    assert_int_equal(out.data.len, 3);
    assert_memory_equal(out.data.data, "\xff\x00x", 3);
    cf_chunk_clear(&out);
    cf_chunk_clear(NULL);
    free(b.data);

    refuse(pack(6, OK_FIELDS, "s:offset", "i:0"), "data");
    refuse(pack(7, OK_FIELDS, "s:offset", "i:0", "s:data", "s:text"), "bin");
    refuse(pack(7, OK_FIELDS, "s:offset", "i:-1", "s:data", "b:x"), "offset");
    refuse(pack(6, OK_FIELDS, "s:data", "b:x"), "offset");
    refuse(pack(7, "s:v", "i:1", "s:id", "s:r1", "s:run", "s:w-1", "s:seq", "i:-2", "s:stream", "s:stdout", "s:offset",
                "i:0", "s:data", "b:x"),
           "seq");
    refuse(pack(7, "s:v", "i:1", "s:id", "s:r1", "s:run", "s:w-1", "s:seq", "i:0", "s:stream", "s:stdin", "s:offset",
                "i:0", "s:data", "b:x"),
           "stream");
    refuse(pack(7, "s:v", "i:1", "s:id", "s:r 1", "s:run", "s:w-1", "s:seq", "i:0", "s:stream", "s:stdout",
                "s:offset", "i:0", "s:data", "b:x"),
           "id");
    refuse(pack(6, "s:v", "i:1", "s:id", "s:r1", "s:seq", "i:0", "s:stream", "s:stdout", "s:offset", "i:0", "s:data",
                "b:x"),
           "run");
    refuse(pack(8, OK_FIELDS, "s:offset", "i:0", "s:data", "b:x", "s:seq", "i:1"), "duplicate");
    refuse(pack(7, "s:v", "i:2", "s:id", "s:r1", "s:run", "s:w-1", "s:seq", "i:0", "s:stream", "s:stdout", "s:offset",
                "i:0", "s:data", "b:x"),
           "version");
    char longrun[80] = "s:";
    memset(longrun + 2, 'r', 70);
    longrun[72] = '\0';
    refuse(pack(7, "s:v", "i:1", "s:id", "s:r1", "s:run", longrun, "s:seq", "i:0", "s:stream", "s:stdout", "s:offset",
                "i:0", "s:data", "b:x"),
           "run");
    /* Data past CF_CHUNK_DATA_MAX. */
    size_t big = CF_CHUNK_DATA_MAX + 1;
    char *bigv = malloc(big + 3);
    memcpy(bigv, "b:", 2);
    memset(bigv + 2, 'x', big);
    bigv[big + 2] = '\0';
    refuse(pack(7, OK_FIELDS, "s:offset", "i:0", "s:data", bigv), "data");
    free(bigv);
    /* Truncated, trailing bytes, garbage. */
    cf_bytes ok = pack(7, OK_FIELDS, "s:offset", "i:0", "s:data", "b:x");
    assert_int_equal(cf_chunk_decode(ok.data, ok.len, NULL, &out, &err), 0);
    cf_chunk_clear(&out);
    assert_int_equal(cf_chunk_decode(ok.data, ok.len - 1, NULL, &out, &err), -1);
    assert_int_equal(cf_chunk_decode("\xc1", 1, NULL, &out, &err), -1);
    free(ok.data);
    /* Unknown keys are skipped. */
    cf_bytes fwd = pack(8, OK_FIELDS, "s:offset", "i:0", "s:data", "b:x", "s:later", "i:1");
    assert_int_equal(cf_chunk_decode(fwd.data, fwd.len, NULL, &out, &err), 0);
    cf_chunk_clear(&out);
    free(fwd.data);
    /* The encoder refuses what the decoder would. */
    cf_chunk empty = {.id = "r1", .run = "w-1"};
    assert_int_equal(cf_chunk_encode(&empty, &b, &err), -1);
    assert_null(b.data);
}

/* ---- the streamer --------------------------------------------------------- */

typedef struct sink {
    int busy_left;         /* answer "busy" this many times first */
    bool fail_all;
    int taken;
    cf_chunk got[64];
} sink;

static int take(void *arg, const char *id, uint8_t *value, size_t len)
{
    sink *s = arg;
    assert_string_equal(id, "req-1");
    if (s->busy_left > 0) {
        s->busy_left--;
        return 1;
    }
    if (s->fail_all)
        return -1;
    cf_error err;
    assert_true(s->taken < 64);
    assert_int_equal(cf_chunk_decode(value, len, NULL, &s->got[s->taken], &err), 0);
    s->taken++;
    free(value);
    return 0;
}

static void sink_free(sink *s)
{
    for (int i = 0; i < s->taken; i++)
        cf_chunk_clear(&s->got[i]);
}

static void append(cf_buf *b, const char *s)
{
    assert_int_equal(cf_buf_append(b, s, strlen(s), NULL), 0);
}

static void streamer_rounds(void **state)
{
    (void)state;
    sink sk = {0};
    cf_streamer st;
    cf_streamer_init(&st, "req-1", "w-7", 10000, 4, 0, take, &sk);
    cf_buf out, err;
    cf_buf_init(&out, 0);
    cf_buf_init(&err, 0);
    /* The first bytes go at once, split at the chunk size. */
    append(&out, "hello\n");
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, 1000000), INT64_MAX);
    assert_int_equal(sk.taken, 2);
    assert_int_equal(sk.got[0].data.len, 4);
    assert_int_equal(sk.got[1].offset, 4);
    assert_string_equal(sk.got[1].run, "w-7");
    /* Within the interval: held, and the wake-up asked for is the round's time. */
    append(&err, "e1");
    append(&out, "ab");
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, 1003000), 1010000);
    assert_int_equal(sk.taken, 2);
    append(&err, "e2");
    /* At the round: stdout then stderr, everything held, coalesced. */
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, 1010000), INT64_MAX);
    assert_int_equal(sk.taken, 4);
    assert_int_equal(sk.got[2].stream, CF_CHUNK_STDOUT);
    assert_int_equal(sk.got[2].offset, 6);
    assert_int_equal(sk.got[3].stream, CF_CHUNK_STDERR);
    assert_int_equal(sk.got[3].data.len, 4);
    for (int i = 0; i < sk.taken; i++)
        assert_int_equal(sk.got[i].seq, i);
    /* A busy producer: kept for a retry soon, then sent; seq stays dense. */
    append(&out, "x");
    sk.busy_left = 1;
    int64_t next = cf_streamer_on_output(&st, &out, &err, false, 2000000);
    assert_true(next > 2000000 && next < INT64_MAX);
    assert_int_equal(sk.taken, 4);
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, next), INT64_MAX);
    assert_int_equal(sk.taken, 5);
    assert_int_equal(sk.got[4].seq, 4);
    /* Final: whatever the interval says, everything goes. */
    append(&out, "tail");
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, true, next + 1), INT64_MAX);
    assert_int_equal(sk.taken, 6);
    assert_int_equal(st.seq, 6);
    assert_int_equal(st.sent[CF_CHUNK_STDOUT], out.len);
    assert_int_equal(st.sent[CF_CHUNK_STDERR], err.len);
    /* Nothing new: nothing sent, no wake-up. */
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, true, next + 2), INT64_MAX);
    assert_int_equal(sk.taken, 6);
    sink_free(&sk);
    cf_buf_free(&out);
    cf_buf_free(&err);
}

/* A chunk refused for good stops the stream: what was published stays a
 * gap-free prefix, and nothing more is tried. */
static void streamer_stops_on_failure(void **state)
{
    (void)state;
    sink sk = {0};
    cf_streamer st;
    cf_streamer_init(&st, "req-1", "w-7", 10000, 64, 0, take, &sk);
    cf_buf out, err;
    cf_buf_init(&out, 0);
    cf_buf_init(&err, 0);
    append(&out, "kept");
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, 1000000), INT64_MAX);
    assert_int_equal(sk.taken, 1);
    sk.fail_all = true;
    append(&out, "lost");
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, 2000000), INT64_MAX);
    assert_true(st.stopped);
    assert_int_equal(st.seq, 1);
    assert_int_equal(st.sent[CF_CHUNK_STDOUT], 4);
    sk.fail_all = false;
    append(&out, "more");
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, true, 3000000), INT64_MAX);
    assert_int_equal(sk.taken, 1); /* nothing after the stop */
    sink_free(&sk);
    cf_buf_free(&out);
    cf_buf_free(&err);
}

/* A producer that stays busy through the final round: given up after the
 * patience, and the stream says it stopped. */
static void streamer_final_gives_up(void **state)
{
    (void)state;
    sink sk = {.busy_left = 1 << 30};
    cf_streamer st;
    cf_streamer_init(&st, "req-1", "w-7", 10000, 64, 0, take, &sk);
    cf_buf out, err;
    cf_buf_init(&out, 0);
    cf_buf_init(&err, 0);
    append(&out, "never");
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, true, t0), INT64_MAX);
    int64_t took = cf_mono_us() - t0;
    assert_true(took >= 1900000 && took < 5000000);
    assert_true(st.stopped);
    assert_int_equal(st.seq, 0);
    sink_free(&sk);
    cf_buf_free(&out);
    cf_buf_free(&err);
}

/* Past max_chunks, one round a second: a byte-at-a-time writer cannot
 * turn its run into a message per byte. */
static void streamer_budget_slows_down(void **state)
{
    (void)state;
    sink sk = {0};
    cf_streamer st;
    cf_streamer_init(&st, "req-1", "w-7", 10000, 64, 3, take, &sk);
    cf_buf out, err;
    cf_buf_init(&out, 0);
    cf_buf_init(&err, 0);
    int64_t t = 1000000;
    for (int i = 0; i < 3; i++) {
        append(&out, "x");
        assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, t), INT64_MAX);
        t += 10000;
    }
    assert_int_equal(sk.taken, 3);
    append(&out, "y");
    /* The next round is a second after the last, not 10 ms. */
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, t), t - 10000 + 1000000);
    assert_int_equal(sk.taken, 3);
    assert_int_equal(cf_streamer_on_output(&st, &out, &err, false, t - 10000 + 1000000), INT64_MAX);
    assert_int_equal(sk.taken, 4);
    sink_free(&sk);
    cf_buf_free(&out);
    cf_buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunk_codec),
        cmocka_unit_test(streamer_rounds),
        cmocka_unit_test(streamer_stops_on_failure),
        cmocka_unit_test(streamer_final_gives_up),
        cmocka_unit_test(streamer_budget_slows_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
