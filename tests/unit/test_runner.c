/* cf_run: exit codes, signals, capture, caps, stdin, timeouts that kill the
 * whole process group, setup failures, hooks and concurrent use. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <time.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/test_proc.h"
#include "cf_runner.h"

static char *const no_env[] = {"PATH=/usr/bin:/bin", NULL};

static void sh_spec(cf_run_spec *s, const char *script, char **argv_store)
{
    memset(s, 0, sizeof(*s));
    argv_store[0] = "sh";
    argv_store[1] = "-c";
    argv_store[2] = (char *)script;
    argv_store[3] = NULL;
    s->path = "/bin/sh";
    s->argv = argv_store;
    s->envp = no_env;
    s->max_stdout = 1 << 20;
    s->max_stderr = 1 << 20;
    s->timeout_us = 10 * 1000000LL;
}

static int run_sh(const char *script, cf_run_outcome *o)
{
    cf_run_spec s;
    char *argv[4];
    sh_spec(&s, script, argv);
    cf_error err;
    int rc = cf_run(&s, o, &err);
    if (rc < 0)
        print_error("cf_run: %s\n", err.msg);
    return rc;
}

static bool out_is(const cf_buf *b, const char *s)
{
    return b->len == strlen(s) && (b->len == 0 || memcmp(b->data, s, b->len) == 0);
}


static bool wait_dead(pid_t pid, int ms)
{
    for (int i = 0; i < ms / 10; i++) {
        if (cf_test_pid_dead(pid))
            return true;
        usleep(10000);
    }
    return cf_test_pid_dead(pid);
}

static void test_exit_codes(void **state)
{
    (void)state;
    cf_run_outcome o;
    assert_int_equal(run_sh("exit 0", &o), 0);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 0);
    assert_int_equal(o.signal, 0);
    assert_false(o.timed_out);
    cf_run_outcome_free(&o);

    assert_int_equal(run_sh("exit 3", &o), 0);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 3);
    cf_run_outcome_free(&o);

    /* 127 from the program itself is not a setup failure. */
    assert_int_equal(run_sh("exit 127", &o), 0);
    assert_int_equal(o.exit_code, 127);
    cf_run_outcome_free(&o);
}

/* pass_fd reaches the program as fd 4; exec_fd runs a program the path
 * does not name (the path is only for messages). */
static void test_pass_fd_and_exec_fd(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int prog = open("/bin/sh", O_RDONLY | O_CLOEXEC);
    assert_true(prog >= 0);
    char *const argv[] = {"sh", "-c", "echo via-fd >&4; ls /proc/self/fd | wc -l", NULL};
    char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
    cf_run_spec spec = {.path = "/nonexistent/sh", .argv = argv, .envp = envp, .max_stdout = 4096,
                        .max_stderr = 4096, .timeout_us = 10000000, .pass_fd = sv[1], .exec_fd = prog};
    cf_run_outcome o;
    cf_error err;
    assert_int_equal(cf_run(&spec, &o, &err), 0);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 0);
    /* 0 1 2 4 and the one ls opens: the program fd did not leak past exec */
    assert_int_equal(o.out.len, 2);
    assert_memory_equal(o.out.data, "5\n", 2);
    char buf[16] = {0};
    assert_int_equal(read(sv[0], buf, sizeof(buf) - 1), 7);
    assert_string_equal(buf, "via-fd\n");
    cf_run_outcome_free(&o);
    assert_int_equal(fcntl(sv[1], F_GETFD), -1); /* cf_run closed our copy of pass_fd */
    close(sv[0]);
    close(prog);
}

static void test_signals(void **state)
{
    (void)state;
    cf_run_outcome o;
    assert_int_equal(run_sh("kill -SEGV $$", &o), 0);
    assert_false(o.exited);
    assert_int_equal(o.signal, SIGSEGV);
    cf_run_outcome_free(&o);

    assert_int_equal(run_sh("kill -TERM $$", &o), 0);
    assert_int_equal(o.signal, SIGTERM);
    cf_run_outcome_free(&o);
}

static void test_capture(void **state)
{
    (void)state;
    cf_run_outcome o;
    assert_int_equal(run_sh("echo out; echo err >&2; printf more", &o), 0);
    assert_true(out_is(&o.out, "out\nmore"));
    assert_true(out_is(&o.err, "err\n"));
    assert_false(o.out_truncated);
    assert_false(o.err_truncated);
    assert_true(o.wall_us > 0);
    cf_run_outcome_free(&o);
}

