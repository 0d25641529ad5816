/* Unit tests for cf_config: one sample table covering every type, each
 * source, precedence, every error class and the printers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_config.h"
#include "cf_util.h"

typedef struct sample {
    char *name;
    int64_t slots;
    bool verbose;
    int64_t timeout_us;
    int64_t max_output;
    int format;
    char *brokers;
    cf_kvlist kafka;
    char *redis_password;
    int64_t offset;
} sample;

static int validate_even(const cf_conf_prop *prop, void *target, cf_error *err)
{
    const sample *s = target;
    if (s->slots % 2 != 0)
        return cf_error_set(err, CF_E_INVALID, "%s must be even (got %lld)", prop->name, (long long)s->slots);
    return 0;
}

static const cf_conf_prop sample_props[] = {
    {"name", CF_CONF_STRING, offsetof(sample, name), 1, 16, "w1", NULL, "Worker name.", NULL},
    {"slots", CF_CONF_INT, offsetof(sample, slots), 1, 64, "4", NULL, "Parallel executions.", validate_even},
    {"verbose", CF_CONF_BOOL, offsetof(sample, verbose), 0, 0, "false", NULL, "Chatty logs.", NULL},
    {"exec.timeout", CF_CONF_DURATION, offsetof(sample, timeout_us), 1000, 600000000, "5s", NULL,
     "Default time limit.", NULL},
    {"max-output", CF_CONF_SIZE, offsetof(sample, max_output), 1, 1LL << 30, "1MiB", NULL, "Output cap.", NULL},
    {"log.format", CF_CONF_ENUM, offsetof(sample, format), 0, 0, "text", "text|json", "Log format.", NULL},
    {"kafka.brokers", CF_CONF_STRING, offsetof(sample, brokers), 0, 0, "localhost:9092", NULL, "Bootstrap.", NULL},
    {"kafka.", CF_CONF_KVLIST, offsetof(sample, kafka), 0, 0, NULL, NULL, "librdkafka pass-through.", NULL},
    {"redis.password", CF_CONF_STRING, offsetof(sample, redis_password), 0, 0, NULL, NULL, "Redis AUTH.", NULL},
    {"offset", CF_CONF_INT, offsetof(sample, offset), 0, 0, NULL, NULL, "Unbounded integer.", NULL},
};

static const cf_conf_table sample_table = {
    .program = "sample-prog",
    .env_prefix = "SAMPLE_",
    .props = sample_props,
    .nprops = sizeof(sample_props) / sizeof(sample_props[0]),
};

typedef struct fixture {
    sample s;
    cf_error err;
    char path[64];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(cf_conf_init(&sample_table, &f->s, &f->err), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cf_conf_free(&sample_table, &f->s);
    if (f->path[0])
        unlink(f->path);
    free(f);
    return 0;
}

static void write_file(fixture *f, const char *text)
{
    if (f->path[0])
        unlink(f->path);
    cf_strlcpy(f->path, "/tmp/cf_test_config_XXXXXX", sizeof(f->path));
    int fd = mkstemp(f->path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

/* Captures what a printer writes. */
static char *capture(void (*fn)(FILE *, const void *), const void *arg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    fn(mem, arg);
    fclose(mem);
    return buf;
}

static void print_md(FILE *out, const void *t) { cf_conf_print_markdown(t, out); }
static void print_help(FILE *out, const void *t) { cf_conf_print_help(t, out); }
static void print_dump(FILE *out, const void *s) { cf_conf_dump(&sample_table, s, out); }

/* ---- defaults and cf_conf_set ---------------------------------------- */

static void test_defaults(void **state)
{
    fixture *f = *state;
    assert_string_equal(f->s.name, "w1");
    assert_int_equal(f->s.slots, 4);
    assert_false(f->s.verbose);
    assert_int_equal(f->s.timeout_us, 5000000);
    assert_int_equal(f->s.max_output, 1024 * 1024);
    assert_int_equal(f->s.format, 0);
    assert_string_equal(f->s.brokers, "localhost:9092");
    assert_int_equal(f->s.kafka.count, 0);
    assert_null(f->s.redis_password);
    assert_int_equal(f->s.offset, 0);
}

