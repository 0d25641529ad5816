/* The `process` backend: runs code as a plain host process ("host_local").
 *
 * It isolates nothing beyond what rlimits, a cleared environment, a private
 * work directory and (when the worker is root) a per-slot uid give, and it
 * claims exactly that in its capabilities: no network or filesystem
 * controls.  Interpreters come from the configuration, never from a PATH
 * lookup at run time.
 *
 * Per execution: a fresh work dir under cfg->work_root, request files
 * written without following symlinks, code in main.py/main.js/main.sh,
 * input.json / output.json for structured data, then the runner, then the
 * work dir is removed (after every process of the execution is dead).
 *
 * Measured on node v20 (this host): node aborts at start-up ("Fatal process
 * OOM in Failed to reserve virtual memory for CodeRange", SIGTRAP) with
 * RLIMIT_AS below about 720 MiB; 720 MiB suffices for a trivial script.
 * RLIMIT_AS counts reservations, not use, so memory limits for javascript
 * should be 1 GiB or more on this backend.
 */
#include "cf_backend.h"
#include "cf_runner.h"
#include "cf_schema_json.h"
#include "cf_workdir.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_EXEC_PATH "/usr/local/bin:/usr/bin:/bin"
#define FALLBACK_TIMEOUT_US (30 * 1000000LL) /* the worker normally fills policy defaults */
#define FALLBACK_OUTPUT_CAP (1024 * 1024)
#define FALLBACK_FILES_BYTES (64 * 1024 * 1024)
#define FALLBACK_OUTPUT_FILE_BYTES (16 * 1024 * 1024)
#define OPEN_FILES_LIMIT 256
/* With per-slot uids RLIMIT_NPROC is meaningful; without a requested value
 * this still stops a fork bomb from taking the host down. */
#define DEFAULT_NPROC_PER_SLOT 512
#define ENV_MAX 512
#define ARGV_MAX 4096

typedef struct process_state {
    char *work_root;
    char *python_path;
    char *node_path;
    char *shell_path;
    char *exec_path;
    int slots;
    bool per_slot_uid;
    int64_t uid_base;
    size_t max_files_bytes;
    size_t max_output_file_bytes;
    char notes[512];
} process_state;

static void state_free(process_state *st)
{
    if (!st)
        return;
    free(st->work_root);
    free(st->python_path);
    free(st->node_path);
    free(st->shell_path);
    free(st->exec_path);
    free(st);
}

static void process_destroy(void *state)
{
    state_free(state);
}

static bool is_executable_file(const char *path)
{
    struct stat sb;
    return path && path[0] == '/' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0111);
}

