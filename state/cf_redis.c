/* cf_redis: blocking Redis client with reconnect, timeouts, reply caps. */
#include "cf_redis.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cf_util.h"

#define CF_REDIS_SCRIPT_CACHE 32
#define CF_REDIS_READ_CHUNK 65536

struct cf_redis_sha {
    const cf_redis_script *script;
    char sha[41];
};

struct cf_redis {
    char *host;
    char *user;
    char *password;
    int port;
    int db;
    int64_t connect_timeout_us;
    int64_t command_timeout_us;
    size_t max_reply_bytes;
    int64_t retry_initial_us;
    int64_t retry_max_us;

    redisContext *c;
    int64_t next_attempt_mono_us; /* no connect attempt before this */
    int64_t backoff_us;           /* current backoff, 0 after a success */
    uint64_t connects;
    uint64_t jitter_state;
    char last_connect_error[256];
    bool last_connect_retriable;

    struct cf_redis_sha shas[CF_REDIS_SCRIPT_CACHE];
    size_t nshas;
};

void cf_redis_config_init(cf_redis_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->host = "127.0.0.1";
    cfg->port = 6379;
    cfg->connect_timeout_us = 2000000;
    cfg->command_timeout_us = 5000000;
    cfg->max_reply_bytes = (size_t)128 << 20;
    cfg->retry_initial_us = 50000;
    cfg->retry_max_us = 2000000;
}

static struct timeval us_to_tv(int64_t us)
{
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000), .tv_usec = (suseconds_t)(us % 1000000)};
    return tv;
}

bool cf_redis_error_is_retriable(const char *msg, size_t len)
{
    static const char *const retriable[] = {"LOADING",     "BUSY",       "TRYAGAIN", "READONLY", "MASTERDOWN",
                                            "CLUSTERDOWN", "NOREPLICAS", "MISCONF",  "MOVED",
                                            "ASK",         NULL};
    if (!msg)
        return false;
    for (size_t i = 0; retriable[i]; i++) {
        size_t n = strlen(retriable[i]);
        /* Match the whole first word: "BUSYKEY" (a RESTORE error) is not BUSY. */
        if (len >= n && memcmp(msg, retriable[i], n) == 0 && (len == n || msg[n] == ' '))
            return true;
    }
    return false;
}

void cf_redis_reply_free(redisReply *reply)
{
    if (reply)
        freeReplyObject(reply);
}

bool cf_redis_connected(const cf_redis *r)
{
    return r && r->c;
}

uint64_t cf_redis_reconnect_count(const cf_redis *r)
{
    return (r && r->connects > 0) ? r->connects - 1 : 0;
}

void cf_redis_disconnect(cf_redis *r)
{
    if (r && r->c) {
        redisFree(r->c);
        r->c = NULL;
    }
}

/* After a broken connection the next command may reconnect at once; the
 * backoff only grows while connecting itself keeps failing. */
static void drop_connection(cf_redis *r)
{
    cf_redis_disconnect(r);
}

static int fail_io(cf_redis *r, int errnum, const char *what, cf_error *err)
{
    drop_connection(r);
    if (errnum == EAGAIN || errnum == EWOULDBLOCK || errnum == ETIMEDOUT) {
        cf_error_set(err, CF_E_REDIS, "redis %s:%d: %s timed out", r->host, r->port, what);
    } else if (errnum) {
        cf_error_set_errno(err, CF_E_REDIS, errnum, "redis %s:%d: %s failed", r->host, r->port, what);
    } else {
        cf_error_set(err, CF_E_REDIS, "redis %s:%d: connection closed by server during %s", r->host, r->port,
                     what);
    }
    return cf_error_set_retriable(err, true);
}

/* hiredis 0.14 allocates an aggregate's element array as soon as it reads
 * the header ("*2000000000\r\n" reserves 16 GB), before any element bytes
 * arrive, so the byte cap alone does not bound memory.  This scanner walks
 * the RESP2 stream as it is fed and refuses a reply whose aggregates
 * declare more elements than the byte cap could ever hold (an element is
 * at least 3 bytes).  Bulk bodies are skipped, not scanned. */
