/* cf_backend: the execution backend interface and registry.
 *
 * A backend is a const vtable (cf_backend_ops) in a static registry.  The
 * worker creates one instance of each enabled backend at start-up; create()
 * probes the host and fills the instance's capabilities with what it can
 * actually enforce *here*.  Before running a request the worker calls
 * cf_policy_check(): a request asking for a control the backend cannot
 * enforce is answered "rejected" with a reason naming the control.
 *
 * execute() contract:
 *   returns 0  -> res->status says what happened to the user's code
 *                 (success, failed, timeout, memory_exceeded, compile_failed)
 *                 or that the request itself was unacceptable (rejected, with
 *                 res->reason) - e.g. an unsafe file path;
 *   returns -1 -> the backend/sandbox broke (err filled, err->retriable says
 *                 whether another attempt may succeed); the worker answers
 *                 internal_error.  Never used for the user's code failing.
 */
#ifndef CF_BACKEND_H
#define CF_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cf_config.h"
#include "cf_error.h"
#include "cf_schema.h"
#include "cf_util.h"

/* Controls a backend may enforce (bit flags). */
enum {
    CF_CTL_TIMEOUT = 1u << 0,          /* wall clock; kills every process of the execution */
    CF_CTL_CPU_TIME = 1u << 1,
    CF_CTL_MEMORY = 1u << 2,
    CF_CTL_MAX_PROCESSES = 1u << 3,
    CF_CTL_STDOUT_CAP = 1u << 4,
    CF_CTL_STDERR_CAP = 1u << 5,
    CF_CTL_FILE_SIZE = 1u << 6,
    CF_CTL_NETWORK_DISABLED = 1u << 7, /* can run with no network */
    CF_CTL_NETWORK_ENABLED = 1u << 8,  /* can give network access */
    CF_CTL_FS_NONE = 1u << 9,          /* can hide the host filesystem */
    CF_CTL_FS_WORKSPACE_RO = 1u << 10,
    CF_CTL_FS_WORKSPACE_RW = 1u << 11,
    CF_CTL_FS_PATHS = 1u << 12,
    CF_CTL_ENV_ALLOWLIST = 1u << 13,   /* environment cleared except the allowlist */
    CF_CTL_STREAM = 1u << 14,          /* can hand output over while the program runs (request "stream") */
};

/* Stable names for each control bit ("timeout", "memory", ...). */
const char *cf_control_name(uint32_t control_bit);

typedef struct cf_backend_caps {
    const char *isolation; /* "host_local", "sandbox", "container", "wasm", "in_process" */
    uint32_t languages;    /* bit (1u << cf_language) per supported language */
    uint32_t controls;     /* CF_CTL_* enforced on this host */
    /* Free text per control that needs a qualifier, e.g. memory enforced as
     * an address-space rlimit.  May be NULL. */
    const char *notes;
    /* Container backend: its image names, comma-separated ("default,ml");
     * NULL for others.  Profiles' `images` must name these. */
    const char *images;
} cf_backend_caps;

/* Host uids of user code: each backend that runs programs as a run uid has
 * a block of its own, `slots` uids long, above the base (run-uid-base, or
 * 100000 for the namespaced backends when it is 0), so that no backend's
 * program, clean-up (kill by uid) or RLIMIT_NPROC reaches another's: a
 * process-backend program on the host must not signal, trace or count
 * against the slot's zygote, warm sandbox or runtime helper. */
typedef enum cf_uid_block {
    CF_UID_BLOCK_SANDBOX = 0, /* sandbox (executions, zygotes, warm sandboxes) and container */
    CF_UID_BLOCK_WASM = 1,    /* wasm backend's helpers (cf_embed_runtime 1) */
    CF_UID_BLOCK_JS = 2,      /* js backend's helpers (cf_embed_runtime 2) */
    CF_UID_BLOCK_PROCESS = 3, /* process backend (only with run-uid-base > 0) */
    CF_UID_BLOCKS = 4
} cf_uid_block;

/* The base when run-uid-base is 0 (the namespaced backends). */
#define CF_RUN_UID_BASE_DEFAULT 100000

static inline int64_t cf_run_uid(int64_t base, int slots, cf_uid_block block, int slot)
{
    return base + (int64_t)slots * (int64_t)block + slot;
}

/* The settings a backend family owns: its keys of the worker's
 * configuration, as props of the configuration table whose offsets are
 * into the family's own struct of `size` bytes.  The worker's table takes
 * every family's keys in (worker_config.c) and keeps the values in one
 * area; create() reads its family's struct back with cf_backend_settings_of.
 * Backends of one family (wasm and js) point at the same settings.  Adding
 * a backend adds its settings where it lives, and nothing here. */
