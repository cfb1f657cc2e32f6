// adamw_kernel.h — the scalars of one AdamW update as both backends' kernels
// take them (ops.h `adamw`). The optimizer around it (schedule, clipping,
// steps) is the learner's: learn/adamw.h.
#ifndef RLPIPE_ADAMW_KERNEL_H
#define RLPIPE_ADAMW_KERNEL_H

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

#endif
