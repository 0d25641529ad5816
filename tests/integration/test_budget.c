/* The memory budget (issue 30 part 3), on the real broker: a worker with 10
 * slots and a 6 GiB budget gets 10 requests asking 4 GiB each.  Each must
 * reserve its limit before it starts, so no two run at once (4 + 4 > 6);
 * all are answered.  One asking more than the whole budget is rejected,
 * naming it, instead of waiting for ever.  Judged from the programs' own
 * log of when they ran, in order, never by a clock. */
#include "it_support.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* The worker's own directory's name, from its log ("... in cfw-...").
 * Read right after start it may not be there yet: waited on. */
static bool own_dir_name(const it_worker *w, char *out, size_t cap)
{
    if (!it_worker_wait_log(w, "the executions, helpers and zygotes together", 60000))
        return false;
    FILE *f = fopen(w->log_path, "r");
    if (!f)
        return false;
    char line[4096];
    bool hit = false;
    while (!hit && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, " in cfw-");
        if (p && strstr(line, "the executions, helpers and zygotes together")) {
            p += 4;
            size_t n = strcspn(p, " \n");
            hit = n > 0 && n < cap;
            if (hit)
                snprintf(out, cap, "%.*s", (int)n, p);
        }
    }
    fclose(f);
    return hit;
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

/* One gauge of the worker's /metrics (-1 when unreadable), and
 * codefleet_pids_budget in *budget when asked. */
static double metrics_pair(int port, const char *series, double *budget)
{
    char *text = NULL;
    double v = -1;
    if (it_http("GET", port, "/metrics", &text) == 200) {
        v = it_metric_sample(text, series);
        if (budget)
            *budget = it_metric_sample(text, "codefleet_pids_budget");
    }
    free(text);
    return v;
}

/* Its directory in the pids hierarchy (v1) or the unified tree (v2). */
static bool own_pids_dir(const it_worker *w, char *out, size_t cap)
{
    char name[128];
    if (!own_dir_name(w, name, sizeof(name)))
        return false;
    return find_dir("/sys/fs/cgroup/pids", name, 0, out, cap) || find_dir("/sys/fs/cgroup", name, 0, out, cap);
}

/* Everything a worker starts sits below one cgroup of its own, bounded by
 * children-memory and children-pids (issue 30 part 3): a hostile program
 * whose own limit allows more (768 MiB) is stopped at the worker's bound
 * (192 MiB), so that no mix of requests, helpers and zygotes takes the
 * host's memory; the directory's pids.max is children-pids (48), of which
 * the executions reserve their pids bounds against 40 (an eighth, at least
 * 8, is kept for helpers and zygotes): one
 * asking more is rejected, one that does not fit beside a running one
 * waits for it.  Then: a dead worker's cgroup directory is swept by the
 * next worker's start. */