/* The on_output hook: called while the program runs, with what is kept
 * within the caps, when it asked to be woken, and once at the end. */
typedef struct hook_log {
    int calls, finals, wakes;
    size_t out_len_at_first;   /* stdout kept when first called */
    int64_t first_call_us;
    size_t max_seen_out;
    int64_t wake_at;           /* the wake-up it asked for, INT64_MAX = none */
    bool woken_on_time;        /* not before it, and while the program waited */
    const char *gate;          /* made when woken: the program waits for it */
} hook_log;

static int64_t record_output(void *arg, const cf_buf *out, const cf_buf *err, bool final, int64_t now)
{
    (void)err;
    hook_log *h = arg;
    if (h->calls++ == 0) {
        h->out_len_at_first = out->len;
        h->first_call_us = now;
        h->wake_at = now + 50000; /* ask once for a call 50 ms later */
        return h->wake_at;
    }
    if (final)
        h->finals++;
    if (h->wake_at != INT64_MAX && now >= h->wake_at) {
        h->wakes++;
        /* The program still waits for the gate: only its first line. */
        h->woken_on_time = out->len == 6;
        h->wake_at = INT64_MAX;
        FILE *f = fopen(h->gate, "w");
        if (f)
            fclose(f);
    }
    if (out->len > h->max_seen_out)
        h->max_seen_out = out->len;
    return h->wake_at;
}

static void test_output_hook(void **state)
{
    (void)state;
    cf_run_spec s;
    char *argv[4];
    /* The program waits for a file the hook makes when its wake-up comes:
     * a condition, so no bound on how late a busy machine wakes it. */
    char gate[64], script[200];
    snprintf(gate, sizeof(gate), "/tmp/cf-hook-%d.gate", (int)getpid());
    unlink(gate);
    snprintf(script, sizeof(script), "echo first; while [ ! -e %s ]; do sleep 0.01; done; head -c 100000 /dev/zero",
             gate);
    sh_spec(&s, script, argv);
    s.max_stdout = 1000;
    hook_log h = {.gate = gate};
    s.on_output = record_output;
    s.on_output_arg = &h;
    cf_run_outcome o;
    cf_error err;
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_run(&s, &o, &err), 0);
    int64_t t_end = cf_mono_us();
    unlink(gate);
    /* Called with the first line long before the end (the end needs the
     * wake-up, asked 50 ms after that first call). */
    assert_int_equal(h.out_len_at_first, 6);
    assert_true(h.first_call_us >= t0 && t_end - h.first_call_us >= 50000);
    /* The wake-up it asked for came, not early, while the program waited. */
    assert_int_equal(h.wakes, 1);
    assert_true(h.woken_on_time);
    /* Once final; never more than the cap. */
    assert_int_equal(h.finals, 1);
    assert_int_equal(h.max_seen_out, 1000);
    assert_int_equal(o.out.len, 1000);
    assert_true(o.out_truncated);
    cf_run_outcome_free(&o);
}

static void test_caps_truncate_10mb(void **state)
{
    (void)state;
    cf_run_spec s;
    char *argv[4];
    sh_spec(&s, "head -c 10485760 /dev/zero; head -c 10485760 /dev/zero >&2; echo end", argv);
    s.max_stdout = 1000;
    s.max_stderr = 4096;
    cf_run_outcome o;
    cf_error err;
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 0); /* the writer was never blocked */
    assert_int_equal(o.out.len, 1000);
    assert_int_equal(o.err.len, 4096);
    assert_true(o.out_truncated);
    assert_true(o.err_truncated);
    for (size_t i = 0; i < o.out.len; i++)
        assert_int_equal(o.out.data[i], 0);
    assert_true(cf_mono_us() - t0 < 5000000);
    cf_run_outcome_free(&o);

    /* Exactly at the cap is not truncated. */
    sh_spec(&s, "printf 12345", argv);
    s.max_stdout = 5;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(out_is(&o.out, "12345"));
    assert_false(o.out_truncated);
    cf_run_outcome_free(&o);
}

