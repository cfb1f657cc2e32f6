// model_table.c — the tensor table (Hugging Face names, shapes, offsets) and
// the sets of weights laid out by it: a set's allocation, its matrices'
// views (rl_mat), f32 values converted to a matrix's dtype, and the standby
// sets that model_weights_put fills and model_weights_swap puts in use.
#include "model/model_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_tensor(model_t *m, int is_mat, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void add_tensor(model_t *m, int is_mat, int64_t d0, int64_t d1, const char *fmt, ...) {
    m->t = xrealloc(m->t, (m->nt + 1) * sizeof *m->t);
    mtensor *t = &m->t[m->nt++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->n = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    t->off = m->nparams;
    t->is_mat = is_mat;
    m->nparams += t->n;
}

void mdl_build_table(model_t *m) {
    const model_config *c = &m->c;
    int64_t C = c->hidden, QD = (int64_t)c->heads * c->head_dim, KVD = (int64_t)c->kv_heads * c->head_dim;
    add_tensor(m, 1, c->vocab, C, "model.embed_tokens.weight");
    for (int l = 0; l < c->layers; l++) {
        const char *p = "model.layers";
        add_tensor(m, 0, C, 0, "%s.%d.input_layernorm.weight", p, l);
        add_tensor(m, 1, QD, C, "%s.%d.self_attn.q_proj.weight", p, l);
        if (c->qkv_bias) add_tensor(m, 0, QD, 0, "%s.%d.self_attn.q_proj.bias", p, l);
        add_tensor(m, 1, KVD, C, "%s.%d.self_attn.k_proj.weight", p, l);
        if (c->qkv_bias) add_tensor(m, 0, KVD, 0, "%s.%d.self_attn.k_proj.bias", p, l);
        add_tensor(m, 1, KVD, C, "%s.%d.self_attn.v_proj.weight", p, l);
        if (c->qkv_bias) add_tensor(m, 0, KVD, 0, "%s.%d.self_attn.v_proj.bias", p, l);
        add_tensor(m, 1, C, QD, "%s.%d.self_attn.o_proj.weight", p, l);
        if (c->o_bias) add_tensor(m, 0, C, 0, "%s.%d.self_attn.o_proj.bias", p, l);
        if (c->qk_norm) {
            add_tensor(m, 0, c->head_dim, 0, "%s.%d.self_attn.q_norm.weight", p, l);
            add_tensor(m, 0, c->head_dim, 0, "%s.%d.self_attn.k_norm.weight", p, l);
        }
        add_tensor(m, 0, C, 0, "%s.%d.post_attention_layernorm.weight", p, l);
        add_tensor(m, 1, c->inter, C, "%s.%d.mlp.gate_proj.weight", p, l);
        if (c->mlp_bias) add_tensor(m, 0, c->inter, 0, "%s.%d.mlp.gate_proj.bias", p, l);
        add_tensor(m, 1, c->inter, C, "%s.%d.mlp.up_proj.weight", p, l);
        if (c->mlp_bias) add_tensor(m, 0, c->inter, 0, "%s.%d.mlp.up_proj.bias", p, l);
        add_tensor(m, 1, C, c->inter, "%s.%d.mlp.down_proj.weight", p, l);
        if (c->mlp_bias) add_tensor(m, 0, C, 0, "%s.%d.mlp.down_proj.bias", p, l);
    }
    add_tensor(m, 0, C, 0, "model.norm.weight");
    if (!c->tie_embeddings) add_tensor(m, 1, c->vocab, C, "lm_head.weight");
}

const mtensor *mdl_find_tensor(const model_t *m, const char *name) {
    for (size_t i = 0; i < m->nt; i++)
        if (strcmp(m->t[i].name, name) == 0) return &m->t[i];
    return NULL;
}

int mdl_stored_apart(const mtensor *t) { return t->dtype != DT_F32; }

const char *mdl_prec_name(const model_t *m) {
    const char *p = model_precision_name(&m->o);
    return p ? p : dt_name(m->o.dtype);
}

// The matrix of tensor t in w: at its dtype, or its f32 parameters (fixed
// until training starts: ops.h rl_mat).
static rl_mat mat_of(const model_t *m, const weights *w, const mtensor *t) {
    rl_mat r = {.dtype = t->dtype, .rows = (int)t->shape[0], .cols = (int)t->shape[1], .act = t->act,
                .fixed = mdl_stored_apart(t) || !m->grads};
    size_t i = (size_t)(t - m->t);
    if (!mdl_stored_apart(t)) {
        r.data = w->params + t->poff;
        return r;
    }
    r.data = w->mdata[i];
    r.scales = w->mscales[i];
    if (r.dtype == DT_I8 || r.dtype == DT_FP8) r.group = t->group;
    return r;
}