static void test_set_every_type(void **state)
{
    fixture *f = *state;
    cf_error *e = &f->err;
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "name", "alpha", e), 0);
    assert_string_equal(f->s.name, "alpha");
    /* Overwriting frees the old string (ASan/leak checks would catch it). */
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "name", "beta", e), 0);
    assert_string_equal(f->s.name, "beta");
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "slots", "64", e), 0);
    assert_int_equal(f->s.slots, 64);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "verbose", "yes", e), 0);
    assert_true(f->s.verbose);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "exec.timeout", "250ms", e), 0);
    assert_int_equal(f->s.timeout_us, 250000);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "max-output", "64KiB", e), 0);
    assert_int_equal(f->s.max_output, 65536);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "log.format", "json", e), 0);
    assert_int_equal(f->s.format, 1);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "kafka.brokers", "b:1", e), 0);
    assert_string_equal(f->s.brokers, "b:1");
    assert_int_equal(f->s.kafka.count, 0); /* the exact prop wins over the prefix */
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "kafka.socket.timeout.ms", "100", e), 0);
    assert_string_equal(cf_kvlist_get(&f->s.kafka, "socket.timeout.ms"), "100");
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "kafka.socket.timeout.ms", "200", e), 0);
    assert_int_equal(f->s.kafka.count, 1);
    assert_string_equal(cf_kvlist_get(&f->s.kafka, "socket.timeout.ms"), "200");
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "offset", "-9223372036854775808", e), 0);
    assert_true(f->s.offset == INT64_MIN);
    /* '-' and '_' are interchangeable in names. */
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "max_output", "2", e), 0);
    assert_int_equal(f->s.max_output, 2);
}

static void expect_set_error(fixture *f, const char *key, const char *value, const char *needle)
{
    cf_error_clear(&f->err);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, key, value, &f->err), -1);
    assert_int_equal(f->err.code, CF_E_INVALID);
    if (!strstr(f->err.msg, needle))
        fail_msg("message '%s' lacks '%s'", f->err.msg, needle);
}

static void test_set_errors(void **state)
{
    fixture *f = *state;
    expect_set_error(f, "slotz", "1", "unknown key 'slotz'");
    expect_set_error(f, "slotz", "1", "did you mean 'slots'");
    expect_set_error(f, "totally.different", "1", "unknown key");
    expect_set_error(f, "slots", "abc", "not an integer");
    expect_set_error(f, "slots", "12x", "not an integer");
    expect_set_error(f, "slots", "", "empty");
    expect_set_error(f, "slots", "0", "outside [1, 64]");
    expect_set_error(f, "slots", "65", "outside [1, 64]");
    expect_set_error(f, "slots", "99999999999999999999", "out of range");
    expect_set_error(f, "verbose", "maybe", "not a boolean");
    expect_set_error(f, "exec.timeout", "5 parsecs", "unknown duration unit");
    expect_set_error(f, "exec.timeout", "500us", "outside [1ms, 10m]");
    expect_set_error(f, "exec.timeout", "11m", "outside [1ms, 10m]");
    expect_set_error(f, "exec.timeout", "-1s", "non-negative");
    expect_set_error(f, "max-output", "2GiB", "outside [1, 1GiB]");
    expect_set_error(f, "max-output", "3 parsecs", "unknown size unit");
    expect_set_error(f, "log.format", "xml", "not one of text|json");
    expect_set_error(f, "log.format", "", "not one of");
    expect_set_error(f, "name", "", "shorter than 1");
    expect_set_error(f, "name", "abcdefghijklmnopq", "longer than 16");
    expect_set_error(f, "name", "a\nb", "control characters");
    expect_set_error(f, "kafka.", "x", "needs a key");
    expect_set_error(f, "kafka.a=b", "x", "may only hold");
    /* A failed set leaves the previous value in place. */
    assert_int_equal(f->s.slots, 4);
    assert_string_equal(f->s.name, "w1");
    assert_int_equal(f->s.timeout_us, 5000000);
}

