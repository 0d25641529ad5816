/* Request handling shared by process-based backends (see cf_exec.h). */
#include "cf_exec.h"

#include "cf_schema_json.h"
#include "cf_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_EXEC_PATH "/usr/local/bin:/usr/bin:/bin"
#define FALLBACK_OUTPUT_CAP (1024 * 1024)
#define FALLBACK_FILES_BYTES (64 * 1024 * 1024)
#define FALLBACK_OUTPUT_FILE_BYTES (16 * 1024 * 1024)
#define FALLBACK_COLLECT_FILES 10000
#define OPEN_FILES_LIMIT 256
#define PENDING_SIGNALS_LIMIT 1024

/* ---- configuration ---- */

static bool is_executable_file(const char *path)
{
    struct stat sb;
    return path && path[0] == '/' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0111);
}

bool cf_exec_stat_in_root(const char *root, const char *path, struct stat *sb)
{
    if (!root || !path || path[0] != '/')
        return false;
    int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return false;
    /* Symlinks resolved as the program will see them (an image's
     * /usr/bin/cc -> /etc/alternatives/cc is the image's, not the host's). */
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, rfd, path + 1, &how, sizeof(how));
    close(rfd);
    if (fd < 0)
        return false;
    bool ok = fstat(fd, sb) == 0;
    close(fd);
    return ok;
}

bool cf_exec_file_in_root(const char *root, const char *path)
{
    if (!root)
        return is_executable_file(path);
    struct stat sb;
    /* Executable by others: the program runs as an unprivileged uid. */
    return cf_exec_stat_in_root(root, path, &sb) && S_ISREG(sb.st_mode) && (sb.st_mode & S_IXOTH);
}

/* The worker's own binary (or anything reached through /proc) is never
 * what a request runs: it would start a second worker with the rights of
 * the execution. */
