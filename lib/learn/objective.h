// objective.h — the mathematics of the RL objective, one function per
// formula (doc/design.md §4 maps each formula here): the advantages of a
// group, the per-token terms of the losses, the importance weights and the
// KL estimates: the learner's reported mismatch, and the penalty to a frozen
// reference model.
//
// It depends on the leaves only: rl-ratio weighs its tokens with
// obj_tis_weight and obj_seq_weight, and its binary holds this file's code
// and nothing else of learn/ (tests/py/test_layers.py allows exactly that).
// Notation: μ the sampler's distribution (logp), π_old the learner's at the
// scoring version (logp_learner, or the first epoch's forward), π_θ the one
// being optimized; per token ρ = π_old/μ (weights) or π_θ/π_old (ppo,
// cispo; gspo's s is their geometric mean over a sequence).
#ifndef RLPIPE_OBJECTIVE_H
#define RLPIPE_OBJECTIVE_H

#include <stddef.h>

typedef enum { ADV_GRPO, ADV_DRGRPO, ADV_RLOO } adv_kind;

// grpo's ε in (r − mean) / (std + ε), std with Bessel's correction (as TRL's GRPO).
#define OBJ_GRPO_EPS 1e-4

// The advantages of one group's rewards r (n), into a (n):
//   grpo    a_i = (r_i − mean) / (std + ε),  std = sqrt(Σ (r_j − mean)² / (n − 1))
//   drgrpo  a_i = r_i − mean
//   rloo    a_i = r_i − (Σ_j r_j − r_i) / (n − 1)   (r_i − the mean of the others)
// All exactly 0 when every reward is equal (whatever rounding would say).
void obj_advantages(adv_kind k, const double *r, size_t n, double *a);
// A record's advantage: its "adv" field as given when it has one
// (has_adv), else the one its group's rewards gave (computed).
double obj_advantage(int has_adv, double adv, double computed);

// One token's term of a loss and its derivative with respect to log π_θ
// (obj_entropy's: with respect to H), before the normaliser.
typedef struct {
    double v, g;
} obj_term;

// sft: v = −mask · log π_θ, g = −mask.
obj_term obj_sft(double mask, double logp);
// pg: v = −w · mask · Â · log π_θ, g = −w · mask · Â (w held constant).
obj_term obj_pg(double w, double mask, double adv, double logp);
// ppo: v = −w · mask · min(ρ·Â, clip(ρ, 1−ε_lo, 1+ε_hi)·Â), ρ = exp(log π_θ − log π_old)
// (PPO, Schulman et al. 2017, ε_lo = ε_hi; clip-higher, DAPO, Yu et al. 2025,
// ε_hi > ε_lo); g = −w · mask · ρ·Â where the unclipped term is the minimum
// (d/dlog π_θ of ρ·Â is ρ·Â), 0 where the clipped one is (*clipped set to 1,
// else 0). v = g = 0 exactly where w · mask = 0, whatever ρ (even inf).
obj_term obj_ppo(double w, double mask, double adv, double logp, double logp_old, double eps_lo, double eps_hi,
                 int *clipped);
// cispo (MiniMax-M1, 2025): v = −w · mask · sg(ρ̂) · Â · log π_θ,
// ρ̂ = clip(ρ, 1−ε_lo, 1+ε_hi) held constant (sg: no gradient through it), so
// g = −w · mask · ρ̂ · Â; *clipped = ρ̂ ≠ ρ. v = g = 0 exactly where
// w · mask = 0, whatever ρ (even inf).
obj_term obj_cispo(double w, double mask, double adv, double logp, double logp_old, double eps_lo, double eps_hi,
                   int *clipped);
// The mask-weighted mean over a sequence's n tokens Σ mask·(x − y) / Σ mask
// (x NULL: 1 on every token; y NULL: 0; mask NULL: 1), 0 when Σ mask = 0:
// gspo's log s (x log π_θ, y log π_old) and its weight w̄ (x the record's w).
double obj_masked_mean(const float *x, const float *y, const float *mask, size_t n);
// gspo (Zheng et al. 2025): one sequence's term from log s, s = exp(log_s)
// its ratio (obj_masked_mean of log π_θ − log π_old), and w̄ its weight:
// v = −w̄ · min(s·Â, clip(s, 1−ε_lo, 1+ε_hi)·Â); g = dv/dlog s = −w̄ · s·Â
// where the unclipped term is the minimum, 0 where the clipped one is
// (*clipped). Token t's derivative is g · mask_t / Σ mask (log s is the
// mask-weighted mean of the tokens' log ratios). v = g = 0 where w̄ = 0.
// (It is ppo's term of one "token" of log-probability log s against 0.)
obj_term obj_gspo(double wbar, double adv, double log_s, double eps_lo, double eps_hi, int *clipped);

// A weight as a float32: a ratio beyond the float32 range is FLT_MAX, not
// inf (so that w · mask is never inf · 0).
float obj_weight_f32(double x);
// One token's truncated importance weight (TIS), w = min(ρ, C) as a float32,
// ρ = π_old/μ (C +inf: no cap); *capped = ρ > C. rl-ratio's token mode and
// rl-learn --tis both weigh by it.
float obj_tis_weight(double rho, double clip, int *capped);
// A sequence's weight from the log of its ratio, log_r (seq: Σ_t log ρ_t, the
// product; geo: its mean, the geometric mean): w = min(exp(log_r), C) as a
// float32, compared in logs so that a long sequence neither overflows nor
// underflows before the cap; *capped = log_r > log C.
float obj_seq_weight(double log_r, double clip, int *capped);

// The k3 estimate of KL(μ‖π_old) of one token, from log ρ and ρ = exp(log ρ):
//   k3 = ρ − 1 − log ρ   (>= 0; its mean over tokens is the reported k3)
double obj_k3(double log_rho, double rho);

typedef enum { KL_K1, KL_K2, KL_K3 } kl_est;

// One token's estimate of KL(π_θ‖π_ref) from d = log π_θ − log π_ref (its
// log-probability under a frozen reference model, the record's logp_ref),
// and its derivative with respect to log π_θ (Schulman, "Approximating KL
// divergence", 2020; k3 is GRPO's penalty, Shao et al. 2024):
//   k1 = d                    g = 1
//   k2 = d² / 2               g = d
//   k3 = exp(−d) + d − 1      g = 1 − exp(−d)   (>= 0)
obj_term obj_kl(kl_est k, double logp, double logp_ref);
// One token's entropy bonus C (PPO's, Schulman et al. 2017; verl's
// entropy_coeff) from H, the entropy (nats) of the distribution its
// log-probability is taken from, and the derivative with respect to H (not
// log π_θ: the model's output layer carries it through H):
//   v = −C · mask · H   g = −C · mask
// (C < 0: a penalty, which drives the entropy toward 0, a one-hot distribution.)
obj_term obj_entropy(double coef, double mask, double ent);
// DAPO's soft overlong punishment (Yu et al. 2025) of a sequence of len
// tokens, added to its reward:
//   0                              len <= l_max − l_cache
//   (l_max − l_cache − len) / l_cache   l_max − l_cache < len <= l_max
//   −1                             len > l_max
// (0 < l_cache <= l_max.)
double obj_overlong(double len, double l_max, double l_cache);

#endif