typedef struct resp_scan {
    enum { RS_TYPE, RS_HEADER, RS_LINE, RS_BULK } state;
    char type;
    bool neg;
    int digits;
    int64_t num;
    int64_t bulk_left; /* body bytes + CRLF still to skip */
    int64_t declared;  /* elements declared by the reply's aggregates */
} resp_scan;

static int resp_scan_feed(resp_scan *s, const char *p, size_t n, size_t max_bytes, cf_error *err)
{
    size_t i = 0;
    while (i < n) {
        switch (s->state) {
        case RS_TYPE:
            s->type = p[i++];
            s->neg = false;
            s->digits = 0;
            s->num = 0;
            s->state = (s->type == '*' || s->type == '$') ? RS_HEADER : RS_LINE;
            break;
        case RS_HEADER: {
            char ch = p[i++];
            if (ch == '-' && s->digits == 0 && !s->neg) {
                s->neg = true;
            } else if (ch >= '0' && ch <= '9') {
                if (++s->digits > 18)
                    return cf_error_set(err, CF_E_LIMIT, "redis: reply declares an absurd length");
                s->num = s->num * 10 + (ch - '0');
            } else if (ch == '\n') {
                if (s->neg) {
                    s->state = RS_TYPE; /* nil */
                } else if (s->type == '*') {
                    s->declared += s->num;
                    if ((uint64_t)s->declared > max_bytes / 3)
                        return cf_error_set(err, CF_E_LIMIT,
                                            "redis: reply declares %" PRId64 " elements, more than %zu bytes can hold",
                                            s->declared, max_bytes);
                    s->state = RS_TYPE;
                } else {
                    if ((uint64_t)s->num > max_bytes)
                        return cf_error_set(err, CF_E_LIMIT, "redis: reply declares a %" PRId64 "-byte string",
                                            s->num);
                    s->bulk_left = s->num + 2;
                    s->state = RS_BULK;
                }
            } /* '\r' and anything else: hiredis judges the syntax */
            break;
        }
        case RS_LINE: {
            const char *nl = memchr(p + i, '\n', n - i);
            if (!nl)
                return 0;
            i = (size_t)(nl - p) + 1;
            s->state = RS_TYPE;
            break;
        }
        case RS_BULK: {
            size_t take = (size_t)s->bulk_left < n - i ? (size_t)s->bulk_left : n - i;
            i += take;
            s->bulk_left -= (int64_t)take;
            if (s->bulk_left == 0)
                s->state = RS_TYPE;
            break;
        }
        }
    }
    return 0;
}

int cf_redis_reply_parse(const void *buf, size_t len, size_t max_reply_bytes, redisReply **out, cf_error *err)
{
    *out = NULL;
    if (len > max_reply_bytes)
        return cf_error_set(err, CF_E_LIMIT, "redis: reply exceeds %zu bytes", max_reply_bytes);
    resp_scan scan;
    memset(&scan, 0, sizeof(scan));
    if (resp_scan_feed(&scan, buf, len, max_reply_bytes, err) < 0)
        return -1;
    redisReader *rd = redisReaderCreate();
    if (!rd)
        return cf_error_set(err, CF_E_NOMEM, "redis: out of memory");
    void *reply = NULL;
    int rc = 0;
    if (redisReaderFeed(rd, buf, len) != REDIS_OK || redisReaderGetReply(rd, &reply) != REDIS_OK)
        rc = cf_error_set(err, CF_E_REDIS, "redis: protocol error");
    else if (!reply)
        rc = cf_error_set(err, CF_E_REDIS, "redis: incomplete reply");
    redisReaderFree(rd);
    if (rc == 0)
        *out = reply;
    return rc;
}

/* send(MSG_NOSIGNAL) rather than hiredis' write(): a server that went
 * away must not raise SIGPIPE in the embedding program. */
static int send_all(cf_redis *r, const char *buf, size_t len, cf_error *err)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(r->c->fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0) {
            int e = errno;
            if (e == EINTR)
                continue;
            return fail_io(r, e, "write", err);
        }
        off += (size_t)n;
    }
    return 0;
}

/* The byte budget of the replies being read: one reply, or every reply of
 * a pipeline together. */
typedef struct reply_budget {
    size_t total;
    resp_scan scan;
} reply_budget;

