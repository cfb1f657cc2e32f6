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
    t = obj_ppo(1, 1, 2, -1, -1, 0.2, 0.2, &clipped);
    CHECK(!clipped && t.v == -2 && t.g == -2, "ppo inside %g %g %d", t.v, t.g, clipped);
    // ρ = e^1 > 1.2 with Â > 0: the clipped term 1.2·Â is the minimum, no gradient
    t = obj_ppo(1, 1, 2, 0, -1, 0.2, 0.2, &clipped);
    CHECK(clipped && near(t.v, -2.4) && t.g == 0, "ppo clipped %g %g %d", t.v, t.g, clipped);
}

static void ppo_term_of_a_token_of_mask_0_is_0_even_where_its_ratio_is_inf(void) {
    int clipped;
    // π_old = e^-800 (an environment's token): ρ = e^799 is inf in double;
    // with Â < 0 the unclipped term −inf is the minimum, and 0 · inf is NaN
    obj_term t = obj_ppo(1, 0, -1, -1, -800, 0.2, 0.2, &clipped);
    CHECK(t.v == 0 && t.g == 0, "mask 0: %g %g, expected 0 0", t.v, t.g);
    t = obj_ppo(0, 1, -1, -1, -800, 0.2, 0.2, &clipped);
    CHECK(t.v == 0 && t.g == 0, "w 0: %g %g, expected 0 0", t.v, t.g);
    t = obj_ppo(1, 0, 2, -1, -800, 0.2, 0.2, &clipped);   // Â > 0: the clipped branch
    CHECK(t.v == 0 && t.g == 0, "mask 0, clipped: %g %g, expected 0 0", t.v, t.g);
}

static void ppo_clip_higher_clips_each_side_at_its_own_epsilon(void) {
    int clipped;
    // [1 − 0.1, 1 + 0.3] (DAPO's clip-higher): ρ = e^0.2 ≈ 1.221, which ε = 0.2 clips
    // above, is inside: the unclipped term and its gradient, −ρ·Â
    double rho = exp(0.2);
    obj_term t = obj_ppo(1, 1, 2, -1, -1.2, 0.1, 0.3, &clipped);
    CHECK(!clipped && near(t.v, -2 * rho) && near(t.g, -2 * rho), "e^0.2, Â 2: %g %g %d", t.v, t.g, clipped);
    t = obj_ppo(1, 1, 2, -1, -1.2, 0.2, 0.2, &clipped);
    CHECK(clipped && near(t.v, -2.4) && t.g == 0, "e^0.2 with ε 0.2: %g %g %d", t.v, t.g, clipped);
    // above 1.3 with Â > 0: clipped at 1 + 0.3, no gradient
    t = obj_ppo(1, 1, 2, -1, -1.3 - 1e-3, 0.1, 0.3, &clipped);
    CHECK(clipped && near(t.v, -2.6) && t.g == 0, "above, Â 2: %g %g %d", t.v, t.g, clipped);
    // above 1.3 with Â < 0: ρ·Â is the minimum, unclipped (PPO's pessimism)
    rho = exp(0.3);
    t = obj_ppo(0.5, 1, -1, -1, -1.3, 0.1, 0.3, &clipped);
    CHECK(!clipped && near(t.v, 0.5 * rho) && near(t.g, 0.5 * rho), "above, Â -1: %g %g %d", t.v, t.g, clipped);
    // below 0.9 (ρ = e^-0.15 ≈ 0.861) with Â < 0: clipped at 1 − 0.1
    t = obj_ppo(0.5, 1, -1, -1.15, -1, 0.1, 0.3, &clipped);
    CHECK(clipped && near(t.v, 0.5 * 0.9) && t.g == 0, "below, Â -1: %g %g %d", t.v, t.g, clipped);
    // below 0.9 with Â > 0: ρ·Â is the minimum, unclipped
    rho = exp(-0.15);
    t = obj_ppo(1, 1, 2, -1.15, -1, 0.1, 0.3, &clipped);
    CHECK(!clipped && near(t.v, -2 * rho) && near(t.g, -2 * rho), "below, Â 2: %g %g %d", t.v, t.g, clipped);
}