static void notes_add(process_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notes_add(process_state *st, const char *fmt, ...)
{
    size_t used = strlen(st->notes);
    if (used + 3 >= sizeof(st->notes))
        return;
    if (used)
        used += (size_t)snprintf(st->notes + used, sizeof(st->notes) - used, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->notes + used, sizeof(st->notes) - used, fmt, ap);
    va_end(ap);
}

static int process_create(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err)
{
    *state = NULL;
    if (!cfg || !cfg->work_root || !cfg->work_root[0])
        return cf_error_set(err, CF_E_INVALID, "process: work_root is not set");
    process_state *st = calloc(1, sizeof(*st));
    if (!st)
        return cf_error_set(err, CF_E_NOMEM, "process: out of memory");
    st->slots = cfg->slots > 0 ? cfg->slots : 1;
    st->max_files_bytes = cfg->max_files_bytes > 0 ? (size_t)cfg->max_files_bytes : FALLBACK_FILES_BYTES;
    st->max_output_file_bytes =
        cfg->max_output_file_bytes > 0 ? (size_t)cfg->max_output_file_bytes : FALLBACK_OUTPUT_FILE_BYTES;
    st->work_root = cf_strdup(cfg->work_root);
    st->exec_path = cf_strdup(cfg->exec_path && cfg->exec_path[0] ? cfg->exec_path : DEFAULT_EXEC_PATH);
    if (!st->work_root || !st->exec_path)
        goto nomem;

    /* The work root: created if missing (0711: slot uids must traverse it
     * but not list it). */
    struct stat sb;
    if (stat(st->work_root, &sb) < 0) {
        if (errno != ENOENT || mkdir(st->work_root, 0711) < 0 || stat(st->work_root, &sb) < 0) {
            cf_error_set_errno(err, CF_E_SYSTEM, errno, "process: work_root '%s'", st->work_root);
            state_free(st);
            return -1;
        }
    }
    if (!S_ISDIR(sb.st_mode)) {
        cf_error_set(err, CF_E_INVALID, "process: work_root '%s' is not a directory", st->work_root);
        state_free(st);
        return -1;
    }

    if (cfg->run_uid_base > 0 && geteuid() == 0) {
        if (cfg->run_uid_base + st->slots > INT32_MAX) {
            cf_error_set(err, CF_E_INVALID, "process: run_uid_base %lld too large", (long long)cfg->run_uid_base);
            state_free(st);
            return -1;
        }
        if (!(sb.st_mode & S_IXOTH)) {
            cf_error_set(err, CF_E_INVALID,
                         "process: work_root '%s' must be searchable by others (mode o+x) for per-slot uids",
                         st->work_root);
            state_free(st);
            return -1;
        }
        st->per_slot_uid = true;
        st->uid_base = cfg->run_uid_base;
    }

    memset(caps, 0, sizeof(*caps));
    caps->isolation = "host_local";
    caps->languages = 1u << CF_LANG_COMMAND;
    /* A configured interpreter that is not there disables its language
     * (and says so) instead of failing every request later. */
    const struct {
        const char *path;
        char **dst;
        cf_language lang;
    } interp[] = {
        {cfg->shell_path, &st->shell_path, CF_LANG_SHELL},
        {cfg->python_path, &st->python_path, CF_LANG_PYTHON},
        {cfg->node_path, &st->node_path, CF_LANG_JAVASCRIPT},
    };
    for (size_t i = 0; i < sizeof(interp) / sizeof(interp[0]); i++) {
        if (!interp[i].path || !interp[i].path[0])
            continue;
        if (!is_executable_file(interp[i].path)) {
            notes_add(st, "%s disabled: '%s' is not an executable absolute path",
                      cf_language_name(interp[i].lang), interp[i].path);
            continue;
        }
        *interp[i].dst = cf_strdup(interp[i].path);
        if (!*interp[i].dst)
            goto nomem;
        caps->languages |= 1u << interp[i].lang;
    }

    caps->controls = CF_CTL_TIMEOUT | CF_CTL_CPU_TIME | CF_CTL_MEMORY | CF_CTL_STDOUT_CAP | CF_CTL_STDERR_CAP |
                     CF_CTL_FILE_SIZE | CF_CTL_ENV_ALLOWLIST;
    /* Root ignores RLIMIT_NPROC: only a dedicated non-root uid makes it real. */
    if (st->per_slot_uid)
        caps->controls |= CF_CTL_MAX_PROCESSES;
    notes_add(st, "memory = address-space rlimit (RLIMIT_AS); cpu_time = RLIMIT_CPU per process, whole seconds");
    if (st->per_slot_uid)
        notes_add(st, "per-slot uids %lld..%lld", (long long)st->uid_base, (long long)(st->uid_base + st->slots - 1));
    else
        notes_add(st, "no per-slot uids: processes that leave the process group can outlive a run");
    caps->notes = st->notes;
    *state = st;
    return 0;

nomem:
    state_free(st);
    return cf_error_set(err, CF_E_NOMEM, "process: out of memory");
}

/* ---- helpers ---- */

/* Hostile text going into a reason: printable ASCII, bounded. */
static void printable(const char *s, size_t len, char *buf, size_t size)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 4 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        if (i == 80) {
            memcpy(buf + j, "...", 3);
            j += 3;
            break;
        }
    }
    buf[j] = '\0';
}

typedef struct envb {
    char *v[ENV_MAX + 1];
    size_t n;
} envb;

static void env_free(envb *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    e->n = 0;
}

