/* diagnostics: real compiler output (gcc/g++ 12, rustc 1.63 and 1.95, go 1.19
 * and 1.26, tsc 5.9) parsed into exact fields, and hostile input: truncated
 * or misshapen JSON, huge and negative numbers, deep nesting, floods, NUL
 * bytes, invalid UTF-8, a 1 MB line.
 *
 * Fixtures: tests/unit/fixtures/diagnostics/ (README.md there says how they
 * were captured), found through CF_SOURCE_DIR or, run by hand, this file's
 * own path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema.h"
#include "cf_util.h"
#include "diagnostics_int.h"

#define FFFD "\xEF\xBF\xBD"

/* ---- helpers ----------------------------------------------------------------- */

typedef struct parsed {
    cf_diagnostic *v;
    size_t n;
} parsed;

static void fixture_path(char *buf, size_t cap, const char *name)
{
    const char *src = getenv("CF_SOURCE_DIR");
    if (src && *src) {
        snprintf(buf, cap, "%s/tests/unit/fixtures/diagnostics/%s", src, name);
        return;
    }
    /* Run by hand: __FILE__ is <repo>/tests/unit/test_diagnostics.c in a
     * CMake build without ccache (with it, relative to the build tree). */
    const char *slash = strrchr(__FILE__, '/');
    int dl = slash ? (int)(slash - __FILE__) : 1;
    snprintf(buf, cap, "%.*s/fixtures/diagnostics/%s", dl, slash ? __FILE__ : ".", name);
}

static char *read_fixture(const char *name, size_t *len)
{
    char path[4096];
    fixture_path(path, sizeof(path), name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    cf_buf b;
    cf_buf_init(&b, 0);
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0)
        assert_int_equal(cf_buf_append(&b, chunk, got, NULL), 0);
    fclose(f);
    return (char *)cf_buf_steal(&b, len);
}

/* Every string we produce must be what the wire accepts: encode a result
 * carrying them and decode it back. */
static void assert_wire_ok(cf_diagnostic *v, size_t n)
{
    cf_result r;
    memset(&r, 0, sizeof(r));
    r.id = (char *)"diag-test-1";
    r.status = CF_STATUS_COMPILE_FAILED;
    r.diagnostics = v;
    r.n_diagnostics = n;
    cf_bytes b;
    cf_error err = {0};
    if (cf_result_encode(&r, &b, &err) != 0)
        fail_msg("encode: %s", err.msg);
    cf_result got;
    if (cf_result_decode(b.data, b.len, NULL, &got, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_int_equal(got.n_diagnostics, n);
    cf_result_clear(&got);
    free(b.data);
}

/* Every string: NUL-terminated, no NUL inside (strlen is all we can check),
 * valid UTF-8 (the wire check above), children one level deep. */
static void assert_sane(const parsed *p)
{
    for (size_t i = 0; i < p->n; i++) {
        const cf_diagnostic *d = &p->v[i];
        assert_non_null(d->level);
        assert_non_null(d->message);
        for (size_t k = 0; k < d->n_children; k++) {
            assert_non_null(d->children[k].level);
            assert_non_null(d->children[k].message);
            assert_int_equal(d->children[k].n_children, 0);
        }
    }
    assert_wire_ok(p->v, p->n);
}

static parsed parse_opts(cf_diag_format fmt, const char *text, size_t len, const cf_diag_opts *opts)
{
    parsed p = {0};
    cf_error err = {0};
    if (cf_diag_parse(fmt, text, len, opts, &p.v, &p.n, &err) != 0)
        fail_msg("cf_diag_parse: %s", err.msg);
    assert_sane(&p);
    return p;
}

static parsed parse_str(cf_diag_format fmt, const char *text)
{
    return parse_opts(fmt, text, strlen(text), NULL);
}

static parsed parse_file(cf_diag_format fmt, const char *name, const char *strip)
{
    size_t len;
    char *text = read_fixture(name, &len);
    cf_diag_opts o = {.strip_prefix = strip};
    parsed p = parse_opts(fmt, text, len, &o);
    free(text);
    return p;
}

static void parsed_free(parsed *p)
{
    cf_diagnostics_free(p->v, p->n);
    p->v = NULL;
    p->n = 0;
}

static bool same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void print_diag(const char *what, const cf_diagnostic *d)
{
    print_error("%s: {%s, \"%s\", %s, %lld, %lld, %s, %lld, %lld} children=%zu\n", what, d->level,
                d->message ? d->message : "(null)", d->file ? d->file : "NULL", (long long)d->line,
                (long long)d->column, d->code ? d->code : "NULL", (long long)d->end_line, (long long)d->end_column,
                d->n_children);
}

static void expect_diag(const cf_diagnostic *d, const char *level, const char *msg, const char *file, int64_t line,
                        int64_t col, const char *code, int64_t eline, int64_t ecol, size_t nkids, const char *src,
                        int srcline)
{
    if (same(d->level, level) && same(d->message, msg) && same(d->file, file) && d->line == line &&
        d->column == col && same(d->code, code) && d->end_line == eline && d->end_column == ecol &&
        d->n_children == nkids)
        return;
    cf_diagnostic want = {.level = (char *)level, .message = (char *)msg, .file = (char *)file, .line = line,
                          .column = col, .code = (char *)code, .end_line = eline, .end_column = ecol,
                          .n_children = nkids};
    print_diag("want", &want);
    print_diag("got ", d);
    _fail(src, srcline);
}

/* EXPECT(d, level, message, file, line, column, code, end_line, end_column, children) */
#define EXPECT(d, lv, msg, file, ln, col, code, eln, ecol, nk)                                                   \
    expect_diag((d), (lv), (msg), (file), (ln), (col), (code), (eln), (ecol), (nk), __FILE__, __LINE__)

/* A located note without code or end, the shape of most children. */
#define NOTE(d, msg, file, ln, col, eln, ecol) EXPECT((d), "note", (msg), (file), (ln), (col), NULL, (eln), (ecol), 0)

/* ---- gcc / g++ 12 ------------------------------------------------------------ */

static void test_gcc_syntax(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_syntax.txt", NULL);
    assert_int_equal(p.n, 1);
    /* A point location: gcc leaves "finish" out, the caret is the end too. */
    EXPECT(&p.v[0], "error", "expected ‘;’ before ‘return’", "syntax.c", 4, 19, NULL, 4, 19, 0);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 1);
    parsed_free(&p);
}

static void test_gcc_type(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_type.txt", NULL);
    assert_int_equal(p.n, 3);
    EXPECT(&p.v[0], "warning", "initialization of ‘int’ from ‘char *’ makes integer from pointer without a cast",
           "type.c", 3, 13, "-Wint-conversion", 3, 19, 0);
    EXPECT(&p.v[1], "error", "‘struct s’ has no member named ‘b’", "type.c", 5, 13, NULL, 5, 13, 0);
    EXPECT(&p.v[2], "warning", "variable ‘v’ set but not used", "type.c", 4, 25, "-Wunused-but-set-variable", 4,
           25, 0);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 1);
    parsed_free(&p);
}

static void test_gcc_warning(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_warning.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "warning", "unused variable ‘unused’", "warn.c", 3, 9, "-Wunused-variable", 3, 14, 0);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 0);
    parsed_free(&p);
}