/* Reads exactly one reply, counting raw bytes against the budget before
 * hiredis allocates anything for them.  Error replies are returned as
 * replies (type REDIS_REPLY_ERROR); the caller maps them.  Any failure
 * drops the connection: the stream is then mid-reply. */
static int read_reply(cf_redis *r, reply_budget *b, char *buf, redisReply **out, cf_error *err)
{
    *out = NULL;
    void *reply = NULL;
    for (;;) {
        if (redisReaderGetReply(r->c->reader, &reply) != REDIS_OK) {
            char msg[160];
            cf_sanitize_text(r->c->reader->errstr, strnlen(r->c->reader->errstr, 128), false, msg, sizeof(msg));
            drop_connection(r);
            cf_error_set(err, CF_E_REDIS, "redis %s:%d: protocol error: %s", r->host, r->port, msg);
            return cf_error_set_retriable(err, true);
        }
        if (reply)
            break;
        ssize_t n = recv(r->c->fd, buf, CF_REDIS_READ_CHUNK, 0);
        if (n < 0) {
            int e = errno;
            if (e == EINTR)
                continue;
            return fail_io(r, e, "read", err);
        }
        if (n == 0)
            return fail_io(r, 0, "read", err);
        b->total += (size_t)n;
        if (b->total > r->max_reply_bytes) {
            drop_connection(r);
            return cf_error_set(err, CF_E_LIMIT, "redis: reply exceeds %zu bytes", r->max_reply_bytes);
        }
        if (resp_scan_feed(&b->scan, buf, (size_t)n, r->max_reply_bytes, err) < 0) {
            drop_connection(r);
            return -1;
        }
        if (redisReaderFeed(r->c->reader, buf, (size_t)n) != REDIS_OK) {
            drop_connection(r);
            return cf_error_set(err, CF_E_NOMEM, "redis: cannot buffer reply");
        }
    }
    *out = reply;
    return 0;
}

static int format_command(int argc, const char **argv, const size_t *lens, char **cmd, cf_error *err)
{
    size_t *tmp_lens = NULL;
    if (!lens) {
        tmp_lens = calloc((size_t)argc, sizeof(*tmp_lens));
        if (!tmp_lens)
            return cf_error_set(err, CF_E_NOMEM, "redis: out of memory");
        for (int i = 0; i < argc; i++)
            tmp_lens[i] = strlen(argv[i]);
        lens = tmp_lens;
    }
    int cmdlen = redisFormatCommandArgv(cmd, argc, argv, lens);
    free(tmp_lens);
    if (cmdlen < 0)
        return cf_error_set(err, CF_E_NOMEM, "redis: cannot format command");
    return cmdlen;
}

/* Sends one command and reads exactly one reply. */
static int roundtrip(cf_redis *r, int argc, const char **argv, const size_t *lens, redisReply **out, cf_error *err)
{
    *out = NULL;
    char *cmd = NULL;
    int cmdlen = format_command(argc, argv, lens, &cmd, err);
    if (cmdlen < 0)
        return -1;
    int rc = send_all(r, cmd, (size_t)cmdlen, err);
    redisFreeCommand(cmd);
    if (rc < 0)
        return -1;
    char *buf = malloc(CF_REDIS_READ_CHUNK);
    if (!buf) {
        drop_connection(r); /* the reply is now unread: the stream is unusable */
        return cf_error_set(err, CF_E_NOMEM, "redis: out of memory");
    }
    reply_budget b;
    memset(&b, 0, sizeof(b));
    rc = read_reply(r, &b, buf, out, err);
    free(buf);
    return rc;
}

/* Maps an error reply to cf_error and frees it. */
static int fail_reply(cf_redis *r, redisReply *rep, const char *what, cf_error *err)
{
    char msg[320];
    cf_sanitize_text(rep->str ? rep->str : "", rep->str ? rep->len : 0, false, msg, sizeof(msg));
    bool retriable = cf_redis_error_is_retriable(rep->str, rep->str ? rep->len : 0);
    freeReplyObject(rep);
    cf_error_set(err, CF_E_REDIS, "redis %s:%d: %s: %s", r->host, r->port, what, msg);
    return cf_error_set_retriable(err, retriable);
}

