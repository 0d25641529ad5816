/* mcp_tools.c: the MCP server's tools (mcp_int.h): their definitions,
 * input and output schemas (the enums generated from the wire schema's
 * name tables), execute_code's arguments as a request in SPEC.md's JSON
 * form, and a result as a tool result. */
#include "mcp_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_cli.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define MCP_TEXT_MAX (32 * 1024) /* bytes of stdout/stderr in the text summary */

/* A tool result: text for the model, structured data for programs. */
json_t *mcp_tool_result(const char *text, json_t *structured, bool is_error)
{
    json_t *r = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", is_error);
    if (r && structured)
        json_object_set_new(r, "structuredContent", structured);
    else
        json_decref(structured);
    return r;
}

json_t *mcp_tool_error(const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return mcp_tool_result(text, json_pack("{s:s}", "error", text), true);
}

/* ---------------------------------------------------------------- tools */

static json_t *enum_of(const char *(*name)(int), int first, int count)
{
    json_t *a = json_array();
    for (int i = first; a && i < count; i++)
        json_array_append_new(a, json_string(name(i)));
    return a;
}

static const char *language_at(int i)
{
    return cf_language_name((cf_language)i);
}

static const char *network_at(int i)
{
    return cf_network_name((cf_network_policy)i);
}

static const char *fs_mode_at(int i)
{
    return cf_fs_mode_name((cf_fs_mode)i);
}

static json_t *prop(const char *type, const char *description)
{
    return json_pack("{s:s, s:s}", "type", type, "description", description);
}

static json_t *bytes_prop(const char *description)
{
    /* SPEC.md section 7: bytes are a string, or {"base64": ...} for any bytes. */
    return json_pack("{s:[{s:s}, {s:s, s:{s:{s:s}}, s:[s], s:b}], s:s}", "anyOf", "type", "string", "type", "object",
                     "properties", "base64", "type", "string", "required", "base64", "additionalProperties", 0,
                     "description", description);
}

static json_t *object_schema(json_t *props, const char *const *required, size_t n_required)
{
    json_t *o = json_pack("{s:s, s:o, s:b}", "type", "object", "properties", props, "additionalProperties", 0);
    /* No "required" at all when nothing is: draft-04 wants it non-empty. */
    json_t *req = n_required ? json_array() : NULL;
    for (size_t i = 0; req && i < n_required; i++)
        json_array_append_new(req, json_string(required[i]));
    if (o && req)
        json_object_set_new(o, "required", req);
    return o;
}

