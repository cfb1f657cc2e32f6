// test_net.c — the sockets weights travel over and the push protocol's shared
// pieces (net.h, push.h, doc/design.md §5): addresses parse and print back; a unix
// socket is created 0600, a stale one replaced, a live one refused; tcp port 0
// resolves; whole-buffer transfers arrive intact, tell a clean end from a
// broken one, give up after the timeout and when told to stop; messages
// round-trip and over-long ones are refused before reading; the greeting
// authenticates the right token only; token files and tensor lists are checked.
// Adapter pushes (push_lora.h): the "lora" map round-trips and a malformed one
// is refused saying what is wrong; an adapter's tensors are matched to a base,
// every layer and target once with Hugging Face's shapes, and any other list
// is refused naming the tensor.
// Record streams over sockets (recnet.h, rl-cat --to and --merge): the two
// channels refuse each other's greeting and answer; a connection is
// authenticated, handed over, and answered with the records the merge read.
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "sync/net.h"
#include "sync/push.h"
#include "sync/push_lora.h"
#include "sync/recnet.h"
#include "tmpdir.h"

// ---- Helpers ------------------------------------------------------------------

static char *tmpdir(char *buf, size_t size) { return tmpdir_named(buf, size, "rlpipe-net"); }

// The address unix:DIR/rl.sock, parsed, in a new temporary directory DIR
// (dir); addr gets its text. 0, or -1 with err.
static int unix_addr_in_tmp(char *dir, size_t size, char *addr, size_t asize, net_addr *a, rl_err *err) {
    if (!tmpdir(dir, size)) return err_set(err, "mkdtemp: %s", strerror(errno));
    snprintf(addr, asize, "unix:%s/rl.sock", dir);
    return net_parse(addr, a, err);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int has(const char *text, const char *part) { return strstr(text, part) != NULL; }

static int pair(int sv[2]) { return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv); }

static void put_file(const char *path, const char *text, size_t n, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) return;
    if (write(fd, text, n) != (ssize_t)n) perror("write");
    fchmod(fd, mode);
    close(fd);
}

static sbuf token_of(const char *s) {
    sbuf b = {0};
    sbuf_put(&b, s, strlen(s));
    return b;
}

static const char *TOKEN_A = "a-token-of-enough-bytes-A";
static const char *TOKEN_B = "a-token-of-enough-bytes-B";

// A transfer or greeting run on a second thread while the test drives the other end.
typedef struct {
    int fd, stop_fd;
    const void *p;
    size_t n;
    double timeout, delay;
    const sbuf *token;
    push_channel ch;          // greet_job's: PUSH_WEIGHTS unless set
    int rc;
    rl_err err;
} job;

static void *send_job(void *arg) {
    job *j = arg;
    j->rc = net_send_all(j->fd, j->p, j->n, j->stop_fd, j->timeout, &j->err);
    return NULL;
}

static void *greet_job(void *arg) {
    job *j = arg;
    j->rc = push_greet(j->fd, j->ch, j->token, j->stop_fd, j->timeout, &j->err);
    return NULL;
}

// Writes one byte to fd after `delay` seconds.
static void *poke_job(void *arg) {
    job *j = arg;
    struct timespec ts = {.tv_sec = (time_t)j->delay, .tv_nsec = (long)((j->delay - (double)(time_t)j->delay) * 1e9)};
    nanosleep(&ts, NULL);
    j->rc = (int)write(j->fd, "x", 1);
    return NULL;
}

// ---- Addresses ----------------------------------------------------------------

static void parse_reads_unix_and_bare_paths(void) {
    net_addr a;
    rl_err err = {{0}};
    char text[512];
    CHECK(net_parse("unix:/run/rl.sock", &a, &err) == 0, "%s", err.msg);
    CHECK(!a.tcp && !strcmp(a.path, "/run/rl.sock"), "path %s", a.path);
    net_format(&a, text, sizeof text);
    CHECK(!strcmp(text, "unix:/run/rl.sock"), "%s", text);
    CHECK(net_parse("rel/dir/rl.sock", &a, &err) == 0, "%s", err.msg);
    CHECK(!a.tcp && !strcmp(a.path, "rel/dir/rl.sock"), "path %s", a.path);
    net_format(&a, text, sizeof text);
    CHECK(!strcmp(text, "unix:rel/dir/rl.sock"), "%s", text);
    char longest[200] = "unix:";
    memset(longest + 5, 'p', 107);                // sun_path holds 107 bytes and the NUL
    CHECK(net_parse(longest, &a, &err) == 0, "%s", err.msg);
    CHECK(strlen(a.path) == 107, "%zu", strlen(a.path));
}

