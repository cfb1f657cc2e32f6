// learner.c — batches of whole groups, advantages, losses and the optimizer
// step of rl-learn (learner.h).
#include "learn/learner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "learn/zero.h"
#include "records/drift.h"
#include "records/fields.h"
#include "records/json.h"
#include "records/mismatch.h"
#include "records/rollout.h"

// One record, as training needs it. Arrays of n completion tokens.
typedef struct {
    uint32_t *prompt, *ids;
    size_t np, n;
    float temperature;
    float *w, *mask;           // NULL when the record has none (1 everywhere)
    float *lp_learner, *lp;    // logp_learner (π_old), logp (the sampler's), or NULL
    float *lp_ref;             // logp_ref (a frozen reference model's), or NULL
    uint32_t *ver;             // or NULL
    double reward, adv;
    double shaping;            // added to the reward before the advantages (--overlong, --kl-in reward)
    int has_reward, has_adv, has_group;
    uint64_t group;
    uint64_t drawn;            // groups the sampler drew for this one's (rl-sample --drop-uniform); 0: not said
    // during a batch
    double a;                  // the advantage used
    float *pi_old;             // ratio losses: log π_old per token (logp_learner, or the first epoch's)
    double log_s;              // gspo: log of the sequence's ratio at θ, known before its backward
    float *logp, *ent;         // the learner's, from the last forward
} lseq;

struct learner {
    model_t *m;
    lrn_opts o;
    lseq *s;                   // held records, in input order
    size_t n, cap;
    size_t complete;           // s[0 .. complete) are whole groups
    uint64_t group_size;       // records per group in this member (0: unknown)
    uint64_t run;              // records of the last group held
    int ended;
    uint64_t consumed;
    size_t bn;                 // records in the batch being trained (0: none formed yet)
    size_t dropped;            // texts whose tokenizing dropped characters with no token
    char dropped_first[512];   // what the first of them dropped, and where
    int epoch;                 // epochs done on it (ratio losses)
    rollout_view view;         // the record being added
    size_t max_text;           // "messages" of more bytes could not fit the context (0: not computed yet)
    drift_t drift;             // --tis: each batch's k3, for the warning of a growing mismatch
    int drift_due;             // its warning pending
    char drift_warning[1024];
};

// ---- Options --------------------------------------------------------------------

static const char *const LOSS_NAMES[] = {[LOSS_PG] = "pg", [LOSS_PPO] = "ppo", [LOSS_CISPO] = "cispo",
                                          [LOSS_GSPO] = "gspo", [LOSS_SFT] = "sft"};

static const char *const ADV_NAMES[] = {[ADV_GRPO] = "grpo", [ADV_DRGRPO] = "drgrpo", [ADV_RLOO] = "rloo"};
static const char *const KL_NAMES[] = {[KL_K1] = "k1", [KL_K2] = "k2", [KL_K3] = "k3"};
static const char *const KL_IN_NAMES[] = {"loss", "reward"};   // kl_in_reward 0, 1
#define NAMES(a) a, sizeof a / sizeof *a

// The index of s among names[0 .. n), or -1.
static int name_index(const char *s, const char *const *names, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(s, names[k])) return (int)k;
    return -1;
}

int lrn_parse_loss(const char *s, loss_kind *out, rl_err *err) {
    int k = name_index(s, NAMES(LOSS_NAMES));
    if (k < 0) return err_set(err, "--loss '%s': use pg, ppo, cispo, gspo or sft", s);
    *out = (loss_kind)k;
    return 0;
}

int lrn_ratio_loss(loss_kind k) { return k == LOSS_PPO || k == LOSS_CISPO || k == LOSS_GSPO; }

void lrn_clip_range(loss_kind k, double eps, double eps_low, double eps_high, double *lo, double *hi) {
    double dlo = 0.2, dhi = 0.2;   // PPO's usual ε
    if (k == LOSS_CISPO) dlo = 1, dhi = 4;
    else if (k == LOSS_GSPO) dlo = 3e-4, dhi = 4e-4;
    *lo = !isnan(eps_low) ? eps_low : !isnan(eps) ? eps : dlo;
    *hi = !isnan(eps_high) ? eps_high : !isnan(eps) ? eps : dhi;
}

int lrn_parse_adv(const char *s, adv_kind *out, rl_err *err) {
    int k = name_index(s, NAMES(ADV_NAMES));
    if (k < 0) return err_set(err, "--adv '%s': use grpo, drgrpo or rloo", s);
    *out = (adv_kind)k;
    return 0;
}

int lrn_parse_norm(const char *s, norm_kind *out, double *n, rl_err *err) {
    if (!strcmp(s, "seqs")) *out = NORM_SEQS;
    else if (!strcmp(s, "tokens")) *out = NORM_TOKENS;
    else if (!strncmp(s, "const:", 6)) {
        char *end;
        *n = strtod(s + 6, &end);
        if (end == s + 6 || *end || !(*n > 0) || !isfinite(*n))
            return err_set(err, "--norm '%s': const:N needs a positive number N", s);
        *out = NORM_CONST;
    } else return err_set(err, "--norm '%s': use seqs, tokens or const:N", s);
    return 0;
}

int lrn_parse_kl_est(const char *s, kl_est *out, rl_err *err) {
    int k = name_index(s, NAMES(KL_NAMES));
    if (k < 0) return err_set(err, "--kl-est '%s': use k1, k2 or k3", s);
    *out = (kl_est)k;
    return 0;
}

