// prompts.c — reading and tokenizing the prompt set (prompts.h).
#include "sample/prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/source.h"

// Rollout fields that rl-sample sets (doc/design.md §2) or that later tools own: a
// prompt carrying one would have it overwritten or misread downstream.
static const char *const RESERVED[] = {"id",   "group", "ids",          "text",        "logp", "ver",
                                       "finish", "reward", "temperature", "top_p",      "top_k", "dtype",
                                       "logp_learner", "ver_learner", "w", "mask", "adv", "completion",
                                       "stop_reason"};

static void prompt_free(prompt *p) {
    rec_free(p->rec);
    free(p->answer);
    free(p->ids);
    free(p->rendered);
    free(p->where);
}

static int get_answer(prompt *p, const rec_t *r, rl_err *err) {
    const char *a;
    if (rec_get_str(r, "answer", &a, &p->answer_len) == REC_OK) {
        p->answer = xmalloc(p->answer_len + 1);
        memcpy(p->answer, a, p->answer_len);
        p->answer[p->answer_len] = 0;
    } else if (rec_has(r, "answer")) {
        return err_set(err, "\"answer\" is not a string");
    }
    return 0;
}

static int check_length(const prompt *p, const prm_opts *o, rl_err *err);

// A conversation: rendered by the chat template with the generation prompt,
// then tokenized as apply_chat_template(tokenize=True) does.
static int prompt_messages(prompt *p, const rec_t *r, const prm_opts *o, rl_err *err) {
    if (rec_has(r, "prompt") || rec_has(r, "prompt_ids"))
        return err_set(err, "the prompt has \"messages\" and \"%s\": give one of them",
                       rec_has(r, "prompt") ? "prompt" : "prompt_ids");
    if (!o->chat)
        return err_set(err, "\"messages\" need the model's chat template, and the model has none (no "
                       "\"chat_template\" in tokenizer_config.json, no chat_template.jinja)");
    if (get_answer(p, r, err)) return -1;
    size_t n;
    const uint8_t *msgs = rec_value(r, (size_t)rec_find(r, "messages"), &n);
    if (n > o->max_text)
        return err_set(err, "\"messages\" has %zu bytes, more than the %zu that the model's context (%zu tokens) "
                       "could hold: refused before it is rendered", n, o->max_text, o->max_ids + 1);
    sbuf text = {0};
    u32_vec ids = {0};
    int rc = chat_encode(o->chat, msgs, n, 1, &text, &ids, NULL, &p->tok, err);
    p->rendered = (char *)text.data;
    p->text = p->rendered ? p->rendered : "";
    p->text_len = text.len;
    p->ids = ids.v;
    p->n_ids = ids.n;
    if (rc) return -1;
    return check_length(p, o, err);
}

// Fills p from the record r (taken over). 0, or -1 with err (without "where").
static int prompt_from(prompt *p, rec_t *r, const prm_opts *o, rl_err *err) {
    memset(p, 0, sizeof *p);
    p->rec = r;
    for (size_t k = 0; k < sizeof RESERVED / sizeof *RESERVED; k++)
        if (rec_has(r, RESERVED[k]))
            return err_set(err, "the prompt carries \"%s\", a field rl-sample writes itself; rename it", RESERVED[k]);
    if (rec_has(r, "messages")) return prompt_messages(p, r, o, err);
    if (rec_get_str(r, "prompt", &p->text, &p->text_len) != REC_OK)
        return err_set(err, rec_has(r, "prompt") ? "\"prompt\" is not a string" : "no \"prompt\" and no \"messages\"");
    if (get_answer(p, r, err)) return -1;
    if (rec_has(r, "prompt_ids")) {
        u32_vec v = {0};
        if (rec_get_u32s(r, "prompt_ids", &v) != REC_OK) {
            u32_vec_free(&v);
            return err_set(err, "\"prompt_ids\" is not an array of token ids");
        }
        p->ids = v.v;
        p->n_ids = v.n;
        for (size_t t = 0; t < v.n; t++)
            if (v.v[t] >= o->vocab)
                return err_set(err, "prompt_ids[%zu] = %u is outside the vocabulary (%zu tokens)", t, v.v[t], o->vocab);
    } else {
        size_t cap = 0;
        rl_err e;
        if (p->text_len > o->max_text)
            return err_set(err, "the prompt's text has %zu bytes, more than the %zu that the model's context (%zu "
                           "tokens) could hold: refused before it is tokenized", p->text_len, o->max_text, o->max_ids + 1);
        if (tok_encode_ex(o->tok, p->text, p->text_len, 1, &p->ids, &p->n_ids, &cap, &p->tok, &e))
            return err_set(err, "cannot tokenize the prompt: %s", e.msg);
    }
    return check_length(p, o, err);
}