static bool env_name_ok(const char *k)
{
    if (!k || !k[0] || strlen(k) > 256)
        return false;
    for (const char *p = k; *p; p++)
        if (*p == '=' || (unsigned char)*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

/* Sets key=value, replacing an earlier entry of the same key. */
static int env_set(envb *e, const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    char *s = malloc(kl + vl + 2);
    if (!s)
        return -1;
    memcpy(s, key, kl);
    s[kl] = '=';
    memcpy(s + kl + 1, value, vl + 1);
    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->v[i], key, kl) == 0 && e->v[i][kl] == '=') {
            free(e->v[i]);
            e->v[i] = s;
            return 0;
        }
    }
    if (e->n == ENV_MAX) {
        free(s);
        errno = E2BIG;
        return -1;
    }
    e->v[e->n++] = s;
    e->v[e->n] = NULL;
    return 0;
}

/* The worker's value of name, or NULL.  environ is only read: the worker
 * does not modify its environment after start-up. */
static const char *worker_env(const char *name)
{
    size_t nl = strlen(name);
    for (char **p = environ; p && *p; p++)
        if (strncmp(*p, name, nl) == 0 && (*p)[nl] == '=')
            return *p + nl + 1;
    return NULL;
}

/* Resolves a command's argv[0]: a name is looked up in exec_path only; a
 * path with '/' is absolute or relative to the work dir. */
static int resolve_command(const process_state *st, const char *name, const char *workdir, char *out, size_t outsz,
                           char *reason, size_t rsz)
{
    char shown[100];
    printable(name, strlen(name), shown, sizeof(shown));
    if (!name[0] || strlen(name) > 4096) {
        snprintf(reason, rsz, "command name is empty or too long");
        return -1;
    }
    for (const char *p = name; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            snprintf(reason, rsz, "command '%s' contains control characters", shown);
            return -1;
        }
    }
    if (strchr(name, '/')) {
        int n = name[0] == '/' ? snprintf(out, outsz, "%s", name) : snprintf(out, outsz, "%s/%s", workdir, name);
        if (n < 0 || (size_t)n >= outsz || !is_executable_file(out)) {
            snprintf(reason, rsz, "command '%s' is not an executable file", shown);
            return -1;
        }
        return 0;
    }
    const char *p = st->exec_path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);
        if (dl > 0 && p[0] == '/') { /* relative PATH entries would depend on the cwd */
            int n = snprintf(out, outsz, "%.*s/%s", (int)dl, p, name);
            if (n > 0 && (size_t)n < outsz && is_executable_file(out))
                return 0;
        }
        if (!colon)
            break;
        p = colon + 1;
    }
    snprintf(reason, rsz, "command '%s' not found in exec_path", shown);
    return -1;
}

static int add_diag(cf_result *res, const char *level, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int add_diag(cf_result *res, const char *level, const char *file, const char *fmt, ...)
{
    cf_diagnostic *d = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*d));
    if (!d)
        return -1;
    res->diagnostics = d;
    cf_diagnostic *x = &d[res->n_diagnostics];
    memset(x, 0, sizeof(*x));
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    x->level = cf_strdup(level);
    x->message = cf_strdup(msg);
    x->file = cf_strdup(file);
    res->n_diagnostics++;
    if (!x->level || !x->message || (file && !x->file))
        return -1;
    return 0;
}

/* Kills every process of uid, including ones that left the process group
 * (setsid) or were reparented: a helper that becomes uid sends
 * kill(-1, SIGKILL), which reaches exactly the processes of that uid. */