int lrn_parse_kl_in(const char *s, int *in_reward, rl_err *err) {
    int k = name_index(s, NAMES(KL_IN_NAMES));
    if (k < 0) return err_set(err, "--kl-in '%s': use loss or reward", s);
    *in_reward = k;
    return 0;
}

int lrn_parse_overlong(const char *s, double *l_max, double *l_cache, rl_err *err) {
    char *end, *end2;
    *l_max = strtod(s, &end);
    if (end == s || *end != ',') return err_set(err, "--overlong '%s': expected L_MAX,L_CACHE", s);
    *l_cache = strtod(end + 1, &end2);
    if (end2 == end + 1 || *end2 || !isfinite(*l_max) || !isfinite(*l_cache))
        return err_set(err, "--overlong '%s': expected L_MAX,L_CACHE", s);
    if (!(*l_cache > 0) || !(*l_cache <= *l_max))
        return err_set(err, "--overlong '%s': needs 0 < L_CACHE <= L_MAX", s);
    return 0;
}

const char *lrn_loss_name(loss_kind k) { return LOSS_NAMES[k]; }
const char *lrn_adv_name(adv_kind k) { return ADV_NAMES[k]; }
const char *lrn_kl_name(kl_est k) { return KL_NAMES[k]; }

// ---- Holding records ----------------------------------------------------------------

learner_t *lrn_new(model_t *m, const lrn_opts *o) {
    learner_t *l = xmalloc(sizeof *l);
    memset(l, 0, sizeof *l);
    l->m = m;
    l->o = *o;
    if (l->o.epochs < 1) l->o.epochs = 1;
    if (l->o.micro < 1) l->o.micro = 1;
    if (!l->o.micro_tokens) l->o.micro_tokens = LRN_MICRO_TOKENS;
    drift_init(&l->drift);
    return l;
}

static void seq_free(lseq *s) {
    void *p[] = {s->prompt, s->ids, s->w, s->mask, s->lp_learner, s->lp, s->lp_ref, s->ver, s->pi_old, s->logp, s->ent};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

void lrn_free(learner_t *l) {
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) seq_free(&l->s[i]);
    free(l->s);
    rollout_view_free(&l->view);
    free(l);
}

// A copy of n values of size sz (at least one byte: present but empty is not NULL).
static void *copy(const void *p, size_t n, size_t sz) {
    void *q = xmalloc(n ? n * sz : 1);
    if (n) memcpy(q, p, n * sz);
    return q;
}

// Token ids of the completion (is_prompt 0: "ids", or the "completion" text
// tokenized and followed by the first of the config's eos ids, if any) or of
// the prompt (1: "prompt_ids", or the "prompt" text with the special tokens
// its tokenizer adds, bos or none: tok_encode_special), each below the
// model's vocabulary. Neither there: 0 with *out NULL.
static int get_ids(learner_t *l, const rollout_view *v, int is_prompt, uint32_t **out, size_t *n, tok_report *rep,
                   rl_err *err) {
    const model_config *c = model_cfg(l->m);
    const char *key = is_prompt ? "prompt_ids" : "ids", *text_key = is_prompt ? "prompt" : "completion";
    *out = NULL;
    *n = 0;
    if (v->has & (is_prompt ? RO_PROMPT_IDS : RO_IDS)) {
        const u32_vec *ids = is_prompt ? &v->prompt_ids : &v->ids;
        *n = ids->n;
        *out = copy(ids->v, ids->n, sizeof **out);
    } else if (v->has & (is_prompt ? RO_PROMPT : RO_COMPLETION)) {
        size_t cap = 0;
        if (!l->o.tok)
            return err_set(err, "no \"%s\", and \"%s\" is text: the model directory has no tokenizer.json to encode it",
                           key, text_key);
        rl_err e;
        if (tok_encode_ex(l->o.tok, is_prompt ? v->prompt : v->completion, is_prompt ? v->prompt_len : v->completion_len,
                          is_prompt, out, n, &cap, rep, &e))
            return err_set(err, "cannot tokenize \"%s\": %s", text_key, e.msg);
        if (!is_prompt && c->eos_id >= 0) {
            *out = xrealloc(*out, (*n + 1) * sizeof **out);
            (*out)[(*n)++] = (uint32_t)c->eos_id;
        }
    } else return 0;
    return rollout_vocab(key, *out, *n, (uint64_t)c->vocab, err);
}