static void test_gcc_multi(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_multi.txt", NULL);
    assert_int_equal(p.n, 5);
    /* gcc 12 puts "declared here" at the top level, after its error. */
    EXPECT(&p.v[0], "error", "too few arguments to function ‘f’", "multi.c", 5, 13, NULL, 5, 13, 1);
    NOTE(&p.v[0].children[0], "declared here", "multi.c", 2, 5, 2, 5);
    /* A real "children" entry. */
    EXPECT(&p.v[1], "error", "‘undeclared’ undeclared (first use in this function)", "multi.c", 6, 5, NULL, 6, 14,
           1);
    NOTE(&p.v[1].children[0], "each undeclared identifier is reported only once for each function it appears in",
         "multi.c", 6, 5, 6, 14);
    EXPECT(&p.v[2], "warning",
           "initialization of ‘char *’ from ‘size_t’ {aka ‘long unsigned int’} makes pointer from integer without a "
           "cast",
           "multi.c", 7, 15, "-Wint-conversion", 7, 20, 0);
    EXPECT(&p.v[3], "error", "expected ‘;’ before ‘}’ token", "multi.c", 8, 13, NULL, 8, 13, 0);
    EXPECT(&p.v[4], "warning", "unused variable ‘p’", "multi.c", 7, 11, "-Wunused-variable", 7, 11, 0);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 3);
    parsed_free(&p);
}

static void test_gcc_link(void **state)
{
    (void)state;
    /* "[]" from the compiler, then the linker's text: one error, no location. */
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_link.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error",
           "/usr/bin/ld: /tmp/ccBBnb44.o: in function `main':\n"
           "link.c:(.text+0x5): undefined reference to `f'\n"
           "collect2: error: ld returned 1 exit status",
           NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
}

static void test_gcc_fatal(void **state)
{
    (void)state;
    /* "fatal error" is an error; "compilation terminated." is noise. */
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_fatal.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "nope.h: No such file or directory", "fatal.c", 1, 10, NULL, 1, 17, 0);
    parsed_free(&p);
}

static void test_gcc_strip_prefix(void **state)
{
    (void)state;
    /* gcc -Wall /tmp/work/main.c, main.c including util.h. */
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_abs_path.txt", "/tmp/work");
    assert_int_equal(p.n, 3);
    EXPECT(&p.v[0], "error", "expected ‘;’ before ‘}’ token", "util.h", 1, 35, NULL, 1, 35, 0);
    EXPECT(&p.v[1], "warning", "format ‘%d’ expects argument of type ‘int’, but argument 2 has type ‘char *’",
           "main.c", 6, 14, "-Wformat=", 6, 14, 0);
    EXPECT(&p.v[2], "warning", "unused variable ‘unused’", "main.c", 5, 9, "-Wunused-variable", 5, 14, 0);
    parsed_free(&p);

    p = parse_file(CF_DIAG_GCC_JSON, "gcc12_abs_path.txt", "/tmp/work/"); /* trailing '/' */
    assert_string_equal(p.v[1].file, "main.c");
    parsed_free(&p);
    p = parse_file(CF_DIAG_GCC_JSON, "gcc12_abs_path.txt", NULL);
    assert_string_equal(p.v[0].file, "/tmp/work/util.h");
    parsed_free(&p);
    p = parse_file(CF_DIAG_GCC_JSON, "gcc12_abs_path.txt", "/tmp/wor"); /* only at a '/' boundary */
    assert_string_equal(p.v[1].file, "/tmp/work/main.c");
    parsed_free(&p);
}

static void test_gcc_two_units(void **state)
{
    (void)state;
    /* gcc -c a.c b.c: one array per translation unit, a.c's empty. */
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gcc12_two_units.txt", NULL);
    assert_int_equal(p.n, 2);
    EXPECT(&p.v[0], "error", "expected ‘;’ before ‘}’ token", "b.c", 1, 28, NULL, 1, 28, 0);
    EXPECT(&p.v[1], "warning", "unused variable ‘u’", "b.c", 1, 17, "-Wunused-variable", 1, 17, 0);
    parsed_free(&p);
}

static void test_gpp_type(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_GCC_JSON, "gpp12_type.txt", NULL);
    assert_int_equal(p.n, 2);
    EXPECT(&p.v[0], "error",
           "conversion from ‘int’ to non-scalar type ‘std::string’ {aka ‘std::__cxx11::basic_string<char>’} requested",
           "type.cpp", 6, 21, NULL, 6, 22, 0);
    EXPECT(&p.v[1], "error", "cannot convert ‘std::vector<int>’ to ‘int’", "type.cpp", 8, 17, NULL, 8, 17, 1);
    /* g++ indents this note's message: trimmed. */
    NOTE(&p.v[1].children[0], "initializing argument 1 of ‘int take(int)’", "type.cpp", 3, 14, 3, 14);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 2);
    parsed_free(&p);
}

/* ---- rustc 1.63 and 1.95 ------------------------------------------------------- */

static void test_rustc_syntax(void **state)
{
    (void)state;
    static const char *const files[] = {"rustc1.63_syntax.jsonl", "rustc1.95_syntax.jsonl"};
    for (size_t i = 0; i < 2; i++) {
        parsed p = parse_file(CF_DIAG_RUSTC_JSON, files[i], NULL);
        assert_int_equal(p.n, 1); /* "aborting due to ..." skipped */
        EXPECT(&p.v[0], "error", "expected `;`, found `println`", "syntax.rs", 2, 14, NULL, 2, 14, 2);
        NOTE(&p.v[0].children[0], "unexpected token", "syntax.rs", 3, 5, 3, 12); /* a labelled span */
        /* The suggestion ";" is quoted by the message already: not appended. */
        EXPECT(&p.v[0].children[1], "help", "add `;` here", "syntax.rs", 2, 14, NULL, 2, 14, 0);
        parsed_free(&p);
    }
}

static void test_rustc_type(void **state)
{
    (void)state;
    static const char *const files[] = {"rustc1.63_type.jsonl", "rustc1.95_type.jsonl"};
    for (size_t i = 0; i < 2; i++) {
        parsed p = parse_file(CF_DIAG_RUSTC_JSON, files[i], NULL);
        assert_int_equal(p.n, 1); /* the aborting and "For more information" summaries skipped */
        EXPECT(&p.v[0], "error", "mismatched types", "type.rs", 2, 18, "E0308", 2, 25, 2);
        NOTE(&p.v[0].children[0], "expected `i32`, found `&str`", "type.rs", 2, 18, 2, 25);
        NOTE(&p.v[0].children[1], "expected due to this", "type.rs", 2, 12, 2, 15);
        assert_int_equal(cf_diag_count_errors(p.v, p.n), 1);
        parsed_free(&p);
    }
}

static void test_rustc_warning(void **state)
{
    (void)state;
    static const char *const files[] = {"rustc1.63_warning.jsonl", "rustc1.95_warning.jsonl"};
    static const char *const lint_note[] = {"`#[warn(unused_variables)]` on by default",
                                            "`#[warn(unused_variables)]` (part of `#[warn(unused)]`) on by default"};
    for (size_t i = 0; i < 2; i++) {
        parsed p = parse_file(CF_DIAG_RUSTC_JSON, files[i], NULL);
        assert_int_equal(p.n, 1); /* "1 warning emitted" skipped */
        EXPECT(&p.v[0], "warning", "unused variable: `unused`", "warn.rs", 2, 9, "unused_variables", 2, 15, 2);
        EXPECT(&p.v[0].children[0], "note", lint_note[i], NULL, 0, 0, NULL, 0, 0, 0);
        EXPECT(&p.v[0].children[1], "help", "if this is intentional, prefix it with an underscore: `_unused`",
               "warn.rs", 2, 9, NULL, 2, 15, 0);
        assert_int_equal(cf_diag_count_errors(p.v, p.n), 0);
        parsed_free(&p);
    }
}

