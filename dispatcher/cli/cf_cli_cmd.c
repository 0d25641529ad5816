/* cf_cli_cmd: the `codefleet` commands (the parts that talk to Kafka). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "cf_cli.h"
#include "cf_control.h"
#include "cf_kafka.h"
#include "cf_dispatcher.h"
#include "cf_log.h"
#include "cf_schema_json.h"
#include "cf_util.h"

static const cf_cli_globals *current_globals;

/* One line a person can act on for a transport failure: what failed and
 * what to check.  Empty when there is nothing better than the message. */
void cf_cli_explain(const cf_error *err, char *hint, size_t size)
{
    hint[0] = '\0';
    const cf_cli_globals *g = current_globals;
    char last[300];
    cf_kafka_last_problem(last, sizeof(last));
    char *after = strstr(last, " (after ");
    if (after)
        *after = '\0'; /* librdkafka's timing detail */
    const char *brokers = g && g->brokers ? g->brokers : "?";
    if (err->code == CF_E_KAFKA || (err->code == CF_E_TIMEOUT && last[0])) {
        bool refused = strstr(last, "Authentication failed") || strstr(err->msg, "Authentication");
        /* An ACL refusal first: the connection authenticated, and a SASL
         * line librdkafka logged earlier does not make it a credentials
         * problem. */
        if (!refused && (strstr(err->msg, "authorization") || strstr(err->msg, "Authorization")))
            snprintf(hint, size, "%.300s: this principal is not allowed to use that topic: check its ACLs "
                                 "(deploy/README.md, \"Authentication\")", err->msg);
        else if (!refused && cf_kafka_saw_protocol_hint())
            snprintf(hint, size,
                     "the Kafka broker at %s expects authentication (SASL) or TLS that this client did not offer: "
                     "pass your principal's settings with --config (CODEFLEET_CONFIG; for the local stack: "
                     "eval \"$(deploy/stack.sh env)\")",
                     brokers);
        else if (refused || strstr(last, "SASL"))
            snprintf(hint, size,
                     "the Kafka broker at %s refused the credentials: check the kafka.sasl.* settings of --config "
                     "(CODEFLEET_CONFIG)",
                     brokers);
        else if (strstr(err->msg, "authorization") || strstr(err->msg, "Authorization"))
            snprintf(hint, size, "%.300s: this principal is not allowed to use that topic: check its ACLs "
                                 "(deploy/README.md, \"Authentication\")", err->msg);
        else if (strstr(err->msg, "nknown topic") || strstr(err->msg, "does not exist"))
            snprintf(hint, size, "%.300s: create it with 'codefleet topics create NAME' or check --request-topic / "
                                 "--result-topic", err->msg);
        else if (strstr(last, "Failed to resolve"))
            snprintf(hint, size,
                     "cannot reach the Kafka broker at %s: its name does not resolve: check --brokers "
                     "(CODEFLEET_BROKERS)",
                     brokers);
        else if (strstr(last, "Connect to") || strstr(last, "resolve") || strstr(err->msg, "transport failure") ||
                 strstr(err->msg, "timed out"))
            snprintf(hint, size,
                     "cannot reach the Kafka broker at %s%s%.120s%s: is it running? check --brokers "
                     "(CODEFLEET_BROKERS)",
                     brokers, last[0] ? " (" : "", last[0] ? (strstr(last, "failed: ") ? strstr(last, "failed: ") + 8 : last) : "",
                     last[0] ? ")" : "");
    } else if (err->code == CF_E_TIMEOUT && strstr(err->msg, "no result for")) {
        /* The broker took the request; nobody answered it in time. */
        snprintf(hint, size,
                 "%.300s: it may be queued or still running, its id may be unknown here (another result "
                 "topic: --result-topic), or no worker reads its request topic ('codefleet doctor' checks); "
                 "wait longer with --timeout",
                 err->msg);
    } else if (err->code == CF_E_REDIS) {
        const char *redis = g && g->redis ? g->redis : "?";
        if (strstr(err->msg, "WRONGPASS") || strstr(err->msg, "NOAUTH"))
            snprintf(hint, size, "Redis at %s refused the credentials: check redis-user / redis-password in "
                                 "--config (CODEFLEET_CONFIG)", redis);
        else if (strstr(err->msg, "NOPERM"))
            snprintf(hint, size, "Redis at %s: this Redis user may not run that command or touch that key "
                                 "(NOPERM): a tenant's user reaches only its own workspaces and threads, the ids "
                                 "that start with its state-prefix", redis);
        else if (strstr(err->msg, "refused") || strstr(err->msg, "connect") || strstr(err->msg, "timed out"))
            snprintf(hint, size, "cannot reach Redis at %s: is it running? check --redis (CODEFLEET_REDIS)", redis);
    }
}

static int fail(const cf_error *err, const char *what)
{
    return cf_cli_report_error(NULL, what, err, cf_cli_exit_for_error(err));
}

static int usage_error(const char *cmd, const char *msg)
{
    return cf_cli_report_usage(cmd, cmd, msg);
}

/* getopt_long stopped at an option it does not know, or one missing its value. */
static int bad_option(const char *cmd, int argc, char **argv)
{
    char msg[300];
    return usage_error(cmd, cf_cli_option_error(cmd, argc, argv, msg, sizeof(msg)));
}

/* submit --follow: the program's output as its chunks arrive. */
typedef struct follow_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const char *id;
    bool json;
    bool tty[2];         /* stdout / stderr are terminals: control bytes are shown as '?' */
    char run[CF_CHUNK_RUN_MAX + 1]; /* the run followed (the first one seen) */
    int64_t seen;        /* chunks of that run */
    size_t printed[2];   /* bytes of each stream written so far */
    bool replay;         /* follow: chunks replayed from --since, not read live from the submit on */
    bool started[2];     /* a chunk of each stream seen (replay: one starting past 0 began before --since) */
    uint8_t carry[2][4]; /* a UTF-8 sequence cut at a chunk's end (terminals) */
    size_t ncarry[2];
} follow_state;

/* Writes program output to the terminal or pipe.  Output is hostile: a
 * terminal gets it through cf_sanitize_text (no escape sequences, no C1
 * controls or bidi overrides), with a UTF-8 sequence cut at a chunk's end
 * kept for the next chunk.  A pipe gets the bytes. */
static void write_output(follow_state *fs, int k, const uint8_t *p, size_t n, bool last)
{
    FILE *f = k ? stderr : stdout;
    /* Nothing to write (an empty stream's data is NULL: fwrite and memcpy
     * may not take that, even for no bytes). */
    if (!n && (!last || !fs->ncarry[k]))
        return;
    if (!fs->tty[k]) {
        fwrite(p, 1, n, f);
        fflush(f);
        return;
    }
    size_t total = fs->ncarry[k] + n;
    uint8_t *joined = malloc(total + 1);
    char *clean = malloc(total + 1);
    if (!joined || !clean) {
        free(joined);
        free(clean);
        return;
    }
    memcpy(joined, fs->carry[k], fs->ncarry[k]);
    if (n)
        memcpy(joined + fs->ncarry[k], p, n);
    size_t keep = last ? 0 : cf_utf8_incomplete_tail(joined, total); /* waits for its rest */
    fs->ncarry[k] = keep;
    memcpy(fs->carry[k], joined + total - keep, keep);
    size_t m = cf_sanitize_text((const char *)joined, total - keep, true, clean, total + 1);
    fwrite(clean, 1, m, f);
    fflush(f);
    free(joined);
    free(clean);
}

