// admission.h — when the next prompt may start generating: at once, or, with
// a lag bound (rl-sample --max-lag K, doc/design.md §5), only once the weights held
// are recent enough that no token of its group will be more than K versions
// behind the learner that trains on it.
#ifndef RLPIPE_ADMISSION_H
#define RLPIPE_ADMISSION_H

#include <stdint.h>

#include "sample/generate.h"
#include "sample/prompts.h"

// The learner takes a step per batch of `per_batch` whole groups, so the
// group written j-th (j = 0, 1, ...) is trained on at version
// v0 + j / per_batch (v0: the version the sampler and the learner started
// from). Its tokens carry the version held when they are sampled, at least
// the one held when it starts. A group may start once the weights held are
// >= v0 + c / per_batch - K, c = the groups started before it less those
// dropped so far (rl-sample --drop-uniform: not written); every lag the
// learner measures on it is then <= K, because c >= j:
//
//   - groups are written in the order they were started (gen_opts.in_order,
//     which --max-lag sets), each once its rewards are known, or dropped,
//     so j = s - d, s the groups started before it and d those of them
//     dropped;
//   - a drop is decided only once its group has finished, so the d_now drops
//     known when it starts are all of groups started before it, d_now <= d,
//     and c = s - d_now >= s - d = j.
//
// Groups that finish out of order change nothing: they wait for the ones
// started before them. Without in_order the bound would not hold: a group
// written after ones started later has j > s - d. A group that is itself
// dropped is trained on by no one.
typedef struct {
    uint64_t v0;          // the version both started from
    uint64_t per_batch;   // whole groups per learner step: ceil(batch records / group)
    int64_t max_lag;      // K; < 0: no bound
    uint64_t started;     // groups started so far
    uint64_t dropped;     // groups dropped so far (adm_dropped)
    uint64_t max_kept;    // groups started and not dropped at most (0: no limit)
} adm_t;

// batch: records per learner step (rl-learn --batch), group: samples per prompt.
void adm_init(adm_t *a, uint64_t v0, int64_t max_lag, uint64_t batch, int group);

// The groups dropped so far, in all (a count that only grows).
void adm_dropped(adm_t *a, uint64_t dropped);

// 1 when max_kept groups are started and not dropped: none may start
// unless some of them are dropped.
int adm_full(const adm_t *a);

// The weight version the next group needs before it may start (0 without a bound).
uint64_t adm_needed(const adm_t *a);

// Whether the next group may start with the weights held (version `held`).
typedef enum { ADM_START, ADM_LAG, ADM_FULL } adm_verdict;
adm_verdict adm_next(const adm_t *a, uint64_t held);

// Queues the feed's next prompts into g while it has free slots, the
// groups kept are below max_kept and the weights held (version `held`)
// admit them. 1 when it stopped because the weights are too old, else 0;
// *more becomes 0 once the feed has ended.
int adm_fill(adm_t *a, gen_t *g, prm_feed *feed, const prompt_set *ps, uint64_t held, int *more);

#endif
