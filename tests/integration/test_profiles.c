/* The trust boundary through the fleet (issue 7): a real worker on the real
 * broker with an operator's profiles.  Each hole the issue lists is a case
 * here: a request asking beyond the profile of the topic it arrived on is
 * rejected with the profile and the control named, and nothing runs; a
 * tenant's own profile allows what it says and answers on its own result
 * topic; a program's own signal and a missing command are reported as the
 * caller's. */
#include "it_support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_util.h"
#include "test_host.h"

#define SEC 1000000LL

typedef struct suite {
    it_topics t;   /* the default profile's topics */
    it_topics ta;  /* tenant "acme" */
    it_topics tn;  /* profile "net": network enabled (results on t's topic) */
    it_topics to;  /* profile "netok": network enabled, the test host's range allowed */
    it_worker w;
    cf_dispatcher *d, *da, *dn, *dok;
    test_host th; /* a private address in a network namespace of ours */
    char marker[96];  /* a program that runs creates it (process backend) */
    char secret_dir[64];
    char roots[64];   /* acme's read-only root */
    bool sandbox;
} suite;

static suite g;

static void topics_for_tenant(it_topics *ta, const it_topics *t)
{
    /* Unique names again: one topic set per tenant. */
    it_topics_create(ta, "prof-acme", 1);
    snprintf(ta->group, sizeof(ta->group), "%s", t->group);
}

static int setup_suite(void **state)
{
    (void)state;
    if (!it_brokers())
        return 0;
    g.sandbox = geteuid() == 0;
    it_topics_create(&g.t, "prof", 1);
    topics_for_tenant(&g.ta, &g.t);
    it_topics_create(&g.tn, "prof-net", 1);
    it_topics_create(&g.to, "prof-netok", 1);
    if (g.sandbox && !test_host_up(&g.th, "it", "10.235"))
        return -1;
    snprintf(g.marker, sizeof(g.marker), "/tmp/cf-prof-marker-%ld", (long)getpid());
    cf_strlcpy(g.secret_dir, "/var/tmp/cf-prof-secret-XXXXXX", sizeof(g.secret_dir));
    cf_strlcpy(g.roots, "/var/tmp/cf-prof-root-XXXXXX", sizeof(g.roots));
    if (!mkdtemp(g.secret_dir) || !mkdtemp(g.roots) || chmod(g.roots, 0755) < 0)
        return -1;
    char p[160];
    snprintf(p, sizeof(p), "%s/data.txt", g.roots);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fputs("shared data\n", f);
    fclose(f);
    chmod(p, 0644);

    static char a_topic[160], a_res[160], a_root[160], a_backends[64], a_dback[64], a_ntopic[160], a_otopic[160],
        a_oallow[96];
    snprintf(a_ntopic, sizeof(a_ntopic), "--profile.net.topic=%s", g.tn.requests);
    snprintf(a_otopic, sizeof(a_otopic), "--profile.netok.topic=%s", g.to.requests);
    snprintf(a_oallow, sizeof(a_oallow), "--profile.netok.network-allow=%s", g.th.net[0] ? g.th.net : "10.235.0.0/30");
    snprintf(a_topic, sizeof(a_topic), "--profile.acme.topic=%s", g.ta.requests);
    snprintf(a_res, sizeof(a_res), "--profile.acme.result-topic=%s", g.ta.results);
    snprintf(a_root, sizeof(a_root), "--profile.acme.read-only-roots=%s", g.roots);
    snprintf(a_backends, sizeof(a_backends), "--backends=%s", g.sandbox ? "sandbox,process" : "process");
    /* The default profile as an operator leaves it: deny-by-default (the
     * sandbox only), except without root where there is no sandbox. */
    snprintf(a_dback, sizeof(a_dback), "--profile.default.backends=%s", g.sandbox ? "sandbox" : "process");
    const char *extra[] = {a_backends,
                           a_dback,
                           "--profile.default.network=disabled",
                           a_topic,
                           a_res,
                           "--profile.acme.backends=process",
                           "--profile.acme.network=enabled", /* the process backend cannot take it away */
                           "--profile.acme.env-allow=CF_PROFILE_TEST_SHARED",
                           a_root,
                           "--profile.acme.reply-to=acme.*",
                           "--profile.acme.state-prefix=acme.",
                           "--profile.acme.max-timeout=20s",
                           "--slots=1",
                           a_ntopic, /* [13]: the network profiles follow */
                           "--profile.net.backends=sandbox",
                           "--profile.net.network=enabled",
                           a_otopic,
                           "--profile.netok.backends=sandbox",
                           "--profile.netok.network=enabled",
                           a_oallow,
                           NULL};
    if (!g.sandbox) /* no sandbox without root: the network profiles are not configured */
        extra[13] = NULL;
    setenv("CF_PROFILE_TEST_SHARED", "shared-value", 1);
    setenv("CODEFLEET_WORKER_REDIS_PASSWORD", "worker-secret", 1);
    it_worker_start(&g.w, &g.t, "prof-w1", extra);
    unsetenv("CF_PROFILE_TEST_SHARED");
    unsetenv("CODEFLEET_WORKER_REDIS_PASSWORD");
    if (!it_worker_wait_log(&g.w, "consuming", 30000)) {
        it_worker_dump_log(&g.w);
        return -1;
    }
    g.d = it_dispatcher_new(&g.t);
    g.da = it_dispatcher_new(&g.ta);
    /* The network profiles answer on the worker's result topic. */
    snprintf(g.tn.results, sizeof(g.tn.results), "%s", g.t.results);
    snprintf(g.to.results, sizeof(g.to.results), "%s", g.t.results);
    g.dn = it_dispatcher_new(&g.tn);
    g.dok = it_dispatcher_new(&g.to);
    return 0;
}

