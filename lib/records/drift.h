// drift.h — a warning, given once, when the sampler/learner mismatch keeps
// growing batch after batch (doc/design.md §4 "Mismatch metrics").
//
// Fed one k3 = mean(rho - 1 - log rho) per batch (mismatch.h; rl-ratio's
// batches, rl-learn --tis's steps); a NaN k3 (a batch without tokens to
// define it) is ignored. With W = DRIFT_WINDOW batches:
//   first  = mean k3 of the first W batches with a k3
//   latest = mean k3 of the latest W batches with a k3
// Once at least 2W batches with a k3 were seen, the warning is due (once per
// tracker) at the first batch where
//   latest >= DRIFT_FLOOR  and  latest >= DRIFT_FACTOR * first.
// The floor is well above the k3 that the lag of in-flight updates alone
// gives (RL on SmolLM2-135M, 30 steps at lr 1e-5: 6.5e-4 on average with an
// f32 sampler, 3.7e-3 with f16): a k3 that grows from there past the floor
// is a sampler that does not follow the learner, e.g. a bf16 sampler of a
// model stored in bf16, which rounds the learner's updates below half a
// bf16 step back to the weights it started from (k3 0.0017 at the first
// batch to 0.58 by step 30). A mismatch that is
// high from the start (a sampler far off, not drifting) never warns: its
// first window is high too.
#ifndef RLPIPE_DRIFT_H
#define RLPIPE_DRIFT_H

#include <stddef.h>
#include <stdint.h>

#define DRIFT_WINDOW 5
#define DRIFT_FLOOR 0.02
#define DRIFT_FACTOR 4.0

typedef struct {
    double first_sum;               // k3 summed over the first window
    long first_lo, first_hi;        // its batch indices
    double last[DRIFT_WINDOW];      // the latest W k3, a ring at n % W
    long last_at[DRIFT_WINDOW];     // their batch indices
    uint64_t n;                     // batches with a k3
    int warned;
} drift_t;

// What the warning says: the two windows' mean k3 and the batch indices (as
// the caller numbers them) of their first and last batches.
typedef struct {
    double first_mean, latest_mean;
    long first_lo, first_hi, latest_lo, latest_hi;
} drift_report;

void drift_init(drift_t *d);
// Batch `index`'s k3. Returns 1 when the warning is due now (once; *r
// filled), else 0.
int drift_add(drift_t *d, long index, double k3, drift_report *r);
// The warning's text (no tool name, no newline): the two figures, the likely
// cause and the fix; unit names the batches ("batches", "steps").
void drift_message(const drift_report *r, const char *unit, char *buf, size_t size);

#endif
