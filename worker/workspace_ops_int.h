/* workspace_ops: a request's workspace operation (SPEC.md section 3.5),
 * done by the worker itself on the workspace its slot checked out.
 *
 * No program runs.  The op goes through the same steps as a program on
 * that workspace (worker_state_int.h): admission under the topic's
 * profile (its state prefix), the idempotency claim and lease, the
 * checkout (cf_wstate_begin), then this, then the write-back
 * (cf_wstate_end): fenced by the lease, compare-and-set on the revision
 * checked out, charged to the profile's workspace quota.  So a tenant
 * reaches its files through the fleet with no Redis user of its own, and
 * the ops of one workspace stay in order with its runs (one Kafka key). */
#ifndef CF_WORKSPACE_OPS_INT_H
#define CF_WORKSPACE_OPS_INT_H
#include <stdbool.h>
#include "cf_schema.h"
#include "worker_state_int.h"

/* Does req->workspace_op on run's checkout: fills res (status, files,
 * stdout, reason).  An op that changes the workspace sets run->ws_rw and
 * leaves its change for cf_wstate_end to write back as one revision, and
 * returns true: the file it writes or deletes in run->op_puts/op_dels (the
 * one-file ops, on a light checkout: only that file's bytes were read), or
 * the workspace's whole new set of files in run->files.collected
 * (apply_patch, on a full one).  Otherwise run->ws_rw is cleared and
 * nothing is written.  st checks paths by the store's rules. */
bool ws_op_apply(const cf_wstate *st, const cf_request *req, cf_wstate_run *run, cf_result *res);

#endif