static void test_rustc_multi(void **state)
{
    (void)state;
    static const char *const files[] = {"rustc1.63_multi.jsonl", "rustc1.95_multi.jsonl"};
    for (size_t i = 0; i < 2; i++) {
        bool old = i == 0;
        parsed p = parse_file(CF_DIAG_RUSTC_JSON, files[i], NULL);
        assert_int_equal(p.n, 3); /* aborting, "Some errors have ...", "For more information ..." skipped */
        EXPECT(&p.v[0], "error", "cannot find value `undefined_name` in this scope", "multi.rs", 5, 20, "E0425", 5,
               34, 1);
        NOTE(&p.v[0].children[0], "not found in this scope", "multi.rs", 5, 20, 5, 34);

        EXPECT(&p.v[1], "error", "mismatched types", "multi.rs", 3, 21, "E0308", 3, 22, 3);
        NOTE(&p.v[1].children[0], old ? "expected struct `String`, found integer" : "expected `String`, found integer",
             "multi.rs", 3, 21, 3, 22);
        NOTE(&p.v[1].children[1], "expected due to this", "multi.rs", 3, 12, 3, 18);
        EXPECT(&p.v[1].children[2], "help", "try using a conversion method: `.to_string()`", "multi.rs", 3, 22, NULL,
               3, 22, 0);

        EXPECT(&p.v[2], "error", "this function takes 2 arguments but 1 argument was supplied", "multi.rs", 4, 13,
               "E0061", 4, 16, 3);
        NOTE(&p.v[2].children[0], old ? "an argument of type `i32` is missing" : "argument #2 of type `i32` is missing",
             "multi.rs", 4, 16, 4, 19);
        /* Spans with an empty label are not notes; the child's primary span is. */
        NOTE(&p.v[2].children[1], "function defined here", "multi.rs", 1, 4, 1, 7);
        if (old)
            EXPECT(&p.v[2].children[2], "help", "provide the argument: `add(1, /* i32 */)`", "multi.rs", 4, 13, NULL,
                   4, 19, 0);
        else
            EXPECT(&p.v[2].children[2], "help", "provide the argument: `(1, /* i32 */)`", "multi.rs", 4, 16, NULL, 4,
                   19, 0);
        assert_int_equal(cf_diag_count_errors(p.v, p.n), 3);
        parsed_free(&p);
    }
}

static void test_rustc_notes(void **state)
{
    (void)state;
    /* 1.63 says where the value moved (labels only); 1.95 adds a note and a help. */
    parsed p = parse_file(CF_DIAG_RUSTC_JSON, "rustc1.63_notes.jsonl", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "borrow of moved value: `v`", "notes.rs", 5, 20, "E0382", 5, 27, 3);
    NOTE(&p.v[0].children[0], "value moved here", "notes.rs", 4, 10, 4, 11);
    NOTE(&p.v[0].children[1], "value borrowed here after move", "notes.rs", 5, 20, 5, 27);
    NOTE(&p.v[0].children[2], "move occurs because `v` has type `Vec<i32>`, which does not implement the `Copy` trait",
         "notes.rs", 3, 9, 3, 10);
    parsed_free(&p);

    p = parse_file(CF_DIAG_RUSTC_JSON, "rustc1.95_notes.jsonl", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "borrow of moved value: `v`", "notes.rs", 5, 20, "E0382", 5, 21, 5);
    NOTE(&p.v[0].children[0], "value moved here", "notes.rs", 4, 10, 4, 11);
    NOTE(&p.v[0].children[1], "value borrowed here after move", "notes.rs", 5, 20, 5, 21);
    NOTE(&p.v[0].children[2], "move occurs because `v` has type `Vec<i32>`, which does not implement the `Copy` trait",
         "notes.rs", 3, 9, 3, 10);
    NOTE(&p.v[0].children[3],
         "consider changing this parameter type in function `take` to borrow instead if owning the value isn't "
         "necessary",
         "notes.rs", 1, 12, 1, 20);
    EXPECT(&p.v[0].children[4], "help", "consider cloning the value if the performance cost is acceptable: `.clone()`",
           "notes.rs", 4, 11, NULL, 4, 11, 0);
    parsed_free(&p);
}

static void test_rustc_mixed(void **state)
{
    (void)state;
    /* A warning and an error: "aborting due to 1 previous error; 1 warning emitted" skipped. */
    static const char *const files[] = {"rustc1.63_mixed.jsonl", "rustc1.95_mixed.jsonl"};
    for (size_t i = 0; i < 2; i++) {
        parsed p = parse_file(CF_DIAG_RUSTC_JSON, files[i], NULL);
        assert_int_equal(p.n, 2);
        EXPECT(&p.v[0], "warning", "unnecessary parentheses around assigned value", "mixed.rs", 2, 13,
               "unused_parens", 2, 14, 2);
        /* Two spans suggest (remove both parentheses): nothing appended. */
        EXPECT(&p.v[0].children[1], "help", "remove these parentheses", "mixed.rs", 2, 13, NULL, 2, 14, 0);
        EXPECT(&p.v[1], "error", "cannot add `&str` to `{integer}`", "mixed.rs", 3, 19, "E0277", 3, 20, 3);
        NOTE(&p.v[1].children[0], "no implementation for `{integer} + &str`", "mixed.rs", 3, 19, 3, 20);
        EXPECT(&p.v[1].children[1], "help", "the trait `Add<&str>` is not implemented for `{integer}`", NULL, 0, 0,
               NULL, 0, 0, 0);
        assert_string_equal(p.v[1].children[2].level, "help");
        assert_non_null(strstr(p.v[1].children[2].message, "the following other types implement trait `Add<Rhs>`:\n"));
        assert_int_equal(cf_diag_count_errors(p.v, p.n), 1);
        parsed_free(&p);
    }
}

static void test_rustc_abs_path_and_no_spans(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_RUSTC_JSON, "rustc1.95_abs_path.jsonl", "/tmp/work");
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "mismatched types", "main.rs", 2, 18, "E0308", 2, 25, 2);
    NOTE(&p.v[0].children[1], "expected due to this", "main.rs", 2, 12, 2, 15);
    parsed_free(&p);

    /* An error without spans that is not a summary stays. */
    p = parse_file(CF_DIAG_RUSTC_JSON, "rustc1.95_no_spans_error.jsonl", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "couldn't read `/tmp/nonexistent.rs`: No such file or directory (os error 2)", NULL, 0,
           0, NULL, 0, 0, 0);
    parsed_free(&p);
}

