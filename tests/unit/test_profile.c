/* Operator policy profiles: loading, defaults that deny, and admission
 * (every control a profile decides is refused beyond it, with a reason
 * naming the profile and the control). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_backend.h"
#include "profile_int.h"
#include "cf_util.h"
#include "request_builders.h"

typedef struct fixture {
    char root[64];     /* a temporary directory: roots live below it */
    char data[96];     /* root/data (a read-only root) */
    char scratch[96];  /* root/scratch (a read-write root) */
    char link[96];     /* root/link -> data (a root given through a symlink) */
    cf_backend_config bcfg;
    cf_backend_set *backends;
    cf_profile_env env;
    cf_kvlist kv;
    cf_profile_set *set;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    cf_strlcpy(f->root, "/tmp/cf-proftest-XXXXXX", sizeof(f->root));
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->data, sizeof(f->data), "%s/data", f->root);
    snprintf(f->scratch, sizeof(f->scratch), "%s/scratch", f->root);
    snprintf(f->link, sizeof(f->link), "%s/link", f->root);
    if (mkdir(f->data, 0755) < 0 || mkdir(f->scratch, 0755) < 0 || symlink(f->data, f->link) < 0)
        return -1;
    f->bcfg.work_root = f->root;
    f->bcfg.python_path = "/usr/bin/python3";
    f->bcfg.shell_path = "/bin/sh";
    f->bcfg.slots = 1;
    cf_error err;
    if (cf_backend_set_new("process", &f->bcfg, &f->backends, &err) < 0)
        return -1;
    f->env = (cf_profile_env){.request_topic = "cf.requests", .result_topic = "cf.results", .dlq_topic = "cf.dlq",
                              .events_topic = "cf.events", .workers_topic = "cf.workers",
                              .env_prefix = "CODEFLEET_WORKER_",
                              .backends = f->backends};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cf_profile_set_destroy(f->set);
    cf_kvlist_free(&f->kv);
    cf_backend_set_destroy(f->backends);
    unlink(f->link);
    rmdir(f->data);
    rmdir(f->scratch);
    int rc = rmdir(f->root);
    free(f);
    return rc;
}

static void kv(fixture *f, const char *key, const char *value)
{
    cf_error err;
    assert_int_equal(cf_kvlist_set(&f->kv, key, value, &err), 0);
}

/* Settings from scratch: only the default profile, on the process backend. */
static void fresh_settings(fixture *f)
{
    cf_kvlist_free(&f->kv);
    kv(f, "default.backends", "process");
}

/* A profile NAME for TOPIC on the process backend. */
static void add_profile(fixture *f, const char *name, const char *topic)
{
    char key[64];
    snprintf(key, sizeof key, "%s.topic", name);
    kv(f, key, topic);
    snprintf(key, sizeof key, "%s.backends", name);
    kv(f, key, "process");
}

/* Two tenant profiles with the state prefixes A and B. */
static void two_prefixes(fixture *f, const char *a, const char *b)
{
    fresh_settings(f);
    add_profile(f, "a", "cf.requests.a");
    kv(f, "a.state-prefix", a);
    add_profile(f, "b", "cf.requests.b");
    kv(f, "b.state-prefix", b);
}

static int load(fixture *f, cf_error *err)
{
    cf_profile_set_destroy(f->set);
    f->set = NULL;
    cf_error_clear(err);
    return cf_profile_set_new(&f->kv, &f->env, &f->set, err);
}

/* Admits req on the profile of topic; returns the rc, reason in `reason`. */
static int admit(fixture *f, const char *topic, cf_request *req, char *reason, size_t rsz)
{
    const cf_profile *p = cf_profile_set_for_topic(f->set, topic);
    assert_non_null(p);
    reason[0] = '\0';
    return cf_profile_admit(p, f->set, cf_profile_backend_for(p, req), req, reason, rsz);
}

static void expect_refused(fixture *f, const char *topic, cf_request *req, const char *needle)
{
    char reason[600];
    if (admit(f, topic, req, reason, sizeof(reason)) != -1)
        fail_msg("admitted, expected a refusal containing '%s'", needle);
    if (!strstr(reason, needle))
        fail_msg("reason '%s' lacks '%s'", reason, needle);
}

