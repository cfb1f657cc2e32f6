// net.c — addresses, listening and connecting sockets, and whole-buffer
// transfers with a progress timeout and a stop descriptor (net.h).
#include "sync/net.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define NET_BACKLOG 16
#define NET_BULK_BUFFER (4 << 20)

// ---- Addresses ----------------------------------------------------------------

static int parse_port(const char *s, const char *whole, char *port, size_t size, rl_err *err) {
    size_t n = strlen(s);
    unsigned long v = 0;
    int ok = n >= 1 && n <= 5;
    for (size_t i = 0; ok && i < n; i++) {
        ok = s[i] >= '0' && s[i] <= '9';
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (!ok || v > 65535)
        return err_set(err, "bad port \"%s\" (a number from 0 to 65535): %s", s, whole);
    snprintf(port, size, "%lu", v);
    return 0;
}

static int parse_tcp(const char *rest, const char *whole, net_addr *a, rl_err *err) {
    const char *host = "127.0.0.1", *port = rest;
    size_t host_len = strlen(host);
    if (rest[0] == '[') {                        // [V6ADDR]:PORT
        const char *close = strchr(rest, ']');
        if (!close) return err_set(err, "no ']' after the IPv6 address: %s", whole);
        if (close[1] != ':') return err_set(err, "no ':PORT' after the IPv6 address: %s", whole);
        host = rest + 1;
        host_len = (size_t)(close - host);
        port = close + 2;
    } else {
        const char *colon = strrchr(rest, ':');
        if (colon) {                             // HOST:PORT
            host = rest;
            host_len = (size_t)(colon - rest);
            port = colon + 1;
            if (memchr(host, ':', host_len))
                return err_set(err, "an IPv6 address needs brackets (tcp:[ADDR]:PORT): %s", whole);
        }                                        // else PORT alone: loopback
    }
    if (host_len == 0) return err_set(err, "empty host: %s", whole);
    // No name or address holds a bracket; one would not read back as the same address.
    if (memchr(host, '[', host_len) || memchr(host, ']', host_len))
        return err_set(err, "a bracket in the host \"%.*s\": %s", (int)host_len, host, whole);
    if (host_len >= sizeof a->host) return err_set(err, "host name too long: %s", whole);
    if (parse_port(port, whole, a->port, sizeof a->port, err)) return -1;
    memcpy(a->host, host, host_len);
    a->host[host_len] = 0;
    a->tcp = 1;
    return 0;
}

int net_parse(const char *s, net_addr *a, rl_err *err) {
    memset(a, 0, sizeof *a);
    if (!strncmp(s, "tcp:", 4)) return parse_tcp(s + 4, s, a, err);
    const char *path = !strncmp(s, "unix:", 5) ? s + 5 : s;
    size_t n = strlen(path);
    if (n == 0) return err_set(err, "empty socket path: \"%s\"", s);
    if (n >= sizeof ((struct sockaddr_un *)0)->sun_path || n >= sizeof a->path)
        return err_set(err, "socket path too long (%zu bytes, at most %zu): %s", n,
                       sizeof ((struct sockaddr_un *)0)->sun_path - 1, s);
    memcpy(a->path, path, n + 1);
    return 0;
}

void net_format(const net_addr *a, char *buf, size_t size) {
    if (!a->tcp) snprintf(buf, size, "unix:%s", a->path);
    else if (strchr(a->host, ':')) snprintf(buf, size, "tcp:[%s]:%s", a->host, a->port);
    else snprintf(buf, size, "tcp:%s:%s", a->host, a->port);
}

// ---- Sockets ------------------------------------------------------------------

static socklen_t unix_sockaddr(const net_addr *a, struct sockaddr_un *sa) {
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strlen(a->path);                  // < sizeof sun_path: net_parse checked
    memcpy(sa->sun_path, a->path, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

// connect(2) that a signal does not cut short: an interrupted blocking connect
// goes on in the background, so wait for it and take its outcome.
static int connect_fd(int fd, const struct sockaddr *sa, socklen_t len) {
    if (connect(fd, sa, len) == 0) return 0;
    if (errno != EINTR) return -1;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r = poll(&p, 1, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        int e = 0;
        socklen_t el = sizeof e;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el)) return -1;
        if (e) {
            errno = e;
            return -1;
        }
        return 0;
    }
}

// A file at the socket's path: a crashed receiver's socket is removed (nobody
// accepts on it: ECONNREFUSED); a live one or another kind of file stays.
static int clear_stale_socket(const net_addr *a, const char *name, rl_err *err) {
    struct stat st;
    if (lstat(a->path, &st)) {
        if (errno == ENOENT) return 0;
        return err_set(err, "cannot listen on %s: %s", name, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode)) return err_set(err, "cannot listen on %s: the file exists and is not a socket", name);
    // Non-blocking: a live receiver with a full backlog answers EAGAIN instead of blocking us.
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return err_set(err, "cannot listen on %s: socket: %s", name, strerror(errno));
    struct sockaddr_un sa;
    socklen_t len = unix_sockaddr(a, &sa);
    int rc = connect(fd, (struct sockaddr *)&sa, len), e = errno;
    close(fd);
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS) return err_set(err, "already listening: %s", name);
    if (e == ENOENT) return 0;                   // removed meanwhile
    if (e != ECONNREFUSED) return err_set(err, "cannot listen on %s: %s", name, strerror(e));
    if (unlink(a->path) && errno != ENOENT)
        return err_set(err, "cannot remove the stale socket %s: %s", name, strerror(errno));
    return 0;
}

