// vproc.c — an external verifier command: requests and reply lines in order (see vproc.h).
#include "sample/vproc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "records/json.h"
#include "sample/coproc.h"

// A reply line longer than this is refused rather than buffered without end.
#define VP_LINE_MAX 65536

struct vproc {
    coproc *c;
    char *what;              // its name in messages
    int failed;              // err holds the error that every later call repeats
    rl_err err;
    uint64_t sent, answered;
    vr_reply *replies;       // replies[k] answers request first + k
    size_t replies_cap;
    uint64_t first;
    double timeout;          // seconds; 0: none
    double wait_since;       // clock_now() of the last answer, or of the first request while none was outstanding
};

// Records err as v's error (every later call repeats it) and returns -1.
static int fail(vproc *v, rl_err *err) {
    v->failed = 1;
    v->err = *err;
    return -1;
}

vproc *vp_start(const char *cmd, const char *what, double timeout, rl_err *err) {
    vproc *v = xmalloc(sizeof *v);
    memset(v, 0, sizeof *v);
    v->what = xstrdup(what);   // the coproc keeps the pointer
    if (!(v->c = cp_start(cmd, v->what, err))) {
        free(v->what);
        free(v);
        return NULL;
    }
    v->timeout = timeout > 0 ? timeout : 0;
    return v;
}

int vp_prompt_keys(const rec_t *prompt, sbuf *out, rl_err *err) {
    rec_t *keys = rec_new();
    for (size_t k = 0; k < rec_nfields(prompt); k++) {
        size_t kl, vl;
        const char *key = rec_key(prompt, k, &kl);
        const uint8_t *val = rec_value(prompt, k, &vl);
        if ((kl == 6 && !memcmp(key, "prompt", 6)) || (kl == 10 && !memcmp(key, "completion", 10))) continue;
        rec_set_raw(keys, key, kl, val, vl);
    }
    sbuf obj = {0};
    int rc = json_from_rec(keys, &obj, err);
    if (!rc && obj.len > 2) {   // '{' members '}': the members, after a comma
        sbuf_putc(out, ',');
        sbuf_put(out, obj.data + 1, obj.len - 2);
    }
    sbuf_free(&obj);
    rec_free(keys);
    return rc;
}

void vp_request(sbuf *line, const char *prompt, size_t np, const char *completion, size_t nc, const char *keys,
                size_t nk) {
    line->len = 0;
    sbuf_put(line, "{\"prompt\":", 10);
    json_put_str(line, prompt, np);
    sbuf_put(line, ",\"completion\":", 14);
    json_put_str(line, completion, nc);
    if (nk) sbuf_put(line, keys, nk);
    sbuf_put(line, "}\n", 2);
}

void vp_send(vproc *v, const void *line, size_t n) {
    if (v->answered == v->sent) v->wait_since = clock_now();
    cp_queue(v->c, line, n);
    v->sent++;
}

// One reply line (without its '\n'): the reply to the next request.
static int take_line(void *ctx, const char *line, size_t n, rl_err *err) {
    vproc *v = ctx;
    char q[96];
    if (v->answered == v->sent)
        return err_set(err, "%s: reply '%s' to request %llu, which was never sent (more reply lines than requests)",
                       v->what, cp_quote(line, n, q, sizeof q), (unsigned long long)v->answered);
    if (n > VP_LINE_MAX)
        return err_set(err, "%s: request %llu: reply line longer than %d bytes ('%s')", v->what,
                       (unsigned long long)v->answered, VP_LINE_MAX, cp_quote(line, n, q, sizeof q));
    size_t k = (size_t)(v->answered - v->first);
    GROW(v->replies, v->replies_cap, k + 1, 64);
    rl_err pe;
    if (vr_parse(line, n, &v->replies[k], &pe))
        return err_set(err, "%s: request %llu: %s", v->what, (unsigned long long)v->answered, pe.msg);
    v->answered++;
    v->wait_since = clock_now();
    return 0;
}

// Writes and reads what can be without waiting. 0, or -1 with err.
static int exchange(vproc *v, rl_err *err) {
    if (cp_exchange(v->c, take_line, v, VP_LINE_MAX, err)) return -1;
    if (cp_eof(v->c) && v->answered < v->sent) {
        char how[128];
        if (!cp_reap(v->c, 1000))
            return err_set(err, "%s closed its output without answering request %llu (it is still running)",
                           v->what, (unsigned long long)v->answered);
        return err_set(err, "%s %s without answering request %llu", v->what, cp_status(v->c, how, sizeof how),
                       (unsigned long long)v->answered);
    }
    return 0;
}

// An error once requests have been outstanding for the timeout with no answer.
static int check_stall(vproc *v, rl_err *err) {
    if (v->answered == v->sent || cp_ms_left(v->wait_since, v->timeout)) return 0;
    return err_set(err, "%s: request %llu: no reply in %g s (it hangs, or is slower than the timeout)", v->what,
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

const vr_reply *vp_reply(const vproc *v, uint64_t i) {
    if (i < v->first || i >= v->answered) {
        fprintf(stderr, "vp_reply: request %llu has no reply held (held: [%llu, %llu))\n", (unsigned long long)i,
                (unsigned long long)v->first, (unsigned long long)v->answered);
        abort();
    }
    return &v->replies[i - v->first];
}

void vp_forget(vproc *v, uint64_t i) {
    if (i > v->answered) i = v->answered;
    if (i <= v->first) return;
    for (uint64_t j = v->first; j < i; j++) vr_free(&v->replies[j - v->first]);
    memmove(v->replies, v->replies + (i - v->first), (size_t)(v->answered - i) * sizeof *v->replies);
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
        err_set(err, "%s: still running %g s after its input ended (it answered all %llu requests)", v->what,
                v->timeout, (unsigned long long)v->sent);
        return fail(v, err);
    }
    if (!cp_succeeded(v->c)) {
        char how[128];
        err_set(err, "%s %s after answering all %llu requests", v->what, cp_status(v->c, how, sizeof how),
                (unsigned long long)v->sent);
        return fail(v, err);
    }
    return 0;
}

void vp_free(vproc *v) {
    if (!v) return;
    cp_free(v->c);
    for (uint64_t j = v->first; j < v->answered; j++) vr_free(&v->replies[j - v->first]);
    free(v->replies);
    free(v->what);
    free(v);
}