static void cispo_weighs_log_prob_by_the_clipped_ratio_held_constant(void) {
    int clipped;
    // ρ = e inside [1 − 1, 1 + 4] = [0, 5]: v = −w·ρ·Â·log π, g = −w·ρ·Â
    double e = exp(1.0);
    obj_term t = obj_cispo(0.5, 1, 2, -1, -2, 1, 4, &clipped);
    CHECK(!clipped && near(t.v, e) && near(t.g, -e), "inside: %g %g %d", t.v, t.g, clipped);
    // ρ = e^2 ≈ 7.39 above 5: ρ̂ = 5, the gradient kept (not 0, as PPO's
    // clipped term would give), for Â > 0 and Â < 0 alike
    t = obj_cispo(0.5, 1, 2, -1, -3, 1, 4, &clipped);
    CHECK(clipped && near(t.v, 5) && near(t.g, -5), "above, Â 2: %g %g %d", t.v, t.g, clipped);
    t = obj_cispo(0.5, 1, -1, -1, -3, 1, 4, &clipped);
    CHECK(clipped && near(t.v, -2.5) && near(t.g, 2.5), "above, Â -1: %g %g %d", t.v, t.g, clipped);
    // without a lower clip (ε_lo = 1: the bound 0) a tiny ratio is kept as it is
    double tiny = exp(-5.0);
    t = obj_cispo(1, 1, 2, -6, -1, 1, 4, &clipped);
    CHECK(!clipped && near(t.v, 12 * tiny) && near(t.g, -2 * tiny), "tiny, no lower clip: %g %g %d", t.v, t.g,
          clipped);
    // with ε_lo = 0.2 it is raised to 0.8
    t = obj_cispo(1, 1, 2, -6, -1, 0.2, 4, &clipped);
    CHECK(clipped && near(t.v, 9.6) && near(t.g, -1.6), "tiny, ε_lo 0.2: %g %g %d", t.v, t.g, clipped);
}

static void cispo_term_of_a_token_of_mask_0_is_0_even_where_its_ratio_is_inf(void) {
    int clipped;
    // ρ = e^799 is inf: mask 0 or w 0 give exactly 0; mask 1 the cap, finite
    obj_term t = obj_cispo(1, 0, -1, -1, -800, 1, 4, &clipped);
    CHECK(t.v == 0 && t.g == 0, "mask 0: %g %g, expected 0 0", t.v, t.g);
    t = obj_cispo(0, 1, 2, -1, -800, 1, 4, &clipped);
    CHECK(t.v == 0 && t.g == 0, "w 0: %g %g, expected 0 0", t.v, t.g);
    t = obj_cispo(1, 1, -1, -1, -800, 1, 4, &clipped);
    CHECK(clipped && t.v == -5 && t.g == 5, "mask 1: %g %g %d, expected -5 5 1", t.v, t.g, clipped);
}

static void masked_mean_is_over_the_tokens_of_mask_1(void) {
    float x[3] = {-1, -2, -3}, y[3] = {-1.5f, -2, -800}, mask[3] = {1, 1, 0}, none[3] = {0, 0, 0};
    // (−1 + 1.5) and (−2 + 2) over 2 tokens; the third, of mask 0, left out
    CHECK(obj_masked_mean(x, y, mask, 3) == 0.25, "log s %g, expected 0.25", obj_masked_mean(x, y, mask, 3));
    CHECK(obj_masked_mean(x, NULL, NULL, 3) == -2, "no mask: %g", obj_masked_mean(x, NULL, NULL, 3));
    CHECK(obj_masked_mean(NULL, NULL, mask, 3) == 1, "no w: w̄ 1, got %g", obj_masked_mean(NULL, NULL, mask, 3));
    CHECK(obj_masked_mean(NULL, NULL, none, 3) == 0, "mask 0 everywhere: 0, got %g",
          obj_masked_mean(NULL, NULL, none, 3));
    // a sequence weight of rl-ratio (the same w on every token): w̄ is that float exactly
    float w[3] = {0.3f, 0.3f, 0.3f};
    CHECK(obj_masked_mean(w, NULL, mask, 3) == (double)0.3f, "w̄ %.17g", obj_masked_mean(w, NULL, mask, 3));
}

