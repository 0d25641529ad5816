#include "cf_seccomp.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cf_util.h"

#define EP CF_SECCOMP_ERRNO
#define KILL CF_SECCOMP_KILL_PROCESS
#define NOARGS CF_SECCOMP_ARGS_NONE

/* The table: one row per rule.  Order is the order of docs/SECCOMP.md. */
static const cf_seccomp_rule rules[] = {
    /* Namespaces and mounts: the sandbox's namespaces and mount tree are
     * built by us before exec; user code must not build its own. */
    {"unshare", EP, EPERM, NOARGS, "new namespaces would give code a fresh all-capable user namespace and mount tree"},
    {"setns", EP, EPERM, NOARGS, "joining another namespace could escape the sandbox's namespaces"},
    {"clone", EP, EPERM, CF_SECCOMP_ARGS_CLONE_NEWNS, "same as unshare when CLONE_NEW* is set; thread and fork clones stay allowed"},
    {"clone3", EP, ENOSYS, NOARGS, "its flags live in memory seccomp cannot read; ENOSYS makes libc fall back to clone"},
    {"mount", EP, EPERM, NOARGS, "the mount tree is fixed before exec"},
    {"umount2", EP, EPERM, NOARGS, "unmounting could reveal what the sandbox mounts cover"},
    {"pivot_root", EP, EPERM, NOARGS, "the root is fixed before exec"},
    {"chroot", EP, EPERM, NOARGS, "the root is fixed before exec; chroot games are classic escapes"},
    {"open_tree", EP, EPERM, NOARGS, "new mount API: clones mount trees"},
    {"move_mount", EP, EPERM, NOARGS, "new mount API: attaches mounts"},
    {"fsopen", EP, EPERM, NOARGS, "new mount API: creates filesystem contexts (large parser surface)"},
    {"fsconfig", EP, EPERM, NOARGS, "new mount API: configures filesystem contexts"},
    {"fsmount", EP, EPERM, NOARGS, "new mount API: creates mounts"},
    {"fspick", EP, EPERM, NOARGS, "new mount API: reconfigures existing mounts"},
    {"mount_setattr", EP, EPERM, NOARGS, "new mount API: could drop read-only/nosuid flags on mounts"},
    /* Looking into or controlling other processes. */
    {"ptrace", EP, EPERM, NOARGS, "debugging other processes; a long history of kernel bugs"},
    {"process_vm_readv", EP, EPERM, NOARGS, "reads another process's memory"},
    {"process_vm_writev", EP, EPERM, NOARGS, "writes another process's memory"},
    {"process_madvise", EP, EPERM, NOARGS, "acts on another process's memory"},
    {"pidfd_getfd", EP, EPERM, NOARGS, "steals file descriptors from another process"},
    {"kcmp", EP, EPERM, NOARGS, "compares kernel objects across processes: an info leak for exploits"},
    /* Kernel facilities that are not namespaced or are exploit favourites. */
    {"keyctl", EP, EPERM, NOARGS, "kernel keyrings are not namespaced"},
    {"add_key", EP, EPERM, NOARGS, "kernel keyrings are not namespaced"},
    {"request_key", EP, EPERM, NOARGS, "kernel keyrings are not namespaced"},
    {"bpf", EP, EPERM, NOARGS, "eBPF verifier and maps: large kernel attack surface"},
    {"userfaultfd", EP, EPERM, NOARGS, "lets exploits stall the kernel at chosen page faults"},
    {"perf_event_open", EP, EPERM, NOARGS, "performance counters: side channels and kernel bugs"},
    {"io_uring_setup", EP, ENOSYS, NOARGS, "io_uring performs I/O seccomp never sees; ENOSYS makes runtimes fall back"},
    {"io_uring_enter", EP, ENOSYS, NOARGS, "io_uring performs I/O seccomp never sees"},
    {"io_uring_register", EP, ENOSYS, NOARGS, "io_uring performs I/O seccomp never sees"},
    {"lookup_dcookie", EP, EPERM, NOARGS, "profiling interface, root-only and unneeded"},
    {"open_by_handle_at", EP, EPERM, NOARGS, "opens files by handle, bypassing the mount tree (the 'shocker' escape)"},
    {"name_to_handle_at", EP, EPERM, NOARGS, "produces handles for open_by_handle_at"},
    {"fanotify_init", EP, EPERM, NOARGS, "filesystem-wide event monitoring"},
    {"personality", EP, EPERM, CF_SECCOMP_ARGS_PERSONALITY, "personality flags can disable ASLR; only PER_LINUX and the query are allowed"},
    {"uselib", EP, EPERM, NOARGS, "obsolete a.out loader"},
    {"_sysctl", EP, EPERM, NOARGS, "obsolete binary sysctl interface"},
    {"nfsservctl", EP, EPERM, NOARGS, "obsolete NFS server control"},
    /* Host administration: never legitimate inside a sandbox. */
    {"init_module", KILL, 0, NOARGS, "loads kernel modules"},
    {"finit_module", KILL, 0, NOARGS, "loads kernel modules"},
    {"delete_module", KILL, 0, NOARGS, "unloads kernel modules"},
    {"kexec_load", KILL, 0, NOARGS, "replaces the running kernel"},
    {"kexec_file_load", KILL, 0, NOARGS, "replaces the running kernel"},
    {"reboot", KILL, 0, NOARGS, "reboots the host"},
    {"swapon", KILL, 0, NOARGS, "changes host swap"},
    {"swapoff", KILL, 0, NOARGS, "changes host swap"},
    {"iopl", KILL, 0, NOARGS, "raw I/O port access"},
    {"ioperm", KILL, 0, NOARGS, "raw I/O port access"},
    {"acct", EP, EPERM, NOARGS, "host process accounting"},
    {"quotactl", EP, EPERM, NOARGS, "host disk quotas"},
    {"quotactl_fd", EP, EPERM, NOARGS, "host disk quotas"},
    {"syslog", EP, EPERM, NOARGS, "kernel log ring: leaks kernel addresses and host activity"},
    {"settimeofday", EP, EPERM, NOARGS, "the clock is not namespaced"},
    {"clock_settime", EP, EPERM, NOARGS, "the clock is not namespaced"},
    {"clock_adjtime", EP, EPERM, NOARGS, "the clock is not namespaced"},
    {"adjtimex", EP, EPERM, NOARGS, "the clock is not namespaced"},
    {"vhangup", EP, EPERM, NOARGS, "hangs up the terminal"},
    /* Argument filters. */
    {"socket", EP, EAFNOSUPPORT, CF_SECCOMP_ARGS_SOCKET_FAMILY, "only AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK families (others: packet, vsock, alg, key... are attack surface)"},
    {"socket", EP, EPROTONOSUPPORT, CF_SECCOMP_ARGS_NETLINK_PROTO, "netlink only for NETLINK_ROUTE (libc's getaddrinfo/getifaddrs); other netlink families configure the kernel"},
    {"socketpair", EP, EAFNOSUPPORT, CF_SECCOMP_ARGS_SOCKET_FAMILY, "same family allowlist as socket"},
    {"ioctl", EP, EPERM, CF_SECCOMP_ARGS_IOCTL_TTY_INJECT, "TIOCSTI/TIOCLINUX inject input into a terminal outside the sandbox"},
};