static void follow_chunk(void *ctx, const cf_chunk *c)
{
    follow_state *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    if (strcmp(c->id, fs->id) != 0) {
        pthread_mutex_unlock(&fs->mu);
        return;
    }
    if (!fs->run[0])
        snprintf(fs->run, sizeof(fs->run), "%s", c->run);
    if (strcmp(fs->run, c->run) != 0) { /* another execution of the same id (a redelivery) */
        pthread_mutex_unlock(&fs->mu);
        return;
    }
    fs->seen++;
    int k = c->stream == CF_CHUNK_STDERR ? 1 : 0;
    if (fs->json) {
        json_t *j = cf_chunk_to_json(c);
        json_t *o = j ? json_pack("{s:o}", "chunk", j) : NULL;
        char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (txt) {
            printf("%s\n", txt);
            fflush(stdout);
        }
        free(txt);
        json_decref(o);
    } else {
        if (fs->replay && !fs->started[k] && c->offset > 0) {
            /* Replayed from --since and the run began earlier: say what
             * is missing rather than show nothing until the result (live,
             * as submit --follow, the gap is filled from the result). */
            fprintf(stderr, "codefleet: the first %" PRId64 " bytes of %s are not shown (published before --since, "
                    "or lost)\n", c->offset, k ? "stderr" : "stdout");
            fs->printed[k] = (size_t)c->offset;
        }
        fs->started[k] = true;
    }
    if (!fs->json && (size_t)c->offset <= fs->printed[k] && (size_t)c->offset + c->data.len > fs->printed[k]) {
        /* Contiguous only: a gap (a chunk lost) is filled from the result. */
        size_t skip = fs->printed[k] - (size_t)c->offset;
        write_output(fs, k, c->data.data + skip, c->data.len - skip, false);
        fs->printed[k] = (size_t)c->offset + c->data.len;
    }
    pthread_cond_broadcast(&fs->cv);
    pthread_mutex_unlock(&fs->mu);
}

/* After the result: waits (up to 2 s) for the chunks it counts, then
 * writes what never came as a chunk from the result itself.  When the
 * chunks shown were of another run than the one the result reports (a
 * redelivery ran it again), or the result has no run (a worker that did
 * not stream), the result's whole output is written after a note. */
static void follow_finish(follow_state *fs, const cf_result *res)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    pthread_mutex_lock(&fs->mu);
    bool same_run = res->meta.run && (!fs->run[0] || strcmp(fs->run, res->meta.run) == 0);
    while (same_run && fs->run[0] && fs->seen < res->chunks)
        if (pthread_cond_timedwait(&fs->cv, &fs->mu, &until) != 0)
            break;
    if (!fs->json) {
        if (!same_run && (fs->printed[0] || fs->printed[1])) {
            fprintf(stderr, "codefleet: the output above is of another run of this request (%s); the result's "
                            "output (run %s) follows\n", fs->run, res->meta.run ? res->meta.run : "not streamed");
            fs->printed[0] = fs->printed[1] = 0;
        }
        const cf_bytes *b[2] = {&res->stdout_data, &res->stderr_data};
        for (int k = 0; k < 2; k++) {
            size_t from = fs->printed[k] < b[k]->len ? fs->printed[k] : b[k]->len;
            write_output(fs, k, b[k]->data ? b[k]->data + from : NULL, b[k]->len - from, true);
            fs->printed[k] = b[k]->len > fs->printed[k] ? b[k]->len : fs->printed[k];
        }
    }
    fs->id = ""; /* no more output after the result */
    pthread_mutex_unlock(&fs->mu);
}

/* A follow that ends without a result: no chunk after its last word. */
static void follow_stop(follow_state *fs)
{
    pthread_mutex_lock(&fs->mu);
    fs->id = "";
    pthread_mutex_unlock(&fs->mu);
}

/* follow (may be NULL): read output chunks into it (submit --follow). */
static int open_dispatcher_to(const cf_cli_globals *g, bool collect, const char *cancel_topic, follow_state *follow,
                              cf_dispatcher **d, cf_error *err)
{
    cf_dispatcher_config cfg = {
        .brokers = g->brokers,
        .request_topic = g->request_topic,
        .result_topic = g->result_topic,
        .client_id = "codefleet-cli",
        .kafka = &g->kafka,
        .collect_results = collect,
        .cancel_topic = cancel_topic,
        .on_chunk = follow ? follow_chunk : NULL,
        .on_chunk_ctx = follow,
    };
    return cf_dispatcher_new(&cfg, d, err);
}

static int open_dispatcher(const cf_cli_globals *g, bool collect, cf_dispatcher **d, cf_error *err)
{
    return open_dispatcher_to(g, collect, NULL, NULL, d, err);
}

int cf_cli_open_dispatcher(const cf_cli_globals *g, bool collect, cf_dispatcher **d, cf_error *err)
{
    return open_dispatcher(g, collect, d, err);
}

/* One-line JSON object {key: value[, "status": status]} (escaping done by jansson). */
static void print_json_kv(const char *key, const char *value, const char *status)
{
    json_t *o = status ? json_pack("{s:s, s:s}", key, value, "status", status) : json_pack("{s:s}", key, value);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(o);
}

/* Prints a result as the globals ask and returns its exit code. */
static int emit_result(const cf_cli_globals *g, const cf_result *res)
{
    cf_error err = {0};
    if (g->json) {
        if (cf_cli_print_result_json(stdout, res, &err) < 0)
            return fail(&err, "output");
    } else {
        cf_cli_print_result(stdout, res);
    }
    fflush(stdout);
    return cf_cli_exit_for_status(res->status);
}

/* After output followed as it came (submit --follow, follow): the rest
 * of it from the result, then the result, whose summary goes to stderr
 * in human form (stdout held the program's own). */
static int emit_followed_result(const cf_cli_globals *g, follow_state *fs, const cf_result *res)
{
    follow_finish(fs, res);
    if (g->json)
        return emit_result(g, res);
    cf_result summary = *res;
    summary.stdout_data = (cf_bytes){0};
    summary.stderr_data = (cf_bytes){0};
    cf_cli_print_result(stderr, &summary);
    return cf_cli_exit_for_status(res->status);
}

/* ------------------------------------------------------------------------- */

