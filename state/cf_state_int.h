/* Internals shared by the state modules (not a public header). */
#ifndef CF_STATE_INT_H
#define CF_STATE_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "cf_error.h"
#include "cf_redis.h"

/* Lua scripts, embedded so the library never reads files at run time
 * (state/scripts.c; documented in docs/STATE.md). */
extern const cf_redis_script cf_ws_script_create;
extern const cf_redis_script cf_ws_script_commit;
extern const cf_redis_script cf_ws_script_get;
extern const cf_redis_script cf_ws_script_info;
extern const cf_redis_script cf_ws_script_snapshot;
extern const cf_redis_script cf_ws_script_delete;
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

/* Key prefixes: printable, no braces (they would move the hash tag). */
int cf_state_prefix_check(const char *prefix, cf_error *err);

/* snprintf into a key buffer; fails (CF_E_LIMIT) instead of truncating. */
int cf_state_key(char *buf, size_t cap, cf_error *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Copies a reply string into a fresh NUL-terminated buffer (NULL on OOM or
 * when rep is not a string).  *len gets the byte count when len != NULL. */
char *cf_state_reply_dup(const redisReply *rep, size_t *len);

/* Decimal formatting of an int64 into buf (>= 24 bytes). */
const char *cf_state_i64(char *buf, size_t cap, long long v);

#endif