#undef EP
#undef KILL
#undef NOARGS

const cf_seccomp_rule *cf_seccomp_rules(size_t *count)
{
    if (count)
        *count = sizeof(rules) / sizeof(rules[0]);
    return rules;
}

struct cf_seccomp_prog {
    struct sock_fprog fprog;
    struct sock_filter *insns;
};

/* libseccomp returns -errno. */
static int scmp_fail(cf_error *err, int rc, const char *what, const char *name)
{
    return cf_error_set_errno(err, CF_E_SANDBOX, rc < 0 ? -rc : EINVAL, "seccomp: %s%s%s", what, name ? " " : "",
                              name ? name : "");
}

static int add_rule(scmp_filter_ctx ctx, uint32_t action, int nr, const char *name, unsigned n,
                    const struct scmp_arg_cmp *cmp, cf_error *err)
{
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc < 0)
        return scmp_fail(err, rc, "adding a rule for", name);
    return 0;
}

static int add_table_rule(scmp_filter_ctx ctx, const cf_seccomp_rule *r, int errno_override, cf_error *err)
{
    int nr = seccomp_syscall_resolve_name(r->syscall);
    if (nr == __NR_SCMP_ERROR)
        return cf_error_set(err, CF_E_SANDBOX, "seccomp: unknown syscall %s", r->syscall);

    uint32_t action;
    if (r->action == CF_SECCOMP_KILL_PROCESS)
        action = SCMP_ACT_KILL_PROCESS;
    else
        /* ENOSYS stays: it is a fall-back signal libc and runtimes act on. */
        action = SCMP_ACT_ERRNO((uint16_t)(errno_override && r->errnum != ENOSYS ? errno_override : r->errnum));

    struct scmp_arg_cmp cmp[2];
    switch (r->args) {
    case CF_SECCOMP_ARGS_NONE:
        return add_rule(ctx, action, nr, r->syscall, 0, NULL, err);

    case CF_SECCOMP_ARGS_CLONE_NEWNS: {
        /* One rule per flag: libseccomp ORs rules of one syscall, and a
         * single masked compare cannot say "any of these bits".  arg0 is
         * the flags word on x86-64 and arm64 (s390 swaps the first two). */
        static const uint64_t ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                            CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
        for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
            cmp[0] = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
            if (add_rule(ctx, action, nr, r->syscall, 1, cmp, err) < 0)
                return -1;
        }
        return 0;
    }

    case CF_SECCOMP_ARGS_SOCKET_FAMILY:
        /* libseccomp allows one comparison per argument per rule, so the
         * allowlist {UNIX, INET, INET6, NETLINK} is written as its
         * complement: every other value below AF_NETLINK, and anything
         * above it.  The comparison is on all 64 bits: junk in the upper
         * half (which the kernel would truncate away) is denied too. */
        for (uint64_t fam = 0; fam < AF_NETLINK; fam++) {
            if (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6)
                continue;
            cmp[0] = SCMP_A0(SCMP_CMP_EQ, fam);
            if (add_rule(ctx, action, nr, r->syscall, 1, cmp, err) < 0)
                return -1;
        }
        cmp[0] = SCMP_A0(SCMP_CMP_GT, AF_NETLINK);
        return add_rule(ctx, action, nr, r->syscall, 1, cmp, err);

    case CF_SECCOMP_ARGS_NETLINK_PROTO:
        cmp[0] = SCMP_A0(SCMP_CMP_EQ, AF_NETLINK);
        cmp[1] = SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE);
        return add_rule(ctx, action, nr, r->syscall, 2, cmp, err);

    case CF_SECCOMP_ARGS_IOCTL_TTY_INJECT: {
        /* The kernel reads cmd as 32 bits: compare only those, otherwise
         * junk in the upper half would slip past an equality test. */
        static const uint64_t cmds[] = {TIOCSTI, TIOCLINUX};
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
            cmp[0] = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, cmds[i]);
            if (add_rule(ctx, action, nr, r->syscall, 1, cmp, err) < 0)
                return -1;
        }
        return 0;
    }

    case CF_SECCOMP_ARGS_PERSONALITY:
        /* Allowed: 0 (PER_LINUX) and 0xffffffff (query), 32-bit values.
         * Denied is every other low-32-bit pattern, expressed with single
         * masked compares: bit 31 clear and some bit i set (not 0), or
         * bit 31 set and some bit i clear (not all ones). */
        for (unsigned i = 0; i < 31; i++) {
            uint64_t bit = 1ULL << i, top = 1ULL << 31;
            cmp[0] = SCMP_A0(SCMP_CMP_MASKED_EQ, bit | top, bit);
            if (add_rule(ctx, action, nr, r->syscall, 1, cmp, err) < 0)
                return -1;
            cmp[0] = SCMP_A0(SCMP_CMP_MASKED_EQ, bit | top, top);
            if (add_rule(ctx, action, nr, r->syscall, 1, cmp, err) < 0)
                return -1;
        }
        return 0;
    }
    return cf_error_set(err, CF_E_SANDBOX, "seccomp: bad argument filter for %s", r->syscall);
}

