/* The memory budget (issue 30 part 3), on the real broker: a worker with 10
 * slots and a 6 GiB budget gets 10 requests asking 4 GiB each.  Each must
 * reserve its limit before it starts, so no two run at once (4 + 4 > 6);
 * all are answered.  One asking more than the whole budget is rejected,
 * naming it, instead of waiting for ever.  Judged from the programs' own
 * log of when they ran, in order, never by a clock. */
#include "it_support.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cf_util.h"

#define SEC 1000000LL
#define GIB (1024LL * 1024 * 1024)

static void test_limits_never_add_up_past_the_budget(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "budget", 2);
    const char *extra[] = {"--slots=10", "--memory-budget=6GiB", "--max-memory=16GiB", NULL};
    it_worker w;
    it_worker_start(&w, &t, "budget-w1", extra);
    cf_dispatcher *d = it_dispatcher_new(&t);
    char log[128];
    snprintf(log, sizeof(log), "/tmp/cf-budget-%ld.log", (long)getpid());
    unlink(log);
    enum { N = 10 };
    char ids[N][64];
    for (int i = 0; i < N; i++) {
        cf_request req;
        char code[512];
        snprintf(code, sizeof(code), "echo start >> %s; sleep 0.3; echo end >> %s", log, log);
        it_request_init(&req, CF_LANG_SHELL, code);
        snprintf(ids[i], sizeof(ids[i]), "budget-%ld-%d", (long)getpid(), i);
        free(req.id);
        req.id = strdup(ids[i]);
        req.policy.memory_bytes = 4 * GIB;
        req.policy.timeout_us = 60 * SEC;
        cf_error err;
        if (cf_dispatcher_submit(d, &req, &err) < 0)
            fail_msg("submit: %s", err.msg);
        cf_request_clear(&req);
    }
    for (int i = 0; i < N; i++) {
        cf_result res;
        memset(&res, 0, sizeof(res));
        cf_error err;
        if (cf_dispatcher_wait(d, ids[i], 120 * SEC, &res, &err) < 0) {
            it_worker_dump_log(&w);
            fail_msg("%s: %s", ids[i], err.msg);
        }
        if (res.status != CF_STATUS_SUCCESS)
            fail_msg("%s: %s %s", ids[i], cf_status_name(res.status), res.reason ? res.reason : "");
        cf_result_clear(&res);
    }
    /* The programs' own record: never two between a start and its end. */
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[64];
    int running = 0, most = 0, starts = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "start", 5) == 0) {
            starts++;
            most = ++running > most ? running : most;
        } else if (strncmp(line, "end", 3) == 0) {
            running--;
        }
    }
    fclose(f);
    unlink(log);
    print_message("%d runs, at most %d at once (10 slots, 6 GiB budget, 4 GiB each)\n", starts, most);
    assert_int_equal(starts, N);
    assert_int_equal(most, 1);

    /* Larger than the whole budget: rejected at once, naming it. */
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "true");
    req.policy.memory_bytes = 8 * GIB;
    cf_result res;
    it_submit_wait(d, &req, 60 * SEC, &res);
    print_message("8 GiB: %s: %s\n", cf_status_name(res.status), res.reason ? res.reason : "");
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "memory budget"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    cf_dispatcher_destroy(d);
    it_worker_stop(&w, SIGTERM, 30000);
}

/* Whether a directory of that name is anywhere in the cgroup trees (a few
 * levels down; found is its path). */
static bool find_dir(const char *root, const char *name, int depth, char *found, size_t cap)
{
    DIR *d = depth < 7 ? opendir(root) : NULL;
    if (!d)
        return false;
    bool hit = false;
    struct dirent *de;
    while (!hit && (de = readdir(d))) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/%s", root, de->d_name);
        if (strcmp(de->d_name, name) == 0) {
            snprintf(found, cap, "%s", sub);
            hit = true;
        } else {
            hit = find_dir(sub, name, depth + 1, found, cap);
        }
    }
    closedir(d);
    return hit;
}

static bool cgroup_dir_exists(const char *name, char *found, size_t cap)
{
    return find_dir("/sys/fs/cgroup", name, 0, found, cap);
}