static json_t *execute_schema(void)
{
    json_t *p = json_object();
    json_t *lang = prop("string", "Language of `code` (or \"command\": run `argv` directly).");
    json_object_set_new(lang, "enum", enum_of(language_at, CF_LANG_NONE + 1, CF_LANG__COUNT));
    json_object_set_new(p, "language", lang);
    json_object_set_new(p, "code", prop("string", "Source code (one file). Required except for command and wasm."));
    json_t *argv = prop("array", "command: the program and its arguments; otherwise extra arguments.");
    json_object_set_new(argv, "items", json_pack("{s:s}", "type", "string"));
    json_object_set_new(p, "argv", argv);
    json_object_set_new(p, "stdin", bytes_prop("Bytes fed to standard input."));
    json_object_set_new(p, "input",
                        json_pack("{s:s}", "description",
                                  "Structured input (any JSON value) handed to the program; with "
                                  "function=true the argument of run(input)."));
    json_t *files = prop("object", "Files placed in the work directory: relative path -> content.");
    json_object_set_new(files, "additionalProperties", bytes_prop("file content"));
    json_object_set_new(p, "files", files);
    json_t *env = prop("object", "Extra environment variables.");
    json_object_set_new(env, "additionalProperties", json_pack("{s:s}", "type", "string"));
    json_object_set_new(p, "env", env);
    json_object_set_new(p, "function", prop("boolean", "The code defines run(input); its return value is the "
                                                       "result's output (python, javascript, typescript, rust)."));
    json_object_set_new(p, "backend", prop("string", "Backend to run on (default: the worker's for the language)."));
    json_object_set_new(p, "image", prop("string", "backend=container: an image the operator allows (default: the "
                                                   "profile's first)."));
    json_object_set_new(p, "timeout_ms", prop("integer", "Wall-clock limit of the program."));
    json_object_set_new(p, "memory_mb", prop("integer", "Memory limit in MiB."));
    json_object_set_new(p, "max_output_bytes", prop("integer", "Cap on stdout and on stderr each."));
    json_t *net = prop("string", "Network access of the program.");
    json_object_set_new(net, "enum", enum_of(network_at, CF_NET_UNSPECIFIED + 1, CF_NET_ENABLED + 1));
    json_object_set_new(p, "network", net);
    json_t *fs = prop("string", "What of the host or workspace the program sees.");
    json_object_set_new(fs, "enum", enum_of(fs_mode_at, CF_FS_UNSPECIFIED + 1, CF_FS_PATHS + 1));
    json_object_set_new(p, "filesystem", fs);
    json_t *flags = prop("array", "Extra compiler flags for a compiled language (c, cpp, rust, go, java, "
                                  "typescript), each from the operator's allowlist.");
    json_object_set_new(flags, "items", json_pack("{s:s}", "type", "string"));
    json_object_set_new(p, "compile_flags", flags);
    json_t *case_props = json_object();
    json_object_set_new(case_props, "name", prop("string", "A label, echoed in the case's result."));
    json_object_set_new(case_props, "stdin", bytes_prop("The case's standard input."));
    json_object_set_new(case_props, "input", json_pack("{s:s}", "description", "The case's structured input."));
    json_t *case_argv = prop("array", "Arguments appended to argv.");
    json_object_set_new(case_argv, "items", json_pack("{s:s}", "type", "string"));
    json_object_set_new(case_props, "argv", case_argv);
    json_object_set_new(case_props, "expect_stdout", bytes_prop("Expected standard output (compared after "
                                                                "trailing whitespace is removed)."));
    json_t *cases = prop("array", "Test cases: the program is built once and run once per case, each with its "
                                  "own stdin/input/argv; the result has a row per case (match against "
                                  "expect_stdout). No streaming, workspace_rw, thread or collect with cases.");
    json_object_set_new(cases, "items", object_schema(case_props, NULL, 0));
    json_object_set_new(p, "cases", cases);
    json_object_set_new(p, "stop_on_failure", prop("boolean", "With cases: stop at the first that does not pass."));
    json_t *collect = prop("array", "Glob patterns of work-directory files to return in the result's files "
                                    "(e.g. \"out/*.png\").");
    json_object_set_new(collect, "items", json_pack("{s:s}", "type", "string"));
    json_object_set_new(p, "collect", collect);
    json_object_set_new(p, "workspace", prop("string", "Run against this workspace's files (see list_files)."));
    json_object_set_new(p, "thread", prop("string", "Thread id: groups the checkpoints of one conversation."));
    json_object_set_new(p, "session",
                        prop("string", "python or shell: run the code as the next cell of this session, whose variables, "
                                       "functions and classes (shell: cwd, variables, functions) persist from cell to cell (kept in the workspace of the "
                                       "same id, or `workspace`). A failing cell saves nothing; names that cannot be "
                                       "saved are listed in session_lost; the value of a last expression is printed."));
    json_object_set_new(p, "wait", prop("boolean", "Wait for the result (default true). false: return the "
                                                   "request id at once; then get_result or cancel."));
    json_object_set_new(p, "wait_timeout_ms", prop("integer", "How long to wait for the result (default 120000)."));
    static const char *const req[] = {"language"};
    return object_schema(p, req, 1);
}

/* The hints of MCP's tool annotations (what a client may show or gate on;
 * hints, not guarantees): read-only, destructive, idempotent, open world. */
typedef struct tool_def {
    const char *name;
    const char *title;
    const char *description;
    bool read_only, destructive, idempotent;
} tool_def;