// A conversation as an example ("messages" with no "ids" and no "completion"):
// rendered and tokenized by the chat template; the prompt is what precedes
// the first token of an assistant's turn, the completion the rest, masked
// to the assistant's turns (the template around them gets no loss).
static int conversation(learner_t *l, const rec_t *r, const rollout_view *v, lseq *s, tok_report *rep, rl_err *err) {
    if (l->o.loss != LOSS_SFT)
        return err_set(err, "\"messages\" and no \"ids\": a conversation is an example for --loss sft, and the "
                       "%s loss needs sampled completions", lrn_loss_name(l->o.loss));
    if (v->has & (RO_PROMPT | RO_PROMPT_IDS))
        return err_set(err, "the example has \"messages\" and \"%s\": give one of them",
                       v->has & RO_PROMPT ? "prompt" : "prompt_ids");
    if (!l->o.chat)
        return err_set(err, "\"messages\" need the model's chat template, and the model has none (no "
                       "\"chat_template\" in tokenizer_config.json, no chat_template.jinja)");
    // As rl-sample bounds its prompts: a token covers at most its string's
    // bytes of normalized text, and normalizing shrinks text at most 4 times.
    const char *key;
    size_t max_ids = (size_t)cfg_max_seq(model_cfg(l->m), &key) + 1;   // the last token is only predicted
    if (!l->max_text) {
        size_t per = 4 * tok_longest_token(l->o.tok);
        l->max_text = max_ids > SIZE_MAX / per ? SIZE_MAX : max_ids * per;
    }
    if (v->messages_len > l->max_text)
        return err_set(err, "\"messages\" has %zu bytes, more than the %zu that %zu tokens (%s + 1) could hold: "
                       "refused before it is rendered", v->messages_len, l->max_text, max_ids, key);
    u32_vec ids = {0};
    u8_vec mask = {0};
    int rc = -1;
    if (chat_encode(l->o.chat, v->messages, v->messages_len, r, 0, max_ids, NULL, &ids, &mask, rep, err)) goto out;
    size_t first = 0;
    while (first < ids.n && !mask.v[first]) first++;
    if (first == ids.n) {
        err_set(err, "\"messages\" has no assistant turn to learn from");
        goto out;
    }
    if (first == 0) {
        err_set(err, "\"messages\": the assistant's turn starts the text: nothing predicts its first token");
        goto out;
    }
    s->np = first;
    s->prompt = copy(ids.v, first, sizeof *s->prompt);
    s->n = ids.n - first;
    s->ids = copy(ids.v + first, s->n, sizeof *s->ids);
    s->mask = xmalloc(s->n * sizeof *s->mask);
    for (size_t t = 0; t < s->n; t++) s->mask[t] = mask.v[first + t];
    rc = 0;
out:
    u32_vec_free(&ids);
    u8_vec_free(&mask);
    return rc;
}

// The per-token arrays of v (rollout_read made their lengths agree) have
// one element per token of a completion of n tokens that text made.
static int per_token_fits(const rollout_view *v, size_t n, rl_err *err) {
    static const unsigned PER_TOKEN[] = {RO_LOGP, RO_VER, RO_LOGP_LEARNER, RO_LOGP_REF, RO_W, RO_MASK};
    for (size_t i = 0; i < sizeof PER_TOKEN / sizeof *PER_TOKEN; i++)
        if ((v->has & PER_TOKEN[i]) && v->n != n)
            return err_set(err, "field \"%s\" has %zu elements but the completion's text has %zu tokens (one per "
                           "completion token)", rollout_field_name(PER_TOKEN[i]), v->n, n);
    return 0;
}

// Σ mask over the completion tokens of s (its length without a mask).
static double mask_sum(const lseq *s) {
    double m = 0;
    for (size_t t = 0; t < s->n; t++) m += s->mask ? s->mask[t] : 1;
    return m;
}

// What the options add to the reward of s before the advantages, from its
// own mask: DAPO's overlong punishment of its model tokens, and
// −B·Σ mask·(logp_s − logp_ref) with --kl-in reward.
static int reward_shaping(const learner_t *l, lseq *s, rl_err *err) {
    const lrn_opts *o = &l->o;
    s->shaping = 0;
    if (o->overlong_cache > 0) s->shaping += obj_overlong(mask_sum(s), o->overlong_max, o->overlong_cache);
    if (o->kl_coef > 0 && o->kl_in_reward) {
        const float *lp_s = s->lp_learner ? s->lp_learner : s->lp;   // the policy scored as the current one
        if (!lp_s)
            return err_set(err, "no \"logp_learner\" and no \"logp\": --kl-in reward takes the KL of the policy "
                           "that sampled or scored the completion to logp_ref");
        double kl = 0;
        for (size_t t = 0; t < s->n; t++)
            if (!s->mask || s->mask[t] != 0) kl += obj_kl(KL_K1, lp_s[t], s->lp_ref[t]).v;   // (mask is 0 or 1)
        s->shaping -= o->kl_coef * kl;
    }
    return 0;
}