static void test_children_are_bounded_together(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    it_topics t;
    it_topics_create(&t, "children", 1);
    const char *extra[] = {"--backends=sandbox", "--slots=2", "--memory-budget=2GiB", "--max-memory=1GiB",
                           "--children-memory=192MiB", "--children-pids=48", "--sandbox-tmp=256MiB",
                           /* a request's default processes (+1 for its init) within the 40 of the
                            * 48 that executions may reserve */
                           "--sandbox-pids=16", "--metrics-listen=127.0.0.1:0", NULL};
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

    /* Its own limit, reached through /dev/shm pages (no process's RSS):
     * the program's own doing, answered memory_exceeded. */
    it_request_init(&req, CF_LANG_PYTHON,
                    "import os\nfd = os.open('/dev/shm/fill', os.O_CREAT | os.O_WRONLY)\nchunk = b'x' * (1 << 20)\n"
                    "for i in range(1, 121):\n    os.write(fd, chunk)\n    print('n=%d' % i, flush=True)\n");
    req.policy.memory_bytes = 64LL << 20;
    req.policy.timeout_us = 60 * SEC;
    it_submit_wait(d, &req, 120 * SEC, &res);
    print_message("own limit through /dev/shm: %s after %ld MiB: %s\n", cf_status_name(res.status), last_count(&res),
                  res.reason ? res.reason : "");
    assert_int_equal(res.status, CF_STATUS_MEMORY_EXCEEDED);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Processes are reserved like memory: children-pids less an eighth (at
     * least 8): 40 of 48 for the executions.  One asking for more could never
     * start: refused at once, naming the bound. */
    it_request_init(&req, CF_LANG_SHELL, "echo never");
    req.policy.max_processes = 200;
    it_submit_wait(d, &req, 120 * SEC, &res);
    print_message("asking 200 processes: %s: %s\n", cf_status_name(res.status), res.reason ? res.reason : "");
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "children-pids"));
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* Forks that wait, counted until one fails: the program's own limit. */
    it_request_init(&req, CF_LANG_PYTHON,
                    "import os, time\nn = 0\nfor i in range(150):\n    try:\n        pid = os.fork()\n"
                    "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
                    "    n += 1\nprint('n=%d' % n, flush=True)\n");
    req.policy.max_processes = 30;
    req.policy.timeout_us = 60 * SEC;
    it_submit_wait(d, &req, 120 * SEC, &res);
    long forks = last_count(&res);
    print_message("pids: %s after %ld forks\n", cf_status_name(res.status), forks);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(forks >= 1 && forks < 30);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* The kernel's bound on the worker's directory. */
    char own[4096], pids_file[4200];
    assert_true(own_pids_dir(&w, own, sizeof(own)));
    snprintf(pids_file, sizeof(pids_file), "%s/pids.max", own);
    FILE *pf = fopen(pids_file, "r");
    long pmax = 0;
    assert_non_null(pf);
    assert_int_equal(fscanf(pf, "%ld", &pmax), 1);
    fclose(pf);
    assert_int_equal(pmax, 48);

    /* A request holding 30 of the 40 (29 + its init): another asking 15
     * (16 with its init) does not fit beside it, so it waits for the
     * holder to end, then runs and succeeds (before, it started at once
     * and failed for want of processes). */
    cf_request hold;
    it_request_init(&hold, CF_LANG_PYTHON,
                    "import os, time\nfor i in range(150):\n    try:\n        pid = os.fork()\n"
                    "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(120)\n        os._exit(0)\n"
                    "time.sleep(120)\n");
    hold.policy.max_processes = 29;
    hold.policy.timeout_us = 150 * SEC;
    cf_error err;
    if (cf_dispatcher_submit(d, &hold, &err) < 0)
        fail_msg("submit: %s", err.msg);
    /* Running: its 30 reserved (30, not the 31 the fork test held, so it
     * is the holder's). */
    int port = it_worker_metrics_port(&w);
    double reserved = -1, budget = -1;
    for (int64_t until = cf_mono_us() + 120 * SEC; reserved != 30 && cf_mono_us() < until; usleep(100 * 1000))
        reserved = metrics_pair(port, "codefleet_pids_reserved", &budget);
    assert_true(reserved == 30 && budget == 40);
    it_request_init(&req, CF_LANG_PYTHON,
                    "import os, time\nkids = []\nfor i in range(12):\n    pid = os.fork()\n    if pid == 0:\n"
                    "        time.sleep(1)\n        os._exit(0)\n    kids.append(pid)\n"
                    "for k in kids: os.waitpid(k, 0)\nprint('n=%d' % len(kids))");
    req.policy.max_processes = 15;
    req.policy.timeout_us = 60 * SEC;
    if (cf_dispatcher_submit(d, &req, &err) < 0)
        fail_msg("submit: %s", err.msg);
    /* Taken by the worker and waiting for processes (not a slot: one of
     * the two is free), while the holder's 30 stay reserved. */
    double held = -1;
    for (int64_t until = cf_mono_us() + 60 * SEC; held != 1 && cf_mono_us() < until; usleep(100 * 1000))
        held = metrics_pair(port, "codefleet_requests_held", NULL);
    reserved = metrics_pair(port, "codefleet_pids_reserved", &budget);
    print_message("waiting for processes: %.0f held; reserved %.0f of %.0f\n", held, reserved, budget);
    assert_true(held == 1);
    assert_true(reserved == 30);
    int64_t cancelled_at = cf_now_us();
    assert_int_equal(cf_dispatcher_cancel(d, hold.id, "test over", 60 * SEC, &err), 0);
    assert_int_equal(cf_dispatcher_wait(d, hold.id, 120 * SEC, &res, &err), 0);
    cf_result_clear(&res);
    cf_request_clear(&hold);
    assert_int_equal(cf_dispatcher_wait(d, req.id, 120 * SEC, &res, &err), 0);
    int64_t started = res.finished_us - res.wall_time_us;
    print_message("beside the holder: %s (%s), started %.3f s after the holder's cancel\n", cf_status_name(res.status),
                  res.reason ? res.reason : "", (double)(started - cancelled_at) / SEC);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_int_equal(last_count(&res), 12);
    assert_true(started >= cancelled_at);
    cf_result_clear(&res);
    cf_request_clear(&req);

    /* The worker says where and how much. */
    assert_true(it_worker_log_contains(&w, "at most 192 MiB (children-memory) and 48 processes, in cfw-"));
    cf_dispatcher_destroy(d);

    /* A worker killed outright leaves its directory; the next start
     * removes it (and what would still run in it); a worker that stops
     * removes its own. */
    char dir[128], found[4096];
    assert_true(own_dir_name(&w, dir, sizeof(dir)));
    it_worker_stop(&w, SIGKILL, 30000);
    assert_true(cgroup_dir_exists(dir, found, sizeof(found)));
    print_message("left by the killed worker: %s\n", found);
    /* Beside it: another pid namespace's (never ours to judge), a dead
     * pid's, and a live pid's with another start time (pid reused). */
    char parent[4096], other[4300], dead[4300], reused[4300];
    snprintf(parent, sizeof(parent), "%s", found);
    *strrchr(parent, '/') = '\0';
    unsigned long long ns = 0, a = 0, b = 0;
    assert_int_equal(sscanf(dir, "cfw-%llu-%llu-%llu", &ns, &a, &b), 3);
    snprintf(other, sizeof(other), "%s/cfw-%llu-1-1", parent, ns + 1);
    snprintf(dead, sizeof(dead), "%s/cfw-%llu-%d-1", parent, ns, 4194304 + 1);
    snprintf(reused, sizeof(reused), "%s/cfw-%llu-%ld-1", parent, ns, (long)getpid());
    rmdir(other); /* a failed run's */
    rmdir(dead);
    rmdir(reused);
    assert_int_equal(mkdir(other, 0755), 0);
    assert_int_equal(mkdir(dead, 0755), 0);
    assert_int_equal(mkdir(reused, 0755), 0);
    it_worker_start(&w, &t, "children-w2", extra);
    assert_true(it_worker_wait_log(&w, "the executions, helpers and zygotes together", 60000));
    assert_false(cgroup_dir_exists(dir, found, sizeof(found)));
    struct stat st;
    bool other_kept = stat(other, &st) == 0, dead_gone = stat(dead, &st) != 0, reused_gone = stat(reused, &st) != 0;
    rmdir(other);
    rmdir(dead);
    rmdir(reused);
    assert_true(other_kept);
    assert_true(dead_gone);
    assert_true(reused_gone);
    assert_true(it_worker_log_contains(&w, "cgroup director"));
    assert_true(own_dir_name(&w, dir, sizeof(dir)));
    assert_true(cgroup_dir_exists(dir, found, sizeof(found)));
    it_worker_stop(&w, SIGTERM, 30000);
    assert_false(cgroup_dir_exists(dir, found, sizeof(found)));
}

