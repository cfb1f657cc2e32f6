// ckpt_model.c — a model and its optimizer state in a checkpoint version (ckpt_model.h).
#include "learn/ckpt_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/hfweights.h"
#include "checkpoint/safetensors.h"
#include "learn/zero.h"
#include "records/json.h"

// dir/optimizer.safetensors: the AdamW moments of every parameter, F32, and
// with params the parameters themselves (under their own names): what resumes
// exactly when model.safetensors holds them rounded to 16 bits. No file when
// the model has no training state.
static const int opt_which[3] = {MODEL_EXP_AVG, MODEL_EXP_AVG_SQ, MODEL_PARAM};
static const char *const opt_suffix[3] = {".exp_avg", ".exp_avg_sq", ""};
enum { OPT_NAME = 160 };   // bytes of a tensor name in optimizer.safetensors, suffix and NUL included

struct ckpt_snap {
    model_config c;
    size_t nt, total;        // tensors; their elements
    model_tensor *t;         // [nt] names and shapes (the names are the model's: it must outlive the snapshot)
    const float *params;     // [total] the parameters (flat, tensor order): copy, or the model's own
    float *copy;             // [total] the parameters' copy, when made
    const float *mom[2];     // [total] each: exp_avg, exp_avg_sq (moments): copies, or the model's own
    float *moment;           // [2][total] the moments' copies, when made
    int moments;             // the model has training state: mom holds the moments
    int mom_borrowed;        // mom is the model's own
    int has_lora;            // the parameters are LoRA adapters of config lora (model_lora) ...
    lora_config lora;
    const model_t *m;        // ... attached to m, whose frozen base a merged model is written from
    void (*release)(void *); // called once the parameters are read no more (ckpt_snap_on_release)
    void *release_ctx;
};

ckpt_snap *ckpt_snap_new(void) {
    ckpt_snap *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    return s;
}

void ckpt_snap_free(ckpt_snap *s) {
    if (!s) return;
    free(s->t);
    free(s->copy);
    free(s->moment);
    free(s);
}

int ckpt_snap_borrowed(const ckpt_snap *s) { return (s->params && s->params != s->copy) || s->mom_borrowed; }

void ckpt_snap_on_release(ckpt_snap *s, void (*fn)(void *ctx), void *ctx) {
    s->release = fn;
    s->release_ctx = ctx;
}

int ckpt_snap_take(ckpt_snap *s, const model_t *m, dist_t *d, const size_t *parts, int weights_only, int borrow,
                   rl_err *err) {
    size_t nt = model_ntensors(m), total = 0;
    for (size_t i = 0; i < nt; i++) total += model_tensor_at(m, i).n;
    if (nt != s->nt || total != s->total) {   // the first snapshot (or another model): reallocated when used
        free(s->t);
        free(s->copy);
        free(s->moment);
        s->t = xmalloc((nt ? nt : 1) * sizeof *s->t);
        s->copy = s->moment = NULL;
        s->nt = nt, s->total = total;
    }
    s->c = *model_cfg(m);
    s->has_lora = model_lora(m) != NULL;
    if (s->has_lora) s->lora = *model_lora(m);
    s->m = m;
    s->moments = !weights_only && nt > 0 && model_train_buffer(m, MODEL_EXP_AVG) != NULL;
    s->params = borrow ? model_host_params(m) : NULL;
    // The moments in place when the model keeps all of them in host memory
    // (with d, rank 0 gathers the other ranks' parts into copies).
    s->mom_borrowed = s->moments && borrow && !d && model_host_moments(m, MODEL_EXP_AVG);
    if (s->mom_borrowed) {
        s->mom[0] = model_host_moments(m, MODEL_EXP_AVG), s->mom[1] = model_host_moments(m, MODEL_EXP_AVG_SQ);
        free(s->moment);
        s->moment = NULL;
    } else if (s->moments) {
        if (!s->moment) s->moment = xmalloc((total ? 2 * total : 1) * sizeof(float));
        s->mom[0] = s->moment, s->mom[1] = s->moment + total;
    } else {
        s->mom[0] = s->mom[1] = NULL;
    }
    if (!s->params && !s->copy) s->copy = xmalloc((total ? total : 1) * sizeof(float));
    int copy_moments = s->moments && !s->mom_borrowed;
    size_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        s->t[i] = model_tensor_at(m, i);
        float *to[3] = {s->params ? NULL : s->copy + off, copy_moments ? s->moment + off : NULL,
                        copy_moments ? s->moment + total + off : NULL};
        for (int k = 0; k < 3; k++)
            if (to[k] && model_tensor_get(m, k ? opt_which[k - 1] : MODEL_PARAM, i, to[k]) < 0)
                return err_set(err, "cannot read the training state of %s from the model", s->t[i].name);
        off += s->t[i].n;
    }
    if (!s->params) s->params = s->copy;
    // The other ranks' parts of the moments (this one's are in place).
    if (copy_moments && d) return zero_gather_moments(m, d, parts, s->moment, s->moment + total, err);
    return 0;
}

