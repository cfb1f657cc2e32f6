// model_backward.c — the backward pass (model_backward): the forward that
// saves each layer's activations, then the output layer's and every layer's
// gradients, accumulated into the parameters' (llm.c's convention).
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

// The residual stream (N, C) entering layer l (l = layers: after the last).
static float *resid_at(const model_t *m, int l, int N) {
    return m->s_x + (size_t)l * (size_t)N * (size_t)m->c.hidden;
}

// The activations of layer l saved by forward_train for N tokens: set l of
// each saved buffer of mdl_train_table, its layers laid out for N tokens
// (with recompute, the one set of those that hold one layer).
static saved saved_at(const model_t *m, int l, int N) {
    wbuf t[WT_MAX];
    size_t nt = mdl_train_table(m, (size_t)N, t);
    saved s = {0};
    for (size_t i = 0; i < nt; i++) {
        if (t[i].in_saved < 0) continue;
        float *base = *(float *const *)((const char *)m + t[i].field);
        size_t set = t[i].sets > 1 ? (size_t)l : 0;
        *(float **)((char *)&s + t[i].in_saved) = base ? base + set * t[i].n : NULL;
    }
    return s;
}

// The gradient of a parameter of the base, given its address; NULL when it
// is frozen (adapters train) or absent.
static float *grad_of(const model_t *m, const void *param) {
    return param && !m->lora ? m->grads + ((const float *)param - m->w.params) : NULL;
}

// dW (M, K) += doutᵀ x, and its bias's gradient, for a matrix that trains.
static void weight_dw(const model_t *m, const rl_mat *W, const float *bias, const float *dout, const float *x, int N) {
    float *g = grad_of(m, W->data);
    if (g) m->ops->matmul_dw(g, grad_of(m, bias), dout, x, N, W->rows, W->cols);
}

// The forward of model_score, keeping what the backward needs; the residual
// stream after the last layer is resid_at(m, layers, N). shared: prompts
// shared as mdl_pack_scored laid them out (keys and values through mdl_kv_work).
static void forward_train(model_t *m, int N, int nseq, int shared) {
    m->ops->embed(resid_at(m, 0, N), &m->w.embed, m->ids, N);
    if (shared) mdl_kv_work(m);
    for (int l = 0; l < m->c.layers; l++) {
        saved s = saved_at(m, l, N);
        // d_h: h, kept only for down
        mdl_layer_forward(m, l, s.x, resid_at(m, l + 1, N), &s, m->d_h, N, nseq, shared);
    }
}

// Attention's backward when prompts are shared (mdl_pack_scored): the layer's key
// and value rows rebuilt from its saved k, v (N tokens) and the copies of the
// shared prompts; their gradients (Nkv rows) taken, each copy's added to the
// prompt rows it copied, and the tokens' rows gathered into d_k, d_v.
static void attention_backward_shared(model_t *m, const saved *s, int N, int Nkv, int nseq) {
    const model_config *c = &m->c;
    const rl_ops *o = m->ops;
    int KVD = c->kv_heads * c->head_dim;
    o->scatter_rows(m->kvs_k, DT_F32, m->rows, s->k, N, KVD);
    o->scatter_rows(m->kvs_v, DT_F32, m->rows, s->v, N, KVD);
    for (int f = 0; f < m->nforks; f++) {
        const struct fork *fk = &m->forks[f];
        o->gather_rows(m->kvs_k + (size_t)fk->dst * KVD, m->kvs_k, DT_F32, m->frows + fk->off, fk->n, KVD);
        o->gather_rows(m->kvs_v + (size_t)fk->dst * KVD, m->kvs_v, DT_F32, m->frows + fk->off, fk->n, KVD);
    }
    o->attention_backward(m->d_q, m->d_kvs_k, m->d_kvs_v, m->d_att, s->q, m->kvs_k, m->kvs_v, s->att, s->lse,
                          m->seqs, nseq, Nkv, c->heads, c->kv_heads, c->head_dim);
    for (int f = 0; f < m->nforks; f++) {   // a copy's gradient is its source rows' too
        const struct fork *fk = &m->forks[f];
        o->embed_backward(m->d_kvs_k, m->d_kvs_k + (size_t)fk->dst * KVD, m->frows + fk->off, fk->n, KVD);
        o->embed_backward(m->d_kvs_v, m->d_kvs_v + (size_t)fk->dst * KVD, m->frows + fk->off, fk->n, KVD);
    }
    o->gather_rows(m->d_k, m->d_kvs_k, DT_F32, m->rows, N, KVD);
    o->gather_rows(m->d_v, m->d_kvs_v, DT_F32, m->rows, N, KVD);
}

