// vproc.c — an external verifier command on one end of a socketpair (see vproc.h).
#include "sample/vproc.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
#include "records/json.h"

extern char **environ;

// A reply line longer than this is refused rather than buffered without end.
#define VP_LINE_MAX 4096
// How much of a bad reply an error quotes.
#define VP_QUOTE_MAX 80

struct vproc {
    pid_t pid;
    int fd;                  // our end: non-blocking, close-on-exec
    int status, reaped;      // the wait status once reaped
    int eof;                 // the command closed its output (or reset the connection)
    int failed;              // err holds the error that every later call repeats
    rl_err err;
    sbuf out;                // requests queued; out.data[out_off..out.len) not yet written
    size_t out_off;
    sbuf in;                 // reply bytes read; in.data[in_off..in.len) not yet a whole line
    size_t in_off;
    uint64_t sent, answered;
    double *rewards;         // rewards[k] is the reward of request first + k
    size_t rewards_cap;
    uint64_t first;
    double timeout;          // seconds; 0: none
    double wait_since;       // clock_now() of the last answer, or of the first request while none was outstanding
};

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

// Reaps the command if it has exited, waiting up to wait_ms for it
// (wait_ms < 0: as long as it takes). 1 reaped, 0 still running.
static int reap(vproc *v, long wait_ms) {
    for (long waited = 0; !v->reaped; waited++) {
        pid_t r = waitpid(v->pid, &v->status, wait_ms < 0 ? 0 : WNOHANG);
        if (r == v->pid) {
            v->reaped = 1;
        } else if (r < 0 && errno != EINTR) {
            // ECHILD: reaped elsewhere (SIGCHLD ignored); the status is lost.
            v->reaped = 1;
            v->status = -1;
        } else if (r == 0) {
            if (waited >= wait_ms) return 0;
            sleep_ms(1);
        }
    }
    return 1;
}

// "exited (status 3)", "was killed by signal 9 (Killed)", with a hint for
// the statuses of sh that mean the command could not be run.
static const char *describe_status(int status, char *buf, size_t size) {
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

// Records err as v's error (every later call repeats it) and returns -1.
static int fail(vproc *v, rl_err *err) {
    v->failed = 1;
    v->err = *err;
    return -1;
}

vproc *vp_start(const char *cmd, double timeout, rl_err *err) {
    int sv[2];
    // SOCK_CLOEXEC: no other child inherits either end; dup2 onto 0 and 1
    // clears the flag on the command's copies.
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        err_set(err, "verifier command: socketpair: %s", strerror(errno));
        return NULL;
    }
    // Non-blocking on our end only: the command reads and writes its end as
    // ordinary blocking stdin and stdout.
    int fl = fcntl(sv[0], F_GETFL);
    if (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK)) {
        err_set(err, "verifier command: fcntl: %s", strerror(errno));
        close(sv[0]), close(sv[1]);
        return NULL;
    }
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        err_set(err, "verifier command: fork: %s", strerror(errno));
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
    vproc *v = xmalloc(sizeof *v);
    memset(v, 0, sizeof *v);
    v->pid = pid;
    v->fd = sv[0];
    v->timeout = timeout > 0 ? timeout : 0;
    return v;
}

void vp_send(vproc *v, const char *prompt, size_t np, const char *completion, size_t nc,
             const char *answer, size_t na) {
    if (v->out_off == v->out.len) v->out_off = v->out.len = 0;
    if (v->answered == v->sent) v->wait_since = clock_now();
    sbuf_put(&v->out, "{\"prompt\": ", 11);
    json_put_str(&v->out, prompt, np);
    sbuf_put(&v->out, ", \"completion\": ", 16);
    json_put_str(&v->out, completion, nc);
    if (answer) {
        sbuf_put(&v->out, ", \"answer\": ", 12);
        json_put_str(&v->out, answer, na);
    }
    sbuf_put(&v->out, "}\n", 2);
    v->sent++;
}