/* Exactly what is skipped: summaries without spans, code and children. */
static void test_rustc_skips_precisely(void **state)
{
    (void)state;
    const char *text =
        "{\"$message_type\":\"diagnostic\",\"message\":\"aborting due to 2 previous errors\",\"code\":null,"
        "\"level\":\"error\",\"spans\":[],\"children\":[]}\n"
        "{\"message\":\"aborting due to previous error\",\"code\":null,\"level\":\"error\",\"spans\":[],"
        "\"children\":[]}\n"
        "{\"message\":\"1 warning emitted\",\"code\":null,\"level\":\"warning\",\"spans\":[],\"children\":[]}\n"
        "{\"message\":\"12 warnings emitted\",\"level\":\"warning\",\"spans\":[],\"children\":[]}\n"
        "{\"message\":\"Some errors have detailed explanations: E0061, E0308.\",\"code\":null,"
        "\"level\":\"failure-note\",\"spans\":[],\"children\":[]}\n"
        "{\"message\":\"For more information about an error, try `rustc --explain E0061`.\","
        "\"level\":\"failure-note\",\"spans\":[],\"children\":[]}\n"
        "{\"$message_type\":\"artifact\",\"artifact\":\"x.d\",\"emit\":\"dep-info\"}\n"
        "{\"$message_type\":\"future_incompat\",\"future_incompat_report\":[]}\n"
        /* kept from here on */
        "{\"message\":\"aborting due to 1 previous error\",\"code\":null,\"level\":\"error\",\"spans\":[{\"file_name\":"
        "\"a.rs\",\"line_start\":1,\"line_end\":1,\"column_start\":1,\"column_end\":2,\"is_primary\":true}],"
        "\"children\":[]}\n"
        "{\"message\":\"aborting due to a user bug\",\"code\":{\"code\":\"E9999\"},\"level\":\"error\",\"spans\":[],"
        "\"children\":[]}\n"
        "{\"message\":\"aborting due to x\",\"level\":\"error\",\"spans\":[],\"children\":[{\"message\":\"why\","
        "\"level\":\"note\",\"spans\":[],\"children\":[]}]}\n"
        "{\"message\":\"warnings emitted\",\"level\":\"warning\",\"spans\":[],\"children\":[]}\n"
        "{\"message\":\"1 warning emitted today\",\"level\":\"warning\",\"spans\":[],\"children\":[]}\n"
        "{\"message\":\"linking with `cc` failed\",\"level\":\"failure-note\",\"spans\":[],\"children\":[]}\n"
        "{\"message\":\"unexpected panic\",\"level\":\"error: internal compiler error\",\"spans\":[],"
        "\"children\":[]}\n"
        "{\"$message_type\":\"diagnostic\",\"level\":\"error\"}\n";
    parsed p = parse_str(CF_DIAG_RUSTC_JSON, text);
    assert_int_equal(p.n, 8);
    EXPECT(&p.v[0], "error", "aborting due to 1 previous error", "a.rs", 1, 1, NULL, 1, 2, 0);
    EXPECT(&p.v[1], "error", "aborting due to a user bug", NULL, 0, 0, "E9999", 0, 0, 0);
    EXPECT(&p.v[2], "error", "aborting due to x", NULL, 0, 0, NULL, 0, 0, 1);
    EXPECT(&p.v[3], "warning", "warnings emitted", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[4], "warning", "1 warning emitted today", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[5], "note", "linking with `cc` failed", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[6], "error", "unexpected panic", NULL, 0, 0, NULL, 0, 0, 0);
    /* A diagnostic without a message: its JSON text, as an error. */
    EXPECT(&p.v[7], "error", "{\"$message_type\":\"diagnostic\",\"level\":\"error\"}", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
}

/* ---- go 1.19 and 1.26 ----------------------------------------------------------- */

static void test_go_syntax_and_type(void **state)
{
    (void)state;
    static const char *const syntax[] = {"go1.19_syntax.txt", "go1.26_syntax.txt"};
    static const char *const type[] = {"go1.19_type.txt", "go1.26_type.txt"};
    static const char *const type_msg[] = {
        "cannot use f(1) (value of type int) as type string in variable declaration",
        "cannot use f(1) (value of type int) as string value in variable declaration"};
    for (size_t i = 0; i < 2; i++) {
        parsed p = parse_file(CF_DIAG_GO_TEXT, syntax[i], NULL);
        assert_int_equal(p.n, 1); /* "# command-line-arguments" skipped */
        EXPECT(&p.v[0], "error", "syntax error: unexpected newline in argument list; possibly missing comma or )",
               "main.go", 6, 18, NULL, 0, 0, 0);
        parsed_free(&p);
        p = parse_file(CF_DIAG_GO_TEXT, type[i], NULL);
        assert_int_equal(p.n, 1);
        EXPECT(&p.v[0], "error", type_msg[i], "main.go", 6, 17, NULL, 0, 0, 0);
        parsed_free(&p);
    }
}

static void test_go_multi(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_GO_TEXT, "go1.19_multi.txt", NULL);
    assert_int_equal(p.n, 5);
    EXPECT(&p.v[0], "error", "imported and not used: \"os\"", "main.go", 3, 8, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "error", "x declared but not used", "main.go", 8, 2, NULL, 0, 0, 0);
    EXPECT(&p.v[2], "error", "undefined: undefinedName", "main.go", 9, 7, NULL, 0, 0, 0);
    EXPECT(&p.v[3], "error", "not enough arguments in call to g\n\thave (number)\n\twant (int, int)", "main.go", 10, 4,
           NULL, 0, 0, 0);
    EXPECT(&p.v[4], "error", "cannot use \"s\" (untyped string constant) as int value in variable declaration",
           "main.go", 11, 14, NULL, 0, 0, 0);
    parsed_free(&p);

    /* 1.26 words "not used" differently and reports every unused variable. */
    p = parse_file(CF_DIAG_GO_TEXT, "go1.26_multi.txt", NULL);
    assert_int_equal(p.n, 7);
    EXPECT(&p.v[0], "error", "\"os\" imported and not used", "main.go", 3, 8, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "error", "declared and not used: x", "main.go", 8, 2, NULL, 0, 0, 0);
    EXPECT(&p.v[2], "error", "declared and not used: y", "main.go", 9, 2, NULL, 0, 0, 0);
    EXPECT(&p.v[3], "error", "undefined: undefinedName", "main.go", 9, 7, NULL, 0, 0, 0);
    EXPECT(&p.v[4], "error", "not enough arguments in call to g\n\thave (number)\n\twant (int, int)", "main.go", 10, 4,
           NULL, 0, 0, 0);
    EXPECT(&p.v[5], "error", "declared and not used: z", "main.go", 11, 6, NULL, 0, 0, 0);
    EXPECT(&p.v[6], "error", "cannot use \"s\" (untyped string constant) as int value in variable declaration",
           "main.go", 11, 14, NULL, 0, 0, 0);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 7);
    parsed_free(&p);
}

static void test_go_too_many(void **state)
{
    (void)state;
    static const char *const files[] = {"go1.19_many.txt", "go1.26_many.txt"};
    for (size_t i = 0; i < 2; i++) {
        parsed p = parse_file(CF_DIAG_GO_TEXT, files[i], NULL);
        assert_int_equal(p.n, 11);
        EXPECT(&p.v[0], "error", "undefined: undef0", "main.go", 4, 8, NULL, 0, 0, 0);
        EXPECT(&p.v[9], "error", "undefined: undef9", "main.go", 13, 8, NULL, 0, 0, 0);
        /* go stops after 10 errors and says so: a note, not an 11th error. */
        EXPECT(&p.v[10], "note", "too many errors", "main.go", 13, 8, NULL, 0, 0, 0);
        assert_int_equal(cf_diag_count_errors(p.v, p.n), 10);
        parsed_free(&p);
    }
}

