/* The `container` backend through the backend API, the way the worker
 * drives it (needs root: skipped otherwise), with the default image that
 * deploy/images.sh builds (CF_TEST_IMAGE, else $CODEFLEET_IMAGES or /var/lib/codefleet/images).  Each test
 * checks that nothing of an execution outlives it: no container in the
 * runtime's own listing, no cgroup, no process of the run uids, no mount. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support/cgroup_host.h"
#include "test_host.h"
#include "unit/request_builders.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <mqueue.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_backend.h"
#include "cf_util.h"
#include "cf_workdir.h"
#include "support/backend_settings.h"

#define SEC 1000000LL
#define MIB (1024LL * 1024)
#define UID_BASE 241000 /* not the sandbox tests' */
#define SLOTS 2

typedef struct fixture {
    char root[64];
    char cg_parent[64];
    char state[96];
    char images[PATH_MAX + 16];
    cf_backend_config cfg;
    cf_backend_set *set;
    const cf_backend *be;
} fixture;

static bool have_root(void)
{
    return geteuid() == 0;
}

static void image_dir(char *buf, size_t size)
{
    const char *e = getenv("CF_TEST_IMAGE");
    if (e && e[0]) {
        cf_strlcpy(buf, e, size);
        return;
    }
    const char *images = getenv("CODEFLEET_IMAGES");
    snprintf(buf, size, "%s/default/rootfs", images && images[0] ? images : "/var/lib/codefleet/images");
}

static int make_set(fixture *f, const char *images)
{
    memset(&f->cfg, 0, sizeof(f->cfg));
    f->cfg.work_root = f->root;
    f->cfg.python_path = "/usr/bin/python3";
    f->cfg.node_path = "/usr/bin/node";
    f->cfg.shell_path = "/bin/sh";
    f->cfg.exec_path = "/usr/bin:/bin";
    f->cfg.slots = SLOTS;
    f->cfg.max_files_bytes = 1 << 20;
    f->cfg.max_output_file_bytes = 1 << 16;
    f->cfg.cgroup_root = f->cg_parent;
    f->cfg.run_uid_base = UID_BASE;
    static char init[PATH_MAX];
    snprintf(init, sizeof(init), "%s/backends/codefleet-container-init",
             getenv("CF_BINARY_DIR") ? getenv("CF_BINARY_DIR") : "build");
    f->cfg.settings = test_backend_settings(
        (const char *[]){"container-images", images, "container-state", f->state, "container-init", init, NULL});
    f->cfg.compiled_languages = 1u << CF_LANG_C | 1u << CF_LANG_CPP;
    /* The pipeline's resolved compilers, as the worker passes them. */
    static char cc[PATH_MAX], cxx[PATH_MAX];
    f->cfg.cc_path = realpath("/usr/bin/gcc", cc);
    f->cfg.cxx_path = realpath("/usr/bin/g++", cxx);
    f->cfg.slirp4netns_path = "/usr/bin/slirp4netns";
    cf_error err;
    if (cf_backend_set_new("container", &f->cfg, &f->set, &err) < 0) {
        fprintf(stderr, "container backend: %s\n", err.msg);
        return -1;
    }
    f->be = cf_backend_set_get(f->set, 0);
    return f->be ? 0 : -1;
}

/* Containers the runtime lists in the test's state directory. */
static int count_containers(const fixture *f)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "crun --root %s list -q 2>/dev/null", f->state);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int n = 0;
    char line[256];
    while (fgets(line, sizeof(line), p))
        if (line[0] && line[0] != '\n')
            n++;
    if (pclose(p) != 0)
        return -1;
    return n;
}

/* A zombie runs nothing: when the OOM killer took the runtime itself (the
 * memory of a filled /dev/shm outlives the container's processes), the
 * container's init is left for the host's pid 1 to reap, which this
 * machine's pid 1 never does.  Counted apart, not as running. */
static bool is_zombie(const char *pid)
{
    char p[300], buf[512];
    snprintf(p, sizeof(p), "/proc/%.255s/stat", pid);
    FILE *f = fopen(p, "re");
    if (!f)
        return true; /* gone */
    bool z = fgets(buf, sizeof(buf), f) && strrchr(buf, ')') && strrchr(buf, ')')[2] == 'Z';
    fclose(f);
    return z;
}

