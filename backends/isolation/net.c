/* Egress-only networking for the sandbox (cf_net.h). */
#include "cf_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cf_util.h"

/* slirp4netns's fixed layout (--configure): the namespace is 10.0.2.100/24,
 * the gateway (the host, for slirp) 10.0.2.2, its DNS forwarder 10.0.2.3. */
#define SLIRP_GATEWAY "10.0.2.2"
#define SLIRP_MTU "65520"

/* Refused by default (RFC 6890 special-purpose ranges that are not public
 * unicast).  The slirp network 10.0.2.0/24 stays reachable through its
 * connected route, which is more specific than 10.0.0.0/8. */
static const char *const default_blocks[] = {
    "0.0.0.0/8",       /* "this network" */
    "10.0.0.0/8",      /* private */
    "100.64.0.0/10",   /* carrier-grade NAT (shared) */
    "127.0.0.0/8",     /* loopback (the namespace's own lo is in the local table) */
    "169.254.0.0/16",  /* link-local, cloud metadata (169.254.169.254) */
    "172.16.0.0/12",   /* private */
    "192.0.0.0/24",    /* IETF protocol assignments */
    "192.0.2.0/24",    /* TEST-NET-1 */
    "192.168.0.0/16",  /* private */
    "198.18.0.0/15",   /* benchmarking */
    "198.51.100.0/24", /* TEST-NET-2 */
    "203.0.113.0/24",  /* TEST-NET-3 */
    "224.0.0.0/4",     /* multicast */
    "240.0.0.0/4",     /* reserved, broadcast */
    SLIRP_GATEWAY "/32", /* slirp's gateway itself: the host */
};

int cf_cidr4_parse(const char *s, cf_cidr4 *out)
{
    char buf[32];
    const char *slash = s ? strchr(s, '/') : NULL;
    if (!slash || (size_t)(slash - s) >= sizeof(buf))
        return -1;
    memcpy(buf, s, (size_t)(slash - s));
    buf[slash - s] = '\0';
    struct in_addr a;
    if (inet_pton(AF_INET, buf, &a) != 1)
        return -1;
    int64_t len;
    if (cf_parse_i64(slash + 1, 0, 32, &len, "prefix", NULL) < 0)
        return -1;
    uint32_t host = ntohl(a.s_addr);
    uint32_t mask = len == 0 ? 0 : 0xffffffffu << (32 - len);
    if ((host & ~mask) != 0)
        return -1; /* not canonical: host bits set */
    out->addr = a.s_addr;
    out->len = (uint8_t)len;
    return 0;
}

int cf_net_default_blocks(cf_net_routes *r, cf_error *err)
{
    r->n_block = r->n_host = 0;
    for (size_t i = 0; i < sizeof(default_blocks) / sizeof(default_blocks[0]); i++)
        if (cf_cidr4_parse(default_blocks[i], &r->block[r->n_block++]) < 0)
            return cf_error_set(err, CF_E_INVALID, "sandbox net: bad built-in range %s", default_blocks[i]);
    /* The host's own addresses are the host's services, whatever range
     * they are in. */
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox net: getifaddrs");
    size_t n_builtin = r->n_block;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
            continue;
        /* Even one inside a refused range gets its own /32: a profile that
         * allows that range must still not reach the host. */
        uint32_t a = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        if (r->n_block >= CF_NET_MAX_BLOCKS) {
            /* Fail closed: an address left out would be reachable. */
            freeifaddrs(ifs);
            return cf_error_set(err, CF_E_LIMIT, "sandbox net: the host has more than %d own addresses to refuse",
                                CF_NET_MAX_BLOCKS - (int)n_builtin);
        }
        r->block[r->n_block].addr = a;
        r->block[r->n_block].len = 32;
        r->n_block++;
        r->n_host++;
    }
    freeifaddrs(ifs);
    return 0;
}

int cf_net_set_allows(cf_net_routes *r, const cf_cidr4 *allow, size_t n, cf_error *err)
{
    if (n > CF_NET_MAX_ALLOWS)
        return cf_error_set(err, CF_E_LIMIT, "sandbox net: more than %d allowed destinations", CF_NET_MAX_ALLOWS);
    for (size_t i = 0; i < n; i++)
        r->allow[i] = allow[i];
    r->n_allow = n;
    return 0;
}

/* ---- parent: slirp4netns ---- */

extern char **environ;

