/* The `process` backend: runs code as a plain host process ("host_local").
 *
 * It isolates nothing beyond what rlimits, a cleared environment, private
 * work directories and (when the worker is root) a per-slot uid give, and
 * it claims exactly that in its capabilities: no network or filesystem
 * controls.  It still places and collects workspace files when the worker
 * hands them over (a request naming a workspace with no fs_mode runs
 * read-write on any backend).  The request handling itself is shared with
 * the sandbox (cf_exec.h).
 *
 * Per execution: a fresh directory under cfg->work_root holding work/ and
 * run/ (cf_exec.h), then the runner, then the directory is removed
 * (after every process of the execution is dead).
 *
 * Measured on node v20 (this host): node aborts at start-up ("Fatal process
 * OOM in Failed to reserve virtual memory for CodeRange", SIGTRAP) with
 * RLIMIT_AS below about 720 MiB; 720 MiB suffices for a trivial script.
 * RLIMIT_AS counts reservations, not use, so memory limits for javascript
 * should be 1 GiB or more on this backend.
 */
#include "cf_backend.h"
#include "cf_runner.h"
#include "cf_workdir.h"
#include "cf_exec.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* With per-slot uids RLIMIT_NPROC is meaningful; without a requested value
 * this still stops a fork bomb from taking the host down. */
#define DEFAULT_NPROC_PER_SLOT 512

typedef struct process_state {
    cf_exec_base base;
    int slots;
    bool per_slot_uid;
    int64_t uid_base;
} process_state;

static void process_destroy(void *state)
{
    process_state *st = state;
    if (!st)
        return;
    cf_exec_base_free(&st->base);
    free(st);
}

static void kill_uid(uid_t uid, gid_t gid);

static int process_create(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err)
{
    *state = NULL;
    process_state *st = calloc(1, sizeof(*st));
    if (!st)
        return cf_error_set(err, CF_E_NOMEM, "process: out of memory");
    if (cf_exec_base_init(&st->base, "process", cfg, err) < 0) {
        process_destroy(st);
        return -1;
    }
    st->base.memory_is_rlimit_as = true;
    st->slots = cfg->slots > 0 ? cfg->slots : 1;

    if (cfg->run_uid_base > 0 && geteuid() == 0) {
        struct stat sb;
        if (cf_run_uid(cfg->run_uid_base, st->slots, CF_UID_BLOCK_PROCESS, st->slots) > INT32_MAX) {
            cf_error_set(err, CF_E_INVALID, "process: run_uid_base %lld too large", (long long)cfg->run_uid_base);
            process_destroy(st);
            return -1;
        }
        if (stat(st->base.work_root, &sb) < 0 || !(sb.st_mode & S_IXOTH)) {
            cf_error_set(err, CF_E_INVALID,
                         "process: work_root '%s' must be searchable by others (mode o+x) for per-slot uids",
                         st->base.work_root);
            process_destroy(st);
            return -1;
        }
        st->per_slot_uid = true;
        st->uid_base = cf_run_uid(cfg->run_uid_base, st->slots, CF_UID_BLOCK_PROCESS, 0);
        /* A crashed worker's programs that escaped their process group
         * and its death signal (double fork, setsid) would share a uid
         * with the next tenant of the slot: the block starts empty. */
        for (int i = 0; i < st->slots; i++)
            kill_uid((uid_t)(st->uid_base + i), (gid_t)(st->uid_base + i));
    }

    memset(caps, 0, sizeof(*caps));
    caps->isolation = "host_local";
    caps->languages = st->base.languages;
    caps->controls = CF_CTL_TIMEOUT | CF_CTL_CPU_TIME | CF_CTL_MEMORY | CF_CTL_STDOUT_CAP | CF_CTL_STDERR_CAP |
                     CF_CTL_FILE_SIZE | CF_CTL_ENV_ALLOWLIST | CF_CTL_STREAM;
    /* Root ignores RLIMIT_NPROC: only a dedicated non-root uid makes it real. */
    if (st->per_slot_uid)
        caps->controls |= CF_CTL_MAX_PROCESSES;
    cf_exec_notes_add(&st->base,
                      "memory = address-space rlimit (RLIMIT_AS); cpu_time = RLIMIT_CPU per process, whole seconds");
    if (st->per_slot_uid)
        cf_exec_notes_add(&st->base, "per-slot uids %lld..%lld", (long long)st->uid_base,
                          (long long)(st->uid_base + st->slots - 1));
    else
        cf_exec_notes_add(&st->base, "no per-slot uids: processes that leave the process group can outlive a run");
    caps->notes = st->base.notes;
    *state = st;
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

static int process_execute(void *state, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err)
{
    process_state *st = state;
    const cf_policy *pol = &req->policy;
    cf_exec_job job;
    cf_run_outcome outcome;
    memset(&outcome, 0, sizeof(outcome));
    int rc = -1;

    int open = cf_exec_job_open(&job, &st->base, "process", "host_local", st->per_slot_uid ? st->slots : 0, ctx, req,
                                res, err);
    if (open <= 0)
        return open;

    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    if (st->per_slot_uid) {
        uid = (uid_t)(st->uid_base + ctx->slot);
        gid = (gid_t)uid;
    }
    if (cf_exec_job_dirs(&job, st->base.work_root, uid, gid, err) < 0)
        goto out;
    if (cf_exec_job_fill(&job, ctx ? ctx->files : NULL, NULL, err) < 0)
        goto out;
    if (job.rejected) {
        rc = 0;
        goto out;
    }

    cf_run_spec spec;
    cf_exec_job_spec(&job, ctx, &spec);
    if (pol->memory_bytes > 0)
        spec.rlimits[spec.n_rlimits++] = (cf_run_rlimit){RLIMIT_AS, (rlim_t)pol->memory_bytes};
    uid_t ids[2] = {uid, (uid_t)gid};
    if (st->per_slot_uid) {
        spec.rlimits[spec.n_rlimits++] = (cf_run_rlimit){
            RLIMIT_NPROC, (rlim_t)(pol->max_processes > 0 ? pol->max_processes : DEFAULT_NPROC_PER_SLOT)};
        spec.set_ids = true;
        spec.uid = uid;
        spec.gid = gid;
        /* The process group is not enough: setsid() escapes it. */
        spec.kill_all = uid_kill_all;
        spec.kill_all_arg = ids;
    }

    if (cf_run(&spec, &outcome, err) < 0) {
        cf_error_wrap(err, "process");
        goto out;
    }
    rc = cf_exec_job_finish(&job, ctx, &outcome, false, -1, err);

out:
    /* With per-slot uids the runner's kill_all (uid_kill_all) already
     * removed every process of the uid when the program ended, so nothing
     * can write into the tree while it is removed. */
    cf_exec_job_free(&job);
    cf_run_outcome_free(&outcome);
    return rc;
}

const cf_backend_ops cf_backend_process_ops = {
    .name = "process",
    .description = "host processes with rlimits, a private work dir and a cleared environment (host_local)",
    .create = process_create,
    .destroy = process_destroy,
    .execute = process_execute,
};
