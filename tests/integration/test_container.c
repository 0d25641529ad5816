/* The container backend through the fleet: a real broker, a real worker
 * running crun with the default image deploy/images.sh built, the
 * dispatcher library.  Each language of the image, stdin, images by name,
 * a timeout that leaves no container (the runtime's own listing) and no
 * cgroup, and a worker SIGKILLed mid-run whose container the next worker's
 * start-up sweep removes (and whose request is answered).  The limits'
 * hostile cases are in tests/unit/test_container.c and the hostile suite's
 * container run (it_test_hostile_container). */
#include "it_support.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_dispatcher.h"
#include "cf_schema.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define SEC 1000000LL

static struct {
    it_topics t;
    it_worker w;
    cf_dispatcher *d;
    char state[96];       /* the runtime's --root */
    char cg_root[96];     /* cgroup parent, below each hierarchy */
    char work_root[96];
    char a_images[4200], a_state[128], a_cg[128], a_work[128];
    bool up;
} g;

static void image_dir(char *buf, size_t size)
{
    const char *e = getenv("CF_TEST_IMAGE");
    const char *images = getenv("CODEFLEET_IMAGES");
    if (e && e[0])
        cf_strlcpy(buf, e, size);
    else
        snprintf(buf, size, "%s/default/rootfs", images && images[0] ? images : "/var/lib/codefleet/images");
}

static void start_worker(const char *id)
{
    const char *extra[] = {"--slots=2", "--backends=container,sandbox", g.a_images, g.a_state, g.a_cg, g.a_work,
                           "--max-timeout=60s", NULL};
    it_worker_start(&g.w, &g.t, id, extra);
    if (!it_worker_wait_log(&g.w, "assigned", 60000)) {
        it_worker_dump_log(&g.w);
        fail_msg("worker %s did not start", id);
    }
}

static int setup_suite(void **state)
{
    (void)state;
    if (!it_brokers() || geteuid() != 0)
        return 0;
    char dir[PATH_MAX];
    image_dir(dir, sizeof(dir));
    if (access(dir, F_OK) < 0) {
        fprintf(stderr, "FAILED: no default image at %s (deploy/images.sh builds it)\n", dir);
        return -1;
    }
    /* The same image twice, under two names: requests choose by name. */
    snprintf(g.a_images, sizeof(g.a_images), "--container-images=default=%.2000s,second=%.2000s", dir, dir);
    snprintf(g.state, sizeof(g.state), "/run/cf-it-ct-%d", (int)getpid());
    snprintf(g.cg_root, sizeof(g.cg_root), "/cf-it-ct-%d", (int)getpid());
    snprintf(g.work_root, sizeof(g.work_root), "/tmp/cf-it-ct-XXXXXX");
    if (!mkdtemp(g.work_root) || chmod(g.work_root, 0711) < 0)
        return -1;
    snprintf(g.a_state, sizeof(g.a_state), "--container-state=%s", g.state);
    snprintf(g.a_cg, sizeof(g.a_cg), "--cgroup-root=%s", g.cg_root);
    snprintf(g.a_work, sizeof(g.a_work), "--work-root=%s", g.work_root);
    it_topics_create(&g.t, "container", 1);
    start_worker("ct-w1");
    g.d = it_dispatcher_new(&g.t);
    g.up = true;
    return 0;
}

static int teardown_suite(void **state)
{
    (void)state;
    if (!g.up)
        return 0;
    cf_dispatcher_destroy(g.d);
    int rc = g.w.pid > 0 ? it_worker_stop(&g.w, SIGTERM, 20000) : 0;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "rmdir %s 2>/dev/null; for c in /sys/fs/cgroup/*%s /sys/fs/cgroup/*/%s; do [ -d $c ] && rmdir $c; done "
             "2>/dev/null; rmdir %s/* %s 2>/dev/null; true",
             g.state, g.cg_root, g.cg_root, g.work_root, g.work_root);
    if (system(cmd) != 0)
        return -1;
    return rc == 0 ? 0 : -1;
}

#define REQUIRE()                                                                                              \
    do {                                                                                                       \
        if (!g.up)                                                                                             \
            skip();                                                                                            \
    } while (0)

static void show(const cf_result *res)
{
    json_t *j = cf_result_to_json(res);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    fprintf(stderr, "result: %.3000s\n", s ? s : "?");
    free(s);
    json_decref(j);
}

static void expect_status(const cf_result *res, cf_status st)
{
    if (res->status != st) {
        show(res);
        it_worker_dump_log(&g.w);
        fail_msg("status %s, want %s", cf_status_name(res->status), cf_status_name(st));
    }
}

