/* sandbox_seccomp: the default seccomp filter of the sandbox backend.
 *
 * The filter is a deny list on top of namespaces, dropped capabilities and
 * no_new_privs: it removes kernel attack surface that untrusted code never
 * needs (namespace and mount calls, ptrace, bpf, io_uring, keyrings, module
 * and kexec calls...) and argument-filters calls with harmless and harmful
 * uses (clone namespace flags, socket families, terminal-injection ioctls,
 * personality).  Only the native ABI is allowed; a call through a foreign
 * ABI (i386 int 0x80, x32 on x86-64) kills the process.
 *
 * Life cycle: build the filter once in the parent (cf_seccomp_prog_new,
 * uses libseccomp and malloc), then in each forked child call
 * cf_seccomp_load() as the very last step before exec: it only issues
 * prctl() and seccomp() and is async-signal-safe.
 *
 * Every rule is a row of a table (cf_seccomp_rules) with a one-line
 * reason; docs/SECCOMP.md is rendered from that table
 * (cf_seccomp_doc_markdown) and a unit test keeps the two in sync.
 */
#ifndef CF_SANDBOX_SECCOMP_H
#define CF_SANDBOX_SECCOMP_H

#include <stddef.h>
#include <stdio.h>

#include "cf_error.h"

struct sock_fprog;

/* What a rule does when it matches. */
typedef enum cf_seccomp_action {
    CF_SECCOMP_ERRNO = 0,    /* fail the call with rule->errnum */
    CF_SECCOMP_KILL_PROCESS, /* no harmless use exists: kill the whole process */
} cf_seccomp_action;

/* Which arguments a rule looks at (CF_SECCOMP_ARGS_NONE: every call). */
typedef enum cf_seccomp_args {
    CF_SECCOMP_ARGS_NONE = 0,
    CF_SECCOMP_ARGS_CLONE_NEWNS,     /* clone() with any CLONE_NEW* flag */
    CF_SECCOMP_ARGS_SOCKET_FAMILY,   /* domain outside AF_UNIX/INET/INET6/NETLINK */
    CF_SECCOMP_ARGS_NETLINK_PROTO,   /* AF_NETLINK with a protocol other than NETLINK_ROUTE */
    CF_SECCOMP_ARGS_IOCTL_TTY_INJECT,/* TIOCSTI / TIOCLINUX (low 32 bits of cmd) */
    CF_SECCOMP_ARGS_PERSONALITY,     /* any persona but PER_LINUX and the 0xffffffff query */
} cf_seccomp_args;

typedef struct cf_seccomp_rule {
    const char *syscall;       /* name as libseccomp knows it */
    cf_seccomp_action action;
    int errnum;                /* for CF_SECCOMP_ERRNO */
    cf_seccomp_args args;
    const char *reason;        /* one line: why this rule exists */
} cf_seccomp_rule;

/* The rule table (static storage); *count receives its length. */
const cf_seccomp_rule *cf_seccomp_rules(size_t *count);

/* Build options.  Production code passes NULL (all defaults). */
typedef struct cf_seccomp_opts {
    /* Non-zero: every ERRNO rule answers this errno instead of its own.
     * Tests use a marker errno to prove that an answer came from the
     * filter and not from the kernel.  ENOSYS rules keep ENOSYS (libc
     * falls back from clone3 only on ENOSYS). */
    int errno_override;
} cf_seccomp_opts;

/* A compiled filter, ready to be loaded in a child. */
typedef struct cf_seccomp_prog cf_seccomp_prog;

/* Compiles the rule table for the native architecture.  opts may be NULL.
 * On success *out owns the program (free with cf_seccomp_prog_destroy). */
int cf_seccomp_prog_new(const cf_seccomp_opts *opts, cf_seccomp_prog **out, cf_error *err);
void cf_seccomp_prog_destroy(cf_seccomp_prog *prog); /* NULL-safe */

/* The classic BPF program (owned by prog) and its length in instructions. */
const struct sock_fprog *cf_seccomp_prog_fprog(const cf_seccomp_prog *prog);
size_t cf_seccomp_prog_len(const cf_seccomp_prog *prog);

/* Child side, async-signal-safe: sets no_new_privs and installs the filter.
 * Returns 0, or -1 with errno set (then the child must not exec). */
int cf_seccomp_load(const cf_seccomp_prog *prog);

/* Writes the rule table as Markdown (docs/SECCOMP.md). */
int cf_seccomp_doc_markdown(FILE *out, cf_error *err);

#endif