static int count_uid_procs(void)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char p[300];
        snprintf(p, sizeof(p), "/proc/%.255s", de->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0 && sb.st_uid >= UID_BASE && sb.st_uid < UID_BASE + 2 && !is_zombie(de->d_name))
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static int count_work_mounts(const fixture *f)
{
    FILE *fp = fopen("/proc/self/mountinfo", "r");
    char line[4096];
    int n = 0;
    size_t rl = strlen(f->root);
    while (fp && fgets(line, sizeof(line), fp)) {
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        for (int i = 0; tok && i < 4; i++)
            tok = strtok_r(NULL, " ", &save);
        /* (an instance's images, simg<k>, and its copies of the init,
         * sinit, live as long as it) */
        if (tok && strncmp(tok, f->root, rl) == 0 && strstr(tok + rl, "/s") && !strstr(tok + rl, "/simg") &&
            !strstr(tok + rl, "/sinit"))
            n++;
    }
    if (fp)
        fclose(fp);
    return n;
}

static void assert_nothing_left(const fixture *f)
{
    assert_int_equal(count_containers(f), 0);
    assert_int_equal(cgh_count_cgroups(f->cg_parent), 0);
    assert_int_equal(cgh_count_procs(f->cg_parent, NULL, NULL), 0);
    assert_int_equal(count_uid_procs(), 0);
    assert_int_equal(count_work_mounts(f), 0);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    *state = f;
    if (!have_root())
        return 0;
    cf_strlcpy(f->root, "/tmp/cf-cttest-XXXXXX", sizeof(f->root));
    if (!mkdtemp(f->root) || chmod(f->root, 0711) < 0)
        return -1;
    snprintf(f->cg_parent, sizeof(f->cg_parent), "/cf-cttest-%d", (int)getpid());
    snprintf(f->state, sizeof(f->state), "/run/cf-cttest-%d", (int)getpid());
    char dir[PATH_MAX];
    image_dir(dir, sizeof(dir));
    snprintf(f->images, sizeof(f->images), "default=%s", dir);
    if (access(dir, F_OK) < 0) {
        fprintf(stderr, "no default image at %s: run deploy/images.sh\n", dir);
        return -1;
    }
    return make_set(f, f->images);
}

static int teardown(void **state)
{
    fixture *f = *state;
    int rc = 0;
    if (have_root()) {
        cf_backend_set_destroy(f->set);
        if (cgh_count_cgroups(f->cg_parent) != 0) {
            fprintf(stderr, "cgroups left below %s\n", f->cg_parent);
            rc = -1;
        }
        if (cgh_remove(f->cg_parent) < 0)
            rc = -1;
        if (rmdir(f->root) < 0) {
            fprintf(stderr, "work root %s not empty\n", f->root);
            rc = -1;
        }
        rmdir(f->state);
    }
    free(f);
    return rc;
}

#define REQUIRE_ROOT()                                                                                         \
    do {                                                                                                       \
        if (!have_root())                                                                                      \
            skip();                                                                                            \
    } while (0)

/* A ceiling, not a bound under test: under software emulation on a busy
 * host (tests/vm/run.sh), starting Python in a container took over 20 s. */
static void req_init(cf_request *r, cf_language lang, const char *code)
{
    req_init_timeout(r, lang, code, 120 * SEC);
    r->policy.network = CF_NET_DISABLED;
}

static int run_slot(fixture *f, int slot, const cf_request *req, cf_result *res)
{
    memset(res, 0, sizeof(*res));
    cf_error err;
    cf_error_clear(&err);
    cf_exec_ctx ctx = {.slot = slot, .worker_id = "test"};
    int rc = f->be->ops->execute(f->be->state, &ctx, req, res, &err);
    if (rc < 0)
        print_error("execute: %s\n", err.msg);
    else if (res->status != CF_STATUS_SUCCESS)
        print_message("status %s reason %s stderr %.*s\n", cf_status_name(res->status),
                      res->reason ? res->reason : "-", (int)res->stderr_data.len,
                      res->stderr_data.data ? (const char *)res->stderr_data.data : "");
    return rc;
}

static int run(fixture *f, const cf_request *req, cf_result *res)
{
    return run_slot(f, 0, req, res);
}