/* Two workers on one host never share run uids: the second one whose
 * range overlaps the first's refuses to start, naming run-uid-base; once
 * the first is gone the range is free.  (Sharing, the process backend's
 * clean-up of one worker SIGKILLed the other's program in mid-run.) */
static void test_workers_never_share_run_uids(void **state)
{
    (void)state;
    IT_REQUIRE_BROKER();
    if (geteuid() != 0)
        skip(); /* only root switches uids, and so claims them */
    it_topics t;
    it_topics_create(&t, "runuids", 1);
    /* A base of this test's own: the first worker 2 slots x 4 blocks
     * (8 uids), the second one 4 above, overlapping. */
    const char *env = getenv("CODEFLEET_WORKER_RUN_UID_BASE");
    long long base = (env && atoll(env) > 0 ? atoll(env) : 100000) + 500;
    char a1[64], a2[64];
    snprintf(a1, sizeof(a1), "--run-uid-base=%lld", base);
    snprintf(a2, sizeof(a2), "--run-uid-base=%lld", base + 4);
    const char *e1[] = {"--backends=process", "--slots=2", a1, NULL};
    const char *e2[] = {"--backends=process", "--slots=2", a2, NULL};
    it_worker w1, w2;
    it_worker_start(&w1, &t, "runuids-w1", e1);
    if (!it_worker_wait_log(&w1, "reading cancels from", 60000)) {
        it_worker_dump_log(&w1);
        fail_msg("the first worker did not start");
    }
    assert_true(it_worker_log_contains(&w1, "claimed on this host"));
    it_worker_start(&w2, &t, "runuids-w2", e2);
    /* It waits a few seconds for the holder to go, then refuses. */
    int st = -1;
    for (int waited = 0; waited < 60000 && st < 0; waited += 50) {
        int s2;
        if (waitpid(w2.pid, &s2, WNOHANG) == w2.pid) {
            st = s2;
            w2.pid = 0;
        } else {
            usleep(50 * 1000);
        }
    }
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) == 0 ||
        !it_worker_log_contains(&w2, "overlap another worker's on this host") ||
        !it_worker_log_contains(&w2, "run-uid-base")) {
        it_worker_dump_log(&w2);
        fail_msg("the second worker, on the first one's run uids, did not refuse to start (status %d)", st);
    }
    /* The first one gone (SIGKILL: the kernel drops its claim), the same
     * range is free for the next. */
    it_worker_stop(&w1, SIGKILL, 5000);
    it_worker_start(&w2, &t, "runuids-w2b", e2);
    if (!it_worker_wait_log(&w2, "reading cancels from", 60000)) {
        it_worker_dump_log(&w2);
        fail_msg("the range was not free after the first worker died");
    }
    it_worker_stop(&w2, SIGTERM, 30000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_never_add_up_past_the_budget),
        cmocka_unit_test(test_children_are_bounded_together),
        cmocka_unit_test(test_workers_never_share_run_uids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
