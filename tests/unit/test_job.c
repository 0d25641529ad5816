/* The job lifecycle (worker/job.c, drawn in worker/job_int.h): every
 * legal and every illegal transition, the names, the terminal states, and
 * what the setter does with them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "worker_int.h"

/* The diagram of job_int.h, written out again here on its own: the table
 * in job.c must say the same. */
static bool expected_legal(job_state from, job_state to)
{
    switch (from) {
    case JOB_TAKEN:
        return to == JOB_QUEUED || to == JOB_PRODUCING || to == JOB_DROPPED;
    case JOB_QUEUED:
        return to == JOB_RUNNING || to == JOB_PRODUCING || to == JOB_DROPPED;
    case JOB_RUNNING:
        return to == JOB_PRODUCING || to == JOB_DROPPED;
    case JOB_PRODUCING:
        return to == JOB_ANSWERED || to == JOB_DEAD_LETTERED || to == JOB_RETRY_WAIT || to == JOB_BLOCKING ||
               to == JOB_DROPPED;
    case JOB_RETRY_WAIT:
        return to == JOB_PRODUCING || to == JOB_DROPPED;
    case JOB_BLOCKING:
        return to == JOB_BLOCKING || to == JOB_DEAD_LETTERED || to == JOB_DROPPED;
    default:
        return false; /* terminal */
    }
}

static void every_transition_is_as_drawn(void **state)
{
    (void)state;
    int legal = 0;
    for (int from = 0; from < JOB__STATES; from++)
        for (int to = 0; to < JOB__STATES; to++) {
            bool want = expected_legal((job_state)from, (job_state)to);
            if (job_transition_legal((job_state)from, (job_state)to) != want)
                fail_msg("%s -> %s: table says %s", job_state_name((job_state)from), job_state_name((job_state)to),
                         want ? "illegal, drawn legal" : "legal, drawn illegal");
            legal += want;
        }
    assert_int_equal(legal, 18);
    /* Out of range is never legal. */
    assert_false(job_transition_legal(JOB__STATES, JOB_DROPPED));
    assert_false(job_transition_legal(JOB_TAKEN, JOB__STATES));
    assert_false(job_transition_legal((job_state)-1, JOB_QUEUED));
}

static void names_and_terminals(void **state)
{
    (void)state;
    for (int s = 0; s < JOB__STATES; s++) {
        const char *n = job_state_name((job_state)s);
        assert_non_null(n);
        assert_string_not_equal(n, "?");
        for (int t = 0; t < s; t++)
            assert_string_not_equal(n, job_state_name((job_state)t));
        bool terminal = job_state_terminal((job_state)s);
        bool exits = false;
        for (int t = 0; t < JOB__STATES; t++)
            exits = exits || job_transition_legal((job_state)s, (job_state)t);
        assert_true(terminal == !exits); /* terminal exactly when there is no way out */
    }
    assert_string_equal(job_state_name(JOB__STATES), "?");
    assert_true(job_state_terminal(JOB_ANSWERED) && job_state_terminal(JOB_DEAD_LETTERED) &&
                job_state_terminal(JOB_DROPPED));
}

/* Every state is reachable from taken, and every state reaches an end:
 * no job can be stranded. */
static void every_state_reachable_and_every_state_ends(void **state)
{
    (void)state;
    bool reach[JOB__STATES] = {[JOB_TAKEN] = true};
    for (int round = 0; round < JOB__STATES; round++)
        for (int f = 0; f < JOB__STATES; f++)
            for (int t = 0; reach[f] && t < JOB__STATES; t++)
                if (job_transition_legal((job_state)f, (job_state)t))
                    reach[t] = true;
    for (int s = 0; s < JOB__STATES; s++)
        assert_true(reach[s]);
    for (int s = 0; s < JOB__STATES; s++) {
        bool ends[JOB__STATES] = {0};
        ends[s] = true;
        bool found = job_state_terminal((job_state)s);
        for (int round = 0; round < JOB__STATES && !found; round++)
            for (int f = 0; f < JOB__STATES; f++)
                for (int t = 0; ends[f] && t < JOB__STATES; t++)
                    if (job_transition_legal((job_state)f, (job_state)t)) {
                        ends[t] = true;
                        found = found || job_state_terminal((job_state)t);
                    }
        assert_true(found);
    }
}

/* A worker with one request topic and no partitions: enough for the
 * setter's bookkeeping. */