static int setup_command(cf_redis *r, int argc, const char **argv, const char *what, cf_error *err)
{
    redisReply *rep = NULL;
    if (roundtrip(r, argc, argv, NULL, &rep, err) < 0)
        return cf_error_wrap(err, "%s", what);
    if (rep->type == REDIS_REPLY_ERROR) {
        /* Wrong credentials or a bad db index are configuration faults. */
        fail_reply(r, rep, what, err);
        drop_connection(r);
        return -1;
    }
    freeReplyObject(rep);
    return 0;
}

static int connect_once(cf_redis *r, cf_error *err)
{
    struct timeval ctv = us_to_tv(r->connect_timeout_us);
    redisContext *c = r->host[0] == '/' ? redisConnectUnixWithTimeout(r->host, ctv)
                                        : redisConnectWithTimeout(r->host, r->port, ctv);
    if (!c)
        return cf_error_set(err, CF_E_NOMEM, "redis: cannot allocate context");
    if (c->err) {
        char msg[160];
        cf_sanitize_text(c->errstr, strnlen(c->errstr, sizeof(c->errstr)), false, msg, sizeof(msg));
        redisFree(c);
        cf_error_set(err, CF_E_REDIS, "redis %s:%d: connect failed: %s", r->host, r->port, msg);
        return cf_error_set_retriable(err, true);
    }
    /* The reason this wrapper exists: hiredis forgets timeouts on reconnect. */
    if (r->command_timeout_us > 0 && redisSetTimeout(c, us_to_tv(r->command_timeout_us)) != REDIS_OK) {
        redisFree(c);
        cf_error_set(err, CF_E_REDIS, "redis %s:%d: cannot set command timeout", r->host, r->port);
        return cf_error_set_retriable(err, true);
    }
    (void)redisEnableKeepAlive(c); /* best effort: detects dead peers on idle links */
    /* hiredis 0.14 leaves its socket inheritable: a process the worker
     * starts (slirp4netns, say) must not hold an authenticated session. */
    int fl = fcntl(c->fd, F_GETFD);
    if (fl < 0 || fcntl(c->fd, F_SETFD, fl | FD_CLOEXEC) < 0) {
        redisFree(c);
        cf_error_set(err, CF_E_REDIS, "redis %s:%d: cannot make the connection close-on-exec", r->host, r->port);
        return cf_error_set_retriable(err, true);
    }
    r->c = c;

    if (r->password) {
        const char *argv[3] = {"AUTH", r->user ? r->user : r->password, r->password};
        if (setup_command(r, r->user ? 3 : 2, argv, "AUTH", err) < 0)
            return -1;
    }
    if (r->db != 0) {
        char dbs[16];
        snprintf(dbs, sizeof(dbs), "%d", r->db);
        const char *argv[2] = {"SELECT", dbs};
        if (setup_command(r, 2, argv, "SELECT", err) < 0)
            return -1;
    }
    r->connects++;
    return 0;
}

static int64_t next_backoff(cf_redis *r)
{
    int64_t b = r->backoff_us ? r->backoff_us * 2 : r->retry_initial_us;
    if (b > r->retry_max_us)
        b = r->retry_max_us;
    if (b < 1000)
        b = 1000;
    r->backoff_us = b;
    /* Up to +25% jitter so a fleet does not reconnect in lockstep. */
    r->jitter_state ^= r->jitter_state << 13;
    r->jitter_state ^= r->jitter_state >> 7;
    r->jitter_state ^= r->jitter_state << 17;
    return b + (int64_t)(r->jitter_state % (uint64_t)(b / 4 + 1));
}

