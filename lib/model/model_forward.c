// model_forward.c — the forward pass: a layer over a batch of tokens, the
// output layer's logits in chunks of rows, and scoring (model_score,
// model_score_groups): sequences packed into one batch, prompts shared by
// groups computed once, the log-probabilities of their completions.
#include "model/model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Activations x (n) rounded as the model's precision rounds them (model_opts.act).
static void act_round(const model_t *m, float *x, size_t n) {
    if (m->o.act == DT_BF16) m->ops->round_bf16(x, n);
}

// out[i] = x · W[i]ᵀ (+ bias[i]) for the n products of one input (ops.h matmul_many).
static void matmul_many(const rl_ops *o, float *const *out, const float *x, const rl_mat *const *W,
                        const float *const *bias, int n, int N) {
    if (o->matmul_many) o->matmul_many(out, x, W, bias, n, N);
    else
        for (int i = 0; i < n; i++) o->matmul(out[i], x, W[i], bias[i], N);
}

// Layer l over N tokens: x (N, C) in, next (N, C) out (next may be x: it is
// read first). The activations go to s; h (N, F) is the MLP's hidden product
// (may be s->gate). with_cache: keys and values also go to the cache rows
// m->rows, and attention reads the cache.
void mdl_layer_forward(model_t *m, int l, const float *x, float *next, const saved *s, float *h, int N, int nseq,
                   int with_cache) {
    const model_config *c = &m->c;
    const rl_ops *o = m->ops;
    const layer_w *L = &m->w.L[l];
    int C = c->hidden, NH = c->heads, NKV = c->kv_heads, HS = c->head_dim, F = c->inter;
    size_t KVD = (size_t)NKV * HS, NC = (size_t)N * C;
    float eps = (float)c->rms_eps;
    o->rmsnorm(s->n1, x, L->attn_norm, N, C, eps);
    act_round(m, s->n1, NC);
    float *qkv[3] = {L->qn ? s->qr : s->q, L->kn ? s->kr : s->k, s->v};
    matmul_many(o, qkv, s->n1, (const rl_mat *[3]){&L->q, &L->k, &L->v}, (const float *[3]){L->bq, L->bk, L->bv}, 3,
                N);
    for (int t = LORA_Q; t <= LORA_V && m->lora; t++)
        mdl_lora_forward(m, l, t, s->n1, qkv[t - LORA_Q], mdl_lora_saved(m, s, t, N), N);
    act_round(m, L->qn ? s->qr : s->q, (size_t)N * NH * HS);
    act_round(m, L->kn ? s->kr : s->k, (size_t)N * KVD);
    act_round(m, s->v, (size_t)N * KVD);   // as the KV cache holds it
    if (L->qn) {   // qwen3: every head of q and k, (N·NH, HS) and (N·NKV, HS) rows, normed before RoPE
        o->rmsnorm(s->q, s->qr, L->qn, N * NH, HS, eps);
        o->rmsnorm(s->k, s->kr, L->kn, N * NKV, HS, eps);
        act_round(m, s->q, (size_t)N * NH * HS);
        act_round(m, s->k, (size_t)N * KVD);
    }
    o->rope(s->q, m->pos, m->cos_sin, N, NH, HS);
    o->rope(s->k, m->pos, m->cos_sin, N, NKV, HS);
    act_round(m, s->q, (size_t)N * NH * HS);
    act_round(m, s->k, (size_t)N * KVD);   // as the KV cache holds it
    const void *kb = s->k, *vb = s->v;
    rl_dtype kt = DT_F32;
    if (with_cache) {
        kt = m->kv_dt;
        size_t row = KVD * dt_size(kt);   // bytes
        char *kl = (char *)m->kvk + (size_t)l * m->kv_stride * row;
        char *vl = (char *)m->kvv + (size_t)l * m->kv_stride * row;
        o->scatter_rows(kl, kt, m->rows, s->k, N, (int)KVD);
        o->scatter_rows(vl, kt, m->rows, s->v, N, (int)KVD);
        for (int f = 0; f < m->nforks; f++) {   // shared prefixes, this layer's rows now complete
            const struct fork *fk = &m->forks[f];
            o->gather_rows(kl + (size_t)fk->dst * row, kl, kt, m->frows + fk->off, fk->n, (int)KVD);
            o->gather_rows(vl + (size_t)fk->dst * row, vl, kt, m->frows + fk->off, fk->n, (int)KVD);
        }
        kb = kl;
        vb = vl;
    }
    o->attention(s->att, s->lse, s->q, kb, vb, kt, m->seqs, nseq, N, NH, NKV, HS);
    act_round(m, s->att, (size_t)N * NH * HS);
    o->matmul(s->xm, s->att, &L->o, L->bo, N);       // xm = x + o(attention)
    mdl_lora_forward(m, l, LORA_O, s->att, s->xm, mdl_lora_saved(m, s, LORA_O, N), N);
    act_round(m, s->xm, NC);
    o->add(s->xm, x, NC);
    act_round(m, s->xm, NC);
    o->rmsnorm(s->n2, s->xm, L->mlp_norm, N, C, eps);
    act_round(m, s->n2, NC);
    matmul_many(o, (float *[2]){s->gate, s->up}, s->n2, (const rl_mat *[2]){&L->gate, &L->up},
                (const float *[2]){L->bgate, L->bup}, 2, N);
    mdl_lora_forward(m, l, LORA_GATE, s->n2, s->gate, mdl_lora_saved(m, s, LORA_GATE, N), N);
    mdl_lora_forward(m, l, LORA_UP, s->n2, s->up, mdl_lora_saved(m, s, LORA_UP, N), N);
    act_round(m, s->gate, (size_t)N * F);
    act_round(m, s->up, (size_t)N * F);
    o->swiglu(h, s->gate, s->up, N, F);
    act_round(m, h, (size_t)N * F);
    o->matmul(next, h, &L->down, L->bdown, N);       // next = xm + down(silu(gate)·up)
    mdl_lora_forward(m, l, LORA_DOWN, h, next, mdl_lora_saved(m, s, LORA_DOWN, N), N);
    act_round(m, next, NC);
    o->add(next, s->xm, NC);
    act_round(m, next, NC);
}

