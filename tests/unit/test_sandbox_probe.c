/* Unit tests for sandbox_probe: on this machine (root, kernel 6.x, cgroup
 * v1) the probe must find user namespaces, seccomp and the memory/pids
 * controllers; a broken cgroup location is reported, not fatal. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "support/cgroup_host.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cf_sandbox_probe.h"

static void rm_parent(const char *rel)
{
    cgh_remove(rel);
}

static void test_probe_this_host(void **state)
{
    if (geteuid() != 0)
        skip();
    char rel[64];
    snprintf(rel, sizeof(rel), "/cf-probe-test-%d", (int)getpid());
    cf_cgroup_env_opts o = {.parent = rel};
    cf_sandbox_probe p;
    cf_error err;
    assert_int_equal(cf_sandbox_probe_run(&o, &p, &err), 0);
    rm_parent(rel);

    char desc[1024];
    cf_sandbox_probe_describe(&p, desc, sizeof(desc));
    fprintf(stderr, "%s", desc);
    assert_true(p.userns);
    assert_true(p.pidns);
    assert_true(p.mountns);
    assert_true(p.netns);
    assert_true(p.seccomp);
    assert_true(p.seccomp_kill_process);
    assert_true(p.pidfd);
    assert_string_equal(p.cgroup_note, "");
    assert_true(p.cgroup_version == 1 || p.cgroup_version == 2);
    assert_true(p.cg_memory);
    assert_true(p.cg_pids);
    assert_true(cf_sandbox_probe_usable(&p));
    assert_non_null(strstr(desc, "namespaces: user yes"));
    assert_non_null(strstr(desc, "sandbox backend: usable"));
    /* The probe cgroup itself is gone. */
    char probe_dir[512];
    snprintf(probe_dir, sizeof(probe_dir), "%s/probe-%d", p.cgroup_parent, (int)getpid());
    assert_int_not_equal(access(probe_dir, F_OK), 0);
}

static void test_probe_reports_broken_cgroups(void **state)
{
    cf_cgroup_env_opts o = {.mount_dir = "/nonexistent-cgroup-mount"};
    cf_sandbox_probe p;
    cf_error err;
    assert_int_equal(cf_sandbox_probe_run(&o, &p, &err), 0);
    assert_int_equal(p.cgroup_version, 0);
    assert_false(p.cg_memory);
    assert_true(strlen(p.cgroup_note) > 0);
    assert_false(cf_sandbox_probe_usable(&p));
    char desc[1024];
    cf_sandbox_probe_describe(&p, desc, sizeof(desc));
    assert_non_null(strstr(desc, "cgroups: unusable"));
    assert_non_null(strstr(desc, "sandbox backend: NOT usable"));
    /* Truncation keeps a terminated string. */
    char tiny[8];
    cf_sandbox_probe_describe(&p, tiny, sizeof(tiny));
    assert_int_equal(strlen(tiny), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_this_host),
        cmocka_unit_test(test_probe_reports_broken_cgroups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
