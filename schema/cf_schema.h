/* cf_schema: wire schema v1 for execution requests and results.
 *
 * The normative, language-neutral description is schema/SPEC.md; this header
 * is the C view of it.  Encoding is msgpack: a map with string keys and a
 * "v" (major version) field.  Decoders treat bytes as hostile (see
 * cf_decode_limits).  All times are microseconds (durations) or
 * microseconds since the Unix epoch (timestamps).
 *
 * Ownership: every pointer inside a decoded cf_request / cf_result is owned
 * by that struct and released by cf_request_clear / cf_result_clear.
 * Structs start zeroed (= all optional fields absent).
 */
#ifndef CF_SCHEMA_H
#define CF_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"

#define CF_SCHEMA_VERSION 1
#define CF_ID_MAX 128 /* max bytes of a request id */

typedef enum cf_language {
    CF_LANG_NONE = 0,
    CF_LANG_COMMAND,    /* argv, no source */
    CF_LANG_SHELL,      /* POSIX sh source */
    CF_LANG_PYTHON,     /* python3 source */
    CF_LANG_JAVASCRIPT, /* JavaScript source (node on process/sandbox) */
    CF_LANG_WASM,       /* a WebAssembly module (module bytes) */
    CF_LANG_C,          /* C source, compiled (gcc) */
    CF_LANG_CPP,        /* C++ source, compiled (g++) */
    CF_LANG_RUST,       /* Rust source, compiled (rustc) */
    CF_LANG_GO,         /* Go source, compiled (go build) */
    CF_LANG_TYPESCRIPT, /* TypeScript source, compiled (tsc) and run by node */
    CF_LANG__COUNT
} cf_language;

typedef enum cf_status {
    CF_STATUS_SUCCESS = 0,      /* ran, exited 0 */
    CF_STATUS_FAILED,           /* user code exited non-zero or was signalled */
    CF_STATUS_TIMEOUT,          /* wall-clock or CPU-time limit hit */
    CF_STATUS_MEMORY_EXCEEDED,  /* killed by the memory limit */
    CF_STATUS_COMPILE_FAILED,   /* a build/compile step failed before running */
    CF_STATUS_REJECTED,         /* never ran: invalid, unenforceable policy, deadline passed */
    CF_STATUS_INTERNAL_ERROR,   /* the worker or sandbox broke, not the user's code */
    CF_STATUS_CANCELLED,        /* stopped, or never started, because its sender cancelled it */
    CF_STATUS__COUNT
} cf_status;

/* Languages whose source is built before it runs (compile step, compile
 * cache, compile_failed with diagnostics). */
bool cf_language_compiled(cf_language l);

/* How the code is run. */
typedef enum cf_harness {
    CF_HARNESS_NONE = 0, /* the code is a program */
    CF_HARNESS_FUNCTION, /* the code defines run(input): its return value is the output */
} cf_harness;

typedef enum cf_network_policy {
    CF_NET_UNSPECIFIED = 0, /* no requirement: the backend's own isolation applies */
    CF_NET_DISABLED,        /* no network at all (empty network namespace) */
    CF_NET_ENABLED,         /* network wanted */
} cf_network_policy;

typedef enum cf_fs_mode {
    CF_FS_UNSPECIFIED = 0, /* no requirement */
    CF_FS_NONE,            /* nothing of the host: only the private work directory */
    CF_FS_WORKSPACE_RO,    /* the request's workspace, read-only */
    CF_FS_WORKSPACE_RW,    /* the request's workspace, read-write (written back) */
    CF_FS_PATHS,           /* explicit host paths, read-only and read-write */
} cf_fs_mode;

typedef struct cf_bytes {
    uint8_t *data; /* NULL when absent */
    size_t len;
} cf_bytes;

typedef struct cf_strmap_entry {
    char *key;
    char *value;
} cf_strmap_entry;

typedef struct cf_file {
    char *path;       /* relative path inside the work directory (validated by backends) */
    cf_bytes content;
} cf_file;

/* Requested controls.  Zero means "not requested" for every number: the
 * worker fills timeout and output caps from its configured defaults. */
typedef struct cf_policy {
    cf_network_policy network;
    cf_fs_mode fs_mode;
    char **fs_read_only; /* CF_FS_PATHS */
    size_t n_fs_read_only;
    char **fs_read_write;
    size_t n_fs_read_write;
    bool env_allow_set;  /* environment allowlist given (possibly empty) */
    char **env_allow;    /* names of worker environment variables passed through */
    size_t n_env_allow;
    int64_t timeout_us;        /* wall clock */
    int64_t cpu_time_us;
    int64_t memory_bytes;
    int64_t max_processes;
    int64_t max_stdout_bytes;
    int64_t max_stderr_bytes;
    int64_t max_file_size_bytes;
    /* Compile step (compiled languages): its own wall clock and memory,
     * narrowing the operator's compile limits. */
    int64_t compile_timeout_us;
    int64_t compile_memory_bytes;
} cf_policy;

