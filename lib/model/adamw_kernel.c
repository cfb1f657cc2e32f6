// adamw_kernel.c — the AdamW update's scalars in float (adamw_kernel.h).
#include "model/adamw_kernel.h"

rl_adamw_f32 adamw_f32(const rl_adamw *h) {
    return (rl_adamw_f32){
        .decay = (float)(1.0 - (double)h->lr * h->wd),
        .lerp_w = (float)(1.0 - (double)h->beta1),
        .beta2 = h->beta2,
        .one_minus_beta2 = (float)(1.0 - (double)h->beta2),
        .bc2_sqrt = (float)h->bc2_sqrt,
        .eps = h->eps,
        .neg_step = (float)(-(double)h->lr / h->bc1),
        .gscale = h->gscale,
    };
}
