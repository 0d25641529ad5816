/* cf_quota: how much one tenant (a profile) keeps in Redis of one kind of
 * expiring thing, so that one tenant cannot fill the store for every other
 * (issue 30, part 4).
 *
 * A ledger per (kind, scope) counts what is alive by when it expires: each
 * charge goes to the minute (CF_QUOTA_SLOT_MS) its thing expires in, on
 * Redis's own clock (TIME), and a minute's charges leave the running totals
 * once that minute has passed, so the totals are never below what lives
 * and above it by at most one minute's worth of things that just expired.
 * Things of any ttl share one ledger (the grid is of expiry times), and
 * workers' clocks do not matter.  One script reads, cleans and charges; its
 * two keys share a hash tag (one Redis Cluster slot), so workers on many
 * hosts cannot together pass the quota.  Key layout: docs/STATE.md,
 * "Quotas". */
#ifndef CF_QUOTA_H
#define CF_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_redis.h"

#define CF_QUOTA_SLOT_MS 60000

typedef struct cf_quota {
    int64_t max_bytes; /* 0: no cap on bytes */
    int64_t max_count; /* 0: no cap on items */
    /* Past the caps, a thing may still be kept for short_ttl_ms (0: not)
     * while the totals stay within the caps plus grace_percent of them:
     * recent things outlive a full ledger for a while, bounded. */
    int64_t short_ttl_ms;
    int64_t grace_percent;
    int64_t short_extra_bytes; /* charged on top for a short keep (what marks it so) */
} cf_quota;

typedef struct cf_quota_usage {
    int64_t bytes;
    int64_t count;
} cf_quota_usage;

/* The outcome of a charge. */
typedef struct cf_quota_outcome {
    int64_t ttl_ms;       /* how long the thing may be kept: ttl_ms, short_ttl_ms, or 0 (not: nothing charged) */
    int64_t expire_at_ms; /* Redis's now + ttl_ms (Unix ms): store it to expire then, in step with the ledger */
    int64_t slot;         /* where it was charged (for cf_quota_refund) */
    int64_t charged_bytes; /* bytes, plus short_extra_bytes for a short keep */
    cf_quota_usage held; /* the totals before this charge */
} cf_quota_outcome;

/* Charges `bytes` and one item of kind (e.g. "results") to scope (the
 * profile) for a thing to live ttl_ms, when it fits under q (else for
 * q->short_ttl_ms within the grace, else not at all: out->ttl_ms 0).  One
 * try: the caller retries transient errors (a retried charge whose first
 * try ran counts twice, erring towards refusing). */
int cf_quota_charge(cf_redis *r, const char *kind, const char *scope, const cf_quota *q, int64_t ttl_ms,
                    int64_t bytes, cf_quota_outcome *out, cf_error *err);

/* Takes back what a charge added (bytes, one item), for a thing that was
 * not kept after all; nothing when its slot is already gone. */
int cf_quota_refund(cf_redis *r, const char *kind, const char *scope, int64_t slot, int64_t bytes, cf_error *err);

/* What scope holds of kind now (nothing charged). */
int cf_quota_usage_get(cf_redis *r, const char *kind, const char *scope, cf_quota_usage *used, cf_error *err);

/* An item ledger: things that change size and whose expiry moves with use
 * (a workspace's idle TTL renewed on every access, a checkpoint thread's
 * on every save), so no expiry grid can count them.  Each item is charged
 * by the name of its own Redis key (a workspace's or a thread's meta), and
 * its charge is measured from its keys by the ledger's script itself (a
 * workspace's `stored` blobs and files, a thread's `held` checkpoints and
 * newest copy): lost replies and replies in any order cannot leave it
 * wrong; a write's reservation is kept for five minutes against other
 * items' measures (...:reserved), and a second writer of one item stacks on
 * the first's, unless it is the same writer (a request redelivered after
 * its worker died between reserving and syncing replaces its own).
 * Before a write, GROW reserves the measure plus the write's worst case if
 * the totals stay within max_bytes; after it (landed, failed or unknown),
 * SYNC sets the measure.  Items are measured again when due (their key's
 * expiry, or a day), and before a refusal the next 500 items are (a
 * cursor: deleted workspaces, reservations whose write never synced).
 * Keys: cf:quota:{<kind>/<scope>} (totals), ...:items (item -> bytes),
 * ...:due (item by when to measure it again), ...:reserved and
 * ...:writers (reservations in flight, and whose); one hash tag.  The item keys
 * are read by name from the script: one Redis or Sentinel, not Cluster
 * (docs/STATE.md, "Quotas"). */