static int teardown_suite(void **state)
{
    (void)state;
    if (!it_brokers())
        return 0;
    cf_dispatcher_destroy(g.d);
    cf_dispatcher_destroy(g.da);
    cf_dispatcher_destroy(g.dn);
    cf_dispatcher_destroy(g.dok);
    test_host_down(&g.th);
    if (g.w.pid > 0)
        it_worker_stop(&g.w, SIGTERM, 20000);
    unlink(g.marker);
    char p[160];
    snprintf(p, sizeof(p), "%s/secret.txt", g.secret_dir);
    unlink(p);
    rmdir(g.secret_dir);
    snprintf(p, sizeof(p), "%s/data.txt", g.roots);
    unlink(p);
    rmdir(g.roots);
    return 0;
}

static char **strv1(const char *s)
{
    char **v = calloc(2, sizeof(char *));
    v[0] = strdup(s);
    return v;
}

static void expect(const cf_result *res, cf_status want, const char *needle, const char *what)
{
    if (res->status != want || (needle && (!res->reason || !strstr(res->reason, needle))))
        fail_msg("%s: status %s (want %s), reason '%s' (want '%s'), stdout '%.*s'", what,
                 cf_status_name(res->status), cf_status_name(want), res->reason ? res->reason : "-",
                 needle ? needle : "-", (int)res->stdout_data.len,
                 res->stdout_data.data ? (const char *)res->stdout_data.data : "");
}

/* A request that, if it ran on the host, would leave the marker behind. */
static void marker_request(cf_request *req)
{
    char code[200];
    snprintf(code, sizeof(code), "touch %s; echo ran", g.marker);
    it_request_init(req, CF_LANG_SHELL, code);
}

/* Every control the default profile decides, asked beyond it: rejected
 * with the profile and the control named, and the program never ran. */
static void test_default_profile_refuses(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    if (!g.sandbox) {
        print_message("not root: the default profile runs the process backend here; skipping\n");
        skip();
    }
    unlink(g.marker);
    char secret[160];
    snprintf(secret, sizeof(secret), "%s/secret.txt", g.secret_dir);
    FILE *f = fopen(secret, "w");
    fputs("root only\n", f);
    fclose(f);
    chmod(secret, 0644);

    for (int c = 0; c < 9; c++) {
        cf_request req;
        marker_request(&req);
        const char *needle = NULL;
        switch (c) {
        case 0: /* the host-local backend reached the unauthenticated Redis and Kafka */
            req.backend = strdup("process");
            needle = "profile 'default': backend 'process' is not allowed";
            break;
        case 1:
            req.policy.network = CF_NET_ENABLED;
            needle = "profile 'default': network=enabled is not allowed";
            break;
        case 2: /* any host path: the broker's data directory, a root-only file */
            req.policy.fs_mode = CF_FS_PATHS;
            req.policy.fs_read_only = strv1(secret);
            req.policy.n_fs_read_only = 1;
            needle = "profile 'default': filesystem mode paths is not allowed";
            break;
        case 3: /* a worker secret copied into the program */
            req.policy.env_allow_set = true;
            req.policy.env_allow = strv1("CODEFLEET_WORKER_REDIS_PASSWORD");
            req.policy.n_env_allow = 1;
            needle = "profile 'default': env_allow: 'CODEFLEET_WORKER_REDIS_PASSWORD' is not allowed";
            break;
        case 4: /* a result written onto the fleet's request topic */
            req.reply_to = strdup(g.t.requests);
            needle = "is one of the fleet's own topics";
            break;
        case 5:
            req.reply_to = strdup("__consumer_offsets");
            needle = "is one of the fleet's own topics";
            break;
        case 6:
            req.reply_to = strdup("elsewhere");
            needle = "profile 'default': reply_to 'elsewhere' is not allowed";
            break;
        case 7: /* limits no profile caps are still the worker's to cap */
            req.policy.memory_bytes = 1LL << 40;
            needle = "policy.memory_bytes 1099511627776 exceeds this worker's maximum";
            break;
        case 8:
            req.policy.max_processes = INT64_MAX;
            needle = "policy.max_processes 9223372036854775807 exceeds this worker's maximum";
            break;
        }
        cf_result res;
        it_submit_wait(g.d, &req, 60 * SEC, &res);
        expect(&res, CF_STATUS_REJECTED, needle, "default profile");
        assert_int_equal(res.stdout_data.len, 0);
        assert_int_equal(access(g.marker, F_OK), -1);
        cf_request_clear(&req);
        cf_result_clear(&res);
    }

    /* Within the profile: runs, in the sandbox. */
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "echo inside");
    cf_result res;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect(&res, CF_STATUS_SUCCESS, NULL, "sandboxed");
    assert_string_equal(res.meta.backend, "sandbox");
    cf_request_clear(&req);
    cf_result_clear(&res);
}

