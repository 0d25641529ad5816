/* embed_proto: frames between the worker and its embedded-runtime helpers.
 *
 * Encoding uses msgpack-c's packer; decoding uses the schema module's
 * bounded cursor (cf_mp_reader), never msgpack_unpack: the reply comes from
 * a process that runs untrusted code. */
#include "proto_int.h"

#include "cf_msgpack.h"

#include <errno.h>
#include <msgpack.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const end_names[CF_EMBED__END_COUNT] = {
    "exited", "failed", "timeout", "cpu_exceeded", "memory", "bad_program", "link_failed", "helper_error",
};

const char *cf_embed_end_name(int end)
{
    return end >= 0 && end < CF_EMBED__END_COUNT ? end_names[end] : "unknown";
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

void cf_embed_job_free(cf_embed_job *job)
{
    if (!job)
        return;
    free(job->code_path);
    free(job->code);
    free(job->input_json);
    free(job->cache_scope);
    free(job->input_path);
    free(job->output_path);
    free(job->work_dir);
    free(job->run_dir);
    free(job->out_dir);
    free_strv(job->argv, job->argc);
    free_strv(job->env, job->envc);
    free(job->stdin_data);
    memset(job, 0, sizeof(*job));
}

void cf_embed_reply_init(cf_embed_reply *r)
{
    memset(r, 0, sizeof(*r));
    cf_buf_init(&r->out, 0);
    cf_buf_init(&r->err, 0);
    cf_buf_init(&r->output, 0);
}

void cf_embed_reply_free(cf_embed_reply *r)
{
    if (!r)
        return;
    free(r->reason);
    free(r->diagnostics);
    cf_buf_free(&r->out);
    cf_buf_free(&r->err);
    cf_buf_free(&r->output);
    memset(r, 0, sizeof(*r));
}

/* ---- encoding ---- */

typedef struct enc {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    bool failed;
} enc;

static void key(enc *e, const char *k)
{
    e->failed |= msgpack_pack_str_with_body(&e->pk, k, strlen(k)) != 0;
}

static void kv_str(enc *e, const char *k, const char *v)
{
    key(e, k);
    if (v)
        e->failed |= msgpack_pack_str_with_body(&e->pk, v, strlen(v)) != 0;
    else
        e->failed |= msgpack_pack_nil(&e->pk) != 0;
}

static void kv_int(enc *e, const char *k, int64_t v)
{
    key(e, k);
    e->failed |= msgpack_pack_int64(&e->pk, v) != 0;
}

static void kv_bool(enc *e, const char *k, bool v)
{
    key(e, k);
    e->failed |= (v ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk)) != 0;
}

static void kv_bin(enc *e, const char *k, const void *p, size_t n)
{
    key(e, k);
    e->failed |= msgpack_pack_bin_with_body(&e->pk, p ? p : "", n) != 0;
}

static void kv_strv(enc *e, const char *k, char *const *v, size_t n)
{
    key(e, k);
    e->failed |= msgpack_pack_array(&e->pk, n) != 0;
    for (size_t i = 0; i < n; i++)
        e->failed |= msgpack_pack_str_with_body(&e->pk, v[i], strlen(v[i])) != 0;
}

static void enc_begin(enc *e, size_t nkeys)
{
    msgpack_sbuffer_init(&e->sb);
    msgpack_packer_init(&e->pk, &e->sb, msgpack_sbuffer_write);
    e->failed = false;
    static const char room[4] = {0};
    e->failed |= msgpack_sbuffer_write(&e->sb, room, sizeof(room)) != 0; /* the length, filled at the end */
    e->failed |= msgpack_pack_map(&e->pk, nkeys) != 0;
}

static int enc_end(enc *e, cf_buf *out, cf_error *err)
{
    if (e->failed || e->sb.size - 4 > UINT32_MAX) {
        msgpack_sbuffer_destroy(&e->sb);
        return cf_error_set(err, CF_E_NOMEM, "embed: encoding a frame failed");
    }
    uint32_t n = (uint32_t)(e->sb.size - 4);
    for (int i = 0; i < 4; i++)
        e->sb.data[i] = (char)(n >> (8 * i));
    int rc = cf_buf_append(out, e->sb.data, e->sb.size, err);
    msgpack_sbuffer_destroy(&e->sb);
    return rc;
}