/* One test case: the program (built once) runs once per case, each time
 * in a fresh sandbox, with the case's stdin, input and arguments. */
typedef struct cf_case {
    char *name;           /* optional label */
    cf_bytes stdin_data;  /* absent = empty */
    cf_bytes input;       /* structured input (one msgpack value); len 0 = absent */
    char **argv;          /* extra arguments */
    size_t argc;
    bool has_expect;      /* expect_stdout given (possibly empty) */
    cf_bytes expect_stdout;
} cf_case;

/* A workspace operation (SPEC.md section 3.5): the worker does it on the
 * request's workspace itself, under the topic's profile, and runs no
 * program; a request carrying one has no language. */
typedef enum cf_ws_op {
    CF_WS_OP_NONE = 0,
    CF_WS_OP_LIST,        /* paths and sizes; pattern (a glob) narrows them */
    CF_WS_OP_READ,        /* one file's bytes */
    CF_WS_OP_WRITE,       /* create or replace one file with content */
    CF_WS_OP_DELETE,      /* remove one file */
    CF_WS_OP_GREP,        /* the lines holding pattern (a fixed string), path:line:text */
    CF_WS_OP_STR_REPLACE, /* replace old_str, which must occur exactly once, by new_str */
    CF_WS_OP_INSERT,      /* insert new_str after line insert_line (0: before the first) */
    CF_WS_OP_APPLY_PATCH, /* content is a V4A patch: its files added, updated, moved, deleted, all or nothing */
    CF_WS_OP__COUNT
} cf_ws_op;

typedef struct cf_workspace_op {
    cf_ws_op op;
    char *path;              /* read, write, delete, str_replace, insert; grep and list: NULL = every file */
    char *pattern;           /* list: a glob; grep: the text searched for */
    cf_bytes content;        /* write: the file's bytes; apply_patch: the patch */
    cf_bytes old_str;        /* str_replace: non-empty */
    cf_bytes new_str;        /* str_replace, insert */
    bool has_content, has_new_str, has_insert_line, has_expected_revision, has_first_line, has_last_line;
    int64_t insert_line;     /* insert: 0 = at the top */
    int64_t first_line;      /* read: the first line to answer (1-based; absent: 1) */
    int64_t last_line;       /* read: the last one, included (absent: to the end) */
    int64_t expected_revision; /* the writing ops: only if the workspace is at this revision */
} cf_workspace_op;

/* The op's name ("list", "read", ...). */
const char *cf_ws_op_name(cf_ws_op op);
/* "read" -> CF_WS_OP_READ; -1 for an unknown name. */
int cf_ws_op_parse(const char *name, cf_ws_op *out);
/* The ops that change the workspace. */
bool cf_ws_op_writes(cf_ws_op op);

#define CF_CASES_MAX 1000     /* cases per request */
#define CF_COLLECT_MAX 64     /* collect patterns per request */
#define CF_COMPILE_FLAGS_MAX 64

typedef struct cf_request {
    char *id;            /* required: idempotency key, 1..CF_ID_MAX bytes, printable */
    cf_language language; /* required, except with workspace_op (then NONE) */
    char *backend;       /* optional backend name */
    cf_bytes code;       /* source text (shell, python, javascript) */
    char **argv;         /* command: argv[0] is the program; others: extra arguments */
    size_t argc;
    cf_bytes module;     /* wasm module bytes */
    cf_bytes stdin_data; /* bytes fed to stdin; absent = empty stdin */
    cf_bytes input;      /* structured input: one msgpack value, validated; absent = len 0 */
    cf_strmap_entry *env; /* extra environment variables */
    size_t n_env;
    cf_file *files;
    size_t n_files;
    cf_policy policy;
    char *workspace;     /* workspace id (issue 4) */
    char *thread;        /* thread id (checkpoints) */
    char *identity;      /* caller identity for audit */
    char *reply_to;      /* result topic override */
    int64_t deadline_us; /* absolute, epoch us; 0 = none */
    int64_t created_us;  /* epoch us; 0 = unknown */
    cf_strmap_entry *trace; /* trace context (W3C traceparent/tracestate...) */
    size_t n_trace;
    /* Compiled languages and harnesses (issue 9). */
    cf_harness harness;
    char **compile_flags; /* extra flags, each from the worker's per-language allowlist */
    size_t n_compile_flags;
    cf_case *cases;       /* run once per case instead of once */
    size_t n_cases;
    bool stop_on_failure; /* cases: stop at the first case that does not succeed */
    char **collect;       /* glob patterns of work-directory files returned in the result */
    size_t n_collect;
    bool stream;          /* publish output chunks while the program runs (SPEC.md "Output chunks") */
    char *image;          /* container backend: an image name from the operator's allowlist */
    bool notify_start;    /* the worker publishes a start notice when it takes the request into a slot
                           * (SPEC.md "Start notices"): a waiting client can tell queued from running */
    cf_workspace_op *workspace_op; /* NULL: a program runs; else this op on `workspace`, and language is NONE */
    char *session; /* session id (SPEC 3.6): a python cell whose variables persist in the workspace */
} cf_request;