// Quotes s[0..n) for an error: at most VP_QUOTE_MAX bytes, control bytes as '?'.
static const char *quote(const char *s, size_t n, char *buf, size_t size) {
    size_t q = n < VP_QUOTE_MAX ? n : VP_QUOTE_MAX;
    while (q < n && q && ((unsigned char)s[q] & 0xC0) == 0x80) q--;  // a whole UTF-8 character
    if (q > size - 4) q = size - 4;
    size_t i = 0;
    for (; i < q; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    if (q < n) buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = 0;
    return buf;
}

static void add_reward(vproc *v, double r) {
    size_t k = (size_t)(v->answered - v->first);
    GROW(v->rewards, v->rewards_cap, k + 1, 64);
    v->rewards[k] = r;
    v->answered++;
    v->wait_since = clock_now();
}

// One reply line (without its '\n'): the reward of the next request.
static int take_line(vproc *v, const char *line, size_t n, rl_err *err) {
    char q[VP_QUOTE_MAX + 8];
    if (v->answered == v->sent)
        return err_set(err, "verifier command: reply '%s' to request %llu, which was never sent "
                            "(more reply lines than requests)",
                       quote(line, n, q, sizeof q), (unsigned long long)v->answered);
    if (n > VP_LINE_MAX)
        return err_set(err, "verifier command: request %llu: reply line longer than %d bytes ('%s')",
                       (unsigned long long)v->answered, VP_LINE_MAX, quote(line, n, q, sizeof q));
    // The line trimmed, as a C string (a NUL byte in it is refused).
    size_t a = 0, b = n;
    while (a < b && is_space(line[a])) a++;
    while (b > a && is_space(line[b - 1])) b--;
    char text[VP_LINE_MAX + 1];
    memcpy(text, line + a, b - a);
    text[b - a] = 0;
    double r;
    if (!strcmp(text, "true")) r = 1;
    else if (!strcmp(text, "false")) r = 0;
    else {
        char *end;
        r = strtod(text, &end);
        int whole = b > a && end == text + (b - a);  // strtod read every byte
        if (!whole || !isfinite(r))
            return err_set(err, "verifier command: request %llu: reply '%s' is not a %snumber",
                           (unsigned long long)v->answered, quote(line, n, q, sizeof q), whole ? "finite " : "");
    }
    add_reward(v, r);
    return 0;
}

// Takes every whole line in v->in; at end of output, the rest too when not
// empty (a last reply without its '\n').
static int take_lines(vproc *v, int at_eof, rl_err *err) {
    for (;;) {
        const char *p = (const char *)v->in.data + v->in_off;
        size_t avail = v->in.len - v->in_off;
        const char *nl = avail ? memchr(p, '\n', avail) : NULL;
        if (!nl) {
            if (avail > VP_LINE_MAX || (at_eof && avail)) {
                v->in_off = v->in.len;
                return take_line(v, p, avail, err);
            }
            break;
        }
        v->in_off += (size_t)(nl - p) + 1;
        if (take_line(v, p, (size_t)(nl - p), err)) return -1;
    }
    if (v->in_off == v->in.len) v->in_off = v->in.len = 0;
    else if (v->in_off > VP_LINE_MAX) {
        memmove(v->in.data, v->in.data + v->in_off, v->in.len - v->in_off);
        v->in.len -= v->in_off;
        v->in_off = 0;
    }
    return 0;
}

// Writes and reads what can be without waiting. 0, or -1 with err.
static int exchange(vproc *v, rl_err *err) {
    while (v->out_off < v->out.len) {
        ssize_t w = send(v->fd, v->out.data + v->out_off, v->out.len - v->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            v->out_off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            // The command is gone: what it answered is still to be read,
            // and the end of its output says which request went unanswered.
            v->out_off = v->out.len;
        } else {
            return err_set(err, "verifier command: writing request %llu: %s", (unsigned long long)v->answered,
                           strerror(errno));
        }
    }
    while (!v->eof) {
        sbuf_reserve(&v->in, 65536);
        ssize_t r = recv(v->fd, v->in.data + v->in.len, v->in.cap - v->in.len, MSG_DONTWAIT);
        if (r > 0) {
            v->in.len += (size_t)r;
            if (take_lines(v, 0, err)) return -1;
        } else if (r == 0 || errno == ECONNRESET) {
            // ECONNRESET: it exited leaving requests unread; the replies it
            // wrote before that have been read.
            v->eof = 1;
            if (take_lines(v, 1, err)) return -1;
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            break;
        } else {
            return err_set(err, "verifier command: reading the reply to request %llu: %s",
                           (unsigned long long)v->answered, strerror(errno));
        }
    }
    if (v->eof && v->answered < v->sent) {
        char how[128];
        if (!reap(v, 1000))
            return err_set(err, "verifier command closed its output without answering request %llu "
                                "(it is still running)",
                           (unsigned long long)v->answered);
        return err_set(err, "verifier command %s without answering request %llu",
                       describe_status(v->status, how, sizeof how), (unsigned long long)v->answered);
    }
    return 0;
}

// Milliseconds left before the deadline `since + timeout` (at least 1 while
// time is left, 0 once it has passed); -1 without a timeout.
static int ms_left(const vproc *v, double since) {
    if (!v->timeout) return -1;
    double left = since + v->timeout - clock_now();
    if (left <= 0) return 0;
    return left > 3600 ? 3600000 : (int)(left * 1000) + 1;
}

// Waits until the socket can be read, or written while requests wait, for
// at most ms milliseconds (-1: without end).
static int wait_ready(vproc *v, int ms, rl_err *err) {
    struct pollfd p = {v->fd, POLLIN, 0};
    if (v->out_off < v->out.len) p.events |= POLLOUT;
    while (poll(&p, 1, ms) < 0)
        if (errno != EINTR) return err_set(err, "verifier command: poll: %s", strerror(errno));
    return 0;
}

// An error once requests have been outstanding for the timeout with no answer.
static int check_stall(vproc *v, rl_err *err) {
    if (v->answered == v->sent || ms_left(v, v->wait_since)) return 0;
    return err_set(err, "verifier command: request %llu: no reply in %g s (it hangs, or is slower than the timeout)",
                   (unsigned long long)v->answered, v->timeout);
}

int vp_pump(vproc *v, int block, rl_err *err) {
    if (v->failed) return *err = v->err, -1;
    uint64_t before = v->answered;
    for (;;) {
        if (exchange(v, err) || check_stall(v, err)) return fail(v, err);
        if (!block || v->answered > before || v->answered == v->sent) return 0;
        if (wait_ready(v, ms_left(v, v->wait_since), err)) return fail(v, err);
    }
}

uint64_t vp_sent(const vproc *v) { return v->sent; }
uint64_t vp_answered(const vproc *v) { return v->answered; }

double vp_reward(const vproc *v, uint64_t i) {
    if (i < v->first || i >= v->answered) {
        fprintf(stderr, "vp_reward: request %llu has no reward held (held: [%llu, %llu))\n", (unsigned long long)i,
                (unsigned long long)v->first, (unsigned long long)v->answered);
        abort();
    }
    return v->rewards[i - v->first];
}

void vp_forget(vproc *v, uint64_t i) {
    if (i > v->answered) i = v->answered;
    if (i <= v->first) return;
    memmove(v->rewards, v->rewards + (i - v->first), (size_t)(v->answered - i) * sizeof *v->rewards);
    v->first = i;
}

int vp_finish(vproc *v, rl_err *err) {
    while (v->answered < v->sent)
        if (vp_pump(v, 1, err)) return -1;
    if (v->failed) return *err = v->err, -1;
    // End of input; then every line it still writes is one too many.
    if (shutdown(v->fd, SHUT_WR) && errno != ENOTCONN)
        return err_set(err, "verifier command: shutdown: %s", strerror(errno)), fail(v, err);
    // The command has the timeout to finish: to close its output and exit.
    double closed = clock_now();
    int ms = -1;
    while (!v->eof) {
        if (exchange(v, err)) return fail(v, err);
        if (v->eof || !(ms = ms_left(v, closed))) break;
        if (wait_ready(v, ms, err)) return fail(v, err);
    }
    if (!ms || !reap(v, ms_left(v, closed))) {
        err_set(err, "verifier command: still running %g s after its input ended (it answered all %llu requests)",
                v->timeout, (unsigned long long)v->sent);
        return fail(v, err);
    }
    if (v->status != 0) {
        char how[128];
        err_set(err, "verifier command %s after answering all %llu requests",
                describe_status(v->status, how, sizeof how), (unsigned long long)v->sent);
        return fail(v, err);
    }
    return 0;
}

void vp_free(vproc *v) {
    if (!v) return;
    close(v->fd);
    if (!reap(v, 0)) {
        kill(v->pid, SIGTERM);
        if (!reap(v, 1000)) {
            kill(v->pid, SIGKILL);
            reap(v, -1);
        }
    }
    sbuf_free(&v->out);
    sbuf_free(&v->in);
    free(v->rewards);
    free(v);
}