static void test_large_ignored_stdin(void **state)
{
    (void)state;
    size_t len = 8u << 20;
    uint8_t *data = malloc(len);
    assert_non_null(data);
    memset(data, 'x', len);
    const char *scripts[] = {"true", "sleep 0.2", "head -c 10 >/dev/null; exit 4"};
    for (size_t i = 0; i < 3; i++) {
        cf_run_spec s;
        char *argv[4];
        sh_spec(&s, scripts[i], argv);
        s.stdin_data = data;
        s.stdin_len = len;
        s.timeout_us = 5000000;
        cf_run_outcome o;
        cf_error err;
        int64_t t0 = cf_mono_us();
        assert_int_equal(cf_run(&s, &o, &err), 0);
        assert_false(o.timed_out);
        assert_true(o.exited);
        assert_int_equal(o.exit_code, i == 2 ? 4 : 0);
        assert_true(cf_mono_us() - t0 < 3000000);
        cf_run_outcome_free(&o);
    }
    free(data);
}

static void test_stdin_delivered(void **state)
{
    (void)state;
    size_t len = 3u << 20; /* larger than any pipe buffer: needs concurrent feed and drain */
    uint8_t *data = malloc(len);
    assert_non_null(data);
    for (size_t i = 0; i < len; i++)
        data[i] = (uint8_t)(i * 7 + (i >> 9));
    cf_run_spec s;
    char *argv[4];
    sh_spec(&s, "cat", argv);
    s.stdin_data = data;
    s.stdin_len = len;
    s.max_stdout = len;
    cf_run_outcome o;
    cf_error err;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_int_equal(o.exit_code, 0);
    assert_int_equal(o.out.len, len);
    assert_memory_equal(o.out.data, data, len);
    assert_false(o.out_truncated);
    cf_run_outcome_free(&o);

    /* No stdin at all: EOF at once. */
    sh_spec(&s, "wc -c", argv);
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.out.len >= 2 && o.out.data[o.out.len - 2] == '0');
    cf_run_outcome_free(&o);
    free(data);
}

static void test_timeout_kills_group(void **state)
{
    (void)state;
    cf_run_spec s;
    char *argv[4];
    sh_spec(&s, "sleep 30 & echo $!; (sleep 31 & echo $!; wait) & sleep 32", argv);
    /* Long enough for a loaded machine to print both pids first. */
    s.timeout_us = 1000000;
    cf_run_outcome o;
    cf_error err;
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_run(&s, &o, &err), 0);
    int64_t took = cf_mono_us() - t0;
    assert_true(o.timed_out);
    assert_false(o.exited);
    assert_int_equal(o.signal, SIGKILL);
    assert_true(took >= 1000000 && took < 4000000);
    assert_true(o.wall_us >= 1000000);

    /* Every background pid the script printed is gone. */
    char text[256];
    size_t n = o.out.len < sizeof(text) - 1 ? o.out.len : sizeof(text) - 1;
    memcpy(text, o.out.data, n);
    text[n] = '\0';
    int count = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        pid_t pid = (pid_t)strtol(line, NULL, 10);
        assert_true(pid > 1);
        assert_true(wait_dead(pid, 1000));
        count++;
    }
    assert_int_equal(count, 2);
    cf_run_outcome_free(&o);
}

static void test_leftovers_killed_after_exit(void **state)
{
    (void)state;
    cf_run_outcome o;
    /* The main process exits at once; its background child must not survive. */
    assert_int_equal(run_sh("sleep 30 >/dev/null 2>&1 & echo $!", &o), 0);
    assert_int_equal(o.exit_code, 0);
    assert_true(o.out.len > 0);
    char num[32];
    size_t nn = o.out.len < sizeof(num) ? o.out.len : sizeof(num) - 1;
    memcpy(num, o.out.data, nn);
    num[nn] = '\0';
    pid_t pid = (pid_t)strtol(num, NULL, 10);
    assert_true(pid > 1);
    assert_true(wait_dead(pid, 1000));
    cf_run_outcome_free(&o);
}

static void test_escaped_grandchild_does_not_hang(void **state)
{
    (void)state;
    cf_run_outcome o;
    /* setsid leaves the process group and keeps stdout open: the drain after
     * exit is bounded instead of waiting for its EOF. */
    int64_t t0 = cf_mono_us();
    assert_int_equal(run_sh("setsid sleep 5 & echo $!", &o), 0);
    int64_t took = cf_mono_us() - t0;
    assert_true(took < 2000000);
    assert_int_equal(o.exit_code, 0);
    char num[32];
    size_t nn = o.out.len < sizeof(num) ? o.out.len : sizeof(num) - 1;
    memcpy(num, o.out.data, nn);
    num[nn] = '\0';
    pid_t pid = (pid_t)strtol(num, NULL, 10);
    assert_true(pid > 1);
    kill(pid, SIGKILL);
    cf_run_outcome_free(&o);
}

/* init kills every process it sees when the program ends: it is refused
 * outside a pid namespace of its own. */
