// envproc.c — the environment's JSON lines, keyed by rollout id (envproc.h).
#include "sample/envproc.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "records/json.h"
#include "sample/coproc.h"

typedef struct {
    uint64_t id;
    double sent;              // clock_now() when queued
} wait_t;

typedef struct {
    uint64_t id;
    rec_t *rec;
    int late;
} answer_t;

struct envproc {
    coproc *c;
    double timeout;
    int failed;
    rl_err err;
    uint64_t err_id;
    uint64_t lines;           // answer lines read
    wait_t *wait;             // requests waiting, oldest first
    size_t n_wait, cap_wait;
    uint64_t *expired;        // expired[expired_head..n_expired): not yet taken by env_expired
    size_t expired_head, n_expired, cap_expired;
    uint64_t *late;           // expired requests whose answer may still come
    size_t n_late, cap_late;
    answer_t *ans;            // ans[ans_head..n_ans): not yet taken
    size_t ans_head, n_ans, cap_ans;
    rec_t *taken;             // the answer env_next returned last
};

envproc *env_start(const char *cmd, double timeout, rl_err *err) {
    coproc *c = cp_start(cmd, "environment", err);
    if (!c) return NULL;
    envproc *e = xmalloc(sizeof *e);
    memset(e, 0, sizeof *e);
    e->c = c;
    e->timeout = timeout > 0 ? timeout : 0;
    e->err_id = UINT64_MAX;
    return e;
}

void env_send(envproc *e, uint64_t id, const char *json, size_t n) {
    cp_queue(e->c, json, n);
    cp_queue(e->c, "\n", 1);
    GROW(e->wait, e->cap_wait, e->n_wait + 1, 64);
    e->wait[e->n_wait++] = (wait_t){id, clock_now()};
}

