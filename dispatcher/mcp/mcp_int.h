/* mcp_int.h: what the MCP server's files share (dispatcher/mcp only).
 *
 * mcp_server.c is the protocol: stdio, JSON-RPC, the calls side by side.
 * mcp_tools.c is the tools: their definitions and schemas, and the
 * translation of execute_code's arguments into a request and of a result
 * into a tool result. */
#ifndef CF_MCP_INT_H
#define CF_MCP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cf_schema.h"

/* The tools/list answer (every tool with its input and output schema and
 * annotations); NULL when out of memory. */
json_t *mcp_tools_list(void);
/* Whether name is one of the tools. */
bool mcp_tool_known(const char *name);
/* The workspace tools (ops the fleet does, SPEC.md section 3.5), and
 * those of them that only read. */
bool mcp_tool_is_file_op(const char *name);
bool mcp_tool_reads(const char *name);
/* Whether args holds an argument tool's input schema (in tools, as
 * mcp_tools_list made it) does not name; its name into bad. */
bool mcp_unknown_argument(const json_t *tools, const char *tool, const json_t *args, char *bad, size_t size);

/* A tool result: text for the model, structured data for programs (taken). */
json_t *mcp_tool_result(const char *text, json_t *structured, bool is_error);
/* A tool error: isError, the text also as structuredContent's "error". */
json_t *mcp_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An execution result as a tool result: the summary (terminal controls
 * removed) and SPEC.md's JSON form. */
json_t *mcp_result_tool_result(const cf_result *res);

/* The SPEC.md JSON form of the request execute_code's arguments describe
 * (id given; stream asks for output chunks); NULL with why. */
json_t *mcp_request_json(const json_t *args, const char *id, bool stream, char *why, size_t wsize);
/* args' integer k within lo..hi, dflt when absent; *ok = false when it is
 * not such an integer. */
int64_t mcp_int_arg(const json_t *args, const char *k, int64_t dflt, int64_t lo, int64_t hi, bool *ok);
/* args' string k, NULL when absent or not a string. */
const char *mcp_str_arg(const json_t *args, const char *k);

#endif