typedef struct fake {
    struct cf_worker w;
    topic_state topic;
    cf_worker_jobs ledger;
} fake;

static fake *fake_new(void)
{
    fake *f = calloc(1, sizeof(*f));
    f->topic.name = "req";
    f->w.topics = &f->topic;
    f->w.ntopics = 1;
    cf_worker_jobs_watch(&f->w, &f->ledger);
    return f;
}

static job *taken(fake *f)
{
    job *j = job_new(&f->w);
    assert_non_null(j);
    assert_int_equal(j->state, JOB_TAKEN);
    job_taken(&f->w, j);
    return j;
}

/* The setter refuses what the table refuses, moves the blocking count, and
 * ends a job exactly once at its terminal state. */
static void setter_follows_the_table(void **state)
{
    (void)state;
    fake *f = fake_new();
    job *j = taken(f);
    assert_int_equal(f->w.inflight, 1);
    assert_false(job_set_state(&f->w, j, JOB_RUNNING)); /* not queued yet */
    assert_int_equal(j->state, JOB_TAKEN);
    assert_true(job_set_state(&f->w, j, JOB_QUEUED));
    assert_true(job_set_state(&f->w, j, JOB_RUNNING));
    assert_false(job_set_state(&f->w, j, JOB_QUEUED));
    assert_true(job_set_state(&f->w, j, JOB_PRODUCING));
    j->out.kind = JOB_OUT_DEAD_LETTER;
    assert_true(job_set_state(&f->w, j, JOB_BLOCKING));
    assert_int_equal(f->w.intake_blocked, 1);
    assert_true(job_set_state(&f->w, j, JOB_BLOCKING)); /* produced again */
    assert_int_equal(f->w.intake_blocked, 1);
    assert_false(job_set_state(&f->w, j, JOB_RETRY_WAIT));
    assert_true(job_set_state(&f->w, j, JOB_DEAD_LETTERED)); /* ended, freed */
    assert_int_equal(f->w.intake_blocked, 0);
    assert_int_equal(f->w.inflight, 0);

    job *k = taken(f);
    assert_true(job_set_state(&f->w, k, JOB_PRODUCING));
    assert_true(job_set_state(&f->w, k, JOB_RETRY_WAIT));
    assert_true(job_set_state(&f->w, k, JOB_PRODUCING));
    assert_true(job_set_state(&f->w, k, JOB_ANSWERED));

    job *d = taken(f);
    assert_true(job_set_state(&f->w, d, JOB_DROPPED));

    assert_int_equal(atomic_load(&f->ledger.taken), 3);
    assert_int_equal(atomic_load(&f->ledger.dead_lettered), 1);
    assert_int_equal(atomic_load(&f->ledger.answered), 1);
    assert_int_equal(atomic_load(&f->ledger.dropped), 1);
    assert_int_equal(atomic_load(&f->ledger.live), 0);
    cf_worker_jobs now;
    cf_worker_jobs_get(&f->w, &now);
    assert_int_equal(atomic_load(&now.taken), 3);
    free(f);
}

/* The sender's cancel decides the answer whenever it comes; the worker's
 * stop never overrides it, nor a first stop of the worker's own. */
static void stop_requests(void **state)
{
    (void)state;
    job j;
    memset(&j, 0, sizeof(j));
    assert_int_equal(job_stop_of(&j), JOB_STOP_NONE);
    job_request_stop(&j, JOB_STOP_WORKER, NULL);
    assert_int_equal(job_stop_of(&j), JOB_STOP_WORKER);
    job_request_stop(&j, JOB_STOP_SENDER, "not needed");
    assert_int_equal(job_stop_of(&j), JOB_STOP_SENDER);
    assert_string_equal(j.stop_reason, "not needed");
    job_request_stop(&j, JOB_STOP_WORKER, NULL);
    job_request_stop(&j, JOB_STOP_SENDER, "second");
    assert_int_equal(job_stop_of(&j), JOB_STOP_SENDER);
    assert_string_equal(j.stop_reason, "not needed");
    assert_int_not_equal(j.stop, 0); /* what the backend reads: nonzero = stop */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_transition_is_as_drawn),
        cmocka_unit_test(names_and_terminals),
        cmocka_unit_test(every_state_reachable_and_every_state_ends),
        cmocka_unit_test(setter_follows_the_table),
        cmocka_unit_test(stop_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