static bool out_has(const cf_bytes *b, const char *s)
{
    return b->data && memmem(b->data, b->len, s, strlen(s)) != NULL;
}

/* Containers the runtime lists for this suite. */
static int count_containers(void)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "crun --root %s list -q 2>/dev/null", g.state);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int n = 0;
    char line[256];
    while (fgets(line, sizeof(line), p))
        n += line[0] != '\n';
    return pclose(p) == 0 ? n : -1;
}

/* Execution cgroups (cfct-*) in any hierarchy, in the suite's parent or
 * below any worker's own directory (cfw-*) there: a dead worker's too. */
static int count_cfct(const char *dir, int depth)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "cfct-", 5) == 0) {
            n++;
        } else if (depth == 0 && strncmp(de->d_name, "cfw-", 4) == 0) {
            char sub[700];
            snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
            n += count_cfct(sub, 1);
        }
    }
    if (d)
        closedir(d);
    return n;
}

static int count_exec_cgroups(void)
{
    int n = 0;
    const char *hier[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer",
                          "/sys/fs/cgroup/cpu,cpuacct"};
    for (size_t i = 0; i < sizeof(hier) / sizeof(hier[0]); i++) {
        char p[512];
        snprintf(p, sizeof(p), "%s%s", hier[i], g.cg_root);
        n += count_cfct(p, 0);
    }
    return n;
}

static void run(cf_request *req, cf_result *res)
{
    if (!req->backend)
        req->backend = strdup("container");
    req->policy.network = CF_NET_DISABLED;
    it_submit_wait(g.d, req, 90 * SEC, res);
}

static void each_language_of_the_image(void **state)
{
    (void)state;
    REQUIRE();
    static const struct {
        cf_language lang;
        const char *code;
        const char *want;
    } cases[] = {
        {CF_LANG_PYTHON, "import sys, platform\nprint('py', sys.stdin.read().strip(), platform.python_version()[:2])",
         "py via-kafka 3."},
        {CF_LANG_JAVASCRIPT, "let d='';process.stdin.on('data',c=>d+=c).on('end',()=>console.log('js',d.trim()))",
         "js via-kafka"},
        {CF_LANG_SHELL, "read x; echo sh $x; cat /etc/debian_version >/dev/null && echo debian", "sh via-kafka"},
        {CF_LANG_C, "#include <stdio.h>\nint main(void){char b[64];if(fgets(b,sizeof b,stdin))printf(\"c %s\",b);"
                    "return 0;}\n",
         "c via-kafka"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_request req;
        cf_result res;
        it_request_init(&req, cases[i].lang, cases[i].code);
        cf_bytes_set(&req.stdin_data, "via-kafka\n", 10);
        run(&req, &res);
        expect_status(&res, CF_STATUS_SUCCESS);
        assert_string_equal(res.meta.backend, "container");
        assert_string_equal(res.meta.isolation, "container");
        assert_string_equal(res.meta.sandbox, "default");
        if (!out_has(&res.stdout_data, cases[i].want)) {
            show(&res);
            fail_msg("%s: no '%s' in the output", cf_language_name(cases[i].lang), cases[i].want);
        }
        cf_result_clear(&res);
        cf_request_clear(&req);
    }
}

static void images_by_name(void **state)
{
    (void)state;
    REQUIRE();
    cf_request req;
    cf_result res;
    it_request_init(&req, CF_LANG_SHELL, "echo second");
    req.image = strdup("second");
    run(&req, &res);
    expect_status(&res, CF_STATUS_SUCCESS);
    assert_string_equal(res.meta.sandbox, "second");
    cf_result_clear(&res);
    cf_request_clear(&req);
    /* Not one of the worker's images. */
    it_request_init(&req, CF_LANG_SHELL, "echo x");
    req.image = strdup("ubuntu");
    run(&req, &res);
    expect_status(&res, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "image 'ubuntu'"));
    cf_result_clear(&res);
    cf_request_clear(&req);
    /* An image on another backend is a mistake, not ignored. */
    it_request_init(&req, CF_LANG_SHELL, "echo x");
    req.backend = strdup("sandbox");
    req.image = strdup("default");
    run(&req, &res);
    expect_status(&res, CF_STATUS_REJECTED);
    assert_non_null(strstr(res.reason, "only the container backend runs images"));
    cf_result_clear(&res);
    cf_request_clear(&req);
}

/* A profile naming an image the worker does not have is a configuration
 * error at start, not a rejection of every request later. */