// m->x (N, C) = the residual stream after the last layer, for the tokens in
// m->ids at positions m->pos; with_cache: keys and values go to the cache rows
// m->rows and attention reads the cache, else they stay in m->k, m->v.
void mdl_forward(model_t *m, int N, int nseq, int with_cache) {
    saved w = {.n1 = m->xb, .q = m->q, .k = m->k, .v = m->v, .att = m->att, .xm = m->xm, .n2 = m->xb,
               .gate = m->hb, .up = m->hb2, .qr = m->q, .kr = m->k};
    m->ops->embed(m->x, &m->w.embed, m->ids, N);
    act_round(m, m->x, (size_t)N * m->c.hidden);
    for (int l = 0; l < m->c.layers; l++) mdl_layer_forward(m, l, m->x, m->x, &w, m->hb, N, nseq, with_cache);
}

// m->logits (rows, V) for rows sel[0 .. rows) of the residual stream x
// (tokens, C): those rows gathered into raw (rows, C), the final norm into
// m->hrows (raw may be m->hrows), the output layer. With head_f32 (model.h)
// neither the norm's output nor the logits are rounded: the head is f32.
void mdl_logits_rows(model_t *m, const float *x, float *raw, const int32_t *sel, int rows) {
    const rl_ops *o = m->ops;
    o->gather_rows(raw, x, DT_F32, sel, rows, m->c.hidden);
    o->rmsnorm(m->hrows, raw, m->w.norm, rows, m->c.hidden, (float)m->c.rms_eps);
    if (!m->o.head_f32) act_round(m, m->hrows, (size_t)rows * m->c.hidden);
    o->matmul(m->logits, m->hrows, &m->w.head, NULL, rows);
    if (!m->o.head_f32) act_round(m, m->logits, (size_t)rows * m->c.vocab);
}

// The most tokens of one forward: each activation array (tokens, width) must
// stay below 2^31 elements, as the ops take int sizes.
size_t mdl_max_batch_tokens(const model_t *m) {
    const model_config *c = &m->c;
    size_t w = (size_t)c->hidden, q = (size_t)c->heads * c->head_dim, f = (size_t)c->inter;
    w = q > w ? q : w;
    w = f > w ? f : w;
    return ((size_t)1 << 31) / w - 1;
}

int mdl_check_tokens(const model_t *m, const uint32_t *ids, size_t n, const char *what, size_t seq,
                 rl_err *err) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= (uint32_t)m->c.vocab)
            return err_set(err, "sequence %zu: %s token %zu is %u, outside the vocabulary of %d", seq, what,
                           i, ids[i], m->c.vocab);
    return 0;
}

// Refuses sequence seq of len tokens (positions 0 .. len-1) when it is
// longer than the model computes as transformers does (cfg_max_seq).
int mdl_check_len(const model_t *m, size_t seq, size_t len, rl_err *err) {
    const char *why;
    int max = cfg_max_seq(&m->c, &why);
    if (len <= (size_t)max) return 0;
    const char *more = !strcmp(why, "sliding_window") ? " (attention over a sliding window is not supported)"
                       : !strncmp(why, "rope_scaling", 12) ? " (dynamic RoPE scaling beyond it is not supported)"
                                                           : "";
    return err_set(err, "sequence %zu: %zu tokens exceed %s %d%s", seq, len, why, max, more);
}