static int ensure_connected(cf_redis *r, cf_error *err)
{
    if (r->c)
        return 0;
    int64_t now = cf_mono_us();
    if (now < r->next_attempt_mono_us) {
        char wait[32];
        cf_format_duration(r->next_attempt_mono_us - now, wait, sizeof(wait));
        cf_error_set(err, CF_E_REDIS, "redis %s:%d unavailable, next reconnect in %s (last error: %s)", r->host,
                     r->port, wait, r->last_connect_error);
        /* A refused AUTH stays a configuration fault while we wait. */
        return cf_error_set_retriable(err, r->last_connect_retriable);
    }
    cf_error local;
    cf_error_clear(&local);
    if (connect_once(r, &local) < 0) {
        r->next_attempt_mono_us = cf_mono_us() + next_backoff(r);
        cf_strlcpy(r->last_connect_error, local.msg, sizeof(r->last_connect_error));
        r->last_connect_retriable = local.retriable;
        if (err)
            *err = local;
        return -1;
    }
    r->backoff_us = 0;
    r->next_attempt_mono_us = 0;
    return 0;
}

cf_redis *cf_redis_new(const cf_redis_config *cfg, bool connect, cf_error *err)
{
    cf_redis_config def;
    if (!cfg) {
        cf_redis_config_init(&def);
        cfg = &def;
    }
    if (!cfg->host || !cfg->host[0]) {
        cf_error_set(err, CF_E_INVALID, "redis: host is empty");
        return NULL;
    }
    if (cfg->host[0] != '/' && (cfg->port <= 0 || cfg->port > 65535)) {
        cf_error_set(err, CF_E_INVALID, "redis: port %d out of range", cfg->port);
        return NULL;
    }
    if (cfg->db < 0 || cfg->connect_timeout_us <= 0 || cfg->command_timeout_us < 0 || cfg->max_reply_bytes < 64 ||
        cfg->retry_initial_us < 0 || cfg->retry_max_us < cfg->retry_initial_us) {
        cf_error_set(err, CF_E_INVALID, "redis: invalid db, timeout, reply cap or retry settings");
        return NULL;
    }
    if (cfg->user && !cfg->password) {
        cf_error_set(err, CF_E_INVALID, "redis: user given without password");
        return NULL;
    }
    cf_redis *r = calloc(1, sizeof(*r));
    if (!r) {
        cf_error_set(err, CF_E_NOMEM, "redis: out of memory");
        return NULL;
    }
    r->host = cf_strdup(cfg->host);
    r->user = cf_strdup(cfg->user);
    r->password = cf_strdup(cfg->password);
    if (!r->host || (cfg->user && !r->user) || (cfg->password && !r->password)) {
        cf_redis_destroy(r);
        cf_error_set(err, CF_E_NOMEM, "redis: out of memory");
        return NULL;
    }
    r->port = cfg->port;
    r->db = cfg->db;
    r->connect_timeout_us = cfg->connect_timeout_us;
    r->command_timeout_us = cfg->command_timeout_us;
    r->max_reply_bytes = cfg->max_reply_bytes;
    r->retry_initial_us = cfg->retry_initial_us;
    r->retry_max_us = cfg->retry_max_us;
    r->jitter_state = (uint64_t)cf_mono_us() ^ ((uint64_t)(uintptr_t)r << 16) ^ 0x9e3779b97f4a7c15ULL;
    if (r->jitter_state == 0)
        r->jitter_state = 1;
    cf_strlcpy(r->last_connect_error, "none", sizeof(r->last_connect_error));
    if (connect && ensure_connected(r, err) < 0) {
        cf_redis_destroy(r);
        return NULL;
    }
    return r;
}

void cf_redis_destroy(cf_redis *r)
{
    if (!r)
        return;
    cf_redis_disconnect(r);
    free(r->host);
    free(r->user);
    if (r->password) {
        /* Do not leave the secret in freed heap memory. */
        explicit_bzero(r->password, strlen(r->password));
        free(r->password);
    }
    free(r);
}

static int command_raw(cf_redis *r, int argc, const char **argv, const size_t *lens, redisReply **out, cf_error *err)
{
    if (!r || argc <= 0 || !argv)
        return cf_error_set(err, CF_E_INVALID, "redis: empty command");
    if (ensure_connected(r, err) < 0)
        return -1;
    return roundtrip(r, argc, argv, lens, out, err);
}