static void parse_reads_tcp_forms_and_formats_them_back(void) {
    net_addr a;
    rl_err err = {{0}};
    char text[512];
    CHECK(net_parse("tcp:5000", &a, &err) == 0, "%s", err.msg);
    CHECK(a.tcp && !strcmp(a.host, "127.0.0.1") && !strcmp(a.port, "5000"), "%s %s", a.host, a.port);
    net_format(&a, text, sizeof text);
    CHECK(!strcmp(text, "tcp:127.0.0.1:5000"), "%s", text);
    CHECK(net_parse("tcp:gpu-7.example.org:65535", &a, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(a.host, "gpu-7.example.org") && !strcmp(a.port, "65535"), "%s %s", a.host, a.port);
    CHECK(net_parse("tcp:0.0.0.0:0", &a, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(a.host, "0.0.0.0") && !strcmp(a.port, "0"), "%s %s", a.host, a.port);
    CHECK(net_parse("tcp:[::1]:9000", &a, &err) == 0, "%s", err.msg);
    CHECK(a.tcp && !strcmp(a.host, "::1") && !strcmp(a.port, "9000"), "%s %s", a.host, a.port);
    net_format(&a, text, sizeof text);
    CHECK(!strcmp(text, "tcp:[::1]:9000"), "%s", text);
    CHECK(net_parse(text, &a, &err) == 0 && !strcmp(a.host, "::1"), "%s", err.msg);
    CHECK(net_parse("tcp:007", &a, &err) == 0 && !strcmp(a.port, "7"), "port %s", a.port);
}

static void parse_refuses_malformed_addresses_saying_why(void) {
    static const struct { const char *addr, *why; } bad[] = {
        {"", "empty socket path"},
        {"unix:", "empty socket path"},
        {"tcp:", "bad port"},
        {"tcp:host:", "bad port"},
        {"tcp:65536", "bad port \"65536\""},
        {"tcp:12a", "bad port"},
        {"tcp:-1", "bad port"},
        {"tcp:123456", "bad port"},
        {"tcp::80", "empty host"},
        {"tcp:[]:80", "empty host"},
        {"tcp:::1:80", "needs brackets"},
        {"tcp:[::1:80", "no ']'"},
        {"tcp:[::1]80", "no ':PORT'"},
        {"tcp:[[]:8", "a bracket in the host \"[\""},   // found by fuzz_push: it formatted as tcp:[:8
        {"tcp:a]b:80", "a bracket in the host"},
    };
    net_addr a;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rl_err err = {{0}};
        CHECK(net_parse(bad[i].addr, &a, &err) == -1, "\"%s\" accepted", bad[i].addr);
        CHECK(has(err.msg, bad[i].why), "\"%s\": %s", bad[i].addr, err.msg);
    }
    char too_long[200] = "unix:";
    memset(too_long + 5, 'p', 108);
    rl_err err = {{0}};
    CHECK(net_parse(too_long, &a, &err) == -1, "a 108-byte path accepted");
    CHECK(has(err.msg, "socket path too long (108 bytes, at most 107)"), "%s", err.msg);
    char long_host[400] = "tcp:";
    memset(long_host + 4, 'h', 300);
    strcat(long_host, ":80");
    CHECK(net_parse(long_host, &a, &err) == -1 && has(err.msg, "host name too long"), "%s", err.msg);
}

// ---- Listening and connecting -------------------------------------------------

static void unix_listen_makes_a_socket_only_its_owner_may_use(void) {
    char dir[256], addr[512];
    net_addr a;
    rl_err err = {{0}};
    CHECK(unix_addr_in_tmp(dir, sizeof dir, addr, sizeof addr, &a, &err) == 0, "%s", err.msg);
    mode_t old = umask(0);                       // the mode must not depend on the umask
    int lfd = net_listen(&a, &err);
    umask(old);
    CHECK(lfd >= 0, "%s", err.msg);
    struct stat st;
    CHECK(stat(a.path, &st) == 0 && S_ISSOCK(st.st_mode), "no socket at %s", a.path);
    CHECK((st.st_mode & 0777) == 0600, "mode %o, expected 0600", st.st_mode & 0777);
    CHECK(fcntl(lfd, F_GETFD) & FD_CLOEXEC, "listening socket without close-on-exec");
    int unreachable = -1;
    int cfd = net_connect(&a, &unreachable, &err);
    CHECK(cfd >= 0 && unreachable == 0, "%s", err.msg);
    CHECK(fcntl(cfd, F_GETFD) & FD_CLOEXEC, "connected socket without close-on-exec");
    int sfd = accept(lfd, NULL, NULL);
    CHECK(sfd >= 0, "accept: %s", strerror(errno));
    CHECK(net_send_all(cfd, "hello", 5, -1, 5, &err) == 0, "%s", err.msg);
    char got[5];
    CHECK(net_recv_all(sfd, got, 5, -1, 5, &err) == 0 && !memcmp(got, "hello", 5), "%s", err.msg);
    close(sfd), close(cfd), close(lfd);
    net_unlink(&a);
    CHECK(stat(a.path, &st) == -1 && errno == ENOENT, "net_unlink left %s", a.path);
    rm_rf(dir);
}

static void unix_listen_replaces_a_stale_socket(void) {
    char dir[256], addr[512];
    net_addr a;
    rl_err err = {{0}};
    CHECK(unix_addr_in_tmp(dir, sizeof dir, addr, sizeof addr, &a, &err) == 0, "%s", err.msg);
    // A crashed receiver's socket: bound, listened on, closed, the file left behind.
    int old = net_listen(&a, &err);
    CHECK(old >= 0, "%s", err.msg);
    close(old);
    struct stat st;
    CHECK(stat(a.path, &st) == 0 && S_ISSOCK(st.st_mode), "the stale socket is missing");
    int lfd = net_listen(&a, &err);
    CHECK(lfd >= 0, "stale socket not replaced: %s", err.msg);
    int cfd = net_connect(&a, NULL, &err);
    CHECK(cfd >= 0, "%s", err.msg);
    close(cfd), close(lfd);
    net_unlink(&a);
    rm_rf(dir);
}

static void unix_listen_refuses_a_live_socket(void) {
    char dir[256], addr[512];
    net_addr a;
    rl_err err = {{0}};
    CHECK(unix_addr_in_tmp(dir, sizeof dir, addr, sizeof addr, &a, &err) == 0, "%s", err.msg);
    int lfd = net_listen(&a, &err);
    CHECK(lfd >= 0, "%s", err.msg);
    int second = net_listen(&a, &err);
    CHECK(second == -1, "a second listener on a live socket");
    char want[600];
    snprintf(want, sizeof want, "already listening: %s", addr);
    CHECK(!strcmp(err.msg, want), "%s", err.msg);
    // The first listener still works: its file was not replaced.
    int cfd = net_connect(&a, NULL, &err);
    CHECK(cfd >= 0, "%s", err.msg);
    int probe = accept(lfd, NULL, NULL), sfd = accept(lfd, NULL, NULL);
    CHECK(probe >= 0 && sfd >= 0, "accept: %s", strerror(errno));
    close(probe), close(sfd), close(cfd), close(lfd);
    net_unlink(&a);
    rm_rf(dir);
}

static void unix_listen_refuses_a_file_that_is_not_a_socket(void) {
    char dir[256], path[512];
    CHECK(tmpdir(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/rl.sock", dir);
    put_file(path, "data", 4, 0644);
    net_addr a;
    rl_err err = {{0}};
    CHECK(net_parse(path, &a, &err) == 0, "%s", err.msg);
    CHECK(net_listen(&a, &err) == -1, "a regular file replaced by a socket");
    CHECK(has(err.msg, "not a socket") && has(err.msg, path), "%s", err.msg);
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode), "the file was removed");
    snprintf(path, sizeof path, "unix:%s/no-such-dir/rl.sock", dir);
    CHECK(net_parse(path, &a, &err) == 0, "%s", err.msg);
    CHECK(net_listen(&a, &err) == -1 && has(err.msg, path), "%s", err.msg);
    rm_rf(dir);
}

static void connect_to_nobody_is_unreachable(void) {
    char dir[256], addr[512];
    net_addr a;
    rl_err err = {{0}};
    CHECK(unix_addr_in_tmp(dir, sizeof dir, addr, sizeof addr, &a, &err) == 0, "%s", err.msg);
    int unreachable = 0;
    CHECK(net_connect(&a, &unreachable, &err) == -1 && unreachable == 1, "absent socket: %d", unreachable);
    CHECK(has(err.msg, "cannot connect to ") && has(err.msg, addr), "%s", err.msg);
    int lfd = net_listen(&a, &err);            // then stale: ECONNREFUSED
    CHECK(lfd >= 0, "%s", err.msg);
    close(lfd);
    unreachable = 0;
    CHECK(net_connect(&a, &unreachable, &err) == -1 && unreachable == 1, "stale socket: %d", unreachable);
    CHECK(net_connect(&a, NULL, &err) == -1, "NULL unreachable");
    net_unlink(&a);
    // A tcp port nobody listens on any more.
    net_addr t;
    CHECK(net_parse("tcp:0", &t, &err) == 0, "%s", err.msg);
    lfd = net_listen(&t, &err);
    CHECK(lfd >= 0, "%s", err.msg);
    close(lfd);
    unreachable = 0;
    CHECK(net_connect(&t, &unreachable, &err) == -1 && unreachable == 1, "closed tcp port: %s", err.msg);
    rm_rf(dir);
}

static void tcp_listen_on_port_0_binds_a_free_port_and_accepts(void) {
    net_addr a;
    rl_err err = {{0}};
    CHECK(net_parse("tcp:0", &a, &err) == 0, "%s", err.msg);
    int lfd = net_listen(&a, &err);
    CHECK(lfd >= 0, "%s", err.msg);
    int port = atoi(a.port);
    CHECK(port > 0 && port <= 65535, "port %s", a.port);
    char text[512], want[64];
    net_format(&a, text, sizeof text);
    snprintf(want, sizeof want, "tcp:127.0.0.1:%d", port);
    CHECK(!strcmp(text, want), "%s", text);
    net_addr b;
    CHECK(net_parse(text, &b, &err) == 0, "%s", err.msg);
    int cfd = net_connect(&b, NULL, &err);
    CHECK(cfd >= 0, "%s", err.msg);
    int sfd = accept(lfd, NULL, NULL);
    CHECK(sfd >= 0, "accept: %s", strerror(errno));
    net_bulk(sfd), net_bulk(cfd);
    CHECK(net_send_all(sfd, "over tcp", 8, -1, 5, &err) == 0, "%s", err.msg);
    char got[8];
    CHECK(net_recv_all(cfd, got, 8, -1, 5, &err) == 0 && !memcmp(got, "over tcp", 8), "%s", err.msg);
    close(sfd), close(cfd), close(lfd);
    // The same port cannot be listened on twice at once.
    lfd = net_listen(&b, &err);
    CHECK(lfd >= 0, "SO_REUSEADDR: %s", err.msg);
    CHECK(net_listen(&b, &err) == -1 && has(err.msg, text), "%s", err.msg);
    close(lfd);
}

// Whether this host has an IPv6 loopback to test on (containers may not).
static int have_ipv6_loopback(void) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

static void tcp_listens_on_ipv6_loopback(void) {
    net_addr a;
    rl_err err = {{0}};
    CHECK(net_parse("tcp:[::1]:0", &a, &err) == 0, "%s", err.msg);
    int lfd = net_listen(&a, &err);
    CHECK(lfd >= 0, "%s", err.msg);
    CHECK(atoi(a.port) > 0, "port %s", a.port);
    int cfd = net_connect(&a, NULL, &err);
    CHECK(cfd >= 0, "%s", err.msg);
    close(cfd), close(lfd);
}

// ---- Transfers ----------------------------------------------------------------

static void transfer_of_64_mib_arrives_intact(void) {
    size_t n = (size_t)64 << 20;
    uint8_t *src = xmalloc(n), *dst = xmalloc(n);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        src[i] = (uint8_t)x;
    }
    memset(dst, 0, n);
    int sv[2];
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    net_bulk(sv[0]), net_bulk(sv[1]);
    job j = {.fd = sv[0], .stop_fd = -1, .p = src, .n = n, .timeout = 30};
    pthread_t th;
    pthread_create(&th, NULL, send_job, &j);
    rl_err err = {{0}};
    int rc = net_recv_all(sv[1], dst, n, -1, 30, &err);
    pthread_join(th, NULL);
    int same = !memcmp(src, dst, n);
    free(src), free(dst);
    close(sv[0]), close(sv[1]);
    CHECK(j.rc == 0, "send: %s", j.err.msg);
    CHECK(rc == 0, "recv: %s", err.msg);
    CHECK(same, "the bytes differ");
}