static bool is_forbidden_program(const char *path)
{
    if (strncmp(path, "/proc/", 6) == 0 || strcmp(path, "/proc") == 0)
        return true;
    struct stat a, b;
    return stat(path, &a) == 0 && stat("/proc/self/exe", &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

void cf_exec_notes_add(cf_exec_base *b, const char *fmt, ...)
{
    size_t used = strlen(b->notes);
    if (used + 3 >= sizeof(b->notes))
        return;
    if (used)
        used += (size_t)snprintf(b->notes + used, sizeof(b->notes) - used, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->notes + used, sizeof(b->notes) - used, fmt, ap);
    va_end(ap);
}

void cf_exec_base_free(cf_exec_base *b)
{
    if (!b)
        return;
    free(b->work_root);
    free(b->python_path);
    free(b->node_path);
    free(b->shell_path);
    free(b->exec_path);
    memset(b, 0, sizeof(*b));
}

int cf_exec_base_init(cf_exec_base *b, const char *who, const cf_backend_config *cfg, cf_error *err)
{
    memset(b, 0, sizeof(*b));
    if (!cfg || !cfg->work_root || !cfg->work_root[0])
        return cf_error_set(err, CF_E_INVALID, "%s: work_root is not set", who);
    b->children_bounded = cfg->children_bounded;
    struct rlimit mq;
    if (getrlimit(RLIMIT_MSGQUEUE, &mq) == 0 && mq.rlim_cur != RLIM_INFINITY)
        b->msgqueue_share = (int64_t)(mq.rlim_cur / (2 * (rlim_t)(cfg->slots > 0 ? cfg->slots : 1)));
    b->max_files_bytes = cfg->max_files_bytes > 0 ? (size_t)cfg->max_files_bytes : FALLBACK_FILES_BYTES;
    b->max_output_file_bytes =
        cfg->max_output_file_bytes > 0 ? (size_t)cfg->max_output_file_bytes : FALLBACK_OUTPUT_FILE_BYTES;
    b->work_root = cf_strdup(cfg->work_root);
    b->exec_path = cf_strdup(cfg->exec_path && cfg->exec_path[0] ? cfg->exec_path : DEFAULT_EXEC_PATH);
    if (!b->work_root || !b->exec_path)
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", who);

    /* The work root: created if missing (0711: slot uids must traverse it
     * but not list it). */
    struct stat sb;
    if (stat(b->work_root, &sb) < 0) {
        if (errno != ENOENT || mkdir(b->work_root, 0711) < 0 || stat(b->work_root, &sb) < 0)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: work_root '%s'", who, b->work_root);
    }
    if (!S_ISDIR(sb.st_mode))
        return cf_error_set(err, CF_E_INVALID, "%s: work_root '%s' is not a directory", who, b->work_root);

    b->languages = 1u << CF_LANG_COMMAND | cfg->compiled_languages;
    /* A configured interpreter that is not there disables its language
     * (and says so) instead of failing every request later. */
    const struct {
        const char *path;
        char **dst;
        cf_language lang;
    } interp[] = {
        {cfg->shell_path, &b->shell_path, CF_LANG_SHELL},
        {cfg->python_path, &b->python_path, CF_LANG_PYTHON},
        {cfg->node_path, &b->node_path, CF_LANG_JAVASCRIPT},
    };
    for (size_t i = 0; i < sizeof(interp) / sizeof(interp[0]); i++) {
        if (!interp[i].path || !interp[i].path[0])
            continue;
        if (!is_executable_file(interp[i].path)) {
            cf_exec_notes_add(b, "%s disabled: '%s' is not an executable absolute path",
                              cf_language_name(interp[i].lang), interp[i].path);
            continue;
        }
        *interp[i].dst = cf_strdup(interp[i].path);
        if (!*interp[i].dst)
            return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", who);
        b->languages |= 1u << interp[i].lang;
    }
    return 0;
}

/* ---- helpers ---- */

int cf_exec_reject(cf_result *res, const char *fmt, ...)
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

/* Rejects the job (see cf_exec_reject). */
static int job_reject(cf_exec_job *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int job_reject(cf_exec_job *job, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    job->rejected = true;
    return cf_exec_reject(job->res, "%s", msg);
}

static void env_free(cf_exec_envb *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    e->n = 0;
    e->v[0] = NULL;
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
static int env_set(cf_exec_envb *e, const char *key, const char *value)
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
    if (e->n == CF_EXEC_ENV_MAX) {
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

static const char *code_file_for(cf_language l)
{
    switch (l) {
    case CF_LANG_SHELL: return "main.sh";
    case CF_LANG_PYTHON: return "main.py";
    case CF_LANG_JAVASCRIPT: return "main.js";
    case CF_LANG_WASM: return "main.wasm";
    default: return NULL;
    }
}

/* ---- check ---- */

/* The interpreter that runs a language's code (NULL: none here). */
static const char *interp_for(const cf_exec_base *base, cf_language l)
{
    if ((unsigned)l < 32 && (base->embedded_languages & (1u << l)))
        return base->embedded_runtime;
    switch (l) {
    case CF_LANG_SHELL: return base->shell_path;
    case CF_LANG_PYTHON: return base->python_path;
    case CF_LANG_JAVASCRIPT: return base->node_path;
    default: return NULL;
    }
}

int cf_exec_job_check(cf_exec_job *job, const cf_exec_base *base, const char *who, const char *isolation,
                      const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err)
{
    memset(job, 0, sizeof(*job));
    job->base = base;
    job->who = who;
    job->req = req;
    job->res = res;
    job->program = ctx ? ctx->program : NULL;
    job->take = ctx ? ctx->take : NULL;
    if (cf_str_set(&res->meta.backend, who) < 0 || cf_str_set(&res->meta.isolation, isolation) < 0 ||
        cf_str_set(&res->meta.language, cf_language_name(req->language)) < 0)
        return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", who);

    if (job->program) {
        /* A prepared program: its name is ours, its interpreter one of
         * the operator's. */
        if (!job->program->name || !job->program->name[0] || strchr(job->program->name, '/'))
            return cf_error_set(err, CF_E_INVALID, "%s: bad program name", who);
        job->code_file = job->program->name;
        if (job->program->interp != CF_LANG_NONE) {
            job->interp = interp_for(base, job->program->interp);
            if (!job->interp)
                return job_reject(job, "language %s (needed to run %s programs) not available on backend '%s'",
                                  cf_language_name(job->program->interp), cf_language_name(req->language), who);
        }
    } else {
        job->interp = interp_for(base, req->language);
        job->code_file = code_file_for(req->language);
        if (req->language != CF_LANG_COMMAND && !job->interp)
            return job_reject(job, "language %s not supported by backend '%s'", cf_language_name(req->language),
                              who);
    }
    if (req->language == CF_LANG_COMMAND && (req->argc == 0 || !req->argv || !req->argv[0]))
        return job_reject(job, "language command needs argv[0]");
    if (req->argc > CF_EXEC_ARGV_MAX)
        return job_reject(job, "more than %d arguments", CF_EXEC_ARGV_MAX);
    for (size_t i = 0; i < req->argc; i++)
        if (!req->argv[i])
            return job_reject(job, "argv[%zu] is missing", i);

    /* Everything about the request's files is checked before anything is
     * created: an unsafe path must not run anything. */
    size_t files_total = 0;
    for (size_t i = 0; i < req->n_files; i++) {
        const char *path = req->files[i].path ? req->files[i].path : "";
        char why[96], shown[100];
        if (cf_path_check(path, strlen(path), why, sizeof(why)) < 0) {
            cf_printable(path, strlen(path), shown, sizeof(shown));
            return job_reject(job, "unsafe file path '%s': %s", shown, why);
        }
        files_total += req->files[i].content.len;
        if (files_total > base->max_files_bytes) {
            char max[32];
            cf_format_size((int64_t)base->max_files_bytes, max, sizeof(max));
            return job_reject(job, "files exceed %s in total", max);
        }
    }
    for (size_t i = 0; i < req->n_env; i++) {
        if (!env_name_ok(req->env[i].key) || !req->env[i].value) {
            char shown[100];
            const char *k = req->env[i].key ? req->env[i].key : "";
            cf_printable(k, strlen(k), shown, sizeof(shown));
            return job_reject(job, "invalid environment variable name '%s'", shown);
        }
    }
    return 0;
}

int cf_exec_job_open(cf_exec_job *job, const cf_exec_base *base, const char *who, const char *isolation, int slots,
                     const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err)
{
    memset(job, 0, sizeof(*job));
    if (slots > 0 && (!ctx || ctx->slot < 0 || ctx->slot >= slots))
        return cf_error_set(err, CF_E_INVALID, "%s: slot %d outside 0..%d", who, ctx ? ctx->slot : -1, slots - 1);
    if (cf_exec_job_check(job, base, who, isolation, ctx, req, res, err) < 0)
        return -1;
    return job->rejected ? 0 : 1;
}

/* ---- directories and files ---- */

int cf_exec_dirs_create(const char *parent, uid_t owner, gid_t group, const char *who, cf_exec_dirs *d,
                        cf_error *err)
{
    *d = (cf_exec_dirs){0};
    /* One random directory per execution (one thing to remove, one entry
     * left by a crashed worker) with fixed-name work/ and run/ inside:
     * cheaper than a mkdtemp + realpath for each. */
    if (cf_workdir_create(parent, owner, group, &d->top, err) < 0 ||
        cf_workdir_create_in(d->top, "work", owner, group, &d->work, err) < 0 ||
        cf_workdir_create_in(d->top, "run", owner, group, &d->run, err) < 0)
        goto fail;
    int rfd = cf_workdir_dirfd(d->run);
    if (mkdirat(rfd, "out", 0755) < 0 ||
        (owner != (uid_t)-1 && fchownat(rfd, "out", owner, group, AT_SYMLINK_NOFOLLOW) < 0)) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: creating the output directory", who);
        goto fail;
    }
    return 0;
fail:
    cf_exec_dirs_destroy(d);
    cf_error_wrap(err, "%s", who);
    if (err)
        err->retriable = true;
    return -1;
}

void cf_exec_dirs_destroy(cf_exec_dirs *d)
{
    cf_workdir_destroy(d->work);
    cf_workdir_destroy(d->run);
    cf_workdir_destroy(d->top);
    *d = (cf_exec_dirs){0};
}

void cf_exec_dirs_release(cf_exec_dirs *d)
{
    cf_workdir_release(d->work);
    cf_workdir_release(d->run);
    cf_workdir_release(d->top);
    *d = (cf_exec_dirs){0};
}

void cf_exec_job_adopt_dirs(cf_exec_job *job, cf_exec_dirs *d)
{
    job->top = d->top;
    job->work = d->work;
    job->run = d->run;
    *d = (cf_exec_dirs){0};
}

void cf_exec_job_return_dirs(cf_exec_job *job, cf_exec_dirs *d)
{
    d->top = job->top;
    d->work = job->work;
    d->run = job->run;
    job->top = job->work = job->run = NULL;
}

int cf_exec_job_dirs(cf_exec_job *job, const char *parent, uid_t owner, gid_t group, cf_error *err)
{
    cf_exec_dirs d;
    if (cf_exec_dirs_create(parent, owner, group, job->who, &d, err) < 0)
        return -1;
    cf_exec_job_adopt_dirs(job, &d);
    return 0;
}

/* A failed put: the request's fault (rejected) or the backend's (-1). */
static int put_failed(cf_exec_job *job, const char *what, const char *path, cf_error *ferr, cf_error *err)
{
    char shown[100];
    cf_printable(path, strlen(path), shown, sizeof(shown));
    if (ferr->code == CF_E_INVALID)
        return job_reject(job, "%s '%s' rejected: %s", what, shown, ferr->msg);
    if (ferr->sys_errno == ENOSPC || ferr->sys_errno == EDQUOT || ferr->sys_errno == EFBIG)
        return job_reject(job, "%s '%s' does not fit in the work directory: %s", what, shown, ferr->msg);
    if (err) {
        *err = *ferr;
        cf_error_wrap(err, "%s: placing %s '%s'", job->who, what, shown);
    }
    return -1;
}

/* workspace_ro: every directory that holds a placed file becomes 0555
 * (files were created 0444).  Nothing but the worker has touched the tree
 * yet, so the walk needs no symlink defence beyond cf_workdir's own. */
static int seal_dirs(cf_exec_job *job, const cf_exec_files *files, cf_error *err)
{
    int dfd = cf_workdir_dirfd(job->work);
    for (size_t i = 0; i < files->n_place; i++) {
        char buf[CF_PATH_MAX_BYTES + 1];
        if (cf_strlcpy(buf, files->place[i].path, sizeof(buf)) >= sizeof(buf))
            continue;
        for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
            *slash = '\0';
            if (fchmodat(dfd, buf, 0555, 0) < 0 && errno != ENOENT)
                return cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: sealing workspace directory", job->who);
        }
    }
    return 0;
}

int cf_exec_input_json(cf_exec_job *job, char **text, cf_error *err)
{
    *text = NULL;
    cf_error jerr;
    cf_error_clear(&jerr);
    json_t *j = cf_msgpack_to_json(job->req->input.data, job->req->input.len, &jerr);
    if (!j)
        return job_reject(job, "input cannot be given to the program as JSON: %s", jerr.msg);
    *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(j);
    if (!*text)
        return cf_error_set(err, CF_E_NOMEM, "%s: encoding input.json", job->who);
    return 0;
}

static int write_input(cf_exec_job *job, cf_error *err)
{
    char *txt;
    if (cf_exec_input_json(job, &txt, err) < 0 || job->rejected)
        return job->rejected ? 0 : -1;
    cf_error jerr;
    cf_error_clear(&jerr);
    int rc = cf_workdir_put(job->run, "input.json", txt, strlen(txt), 0644, &jerr);
    free(txt);
    if (rc < 0)
        return put_failed(job, "structured input", "input.json", &jerr, err);
    return 0;
}

/* Resolves a command's argv[0]: a name is looked up in exec_path only; a
 * path with '/' is absolute or relative to the work dir.  The check is made
 * on the host path; job->exe gets the path the program's root sees. */
static int resolve_command(cf_exec_job *job, const char *name)
{
    char shown[100], host[CF_EXEC_PATH_BYTES];
    cf_printable(name, strlen(name), shown, sizeof(shown));
    if (!name[0] || strlen(name) > 4096)
        return job_reject(job, "command name is empty or too long");
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return job_reject(job, "command '%s' contains control characters", shown);
    if (strchr(name, '/') && job->base->exec_where) {
        /* A program with its own root: the host's filesystem says nothing
         * about what exists in there, and looking (as root) would tell the
         * caller what exists on the host.  execve inside decides; what it
         * cannot run is the caller's "cannot execute".  /proc stays out of
         * reach (/proc/self/exe of the program's first moments is the
         * worker's own binary): no component may be "proc" or "..". */
        for (const char *c = name; *c;) {
            const char *e = strchr(c, '/');
            size_t len = e ? (size_t)(e - c) : strlen(c);
            if ((len == 4 && strncmp(c, "proc", 4) == 0) || (len == 2 && strncmp(c, "..", 2) == 0))
                return job_reject(job, "command '%s' is not allowed", shown);
            c += len + (e ? 1 : 0);
        }
        int m = name[0] == '/' ? snprintf(job->exe, sizeof(job->exe), "%s", name)
                               : snprintf(job->exe, sizeof(job->exe), "%s/%s", job->work_in, name);
        if (m < 0 || (size_t)m >= sizeof(job->exe))
            return job_reject(job, "command '%s' is too long", shown);
        return 0;
    }
    if (strchr(name, '/')) {
        int n, m;
        if (name[0] == '/') {
            n = snprintf(host, sizeof(host), "%s", name);
            m = snprintf(job->exe, sizeof(job->exe), "%s", name);
        } else {
            n = snprintf(host, sizeof(host), "%s/%s", cf_workdir_path(job->work), name);
            m = snprintf(job->exe, sizeof(job->exe), "%s/%s", job->work_in, name);
        }
        if (n < 0 || (size_t)n >= sizeof(host) || m < 0 || (size_t)m >= sizeof(job->exe) || !is_executable_file(host))
            return job_reject(job, "command '%s' is not an executable file", shown);
        if (is_forbidden_program(host))
            return job_reject(job, "command '%s' is not allowed", shown);
        return 0;
    }
    const char *p = job->base->exec_path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);
        if (dl > 0 && p[0] == '/') { /* relative PATH entries would depend on the cwd */
            int n = snprintf(job->exe, sizeof(job->exe), "%.*s/%s", (int)dl, p, name);
            if (n > 0 && (size_t)n < sizeof(job->exe) && cf_exec_file_in_root(job->root, job->exe)) {
                if (!job->root && is_forbidden_program(job->exe))
                    return job_reject(job, "command '%s' is not allowed", shown);
                return 0;
            }
        }
        if (!colon)
            break;
        p = colon + 1;
    }
    job->exe[0] = '\0';
    return job_reject(job, "command '%s' not found in exec_path", shown);
}

#define NOMEM(job, err) cf_error_set(err, CF_E_NOMEM, "%s: out of memory", (job)->who)

/* The steps of cf_exec_job_fill return -1 (the backend broke, err set), 0
 * (go on) or FILL_STOP: the request was rejected (job->rejected, res
 * filled) and nothing more is done. */
#define FILL_STOP 1

/* put_failed for a step: its rejection stops the fill. */
static int fill_put_failed(cf_exec_job *job, const char *what, const char *path, cf_error *ferr, cf_error *err)
{
    return put_failed(job, what, path, ferr, err) < 0 ? -1 : FILL_STOP;
}

/* The work and run directories as the program sees them (view; NULL or
 * a NULL member: the host paths). */
static int fill_views(cf_exec_job *job, const cf_exec_view *view, cf_error *err)
{
    const char *wv = view && view->work ? view->work : cf_workdir_path(job->work);
    const char *rv = view && view->run ? view->run : cf_workdir_path(job->run);
    if (cf_strlcpy(job->work_in, wv, sizeof(job->work_in)) >= sizeof(job->work_in) ||
        cf_strlcpy(job->run_in, rv, sizeof(job->run_in)) >= sizeof(job->run_in))
        return cf_error_set(err, CF_E_LIMIT, "%s: work directory path too long", job->who);
    return 0;
}

/* The workspace's files into the work directory, each path checked and
 * their total bounded; read-only ones 0444. */
static int place_workspace(cf_exec_job *job, const cf_exec_files *files, cf_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < files->n_place; i++) {
        const cf_file *f = &files->place[i];
        const char *path = f->path ? f->path : "";
        char why[96], shown[100];
        if (cf_path_check(path, strlen(path), why, sizeof(why)) < 0) {
            cf_printable(path, strlen(path), shown, sizeof(shown));
            job_reject(job, "unsafe workspace path '%s': %s", shown, why);
            return FILL_STOP;
        }
        total += f->content.len;
        if (total > job->base->max_files_bytes) {
            char max[32];
            cf_format_size((int64_t)job->base->max_files_bytes, max, sizeof(max));
            job_reject(job, "workspace files exceed %s in total", max);
            return FILL_STOP;
        }
        cf_error ferr;
        cf_error_clear(&ferr);
        if (cf_workdir_put(job->work, path, f->content.data ? (const void *)f->content.data : "", f->content.len,
                           files->read_only ? 0444 : 0644, &ferr) < 0)
            return fill_put_failed(job, "workspace file", path, &ferr, err);
    }
    return 0;
}

