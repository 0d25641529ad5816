/* container: each execution in an OCI container made by crun from an image
 * the operator allowed.
 *
 * Why crun and not podman: the worker already does what podman would add
 * (the execution's cgroup and its limits, OOM and kill-all, the files, the
 * output), so only the runtime is needed; crun is a C program that starts
 * in milliseconds, podman a Go program with an image store and a lock per
 * call (BENCHMARKS.md has both).  runc works too but is slower to start.
 *
 * Per execution (a slot runs one at a time):
 *   - a cgroup of its own (cf_cgroup: memory, pids, cpu accounting, OOM,
 *     kill-all), which crun and everything it starts run in: crun is told
 *     --cgroup-manager=disabled, so no runtime-made cgroup can be left;
 *   - a tmpfs (size and inode caps) holding work/ and run/ (exec_common)
 *     and the bundle's config.json and crun's log, outside what is bound
 *     into the container;
 *   - the image's root filesystem read-only, /work bound read-write (or
 *     read-only for workspace_ro), /run/codefleet read-only with its out/
 *     writable, private /tmp and /dev/shm tmpfs with size caps;
 *   - pid 1 is codefleet-container-init (static) bound in at
 *     /run/codefleet-init: it reaps orphans and forwards signals, so the
 *     program is not a pid 1 that ignores its own signals, and reports the
 *     program's own exit status or signal on a pipe (its fd 4);
 *   - new user (the program is uid 1000 inside, mapped to the slot's run
 *     uid alone; root is not mapped), pid, mount, network (loopback only),
 *     ipc, uts and cgroup namespaces; no capabilities at all;
 *     no_new_privs; the sandbox's very seccomp filter (the same BPF program:
 *     a foreign ABI kills the process, as in the sandbox), loaded by the
 *     init after it made a user namespace nested in the container's whose
 *     maps read "1000 1000 1" (see container_init.c);
 *   - what the program can read of its mounts names no host path of the
 *     worker: the root is a read-only overlay of the image (an own
 *     filesystem, so mountinfo shows "/" and not the image's directory;
 *     its options name the layers as /proc/self/fd/N), the init and the
 *     resolver file are bound from a small tmpfs of the instance holding
 *     copies, and /work and /run/codefleet come from the execution's tmpfs;
 *   - rlimits for cpu_time (backstop of the cgroup total), file size and
 *     open files;
 *   - the container is named <instance>-s<slot>-<n>; after any outcome the
 *     cgroup is killed and removed, and a runtime state left by a killed
 *     crun is deleted; a start-up sweep removes what a dead worker left
 *     (its cgroups, tmpfs mounts and containers).
 *
 * On a cgroup v1 host with a v2 hierarchy mounted as well ("hybrid"), crun
 * refuses to start; crun then runs in a private mount namespace where that
 * v2 mount is hidden (it uses none of it: cgroups are ours).
 */
#include "cf_backend.h"
#include "cf_exec.h"
#include "cf_cgroup.h"
#include "cf_child.h"
#include "cf_instance.h"
#include "cf_net.h"
#include "cf_seccomp.h"

#include "cf_log.h"
#include "cf_util.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <ftw.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/filter.h>
#include <openssl/evp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CT_PREFIX "cfct-"
#define IN_ID 1000
#define RUN_DIR "/run/codefleet"
#define INIT_IN "/run/codefleet-init"
#define MAX_IMAGES 16
#define MAX_JOIN_FDS 8
#define CT_UCOUNTS 4
#define CT_RO_SYS_MAX 24
#define DEFAULT_MEMORY (512LL << 20)
#define DEFAULT_PIDS 256
#define DEFAULT_TMP (64LL << 20)
#define DEFAULT_WORK (128LL << 20)
#define DEFAULT_INODES 16384
/* Besides the program's own: crun, which waits for the container, and
 * the init, its pid 1 (crun's setup child becomes the init). */
#define RUNTIME_PIDS 2
#define LOG_MAX 4096
#define DELETE_TIMEOUT_US (10 * 1000000LL)
#define CGROUP2_SUPER_MAGIC 0x63677270

typedef struct ct_image {
    char name[CF_IMAGE_NAME_MAX + 1];
    char root[PATH_MAX]; /* canonical */
    uint32_t languages;
    bool has_resolv;     /* /etc/resolv.conf to bind slirp's DNS onto */
    char bound[PATH_MAX]; /* <inst>/simg<k>: the image read-only, nosuid, nodev: the containers' root */
    bool overlaid;        /* an overlay of its own (else a bind, which shows the image's path) */
} ct_image;

typedef struct ct_slot {
    char mnt[PATH_MAX]; /* the per-execution tmpfs */
    bool mnt_made;
    unsigned seq;       /* executions of the slot: container and cgroup names */
} ct_slot;

typedef struct ct_state {
    cf_exec_base base;
    cf_cgroup_env *cgenv;
    char *seccomp_env;     /* CODEFLEET_INIT_SECCOMP=<base64 of the sandbox's BPF>, for the init */
    char runtime[PATH_MAX];
    char init[PATH_MAX];
    char own[PATH_MAX];      /* <inst>/sinit: tmpfs with copies of the init and resolv.conf */
    char init_copy[PATH_MAX]; /* <own>/codefleet-container-init: what containers bind */
    char state_root[PATH_MAX];
    char version[96];
    bool mask_unified;     /* hybrid host: hide the v2 mount from crun */
    bool no_nested_userns; /* the host forbids the init's nested user namespace (its trial said so) */
    /* Each execution's share of root's per-user kernel counters, set by the
     * init in its nested namespace ("--ucount NAME=N"; ct_ucounts). */
    char ucount_args[CT_UCOUNTS][64];
    int n_ucounts;

    /* readonlyPaths: /proc/sys's entries but user/ (the nested namespace's
     * own limits, writable only with its capabilities, which the init
     * drops), and the usual others. */
    char ro_sys[CT_RO_SYS_MAX][64];
    int n_ro_sys;
    char tag[64];          /* cfct-<pid>.<n> */
    char inst[PATH_MAX];   /* <work_root>/<tag> */
    char real_root[PATH_MAX];
    bool inst_bound;
    ct_image images[MAX_IMAGES];
    size_t n_images;
    char image_names[MAX_IMAGES * (CF_IMAGE_NAME_MAX + 1) + 1]; /* caps->images */
    char slirp[PATH_MAX];  /* network=enabled through it; "" not offered */
    char resolv[PATH_MAX]; /* <inst>/resolv.conf naming slirp's DNS */
    int slots;
    ct_slot *slot;
    int64_t uid_base, def_memory, def_pids, tmp_bytes, work_bytes, inodes;
} ct_state;

static atomic_int instance_counter;

static int64_t or_default(int64_t v, int64_t def)
{
    return v > 0 ? v : def;
}

/* ---- the runtime's child: cgroup, then (hybrid hosts) a private view ---- */

typedef struct ct_child {
    cf_cgroup *cg;
    int join_fds[MAX_JOIN_FDS];
    int n_join;
    bool cg_joined;  /* v2: created in the cgroup */
    bool mask_unified;
} ct_child;

/* In the child before crun is executed: async-signal-safe calls only. */
static int ct_child_setup(void *arg, const char **msg)
{
    ct_child *c = arg;
    if (c->n_join > 0 && cf_cgroup_join_self(c->join_fds, c->n_join) < 0) {
        *msg = "joining the execution's cgroup";
        return -1;
    }
    if (c->mask_unified) {
        if (unshare(CLONE_NEWNS) < 0) {
            *msg = "unshare(CLONE_NEWNS) for the runtime";
            return -1;
        }
        if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
            *msg = "making the runtime's mounts private";
            return -1;
        }
        if (mount("tmpfs", "/sys/fs/cgroup/unified", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                  "size=4k") < 0) {
            *msg = "hiding the cgroup v2 mount from the runtime";
            return -1;
        }
    }
    return 0;
}

static int ct_parent_setup(pid_t pid, void *arg, cf_error *err)
{
    ct_child *c = arg;
    /* No oom_score_adj games: the container's processes inherit crun's, and
     * crun applies a config.json value to itself too; a -1000 crun made the
     * program unkillable on a cgroup v2 kernel (the execution hung at its
     * memory limit until the wall clock). */
    if (c->cg && c->n_join == 0 && !c->cg_joined && cf_cgroup_attach(c->cg, pid, err) < 0)
        return -1;
    return 0;
}

/* Runs the runtime with argv (no stdin, small output), its own cgroup-less
 * helper calls: delete, --version.  Returns 0 when it ran; *o gets its
 * outcome. */
static int run_runtime(const ct_state *st, char *const *argv, bool mask, cf_run_outcome *o, cf_error *err)
{
    static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    ct_child c = {.mask_unified = mask};
    cf_run_spec spec = {.path = st->runtime, .argv = argv, .envp = envp, .cwd = "/", .max_stdout = 4096,
                        .max_stderr = 4096, .timeout_us = DELETE_TIMEOUT_US, .child_setup = ct_child_setup,
                        .child_setup_arg = &c};
    memset(o, 0, sizeof(*o));
    return cf_run(&spec, o, err);
}

/* Removes a container's runtime state (crun was killed before it could):
 * only when its state directory is there. */
static void delete_container(const ct_state *st, const char *id)
{
    char path[PATH_MAX];
    struct stat sb;
    if (snprintf(path, sizeof(path), "%s/%s", st->state_root, id) >= (int)sizeof(path) || lstat(path, &sb) < 0)
        return;
    /* --force kills what still runs; a container whose processes are all
     * gone (another pid namespace's, a previous life's) can fail it (no
     * pidfd to open) and goes with a plain delete. */
    char *force[] = {(char *)st->runtime, "--root", (char *)st->state_root, "delete", "--force", (char *)id, NULL};
    char *plain[] = {(char *)st->runtime, "--root", (char *)st->state_root, "delete", (char *)id, NULL};
    char *const *argvs[] = {force, plain};
    char why[200] = "";
    for (int i = 0; i < 2; i++) {
        cf_run_outcome o;
        cf_error e;
        cf_error_clear(&e);
        int rr = run_runtime(st, argvs[i], st->mask_unified, &o, &e);
        bool ok = rr == 0 && o.exited && o.exit_code == 0;
        if (!ok)
            cf_run_outcome_describe(&o, why, sizeof(why));
        cf_run_outcome_free(&o);
        if (ok || (lstat(path, &sb) < 0 && errno == ENOENT))
            return;
    }
    cf_log_warn("container", "could not delete container %s: %s", id, why);
}