// The tensors of array k of s (0: the parameters, 1 and 2: the moments) under
// their names with suffix, into out[stride·i + at].
static void snap_tensors(const ckpt_snap *s, int k, const char *suffix, st_out *out, size_t stride, size_t at,
                         char (*names)[OPT_NAME]) {
    size_t off = 0;
    for (size_t i = 0; i < s->nt; i++) {
        const model_tensor *t = &s->t[i];
        const char *name = t->name;
        if (suffix[0]) {
            snprintf(names[i], sizeof names[i], "%s%s", t->name, suffix);
            name = names[i];
        }
        out[stride * i + at] = (st_out){.name = name, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]},
                                        .data = (k ? s->mom[k - 1] : s->params) + off};
        off += t->n;
    }
}

static int write_optimizer(const char *dir, const ckpt_snap *s, int params, rl_err *err) {
    if (!s->moments) return 0;
    size_t per = params ? 3 : 2;
    for (size_t i = 0; i < s->nt; i++)
        if (strlen(s->t[i].name) + sizeof ".exp_avg_sq" > OPT_NAME)
            return err_set(err, "tensor name too long: %s", s->t[i].name);
    st_out *out = xmalloc((s->nt ? per * s->nt : 1) * sizeof *out);
    char (*names)[OPT_NAME] = xmalloc((s->nt ? 2 * s->nt : 1) * sizeof *names);
    for (size_t k = 0; k < per; k++)   // per tensor: exp_avg, exp_avg_sq, and the parameter
        snap_tensors(s, k < 2 ? (int)k + 1 : 0, opt_suffix[k], out, per, k, names + (k < 2 ? k * s->nt : 0));
    char *path = path_join(dir, "optimizer.safetensors");
    int rc = st_write_direct(path, out, per * s->nt, DT_F32, err);   // read back by a resume only
    free(path);
    free(names);
    free(out);
    return rc;
}

typedef struct {
    const ckpt_write_opts *o;
    const ckpt_snap *s;
} fill_ctx;

int ckpt_params_again(const ckpt_write_opts *o) { return !o->lora && o->save.dtype != DT_F32; }

// The snapshot's parameters as the LoRA adapter they are (their table is
// model_lora_attach's: each layer, each target, A then B).
static lora_adapter *snap_adapter(const ckpt_snap *s) {
    lora_adapter *a = lora_new(&s->lora, &s->c);
    const float *p = s->params;
    for (int k = 0; k < a->layers * LORA_NT; k++) {
        if (!a->a[k]) continue;
        size_t na = (size_t)s->lora.rank * a->in[k % LORA_NT], nb = (size_t)a->out[k % LORA_NT] * s->lora.rank;
        memcpy(a->a[k], p, na * sizeof(float));
        memcpy(a->b[k], p + na, nb * sizeof(float));
        p += na + nb;
    }
    return a;
}