/* The workspace first, so a request file may not silently replace one
 * (O_EXCL: a clash is the request's fault); then the request's files; a
 * read-only workspace's directories sealed last. */
static int place_files(cf_exec_job *job, const cf_exec_files *files, cf_error *err)
{
    const cf_request *req = job->req;
    if (files) {
        int rc = place_workspace(job, files, err);
        if (rc != 0)
            return rc;
    }
    for (size_t i = 0; i < req->n_files; i++) {
        cf_error ferr;
        cf_error_clear(&ferr);
        if (cf_workdir_put(job->work, req->files[i].path, req->files[i].content.data, req->files[i].content.len, 0644,
                           &ferr) < 0)
            return fill_put_failed(job, "file path", req->files[i].path, &ferr, err);
    }
    if (files && files->read_only && seal_dirs(job, files, err) < 0)
        return -1;
    return 0;
}

/* The prepared program (0755) or the request's code (or module) into the
 * run directory. */
static int place_code(cf_exec_job *job, cf_error *err)
{
    const cf_request *req = job->req;
    if (job->program) {
        cf_error ferr;
        cf_error_clear(&ferr);
        if (cf_workdir_put(job->run, job->code_file, job->program->data ? (const void *)job->program->data : "",
                           job->program->len, 0755, &ferr) < 0)
            return fill_put_failed(job, "program", job->code_file, &ferr, err);
    } else if (job->code_file) {
        cf_error ferr;
        cf_error_clear(&ferr);
        const cf_bytes *src = req->language == CF_LANG_WASM ? &req->module : &req->code;
        if (cf_workdir_put(job->run, job->code_file, src->data ? (const void *)src->data : "", src->len, 0644,
                           &ferr) < 0)
            return fill_put_failed(job, "code", job->code_file, &ferr, err);
    }
    return 0;
}