static void test_kvlist_limit(void **state)
{
    fixture *f = *state;
    char key[32];
    int i;
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "kafka.k%d", i);
        if (cf_conf_set(&sample_table, &f->s, key, "v", &f->err) < 0)
            break;
    }
    assert_int_equal(i, 256);
    assert_int_equal(f->err.code, CF_E_LIMIT);
    /* Replacing an existing key is still fine at the limit. */
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "kafka.k0", "w", &f->err), 0);
    assert_string_equal(cf_kvlist_get(&f->s.kafka, "k0"), "w");
}

/* ---- file ------------------------------------------------------------ */

static void test_file_ok(void **state)
{
    fixture *f = *state;
    write_file(f, "# comment\n"
                  "; another\n"
                  "name = filed\n"
                  "slots=8\n"
                  "verbose = on ; inline comment\n"
                  "\n"
                  "[exec]\n"
                  "timeout = 2m\n"
                  "[kafka]\n"
                  "brokers = \"k1:9092,k2:9092\"\n"
                  "debug = broker,topic\n"
                  "[log]\n"
                  "format: json\n");
    assert_int_equal(cf_conf_load_file(&sample_table, &f->s, f->path, &f->err), 0);
    assert_string_equal(f->s.name, "filed");
    assert_int_equal(f->s.slots, 8);
    assert_true(f->s.verbose);
    assert_int_equal(f->s.timeout_us, 120000000);
    assert_string_equal(f->s.brokers, "k1:9092,k2:9092");
    assert_string_equal(cf_kvlist_get(&f->s.kafka, "debug"), "broker,topic");
    assert_int_equal(f->s.format, 1);
    assert_int_equal(f->s.max_output, 1024 * 1024); /* untouched default */
}

/* A sibling program's keys in a shared settings file are skipped there,
 * and stay unknown as a flag or a key set directly. */
static void test_file_foreign_keys(void **state)
{
    fixture *f = *state;
    static const char *const foreign[] = {"state-prefix", NULL};
    cf_conf_table t = sample_table;
    t.file_foreign = foreign;
    write_file(f, "name = shared\nstate-prefix = tenant-a.\n");
    assert_int_equal(cf_conf_load_file(&t, &f->s, f->path, &f->err), 0);
    assert_string_equal(f->s.name, "shared");
    assert_int_equal(cf_conf_set(&t, &f->s, "state-prefix", "x.", &f->err), -1);
    /* Without the list, the same file is refused. */
    assert_int_equal(cf_conf_load_file(&sample_table, &f->s, f->path, &f->err), -1);
    assert_non_null(strstr(f->err.msg, "unknown key 'state-prefix'"));
}

/* Expects "config file <path> line <line>: <needle>". */
static void expect_file_error(fixture *f, const char *text, int line, const char *needle)
{
    write_file(f, text);
    cf_error_clear(&f->err);
    assert_int_equal(cf_conf_load_file(&sample_table, &f->s, f->path, &f->err), -1);
    assert_int_equal(f->err.code, CF_E_INVALID);
    char want[256];
    snprintf(want, sizeof(want), "config file %s line %d: %s", f->path, line, needle);
    if (!strstr(f->err.msg, want))
        fail_msg("message '%s' lacks '%s'", f->err.msg, want);
}

static void test_file_errors(void **state)
{
    fixture *f = *state;
    expect_file_error(f, "name = a\nslots = 2\nslotz = 3\n", 3, "unknown key 'slotz'");
    expect_file_error(f, "[kafka]\nbrokers = x\n[exec]\ntimeout = 1y\n", 4,
                      "exec.timeout: unknown duration unit");
    expect_file_error(f, "name = a\nthis line has no equals\n", 2, "syntax error");
    /* The first error is the one reported. */
    expect_file_error(f, "slots = 100\nslotz = 1\n", 1, "slots: '100' is outside");
    char longline[400];
    memset(longline, 'x', sizeof(longline));
    memcpy(longline, "name = ", 7);
    memcpy(longline + sizeof(longline) - 2, "\n", 2);
    char text[512];
    snprintf(text, sizeof(text), "slots = 2\n%s", longline);
    expect_file_error(f, text, 2, "line is longer than");

    cf_error_clear(&f->err);
    assert_int_equal(cf_conf_load_file(&sample_table, &f->s, "/nonexistent/cf.ini", &f->err), -1);
    assert_int_equal(f->err.code, CF_E_NOT_FOUND);
    assert_non_null(strstr(f->err.msg, "/nonexistent/cf.ini"));
    assert_int_equal(cf_conf_load_file(&sample_table, &f->s, "/tmp", &f->err), -1);
    assert_non_null(strstr(f->err.msg, "not a regular file"));
}

