// adamw.h — the optimizer of doc/design.md §4: AdamW as torch.optim.AdamW defines it,
// gradient-norm clipping as torch.nn.utils.clip_grad_norm_ does it, and the
// learning-rate schedule (linear warm-up, then constant or cosine).
#ifndef RLPIPE_ADAMW_H
#define RLPIPE_ADAMW_H

#include <stdint.h>

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
// The same given the gradient's norm (a sharded optimizer's, summed over the
// ranks), on the parameters of the model's moments' range.
int adamw_apply(struct model *m, const adamw_opts *o, uint64_t step, double norm, double *grad_norm, double *lr);

#endif
