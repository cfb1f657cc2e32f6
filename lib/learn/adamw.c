// adamw.c — learning-rate schedule, clipping and the AdamW step (adamw.h).
#include "learn/adamw.h"

#include <math.h>

#include "model/model.h"

const adamw_opts adamw_default_opts = {
    .lr = 1e-6, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .grad_clip = 1.0,
};

double adamw_lr(const adamw_opts *o, uint64_t step) {
    if (o->warmup && step <= o->warmup) return o->lr * (double)step / (double)o->warmup;
    if (o->schedule == SCHED_CONSTANT || o->total_steps <= o->warmup) return o->lr;
    double progress = (double)(step - o->warmup) / (double)(o->total_steps - o->warmup);
    if (progress > 1) progress = 1;
    return o->lr * 0.5 * (1.0 + cos(M_PI * progress));
}

int adamw_step(struct model *m, const adamw_opts *o, uint64_t step, double *grad_norm, double *lr) {
    return adamw_apply(m, o, step, sqrt(model_grad_sumsq(m)), grad_norm, lr);
}

int adamw_apply(struct model *m, const adamw_opts *o, uint64_t step, double norm, double *grad_norm, double *lr) {
    *grad_norm = norm;
    *lr = adamw_lr(o, step);
    if (!isfinite(norm)) return -1;
    // torch.nn.utils.clip_grad_norm_: gradients times max_norm / (norm + 1e-6) when that is below 1
    double scale = 1.0;
    if (o->grad_clip > 0) {
        double c = o->grad_clip / (norm + 1e-6);
        if (c < 1) scale = c;
    }
    rl_adamw h = {
        .lr = (float)*lr, .beta1 = (float)o->beta1, .beta2 = (float)o->beta2, .eps = (float)o->eps,
        .wd = (float)o->weight_decay, .gscale = (float)scale,
        .bc1 = 1.0 - pow(o->beta1, (double)step), .bc2_sqrt = sqrt(1.0 - pow(o->beta2, (double)step)),
    };
    model_adamw(m, &h);
    return 0;
}