/* ---- environment ----------------------------------------------------- */

static void test_env_ok(void **state)
{
    fixture *f = *state;
    char *env[] = {
        "PATH=/usr/bin",
        "SAMPLE_SLOTS=16",
        "SAMPLE_EXEC_TIMEOUT=30s",
        "SAMPLE_MAX_OUTPUT=2MiB",
        "SAMPLE_LOG_FORMAT=json",
        "SAMPLE_KAFKA_BROKERS=env:9092",
        "SAMPLE_KAFKA_SOCKET_TIMEOUT_MS=1234",
        "SAMPLE_REDIS_PASSWORD=s3cret",
        "SAMPLE_VERBOSE=1",
        "SAMPLE_CONFIG=/ignored/by/load_env.ini",
        "SAMPLE_SCRIPT_ONLY=x",
        "sample_slots=3", /* case matters: not ours */
        NULL,
    };
    const char *ignore[] = {"SAMPLE_SCRIPT_ONLY", NULL};
    assert_int_equal(cf_conf_load_env(&sample_table, &f->s, env, ignore, &f->err), 0);
    assert_int_equal(f->s.slots, 16);
    assert_int_equal(f->s.timeout_us, 30000000);
    assert_int_equal(f->s.max_output, 2 * 1024 * 1024);
    assert_int_equal(f->s.format, 1);
    assert_string_equal(f->s.brokers, "env:9092");
    assert_string_equal(cf_kvlist_get(&f->s.kafka, "socket.timeout.ms"), "1234");
    assert_int_equal(f->s.kafka.count, 1);
    assert_string_equal(f->s.redis_password, "s3cret");
    assert_true(f->s.verbose);
}

static void test_env_errors(void **state)
{
    fixture *f = *state;
    char *unknown[] = {"SAMPLE_SLOTZ=1", NULL};
    assert_int_equal(cf_conf_load_env(&sample_table, &f->s, unknown, NULL, &f->err), -1);
    assert_int_equal(f->err.code, CF_E_INVALID);
    assert_non_null(strstr(f->err.msg, "environment variable SAMPLE_SLOTZ: unknown setting"));

    /* Listed in ignore: fine. */
    const char *ignore[] = {"SAMPLE_SLOTZ", NULL};
    assert_int_equal(cf_conf_load_env(&sample_table, &f->s, unknown, ignore, &f->err), 0);

    char *bad[] = {"SAMPLE_SLOTS=1000", NULL};
    assert_int_equal(cf_conf_load_env(&sample_table, &f->s, bad, NULL, &f->err), -1);
    assert_non_null(strstr(f->err.msg, "environment variable SAMPLE_SLOTS: slots: '1000' is outside [1, 64]"));

    char *bare_prefix[] = {"SAMPLE_=1", NULL};
    assert_int_equal(cf_conf_load_env(&sample_table, &f->s, bare_prefix, NULL, &f->err), -1);
    char *bare_kv[] = {"SAMPLE_KAFKA_=1", NULL};
    assert_int_equal(cf_conf_load_env(&sample_table, &f->s, bare_kv, NULL, &f->err), -1);
    assert_int_equal(f->s.slots, 4);
}

/* ---- flags ----------------------------------------------------------- */