// A LoRA version: the adapter in PEFT's files, and with o->merged the
// merged model (its base read from the model, which never changes it).
static int fill_adapter(const char *dir, const ckpt_write_opts *o, const ckpt_snap *s, rl_err *err) {
    lora_adapter *a = snap_adapter(s);
    int rc = lora_write(dir, a, err);
    if (rc == 0 && o->merged) rc = model_save_merged(s->m, a, dir, &o->save, err);
    lora_free(a);
    return rc;
}

// What a sampler loads: config.json and the weights, or the adapter.
static int fill_model(const char *dir, void *ctx, rl_err *err) {
    const fill_ctx *c = ctx;
    const ckpt_snap *s = c->s;
    int rc;
    if (s->has_lora) {
        rc = fill_adapter(dir, c->o, s, err);
    } else {
        st_out *w = xmalloc((s->nt ? s->nt : 1) * sizeof *w);
        snap_tensors(s, 0, "", w, 1, 0, NULL);
        rc = hfw_save_model(dir, &s->c, w, s->nt, &c->o->save, err);
        free(w);
    }
    // Released now unless the optimizer file reads the model's memory next.
    if (s->release && !(s->moments && (s->mom_borrowed || ckpt_params_again(c->o)))) s->release(s->release_ctx);
    return rc;
}

// What only a resume needs, written once the weights are published.
static int fill_optimizer(const char *dir, void *ctx, rl_err *err) {
    const fill_ctx *c = ctx;
    return write_optimizer(dir, c->s, ckpt_params_again(c->o), err);
}

int ckpt_snap_write(const ckpt_write_opts *o, const ckpt_snap *s, rl_err *err) {
    fill_ctx c = {.o = o, .s = s};
    return ckpt_publish(o, fill_model, s->moments ? fill_optimizer : NULL, &c, err);
}

int ckpt_write(const ckpt_write_opts *o, const model_t *m, rl_err *err) {
    return ckpt_write_zero(o, m, NULL, NULL, err);
}

int ckpt_write_zero(const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts, rl_err *err) {
    ckpt_snap *s = ckpt_snap_new();
    int rc = ckpt_snap_take(s, m, d, parts, o->weights_only, 1, err) ? -1 : ckpt_snap_write(o, s, err);
    ckpt_snap_free(s);
    return rc;
}

int ckpt_snap_complete(const ckpt_write_opts *o, const ckpt_snap *s, rl_err *err) {
    fill_ctx c = {.o = o, .s = s};
    return ckpt_complete(o, s->moments ? fill_optimizer : NULL, &c, err);
}

int ckpt_complete_state(const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts, rl_err *err) {
    ckpt_snap *s = ckpt_snap_new();
    int rc = ckpt_snap_take(s, m, d, parts, 0, 1, err) ? -1 : ckpt_snap_complete(o, s, err);
    ckpt_snap_free(s);
    return rc;
}

