/* codefleet-zygote: a pre-initialised Python interpreter inside a sandbox
 * slot, which forks once per execution into a fresh, fully isolated child.
 *
 * The worker starts it (backends/sandbox/zygote.c) through the sandbox's
 * own machinery: new user, pid, mount, ipc, uts and network namespaces, a
 * private read-only root, a cgroup of its own, uid 1000 inside (the slot's
 * run uid outside).  Unlike a program it keeps three capabilities of its
 * user namespace (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP, ambient over
 * its exec) to build each execution's namespaces; it runs no code but its
 * own and the standard modules it imports at start.  Its stdin is the
 * sandbox's seccomp filter (classic BPF), its fd 4 a SOCK_SEQPACKET socket
 * to the worker (zygote_proto.h).
 *
 * Per execution (RUN):
 *   zygote  clone3(NEWPID|NEWNS|NEWIPC|NEWNET|NEWUTS) -> the init, pidfd to
 *           the worker; the worker moves the init into the execution's
 *           cgroup and releases it
 *   init    cgroup namespace; reads the payload; a fresh mount tree: the
 *           execution's work/ and run/ bound from the share at /work and
 *           /run/codefleet, the share itself detached, fresh /tmp,
 *           /dev/shm and /proc; hostname, loopback; drops every
 *           capability, no_new_privs, the seccomp filter; forks the
 *           program and stays as pid 1 (reaps, forwards signals, reports
 *           the program's status with cf_run_report.h records, as the
 *           runner's init does)
 *   program rlimits, stdio, every other fd closed, cwd, environment; then
 *           either execve (CF_ZY_PYTHON unset) or the script run in the
 *           inherited interpreter as `python3 script` runs it (in __main__
 *           with __file__ set, SystemExit's code, the traceback and exit 1,
 *           SIGINT for an unhandled KeyboardInterrupt) and ended as
 *           Py_RunMain ends (threads joined, atexit, streams flushed or
 *           exit 120, the program's modules torn down) without tearing
 *           down the zygote's own modules, which would copy its whole heap
 *           page by page.
 *
 * The zygote itself has no seccomp filter (it runs only its own code and
 * needs mount, clone and unshare); each init loads the sandbox's filter
 * before it forks the program, which inherits it.
 *
 * Nothing of one execution reaches the next: each is a fork of the zygote,
 * which never runs a request's code, and each has its own pid, mount, ipc,
 * network and uts namespaces, tmpfs and cgroup.  Shared by the executions
 * of one zygote: the user namespace (keyrings are refused by seccomp) and
 * the interpreter's hash seed, address layout and stack canary (set at
 * start; the worker replaces the zygote after zygote-max-requests
 * executions).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_run_report.h"
#include "cf_child.h"
#include "zygote_proto_int.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

#define FILTER_MAX_INSNS 4096
#define RUN_DIR "/run/codefleet"

/* Fixed descriptor slots of the execution's init (before the program
 * starts): 0-2 the program's stdio, 3 the report pipe. */
#define A_REP_FD 3
#define A_PAYLOAD_FD 5
#define A_BARRIER_FD 6

/* libpython's, exported but not in its public headers: set when a
 * program ended by an unhandled KeyboardInterrupt (as in Py_RunMain). */
extern int _Py_UnhandledKeyboardInterrupt;
/* libpython's SystemExit handling (pythonrun.c): 1 when the pending
 * exception is SystemExit, its code in *exitcode (its message printed,
 * the exception cleared). */
extern int _Py_HandleSystemExit(int *exitcode);

static struct sock_filter filter_insns[FILTER_MAX_INSNS];
static struct sock_fprog filter = {.len = 0, .filter = filter_insns};
static const char *python_path = "/usr/bin/python3";
static bool coerced_lc_ctype;
static PyObject *bootstrap; /* _cf_request(argv, orig_argv, env) */
static PyObject *teardown;  /* _cf_teardown(main_dict) */
static PyObject *set_loader; /* _cf_loader(main_dict, filename) */

/* Python run in the program around its script.  _cf_request: the
 * environment, argv and sys.path[0] as `python3 script args` has them at
 * start.  _cf_teardown: at exit, what the interpreter's finalization does
 * to what the program made (its modules, __main__ among them, leave
 * sys.modules and are freed, what stays alive has its globals cleared,
 * builtins it added go, garbage is collected), so its destructors and
 * unflushed files behave as at a cold exit; the modules the zygote had
 * loaded are left alone (tearing them down would copy the zygote's whole
 * heap page by page into each program).  __main__'s dict is cleared
 * outright (in its own order, as the collector would clear it cold): it
 * was made in the zygote, so it sits in the collector's permanent
 * generation, where no collection would find its cycles.  _cf_loader:
 * __main__.__loader__ as set_main_loader sets it for a script. */