static void test_flags_ok(void **state)
{
    fixture *f = *state;
    char *argv[] = {"prog", "--slots=6", "--name", "flagged", "--verbose", "--exec.timeout", "10m",
                    "--kafka.acks=all", "--kafka.client.id", "me", "--log.format=json", "run", "--slots=8", NULL};
    int argc = 13, next = -1;
    if (cf_conf_parse_flags(&sample_table, &f->s, argc, argv, &next, &f->err) < 0)
        fail_msg("%s", f->err.msg);
    assert_int_equal(next, 11); /* "run": the first positional */
    assert_int_equal(f->s.slots, 6);
    assert_string_equal(f->s.name, "flagged");
    assert_true(f->s.verbose);
    assert_int_equal(f->s.timeout_us, 600000000LL);
    assert_string_equal(cf_kvlist_get(&f->s.kafka, "acks"), "all");
    assert_string_equal(cf_kvlist_get(&f->s.kafka, "client.id"), "me");
    assert_int_equal(f->s.format, 1);

    char *argv2[] = {"prog", "--no-verbose", "--", "--slots=10", NULL};
    assert_int_equal(cf_conf_parse_flags(&sample_table, &f->s, 4, argv2, &next, &f->err), 0);
    assert_false(f->s.verbose);
    assert_int_equal(next, 3); /* after "--" */
    assert_int_equal(f->s.slots, 6);

    char *argv3[] = {"prog", "--verbose=true", "--verbose=false", NULL};
    assert_int_equal(cf_conf_parse_flags(&sample_table, &f->s, 3, argv3, &next, &f->err), 0);
    assert_false(f->s.verbose);
    assert_int_equal(next, 3);

    char *argv4[] = {"prog", "-", NULL}; /* "-" is a positional */
    assert_int_equal(cf_conf_parse_flags(&sample_table, &f->s, 2, argv4, &next, &f->err), 0);
    assert_int_equal(next, 1);
}

static void expect_flag_error(fixture *f, int argc, char **argv, const char *needle)
{
    cf_error_clear(&f->err);
    int next = -1;
    assert_int_equal(cf_conf_parse_flags(&sample_table, &f->s, argc, argv, &next, &f->err), -1);
    assert_int_equal(f->err.code, CF_E_INVALID);
    if (!strstr(f->err.msg, needle))
        fail_msg("message '%s' lacks '%s'", f->err.msg, needle);
}

static void test_flags_errors(void **state)
{
    fixture *f = *state;
    char *a1[] = {"prog", "--slotz=1", NULL};
    expect_flag_error(f, 2, a1, "unknown flag --slotz (did you mean '--slots'?)");
    char *a2[] = {"prog", "--slots", NULL};
    expect_flag_error(f, 2, a2, "flag --slots needs a value");
    char *a3[] = {"prog", "--slots=x", NULL};
    expect_flag_error(f, 2, a3, "flag --slots: slots: 'x' is not an integer");
    char *a4[] = {"prog", "-s", "3", NULL};
    expect_flag_error(f, 3, a4, "unknown flag -s");
    char *a5[] = {"prog", "--config", "x.ini", NULL}; /* not handled by parse_flags */
    expect_flag_error(f, 3, a5, "unknown flag --config");
    char *a6[] = {"prog", "--no-slots", NULL}; /* --no- only for bools */
    expect_flag_error(f, 2, a6, "unknown flag --no-slots");
    char *a7[] = {"prog", "--log.format=yaml", NULL};
    expect_flag_error(f, 2, a7, "not one of text|json");
    char *a8[] = {"prog", "--help", NULL};
    expect_flag_error(f, 2, a8, "unknown flag --help");
}

/* ---- load_all: precedence, --config, help ---------------------------- */

