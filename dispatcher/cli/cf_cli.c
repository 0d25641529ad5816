/* cf_cli: the pure parts of the `codefleet` CLI: global options, submit flag
 * parsing, batch line parsing, statistics and output formatting.  Nothing here
 * talks to Kafka (see cf_cli_cmd.c). */
#include "cf_cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_dispatcher.h"
#include "cf_events.h"
#include "cf_log.h"
#include "cf_schema_json.h"
#include "cf_util.h"

/* ---------------------------------------------------------------------------
 * Global options: one cf_config table feeds --help, flags and environment.
 */
static const cf_conf_prop global_props[] = {
    {"brokers", CF_CONF_STRING, offsetof(cf_cli_globals, brokers), 0, 4096, CF_DEFAULT_BROKERS, NULL,
     "Kafka bootstrap servers (host:port,...).", NULL},
    {"request-topic", CF_CONF_STRING, offsetof(cf_cli_globals, request_topic), 0, 249, CF_DEFAULT_REQUEST_TOPIC,
     NULL, "Topic requests are produced to.", NULL},
    {"result-topic", CF_CONF_STRING, offsetof(cf_cli_globals, result_topic), 0, 249, CF_DEFAULT_RESULT_TOPIC, NULL,
     "Topic results are read from.", NULL},
    {"json", CF_CONF_BOOL, offsetof(cf_cli_globals, json), 0, 0, "false", NULL,
     "Machine output: JSON (one object per line).", NULL},
    {"timeout", CF_CONF_DURATION, offsetof(cf_cli_globals, timeout_us), 1000, INT64_C(86400000000) * 7, "30s", NULL,
     "How long to wait for results (submit, wait: per result; batch: overall; tail: stop after).", NULL},
    {"kafka.", CF_CONF_KVLIST, offsetof(cf_cli_globals, kafka), 0, 0, NULL, NULL,
     "Extra librdkafka property (--kafka.NAME=VALUE, or -X NAME=VALUE).", NULL},
    {"events-topic", CF_CONF_STRING, offsetof(cf_cli_globals, events_topic), 0, 249, CF_DEFAULT_EVENTS_TOPIC, NULL,
     "Topic of collaboration events (events commands).", NULL},
    {"dlq-topic", CF_CONF_STRING, offsetof(cf_cli_globals, dlq_topic), 0, 249, "codefleet.dlq", NULL,
     "The workers' dead-letter topic (doctor).", NULL},
    {"workers-topic", CF_CONF_STRING, offsetof(cf_cli_globals, workers_topic), 0, 249, "codefleet.workers", NULL,
     "Topic of the workers' reports (doctor; topics create makes it compacted).", NULL},
    {"worker-group", CF_CONF_STRING, offsetof(cf_cli_globals, worker_group), 0, 249, "codefleet", NULL,
     "The workers' consumer group (doctor).", NULL},
    {"redis", CF_CONF_STRING, offsetof(cf_cli_globals, redis), 0, 4096, "127.0.0.1:6379", NULL,
     "Redis of workspaces and checkpoints: host:port, [v6]:port or a unix socket path.", NULL},
    {"redis-user", CF_CONF_STRING, offsetof(cf_cli_globals, redis_user), 0, 256, NULL, NULL,
     "Redis ACL user (with --redis-password).", NULL},
    {"redis-password", CF_CONF_STRING, offsetof(cf_cli_globals, redis_password), 0, 4096, NULL, NULL,
     "Redis password (prefer the environment: CODEFLEET_REDIS_PASSWORD).", NULL},
    {"redis-prefix", CF_CONF_STRING, offsetof(cf_cli_globals, redis_prefix), 0, 64, "cf:", NULL,
     "Key prefix of workspaces and checkpoints in Redis.", NULL},
    {"state-prefix", CF_CONF_STRING, offsetof(cf_cli_globals, state_prefix), 0, 128, "*", NULL,
     "The workspace and thread ids this client may name start with it: a tenant's client sets its profile's "
     "state-prefix (e.g. tenant-a.), and its workspace and checkpoint commands refuse other ids before "
     "Redis ('*': any, 'none': none); its files commands and MCP tools are held to it by the worker.", NULL},
};

static const cf_conf_table global_table = {
    .program = "codefleet",
    .env_prefix = "CODEFLEET_",
    .props = global_props,
    .nprops = sizeof(global_props) / sizeof(global_props[0]),
};

/* Only these variables are read: the CODEFLEET_ namespace is shared with the
 * worker, whose settings must not make the CLI fail as unknown keys. */
static const char *const global_env[] = {"CODEFLEET_BROKERS",      "CODEFLEET_REQUEST_TOPIC", "CODEFLEET_RESULT_TOPIC",
                                         "CODEFLEET_EVENTS_TOPIC", "CODEFLEET_REDIS",         "CODEFLEET_REDIS_USER",
                                         "CODEFLEET_REDIS_PASSWORD", "CODEFLEET_REDIS_PREFIX", "CODEFLEET_DLQ_TOPIC",
                                         "CODEFLEET_WORKERS_TOPIC", "CODEFLEET_WORKER_GROUP", "CODEFLEET_STATE_PREFIX"};

static bool global_takes_value(const char *arg)
{
    /* "--name=value" carries its own value; bools take none. */
    if (strchr(arg, '='))
        return false;
    return strcmp(arg, "--json") != 0 && strcmp(arg, "--no-json") != 0;
}

int cf_cli_parse_globals(int argc, char **argv, cf_cli_globals *g, int *cmd_index, bool *help, cf_error *err)
{
    memset(g, 0, sizeof(*g));
    *help = false;
    *cmd_index = argc;
    if (cf_conf_init(&global_table, g, err) < 0)
        return -1;

    /* A settings file first (--config FILE or CODEFLEET_CONFIG): where
     * credentials belong (kafka.sasl.*, redis-password), readable by their
     * owner only, instead of flags others can read in /proc. */
    const char *config = getenv("CODEFLEET_CONFIG");
    /* The same walk as the flag loop below: a value never counts as a
     * flag ("-X k=v" takes one, "-Xk=v" and "--name=v" carry theirs). */
    for (int k = 1; k < argc && argv[k][0] == '-' && argv[k][1] != '\0' && strcmp(argv[k], "--") != 0; k++) {
        const char *a = argv[k];
        if (strcmp(a, "--config") == 0) {
            if (k + 1 >= argc)
                return cf_error_set(err, CF_E_INVALID, "--config needs a file");
            config = argv[++k];
        } else if (strncmp(a, "--config=", 9) == 0) {
            config = a + 9;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            continue;
        } else if (strcmp(a, "-X") == 0 || (strncmp(a, "-X", 2) != 0 && global_takes_value(a))) {
            k++;
        }
    }
    if (config && config[0] && cf_conf_load_file(&global_table, g, config, err) < 0)
        return -1;

    /* Environment (a filtered envp: see global_env). */
    char *envp[sizeof(global_env) / sizeof(global_env[0]) + 1];
    size_t ne = 0;
    char *envbuf[sizeof(global_env) / sizeof(global_env[0])] = {0};
    int rc = -1;
    for (size_t i = 0; i < sizeof(global_env) / sizeof(global_env[0]); i++) {
        const char *v = getenv(global_env[i]);
        if (!v)
            continue;
        size_t n = strlen(global_env[i]) + strlen(v) + 2;
        envbuf[i] = malloc(n);
        if (!envbuf[i]) {
            cf_error_set(err, CF_E_NOMEM, "out of memory");
            goto out;
        }
        snprintf(envbuf[i], n, "%s=%s", global_env[i], v);
        envp[ne++] = envbuf[i];
    }
    envp[ne] = NULL;
    if (cf_conf_load_env(&global_table, g, envp, NULL, err) < 0)
        goto out;

    /* Flags: rewrite -X k=v into --kafka.k=v, spot --help, find the command. */
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    char **owned = calloc((size_t)argc + 1, sizeof(*owned));
    size_t nowned = 0;
    int nargs = 0, i = 1;
    bool bad = false;
    if (!args || !owned) {
        free(args);
        free(owned);
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        goto out;
    }
    args[nargs++] = argv[0];
    while (i < argc) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0')
            break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = true;
            i++;
            continue;
        }
        if (strncmp(a, "-X", 2) == 0) {
            const char *kvs = a[2] ? a + 2 : (i + 1 < argc ? argv[i + 1] : NULL);
            if (!kvs || !strchr(kvs, '=') || kvs[0] == '=') {
                bad = true;
                cf_error_set(err, CF_E_INVALID, "-X needs NAME=VALUE");
                break;
            }
            size_t n = strlen(kvs) + sizeof("--kafka.");
            char *s = malloc(n);
            if (!s) {
                bad = true;
                cf_error_set(err, CF_E_NOMEM, "out of memory");
                break;
            }
            snprintf(s, n, "--kafka.%s", kvs);
            owned[nowned++] = s;
            args[nargs++] = s;
            i += a[2] ? 1 : 2;
            continue;
        }
        if (a[1] != '-') {
            bad = true;
            cf_error_set(err, CF_E_INVALID, "unknown option %s (see codefleet --help)", a);
            break;
        }
        if (strcmp(a, "--config") == 0 || strncmp(a, "--config=", 9) == 0) {
            i += a[8] == '=' ? 1 : 2; /* read above */
            continue;
        }
        if (strcmp(a, "--timeout") == 0 || strncmp(a, "--timeout=", 10) == 0)
            g->timeout_given = true;
        args[nargs++] = argv[i++];
        if (global_takes_value(a) && i < argc)
            args[nargs++] = argv[i++];
    }
    if (!bad) {
        *cmd_index = i;
        int next = 0;
        args[nargs] = NULL;
        if (cf_conf_parse_flags(&global_table, g, nargs, args, &next, err) == 0)
            rc = 0;
    }
    for (size_t k = 0; k < nowned; k++)
        free(owned[k]);
    free(owned);
    free(args);
