/* sandbox_net: egress-only networking for sandboxed programs.
 *
 * A program that may use the network never gets the host's network
 * namespace.  It gets its own, with user-mode networking by slirp4netns
 * (a TAP device whose packets slirp4netns turns into ordinary sockets of
 * the host): the host's loopback is not reachable (--disable-host-loopback),
 * and before the program's capabilities are dropped its namespace gets
 * "prohibit" routes for private, link-local, shared, reserved, multicast and
 * metadata ranges and for every address of the host itself, so connect()
 * to them fails with EACCES.  Destinations an operator's profile allows get
 * more specific routes through slirp's gateway.  IPv6 is not configured:
 * unreachable.
 *
 * Split like the rest of the sandbox: the parent starts slirp4netns for
 * the child's pid and waits until it is ready (cf_net_egress_start); the
 * child installs the routes (cf_net_egress_routes, async-signal-safe); the
 * parent stops slirp4netns after the execution (cf_net_egress_stop).
 */
#ifndef CF_SANDBOX_NET_H
#define CF_SANDBOX_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cf_backend.h"
#include "cf_error.h"

#define CF_NET_MAX_BLOCKS 256
/* util-linux unshare(1): starts slirp4netns in a private mount namespace. */
#define CF_NET_UNSHARE "/usr/bin/unshare"
#define CF_NET_MAX_ALLOWS 32

/* Routes for one execution (filled in the parent, read by the child). */
typedef struct cf_net_routes {
    cf_cidr4 block[CF_NET_MAX_BLOCKS];
    size_t n_block;
    size_t n_host; /* of which the host's own addresses */
    cf_cidr4 allow[CF_NET_MAX_ALLOWS];
    size_t n_allow;
} cf_net_routes;

/* The ranges refused by default, plus every IPv4 address of this host
 * (as /32, also those inside a refused range) and slirp's own gateway.
 * Read per execution (an address added later is the host's too); more
 * addresses than fit is an error, never a partial list. */
int cf_net_default_blocks(cf_net_routes *r, cf_error *err);

/* Copies allow rules into r (at most CF_NET_MAX_ALLOWS). */
int cf_net_set_allows(cf_net_routes *r, const cf_cidr4 *allow, size_t n, cf_error *err);

/* A running slirp4netns. */
typedef struct cf_net_egress {
    pid_t pid;   /* 0: none */
    int exit_fd; /* closing it makes slirp4netns exit */
} cf_net_egress;

/* Starts slirp4netns (path, absolute) for the network namespace of pid
 * and waits up to timeout_us until the TAP device is configured. */
int cf_net_egress_start(const char *slirp_path, pid_t pid, int64_t timeout_us, cf_net_egress *e, cf_error *err);

/* Stops and reaps it (idempotent; safe on a zeroed struct). */
void cf_net_egress_stop(cf_net_egress *e);

/* In the child, with CAP_NET_ADMIN in its user namespace: adds the routes
 * (rtnetlink; async-signal-safe).  Returns 0 or -1 with errno. */
int cf_net_egress_routes(const cf_net_routes *r);

/* Whether this host can offer network=enabled through slirp_path (may be
 * NULL/""): fills why (empty when offered) and *n_host (the host's own
 * addresses refused); when offered, writes <dir>/resolv.conf naming slirp's
 * DNS forwarder and its path into resolv ("" when it could not).  -1 only
 * for a failure of the host (err). */
int cf_net_offer_check(const char *slirp_path, const char *dir, char *why, size_t why_size, size_t *n_host,
                       char *resolv, size_t resolv_size, cf_error *err);

/* "a.b.c.d/n" -> rule; -1 when not a canonical IPv4 CIDR. */
int cf_cidr4_parse(const char *s, cf_cidr4 *out);

#endif