int cf_redis_command_argv(cf_redis *r, int argc, const char **argv, const size_t *lens, redisReply **out,
                          cf_error *err)
{
    if (out)
        *out = NULL;
    redisReply *rep = NULL;
    if (command_raw(r, argc, argv, lens, &rep, err) < 0)
        return -1;
    if (rep->type == REDIS_REPLY_ERROR) {
        char what[40];
        cf_sanitize_text(argv[0], lens ? lens[0] : strlen(argv[0]), false, what, sizeof(what));
        return fail_reply(r, rep, what, err);
    }
    if (out)
        *out = rep;
    else
        freeReplyObject(rep);
    return 0;
}

#define PIPE_SEND_BUF 65536

int cf_redis_pipeline(cf_redis *r, const cf_redis_cmd *cmds, size_t n, redisReply **replies, cf_error *err)
{
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    if (!r || (n && !cmds))
        return cf_error_set(err, CF_E_INVALID, "redis: bad pipeline");
    for (size_t i = 0; i < n; i++)
        if (cmds[i].argc <= 0 || !cmds[i].argv)
            return cf_error_set(err, CF_E_INVALID, "redis: empty command in pipeline");
    if (n == 0)
        return 0;
    if (ensure_connected(r, err) < 0)
        return -1;
    /* Small commands are gathered so a pipeline of GETs is a few send()s. */
    char *out = malloc(PIPE_SEND_BUF > CF_REDIS_READ_CHUNK ? PIPE_SEND_BUF : CF_REDIS_READ_CHUNK);
    if (!out)
        return cf_error_set(err, CF_E_NOMEM, "redis: out of memory");
    size_t used = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *cmd = NULL;
        int cmdlen = format_command(cmds[i].argc, cmds[i].argv, cmds[i].lens, &cmd, err);
        if (cmdlen < 0) {
            rc = -1;
            break;
        }
        if (used + (size_t)cmdlen > PIPE_SEND_BUF && used > 0) {
            rc = send_all(r, out, used, err);
            used = 0;
        }
        if (rc == 0 && (size_t)cmdlen > PIPE_SEND_BUF) {
            rc = send_all(r, cmd, (size_t)cmdlen, err);
        } else if (rc == 0) {
            memcpy(out + used, cmd, (size_t)cmdlen);
            used += (size_t)cmdlen;
        }
        redisFreeCommand(cmd);
    }
    if (rc == 0 && used > 0)
        rc = send_all(r, out, used, err);
    if (rc < 0) {
        /* Part of the pipeline may have gone out: its replies are unread. */
        drop_connection(r);
        free(out);
        return -1;
    }
    reply_budget b;
    memset(&b, 0, sizeof(b));
    size_t got = 0;
    for (; got < n; got++)
        if (read_reply(r, &b, out, &replies[got], err) < 0)
            break;
    free(out);
    size_t bad = n;
    if (got == n)
        for (size_t i = 0; i < n && bad == n; i++)
            if (replies[i]->type == REDIS_REPLY_ERROR)
                bad = i;
    if (got == n && bad == n)
        return 0;
    if (got == n) {
        char what[40];
        cf_sanitize_text(cmds[bad].argv[0], cmds[bad].lens ? cmds[bad].lens[0] : strlen(cmds[bad].argv[0]), false,
                         what, sizeof(what));
        fail_reply(r, replies[bad], what, err);
        replies[bad] = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
    return -1;
}

int cf_redis_ping(cf_redis *r, cf_error *err)
{
    const char *argv[1] = {"PING"};
    return cf_redis_command_argv(r, 1, argv, NULL, NULL, err);
}

static struct cf_redis_sha *sha_slot(cf_redis *r, const cf_redis_script *s)
{
    for (size_t i = 0; i < r->nshas; i++)
        if (r->shas[i].script == s)
            return &r->shas[i];
    if (r->nshas < CF_REDIS_SCRIPT_CACHE) {
        struct cf_redis_sha *slot = &r->shas[r->nshas++];
        slot->script = s;
        slot->sha[0] = '\0';
        return slot;
    }
    return NULL; /* cache full: plain EVAL still works */
}

static bool is_noscript(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ERROR && rep->len >= 8 && memcmp(rep->str, "NOSCRIPT", 8) == 0;
}

