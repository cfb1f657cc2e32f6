// rollout.c — rollout records from finished groups (rollout.h).
#include "sample/rollout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/mparray.h"

typedef struct {
    rec_t **recs;         // (n) the group's records, "reward" nil until known
    int n;
    size_t prompt;        // index in the prompt set
    uint64_t first_req;   // the external verifier's request for recs[0], if asked
    int asked;
} held_t;

struct ro {
    ro_opts o;
    held_t *held;         // FIFO: held[head..tail)
    size_t head, tail, cap;
    uint64_t n_held;
    ro_totals t;
    sbuf text, answer;    // scratch: lossy UTF-8 of a completion and of its answer part
    sbuf scratch;
    sbuf keys, request;   // scratch: a prompt's keys in a verifier's request (vp_prompt_keys), a request line
};

ro_t *ro_new(const ro_opts *o) {
    ro_t *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->o = *o;
    return r;
}

static void held_free(held_t *h) {
    for (int j = 0; j < h->n; j++) rec_free(h->recs[j]);
    free(h->recs);
}

void ro_free(ro_t *r) {
    if (!r) return;
    for (size_t i = r->head; i < r->tail; i++) held_free(&r->held[i]);
    free(r->held);
    sbuf_free(&r->text);
    sbuf_free(&r->answer);
    sbuf_free(&r->scratch);
    sbuf_free(&r->keys);
    sbuf_free(&r->request);
    free(r);
}

uint64_t ro_held(const ro_t *r) { return r->n_held; }
const ro_totals *ro_total(const ro_t *r) { return &r->t; }

enum { NO_REWARD, REWARD, REWARD_LATER };

// Appends a msgpack unsigned integer (below 2^32).
static void put_u32(sbuf *out, uint32_t v) {
    uint8_t b[5];
    if (v < 128) b[0] = (uint8_t)v, sbuf_put(out, b, 1);
    else if (v < 256) b[0] = 0xcc, b[1] = (uint8_t)v, sbuf_put(out, b, 2);
    else if (v < 65536) b[0] = 0xcd, b[1] = (uint8_t)(v >> 8), b[2] = (uint8_t)v, sbuf_put(out, b, 3);
    else {
        b[0] = 0xce, b[1] = (uint8_t)(v >> 24), b[2] = (uint8_t)(v >> 16), b[3] = (uint8_t)(v >> 8), b[4] = (uint8_t)v;
        sbuf_put(out, b, 5);
    }
}

// "turns": [[start, end], ...] from the flat pairs of t.
static void set_turns(rec_t *rec, const u32_vec *t, sbuf *buf) {
    size_t n = t->n / 2;
    buf->len = 0;
    mpa_put_header(buf, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        sbuf_putc(buf, 0x92);
        put_u32(buf, t->v[2 * i]);
        put_u32(buf, t->v[2 * i + 1]);
    }
    rec_set_raw(rec, "turns", 5, buf->data, buf->len);
}

// The record of sample j of group g; its "reward" is `reward`, or nil until
// the external verifier answers, or absent.
static rec_t *make_record(ro_t *r, const gen_group *g, int j, const prompt *p, int has_reward, double reward,
                          const rec_t *extra) {
    const gen_sample *s = &g->samples[j];
    rec_t *rec = rec_new();
    rec_set_uint(rec, "id", g->group * (uint64_t)g->n + (uint64_t)j);
    rec_set_uint(rec, "group", g->group);
    rec_set_str(rec, "prompt", p->text, p->text_len);
    if (p->answer) rec_set_str(rec, "answer", p->answer, p->answer_len);
    rec_set_u32s(rec, "prompt_ids", p->ids, p->n_ids);
    rec_set_u32s(rec, "ids", s->ids.v, s->ids.n);
    r->text.len = 0;
    utf8_lossy(s->text.data, s->text.len, &r->text);
    rec_set_str(rec, "text", (const char *)r->text.data, r->text.len);
    rec_set_f32s(rec, "logp", s->logp.v, s->logp.n);
    rec_set_u32s(rec, "ver", s->ver.v, s->ver.n);
    if (s->turns.n) {   // multi-turn: the model's tokens, and where its turns are
        rec_set_u8s(rec, "mask", s->mask.v, s->mask.n);
        set_turns(rec, &s->turns, &r->scratch);
    }
    rec_set_cstr(rec, "finish", s->stopped ? "stop" : "length");
    if (s->stopped && s->stop_reason) rec_set_str(rec, "stop_reason", s->stop_reason, s->stop_reason_len);
    if (has_reward == REWARD) rec_set_f64(rec, "reward", reward);
    if (has_reward == REWARD_LATER) rec_set_nil(rec, "reward");
    rec_set_f64(rec, "temperature", r->o.sp.temperature);
    rec_set_f64(rec, "top_p", r->o.sp.top_p);
    rec_set_uint(rec, "top_k", r->o.sp.top_k);
    rec_set_cstr(rec, "dtype", r->o.dtype);
    for (size_t k = 0; k < rec_nfields(p->rec); k++) {   // the prompt's other keys
        size_t kl, vl;
        const char *key = rec_key(p->rec, k, &kl);
        const uint8_t *val = rec_value(p->rec, k, &vl);
        if ((kl == 6 && !memcmp(key, "prompt", 6)) || (kl == 6 && !memcmp(key, "answer", 6)) ||
            (kl == 10 && !memcmp(key, "prompt_ids", 10)))
            continue;
        rec_set_raw(rec, key, kl, val, vl);
    }
    for (size_t k = 0; extra && k < rec_nfields(extra); k++) {
        size_t kl, vl;
        const char *key = rec_key(extra, k, &kl);
        const uint8_t *val = rec_value(extra, k, &vl);
        rec_set_raw(rec, key, kl, val, vl);
    }
    return rec;
}