static const char submit_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] submit [FLAGS] [-- ARGV...]\n"
    "\n"
    "Builds a request, submits it and waits for the result (--no-wait: print the id).\n"
    "  --request-file PATH     start from a JSON request (SPEC.md JSON form); flags override\n"
    "  --id ID                 request id (default: generated, time-ordered)\n"
    "  -l, --language LANG     command|shell|python|javascript|wasm|c|cpp|rust|go|typescript;\n"
    "                          js = javascript on the embedded js backend (QuickJS-ng);\n"
    "                          also py, sh, bash, node, ts, c++, golang, rs\n"
    "                          (default: command with ARGV, else from the source file's extension)\n"
    "  --code TEXT             source code\n"
    "  --code-file PATH        source code (or the module, for wasm) from a file\n"
    "  --module FILE.wasm      a WebAssembly module (WASI preview 1): language wasm, backend wasm\n"
    "  --file PATH             the same, when no source was given yet (codefleet submit --file main.rs)\n"
    "  --file REL=LOCALPATH    place a file in the work directory (repeatable)\n"
    "  --function              the code defines run(input): its return value is the output\n"
    "                          (python, javascript, typescript, rust)\n"
    "  --case SPEC             a test case: stdin=TEXT,expect=TEXT,arg=A,input=JSON,name=N\n"
    "                          (repeatable; values take \\n \\t \\, escapes); the program is\n"
    "                          built once and run once per case\n"
    "  --cases FILE.jsonl      test cases, one JSON object per line (SPEC.md)\n"
    "  --stop-on-failure       stop at the first case that does not pass\n"
    "  --collect GLOB          return work-directory files matching GLOB (repeatable)\n"
    "  --compile-flag FLAG     extra compiler flag from the worker's allowlist (repeatable)\n"
    "  --compile-timeout DURATION, --compile-memory SIZE   narrow the compile limits\n"
    "  --stdin-file PATH       bytes fed to stdin\n"
    "  --input JSON            structured input (any JSON value)\n"
    "  --env NAME=VALUE        environment variable (repeatable)\n"
    "  --env-allow NAME        pass a worker environment variable through (repeatable)\n"
    "  --backend NAME          backend to use\n"
    "  --image NAME            container backend: an image the operator allows\n"
    "  --timeout-exec DURATION wall-clock limit (policy.timeout_us)\n"
    "  --cpu-time DURATION     CPU-time limit\n"
    "  --memory SIZE           memory limit (\"64MiB\")\n"
    "  --max-processes N       process limit\n"
    "  --max-stdout SIZE, --max-stderr SIZE, --max-file-size SIZE\n"
    "  --network disabled|enabled\n"
    "  --filesystem none|workspace_ro|workspace_rw\n"
    "  --workspace ID, --thread ID, --identity NAME, --reply-to TOPIC\n"
    "  --session ID            python or shell: run the code as a cell of session ID, whose\n"
    "                          variables (shell: also cwd, functions) persist from cell to\n"
    "                          cell in its workspace (ID, or --workspace)\n"
    "  --deadline DURATION     reject if not started within DURATION from now\n"
    "  --no-wait               do not wait: print the id once the broker has the request\n"
    "  --stream                ask for output chunks while the program runs (SPEC.md \"Output\n"
    "                          chunks\"; the process, sandbox and container backends)\n"
    "  --follow                --stream, and write the program's stdout and stderr here as they\n"
    "                          come; the result's summary then goes to stderr (--json: one\n"
    "                          {\"chunk\": ...} line per chunk, then the result)\n";

/* How long submit waits for its result: --timeout when given, else the
 * run limit (the request's, or the fleet's default of 30 s) plus a margin
 * for the queue and a compile, so a program that uses its whole limit is
 * not reported as missing. */
static int64_t submit_wait_us(const cf_cli_globals *g, const cf_request *req)
{
    /* A timeout from the settings file counts as given when it is not the
     * default. */
    if (g->timeout_given || g->timeout_us != 30 * INT64_C(1000000))
        return g->timeout_us;
    int64_t run = req->policy.timeout_us > 0 ? req->policy.timeout_us : 30 * INT64_C(1000000);
    bool compiled = req->language == CF_LANG_C || req->language == CF_LANG_CPP || req->language == CF_LANG_RUST ||
                    req->language == CF_LANG_GO || req->language == CF_LANG_TYPESCRIPT;
    /* The workers' default compile limit is 60 s (compile-timeout). */
    int64_t compile = req->policy.compile_timeout_us > 0 ? req->policy.compile_timeout_us
                      : compiled                         ? 60 * INT64_C(1000000)
                                                         : 0;
    int64_t cases = req->n_cases > 1 ? (int64_t)req->n_cases : 1;
    return run * cases + compile + 30 * INT64_C(1000000);
}

/* A wait that ended without a result: whether a worker has started the
 * request (its start notice, SPEC.md "Start notices") tells queued from
 * running.  Returns the exit code after saying so. */
static int report_no_result(cf_dispatcher *d, const char *cmd, const char *id, int64_t since_us, int64_t waited_us,
                            const char *limit, bool sent_here)
{
    cf_chunk start = {0};
    cf_error serr = {0};
    /* 30 s early: the notice's timestamp is the worker's clock.  At most
     * 5 s more, whatever the broker does: the wait itself is over. */
    int found = cf_dispatcher_find_start(d, id, since_us - INT64_C(30000000), 5 * INT64_C(1000000), &start, &serr);
    char msg[900], what[300];
    if (found == 1) {
        int64_t ago_us = cf_now_us() - start.at_us;
        snprintf(what, sizeof(what), "it is running: worker %s started it %.1f s ago%s%s%s",
                 start.worker ? start.worker : "(unnamed)", (ago_us > 0 ? ago_us : 0) / 1e6, limit ? " (its run limit: " : "",
                 limit ? limit : "", limit ? ")" : "");
        snprintf(msg, sizeof(msg),
                 "no result for %s within %.1f s: %s; 'codefleet wait %s' picks the result up, 'codefleet cancel %s' "
                 "stops it",
                 id, waited_us / 1e6, what, id, id);
    } else if (found == 0 && !sent_here) {
        snprintf(msg, sizeof(msg),
                 "no result for %s within %.1f s, and no worker has reported starting it since the wait's start "
                 "time: it is most likely queued, was sent by a client that asks for no start notice, or its id is "
                 "unknown here (another result topic: --result-topic); 'codefleet doctor' checks that workers "
                 "consume its request topic",
                 id, waited_us / 1e6);
    } else if (found == 0) {
        snprintf(msg, sizeof(msg),
                 "no result for %s within %.1f s: it is most likely queued: no worker has reported starting it "
                 "(workers older than this client, or one whose producer is backed up, report no start); "
                 "'codefleet doctor' checks that workers consume its request topic, 'codefleet wait %s' picks the "
                 "result up later, 'codefleet cancel %s' withdraws it",
                 id, waited_us / 1e6, id, id);
    } else {
        cf_log_debug("cli", "start notice of %s: %s", id, serr.msg);
        snprintf(msg, sizeof(msg),
                 "no result for %s within %.1f s: it is queued or still running (whether a worker started it could "
                 "not be read: %.200s); 'codefleet wait %s' picks the result up, 'codefleet cancel %s' stops it, "
                 "'codefleet doctor' checks that workers consume its request topic",
                 id, waited_us / 1e6, serr.msg, id, id);
    }
    cf_chunk_clear(&start);
    return cf_cli_report(cmd, CF_EXIT_NO_RESULT, msg);
}

/* An interpreted program that only defines run() prints nothing: with
 * --function the harness calls it with --input and returns its value. */
static void run_not_called_hint(const cf_request *req, const cf_result *res)
{
    if (req->harness == CF_HARNESS_FUNCTION || res->status != CF_STATUS_SUCCESS || res->stdout_data.len ||
        res->output.len || !req->code.len)
        return;
    const char *def = NULL;
    switch (req->language) {
    case CF_LANG_PYTHON: def = "def run("; break;
    case CF_LANG_JAVASCRIPT:
    case CF_LANG_TYPESCRIPT: def = "function run("; break;
    default: return;
    }
    if (memmem(req->code.data, req->code.len, def, strlen(def)))
        cf_cli_report_line("submit", "warning", "run_not_called", NULL, NULL,
                           "the code defines run() but nothing called it (no output): add --function to call "
                           "run(input) with --input and get its return value");
}