static const tool_def tool_defs[] = {
    {"execute_code", "Execute code",
     "Run code in the codefleet fleet (sandboxed, with limits) and return its status, exit code, stdout, stderr "
     "and structured output. A program that fails is a result, not an error: read `status`.",
     false, true, false}, /* a run with a workspace may rewrite or delete its files */
    {"get_result", "Get a result",
     "The result of an execution submitted with wait=false, waiting up to wait_timeout_ms for it; without an id, "
     "of the newest execution whose call timed out in this client (it kept running).",
     true, false, true},
    {"cancel", "Cancel an execution",
     "Stop an execution by request id: a running program is killed, a waiting one never starts; it is answered "
     "`cancelled`. A finished one is not changed.",
     false, true, true},
    /* The workspace tools: ops done by the fleet (SPEC.md section 3.5),
     * under the profile of this client's request topic. */
    {"list_files", "List workspace files",
     "Paths and sizes of a workspace's files at its current revision; pattern (a glob, \"**/*.py\") narrows them.",
     true, false, true},
    {"read_file", "Read a workspace file",
     "One file of a workspace (text, or {\"base64\": ...} for other bytes), or its lines view_range, cut at the "
     "output cap (truncated says so).",
     true, false, true},
    {"write_file", "Write a workspace file",
     "Write one file into a workspace (created if missing) as a new revision; executions with that workspace "
     "see it.",
     false, true, false}, /* each write is a new revision */
    {"delete_file", "Delete a workspace file", "Remove one file of a workspace, as a new revision.", false, true,
     false},
    {"grep_files", "Search workspace files",
     "Lines of a workspace's files holding a text (fixed string, not a regex), as path:line:text; path (a glob) "
     "narrows the files.",
     true, false, true},
    {"str_replace", "Replace text in a workspace file",
     "Replace old_str, which must occur exactly once in the file, by new_str (empty: delete it), as a new "
     "revision. Not unique or absent: an error naming the lines, nothing written.",
     false, true, false},
    {"apply_patch", "Apply a patch to a workspace",
     "Apply a patch in OpenAI's V4A format (*** Begin Patch / *** Add File: / *** Update File: with @@ hunks / "
     "*** Delete File: / *** End Patch) to a workspace's files as one new revision, all or nothing: a hunk that "
     "does not apply is reported with its file and patch line, and nothing is written.",
     false, true, false},
    {"insert_text", "Insert lines into a workspace file",
     "Insert new_str as whole lines after line insert_line (0: at the top), as a new revision.", false, true,
     false},
};

/* What structuredContent holds, per tool.  Every property is optional and
 * others may appear: a tool error's structuredContent is {"error": ...}
 * and must match too (clients validate it), and the result is SPEC.md
 * section 7's JSON form, which grows. */
static json_t *output_schema(const char *name)
{
    json_t *p = json_object();
    json_object_set_new(p, "error", prop("string", "Why the tool could not do it (with isError)."));
    if (strcmp(name, "execute_code") == 0 || strcmp(name, "get_result") == 0) {
        json_object_set_new(p, "id", prop("string", "The request id."));
        json_object_set_new(p, "status",
                            prop("string", "success, failed, timeout, memory_exceeded, compile_failed, rejected, "
                                           "internal_error, cancelled; \"submitted\" for wait=false."));
        json_object_set_new(p, "exit_code", prop("integer", "The program's exit code, when it exited."));
        json_object_set_new(p, "reason", prop("string", "Why it ended so (timeout, rejection, signal, ...)."));
        json_object_set_new(p, "session_cell", prop("integer", "A session's cell: its number in the session."));
        json_object_set_new(p, "session_restored",
                            prop("boolean", "The cell started from the session's saved state."));
        json_t *lost = prop("array", "Names the cell left that could not be saved.");
        json_object_set_new(lost, "items", json_pack("{s:s}", "type", "string"));
        json_object_set_new(p, "session_lost", lost);
        json_object_set_new(p, "stdout", json_pack("{s:s}", "description", "Standard output (SPEC.md section 7 bytes)."));
        json_object_set_new(p, "stderr", json_pack("{s:s}", "description", "Standard error (SPEC.md section 7 bytes)."));
    } else if (strcmp(name, "cancel") == 0) {
        json_object_set_new(p, "id", prop("string", "The request id."));
        json_object_set_new(p, "cancel", prop("string", "\"sent\"."));
    } else {
        json_object_set_new(p, "workspace", prop("string", "Workspace id."));
        json_object_set_new(p, "revision", prop("integer", "The workspace's revision read or written."));
        json_object_set_new(p, "id", prop("string", "The request id the fleet answered."));
        if (!mcp_tool_reads(name)) {
            json_t *changed = prop("array", "The paths this changed (empty: nothing to change).");
            json_object_set_new(changed, "items", json_pack("{s:s}", "type", "string"));
            json_object_set_new(p, "changed_paths", changed);
        }
        if (strcmp(name, "grep_files") == 0)
            json_object_set_new(p, "matches", prop("string", "path:line:text, one line per matching line."));
        if (strcmp(name, "grep_files") == 0 || strcmp(name, "read_file") == 0)
            json_object_set_new(p, "truncated", prop("boolean", "Cut at the output cap."));
        if (strcmp(name, "list_files") == 0) {
            json_object_set_new(p, "files",
                                json_pack("{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}}}}", "type", "array", "items", "type",
                                          "object", "properties", "path", "type", "string", "size", "type", "integer"));
        } else {
            json_object_set_new(p, "path", prop("string", "The file's path in the workspace."));
            if (strcmp(name, "read_file") == 0) {
                json_object_set_new(p, "size", prop("integer", "Bytes."));
                json_object_set_new(p, "content", bytes_prop("The file's bytes."));
            }
        }
    }
    return json_pack("{s:s, s:o}", "type", "object", "properties", p);
}

