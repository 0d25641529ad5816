/* Unit tests of the collaboration event codec (schema/cf_event.c): golden
 * vectors both ways (C and the independent Python codec), round trips in
 * msgpack and JSON, and every malformed-input class.
 *
 * Regenerate the vectors after an intentional change only:
 *   CF_SCHEMA_WRITE_GOLDEN=1 CF_SOURCE_DIR=<repo> ./unit_test_events
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_event.h"
#include "cf_events.h"
#include "cf_schema_int.h"

extern char **environ;

/* ---- fixtures ------------------------------------------------------------ */

static void make_min(cf_event *e)
{
    memset(e, 0, sizeof(*e));
    e->id = strdup("evt-min-0001");
    e->workspace = strdup("ws-42");
    e->correlation_id = strdup("task-7");
    e->topic = strdup("parser");
    e->producer = strdup("agent:alice");
    e->kind = CF_EVENT_NEED_WORK;
    e->timestamp_us = INT64_C(1767225600000000);
}

static void pack_sample_payload(cf_bytes *out)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6);
    msgpack_pack_str_with_body(&pk, "question", 8);
    msgpack_pack_str_with_body(&pk, "LALR or PEG?", 12);
    msgpack_pack_str_with_body(&pk, "files", 5);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "src/parse.c", 11);
    msgpack_pack_str_with_body(&pk, "src/lex.c", 9);
    msgpack_pack_str_with_body(&pk, "priority", 8);
    msgpack_pack_int64(&pk, 2);
    msgpack_pack_str_with_body(&pk, "blocking", 8);
    msgpack_pack_true(&pk);
    msgpack_pack_str_with_body(&pk, "score", 5);
    msgpack_pack_double(&pk, 0.5);
    msgpack_pack_str_with_body(&pk, "context", 7);
    msgpack_pack_nil(&pk);
    assert_int_equal(cf_bytes_set(out, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
}

static void make_full(cf_event *e)
{
    memset(e, 0, sizeof(*e));
    e->id = strdup("evt-full-0001");
    e->workspace = strdup("ws-42");
    e->correlation_id = strdup("task-7");
    e->topic = strdup("parser/review");
    e->producer = strdup("agent:alice");
    e->consumer = strdup("agent:bob");
    e->kind = CF_EVENT_FEEDBACK_REQUESTED;
    pack_sample_payload(&e->payload);
    e->timestamp_us = INT64_C(1767225600123456);
}

static void assert_str_eq(const char *a, const char *b)
{
    if (!a || !b)
        assert_ptr_equal(a, b);
    else
        assert_string_equal(a, b);
}

static void assert_event_eq(const cf_event *a, const cf_event *b)
{
    assert_str_eq(a->id, b->id);
    assert_str_eq(a->workspace, b->workspace);
    assert_str_eq(a->correlation_id, b->correlation_id);
    assert_str_eq(a->topic, b->topic);
    assert_str_eq(a->producer, b->producer);
    assert_str_eq(a->consumer, b->consumer);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->payload.len, b->payload.len);
    if (a->payload.len)
        assert_memory_equal(a->payload.data, b->payload.data, a->payload.len);
    assert_int_equal(a->timestamp_us, b->timestamp_us);
}

/* ---- files --------------------------------------------------------------- */

