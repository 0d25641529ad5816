#include "it_support.h"

#include <curl/curl.h>
#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support/test_proc.h"
#include "cf_redis.h"
#include "cf_util.h"

const char *it_client_config(void)
{
    const char *c = getenv("CF_TEST_CLIENT_CONFIG");
    return c && *c ? c : NULL;
}

/* "key = value" lines; '#' and ';' start comments.  The files are the
 * stack's own (deploy/stack.sh writes them). */
static void settings_read(const char *path, cf_kvlist *kafka, char **redis_user, char **redis_password)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("settings file %s: %s", path, strerror(errno));
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#' || line[0] == ';')
            continue;
        char *k = line, *v = eq + 1;
        *eq = '\0';
        while (*k == ' ')
            k++;
        for (char *e = k + strlen(k); e > k && e[-1] == ' ';)
            *--e = '\0';
        while (*v == ' ')
            v++;
        cf_error err;
        if (kafka && strncmp(k, "kafka.", 6) == 0) {
            if (cf_kvlist_set(kafka, k + 6, v, &err) < 0)
                fail_msg("%s: %s", path, err.msg);
        } else if (redis_user && strcmp(k, "redis-user") == 0) {
            free(*redis_user);
            *redis_user = strdup(v);
        } else if (redis_password && strcmp(k, "redis-password") == 0) {
            free(*redis_password);
            *redis_password = strdup(v);
        }
    }
    fclose(f);
}

static struct {
    bool loaded;
    cf_kvlist kafka;
    char *redis_user, *redis_password;
} client;

static void client_load(void)
{
    if (client.loaded)
        return;
    client.loaded = true;
    if (it_client_config())
        settings_read(it_client_config(), &client.kafka, &client.redis_user, &client.redis_password);
}

const cf_kvlist *it_kafka(void)
{
    client_load();
    return &client.kafka;
}

void it_load_kafka_props(const char *path, cf_kvlist *out)
{
    settings_read(path, out, NULL, NULL);
}

void it_kafka_conf_apply(rd_kafka_conf_t *conf)
{
    const cf_kvlist *k = it_kafka();
    char errstr[512];
    for (size_t i = 0; i < k->count; i++)
        if (rd_kafka_conf_set(conf, k->items[i].key, k->items[i].value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
            fail_msg("kafka property %s: %s", k->items[i].key, errstr);
}

void it_redis_auth(struct cf_redis_config *rc)
{
    client_load();
    rc->user = client.redis_user;
    rc->password = client.redis_password;
}

struct cf_redis *it_redis_open(void)
{
    const char *addr = it_redis();
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon)
        fail_msg("no Redis address (CF_TEST_REDIS)");
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    rc.host = host;
    rc.port = atoi(colon + 1);
    it_redis_auth(&rc);
    cf_error err;
    cf_error_clear(&err);
    cf_redis *r = cf_redis_new(&rc, true, &err);
    if (!r)
        fail_msg("redis: %s", err.msg);
    return r;
}

const char *it_principal_config(const char *principal, char *buf, size_t size)
{
    const char *dir = getenv("CF_TEST_SECRETS");
    if (!dir || !*dir)
        return NULL;
    snprintf(buf, size, "%s/%s.conf", dir, principal);
    return buf;
}

const char *it_brokers(void)
{
    const char *b = getenv("CF_TEST_BROKERS");
    return b && *b ? b : NULL;
}

const char *it_redis(void)
{
    const char *r = getenv("CF_TEST_REDIS");
    return r && *r ? r : NULL;
}

void it_unique_name(const char *prefix, char *buf, size_t size)
{
    static unsigned counter;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint32_t)time(NULL);
    snprintf(buf, size, "%s-%ld-%u-%08x", prefix, (long)getpid(), ++counter, rnd);
}

void it_request_topic_create(const char *topic, int partitions)
{
    char cancels[300];
    snprintf(cancels, sizeof(cancels), "%s.cancel", topic);
    const char *names[2] = {topic, cancels};
    cf_error err;
    cf_error_clear(&err);
    if (cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 2, partitions, -1, 30 * 1000000LL, &err) < 0)
        fail_msg("creating %s: %s", topic, err.msg);
}

