// vproc.c — an external verifier command: reward lines in order (see vproc.h).
#include "sample/vproc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "records/json.h"
#include "sample/coproc.h"

// A reply line longer than this is refused rather than buffered without end.
#define VP_LINE_MAX 4096

struct vproc {
    coproc *c;
    int failed;              // err holds the error that every later call repeats
    rl_err err;
    uint64_t sent, answered;
    double *rewards;         // rewards[k] is the reward of request first + k
    size_t rewards_cap;
    uint64_t first;
    double timeout;          // seconds; 0: none
    double wait_since;       // clock_now() of the last answer, or of the first request while none was outstanding
};

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Records err as v's error (every later call repeats it) and returns -1.
static int fail(vproc *v, rl_err *err) {
    v->failed = 1;
    v->err = *err;
    return -1;
}

vproc *vp_start(const char *cmd, double timeout, rl_err *err) {
    coproc *c = cp_start(cmd, "verifier command", err);
    if (!c) return NULL;
    vproc *v = xmalloc(sizeof *v);
    memset(v, 0, sizeof *v);
    v->c = c;
    v->timeout = timeout > 0 ? timeout : 0;
    return v;
}

void vp_send(vproc *v, const char *prompt, size_t np, const char *completion, size_t nc,
             const char *answer, size_t na) {
    if (v->answered == v->sent) v->wait_since = clock_now();
    sbuf line = {0};
    sbuf_put(&line, "{\"prompt\": ", 11);
    json_put_str(&line, prompt, np);
    sbuf_put(&line, ", \"completion\": ", 16);
    json_put_str(&line, completion, nc);
    if (answer) {
        sbuf_put(&line, ", \"answer\": ", 12);
        json_put_str(&line, answer, na);
    }
    sbuf_put(&line, "}\n", 2);
    cp_queue(v->c, line.data, line.len);
    sbuf_free(&line);
    v->sent++;
}

static void add_reward(vproc *v, double r) {
    size_t k = (size_t)(v->answered - v->first);
    GROW(v->rewards, v->rewards_cap, k + 1, 64);
    v->rewards[k] = r;
    v->answered++;
    v->wait_since = clock_now();
}

// One reply line (without its '\n'): the reward of the next request.
static int take_line(void *ctx, const char *line, size_t n, rl_err *err) {
    vproc *v = ctx;
    char q[96];
    if (v->answered == v->sent)
        return err_set(err, "verifier command: reply '%s' to request %llu, which was never sent "
                            "(more reply lines than requests)",
                       cp_quote(line, n, q, sizeof q), (unsigned long long)v->answered);
    if (n > VP_LINE_MAX)
        return err_set(err, "verifier command: request %llu: reply line longer than %d bytes ('%s')",
                       (unsigned long long)v->answered, VP_LINE_MAX, cp_quote(line, n, q, sizeof q));
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
                           (unsigned long long)v->answered, cp_quote(line, n, q, sizeof q), whole ? "finite " : "");
    }
    add_reward(v, r);
    return 0;
}

// Writes and reads what can be without waiting. 0, or -1 with err.
static int exchange(vproc *v, rl_err *err) {
    if (cp_exchange(v->c, take_line, v, VP_LINE_MAX, err)) return -1;
    if (cp_eof(v->c) && v->answered < v->sent) {
        char how[128];
        if (!cp_reap(v->c, 1000))
            return err_set(err, "verifier command closed its output without answering request %llu "
                                "(it is still running)",
                           (unsigned long long)v->answered);
        return err_set(err, "verifier command %s without answering request %llu", cp_status(v->c, how, sizeof how),
                       (unsigned long long)v->answered);
    }
    return 0;
}

// An error once requests have been outstanding for the timeout with no answer.
static int check_stall(vproc *v, rl_err *err) {
    if (v->answered == v->sent || cp_ms_left(v->wait_since, v->timeout)) return 0;
    return err_set(err, "verifier command: request %llu: no reply in %g s (it hangs, or is slower than the timeout)",
                   (unsigned long long)v->answered, v->timeout);
}

int vp_pump(vproc *v, int block, rl_err *err) {
    if (v->failed) return *err = v->err, -1;
    uint64_t before = v->answered;
    for (;;) {
        if (exchange(v, err) || check_stall(v, err)) return fail(v, err);
        if (!block || v->answered > before || v->answered == v->sent) return 0;
        if (cp_wait(v->c, cp_ms_left(v->wait_since, v->timeout), err)) return fail(v, err);
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
    if (cp_close_input(v->c, err)) return fail(v, err);
    // The command has the timeout to finish: to close its output and exit.
    double closed = clock_now();
    int ms = -1;
    while (!cp_eof(v->c)) {
        if (exchange(v, err)) return fail(v, err);
        if (cp_eof(v->c) || !(ms = cp_ms_left(closed, v->timeout))) break;
        if (cp_wait(v->c, ms, err)) return fail(v, err);
    }
    if (!ms || !cp_reap(v->c, cp_ms_left(closed, v->timeout))) {
        err_set(err, "verifier command: still running %g s after its input ended (it answered all %llu requests)",
                v->timeout, (unsigned long long)v->sent);
        return fail(v, err);
    }
    if (!cp_succeeded(v->c)) {
        char how[128];
        err_set(err, "verifier command %s after answering all %llu requests", cp_status(v->c, how, sizeof how),
                (unsigned long long)v->sent);
        return fail(v, err);
    }
    return 0;
}

void vp_free(vproc *v) {
    if (!v) return;
    cp_free(v->c);
    free(v->rewards);
    free(v);
}