static void golden_path(char *buf, size_t cap, const char *name)
{
    const char *src = getenv("CF_SOURCE_DIR");
    struct stat st;
    if (!src || !*src) {
        static const char *const roots[] = {".", "..", "../..", "../../.."};
        src = ".";
        for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
            snprintf(buf, cap, "%s/schema/golden", roots[i]);
            if (stat(buf, &st) == 0) {
                src = roots[i];
                break;
            }
        }
    }
    snprintf(buf, cap, "%s/schema/golden/%s", src, name);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_error("cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *b = malloc(cap);
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

static void write_all(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static char *to_hex(const uint8_t *d, size_t n)
{
    char *s = malloc(n * 3 + n / 16 + 2);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        bool eol = i % 16 == 15 || i + 1 == n;
        snprintf(s + o, 4, "%02x%s", d[i], eol ? "" : " ");
        o += eol ? 2 : 3;
        if (eol)
            s[o++] = '\n';
    }
    s[o] = '\0';
    return s;
}

static uint8_t *load_golden(const char *base, const char *ext, size_t *len)
{
    char path[1024], name[128];
    snprintf(name, sizeof(name), "%s.%s", base, ext);
    golden_path(path, sizeof(path), name);
    uint8_t *g = read_all(path, len);
    assert_non_null(g);
    return g;
}

/* ---- golden vectors -------------------------------------------------------- */

static void golden_event(const char *base, void (*make)(cf_event *))
{
    cf_event want, got, fromj;
    cf_error err = {0};
    cf_bytes enc;
    make(&want);
    assert_int_equal(cf_event_encode(&want, &enc, &err), 0);
    json_t *js = cf_event_to_json(&want);
    assert_non_null(js);
    char *hex = to_hex(enc.data, enc.len);
    char path[1024], name[128];
    const char *w = getenv("CF_SCHEMA_WRITE_GOLDEN");
    if (w && strcmp(w, "1") == 0) {
        snprintf(name, sizeof(name), "%s.msgpack", base);
        golden_path(path, sizeof(path), name);
        write_all(path, enc.data, enc.len);
        snprintf(name, sizeof(name), "%s.hex", base);
        golden_path(path, sizeof(path), name);
        write_all(path, hex, strlen(hex));
        char *jtext = json_dumps(js, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        assert_non_null(jtext);
        size_t jl = strlen(jtext);
        snprintf(name, sizeof(name), "%s.json", base);
        golden_path(path, sizeof(path), name);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fprintf(f, "%s\n", jtext);
        assert_int_equal(fclose(f), 0);
        (void)jl;
        free(jtext);
    }
    /* encode(expected) == committed bytes, and the hex twin agrees */
    size_t glen, hlen, jlen;
    uint8_t *g = load_golden(base, "msgpack", &glen);
    assert_int_equal(glen, enc.len);
    assert_memory_equal(g, enc.data, glen);
    uint8_t *h = load_golden(base, "hex", &hlen);
    assert_int_equal(hlen, strlen(hex));
    assert_memory_equal(h, hex, hlen);
    /* decode(committed bytes) == expected */
    assert_int_equal(cf_event_decode(g, glen, NULL, &got, &err), 0);
    assert_event_eq(&got, &want);
    /* the JSON twin is the JSON form of the same event, and decodes to it */
    uint8_t *jt = load_golden(base, "json", &jlen);
    json_t *gj = json_loadb((const char *)jt, jlen, 0, NULL);
    assert_non_null(gj);
    assert_true(json_equal(gj, js));
    assert_int_equal(cf_event_from_json(gj, &fromj, &err), 0);
    assert_event_eq(&fromj, &want);

    json_decref(gj);
    json_decref(js);
    free(jt);
    free(h);
    free(g);
    free(hex);
    free(enc.data);
    cf_event_clear(&fromj);
    cf_event_clear(&got);
    cf_event_clear(&want);
}

static void test_golden_min(void **state)
{
    (void)state;
    golden_event("event_min", make_min);
}

static void test_golden_full(void **state)
{
    (void)state;
    golden_event("event_full", make_full);
}

/* The minimal event's first bytes, spelled out from the msgpack spec. */
static void test_golden_min_by_hand(void **state)
{
    (void)state;
    static const uint8_t want[] = {
        0x88,                                             /* map of 8 */
        0xa1, 'v', 0x01,                                  /* "v": 1 */
        0xa2, 'i', 'd', 0xac, 'e', 'v', 't', '-', 'm', 'i', 'n', '-', '0', '0', '0', '1',
        0xa9, 'w', 'o', 'r', 'k', 's', 'p', 'a', 'c', 'e', 0xa5, 'w', 's', '-', '4', '2',
    };
    size_t glen;
    uint8_t *g = load_golden("event_min", "msgpack", &glen);
    assert_true(glen > sizeof(want));
    assert_memory_equal(g, want, sizeof(want));
    /* ... and it ends with "timestamp_us": uint64 1767225600000000 */
    static const uint8_t tail[] = {0xac, 't', 'i', 'm', 'e', 's', 't', 'a', 'm', 'p', '_', 'u', 's',
                                   0xcf, 0x00, 0x06, 0x47, 0x48, 0x46, 0x20, 0x40, 0x00};
    assert_memory_equal(g + glen - sizeof(tail), tail, sizeof(tail));
    free(g);
}

static void test_golden_python(void **state)
{
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0)
        skip();
    char script[1024], dir[1024];
    golden_path(script, sizeof(script), "../tools/mp_check_events.py");
    golden_path(dir, sizeof(dir), "");
    char *argv[] = {"/usr/bin/python3", "-I", "-S", script, dir, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- round trips ---------------------------------------------------------- */

static void roundtrip(const cf_event *want)
{
    cf_error err = {0};
    cf_bytes a, b;
    cf_event got = {0}, fromj = {0};
    assert_int_equal(cf_event_encode(want, &a, &err), 0);
    if (cf_event_decode(a.data, a.len, NULL, &got, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_event_eq(&got, want);
    assert_int_equal(cf_event_encode(&got, &b, &err), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    json_t *j = cf_event_to_json(want);
    assert_non_null(j);
    char *text = json_dumps(j, JSON_COMPACT);
    json_t *back = json_loads(text, 0, NULL);
    if (cf_event_from_json(back, &fromj, &err) != 0)
        fail_msg("from_json: %s", err.msg);
    assert_event_eq(&fromj, want);
    json_decref(back);
    free(text);
    json_decref(j);
    free(a.data);
    free(b.data);
    cf_event_clear(&fromj);
    cf_event_clear(&got);
}

static void test_roundtrips(void **state)
{
    (void)state;
    cf_event e;
    make_full(&e);
    roundtrip(&e);
    /* every kind */
    for (int k = CF_EVENT_NEED_WORK; k < CF_EVENT_KIND__COUNT; k++) {
        e.kind = (cf_event_kind)k;
        roundtrip(&e);
    }
    /* nil payload is a value, distinct from absent */
    assert_int_equal(cf_bytes_set(&e.payload, "\xc0", 1), 0);
    roundtrip(&e);
    /* a payload with no JSON form travels as payload_msgpack */
    assert_int_equal(cf_bytes_set(&e.payload, "\x81\x01\xd4\x05\x07", 5), 0); /* {1: ext(5, 7)} */
    json_t *j = cf_event_to_json(&e);
    assert_non_null(json_object_get(j, "payload_msgpack"));
    assert_null(json_object_get(j, "payload"));
    json_decref(j);
    roundtrip(&e);
    /* UTF-8 text fields */
    free(e.topic);
    e.topic = strdup("r\xc3\xa9vision \xe2\x9c\x93");
    roundtrip(&e);
    cf_event_clear(&e);

    make_min(&e);
    roundtrip(&e);
    cf_event_clear(&e);

    /* cf_event_copy is deep */
    cf_event a, b = {0};
    make_full(&a);
    assert_int_equal(cf_event_copy(&b, &a, NULL), 0);
    assert_event_eq(&a, &b);
    assert_ptr_not_equal(a.payload.data, b.payload.data);
    cf_event_clear(&a);
    cf_event_clear(&b);
}

/* ---- malformed input ------------------------------------------------------ */

/* A message builder: map of n entries, entries packed by the caller. */
typedef struct mb {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} mb;

static void mb_init(mb *m, uint32_t n)
{
    msgpack_sbuffer_init(&m->sb);
    msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&m->pk, n);
}

static void mb_str(mb *m, const char *s)
{
    msgpack_pack_str_with_body(&m->pk, s, strlen(s));
}

static void mb_kv(mb *m, const char *k, const char *v)
{
    mb_str(m, k);
    mb_str(m, v);
}

/* The minimal event's fields except `skip`; `extra` more entries follow. */
static void mb_base(mb *m, const char *skip, uint32_t extra)
{
    static const char *const keys[] = {"v", "id", "workspace", "correlation_id", "topic", "producer", "kind",
                                       "timestamp_us"};
    uint32_t n = 8 - (skip ? 1 : 0) + extra;
    mb_init(m, n);
    for (size_t i = 0; i < 8; i++) {
        if (skip && strcmp(skip, keys[i]) == 0)
            continue;
        if (i == 0) {
            mb_str(m, "v");
            msgpack_pack_int64(&m->pk, 1);
        } else if (i == 7) {
            mb_str(m, "timestamp_us");
            msgpack_pack_int64(&m->pk, 1767225600000000);
        } else {
            static const char *const vals[] = {NULL, "e-1", "ws-1", "c-1", "t", "p", "blocked"};
            mb_kv(m, keys[i], vals[i]);
        }
    }
}

static void expect_fail(mb *m, cf_errcode code, const char *needle)
{
    cf_event e;
    cf_error err = {0};
    int rc = cf_event_decode(m->sb.data, m->sb.size, NULL, &e, &err);
    if (rc == 0)
        fail_msg("decoded, expected failure containing '%s'", needle);
    assert_int_equal(err.code, code);
    if (!strstr(err.msg, needle))
        fail_msg("error '%s' does not contain '%s'", err.msg, needle);
    /* cleared on failure */
    assert_null(e.id);
    assert_null(e.payload.data);
    msgpack_sbuffer_destroy(&m->sb);
}

static void expect_ok(mb *m, cf_event *out)
{
    cf_error err = {0};
    if (cf_event_decode(m->sb.data, m->sb.size, NULL, out, &err) != 0)
        fail_msg("decode failed: %s", err.msg);
    msgpack_sbuffer_destroy(&m->sb);
}

static void test_base_message_is_valid(void **state)
{
    (void)state;
    mb m;
    cf_event e;
    mb_base(&m, NULL, 0);
    expect_ok(&m, &e);
    assert_int_equal(e.kind, CF_EVENT_BLOCKED);
    assert_null(e.consumer);
    assert_int_equal(e.payload.len, 0);
    cf_event_clear(&e);
}

static void test_missing_fields(void **state)
{
    (void)state;
    static const char *const req[] = {"id", "workspace", "correlation_id", "topic", "producer", "kind",
                                      "timestamp_us"};
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
        mb m;
        mb_base(&m, req[i], 0);
        char needle[64];
        snprintf(needle, sizeof(needle), "missing required field \"%s\"", req[i]);
        expect_fail(&m, CF_E_INVALID, needle);
    }
    mb m;
    mb_base(&m, "v", 0);
    expect_fail(&m, CF_E_INVALID, "missing required field \"v\"");
}

static void test_version(void **state)
{
    (void)state;
    mb m;
    mb_init(&m, 2);
    mb_kv(&m, "id", "x"); /* a field before v: the version still wins */
    mb_str(&m, "v");
    msgpack_pack_int64(&m.pk, 2);
    expect_fail(&m, CF_E_UNSUPPORTED, "unsupported schema version 2");
    mb_init(&m, 1);
    mb_kv(&m, "v", "1");
    expect_fail(&m, CF_E_INVALID, "v: expected integer");
}

static void test_wrong_types(void **state)
{
    (void)state;
    static const char *const strs[] = {"id", "workspace", "correlation_id", "topic", "producer", "kind"};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        mb m;
        mb_base(&m, strs[i], 1);
        mb_str(&m, strs[i]);
        msgpack_pack_int64(&m.pk, 5);
        char needle[64];
        snprintf(needle, sizeof(needle), "%s: expected string", strs[i]);
        expect_fail(&m, CF_E_INVALID, needle);
    }
    mb m;
    mb_base(&m, NULL, 1);
    mb_str(&m, "consumer");
    msgpack_pack_array(&m.pk, 0);
    expect_fail(&m, CF_E_INVALID, "consumer: expected string");
    mb_base(&m, "timestamp_us", 1);
    mb_kv(&m, "timestamp_us", "now");
    expect_fail(&m, CF_E_INVALID, "timestamp_us: expected positive integer");
    mb_base(&m, "timestamp_us", 1);
    mb_str(&m, "timestamp_us");
    msgpack_pack_double(&m.pk, 1.5);
    expect_fail(&m, CF_E_INVALID, "timestamp_us: expected positive integer");
    mb_base(&m, "timestamp_us", 1);
    mb_str(&m, "timestamp_us");
    msgpack_pack_int64(&m.pk, 0);
    expect_fail(&m, CF_E_INVALID, "timestamp_us");
    mb_base(&m, "timestamp_us", 1);
    mb_str(&m, "timestamp_us");
    msgpack_pack_int64(&m.pk, -5);
    expect_fail(&m, CF_E_INVALID, "timestamp_us");
    mb_base(&m, "kind", 1);
    mb_kv(&m, "kind", "any"); /* a filter value, never a wire value */
    expect_fail(&m, CF_E_INVALID, "kind: unknown value");
    mb_base(&m, "kind", 1);
    mb_kv(&m, "kind", "NEED_WORK");
    expect_fail(&m, CF_E_INVALID, "kind: unknown value");
}

static void test_field_rules(void **state)
{
    (void)state;
    struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"id", "has space", "id: must be"},
        {"id", "", "id: must be"},
        {"correlation_id", "tab\there", "correlation_id: must be"},
        {"workspace", "../etc", "workspace: must be"},
        {"workspace", "a/b", "workspace: must be"},
        {"workspace", "sp ace", "workspace: must be"},
        {"topic", "", "topic: must be"},
        {"topic", "line\nbreak", "topic: control characters"},
        {"producer", "esc\x1b[31m", "producer: control characters"},
        {"producer", "del\x7f", "producer: control characters"},
        {"topic", "bad \xc3\x28 utf8", "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mb m;
        mb_base(&m, cases[i].key, 1);
        mb_kv(&m, cases[i].key, cases[i].value);
        expect_fail(&m, CF_E_INVALID, cases[i].needle);
    }
    /* NUL inside a string */
    mb m;
    mb_base(&m, "topic", 1);
    mb_str(&m, "topic");
    msgpack_pack_str_with_body(&m.pk, "a\0b", 3);
    expect_fail(&m, CF_E_INVALID, "topic: string is not valid UTF-8 without NUL");
    /* too long */
    char big[300];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    mb_base(&m, "topic", 1);
    mb_kv(&m, "topic", big);
    expect_fail(&m, CF_E_INVALID, "topic: must be 1..256");
    mb_base(&m, "id", 1);
    big[129] = '\0';
    mb_kv(&m, "id", big);
    expect_fail(&m, CF_E_INVALID, "id: must be");
    /* 128 is fine */
    big[128] = '\0';
    mb_base(&m, "workspace", 1);
    mb_kv(&m, "workspace", big);
    cf_event e;
    expect_ok(&m, &e);
    assert_int_equal(strlen(e.workspace), 128);
    cf_event_clear(&e);
}

static void test_structure(void **state)
{
    (void)state;
    cf_event e;
    cf_error err = {0};
    /* not a map, empty, garbage */
    assert_int_equal(cf_event_decode("\x93\x01\x02\x03", 4, NULL, &e, &err), -1);
    assert_non_null(strstr(err.msg, "expected a msgpack map"));
    assert_int_equal(cf_event_decode("", 0, NULL, &e, &err), -1);
    assert_int_equal(cf_event_decode(NULL, 0, NULL, &e, &err), -1);
    assert_int_equal(cf_event_decode("\xc1", 1, NULL, &e, &err), -1);
    /* duplicate known field */
    mb m;
    mb_base(&m, NULL, 1);
    mb_kv(&m, "topic", "again");
    expect_fail(&m, CF_E_INVALID, "topic: duplicate field");
    /* non-string key */
    mb_base(&m, NULL, 1);
    msgpack_pack_int64(&m.pk, 7);
    mb_str(&m, "x");
    expect_fail(&m, CF_E_INVALID, "expected string keys");
    /* trailing bytes */
    mb_base(&m, NULL, 0);
    msgpack_pack_nil(&m.pk);
    expect_fail(&m, CF_E_INVALID, "1 trailing bytes");
    /* unknown fields are ignored (also twice); nil consumer = absent */
    mb_base(&m, NULL, 3);
    mb_kv(&m, "future", "x");
    mb_kv(&m, "future", "y");
    mb_str(&m, "consumer");
    msgpack_pack_nil(&m.pk);
    expect_ok(&m, &e);
    assert_null(e.consumer);
    cf_event_clear(&e);
    /* a map32 header declaring 2^28 entries is refused at once */
    static const uint8_t huge[] = {0xdf, 0x10, 0x00, 0x00, 0x00, 0xa1, 'v', 0x01};
    assert_int_equal(cf_event_decode(huge, sizeof(huge), NULL, &e, &err), -1);
    /* so is a payload array declaring more elements than bytes */
    mb_base(&m, NULL, 1);
    mb_str(&m, "payload");
    static const uint8_t arr[] = {0xdd, 0x7f, 0xff, 0xff, 0xff, 0x01};
    msgpack_sbuffer_write(&m.sb, (const char *)arr, sizeof(arr));
    expect_fail(&m, CF_E_LIMIT, "payload: array declares");
    /* ... and one within the element limit but beyond the bytes left */
    mb_base(&m, NULL, 1);
    mb_str(&m, "payload");
    static const uint8_t arr2[] = {0xdc, 0x01, 0x00, 0x01};
    msgpack_sbuffer_write(&m.sb, (const char *)arr2, sizeof(arr2));
    expect_fail(&m, CF_E_INVALID, "payload");
}

static void test_payload_limits(void **state)
{
    (void)state;
    /* nesting: the payload sits at depth 2; 40 nested arrays exceed 32 */
    mb m;
    mb_base(&m, NULL, 1);
    mb_str(&m, "payload");
    for (int i = 0; i < 40; i++)
        msgpack_pack_array(&m.pk, 1);
    msgpack_pack_nil(&m.pk);
    expect_fail(&m, CF_E_LIMIT, "payload");
    /* 31 levels are fine */
    cf_event e;
    mb_base(&m, NULL, 1);
    mb_str(&m, "payload");
    for (int i = 0; i < 30; i++)
        msgpack_pack_array(&m.pk, 1);
    msgpack_pack_nil(&m.pk);
    expect_ok(&m, &e);
    cf_event_clear(&e);
    /* size cap */
    size_t n = CF_EVENT_PAYLOAD_MAX + 1;
    char *big = malloc(n);
    memset(big, 'a', n);
    mb_base(&m, NULL, 1);
    mb_str(&m, "payload");
    msgpack_pack_bin_with_body(&m.pk, big, n);
    expect_fail(&m, CF_E_LIMIT, "payload");
    /* encoder refuses it too */
    make_min(&e);
    assert_int_equal(cf_bytes_set(&e.payload, big, n), 0);
    cf_bytes out = {0};
    cf_error err = {0};
    assert_int_equal(cf_event_encode(&e, &out, &err), -1);
    assert_int_equal(err.code, CF_E_LIMIT);
    assert_null(out.data);
    cf_event_clear(&e);
    free(big);
}

/* Every prefix of a valid message is refused cleanly (run under ASan). */
static void test_truncated_every_offset(void **state)
{
    (void)state;
    cf_event e;
    cf_error err = {0};
    size_t glen;
    uint8_t *g = load_golden("event_full", "msgpack", &glen);
    for (size_t i = 0; i < glen; i++) {
        uint8_t *p = malloc(i ? i : 1); /* exact size so ASan sees overreads */
        memcpy(p, g, i);
        if (cf_event_decode(p, i, NULL, &e, &err) == 0)
            fail_msg("prefix of %zu bytes decoded", i);
        free(p);
    }
    free(g);
}

/* Byte mutations of the golden event must never crash or leak. */
static void test_mutation_fuzz(void **state)
{
    (void)state;
    size_t glen;
    uint8_t *g = load_golden("event_full", "msgpack", &glen);
    uint32_t seed = 12345;
    int decoded = 0;
    for (int round = 0; round < 20000; round++) {
        uint8_t *p = malloc(glen);
        memcpy(p, g, glen);
        int flips = 1 + round % 3;
        for (int f = 0; f < flips; f++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % glen;
            seed = seed * 1103515245u + 12345u;
            p[at] = (uint8_t)(seed >> 16);
        }
        cf_event e;
        cf_error err = {0};
        if (cf_event_decode(p, glen, NULL, &e, &err) == 0) {
            decoded++;
            /* whatever decoded re-encodes and passes the same checks */
            cf_bytes out;
            assert_int_equal(cf_event_encode(&e, &out, &err), 0);
            free(out.data);
            cf_event_clear(&e);
        }
        free(p);
    }
    free(g);
    assert_true(decoded > 0); /* some mutations (payload bytes) stay valid */
}

static void test_encoder_rejects_invalid(void **state)
{
    (void)state;
    cf_event e;
    cf_bytes out;
    cf_error err = {0};
    make_min(&e);
    free(e.producer);
    e.producer = NULL;
    assert_int_equal(cf_event_encode(&e, &out, &err), -1);
    assert_non_null(strstr(err.msg, "producer"));
    e.producer = strdup("p");
    e.kind = CF_EVENT_ANY;
    assert_int_equal(cf_event_encode(&e, &out, &err), -1);
    assert_non_null(strstr(err.msg, "kind"));
    e.kind = CF_EVENT_COMPLETED;
    assert_int_equal(cf_bytes_set(&e.payload, "\x92\x01", 2), 0); /* truncated array */
    assert_int_equal(cf_event_encode(&e, &out, &err), -1);
    assert_non_null(strstr(err.msg, "payload"));
    assert_int_equal(cf_bytes_set(&e.payload, "\x01\x02", 2), 0); /* two values */
    assert_int_equal(cf_event_encode(&e, &out, &err), -1);
    free(e.payload.data);
    e.payload.data = NULL;
    e.payload.len = 0;
    e.timestamp_us = 0;
    assert_int_equal(cf_event_encode(&e, &out, &err), -1);
    e.timestamp_us = 1;
    assert_int_equal(cf_event_encode(&e, &out, &err), 0);
    free(out.data);
    cf_event_clear(&e);
}

static void test_json_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "[]",
        "{\"v\": 2, \"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\", "
        "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": 1}",
        "{\"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\", "
        "\"producer\": \"p\", \"kind\": \"stuck\", \"timestamp_us\": 1}",
        "{\"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\", "
        "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": \"5s\"}",
        "{\"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\", "
        "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": 1.5}",
        "{\"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\", "
        "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": 1, \"payload\": 1, "
        "\"payload_msgpack\": {\"base64\": \"AQ==\"}}",
        "{\"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\", "
        "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": 1, "
        "\"payload_msgpack\": {\"base64\": \"kgE=\"}}", /* truncated array */
        "{\"id\": \"e\", \"workspace\": \"w/x\", \"correlation_id\": \"c\", \"topic\": \"t\", "
        "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": 1}",
        "{\"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\\u0000x\", "
        "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": 1}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = json_loads(bad[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        assert_non_null(j);
        cf_event e;
        cf_error err = {0};
        if (cf_event_from_json(j, &e, &err) == 0)
            fail_msg("case %zu accepted", i);
        assert_null(e.id);
        json_decref(j);
    }
    /* payload null is a present value */
    json_t *j = json_loads("{\"id\": \"e\", \"workspace\": \"w\", \"correlation_id\": \"c\", \"topic\": \"t\", "
                           "\"producer\": \"p\", \"kind\": \"blocked\", \"timestamp_us\": 1, \"payload\": null}",
                           0, NULL);
    cf_event e;
    cf_error err = {0};
    assert_int_equal(cf_event_from_json(j, &e, &err), 0);
    assert_int_equal(e.payload.len, 1);
    assert_int_equal(e.payload.data[0], 0xc0);
    cf_event_clear(&e);
    json_decref(j);
}

