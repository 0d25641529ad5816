/* cf_cli_files: `codefleet files ...`, a workspace's files through the
 * fleet (SPEC.md section 3.5).  Unlike `codefleet workspace` (the
 * operator's direct Redis tool), it needs only the client's Kafka
 * settings: the worker does each op under the profile of the request
 * topic, so a tenant reaches its own workspaces and no others.
 * docs/CLI.md describes it. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_cli.h"
#include "cf_dispatcher.h"
#include "cf_util.h"

/* A file or patch read from disk or stdin: the decoders' cap on one bytes
 * field (a larger one could not be sent). */
#define FILES_MAX_INPUT (8u * 1024 * 1024)

static const char files_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] files SUBCOMMAND WORKSPACE ... [--expect-rev N]\n"
    "\n"
    "A workspace's files through the fleet: each is a request the worker does under the\n"
    "profile of --request-topic (no Redis settings needed; another tenant's workspace is\n"
    "refused).  The changing ones make one new revision; --expect-rev N does it only if\n"
    "the workspace is at revision N (exit 8 otherwise).\n"
    "\n"
    "  ls WS [GLOB]                 paths and sizes (GLOB: '*' within a directory, '**/' at any depth)\n"
    "  cat WS PATH [FIRST:LAST]     the file's bytes on stdout, or only lines FIRST..LAST (1-based;\n"
    "                               FIRST: or FIRST = to the end); cut at the output cap: exit 1\n"
    "  put WS PATH [LOCAL | -]      write the file from LOCAL or stdin (created if missing)\n"
    "  rm WS PATH                   delete the file\n"
    "  grep WS TEXT [GLOB]          lines holding TEXT (a fixed string) as path:line:text\n"
    "  replace WS PATH OLD [NEW]    replace OLD, which must occur exactly once, by NEW (default empty)\n"
    "  insert WS PATH LINE TEXT     insert TEXT as lines after line LINE (0: at the top)\n"
    "  patch WS [PATCHFILE | -]     apply a patch in OpenAI's V4A format, all or nothing\n"
    "\n"
    "With --json (a global option), the result's JSON form.  Exit codes: 0 done, 1 the op\n"
    "failed (a missing file, OLD absent or not unique, a hunk that does not apply: the\n"
    "reason says which), 3 rejected (a bad path, a workspace the profile does not allow),\n"
    "8 conflict, 5 no answer within --timeout, 6 transport.\n";

static int usage(const char *msg)
{
    return cf_cli_report_usage("files", "files", msg);
}

/* The bytes of LOCAL, or of stdin for "-" (or no argument). */
static int read_input(const char *path, cf_bytes *out, cf_error *err)
{
    if (path && strcmp(path, "-") != 0)
        return cf_cli_read_file(path, FILES_MAX_INPUT, out, err);
    return cf_cli_read_fd(STDIN_FILENO, FILES_MAX_INPUT, "stdin", out, err);
}

typedef struct sub {
    const char *name;
    cf_ws_op op;
    int min_args, max_args; /* after WORKSPACE */
} sub;

static const sub subs[] = {
    {"ls", CF_WS_OP_LIST, 0, 1},         {"cat", CF_WS_OP_READ, 1, 2},   {"put", CF_WS_OP_WRITE, 1, 2},
    {"rm", CF_WS_OP_DELETE, 1, 1},       {"grep", CF_WS_OP_GREP, 1, 2},  {"replace", CF_WS_OP_STR_REPLACE, 2, 3},
    {"insert", CF_WS_OP_INSERT, 3, 3},   {"patch", CF_WS_OP_APPLY_PATCH, 0, 1},
};

/* cat's FIRST:LAST, FIRST: or FIRST (1-based lines; no LAST: to the end). */
static int parse_lines(const char *arg, cf_workspace_op *o, char *why, size_t wsz)
{
    char *end = NULL;
    long long first = strtoll(arg, &end, 10), last = 0;
    bool ok = end != arg && first >= 1;
    if (ok && *end == ':' && end[1]) {
        const char *l = end + 1;
        last = strtoll(l, &end, 10);
        ok = end != l && last >= first;
        o->has_last_line = true;
    } else if (ok && *end == ':') {
        end++;
    }
    if (!ok || *end) {
        snprintf(why, wsz, "lines '%.40s': FIRST:LAST, FIRST: or FIRST (1-based, LAST at least FIRST)", arg);
        return -1;
    }
    o->first_line = first;
    o->last_line = last;
    o->has_first_line = true;
    return 0;
}

