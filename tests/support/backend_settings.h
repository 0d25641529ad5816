/* Backend family settings for tests that create backends directly (the
 * worker sets them through its configuration table): a fresh area with
 * every family's defaults, then key/value pairs as the worker's keys name
 * them ({"sandbox-warm", "true", NULL}).  Header-only; the area lives until
 * the process ends, kept reachable from a static list so that the leak
 * checker of a sanitized build does not count it as lost. */
#ifndef CF_TEST_BACKEND_SETTINGS_H
#define CF_TEST_BACKEND_SETTINGS_H

#include <stdio.h>
#include <stdlib.h>

#include "cf_backend.h"

static inline const cf_backend_settings_area *test_backend_settings(const char *const *kv)
{
    cf_backend_settings_area *a = calloc(1, sizeof(*a));
    cf_error err;
    cf_error_clear(&err);
    if (!a || cf_backend_settings_area_init(a, &err) < 0) {
        fprintf(stderr, "backend settings: %s\n", a ? err.msg : "out of memory");
        abort();
    }
    static cf_backend_settings_area **kept;
    static size_t nkept;
    cf_backend_settings_area **grown = realloc(kept, (nkept + 1) * sizeof(*kept));
    if (!grown) {
        fprintf(stderr, "backend settings: out of memory\n");
        abort();
    }
    kept = grown;
    kept[nkept++] = a;
    for (; kv && kv[0] && kv[1]; kv += 2)
        if (cf_backend_settings_set(a, kv[0], kv[1], &err) < 0) {
            fprintf(stderr, "backend settings: %s=%s: %s\n", kv[0], kv[1], err.msg);
            abort();
        }
    return a;
}

#endif