out:
    for (size_t k = 0; k < sizeof(envbuf) / sizeof(envbuf[0]); k++)
        free(envbuf[k]);
    return rc;
}

void cf_cli_globals_free(cf_cli_globals *g)
{
    cf_conf_free(&global_table, g);
}

void cf_cli_print_usage(FILE *out)
{
    fputs("Usage: codefleet [GLOBAL OPTIONS] COMMAND [ARGS]\n"
          "\n"
          "Commands:\n"
          "  submit [FLAGS] [-- ARGV...]   submit one request and (by default) wait for its result\n"
          "  wait ID [--since AGO | --since-us EPOCH_US]\n"
          "                                wait for the result of a request submitted elsewhere\n"
          "  follow ID [--since AGO | --since-us EPOCH_US]\n"
          "                                reattach: its output so far, as it comes, then its result\n"
          "  cancel ID [--reason TEXT] [--topic T] [--wait]\n"
          "                                stop a request, or keep it from starting\n"
          "  batch FILE.jsonl [--concurrency N]\n"
          "                                submit one JSON request per line, wait for all, summarize\n"
          "  tail [--from-beginning] [--count N]\n"
          "                                print results as they arrive\n"
          "  topics create [--partitions N] [NAME...]\n"
          "                                create topics (default: the request and result topics)\n"
          "  acl allow PRINCIPAL OPERATION:RESOURCE:NAME[*]...\n"
          "                                grant a principal access on the broker (super user only)\n"
          "  files ls|cat|put|rm|grep|replace|insert|patch WS ...\n"
          "                                a workspace's files through the fleet (under the topic's profile)\n"
          "  workspace create|put|get|ls|rm|snapshot|info|delete ...\n"
          "                                versioned file workspaces in Redis (the operator's direct tool)\n"
          "  checkpoint save|load|list|history|rollback|rm ...\n"
          "                                per-thread checkpoints of agent state in Redis\n"
          "  events publish|tail|wait ...  collaboration events on the events topic\n"
          "  doctor [--no-roundtrip] [--no-redis]\n"
          "                                check broker, topics, workers, Redis and a round trip; say what to fix\n"
          "  top [--once] [--interval S] [--json]\n"
          "                                the fleet at a glance: workers, busy slots, waiting, lag, answer rates\n"
          "  mcp                           serve the fleet as Model Context Protocol tools on stdin/stdout\n"
          "  version [--json], --version   print the version (and librdkafka's)\n"
          "\n"
          "Global options (before the command):\n"
          "  --config=FILE                 settings file (key = value, e.g. kafka.sasl.password, redis-password);\n"
          "                                also CODEFLEET_CONFIG; lowest precedence after the defaults\n",
          out);
    for (size_t i = 0; i < global_table.nprops; i++) {
        const cf_conf_prop *p = &global_props[i];
        bool kvl = p->type == CF_CONF_KVLIST;
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s%s", p->name,
                 kvl ? "NAME=VALUE" : p->type == CF_CONF_BOOL ? "" : p->type == CF_CONF_DURATION ? " DURATION" : " VALUE");
        fprintf(out, "  %-29s %s", flag, p->doc);
        if (p->def && p->type != CF_CONF_BOOL)
            fprintf(out, " (default: %s)", p->def);
        fputc('\n', out);
    }
    fputs("  -X NAME=VALUE                 same as --kafka.NAME=VALUE\n"
          "Environment: CODEFLEET_BROKERS, CODEFLEET_REQUEST_TOPIC, CODEFLEET_RESULT_TOPIC,\n"
          "CODEFLEET_EVENTS_TOPIC, CODEFLEET_REDIS, CODEFLEET_REDIS_USER, CODEFLEET_REDIS_PASSWORD,\n"
          "CODEFLEET_REDIS_PREFIX, CODEFLEET_DLQ_TOPIC, CODEFLEET_WORKERS_TOPIC, CODEFLEET_WORKER_GROUP,\n"
          "CODEFLEET_CONFIG (the settings file).\n"
          "\n"
          "Exit codes:\n"
          "  0  success (result status success, or the command succeeded)\n"
          "  1  the execution finished with failed, timeout, memory_exceeded or compile_failed\n"
          "     (batch: not every request succeeded)\n"
          "  2  usage error or invalid input\n"
          "  3  the request was rejected\n"
          "  4  internal_error reported by the worker\n"
          "  5  no result within --timeout\n"
          "  6  Kafka / Redis / transport error\n"
          "  7  not found (workspace, file, thread, checkpoint)\n"
          "  8  conflict (compare-and-set lost, already exists, stale writer)\n"
          "  9  the request was cancelled\n"
          "\n"
          "Run 'codefleet COMMAND --help' for the flags of a command.\n",
          out);
}

int cf_cli_exit_for_status(cf_status s)
{
    switch (s) {
    case CF_STATUS_SUCCESS:
        return CF_EXIT_OK;
    case CF_STATUS_REJECTED:
        return CF_EXIT_REJECTED;
    case CF_STATUS_INTERNAL_ERROR:
        return CF_EXIT_INTERNAL;
    case CF_STATUS_CANCELLED:
        return CF_EXIT_CANCELLED;
    case CF_STATUS_FAILED:
    case CF_STATUS_TIMEOUT:
    case CF_STATUS_MEMORY_EXCEEDED:
    case CF_STATUS_COMPILE_FAILED:
    default:
        return CF_EXIT_FAILED;
    }
}

int cf_cli_exit_for_state_error(const cf_error *err)
{
    switch (err->code) {
    case CF_E_INVALID:
    case CF_E_LIMIT:
    case CF_E_UNSUPPORTED:
        return CF_EXIT_USAGE;
    case CF_E_NOT_FOUND:
        return CF_EXIT_NOT_FOUND;
    case CF_E_CONFLICT:
        return CF_EXIT_CONFLICT;
    case CF_E_TIMEOUT:
        return CF_EXIT_NO_RESULT;
    default:
        return CF_EXIT_TRANSPORT;
    }
}

int cf_cli_exit_for_error(const cf_error *err)
{
    switch (err->code) {
    case CF_E_INVALID:
    case CF_E_LIMIT:
    case CF_E_NOT_FOUND:
    case CF_E_UNSUPPORTED:
        return CF_EXIT_USAGE;
    case CF_E_TIMEOUT:
        return CF_EXIT_NO_RESULT;
    default:
        return CF_EXIT_TRANSPORT;
    }
}

const char *cf_cli_exit_name(int exit_code)
{
    switch (exit_code) {
    case CF_EXIT_OK: return "ok";
    case CF_EXIT_FAILED: return "failed";
    case CF_EXIT_USAGE: return "usage";
    case CF_EXIT_REJECTED: return "rejected";
    case CF_EXIT_INTERNAL: return "internal";
    case CF_EXIT_NO_RESULT: return "no_result";
    case CF_EXIT_TRANSPORT: return "transport";
    case CF_EXIT_NOT_FOUND: return "not_found";
    case CF_EXIT_CONFLICT: return "conflict";
    case CF_EXIT_CANCELLED: return "cancelled";
    default: return "error";
    }
}

static bool report_json;

void cf_cli_set_report_json(bool json)
{
    report_json = json;
}

int cf_cli_report(const char *cmd, int exit_code, const char *message)
{
    if (!report_json) {
        fprintf(stderr, "codefleet%s%s: %s\n", cmd && cmd[0] ? " " : "", cmd ? cmd : "", message);
        return exit_code;
    }
    json_t *e = json_pack("{s:s, s:s, s:i}", "kind", cf_cli_exit_name(exit_code), "message", message, "exit_code",
                          exit_code);
    if (e && cmd && cmd[0])
        json_object_set_new(e, "command", json_string(cmd));
    json_t *o = e ? json_pack("{s:o}", "error", e) : NULL;
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    if (!line) { /* not valid UTF-8, or out of memory: the text still goes out */
        fprintf(stderr, "codefleet%s%s: %s\n", cmd && cmd[0] ? " " : "", cmd ? cmd : "", message);
        return exit_code;
    }
    fflush(stdout);
    fprintf(stderr, "%s\n", line);
    printf("%s\n", line);
    fflush(stdout);
    free(line);
    return exit_code;
}

