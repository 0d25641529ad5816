/* bench_failover: how long the requests of a SIGKILLed worker wait.
 *
 *   bench_failover --brokers B --config C --requests T --results T [--rounds 20]
 *                  -- WORKER-ARGV...
 *
 * The request topic has 2 partitions; another worker (started by the
 * caller, same group) is running.  Each round starts worker A with
 * WORKER-ARGV plus --worker-id fo-A-<round>, finds the partition A owns
 * (probes answered by A), gives A one long request and three short ones on
 * that partition (A runs one at a time: the short ones are queued on A),
 * SIGKILLs A, and measures the time from the kill to the first result of a
 * short one (answered by the surviving worker).  Prints every round, then
 * the median and the maximum; RESULT lines for tests/bench/run.sh. */
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_config.h"
#include "cf_dispatcher.h"
#include "cf_kafka.h"
#include "cf_util.h"

#define SEC 1000000LL

extern char **environ;

typedef struct settings {
    cf_kvlist kafka;
    char *redis_user;
    char *redis_password;
} settings;

static const cf_conf_prop sprops[] = {
    {"kafka.", CF_CONF_KVLIST, offsetof(settings, kafka), 0, 0, NULL, NULL, "librdkafka properties", NULL},
    {"redis-user", CF_CONF_STRING, offsetof(settings, redis_user), 0, 256, NULL, NULL, "unused", NULL},
    {"redis-password", CF_CONF_STRING, offsetof(settings, redis_password), 0, 1024, NULL, NULL, "unused", NULL},
};
static const cf_conf_table stable = {.program = "bench_failover", .props = sprops, .nprops = 3};

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* An id that lands on partition p of 2. */
/* A request id on partition p.  The sequence number keeps ids made in the
 * same microsecond apart (two requests with one id are one request to the
 * fleet: the second one's wait found nothing and read as a loss). */
static void id_on(int p, const char *tag, char *id, size_t size)
{
    static unsigned seq;
    seq++;
    for (unsigned n = 0;; n++) {
        snprintf(id, size, "fo-%s-%d-%u-%u-%lld", tag, p, seq, n, (long long)cf_mono_us());
        if (cf_kafka_partition_for_key(id, 2) == p)
            return;
    }
}

static int submit_sh(cf_dispatcher *d, const char *id, const char *code, cf_error *err)
{
    cf_request req;
    memset(&req, 0, sizeof(req));
    req.id = (char *)id;
    req.language = CF_LANG_SHELL;
    req.code = (cf_bytes){(uint8_t *)code, strlen(code)};
    req.policy.timeout_us = 60 * SEC;
    return cf_dispatcher_submit(d, &req, err);
}