/* ---- create / destroy ---- */

static void ct_destroy(void *state)
{
    ct_state *st = state;
    if (!st)
        return;
    for (int i = 0; st->slot && i < st->slots; i++)
        if (st->slot[i].mnt_made) {
            cf_instance_umount_below(st->slot[i].mnt);
            rmdir(st->slot[i].mnt);
        }
    free(st->slot);
    if (st->inst[0])
        cf_instance_remove_dir(st->inst, NULL, NULL);
    cf_cgroup_env_destroy(st->cgenv);
    free(st->seccomp_env);
    cf_exec_base_free(&st->base);
    free(st);
}

/* Whether path inside the image root is a directory (want_dir) or a
 * regular file, symlinks resolved inside the image. */
static bool image_has(const char *root, const char *path, bool want_dir)
{
    struct stat sb;
    return cf_exec_stat_in_root(root, path, &sb) && (want_dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode));
}

/* nftw's callback has no argument: the first offending entry, for the
 * message (the backend is created on one thread). */
static __thread char g_image_bad[PATH_MAX + 64];

static int image_entry_ok(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_SL || type == FTW_SLN)
        return 0; /* a link's own mode says nothing */
    if (type == FTW_NS || type == FTW_DNR) {
        snprintf(g_image_bad, sizeof(g_image_bad), "'%.4000s' cannot be read", path);
        return 1;
    }
    if (sb->st_uid != 0 || (sb->st_mode & 022)) {
        snprintf(g_image_bad, sizeof(g_image_bad), "'%.4000s' is %s", path,
                 sb->st_uid != 0 ? "not owned by root" : "writable by others than root");
        return 1;
    }
    return 0;
}

/* The directories above an image's root: the runtime sets the container
 * up inside its user namespace, where host root's 0700 directories (/root)
 * are closed, and whoever may rename one of them may swap the image. */
static int image_path_safe(const char *item, const ct_image *im, cf_error *err)
{
    struct stat sb;
    char walk[PATH_MAX];
    cf_strlcpy(walk, im->root, sizeof(walk));
    for (char *slash; (slash = strrchr(walk, '/')) && walk[1];) {
        if (stat(walk, &sb) < 0 || !(sb.st_mode & S_IXOTH))
            return cf_error_set(err, CF_E_INVALID,
                                "container: image '%s': '%s' does not let other uids through (needs o+x; "
                                "keep images out of home directories, e.g. in /var/lib/codefleet/images)",
                                item, walk);
        /* Whoever may rename a directory above the image may swap it
         * (a sticky /tmp lets nobody rename root's entries). */
        if (sb.st_uid != 0 || ((sb.st_mode & 022) && !(sb.st_mode & S_ISVTX)))
            return cf_error_set(err, CF_E_INVALID,
                                "container: image '%s': '%s' above it must be owned by root and writable by "
                                "nobody else",
                                item, walk);
        slash[slash == walk ? 1 : 0] = '\0';
    }
    return 0;
}

/* Whether the image has the codefleet layout and every entry is root's;
 * the languages it offers are the interpreters (and compilers) at the
 * paths the worker resolved. */
static int image_contents(const char *item, ct_image *im, const cf_backend_config *cfg, cf_error *err)
{
    /* Every entry of the image: a file another uid may change is a
     * program another uid chooses for every tenant. */
    g_image_bad[0] = '\0';
    if (nftw(im->root, image_entry_ok, 64, FTW_PHYS | FTW_MOUNT) != 0)
        return cf_error_set(err, CF_E_INVALID,
                            "container: image '%s': %s (everything in an image must be root's and writable "
                            "by nobody else; deploy/images.sh does so)",
                            item, g_image_bad[0] ? g_image_bad : "cannot be read");
    if (!image_has(im->root, "/work", true) || !image_has(im->root, RUN_DIR, true) ||
        !image_has(im->root, INIT_IN, false) || !image_has(im->root, "/tmp", true) ||
        !image_has(im->root, "/dev", true) || !image_has(im->root, "/proc", true))
        return cf_error_set(err, CF_E_INVALID,
                            "container: image '%s' lacks the codefleet layout (directories /work, %s, /tmp, "
                            "/dev, /proc and an empty file %s; see deploy/images.sh)",
                            item, RUN_DIR, INIT_IN);
    im->has_resolv = image_has(im->root, "/etc/resolv.conf", false);
    im->languages = 1u << CF_LANG_COMMAND;
    if (cfg->shell_path && cf_exec_file_in_root(im->root, cfg->shell_path))
        im->languages |= 1u << CF_LANG_SHELL;
    if (cfg->python_path && cf_exec_file_in_root(im->root, cfg->python_path))
        im->languages |= 1u << CF_LANG_PYTHON;
    if (cfg->node_path && cf_exec_file_in_root(im->root, cfg->node_path))
        im->languages |= 1u << CF_LANG_JAVASCRIPT;
    /* C and C++ through the compile pipeline, which runs its
     * compiler at the path it resolved on the host: offered where
     * the image has that very path. */
    if ((cfg->compiled_languages & (1u << CF_LANG_C)) && cfg->cc_path &&
        cf_exec_file_in_root(im->root, cfg->cc_path))
        im->languages |= 1u << CF_LANG_C;
    if ((cfg->compiled_languages & (1u << CF_LANG_CPP)) && cfg->cxx_path &&
        cf_exec_file_in_root(im->root, cfg->cxx_path))
        im->languages |= 1u << CF_LANG_CPP;
    return 0;
}

/* One container-images entry, "name=dir", into st->images. */
static int add_image(ct_state *st, char *item, const cf_backend_config *cfg, cf_error *err)
{
    char *eq = strchr(item, '=');
    if (!eq)
        return cf_error_set(err, CF_E_INVALID, "container: container-images entry '%s' is not name=directory",
                            item);
    *eq = '\0';
    if (!cf_image_name_valid(item))
        return cf_error_set(err, CF_E_INVALID, "container: '%s' is not an image name (a-z 0-9 . _ -)", item);
    for (size_t i = 0; i < st->n_images; i++)
        if (strcmp(st->images[i].name, item) == 0)
            return cf_error_set(err, CF_E_INVALID, "container: image '%s' listed twice", item);
    if (st->n_images == MAX_IMAGES)
        return cf_error_set(err, CF_E_LIMIT, "container: more than %d images", MAX_IMAGES);
    ct_image *im = &st->images[st->n_images];
    cf_strlcpy(im->name, item, sizeof(im->name));
    const char *dir = eq + 1;
    struct stat sb;
    if (dir[0] != '/')
        return cf_error_set(err, CF_E_INVALID, "container: image '%s': '%s' must be an absolute path", item,
                            dir);
    if (!realpath(dir, im->root) || stat(im->root, &sb) < 0 || !S_ISDIR(sb.st_mode))
        return cf_error_set(err, CF_E_UNSUPPORTED,
                            "container: image '%s': '%s' is not a directory (deploy/images.sh builds the "
                            "default image)",
                            item, dir);
    if (sb.st_uid != 0 || (sb.st_mode & 022))
        return cf_error_set(err, CF_E_INVALID,
                            "container: image '%s': %s must be owned by root and writable by nobody else",
                            item, im->root);
    if (image_path_safe(item, im, err) < 0 || image_contents(item, im, cfg, err) < 0)
        return -1;
    st->n_images++;
    return 0;
}

/* container-images: "name=dir,name=dir".  Each directory canonical, owned
 * by root and writable by nobody else (it is every container's root), with
 * the codefleet layout; its languages are the interpreters it has. */
static int parse_images(ct_state *st, const char *spec, const cf_backend_config *cfg, cf_error *err)
{
    const char *cursor = spec;
    cf_list_item it;
    while (cf_list_next(&cursor, &it)) {
        if (!it.len)
            continue;
        char item[PATH_MAX + CF_IMAGE_NAME_MAX + 2];
        if (it.len >= sizeof(item))
            return cf_error_set(err, CF_E_INVALID, "container: container-images entry too long");
        memcpy(item, it.s, it.len);
        item[it.len] = '\0';
        if (add_image(st, item, cfg, err) < 0)
            return -1;
    }
    if (st->n_images == 0)
        return cf_error_set(err, CF_E_UNSUPPORTED, "container: no images configured (container-images)");
    return 0;
}

/* A dead instance's containers in the runtime's state directory
 * (<tag>-s<slot>-<seq>): deleted first, which kills what still runs. */
static int sweep_containers(void *arg, const char *tag)
{
    ct_state *st = arg;
    int n = 0;
    DIR *d = opendir(st->state_root);
    if (!d)
        return 0;
    size_t tl = strlen(tag);
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, tag, tl) == 0 && de->d_name[tl] == '-') {
            delete_container(st, de->d_name);
            n++;
        }
    closedir(d);
    return n;
}

/* Removes what dead workers left: their containers in the runtime's state
 * directory, their cgroups, tmpfs mounts and directories. */
static void sweep(ct_state *st, cf_instance_swept *swept)
{
    cf_instance_sweep_opts so = {.real_root = st->real_root, .cgenv = st->cgenv, .prefix = CT_PREFIX,
                                 .log_sub = "container", .extra_dir = st->state_root, .extra = sweep_containers,
                                 .extra_arg = st};
    cf_instance_sweep(&so, swept);
}

