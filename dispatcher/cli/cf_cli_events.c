/* cf_cli_events: `codefleet events publish|tail|wait`, a thin front end to
 * cf_events.h.  docs/CLI.md and docs/EVENTS.md describe them. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cf_cli.h"
#include "cf_events.h"
#include "cf_schema_json.h"
#include "cf_util.h"

static const char events_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] events SUBCOMMAND ...\n"
    "\n"
    "  publish --workspace WS --correlation-id ID --kind KIND --topic SUBJECT --producer NAME\n"
    "          [--consumer NAME] [--payload JSON] [--id ID]\n"
    "                                 publish one event (keyed by WS); prints its id\n"
    "  tail [--workspace WS] [--from-beginning | --since AGO | --since-us EPOCH_US] [--count N]\n"
    "                                 print events as they arrive (default: from now)\n"
    "  wait CORRELATION_ID [--kind KIND] [--workspace WS] [--since AGO | --since-us EPOCH_US]\n"
    "                                 the first matching event published since AGO (default\n"
    "                                 10m), waiting up to --timeout for it\n"
    "\n"
    "KIND: need_work, work_claimed, work_published, feedback_requested, feedback_provided,\n"
    "blocked, completed.  Exit codes: 2 invalid input, 5 no event within --timeout,\n"
    "6 Kafka error.\n";

static int usage(const char *cmd, const char *msg)
{
    char what[64];
    snprintf(what, sizeof(what), "events %s", cmd);
    return cf_cli_report_usage(what, "events", msg);
}

static int fail(const char *cmd, const cf_error *err)
{
    char what[64];
    snprintf(what, sizeof(what), "events %s", cmd);
    return cf_cli_report_error(what, NULL, err, cf_cli_exit_for_state_error(err));
}

static int open_events(const cf_cli_globals *g, cf_events **ev, cf_error *err)
{
    cf_events_config cfg = {
        .brokers = g->brokers,
        .topic = g->events_topic,
        .client_id = "codefleet-cli",
        .kafka = &g->kafka,
    };
    return cf_events_new(&cfg, ev, err);
}

/* "2026-01-01T00:00:00.123Z" */
static void format_ts(int64_t us, char *buf, size_t cap)
{
    time_t s = (time_t)(us / 1000000);
    struct tm tm;
    if (!gmtime_r(&s, &tm)) {
        snprintf(buf, cap, "%" PRId64, us);
        return;
    }
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%03dZ", base, (int)((us / 1000) % 1000));
}

static void print_event(const cf_cli_globals *g, const cf_event *e)
{
    if (g->json) {
        json_t *j = cf_event_to_json(e);
        char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        char ts[48];
        format_ts(e->timestamp_us, ts, sizeof(ts));
        /* Text fields are validated free of control characters; the payload
         * goes through JSON escaping (ASCII only). */
        printf("%s  %s  %s  %s  %s  %s%s%s", ts, e->workspace, cf_event_kind_name(e->kind), e->correlation_id,
               e->topic, e->producer, e->consumer ? " -> " : "", e->consumer ? e->consumer : "");
        if (e->payload.len) {
            json_t *j = cf_msgpack_to_json(e->payload.data, e->payload.len, NULL);
            char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY) : NULL;
            if (s && strlen(s) > 200)
                memcpy(s + 197, "...", 4);
            printf("  %s", s ? s : "(payload not representable as JSON)");
            free(s);
            json_decref(j);
        }
        putchar('\n');
    }
    fflush(stdout);
}

enum {
    EO_WORKSPACE = 256,
    EO_CORR,
    EO_KIND,
    EO_TOPIC,
    EO_PRODUCER,
    EO_CONSUMER,
    EO_PAYLOAD,
    EO_ID,
    EO_FROM_BEGINNING,
    EO_SINCE,
    EO_SINCE_US,
    EO_COUNT,
};

static const struct option ev_opts[] = {
    {"workspace", required_argument, NULL, EO_WORKSPACE},
    {"correlation-id", required_argument, NULL, EO_CORR},
    {"kind", required_argument, NULL, EO_KIND},
    {"topic", required_argument, NULL, EO_TOPIC},
    {"producer", required_argument, NULL, EO_PRODUCER},
    {"consumer", required_argument, NULL, EO_CONSUMER},
    {"payload", required_argument, NULL, EO_PAYLOAD},
    {"id", required_argument, NULL, EO_ID},
    {"from-beginning", no_argument, NULL, EO_FROM_BEGINNING},
    {"since", required_argument, NULL, EO_SINCE},
    {"since-us", required_argument, NULL, EO_SINCE_US},
    {"count", required_argument, NULL, EO_COUNT},
    {NULL, 0, NULL, 0},
};

