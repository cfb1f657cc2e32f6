// model.c — the Llama-family decoder (model.h) written against the backend
// interface (ops.h). Parameters live in one f32 allocation of the backend, in
// the order of a table of Hugging Face tensor names; matrices used for
// products may in addition be stored at the sampler's precision.
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "model/ops.h"
#include "rng.h"

// Under AddressSanitizer the buffers that share a block keep guards between
// them (WBUF_GUARD below), so that an overrun of one is still reported.
#if defined(__SANITIZE_ADDRESS__)
#define MODEL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MODEL_ASAN 1
#endif
#endif
#ifdef MODEL_ASAN
#include <sanitizer/asan_interface.h>
#endif

// Rows of the output layer computed at once: (rows, V) logits of at most
// 32 MiB (about what the last-level cache holds), and at most 256 rows.
static int logit_rows(int V) {
    int r = (8 << 20) / V;
    return r < 16 ? 16 : r > 256 ? 256 : r;
}

// A group of workspace buffers: one block of the backend for up to cap tokens.
typedef struct {
    void *block;
    int cap;
} wgroup;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    size_t off, n;             // in the table's layout of every parameter (gradients, moments), in floats
    size_t poff;               // into a weights set's params; SIZE_MAX for a matrix stored apart
                               // (equal to off in f32 models, the only ones that train)
    int is_mat;                // a 2-D weight used in products
    rl_dtype dtype;            // is_mat: stored at (DT_F32: in params), else DT_F32
    int group;                 // its int8 inputs per scale (the row's length: one per row)
    rl_act act;                // its products' input rounding (ops.h)
} mtensor;

typedef struct {
    float *attn_norm, *mlp_norm;          // (C)
    rl_mat q, k, v, o, gate, up, down;    // (NH·HS, C) (NKV·HS, C) (NKV·HS, C) (C, NH·HS) (F, C) (F, C) (C, F)
    float *bq, *bk, *bv, *bo;             // biases or NULL
    float *qn, *kn;                       // (HS) qwen3's RMSNorm of each q and k head, or NULL
    float *bgate, *bup, *bdown;           // (F) (F) (C) llama mlp_bias, or NULL
} layer_w;

// One complete set of weights. A model computes with one; a standby set
// (model_weights) has the same layout and is swapped in whole, pointers and all.
typedef struct {
    float *params;                        // backend: (nfloat) every tensor not stored apart, f32, table order
    void **mdata;                         // (nt) backend: tensor i at its dtype, for matrices
    float **mscales;                      //   stored apart (int8, fp8: and their scales), else NULL
    rl_mat embed, head;                   // (V, C); head is embed when tied
    float *norm;                          // (C)
    layer_w *L;
} weights;

struct model_weights {
    weights w;
    float *stage;                         // host (stage_n): a chunk converted to f32
    size_t stage_n;
};

struct model {
    model_config c;
    model_opts o;
    const rl_ops *ops;
    mtensor *t;
    size_t nt, nparams, nfloat;           // tensors, parameters, f32 parameters held (all for f32 models)
    weights w;                            // the weights in use
    float *cos_sin;                       // (max_pos, HS/2, 2)

    // Workspace: pointers into one block of the backend (work), shapes in work_table.
    int lrows;
    wgroup work;
    float *x, *xb, *xm, *q, *k, *v, *att, *hb, *hb2;
    int32_t *ids, *pos, *rows;
    rl_attn_seq *seqs;
    float *hrows, *logits, *itemp, *lp;
    float *ent, *dlogp;
    int32_t *sel, *tgt;
    double *su, *slogp;
    int32_t *stok;
    int32_t *frows;
    float *kvs_k, *kvs_v, *d_kvs_k, *d_kvs_v;

    // Training (model_train_init): gradient and AdamW moments, (nparams) each,
    // in the order of params.
    float *grads, *exp_avg, *exp_avg_sq;
    size_t mlo, mhi;                      // the moments hold parameters [mlo, mhi) of that order
    // Saved activations of the forward and gradients of activations:
    // pointers into one block (train), shapes in train_table.
    wgroup train;
    float *s_x, *s_n1, *s_q, *s_k, *s_v, *s_att, *s_lse, *s_xm, *s_n2, *s_gate, *s_up;
    float *d_x, *d_n, *d_q, *d_k, *d_v, *d_att, *d_h, *d_up;
    float *s_qr, *s_kr, *d_qr, *d_kr;     // qwen3 only, else NULL
    float *hraw, *dh;

    // KV cache: (L, slots·max_len, NKV·HS) each, of dtype kc_dt: bf16 where
    // the activations are bf16 (its keys and values are bf16 values already)
    // and the backend takes it, else f32
    int slots, max_len;
    void *kc, *vc;
    rl_dtype kc_dt;
    int *slot_len;
    unsigned char *slot_used;
    // The key/value rows that a forward with_cache stores and attends to: the
    // KV cache (kv_stride = slots·max_len rows a layer), or when scoring or
    // training shares prompts the work buffers kvs_k, kvs_v (one layer's rows
    // at a time: kv_stride 0), of dtype kv_dt.
    void *kvk, *kvv;
    rl_dtype kv_dt;
    size_t kv_stride;
    // The shared prefixes of the forward under way (model_step_seq.shared,
    // model_score_groups): fork f copies each layer's rows frows[off .. off +
    // n) to rows dst .. dst + n (frows is a work buffer).
    struct fork { int32_t dst, off, n; } *forks;
    int nforks, forks_cap;
};

// ---- The tensor table -------------------------------------------------------

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