/* The environment every program gets, and the worker's variables the
 * allowlist names: nothing else of the worker's. */
static int env_fixed(cf_exec_job *job, cf_error *err)
{
    const cf_request *req = job->req;
    const cf_policy *pol = &req->policy;
    cf_exec_envb *env = &job->env;
    if (env_set(env, "HOME", job->work_in) < 0 || env_set(env, "PATH", job->base->exec_path) < 0)
        return NOMEM(job, err);
    /* The code lives outside the work directory: let modules placed next
     * to the program's files import as they did when both shared a dir. */
    if (req->language == CF_LANG_PYTHON && env_set(env, "PYTHONPATH", job->work_in) < 0)
        return NOMEM(job, err);
    /* No __pycache__ written into the work directory (it would be
     * collected into the workspace). */
    if (req->language == CF_LANG_PYTHON && env_set(env, "PYTHONDONTWRITEBYTECODE", "1") < 0)
        return NOMEM(job, err);
    if (req->language == CF_LANG_JAVASCRIPT && env_set(env, "NODE_PATH", job->work_in) < 0)
        return NOMEM(job, err);
    for (size_t i = 0; pol->env_allow_set && i < pol->n_env_allow; i++) {
        const char *name = pol->env_allow[i];
        if (!env_name_ok(name))
            continue;
        const char *v = worker_env(name);
        if (v && env_set(env, name, v) < 0)
            return NOMEM(job, err);
    }
    return 0;
}