static json_t *tool_schema(const char *name)
{
    if (strcmp(name, "execute_code") == 0)
        return execute_schema();
    json_t *p = json_object();
    if (strcmp(name, "get_result") == 0 || strcmp(name, "cancel") == 0) {
        static const char *const req[] = {"id"};
        if (strcmp(name, "cancel") == 0) {
            json_object_set_new(p, "id", prop("string", "The request id execute_code returned."));
            json_object_set_new(p, "reason", prop("string", "Why (goes into the result's reason)."));
            return object_schema(p, req, 1);
        }
        json_object_set_new(p, "id", prop("string", "The request id execute_code returned. Without it: the newest "
                                                    "execution whose call this client gave up on by its own "
                                                    "request timeout (it kept running)."));
        json_object_set_new(p, "wait_timeout_ms", prop("integer", "How long to wait (default 120000)."));
        return object_schema(p, NULL, 0);
    }
    json_object_set_new(p, "workspace", prop("string", "Workspace id."));
    const char *path_is = "Relative path inside the workspace.";
    if (strcmp(name, "list_files") == 0 || strcmp(name, "grep_files") == 0) {
        bool grep = strcmp(name, "grep_files") == 0;
        json_object_set_new(p, "pattern", prop("string", grep ? "The text to find (a fixed string)."
                                                              : "A glob of paths (\"*\" within a directory, a leading "
                                                                "\"**/\" at any depth)."));
        if (grep)
            json_object_set_new(p, "path", prop("string", "A glob of the files to search (default: all)."));
        static const char *const req_list[] = {"workspace"}, *const req_grep[] = {"workspace", "pattern"};
        return object_schema(p, grep ? req_grep : req_list, grep ? 2 : 1);
    }
    json_object_set_new(p, "path", prop("string", path_is));
    if (strcmp(name, "read_file") == 0) {
        json_object_set_new(p, "view_range",
                            json_pack("{s:s, s:{s:s}, s:i, s:i, s:s}", "type", "array", "items", "type", "integer",
                                      "minItems", 2, "maxItems", 2, "description",
                                      "Only these lines: [first, last], 1-based, the last included (-1: to the "
                                      "end), as text_editor's view takes them: read a big file in parts."));
        static const char *const req[] = {"workspace", "path"};
        return object_schema(p, req, 2);
    }
    json_object_set_new(p, "expected_revision",
                        prop("integer", "Change it only if the workspace is at this revision (optimistic "
                                        "concurrency: a conflict changes nothing)."));
    if (strcmp(name, "delete_file") == 0) {
        static const char *const req[] = {"workspace", "path"};
        return object_schema(p, req, 2);
    }
    if (strcmp(name, "str_replace") == 0) {
        json_object_set_new(p, "old_str", bytes_prop("The text to replace: exactly one occurrence."));
        json_object_set_new(p, "new_str", bytes_prop("Its replacement (default empty)."));
        static const char *const req[] = {"workspace", "path", "old_str"};
        return object_schema(p, req, 3);
    }
    if (strcmp(name, "apply_patch") == 0) {
        json_object_del(p, "path");
        json_object_set_new(p, "patch", prop("string", "The patch, from \"*** Begin Patch\" to \"*** End Patch\"."));
        static const char *const req[] = {"workspace", "patch"};
        return object_schema(p, req, 2);
    }
    if (strcmp(name, "insert_text") == 0) {
        json_object_set_new(p, "insert_line", prop("integer", "The line after which to insert (0: at the top)."));
        json_object_set_new(p, "new_str", bytes_prop("The lines to insert."));
        static const char *const req[] = {"workspace", "path", "insert_line", "new_str"};
        return object_schema(p, req, 4);
    }
    json_object_set_new(p, "content", bytes_prop("The file's bytes."));
    static const char *const req[] = {"workspace", "path", "content"};
    return object_schema(p, req, 3);
}

