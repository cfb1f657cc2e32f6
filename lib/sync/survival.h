// survival.h — how much of a weight update survives the precision a sampler
// keeps its weights at. Between two versions the learner (f32) moves its
// weights by Δ = w_new − w_old; the sampler installs q(w_new) in place of
// q(w_old), where q rounds to its precision, so it moves by
// δ = q(w_new) − q(w_old). A model stored in bf16 has its weights on the bf16
// grid: learner updates below half a bf16 step give δ = 0, and a bf16 sampler
// goes on sampling the model it started from. Over a sample of the weights:
//   moved    fraction of the weights the learner changed (w_new ≠ w_old)
//   changed  fraction whose value at the sampler's precision changed
//   norm     ‖δ‖ / ‖Δ‖ (above 1: rounding noise larger than the update)
//   along    ⟨δ, Δ⟩ / ⟨Δ, Δ⟩: the share of the learner's update that the
//            sampler's carries (1 at f32; near 1 where rounding errors are
//            unbiased; near 0 where the update rounds away)
// Whoever rounds measures: the sender of a push converting to a 16-bit wire
// (pusher.h), the receiver quantizing what arrives in f32 (receiver.h).
//
// The sample: whole rows (a matrix's rows of K inputs, a vector as one row),
// every stride-th row of the update in order, the stride chosen so that about
// SURV_TARGET elements are kept (all of them for a small model). It holds
// w_old and q(w_old) as f32: 8 bytes an element sampled.
#ifndef RLPIPE_SURVIVAL_H
#define RLPIPE_SURVIVAL_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define SURV_TARGET ((uint64_t)1 << 21)

// How the receiver keeps a tensor: f32 (as it is), bf16, f16 (rounded to
// nearest even), int8 (dt_quantize_i8 with `group`), fp8 (dt_quantize_fp8).
typedef struct {
    rl_dtype dtype;
    int group;
} surv_round;

typedef struct {
    uint64_t from, to;        // the versions compared
    uint64_t n;               // weights in the sample
    double moved, changed;    // fractions of n
    double norm, along;       // NaN when the learner moved nothing sampled
} surv_figures;

typedef struct surv surv_t;

surv_t *surv_new(void);
void surv_free(surv_t *s);   // NULL: a no-op

// One update: version `to` replacing `from`, `total` elements in all, whose
// tensors come in the same order every time.
void surv_begin(surv_t *s, uint64_t from, uint64_t to, uint64_t total);
// The next `rows` rows of K elements of the update, stored as `src` (f32,
// bf16 or f16; the bytes need no alignment), kept at r.
void surv_rows(surv_t *s, size_t rows, size_t K, const void *data, rl_dtype src, surv_round r);
// Ends the update. 1 with *f when the sample held was of version `from`, with
// the same rows; 0 when there is nothing to compare with (the first update,
// one from another version, another layout). The sample is `to`'s either way.
int surv_end(surv_t *s, surv_figures *f);
// Forgets the sample (the receiver refused the update, or it failed).
void surv_drop(surv_t *s);

// "along 0.02 (norm 0.06x the learner's; 0.4% of the weights changed at bf16,
// 99.8% in f32; 2.1M sampled)" for messages; `prec` names the precision.
void surv_describe(const surv_figures *f, const char *prec, char *buf, size_t size);
// Whether the precision loses most of the learner's updates: the mean along
// of the latest SURV_WINDOW versions measured (those the learner moved) is
// below 1/2. One version alone says little: in the first steps of a run,
// updates of a few ulps give one version's along anywhere from 0.1 to 2
// where the run's mean is 0.9 (SmolLM2-135M at bf16 from f32 weights: means
// of 5 from 0.67 up; from weights on the bf16 grid: 0.08 to 0.29).
#define SURV_WINDOW 5
typedef struct {
    double along[SURV_WINDOW];   // a ring of the latest versions' along
    uint64_t from[SURV_WINDOW];  // and the version each update started from
    unsigned n;                  // versions measured
    int warned;
} surv_watch;
// Adds a version's figures; 1 once, when the warning is due (*mean: the
// window's mean along, *first: the first version of the window), else 0.
int surv_watch_add(surv_watch *w, const surv_figures *f, double *mean, uint64_t *first);

#endif
