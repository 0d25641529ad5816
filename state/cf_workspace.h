/* cf_workspace: versioned file workspaces stored in Redis.
 *
 * A workspace (id: 1..128 bytes of [A-Za-z0-9._-]) holds files (path ->
 * bytes), metadata (project, session, created/updated times) and a revision
 * that grows by one with every change.  Every write is one Lua script and
 * compare-and-set on the revision: pass the revision you read as
 * expected_rev, or CF_WS_ANY_REV to write unconditionally.  A lost race is
 * CF_E_CONFLICT and nothing is written.  The last `history` revisions stay
 * readable through cf_workspace_snapshot.  Every operation, reads included,
 * refreshes the workspace's TTL.  Key layout and guarantees: docs/STATE.md.
 *
 * The store borrows a cf_redis handle; like it, a store is not thread-safe
 * (one store + one cf_redis per thread).
 */
#ifndef CF_WORKSPACE_H
#define CF_WORKSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_redis.h"

#define CF_WS_ANY_REV ((int64_t)-1)

typedef struct cf_workspace_store cf_workspace_store;

typedef struct cf_workspace_config {
    const char *key_prefix;     /* "cf:"; copied */
    size_t max_file_bytes;      /* 8 MiB per file */
    size_t max_files;           /* 1000 files */
    size_t max_total_bytes;     /* 64 MiB over all files */
    size_t max_path_bytes;      /* 1024 bytes per path */
    size_t max_component_bytes; /* 255 bytes per path component */
    int64_t ttl_us;             /* 24 h idle TTL, 0 = none; fixed at create (ms granularity) */
    unsigned history;           /* 16 older revisions kept; fixed at create */
    /* The ids this store may name start with this (NULL, "" or "*": any;
     * "none": none); others are refused before Redis.  A tenant's client
     * (CLI, MCP server) sets its state-prefix here; its Redis user is
     * restricted to the same keys.  Copied. */
    const char *id_prefix;
} cf_workspace_config;

/* A file to write: borrowed pointers, data may hold any bytes. */
typedef struct cf_ws_file {
    const char *path;
    const void *data;
    size_t len;
} cf_ws_file;

/* An entry of a listing or snapshot; owned by the listing. */
typedef struct cf_ws_entry {
    char *path;
    size_t size;
    uint8_t *data; /* NULL in listings; malloc'd bytes in snapshots (size bytes) */
} cf_ws_entry;

typedef struct cf_ws_listing {
    int64_t rev;         /* revision this listing describes */
    int64_t current_rev; /* the workspace's revision when it was read */
    cf_ws_entry *entries; /* sorted by path (bytewise) */
    size_t n;
} cf_ws_listing;

typedef struct cf_ws_info {
    char *project;
    char *session;
    int64_t created_us;
    int64_t updated_us;
    int64_t rev;
    int64_t oldest_rev; /* oldest revision cf_workspace_snapshot can return */
    size_t nfiles;
    uint64_t total_bytes;
    int64_t ttl_us;
    unsigned history;
} cf_ws_info;

void cf_workspace_config_init(cf_workspace_config *cfg);

/* r is borrowed and must outlive the store.  cfg NULL = defaults. */
cf_workspace_store *cf_workspace_store_new(cf_redis *r, const cf_workspace_config *cfg, cf_error *err);
void cf_workspace_store_destroy(cf_workspace_store *ws); /* NULL-safe */

/* Checks a path against the store's rules: relative, '/'-separated, no
 * empty, "." or ".." components, no NUL/control bytes, length caps. */
int cf_workspace_path_check(const cf_workspace_store *ws, const char *path, cf_error *err);

/* Creates an empty workspace at revision 0.  project and session: printable
 * strings of at most 128 bytes (NULL = "").  CF_E_CONFLICT if it exists. */
int cf_workspace_create(cf_workspace_store *ws, const char *id, const char *project, const char *session,
                        cf_error *err);