void cf_cli_report_line(const char *cmd, const char *level, const char *kind, const char *where, json_t *fields,
                        const char *message)
{
    if (report_json) {
        json_t *e = fields && json_is_object(fields) ? fields : json_object();
        if (e != fields)
            json_decref(fields);
        fields = NULL;
        if (e) {
            json_object_set_new(e, "kind", json_string(kind));
            json_object_set_new(e, "message", json_string(message));
            if (cmd && cmd[0])
                json_object_set_new(e, "command", json_string(cmd));
        }
        json_t *o = e ? json_pack("{s:o}", level, e) : NULL;
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(o);
        if (line) {
            fprintf(stderr, "%s\n", line);
            free(line);
            return;
        }
        /* not valid UTF-8, or out of memory: the text still goes out */
    }
    json_decref(fields);
    fprintf(stderr, "codefleet%s%s: %s%s%s\n", cmd && cmd[0] ? " " : "", cmd ? cmd : "", where ? where : "",
            where ? ": " : "", message);
}

int cf_cli_report_usage(const char *cmd, const char *help_cmd, const char *message)
{
    char text[1200];
    snprintf(text, sizeof(text), "%s (see codefleet %s --help)", message, help_cmd);
    return cf_cli_report(cmd, CF_EXIT_USAGE, text);
}

int cf_cli_report_error(const char *cmd, const char *what, const cf_error *err, int exit_code)
{
    char hint[600], text[1200];
    cf_cli_explain(err, hint, sizeof(hint));
    if (hint[0]) {
        /* The raw detail stays available: CODEFLEET_LOG_LEVEL=debug. */
        cf_log_debug("cli", "%s%s%s", what ? what : "", what ? ": " : "", err->msg);
        return cf_cli_report(cmd, exit_code, hint);
    }
    snprintf(text, sizeof(text), "%s%s%s", what ? what : "", what ? ": " : "", err->msg);
    return cf_cli_report(cmd, exit_code, text);
}

/* ---------------------------------------------------------------------------
 * Helpers shared by the command files.
 */
volatile sig_atomic_t cf_cli_stop;

static void on_signal(int sig)
{
    (void)sig;
    cf_cli_stop = 1;
}

void cf_cli_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

const char *cf_cli_opt_name(const struct option *opts, int val)
{
    for (const struct option *o = opts; o->name; o++)
        if (o->val == val)
            return o->name;
    return "?";
}

/* ---------------------------------------------------------------------------
 * Files.
 */
int cf_cli_read_fd(int fd, size_t cap, const char *name, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    cf_buf b;
    cf_buf_init(&b, cap);
    uint8_t chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            cf_buf_free(&b);
            return cf_error_set_errno(err, CF_E_SYSTEM, e, "%s", name);
        }
        if (n == 0)
            break;
        if (cf_buf_append(&b, chunk, (size_t)n, err) < 0) {
            cf_buf_free(&b);
            return cf_error_wrap(err, "%s (limit %zu bytes)", name, cap);
        }
    }
    out->data = cf_buf_steal(&b, &out->len);
    if (!out->data) {
        /* Empty: keep "present but empty" distinguishable from absent. */
        out->data = malloc(1);
        if (!out->data)
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
        out->len = 0;
    }
    return 0;
}