static int parse_seq(learner_t *l, const rec_t *r, lseq *s, tok_report rep[2], rl_err *err) {
    const model_config *c = model_cfg(l->m);
    rollout_view *v = &l->view;
    if (rollout_read(v, r, err)) return -1;
    int sft = l->o.loss == LOSS_SFT;
    int chat = (v->has & RO_MESSAGES) && !(v->has & (RO_IDS | RO_COMPLETION));
    if (chat) {
        if (v->has & RO_MASK) return err_set(err, "the example has \"messages\" and \"mask\": the chat template makes its mask");
        if (conversation(l, r, v, s, &rep[0], err)) return -1;
    } else {
        if (get_ids(l, v, 0, &s->ids, &s->n, &rep[0], err)) return -1;
        if (!s->ids)
            return err_set(err, "no \"ids\" (the completion's token ids), no \"completion\" text and no \"messages\"");
        if (get_ids(l, v, 1, &s->prompt, &s->np, &rep[1], err)) return -1;
        if (!s->prompt) return err_set(err, "no \"prompt_ids\" and no \"prompt\"");
        if (s->np == 0) return err_set(err, "empty prompt: nothing predicts the first completion token");
    }
    if (per_token_fits(v, s->n, err)) return -1;
    const char *key;
    int max_seq = cfg_max_seq(c, &key);
    if (s->np + s->n - 1 > (size_t)max_seq)
        return err_set(err, "%zu prompt and %zu completion tokens exceed %s %d", s->np, s->n, key, max_seq);
    if (rollout_finite(RO_TEMPERATURE, v->temperature, err)) return -1;
    if (!(v->temperature > 0))
        return err_set(err, "field \"temperature\" is %g: the learner scores at temperature > 0", v->temperature);
    s->temperature = (float)v->temperature;
    s->has_reward = !!(v->has & RO_REWARD);
    s->has_adv = !!(v->has & RO_ADV);
    s->reward = v->reward;
    s->adv = v->adv;
    if ((s->has_reward && rollout_finite(RO_REWARD, s->reward, err)) || (s->has_adv && rollout_finite(RO_ADV, s->adv, err)))
        return -1;
    if (!sft && !s->has_reward && !s->has_adv)
        return err_set(err, "no \"reward\" and no \"adv\": the %s loss needs one", lrn_loss_name(l->o.loss));
    s->has_group = !!(v->has & RO_GROUP);
    s->group = v->group;
    s->drawn = v->drawn;
    // logp_learner is π_old here: a learner probability of 0 (-inf) has no ratio
    for (size_t t = 0; t < v->logp_learner.n; t++)
        if (rollout_finite(RO_LOGP_LEARNER, v->logp_learner.v[t], err)) return -1;
    if (v->has & RO_W) s->w = copy(v->w.v, s->n, sizeof *s->w);
    if (v->has & RO_LOGP_LEARNER) s->lp_learner = copy(v->logp_learner.v, s->n, sizeof *s->lp_learner);
    if (v->has & RO_LOGP) s->lp = copy(v->logp.v, s->n, sizeof *s->lp);
    if (l->o.tis > 0 && (s->w || s->lp_learner))
        return err_set(err, "\"%s\" is rl-ratio's: with --tis the learner weighs the tokens itself (leave out "
                            "one of the two)", s->w ? "w" : "logp_learner");
    if (l->o.tis > 0 && !s->lp)
        return err_set(err, "no \"logp\" (the sampler's log-probabilities): --tis weighs the tokens by them");
    if (!chat && (v->has & RO_MASK)) {
        s->mask = xmalloc(s->n * sizeof(float));
        for (size_t i = 0; i < s->n; i++) s->mask[i] = v->mask.v[i];
    }
    if (v->has & RO_VER) s->ver = copy(v->ver.v, s->n, sizeof *s->ver);
    if (v->has & RO_LOGP_REF) s->lp_ref = copy(v->logp_ref.v, s->n, sizeof *s->lp_ref);
    if (l->o.kl_coef > 0 && !s->lp_ref)
        return err_set(err, "no \"logp_ref\" (the reference model's log-probabilities, rl-ratio --as logp_ref): "
                       "--kl-coef needs them");
    if (reward_shaping(l, s, err)) return -1;
    if (l->o.mask_truncated && v->finish_len == 6 && !memcmp(v->finish, "length", 6)) {
        if (!s->mask) s->mask = xmalloc(s->n ? s->n * sizeof *s->mask : 1);
        for (size_t t = 0; t < s->n; t++) s->mask[t] = 0;
    }
    return 0;
}

size_t lrn_dropped(const learner_t *l, const char **first) {
    if (first) *first = l->dropped_first;
    return l->dropped;
}

int lrn_add(learner_t *l, const rec_t *r, const char *where, rl_err *err) {
    lseq s;
    memset(&s, 0, sizeof s);
    rl_err e;
    tok_report rep[2] = {{0}, {0}};
    if (parse_seq(l, r, &s, rep, &e) < 0) {
        seq_free(&s);
        return err_set(err, "%s: %s", e.msg, where);
    }
    for (int k = 0; k < 2; k++)
        if (rep[k].dropped && !l->dropped++) {
            char what[256];
            tok_report_text(&rep[k], what, sizeof what);
            snprintf(l->dropped_first, sizeof l->dropped_first, "\"%s\": %s: %s", k ? "prompt" : "completion", what,
                     where);
        }
    const lseq *p = l->n > l->complete ? &l->s[l->n - 1] : NULL;
    if (p && p->has_group && s.has_group && p->group == s.group) {
        if (s.drawn != p->drawn) {   // one count per group, the same on each of its records
            seq_free(&s);
            return err_set(err, "field \"drawn\" is %llu but %llu in the record before, of the same group %llu: %s",
                           (unsigned long long)s.drawn, (unsigned long long)p->drawn, (unsigned long long)s.group,
                           where);
        }
        l->run++;
    } else {   // a record outside the last one's group completes that group
        l->complete = l->n;
        l->run = 1;
    }
    GROW(l->s, l->cap, l->n + 1, 64);
    l->s[l->n++] = s;
    if (!s.has_group || (l->group_size && l->run >= l->group_size)) l->complete = l->n;
    return 0;
}

void lrn_end(learner_t *l) {
    l->ended = 1;
    l->complete = l->n;
}

void lrn_member(learner_t *l, const rec_t *header) {
    l->complete = l->n;
    fld_group_size(header, &l->group_size);
}

// Records in the next batch: the fewest whole groups holding >= batch
// records, or all complete ones at the end with keep_last; 0 if none.
static size_t batch_size(const learner_t *l, int keep_last) {
    size_t i = 0;
    while (i < l->complete) {
        size_t j = i + 1;
        while (j < l->complete && l->s[j].has_group && l->s[j - 1].has_group && l->s[j].group == l->s[j - 1].group) j++;
        i = j;
        if (i >= l->o.batch) return i;
    }
    return keep_last && l->ended ? l->complete : 0;
}

int lrn_ready(const learner_t *l, int keep_last) { return l->bn > 0 || batch_size(l, keep_last) > 0; }
uint64_t lrn_consumed(const learner_t *l) { return l->consumed; }
size_t lrn_held(const learner_t *l) { return l->n; }

