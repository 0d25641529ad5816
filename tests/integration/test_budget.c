/* The memory budget (issue 30 part 3), on the real broker: a worker with 10
 * slots and a 6 GiB budget gets 10 requests asking 4 GiB each.  Each must
 * reserve its limit before it starts, so no two run at once (4 + 4 > 6);
 * all are answered.  One asking more than the whole budget is rejected,
 * naming it, instead of waiting for ever.  Judged from the programs' own
 * log of when they ran, in order, never by a clock. */
#include "it_support.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_never_add_up_past_the_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