static void build_table(model_t *m) {
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

static const mtensor *find_tensor(const model_t *m, const char *name) {
    for (size_t i = 0; i < m->nt; i++)
        if (strcmp(m->t[i].name, name) == 0) return &m->t[i];
    return NULL;
}

static int stored_apart(const mtensor *t) { return t->dtype != DT_F32; }

static const char *prec_name(const model_t *m) {
    const char *p = model_precision_name(&m->o);
    return p ? p : dt_name(m->o.dtype);
}

// The matrix of tensor t in w: at its dtype, or its f32 parameters (fixed
// until training starts: ops.h rl_mat).
static rl_mat mat_of(const model_t *m, const weights *w, const mtensor *t) {
    rl_mat r = {.dtype = t->dtype, .rows = (int)t->shape[0], .cols = (int)t->shape[1], .act = t->act,
                .fixed = stored_apart(t) || !m->grads};
    size_t i = (size_t)(t - m->t);
    if (!stored_apart(t)) {
        r.data = w->params + t->poff;
        return r;
    }
    r.data = w->mdata[i];
    r.scales = w->mscales[i];
    if (r.dtype == DT_I8 || r.dtype == DT_FP8) r.group = t->group;
    return r;
}

// Scales of matrix t: int8 one per group of each row, fp8 one per row.
static size_t nscales(const mtensor *t) {
    size_t rows = (size_t)t->shape[0], K = (size_t)t->shape[1];
    return t->dtype == DT_I8 ? rows * ((K + (size_t)t->group - 1) / (size_t)t->group) : t->dtype == DT_FP8 ? rows : 0;
}

// Tensor `what` of layer l (fmt names it from l and what), or NULL.
static const mtensor *layer_tensor(const model_t *m, const char *fmt, int l, const char *what) {
    char name[96];
    snprintf(name, sizeof name, fmt, l, what);
    return find_tensor(m, name);
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
static void alloc_weights(const model_t *m, weights *w) {
    const char *A = "model.layers.%d.self_attn.%s", *P = "model.layers.%d.%s";
    memset(w, 0, sizeof *w);
    w->params = m->ops->alloc((m->nfloat ? m->nfloat : 1) * sizeof(float));
    w->mdata = xmalloc(m->nt * sizeof *w->mdata);
    w->mscales = xmalloc(m->nt * sizeof *w->mscales);
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        w->mdata[i] = stored_apart(t) ? m->ops->alloc(t->n * dt_size(t->dtype)) : NULL;
        w->mscales[i] = nscales(t) ? m->ops->alloc(nscales(t) * sizeof(float)) : NULL;
    }
    w->embed = mat_of(m, w, find_tensor(m, "model.embed_tokens.weight"));
    w->head = m->c.tie_embeddings ? w->embed : mat_of(m, w, find_tensor(m, "lm_head.weight"));
    w->norm = w->params + find_tensor(m, "model.norm.weight")->poff;
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

static void free_weights(const model_t *m, weights *w) {
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
    size_t per_row = nscales(t) / (size_t)t->shape[0];
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
static void put_f32(const model_t *m, weights *w, const mtensor *t, size_t off, size_t n, const float *x) {
    if (!stored_apart(t)) {
        m->ops->upload(w->params + t->poff + off, x, n * sizeof(float));
        return;
    }
    size_t K = (size_t)t->shape[1];
    convert_rows(m, w, t, x, off / K, n / K);
}

// RoPE's inverse frequencies inv_freq (HS/2, radians per position) and the
// factor on cos and sin, as transformers 4.46's modeling_rope_utils computes
// them for each rope_scaling type (there in float32, here in double).
static double rope_freqs(const model_config *c, double *inv_freq) {
    const cfg_rope *r = &c->rope;
    int dim = c->head_dim, half = dim / 2;
    double base = c->rope_theta;
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0 / pow(base, 2.0 * i / dim);
    switch (r->type) {
    case CFG_ROPE_DEFAULT:
    case CFG_ROPE_DYNAMIC:      // equal to the default within the lengths cfg_max_seq allows
        return 1.0;
    case CFG_ROPE_LINEAR:
        for (int i = 0; i < half; i++) inv_freq[i] /= r->factor;
        return 1.0;
    case CFG_ROPE_LLAMA3: {
        // wavelengths shorter than original/high_freq_factor are kept, longer
        // than original/low_freq_factor divided by factor, those between blended
        double orig = r->original_max_pos, low_wl = orig / r->low_freq_factor, high_wl = orig / r->high_freq_factor;
        for (int i = 0; i < half; i++) {
            double f = inv_freq[i], wl = 2 * M_PI / f;
            if (wl > low_wl) {
                inv_freq[i] = f / r->factor;
            } else if (!(wl < high_wl)) {
                double s = (orig / wl - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
                inv_freq[i] = (1 - s) * f / r->factor + s * f;
            }
        }
        return 1.0;
    }
    case CFG_ROPE_YARN: {
        // dimensions below `low` keep their frequency, above `high` are
        // interpolated (divided by factor), a linear ramp between; bounds
        // from the rotations beta_fast and beta_slow over max_position_embeddings
        double fast = r->beta_fast > 0 ? r->beta_fast : 32, slow = r->beta_slow > 0 ? r->beta_slow : 1;
        double lo = floor(dim * log(c->max_pos / (fast * 2 * M_PI)) / (2 * log(base)));
        double hi = ceil(dim * log(c->max_pos / (slow * 2 * M_PI)) / (2 * log(base)));
        lo = lo > 0 ? lo : 0;
        hi = hi < dim - 1 ? hi : dim - 1;
        if (lo == hi) hi += 0.001;   // as transformers does, against a division by zero
        for (int i = 0; i < half; i++) {
            double ramp = (i - lo) / (hi - lo), keep = 1 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
            inv_freq[i] = inv_freq[i] / r->factor * (1 - keep) + inv_freq[i] * keep;
        }
        return r->attention_factor > 0 ? r->attention_factor : 0.1 * log(r->factor) + 1.0;
    }
    }
    return 1.0;
}

// The rope op's table (max_pos, HS/2, 2): scale · cos and scale · sin of
// pos · inv_freq[i], computed in double.
static void make_rope(model_t *m) {
    int half = m->c.head_dim / 2, P = m->c.max_pos;
    double *inv_freq = xmalloc((size_t)half * sizeof *inv_freq);
    double scale = rope_freqs(&m->c, inv_freq);
    float *cs = xmalloc((size_t)P * half * 2 * sizeof(float));
    for (int p = 0; p < P; p++)
        for (int i = 0; i < half; i++) {
            double a = p * inv_freq[i];
            cs[((size_t)p * half + i) * 2] = (float)(scale * cos(a));
            cs[((size_t)p * half + i) * 2 + 1] = (float)(scale * sin(a));
        }
    size_t bytes = (size_t)P * half * 2 * sizeof(float);
    m->cos_sin = m->ops->alloc(bytes);
    m->ops->upload(m->cos_sin, cs, bytes);
    free(cs);
    free(inv_freq);
}

// The dtype, group and input rounding of matrix t (model.h model_opts): with
// W8A8 the decoder layers' matrices at the model's dtype, one scale per
// output channel, the embedding and output layer bf16.
static void set_precision(const model_t *m, mtensor *t, int w8a8) {
    int outer = !strcmp(t->name, "model.embed_tokens.weight") || !strcmp(t->name, "lm_head.weight");
    t->dtype = w8a8 && outer ? DT_BF16 : m->o.dtype;
    t->group = t->dtype == DT_I8 ? (w8a8 ? (int)t->shape[1] : m->o.group) : t->dtype == DT_FP8 ? (int)t->shape[1] : 0;
    t->act = !w8a8 || outer ? ACT_F32 : t->dtype == DT_I8 ? ACT_I8 : ACT_FP8;
}

// A model's table and layout from its config, with no weights yet: what a
// weights file is checked against before any memory is taken.
static model_t *model_plan(const model_config *c, const model_opts *o, rl_err *err) {
    if (cfg_check(c, err) < 0) return NULL;
    model_opts opts = o ? *o : (model_opts){.dtype = DT_F32, .act = DT_F32};
    if (opts.act != DT_F32 && opts.act != DT_BF16)
        return err_set(err, "activations at %s: f32 or bf16 only", dt_name(opts.act)), NULL;
    int w8a8 = opts.act == DT_BF16 && (opts.dtype == DT_I8 || opts.dtype == DT_FP8);
    if (opts.dtype == DT_FP8 && !w8a8)
        return err_set(err, "fp8 weights need bf16 activations (W8A8)"), NULL;
    if (opts.dtype == DT_I8 && !w8a8) {
        if (opts.group == 0) opts.group = 32;
        if (opts.group != 32 && opts.group != 64)
            return err_set(err, "int8 group size %d: must be 32 or 64", opts.group), NULL;
    } else if (opts.group != 0) {
        return err_set(err, "a group size (%d) is for weight-only int8", opts.group), NULL;
    }
    if (c->head_dim % 2) {
        err_set(err, "head_dim %d: rotary embedding needs an even head size", c->head_dim);
        return NULL;
    }
    const rl_ops *ops = dev_ops(opts.device, err);
    if (!ops) return NULL;
    model_t *m = xmalloc(sizeof *m);
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->o = opts;
    m->ops = ops;
    m->lrows = logit_rows(c->vocab);
    build_table(m);
    for (size_t i = 0; i < m->nt; i++) {   // a model at another dtype keeps no f32 copy of its matrices
        mtensor *t = &m->t[i];
        if (t->is_mat) set_precision(m, t, w8a8);
        t->poff = stored_apart(t) ? SIZE_MAX : m->nfloat;
        if (!stored_apart(t)) m->nfloat += t->n;
    }
    return m;
}

// Bytes of one set of weights (alloc_weights).
static uint64_t weight_bytes(const model_t *m) {
    uint64_t b = (uint64_t)m->nfloat * sizeof(float);
    for (size_t i = 0; i < m->nt; i++)
        b += (uint64_t)m->t[i].n * (stored_apart(&m->t[i]) ? dt_size(m->t[i].dtype) : 0) +
             (uint64_t)nscales(&m->t[i]) * sizeof(float);
    return b;
}

// Allocates the planned weights, once they are known to fit: a config too
// large for this machine is an error that says so, not an abort. (The CPU
// backend's memory is the machine's; a GPU's is checked by its allocator.)
static int model_alloc(model_t *m, rl_err *err) {
    uint64_t need = weight_bytes(m);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!strcmp(m->ops->name, "cpu") && pages > 0 && page > 0 && need > (uint64_t)pages * (uint64_t)page)
        return err_set(err, "its weights need %.1f GiB at %s, more than this machine's %.1f GiB of memory",
                       (double)need / (1 << 30), prec_name(m), (double)pages * (double)page / (1 << 30));
    alloc_weights(m, &m->w);
    return 0;
}

static model_t *model_new(const model_config *c, const model_opts *o, rl_err *err) {
    model_t *m = model_plan(c, o, err);
    if (m && model_alloc(m, err)) {
        model_free(m);
        return NULL;
    }
    return m;
}

static model_t *finish_new(model_t *m) {
    make_rope(m);
    return m;
}

// ---- Loading and saving -----------------------------------------------------

static int is_ignored_tensor(const model_t *m, const char *name) {
    size_t n = strlen(name), s = strlen(".rotary_emb.inv_freq");
    if (n > s && strcmp(name + n - s, ".rotary_emb.inv_freq") == 0) return 1;   // a buffer older files keep
    return m->c.tie_embeddings && strcmp(name, "lm_head.weight") == 0;       // tied: the embedding is used
}

// Every tensor the config implies is in f with its shape, and no other (but
// those is_ignored_tensor names): checked before any weight memory is taken.
static int check_tensors(const model_t *m, const hfw_set *f, rl_err *err) {
    for (size_t i = 0; i < f->n; i++)
        if (!find_tensor(m, f->t[i]->name) && !is_ignored_tensor(m, f->t[i]->name))
            return err_set(err, "%s: tensor '%s' is not part of a %s model with this config.json", hfw_file(f, i),
                           f->t[i]->name, m->c.model_type);
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        const st_tensor *s = hfw_find(f, t->name);
        if (!s) return err_set(err, "%s: tensor '%s' is missing (config.json implies it)", f->where, t->name);
        int ok = s->ndim == t->ndim;
        for (int d = 0; ok && d < t->ndim; d++) ok = s->shape[d] == t->shape[d];
        if (!ok) {
            char have[128], want[64];
            st_shape_str(have, sizeof have, s->shape, s->ndim);
            st_shape_str(want, sizeof want, t->shape, t->ndim);
            return err_set(err, "%s: tensor '%s' has shape %s, config.json implies %s", f->where, t->name, have,
                           want);
        }
    }
    return 0;
}

// The weights from f (checked by check_tensors) into the model's.
static void load_tensors(model_t *m, const hfw_set *f) {
    float *stage = NULL;
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        const st_tensor *s = hfw_find(f, t->name);
        if (s->dtype == DT_F32 && ((uintptr_t)s->data & 3) == 0) {   // straight from the mapped file
            put_f32(m, &m->w, t, 0, t->n, s->data);
            continue;
        }
        stage = xrealloc(stage, t->n * sizeof(float));
        st_read_f32(s, stage);
        put_f32(m, &m->w, t, 0, t->n, stage);
    }
    free(stage);
}

model_t *model_load(const char *dir, const model_opts *o, rl_err *err) {
    char path[4096];
    model_config c;
    if (!dev_ops(o ? o->device : DEV_AUTO, err)) return NULL;   // said before any file is read
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (cfg_load(path, &c, err) < 0) return NULL;
    model_t *m = model_plan(&c, o, err);
    if (!m) {
        rl_err e2;
        err_set(&e2, "%s: %s", path, err->msg);
        *err = e2;
        return NULL;
    }
    // The files are checked against the config first, then the memory the
    // weights need against the machine's, and only then is it taken.
    hfw_set *f = hfw_open(dir, err);
    int rc = !f || check_tensors(m, f, err) ? -1 : 0;
    if (rc == 0 && model_alloc(m, err)) {
        rl_err e2;
        err_set(&e2, "%s: %s", path, err->msg);
        *err = e2;
        rc = -1;
    }
    if (rc == 0) load_tensors(m, f);
    hfw_close(f);
    if (rc) {
        model_free(m);
        return NULL;
    }
    return finish_new(m);
}

model_t *model_random(const model_config *c, uint64_t seed, float std, const model_opts *o, rl_err *err) {
    model_t *m = model_new(c, o, err);
    if (!m) return NULL;
    rl_rng rng;
    rng_seed(&rng, seed);
    float *stage = NULL;
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        int is_norm = strstr(t->name, "norm.weight") != NULL;
        stage = xrealloc(stage, t->n * sizeof(float));
        for (size_t j = 0; j < t->n; j++) stage[j] = is_norm ? 1.0f : (float)(rng_normal(&rng) * std);
        put_f32(m, &m->w, t, 0, t->n, stage);
    }
    free(stage);
    return finish_new(m);
}