// The advantage of every record of the batch; the number of groups, and in
// *drawn the groups the sampler drew for them (a group's "drawn", 1 for one
// without) and in *has_drawn whether any said.
static uint64_t batch_advantages(learner_t *l, uint64_t *drawn, int *has_drawn) {
    uint64_t groups = 0;
    *drawn = 0;
    *has_drawn = 0;
    double *r = xmalloc(l->bn * sizeof *r), *a = xmalloc(l->bn * sizeof *a);
    for (size_t i = 0; i < l->bn;) {
        size_t j = i + 1;
        while (j < l->bn && l->s[j].has_group && l->s[i].has_group && l->s[j].group == l->s[i].group) j++;
        for (size_t k = i; k < j; k++) r[k - i] = l->s[k].reward + l->s[k].shaping;
        int computable = 1;
        for (size_t k = i; k < j; k++) computable &= l->s[k].has_reward;
        if (computable && l->o.loss != LOSS_SFT) obj_advantages(l->o.adv, r, j - i, a);
        else
            for (size_t k = i; k < j; k++) a[k - i] = 0;
        for (size_t k = i; k < j; k++) l->s[k].a = obj_advantage(l->s[k].has_adv, l->s[k].adv, a[k - i]);
        groups++;
        *drawn += l->s[i].drawn ? l->s[i].drawn : 1;
        *has_drawn |= l->s[i].drawn > 0;
        i = j;
    }
    free(r);
    free(a);
    return groups;
}

static void release_batch(learner_t *l) {
    for (size_t i = 0; i < l->bn; i++) seq_free(&l->s[i]);
    memmove(l->s, l->s + l->bn, (l->n - l->bn) * sizeof *l->s);
    l->n -= l->bn;
    l->complete -= l->bn;
    l->consumed += l->bn;
    l->bn = 0;
    l->epoch = 0;
}

// ---- The loss -------------------------------------------------------------------------

// The callback of model_backward over one micro-batch: token r of the
// micro-batch is token j of sequence mb[k], walked in order.
typedef struct {
    const learner_t *l;
    lseq **mb;
    size_t k, j;
    double z;                  // the normaliser
    int first_epoch;
    double loss;
    uint64_t clipped;          // tokens clipped (lrn_metrics' clipped)
    double kl_ref;             // --kl-coef: Σ of the KL estimator to the reference over the kept tokens
    double k3;                 // tis: Σ ρ − 1 − log ρ over the tokens, and how many were capped
    uint64_t capped;
    double seq_g;              // gspo: the sequence mb[k]'s dL/dlogp per unit of mask (before 1/z)
    int seq_clipped;           // gspo: whether its clipped term was taken
} loss_ctx;

// --tis: token j's weight min(π_old / μ, C) as rl-ratio's token mode makes it
// (obj_tis_weight, the same float), with log π_old = old; k3 and capped counted.
static double tis_weight(loss_ctx *c, const lseq *s, size_t j, float old) {
    double lr = (double)old - (double)s->lp[j], rho = exp(lr);
    int cut;
    float w = obj_tis_weight(rho, c->l->o.tis, &cut);
    c->capped += (uint64_t)cut;
    c->k3 += obj_k3(lr, rho);
    return w;
}

// gspo, at the first token of s: the sequence's term (obj_gspo, from the
// log s set before the pass), its value added once, and what each of its
// tokens takes of the derivative, g · mask_t / Σ mask.
static void gspo_sequence(loss_ctx *c, const lseq *s) {
    const lrn_opts *o = &c->l->o;
    double msum = mask_sum(s), wbar = obj_masked_mean(s->w, NULL, s->mask, s->n);
    obj_term t = obj_gspo(wbar, s->a, s->log_s, o->eps_low, o->eps_high, &c->seq_clipped);
    c->loss += t.v / c->z;
    c->seq_g = msum > 0 ? t.g / msum : 0;
}

static void dlogp(void *vctx, size_t r0, size_t rows, const float *logp, const float *ent, float *d, float *dent) {
    (void)r0;
    loss_ctx *c = vctx;
    const lrn_opts *o = &c->l->o;
    int ratio = lrn_ratio_loss(o->loss);
    for (size_t i = 0; i < rows; i++) {
        lseq *s = c->mb[c->k];
        size_t j = c->j;
        double w = s->w ? s->w[j] : 1, mask = s->mask ? s->mask[j] : 1, lp = logp[i];
        if (ratio && c->first_epoch && !s->lp_learner) s->pi_old[j] = logp[i];
        if (o->loss == LOSS_GSPO && j == 0) gspo_sequence(c, s);
        // a token of mask 0 (rejected, or an environment's with logp 0) adds
        // nothing to the loss nor to a metric (tis's k3 and capped, clipped)
        obj_term term = {0, 0};
        int clipped = 0;
        if (mask != 0) {
            if (o->tis > 0) w = tis_weight(c, s, j, ratio ? s->pi_old[j] : logp[i]);
            double old = ratio ? (double)s->pi_old[j] : 0;
            switch (o->loss) {
            case LOSS_SFT: term = obj_sft(mask, lp); break;   // −Σ log π_θ over the completion tokens kept
            case LOSS_PG: term = obj_pg(w, mask, s->a, lp); break;
            case LOSS_PPO: term = obj_ppo(w, mask, s->a, lp, old, o->eps_low, o->eps_high, &clipped); break;
            case LOSS_CISPO: term = obj_cispo(w, mask, s->a, lp, old, o->eps_low, o->eps_high, &clipped); break;
            case LOSS_GSPO:   // the value counted once, by gspo_sequence
                term = (obj_term){0, c->seq_g * mask};
                clipped = c->seq_clipped;
                break;
            }
            if (o->kl_coef > 0) {   // the reference's KL: in the loss, or only measured (--kl-in reward)
                obj_term kl = obj_kl(o->kl_in_reward ? KL_K1 : o->kl, lp, s->lp_ref[j]);
                c->kl_ref += kl.v;
                if (!o->kl_in_reward) {
                    term.v += o->kl_coef * mask * kl.v;
                    term.g += o->kl_coef * mask * kl.g;
                }
            }
        }
        if (o->entropy_coef != 0 && mask != 0) {   // the entropy bonus, its gradient through H
            obj_term h = obj_entropy(o->entropy_coef, mask, ent[i]);
            c->loss += h.v / c->z;
            dent[i] = (float)(h.g / c->z);
        }
        c->clipped += (uint64_t)clipped;
        c->loss += term.v / c->z;
        d[i] = (float)(term.g / c->z);
        if (++c->j == s->n) {
            c->j = 0;
            c->k++;
        }
    }
}