int cf_embed_job_encode(const cf_embed_job *j, cf_buf *out, cf_error *err)
{
    enc e;
    enc_begin(&e, 23 - (j->code ? 0 : 1) - (j->input_json ? 0 : 1));
    kv_int(&e, "max_output", j->max_output);
    if (j->code)
        kv_bin(&e, "code_inline", j->code, j->code_len);
    if (j->input_json)
        kv_str(&e, "input_json", j->input_json);
    kv_int(&e, "seq", (int64_t)(j->seq & INT64_MAX));
    kv_str(&e, "cache_scope", j->cache_scope);
    kv_int(&e, "runtime", j->runtime);
    kv_str(&e, "code", j->code_path);
    kv_str(&e, "input", j->input_path);
    kv_str(&e, "output", j->output_path);
    kv_str(&e, "work", j->work_dir);
    kv_bool(&e, "work_rw", j->work_rw);
    kv_str(&e, "run", j->run_dir);
    kv_str(&e, "out", j->out_dir);
    kv_strv(&e, "argv", j->argv, j->argc);
    kv_strv(&e, "env", j->env, j->envc);
    kv_bin(&e, "stdin", j->stdin_data, j->stdin_len);
    kv_int(&e, "timeout_us", j->timeout_us);
    kv_int(&e, "cpu_time_us", j->cpu_time_us);
    kv_int(&e, "memory", j->memory_bytes);
    kv_int(&e, "max_stdout", j->max_stdout);
    kv_int(&e, "max_stderr", j->max_stderr);
    kv_int(&e, "fuel", j->fuel);
    kv_int(&e, "version", 1);
    return enc_end(&e, out, err);
}

int cf_embed_reply_encode(const cf_embed_reply *r, cf_buf *out, cf_error *err)
{
    enc e;
    enc_begin(&e, 15 + (r->has_output ? 1 : 0));
    kv_bool(&e, "output_too_big", r->output_too_big);
    if (r->has_output)
        kv_bin(&e, "output", r->output.data, r->output.len);
    kv_int(&e, "seq", (int64_t)(r->seq & INT64_MAX));
    kv_int(&e, "end", r->end);
    kv_int(&e, "exit_code", r->exit_code);
    kv_str(&e, "reason", r->reason);
    kv_str(&e, "diagnostics", r->diagnostics);
    kv_bin(&e, "stdout", r->out.data, r->out.len);
    kv_bin(&e, "stderr", r->err.data, r->err.len);
    kv_bool(&e, "stdout_truncated", r->out_truncated);
    kv_bool(&e, "stderr_truncated", r->err_truncated);
    kv_bool(&e, "cached", r->cached);
    kv_int(&e, "wall_us", r->wall_us);
    kv_int(&e, "cpu_us", r->cpu_us);
    kv_int(&e, "peak_memory", r->peak_memory_bytes);
    kv_int(&e, "version", 1);
    return enc_end(&e, out, err);
}

/* ---- decoding ---- */

static int bad(cf_error *err, const char *what)
{
    return cf_error_set(err, CF_E_INVALID, "embed: malformed frame (%s)", what);
}

/* A str (or nil -> NULL) copied as a C string: no NUL inside, at most max. */
static int read_cstr(cf_mp_reader *r, size_t max, char **out, cf_error *err)
{
    if (cf_mp_peek(r) == CF_MP_NIL) {
        free(*out);
        *out = NULL;
        return cf_mp_read_nil(r, err);
    }
    const uint8_t *s;
    size_t n;
    if (cf_mp_read_str(r, max, &s, &n, err) < 0)
        return -1;
    if (memchr(s, '\0', n))
        return bad(err, "NUL in a string");
    char *c = cf_strndup((const char *)s, n);
    if (!c)
        return cf_error_set(err, CF_E_NOMEM, "embed: out of memory");
    free(*out);
    *out = c;
    return 0;
}

