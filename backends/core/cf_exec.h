/* exec_common: request handling shared by the process-based backends
 * (process, sandbox).
 *
 * A backend's execute() is then only about *where* and *how* a program
 * runs; everything about the request itself lives here: validation (a
 * request with an unsafe path, a bad environment name or a missing
 * interpreter is rejected before anything is created), the per-execution
 * directories and the files placed into them, the environment, argv, the
 * run spec's common fields, mapping the runner's outcome to a result status,
 * output.json, and collecting the work directory afterwards.
 *
 * Layout of one execution (created below a parent directory the backend
 * chooses; both names are random cf-XXXXXX directories):
 *   work/   the program's current directory: workspace files (placed
 *           first), then the request's files.  Collected afterwards.
 *   run/    main.py / main.js / main.sh and input.json, plus run/out/ for
 *           output.json.  Never collected.
 * The program sees both through a cf_exec_view: the host paths for the
 * process backend, /work and /run/codefleet inside the sandbox.
 *
 * Life cycle (every call after check may set job->rejected, then the
 * backend returns 0 at once; cf_exec_job_free always):
 *   cf_exec_job_check -> cf_exec_job_dirs -> cf_exec_job_fill ->
 *   cf_exec_job_spec -> cf_run -> cf_exec_job_finish -> cf_exec_job_free
 */
#ifndef CF_EXEC_COMMON_H
#define CF_EXEC_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cf_backend.h"
#include "cf_runner.h"
#include "cf_workdir.h"

#define CF_EXEC_ENV_MAX 512
#define CF_EXEC_ARGV_MAX 4096
#define CF_EXEC_PATH_BYTES 4200
#define CF_EXEC_NOTES_BYTES 2048
#define CF_EXEC_FALLBACK_TIMEOUT_US (30 * 1000000LL) /* the worker normally fills policy defaults */

/* What a process-based backend keeps from its configuration. */
typedef struct cf_exec_base {
    char *work_root;
    char *python_path; /* NULL: language disabled */
    char *node_path;
    char *shell_path;
    char *exec_path;   /* PATH for user code and command lookup */
    size_t max_files_bytes;
    size_t max_output_file_bytes;
    uint32_t languages; /* bit per cf_language available (compiled ones: cfg->compiled_languages) */
    bool memory_is_rlimit_as; /* memory = RLIMIT_AS (explains node's SIGTRAP) */
    bool children_bounded;    /* the worker bounds all its children's memory together (cf_backend_config) */
    /* An embedded runtime (wasm, js backends): languages it runs in-process
     * and the name that stands for their interpreter in messages. */
    uint32_t embedded_languages;
    const char *embedded_runtime;
    const char *exec_where;   /* " inside the sandbox": the program has its own root, so command paths
                               * are not looked up on the host; NULL: the host is its root */
    /* Each execution's RLIMIT_MSGQUEUE: the worker's over twice the slots
     * (0: the worker's is unlimited, none set).  POSIX message queues'
     * bytes count against the user-namespace creator's limit on the way up:
     * where that is root (the container backend, or a sandbox whose
     * namespaces root creates), one program took all of root's without it. */
    int64_t msgqueue_share;
    char notes[CF_EXEC_NOTES_BYTES];
} cf_exec_base;

/* Copies what cfg says into b (work_root created 0711 when missing);
 * interpreters that are not executable disable their language and add a
 * note.  who: "process", "sandbox" (for messages).  Free with
 * cf_exec_base_free (also after a failure). */
int cf_exec_base_init(cf_exec_base *b, const char *who, const cf_backend_config *cfg, cf_error *err);
void cf_exec_base_free(cf_exec_base *b);

