// ckpt_model.c — a model and its optimizer state in a checkpoint version (ckpt_model.h).
#include "learn/ckpt_model.h"

#include <stdio.h>
#include <stdlib.h>

#include "checkpoint/safetensors.h"
#include "learn/zero.h"
#include "records/json.h"

// dir/optimizer.safetensors: the AdamW moments of every parameter, F32, and
// with params the parameters themselves (under their own names): what resumes
// exactly when model.safetensors holds them rounded to 16 bits. No file when
// the model has no training state. Host memory: 2 or 3 × parameters.
static const int opt_which[3] = {MODEL_EXP_AVG, MODEL_EXP_AVG_SQ, MODEL_PARAM};
static const char *const opt_suffix[3] = {".exp_avg", ".exp_avg_sq", ""};

typedef struct {
    const ckpt_write_opts *o;
    const model_t *m;
    dist_t *dist;               // a sharded optimizer's ranks, or NULL
    const size_t *parts;
} fill_ctx;

static int write_optimizer(const char *dir, const fill_ctx *c, int params, rl_err *err) {
    const model_t *m = c->m;
    size_t nt = model_ntensors(m), total = 0, per = params ? 3 : 2;
    for (size_t i = 0; i < nt; i++) total += model_tensor_at(m, i).n;
    if (nt == 0) return 0;
    float *host = xmalloc(per * total * sizeof(float));
    if (model_tensor_get(m, MODEL_EXP_AVG, 0, host) < 0) {   // no training state
        free(host);
        return 0;
    }
    st_out *out = xmalloc(per * nt * sizeof *out);
    char (*names)[128] = xmalloc(per * nt * sizeof *names);
    size_t off = 0;
    int rc = 0;
    for (size_t i = 0; i < nt && rc == 0; i++) {
        model_tensor t = model_tensor_at(m, i);
        for (size_t k = 0; k < per && rc == 0; k++) {
            float *data = host + k * total + off;
            char *name = names[per * i + k];
            if ((size_t)snprintf(name, sizeof names[0], "%s%s", t.name, opt_suffix[k]) >= sizeof names[0])
                rc = err_set(err, "tensor name too long: %s", t.name);
            else if (model_tensor_get(m, opt_which[k], i, data) < 0)
                rc = err_set(err, "cannot read the training state of %s from the model", t.name);
            out[per * i + k] = (st_out){.name = name, .ndim = t.ndim, .shape = {t.shape[0], t.shape[1]}, .data = data};
        }
        off += t.n;
    }
    // The other ranks' parts of the moments (this one's are in place).
    if (rc == 0 && c->dist) rc = zero_gather_moments(m, c->dist, c->parts, host, host + total, err);
    char *path = path_join(dir, "optimizer.safetensors");
    if (rc == 0) rc = st_write_f32(path, out, per * nt, err);
    free(path);
    free(names);
    free(out);
    free(host);
    return rc;
}

static int fill(const char *dir, void *ctx, rl_err *err) {
    const fill_ctx *c = ctx;
    if (model_save_as(c->m, dir, &c->o->save, err)) return -1;
    return write_optimizer(dir, c, c->o->save.dtype != DT_F32, err);
}

int ckpt_write(const ckpt_write_opts *o, const model_t *m, rl_err *err) {
    fill_ctx c = {.o = o, .m = m};
    return ckpt_publish(o, fill, &c, err);
}

int ckpt_write_zero(const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts, rl_err *err) {
    fill_ctx c = {.o = o, .m = m, .dist = d, .parts = parts};
    return ckpt_publish(o, fill, &c, err);
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
            char name[160];
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
    const char *keys[] = {"lr", "beta1", "beta2", "adam_eps", "weight_decay", "grad_clip", "ppo_eps"};
    double vals[] = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->grad_clip, o->ppo_eps};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        sbuf_printf(out, ", \"%s\": ", keys[i]);
        json_put_f64(out, vals[i]);
    }
    sbuf_printf(out, ", \"warmup\": %llu, \"schedule\": \"%s\", \"total_steps\": %llu}\n",
                (unsigned long long)a->warmup, a->schedule == SCHED_COSINE ? "cosine" : "constant",
                (unsigned long long)a->total_steps);
}