static void expect_admitted(fixture *f, const char *topic, cf_request *req)
{
    char reason[600];
    if (admit(f, topic, req, reason, sizeof(reason)) != 0)
        fail_msg("refused: %s", reason);
}

/* A request asking for nothing but its timeout (no output caps either). */
static void mkreq(cf_request *r, cf_language lang, const char *code, int64_t timeout_us)
{
    req_init_timeout(r, lang, code, timeout_us);
    r->policy.max_stdout_bytes = r->policy.max_stderr_bytes = 0;
}

static char **strv1(const char *s)
{
    char **v = calloc(2, sizeof(char *));
    v[0] = strdup(s);
    return v;
}

/* The built-in default profile denies: the default backend is the sandbox
 * (not enabled here: refused at load), so a worker running only the
 * process backend must say what its default profile allows. */
static void test_default_profile_denies(void **state)
{
    fixture *f = *state;
    cf_error err;
    assert_int_equal(load(f, &err), -1);
    assert_non_null(strstr(err.msg, "profile 'default': backend 'sandbox' is not enabled"));

    kv(f, "default.backends", "process");
    assert_int_equal(load(f, &err), 0);
    assert_int_equal(cf_profile_set_count(f->set), 1);
    const cf_profile *p = cf_profile_set_for_topic(f->set, "cf.requests");
    assert_non_null(p);
    assert_string_equal(p->name, "default");
    assert_string_equal(cf_profile_result_topic(p, &f->env), "cf.results");
    assert_null(cf_profile_set_for_topic(f->set, "cf.results"));

    cf_request req;
    mkreq(&req, CF_LANG_SHELL, "true", 0);
    expect_admitted(f, "cf.requests", &req);
    /* Saying nothing about the network means none under this profile: a
     * backend that cannot take it away then refuses. */
    assert_int_equal(req.policy.network, CF_NET_DISABLED);
    /* network, host paths, environment passthrough, reply_to: all refused */
    req.policy.network = CF_NET_ENABLED;
    expect_refused(f, "cf.requests", &req, "profile 'default': network=enabled is not allowed");
    req.policy.network = CF_NET_DISABLED;
    expect_admitted(f, "cf.requests", &req);

    req.policy.fs_mode = CF_FS_PATHS;
    req.policy.fs_read_only = strv1("/etc");
    req.policy.n_fs_read_only = 1;
    expect_refused(f, "cf.requests", &req, "profile 'default': filesystem mode paths is not allowed");
    req.policy.fs_mode = CF_FS_NONE;

    req.policy.env_allow_set = true;
    req.policy.env_allow = strv1("CODEFLEET_WORKER_REDIS_PASSWORD");
    req.policy.n_env_allow = 1;
    expect_refused(f, "cf.requests", &req, "env_allow: 'CODEFLEET_WORKER_REDIS_PASSWORD' is not allowed");
    cf_request_clear(&req);

    mkreq(&req, CF_LANG_SHELL, "true", 0);
    req.reply_to = strdup("somewhere.else");
    expect_refused(f, "cf.requests", &req, "reply_to 'somewhere.else' is not allowed");
    cf_request_clear(&req);
}

