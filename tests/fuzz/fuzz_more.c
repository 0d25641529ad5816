/* libFuzzer harnesses for the remaining readers of untrusted bytes
 * (issue 8, part 6), one per FUZZ_TARGET:
 *   flags        the worker's command-line parser (argv = NUL-separated
 *                input), then validation and the profiles
 *   batch_line   a line of a CLI batch file (JSON request)
 *   redis_reply  a Redis reply: the byte-cap and header guards, hiredis's
 *                reader, and walking the resulting tree
 *   diagnostics  compiler output (the user's source shapes it) through
 *                each of the four parsers; what comes out must encode as a
 *                result (abort otherwise: the parser promises wire-safe
 *                strings)
 * Each must refuse bad input with a message, never crash, hang or
 * allocate without bound. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_cli.h"
#include "profile_int.h"
#include "cf_redis.h"
#include "cf_worker.h"
#include "diagnostics_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STR_(x) #x
#define STR(x) STR_(x)

static size_t walk(const redisReply *r, unsigned depth)
{
    if (!r || depth > 64)
        return 0;
    size_t n = 1;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
        n += r->len ? (size_t)(unsigned char)r->str[r->len - 1] : 0;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++)
            n += walk(r->element[i], depth + 1);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *target = STR(FUZZ_TARGET);
    cf_error err;
    cf_error_clear(&err);
    if (strcmp(target, "diagnostics") == 0) {
        static const cf_diag_format fmts[] = {CF_DIAG_GCC_JSON, CF_DIAG_RUSTC_JSON, CF_DIAG_GO_TEXT,
                                              CF_DIAG_TSC_TEXT};
        for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++) {
            cf_result res;
            memset(&res, 0, sizeof(res));
            res.id = (char *)"fuzz";
            res.status = CF_STATUS_COMPILE_FAILED;
            cf_diag_opts o = {.strip_prefix = "/work"};
            if (cf_diag_parse(fmts[f], (const char *)data, size, &o, &res.diagnostics, &res.n_diagnostics, &err) ==
                0) {
                cf_bytes enc = {0};
                if (cf_result_encode(&res, &enc, &err) < 0) {
                    fprintf(stderr, "diagnostics do not encode: %s\n", err.msg);
                    abort();
                }
                free(enc.data);
            }
            cf_diagnostics_free(res.diagnostics, res.n_diagnostics);
        }
        return 0;
    }
    if (strcmp(target, "redis_reply") == 0) {
        redisReply *rep = NULL;
        if (cf_redis_reply_parse(data, size, 1 << 20, &rep, &err) == 0) {
            volatile size_t n = walk(rep, 0);
            (void)n;
            cf_redis_reply_free(rep);
        }
        return 0;
    }
    if (strcmp(target, "batch_line") == 0) {
        cf_request req;
        if (cf_cli_parse_request_line((const char *)data, size, &req, &err) == 0)
            cf_request_clear(&req);
        return 0;
    }
    /* flags: argv[0] then NUL-separated arguments (at most 64). */
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[66];
    int argc = 0;
    argv[argc++] = (char *)"codefleet-worker";
    for (size_t i = 0; i < size && argc < 65;) {
        argv[argc++] = copy + i;
        i += strlen(copy + i) + 1;
    }
    argv[argc] = NULL;
    cf_worker_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    int next = 0;
    if (cf_conf_init(&cf_worker_conf_table, &cfg, &err) == 0 &&
        cf_conf_parse_flags(&cf_worker_conf_table, &cfg, argc, argv, &next, &err) == 0 &&
        cf_conf_validate(&cf_worker_conf_table, &cfg, &err) == 0) {
        cf_profile_env env = {.request_topic = cfg.request_topic, .result_topic = cfg.result_topic,
                              .dlq_topic = cfg.dlq_topic, .events_topic = cfg.events_topic,
                              .env_prefix = cf_worker_conf_table.env_prefix};
        cf_profile_set *set = NULL;
        if (cf_profile_set_new(&cfg.profiles, &env, &set, &err) == 0)
            cf_profile_set_destroy(set);
    }
    cf_conf_free(&cf_worker_conf_table, &cfg);
    free(copy);
    return 0;
}