static bool out_is(const cf_bytes *b, const char *s)
{
    return b->len == strlen(s) && (b->len == 0 || memcmp(b->data, s, b->len) == 0);
}

static bool out_has(const cf_bytes *b, const char *s)
{
    return b->data && memmem(b->data, b->len, s, strlen(s)) != NULL;
}

/* ---- tests ---- */

static void test_caps(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    const cf_backend_caps *c = &f->be->caps;
    assert_string_equal(c->isolation, "container");
    for (int l = CF_LANG_COMMAND; l <= CF_LANG_JAVASCRIPT; l++)
        assert_true(c->languages & (1u << l));
    assert_true(c->languages & (1u << CF_LANG_C));
    uint32_t want = CF_CTL_TIMEOUT | CF_CTL_CPU_TIME | CF_CTL_MEMORY | CF_CTL_MAX_PROCESSES | CF_CTL_STDOUT_CAP |
                    CF_CTL_STDERR_CAP | CF_CTL_FILE_SIZE | CF_CTL_ENV_ALLOWLIST | CF_CTL_NETWORK_DISABLED |
                    CF_CTL_FS_NONE | CF_CTL_FS_WORKSPACE_RO | CF_CTL_FS_WORKSPACE_RW;
    assert_int_equal(c->controls & want, want);
    /* slirp4netns is installed by deploy/install.sh: egress is offered. */
    assert_true(c->controls & CF_CTL_NETWORK_ENABLED);
    /* Not offered, so requests asking for it are rejected by the policy check. */
    assert_false(c->controls & CF_CTL_FS_PATHS);
    assert_non_null(strstr(c->notes, "image default (default)"));
}

