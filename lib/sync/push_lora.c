// push_lora.c — adapter pushes (push_lora.h): the "lora" map of the push
// message, the sender's list of an adapter's tensors, and the receiver's
// check of them against its base.
#include "sync/push_lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/hfweights.h"
#include "records/mpscan.h"

int push_lora_is_adapter(const char *dir) { return lora_exists(dir) && !hfw_exists(dir); }

void push_lora_set(rec_t *msg, const lora_config *c) {
    char targets[128];
    lora_targets_str(c->targets, targets, sizeof targets);
    rec_t *m = rec_new();
    sbuf enc = {0};
    rec_set_uint(m, "r", (uint64_t)c->rank);
    rec_set_f64(m, "alpha", c->alpha);
    rec_set_bool(m, "rslora", c->rslora);
    rec_set_cstr(m, "targets", targets);
    rec_encode(m, &enc);
    rec_set_raw(msg, "lora", 4, enc.data, enc.len);
    sbuf_free(&enc);
    rec_free(m);
}

int push_lora_get(const rec_t *msg, lora_config *c, rl_err *err) {
    long i = rec_find(msg, "lora");
    if (i < 0) return 1;
    size_t n;
    const uint8_t *v = rec_value(msg, (size_t)i, &n);
    rec_t *m = rec_new();
    int rc = -1;
    rl_err e;
    uint64_t r;
    const char *s;
    size_t len;
    char targets[256];
    memset(c, 0, sizeof *c);
    if (rec_parse(m, v, n, &rec_default_limits, &e)) {
        err_set(err, "'lora' is not a map: %s", e.msg);
        goto out;
    }
    long b = rec_find(m, "rslora");
    size_t bn = 0;
    const uint8_t *bv = b >= 0 ? rec_value(m, (size_t)b, &bn) : NULL;
    if (rec_get_uint(m, "r", &r) || r < 1 || r > PUSH_LORA_MAX_RANK) {
        err_set(err, "'lora' has no rank r in 1..%d", PUSH_LORA_MAX_RANK);
        goto out;
    }
    if (rec_get_f64(m, "alpha", &c->alpha) || !(c->alpha > 0) || !isfinite(c->alpha)) {
        err_set(err, "'lora' has no positive alpha");
        goto out;
    }
    if (!bv || bn != 1 || (*bv != 0xc2 && *bv != 0xc3)) {
        err_set(err, "'lora' has no boolean rslora");
        goto out;
    }
    if (rec_get_str(m, "targets", &s, &len) || len >= sizeof targets || memchr(s, 0, len)) {
        err_set(err, "'lora' has no targets string");
        goto out;
    }
    memcpy(targets, s, len);
    targets[len] = 0;
    if (lora_parse_targets(targets, &c->targets, &e)) {
        err_set(err, "'lora' targets: %s", e.msg);
        goto out;
    }
    c->rank = (int)r;
    c->rslora = *bv == 0xc3;
    rc = 0;
out:
    rec_free(m);
    return rc;
}

int push_lora_open(const char *dir, lora_config *c, st_file **f, push_tensor **t, size_t *n, rl_err *err) {
    char path[4200];
    *f = NULL, *t = NULL, *n = 0;
    snprintf(path, sizeof path, "%s/%s", dir, LORA_CONFIG);
    if (lora_config_read(path, c, NULL, err)) return -1;
    snprintf(path, sizeof path, "%s/%s", dir, LORA_WEIGHTS);
    if (!(*f = st_open(path, err))) return -1;
    *t = xmalloc(((*f)->n ? (*f)->n : 1) * sizeof **t);
    for (size_t i = 0; i < (*f)->n; i++) {
        const st_tensor *s = &(*f)->t[i];
        int layer, target, ab;
        if (lora_tensor_parse(s->name, &layer, &target, &ab))
            return err_set(err, "%s: tensor %s is not a LoRA matrix of a module rlpipe adapts", path, s->name);
        if (!(c->targets >> target & 1))
            return err_set(err, "%s: tensor %s adapts %s, which %s/%s does not target", path, s->name,
                           lora_target_names[target], dir, LORA_CONFIG);
        if (s->ndim != 2 || strlen(s->name) >= sizeof (*t)[i].name)
            return err_set(err, "%s: tensor %s is not a matrix", path, s->name);
        push_tensor *p = &(*t)[i];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "%s", s->name);
        p->dtype = s->dtype;
        p->ndim = 2;
        p->shape[0] = s->shape[0];
        p->shape[1] = s->shape[1];
        p->n = s->nelem;
    }
    *n = (*f)->n;
    return 0;
}