/* The output's last "n=<number>" line, -1 when none. */
static long last_count(const cf_result *res)
{
    long n = -1;
    char out[4096];
    size_t len = res->stdout_data.len < sizeof(out) - 1 ? res->stdout_data.len : sizeof(out) - 1;
    if (len)
        memcpy(out, res->stdout_data.data, len);
    out[len] = '\0';
    for (const char *p = strstr(out, "n="); p; p = strstr(p + 2, "n="))
        n = strtol(p + 2, NULL, 10);
    return n;
}

/* Everything a worker starts sits below one cgroup of its own, bounded by
 * children-memory and children-pids (issue 30 part 3): a hostile program
 * whose own limits allow more (768 MiB, 200 processes) is stopped at the
 * worker's bound (192 MiB, 48 processes), so that no mix of requests,
 * helpers and zygotes takes the host's memory or pids.  Then: a dead
 * worker's cgroup directory is swept by the next worker's start. */
static void test_children_are_bounded_together(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "children", 1);
    const char *extra[] = {"--backends=sandbox", "--slots=2", "--memory-budget=2GiB", "--max-memory=1GiB",
                           "--children-memory=192MiB", "--children-pids=48", NULL};
    it_worker w;
    it_worker_start(&w, &t, "children-w1", extra);
    cf_dispatcher *d = it_dispatcher_new(&t);

    /* Memory: 16 MiB at a time, each touched, up to 640 MiB. */
    cf_request req;
    it_request_init(&req, CF_LANG_PYTHON,
                    "import sys\nkeep = []\nfor i in range(1, 41):\n    keep.append(b'x' * (16 << 20))\n"
                    "    print('n=%d' % (i * 16), flush=True)\n");
    req.policy.memory_bytes = 768LL << 20;
    req.policy.timeout_us = 60 * SEC;
    cf_result res;
    it_submit_wait(d, &req, 120 * SEC, &res);
    long mib = last_count(&res);
    print_message("memory: %s after %ld MiB: %s\n", cf_status_name(res.status), mib, res.reason ? res.reason : "");
    assert_int_equal(res.status, CF_STATUS_INTERNAL_ERROR);
    assert_non_null(strstr(res.reason, "children-memory"));
    assert_true(mib >= 0 && mib < 192);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Processes: forks that wait, counted until one fails. */
    it_request_init(&req, CF_LANG_PYTHON,
                    "import os, time\nn = 0\nfor i in range(150):\n    try:\n        pid = os.fork()\n"
                    "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
                    "    n += 1\nprint('n=%d' % n, flush=True)\n");
    req.policy.max_processes = 200;
    req.policy.timeout_us = 60 * SEC;
    it_submit_wait(d, &req, 120 * SEC, &res);
    long forks = last_count(&res);
    print_message("pids: %s after %ld forks\n", cf_status_name(res.status), forks);
    assert_true(forks >= 1 && forks < 48);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* The worker says where and how much. */
    char said[128];
    snprintf(said, sizeof(said), "at most 192 MiB (children-memory) and 48 processes, in cfw-%ld", (long)w.pid);
    assert_true(it_worker_log_contains(&w, said));
    cf_dispatcher_destroy(d);

    /* A worker killed outright leaves its directory; the next start
     * removes it (and what would still run in it); a worker that stops
     * removes its own. */
    char dir[64];
    snprintf(dir, sizeof(dir), "cfw-%ld", (long)w.pid);
    it_worker_stop(&w, SIGKILL, 30000);
    char found[4096];
    assert_true(cgroup_dir_exists(dir, found, sizeof(found)));
    print_message("left by the killed worker: %s\n", found);
    it_worker_start(&w, &t, "children-w2", extra);
    assert_true(it_worker_wait_log(&w, "the executions, helpers and zygotes together", 60000));
    assert_false(cgroup_dir_exists(dir, found, sizeof(found)));
    assert_true(it_worker_log_contains(&w, "removed the cgroups of "));
    snprintf(dir, sizeof(dir), "cfw-%ld", (long)w.pid);
    assert_true(cgroup_dir_exists(dir, found, sizeof(found)));
    it_worker_stop(&w, SIGTERM, 30000);
    assert_false(cgroup_dir_exists(dir, found, sizeof(found)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_never_add_up_past_the_budget),
        cmocka_unit_test(test_children_are_bounded_together),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