/* The tenant's profile: what it allows works, answers go to the tenant's
 * own result topic and never to the default one; beyond it is refused. */
static void test_tenant_profile(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    unlink(g.marker);
    cf_request req;
    marker_request(&req);
    req.policy.env_allow_set = true;
    req.policy.env_allow = strv1("CF_PROFILE_TEST_SHARED");
    req.policy.n_env_allow = 1;
    char code[300];
    snprintf(code, sizeof(code), "touch %s; echo \"$CF_PROFILE_TEST_SHARED\"; cat %s/data.txt", g.marker, g.roots);
    cf_bytes_set(&req.code, code, strlen(code));
    req.backend = strdup("process");
    cf_result res;
    it_submit_wait(g.da, &req, 60 * SEC, &res);
    expect(&res, CF_STATUS_SUCCESS, NULL, "tenant");
    assert_int_equal(access(g.marker, F_OK), 0);
    assert_true(res.stdout_data.len == strlen("shared-value\nshared data\n") &&
                memcmp(res.stdout_data.data, "shared-value\nshared data\n", res.stdout_data.len) == 0);
    /* Not on the default result topic. */
    cf_result other;
    memset(&other, 0, sizeof(other));
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_wait(g.d, req.id, 2 * SEC, &other, &err), -1);
    cf_result_clear(&other);
    cf_request_clear(&req);
    cf_result_clear(&res);
    unlink(g.marker);

    /* An allowed reply_to that cannot take the result (it does not
     * exist): the result comes on the profile's topic, soon, with
     * reply_to_error saying so, and a success stays a success without a
     * reason (issue 8: it came 30 s later, as a reason on the success). */
    char missing[96];
    it_unique_name("acme.missing", missing, sizeof(missing));
    it_request_init(&req, CF_LANG_SHELL, "echo to-nowhere");
    req.backend = strdup("process");
    req.reply_to = strdup(missing);
    int64_t t0 = cf_mono_us();
    it_submit_wait(g.da, &req, 60 * SEC, &res);
    expect(&res, CF_STATUS_SUCCESS, NULL, "reply_to fallback");
    assert_null(res.reason);
    assert_non_null(res.reply_to_error);
    assert_non_null(strstr(res.reply_to_error, missing));
    assert_true(cf_mono_us() - t0 < 20 * SEC);
    print_message("reply_to fallback after %.1f s: %s\n", (cf_mono_us() - t0) / 1e6, res.reply_to_error);
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* Beyond the tenant's profile. */
    for (int c = 0; c < 5; c++) {
        marker_request(&req);
        req.backend = strdup("process");
        const char *needle = NULL;
        switch (c) {
        case 0:
            req.policy.timeout_us = 60 * SEC;
            needle = "profile 'acme': policy.timeout_us 60000000 exceeds the profile's maximum";
            break;
        case 1:
            req.policy.env_allow_set = true;
            req.policy.env_allow = strv1("CODEFLEET_WORKER_REDIS_PASSWORD");
            req.policy.n_env_allow = 1;
            needle = "profile 'acme': env_allow";
            break;
        case 2:
            req.workspace = strdup("globex.ws");
            needle = "profile 'acme': workspace 'globex.ws' does not start with 'acme.'";
            break;
        case 3: /* the default profile's results: another tenant's */
            req.reply_to = strdup(g.t.results);
            needle = "is another profile's result topic";
            break;
        case 4:
            free(req.backend);
            req.backend = strdup("sandbox");
            needle = "profile 'acme': backend 'sandbox' is not allowed";
            break;
        }
        it_submit_wait(g.da, &req, 60 * SEC, &res);
        expect(&res, CF_STATUS_REJECTED, needle, "tenant beyond its profile");
        assert_int_equal(access(g.marker, F_OK), -1);
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
}