bool mcp_tool_reads(const char *name)
{
    return strcmp(name, "list_files") == 0 || strcmp(name, "read_file") == 0 || strcmp(name, "grep_files") == 0;
}

bool mcp_tool_is_file_op(const char *name)
{
    return mcp_tool_reads(name) || strcmp(name, "write_file") == 0 || strcmp(name, "delete_file") == 0 ||
           strcmp(name, "str_replace") == 0 || strcmp(name, "insert_text") == 0 || strcmp(name, "apply_patch") == 0;
}

json_t *mcp_tools_list(void)
{
    json_t *tools = json_array();
    for (size_t i = 0; tools && i < sizeof(tool_defs) / sizeof(tool_defs[0]); i++)
        json_array_append_new(tools, json_pack("{s:s, s:s, s:s, s:o, s:o, s:{s:s, s:b, s:b, s:b, s:b}}", "name",
                                               tool_defs[i].name, "title", tool_defs[i].title, "description",
                                               tool_defs[i].description, "inputSchema", tool_schema(tool_defs[i].name),
                                               "outputSchema", output_schema(tool_defs[i].name), "annotations",
                                               "title", tool_defs[i].title, "readOnlyHint", tool_defs[i].read_only,
                                               "destructiveHint", tool_defs[i].destructive, "idempotentHint",
                                               tool_defs[i].idempotent, "openWorldHint",
                                               /* a profile may give programs the network */
                                               strcmp(tool_defs[i].name, "execute_code") == 0));
    return json_pack("{s:o}", "tools", tools);
}

/* Arguments are checked against the tool's own schema's property names
 * (from tools, the list built once): a misspelt one is said, not ignored. */
bool mcp_unknown_argument(const json_t *tools, const char *tool, const json_t *args, char *bad, size_t size)
{
    const json_t *props = NULL;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(tools, "tools"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (name && strcmp(name, tool) == 0)
            props = json_object_get(json_object_get(t, "inputSchema"), "properties");
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)args, k, v)
    {
        if (!json_object_get(props, k)) {
            snprintf(bad, size, "%s", k);
            return true;
        }
    }
    return false;
}

int64_t mcp_int_arg(const json_t *args, const char *k, int64_t dflt, int64_t lo, int64_t hi, bool *ok)
{
    json_t *v = json_object_get(args, k);
    if (!v)
        return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        *ok = false;
        return dflt;
    }
    return (int64_t)json_integer_value(v);
}

const char *mcp_str_arg(const json_t *args, const char *k)
{
    return json_string_value(json_object_get(args, k));
}

/* The SPEC.md JSON form of the request execute_code's arguments describe. */
json_t *mcp_request_json(const json_t *args, const char *id, bool stream, char *why, size_t wsize)
{
    json_t *r = json_pack("{s:i, s:s}", "v", 1, "id", id);
    static const char *const same[] = {"language", "code",  "argv",          "stdin",           "input",
                                       "files",    "env",   "backend",       "workspace",       "thread",
                                       "image",    "cases", "compile_flags", "stop_on_failure", "collect",
                                       "session"};
    for (size_t i = 0; r && i < sizeof(same) / sizeof(same[0]); i++) {
        json_t *v = json_object_get(args, same[i]);
        if (v)
            json_object_set(r, same[i], v);
    }
    if (json_is_true(json_object_get(args, "function")))
        json_object_set_new(r, "harness", json_string("function"));
    if (stream)
        json_object_set_new(r, "stream", json_true());
    bool ok = true;
    int64_t timeout_ms = mcp_int_arg(args, "timeout_ms", 0, 1, 24LL * 3600 * 1000, &ok);
    int64_t memory_mb = mcp_int_arg(args, "memory_mb", 0, 1, 1024 * 1024, &ok);
    int64_t max_out = mcp_int_arg(args, "max_output_bytes", 0, 1, INT64_C(1) << 32, &ok);
    if (!ok) {
        snprintf(why, wsize, "timeout_ms, memory_mb and max_output_bytes are positive integers");
        json_decref(r);
        return NULL;
    }
    json_t *pol = json_object();
    if (timeout_ms)
        json_object_set_new(pol, "timeout_us", json_integer(timeout_ms * 1000));
    if (memory_mb)
        json_object_set_new(pol, "memory_bytes", json_integer(memory_mb * 1024 * 1024));
    if (max_out) {
        json_object_set_new(pol, "max_stdout_bytes", json_integer(max_out));
        json_object_set_new(pol, "max_stderr_bytes", json_integer(max_out));
    }
    if (json_object_get(args, "network"))
        json_object_set(pol, "network", json_object_get(args, "network"));
    if (json_object_get(args, "filesystem"))
        json_object_set_new(pol, "filesystem", json_pack("{s:O}", "mode", json_object_get(args, "filesystem")));
    if (json_object_size(pol))
        json_object_set_new(r, "policy", pol);
    else
        json_decref(pol);
    return r;
}