int cf_redis_eval(cf_redis *r, const cf_redis_script *script, int nkeys, const char *const *keys,
                  const size_t *key_lens, int nargs, const char *const *args, const size_t *arg_lens,
                  redisReply **out, cf_error *err)
{
    if (out)
        *out = NULL;
    if (!r || !script || !script->source || nkeys < 0 || nargs < 0 || (nkeys && !keys) || (nargs && !args))
        return cf_error_set(err, CF_E_INVALID, "redis: bad eval arguments");
    int argc = 3 + nkeys + nargs;
    const char **argv = calloc((size_t)argc, sizeof(*argv));
    size_t *lens = calloc((size_t)argc, sizeof(*lens));
    if (!argv || !lens) {
        free(argv);
        free(lens);
        return cf_error_set(err, CF_E_NOMEM, "redis: out of memory");
    }
    char nk[16];
    snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[2] = nk;
    lens[2] = strlen(nk);
    for (int i = 0; i < nkeys; i++) {
        argv[3 + i] = keys[i];
        lens[3 + i] = key_lens ? key_lens[i] : strlen(keys[i]);
    }
    for (int i = 0; i < nargs; i++) {
        argv[3 + nkeys + i] = args[i];
        lens[3 + nkeys + i] = arg_lens ? arg_lens[i] : strlen(args[i]);
    }

    int rc = -1;
    redisReply *rep = NULL;
    struct cf_redis_sha *slot = sha_slot(r, script);
    if (slot && !slot->sha[0]) {
        const char *la[3] = {"SCRIPT", "LOAD", script->source};
        redisReply *lr = NULL;
        if (command_raw(r, 3, la, NULL, &lr, err) < 0)
            goto out;
        if (lr->type == REDIS_REPLY_STRING && lr->len == 40) {
            memcpy(slot->sha, lr->str, 40);
            slot->sha[40] = '\0';
            freeReplyObject(lr);
        } else if (lr->type == REDIS_REPLY_ERROR) {
            fail_reply(r, lr, "SCRIPT LOAD", err);
            goto out;
        } else {
            freeReplyObject(lr);
            cf_error_set(err, CF_E_REDIS, "redis: unexpected SCRIPT LOAD reply");
            goto out;
        }
    }
    if (slot && slot->sha[0]) {
        argv[0] = "EVALSHA";
        lens[0] = 7;
        argv[1] = slot->sha;
        lens[1] = 40;
        if (command_raw(r, argc, argv, lens, &rep, err) < 0)
            goto out;
        if (!is_noscript(rep))
            goto got;
        /* The server lost its script cache (restart, SCRIPT FLUSH). */
        freeReplyObject(rep);
        rep = NULL;
    }
    argv[0] = "EVAL";
    lens[0] = 4;
    argv[1] = script->source;
    lens[1] = strlen(script->source);
    if (command_raw(r, argc, argv, lens, &rep, err) < 0)
        goto out;
got:
    if (rep->type == REDIS_REPLY_ERROR) {
        char what[64];
        snprintf(what, sizeof(what), "script %s", script->name ? script->name : "?");
        fail_reply(r, rep, what, err);
        goto out;
    }
    if (out)
        *out = rep;
    else
        freeReplyObject(rep);
    rc = 0;
out:
    if (rc < 0 && script->name)
        cf_error_wrap(err, "%s", script->name);
    free(argv);
    free(lens);
    return rc;
}

int cf_redis_reply_i64(const redisReply *rep, int64_t *out, cf_error *err)
{
    if (!rep)
        return cf_error_set(err, CF_E_REDIS, "redis: missing integer in reply");
    if (rep->type == REDIS_REPLY_INTEGER) {
        *out = (int64_t)rep->integer;
        return 0;
    }
    if ((rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS) && rep->len > 0 && rep->len < 24) {
        char tmp[24];
        memcpy(tmp, rep->str, rep->len);
        tmp[rep->len] = '\0';
        cf_error local;
        if (cf_parse_i64(tmp, INT64_MIN, INT64_MAX, out, "reply integer", &local) == 0)
            return 0;
    }
    return cf_error_set(err, CF_E_REDIS, "redis: expected an integer in reply");
}

bool cf_redis_reply_is(const redisReply *rep, const char *s)
{
    if (!rep || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_STATUS))
        return false;
    size_t n = strlen(s);
    return rep->len == n && memcmp(rep->str, s, n) == 0;
}