static int mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    if (cf_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
        return -1;
    for (char *s = buf + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(buf, mode) < 0 && errno != EEXIST ? -1 : 0;
}

static int ct_trial(ct_state *st, cf_error *err);

/* ---- the container backend's own settings (its keys of the worker's configuration) ---- */

typedef struct ct_settings {
    char *images;
    char *runtime;
    char *init;
    char *state;
} ct_settings;

#define COFF(f) offsetof(ct_settings, f)
static const cf_conf_prop ct_props[] = {
    {"container-images", CF_CONF_STRING, COFF(images), 0, 4096, "", NULL,
     "Container backend: the images it may run, as name=root-filesystem-directory pairs, comma-separated (e.g. "
     "`default=/var/lib/codefleet/images/default/rootfs`; deploy/images.sh builds that one).  The first is the "
     "default; a profile's `images` narrows the list.  Each directory must have the codefleet layout (/work, "
     "/run/codefleet, /run/codefleet-init); the languages of an image are those whose interpreter it has.  Empty: "
     "the container backend is unavailable.", NULL},
    {"container-runtime", CF_CONF_STRING, COFF(runtime), 0, 1024, "/usr/bin/crun", NULL,
     "Container backend: the OCI runtime (crun; absolute path).", NULL},
    {"container-init", CF_CONF_STRING, COFF(init), 0, 1024, "", NULL,
     "Container backend: the statically linked init bound read-only into every container as its pid 1 (reaps "
     "orphans, forwards signals, reports the program's own exit or signal); default: the "
     "codefleet-container-init installed with this worker (libexec/codefleet of its prefix; none if missing "
     "there), or for a worker run from its build tree the one built with it.", NULL},
    {"container-state", CF_CONF_STRING, COFF(state), 0, 1024, "/run/codefleet/crun", NULL,
     "Container backend: the runtime's state directory (--root) for this host's codefleet containers; the "
     "start-up sweep removes what dead workers left in it.", NULL},
};

static void ct_describe_helper(const cf_backend_config *cfg, char *buf, size_t cap);

const cf_backend_settings cf_container_settings = {
    .family = "container", .props = ct_props, .nprops = sizeof(ct_props) / sizeof(ct_props[0]),
    .size = sizeof(ct_settings), .describe_helper = ct_describe_helper};

static void ct_describe_helper(const cf_backend_config *cfg, char *buf, size_t cap)
{
    const ct_settings *cs = cf_backend_settings_of(cfg, &cf_container_settings);
    char path[PATH_MAX];
    cf_backend_helper_path(cfg, cs->init, "codefleet-container-init", CF_DEFAULT_CONTAINER_INIT, path, sizeof(path));
    snprintf(buf, cap, "container init %s", path[0] ? path : "(none)");
}

/* Per-user kernel counters (inotify, fanotify) of whatever a container's
 * program makes are charged at every user-namespace level up to the host,
 * where the container's namespace (crun makes it as root) charges root.
 * So that one execution cannot take root's all (and with it every other
 * execution's and host root's), the init limits its nested namespace to a
 * share: the host's per-user limit over twice the slots, so that all
 * slots together hold at most half of root's. */
static const struct {
    const char *host; /* the host's per-user limit */
    const char *name; /* the namespace's own, under /proc/sys/user */
} ct_ucount_limits[CT_UCOUNTS] = {
    {"/proc/sys/fs/inotify/max_user_instances", "max_inotify_instances"},
    {"/proc/sys/fs/inotify/max_user_watches", "max_inotify_watches"},
    {"/proc/sys/fs/fanotify/max_user_groups", "max_fanotify_groups"},
    {"/proc/sys/fs/fanotify/max_user_marks", "max_fanotify_marks"},
};

static void ct_ucounts(ct_state *st)
{
    st->n_ucounts = 0;
    for (int i = 0; i < CT_UCOUNTS; i++) {
        long long host = 0;
        FILE *f = fopen(ct_ucount_limits[i].host, "re");
        if (!f)
            continue;
        if (fscanf(f, "%lld", &host) != 1)
            host = 0;
        fclose(f);
        if (host <= 0)
            continue;
        long long share = host / (2LL * st->slots);
        snprintf(st->ucount_args[st->n_ucounts++], sizeof(st->ucount_args[0]), "%s=%lld", ct_ucount_limits[i].name,
                 share > 0 ? share : 1);
    }
}

/* /proc/sys's entries for readonlyPaths, user/ left out (ct_state.ro_sys);
 * /proc/sys itself when it cannot be read. */
static void ct_ro_sys(ct_state *st)
{
    st->n_ro_sys = 0;
    DIR *d = opendir("/proc/sys");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "user") == 0 || strlen(e->d_name) > 40)
            continue;
        if (st->n_ro_sys == CT_RO_SYS_MAX) {
            /* More than any kernel has: all of it read-only, and then the
             * init cannot set its namespace's limits (ct_ucounts' are
             * dropped, and the capabilities say so). */
            st->n_ro_sys = 0;
            st->n_ucounts = 0;
            break;
        }
        snprintf(st->ro_sys[st->n_ro_sys++], sizeof(st->ro_sys[0]), "/proc/sys/%s", e->d_name);
    }
    if (d)
        closedir(d);
    if (st->n_ro_sys == 0) {
        cf_strlcpy(st->ro_sys[0], "/proc/sys", sizeof(st->ro_sys[0]));
        st->n_ro_sys = 1;
    }
}

/* The slot count, run uids and default limits, from the worker's
 * configuration. */
static void ct_limits(ct_state *st, const cf_backend_config *cfg)
{
    st->base.exec_where = " inside the container";
    st->slots = cfg->slots > 0 ? cfg->slots : 1;
    st->uid_base = cfg->run_uid_base > 0 ? cfg->run_uid_base : CF_RUN_UID_BASE_DEFAULT;
    st->def_memory = or_default(cfg->sandbox_memory_bytes, DEFAULT_MEMORY);
    st->def_pids = or_default(cfg->sandbox_pids_max, DEFAULT_PIDS);
    st->tmp_bytes = or_default(cfg->sandbox_tmp_bytes, DEFAULT_TMP);
    st->work_bytes = or_default(cfg->sandbox_work_bytes, DEFAULT_WORK);
    st->inodes = or_default(cfg->sandbox_inodes, DEFAULT_INODES);
    ct_ucounts(st);
    ct_ro_sys(st);
}

/* The runtime, the init and the runtime's state directory (made here),
 * each checked; and the canonical work root. */