static void test_load_errors(void **state)
{
    fixture *f = *state;
    cf_error err;
    static const struct {
        const char *key, *value, *needle;
    } bad[] = {
        {"default.colour", "blue", "colour"},
        {"bad name.topic", "x", "profile.<name>.<key>"},
        {"t.backends", "process", "topic is required"},
        {"default.languages", "cobol", "unknown language 'cobol'"},
        {"default.read-only-roots", "relative/dir", "not an absolute path"},
        {"default.read-only-roots", "/nonexistent-cf-root", "/nonexistent-cf-root"},
        {"default.read-write-roots", "/etc/hostname", "not a directory"},
        {"default.env-allow", "CODEFLEET_WORKER_REDIS_PASSWORD", "never passed"},
        {"default.env-allow", "BAD-NAME", "not a variable name"},
        {"default.reply-to", "__consumer_offsets", "not a topic or prefix"},
        {"default.reply-to", "a*b", "not a topic or prefix"},
        {"default.topic", "cf.results", "result, dead-letter, events or workers topic"},
        {"default.topic", "__internal", "not a usable topic name"},
        {"default.result-topic", "cf.requests", "is the request topic of 'default'"},
        {"default.state-prefix", "a/b", "state-prefix"},
        {"default.state-prefix", "", "must end in"},
        {"default.state-prefix", "tenant", "must end in"},
        {"default.result-topic", "cf.dlq", "dead-letter, events or workers topic"},
        {"default.reply-to", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa*",
         "longer than a topic name"},
        {"default.network", "sometimes", "network"},
        {"default.max-memory", "-1", "max-memory"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fresh_settings(f);
        kv(f, bad[i].key, bad[i].value);
        if (load(f, &err) != -1)
            fail_msg("%s=%s was accepted", bad[i].key, bad[i].value);
        if (!strstr(err.msg, bad[i].needle))
            fail_msg("%s=%s: '%s' lacks '%s'", bad[i].key, bad[i].value, err.msg, bad[i].needle);
    }
    /* Two profiles for one topic. */
    fresh_settings(f);
    add_profile(f, "a", "cf.requests");
    assert_int_equal(load(f, &err), -1);
    assert_non_null(strstr(err.msg, "both govern topic 'cf.requests'"));

    /* Nested state prefixes: acme-'s requests could name acme-eu-'s ids. */
    two_prefixes(f, "acme-", "acme-eu-");
    assert_int_equal(load(f, &err), -1);
    assert_non_null(strstr(err.msg, "state-prefix 'acme-' is the start of 'acme-eu-'"));
    two_prefixes(f, "acme-", "acmf-");
    assert_int_equal(load(f, &err), 0);
}

/* A tenant profile: its own topic and result topic, roots, env names,
 * reply_to rules, state prefix and limits. */
static void tenant(fixture *f)
{
    kv(f, "default.backends", "process");
    kv(f, "acme.topic", "cf.requests.acme");
    kv(f, "acme.result-topic", "cf.results.acme");
    kv(f, "acme.backends", "process");
    kv(f, "acme.languages", "shell, python");
    kv(f, "acme.network", "enabled");
    kv(f, "acme.read-only-roots", f->link); /* canonicalised to data */
    kv(f, "acme.read-write-roots", f->scratch);
    kv(f, "acme.env-allow", "LANG,TZ");
    kv(f, "acme.reply-to", "acme.replies, acme.out.*");
    kv(f, "acme.state-prefix", "acme.");
    kv(f, "acme.max-timeout", "10s");
    kv(f, "acme.max-memory", "128MiB");
    kv(f, "acme.max-processes", "16");
    kv(f, "acme.max-output", "4KiB");
    cf_error err;
    if (load(f, &err) < 0)
        fail_msg("load: %s", err.msg);
}

static void test_tenant_profile(void **state)
{
    fixture *f = *state;
    tenant(f);
    assert_int_equal(cf_profile_set_count(f->set), 2);
    const cf_profile *p = cf_profile_set_for_topic(f->set, "cf.requests.acme");
    assert_non_null(p);
    assert_string_equal(p->name, "acme");
    assert_string_equal(cf_profile_result_topic(p, &f->env), "cf.results.acme");
    assert_int_equal(p->n_ro_roots, 1);
    assert_string_equal(p->ro_roots[0], f->data); /* the symlink resolved once, at load */

    cf_request req;
    mkreq(&req, CF_LANG_PYTHON, "print(1)", 0);
    req.policy.network = CF_NET_ENABLED;
    expect_admitted(f, "cf.requests.acme", &req);
    /* limits a request sets none of come from the profile's maxima */
    assert_int_equal(req.policy.timeout_us, 10 * 1000000LL);
    assert_int_equal(req.policy.memory_bytes, 128LL << 20);
    assert_int_equal(req.policy.max_processes, 16);
    assert_int_equal(req.policy.max_stdout_bytes, 4096);
    assert_int_equal(req.policy.max_file_size_bytes, 0); /* no profile cap: untouched */
    cf_request_clear(&req);

    /* the same request on the default topic: network refused there */
    mkreq(&req, CF_LANG_PYTHON, "print(1)", 0);
    req.policy.network = CF_NET_ENABLED;
    expect_refused(f, "cf.requests", &req, "profile 'default': network=enabled");
    cf_request_clear(&req);

    static const struct {
        cf_language lang;
        int64_t timeout, memory, procs, out;
        const char *needle;
    } over[] = {
        {CF_LANG_JAVASCRIPT, 0, 0, 0, 0, "language javascript is not allowed"},
        {CF_LANG_SHELL, 11 * 1000000LL, 0, 0, 0, "policy.timeout_us 11000000 exceeds the profile's maximum"},
        {CF_LANG_SHELL, 0, 256LL << 20, 0, 0, "policy.memory_bytes"},
        {CF_LANG_SHELL, 0, 0, 17, 0, "policy.max_processes 17"},
        {CF_LANG_SHELL, 0, 0, 0, 8192, "policy.max_stdout_bytes 8192"},
    };
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        mkreq(&req, over[i].lang, "x", over[i].timeout);
        req.policy.memory_bytes = over[i].memory;
        req.policy.max_processes = over[i].procs;
        req.policy.max_stdout_bytes = over[i].out;
        expect_refused(f, "cf.requests.acme", &req, over[i].needle);
        cf_request_clear(&req);
    }

    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.backend = strdup("sandbox");
    expect_refused(f, "cf.requests.acme", &req, "profile 'acme': backend 'sandbox' is not allowed");
    cf_request_clear(&req);
}

