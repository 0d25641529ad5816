/* codefleet-worker: thin main around cf_worker. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "cf_log.h"
#include "cf_worker.h"

extern char **environ;

/* The worker's mounts (each execution's tmpfs with the tenant's files, the
 * zygotes' shares, the container images' binds) live in a mount namespace
 * of its own, so they vanish with the worker and its children even after a
 * SIGKILL, instead of staying mounted on the host until the next worker's
 * start-up sweep.  A slave of the host's: the host's later mounts (a
 * toolchain, an image) still arrive; ours never leave.  Called before any
 * thread exists, so the namespace is the whole process's.  Without root
 * there is nothing to mount. */
static void own_mount_namespace(void)
{
    if (geteuid() != 0)
        return;
    if (unshare(CLONE_NEWNS) < 0) {
        cf_log_warn("main", "no mount namespace of its own (unshare: %s): after a crash the executions' tmpfs "
                            "mounts stay on the host until the next worker's start-up sweep", strerror(errno));
        return;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        cf_log_warn("main", "own mount namespace: making / a slave: %s: its mounts may show on the host",
                    strerror(errno));
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: codefleet-worker [--config FILE] [--name=value ...]\n"
            "\n"
            "Consumes execution requests from Kafka, runs them, publishes results.\n"
            "Settings come from defaults < --config FILE (or CODEFLEET_WORKER_CONFIG) <\n"
            "CODEFLEET_WORKER_* environment variables < flags.  --help-config prints the\n"
            "reference as Markdown, --version the version.  SIGTERM/SIGINT stop it gracefully.\n\n");
    cf_conf_print_help(&cf_worker_conf_table, out);
}

int main(int argc, char **argv)
{
    /* Block the stop signals before any thread exists so that every thread
     * (librdkafka's, the slots) inherits the mask and only the signalfd of
     * the main loop sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* Writes to a child's closed stdin must fail with EPIPE, not kill us. */
    signal(SIGPIPE, SIG_IGN);

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("codefleet-worker %s (librdkafka %s)\n", CF_VERSION, rd_kafka_version_str());
            return 0;
        }
    }
    cf_worker_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cf_error err;
    cf_error_clear(&err);
    int next = 0, wants_help = 0;
    if (cf_conf_load_all(&cf_worker_conf_table, &cfg, argc, argv, environ, &next, &wants_help, &err) < 0 ||
        cf_conf_validate(&cf_worker_conf_table, &cfg, &err) < 0) {
        fprintf(stderr, "codefleet-worker: %s\n", err.msg);
        fprintf(stderr, "Try 'codefleet-worker --help'.\n");
        cf_conf_free(&cf_worker_conf_table, &cfg);
        return 2;
    }
    if (wants_help) {
        if (wants_help == 2)
            cf_worker_print_config_markdown(stdout);
        else
            usage(stdout);
        cf_conf_free(&cf_worker_conf_table, &cfg);
        return 0;
    }
    if (next < argc) {
        fprintf(stderr, "codefleet-worker: unexpected argument '%s'\n", argv[next]);
        cf_conf_free(&cf_worker_conf_table, &cfg);
        return 2;
    }
    cf_log_setup((cf_log_level)cfg.log_level, (cf_log_format)cfg.log_format, "codefleet-worker");
    own_mount_namespace();

    /* A worker is started again, with nothing lost, when its group
     * membership was refused before it took any request: by a broker
     * without KIP-848 (group-protocol auto: classic then), or, for a
     * static member, because its earlier run's session has not expired
     * (KIP-848 fences the newcomer; a while later it has). */
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        cf_worker *w = NULL;
        if (cf_worker_new(&cfg, &w, &err) < 0) {
            cf_log_error("main", "%s", err.msg);
            cf_conf_free(&cf_worker_conf_table, &cfg);
            return 1;
        }
        rc = cf_worker_run(w, true, &err);
        bool classic_again = rc < 0 && cfg.group_protocol == CF_WORKER_GROUP_AUTO && cf_worker_group_protocol_refused(w);
        bool id_again = rc < 0 && cf_worker_instance_id_held(w) && attempt < 120;
        if (rc < 0)
            cf_log_error("main", "%s", err.msg);
        if (!classic_again && !id_again)
            cf_worker_exiting(w);
        cf_worker_destroy(w);
        if (classic_again) {
            cf_log_warn("main", "group-protocol auto: starting again with the classic group protocol");
            cfg.group_protocol = CF_WORKER_GROUP_CLASSIC;
        } else if (id_again) {
            cf_log_warn("main", "starting again in 1 s (the instance id is free once the old session expires)");
            sleep(1);
        } else {
            break;
        }
    }
    cf_conf_free(&cf_worker_conf_table, &cfg);
    return rc < 0 ? 1 : 0;
}