static const char bootstrap_src[] =
    "import sys as _sys, builtins as _builtins\n"
    "_zy_modules = frozenset(_sys.modules)\n"
    "_zy_builtins = frozenset(_builtins.__dict__)\n"
    "def _cf_request(argv, orig_argv, env):\n"
    "    import os, sys\n"
    "    d = os.environ._data\n"
    "    d.clear()\n"
    "    for k, v in env:\n"
    "        d[k] = v\n"
    "    sys.argv = argv\n"
    "    sys.orig_argv = orig_argv\n"
    "    sys.path.insert(0, os.path.dirname(os.path.realpath(argv[0])))\n"
    "    if b'TZ' in d:\n"
    "        import time\n"
    "        time.tzset()\n"
    "def _cf_loader(main_dict, filename):\n"
    "    import _frozen_importlib_external\n"
    "    main_dict['__loader__'] = _frozen_importlib_external.SourceFileLoader('__main__', filename)\n"
    "def _cf_clear(md):\n"
    "    for k in [k for k in md if k[:1] == '_' and k[:2] != '__']:\n"
    "        md[k] = None\n"
    "    for k in [k for k in md if k != '__builtins__']:\n"
    "        md[k] = None\n"
    "def _cf_teardown(main_dict):\n"
    "    import sys, builtins, _weakref, gc\n"
    "    mods = sys.modules\n"
    "    gone = []\n"
    "    for name in list(mods):\n"
    "        if name == '__main__' or name not in _zy_modules:\n"
    "            m = mods.pop(name)\n"
    "            try:\n"
    "                gone.append(_weakref.ref(m))\n"
    "            except TypeError:\n"
    "                pass\n"
    "            del m\n"
    "    d = builtins.__dict__\n"
    "    for k in [k for k in d if k not in _zy_builtins]:\n"
    "        del d[k]\n"
    "    main_dict.clear()\n"
    "    del main_dict, d\n"
    "    gc.collect()\n"
    "    for ref in reversed(gone):\n"
    "        m = ref()\n"
    "        if m is not None:\n"
    "            _cf_clear(m.__dict__)\n"
    "        del m\n"
    "    gc.collect()\n";

/* ---- small helpers (async-signal-safe where the children use them) ---- */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    (void)!write(2, buf, (size_t)n);
}

static void report(int fd, int kind, int e, int status, int64_t maxrss_kb, int64_t cpu_us, const char *msg)
{
    cf_run_report r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.err = e;
    r.status = status;
    r.maxrss_kb = maxrss_kb;
    r.cpu_us = cpu_us;
    for (size_t i = 0; msg && msg[i] && i + 1 < sizeof(r.msg); i++)
        r.msg[i] = msg[i];
    ssize_t w;
    do
        w = write(fd, &r, sizeof(r));
    while (w < 0 && errno == EINTR);
}

static __attribute__((noreturn)) void fail(int e, const char *msg)
{
    report(A_REP_FD, CF_REPORT_SETUP, e, 0, 0, -1, msg);
    _exit(127);
}

/* "/proc/self/fd/N" */
static void fd_path(char *buf, size_t cap, int fd)
{
    snprintf(buf, cap, "/proc/self/fd/%d", fd);
}

/* Binds the directory open at fd onto dst with flags (nosuid, nodev,
 * optionally read-only). */
static int bind_fd(int fd, const char *dst, unsigned long flags)
{
    char src[48];
    fd_path(src, sizeof(src), fd);
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        return -1;
    return mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | flags, NULL);
}

/* ---- the execution's payload ---- */

struct payload {
    const cf_zy_payload *h;
    const char *top, *path, *cwd;
    char **argv;
    char **envp;
};

