// survival.c — the share of a weight update that survives a precision
// (survival.h), over a sample of whole rows.
#include "sync/survival.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct surv {
    // The sample held: version `ver`, rows every `stride`-th of an update of
    // `total` elements; w and q (n floats): the weights and their rounding.
    int valid;
    uint64_t ver, total, stride;
    float *w, *q;
    size_t n, cap;
    // The update in progress: the same for `to`, and the sums over the
    // elements compared with the sample held.
    int cmp;
    uint64_t from, to, next_total, next_stride, row;
    float *nw, *nq;
    size_t nn, ncap;
    uint64_t moved, changed;
    double dd, qq, dq;        // Σ Δ², Σ δ², Σ δΔ
    // Scratch of one row: its 16-bit elements, int8/fp8 codes, scales.
    uint16_t *h;
    uint8_t *codes;
    float *scales;
    size_t row_cap;
};

surv_t *surv_new(void) {
    surv_t *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    return s;
}

void surv_free(surv_t *s) {
    if (!s) return;
    free(s->w);
    free(s->q);
    free(s->nw);
    free(s->nq);
    free(s->h);
    free(s->codes);
    free(s->scales);
    free(s);
}

void surv_begin(surv_t *s, uint64_t from, uint64_t to, uint64_t total) {
    s->from = from;
    s->to = to;
    s->next_total = total;
    s->next_stride = total > SURV_TARGET ? (total + SURV_TARGET - 1) / SURV_TARGET : 1;
    s->row = 0;
    s->nn = 0;
    s->moved = s->changed = 0;
    s->dd = s->qq = s->dq = 0;
    s->cmp = s->valid && s->ver == from && s->total == total && s->stride == s->next_stride;
}

// dst (K floats) = the row's elements, whatever their alignment.
static void load_row(surv_t *s, float *dst, const uint8_t *p, size_t K, rl_dtype src) {
    if (src == DT_F32) {
        memcpy(dst, p, 4 * K);
        return;
    }
    memcpy(s->h, p, 2 * K);
    if (src == DT_BF16) dt_bf16_to_f32(dst, s->h, K);
    else dt_f16_to_f32(dst, s->h, K);
}

// q (K floats) = w as the receiver keeps it.
static void round_row(surv_t *s, float *q, const float *w, size_t K, surv_round r) {
    switch (r.dtype) {
    case DT_BF16:
        for (size_t i = 0; i < K; i++) q[i] = bf16_to_f32(f32_to_bf16(w[i]));
        break;
    case DT_F16:
        for (size_t i = 0; i < K; i++) q[i] = f16_to_f32(f32_to_f16(w[i]));
        break;
    case DT_I8:
        dt_quantize_i8((int8_t *)s->codes, s->scales, w, 1, K, r.group);
        dt_dequantize_i8(q, (const int8_t *)s->codes, s->scales, 1, K, r.group);
        break;
    case DT_FP8:
        dt_quantize_fp8(s->codes, s->scales, w, 1, K);
        dt_dequantize_fp8(q, s->codes, s->scales, 1, K);
        break;
    default: memcpy(q, w, 4 * K); break;
    }
}

void surv_rows(surv_t *s, size_t rows, size_t K, const void *data, rl_dtype src, surv_round r) {
    const uint8_t *p = data;
    size_t es = dt_size(src);
    if (K > s->row_cap) {
        s->row_cap = K;
        s->h = xrealloc(s->h, K * sizeof *s->h);
        s->codes = xrealloc(s->codes, K);
        s->scales = xrealloc(s->scales, K * sizeof *s->scales);   // at most one scale an element
    }
    // The first row of this call whose index is a multiple of the stride.
    uint64_t first = (s->next_stride - s->row % s->next_stride) % s->next_stride;
    for (uint64_t i = first; i < rows; i += s->next_stride) {
        if (s->nn + K > s->ncap) {
            s->ncap = s->ncap * 2 > s->nn + K ? s->ncap * 2 : s->nn + K;
            s->nw = xrealloc(s->nw, s->ncap * sizeof *s->nw);
            s->nq = xrealloc(s->nq, s->ncap * sizeof *s->nq);
        }
        float *w = s->nw + s->nn, *q = s->nq + s->nn;
        load_row(s, w, p + i * K * es, K, src);
        round_row(s, q, w, K, r);
        if (s->cmp && s->nn + K <= s->n)
            for (size_t j = 0; j < K; j++) {
                double d = (double)w[j] - s->w[s->nn + j], e = (double)q[j] - s->q[s->nn + j];
                s->moved += w[j] != s->w[s->nn + j];
                s->changed += q[j] != s->q[s->nn + j];
                s->dd += d * d;
                s->qq += e * e;
                s->dq += d * e;
            }
        s->nn += K;
    }
    s->row += rows;
}

int surv_end(surv_t *s, surv_figures *f) {
    int ok = s->cmp && s->nn == s->n && s->nn > 0;
    if (ok) {
        f->from = s->from;
        f->to = s->to;
        f->n = s->nn;
        f->moved = (double)s->moved / (double)s->nn;
        f->changed = (double)s->changed / (double)s->nn;
        f->norm = s->dd > 0 ? sqrt(s->qq / s->dd) : NAN;
        f->along = s->dd > 0 ? s->dq / s->dd : NAN;
    }
    float *t = s->w;   // the update's sample becomes the one held
    s->w = s->nw;
    s->nw = t;
    t = s->q;
    s->q = s->nq;
    s->nq = t;
    size_t c = s->cap;
    s->cap = s->ncap;
    s->ncap = c;
    s->n = s->nn;
    s->valid = 1;
    s->ver = s->to;
    s->total = s->next_total;
    s->stride = s->next_stride;
    return ok;
}

void surv_drop(surv_t *s) { s->valid = 0; }

static const char *count(uint64_t n, char *b, size_t size) {
    if (n >= 1000000) snprintf(b, size, "%.1fM", n / 1e6);
    else if (n >= 1000) snprintf(b, size, "%.1fk", n / 1e3);
    else snprintf(b, size, "%llu", (unsigned long long)n);
    return b;
}

void surv_describe(const surv_figures *f, const char *prec, char *buf, size_t size) {
    char n[32];
    if (f->moved == 0) {
        snprintf(buf, size, "the learner changed none of the %s weights sampled", count(f->n, n, sizeof n));
        return;
    }
    snprintf(buf, size, "along %.2f (norm %.2fx the learner's; %.1f%% of the weights changed at %s, %.1f%% in f32; "
                        "%s sampled)", f->along, f->norm, 100 * f->changed, prec, 100 * f->moved, count(f->n, n, sizeof n));
}

int surv_watch_add(surv_watch *w, const surv_figures *f, double *mean, uint64_t *first) {
    if (!(f->moved > 0) || isnan(f->along)) return 0;
    w->along[w->n % SURV_WINDOW] = f->along;
    w->from[w->n % SURV_WINDOW] = f->from;
    w->n++;
    if (w->warned || w->n < SURV_WINDOW) return 0;
    double sum = 0;
    for (int i = 0; i < SURV_WINDOW; i++) sum += w->along[i];
    if (sum / SURV_WINDOW >= 0.5) return 0;
    w->warned = 1;
    *mean = sum / SURV_WINDOW;
    *first = w->from[w->n % SURV_WINDOW];   // the oldest of the ring
    return 1;
}