static int fail(envproc *e, rl_err *err) {
    e->failed = 1;
    e->err = *err;
    return -1;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// Removes x from a[0..*n); 1 if it was there.
static int take_id(uint64_t *a, size_t *n, uint64_t x) {
    for (size_t i = 0; i < *n; i++)
        if (a[i] == x) {
            memmove(a + i, a + i + 1, (*n - i - 1) * sizeof *a);
            (*n)--;
            return 1;
        }
    return 0;
}

static int take_wait(envproc *e, uint64_t id) {
    for (size_t i = 0; i < e->n_wait; i++)
        if (e->wait[i].id == id) {
            memmove(e->wait + i, e->wait + i + 1, (e->n_wait - i - 1) * sizeof *e->wait);
            e->n_wait--;
            return 1;
        }
    return 0;
}

int env_parse_answer(const char *line, size_t n, rec_t *r, uint64_t *id, rl_err *err) {
    char q[96];
    rl_err pe;
    if (n > ENV_LINE_MAX)
        return err_set(err, "longer than %zu bytes ('%s')", ENV_LINE_MAX, cp_quote(line, n, q, sizeof q));
    if (is_blank(line, n)) return 1;   // print() of an empty line: no answer, nothing lost
    if (json_to_rec(line, n, r, &pe))
        return err_set(err, "not a JSON answer: %s ('%s')", pe.msg, cp_quote(line, n, q, sizeof q));
    if (rec_get_uint(r, "id", id) != REC_OK)
        return err_set(err, "no \"id\" (the unsigned integer of the request it answers) ('%s')",
                       cp_quote(line, n, q, sizeof q));
    return 0;
}

// One answer line (without its '\n').
static int take_line(void *ctx, const char *line, size_t n, rl_err *err) {
    envproc *e = ctx;
    uint64_t no = ++e->lines, id;
    rec_t *r = rec_new();
    rl_err pe;
    int rc = env_parse_answer(line, n, r, &id, &pe);
    if (rc) {
        rec_free(r);
        return rc > 0 ? 0 : err_set(err, "environment: answer line %llu: %s", (unsigned long long)no, pe.msg);
    }
    int late = 0;
    if (!take_wait(e, id)) {
        if (!take_id(e->late, &e->n_late, id)) {
            rec_free(r);
            e->err_id = id;
            return err_set(err, "environment: answer line %llu: id %llu is no request waiting for an answer "
                           "(answered twice, or never asked)", (unsigned long long)no, (unsigned long long)id);
        }
        late = 1;
    }
    if (e->ans_head == e->n_ans) e->ans_head = e->n_ans = 0;
    GROW(e->ans, e->cap_ans, e->n_ans + 1, 64);
    e->ans[e->n_ans++] = (answer_t){id, r, late};
    return 0;
}

// Moves the requests past their timeout to the expired list.
static void expire(envproc *e) {
    if (!e->timeout) return;
    size_t k = 0;
    for (size_t i = 0; i < e->n_wait; i++) {
        if (cp_ms_left(e->wait[i].sent, e->timeout)) {
            e->wait[k++] = e->wait[i];
            continue;
        }
        if (e->expired_head == e->n_expired) e->expired_head = e->n_expired = 0;
        GROW(e->expired, e->cap_expired, e->n_expired + 1, 16);
        e->expired[e->n_expired++] = e->wait[i].id;
        GROW(e->late, e->cap_late, e->n_late + 1, 16);
        e->late[e->n_late++] = e->wait[i].id;
    }
    e->n_wait = k;
}

static int exchange(envproc *e, rl_err *err) {
    if (cp_exchange(e->c, take_line, e, ENV_LINE_MAX, err)) return -1;
    expire(e);
    // An environment that answered some requests and then exited: the
    // answers read with its end come out first (their rollouts, and the
    // groups they finish, are written), the error at the next pump.
    if (cp_eof(e->c) && e->n_wait && e->ans_head == e->n_ans) {
        char how[128];
        e->err_id = e->wait[0].id;
        if (!cp_reap(e->c, 1000))
            return err_set(err, "environment closed its output with %zu requests waiting for an answer (it is "
                           "still running)", e->n_wait);
        return err_set(err, "environment %s with %zu requests waiting for an answer", cp_status(e->c, how, sizeof how),
                       e->n_wait);
    }
    return 0;
}

int env_pump(envproc *e, int wait_ms, rl_err *err) {
    if (e->failed) return *err = e->err, -1;
    double start = clock_now();
    for (;;) {
        if (exchange(e, err)) return fail(e, err);
        if (!wait_ms || e->ans_head < e->n_ans || e->expired_head < e->n_expired || !e->n_wait) return 0;
        int ms = wait_ms < 0 ? -1 : cp_ms_left(start, wait_ms / 1000.0);
        if (!ms) return 0;
        int due = cp_ms_left(e->wait[0].sent, e->timeout);   // the oldest expires first
        if (due >= 0 && (ms < 0 || due < ms)) ms = due;
        if (cp_wait(e->c, ms, err)) return fail(e, err);
    }
}

int env_next(envproc *e, uint64_t *id, const rec_t **answer, int *late) {
    rec_free(e->taken);
    e->taken = NULL;
    if (e->ans_head == e->n_ans) return 0;
    answer_t *a = &e->ans[e->ans_head++];
    *id = a->id;
    *answer = e->taken = a->rec;
    *late = a->late;
    return 1;
}

int env_expired(envproc *e, uint64_t *id) {
    if (e->expired_head == e->n_expired) return 0;
    *id = e->expired[e->expired_head++];
    return 1;
}

size_t env_waiting(const envproc *e) { return e->n_wait; }
uint64_t env_error_id(const envproc *e) { return e->err_id; }
double env_timeout(const envproc *e) { return e->timeout; }

// Discards the lines written after the input closed (answers to expired
// requests; nothing waits for them).
static int discard_line(void *ctx, const char *line, size_t n, rl_err *err) {
    (void)ctx, (void)line, (void)n, (void)err;
    return 0;
}

int env_finish(envproc *e, rl_err *err) {
    if (e->failed) return *err = e->err, -1;
    if (cp_close_input(e->c, err)) return fail(e, err);
    double closed = clock_now();
    int ms = -1;
    while (!cp_eof(e->c)) {
        if (cp_exchange(e->c, discard_line, e, ENV_LINE_MAX, err)) return fail(e, err);
        if (cp_eof(e->c) || !(ms = cp_ms_left(closed, e->timeout))) break;
        if (cp_wait(e->c, ms, err)) return fail(e, err);
    }
    if (!ms || !cp_reap(e->c, cp_ms_left(closed, e->timeout))) {
        err_set(err, "environment: still running %g s after its input ended", e->timeout);
        return fail(e, err);
    }
    if (!cp_succeeded(e->c)) {
        char how[128];
        err_set(err, "environment %s after its input ended", cp_status(e->c, how, sizeof how));
        return fail(e, err);
    }
    return 0;
}

void env_free(envproc *e) {
    if (!e) return;
    cp_free(e->c);
    for (size_t i = e->ans_head; i < e->n_ans; i++) rec_free(e->ans[i].rec);
    rec_free(e->taken);
    free(e->ans);
    free(e->wait);
    free(e->expired);
    free(e->late);
    free(e);
}