// A shared prefix for the forward under way: each layer's key/value rows
// frows[off .. off + n) copied to rows dst .. dst + n.
void mdl_add_fork(model_t *m, int dst, size_t off, size_t n) {
    GROW(m->forks, m->forks_cap, (size_t)m->nforks + 1, 64);
    m->forks[m->nforks++] = (struct fork){.dst = dst, .off = (int32_t)off, .n = (int32_t)n};
}

// Whether sequence i shares the prompt of sequence `prev` (the last before it
// with tokens to score; none: SIZE_MAX): the same tokens.
static int same_prompt(const model_seq *seqs, size_t prev, size_t i) {
    return prev != SIZE_MAX && seqs[prev].n_prompt == seqs[i].n_prompt &&
           !memcmp(seqs[prev].prompt, seqs[i].prompt, seqs[i].n_prompt * sizeof *seqs[i].prompt);
}

// Checks the sequences of a scoring or training pass, reserves activations
// and uploads the tokens (m->ids, m->pos), the scored rows and their targets
// and temperatures (m->sel, m->tgt, m->itemp) and the sequences (m->seqs).
// *N tokens in *nseq sequences, *R scored tokens; 0 (nothing to score is
// *nseq == 0), or -1 with err.
//
// share: a sequence whose prompt is its predecessor's computes none of it.
// Its key/value rows (one layer's, m->kvs_k, m->kvs_v) start with a copy of
// the prompt's rows of the sequence leading them (m->forks, m->rows), and the
// logits after the prompt are the leader's. *shared says whether any does;
// *Nkv is the key/value rows (N without sharing).
int mdl_pack_scored(model_t *m, const model_seq *seqs, size_t n, int share, size_t *N_, size_t *R_,
                size_t *nseq_, int *shared_, size_t *Nkv_, rl_err *err) {
    size_t N = 0, R = 0, nseq = 0, Nown = 0, prev = SIZE_MAX;
    int shared = 0;
    for (size_t i = 0; i < n; i++) {
        const model_seq *s = &seqs[i];
        if (s->n_ids == 0) continue;
        if (s->n_prompt == 0) return err_set(err, "sequence %zu: empty prompt: nothing to predict the first token from", i);
        if (!(s->temperature > 0) || !isfinite(s->temperature))
            return err_set(err, "sequence %zu: temperature %g: must be a positive number", i, s->temperature);
        if (mdl_check_tokens(m, s->prompt, s->n_prompt, "prompt", i, err) < 0 ||
            mdl_check_tokens(m, s->ids, s->n_ids, "completion", i, err) < 0)
            return -1;
        size_t len = s->n_prompt + s->n_ids - 1;
        if (mdl_check_len(m, i, len, err) < 0) return -1;
        int follows = share && same_prompt(seqs, prev, i);
        shared |= follows;
        N += len;   // with shared prompts: the key/value rows, more than the tokens computed
        Nown += follows ? s->n_ids - 1 : len;
        R += s->n_ids;
        nseq++;
        prev = i;
        if (N > mdl_max_batch_tokens(m))
            return err_set(err, "batch of over %zu tokens: score it in parts", mdl_max_batch_tokens(m));
    }
    *N_ = shared ? Nown : N;
    *Nkv_ = N;
    *R_ = R;
    *nseq_ = nseq;
    *shared_ = shared;
    if (nseq == 0) return 0;
    mdl_reserve(m, (int)N);
    size_t Nq = *N_;
    int32_t *ids = xmalloc(Nq * 4), *pos = xmalloc(Nq * 4), *rows = xmalloc(Nq * 4), *sel = xmalloc(R * 4),
            *tgt = xmalloc(R * 4), *frows = xmalloc(N * 4);
    float *itemp = xmalloc(R * 4);
    rl_attn_seq *as = xmalloc(nseq * sizeof *as);
    size_t q0 = 0, kv = 0, f0 = 0, r = 0, k = 0, lead_q0 = 0, lead_kv = 0;
    prev = SIZE_MAX;
    m->nforks = 0;
    for (size_t i = 0; i < n; i++) {
        const model_seq *s = &seqs[i];
        if (s->n_ids == 0) continue;
        size_t P = s->n_prompt, len = P + s->n_ids - 1;
        int follows = share && same_prompt(seqs, prev, i);
        prev = i;
        size_t j0 = follows ? P : 0;   // its first token computed: after a shared prompt, the second scored
        if (follows && len > j0) {   // one with a single token reads the leader's logits only
            for (size_t t = 0; t < P; t++) frows[f0 + t] = (int32_t)(lead_kv + t);
            mdl_add_fork(m, (int)kv, f0, P);
            f0 += P;
        } else if (!follows) {
            lead_q0 = q0;
            lead_kv = kv;
        }
        for (size_t j = j0; j < len; j++) {
            ids[q0 + j - j0] = (int32_t)(j < P ? s->prompt[j] : s->ids[j - P]);
            pos[q0 + j - j0] = (int32_t)j;
            rows[q0 + j - j0] = (int32_t)(kv + j);
        }
        for (size_t j = 0; j < s->n_ids; j++, r++) {   // token j is predicted from position P - 1 + j
            sel[r] = (int32_t)(follows && j == 0 ? lead_q0 + P - 1 : q0 + P - 1 + j - j0);
            tgt[r] = (int32_t)s->ids[j];
            itemp[r] = 1.0f / s->temperature;
        }
        if (len > j0)
            as[k++] = (rl_attn_seq){.q0 = (int32_t)q0, .n = (int32_t)(len - j0), .pos0 = (int32_t)j0,
                                    .kv0 = (int32_t)(shared ? kv : q0)};
        q0 += len - j0;
        kv += len;
    }
    *nseq_ = k;
    const rl_ops *o = m->ops;
    o->upload(m->ids, ids, Nq * 4);
    o->upload(m->pos, pos, Nq * 4);
    o->upload(m->sel, sel, R * 4);
    o->upload(m->tgt, tgt, R * 4);
    o->upload(m->itemp, itemp, R * 4);
    o->upload(m->seqs, as, k * sizeof *as);
    if (shared) {
        o->upload(m->rows, rows, Nq * 4);
        if (f0) o->upload(m->frows, frows, f0 * 4);
    }
    free(ids);
    free(pos);
    free(rows);
    free(sel);
    free(tgt);
    free(frows);
    free(itemp);
    free(as);
    return 0;
}

