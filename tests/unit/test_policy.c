/* Registry, backend sets, selection and cf_policy_check. */
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
#include "cf_util.h"

static const uint32_t all_controls[] = {
    CF_CTL_TIMEOUT,          CF_CTL_CPU_TIME,        CF_CTL_MEMORY,          CF_CTL_MAX_PROCESSES,
    CF_CTL_STDOUT_CAP,       CF_CTL_STDERR_CAP,      CF_CTL_FILE_SIZE,       CF_CTL_NETWORK_DISABLED,
    CF_CTL_NETWORK_ENABLED,  CF_CTL_FS_NONE,         CF_CTL_FS_WORKSPACE_RO, CF_CTL_FS_WORKSPACE_RW,
    CF_CTL_FS_PATHS,         CF_CTL_ENV_ALLOWLIST,
};
#define N_CONTROLS (sizeof(all_controls) / sizeof(all_controls[0]))

/* Makes policy ask for exactly one control. */
static void ask_for(cf_policy *p, uint32_t bit)
{
    memset(p, 0, sizeof(*p));
    switch (bit) {
    case CF_CTL_TIMEOUT: p->timeout_us = 1000000; break;
    case CF_CTL_CPU_TIME: p->cpu_time_us = 1000000; break;
    case CF_CTL_MEMORY: p->memory_bytes = 1 << 26; break;
    case CF_CTL_MAX_PROCESSES: p->max_processes = 4; break;
    case CF_CTL_STDOUT_CAP: p->max_stdout_bytes = 100; break;
    case CF_CTL_STDERR_CAP: p->max_stderr_bytes = 100; break;
    case CF_CTL_FILE_SIZE: p->max_file_size_bytes = 100; break;
    case CF_CTL_NETWORK_DISABLED: p->network = CF_NET_DISABLED; break;
    case CF_CTL_NETWORK_ENABLED: p->network = CF_NET_ENABLED; break;
    case CF_CTL_FS_NONE: p->fs_mode = CF_FS_NONE; break;
    case CF_CTL_FS_WORKSPACE_RO: p->fs_mode = CF_FS_WORKSPACE_RO; break;
    case CF_CTL_FS_WORKSPACE_RW: p->fs_mode = CF_FS_WORKSPACE_RW; break;
    case CF_CTL_FS_PATHS: p->fs_mode = CF_FS_PATHS; break;
    case CF_CTL_ENV_ALLOWLIST: p->env_allow_set = true; break; /* an empty allowlist still asks */
    default: fail();
    }
}

static void test_control_names(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CONTROLS; i++) {
        const char *n = cf_control_name(all_controls[i]);
        assert_string_not_equal(n, "unknown");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(n, cf_control_name(all_controls[j]));
    }
    assert_string_equal(cf_control_name(CF_CTL_NETWORK_DISABLED), "network=disabled");
    assert_string_equal(cf_control_name(CF_CTL_MEMORY), "memory");
    assert_string_equal(cf_control_name(1u << 30), "unknown");
}

static void test_each_control(void **state)
{
    (void)state;
    cf_request req;
    memset(&req, 0, sizeof(req));
    char reason[256];
    for (size_t i = 0; i < N_CONTROLS; i++) {
        uint32_t bit = all_controls[i];
        ask_for(&req.policy, bit);
        cf_backend_caps with = {.isolation = "sandbox", .controls = bit};
        cf_backend_caps without = {.isolation = "sandbox", .controls = ~bit};
        reason[0] = '\0';
        assert_int_equal(cf_policy_check(&with, "x", &req, reason, sizeof(reason)), 0);
        assert_int_equal(cf_policy_check(&without, "x", &req, reason, sizeof(reason)), -1);
        assert_non_null(strstr(reason, cf_control_name(bit)));
        assert_non_null(strstr(reason, "backend 'x' cannot enforce"));
    }
    /* Nothing asked for: anything goes, even a backend that enforces nothing. */
    memset(&req.policy, 0, sizeof(req.policy));
    cf_backend_caps none = {.isolation = "in_process", .controls = 0};
    assert_int_equal(cf_policy_check(&none, "x", &req, reason, sizeof(reason)), 0);
    /* UNSPECIFIED network / fs ask for nothing either. */
    req.policy.network = CF_NET_UNSPECIFIED;
    req.policy.fs_mode = CF_FS_UNSPECIFIED;
    assert_int_equal(cf_policy_check(&none, "x", &req, reason, sizeof(reason)), 0);
}

static void test_several_controls(void **state)
{
    (void)state;
    cf_request req;
    memset(&req, 0, sizeof(req));
    req.policy.timeout_us = 1000;
    req.policy.memory_bytes = 1000;
    req.policy.network = CF_NET_DISABLED;
    char reason[256];
    cf_backend_caps caps = {.isolation = "host_local", .controls = CF_CTL_TIMEOUT | CF_CTL_MEMORY};
    assert_int_equal(cf_policy_check(&caps, "process", &req, reason, sizeof(reason)), -1);
    assert_string_equal(reason, "backend 'process' cannot enforce network=disabled (no network isolation on host_local)");
    caps.controls |= CF_CTL_NETWORK_DISABLED;
    assert_int_equal(cf_policy_check(&caps, "process", &req, reason, sizeof(reason)), 0);
    req.policy.max_file_size_bytes = 5;
    assert_int_equal(cf_policy_check(&caps, "process", &req, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "max_file_size"));
}

