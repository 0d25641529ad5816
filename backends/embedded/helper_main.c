/* codefleet-embed-helper: serves wasm or js jobs for one worker slot.
 *
 * Usage: codefleet-embed-helper wasm|js   (the job socket is fd 4)
 * Exits 0 when the worker closes the socket, 2 on a protocol error (the
 * worker then replaces it).  stderr goes to the worker's log. */
#include "helper_int.h"

#include "cf_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>


void helper_clock_start(helper_clock *c, const cf_embed_job *job)
{
    c->start_us = cf_mono_us();
    c->deadline_us = job->timeout_us > 0 ? c->start_us + job->timeout_us : INT64_MAX;
    c->cpu_limit_us = job->cpu_time_us;
    c->cpu_start_us = helper_thread_cpu_us();
}

int64_t helper_thread_cpu_us(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int helper_read_file(const char *path, size_t max, cf_buf *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    out->len = 0;
    uint8_t chunk[65536];
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || (r > 0 && out->len + (size_t)r > max) ||
            (r > 0 && cf_buf_append(out, chunk, (size_t)r, NULL) < 0)) {
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
    }
    close(fd);
    return 0;
}

int helper_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    return close(fd);
}

void helper_reason(cf_embed_reply *r, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    free(r->reason);
    r->reason = cf_strdup(buf);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "wasm") != 0 && strcmp(argv[1], "js") != 0)) {
        fprintf(stderr, "usage: codefleet-embed-helper wasm|js (job socket on fd %d)\n", CF_RUN_PASS_FD);
        return 2;
    }
    bool wasm = strcmp(argv[1], "wasm") == 0;
    /* Executed from a descriptor, our name would be the descriptor's number. */
    (void)prctl(PR_SET_NAME, "embed-helper", 0, 0, 0);
    int sock = CF_RUN_PASS_FD;
    if (fcntl(sock, F_GETFD) < 0) {
        fprintf(stderr, "embed-helper: no job socket on fd %d\n", sock);
        return 2;
    }
    cf_error err;
    cf_error_clear(&err);
    if ((wasm ? helper_wasm_init(&err) : helper_js_init(&err)) < 0) {
        fprintf(stderr, "embed-helper: %s runtime: %s\n", argv[1], err.msg);
        return 3;
    }
    cf_buf in, out;
    cf_buf_init(&in, 0);
    cf_buf_init(&out, 0);
    for (;;) {
        if (cf_embed_read_frame(sock, CF_EMBED_JOB_FRAME_MAX, 0, NULL, &in, &err) < 0) {
            if (err.code == CF_E_SYSTEM && err.sys_errno == 0)
                return 0; /* the worker closed the socket */
            fprintf(stderr, "embed-helper: reading a job: %s\n", err.msg);
            return 2;
        }
        cf_embed_job job;
        cf_embed_reply reply;
        cf_embed_reply_init(&reply);
        if (cf_embed_job_decode(in.data, in.len, &job, &err) < 0) {
            fprintf(stderr, "embed-helper: %s\n", err.msg);
            return 2;
        }
        reply.seq = job.seq;
        cf_buf_init(&reply.out, job.max_stdout > 0 ? (size_t)job.max_stdout : 1);
        cf_buf_init(&reply.err, job.max_stderr > 0 ? (size_t)job.max_stderr : 1);
        if (job.runtime != (wasm ? CF_EMBED_WASM : CF_EMBED_JS)) {
            reply.end = CF_EMBED_HELPER_ERROR;
            helper_reason(&reply, "job for another runtime");
        } else if (wasm) {
            helper_wasm_run(&job, &reply);
        } else {
            helper_js_run(&job, &reply);
        }
        cf_embed_job_free(&job);
        out.len = 0;
        if (cf_embed_reply_encode(&reply, &out, &err) < 0 || cf_embed_write_frame(sock, &out, 0, NULL, &err) < 0) {
            fprintf(stderr, "embed-helper: replying: %s\n", err.msg);
            return 2;
        }
        cf_embed_reply_free(&reply);
    }
}