// Scales of matrix t: int8 one per group of each row, fp8 one per row.
size_t mdl_nscales(const mtensor *t) {
    size_t rows = (size_t)t->shape[0], K = (size_t)t->shape[1];
    return t->dtype == DT_I8 ? rows * ((K + (size_t)t->group - 1) / (size_t)t->group) : t->dtype == DT_FP8 ? rows : 0;
}

// Tensor `what` of layer l (fmt names it from l and what), or NULL.
static const mtensor *layer_tensor(const model_t *m, const char *fmt, int l, const char *what) {
    char name[96];
    snprintf(name, sizeof name, fmt, l, what);
    return mdl_find_tensor(m, name);
}

static float *param_of(const model_t *m, const weights *w, const char *fmt, int l, const char *what) {
    const mtensor *t = layer_tensor(m, fmt, l, what);
    return t ? w->params + t->poff : NULL;
}

static rl_mat layer_mat(const model_t *m, const weights *w, const char *fmt, int l, const char *what) {
    return mat_of(m, w, layer_tensor(m, fmt, l, what));
}

// Allocates a set of weights of the model's layout (contents zero) and points
// its layer structs into it.
void mdl_alloc_weights(const model_t *m, weights *w) {
    const char *A = "model.layers.%d.self_attn.%s", *P = "model.layers.%d.%s";
    memset(w, 0, sizeof *w);
    w->params = m->ops->alloc((m->nfloat ? m->nfloat : 1) * sizeof(float));
    w->mdata = xmalloc(m->nt * sizeof *w->mdata);
    w->mscales = xmalloc(m->nt * sizeof *w->mscales);
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        w->mdata[i] = mdl_stored_apart(t) ? m->ops->alloc(t->n * dt_size(t->dtype)) : NULL;
        w->mscales[i] = mdl_nscales(t) ? m->ops->alloc(mdl_nscales(t) * sizeof(float)) : NULL;
    }
    w->embed = mat_of(m, w, mdl_find_tensor(m, "model.embed_tokens.weight"));
    w->head = m->c.tie_embeddings ? w->embed : mat_of(m, w, mdl_find_tensor(m, "lm_head.weight"));
    w->norm = w->params + mdl_find_tensor(m, "model.norm.weight")->poff;
    w->L = xmalloc((size_t)m->c.layers * sizeof *w->L);
    for (int l = 0; l < m->c.layers; l++) {
        layer_w *L = &w->L[l];
        L->attn_norm = param_of(m, w, P, l, "input_layernorm.weight");
        L->mlp_norm = param_of(m, w, P, l, "post_attention_layernorm.weight");
        L->q = layer_mat(m, w, A, l, "q_proj.weight");
        L->k = layer_mat(m, w, A, l, "k_proj.weight");
        L->v = layer_mat(m, w, A, l, "v_proj.weight");
        L->o = layer_mat(m, w, A, l, "o_proj.weight");
        L->gate = layer_mat(m, w, P, l, "mlp.gate_proj.weight");
        L->up = layer_mat(m, w, P, l, "mlp.up_proj.weight");
        L->down = layer_mat(m, w, P, l, "mlp.down_proj.weight");
        L->bq = param_of(m, w, A, l, "q_proj.bias");
        L->bk = param_of(m, w, A, l, "k_proj.bias");
        L->bv = param_of(m, w, A, l, "v_proj.bias");
        L->bo = param_of(m, w, A, l, "o_proj.bias");
        L->qn = param_of(m, w, A, l, "q_norm.weight");
        L->kn = param_of(m, w, A, l, "k_norm.weight");
        L->bgate = param_of(m, w, P, l, "mlp.gate_proj.bias");
        L->bup = param_of(m, w, P, l, "mlp.up_proj.bias");
        L->bdown = param_of(m, w, P, l, "mlp.down_proj.bias");
    }
}

void mdl_free_weights(const model_t *m, weights *w) {
    for (size_t i = 0; w->mdata && i < m->nt; i++) {
        if (w->mdata[i]) m->ops->free(w->mdata[i]);
        if (w->mscales[i]) m->ops->free(w->mscales[i]);
    }
    free(w->mdata);
    free(w->mscales);
    if (w->params) m->ops->free(w->params);
    free(w->L);
    memset(w, 0, sizeof *w);
}