struct cf_backend_config;
typedef struct cf_backend_settings {
    const char *family; /* "sandbox", "container", "embedded" */
    const cf_conf_prop *props;
    size_t nprops;
    size_t size;
    /* Its helper program, for the worker's start-up line ("zygote /usr/...";
     * may be NULL). */
    void (*describe_helper)(const struct cf_backend_config *cfg, char *buf, size_t cap);
} cf_backend_settings;

/* Every family's settings, one after the other at cf_backend_settings_offset.
 * The worker's configuration holds one (its keys are set like any other);
 * a unit test may make its own (cf_backend_settings_area_init). */
#define CF_BACKEND_SETTINGS_BYTES 2048
typedef struct cf_backend_settings_area {
    _Alignas(16) unsigned char bytes[CF_BACKEND_SETTINGS_BYTES];
} cf_backend_settings_area;

/* Every family's settings, each once, in registry order (NULL-terminated). */
const cf_backend_settings *const *cf_backend_settings_all(void);
/* Where s lives in an area; -1 when s is no family's or the area is too
 * small for every family (a build error: raise CF_BACKEND_SETTINGS_BYTES). */
long cf_backend_settings_offset(const cf_backend_settings *s);
/* s's struct in area (NULL: s not laid out). */
void *cf_backend_settings_in(cf_backend_settings_area *area, const cf_backend_settings *s);
/* Every family's defaults into area (zeroed or freed before); strings are
 * allocated: cf_backend_settings_area_free frees them. */
int cf_backend_settings_area_init(cf_backend_settings_area *area, cf_error *err);
/* Sets one family's key ("container-init") in area. */
int cf_backend_settings_set(cf_backend_settings_area *area, const char *key, const char *value, cf_error *err);
void cf_backend_settings_area_free(cf_backend_settings_area *area);

/* Every family's helper program, comma-separated ("zygote /..., container
 * init (none), ..."), for the worker's start-up line. */
void cf_backend_helpers_describe(const struct cf_backend_config *cfg, char *buf, size_t cap);

/* Settings the worker hands to backends (from its configuration table). */
typedef struct cf_backend_config {
    const char *work_root;      /* parent of per-execution work directories */
    const char *python_path;    /* resolved interpreter paths */
    const char *node_path;
    const char *shell_path;
    const char *exec_path;      /* PATH given to user code and used to resolve argv[0] */
    int slots;                  /* concurrent executions of this worker */
    int64_t run_uid_base;       /* >0: run uids from here (cf_uid_block; root only) */
    int64_t max_files_bytes;    /* cap on files placed into / collected from a work dir */
    int64_t max_output_file_bytes; /* cap on the structured output file */
    const char *cgroup_root;    /* for sandbox-type backends; NULL = autodetect */
    /* The worker's own directory below it (cf_cgroup_env_opts.own_dir),
     * which the worker bounds as a whole; NULL: none. */
    const char *cgroup_own_dir;
    /* The worker set a memory limit on that directory (children-memory):
     * an OOM kill well below an execution's own limit is the bound's. */
    bool children_bounded;
    const char *slirp4netns_path; /* network=enabled; NULL/"" or missing: not offered */
    /* What every namespaced backend (sandbox, container, wasm and js) gives
     * a request that sets none, and its tmpfs sizes (the sandbox-* keys;
     * 0 = the default in parentheses). */
    int64_t sandbox_memory_bytes; /* memory limit (512 MiB) */
    int64_t sandbox_pids_max;     /* process/thread limit (256) */
    int64_t sandbox_tmp_bytes;    /* size of /tmp and of /dev/shm inside (64 MiB each) */
    int64_t sandbox_work_bytes;   /* size of the per-execution tmpfs holding work/ and run/ (128 MiB) */
    int64_t sandbox_inodes;       /* inode cap of each of those tmpfs (16384) */
    /* Each family's own settings (cf_backend_settings_of); NULL: every
     * family's defaults. */
    const cf_backend_settings_area *settings;
    /* Where an installed worker's helper programs are (libexec/codefleet of
     * its prefix); NULL or "": not installed, so the ones built with it
     * (cf_backend_helper_path). */
    const char *helper_dir;
    /* Compiled languages the worker's pipeline serves (bit per
     * cf_language): backends that run prepared programs declare them. */
    uint32_t compiled_languages;
    /* Host directories holding toolchains outside the usual system
     * directories (NULL-terminated, may be NULL): bound read-only into
     * sandboxes at the same paths.  Must outlive the backends. */
    const char *const *toolchain_dirs;
    /* The compile pipeline's compilers (resolved host paths; NULL: off): a
     * backend with a root of its own offers C or C++ only where that very
     * path exists in it (container images). */
    const char *cc_path;
    const char *cxx_path;
} cf_backend_config;