static void payload_read(struct payload *p)
{
    struct stat sb;
    if (fstat(A_PAYLOAD_FD, &sb) < 0)
        fail(errno, "payload: fstat");
    if (sb.st_size < (off_t)sizeof(cf_zy_payload) || sb.st_size > (off_t)(sizeof(cf_zy_payload) + CF_ZY_PAYLOAD_MAX))
        fail(EINVAL, "payload: size");
    size_t size = (size_t)sb.st_size;
    /* A private writable copy: putenv keeps pointers into it, and nobody
     * else can change it under us (the memfd is sealed besides). */
    char *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, A_PAYLOAD_FD, 0);
    if (mem == MAP_FAILED)
        fail(errno, "payload: mmap");
    const cf_zy_payload *h = (const void *)mem;
    if (h->magic != CF_ZY_MAGIC || h->version != CF_ZY_VERSION || h->total < 4 || h->total > CF_ZY_PAYLOAD_MAX ||
        sizeof(*h) + h->total != size || h->argc == 0 || h->argc > CF_ZY_MAX_STRINGS ||
        h->envc > CF_ZY_MAX_STRINGS || h->n_rlimits < 0 || h->n_rlimits > CF_ZY_MAX_RLIMITS)
        fail(EINVAL, "payload: bad header");
    char *s = mem + sizeof(*h);
    if (s[h->total - 1] != '\0')
        fail(EINVAL, "payload: unterminated");
    size_t nptr = (size_t)h->argc + 1 + (size_t)h->envc + 1;
    char **v = mmap(NULL, nptr * sizeof(char *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        fail(errno, "payload: memory");
    size_t want = 3 + (size_t)h->argc + (size_t)h->envc, off = 0;
    const char *fixed[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < want; i++) {
        if (off >= h->total)
            fail(EINVAL, "payload: too few strings");
        char *str = s + off;
        size_t l = strnlen(str, h->total - off);
        if (off + l >= h->total)
            fail(EINVAL, "payload: unterminated string");
        if (i < 3)
            fixed[i] = str;
        else if (i < 3 + h->argc)
            v[i - 3] = str;
        else
            v[i - 2] = str; /* envp starts after argv's NULL */
        off += l + 1;
    }
    if (off != h->total)
        fail(EINVAL, "payload: trailing bytes");
    v[h->argc] = NULL;
    v[nptr - 1] = NULL;
    /* The execution's directory: one plain name below the share. */
    const char *top = fixed[0];
    if (!top[0] || strcmp(top, ".") == 0 || strcmp(top, "..") == 0 || strlen(top) > 64)
        fail(EINVAL, "payload: bad directory name");
    for (const char *c = top; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '_' || *c == '.'))
            fail(EINVAL, "payload: bad directory name");
    if (fixed[1][0] != '/' || (fixed[2][0] && fixed[2][0] != '/'))
        fail(EINVAL, "payload: paths must be absolute");
    p->h = h;
    p->top = top;
    p->path = fixed[1];
    p->cwd = fixed[2][0] ? fixed[2] : NULL;
    p->argv = v;
    p->envp = v + h->argc + 1;
}

/* ---- the program ---- */

static void apply_rlimits(const cf_zy_payload *h)
{
    for (int i = 0; i < h->n_rlimits; i++) {
        int res = (int)h->rl[i].resource;
        rlim_t val = (rlim_t)h->rl[i].value;
        struct rlimit cur;
        if (getrlimit(res, &cur) < 0)
            fail(errno, "getrlimit");
        struct rlimit nl = {val, val};
        if (res == RLIMIT_CPU && val != RLIM_INFINITY)
            nl.rlim_max = val + 1; /* SIGXCPU at the soft limit, SIGKILL a second later */
        if (cur.rlim_max != RLIM_INFINITY && (nl.rlim_max == RLIM_INFINITY || nl.rlim_max > cur.rlim_max))
            nl.rlim_max = cur.rlim_max;
        if (nl.rlim_cur == RLIM_INFINITY || nl.rlim_cur > nl.rlim_max)
            nl.rlim_cur = nl.rlim_max;
        if (setrlimit(res, &nl) < 0)
            fail(errno, "setrlimit");
    }
    if (h->cpu_rlimit_s > 0) {
        struct rlimit cur;
        if (getrlimit(RLIMIT_CPU, &cur) < 0)
            fail(errno, "getrlimit cpu");
        rlim_t v = (rlim_t)h->cpu_rlimit_s;
        if (cur.rlim_max != RLIM_INFINITY && v > cur.rlim_max)
            v = cur.rlim_max;
        struct rlimit nl = {v, v};
        if (setrlimit(RLIMIT_CPU, &nl) < 0)
            fail(errno, "setrlimit cpu");
    }
    struct rlimit nocore = {0, 0};
    if (setrlimit(RLIMIT_CORE, &nocore) < 0)
        fail(errno, "setrlimit core");
}

/* As CPython's flush_std_files: a failing stdout flush is reported as
 * unraisable and fails the exit (120). */
static int flush_std(void)
{
    int status = 0;
    const char *names[2] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        PyObject *f = PySys_GetObject(names[i]); /* borrowed */
        if (!f || f == Py_None)
            continue;
        PyObject *closed = PyObject_GetAttrString(f, "closed");
        int is_closed = closed ? PyObject_IsTrue(closed) : -1;
        Py_XDECREF(closed);
        if (is_closed < 0)
            PyErr_Clear();
        if (is_closed != 0)
            continue;
        PyObject *r = PyObject_CallMethod(f, "flush", NULL);
        if (!r) {
            if (i == 0)
                PyErr_WriteUnraisable(f);
            else
                PyErr_Clear();
            status = -1;
        } else {
            Py_DECREF(r);
        }
    }
    return status;
}

/* The program's end, as Py_RunMain ends it: non-daemon threads joined,
 * atexit callbacks, standard streams flushed, garbage collected, the
 * program's modules torn down (_cf_teardown), flushed again; 120 when a
 * flush failed; death by SIGINT after an unhandled KeyboardInterrupt. */