// ---- The step --------------------------------------------------------------------------

static int stopped(const learner_t *l) { return l->o.stop && *l->o.stop; }

// Whether token t of s takes part in the loss (mask 1, or no mask): the
// per-token metrics are over these tokens only.
static int kept(const lseq *s, size_t t) { return !s->mask || s->mask[t] != 0; }

// Statistics of the batch's records that need no forward.
static void batch_stats(const learner_t *l, uint64_t version, lrn_metrics *m) {
    double rs = 0, rss = 0, acc = 0, as = 0, ass = 0, zero = 0, lag = 0, k3 = 0, capped = 0;
    uint64_t nr = 0, nlag = 0, nk3 = 0, ncap = 0;
    m->lag_max = -INFINITY;
    for (size_t i = 0; i < l->bn; i++) {
        const lseq *s = &l->s[i];
        m->tokens += s->n;
        if (s->has_reward) {
            rs += s->reward;
            rss += s->reward * s->reward;
            acc += s->reward > 0;
            nr++;
        }
        as += s->a;
        ass += s->a * s->a;
        zero += s->a == 0;
        for (size_t t = 0; t < s->n; t++) {
            if (!kept(s, t)) continue;
            if (s->ver) {
                double d = (double)version - (double)s->ver[t];
                lag += d;
                if (d > m->lag_max) m->lag_max = d;
                nlag++;
            }
            if (s->lp && s->lp_learner) {
                double lr = (double)s->lp_learner[t] - (double)s->lp[t], rho = exp(lr);
                k3 += obj_k3(lr, rho);
                nk3++;
                if (s->w) {
                    capped += s->w[t] < rho * (1 - 1e-6);
                    ncap++;
                }
            }
        }
    }
    double n = (double)l->bn;
    m->samples = l->bn;
    m->has_reward = nr > 0;
    if (nr) {
        m->reward_mean = rs / (double)nr;
        m->reward_std = sqrt(fmax(0, rss / (double)nr - m->reward_mean * m->reward_mean));
        m->accuracy = acc / (double)nr;
    }
    m->adv_mean = as / n;
    m->adv_std = sqrt(fmax(0, ass / n - m->adv_mean * m->adv_mean));
    m->adv_zero = zero / n;
    m->has_lag = nlag > 0;
    if (nlag) m->lag_mean = lag / (double)nlag;
    m->has_k3 = nk3 > 0;
    if (nk3) m->k3 = k3 / (double)nk3;
    m->has_capped = ncap > 0;
    if (ncap) m->capped = capped / (double)ncap;
}

// The normaliser of the loss over the whole step.
static double normaliser(const learner_t *l) {
    if (l->o.norm == NORM_CONST) return l->o.norm_const;
    if (l->o.norm == NORM_SEQS) return (double)l->bn;
    double tokens = 0;
    for (size_t i = 0; i < l->bn; i++) tokens += mask_sum(&l->s[i]);
    return tokens > 0 ? tokens : 1;
}

// gspo: the log s of every sequence of mb[0 .. k) (ms their model_seqs),
// which its first token's derivative needs before the backward has scored
// its later tokens (model_backward's output layer asks for dL/dlogp chunk by
// chunk). Where π_old is that very forward (the first epoch of a record
// without logp_learner), s = 1 exactly. Elsewhere (logp_learner, or a later
// epoch against the first one's forward) s is taken at θ by a forward-only
// pass first (model_score_groups: no activations kept, no entropy), about a
// third more compute for those sequences (a forward beside a forward and a
// backward); the derivative is then exact up to the f32 rounding between the
// two forwards.
static int gspo_ratios(learner_t *l, lseq **mb, size_t k, const model_seq *ms, int first_epoch, rl_err *err) {
    model_seq *pre = xmalloc(k * sizeof *pre);
    size_t np = 0;
    for (size_t i = 0; i < k; i++) {
        mb[i]->log_s = 0;
        if (first_epoch && !mb[i]->lp_learner) continue;
        pre[np] = ms[i];
        pre[np++].entropy = NULL;
    }
    int rc = np ? model_score_groups(l->m, pre, np, err) : 0;
    free(pre);
    if (rc < 0) return -1;
    for (size_t i = 0; i < k; i++)
        if (!first_epoch || mb[i]->lp_learner)
            mb[i]->log_s = obj_masked_mean(mb[i]->logp, mb[i]->pi_old, mb[i]->mask, mb[i]->n);
    return 0;
}