/* The op's fields from the arguments after WORKSPACE. */
static int fill_op(const sub *s, char **a, int n, cf_workspace_op *o, char *why, size_t wsz)
{
    cf_error err = {0};
    switch (s->op) {
    case CF_WS_OP_LIST:
        if (n > 0 && !(o->pattern = strdup(a[0])))
            return -1;
        return 0;
    case CF_WS_OP_GREP:
        if (!(o->pattern = strdup(a[0])) || (n > 1 && !(o->path = strdup(a[1]))))
            return -1;
        return 0;
    case CF_WS_OP_WRITE:
    case CF_WS_OP_APPLY_PATCH: {
        bool write = s->op == CF_WS_OP_WRITE;
        if (write && !(o->path = strdup(a[0])))
            return -1;
        const char *local = write ? (n > 1 ? a[1] : NULL) : (n > 0 ? a[0] : NULL);
        if (read_input(local, &o->content, &err) < 0) {
            snprintf(why, wsz, "%s", err.msg);
            return -1;
        }
        o->has_content = true;
        return 0;
    }
    case CF_WS_OP_STR_REPLACE:
        o->has_new_str = true;
        if (!(o->path = strdup(a[0])) || cf_bytes_set(&o->old_str, a[1], strlen(a[1])) < 0 ||
            cf_bytes_set(&o->new_str, n > 2 ? a[2] : "", n > 2 ? strlen(a[2]) : 0) < 0)
            return -1;
        return 0;
    case CF_WS_OP_INSERT: {
        char *end = NULL;
        long long line = strtoll(a[1], &end, 10);
        if (!*a[1] || *end || line < 0) {
            snprintf(why, wsz, "LINE '%.40s': a line number (0: at the top)", a[1]);
            return -1;
        }
        o->insert_line = line;
        o->has_insert_line = o->has_new_str = true;
        if (!(o->path = strdup(a[0])) || cf_bytes_set(&o->new_str, a[2], strlen(a[2])) < 0)
            return -1;
        return 0;
    }
    case CF_WS_OP_READ:
        if (n > 1 && parse_lines(a[1], o, why, wsz) < 0)
            return -1;
        return (o->path = strdup(a[0])) ? 0 : -1;
    default: /* rm */
        return (o->path = strdup(a[0])) ? 0 : -1;
    }
}

/* What a person reads; --json prints the result's JSON form instead. */
static void print_human(const sub *s, const cf_request *req, const cf_result *res)
{
    if (s->op == CF_WS_OP_LIST) {
        for (size_t i = 0; i < res->n_files; i++)
            printf("%10" PRId64 "  %s\n", res->files[i].size, res->files[i].path);
        fprintf(stderr, "workspace %s, revision %" PRId64 ", %zu file(s)\n", req->workspace, res->workspace_revision,
                res->n_files);
    } else if (s->op == CF_WS_OP_READ && res->n_files == 1) {
        fwrite(res->files[0].content.data, 1, res->files[0].content.len, stdout);
        if (res->files[0].truncated)
            fprintf(stderr, "codefleet files cat: cut at the output cap: %zu bytes came, the file has %" PRId64
                    " (read it in parts: files cat WS PATH FIRST:LAST)\n", res->files[0].content.len,
                    res->files[0].size);
    } else if (s->op == CF_WS_OP_GREP) {
        fwrite(res->stdout_data.data, 1, res->stdout_data.len, stdout);
        if (res->stdout_truncated)
            fprintf(stderr, "codefleet files grep: cut at the output cap\n");
    } else if (res->n_changed_paths) {
        printf("workspace %s revision %" PRId64 ":", req->workspace, res->workspace_revision);
        for (size_t i = 0; i < res->n_changed_paths; i++)
            printf(" %s", res->changed_paths[i]);
        printf("\n");
    } else {
        printf("workspace %s revision %" PRId64 ": unchanged\n", req->workspace, res->workspace_revision);
    }
}

