// Sampling draws each token with the probability of the distribution it
// states, and reports that probability: softmax(logits / T), after top-k and
// top-p, renormalised (sampling.h). Checked against double-precision
// softmax computed here, and against frequencies over many draws.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/sampling.h"

#define V 1000
static float logits[V];

static void make_logits(uint64_t seed) {
    rl_rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < V; i++) logits[i] = (float)(3.0 * rng_normal(&r));
}

// Probabilities in double of the distribution smp_draw states; kept[i] says which tokens it keeps.
static void reference(double T, int top_k, double top_p, double *p, int *kept) {
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 1; i < V; i++)   // insertion sort: descending logit, ascending id
        for (int j = i; j > 0 && logits[order[j]] > logits[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int n = top_k ? top_k : V;
    double max = logits[order[0]] / T, total = 0;
    for (int i = 0; i < V; i++) kept[i] = 0, p[i] = 0;
    for (int i = 0; i < n; i++) total += exp(logits[order[i]] / T - max);
    double mass = 0;
    int m = 0;
    while (m < n && (m == 0 || mass < top_p)) mass += exp(logits[order[m++]] / T - max) / total;
    double kept_total = 0;
    for (int i = 0; i < m; i++) kept[order[i]] = 1, kept_total += exp(logits[order[i]] / T - max);
    for (int i = 0; i < V; i++)
        if (kept[i]) p[i] = exp(logits[i] / T - max) / kept_total;
}

// Draws n tokens; checks logp against the reference and frequencies within 5 sigma.
static int draws_match(double T, int top_k, double top_p, int n, char *why) {
    static double p[V];
    static int kept[V], count[V];
    reference(T, top_k, top_p, p, kept);
    memset(count, 0, sizeof count);
    smp_work *w = smp_work_new(V);
    rl_rng r;
    rng_seed(&r, 42);
    smp_params sp = {.temperature = (float)T, .top_k = (uint32_t)top_k, .top_p = (float)top_p};
    for (int k = 0; k < n; k++) {
        double lp;
        uint32_t t = smp_draw(logits, &sp, &r, w, &lp);
        if (!kept[t]) return sprintf(why, "token %u drawn, outside the kept set", t), smp_work_free(w), 0;
        if (fabs(lp - log(p[t])) > 2e-6)
            return sprintf(why, "token %u: logp %.9f, reference %.9f", t, lp, log(p[t])), smp_work_free(w), 0;
        count[t]++;
    }
    smp_work_free(w);
    for (int i = 0; i < V; i++) {
        double expect = n * p[i], sd = sqrt(n * p[i] * (1 - p[i])) + 1e-9;
        if (fabs(count[i] - expect) > 5 * sd + 1)
            return sprintf(why, "token %d drawn %d times in %d, expected %.1f (p %.5f)", i, count[i], n, expect, p[i]), 0;
    }
    return 1;
}

static char why[256];

static void temperature_1_draws_the_softmax(void) {
    make_logits(1);
    CHECK(draws_match(1.0, 0, 1.0, 60000, why), "%s", why);
}

static void temperature_0_7_draws_the_sharpened_softmax(void) {
    make_logits(2);
    CHECK(draws_match(0.7, 0, 1.0, 60000, why), "%s", why);
}

static void top_k_draws_only_the_k_largest_renormalised(void) {
    make_logits(3);
    CHECK(draws_match(1.0, 5, 1.0, 30000, why), "%s", why);
}

static void top_p_keeps_the_smallest_prefix_reaching_p(void) {
    make_logits(4);
    CHECK(draws_match(1.3, 0, 0.6, 10000, why), "%s", why);
    CHECK(draws_match(1.0, 50, 0.9, 10000, why), "top-k then top-p: %s", why);
}

static void top_p_keeps_at_least_one_token(void) {
    make_logits(5);
    CHECK(draws_match(1.0, 0, 1e-6, 1000, why), "%s", why);
}

static void greedy_takes_the_largest_logit_with_logp_0(void) {
    make_logits(6);
    logits[17] = 100;
    logits[900] = 100;   // a tie: the lower id
    smp_work *w = smp_work_new(V);
    rl_rng r;
    rng_seed(&r, 1);
    double lp = -1;
    uint32_t t = smp_draw(logits, &(smp_params){.temperature = 0, .top_p = 1}, &r, w, &lp);
    smp_work_free(w);
    CHECK(t == 17 && lp == 0, "token %u logp %g, expected 17 and 0", t, lp);
}

static void a_dominant_token_leaves_the_others_possible_but_rare(void) {
    // logits 40 apart: exp(-40) is far below float rounding of the total, yet
    // the draw must still follow the distribution and logp stay exact.
    make_logits(7);
    for (int i = 0; i < V; i++) logits[i] = i == 3 ? 40.0f : logits[i] * 0.1f;
    CHECK(draws_match(1.0, 0, 1.0, 20000, why), "%s", why);
}

int main(void) {
    RUN(temperature_1_draws_the_softmax);
    RUN(temperature_0_7_draws_the_sharpened_softmax);
    RUN(top_k_draws_only_the_k_largest_renormalised);
    RUN(top_p_keeps_the_smallest_prefix_reaching_p);
    RUN(top_p_keeps_at_least_one_token);
    RUN(greedy_takes_the_largest_logit_with_logp_0);
    RUN(a_dominant_token_leaves_the_others_possible_but_rare);
    CHECK_DONE();
}