static void kill_uid(uid_t uid, gid_t gid)
{
    pid_t p = fork();
    if (p == 0) {
        /* No exec follows, so CLOEXEC does not help: drop the copies of
         * other executions' pipes at once (one would delay their EOF). */
        (void)syscall(SYS_close_range, 3u, ~0u, 0u);
        if (syscall(SYS_setresgid, gid, gid, gid) < 0 || syscall(SYS_setresuid, uid, uid, uid) < 0)
            _exit(2);
        /* kill(-1) walks the task list under tasklist_lock, which fork
         * needs too, and a process with SIGKILL pending cannot fork: one
         * pass reaches everything.  The second is cheap insurance.  (The
         * return value says nothing useful: it is 0 whenever any other
         * process exists, signalled or not.) */
        (void)kill(-1, SIGKILL);
        (void)kill(-1, SIGKILL);
        _exit(0);
    }
    if (p > 0) {
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}

static void uid_kill_all(pid_t pid, void *arg)
{
    const uid_t *ids = arg;
    kill(-pid, SIGKILL);
    kill_uid(ids[0], (gid_t)ids[1]);
}

static const char *code_file_for(cf_language l)
{
    switch (l) {
    case CF_LANG_SHELL: return "main.sh";
    case CF_LANG_PYTHON: return "main.py";
    case CF_LANG_JAVASCRIPT: return "main.js";
    default: return NULL;
    }
}

static void fmt_duration(int64_t us, char *buf, size_t size)
{
    cf_format_duration(us, buf, size);
}

/* ---- execute ---- */

typedef struct exec_job {
    cf_workdir *wd;
    envb env;
    char **argv;
    cf_run_outcome outcome;
} exec_job;

static int reject(cf_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reject(cf_result *res, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    res->status = CF_STATUS_REJECTED;
    cf_result_set_reason(res, "%s", msg);
    return 0;
}

static int write_input(exec_job *job, const cf_request *req, cf_result *res, cf_error *err, bool *rejected)
{
    cf_error jerr;
    cf_error_clear(&jerr);
    json_t *j = cf_msgpack_to_json(req->input.data, req->input.len, &jerr);
    if (!j) {
        *rejected = true;
        return reject(res, "input cannot be given to the program as JSON: %s", jerr.msg);
    }
    char *txt = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(j);
    if (!txt)
        return cf_error_set(err, CF_E_NOMEM, "process: encoding input.json");
    int rc = cf_workdir_put(job->wd, "input.json", txt, strlen(txt), 0644, &jerr);
    free(txt);
    if (rc < 0) {
        if (jerr.code == CF_E_INVALID) {
            *rejected = true;
            return reject(res, "file 'input.json' is reserved for structured input");
        }
        *err = jerr;
        return cf_error_wrap(err, "process");
    }
    return 0;
}

static void read_output(exec_job *job, const process_state *st, cf_result *res)
{
    cf_buf b;
    cf_buf_init(&b, 0);
    bool too_big = false;
    cf_error e;
    cf_error_clear(&e);
    if (cf_workdir_read(job->wd, "output.json", st->max_output_file_bytes, &b, &too_big, &e) < 0) {
        if (e.code != CF_E_NOT_FOUND)
            add_diag(res, "warning", "output.json", "output.json ignored: %s", e.msg);
        cf_buf_free(&b);
        return;
    }
    if (too_big) {
        add_diag(res, "warning", "output.json", "output.json ignored: larger than %zu bytes",
                 st->max_output_file_bytes);
        cf_buf_free(&b);
        return;
    }
    json_error_t jerr;
    json_t *j = json_loadb((const char *)b.data, b.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    cf_buf_free(&b);
    if (!j) {
        add_diag(res, "warning", "output.json", "output.json is not valid JSON (line %d, column %d): %s", jerr.line,
                 jerr.column, jerr.text);
        return;
    }
    if (cf_json_to_msgpack(j, &res->output, &e) < 0)
        add_diag(res, "warning", "output.json", "output.json cannot be converted: %s", e.msg);
    json_decref(j);
}

static void map_outcome(const cf_run_outcome *o, const cf_request *req, cf_result *res)
{
    const cf_policy *p = &req->policy;
    char d[32];
    res->has_exit_code = o->exited;
    res->exit_code = o->exited ? o->exit_code : 0;
    res->signal = o->signal;
    if (o->timed_out) {
        res->status = CF_STATUS_TIMEOUT;
        fmt_duration(p->timeout_us > 0 ? p->timeout_us : FALLBACK_TIMEOUT_US, d, sizeof(d));
        cf_result_set_reason(res, "wall-clock timeout of %s exceeded", d);
    } else if (o->signal == SIGXCPU || (o->signal == SIGKILL && p->cpu_time_us > 0 && o->cpu_us >= p->cpu_time_us)) {
        res->status = CF_STATUS_TIMEOUT;
        fmt_duration(p->cpu_time_us, d, sizeof(d));
        cf_result_set_reason(res, "cpu time limit of %s exceeded", d);
    } else if (o->signal == SIGXFSZ) {
        res->status = CF_STATUS_FAILED;
        cf_result_set_reason(res, "file size limit of %lld bytes exceeded", (long long)p->max_file_size_bytes);
    } else if (o->signal) {
        res->status = CF_STATUS_FAILED;
        const char *abbrev = sigabbrev_np(o->signal);
        if (o->signal == SIGTRAP && req->language == CF_LANG_JAVASCRIPT && p->memory_bytes > 0)
            cf_result_set_reason(res, "killed by signal %d (SIG%s); node needs an address space of at least "
                                      "~720 MiB, the memory limit is %lld bytes",
                                 o->signal, abbrev ? abbrev : "?", (long long)p->memory_bytes);
        else
            cf_result_set_reason(res, "killed by signal %d (SIG%s)", o->signal, abbrev ? abbrev : "?");
    } else if (o->exit_code != 0) {
        res->status = CF_STATUS_FAILED;
        cf_result_set_reason(res, "exited with code %d", o->exit_code);
    } else {
        res->status = CF_STATUS_SUCCESS;
    }
}

static int process_execute(void *state, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err)
{
    process_state *st = state;
    const cf_policy *pol = &req->policy;
    int rc = -1;
    exec_job job;
    memset(&job, 0, sizeof(job));

    if (cf_str_set(&res->meta.backend, "process") < 0 || cf_str_set(&res->meta.isolation, "host_local") < 0 ||
        cf_str_set(&res->meta.language, cf_language_name(req->language)) < 0)
        return cf_error_set(err, CF_E_NOMEM, "process: out of memory");

    const char *interp = NULL;
    switch (req->language) {
    case CF_LANG_COMMAND: break;
    case CF_LANG_SHELL: interp = st->shell_path; break;
    case CF_LANG_PYTHON: interp = st->python_path; break;
    case CF_LANG_JAVASCRIPT: interp = st->node_path; break;
    default: break;
    }
    if (req->language != CF_LANG_COMMAND && !interp)
        return reject(res, "language %s not supported by backend 'process'", cf_language_name(req->language));
    if (req->language == CF_LANG_COMMAND && (req->argc == 0 || !req->argv || !req->argv[0]))
        return reject(res, "language command needs argv[0]");
    if (req->argc > ARGV_MAX)
        return reject(res, "more than %d arguments", ARGV_MAX);
    for (size_t i = 0; i < req->argc; i++)
        if (!req->argv[i])
            return reject(res, "argv[%zu] is missing", i);

    /* Everything about the request's files is checked before anything is
     * created: an unsafe path must not run anything. */
    size_t files_total = 0;
    for (size_t i = 0; i < req->n_files; i++) {
        const char *path = req->files[i].path ? req->files[i].path : "";
        char why[96], shown[100];
        if (cf_path_check(path, strlen(path), why, sizeof(why)) < 0) {
            printable(path, strlen(path), shown, sizeof(shown));
            return reject(res, "unsafe file path '%s': %s", shown, why);
        }
        files_total += req->files[i].content.len;
        if (files_total > st->max_files_bytes)
            return reject(res, "files exceed %zu bytes in total", st->max_files_bytes);
    }
    for (size_t i = 0; i < req->n_env; i++) {
        if (!env_name_ok(req->env[i].key) || !req->env[i].value) {
            char shown[100];
            const char *k = req->env[i].key ? req->env[i].key : "";
            printable(k, strlen(k), shown, sizeof(shown));
            return reject(res, "invalid environment variable name '%s'", shown);
        }
    }

    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    if (st->per_slot_uid) {
        if (!ctx || ctx->slot < 0 || ctx->slot >= st->slots)
            return cf_error_set(err, CF_E_INVALID, "process: slot %d outside 0..%d", ctx ? ctx->slot : -1,
                                st->slots - 1);
        uid = (uid_t)(st->uid_base + ctx->slot);
        gid = (gid_t)uid;
    }
    if (cf_workdir_create(st->work_root, uid, gid, &job.wd, err) < 0) {
        cf_error_wrap(err, "process");
        if (err)
            err->retriable = true;
        return -1;
    }
    const char *wdpath = cf_workdir_path(job.wd);

    for (size_t i = 0; i < req->n_files; i++) {
        cf_error ferr;
        cf_error_clear(&ferr);
        if (cf_workdir_put(job.wd, req->files[i].path, req->files[i].content.data, req->files[i].content.len, 0644,
                           &ferr) < 0) {
            if (ferr.code == CF_E_INVALID) {
                char shown[100];
                printable(req->files[i].path, strlen(req->files[i].path), shown, sizeof(shown));
                rc = reject(res, "file path '%s' rejected: %s", shown, ferr.msg);
            } else if (err) {
                *err = ferr;
                cf_error_wrap(err, "process: writing request files");
            }
            goto out;
        }
    }

    const char *code_file = code_file_for(req->language);
    if (code_file) {
        cf_error ferr;
        cf_error_clear(&ferr);
        if (cf_workdir_put(job.wd, code_file, req->code.data ? (const void *)req->code.data : "", req->code.len,
                           0644, &ferr) < 0) {
            if (ferr.code == CF_E_INVALID)
                rc = reject(res, "file '%s' is reserved for the code", code_file);
            else if (err) {
                *err = ferr;
                cf_error_wrap(err, "process: writing the code");
            }
            goto out;
        }
    }

    /* Environment: nothing of the worker's except the allowlist. */
    char pathbuf[4200];
    if (env_set(&job.env, "HOME", wdpath) < 0 || env_set(&job.env, "PATH", st->exec_path) < 0)
        goto nomem;
    for (size_t i = 0; pol->env_allow_set && i < pol->n_env_allow; i++) {
        const char *name = pol->env_allow[i];
        if (!env_name_ok(name))
            continue;
        const char *v = worker_env(name);
        if (v && env_set(&job.env, name, v) < 0)
            goto nomem;
    }
    for (size_t i = 0; i < req->n_env; i++)
        if (env_set(&job.env, req->env[i].key, req->env[i].value) < 0) {
            if (errno == E2BIG) {
                rc = reject(res, "more than %d environment variables", ENV_MAX);
                goto out;
            }
            goto nomem;
        }
    if (req->input.len > 0) {
        bool rejected = false;
        if (write_input(&job, req, res, err, &rejected) < 0)
            goto out;
        if (rejected) {
            rc = 0;
            goto out;
        }
        snprintf(pathbuf, sizeof(pathbuf), "%s/input.json", wdpath);
        if (env_set(&job.env, "CODEFLEET_INPUT", pathbuf) < 0)
            goto nomem;
    }
    snprintf(pathbuf, sizeof(pathbuf), "%s/output.json", wdpath);
    if (env_set(&job.env, "CODEFLEET_OUTPUT", pathbuf) < 0 || env_set(&job.env, "CODEFLEET_WORKDIR", wdpath) < 0)
        goto nomem;

    /* argv: interpreter + code file + extra arguments, or the command. */
    char exe[4200];
    job.argv = calloc(req->argc + 3, sizeof(char *));
    if (!job.argv)
        goto nomem;
    size_t ac = 0;
    if (req->language == CF_LANG_COMMAND) {
        char why[200];
        if (resolve_command(st, req->argv[0], wdpath, exe, sizeof(exe), why, sizeof(why)) < 0) {
            rc = reject(res, "%s", why);
            goto out;
        }
        for (size_t i = 0; i < req->argc; i++)
            job.argv[ac++] = req->argv[i];
    } else {
        cf_strlcpy(exe, interp, sizeof(exe));
        job.argv[ac++] = (char *)interp;
        job.argv[ac++] = (char *)code_file;
        for (size_t i = 0; i < req->argc; i++)
            job.argv[ac++] = req->argv[i];
    }
    job.argv[ac] = NULL;

    cf_run_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.path = exe;
    spec.argv = job.argv;
    spec.envp = job.env.v;
    spec.cwd = wdpath;
    spec.stdin_data = req->stdin_data.data;
    spec.stdin_len = req->stdin_data.len;
    spec.max_stdout = pol->max_stdout_bytes > 0 ? (size_t)pol->max_stdout_bytes : FALLBACK_OUTPUT_CAP;
    spec.max_stderr = pol->max_stderr_bytes > 0 ? (size_t)pol->max_stderr_bytes : FALLBACK_OUTPUT_CAP;
    spec.timeout_us = pol->timeout_us > 0 ? pol->timeout_us : FALLBACK_TIMEOUT_US;
    spec.cancel = ctx ? ctx->cancel : NULL;
    int nl = 0;
    if (pol->cpu_time_us > 0) /* whole seconds, rounded up (rlimit granularity) */
        spec.rlimits[nl++] = (cf_run_rlimit){RLIMIT_CPU, (rlim_t)((pol->cpu_time_us + 999999) / 1000000)};
    if (pol->memory_bytes > 0)
        spec.rlimits[nl++] = (cf_run_rlimit){RLIMIT_AS, (rlim_t)pol->memory_bytes};
    if (pol->max_file_size_bytes > 0)
        spec.rlimits[nl++] = (cf_run_rlimit){RLIMIT_FSIZE, (rlim_t)pol->max_file_size_bytes};
    spec.rlimits[nl++] = (cf_run_rlimit){RLIMIT_NOFILE, OPEN_FILES_LIMIT};
    uid_t ids[2] = {uid, (uid_t)gid};
    if (st->per_slot_uid) {
        spec.rlimits[nl++] = (cf_run_rlimit){
            RLIMIT_NPROC, (rlim_t)(pol->max_processes > 0 ? pol->max_processes : DEFAULT_NPROC_PER_SLOT)};
        spec.set_ids = true;
        spec.uid = uid;
        spec.gid = gid;
        /* The process group is not enough: setsid() escapes it. */
        spec.kill_all = uid_kill_all;
        spec.kill_all_arg = ids;
    }
    spec.n_rlimits = nl;

    if (cf_run(&spec, &job.outcome, err) < 0) {
        cf_error_wrap(err, "process");
        goto out;
    }
    if (job.outcome.cancelled) {
        cf_error_set(err, CF_E_TIMEOUT, "process: execution cancelled (worker shutting down)");
        if (err)
            err->retriable = true;
        goto out;
    }
    map_outcome(&job.outcome, req, res);
    res->stdout_truncated = job.outcome.out_truncated;
    res->stderr_truncated = job.outcome.err_truncated;
    size_t len;
    res->stdout_data.data = cf_buf_steal(&job.outcome.out, &len);
    res->stdout_data.len = len;
    res->stderr_data.data = cf_buf_steal(&job.outcome.err, &len);
    res->stderr_data.len = len;
    res->wall_time_us = job.outcome.wall_us;
    res->cpu_time_us = job.outcome.cpu_us;
    res->peak_memory_bytes = job.outcome.peak_rss_bytes;
    read_output(&job, st, res);
    rc = 0;
    goto out;

nomem:
    cf_error_set(err, CF_E_NOMEM, "process: out of memory");
    rc = -1;
out:
    /* With per-slot uids the runner's kill_all (uid_kill_all) already
     * removed every process of the uid when the program ended, so nothing
     * can write into the tree while it is removed. */
    cf_workdir_destroy(job.wd);
    cf_run_outcome_free(&job.outcome);
    env_free(&job.env);
    free(job.argv);
    return rc;
}

const cf_backend_ops cf_backend_process_ops = {
    .name = "process",
    .description = "host processes with rlimits, a private work dir and a cleared environment (host_local)",
    .create = process_create,
    .destroy = process_destroy,
    .execute = process_execute,
};