static void recv_returns_1_on_a_clean_end_and_fails_mid_buffer(void) {
    int sv[2];
    rl_err err = {{0}};
    char buf[10];
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    close(sv[0]);
    CHECK(net_recv_all(sv[1], buf, 10, -1, 5, &err) == 1, "a clean end: %s", err.msg);
    CHECK(net_recv_all(sv[1], buf, 0, -1, 5, &err) == 0, "nothing to read is done");
    close(sv[1]);
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    CHECK(write(sv[0], "abc", 3) == 3, "write");
    close(sv[0]);
    CHECK(net_recv_all(sv[1], buf, 10, -1, 5, &err) == -1, "a broken end read as complete");
    CHECK(!strcmp(err.msg, "connection closed by the peer after 3 of 10 bytes"), "%s", err.msg);
    close(sv[1]);
}

static void send_to_a_closed_peer_fails_without_sigpipe(void) {
    int sv[2];
    rl_err err = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    close(sv[1]);
    static char big[1 << 16];
    CHECK(net_send_all(sv[0], big, sizeof big, -1, 5, &err) == -1, "sent to nobody");
    CHECK(has(err.msg, "connection closed by the peer after 0 of 65536 bytes"), "%s", err.msg);
    CHECK(errno == EPIPE || errno == ECONNRESET, "errno %d", errno);
    close(sv[0]);
}

static void recv_gives_up_after_the_timeout_without_progress(void) {
    int sv[2];
    rl_err err = {{0}};
    char buf[4];
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    CHECK(write(sv[0], "ab", 2) == 2, "write");
    double t0 = now_s();
    int rc = net_recv_all(sv[1], buf, 4, -1, 0.2, &err);
    double dt = now_s() - t0;
    close(sv[0]), close(sv[1]);
    CHECK(rc == -1, "rc %d", rc);
    CHECK(!strcmp(err.msg, "no progress for 0.2 s"), "%s", err.msg);
    CHECK(errno == ETIMEDOUT, "errno %d", errno);
    CHECK(dt >= 0.19 && dt < 2, "gave up after %.3f s, expected 0.2 s", dt);
}

static void send_gives_up_after_the_timeout_when_the_peer_does_not_read(void) {
    int sv[2];
    rl_err err = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    size_t n = (size_t)64 << 20;                 // far more than the socket buffers hold
    uint8_t *p = xmalloc(n);
    memset(p, 7, n);
    double t0 = now_s();
    int rc = net_send_all(sv[0], p, n, -1, 0.2, &err);
    double dt = now_s() - t0;
    free(p);
    close(sv[0]), close(sv[1]);
    CHECK(rc == -1 && !strcmp(err.msg, "no progress for 0.2 s"), "%s", err.msg);
    CHECK(dt >= 0.19 && dt < 2, "gave up after %.3f s", dt);
}

static void stop_fd_stops_a_waiting_transfer(void) {
    int sv[2], stop[2];
    rl_err err = {{0}};
    char buf[4];
    CHECK(pair(sv) == 0 && pipe(stop) == 0, "%s", strerror(errno));
    job poke = {.fd = stop[1], .delay = 0.1};
    pthread_t th;
    pthread_create(&th, NULL, poke_job, &poke);
    double t0 = now_s();
    int rc = net_recv_all(sv[1], buf, 4, stop[0], 0, &err);   // no timeout: only the stop ends it
    double dt = now_s() - t0;
    pthread_join(th, NULL);
    CHECK(rc == -1 && !strcmp(err.msg, "stopped"), "rc %d: %s", rc, err.msg);
    CHECK(errno == ECANCELED, "errno %d", errno);
    CHECK(dt >= 0.09 && dt < 5, "stopped after %.3f s", dt);
    // Already stopped: a send that could go on at once does not.
    CHECK(net_send_all(sv[0], "abcd", 4, stop[0], 5, &err) == -1 && !strcmp(err.msg, "stopped"), "%s", err.msg);
    // A stop descriptor whose writer is gone stops too.
    close(stop[0]), close(stop[1]);
    CHECK(pipe(stop) == 0, "pipe");
    close(stop[1]);
    CHECK(net_recv_all(sv[1], buf, 4, stop[0], 5, &err) == -1 && !strcmp(err.msg, "stopped"), "%s", err.msg);
    close(stop[0]), close(sv[0]), close(sv[1]);
}

// ---- Messages -----------------------------------------------------------------

static void messages_round_trip(void) {
    int sv[2];
    rl_err err = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    rec_t *m = rec_new(), *got = rec_new();
    rec_set_bool(m, "ok", 1);
    rec_set_cstr(m, "receiver", "rl-sample 0.1.0");
    rec_set_uint(m, "version", 41);
    CHECK(push_send_msg(sv[0], m, -1, 5, &err) == 0, "%s", err.msg);
    rec_set_uint(m, "version", 42);
    CHECK(push_send_msg(sv[0], m, -1, 5, &err) == 0, "%s", err.msg);
    uint64_t v = 0;
    const char *s;
    size_t len;
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(rec_get_uint(got, "version", &v) == REC_OK && v == 41, "version %llu", (unsigned long long)v);
    CHECK(rec_get_str(got, "receiver", &s, &len) == REC_OK && len == 15 && !memcmp(s, "rl-sample 0.1.0", 15),
          "receiver");
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(rec_get_uint(got, "version", &v) == REC_OK && v == 42, "version %llu", (unsigned long long)v);
    close(sv[0]);
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == 1, "a clean end between messages: %s", err.msg);
    close(sv[1]);
    // An error message, as the peer reads it.
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    push_send_error(sv[0], "version 3 is not newer than 5");
    int64_t ok = 1;
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(rec_get_int(got, "ok", &ok) != REC_OK, "ok is a boolean, not an integer");
    CHECK(rec_get_str(got, "error", &s, &len) == REC_OK && len == 29 && !memcmp(s, "version 3 is not newer than 5", 29),
          "error");
    close(sv[1]);
    push_send_error(sv[0], "to nobody");         // best effort: a peer gone is no failure (nor SIGPIPE)
    close(sv[0]);
    rec_free(m), rec_free(got);
}

