/* embed_proto: the frames between the worker and its runtime helpers.  The
 * worker decodes what a helper running untrusted code sends: every bound is
 * checked here with hostile bytes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto_int.h"

static char *S(const char *s)
{
    return strdup(s);
}

static void make_job(cf_embed_job *j)
{
    memset(j, 0, sizeof(*j));
    j->runtime = CF_EMBED_WASM;
    j->seq = 77;
    j->cache_scope = S("tenant-a");
    j->code_path = S("/work/cf-1/run/main.wasm");
    j->input_path = S("/work/cf-1/run/input.json");
    j->output_path = S("/work/cf-1/run/out/output.json");
    j->work_dir = S("/work/cf-1/work");
    j->run_dir = S("/work/cf-1/run");
    j->out_dir = S("/work/cf-1/run/out");
    j->work_rw = true;
    j->argc = 2;
    j->argv = calloc(3, sizeof(char *));
    j->argv[0] = S("main.wasm");
    j->argv[1] = S("arg with spaces");
    j->envc = 1;
    j->env = calloc(2, sizeof(char *));
    j->env[0] = S("K=V");
    j->stdin_data = malloc(3);
    memcpy(j->stdin_data, "abc", 3);
    j->stdin_len = 3;
    j->timeout_us = 1500000;
    j->cpu_time_us = 7;
    j->memory_bytes = 1 << 20;
    j->max_stdout = 100;
    j->max_stderr = 50;
    j->max_output = 4096;
    j->fuel = 123456789;
    j->code = (uint8_t *)strdup("6*7");
    j->code_len = 3;
    j->input_json = S("{\"n\":1}");
}

static uint32_t frame_len(const cf_buf *b)
{
    return (uint32_t)b->data[0] | (uint32_t)b->data[1] << 8 | (uint32_t)b->data[2] << 16 | (uint32_t)b->data[3] << 24;
}

static void test_job_round_trip(void **state)
{
    (void)state;
    cf_embed_job j, back;
    make_job(&j);
    cf_buf b;
    cf_buf_init(&b, 0);
    cf_error err;
    assert_int_equal(cf_embed_job_encode(&j, &b, &err), 0);
    assert_int_equal(frame_len(&b), b.len - 4);
    assert_int_equal(cf_embed_job_decode(b.data + 4, b.len - 4, &back, &err), 0);
    assert_int_equal(back.runtime, CF_EMBED_WASM);
    assert_int_equal(back.seq, 77);
    assert_string_equal(back.cache_scope, "tenant-a");
    assert_string_equal(back.code_path, j.code_path);
    assert_string_equal(back.input_path, j.input_path);
    assert_string_equal(back.work_dir, j.work_dir);
    assert_true(back.work_rw);
    assert_int_equal(back.argc, 2);
    assert_string_equal(back.argv[1], "arg with spaces");
    assert_null(back.argv[2]);
    assert_int_equal(back.envc, 1);
    assert_string_equal(back.env[0], "K=V");
    assert_int_equal(back.stdin_len, 3);
    assert_memory_equal(back.stdin_data, "abc", 3);
    assert_int_equal(back.timeout_us, 1500000);
    assert_int_equal(back.cpu_time_us, 7);
    assert_int_equal(back.memory_bytes, 1 << 20);
    assert_int_equal(back.fuel, 123456789);
    assert_int_equal(back.max_output, 4096);
    assert_int_equal(back.code_len, 3);
    assert_memory_equal(back.code, "6*7", 3);
    assert_string_equal(back.input_json, "{\"n\":1}");
    cf_embed_job_free(&back);
    cf_embed_job_free(&j);
    cf_buf_free(&b);
}

static void test_reply_round_trip_and_caps(void **state)
{
    (void)state;
    cf_embed_reply r, back;
    cf_embed_reply_init(&r);
    r.seq = 9;
    r.end = CF_EMBED_FAILED;
    r.exit_code = 1;
    r.reason = S("wasm trap: unreachable");
    r.diagnostics = S("Error: x\n    at f");
    cf_buf_append(&r.out, "0123456789", 10, NULL);
    cf_buf_append(&r.err, "e", 1, NULL);
    cf_buf_append(&r.output, "{\"a\":1}", 7, NULL);
    r.has_output = true;
    r.out_truncated = true;
    r.wall_us = 5;
    cf_buf b;
    cf_buf_init(&b, 0);
    cf_error err;
    assert_int_equal(cf_embed_reply_encode(&r, &b, &err), 0);
    assert_int_equal(cf_embed_reply_decode(b.data + 4, b.len - 4, 10, 1, 100, &back, &err), 0);
    assert_int_equal(back.end, CF_EMBED_FAILED);
    assert_int_equal(back.seq, 9);
    assert_string_equal(back.reason, "wasm trap: unreachable");
    assert_int_equal(back.out.len, 10);
    assert_true(back.has_output);
    assert_int_equal(back.output.len, 7);
    assert_true(back.out_truncated);
    assert_false(back.err_truncated);
    cf_embed_reply_free(&back);
    /* an output larger than the job's cap is refused */
    assert_int_equal(cf_embed_reply_decode(b.data + 4, b.len - 4, 10, 1, 6, &back, &err), -1);
    /* stdout longer than the job's cap: a helper may not hand back more */
    assert_int_equal(cf_embed_reply_decode(b.data + 4, b.len - 4, 9, 1, 100, &back, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    cf_embed_reply_free(&r);
    cf_buf_free(&b);
}

static void test_hostile_frames(void **state)
{
    (void)state;
    cf_embed_reply r;
    cf_error err;
    /* Every prefix of a good reply is refused, none crashes. */
    cf_embed_reply good;
    cf_embed_reply_init(&good);
    good.reason = S("x");
    cf_buf b;
    cf_buf_init(&b, 0);
    assert_int_equal(cf_embed_reply_encode(&good, &b, &err), 0);
    for (size_t n = 0; n < b.len - 4; n++)
        assert_int_equal(cf_embed_reply_decode(b.data + 4, n, 100, 100, 100, &r, &err), -1);
    cf_embed_reply_free(&good);
    cf_buf_free(&b);

    static const struct {
        const char *what;
        const uint8_t *p;
        size_t n;
    } bad[] = {
        /* map32 declaring 2^28 entries in 5 bytes */
        {"huge map", (const uint8_t *)"\xdf\x10\x00\x00\x00", 5},
        /* {"end": 99}: out of range */
        {"end out of range", (const uint8_t *)"\x81\xa3" "end\x63", 6},
        /* {"end": 0, "reason": "a\0b"} */
        {"NUL in text", (const uint8_t *)"\x82\xa3" "end\x00\xa6" "reason\xa3" "a\0b", 16},
        /* {"end": "x"} */
        {"wrong type", (const uint8_t *)"\x81\xa3" "end\xa1x", 7},
        /* {} : no end */
        {"no end", (const uint8_t *)"\x80", 1},
        /* {"end": 0} followed by a stray byte */
        {"trailing", (const uint8_t *)"\x81\xa3" "end\x00\x00", 7},
        /* {"stdout": bin32 of 4 GiB} */
        {"huge bin", (const uint8_t *)"\x82\xa3" "end\x00\xa6" "stdout\xc6\xff\xff\xff\xff", 18},
        /* a deep array under an unknown key */
        {"deep nesting", (const uint8_t *)"\x82\xa3" "end\x00\xa1z\x91\x91\x91\x91\x90", 13},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cf_embed_reply_decode(bad[i].p, bad[i].n, 100, 100, 100, &r, &err) != -1)
            fail_msg("%s was accepted", bad[i].what);
    }
    /* A job without its required fields. */
    cf_embed_job j;
    assert_int_equal(cf_embed_job_decode((const uint8_t *)"\x81\xa7runtime\x01", 10, &j, &err), -1);
}