int cf_cli_read_file(const char *path, size_t cap, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cf_error_set_errno(err, errno == ENOENT ? CF_E_NOT_FOUND : CF_E_SYSTEM, errno, "%s", path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "%s", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cf_error_set(err, CF_E_INVALID, "%s: not a regular file", path);
    }
    int rc = cf_cli_read_fd(fd, cap, path, out, err);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Request building.
 */
static int set_str(char **dst, const char *src, cf_error *err)
{
    if (cf_str_set(dst, src) < 0)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    return 0;
}

static int strv_push(char ***v, size_t *n, const char *s, cf_error *err)
{
    char **nv = realloc(*v, (*n + 1) * sizeof(**v));
    if (!nv)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    *v = nv;
    nv[*n] = cf_strdup(s);
    if (!nv[*n])
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    (*n)++;
    return 0;
}

/* "K=V" -> appended entry; K must be non-empty. */
static int strmap_push_kv(cf_strmap_entry **m, size_t *n, const char *kv, const char *what, cf_error *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return cf_error_set(err, CF_E_INVALID, "%s: expected NAME=VALUE, got '%s'", what, kv);
    cf_strmap_entry *nm = realloc(*m, (*n + 1) * sizeof(**m));
    if (!nm)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    *m = nm;
    nm[*n].key = cf_strndup(kv, (size_t)(eq - kv));
    nm[*n].value = cf_strdup(eq + 1);
    if (!nm[*n].key || !nm[*n].value) {
        free(nm[*n].key);
        free(nm[*n].value);
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    (*n)++;
    return 0;
}

static cf_language language_from_path(const char *path);

static int set_code_file(cf_request *req, const char *path, cf_error *err)
{
    cf_bytes b;
    if (cf_cli_read_file(path, CF_CLI_MAX_FILE_BYTES, &b, err) < 0)
        return -1;
    if (req->language == CF_LANG_NONE)
        req->language = language_from_path(path);
    if (req->language == CF_LANG_WASM) {
        free(req->module.data);
        req->module = b;
    } else {
        free(req->code.data);
        req->code = b;
    }
    return 0;
}

static int add_file(cf_request *req, const char *spec, cf_error *err)
{
    const char *eq = strchr(spec, '=');
    /* "--file main.rs": the program's source, as compilers are called. */
    if (!eq && !req->code.data && !req->module.data)
        return set_code_file(req, spec, err) < 0 ? cf_error_wrap(err, "--file") : 0;
    if (!eq || eq == spec || !eq[1])
        return cf_error_set(err, CF_E_INVALID, "--file: expected REL=LOCALPATH, got '%s'", spec);
    cf_file *nf = realloc(req->files, (req->n_files + 1) * sizeof(*nf));
    if (!nf)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    req->files = nf;
    cf_file *f = &nf[req->n_files];
    memset(f, 0, sizeof(*f));
    if (cf_cli_read_file(eq + 1, CF_CLI_MAX_FILE_BYTES, &f->content, err) < 0)
        return cf_error_wrap(err, "--file");
    f->path = cf_strndup(spec, (size_t)(eq - spec));
    if (!f->path) {
        free(f->content.data);
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    req->n_files++;
    return 0;
}

static int parse_duration_flag(const char *v, int64_t *out, const char *what, cf_error *err)
{
    if (cf_parse_duration_us(v, out, what, err) < 0)
        return -1;
    if (*out <= 0)
        return cf_error_set(err, CF_E_INVALID, "%s must be positive", what);
    return 0;
}

static int parse_size_flag(const char *v, int64_t *out, const char *what, cf_error *err)
{
    if (cf_parse_size(v, out, what, err) < 0)
        return -1;
    if (*out <= 0)
        return cf_error_set(err, CF_E_INVALID, "%s must be positive", what);
    return 0;
}

static cf_language language_from_path(const char *path)
{
    const char *dot = strrchr(path, '.');
    if (!dot || strchr(dot, '/'))
        return CF_LANG_NONE;
    if (strcmp(dot, ".py") == 0)
        return CF_LANG_PYTHON;
    if (strcmp(dot, ".js") == 0 || strcmp(dot, ".mjs") == 0 || strcmp(dot, ".cjs") == 0)
        return CF_LANG_JAVASCRIPT;
    if (strcmp(dot, ".sh") == 0)
        return CF_LANG_SHELL;
    if (strcmp(dot, ".wasm") == 0)
        return CF_LANG_WASM;
    if (strcmp(dot, ".c") == 0)
        return CF_LANG_C;
    if (strcmp(dot, ".cpp") == 0 || strcmp(dot, ".cc") == 0 || strcmp(dot, ".cxx") == 0)
        return CF_LANG_CPP;
    if (strcmp(dot, ".rs") == 0)
        return CF_LANG_RUST;
    if (strcmp(dot, ".go") == 0)
        return CF_LANG_GO;
    if (strcmp(dot, ".ts") == 0)
        return CF_LANG_TYPESCRIPT;
    return CF_LANG_NONE;
}

enum {
    OPT_ID = 256,
    OPT_CODE,
    OPT_CODE_FILE,
    OPT_MODULE,
    OPT_FILE,
    OPT_STDIN_FILE,
    OPT_INPUT,
    OPT_ENV,
    OPT_BACKEND,
    OPT_IMAGE,
    OPT_TIMEOUT_EXEC,
    OPT_CPU_TIME,
    OPT_MEMORY,
    OPT_MAX_PROCESSES,
    OPT_MAX_STDOUT,
    OPT_MAX_STDERR,
    OPT_MAX_FILE_SIZE,
    OPT_NETWORK,
    OPT_FILESYSTEM,
    OPT_ENV_ALLOW,
    OPT_WORKSPACE,
    OPT_SESSION,
    OPT_THREAD,
    OPT_IDENTITY,
    OPT_REPLY_TO,
    OPT_DEADLINE,
    OPT_REQUEST_FILE,
    OPT_NO_WAIT,
    OPT_CASE,
    OPT_CASES,
    OPT_STOP_ON_FAILURE,
    OPT_COLLECT,
    OPT_FUNCTION,
    OPT_COMPILE_FLAG,
    OPT_COMPILE_TIMEOUT,
    OPT_COMPILE_MEMORY,
    OPT_STREAM,
    OPT_FOLLOW,
};

static const struct option submit_longopts[] = {
    {"id", required_argument, NULL, OPT_ID},
    {"language", required_argument, NULL, 'l'},
    {"code", required_argument, NULL, OPT_CODE},
    {"code-file", required_argument, NULL, OPT_CODE_FILE},
    {"module", required_argument, NULL, OPT_MODULE},
    {"file", required_argument, NULL, OPT_FILE},
    {"stdin-file", required_argument, NULL, OPT_STDIN_FILE},
    {"input", required_argument, NULL, OPT_INPUT},
    {"env", required_argument, NULL, OPT_ENV},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"image", required_argument, NULL, OPT_IMAGE},
    {"timeout-exec", required_argument, NULL, OPT_TIMEOUT_EXEC},
    {"cpu-time", required_argument, NULL, OPT_CPU_TIME},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"max-processes", required_argument, NULL, OPT_MAX_PROCESSES},
    {"max-stdout", required_argument, NULL, OPT_MAX_STDOUT},
    {"max-stderr", required_argument, NULL, OPT_MAX_STDERR},
    {"max-file-size", required_argument, NULL, OPT_MAX_FILE_SIZE},
    {"network", required_argument, NULL, OPT_NETWORK},
    {"filesystem", required_argument, NULL, OPT_FILESYSTEM},
    {"env-allow", required_argument, NULL, OPT_ENV_ALLOW},
    {"workspace", required_argument, NULL, OPT_WORKSPACE},
    {"session", required_argument, NULL, OPT_SESSION},
    {"thread", required_argument, NULL, OPT_THREAD},
    {"identity", required_argument, NULL, OPT_IDENTITY},
    {"reply-to", required_argument, NULL, OPT_REPLY_TO},
    {"deadline", required_argument, NULL, OPT_DEADLINE},
    {"request-file", required_argument, NULL, OPT_REQUEST_FILE},
    {"no-wait", no_argument, NULL, OPT_NO_WAIT},
    {"case", required_argument, NULL, OPT_CASE},
    {"cases", required_argument, NULL, OPT_CASES},
    {"stop-on-failure", no_argument, NULL, OPT_STOP_ON_FAILURE},
    {"collect", required_argument, NULL, OPT_COLLECT},
    {"function", no_argument, NULL, OPT_FUNCTION},
    {"compile-flag", required_argument, NULL, OPT_COMPILE_FLAG},
    {"compile-timeout", required_argument, NULL, OPT_COMPILE_TIMEOUT},
    {"compile-memory", required_argument, NULL, OPT_COMPILE_MEMORY},
    {"stream", no_argument, NULL, OPT_STREAM},
    {"follow", no_argument, NULL, OPT_FOLLOW},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Whether a submit flag given as arg (no "=value") takes the next word
 * as its value. */
static bool submit_flag_takes_value(const char *arg)
{
    if (strcmp(arg, "-l") == 0)
        return true;
    if (strncmp(arg, "--", 2) != 0 || strchr(arg, '='))
        return false;
    for (const struct option *o = submit_longopts; o->name; o++)
        if (strcmp(o->name, arg + 2) == 0)
            return o->has_arg == required_argument;
    return false;
}

/* "--case stdin=1 2\n,expect=3,arg=-v,input={...},name=small": keys as
 * in SPEC.md's case object; values take C escapes (\n \t \\ \,) and run to
 * the next ",key=". */
static json_t *case_from_spec(const char *spec, cf_error *err)
{
    static const char *const keys[] = {"stdin", "expect", "input", "arg", "name"};
    json_t *c = json_object();
    json_t *argv = json_array();
    if (!c || !argv) {
        json_decref(c);
        json_decref(argv);
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        return NULL;
    }
    const char *p = spec;
    while (*p) {
        int k = -1;
        size_t kl = 0;
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
            kl = strlen(keys[i]);
            if (strncmp(p, keys[i], kl) == 0 && p[kl] == '=') {
                k = (int)i;
                break;
            }
        }
        if (k < 0) {
            cf_error_set(err, CF_E_INVALID, "--case: expected stdin=|expect=|input=|arg=|name= at '%.40s'", p);
            goto fail;
        }
        p += kl + 1;
        /* The value, unescaped, up to an unescaped ",key=". */
        char *val = malloc(strlen(p) + 1);
        if (!val) {
            cf_error_set(err, CF_E_NOMEM, "out of memory");
            goto fail;
        }
        size_t n = 0;
        while (*p) {
            if (*p == '\\' && p[1]) {
                p++;
                val[n++] = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
                p++;
                continue;
            }
            if (*p == ',') {
                bool next_key = false;
                for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
                    if (strncmp(p + 1, keys[i], strlen(keys[i])) == 0 && p[1 + strlen(keys[i])] == '=')
                        next_key = true;
                if (next_key) {
                    p++;
                    break;
                }
                /* ",word=" that is no key is a typo ("expected="), not a
                 * value: it would silently change stdin or the expectation. */
                const char *w = p + 1;
                while ((*w >= 'a' && *w <= 'z') || (*w >= 'A' && *w <= 'Z') || *w == '_')
                    w++;
                if (w > p + 1 && *w == '=') {
                    free(val);
                    cf_error_set(err, CF_E_INVALID,
                                 "--case: unknown key '%.*s' (keys: stdin, expect, input, arg, name; write \\, for a "
                                 "comma in a value)",
                                 (int)(w - p - 1), p + 1);
                    goto fail;
                }
            }
            val[n++] = *p++;
        }
        val[n] = '\0';
        int rc = 0;
        if (k == 0)
            rc = json_object_set_new(c, "stdin", json_stringn(val, n));
        else if (k == 1)
            rc = json_object_set_new(c, "expect_stdout", json_stringn(val, n));
        else if (k == 3)
            rc = json_array_append_new(argv, json_stringn(val, n));
        else if (k == 4)
            rc = json_object_set_new(c, "name", json_stringn(val, n));
        else {
            json_error_t je;
            json_t *in = json_loads(val, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
            if (!in) {
                free(val);
                cf_error_set(err, CF_E_INVALID, "--case: input is not JSON: %s", je.text);
                goto fail;
            }
            rc = json_object_set_new(c, "input", in);
        }
        free(val);
        if (rc < 0) {
            cf_error_set(err, CF_E_INVALID, "--case: a value is not valid UTF-8");
            goto fail;
        }
    }
    if (json_array_size(argv))
        json_object_set(c, "argv", argv);
    json_decref(argv);
    json_t *one = json_array();
    if (!one || json_array_append_new(one, c) < 0) {
        json_decref(one);
        cf_error_set(err, CF_E_NOMEM, "out of memory");
        return NULL;
    }
    return one;
fail:
    json_decref(c);
    json_decref(argv);
    return NULL;
}

/* One case object per line ('#' comments and blank lines skipped). */
static json_t *cases_from_jsonl(const char *path, cf_error *err)
{
    cf_bytes text = {0};
    if (cf_cli_read_file(path, CF_CLI_MAX_FILE_BYTES, &text, err) < 0) {
        cf_error_wrap(err, "--cases");
        return NULL;
    }
    json_t *a = json_array();
    size_t line = 0;
    const char *s = (const char *)text.data;
    size_t i = 0;
    while (a && i < text.len) {
        size_t e = i;
        while (e < text.len && s[e] != '\n')
            e++;
        line++;
        size_t b = i;
        while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r'))
            b++;
        if (b < e && s[b] != '#') {
            json_error_t je;
            json_t *o = json_loadb(s + b, e - b, JSON_REJECT_DUPLICATES, &je);
            if (!o || !json_is_object(o)) {
                cf_error_set(err, CF_E_INVALID, "%s:%zu: %s", path, line, o ? "expected a JSON object" : je.text);
                json_decref(o);
                json_decref(a);
                free(text.data);
                return NULL;
            }
            /* A typo ("expect") would silently drop an expectation: the
             * schema ignores unknown keys, this file is ours to check. */
            static const char *const known[] = {"name", "stdin", "input", "input_msgpack", "argv", "expect_stdout"};
            const char *key;
            json_t *val;
            json_object_foreach(o, key, val) {
                bool ok = false;
                for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
                    ok = ok || strcmp(key, known[k]) == 0;
                if (!ok) {
                    cf_error_set(err, CF_E_INVALID,
                                 "%s:%zu: unknown key '%.40s' (a case has name, stdin, input, argv, expect_stdout)",
                                 path, line, key);
                    json_decref(o);
                    json_decref(a);
                    free(text.data);
                    return NULL;
                }
            }
            json_array_append_new(a, o);
        }
        i = e + 1;
    }
    free(text.data);
    if (!a)
        cf_error_set(err, CF_E_NOMEM, "out of memory");
    return a;
}

/* Cases travel through the schema's own JSON reader (one validation). */
static int append_cases(cf_request *req, json_t *cases, const char *what, cf_error *err)
{
    json_t *wrap = json_pack("{s:i, s:s, s:s, s:[s], s:o}", "v", CF_SCHEMA_VERSION, "id", "cases", "language",
                             "command", "argv", "x", "cases", cases);
    if (!wrap)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    cf_request tmp;
    int rc = cf_request_from_json(wrap, &tmp, err);
    json_decref(wrap);
    if (rc < 0)
        return cf_error_wrap(err, "%s", what);
    cf_case *v = realloc(req->cases, (req->n_cases + tmp.n_cases) * sizeof(*v));
    if (!v && req->n_cases + tmp.n_cases) {
        cf_request_clear(&tmp);
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    req->cases = v;
    memcpy(req->cases + req->n_cases, tmp.cases, tmp.n_cases * sizeof(*v));
    req->n_cases += tmp.n_cases;
    free(tmp.cases);
    tmp.cases = NULL;
    tmp.n_cases = 0;
    cf_request_clear(&tmp);
    return 0;
}

static bool is_global_option(const char *name)
{
    if (strcmp(name, "-X") == 0)
        return true;
    if (strncmp(name, "--", 2) != 0)
        return false;
    const char *n = name + 2;
    if (strcmp(n, "config") == 0 || strcmp(n, "no-json") == 0)
        return true;
    for (size_t i = 0; i < global_table.nprops; i++) {
        const cf_conf_prop *p = &global_props[i];
        size_t len = strlen(p->name);
        if (p->type == CF_CONF_KVLIST ? strncmp(n, p->name, len) == 0 : strcmp(n, p->name) == 0)
            return true;
    }
    return false;
}

bool cf_cli_json_asked(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc && argv[i][0] == '-' && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--json") == 0 || strcmp(argv[i], "--json=true") == 0)
            json = true;
        else if (strcmp(argv[i], "--no-json") == 0 || strcmp(argv[i], "--json=false") == 0)
            json = false;
        else if (strcmp(argv[i], "-X") == 0 || (strncmp(argv[i], "-X", 2) != 0 && global_takes_value(argv[i])))
            i++; /* its value */
    }
    return json;
}

const char *cf_cli_misplaced_global(const char *cmd, int argc, char **argv, char *buf, size_t size)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        char name[80];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(argv[i], "="), argv[i]);
        /* Only a whole name: a command's own flag never has one (getopt
         * would take "--timeout" for submit's "--timeout-exec"). */
        if (strncmp(name, "--", 2) == 0 && is_global_option(name)) {
            snprintf(buf, size, "%s is a global option: give it before the command (codefleet %s%s %s ...)", name,
                     name, global_takes_value(name) ? " VALUE" : "", cmd);
            return buf;
        }
        /* A flag's value is not an option, whatever it reads
         * (--compile-flag --json=diagnostic-short, --code --json). */
        if (submit_flag_takes_value(argv[i]))
            i++;
    }
    return NULL;
}

