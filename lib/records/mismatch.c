#include "records/mismatch.h"

#include <math.h>
#include <string.h>

void mm_init(mm_acc *a) {
    memset(a, 0, sizeof *a);
    a->rho_min = INFINITY;
    a->rho_max = -INFINITY;
    a->lag_max = INT64_MIN;
}

// guess_capped: count as capped the tokens whose w is below their ratio.
// model: NULL, or 0 on the tokens left out.
static void add(mm_acc *a, const float *logp, const float *logp_learner, const float *w,
                const uint8_t *mask, const uint8_t *model, size_t n, int guess_capped) {
    for (size_t t = 0; t < n; t++) {
        if (model && !model[t]) continue;
        double rho = NAN;
        if (logp && logp_learner) {
            double d = (double)logp_learner[t] - (double)logp[t];
            rho = exp(d);
            a->n++;
            a->sum_k1 -= d;
            a->sum_k3 += rho - 1 - d;
            a->sum_rho += rho;
            if (rho < a->rho_min) a->rho_min = rho;
            if (rho > a->rho_max) a->rho_max = rho;
            double dp = fabs(exp((double)logp_learner[t]) - exp((double)logp[t]));
            if (dp > a->max_dp) a->max_dp = dp;
        }
        if (mask) {
            a->n_mask++;
            a->n_masked += mask[t] == 0;
        }
        if (w) {
            a->n_w++;
            // w is float32: a weight equal to its ratio may differ from the
            // double rho in the last bits, so "below" means by more than that.
            if (guess_capped && !isnan(rho) && (double)w[t] < rho * (1 - 1e-6)) a->n_capped++;
            if (!mask || mask[t]) {
                a->n_ess++;
                a->sum_w += w[t];
                a->sum_w2 += (double)w[t] * w[t];
            }
        }
    }
}

void mm_add(mm_acc *a, const float *logp, const float *logp_learner, const float *w,
            const uint8_t *mask, size_t n) {
    add(a, logp, logp_learner, w, mask, NULL, n, 1);
}

void mm_add_capped(mm_acc *a, const float *logp, const float *logp_learner, const float *w,
                   const uint8_t *mask, const uint8_t *model, size_t n, size_t n_capped) {
    add(a, logp, logp_learner, w, mask, model, n, 0);
    a->n_capped += n_capped;
}

void mm_add_lag(mm_acc *a, const uint32_t *ver, const uint8_t *model, size_t n, uint64_t ver_learner) {
    for (size_t t = 0; t < n; t++) {
        if (model && !model[t]) continue;
        int64_t lag = (int64_t)ver_learner - (int64_t)ver[t];
        a->n_lag++;
        a->sum_lag += (double)lag;
        if (lag > a->lag_max) a->lag_max = lag;
    }
}

static double ratio(double num, uint64_t den) { return den ? num / (double)den : NAN; }

double mm_k1(const mm_acc *a) { return ratio(a->sum_k1, a->n); }
double mm_k3(const mm_acc *a) { return ratio(a->sum_k3, a->n); }
double mm_ratio_mean(const mm_acc *a) { return ratio(a->sum_rho, a->n); }
double mm_capped_frac(const mm_acc *a) { return ratio((double)a->n_capped, a->n_w); }
double mm_masked_frac(const mm_acc *a) { return ratio((double)a->n_masked, a->n_mask); }
double mm_ess(const mm_acc *a) {
    return a->n_ess && a->sum_w2 > 0 ? a->sum_w * a->sum_w / ((double)a->n_ess * a->sum_w2) : NAN;
}
double mm_lag_mean(const mm_acc *a) { return ratio(a->sum_lag, a->n_lag); }
