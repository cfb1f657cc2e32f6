// coproc.c — a helper command on one end of a socketpair (coproc.h).
#include "sample/coproc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

extern char **environ;

#define QUOTE_MAX 80

struct coproc {
    const char *what;
    pid_t pid;
    int fd;                  // our end: non-blocking, close-on-exec
    int status, reaped;      // the wait status once reaped
    int eof;
    sbuf out;                // out.data[out_off..out.len) not yet written
    size_t out_off;
    sbuf in;                 // in.data[in_off..in.len) not yet a whole line
    size_t in_off;
};

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

coproc *cp_start(const char *cmd, const char *what, rl_err *err) {
    int sv[2];
    // SOCK_CLOEXEC: no other child inherits either end; dup2 onto 0 and 1
    // clears the flag on the command's copies.
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        err_set(err, "%s: socketpair: %s", what, strerror(errno));
        return NULL;
    }
    // Non-blocking on our end only: the command reads and writes its end as
    // ordinary blocking stdin and stdout.
    int fl = fcntl(sv[0], F_GETFL);
    if (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK)) {
        err_set(err, "%s: fcntl: %s", what, strerror(errno));
        close(sv[0]), close(sv[1]);
        return NULL;
    }
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        err_set(err, "%s: fork: %s", what, strerror(errno));
        close(sv[0]), close(sv[1]);
        return NULL;
    }
    if (pid == 0) {
        // Only async-signal-safe calls from here: the parent may have threads.
        int c = sv[1];
        if (c < 2) c = fcntl(c, F_DUPFD_CLOEXEC, 3);  // dup2(c, c) would keep close-on-exec
        // An ignored SIGPIPE and a signal mask would outlive the exec.
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &sa, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (c < 0 || dup2(c, 0) < 0 || dup2(c, 1) < 0) _exit(127);
        execve("/bin/sh", argv, environ);
        _exit(127);
    }
    close(sv[1]);
    coproc *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->what = what;
    c->pid = pid;
    c->fd = sv[0];
    return c;
}

void cp_queue(coproc *c, const void *data, size_t n) {
    if (c->out_off == c->out.len) c->out_off = c->out.len = 0;
    sbuf_put(&c->out, data, n);
}

int cp_pending(const coproc *c) { return c->out_off < c->out.len; }
int cp_eof(const coproc *c) { return c->eof; }

// Delivers every whole line in c->in; at end of output, the rest too when
// not empty.
static int take_lines(coproc *c, cp_line_fn *line, void *ctx, size_t line_max, rl_err *err) {
    for (;;) {
        const char *p = (const char *)c->in.data + c->in_off;
        size_t avail = c->in.len - c->in_off;
        const char *nl = avail ? memchr(p, '\n', avail) : NULL;
        if (!nl) {
            if (avail > line_max || (c->eof && avail)) {
                c->in_off = c->in.len;
                return line(ctx, p, avail, err);
            }
            break;
        }
        c->in_off += (size_t)(nl - p) + 1;
        if (line(ctx, p, (size_t)(nl - p), err)) return -1;
    }
    if (c->in_off == c->in.len) c->in_off = c->in.len = 0;
    else if (c->in_off > 65536 && c->in_off > c->in.len / 2) {
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    return 0;
}

int cp_exchange(coproc *c, cp_line_fn *line, void *ctx, size_t line_max, rl_err *err) {
    while (c->out_off < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c->out_off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            // The command is gone: what it wrote is still to be read, and the
            // end of its output tells the protocol above what went unanswered.
            c->out_off = c->out.len;
        } else {
            return err_set(err, "%s: writing: %s", c->what, strerror(errno));
        }
    }
    while (!c->eof) {
        sbuf_reserve(&c->in, 65536);
        ssize_t r = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
        if (r > 0) {
            c->in.len += (size_t)r;
            if (take_lines(c, line, ctx, line_max, err)) return -1;
        } else if (r == 0 || errno == ECONNRESET) {
            // ECONNRESET: it exited leaving input unread; what it wrote before
            // that has been read.
            c->eof = 1;
            if (take_lines(c, line, ctx, line_max, err)) return -1;
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            break;
        } else {
            return err_set(err, "%s: reading: %s", c->what, strerror(errno));
        }
    }
    return 0;
}

int cp_wait(coproc *c, int ms, rl_err *err) {
    struct pollfd p = {c->fd, POLLIN, 0};
    if (c->out_off < c->out.len) p.events |= POLLOUT;
    while (poll(&p, 1, ms) < 0)
        if (errno != EINTR) return err_set(err, "%s: poll: %s", c->what, strerror(errno));
    return 0;
}

int cp_close_input(coproc *c, rl_err *err) {
    if (shutdown(c->fd, SHUT_WR) && errno != ENOTCONN) return err_set(err, "%s: shutdown: %s", c->what, strerror(errno));
    return 0;
}

int cp_reap(coproc *c, long wait_ms) {
    for (long waited = 0; !c->reaped; waited++) {
        pid_t r = waitpid(c->pid, &c->status, wait_ms < 0 ? 0 : WNOHANG);
        if (r == c->pid) {
            c->reaped = 1;
        } else if (r < 0 && errno != EINTR) {
            // ECHILD: reaped elsewhere (SIGCHLD ignored); the status is lost.
            c->reaped = 1;
            c->status = -1;
        } else if (r == 0) {
            if (waited >= wait_ms) return 0;
            sleep_ms(1);
        }
    }
    return 1;
}

int cp_succeeded(const coproc *c) { return c->reaped && c->status == 0; }

const char *cp_status(const coproc *c, char *buf, size_t size) {
    int status = c->status;
    if (status == -1) snprintf(buf, size, "exited (status unknown: reaped elsewhere)");
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        snprintf(buf, size, "exited (status 127: command not found)");
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 126)
        snprintf(buf, size, "exited (status 126: command not executable)");
    else if (WIFEXITED(status)) snprintf(buf, size, "exited (status %d)", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(buf, size, "stopped (wait status %d)", status);
    return buf;
}

const char *cp_quote(const char *s, size_t n, char *buf, size_t size) {
    size_t q = n < QUOTE_MAX ? n : QUOTE_MAX;
    while (q < n && q && ((unsigned char)s[q] & 0xC0) == 0x80) q--;  // a whole UTF-8 character
    if (q > size - 4) q = size - 4;
    size_t i = 0;
    for (; i < q; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    if (q < n) buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = 0;
    return buf;
}

int cp_ms_left(double since, double timeout) {
    if (!timeout) return -1;
    double left = since + timeout - clock_now();
    if (left <= 0) return 0;
    return left > 3600 ? 3600000 : (int)(left * 1000) + 1;
}

void cp_free(coproc *c) {
    if (!c) return;
    close(c->fd);
    if (!cp_reap(c, 0)) {
        kill(c->pid, SIGTERM);
        if (!cp_reap(c, 1000)) {
            kill(c->pid, SIGKILL);
            cp_reap(c, -1);
        }
    }
    sbuf_free(&c->out);
    sbuf_free(&c->in);
    free(c);
}
