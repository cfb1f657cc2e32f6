// admission.c — starting prompts under the lag bound (admission.h).
#include "sample/admission.h"

void adm_init(adm_t *a, uint64_t v0, int64_t max_lag, uint64_t batch, int group) {
    *a = (adm_t){.v0 = v0, .max_lag = max_lag, .per_batch = batch ? (batch + (uint64_t)group - 1) / (uint64_t)group : 1};
}

void adm_dropped(adm_t *a, uint64_t dropped) { a->dropped = dropped; }

int adm_full(const adm_t *a) { return a->max_kept && a->started - a->dropped >= a->max_kept; }

uint64_t adm_needed(const adm_t *a) {
    if (a->max_lag < 0) return 0;
    // the next group's index among those written is at most this (admission.h)
    uint64_t kept = a->started - a->dropped;
    uint64_t at = a->v0 + kept / a->per_batch, k = (uint64_t)a->max_lag;
    return at > k ? at - k : 0;
}

adm_verdict adm_next(const adm_t *a, uint64_t held) {
    return adm_full(a) ? ADM_FULL : held < adm_needed(a) ? ADM_LAG : ADM_START;
}

int adm_fill(adm_t *a, gen_t *g, prm_feed *feed, const prompt_set *ps, uint64_t held, int *more) {
    while (*more && gen_waiting(g) < (size_t)gen_free_slots(g)) {
        adm_verdict v = adm_next(a, held);
        if (v != ADM_START) return v == ADM_LAG;
        long p = prm_feed_next(feed);
        if (p < 0) *more = 0;
        else {
            gen_add(g, (size_t)p, ps->v[p].ids, ps->v[p].n_ids);
            a->started++;
        }
    }
    return 0;
}
