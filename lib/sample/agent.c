// agent.c — multi-turn rollouts with an environment (agent.h).
#include "sample/agent.h"

#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/json.h"
#include "records/mparray.h"
#include "template/toolcall.h"

// The messages of a conversation, each encoded (msgpack map) twice: as the
// template renders it and the record keeps it, and as the environment reads
// it (an assistant's turn with its "tool_calls" parsed).
typedef struct {
    sbuf bytes;
    size_t *off;          // message i is bytes[off[i], off[i + 1])
    size_t n, cap;
} msgs_t;

typedef struct {
    uint64_t id;          // the sample's number, its record's id
    size_t prompt;
    gen_seq *seq;         // while it decodes or waits; NULL once ended
    msgs_t plain, req;
    int turn;             // turns ended
    int final;            // the request sent was final
    int waiting;          // a request is out
    int ended_by_token;   // the last turn ended with a stop token
    rec_t *out;           // once ended: the record's fields
} conv_t;

struct ag {
    ag_opts o;
    conv_t **convs;       // live conversations (a handful per slot)
    size_t n, cap;
    ag_totals t;
    sbuf scratch, text;
    u32_vec ids;
};

ag_t *ag_new(const ag_opts *o) {
    ag_t *a = xmalloc(sizeof *a);
    memset(a, 0, sizeof *a);
    a->o = *o;
    return a;
}

static void msgs_free(msgs_t *m) {
    sbuf_free(&m->bytes);
    free(m->off);
}

static void conv_free(conv_t *c) {
    msgs_free(&c->plain);
    msgs_free(&c->req);
    rec_free(c->out);
    free(c);
}

void ag_free(ag_t *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) conv_free(a->convs[i]);
    free(a->convs);
    sbuf_free(&a->scratch);
    sbuf_free(&a->text);
    u32_vec_free(&a->ids);
    free(a);
}

const ag_totals *ag_total(const ag_t *a) { return &a->t; }

static void msgs_add(msgs_t *m, const void *p, size_t n) {
    GROW(m->off, m->cap, m->n + 2, 16);
    if (!m->n) m->off[0] = 0;
    sbuf_put(&m->bytes, p, n);
    m->off[++m->n] = m->bytes.len;
}

// The first count messages as one msgpack array, into out (cleared).
static void msgs_array(const msgs_t *m, size_t count, sbuf *out) {
    out->len = 0;
    mpa_put_header(out, (uint32_t)count);
    if (count) sbuf_put(out, m->bytes.data, m->off[count]);
}

static conv_t *find(const ag_t *a, uint64_t id, size_t *at) {
    for (size_t i = 0; i < a->n; i++)
        if (a->convs[i]->id == id) {
            if (at) *at = i;
            return a->convs[i];
        }
    return NULL;
}

// Splits the msgpack array p[0..n) into its elements: each is checked to be
// a map with a string "role" (not "assistant" when env), and added to m and
// m2 when not NULL. 0, or -1 with err.
static int add_messages(msgs_t *m, msgs_t *m2, const uint8_t *p, size_t n, int env, rl_err *err) {
    mpa_elems el = {0};
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    int rc = -1;
    if (mpa_split(p, n, &el)) {
        err_set(err, "\"messages\" is not a list of messages");
        goto out;
    }
    if (env && !el.n) {
        err_set(err, "\"messages\" is empty: continue with at least one message, or end with \"done\"");
        goto out;
    }
    for (size_t i = 0; i < el.n; i++) {
        const uint8_t *e = p + el.off[i];
        size_t len = el.off[i + 1] - el.off[i], at = 0;
        msgpack_object x;
        msgpack_zone_clear(&zone);
        if (msgpack_unpack((const char *)e, len, &at, &zone, &x) != MSGPACK_UNPACK_SUCCESS) x.type = MSGPACK_OBJECT_NIL;
        const msgpack_object *role = NULL;
        for (uint32_t k = 0; x.type == MSGPACK_OBJECT_MAP && k < x.via.map.size; k++) {
            const msgpack_object *key = &x.via.map.ptr[k].key;
            if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == 4 && !memcmp(key->via.str.ptr, "role", 4))
                role = &x.via.map.ptr[k].val;
        }
        if (!role || role->type != MSGPACK_OBJECT_STR) {
            err_set(err, "\"messages\"[%zu] is not a map with a string \"role\"", i);
            goto out;
        }
        if (env && role->via.str.size == 9 && !memcmp(role->via.str.ptr, "assistant", 9)) {
            err_set(err, "\"messages\"[%zu] has the role \"assistant\": the model writes the assistant's turns", i);
            goto out;
        }
        if (m) msgs_add(m, e, len);
        if (m2) msgs_add(m2, e, len);
    }
    rc = 0;