static int read_strv(cf_mp_reader *r, size_t max_n, char ***out, size_t *outn, cf_error *err)
{
    uint32_t n;
    if (cf_mp_read_array(r, 2, &n, err) < 0)
        return -1;
    if (n > max_n)
        return cf_error_set(err, CF_E_LIMIT, "embed: %u entries (max %zu)", n, max_n);
    char **v = calloc((size_t)n + 1, sizeof(char *));
    if (!v)
        return cf_error_set(err, CF_E_NOMEM, "embed: out of memory");
    for (uint32_t i = 0; i < n; i++) {
        if (read_cstr(r, CF_EMBED_TEXT_MAX * 16, &v[i], err) < 0) {
            free_strv(v, n);
            return -1;
        }
        if (!v[i]) {
            free_strv(v, n);
            return bad(err, "nil in a string list");
        }
    }
    free_strv(*out, *outn);
    *out = v;
    *outn = n;
    return 0;
}

static int read_int_in(cf_mp_reader *r, int64_t lo, int64_t hi, int64_t *v, cf_error *err)
{
    if (cf_mp_read_int(r, v, err) < 0)
        return -1;
    if (*v < lo || *v > hi)
        return bad(err, "integer out of range");
    return 0;
}

static const cf_decode_limits frame_limits = {
    .max_total_bytes = SIZE_MAX,
    .max_str_bytes = CF_EMBED_TEXT_MAX * 16,
    .max_bin_bytes = SIZE_MAX,
    .max_elements = CF_EMBED_ARGS_MAX + CF_EMBED_ENV_MAX,
    .max_depth = 2,
};

int cf_embed_job_decode(const uint8_t *p, size_t len, cf_embed_job *j, cf_error *err)
{
    memset(j, 0, sizeof(*j));
    cf_mp_reader r;
    cf_mp_reader_init(&r, p, len, &frame_limits);
    uint32_t n;
    if (cf_mp_read_map(&r, 1, &n, err) < 0)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        size_t kl;
        if (cf_mp_read_str(&r, 32, &k, &kl, err) < 0)
            goto fail;
#define IS(name) (kl == strlen(name) && memcmp(k, name, kl) == 0)
        int rc;
        int64_t v = 0;
        bool b = false;
        if (IS("runtime")) {
            rc = read_int_in(&r, CF_EMBED_WASM, CF_EMBED_JS, &v, err);
            j->runtime = (int)v;
        } else if (IS("seq")) {
            rc = read_int_in(&r, 0, INT64_MAX, &v, err);
            j->seq = (uint64_t)v;
        } else if (IS("cache_scope")) {
            rc = read_cstr(&r, 512, &j->cache_scope, err);
        } else if (IS("code_inline")) {
            const uint8_t *c;
            size_t cl;
            rc = cf_mp_read_bin(&r, len, &c, &cl, err);
            if (rc == 0) {
                free(j->code);
                j->code = malloc(cl ? cl : 1);
                if (!j->code) {
                    cf_error_set(err, CF_E_NOMEM, "embed: out of memory");
                    goto fail;
                }
                memcpy(j->code, c, cl);
                j->code_len = cl;
            }
        } else if (IS("input_json")) {
            rc = read_cstr(&r, len, &j->input_json, err);
        } else if (IS("code")) {
            rc = read_cstr(&r, 4096, &j->code_path, err);
        } else if (IS("input")) {
            rc = read_cstr(&r, 4096, &j->input_path, err);
        } else if (IS("output")) {
            rc = read_cstr(&r, 4096, &j->output_path, err);
        } else if (IS("work")) {
            rc = read_cstr(&r, 4096, &j->work_dir, err);
        } else if (IS("run")) {
            rc = read_cstr(&r, 4096, &j->run_dir, err);
        } else if (IS("out")) {
            rc = read_cstr(&r, 4096, &j->out_dir, err);
        } else if (IS("work_rw")) {
            rc = cf_mp_read_bool(&r, &b, err);
            j->work_rw = b;
        } else if (IS("argv")) {
            rc = read_strv(&r, CF_EMBED_ARGS_MAX, &j->argv, &j->argc, err);
        } else if (IS("env")) {
            rc = read_strv(&r, CF_EMBED_ENV_MAX, &j->env, &j->envc, err);
        } else if (IS("stdin")) {
            const uint8_t *s;
            size_t sl;
            rc = cf_mp_read_bin(&r, len, &s, &sl, err);
            if (rc == 0 && sl > 0) {
                free(j->stdin_data);
                j->stdin_data = malloc(sl);
                if (!j->stdin_data) {
                    cf_error_set(err, CF_E_NOMEM, "embed: out of memory");
                    goto fail;
                }
                memcpy(j->stdin_data, s, sl);
                j->stdin_len = sl;
            }
        } else if (IS("timeout_us")) {
            rc = read_int_in(&r, 0, INT64_MAX, &j->timeout_us, err);
        } else if (IS("cpu_time_us")) {
            rc = read_int_in(&r, 0, INT64_MAX, &j->cpu_time_us, err);
        } else if (IS("memory")) {
            rc = read_int_in(&r, 0, INT64_MAX, &j->memory_bytes, err);
        } else if (IS("max_stdout")) {
            rc = read_int_in(&r, 0, INT64_MAX, &j->max_stdout, err);
        } else if (IS("max_stderr")) {
            rc = read_int_in(&r, 0, INT64_MAX, &j->max_stderr, err);
        } else if (IS("fuel")) {
            rc = read_int_in(&r, 0, INT64_MAX, &j->fuel, err);
        } else if (IS("max_output")) {
            rc = read_int_in(&r, 0, INT64_MAX, &j->max_output, err);
        } else {
            rc = cf_mp_skip(&r, 2, err);
        }
        if (rc < 0)
            goto fail;
    }
    if (cf_mp_remaining(&r) != 0) {
        bad(err, "bytes after the map");
        goto fail;
    }
    if (!j->runtime || (!j->code_path && !j->code) || !j->argv) {
        bad(err, "a required field is missing");
        goto fail;
    }
    if (!j->env) {
        j->env = calloc(1, sizeof(char *));
        if (!j->env) {
            cf_error_set(err, CF_E_NOMEM, "embed: out of memory");
            goto fail;
        }
    }
    return 0;