static int listen_unix(net_addr *a, const char *name, rl_err *err) {
    if (clear_stale_socket(a, name, err)) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return err_set(err, "cannot listen on %s: socket: %s", name, strerror(errno));
    struct sockaddr_un sa;
    socklen_t len = unix_sockaddr(a, &sa);
    if (bind(fd, (struct sockaddr *)&sa, len)) {
        err_set(err, "cannot listen on %s: %s", name, strerror(errno));
        close(fd);
        return -1;
    }
    // Before listen: nobody can connect while the file still has the umask's mode.
    // (umask would do it too, but it is process-wide and other threads create files.)
    if (chmod(a->path, 0600) || listen(fd, NET_BACKLOG)) {
        err_set(err, "cannot listen on %s: %s", name, strerror(errno));
        close(fd);
        unlink(a->path);
        return -1;
    }
    return fd;
}

static void tcp_nodelay(int fd) {
    // Messages are small and each waits for an answer: Nagle's delay would cost
    // a round of delayed ACK (~40 ms) per message. Accepted sockets inherit it.
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int resolve(const net_addr *a, const char *name, struct addrinfo **res, rl_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    int rc = getaddrinfo(a->host, a->port, &hints, res);
    if (rc) return err_set(err, "cannot resolve %s: %s", name, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return 0;
}

static int listen_tcp(net_addr *a, const char *name, rl_err *err) {
    struct addrinfo *res;
    if (resolve(a, name, &res, err)) return -1;
    int fd = -1, e = EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        tcp_nodelay(fd);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, NET_BACKLOG)) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return err_set(err, "cannot listen on %s: %s", name, strerror(e));
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        unsigned port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                                 : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(a->port, sizeof a->port, "%u", port);
    }
    return fd;
}

int net_listen(net_addr *a, rl_err *err) {
    char name[512];
    net_format(a, name, sizeof name);
    return a->tcp ? listen_tcp(a, name, err) : listen_unix(a, name, err);
}

int net_connect(const net_addr *a, int *unreachable, rl_err *err) {
    char name[512];
    net_format(a, name, sizeof name);
    if (unreachable) *unreachable = 0;
    int fd = -1, e = 0;
    if (!a->tcp) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return err_set(err, "cannot connect to %s: socket: %s", name, strerror(errno));
        struct sockaddr_un sa;
        socklen_t len = unix_sockaddr(a, &sa);
        if (connect_fd(fd, (struct sockaddr *)&sa, len)) {
            e = errno;
            close(fd);
            fd = -1;
        }
    } else {
        struct addrinfo *res;
        if (resolve(a, name, &res, err)) return -1;
        e = EADDRNOTAVAIL;
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) {
                e = errno;
                continue;
            }
            if (connect_fd(fd, ai->ai_addr, ai->ai_addrlen)) {
                e = errno;
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(res);
        if (fd >= 0) tcp_nodelay(fd);
    }
    if (fd < 0) {
        if (unreachable && (e == ENOENT || e == ECONNREFUSED)) *unreachable = 1;
        return err_set(err, "cannot connect to %s: %s", name, strerror(e));
    }
    return fd;
}

void net_unlink(const net_addr *a) {
    if (!a->tcp && a->path[0]) unlink(a->path);
}

// Written under exit_mu (listeners end on threads of their own); read
// without it by the signal handler, which may take no lock.
static char exit_unlink[NET_AT_EXIT][sizeof ((net_addr *)0)->path];
static pthread_mutex_t exit_mu = PTHREAD_MUTEX_INITIALIZER;

static void unlink_at_exit(void) {
    for (int i = 0; i < NET_AT_EXIT; i++)
        if (exit_unlink[i][0]) unlink(exit_unlink[i]);
}

static void unlink_and_die(int sig) {
    unlink_at_exit();
    signal(sig, SIG_DFL);
    raise(sig);
}

