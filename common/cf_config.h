/* cf_config: configuration as one table.
 *
 * Each program describes its settings once, as an array of cf_conf_prop
 * (name, type, bounds, default, doc).  The same table
 *   - fills defaults,
 *   - reads an INI-style file ("key = value"; "[section]" prefixes keys with
 *     "section."),
 *   - reads environment variables (<env_prefix><NAME>, NAME upper-cased with
 *     '.' and '-' turned into '_'),
 *   - parses command-line flags (--name=value or --name value),
 *   - and prints the reference documentation (Markdown) and --help.
 * Precedence: defaults < file < environment < flags.  Unknown keys are
 * rejected everywhere; numbers are range-checked.
 */
#ifndef CF_CONFIG_H
#define CF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cf_error.h"

typedef enum cf_conf_type {
    CF_CONF_STRING,   /* char *            (malloc'd, owned by the target struct) */
    CF_CONF_INT,      /* int64_t           bounds [min, max] */
    CF_CONF_BOOL,     /* bool */
    CF_CONF_DURATION, /* int64_t microseconds, text "250ms", "5s"; bounds in us */
    CF_CONF_SIZE,     /* int64_t bytes, text "64MiB"; bounds in bytes */
    CF_CONF_ENUM,     /* int index into enum_values ("text|json") */
    CF_CONF_KVLIST,   /* cf_kvlist: the prop name ends in '.', and any key with that
                       * prefix is stored (prefix removed) for a pass-through, e.g.
                       * "kafka." -> librdkafka properties */
} cf_conf_type;

typedef struct cf_kvpair {
    char *key;
    char *value;
} cf_kvpair;

typedef struct cf_kvlist {
    cf_kvpair *items;
    size_t count;
} cf_kvlist;

typedef struct cf_conf_prop cf_conf_prop;

struct cf_conf_prop {
    const char *name;        /* "slots", "kafka.brokers", "kafka." (KVLIST) */
    cf_conf_type type;
    size_t offset;           /* offsetof(target struct, field) */
    int64_t min, max;        /* numeric bounds; for STRING, max = max length (0: 4096) */
    const char *def;         /* default, as text; NULL = unset (STRING NULL / 0) */
    const char *enum_values; /* "a|b|c" for CF_CONF_ENUM */
    const char *doc;         /* one or two sentences for --help and the docs */
    /* Optional extra check after parsing; target is the whole struct. */
    int (*validate)(const cf_conf_prop *prop, void *target, cf_error *err);
};

typedef struct cf_conf_table {
    const char *program;    /* "codefleet-worker" */
    const char *env_prefix; /* "CODEFLEET_" */
    const cf_conf_prop *props;
    size_t nprops;
    /* Keys of a sibling program that a shared settings file may hold
     * (NULL-terminated, may be NULL): skipped in files, unknown elsewhere.
     * A principal's file serves both the CLI and the worker. */
    const char *const *file_foreign;
} cf_conf_table;

/* Where a value came from, for error messages. */
typedef enum cf_conf_source { CF_CONF_SRC_DEFAULT, CF_CONF_SRC_FILE, CF_CONF_SRC_ENV, CF_CONF_SRC_FLAG } cf_conf_source;

/* Applies every default.  Call first.  target must be zeroed or hold values
 * set through this table (they are freed: calling init again resets). */
int cf_conf_init(const cf_conf_table *t, void *target, cf_error *err);

/* Sets one key from text; unknown key or bad value -> CF_E_INVALID. */
int cf_conf_set(const cf_conf_table *t, void *target, const char *name, const char *value, cf_error *err);

/* Loads an INI-style file; errors name the file and line. */
int cf_conf_load_file(const cf_conf_table *t, void *target, const char *path, cf_error *err);

/* Applies every <env_prefix>* variable of envp (NULL-terminated, like environ).
 * Variables named in `ignore` (NULL-terminated list of full names) are skipped. */
int cf_conf_load_env(const cf_conf_table *t, void *target, char *const *envp, const char *const *ignore,
                     cf_error *err);

/* Parses flags from argv[1..].  Stops at "--" or the first non-flag argument;
 * *next is set to its index.  "--config FILE" is NOT handled here (see
 * cf_conf_load_all).  Returns -1 on an unknown flag or bad value. */
int cf_conf_parse_flags(const cf_conf_table *t, void *target, int argc, char **argv, int *next, cf_error *err);

/* The usual sequence: defaults, then --config FILE (or <env_prefix>CONFIG),
 * then environment, then flags.  --help / --help-config are reported through
 * *wants_help (1 = usage, 2 = markdown reference) without error. */
int cf_conf_load_all(const cf_conf_table *t, void *target, int argc, char **argv, char *const *envp, int *next,
                     int *wants_help, cf_error *err);

/* cf_conf_load_all with a NULL-terminated list of full environment variable
 * names to skip (variables that share the prefix but belong to scripts). */
int cf_conf_load_all_ex(const cf_conf_table *t, void *target, int argc, char **argv, char *const *envp,
                        const char *const *env_ignore, int *next, int *wants_help, cf_error *err);

/* Runs every prop's validate hook (after loading). */
int cf_conf_validate(const cf_conf_table *t, void *target, cf_error *err);

/* Frees strings and kv lists owned by target. */
void cf_conf_free(const cf_conf_table *t, void *target);

/* Prints "--name=VALUE  doc (default: x, range)" lines. */
void cf_conf_print_help(const cf_conf_table *t, FILE *out);

/* Prints the Markdown reference (a table of name, type, default, bounds,
 * env var, description): the source of docs/CONFIGURATION-*.md. */
void cf_conf_print_markdown(const cf_conf_table *t, FILE *out);
/* Only the table (for sub-tables such as the worker's profiles); with_env
 * adds the environment variable column. */
void cf_conf_print_markdown_table(const cf_conf_table *t, FILE *out, bool with_env);

/* Prints the effective values (secrets are the caller's to redact: props
 * whose name contains "password" are printed as "***"). */
void cf_conf_dump(const cf_conf_table *t, const void *target, FILE *out);

/* Value of key in a kv list, or NULL. */
const char *cf_kvlist_get(const cf_kvlist *l, const char *key);
int cf_kvlist_set(cf_kvlist *l, const char *key, const char *value, cf_error *err);
void cf_kvlist_free(cf_kvlist *l);

#endif