void ro_add(ro_t *r, const gen_group *g, rec_t *const *extra) {
    const prompt *p = &r->o.prompts->v[g->prompt];
    if (r->tail == r->cap && r->head) {
        memmove(r->held, r->held + r->head, (r->tail - r->head) * sizeof *r->held);
        r->tail -= r->head;
        r->head = 0;
    }
    GROW(r->held, r->cap, r->tail + 1, 16);
    held_t *h = &r->held[r->tail++];
    memset(h, 0, sizeof *h);
    h->n = g->n;
    h->prompt = g->prompt;
    h->recs = xmalloc((size_t)g->n * sizeof *h->recs);
    h->asked = r->o.cmd != NULL;
    if (h->asked) h->first_req = vs_sent(r->o.cmd);
    r->keys.len = 0;
    rl_err e;
    if (h->asked && vp_prompt_keys(p->rec, &r->keys, &e)) {   // the caller checked every prompt's keys
        fprintf(stderr, "ro_add: %s: %s\n", p->where, e.msg);
        abort();
    }
    for (int j = 0; j < g->n; j++) {
        const gen_sample *s = &g->samples[j];
        r->answer.len = 0;   // what a verifier judges: the text before the stop string
        utf8_lossy(s->text.data, s->answer_len, &r->answer);
        const char *ans = r->answer.len ? (const char *)r->answer.data : "";
        const rec_t *x = extra ? extra[j] : NULL;
        if (x && rec_has(x, "reward")) {
            h->recs[j] = make_record(r, g, j, p, NO_REWARD, 0, x);
        } else if (h->asked) {
            h->recs[j] = make_record(r, g, j, p, REWARD_LATER, 0, x);
            vp_request(&r->request, p->text, p->text_len, ans, r->answer.len, (const char *)r->keys.data, r->keys.len);
            vs_send(r->o.cmd, r->request.data, r->request.len);
        } else if (r->o.builtin && p->answer) {
            double reward = vf_score(r->o.kind, ans, r->answer.len, p->answer, p->answer_len);
            h->recs[j] = make_record(r, g, j, p, REWARD, reward, x);
        } else {
            h->recs[j] = make_record(r, g, j, p, NO_REWARD, 0, x);
        }
    }
    r->n_held += (uint64_t)g->n;
}

// Appends to err which rollout an external verifier failed on.
static int verifier_error(ro_t *r, const rl_err *e, rl_err *err) {
    uint64_t req = vs_error_request(r->o.cmd);
    for (size_t i = r->head; i < r->tail; i++) {
        held_t *h = &r->held[i];
        if (h->asked && req >= h->first_req && req < h->first_req + (uint64_t)h->n) {
            uint64_t id = 0;
            rec_get_uint(h->recs[req - h->first_req], "id", &id);
            return err_set(err, "%s: rollout id %llu, prompt %s", e->msg, (unsigned long long)id,
                           r->o.prompts->v[h->prompt].where);
        }
    }
    return err_set(err, "%s", e->msg);
}

static void count(ro_t *r, const rec_t *rec) {
    size_t n = 0;
    double reward;
    const char *finish;
    size_t fl;
    rec_get_len(rec, "ids", &n);
    r->t.samples++;
    r->t.tokens += n;
    if (rec_get_str(rec, "finish", &finish, &fl) == REC_OK && fl == 4) r->t.stopped++;
    if (rec_get_f64(rec, "reward", &reward) == REC_OK) {
        r->t.rewarded++;
        r->t.positive += reward > 0;
        r->t.reward_sum += reward;
    }
}