/* The request's own variables (the compile pipeline's output mark made a
 * path in the run directory). */
static int env_request(cf_exec_job *job, cf_error *err)
{
    const cf_request *req = job->req;
    char pathbuf[CF_EXEC_PATH_BYTES + 32];
    for (size_t i = 0; i < req->n_env; i++) {
        const char *val = req->env[i].value;
        if (job->take && strncmp(val, CF_EXEC_OUT_MARK, strlen(CF_EXEC_OUT_MARK)) == 0) {
            snprintf(pathbuf, sizeof(pathbuf), "%s/out%s", job->run_in, val + strlen(CF_EXEC_OUT_MARK));
            val = pathbuf;
        }
        if (env_set(&job->env, req->env[i].key, val) < 0) {
            if (errno == E2BIG) {
                job_reject(job, "more than %d environment variables", CF_EXEC_ENV_MAX);
                return FILL_STOP;
            }
            return NOMEM(job, err);
        }
    }
    return 0;
}

/* input.json written (when there is an input) and the variables naming
 * the input, the output file and the work directory. */
static int env_io(cf_exec_job *job, cf_error *err)
{
    cf_exec_envb *env = &job->env;
    char pathbuf[CF_EXEC_PATH_BYTES + 32];
    if (job->req->input.len > 0) {
        if (write_input(job, err) < 0 || job->rejected)
            return job->rejected ? FILL_STOP : -1;
        snprintf(pathbuf, sizeof(pathbuf), "%s/input.json", job->run_in);
        if (env_set(env, "CODEFLEET_INPUT", pathbuf) < 0)
            return NOMEM(job, err);
    }
    snprintf(pathbuf, sizeof(pathbuf), "%s/out/output.json", job->run_in);
    if (env_set(env, "CODEFLEET_OUTPUT", pathbuf) < 0 || env_set(env, "CODEFLEET_WORKDIR", job->work_in) < 0)
        return NOMEM(job, err);
    return 0;
}

/* run_in/name as an argument the job owns; NULL when out of memory. */
static char *owned_run_path(cf_exec_job *job, const char *name)
{
    char pathbuf[CF_EXEC_PATH_BYTES + 32];
    snprintf(pathbuf, sizeof(pathbuf), "%s/%s", job->run_in, name);
    char *path = cf_strdup(pathbuf);
    if (path)
        job->owned[job->n_owned++] = path;
    return path;
}

/* The compile pipeline names the output directory with a mark: each
 * argument starting with it becomes a path in the run directory. */
static int argv_out_marks(cf_exec_job *job, size_t ac, cf_error *err)
{
    char pathbuf[CF_EXEC_PATH_BYTES + 32];
    for (size_t i = 0; job->take && i < ac; i++) {
        if (strncmp(job->argv[i], CF_EXEC_OUT_MARK, strlen(CF_EXEC_OUT_MARK)) != 0)
            continue;
        snprintf(pathbuf, sizeof(pathbuf), "%s/out%s", job->run_in, job->argv[i] + strlen(CF_EXEC_OUT_MARK));
        char *p = cf_strdup(pathbuf);
        if (!p)
            return NOMEM(job, err);
        job->owned[job->n_owned++] = p;
        job->argv[i] = p;
    }
    return 0;
}

/* argv and the program's path: interpreter + code file + extra
 * arguments, or the command (resolved). */
static int fill_argv(cf_exec_job *job, cf_error *err)
{
    const cf_request *req = job->req;
    job->argv = calloc(req->argc + 3, sizeof(char *));
    job->owned = calloc(req->argc + 3, sizeof(char *));
    if (!job->argv || !job->owned)
        return NOMEM(job, err);
    size_t ac = 0;
    if (job->program) {
        char *prog_path = owned_run_path(job, job->code_file);
        if (!prog_path)
            return NOMEM(job, err);
        cf_strlcpy(job->exe, job->interp ? job->interp : prog_path, sizeof(job->exe));
        if (job->interp)
            job->argv[ac++] = (char *)job->interp;
        job->argv[ac++] = prog_path;
        for (size_t i = 0; i < req->argc; i++)
            job->argv[ac++] = req->argv[i];
    } else if (req->language == CF_LANG_COMMAND) {
        if (resolve_command(job, req->argv[0]) < 0 || job->rejected)
            return FILL_STOP;
        for (size_t i = 0; i < req->argc; i++)
            job->argv[ac++] = req->argv[i];
    } else {
        cf_strlcpy(job->exe, job->interp, sizeof(job->exe));
        char *code_path = owned_run_path(job, job->code_file);
        if (!code_path)
            return NOMEM(job, err);
        job->argv[ac++] = (char *)job->interp;
        job->argv[ac++] = code_path;
        for (size_t i = 0; i < req->argc; i++)
            job->argv[ac++] = req->argv[i];
    }
    job->argv[ac] = NULL;
    return argv_out_marks(job, ac, err);
}

