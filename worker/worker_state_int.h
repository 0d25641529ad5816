/* worker_state: the worker's Redis side (workspaces, checkpoints, attempts).
 *
 * Each slot thread owns one cf_wstate (one cf_redis connection and its
 * stores, created lazily: cf_redis is not thread-safe).  Around an
 * execution the slot calls:
 *
 *   cf_wstate_prepare()  reads a consistent snapshot of the request's
 *                        workspace (to place in the work directory) and the
 *                        latest checkpoint of its thread (handed to the
 *                        program inside its structured input);
 *   backend execute()    with ctx.files = &run.files when a workspace is named;
 *   cf_wstate_finish()   writes the program's changes back as one revision
 *                        (compare-and-set on the snapshot's revision) and
 *                        saves the checkpoint the program returned.
 *
 * Transient Redis failures are retried with backoff for up to
 * redis-retry-budget; past it (or on a persistent failure) the functions
 * return -1 with a retriable or fatal error and the caller answers
 * internal_error.  The contract for programs (input envelope, output key)
 * is in docs/STATE.md, "Through the fleet".
 */
#ifndef CF_WORKER_STATE_H
#define CF_WORKER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_backend.h"
#include "cf_checkpoint.h"
#include "cf_error.h"
#include "cf_quota.h"
#include "cf_schema.h"
#include "cf_worker.h"
#include "cf_workspace.h"

typedef struct cf_wstate cf_wstate;

/* Parses the worker's "redis" setting: "host:port", "[v6]:port", "host"
 * (port 6379) or a unix socket path starting with '/'.  host is written
 * NUL-terminated (at most hostsz-1 bytes). */
int cf_wstate_addr_parse(const char *addr, char *host, size_t hostsz, int *port, cf_error *err);

struct cf_redis_config;
/* The connection settings of cfg's "redis" (address, credentials, db,
 * timeouts) in rc; host receives the parsed host (rc->host points at it). */
int cf_wstate_redis_config(const cf_worker_config *cfg, char *host, size_t hostsz, struct cf_redis_config *rc,
                           cf_error *err);

/* Checks the Redis-related settings of cfg (address, caps) once at start-up. */
int cf_wstate_config_check(const cf_worker_config *cfg, cf_error *err);

/* A slot's state.  cfg and worker_id are borrowed and must outlive it;
 * cancel (may be NULL) cuts retries short when it becomes non-zero.  No
 * connection is made until the first operation.  NULL + err on failure. */
cf_wstate *cf_wstate_new(const cf_worker_config *cfg, const char *worker_id, const volatile int *cancel,
                         cf_error *err);
void cf_wstate_destroy(cf_wstate *st); /* NULL-safe */

/* Workspace and thread ids: 1..128 bytes of [A-Za-z0-9._-] (the rule of the
 * state library, checked here so bad ids are rejected at admission). */
bool cf_wstate_name_ok(const char *s);

/* Admission checks that need no Redis: a workspace with filesystem mode
 * none/paths is a contradiction, workspace_ro/rw need a workspace, ids must
 * be valid, and without Redis (have_redis false) requests naming a
 * workspace or thread cannot run.  Returns -1 with a reason to reject. */
int cf_wstate_admit(const cf_request *req, bool have_redis, char *reason, size_t rsz);

/* Per-execution bookkeeping between prepare and finish. */
typedef struct cf_wstate_run {
    bool ws_active;          /* the request names a workspace */
    bool ws_rw;              /* changes are written back */
    int64_t ws_rev;          /* revision of the snapshot placed */
    cf_ws_listing snap;      /* the snapshot (owns the bytes `place` points to) */
    cf_file *place;          /* views into snap for ctx.files */
    cf_exec_files files;     /* hand &files to the backend as ctx.files */
    bool cp_active;          /* the request names a thread */
    char cp_expected[CF_CHECKPOINT_ID_MAX + 1]; /* latest id when the run started ("" = none) */
    int64_t writer_seq;      /* fencing token for the save (0 = none) */
    cf_bytes orig_input;     /* the request's own input while the envelope is in place */
    bool input_swapped;
    bool prepared;           /* cf_wstate_begin prepared it: cf_wstate_end finishes it */
    /* A workspace op on a light checkout (the listing, and the bytes of the
     * one file it names only): its change, written as is (no diff against
     * the snapshot, whose other files were never read).  Owned. */
    bool light;
    bool op_change;
    cf_file *op_puts;
    size_t n_op_puts;
    char **op_dels;
    size_t n_op_dels;
} cf_wstate_run;