static void test_go_module_and_unparsed(void **state)
{
    (void)state;
    /* "# example.com/m/sub" header skipped; go 1.19 adds "note: module requires Go 1.22". */
    parsed p = parse_file(CF_DIAG_GO_TEXT, "go1.19_module.txt", NULL);
    assert_int_equal(p.n, 2);
    EXPECT(&p.v[0], "error", "cannot use \"x\" (untyped string constant) as int value in return statement",
           "sub/sub.go", 3, 23, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "note", "module requires Go 1.22", NULL, 0, 0, NULL, 0, 0, 0);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 1);
    parsed_free(&p);

    p = parse_file(CF_DIAG_GO_TEXT, "go1.26_module.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "cannot use \"x\" (untyped string constant) as int value in return statement",
           "sub/sub.go", 3, 23, NULL, 0, 0, 0);
    parsed_free(&p);

    /* The go command's own complaint: unparsed, kept as an error. */
    p = parse_file(CF_DIAG_GO_TEXT, "go1.26_no_module.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error",
           "go: go.mod file not found in current directory or any parent directory; see 'go help modules'", NULL, 0, 0,
           NULL, 0, 0, 0);
    parsed_free(&p);
}

static void test_go_line_shapes(void **state)
{
    (void)state;
    const char *text = "# command-line-arguments\r\n"
                       "./main.go:3: no column here\r\n"
                       "/work/pkg/a.go:7:2: absolute\n"
                       "\tcontinued\n"
                       "weird line one\n"
                       "\tits continuation\n"
                       "weird line two\n"
                       "\n"
                       "odd:name.go:5:1: colon in the name\n"
                       "main.go:x: not a location\n";
    cf_diag_opts o = {.strip_prefix = "/work"};
    parsed p = parse_opts(CF_DIAG_GO_TEXT, text, strlen(text), &o);
    assert_int_equal(p.n, 5);
    EXPECT(&p.v[0], "error", "no column here", "main.go", 3, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "error", "absolute\n\tcontinued", "pkg/a.go", 7, 2, NULL, 0, 0, 0);
    /* Consecutive unparsed lines: one error without location. */
    EXPECT(&p.v[2], "error", "weird line one\n\tits continuation\nweird line two", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[3], "error", "colon in the name", "odd:name.go", 5, 1, NULL, 0, 0, 0);
    EXPECT(&p.v[4], "error", "main.go:x: not a location", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
}

/* ---- tsc 5.9 --------------------------------------------------------------------- */

static void test_tsc_fixtures(void **state)
{
    (void)state;
    parsed p = parse_file(CF_DIAG_TSC_TEXT, "tsc5.9_type.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "Type 'string' is not assignable to type 'number'.", "main.ts", 1, 5, "TS2322", 0, 0, 0);
    parsed_free(&p);

    p = parse_file(CF_DIAG_TSC_TEXT, "tsc5.9_syntax.txt", NULL);
    assert_int_equal(p.n, 4);
    EXPECT(&p.v[0], "error", "',' expected.", "main.ts", 1, 22, "TS1005", 0, 0, 0);
    EXPECT(&p.v[1], "error", "':' expected.", "main.ts", 2, 10, "TS1005", 0, 0, 0);
    EXPECT(&p.v[2], "error", "',' expected.", "main.ts", 2, 11, "TS1005", 0, 0, 0);
    EXPECT(&p.v[3], "error", "')' expected.", "main.ts", 4, 1, "TS1005", 0, 0, 0);
    parsed_free(&p);

    /* tsc has no warnings: --noUnusedLocals reports an error. */
    p = parse_file(CF_DIAG_TSC_TEXT, "tsc5.9_unused.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "'unused' is declared but its value is never read.", "main.ts", 1, 7, "TS6133", 0, 0, 0);
    parsed_free(&p);

    p = parse_file(CF_DIAG_TSC_TEXT, "tsc5.9_multi.txt", NULL);
    assert_int_equal(p.n, 4);
    EXPECT(&p.v[0], "error", "Property 'b' is missing in type '{ a: number; }' but required in type 'Foo'.", "main.ts",
           2, 7, "TS2741", 0, 0, 0);
    EXPECT(&p.v[1], "error", "Expected 2 arguments, but got 1.", "main.ts", 4, 1, "TS2554", 0, 0, 0);
    EXPECT(&p.v[2], "error", "Cannot find name 'undefinedName'. Did you mean 'undefined'?", "main.ts", 5, 13,
           "TS2552", 0, 0, 0);
    EXPECT(&p.v[3], "error", "Type 'string' is not assignable to type 'number'.", "main.ts", 6, 40, "TS2322", 0, 0,
           0);
    assert_int_equal(cf_diag_count_errors(p.v, p.n), 4);
    parsed_free(&p);

    /* Message chains: indented lines continue the message. */
    p = parse_file(CF_DIAG_TSC_TEXT, "tsc5.9_chain.txt", NULL);
    assert_int_equal(p.n, 2);
    EXPECT(&p.v[0], "error",
           "Type '{ x: number; y: string; }' is not assignable to type 'Point'.\n"
           "  Types of property 'y' are incompatible.\n"
           "    Type 'string' is not assignable to type 'number'.",
           "main.ts", 3, 7, "TS2322", 0, 0, 0);
    EXPECT(&p.v[1], "error",
           "Argument of type '(s: string) => string' is not assignable to parameter of type '(n: number) => string'.\n"
           "  Types of parameters 's' and 'n' are incompatible.\n"
           "    Type 'number' is not assignable to type 'string'.",
           "main.ts", 5, 6, "TS2345", 0, 0, 0);
    parsed_free(&p);

    /* A global error: no file. */
    p = parse_file(CF_DIAG_TSC_TEXT, "tsc5.9_global.txt", NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "Unknown compiler option '--bogusOption'.", NULL, 0, 0, "TS5023", 0, 0, 0);
    parsed_free(&p);
}

static void test_tsc_line_shapes(void **state)
{
    (void)state;
    const char *text = "src/a (1).ts(2,3): warning TS9999: odd name\n"
                       "/work/b.ts(10,1): message TS6194: info\n"
                       "c.ts(1,2): error TSx: not a code\n"
                       "  continues the unparsed line\n"
                       "d.ts(99999999999999999999,2): error TS1: huge line\n";
    cf_diag_opts o = {.strip_prefix = "/work"};
    parsed p = parse_opts(CF_DIAG_TSC_TEXT, text, strlen(text), &o);
    assert_int_equal(p.n, 4);
    EXPECT(&p.v[0], "warning", "odd name", "src/a (1).ts", 2, 3, "TS9999", 0, 0, 0);
    EXPECT(&p.v[1], "note", "info", "b.ts", 10, 1, "TS6194", 0, 0, 0);
    EXPECT(&p.v[2], "error", "c.ts(1,2): error TSx: not a code\n  continues the unparsed line", NULL, 0, 0, NULL, 0, 0,
           0);
    EXPECT(&p.v[3], "error", "huge line", "d.ts", 0, 2, "TS1", 0, 0, 0);
    parsed_free(&p);
}

/* ---- hostile input ---------------------------------------------------------------- */

static void test_truncated_json(void **state)
{
    (void)state;
    size_t len;
    char *text = read_fixture("gcc12_multi.txt", &len);
    parsed p = parse_opts(CF_DIAG_GCC_JSON, text, len / 2, NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", p.v[0].message, NULL, 0, 0, NULL, 0, 0, 0);
    assert_memory_equal(p.v[0].message, "[{\"kind\": \"error\"", 17);
    assert_true(strlen(p.v[0].message) <= CF_DIAG_MESSAGE_MAX_DEFAULT);
    parsed_free(&p);
    free(text);

    /* rustc: a cut line is text; the lines after it still parse. */
    const char *rs = "{\"$message_type\":\"diagnostic\",\"message\":\"cut\n"
                     "{\"message\":\"whole\",\"level\":\"warning\",\"spans\":[],\"children\":[]}\n";
    p = parse_str(CF_DIAG_RUSTC_JSON, rs);
    assert_int_equal(p.n, 2);
    EXPECT(&p.v[0], "error", "{\"$message_type\":\"diagnostic\",\"message\":\"cut", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "warning", "whole", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
}

static void test_json_shapes(void **state)
{
    (void)state;
    /* An object instead of an array: taken as one diagnostic. */
    parsed p = parse_str(CF_DIAG_GCC_JSON, "{\"kind\":\"warning\",\"message\":\"lone\",\"locations\":[]}\n");
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "warning", "lone", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);

    /* An object that is no diagnostic: text. */
    p = parse_str(CF_DIAG_GCC_JSON, "{\"a\": 1}\n");
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "{\"a\": 1}", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);

    /* Elements of every type; fields of the wrong type are unknown. */
    p = parse_str(CF_DIAG_GCC_JSON,
                  "[1, \"x\", null, [], {\"message\":\"no kind\"},"
                  " {\"kind\":7,\"message\":\"bad kind\",\"option\":[],\"locations\":{\"caret\":1}},"
                  " {\"kind\":\"error\",\"message\":\"bad loc\",\"locations\":[{\"caret\":{\"file\":5,\"line\":\"3\","
                  "\"column\":2.5}}]}, {\"kind\":\"note\",\"message\":\"attached\",\"locations\":[7]}]\n");
    assert_int_equal(p.n, 7);
    EXPECT(&p.v[0], "error", "1", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "error", "\"x\"", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[2], "error", "null", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[3], "error", "[]", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[4], "error", "no kind", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[5], "error", "bad kind", NULL, 0, 0, NULL, 0, 0, 0);
    EXPECT(&p.v[6], "error", "bad loc", NULL, 0, 0, NULL, 0, 0, 1);
    EXPECT(&p.v[6].children[0], "note", "attached", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);

    /* rustc: an array or a bare value is not a diagnostic line. */
    p = parse_str(CF_DIAG_RUSTC_JSON, "[{\"message\":\"m\",\"level\":\"error\"}]\n42\n");
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "[{\"message\":\"m\",\"level\":\"error\"}]\n42", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);

    /* Nothing at all. */
    p = parse_str(CF_DIAG_GCC_JSON, "");
    assert_int_equal(p.n, 0);
    parsed_free(&p);
    p = parse_str(CF_DIAG_GCC_JSON, "[]\n\n   \n");
    assert_int_equal(p.n, 0);
    parsed_free(&p);
    cf_diagnostic *v = NULL;
    size_t n = 0;
    assert_int_equal(cf_diag_parse(CF_DIAG_GO_TEXT, NULL, 5, NULL, &v, &n, NULL), 0);
    assert_int_equal(n, 0);
}

static void test_numbers(void **state)
{
    (void)state;
    /* Negative and fractional: unknown (0); the largest int64 stays. */
    parsed p = parse_str(CF_DIAG_GCC_JSON,
                         "[{\"kind\":\"error\",\"message\":\"m\",\"locations\":[{\"caret\":{\"file\":\"a.c\","
                         "\"line\":-5,\"column\":9223372036854775807},\"finish\":{\"line\":-1,\"column\":1.5}}]}]\n");
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "m", "a.c", 0, INT64_MAX, NULL, 0, 0, 0);
    parsed_free(&p);

    /* Past int64: jansson refuses the document, so it is text. */
    p = parse_str(CF_DIAG_GCC_JSON, "[{\"kind\":\"error\",\"message\":\"m\",\"locations\":[{\"caret\":{\"line\":"
                                    "99999999999999999999999}}]}]\n");
    assert_int_equal(p.n, 1);
    assert_null(p.v[0].file);
    assert_int_equal(p.v[0].line, 0);
    assert_non_null(strstr(p.v[0].message, "99999999999999999999999"));
    parsed_free(&p);

    p = parse_str(CF_DIAG_RUSTC_JSON,
                  "{\"message\":\"m\",\"level\":\"error\",\"spans\":[{\"file_name\":\"a.rs\",\"line_start\":-3,"
                  "\"line_end\":-9223372036854775808,\"column_start\":4,\"column_end\":null,\"is_primary\":true}]}\n");
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "m", "a.rs", 0, 4, NULL, 0, 0, 0);
    parsed_free(&p);

    p = parse_str(CF_DIAG_GO_TEXT, "main.go:99999999999999999999:1: huge\nmain.go:123456789012345678:2: big\n");
    assert_int_equal(p.n, 2);
    EXPECT(&p.v[0], "error", "huge", "main.go", 0, 1, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "error", "big", "main.go", 123456789012345678, 2, NULL, 0, 0, 0);
    parsed_free(&p);
}

