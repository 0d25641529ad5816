/* cf_cli: the `codefleet` command line, as a library so its pure parts
 * (argument parsing, JSON-lines parsing, statistics, output formatting) can be
 * unit-tested and codefleet_main.c stays a one-liner.
 */
#ifndef CF_CLI_H
#define CF_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "cf_config.h"
#include "cf_error.h"
#include "cf_schema.h"

/* Exit codes (documented in --help and docs/CLI.md). */
enum {
    CF_EXIT_OK = 0,        /* result status success, or the command succeeded */
    CF_EXIT_FAILED = 1,    /* finished with failed, timeout, memory_exceeded, compile_failed; batch: not all success */
    CF_EXIT_USAGE = 2,     /* bad flags or unreadable/invalid input */
    CF_EXIT_REJECTED = 3,  /* the worker rejected the request */
    CF_EXIT_INTERNAL = 4,  /* the worker reported internal_error */
    CF_EXIT_NO_RESULT = 5, /* no result within --timeout */
    CF_EXIT_TRANSPORT = 6, /* Kafka / Redis / transport error */
    CF_EXIT_NOT_FOUND = 7, /* workspace, file, thread or checkpoint not found (state commands) */
    CF_EXIT_CONFLICT = 8,  /* compare-and-set lost, already exists, stale writer (state commands) */
    CF_EXIT_CANCELLED = 9, /* the request was cancelled (codefleet cancel, or another client) */
};

/* Largest file read for --code-file, --file, --stdin-file, --request-file. */
#define CF_CLI_MAX_FILE_BYTES (64u * 1024 * 1024)

/* Global options (the cf_config table of the CLI). */
typedef struct cf_cli_globals {
    char *brokers;
    char *request_topic;
    char *result_topic;
    bool json;
    int64_t timeout_us;
    cf_kvlist kafka; /* -X key=value / --kafka.key=value */
    bool timeout_given; /* --timeout appeared on the command line */
    char *redis;          /* "host:port", "[v6]:port" or a unix socket path */
    char *redis_user;     /* ACL user, may be NULL */
    char *redis_password; /* may be NULL */
    char *redis_prefix;   /* key prefix of workspaces and checkpoints */
    /* The ids of workspaces and threads this principal may use start with
     * this (its profile's state-prefix; "*": any, "none": none).  The
     * state stores refuse others before Redis, whose ACL user for a tenant
     * holds the same line. */
    char *state_prefix;
    char *events_topic;
    char *dlq_topic;      /* doctor: the workers' dead-letter topic */
    char *workers_topic;  /* doctor: the workers' reports */
    char *worker_group;   /* doctor: the workers' consumer group */
} cf_cli_globals;

/* The state and event commands (argv[0] is "workspace", "checkpoint" or
 * "events"); each returns an exit code. */
int cf_cli_cmd_workspace(const cf_cli_globals *g, int argc, char **argv);
int cf_cli_cmd_files(const cf_cli_globals *g, int argc, char **argv);
struct cf_dispatcher;
/* A dispatcher on the globals' topics (collect: it reads results). */
int cf_cli_open_dispatcher(const cf_cli_globals *g, bool collect, struct cf_dispatcher **d, cf_error *err);
int cf_cli_cmd_checkpoint(const cf_cli_globals *g, int argc, char **argv);
int cf_cli_cmd_events(const cf_cli_globals *g, int argc, char **argv);
int cf_cli_cmd_doctor(const cf_cli_globals *g, int argc, char **argv);
int cf_cli_cmd_top(const cf_cli_globals *g, int argc, char **argv);

/* doctor and top: partitions that do not move (cf_cli_doctor.c). */
/* cf_cli_fleet_view.c: the group's description and the workers' reports,
 * read by doctor and top. */

/* Counts in a report above this are not believed (a forged report must
 * not wrap sums). */
