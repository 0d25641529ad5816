/* The workspace glob of workspace ops (worker/workspace_ops_int.h): the
 * rule SPEC.md section 3.5 states for list's pattern and grep's path. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "workspace_ops_int.h"

static void globs_match_as_documented(void **state)
{
    (void)state;
    static const struct {
        const char *pattern, *path;
        bool match;
    } cases[] = {
        {"*.py", "a.py", true},
        {"*.py", "src/a.py", false},       /* '*' stays within a directory */
        {"src/*.py", "src/a.py", true},
        {"src/*.py", "src/x/a.py", false},
        {"**/*.py", "a.py", true},         /* a leading "**" + "/" matches at any depth, the top included */
        {"**/*.py", "src/x/a.py", true},
        {"**/*.py", "src/x/a.pyc", false},
        {"**/test_*", "tests/unit/test_x.c", true},
        {"src/**/*.c", "src/a/b.c", true}, /* elsewhere "**" is one component's '*' */
        {"src/**/*.c", "src/a/b/c.c", false},
        {".*", ".gitignore", true},        /* dot files are listed like any other */
        {"*", ".env", true},
        {"[ab].txt", "b.txt", true},
        {"[ab].txt", "c.txt", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (ws_op_glob_match(cases[i].pattern, cases[i].path) != cases[i].match)
            fail_msg("'%s' against '%s': want %s", cases[i].pattern, cases[i].path,
                     cases[i].match ? "a match" : "no match");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(globs_match_as_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