static void test_paths_under_roots(void **state)
{
    fixture *f = *state;
    tenant(f);
    char in_data[160], in_scratch[160], via_link[160], sibling[160], escape[160], prefix_trick[160];
    snprintf(in_data, sizeof(in_data), "%s/sub/file", f->data);
    snprintf(in_scratch, sizeof(in_scratch), "%s/out", f->scratch);
    snprintf(via_link, sizeof(via_link), "%s/sub", f->link);
    snprintf(sibling, sizeof(sibling), "%s/other", f->root);
    snprintf(escape, sizeof(escape), "%s/../../etc", f->data);
    snprintf(prefix_trick, sizeof(prefix_trick), "%s-evil/x", f->data);

    static const struct {
        int which; /* 0 in_data, 1 in_scratch, 2 via_link, 3 sibling, 4 escape, 5 prefix trick */
        bool rw, ok;
        const char *needle;
    } cases[] = {
        {0, false, true, NULL},
        {1, false, true, NULL}, /* a read-write root serves read-only binds too */
        {1, true, true, NULL},
        {0, true, false, "read-write path"},
        {2, false, false, "outside the allowed roots"}, /* the lexical path must lie under the canonical root */
        {3, false, false, "outside the allowed roots"},
        {4, false, false, "not an absolute, normalized path"},
        {5, false, false, "outside the allowed roots"},
    };
    const char *paths[] = {in_data, in_scratch, via_link, sibling, escape, prefix_trick};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_request req;
        mkreq(&req, CF_LANG_SHELL, "x", 0);
        req.policy.fs_mode = CF_FS_PATHS;
        if (cases[i].rw) {
            req.policy.fs_read_write = strv1(paths[cases[i].which]);
            req.policy.n_fs_read_write = 1;
        } else {
            req.policy.fs_read_only = strv1(paths[cases[i].which]);
            req.policy.n_fs_read_only = 1;
        }
        char reason[600];
        int rc = admit(f, "cf.requests.acme", &req, reason, sizeof(reason));
        if (cases[i].ok && rc != 0)
            fail_msg("case %zu (%s) refused: %s", i, paths[cases[i].which], reason);
        if (!cases[i].ok && (rc != -1 || !strstr(reason, cases[i].needle)))
            fail_msg("case %zu (%s): rc %d reason '%s', expected '%s'", i, paths[cases[i].which], rc, reason,
                     cases[i].needle);
        cf_request_clear(&req);
    }
}