// The output layer in chunks of rows, forward and backward at once: the
// log-probabilities (and entropies) of a chunk go to the caller, whose
// dloss/dlogp (and dloss/dH) comes back before the next chunk, so no
// (tokens, V) array is ever held. Leaves d_x (N, C) = dloss / d(residual
// stream after the last layer).
static void head_train(model_t *m, int N, size_t R, int entropy, model_dlogp_fn dlogp, void *ctx) {
    const rl_ops *o = m->ops;
    int C = m->c.hidden, V = m->c.vocab;
    float eps = (float)m->c.rms_eps;
    float *x = resid_at(m, m->c.layers, N);
    float *g_head = grad_of(m, m->w.head.data), *g_norm = grad_of(m, m->w.norm);
    size_t lrows = (size_t)m->lrows;
    float *lp = xmalloc(lrows * 4), *dl = xmalloc(lrows * 4);
    float *ent = entropy ? xmalloc(lrows * 4) : NULL, *de = entropy ? xmalloc(lrows * 4) : NULL;
    o->zero(m->d_x, (size_t)N * C);
    for (size_t r0 = 0; r0 < R; r0 += lrows) {
        int rows = (int)(R - r0 < lrows ? R - r0 : lrows);
        mdl_logits_rows(m, x, m->hraw, m->sel + r0, rows);                    // hraw: the rows before the norm
        o->logprob(m->lp + r0, entropy ? m->ent + r0 : NULL, m->logits, m->tgt + r0, m->itemp + r0, rows, V);
        o->download(lp, m->lp + r0, (size_t)rows * 4);
        if (entropy) {
            o->download(ent, m->ent + r0, (size_t)rows * 4);
            memset(de, 0, (size_t)rows * 4);
        }
        dlogp(ctx, r0, (size_t)rows, lp, ent, dl, de);
        o->upload(m->dlogp + r0, dl, (size_t)rows * 4);
        int with_dent = 0;   // a chunk without an entropy term takes the op's path without one
        for (int i = 0; entropy && i < rows && !with_dent; i++) with_dent = de[i] != 0;
        if (with_dent) o->upload(m->dent + r0, de, (size_t)rows * 4);
        o->logprob_backward(m->logits, m->tgt + r0, m->itemp + r0, m->dlogp + r0, with_dent ? m->dent + r0 : NULL,
                            rows, V);
        o->matmul_dx(m->dh, m->logits, &m->w.head, rows, 0);               // (rows, C)
        if (g_head) o->matmul_dw(g_head, NULL, m->logits, m->hrows, rows, V, C);
        o->zero(m->hrows, (size_t)rows * C);                              // now d(hraw)
        o->rmsnorm_backward(m->hrows, g_norm, m->dh, m->hraw, m->w.norm, rows, C, eps);
        o->embed_backward(m->d_x, m->hrows, m->sel + r0, rows, C);        // added: samples sharing a
                                                                          // prompt score its last row
    }
    free(lp);
    free(dl);
    free(ent);
    free(de);
}