// Forward and backward of one micro-batch mb[0 .. k).
static int micro_step(learner_t *l, lseq **mb, size_t k, loss_ctx *c, rl_err *err) {
    model_seq *ms = xmalloc(k * sizeof *ms);
    for (size_t i = 0; i < k; i++) {
        lseq *s = mb[i];
        if (!s->logp) {
            s->logp = xmalloc(s->n * sizeof(float));
            s->ent = xmalloc(s->n * sizeof(float));
        }
        if (lrn_ratio_loss(l->o.loss) && !s->pi_old) {
            s->pi_old = xmalloc(s->n * sizeof(float));
            if (s->lp_learner) memcpy(s->pi_old, s->lp_learner, s->n * sizeof(float));
        }
        ms[i] = (model_seq){.prompt = s->prompt, .n_prompt = s->np, .ids = s->ids, .n_ids = s->n,
                            .temperature = s->temperature, .logp = s->logp, .entropy = s->ent};
    }
    int rc = l->o.loss == LOSS_GSPO ? gspo_ratios(l, mb, k, ms, c->first_epoch, err) : 0;
    if (rc == 0) {
        c->mb = mb;
        c->k = c->j = 0;
        rc = model_backward(l->m, ms, k, dlogp, c, err);
    }
    free(ms);
    return rc;
}

// This rank's share of the trained sequences tr[0 .. ntr) (data-parallel):
// whole groups, each group to the rank in whose 1/size of the batch's
// forward tokens the group's middle falls; the rest are dropped from tr.
// Returns the share's length (ntr alone).
static size_t share_of(const learner_t *l, lseq **tr, size_t ntr) {
    dist_t *d = l->o.dist;
    if (!d || !dist_active(d) || dist_size(d) == 1) return ntr;
    double total = 0, before = 0;
    for (size_t i = 0; i < ntr; i++) total += (double)(tr[i]->np + tr[i]->n - 1);
    int size = dist_size(d), me = dist_rank(d);
    size_t k = 0;
    for (size_t i = 0; i < ntr;) {
        size_t j = i + 1;
        while (j < ntr && tr[j]->has_group && tr[i]->has_group && tr[j]->group == tr[i]->group) j++;
        double cost = 0;
        for (size_t q = i; q < j; q++) cost += (double)(tr[q]->np + tr[q]->n - 1);
        int r = (int)((double)size * (before + cost / 2) / total);
        if (r >= size) r = size - 1;
        if (r == me)
            for (size_t q = i; q < j; q++) tr[k++] = tr[q];
        before += cost;
        i = j;
    }
    return k;
}

int lrn_grad(learner_t *l, uint64_t version, uint64_t steps, lrn_metrics *m, rl_err *err) {
    double t0 = clock_now();
    memset(m, 0, sizeof *m);
    if (!l->bn) {
        l->bn = batch_size(l, 1);
        if (!l->bn) return err_set(err, "lrn_step without a batch");
        l->epoch = 0;
    }
    m->groups = batch_advantages(l, &m->groups_drawn, &m->has_groups_drawn);
    batch_stats(l, version, m);
    // sequences with a gradient: all with tokens for sft, for a KL in the
    // loss and for an entropy bonus, those with an advantage too otherwise
    int every = l->o.loss == LOSS_SFT || (l->o.kl_coef > 0 && !l->o.kl_in_reward) || l->o.entropy_coef != 0;
    lseq **tr = xmalloc(l->bn * sizeof *tr);
    size_t all = 0, fwd = 0;
    for (size_t i = 0; i < l->bn; i++)
        if (l->s[i].n && (every || l->s[i].a != 0)) {
            tr[all++] = &l->s[i];
            fwd += l->s[i].np + l->s[i].n - 1;
        }
    size_t ntr = share_of(l, tr, all);
    loss_ctx c = {.l = l, .z = normaliser(l), .first_epoch = l->epoch == 0};
    model_zero_grad(l->m);
    // micro-batches: at least o->micro, of at most micro_tokens tokens (one
    // sequence may exceed that alone), each a run of consecutive sequences
    size_t i0 = 0, part = 0;
    while (i0 < ntr) {
        // part k of o->micro ends at sequence (k+1)·ntr/micro
        while ((part + 1) * ntr / (size_t)l->o.micro <= i0) part++;
        size_t end = (part + 1) * ntr / (size_t)l->o.micro, i1 = i0, tokens = 0;
        while (i1 < end) {
            size_t len = tr[i1]->np + tr[i1]->n - 1;
            if (i1 > i0 && tokens + len > l->o.micro_tokens) break;
            tokens += len;
            i1++;
        }
        if (stopped(l) || micro_step(l, tr + i0, i1 - i0, &c, err) < 0) {
            free(tr);
            return stopped(l) ? 1 : -1;
        }
        i0 = i1;
    }
    if (stopped(l)) {
        free(tr);
        return 1;
    }
    // loss, entropy, tokens kept, the clipped tokens, --tis's k3 and capped
    // tokens, and the reference's KL: this rank's, then summed over the ranks
    double sums[7] = {c.loss, 0, 0, (double)c.clipped, c.k3, (double)c.capped, c.kl_ref};
    for (size_t i = 0; i < ntr; i++)
        for (size_t t = 0; t < tr[i]->n; t++)
            if (kept(tr[i], t)) {
                sums[1] += tr[i]->ent[t];
                sums[2]++;
            }
    free(tr);
    if (l->o.dist && dist_sum(l->o.dist, sums, 7, err)) return -1;
    m->step = steps + 1;
    m->version = version + 1;
    m->epoch = l->epoch + 1;
    m->trained = all;
    m->fwd_tokens = fwd;
    m->loss = sums[0];
    m->entropy = sums[2] > 0 ? sums[1] / sums[2] : 0;
    m->ppo = l->o.loss == LOSS_PPO;
    m->has_clipped = lrn_ratio_loss(l->o.loss);
    m->clipped = sums[2] > 0 ? sums[3] / sums[2] : 0;
    m->has_kl_ref = l->o.kl_coef > 0;
    m->kl_ref = sums[2] > 0 ? sums[6] / sums[2] : 0;
    if (l->o.tis > 0 && sums[2] > 0) {   // the records carry no logp_learner: ρ is the forward's
        m->has_k3 = m->has_capped = 1;
        m->k3 = sums[4] / sums[2];
        m->capped = sums[5] / sums[2];
        // π_old is the first epoch's forward: the batch's k3, the same at every epoch, counts once
        drift_report r;
        if (m->epoch == 1 && drift_add(&l->drift, (long)m->step, m->k3, &r)) {
            drift_message(&r, "steps", l->drift_warning, sizeof l->drift_warning);
            l->drift_due = 1;
        }
    }
    m->seconds = clock_now() - t0;
    return 0;
}