static pid_t spawn(char **argv)
{
    pid_t p = fork();
    if (p == 0) {
        execve(argv[0], argv, environ);
        _exit(127);
    }
    return p;
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *requests = NULL, *results = NULL, *config = NULL;
    int rounds = 20;
    static const struct option opts[] = {{"brokers", required_argument, NULL, 'b'},
                                         {"requests", required_argument, NULL, 'q'},
                                         {"results", required_argument, NULL, 'r'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"rounds", required_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 'b': brokers = optarg; break;
        case 'q': requests = optarg; break;
        case 'r': results = optarg; break;
        case 'c': config = optarg; break;
        case 'n': rounds = atoi(optarg); break;
        default: return 2;
        }
    }
    if (!brokers || !requests || !results || optind >= argc || rounds < 1) {
        fprintf(stderr, "usage: bench_failover --brokers B --requests T --results T [--config C] [--rounds N] -- "
                        "WORKER-ARGV...\n");
        return 2;
    }
    int wargc = argc - optind;
    char **wargv = calloc((size_t)wargc + 3, sizeof(char *));
    for (int i = 0; i < wargc; i++)
        wargv[i] = argv[optind + i];
    char idflag[64];
    wargv[wargc] = idflag;
    wargv[wargc + 1] = NULL;

    settings s = {0};
    cf_error err;
    cf_error_clear(&err);
    if (cf_conf_init(&stable, &s, &err) < 0 || (config && cf_conf_load_file(&stable, &s, config, &err) < 0)) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    cf_dispatcher_config dc = {.brokers = brokers, .request_topic = requests, .result_topic = results,
                               .collect_results = true, .kafka = &s.kafka};
    cf_dispatcher *d = NULL;
    if (cf_dispatcher_new(&dc, &d, &err) < 0) {
        fprintf(stderr, "dispatcher: %s\n", err.msg);
        return 1;
    }
    int64_t *took = calloc((size_t)rounds, sizeof(int64_t));
    int done = 0;
    for (int r = 0; r < rounds; r++) {
        char worker_a[48];
        snprintf(worker_a, sizeof(worker_a), "fo-A-%d", r);
        snprintf(idflag, sizeof(idflag), "--worker-id=%s", worker_a);
        pid_t a = spawn(wargv);
        /* Which partition is A's?  Probe both until A answers one. */
        int pa = -1;
        int64_t until = cf_mono_us() + 60 * SEC;
        while (pa < 0 && cf_mono_us() < until) {
            for (int p = 0; p < 2 && pa < 0; p++) {
                char id[96];
                id_on(p, "probe", id, sizeof(id));
                cf_result res;
                memset(&res, 0, sizeof(res));
                if (submit_sh(d, id, "true", &err) < 0 || cf_dispatcher_wait(d, id, 30 * SEC, &res, &err) < 0) {
                    fprintf(stderr, "probe: %s\n", err.msg);
                    continue;
                }
                if (res.meta.worker && strcmp(res.meta.worker, worker_a) == 0)
                    pa = p;
                cf_result_clear(&res);
            }
            if (pa < 0)
                usleep(200 * 1000);
        }
        if (pa < 0) {
            fprintf(stderr, "round %d: worker A never owned a partition\n", r);
            kill(a, SIGKILL);
            waitpid(a, NULL, 0);
            continue;
        }
        char ids[4][96];
        for (int i = 0; i < 4; i++)
            id_on(pa, "job", ids[i], sizeof(ids[i]));
        /* One long request occupies A's only slot; three short ones wait
         * behind it on A. */
        if (submit_sh(d, ids[0], "sleep 3", &err) < 0 || submit_sh(d, ids[1], "true", &err) < 0 ||
            submit_sh(d, ids[2], "true", &err) < 0 || submit_sh(d, ids[3], "true", &err) < 0 ||
            cf_dispatcher_flush(d, 10 * SEC, &err) < 0) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return 1;
        }
        usleep(500 * 1000); /* A took them and runs the long one */
        int64_t t0 = cf_mono_us();
        kill(a, SIGKILL);
        waitpid(a, NULL, 0);
        int64_t first = -1;
        bool lost = false;
        for (int i = 1; i < 4; i++) {
            cf_result res;
            memset(&res, 0, sizeof(res));
            if (cf_dispatcher_wait(d, ids[i], 120 * SEC, &res, &err) < 0) {
                fprintf(stderr, "round %d: %s: %s\n", r, ids[i], err.msg);
                lost = true;
                continue;
            }
            int64_t at = cf_mono_us() - t0;
            if (first < 0 || at < first)
                first = at;
            cf_result_clear(&res);
        }
        cf_result res;
        memset(&res, 0, sizeof(res));
        if (cf_dispatcher_wait(d, ids[0], 120 * SEC, &res, &err) < 0)
            lost = true;
        cf_result_clear(&res);
        /* Waited for in order, so this is an upper bound of the first
         * arrival (a later-waited one that came first is seen later). */
        printf("round %2d: partition %d, first queued request answered %.2f s after the kill%s\n", r, pa,
               first / 1e6, lost ? " (some requests missing!)" : "");
        fflush(stdout);
        if (first >= 0 && !lost)
            took[done++] = first;
    }
    if (done == 0)
        return 1;
    qsort(took, (size_t)done, sizeof(int64_t), cmp_i64);
    printf("failover: %d rounds, p50 %.2f s, max %.2f s\n", done, took[done / 2] / 1e6, took[done - 1] / 1e6);
    printf("RESULT failover rounds=%d p50_us=%lld max_us=%lld\n", done, (long long)took[done / 2],
           (long long)took[done - 1]);
    cf_dispatcher_destroy(d);
    return done == rounds ? 0 : 1;
}
