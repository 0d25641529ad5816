/* Internals shared by the state modules (not a public header). */
#ifndef CF_STATE_INT_H
#define CF_STATE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_redis.h"

/* Lua scripts, embedded so the library never reads files at run time
 * (state/cf_state_scripts.c; documented in docs/STATE.md). */
extern const cf_redis_script cf_ws_script_create;
extern const cf_redis_script cf_ws_script_commit;
extern const cf_redis_script cf_ws_script_get;
extern const cf_redis_script cf_ws_script_info;
extern const cf_redis_script cf_ws_script_snapshot;
extern const cf_redis_script cf_ws_script_delete;
extern const cf_redis_script cf_ws_script_migrate;
extern const cf_redis_script cf_ws_script_unupload;
extern const cf_redis_script cf_ws_script_referenced;
extern const cf_redis_script cf_cp_script_save;
extern const cf_redis_script cf_cp_script_latest;
extern const cf_redis_script cf_cp_script_list;
extern const cf_redis_script cf_cp_script_history;
extern const cf_redis_script cf_cp_script_delete;
extern const cf_redis_script cf_cp_script_delete_thread;

#define CF_STATE_NAME_MAX 128 /* ids of workspaces, threads, checkpoints */
#define CF_STATE_PREFIX_MAX 64
#define CF_STATE_KEY_MAX (CF_STATE_PREFIX_MAX + CF_STATE_NAME_MAX * 2 + 32)

/* Names that become part of Redis keys: 1..CF_STATE_NAME_MAX bytes of
 * [A-Za-z0-9._-], so they can never break out of the {hash tag} or
 * collide with another key's suffix.  what names the value in errors. */
int cf_state_name_check(const char *name, const char *what, cf_error *err);

/* An id scope (cf_workspace_config.id_prefix): NULL, "" or "*" (any id),
 * "none" (no id), or [A-Za-z0-9._-] ending in '.', '-' or '_' (what a
 * worker profile's state-prefix takes).  Copied into dst. */
int cf_state_scope_set(char *dst, size_t cap, const char *scope, const char *what, cf_error *err);
/* Whether id is inside scope (as cf_state_scope_set left it): the store
 * refuses others before any Redis call, naming the scope. */
int cf_state_scope_check(const char *scope, const char *id, const char *what, cf_error *err);

/* Key prefixes: printable, no braces (they would move the hash tag). */
int cf_state_prefix_check(const char *prefix, cf_error *err);

/* snprintf into a key buffer; fails (CF_E_LIMIT) instead of truncating. */
int cf_state_key(char *buf, size_t cap, cf_error *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Copies a reply string into a fresh NUL-terminated buffer (NULL on OOM or
 * when rep is not a string).  *len gets the byte count when len != NULL. */
char *cf_state_reply_dup(const redisReply *rep, size_t *len);

/* Decimal formatting of an int64 into buf (>= 24 bytes). */
const char *cf_state_i64(char *buf, size_t cap, long long v);

/* The checks every store constructor makes: a Redis handle and a valid key
 * prefix.  what ("workspace store") prefixes the error. */
int cf_state_store_check(const cf_redis *r, const char *key_prefix, const char *what, cf_error *err);

/* A store TTL in microseconds as the milliseconds the scripts take. */
long long cf_state_ttl_ms(int64_t ttl_us);

/* Most script replies are arrays whose first element is a status word;
 * fails (CF_E_REDIS, naming script) on anything else. */
int cf_state_reply_head(const redisReply *rep, const char *script, cf_error *err);

/* Element i of an array reply as an integer; -1 when missing or not one. */
int64_t cf_state_reply_elem_i64(const redisReply *rep, size_t i);

/* Runs a script whose reply is a single integer, stored in *out. */
int cf_state_eval_i64(cf_redis *r, const cf_redis_script *script, int nkeys, const char *const *keys, int nargs,
                      const char *const *args, int64_t *out, cf_error *err);

#endif