static int cmd_submit(const cf_cli_globals *g, int argc, char **argv)
{
    cf_request req = {0};
    cf_cli_submit_opts opts;
    cf_error err = {0};
    if (cf_cli_parse_submit(argc, argv, &req, &opts, &err) < 0)
        return usage_error("submit", err.msg);
    if (opts.help) {
        cf_request_clear(&req);
        fputs(submit_help, stdout);
        return CF_EXIT_OK;
    }
    if (opts.follow && opts.no_wait) {
        cf_request_clear(&req);
        return usage_error("submit", "--follow and --no-wait exclude each other");
    }
    /* A reply_to the worker would refuse is refused here: waiting on a
     * topic named "" only gave a broker error. */
    if (req.reply_to && !cf_topic_name_valid(req.reply_to)) {
        char msg[400];
        snprintf(msg, sizeof(msg), "reply_to '%.249s' is not a topic name (1..249 of a-z A-Z 0-9 . _ -): omit it for "
                                   "the profile's result topic", req.reply_to);
        cf_request_clear(&req);
        return usage_error("submit", msg);
    }
    /* The answer (and its chunks) go where reply_to says: wait there. */
    cf_cli_globals gr = *g;
    if (req.reply_to)
        gr.result_topic = req.reply_to;
    g = &gr;
    cf_dispatcher *d = NULL;
    int rc;
    follow_state fs = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .json = g->json,
                       .tty = {isatty(STDOUT_FILENO) == 1, isatty(STDERR_FILENO) == 1}};
    fs.id = req.id ? req.id : "";
    if (open_dispatcher_to(g, !opts.no_wait, NULL, opts.follow ? &fs : NULL, &d, &err) < 0) {
        rc = fail(&err, NULL);
        goto out;
    }
    /* A worker says when it starts the request, so a wait that runs out
     * can tell queued from running (and so can `codefleet wait` later). */
    req.notify_start = true;
    int64_t submitted_us = cf_now_us();
    if (cf_dispatcher_submit(d, &req, &err) < 0) {
        rc = fail(&err, "submit");
        goto out;
    }
    if (opts.no_wait) {
        if (cf_dispatcher_flush(d, g->timeout_us, &err) < 0) {
            rc = fail(&err, "submit");
            goto out;
        }
        if (g->json)
            print_json_kv("id", req.id, NULL);
        else
            printf("%s\n", req.id);
        rc = CF_EXIT_OK;
        goto out;
    }
    cf_result res = {0};
    int64_t wait_us = submit_wait_us(g, &req);
    if (cf_dispatcher_wait(d, req.id, wait_us, &res, &err) < 0) {
        /* A delivery failure explains a missing result better than the timeout. */
        cf_error ferr = {0};
        if (cf_dispatcher_flush(d, 0, &ferr) < 0 && ferr.code == CF_E_KAFKA) {
            rc = fail(&ferr, "submit");
        } else if (err.code == CF_E_TIMEOUT) {
            char limit[80];
            if (req.policy.timeout_us)
                snprintf(limit, sizeof(limit), "%.1f s", req.policy.timeout_us / 1e6);
            else
                snprintf(limit, sizeof(limit), "the profile's, 30 s unless the operator set another");
            rc = report_no_result(d, NULL, req.id, submitted_us, wait_us, limit, true);
        } else {
            rc = fail(&err, "wait");
        }
        goto out;
    }
    rc = opts.follow ? emit_followed_result(g, &fs, &res) : emit_result(g, &res);
    run_not_called_hint(&req, &res);
    cf_result_clear(&res);
out:
    cf_dispatcher_destroy(d);
    cf_request_clear(&req);
    return rc;
}

/* ------------------------------------------------------------------------- */

static const char wait_help[] = "Usage: codefleet [GLOBAL OPTIONS] wait ID [--since DURATION-AGO | --since-us EPOCH_US]\n"
                                "\n"
                                "Waits up to --timeout for the result of request ID, scanning the result topic\n"
                                "from --since ago (default 10m) or from --since-us (epoch microseconds).\n";

static const char follow_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] follow ID [--since DURATION-AGO | --since-us EPOCH_US]\n"
    "\n"
    "Reattaches to request ID, running or finished: writes the stdout and stderr its run\n"
    "has published so far (requests sent with stream), then as they come, then its result\n"
    "(as submit --follow), waiting up to --timeout.  Output and result are read from\n"
    "--since ago (default 10m) or --since-us (epoch microseconds).  --json: one\n"
    "{\"chunk\": ...} line per chunk, then the result.\n";

static const char cancel_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] cancel ID [--reason TEXT] [--topic T] [--wait]\n"
    "\n"
    "Asks the fleet to stop request ID (sent to --request-topic), or never to start it:\n"
    "a cancel on the request topic's cancel topic (<request topic>.cancel).  A running\n"
    "request is killed, a waiting one dropped; both are answered `cancelled` (exit code 9\n"
    "with --wait).  A request that finished already is not changed.  --reason (at most\n"
    "256 bytes) goes into the result's reason.  --wait then waits up to --timeout for\n"
    "the request's result and prints it, as `wait` does.  --topic: the cancel topic, for\n"
    "workers whose cancel-topic-suffix is not .cancel.\n";

static int cmd_cancel(const cf_cli_globals *g, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"reason", required_argument, NULL, 'r'},
        {"topic", required_argument, NULL, 't'},
        {"wait", no_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cf_error err = {0};
    const char *reason = NULL, *topic = NULL;
    bool wait = false;
    int c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            reason = optarg;
            break;
        case 'w':
            wait = true;
            break;
        case 't':
            topic = optarg;
            break;
        case 'h':
            fputs(cancel_help, stdout);
            return CF_EXIT_OK;
        default:
            return bad_option("cancel", argc, argv);
        }
    }
    if (optind + 1 != argc)
        return usage_error("cancel", "expected exactly one request ID");
    const char *id = argv[optind];
    cf_cancel probe = {.id = (char *)id, .reason = (char *)reason};
    if (cf_cancel_check(&probe, &err) < 0)
        return usage_error("cancel", err.msg);
    int64_t since_us = cf_now_us() - INT64_C(600000000);
    cf_dispatcher *d = NULL;
    if (open_dispatcher_to(g, false, topic, NULL, &d, &err) < 0)
        return fail(&err, NULL);
    int rc = CF_EXIT_OK;
    if (cf_dispatcher_cancel(d, id, reason, g->timeout_us, &err) < 0) {
        rc = fail(&err, "cancel");
    } else if (!wait) {
        if (g->json)
            print_json_kv("cancel", id, "sent");
        else
            printf("cancel of %s sent to %s\n", id, topic ? topic : cf_dispatcher_cancel_topic(d));
    } else {
        cf_result res = {0};
        if (cf_dispatcher_wait_since(d, id, since_us, g->timeout_us, &res, &err) < 0) {
            char msg[600];
            if (err.code == CF_E_TIMEOUT) {
                /* No result either way: an id nobody submitted (or whose
                 * result is older than the topic keeps) looks the same as
                 * one still queued where no worker reads. */
                snprintf(msg, sizeof(msg),
                         "the cancel of %s was sent, but no result for it came within %.1f s: no request with "
                         "this id is known to have run or waited, or no worker reads its request topic "
                         "('codefleet doctor' checks); a request that arrives later is still cancelled",
                         id, g->timeout_us / 1e6);
                rc = cf_cli_report(NULL, CF_EXIT_NO_RESULT, msg);
            } else {
                snprintf(msg, sizeof(msg), "cancel --wait: the cancel of %s was sent; its result did not come", id);
                rc = cf_cli_report_error(NULL, msg, &err, cf_cli_exit_for_error(&err));
            }
        }
        else
            rc = emit_result(g, &res);
        cf_result_clear(&res);
    }
    cf_dispatcher_destroy(d);
    return rc;
}