static void test_load_all_precedence(void **state)
{
    fixture *f = *state;
    write_file(f, "slots = 10\nname = fromfile\nverbose = true\nmax-output = 5\n");
    char cfg[96];
    snprintf(cfg, sizeof(cfg), "--config=%s", f->path);
    char *env[] = {"SAMPLE_SLOTS=12", "SAMPLE_NAME=fromenv", NULL};
    char *argv[] = {"prog", cfg, "--slots", "14", "pos", NULL};
    int next = 0, help = -1;
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 5, argv, env, &next, &help, &f->err), 0);
    assert_int_equal(help, 0);
    assert_int_equal(next, 4);
    assert_int_equal(f->s.slots, 14);            /* flag beats env beats file */
    assert_string_equal(f->s.name, "fromenv");   /* env beats file */
    assert_true(f->s.verbose);                   /* file beats default */
    assert_int_equal(f->s.max_output, 5);
    assert_int_equal(f->s.timeout_us, 5000000);  /* default */

    /* The file named by SAMPLE_CONFIG, and "--config FILE" as two words. */
    char cfgenv[96];
    snprintf(cfgenv, sizeof(cfgenv), "SAMPLE_CONFIG=%s", f->path);
    char *env2[] = {cfgenv, NULL};
    char *argv2[] = {"prog", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 1, argv2, env2, &next, &help, &f->err), 0);
    assert_int_equal(f->s.slots, 10);
    assert_string_equal(f->s.name, "fromfile");
    char *argv3[] = {"prog", "--verbose", "--config", f->path, "--no-verbose", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 5, argv3, NULL, &next, &help, &f->err), 0);
    assert_int_equal(f->s.slots, 10);
    assert_false(f->s.verbose); /* flags apply in order, after the file */
    assert_int_equal(next, 5);

    /* A variable that shares the prefix but belongs to a script. */
    char *env3[] = {"SAMPLE_STATE_DIR=/x", NULL};
    const char *ign[] = {"SAMPLE_STATE_DIR", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 1, argv2, env3, &next, &help, &f->err), -1);
    assert_int_equal(cf_conf_load_all_ex(&sample_table, &f->s, 1, argv2, env3, ign, &next, &help, &f->err), 0);
}

static void test_load_all_errors_and_help(void **state)
{
    fixture *f = *state;
    int next = 0, help = -1;
    char *argv[] = {"prog", "--config", "/nonexistent/x.ini", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 3, argv, NULL, &next, &help, &f->err), -1);
    assert_int_equal(f->err.code, CF_E_NOT_FOUND);

    char *argv_missing[] = {"prog", "--config", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 2, argv_missing, NULL, &next, &help, &f->err), -1);
    assert_non_null(strstr(f->err.msg, "--config needs a file name"));

    /* --help wins even when the config file is broken. */
    char *argv_help[] = {"prog", "--config", "/nonexistent/x.ini", "--help", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 4, argv_help, NULL, &next, &help, &f->err), 0);
    assert_int_equal(help, 1);
    char *argv_hc[] = {"prog", "--help-config", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 2, argv_hc, NULL, &next, &help, &f->err), 0);
    assert_int_equal(help, 2);
    char *argv_h[] = {"prog", "-h", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 2, argv_h, NULL, &next, &help, &f->err), 0);
    assert_int_equal(help, 1);

    char *env_bad[] = {"SAMPLE_BOGUS=1", NULL};
    char *argv0[] = {"prog", NULL};
    assert_int_equal(cf_conf_load_all(&sample_table, &f->s, 1, argv0, env_bad, &next, &help, &f->err), -1);
    assert_int_equal(help, 0);
    assert_non_null(strstr(f->err.msg, "SAMPLE_BOGUS"));
}

/* ---- validate, table checks, free ------------------------------------ */

static void test_validate(void **state)
{
    fixture *f = *state;
    assert_int_equal(cf_conf_validate(&sample_table, &f->s, &f->err), 0);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "slots", "5", &f->err), 0);
    assert_int_equal(cf_conf_validate(&sample_table, &f->s, &f->err), -1);
    assert_string_equal(f->err.msg, "slots must be even (got 5)");
}