static void test_init_needs_pid_namespace(void **state)
{
    (void)state;
    char *argv[] = {"true", NULL};
    cf_run_spec s;
    memset(&s, 0, sizeof(s));
    s.path = "/bin/true";
    s.argv = argv;
    s.envp = no_env;
    s.timeout_us = 5000000;
    s.init = true;
    cf_run_outcome o;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_run(&s, &o, &err), -1);
    assert_int_equal(err.code, CF_E_INVALID);
    assert_non_null(strstr(err.msg, "pid namespace"));
    cf_run_outcome_free(&o);
}

/* A failing execve is told apart from a setup failure: which of the two
 * is the caller's mistake is the backend's call. */
static void test_exec_failure_is_reported_apart(void **state)
{
    (void)state;
    char *argv[] = {"nothing", NULL};
    cf_run_spec s;
    memset(&s, 0, sizeof(s));
    s.path = "/nonexistent/definitely/not/here";
    s.argv = argv;
    s.envp = no_env;
    s.max_stdout = s.max_stderr = 100;
    s.timeout_us = 5000000;
    cf_run_outcome o;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.exec_failed);
    assert_int_equal(o.exec_errno, ENOENT);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 127);
    cf_run_outcome_free(&o);

    /* A bad cwd fails before exec too. */
    char *argv2[] = {"true", NULL};
    s.path = "/bin/true";
    s.argv = argv2;
    s.cwd = "/nonexistent-cwd";
    cf_error_clear(&err);
    assert_int_equal(cf_run(&s, &o, &err), -1);
    assert_int_equal(err.code, CF_E_SANDBOX);
    assert_non_null(strstr(err.msg, "chdir"));
    cf_run_outcome_free(&o);
}

static int failing_child_setup(void *arg, const char **msg)
{
    (void)arg;
    *msg = "test hook refused";
    errno = EPERM;
    return -1;
}

static int failing_parent_setup(pid_t pid, void *arg, cf_error *err)
{
    *(pid_t *)arg = pid;
    return cf_error_set(err, CF_E_SYSTEM, "parent hook refused");
}

struct barrier_arg {
    const char *path;
};

/* Creates the file the child needs only after a delay: the child can only
 * see it if it really waited for us. */