/* Appends "; text" to b->notes (bounded). */
void cf_exec_notes_add(cf_exec_base *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Where the program sees its directories. */
typedef struct cf_exec_view {
    const char *work; /* NULL: the host path */
    const char *run;
} cf_exec_view;

typedef struct cf_exec_envb {
    char *v[CF_EXEC_ENV_MAX + 1];
    size_t n;
} cf_exec_envb;

typedef struct cf_exec_job {
    const cf_exec_base *base;
    const char *who;
    const cf_request *req;
    cf_result *res;
    bool rejected;          /* res says why; the backend returns 0 */
    const char *interp;     /* interpreter path (NULL for commands) */
    const char *code_file;  /* "main.py"... or NULL */
    cf_workdir *top;        /* one cf-XXXXXX per execution holding work/ and run/ */
    cf_workdir *work;
    cf_workdir *run;
    cf_exec_envb env;
    char **argv;
    const cf_exec_program *program;   /* ctx->program: run this instead of the request's code */
    cf_exec_take *take;               /* ctx->take */
    char **owned;                     /* argv strings made here (freed with the job) */
    size_t n_owned;
    char exe[CF_EXEC_PATH_BYTES];     /* program path as the program's root sees it */
    char work_in[CF_EXEC_PATH_BYTES]; /* the views, resolved */
    char run_in[CF_EXEC_PATH_BYTES];
    /* The host directory that is the program's root (a container image),
     * where command names are looked up; NULL: the host's own.  Set by
     * the backend before cf_exec_job_fill. */
    const char *root;
} cf_exec_job;

/* Whether path (absolute, as the program sees it) is an executable regular
 * file below root, symlinks resolved inside root (root NULL: the host). */
bool cf_exec_file_in_root(const char *root, const char *path);
/* stat of path (absolute, as the program sees it) below root, symlinks
 * resolved inside root; false when it is not there. */
struct stat;
bool cf_exec_stat_in_root(const char *root, const char *path, struct stat *sb);

/* Validates req (language, argv, file paths and sizes, environment names)
 * and fills res->meta.  A bad request sets job->rejected (res->status
 * REJECTED with the reason) and returns 0; -1 only for out of memory. */
int cf_exec_job_check(cf_exec_job *job, const cf_exec_base *base, const char *who, const char *isolation,
                      const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err);

/* The opening of every backend's execute: ctx's slot within 0..slots-1
 * (slots 0: the backend needs none), then cf_exec_job_check.  1: go on;
 * 0: the request is rejected (res says why; the backend returns 0); -1:
 * err set. */
int cf_exec_job_open(cf_exec_job *job, const cf_exec_base *base, const char *who, const char *isolation, int slots,
                     const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err);

/* Creates work/ and run/ (with run/out/) below parent, owned by
 * owner:group when owner is not (uid_t)-1.  Errors are the backend's
 * (retriable). */
int cf_exec_job_dirs(cf_exec_job *job, const char *parent, uid_t owner, gid_t group, cf_error *err);

/* The same directories made ahead of their execution (a warm sandbox
 * binds them before the request exists): cf_exec_dirs_create, then
 * cf_exec_job_adopt_dirs moves them into the job (d is emptied);
 * cf_exec_job_return_dirs moves them back out before cf_exec_job_free
 * when the caller disposes of them itself: cf_exec_dirs_destroy removes
 * the tree, cf_exec_dirs_release only forgets it (a tmpfs about to be
 * unmounted). */
typedef struct cf_exec_dirs {
    cf_workdir *top, *work, *run;
} cf_exec_dirs;
int cf_exec_dirs_create(const char *parent, uid_t owner, gid_t group, const char *who, cf_exec_dirs *d,
                        cf_error *err);
void cf_exec_dirs_destroy(cf_exec_dirs *d);
void cf_exec_dirs_release(cf_exec_dirs *d);
void cf_exec_job_adopt_dirs(cf_exec_job *job, cf_exec_dirs *d);
void cf_exec_job_return_dirs(cf_exec_job *job, cf_exec_dirs *d);

/* Places the workspace files (files may be NULL), the request's files, the
 * code and input.json; builds the environment and argv.  Placement that
 * fails because of the request (a conflicting path, no space left in a
 * capped work directory) rejects. */
int cf_exec_job_fill(cf_exec_job *job, const cf_exec_files *files, const cf_exec_view *view, cf_error *err);

/* Fills the common fields of spec: path, argv, envp, cwd, stdin, output
 * caps, timeout, cancel, and the rlimits for cpu_time (RLIMIT_CPU),
 * max_file_size (RLIMIT_FSIZE) and open files.  The backend adds the rest. */
void cf_exec_job_spec(const cf_exec_job *job, const cf_exec_ctx *ctx, cf_run_spec *spec);

/* After cf_run returned 0: maps the outcome to a status (oom_killed: the
 * memory cgroup's OOM killer struck during this execution ->
 * memory_exceeded; the wall clock, o->cpu_exceeded or SIGXCPU -> timeout),
 * moves stdout/stderr into the result, reads
 * run/out/output.json, and collects the work directory into files when
 * asked and the program exited (files may be NULL).  cpu_us >= 0
 * overrides the runner's rusage figure (a cgroup's exact count).  A
 * cancelled run is the backend's error (-1, retriable). */
int cf_exec_job_finish(cf_exec_job *job, const cf_exec_ctx *ctx, cf_run_outcome *o, bool oom_killed, int64_t cpu_us,
                       cf_error *err);

/* The request's input as JSON text (*text: the caller frees), converted
 * as for input.json; input without a JSON form rejects the job (returns
 * 0 with job->rejected). */
int cf_exec_input_json(cf_exec_job *job, char **text, cf_error *err);

/* The program's output as JSON text into job->res->output, with the same
 * checks and warnings as output.json (for a backend that gets the text
 * from its runtime instead of a file). */
void cf_exec_output_json(cf_exec_job *job, const char *text, size_t len);

/* Removes the directories (after every process of the execution is dead)
 * and frees everything.  Safe on a zeroed or partly set up job. */
void cf_exec_job_free(cf_exec_job *job);

/* Rejects with a formatted reason (res->status REJECTED); returns 0. */
int cf_exec_reject(cf_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


#endif