const char *cf_cli_option_error(const char *cmd, int argc, char **argv, char *buf, size_t size)
{
    const char *bad = optind > 0 && optind - 1 < argc ? argv[optind - 1] : NULL;
    char name[80];
    if (bad && strncmp(bad, "--", 2) == 0)
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(bad, "="), bad);
    else if (optopt > 0 && optopt < 256 && isprint(optopt))
        snprintf(name, sizeof(name), "-%c", optopt);
    else
        snprintf(name, sizeof(name), "%s", bad ? bad : "?");
    if (is_global_option(name))
        snprintf(buf, size, "%s is a global option: give it before the command (codefleet %s%s %s ...)", name, name,
                 global_takes_value(name) ? " VALUE" : "", cmd);
    else
        snprintf(buf, size, "option %s: unknown or missing its value", name);
    return buf;
}

static int getopt_error(int argc, char **argv, cf_error *err)
{
    char msg[300];
    return cf_error_set(err, CF_E_INVALID, "%s", cf_cli_option_error(argv[0], argc, argv, msg, sizeof(msg)));
}

static int load_request_file(const char *path, cf_request *req, cf_error *err)
{
    cf_bytes text = {0};
    if (cf_cli_read_file(path, CF_CLI_MAX_FILE_BYTES, &text, err) < 0)
        return cf_error_wrap(err, "--request-file");
    json_error_t je;
    json_t *obj = json_loadb((const char *)text.data, text.len, JSON_REJECT_DUPLICATES, &je);
    free(text.data);
    if (!obj)
        return cf_error_set(err, CF_E_INVALID, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    int rc = cf_cli_request_from_json(obj, req, err);
    json_decref(obj);
    if (rc < 0)
        return cf_error_wrap(err, "%s", path);
    return 0;
}

/* What a group of submit flags returns for an option not in the group
 * (its own results are 0 or -1). */
#define FLAG_NOT_OURS 1

/* -l: a language; "js" is JavaScript on the embedded js backend
 * (QuickJS-ng). */
static int set_language_flag(const char *v, cf_request *req, cf_cli_submit_opts *opts, cf_error *err)
{
    if (strcmp(v, "js") == 0) {
        req->language = CF_LANG_JAVASCRIPT;
        opts->lang_js = true;
        return req->backend ? 0 : set_str(&req->backend, "js", err);
    }
    /* The names users type for the wire's (issue 33): the request always
     * carries the canonical one. */
    static const char *const aliases[][2] = {
        {"py", "python"},     {"python3", "python"}, {"sh", "shell"},     {"bash", "shell"},
        {"node", "javascript"}, {"ts", "typescript"}, {"c++", "cpp"},     {"cxx", "cpp"},
        {"golang", "go"},     {"rs", "rust"},
    };
    const char *name = v;
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(v, aliases[i][0]) == 0)
            name = aliases[i][1];
    if (cf_language_parse(name, &req->language) == 0)
        return 0;
    /* A near miss: the same name in other case ("Python"). */
    cf_language near;
    char lower[32];
    size_t n = 0;
    for (; v[n] && n + 1 < sizeof(lower); n++)
        lower[n] = (char)tolower((unsigned char)v[n]);
    lower[n] = '\0';
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(lower, aliases[i][0]) == 0)
            snprintf(lower, sizeof(lower), "%s", aliases[i][1]);
    if (!v[n] && strcmp(lower, v) != 0 && (cf_language_parse(lower, &near) == 0 || strcmp(lower, "js") == 0))
        return cf_error_set(err, CF_E_INVALID, "--language: unknown '%s': did you mean '%s'?", v,
                            strcmp(lower, "js") == 0 ? "js" : cf_language_name(near));
    return cf_error_set(err, CF_E_INVALID,
                        "--language: unknown '%s' (command|shell|python|javascript|js|wasm|c|cpp|rust|go|typescript; "
                        "also py, sh, bash, node, ts, c++, golang, rs)",
                        v);
}