static int slow_parent_setup(pid_t pid, void *arg, cf_error *err)
{
    (void)pid;
    (void)err;
    struct barrier_arg *b = arg;
    usleep(100000);
    int fd = open(b->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return cf_error_set(err, CF_E_SYSTEM, "create");
    close(fd);
    return 0;
}

static void test_hooks(void **state)
{
    (void)state;
    cf_run_spec s;
    char *argv[4];
    cf_run_outcome o;
    cf_error err;

    sh_spec(&s, "exit 0", argv);
    s.child_setup = failing_child_setup;
    cf_error_clear(&err);
    assert_int_equal(cf_run(&s, &o, &err), -1);
    assert_int_equal(err.code, CF_E_SANDBOX);
    assert_int_equal(err.sys_errno, EPERM);
    assert_non_null(strstr(err.msg, "test hook refused"));
    cf_run_outcome_free(&o);

    pid_t child = 0;
    sh_spec(&s, "exit 0", argv);
    s.parent_setup = failing_parent_setup;
    s.parent_setup_arg = &child;
    cf_error_clear(&err);
    assert_int_equal(cf_run(&s, &o, &err), -1);
    assert_non_null(strstr(err.msg, "parent hook refused"));
    assert_true(child > 0);
    assert_true(cf_test_pid_dead(child)); /* reaped, not left behind */
    cf_run_outcome_free(&o);

    char path[64];
    snprintf(path, sizeof(path), "/tmp/cf-runner-barrier-%d", (int)getpid());
    unlink(path);
    struct barrier_arg ba = {path};
    char script[128];
    snprintf(script, sizeof(script), "test -e %s", path);
    sh_spec(&s, script, argv);
    s.parent_setup = slow_parent_setup;
    s.parent_setup_arg = &ba;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_int_equal(o.exit_code, 0);
    cf_run_outcome_free(&o);
    unlink(path);
}

static void test_child_environment(void **state)
{
    (void)state;
    cf_run_outcome o;
    /* Only stdio is open in the program (checked by the shell itself:
     * a pipeline would show its own transient fds).  A worker fd without
     * O_CLOEXEC must not leak either. */
    int leak = open("/dev/null", O_RDONLY);
    assert_true(leak >= 3);
    assert_int_equal(run_sh("for i in 0 1 2; do [ -e /proc/$$/fd/$i ] || echo closed $i; done; "
                            "i=3; while [ $i -lt 256 ]; do [ -e /proc/$$/fd/$i ] && echo open $i; i=$((i+1)); done; "
                            "echo end", &o), 0);
    assert_true(out_is(&o.out, "end\n"));
    close(leak);
    cf_run_outcome_free(&o);

    /* SIGPIPE is back to default even when the worker ignores it: `yes`
     * dies quietly instead of complaining about EPIPE. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGPIPE, &ign, &old);
    assert_int_equal(run_sh("yes | head -n 1", &o), 0);
    assert_true(out_is(&o.out, "y\n"));
    assert_int_equal(o.err.len, 0);
    cf_run_outcome_free(&o);
    sigaction(SIGPIPE, &old, NULL);

    /* A new session: the program leads its own process group. */
    assert_int_equal(run_sh("ps -o pid=,pgid=,sid= -p $$ | awk '{print ($1==$2 && $2==$3)}'", &o), 0);
    assert_true(out_is(&o.out, "1\n"));
    cf_run_outcome_free(&o);

    /* The given environment, nothing else. */
    assert_int_equal(run_sh("env | sort | tr '\\n' ' '", &o), 0);
    assert_non_null(memmem(o.out.data, o.out.len, "PATH=/usr/bin:/bin", 18));
    assert_null(memmem(o.out.data, o.out.len, "HOME=", 5));
    cf_run_outcome_free(&o);
}

static void test_rlimits(void **state)
{
    (void)state;
    cf_run_spec s;
    char *argv[4];
    cf_run_outcome o;
    cf_error err;

    sh_spec(&s, "ulimit -n; ulimit -c; ulimit -f", argv);
    s.rlimits[0] = (cf_run_rlimit){RLIMIT_NOFILE, 64};
    s.rlimits[1] = (cf_run_rlimit){RLIMIT_FSIZE, 1024 * 512}; /* ulimit -f counts 512-byte blocks */
    s.n_rlimits = 2;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(out_is(&o.out, "64\n0\n1024\n"));
    cf_run_outcome_free(&o);

    /* CPU: SIGXCPU at the soft limit. */
    sh_spec(&s, "while :; do :; done", argv);
    s.rlimits[0] = (cf_run_rlimit){RLIMIT_CPU, 1};
    s.n_rlimits = 1;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_int_equal(o.signal, SIGXCPU);
    assert_false(o.timed_out);
    /* The CPU the outcome reports can read below the count that sent the
     * signal on a busy host (0.9 s failed under stress-ng): at least half,
     * as the sandbox suite takes it; the signal is what is enforced. */
    assert_true(o.cpu_us >= 500000);
    cf_run_outcome_free(&o);
}

static void *thread_runs(void *arg)
{
    long id = (long)(intptr_t)arg;
    for (int i = 0; i < 8; i++) {
        char in[64], script[128];
        int n = snprintf(in, sizeof(in), "thread-%ld-run-%d\n", id, i);
        snprintf(script, sizeof(script), "cat; exit %d", (int)((id * 8 + i) % 50));
        cf_run_spec s;
        char *argv[4];
        sh_spec(&s, script, argv);
        s.stdin_data = (const uint8_t *)in;
        s.stdin_len = (size_t)n;
        s.timeout_us = 5000000;
        cf_run_outcome o;
        cf_error err;
        if (cf_run(&s, &o, &err) < 0 || o.timed_out || !o.exited || o.exit_code != (int)((id * 8 + i) % 50) ||
            !out_is(&o.out, in)) {
            cf_run_outcome_free(&o);
            return (void *)1;
        }
        cf_run_outcome_free(&o);
    }
    return NULL;
}

static void test_concurrent_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, thread_runs, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
}

static void test_cancel(void **state)
{
    (void)state;
    cf_run_spec s;
    char *argv[4];
    sh_spec(&s, "sleep 20", argv);
    volatile int cancel = 1;
    s.cancel = &cancel;
    cf_run_outcome o;
    cf_error err;
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.cancelled);
    assert_false(o.timed_out);
    assert_true(cf_mono_us() - t0 < 2000000);
    cf_run_outcome_free(&o);
}

/* utime+stime of the main process and its reaped children, from /proc
 * (-1 once it is gone). */