static void test_env_reply_state(void **state)
{
    fixture *f = *state;
    tenant(f);
    cf_request req;
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.policy.env_allow_set = true;
    req.policy.env_allow = calloc(3, sizeof(char *));
    req.policy.env_allow[0] = strdup("TZ");
    req.policy.env_allow[1] = strdup("LANG");
    req.policy.n_env_allow = 2;
    expect_admitted(f, "cf.requests.acme", &req);
    req.policy.env_allow[2] = strdup("HOME");
    req.policy.n_env_allow = 3;
    expect_refused(f, "cf.requests.acme", &req, "env_allow: 'HOME' is not allowed");
    cf_request_clear(&req);

    static const struct {
        const char *topic;
        const char *needle; /* NULL: allowed */
    } replies[] = {
        {"acme.replies", NULL},
        {"acme.out.x", NULL},
        {"acme.out", "not allowed"},
        {"acme.repliesX", "not allowed"},
        {"cf.results.other", "in the namespace of the fleet's tenants' result topics ('cf.results.*')"},
        {"cf.requests.acme.cancel", "in the namespace of the fleet's request topics ('cf.requests.*'"},
        {"bad topic", "not a valid topic name"},
        {"", "not a valid topic name"}, /* empty is not absent (SPEC.md 3) */
    };
    for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
        mkreq(&req, CF_LANG_SHELL, "x", 0);
        req.reply_to = strdup(replies[i].topic);
        if (replies[i].needle)
            expect_refused(f, "cf.requests.acme", &req, replies[i].needle);
        else
            expect_admitted(f, "cf.requests.acme", &req);
        cf_request_clear(&req);
    }

    /* Even "any topic" never reaches the fleet's own topics. */
    fresh_settings(f);
    kv(f, "default.reply-to", "*");
    add_profile(f, "t2", "cf.requests.t2");
    cf_error err;
    assert_int_equal(load(f, &err), 0);
    const char *own[] = {"cf.requests", "cf.requests.t2", "cf.dlq", "cf.events", "cf.workers", "__consumer_offsets",
                         "__transaction_state"};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        mkreq(&req, CF_LANG_SHELL, "x", 0);
        req.reply_to = strdup(own[i]);
        expect_refused(f, "cf.requests", &req, "one of the fleet's own topics");
        cf_request_clear(&req);
    }
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.reply_to = strdup("anything.else");
    expect_admitted(f, "cf.requests", &req);
    cf_request_clear(&req);

    /* ...nor another profile's result topic. */
    fresh_settings(f);
    kv(f, "default.reply-to", "*");
    add_profile(f, "t2", "cf.requests.t2");
    kv(f, "t2.result-topic", "cf.results.t2");
    assert_int_equal(load(f, &err), 0);
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.reply_to = strdup("cf.results.t2");
    expect_refused(f, "cf.requests", &req, "is another profile's result topic");
    cf_request_clear(&req);
    /* ...also a tenant this worker does not serve (a fleet split over
     * worker groups): the fleet's result and request namespaces are the
     * tenants'. */
    const char *theirs[] = {"cf.results.t9", "cf.results.t9.sub", "cf.requests.t9", "cf.requests.cancel"};
    for (size_t i = 0; i < sizeof(theirs) / sizeof(theirs[0]); i++) {
        mkreq(&req, CF_LANG_SHELL, "x", 0);
        req.reply_to = strdup(theirs[i]);
        /* Said as what they are: the tenants' result namespace, or the
         * request topics' (a cancel topic is no profile's result topic). */
        expect_refused(f, "cf.requests", &req,
                       i < 2 ? "in the namespace of the fleet's tenants' result topics ('cf.results.*')"
                             : "in the namespace of the fleet's request topics ('cf.requests.*'");
        cf_request_clear(&req);
    }
    /* Its own result topic and unrelated names stay allowed. */
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.reply_to = strdup("cf.results");
    expect_admitted(f, "cf.requests", &req);
    cf_request_clear(&req);
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.reply_to = strdup("cf.resultsX");
    expect_admitted(f, "cf.requests", &req);
    cf_request_clear(&req);

    /* state-prefix none: no workspaces or threads at all. */
    fresh_settings(f);
    kv(f, "default.state-prefix", "none");
    assert_int_equal(load(f, &err), 0);
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.workspace = strdup("any");
    expect_refused(f, "cf.requests", &req, "workspaces and threads are not allowed");
    cf_request_clear(&req);

    /* state-prefix: one tenant cannot name another's workspace or thread */
    cf_kvlist_free(&f->kv);
    tenant(f);
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.workspace = strdup("acme.ws1");
    req.thread = strdup("acme.t1");
    expect_admitted(f, "cf.requests.acme", &req);
    free(req.thread);
    req.thread = strdup("globex.t1");
    expect_refused(f, "cf.requests.acme", &req, "thread 'globex.t1' does not start with 'acme.'");
    free(req.workspace);
    req.workspace = strdup("globex.ws");
    expect_refused(f, "cf.requests.acme", &req, "workspace 'globex.ws' does not start with 'acme.'");
    /* The prefix alone is no name (the tenant's own clients refuse it). */
    free(req.workspace);
    req.workspace = strdup("acme.");
    free(req.thread);
    req.thread = strdup("acme.t1");
    expect_refused(f, "cf.requests.acme", &req, "workspace 'acme.' does not start with 'acme.' followed by a name");
    cf_request_clear(&req);
}

