/* The workspace glob of workspace ops (worker/workspace_ops_int.h): the
 * rule SPEC.md section 3.5 states for list's pattern and grep's path. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "cf_util.h"
#include "cf_workdir.h"
#include "workspace_ops_int.h"
#include "workspace_patch_int.h"

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
        if (cf_glob_match(cases[i].pattern, cases[i].path, CF_GLOB_ANY_DEPTH) != cases[i].match)
            fail_msg("'%s' against '%s': want %s", cases[i].pattern, cases[i].path,
                     cases[i].match ? "a match" : "no match");
}


/* A file set from "path", "content", ... pairs (NULL-terminated). */
static cf_file *set_of(size_t *n, ...)
{
    va_list ap;
    va_start(ap, n);
    cf_file *v = NULL;
    *n = 0;
    for (const char *path; (path = va_arg(ap, const char *));) {
        const char *content = va_arg(ap, const char *);
        v = realloc(v, (*n + 1) * sizeof(*v));
        v[*n].path = strdup(path);
        v[*n].content.data = NULL;
        v[*n].content.len = 0;
        assert_int_equal(cf_bytes_set(&v[*n].content, content, strlen(content)), 0);
        (*n)++;
    }
    va_end(ap);
    return v;
}

static const char *content_of(const cf_file *v, size_t n, const char *path, char *buf, size_t size)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].path, path) == 0) {
            snprintf(buf, size, "%.*s", (int)v[i].content.len, (const char *)v[i].content.data);
            return buf;
        }
    return NULL;
}

static bool no_dotdot(const char *path, void *arg, char *why, size_t wsz)
{
    (void)arg;
    if (strstr(path, "..") || path[0] == '/') {
        snprintf(why, wsz, "bad path %s", path);
        return false;
    }
    return true;
}

static int apply(const char *patch, cf_file **v, size_t *n, char *why, size_t wsz)
{
    return ws_patch_apply((const uint8_t *)patch, strlen(patch), v, n, no_dotdot, NULL, why, wsz);
}

/* Several files in one patch: added, updated in two hunks (one found by
 * its "@@" line), moved, deleted. */
