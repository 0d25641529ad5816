/* Building cf_request values in backend unit tests (header-only: each unit
 * test is one .c file).  Everything allocated is released by
 * cf_request_clear. */
#ifndef CF_TEST_REQUEST_BUILDERS_H
#define CF_TEST_REQUEST_BUILDERS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema.h"

/* A request with id "req-1", 1 MiB output caps and the given timeout. */
static inline void req_init_timeout(cf_request *r, cf_language lang, const char *code, int64_t timeout_us)
{
    memset(r, 0, sizeof(*r));
    r->id = strdup("req-1");
    r->language = lang;
    if (code)
        cf_bytes_set(&r->code, code, strlen(code));
    r->policy.timeout_us = timeout_us;
    r->policy.max_stdout_bytes = 1 << 20;
    r->policy.max_stderr_bytes = 1 << 20;
}

static inline void req_argv(cf_request *r, size_t n, const char *const *argv)
{
    r->argv = calloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        r->argv[i] = strdup(argv[i]);
    r->argc = n;
}

static inline void req_env(cf_request *r, const char *k, const char *v)
{
    r->env = realloc(r->env, (r->n_env + 1) * sizeof(*r->env));
    r->env[r->n_env].key = strdup(k);
    r->env[r->n_env].value = strdup(v);
    r->n_env++;
}

static inline void req_file(cf_request *r, const char *path, const char *content)
{
    r->files = realloc(r->files, (r->n_files + 1) * sizeof(*r->files));
    memset(&r->files[r->n_files], 0, sizeof(r->files[0]));
    r->files[r->n_files].path = strdup(path);
    cf_bytes_set(&r->files[r->n_files].content, content, strlen(content));
    r->n_files++;
}

#endif
