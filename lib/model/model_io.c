// model_io.c — a model's weights from a Hugging Face folder (config.json and
// safetensors, checked against the config before memory is taken), at
// random, and saved back as safetensors.
#include "model/model_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "rng.h"

static int is_ignored_tensor(const model_t *m, const char *name) {
    size_t n = strlen(name), s = strlen(".rotary_emb.inv_freq");
    if (n > s && strcmp(name + n - s, ".rotary_emb.inv_freq") == 0) return 1;   // a buffer older files keep
    return m->c.tie_embeddings && strcmp(name, "lm_head.weight") == 0;       // tied: the embedding is used
}

// Every tensor the config implies is in f with its shape, and no other (but
// those is_ignored_tensor names): checked before any weight memory is taken.
static int check_tensors(const model_t *m, const hfw_set *f, rl_err *err) {
    for (size_t i = 0; i < f->n; i++)
        if (!mdl_find_tensor(m, f->t[i]->name) && !is_ignored_tensor(m, f->t[i]->name))
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

// f32 values staged at a time between a file's tensor and the weights.
enum { STAGE_FLOATS = 1 << 22 };

// The weights from f (checked by check_tensors) into w, with adapter a (or
// NULL) merged into the matrices it targets: each read as f32, then
// merged (mdl_lora_merge), then stored as loading stores it. A tensor
// without an adapter goes through in parts of whole rows (at most
// STAGE_FLOATS values, or one row), and each tensor's pages of the mapped
// file are let go once it is read (st_let_go): the load holds the weights,
// one part and one tensor's pages, not a second copy of the model.
static void fill_tensors(const model_t *m, weights *w, const hfw_set *f, const lora_adapter *a) {
    float *stage = NULL, scale = a ? lora_scale(&a->c) : 0;
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        const st_tensor *s = hfw_find(f, t->name);
        int k = a ? mdl_lora_module(t->name) : -1;
        const float *A = k >= 0 ? a->a[k] : NULL;
        if (A) {
            stage = xrealloc(stage, t->n * sizeof(float));
            st_read_f32(s, stage);
            mdl_lora_merge(m, stage, (int)t->shape[0], (int)t->shape[1], a->b[k], A, a->c.rank, scale);
            mdl_put_f32(m, w, t, 0, t->n, stage);
        } else if (s->dtype == DT_F32 && ((uintptr_t)s->data & 3) == 0) {   // straight from the mapped file
            mdl_put_f32(m, w, t, 0, t->n, s->data);
        } else {
            size_t row = mdl_stored_apart(t) ? (size_t)t->shape[1] : 1;
            size_t part = row >= STAGE_FLOATS ? row : STAGE_FLOATS / row * row;
            if (part > t->n) part = t->n;
            stage = xrealloc(stage, (part ? part : 1) * sizeof(float));
            for (size_t at = 0; at < t->n; at += part) {
                size_t n = t->n - at < part ? t->n - at : part;
                st_read_f32_part(s, at, n, stage);
                mdl_put_f32(m, w, t, at, n, stage);
            }
        }
        st_let_go(s);
    }
    free(stage);
}

// An adapter for this model's layers (lora_read checked its shapes against the config).
static int check_adapter(const model_t *m, const lora_adapter *a, rl_err *err) {
    if (a && a->layers != m->c.layers)
        return err_set(err, "the adapter is for %d layers, the model has %d", a->layers, m->c.layers);
    return 0;
}

model_t *model_load_merged(const char *dir, const lora_adapter *a, const model_opts *o, rl_err *err) {
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
    int rc = !f || check_tensors(m, f, err) || check_adapter(m, a, err) ? -1 : 0;
    if (rc == 0 && model_alloc(m, err)) {
        rl_err e2;
        err_set(&e2, "%s: %s", path, err->msg);
        *err = e2;
        rc = -1;
    }
    if (rc == 0) fill_tensors(m, &m->w, f, a);
    hfw_close(f);
    if (rc) {
        model_free(m);
        return NULL;
    }
    return mdl_finish_new(m);
}

model_t *model_load(const char *dir, const model_opts *o, rl_err *err) { return model_load_merged(dir, NULL, o, err); }

int model_weights_fill(const model_t *m, model_weights *w, const hfw_set *f, const lora_adapter *a, rl_err *err) {
    if (check_tensors(m, f, err) < 0 || check_adapter(m, a, err) < 0) return -1;
    fill_tensors(m, &w->w, f, a);
    return 0;
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
        mdl_put_f32(m, &m->w, t, 0, t->n, stage);
    }
    free(stage);
    return mdl_finish_new(m);
}

int model_save_merged(const model_t *m, const lora_adapter *a, const char *dir, const hfw_write_opts *o,
                      rl_err *err) {
    if (check_adapter(m, a, err) < 0) return -1;
    float *host = xmalloc(m->nparams * sizeof(float));
    st_out *out = xmalloc(m->nt * sizeof *out);
    for (size_t i = 0; i < m->nt; i++) {
        const mtensor *t = &m->t[i];
        float *x = host + t->off;
        mdl_get_f32(m, &m->w, t, x);
        int k = a ? mdl_lora_module(t->name) : -1;
        if (k >= 0 && a->a[k])
            mdl_lora_merge(m, x, (int)t->shape[0], (int)t->shape[1], a->b[k], a->a[k], a->c.rank, lora_scale(&a->c));
        out[i] = (st_out){.name = t->name, .ndim = t->ndim, .data = x};
        out[i].shape[0] = t->shape[0];
        out[i].shape[1] = t->shape[1];
    }
    int rc = hfw_save_model(dir, &m->c, out, m->nt, o, err);
    free(out);
    free(host);
    return rc;
}

// With adapters attached, the merged model.
int model_save_as(const model_t *m, const char *dir, const hfw_write_opts *o, rl_err *err) {
    lora_adapter *a = model_lora_get(m);
    int rc = model_save_merged(m, a, dir, o, err);
    lora_free(a);
    return rc;
}

int model_save(const model_t *m, const char *dir, rl_err *err) {
    return model_save_as(m, dir, &(hfw_write_opts){.dtype = DT_F32}, err);
}