/* wait or follow stopped by Ctrl-C (or SIGTERM): the request goes on. */
static int interrupted(const char *cmd, const char *id)
{
    char msg[400];
    snprintf(msg, sizeof(msg), "interrupted before the result of %s: the request goes on ('codefleet follow %s' "
             "reattaches, 'codefleet cancel %s' stops it)", id, id, id);
    return cf_cli_report(cmd, CF_EXIT_NO_RESULT, msg);
}

/* wait and follow: ID [--since DURATION-AGO | --since-us EPOCH_US]
 * (default: 10 minutes ago).  Returns -1 with *rc set when the command
 * ends here (help, a usage error). */
static int parse_id_since(const char *cmd, const char *help, int argc, char **argv, const char **id,
                          int64_t *since_us, int *rc)
{
    static const struct option longopts[] = {
        {"since", required_argument, NULL, 's'},
        {"since-us", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cf_error err = {0};
    *since_us = cf_now_us() - INT64_C(600000000);
    int c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int64_t v;
        switch (c) {
        case 's':
            if (cf_parse_duration_us(optarg, &v, "--since", &err) < 0)
                return *rc = usage_error(cmd, err.msg), -1;
            *since_us = cf_now_us() - v;
            break;
        case 'u':
            if (cf_parse_i64(optarg, 0, INT64_MAX, since_us, "--since-us", &err) < 0)
                return *rc = usage_error(cmd, err.msg), -1;
            break;
        case 'h':
            fputs(help, stdout);
            return *rc = CF_EXIT_OK, -1;
        default:
            return *rc = bad_option(cmd, argc, argv), -1;
        }
    }
    if (optind + 1 != argc)
        return *rc = usage_error(cmd, "expected exactly one request ID"), -1;
    *id = argv[optind];
    if (!cf_id_valid(*id, strlen(*id)))
        return *rc = usage_error(cmd, "invalid request ID"), -1;
    return 0;
}

static int cmd_wait(const cf_cli_globals *g, int argc, char **argv)
{
    const char *id;
    int64_t since_us;
    int rc;
    if (parse_id_since("wait", wait_help, argc, argv, &id, &since_us, &rc) < 0)
        return rc;
    cf_error err = {0};
    cf_dispatcher *d = NULL;
    cf_dispatcher_config cfg = {.brokers = g->brokers, .request_topic = g->request_topic,
                                .result_topic = g->result_topic, .client_id = "codefleet-cli", .kafka = &g->kafka,
                                .chunks_only = true, .interrupt = &cf_cli_stop};
    if (cf_dispatcher_new(&cfg, &d, &err) < 0)
        return fail(&err, NULL);
    cf_result res = {0};
    if (cf_dispatcher_wait_since(d, id, since_us, g->timeout_us, &res, &err) < 0)
        rc = cf_cli_stop               ? interrupted("wait", id)
             : err.code == CF_E_TIMEOUT ? report_no_result(d, NULL, id, since_us, g->timeout_us, NULL, false)
                                        : fail(&err, "wait");
    else
        rc = emit_result(g, &res);
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
    return rc;
}

/* Reattach: the output a request's run has published so far (replayed
 * from the output topic, its id's partition, from --since), then its
 * output as it comes, then its result, as submit --follow shows them.
 * Output is only published for requests sent with "stream"; for the
 * others the result's output is all there is. */
static int cmd_follow(const cf_cli_globals *g, int argc, char **argv)
{
    const char *id;
    int64_t since_us;
    int rc;
    if (parse_id_since("follow", follow_help, argc, argv, &id, &since_us, &rc) < 0)
        return rc;
    cf_error err = {0};
    follow_state fs = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .json = g->json,
                       .tty = {isatty(STDOUT_FILENO) == 1, isatty(STDERR_FILENO) == 1}, .id = id, .replay = true};
    cf_dispatcher_config cfg = {
        .brokers = g->brokers,
        .request_topic = g->request_topic,
        .result_topic = g->result_topic,
        .client_id = "codefleet-cli",
        .kafka = &g->kafka,
        .on_chunk = follow_chunk,
        .on_chunk_ctx = &fs,
        .output_since_us = since_us > 0 ? since_us : 1,
        .output_key = id,
        .chunks_only = true,
        .interrupt = &cf_cli_stop,
    };
    cf_dispatcher *d = NULL;
    if (cf_dispatcher_new(&cfg, &d, &err) < 0) {
        /* No output topic (a fleet that does not stream): the result
         * still says everything. */
        cf_log_debug("cli", "follow %s without output chunks: %s", id, err.msg);
        cf_error_clear(&err);
        cfg.on_chunk = NULL;
        if (cf_dispatcher_new(&cfg, &d, &err) < 0)
            return fail(&err, NULL);
    }
    cf_result res = {0};
    if (cf_dispatcher_wait_since(d, id, since_us, g->timeout_us, &res, &err) < 0) {
        follow_stop(&fs); /* nothing follows the answer below */
        rc = cf_cli_stop               ? interrupted("follow", id)
             : err.code == CF_E_TIMEOUT ? report_no_result(d, NULL, id, since_us, g->timeout_us, NULL, false)
                                        : fail(&err, "follow");
    } else {
        rc = emit_followed_result(g, &fs, &res);
    }
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
    return rc;
}

/* ------------------------------------------------------------------------- */

static const char batch_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] batch FILE.jsonl [--concurrency N]\n"
    "\n"
    "Submits one JSON request per line (missing \"id\" -> generated; blank lines and lines\n"
    "starting with '#' are skipped; a bad line is reported and counted, the batch goes on),\n"
    "keeps at most N (default 100) in flight, waits for all results within --timeout overall,\n"
    "then prints a summary: counts by status, latency p50/p90/p99/max (ms), throughput.\n"
    "Human output lists every non-success result; --json prints every result (one JSON\n"
    "object per line) and then a summary object.  FILE may be '-' for stdin.\n"
    "Exit code: 0 if every request succeeded, 1 otherwise.\n";

typedef struct batch_state {
    const cf_cli_globals *g;
    cf_dispatcher *d;
    json_t *inflight; /* id -> submit time (cf_mono_us) */
    cf_cli_batch_stats st;
    int64_t t0;
    int64_t deadline;
    bool progress;
    int64_t last_progress;
} batch_state;