fail:
    cf_embed_job_free(j);
    return -1;
}

int cf_embed_reply_decode(const uint8_t *p, size_t len, size_t max_out, size_t max_err, size_t max_output,
                          cf_embed_reply *rep, cf_error *err)
{
    cf_embed_reply_init(rep);
    cf_mp_reader r;
    cf_mp_reader_init(&r, p, len, &frame_limits);
    uint32_t n;
    if (cf_mp_read_map(&r, 1, &n, err) < 0)
        return -1;
    bool have_end = false;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        size_t kl;
        if (cf_mp_read_str(&r, 32, &k, &kl, err) < 0)
            goto fail;
        int rc;
        int64_t v = 0;
        bool b = false;
        if (IS("end")) {
            rc = read_int_in(&r, 0, CF_EMBED__END_COUNT - 1, &v, err);
            rep->end = (int)v;
            have_end = true;
        } else if (IS("seq")) {
            rc = read_int_in(&r, 0, INT64_MAX, &v, err);
            rep->seq = (uint64_t)v;
        } else if (IS("exit_code")) {
            rc = read_int_in(&r, INT32_MIN, INT32_MAX, &v, err);
            rep->exit_code = (int)v;
        } else if (IS("reason")) {
            rc = read_cstr(&r, CF_EMBED_TEXT_MAX, &rep->reason, err);
        } else if (IS("diagnostics")) {
            rc = read_cstr(&r, CF_EMBED_TEXT_MAX * 8, &rep->diagnostics, err);
        } else if (IS("stdout") || IS("stderr")) {
            bool is_out = IS("stdout");
            const uint8_t *s;
            size_t sl;
            rc = cf_mp_read_bin(&r, is_out ? max_out : max_err, &s, &sl, err);
            if (rc == 0) {
                cf_buf *dst = is_out ? &rep->out : &rep->err;
                dst->len = 0;
                rc = cf_buf_append(dst, s, sl, err);
            }
        } else if (IS("output")) {
            const uint8_t *o;
            size_t ol;
            rc = cf_mp_read_bin(&r, max_output, &o, &ol, err);
            if (rc == 0) {
                rep->output.len = 0;
                rc = cf_buf_append(&rep->output, o, ol, err);
                rep->has_output = true;
            }
        } else if (IS("stdout_truncated")) {
            rc = cf_mp_read_bool(&r, &b, err);
            rep->out_truncated = b;
        } else if (IS("stderr_truncated")) {
            rc = cf_mp_read_bool(&r, &b, err);
            rep->err_truncated = b;
        } else if (IS("cached")) {
            rc = cf_mp_read_bool(&r, &b, err);
            rep->cached = b;
        } else if (IS("output_too_big")) {
            rc = cf_mp_read_bool(&r, &b, err);
            rep->output_too_big = b;
        } else if (IS("wall_us")) {
            rc = read_int_in(&r, 0, INT64_MAX, &rep->wall_us, err);
        } else if (IS("cpu_us")) {
            rc = read_int_in(&r, 0, INT64_MAX, &rep->cpu_us, err);
        } else if (IS("peak_memory")) {
            rc = read_int_in(&r, 0, INT64_MAX, &rep->peak_memory_bytes, err);
        } else {
            rc = cf_mp_skip(&r, 2, err);
        }
#undef IS
        if (rc < 0)
            goto fail;
    }
    if (cf_mp_remaining(&r) != 0) {
        bad(err, "bytes after the map");
        goto fail;
    }
    if (!have_end) {
        bad(err, "no end");
        goto fail;
    }
    return 0;
