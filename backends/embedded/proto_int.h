/* embed_proto: the messages between the worker and its embedded-runtime
 * helpers (codefleet-embed-helper, one per slot and backend).
 *
 * A frame is a 4-byte little-endian length and a msgpack map.  The worker
 * sends one job, the helper answers one reply, and nothing else crosses the
 * socket.  Both sides decode with a hard bound on the frame size: the
 * helper runs code we do not trust and may itself be compromised, so the
 * worker treats a reply like any other input from outside.
 */
#ifndef CF_EMBED_PROTO_H
#define CF_EMBED_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_util.h"

#define CF_EMBED_ARGS_MAX 4096
#define CF_EMBED_ENV_MAX 512
/* A job carries stdin and paths; a reply carries the capped outputs and
 * text.  Both are bounded by what the worker's own limits allow. */
#define CF_EMBED_TEXT_MAX 8192
/* The largest job frame a helper reads (a job larger is refused before it
 * is sent: code, input and stdin are the request's, bounded by it). */
#define CF_EMBED_JOB_FRAME_MAX (64u << 20)

typedef enum cf_embed_runtime {
    CF_EMBED_WASM = 1, /* wasmtime, WASI preview 1 */
    CF_EMBED_JS = 2,   /* QuickJS-ng */
} cf_embed_runtime;

/* One execution, as the helper sees it (paths are the helper's view). */
typedef struct cf_embed_job {
    uint64_t seq;           /* echoed in the reply: a late reply never passes for another job's */
    int runtime;            /* cf_embed_runtime */
    char *cache_scope;      /* wasm: compiled modules are shared only within a scope (the profile) */
    char *code_path;        /* main.wasm / main.js, or NULL: code is inline */
    uint8_t *code;          /* inline program (js: no files at all) */
    size_t code_len;
    char *input_path;       /* input.json, or NULL */
    char *input_json;       /* inline input as JSON text, or NULL */
    char *output_path;      /* where the structured output goes, or NULL: in the reply */
    char *work_dir;         /* the execution's work directory (wasm preopen) */
    bool work_rw;
    char *run_dir;          /* run/ (wasm: read-only preopen) */
    char *out_dir;          /* run/out (wasm: read-write preopen) */
    char **argv;            /* NULL-terminated; argv[0] is the program's name */
    size_t argc;
    char **env;             /* "K=V", NULL-terminated */
    size_t envc;
    uint8_t *stdin_data;
    size_t stdin_len;
    int64_t timeout_us;     /* wall clock, from the start of compilation */
    int64_t cpu_time_us;    /* 0: none; CPU of the executing thread */
    int64_t memory_bytes;   /* guest memory (wasm linear memory + tables; js heap) */
    int64_t max_stdout, max_stderr;
    int64_t max_output;     /* inline output: larger JSON text is not sent (output_too_big) */
    int64_t fuel;           /* wasm: 0 = no fuel metering */
} cf_embed_job;

/* How the run ended, as the helper saw it. */
typedef enum cf_embed_end {
    CF_EMBED_EXITED = 0,     /* exit_code valid (proc_exit, or 0 at the end of _start / the script) */
    CF_EMBED_FAILED,         /* the guest failed: a trap, an uncaught exception (reason, diagnostics) */
    CF_EMBED_TIMEOUT,        /* the wall-clock deadline (epoch / interrupt handler) */
    CF_EMBED_CPU_EXCEEDED,   /* the cpu_time budget (thread CPU clock or fuel) */
    CF_EMBED_MEMORY,         /* the memory limit ended the run */
    CF_EMBED_BAD_PROGRAM,    /* the module does not validate (compile_failed); a js SyntaxError is FAILED */
    CF_EMBED_LINK_FAILED,    /* it needs an import we do not provide (failed) */
    CF_EMBED_HELPER_ERROR,   /* the helper itself could not do it (internal_error) */
    CF_EMBED__END_COUNT
} cf_embed_end;

typedef struct cf_embed_reply {
    uint64_t seq;          /* the job's */
    int end;               /* cf_embed_end */
    int exit_code;
    char *reason;          /* NULL or one line */
    char *diagnostics;     /* NULL or text (a stack trace) */
    cf_buf output;         /* the structured output as JSON text, when the job had no output_path */
    bool has_output;
    bool output_too_big;   /* there was one, larger than the job's max_output */

    cf_buf out, err;
    bool out_truncated, err_truncated;
    bool cached;           /* wasm: the compiled module came from the helper's cache */
    int64_t wall_us, cpu_us;
    int64_t peak_memory_bytes; /* this execution's guest memory at its largest */
} cf_embed_reply;

void cf_embed_job_free(cf_embed_job *job);
void cf_embed_reply_init(cf_embed_reply *r);
void cf_embed_reply_free(cf_embed_reply *r);

/* Encodes into a frame (length prefix included) in out. */
int cf_embed_job_encode(const cf_embed_job *job, cf_buf *out, cf_error *err);
int cf_embed_reply_encode(const cf_embed_reply *r, cf_buf *out, cf_error *err);

/* Decodes the payload of a frame (no prefix).  Bounded: strings and bytes
 * are copied only when they fit the caps below; anything malformed,
 * unknown in type or oversized fails with CF_E_INVALID/CF_E_LIMIT. */
int cf_embed_job_decode(const uint8_t *p, size_t len, cf_embed_job *job, cf_error *err);
/* max_out/max_err: the caps the job had (a reply past them is refused). */
int cf_embed_reply_decode(const uint8_t *p, size_t len, size_t max_out, size_t max_err, size_t max_output,
                          cf_embed_reply *r, cf_error *err);

/* Frame I/O.  Both wait until deadline_us (monotonic; 0 = no deadline)
 * and, when cancel is given, stop within 50 ms of *cancel becoming
 * non-zero: -1 with CF_E_TIMEOUT (sys_errno ECANCELED when cancelled).
 * cf_embed_write_frame sends the whole frame (a peer that stops reading
 * cannot block the caller past the deadline).  cf_embed_read_frame reads
 * one frame of at most max payload bytes into out: -1 with CF_E_LIMIT for
 * a larger one, CF_E_SYSTEM with sys_errno 0 at the end of the stream. */
int cf_embed_write_frame(int fd, const cf_buf *frame, int64_t deadline_us, const volatile int *cancel, cf_error *err);
int cf_embed_read_frame(int fd, size_t max, int64_t deadline_us, const volatile int *cancel, cf_buf *out,
                        cf_error *err);

const char *cf_embed_end_name(int end);

#endif