static void batch_progress(batch_state *b, bool force)
{
    if (!b->progress)
        return;
    int64_t now = cf_mono_us();
    if (!force && now - b->last_progress < 100000)
        return;
    b->last_progress = now;
    char line[256];
    cf_cli_format_progress(&b->st, line, sizeof(line));
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
}

static void batch_progress_clear(batch_state *b)
{
    if (b->progress)
        fputs("\r\033[K", stderr);
}

/* Receives one result (of ours) or returns -1 on timeout/stop. */
static int batch_receive_one(batch_state *b)
{
    for (;;) {
        if (cf_cli_stop)
            return -1;
        int64_t left = b->deadline - cf_mono_us();
        if (left <= 0)
            return -1;
        cf_result res = {0};
        int64_t received = 0;
        cf_error err = {0};
        /* Short slices so progress and Ctrl-C stay responsive. */
        if (cf_dispatcher_wait_any(b->d, left < 200000 ? left : 200000, &res, &received, &err) < 0) {
            batch_progress(b, false);
            continue;
        }
        json_t *t = res.id ? json_object_get(b->inflight, res.id) : NULL;
        if (!t) { /* someone else's result */
            cf_result_clear(&res);
            continue;
        }
        int64_t lat = received - (int64_t)json_integer_value(t);
        json_object_del(b->inflight, res.id);
        cf_cli_stats_add(&b->st, res.status, lat);
        b->st.elapsed_us = cf_mono_us() - b->t0;
        if (b->g->json || res.status != CF_STATUS_SUCCESS) {
            batch_progress_clear(b);
            if (b->g->json) {
                cf_cli_print_result_json(stdout, &res, &err);
            } else {
                char line[512];
                cf_cli_format_result_line(&res, line, sizeof(line));
                printf("%s\n", line);
            }
            fflush(stdout);
        }
        cf_result_clear(&res);
        batch_progress(b, false);
        return 0;
    }
}

/* The most ids of requests without a result that batch --json lists. */
#define BATCH_MISSING_LISTED 1000

/* A line batch could not read or submit; it goes on with the next.  With
 * --json: {"error": {"command": "batch", "kind", "message", "file",
 * "line", "id"?}} on stderr. */
static void batch_line_error(const char *path, uint64_t lineno, const char *kind, const char *id, const char *msg)
{
    char where[1100];
    snprintf(where, sizeof(where), "%.1000s:%" PRIu64, path, lineno);
    json_t *f = json_pack("{s:s, s:I}", "file", path, "line", (json_int_t)lineno);
    if (f && id)
        json_object_set_new(f, "id", json_string(id));
    cf_cli_report_line("batch", "error", kind, where, f, msg);
}

/* The requests still without a result when the batch ends: counted, and
 * said (their ids: the first 10 in text, up to BATCH_MISSING_LISTED with
 * --json). */
static void batch_report_missing(batch_state *b)
{
    b->st.missing = json_object_size(b->inflight);
    if (!b->st.missing)
        return;
    batch_progress_clear(b);
    const char *id;
    json_t *v;
    char msg[200];
    snprintf(msg, sizeof(msg), "%" PRIu64 " request(s) without a result within %" PRId64 " ms", b->st.missing,
             b->g->timeout_us / 1000);
    if (b->g->json) {
        json_t *ids = json_array();
        json_object_foreach(b->inflight, id, v)
        {
            if (json_array_size(ids) >= BATCH_MISSING_LISTED)
                break;
            json_array_append_new(ids, json_string(id));
        }
        cf_cli_report_line("batch", "error", "no_result", NULL, json_pack("{s:o}", "missing", ids), msg);
        return;
    }
    cf_cli_report_line("batch", "error", "no_result", NULL, NULL, msg);
    size_t shown = 0;
    json_object_foreach(b->inflight, id, v)
    {
        if (shown++ >= 10)
            break;
        fprintf(stderr, "  missing: %s\n", id);
    }
}

static int cmd_batch(const cf_cli_globals *g, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"concurrency", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cf_error err = {0};
    int64_t concurrency = 100;
    int c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (cf_parse_i64(optarg, 1, 100000, &concurrency, "--concurrency", &err) < 0)
                return usage_error("batch", err.msg);
            break;
        case 'h':
            fputs(batch_help, stdout);
            return CF_EXIT_OK;
        default:
            return bad_option("batch", argc, argv);
        }
    }
    if (optind + 1 != argc)
        return usage_error("batch", "expected exactly one FILE");
    const char *path = argv[optind];
    FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    if (!in) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "%.1000s: %s", path, strerror(errno));
        return cf_cli_report("batch", CF_EXIT_USAGE, msg);
    }

    batch_state b = {.g = g, .progress = isatty(STDERR_FILENO) == 1};
    int rc = CF_EXIT_OK;
    b.inflight = json_object();
    if (!b.inflight || open_dispatcher(g, true, &b.d, &err) < 0) {
        rc = b.inflight ? fail(&err, NULL) : CF_EXIT_TRANSPORT;
        goto out;
    }
    b.t0 = cf_mono_us();
    b.deadline = b.t0 + g->timeout_us;

    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    uint64_t lineno = 0;
    bool timed_out = false;
    while (!cf_cli_stop && (len = getline(&line, &lcap, in)) >= 0) {
        lineno++;
        cf_request req = {0};
        int pr = (size_t)len > CF_CLI_MAX_FILE_BYTES
                     ? cf_error_set(&err, CF_E_LIMIT, "line longer than %u bytes", CF_CLI_MAX_FILE_BYTES)
                     : cf_cli_parse_request_line(line, (size_t)len, &req, &err);
        if (pr == 1)
            continue;
        if (pr < 0) {
            batch_progress_clear(&b);
            batch_line_error(path, lineno, "usage", NULL, err.msg);
            b.st.bad_lines++;
            continue;
        }
        if (json_object_get(b.inflight, req.id)) {
            batch_progress_clear(&b);
            char msg[400];
            snprintf(msg, sizeof(msg), "duplicate id %s (still in flight)", req.id);
            batch_line_error(path, lineno, "usage", req.id, msg);
            b.st.bad_lines++;
            cf_request_clear(&req);
            continue;
        }
        while (json_object_size(b.inflight) >= (size_t)concurrency) {
            if (batch_receive_one(&b) < 0) {
                timed_out = true;
                break;
            }
        }
        if (timed_out) {
            cf_request_clear(&req);
            break;
        }
        int64_t t = cf_mono_us();
        if (cf_dispatcher_submit(b.d, &req, &err) < 0) {
            batch_progress_clear(&b);
            batch_line_error(path, lineno, cf_cli_exit_name(cf_cli_exit_for_error(&err)), req.id, err.msg);
            b.st.submit_errors++;
        } else {
            json_object_set_new(b.inflight, req.id, json_integer((json_int_t)t));
            b.st.submitted++;
        }
        cf_request_clear(&req);
        batch_progress(&b, false);
    }
    free(line);
    if (timed_out || cf_cli_stop) {
        batch_progress_clear(&b);
        char msg[200];
        snprintf(msg, sizeof(msg), "%s before every line was submitted (stopped at line %" PRIu64 ")",
                 cf_cli_stop ? "interrupted" : "timeout", lineno);
        cf_cli_report_line("batch", "error", cf_cli_stop ? "interrupted" : "no_result", NULL,
                           json_pack("{s:I}", "line", (json_int_t)lineno), msg);
    }
    if (cf_dispatcher_flush(b.d, g->timeout_us, &err) < 0) {
        batch_progress_clear(&b);
        cf_cli_report_line("batch", "error", cf_cli_exit_name(cf_cli_exit_for_error(&err)), NULL, NULL, err.msg);
    }
    while (json_object_size(b.inflight) > 0 && batch_receive_one(&b) == 0)
        ;
    batch_report_missing(&b);
    if (!b.st.received)
        b.st.elapsed_us = cf_mono_us() - b.t0;
    batch_progress_clear(&b);
    if (g->json) {
        json_t *sum = cf_cli_stats_to_json(&b.st);
        char *s = sum ? json_dumps(sum, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(sum);
    } else {
        cf_cli_print_summary(stdout, &b.st);
    }
    rc = cf_cli_stats_all_success(&b.st) ? CF_EXIT_OK : CF_EXIT_FAILED;
out:
    if (in != stdin)
        fclose(in);
    cf_dispatcher_destroy(b.d);
    json_decref(b.inflight);
    cf_cli_stats_free(&b.st);
    return rc;
}

