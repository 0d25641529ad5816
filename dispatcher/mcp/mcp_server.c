/* codefleet mcp: the fleet as tools for any agent that speaks the Model
 * Context Protocol (JSON-RPC 2.0 over stdio: one message per line on
 * stdin, one per line on stdout; logs go to stderr).
 *
 * Tools: execute_code (submit a request and wait for its result, or only
 * submit), get_result, cancel, and the workspace tools list_files,
 * read_file, write_file, delete_file, grep_files, str_replace,
 * insert_text and apply_patch, each with an output schema and annotations.  The workspace
 * tools are requests to the fleet too (SPEC.md section 3.5): the server
 * holds no Redis credentials, and a tenant reaches its own workspaces only,
 * by the profile of its request topic.
 * Protocol versions 2024-11-05 to 2025-11-25; JSON-RPC batches in a
 * 2025-03-26 session, the one version that requires them.  Tool results carry the execution result in
 * structuredContent (the JSON form of SPEC.md section 7) and a readable
 * summary in content; an execution that could not happen (rejected, no
 * answer, bad arguments) is a tool result with isError, never a protocol
 * error, so the model sees why.  execute_code's arguments are turned into
 * a request in the JSON form and checked by the schema's own decoder: the
 * server speaks only what SPEC.md says, and its input schema's enums are
 * generated from the schema's name tables.
 *
 * The tools that wait (execute_code, get_result, the workspace tools) run on a thread per call,
 * up to --max-calls at once (more wait for a turn), so an agent's parallel
 * calls overlap; the main thread keeps reading: it answers ping, serves the
 * quick tools and routes notifications/cancelled to its call.  The MCP
 * cancel of an execute_code becomes a fleet cancel (SPEC.md section 12) of
 * its execution; a call cancelled before its turn never starts.  With a
 * progressToken, the program's output arrives as notifications/progress
 * while it runs (output chunks, SPEC.md section 13).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cf_chunk.h"
#include "cf_cli.h"
#include "cf_dispatcher.h"
#include "cf_log.h"
#include "cf_msgpack.h"
#include "cf_schema_json.h"
#include "cf_util.h"
#include "mcp_int.h"

#define MCP_LINE_MAX (4u * 1024 * 1024)     /* bytes of one incoming message */
#define MCP_QUEUE_BYTES (16u * 1024 * 1024) /* bytes of lines read ahead of the main thread */
#define MCP_WAIT_SLICE_US 100000
#define MCP_DEFAULT_WAIT_MS 120000
#define MCP_MAX_WAIT_MS (3600 * 1000)
#define MCP_MAX_CALLS_DEFAULT 16 /* tools/calls that wait at the same time */
#define MCP_MAX_CALLS_LIMIT 256
#define MCP_MAX_WAITING 1024                 /* calls in line for a turn; past it a call is refused */
#define MCP_WAITING_BYTES (16u * 1024 * 1024) /* and their messages' JSON text */
#define MCP_NEWEST_KEY "\x01newest"          /* result_key of get_result without an id */
#define LOG_SUB "mcp"

/* Newest first; the client's version is echoed when it is one of these.
 * JSON-RPC batches are served in a 2025-03-26 session only: the one
 * version that requires them (2025-06-18 removed them). */
static const char *const protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
#define MCP_BATCH_VERSION "2025-03-26"
#define MCP_BATCH_MAX 100 /* messages in one batch */

enum { RPC_PARSE = -32700, RPC_INVALID = -32600, RPC_NO_METHOD = -32601, RPC_BAD_PARAMS = -32602 };

/* A line read ahead, kept as text: it is parsed when its turn comes (only
 * small ones are looked into earlier), so what waits costs its bytes. */
typedef struct queued {
    struct queued *next;
    size_t len;
    bool too_long;
    char text[]; /* len bytes, NUL-terminated */
} queued;

/* The responses to the members of one JSON-RPC batch, sent as one array
 * when the last member is answered (guarded by the server's out_mu). */
typedef struct mcp_batch {
    json_t *out;
    int pending; /* members still to answer, plus one while the batch is read */
} mcp_batch;

typedef struct mcp mcp;

/* What the client said of a call (its notifications/cancelled). */
enum { CALL_GOES_ON, CALL_CANCELLED, CALL_TIMED_OUT };

/* A tools/call that waits (execute_code, get_result): it runs on a thread
 * of its own, so calls overlap and the main thread keeps reading (pings,
 * cancels, other calls).  The fields below `thread` are guarded by the
 * server's mu. */
typedef struct mcp_call {
    struct mcp_call *next; /* in the server's running or waiting list */
    mcp *m;
    json_t *msg;       /* the request (owned) */
    json_t *id;        /* its id (in msg) */
    mcp_batch *batch;  /* the batch it came in, or NULL */
    /* execute_code's workspace and thread (in msg, or NULL): calls that
     * name the same one run one after another, in the order they came. */
    const char *workspace, *thread;
    size_t bytes; /* its message's JSON text, counted while it waits for a turn */
    int abort;         /* CALL_GOES_ON, or what the client's notifications/cancelled said */
    char request_id[CF_ID_MAX + 1]; /* execute_code: the execution it submitted ("" before) */
    /* get_result: the execution it waits for, or MCP_NEWEST_KEY without
     * an id; calls of one run one after another (the fleet's collector
     * hands a result to one waiter). */
    char result_key[CF_ID_MAX + 1];
    bool picked;    /* a timed-out execute_code's result went to a get_result: stop waiting */
    bool silent;    /* timed out, waiting on without counting against --max-calls */
    bool finishing; /* answered: call_cancel leaves it alone */
    char evict_id[CF_ID_MAX + 1]; /* an abandoned execution its timeout pushed out: cancel it */
    /* The execution whose output chunks become progress notifications. */
    char exec_id[CF_ID_MAX + 1];
    char exec_run[CF_CHUNK_RUN_MAX + 1]; /* the run its chunks come from (the first seen) */
    uint8_t carry[2][4]; /* a UTF-8 sequence cut at a chunk's end, per stream */
    size_t ncarry[2];
    json_t *progress_token;
    int64_t progress;         /* chunks of the watched run sent as progress */
    int64_t progress_sent;    /* notifications sent for the call: chunks and keep-alives */
    json_t *keepalive_token;  /* the call's progress token, streamed or not */
    int64_t last_progress_us; /* when the last one went out (or the watch began) */
    bool replaying; /* get_result: its chunks come from a reader of its own (replay_chunk), not on_chunk */
} mcp_call;

struct mcp {
    const cf_cli_globals *g;
    cf_dispatcher *d;
    bool streaming; /* d reads output chunks: progress is possible */
    pthread_mutex_t out_mu; /* one message at a time on stdout */
    /* Held around a submit and its flush, and around a cancel: the
     * dispatcher keeps one delivery error, taken by whoever reads it
     * first, so calls side by side would read each other's. */
    pthread_mutex_t send_mu;
    /* Lines read by the reader thread. */
    pthread_t reader;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    queued *head, *tail;
    size_t queued_bytes;
    bool eof;
    /* The calls that wait on threads of their own, and those past
     * max_calls that wait for a turn (guarded by mu). */
    mcp_call *running;
    mcp_call *waiting, *waiting_tail;
    int n_running, max_calls, n_waiting;
    size_t waiting_bytes; /* their messages' JSON text */
    pthread_cond_t calls_cv;
    int gone; /* stdout is closed (the client died): calls end as on a stop (atomic: is_gone) */
    pthread_t keeper;        /* sends the keep-alives, whatever the waiting calls block in */
    bool keeper_stop;
    pthread_cond_t keeper_cv;
    int64_t keepalive_us;     /* a quiet call's keep-alive interval (0: none) */
    /* Executions whose call the client gave up on by its own request
     * timeout (not a user's cancel): they keep running, and get_result
     * without an id answers the newest (guarded by mu). */
    char abandoned[8][CF_ID_MAX + 1];
    int n_abandoned;
    /* Results of abandoned executions that a timed-out call received
     * (it waits on, silently, so that the next call of its workspace or
     * thread does not start beside its program): get_result takes them
     * from here (guarded by mu). */
    struct {
        char id[CF_ID_MAX + 1];
        cf_result res;
    } kept[8];
    int n_kept;
    pthread_cond_t progress_cv;
    json_t *tools; /* the tools/list answer, built once */
    char version[16]; /* the protocol version initialize agreed on */
};

/* The batch whose members the current thread answers (the main thread
 * while it reads a batch, a call's thread for a call from one). */
static __thread mcp_batch *tl_batch;

/* ---------------------------------------------------------------- output */

static bool is_gone(const mcp *m)
{
    return __atomic_load_n(&m->gone, __ATOMIC_ACQUIRE) != 0;
}

/* Whether msg is a response (not a notification) that belongs in the
 * current thread's batch. */
static bool in_batch(const json_t *msg)
{
    return tl_batch && json_is_object(msg) && !json_object_get(msg, "method");
}

static void send_msg(mcp *m, json_t *msg)
{
    if (in_batch(msg)) {
        pthread_mutex_lock(&m->out_mu);
        json_array_append_new(tl_batch->out, msg);
        pthread_mutex_unlock(&m->out_mu);
        return;
    }
    char *s = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(msg);
    if (!s) {
        cf_log_error(LOG_SUB, "out of memory encoding a message");
        return;
    }
    pthread_mutex_lock(&m->out_mu);
    if (!is_gone(m)) {
        fputs(s, stdout);
        fputc('\n', stdout);
        /* A client that died closed the pipe (SIGPIPE is ignored): the
         * session is over, and its calls end as on a stop. */
        if (fflush(stdout) != 0 || ferror(stdout)) {
            __atomic_store_n(&m->gone, 1, __ATOMIC_RELEASE);
            cf_log_warn(LOG_SUB, "the client closed its end of stdout: ending the session");
        }
    }
    pthread_mutex_unlock(&m->out_mu);
    free(s);
}