static void test_names_and_a2a(void **state)
{
    (void)state;
    static const struct {
        const char *name, *a2a;
    } want[CF_EVENT_KIND__COUNT] = {
        {"any", "unknown"},
        {"need_work", "submitted"},
        {"work_claimed", "working"},
        {"work_published", "working"},
        {"feedback_requested", "input-required"},
        {"feedback_provided", "working"},
        {"blocked", "input-required"},
        {"completed", "completed"},
    };
    for (int k = 0; k < CF_EVENT_KIND__COUNT; k++) {
        assert_string_equal(cf_event_kind_name((cf_event_kind)k), want[k].name);
        assert_string_equal(cf_event_kind_a2a_state((cf_event_kind)k), want[k].a2a);
        cf_event_kind back;
        if (k == CF_EVENT_ANY) {
            assert_int_equal(cf_event_kind_parse("any", &back), -1);
        } else {
            assert_int_equal(cf_event_kind_parse(want[k].name, &back), 0);
            assert_int_equal(back, k);
        }
    }
    cf_event_kind x;
    assert_int_equal(cf_event_kind_parse("nope", &x), -1);
    assert_int_equal(cf_event_kind_parse(NULL, &x), -1);
    assert_string_equal(cf_event_kind_name((cf_event_kind)99), "unknown");
    assert_true(cf_event_workspace_valid("a.B_c-9", 7));
    assert_false(cf_event_workspace_valid("..", 0));
    assert_false(cf_event_workspace_valid("a:b", 3));
}

