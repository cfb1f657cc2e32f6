// recnet.c — record streams over sockets (recnet.h): the sender's connection
// and answer, the listener's thread that authenticates each connection.
#include "sync/recnet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "records/record.h"
#include "sync/push.h"

// ---- The sender ----------------------------------------------------------------

static void pause_s(double s) {
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

// A message's {ok: false, error}: the error into buf and 1; 0 when it says ok.
static int refusal_of(const rec_t *msg, char *buf, size_t size) {
    long i = rec_find(msg, "ok");
    size_t n = 0;
    const uint8_t *v = i >= 0 ? rec_value(msg, (size_t)i, &n) : NULL;
    if (v && n == 1 && *v == 0xc3) return 0;   // msgpack true
    const char *s = "no reason given";
    size_t len = strlen(s);
    rec_get_str(msg, "error", &s, &len);
    snprintf(buf, size, "%.*s", (int)len, s);
    return 1;
}

int rnet_connect(const net_addr *to, const sbuf *token, double retry, rl_err *err) {
    double deadline = clock_now() + retry;
    int fd, unreachable;
    while ((fd = net_connect(to, &unreachable, err)) < 0) {
        double left = deadline - clock_now();
        if (!unreachable || retry <= 0) return -1;
        if (left <= 0) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            return err_set(err, "%.900s (tried for %g s)", why, retry);
        }
        pause_s(left < RNET_POLL ? left : RNET_POLL);
    }
    char addr[512], why[1024];
    net_format(to, addr, sizeof addr);
    net_bulk(fd);
    rec_t *hello = rec_new();
    rl_err e;
    int rc = -1;
    if (push_answer(fd, PUSH_RECORDS, token, PUSH_TIMEOUT, &e))
        err_set(err, "%s: %s", addr, e.msg);
    else if (push_recv_msg(fd, hello, -1, PUSH_TIMEOUT, &e))
        err_set(err, "%s: no answer to the authentication: %s", addr, e.msg);
    else if (refusal_of(hello, why, sizeof why))
        err_set(err, "%s refused the connection: %s", addr, why);
    else
        rc = 0;
    rec_free(hello);
    if (rc) {
        close(fd);
        return -1;
    }
    return fd;
}

int rnet_finish(int fd, uint64_t *records, rl_err *err) {
    *records = 0;
    if (shutdown(fd, SHUT_WR)) return err_set(err, "shutdown: %s", strerror(errno));
    rec_t *msg = rec_new();
    rl_err e;
    char why[1024];
    int rc = push_recv_msg(fd, msg, -1, 0, &e);
    if (rc == 1) rc = err_set(err, "the merge closed the connection without an answer");
    else if (rc) rc = err_set(err, "no answer from the merge: %s", e.msg);
    else if (refusal_of(msg, why, sizeof why)) rc = err_set(err, "the merge refused the stream: %s", why);
    else if (rec_get_uint(msg, "records", records) != REC_OK) rc = err_set(err, "the merge's answer has no \"records\"");
    rec_free(msg);
    return rc;
}

int rnet_refusal(int fd, double timeout, char *buf, size_t size) {
    rec_t *msg = rec_new();
    rl_err e;
    int got = push_recv_msg(fd, msg, -1, timeout, &e) == 0 && refusal_of(msg, buf, size);
    rec_free(msg);
    return got;
}

// ---- The listener --------------------------------------------------------------

struct rnet {
    rnet_opts o;
    net_addr addr;
    char name[512];
    int lfd;
    double until;   // clock_now() by which the connections must have come (with a start limit)
    pthread_t thread;
};

// "127.0.0.1:54321", "[::1]:54321", or for a unix socket "pid 1234".
static void peer_name(int fd, char *buf, size_t size) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    snprintf(buf, size, "an unknown peer");
    if (getpeername(fd, (struct sockaddr *)&ss, &len)) return;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(buf, size, "%s:%u", host, ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
        snprintf(buf, size, "[%s]:%u", host, ntohs(in->sin6_port));
    } else {
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl)) snprintf(buf, size, "pid %d", (int)cred.pid);
    }
}

