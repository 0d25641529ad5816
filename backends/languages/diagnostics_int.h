/* diagnostics: compiler output -> structured diagnostics (cf_diagnostic).
 *
 * Compiler output is hostile: the user's program chooses file names, and
 * identifiers and string literals end up in messages.  So everything is
 * bounded (entries, children, bytes per message, bytes in total), children
 * are collected without recursion, and every string produced is valid UTF-8
 * without NUL bytes (what the wire schema requires of a str): invalid UTF-8
 * sequences and NUL bytes become U+FFFD.
 *
 * Formats:
 *   gcc/g++ -fdiagnostics-format=json (gcc 12): one JSON array per
 *     translation unit, one per line, plus plain-text lines from the linker.
 *     Top-level "note" entries that follow a diagnostic in the same array are
 *     attached to it as children (gcc 12 emits "declared here" that way).
 *   rustc --error-format=json: one JSON object per line ("$message_type" is
 *     absent in older ones such as 1.63; other message types are skipped).  Labelled
 *     spans become "note" children at their location; a child's single
 *     one-line suggestion is appended to its message (": `_x`").
 *   go build: "file:line:col: msg" / "file:line: msg", tab-indented
 *     continuation lines, "# package" headers (ignored).
 *   tsc --pretty false: "file(line,col): error TS2322: msg", lines indented by
 *     two spaces continue it; "error TS5023: msg" has no location.  Note that
 *     tsc writes its diagnostics to stdout.
 */
#ifndef CF_DIAGNOSTICS_H
#define CF_DIAGNOSTICS_H

#include <stddef.h>

#include "cf_error.h"
#include "cf_schema.h"

#define CF_DIAG_MAX_DEFAULT 200               /* top-level entries per call */
#define CF_DIAG_MESSAGE_MAX_DEFAULT 4096      /* bytes per message */
#define CF_DIAG_TOTAL_MAX_DEFAULT (256u << 10) /* bytes of strings per call */
#define CF_DIAG_CHILDREN_MAX 32               /* children per entry (+ one "dropped" note) */
#define CF_DIAG_NEST_MAX 16                   /* child levels flattened; deeper ones dropped */
#define CF_DIAG_FILE_MAX 1024                 /* bytes per file name */
#define CF_DIAG_CODE_MAX 64                   /* bytes per code */

typedef enum cf_diag_format {
    CF_DIAG_GCC_JSON,   /* gcc/g++ -fdiagnostics-format=json, plus plain-text linker lines */
    CF_DIAG_RUSTC_JSON, /* rustc --error-format=json: one JSON object per line */
    CF_DIAG_GO_TEXT,    /* go build */
    CF_DIAG_TSC_TEXT,   /* tsc --pretty false */
} cf_diag_format;

typedef struct cf_diag_opts {
    /* Directory removed from the front of file names ("/work" turns
     * "/work/main.c" into "main.c"; only at a '/' boundary); a leading "./"
     * is removed too.  Other paths (/usr/include/stdio.h) stay.  May be NULL. */
    const char *strip_prefix;
    /* Top-level entries kept (0 = CF_DIAG_MAX_DEFAULT); further ones are
     * dropped and one final "note" says how many. */
    size_t max_diagnostics;
    /* Bytes per message (0 = CF_DIAG_MESSAGE_MAX_DEFAULT, at least 16); a
     * longer one is cut at a character boundary and ends with "...". */
    size_t max_message_bytes;
    /* Bytes of strings (level, message, file, code, children's too) over
     * all entries one call adds (0 = CF_DIAG_TOTAL_MAX_DEFAULT): an entry
     * that would pass it is dropped like one over max_diagnostics, so a
     * result stays well below a Kafka message's size. */
    size_t max_total_bytes;
} cf_diag_opts;

/* Appends the diagnostics found in text[0..len) to *v / *n (which may
 * already hold entries; *v is grown with realloc and stays owned by the
 * caller: cf_diagnostics_free(*v, *n)).  opts may be NULL (defaults); the
 * caps apply to what this call adds.
 *
 * Never fails on malformed compiler output: consecutive lines it cannot
 * parse become one "error" entry without location whose message is that text
 * (trimmed, bounded).  Pure noise is skipped: empty lines, gcc's
 * "compilation terminated.", go's "# package" headers, and rustc's summaries
 * without spans, code or children ("aborting due to ...", "N warning(s)
 * emitted", "Some errors have detailed explanations: ...", "For more
 * information about {this,an} error, try `rustc --explain ...").
 *
 * Returns 0, or -1 with CF_E_NOMEM (out of memory) or CF_E_INVALID (v or n
 * NULL).  After -1, *v / *n hold the entries appended so far (consistent,
 * still the caller's). */
int cf_diag_parse(cf_diag_format fmt, const char *text, size_t len, const cf_diag_opts *opts, cf_diagnostic **v,
                  size_t *n, cf_error *err);

/* Counts entries (top level) with level "error".  v may be NULL when n is 0. */
size_t cf_diag_count_errors(const cf_diagnostic *v, size_t n);

#endif
