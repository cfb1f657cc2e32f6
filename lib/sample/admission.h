// admission.h — when the next prompt may start generating: at once, or, with
// a lag bound (rl-sample --max-lag K, doc/design.md §5), only once the weights held
// are recent enough that no token of its group will be more than K versions
// behind the learner that trains on it.
#ifndef RLPIPE_ADMISSION_H
#define RLPIPE_ADMISSION_H

#include <stdint.h>

#include "sample/generate.h"
#include "sample/prompts.h"

// The learner takes a step per batch of `per_batch` whole groups, so group j
// is trained on at version v0 + j / per_batch (v0: the version the sampler
// and the learner started from). Its tokens carry the version held when they
// are sampled, at least the one held when it starts. Group j may start once
// the weights held are >= v0 + j / per_batch - K: every lag the learner
// measures on it is then <= K.
typedef struct {
    uint64_t v0;          // the version both started from
    uint64_t per_batch;   // whole groups per learner step: ceil(batch records / group)
    int64_t max_lag;      // K; < 0: no bound
    uint64_t started;     // groups started so far
} adm_t;

// batch: records per learner step (rl-learn --batch), group: samples per prompt.
void adm_init(adm_t *a, uint64_t v0, int64_t max_lag, uint64_t batch, int group);

// The weight version the next group needs before it may start (0 without a bound).
uint64_t adm_needed(const adm_t *a);

// Queues the feed's next prompts into g while it has free slots and the
// weights held (version `held`) admit them. 1 when it stopped because the
// weights are too old, else 0; *more becomes 0 once the feed has ended.
int adm_fill(adm_t *a, gen_t *g, prm_feed *feed, const prompt_set *ps, uint64_t held, int *more);

#endif