// Copies per-token values of the scored tokens (R, host) to the sequences'
// arrays (field logp or entropy; sequences whose array is NULL are skipped).
static void unpack_scored(model_seq *seqs, size_t n, const float *v, int entropy) {
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        float *out = entropy ? seqs[i].entropy : seqs[i].logp;
        for (size_t j = 0; j < seqs[i].n_ids; j++, r++)
            if (out) out[j] = v[r];
    }
}

int mdl_want_entropy(const model_seq *seqs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (seqs[i].entropy && seqs[i].n_ids) return 1;
    return 0;
}

// The R log-probabilities (and entropies) of the scored tokens into the sequences.
void mdl_download_scored(model_t *m, model_seq *seqs, size_t n, size_t R) {
    float *v = xmalloc(R * 4);
    m->ops->download(v, m->lp, R * 4);
    unpack_scored(seqs, n, v, 0);
    if (mdl_want_entropy(seqs, n)) {
        m->ops->download(v, m->ent, R * 4);
        unpack_scored(seqs, n, v, 1);
    }
    free(v);
}

// Keys and values of shared prompts through the work buffers, one layer's rows at a time.
void mdl_kv_work(model_t *m) {
    m->kvk = m->kvs_k;
    m->kvv = m->kvs_v;
    m->kv_dt = DT_F32;
    m->kv_stride = 0;
}

static int score(model_t *m, model_seq *seqs, size_t n, int share, rl_err *err) {
    size_t N, R, nseq, Nkv;
    int shared;
    if (mdl_pack_scored(m, seqs, n, share, &N, &R, &nseq, &shared, &Nkv, err) < 0) return -1;
    if (R == 0) return 0;
    const rl_ops *o = m->ops;
    if (shared) mdl_kv_work(m);
    mdl_forward(m, (int)N, (int)nseq, shared);
    m->nforks = 0;
    size_t chunk = (size_t)m->lrows;
    float *ent = mdl_want_entropy(seqs, n) ? m->ent : NULL;
    for (size_t r0 = 0; r0 < R; r0 += chunk) {
        int rows = (int)(R - r0 < chunk ? R - r0 : chunk);
        mdl_logits_rows(m, m->x, m->hrows, m->sel + r0, rows);
        o->logprob(m->lp + r0, ent ? ent + r0 : NULL, m->logits, m->tgt + r0, m->itemp + r0, rows, m->c.vocab);
    }
    mdl_download_scored(m, seqs, n, R);
    return 0;
}

int model_score(model_t *m, model_seq *seqs, size_t n, rl_err *err) { return score(m, seqs, n, 0, err); }
int model_score_groups(model_t *m, model_seq *seqs, size_t n, rl_err *err) { return score(m, seqs, n, 1, err); }