/* A family's settings for this worker: from cfg->settings, or the
 * family's defaults when the worker gave none. */
const void *cf_backend_settings_of(const cf_backend_config *cfg, const cf_backend_settings *s);

/* The path of a helper program (codefleet-zygote, ...): configured (set,
 * non-empty) wins; else the installed one in cfg->helper_dir, when it is
 * there; else, for a worker not installed, built (the one built with it,
 * "" for none).  Into out (cap bytes); "" when there is none. */
void cf_backend_helper_path(const cf_backend_config *cfg, const char *configured, const char *name,
                            const char *built, char *out, size_t cap);

/* Workspace files for one execution (requests naming a workspace).
 *
 * The work directory a program sees as its current directory holds the
 * workspace files (placed first) and the request's own files; the
 * program's source, input.json and output.json live outside it, so what is
 * collected afterwards is exactly the program's view of the workspace. */
typedef struct cf_exec_files {
    const cf_file *place;     /* workspace snapshot to place (borrowed) */
    size_t n_place;
    bool read_only;           /* workspace_ro: placed files and their directories read-only */
    bool collect;             /* workspace_rw: collect the work directory after a successful run */
    size_t max_files;         /* collection limits (CF_E_LIMIT past them) */
    size_t max_bytes;
    /* Out (when collect): every regular file of the work directory after
     * the run, sorted by path; owned by the caller, freed with
     * cf_workdir_files_free (cf_workdir.h). */
    cf_file *collected;
    size_t n_collected;
    /* Out: why collection failed (limits exceeded, unreadable entry), or
     * NULL; owned by the caller (free). */
    char *collect_error;
    /* Optional: collect only the regular files this accepts (the others
     * are neither read nor counted against the limits). */
    bool (*collect_want)(const char *path, void *arg);
    void *collect_want_arg;
    /* Out: entries left out because their names are not UTF-8 text. */
    size_t collect_skipped_names;
} cf_exec_files;

/* An IPv4 destination range (network byte order address, prefix length). */
typedef struct cf_cidr4 {
    uint32_t addr;
    uint8_t len;
} cf_cidr4;

/* A program prepared before the run (a build artifact, a harnessed
 * script): placed into the execution's run directory and run instead of
 * the request's code.  Used by the compile pipeline (cf_pipeline.h). */
typedef struct cf_exec_program {
    const char *name;     /* file name in the run directory ("prog", "main.js") */
    const uint8_t *data;
    size_t len;
    cf_language interp;   /* CF_LANG_NONE: executed itself; else that language's interpreter runs it */
} cf_exec_program;

/* A file the execution writes into its output directory, handed back to
 * the caller (a compiler's artifact).  Arguments and environment values of
 * the request that start with CF_EXEC_OUT_MARK name that directory. */
#define CF_EXEC_OUT_MARK "@OUT@"
typedef struct cf_exec_take {
    const char *name;     /* file name in the output directory */
    size_t max;           /* bytes */
    cf_bytes data;        /* out: the file (caller frees data) */
    bool too_big;         /* out: larger than max (data empty) */
    bool missing;         /* out: not there, or not a regular file */
    bool exec_failed;     /* out: the program could not be started at all */
} cf_exec_take;

/* Per-execution context from the worker. */
/* When the program itself ran (monotonic us), for the worker's trace
 * spans: what came before is setting up, what comes after is collecting.
 * Filled by backends that finish through cf_exec_job_finish; 0 = unknown. */
typedef struct cf_exec_phases {
    int64_t run_start_us;
    int64_t run_end_us;
} cf_exec_phases;

