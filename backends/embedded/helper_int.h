/* The embedded-runtime helper (codefleet-embed-helper): one process per
 * worker slot and runtime, started by the worker inside the sandbox
 * (namespaces, seccomp, cgroup, no capabilities), serving one job at a time
 * over the socket it inherits as fd CF_RUN_PASS_FD.  It holds no worker
 * secret: it is exec'd, not forked from the worker.
 *
 * A runtime is a pair of functions: init once, run per job.  run fills the
 * reply; it never exits the process for anything a guest does. */
#ifndef CF_EMBED_HELPER_H
#define CF_EMBED_HELPER_H

#include "proto_int.h"

/* Monotonic deadline of the running job, for runtimes' interrupt checks. */
typedef struct helper_clock {
    int64_t start_us;
    int64_t deadline_us;   /* wall clock */
    int64_t cpu_limit_us;  /* 0: none; thread CPU time since start */
    int64_t cpu_start_us;
} helper_clock;

void helper_clock_start(helper_clock *c, const cf_embed_job *job);
/* CPU time of the calling thread (us). */
int64_t helper_thread_cpu_us(void);

/* Reads a whole (small) file, at most max bytes; -1 on error or too big. */
int helper_read_file(const char *path, size_t max, cf_buf *out);
int helper_write_file(const char *path, const void *data, size_t len);

/* Sets reply->reason (printf), replacing what was there. */
void helper_reason(cf_embed_reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int helper_wasm_init(cf_error *err);
void helper_wasm_run(const cf_embed_job *job, cf_embed_reply *reply);
int helper_js_init(cf_error *err);
void helper_js_run(const cf_embed_job *job, cf_embed_reply *reply);

#endif