/* Appends one stream of the result to the text summary (made safe with the
 * rest of the text by result_tool_result). */
static void text_stream(FILE *f, const char *name, const cf_bytes *b, bool truncated)
{
    if (b->len == 0 && !truncated)
        return;
    fprintf(f, "--- %s ---\n", name);
    size_t n = b->len < MCP_TEXT_MAX ? b->len : MCP_TEXT_MAX;
    if (n) {
        fwrite(b->data, 1, n, f);
        if (b->data[n - 1] != '\n')
            fputc('\n', f);
    }
    if (n < b->len)
        fprintf(f, "[%zu more bytes in structuredContent]\n", b->len - n);
    if (truncated)
        fputs("[truncated at the cap]\n", f);
}

json_t *mcp_result_tool_result(const cf_result *res)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (f) {
        cf_result summary = *res;
        /* The summary without the streams (a truncated flag alone would
         * make it print their section): they follow, once each. */
        summary.stdout_data = (cf_bytes){0};
        summary.stderr_data = (cf_bytes){0};
        summary.stdout_truncated = summary.stderr_truncated = false;
        cf_cli_print_result(f, &summary);
        text_stream(f, "stdout", &res->stdout_data, res->stdout_truncated);
        text_stream(f, "stderr", &res->stderr_data, res->stderr_truncated);
        fclose(f);
    }
    /* Text from the program: no terminal controls (C0 but newline and
     * tab, DEL, C1, bidi overrides), and well-formed UTF-8. */
    char *clean = text ? malloc(tlen + 1) : NULL;
    if (clean)
        cf_sanitize_text(text, tlen, true, clean, tlen + 1);
    json_t *structured = cf_result_to_json(res);
    bool is_error = res->status == CF_STATUS_REJECTED || res->status == CF_STATUS_INTERNAL_ERROR;
    json_t *r = mcp_tool_result(clean ? clean : "(see structuredContent)", structured, is_error);
    /* A session's figures as images the agent can look at: at most 4 and
     * 1 MiB (they are in structuredContent's files too). */
    json_t *content = r && res->session_cell ? json_object_get(r, "content") : NULL;
    size_t shown = 0, bytes = 0;
    for (size_t i = 0; content && i < res->n_files; i++) {
        const cf_out_file *of = &res->files[i];
        if (of->truncated || of->content.len < 8 || !of->path || strncmp(of->path, "figure-", 7) != 0 ||
            memcmp(of->content.data, "\x89PNG\r\n\x1a\n", 8) != 0 || shown == 4 ||
            bytes + of->content.len > (1u << 20))
            continue;
        shown++;
        bytes += of->content.len;
        char *b64 = cf_base64_encode(of->content.data, of->content.len, NULL);
        if (b64)
            json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64, "mimeType",
                                                     "image/png"));
        free(b64);
    }
    free(clean);
    free(text);
    return r;
}


bool mcp_tool_known(const char *name)
{
    for (size_t i = 0; i < sizeof(tool_defs) / sizeof(tool_defs[0]); i++)
        if (strcmp(tool_defs[i].name, name) == 0)
            return true;
    return false;
}