/* Redis's own cost beside the bytes kept, estimated (a workspace's bytes:
 * its blobs, undo logs and paths, counted by its commit script; a
 * checkpoint's: its state and metadata, and 512 + 3 x its key prefix, in
 * the thread's held). */
#define CF_QUOTA_WS_BASE 2048    /* a workspace's four keys */
#define CF_QUOTA_WS_PER_FILE 128 /* a manifest entry beside its path */
#define CF_QUOTA_WS_PER_BLOB 192 /* a blob's object, its key's and expiry's entries, and its reference */
/* Beside that, each blob's key name: the workspace's meta key less
 * "meta", plus "b:" and the 64 hex digits of its id (so long workspace ids
 * with many small files are not charged half of what they hold). */
#define CF_QUOTA_WS_BLOB_NAME(meta_key_len) ((int64_t)(meta_key_len) - 4 + 2 + 64)
#define CF_QUOTA_CP_BASE 2048    /* a thread's keys and the newest's copy beside its state */

typedef enum cf_quota_item_kind { CF_QUOTA_WORKSPACE, CF_QUOTA_THREAD } cf_quota_item_kind;

typedef enum cf_quota_item_mode {
    CF_QUOTA_ITEM_GROW, /* before a write: charge the item's measure plus grow, if the totals stay within
                         * max_bytes (else *fits false, nothing changed) */
    CF_QUOTA_ITEM_SYNC, /* after it: charge what the item measures now (0: out of the ledger) */
} cf_quota_item_mode;

/* writer: who grows (the request's id, only while the run holds the
 * request's lease, so that no other run of that id grows meanwhile; NULL
 * or "" nameless, which always stacks), at most CF_QUOTA_WRITER_MAX bytes, no space or newline.
 * *held: the totals after (or as they stand, refused); each may be NULL.
 * One try: the caller retries transient errors (a sync is idempotent). */
#define CF_QUOTA_WRITER_MAX 256
/* Copies writer into dst (CF_QUOTA_WRITER_MAX + 1 bytes); one the ledger
 * cannot take (too long, a space or newline) becomes nameless, which
 * stacks: the safe side. */
void cf_quota_writer_set(char *dst, const char *writer);
int cf_quota_item(cf_redis *r, const char *kind, const char *scope, const char *item, cf_quota_item_kind item_kind,
                  cf_quota_item_mode mode, int64_t grow, int64_t max_bytes, const char *writer, bool *fits,
                  cf_quota_usage *held, cf_error *err);

/* The refusal a tenant reads when a write does not fit its item quota:
 * CF_E_LIMIT, marked retriable (it may pass once the tenant made room).
 * E.g. subject "workspace ws-1", quota "workspace", items "workspaces",
 * write "write", setting "max-workspace-bytes", remedy "delete workspaces
 * it no longer needs, or they expire when idle".  Returns -1. */
typedef struct cf_quota_refusal {
    const char *quota, *items, *write, *setting, *remedy;
} cf_quota_refusal;
int cf_quota_refuse(cf_error *err, const cf_quota_refusal *how, const char *subject, const char *scope,
                    const cf_quota_usage *held, int64_t grow, int64_t max_bytes);

/* The item's charge now (0 when it has none) and the totals (held, may be
 * NULL); item NULL: the totals only. */
int cf_quota_item_get(cf_redis *r, const char *kind, const char *scope, const char *item, int64_t *bytes,
                      cf_quota_usage *held, cf_error *err);

#endif