/* The state steps around one execution, in the one order they run; a slot
 * calls begin, runs the program when told to, then end:
 *   begin  1. the lease fences every workspace and checkpoint write of
 *             this slot until end (fence_key NULL: no lease, no fence);
 *          2. a request naming a workspace or thread: the workspace is
 *             checked out and the thread's checkpoint loaded (prepare)
 *   (the program)
 *   end    3. when the program ran and its run completed (not stopped by
 *             the worker): the workspace written back and the checkpoint
 *             saved, fenced (finish);
 *          4. the fence lifted, the run's bookkeeping freed, req's input
 *             restored.
 * begin returns as cf_wstate_prepare does (run_it false: res holds the
 * answer; -1: Redis failed, err); end returns -1 when finish failed (res
 * keeps what was done).  end is called after every begin. */
int cf_wstate_begin(cf_wstate *st, cf_request *req, int64_t writer_seq, const char *fence_key,
                    const char *fence_value, cf_wstate_run *run, bool *run_it, cf_result *res, cf_error *err);
int cf_wstate_end(cf_wstate *st, cf_request *req, cf_wstate_run *run, bool ran_to_completion, bool executed,
                  cf_result *res, cf_error *err);

/* Before execute.  writer_seq: the fencing token for a checkpoint save (the
 * request's Kafka offset + 1 when the thread's requests share a partition,
 * else 0).  Returns 0 with *run_it true: execute with ctx.files =
 * run->ws_active ? &run->files : NULL.  Returns 0 with *run_it false: res
 * holds the answer (rejected: e.g. a read-only request on a missing
 * workspace).  Returns -1: Redis failed past the retry budget (err).  req's
 * input may be replaced by the checkpoint envelope until finish. */
int cf_wstate_prepare(cf_wstate *st, cf_request *req, int64_t writer_seq, cf_wstate_run *run, bool *run_it,
                      cf_result *res, cf_error *err);

/* After execute (executed: the backend returned 0 and res is the program's
 * result).  Restores req's input, writes the workspace changes back and
 * saves the checkpoint as described in docs/STATE.md, filling
 * res->workspace_revision, changed_paths, workspace_conflict,
 * checkpoint_id, checkpoint_conflict and diagnostics.  Returns -1 when
 * Redis failed past the retry budget (res keeps what was done so far). */
int cf_wstate_finish(cf_wstate *st, cf_request *req, cf_wstate_run *run, bool executed, cf_result *res,
                     cf_error *err);

/* A workspace path by the store's rules (cf_workspace_path_check). */
int cf_wstate_path_check(const cf_wstate *st, const char *path, cf_error *err);

/* Frees what prepare allocated (collected files included); restores req's
 * input if finish did not run.  NULL-safe; leaves run zeroed. */
void cf_wstate_run_clear(cf_wstate_run *run, cf_request *req);

/* Counts a delivery of the Kafka message at topic/partition/offset and
 * returns the count (1 = first delivery; higher = the same message
 * delivered again: a resubmission of an id is a new message and counts
 * from 1).  The counts live in cf:deliveries:{group/topic/partition}, a
 * field per offset, and each delivery deletes the fields below
 * stored_below (the partition's position stored for commit when the
 * message was taken; -1 none): Redis holds the counts of messages not yet
 * committed, not one per request, so a tenant's request rate does not
 * fill it (issue 30).  The hash expires a day after its partition's last
 * delivery.  Transient failures are retried within the budget. */
int cf_wstate_attempt(cf_wstate *st, const char *topic, int32_t partition, int64_t offset, int64_t stored_below,
                      int64_t *attempt, cf_error *err);

/* ---- idempotency: one run per request id, its result replayed ----
 *
 * Keys (scope = the profile, keeping tenants apart): cf:idem:{scope/id}, a
 * hash of the request digest and its encoded result, kept for
 * idempotency-ttl; cf:lease:{scope/id}, "digest:token" while a worker runs
 * the id, expiring after idempotency-lease unless renewed. */
typedef enum cf_claim_kind {
    CF_CLAIM_RUN,    /* the lease is ours: run it */
    CF_CLAIM_REPLAY, /* already answered: stored holds its encoded result */
    CF_CLAIM_REUSED, /* the id is (or was) used by a different request */
    CF_CLAIM_BUSY,   /* another run of the same request holds the lease */
} cf_claim_kind;

typedef struct cf_claim {
    cf_claim_kind kind;
    cf_bytes stored;  /* CF_CLAIM_REPLAY: the result as it was published */
    int64_t wait_ms;  /* CF_CLAIM_BUSY: the lease's remaining time */
} cf_claim;

void cf_claim_clear(cf_claim *c);

/* While set (non-NULL), retries stop early when *job_cancel becomes
 * non-zero, as with the worker-wide cancel given at creation. */