int model_save_as(const model_t *m, const char *dir, const hfw_write_opts *o, rl_err *err) {
    float *host = xmalloc(m->nparams * sizeof(float));
    for (size_t i = 0; i < m->nt; i++) model_tensor_get(m, MODEL_PARAM, i, host + m->t[i].off);
    st_out *out = xmalloc(m->nt * sizeof *out);
    for (size_t i = 0; i < m->nt; i++) {
        out[i] = (st_out){.name = m->t[i].name, .ndim = m->t[i].ndim, .data = host + m->t[i].off};
        out[i].shape[0] = m->t[i].shape[0];
        out[i].shape[1] = m->t[i].shape[1];
    }
    int rc = hfw_save_model(dir, &m->c, out, m->nt, o, err);
    free(out);
    free(host);
    return rc;
}

int model_save(const model_t *m, const char *dir, rl_err *err) {
    return model_save_as(m, dir, &(hfw_write_opts){.dtype = DT_F32}, err);
}

// ---- Workspaces ---------------------------------------------------------------
// The activations of a batch, and for training the saved activations and the
// activation gradients, are two groups of buffers. Each group is a table of
// buffers and their shapes, from which one block of the backend is allocated
// and every pointer set (as llm.c does); a block grows with the batch and is
// reused by smaller ones.

// The activations of one layer over N tokens: where forward_train saves them
// for the backward, or the workspace that forward reuses for every layer.
typedef struct {
    float *n1, *q, *k, *v, *att, *lse, *xm, *n2, *gate, *up;   // lse may be NULL
    float *qr, *kr;           // q, k before qwen3's per-head norm (may be q, k: normed in place)
    float *x;                                                 // the layer's input (saved only)
} saved;

// One buffer of a group: the model's pointer at byte offset `field` of struct
// model points to `sets` consecutive sets (one per layer) of n elements of
// `size` bytes each; n = 0: no buffer (NULL). in_saved: the offset of the
// member of `saved` that a layer's set is (saved_at), or -1.
typedef struct {
    size_t field, size, sets, n;
    ptrdiff_t in_saved;
} wbuf;

#define WBUF(f, n) ((wbuf){offsetof(struct model, f), sizeof *((model_t *)0)->f, 1, (n), -1})
#define WBUF_SAVED(f, sets, n, member) \
    ((wbuf){offsetof(struct model, f), sizeof *((model_t *)0)->f, (sets), (n), offsetof(saved, member)})