int cf_exec_job_fill(cf_exec_job *job, const cf_exec_files *files, const cf_exec_view *view, cf_error *err)
{
    int rc = fill_views(job, view, err);
    if (rc == 0)
        rc = place_files(job, files, err);
    if (rc == 0)
        rc = place_code(job, err);
    if (rc == 0)
        rc = env_fixed(job, err);
    if (rc == 0)
        rc = env_request(job, err);
    if (rc == 0)
        rc = env_io(job, err);
    if (rc == 0)
        rc = fill_argv(job, err);
    return rc < 0 ? -1 : 0;
}

void cf_exec_job_spec(const cf_exec_job *job, const cf_exec_ctx *ctx, cf_run_spec *spec)
{
    const cf_policy *pol = &job->req->policy;
    memset(spec, 0, sizeof(*spec));
    spec->path = job->exe;
    spec->argv = job->argv;
    spec->envp = (char *const *)job->env.v;
    spec->cwd = job->work_in;
    spec->stdin_data = job->req->stdin_data.data;
    spec->stdin_len = job->req->stdin_data.len;
    spec->max_stdout = pol->max_stdout_bytes > 0 ? (size_t)pol->max_stdout_bytes : FALLBACK_OUTPUT_CAP;
    spec->max_stderr = pol->max_stderr_bytes > 0 ? (size_t)pol->max_stderr_bytes : FALLBACK_OUTPUT_CAP;
    spec->timeout_us = pol->timeout_us > 0 ? pol->timeout_us : CF_EXEC_FALLBACK_TIMEOUT_US;
    spec->cancel = ctx ? ctx->cancel : NULL;
    if (ctx && job->req->stream) {
        spec->on_output = ctx->on_output;
        spec->on_output_arg = ctx->on_output_arg;
    }
    int nl = 0;
    if (pol->cpu_time_us > 0) /* whole seconds, rounded up (rlimit granularity) */
        spec->rlimits[nl++] = (cf_run_rlimit){RLIMIT_CPU, (rlim_t)((pol->cpu_time_us + 999999) / 1000000)};
    if (pol->max_file_size_bytes > 0)
        spec->rlimits[nl++] = (cf_run_rlimit){RLIMIT_FSIZE, (rlim_t)pol->max_file_size_bytes};
    spec->rlimits[nl++] = (cf_run_rlimit){RLIMIT_NOFILE, OPEN_FILES_LIMIT};
    /* Queued signals are counted per user up the user namespaces, so an
     * execution in a namespace the worker (root) made charges root's count:
     * without a cap of its own, one program could queue root's whole quota
     * and leave every root process (the worker, other tenants) without
     * timers or queued signals until it ends. */
    spec->rlimits[nl++] = (cf_run_rlimit){RLIMIT_SIGPENDING, PENDING_SIGNALS_LIMIT};
    /* The same for POSIX message queues' bytes (cf_exec_base.msgqueue_share). */
    if (job->base && job->base->msgqueue_share > 0)
        spec->rlimits[nl++] = (cf_run_rlimit){RLIMIT_MSGQUEUE, (rlim_t)job->base->msgqueue_share};
    spec->n_rlimits = nl;
}

/* ---- results ---- */

static void read_output(cf_exec_job *job)
{
    cf_result *res = job->res;
    size_t max = job->base->max_output_file_bytes;
    cf_buf b;
    cf_buf_init(&b, 0);
    bool too_big = false;
    cf_error e;
    cf_error_clear(&e);
    if (cf_workdir_read(job->run, "out/output.json", max, &b, &too_big, &e) < 0) {
        if (e.code != CF_E_NOT_FOUND)
            add_diag(res, "warning", "output.json", "output.json ignored: %s", e.msg);
        cf_buf_free(&b);
        return;
    }
    if (too_big) {
        add_diag(res, "warning", "output.json", "output.json ignored: larger than %zu bytes", max);
        cf_buf_free(&b);
        return;
    }
    cf_exec_output_json(job, (const char *)b.data, b.len);
    cf_buf_free(&b);
}

void cf_exec_output_json(cf_exec_job *job, const char *text, size_t len)
{
    cf_result *res = job->res;
    size_t max = job->base->max_output_file_bytes;
    if (len > max) {
        add_diag(res, "warning", "output.json", "output.json ignored: larger than %zu bytes", max);
        return;
    }
    cf_error e;
    cf_error_clear(&e);
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        add_diag(res, "warning", "output.json", "output.json is not valid JSON (line %d, column %d): %s", jerr.line,
                 jerr.column, jerr.text);
        return;
    }
    if (cf_json_to_msgpack(j, &res->output, &e) < 0)
        add_diag(res, "warning", "output.json", "output.json cannot be converted: %s", e.msg);
    json_decref(j);
}

/* Whether line (len bytes) starts with prefix. */
static bool line_starts(const char *line, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(line, prefix, n) == 0;
}

/* Whether line looks like a JavaScript error's headline ("TypeError: x",
 * "Error [ERR_X]: y", "Uncaught ..."). */
static bool js_error_line(const char *line, size_t len)
{
    if (line_starts(line, len, "Uncaught "))
        return true;
    size_t i = 0;
    while (i < len && ((line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= 'a' && line[i] <= 'z')))
        i++;
    return i >= 5 && memcmp(line + i - 5, "Error", 5) == 0 &&
           (line_starts(line + i, len - i, ": ") || line_starts(line + i, len - i, " ["));
}

/* The line of a failed program's stderr that says why, for the result's
 * reason (what a person reads first): Python's exception after its
 * traceback, a Rust or Go panic's message, Node's error headline, a C
 * assertion.  out is "" when none is recognised;
 * the text is the program's, so control characters are replaced. */
