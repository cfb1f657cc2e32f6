// model_train.c — the training state: gradients and AdamW moments (over a
// range of the parameters, for ZeRO), the optimizer step, and each tensor's
// values (parameters, gradients, moments) read and written as f32.
#include "model/model_internal.h"

#include <stdlib.h>

static float *state_of(const model_t *m, int which);

// Training writes the f32 parameters in place (the optimizer, and with
// ZeRO a collective): no matrix of them is fixed any more.
static void unfix_params(model_t *m) {
    weights *w = &m->w;
    w->embed.fixed = w->embed.dtype != DT_F32;
    w->head.fixed = w->head.dtype != DT_F32;
    for (int l = 0; l < m->c.layers; l++) {
        layer_w *L = &w->L[l];
        rl_mat *mats[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) mats[i]->fixed = mats[i]->dtype != DT_F32;
    }
}

int model_train_init_range(model_t *m, size_t lo, size_t hi, rl_err *err) {
    if (m->o.dtype != DT_F32 || m->o.act != DT_F32)
        return err_set(err, "training needs f32 weights and activations; this model computes at %s",
                       mdl_prec_name(m));
    if (lo > hi || hi > m->nparams)
        return err_set(err, "optimizer range [%zu, %zu) outside the model's %zu parameters", lo, hi, m->nparams);
    if (m->grads) return m->mlo == lo && m->mhi == hi ? 0 : err_set(err, "model_train_init: already another range");
    m->grads = m->ops->alloc(m->nparams * sizeof(float));
    unfix_params(m);
    size_t n = hi - lo ? hi - lo : 1;
    m->exp_avg = m->ops->alloc(n * sizeof(float));
    m->exp_avg_sq = m->ops->alloc(n * sizeof(float));
    m->mlo = lo;
    m->mhi = hi;
    return 0;
}

int model_train_init(model_t *m, rl_err *err) { return model_train_init_range(m, 0, m->nparams, err); }

void model_train_range(const model_t *m, size_t *lo, size_t *hi) {
    *lo = m->mlo;
    *hi = m->mhi;
}

float *model_train_buffer(const model_t *m, int which) {
    return m->grads ? state_of(m, which) : NULL;
}

const float *model_host_params(const model_t *m) {
    if (!m->ops->host_memory || !m->w.params) return NULL;
    for (size_t i = 0, at = 0; i < m->nt; at += m->t[i].n, i++)   // every tensor in params, in order
        if (m->t[i].poff != at) return NULL;
    return m->w.params;
}

const rl_ops *model_ops(const model_t *m) { return m->ops; }

void model_zero_grad(model_t *m) {
    if (m->grads) m->ops->zero(m->grads, m->nparams);
}

double model_grad_sumsq(const model_t *m) {
    return m->grads ? m->ops->sumsq(m->grads + m->mlo, m->mhi - m->mlo) : 0;
}

// Tensor t's elements that lie in the moments' range: [*a, *b) of the flat
// order; 0 when none.
static int in_range(const model_t *m, const mtensor *t, size_t *a, size_t *b) {
    *a = t->off > m->mlo ? t->off : m->mlo;
    *b = t->off + t->n < m->mhi ? t->off + t->n : m->mhi;
    return *a < *b;
}

void model_adamw(model_t *m, const rl_adamw *h) {
    if (!m->grads) return;
    rl_adamw nodecay = *h;
    nodecay.wd = 0;
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        size_t a, b;
        if (in_range(m, t, &a, &b))
            m->ops->adamw(m->w.params + a, m->grads + a, m->exp_avg + (a - m->mlo), m->exp_avg_sq + (a - m->mlo),
                          b - a, t->ndim == 2 ? h : &nodecay);
    }
}

void model_sync(const model_t *m) { m->ops->sync(); }

size_t model_ntensors(const model_t *m) { return m->nt; }

model_tensor model_tensor_at(const model_t *m, size_t i) {
    const mtensor *t = &m->t[i];
    return (model_tensor){.name = t->name, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]}, .n = t->n,
                          .stored = t->dtype, .group = t->group};
}

static float *state_of(const model_t *m, int which) {
    switch (which) {
    case MODEL_PARAM: return m->w.params;
    case MODEL_GRAD: return m->grads;
    case MODEL_EXP_AVG: return m->exp_avg;
    case MODEL_EXP_AVG_SQ: return m->exp_avg_sq;
    }
    return NULL;
}

int model_tensor_get(const model_t *m, int which, size_t i, float *out) {
    const float *base = state_of(m, which);
    if (!base || i >= m->nt) return -1;
    const mtensor *t = &m->t[i];
    size_t a, b;
    if (which == MODEL_EXP_AVG || which == MODEL_EXP_AVG_SQ) {
        if (in_range(m, t, &a, &b)) m->ops->download(out + (a - t->off), base + (a - m->mlo), (b - a) * sizeof(float));
        return 0;
    }
    if (which != MODEL_PARAM) {
        m->ops->download(out, base + t->off, t->n * sizeof(float));
        return 0;
    }
    if (!mdl_stored_apart(t)) {
        m->ops->download(out, base + t->poff, t->n * sizeof(float));
        return 0;
    }
    size_t es = dt_size(t->dtype), ns = mdl_nscales(t), rows = (size_t)t->shape[0], K = (size_t)t->shape[1];
    void *q = xmalloc(t->n * es);
    float *sc = ns ? xmalloc(ns * sizeof(float)) : NULL;
    m->ops->download(q, m->w.mdata[i], t->n * es);
    if (sc) m->ops->download(sc, m->w.mscales[i], ns * sizeof(float));
    switch (t->dtype) {
    case DT_I8: dt_dequantize_i8(out, q, sc, rows, K, t->group); break;
    case DT_FP8: dt_dequantize_fp8(out, q, sc, rows, K); break;
    case DT_BF16: dt_bf16_to_f32(out, q, t->n); break;
    case DT_F16: dt_f16_to_f32(out, q, t->n); break;
    case DT_F32: break;
    }
    free(sc);
    free(q);
    return 0;
}

int model_tensor_set(model_t *m, int which, size_t i, const float *in) {
    float *base = state_of(m, which);
    if (!base || i >= m->nt || (which == MODEL_PARAM && m->o.dtype != DT_F32)) return -1;
    const mtensor *t = &m->t[i];
    size_t a, b;
    if (which == MODEL_EXP_AVG || which == MODEL_EXP_AVG_SQ) {
        if (in_range(m, t, &a, &b)) m->ops->upload(base + (a - m->mlo), in + (a - t->off), (b - a) * sizeof(float));
        return 0;
    }
    m->ops->upload(base + t->off, in, t->n * sizeof(float));
    return 0;
}
