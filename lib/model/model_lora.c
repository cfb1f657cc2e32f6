// model_lora.c — LoRA adapters attached to a model for training
// (model_lora_attach): their table and parameters, which the training state
// covers instead of the base's, PEFT's initialisation, and the adapters'
// part of the forward and the backward of a targeted product:
//   out = W x + scale · B (A x),   A (R, in), B (out, R).
#include "model/model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

mparams mdl_params(const model_t *m) {
    if (m->lora) return (mparams){m->lora->t, m->lora->nt, m->lora->nparams, m->lora->params};
    return (mparams){m->t, m->nt, m->nparams, m->w.params};
}

const lora_config *model_lora(const model_t *m) { return m->lora ? &m->lora->c : NULL; }

static void add_lora_tensor(mlora *L, int layer, int target, int ab, int64_t d0, int64_t d1) {
    L->t = xrealloc(L->t, (L->nt + 1) * sizeof *L->t);
    mtensor *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    lora_tensor_name(t->name, sizeof t->name, layer, target, ab);
    t->ndim = 2;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->n = (size_t)d0 * (size_t)d1;
    t->off = t->poff = L->nparams;
    t->is_mat = 1;
    t->dtype = DT_F32;
    L->nparams += t->n;
}

int model_lora_attach(model_t *m, const lora_config *c, const lora_adapter *a, uint64_t seed, rl_err *err) {
    if (m->lora) return err_set(err, "the model has adapters already");
    if (m->grads) return err_set(err, "adapters are attached before the training state");
    if (m->o.act != DT_F32 || (m->o.dtype != DT_F32 && m->o.dtype != DT_BF16))
        return err_set(err, "LoRA trains on an f32 or bf16 base with f32 activations; this model computes at %s",
                       mdl_prec_name(m));
    if (c->rank < 1 || !(c->targets & LORA_ALL) || (c->targets & ~LORA_ALL))
        return err_set(err, "LoRA: rank %d and targets %#x: a rank of at least 1 and at least one target", c->rank,
                       c->targets);
    if (a && (a->layers != m->c.layers || a->c.rank != c->rank || a->c.targets != c->targets))
        return err_set(err, "LoRA: the adapter's layers, rank or targets differ from the config's");
    int L = m->c.layers, R = c->rank;
    mlora *lo = xmalloc(sizeof *lo);
    memset(lo, 0, sizeof *lo);
    lo->c = *c;
    lo->scale = lora_scale(c);
    for (int t = 0; t < LORA_NT; t++) lo->ntargets += (c->targets >> t) & 1;
    for (int l = 0; l < L; l++)
        for (int t = 0; t < LORA_NT; t++) {
            if (!(c->targets >> t & 1)) continue;
            int out, in;
            lora_dims(&m->c, t, &out, &in);
            add_lora_tensor(lo, l, t, 0, R, in);
            add_lora_tensor(lo, l, t, 1, out, R);
        }
    // The values: a's, or PEFT's: A ~ kaiming_uniform_(a = sqrt 5), which
    // is U(−1/sqrt(in), 1/sqrt(in)), and B = 0.
    float *host = xmalloc(lo->nparams * sizeof(float));
    rl_rng rng;
    rng_seed(&rng, seed);
    lo->a = xmalloc((size_t)L * LORA_NT * sizeof *lo->a);
    lo->b = xmalloc((size_t)L * LORA_NT * sizeof *lo->b);
    memset(lo->a, 0, (size_t)L * LORA_NT * sizeof *lo->a);
    memset(lo->b, 0, (size_t)L * LORA_NT * sizeof *lo->b);
    lo->params = m->ops->alloc(lo->nparams * sizeof(float));
    size_t i = 0;
    for (int l = 0; l < L; l++)
        for (int t = 0; t < LORA_NT; t++) {
            if (!(c->targets >> t & 1)) continue;
            const mtensor *ta = &lo->t[i], *tb = &lo->t[i + 1];
            int k = l * LORA_NT + t, out = (int)tb->shape[0], in = (int)ta->shape[1];
            float *ha = host + ta->off, *hb = host + tb->off;
            if (a) {
                memcpy(ha, a->a[k], ta->n * sizeof(float));
                memcpy(hb, a->b[k], tb->n * sizeof(float));
            } else {
                float bound = 1.0f / sqrtf((float)in);
                for (size_t e = 0; e < ta->n; e++) ha[e] = (float)((2 * rng_uniform(&rng) - 1) * bound);
                memset(hb, 0, tb->n * sizeof(float));
            }
            lo->a[k] = (rl_mat){.dtype = DT_F32, .rows = R, .cols = in, .data = lo->params + ta->off};
            lo->b[k] = (rl_mat){.dtype = DT_F32, .rows = out, .cols = R, .data = lo->params + tb->off};
            i += 2;
        }
    m->ops->upload(lo->params, host, lo->nparams * sizeof(float));
    free(host);
    // The workspaces are laid out again with the adapters' buffers.
    mdl_group_free(m, &m->work, mdl_work_table);
    mdl_group_free(m, &m->train, mdl_train_table);
    m->lora = lo;
    return 0;
}