/* 100 levels of children: flattened to CF_DIAG_NEST_MAX levels, without
 * recursion; what lies deeper is counted in a note. */
static void test_deep_children(void **state)
{
    (void)state;
    enum { DEPTH = 100 };
    cf_buf b;
    cf_buf_init(&b, 0);
    char part[128];
    assert_int_equal(cf_buf_append(&b, "[", 1, NULL), 0);
    for (int i = 0; i < DEPTH; i++) {
        int l = snprintf(part, sizeof(part), "{\"kind\":\"%s\",\"message\":\"level %d\",\"children\":[",
                         i ? "note" : "error", i);
        assert_int_equal(cf_buf_append(&b, part, (size_t)l, NULL), 0);
    }
    for (int i = 0; i < DEPTH; i++)
        assert_int_equal(cf_buf_append(&b, "]}", 2, NULL), 0);
    assert_int_equal(cf_buf_append(&b, "]\n", 2, NULL), 0);
    parsed p = parse_opts(CF_DIAG_GCC_JSON, (const char *)b.data, b.len, NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "level 0", NULL, 0, 0, NULL, 0, 0, CF_DIAG_NEST_MAX + 1);
    for (int i = 0; i < CF_DIAG_NEST_MAX; i++) {
        snprintf(part, sizeof(part), "level %d", i + 1);
        EXPECT(&p.v[0].children[i], "note", part, NULL, 0, 0, NULL, 0, 0, 0);
    }
    EXPECT(&p.v[0].children[CF_DIAG_NEST_MAX], "note", "1 more note dropped", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
    cf_buf_free(&b);

    /* rustc's shape, nested as deep: the same. */
    cf_buf_init(&b, 0);
    const char *top = "{\"message\":\"top\",\"level\":\"error\",\"spans\":[],\"children\":[";
    assert_int_equal(cf_buf_append(&b, top, strlen(top), NULL), 0);
    for (int i = 0; i < DEPTH; i++) {
        int l = snprintf(part, sizeof(part), "{\"message\":\"c%d\",\"level\":\"help\",\"spans\":[],\"children\":[", i);
        assert_int_equal(cf_buf_append(&b, part, (size_t)l, NULL), 0);
    }
    for (int i = 0; i < DEPTH; i++)
        assert_int_equal(cf_buf_append(&b, "]}", 2, NULL), 0);
    assert_int_equal(cf_buf_append(&b, "]}\n", 3, NULL), 0);
    p = parse_opts(CF_DIAG_RUSTC_JSON, (const char *)b.data, b.len, NULL);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.v[0].n_children, CF_DIAG_NEST_MAX + 1);
    EXPECT(&p.v[0].children[0], "help", "c0", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
    cf_buf_free(&b);
}

/* Wide instead of deep: CF_DIAG_CHILDREN_MAX kept, the rest counted. */
static void test_many_children(void **state)
{
    (void)state;
    cf_buf b;
    cf_buf_init(&b, 0);
    const char *head = "[{\"kind\":\"error\",\"message\":\"top\",\"children\":[";
    assert_int_equal(cf_buf_append(&b, head, strlen(head), NULL), 0);
    for (int i = 0; i < 1000; i++) {
        const char *c = i ? ",{\"kind\":\"note\",\"message\":\"n\"}" : "{\"kind\":\"note\",\"message\":\"n\"}";
        assert_int_equal(cf_buf_append(&b, c, strlen(c), NULL), 0);
    }
    assert_int_equal(cf_buf_append(&b, "]}]\n", 4, NULL), 0);
    parsed p = parse_opts(CF_DIAG_GCC_JSON, (const char *)b.data, b.len, NULL);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.v[0].n_children, CF_DIAG_CHILDREN_MAX + 1);
    EXPECT(&p.v[0].children[CF_DIAG_CHILDREN_MAX], "note", "968 more notes dropped", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
    cf_buf_free(&b);
}

static void flood(cf_diag_format fmt, cf_buf *b, int count)
{
    char line[256];
    cf_buf_init(b, 0);
    if (fmt == CF_DIAG_GCC_JSON)
        assert_int_equal(cf_buf_append(b, "[", 1, NULL), 0);
    for (int i = 0; i < count; i++) {
        int l = 0;
        switch (fmt) {
        case CF_DIAG_GCC_JSON:
            l = snprintf(line, sizeof(line),
                         "%s{\"kind\":\"error\",\"message\":\"e%d\",\"locations\":[{\"caret\":{\"file\":\"a.c\","
                         "\"line\":%d,\"column\":1}}]}",
                         i ? "," : "", i, i + 1);
            break;
        case CF_DIAG_RUSTC_JSON:
            l = snprintf(line, sizeof(line), "{\"message\":\"e%d\",\"level\":\"error\",\"spans\":[]}\n", i);
            break;
        case CF_DIAG_GO_TEXT: l = snprintf(line, sizeof(line), "./a.go:%d:1: e%d\n", i + 1, i); break;
        case CF_DIAG_TSC_TEXT: l = snprintf(line, sizeof(line), "a.ts(%d,1): error TS1: e%d\n", i + 1, i); break;
        }
        assert_int_equal(cf_buf_append(b, line, (size_t)l, NULL), 0);
    }
    if (fmt == CF_DIAG_GCC_JSON)
        assert_int_equal(cf_buf_append(b, "]\n", 2, NULL), 0);
}

static void test_flood(void **state)
{
    (void)state;
    static const cf_diag_format fmts[] = {CF_DIAG_GCC_JSON, CF_DIAG_RUSTC_JSON, CF_DIAG_GO_TEXT, CF_DIAG_TSC_TEXT};
    for (size_t f = 0; f < 4; f++) {
        cf_buf b;
        flood(fmts[f], &b, 10000);
        parsed p = parse_opts(fmts[f], (const char *)b.data, b.len, NULL);
        assert_int_equal(p.n, CF_DIAG_MAX_DEFAULT + 1);
        assert_string_equal(p.v[0].message, "e0");
        assert_string_equal(p.v[CF_DIAG_MAX_DEFAULT - 1].message, "e199");
        EXPECT(&p.v[CF_DIAG_MAX_DEFAULT], "note", "9800 more diagnostics dropped", NULL, 0, 0, NULL, 0, 0, 0);
        assert_int_equal(cf_diag_count_errors(p.v, p.n), CF_DIAG_MAX_DEFAULT);
        parsed_free(&p);
        cf_buf_free(&b);
    }

    /* A smaller cap, and exactly at the cap: no note. */
    cf_buf b;
    flood(CF_DIAG_GO_TEXT, &b, 3);
    cf_diag_opts o = {.max_diagnostics = 3};
    parsed p = parse_opts(CF_DIAG_GO_TEXT, (const char *)b.data, b.len, &o);
    assert_int_equal(p.n, 3);
    parsed_free(&p);
    o.max_diagnostics = 2;
    p = parse_opts(CF_DIAG_GO_TEXT, (const char *)b.data, b.len, &o);
    assert_int_equal(p.n, 3);
    EXPECT(&p.v[2], "note", "1 more diagnostic dropped", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);
    cf_buf_free(&b);
}

/* The byte budget drops entries as the count cap does. */
static void test_total_budget(void **state)
{
    (void)state;
    cf_buf b;
    cf_buf_init(&b, 0);
    char *big = malloc(3001);
    assert_non_null(big);
    memset(big, 'x', 3000);
    big[3000] = '\0';
    for (int i = 0; i < 100; i++) {
        assert_int_equal(cf_buf_append(&b, "a.go:1:1: ", 10, NULL), 0);
        assert_int_equal(cf_buf_append(&b, big, 3000, NULL), 0);
        assert_int_equal(cf_buf_append(&b, "\n", 1, NULL), 0);
    }
    cf_diag_opts o = {.max_total_bytes = 10000};
    parsed p = parse_opts(CF_DIAG_GO_TEXT, (const char *)b.data, b.len, &o);
    assert_int_equal(p.n, 4); /* 3 x ~3040 bytes fit in 10000 */
    EXPECT(&p.v[3], "note", "97 more diagnostics dropped", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);

    /* Default budget: 256 KiB of 4 KiB messages. */
    cf_buf_free(&b);
    cf_buf_init(&b, 0);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(cf_buf_append(&b, "a.go:1:1: ", 10, NULL), 0);
        for (int k = 0; k < 2; k++)
            assert_int_equal(cf_buf_append(&b, big, 3000, NULL), 0);
        assert_int_equal(cf_buf_append(&b, "\n", 1, NULL), 0);
    }
    p = parse_opts(CF_DIAG_GO_TEXT, (const char *)b.data, b.len, NULL);
    size_t total = 0;
    for (size_t i = 0; i < p.n; i++)
        total += strlen(p.v[i].message);
    assert_true(total <= CF_DIAG_TOTAL_MAX_DEFAULT);
    assert_true(p.n < 200);
    assert_non_null(strstr(p.v[p.n - 1].message, "more diagnostics dropped"));
    parsed_free(&p);
    free(big);
    cf_buf_free(&b);
}