void net_unlink_at_exit(const net_addr *a) {
    static int installed;
    if (a->tcp) return;
    pthread_mutex_lock(&exit_mu);
    int i = 0;
    while (i < NET_AT_EXIT && exit_unlink[i][0]) i++;
    // More sockets than any tool listens on: the others are left behind (and replaced next time).
    if (i < NET_AT_EXIT) snprintf(exit_unlink[i], sizeof exit_unlink[i], "%s", a->path);
    int first = !installed++;
    pthread_mutex_unlock(&exit_mu);
    if (!first) return;
    atexit(unlink_at_exit);
    int sigs[] = {SIGINT, SIGTERM, SIGPIPE};
    for (int k = 0; k < 3; k++) {
        struct sigaction old, sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = unlink_and_die;
        if (sigaction(sigs[k], NULL, &old) == 0 && old.sa_handler == SIG_DFL) sigaction(sigs[k], &sa, NULL);
    }
}

void net_forget_at_exit(const net_addr *a) {
    pthread_mutex_lock(&exit_mu);
    for (int i = 0; i < NET_AT_EXIT; i++)
        if (!a->tcp && !strcmp(exit_unlink[i], a->path)) exit_unlink[i][0] = 0;
    pthread_mutex_unlock(&exit_mu);
}

void net_bulk(int fd) {
    int size = NET_BULK_BUFFER;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

// ---- Transfers ----------------------------------------------------------------

// Waits until fd is ready for `events`: 0; -1 with err and errno set to
// ECANCELED (stop_fd readable), ETIMEDOUT (no readiness for `timeout` s) or
// poll's error.
static int wait_ready(int fd, short events, int stop_fd, double timeout, rl_err *err) {
    double deadline = timeout > 0 ? clock_now() + timeout : 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = stop_fd, .events = POLLIN}};
        int ms = -1;
        if (timeout > 0) {
            double left = ceil((deadline - clock_now()) * 1000);
            ms = left <= 0 ? 0 : left >= INT_MAX ? INT_MAX : (int)left;
        }
        int r = poll(p, stop_fd >= 0 ? 2 : 1, ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            err_set(err, "poll: %s", strerror(e));
            errno = e;
            return -1;
        }
        if (stop_fd >= 0 && p[1].revents) {      // readable, or its writer gone: both mean stop
            err_set(err, "stopped");
            errno = ECANCELED;
            return -1;
        }
        if (p[0].revents & POLLNVAL) {
            err_set(err, "%s", strerror(EBADF));
            errno = EBADF;
            return -1;
        }
        if (p[0].revents) return 0;              // ready, hung up or failed: the call tells which
        if (timeout > 0 && clock_now() >= deadline) {
            err_set(err, "no progress for %g s", timeout);
            errno = ETIMEDOUT;
            return -1;
        }
    }
}

static int closed_by_peer(size_t done, size_t n, int e, rl_err *err) {
    err_set(err, "connection closed by the peer after %zu of %zu bytes", done, n);
    errno = e;
    return -1;
}

int net_send_all(int fd, const void *p, size_t n, int stop_fd, double timeout, rl_err *err) {
    const uint8_t *b = p;
    size_t done = 0;
    while (done < n) {
        if (wait_ready(fd, POLLOUT, stop_fd, timeout, err)) return -1;
        ssize_t s = send(fd, b + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (s < 0) {
            int e = errno;
            if (e == EINTR || e == EAGAIN || e == EWOULDBLOCK) continue;
            if (e == EPIPE || e == ECONNRESET) return closed_by_peer(done, n, e, err);
            err_set(err, "%s", strerror(e));
            errno = e;
            return -1;
        }
        done += (size_t)s;
    }
    return 0;
}

int net_recv_all(int fd, void *p, size_t n, int stop_fd, double timeout, rl_err *err) {
    uint8_t *b = p;
    size_t done = 0;
    while (done < n) {
        if (wait_ready(fd, POLLIN, stop_fd, timeout, err)) return -1;
        ssize_t r = recv(fd, b + done, n - done, MSG_DONTWAIT);
        if (r < 0) {
            int e = errno;
            if (e == EINTR || e == EAGAIN || e == EWOULDBLOCK) continue;
            // A peer that closes with our bytes unread resets the connection: still a close.
            if (e == ECONNRESET) {
                if (done == 0) return 1;
                return closed_by_peer(done, n, e, err);
            }
            err_set(err, "%s", strerror(e));
            errno = e;
            return -1;
        }
        if (r == 0) {
            if (done == 0) return 1;
            return closed_by_peer(done, n, EPIPE, err);
        }
        done += (size_t)r;
    }
    return 0;
}

int net_hung_up(int fd) {
    struct pollfd p = {.fd = fd, .events = 0};   // POLLERR and POLLHUP are reported whatever is asked
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}