/* Writes puts and removes deletes as ONE new revision, if the current
 * revision is expected_rev (or expected_rev is CF_WS_ANY_REV).  Deleting an
 * absent path is ignored; a path may appear only once overall.  An empty
 * change writes nothing and keeps the revision.  *new_rev (may be NULL)
 * receives the new revision; on CF_E_CONFLICT it receives the current one.
 * Bad paths, caps (file size, file count, total size) -> CF_E_INVALID /
 * CF_E_LIMIT and nothing is written.  CF_E_NOT_FOUND: no such workspace. */
int cf_workspace_commit(cf_workspace_store *ws, const char *id, int64_t expected_rev, const cf_ws_file *puts,
                        size_t nputs, const char *const *deletes, size_t ndeletes, int64_t *new_rev, cf_error *err);

/* Fencing: while a guard is set, commits write only if the Redis key
 * guard_key holds exactly guard_value, and otherwise fail with
 * CF_E_FENCED writing nothing; the check and the write are
 * one script.  The worker guards with its lease on the request id, so a
 * worker that lost the request cannot write.  Strings are borrowed until
 * cleared (NULL key).  The guard key is a second hash slot: fine on one
 * Redis (and Sentinel), not on Cluster. */
void cf_workspace_set_guard(cf_workspace_store *ws, const char *guard_key, const char *guard_value);

/* Quota: while a scope is set (a profile's name), creates and commits are
 * charged to its ledger (cf_quota.h, kind "workspaces"): each workspace is
 * charged the bytes of the distinct blobs it holds (files and retained
 * history) plus an estimate of its keys' cost; a write that could take the
 * scope's workspaces past max_bytes fails with CF_E_LIMIT naming the quota, retriable (unlike a cap, it may pass once room is made)
 * (max_bytes 0: charged, never refused).  NULL scope: none.  writer: the
 * request that writes (cf_quota_item: its redelivery replaces its own
 * reservation).  Copied. */
void cf_workspace_set_quota(cf_workspace_store *ws, const char *scope, int64_t max_bytes, const char *writer);

/* One-file commit. */
int cf_workspace_put(cf_workspace_store *ws, const char *id, int64_t expected_rev, const char *path, const void *data,
                     size_t len, int64_t *new_rev, cf_error *err);

/* Deletes one file; CF_E_NOT_FOUND if the path does not exist. */
int cf_workspace_delete_file(cf_workspace_store *ws, const char *id, int64_t expected_rev, const char *path,
                             int64_t *new_rev, cf_error *err);

/* Reads one file at the current revision.  *data is malloc'd (caller frees;
 * NUL-terminated for convenience, *len excludes it); *rev may be NULL.
 * CF_E_NOT_FOUND for a missing workspace or path. */
int cf_workspace_get(cf_workspace_store *ws, const char *id, const char *path, uint8_t **data, size_t *len,
                     int64_t *rev, cf_error *err);

/* Paths and sizes at the current revision (entries' data = NULL).  out is
 * overwritten; free it with cf_ws_listing_clear. */
int cf_workspace_list(cf_workspace_store *ws, const char *id, cf_ws_listing *out, cf_error *err);

/* All files with their bytes as of revision rev (CF_WS_ANY_REV = current),
 * read atomically.  CF_E_NOT_FOUND if rev is older than the retained history
 * or newer than the current revision.  Free with cf_ws_listing_clear. */
int cf_workspace_snapshot(cf_workspace_store *ws, const char *id, int64_t rev, cf_ws_listing *out, cf_error *err);

/* Metadata.  Free with cf_ws_info_clear. */
int cf_workspace_info(cf_workspace_store *ws, const char *id, cf_ws_info *out, cf_error *err);

/* Removes the workspace and its history.  CF_E_NOT_FOUND if it did not
 * exist (callers wanting idempotence may ignore that code). */
int cf_workspace_delete(cf_workspace_store *ws, const char *id, cf_error *err);

void cf_ws_listing_clear(cf_ws_listing *l); /* NULL-safe; leaves l zeroed */
void cf_ws_info_clear(cf_ws_info *info);    /* NULL-safe; leaves info zeroed */

#endif