lora_adapter *model_lora_get(const model_t *m) {
    const mlora *lo = m->lora;
    if (!lo) return NULL;
    lora_adapter *a = lora_new(&lo->c, &m->c);
    for (int k = 0; k < m->c.layers * LORA_NT; k++) {
        if (!lo->a[k].data) continue;
        m->ops->download(a->a[k], lo->a[k].data, (size_t)lo->a[k].rows * lo->a[k].cols * sizeof(float));
        m->ops->download(a->b[k], lo->b[k].data, (size_t)lo->b[k].rows * lo->b[k].cols * sizeof(float));
    }
    return a;
}

void mdl_lora_free(model_t *m) {
    mlora *lo = m->lora;
    if (!lo) return;
    m->ops->free(lo->params);
    free(lo->t);
    free(lo->a);
    free(lo->b);
    free(lo);
    m->lora = NULL;
}

float *mdl_lora_saved(const model_t *m, const saved *s, int t, int N) {
    const mlora *lo = m->lora;
    if (!lo || !s->lora || !(lo->c.targets >> t & 1)) return NULL;
    int j = 0;   // t's place among the targets
    for (int u = 0; u < t; u++) j += (lo->c.targets >> u) & 1;
    return s->lora + (size_t)j * N * lo->c.rank;
}

void mdl_lora_forward(model_t *m, int l, int t, const float *x, float *out, float *ts, int N) {
    const mlora *lo = m->lora;
    if (!lo || !(lo->c.targets >> t & 1)) return;
    const rl_ops *o = m->ops;
    const rl_mat *A = &lo->a[l * LORA_NT + t], *B = &lo->b[l * LORA_NT + t];
    float *ax = ts ? ts : m->lt;
    o->matmul(ax, x, A, NULL, N);                  // (N, R) A x
    o->matmul(m->lu, ax, B, NULL, N);              // (N, out) B A x
    o->scale(m->lu, lo->scale, (size_t)N * B->rows);
    o->add(out, m->lu, (size_t)N * B->rows);       // as PEFT: W x + (B A x) · scale
    if (ts) o->scale(ts, lo->scale, (size_t)N * A->rows);   // kept as scale · A x for B's gradient
}

void mdl_lora_backward(model_t *m, int l, int t, const float *x, const float *ts, const float *dout, float *dx,
                       int N) {
    const mlora *lo = m->lora;
    if (!lo || !(lo->c.targets >> t & 1)) return;
    const rl_ops *o = m->ops;
    const rl_mat *A = &lo->a[l * LORA_NT + t], *B = &lo->b[l * LORA_NT + t];
    float *gA = m->grads + ((const float *)A->data - lo->params), *gB = m->grads + ((const float *)B->data - lo->params);
    int R = A->rows;
    o->matmul_dw(gB, NULL, dout, ts, N, B->rows, R);   // dB += doutᵀ · (scale · A x)
    o->matmul_dx(m->ldt, dout, B, N, 0);             // d(A x) = scale · dout · B
    o->scale(m->ldt, lo->scale, (size_t)N * R);
    o->matmul_dw(gA, NULL, m->ldt, x, N, R, A->cols);   // dA += d(A x)ᵀ · x
    o->matmul_dx(dx, m->ldt, A, N, 1);               // dx += d(A x) · A
}

int mdl_lora_module(const char *name) {
    int l, n = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &n) != 1 || n == 0 || l < 0) return -1;
    for (int t = 0; t < LORA_NT; t++) {
        char want[64];
        snprintf(want, sizeof want, "%s.%s.weight", t <= LORA_O ? "self_attn" : "mlp", lora_target_names[t]);
        if (!strcmp(name + n, want)) return l * LORA_NT + t;
    }
    return -1;
}

void mdl_lora_merge(const model_t *m, float *W, int out, int in, const float *B, const float *A, int r, float scale) {
    const rl_ops *o = m->ops;
    if (!o->host_memory) {   // a GPU's: its cuBLAS handle is not the receiver thread's to share
        lora_merge(W, out, in, B, A, r, scale);
        return;
    }
    size_t nw = (size_t)out * in;
    float *at = xmalloc((size_t)in * r * sizeof(float));   // Aᵀ (in, r): matmul multiplies by a matrix's transpose
    for (int k = 0; k < r; k++)
        for (int j = 0; j < in; j++) at[(size_t)j * r + k] = A[(size_t)k * in + j];
    float *db = o->alloc((size_t)out * r * sizeof(float)), *dat = o->alloc((size_t)in * r * sizeof(float));
    float *prod = o->alloc(nw * sizeof(float));
    o->upload(db, B, (size_t)out * r * sizeof(float));
    o->upload(dat, at, (size_t)in * r * sizeof(float));
    rl_mat AT = {.dtype = DT_F32, .rows = in, .cols = r, .data = dat};
    o->matmul(prod, db, &AT, NULL, out);   // (out, in) B A
    o->scale(prod, scale, nw);
    float *host = xmalloc(nw * sizeof(float));
    o->download(host, prod, nw * sizeof(float));
    for (size_t i = 0; i < nw; i++) W[i] += host[i];
    free(host);
    free(at);
    o->free(db);
    o->free(dat);
    o->free(prod);
}