// Each buffer's offset in its block is a multiple of WBUF_ALIGN bytes, the
// alignment of cudaMalloc (the CPU backend's is 64): every buffer is aligned
// as its block, as when each was an allocation of its own.
enum { WBUF_ALIGN = 256, WT_MAX = 32 };   // WT_MAX: buffers in a group's table
#ifdef MODEL_ASAN
enum { WBUF_GUARD = WBUF_ALIGN };   // poisoned bytes after each buffer (host memory only)
#else
enum { WBUF_GUARD = 0 };
#endif

// A group's table for N tokens into t; returns its length.
typedef size_t wbuf_table_fn(const model_t *m, size_t N, wbuf t[WT_MAX]);

// Bytes of buffer b and its padding up to the next buffer.
static size_t wbuf_bytes(const wbuf *b) {
    size_t bytes = b->sets * b->n * b->size;
    return (bytes + WBUF_ALIGN - 1) / WBUF_ALIGN * WBUF_ALIGN + WBUF_GUARD;
}

// The workspace for N tokens: one layer's activations, which forward reuses
// for every layer, and the batch's inputs and outputs.
static size_t work_table(const model_t *m, size_t N, wbuf t[WT_MAX]) {
    const model_config *c = &m->c;
    size_t C = (size_t)c->hidden, QD = (size_t)c->heads * c->head_dim, KVD = (size_t)c->kv_heads * c->head_dim,
           F = (size_t)c->inter, R = (size_t)m->lrows;
    const wbuf b[] = {
        WBUF(x, N * C),                      // (N, C) the residual stream
        WBUF(xb, N * C),                     // (N, C) the normed input of attention, then of the MLP
        WBUF(xm, N * C),                     // (N, C) the residual stream after attention
        WBUF(q, N * QD),                     // (N, NH, HS)
        WBUF(att, N * QD),                   // (N, NH, HS) attention's output
        WBUF(k, N * KVD),                    // (N, NKV, HS)
        WBUF(v, N * KVD),                    // (N, NKV, HS)
        WBUF(hb, N * F),                     // (N, F) gate, then the MLP's hidden product
        WBUF(hb2, N * F),                    // (N, F) up
        WBUF(ids, N),                        // (N) int32 tokens
        WBUF(pos, N),                        // (N) int32 their positions
        WBUF(rows, N),                       // (N) int32 their rows in the KV cache (model_step)
        WBUF(sel, N),                        // (N) int32 the rows that need logits
        WBUF(tgt, N),                        // (N) int32 and their targets (scoring)
        WBUF(itemp, N),                      // (N) 1 / temperature of each scored token
        WBUF(lp, N),                         // (N) log-probabilities of the scored tokens
        WBUF(ent, N),                        // (N) their entropies (nats)
        WBUF(dlogp, N),                      // (N) dloss/dlogp (training)
        WBUF(su, N),                         // (N) double: model_step_sample's uniforms
        WBUF(slogp, N),                      // (N) double: its log-probabilities
        WBUF(stok, N),                       // (N) int32: and its tokens
        WBUF(hrows, R * C),                  // (lrows, C) rows of the final norm, for the output layer
        WBUF(logits, R * (size_t)c->vocab),  // (lrows, V)
        WBUF(seqs, N),                       // (nseq) sequences; nseq <= N, as each has a token
        WBUF(frows, N),                      // (N) int32 the source rows of shared prefixes
        WBUF(kvs_k, N * KVD),                // (N, NKV, HS) one layer's keys when scoring or training shares prompts
        WBUF(kvs_v, N * KVD),                // (N, NKV, HS) and values
        WBUF(d_kvs_k, N * KVD),              // (N, NKV, HS) their gradients (model_backward)
        WBUF(d_kvs_v, N * KVD),              // (N, NKV, HS)
    };
    _Static_assert(sizeof b / sizeof *b <= WT_MAX, "work_table: raise WT_MAX");
    memcpy(t, b, sizeof b);
    return sizeof b / sizeof *b;
}

// What training adds for N tokens: the activations of every layer saved by
// forward_train for the backward, (L, N, width); the gradients of the
// activations of one layer at a time, (N, width); the output layer's rows.
static size_t train_table(const model_t *m, size_t N, wbuf t[WT_MAX]) {
    const model_config *c = &m->c;
    size_t L = (size_t)c->layers, C = (size_t)c->hidden, QD = (size_t)c->heads * c->head_dim,
           KVD = (size_t)c->kv_heads * c->head_dim, F = (size_t)c->inter, NH = (size_t)c->heads,
           R = (size_t)m->lrows;
    size_t qk = c->qk_norm ? 1 : 0;   // q and k before qwen3's per-head norm; other models have none
    const wbuf b[] = {
        WBUF_SAVED(s_x, L + 1, N * C, x),       // (L+1, N, C) the residual stream into each layer, and out of the last
        WBUF_SAVED(s_n1, L, N * C, n1),         // (L, N, C) its rmsnorm
        WBUF_SAVED(s_q, L, N * QD, q),          // (L, N, NH, HS) after RoPE
        WBUF_SAVED(s_k, L, N * KVD, k),         // (L, N, NKV, HS) after RoPE
        WBUF_SAVED(s_v, L, N * KVD, v),         // (L, N, NKV, HS)
        WBUF_SAVED(s_att, L, N * QD, att),      // (L, N, NH, HS) attention's output
        WBUF_SAVED(s_lse, L, N * NH, lse),      // (L, N, NH) log Σ exp(scores) of each query row
        WBUF_SAVED(s_xm, L, N * C, xm),         // (L, N, C) the residual stream after attention
        WBUF_SAVED(s_n2, L, N * C, n2),         // (L, N, C) its rmsnorm
        WBUF_SAVED(s_gate, L, N * F, gate),     // (L, N, F)
        WBUF_SAVED(s_up, L, N * F, up),         // (L, N, F)
        WBUF(d_x, N * C),                       // (N, C) dloss/d(residual stream)
        WBUF(d_n, N * C),                       // (N, C) dloss/d(a normed input)
        WBUF(d_q, N * QD),                      // (N, NH, HS)
        WBUF(d_k, N * KVD),                     // (N, NKV, HS)
        WBUF(d_v, N * KVD),                     // (N, NKV, HS)
        WBUF(d_att, N * QD),                    // (N, NH, HS)
        WBUF(d_h, N * F),                       // (N, F) forward_train's hidden product, then dh and dgate
        WBUF(d_up, N * F),                      // (N, F) the hidden product again, then dup
        WBUF(hraw, R * C),                      // (lrows, C) output layer rows before the final norm
        WBUF(dh, R * C),                        // (lrows, C) dloss/d(rows after the final norm)
        WBUF_SAVED(s_qr, L, qk * N * QD, qr),   // (L, N, NH, HS) qwen3
        WBUF_SAVED(s_kr, L, qk * N * KVD, kr),  // (L, N, NKV, HS) qwen3
        WBUF(d_qr, qk * N * QD),                // (N, NH, HS) qwen3
        WBUF(d_kr, qk * N * KVD),               // (N, NKV, HS) qwen3
    };
    _Static_assert(sizeof b / sizeof *b <= WT_MAX, "train_table: raise WT_MAX");
    memcpy(t, b, sizeof b);
    return sizeof b / sizeof *b;
}