/* Each language of the default image, and stdin reaching the program. */
static void test_languages_and_stdin(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    static const struct {
        cf_language lang;
        const char *code;
        const char *want;
    } cases[] = {
        {CF_LANG_PYTHON, "import sys\nprint('py', sys.stdin.read().strip())", "py from-stdin\n"},
        {CF_LANG_JAVASCRIPT, "let d='';process.stdin.on('data',c=>d+=c).on('end',()=>console.log('js',d.trim()))",
         "js from-stdin\n"},
        {CF_LANG_SHELL, "read x; echo sh $x", "sh from-stdin\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_request req;
        cf_result res;
        req_init(&req, cases[i].lang, cases[i].code);
        cf_bytes_set(&req.stdin_data, "from-stdin\n", 11);
        assert_int_equal(run(f, &req, &res), 0);
        assert_int_equal(res.status, CF_STATUS_SUCCESS);
        if (!out_is(&res.stdout_data, cases[i].want))
            fail_msg("%s: got '%.*s'", cf_language_name(cases[i].lang), (int)res.stdout_data.len,
                     (const char *)res.stdout_data.data);
        assert_string_equal(res.meta.isolation, "container");
        assert_string_equal(res.meta.sandbox, "default");
        cf_request_clear(&req);
        cf_result_clear(&res);
    }
    /* A command found in the image's PATH (not the host's). */
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_COMMAND, NULL);
    const char *argv[] = {"cat", "/etc/debian_version"};
    req_argv(&req, 2, argv);
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(res.stdout_data.len > 0);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* What the program is: uid 1000, no capabilities, no_new_privs, seccomp,
 * its own pid 1 (the init), a read-only root, its own cgroup namespace. */
static void test_identity_and_confinement(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_SHELL,
             "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' ';"
             "cat /proc/1/cmdline | tr '\\0' ' '; echo;"
             "touch /usr/x 2>/dev/null && echo root-writable || echo root-ro;"
             "cat /proc/self/cgroup | head -1; cat /proc/self/uid_map | tr -s ' ';"
             "echo ok > /work/w && cat /work/w; echo t > /tmp/t && cat /tmp/t; pwd;"
             "awk '$5 == \"/\" {print \"root:\" $6}' /proc/self/mountinfo;"
             "echo inotify-share: $(cat /proc/sys/user/max_inotify_instances);"
             "(echo 100000 > /proc/sys/user/max_inotify_instances) 2>/dev/null && echo share-raised || echo share-held;"
             "awk '$5 == \"/proc/sys/kernel\" || $5 == \"/proc/sys/user\" {print \"mount\" $5 \":\" $6}' "
             "/proc/self/mountinfo;"
             "awk '/^Max msgqueue size/ {print \"msgqueue: \" $4}' /proc/self/limits");
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    const cf_bytes *o = &res.stdout_data;
    assert_true(out_has(o, "1000\n"));
    assert_true(out_has(o, "CapEff: 0000000000000000"));
    assert_true(out_has(o, "CapBnd: 0000000000000000"));
    assert_true(out_has(o, "NoNewPrivs: 1"));
    assert_true(out_has(o, "Seccomp: 2"));
    assert_true(out_has(o, "/run/codefleet-init --userns --ucount max_inotify_instances="));
    assert_true(out_has(o, " --seccomp "));
    assert_true(out_has(o, " -- /bin/sh"));
    /* Its share of root's inotify instances (crun makes the container's
     * namespace as root): the host's limit over twice the slots, which the
     * program cannot raise (its files are writable only with its
     * namespace's CAP_SYS_RESOURCE); the rest of /proc/sys stays mounted
     * read-only, user/ is not a read-only mount of its own. */
    long host = 0;
    FILE *hf = fopen("/proc/sys/fs/inotify/max_user_instances", "r");
    if (!hf || fscanf(hf, "%ld", &host) != 1)
        host = 0;
    if (hf)
        fclose(hf);
    char share[64];
    snprintf(share, sizeof(share), "inotify-share: %ld\n", host / (2L * SLOTS) > 0 ? host / (2L * SLOTS) : 1);
    if (host > 0 && !out_has(o, share))
        fail_msg("want %s in %.*s", share, (int)o->len, (const char *)o->data);
    assert_true(out_has(o, "share-held\n"));
    assert_true(out_has(o, "mount/proc/sys/kernel:ro,"));
    /* POSIX message queues' bytes, counted against root's RLIMIT_MSGQUEUE
     * too: the worker's over twice the slots. */
    struct rlimit mq;
    if (getrlimit(RLIMIT_MSGQUEUE, &mq) == 0 && mq.rlim_cur != RLIM_INFINITY) {
        char want_mq[64];
        snprintf(want_mq, sizeof(want_mq), "msgqueue: %llu\n", (unsigned long long)(mq.rlim_cur / (2 * SLOTS)));
        if (!out_has(o, want_mq))
            fail_msg("want %s in %.*s", want_mq, (int)o->len, (const char *)o->data);
    }
    assert_false(out_has(o, "mount/proc/sys/user:"));
    assert_true(out_has(o, "root-ro"));
    assert_true(out_has(o, ":/\n"));
    /* the map reads in container terms (a nested user namespace): no
     * host run uid */
    char map[64];
    snprintf(map, sizeof(map), " %d ", UID_BASE);
    assert_true(out_has(o, " 1000 1000 1"));
    assert_false(out_has(o, map));
    assert_true(out_has(o, "ok\nt\n/work\n"));
    /* the image is bound read-only, nosuid and nodev */
    assert_true(out_has(o, "root:ro,nosuid,nodev"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* POSIX message queues: the program's share is its own, and what root
 * holds on the host does not eat it (set before the container's namespace
 * was made, the share became the cap on all of root's: with two default
 * queues held by host root a container program got none). */
static void test_message_queue_share(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    struct mq_attr attr = {.mq_maxmsg = 10, .mq_msgsize = 8192};
    char names[2][64];
    mqd_t held[2];
    for (int i = 0; i < 2; i++) {
        snprintf(names[i], sizeof(names[i]), "/cf-test-mq-%d-%d", (int)getpid(), i);
        held[i] = mq_open(names[i], O_CREAT | O_RDWR | O_CLOEXEC, 0600, &attr);
    }
    if (held[0] == (mqd_t)-1 || held[1] == (mqd_t)-1) {
        for (int i = 0; i < 2; i++)
            if (held[i] != (mqd_t)-1) {
                mq_close(held[i]);
                mq_unlink(names[i]);
            }
        print_message("host root cannot hold two message queues here: nothing to show\n");
        skip();
    }
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_PYTHON,
             "import ctypes, os\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "libc.mq_open.restype = ctypes.c_int\n"
             "fd = libc.mq_open(b'/cf-in-container', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
             "print('mq:', 'ok' if fd >= 0 else os.strerror(ctypes.get_errno()))\n"
             "if fd >= 0: libc.mq_unlink(b'/cf-in-container')\n");
    int rc = run(f, &req, &res);
    for (int i = 0; i < 2; i++) {
        mq_close(held[i]);
        mq_unlink(names[i]);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    if (!out_has(&res.stdout_data, "mq: ok\n"))
        fail_msg("a container program got no message queue while host root held two: %.*s",
                 (int)res.stdout_data.len, (const char *)res.stdout_data.data);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* The program holds stdin, stdout and stderr and nothing else: not the
 * init's report pipe, not the runtime's log file. */
static void test_no_inherited_fds(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_PYTHON,
             "import os\nopen_fds = []\nfor fd in range(0, 1024):\n    try:\n        os.fstat(fd)\n"
             "        open_fds.append(fd)\n    except OSError:\n        pass\nprint(open_fds)\n"
             "for fd in (3, 4):\n    try:\n        os.open('/proc/1/fd/%d' % fd, os.O_WRONLY)\n        print('reached', fd)\n"
             "    except OSError as e:\n        print('refused', fd)\n");
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    if (!out_has(&res.stdout_data, "[0, 1, 2]\n") || out_has(&res.stdout_data, "reached"))
        fail_msg("fds: %.*s", (int)res.stdout_data.len, (const char *)res.stdout_data.data);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* The wall clock stops the container itself: nothing of it runs or is
 * listed afterwards. */
static void test_timeout_leaves_nothing(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init_timeout(&req, CF_LANG_SHELL, "sleep 120 & sleep 120; echo never", 1 * SEC);
    req.policy.network = CF_NET_DISABLED;
    int64_t t0 = cf_mono_us();
    assert_int_equal(run(f, &req, &res), 0);
    int64_t took = cf_mono_us() - t0;
    assert_int_equal(res.status, CF_STATUS_TIMEOUT);
    assert_true(took < 90 * SEC); /* ended by the 1 s timeout, not after the 120 s sleeps (emulation is slow) */
    assert_false(out_has(&res.stdout_data, "never"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

static void test_memory_hog(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_PYTHON, "b = []\nwhile True:\n    b.append(bytearray(8 << 20))\n");
    req.policy.memory_bytes = 64 * MIB;
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_MEMORY_EXCEEDED);
    cf_request_clear(&req);
    cf_result_clear(&res);
    /* tmpfs pages count too: /tmp cannot hold what memory may not. */
    req_init(&req, CF_LANG_SHELL, "head -c 120M /dev/zero > /dev/shm/big; echo wrote");
    req.policy.memory_bytes = 48 * MIB;
    assert_int_equal(run(f, &req, &res), 0);
    assert_true(res.status == CF_STATUS_MEMORY_EXCEEDED || res.status == CF_STATUS_FAILED);
    assert_false(out_has(&res.stdout_data, "wrote"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

static void test_fork_bomb(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init_timeout(&req, CF_LANG_PYTHON,
                     "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                     "            time.sleep(30)\n            os._exit(0)\n        n += 1\n"
                     "except OSError as e:\n    print('stopped after', n, e.errno)\n",
                     10 * SEC);
    req.policy.network = CF_NET_DISABLED;
    req.policy.max_processes = 20;
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_has(&res.stdout_data, "stopped after"));
    /* At most max_processes of the program's own (the runtime's few are
     * accounted apart). */
    int n = atoi((const char *)res.stdout_data.data + strlen("stopped after "));
    if (!(n > 0 && n < 20))
        fail_msg("forked %d with max_processes 20 (the program itself is one)", n);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* max_processes counts the program's processes only: one is enough for a
 * program that starts nothing (the runtime and the init are not its). */
static void test_one_process_is_enough(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_COMMAND, NULL);
    const char *argv[] = {"/bin/echo", "alone"};
    req_argv(&req, 2, argv);
    req.policy.max_processes = 1;
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "alone\n"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    /* and a second process is refused */
    req_init(&req, CF_LANG_SHELL, "/bin/true && echo forked || echo refused");
    req.policy.max_processes = 1;
    assert_int_equal(run(f, &req, &res), 0);
    assert_true(out_has(&res.stdout_data, "refused") || out_has(&res.stderr_data, "fork"));
    assert_false(out_has(&res.stdout_data, "forked"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* Small file-size and the queued-signal cap: a 1 KiB file limit stops the
 * program's writes, not the runtime (which once failed under it); a
 * program cannot queue more than its own cap of signals (they count
 * against root's quota up the user namespaces). */
static void test_file_size_and_signal_caps(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_SHELL, "echo ok; head -c 4096 /dev/zero > /tmp/big || echo refused");
    req.policy.max_file_size_bytes = 1024;
    assert_int_equal(run(f, &req, &res), 0);
    assert_true(out_has(&res.stdout_data, "ok\n"));
    assert_true(out_has(&res.stdout_data, "refused"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    req_init(&req, CF_LANG_PYTHON,
             "import ctypes, os, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\n"
             "libc = ctypes.CDLL(None, use_errno=True)\nn = 0\n"
             "while n < 200000 and libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), 0) == 0:\n    n += 1\n"
             "print('queued', n)\n");
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_has(&res.stdout_data, "queued "));
    int n = atoi(strstr((const char *)res.stdout_data.data, "queued ") + 7);
    if (n > 1024)
        fail_msg("queued %d signals", n);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* Output is handed over while the program runs (request "stream"). */
typedef struct stream_seen {
    int calls_with_data_before_final;
    bool final;
    int64_t first_data_us;
} stream_seen;

static int64_t on_output(void *arg, const cf_buf *out, const cf_buf *err, bool final, int64_t now_us)
{
    (void)err;
    stream_seen *s = arg;
    if (final) {
        s->final = true;
        return INT64_MAX;
    }
    if (out->len > 0 && s->calls_with_data_before_final++ == 0)
        s->first_data_us = now_us;
    return INT64_MAX;
}

static void test_streams_while_running(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_SHELL, "echo early; sleep 1; echo late");
    req.stream = true;
    stream_seen seen = {0};
    cf_exec_ctx ctx = {.slot = 0, .worker_id = "test", .on_output = on_output, .on_output_arg = &seen};
    memset(&res, 0, sizeof(res));
    cf_error err;
    cf_error_clear(&err);
    int64_t t0 = cf_mono_us();
    assert_int_equal(f->be->ops->execute(f->be->state, &ctx, &req, &res, &err), 0);
    int64_t end = cf_mono_us();
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(seen.final);
    assert_true(seen.calls_with_data_before_final >= 1);
    /* "early" arrived well before the program ended */
    assert_true(seen.first_data_us - t0 < end - t0 - 500000);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

static void test_output_flood_capped(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    /* 2 MB of output against a 64 KiB cap; finite, so that the run ends
     * when the flood does (a 3 s timeout on an endless one ended it before
     * the cap under emulation on a busy host). */
    req_init(&req, CF_LANG_SHELL, "yes flood | head -c 2000000");
    req.policy.max_stdout_bytes = 64 * 1024;
    req.policy.timeout_us = 60 * SEC;
    assert_int_equal(run(f, &req, &res), 0);
    assert_true(res.stdout_truncated);
    assert_true(res.stdout_data.len <= 64 * 1024);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* No network: neither the host's loopback (a listener here) nor outside. */
static void test_network_refused(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(ls, 4), 0);
    socklen_t al = sizeof(a);
    getsockname(ls, (struct sockaddr *)&a, &al);
    char code[512];
    snprintf(code, sizeof(code),
             "import socket\nfor h, p in (('127.0.0.1', %d), ('1.1.1.1', 53)):\n    try:\n"
             "        socket.create_connection((h, p), timeout=2)\n        print('reached', h)\n"
             "    except OSError as e:\n        print('refused', h)\n",
             ntohs(a.sin_port));
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_PYTHON, code);
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_has(&res.stdout_data, "refused 127.0.0.1"));
    assert_true(out_has(&res.stdout_data, "refused 1.1.1.1"));
    assert_false(out_has(&res.stdout_data, "reached"));
    close(ls);
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* network=enabled is egress only, as in the sandbox: the host's loopback,
 * slirp's gateway (the host), the host's own addresses and a private test
 * host are refused, the test host is reached when the profile allows its
 * range, and the program cannot change the routes that refuse. */
static void test_network_enabled_egress_only(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    assert_non_null(strstr(f->be->caps.notes, "network=enabled = egress only"));
    test_host th;
    assert_true(test_host_up(&th, "ct", "10.236"));
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(ls, 8), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &al), 0);
    int port = ntohs(a.sin_port);
    char code[2048];
    snprintf(code, sizeof(code),
             "import socket, subprocess\n"
             "for name, host, port in [('loopback', '127.0.0.1', %d), ('gateway', '10.0.2.2', %d), "
             "('host', '%s', %d), ('testhost', '%s', 7777)]:\n"
             "    s = socket.socket(); s.settimeout(3)\n"
             "    try:\n        s.connect((host, port)); print(name, 'ok', s.recv(5).decode() or '-')\n"
             "    except OSError as e:\n        print(name, 'failed', e.errno)\n"
             "import ctypes, struct\n"
             "# RTM_DELROUTE of the prohibit route for 10.0.0.0/8 over rtnetlink\n"
             "nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\n"
             "rt = struct.pack('BBBBBBBBI', 2, 8, 0, 0, 254, 0, 0, 8, 0)\n"
             "attr = struct.pack('HH4s', 8, 1, socket.inet_aton('10.0.0.0'))\n"
             "body = rt + attr\n"
             "msg = struct.pack('IHHII', 16 + len(body), 25, 0x5, 1, 0) + body\n"
             "nl.send(msg); r = nl.recv(4096)\n"
             "print('delroute', -struct.unpack('i', r[16:20])[0])\n",
             port, port, th.ours, port, th.peer);
    for (int i = 0; i < 2; i++) {
        cf_request req;
        cf_result res;
        req_init(&req, CF_LANG_PYTHON, code);
        req.policy.network = CF_NET_ENABLED;
        cf_cidr4 allow;
        cf_exec_ctx ctx = {.slot = 0, .worker_id = "test"};
        if (i == 1) { /* the profile allows the test host's range */
            struct in_addr in;
            inet_pton(AF_INET, th.peer, &in);
            allow.addr = htonl(ntohl(in.s_addr) & ~3u);
            allow.len = 30;
            ctx.net_allow = &allow;
            ctx.n_net_allow = 1;
        }
        memset(&res, 0, sizeof(res));
        cf_error err;
        cf_error_clear(&err);
        int rc = f->be->ops->execute(f->be->state, &ctx, &req, &res, &err);
        if (rc < 0)
            fail_msg("execute: %s", err.msg);
        assert_int_equal(res.status, CF_STATUS_SUCCESS);
        char out[1024];
        size_t ol = res.stdout_data.len < sizeof(out) - 1 ? res.stdout_data.len : sizeof(out) - 1;
        memcpy(out, res.stdout_data.data, ol);
        out[ol] = '\0';
        print_message("round %d:\n%s", i, out);
        assert_non_null(strstr(out, "loopback failed 111\n")); /* its own lo, not the host's */
        assert_non_null(strstr(out, "gateway failed 13\n"));   /* slirp's gateway is the host: refused */
        assert_non_null(strstr(out, "host failed 13\n"));      /* the host's own address: refused */
        assert_non_null(strstr(out, i == 0 ? "testhost failed 13\n" : "testhost ok hello\n"));
        assert_non_null(strstr(out, "delroute 1\n")); /* EPERM: no capability over the namespace */
        cf_result_clear(&res);
        cf_request_clear(&req);
    }
    struct sockaddr_in peer;
    socklen_t pl = sizeof(peer);
    int fl = 1;
    ioctl(ls, FIONBIO, &fl);
    assert_int_equal(accept(ls, (struct sockaddr *)&peer, &pl), -1);
    close(ls);
    test_host_down(&th);
    assert_int_equal(test_host_sh("pgrep -x slirp4netns >/dev/null"), 256);
    assert_nothing_left(f);
}

/* The environment is the allowlist's: nothing of the worker's. */
static void test_env_and_signals(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    setenv("CF_CT_SECRET", "worker-secret", 1);
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_SHELL, "env; kill -9 $$; echo survived");
    req_env(&req, "MINE", "yes");
    assert_int_equal(run(f, &req, &res), 0);
    /* The shell is not pid 1: its own SIGKILL ends it (a pid 1 would have
     * it ignored), and the result says so, not "exit 137". */
    assert_int_equal(res.status, CF_STATUS_FAILED);
    assert_int_equal(res.signal, SIGKILL);
    assert_true(out_has(&res.stdout_data, "MINE=yes"));
    assert_false(out_has(&res.stdout_data, "worker-secret"));
    assert_false(out_has(&res.stdout_data, "survived"));
    unsetenv("CF_CT_SECRET");
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* Files in, workspace files collected, nothing seen by the next run. */
static void test_files_and_isolation_between_runs(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_SHELL, "cat in.txt; echo made > new.txt; echo left > /tmp/left; sleep 60 &");
    req_file(&req, "in.txt", "placed\n");
    cf_file ws = {.path = "ws.txt"};
    cf_bytes_set(&ws.content, "workspace\n", 10);
    cf_exec_files files = {.place = &ws, .n_place = 1, .collect = true, .max_files = 10, .max_bytes = 1 << 20};
    cf_exec_ctx ctx = {.slot = 1, .worker_id = "test", .files = &files};
    memset(&res, 0, sizeof(res));
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(f->be->ops->execute(f->be->state, &ctx, &req, &res, &err), 0);
    assert_int_equal(res.status, CF_STATUS_SUCCESS);
    assert_true(out_is(&res.stdout_data, "placed\n"));
    bool saw_new = false;
    for (size_t i = 0; i < files.n_collected; i++)
        saw_new |= strcmp(files.collected[i].path, "new.txt") == 0;
    assert_true(saw_new);
    cf_workdir_files_free(files.collected, files.n_collected);
    free(files.collect_error);
    free(ws.content.data);
    cf_request_clear(&req);
    cf_result_clear(&res);
    /* The same slot again: a fresh work dir and /tmp. */
    req_init(&req, CF_LANG_SHELL, "ls; cat /tmp/left 2>/dev/null || echo clean");
    assert_int_equal(run_slot(f, 1, &req, &res), 0);
    assert_true(out_is(&res.stdout_data, "clean\n"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* Images: an unknown one is rejected with its name; compiled C through the
 * image's own compiler is the pipeline's, covered by the fleet test. */
static void test_unknown_image_rejected(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    cf_request req;
    cf_result res;
    req_init(&req, CF_LANG_SHELL, "echo hi");
    req.image = strdup("nope");
    assert_int_equal(run(f, &req, &res), 0);
    assert_int_equal(res.status, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "image 'nope'"));
    cf_request_clear(&req);
    cf_result_clear(&res);
    assert_nothing_left(f);
}

/* An image directory that others may write is refused at start. */
static void test_writable_image_refused(void **state)
{
    REQUIRE_ROOT();
    fixture *f = *state;
    char dir[] = "/tmp/cf-ctimg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    chmod(dir, 0777);
    char spec[128];
    snprintf(spec, sizeof(spec), "bad=%s", dir);
    cf_backend_config cfg = f->cfg;
    char init[PATH_MAX];
    snprintf(init, sizeof(init), "%s/backends/codefleet-container-init",
             getenv("CF_BINARY_DIR") ? getenv("CF_BINARY_DIR") : "build");
    cfg.settings = test_backend_settings(
        (const char *[]){"container-images", spec, "container-state", f->state, "container-init", init, NULL});
    cf_backend_set *set = NULL;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_backend_set_new("container", &cfg, &set, &err), -1);
    assert_non_null(strstr(err.msg, "writable by nobody else"));
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_languages_and_stdin),
        cmocka_unit_test(test_identity_and_confinement),
        cmocka_unit_test(test_message_queue_share),
        cmocka_unit_test(test_no_inherited_fds),
        cmocka_unit_test(test_timeout_leaves_nothing),
        cmocka_unit_test(test_memory_hog),
        cmocka_unit_test(test_fork_bomb),
        cmocka_unit_test(test_one_process_is_enough),
        cmocka_unit_test(test_streams_while_running),
        cmocka_unit_test(test_file_size_and_signal_caps),
        cmocka_unit_test(test_output_flood_capped),
        cmocka_unit_test(test_network_refused),
        cmocka_unit_test(test_network_enabled_egress_only),
        cmocka_unit_test(test_env_and_signals),
        cmocka_unit_test(test_files_and_isolation_between_runs),
        cmocka_unit_test(test_unknown_image_rejected),
        cmocka_unit_test(test_writable_image_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
