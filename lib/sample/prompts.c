// prompts.c — reading and tokenizing the prompt set (prompts.h).
#include "sample/prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/rollout.h"
#include "records/source.h"

// Rollout fields that rl-sample sets (doc/design.md §2) or that later tools own: a
// prompt carrying one would have it overwritten or misread downstream.
static const unsigned RESERVED = RO_ID | RO_GROUP | RO_IDS | RO_TEXT | RO_LOGP | RO_VER | RO_FINISH | RO_REWARD |
                                 RO_TEMPERATURE | RO_TOP_P | RO_TOP_K | RO_DTYPE | RO_LOGP_LEARNER | RO_VER_LEARNER |
                                 RO_W | RO_MASK | RO_ADV | RO_COMPLETION | RO_STOP_REASON | RO_LOGP_REF | RO_DRAWN |
                                 RO_REWARDS | RO_PRED;

static void prompt_free(prompt *p) {
    rec_free(p->rec);
    free(p->answer);
    free(p->ids);
    free(p->rendered);
    free(p->where);
}

static void get_answer(prompt *p, const rollout_view *v) {
    if (!(v->has & RO_ANSWER)) return;
    p->answer_len = v->answer_len;
    p->answer = xmalloc(p->answer_len + 1);
    memcpy(p->answer, v->answer, p->answer_len);
    p->answer[p->answer_len] = 0;
}

static int check_length(const prompt *p, const prm_opts *o, rl_err *err);

// A conversation: rendered by the chat template with the generation prompt,
// then tokenized as apply_chat_template(tokenize=True) does.
static int prompt_messages(prompt *p, const rollout_view *v, const prm_opts *o, rl_err *err) {
    if (v->has & (RO_PROMPT | RO_PROMPT_IDS))
        return err_set(err, "the prompt has \"messages\" and \"%s\": give one of them",
                       v->has & RO_PROMPT ? "prompt" : "prompt_ids");
    if (!o->chat)
        return err_set(err, "\"messages\" need the model's chat template, and the model has none (no "
                       "\"chat_template\" in tokenizer_config.json, no chat_template.jinja)");
    get_answer(p, v);
    size_t n = v->messages_len;
    if (n > o->max_text)
        return err_set(err, "\"messages\" has %zu bytes, more than the %zu that the model's context (%zu tokens) "
                       "could hold: refused before it is rendered", n, o->max_text, o->max_ids + 1);
    sbuf text = {0};
    u32_vec ids = {0};
    int rc = chat_encode(o->chat, v->messages, n, p->rec, 1, 0, &text, &ids, NULL, &p->tok, err);
    p->rendered = (char *)text.data;
    p->text = p->rendered ? p->rendered : "";
    p->text_len = text.len;
    p->ids = ids.v;
    p->n_ids = ids.n;
    if (rc) return -1;
    return check_length(p, o, err);
}

// Fills p from the record r (taken over), read into v. 0, or -1 with err (without "where").
static int prompt_from(prompt *p, rec_t *r, rollout_view *v, const prm_opts *o, rl_err *err) {
    memset(p, 0, sizeof *p);
    p->rec = r;
    if (rollout_read(v, r, err)) return -1;
    if (v->has & RESERVED) {
        unsigned first = v->has & RESERVED & -(v->has & RESERVED);
        return err_set(err, "the prompt carries \"%s\", a field rl-sample writes itself; rename it",
                       rollout_field_name(first));
    }
    if (v->has & RO_MESSAGES) return prompt_messages(p, v, o, err);
    if (!(v->has & RO_PROMPT)) return err_set(err, "no \"prompt\" and no \"messages\"");
    p->text = v->prompt;
    p->text_len = v->prompt_len;
    get_answer(p, v);
    if (v->has & RO_PROMPT_IDS) {
        p->n_ids = v->prompt_ids.n;
        p->ids = xmalloc(p->n_ids ? p->n_ids * sizeof *p->ids : 1);
        if (p->n_ids) memcpy(p->ids, v->prompt_ids.v, p->n_ids * sizeof *p->ids);
        if (rollout_vocab("prompt_ids", p->ids, p->n_ids, o->vocab, err)) return -1;
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
    rollout_view v = {0};
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
        GROW(ps->v, ps->cap, ps->n + 1, 64);
        prompt *p = &ps->v[ps->n];
        rl_err e;
        if (prompt_from(p, r, &v, o, &e)) {
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
    rollout_view_free(&v);
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
