/* cf_redis: a small blocking Redis client over hiredis 0.14.1.
 *
 * What it adds to hiredis:
 *  - connect and command timeouts, re-applied on every (re)connect together
 *    with AUTH (password or ACL user + password) and SELECT, because
 *    hiredis 0.14's redisReconnect forgets them;
 *  - automatic reconnection after a failure, with capped exponential
 *    backoff: while the backoff runs, commands fail fast (retriable);
 *  - a hard cap on the bytes of one reply (read in chunks and counted
 *    before hiredis parses them), so a hostile or runaway reply cannot make
 *    the client allocate without bound;
 *  - Redis errors mapped onto cf_error (CF_E_REDIS, retriable or not);
 *  - Lua scripts run by EVALSHA with an EVAL fallback on NOSCRIPT.
 *
 * Replies are hiredis `redisReply` trees; the caller frees them with
 * cf_redis_reply_free.  A handle is NOT thread-safe: use one per thread.
 */
#ifndef CF_REDIS_H
#define CF_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cf_error.h"

typedef struct cf_redis cf_redis;

typedef struct cf_redis_config {
    const char *host;            /* "127.0.0.1" by default; a path starting with '/' = unix socket */
    int port;                    /* 6379 */
    const char *user;            /* ACL user (Redis 6+); NULL = "AUTH password" form */
    const char *password;        /* NULL = no AUTH */
    int db;                      /* SELECTed after every connect; 0 by default */
    int64_t connect_timeout_us;  /* 2 s */
    int64_t command_timeout_us;  /* 5 s; per read/write on the socket */
    size_t max_reply_bytes;      /* 128 MiB: raw bytes of one reply */
    int64_t retry_initial_us;    /* 50 ms: first reconnect backoff */
    int64_t retry_max_us;        /* 2 s: backoff cap */
} cf_redis_config;

/* Fills cfg with the defaults above.  Strings are borrowed: cf_redis_new
 * copies them. */
void cf_redis_config_init(cf_redis_config *cfg);

/* Copies cfg and connects.  When connect is false the first connection is
 * made by the first command (useful when Redis may start later).  Returns
 * NULL + err (retriable when the server is unreachable). */
cf_redis *cf_redis_new(const cf_redis_config *cfg, bool connect, cf_error *err);
void cf_redis_destroy(cf_redis *r); /* NULL-safe; closes the connection */

/* Runs one command.  argv[i] holds lens[i] bytes (binary safe); lens may be
 * NULL for NUL-terminated strings.  On success *out (may be NULL to discard)
 * receives the reply, which the caller frees with cf_redis_reply_free.  An
 * error reply from Redis is returned as -1 + CF_E_REDIS (the reply is
 * freed), so *out is never an error reply.  A reply larger than
 * max_reply_bytes fails with CF_E_LIMIT (the connection is dropped since the
 * stream is mid-reply).  Connection failures and timeouts drop the
 * connection and fail with a retriable CF_E_REDIS; the next command
 * reconnects (after the backoff, if connecting itself failed). */
int cf_redis_command_argv(cf_redis *r, int argc, const char **argv, const size_t *lens, redisReply **out,
                          cf_error *err);

/* One command of a pipeline: argv[i] holds lens[i] bytes (lens NULL = NUL-
 * terminated strings). */
typedef struct cf_redis_cmd {
    int argc;
    const char **argv;
    const size_t *lens;
} cf_redis_cmd;

/* Sends n commands in one go, then reads their n replies into replies[]
 * (caller frees each with cf_redis_reply_free).  One round trip instead of
 * n.  max_reply_bytes bounds all the replies together.  Any error reply
 * fails the whole call (-1, CF_E_REDIS as for one command, every reply
 * freed): commands already executed by the server stay executed, so use it
 * for reads and for writes that are safe to repeat.  Everything is sent
 * before anything is read: meant for many small commands or a few big
 * requests with small replies (the server's replies must fit its output
 * buffer meanwhile). */
int cf_redis_pipeline(cf_redis *r, const cf_redis_cmd *cmds, size_t n, redisReply **replies, cf_error *err);

/* Parses one complete reply from bytes with the same guards as a live
 * connection (byte cap; aggregate headers checked before hiredis allocates
 * for them).  For fuzzing and tests.  Free *out with cf_redis_reply_free. */
int cf_redis_reply_parse(const void *buf, size_t len, size_t max_reply_bytes, redisReply **out, cf_error *err);

/* A Lua script known at compile time (source is a string constant). */
typedef struct cf_redis_script {
    const char *name;   /* for error messages */
    const char *source; /* Lua source */
} cf_redis_script;

/* EVALSHA (learning the SHA with SCRIPT LOAD on first use per connection
 * handle) and falls back to EVAL when the server answers NOSCRIPT (e.g.
 * after a restart).  keys[0..nkeys) then args[0..nargs); lens arrays may be
 * NULL for NUL-terminated strings.  Reply handling as cf_redis_command_argv;
 * errors are wrapped with the script name. */
int cf_redis_eval(cf_redis *r, const cf_redis_script *script, int nkeys, const char *const *keys,
                  const size_t *key_lens, int nargs, const char *const *args, const size_t *arg_lens,
                  redisReply **out, cf_error *err);

/* PING; connects if needed. */
int cf_redis_ping(cf_redis *r, cf_error *err);

/* True when a connection is currently open (no I/O is done). */
bool cf_redis_connected(const cf_redis *r);

/* Number of successful connections after the first one. */
uint64_t cf_redis_reconnect_count(const cf_redis *r);

/* Drops the connection (next command reconnects at once). */
void cf_redis_disconnect(cf_redis *r);

void cf_redis_reply_free(redisReply *reply); /* NULL-safe */

/* Whether a Redis error reply (e.g. "LOADING ...") is worth retrying:
 * LOADING, BUSY, TRYAGAIN, READONLY, MASTERDOWN, CLUSTERDOWN, NOREPLICAS,
 * MISCONF, OOM, MOVED/ASK.  Script errors, WRONGTYPE, NOAUTH and syntax
 * errors are not. */
bool cf_redis_error_is_retriable(const char *msg, size_t len);

/* Reply helpers for the store modules (all tolerate hostile replies). */
/* Integer reply or a decimal string reply -> int64. */
int cf_redis_reply_i64(const redisReply *rep, int64_t *out, cf_error *err);
/* True if rep is a string/status whose bytes equal s. */
bool cf_redis_reply_is(const redisReply *rep, const char *s);

#endif
