/* cf_checkpoint: per-thread checkpoints of agent state in Redis.
 *
 * A thread (id: 1..128 bytes of [A-Za-z0-9._-]) holds a chain of
 * checkpoints.  A checkpoint is append-only: id, parent id, state (a msgpack
 * map), optional metadata (a msgpack map), created_us (Redis server clock)
 * and the writer's fencing token.  Ids are "<16-digit microseconds>-<12-digit
 * per-thread counter>", so they sort lexicographically in creation order.
 * The latest checkpoint is the newest one still stored.
 *
 * Writers can guard a save with expected_latest (compare-and-set on the
 * latest id) and/or a fencing token writer_seq: the highest token seen is
 * stored per thread and a save carrying a smaller one is CF_E_CONFLICT.
 *
 * Retention: at most max_per_thread checkpoints (oldest trimmed on save) and
 * each lives ttl_us after its creation (the thread's index lives ttl_us
 * after its newest save).  Key layout and guarantees: docs/STATE.md.
 *
 * The store borrows a cf_redis handle; not thread-safe (one per thread).
 */
#ifndef CF_CHECKPOINT_H
#define CF_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_redis.h"
#include "cf_schema.h"

#define CF_CHECKPOINT_ID_MAX 128

typedef struct cf_checkpoint_store cf_checkpoint_store;

typedef struct cf_checkpoint_config {
    const char *key_prefix;         /* "cf:"; copied */
    size_t max_per_thread;          /* 100; 0 = unlimited */
    int64_t ttl_us;                 /* 7 days; 0 = never expire (ms granularity) */
    size_t max_state_bytes;         /* 16 MiB */
    size_t max_meta_bytes;          /* 64 KiB */
    const cf_decode_limits *limits; /* msgpack limits; NULL = defaults, sizes raised to the caps above */
    const char *id_prefix;          /* thread ids: as cf_workspace_config.id_prefix; copied */
} cf_checkpoint_config;

typedef struct cf_checkpoint {
    char id[CF_CHECKPOINT_ID_MAX + 1];
    char parent[CF_CHECKPOINT_ID_MAX + 1]; /* "" for a root */
    char thread[CF_CHECKPOINT_ID_MAX + 1];
    uint8_t *state; /* msgpack map, malloc'd; NULL when read without state */
    size_t state_len;
    uint8_t *meta; /* msgpack map, malloc'd; NULL when none */
    size_t meta_len;
    int64_t created_us;
    int64_t writer_seq; /* fencing token the writer passed (0 = none) */
} cf_checkpoint;

typedef struct cf_checkpoints {
    cf_checkpoint *items;
    size_t n;
} cf_checkpoints;

typedef struct cf_checkpoint_save_opts {
    const char *parent;          /* NULL = the latest; "" = none (a new root); else must exist */
    const char *expected_latest; /* NULL = no check; "" = the thread must be empty */
    int64_t writer_seq;          /* fencing token, 0 = none */
    const void *meta;            /* optional msgpack map (borrowed) */
    size_t meta_len;
} cf_checkpoint_save_opts;

typedef struct cf_checkpoint_query {
    size_t limit;      /* 0 = 100; capped at 1000 */
    int64_t before_us; /* only created_us < before_us; 0 = no bound */
    int64_t after_us;  /* only created_us > after_us; 0 = no bound */
    bool with_state;   /* fetch state bytes too */
} cf_checkpoint_query;

void cf_checkpoint_config_init(cf_checkpoint_config *cfg);

/* r is borrowed and must outlive the store; cfg NULL = defaults; a limits
 * pointer in cfg is copied. */
cf_checkpoint_store *cf_checkpoint_store_new(cf_redis *r, const cf_checkpoint_config *cfg, cf_error *err);
void cf_checkpoint_store_destroy(cf_checkpoint_store *cs); /* NULL-safe */

/* Checks state (or metadata) bytes: one valid msgpack value, top level a map. */
int cf_checkpoint_state_check(const cf_checkpoint_store *cs, const void *buf, size_t len, size_t cap,
                              cf_error *err);