void cf_wstate_set_cancel(cf_wstate *st, const volatile int *job_cancel);

/* While set, this slot's workspace and checkpoint writes land only if the
 * Redis key holds value (the run's lease): a worker that lost the request
 * writes nothing (CF_E_FENCED).  Borrowed strings; NULL key clears. */
void cf_wstate_set_guard(cf_wstate *st, const char *key, const char *value);
/* The profile whose quotas this run's workspace and checkpoint writes are
 * charged to (NULL: none); cf_wstate_end clears it. */
void cf_wstate_set_quota(cf_wstate *st, const char *profile, int64_t workspace_bytes, int64_t checkpoint_bytes,
                         const char *request_id);
/* Whether the last run's workspace write-back or checkpoint save was
 * refused by its tenant's quota with nothing of the run written: it
 * changed nothing, so its answer is not kept for replay (sent again once
 * the tenant made room, it runs again).  A cap's refusal would only repeat,
 * and a run whose workspace was written must not run twice: both kept. */
bool cf_wstate_write_refused(const cf_wstate *st);

/* The lease key and value of a claim, for cf_wstate_set_guard. */
int cf_wstate_lease_ref(const char *scope, const char *id, const char *digest, const char *token, char *key,
                        size_t keysz, char *value, size_t valuesz);

/* One try (no retries: the caller decides how to wait). */
int cf_wstate_claim(cf_wstate *st, const char *scope, const char *id, const char *digest, const char *token,
                    int64_t lease_ms, cf_claim *out, cf_error *err);

/* Extends our lease, or takes it back when it lapsed and nobody else took
 * it and no answer is stored; *held false when another run has it (or the
 * answer is in). */
int cf_wstate_lease_renew(cf_wstate *st, const char *scope, const char *id, const char *digest, const char *token,
                          int64_t lease_ms, bool *held, cf_error *err);

/* Stores the result and releases our lease, unless another run holds the
 * lease now (then nothing is stored: its answer will be) or an answer is
 * stored already (the first answer stays the answer); *stored (may be
 * NULL) says whether this run's result is the one stored (a retry after a
 * lost reply knows its own).  It expires at expire_at_ms (Unix ms, as a
 * quota charge placed it) or else ttl_ms from now.  Retries within the
 * budget. */
int cf_wstate_store_result(cf_wstate *st, const char *scope, const char *id, const char *digest, const char *token,
                           const cf_bytes *result, int64_t ttl_ms, int64_t expire_at_ms, bool *stored,
                           cf_error *err);

/* cf_quota_charge on the worker's connection, retried within the budget. */
int cf_wstate_quota_charge(cf_wstate *st, const char *kind, const char *scope, const cf_quota *q, int64_t ttl_ms,
                           int64_t bytes, cf_quota_outcome *out, cf_error *err);
/* cf_quota_refund, one try. */
int cf_wstate_quota_refund(cf_wstate *st, const char *kind, const char *scope, int64_t slot, int64_t bytes,
                           cf_error *err);

/* Releases our lease without storing (a run stopped, or an answer not to
 * be replayed).  Retries within the budget. */
int cf_wstate_lease_release(cf_wstate *st, const char *scope, const char *id, const char *digest,
                            const char *token, cf_error *err);

/* ---- pure helpers (exposed for unit tests) ---- */

/* Differences between a snapshot and the collected work directory: files
 * added or changed become puts (pointing into collected), snapshot paths
 * missing from collected become deletes (pointing into snap).  *changed
 * receives the sorted, malloc'd union of those paths (strings borrowed).
 * Free the three arrays with free(). */
int cf_wstate_diff(const cf_ws_listing *snap, const cf_file *collected, size_t ncollected, cf_ws_file **puts,
                   size_t *nputs, const char ***deletes, size_t *ndeletes, const char ***changed, size_t *nchanged,
                   cf_error *err);

/* Builds the structured input of a thread's run: a msgpack map
 * {"checkpoint": <state map> | nil, "checkpoint_id": <str> | nil,
 *  "input": <the request's input> | nil}.  state/input may be empty (nil). */
int cf_wstate_envelope(const cf_bytes *input, const void *state, size_t state_len, const char *checkpoint_id,
                       cf_bytes *out, cf_error *err);

/* Finds the "checkpoint" entry of a structured output.  Returns 1 with
 * state and len pointing into output when it is a map; 0 when the output is
 * absent, not a map, has no such key or its value is nil; -1 (CF_E_INVALID)
 * when the key holds something other than a map. */
int cf_wstate_output_checkpoint(const cf_bytes *output, const uint8_t **state, size_t *len, cf_error *err);

#endif