#define CF_CLI_REPORT_COUNT_MAX (INT64_C(1) << 50)
/* A string member of a JSON object, "?" when absent or not a string. */
const char *cf_cli_json_str(const json_t *o, const char *k);
/* "topic[N]" (as doctor lists a member's partitions) into topic and
 * *part; -1 when s is not of that form. */
int cf_cli_parse_partition(const char *s, char *topic, size_t cap, int32_t *part);
/* Each request topic's partitions by live worker, from the group's
 * members ([{client_id, partitions: ["topic[N]"...]}]): {topic: {worker:
 * n}}, a worker named by its client id without the "codefleet-worker-"
 * its consumers get (so, its worker id). */
json_t *cf_cli_spread_by_topic(const json_t *members);
/* Whether a topic's partitions (by worker, of nw live workers) sit on
 * fewer workers than could hold them, or differ by more than one between
 * workers; lo and hi get the fewest and most a live worker holds. */
bool cf_cli_spread_uneven(const json_t *by, size_t nw, json_int_t *lo, json_int_t *hi);
/* The most stalled partitions taken from one report (the worker writes no
 * more: worker_report.h). */
#define CF_CLI_STALLED_MAX 16
/* What a worker report (untrusted; may be NULL) says its partition guard
 * finds stalled: a new array of at most CF_CLI_STALLED_MAX strings from
 * load.stalled, non-strings and empty strings skipped, each cut to
 * printable ASCII (cf_printable); NULL when the report has no such array
 * (an older worker, or no report).  *stalls (may be NULL) gets load.stalls,
 * -1 when absent or out of range. */
json_t *cf_cli_report_stalled(const json_t *report, int64_t *stalls);
/* True when a report's load says the worker can take more of topic's
 * requests: busy < slots, paused and draining false, and topic (when not
 * NULL) not among load.paused_topics (a tenant's topic paused at its
 * profile's cap while the worker still has a slot for others).  False
 * when unknown (NULL, fields missing or out of range). */
bool cf_cli_report_has_room(const json_t *report, const char *topic);
/* Lag that does not move, across samples.  sample (not changed): "topic[N]"
 * -> {"committed": C, "lag": L, "member": client id, "owner": name shown
 * (optional), "room": bool (optional: unknown)}.  watch (the caller's,
 * an empty object before the first sample) keeps per partition since when
 * its committed offset has stood under one member; a partition without lag,
 * leaving the sample, or whose owner has no room starts again.  Returns a
 * new array of {"partition", "owner", "lag", "committed", "for_s"} for the
 * partitions that stood for at least min_ms with lag and whose owner has
 * room now ("room": true); NULL only when out of memory. */
json_t *cf_cli_lag_watch(json_t *watch, json_t *sample, int64_t now_ms, int64_t min_ms);
/* codefleet mcp: a Model Context Protocol server on stdin/stdout. */
int cf_cli_cmd_mcp(const cf_cli_globals *g, int argc, char **argv);
/* Redis and the workspace store as the globals say (no I/O yet). */
struct cf_redis;
struct cf_workspace_store;
struct cf_redis *cf_cli_redis_open(const cf_cli_globals *g, cf_error *err);
struct cf_workspace_store *cf_cli_workspace_store_new(const cf_cli_globals *g, struct cf_redis *r, cf_error *err);
/* Runs the whole CLI; returns the process exit code. */
int cf_cli_main(int argc, char **argv);

/* Set by SIGINT/SIGTERM once cf_cli_catch_signals() ran, so long commands
 * (batch, tail, wait) stop at their next check and still print a summary. */
extern volatile sig_atomic_t cf_cli_stop;
void cf_cli_catch_signals(void);

/* The long name of the option whose val is val in opts (terminated by a
 * NULL name), or "?": for "option --NAME does not apply" errors. */
struct option;
const char *cf_cli_opt_name(const struct option *opts, int val);