static void patch_several_files(void **state)
{
    (void)state;
    size_t n;
    cf_file *v = set_of(&n, "app.py", "import os\n\ndef a():\n    return 1\n\ndef b():\n    return 2\n", "old.txt",
                        "bye\n", "mv.txt", "one\ntwo\n", NULL);
    const char *patch = "*** Begin Patch\n"
                        "*** Add File: new/hello.txt\n"
                        "+hello\n"
                        "+world\n"
                        "*** Update File: app.py\n"
                        "@@ def a():\n"
                        "-    return 1\n"
                        "+    return 10\n"
                        "@@ def b():\n"
                        "-    return 2\n"
                        "+    return 20\n"
                        "*** Update File: mv.txt\n"
                        "*** Move to: moved/mv.txt\n"
                        "@@\n"
                        " one\n"
                        "-two\n"
                        "+2\n"
                        "*** Delete File: old.txt\n"
                        "*** End Patch\n";
    char why[500] = "", buf[200];
    if (apply(patch, &v, &n, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    assert_int_equal(n, 3);
    assert_string_equal(content_of(v, n, "new/hello.txt", buf, sizeof(buf)), "hello\nworld\n");
    assert_string_equal(content_of(v, n, "app.py", buf, sizeof(buf)),
                        "import os\n\ndef a():\n    return 10\n\ndef b():\n    return 20\n");
    assert_string_equal(content_of(v, n, "moved/mv.txt", buf, sizeof(buf)), "one\n2\n");
    assert_null(content_of(v, n, "old.txt", buf, sizeof(buf)));
    assert_null(content_of(v, n, "mv.txt", buf, sizeof(buf)));
    cf_workdir_files_free(v, n);
}

/* Context found despite trailing whitespace; "*** End of File" anchors a
 * hunk at the end; a file without its last newline keeps it so. */
static void patch_fuzz_and_end_of_file(void **state)
{
    (void)state;
    size_t n;
    cf_file *v = set_of(&n, "a.txt", "x\ny  \nx\nend", NULL);
    const char *patch = "*** Begin Patch\r\n"
                        "*** Update File: a.txt\r\n"
                        "@@\r\n"
                        " y\r\n"
                        "-x\r\n"
                        "+X\r\n"
                        " end\r\n"
                        "*** End of File\r\n"
                        "*** End Patch\r\n";
    char why[500] = "", buf[200];
    if (apply(patch, &v, &n, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    assert_string_equal(content_of(v, n, "a.txt", buf, sizeof(buf)), "x\ny  \nX\nend");
    cf_workdir_files_free(v, n);
}

/* A CRLF file keeps its line ends on the added lines; "*** End Patch"
 * may carry trailing whitespace like "*** Begin Patch". */
static void patch_crlf_and_markers(void **state)
{
    (void)state;
    size_t n;
    cf_file *v = set_of(&n, "w.txt", "one\r\ntwo\r\nthree\r\n", NULL);
    char why[500] = "", buf[200];
    if (apply("*** Begin Patch  \n*** Update File: w.txt\n@@\n one\n-two\n+TWO\n+2b\n*** End Patch \n", &v, &n, why,
              sizeof(why)) != 0)
        fail_msg("%s", why);
    assert_string_equal(content_of(v, n, "w.txt", buf, sizeof(buf)), "one\r\nTWO\r\n2b\r\nthree\r\n");
    cf_workdir_files_free(v, n);
}

/* A hunk whose place costs more than the search budget to find is refused,
 * saying so, instead of holding the worker for minutes: context lines that
 * almost match everywhere in a long file. */
static void patch_search_is_bounded(void **state)
{
    (void)state;
    size_t nf = 200000, nh = 2000;
    char *file = malloc(nf * 2 + 1), *patch = malloc(nh * 3 + 200);
    for (size_t i = 0; i < nf; i++)
        memcpy(file + 2 * i, "a\n", 2);
    file[nf * 2] = '\0';
    char *p = patch + sprintf(patch, "*** Begin Patch\n*** Update File: big.txt\n@@\n");
    for (size_t i = 0; i < nh; i++)
        p += sprintf(p, " a\n");
    sprintf(p, " b\n*** End Patch\n");
    size_t n;
    cf_file *v = set_of(&n, "big.txt", file, NULL);
    char why[500] = "";
    assert_int_equal(apply(patch, &v, &n, why, sizeof(why)), -1);
    if (!strstr(why, "big.txt: placing its hunks compared more than"))
        fail_msg("%s", why);
    cf_workdir_files_free(v, n);
    free(file);
    free(patch);
}

/* What does not apply is said with its file, hunk and patch line, and the
 * caller gets -1 (it discards the set: all or nothing). */
static void patch_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *patch, *says;
    } bad[] = {
        {"*** Update File: a.txt\n*** End Patch\n", "does not start with \"*** Begin Patch\""},
        {"*** Begin Patch\n*** Update File: a.txt\n@@\n-nothere\n+x\n*** End Patch\n",
         "a.txt: hunk 1 (patch line 3) does not apply: its 1 context and removed line(s), from \"nothere\""},
        {"*** Begin Patch\n*** Update File: a.txt\n@@ def missing():\n-1\n*** End Patch\n",
         "a.txt: hunk 1 (patch line 3): its \"@@ def missing():\" line is not in the file"},
        {"*** Begin Patch\n*** Update File: a.txt\n@@\n-1\n+one\n@@\n-1\n+uno\n*** End Patch\n",
         "a.txt: hunk 2 (patch line 6) does not apply"}, /* the second hunk only looks after the first */
        {"*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch\n", "Add File of a.txt, which exists"},
        {"*** Begin Patch\n*** Delete File: b.txt\n*** End Patch\n", "Delete File of b.txt, which does not exist"},
        {"*** Begin Patch\n*** Update File: b.txt\n@@\n-x\n*** End Patch\n", "b.txt: Update File of a file that does not exist"},
        {"*** Begin Patch\n*** Add File: ../x\n+x\n*** End Patch\n", "patch line 2: bad path ../x"},
        {"*** Begin Patch\n*** Add File: n.txt\nx\n*** End Patch\n", "patch line 3: an added file's lines start with '+'"},
        {"*** Begin Patch\n*** Update File: a.txt\n@@\n?1\n*** End Patch\n", "patch line 4: a hunk's line starts with"},
        {"*** Begin Patch\n*** Delete File: a.txt\n*** Delete File: a.txt\n*** End Patch\n", "named twice"},
        {"*** Begin Patch\n*** Add File: n.txt\n+x\n", "does not end with \"*** End Patch\""},
        {"*** Begin Patch\nhello\n*** End Patch\n", "patch line 2: expected"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n;
        cf_file *v = set_of(&n, "a.txt", "1\n2\n3\n", NULL);
        char why[500] = "";
        assert_int_equal(apply(bad[i].patch, &v, &n, why, sizeof(why)), -1);
        if (!strstr(why, bad[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, why, bad[i].says);
        cf_workdir_files_free(v, n);
    }
}

/* The matcher against glibc's fnmatch(FNM_PATHNAME [| FNM_PERIOD]) on
 * patterns without "**", and on a tenant's worst patterns, which fnmatch
 * (or a recursion per "**") would take unbounded time on: these finish. */
static void globs_agree_with_fnmatch_and_stay_bounded(void **state)
{
    (void)state;
    static const char *const pats[] = {"*", "*.c", "a?c", "[a-c]*", "[!a]*", "[]]x", "\\*", "*/*.py", "src/*",
                                       ".*", "*.*", "a[", "[z-a]", "*a*b*c", "?", "", "x/[0-9]/y"};
    static const char *const paths[] = {"abc", "a.c", ".hidden", "src/a.py", "src/.a.py", "]x", "*", "a[",
                                        "x/5/y", "x/a/y", "aXbYc", "", "b"};
    for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
        for (size_t j = 0; j < sizeof(paths) / sizeof(paths[0]); j++)
            for (int period = 0; period < 2; period++) {
                bool want = fnmatch(pats[i], paths[j], FNM_PATHNAME | (period ? FNM_PERIOD : 0)) == 0;
                if (cf_glob_match(pats[i], paths[j], period ? CF_GLOB_PERIOD : 0) != want)
                    fail_msg("'%s' against '%s' (period %d): fnmatch says %d", pats[i], paths[j], period, want);
            }
    char deep[1100] = "", pat[200] = "";
    for (int i = 0; i < 500; i++)
        strcat(deep, "a/");
    strcat(deep, "a");
    for (int i = 0; i < 30; i++)
        strcat(pat, "**/");
    strcat(pat, "z");
    assert_false(cf_glob_match(pat, deep, CF_GLOB_ANY_DEPTH));
    char flat[1100];
    memset(flat, 'a', 1024);
    flat[1024] = '\0';
    assert_false(cf_glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", flat, 0));
    assert_true(cf_glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a", flat, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(globs_match_as_documented),
        cmocka_unit_test(globs_agree_with_fnmatch_and_stay_bounded),
        cmocka_unit_test(patch_several_files),
        cmocka_unit_test(patch_fuzz_and_end_of_file),
        cmocka_unit_test(patch_refusals),
        cmocka_unit_test(patch_crlf_and_markers),
        cmocka_unit_test(patch_search_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