fail:
    cf_embed_reply_free(rep);
    return -1;
}

/* ---- frame I/O ---- */

#define CANCEL_POLL_MS 50

/* Waits for fd to be ready for events, the deadline or the cancel flag. */
static int wait_fd(int fd, short events, int64_t deadline_us, const volatile int *cancel, cf_error *err)
{
    for (;;) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
            cf_error_set(err, CF_E_TIMEOUT, "embed: cancelled");
            if (err)
                err->sys_errno = ECANCELED;
            return -1;
        }
        int timeout_ms = cancel ? CANCEL_POLL_MS : -1;
        if (deadline_us > 0) {
            int64_t left = deadline_us - cf_mono_us();
            if (left <= 0)
                return cf_error_set(err, CF_E_TIMEOUT, "embed: no answer before the deadline");
            int64_t ms = left / 1000 + 1;
            if (timeout_ms < 0 || ms < timeout_ms)
                timeout_ms = ms > 60000 ? 60000 : (int)ms;
        }
        struct pollfd pfd = {.fd = fd, .events = events};
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr < 0 && errno != EINTR)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "embed: poll");
        if (pr > 0)
            return 0;
    }
}

int cf_embed_write_frame(int fd, const cf_buf *frame, int64_t deadline_us, const volatile int *cancel, cf_error *err)
{
    size_t off = 0;
    while (off < frame->len) {
        ssize_t w = send(fd, frame->data + off, frame->len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                if (wait_fd(fd, POLLOUT, deadline_us, cancel, err) < 0)
                    return -1;
                continue;
            }
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "embed: send");
        }
        off += (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes into p. */
static int read_full(int fd, uint8_t *p, size_t n, int64_t deadline_us, const volatile int *cancel, cf_error *err)
{
    size_t got = 0;
    while (got < n) {
        if (wait_fd(fd, POLLIN, deadline_us, cancel, err) < 0)
            return -1;
        ssize_t r = recv(fd, p + got, n - got, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "embed: recv");
        }
        if (r == 0) {
            cf_error_set(err, CF_E_SYSTEM, "embed: the other side closed the connection");
            if (err)
                err->sys_errno = 0;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

int cf_embed_read_frame(int fd, size_t max, int64_t deadline_us, const volatile int *cancel, cf_buf *out,
                        cf_error *err)
{
    uint8_t hdr[4];
    if (read_full(fd, hdr, sizeof(hdr), deadline_us, cancel, err) < 0)
        return -1;
    uint32_t n = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    if (n > max)
        return cf_error_set(err, CF_E_LIMIT, "embed: frame of %u bytes (max %zu)", n, max);
    out->len = 0;
    if (n == 0)
        return bad(err, "empty frame");
    uint8_t *buf = malloc(n);
    if (!buf)
        return cf_error_set(err, CF_E_NOMEM, "embed: out of memory");
    if (read_full(fd, buf, n, deadline_us, cancel, err) < 0) {
        free(buf);
        return -1;
    }
    int rc = cf_buf_append(out, buf, n, err);
    free(buf);
    return rc;
}
