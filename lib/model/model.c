// model.c — the Llama-family decoder (model.h) written against the backend
// interface (ops.h): a model's plan from its config (the tensor table, each
// matrix's precision, the options checked), its RoPE table, its creation and
// its end. Parameters live in one f32 allocation of the backend, in the
// order of a table of Hugging Face tensor names (model_table.c); matrices
// used for products may in addition be stored at the sampler's precision.
// The rest of the model: model_internal.h lists its files.
#include "model/model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Rows of the output layer computed at once: (rows, V) logits of at most
// 32 MiB (about what the last-level cache holds), and at most 256 rows.
static int logit_rows(int V) {
    int r = (8 << 20) / V;
    return r < 16 ? 16 : r > 256 ? 256 : r;
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
// output channel, the embedding and output layer bf16; with head_f32 the
// output layer f32 (with tied embeddings, the embedding that is it).
static void set_precision(const model_t *m, mtensor *t, int w8a8) {
    int outer = !strcmp(t->name, "model.embed_tokens.weight") || !strcmp(t->name, "lm_head.weight");
    int head = !strcmp(t->name, m->c.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    t->dtype = m->o.head_f32 && head ? DT_F32 : w8a8 && outer ? DT_BF16 : m->o.dtype;
    t->group = t->dtype == DT_I8 ? (w8a8 ? (int)t->shape[1] : m->o.group) : t->dtype == DT_FP8 ? (int)t->shape[1] : 0;
    t->act = !w8a8 || outer ? ACT_F32 : t->dtype == DT_I8 ? ACT_I8 : ACT_FP8;
}

// A model's table and layout from its config, with no weights yet: what a
// weights file is checked against before any memory is taken.
model_t *model_plan(const model_config *c, const model_opts *o, rl_err *err) {
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
    if (opts.dtype == DT_F32 && opts.act == DT_F32) opts.head_f32 = 0;   // the head is f32 already
    opts.head_f32 = !!opts.head_f32;
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
    mdl_build_table(m);
    for (size_t i = 0; i < m->nt; i++) {   // a model at another dtype keeps no f32 copy of its matrices
        mtensor *t = &m->t[i];
        if (t->is_mat) set_precision(m, t, w8a8);
        t->poff = mdl_stored_apart(t) ? SIZE_MAX : m->nfloat;
        if (!mdl_stored_apart(t)) m->nfloat += t->n;
    }
    return m;
}

// Bytes of one set of weights (mdl_alloc_weights).
static uint64_t weight_bytes(const model_t *m) {
    uint64_t b = (uint64_t)m->nfloat * sizeof(float);
    for (size_t i = 0; i < m->nt; i++)
        b += (uint64_t)m->t[i].n * (mdl_stored_apart(&m->t[i]) ? dt_size(m->t[i].dtype) : 0) +
             (uint64_t)mdl_nscales(&m->t[i]) * sizeof(float);
    return b;
}

// Allocates the planned weights, once they are known to fit: a config too
// large for this machine is an error that says so, not an abort. (The CPU
// backend's memory is the machine's; a GPU's is checked by its allocator.)
int model_alloc(model_t *m, rl_err *err) {
    uint64_t need = weight_bytes(m);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!strcmp(m->ops->name, "cpu") && pages > 0 && page > 0 && need > (uint64_t)pages * (uint64_t)page)
        return err_set(err, "its weights need %.1f GiB at %s, more than this machine's %.1f GiB of memory",
                       (double)need / (1 << 30), mdl_prec_name(m), (double)pages * (double)page / (1 << 30));
    mdl_alloc_weights(m, &m->w);
    return 0;
}

model_t *model_new(const model_config *c, const model_opts *o, rl_err *err) {
    model_t *m = model_plan(c, o, err);
    if (m && model_alloc(m, err)) {
        model_free(m);
        return NULL;
    }
    return m;
}

model_t *mdl_finish_new(model_t *m) {
    make_rope(m);
    return m;
}

void model_free(model_t *m) {
    if (!m) return;
    mdl_group_free(m, &m->work, mdl_work_table);
    mdl_group_free(m, &m->train, mdl_train_table);
    mdl_free_cache(m);
    free(m->forks);
    float *train[] = {m->grads, m->exp_avg, m->exp_avg_sq};
    for (size_t i = 0; i < 3; i++)
        if (train[i]) m->ops->free(train[i]);
    mdl_free_weights(m, &m->w);
    mdl_lora_free(m);
    if (m->cos_sin) m->ops->free(m->cos_sin);
    free(m->t);
    free(m);
}

const model_config *model_cfg(const model_t *m) { return &m->c; }
rl_dtype model_dtype(const model_t *m) { return m->o.dtype; }
const model_opts *model_options(const model_t *m) { return &m->o; }
const char *model_device(const model_t *m) { return m->ops->name; }
size_t model_nparams(const model_t *m) { return mdl_params(m).n; }