static bool ev_opt_allowed(const char *sub, int opt)
{
    bool pub = strcmp(sub, "publish") == 0, tail = strcmp(sub, "tail") == 0, wait = strcmp(sub, "wait") == 0;
    switch (opt) {
    case EO_WORKSPACE: return true;
    case EO_KIND: return pub || wait;
    case EO_CORR:
    case EO_TOPIC:
    case EO_PRODUCER:
    case EO_CONSUMER:
    case EO_PAYLOAD:
    case EO_ID: return pub;
    case EO_SINCE:
    case EO_SINCE_US: return tail || wait;
    case EO_FROM_BEGINNING:
    case EO_COUNT: return tail;
    default: return false;
    }
}

typedef struct ev_args {
    cf_event e;
    bool from_beginning;
    int64_t since_us;
    int64_t count;
} ev_args;

static int set_text(char **dst, const char *v, cf_error *err)
{
    if (cf_str_set(dst, v) < 0)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    return 0;
}

static int ev_parse(const char *sub, int argc, char **argv, ev_args *a, cf_error *err)
{
    int ch;
    opterr = 0;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", ev_opts, NULL)) != -1) {
        if (ch == '?' || ch == ':') {
            char msg[300], cmd[64];
            snprintf(cmd, sizeof(cmd), "events %s", sub);
            return cf_error_set(err, CF_E_INVALID, "%s", cf_cli_option_error(cmd, argc, argv, msg, sizeof(msg)));
        }
        if (!ev_opt_allowed(sub, ch))
            return cf_error_set(err, CF_E_INVALID, "option --%s does not apply to events %s", cf_cli_opt_name(ev_opts, ch), sub);
        int64_t v;
        switch (ch) {
        case EO_WORKSPACE:
            if (!cf_event_workspace_valid(optarg, strlen(optarg)))
                return cf_error_set(err, CF_E_INVALID, "--workspace: 1..%d characters of [A-Za-z0-9._-]",
                                    CF_EVENT_WORKSPACE_MAX);
            if (set_text(&a->e.workspace, optarg, err) < 0)
                return -1;
            break;
        case EO_CORR:
            if (set_text(&a->e.correlation_id, optarg, err) < 0)
                return -1;
            break;
        case EO_KIND:
            if (cf_event_kind_parse(optarg, &a->e.kind) < 0)
                return cf_error_set(err, CF_E_INVALID,
                                    "--kind: unknown '%s' (need_work|work_claimed|work_published|"
                                    "feedback_requested|feedback_provided|blocked|completed)",
                                    optarg);
            break;
        case EO_TOPIC:
            if (set_text(&a->e.topic, optarg, err) < 0)
                return -1;
            break;
        case EO_PRODUCER:
            if (set_text(&a->e.producer, optarg, err) < 0)
                return -1;
            break;
        case EO_CONSUMER:
            if (set_text(&a->e.consumer, optarg, err) < 0)
                return -1;
            break;
        case EO_ID:
            if (!cf_id_valid(optarg, strlen(optarg)))
                return cf_error_set(err, CF_E_INVALID, "--id: 1..%d printable characters without spaces", CF_ID_MAX);
            if (set_text(&a->e.id, optarg, err) < 0)
                return -1;
            break;
        case EO_PAYLOAD: {
            json_error_t je;
            json_t *j = json_loads(optarg, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
            if (!j)
                return cf_error_set(err, CF_E_INVALID, "--payload: invalid JSON: %s", je.text);
            free(a->e.payload.data);
            a->e.payload.data = NULL;
            a->e.payload.len = 0;
            int rc = cf_json_to_msgpack(j, &a->e.payload, err);
            json_decref(j);
            if (rc < 0)
                return cf_error_wrap(err, "--payload");
            break;
        }
        case EO_FROM_BEGINNING: a->from_beginning = true; break;
        case EO_SINCE:
            if (cf_parse_duration_us(optarg, &v, "--since", err) < 0)
                return -1;
            a->since_us = cf_now_us() - v;
            if (a->since_us <= 0)
                a->since_us = 1;
            break;
        case EO_SINCE_US:
            if (cf_parse_i64(optarg, 1, INT64_MAX, &a->since_us, "--since-us", err) < 0)
                return -1;
            break;
        case EO_COUNT:
            if (cf_parse_i64(optarg, 1, INT64_MAX, &a->count, "--count", err) < 0)
                return -1;
            break;
        default: return cf_error_set(err, CF_E_INVALID, "unknown option");
        }
    }
    if (a->from_beginning && a->since_us)
        return cf_error_set(err, CF_E_INVALID, "--from-beginning and --since exclude each other");
    return 0;
}