// Sets the pointers of table t (nt buffers) into block, in table order;
// block NULL: every pointer NULL.
static void group_point(model_t *m, const wbuf *t, size_t nt, char *block) {
    size_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        void *p = block && t[i].n ? block + off : NULL;
        memcpy((char *)m + t[i].field, &p, sizeof p);   // a float *, int32_t *, ... field
#ifdef MODEL_ASAN
        size_t used = t[i].sets * t[i].n * t[i].size;
        if (block && m->ops == ops_cpu()) ASAN_POISON_MEMORY_REGION(block + off + used, wbuf_bytes(&t[i]) - used);
#endif
        off += wbuf_bytes(&t[i]);
    }
}

// Frees group g and clears the pointers of its table.
static void group_free(model_t *m, wgroup *g, wbuf_table_fn *table) {
    wbuf t[WT_MAX];
    if (g->block) m->ops->free(g->block);
    *g = (wgroup){0};
    group_point(m, t, table(m, 0, t), NULL);
}

// Group g for N tokens: one zero-filled block of the backend for its table,
// kept while later batches fit. Regrown by a quarter at least: batches of
// varying sizes would otherwise map and clear a new block (hundreds of MB for
// a learner) each time one is a little larger than all before it.
static void group_reserve(model_t *m, wgroup *g, wbuf_table_fn *table, int N) {
    if (N <= g->cap) return;
    if (g->cap && N < g->cap + g->cap / 4) N = g->cap + g->cap / 4;
    group_free(m, g, table);
    wbuf t[WT_MAX];
    size_t nt = table(m, (size_t)N, t), bytes = 0;
    for (size_t i = 0; i < nt; i++) bytes += wbuf_bytes(&t[i]);
    g->block = m->ops->alloc(bytes);
    g->cap = N;
    group_point(m, t, nt, g->block);
}

// The workspace for N tokens in at most N sequences, for no fewer than 64.
static void reserve(model_t *m, int N) { group_reserve(m, &m->work, work_table, N < 64 ? 64 : N); }

static void free_cache(model_t *m) {
    if (m->kc) m->ops->free(m->kc);
    if (m->vc) m->ops->free(m->vc);
    free(m->slot_len);
    free(m->slot_used);
    m->kc = m->vc = NULL;
    m->slot_len = NULL;
    m->slot_used = NULL;
    m->slots = m->max_len = 0;
}

void model_free(model_t *m) {
    if (!m) return;
    group_free(m, &m->work, work_table);
    group_free(m, &m->train, train_table);
    free_cache(m);
    free(m->forks);
    float *train[] = {m->grads, m->exp_avg, m->exp_avg_sq};
    for (size_t i = 0; i < 3; i++)
        if (train[i]) m->ops->free(train[i]);
    free_weights(m, &m->w);
    if (m->cos_sin) m->ops->free(m->cos_sin);
    free(m->t);
    free(m);
}

const model_config *model_cfg(const model_t *m) { return &m->c; }
rl_dtype model_dtype(const model_t *m) { return m->o.dtype; }
const model_opts *model_options(const model_t *m) { return &m->o; }
const char *model_device(const model_t *m) { return m->ops->name; }
size_t model_nparams(const model_t *m) { return m->nparams; }

// ---- The forward pass -------------------------------------------------------

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
static void layer_forward(model_t *m, int l, const float *x, float *next, const saved *s, float *h, int N, int nseq,
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
    act_round(m, s->xm, NC);
    o->add(s->xm, x, NC);
    act_round(m, s->xm, NC);
    o->rmsnorm(s->n2, s->xm, L->mlp_norm, N, C, eps);
    act_round(m, s->n2, NC);
    matmul_many(o, (float *[2]){s->gate, s->up}, s->n2, (const rl_mat *[2]){&L->gate, &L->up},
                (const float *[2]){L->bgate, L->bup}, 2, N);
    act_round(m, s->gate, (size_t)N * F);
    act_round(m, s->up, (size_t)N * F);
    o->swiglu(h, s->gate, s->up, N, F);
    act_round(m, h, (size_t)N * F);
    o->matmul(next, h, &L->down, L->bdown, N);       // next = xm + down(silu(gate)·up)
    act_round(m, next, NC);
    o->add(next, s->xm, NC);
    act_round(m, next, NC);
}

// m->x (N, C) = the residual stream after the last layer, for the tokens in
// m->ids at positions m->pos; with_cache: keys and values go to the cache rows
// m->rows and attention reads the cache, else they stay in m->k, m->v.
static void forward(model_t *m, int N, int nseq, int with_cache) {
    saved w = {.n1 = m->xb, .q = m->q, .k = m->k, .v = m->v, .att = m->att, .xm = m->xm, .n2 = m->xb,
               .gate = m->hb, .up = m->hb2, .qr = m->q, .kr = m->k};
    m->ops->embed(m->x, &m->w.embed, m->ids, N);
    act_round(m, m->x, (size_t)N * m->c.hidden);
    for (int l = 0; l < m->c.layers; l++) layer_forward(m, l, m->x, m->x, &w, m->hb, N, nseq, with_cache);
}

// m->logits (rows, V) for rows sel[0 .. rows) of the residual stream x
// (tokens, C): those rows gathered into raw (rows, C), the final norm into
// m->hrows (raw may be m->hrows), the output layer.
static void logits_rows(model_t *m, const float *x, float *raw, const int32_t *sel, int rows) {
    const rl_ops *o = m->ops;
    o->gather_rows(raw, x, DT_F32, sel, rows, m->c.hidden);
    o->rmsnorm(m->hrows, raw, m->w.norm, rows, m->c.hidden, (float)m->c.rms_eps);
    act_round(m, m->hrows, (size_t)rows * m->c.hidden);
    o->matmul(m->logits, m->hrows, &m->w.head, NULL, rows);
    act_round(m, m->logits, (size_t)rows * m->c.vocab);
}

// The most tokens of one forward: each activation array (tokens, width) must
// stay below 2^31 elements, as the ops take int sizes.
static size_t max_batch_tokens(const model_t *m) {
    const model_config *c = &m->c;
    size_t w = (size_t)c->hidden, q = (size_t)c->heads * c->head_dim, f = (size_t)c->inter;
    w = q > w ? q : w;
    w = f > w ? f : w;
    return ((size_t)1 << 31) / w - 1;
}

static int check_tokens(const model_t *m, const uint32_t *ids, size_t n, const char *what, size_t seq,
                        rl_err *err) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= (uint32_t)m->c.vocab)
            return err_set(err, "sequence %zu: %s token %zu is %u, outside the vocabulary of %d", seq, what,
                           i, ids[i], m->c.vocab);
    return 0;
}