/* ------------------------------------------------------------------------- */

static const char tail_help[] = "Usage: codefleet [GLOBAL OPTIONS] tail [--from-beginning] [--count N]\n"
                                "\n"
                                "Prints results as they arrive (human: id, status, exit, wall time, first line\n"
                                "of stdout; --json: one object per line).  Stops after N results, on Ctrl-C, or\n"
                                "after --timeout when given explicitly.\n";

typedef struct tail_state {
    const cf_cli_globals *g;
    int64_t count; /* 0 = unlimited */
    int64_t seen;
} tail_state;

static int tail_print(void *ctx, const cf_result *res, const cf_error *derr, int32_t partition, int64_t offset)
{
    tail_state *t = ctx;
    if (!res) {
        char msg[CF_ERROR_MSG_MAX + 100];
        snprintf(msg, sizeof(msg), "skipping malformed result at partition %" PRId32 " offset %" PRId64 ": %s",
                 partition, offset, derr ? derr->msg : "?");
        cf_cli_report_line("tail", "error", "malformed", NULL,
                           json_pack("{s:i, s:I}", "partition", (int)partition, "offset", (json_int_t)offset), msg);
        return 0;
    }
    if (t->g->json) {
        cf_error err = {0};
        cf_cli_print_result_json(stdout, res, &err);
    } else {
        char line[512];
        cf_cli_format_result_line(res, line, sizeof(line));
        printf("%s\n", line);
    }
    fflush(stdout);
    t->seen++;
    return t->count > 0 && t->seen >= t->count;
}

static int cmd_tail(const cf_cli_globals *g, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"from-beginning", no_argument, NULL, 'b'},
        {"count", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cf_error err = {0};
    tail_state t = {.g = g};
    bool from_beginning = false;
    int c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            from_beginning = true;
            break;
        case 'n':
            if (cf_parse_i64(optarg, 1, INT64_MAX, &t.count, "--count", &err) < 0)
                return usage_error("tail", err.msg);
            break;
        case 'h':
            fputs(tail_help, stdout);
            return CF_EXIT_OK;
        default:
            return bad_option("tail", argc, argv);
        }
    }
    if (optind != argc)
        return usage_error("tail", "unexpected argument");
    cf_dispatcher *d = NULL;
    if (open_dispatcher(g, false, &d, &err) < 0)
        return fail(&err, NULL);
    int rc = CF_EXIT_OK;
    if (cf_dispatcher_tail(d, from_beginning, &cf_cli_stop, g->timeout_given ? g->timeout_us : 0, tail_print, &t, &err) <
        0)
        rc = fail(&err, "tail");
    cf_dispatcher_destroy(d);
    return rc;
}

/* ------------------------------------------------------------------------- */

static const char topics_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] topics create [--partitions N] [--retention DURATION] [NAME...]\n"
    "\n"
    "Creates topics (default: the fleet's request, result, dead-letter, events and\n"
    "workers topics, the request topic's cancel topic and the result topic's output topic)\n"
    "with N partitions (default 6), the broker's default\n"
    "replication factor, and max.message.bytes 16 MiB (a result carries up to\n"
    "max-output of stdout and of stderr, the output file and collected files).\n"
    "The workers topic (--workers-topic) is compacted; --retention sets\n"
    "retention.ms of the others (default: the broker's, 7 days on a stock one).\n"
    "Existing topics are left as they are: `codefleet doctor` says when one's\n"
    "limits are too small.\n";

static int cmd_topics(const cf_cli_globals *g, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"partitions", required_argument, NULL, 'p'},
        {"retention", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cf_error err = {0};
    int64_t partitions = 6, retention_us = 0;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(topics_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CF_EXIT_USAGE : CF_EXIT_OK;
    }
    if (strcmp(argv[1], "create") != 0)
        return usage_error("topics", "unknown subcommand (expected: create)");
    int c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc - 1, argv + 1, "p:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (cf_parse_i64(optarg, 1, 10000, &partitions, "--partitions", &err) < 0)
                return usage_error("topics", err.msg);
            break;
        case 'r':
            if (cf_parse_duration_us(optarg, &retention_us, "--retention", &err) < 0 ||
                retention_us < 60 * INT64_C(1000000))
                return usage_error("topics", retention_us ? "--retention: at least 1m" : err.msg);
            break;
        case 'h':
            fputs(topics_help, stdout);
            return CF_EXIT_OK;
        default:
            return bad_option("topics", argc - 1, argv + 1);
        }
    }
    const char *defaults[7];
    size_t n = 0;
    char cancels[512], outputs[512];
    snprintf(cancels, sizeof(cancels), "%s%s", g->request_topic ? g->request_topic : "", CF_CANCEL_TOPIC_SUFFIX);
    snprintf(outputs, sizeof(outputs), "%s%s", g->result_topic ? g->result_topic : "", CF_CHUNK_TOPIC_SUFFIX);
    const char *fleet[] = {g->request_topic, g->result_topic, g->dlq_topic, g->events_topic, g->workers_topic,
                           g->request_topic && g->request_topic[0] ? cancels : NULL,
                           g->result_topic && g->result_topic[0] ? outputs : NULL};
    for (size_t i = 0; i < 7; i++)
        if (fleet[i] && fleet[i][0])
            defaults[n++] = fleet[i];
    const char *const *names = defaults;
    if (optind < argc - 1) {
        names = (const char *const *)(argv + 1 + optind);
        n = (size_t)(argc - 1 - optind);
    }
    cf_kafka_topic_opts o = {.partitions = (int)partitions,
                             .replication_factor = -1,
                             .compacted = g->workers_topic,
                             .retention_ms = retention_us / 1000};
    if (cf_kafka_create_topics_opts(g->brokers, &g->kafka, names, n, &o, g->timeout_us, &err) < 0)
        return fail(&err, "topics create");
    for (size_t i = 0; i < n; i++) {
        if (g->json)
            print_json_kv("topic", names[i], "created_or_exists");
        else
            printf("topic %s ready\n", names[i]);
    }
    return CF_EXIT_OK;
}

