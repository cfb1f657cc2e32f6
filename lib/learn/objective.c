// objective.c — the formulas of the RL objective (objective.h).
#include "learn/objective.h"

#include <float.h>
#include <math.h>

void obj_advantages(adv_kind k, const double *r, size_t n, double *a) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += r[i];
    double mean = sum / (double)n;
    int equal = 1;
    for (size_t i = 1; i < n; i++) equal &= r[i] == r[0];
    for (size_t i = 0; i < n; i++) a[i] = 0;
    if (equal) return;   // nothing to prefer: exactly zero, whatever rounding says
    if (k == ADV_GRPO) {
        double ss = 0;
        for (size_t i = 0; i < n; i++) ss += (r[i] - mean) * (r[i] - mean);
        double sd = sqrt(ss / (double)(n - 1));
        for (size_t i = 0; i < n; i++) a[i] = (r[i] - mean) / (sd + OBJ_GRPO_EPS);
    } else if (k == ADV_DRGRPO) {
        for (size_t i = 0; i < n; i++) a[i] = r[i] - mean;
    } else {   // leave-one-out: r_i − mean of the others
        for (size_t i = 0; i < n; i++) a[i] = r[i] - (sum - r[i]) / (double)(n - 1);
    }
}

double obj_advantage(int has_adv, double adv, double computed) { return has_adv ? adv : computed; }

obj_term obj_sft(double mask, double logp) { return (obj_term){-mask * logp, -mask}; }

obj_term obj_pg(double w, double mask, double adv, double logp) {
    return (obj_term){-w * mask * adv * logp, -w * mask * adv};
}

// clip(x, 1 − eps_lo, 1 + eps_hi)
static double clip(double x, double eps_lo, double eps_hi) {
    double lo = 1 - eps_lo, hi = 1 + eps_hi;
    return x < lo ? lo : x > hi ? hi : x;
}

obj_term obj_ppo(double w, double mask, double adv, double logp, double logp_old, double eps_lo, double eps_hi,
                 int *clipped) {
    double rho = exp(logp - logp_old);
    double un = rho * adv, cl = clip(rho, eps_lo, eps_hi) * adv;
    *clipped = !(un <= cl);
    // a token outside the loss: its ρ may be inf (π_old of a token the model
    // did not sample can be tiny), and 0 · inf would be NaN
    if (w * mask == 0) return (obj_term){0, 0};
    if (!*clipped) return (obj_term){-w * mask * un, -w * mask * un};   // d/dlogp (ρ·Â) = ρ·Â
    return (obj_term){-w * mask * cl, 0};                                // the clipped term is constant in θ
}

obj_term obj_cispo(double w, double mask, double adv, double logp, double logp_old, double eps_lo, double eps_hi,
                   int *clipped) {
    double rho = exp(logp - logp_old), rc = clip(rho, eps_lo, eps_hi);
    *clipped = rc != rho;
    if (w * mask == 0) return (obj_term){0, 0};   // (ρ may be inf, as in obj_ppo; ρ̂ never is)
    return (obj_term){-w * mask * rc * adv * logp, -w * mask * rc * adv};
}

double obj_masked_mean(const float *x, const float *y, const float *mask, size_t n) {
    double sum = 0, msum = 0;
    for (size_t t = 0; t < n; t++) {
        double m = mask ? mask[t] : 1;
        if (m == 0) continue;   // left out, not multiplied by 0
        sum += m * ((x ? (double)x[t] : 1) - (y ? (double)y[t] : 0));
        msum += m;
    }
    return msum > 0 ? sum / msum : 0;
}

obj_term obj_gspo(double wbar, double adv, double log_s, double eps_lo, double eps_hi, int *clipped) {
    return obj_ppo(wbar, 1, adv, log_s, 0, eps_lo, eps_hi, clipped);
}

float obj_weight_f32(double x) { return x > FLT_MAX ? FLT_MAX : (float)x; }

float obj_tis_weight(double rho, double clip, int *capped) {
    *capped = rho > clip;
    return *capped ? (float)clip : obj_weight_f32(rho);
}

float obj_seq_weight(double log_r, double clip, int *capped) {
    *capped = log_r > log(clip);
    return *capped ? (float)clip : obj_weight_f32(exp(log_r));
}

double obj_k3(double log_rho, double rho) { return rho - 1 - log_rho; }

obj_term obj_kl(kl_est k, double logp, double logp_ref) {
    double d = logp - logp_ref;
    if (k == KL_K1) return (obj_term){d, 1};
    if (k == KL_K2) return (obj_term){d * d / 2, d};
    double e = exp(-d);
    return (obj_term){e + d - 1, 1 - e};
}

obj_term obj_entropy(double coef, double mask, double ent) { return (obj_term){-coef * mask * ent, -coef * mask}; }

double obj_overlong(double len, double l_max, double l_cache) {
    double start = l_max - l_cache;   // the punishment's onset
    if (len <= start) return 0;
    if (len <= l_max) return (start - len) / l_cache;
    return -1;
}