// Refuses sequence seq of len tokens (positions 0 .. len-1) when it is
// longer than the model computes as transformers does (cfg_max_seq).
static int check_len(const model_t *m, size_t seq, size_t len, rl_err *err) {
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
static void add_fork(model_t *m, int dst, size_t off, size_t n) {
    if (m->nforks == m->forks_cap) {
        m->forks_cap = m->forks_cap ? 2 * m->forks_cap : 64;
        m->forks = xrealloc(m->forks, (size_t)m->forks_cap * sizeof *m->forks);
    }
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
static int pack_scored(model_t *m, const model_seq *seqs, size_t n, int share, size_t *N_, size_t *R_,
                       size_t *nseq_, int *shared_, size_t *Nkv_, rl_err *err) {
    size_t N = 0, R = 0, nseq = 0, Nown = 0, prev = SIZE_MAX;
    int shared = 0;
    for (size_t i = 0; i < n; i++) {
        const model_seq *s = &seqs[i];
        if (s->n_ids == 0) continue;
        if (s->n_prompt == 0) return err_set(err, "sequence %zu: empty prompt: nothing to predict the first token from", i);
        if (!(s->temperature > 0) || !isfinite(s->temperature))
            return err_set(err, "sequence %zu: temperature %g: must be a positive number", i, s->temperature);
        if (check_tokens(m, s->prompt, s->n_prompt, "prompt", i, err) < 0 ||
            check_tokens(m, s->ids, s->n_ids, "completion", i, err) < 0)
            return -1;
        size_t len = s->n_prompt + s->n_ids - 1;
        if (check_len(m, i, len, err) < 0) return -1;
        int follows = share && same_prompt(seqs, prev, i);
        shared |= follows;
        N += len;   // with shared prompts: the key/value rows, more than the tokens computed
        Nown += follows ? s->n_ids - 1 : len;
        R += s->n_ids;
        nseq++;
        prev = i;
        if (N > max_batch_tokens(m)) return err_set(err, "batch of over %zu tokens: score it in parts", max_batch_tokens(m));
    }
    *N_ = shared ? Nown : N;
    *Nkv_ = N;
    *R_ = R;
    *nseq_ = nseq;
    *shared_ = shared;
    if (nseq == 0) return 0;
    reserve(m, (int)N);
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
            add_fork(m, (int)kv, f0, P);
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

static int want_entropy(const model_seq *seqs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (seqs[i].entropy && seqs[i].n_ids) return 1;
    return 0;
}

// The R log-probabilities (and entropies) of the scored tokens into the sequences.
static void download_scored(model_t *m, model_seq *seqs, size_t n, size_t R) {
    float *v = xmalloc(R * 4);
    m->ops->download(v, m->lp, R * 4);
    unpack_scored(seqs, n, v, 0);
    if (want_entropy(seqs, n)) {
        m->ops->download(v, m->ent, R * 4);
        unpack_scored(seqs, n, v, 1);
    }
    free(v);
}

// Keys and values of shared prompts through the work buffers, one layer's rows at a time.
static void kv_work(model_t *m) {
    m->kvk = m->kvs_k;
    m->kvv = m->kvs_v;
    m->kv_dt = DT_F32;
    m->kv_stride = 0;
}

static int score(model_t *m, model_seq *seqs, size_t n, int share, rl_err *err) {
    size_t N, R, nseq, Nkv;
    int shared;
    if (pack_scored(m, seqs, n, share, &N, &R, &nseq, &shared, &Nkv, err) < 0) return -1;
    if (R == 0) return 0;
    const rl_ops *o = m->ops;
    if (shared) kv_work(m);
    forward(m, (int)N, (int)nseq, shared);
    m->nforks = 0;
    size_t chunk = (size_t)m->lrows;
    float *ent = want_entropy(seqs, n) ? m->ent : NULL;
    for (size_t r0 = 0; r0 < R; r0 += chunk) {
        int rows = (int)(R - r0 < chunk ? R - r0 : chunk);
        logits_rows(m, m->x, m->hrows, m->sel + r0, rows);
        o->logprob(m->lp + r0, ent ? ent + r0 : NULL, m->logits, m->tgt + r0, m->itemp + r0, rows, m->c.vocab);
    }
    download_scored(m, seqs, n, R);
    return 0;
}

int model_score(model_t *m, model_seq *seqs, size_t n, rl_err *err) { return score(m, seqs, n, 0, err); }
int model_score_groups(model_t *m, model_seq *seqs, size_t n, rl_err *err) { return score(m, seqs, n, 1, err); }

// ---- Training -----------------------------------------------------------------

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
                       prec_name(m));
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

// The residual stream (N, C) entering layer l (l = layers: after the last).
static float *resid_at(const model_t *m, int l, int N) {
    return m->s_x + (size_t)l * (size_t)N * (size_t)m->c.hidden;
}

// The activations of layer l saved by forward_train for N tokens: set l of
// each saved buffer of train_table, its layers laid out for N tokens.
static saved saved_at(const model_t *m, int l, int N) {
    wbuf t[WT_MAX];
    size_t nt = train_table(m, (size_t)N, t);
    saved s = {0};
    for (size_t i = 0; i < nt; i++) {
        if (t[i].in_saved < 0) continue;
        float *base = *(float *const *)((const char *)m + t[i].field);
        *(float **)((char *)&s + t[i].in_saved) = base ? base + (size_t)l * t[i].n : NULL;
    }
    return s;
}

// The gradient of a parameter, given the parameter's address.
static float *grad_of(const model_t *m, const void *param) {
    return param ? m->grads + ((const float *)param - m->w.params) : NULL;
}

// The forward of model_score, keeping what the backward needs; the residual
// stream after the last layer is resid_at(m, layers, N). shared: prompts
// shared as pack_scored laid them out (keys and values through kv_work).
static void forward_train(model_t *m, int N, int nseq, int shared) {
    m->ops->embed(resid_at(m, 0, N), &m->w.embed, m->ids, N);
    if (shared) kv_work(m);
    for (int l = 0; l < m->c.layers; l++) {
        saved s = saved_at(m, l, N);
        layer_forward(m, l, s.x, resid_at(m, l + 1, N), &s, m->d_h, N, nseq, shared);   // d_h: h, kept only for down
    }
}

// Attention's backward when prompts are shared (pack_scored): the layer's key
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
// log-probabilities of a chunk go to the caller, whose dloss/dlogp comes
// back before the next chunk, so no (tokens, V) array is ever held.
// Leaves d_x (N, C) = dloss / d(residual stream after the last layer).
static void head_train(model_t *m, int N, size_t R, int entropy, model_dlogp_fn dlogp, void *ctx) {
    const rl_ops *o = m->ops;
    int C = m->c.hidden, V = m->c.vocab;
    float eps = (float)m->c.rms_eps;
    float *x = resid_at(m, m->c.layers, N);
    float *g_head = grad_of(m, m->w.head.data), *g_norm = grad_of(m, m->w.norm);
    float *lp = xmalloc((size_t)m->lrows * 4), *dl = xmalloc((size_t)m->lrows * 4);
    o->zero(m->d_x, (size_t)N * C);
    for (size_t r0 = 0; r0 < R; r0 += (size_t)m->lrows) {
        int rows = (int)(R - r0 < (size_t)m->lrows ? R - r0 : (size_t)m->lrows);
        logits_rows(m, x, m->hraw, m->sel + r0, rows);                    // hraw: the rows before the norm
        o->logprob(m->lp + r0, entropy ? m->ent + r0 : NULL, m->logits, m->tgt + r0, m->itemp + r0, rows, V);
        o->download(lp, m->lp + r0, (size_t)rows * 4);
        dlogp(ctx, r0, (size_t)rows, lp, dl);
        o->upload(m->dlogp + r0, dl, (size_t)rows * 4);
        o->logprob_backward(m->logits, m->tgt + r0, m->itemp + r0, m->dlogp + r0, rows, V);
        o->matmul_dx(m->dh, m->logits, &m->w.head, rows, 0);               // (rows, C)
        o->matmul_dw(g_head, NULL, m->logits, m->hrows, rows, V, C);
        o->zero(m->hrows, (size_t)rows * C);                              // now d(hraw)
        o->rmsnorm_backward(m->hrows, g_norm, m->dh, m->hraw, m->w.norm, rows, C, eps);
        o->embed_backward(m->d_x, m->hrows, m->sel + r0, rows, C);        // added: samples sharing a
                                                                          // prompt score its last row
    }
    free(lp);
    free(dl);
}

// Backward through the layers, from d_x = dloss/d(last residual stream)
// down to the embeddings; every parameter gradient accumulates.
// Nkv: key/value rows when prompts are shared (pack_scored), else 0.
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
        // MLP: x_next = xm + down(silu(gate(n2)) · up(n2)), n2 = rmsnorm(xm)
        o->swiglu(m->d_up, s.gate, s.up, N, F);                             // h, again
        o->matmul_dw(grad_of(m, L->down.data), grad_of(m, L->bdown), dres, m->d_up, N, C, F);
        o->matmul_dx(m->d_h, dres, &L->down, N, 0);                         // dh (N, F)
        o->swiglu_backward(m->d_h, m->d_up, m->d_h, s.gate, s.up, N, F);    // dgate, dup
        o->matmul_dw(grad_of(m, L->gate.data), grad_of(m, L->bgate), m->d_h, s.n2, N, F, C);
        o->matmul_dw(grad_of(m, L->up.data), grad_of(m, L->bup), m->d_up, s.n2, N, F, C);
        o->matmul_dx(m->d_n, m->d_h, &L->gate, N, 0);
        o->matmul_dx(m->d_n, m->d_up, &L->up, N, 1);
        o->rmsnorm_backward(dres, grad_of(m, L->mlp_norm), m->d_n, s.xm, L->mlp_norm, N, C, eps);
        // attention: xm = x + o(attn(rope(q(n1)), rope(k(n1)), v(n1))), n1 = rmsnorm(x)
        // (qwen3: q and k normed per head before rope)
        o->matmul_dw(grad_of(m, L->o.data), grad_of(m, L->bo), dres, s.att, N, C, QD);
        o->matmul_dx(m->d_att, dres, &L->o, N, 0);
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
        o->matmul_dw(grad_of(m, L->q.data), grad_of(m, L->bq), dq, s.n1, N, QD, C);
        o->matmul_dw(grad_of(m, L->k.data), grad_of(m, L->bk), dk, s.n1, N, KVD, C);
        o->matmul_dw(grad_of(m, L->v.data), grad_of(m, L->bv), m->d_v, s.n1, N, KVD, C);
        o->matmul_dx(m->d_n, dq, &L->q, N, 0);
        o->matmul_dx(m->d_n, dk, &L->k, N, 1);
        o->matmul_dx(m->d_n, m->d_v, &L->v, N, 1);
        o->rmsnorm_backward(dres, grad_of(m, L->attn_norm), m->d_n, s.x, L->attn_norm, N, C, eps);
    }
    o->embed_backward(grad_of(m, m->w.embed.data), dres, m->ids, N, C);
}

