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
    if (!m->lora && (m->o.dtype != DT_F32 || m->o.act != DT_F32))
        return err_set(err, "training needs f32 weights and activations; this model computes at %s",
                       mdl_prec_name(m));
    size_t np = mdl_params(m).n;
    if (lo > hi || hi > np)
        return err_set(err, "optimizer range [%zu, %zu) outside the model's %zu parameters", lo, hi, np);
    if (m->grads) return m->mlo == lo && m->mhi == hi ? 0 : err_set(err, "model_train_init: already another range");
    m->grads = m->ops->alloc(np * sizeof(float));
    if (!m->lora) unfix_params(m);   // under LoRA the base stays fixed: only the adapters change
    size_t n = hi - lo ? hi - lo : 1;
    m->exp_avg = m->ops->alloc(n * sizeof(float));
    m->exp_avg_sq = m->ops->alloc(n * sizeof(float));
    m->mlo = lo;
    m->mhi = hi;
    return 0;
}

int model_train_init(model_t *m, rl_err *err) { return model_train_init_range(m, 0, mdl_params(m).n, err); }

void model_train_range(const model_t *m, size_t *lo, size_t *hi) {
    *lo = m->mlo;
    *hi = m->mhi;
}

float *model_train_buffer(const model_t *m, int which) {
    return m->grads ? state_of(m, which) : NULL;
}

const float *model_host_params(const model_t *m) {
    mparams P = mdl_params(m);
    if (!m->ops->host_memory || !P.params) return NULL;
    for (size_t i = 0, at = 0; i < P.nt; at += P.t[i].n, i++)   // every tensor in params, in order
        if (P.t[i].poff != at) return NULL;
    return P.params;
}

const float *model_host_moments(const model_t *m, int which) {
    if (!m->grads || !m->ops->host_memory || m->mlo != 0 || m->mhi != mdl_params(m).n) return NULL;
    if (which != MODEL_EXP_AVG && which != MODEL_EXP_AVG_SQ) return NULL;
    return state_of(m, which);   // (offset t->off − mlo of each tensor: the flat order)
}

const rl_ops *model_ops(const model_t *m) { return m->ops; }

void model_set_recompute(model_t *m, int on) {
    if (m->recompute == !!on) return;
    mdl_group_free(m, &m->train, mdl_train_table);   // laid out again for the next batch
    m->recompute = !!on;
}

void model_zero_grad(model_t *m) {
    if (m->grads) m->ops->zero(m->grads, mdl_params(m).n);
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
    mparams P = mdl_params(m);
    for (size_t i = 0; i < P.nt; i++) {
        const mtensor *t = &P.t[i];
        size_t a, b;
        if (in_range(m, t, &a, &b))
            m->ops->adamw(P.params + a, m->grads + a, m->exp_avg + (a - m->mlo), m->exp_avg_sq + (a - m->mlo),
                          b - a, t->ndim == 2 ? h : &nodecay);
    }
}

void model_sync(const model_t *m) { m->ops->sync(); }

size_t model_ntensors(const model_t *m) { return mdl_params(m).nt; }

model_tensor model_tensor_at(const model_t *m, size_t i) {
    const mtensor *t = &mdl_params(m).t[i];
    return (model_tensor){.name = t->name, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]}, .n = t->n,
                          .stored = t->dtype, .group = t->group};
}

static float *state_of(const model_t *m, int which) {
    switch (which) {
    case MODEL_PARAM: return mdl_params(m).params;
    case MODEL_GRAD: return m->grads;
    case MODEL_EXP_AVG: return m->exp_avg;
    case MODEL_EXP_AVG_SQ: return m->exp_avg_sq;
    }
    return NULL;
}

int model_tensor_get(const model_t *m, int which, size_t i, float *out) {
    const float *base = state_of(m, which);
    mparams P = mdl_params(m);
    if (!base || i >= P.nt) return -1;
    const mtensor *t = &P.t[i];
    size_t a, b;
    if (which == MODEL_EXP_AVG || which == MODEL_EXP_AVG_SQ) {
        if (in_range(m, t, &a, &b)) m->ops->download(out + (a - t->off), base + (a - m->mlo), (b - a) * sizeof(float));
        return 0;
    }
    if (which != MODEL_PARAM) {
        m->ops->download(out, base + t->off, t->n * sizeof(float));
        return 0;
    }
    if (m->lora) m->ops->download(out, base + t->poff, t->n * sizeof(float));
    else mdl_get_f32(m, &m->w, t, out);
    return 0;
}

int model_tensor_set(model_t *m, int which, size_t i, const float *in) {
    float *base = state_of(m, which);
    mparams P = mdl_params(m);
    if (!base || i >= P.nt || (which == MODEL_PARAM && !m->lora && m->o.dtype != DT_F32)) return -1;
    const mtensor *t = &P.t[i];
    size_t a, b;
    if (which == MODEL_EXP_AVG || which == MODEL_EXP_AVG_SQ) {
        if (in_range(m, t, &a, &b)) m->ops->upload(base + (a - m->mlo), in + (a - t->off), (b - a) * sizeof(float));
        return 0;
    }
    m->ops->upload(base + t->off, in, t->n * sizeof(float));
    return 0;
}