static int64_t proc_cpu_us(pid_t pid, void *arg)
{
    int *calls = arg;
    (*calls)++;
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    /* fields after ")": state(3) ... utime(14) stime(15) cutime(16) cstime(17) */
    long long v[17] = {0};
    int field = 3;
    for (char *t = strtok(p + 2, " "); t && field <= 17; t = strtok(NULL, " "), field++)
        v[field - 1] = strtoll(t, NULL, 10);
    long hz = sysconf(_SC_CLK_TCK);
    return (v[13] + v[14] + v[15] + v[16]) * 1000000LL / hz;
}

/* 0 while the main process exists (zombie included), then past any limit:
 * only the check after the exit can see it. */
static int64_t cpu_after_exit(pid_t pid, void *arg)
{
    int *calls = arg;
    (*calls)++;
    return kill(pid, 0) == 0 ? 0 : 1000000000LL;
}

static int64_t cpu_unknown(pid_t pid, void *arg)
{
    (void)pid;
    int *calls = arg;
    (*calls)++;
    return -1;
}

static void test_cpu_hook(void **state)
{
    (void)state;
    cf_run_spec s;
    char *argv[4];
    cf_run_outcome o;
    cf_error err;
    int calls = 0;

    /* Polled while it runs; past the limit everything is killed. */
    sh_spec(&s, "while :; do :; done", argv);
    s.cpu_usage_us = proc_cpu_us;
    s.cpu_usage_arg = &calls;
    s.cpu_limit_us = 300000;
    int64_t t0 = cf_mono_us();
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.cpu_exceeded);
    assert_false(o.timed_out);
    assert_int_equal(o.signal, SIGKILL);
    assert_true(o.cpu_us >= 300000);
    assert_true(o.cpu_us < 1000000);
    assert_true(cf_mono_us() - t0 < 5000000);
    assert_true(calls >= 5); /* every CF_RUN_CPU_POLL_US, not once */
    cf_run_outcome_free(&o);

    /* Unknown usage never kills; no limit, no calls. */
    calls = 0;
    sh_spec(&s, "sleep 0.2; exit 4", argv);
    s.cpu_usage_us = cpu_unknown;
    s.cpu_usage_arg = &calls;
    s.cpu_limit_us = 1;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_false(o.cpu_exceeded);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 4);
    assert_true(calls >= 3);
    cf_run_outcome_free(&o);
    calls = 0;
    s.cpu_limit_us = 0;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_int_equal(calls, 0);
    assert_false(o.cpu_exceeded);
    cf_run_outcome_free(&o);

    /* What was used after the last poll counts: checked once after exit. */
    calls = 0;
    sh_spec(&s, "exit 0", argv);
    s.cpu_usage_us = cpu_after_exit;
    s.cpu_usage_arg = &calls;
    s.cpu_limit_us = 1000000;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.exited);
    assert_true(o.cpu_exceeded);
    assert_true(calls >= 1);
    cf_run_outcome_free(&o);

    /* A wall-clock timeout is not a cpu excess. */
    calls = 0;
    sh_spec(&s, "sleep 5", argv);
    s.timeout_us = 200000;
    s.cpu_usage_us = cpu_after_exit;
    s.cpu_usage_arg = &calls;
    s.cpu_limit_us = 1000000;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.timed_out);
    assert_false(o.cpu_exceeded);
    cf_run_outcome_free(&o);
}

/* The stdio pipes belong to the program's uid (root only): it can reopen
 * them by name. */
static void test_stdio_owner(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    cf_run_spec s;
    char *argv[4];
    cf_run_outcome o;
    cf_error err;

    sh_spec(&s, "cat /dev/stdin; echo x > /dev/stdout; echo y > /dev/stderr; id -u", argv);
    s.set_ids = true;
    s.uid = 65534;
    s.gid = 65534;
    s.stdin_data = (const uint8_t *)"in\n";
    s.stdin_len = 3;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 0);
    assert_true(out_is(&o.out, "in\nx\n65534\n"));
    assert_true(out_is(&o.err, "y\n"));
    cf_run_outcome_free(&o);

    /* Explicit owner (ids that change in a user namespace later). */
    sh_spec(&s, "stat -L -c '%u:%g' /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2 | tr '\\n' ' '", argv);
    s.stdio_owner_set = true;
    s.stdio_uid = 23456;
    s.stdio_gid = 23457;
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(out_is(&o.out, "23456:23457 23456:23457 23456:23457 "));
    cf_run_outcome_free(&o);

    /* Without either, they stay the worker's. */
    sh_spec(&s, "stat -L -c '%u' /proc/$$/fd/0 /proc/$$/fd/1 | tr '\\n' ' '", argv);
    assert_int_equal(cf_run(&s, &o, &err), 0);
    assert_true(out_is(&o.out, "0 0 "));
    cf_run_outcome_free(&o);
}