/* Parses the global options of argv (stops at the command).  -X k=v is
 * accepted as --kafka.k=v.  *cmd_index gets the index of the command word
 * (argc if none); *help is set for -h/--help.  g must be freed with
 * cf_cli_globals_free.  Environment: CODEFLEET_BROKERS, CODEFLEET_REQUEST_TOPIC,
 * CODEFLEET_RESULT_TOPIC (flags win). */
int cf_cli_parse_globals(int argc, char **argv, cf_cli_globals *g, int *cmd_index, bool *help, cf_error *err);
void cf_cli_globals_free(cf_cli_globals *g);
void cf_cli_print_usage(FILE *out);

/* Exit code of a finished result / of a failed operation. */
int cf_cli_exit_for_status(cf_status s);
int cf_cli_exit_for_error(const cf_error *err);
/* Exit code of a failed workspace/checkpoint/events operation: invalid
 * input and limits 2, timeout 5, not found 7, conflict 8, else 6. */
int cf_cli_exit_for_state_error(const cf_error *err);

/* How a command reports the error it stops on (one home: every command
 * goes through these).  Text: "codefleet[ CMD]: MESSAGE" on stderr.  With
 * --json (cf_cli_set_report_json): one JSON object
 *   {"error": {"command": CMD, "kind": KIND, "message": MESSAGE, "exit_code": N}}
 * on stderr, and the same on stdout, so a script reading stdout gets a
 * JSON answer on every exit.  KIND names the exit code (cf_cli_exit_name).
 * Each returns exit_code. */
void cf_cli_set_report_json(bool json);
int cf_cli_report(const char *cmd, int exit_code, const char *message);
/* A line about one item a command goes on after (a batch line it could not
 * read or submit, a malformed message it skipped) or a warning: text
 * "codefleet CMD: [WHERE: ]MESSAGE" on stderr; with --json one object
 * {LEVEL: {"command", "kind", "message", ...fields}} on stderr only (the
 * command's answer still comes on stdout), without "exit_code" since the
 * command has not ended.  level is "error" or "warning"; fields (taken,
 * may be NULL) add members such as "file" and "line"; where (may be NULL)
 * is the text form's place ("FILE:LINE"). */
void cf_cli_report_line(const char *cmd, const char *level, const char *kind, const char *where, json_t *fields,
                        const char *message);
/* "MESSAGE (see codefleet HELP_CMD --help)", exit code 2. */
int cf_cli_report_usage(const char *cmd, const char *help_cmd, const char *message);
/* A failed operation: cf_cli_explain's hint when there is one (the raw
 * error at debug level), else "WHAT: " and the error's message. */
int cf_cli_report_error(const char *cmd, const char *what, const cf_error *err, int exit_code);
/* After getopt_long returned '?' for command CMD: the option it stopped at,
 * named, and for a global option given after the command, where it goes. */
const char *cf_cli_option_error(const char *cmd, int argc, char **argv, char *buf, size_t size);
/* A global option given after command CMD (a whole name, before "--"):
 * the message saying where it goes, or NULL. */
const char *cf_cli_misplaced_global(const char *cmd, int argc, char **argv, char *buf, size_t size);
/* Whether --json is among the global options before the command. */
bool cf_cli_json_asked(int argc, char **argv);
/* "usage", "no_result", "transport", ... for an exit code. */
const char *cf_cli_exit_name(int exit_code);

/* For a Kafka or Redis failure, one line a person can act on (what failed,
 * what to check: address, credentials, missing topic, ACLs); "" when the
 * error's own message is the best there is. */
void cf_cli_explain(const cf_error *err, char *hint, size_t size);

/* Parses --redis: "host:port", "host" (port 6379), "[v6addr]:port" or an
 * absolute unix socket path (port 0). */
int cf_cli_parse_redis_addr(const char *s, char *host, size_t hostcap, int *port, cf_error *err);

/* Checkpoint state or metadata from JSON text: must be a JSON object;
 * *out (msgpack map, caller frees out->data). what names the input. */
