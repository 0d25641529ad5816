/* libFuzzer harness for the worker's configuration file parser and the
 * profiles built from it (issue 8, part 6): an operator's file is trusted,
 * but a broken one must be refused with a message, never crash the worker.
 * The bytes go through a memfd, as a file would. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "profile_int.h"
#include "cf_worker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("cf-fuzz-config", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    cf_worker_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cf_error err;
    cf_error_clear(&err);
    if (cf_conf_init(&cf_worker_conf_table, &cfg, &err) == 0 &&
        cf_conf_load_file(&cf_worker_conf_table, &cfg, path, &err) == 0 &&
        cf_conf_validate(&cf_worker_conf_table, &cfg, &err) == 0) {
        /* No backends here: profiles naming one fail at that check, after
         * everything else of theirs was parsed. */
        cf_profile_env env = {.request_topic = cfg.request_topic, .result_topic = cfg.result_topic,
                              .dlq_topic = cfg.dlq_topic, .events_topic = cfg.events_topic,
                              .env_prefix = cf_worker_conf_table.env_prefix};
        cf_profile_set *set = NULL;
        if (cf_profile_set_new(&cfg.profiles, &env, &set, &err) == 0)
            cf_profile_set_destroy(set);
    }
    cf_conf_free(&cf_worker_conf_table, &cfg);
    close(fd);
    return 0;
}
