// admission.c — starting prompts under the lag bound (admission.h).
#include "sample/admission.h"

void adm_init(adm_t *a, uint64_t v0, int64_t max_lag, uint64_t batch, int group) {
    *a = (adm_t){.v0 = v0, .max_lag = max_lag, .per_batch = batch ? (batch + (uint64_t)group - 1) / (uint64_t)group : 1};
}

uint64_t adm_needed(const adm_t *a) {
    if (a->max_lag < 0) return 0;
    uint64_t at = a->v0 + a->started / a->per_batch, k = (uint64_t)a->max_lag;
    return at > k ? at - k : 0;
}

int adm_fill(adm_t *a, gen_t *g, prm_feed *feed, const prompt_set *ps, uint64_t held, int *more) {
    while (*more && gen_waiting(g) < (size_t)gen_free_slots(g)) {
        if (held < adm_needed(a)) return 1;
        long p = prm_feed_next(feed);
        if (p < 0) *more = 0;
        else {
            gen_add(g, (size_t)p, ps->v[p].ids, ps->v[p].n_ids);
            a->started++;
        }
    }
    return 0;
}