/* --input: JSON text, carried as msgpack. */
static int set_input_flag(const char *v, cf_request *req, cf_error *err)
{
    json_error_t je;
    json_t *j = json_loads(v, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return cf_error_set(err, CF_E_INVALID, "--input: invalid JSON: %s", je.text);
    free(req->input.data);
    req->input.data = NULL;
    req->input.len = 0;
    int rc = cf_json_to_msgpack(j, &req->input, err);
    json_decref(j);
    return rc < 0 ? cf_error_wrap(err, "--input") : 0;
}

/* The flags that say what runs, on what and with which data. */
static int program_flag(int c, const char *v, cf_request *req, cf_cli_submit_opts *opts, cf_error *err)
{
    switch (c) {
    case OPT_ID:
        if (!cf_id_valid(v, strlen(v)))
            return cf_error_set(err, CF_E_INVALID, "--id: 1..%d printable characters without spaces", CF_ID_MAX);
        return set_str(&req->id, v, err);
    case 'l':
        return set_language_flag(v, req, opts, err);
    case OPT_CODE:
        free(req->code.data);
        req->code.data = NULL;
        if (cf_bytes_set(&req->code, v, strlen(v)) < 0)
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
        return 0;
    case OPT_CODE_FILE:
        return set_code_file(req, v, err) < 0 ? cf_error_wrap(err, "--code-file") : 0;
    case OPT_MODULE:
        if (req->language == CF_LANG_NONE)
            req->language = CF_LANG_WASM;
        if (req->language != CF_LANG_WASM)
            return cf_error_set(err, CF_E_INVALID, "--module is for language wasm");
        return set_code_file(req, v, err) < 0 ? cf_error_wrap(err, "--module") : 0;
    case OPT_FILE:
        return add_file(req, v, err);
    case OPT_STDIN_FILE:
        free(req->stdin_data.data);
        req->stdin_data.data = NULL;
        if (cf_cli_read_file(v, CF_CLI_MAX_FILE_BYTES, &req->stdin_data, err) < 0)
            return cf_error_wrap(err, "--stdin-file");
        return 0;
    case OPT_INPUT:
        return set_input_flag(v, req, err);
    case OPT_ENV:
        return strmap_push_kv(&req->env, &req->n_env, v, "--env", err);
    case OPT_BACKEND:
        return set_str(&req->backend, v, err);
    case OPT_IMAGE:
        if (!cf_image_name_valid(v))
            return cf_error_set(err, CF_E_INVALID, "--image: '%s' is not an image name (a-z 0-9 . _ -)", v);
        return set_str(&req->image, v, err);
    default:
        return FLAG_NOT_OURS;
    }
}

/* --network: disabled|enabled. */
static int set_network_flag(const char *v, cf_policy *p, cf_error *err)
{
    if (strcmp(v, "disabled") == 0)
        p->network = CF_NET_DISABLED;
    else if (strcmp(v, "enabled") == 0)
        p->network = CF_NET_ENABLED;
    else
        return cf_error_set(err, CF_E_INVALID, "--network: expected disabled|enabled, got '%s'", v);
    return 0;
}

/* --filesystem: none|workspace_ro|workspace_rw. */
static int set_filesystem_flag(const char *v, cf_policy *p, cf_error *err)
{
    if (strcmp(v, "none") == 0)
        p->fs_mode = CF_FS_NONE;
    else if (strcmp(v, "workspace_ro") == 0)
        p->fs_mode = CF_FS_WORKSPACE_RO;
    else if (strcmp(v, "workspace_rw") == 0)
        p->fs_mode = CF_FS_WORKSPACE_RW;
    else
        return cf_error_set(err, CF_E_INVALID, "--filesystem: expected none|workspace_ro|workspace_rw, got '%s'", v);
    return 0;
}

/* The flags of the request's policy: limits, network, filesystem,
 * environment. */
static int policy_flag(int c, const char *v, cf_policy *p, cf_error *err)
{
    switch (c) {
    case OPT_TIMEOUT_EXEC:
        return parse_duration_flag(v, &p->timeout_us, "--timeout-exec", err);
    case OPT_CPU_TIME:
        return parse_duration_flag(v, &p->cpu_time_us, "--cpu-time", err);
    case OPT_MEMORY:
        return parse_size_flag(v, &p->memory_bytes, "--memory", err);
    case OPT_MAX_PROCESSES:
        return cf_parse_i64(v, 1, 1000000, &p->max_processes, "--max-processes", err);
    case OPT_MAX_STDOUT:
        return parse_size_flag(v, &p->max_stdout_bytes, "--max-stdout", err);
    case OPT_MAX_STDERR:
        return parse_size_flag(v, &p->max_stderr_bytes, "--max-stderr", err);
    case OPT_MAX_FILE_SIZE:
        return parse_size_flag(v, &p->max_file_size_bytes, "--max-file-size", err);
    case OPT_NETWORK:
        return set_network_flag(v, p, err);
    case OPT_FILESYSTEM:
        return set_filesystem_flag(v, p, err);
    case OPT_ENV_ALLOW:
        p->env_allow_set = true;
        return strv_push(&p->env_allow, &p->n_env_allow, v, err);
    case OPT_COMPILE_TIMEOUT:
        return parse_duration_flag(v, &p->compile_timeout_us, "--compile-timeout", err);
    case OPT_COMPILE_MEMORY:
        return parse_size_flag(v, &p->compile_memory_bytes, "--compile-memory", err);
    default:
        return FLAG_NOT_OURS;
    }
}

/* The flags of the request's state and routing (workspace, thread,
 * reply-to, deadline) and of the CLI itself (waiting, streaming, help). */
static int routing_flag(int c, const char *v, cf_request *req, cf_cli_submit_opts *opts, cf_error *err)
{
    switch (c) {
    case OPT_WORKSPACE:
        return set_str(&req->workspace, v, err);
    case OPT_SESSION:
        return set_str(&req->session, v, err);
    case OPT_THREAD:
        return set_str(&req->thread, v, err);
    case OPT_IDENTITY:
        return set_str(&req->identity, v, err);
    case OPT_REPLY_TO:
        return set_str(&req->reply_to, v, err);
    case OPT_DEADLINE: {
        int64_t d;
        if (parse_duration_flag(v, &d, "--deadline", err) < 0)
            return -1;
        req->deadline_us = cf_now_us() + d;
        return 0;
    }
    case OPT_REQUEST_FILE:
        return 0; /* applied in the first pass */
    case OPT_NO_WAIT:
        opts->no_wait = true;
        return 0;
    case OPT_STREAM:
        req->stream = true;
        return 0;
    case OPT_FOLLOW:
        req->stream = true;
        opts->follow = true;
        return 0;
    case 'h':
        opts->help = true;
        return 0;
    default:
        return FLAG_NOT_OURS;
    }
}

/* The flags of the language layer: test cases, collection, the function
 * harness, compile flags. */
static int pipeline_flag(int c, const char *v, cf_request *req, cf_error *err)
{
    switch (c) {
    case OPT_CASE: {
        json_t *one = case_from_spec(v, err);
        if (!one)
            return -1;
        return append_cases(req, one, "--case", err);
    }
    case OPT_CASES: {
        json_t *a = cases_from_jsonl(v, err);
        if (!a)
            return -1;
        return append_cases(req, a, v, err);
    }
    case OPT_STOP_ON_FAILURE:
        req->stop_on_failure = true;
        return 0;
    case OPT_COLLECT:
        return strv_push(&req->collect, &req->n_collect, v, err);
    case OPT_FUNCTION:
        req->harness = CF_HARNESS_FUNCTION;
        return 0;
    case OPT_COMPILE_FLAG:
        return strv_push(&req->compile_flags, &req->n_compile_flags, v, err);
    default:
        return FLAG_NOT_OURS;
    }
}

/* Applies one flag of pass 2 (c: its getopt code, v: its value) to req
 * and opts. */
static int apply_submit_flag(int c, const char *v, cf_request *req, cf_cli_submit_opts *opts, cf_error *err)
{
    int rc = program_flag(c, v, req, opts, err);
    if (rc == FLAG_NOT_OURS)
        rc = policy_flag(c, v, &req->policy, err);
    if (rc == FLAG_NOT_OURS)
        rc = routing_flag(c, v, req, opts, err);
    if (rc == FLAG_NOT_OURS)
        rc = pipeline_flag(c, v, req, err);
    if (rc == FLAG_NOT_OURS)
        rc = cf_error_set(err, CF_E_INVALID, "internal: unhandled option %d", c);
    return rc;
}

int cf_cli_parse_submit(int argc, char **argv, cf_request *req, cf_cli_submit_opts *opts, cf_error *err)
{
    memset(opts, 0, sizeof(*opts));
    const char *request_file = NULL;
    int c;
    char where[300];
    if (cf_cli_misplaced_global("submit", argc, argv, where, sizeof(where)))
        return cf_error_set(err, CF_E_INVALID, "%s", where);

    /* Pass 1: find --request-file (the base the other flags modify) and
     * syntax errors.  optind = 0 fully re-initialises glibc's getopt. */
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "+l:h", submit_longopts, NULL)) != -1) {
        if (c == '?' || c == ':')
            return getopt_error(argc, argv, err);
        if (c == OPT_REQUEST_FILE)
            request_file = optarg;
        if (c == 'h')
            opts->help = true;
    }
    if (opts->help)
        return 0;
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0)
        return cf_error_set(err, CF_E_INVALID, "unexpected argument '%s' (program arguments go after --)",
                            argv[optind]);
    if (request_file && load_request_file(request_file, req, err) < 0)
        goto fail;

    /* Pass 2: apply flags in order. */
    optind = 0;
    while ((c = getopt_long(argc, argv, "+l:h", submit_longopts, NULL)) != -1) {
        if (apply_submit_flag(c, optarg, req, opts, err) < 0)
            goto fail;
    }
    if (optind < argc) {
        /* Program arguments replace any from the request file. */
        for (size_t i = 0; i < req->argc; i++)
            free(req->argv[i]);
        free(req->argv);
        req->argv = NULL;
        req->argc = 0;
        for (int i = optind; i < argc; i++)
            if (strv_push(&req->argv, &req->argc, argv[i], err) < 0)
                goto fail;
    }

    if (req->language == CF_LANG_NONE) {
        if (req->argc > 0 && !req->code.data)
            req->language = CF_LANG_COMMAND;
        else {
            cf_error_set(err, CF_E_INVALID,
                         "--language is required (command|shell|python|javascript|wasm|c|cpp|rust|go|typescript)");
            goto fail;
        }
    }
    if (req->language == CF_LANG_COMMAND && req->argc == 0) {
        cf_error_set(err, CF_E_INVALID, "language command needs a program after --");
        goto fail;
    }
    if (req->language == CF_LANG_WASM && req->code.data) {
        cf_error_set(err, CF_E_INVALID, "wasm takes a module (--module FILE.wasm), not --code");
        goto fail;
    }
    if (req->module.data && req->language != CF_LANG_WASM) {
        cf_error_set(err, CF_E_INVALID, "--module is for language wasm, not %s", cf_language_name(req->language));
        goto fail;
    }
    if (opts->lang_js && req->backend && strcmp(req->backend, "js") != 0) {
        cf_error_set(err, CF_E_INVALID,
                     "-l js runs on the js backend (QuickJS-ng); for node on backend '%s' use -l javascript",
                     req->backend);
        goto fail;
    }
    if (req->language == CF_LANG_JAVASCRIPT && req->backend && strcmp(req->backend, "js") == 0 &&
        (req->argc > 0 || req->stdin_data.data || req->n_files > 0 || req->n_cases > 0)) {
        cf_error_set(err, CF_E_INVALID, "the js backend gives a script no %s: pass data with --input",
                     req->argc > 0          ? "arguments"
                     : req->stdin_data.data ? "stdin"
                     : req->n_files > 0     ? "files"
                                            : "cases");
        goto fail;
    }
    if ((req->language == CF_LANG_SHELL || req->language == CF_LANG_PYTHON ||
         req->language == CF_LANG_JAVASCRIPT || cf_language_compiled(req->language)) &&
        !req->code.data) {
        cf_error_set(err, CF_E_INVALID, "language %s needs --code or --code-file",
                     cf_language_name(req->language));
        goto fail;
    }
    if (!req->id) {
        char id[64];
        if (cf_dispatcher_new_id(id, sizeof(id), err) < 0 || set_str(&req->id, id, err) < 0)
            goto fail;
    }
    return 0;