/* ---- prepared children (cf_run_prepare / cf_run_start) ---- */

static int setup_fails(void *arg, const char **msg)
{
    (void)arg;
    *msg = "deliberate setup failure";
    errno = EPERM;
    return -1;
}

/* Runs in the child with stdout already on the pipe: what it writes
 * shows that the start's go_flags and go_arg reached it. */
static int record_go(void *arg, unsigned flags, int64_t go_arg, const char **msg)
{
    (void)arg;
    (void)msg;
    char line[] = "go:0:0\n";
    line[3] = (char)('0' + (flags % 10));
    line[5] = (char)('0' + (go_arg % 10));
    return write(1, line, sizeof(line) - 1) == (ssize_t)(sizeof(line) - 1) ? 0 : -1;
}

/* A prepared child without namespaces or hooks (it must not take the
 * vfork path: the caller would wait in clone for an exec that only comes
 * after the go) runs the request handed to it later: argv, environment,
 * cwd, stdin and rlimits of the start's spec, not the prepare's. */
static void test_prepared_runs_the_request(void **state)
{
    (void)state;
    cf_run_spec prep_spec;
    memset(&prep_spec, 0, sizeof(prep_spec));
    prep_spec.child_go = record_go;
    cf_run_prep *p = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_run_prepare(&prep_spec, &p, &err), 0);
    assert_non_null(p);
    assert_true(cf_run_prep_alive(p));

    cf_run_spec s;
    char *argv[4];
    sh_spec(&s, "read x; echo \"$x $GREETING $(pwd) $(ulimit -n)\"; exit 7", argv);
    char *env[] = {"GREETING=hello", "PATH=/usr/bin:/bin", NULL};
    s.envp = env;
    s.cwd = "/tmp";
    s.stdin_data = (const uint8_t *)"from-stdin\n";
    s.stdin_len = 11;
    s.rlimits[0] = (cf_run_rlimit){RLIMIT_NOFILE, 77};
    s.n_rlimits = 1;
    s.go_flags = 2;
    s.go_arg = 3;
    cf_run_outcome o;
    assert_int_equal(cf_run_start(p, &s, &o, &err), 0);
    assert_true(o.exited);
    assert_int_equal(o.exit_code, 7);
    assert_true(out_is(&o.out, "go:2:3\nfrom-stdin hello /tmp 77\n"));
    cf_run_outcome_free(&o);
}

/* A child_setup failure is reported by prepare, with its message; an
 * unused prepared child is killed and reaped by destroy; a start after
 * the child died is an error, not a hang. */
static void test_prepared_failures(void **state)
{
    (void)state;
    cf_run_spec ps;
    memset(&ps, 0, sizeof(ps));
    ps.child_setup = setup_fails;
    cf_run_prep *p = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_run_prepare(&ps, &p, &err), -1);
    assert_null(p);
    assert_non_null(strstr(err.msg, "deliberate setup failure"));

    memset(&ps, 0, sizeof(ps));
    assert_int_equal(cf_run_prepare(&ps, &p, &err), 0);
    cf_run_prep_destroy(p);
    cf_run_prep_destroy(NULL);

    /* pass_fd and exec_fd are not for prepared children */
    ps.pass_fd = 9;
    assert_int_equal(cf_run_prepare(&ps, &p, &err), -1);
    ps.pass_fd = 0;

    /* A dead child: alive() says so, and a start fails cleanly. */
    assert_int_equal(cf_run_prepare(&ps, &p, &err), 0);
    assert_int_equal(kill(cf_run_prep_pid(p), SIGKILL), 0);
    for (int i = 0; i < 200 && cf_run_prep_alive(p); i++)
        usleep(5000);
    assert_false(cf_run_prep_alive(p));
    cf_run_spec s;
    char *argv[4];
    sh_spec(&s, "echo never", argv);
    cf_run_outcome o;
    assert_int_equal(cf_run_start(p, &s, &o, &err), -1);
    assert_int_equal(o.out.len, 0);
    cf_run_outcome_free(&o);
}

/* ---- nothing outlives its worker, without a race (issue 28) ---- */