static void test_bad_tables(void **state)
{
    (void)state;
    sample s;
    memset(&s, 0, sizeof(s));
    cf_error err;
    cf_error_clear(&err);

    cf_conf_prop bad_default[] = {
        {"slots", CF_CONF_INT, offsetof(sample, slots), 1, 10, "11", NULL, "x", NULL},
    };
    cf_conf_table t = {"p", "P_", bad_default, 1, NULL};
    assert_int_equal(cf_conf_init(&t, &s, &err), -1);
    assert_non_null(strstr(err.msg, "bad default for 'slots'"));

    cf_conf_prop dup[] = {
        {"name", CF_CONF_STRING, offsetof(sample, name), 0, 0, NULL, NULL, "x", NULL},
        {"name", CF_CONF_STRING, offsetof(sample, brokers), 0, 0, NULL, NULL, "x", NULL},
    };
    t.props = dup;
    t.nprops = 2;
    assert_int_equal(cf_conf_init(&t, &s, &err), -1);
    assert_non_null(strstr(err.msg, "listed twice"));

    cf_conf_prop kv_nodot[] = {
        {"kafka", CF_CONF_KVLIST, offsetof(sample, kafka), 0, 0, NULL, NULL, "x", NULL},
    };
    t.props = kv_nodot;
    t.nprops = 1;
    assert_int_equal(cf_conf_init(&t, &s, &err), -1);

    cf_conf_prop enum_novalues[] = {
        {"fmt", CF_CONF_ENUM, offsetof(sample, format), 0, 0, NULL, NULL, "x", NULL},
    };
    t.props = enum_novalues;
    assert_int_equal(cf_conf_init(&t, &s, &err), -1);

    /* KVLIST defaults are "k=v,k=v". */
    cf_conf_prop kv_def[] = {
        {"kafka.", CF_CONF_KVLIST, offsetof(sample, kafka), 0, 0, "acks=all,linger.ms=5", NULL, "x", NULL},
    };
    t.props = kv_def;
    assert_int_equal(cf_conf_init(&t, &s, &err), 0);
    assert_string_equal(cf_kvlist_get(&s.kafka, "acks"), "all");
    assert_string_equal(cf_kvlist_get(&s.kafka, "linger.ms"), "5");
    cf_conf_free(&t, &s);
    assert_int_equal(s.kafka.count, 0);
    assert_null(s.kafka.items);
}

static void test_free_and_reinit(void **state)
{
    fixture *f = *state;
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "redis.password", "pw", &f->err), 0);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "kafka.acks", "1", &f->err), 0);
    /* init again resets to defaults without leaking the old values. */
    assert_int_equal(cf_conf_init(&sample_table, &f->s, &f->err), 0);
    assert_null(f->s.redis_password);
    assert_int_equal(f->s.kafka.count, 0);
    cf_conf_free(&sample_table, &f->s);
    assert_null(f->s.name);
    assert_null(f->s.brokers);
    cf_conf_free(&sample_table, &f->s); /* twice is fine */
    cf_conf_free(NULL, &f->s);
}

/* ---- printers -------------------------------------------------------- */

static void test_markdown_lists_every_prop(void **state)
{
    (void)state;
    char *md = capture(print_md, &sample_table);
    for (size_t i = 0; i < sample_table.nprops; i++) {
        char needle[128];
        snprintf(needle, sizeof(needle), "| `%s", sample_props[i].name);
        if (!strstr(md, needle))
            fail_msg("markdown lacks %s", needle);
        if (!strstr(md, sample_props[i].doc))
            fail_msg("markdown lacks doc of %s", sample_props[i].name);
    }
    assert_non_null(strstr(md, "`SAMPLE_EXEC_TIMEOUT`"));
    assert_non_null(strstr(md, "`SAMPLE_KAFKA_*`"));
    assert_non_null(strstr(md, "text\\|json")); /* '|' escaped inside a cell */
    assert_non_null(strstr(md, "1ms .. 10m"));
    assert_non_null(strstr(md, "1 .. 1GiB"));
    assert_non_null(strstr(md, "# sample-prog configuration"));
    free(md);
}

static void test_help_lists_every_prop(void **state)
{
    (void)state;
    char *help = capture(print_help, &sample_table);
    for (size_t i = 0; i < sample_table.nprops; i++) {
        char needle[128];
        snprintf(needle, sizeof(needle), "--%s", sample_props[i].name);
        if (!strstr(help, needle))
            fail_msg("help lacks %s", needle);
    }
    assert_non_null(strstr(help, "--verbose[=BOOL]"));
    assert_non_null(strstr(help, "--log.format=text|json"));
    assert_non_null(strstr(help, "default: 4; range 1 .. 64"));
    assert_non_null(strstr(help, "--config FILE"));
    assert_non_null(strstr(help, "SAMPLE_NAME"));
    free(help);
}

