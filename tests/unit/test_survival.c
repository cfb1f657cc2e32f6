// Unit tests of update survival (sync/survival.h): the figures of an update
// over a sample of whole rows, at each way a receiver keeps its weights, and
// the warning's rule (the mean along of the latest 5 versions below 1/2).
// The figures against PyTorch's and numpy's roundings are test_sync.py's.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sync/survival.h"

static int near(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(1, fabs(b)); }

// One update of `rows` rows of K f32 values, old -> new, kept as r:
// returns what surv_end says, the figures in *f.
static int update(surv_t *s, uint64_t from, uint64_t to, const float *w, size_t rows, size_t K, surv_round r,
                  surv_figures *f) {
    surv_begin(s, from, to, rows * K);
    surv_rows(s, rows, K, w, DT_F32, r);
    return surv_end(s, f);
}

static void an_f32_receiver_keeps_every_update_whole(void) {
    float a[8] = {1, 2, 3, 4, -1, -2, -3, -4}, b[8];
    for (int i = 0; i < 8; i++) b[i] = a[i] + (i % 2 ? 1e-6f : 0);
    surv_t *s = surv_new();
    surv_figures f;
    CHECK(!update(s, 0, 0, a, 2, 4, (surv_round){DT_F32, 0}, &f), "a first sample compares with nothing");
    CHECK(update(s, 0, 1, b, 2, 4, (surv_round){DT_F32, 0}, &f), "v0 -> v1 is measured");
    CHECK(f.from == 0 && f.to == 1 && f.n == 8, "from %llu to %llu n %llu", (unsigned long long)f.from,
          (unsigned long long)f.to, (unsigned long long)f.n);
    CHECK(f.moved == 0.5 && f.changed == 0.5 && f.norm == 1 && f.along == 1, "moved %g changed %g norm %g along %g",
          f.moved, f.changed, f.norm, f.along);
    surv_free(s);
}

// Weights on the bf16 grid moved by less than half a step: nothing arrives
// at bf16; at f16 (8 times finer) the move of 2^-9 on 1.0 does.
static void an_update_below_half_a_bf16_step_is_lost_at_bf16_and_kept_at_f16(void) {
    float a[4] = {1.0f, 1.5f, -2.0f, 0.75f}, b[4];
    for (int i = 0; i < 4; i++) b[i] = a[i] + 0x1p-9f;   // bf16's step at 1.0 is 2^-7
    surv_figures f;
    surv_t *s = surv_new();
    update(s, 0, 0, a, 1, 4, (surv_round){DT_BF16, 0}, &f);
    CHECK(update(s, 0, 1, b, 1, 4, (surv_round){DT_BF16, 0}, &f), "measured");
    CHECK(f.moved == 1 && f.changed == 0 && f.norm == 0 && f.along == 0, "bf16: moved %g changed %g norm %g along %g",
          f.moved, f.changed, f.norm, f.along);
    surv_free(s);
    s = surv_new();
    update(s, 0, 0, a, 1, 4, (surv_round){DT_F16, 0}, &f);
    CHECK(update(s, 0, 1, b, 1, 4, (surv_round){DT_F16, 0}, &f), "measured");
    CHECK(f.changed == 1 && near(f.along, 1, 1e-12), "f16: changed %g along %g", f.changed, f.along);
    surv_free(s);
}

// int8 with one scale per row of 4: the largest weight moving moves the
// scale (1 to 2), so every value changes: 51, -21, 3 read 52, -20, 4.
static void int8_weights_change_with_their_scale(void) {
    float a[4] = {127, 51, -21, 3}, b[4] = {254, 51, -21, 3};
    surv_figures f;
    surv_t *s = surv_new();
    update(s, 0, 0, a, 1, 4, (surv_round){DT_I8, 4}, &f);
    CHECK(update(s, 0, 1, b, 1, 4, (surv_round){DT_I8, 4}, &f), "measured");
    CHECK(f.moved == 0.25 && f.changed == 1, "moved %g changed %g", f.moved, f.changed);
    surv_free(s);
}

// Another version than the one sampled, or another layout: nothing to compare.
static void figures_need_the_sample_of_the_version_held_and_its_layout(void) {
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    surv_figures f;
    surv_t *s = surv_new();
    update(s, 0, 3, a, 2, 4, (surv_round){DT_F32, 0}, &f);
    CHECK(!update(s, 2, 4, a, 2, 4, (surv_round){DT_F32, 0}, &f), "from v2, the sample being v3's");
    CHECK(!update(s, 4, 5, a, 1, 4, (surv_round){DT_F32, 0}, &f), "4 elements instead of 8");
    CHECK(update(s, 5, 6, a, 1, 4, (surv_round){DT_F32, 0}, &f) && f.moved == 0, "v5 -> v6, unmoved");
    surv_drop(s);
    CHECK(!update(s, 6, 7, a, 1, 4, (surv_round){DT_F32, 0}, &f), "after surv_drop");
    surv_free(s);
}