typedef struct tail_state {
    const cf_cli_globals *g;
    int64_t count, seen;
} tail_state;

static int tail_print(void *ctx, const cf_event *e, const cf_error *derr, int32_t partition, int64_t offset)
{
    tail_state *t = ctx;
    if (!e) {
        char msg[CF_ERROR_MSG_MAX + 100];
        snprintf(msg, sizeof(msg), "skipping a malformed event at partition %" PRId32 " offset %" PRId64 ": %s",
                 partition, offset, derr ? derr->msg : "?");
        cf_cli_report_line("events tail", "error", "malformed", NULL,
                           json_pack("{s:i, s:I}", "partition", (int)partition, "offset", (json_int_t)offset), msg);
        return 0;
    }
    print_event(t->g, e);
    t->seen++;
    return t->count > 0 && t->seen >= t->count;
}

int cf_cli_cmd_events(const cf_cli_globals *g, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(events_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CF_EXIT_USAGE : CF_EXIT_OK;
    }
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(events_help, stdout);
            return CF_EXIT_OK;
        }
    const char *sub = argv[1];
    if (strcmp(sub, "publish") != 0 && strcmp(sub, "tail") != 0 && strcmp(sub, "wait") != 0)
        return usage(sub, "unknown subcommand (publish|tail|wait)");
    ev_args a = {0};
    cf_error err = {0};
    cf_events *ev = NULL;
    int rc = CF_EXIT_USAGE;
    int sargc = argc - 1;
    char **sargv = argv + 1;
    if (ev_parse(sub, sargc, sargv, &a, &err) < 0) {
        usage(sub, err.msg);
        goto out;
    }
    int npos = sargc - optind;
    char **pos = sargv + optind;

    if (strcmp(sub, "publish") == 0) {
        if (npos != 0) {
            usage(sub, "unexpected argument");
            goto out;
        }
        /* Full validation (required fields, text rules) before connecting. */
        cf_event probe = a.e;
        if (!probe.id)
            probe.id = "probe";
        if (!probe.timestamp_us)
            probe.timestamp_us = 1;
        if (cf_event_check(&probe, &err) < 0) {
            usage(sub, err.msg);
            goto out;
        }
        if (open_events(g, &ev, &err) < 0) {
            rc = fail(sub, &err);
            goto out;
        }
        if (cf_events_publish(ev, &a.e, &err) < 0 || cf_events_flush(ev, g->timeout_us, &err) < 0) {
            rc = fail(sub, &err);
            goto out;
        }
        if (g->json)
            print_event(g, &a.e);
        else
            printf("%s\n", a.e.id);
        rc = CF_EXIT_OK;
    } else if (strcmp(sub, "tail") == 0) {
        if (npos != 0) {
            usage(sub, "unexpected argument");
            goto out;
        }
        if (open_events(g, &ev, &err) < 0) {
            rc = fail(sub, &err);
            goto out;
        }
        cf_cli_catch_signals();
        tail_state t = {.g = g, .count = a.count};
        cf_events_tail_opts o = {
            .workspace = a.e.workspace,
            .start = a.from_beginning ? CF_EVENTS_FROM_BEGINNING : a.since_us ? CF_EVENTS_FROM_TIME : CF_EVENTS_FROM_END,
            .since_us = a.since_us,
            .timeout_us = g->timeout_given ? g->timeout_us : 0,
            .stop = &cf_cli_stop,
        };
        if (cf_events_tail(ev, &o, tail_print, &t, &err) < 0) {
            rc = fail(sub, &err);
            goto out;
        }
        rc = CF_EXIT_OK;
    } else { /* wait */
        if (npos != 1) {
            usage(sub, "expected exactly one CORRELATION_ID");
            goto out;
        }
        if (!cf_id_valid(pos[0], strlen(pos[0]))) {
            usage(sub, "invalid CORRELATION_ID");
            goto out;
        }
        if (open_events(g, &ev, &err) < 0) {
            rc = fail(sub, &err);
            goto out;
        }
        cf_cli_catch_signals();
        cf_event got = {0};
        cf_events_wait_opts o = {
            .correlation_id = pos[0],
            .kind = a.e.kind,
            .workspace = a.e.workspace,
            .since_us = a.since_us,
            .timeout_us = g->timeout_us,
            .stop = &cf_cli_stop,
        };
        if (cf_events_wait(ev, &o, &got, &err) < 0) {
            rc = fail(sub, &err);
            goto out;
        }
        print_event(g, &got);
        cf_event_clear(&got);
        rc = CF_EXIT_OK;
    }
out:
    cf_events_destroy(ev);
    cf_event_clear(&a.e);
    return rc;
}
