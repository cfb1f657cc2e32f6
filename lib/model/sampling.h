// sampling.h — drawing the next token from a row of logits, and the exact
// log-probability of the token drawn under the distribution it was drawn
// from (doc/design.md §2 `logp`).
//
// The distribution, in the order Hugging Face's generate applies it:
// z = logits / temperature; top-k keeps the k largest z (ties: the lower id
// first); top-p keeps the smallest prefix of the remaining tokens, most
// probable first, whose probability (softmax over what top-k kept) reaches
// top_p; the kept tokens are renormalised. Temperature 0 is greedy: the
// largest logit (the lowest id among equals), with log-probability 0, since
// the distribution it was drawn from is a point mass.
#ifndef RLPIPE_SAMPLING_H
#define RLPIPE_SAMPLING_H

#include <stdint.h>

#include "rng.h"

typedef struct {
    float temperature;   // >= 0; 0 = greedy
    float top_p;         // (0, 1]; 1 = off
    uint32_t top_k;      // 0 = off
} smp_params;

typedef struct smp_work smp_work;   // scratch for one vocabulary size

smp_work *smp_work_new(int V);
void smp_work_free(smp_work *w);

// Draws a token from logits[0..V) (V as given to smp_work_new) with one
// uniform from rng (none when greedy), and stores its log-probability under
// the distribution drawn from in *logp (computed in double).
uint32_t smp_draw(const float *logits, const smp_params *p, rl_rng *rng, smp_work *w, double *logp);
// The same with the uniform u in [0, 1) given: the token is the first, in
// the order kept (ids ascending without top-k/top-p; most probable first with
// them), at which the running sum of the kept probabilities exceeds u times
// their total (the last with nonzero probability if rounding leaves none).
uint32_t smp_draw_u(const float *logits, const smp_params *p, double u, smp_work *w, double *logp);

#endif