int ckpt_read_optimizer(const char *dir, model_t *m, rl_err *err) {
    char *path = path_join(dir, "optimizer.safetensors");
    st_file *f = st_open(path, err);
    if (!f) {
        free(path);
        return -1;
    }
    size_t nt = model_ntensors(m), maxn = 0;
    // The f32 parameters are there when model.safetensors holds them rounded:
    // all of them, or none.
    size_t per = nt && st_find(f, model_tensor_at(m, 0).name) ? 3 : 2;
    const st_tensor **src = xmalloc((per * nt + 1) * sizeof *src);
    int rc = 0;
    // Everything is checked before anything is changed.
    for (size_t i = 0; i < nt && rc == 0; i++) {
        model_tensor t = model_tensor_at(m, i);
        for (size_t k = 0; k < per && rc == 0; k++) {
            char name[OPT_NAME];
            snprintf(name, sizeof name, "%s%s", t.name, opt_suffix[k]);
            const st_tensor *s = st_find(f, name);
            int same = s && s->ndim == t.ndim;
            for (int d = 0; same && d < t.ndim; d++) same = s->shape[d] == t.shape[d];
            if (!s) rc = err_set(err, "%s: tensor %s is missing", path, name);
            else if (!same) {
                char got[128], want[128];
                st_shape_str(got, sizeof got, s->shape, s->ndim);
                st_shape_str(want, sizeof want, t.shape, t.ndim);
                rc = err_set(err, "%s: tensor %s has shape %s; the parameter's is %s", path, name, got, want);
            }
            src[per * i + k] = s;
            if (t.n > maxn) maxn = t.n;
        }
    }
    for (size_t j = 0; rc == 0 && f->n != per * nt && j < f->n; j++) {
        size_t i = 0;
        while (i < per * nt && src[i] != &f->t[j]) i++;
        if (i == per * nt)
            rc = err_set(err, "%s: tensor %s is not an AdamW moment or a parameter of this model", path, f->t[j].name);
    }
    float *buf = rc == 0 && maxn ? xmalloc(maxn * sizeof(float)) : NULL;
    for (size_t i = 0; i < per * nt && rc == 0; i++) {
        st_read_f32(src[i], buf);
        if (model_tensor_set(m, opt_which[i % per], i / per, buf) < 0)
            rc = err_set(err, "cannot load %s: the model has no training state (model_train_init)", path);
    }
    free(buf);
    free(src);
    st_close(f);
    free(path);
    return rc;
}

void ckpt_state_json(sbuf *out, const lrn_opts *o, uint64_t version, uint64_t steps, uint64_t records, uint64_t seed) {
    const adamw_opts *a = &o->opt;
    sbuf_printf(out, "{\"version\": %llu, \"step\": %llu, \"records\": %llu, \"producer\": \"rl-learn %s\",\n",
                (unsigned long long)version, (unsigned long long)steps, (unsigned long long)records, RLPIPE_VERSION);
    sbuf_printf(out, " \"loss\": \"%s\", \"adv\": \"%s\", \"batch\": %zu, \"micro\": %d, \"epochs\": %d, \"seed\": %llu",
                lrn_loss_name(o->loss), lrn_adv_name(o->adv), o->batch, o->micro, o->epochs, (unsigned long long)seed);
    // the clip range as the loss took it: [1 − eps_low, 1 + eps_high]
    const char *keys[] = {"lr", "beta1", "beta2", "adam_eps", "weight_decay", "grad_clip",
                          "eps_low", "eps_high", "tis", "kl_coef", "entropy_coef"};
    double vals[] = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->grad_clip,
                     o->eps_low, o->eps_high, o->tis, o->kl_coef, o->entropy_coef};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        sbuf_printf(out, ", \"%s\": ", keys[i]);
        json_put_f64(out, vals[i]);
    }
    sbuf_printf(out, ", \"kl_est\": \"%s\", \"kl_in\": \"%s\", \"mask_truncated\": %s, \"overlong\": ",
                lrn_kl_name(o->kl), o->kl_in_reward ? "reward" : "loss", o->mask_truncated ? "true" : "false");
    if (o->overlong_cache > 0) {   // [L_MAX, L_CACHE], or null
        sbuf_printf(out, "[");
        json_put_f64(out, o->overlong_max);
        sbuf_printf(out, ", ");
        json_put_f64(out, o->overlong_cache);
        sbuf_printf(out, "]");
    } else sbuf_printf(out, "null");
    sbuf_printf(out, ", \"warmup\": %llu, \"schedule\": \"%s\", \"total_steps\": %llu}\n",
                (unsigned long long)a->warmup, a->schedule == SCHED_COSINE ? "cosine" : "constant",
                (unsigned long long)a->total_steps);
}