/* Quota: while a scope is set (a profile's name), saves and rollbacks are
 * charged to its ledger (cf_quota.h, kind "checkpoints"): each thread is
 * charged what its checkpoints hold (states, metadata, the newest's copy,
 * an estimate of the keys); a save that could take the scope's threads
 * past max_bytes fails with CF_E_LIMIT naming the quota, retriable (max_bytes 0:
 * charged, never refused).  NULL scope: none.  writer: the request that
 * saves (cf_quota_item).  Copied. */
void cf_checkpoint_set_quota(cf_checkpoint_store *cs, const char *scope, int64_t max_bytes, const char *writer);

/* Fencing, as cf_workspace_set_guard: while set, saves and rollbacks write
 * only if guard_key holds guard_value (CF_E_FENCED otherwise). */
void cf_checkpoint_set_guard(cf_checkpoint_store *cs, const char *guard_key, const char *guard_value);

/* Saves a new checkpoint that becomes the latest.  opts may be NULL.  id_out
 * (may be NULL) receives the new id.  CF_E_CONFLICT: expected_latest did not
 * match or writer_seq is older than the thread's; CF_E_NOT_FOUND: the given
 * parent does not exist; CF_E_INVALID: state is not a msgpack map. */
int cf_checkpoint_save(cf_checkpoint_store *cs, const char *thread, const void *state, size_t state_len,
                       const cf_checkpoint_save_opts *opts, char id_out[CF_CHECKPOINT_ID_MAX + 1], cf_error *err);

/* Reads one checkpoint (with state) into out, which is overwritten; free
 * with cf_checkpoint_clear.  CF_E_NOT_FOUND if absent or expired. */
int cf_checkpoint_get(cf_checkpoint_store *cs, const char *thread, const char *id, cf_checkpoint *out, cf_error *err);

/* The latest checkpoint (with state); CF_E_NOT_FOUND for an empty thread. */
int cf_checkpoint_latest(cf_checkpoint_store *cs, const char *thread, cf_checkpoint *out, cf_error *err);

/* Checkpoints newest first within the query's bounds.  q may be NULL.
 * out is overwritten; free with cf_checkpoints_clear. */
int cf_checkpoint_list(cf_checkpoint_store *cs, const char *thread, const cf_checkpoint_query *q,
                       cf_checkpoints *out, cf_error *err);

/* Walks parents from from_id (NULL = latest), at most limit entries (0 =
 * 100, capped at 1000), stopping at a root or a trimmed ancestor.
 * CF_E_NOT_FOUND if from_id does not exist. */
int cf_checkpoint_history(cf_checkpoint_store *cs, const char *thread, const char *from_id, size_t limit,
                          bool with_state, cf_checkpoints *out, cf_error *err);

/* Makes a new latest checkpoint whose state and metadata are copied (inside
 * Redis) from target_id and whose parent is target_id; the chain that was
 * latest before is kept.  opts: only expected_latest and writer_seq apply;
 * may be NULL. */
int cf_checkpoint_rollback(cf_checkpoint_store *cs, const char *thread, const char *target_id,
                           const cf_checkpoint_save_opts *opts, char id_out[CF_CHECKPOINT_ID_MAX + 1],
                           cf_error *err);

/* Deletes one checkpoint (its children keep their parent id, which then
 * dangles).  CF_E_NOT_FOUND if absent. */
int cf_checkpoint_delete(cf_checkpoint_store *cs, const char *thread, const char *id, cf_error *err);

/* Deletes a thread and all its checkpoints, fencing token included.
 * CF_E_NOT_FOUND if there was nothing. */
int cf_checkpoint_delete_thread(cf_checkpoint_store *cs, const char *thread, cf_error *err);

void cf_checkpoint_clear(cf_checkpoint *cp);          /* NULL-safe; leaves cp zeroed */
void cf_checkpoints_clear(cf_checkpoints *l); /* NULL-safe; leaves l zeroed */

#endif