static void test_frame_io(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    cf_embed_job j;
    make_job(&j);
    cf_buf b, in;
    cf_buf_init(&b, 0);
    cf_buf_init(&in, 0);
    cf_error err;
    assert_int_equal(cf_embed_job_encode(&j, &b, &err), 0);
    assert_int_equal(cf_embed_write_frame(sv[0], &b, 0, NULL, &err), 0);
    assert_int_equal(cf_embed_read_frame(sv[1], 1 << 20, cf_mono_us() + 1000000, NULL, &in, &err), 0);
    assert_int_equal(in.len, b.len - 4);
    /* a frame announcing more than the reader's bound */
    assert_int_equal(cf_embed_write_frame(sv[0], &b, 0, NULL, &err), 0);
    assert_int_equal(cf_embed_read_frame(sv[1], 16, cf_mono_us() + 1000000, NULL, &in, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    /* nothing comes: the deadline holds */
    int sv2[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv2), 0);
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_embed_read_frame(sv2[1], 1 << 20, cf_mono_us() + 100000, NULL, &in, &err), -1);
    assert_int_equal(err.code, CF_E_TIMEOUT);
    assert_true(cf_mono_us() - t0 < 1000000);
    /* the other side goes away: end of stream */
    close(sv2[0]);
    assert_int_equal(cf_embed_read_frame(sv2[1], 1 << 20, 0, NULL, &in, &err), -1);
    assert_int_equal(err.code, CF_E_SYSTEM);
    assert_int_equal(err.sys_errno, 0);
    close(sv2[1]);
    close(sv[0]);
    close(sv[1]);
    cf_embed_job_free(&j);
    cf_buf_free(&b);
    cf_buf_free(&in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_round_trip),
        cmocka_unit_test(test_reply_round_trip_and_caps),
        cmocka_unit_test(test_hostile_frames),
        cmocka_unit_test(test_frame_io),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