static void gspo_clips_the_sequence_ratio_and_its_derivative_is_dv_dlog_s(void) {
    int clipped;
    double lo = 3e-4, hi = 4e-4;   // the paper's
    // s = e^2e-4 inside [1 − 3e-4, 1 + 4e-4]: v = −w̄·s·Â, g = −w̄·s·Â
    double s = exp(2e-4);
    obj_term t = obj_gspo(0.5, 2, 2e-4, lo, hi, &clipped);
    CHECK(!clipped && near(t.v, -s) && near(t.g, -s), "inside: %g %g %d", t.v, t.g, clipped);
    // s = e^0.1 above with Â > 0: clipped at 1 + 4e-4, no gradient
    t = obj_gspo(0.5, 2, 0.1, lo, hi, &clipped);
    CHECK(clipped && near(t.v, -(1 + hi)) && t.g == 0, "above, Â 2: %g %g %d", t.v, t.g, clipped);
    // above with Â < 0: s·Â is the minimum, unclipped
    s = exp(0.1);
    t = obj_gspo(0.5, -1, 0.1, lo, hi, &clipped);
    CHECK(!clipped && near(t.v, 0.5 * s) && near(t.g, 0.5 * s), "above, Â -1: %g %g %d", t.v, t.g, clipped);
    // s = e^-1e-3 below with Â < 0: clipped at 1 − 3e-4
    t = obj_gspo(0.5, -1, -1e-3, lo, hi, &clipped);
    CHECK(clipped && near(t.v, 0.5 * (1 - lo)) && t.g == 0, "below, Â -1: %g %g %d", t.v, t.g, clipped);
    // g is dv/dlog s where v is smooth: central differences at the unclipped points
    double points[][2] = {{2e-4, 2}, {0.1, -1}, {-1e-3, 2}};
    for (size_t k = 0; k < 3; k++) {
        double x = points[k][0], a = points[k][1], h = 1e-6;
        obj_term p = obj_gspo(0.5, a, x + h, 0.1, 0.05, &clipped), m = obj_gspo(0.5, a, x - h, 0.1, 0.05, &clipped);
        t = obj_gspo(0.5, a, x, 0.1, 0.05, &clipped);
        double fd = (p.v - m.v) / (2 * h);
        CHECK(fabs(fd - t.g) <= 1e-8 * fabs(t.g), "log s %g, Â %g: g %.12g, (v(+h) − v(−h))/2h %.12g", x, a, t.g, fd);
    }
    // w̄ = 0 (every token of mask 0): exactly 0, even where s is inf
    t = obj_gspo(0, -1, 1000, lo, hi, &clipped);
    CHECK(t.v == 0 && t.g == 0, "w̄ 0: %g %g, expected 0 0", t.v, t.g);
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

static void kl_estimators_at_d_0_5_and_their_derivatives(void) {
    // d = log π_θ − log π_ref = −1 − (−1.5) = 0.5
    obj_term t = obj_kl(KL_K1, -1, -1.5);
    CHECK(t.v == 0.5 && t.g == 1, "k1 %g %g, expected 0.5 1", t.v, t.g);
    t = obj_kl(KL_K2, -1, -1.5);
    CHECK(t.v == 0.125 && t.g == 0.5, "k2 %g %g, expected 0.125 0.5", t.v, t.g);
    t = obj_kl(KL_K3, -1, -1.5);
    CHECK(near(t.v, exp(-0.5) - 0.5) && near(t.g, 1 - exp(-0.5)), "k3 %g %g, expected %g %g", t.v, t.g,
          exp(-0.5) - 0.5, 1 - exp(-0.5));
    // k3 at d = −2: e² − 3 > 0 (every k3 is), derivative 1 − e²
    t = obj_kl(KL_K3, -3, -1);
    CHECK(near(t.v, exp(2.0) - 3) && near(t.g, 1 - exp(2.0)), "k3 at d −2: %g %g", t.v, t.g);
    // every estimator is 0 where π_θ = π_ref, and so is k2's and k3's slope
    for (int k = KL_K1; k <= KL_K3; k++) {
        t = obj_kl((kl_est)k, -0.7, -0.7);
        CHECK(t.v == 0 && t.g == (k == KL_K1 ? 1 : 0), "k%d at d 0: %g %g", k + 1, t.v, t.g);
    }
    // g is dv/dlog π_θ: central differences agree to 1e-8
    double points[] = {-1.3, -0.01, 0.4, 2.5};
    for (int k = KL_K1; k <= KL_K3; k++)
        for (size_t i = 0; i < 4; i++) {
            double x = points[i], h = 1e-6;
            double fd = (obj_kl((kl_est)k, x + h, 0).v - obj_kl((kl_est)k, x - h, 0).v) / (2 * h);
            t = obj_kl((kl_est)k, x, 0);
            CHECK(fabs(fd - t.g) <= 1e-8 * fmax(1, fabs(t.g)), "k%d at d %g: g %.12g, central difference %.12g", k + 1,
                  x, t.g, fd);
        }
    // k3 is obj_k3 of log ρ = −d (the same formula, KL the other way round)
    CHECK(near(obj_kl(KL_K3, 0.3, 0).v, obj_k3(-0.3, exp(-0.3))), "k3 against obj_k3");
}

static void entropy_bonus_is_minus_c_mask_h_and_its_derivative_minus_c_mask(void) {
    // C = 0.25, H = 2 nats: v = −0.5, g = dv/dH = −0.25 (exact in binary)
    obj_term t = obj_entropy(0.25, 1, 2);
    CHECK(t.v == -0.5 && t.g == -0.25, "C 0.25 H 2: %g %g, expected -0.5 -0.25", t.v, t.g);
    // C < 0, a penalty: v = 0.1·1.5 > 0, pushing H down
    t = obj_entropy(-0.1, 1, 1.5);
    CHECK(near(t.v, 0.15) && t.g == 0.1, "C -0.1 H 1.5: %g %g, expected 0.15 0.1", t.v, t.g);
    // mask 0: nothing, whatever H
    t = obj_entropy(0.25, 0, 3);
    CHECK(t.v == 0 && t.g == 0, "mask 0: %g %g, expected 0 0", t.v, t.g);
    // g is dv/dH: a central difference agrees to 1e-8
    double h = 1e-6, fd = (obj_entropy(0.7, 1, 1.2 + h).v - obj_entropy(0.7, 1, 1.2 - h).v) / (2 * h);
    CHECK(fabs(fd - obj_entropy(0.7, 1, 1.2).g) <= 1e-8, "g %.12g, central difference %.12g",
          obj_entropy(0.7, 1, 1.2).g, fd);
}

static void overlong_punishment_of_dapo_with_l_max_20_and_cache_4(void) {
    // the onset L_MAX − L_CACHE = 16; a linear ramp to −1 at 20; −1 beyond
    CHECK(obj_overlong(10, 20, 4) == 0, "10 tokens: %g", obj_overlong(10, 20, 4));
    CHECK(obj_overlong(16, 20, 4) == 0, "16 tokens (the onset): %g", obj_overlong(16, 20, 4));
    CHECK(obj_overlong(17, 20, 4) == -0.25, "17 tokens: %g, expected -0.25", obj_overlong(17, 20, 4));
    CHECK(obj_overlong(19, 20, 4) == -0.75, "19 tokens: %g, expected -0.75", obj_overlong(19, 20, 4));
    CHECK(obj_overlong(20, 20, 4) == -1, "20 tokens (L_MAX): %g, expected -1", obj_overlong(20, 20, 4));
    CHECK(obj_overlong(21, 20, 4) == -1, "21 tokens: %g, expected -1", obj_overlong(21, 20, 4));
    CHECK(obj_overlong(1000, 20, 4) == -1, "1000 tokens: %g, expected -1", obj_overlong(1000, 20, 4));
    // L_CACHE = L_MAX: the ramp starts at the first token
    CHECK(obj_overlong(0, 8, 8) == 0 && obj_overlong(2, 8, 8) == -0.25, "cache = max: %g %g", obj_overlong(0, 8, 8),
          obj_overlong(2, 8, 8));
}

int main(void) {
    RUN(advantages_of_rewards_0_1_1_2_by_each_kind);
    RUN(advantages_of_equal_rewards_are_exactly_zero);
    RUN(loss_terms_and_their_derivatives);
    RUN(ppo_term_of_a_token_of_mask_0_is_0_even_where_its_ratio_is_inf);
    RUN(ppo_clip_higher_clips_each_side_at_its_own_epsilon);
    RUN(cispo_weighs_log_prob_by_the_clipped_ratio_held_constant);
    RUN(cispo_term_of_a_token_of_mask_0_is_0_even_where_its_ratio_is_inf);
    RUN(masked_mean_is_over_the_tokens_of_mask_1);
    RUN(gspo_clips_the_sequence_ratio_and_its_derivative_is_dv_dlog_s);
    RUN(tis_weight_is_the_ratio_capped_at_c_and_never_inf);
    RUN(k3_is_zero_at_ratio_1_and_positive_elsewhere);
    RUN(kl_estimators_at_d_0_5_and_their_derivatives);
    RUN(entropy_bonus_is_minus_c_mask_h_and_its_derivative_minus_c_mask);
    RUN(overlong_punishment_of_dapo_with_l_max_20_and_cache_4);
    CHECK_DONE();
}