/* In the sandbox a program killed by its own signal is failed with that
 * signal (it was reported success), and a command that exists on the host
 * but not inside is the caller's mistake, not internal_error. */
static void test_caller_outcomes_in_sandbox(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    if (!g.sandbox)
        skip();
    cf_request req;
    cf_result res;
    const char *self_kill[] = {"kill -9 $$; echo survived", "kill -TERM $$; echo survived"};
    const int sigs[] = {SIGKILL, SIGTERM};
    for (int i = 0; i < 2; i++) {
        it_request_init(&req, CF_LANG_SHELL, self_kill[i]);
        it_submit_wait(g.d, &req, 60 * SEC, &res);
        expect(&res, CF_STATUS_FAILED, "killed by signal", self_kill[i]);
        assert_int_equal(res.signal, sigs[i]);
        assert_int_equal(res.stdout_data.len, 0);
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
    it_request_init(&req, CF_LANG_PYTHON, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nprint('survived')");
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect(&res, CF_STATUS_FAILED, "SIGTERM", "python self-kill");
    cf_request_clear(&req);
    cf_result_clear(&res);

    /* The test's own binary: absolute, on the host, not in the sandbox. */
    char self[256];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    it_request_init(&req, CF_LANG_COMMAND, self);
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect(&res, CF_STATUS_FAILED, "cannot execute", "host-only argv[0]");
    assert_non_null(strstr(res.reason, "inside the sandbox: No such file or directory"));
    cf_request_clear(&req);
    cf_result_clear(&res);
}

/* network=enabled through the fleet is egress only: the broker's and
 * Redis's ports (on the host's loopback, through slirp's gateway, on the
 * host's own address) are unreachable, a private test host is refused
 * unless the profile allows its range. */
static void test_network_egress_only(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    if (!g.sandbox)
        skip();
    int kport = atoi(strrchr(it_brokers(), ':') + 1);
    const char *r = it_redis();
    int rport = r ? atoi(strrchr(r, ':') + 1) : 6379;
    char code[1400];
    snprintf(code, sizeof(code),
             "import socket\n"
             "targets = [('kafka-lo', '127.0.0.1', %d), ('redis-lo', '127.0.0.1', %d), ('kafka-gw', '10.0.2.2', %d), "
             "('redis-gw', '10.0.2.2', %d), ('testhost', '%s', 7777)]\n"
             "for name, host, port in targets:\n"
             "    s = socket.socket(); s.settimeout(3)\n"
             "    try:\n        s.connect((host, port)); print(name, 'ok', s.recv(5).decode() or '-')\n"
             "    except OSError as e:\n        print(name, 'failed', e.errno)\n",
             kport, rport, kport, rport, g.th.peer);
    for (int allowed = 0; allowed < 2; allowed++) {
        cf_request req;
        it_request_init(&req, CF_LANG_PYTHON, code);
        req.policy.network = CF_NET_ENABLED;
        cf_result res;
        it_submit_wait(allowed ? g.dok : g.dn, &req, 60 * SEC, &res);
        expect(&res, CF_STATUS_SUCCESS, NULL, "network enabled");
        const char *out = res.stdout_data.data ? (const char *)res.stdout_data.data : "";
        print_message("%s:\n%s", allowed ? "netok" : "net", out);
        assert_non_null(strstr(out, "kafka-lo failed 111\n")); /* its own loopback */
        assert_non_null(strstr(out, "redis-lo failed 111\n"));
        assert_non_null(strstr(out, "kafka-gw failed 13\n"));  /* slirp's gateway: the host, refused */
        assert_non_null(strstr(out, "redis-gw failed 13\n"));
        assert_non_null(strstr(out, allowed ? "testhost ok hello\n" : "testhost failed 13\n"));
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_network_egress_only),
        cmocka_unit_test(test_default_profile_refuses),
        cmocka_unit_test(test_tenant_profile),
        cmocka_unit_test(test_caller_outcomes_in_sandbox),
    };
    return cmocka_run_group_tests(tests, setup_suite, teardown_suite);
}