int model_backward(model_t *m, model_seq *seqs, size_t n, model_dlogp_fn dlogp, void *ctx, rl_err *err) {
    if (!m->grads) return err_set(err, "model_backward before model_train_init");
    size_t N, R, nseq, Nkv;
    int shared;
    if (pack_scored(m, seqs, n, 1, &N, &R, &nseq, &shared, &Nkv, err) < 0) return -1;
    if (R == 0) return 0;
    group_reserve(m, &m->train, train_table, (int)N);
    forward_train(m, (int)N, (int)nseq, shared);
    head_train(m, (int)N, R, want_entropy(seqs, n), dlogp, ctx);
    layers_backward(m, (int)N, (int)nseq, shared ? (int)Nkv : 0);
    m->nforks = 0;
    download_scored(m, seqs, n, R);
    return 0;
}

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
                          .stored = t->dtype};
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
    if (!stored_apart(t)) {
        m->ops->download(out, base + t->poff, t->n * sizeof(float));
        return 0;
    }
    size_t es = dt_size(t->dtype), ns = nscales(t), rows = (size_t)t->shape[0], K = (size_t)t->shape[1];
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

// ---- Standby weights --------------------------------------------------------

model_weights *model_weights_new(const model_t *m) {
    model_weights *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    alloc_weights(m, &w->w);
    return w;
}

void model_weights_free(const model_t *m, model_weights *w) {
    if (!w) return;
    free_weights(m, &w->w);
    free(w->stage);
    free(w);
}

