// Unit tests of the objective's formulas (learn/objective.h): values worked
// by hand, compared exactly where the arithmetic is exact, else within 1e-12.
#include <float.h>
#include <math.h>

#include "check.h"
#include "learn/objective.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1, fabs(b)); }

static void advantages_of_rewards_0_1_1_2_by_each_kind(void) {
    double r[4] = {0, 1, 1, 2}, a[4];
    // mean 1; std with Bessel's correction sqrt(2/3)
    obj_advantages(ADV_GRPO, r, 4, a);
    double sd = sqrt(2.0 / 3);
    CHECK(near(a[0], -1 / (sd + OBJ_GRPO_EPS)) && a[1] == 0 && a[2] == 0 && near(a[3], 1 / (sd + OBJ_GRPO_EPS)),
          "grpo %g %g %g %g", a[0], a[1], a[2], a[3]);
    obj_advantages(ADV_DRGRPO, r, 4, a);
    CHECK(a[0] == -1 && a[1] == 0 && a[2] == 0 && a[3] == 1, "drgrpo %g %g %g %g", a[0], a[1], a[2], a[3]);
    // r_i − mean of the other three: 0 − 4/3, 1 − 1, 1 − 1, 2 − 2/3
    obj_advantages(ADV_RLOO, r, 4, a);
    CHECK(near(a[0], -4.0 / 3) && a[1] == 0 && a[2] == 0 && near(a[3], 4.0 / 3), "rloo %g %g %g %g", a[0], a[1], a[2],
          a[3]);
}

static void advantages_of_equal_rewards_are_exactly_zero(void) {
    double r[3] = {0.1, 0.1, 0.1}, a[3] = {9, 9, 9};
    for (int k = ADV_GRPO; k <= ADV_RLOO; k++) {
        obj_advantages((adv_kind)k, r, 3, a);
        CHECK(a[0] == 0 && a[1] == 0 && a[2] == 0, "kind %d: %g %g %g", k, a[0], a[1], a[2]);
    }
    CHECK(obj_advantage(1, 0.25, 3) == 0.25 && obj_advantage(0, 0.25, 3) == 3, "a given adv wins");
}

static void loss_terms_and_their_derivatives(void) {
    obj_term t = obj_sft(1, -2);
    CHECK(t.v == 2 && t.g == -1, "sft %g %g", t.v, t.g);
    t = obj_pg(0.5, 1, 2, -3);
    CHECK(t.v == 3 && t.g == -1, "pg %g %g", t.v, t.g);
    int clipped;
    // ρ = e^0 = 1 inside [0.8, 1.2]: the unclipped term, −ρ·Â
    t = obj_ppo(1, 1, 2, -1, -1, 0.2, &clipped);
    CHECK(!clipped && t.v == -2 && t.g == -2, "ppo inside %g %g %d", t.v, t.g, clipped);
    // ρ = e^1 > 1.2 with Â > 0: the clipped term 1.2·Â is the minimum, no gradient
    t = obj_ppo(1, 1, 2, 0, -1, 0.2, &clipped);
    CHECK(clipped && near(t.v, -2.4) && t.g == 0, "ppo clipped %g %g %d", t.v, t.g, clipped);
}

static void ppo_term_of_a_token_of_mask_0_is_0_even_where_its_ratio_is_inf(void) {
    int clipped;
    // π_old = e^-800 (an environment's token): ρ = e^799 is inf in double;
    // with Â < 0 the unclipped term −inf is the minimum, and 0 · inf is NaN
    obj_term t = obj_ppo(1, 0, -1, -1, -800, 0.2, &clipped);
    CHECK(t.v == 0 && t.g == 0, "mask 0: %g %g, expected 0 0", t.v, t.g);
    t = obj_ppo(0, 1, -1, -1, -800, 0.2, &clipped);
    CHECK(t.v == 0 && t.g == 0, "w 0: %g %g, expected 0 0", t.v, t.g);
    t = obj_ppo(1, 0, 2, -1, -800, 0.2, &clipped);   // Â > 0: the clipped branch
    CHECK(t.v == 0 && t.g == 0, "mask 0, clipped: %g %g, expected 0 0", t.v, t.g);
}

static void tis_weight_is_the_ratio_capped_at_c_and_never_inf(void) {
    int capped;
    CHECK(obj_tis_weight(1.5, 2, &capped) == 1.5f && !capped, "below the cap");
    CHECK(obj_tis_weight(3, 2, &capped) == 2.f && capped, "above the cap");
    CHECK(obj_tis_weight(1e300, INFINITY, &capped) == FLT_MAX && !capped, "no cap: FLT_MAX, not inf");
    CHECK(obj_seq_weight(log(8.0), 2, &capped) == 2.f && capped, "seq above the cap");
    CHECK(obj_seq_weight(-1000, 2, &capped) == 0.f && !capped, "a long sequence's tiny ratio underflows to 0");
    CHECK(obj_seq_weight(1000, INFINITY, &capped) == FLT_MAX && !capped, "seq uncapped: FLT_MAX");
}

static void k3_is_zero_at_ratio_1_and_positive_elsewhere(void) {
    CHECK(obj_k3(0, 1) == 0, "k3(1) = %g", obj_k3(0, 1));
    CHECK(near(obj_k3(log(2.0), 2), 1 - log(2.0)), "k3(2) = %g", obj_k3(log(2.0), 2));
    CHECK(near(obj_k3(log(0.5), 0.5), -0.5 + log(2.0)), "k3(0.5) = %g", obj_k3(log(0.5), 0.5));
}

int main(void) {
    RUN(advantages_of_rewards_0_1_1_2_by_each_kind);
    RUN(advantages_of_equal_rewards_are_exactly_zero);
    RUN(loss_terms_and_their_derivatives);
    RUN(ppo_term_of_a_token_of_mask_0_is_0_even_where_its_ratio_is_inf);
    RUN(tis_weight_is_the_ratio_capped_at_c_and_never_inf);
    RUN(k3_is_zero_at_ratio_1_and_positive_elsewhere);
    CHECK_DONE();
}