static const char acl_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] acl allow PRINCIPAL RULE...\n"
    "\n"
    "Creates ALLOW ACLs on the broker (KRaft StandardAuthorizer) for PRINCIPAL\n"
    "(User:NAME), one per RULE = OPERATION:RESOURCE:NAME, NAME ending in '*' for a\n"
    "prefix.  Operations: read, write, create, describe, alter, delete, all,\n"
    "idempotent_write, ...; resources: topic, group, cluster (name kafka-cluster).\n"
    "Needs a super user's credentials (--config).  Example:\n"
    "  codefleet acl allow User:tenant-a write:topic:codefleet.requests.tenant-a \\\n"
    "      read:topic:codefleet.results.tenant-a read:group:tenant-a*\n";

static int cmd_acl(const cf_cli_globals *g, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(acl_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CF_EXIT_USAGE : CF_EXIT_OK;
    }
    if (strcmp(argv[1], "allow") != 0)
        return usage_error("acl", "unknown subcommand (expected: allow)");
    if (argc < 4)
        return usage_error("acl", "expected PRINCIPAL and at least one RULE");
    const char *principal = argv[2];
    if (strncmp(principal, "User:", 5) != 0 || principal[5] == '\0')
        return usage_error("acl", "PRINCIPAL must be User:NAME");
    size_t n = (size_t)(argc - 3);
    cf_kafka_acl *acls = calloc(n, sizeof(*acls));
    char (*bufs)[300] = calloc(n, sizeof(*bufs));
    cf_error err = {0};
    int rc = CF_EXIT_OK;
    if (!acls || !bufs) {
        cf_error_set(&err, CF_E_NOMEM, "out of memory");
        rc = fail(&err, "acl allow");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (cf_kafka_acl_parse(argv[3 + i], &acls[i], bufs[i], sizeof(bufs[i]), &err) < 0) {
            rc = usage_error("acl", err.msg);
            goto out;
        }
        acls[i].principal = principal;
    }
    if (cf_kafka_acls_create(g->brokers, &g->kafka, acls, n, g->timeout_us, &err) < 0) {
        rc = fail(&err, "acl allow");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (g->json)
            print_json_kv("acl", argv[3 + i], principal);
        else
            printf("allowed %s %s %s:%s%s\n", principal, acls[i].operation, acls[i].resource, acls[i].name,
                   acls[i].prefixed ? "*" : "");
    }
out:
    free(acls);
    free(bufs);
    return rc;
}
/* codefleet version [--json]: this CLI's version and its librdkafka's. */
static int cmd_version(const cf_cli_globals *g, int argc, char **argv)
{
    bool json = g->json;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else {
            char msg[200];
            snprintf(msg, sizeof(msg), "unknown argument '%.80s' (version takes --json only)", argv[i]);
            return cf_cli_report("version", CF_EXIT_USAGE, msg);
        }
    }
    if (json)
        printf("{\"codefleet\":\"%s\",\"librdkafka\":\"%s\"}\n", CF_VERSION, rd_kafka_version_str());
    else
        printf("codefleet %s (librdkafka %s)\n", CF_VERSION, rd_kafka_version_str());
    return CF_EXIT_OK;
}


/* ------------------------------------------------------------------------- */

int cf_cli_main(int argc, char **argv)
{
    cf_cli_globals g;
    cf_error err = {0};
    int cmd = 0;
    bool help = false;
    /* CODEFLEET_LOG_LEVEL=debug shows librdkafka's own lines and the raw
     * errors behind the one-line explanations. */
    cf_log_level lvl = CF_LOG_WARN;
    const char *lv = getenv("CODEFLEET_LOG_LEVEL");
    if (lv && cf_log_level_parse(lv, &lvl) < 0)
        lvl = CF_LOG_WARN;
    cf_log_setup(lvl, CF_LOG_TEXT, "codefleet");
    cf_kafka_quiet_logs(lvl < CF_LOG_DEBUG);
    current_globals = &g;
    /* Alone, the version needs no settings (a broken settings file does
     * not hide it); with options it is a command like the others. */
    if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) {
        const cf_cli_globals none = {0};
        return cmd_version(&none, 1, argv + 1);
    }
    /* Errors are JSON from the start when --json comes before the command. */
    cf_cli_set_report_json(cf_cli_json_asked(argc, argv));
    if (cf_cli_parse_globals(argc, argv, &g, &cmd, &help, &err) < 0) {
        cf_cli_report(NULL, CF_EXIT_USAGE, err.msg);
        cf_cli_globals_free(&g);
        return CF_EXIT_USAGE;
    }
    cf_cli_set_report_json(g.json);
    int rc;
    if (help || cmd >= argc) {
        cf_cli_print_usage(help ? stdout : stderr);
        cf_cli_globals_free(&g);
        return help ? CF_EXIT_OK : CF_EXIT_USAGE;
    }
    cf_cli_catch_signals();
    const char *name = argv[cmd];
    int sub_argc = argc - cmd;
    char **sub_argv = argv + cmd;
    if (strcmp(name, "submit") == 0)
        rc = cmd_submit(&g, sub_argc, sub_argv);
    else if (strcmp(name, "wait") == 0)
        rc = cmd_wait(&g, sub_argc, sub_argv);
    else if (strcmp(name, "follow") == 0)
        rc = cmd_follow(&g, sub_argc, sub_argv);
    else if (strcmp(name, "cancel") == 0)
        rc = cmd_cancel(&g, sub_argc, sub_argv);
    else if (strcmp(name, "batch") == 0)
        rc = cmd_batch(&g, sub_argc, sub_argv);
    else if (strcmp(name, "tail") == 0)
        rc = cmd_tail(&g, sub_argc, sub_argv);
    else if (strcmp(name, "topics") == 0)
        rc = cmd_topics(&g, sub_argc, sub_argv);
    else if (strcmp(name, "acl") == 0)
        rc = cmd_acl(&g, sub_argc, sub_argv);
    else if (strcmp(name, "workspace") == 0)
        rc = cf_cli_cmd_workspace(&g, sub_argc, sub_argv);
    else if (strcmp(name, "files") == 0)
        rc = cf_cli_cmd_files(&g, sub_argc, sub_argv);
    else if (strcmp(name, "checkpoint") == 0)
        rc = cf_cli_cmd_checkpoint(&g, sub_argc, sub_argv);
    else if (strcmp(name, "events") == 0)
        rc = cf_cli_cmd_events(&g, sub_argc, sub_argv);
    else if (strcmp(name, "doctor") == 0)
        rc = cf_cli_cmd_doctor(&g, sub_argc, sub_argv);
    else if (strcmp(name, "top") == 0)
        rc = cf_cli_cmd_top(&g, sub_argc, sub_argv);
    else if (strcmp(name, "mcp") == 0)
        rc = cf_cli_cmd_mcp(&g, sub_argc, sub_argv);
    else if (strcmp(name, "version") == 0)
        rc = cmd_version(&g, sub_argc, sub_argv);
    else if (strcmp(name, "help") == 0) {
        cf_cli_print_usage(stdout);
        rc = CF_EXIT_OK;
    } else {
        char msg[300];
        snprintf(msg, sizeof(msg), "unknown command '%.100s' (see codefleet --help)", name);
        rc = cf_cli_report(NULL, CF_EXIT_USAGE, msg);
    }
    cf_cli_globals_free(&g);
    return rc;
}