void it_topics_create(it_topics *t, const char *prefix, int partitions)
{
    char base[64];
    it_unique_name(prefix, base, sizeof(base));
    snprintf(t->requests, sizeof(t->requests), "%s.req", base);
    snprintf(t->results, sizeof(t->results), "%s.res", base);
    snprintf(t->dlq, sizeof(t->dlq), "%s.dlq", base);
    snprintf(t->group, sizeof(t->group), "%s.grp", base);
    snprintf(t->cancels, sizeof(t->cancels), "%s.cancel", t->requests);
    snprintf(t->outputs, sizeof(t->outputs), "%s.output", t->results);
    const char *names[] = {t->requests, t->results, t->dlq, t->cancels, t->outputs};
    cf_error err;
    cf_error_clear(&err);
    if (cf_kafka_create_topics_ex(it_brokers(), it_kafka(), names, 5, partitions, -1, 30 * 1000000LL, &err) < 0)
        fail_msg("creating topics: %s", err.msg);
}

static const char *worker_bin(void)
{
    static char path[1024];
    const char *bin = getenv("CF_BINARY_DIR");
    snprintf(path, sizeof(path), "%s/worker/codefleet-worker", bin ? bin : "build");
    return path;
}

/* The workers this test started that are still alive (not exited, not a
 * zombie: a SIGKILLed worker's run uids are free again), by the index that
 * sets their run uids. */
#define LIVE_WORKERS_MAX 16
static pid_t live_workers[LIVE_WORKERS_MAX];


static int live_worker_index(void)
{
    for (int k = 0; k < LIVE_WORKERS_MAX; k++)
        if (live_workers[k] <= 0 || cf_test_pid_dead(live_workers[k]))
            return k;
    return LIVE_WORKERS_MAX - 1;
}

void it_worker_start(it_worker *w, const it_topics *t, const char *id, const char *const *extra_args)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "%s", id);
    snprintf(w->log_path, sizeof(w->log_path), "/tmp/cf-it-%ld-%s.log", (long)getpid(), id);
    char *argv[64];
    int n = 0;
    char a_brokers[256], a_group[128], a_req[128], a_res[128], a_dlq[128], a_id[96];
    snprintf(a_brokers, sizeof(a_brokers), "--brokers=%s", it_brokers());
    snprintf(a_group, sizeof(a_group), "--group=%s", t->group);
    snprintf(a_req, sizeof(a_req), "--request-topic=%s", t->requests);
    snprintf(a_res, sizeof(a_res), "--result-topic=%s", t->results);
    snprintf(a_dlq, sizeof(a_dlq), "--dlq-topic=%s", t->dlq);
    snprintf(a_id, sizeof(a_id), "--worker-id=%s", id);
    argv[n++] = (char *)worker_bin();
    /* The stack's credentials (a file: never on the command line). */
    static char a_config[1100];
    if (it_client_config()) {
        snprintf(a_config, sizeof(a_config), "--config=%s", it_client_config());
        argv[n++] = a_config;
    }
    argv[n++] = a_brokers;
    argv[n++] = a_group;
    argv[n++] = a_req;
    argv[n++] = a_res;
    argv[n++] = a_dlq;
    argv[n++] = a_id;
    argv[n++] = (char *)"--log-level=debug";
    /* The group protocol is the worker's default (KIP-848 on the stack's
     * Kafka 4); a test of the classic one says so with its own flags. */
    /* The suites test backends, not profiles: the default profile of a
     * test worker is a trusted tenant's, allowing whatever backends the
     * worker runs (process unless a test says otherwise) and network.
     * Profile tests give their own --profile.* flags, which come later and
     * win. */
    static char a_backends[160], a_pbackends[200];
    const char *backends = "process";
    for (int i = 0; extra_args && extra_args[i]; i++)
        if (strncmp(extra_args[i], "--backends=", 11) == 0)
            backends = extra_args[i] + 11;
    snprintf(a_backends, sizeof(a_backends), "--backends=%s", backends);
    snprintf(a_pbackends, sizeof(a_pbackends), "--profile.default.backends=%s", backends);
    argv[n++] = a_backends;
    argv[n++] = a_pbackends;
    argv[n++] = (char *)"--profile.default.network=enabled";
    /* Workers alive at once get run uids of their own (the worker refuses
     * a range another worker on the host holds: run_uids.c): the first
     * keeps the environment's base, the k-th alive runs 60000 + 1000 (k - 1)
     * above it (not the 1000 k of a local stack's workers, which may be up
     * beside the tests: deploy/stack.sh). */
    static char a_uids[64];
    bool own_uids = false;
    for (int i = 0; extra_args && extra_args[i]; i++)
        own_uids |= strncmp(extra_args[i], "--run-uid-base", 14) == 0;
    /* Only where the worker claims any: a backend that runs programs as
     * run uids (the process backend does only with a base, which would
     * otherwise change how its programs run). */
    const char *env = getenv("CODEFLEET_WORKER_RUN_UID_BASE");
    bool claims = (env && atoll(env) > 0) || strstr(backends, "sandbox") || strstr(backends, "container") ||
                  strstr(backends, "wasm") || strstr(backends, "js");
    int k = own_uids || !claims ? -1 : live_worker_index();
    if (k > 0) {
        long long base = env && atoll(env) > 0 ? atoll(env) : 100000;
        snprintf(a_uids, sizeof(a_uids), "--run-uid-base=%lld", base + 60000 + 1000LL * (k - 1));
        argv[n++] = a_uids;
    }
    for (int i = 0; extra_args && extra_args[i] && n < 62; i++)
        argv[n++] = (char *)extra_args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(w->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        /* A test that dies (an assertion, a sanitizer abort) takes its
         * workers with it instead of leaving them consuming. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        /* Unblock what the test runner may have blocked. */
        sigset_t set;
        sigemptyset(&set);
        sigprocmask(SIG_SETMASK, &set, NULL);
        execv(argv[0], argv);
        _exit(127);
    }
    w->pid = pid;
    if (k >= 0)
        live_workers[k] = pid;
}