typedef struct cf_diagnostic {
    char *level;   /* "error", "warning", "note", "help" */
    char *message;
    char *file;    /* optional; relative to the work directory */
    int64_t line;  /* 1-based; 0 = unknown */
    int64_t column;
    char *code;    /* optional compiler code: "E0308", "TS2322", "-Wunused-variable" */
    int64_t end_line;   /* 0 = unknown */
    int64_t end_column;
    struct cf_diagnostic *children; /* notes attached to this one (no deeper nesting) */
    size_t n_children;
} cf_diagnostic;

/* The compile step of a compiled language. */
typedef struct cf_compile_info {
    bool present;
    bool cached;          /* the build came from the worker's compile cache */
    int64_t wall_time_us; /* of the compiler run (0 when cached) */
    int64_t cpu_time_us;
    int64_t peak_memory_bytes;
} cf_compile_info;

/* One case's outcome. */
typedef struct cf_case_result {
    char *name;
    cf_status status;
    bool has_exit_code;
    int exit_code;
    int signal;
    cf_bytes stdout_data;
    cf_bytes stderr_data;
    bool stdout_truncated;
    bool stderr_truncated;
    cf_bytes output;
    int64_t wall_time_us;
    int64_t cpu_time_us;
    int64_t peak_memory_bytes;
    int match;            /* 0 = no expectation, 1 = stdout matched, -1 = mismatch */
    char *reason;
} cf_case_result;

/* A file collected from the work directory (request "collect"). */
typedef struct cf_out_file {
    char *path;
    int64_t size;         /* the file's full size */
    cf_bytes content;     /* possibly cut: truncated says so */
    bool truncated;
    bool listed;          /* a listing's entry (workspace_op list): no content is sent */
} cf_out_file;

typedef struct cf_result_meta {
    char *backend;
    char *isolation; /* "host_local", "sandbox", "container", "wasm", "in_process" */
    char *language;
    char *worker;
    char *identity;
    int64_t attempt; /* 1 for the first delivery; higher after redelivery */
    bool replay;     /* answered from the idempotency store, not run again */
    char *toolchain; /* compiled languages: the compiler's version ("gcc 12.2.0") */
    char *sandbox;   /* sandbox backend: "warm" (prepared ahead) or "cold" (built for the request) */
    char *run;       /* streaming: the execution's run id, as in its chunks */
    char *traceparent; /* W3C traceparent of the worker's span for the request */
} cf_result_meta;

typedef struct cf_result {
    char *id;                 /* the request id */
    cf_status status;
    bool has_exit_code;
    int exit_code;
    int signal;               /* terminating signal, 0 = none */
    cf_bytes stdout_data;
    cf_bytes stderr_data;
    bool stdout_truncated;
    bool stderr_truncated;
    cf_bytes output;          /* structured output: one msgpack value; len 0 = absent */
    cf_diagnostic *diagnostics;
    size_t n_diagnostics;
    int64_t wall_time_us;
    int64_t cpu_time_us;
    int64_t peak_memory_bytes;
    cf_result_meta meta;
    char *reason;             /* why: rejection reason, error text, limit hit */
    /* The request's reply_to could not take this result (why): it went to
     * the default result topic instead.  Says nothing about the run. */
    char *reply_to_error;
    /* Workspace outcome (issue 4): set when the request named a workspace. */
    int64_t workspace_revision; /* 0 = unchanged/absent */
    char **changed_paths;
    size_t n_changed_paths;
    bool workspace_conflict;
    /* Checkpoint outcome (issue 4): set when the request named a thread. */
    char *checkpoint_id;      /* the checkpoint the run saved; NULL = none */
    bool checkpoint_conflict; /* a newer checkpoint was saved meanwhile: nothing saved */
    int64_t finished_us;      /* epoch us when the result was produced */
    cf_compile_info compile;  /* compiled languages */
    cf_case_result *cases;    /* one per case run (requests with cases) */
    size_t n_cases;
    cf_out_file *files;       /* request "collect" */
    size_t n_files;
    bool files_truncated;     /* some matching file was left out or cut (byte cap) */
    int64_t chunks;           /* streaming: output chunks published (seq 0..chunks-1) */
    /* Session outcome (SPEC 3.6): set for a request that named a session. */
    int64_t session_cell;     /* this cell's number in the session (1 = it started empty); 0 = absent */
    bool session_restored;    /* the cell started from the session's saved state */
    char **session_lost;      /* names the cell left that could not be saved (a warning each says why) */
    size_t n_session_lost;
} cf_result;

