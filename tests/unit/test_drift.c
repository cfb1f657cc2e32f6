// Unit tests of the growing-mismatch warning (records/drift.h): W = 5
// batches; once 2W batches with a k3 were seen, warn once when the latest
// W's mean k3 is >= 0.02 and >= 4 times the first W's.
#include <math.h>
#include <string.h>

#include "check.h"
#include "records/drift.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1, fabs(b)); }

// Feeds k3[0 .. n) as batches 1 .. n; returns how many warnings, the batch
// of the first in *at and its report in *r.
static int feed(const double *k3, int n, long *at, drift_report *r) {
    drift_t d;
    drift_init(&d);
    int warnings = 0;
    *at = -1;
    for (int i = 0; i < n; i++) {
        drift_report ri;
        if (drift_add(&d, i + 1, k3[i], &ri)) {
            if (!warnings++) {
                *at = i + 1;
                *r = ri;
            }
        }
    }
    return warnings;
}

// Batches 1 .. n with k3 `start` for the first 5, `then` for the rest: the
// warnings fed, the batch of the first in *at.
static int step_series(double start, double then, int n, long *at) {
    double k3[100];
    drift_report r;
    for (int i = 0; i < n; i++) k3[i] = i < DRIFT_WINDOW ? start : then;
    return feed(k3, n, at, &r);
}

static void a_flat_series_never_warns(void) {
    long at;
    int w = step_series(0.0016, 0.0016, 100, &at);   // the lag alone, f32 sampler
    CHECK(w == 0, "%d warnings, the first at batch %ld", w, at);
}

static void a_flat_high_series_never_warns(void) {
    // a sampler far off from the start, that does not drift: first = latest
    long at;
    int w = step_series(0.3, 0.3, 100, &at);
    CHECK(w == 0, "%d warnings, the first at batch %ld", w, at);
}

static void growth_from_0_0015_to_0_24_over_30_batches_warns_once_at_batch_18(void) {
    // k3_i = 0.0015 * 160^((i-1)/29), i = 1..30: geometric from 0.0015 to 0.24.
    // first = mean(k3_1..5) = 0.0021944; the floor 0.02 (above 4 * first =
    // 0.0088) is reached first by mean(k3_14..18) = 0.021348 (mean(k3_13..17)
    // = 0.017921).
    double k3[30];
    for (int i = 0; i < 30; i++) k3[i] = 0.0015 * pow(0.24 / 0.0015, i / 29.0);
    long at;
    drift_report r;
    int w = feed(k3, 30, &at, &r);
    CHECK(w == 1, "%d warnings", w);
    CHECK(at == 18, "warned at batch %ld", at);
    CHECK(r.first_lo == 1 && r.first_hi == 5 && r.latest_lo == 14 && r.latest_hi == 18,
          "windows %ld-%ld and %ld-%ld", r.first_lo, r.first_hi, r.latest_lo, r.latest_hi);
    double first = (k3[0] + k3[1] + k3[2] + k3[3] + k3[4]) / 5;
    double latest = (k3[13] + k3[14] + k3[15] + k3[16] + k3[17]) / 5;
    CHECK(near(r.first_mean, first) && fabs(first - 0.0021944) < 1e-7, "first mean %.8g", r.first_mean);
    CHECK(near(r.latest_mean, latest) && fabs(latest - 0.021348) < 1e-6, "latest mean %.8g", r.latest_mean);
}

static void a_growth_below_the_floor_never_warns(void) {
    // 0.001 to 0.019: nineteen times the start, still below 0.02
    long at;
    int w = step_series(0.001, 0.019, 40, &at);
    CHECK(w == 0, "%d warnings, the first at batch %ld", w, at);
}

static void growth_above_the_floor_but_less_than_fourfold_never_warns(void) {
    // 1/64 to 0.06: above the floor, 3.84 times the start (with powers of 2
    // the means are exact)
    long at;
    int w = step_series(1.0 / 64, 0.06, 40, &at);
    CHECK(w == 0, "%d warnings, the first at batch %ld", w, at);
    w = step_series(1.0 / 64, 1.0 / 16, 40, &at);   // exactly 4 times: due at the first chance
    CHECK(w == 1 && at == 10, "%d warnings, the first at batch %ld", w, at);
}

static void nan_batches_are_skipped_and_the_windows_name_the_batches_fed(void) {
    // batches 1..12 with k3 0.001, except NaN at 3 and 8; then 0.05 from 13
    double k3[20];
    for (int i = 0; i < 20; i++) k3[i] = i < 12 ? 0.001 : 0.05;
    k3[2] = k3[7] = NAN;
    long at;
    drift_report r;
    int w = feed(k3, 20, &at, &r);
    // first window: batches 1, 2, 4, 5, 6 (mean 0.001); the 10th batch with a
    // k3 is 12; the latest window at 13 is 9-13, mean 0.0108; at 14 it is
    // 10-14, mean (3 * 0.001 + 2 * 0.05) / 5 = 0.0206 >= 0.02 and >= 0.004
    CHECK(w == 1 && at == 14, "%d warnings, the first at batch %ld", w, at);
    CHECK(r.first_lo == 1 && r.first_hi == 6 && r.latest_lo == 10 && r.latest_hi == 14,
          "windows %ld-%ld and %ld-%ld", r.first_lo, r.first_hi, r.latest_lo, r.latest_hi);
    CHECK(near(r.first_mean, 0.001) && near(r.latest_mean, (3 * 0.001 + 2 * 0.05) / 5), "means %g %g",
          r.first_mean, r.latest_mean);
}

static void fewer_than_10_batches_never_warn(void) {
    // 0.001 then 1.0: due on the 10th batch with a k3, never before
    double k3[12] = {0.001, 0.001, 0.001, 0.001, 0.001, 1, 1, 1, 1, NAN, 1, 1};
    long at;
    drift_report r;
    int w = feed(k3, 9, &at, &r);
    CHECK(w == 0, "9 batches: %d warnings, the first at batch %ld", w, at);
    w = feed(k3, 10, &at, &r);
    CHECK(w == 0, "9 batches and a NaN: %d warnings, the first at batch %ld", w, at);
    w = feed(k3, 12, &at, &r);
    CHECK(w == 1 && at == 11, "%d warnings, the first at batch %ld", w, at);
}

static void the_message_names_both_figures_the_cause_and_the_fix(void) {
    drift_report r = {.first_mean = 0.0015, .latest_mean = 0.052, .first_lo = 1, .first_hi = 5,
                      .latest_lo = 9, .latest_hi = 13};
    char buf[1024];
    drift_message(&r, "steps", buf, sizeof buf);
    CHECK(strstr(buf, "k3 0.0015 over steps 1-5, 0.052 over steps 9-13;"), "%s", buf);
    CHECK(strstr(buf, "bf16") && strstr(buf, "sample at f16 or f32 (rl-sample(1), Precision"), "%s", buf);
}

int main(void) {
    RUN(a_flat_series_never_warns);
    RUN(a_flat_high_series_never_warns);
    RUN(growth_from_0_0015_to_0_24_over_30_batches_warns_once_at_batch_18);
    RUN(a_growth_below_the_floor_never_warns);
    RUN(growth_above_the_floor_but_less_than_fourfold_never_warns);
    RUN(nan_batches_are_skipped_and_the_windows_name_the_batches_fed);
    RUN(fewer_than_10_batches_never_warn);
    RUN(the_message_names_both_figures_the_cause_and_the_fix);
    CHECK_DONE();
}
