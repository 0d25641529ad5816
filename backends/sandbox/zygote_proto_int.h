/* zygote_proto: what the worker and codefleet-zygote say to each other.
 *
 * One SOCK_SEQPACKET socket per zygote (the zygote's fd CF_ZY_CTL_FD), so
 * every message arrives whole.  The worker is the zygote's only peer and
 * holds one execution at a time on it:
 *
 *   zygote -> worker  HELLO once, when the interpreter is initialised
 *   worker -> zygote  RUN, with CF_ZY_RUN_FDS descriptors (SCM_RIGHTS):
 *                     the payload (a sealed memfd), the program's stdin
 *                     read end, stdout and stderr write ends, the report
 *                     pipe's write end (cf_run_report.h) and a barrier read end
 *   zygote -> worker  STARTED: the execution's init exists (its pidfd
 *                     attached) or could not be made (err)
 *   worker            puts the init into the execution's cgroup, then
 *                     writes one byte to the barrier: only then does the
 *                     init build the execution's namespaces and start the
 *                     program; EOF on the barrier makes it exit.  (cgroup
 *                     v1: the init joins the cgroup itself through the
 *                     tasks files sent with RUN, the barrier released
 *                     before: no round trip.)
 *
 * The payload is read by the execution's init, a fresh copy of the zygote,
 * with every length checked: the zygote itself never parses it. */
#ifndef CF_ZYGOTE_PROTO_H
#define CF_ZYGOTE_PROTO_H

#include <stdint.h>

#define CF_ZY_MAGIC 0x637a7967u /* "cfzg" */
#define CF_ZY_VERSION 1u
#define CF_ZY_CTL_FD 4 /* = CF_RUN_PASS_FD: where the zygote finds its socket */

enum { CF_ZY_HELLO = 1, CF_ZY_RUN = 2, CF_ZY_STARTED = 3 };

/* HELLO flags */
#define CF_ZY_HELLO_LC_CTYPE 1u /* the interpreter coerced the C locale: programs see LC_CTYPE=C.UTF-8 */

#define CF_ZY_MODULES_BYTES 6144

typedef struct cf_zy_hello {
    uint32_t magic;
    uint32_t kind;
    uint32_t version;
    uint32_t flags;
    int32_t pid; /* in the zygote's own pid namespace (1) */
    uint32_t n_modules;
    char python_version[32];
    /* The top-level names in sys.modules once initialised, comma-separated
     * (NUL-terminated): a file of the execution named like one of them
     * would shadow it on a cold start, so the worker sends such requests
     * the cold way. */
    char modules[CF_ZY_MODULES_BYTES];
} cf_zy_hello;

typedef struct cf_zy_run {
    uint32_t magic;
    uint32_t kind;
    uint64_t seq;
    /* cgroup v1: this many more descriptors follow the six, the
     * execution cgroup's tasks files (opened by the worker): the init
     * joins them itself (cheaper than the worker moving it), and the
     * barrier comes already released.  0: the worker moves the init. */
    uint32_t n_join;
    uint32_t pad;
} cf_zy_run;

#define CF_ZY_RUN_FDS 6
#define CF_ZY_MAX_JOIN 8
enum { CF_ZY_FD_PAYLOAD = 0, CF_ZY_FD_STDIN, CF_ZY_FD_STDOUT, CF_ZY_FD_STDERR, CF_ZY_FD_REPORT, CF_ZY_FD_BARRIER };

typedef struct cf_zy_started {
    uint32_t magic;
    uint32_t kind;
    uint64_t seq;
    int32_t err; /* 0: the init's pidfd is attached */
    int32_t pad;
} cf_zy_started;

/* Payload flags */
#define CF_ZY_PYTHON 1u  /* run path as a Python script in the zygote's interpreter; else execve path */
#define CF_ZY_WORK_RO 2u /* /work read-only */

#define CF_ZY_MAX_RLIMITS 8
#define CF_ZY_PAYLOAD_MAX (8u << 20)
#define CF_ZY_MAX_STRINGS 65536u

/* The payload: this header, then `total` bytes of NUL-terminated strings:
 * top (the execution's directory name below the zygote's share), path,
 * cwd, argv[0..argc-1], envp[0..envc-1]. */
typedef struct cf_zy_payload {
    uint32_t magic;
    uint32_t version;
    uint32_t flags;
    uint32_t argc;
    uint32_t envc;
    int32_t n_rlimits;
    uint32_t total;
    uint32_t pad;
    int64_t cpu_rlimit_s; /* > 0: RLIMIT_CPU soft = hard, after the others (the cgroup check's backstop) */
    int64_t tmp_bytes;    /* size of the fresh /tmp and /dev/shm */
    int64_t inodes;       /* their inode caps */
    struct {
        int64_t resource;
        uint64_t value;
    } rl[CF_ZY_MAX_RLIMITS];
} cf_zy_payload;

/* Where the zygote sees the share the worker mounts each execution's
 * directory in: over its /tmp, which each execution's init detaches and
 * replaces with a fresh tmpfs, so the program's root looks exactly like a
 * cold sandbox's (no extra entry). */
#define CF_ZY_SHARE_IN "/tmp"

#endif
