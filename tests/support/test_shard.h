/* One part of a cmocka group: CF_TEST_SHARD="i/n" (ctest sets it,
 * tests/CMakeLists.txt) keeps the tests whose index is i modulo n, so a
 * suite that mostly waits (librdkafka's mock cluster timing out sessions)
 * runs as n ctest entries side by side.  Unset, the whole group runs.
 * Header-only: the unit tests link no test library. */
#ifndef CF_TEST_SHARD_H
#define CF_TEST_SHARD_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* Keeps this shard's tests at the front of tests[]; returns how many.
 * A malformed CF_TEST_SHARD is a failure, not the whole group. */
static inline size_t cf_test_shard(struct CMUnitTest *tests, size_t count)
{
    const char *spec = getenv("CF_TEST_SHARD");
    if (!spec || !*spec)
        return count;
    unsigned i, n;
    char end;
    if (sscanf(spec, "%u/%u%c", &i, &n, &end) != 2 || n == 0 || i >= n) {
        fprintf(stderr, "CF_TEST_SHARD='%s': want i/n with i < n\n", spec);
        exit(2);
    }
    size_t kept = 0;
    for (size_t k = 0; k < count; k++)
        if (k % n == i)
            tests[kept++] = tests[k];
    return kept;
}

#define cf_run_group_shard(tests)                                                                              \
    _cmocka_run_group_tests(#tests, (tests), cf_test_shard((tests), sizeof(tests) / sizeof((tests)[0])), NULL, \
                            NULL)

#endif