typedef struct cf_exec_ctx {
    int slot;                 /* 0..slots-1, stable while the execution runs */
    const char *worker_id;
    /* Set (to non-zero) by another thread to abandon the execution early
     * (shutdown past its grace period).  Backends poll it. */
    volatile int *cancel;
    /* NULL unless the request names a workspace.  Only backends declaring
     * CF_CTL_FS_WORKSPACE_RO/RW get requests that use it. */
    cf_exec_files *files;
    /* network=enabled: destinations the operator's profile allows beyond
     * the default refusal of private, link-local and metadata ranges
     * (borrowed; may be NULL). */
    const cf_cidr4 *net_allow;
    size_t n_net_allow;
    /* Compile pipeline (NULL otherwise): the program to run, and a file to
     * take back from the output directory. */
    const cf_exec_program *program;
    cf_exec_take *take;
    /* The request's operator profile caps (0 = none): the compile step
     * never gets more than the tenant may use for a run. */
    /* The operator profile the request came under (may be NULL): caches
     * that could tell one tenant what another ran are scoped by it. */
    const char *profile;
    /* Streaming (NULL = none): handed to the runner as its on_output hook
     * (cf_runner.h) for the request's program; only backends declaring
     * CF_CTL_STREAM get requests that stream. */
    int64_t (*on_output)(void *arg, const cf_buf *out, const cf_buf *err, bool final, int64_t now_us);
    void *on_output_arg;
    int64_t profile_max_timeout_us;
    int64_t profile_max_memory_bytes;
    int64_t profile_max_processes;
    cf_exec_phases *phases; /* may be NULL */
} cf_exec_ctx;

typedef struct cf_backend_ops {
    const char *name;        /* registry key, e.g. "process" */
    const char *description; /* one line for --help and docs */
    const cf_backend_settings *settings; /* its family's own keys (NULL: none) */
    /* Probes the host, allocates the instance state, fills caps. */
    int (*create)(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err);
    void (*destroy)(void *state); /* NULL-safe */
    int (*execute)(void *state, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err);
    /* The processes an execution under policy pol may hold (its pids
     * cgroup's bound, with what the backend adds: the namespace's init,
     * slirp4netns), all below the worker's own cgroup directory, whose
     * children-pids they count against; the worker reserves it before the
     * execution starts, and the backend must apply exactly this bound (so
     * it computes its limit with this function).  From pol alone: the
     * worker asks for policies of its own too (a compile step's, a
     * profile's default).  NULL: the backend's executions hold none there
     * (the process backend's programs are outside that directory, the
     * embedded runtimes' run in their helpers). */
    int64_t (*pids_bound)(void *state, const cf_policy *pol);
} cf_backend_ops;

/* The static registry (NULL-terminated). */
const cf_backend_ops *const *cf_backend_registry(void);
const cf_backend_ops *cf_backend_find(const char *name);

/* A created backend. */
typedef struct cf_backend {
    const cf_backend_ops *ops;
    void *state;
    cf_backend_caps caps;
} cf_backend;

/* The set of backends a worker runs with. */
typedef struct cf_backend_set cf_backend_set;

/* names: comma-separated list ("sandbox,process"); the first is the default
 * for requests that name no backend.  Unknown or duplicate names fail. */
int cf_backend_set_new(const char *names, const cf_backend_config *cfg, cf_backend_set **out, cf_error *err);
void cf_backend_set_destroy(cf_backend_set *set);
size_t cf_backend_set_count(const cf_backend_set *set);
const cf_backend *cf_backend_set_get(const cf_backend_set *set, size_t i);

/* Whether `name` was listed but could not be created here (create() said
 * CF_E_UNSUPPORTED and it was not the first): the worker runs without it. */
bool cf_backend_set_unavailable(const cf_backend_set *set, const char *name);
/* The unavailable backends: the i-th one's name and why (false past the
 * last). */
bool cf_backend_set_missing(const cf_backend_set *set, size_t i, const char **name, const char **reason);

/* Chooses the backend for req: the one it names, else the default.  When
 * nothing fits, returns NULL and writes a reason ("backend 'x' is not
 * enabled on this worker", "language python not supported by ...").  Does
 * not check the policy. */
const cf_backend *cf_backend_set_select(const cf_backend_set *set, const cf_request *req, char *reason,
                                        size_t reason_size);
/* The same with the backend named by `want` (NULL/"": the default) instead
 * of req->backend. */
const cf_backend *cf_backend_set_select_as(const cf_backend_set *set, const char *want, const cf_request *req,
                                           char *reason, size_t reason_size);

/* Checks req->policy against caps.  Returns 0 when every requested control
 * is enforced; otherwise -1 with a reason naming the first control that is
 * not ("backend process cannot enforce network=disabled"). */
int cf_policy_check(const cf_backend_caps *caps, const char *backend_name, const cf_request *req, char *reason,
                    size_t reason_size);

/* Writes a human-readable capability matrix of the set (one line per
 * backend: isolation, languages, enforced controls) for the start-up log. */
void cf_backend_set_describe(const cf_backend_set *set, char *buf, size_t size);

#endif