// Rows [r0, r0 + rows) of matrix t in w at its dtype, from f32 host values
// x (rows, cols). Int8 and fp8 scales are per row or group of a row, so any
// whole rows convert exactly as the whole matrix would.
static void convert_rows(const model_t *m, weights *w, const mtensor *t, const float *x, size_t r0, size_t rows) {
    size_t i = (size_t)(t - m->t), K = (size_t)t->shape[1], n = rows * K, es = dt_size(t->dtype);
    size_t per_row = mdl_nscales(t) / (size_t)t->shape[0];
    void *conv = xmalloc(n * es);
    float *sc = per_row ? xmalloc(rows * per_row * sizeof(float)) : NULL;
    switch (t->dtype) {
    case DT_BF16: dt_f32_to_bf16(conv, x, n); break;
    case DT_F16: dt_f32_to_f16(conv, x, n); break;
    case DT_I8: dt_quantize_i8(conv, sc, x, rows, K, t->group); break;
    case DT_FP8: dt_quantize_fp8(conv, sc, x, rows, K); break;
    case DT_F32: break;
    }
    if (sc) m->ops->upload(w->mscales[i] + r0 * per_row, sc, rows * per_row * sizeof(float));
    m->ops->upload((char *)w->mdata[i] + r0 * K * es, conv, n * es);
    free(sc);
    free(conv);
}

// Elements [off, off + n) of tensor t in w from f32 host values x: its f32
// parameters, or for a matrix stored apart its rows at its dtype
// (off and n then whole rows).
void mdl_put_f32(const model_t *m, weights *w, const mtensor *t, size_t off, size_t n, const float *x) {
    if (!mdl_stored_apart(t)) {
        m->ops->upload(w->params + t->poff + off, x, n * sizeof(float));
        return;
    }
    size_t K = (size_t)t->shape[1];
    convert_rows(m, w, t, x, off / K, n / K);
}

// ---- Standby weights --------------------------------------------------------

// t's values in w as f32 (n, host): a matrix stored at another dtype widened
// (int8: dequantized).
void mdl_get_f32(const model_t *m, const weights *w, const mtensor *t, float *out) {
    if (!mdl_stored_apart(t)) {
        m->ops->download(out, w->params + t->poff, t->n * sizeof(float));
        return;
    }
    size_t i = (size_t)(t - m->t);
    size_t es = dt_size(t->dtype), ns = mdl_nscales(t), rows = (size_t)t->shape[0], K = (size_t)t->shape[1];
    void *q = xmalloc(t->n * es);
    float *sc = ns ? xmalloc(ns * sizeof(float)) : NULL;
    m->ops->download(q, w->mdata[i], t->n * es);
    if (sc) m->ops->download(sc, w->mscales[i], ns * sizeof(float));
    switch (t->dtype) {
    case DT_I8: dt_dequantize_i8(out, q, sc, rows, K, t->group); break;
    case DT_FP8: dt_dequantize_fp8(out, q, sc, rows, K); break;
    case DT_BF16: dt_bf16_to_f32(out, q, t->n); break;
    case DT_F16: dt_f16_to_f32(out, q, t->n); break;
    case DT_F32: break;
    }
    free(sc);
    free(q);
}

model_weights *model_weights_new(const model_t *m) {
    model_weights *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    mdl_alloc_weights(m, &w->w);
    return w;
}

void model_weights_free(const model_t *m, model_weights *w) {
    if (!w) return;
    mdl_free_weights(m, &w->w);
    free(w->stage);
    free(w);
}

int model_weights_put(const model_t *m, model_weights *w, size_t i, size_t off, size_t n, rl_dtype wire,
                      const void *data) {
    if (i >= m->nt) return -1;
    const mtensor *t = &m->t[i];
    size_t K = t->ndim == 2 ? (size_t)t->shape[1] : 1;
    if (off > t->n || n > t->n - off || (mdl_stored_apart(t) && (off % K || n % K))) return -1;
    if (wire != DT_F32 && wire != DT_BF16 && wire != DT_F16) return -1;
    if (mdl_stored_apart(t) && wire == t->dtype) {   // as sent: widening and rounding again gives the same bits
        m->ops->upload((char *)w->w.mdata[i] + off * dt_size(wire), data, n * dt_size(wire));
        return 0;
    }
    const float *x = data;
    if (wire != DT_F32) {
        if (w->stage_n < n) {
            free(w->stage);
            w->stage = xmalloc(n * sizeof(float));
            w->stage_n = n;
        }
        if (wire == DT_BF16) dt_bf16_to_f32(w->stage, data, n);
        else dt_f16_to_f32(w->stage, data, n);
        x = w->stage;
    }
    mdl_put_f32(m, &w->w, t, off, n, x);
    return 0;
}

void model_weights_swap(model_t *m, model_weights *w) {
    weights tmp = m->w;
    m->w = w->w;
    w->w = tmp;
}