/* Where a session keeps its state in its workspace (SPEC 3.6):
 * <dir>/<session>.python, a workspace file like any other. */
#define CF_SESSION_STATE_DIR ".codefleet/sessions"

/* Limits applied by every decoder before anything is allocated. */
typedef struct cf_decode_limits {
    size_t max_total_bytes;   /* whole message */
    size_t max_str_bytes;     /* any string (code is bin/str: max_bin_bytes) */
    size_t max_bin_bytes;     /* any binary or large text field */
    size_t max_elements;      /* declared entries of one array or map */
    unsigned max_depth;       /* nesting depth, the top-level map is depth 1 */
} cf_decode_limits;

extern const cf_decode_limits cf_decode_limits_default;

/* Names <-> enums.  _parse returns -1 for unknown names. */
const char *cf_language_name(cf_language l);
int cf_language_parse(const char *name, cf_language *out);
const char *cf_status_name(cf_status s);
int cf_status_parse(const char *name, cf_status *out);
const char *cf_network_name(cf_network_policy n);
const char *cf_fs_mode_name(cf_fs_mode m);

/* Encoders: *out is malloc'd, caller frees out->data. */
int cf_request_encode(const cf_request *req, cf_bytes *out, cf_error *err);
int cf_result_encode(const cf_result *res, cf_bytes *out, cf_error *err);

/* What makes two requests "the same request" for idempotency: SHA-256 of
 * the request's canonical encoding (env and files sorted by name) without
 * its delivery metadata (created_us, deadline_us, trace, reply_to), which a
 * client may set afresh when it resubmits.  Take it of the request as received,
 * before any worker fills defaults.  hex: 64 lowercase hex digits + NUL. */
#define CF_DIGEST_HEX 65
int cf_request_digest(const cf_request *req, char hex[CF_DIGEST_HEX], cf_error *err);

/* Decoders.  On failure the struct is cleared and err says what and where
 * ("policy.timeout_us: expected integer").  limits may be NULL (defaults).
 * Unknown keys are ignored; a "v" other than 1 is rejected. */
int cf_request_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_request *out, cf_error *err);
int cf_result_decode(const void *buf, size_t len, const cf_decode_limits *limits, cf_result *out, cf_error *err);

/* Best-effort: reads the top-level "id" string of a message that may
 * otherwise be malformed (so it can still be answered "rejected").
 * Returns 0 and fills id (NUL-terminated) or -1 if no usable id. */
int cf_request_peek_id(const void *buf, size_t len, char *id, size_t idsz);

/* Whether s[0..len) is valid UTF-8 (what every str field must be). */
bool cf_utf8_valid(const uint8_t *s, size_t len);

/* Checks an id: 1..CF_ID_MAX bytes of printable ASCII without spaces. */
bool cf_id_valid(const char *id, size_t len);

/* An image name (request "image", the worker's container-images): 1..
 * CF_IMAGE_NAME_MAX of a-z 0-9 . _ -, starting with a letter or digit. */
#define CF_IMAGE_NAME_MAX 64
bool cf_image_name_valid(const char *name);

/* Whether v (one msgpack value; len 0 = absent) fits where it sits:
 * inside outer_levels containers of a message (1 for a top-level field,
 * CF_CASE_VALUE_LEVELS for a case's input/output), within the default
 * decoder limits. */
#define CF_CASE_VALUE_LEVELS 3 /* message map, cases array, case map */
int cf_value_check_nested(const cf_bytes *v, const char *field, unsigned outer_levels, cf_error *err);

/* Validates that buf holds exactly one msgpack value within limits
 * (used for input/output fields and checkpoint state). */
int cf_msgpack_validate(const void *buf, size_t len, const cf_decode_limits *limits, cf_error *err);

void cf_request_clear(cf_request *req);
void cf_result_clear(cf_result *res);
void cf_diagnostics_free(cf_diagnostic *v, size_t n);
void cf_case_result_clear(cf_case_result *c);

/* Convenience setters that copy their argument (return -1 on ENOMEM). */
int cf_bytes_set(cf_bytes *b, const void *data, size_t len);
int cf_str_set(char **dst, const char *src);
int cf_result_set_reason(cf_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