static __attribute__((noreturn)) void exit_as_python(int code)
{
    PyObject *tname = PyUnicode_FromString("threading");
    PyObject *threading = tname ? PyImport_GetModule(tname) : NULL;
    Py_XDECREF(tname);
    if (threading) {
        PyObject *r = PyObject_CallMethod(threading, "_shutdown", NULL);
        if (!r)
            PyErr_WriteUnraisable(threading);
        Py_XDECREF(r);
    }
    Py_XDECREF(threading);
    PyErr_Clear();
    PyObject *atexit = PyImport_ImportModule("atexit");
    if (atexit) {
        PyObject *r = PyObject_CallMethod(atexit, "_run_exitfuncs", NULL);
        if (!r)
            PyErr_Clear(); /* it reports the callbacks' exceptions itself */
        Py_XDECREF(r);
        Py_DECREF(atexit);
    } else {
        PyErr_Clear();
    }
    int status = flush_std();
    PyGC_Collect();
    PyObject *main_mod = PyImport_AddModule("__main__"); /* borrowed */
    PyObject *main_dict = main_mod ? PyModule_GetDict(main_mod) : NULL;
    PyObject *r = main_dict ? PyObject_CallOneArg(teardown, main_dict) : NULL;
    if (!r)
        PyErr_Clear();
    Py_XDECREF(r);
    if (flush_std() < 0)
        status = -1;
    /* The original streams, if the program replaced sys.stdout or
     * sys.stderr: a cold finalization closes them, which flushes them;
     * the zygote's sys module is never torn down here. */
    const char *orig[2] = {"__stdout__", "__stderr__"};
    for (int i = 0; i < 2; i++) {
        PyObject *f = PySys_GetObject(orig[i]);
        if (f && f != Py_None) {
            PyObject *fr = PyObject_CallMethod(f, "flush", NULL);
            Py_XDECREF(fr);
            PyErr_Clear();
        }
    }
    if (status < 0)
        code = 120;
    if (_Py_UnhandledKeyboardInterrupt) {
        /* As Python's exit_sigint: die by SIGINT so a caller sees it. */
        signal(SIGINT, SIG_DFL);
        kill(getpid(), SIGINT);
    }
    /* C stdio flushed; the C libraries' atexit handlers (OpenSSL's
     * cleanup, say) would only free memory the exit frees anyway. */
    fflush(NULL);
    _exit(code);
}

/* sys.argv and the environment as Python objects, then the script. */
static __attribute__((noreturn)) void run_python(const struct payload *p)
{
    PyOS_AfterFork_Child();
    PyObject *argv = PyList_New(0), *orig = PyList_New(0), *env = PyList_New(0);
    if (!argv || !orig || !env)
        goto broken;
    /* orig_argv: the interpreter's command line; argv: from the script on. */
    for (uint32_t i = 0; i < p->h->argc; i++) {
        PyObject *o = PyUnicode_DecodeFSDefault(p->argv[i]);
        if (!o || PyList_Append(orig, o) < 0 || (i >= 1 && PyList_Append(argv, o) < 0)) {
            Py_XDECREF(o);
            goto broken;
        }
        Py_DECREF(o);
    }
    for (char **e = p->envp; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        PyObject *pair = Py_BuildValue("(y#y)", *e, (Py_ssize_t)(eq - *e), eq + 1);
        if (!pair || PyList_Append(env, pair) < 0) {
            Py_XDECREF(pair);
            goto broken;
        }
        Py_DECREF(pair);
    }
    PyObject *r = PyObject_CallFunctionObjArgs(bootstrap, argv, orig, env, NULL);
    if (!r)
        goto broken;
    Py_DECREF(r);
    Py_DECREF(argv);
    Py_DECREF(orig);
    Py_DECREF(env);

    /* As pymain_run_file and _PyRun_SimpleFileObject: the file run in
     * __main__ with __file__ set for the run. */
    const char *script = p->argv[1];
    PyObject *main_mod = PyImport_AddModule("__main__"); /* borrowed */
    PyObject *d = main_mod ? PyModule_GetDict(main_mod) : NULL;
    PyObject *fname = PyUnicode_DecodeFSDefault(script);
    PyObject *lr = NULL;
    if (!d || !fname || PyDict_SetItemString(d, "__file__", fname) < 0 ||
        PyDict_SetItemString(d, "__cached__", Py_None) < 0 ||
        !(lr = PyObject_CallFunctionObjArgs(set_loader, d, fname, NULL))) {
        Py_XDECREF(fname);
        goto broken;
    }
    Py_DECREF(lr);
    Py_DECREF(fname);
    /* ps and /proc/self/comm say python3, as for a cold start. */
    const char *base = strrchr(python_path, '/');
    (void)prctl(PR_SET_NAME, base ? base + 1 : python_path, 0, 0, 0);
    int code = 0;
    /* From here on it is the program's: the report pipe is the init's. */
    close(A_REP_FD);
    FILE *fp = fopen(script, "rb");
    if (!fp) {
        int e = errno;
        fprintf(stderr, "%s: can't open file '%s': [Errno %d] %s\n", python_path, script, e, strerror(e));
        code = 2;
    } else {
        PyCompilerFlags cf = _PyCompilerFlags_INIT;
        PyObject *v = PyRun_FileExFlags(fp, script, Py_file_input, d, d, 1, &cf);
        if (v) {
            Py_DECREF(v);
        } else if (!_Py_HandleSystemExit(&code)) {
            /* Not SystemExit (whose message, if any, is printed and
             * whose code is taken above, where PyErr_Print would exit
             * through a full finalization): the traceback, exit 1. */
            PyErr_Print();
            code = 1;
        }
    }
    if (PyDict_DelItemString(d, "__file__") < 0 || PyDict_DelItemString(d, "__cached__") < 0)
        PyErr_Clear();
    exit_as_python(code);
broken:
    /* The sandbox broke, not the program: said on the report pipe. */
    PyErr_Clear();
    fail(EIO, "python: preparing the interpreter for the program");
}