int lrn_apply(learner_t *l, lrn_metrics *m, rl_err *err) {
    double t0 = clock_now();
    rl_err e = {{0}};
    int rc = l->o.dist && dist_active(l->o.dist)
                 ? zero_step(l->m, l->o.dist, l->o.parts, &l->o.opt, m->step, &m->grad_norm, &m->lr, &e)
                 : adamw_step(l->m, &l->o.opt, m->step, &m->grad_norm, &m->lr);
    if (rc < 0 && e.msg[0]) return err_set(err, "step %llu: %s", (unsigned long long)m->step, e.msg);
    if (rc < 0)
        return err_set(err, "step %llu: the gradient is not finite (norm %g): not applied",
                       (unsigned long long)m->step, m->grad_norm);
    if (++l->epoch == l->o.epochs) release_batch(l);
    model_sync(l->m);   // the step's time includes the GPU's AdamW
    m->seconds += clock_now() - t0;
    m->tokens_per_s = m->seconds > 0 ? (double)m->fwd_tokens / m->seconds : 0;
    return 0;
}

int lrn_step(learner_t *l, uint64_t version, uint64_t steps, lrn_metrics *m, rl_err *err) {
    int rc = lrn_grad(l, version, steps, m, err);
    return rc ? rc : lrn_apply(l, m, err);
}

const char *lrn_take_warning(learner_t *l) {
    if (!l->drift_due) return NULL;
    l->drift_due = 0;
    return l->drift_warning;
}

// ---- Metrics --------------------------------------------------------------------------

static void put_num(sbuf *o, const char *key, double v, int present) {
    sbuf_printf(o, ",\"%s\":", key);
    if (present) json_put_f64(o, v);
    else sbuf_printf(o, "null");
}

void lrn_metrics_json(const lrn_metrics *m, sbuf *o) {
    sbuf_printf(o, "{\"step\":%llu,\"version\":%llu,\"epoch\":%d,\"samples\":%llu,\"groups\":%llu",
                (unsigned long long)m->step, (unsigned long long)m->version, m->epoch, (unsigned long long)m->samples,
                (unsigned long long)m->groups);
    if (m->has_groups_drawn) sbuf_printf(o, ",\"groups_drawn\":%llu", (unsigned long long)m->groups_drawn);
    else sbuf_printf(o, ",\"groups_drawn\":null");
    sbuf_printf(o, ",\"trained\":%llu,\"tokens\":%llu,\"fwd_tokens\":%llu", (unsigned long long)m->trained,
                (unsigned long long)m->tokens, (unsigned long long)m->fwd_tokens);
    put_num(o, "reward_mean", m->reward_mean, m->has_reward);
    put_num(o, "reward_std", m->reward_std, m->has_reward);
    put_num(o, "accuracy", m->accuracy, m->has_reward);
    put_num(o, "adv_mean", m->adv_mean, 1);
    put_num(o, "adv_std", m->adv_std, 1);
    put_num(o, "adv_zero", m->adv_zero, 1);
    put_num(o, "loss", m->loss, 1);
    put_num(o, "grad_norm", m->grad_norm, 1);
    put_num(o, "lr", m->lr, 1);
    put_num(o, "entropy", m->entropy, m->trained > 0);
    put_num(o, "lag_mean", m->lag_mean, m->has_lag);
    put_num(o, "lag_max", m->lag_max, m->has_lag);
    put_num(o, "k3", m->k3, m->has_k3);
    put_num(o, "capped", m->capped, m->has_capped);
    put_num(o, "ppo_clipped", m->clipped, m->ppo);   // the older key, ppo's alone
    put_num(o, "clipped", m->clipped, m->has_clipped);
    put_num(o, "kl_ref", m->kl_ref, m->has_kl_ref);
    put_num(o, "tokens_per_s", m->tokens_per_s, 1);
    put_num(o, "seconds", m->seconds, 1);
    put_num(o, "save_s", m->save_s, 1);
    put_num(o, "elapsed", m->elapsed, 1);
    sbuf_printf(o, "}");
}