static void message_lengths_out_of_range_are_refused_before_reading(void) {
    int sv[2];
    rl_err err = {{0}};
    rec_t *got = rec_new();
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    // 16 MiB + 1 announced, nothing sent after: refused at once, not after waiting for the body.
    uint8_t len[4] = {0x01, 0x00, 0x00, 0x01};
    CHECK(write(sv[0], len, 4) == 4, "write");
    double t0 = now_s();
    CHECK(push_recv_msg(sv[1], got, -1, 10, &err) == -1, "an over-long message accepted");
    CHECK(now_s() - t0 < 1, "waited for the body");
    CHECK(has(err.msg, "16777217 bytes"), "%s", err.msg);
    uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    CHECK(write(sv[0], huge, 4) == 4, "write");
    CHECK(push_recv_msg(sv[1], got, -1, 10, &err) == -1 && has(err.msg, "4294967295 bytes"), "%s", err.msg);
    uint8_t zero[4] = {0};
    CHECK(write(sv[0], zero, 4) == 4, "write");
    CHECK(push_recv_msg(sv[1], got, -1, 10, &err) == -1 && has(err.msg, "0 bytes"), "%s", err.msg);
    close(sv[0]), close(sv[1]);
    rec_free(got);
}

static void broken_messages_are_refused(void) {
    int sv[2];
    rl_err err = {{0}};
    rec_t *got = rec_new();
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    uint8_t not_map[] = {3, 0, 0, 0, 0x92, 0x01, 0x02};   // [1, 2]
    CHECK(write(sv[0], not_map, sizeof not_map) == (ssize_t)sizeof not_map, "write");
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == -1 && has(err.msg, "malformed message") && has(err.msg, "array"),
          "%s", err.msg);
    uint8_t cut[] = {4, 0, 0, 0, 0x81, 0xa1, 'k'};        // a map cut short
    CHECK(write(sv[0], cut, sizeof cut) == (ssize_t)sizeof cut, "write");
    close(sv[0]);
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == -1, "a message cut short accepted");
    CHECK(!strcmp(err.msg, "connection closed by the peer after 3 of 4 bytes"), "%s", err.msg);
    close(sv[1]);
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    uint8_t only_len[] = {4, 0, 0, 0};
    CHECK(write(sv[0], only_len, 4) == 4, "write");
    close(sv[0]);
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == -1 && has(err.msg, "after 0 of 4 bytes"), "%s", err.msg);
    close(sv[1]);
    rec_free(got);
}

// ---- Greeting and authentication ----------------------------------------------

// Runs push_greet (receiver, token rt) on a thread against push_answer (sender, token st).
static void greet_answer(const sbuf *rt, const sbuf *st, job *g, int *answer_rc, rl_err *answer_err, int sv[2]) {
    *g = (job){.fd = sv[0], .stop_fd = -1, .timeout = 5, .token = rt};
    pthread_t th;
    pthread_create(&th, NULL, greet_job, g);
    *answer_rc = push_answer(sv[1], PUSH_WEIGHTS, st, 5, answer_err);
    if (*answer_rc) close(sv[1]);                // a sender that gives up hangs up
    pthread_join(th, NULL);
}