int cf_net_egress_start(const char *slirp_path, pid_t pid, int64_t timeout_us, cf_net_egress *e, cf_error *err)
{
    e->pid = 0;
    e->exit_fd = -1;
    int ready[2] = {-1, -1}, ex[2] = {-1, -1};
    int rc = -1;
    if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(ex, O_CLOEXEC) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox net: pipe2");
        goto out;
    }
    /* slirp4netns gets exactly: stdio on /dev/null, 3 = ready (write), 4 =
     * exit (read).  Sources are moved above 4 first so dup2 cannot clobber
     * one with another. */
    int rw = fcntl(ready[1], F_DUPFD_CLOEXEC, 10), er = fcntl(ex[0], F_DUPFD_CLOEXEC, 10);
    if (rw < 0 || er < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "sandbox net: fcntl");
        if (rw >= 0)
            close(rw);
        if (er >= 0)
            close(er);
        goto out;
    }
    close(ready[1]);
    ready[1] = rw;
    close(ex[0]);
    ex[0] = er;

    char pidarg[32];
    snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
    /* slirp4netns --enable-sandbox pivots into a tmpfs and detaches the old
     * root; run from the host's mount namespace, that detach propagated to
     * shared host mounts (seen: every `ip netns` mount under /run/netns
     * vanished, which on a Kubernetes node are the pods' network
     * namespaces).  So it starts in a private copy of the mount namespace. */
    char *const argv[] = {(char *)CF_NET_UNSHARE, "--mount", "--propagation", "private", (char *)slirp_path,
                          "--configure", "--mtu=" SLIRP_MTU, "--disable-host-loopback", "--enable-sandbox",
                          "--enable-seccomp", "--ready-fd=3", "--exit-fd=4", pidarg, "tap0", NULL};
    char *const envp[] = {NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, ready[1], 3);
    posix_spawn_file_actions_adddup2(&fa, ex[0], 4);
    /* Nothing else of the worker's: fds that are not close-on-exec (a
     * library's socket) would reach a process that parses the program's
     * packets. */
    posix_spawn_file_actions_addclosefrom_np(&fa, 5);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    pid_t sp = 0;
    int se = posix_spawn(&sp, CF_NET_UNSHARE, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (se != 0) {
        cf_error_set_errno(err, CF_E_SANDBOX, se, "sandbox net: starting %s", slirp_path);
        goto out;
    }
    e->pid = sp;
    e->exit_fd = ex[1];
    ex[1] = -1;
    close(ready[1]);
    ready[1] = -1;

    /* slirp4netns writes '1' when tap0 is configured; EOF means it died. */
    int64_t until = cf_mono_us() + timeout_us;
    for (;;) {
        int64_t left = until - cf_mono_us();
        if (left <= 0) {
            cf_error_set(err, CF_E_SANDBOX, "sandbox net: slirp4netns not ready within %lld ms",
                         (long long)(timeout_us / 1000));
            break;
        }
        struct pollfd p = {.fd = ready[0], .events = POLLIN};
        int pr = poll(&p, 1, (int)((left + 999) / 1000));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        char c;
        ssize_t n = read(ready[0], &c, 1);
        if (n == 1 && c == '1') {
            rc = 0;
        } else {
            cf_error_set(err, CF_E_SANDBOX, "sandbox net: slirp4netns exited before it was ready");
        }
        break;
    }
    if (rc < 0)
        cf_net_egress_stop(e);
out:
    for (int i = 0; i < 2; i++) {
        if (ready[i] >= 0)
            close(ready[i]);
        if (ex[i] >= 0)
            close(ex[i]);
    }
    if (err && rc < 0)
        err->retriable = true;
    return rc;
}

