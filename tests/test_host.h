/* A test host on a private address, for network tests (header-only: unit
 * and integration tests both use it).  It lives in a network namespace of
 * the test's own, joined to ours by a veth pair: <prefix>.<n>.2 serves
 * "hello" on port 7777, our side is <prefix>.<n>.1 (n from the pid).
 * Needs root and iproute2 (deploy/install.sh installs it).  Namespaces
 * left by runs that died are removed first. */
#ifndef CF_TEST_HOST_H
#define CF_TEST_HOST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct test_host {
    char ns[48];
    char veth[16];
    char net[32];  /* "<prefix>.<n>.0/30" */
    char peer[24]; /* "<prefix>.<n>.2": the server */
    char ours[24]; /* "<prefix>.<n>.1": the host's side */
    char pidfile[64];
    bool up;
} test_host;

static int test_host_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int test_host_sh(const char *fmt, ...)
{
    char cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* name: a short tag ("ut", "it") keeping unit and integration hosts
 * apart; prefix: the first two octets ("10.234"). */
static inline bool test_host_up(test_host *h, const char *name, const char *prefix)
{
    memset(h, 0, sizeof(*h));
    test_host_sh("for ns in $(ip netns list | grep -o 'cf-th%s-[0-9]*'); do p=${ns##*-}; "
                 "kill -0 $p 2>/dev/null || { ip link del cf%s$p 2>/dev/null; ip netns del $ns; }; done",
                 name, name);
    int pid = (int)getpid(), n = pid % 200 + 20;
    snprintf(h->ns, sizeof(h->ns), "cf-th%s-%d", name, pid);
    snprintf(h->veth, sizeof(h->veth), "cf%s%d", name, pid % 1000000);
    snprintf(h->net, sizeof(h->net), "%s.%d.0/30", prefix, n);
    snprintf(h->peer, sizeof(h->peer), "%s.%d.2", prefix, n);
    snprintf(h->ours, sizeof(h->ours), "%s.%d.1", prefix, n);
    snprintf(h->pidfile, sizeof(h->pidfile), "/tmp/cf-th%s-%d.pid", name, pid);
    if (test_host_sh("ip netns add %s && ip link add %s type veth peer name %sp && ip link set %sp netns %s && "
                     "ip addr add %s/30 dev %s && ip link set %s up && ip netns exec %s ip addr add %s/30 dev %sp && "
                     "ip netns exec %s ip link set %sp up && ip netns exec %s ip link set lo up",
                     h->ns, h->veth, h->veth, h->veth, h->ns, h->ours, h->veth, h->veth, h->ns, h->peer, h->veth,
                     h->ns, h->veth, h->ns) != 0)
        return false;
    h->up = true;
    /* ip netns exec execs the server: $! is its pid. */
    int rc = test_host_sh("ip netns exec %s /usr/bin/python3 -c \"import socket\n"
                          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                          "s.bind(('%s', 7777)); s.listen(8)\n"
                          "while True:\n    c, _ = s.accept(); c.sendall(b'hello'); c.close()\n\" >/dev/null 2>&1 & "
                          "echo $! > %s",
                          h->ns, h->peer, h->pidfile);
    usleep(300 * 1000);
    return rc == 0;
}

static inline void test_host_down(test_host *h)
{
    if (!h->up)
        return;
    test_host_sh("kill -9 $(cat %s) 2>/dev/null; rm -f %s; ip link del %s 2>/dev/null; ip netns del %s", h->pidfile,
                 h->pidfile, h->veth, h->ns);
    h->up = false;
}

#endif