static void send_result(mcp *m, json_t *id, json_t *result)
{
    send_msg(m, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void send_error(mcp *m, json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void send_error(mcp *m, json_t *id, int code, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    send_msg(m, json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code",
                          code, "message", text));
}

/* ---------------------------------------------------------------- input */

static void enqueue(mcp *m, const uint8_t *text, size_t len, bool too_long)
{
    queued *q = malloc(sizeof(*q) + len + 1);
    if (!q)
        return;
    q->next = NULL;
    q->len = len;
    q->too_long = too_long;
    if (len)
        memcpy(q->text, text, len);
    q->text[len] = '\0';
    pthread_mutex_lock(&m->mu);
    /* The main thread is behind: wait for it (one line always fits). */
    while (m->head && m->queued_bytes + len > MCP_QUEUE_BYTES)
        pthread_cond_wait(&m->cv, &m->mu);
    if (m->tail)
        m->tail->next = q;
    else
        m->head = q;
    m->tail = q;
    m->queued_bytes += len;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* Reads stdin line by line (bounded), parses each line and queues it. */
static void *reader_main(void *arg)
{
    mcp *m = arg;
    cf_buf line;
    cf_buf_init(&line, 0);
    bool too_long = false;
    char chunk[65536];
    for (;;) {
        if (!fgets(chunk, sizeof(chunk), stdin))
            break;
        size_t n = strlen(chunk);
        bool end = n > 0 && chunk[n - 1] == '\n';
        if (end)
            n--;
        if (!too_long && line.len + n <= MCP_LINE_MAX) {
            if (cf_buf_append(&line, chunk, n, NULL) < 0)
                too_long = true;
        } else {
            too_long = true;
        }
        if (!end)
            continue;
        if (too_long)
            enqueue(m, NULL, 0, true);
        else if (line.len > 0 && !(line.len == 1 && line.data[0] == '\r'))
            enqueue(m, line.data, line.len, false);
        line.len = 0;
        too_long = false;
    }
    cf_buf_free(&line);
    pthread_mutex_lock(&m->mu);
    m->eof = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* The next message, waiting up to timeout_us (-1: forever).  NULL with
 * *eof at the end of input or on a stop signal. */
static queued *next_message(mcp *m, int64_t timeout_us, bool *eof)
{
    int64_t until = timeout_us < 0 ? INT64_MAX : cf_mono_us() + timeout_us;
    pthread_mutex_lock(&m->mu);
    while (!m->head && !m->eof && !cf_cli_stop && !is_gone(m) && cf_mono_us() < until) {
        struct timespec ts = cf_realtime_after_us(100 * 1000);
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    }
    queued *q = m->head;
    if (q) {
        m->head = q->next;
        if (!m->head)
            m->tail = NULL;
        m->queued_bytes -= q->len;
        pthread_cond_broadcast(&m->cv);
    }
    *eof = !q && (m->eof || cf_cli_stop || is_gone(m));
    if (is_gone(m) && q) { /* nobody reads the answers */
        free(q);
        q = NULL;
        *eof = true;
    }
    pthread_mutex_unlock(&m->mu);
    return q;
}

/* The running call that watches execution id's output, or NULL (under mu). */
static mcp_call *watcher_of(mcp *m, const char *id)
{
    for (mcp_call *c = m->running; c; c = c->next)
        if (c->progress_token && !c->replaying && strcmp(c->exec_id, id) == 0)
            return c;
    return NULL;
}

static void chunk_progress_locked(mcp *m, mcp_call *c, const cf_chunk *ch);

/* Output chunks of the executions being waited for, as progress of the
 * call that waits.  Sent while holding mu, so none can follow the call's
 * response (which is sent after watch_execution stopped the watch under
 * mu). */
static void on_chunk(void *ctx, const cf_chunk *ch)
{
    mcp *m = ctx;
    pthread_mutex_lock(&m->mu);
    mcp_call *c = watcher_of(m, ch->id);
    if (c)
        chunk_progress_locked(m, c, ch);
    pthread_mutex_unlock(&m->mu);
}

/* get_result's own reader (replay from the output topic): only its call. */
static void replay_chunk(void *ctx, const cf_chunk *ch)
{
    mcp_call *c = ctx;
    mcp *m = c->m;
    pthread_mutex_lock(&m->mu);
    /* A cancelled call sends nothing more (its wait may still be ending). */
    if (c->replaying && c->progress_token && c->abort == CALL_GOES_ON && strcmp(c->exec_id, ch->id) == 0)
        chunk_progress_locked(m, c, ch);
    pthread_mutex_unlock(&m->mu);
}

/* One chunk of c's execution as a progress notification (under mu). */
static void chunk_progress_locked(mcp *m, mcp_call *c, const cf_chunk *ch)
{
    if (!c->exec_run[0])
        snprintf(c->exec_run, sizeof(c->exec_run), "%s", ch->run);
    if (strcmp(c->exec_run, ch->run) != 0) /* another run of the same id */
        return;
    ++c->progress;
    int64_t progress = ++c->progress_sent;
    c->last_progress_us = cf_mono_us();
    /* The program's text without terminal controls, like the summary; a
     * UTF-8 sequence cut at the chunk's end waits for the next chunk. */
    int k = ch->stream == CF_CHUNK_STDERR;
    size_t total = c->ncarry[k] + ch->data.len;
    uint8_t *joined = malloc(total + 1);
    char *text = malloc(total + 1);
    if (joined && text) {
        memcpy(joined, c->carry[k], c->ncarry[k]);
        memcpy(joined + c->ncarry[k], ch->data.data, ch->data.len);
        size_t keep = cf_utf8_incomplete_tail(joined, total);
        c->ncarry[k] = keep;
        memcpy(c->carry[k], joined + total - keep, keep);
        cf_sanitize_text((const char *)joined, total - keep, true, text, total + 1);
    } else {
        free(text);
        text = NULL;
    }
    free(joined);
    send_msg(m, json_pack("{s:s, s:s, s:{s:O, s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/progress",
                          "params", "progressToken", c->progress_token, "progress", (json_int_t)progress, "message",
                          text ? text : ""));
    free(text);
    pthread_cond_broadcast(&m->progress_cv);
}

/* The execution whose chunks become c's progress (id NULL: none), from
 * the shared reader or (replaying) from the call's own: set together,
 * so no chunk comes from both. */
static void watch_execution_from(mcp_call *c, const char *id, json_t *token, bool replaying)
{
    mcp *m = c->m;
    pthread_mutex_lock(&m->mu);
    c->replaying = replaying;
    snprintf(c->exec_id, sizeof(c->exec_id), "%s", id ? id : "");
    c->exec_run[0] = '\0';
    c->ncarry[0] = c->ncarry[1] = 0;
    json_decref(c->progress_token);
    c->progress_token = token ? json_incref(token) : NULL;
    c->progress = 0;
    pthread_mutex_unlock(&m->mu);
}

static void watch_execution(mcp_call *c, const char *id, json_t *token)
{
    watch_execution_from(c, id, token, false);
}

/* The call's progress token for keep-alives (NULL: none): they go to it
 * whether or not its output streams, and while it waits for its turn;
 * progress counts from 1 per call. */
static void watch_keepalive(mcp_call *c, json_t *token)
{
    mcp *m = c->m;
    pthread_mutex_lock(&m->mu);
    json_decref(c->keepalive_token);
    c->keepalive_token = token && (json_is_string(token) || json_is_integer(token)) ? json_incref(token) : NULL;
    c->last_progress_us = cf_mono_us(); /* (progress_sent goes on: a call's progress only grows) */
    pthread_mutex_unlock(&m->mu);
}

/* A quiet call with a progress token gets a progress notification without
 * a message every keepalive_us, so a client that restarts its request
 * timer on progress (TypeScript SDK: resetTimeoutOnProgress) keeps
 * waiting for a program that prints nothing. */
static void keep_alive(mcp *m)
{
    pthread_mutex_lock(&m->mu);
    int64_t now = cf_mono_us();
    for (int list = 0; list < 2; list++)
        for (mcp_call *c = list ? m->waiting : m->running; c; c = c->next)
            if (c->keepalive_token && m->keepalive_us > 0 && now - c->last_progress_us >= m->keepalive_us) {
                c->last_progress_us = now;
                send_msg(m, json_pack("{s:s, s:s, s:{s:O, s:I}}", "jsonrpc", "2.0", "method",
                                      "notifications/progress", "params", "progressToken", c->keepalive_token,
                                      "progress", (json_int_t)++c->progress_sent));
            }
    pthread_mutex_unlock(&m->mu);
}

/* A fleet cancel, under send_mu (see there). */
static int send_cancel(mcp *m, const char *id, const char *reason, int64_t timeout_us, cf_error *err)
{
    pthread_mutex_lock(&m->send_mu);
    int rc = cf_dispatcher_cancel(m->d, id, reason, timeout_us, err);
    pthread_mutex_unlock(&m->send_mu);
    return rc;
}

/* Cancels an abandoned execution nobody can pick up any more. */
static void cancel_abandoned(mcp *m, const char *id, const char *why)
{
    cf_error err = {0};
    if (send_cancel(m, id, why, 5 * 1000000LL, &err) < 0)
        cf_log_warn(LOG_SUB, "request %s: the cancel failed: %s", id, err.msg);
    else
        cf_log_info(LOG_SUB, "request %s: cancelled (%s)", id, why);
}

/* The keep-alive thread: a wait may block in a scan of the result topic,
 * so the keep-alives do not come from the waiting loops. */
static void *keeper_main(void *arg)
{
    mcp *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->keeper_stop) {
        struct timespec t = cf_realtime_after_us(200 * 1000);
        pthread_cond_timedwait(&m->keeper_cv, &m->mu, &t);
        if (m->keeper_stop)
            break;
        pthread_mutex_unlock(&m->mu);
        keep_alive(m);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* id joins the abandoned (under mu); the oldest one past the cap goes
 * into evicted (cancel it after unlocking). */
static void remember_abandoned_locked(mcp *m, const char *id, char evicted[CF_ID_MAX + 1])
{
    int cap = (int)(sizeof(m->abandoned) / sizeof(m->abandoned[0]));
    if (m->n_abandoned == cap) { /* the oldest goes */
        snprintf(evicted, CF_ID_MAX + 1, "%s", m->abandoned[0]);
        memmove(m->abandoned[0], m->abandoned[1], sizeof(m->abandoned[0]) * (size_t)(cap - 1));
        m->n_abandoned--;
    }
    snprintf(m->abandoned[m->n_abandoned++], sizeof(m->abandoned[0]), "%s", id);
}

/* The newest abandoned execution into id ("" when none). */
static void newest_abandoned(mcp *m, char *id, size_t size)
{
    pthread_mutex_lock(&m->mu);
    snprintf(id, size, "%s", m->n_abandoned ? m->abandoned[m->n_abandoned - 1] : "");
    pthread_mutex_unlock(&m->mu);
}

/* id answered: off the list (wherever it is now). */
static void forget_abandoned(mcp *m, const char *id)
{
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n_abandoned; i++)
        if (strcmp(m->abandoned[i], id) == 0) {
            memmove(m->abandoned[i], m->abandoned[i + 1], sizeof(m->abandoned[0]) * (size_t)(m->n_abandoned - i - 1));
            m->n_abandoned--;
            break;
        }
    pthread_mutex_unlock(&m->mu);
}

/* A timed-out call's result of id, kept for get_result (moved from res;
 * the oldest goes past the cap). */
static void keep_result(mcp *m, const char *id, cf_result *res)
{
    pthread_mutex_lock(&m->mu);
    int cap = (int)(sizeof(m->kept) / sizeof(m->kept[0]));
    if (m->n_kept == cap) {
        cf_result_clear(&m->kept[0].res);
        memmove(&m->kept[0], &m->kept[1], sizeof(m->kept[0]) * (size_t)(cap - 1));
        m->n_kept--;
    }
    snprintf(m->kept[m->n_kept].id, sizeof(m->kept[0].id), "%s", id);
    m->kept[m->n_kept].res = *res;
    m->n_kept++;
    memset(res, 0, sizeof(*res));
    pthread_mutex_unlock(&m->mu);
}

/* Takes id's kept result into out: true when there was one. */
static bool take_kept(mcp *m, const char *id, cf_result *out)
{
    bool found = false;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n_kept && !found; i++)
        if (strcmp(m->kept[i].id, id) == 0) {
            *out = m->kept[i].res;
            memmove(&m->kept[i], &m->kept[i + 1], sizeof(m->kept[0]) * (size_t)(m->n_kept - i - 1));
            m->n_kept--;
            found = true;
        }
    pthread_mutex_unlock(&m->mu);
    return found;
}

/* id's result went to a get_result: a timed-out call still waiting for it
 * stops. */
static void result_picked(mcp *m, const char *id)
{
    pthread_mutex_lock(&m->mu);
    for (mcp_call *c = m->running; c; c = c->next)
        if (strcmp(c->request_id, id) == 0)
            c->picked = true;
    pthread_mutex_unlock(&m->mu);
}

/* Before the response: the chunks the result counts, for up to 1 s (they
 * travel on another topic and may come after it). */
static void progress_catch_up(mcp_call *c, const cf_result *res)
{
    mcp *m = c->m;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    /* A replay reads the output from an hour back: give it longer. */
    pthread_mutex_lock(&m->mu);
    until.tv_sec += c->replaying ? 5 : 1;
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_lock(&m->mu);
    while (res->meta.run && (!c->exec_run[0] || strcmp(c->exec_run, res->meta.run) == 0) &&
           c->progress < res->chunks)
        if (pthread_cond_timedwait(&m->progress_cv, &m->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&m->mu);
}

static void call_start_waiting_locked(mcp *m);


/* A cancel a client sends because its own request timeout passed, not
 * because someone asked: the TypeScript SDK's reason is "McpError: MCP
 * error -32001: Request timed out" (ErrorCode.RequestTimeout). */
static bool client_timeout_reason(const char *reason)
{
    /* The SDK's own words at the start, not the text anywhere: a user's
     * reason that mentions an earlier timeout is still a user's cancel. */
    return reason && (strncmp(reason, "McpError: MCP error -32001:", 27) == 0 ||
                      strncmp(reason, "MCP error -32001:", 17) == 0 || strcmp(reason, "Request timed out") == 0);
}

/* What the client said of c so far (the main thread routes its
 * notifications/cancelled here). */
static int call_abort(mcp_call *c)
{
    pthread_mutex_lock(&c->m->mu);
    int a = c->abort;
    pthread_mutex_unlock(&c->m->mu);
    return a;
}

/* Waits for id's result in slices, serving pings and watching for the
 * client's cancel.  With since_us, the result topic is first scanned once
 * from then (a result that came before this server started, or before the
 * call, while nobody waited); after that, and without it, the collector
 * (which reads everything since the server started) is waited on.
 * Returns 0 (result), 1 (the client cancelled: no answer is due), -1
 * (err: timeout or transport). */
static int wait_result(mcp_call *c, const char *id, int64_t since_us, int64_t timeout_us, bool cancel_on_abort,
                       cf_result *out, cf_error *err)
{
    mcp *m = c->m;
    int64_t until = cf_mono_us() + timeout_us;
    if (take_kept(m, id, out))
        return 0;
    if (since_us) {
        int64_t scan = timeout_us < 10 * 1000000LL ? timeout_us : 10 * 1000000LL;
        cf_error_clear(err);
        if (cf_dispatcher_wait_since(m->d, id, since_us, scan, out, err) == 0)
            return 0;
        if (err->code != CF_E_TIMEOUT)
            return -1;
    }
    bool silent = false; /* the client stopped waiting: hold the call's place until the program ends */
    for (;;) {
        int call = call_abort(c);
        if (call == CALL_TIMED_OUT && cancel_on_abort && !silent) {
            /* Not the user's cancel: the program keeps running (and
             * call_cancel listed it for get_result). */
            cf_log_info(LOG_SUB, "request %s: the client stopped waiting (its own request timeout); it keeps "
                        "running: get_result (without an id) picks it up", id);
            silent = true;
            char evicted[CF_ID_MAX + 1];
            pthread_mutex_lock(&m->mu);
            snprintf(evicted, sizeof(evicted), "%s", c->evict_id);
            c->evict_id[0] = '\0';
            /* The client dropped its token: no more progress to it.  And
             * the call no longer counts against --max-calls (it holds its
             * workspace's or thread's turn only), so a get_result for its
             * result is not kept waiting behind it. */
            json_decref(c->progress_token);
            c->progress_token = NULL;
            json_decref(c->keepalive_token);
            c->keepalive_token = NULL;
            c->silent = true;
            m->n_running--;
            call_start_waiting_locked(m);
            pthread_mutex_unlock(&m->mu);
            if (evicted[0])
                cancel_abandoned(m, evicted, "left running by a client timeout, and more than 8 newer ones since");
        }
        if (silent) {
            pthread_mutex_lock(&m->mu);
            bool over = c->picked || m->eof; /* (at the end of input end_session cancels it) */
            pthread_mutex_unlock(&m->mu);
            if (over || cf_cli_stop || is_gone(m))
                return 1;
        } else if (call != CALL_GOES_ON || cf_cli_stop || is_gone(m)) {
            if (cancel_on_abort) {
                cf_error cerr = {0};
                if (send_cancel(m, id, "cancelled by the MCP client", 10 * 1000000LL, &cerr) < 0)
                    cf_log_warn(LOG_SUB, "request %s: the fleet cancel failed: %s", id, cerr.msg);
                else
                    cf_log_info(LOG_SUB, "request %s: cancelled by the client", id);
            }
            return 1;
        }
        int64_t left = until - cf_mono_us();
        if (left <= 0) {
            if (silent)
                return 1;
            return cf_error_set(err, CF_E_TIMEOUT, "no result for %s within %" PRId64 " ms", id, timeout_us / 1000);
        }
        int64_t slice = left < MCP_WAIT_SLICE_US ? left : MCP_WAIT_SLICE_US;
        cf_error_clear(err);
        int rc = cf_dispatcher_wait(m->d, id, slice, out, err);
        if (rc == 0 && silent) { /* for get_result, not for this call */
            keep_result(m, id, out);
            return 1;
        }
        if (rc == 0)
            return 0;
        if (err->code != CF_E_TIMEOUT)
            return silent ? 1 : -1;
        if (!cancel_on_abort && take_kept(m, id, out)) /* a get_result: a timed-out call received it */
            return 0;
    }
}

static json_t *tool_execute_waiting(mcp_call *c, const json_t *args, json_t *progress_token, bool *no_answer);

static json_t *tool_execute(mcp_call *c, const json_t *args, json_t *progress_token, bool *no_answer)
{
    watch_keepalive(c, progress_token);
    json_t *r = tool_execute_waiting(c, args, progress_token, no_answer);
    watch_keepalive(c, NULL);
    return r;
}

/* What the input schema says of cases that the request's decoder does not
 * check: a key it does not know (a typo of expect_stdout would compare
 * nothing), and stop_on_failure without cases.  NULL when fine. */
static const char *cases_mistake(const json_t *args, char *why, size_t size)
{
    static const char *const known[] = {"name", "stdin", "input", "argv", "expect_stdout"};
    const json_t *cases = json_object_get(args, "cases");
    if (json_object_get(args, "stop_on_failure") && !cases)
        return "stop_on_failure: only with cases";
    size_t i;
    const json_t *e;
    json_array_foreach(cases, i, e)
    {
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)e, key, v)
        {
            bool ok = false;
            for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
                ok = ok || strcmp(key, known[k]) == 0;
            if (!ok) {
                snprintf(why, size, "cases[%zu]: unknown key '%.60s' (name, stdin, input, argv, expect_stdout)", i,
                         key);
                return why;
            }
        }
    }
    return NULL;
}


/* Whether a worker has started request id (its start notice, SPEC.md
 * 13.1), in words for a wait that ran out; at most 5 s more. */
static void start_state(mcp *m, const char *id, int64_t since_us, char *buf, size_t size)
{
    cf_chunk s = {0};
    cf_error e = {0};
    int found = cf_dispatcher_find_start(m->d, id, since_us - 30 * INT64_C(1000000), 5 * INT64_C(1000000), &s, &e);
    if (found == 1)
        snprintf(buf, size, "it is running: worker %s started it %.1f s ago", s.worker ? s.worker : "(unnamed)",
                 (cf_now_us() - s.at_us > 0 ? cf_now_us() - s.at_us : 0) / 1e6);
    else if (found == 0)
        snprintf(buf, size, "it is most likely queued: no worker has reported starting it");
    else {
        cf_log_debug(LOG_SUB, "start notice of %s: %s", id, e.msg);
        snprintf(buf, size, "it is queued or running (whether a worker started it could not be read)");
    }
    cf_chunk_clear(&s);
}

static json_t *tool_execute_waiting(mcp_call *c, const json_t *args, json_t *progress_token, bool *no_answer)
{
    mcp *m = c->m;
    char id[CF_ID_MAX + 1], why[256] = "";
    cf_error err = {0};
    if (cf_dispatcher_new_id(id, sizeof(id), &err) < 0)
        return mcp_tool_error("cannot make a request id: %s", err.msg);
    bool ok = true;
    json_t *wait_j = json_object_get(args, "wait");
    if (wait_j && !json_is_boolean(wait_j))
        return mcp_tool_error("wait: expected true or false");
    bool wait = !wait_j || json_is_true(wait_j);
    int64_t wait_ms = mcp_int_arg(args, "wait_timeout_ms", MCP_DEFAULT_WAIT_MS, 1, MCP_MAX_WAIT_MS, &ok);
    if (!ok)
        return mcp_tool_error("wait_timeout_ms: an integer from 1 to %d", MCP_MAX_WAIT_MS);
    /* A progress token (a string or an integer) asks for output as it
     * comes: the request then streams, where the fleet can. */
    /* (Cases do not stream: SPEC.md section 2.) */
    bool stream = wait && m->streaming && (json_is_string(progress_token) || json_is_integer(progress_token)) &&
                  !json_object_get(args, "cases");
    const char *mistake = cases_mistake(args, why, sizeof(why));
    if (mistake)
        return mcp_tool_error("%s", mistake);
    cf_result res = {0};
    for (;;) {
        if (call_abort(c) == CALL_TIMED_OUT) /* nobody waits for its output */
            stream = false;
        json_t *rj = mcp_request_json(args, id, stream, why, sizeof(why));
        if (!rj)
            return mcp_tool_error("%s", why);
        cf_request req = {0};
        int rc = cf_request_from_json(rj, &req, &err);
        json_decref(rj);
        if (rc < 0)
            return mcp_tool_error("invalid request: %s", err.msg);
        /* Cancelled before it was sent: it never starts.  Otherwise the
         * id is the call's from now on (a client timeout lists it). */
        pthread_mutex_lock(&m->mu);
        bool go = c->abort != CALL_CANCELLED;
        if (go)
            snprintf(c->request_id, sizeof(c->request_id), "%s", id);
        /* The client's own timeout passed while the call waited for its
         * turn: not a user's cancel, so it runs, listed for get_result. */
        bool abandoned = c->abort == CALL_TIMED_OUT;
        char evicted[CF_ID_MAX + 1] = "";
        if (abandoned)
            remember_abandoned_locked(m, id, evicted);
        pthread_mutex_unlock(&m->mu);
        if (evicted[0])
            cancel_abandoned(m, evicted, "left running by a client timeout, and more than 8 newer ones since");
        if (!go) {
            cf_request_clear(&req);
            *no_answer = true;
            return NULL;
        }
        if (stream && !abandoned)
            watch_execution(c, id, progress_token);
        /* Flushed: a request the broker refuses is said now, not after
         * wait_timeout_ms (nor blamed on the next call). */
        /* A worker says when it starts it: a wait that runs out tells
         * queued from running (SPEC.md 13.1). */
        req.notify_start = true;
        int64_t submitted_us = cf_now_us();
        pthread_mutex_lock(&m->send_mu);
        int sent = cf_dispatcher_submit(m->d, &req, &err) == 0 && cf_dispatcher_flush(m->d, 10 * 1000000LL, &err) == 0;
        pthread_mutex_unlock(&m->send_mu);
        if (!sent) {
            watch_execution(c, NULL, NULL);
            cf_request_clear(&req);
            return mcp_tool_error("could not submit: %s", err.msg);
        }
        cf_request_clear(&req);
        if (abandoned) {
            cf_log_info(LOG_SUB, "request %s: submitted after the client stopped waiting (its own request "
                        "timeout, while the call waited for its turn): get_result (without an id) picks it up", id);
            /* Its place held until the program ends (wait_result keeps
             * the result for get_result). */
            wait_result(c, id, 0, wait_ms * 1000, true, &res, &err);
            cf_result_clear(&res);
            *no_answer = true;
            return NULL;
        }
        if (!wait) {
            char text[300];
            snprintf(text, sizeof(text), "submitted as request %s: use get_result or cancel with this id", id);
            return mcp_tool_result(text, json_pack("{s:s, s:s}", "id", id, "status", "submitted"), false);
        }
        rc = wait_result(c, id, 0, wait_ms * 1000, true, &res, &err);
        if (rc == 0 && stream)
            progress_catch_up(c, &res);
        watch_execution(c, NULL, NULL);
        /* A result that came as the client cancelled: no answer is due
         * (after its own timeout, get_result finds it). */
        if (rc == 0 && call_abort(c) != CALL_GOES_ON) {
            if (call_abort(c) == CALL_TIMED_OUT)
                keep_result(m, id, &res);
            cf_result_clear(&res);
            rc = 1;
        }
        if (rc == 1) {
            *no_answer = true;
            return NULL;
        }
        if (rc < 0 && err.code == CF_E_TIMEOUT) {
            char state[200];
            start_state(m, id, submitted_us, state, sizeof(state));
            if (call_abort(c) != CALL_GOES_ON) { /* cancelled meanwhile: no answer is due */
                *no_answer = true;
                return NULL;
            }
            return mcp_tool_error("request %s: %s: %s (get_result with this id picks the result up, or cancel it)", id,
                                  err.msg, state);
        }
        if (rc < 0)
            return mcp_tool_error("request %s: %s (it may still run: get_result with this id, or cancel it)", id,
                              err.msg);
        /* Streaming is a convenience here: where the fleet cannot stream
         * (a js or wasm backend, streaming off), run it without. */
        if (stream && res.status == CF_STATUS_REJECTED && res.reason && strncmp(res.reason, "stream:", 7) == 0) {
            cf_log_info(LOG_SUB, "request %s: %s; sent again without streaming", id, res.reason);
            cf_result_clear(&res);
            stream = false;
            if (cf_dispatcher_new_id(id, sizeof(id), &err) < 0)
                return mcp_tool_error("cannot make a request id: %s", err.msg);
            continue;
        }
        break;
    }
    json_t *out = mcp_result_tool_result(&res);
    cf_result_clear(&res);
    return out;
}

static json_t *tool_get_result_waiting(mcp_call *c, const json_t *args, json_t *progress_token, bool *no_answer);

static json_t *tool_get_result(mcp_call *c, const json_t *args, json_t *progress_token, bool *no_answer)
{
    watch_keepalive(c, progress_token);
    json_t *r = tool_get_result_waiting(c, args, progress_token, no_answer);
    watch_keepalive(c, NULL);
    return r;
}

/* Reattach (get_result with a progress token): a reader of its own replays
 * the execution's output chunks from the output topic (the last hour,
 * its id's partition) and follows them, as c's progress.  The watch is
 * set first, so no chunk the reader finds is dropped.  NULL (no replay,
 * keep-alives only) when the reader cannot start. */
static cf_dispatcher *replay_open(mcp_call *c, const char *id, json_t *token)
{
    mcp *m = c->m;
    watch_execution_from(c, id, token, true);
    cf_dispatcher_config cfg = {
        .brokers = m->g->brokers,
        .request_topic = m->g->request_topic,
        .result_topic = m->g->result_topic,
        .client_id = "codefleet-mcp",
        .kafka = &m->g->kafka,
        .on_chunk = replay_chunk,
        .on_chunk_ctx = c,
        .output_since_us = cf_now_us() - 3600 * 1000000LL,
        .output_key = id,
        .chunks_only = true,
    };
    cf_dispatcher *r = NULL;
    cf_error err = {0};
    if (cf_dispatcher_new(&cfg, &r, &err) < 0) {
        /* What comes from now on still comes, from the shared reader. */
        cf_log_warn(LOG_SUB, "get_result %s: its earlier output cannot be replayed (%s)", id, err.msg);
        watch_execution_from(c, id, token, false);
        return NULL;
    }
    return r;
}

/* Ends the watch (and the replay, r may be NULL) before the call's
 * response: no chunk follows it. */
static void replay_close(mcp_call *c, cf_dispatcher *r)
{
    watch_execution(c, NULL, NULL);
    cf_dispatcher_destroy(r);
}

static json_t *tool_get_result_waiting(mcp_call *c, const json_t *args, json_t *progress_token, bool *no_answer)
{
    mcp *m = c->m;
    const char *id = mcp_str_arg(args, "id");
    char newest[CF_ID_MAX + 1] = "";
    if (!json_object_get(args, "id")) {
        newest_abandoned(m, newest, sizeof(newest));
        if (!newest[0])
            return mcp_tool_error("id: no execution of this session was left running by a client timeout; pass the "
                              "request id");
        id = newest;
    }
    if (!id || !cf_id_valid(id, strlen(id)))
        return mcp_tool_error("id: a request id (1..%d printable characters without spaces)", CF_ID_MAX);
    bool ok = true;
    int64_t wait_ms = mcp_int_arg(args, "wait_timeout_ms", MCP_DEFAULT_WAIT_MS, 1, MCP_MAX_WAIT_MS, &ok);
    if (!ok)
        return mcp_tool_error("wait_timeout_ms: an integer from 1 to %d", MCP_MAX_WAIT_MS);
    cf_result res = {0};
    cf_error err = {0};
    bool replaying = m->streaming && (json_is_string(progress_token) || json_is_integer(progress_token));
    int64_t t0 = cf_mono_us();
    cf_dispatcher *replay = replaying ? replay_open(c, id, progress_token) : NULL;
    /* The reader's start counts against the wait, and a cancel that came
     * meanwhile is heard by wait_result at once. */
    int64_t left_us = wait_ms * 1000 - (cf_mono_us() - t0);
    /* Its result may have come before this call, while nobody waited. */
    int rc = wait_result(c, id, cf_now_us() - 3600 * 1000000LL, left_us > 1000 ? left_us : 1000, false, &res, &err);
    if (rc == 0 && replaying)
        progress_catch_up(c, &res);
    replay_close(c, replay);
    if (rc == 1) {
        *no_answer = true;
        return NULL;
    }
    if (rc < 0)
        return mcp_tool_error("request %s: %s", id, err.msg);
    forget_abandoned(m, id); /* answered: the next call without an id gets the one before */
    result_picked(m, id);
    json_t *out = mcp_result_tool_result(&res);
    cf_result_clear(&res);
    return out;
}

static json_t *tool_cancel(mcp *m, const json_t *args)
{
    const char *id = mcp_str_arg(args, "id"), *reason = mcp_str_arg(args, "reason");
    if (!id || !cf_id_valid(id, strlen(id)))
        return mcp_tool_error("id: a request id (1..%d printable characters without spaces)", CF_ID_MAX);
    if (json_object_get(args, "reason") && !reason)
        return mcp_tool_error("reason: expected a string");
    cf_error err = {0};
    if (send_cancel(m, id, reason, 10 * 1000000LL, &err) < 0)
        return mcp_tool_error("cancel of %s: %s", id, err.msg);
    char text[300];
    snprintf(text, sizeof(text), "cancel of %s sent: if it runs or waits it is answered `cancelled` (get_result "
                                 "shows it); if it finished, nothing changes", id);
    return mcp_tool_result(text, json_pack("{s:s, s:s}", "id", id, "cancel", "sent"), false);
}

static json_t *bytes_json_value(const uint8_t *d, size_t n)
{
    if (cf_utf8_valid(d, n) && !memchr(d, 0, n))
        return json_stringn((const char *)d, n);
    char *b = cf_base64_encode(d, n, NULL);
    json_t *o = json_pack("{s:s}", "base64", b ? b : "");
    free(b);
    return o;
}

/* bytes as UTF-8 text, each byte of an invalid or cut sequence replaced by
 * U+FFFD; NUL (which JSON consumers choke on) too.  NULL when out of memory. */
static char *utf8_lossy(const uint8_t *d, size_t n)
{
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t len = d[i] < 0x80 ? 1 : (d[i] & 0xE0) == 0xC0 ? 2 : (d[i] & 0xF0) == 0xE0 ? 3 : (d[i] & 0xF8) == 0xF0 ? 4 : 0;
        if (len && d[i] != 0 && i + len <= n && cf_utf8_valid(d + i, len)) {
            memcpy(o, d + i, len);
            o += len;
            i += len;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = '\0';
    return out;
}

/* The request a workspace tool's arguments describe (SPEC.md 3.5, JSON
 * form): the tool's name says the op, its arguments are the op's fields. */
static json_t *file_op_request(const char *tool, const json_t *args, const char *id)
{
    static const struct {
        const char *tool, *op;
    } ops[] = {{"list_files", "list"},       {"read_file", "read"},     {"write_file", "write"},
               {"delete_file", "delete"},    {"grep_files", "grep"},    {"str_replace", "str_replace"},
               {"insert_text", "insert"},    {"apply_patch", "apply_patch"}};
    const char *op = NULL;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        if (strcmp(ops[i].tool, tool) == 0)
            op = ops[i].op;
    json_t *o = json_pack("{s:s}", "op", op ? op : "");
    static const char *const same[] = {"path",    "pattern",     "content",           "old_str",
                                       "new_str", "insert_line", "expected_revision"};
    for (size_t i = 0; o && i < sizeof(same) / sizeof(same[0]); i++) {
        json_t *v = json_object_get(args, same[i]);
        if (v)
            json_object_set(o, same[i], v);
    }
    json_t *patch = json_object_get(args, "patch");
    if (o && patch)
        json_object_set(o, "content", patch);
    /* text_editor's view_range [first, last] (-1: to the end); checked by
     * tool_file_op. */
    json_t *range = json_object_get(args, "view_range");
    if (o && range) {
        json_object_set(o, "first_line", json_array_get(range, 0));
        json_int_t last = json_integer_value(json_array_get(range, 1));
        if (last != -1)
            json_object_set(o, "last_line", json_array_get(range, 1));
    }
    /* str_replace without new_str deletes old_str (text_editor's rule). */
    if (o && strcmp(tool, "str_replace") == 0 && !json_object_get(o, "new_str"))
        json_object_set_new(o, "new_str", json_string(""));
    json_t *r = json_pack("{s:i, s:s, s:O*, s:o*}", "v", 1, "id", id, "workspace", json_object_get(args, "workspace"),
                          "workspace_op", o);
    return r;
}

/* The fleet's answer as the tool's result. */
static json_t *file_op_tool_result(const char *tool, const char *ws_id, const char *path, const char *id,
                                   const cf_result *res)
{
    if (res->status != CF_STATUS_SUCCESS)
        return mcp_tool_error("workspace %s%s%s: %s: %s%s", ws_id, path ? ", " : "", path ? path : "",
                              cf_status_name(res->status), res->reason ? res->reason : "(no reason given)",
                              res->workspace_conflict ? " (read it again and retry with its revision)" : "");
    json_t *sc = json_pack("{s:s, s:s, s:I}", "id", id, "workspace", ws_id, "revision",
                           (json_int_t)res->workspace_revision);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!sc || !f) {
        json_decref(sc);
        if (f)
            fclose(f);
        free(text);
        return NULL;
    }
    if (strcmp(tool, "list_files") == 0) {
        json_t *files = json_array();
        fprintf(f, "workspace %s, revision %" PRId64 ", %zu file(s)\n", ws_id, res->workspace_revision, res->n_files);
        for (size_t i = 0; i < res->n_files; i++) {
            json_array_append_new(files, json_pack("{s:s, s:I}", "path", res->files[i].path, "size",
                                                   (json_int_t)res->files[i].size));
            fprintf(f, "%10" PRId64 "  %s\n", res->files[i].size, res->files[i].path);
        }
        json_object_set_new(sc, "files", files);
    } else if (strcmp(tool, "read_file") == 0 && res->n_files == 1) {
        const cf_out_file *of = &res->files[0];
        json_t *content = bytes_json_value(of->content.data ? of->content.data : (const uint8_t *)"",
                                           of->content.len);
        json_object_set_new(sc, "path", json_string(of->path));
        json_object_set_new(sc, "size", json_integer((json_int_t)of->size));
        json_object_set_new(sc, "truncated", json_boolean(of->truncated));
        if (json_is_string(content))
            fprintf(f, "%s%s", json_string_value(content),
                    of->truncated ? "\n[cut at the output cap: see structuredContent.size]" : "");
        else
            fprintf(f, "(binary, %" PRId64 " bytes: see structuredContent, base64)", of->size);
        json_object_set_new(sc, "content", content);
    } else if (strcmp(tool, "grep_files") == 0) {
        /* Text, whatever the files' bytes (a Latin-1 file, a character cut
         * at the cap): what is not UTF-8 becomes U+FFFD. */
        char *matches = utf8_lossy(res->stdout_data.data, res->stdout_data.len);
        fprintf(f, "%s", res->stdout_data.len ? (matches ? matches : "") : "no matching line\n");
        json_object_set_new(sc, "matches", json_string(matches ? matches : ""));
        free(matches);
        json_object_set_new(sc, "truncated", json_boolean(res->stdout_truncated));
    } else {
        json_t *changed = json_array();
        for (size_t i = 0; i < res->n_changed_paths; i++)
            json_array_append_new(changed, json_string(res->changed_paths[i]));
        json_object_set_new(sc, "changed_paths", changed);
        if (path)
            json_object_set_new(sc, "path", json_string(path));
        if (res->n_changed_paths) {
            fprintf(f, "workspace %s is now at revision %" PRId64 "; changed:", ws_id, res->workspace_revision);
            for (size_t i = 0; i < res->n_changed_paths; i++)
                fprintf(f, " %s", res->changed_paths[i]);
        } else {
            fprintf(f, "unchanged (it already held that): workspace %s at revision %" PRId64, ws_id,
                    res->workspace_revision);
        }
    }
    fclose(f);
    json_t *r = mcp_tool_result(text ? text : "", sc, false);
    free(text);
    return r;
}

/* A workspace tool: the op is a request to the fleet (SPEC.md 3.5), done
 * under the profile of this client's request topic, so the server holds
 * no Redis credentials and a tenant reaches only its own workspaces.  It
 * waits like execute_code (and holds its workspace's turn, so calls on one
 * workspace keep their order). */
static json_t *tool_file_op(mcp_call *c, const char *tool, const json_t *args, bool *no_answer)
{
    mcp *m = c->m;
    const char *ws_id = mcp_str_arg(args, "workspace"), *path = mcp_str_arg(args, "path");
    if (!ws_id || !ws_id[0])
        return mcp_tool_error("workspace: a workspace id");
    const json_t *range = json_object_get(args, "view_range");
    if (range && (!json_is_array(range) || json_array_size(range) != 2 ||
                  !json_is_integer(json_array_get(range, 0)) || !json_is_integer(json_array_get(range, 1))))
        return mcp_tool_error("view_range: [first line, last line] (1-based; -1 as the last: to the end)");
    char id[CF_ID_MAX + 1];
    cf_error err = {0};
    if (cf_dispatcher_new_id(id, sizeof(id), &err) < 0)
        return mcp_tool_error("cannot make a request id: %s", err.msg);
    json_t *rj = file_op_request(tool, args, id);
    if (!rj)
        return NULL;
    cf_request req = {0};
    int rc = cf_request_from_json(rj, &req, &err);
    json_decref(rj);
    if (rc < 0)
        return mcp_tool_error("%s", err.msg);
    pthread_mutex_lock(&m->mu);
    bool go = c->abort == CALL_GOES_ON;
    if (go)
        snprintf(c->request_id, sizeof(c->request_id), "%s", id);
    pthread_mutex_unlock(&m->mu);
    if (!go) {
        cf_request_clear(&req);
        *no_answer = true;
        return NULL;
    }
    pthread_mutex_lock(&m->send_mu);
    int sent = cf_dispatcher_submit(m->d, &req, &err) == 0 && cf_dispatcher_flush(m->d, 10 * 1000000LL, &err) == 0;
    pthread_mutex_unlock(&m->send_mu);
    cf_request_clear(&req);
    if (!sent)
        return mcp_tool_error("could not submit: %s", err.msg);
    cf_result res = {0};
    rc = wait_result(c, id, 0, MCP_DEFAULT_WAIT_MS * 1000LL, false, &res, &err);
    if (rc == 0 && call_abort(c) != CALL_GOES_ON)
        rc = 1;
    if (rc == 1) {
        cf_result_clear(&res);
        *no_answer = true;
        return NULL;
    }
    if (rc < 0)
        return mcp_tool_error("request %s: %s (the fleet may still do it: get_result with this id)", id, err.msg);
    json_t *out = file_op_tool_result(tool, ws_id, path, id, &res);
    cf_result_clear(&res);
    return out;
}

/* ---------------------------------------------------------------- calls */

/* One member of b answered (or dropped): the last sends the array. */
static void batch_release(mcp *m, mcp_batch *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&m->out_mu);
    bool last = --b->pending == 0;
    pthread_mutex_unlock(&m->out_mu);
    if (!last)
        return;
    if (json_array_size(b->out))
        send_msg(m, b->out); /* an array: never taken for a batch member */
    else
        json_decref(b->out);
    free(b);
}

static void call_free(mcp_call *c)
{
    json_decref(c->msg);
    json_decref(c->progress_token);
    json_decref(c->keepalive_token);
    free(c);
}

static void *call_main(void *arg);

/* The tool c calls. */
static const char *call_tool(const mcp_call *c)
{
    const char *name = json_string_value(json_object_get(json_object_get(c->msg, "params"), "name"));
    return name ? name : "";
}

/* Takes c (after prev, NULL: the first) out of the line (under mu). */
static void waiting_unlink_locked(mcp *m, mcp_call *c, mcp_call *prev)
{
    if (prev)
        prev->next = c->next;
    else
        m->waiting = c->next;
    if (m->waiting_tail == c)
        m->waiting_tail = prev;
    c->next = NULL;
    m->n_waiting--;
    m->waiting_bytes -= c->bytes;
}

/* Starts c on a thread of its own (under mu; room checked by the caller).
 * -1 when no thread could be made: c is then on no list. */
static int call_launch_locked(mcp *m, mcp_call *c)
{
    pthread_attr_t attr;
    pthread_t t;
    c->next = m->running;
    m->running = c;
    m->n_running++;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, call_main, c);
        pthread_attr_destroy(&attr);
    }
    if (rc == 0)
        return 0;
    m->running = c->next;
    m->n_running--;
    return -1;
}