static void test_nul_bytes(void **state)
{
    (void)state;
    /* \u0000 inside a JSON string (jansson keeps it with JSON_ALLOW_NUL). */
    parsed p = parse_str(CF_DIAG_RUSTC_JSON,
                         "{\"message\":\"a\\u0000b\",\"level\":\"error\",\"spans\":[{\"file_name\":\"x\\u0000.rs\","
                         "\"line_start\":1,\"column_start\":1,\"is_primary\":true}]}\n");
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "a" FFFD "b", "x" FFFD ".rs", 1, 1, NULL, 0, 0, 0);
    parsed_free(&p);

    /* Raw NUL bytes: in a JSON string, in a text line, in a file name. */
    static const char gcc[] = "[{\"kind\":\"error\",\"message\":\"m\0n\"}]\n";
    p = parse_opts(CF_DIAG_GCC_JSON, gcc, sizeof(gcc) - 1, NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "m" FFFD "n", NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);

    static const char go[] = "ma\0in.go:1:2: x\0y\n\0\n\tz\0\n";
    p = parse_opts(CF_DIAG_GO_TEXT, go, sizeof(go) - 1, NULL);
    assert_int_equal(p.n, 2);
    EXPECT(&p.v[0], "error", "x" FFFD "y", "ma" FFFD "in.go", 1, 2, NULL, 0, 0, 0);
    EXPECT(&p.v[1], "error", FFFD "\n\tz" FFFD, NULL, 0, 0, NULL, 0, 0, 0);
    parsed_free(&p);

    /* Nothing is read past len: the NUL-free prefix only. */
    static const char cut[] = "a.ts(1,1): error TS1: abcdef";
    p = parse_opts(CF_DIAG_TSC_TEXT, cut, sizeof(cut) - 4, NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "abc", "a.ts", 1, 1, "TS1", 0, 0, 0);
    parsed_free(&p);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    /* Latin-1, a lone continuation byte, an overlong '/', a surrogate, a cut sequence. */
    static const char go[] = "caf\xe9.go:1:1: bad \x80 \xc0\xaf \xed\xa0\x80 \xe2\x82\n";
    parsed p = parse_opts(CF_DIAG_GO_TEXT, go, sizeof(go) - 1, NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "error", "bad " FFFD " " FFFD FFFD " " FFFD FFFD FFFD " " FFFD FFFD, "caf" FFFD ".go", 1, 1,
           NULL, 0, 0, 0);
    parsed_free(&p);

    /* Invalid bytes inside a JSON string: the document still parses. */
    static const char gcc[] = "[{\"kind\":\"warning\",\"message\":\"\xff\xfe ok \xe2\x9c\x93\",\"locations\":"
                              "[{\"caret\":{\"file\":\"\xc3(.c\",\"line\":2,\"column\":3}}]}]\n";
    p = parse_opts(CF_DIAG_GCC_JSON, gcc, sizeof(gcc) - 1, NULL);
    assert_int_equal(p.n, 1);
    EXPECT(&p.v[0], "warning", FFFD FFFD " ok \xe2\x9c\x93", FFFD "(.c", 2, 3, NULL, 2, 3, 0);
    parsed_free(&p);

    /* Cutting a message never splits a character. */
    cf_buf b;
    cf_buf_init(&b, 0);
    assert_int_equal(cf_buf_append(&b, "a.go:1:1: ", 10, NULL), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(cf_buf_append(&b, "\xc3\xa9", 2, NULL), 0); /* é */
    cf_diag_opts o = {.max_message_bytes = 20};
    p = parse_opts(CF_DIAG_GO_TEXT, (const char *)b.data, b.len, &o);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.v[0].message, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9...");
    parsed_free(&p);
    cf_buf_free(&b);
}