static int run(const cf_cli_globals *g, const sub *s, cf_request *req)
{
    cf_error err = {0};
    cf_dispatcher *d = NULL;
    int rc;
    cf_result res = {0};
    /* Flushed: a request the broker refuses is said now, not after the
     * whole --timeout as "no answer". */
    if (cf_cli_open_dispatcher(g, true, &d, &err) < 0 || cf_dispatcher_submit(d, req, &err) < 0 ||
        cf_dispatcher_flush(d, g->timeout_us, &err) < 0) {
        rc = cf_cli_report_error("files", NULL, &err, cf_cli_exit_for_error(&err));
        goto out;
    }
    if (cf_dispatcher_wait(d, req->id, g->timeout_us, &res, &err) < 0) {
        rc = cf_cli_report_error("files", "waiting for the answer", &err, cf_cli_exit_for_error(&err));
        goto out;
    }
    if (g->json) {
        if (cf_cli_print_result_json(stdout, &res, &err) < 0) {
            rc = cf_cli_report_error("files", "output", &err, CF_EXIT_INTERNAL);
            goto out;
        }
    } else if (res.status == CF_STATUS_SUCCESS) {
        print_human(s, req, &res);
    } else {
        fprintf(stderr, "codefleet files %s: %s: %s\n", s->name, cf_status_name(res.status),
                res.reason ? res.reason : "(no reason given)");
    }
    fflush(stdout);
    rc = res.workspace_conflict ? CF_EXIT_CONFLICT : cf_cli_exit_for_status(res.status);
    if (rc == CF_EXIT_OK && s->op == CF_WS_OP_READ && res.n_files == 1 && res.files[0].truncated)
        rc = CF_EXIT_FAILED; /* cat printed part of the file */
out:
    cf_result_clear(&res);
    cf_dispatcher_destroy(d);
    return rc;
}

int cf_cli_cmd_files(const cf_cli_globals *g, int argc, char **argv)
{
    static const struct option opts[] = {{"expect-rev", required_argument, NULL, 'e'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int64_t expect = -1;
    optind = 1;
    opterr = 0;
    int c;
    /* Options anywhere (put WS PATH --expect-rev 3); "--" ends them, for
     * a TEXT that starts with '-'. */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(files_help, stdout);
            return CF_EXIT_OK;
        }
        if (c == 'e') {
            char *end = NULL;
            long long v = strtoll(optarg, &end, 10);
            if (!*optarg || *end || v < 0)
                return usage("--expect-rev: a revision number");
            expect = v;
            continue;
        }
        char buf[200];
        return usage(cf_cli_option_error("files", argc, argv, buf, sizeof(buf)));
    }
    if (optind >= argc)
        return usage("a subcommand: ls, cat, put, rm, grep, replace, insert or patch");
    const sub *s = NULL;
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        if (strcmp(subs[i].name, argv[optind]) == 0)
            s = &subs[i];
    if (!s) {
        char msg[200];
        snprintf(msg, sizeof(msg), "unknown subcommand '%.40s' (ls, cat, put, rm, grep, replace, insert, patch)",
                 argv[optind]);
        return usage(msg);
    }
    char **a = argv + optind + 1;
    int n = argc - optind - 1;
    if (n < 1)
        return usage("a workspace id");
    if (n - 1 < s->min_args || n - 1 > s->max_args) {
        char msg[200];
        snprintf(msg, sizeof(msg), "files %s: %d to %d arguments after the workspace (see codefleet files --help)",
                 s->name, s->min_args, s->max_args);
        return usage(msg);
    }
    if (expect >= 0 && !cf_ws_op_writes(s->op))
        return usage("--expect-rev: only for put, rm, replace, insert and patch");
    cf_request req = {0};
    char id[CF_ID_MAX + 1], why[600] = "";
    cf_error err = {0};
    if (cf_dispatcher_new_id(id, sizeof(id), &err) < 0)
        return cf_cli_report_error("files", NULL, &err, CF_EXIT_INTERNAL);
    req.id = strdup(id);
    req.workspace = strdup(a[0]);
    req.workspace_op = calloc(1, sizeof(*req.workspace_op));
    int rc;
    if (!req.id || !req.workspace || !req.workspace_op) {
        rc = cf_cli_report("files", CF_EXIT_INTERNAL, "out of memory");
        goto out;
    }
    req.workspace_op->op = s->op;
    if (expect >= 0) {
        req.workspace_op->expected_revision = expect;
        req.workspace_op->has_expected_revision = true;
    }
    if (fill_op(s, a + 1, n - 1, req.workspace_op, why, sizeof(why)) < 0) {
        rc = why[0] ? usage(why) : cf_cli_report("files", CF_EXIT_INTERNAL, "out of memory");
        goto out;
    }
    rc = run(g, s, &req);
out:
    cf_request_clear(&req);
    return rc;
}