static void failure_line(cf_language lang, const cf_buf *err, bool truncated, char *out, size_t size)
{
    out[0] = '\0';
    if (truncated) /* its end, where the reason is, was cut */
        return;
    const char *text = (const char *)err->data, *end = text + err->len, *found = NULL;
    size_t found_len = 0;
    bool traceback = false, take_next = false, after_frames = false;
    for (const char *line = text; text && line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t len = (size_t)((nl ? nl : end) - line);
        if (len && line[len - 1] == '\r')
            len--;
        bool pick = false;
        if (take_next && len) { /* Rust 1.73+: "panicked at src/main.rs:2:5:" then the message */
            pick = true;
            take_next = false;
        } else if (lang == CF_LANG_PYTHON) {
            /* The exception's first line, after the last traceback's
             * frames (indented): a message's further lines are not it. */
            if (line_starts(line, len, "Traceback (most recent call last):")) {
                traceback = true;
                after_frames = false;
                found = NULL;
            } else if (traceback && len && line[0] == ' ') {
                after_frames = true;
            } else if (traceback && after_frames && len && !found) {
                pick = true;
            }
        } else if (lang == CF_LANG_RUST && memmem(line, len, "panicked at ", 12)) {
            pick = len == 0 || line[len - 1] != ':';
            take_next = !pick;
        } else if (lang == CF_LANG_GO) {
            pick = !found && (line_starts(line, len, "panic: ") || line_starts(line, len, "fatal error: "));
        } else if (lang == CF_LANG_JAVASCRIPT || lang == CF_LANG_TYPESCRIPT) {
            pick = js_error_line(line, len); /* the last: node prints the uncaught one after the program's */
        } else if (lang == CF_LANG_C || lang == CF_LANG_CPP) {
            pick = !found && memmem(line, len, "Assertion `", 11) != NULL;
        }
        if (pick && len) {
            found = line;
            found_len = len;
        }
        line = nl ? nl + 1 : end;
    }
    if (!found)
        return;
    if (found_len > 300)
        found_len = 300;
    cf_sanitize_text(found, found_len, false, out, size);
}

static void map_outcome(const cf_run_outcome *o, const cf_request *req, bool oom_killed, bool rlimit_as,
                        bool children_bounded, cf_result *res)
{
    char why[320];
    const cf_policy *p = &req->policy;
    char d[32], mem[32];
    /* Limits in reasons are for people ("64 MiB"); the numbers are in the
     * request's policy. */
    cf_format_size(p->memory_bytes, mem, sizeof(mem));
    res->has_exit_code = o->exited;
    res->exit_code = o->exited ? o->exit_code : 0;
    res->signal = o->signal;
    /* Killed well below its own limit: what ran out is the memory of all
     * the worker's children together (children-memory), not the program's.
     * Only judged from the execution cgroup's own peak (everything it
     * charged), never from a process's RSS, which leaves out tmpfs, shm,
     * kernel memory and the other processes. */
    int64_t slack = p->memory_bytes / 16 > (16LL << 20) ? p->memory_bytes / 16 : (16LL << 20);
    if (oom_killed && !o->timed_out && !o->cpu_exceeded && children_bounded && o->peak_is_cgroups &&
        p->memory_bytes > 0 && o->peak_rss_bytes > 0 && o->peak_rss_bytes + slack < p->memory_bytes) {
        char peak[32];
        cf_format_size(o->peak_rss_bytes, peak, sizeof(peak));
        res->status = CF_STATUS_INTERNAL_ERROR;
        cf_result_set_reason(res, "killed by the OOM killer at %s, below its memory limit of %s: the worker's "
                             "executions, helpers and zygotes together reached their bound (children-memory); "
                             "not the program's fault, try again", peak, mem);
    } else if (oom_killed && !o->timed_out && !o->cpu_exceeded) {
        res->status = CF_STATUS_MEMORY_EXCEEDED;
        if (p->memory_bytes > 0)
            cf_result_set_reason(res, "memory limit of %s exceeded (killed by the OOM killer)", mem);
        else
            cf_result_set_reason(res, "default memory limit exceeded (killed by the OOM killer)");
    } else if (o->timed_out) {
        res->status = CF_STATUS_TIMEOUT;
        cf_format_duration(p->timeout_us > 0 ? p->timeout_us : CF_EXEC_FALLBACK_TIMEOUT_US, d, sizeof(d));
        cf_result_set_reason(res, "wall-clock timeout of %s exceeded", d);
    } else if (o->cpu_exceeded || o->signal == SIGXCPU ||
               /* RLIMIT_CPU's SIGKILL.  rusage can read below the count the
                * kernel enforced (seen: several % on a loaded machine), so
                * any SIGKILL past half the limit that neither the timeout
                * nor the memory limit explains is taken as the CPU limit. */
               (o->signal == SIGKILL && p->cpu_time_us > 0 && o->cpu_us >= p->cpu_time_us / 2)) {
        res->status = CF_STATUS_TIMEOUT;
        cf_format_duration(p->cpu_time_us, d, sizeof(d));
        cf_result_set_reason(res, "cpu time limit of %s exceeded", d);
    } else if (o->signal == SIGXFSZ) {
        res->status = CF_STATUS_FAILED;
        cf_format_size(p->max_file_size_bytes, d, sizeof(d));
        cf_result_set_reason(res, "file size limit of %s exceeded", d);
    } else if (o->signal) {
        res->status = CF_STATUS_FAILED;
        const char *abbrev = sigabbrev_np(o->signal);
        if (rlimit_as && o->signal == SIGTRAP && req->language == CF_LANG_JAVASCRIPT && p->memory_bytes > 0)
            cf_result_set_reason(res, "killed by signal %d (SIG%s); node needs an address space of at least "
                                      "~720 MiB, the memory limit is %s",
                                 o->signal, abbrev ? abbrev : "?", mem);
        else {
            why[0] = '\0';
            if (o->signal == SIGABRT) /* a C assertion, a Rust abort */
                failure_line(req->language, &o->err, o->err_truncated, why, sizeof(why));
            cf_result_set_reason(res, "killed by signal %d (SIG%s)%s%s", o->signal, abbrev ? abbrev : "?",
                                 why[0] ? ": " : "", why);
        }
    } else if (o->exit_code != 0) {
        res->status = CF_STATUS_FAILED;
        failure_line(req->language, &o->err, o->err_truncated, why, sizeof(why));
        if (why[0])
            cf_result_set_reason(res, "exited with code %d: %s", o->exit_code, why);
        else
            cf_result_set_reason(res, "exited with code %d", o->exit_code);
    } else {
        res->status = CF_STATUS_SUCCESS;
    }
}