static void test_megabyte_line(void **state)
{
    (void)state;
    enum { MB = 1 << 20 };
    static const cf_diag_format fmts[] = {CF_DIAG_GCC_JSON, CF_DIAG_RUSTC_JSON, CF_DIAG_GO_TEXT, CF_DIAG_TSC_TEXT};
    char *text = malloc(MB + 64);
    assert_non_null(text);
    for (size_t f = 0; f < 4; f++) {
        /* Unparsable: one line of 1 MB of 'a' (no newline at the end). */
        memset(text, 'a', MB);
        parsed p = parse_opts(fmts[f], text, MB, NULL);
        assert_int_equal(p.n, 1);
        assert_int_equal(strlen(p.v[0].message), CF_DIAG_MESSAGE_MAX_DEFAULT);
        assert_memory_equal(p.v[0].message + CF_DIAG_MESSAGE_MAX_DEFAULT - 4, "a...", 4);
        parsed_free(&p);
    }

    /* A real diagnostic with a 1 MB message, and a 1 MB file name. */
    size_t l = (size_t)snprintf(text, 64, "[{\"kind\":\"error\",\"message\":\"");
    memset(text + l, 'm', MB);
    l += MB;
    memcpy(text + l, "\"}]\n", 4);
    parsed p = parse_opts(CF_DIAG_GCC_JSON, text, l + 4, NULL);
    assert_int_equal(p.n, 1);
    assert_int_equal(strlen(p.v[0].message), CF_DIAG_MESSAGE_MAX_DEFAULT);
    parsed_free(&p);

    memset(text, 'f', MB);
    memcpy(text + MB, ":1:1: m\n", 8);
    p = parse_opts(CF_DIAG_GO_TEXT, text, MB + 8, NULL);
    assert_int_equal(p.n, 1);
    assert_int_equal(strlen(p.v[0].file), CF_DIAG_FILE_MAX);
    assert_string_equal(p.v[0].message, "m");
    parsed_free(&p);
    free(text);
}

static void test_append_and_args(void **state)
{
    (void)state;
    /* *v may hold entries already: they stay, new ones follow. */
    parsed p = parse_file(CF_DIAG_GO_TEXT, "go1.26_type.txt", NULL);
    cf_error err = {0};
    size_t len;
    char *text = read_fixture("tsc5.9_multi.txt", &len);
    assert_int_equal(cf_diag_parse(CF_DIAG_TSC_TEXT, text, len, NULL, &p.v, &p.n, &err), 0);
    free(text);
    assert_int_equal(p.n, 5);
    assert_string_equal(p.v[0].file, "main.go");
    assert_string_equal(p.v[1].code, "TS2741");
    assert_wire_ok(p.v, p.n);
    parsed_free(&p);

    assert_int_equal(cf_diag_parse(CF_DIAG_GO_TEXT, "x", 1, NULL, NULL, &p.n, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_diag_count_errors(NULL, 0), 0);

    /* A tiny max_message_bytes is raised to a usable minimum. */
    cf_diag_opts o = {.max_message_bytes = 1};
    p = parse_opts(CF_DIAG_GO_TEXT, "a.go:1:1: 0123456789abcdefghij\n", 31, &o);
    assert_string_equal(p.v[0].message, "0123456789abc...");
    parsed_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gcc_syntax),
        cmocka_unit_test(test_gcc_type),
        cmocka_unit_test(test_gcc_warning),
        cmocka_unit_test(test_gcc_multi),
        cmocka_unit_test(test_gcc_link),
        cmocka_unit_test(test_gcc_fatal),
        cmocka_unit_test(test_gcc_strip_prefix),
        cmocka_unit_test(test_gcc_two_units),
        cmocka_unit_test(test_gpp_type),
        cmocka_unit_test(test_rustc_syntax),
        cmocka_unit_test(test_rustc_type),
        cmocka_unit_test(test_rustc_warning),
        cmocka_unit_test(test_rustc_multi),
        cmocka_unit_test(test_rustc_notes),
        cmocka_unit_test(test_rustc_mixed),
        cmocka_unit_test(test_rustc_abs_path_and_no_spans),
        cmocka_unit_test(test_rustc_skips_precisely),
        cmocka_unit_test(test_go_syntax_and_type),
        cmocka_unit_test(test_go_multi),
        cmocka_unit_test(test_go_too_many),
        cmocka_unit_test(test_go_module_and_unparsed),
        cmocka_unit_test(test_go_line_shapes),
        cmocka_unit_test(test_tsc_fixtures),
        cmocka_unit_test(test_tsc_line_shapes),
        cmocka_unit_test(test_truncated_json),
        cmocka_unit_test(test_json_shapes),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_deep_children),
        cmocka_unit_test(test_many_children),
        cmocka_unit_test(test_flood),
        cmocka_unit_test(test_total_budget),
        cmocka_unit_test(test_nul_bytes),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_megabyte_line),
        cmocka_unit_test(test_append_and_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
