/* ThreadSanitizer builds only (CF_TSAN): librdkafka starts its threads
 * with C11 thrd_create, which glibc implements without going through
 * pthread_create, so TSan never sees those threads start and crashes at
 * their first allocation.  Defining thrd_create / thrd_join / thrd_detach
 * in the test executable makes the static librdkafka's calls bind to these
 * at link time (before libc's), and routes them through the intercepted
 * pthread calls. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

typedef struct trampoline {
    thrd_start_t func;
    void *arg;
} trampoline;

static void *trampoline_main(void *p)
{
    trampoline t = *(trampoline *)p;
    free(p);
    return (void *)(intptr_t)t.func(t.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t func, void *arg)
{
    trampoline *t = malloc(sizeof(*t));
    if (!t)
        return thrd_nomem;
    t->func = func;
    t->arg = arg;
    pthread_t th;
    int rc = pthread_create(&th, NULL, trampoline_main, t);
    if (rc != 0) {
        free(t);
        return rc == ENOMEM ? thrd_nomem : thrd_error;
    }
    *thr = (thrd_t)th;
    return thrd_success;
}

int thrd_join(thrd_t thr, int *res)
{
    void *ret = NULL;
    if (pthread_join((pthread_t)thr, &ret) != 0)
        return thrd_error;
    if (res)
        *res = (int)(intptr_t)ret;
    return thrd_success;
}

int thrd_detach(thrd_t thr)
{
    return pthread_detach((pthread_t)thr) == 0 ? thrd_success : thrd_error;
}