/* Output topics (streaming): never a fleet topic, never another tenant's;
 * and no reply_to may name an output topic of the fleet. */
static void test_output_topics(void **state)
{
    fixture *f = *state;
    f->env.stream_suffix = ".output";
    kv(f, "default.backends", "process");
    kv(f, "default.reply-to", "*");
    kv(f, "t3.topic", "t3.requests");
    kv(f, "t3.result-topic", "t3.results"); /* outside the fleet's namespaces */
    kv(f, "t3.backends", "process");
    cf_error err;
    assert_int_equal(load(f, &err), 0);
    const cf_profile *def = cf_profile_set_for_topic(f->set, "cf.requests");
    const cf_profile *t3 = cf_profile_set_for_topic(f->set, "t3.requests");
    char reason[256];
    assert_true(cf_profile_output_topic_ok(def, f->set, "cf.results.output", reason, sizeof(reason)));
    assert_true(cf_profile_output_topic_ok(t3, f->set, "t3.results.output", reason, sizeof(reason)));
    assert_true(cf_profile_output_topic_ok(def, f->set, "mine.output", reason, sizeof(reason)));
    static const struct {
        const char *profile_topic, *topic;
    } refused[] = {
        {"cf.requests", "cf.dlq"},          {"cf.requests", "cf.requests"},       {"cf.requests", "cf.events"},
        {"cf.requests", "cf.workers"},      {"cf.requests", "__consumer_offsets"}, {"cf.requests", "t3.results"},
        {"cf.requests", "cf.results"},      {"t3.requests", "cf.results.output"}, {"t3.requests", "cf.requests.x"},
        {"cf.requests", "bad topic!"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        const cf_profile *p = cf_profile_set_for_topic(f->set, refused[i].profile_topic);
        if (cf_profile_output_topic_ok(p, f->set, refused[i].topic, reason, sizeof(reason)))
            fail_msg("output topic %s allowed for %s", refused[i].topic, refused[i].profile_topic);
        assert_non_null(strstr(reason, "stream: output topic"));
    }
    /* reply_to: t3's output topic (outside the namespaces) is refused by name. */
    cf_request req;
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.reply_to = strdup("t3.results.output");
    expect_refused(f, "cf.requests", &req, "ends in '.output': that names an output topic");
    cf_request_clear(&req);
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.reply_to = strdup("unknown.group.results.output"); /* a tenant of another worker group */
    expect_refused(f, "cf.requests", &req, "ends in '.output'");
    cf_request_clear(&req);
    mkreq(&req, CF_LANG_SHELL, "x", 0);
    req.reply_to = strdup("t3.results.outputs");
    expect_admitted(f, "cf.requests", &req);
    cf_request_clear(&req);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_default_profile_denies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_profile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paths_under_roots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_reply_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_topics, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