int model_weights_put(const model_t *m, model_weights *w, size_t i, size_t off, size_t n, rl_dtype wire,
                      const void *data) {
    if (i >= m->nt) return -1;
    const mtensor *t = &m->t[i];
    size_t K = t->ndim == 2 ? (size_t)t->shape[1] : 1;
    if (off > t->n || n > t->n - off || (stored_apart(t) && (off % K || n % K))) return -1;
    if (wire != DT_F32 && wire != DT_BF16 && wire != DT_F16) return -1;
    if (stored_apart(t) && wire == t->dtype) {   // as sent: widening and rounding again gives the same bits
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
    put_f32(m, &w->w, t, off, n, x);
    return 0;
}

void model_weights_swap(model_t *m, model_weights *w) {
    weights tmp = m->w;
    m->w = w->w;
    w->w = tmp;
}

// ---- Incremental decoding ---------------------------------------------------

int model_cache_init(model_t *m, int slots, int max_len, rl_err *err) {
    if (slots < 1 || max_len < 1) return err_set(err, "KV cache of %d slots of %d tokens: both must be positive", slots, max_len);
    if (max_len > m->c.max_pos)
        return err_set(err, "KV cache of %d tokens per slot exceeds max_position_embeddings %d", max_len,
                       m->c.max_pos);
    size_t KVD = (size_t)m->c.kv_heads * m->c.head_dim;
    size_t n = (size_t)m->c.layers * slots * (size_t)max_len * KVD;
    if (n / (size_t)slots / (size_t)max_len != (size_t)m->c.layers * KVD || n > ((size_t)1 << 38))
        return err_set(err, "KV cache of %d slots of %d tokens needs over 1 TiB", slots, max_len);
    free_cache(m);
    const char *f32 = getenv("RLPIPE_KV_F32");
    m->kc_dt = m->o.act == DT_BF16 && m->ops->kv_dtypes >> DT_BF16 & 1 && !(f32 && *f32 && strcmp(f32, "0"))
                   ? DT_BF16 : DT_F32;
    m->kc = m->ops->alloc(n * dt_size(m->kc_dt));
    m->vc = m->ops->alloc(n * dt_size(m->kc_dt));
    m->slot_len = xmalloc((size_t)slots * sizeof(int));
    m->slot_used = xmalloc((size_t)slots);
    memset(m->slot_len, 0, (size_t)slots * sizeof(int));
    memset(m->slot_used, 0, (size_t)slots);
    m->slots = slots;
    m->max_len = max_len;
    return 0;
}

rl_dtype model_cache_dtype(const model_t *m) { return m->kc_dt; }

int model_slot_acquire(model_t *m) {
    for (int s = 0; s < m->slots; s++)
        if (!m->slot_used[s]) {
            m->slot_used[s] = 1;
            m->slot_len[s] = 0;
            return s;
        }
    return -1;
}

void model_slot_release(model_t *m, int slot) {
    if (slot >= 0 && slot < m->slots) m->slot_used[slot] = 0;
}

int model_slot_len(const model_t *m, int slot) {
    return slot >= 0 && slot < m->slots ? m->slot_len[slot] : -1;
}

// The entry of s (n) appending to slot sl, or -1.
static long step_entry(const model_step_seq *s, size_t n, int sl) {
    for (size_t j = 0; j < n; j++)
        if (s[j].slot == sl) return (long)j;
    return -1;
}

// Checks a shared prefix of sequence i (model_step_seq.shared): the slot is
// empty, `from` another acquired slot that takes no prefix itself in this step
// and holds at least `shared` tokens once its own are in; with no tokens of its
// own, i needs `from`'s last token at position shared − 1.
static int check_shared(const model_t *m, const model_step_seq *s, size_t n, size_t i, rl_err *err) {
    int sl = s[i].slot, from = s[i].from;
    if (m->slot_len[sl] != 0)
        return err_set(err, "sequence %zu: slot %d holds %d tokens; a shared prefix needs an empty slot", i, sl,
                       m->slot_len[sl]);
    if (from < 0 || from >= m->slots || !m->slot_used[from] || from == sl)
        return err_set(err, "sequence %zu: slot %d to share a prefix from is not another acquired slot", i, from);
    long j = step_entry(s, n, from);
    if (j >= 0 && s[j].shared)
        return err_set(err, "sequence %zu: slot %d takes a shared prefix in the same step", i, from);
    size_t holds = (size_t)m->slot_len[from] + (j >= 0 ? s[j].n : 0);
    if (s[i].shared > holds)
        return err_set(err, "sequence %zu: a prefix of %zu tokens shared from slot %d, which holds %zu", i,
                       s[i].shared, from, holds);
    if (s[i].replay && s[i].n != 1)
        return err_set(err, "sequence %zu: a replay of the prefix's last token has %zu tokens, not 1", i, s[i].n);
    if (s[i].n == 0 && (j < 0 || holds != s[i].shared))
        return err_set(err, "sequence %zu: no tokens of its own, and slot %d's last token in this step is not at "
                       "position %zu", i, from, s[i].shared - 1);
    return 0;
}

// The forward of model_step: checks the sequences, appends their tokens to
// the cache (shared prefixes first), and leaves the residual stream in m->x,
// the rows after each sequence's last token in m->sel (n).
static int step_forward(model_t *m, const model_step_seq *s, size_t n, rl_err *err) {
    size_t N = 0, F = 0;
    for (size_t i = 0; i < n; i++) {
        int sl = s[i].slot;
        if (sl < 0 || sl >= m->slots || !m->slot_used[sl])
            return err_set(err, "sequence %zu: slot %d is not an acquired slot of the KV cache", i, sl);
        for (size_t j = 0; j < i; j++)
            if (s[j].slot == sl) return err_set(err, "sequences %zu and %zu share slot %d", j, i, sl);
        if (s[i].shared && check_shared(m, s, n, i, err) < 0) return -1;
        if (s[i].replay && !s[i].shared) return err_set(err, "sequence %zu: a replay with no shared prefix", i);
        if (s[i].n == 0 && !s[i].shared) return err_set(err, "sequence %zu: no tokens to append", i);
        if (check_tokens(m, s[i].ids, s[i].n, "input", i, err) < 0) return -1;
        size_t len0 = s[i].shared ? s[i].shared - (size_t)(s[i].replay != 0) : (size_t)m->slot_len[sl];
        if (len0 + s[i].n > (size_t)m->max_len)
            return err_set(err, "sequence %zu: slot %d holds %zu tokens; %zu more exceed its %d", i, sl, len0,
                           s[i].n, m->max_len);
        if (check_len(m, i, len0 + s[i].n, err) < 0) return -1;
        N += s[i].n;
        F += s[i].shared;
        if (N > max_batch_tokens(m)) return err_set(err, "step of over %zu tokens: prefill in parts", max_batch_tokens(m));
    }
    if (n == 0) return 0;
    size_t most = N > n ? N : n;   // n rows of logits, more than N when some share their source's
    reserve(m, (int)(most > F ? most : F));
    int32_t *ids = xmalloc(N * 4), *pos = xmalloc(N * 4), *rows = xmalloc(N * 4), *last = xmalloc(n * 4);
    int32_t *frows = xmalloc((F ? F : 1) * 4);
    rl_attn_seq *as = xmalloc(n * sizeof *as);
    size_t q0 = 0, f0 = 0;
    int nseq = 0;
    m->nforks = 0;
    for (size_t i = 0; i < n; i++) {
        int sl = s[i].slot, len = s[i].shared ? (int)s[i].shared - (s[i].replay != 0) : m->slot_len[sl];
        if (s[i].shared) {
            for (size_t t = 0; t < s[i].shared; t++) frows[f0 + t] = s[i].from * m->max_len + (int32_t)t;
            add_fork(m, sl * m->max_len, f0, s[i].shared);
            f0 += s[i].shared;
        }
        if (s[i].n == 0) continue;   // its logits row is its source's (below)
        for (size_t j = 0; j < s[i].n; j++) {
            ids[q0 + j] = (int32_t)s[i].ids[j];
            pos[q0 + j] = len + (int32_t)j;
            rows[q0 + j] = sl * m->max_len + len + (int32_t)j;
        }
        as[nseq++] = (rl_attn_seq){.q0 = (int32_t)q0, .n = (int32_t)s[i].n, .pos0 = len, .kv0 = sl * m->max_len};
        last[i] = (int32_t)(q0 + s[i].n - 1);
        q0 += s[i].n;
    }
    for (size_t i = 0; i < n; i++)
        if (s[i].n == 0) last[i] = last[step_entry(s, n, s[i].from)];
    const rl_ops *o = m->ops;
    o->upload(m->ids, ids, N * 4);
    o->upload(m->pos, pos, N * 4);
    o->upload(m->rows, rows, N * 4);
    o->upload(m->sel, last, n * 4);
    o->upload(m->seqs, as, (size_t)nseq * sizeof *as);
    if (F) o->upload(m->frows, frows, F * 4);
    m->kvk = m->kc;
    m->kvv = m->vc;
    m->kv_dt = m->kc_dt;
    m->kv_stride = (size_t)m->slots * m->max_len;
    forward(m, (int)N, nseq, 1);
    m->nforks = 0;
    for (size_t i = 0; i < n; i++)   // a replayed token's row is the prefix's
        m->slot_len[s[i].slot] = s[i].shared ? (int)(s[i].shared + s[i].n) - (s[i].replay != 0)
                                             : m->slot_len[s[i].slot] + (int)s[i].n;
    free(ids);
    free(pos);
    free(rows);
    free(last);
    free(frows);
    free(as);
    return 0;
}

int model_step(model_t *m, const model_step_seq *s, size_t n, float *logits, rl_err *err) {
    if (step_forward(m, s, n, err) < 0) return -1;
    size_t V = (size_t)m->c.vocab, chunk = (size_t)m->lrows;
    for (size_t r0 = 0; r0 < n; r0 += chunk) {
        int k = (int)(n - r0 < chunk ? n - r0 : chunk);
        logits_rows(m, m->x, m->hrows, m->sel + r0, k);
        m->ops->download(logits + r0 * V, m->logits, (size_t)k * V * sizeof(float));
    }
    return 0;
}

int model_step_sample(model_t *m, const model_step_seq *s, size_t n, const smp_params *p, const double *u,
                      uint32_t *tok, double *logp, rl_err *err) {
    if (step_forward(m, s, n, err) < 0) return -1;
    if (n == 0) return 0;
    const rl_ops *o = m->ops;
    size_t chunk = (size_t)m->lrows;
    o->upload(m->su, u, n * sizeof(double));
    for (size_t r0 = 0; r0 < n; r0 += chunk) {
        int k = (int)(n - r0 < chunk ? n - r0 : chunk);
        logits_rows(m, m->x, m->hrows, m->sel + r0, k);
        o->sample(m->stok + r0, m->slogp + r0, m->logits, p, m->su + r0, k, m->c.vocab);
    }
    int32_t *t = xmalloc(n * sizeof *t);   // ids are below the vocabulary size, so int32 holds them
    o->download(t, m->stok, n * sizeof *t);
    o->download(logp, m->slogp, n * sizeof(double));
    for (size_t i = 0; i < n; i++) tok[i] = (uint32_t)t[i];
    free(t);
    return 0;
}

double model_logprob_of(const float *logits, int V, float temperature, uint32_t token) {
    double mx = -INFINITY, sum = 0, it = 1.0 / temperature;
    for (int j = 0; j < V; j++) mx = logits[j] > mx ? logits[j] : mx;
    for (int j = 0; j < V; j++) sum += exp((logits[j] - mx) * it);
    return (logits[token] - mx) * it - log(sum);
}