static void test_dump_redacts_and_round_trips(void **state)
{
    fixture *f = *state;
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "redis.password", "hunter2", &f->err), 0);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "kafka.sasl.password", "hunter3", &f->err), 0);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "kafka.acks", "all", &f->err), 0);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "exec.timeout", "1500ms", &f->err), 0);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "log.format", "json", &f->err), 0);
    assert_int_equal(cf_conf_set(&sample_table, &f->s, "slots", "12", &f->err), 0);
    char *dump = capture(print_dump, &f->s);
    assert_null(strstr(dump, "hunter"));
    assert_non_null(strstr(dump, "redis.password = ***"));
    assert_non_null(strstr(dump, "kafka.sasl.password = ***"));
    assert_non_null(strstr(dump, "kafka.acks = all"));
    assert_non_null(strstr(dump, "exec.timeout = 1500ms"));
    assert_non_null(strstr(dump, "log.format = json"));
    assert_non_null(strstr(dump, "max-output = 1MiB"));

    /* Dump output (minus the redacted lines) is a valid config file that
     * reproduces the values. */
    cf_buf clean;
    cf_buf_init(&clean, 0);
    for (char *line = strtok(dump, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "***")) {
            assert_int_equal(cf_buf_append(&clean, line, strlen(line), &f->err), 0);
            assert_int_equal(cf_buf_append(&clean, "\n", 2, &f->err), 0); /* with the NUL */
            clean.len--;
        }
    }
    write_file(f, (const char *)clean.data);
    sample s2;
    memset(&s2, 0, sizeof(s2));
    assert_int_equal(cf_conf_init(&sample_table, &s2, &f->err), 0);
    assert_int_equal(cf_conf_load_file(&sample_table, &s2, f->path, &f->err), 0);
    assert_int_equal(s2.slots, 12);
    assert_int_equal(s2.timeout_us, 1500000);
    assert_int_equal(s2.format, 1);
    assert_int_equal(s2.max_output, f->s.max_output);
    assert_string_equal(s2.brokers, f->s.brokers);
    assert_string_equal(cf_kvlist_get(&s2.kafka, "acks"), "all");
    cf_conf_free(&sample_table, &s2);
    cf_buf_free(&clean);
    free(dump);
}

/* ---- kv list helpers ------------------------------------------------- */

static void test_kvlist_helpers(void **state)
{
    (void)state;
    cf_kvlist l = {0};
    cf_error err;
    assert_null(cf_kvlist_get(&l, "a"));
    assert_null(cf_kvlist_get(NULL, "a"));
    assert_int_equal(cf_kvlist_set(&l, "a", "1", &err), 0);
    assert_int_equal(cf_kvlist_set(&l, "b", "2", &err), 0);
    assert_int_equal(cf_kvlist_set(&l, "a", "3", &err), 0);
    assert_int_equal(l.count, 2);
    assert_string_equal(cf_kvlist_get(&l, "a"), "3");
    assert_string_equal(cf_kvlist_get(&l, "b"), "2");
    assert_int_equal(cf_kvlist_set(&l, "", "x", &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_int_equal(cf_kvlist_set(&l, "c", NULL, &err), -1);
    assert_int_equal(l.count, 2);
    cf_kvlist_free(&l);
    assert_int_equal(l.count, 0);
    cf_kvlist_free(&l);
    cf_kvlist_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_every_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kvlist_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_foreign_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flags_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flags_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_errors_and_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validate, setup, teardown),
        cmocka_unit_test(test_bad_tables),
        cmocka_unit_test_setup_teardown(test_free_and_reinit, setup, teardown),
        cmocka_unit_test(test_markdown_lists_every_prop),
        cmocka_unit_test(test_help_lists_every_prop),
        cmocka_unit_test_setup_teardown(test_dump_redacts_and_round_trips, setup, teardown),
        cmocka_unit_test(test_kvlist_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