typedef struct fixture {
    char root[64];
    cf_backend_config cfg;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    cf_strlcpy(f->root, "/tmp/cf-poltest-XXXXXX", sizeof(f->root));
    if (!mkdtemp(f->root))
        return -1;
    f->cfg.work_root = f->root;
    f->cfg.python_path = "/usr/bin/python3";
    f->cfg.node_path = "/nonexistent/node"; /* configured but missing: disabled, said so */
    f->cfg.shell_path = "/bin/sh";
    f->cfg.slots = 1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    int rc = rmdir(f->root);
    free(f);
    return rc;
}

static void test_set_and_select(void **state)
{
    fixture *f = *state;
    cf_backend_set *set = NULL;
    cf_error err;
    assert_non_null(cf_backend_find("process"));
    assert_null(cf_backend_find("nope"));
    const cf_backend_ops *const *reg = cf_backend_registry();
    size_t n = 0;
    while (reg[n])
        n++;
    assert_true(n >= 1);

    assert_int_equal(cf_backend_set_new("process,process", &f->cfg, &set, &err), -1);
    assert_null(set);
    assert_non_null(strstr(err.msg, "twice"));
    assert_int_equal(cf_backend_set_new("nope", &f->cfg, &set, &err), -1);
    assert_non_null(strstr(err.msg, "nope"));
    assert_int_equal(cf_backend_set_new("process,", &f->cfg, &set, &err), -1);
    assert_int_equal(cf_backend_set_new("", &f->cfg, &set, &err), -1);

    assert_int_equal(cf_backend_set_new(" process ", &f->cfg, &set, &err), 0);
    assert_int_equal(cf_backend_set_count(set), 1);
    const cf_backend *b = cf_backend_set_get(set, 0);
    assert_non_null(b);
    assert_null(cf_backend_set_get(set, 1));
    assert_false(b->caps.languages & (1u << CF_LANG_JAVASCRIPT));
    assert_non_null(strstr(b->caps.notes, "javascript disabled"));

    cf_request req;
    memset(&req, 0, sizeof(req));
    char reason[256];
    req.language = CF_LANG_PYTHON;
    assert_ptr_equal(cf_backend_set_select(set, &req, reason, sizeof(reason)), b); /* default */
    req.backend = "process";
    assert_ptr_equal(cf_backend_set_select(set, &req, reason, sizeof(reason)), b);
    req.backend = "sandbox-x";
    assert_null(cf_backend_set_select(set, &req, reason, sizeof(reason)));
    assert_non_null(strstr(reason, "sandbox-x"));
    req.backend = NULL;
    req.language = CF_LANG_JAVASCRIPT;
    assert_null(cf_backend_set_select(set, &req, reason, sizeof(reason)));
    assert_non_null(strstr(reason, "javascript"));
    assert_non_null(strstr(reason, "process"));
    req.language = CF_LANG_WASM;
    assert_null(cf_backend_set_select(set, &req, reason, sizeof(reason)));

    /* The real process backend refuses what it cannot enforce. */
    req.language = CF_LANG_PYTHON;
    req.policy.network = CF_NET_DISABLED;
    assert_int_equal(cf_policy_check(&b->caps, b->ops->name, &req, reason, sizeof(reason)), -1);
    assert_string_equal(reason, "backend 'process' cannot enforce network=disabled (no network isolation on host_local)");
    req.policy.network = CF_NET_UNSPECIFIED;
    req.policy.fs_mode = CF_FS_NONE;
    assert_int_equal(cf_policy_check(&b->caps, b->ops->name, &req, reason, sizeof(reason)), -1);
    assert_non_null(strstr(reason, "fs_mode=none"));
    req.policy.fs_mode = CF_FS_UNSPECIFIED;
    req.policy.timeout_us = 1000000;
    req.policy.memory_bytes = 1 << 28;
    req.policy.cpu_time_us = 1000000;
    req.policy.env_allow_set = true;
    assert_int_equal(cf_policy_check(&b->caps, b->ops->name, &req, reason, sizeof(reason)), 0);
    if (!(b->caps.controls & CF_CTL_MAX_PROCESSES)) {
        req.policy.max_processes = 3;
        assert_int_equal(cf_policy_check(&b->caps, b->ops->name, &req, reason, sizeof(reason)), -1);
        assert_non_null(strstr(reason, "max_processes"));
    }

    char desc[1024];
    cf_backend_set_describe(set, desc, sizeof(desc));
    assert_non_null(strstr(desc, "process (default): isolation=host_local languages=command,shell,python "));
    assert_non_null(strstr(desc, "env_allow"));
    assert_null(strstr(desc, "network"));
    char tiny[8];
    cf_backend_set_describe(set, tiny, sizeof(tiny)); /* truncates safely */
    assert_int_equal(strlen(tiny), 7);
    cf_backend_set_destroy(set);
    cf_backend_set_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control_names),
        cmocka_unit_test(test_each_control),
        cmocka_unit_test(test_several_controls),
        cmocka_unit_test_setup_teardown(test_set_and_select, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
