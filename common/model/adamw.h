// adamw.h — the optimizer of DESIGN §4: AdamW as torch.optim.AdamW defines it,
// gradient-norm clipping as torch.nn.utils.clip_grad_norm_ does it, and the
// learning-rate schedule (linear warm-up, then constant or cosine).
#ifndef RLPIPE_ADAMW_H
#define RLPIPE_ADAMW_H

#include <stdint.h>

// One AdamW update as torch.optim.AdamW (single-tensor form) computes it, on
// n parameters p with gradients g·gscale and moments m, v:
//   p ← p·(1 − lr·wd);  m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;
//   p ← p − (lr / bc1) · m / (√v / bc2_sqrt + eps)
// bc1 = 1 − β1^step and bc2_sqrt = √(1 − β2^step) are computed by the caller in double.
typedef struct {
    float lr, beta1, beta2, eps, wd, gscale;
    double bc1, bc2_sqrt;
} rl_adamw;

// The scalars of one step as torch.optim.AdamW derives them in double
// (Python floats) and its float32 kernels receive them: each cast to float
// once. Both backends compute with these.
typedef struct {
    float decay;        // 1 − lr·wd
    float lerp_w;       // 1 − β1: m ← lerp(m, g, lerp_w)
    float beta2, one_minus_beta2;
    float bc2_sqrt, eps;
    float neg_step;     // −lr / bc1
    float gscale;
} rl_adamw_f32;
rl_adamw_f32 adamw_f32(const rl_adamw *h);

typedef enum { SCHED_CONSTANT, SCHED_COSINE } adamw_schedule;

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    double grad_clip;           // the most gradient norm; 0: no clipping
    uint64_t warmup;            // steps of linear warm-up: lr·step/warmup
    adamw_schedule schedule;    // after warm-up: constant, or cosine down to 0 at total_steps
    uint64_t total_steps;
} adamw_opts;

extern const adamw_opts adamw_default_opts;   // lr 1e-6, betas 0.9/0.999, eps 1e-8, wd 0.01, clip 1

// The learning rate of optimizer step `step` (1 for the first).
double adamw_lr(const adamw_opts *o, uint64_t step);

struct model;
// Takes optimizer step `step` (1 for the first) with the model's gradient:
// clipped to o->grad_clip, then AdamW. *grad_norm: the gradient's norm before
// clipping; *lr: the learning rate used. A gradient that is not finite is
// not applied: returns -1 and leaves weights and moments as they were.
int adamw_step(struct model *m, const adamw_opts *o, uint64_t step, double *grad_norm, double *lr);

#endif