static void collect(cf_exec_job *job, cf_exec_files *files)
{
    size_t max_files = files->max_files > 0 ? files->max_files : FALLBACK_COLLECT_FILES;
    size_t max_bytes = files->max_bytes > 0 ? files->max_bytes : job->base->max_files_bytes;
    cf_error e;
    cf_error_clear(&e);
    if (cf_workdir_collect_matching(job->work, max_files, max_bytes, files->collect_want, files->collect_want_arg,
                                    &files->collected, &files->n_collected, &files->collect_skipped_names,
                                    &e) < 0) {
        files->collected = NULL;
        files->n_collected = 0;
        free(files->collect_error);
        files->collect_error = cf_strdup(e.msg[0] ? e.msg : "collection failed");
    }
}

/* The artifact: a regular file (cf_workdir_read never follows a link). */
static void take_file(cf_exec_job *job, cf_exec_take *t)
{
    char rel[CF_EXEC_PATH_BYTES];
    snprintf(rel, sizeof(rel), "out/%s", t->name);
    cf_buf b;
    cf_buf_init(&b, 0);
    cf_error e;
    cf_error_clear(&e);
    bool too_big = false;
    if (cf_workdir_read(job->run, rel, t->max, &b, &too_big, &e) < 0) {
        t->missing = true;
    } else if (too_big) {
        t->too_big = true;
    } else {
        size_t len;
        t->data.data = cf_buf_steal(&b, &len);
        t->data.len = len;
    }
    cf_buf_free(&b);
}

int cf_exec_job_finish(cf_exec_job *job, const cf_exec_ctx *ctx, cf_run_outcome *o, bool oom_killed, int64_t cpu_us,
                       cf_error *err)
{
    cf_result *res = job->res;
    if (ctx && ctx->phases) {
        ctx->phases->run_end_us = cf_mono_us();
        ctx->phases->run_start_us = ctx->phases->run_end_us - (o->wall_us > 0 ? o->wall_us : 0);
    }
    if (o->cancelled) {
        cf_error_set(err, CF_E_TIMEOUT, "%s: execution cancelled (worker shutting down)", job->who);
        if (err)
            err->retriable = true;
        return -1;
    }
    if (o->exec_failed && job->take)
        job->take->exec_failed = true;
    if (o->exec_failed) {
        /* Interpreters are the operator's choice: their failing to start is
         * ours.  A command's program is the caller's: not found or not
         * executable where it runs is the caller's mistake.  Arguments too
         * long are the request's whoever runs them; a kernel short of
         * memory or processes is nobody's: try again. */
        char shown[100];
        cf_printable(job->exe, strlen(job->exe), shown, sizeof(shown));
        int e = o->exec_errno;
        if (e == ENOMEM || e == EAGAIN || e == ENFILE || e == EMFILE) {
            cf_error_set_errno(err, CF_E_SYSTEM, e, "%s: execve of '%s'", job->who, shown);
            if (err)
                err->retriable = true;
            return -1;
        }
        if (job->interp && e != E2BIG)
            return cf_error_set_errno(err, CF_E_SANDBOX, o->exec_errno, "%s: cannot execute the interpreter '%s'",
                                      job->who, shown);
        o->timed_out = o->cpu_exceeded = false;
        oom_killed = false;
        map_outcome(o, job->req, false, false, false, res);
        res->status = CF_STATUS_FAILED;
        cf_result_set_reason(res, "cannot execute '%s'%s: %s", shown,
                             job->base->exec_where ? job->base->exec_where : "", strerror(o->exec_errno));
    } else {
        if (cpu_us >= 0)
            o->cpu_us = cpu_us;
        map_outcome(o, job->req, oom_killed, job->base->memory_is_rlimit_as, job->base->children_bounded, res);
    }
    res->stdout_truncated = o->out_truncated;
    res->stderr_truncated = o->err_truncated;
    size_t len;
    res->stdout_data.data = cf_buf_steal(&o->out, &len);
    res->stdout_data.len = len;
    res->stderr_data.data = cf_buf_steal(&o->err, &len);
    res->stderr_data.len = len;
    res->wall_time_us = o->wall_us;
    res->cpu_time_us = o->cpu_us;
    res->peak_memory_bytes = o->peak_rss_bytes;
    if (job->run)
        read_output(job); /* a job without directories (embedded js) hands its output over itself */
    /* The worker decides what to write back; it gets the final state
     * whenever the program ran to its end. */
    cf_exec_files *files = ctx ? ctx->files : NULL;
    if (files && files->collect && o->exited && !job->work) {
        /* never "the workspace is now empty": there was nothing to collect from */
        free(files->collect_error);
        files->collect_error = cf_strdup("this backend has no work directory to collect");
    } else if (files && files->collect && o->exited) {
        collect(job, files);
        if (files->collect_skipped_names)
            add_diag(res, "warning", NULL,
                     "%zu file(s) of the work directory were left out: their names are not UTF-8 text",
                     files->collect_skipped_names);
    }
    if (job->take && o->exited && o->exit_code == 0) {
        if (job->run)
            take_file(job, job->take);
        else
            job->take->missing = true;
    }
    return 0;
}

void cf_exec_job_free(cf_exec_job *job)
{
    if (!job)
        return;
    cf_workdir_destroy(job->work);
    cf_workdir_destroy(job->run);
    cf_workdir_destroy(job->top);
    job->work = job->run = job->top = NULL;
    env_free(&job->env);
    for (size_t i = 0; job->owned && i < job->n_owned; i++)
        free(job->owned[i]);
    free(job->owned);
    job->owned = NULL;
    job->n_owned = 0;
    free(job->argv);
    job->argv = NULL;
}