// Whether the n records' rewards are all equal: every one has a "reward"
// and each is the same double as the first (==: 0 and -0 are equal, NaN
// equals nothing). A group of one sample is uniform.
static int uniform(rec_t *const *recs, int n) {
    double r0, r;
    if (n < 1 || rec_get_f64(recs[0], "reward", &r0) != REC_OK) return 0;
    for (int j = 1; j < n; j++)
        if (rec_get_f64(recs[j], "reward", &r) != REC_OK || !(r == r0)) return 0;
    return r0 == r0;
}

static void let_go(ro_t *r, held_t *h) {
    r->n_held -= (uint64_t)h->n;
    held_free(h);
    r->head++;
}

int ro_write(ro_t *r, recw_t *w, int block, rl_err *err) {
    rl_err e;
    // After a verifier's error, the groups it answered whole are written first.
    int failed = r->o.cmd && vs_pump(r->o.cmd, 0, &e);
    while (r->head < r->tail) {
        held_t *h = &r->held[r->head];
        if (h->asked) {
            while (vs_answered(r->o.cmd) < h->first_req + (uint64_t)h->n) {
                if (!block || failed) return failed ? verifier_error(r, &e, err) : 0;
                if ((failed = vs_pump(r->o.cmd, 1, &e))) continue;
            }
            for (int j = 0; j < h->n; j++)
                if (vs_apply(r->o.cmd, h->first_req + (uint64_t)j, h->recs[j], &e)) return verifier_error(r, &e, err);
            vs_forget(r->o.cmd, h->first_req + (uint64_t)h->n);
        }
        if (r->o.drop_uniform && uniform(h->recs, h->n)) {   // no advantage: not trained on
            r->t.dropped++;
            r->t.dropped_last++;
            let_go(r, h);
            continue;
        }
        for (int j = 0; j < h->n; j++) {
            if (r->o.drop_uniform) rec_set_uint(h->recs[j], "drawn", r->t.dropped_last + 1);
            if (recw_write(w, h->recs[j], err)) return -1;
            count(r, h->recs[j]);
        }
        if (recw_flush(w, err)) return -1;
        r->t.groups++;
        r->t.dropped_last = 0;
        let_go(r, h);
    }
    return failed ? verifier_error(r, &e, err) : 0;
}

void ro_make_header(rec_t *h, int argc, char **argv, int no_provenance, const char *dir, uint64_t version,
                    const model_t *m, const char *precision, const gen_opts *g, const char *verifier,
                    int drop_uniform) {
    rec_make_header(h, "rollouts", "rl-sample", argc, argv, no_provenance);
    rec_set_uint(h, "seed", g->seed);
    rec_t *sub = rec_new();
    sbuf enc = {0};
    rec_set_cstr(sub, "path", dir);
    rec_set_uint(sub, "version", version);
    rec_set_cstr(sub, "dtype", precision);
    // Only with rl-sample --head f32: a stream without the key (all before
    // it) computed the output layer at dtype.
    if (model_options(m)->head_f32) rec_set_cstr(sub, "head_dtype", "f32");
    rec_set_cstr(sub, "device", model_device(m));
    rec_set_uint(sub, "params", model_nparams(m));
    // generation_config.json's sampling defaults, shown and never applied:
    // the options above decide how to sample.
    char gen[256];
    cfg_generation_str(model_cfg(m), gen, sizeof gen);
    if (gen[0]) rec_set_cstr(sub, "generation_config", gen);
    rec_encode(sub, &enc);
    rec_set_raw(h, "model", 5, enc.data, enc.len);
    rec_clear(sub);
    enc.len = 0;
    rec_set_uint(sub, "group", (uint64_t)g->group);
    rec_set_f64(sub, "temperature", g->sp.temperature);
    rec_set_f64(sub, "top_p", g->sp.top_p);
    rec_set_uint(sub, "top_k", g->sp.top_k);
    rec_set_uint(sub, "max_new_tokens", g->max_new);
    rec_set_strs(sub, "stop", (char *const *)g->stop, g->n_stop);
    rec_set_uint(sub, "slots", (uint64_t)g->slots);
    rec_set_cstr(sub, "verifier", verifier);
    if (drop_uniform) rec_set_bool(sub, "drop_uniform", 1);
    rec_encode(sub, &enc);
    rec_set_raw(h, "sampling", 8, enc.data, enc.len);
    sbuf_free(&enc);
    rec_free(sub);
}