static void profile_with_an_unknown_image_is_refused_at_start(void **state)
{
    (void)state;
    REQUIRE();
    it_worker w;
    const char *extra[] = {"--backends=container,sandbox", g.a_images, g.a_state, g.a_cg, g.a_work,
                           "--profile.default.images=default,nope", NULL};
    it_worker_start(&w, &g.t, "ct-badprofile", extra);
    int st = 0;
    pid_t r = 0;
    for (int i = 0; i < 600 && (r = waitpid(w.pid, &st, WNOHANG)) == 0; i++)
        usleep(50 * 1000);
    if (r != w.pid) {
        it_worker_stop(&w, SIGKILL, 1000);
        fail_msg("the worker started with a profile naming an unknown image");
    }
    w.pid = 0;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    if (!it_worker_log_contains(&w, "images: 'nope' is not one of the worker's container-images (default,second)")) {
        it_worker_dump_log(&w);
        fail_msg("no reason naming the image");
    }
}

/* Listed without container-images, the container backend is unavailable:
 * the worker says so at start, as a warning, and its capability lines
 * are whole (one log line each: the block in one message lost its last
 * lines, this one's included). */
static void container_without_images_is_said_unavailable(void **state)
{
    (void)state;
    REQUIRE();
    it_worker w;
    const char *extra[] = {"--backends=sandbox,process,wasm,js,container", g.a_state, g.a_cg, g.a_work, NULL};
    it_worker_start(&w, &g.t, "ct-noimages", extra);
    bool up = it_worker_wait_log(&w, "assigned", 60000);
    bool said = it_worker_log_contains(&w, "warn  worker: backend container is not available on this worker (") &&
                it_worker_log_contains(&w, "profile default: backend container is listed but not available here");
    bool lines = it_worker_log_contains(&w, "  sandbox (default): isolation=") &&
                 it_worker_log_contains(&w, "  process: isolation=") && it_worker_log_contains(&w, "  container: UNAVAILABLE (");
    it_worker_stop(&w, SIGTERM, 30000);
    if (!up || !said || !lines) {
        it_worker_dump_log(&w);
        fail_msg("started %d, the warning %d, every capability line %d", up, said, lines);
    }
}

/* network=enabled: the program gets egress only; the broker the worker
 * talks to (on this host) is refused. */
static void network_enabled_cannot_reach_the_broker(void **state)
{
    (void)state;
    REQUIRE();
    char host[64];
    cf_strlcpy(host, it_brokers(), sizeof(host));
    char *colon = strrchr(host, ':');
    assert_non_null(colon);
    *colon = '\0';
    char code[512];
    snprintf(code, sizeof(code),
             "import socket\ns = socket.socket(); s.settimeout(3)\ntry:\n    s.connect(('%s', %s)); print('reached')\n"
             "except OSError as e:\n    print('refused', e.errno)\n",
             strcmp(host, "127.0.0.1") == 0 ? "10.0.2.2" : host, colon + 1);
    cf_request req;
    cf_result res;
    it_request_init(&req, CF_LANG_PYTHON, code);
    req.backend = strdup("container");
    req.policy.network = CF_NET_ENABLED;
    it_submit_wait(g.d, &req, 60 * SEC, &res);
    expect_status(&res, CF_STATUS_SUCCESS);
    if (!out_has(&res.stdout_data, "refused 13")) {
        show(&res);
        fail_msg("the broker was not refused");
    }
    cf_result_clear(&res);
    cf_request_clear(&req);
}