/* The partition helper agrees with librdkafka's murmur2 partitioner as the
 * Java client computes it (values from Kafka's DefaultPartitioner tests are
 * not at hand; consistency and range are what the readers rely on). */
static void test_partition_for(void **state)
{
    (void)state;
    for (int32_t n = 1; n <= 12; n++) {
        int32_t p = cf_events_partition_for("ws-42", n);
        assert_true(p >= 0 && p < n);
        assert_int_equal(p, cf_events_partition_for("ws-42", n));
    }
    assert_int_equal(cf_events_partition_for("anything", 1), 0);
    /* different workspaces spread over partitions */
    int hit[6] = {0};
    char ws[32];
    for (int i = 0; i < 60; i++) {
        snprintf(ws, sizeof(ws), "ws-%d", i);
        hit[cf_events_partition_for(ws, 6)]++;
    }
    for (int i = 0; i < 6; i++)
        assert_true(hit[i] > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_min),
        cmocka_unit_test(test_golden_full),
        cmocka_unit_test(test_golden_min_by_hand),
        cmocka_unit_test(test_golden_python),
        cmocka_unit_test(test_roundtrips),
        cmocka_unit_test(test_base_message_is_valid),
        cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_field_rules),
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_payload_limits),
        cmocka_unit_test(test_truncated_every_offset),
        cmocka_unit_test(test_mutation_fuzz),
        cmocka_unit_test(test_encoder_rejects_invalid),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_names_and_a2a),
        cmocka_unit_test(test_partition_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