fail:
    cf_request_clear(req);
    return -1;
}

int cf_cli_request_from_json(json_t *obj, cf_request *out, cf_error *err)
{
    if (!json_is_object(obj))
        return cf_error_set(err, CF_E_INVALID, "a request must be a JSON object");
    if (!json_object_get(obj, "id")) {
        char id[64];
        if (cf_dispatcher_new_id(id, sizeof(id), err) < 0)
            return -1;
        if (json_object_set_new(obj, "id", json_string(id)) < 0)
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
    }
    return cf_request_from_json(obj, out, err);
}

int cf_cli_parse_request_line(const char *line, size_t len, cf_request *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n'))
        i++;
    if (i == len || line[i] == '#')
        return 1;
    json_error_t je;
    json_t *obj = json_loadb(line + i, len - i, JSON_REJECT_DUPLICATES, &je);
    if (!obj)
        return cf_error_set(err, CF_E_INVALID, "invalid JSON at column %d: %s", je.column, je.text);
    int rc = cf_cli_request_from_json(obj, out, err);
    json_decref(obj);
    if (rc < 0) {
        cf_request_clear(out);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Statistics.
 */
int cf_cli_stats_add(cf_cli_batch_stats *s, cf_status status, int64_t latency_us)
{
    if (s->n_latency == s->cap_latency) {
        size_t ncap = s->cap_latency ? s->cap_latency * 2 : 256;
        int64_t *nl = realloc(s->latency_us, ncap * sizeof(*nl));
        if (!nl)
            return -1;
        s->latency_us = nl;
        s->cap_latency = ncap;
    }
    s->latency_us[s->n_latency++] = latency_us < 0 ? 0 : latency_us;
    s->received++;
    if ((unsigned)status < CF_STATUS__COUNT)
        s->by_status[status]++;
    return 0;
}

void cf_cli_stats_free(cf_cli_batch_stats *s)
{
    free(s->latency_us);
    memset(s, 0, sizeof(*s));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t cf_cli_percentile(const int64_t *sorted, size_t n, double pct)
{
    if (n == 0)
        return 0;
    if (pct <= 0)
        return sorted[0];
    if (pct >= 100)
        return sorted[n - 1];
    /* Nearest rank: the smallest value with at least pct% of values <= it. */
    double r = pct / 100.0 * (double)n;
    size_t rank = (size_t)r;
    if ((double)rank < r)
        rank++; /* ceil without libm */
    size_t idx = rank < 1 ? 0 : rank - 1;
    if (idx >= n)
        idx = n - 1;
    return sorted[idx];
}

int64_t cf_cli_stats_percentile(cf_cli_batch_stats *s, double pct)
{
    /* Not with no latencies: latency_us is NULL then, which qsort may not
     * be given even for 0 items (UBSan stopped a batch whose requests all
     * went unanswered). */
    if (s->n_latency > 1)
        qsort(s->latency_us, s->n_latency, sizeof(*s->latency_us), cmp_i64);
    return cf_cli_percentile(s->latency_us, s->n_latency, pct);
}

bool cf_cli_stats_all_success(const cf_cli_batch_stats *s)
{
    return s->bad_lines == 0 && s->submit_errors == 0 && s->missing == 0 && s->received == s->submitted &&
           s->by_status[CF_STATUS_SUCCESS] == s->received;
}

static double ms(int64_t us)
{
    return (double)us / 1000.0;
}

static double throughput(const cf_cli_batch_stats *s)
{
    return s->elapsed_us > 0 ? (double)s->received * 1e6 / (double)s->elapsed_us : 0.0;
}

json_t *cf_cli_stats_to_json(cf_cli_batch_stats *s)
{
    json_t *by = json_object();
    json_t *lat = json_object();
    json_t *o = json_object();
    if (!by || !lat || !o) {
        json_decref(by);
        json_decref(lat);
        json_decref(o);
        return NULL;
    }
    for (int st = 0; st < CF_STATUS__COUNT; st++)
        json_object_set_new(by, cf_status_name((cf_status)st), json_integer((json_int_t)s->by_status[st]));
    json_object_set_new(lat, "p50", json_real(ms(cf_cli_stats_percentile(s, 50))));
    json_object_set_new(lat, "p90", json_real(ms(cf_cli_stats_percentile(s, 90))));
    json_object_set_new(lat, "p99", json_real(ms(cf_cli_stats_percentile(s, 99))));
    json_object_set_new(lat, "max", json_real(ms(cf_cli_stats_percentile(s, 100))));
    json_object_set_new(o, "summary", json_true());
    json_object_set_new(o, "submitted", json_integer((json_int_t)s->submitted));
    json_object_set_new(o, "received", json_integer((json_int_t)s->received));
    json_object_set_new(o, "missing", json_integer((json_int_t)s->missing));
    json_object_set_new(o, "bad_lines", json_integer((json_int_t)s->bad_lines));
    json_object_set_new(o, "submit_errors", json_integer((json_int_t)s->submit_errors));
    json_object_set_new(o, "by_status", by);
    json_object_set_new(o, "latency_ms", lat);
    json_object_set_new(o, "elapsed_s", json_real((double)s->elapsed_us / 1e6));
    json_object_set_new(o, "throughput_per_s", json_real(throughput(s)));
    return o;
}

void cf_cli_print_summary(FILE *out, cf_cli_batch_stats *s)
{
    fprintf(out, "submitted %" PRIu64 ", received %" PRIu64 ", missing %" PRIu64 ", bad lines %" PRIu64
                 ", submit errors %" PRIu64 "\n",
            s->submitted, s->received, s->missing, s->bad_lines, s->submit_errors);
    fputs("by status:", out);
    for (int st = 0; st < CF_STATUS__COUNT; st++)
        if (s->by_status[st])
            fprintf(out, " %s %" PRIu64, cf_status_name((cf_status)st), s->by_status[st]);
    fputs(s->received ? "\n" : " (none)\n", out);
    if (s->n_latency)
        fprintf(out, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", ms(cf_cli_stats_percentile(s, 50)),
                ms(cf_cli_stats_percentile(s, 90)), ms(cf_cli_stats_percentile(s, 99)),
                ms(cf_cli_stats_percentile(s, 100)));
    fprintf(out, "elapsed %.3f s, throughput %.1f results/s\n", (double)s->elapsed_us / 1e6, throughput(s));
}

void cf_cli_format_progress(const cf_cli_batch_stats *s, char *buf, size_t cap)
{
    size_t off = 0;
    int n = snprintf(buf, cap, "submitted %" PRIu64 "  received %" PRIu64, s->submitted, s->received);
    if (n < 0)
        return;
    off = (size_t)n < cap ? (size_t)n : cap;
    for (int st = 0; st < CF_STATUS__COUNT && off < cap; st++) {
        if (!s->by_status[st])
            continue;
        n = snprintf(buf + off, cap - off, "  %s %" PRIu64, cf_status_name((cf_status)st), s->by_status[st]);
        if (n < 0)
            return;
        off += (size_t)n < cap - off ? (size_t)n : cap - off;
    }
}

/* ---------------------------------------------------------------------------
 * Result output.
 */
/* The program's output is hostile: a terminal gets it through
 * cf_sanitize_text (no escape sequences, C1 controls or bidi overrides);
 * a pipe or file gets the bytes. */
static void print_stream(FILE *out, const char *name, const cf_bytes *b, bool truncated)
{
    if (b->len == 0 && !truncated)
        return;
    fprintf(out, "--- %s ---\n", name);
    char *clean = b->len && isatty(fileno(out)) ? malloc(b->len + 1) : NULL;
    if (clean) {
        size_t n = cf_sanitize_text((const char *)b->data, b->len, true, clean, b->len + 1);
        fwrite(clean, 1, n, out);
        free(clean);
    } else if (b->len) {
        fwrite(b->data, 1, b->len, out);
    }
    if (b->len && b->data[b->len - 1] != '\n')
        fputc('\n', out);
    if (truncated)
        fputs("[truncated]\n", out);
}

/* Like a compiler: "main.rs:3:15: error[E0308]: message".  Messages come
 * from the user's source: control characters are not sent to the
 * terminal. */
static void print_diagnostic(FILE *out, const cf_diagnostic *dg, const char *indent)
{
    char file[512] = "", msg[4200] = "", code[80] = "";
    if (dg->file)
        cf_sanitize_text(dg->file, strlen(dg->file), false, file, sizeof(file));
    if (dg->code)
        cf_sanitize_text(dg->code, strlen(dg->code), false, code, sizeof(code));
    fputs(indent, out);
    if (file[0]) {
        fprintf(out, "%s:", file);
        if (dg->line)
            fprintf(out, "%" PRId64 ":", dg->line);
        if (dg->line && dg->column)
            fprintf(out, "%" PRId64 ":", dg->column);
        fputc(' ', out);
    }
    fprintf(out, "%s", dg->level ? dg->level : "note");
    if (code[0])
        fprintf(out, "[%s]", code);
    fputs(": ", out);
    /* Line by line, each printable. */
    const char *m = dg->message ? dg->message : "";
    bool first = true;
    while (first || *m) {
        const char *nl = strchr(m, '\n');
        size_t len = nl ? (size_t)(nl - m) : strlen(m);
        cf_sanitize_text(m, len, false, msg, sizeof(msg));
        fprintf(out, "%s%s%s\n", first ? "" : indent, first ? "" : "    ", msg);
        first = false;
        m += len + (nl ? 1 : 0);
        if (!nl)
            break;
    }
}

static void print_cases(FILE *out, const cf_result *res)
{
    fprintf(out, "cases:    %zu\n", res->n_cases);
    fprintf(out, "  %-4s %-20s %-16s %-8s %-10s %s\n", "#", "name", "status", "exit", "time", "stdout");
    for (size_t i = 0; i < res->n_cases; i++) {
        const cf_case_result *c = &res->cases[i];
        char name[64] = "", exitb[24], wall[32];
        if (c->name)
            cf_printable(c->name, strlen(c->name), name, sizeof(name));
        if (c->signal)
            snprintf(exitb, sizeof(exitb), "sig %d", c->signal);
        else if (c->has_exit_code)
            snprintf(exitb, sizeof(exitb), "%d", c->exit_code);
        else
            snprintf(exitb, sizeof(exitb), "-");
        cf_format_duration(c->wall_time_us, wall, sizeof(wall));
        fprintf(out, "  %-4zu %-20.20s %-16s %-8s %-10s %s\n", i + 1, name, cf_status_name(c->status), exitb, wall,
                c->match > 0 ? "match" : c->match < 0 ? "MISMATCH" : "-");
        if (c->reason && (c->status != CF_STATUS_SUCCESS || c->match < 0)) {
            char why[600];
            cf_sanitize_text(c->reason, strlen(c->reason), false, why, sizeof(why));
            fprintf(out, "       %s\n", why);
        }
        /* What a failing case said last (a panic message, a traceback's
         * last line) saves a --json round trip. */
        if (c->status != CF_STATUS_SUCCESS && c->stderr_data.len) {
            const char *e = (const char *)c->stderr_data.data;
            size_t n = c->stderr_data.len;
            while (n && (e[n - 1] == '\n' || e[n - 1] == '\r'))
                n--;
            size_t start = n;
            while (start && e[start - 1] != '\n')
                start--;
            char last[300];
            cf_sanitize_text(e + start, n - start, false, last, sizeof(last));
            if (last[0])
                fprintf(out, "       stderr: %s\n", last);
        }
        if (c->match < 0 && c->stdout_truncated)
            fputs("       stdout was cut at its cap: it cannot match\n", out);
    }
}

void cf_cli_print_result(FILE *out, const cf_result *res)
{
    char a[32], b[32], c[32];
    fprintf(out, "id:       %s\n", res->id ? res->id : "?");
    fprintf(out, "status:   %s", cf_status_name(res->status));
    if (res->signal)
        fprintf(out, " (signal %d)", res->signal);
    else if (res->has_exit_code)
        fprintf(out, " (exit %d)", res->exit_code);
    fputc('\n', out);
    cf_format_duration(res->wall_time_us, a, sizeof(a));
    cf_format_duration(res->cpu_time_us, b, sizeof(b));
    cf_format_size(res->peak_memory_bytes, c, sizeof(c));
    /* A build that failed ran nothing: its own time is on the compile line. */
    if (res->status != CF_STATUS_COMPILE_FAILED)
        fprintf(out, "time:     wall %s, cpu %s, peak memory %s\n", a, b, c);
    if (res->meta.backend || res->meta.isolation || res->meta.worker) {
        fprintf(out, "backend:  %s", res->meta.backend ? res->meta.backend : "?");
        if (res->meta.isolation)
            fprintf(out, " (%s)", res->meta.isolation);
        /* Which sandbox path served it; only the values the schema knows. */
        if (res->meta.sandbox && (strcmp(res->meta.sandbox, "warm") == 0 || strcmp(res->meta.sandbox, "cold") == 0))
            fprintf(out, ", %s sandbox", res->meta.sandbox);
        else if (res->meta.sandbox && strcmp(res->meta.sandbox, "zygote") == 0)
            fprintf(out, ", Python zygote");
        if (res->meta.worker)
            fprintf(out, ", worker %s", res->meta.worker);
        if (res->meta.attempt > 1)
            fprintf(out, ", attempt %" PRId64, res->meta.attempt);
        if (res->meta.replay)
            fprintf(out, ", replayed from the idempotency store");
        fputc('\n', out);
    }
    /* As the worker wrote it (its limits already in human units): a reason
     * can carry the program's own words, which are not to be rewritten,
     * but neither are they to drive the terminal (escape sequences). */
    if (res->reason && res->reason[0]) {
        char why[1200];
        cf_sanitize_text(res->reason, strlen(res->reason), false, why, sizeof(why));
        fprintf(out, "reason:   %s\n", why);
    }
    if (res->reply_to_error)
        fprintf(out, "reply_to: %s\n", res->reply_to_error);
    if (res->compile.present) {
        cf_format_duration(res->compile.wall_time_us, a, sizeof(a));
        if (res->compile.cached)
            fprintf(out, "compile:  %s, from the compile cache (the build took %s)\n",
                    res->meta.toolchain ? res->meta.toolchain : "?", a);
        else
            fprintf(out, "compile:  %s, %s\n", res->meta.toolchain ? res->meta.toolchain : "?", a);
    }
    for (size_t i = 0; i < res->n_diagnostics; i++) {
        print_diagnostic(out, &res->diagnostics[i], "");
        for (size_t k = 0; k < res->diagnostics[i].n_children; k++)
            print_diagnostic(out, &res->diagnostics[i].children[k], "  ");
    }
    if (res->n_cases)
        print_cases(out, res);
    for (size_t i = 0; i < res->n_files; i++) {
        char sz[32], shown[200];
        cf_format_size(res->files[i].size, sz, sizeof(sz));
        cf_printable(res->files[i].path, strlen(res->files[i].path), shown, sizeof(shown));
        fprintf(out, "file:     %s (%s%s)\n", shown, sz, res->files[i].truncated ? ", truncated" : "");
    }
    if (res->files_truncated)
        fputs("files:    some collected files were cut or left out (collect-max)\n", out);
    if (res->workspace_revision || res->workspace_conflict)
        fprintf(out, "workspace: revision %" PRId64 "%s, %zu changed path(s)\n", res->workspace_revision,
                res->workspace_conflict ? " (conflict)" : "", res->n_changed_paths);
    if (res->session_cell && res->status != CF_STATUS_SUCCESS) {
        fprintf(out, "session:  cell %" PRId64 " did not succeed: nothing of it was saved (the next cell runs as cell "
                     "%" PRId64 " again)\n", res->session_cell, res->session_cell);
    } else if (res->session_cell) {
        fprintf(out, "session:  cell %" PRId64 ", %s", res->session_cell,
                res->session_restored ? "restored from its saved state" : "a new session");
        for (size_t i = 0; i < res->n_session_lost; i++)
            fprintf(out, "%s%s", i ? ", " : "; not saved: ", res->session_lost[i]);
        fputc('\n', out);
    }
    if (res->output.len) {
        json_t *j = cf_msgpack_to_json(res->output.data, res->output.len, NULL);
        char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY) : NULL;
        fprintf(out, "output:   %s\n", s ? s : "(not representable as JSON; use --json)");
        free(s);
        json_decref(j);
    }
    print_stream(out, "stdout", &res->stdout_data, res->stdout_truncated);
    print_stream(out, "stderr", &res->stderr_data, res->stderr_truncated);
}

int cf_cli_print_result_json(FILE *out, const cf_result *res, cf_error *err)
{
    json_t *j = cf_result_to_json(res);
    if (!j)
        return cf_error_set(err, CF_E_NOMEM, "result to JSON: out of memory");
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!s)
        return cf_error_set(err, CF_E_NOMEM, "result to JSON: out of memory");
    fputs(s, out);
    fputc('\n', out);
    free(s);
    return 0;
}

void cf_cli_format_result_line(const cf_result *res, char *buf, size_t cap)
{
    char exitbuf[24], wall[32], first[81];
    if (res->signal)
        snprintf(exitbuf, sizeof(exitbuf), "sig=%d", res->signal);
    else if (res->has_exit_code)
        snprintf(exitbuf, sizeof(exitbuf), "exit=%d", res->exit_code);
    else
        snprintf(exitbuf, sizeof(exitbuf), "exit=-");
    cf_format_duration(res->wall_time_us, wall, sizeof(wall));
    /* First line of stdout, control characters replaced: output is hostile. */
    size_t n = 0;
    for (size_t i = 0; i < res->stdout_data.len && n + 1 < sizeof(first); i++) {
        uint8_t ch = res->stdout_data.data[i];
        if (ch == '\n')
            break;
        first[n++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    first[n] = '\0';
    const char *idp = res->id ? res->id : "?";
    if (res->status != CF_STATUS_SUCCESS && res->reason && res->reason[0] && n == 0) {
        char why[400];
        cf_sanitize_text(res->reason, strlen(res->reason), false, why, sizeof(why));
        snprintf(buf, cap, "%s  %s  %s  %s  (%.80s)", idp, cf_status_name(res->status), exitbuf, wall, why);
    }
    else
        snprintf(buf, cap, "%s  %s  %s  %s  %s", idp, cf_status_name(res->status), exitbuf, wall, first);
}