static int export_bpf(scmp_filter_ctx ctx, cf_seccomp_prog *prog, cf_error *err)
{
    /* libseccomp 2.5 exports only to an fd: go through a memfd. */
    cf_autoclose int fd = memfd_create("cf-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return cf_error_set_errno(err, CF_E_SANDBOX, errno, "seccomp: memfd_create");
    int rc = seccomp_export_bpf(ctx, fd);
    if (rc < 0)
        return scmp_fail(err, rc, "exporting the BPF program", NULL);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return cf_error_set_errno(err, CF_E_SANDBOX, errno, "seccomp: fstat");
    size_t size = (size_t)st.st_size;
    if (size == 0 || size % sizeof(struct sock_filter) != 0 || size / sizeof(struct sock_filter) > BPF_MAXINSNS)
        return cf_error_set(err, CF_E_SANDBOX, "seccomp: exported program has a bad size (%zu bytes)", size);
    prog->insns = malloc(size);
    if (!prog->insns)
        return cf_error_set(err, CF_E_NOMEM, "seccomp: out of memory");
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, (char *)prog->insns + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cf_error_set_errno(err, CF_E_SANDBOX, n < 0 ? errno : EIO, "seccomp: reading the program back");
        got += (size_t)n;
    }
    prog->fprog.len = (unsigned short)(size / sizeof(struct sock_filter));
    prog->fprog.filter = prog->insns;
    return 0;
}