/* A call that could not start: answered with the reason. */
static void call_refuse(mcp *m, mcp_call *c, const char *why)
{
    mcp_batch *saved = tl_batch;
    tl_batch = c->batch;
    send_error(m, c->id, -32603, "%s", why);
    tl_batch = saved;
    batch_release(m, c->batch);
    call_free(c);
}

static bool same_key(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Whether c must wait for a call before it: one running, or one ahead of
 * it in line, that names the same workspace or thread (under mu). */
static bool call_blocked_locked(const mcp *m, const mcp_call *c)
{
    const char *key = c->result_key[0] ? c->result_key : NULL;
    if (!c->workspace && !c->thread && !key)
        return false;
    for (const mcp_call *r = m->running; r; r = r->next)
        if (same_key(r->workspace, c->workspace) || same_key(r->thread, c->thread) ||
            (key && strcmp(r->result_key, key) == 0))
            return true;
    for (const mcp_call *w = m->waiting; w && w != c; w = w->next)
        if (same_key(w->workspace, c->workspace) || same_key(w->thread, c->thread) ||
            (key && strcmp(w->result_key, key) == 0))
            return true;
    return false;
}

/* Starts what waits for a turn while there is room, in order, passing
 * over a call whose workspace or thread is busy (under mu).  What could
 * not start is answered with the reason there and then (under mu, as
 * on_chunk sends: so no thread touches m once calls_drain saw none left). */
static void call_start_waiting_locked(mcp *m)
{
    mcp_call *c = m->waiting, *prev = NULL;
    while (c && m->n_running < m->max_calls && !cf_cli_stop && !is_gone(m)) {
        if (call_blocked_locked(m, c)) {
            prev = c;
            c = c->next;
            continue;
        }
        mcp_call *next = c->next;
        waiting_unlink_locked(m, c, prev);
        if (call_launch_locked(m, c) < 0)
            call_refuse(m, c, "cannot start a thread for the call");
        c = next;
    }
}

/* The call msg (a tools/call of a tool that waits) on a thread of its
 * own, or in line for one past max_calls. */
static void call_start(mcp *m, json_t *msg)
{
    mcp_call *c = calloc(1, sizeof(*c));
    if (!c) {
        send_error(m, json_object_get(msg, "id"), -32603, "out of memory");
        return;
    }
    c->m = m;
    c->msg = json_incref(msg);
    c->id = json_object_get(msg, "id");
    c->batch = tl_batch;
    json_t *params = json_object_get(msg, "params"), *args = json_object_get(params, "arguments");
    const char *tool = json_string_value(json_object_get(params, "name"));
    if (strcmp(tool, "execute_code") == 0 || mcp_tool_is_file_op(tool)) {
        c->workspace = json_string_value(json_object_get(args, "workspace"));
        c->thread = json_string_value(json_object_get(args, "thread"));
    } else {
        const char *rid = json_string_value(json_object_get(args, "id"));
        snprintf(c->result_key, sizeof(c->result_key), "%s", rid ? rid : MCP_NEWEST_KEY);
    }
    if (c->batch) {
        pthread_mutex_lock(&m->out_mu);
        c->batch->pending++;
        pthread_mutex_unlock(&m->out_mu);
    }
    /* A quiet wait for a turn gets keep-alives too (keep_alive). */
    json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (json_is_string(token) || json_is_integer(token))
        c->keepalive_token = json_incref(token);
    c->last_progress_us = cf_mono_us();
    c->bytes = json_dumpb(msg, NULL, 0, JSON_COMPACT);
    pthread_mutex_lock(&m->mu);
    /* Two calls in flight under one id: a response or cancel could not
     * tell them apart. */
    for (int list = 0; list < 2; list++)
        for (mcp_call *o = list ? m->waiting : m->running; o; o = o->next)
            if (json_equal(o->id, c->id) && o->abort == CALL_GOES_ON && !o->finishing) {
                mcp_batch *saved = tl_batch;
                tl_batch = c->batch;
                send_error(m, c->id, RPC_INVALID, "a call with this id is still in flight: ids must be unique");
                tl_batch = saved;
                batch_release(m, c->batch);
                call_free(c);
                pthread_mutex_unlock(&m->mu);
                return;
            }
    if (m->waiting_tail)
        m->waiting_tail->next = c;
    else
        m->waiting = c;
    m->waiting_tail = c;
    m->n_waiting++;
    m->waiting_bytes += c->bytes;
    call_start_waiting_locked(m);
    /* Each waits with its message: bounded by count and bytes, and said.
     * (Only one that has to wait: still in line.  Found by address: one
     * that started may be gone.) */
    mcp_call *prev = NULL, *w = m->waiting;
    while (w && w != c) {
        prev = w;
        w = w->next;
    }
    if (w && (m->n_waiting > MCP_MAX_WAITING || m->waiting_bytes > MCP_WAITING_BYTES)) {
        char why[200];
        snprintf(why, sizeof(why), "too many calls waiting for a turn (%d, %zu bytes; at most %d, %u bytes): wait "
                 "for answers before sending more", m->n_waiting - 1, m->waiting_bytes - c->bytes, MCP_MAX_WAITING,
                 MCP_WAITING_BYTES);
        waiting_unlink_locked(m, c, prev);
        call_refuse(m, c, why);
    }
    pthread_mutex_unlock(&m->mu);
}

/* c answered: off the running list, and the next in line starts. */
static void call_done(mcp_call *c)
{
    mcp *m = c->m;
    batch_release(m, c->batch);
    char evicted[CF_ID_MAX + 1];
    pthread_mutex_lock(&m->mu);
    c->finishing = true; /* from here call_cancel leaves it alone */
    snprintf(evicted, sizeof(evicted), "%s", c->evict_id);
    c->evict_id[0] = '\0';
    pthread_mutex_unlock(&m->mu);
    if (evicted[0]) /* its timeout came after its wait */
        cancel_abandoned(m, evicted, "left running by a client timeout, and more than 8 newer ones since");
    pthread_mutex_lock(&m->mu);
    for (mcp_call **pp = &m->running; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (!c->silent)
        m->n_running--;
    call_start_waiting_locked(m);
    pthread_cond_broadcast(&m->calls_cv);
    pthread_mutex_unlock(&m->mu);
    call_free(c); /* c only: m may be gone once mu is released */
}

static void *call_main(void *arg)
{
    mcp_call *c = arg;
    mcp *m = c->m;
    tl_batch = c->batch;
    json_t *params = json_object_get(c->msg, "params");
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments"), *empty = NULL;
    if (!args)
        args = empty = json_object();
    json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
    bool no_answer = false;
    json_t *r = strcmp(name, "execute_code") == 0 ? tool_execute(c, args, token, &no_answer)
                : mcp_tool_is_file_op(name)       ? tool_file_op(c, name, args, &no_answer)
                                                  : tool_get_result(c, args, token, &no_answer);
    json_decref(empty);
    if (no_answer) /* the client cancelled the call: no response is due */
        json_decref(r);
    else if (r)
        send_result(m, c->id, r);
    else
        send_error(m, c->id, -32603, "out of memory");
    tl_batch = NULL;
    call_done(c);
    return NULL;
}

/* A notifications/cancelled from the client: a running call is told (it
 * cancels its execution, or leaves it running when the reason is the
 * client's own timeout, and answers nothing); one waiting for its turn
 * never starts. */
static void call_cancel(mcp *m, const json_t *request_id, const char *reason)
{
    if (!request_id)
        return;
    mcp_call *dropped = NULL;
    char evicted[CF_ID_MAX + 1] = "";
    pthread_mutex_lock(&m->mu);
    for (mcp_call *c = m->running; c; c = c->next)
        if (json_equal(c->id, (json_t *)request_id) && c->abort == CALL_GOES_ON && !c->finishing) {
            c->abort = client_timeout_reason(reason) ? CALL_TIMED_OUT : CALL_CANCELLED;
            /* Listed now, not when the call notices: a get_result
             * without an id right after the cancel finds it. */
            if (c->abort == CALL_TIMED_OUT && c->request_id[0]) {
                remember_abandoned_locked(m, c->request_id, evicted);
                /* Its cancel is sent from the call's thread: this one
                 * reads stdin and must not wait on the broker. */
                snprintf(c->evict_id, sizeof(c->evict_id), "%s", evicted);
            }
            pthread_mutex_unlock(&m->mu);
            return;
        }
    for (mcp_call *w = m->waiting, *prev = NULL; w; prev = w, w = w->next) {
        if (!json_equal(w->id, (json_t *)request_id) || w->abort != CALL_GOES_ON)
            continue;
        /* The client's own timeout is not a user's cancel: an
         * execute_code still runs when its turn comes (listed for
         * get_result then); anything else leaves the line. */
        if (client_timeout_reason(reason) && strcmp(call_tool(w), "execute_code") == 0) {
            w->abort = CALL_TIMED_OUT;
            break;
        }
        dropped = w;
        waiting_unlink_locked(m, w, prev);
        call_start_waiting_locked(m); /* what waited behind it only may start */
        break;
    }
    pthread_mutex_unlock(&m->mu);
    if (dropped) {
        batch_release(m, dropped->batch);
        call_free(dropped);
    }
}

/* The end of input or a stop signal: the calls still running finish (or,
 * on a stop, cancel theirs); on a stop those waiting for a turn never
 * start. */
static void calls_drain(mcp *m)
{
    pthread_mutex_lock(&m->mu);
    while (m->n_running > 0 || m->waiting) {
        if ((cf_cli_stop || is_gone(m)) && m->waiting) {
            mcp_call *c = m->waiting;
            waiting_unlink_locked(m, c, NULL);
            pthread_mutex_unlock(&m->mu);
            batch_release(m, c->batch);
            call_free(c);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        struct timespec ts = cf_realtime_after_us(100 * 1000);
        pthread_cond_timedwait(&m->calls_cv, &m->mu, &ts);
    }
    pthread_mutex_unlock(&m->mu);
}

static void handle_tools_call(mcp *m, json_t *msg, json_t *id, json_t *params)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    if (!name) {
        send_error(m, id, RPC_BAD_PARAMS, "tools/call: params.name is required");
        return;
    }
    if (!mcp_tool_known(name)) {
        send_error(m, id, RPC_BAD_PARAMS, "unknown tool '%.80s' (tools/list names them)", name);
        return;
    }
    json_t *empty = NULL;
    if (!args)
        args = empty = json_object();
    json_t *r = NULL;
    char bad[128];
    if (!json_is_object(args))
        r = mcp_tool_error("arguments: expected an object");
    else if (mcp_unknown_argument(m->tools, name, args, bad, sizeof(bad)))
        r = mcp_tool_error("unknown argument '%.80s' for %s (see its inputSchema)", bad, name);
    else if (strcmp(name, "execute_code") == 0 || strcmp(name, "get_result") == 0 || mcp_tool_is_file_op(name)) {
        /* The tools that wait: on a thread each, so calls overlap. */
        json_decref(empty);
        call_start(m, msg);
        return;
    } else
        r = tool_cancel(m, args);
    json_decref(empty);
    if (r)
        send_result(m, id, r);
    else
        send_error(m, id, -32603, "out of memory");
}

static void handle(mcp *m, json_t *msg)
{
    if (!json_is_object(msg)) {
        send_error(m, NULL, RPC_INVALID, "expected one JSON-RPC 2.0 message (an object) per line");
        return;
    }
    json_t *id = json_object_get(msg, "id");
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *params = json_object_get(msg, "params");
    bool id_ok = !id || json_is_string(id) || json_is_integer(id);
    if (!method) {
        /* A response (to a request we never make) or garbage. */
        if (!json_object_get(msg, "result") && !json_object_get(msg, "error"))
            send_error(m, id_ok ? id : NULL, RPC_INVALID, "not a JSON-RPC 2.0 request: no method");
        return;
    }
    if (!json_is_string(json_object_get(msg, "jsonrpc")) || strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") != 0 ||
        !id_ok || (params && !json_is_object(params))) {
        if (id)
            send_error(m, id_ok ? id : NULL, RPC_INVALID, "invalid JSON-RPC 2.0 request");
        return;
    }
    if (!id) { /* notifications: initialized, cancelled, ... */
        if (strcmp(method, "notifications/cancelled") == 0)
            call_cancel(m, json_object_get(params, "requestId"),
                        json_string_value(json_object_get(params, "reason")));
        return;
    }
    if (strcmp(method, "initialize") == 0) {
        const char *want = json_string_value(json_object_get(params, "protocolVersion"));
        const char *version = protocol_versions[0];
        for (size_t i = 0; want && i < sizeof(protocol_versions) / sizeof(protocol_versions[0]); i++)
            if (strcmp(want, protocol_versions[i]) == 0)
                version = protocol_versions[i];
        snprintf(m->version, sizeof(m->version), "%s", version);
        char instructions[600];
        snprintf(instructions, sizeof(instructions),
                 "codefleet runs code in an isolated worker fleet. execute_code runs a program and returns its "
                 "status and output (request topic %s). A program that fails is a normal result: read status, "
                 "exit_code, stderr. Long runs: execute_code with wait=false, then get_result or cancel.",
                 m->g->request_topic ? m->g->request_topic : CF_DEFAULT_REQUEST_TOPIC);
        send_result(m, id,
                    json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", version, "capabilities",
                              "tools", "listChanged", 0, "serverInfo", "name", "codefleet", "title", "codefleet",
                              "version", CF_VERSION, "instructions", instructions));
    } else if (strcmp(method, "ping") == 0) {
        send_result(m, id, json_object());
    } else if (strcmp(method, "tools/list") == 0) {
        send_result(m, id, json_incref(m->tools));
    } else if (strcmp(method, "tools/call") == 0) {
        handle_tools_call(m, msg, id, params ? params : json_null());
    } else {
        send_error(m, id, RPC_NO_METHOD, "method '%.80s' not supported (this server offers tools)", method);
    }
}

/* A JSON-RPC batch (MCP 2025-03-26): its members served in order, their
 * responses sent as one array at its end (none for notifications only). */
static void handle_batch(mcp *m, json_t *batch)
{
    if (strcmp(m->version, MCP_BATCH_VERSION) != 0) {
        send_error(m, NULL, RPC_INVALID, "JSON-RPC batches are part of MCP protocol version %s only (this session: %s)",
                   MCP_BATCH_VERSION, m->version[0] ? m->version : "not initialized");
        return;
    }
    if (json_array_size(batch) == 0) {
        send_error(m, NULL, RPC_INVALID, "an empty batch");
        return;
    }
    /* Every member's answer is kept until the batch ends, and each is
     * matched against the batch's ids: bounded. */
    if (json_array_size(batch) > MCP_BATCH_MAX) {
        send_error(m, NULL, RPC_INVALID, "a batch of %zu messages: at most %d", json_array_size(batch), MCP_BATCH_MAX);
        return;
    }
    mcp_batch *b = calloc(1, sizeof(*b));
    json_t *out = b ? json_array() : NULL;
    if (!out) {
        free(b);
        send_error(m, NULL, -32603, "out of memory");
        return;
    }
    b->out = out;
    b->pending = 1; /* held while its members are read */
    tl_batch = b;
    size_t i;
    json_t *e;
    json_array_foreach(batch, i, e)
    {
        json_t *id = json_is_object(e) ? json_object_get(e, "id") : NULL;
        const char *method = json_is_object(e) ? json_string_value(json_object_get(e, "method")) : NULL;
        if (!json_is_object(e)) {
            send_error(m, NULL, RPC_INVALID, "batch member %zu: not a JSON-RPC 2.0 message (an object)", i);
            continue;
        }
        if (method && strcmp(method, "initialize") == 0) {
            if (id)
                send_error(m, id, RPC_INVALID, "initialize cannot be part of a batch");
            continue;
        }
        handle(m, e);
    }
    tl_batch = NULL;
    batch_release(m, b);
}

/* One line read from the client: parsed, then served (a batch, or one
 * message), or answered with the parse error.  Takes q. */
static void serve_line(mcp *m, queued *q)
{
    json_error_t jerr;
    bool too_long = q->too_long;
    json_t *msg = too_long ? NULL : json_loadb(q->text, q->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg && !too_long) {
        /* Valid JSON this server refuses (a NUL in a string, a key
         * given twice): answered with the call's id, so the client
         * can tell which call failed instead of waiting for it. */
        json_t *loose = json_loadb(q->text, q->len, JSON_ALLOW_NUL, NULL);
        json_t *lid = json_is_object(loose) ? json_object_get(loose, "id") : NULL;
        if (lid && (json_is_string(lid) || json_is_integer(lid))) {
            if (json_error_code(&jerr) == json_error_null_character)
                send_error(m, lid, RPC_INVALID,
                           "a string holds a NUL character (\\u0000, column %d): send bytes that are not "
                           "text as {\"base64\": ...}", jerr.column);
            else
                send_error(m, lid, RPC_INVALID, "refused (column %d): %.100s: a key may appear once",
                           jerr.column, jerr.text);
            json_decref(loose);
            free(q);
            return;
        }
        json_decref(loose);
    }
    free(q);
    if (!msg) {
        if (too_long)
            send_error(m, NULL, RPC_PARSE, "message too long (at most %u MiB per line)",
                       MCP_LINE_MAX / (1024 * 1024));
        else
            send_error(m, NULL, RPC_PARSE, "not JSON: %.100s (column %d)", jerr.text, jerr.column);
        return;
    }
    if (json_is_array(msg))
        handle_batch(m, msg);
    else
        handle(m, msg);
    json_decref(msg);
}

/* The session ended (end of input or a stop signal): the keep-alive
 * thread stops, and what a client's timeout left running and nobody
 * picked up is cancelled, since nobody can now. */
static void end_session(mcp *m, bool keeper)
{
    for (int i = 0; i < m->n_kept; i++)
        cf_result_clear(&m->kept[i].res);
    m->n_kept = 0;
    if (keeper) {
        pthread_mutex_lock(&m->mu);
        m->keeper_stop = true;
        pthread_cond_broadcast(&m->keeper_cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->keeper, NULL);
    }
    for (;;) {
        char id[CF_ID_MAX + 1];
        newest_abandoned(m, id, sizeof(id));
        if (!id[0])
            break;
        forget_abandoned(m, id);
        cancel_abandoned(m, id, "the MCP session ended before its result was picked up");
    }
}

/* ---------------------------------------------------------------- command */

static const char mcp_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] mcp [--keep-alive DURATION] [--max-calls N]\n"
    "\n"
    "A Model Context Protocol server on stdin/stdout (JSON-RPC 2.0, one message\n"
    "per line; logs on stderr).  Tools: execute_code, get_result, cancel,\n"
    "and the workspace tools list_files, read_file, write_file, delete_file,\n"
    "grep_files, str_replace, insert_text, apply_patch (done by the fleet, no\n"
    "Redis needed).\n"
    "Requests go to\n"
    "--request-topic, results are read from --result-topic (and output chunks\n"
    "from <result topic>.output for progress notifications), with the\n"
    "credentials of --config.  Example client configuration:\n"
    "  {\"mcpServers\": {\"codefleet\": {\"command\": \"codefleet\",\n"
    "    \"args\": [\"--config\", \"/path/to/client.conf\", \"mcp\"]}}}\n"
    "\n"
    "  --keep-alive DURATION  a call with a progress token whose program prints\n"
    "                         nothing gets an empty progress notification this\n"
    "                         often (default 10s; 0: never), so a client that\n"
    "                         restarts its timeout on progress keeps waiting\n"
    "  --max-calls N          tool calls that wait (execute_code, get_result)\n"
    "                         running at once, each on a thread of its own\n"
    "                         (default 16, at most 256); more wait for a turn\n";