// Where tensor t goes, after checking its name and shape against a base of
// config mc and the adapter's config c: 0, or -1 with err.
static int slot_of(const model_config *mc, const lora_config *c, const push_tensor *t, push_lora_slot *s,
                   rl_err *err) {
    if (lora_tensor_parse(t->name, &s->layer, &s->target, &s->ab))
        return err_set(err, "tensor '%s' is not a LoRA matrix of a module rlpipe adapts", t->name);
    if (s->layer >= mc->layers || !(c->targets >> s->target & 1))
        return err_set(err, "tensor '%s' is not part of the adapter (%d layers, targets of 'lora')", t->name,
                       mc->layers);
    int out_dim, in_dim;
    lora_dims(mc, s->target, &out_dim, &in_dim);
    int64_t d0 = s->ab ? out_dim : c->rank, d1 = s->ab ? c->rank : in_dim;
    if (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1) return 0;
    char got[128];
    st_shape_str(got, sizeof got, t->shape, t->ndim);
    return err_set(err, "tensor '%s' is %s; the receiver's base needs [%lld, %lld]", t->name, got, (long long)d0,
                   (long long)d1);
}

int push_lora_match(const model_config *mc, const lora_config *c, const push_tensor *t, size_t n,
                    push_lora_slot *slot, uint64_t *bytes, rl_err *err) {
    size_t per_layer = 0;
    for (int k = 0; k < LORA_NT; k++) {
        if (!(c->targets >> k & 1)) continue;
        per_layer += 2;
        int out_dim, in_dim;   // a larger r adapts nothing more, and would only cost memory
        lora_dims(mc, k, &out_dim, &in_dim);
        if (c->rank > out_dim || c->rank > in_dim)
            return err_set(err, "r %d is larger than %s's smaller dimension (%d) in the receiver's base", c->rank,
                           lora_target_names[k], out_dim < in_dim ? out_dim : in_dim);
    }
    size_t want = per_layer * (size_t)mc->layers;
    if (n != want)   // with none twice and none outside: every one present
        return err_set(err, "the adapter has %zu tensors; r %d on %zu modules of %d layers needs %zu", n, c->rank,
                       per_layer / 2, mc->layers, want);
    size_t cells = (size_t)mc->layers * LORA_NT * 2, k;   // seen: (layer, target, ab)
    unsigned char *seen = xmalloc(cells ? cells : 1);
    memset(seen, 0, cells ? cells : 1);
    for (k = 0; k < n; k++) {
        if (slot_of(mc, c, &t[k], &slot[k], err)) break;
        if (seen[((size_t)slot[k].layer * LORA_NT + (size_t)slot[k].target) * 2 + (size_t)slot[k].ab]++) {
            err_set(err, "tensor '%s' is sent twice", t[k].name);
            break;
        }
    }
    free(seen);
    if (k < n) return -1;
    *bytes = push_tensors_bytes(t, n);
    return 0;
}

float *push_lora_dest(const lora_adapter *a, push_lora_slot s) {
    size_t i = (size_t)s.layer * LORA_NT + (size_t)s.target;
    return s.ab ? a->b[i] : a->a[i];
}