// Backward through the layers, from d_x = dloss/d(last residual stream)
// down to the embeddings; every parameter gradient accumulates.
// Nkv: key/value rows when prompts are shared (mdl_pack_scored), else 0.
static void layers_backward(model_t *m, int N, int nseq, int Nkv) {
    const model_config *c = &m->c;
    const rl_ops *o = m->ops;
    int C = c->hidden, NH = c->heads, NKV = c->kv_heads, HS = c->head_dim, F = c->inter;
    int QD = NH * HS, KVD = NKV * HS;
    float eps = (float)c->rms_eps;
    float *dres = m->d_x;   // (N, C): dloss / d(residual stream) at the current point
    for (int l = c->layers - 1; l >= 0; l--) {
        const layer_w *L = &m->w.L[l];
        saved s = saved_at(m, l, N);
        if (m->recompute)   // the layer's activations again, from its input: the same bits
            mdl_layer_forward(m, l, s.x, resid_at(m, l + 1, N), &s, m->d_h, N, nseq, Nkv > 0);
        // MLP: x_next = xm + down(silu(gate(n2)) · up(n2)), n2 = rmsnorm(xm)
        o->swiglu(m->d_up, s.gate, s.up, N, F);                             // h, again
        weight_dw(m, &L->down, L->bdown, dres, m->d_up, N);
        o->matmul_dx(m->d_h, dres, &L->down, N, 0);                         // dh (N, F)
        mdl_lora_backward(m, l, LORA_DOWN, m->d_up, mdl_lora_saved(m, &s, LORA_DOWN, N), dres, m->d_h, N);
        o->swiglu_backward(m->d_h, m->d_up, m->d_h, s.gate, s.up, N, F);    // dgate, dup
        weight_dw(m, &L->gate, L->bgate, m->d_h, s.n2, N);
        weight_dw(m, &L->up, L->bup, m->d_up, s.n2, N);
        o->matmul_dx(m->d_n, m->d_h, &L->gate, N, 0);
        o->matmul_dx(m->d_n, m->d_up, &L->up, N, 1);
        mdl_lora_backward(m, l, LORA_GATE, s.n2, mdl_lora_saved(m, &s, LORA_GATE, N), m->d_h, m->d_n, N);
        mdl_lora_backward(m, l, LORA_UP, s.n2, mdl_lora_saved(m, &s, LORA_UP, N), m->d_up, m->d_n, N);
        o->rmsnorm_backward(dres, grad_of(m, L->mlp_norm), m->d_n, s.xm, L->mlp_norm, N, C, eps);
        // attention: xm = x + o(attn(rope(q(n1)), rope(k(n1)), v(n1))), n1 = rmsnorm(x)
        // (qwen3: q and k normed per head before rope)
        weight_dw(m, &L->o, L->bo, dres, s.att, N);
        o->matmul_dx(m->d_att, dres, &L->o, N, 0);
        mdl_lora_backward(m, l, LORA_O, s.att, mdl_lora_saved(m, &s, LORA_O, N), dres, m->d_att, N);
        if (Nkv)
            attention_backward_shared(m, &s, N, Nkv, nseq);
        else
            o->attention_backward(m->d_q, m->d_k, m->d_v, m->d_att, s.q, s.k, s.v, s.att, s.lse, m->seqs, nseq,
                                  N, NH, NKV, HS);
        o->rope_backward(m->d_q, m->pos, m->cos_sin, N, NH, HS);
        o->rope_backward(m->d_k, m->pos, m->cos_sin, N, NKV, HS);
        float *dq = m->d_q, *dk = m->d_k;   // d(q_proj output), d(k_proj output)
        if (L->qn) {                        // qwen3: back through the per-head norms
            dq = m->d_qr;
            dk = m->d_kr;
            o->zero(dq, (size_t)N * QD);
            o->zero(dk, (size_t)N * KVD);
            o->rmsnorm_backward(dq, grad_of(m, L->qn), m->d_q, s.qr, L->qn, N * NH, HS, eps);
            o->rmsnorm_backward(dk, grad_of(m, L->kn), m->d_k, s.kr, L->kn, N * NKV, HS, eps);
        }
        weight_dw(m, &L->q, L->bq, dq, s.n1, N);
        weight_dw(m, &L->k, L->bk, dk, s.n1, N);
        weight_dw(m, &L->v, L->bv, m->d_v, s.n1, N);
        o->matmul_dx(m->d_n, dq, &L->q, N, 0);
        o->matmul_dx(m->d_n, dk, &L->k, N, 1);
        o->matmul_dx(m->d_n, m->d_v, &L->v, N, 1);
        const float *dqkv[3] = {dq, dk, m->d_v};
        for (int t = LORA_Q; t <= LORA_V; t++)
            mdl_lora_backward(m, l, t, s.n1, mdl_lora_saved(m, &s, t, N), dqkv[t - LORA_Q], m->d_n, N);
        o->rmsnorm_backward(dres, grad_of(m, L->attn_norm), m->d_n, s.x, L->attn_norm, N, C, eps);
    }
    float *g_embed = grad_of(m, m->w.embed.data);
    if (g_embed) o->embed_backward(g_embed, dres, m->ids, N, C);
}

int model_backward(model_t *m, model_seq *seqs, size_t n, model_dlogp_fn dlogp, void *ctx, rl_err *err) {
    if (!m->grads) return err_set(err, "model_backward before model_train_init");
    size_t N, R, nseq, Nkv;
    int shared;
    if (mdl_pack_scored(m, seqs, n, 1, &N, &R, &nseq, &shared, &Nkv, err) < 0) return -1;
    if (R == 0) return 0;
    mdl_group_reserve(m, &m->train, mdl_train_table, (int)N);
    forward_train(m, (int)N, (int)nseq, shared);
    head_train(m, (int)N, R, mdl_want_entropy(seqs, n), dlogp, ctx);
    layers_backward(m, (int)N, (int)nseq, shared ? (int)Nkv : 0);
    m->nforks = 0;
    mdl_download_scored(m, seqs, n, R);
    return 0;
}