int cf_cli_cmd_mcp(const cf_cli_globals *g, int argc, char **argv)
{
    int64_t keepalive_us = 10 * 1000000LL;
    int max_calls = MCP_MAX_CALLS_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        const char *n = NULL;
        if (strcmp(argv[i], "--max-calls") == 0 && i + 1 < argc)
            n = argv[++i];
        else if (strncmp(argv[i], "--max-calls=", 12) == 0)
            n = argv[i] + 12;
        if (n) {
            char *end = NULL;
            errno = 0;
            long v_calls = strtol(n, &end, 10);
            if (errno || end == n || *end || v_calls < 1 || v_calls > MCP_MAX_CALLS_LIMIT) {
                fprintf(stderr, "codefleet mcp: --max-calls: a number from 1 to %d\n", MCP_MAX_CALLS_LIMIT);
                fputs(mcp_help, stderr);
                return CF_EXIT_USAGE;
            }
            max_calls = (int)v_calls;
            continue;
        }
        if (strcmp(argv[i], "--keep-alive") == 0 && i + 1 < argc)
            v = argv[++i];
        else if (strncmp(argv[i], "--keep-alive=", 13) == 0)
            v = argv[i] + 13;
        cf_error perr = {0};
        if (v && strcmp(v, "0") == 0) {
            keepalive_us = 0;
            continue;
        }
        if (v && cf_parse_duration_us(v, &keepalive_us, "--keep-alive", &perr) == 0 && keepalive_us >= 100000)
            continue;
        bool help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
        if (!help)
            fprintf(stderr, "codefleet mcp: %s\n", v ? "--keep-alive: a duration of at least 100ms, or 0"
                                                     : "unknown argument");
        fputs(mcp_help, help ? stdout : stderr);
        return help ? CF_EXIT_OK : CF_EXIT_USAGE;
    }
    /* On the heap: after a stop signal the reader thread may still sit in
     * fgets, and is left to the process's exit rather than joined. */
    mcp *m = calloc(1, sizeof(*m));
    if (!m) {
        fprintf(stderr, "codefleet mcp: out of memory\n");
        return CF_EXIT_TRANSPORT;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is an error to see (send_msg), not death */
    m->g = g;
    m->keepalive_us = keepalive_us;
    m->max_calls = max_calls;
    m->tools = mcp_tools_list();
    if (!m->tools) {
        free(m);
        fprintf(stderr, "codefleet mcp: out of memory\n");
        return CF_EXIT_TRANSPORT;
    }
    pthread_mutex_init(&m->out_mu, NULL);
    pthread_mutex_init(&m->send_mu, NULL);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    pthread_cond_init(&m->progress_cv, NULL);
    pthread_cond_init(&m->calls_cv, NULL);
    pthread_cond_init(&m->keeper_cv, NULL);
    cf_dispatcher_config cfg = {
        .brokers = g->brokers,
        .request_topic = g->request_topic,
        .result_topic = g->result_topic,
        .client_id = "codefleet-mcp",
        .kafka = &g->kafka,
        .collect_results = true,
        .on_chunk = on_chunk,
        .on_chunk_ctx = m,
    };
    cf_error err = {0};
    m->streaming = true;
    if (cf_dispatcher_new(&cfg, &m->d, &err) < 0) {
        /* Without an output topic the tools work, without progress. */
        cf_log_warn(LOG_SUB, "no output chunks (%s): execute_code sends no progress", err.msg);
        cf_error_clear(&err);
        cfg.on_chunk = NULL;
        m->streaming = false;
        if (cf_dispatcher_new(&cfg, &m->d, &err) < 0) {
            fprintf(stderr, "codefleet mcp: %s\n", err.msg);
            json_decref(m->tools);
            free(m);
            return cf_cli_exit_for_error(&err);
        }
    }
    int rc = CF_EXIT_OK;
    bool keeper = false;
    if (pthread_create(&m->reader, NULL, reader_main, m) != 0) {
        fprintf(stderr, "codefleet mcp: cannot start the input reader\n");
        rc = CF_EXIT_TRANSPORT;
    } else {
        keeper = m->keepalive_us > 0 && pthread_create(&m->keeper, NULL, keeper_main, m) == 0;
        cf_log_info(LOG_SUB, "serving MCP on stdio (requests to %s)",
                    g->request_topic ? g->request_topic : CF_DEFAULT_REQUEST_TOPIC);
        for (;;) {
            bool eof = false;
            queued *q = next_message(m, -1, &eof);
            if (!q)
                break;
            serve_line(m, q);
        }
        calls_drain(m);
        end_session(m, keeper);
        pthread_mutex_lock(&m->mu);
        bool reader_done = m->eof;
        pthread_mutex_unlock(&m->mu);
        if (!reader_done) { /* a stop signal: the reader may block in fgets */
            pthread_detach(m->reader);
            cf_dispatcher_destroy(m->d);
            return rc; /* m stays for the reader until the process exits */
        }
        pthread_join(m->reader, NULL);
    }
    cf_dispatcher_destroy(m->d);
    json_decref(m->tools);
    for (queued *q = m->head; q;) {
        queued *next = q->next;
        free(q);
        q = next;
    }
    pthread_cond_destroy(&m->progress_cv);
    pthread_cond_destroy(&m->calls_cv);
    pthread_cond_destroy(&m->keeper_cv);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->out_mu);
    pthread_mutex_destroy(&m->send_mu);
    free(m);
    return rc;
}
