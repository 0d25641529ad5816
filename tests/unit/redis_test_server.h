/* A throwaway redis-server for the state tests: its own loopback port and
 * temp dir, started and killed by the test (no shared broker needed).
 * Header-only because unit tests are single-file executables. */
#ifndef CF_REDIS_TEST_SERVER_H
#define CF_REDIS_TEST_SERVER_H

#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cf_redis.h"

#define CF_TEST_REDIS_BIN "/usr/bin/redis-server"

typedef struct cf_test_redis {
    pid_t pid;
    int port;
    char dir[64];
    char password[64]; /* "" = no requirepass */
    bool aof;          /* persist with appendfsync always (survives SIGKILL) */
} cf_test_redis;

static inline void cf_test_sleep_us(long us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

static inline bool cf_test_redis_available(void)
{
    return access(CF_TEST_REDIS_BIN, X_OK) == 0;
}

/* Asks the kernel for a free port; the tiny race until redis binds it is
 * acceptable for tests. */
static inline int cf_test_redis_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t alen = sizeof(a);
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Waits until the server answers PING (LOADING counts as not yet). */
static inline int cf_test_redis_wait_ready(const cf_test_redis *s, long timeout_us)
{
    for (long waited = 0; waited < timeout_us; waited += 20000) {
        struct timeval tv = {0, 200000};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
        if (c && !c->err) {
            bool ok = true;
            if (s->password[0]) {
                redisReply *a = redisCommand(c, "AUTH %s", s->password);
                ok = a && a->type != REDIS_REPLY_ERROR;
                if (a)
                    freeReplyObject(a);
            }
            redisReply *p = ok ? redisCommand(c, "PING") : NULL;
            bool pong = p && p->type == REDIS_REPLY_STATUS;
            if (p)
                freeReplyObject(p);
            redisFree(c);
            if (pong)
                return 0;
        } else if (c) {
            redisFree(c);
        }
        cf_test_sleep_us(20000);
    }
    return -1;
}

/* (Re)starts the server on s->port with s->dir (both chosen on first use). */
static inline int cf_test_redis_launch(cf_test_redis *s)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    char log[128];
    snprintf(log, sizeof(log), "%s/redis.log", s->dir);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* Never outlive a crashed test. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        const char *argv[32];
        int n = 0;
        argv[n++] = CF_TEST_REDIS_BIN;
        argv[n++] = "--port";
        argv[n++] = port;
        argv[n++] = "--bind";
        argv[n++] = "127.0.0.1";
        argv[n++] = "--save";
        argv[n++] = "";
        argv[n++] = "--appendonly";
        argv[n++] = s->aof ? "yes" : "no";
        argv[n++] = "--appendfsync";
        argv[n++] = "always";
        argv[n++] = "--daemonize";
        argv[n++] = "no";
        argv[n++] = "--dir";
        argv[n++] = s->dir;
        if (s->password[0]) {
            argv[n++] = "--requirepass";
            argv[n++] = s->password;
        }
        argv[n] = NULL;
        execv(CF_TEST_REDIS_BIN, (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    if (cf_test_redis_wait_ready(s, 10000000) < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        s->pid = 0;
        return -1;
    }
    return 0;
}

static inline int cf_test_redis_start(cf_test_redis *s, const char *password, bool aof)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/cf-redis-test-XXXXXX");
    if (!mkdtemp(s->dir))
        return -1;
    if (password)
        snprintf(s->password, sizeof(s->password), "%s", password);
    s->aof = aof;
    for (int attempt = 0; attempt < 3; attempt++) {
        s->port = cf_test_redis_free_port();
        if (s->port > 0 && cf_test_redis_launch(s) == 0)
            return 0;
    }
    return -1;
}

/* SIGKILL: a crash, not a shutdown. */
static inline void cf_test_redis_kill(cf_test_redis *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

static inline int cf_test_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void cf_test_redis_stop(cf_test_redis *s)
{
    cf_test_redis_kill(s);
    if (s->dir[0]) {
        nftw(s->dir, cf_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        s->dir[0] = '\0';
    }
}

/* Client settings for this server: short timeouts and backoff for tests. */
static inline void cf_test_redis_config(const cf_test_redis *s, cf_redis_config *cfg)
{
    cf_redis_config_init(cfg);
    cfg->host = "127.0.0.1";
    cfg->port = s->port;
    cfg->password = s->password[0] ? s->password : NULL;
    cfg->connect_timeout_us = 500000;
    cfg->command_timeout_us = 2000000;
    cfg->retry_initial_us = 20000;
    cfg->retry_max_us = 200000;
}

/* A raw hiredis connection for white-box checks of the key space. */
static inline redisContext *cf_test_redis_raw(const cf_test_redis *s)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    if (s->password[0]) {
        redisReply *a = redisCommand(c, "AUTH %s", s->password);
        if (a)
            freeReplyObject(a);
    }
    return c;
}

/* Integer result of a raw command (-1 on anything else). */
static inline long long cf_test_redis_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = (r && r->type == REDIS_REPLY_INTEGER) ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return v;
}

#endif