int cf_cli_state_from_json(const char *text, size_t len, const char *what, cf_bytes *out, cf_error *err);

/* Writes a snapshot listing (entries with data) into dir, which is created
 * if missing and must otherwise be an empty directory (not a symlink).
 * Every path is checked with the store's rules (ws may be an unconnected
 * store); files and directories are created relative to directory fds with
 * O_NOFOLLOW and O_EXCL, so nothing outside dir is touched and no symlink
 * is followed.  On failure files written so far stay. */
struct cf_ws_listing;
struct cf_workspace_store;
int cf_cli_materialize(const char *dir, const struct cf_ws_listing *l, const struct cf_workspace_store *ws,
                       cf_error *err);

/* `submit` flags (argv[0] is "submit").  Fills req (zeroed by the caller;
 * cleared on failure).  A missing --id gets a generated one. */
typedef struct cf_cli_submit_opts {
    bool no_wait;
    bool follow;  /* print output chunks as they come (implies stream) */
    bool help;
    bool lang_js; /* -l js: JavaScript on the embedded js backend */
} cf_cli_submit_opts;
int cf_cli_parse_submit(int argc, char **argv, cf_request *req, cf_cli_submit_opts *opts, cf_error *err);

/* One line of a batch file.  Returns 1 for a skipped line (blank, or '#'
 * comment), 0 with *out filled, -1 on error (out cleared).  A missing "id"
 * gets a generated one. */
int cf_cli_parse_request_line(const char *line, size_t len, cf_request *out, cf_error *err);

/* Builds a request from a parsed JSON object, generating the id if absent. */
int cf_cli_request_from_json(json_t *obj, cf_request *out, cf_error *err);

/* Reads a whole regular file, refusing more than cap bytes. */
int cf_cli_read_file(const char *path, size_t cap, cf_bytes *out, cf_error *err);
/* All of fd up to cap bytes (stdin, a pipe); name is for the messages. */
int cf_cli_read_fd(int fd, size_t cap, const char *name, cf_bytes *out, cf_error *err);

/* Batch statistics. */
typedef struct cf_cli_batch_stats {
    uint64_t submitted;
    uint64_t bad_lines;     /* unparsable lines */
    uint64_t submit_errors; /* lines that parsed but could not be submitted */
    uint64_t received;
    uint64_t missing;       /* submitted, no result within the timeout */
    uint64_t by_status[CF_STATUS__COUNT];
    int64_t *latency_us;    /* submit -> result received */
    size_t n_latency, cap_latency;
    int64_t elapsed_us;     /* first submit -> last result (or end) */
} cf_cli_batch_stats;

int cf_cli_stats_add(cf_cli_batch_stats *s, cf_status status, int64_t latency_us);
void cf_cli_stats_free(cf_cli_batch_stats *s);
/* Sorts the latencies (once) and returns the nearest-rank percentile pct
 * (0 < pct <= 100) in microseconds; 0 when there are none. */
int64_t cf_cli_stats_percentile(cf_cli_batch_stats *s, double pct);
/* Nearest-rank percentile of an ascending array. */
int64_t cf_cli_percentile(const int64_t *sorted, size_t n, double pct);
bool cf_cli_stats_all_success(const cf_cli_batch_stats *s);
json_t *cf_cli_stats_to_json(cf_cli_batch_stats *s);
void cf_cli_print_summary(FILE *out, cf_cli_batch_stats *s);
/* The single progress line ("submitted 10  received 8  success 7 failed 1"). */
void cf_cli_format_progress(const cf_cli_batch_stats *s, char *buf, size_t cap);

/* Output of one result: human-readable (several lines, then stdout and
 * stderr), one compact JSON line, or the one-line tail form. */
void cf_cli_print_result(FILE *out, const cf_result *res);
int cf_cli_print_result_json(FILE *out, const cf_result *res, cf_error *err);
void cf_cli_format_result_line(const cf_result *res, char *buf, size_t cap);

#endif