static int check_length(const prompt *p, const prm_opts *o, rl_err *err) {
    if (p->n_ids == 0) return err_set(err, "the prompt has no tokens (its text is empty and the tokenizer adds no bos)");
    if (p->n_ids > o->max_ids)
        return err_set(err, "the prompt has %zu tokens; the model's context (%zu) leaves room for at most %zu",
                       p->n_ids, o->max_ids + 1, o->max_ids);
    return 0;
}

int prm_read(prompt_set *ps, const char *path, const prm_opts *opts, rl_err *err) {
    // A token covers at most its string's bytes of normalized text, and
    // normalizing shrinks text at most 4 times (NFKC: U+1D400 to "A"): a
    // longer text could not fit, and is not tokenized (its memory).
    prm_opts bounded = *opts;
    const prm_opts *o = &bounded;
    if (!bounded.max_text) {
        size_t per = 4 * tok_longest_token(opts->tok);
        bounded.max_text = opts->max_ids > SIZE_MAX / per ? SIZE_MAX : opts->max_ids * per;
    }
    src_t *s = src_open(path, SRC_DETECT, &rec_default_limits, err);
    if (!s) return -1;
    const char *name = strcmp(path, "-") ? path : "(stdin)";
    rec_t *r = rec_new();
    int rc = 0;
    for (;;) {
        recr_event ev = src_next(s, r);
        if (ev == RECR_END) break;
        if (ev == RECR_ERROR) {
            rc = err_set(err, "%s", src_error(s));
            break;
        }
        char where[1200];
        src_where(s, where, sizeof where);
        if (ev == RECR_HEADER) {
            const char *kind = "";
            size_t n = 0;
            if (rec_get_str(r, "kind", &kind, &n) != REC_OK || n != 7 || memcmp(kind, "prompts", 7)) {
                rc = err_set(err, "member of kind \"%.*s\": rl-sample reads prompts: %s", (int)n, kind, name);
                break;
            }
            continue;
        }
        if (ev != RECR_RECORD) continue;
        if (ps->n == ps->cap) {
            ps->cap = ps->cap ? 2 * ps->cap : 64;
            ps->v = xrealloc(ps->v, ps->cap * sizeof *ps->v);
        }
        prompt *p = &ps->v[ps->n];
        rl_err e;
        if (prompt_from(p, r, o, &e)) {
            prompt_free(p);
            r = NULL;
            rc = err_set(err, "%s: %s", e.msg, where);
            break;
        }
        p->where = xstrdup(where);
        if (p->n_ids > ps->max_ids) ps->max_ids = p->n_ids;
        ps->n++;
        r = rec_new();
    }
    rec_free(r);
    src_close(s);
    return rc;
}

void prm_free(prompt_set *ps) {
    for (size_t i = 0; i < ps->n; i++) prompt_free(&ps->v[i]);
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

// ---- the order of prompts --------------------------------------------------

static void shuffle(prm_feed *f) {   // Fisher-Yates
    for (size_t i = 0; i < f->n; i++) f->order[i] = i;
    for (size_t i = f->n; i > 1; i--) {
        size_t j = (size_t)(rng_uniform(&f->rng) * (double)i);
        size_t t = f->order[i - 1];
        f->order[i - 1] = f->order[j];
        f->order[j] = t;
    }
}

void prm_feed_init(prm_feed *f, size_t n, uint64_t seed, uint64_t epochs, uint64_t max_started) {
    memset(f, 0, sizeof *f);
    f->n = n;
    f->order = xmalloc((n ? n : 1) * sizeof *f->order);
    f->epochs = epochs;
    f->max_started = max_started;
    rng_seed(&f->rng, seed);
    shuffle(f);
}

long prm_feed_next(prm_feed *f) {
    if (!f->n || (f->max_started && f->started >= f->max_started)) return -1;
    if (f->next == f->n) {
        if (f->epochs && f->epoch + 1 >= f->epochs) return -1;
        f->epoch++;
        f->next = 0;
        shuffle(f);
    }
    f->started++;
    return (long)f->order[f->next++];
}

void prm_feed_free(prm_feed *f) {
    free(f->order);
    f->order = NULL;
}
