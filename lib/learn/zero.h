// zero.h — the optimizer of a data-parallel learner, sharded as ZeRO-1
// (doc/design.md §4): every rank holds all parameters and computes the
// gradient of its share of the batch; the gradients are reduce-scattered, so
// that each rank holds the sum of its part of the flat parameter order; the
// norm for clipping is the sum of the parts' squares over the ranks; each
// rank takes the AdamW step on its part, with moments of that part only
// (1/N of them per rank), and the parts are all-gathered.
#ifndef RLPIPE_ZERO_H
#define RLPIPE_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/dist.h"
#include "learn/adamw.h"
#include "model/model.h"

// counts (size values): the parts of n parameters, in rank order. Equal
// multiples of 64 floats (256 bytes) but the last, which takes the rest.
void zero_parts(size_t n, int size, size_t *counts);
// This rank's part [*lo, *hi).
void zero_range(const size_t *counts, int rank, size_t *lo, size_t *hi);

// m's training state with the moments of this rank's part only
// (model_train_init_range); returns the parts (malloc'd, dist_size values),
// or NULL with err.
size_t *zero_train_init(model_t *m, dist_t *d, rl_err *err);

// One optimizer step (adamw_step's, across the ranks): the gradients summed,
// clipped by the global norm, AdamW on this rank's part, the parameters
// gathered. A gradient that is not finite is applied on no rank: -1 with
// *grad_norm set, err empty; -1 with err for a failed collective.
int zero_step(model_t *m, dist_t *d, const size_t *counts, const adamw_opts *o, uint64_t step, double *grad_norm,
              double *lr, rl_err *err);

// Rank 0's host copies of the AdamW moments (nparams floats each, flat
// order, its own part filled) := every rank's parts; on other ranks the
// arrays are not touched (NULL will do), their parts are sent. Every rank
// calls it at once (a checkpoint).
int zero_gather_moments(const model_t *m, dist_t *d, const size_t *counts, float *exp_avg, float *exp_avg_sq, rl_err *err);

#endif