int cf_seccomp_prog_new(const cf_seccomp_opts *opts, cf_seccomp_prog **out, cf_error *err)
{
    *out = NULL;
    int errno_override = opts ? opts->errno_override : 0;
    if (errno_override < 0 || errno_override > 4095)
        return cf_error_set(err, CF_E_INVALID, "seccomp: errno_override out of range");

    /* The native arch only: seccomp_init() adds it alone, so calls through
     * i386 (int 0x80) and x32 (__X32_SYSCALL_BIT) hit the bad-arch action. */
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return cf_error_set(err, CF_E_SANDBOX, "seccomp: seccomp_init failed");
    cf_seccomp_prog *prog = calloc(1, sizeof(*prog));
    if (!prog) {
        seccomp_release(ctx);
        return cf_error_set(err, CF_E_NOMEM, "seccomp: out of memory");
    }
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc < 0) {
        scmp_fail(err, rc, "setting the bad-arch action", NULL);
        goto fail;
    }
    /* A binary tree of syscall numbers keeps the cost per call logarithmic. */
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (rc < 0) {
        scmp_fail(err, rc, "setting the optimizer", NULL);
        goto fail;
    }
    size_t n;
    const cf_seccomp_rule *tab = cf_seccomp_rules(&n);
    for (size_t i = 0; i < n; i++)
        if (add_table_rule(ctx, &tab[i], errno_override, err) < 0)
            goto fail;
    if (export_bpf(ctx, prog, err) < 0)
        goto fail;
    seccomp_release(ctx);
    *out = prog;
    return 0;
fail:
    seccomp_release(ctx);
    cf_seccomp_prog_destroy(prog);
    return -1;
}

void cf_seccomp_prog_destroy(cf_seccomp_prog *prog)
{
    if (!prog)
        return;
    free(prog->insns);
    free(prog);
}

const struct sock_fprog *cf_seccomp_prog_fprog(const cf_seccomp_prog *prog)
{
    return &prog->fprog;
}

size_t cf_seccomp_prog_len(const cf_seccomp_prog *prog)
{
    return prog->fprog.len;
}

int cf_seccomp_load(const cf_seccomp_prog *prog)
{
    if (!prog || !prog->fprog.filter) {
        errno = EINVAL;
        return -1;
    }
    /* Required for an unprivileged filter, and wanted anyway: setuid
     * binaries must not gain privileges inside the sandbox. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog->fprog) < 0)
        return -1;
    return 0;
}

static const char *args_doc(cf_seccomp_args a)
{
    switch (a) {
    case CF_SECCOMP_ARGS_NONE: return "any";
    case CF_SECCOMP_ARGS_CLONE_NEWNS: return "flags has a CLONE_NEW* bit";
    case CF_SECCOMP_ARGS_SOCKET_FAMILY: return "domain not AF_UNIX/AF_INET/AF_INET6/AF_NETLINK";
    case CF_SECCOMP_ARGS_NETLINK_PROTO: return "domain AF_NETLINK, protocol not NETLINK_ROUTE";
    case CF_SECCOMP_ARGS_IOCTL_TTY_INJECT: return "cmd (low 32 bits) TIOCSTI or TIOCLINUX";
    case CF_SECCOMP_ARGS_PERSONALITY: return "persona not 0 and not 0xffffffff";
    }
    return "?";
}

static const char *action_doc(const cf_seccomp_rule *r)
{
    if (r->action == CF_SECCOMP_KILL_PROCESS)
        return "KILL_PROCESS";
    switch (r->errnum) {
    case EPERM: return "EPERM";
    case ENOSYS: return "ENOSYS";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
    }
    return "errno";
}

int cf_seccomp_doc_markdown(FILE *out, cf_error *err)
{
    size_t n;
    const cf_seccomp_rule *tab = cf_seccomp_rules(&n);
    int rc = fprintf(out,
                     "# Sandbox seccomp filter\n\n"
                     "Generated from the rule table in `backends/isolation/seccomp.c` "
                     "(`cf_seccomp_doc_markdown`); `tests/unit/test_seccomp.c` fails when this file "
                     "is stale (regenerate with `CF_REGEN_DOCS=1 unit_test_seccomp`).\n\n"
                     "The filter is a deny list loaded last before exec, after namespaces, "
                     "capability drop and `no_new_privs`. Everything not listed is allowed. "
                     "Only the native ABI is accepted: a system call through a foreign ABI "
                     "(i386 `int 0x80`, x32 on x86-64) kills the process.\n\n"
                     "| syscall | action | when | reason |\n|---|---|---|---|\n");
    for (size_t i = 0; i < n && rc >= 0; i++)
        rc = fprintf(out, "| `%s` | %s | %s | %s |\n", tab[i].syscall, action_doc(&tab[i]), args_doc(tab[i].args),
                     tab[i].reason);
    if (rc < 0 || fflush(out) != 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "seccomp: writing the rule table");
    return 0;
}
