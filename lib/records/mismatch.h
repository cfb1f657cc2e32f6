// mismatch.h — how far the sampler's distribution is from the learner's,
// and how stale the sampled tokens are (doc/design.md §4 "Mismatch metrics").
//
// Per token t: rho_t = exp(logp_learner_t - logp_t) = pi_old / mu.
//   k1 = mean(logp - logp_learner)          (KL(mu||pi_old) estimate)
//   k3 = mean(rho - 1 - log rho)            (its low-variance form)
//   ess = (sum w)^2 / (N sum w^2) over tokens taking part (mask != 0)
//   capped = fraction of tokens whose weight is below their ratio (w < rho),
//            or that the producer of w says it capped (mm_add_capped)
//   lag = ver_learner - ver_t
#ifndef RLPIPE_MISMATCH_H
#define RLPIPE_MISMATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t n;                       // tokens with logp and logp_learner
    double sum_k1, sum_k3, sum_rho, rho_min, rho_max, max_dp;
    uint64_t n_w, n_capped;           // tokens with w
    uint64_t n_ess;                   // tokens with w and mask != 0
    double sum_w, sum_w2;
    uint64_t n_mask, n_masked;        // tokens with mask; of them mask == 0
    uint64_t n_lag;
    int64_t lag_max;                  // signed: a scorer may hold older weights than the sampler
    double sum_lag;
} mm_acc;

void mm_init(mm_acc *a);
// One sequence of n tokens; logp_learner, w, mask may be NULL when absent.
void mm_add(mm_acc *a, const float *logp, const float *logp_learner, const float *w,
            const uint8_t *mask, size_t n);
// The same, from the producer of w, which knows how many of the n tokens it
// capped: in seq and geo modes a weight is the sequence's, and comparing it
// with each token's ratio would say nothing. model (n, or NULL: every
// token) is 0 on the tokens that are not the model's (those an environment
// added to a multi-turn rollout): they count in no quantity.
void mm_add_capped(mm_acc *a, const float *logp, const float *logp_learner, const float *w,
                   const uint8_t *mask, const uint8_t *model, size_t n, size_t n_capped);
// The lag of n tokens sampled at versions ver; model as for mm_add_capped.
void mm_add_lag(mm_acc *a, const uint32_t *ver, const uint8_t *model, size_t n, uint64_t ver_learner);

double mm_k1(const mm_acc *a);
double mm_k3(const mm_acc *a);
double mm_ratio_mean(const mm_acc *a);
double mm_capped_frac(const mm_acc *a);
double mm_masked_frac(const mm_acc *a);
double mm_ess(const mm_acc *a);
double mm_lag_mean(const mm_acc *a);

#endif