static void greet_and_answer_agree_on_the_right_token(void) {
    sbuf t = token_of(TOKEN_A), same = token_of(TOKEN_A);
    int sv[2], arc;
    job g;
    rl_err aerr = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    greet_answer(&t, &same, &g, &arc, &aerr, sv);
    CHECK(arc == 0, "answer: %s", aerr.msg);
    CHECK(g.rc == 0, "greet: %s", g.err.msg);
    // Nothing else was sent: the stream is at the hello, which the receiver writes next.
    rec_t *m = rec_new();
    rec_set_bool(m, "ok", 1);
    rl_err err = {{0}};
    CHECK(push_send_msg(sv[0], m, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(push_recv_msg(sv[1], m, -1, 5, &err) == 0 && rec_nfields(m) == 1, "%s", err.msg);
    rec_free(m);
    close(sv[0]), close(sv[1]);
    sbuf_free(&t), sbuf_free(&same);
}

static void wrong_token_fails_on_both_sides(void) {
    sbuf a = token_of(TOKEN_A), b = token_of(TOKEN_B);
    int sv[2], arc;
    job g;
    rl_err aerr = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    greet_answer(&a, &b, &g, &arc, &aerr, sv);
    CHECK(g.rc == -1 && !strcmp(g.err.msg, "authentication failed (wrong token)"), "greet %d: %s", g.rc, g.err.msg);
    CHECK(arc == 0, "answer: %s", aerr.msg);     // the sender learns it from the message that follows
    rec_t *m = rec_new();
    rl_err err = {{0}};
    const char *s;
    size_t len;
    CHECK(push_recv_msg(sv[1], m, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(rec_has(m, "ok") && rec_get_str(m, "error", &s, &len) == REC_OK, "no error in the reply");
    CHECK(len == 34 && !memcmp(s, "authentication failed: wrong token", 34), "error %.*s", (int)len, s);
    rec_free(m);
    close(sv[0]), close(sv[1]);
    sbuf_free(&a), sbuf_free(&b);
}

static void receiver_requiring_a_token_refuses_a_sender_without_one(void) {
    sbuf a = token_of(TOKEN_A);
    int sv[2], arc;
    job g;
    rl_err aerr = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    greet_answer(&a, NULL, &g, &arc, &aerr, sv);
    CHECK(arc == -1 && has(aerr.msg, "requires authentication") && has(aerr.msg, "--token-file"), "%s", aerr.msg);
    CHECK(g.rc == 1, "greet %d: %s (the sender hung up without answering)", g.rc, g.err.msg);
    close(sv[0]);
    sbuf_free(&a);
}

static void greeting_without_authentication(void) {
    sbuf a = token_of(TOKEN_A);
    int sv[2], arc;
    job g;
    rl_err aerr = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    greet_answer(NULL, NULL, &g, &arc, &aerr, sv);
    CHECK(arc == 0 && g.rc == 0, "answer: %s; greet: %s", aerr.msg, g.err.msg);
    close(sv[0]), close(sv[1]);
    // A sender with a token talks to a receiver without one: nothing to prove.
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    greet_answer(NULL, &a, &g, &arc, &aerr, sv);
    CHECK(arc == 0 && g.rc == 0, "answer: %s; greet: %s", aerr.msg, g.err.msg);
    char c;
    rl_err err = {{0}};
    close(sv[0]);
    CHECK(net_recv_all(sv[1], &c, 1, -1, 5, &err) == 1, "the sender sent a MAC nobody asked for");
    close(sv[1]);
    sbuf_free(&a);
}

static void a_probe_connection_is_a_silent_clean_end(void) {
    sbuf a = token_of(TOKEN_A);
    rl_err err = {{0}};
    int sv[2];
    // Connected and closed at once (net_listen's test for a live socket).
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    close(sv[1]);
    int rc = push_greet(sv[0], PUSH_WEIGHTS, &a, -1, 5, &err);
    CHECK(rc == 1, "greet %d: %s", rc, err.msg);
    close(sv[0]);
    // Closed after the greeting arrived, unread.
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    int probe = sv[1];
    job g = {.fd = sv[0], .stop_fd = -1, .timeout = 5, .token = &a};
    pthread_t th;
    pthread_create(&th, NULL, greet_job, &g);
    struct timespec ts = {.tv_nsec = 50 * 1000000};
    nanosleep(&ts, NULL);
    close(probe);
    pthread_join(th, NULL);
    CHECK(g.rc == 1, "greet %d: %s", g.rc, g.err.msg);
    close(sv[0]);
    // Over a real unix socket, probed by a second net_listen.
    char dir[256], addr[512];
    net_addr na;
    CHECK(unix_addr_in_tmp(dir, sizeof dir, addr, sizeof addr, &na, &err) == 0, "%s", err.msg);
    int lfd = net_listen(&na, &err);
    CHECK(lfd >= 0, "%s", err.msg);
    CHECK(net_listen(&na, &err) == -1, "second listener");
    int sfd = accept(lfd, NULL, NULL);
    CHECK(sfd >= 0, "accept: %s", strerror(errno));
    rc = push_greet(sfd, PUSH_WEIGHTS, &a, -1, 5, &err);
    CHECK(rc == 1, "greet %d: %s", rc, err.msg);
    close(sfd), close(lfd);
    net_unlink(&na);
    rm_rf(dir);
    sbuf_free(&a);
}

static void answer_refuses_a_non_receiver_and_another_protocol(void) {
    int sv[2];
    rl_err err = {{0}};
    uint8_t g[PUSH_GREETING] = "HTTP/1.1 200 OK\r\n";
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    CHECK(write(sv[0], g, sizeof g) == (ssize_t)sizeof g, "write");
    CHECK(push_answer(sv[1], PUSH_WEIGHTS, NULL, 5, &err) == -1 && has(err.msg, "not an rlpipe receiver"), "%s",
          err.msg);
    memset(g, 0, sizeof g);
    memcpy(g, "RLPW", 4);
    g[4] = 2;                                    // protocol 2
    CHECK(write(sv[0], g, sizeof g) == (ssize_t)sizeof g, "write");
    CHECK(push_answer(sv[1], PUSH_WEIGHTS, NULL, 5, &err) == -1 && has(err.msg, "protocol 2"), "%s", err.msg);
    CHECK(write(sv[0], g, 10) == 10, "write");
    close(sv[0]);
    CHECK(push_answer(sv[1], PUSH_WEIGHTS, NULL, 5, &err) == -1 && has(err.msg, "after 10 of 48 bytes"), "%s", err.msg);
    close(sv[1]);
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    close(sv[0]);
    CHECK(push_answer(sv[1], PUSH_WEIGHTS, NULL, 5, &err) == -1 && has(err.msg, "before its greeting"), "%s", err.msg);
    close(sv[1]);
}

// ---- Record streams over sockets (recnet.h) ------------------------------------

static void the_weights_and_records_channels_refuse_each_others_greeting(void) {
    push_channel chs[2] = {PUSH_WEIGHTS, PUSH_RECORDS};
    const char *want[2] = {"an rlpipe weight receiver answered, not an rlpipe record merge",
                           "an rlpipe record merge (rl-cat --merge) answered, not an rlpipe weight receiver"};
    for (int i = 0; i < 2; i++) {
        int sv[2];
        rl_err err = {{0}};
        CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
        job g = {.fd = sv[0], .stop_fd = -1, .timeout = 5, .ch = chs[i]};
        pthread_t th;
        pthread_create(&th, NULL, greet_job, &g);
        int rc = push_answer(sv[1], chs[1 - i], NULL, 5, &err);
        pthread_join(th, NULL);
        CHECK(rc == -1 && has(err.msg, want[i]), "answer %d: %s", rc, err.msg);
        close(sv[0]), close(sv[1]);
    }
}

static void a_weights_answer_does_not_authenticate_a_record_stream(void) {
    // The records greeting, shown to a weights sender as its own: its HMAC
    // (label "rlpipe push 1") must not pass for the records one.
    sbuf a = token_of(TOKEN_A);
    int sv[2], tv[2];
    rl_err err = {{0}};
    CHECK(pair(sv) == 0 && pair(tv) == 0, "socketpair: %s", strerror(errno));
    job g = {.fd = sv[0], .stop_fd = -1, .timeout = 5, .token = &a, .ch = PUSH_RECORDS};
    pthread_t th;
    pthread_create(&th, NULL, greet_job, &g);
    uint8_t greeting[PUSH_GREETING], mac[PUSH_MAC];
    CHECK(net_recv_all(sv[1], greeting, sizeof greeting, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(greeting, "RLPR", 4), "the records greeting starts %.4s", (const char *)greeting);
    memcpy(greeting, "RLPW", 4);
    CHECK(net_send_all(tv[0], greeting, sizeof greeting, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(push_answer(tv[1], PUSH_WEIGHTS, &a, 5, &err) == 0, "%s", err.msg);
    CHECK(net_recv_all(tv[0], mac, sizeof mac, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(net_send_all(sv[1], mac, sizeof mac, -1, 5, &err) == 0, "%s", err.msg);
    pthread_join(th, NULL);
    CHECK(g.rc == -1 && has(g.err.msg, "authentication failed (wrong token)"), "greet %d: %s", g.rc, g.err.msg);
    close(sv[0]), close(sv[1]), close(tv[0]), close(tv[1]);
    sbuf_free(&a);
}

// What a listener's callbacks saw (set on its thread).
typedef struct {
    pthread_mutex_t mu;
    int fd, refused;
    char name[600], why[2100];
} seen_t;

static void seen_source(void *ctx, int fd, const char *name) {
    seen_t *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->fd = fd;
    snprintf(s->name, sizeof s->name, "%s", name);
    pthread_mutex_unlock(&s->mu);
}

static void seen_refused(void *ctx, const char *msg) {
    seen_t *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->refused++;
    snprintf(s->why, sizeof s->why, "%s", msg);
    pthread_mutex_unlock(&s->mu);
}

static void seen_failed(void *ctx, int missing, const char *msg) { seen_refused(ctx, msg), (void)missing; }

// Waits (5 s at most) until *p, read under s->mu, is not `not`; its value.
static int seen_wait(seen_t *s, const int *p, int not) {
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&s->mu);
        int v = *p;
        pthread_mutex_unlock(&s->mu);
        if (v != not) return v;
        struct timespec ts = {.tv_nsec = 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    return not;
}

static void a_record_stream_is_authenticated_handed_over_and_answered(void) {
    char dir[256], addr[512];
    net_addr na;
    rl_err err = {{0}};
    CHECK(unix_addr_in_tmp(dir, sizeof dir, addr, sizeof addr, &na, &err) == 0, "%s", err.msg);
    sbuf a = token_of(TOKEN_A), b = token_of(TOKEN_B);
    seen_t seen = {.fd = -1};
    pthread_mutex_init(&seen.mu, NULL);
    rnet_opts o = {.token = &a, .expect = 1, .tool = "test", .source = seen_source, .refused = seen_refused,
                   .failed = seen_failed, .ctx = &seen};
    rnet_t *l = rnet_listen(&na, &o, &err);
    CHECK(l, "%s", err.msg);
    // The wrong token: the sender is told, the listener names the peer, and goes on.
    CHECK(rnet_connect(&na, &b, 0, &err) == -1 && has(err.msg, "refused the connection: authentication failed: wrong token"),
          "%s", err.msg);
    CHECK(seen_wait(&seen, &seen.refused, 0) == 1 && has(seen.why, ": refused pid ") &&
          has(seen.why, "authentication failed (wrong token)"), "refusals %d: %s", seen.refused, seen.why);
    int fd = rnet_connect(&na, &a, 0, &err);
    CHECK(fd >= 0, "%s", err.msg);
    int lfd = seen_wait(&seen, &seen.fd, -1);
    CHECK(lfd >= 0 && has(seen.name, " from pid "), "no connection handed over: %s", seen.name);
    CHECK(net_send_all(fd, "records", 7, -1, 5, &err) == 0, "%s", err.msg);
    char got[8] = "";
    CHECK(net_recv_all(lfd, got, 7, -1, 5, &err) == 0 && !memcmp(got, "records", 7), "%s", err.msg);
    rnet_source_end(NULL, lfd, NULL, 12);   // the merge read it to its end: 12 records
    uint64_t n = 0;
    CHECK(rnet_finish(fd, &n, &err) == 0 && n == 12, "finish: %s (%llu records)", err.msg, (unsigned long long)n);
    close(fd);
    rnet_join(l);   // it took the one connection expected: the socket file is gone
    struct stat st;
    CHECK(stat(na.path, &st) == -1 && errno == ENOENT, "the socket file is still there");
    rm_rf(dir);
    pthread_mutex_destroy(&seen.mu);
    sbuf_free(&a), sbuf_free(&b);
}

static void the_merges_error_reaches_the_sender(void) {
    int sv[2];
    rl_err err = {{0}};
    uint64_t n = 0;
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    rnet_source_end(NULL, sv[0], "truncated stream: member 1 has no trailer: s2 record 3", 3);   // closes sv[0]
    CHECK(rnet_finish(sv[1], &n, &err) == -1 &&
          has(err.msg, "the merge refused the stream: truncated stream: member 1 has no trailer: s2 record 3"), "%s",
          err.msg);
    close(sv[1]);
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    push_send_error(sv[0], "a member of kind \"examples\" cannot join the merge");
    char why[200] = "";
    CHECK(rnet_refusal(sv[1], 1, why, sizeof why) == 1 && has(why, "cannot join the merge"), "%s", why);
    close(sv[0]);
    CHECK(rnet_refusal(sv[1], 1, why, sizeof why) == 0, "a refusal read from a closed connection");
    close(sv[1]);
}

// ---- Token files --------------------------------------------------------------

static void token_file_drops_one_trailing_newline(void) {
    char dir[256], path[512];
    CHECK(tmpdir(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/token", dir);
    sbuf t = {0};
    rl_err err = {{0}};
    static const struct { const char *text, *token; } cases[] = {
        {"0123456789abcdef\n", "0123456789abcdef"},
        {"0123456789abcdef\r\n", "0123456789abcdef"},
        {"0123456789abcdef", "0123456789abcdef"},
        {"0123456789abcdef\n\n", "0123456789abcdef\n"},
        {" spaces are part of it \r", " spaces are part of it \r"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        put_file(path, cases[i].text, strlen(cases[i].text), 0600);
        CHECK(push_read_token(path, &t, &err) == 0, "case %zu: %s", i, err.msg);
        CHECK(t.len == strlen(cases[i].token) && !memcmp(t.data, cases[i].token, t.len), "case %zu: %zu bytes", i,
              t.len);
    }
    char big[PUSH_TOKEN_MAX + 1];
    memset(big, 'k', PUSH_TOKEN_MAX);
    big[PUSH_TOKEN_MAX] = '\n';
    put_file(path, big, sizeof big, 0400);
    CHECK(push_read_token(path, &t, &err) == 0 && t.len == PUSH_TOKEN_MAX, "%s", err.msg);
    sbuf_free(&t);
    rm_rf(dir);
}

static void token_file_others_may_read_is_refused(void) {
    char dir[256], path[512];
    CHECK(tmpdir(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/token", dir);
    sbuf t = {0};
    rl_err err = {{0}};
    put_file(path, "0123456789abcdef\n", 17, 0644);
    CHECK(push_read_token(path, &t, &err) == -1, "a world-readable token accepted");
    CHECK(has(err.msg, path) && has(err.msg, "chmod 600") && has(err.msg, "0644"), "%s", err.msg);
    CHECK(t.len == 0, "the token was kept");
    put_file(path, "0123456789abcdef\n", 17, 0620);
    CHECK(push_read_token(path, &t, &err) == -1 && has(err.msg, "chmod 600"), "group-writable: %s", err.msg);
    snprintf(path, sizeof path, "%s/absent", dir);
    CHECK(push_read_token(path, &t, &err) == -1 && has(err.msg, "cannot open") && has(err.msg, path), "%s", err.msg);
    sbuf_free(&t);
    rm_rf(dir);
}

static void token_of_the_wrong_length_is_refused(void) {
    char dir[256], path[512];
    CHECK(tmpdir(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/token", dir);
    sbuf t = {0};
    rl_err err = {{0}};
    put_file(path, "0123456789abcde\n", 16, 0600);          // 15 bytes once the newline goes
    CHECK(push_read_token(path, &t, &err) == -1 && has(err.msg, "15 bytes") && has(err.msg, path), "%s", err.msg);
    put_file(path, "", 0, 0600);
    CHECK(push_read_token(path, &t, &err) == -1 && has(err.msg, "0 bytes"), "%s", err.msg);
    char big[PUSH_TOKEN_MAX + 1];
    memset(big, 'k', sizeof big);
    put_file(path, big, sizeof big, 0600);
    CHECK(push_read_token(path, &t, &err) == -1 && has(err.msg, "4097 bytes"), "%s", err.msg);
    sbuf_free(&t);
    rm_rf(dir);
}

// ---- Tensor lists -------------------------------------------------------------

static void tensor_lists_round_trip(void) {
    push_tensor in[3] = {
        {.name = "model.embed_tokens.weight", .dtype = DT_BF16, .ndim = 2, .shape = {32000, 4096}},
        {.name = "model.norm.weight", .dtype = DT_F32, .ndim = 1, .shape = {4096}},
        {.name = "scalar", .dtype = DT_F16, .ndim = 0},
    };
    memset(in[0].name + strlen(in[0].name), 0, sizeof in[0].name - strlen(in[0].name));
    rec_t *m = rec_new();
    rec_set_uint(m, "version", 7);
    push_set_tensors(m, "tensors", in, 3);
    push_set_tensors(m, "none", in, 0);
    // Through the wire and back.
    int sv[2];
    rl_err err = {{0}};
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    CHECK(push_send_msg(sv[0], m, -1, 5, &err) == 0, "%s", err.msg);
    rec_t *got = rec_new();
    CHECK(push_recv_msg(sv[1], got, -1, 5, &err) == 0, "%s", err.msg);
    close(sv[0]), close(sv[1]);
    push_tensor *t = NULL;
    size_t n = 0;
    CHECK(push_get_tensors(got, "tensors", &t, &n, &err) == 0, "%s", err.msg);
    CHECK(n == 3, "%zu tensors", n);
    size_t want_n[3] = {(size_t)32000 * 4096, 4096, 1};
    for (size_t i = 0; i < 3; i++) {
        CHECK(!strcmp(t[i].name, in[i].name) && t[i].dtype == in[i].dtype && t[i].ndim == in[i].ndim, "entry %zu", i);
        for (int d = 0; d < t[i].ndim; d++) CHECK(t[i].shape[d] == in[i].shape[d], "entry %zu dim %d", i, d);
        CHECK(t[i].n == want_n[i], "entry %zu: %zu elements", i, t[i].n);
    }
    free(t);
    CHECK(push_get_tensors(got, "none", &t, &n, &err) == 0 && n == 0, "%s", err.msg);
    free(t);
    CHECK(push_get_tensors(got, "absent", &t, &n, &err) == -1 && has(err.msg, "absent"), "%s", err.msg);
    CHECK(push_get_tensors(got, "version", &t, &n, &err) == -1 && has(err.msg, "not an array"), "%s", err.msg);
    rec_free(m), rec_free(got);
}

// Builds the value of "tensors" with msgpack-c: entry 0 is good, entry 1 what `bad` packs.
typedef void (*packer_fn)(msgpack_packer *pk);

static void pack_str(msgpack_packer *pk, const char *s) {
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void pack_entry(msgpack_packer *pk, const char *name, const char *dtype, int ndim, const int64_t *dims) {
    msgpack_pack_array(pk, 3);
    pack_str(pk, name);
    pack_str(pk, dtype);
    msgpack_pack_array(pk, (size_t)ndim);
    for (int d = 0; d < ndim; d++) msgpack_pack_int64(pk, dims[d]);
}

static void bad_not_array(msgpack_packer *pk) { pack_str(pk, "w"); }
static void bad_pair(msgpack_packer *pk) {
    msgpack_pack_array(pk, 2);
    pack_str(pk, "w");
    pack_str(pk, "f32");
}
static void bad_int8(msgpack_packer *pk) { pack_entry(pk, "w", "int8", 1, (int64_t[]){4}); }
static void bad_f64(msgpack_packer *pk) { pack_entry(pk, "w", "f64", 1, (int64_t[]){4}); }
static void bad_dims(msgpack_packer *pk) { pack_entry(pk, "w", "f32", 5, (int64_t[]){1, 2, 3, 4, 5}); }
static void bad_negative(msgpack_packer *pk) { pack_entry(pk, "w", "f32", 2, (int64_t[]){4, -1}); }
static void bad_overflow(msgpack_packer *pk) { pack_entry(pk, "w", "f32", 2, (int64_t[]){1ll << 32, 1ll << 31}); }
static void bad_float_dim(msgpack_packer *pk) {
    msgpack_pack_array(pk, 3);
    pack_str(pk, "w");
    pack_str(pk, "f32");
    msgpack_pack_array(pk, 1);
    msgpack_pack_double(pk, 4.0);
}
static void bad_long_name(msgpack_packer *pk) {
    char name[129];
    memset(name, 'n', 128);
    name[128] = 0;
    pack_entry(pk, name, "f32", 1, (int64_t[]){4});
}
static void bad_empty_name(msgpack_packer *pk) { pack_entry(pk, "", "f32", 1, (int64_t[]){4}); }
static void bad_nul_name(msgpack_packer *pk) {
    msgpack_pack_array(pk, 3);
    msgpack_pack_str(pk, 3);
    msgpack_pack_str_body(pk, "a\0b", 3);
    pack_str(pk, "f32");
    msgpack_pack_array(pk, 0);
}
static void bad_huge_shape(msgpack_packer *pk) {   // 100000 dimensions: refused by the scan before msgpack-c allocates them
    msgpack_pack_array(pk, 3);
    pack_str(pk, "w");
    pack_str(pk, "f32");
    msgpack_pack_array(pk, 100000);
    for (int i = 0; i < 100000; i++) msgpack_pack_int(pk, 1);
}

static void malformed_tensor_lists_are_refused_naming_the_entry(void) {
    static const struct { packer_fn bad; const char *why; } cases[] = {
        {bad_not_array, "tensors[1]: not a [name, dtype, [dimensions...]] triple"},
        {bad_pair, "tensors[1]: not a [name, dtype, [dimensions...]] triple"},
        {bad_int8, "tensors[1]: a dtype other than f32, bf16 or f16"},
        {bad_f64, "tensors[1]: a dtype other than f32, bf16 or f16"},
        {bad_dims, "tensors[1]: more than 4 dimensions"},
        {bad_negative, "tensors[1]: a negative dimension"},
        {bad_overflow, "tensors[1]: an element count that overflows"},
        {bad_float_dim, "tensors[1]: a dimension that is not an integer"},
        {bad_long_name, "tensors[1]: a name longer than 127 bytes"},
        {bad_empty_name, "tensors[1]: an empty name"},
        {bad_nul_name, "tensors[1]: a name with a NUL byte"},
        {bad_huge_shape, "tensors[1]: array of 100000 elements"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 3);
        pack_entry(&pk, "good", "bf16", 2, (int64_t[]){2, 3});
        cases[i].bad(&pk);
        pack_entry(&pk, "also good", "f32", 0, NULL);
        rec_t *m = rec_new();
        rec_set_raw(m, "tensors", 7, (const uint8_t *)sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        push_tensor *t = (push_tensor *)1;
        size_t n = 99;
        rl_err err = {{0}};
        int rc = push_get_tensors(m, "tensors", &t, &n, &err);
        rec_free(m);
        CHECK(rc == -1, "case %zu accepted", i);
        CHECK(t == NULL && n == 0, "case %zu: output left set", i);
        CHECK(has(err.msg, cases[i].why), "case %zu: %s", i, err.msg);
    }
    // More entries than PUSH_MAX_TENSORS: refused from the array header alone.
    uint8_t many[] = {0xdd, 0x00, 0x01, 0x00, 0x01};   // 65537 entries declared, none present
    rec_t *m = rec_new();
    rec_set_raw(m, "tensors", 7, many, sizeof many);
    push_tensor *t;
    size_t n;
    rl_err err = {{0}};
    CHECK(push_get_tensors(m, "tensors", &t, &n, &err) == -1 && has(err.msg, "65537 tensors"), "%s", err.msg);
    // A list that says more entries than it holds.
    uint8_t short_list[] = {0x92, 0x93, 0xa1, 'w', 0xa3, 'f', '3', '2', 0x90};
    rec_set_raw(m, "tensors", 7, short_list, sizeof short_list);
    CHECK(push_get_tensors(m, "tensors", &t, &n, &err) == -1 && has(err.msg, "tensors[1]: cut short"), "%s", err.msg);
    rec_free(m);
}

static void adapter_maps_round_trip_and_malformed_ones_are_refused(void) {
    lora_config c = {.rank = 16, .alpha = 32.5, .rslora = 1, .targets = 1u << LORA_V | 1u << LORA_Q | 1u << LORA_DOWN},
                got;
    rec_t *m = rec_new(), *back = rec_new();
    rl_err err = {{0}};
    push_lora_set(m, &c);
    int sv[2];
    CHECK(pair(sv) == 0, "socketpair: %s", strerror(errno));
    CHECK(push_send_msg(sv[0], m, -1, 5, &err) == 0, "%s", err.msg);
    CHECK(push_recv_msg(sv[1], back, -1, 5, &err) == 0, "%s", err.msg);
    close(sv[0]), close(sv[1]);
    CHECK(push_lora_get(back, &got, &err) == 0, "%s", err.msg);
    CHECK(got.rank == 16 && got.alpha == 32.5 && got.rslora == 1 && got.targets == c.targets && !got.base[0],
          "r %d alpha %g rslora %d targets %#x", got.rank, got.alpha, got.rslora, got.targets);
    const char *targets;
    size_t len;
    rec_t *inner = rec_new();
    long i = rec_find(back, "lora");
    size_t n;
    const uint8_t *v = rec_value(back, (size_t)i, &n);
    CHECK(rec_parse(inner, v, n, &rec_default_limits, &err) == 0, "%s", err.msg);
    CHECK(rec_get_str(inner, "targets", &targets, &len) == 0 && len == 23 && !memcmp(targets, "q_proj,v_proj,down_proj", 23),
          "targets '%.*s': LORA_* order", (int)len, targets);
    rec_free(inner);
    rec_t *none = rec_new();
    CHECK(push_lora_get(none, &got, &err) == 1, "a message without lora");
    rec_free(none);
    const char *bad[] = {   // the map with, in turn: r 0, r 65537, alpha 0, no alpha, rslora 1,
                            // targets naming lm_head, targets 7
        "no rank r in 1..65536", "no rank r in 1..65536", "no positive alpha", "no positive alpha",
        "no boolean rslora", "'lora' targets: ", "no targets string"};
    for (int k = 0; k < 7; k++) {
        rec_t *t = rec_new(), *msg = rec_new();
        rec_set_uint(t, "r", k == 0 ? 0 : k == 1 ? 65537 : 4);
        if (k != 3) rec_set_f64(t, "alpha", k == 2 ? 0 : 8);
        if (k == 4) rec_set_uint(t, "rslora", 1);
        else rec_set_bool(t, "rslora", 0);
        if (k == 6) rec_set_uint(t, "targets", 7);
        else rec_set_cstr(t, "targets", k == 5 ? "q_proj,lm_head" : "q_proj");
        sbuf enc = {0};
        rec_encode(t, &enc);
        rec_set_raw(msg, "lora", 4, enc.data, enc.len);
        CHECK(push_lora_get(msg, &got, &err) == -1 && has(err.msg, bad[k]), "case %d: '%s'", k, err.msg);
        sbuf_free(&enc);
        rec_free(t), rec_free(msg);
    }
    rec_set_cstr(m, "lora", "r=4");
    CHECK(push_lora_get(m, &got, &err) == -1 && has(err.msg, "'lora' is not a map"), "%s", err.msg);
    rec_free(m), rec_free(back);
}

// The tensor of `layer` and module `target` (lora_A when ab 0), with the
// shape Hugging Face's Llama gives it in a base of hidden 64, intermediate
// 96, 4 heads of 16 and 2 kv heads: q (64, 64), k and v (32, 64), o (64,
// 64), gate and up (96, 64), down (64, 96), as (out, in).
static push_tensor adapter_tensor(int layer, int target, int ab, int r) {
    static const int out[LORA_NT] = {64, 32, 32, 64, 96, 96, 64}, in[LORA_NT] = {64, 64, 64, 64, 64, 64, 96};
    static const char *const where[LORA_NT] = {"self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp"};
    push_tensor t = {.dtype = DT_BF16, .ndim = 2};
    snprintf(t.name, sizeof t.name, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer, where[target],
             lora_target_names[target], ab ? 'B' : 'A');
    t.shape[0] = ab ? out[target] : r;
    t.shape[1] = ab ? r : in[target];
    t.n = (size_t)(t.shape[0] * t.shape[1]);
    return t;
}

static void adapter_tensors_are_matched_to_the_base_each_once_with_its_shape(void) {
    model_config mc = {.hidden = 64, .inter = 96, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16, .vocab = 448};
    lora_config c = {.rank = 8, .alpha = 16, .targets = 1u << LORA_K | 1u << LORA_O | 1u << LORA_UP | 1u << LORA_DOWN};
    const int targets[4] = {LORA_K, LORA_O, LORA_UP, LORA_DOWN};
    push_tensor t[16], u[16];
    size_t n = 0;
    uint64_t want = 0, bytes = 0;
    for (int layer = 1; layer >= 0; layer--)   // any order
        for (int k = 0; k < 4; k++)
            for (int ab = 0; ab < 2; ab++) {
                t[n] = adapter_tensor(layer, targets[k], ab, 8);
                want += t[n++].n * 2;
            }
    push_lora_slot slot[16];
    rl_err err = {{0}};
    CHECK(push_lora_match(&mc, &c, t, n, slot, &bytes, &err) == 0, "%s", err.msg);
    CHECK(bytes == want, "%llu bytes, want %llu", (unsigned long long)bytes, (unsigned long long)want);
    lora_adapter *a = lora_new(&c, &mc);
    for (size_t k = 0; k < n; k++) {
        push_lora_slot w = {.layer = 1 - (int)k / 8, .target = targets[k / 2 % 4], .ab = (int)k % 2};
        CHECK(slot[k].layer == w.layer && slot[k].target == w.target && slot[k].ab == w.ab, "tensor %zu: %s", k, t[k].name);
        size_t li = (size_t)w.layer * LORA_NT + (size_t)w.target;
        CHECK(push_lora_dest(a, slot[k]) == (w.ab ? a->b[li] : a->a[li]), "tensor %zu's destination", k);
    }
    lora_free(a);
    struct {
        const char *what, *error;
        size_t n;
    } bad[] = {
        {"one missing", "the adapter has 15 tensors; r 8 on 4 modules of 2 layers needs 16", 15},
        {"lora_B of another shape", "tensor 'base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight' is [33, 8]; "
                                    "the receiver's base needs [32, 8]", 16},
        {"one twice", "tensor 'base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight' is sent twice", 16},
        {"a layer the base lacks", "tensor 'base_model.model.model.layers.2.self_attn.k_proj.lora_A.weight' is not part "
                                   "of the adapter", 16},
        {"a module not targeted", "tensor 'base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight' is not part",
         16},
        {"not a LoRA name", "tensor 'model.layers.1.self_attn.k_proj.weight' is not a LoRA matrix", 16},
    };
    lora_config wide = c;
    wide.rank = 33;   // above k_proj's 32 outputs
    CHECK(push_lora_match(&mc, &wide, t, n, slot, &bytes, &err) == -1 &&
          has(err.msg, "r 33 is larger than k_proj's smaller dimension (32) in the receiver's base"), "%s", err.msg);
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        memcpy(u, t, sizeof t);
        if (k == 1) u[1].shape[0] = 33, u[1].n = 33 * 8;
        if (k == 2) u[1] = u[0];
        if (k == 3) u[0] = adapter_tensor(2, LORA_K, 0, 8);
        if (k == 4) u[0] = adapter_tensor(1, LORA_Q, 0, 8);
        if (k == 5) snprintf(u[0].name, sizeof u[0].name, "model.layers.1.self_attn.k_proj.weight");
        CHECK(push_lora_match(&mc, &c, u, bad[k].n, slot, &bytes, &err) == -1 && has(err.msg, bad[k].error), "%s: '%s'",
              bad[k].what, err.msg);
    }
}

int main(void) {
    RUN(parse_reads_unix_and_bare_paths);
    RUN(parse_reads_tcp_forms_and_formats_them_back);
    RUN(parse_refuses_malformed_addresses_saying_why);
    RUN(unix_listen_makes_a_socket_only_its_owner_may_use);
    RUN(unix_listen_replaces_a_stale_socket);
    RUN(unix_listen_refuses_a_live_socket);
    RUN(unix_listen_refuses_a_file_that_is_not_a_socket);
    RUN(connect_to_nobody_is_unreachable);
    RUN(tcp_listen_on_port_0_binds_a_free_port_and_accepts);
    if (have_ipv6_loopback()) RUN(tcp_listens_on_ipv6_loopback);
    else printf("SKIP tcp_listens_on_ipv6_loopback: no IPv6 loopback on this host\n");
    RUN(transfer_of_64_mib_arrives_intact);
    RUN(recv_returns_1_on_a_clean_end_and_fails_mid_buffer);
    RUN(send_to_a_closed_peer_fails_without_sigpipe);
    RUN(recv_gives_up_after_the_timeout_without_progress);
    RUN(send_gives_up_after_the_timeout_when_the_peer_does_not_read);
    RUN(stop_fd_stops_a_waiting_transfer);
    RUN(messages_round_trip);
    RUN(message_lengths_out_of_range_are_refused_before_reading);
    RUN(broken_messages_are_refused);
    RUN(greet_and_answer_agree_on_the_right_token);
    RUN(wrong_token_fails_on_both_sides);
    RUN(receiver_requiring_a_token_refuses_a_sender_without_one);
    RUN(greeting_without_authentication);
    RUN(a_probe_connection_is_a_silent_clean_end);
    RUN(answer_refuses_a_non_receiver_and_another_protocol);
    RUN(the_weights_and_records_channels_refuse_each_others_greeting);
    RUN(a_weights_answer_does_not_authenticate_a_record_stream);
    RUN(a_record_stream_is_authenticated_handed_over_and_answered);
    RUN(the_merges_error_reaches_the_sender);
    RUN(token_file_drops_one_trailing_newline);
    RUN(token_file_others_may_read_is_refused);
    RUN(token_of_the_wrong_length_is_refused);
    RUN(tensor_lists_round_trip);
    RUN(malformed_tensor_lists_are_refused_naming_the_entry);
    RUN(adapter_maps_round_trip_and_malformed_ones_are_refused);
    RUN(adapter_tensors_are_matched_to_the_base_each_once_with_its_shape);
    CHECK_DONE();
}
