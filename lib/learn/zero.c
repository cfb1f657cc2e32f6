// zero.c — ZeRO-1 over the ranks of a dist group (zero.h).
#include "learn/zero.h"

#include <math.h>
#include <stdlib.h>

void zero_parts(size_t n, int size, size_t *counts) {
    size_t per = (n + (size_t)size - 1) / (size_t)size;
    per = (per + 63) / 64 * 64;
    size_t left = n;
    for (int r = 0; r < size; r++) {
        counts[r] = r == size - 1 ? left : per < left ? per : left;
        left -= counts[r];
    }
}

void zero_range(const size_t *counts, int rank, size_t *lo, size_t *hi) {
    *lo = 0;
    for (int r = 0; r < rank; r++) *lo += counts[r];
    *hi = *lo + counts[rank];
}

size_t *zero_train_init(model_t *m, dist_t *d, rl_err *err) {
    size_t *counts = xmalloc((size_t)dist_size(d) * sizeof *counts), lo, hi;
    zero_parts(model_nparams(m), dist_size(d), counts);
    zero_range(counts, dist_rank(d), &lo, &hi);
    if (model_train_init_range(m, lo, hi, err)) {
        free(counts);
        return NULL;
    }
    return counts;
}

int zero_step(model_t *m, dist_t *d, const size_t *counts, const adamw_opts *o, uint64_t step, double *grad_norm,
              double *lr, rl_err *err) {
    err->msg[0] = 0;
    const rl_ops *ops = model_ops(m);
    if (dist_reduce_scatter(d, ops, model_train_buffer(m, MODEL_GRAD), counts, err)) return -1;
    double sumsq = model_grad_sumsq(m);   // of this rank's part
    if (dist_sum(d, &sumsq, 1, err)) return -1;
    if (adamw_apply(m, o, step, sqrt(sumsq), grad_norm, lr) < 0) return -1;
    return dist_all_gather(d, ops, model_train_buffer(m, MODEL_PARAM), counts, err);
}

int zero_gather_moments(const model_t *m, dist_t *d, const size_t *counts, float *exp_avg, float *exp_avg_sq, rl_err *err) {
    size_t lo, hi;
    model_train_range(m, &lo, &hi);
    float *part = dist_rank(d) ? xmalloc((hi - lo ? hi - lo : 1) * sizeof *part) : NULL;
    float *out[2] = {exp_avg, exp_avg_sq};
    int which[2] = {MODEL_EXP_AVG, MODEL_EXP_AVG_SQ}, rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (part) model_ops(m)->download(part, model_train_buffer(m, which[k]), (hi - lo) * sizeof *part);
        rc = dist_gather(d, part, out[k], counts, err);
    }
    free(part);
    return rc;
}