/* Whether text holds a whitespace-separated number in [lo, hi). */
static bool has_number_in(const cf_bytes *b, long lo, long hi)
{
    char *text = strndup((const char *)b->data, b->len);
    assert_non_null(text);
    bool found = false;
    char *save = NULL;
    for (char *tok = strtok_r(text, " \t\n", &save); tok && !found; tok = strtok_r(NULL, " \t\n", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        found = *end == '\0' && v >= lo && v < hi;
    }
    free(text);
    return found;
}

/* What a program reads of its own mounts and ids names nothing of the
 * host (issue 33): no path of the worker's install (the init it binds is
 * the build tree's here), of the image's directory or of the work root,
 * and no host uid or gid in its maps (the slots' run ids are
 * run-uid-base + slot).  With the network enabled too: then slirp's
 * resolv.conf is bound in as well. */
static void mounts_and_id_maps_name_nothing_of_the_host(void **state)
{
    (void)state;
    REQUIRE();
    char given[PATH_MAX], image[PATH_MAX], install[PATH_MAX], work[PATH_MAX];
    image_dir(given, sizeof(given));
    const char *bin = getenv("CF_BINARY_DIR");
    assert_non_null(realpath(given, image));
    assert_non_null(realpath(bin ? bin : "build", install));
    assert_non_null(realpath(g.work_root, work));
    const char *base_s = getenv("CODEFLEET_WORKER_RUN_UID_BASE");
    long base = base_s && atol(base_s) > 0 ? atol(base_s) : 100000;
    static const cf_network_policy nets[] = {CF_NET_DISABLED, CF_NET_ENABLED};
    for (size_t i = 0; i < sizeof(nets) / sizeof(nets[0]); i++) {
        cf_request req;
        cf_result res;
        it_request_init(&req, CF_LANG_SHELL,
                        "echo M; cat /proc/self/mountinfo; echo U; tr -s ' ' </proc/self/uid_map; echo G; "
                        "tr -s ' ' </proc/self/gid_map; echo E");
        req.backend = strdup("container");
        req.policy.network = nets[i];
        it_submit_wait(g.d, &req, 90 * SEC, &res);
        expect_status(&res, CF_STATUS_SUCCESS);
        const cf_bytes *o = &res.stdout_data;
        /* All three were read: the root's line, a line of each map. */
        bool read_all = out_has(o, " / / ") && out_has(o, "\nU\n 1000 ") && out_has(o, "\nG\n 1000 ") &&
                        out_has(o, "\nE\n");
        bool leaks_install = out_has(o, install), leaks_image = out_has(o, image), leaks_work = out_has(o, work);
        bool leaks_id = has_number_in(o, base, base + 64);
        if (!read_all || leaks_install || leaks_image || leaks_work || leaks_id) {
            show(&res);
            fail_msg("network %d: read all %d; shows the install path %d (%s), the image's path %d (%s), the work "
                     "root %d (%s), a host run id %d (base %ld)",
                     (int)nets[i], read_all, leaks_install, install, leaks_image, image, leaks_work, work, leaks_id,
                     base);
        }
        cf_result_clear(&res);
        cf_request_clear(&req);
    }
}

/* The wall clock stops the container itself: afterwards the runtime lists
 * nothing and no execution cgroup is left. */
static void timeout_leaves_no_container(void **state)
{
    (void)state;
    REQUIRE();
    cf_request req;
    cf_result res;
    it_request_init(&req, CF_LANG_SHELL, "sleep 60 & sleep 60");
    req.policy.timeout_us = 2 * SEC;
    run(&req, &res);
    expect_status(&res, CF_STATUS_TIMEOUT);
    assert_int_equal(count_containers(), 0);
    assert_int_equal(count_exec_cgroups(), 0);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

/* A worker SIGKILLed while its container runs: the container outlives it
 * (nothing stops it but us), the next worker's sweep removes it and its
 * cgroup, and the request is answered by the next worker. */
static void killed_worker_leaves_nothing_after_restart(void **state)
{
    (void)state;
    REQUIRE();
    cf_request req;
    it_request_init(&req, CF_LANG_SHELL, "sleep 60");
    req.backend = strdup("container");
    req.policy.network = CF_NET_DISABLED;
    req.policy.timeout_us = 4 * SEC;
    cf_error err;
    cf_error_clear(&err);
    assert_int_equal(cf_dispatcher_submit(g.d, &req, &err), 0);
    int64_t until = cf_mono_us() + 60 * SEC;
    while (count_containers() < 1 && cf_mono_us() < until)
        usleep(50 * 1000);
    assert_int_equal(count_containers(), 1);
    it_worker_stop(&g.w, SIGKILL, 5000);
    usleep(300 * 1000);
    /* Left behind by the dead worker. */
    assert_true(count_containers() >= 1 || count_exec_cgroups() >= 1);
    start_worker("ct-w2");
    cf_result res;
    memset(&res, 0, sizeof(res));
    assert_int_equal(cf_dispatcher_wait(g.d, req.id, 90 * SEC, &res, &err), 0);
    expect_status(&res, CF_STATUS_TIMEOUT);
    if (!it_worker_log_contains(&g.w, "swept 1 container(s)")) {
        it_worker_dump_log(&g.w);
        fail_msg("the new worker did not sweep the dead worker's container");
    }
    assert_int_equal(count_containers(), 0);
    assert_int_equal(count_exec_cgroups(), 0);
    cf_result_clear(&res);
    cf_request_clear(&req);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_language_of_the_image),
        cmocka_unit_test(images_by_name),
        cmocka_unit_test(profile_with_an_unknown_image_is_refused_at_start),
        cmocka_unit_test(container_without_images_is_said_unavailable),
        cmocka_unit_test(network_enabled_cannot_reach_the_broker),
        cmocka_unit_test(mounts_and_id_maps_name_nothing_of_the_host),
        cmocka_unit_test(timeout_leaves_no_container),
        cmocka_unit_test(killed_worker_leaves_nothing_after_restart),
    };
    return cmocka_run_group_tests(tests, setup_suite, teardown_suite);
}