static __attribute__((noreturn)) void program_main(const struct payload *p)
{
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        fail(errno, "sigprocmask");
    apply_rlimits(p->h);
    if (p->cwd && chdir(p->cwd) < 0)
        fail(errno, "chdir");
    bool python = p->h->flags & CF_ZY_PYTHON;
    if (clearenv() != 0)
        fail(ENOMEM, "clearenv");
    for (char **e = p->envp; *e; e++)
        if (strchr(*e, '=') && putenv(*e) != 0)
            fail(errno, "putenv");
    if (syscall(SYS_close_range, (unsigned)A_REP_FD + 1, ~0u, 0u) < 0)
        for (int fd = A_REP_FD + 1; fd < 1024; fd++)
            close(fd);
    if (python) {
        /* A program that is not exec'd keeps the init's dumpable 0,
         * which would make its own /proc/self/fd (and so /dev/stdin)
         * unreadable to it: as after an exec. */
        if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
            fail(errno, "prctl(PR_SET_DUMPABLE)");
        run_python(p);
    }
    /* The interpreter ignores SIGPIPE and SIGXFSZ; an exec'd program
     * starts with every signal at its default, as from the runner. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &sa, NULL);
    execve(p->path, p->argv, p->envp);
    report(A_REP_FD, CF_REPORT_EXEC, errno, 0, 0, -1, "execve");
    _exit(127);
}

/* ---- the execution's init ---- */

/* Moves fd to slot (close-on-exec unless keep); closes the original. */
static void move_fd(int fd, int slot, bool cloexec)
{
    if (fd == slot) {
        if (!cloexec && fcntl(fd, F_SETFD, 0) < 0)
            _exit(127);
        return;
    }
    if (dup3(fd, slot, cloexec ? O_CLOEXEC : 0) < 0)
        _exit(127);
    close(fd);
}

static void build_mounts(const struct payload *p)
{
    /* Nothing mounted here reaches the zygote, nor the share's later
     * contents here. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        fail(errno, "mounts: make / private");
    /* The execution's directories, through the zygote's /proc (we are in
     * its pid namespace too, so /proc/self is us). */
    char dir[128];
    snprintf(dir, sizeof(dir), CF_ZY_SHARE_IN "/m/%s", p->top);
    int top = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0)
        fail(errno, "mounts: open the execution's directory");
    int work = openat(top, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int run = openat(top, "run", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int out = run >= 0 ? openat(run, "out", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (work < 0 || run < 0 || out < 0)
        fail(errno, "mounts: open work/, run/, run/out/");
    if (bind_fd(work, "/work", (p->h->flags & CF_ZY_WORK_RO) ? MS_RDONLY : 0) < 0)
        fail(errno, "mounts: bind /work");
    if (bind_fd(run, RUN_DIR, MS_RDONLY) < 0)
        fail(errno, "mounts: bind " RUN_DIR);
    if (bind_fd(out, RUN_DIR "/out", 0) < 0)
        fail(errno, "mounts: bind " RUN_DIR "/out");
    close(out);
    close(run);
    close(work);
    close(top);
    /* The share goes (the program sees no other execution's directory),
     * and the zygote's /tmp, /proc and /dev/shm are replaced rather than
     * covered: the mount table is then a cold sandbox's.  The new /proc
     * is mounted aside and moved, since the kernel refuses a proc mount
     * in a user namespace where none is visible. */
    if (umount2(CF_ZY_SHARE_IN, MNT_DETACH) < 0 || umount2("/tmp", MNT_DETACH) < 0)
        fail(errno, "mounts: detach the share and the zygote's /tmp");
    if (mount("proc", "/tmp", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        fail(errno, "mounts: /proc");
    if (umount2("/proc", MNT_DETACH) < 0 || mount("/tmp", "/proc", NULL, MS_MOVE, NULL) < 0)
        fail(errno, "mounts: replace /proc");
    char opts[96];
    snprintf(opts, sizeof(opts), "size=%lld,nr_inodes=%lld,mode=1777", (long long)p->h->tmp_bytes,
             (long long)p->h->inodes);
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        fail(errno, "mounts: /tmp");
    if (umount2("/dev/shm", MNT_DETACH) < 0 || mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        fail(errno, "mounts: /dev/shm");
}

static __attribute__((noreturn)) void init_main(const int fds[CF_ZY_RUN_FDS], const int *join, int n_join)
{
    /* First into the execution's cgroup (v1: writing our own tasks files,
     * opened by the worker), so everything below is counted there. */
    for (int i = 0; i < n_join; i++) {
        ssize_t w;
        do
            w = write(join[i], "0", 1);
        while (w < 0 && errno == EINTR);
        if (w != 1)
            _exit(127); /* no report pipe yet: the worker sees a death without a status */
        close(join[i]);
    }
    /* Parent death: the zygote.  (Its own death kills its pid namespace,
     * this one's parent, anyway.) */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        _exit(127);
    /* Fixed slots, the zygote's own descriptors gone: 0-2 the program's
     * stdio, 3 the report pipe, 5 the payload, 6 the barrier. */
    int hi[CF_ZY_RUN_FDS];
    for (int i = 0; i < CF_ZY_RUN_FDS; i++) {
        hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 16);
        if (hi[i] < 0)
            _exit(127);
    }
    move_fd(hi[CF_ZY_FD_STDIN], 0, false);
    move_fd(hi[CF_ZY_FD_STDOUT], 1, false);
    move_fd(hi[CF_ZY_FD_STDERR], 2, false);
    move_fd(hi[CF_ZY_FD_REPORT], A_REP_FD, true);
    move_fd(hi[CF_ZY_FD_PAYLOAD], A_PAYLOAD_FD, true);
    move_fd(hi[CF_ZY_FD_BARRIER], A_BARRIER_FD, true);
    close(CF_ZY_CTL_FD);
    if (syscall(SYS_close_range, (unsigned)A_BARRIER_FD + 1, ~0u, 0u) < 0)
        for (int fd = A_BARRIER_FD + 1; fd < 1024; fd++)
            close(fd);

    /* The worker puts us into the execution's cgroup, then lets us go;
     * EOF: it gave up on this execution. */
    char c;
    ssize_t r;
    do
        r = read(A_BARRIER_FD, &c, 1);
    while (r < 0 && errno == EINTR);
    if (r != 1)
        _exit(0);
    close(A_BARRIER_FD);
    /* Rooted at the execution's cgroup: the program never sees the
     * worker's cgroup path. */
    if (unshare(CLONE_NEWCGROUP) < 0)
        fail(errno, "cgroup namespace");

    struct payload p;
    payload_read(&p);
    close(A_PAYLOAD_FD);
    if (setsid() < 0)
        fail(errno, "setsid");
    build_mounts(&p);
    static const char hn[] = "sandbox";
    if (sethostname(hn, sizeof(hn) - 1) < 0)
        fail(errno, "sethostname");
    if (cf_child_loopback_up() < 0)
        fail(errno, "loopback up");

    /* From here on nothing privileged: the capabilities go, the filter
     * comes (inherited by the program), and no debugger may attach to
     * this init, which is a copy of the zygote. */
    if (cf_child_drop_caps() < 0)
        fail(errno, "drop capabilities");
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        fail(errno, "prctl(PR_SET_DUMPABLE)");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        fail(errno, "prctl(PR_SET_NO_NEW_PRIVS)");
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter) < 0)
        fail(errno, "seccomp");

    sigset_t all;
    sigfillset(&all);
    if (sigprocmask(SIG_SETMASK, &all, NULL) < 0)
        fail(errno, "sigprocmask");
    pid_t program = fork();
    if (program < 0)
        fail(errno, "fork the program");
    if (program == 0)
        program_main(&p);

    /* pid 1: only the report pipe stays open here, so the program alone
     * holds its output pipes. */
    for (int fd = 0; fd < 3; fd++)
        close(fd);
    /* No lifeline: the zygote is pid 1 of its sandbox, so its death (it
     * dies with the worker) takes this nested namespace with it. */
    int status = cf_child_init_wait(program, &all, -1, CF_LIFELINE_PIDFD);
    (void)kill(-1, SIGKILL); /* the rest of the namespace */
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    (void)getrusage(RUSAGE_CHILDREN, &ru);
    int64_t cpu = (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec + (int64_t)ru.ru_stime.tv_sec * 1000000 +
                  ru.ru_stime.tv_usec;
    report(A_REP_FD, CF_REPORT_STATUS, 0, status, ru.ru_maxrss, cpu, "init");
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

/* ---- the zygote ---- */

struct clone_args_v0 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static int send_msg(int sock, const void *msg, size_t len, int fd)
{
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&u, 0, sizeof(u));
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof(u.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    ssize_t w;
    do
        w = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w == (ssize_t)len ? 0 : -1;
}

/* One RUN: 1 when served (or refused with an answer), 0 at EOF, -1 when
 * the socket broke. */
static int serve_one(int sock)
{
    cf_zy_run msg;
    union {
        char buf[CMSG_SPACE(sizeof(int) * (CF_ZY_RUN_FDS + CF_ZY_MAX_JOIN))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof(msg)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n == 0)
        return 0;
    if (n < 0)
        return -1;
    int fds[CF_ZY_RUN_FDS + CF_ZY_MAX_JOIN], nfds = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (nfds < CF_ZY_RUN_FDS + CF_ZY_MAX_JOIN)
                fds[nfds++] = fd;
            else
                close(fd);
        }
    }
    cf_zy_started ans = {.magic = CF_ZY_MAGIC, .kind = CF_ZY_STARTED, .seq = msg.seq, .err = 0};
    int pidfd = -1;
    bool ok = n == (ssize_t)sizeof(msg) && msg.magic == CF_ZY_MAGIC && msg.kind == CF_ZY_RUN &&
              msg.n_join <= CF_ZY_MAX_JOIN && nfds == CF_ZY_RUN_FDS + (int)msg.n_join &&
              !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
    int n_join = ok ? (int)msg.n_join : 0;
    /* The sequence number counts every execution of this slot: the init,
     * and so the program, gets a copy of this memory. */
    explicit_bzero(&msg, sizeof(msg));
    if (!ok) {
        ans.err = EPROTO;
    } else {
        struct clone_args_v0 ca;
        memset(&ca, 0, sizeof(ca));
        ca.flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS | CLONE_PIDFD;
        ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
        ca.exit_signal = SIGCHLD;
        PyOS_BeforeFork();
        long pid = syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid == 0) {
            explicit_bzero(&ans, sizeof(ans));
            init_main(fds, fds + CF_ZY_RUN_FDS, n_join);
        }
        int e = errno;
        PyOS_AfterFork_Parent();
        if (pid < 0)
            ans.err = e ? e : EIO;
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    int rc = send_msg(sock, &ans, sizeof(ans), ans.err == 0 ? pidfd : -1);
    explicit_bzero(&ans, sizeof(ans));
    if (pidfd >= 0)
        close(pidfd);
    return rc < 0 ? -1 : 1;
}

/* The seccomp filter from stdin (whole instructions, bounded). */
static int read_filter(void)
{
    size_t got = 0;
    char *buf = (char *)filter_insns;
    for (;;) {
        if (got == sizeof(filter_insns)) {
            char extra;
            ssize_t r = read(0, &extra, 1);
            if (r != 0)
                return -1; /* longer than we take */
            break;
        }
        ssize_t r = read(0, buf + got, sizeof(filter_insns) - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    if (got % sizeof(struct sock_filter) != 0)
        return -1;
    filter.len = (unsigned short)(got / sizeof(struct sock_filter));
    return 0;
}

static int init_python(const char *preload, char *modules, size_t mcap, uint32_t *n_modules)
{
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.parse_argv = 0;
    PyStatus st = PyConfig_SetBytesString(&config, &config.program_name, python_path);
    if (!PyStatus_Exception(st)) {
        char *argv[] = {(char *)python_path, NULL};
        st = PyConfig_SetBytesArgv(&config, 1, argv);
    }
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
        say("codefleet-zygote: the interpreter did not start: %s", st.err_msg ? st.err_msg : "?");
        return -1;
    }
    /* The C locale coerced (PEP 538) shows in the environment of every
     * `python3` started without a locale: the programs get it too. */
    const char *lc = getenv("LC_CTYPE");
    coerced_lc_ctype = lc && strcmp(lc, "C.UTF-8") == 0;

    /* Standard modules, imported once here instead of per program.  A
     * missing one is skipped: the list is the operator's. */
    char list[2048];
    snprintf(list, sizeof(list), "%s", preload ? preload : "");
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        while (*name == ' ')
            name++;
        if (!*name)
            continue;
        PyObject *m = PyImport_ImportModule(name);
        if (!m) {
            PyErr_Clear();
            say("codefleet-zygote: preload: no module %s", name);
            continue;
        }
        Py_DECREF(m);
    }
    PyObject *globals = PyDict_New();
    if (!globals || PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) < 0)
        return -1;
    PyObject *r = PyRun_String(bootstrap_src, Py_file_input, globals, globals);
    if (!r) {
        PyErr_Print();
        return -1;
    }
    Py_DECREF(r);
    bootstrap = PyDict_GetItemString(globals, "_cf_request");
    teardown = PyDict_GetItemString(globals, "_cf_teardown");
    set_loader = PyDict_GetItemString(globals, "_cf_loader");
    if (!bootstrap || !teardown || !set_loader)
        return -1;
    Py_INCREF(bootstrap);
    Py_INCREF(teardown);
    Py_INCREF(set_loader);
    /* The import system remembers what /work held when the zygote started
     * (nothing): each program's /work is listed afresh on its first
     * import.  Then every object so far goes to the collector's permanent
     * generation, so no collection in a program walks (and copies) the
     * zygote's heap. */
    r = PyRun_String("import sys, gc\n"
                     "for _p in [p for p in sys.path_importer_cache if p in ('/work', '/run/codefleet')]:\n"
                     "    del sys.path_importer_cache[_p]\n"
                     "gc.collect()\n"
                     "gc.freeze()\n",
                     Py_file_input, globals, globals);
    if (!r) {
        PyErr_Print();
        return -1;
    }
    Py_DECREF(r);

    /* Every top-level module now loaded (for the worker's shadowing check). */
    PyObject *mods = PySys_GetObject("modules"); /* borrowed */
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    size_t used = 0;
    *n_modules = 0;
    modules[0] = '\0';
    while (mods && PyDict_Next(mods, &pos, &key, &val)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!k) {
            PyErr_Clear();
            continue;
        }
        if (strchr(k, '.'))
            continue;
        size_t l = strlen(k);
        if (used + l + 2 > mcap) {
            say("codefleet-zygote: too many modules to list");
            return -1;
        }
        if (used)
            modules[used++] = ',';
        memcpy(modules + used, k, l + 1);
        used += l;
        (*n_modules)++;
    }
    /* Nothing of ours may wait in the programs' stdio buffers. */
    PyObject *o;
    if ((o = PySys_GetObject("stdout")) && (r = PyObject_CallMethod(o, "flush", NULL)))
        Py_DECREF(r);
    if ((o = PySys_GetObject("stderr")) && (r = PyObject_CallMethod(o, "flush", NULL)))
        Py_DECREF(r);
    PyErr_Clear();
    return 0;
}

int main(int argc, char **argv)
{
    const char *preload = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--python") == 0 && i + 1 < argc)
            python_path = argv[++i];
        else if (strcmp(argv[i], "--preload") == 0 && i + 1 < argc)
            preload = argv[++i];
        else {
            say("usage: codefleet-zygote [--python PATH] [--preload a,b] "
                "(stdin: seccomp filter; fd %d: the worker's socket)",
                CF_ZY_CTL_FD);
            return 2;
        }
    }
    if (python_path[0] != '/') {
        say("codefleet-zygote: --python must be absolute");
        return 2;
    }
    struct stat sb;
    if (fstat(CF_ZY_CTL_FD, &sb) < 0 || !S_ISSOCK(sb.st_mode)) {
        say("codefleet-zygote: fd %d is not the worker's socket", CF_ZY_CTL_FD);
        return 2;
    }
    if (read_filter() < 0 || filter.len == 0) {
        say("codefleet-zygote: stdin is not a seccomp filter (the programs may not run without one)");
        return 2;
    }
    /* stdin stays the pipe the filter came on, now at its end: the
     * interpreter's sys.stdin is then made for a pipe, as a program's is
     * (not seekable). */

    static cf_zy_hello hello;
    memset(&hello, 0, sizeof(hello));
    if (init_python(preload, hello.modules, sizeof(hello.modules), &hello.n_modules) < 0)
        return 1;
    hello.magic = CF_ZY_MAGIC;
    hello.kind = CF_ZY_HELLO;
    hello.version = CF_ZY_VERSION;
    hello.flags = coerced_lc_ctype ? CF_ZY_HELLO_LC_CTYPE : 0;
    hello.pid = (int32_t)getpid();
    snprintf(hello.python_version, sizeof(hello.python_version), "%s", Py_GetVersion());
    char *sp = strchr(hello.python_version, ' ');
    if (sp)
        *sp = '\0';

    /* SIGCHLD through a signalfd: the inits are reaped between requests. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
        return 1;
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        return 1;
    if (send_msg(CF_ZY_CTL_FD, &hello, sizeof(hello), -1) < 0)
        return 1;

    for (;;) {
        struct pollfd pfd[2] = {{.fd = CF_ZY_CTL_FD, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                ;
            explicit_bzero(&si, sizeof(si)); /* an init's pid: traffic, for whoever reads a copy of us */
            while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
                ;
        }
        if (pfd[0].revents) {
            /* No count is kept here (a program could read it from its
             * copy of this memory): the worker retires the zygote. */
            if (serve_one(CF_ZY_CTL_FD) <= 0)
                break;
        }
    }
    /* Our inits die with this pid namespace; nothing else to do. */
    return 0;
}