int it_worker_stop(it_worker *w, int sig, int timeout_ms)
{
    if (w->pid <= 0)
        return -1;
    kill(w->pid, sig);
    int status = 0;
    for (int waited = 0; waited <= timeout_ms; waited += 20) {
        pid_t r = waitpid(w->pid, &status, WNOHANG);
        if (r == w->pid) {
            w->pid = 0;
            return status;
        }
        usleep(20 * 1000);
    }
    kill(w->pid, SIGKILL);
    waitpid(w->pid, &status, 0);
    w->pid = 0;
    return -1;
}

bool it_worker_log_contains(const it_worker *w, const char *needle)
{
    FILE *f = fopen(w->log_path, "r");
    if (!f)
        return false;
    char line[8192];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

bool it_worker_wait_log(const it_worker *w, const char *needle, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        if (it_worker_log_contains(w, needle))
            return true;
        usleep(50 * 1000);
    }
    return false;
}

void it_worker_dump_log(const it_worker *w)
{
    FILE *f = fopen(w->log_path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- log of worker %s (%s) ----\n", w->id, w->log_path);
    char line[8192];
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

cf_dispatcher *it_dispatcher_new(const it_topics *t)
{
    cf_dispatcher_config cfg = {
        .brokers = it_brokers(),
        .request_topic = t->requests,
        .result_topic = t->results,
        .collect_results = true,
        .kafka = it_kafka(),
    };
    cf_dispatcher *d = NULL;
    cf_error err;
    cf_error_clear(&err);
    if (cf_dispatcher_new(&cfg, &d, &err) < 0)
        fail_msg("dispatcher: %s", err.msg);
    return d;
}

void it_request_init(cf_request *req, cf_language lang, const char *code)
{
    memset(req, 0, sizeof(*req));
    char id[64];
    it_unique_name("req", id, sizeof(id));
    req->id = strdup(id);
    req->language = lang;
    if (lang == CF_LANG_COMMAND) {
        /* code is a single shell-free program path with no arguments */
        req->argv = calloc(2, sizeof(char *));
        req->argv[0] = strdup(code);
        req->argc = 1;
    } else if (code) {
        cf_bytes_set(&req->code, code, strlen(code));
    }
}

void it_submit_wait(cf_dispatcher *d, const cf_request *req, int64_t timeout_us, cf_result *res)
{
    cf_error err;
    cf_error_clear(&err);
    memset(res, 0, sizeof(*res));
    if (cf_dispatcher_submit(d, req, &err) < 0)
        fail_msg("submit %s: %s", req->id, err.msg);
    if (cf_dispatcher_wait(d, req->id, timeout_us, res, &err) < 0)
        fail_msg("waiting for %s: %s", req->id, err.msg);
}

it_message *it_consume_first(const char *topic, int timeout_ms)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char group[96];
    it_unique_name("it-probe", group, sizeof(group));
    if (rd_kafka_conf_set(conf, "bootstrap.servers", it_brokers(), errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr)))
        fail_msg("conf: %s", errstr);
    it_kafka_conf_apply(conf);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!rk)
        fail_msg("consumer: %s", errstr);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    it_message *copy = NULL;
    int64_t until = cf_mono_us() + (int64_t)timeout_ms * 1000;
    while (!copy && cf_mono_us() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (!m->err) {
            copy = calloc(1, sizeof(*copy));
            copy->partition = m->partition;
            copy->offset = m->offset;
            copy->len = m->len;
            copy->null_value = m->payload == NULL;
            copy->payload = calloc(1, m->len + 1);
            if (m->len)
                memcpy(copy->payload, m->payload, m->len);
            copy->key_len = m->key_len;
            copy->key = cf_strndup(m->key ? (const char *)m->key : "", m->key_len);
            rd_kafka_headers_t *h = NULL;
            if (rd_kafka_message_detach_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
                copy->headers = h;
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return copy;
}

void it_message_free(it_message *m)
{
    if (!m)
        return;
    free(m->payload);
    free(m->key);
    if (m->headers)
        rd_kafka_headers_destroy(m->headers);
    free(m);
}

const char *it_message_header(const it_message *m, const char *name, char *buf, size_t size)
{
    const void *v = NULL;
    size_t n = 0;
    if (!m->headers || rd_kafka_header_get_last(m->headers, name, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    if (n >= size)
        n = size - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return buf;
}

extern char **environ;

static void slurp(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
}

/* The CLI with the stack's settings and args, stdout and stderr to files;
 * its pid, or -1 (why in err). */
static pid_t cli_spawn(const char *const *args, const char *out_path, const char *err_path, char *err,
                       size_t err_size)
{
    const char *argv[64];
    int n = 0;
    char bin[1024], brokers[512], config[1100];
    const char *b = getenv("CF_BINARY_DIR");
    snprintf(bin, sizeof(bin), "%s/dispatcher/codefleet", b ? b : "build");
    argv[n++] = bin;
    if (it_client_config()) {
        snprintf(config, sizeof(config), "--config=%s", it_client_config());
        argv[n++] = config;
    }
    snprintf(brokers, sizeof(brokers), "--brokers=%s", it_brokers());
    argv[n++] = brokers;
    for (size_t i = 0; args[i] && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char **)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        snprintf(err, err_size, "posix_spawn %s: %s", argv[0], strerror(rc));
        return -1;
    }
    return pid;
}

pid_t it_cli_start(const char *const *args, const char *out_path, const char *err_path)
{
    char err[600];
    pid_t pid = cli_spawn(args, out_path, err_path, err, sizeof(err));
    if (pid < 0)
        fail_msg("%s", err);
    return pid;
}

int it_cli_run(const char *const *args, const char *tmpdir, char *out, size_t out_size, char *err, size_t err_size)
{
    char outp[512], errp[512];
    snprintf(outp, sizeof(outp), "%s/cli.out", tmpdir);
    snprintf(errp, sizeof(errp), "%s/cli.err", tmpdir);
    pid_t pid = cli_spawn(args, outp, errp, err, err_size);
    if (pid < 0) {
        out[0] = '\0';
        return -1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    slurp(outp, out, out_size);
    slurp(errp, err, err_size);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ------------------------------------------------- HTTP: /metrics, /readyz */

typedef struct body {
    char *p;
    size_t len;
} body;

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
    body *b = arg;
    size_t add = size * n;
    char *q = realloc(b->p, b->len + add + 1);
    if (!q)
        return 0;
    memcpy(q + b->len, p, add);
    b->p = q;
    b->len += add;
    b->p[b->len] = '\0';
    return add;
}

/* GET (or another method) of http://127.0.0.1:port/path: the status (0 when
 * nothing answered), the body in *out (caller frees; may be NULL). */
static void curl_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

long it_http(const char *method, int port, const char *path, char **out)
{
    /* Once, before any handle: curl_easy_init's lazy global init is not
     * thread-safe, and librdkafka's threads run beside the test's. */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, curl_once);
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    body b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    if (out)
        *out = b.p ? b.p : strdup("");
    else
        free(b.p);
    return code;
}

/* The port a worker started with metrics-listen=127.0.0.1:0 chose (its log
 * says "(port N)"). */
int it_worker_metrics_port(const it_worker *w)
{
    assert_true(it_worker_wait_log(w, "serving /metrics", 30000));
    FILE *f = fopen(w->log_path, "r");
    assert_non_null(f);
    char line[4096];
    int port = 0;
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "serving /metrics");
        if (p && (p = strstr(p, "(port ")))
            port = (int)strtol(p + 6, NULL, 10);
    }
    fclose(f);
    assert_true(port > 0);
    return port;
}

/* The value of one exposition line "name{labels} value" (exact prefix up
 * to the space); -1 when absent. */
double it_metric_sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1;
}