static int ct_paths(ct_state *st, const cf_backend_config *cfg, const ct_settings *cs, cf_error *err)
{
    const char *rt = cs->runtime && cs->runtime[0] ? cs->runtime : "/usr/bin/crun";
    char init[PATH_MAX];
    cf_backend_helper_path(cfg, cs->init, "codefleet-container-init", CF_DEFAULT_CONTAINER_INIT, init, sizeof(init));
    const char *sroot = cs->state && cs->state[0] ? cs->state : "/run/codefleet/crun";
    if (rt[0] != '/' || access(rt, X_OK) < 0)
        return cf_error_set(err, CF_E_UNSUPPORTED,
                            "container: runtime '%s' is not an executable absolute path (install crun)", rt);
    if (init[0] != '/' || access(init, X_OK) < 0)
        return cf_error_set(err, CF_E_UNSUPPORTED,
                            "container: init '%s' is not an executable absolute path (codefleet-container-init)",
                            init);
    if (sroot[0] != '/')
        return cf_error_set(err, CF_E_INVALID, "container: container-state '%s' must be an absolute path", sroot);
    if (cf_strlcpy(st->state_root, sroot, sizeof(st->state_root)) >= sizeof(st->state_root) ||
        mkdir_p(st->state_root, 0700) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: state directory '%s'", sroot);
    cf_strlcpy(st->runtime, rt, sizeof(st->runtime));
    cf_strlcpy(st->init, init, sizeof(st->init));
    if (!realpath(st->base.work_root, st->real_root))
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: work_root '%s'", st->base.work_root);
    return 0;
}

/* The cgroup environment, and whether a hybrid host's v2 mount must be
 * hidden from crun. */
static int ct_cgroups(ct_state *st, const cf_backend_config *cfg, cf_error *err)
{
    cf_cgroup_env_opts cgo = {.own_dir = cfg->cgroup_own_dir,
                              .parent = cfg->cgroup_root && cfg->cgroup_root[0] ? cfg->cgroup_root : NULL,
                              .cpuacct = true};
    if (cf_cgroup_env_new(&cgo, &st->cgenv, err) < 0) {
        /* Memory, processes and kill-all are what a container is for here:
         * without cgroups the backend is not offered at all. */
        cf_error_wrap(err, "container: no usable cgroups");
        if (err)
            err->code = CF_E_UNSUPPORTED;
        return -1;
    }
    struct statfs sfs;
    st->mask_unified = cf_cgroup_env_version(st->cgenv) == CF_CGROUP_V1 &&
                       statfs("/sys/fs/cgroup/unified", &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC;
    return 0;
}

/* The sandbox's filter, compiled once: crun loads it as it is. */
static int ct_seccomp(ct_state *st, cf_error *err)
{
    cf_seccomp_prog *prog = NULL;
    if (cf_seccomp_prog_new(NULL, &prog, err) < 0)
        return -1;
    const struct sock_fprog *fp = cf_seccomp_prog_fprog(prog);
    size_t raw = (size_t)fp->len * sizeof(struct sock_filter);
    static const char var[] = "CODEFLEET_INIT_SECCOMP=";
    st->seccomp_env = malloc(sizeof(var) - 1 + 4 * ((raw + 2) / 3) + 1);
    if (st->seccomp_env) {
        memcpy(st->seccomp_env, var, sizeof(var) - 1);
        EVP_EncodeBlock((unsigned char *)st->seccomp_env + sizeof(var) - 1, (const unsigned char *)fp->filter,
                        (int)raw);
    }
    cf_seccomp_prog_destroy(prog);
    if (!st->seccomp_env)
        return cf_error_set(err, CF_E_NOMEM, "container: out of memory");
    return 0;
}

/* Removes what a previous life of this pid left under this instance's
 * name (its directory and its containers) and makes the directory anew;
 * errno is EEXIST when that failed. */
static void ct_reclaim_inst(ct_state *st)
{
    /* Its containers too: their names would come again. */
    DIR *sd = opendir(st->state_root);
    size_t tl = strlen(st->tag);
    struct dirent *de;
    while (sd && (de = readdir(sd)))
        if (strncmp(de->d_name, st->tag, tl) == 0 && de->d_name[tl] == '-')
            delete_container(st, de->d_name);
    if (sd)
        closedir(sd);
    cf_instance_remove_dir(st->inst, NULL, NULL);
    if (mkdir(st->inst, 0711) == 0)
        cf_exec_notes_add(&st->base, "removed %s, left by an earlier worker with this pid", st->inst);
    else
        errno = EEXIST;
}

/* This instance's directory <real_root>/<tag>, bound onto itself as a
 * private mount. */
static int ct_make_inst(ct_state *st, cf_error *err)
{
    snprintf(st->tag, sizeof(st->tag), CT_PREFIX "%d.%d", (int)getpid(), atomic_fetch_add(&instance_counter, 1));
    if (snprintf(st->inst, sizeof(st->inst), "%s/%s", st->real_root, st->tag) >= (int)sizeof(st->inst)) {
        st->inst[0] = '\0';
        return cf_error_set(err, CF_E_LIMIT, "container: work_root path too long");
    }
    /* 0711: the runtime reaches the images' binds below it from inside
     * the containers' user namespaces.  An existing one with this very
     * name is a previous life of this pid (a worker that is pid 1 of its
     * container, restarted on the same work root): its leftovers go. */
    int made = mkdir(st->inst, 0711) == 0 ? 0 : errno;
    if (made == EEXIST)
        ct_reclaim_inst(st);
    /* The first mkdir's errno is the cause when it failed otherwise
     * (EACCES, ENOSPC); access() would only say ENOENT. */
    if (made != 0 && made != EEXIST) {
        cf_error_set_errno(err, CF_E_SYSTEM, made, "container: mkdir %s", st->inst);
        st->inst[0] = '\0';
        return -1;
    }
    if (access(st->inst, F_OK) < 0 || chmod(st->inst, 0711) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: mkdir %s", st->inst);
        st->inst[0] = '\0';
        return -1;
    }
    /* Private, so the per-execution tmpfs mounts never propagate. */
    if (mount(st->inst, st->inst, NULL, MS_BIND, NULL) == 0) {
        st->inst_bound = true;
        (void)mount(NULL, st->inst, NULL, MS_PRIVATE, NULL);
    }
    return 0;
}

/* Each image once, read-only, nosuid and nodev (a setuid program or a
 * device node an image may hold means nothing inside), as an overlay of its
 * own whose layers are the image and an empty directory (overlayfs wants
 * two without an upper one): the containers' root is then the root of a
 * filesystem, and a program's /proc/self/mountinfo shows "/" where a bind
 * would show the image's directory on the host.  The layers are named
 * through /proc/self/fd, which is all the overlay's options show; no
 * redirects or metacopy are followed.  Where no overlay can be made (an
 * old kernel, a lower filesystem overlayfs refuses), a bind, and a note
 * says the path shows. */
static int ct_bind_images(ct_state *st, cf_error *err)
{
    char empty[PATH_MAX];
    if (snprintf(empty, sizeof(empty), "%.4000s/sempty", st->inst) >= (int)sizeof(empty))
        return cf_error_set(err, CF_E_LIMIT, "container: work_root path too long");
    if (mkdir(empty, 0755) < 0 && errno != EEXIST)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: mkdir %s", empty);
    int efd = open(empty, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    for (size_t k = 0; k < st->n_images; k++) {
        ct_image *im = &st->images[k];
        if (snprintf(im->bound, sizeof(im->bound), "%.4000s/simg%zu", st->inst, k) >= (int)sizeof(im->bound)) {
            cf_fd_close(&efd);
            return cf_error_set(err, CF_E_LIMIT, "container: work_root path too long");
        }
        if (mkdir(im->bound, 0755) < 0) {
            int e = errno;
            cf_fd_close(&efd);
            return cf_error_set_errno(err, CF_E_SYSTEM, e, "container: mkdir %s", im->bound);
        }
        int ifd = open(im->root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        char opts[160];
        snprintf(opts, sizeof(opts), "lowerdir=/proc/self/fd/%d:/proc/self/fd/%d,redirect_dir=nofollow,metacopy=off",
                 ifd, efd);
        im->overlaid = ifd >= 0 && efd >= 0 &&
                       mount("overlay", im->bound, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, opts) == 0;
        cf_fd_close(&ifd);
        if (im->overlaid)
            continue;
        if (mount(im->root, im->bound, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, im->bound, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0) {
            int e = errno;
            cf_fd_close(&efd);
            return cf_error_set_errno(err, CF_E_SYSTEM, e, "container: binding image '%s' at %s", im->name,
                                      im->bound);
        }
        cf_exec_notes_add(&st->base,
                          "image %s: no overlay could be made (%s): bound instead, so its programs see its "
                          "directory on this host in /proc/self/mountinfo",
                          im->name, strerror(errno));
    }
    cf_fd_close(&efd);
    return 0;
}

static int copy_file(const char *src, const char *dst, mode_t mode)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (out < 0) {
        int e = errno;
        close(in);
        errno = e;
        return -1;
    }
    char buf[65536];
    ssize_t n;
    int rc = 0;
    while ((n = read(in, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        for (ssize_t off = 0, w; n > 0 && off < n; off += w)
            if ((w = write(out, buf + off, (size_t)(n - off))) <= 0 && !(w < 0 && errno == EINTR)) {
                if (w == 0)
                    errno = EIO;
                n = -1;
            } else if (w < 0)
                w = 0;
        if (n < 0) {
            rc = -1;
            break;
        }
    }
    int e = errno;
    close(in);
    if (fchmod(out, mode) < 0 && rc == 0)
        rc = -1, e = errno;
    if (close(out) < 0 && rc == 0)
        rc = -1, e = errno;
    errno = e;
    return rc;
}

/* <inst>/sinit: a small read-only tmpfs with copies of the init and (for
 * network=enabled) of the resolver file, which containers bind from: a
 * bind of a file shows its path in its filesystem in the program's
 * /proc/self/mountinfo, and the init's is the worker's install path. */
static int ct_make_own(ct_state *st, cf_error *err)
{
    struct stat sb;
    if (snprintf(st->own, sizeof(st->own), "%.4000s/sinit", st->inst) >= (int)sizeof(st->own) ||
        snprintf(st->init_copy, sizeof(st->init_copy), "%s/codefleet-container-init", st->own) >=
            (int)sizeof(st->init_copy))
        return cf_error_set(err, CF_E_LIMIT, "container: work_root path too long");
    if (stat(st->init, &sb) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: %s", st->init);
    char opts[96];
    snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=16,mode=0755", (long long)sb.st_size + (1LL << 20));
    if (mkdir(st->own, 0755) < 0 || mount("tmpfs", st->own, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: tmpfs at %s", st->own);
    if (copy_file(st->init, st->init_copy, 0755) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: copying %s", st->init);
    if (st->resolv[0]) {
        char copy[PATH_MAX + 16];
        snprintf(copy, sizeof(copy), "%s/" CF_INSTANCE_RESOLV_NAME, st->own);
        if (copy_file(st->resolv, copy, 0644) < 0)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: copying %s", st->resolv);
        cf_strlcpy(st->resolv, copy, sizeof(st->resolv));
    }
    if (mount(NULL, st->own, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: read-only %s", st->own);
    return 0;
}

/* The slots and the path of each one's per-execution tmpfs. */
static int ct_make_slots(ct_state *st, cf_error *err)
{
    st->slot = calloc((size_t)st->slots, sizeof(*st->slot));
    if (!st->slot)
        return cf_error_set(err, CF_E_NOMEM, "container: out of memory");
    for (int i = 0; i < st->slots; i++)
        if (snprintf(st->slot[i].mnt, sizeof(st->slot[i].mnt), "%.4000s/s%d", st->inst, i) >=
            (int)sizeof(st->slot[i].mnt))
            return cf_error_set(err, CF_E_LIMIT, "container: work_root path too long");
    return 0;
}

/* What the backend offers: the images' languages and the controls. */
static void ct_fill_caps(const ct_state *st, cf_backend_caps *caps)
{
    memset(caps, 0, sizeof(*caps));
    caps->isolation = "container";
    for (size_t i = 0; i < st->n_images; i++)
        caps->languages |= st->images[i].languages;
    caps->controls = CF_CTL_TIMEOUT | CF_CTL_CPU_TIME | CF_CTL_MEMORY | CF_CTL_MAX_PROCESSES | CF_CTL_STDOUT_CAP |
                     CF_CTL_STDERR_CAP | CF_CTL_FILE_SIZE | CF_CTL_ENV_ALLOWLIST | CF_CTL_NETWORK_DISABLED |
                     CF_CTL_FS_NONE | CF_CTL_FS_WORKSPACE_RO | CF_CTL_FS_WORKSPACE_RW | CF_CTL_STREAM;
    if (st->slirp[0])
        caps->controls |= CF_CTL_NETWORK_ENABLED;
}

/* A note per image: its name, root and languages. */
static void ct_note_images(ct_state *st)
{
    for (size_t i = 0; i < st->n_images; i++) {
        char langs[160] = "";
        size_t used = 0;
        for (unsigned l = 1; l < CF_LANG__COUNT; l++)
            if (st->images[i].languages & (1u << l)) {
                int w = snprintf(langs + used, sizeof(langs) - used, "%s%s", used ? "," : "",
                                 cf_language_name((cf_language)l));
                if (w < 0 || (size_t)w >= sizeof(langs) - used)
                    break;
                used += (size_t)w;
            }
        cf_exec_notes_add(&st->base, "image %s%s = %s (%s)", st->images[i].name, i == 0 ? " (default)" : "",
                          st->images[i].root, langs);
    }
}

/* The notes on how the limits, the isolation and the network are made. */
static void ct_note_isolation(ct_state *st, size_t n_host, const char *netwhy)
{
    cf_exec_notes_add(&st->base,
                      "memory = cgroup v%d memory limit of the whole container incl. tmpfs/shm and the runtime "
                      "(default %lld MiB), OOM -> memory_exceeded; max_processes = pids cgroup (+%d for the runtime "
                      "and init; default %lld); cpu_time = the cgroup's total (incl. the runtime's few ms)",
                      cf_cgroup_env_version(st->cgenv) == CF_CGROUP_V2 ? 2 : 1, (long long)(st->def_memory >> 20),
                      RUNTIME_PIDS, (long long)st->def_pids);
    cf_exec_notes_add(&st->base,
                      "image root read-only, nosuid, nodev; uid 1000 inside = host uids %lld..%lld, root unmapped, seen by "
                      "the program through a nested user namespace as 1000 1000; no "
                      "capabilities, no_new_privs, the sandbox's seccomp filter (the same BPF); own pid/mount/net (loopback only)/ipc/uts/cgroup/"
                      "user namespaces; fs_mode=paths NOT offered; work dir tmpfs %lld MiB, /tmp and /dev/shm %lld "
                      "MiB",
                      (long long)st->uid_base, (long long)(st->uid_base + st->slots - 1),
                      (long long)(st->work_bytes >> 20), (long long)(st->tmp_bytes >> 20));
    if (!st->no_nested_userns && st->n_ucounts > 0) {
        char list[4 * 64] = "";
        for (int i = 0, used = 0; i < st->n_ucounts && used < (int)sizeof(list); i++)
            used += snprintf(list + used, sizeof(list) - (size_t)used, "%s%s", i ? ", " : "", st->ucount_args[i]);
        cf_exec_notes_add(&st->base,
                          "per-user kernel counters: the runtime makes the container's user namespace as root, so "
                          "what a program makes counts against root's limits too; each execution is held to a share "
                          "in its nested namespace (%s: the host's limit over twice the slots)",
                          list);
    } else {
        cf_exec_notes_add(&st->base, "per-user kernel counters NOT limited per execution (no nested user namespace): "
                                     "what a program makes (inotify instances, ...) counts against root's limits");
    }
    if (st->slirp[0])
        cf_exec_notes_add(&st->base,
                          "network=enabled = egress only, as in the sandbox: a network namespace of the worker's behind "
                          "slirp4netns (host loopback unreachable; private, link-local, shared, reserved and multicast "
                          "ranges and the host's %zu own addresses refused unless a profile allows a destination; no "
                          "IPv6); the program has no capability over it",
                          n_host);
    else
        cf_exec_notes_add(&st->base, "network=enabled NOT offered (%s)", netwhy);
}

/* caps->images: the image names, comma-separated, the default first. */
static void ct_list_images(ct_state *st)
{
    for (size_t i = 0, used = 0; i < st->n_images; i++) {
        int w = snprintf(st->image_names + used, sizeof(st->image_names) - used, "%s%s", i ? "," : "",
                         st->images[i].name);
        if (w > 0 && (size_t)w < sizeof(st->image_names) - used)
            used += (size_t)w;
    }
}

static int ct_create(const cf_backend_config *cfg, void **state, cf_backend_caps *caps, cf_error *err)
{
    *state = NULL;
    const ct_settings *cs = cf_backend_settings_of(cfg, &cf_container_settings);
    if (!cs->images || !cs->images[0])
        return cf_error_set(err, CF_E_UNSUPPORTED, "container: no images configured (container-images)");
    ct_state *st = calloc(1, sizeof(*st));
    if (!st)
        return cf_error_set(err, CF_E_NOMEM, "container: out of memory");
    if (cf_exec_base_init(&st->base, "container", cfg, err) < 0)
        goto fail;
    ct_limits(st, cfg);
    if (st->uid_base + st->slots > INT32_MAX) {
        cf_error_set(err, CF_E_INVALID, "container: run_uid_base %lld too large", (long long)st->uid_base);
        goto fail;
    }
    if (geteuid() != 0) {
        cf_error_set(err, CF_E_UNSUPPORTED, "container: the worker must run as root to use this backend");
        goto fail;
    }
    if (ct_paths(st, cfg, cs, err) < 0 || parse_images(st, cs->images, cfg, err) < 0 || ct_cgroups(st, cfg, err) < 0 ||
        ct_seccomp(st, err) < 0)
        goto fail;

    cf_instance_swept swept;
    sweep(st, &swept);
    if (ct_make_inst(st, err) < 0 || ct_bind_images(st, err) < 0 || ct_make_slots(st, err) < 0)
        goto fail;

    /* network=enabled: a network namespace of its own behind slirp4netns,
     * egress only, as in the sandbox. */
    char netwhy[200];
    size_t n_host = 0;
    if (cf_net_offer_check(cfg->slirp4netns_path, st->inst, netwhy, sizeof(netwhy), &n_host, st->resolv,
                           sizeof(st->resolv), err) < 0)
        goto fail;
    if (!netwhy[0])
        cf_strlcpy(st->slirp, cfg->slirp4netns_path, sizeof(st->slirp));
    if (ct_make_own(st, err) < 0)
        goto fail;

    /* The runtime, the init, the namespaces, the profile and an image, for
     * real: a container that prints the init's version. */
    if (ct_trial(st, err) < 0)
        goto fail;
    if (st->no_nested_userns)
        cf_exec_notes_add(&st->base, "no nested user namespace (this host forbids one to an unprivileged process, "
                          "e.g. kernel.unprivileged_userns_clone=0 or AppArmor's restriction): a program sees the "
                          "host uid in /proc/self/uid_map; every other control holds");

    ct_fill_caps(st, caps);
    cf_exec_notes_add(&st->base, "runtime %s (%s) with --cgroup-manager=disabled%s; %s as pid 1", st->runtime,
                      st->version, st->mask_unified ? ", in a mount namespace hiding the hybrid v2 mount" : "",
                      st->init);
    ct_note_images(st);
    ct_note_isolation(st, n_host, netwhy);
    if (swept.instances)
        cf_exec_notes_add(&st->base, "swept %d container(s), %d dir(s) and %d cgroup(s) of dead workers",
                          swept.runtime, swept.dirs, swept.cgroups);
    caps->notes = st->base.notes;
    ct_list_images(st);
    caps->images = st->image_names;
    st->base.languages = caps->languages;
    *state = st;
    return 0;
fail:
    ct_destroy(st);
    return -1;
}

/* ---- the bundle ---- */

static const char *rlimit_name(int resource)
{
    switch (resource) {
    case RLIMIT_CPU: return "RLIMIT_CPU";
    case RLIMIT_FSIZE: return "RLIMIT_FSIZE";
    case RLIMIT_NOFILE: return "RLIMIT_NOFILE";
    case RLIMIT_AS: return "RLIMIT_AS";
    case RLIMIT_CORE: return "RLIMIT_CORE";
    case RLIMIT_NPROC: return "RLIMIT_NPROC";
    case RLIMIT_STACK: return "RLIMIT_STACK";
    case RLIMIT_SIGPENDING: return "RLIMIT_SIGPENDING";
    default: return NULL;
    }
}

static json_t *mount_entry(const char *dst, const char *type, const char *src, const char *opts)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:[]}", "destination", dst, "type", type, "source", src, "options");
    if (!o)
        return NULL;
    json_t *arr = json_object_get(o, "options");
    const char *cursor = opts;
    cf_list_item it;
    while (cf_list_next(&cursor, &it))
        if (it.len && json_array_append_new(arr, json_stringn(it.s, it.len)) < 0) {
            json_decref(o);
            return NULL;
        }
    return o;
}

typedef struct ct_bundle_in {
    const ct_image *image;
    const cf_exec_job *job; /* NULL: the trial */
    const cf_run_spec *spec;
    const char *work_host;  /* NULL: nothing bound at /work */
    const char *run_host;
    const char *out_host;
    bool work_rw;
    uid_t host_id;
    long cpu_rlimit_s;      /* 0: none */
    const char *netns;      /* network=enabled: /proc/<holder>/ns/net; NULL: a new, empty one */
    const char *resolv;     /* bound onto /etc/resolv.conf; NULL: none */
} ct_bundle_in;

/* config.json text (caller frees), or NULL (out of memory). */
static char *bundle_config(const ct_state *st, const ct_bundle_in *in)
{
    const cf_run_spec *spec = in->spec;
    json_t *args = json_array(), *env = json_array(), *rl = json_array(), *mounts = json_array();
    json_t *ns = json_array(), *ro = json_array();
    json_t *cfg = NULL;
    bool ok = args && env && rl && mounts && ns && ro;
    static const char *const ro_paths[] = {"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sysrq-trigger"};
    for (size_t i = 0; ok && i < sizeof(ro_paths) / sizeof(ro_paths[0]); i++)
        ok = json_array_append_new(ro, json_string(ro_paths[i])) == 0;
    for (int i = 0; ok && i < st->n_ro_sys; i++)
        ok = json_array_append_new(ro, json_string(st->ro_sys[i])) == 0;
    static const char *const ns_types[] = {"pid", "network", "ipc", "uts", "mount", "user", "cgroup"};
    for (size_t i = 0; ok && i < sizeof(ns_types) / sizeof(ns_types[0]); i++) {
        json_t *e = json_pack("{s:s}", "type", ns_types[i]);
        if (e && in->netns && strcmp(ns_types[i], "network") == 0)
            ok = json_object_set_new(e, "path", json_string(in->netns)) == 0;
        ok = ok && json_array_append_new(ns, e) == 0;
    }
    /* The init as pid 1, the program its child (argv[0] as the program
     * sees its path: the interpreter's or the command's). */
    /* RLIMIT_CPU and RLIMIT_FSIZE are set by the init for the program
     * (the runtime would apply them to itself before writing its state),
     * and RLIMIT_MSGQUEUE too: a user namespace records its creator's
     * limit as the cap on what is charged through it at the level above,
     * so set by the runtime before it makes the container's namespace,
     * the share became the cap on everything root holds (an attack: a
     * container program got no queue at all once host root held two); set
     * by the init, it holds only the program.  The others through
     * config.json. */
    long long cpu = 0, fsize = -1, msgqueue = -1;
    for (int i = 0; i < spec->n_rlimits; i++) {
        if (spec->rlimits[i].resource == RLIMIT_CPU)
            cpu = in->cpu_rlimit_s > 0 ? in->cpu_rlimit_s : (long long)spec->rlimits[i].value;
        else if (spec->rlimits[i].resource == RLIMIT_FSIZE)
            fsize = (long long)spec->rlimits[i].value;
        else if (spec->rlimits[i].resource == RLIMIT_MSGQUEUE)
            msgqueue = (long long)spec->rlimits[i].value;
    }
    char cpu_s[32], fsize_s[32], msgqueue_s[32];
    snprintf(cpu_s, sizeof(cpu_s), "%lld", cpu);
    snprintf(fsize_s, sizeof(fsize_s), "%lld", fsize);
    snprintf(msgqueue_s, sizeof(msgqueue_s), "%lld", msgqueue);
    /* The init nests the user namespace and loads the filter itself
     * (container_init.c says why); its filter comes in its environment,
     * which it does not pass on. */
    ok = ok && json_array_append_new(args, json_string(INIT_IN)) == 0 &&
         (st->no_nested_userns || json_array_append_new(args, json_string("--userns")) == 0);
    for (int i = 0; ok && !st->no_nested_userns && i < st->n_ucounts; i++)
        ok = json_array_append_new(args, json_string("--ucount")) == 0 &&
             json_array_append_new(args, json_string(st->ucount_args[i])) == 0;
    ok = ok && json_array_append_new(args, json_string("--seccomp")) == 0;
    if (ok && cpu > 0)
        ok = json_array_append_new(args, json_string("--cpu")) == 0 &&
             json_array_append_new(args, json_string(cpu_s)) == 0;
    if (ok && fsize >= 0)
        ok = json_array_append_new(args, json_string("--fsize")) == 0 &&
             json_array_append_new(args, json_string(fsize_s)) == 0;
    if (ok && msgqueue >= 0)
        ok = json_array_append_new(args, json_string("--msgqueue")) == 0 &&
             json_array_append_new(args, json_string(msgqueue_s)) == 0;
    ok = ok && json_array_append_new(args, json_string("--")) == 0 &&
         json_array_append_new(args, json_string(spec->path)) == 0;
    for (size_t i = 1; ok && spec->argv[0] && spec->argv[i]; i++)
        ok = json_array_append_new(args, json_string(spec->argv[i])) == 0;
    /* The program's environment never names the init's filter variable:
     * crun keeps the last of two, another runtime might keep the first,
     * and a request's own filter must never be the one loaded. */
    for (size_t i = 0; ok && spec->envp && spec->envp[i]; i++)
        if (strncmp(spec->envp[i], "CODEFLEET_INIT_SECCOMP=", 23) != 0)
            ok = json_array_append_new(env, json_string(spec->envp[i])) == 0;
    ok = ok && json_array_append_new(env, json_string(st->seccomp_env)) == 0;
    for (int i = 0; ok && i < spec->n_rlimits; i++) {
        int res = spec->rlimits[i].resource;
        const char *n = rlimit_name(res);
        if (!n || res == RLIMIT_CPU || res == RLIMIT_FSIZE || res == RLIMIT_MSGQUEUE)
            continue;
        json_int_t v = (json_int_t)spec->rlimits[i].value;
        ok = json_array_append_new(rl, json_pack("{s:s, s:I, s:I}", "type", n, "soft", v, "hard", v)) == 0;
    }
    ok = ok && json_array_append_new(rl, json_pack("{s:s, s:I, s:I}", "type", "RLIMIT_CORE", "soft",
                                                   (json_int_t)0, "hard", (json_int_t)0)) == 0;

    char tmp_opts[128], shm_opts[128];
    snprintf(tmp_opts, sizeof(tmp_opts), "nosuid,nodev,mode=1777,size=%lld,nr_inodes=%lld", (long long)st->tmp_bytes,
             (long long)st->inodes);
    snprintf(shm_opts, sizeof(shm_opts), "nosuid,nodev,noexec,mode=1777,size=%lld,nr_inodes=%lld",
             (long long)st->tmp_bytes, (long long)st->inodes);
    ok = ok && json_array_append_new(mounts, mount_entry("/proc", "proc", "proc", "nosuid,noexec,nodev")) == 0 &&
         json_array_append_new(mounts, mount_entry("/dev", "tmpfs", "tmpfs", "nosuid,noexec,strictatime,mode=755,"
                                                                              "size=256k,nr_inodes=256")) == 0 &&
         json_array_append_new(mounts, mount_entry("/dev/shm", "tmpfs", "shm", shm_opts)) == 0 &&
         json_array_append_new(mounts, mount_entry("/tmp", "tmpfs", "tmpfs", tmp_opts)) == 0 &&
         json_array_append_new(mounts, mount_entry(INIT_IN, "bind", st->init_copy, "bind,ro,nosuid,nodev")) == 0;
    if (ok && in->work_host)
        ok = json_array_append_new(mounts, mount_entry("/work", "bind", in->work_host,
                                                       in->work_rw ? "rbind,rw,nosuid,nodev"
                                                                   : "rbind,ro,nosuid,nodev")) == 0 &&
             json_array_append_new(mounts, mount_entry(RUN_DIR, "bind", in->run_host, "rbind,ro,nosuid,nodev")) == 0 &&
             json_array_append_new(mounts,
                                   mount_entry(RUN_DIR "/out", "bind", in->out_host, "rbind,rw,nosuid,nodev")) == 0;
    if (ok && in->resolv)
        ok = json_array_append_new(mounts, mount_entry("/etc/resolv.conf", "bind", in->resolv,
                                                       "bind,ro,nosuid,nodev,noexec")) == 0;
    json_error_t jerr;
    if (ok) {
        cfg = json_pack_ex(&jerr, 0, 
            "{s:s, s:{s:b, s:{s:i, s:i}, s:O, s:O, s:s, s:b, s:{s:[], s:[], s:[], s:[], s:[]}, s:O},"
            " s:{s:s, s:b}, s:s, s:O,"
            " s:{s:O, s:[{s:i, s:i, s:i}], s:[{s:i, s:i, s:i}],"
            "    s:[s,s,s,s,s,s,s,s,s], s:O}}",
            "ociVersion", "1.0.2",
            "process", "terminal", 0, "user", "uid", IN_ID, "gid", IN_ID, "args", args, "env", env, "cwd",
            spec->cwd ? spec->cwd : "/", "noNewPrivileges", 1, "capabilities", "bounding", "effective",
            "inheritable", "permitted", "ambient", "rlimits", rl,
            "root", "path", in->image->bound, "readonly", 1,
            "hostname", "codefleet",
            "mounts", mounts,
            "linux", "namespaces", ns,
            "uidMappings", "containerID", IN_ID, "hostID", (int)in->host_id, "size", 1,
            "gidMappings", "containerID", IN_ID, "hostID", (int)in->host_id, "size", 1,
            "maskedPaths", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
            "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
            "readonlyPaths", ro);
        /* No "seccomp" profile for the runtime: the init loads the
         * sandbox's BPF, and refuses to run the program when it cannot. */
    }
    json_decref(args);
    json_decref(env);
    json_decref(rl);
    json_decref(mounts);
    json_decref(ns);
    json_decref(ro);
    if (!cfg) {
        if (ok)
            cf_log_error("container", "config.json: %s", jerr.text);
        return NULL;
    }
    char *text = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
    return text;
}

static int write_file(const char *dir, const char *name, const char *text, cf_error *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return cf_error_set(err, CF_E_LIMIT, "container: path too long");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: create %s", path);
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            return cf_error_set_errno(err, CF_E_SYSTEM, e, "container: write %s", path);
        }
        off += (size_t)w;
    }
    close(fd);
    return 0;
}

/* The runtime's own error, from its JSON log: "" when it logged none. */
static void runtime_error(const char *bundle, char *msg, size_t size)
{
    msg[0] = '\0';
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/log", bundle) >= (int)sizeof(path))
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    char buf[LOG_MAX + 1];
    ssize_t n = read(fd, buf, LOG_MAX);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    /* One JSON object per line; the first error is the cause. */
    for (char *line = buf, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        json_t *o = json_loads(line, 0, NULL);
        const char *level = json_string_value(json_object_get(o, "level"));
        const char *m = json_string_value(json_object_get(o, "msg"));
        if (level && m && strcmp(level, "error") == 0) {
            cf_printable(m, strlen(m), msg, size);
            json_decref(o);
            return;
        }
        json_decref(o);
    }
}

/* ---- one container ---- */

typedef struct ct_run {
    ct_state *st;
    ct_slot *s;
    int slot;
    const ct_image *image;
    cf_cgroup *cg;
    int helpers;          /* processes of ours in the cgroup besides the container's (network) */
    ct_child child;
    char id[128];
    char bundle[PATH_MAX];
    bool mounted;
    bool reported; /* the init reported the program's end */
    bool setup_failed_userns; /* the init could not nest its user namespace */
} ct_run;

static void ct_run_cleanup(ct_run *r)
{
    if (r->cg)
        cf_cgroup_kill_all(r->cg);
    if (r->id[0])
        delete_container(r->st, r->id);
    while (r->child.n_join > 0)
        close(r->child.join_fds[--r->child.n_join]);
    cf_cgroup_destroy(r->cg);
    r->cg = NULL;
}

static void ct_run_unmount(ct_run *r)
{
    if (r->mounted)
        (void)umount2(r->s->mnt, MNT_DETACH);
    r->mounted = false;
}

/* The execution's cgroup, tmpfs and bundle directory. */
static int ct_run_begin(ct_run *r, const cf_cgroup_limits *lim, cf_error *err)
{
    ct_state *st = r->st;
    ct_slot *s = r->s;
    unsigned seq = s->seq++;
    snprintf(r->id, sizeof(r->id), "%s-s%d-%u", st->tag, r->slot, seq);
    if (cf_cgroup_new(st->cgenv, r->id, lim, &r->cg, err) < 0) {
        r->id[0] = '\0';
        cf_error_wrap(err, "container: cgroup");
        if (err)
            err->retriable = true;
        return -1;
    }
    int n = cf_cgroup_join_fds(r->cg, r->child.join_fds, MAX_JOIN_FDS, err);
    if (n < 0)
        return -1;
    r->child.n_join = n;
    r->child.cg = r->cg;
    r->child.mask_unified = st->mask_unified;
    if (!s->mnt_made) {
        if (mkdir(s->mnt, 0711) < 0 && errno != EEXIST)
            return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: mkdir %s", s->mnt);
        s->mnt_made = true;
    }
    char opts[128];
    snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=%lld,mode=0711", (long long)st->work_bytes,
             (long long)st->inodes);
    if (mount("tmpfs", s->mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: mounting the work tmpfs on %s", s->mnt);
        if (err)
            err->retriable = true;
        return -1;
    }
    r->mounted = true;
    /* The bundle (config.json, the runtime's log) lives beside the tmpfs,
     * not on it: a request that fills its work tmpfs cannot keep the
     * runtime from starting or from logging why it failed. */
    if (snprintf(r->bundle, sizeof(r->bundle), "%s.bundle", s->mnt) >= (int)sizeof(r->bundle) ||
        (mkdir(r->bundle, 0700) < 0 && errno != EEXIST))
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: bundle directory");
    char logp[PATH_MAX + 8];
    snprintf(logp, sizeof(logp), "%s/log", r->bundle);
    if (unlink(logp) < 0 && errno != ENOENT)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: %s", logp);
    return 0;
}

/* Whether pid is in the execution's cgroup (its name ends the path in
 * /proc/<pid>/cgroup, on every hierarchy it is in). */
static bool in_exec_cgroup(pid_t pid, const char *id)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    size_t il = strlen(id);
    for (const char *p = buf; (p = strstr(p, id)); p += il)
        if (p > buf && p[-1] == '/' && (p[il] == '\n' || p[il] == '\0'))
            return true;
    return false;
}

/* The runner's kill_all.  The container's pid 1 (the init, the runtime's
 * child) goes first: the kernel then kills everything in its pid
 * namespace, and the runtime reaps it, removes the container and exits
 * like after any other end.  Killing the runtime with the rest would leave
 * the init a zombie for the host's pid 1 to reap and the container's state
 * behind.  Only processes of this execution's cgroup are signalled, each
 * through a pidfd taken before the check (pid may be reaped already, a
 * child's pid reused).  Whatever remains then dies with the cgroup. */
static void ct_kill_all(pid_t pid, void *arg)
{
    ct_run *r = arg;
    if (pid > 0 && in_exec_cgroup(pid, r->id)) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t len = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
            close(fd);
        bool killed = false;
        if (len > 0)
            buf[len] = '\0';
        for (char *p = buf, *end; len > 0 && p < buf + len; p = end) {
            long c = strtol(p, &end, 10);
            if (end == p)
                break;
            int pfd = c > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)c, 0) : -1;
            if (pfd < 0)
                continue;
            if (in_exec_cgroup((pid_t)c, r->id))
                killed |= syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0) == 0;
            close(pfd);
        }
        /* The runtime's own exit, briefly: it only reaps and cleans up. */
        for (int i = 0; killed && i < 200 && cf_cgroup_nprocs(r->cg) > r->helpers; i++)
            usleep(5000);
    }
    cf_cgroup_kill_all(r->cg);
}

/* Writes the bundle and runs the container to its end.  A runtime that
 * failed before the program started is the backend's error (-1). */
static int ct_run_container(ct_run *r, const ct_bundle_in *in, cf_run_spec *spec, cf_run_outcome *o, cf_error *err)
{
    ct_state *st = r->st;
    char *config = bundle_config(st, in);
    if (!config)
        return cf_error_set(err, CF_E_NOMEM, "container: out of memory (config.json)");
    int rc = write_file(r->bundle, "config.json", config, err);
    free(config);
    if (rc < 0)
        return -1;
    char logopt[PATH_MAX + 16];
    snprintf(logopt, sizeof(logopt), "--log=file:%s/log", r->bundle);
    /* fd 4 of the runtime (the runner's pass_fd) is the init's report
     * pipe; fd 3 is whatever the runtime opens first, which the init
     * closes. */
    char *argv[] = {st->runtime, "--root",  st->state_root, "--cgroup-manager=disabled", logopt,
                    "--log-format=json", "run", "--preserve-fds=2", "--bundle", r->bundle, r->id, NULL};
    static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    spec->path = st->runtime;
    spec->argv = argv;
    spec->envp = envp;
    spec->cwd = "/";
    spec->n_rlimits = 0; /* the container's, in config.json; not the runtime's */
    spec->set_ids = false;
    spec->stdio_owner_set = true;
    spec->stdio_uid = in->host_id;
    spec->stdio_gid = in->host_id;
    spec->child_setup = ct_child_setup;
    spec->child_setup_arg = &r->child;
    spec->parent_setup = ct_parent_setup;
    spec->parent_setup_arg = &r->child;
    r->child.cg_joined = false;
    spec->cgroup_fd = r->child.n_join == 0 ? cf_cgroup_dir_fd(r->cg) : 0;
    if (spec->cgroup_fd < 0)
        spec->cgroup_fd = 0;
    spec->cgroup_joined = &r->child.cg_joined;
    spec->kill_all = ct_kill_all;
    spec->kill_all_arg = r;
    int rep[2];
    if (pipe2(rep, O_CLOEXEC) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: pipe");
    spec->pass_fd = rep[1]; /* cf_run's from here on */
    (void)fcntl(rep[0], F_SETFL, O_NONBLOCK); /* read once every writer is dead */
    if (cf_run(spec, o, err) < 0) {
        close(rep[0]);
        return cf_error_wrap(err, "container");
    }
    cf_cgroup_kill_all(r->cg);
    /* Every writer is gone (the runtime and the container ended). */
    char line[64];
    ssize_t n = read(rep[0], line, sizeof(line) - 1);
    close(rep[0]);
    int v;
    r->reported = false;
    if (n > 0 && !o->timed_out && !o->cancelled && !o->cpu_exceeded) {
        r->reported = true;
        line[n] = '\0';
        /* The program's own end, not the runtime's 128+N. */
        char step[16] = "";
        if (strncmp(line, "setup-failed", 12) == 0) {
            /* The container's fault: the program never ran.  Only a host
             * that forbids the nested namespace (EPERM, EACCES) is a
             * reason to go without it; a namespace quota used up for a
             * moment is not. */
            v = 0;
            if (sscanf(line, "setup-failed-%15[a-z] %d", step, &v) < 2 && sscanf(line, "setup-failed %d", &v) < 1)
                v = EIO;
            r->setup_failed_userns = strcmp(step, "userns") == 0 && (v == EPERM || v == EACCES);
            cf_error_set_errno(err, CF_E_SANDBOX, v > 0 ? v : EIO,
                               "container: the init could not confine the program (%s)",
                               strcmp(step, "userns") == 0    ? "its nested user namespace"
                               : strcmp(step, "ucounts") == 0 ? "its nested namespace's kernel counter limits"
                               : strcmp(step, "seccomp") == 0 ? "the seccomp filter"
                                                              : "an init of another version?");
            if (err)
                err->retriable = false;
            return -1;
        } else if (sscanf(line, "exec-failed %d", &v) == 1 && v > 0) {
            o->exited = true;
            o->exit_code = 127;
            o->signal = 0;
            o->exec_failed = true;
            o->exec_errno = v;
        } else if (sscanf(line, "signaled %d", &v) == 1 && v > 0 && v < 65) {
            o->exited = false;
            o->exit_code = 0;
            o->signal = v;
        } else if (sscanf(line, "exited %d", &v) == 1 && v >= 0 && v < 256) {
            o->exited = true;
            o->exit_code = v;
            o->signal = 0;
        }
    }
    if (o->timed_out || o->cancelled || o->cpu_exceeded)
        return 0;
    char msg[512];
    runtime_error(r->bundle, msg, sizeof(msg));
    if (msg[0] && !(o->exited && o->exit_code == 0)) {
        cf_error_set(err, CF_E_SANDBOX, "container: the runtime failed: %s", msg);
        if (err)
            err->retriable = false;
        return -1;
    }
    return 0;
}

/* The trial container of ct_create, once. */
static int ct_trial_once(ct_state *st, bool *userns_refused, cf_error *err)
{
    /* The init running itself as the program: its nested user namespace
     * and the filter are tried too. */
    char *targv[] = {INIT_IN, "--version", NULL};
    static char *const tenv[] = {"PATH=/usr/bin:/bin", NULL};
    ct_run r = {.st = st, .s = &st->slot[0], .slot = 0, .image = &st->images[0]};
    cf_cgroup_limits lim = {.memory_bytes = 64LL << 20, .pids_max = 16};
    cf_run_spec spec = {.path = INIT_IN, .argv = targv, .envp = tenv, .cwd = "/", .max_stdout = 4096,
                        .max_stderr = 4096, .timeout_us = 20 * 1000000LL};
    ct_bundle_in in = {.image = r.image, .spec = &spec, .host_id = (uid_t)st->uid_base};
    cf_run_outcome o;
    memset(&o, 0, sizeof(o));
    int rc = ct_run_begin(&r, &lim, err);
    if (rc == 0) {
        /* The spec is rewritten for the runtime: keep the program's part. */
        cf_run_spec prog = spec;
        in.spec = &prog;
        rc = ct_run_container(&r, &in, &spec, &o, err);
    }
    if (rc == 0 && !(o.exited && o.exit_code == 0 && o.out.len && memmem(o.out.data, o.out.len, "codefleet-container-init", 24))) {
        char why[300];
        cf_run_outcome_describe(&o, why, sizeof(why));
        rc = cf_error_set(err, CF_E_UNSUPPORTED, "container: the trial container did not run: %s", why);
    } else if (rc == 0) {
        cf_run_outcome o2;
        char *vargv[] = {st->runtime, "--version", NULL};
        cf_error e2;
        cf_error_clear(&e2);
        if (run_runtime(st, vargv, false, &o2, &e2) == 0 && o2.out.len) {
            size_t m = o2.out.len < sizeof(st->version) - 1 ? o2.out.len : sizeof(st->version) - 1;
            memcpy(st->version, o2.out.data, m);
            st->version[m] = '\0';
            st->version[strcspn(st->version, "\n")] = '\0';
        }
        cf_run_outcome_free(&o2);
    } else {
        cf_error_wrap(err, "container: trial run with image '%s'", st->images[0].name);
        if (err && err->code != CF_E_NOMEM)
            err->code = CF_E_UNSUPPORTED;
    }
    *userns_refused = r.setup_failed_userns;
    cf_run_outcome_free(&o);
    ct_run_cleanup(&r);
    ct_run_unmount(&r);
    return rc;
}

/* The trial container of ct_create.  A host that forbids the init's nested
 * user namespace (it only hides the host uid) gets containers without it,
 * said in the notes; a filter that cannot load fails the backend. */
static int ct_trial(ct_state *st, cf_error *err)
{
    bool userns_refused = false;
    int rc = ct_trial_once(st, &userns_refused, err);
    if (rc < 0 && userns_refused && !st->no_nested_userns) {
        cf_log_warn("container", "%s: running containers without the nested user namespace", err ? err->msg : "");
        st->no_nested_userns = true;
        cf_error_clear(err);
        rc = ct_trial_once(st, &userns_refused, err);
    }
    return rc;
}

/* ---- network=enabled ---- */

/* A process holding a network namespace of the worker's (owned by the
 * host's user namespace, so the program, in a user namespace of its own,
 * has no capability over it: it cannot change the routes), with loopback
 * up, slirp4netns attached and the sandbox's refusing routes; crun joins
 * it by path.  The holder and slirp4netns run in the execution's cgroup:
 * their memory and CPU are the execution's and they die with it. */
typedef struct ct_net {
    pid_t holder;
    int hold_fd; /* closing it ends the holder */
    cf_net_egress egress;
    char path[64];
} ct_net;

#define NET_READY_US (5 * 1000000LL)

static void net_stop(ct_net *n)
{
    cf_net_egress_stop(&n->egress);
    if (n->hold_fd >= 0)
        close(n->hold_fd);
    n->hold_fd = -1;
    if (n->holder > 0) {
        kill(n->holder, SIGKILL);
        while (waitpid(n->holder, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    n->holder = 0;
}

static int net_start(ct_run *r, const cf_exec_ctx *ctx, ct_net *n, cf_error *err)
{
    cf_net_routes routes;
    if (cf_net_default_blocks(&routes, err) < 0 || cf_net_set_allows(&routes, ctx->net_allow, ctx->n_net_allow, err) < 0)
        return -1;
    int go[2], ready[2];
    if (pipe2(go, O_CLOEXEC) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "container: pipe");
    if (pipe2(ready, O_CLOEXEC) < 0) {
        int e = errno;
        close(go[0]);
        close(go[1]);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "container: pipe");
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* Async-signal-safe calls only: a copy of a threaded worker. */
        close(go[1]);
        close(ready[0]);
        /* Nothing of the worker's (other slots' pipes, sockets, files)
         * stays open for as long as the execution runs. */
        int g = fcntl(go[0], F_DUPFD, 10), rd = fcntl(ready[1], F_DUPFD, 10);
        if (g < 0 || rd < 0 || dup2(g, 3) < 0 || dup2(rd, 4) < 0)
            _exit(1);
        go[0] = 3;
        ready[1] = 4;
        if (syscall(SYS_close_range, 5u, ~0u, 0u) < 0)
            for (int fd = 5; fd < 65536; fd++)
                (void)close(fd);
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        char c = 0;
        if (unshare(CLONE_NEWNET) < 0 || cf_child_loopback_up() < 0 || write(ready[1], "n", 1) != 1)
            _exit(1);
        if (read(go[0], &c, 1) != 1)
            _exit(0);
        if (cf_net_egress_routes(&routes) < 0 || write(ready[1], "r", 1) != 1)
            _exit(1);
        while (read(go[0], &c, 1) > 0) {
        }
        _exit(0);
    }
    int e = errno;
    close(go[0]);
    close(ready[1]);
    if (pid < 0) {
        close(go[1]);
        close(ready[0]);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "container: fork");
    }
    n->holder = pid;
    n->hold_fd = go[1];
    int rc = -1;
    char c = 0;
    if (read(ready[0], &c, 1) != 1 || c != 'n') {
        cf_error_set(err, CF_E_SANDBOX, "container: the network namespace could not be made");
        goto out;
    }
    if (cf_cgroup_attach(r->cg, pid, err) < 0)
        goto out;
    r->helpers++;
    if (cf_net_egress_start(r->st->slirp, pid, NET_READY_US, &n->egress, err) < 0)
        goto out;
    if (cf_cgroup_attach(r->cg, n->egress.pid, err) < 0)
        goto out;
    r->helpers++;
    if (write(go[1], "g", 1) != 1 || read(ready[0], &c, 1) != 1 || c != 'r') {
        cf_error_set(err, CF_E_SANDBOX, "container: the network namespace's routes could not be set");
        goto out;
    }
    snprintf(n->path, sizeof(n->path), "/proc/%d/ns/net", (int)pid);
    rc = 0;
out:
    close(ready[0]);
    if (rc < 0 && err)
        err->retriable = true;
    return rc;
}

/* ---- per execution ---- */

/* The runner's cpu hook: the execution's cgroup is its own, so its count
 * is the execution's. */
static int64_t ct_cpu_used(pid_t pid, void *cg)
{
    (void)pid;
    return cf_cgroup_cpu_usage_us(cg);
}

static const ct_image *find_image(const ct_state *st, const char *name)
{
    if (!name)
        return &st->images[0];
    for (size_t i = 0; i < st->n_images; i++)
        if (strcmp(st->images[i].name, name) == 0)
            return &st->images[i];
    return NULL;
}

/* The execution's pids bound: its max_processes (or the default), the
 * runtime's own, and with network the holder and slirp4netns. */
static int64_t ct_pids_bound(void *state, const cf_policy *pol)
{
    const ct_state *st = state;
    return (pol->max_processes > 0 ? pol->max_processes : st->def_pids) + RUNTIME_PIDS +
           (pol->network == CF_NET_ENABLED ? 2 : 0);
}

static int ct_execute(void *state, const cf_exec_ctx *ctx, const cf_request *req, cf_result *res, cf_error *err)
{
    ct_state *st = state;
    const cf_policy *pol = &req->policy;
    cf_exec_job job;
    int open = cf_exec_job_open(&job, &st->base, "container", "container", st->slots, ctx, req, res, err);
    if (open <= 0)
        return open;
    const ct_image *im = find_image(st, req->image);
    if (!im) {
        char shown[80];
        cf_printable(req->image, strlen(req->image), shown, sizeof(shown));
        cf_exec_job_free(&job);
        return cf_exec_reject(res, "image '%s' is not one of this worker's container images", shown);
    }
    unsigned lang = (unsigned)req->language;
    if (lang >= CF_LANG__COUNT || !(im->languages & (1u << lang))) {
        cf_exec_job_free(&job);
        return cf_exec_reject(res, "image '%s' has no %s (its languages are what it has an interpreter or compiler "
                                   "for)", im->name, cf_language_name(req->language));
    }
    /* A program named by its path (a compile step's compiler) must be in
     * the image: one that is not is the request's image's lack, not a
     * broken backend. */
    if (req->language == CF_LANG_COMMAND && req->argc && req->argv[0][0] == '/' &&
        !cf_exec_file_in_root(im->root, req->argv[0])) {
        char shown[100];
        cf_printable(req->argv[0], strlen(req->argv[0]), shown, sizeof(shown));
        cf_exec_job_free(&job);
        return cf_exec_reject(res, "image '%s' has no program '%s'", im->name, shown);
    }
    bool network = pol->network == CF_NET_ENABLED;
    if ((network && !st->slirp[0]) || pol->fs_mode == CF_FS_PATHS) {
        cf_exec_job_free(&job);
        return cf_exec_reject(res, "backend 'container' cannot enforce %s",
                              network ? "network=enabled" : "fs_mode=paths");
    }
    int slot = ctx->slot;
    ct_run r = {.st = st, .s = &st->slot[slot], .slot = slot, .image = im};
    cf_cgroup_limits lim = {.memory_bytes = pol->memory_bytes > 0 ? pol->memory_bytes : st->def_memory,
                            .pids_max = ct_pids_bound(st, pol)};
    cf_run_outcome outcome;
    memset(&outcome, 0, sizeof(outcome));
    ct_net net = {.hold_fd = -1, .egress = {.pid = 0, .exit_fd = -1}};
    int rc = -1;
    if (ct_run_begin(&r, &lim, err) < 0)
        goto out;
    bool peak_ok = cf_cgroup_env_has_peak(st->cgenv) && cf_cgroup_peak_reset(r.cg) == 0;
    uid_t host_id = (uid_t)(st->uid_base + slot);
    if (cf_exec_job_dirs(&job, r.s->mnt, host_id, host_id, err) < 0)
        goto out;
    job.root = im->root;
    cf_exec_view view = {.work = "/work", .run = RUN_DIR};
    if (cf_exec_job_fill(&job, ctx->files, &view, err) < 0)
        goto out;
    if (job.rejected) {
        rc = 0;
        goto out;
    }
    char out_host[PATH_MAX];
    snprintf(out_host, sizeof(out_host), "%s/out", cf_workdir_path(job.run));
    cf_run_spec spec;
    cf_exec_job_spec(&job, ctx, &spec);
    cf_run_spec prog = spec;
    ct_bundle_in in = {.image = im, .job = &job, .spec = &prog, .work_host = cf_workdir_path(job.work),
                       .run_host = cf_workdir_path(job.run), .out_host = out_host,
                       .work_rw = !(pol->fs_mode == CF_FS_WORKSPACE_RO || (ctx->files && ctx->files->read_only)),
                       .host_id = host_id};
    if (network) {
        if (net_start(&r, ctx, &net, err) < 0)
            goto out;
        in.netns = net.path;
        in.resolv = st->resolv[0] && im->has_resolv ? st->resolv : NULL;
    }
    /* cpu_time: the cgroup's total, RLIMIT_CPU a second later as backstop. */
    if (pol->cpu_time_us > 0 && cf_cgroup_env_has_cpuacct(st->cgenv)) {
        in.cpu_rlimit_s = (long)((pol->cpu_time_us + 999999) / 1000000) + 1;
        spec.cpu_usage_us = ct_cpu_used;
        spec.cpu_usage_arg = r.cg;
        spec.cpu_limit_us = pol->cpu_time_us;
    }
    if (ct_run_container(&r, &in, &spec, &outcome, err) < 0)
        goto out;
    bool oom = cf_cgroup_oom_kills(r.cg) > 0;
    /* No word from the init, and nothing that stopped it on purpose: the
     * runtime or the init broke, not the program.  Never the runtime's
     * exit status reported as the program's. */
    if (!r.reported && !outcome.timed_out && !outcome.cancelled && !outcome.cpu_exceeded && !oom) {
        char why[200];
        cf_run_outcome_describe(&outcome, why, sizeof(why));
        cf_error_set(err, CF_E_SANDBOX, "container: the container ended without its init's report (%s)", why);
        goto out;
    }
    int64_t cpu_us = cf_cgroup_cpu_usage_us(r.cg);
    int64_t peak = peak_ok ? cf_cgroup_memory_peak(r.cg) : -1;
    if (peak >= 0) {
        outcome.peak_rss_bytes = peak;
        outcome.peak_is_cgroups = true;
    }
    rc = cf_exec_job_finish(&job, ctx, &outcome, oom, cpu_us, err);
out:
    ct_run_cleanup(&r);
    net_stop(&net);
    cf_exec_job_free(&job);
    ct_run_unmount(&r);
    cf_run_outcome_free(&outcome);
    if (rc == 0 && res->status != CF_STATUS_REJECTED) {
        free(res->meta.sandbox);
        res->meta.sandbox = strdup(im->name);
    }
    return rc;
}

const cf_backend_ops cf_backend_container_ops = {
    .pids_bound = ct_pids_bound,
    .name = "container",
    .description = "OCI containers (crun) from operator-allowed images: read-only root, user namespace, no "
                   "capabilities, seccomp, cgroup limits (container)",
    .settings = &cf_container_settings,
    .create = ct_create,
    .destroy = ct_destroy,
    .execute = ct_execute,
};