/* Processes whose environment holds token (the programs of one round). */
static int count_with_token(const char *token, bool kill_them)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int n = 0;
    size_t tl = strlen(token);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char buf[8192];
        ssize_t r = read(fd, buf, sizeof(buf));
        close(fd);
        for (ssize_t i = 0; r > 0 && i + (ssize_t)tl <= r; i++)
            if (memcmp(buf + i, token, tl) == 0) {
                if (!cf_test_pid_dead((pid_t)pid)) {
                    n++;
                    if (kill_them)
                        kill((pid_t)pid, SIGKILL);
                }
                break;
            }
    }
    closedir(d);
    return n;
}

/* The slow part of a sandbox's child setup (mounts: milliseconds), before
 * the death signal can be set: the window a worker's death could fall in. */
static int slow_setup(void *arg, const char **msg)
{
    (void)arg;
    (void)msg;
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return 0;
}

/* A worker stand-in: spawns programs in a loop, each stopped after 20 ms,
 * until it is killed. */
static __attribute__((noreturn)) void spawning_worker(const char *token, bool pidns)
{
    char env_token[128];
    snprintf(env_token, sizeof(env_token), "%s=1", token);
    char *envp[] = {"PATH=/usr/bin:/bin", env_token, NULL};
    char *argv[] = {"sleep", "30", NULL};
    for (;;) {
        cf_run_spec s;
        memset(&s, 0, sizeof(s));
        s.path = "/bin/sleep";
        s.argv = argv;
        s.envp = envp;
        s.max_stdout = s.max_stderr = 4096;
        s.timeout_us = 20 * 1000;
        if (pidns) {
            s.clone_flags = CLONE_NEWPID | CLONE_NEWNS;
            s.init = true;
            s.child_setup = slow_setup;
        }
        cf_run_outcome o;
        cf_error err;
        if (cf_run(&s, &o, &err) == 0)
            cf_run_outcome_free(&o);
    }
}

/* Kills a spawning worker at random points, many times: afterwards no
 * program of it may be left running (the death signal set after the
 * worker died is never sent: the child must notice for itself).  Before
 * the fix, the pid-namespace variant left a program behind in about one
 * round in ten. */
static void kill_around_spawns(bool pidns)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    print_message("seed %u\n", seed);
    int rounds = 150, orphans = 0;
    for (int i = 0; i < rounds; i++) {
        char token[64];
        snprintf(token, sizeof(token), "CF_ORPHAN_%d_%d", (int)getpid(), i);
        pid_t w = fork();
        assert_true(w >= 0);
        if (w == 0)
            spawning_worker(token, pidns);
        /* A random point: the first spawn, or any later one. */
        struct timespec ts = {0, (long)(rand_r(&seed) % 30000) * 1000L};
        nanosleep(&ts, NULL);
        kill(w, SIGKILL);
        while (waitpid(w, NULL, 0) < 0 && errno == EINTR)
            ;
        /* Its programs die with it at once; wait for that, bounded. */
        int left = -1;
        for (int t = 0; t < 300 && (left = count_with_token(token, false)) > 0; t++)
            usleep(10 * 1000);
        if (left > 0) {
            orphans++;
            print_message("round %d: %d program(s) outlived their worker\n", i, left);
            count_with_token(token, true);
        }
    }
    assert_int_equal(orphans, 0);
}

static void test_nothing_outlives_a_killed_spawner(void **state)
{
    (void)state;
    kill_around_spawns(false);
}

static void test_nothing_outlives_a_killed_spawner_pidns(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        skip();
    }
    kill_around_spawns(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_signals),
        cmocka_unit_test(test_capture),
        cmocka_unit_test(test_caps_truncate_10mb),
        cmocka_unit_test(test_large_ignored_stdin),
        cmocka_unit_test(test_stdin_delivered),
        cmocka_unit_test(test_timeout_kills_group),
        cmocka_unit_test(test_leftovers_killed_after_exit),
        cmocka_unit_test(test_escaped_grandchild_does_not_hang),
        cmocka_unit_test(test_exec_failure_is_reported_apart),
        cmocka_unit_test(test_init_needs_pid_namespace),
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_child_environment),
        cmocka_unit_test(test_rlimits),
        cmocka_unit_test(test_concurrent_threads),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cpu_hook),
        cmocka_unit_test(test_output_hook),
        cmocka_unit_test(test_stdio_owner),
        cmocka_unit_test(test_pass_fd_and_exec_fd),
        cmocka_unit_test(test_prepared_runs_the_request),
        cmocka_unit_test(test_prepared_failures),
        cmocka_unit_test(test_nothing_outlives_a_killed_spawner),
        cmocka_unit_test(test_nothing_outlives_a_killed_spawner_pidns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
