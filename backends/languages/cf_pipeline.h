/* cf_pipeline: what happens around a backend's execute() for requests that
 * are more than "run this once": compiled languages, function harnesses,
 * test cases and files to collect.
 *
 * The pipeline sits between the worker and the backends and uses nothing
 * but the backend interface, so every process-based backend (process,
 * sandbox) gains these features at once and keeps enforcing its own
 * limits:
 *
 *   compile  an internal execution on the request's backend, under the
 *            compile limits (its own wall clock, memory, processes, output
 *            and artifact caps), running the operator's toolchain with a
 *            fixed flag set plus the request's allowlisted extra flags; the
 *            artifact comes back through cf_exec_take; the compiler's
 *            machine-readable output becomes the result's diagnostics.
 *   cache    successful builds are kept per worker, keyed by a SHA-256 of
 *            profile, language, toolchain version, flags, harness and
 *            sources, bounded in bytes, least recently used out first.
 *   run      once, or once per case, each a fresh execution of the backend
 *            with the artifact placed as its program (cf_exec_program).
 *   harness  for python, javascript, typescript and rust the code may
 *            define run(input): the harness file (harness_dir) is appended
 *            to it, so the user's line numbers are unchanged.
 *   collect  glob patterns of work-directory files returned in the result,
 *            regular files only, within a byte cap.
 *
 * Requests that need none of this go straight to the backend.
 */
#ifndef CF_PIPELINE_H
#define CF_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_backend.h"
#include "cf_error.h"
#include "cf_schema.h"

typedef struct cf_pipeline_config {
    /* Toolchains: absolute paths, resolved once; NULL/"" = language off. */
    const char *cc;     /* c: gcc */
    const char *cxx;    /* cpp: g++ */
    const char *rustc;  /* rust */
    const char *go;     /* go: the go command */
    const char *tsc;    /* typescript: typescript's bin/tsc, run by node */
    const char *node;   /* runs tsc and the compiled JavaScript */
    const char *harness_dir; /* python.py, javascript.js, typescript.ts, rust.rs */
    /* Extra flags a request may add, per language: comma-separated; an
     * entry ending in '*' allows every flag with that prefix. */
    const char *allowed_flags[CF_LANG__COUNT];
    int64_t compile_timeout_us;
    int64_t compile_memory_bytes;
    int64_t compile_processes;
    int64_t compile_output_bytes; /* compiler stdout/stderr cap each */
    int64_t artifact_bytes;       /* build artifact cap */
    int64_t cache_bytes;          /* compile cache; 0 = no cache */
    int64_t collect_bytes;        /* files returned by "collect", in total */
    int64_t collect_scan_bytes;   /* work directory read to find them */
    /* A request's compile step and all its runs together (the worker's
     * max-timeout; 0 = no bound beyond each step's own). */
    int64_t max_total_us;
} cf_pipeline_config;

typedef struct cf_pipeline cf_pipeline;

/* Resolves and probes the toolchains (their versions), reads the harness
 * files.  A missing toolchain disables its language (described by
 * cf_pipeline_describe), it does not fail. */
int cf_pipeline_new(const cf_pipeline_config *cfg, cf_pipeline **out, cf_error *err);
void cf_pipeline_destroy(cf_pipeline *p); /* NULL-safe */

/* Compiled languages this host can serve (bit per cf_language). */
uint32_t cf_pipeline_languages(const cf_pipeline *p);
/* Host directories the toolchains live in outside the system directories
 * (NULL-terminated; owned by p): to be bound into sandboxes. */
const char *const *cf_pipeline_toolchain_dirs(const cf_pipeline *p);
/* The resolved compiler of a compiled language, NULL when it is off. */
const char *cf_pipeline_toolchain_path(const cf_pipeline *p, cf_language lang);
/* One line: "c (gcc 12.2.0), rust (rustc 1.63.0), go: no toolchain (...)". */
void cf_pipeline_describe(const cf_pipeline *p, char *buf, size_t size);

typedef struct cf_pipeline_stats {
    uint64_t cache_hits, cache_misses, cache_evictions;
    uint64_t cache_bytes, cache_entries;
    uint64_t compiles, compile_failures;
} cf_pipeline_stats;
void cf_pipeline_stats_get(cf_pipeline *p, cf_pipeline_stats *out);

/* Runs req on backend b, with everything above as the request asks.  The
 * contract is the backend's (cf_backend.h): 0 with res filled (including
 * compile_failed and rejected), -1 when the backend broke or the run was
 * cancelled.  profile: the request's operator profile (part of the cache
 * key: tenants never share builds).  p may be NULL: then only requests
 * without compile/harness/cases/collect are served. */
int cf_pipeline_execute(cf_pipeline *p, const cf_backend *b, const char *profile, const cf_exec_ctx *ctx,
                        const cf_request *req, cf_result *res, cf_error *err);

/* Whether req needs the pipeline at all. */
bool cf_pipeline_needed(const cf_request *req);

#endif
