#include "records/drift.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void drift_init(drift_t *d) { memset(d, 0, sizeof *d); }

int drift_add(drift_t *d, long index, double k3, drift_report *r) {
    if (isnan(k3)) return 0;
    if (d->n < DRIFT_WINDOW) {
        d->first_sum += k3;
        if (!d->n) d->first_lo = index;
        d->first_hi = index;
    }
    d->last[d->n % DRIFT_WINDOW] = k3;
    d->last_at[d->n % DRIFT_WINDOW] = index;
    d->n++;
    if (d->warned || d->n < 2 * DRIFT_WINDOW) return 0;
    double sum = 0;
    for (int i = 0; i < DRIFT_WINDOW; i++) sum += d->last[i];
    double first = d->first_sum / DRIFT_WINDOW, latest = sum / DRIFT_WINDOW;
    if (!(latest >= DRIFT_FLOOR && latest >= DRIFT_FACTOR * first)) return 0;
    d->warned = 1;
    // the oldest of the ring is the next to be overwritten
    *r = (drift_report){.first_mean = first, .latest_mean = latest, .first_lo = d->first_lo,
                        .first_hi = d->first_hi, .latest_lo = d->last_at[d->n % DRIFT_WINDOW],
                        .latest_hi = index};
    return 1;
}

void drift_message(const drift_report *r, const char *unit, char *buf, size_t size) {
    snprintf(buf, size,
             "the mismatch keeps growing: k3 %.2g over %s %ld-%ld, %.2g over %s %ld-%ld; the sampler is not "
             "following the learner's updates. A sampler at bf16 (rl-sample --dtype bf16 or bf16w) does this: "
             "updates far below a bf16 step reach it only as rounding noise, and for a model stored in bf16 not "
             "at all; sample at f16 or f32 (rl-sample(1), Precision; said once)",
             r->first_mean, unit, r->first_lo, r->first_hi, r->latest_mean, unit, r->latest_lo, r->latest_hi);
}