void cf_net_egress_stop(cf_net_egress *e)
{
    if (!e)
        return;
    if (e->exit_fd >= 0) {
        close(e->exit_fd);
        e->exit_fd = -1;
    }
    if (e->pid <= 0)
        return;
    /* It exits on the exit fd's EOF (and when the namespace is gone); a
     * short grace, then SIGKILL. */
    for (int i = 0; i < 200; i++) {
        pid_t r = waitpid(e->pid, NULL, WNOHANG);
        if (r == e->pid || (r < 0 && errno == ECHILD)) {
            e->pid = 0;
            return;
        }
        usleep(1000);
    }
    kill(e->pid, SIGKILL);
    while (waitpid(e->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    e->pid = 0;
}

/* ---- child: routes (async-signal-safe: syscalls on the stack only) ---- */

struct route_req {
    struct nlmsghdr nh;
    struct rtmsg rt;
    char attrs[64];
};

static size_t add_attr(struct route_req *q, size_t off, unsigned short type, const void *data, size_t len)
{
    struct rtattr *a = (struct rtattr *)(void *)(q->attrs + off);
    a->rta_type = type;
    a->rta_len = (unsigned short)RTA_LENGTH(len);
    memcpy(RTA_DATA(a), data, len);
    return off + RTA_ALIGN(a->rta_len);
}

static int route_add(int fd, uint32_t seq, const cf_cidr4 *c, bool prohibit, uint32_t gateway)
{
    struct route_req q;
    memset(&q, 0, sizeof(q));
    q.rt.rtm_family = AF_INET;
    q.rt.rtm_dst_len = c->len;
    q.rt.rtm_table = RT_TABLE_MAIN;
    q.rt.rtm_protocol = RTPROT_STATIC;
    q.rt.rtm_scope = RT_SCOPE_UNIVERSE;
    q.rt.rtm_type = prohibit ? RTN_PROHIBIT : RTN_UNICAST;
    size_t off = add_attr(&q, 0, RTA_DST, &c->addr, 4);
    if (!prohibit)
        off = add_attr(&q, off, RTA_GATEWAY, &gateway, 4);
    q.nh.nlmsg_len = (uint32_t)(NLMSG_LENGTH(sizeof(struct rtmsg)) + off);
    q.nh.nlmsg_type = RTM_NEWROUTE;
    q.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK;
    q.nh.nlmsg_seq = seq;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    ssize_t w;
    do
        w = sendto(fd, &q, q.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel));
    while (w < 0 && errno == EINTR);
    if (w != (ssize_t)q.nh.nlmsg_len)
        return -1;
    union {
        struct nlmsghdr nh;
        char buf[512];
    } ack;
    ssize_t r;
    do
        r = recv(fd, &ack, sizeof(ack), 0);
    while (r < 0 && errno == EINTR);
    if (r < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) || ack.nh.nlmsg_type != NLMSG_ERROR) {
        errno = EPROTO;
        return -1;
    }
    const struct nlmsgerr *e = NLMSG_DATA(&ack.nh);
    if (e->error != 0) {
        errno = -e->error;
        return -1;
    }
    return 0;
}

int cf_net_egress_routes(const cf_net_routes *r)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0)
        return -1;
    uint32_t gw;
    if (inet_pton(AF_INET, SLIRP_GATEWAY, &gw) != 1) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    uint32_t seq = 1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->n_block; i++)
        rc = route_add(fd, seq++, &r->block[i], true, 0);
    /* Allowed destinations: more specific than the ranges they punch
     * through, so the longest prefix wins.  A host address (/32) stays
     * refused unless allowed exactly. */
    for (size_t i = 0; rc == 0 && i < r->n_allow; i++)
        rc = route_add(fd, seq++, &r->allow[i], false, gw);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int cf_net_offer_check(const char *slirp_path, const char *dir, char *why, size_t why_size, size_t *n_host,
                       char *resolv, size_t resolv_size, cf_error *err)
{
    why[0] = '\0';
    resolv[0] = '\0';
    *n_host = 0;
    cf_net_routes probe; /* only to check and report here: executions read their own */
    if (!slirp_path || !slirp_path[0])
        snprintf(why, why_size, "no slirp4netns configured");
    else if (slirp_path[0] != '/' || access(slirp_path, X_OK) < 0)
        snprintf(why, why_size, "slirp4netns '%.100s' is not an executable absolute path", slirp_path);
    else if (access("/dev/net/tun", R_OK | W_OK) < 0)
        snprintf(why, why_size, "no /dev/net/tun");
    else if (access(CF_NET_UNSHARE, X_OK) < 0)
        snprintf(why, why_size, "no %s (util-linux)", CF_NET_UNSHARE);
    else if (cf_net_default_blocks(&probe, err) < 0)
        return -1;
    if (why[0])
        return 0;
    *n_host = probe.n_host;
    /* slirp4netns forwards DNS from 10.0.2.3 to the host's resolver. */
    char rpath[4096];
    if (snprintf(rpath, sizeof(rpath), "%.4000s/resolv.conf", dir) >= (int)sizeof(rpath))
        return 0;
    int fd = open(rpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
        static const char conf[] = "nameserver 10.0.2.3\n";
        if (write(fd, conf, sizeof(conf) - 1) == (ssize_t)(sizeof(conf) - 1))
            cf_strlcpy(resolv, rpath, resolv_size);
        close(fd);
    }
    return 0;
}