out:
    mpa_elems_free(&el);
    msgpack_zone_destroy(&zone);
    return rc;
}

// Ends c's rollout with its record's fields (reward, info, env_error).
static void end_rollout(ag_t *a, gen_t *g, conv_t *c, double reward, const uint8_t *info, size_t info_len,
                        const char *error) {
    c->out = rec_new();
    msgs_array(&c->plain, c->plain.n, &a->scratch);
    rec_set_raw(c->out, "messages", 8, a->scratch.data, a->scratch.len);
    rec_set_f64(c->out, "reward", reward);
    if (info) rec_set_raw(c->out, "info", 4, info, info_len);
    if (error) rec_set_cstr(c->out, "env_error", error);
    gen_end(g, c->seq);
    c->seq = NULL;
    c->waiting = 0;
    a->t.rollouts++;
    a->t.turns += (uint64_t)c->turn;
}

// Fails c's rollout: reward 0, the reason in its record; an error once more
// than max_failures have failed.
static int fail_rollout(ag_t *a, gen_t *g, conv_t *c, rl_err *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail_rollout(ag_t *a, gen_t *g, conv_t *c, rl_err *err, const char *fmt, ...) {
    char why[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    end_rollout(a, g, c, 0, NULL, 0, why);
    if (a->o.warn)
        a->o.warn("rollout id %llu failed (reward 0): %s: prompt %s", (unsigned long long)c->id, why,
                  a->o.prompts->v[c->prompt].where);
    if (++a->t.failed > a->o.max_failures)
        return err_set(err, "environment: %llu rollouts failed, more than --env-max-failures %llu; the last, rollout "
                       "id %llu, prompt %s: %s", (unsigned long long)a->t.failed,
                       (unsigned long long)a->o.max_failures, (unsigned long long)c->id,
                       a->o.prompts->v[c->prompt].where, why);
    return 0;
}

static void send_request(ag_t *a, conv_t *c, int final, const char *reason) {
    const prompt *p = &a->o.prompts->v[c->prompt];
    rec_t *req = rec_new(), *pr = rec_new();
    sbuf enc = {0};
    rec_set_uint(req, "id", c->id);
    rec_set_uint(req, "turn", (uint64_t)c->turn);
    msgs_array(&c->req, c->req.n, &a->scratch);
    rec_set_raw(req, "messages", 8, a->scratch.data, a->scratch.len);
    for (size_t k = 0; k < rec_nfields(p->rec); k++) {   // the prompt's other keys: the task's state
        size_t kl, vl;
        const char *key = rec_key(p->rec, k, &kl);
        const uint8_t *val = rec_value(p->rec, k, &vl);
        if (!(kl == 8 && !memcmp(key, "messages", 8))) rec_set_raw(pr, key, kl, val, vl);
    }
    rec_encode(pr, &enc);
    rec_set_raw(req, "prompt", 6, enc.data, enc.len);
    if (final) {
        rec_set_bool(req, "final", 1);
        rec_set_cstr(req, "reason", reason);
    }
    a->text.len = 0;
    rl_err e;
    if (json_from_rec(req, &a->text, &e) == 0) env_send(a->o.env, c->id, (const char *)a->text.data, a->text.len);
    c->final = final;
    c->waiting = 1;
    sbuf_free(&enc);
    rec_free(req);
    rec_free(pr);
}

// The assistant's turn t joins c's conversation, and its request is sent.
static void take_turn(ag_t *a, gen_t *g, conv_t *c, const gen_turn *t) {
    const gen_sample *s = t->s;
    uint32_t last = s->ids.v[s->ids.n - 1];
    c->seq = t->seq;
    c->turn = t->turn;
    c->ended_by_token = s->stopped && tok_is_special(a->o.tok, last);
    a->text.len = 0;
    utf8_lossy(s->text.data, s->text.len, &a->text);
    rec_t *m = rec_new();
    sbuf enc = {0}, calls = {0};
    rec_set_cstr(m, "role", "assistant");
    rec_set_str(m, "content", (const char *)a->text.data, a->text.len);
    rec_encode(m, &enc);
    msgs_add(&c->plain, enc.data, enc.len);
    if (tc_parse(chat_tool_format(a->o.chat), (const char *)a->text.data, a->text.len, &calls)) {
        rec_set_raw(m, "tool_calls", 10, calls.data, calls.len);
        enc.len = 0;
        rec_encode(m, &enc);
    }
    msgs_add(&c->req, enc.data, enc.len);
    sbuf_free(&enc);
    sbuf_free(&calls);
    rec_free(m);
    if (c->turn >= a->o.max_turns) send_request(a, c, 1, "max_turns");
    else if (!gen_room(g, c->seq)) send_request(a, c, 1, "length");
    else send_request(a, c, 0, NULL);
}

// A rollout's first turn ended: its conversation starts with its prompt's.
static conv_t *conv_new(ag_t *a, const gen_turn *t) {
    conv_t *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->id = t->number;
    c->prompt = t->prompt;
    const prompt *p = &a->o.prompts->v[t->prompt];
    long k = rec_find(p->rec, "messages");
    size_t n;
    const uint8_t *v = rec_value(p->rec, (size_t)k, &n);
    rl_err e;
    add_messages(&c->plain, &c->req, v, n, 0, &e);   // checked when the prompt was read
    GROW(a->convs, a->cap, a->n + 1, 64);
    a->convs[a->n++] = c;
    return c;
}

// 1 if the value v[0..n) is msgpack true.
static int is_true(const uint8_t *v, size_t n) { return n == 1 && v[0] == 0xc3; }
static int is_map(const uint8_t *v, size_t n) { return n && ((v[0] >= 0x80 && v[0] <= 0x8f) || v[0] == 0xde || v[0] == 0xdf); }

static ag_kind refuse(ag_answer *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ag_kind refuse(ag_answer *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->why, sizeof out->why, fmt, ap);
    va_end(ap);
    return out->kind = AG_FAILED;
}

ag_kind ag_read_answer(const rec_t *r, int final, ag_answer *out) {
    size_t n;
    long k;
    memset(out, 0, sizeof *out);
    if (rec_find(r, "error") >= 0) {
        const char *s;
        size_t sl;
        if (rec_get_str(r, "error", &s, &sl) == REC_OK)
            return refuse(out, "the environment reported an error: %.*s", (int)(sl > 300 ? 300 : sl), s);
        return refuse(out, "the environment reported an error");
    }
    if ((k = rec_find(r, "done")) >= 0) {
        const uint8_t *v = rec_value(r, (size_t)k, &n);
        if (!is_true(v, n)) return refuse(out, "\"done\" is not true (leave it out to continue)");
        if (rec_get_f64(r, "reward", &out->reward) != REC_OK || !isfinite(out->reward))
            return refuse(out, "\"done\" without a finite number \"reward\"");
        if ((k = rec_find(r, "info")) >= 0) {
            out->info = rec_value(r, (size_t)k, &out->info_len);
            if (!is_map(out->info, out->info_len)) return refuse(out, "\"info\" is not a map");
        }
        return out->kind = AG_DONE;
    }
    if (final) return refuse(out, "the final request was answered without \"done\"");
    if ((k = rec_find(r, "messages")) < 0) return refuse(out, "the answer has neither \"messages\" nor \"done\"");
    out->msgs = rec_value(r, (size_t)k, &out->msgs_len);
    rl_err e;
    if (add_messages(NULL, NULL, out->msgs, out->msgs_len, 1, &e)) return refuse(out, "%s", e.msg);
    return out->kind = AG_CONTINUE;
}

// The environment's answer r to c's request.
static int take_answer(ag_t *a, gen_t *g, conv_t *c, const rec_t *r, rl_err *err) {
    ag_answer ans;
    c->waiting = 0;
    switch (ag_read_answer(r, c->final, &ans)) {
    case AG_FAILED: return fail_rollout(a, g, c, err, "%s", ans.why);
    case AG_DONE: end_rollout(a, g, c, ans.reward, ans.info, ans.info_len, NULL); return 0;
    case AG_CONTINUE: break;
    }
    size_t before = c->plain.n;
    rl_err e;
    add_messages(&c->plain, &c->req, ans.msgs, ans.msgs_len, 1, &e);   // checked: it cannot fail
    // The new messages' text after the turn as generated, as the template writes it.
    int rewrote;
    msgs_array(&c->plain, c->plain.n, &a->scratch);
    a->text.len = 0;
    if (chat_continue(a->o.chat, a->scratch.data, a->scratch.len, a->o.prompts->v[c->prompt].rec, before,
                      c->ended_by_token, &a->text, &rewrote, &e))
        return fail_rollout(a, g, c, err, "the chat template cannot render the messages: %s", e.msg);
    a->t.rewrote += (uint64_t)rewrote;
    a->ids.n = 0;
    if (tok_encode_ex(a->o.tok, (const char *)a->text.data, a->text.len, 0, &a->ids.v, &a->ids.n, &a->ids.cap, NULL, &e))
        return fail_rollout(a, g, c, err, "%s", e.msg);
    if (a->ids.n > gen_room(g, c->seq)) {   // the context ends first: the environment ends it
        send_request(a, c, 1, "length");
        return 0;
    }
    gen_continue(g, c->seq, a->ids.v, a->ids.n);
    return 0;
}

// err with the rollout and prompt that an error of the environment concerns.
static int env_failed(ag_t *a, const rl_err *e, rl_err *err) {
    conv_t *c = find(a, env_error_id(a->o.env), NULL);
    if (!c) return err_set(err, "%s", e->msg);
    return err_set(err, "%s: rollout id %llu, prompt %s", e->msg, (unsigned long long)c->id,
                   a->o.prompts->v[c->prompt].where);
}

int ag_pump(ag_t *a, gen_t *g, int wait_ms, rl_err *err) {
    gen_turn t;
    while (gen_next_turn(g, &t)) {
        conv_t *c = find(a, t.number, NULL);
        take_turn(a, g, c ? c : conv_new(a, &t), &t);
    }
    rl_err e;
    if (env_pump(a->o.env, wait_ms, &e)) return env_failed(a, &e, err);
    uint64_t id;
    const rec_t *r;
    int late;
    while (env_next(a->o.env, &id, &r, &late)) {
        conv_t *c = find(a, id, NULL);
        if (late) {
            a->t.late++;
            if (a->o.warn)
                a->o.warn("environment: the answer to rollout id %llu came after its %g s timeout; dropped (the "
                          "rollout had failed)", (unsigned long long)id, env_timeout(a->o.env));
            continue;
        }
        if (!c || !c->waiting) return err_set(err, "environment: an answer to rollout id %llu, which waits for none",
                                              (unsigned long long)id);
        if (take_answer(a, g, c, r, err)) return -1;
    }
    while (env_expired(a->o.env, &id)) {
        conv_t *c = find(a, id, NULL);
        if (c && c->waiting &&
            fail_rollout(a, g, c, err, "no answer in %g s (--env-timeout)", env_timeout(a->o.env)))
            return -1;
    }
    return 0;
}

rec_t *ag_take(ag_t *a, uint64_t number) {
    size_t at;
    conv_t *c = find(a, number, &at);
    if (!c) return NULL;
    rec_t *out = c->out;
    c->out = NULL;
    conv_free(c);
    a->convs[at] = a->convs[--a->n];
    return out;
}