// A large model is sampled: every k-th row, about SURV_TARGET elements.
static void a_large_update_is_sampled_by_whole_rows(void) {
    size_t K = 1024, rows = 8192;   // 8M elements: every 4th row
    float *w = calloc(rows * K, sizeof *w);
    surv_figures f;
    surv_t *s = surv_new();
    update(s, 0, 0, w, rows, K, (surv_round){DT_F32, 0}, &f);
    for (size_t i = 0; i < rows * K; i += 2) w[i] = 1;
    CHECK(update(s, 0, 1, w, rows, K, (surv_round){DT_F32, 0}, &f), "measured");
    CHECK(f.n == rows / 4 * K && f.moved == 0.5, "n %llu moved %g", (unsigned long long)f.n, f.moved);
    surv_free(s);
    free(w);
}

// Feeds along[0 .. n) as versions v -> v+1 (NaN: the learner moved nothing);
// the version of the first warning, or -1, its mean and first version.
static long watch(const double *along, int n, int *warnings, double *mean, uint64_t *first) {
    surv_watch w = {0};
    long at = -1;
    *warnings = 0;
    for (int i = 0; i < n; i++) {
        surv_figures f = {.from = (uint64_t)i, .to = (uint64_t)i + 1, .n = 100, .moved = isnan(along[i]) ? 0 : 1,
                          .changed = 0.1, .norm = 1, .along = along[i]};
        uint64_t v;
        double m;
        if (surv_watch_add(&w, &f, &m, &v) && !(*warnings)++) {
            at = i + 1;
            *mean = m;
            *first = v;
        }
    }
    return at;
}

static void the_warning_needs_5_versions_whose_mean_along_is_below_one_half(void) {
    // measured: SmolLM2 at bf16 from f32 weights, the first steps (mean 0.99), and from bf16 weights
    double noisy[10] = {2.08, 0.12, 0.74, 1.40, 0.63, 0.47, 0.52, 1.17, 1.02, 0.84};
    double lost[8] = {0.02, 0.07, 0.03, 0.17, 0.08, 0.08, 0.17, 0.24};
    int n;
    double mean = 0;
    uint64_t first = 99;
    CHECK(watch(noisy, 10, &n, &mean, &first) == -1 && n == 0, "one version's low along warned");
    CHECK(watch(lost, 4, &n, &mean, &first) == -1, "fewer than 5 versions warned");
    long at = watch(lost, 8, &n, &mean, &first);
    CHECK(at == 5 && n == 1 && near(mean, 0.074, 1e-12) && first == 0, "at v%ld, %d warnings, mean %g, from v%llu",
          at, n, mean, (unsigned long long)first);
    double gaps[7] = {NAN, 0.02, 0.07, NAN, 0.03, 0.17, 0.08};   // versions the learner did not move
    at = watch(gaps, 7, &n, &mean, &first);
    CHECK(at == 7 && n == 1 && first == 1, "with gaps: at v%ld, from v%llu", at, (unsigned long long)first);
}

static void the_description_names_the_figures_and_the_precision(void) {
    surv_figures f = {.from = 2, .to = 3, .n = 2068800, .moved = 0.999, .changed = 0.003, .norm = 0.05, .along = 0.02};
    char buf[256];
    surv_describe(&f, "bf16", buf, sizeof buf);
    CHECK(!strcmp(buf, "along 0.02 (norm 0.05x the learner's; 0.3% of the weights changed at bf16, 99.9% in f32; "
                       "2.1M sampled)"), "%s", buf);
}

int main(void) {
    RUN(an_f32_receiver_keeps_every_update_whole);
    RUN(an_update_below_half_a_bf16_step_is_lost_at_bf16_and_kept_at_f16);
    RUN(int8_weights_change_with_their_scale);
    RUN(figures_need_the_sample_of_the_version_held_and_its_layout);
    RUN(a_large_update_is_sampled_by_whole_rows);
    RUN(the_warning_needs_5_versions_whose_mean_along_is_below_one_half);
    RUN(the_description_names_the_figures_and_the_precision);
    CHECK_DONE();
}