// Steps 1-3 with one connection: 0, or -1 with why (the peer refused, or gone).
static int admit(rnet_t *l, int fd, rl_err *why) {
    rl_err e;
    int g = push_greet(fd, PUSH_RECORDS, l->o.token, -1, PUSH_TIMEOUT, &e);
    if (g > 0) return err_set(why, "it closed the connection before authenticating");
    if (g < 0) return err_set(why, "%s", e.msg);
    rec_t *hello = rec_new();
    char who[128];
    snprintf(who, sizeof who, "%s %s", l->o.tool, RLPIPE_VERSION);
    rec_set_bool(hello, "ok", 1);
    rec_set_cstr(hello, "receiver", who);
    int rc = push_send_msg(fd, hello, -1, PUSH_TIMEOUT, &e);
    rec_free(hello);
    return rc ? err_set(why, "%s", e.msg) : 0;
}

// Waits until the listening socket has a connection to accept: 1, or 0
// once the start limit (rnet_opts.start_timeout) has passed.
static int pending(rnet_t *l) {
    for (;;) {
        double left = l->until - clock_now();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = l->lfd, .events = POLLIN};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc != 0 && !(rc < 0 && errno == EINTR)) return 1;   // an error: accept4 tells it
    }
}

static void *listen_main(void *arg) {
    rnet_t *l = arg;
    int taken = 0;
    while (taken < l->o.expect) {
        if (l->o.start_timeout > 0 && !pending(l)) {
            char msg[700];
            snprintf(msg, sizeof msg, "%s: %d of %d connections came within %g s of the start (--start-timeout)",
                     l->name, taken, l->o.expect, l->o.start_timeout);
            l->o.failed(l->o.ctx, l->o.expect - taken, msg);
            break;
        }
        int fd = accept4(l->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == EAGAIN || e == ECONNABORTED) continue;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {   // may pass: do not spin
                pause_s(0.1);
                continue;
            }
            char msg[700];
            snprintf(msg, sizeof msg, "%s: accepting connections: %s", l->name, strerror(e));
            l->o.failed(l->o.ctx, l->o.expect - taken, msg);
            break;
        }
        char peer[128], msg[2048];
        peer_name(fd, peer, sizeof peer);
        rl_err why;
        if (admit(l, fd, &why)) {
            snprintf(msg, sizeof msg, "%s: refused %s: %s", l->name, peer, why.msg);
            l->o.refused(l->o.ctx, msg);
            close(fd);
            continue;
        }
        taken++;
        snprintf(msg, sizeof msg, "%s from %s", l->name, peer);
        l->o.source(l->o.ctx, fd, msg);
    }
    close(l->lfd);   // nobody else is expected: no one may connect any more
    net_unlink(&l->addr);
    net_forget_at_exit(&l->addr);
    return NULL;
}

rnet_t *rnet_listen(net_addr *a, const rnet_opts *o, rl_err *err) {
    rnet_t *l = xmalloc(sizeof *l);
    memset(l, 0, sizeof *l);
    l->o = *o;
    l->until = clock_now() + o->start_timeout;
    if ((l->lfd = net_listen(a, err)) < 0) {
        free(l);
        return NULL;
    }
    l->addr = *a;
    net_format(a, l->name, sizeof l->name);
    net_unlink_at_exit(a);
    int e = pthread_create(&l->thread, NULL, listen_main, l);
    if (e) {
        err_set(err, "%s: cannot start the listening thread: %s", l->name, strerror(e));
        close(l->lfd);
        net_unlink(a);
        net_forget_at_exit(a);
        free(l);
        return NULL;
    }
    return l;
}

const char *rnet_address(const rnet_t *l) { return l->name; }

void rnet_join(rnet_t *l) {
    if (!l) return;
    pthread_join(l->thread, NULL);
    free(l);
}

void rnet_source_end(void *ctx, int fd, const char *error, uint64_t records) {
    (void)ctx;
    if (error) {
        push_send_error(fd, error);
    } else {
        rec_t *msg = rec_new();
        rl_err e;
        rec_set_bool(msg, "ok", 1);
        rec_set_uint(msg, "records", records);
        (void)push_send_msg(fd, msg, -1, 5.0, &e);   // best effort: the sender may be gone
        rec_free(msg);
    }
    close(fd);
}
