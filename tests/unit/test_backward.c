// test_backward.c — the training operations of the CPU backend (ops.h) against
// references computed here in double: central finite differences of a double
// forward for the scalar loss Σ dout·out (step 1e-4, truncation error about
// 1e-8 of the gradient), or the exact product or formula. The f32 results are
// held to stated tolerances relative to the largest reference element, as
// f32 accumulation over a few hundred terms allows; the measured errors are
// printed as "# ..." lines. Shapes are small and odd-sized (vector tails),
// but large enough that the work is split over threads.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_builds.h"
#include "dtype.h"
#include "model/ops.h"
#include "rng.h"

#define FD_STEP 1e-4

static rl_rng R;
static const rl_ops *O;

static float *randn(size_t n, double scale) {
    float *x = O->alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(&R));
    return x;
}

static float *copy_f(const float *x, size_t n) {
    float *y = O->alloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static double *to_double(const float *x, size_t n) {
    double *y = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

// max |got − ref| / max |ref|: the error relative to the tensor's scale
// (NaN when got has a NaN, so that unwritten outputs fail).
static double rel_err(const float *got, const double *ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (d != d) return NAN;
        if (d > e) e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? e / m : e;
}

// ---- logprob ----------------------------------------------------------------

// log_softmax(l·s)[t] and the entropy, in double
static double ref_logprob(const double *l, int V, double s, int t, double *ent) {
    double mx = -INFINITY, sum = 0, ez = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, l[j] * s);
    for (int j = 0; j < V; j++) sum += exp(l[j] * s - mx);
    for (int j = 0; j < V; j++) ez += exp(l[j] * s - mx) / sum * (l[j] * s - mx);
    if (ent) *ent = log(sum) - ez;
    return l[t] * s - mx - log(sum);
}

enum { LP_N = 5, LP_V = 301 };

static void make_logprob_inputs(float **logits, int32_t *tgt, float *itemp) {
    const float temps[LP_N] = {0.7f, 1.0f, 1.3f, 0.5f, 2.0f};
    *logits = randn((size_t)LP_N * LP_V, 2.0);
    for (int i = 0; i < LP_N; i++) {
        tgt[i] = (int32_t)(rng_u64(&R) % LP_V);
        itemp[i] = 1.0f / temps[i];
    }
}

static void logprob_gives_log_prob_and_entropy_of_the_tempered_distribution(void) {
    float *logits, itemp[LP_N], lp[LP_N], lp2[LP_N], ent[LP_N];
    int32_t tgt[LP_N];
    make_logprob_inputs(&logits, tgt, itemp);
    O->logprob(lp, ent, logits, tgt, itemp, LP_N, LP_V);
    O->logprob(lp2, NULL, logits, tgt, itemp, LP_N, LP_V);
    double *l = to_double(logits, (size_t)LP_N * LP_V), elp = 0, eent = 0;
    for (int i = 0; i < LP_N; i++) {
        double e, r = ref_logprob(l + (size_t)i * LP_V, LP_V, itemp[i], tgt[i], &e);
        elp = fmax(elp, fabs(lp[i] - r));
        eent = fmax(eent, fabs(ent[i] - e));
        CHECK(lp[i] == lp2[i], "row %d: logp %.9g with entropy, %.9g without", i, lp[i], lp2[i]);
    }
    printf("# logprob: max |logp - ref| = %.2e, max |entropy - ref| = %.2e (nats)\n", elp, eent);
    CHECK(elp <= 1e-5 && eent <= 1e-5, "logp error %g, entropy error %g, bound 1e-5 nats", elp, eent);
    free(l);
    O->free(logits);
}

static void logprob_backward_matches_finite_differences_with_temperature(void) {
    float *logits, itemp[LP_N];
    int32_t tgt[LP_N];
    make_logprob_inputs(&logits, tgt, itemp);
    float dlogp[LP_N] = {0.7f, -1.3f, 0.0f, 2.1f, -0.4f};   // row 2 has no loss
    double *l = to_double(logits, (size_t)LP_N * LP_V), *ref = malloc((size_t)LP_N * LP_V * sizeof(double));
    for (int i = 0; i < LP_N; i++)
        for (int j = 0; j < LP_V; j++) {
            double *x = l + (size_t)i * LP_V + j, x0 = *x;
            *x = x0 + FD_STEP;
            double up = ref_logprob(l + (size_t)i * LP_V, LP_V, itemp[i], tgt[i], NULL);
            *x = x0 - FD_STEP;
            double dn = ref_logprob(l + (size_t)i * LP_V, LP_V, itemp[i], tgt[i], NULL);
            *x = x0;
            ref[(size_t)i * LP_V + j] = dlogp[i] * (up - dn) / (2 * FD_STEP);
        }
    O->logprob_backward(logits, tgt, itemp, dlogp, NULL, LP_N, LP_V);
    double e = rel_err(logits, ref, (size_t)LP_N * LP_V);
    printf("# logprob_backward: relative error %.2e\n", e);
    CHECK(e <= 1e-5, "relative error %g, bound 1e-5", e);
    for (int j = 0; j < LP_V; j++) CHECK(logits[2 * LP_V + j] == 0, "a row with dlogp 0 has gradient 0");
    free(l);
    free(ref);
    O->free(logits);
}

// The loss Σ dlogp·logp + dent·H: the entropy's derivative through the same
// op. Row 1 has dent 0 (its bits must be those of a call without dent), row
// 2 dlogp 0 (the entropy term alone).
static void logprob_backward_with_entropy_term_matches_finite_differences(void) {
    float *logits, itemp[LP_N];
    int32_t tgt[LP_N];
    make_logprob_inputs(&logits, tgt, itemp);
    float dlogp[LP_N] = {0.7f, -1.3f, 0.0f, 2.1f, -0.4f}, dent[LP_N] = {0.5f, 0.0f, -1.1f, 0.9f, -0.3f};
    double *l = to_double(logits, (size_t)LP_N * LP_V), *ref = malloc((size_t)LP_N * LP_V * sizeof(double));
    for (int i = 0; i < LP_N; i++)
        for (int j = 0; j < LP_V; j++) {
            double *x = l + (size_t)i * LP_V + j, x0 = *x, hu, hd;
            *x = x0 + FD_STEP;
            double up = ref_logprob(l + (size_t)i * LP_V, LP_V, itemp[i], tgt[i], &hu);
            *x = x0 - FD_STEP;
            double dn = ref_logprob(l + (size_t)i * LP_V, LP_V, itemp[i], tgt[i], &hd);
            *x = x0;
            ref[(size_t)i * LP_V + j] = (dlogp[i] * (up - dn) + dent[i] * (hu - hd)) / (2 * FD_STEP);
        }
    float *plain = copy_f(logits, (size_t)LP_N * LP_V);
    O->logprob_backward(logits, tgt, itemp, dlogp, dent, LP_N, LP_V);
    O->logprob_backward(plain, tgt, itemp, dlogp, NULL, LP_N, LP_V);
    double e = rel_err(logits, ref, (size_t)LP_N * LP_V);
    printf("# logprob_backward with dent (%s): relative error %.2e\n", cpu_K->name, e);
    CHECK(e <= 1e-5, "relative error %g, bound 1e-5", e);
    CHECK(memcmp(logits + LP_V, plain + LP_V, LP_V * sizeof(float)) == 0,
          "the row with dent 0 differs from the call without dent");
    double e2 = rel_err(logits + 2 * LP_V, ref + 2 * LP_V, LP_V);
    printf("# logprob_backward, the entropy term alone: relative error %.2e\n", e2);
    CHECK(e2 <= 1e-5, "the row of the entropy term alone: relative error %g, bound 1e-5", e2);
    free(l);
    free(ref);
    O->free(plain);
    O->free(logits);
}

// The logprob ops on the processor's best kernels and on its AVX2 ones.
static void logprob_cases(void) {
    RUN(logprob_gives_log_prob_and_entropy_of_the_tempered_distribution);
    RUN(logprob_backward_matches_finite_differences_with_temperature);
    RUN(logprob_backward_with_entropy_term_matches_finite_differences);
}

// ---- matmul ------------------------------------------------------------------

// Shapes where sgemm's work splits over dx rows (N ≥ K), over columns
// (N < K), or stays on one thread (small); the panel kernel's over the
// columns of dx and dW in panels of 16, the last short, several K blocks in
// the largest. Each product is checked on both paths: panels (the default
// where the build has them) and sgemm (RLPIPE_CPU_PANELS=0).
// bf16 weights (a frozen base's, under LoRA) take dx in blocks of 256 columns: K = 600 has three.
// K = 16 and N = 700: dx one panel wide, its rows shared out (a LoRA adapter's rank).
enum { NMM = 6 };
static const struct { int N, M, K; } MM[NMM] = {{300, 40, 24}, {67, 45, 130}, {3, 5, 7}, {700, 1100, 90}, {50, 70, 600},
                                               {700, 300, 16}};

// "" (the panels) or "0" (sgemm) into RLPIPE_CPU_PANELS
static void set_panels(int on) {
    if (on) unsetenv("RLPIPE_CPU_PANELS");
    else setenv("RLPIPE_CPU_PANELS", "0", 1);
}

// W f32, or bf16 (its values widened: the reference multiplies the bf16 values).
static void matmul_dx_matches_double_product_and_accumulates(void) {
    for (int c = 0; c < 2 * NMM; c++) {
        int bf16 = c >= NMM;
        int N = MM[c % NMM].N, M = MM[c % NMM].M, K = MM[c % NMM].K;
        float *dout = randn((size_t)N * M, 1.0), *w = randn((size_t)M * K, 1.0), *dx0 = randn((size_t)N * K, 1.0);
        uint16_t *wb = malloc((size_t)M * K * sizeof *wb);
        for (size_t i = 0; i < (size_t)M * K; i++) {
            wb[i] = f32_to_bf16(w[i]);
            if (bf16) w[i] = bf16_to_f32(wb[i]);
        }
        rl_mat W = {.dtype = bf16 ? DT_BF16 : DT_F32, .rows = M, .cols = K, .data = bf16 ? (void *)wb : (void *)w};
        double *ref = malloc((size_t)N * K * sizeof(double));
        for (int acc = 0; acc < 2; acc++) {
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) {
                    double s = acc ? dx0[(size_t)n * K + k] : 0;
                    for (int m = 0; m < M; m++) s += (double)dout[(size_t)n * M + m] * w[(size_t)m * K + k];
                    ref[(size_t)n * K + k] = s;
                }
            for (int panels = 1; panels >= 0; panels--) {
                set_panels(panels);
                float *dx = copy_f(dx0, (size_t)N * K);
                O->matmul_dx(dx, dout, &W, N, acc);
                double e = rel_err(dx, ref, (size_t)N * K);
                printf("# matmul_dx N=%d M=%d K=%d %s accumulate=%d %s: relative error %.2e\n", N, M, K,
                       bf16 ? "bf16" : "f32", acc, panels ? "panels" : "sgemm", e);
                CHECK(e <= 1e-5, "relative error %g, bound 1e-5", e);
                O->free(dx);
            }
        }
        free(ref);
        free(wb);
        O->free(dout);
        O->free(w);
        O->free(dx0);
    }
    set_panels(1);
}

static void matmul_dw_accumulates_product_and_bias_sum(void) {
    // {90, 700, 16}: dW one panel wide, its rows shared out (a LoRA adapter's B)
    const struct { int N, M, K; } shapes[] = {{50, 200, 30}, {67, 45, 130}, {3, 5, 7}, {700, 90, 1100}, {90, 700, 16},
                                              {91, 700, 16}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            int panels = (int)(c + with_bias) % 2;   // each shape on both paths
            set_panels(panels);
            int N = shapes[c].N, M = shapes[c].M, K = shapes[c].K;
            float *dout = randn((size_t)N * M, 1.0), *x = randn((size_t)N * K, 1.0);
            float *dW = randn((size_t)M * K, 1.0), *db = with_bias ? randn((size_t)M, 1.0) : NULL;
            double *rW = malloc((size_t)M * K * sizeof(double)), *rb = malloc((size_t)M * sizeof(double));
            // two calls: the initial values plus twice the gradient
            for (int m = 0; m < M; m++) {
                for (int k = 0; k < K; k++) {
                    double s = 0;
                    for (int n = 0; n < N; n++) s += (double)dout[(size_t)n * M + m] * x[(size_t)n * K + k];
                    rW[(size_t)m * K + k] = dW[(size_t)m * K + k] + 2 * s;
                }
                double s = 0;
                for (int n = 0; n < N; n++) s += dout[(size_t)n * M + m];
                rb[m] = db ? db[m] + 2 * s : 0;
            }
            O->matmul_dw(dW, db, dout, x, N, M, K);
            O->matmul_dw(dW, db, dout, x, N, M, K);
            double eW = rel_err(dW, rW, (size_t)M * K), eb = db ? rel_err(db, rb, (size_t)M) : 0;
            printf("# matmul_dw N=%d M=%d K=%d bias=%d %s, two calls: relative error dW %.2e, dbias %.2e\n", N, M,
                   K, with_bias, panels ? "panels" : "sgemm", eW, eb);
            CHECK(eW <= 1e-5 && eb <= 1e-5, "relative errors dW %g, dbias %g, bound 1e-5", eW, eb);
            free(rW);
            free(rb);
            O->free(dout);
            O->free(x);
            O->free(dW);
            O->free(db);
        }
    set_panels(1);
}

// ---- rmsnorm -----------------------------------------------------------------

// Σ_c dout_c · rmsnorm(x, g)_c of one row, in double
static double ref_rmsnorm_loss(const double *x, const double *g, const float *dout, int C, double eps) {
    double ss = 0, s = 0;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    double r = 1 / sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) s += dout[c] * x[c] * r * g[c];
    return s;
}

static void rmsnorm_backward_matches_finite_differences_and_accumulates(void) {
    enum { N = 400, C = 97 };
    const float eps = 1e-5f;
    float *x = randn((size_t)N * C, 1.0), *g = randn(C, 1.0), *dout = randn((size_t)N * C, 1.0);
    float *dx = randn((size_t)N * C, 1.0), *dg = randn(C, 1.0);
    double *xd = to_double(x, (size_t)N * C), *gd = to_double(g, C);
    double *rx = malloc((size_t)N * C * sizeof(double)), *rg = malloc(C * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double *p = xd + (size_t)n * C + c, p0 = *p;
            *p = p0 + FD_STEP;
            double up = ref_rmsnorm_loss(xd + (size_t)n * C, gd, dout + (size_t)n * C, C, eps);
            *p = p0 - FD_STEP;
            double dn = ref_rmsnorm_loss(xd + (size_t)n * C, gd, dout + (size_t)n * C, C, eps);
            *p = p0;
            rx[(size_t)n * C + c] = dx[(size_t)n * C + c] + 2 * (up - dn) / (2 * FD_STEP);
        }
    for (int c = 0; c < C; c++) {
        double g0 = gd[c], d = 0;
        for (int s = -1; s <= 1; s += 2) {
            gd[c] = g0 + s * FD_STEP;
            for (int n = 0; n < N; n++) d += s * ref_rmsnorm_loss(xd + (size_t)n * C, gd, dout + (size_t)n * C, C, eps);
        }
        gd[c] = g0;
        rg[c] = dg[c] + 2 * d / (2 * FD_STEP);
    }
    float *dx_frozen = copy_f(dx, (size_t)N * C);
    O->rmsnorm_backward(dx, dg, dout, x, g, N, C, eps);   // twice: both gradients accumulate
    O->rmsnorm_backward(dx, dg, dout, x, g, N, C, eps);
    double ex = rel_err(dx, rx, (size_t)N * C), eg = rel_err(dg, rg, C);
    printf("# rmsnorm_backward, two calls: relative error dx %.2e, dg %.2e\n", ex, eg);
    CHECK(ex <= 1e-5 && eg <= 1e-5, "relative errors dx %g, dg %g, bound 1e-5", ex, eg);
    // dg NULL (a frozen norm weight): dx alone, the same bits
    O->rmsnorm_backward(dx_frozen, NULL, dout, x, g, N, C, eps);
    O->rmsnorm_backward(dx_frozen, NULL, dout, x, g, N, C, eps);
    CHECK(!memcmp(dx_frozen, dx, (size_t)N * C * sizeof(float)), "dx differs without dg");
    O->free(dx_frozen);
    free(xd);
    free(gd);
    free(rx);
    free(rg);
    O->free(x);
    O->free(g);
    O->free(dout);
    O->free(dx);
    O->free(dg);
}

// ---- scale -------------------------------------------------------------------

static void scale_multiplies_every_element_in_f32(void) {
    size_t n = 100003;   // a tail after the threads' chunks
    float *x = randn(n, 3.0), *x0 = copy_f(x, n);
    O->scale(x, 0.37f, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += x[i] != x0[i] * 0.37f;
    CHECK(bad == 0, "%zu elements differ from x * a in f32", bad);
    O->free(x);
    O->free(x0);
}

// ---- rope --------------------------------------------------------------------

static void rope_backward_turns_by_minus_the_angle(void) {
    enum { N = 300, H = 3, HS = 16, MAXPOS = 64 };
    float *cs = O->alloc((size_t)MAXPOS * HS * sizeof(float));
    for (int p = 0; p < MAXPOS; p++)
        for (int i = 0; i < HS / 2; i++) {
            double a = p * pow(10000.0, -2.0 * i / HS);
            cs[((size_t)p * HS / 2 + i) * 2] = (float)cos(a);
            cs[((size_t)p * HS / 2 + i) * 2 + 1] = (float)sin(a);
        }
    int32_t pos[N];
    for (int i = 0; i < N; i++) pos[i] = (int32_t)(rng_u64(&R) % MAXPOS);
    float *x = randn((size_t)N * H * HS, 1.0), *y = randn((size_t)N * H * HS, 1.0);
    float *rx = copy_f(x, (size_t)N * H * HS), *ry = copy_f(y, (size_t)N * H * HS);
    double *ref = malloc((size_t)N * H * HS * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < HS / 2; i++) {
                size_t b = ((size_t)n * H + h) * HS;
                double c = cs[((size_t)pos[n] * HS / 2 + i) * 2], s = -cs[((size_t)pos[n] * HS / 2 + i) * 2 + 1];
                ref[b + i] = y[b + i] * c - y[b + i + HS / 2] * s;
                ref[b + i + HS / 2] = y[b + i + HS / 2] * c + y[b + i] * s;
            }
    O->rope(rx, pos, cs, N, H, HS);
    O->rope_backward(ry, pos, cs, N, H, HS);
    double e = rel_err(ry, ref, (size_t)N * H * HS), a = 0, b = 0;
    for (size_t i = 0; i < (size_t)N * H * HS; i++) {   // <rope x, y> = <x, rope_backward y>
        a += (double)rx[i] * y[i];
        b += (double)x[i] * ry[i];
    }
    printf("# rope_backward: relative error %.2e; <rope x, y> - <x, rope_backward y> = %.2e of %.2e\n", e, a - b, a);
    CHECK(e <= 1e-6, "relative error %g, bound 1e-6", e);
    CHECK(fabs(a - b) <= 1e-5 * sqrt((double)N * H * HS), "not the transpose: %g vs %g", a, b);
    free(ref);
    O->free(cs);
    O->free(x);
    O->free(y);
    O->free(rx);
    O->free(ry);
}

// ---- attention ----------------------------------------------------------------

typedef struct {
    double *q, *k, *v;
    const float *dout;
    int NH, NKV, HS;
} ref_attn;

// Output row j, head h of sequence sq in double (o, HS values); returns the lse.
static double ref_attend(const ref_attn *r, rl_attn_seq sq, int j, int h, double *o) {
    int HS = r->HS, hk = h / (r->NH / r->NKV), T = sq.pos0 + j + 1;
    double *sc = malloc((size_t)T * sizeof(double)), mx = -INFINITY, sum = 0;
    const double *q = r->q + ((size_t)(sq.q0 + j) * r->NH + h) * HS;
    for (int t = 0; t < T; t++) {
        const double *k = r->k + ((size_t)(sq.kv0 + t) * r->NKV + hk) * HS;
        double s = 0;
        for (int d = 0; d < HS; d++) s += q[d] * k[d];
        sc[t] = s / sqrt((double)HS);
        mx = fmax(mx, sc[t]);
    }
    for (int t = 0; t < T; t++) sum += exp(sc[t] - mx);
    for (int d = 0; d < HS; d++) o[d] = 0;
    for (int t = 0; t < T; t++) {
        const double *v = r->v + ((size_t)(sq.kv0 + t) * r->NKV + hk) * HS;
        for (int d = 0; d < HS; d++) o[d] += exp(sc[t] - mx) / sum * v[d];
    }
    free(sc);
    return mx + log(sum);
}

// Σ dout·out over query rows [j0, n) of sequence sq and heads [h0, h1)
static double ref_attn_loss(const ref_attn *r, rl_attn_seq sq, int j0, int h0, int h1) {
    double o[64], s = 0;
    for (int j = j0; j < sq.n; j++)
        for (int h = h0; h < h1; h++) {
            ref_attend(r, sq, j, h, o);
            const float *d = r->dout + ((size_t)(sq.q0 + j) * r->NH + h) * r->HS;
            for (int i = 0; i < r->HS; i++) s += d[i] * o[i];
        }
    return s;
}

// Central difference of the part of the loss that *x touches.
static double fd(double *x, const ref_attn *r, rl_attn_seq sq, int j0, int h0, int h1) {
    double x0 = *x;
    *x = x0 + FD_STEP;
    double up = ref_attn_loss(r, sq, j0, h0, h1);
    *x = x0 - FD_STEP;
    double dn = ref_attn_loss(r, sq, j0, h0, h1);
    *x = x0;
    return (up - dn) / (2 * FD_STEP);
}

static void attention_forward_matches_double_reference_and_keeps_lse(void) {
    enum { NH = 4, NKV = 2, HS = 8, NQ = 94, NK = 110 };
    // decoding one row after a cache, a prefill after a cache, a long prefill
    // (several blocks), a short one
    rl_attn_seq seqs[] = {{0, 1, 10, 0}, {1, 20, 5, 11}, {21, 70, 0, 36}, {91, 3, 0, 106}};
    float *q = randn((size_t)NQ * NH * HS, 2.0), *k = randn((size_t)NK * NKV * HS, 1.0),
          *v = randn((size_t)NK * NKV * HS, 1.0);
    float *out = O->alloc((size_t)NQ * NH * HS * sizeof(float)), *lse = O->alloc((size_t)NQ * NH * sizeof(float));
    O->attention(out, lse, q, k, v, DT_F32, seqs, 4, NQ, NH, NKV, HS);
    ref_attn r = {to_double(q, (size_t)NQ * NH * HS), to_double(k, (size_t)NK * NKV * HS),
                  to_double(v, (size_t)NK * NKV * HS), NULL, NH, NKV, HS};
    double *ro = malloc((size_t)NQ * NH * HS * sizeof(double)), *rl = malloc((size_t)NQ * NH * sizeof(double));
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < seqs[s].n; j++)
            for (int h = 0; h < NH; h++) {
                size_t row = (size_t)(seqs[s].q0 + j) * NH + h;
                rl[row] = ref_attend(&r, seqs[s], j, h, ro + row * HS);
            }
    double eo = rel_err(out, ro, (size_t)NQ * NH * HS), el = 0;
    for (size_t i = 0; i < (size_t)NQ * NH; i++) el = fmax(el, fabs(lse[i] - rl[i]));
    printf("# attention: relative error of out %.2e, max |lse - ref| %.2e\n", eo, el);
    CHECK(eo <= 1e-5, "relative error of out %g, bound 1e-5", eo);
    CHECK(el <= 1e-5, "lse error %g, bound 1e-5", el);
    free(r.q);
    free(r.k);
    free(r.v);
    free(ro);
    free(rl);
    O->free(q);
    O->free(k);
    O->free(v);
    O->free(out);
    O->free(lse);
}

// Training layout (no cache: kv rows are the query rows). dq, dk, dv start as
// NaN, so rows left unwritten fail.
static double attention_backward_error(const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS) {
    size_t nq = (size_t)N * NH * HS, nk = (size_t)N * NKV * HS;
    float *q = randn(nq, 2.0), *k = randn(nk, 1.0), *v = randn(nk, 1.0), *dout = randn(nq, 1.0);
    float *out = O->alloc(nq * sizeof(float)), *lse = O->alloc((size_t)N * NH * sizeof(float));
    float *dq = O->alloc(nq * sizeof(float)), *dk = O->alloc(nk * sizeof(float)), *dv = O->alloc(nk * sizeof(float));
    for (size_t i = 0; i < nq; i++) dq[i] = NAN;
    for (size_t i = 0; i < nk; i++) dk[i] = dv[i] = NAN;
    O->attention(out, lse, q, k, v, DT_F32, seqs, nseq, N, NH, NKV, HS);
    O->attention_backward(dq, dk, dv, dout, q, k, v, out, lse, seqs, nseq, N, NH, NKV, HS);
    ref_attn r = {to_double(q, nq), to_double(k, nk), to_double(v, nk), dout, NH, NKV, HS};
    double *rq = malloc(nq * sizeof(double)), *rk = malloc(nk * sizeof(double)), *rv = malloc(nk * sizeof(double));
    int group = NH / NKV;
    for (int s = 0; s < nseq; s++)
        for (int j = 0; j < seqs[s].n; j++) {
            for (int h = 0; h < NH; h++)   // q of row j, head h: only that output row
                for (int d = 0; d < HS; d++) {
                    size_t i = ((size_t)(seqs[s].q0 + j) * NH + h) * HS + d;
                    rq[i] = fd(r.q + i, &r, seqs[s], j, h, h + 1);
                }
            for (int hk = 0; hk < NKV; hk++)   // key/value row j: the rows from j on, the group's heads
                for (int d = 0; d < HS; d++) {
                    size_t i = ((size_t)(seqs[s].kv0 + j) * NKV + hk) * HS + d;
                    rk[i] = fd(r.k + i, &r, seqs[s], j, hk * group, (hk + 1) * group);
                    rv[i] = fd(r.v + i, &r, seqs[s], j, hk * group, (hk + 1) * group);
                }
        }
    double eq = rel_err(dq, rq, nq), ek = rel_err(dk, rk, nk), ev = rel_err(dv, rv, nk);
    printf("# attention_backward nseq=%d N=%d NH=%d NKV=%d: relative error dq %.2e, dk %.2e, dv %.2e\n", nseq, N,
           NH, NKV, eq, ek, ev);
    free(r.q);
    free(r.k);
    free(r.v);
    free(rq);
    free(rk);
    free(rv);
    float *bufs[] = {q, k, v, dout, out, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) O->free(bufs[i]);
    double e = fmax(eq, fmax(ek, ev));
    return e != e || eq != eq || ek != ek || ev != ev ? NAN : e;
}

static void attention_backward_matches_finite_differences_with_gqa(void) {
    // three sequences (one row-at-a-time in the forward, two in blocks, one of
    // them two blocks long), then a lone sequence, then without grouping
    rl_attn_seq three[] = {{0, 5, 0, 0}, {5, 20, 0, 5}, {25, 70, 0, 25}}, one[] = {{0, 40, 0, 0}};
    double e1 = attention_backward_error(three, 3, 95, 4, 2, 8);
    CHECK(e1 <= 1e-5, "three sequences, GQA: relative error %g, bound 1e-5", e1);
    double e2 = attention_backward_error(one, 1, 40, 4, 2, 8);
    CHECK(e2 <= 1e-5, "one sequence, GQA: relative error %g, bound 1e-5", e2);
    double e3 = attention_backward_error(three, 3, 95, 2, 2, 8);
    CHECK(e3 <= 1e-5, "three sequences, one query head per kv head: relative error %g, bound 1e-5", e3);
}

// ---- swiglu, embed -------------------------------------------------------------

static double ref_swiglu(double g, double u) { return g / (1 + exp(-g)) * u; }

static void swiglu_backward_matches_finite_differences_even_over_dout(void) {
    enum { N = 40, F = 1001 };
    size_t n = (size_t)N * F;
    float *g = randn(n, 3.0), *u = randn(n, 1.0), *d = randn(n, 1.0);
    float *dg = O->alloc(n * sizeof(float)), *du = O->alloc(n * sizeof(float)), *dd = copy_f(d, n);
    double *rg = malloc(n * sizeof(double)), *ru = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        rg[i] = d[i] * (ref_swiglu(g[i] + FD_STEP, u[i]) - ref_swiglu(g[i] - FD_STEP, u[i])) / (2 * FD_STEP);
        ru[i] = d[i] * (ref_swiglu(g[i], u[i] + FD_STEP) - ref_swiglu(g[i], u[i] - FD_STEP)) / (2 * FD_STEP);
    }
    O->swiglu_backward(dg, du, d, g, u, N, F);
    double eg = rel_err(dg, rg, n), eu = rel_err(du, ru, n);
    O->swiglu_backward(dd, du, dd, g, u, N, F);   // dgate over dout, as the model calls it
    double same = 0;
    for (size_t i = 0; i < n; i++) same = fmax(same, fabs(dd[i] - dg[i]));
    printf("# swiglu_backward: relative error dgate %.2e, dup %.2e; in place differs by %.2e\n", eg, eu, same);
    CHECK(eg <= 1e-5 && eu <= 1e-5, "relative errors dgate %g, dup %g, bound 1e-5", eg, eu);
    CHECK(same == 0, "dgate written over dout differs by %g", same);
    free(rg);
    free(ru);
    float *bufs[] = {g, u, d, dg, du, dd};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) O->free(bufs[i]);
}

static void embed_backward_adds_rows_of_repeated_ids(void) {
    enum { V = 50, C = 100, N = 600 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(rng_u64(&R) % 20);   // rows 20.. get nothing
    float *dt = randn((size_t)V * C, 1.0), *d = randn((size_t)N * C, 1.0);
    double *ref = to_double(dt, (size_t)V * C);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) ref[(size_t)ids[i] * C + c] += 2.0 * d[(size_t)i * C + c];
    O->embed_backward(dt, d, ids, N, C);
    O->embed_backward(dt, d, ids, N, C);
    double e = rel_err(dt, ref, (size_t)V * C);
    printf("# embed_backward, two calls: relative error %.2e\n", e);
    CHECK(e <= 1e-6, "relative error %g, bound 1e-6", e);
    free(ref);
    O->free(dt);
    O->free(d);
}

// ---- zero, sumsq, adamw ---------------------------------------------------------

static void sumsq_accumulates_in_double_and_zero_clears(void) {
    size_t n = 1000003;
    float *x = randn(n, 1.0);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    double s = O->sumsq(x, n), e = fabs(s - ref) / ref;
    printf("# sumsq of %zu: relative error %.2e\n", n, e);
    CHECK(e <= 1e-12, "sumsq %.17g, reference %.17g", s, ref);
    // Whole numbers: every partial sum is exact, so any order gives the
    // reference's bits; lengths around the lanes and chunks miss no element.
    for (size_t len = 1; len <= n; len = len < 40 ? len + 1 : len * 3 + 1) {
        double whole = 0;
        for (size_t i = 0; i < len; i++) {
            x[i] = (float)((int)(i * 7919 % 2001) - 1000);
            whole += (double)x[i] * x[i];
        }
        double got = O->sumsq(x, len);
        CHECK(got == whole, "sumsq of %zu whole numbers %.17g, exactly %.17g", len, got, whole);
    }
    O->zero(x, n);
    for (size_t i = 0; i < n; i++) CHECK(x[i] == 0, "element %zu is %g after zero", i, x[i]);
    CHECK(O->sumsq(x, n) == 0, "sumsq of zeros");
    O->free(x);
}

// Three steps against torch.optim.AdamW's formula in double, from the same
// float scalars: p·(1 − lr·wd); m, v moments; p − lr/bc1 · m / (√v/bc2_sqrt + eps).
static void adamw_three_steps_match_torch_formula_in_double(void) {
    enum { n = 10007 };
    rl_adamw h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.1f, .gscale = 0.5f};
    float *p = randn(n, 0.02), *m = O->alloc(n * sizeof(float)), *v = O->alloc(n * sizeof(float));
    double *rp = to_double(p, n), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    for (int step = 1; step <= 3; step++) {
        float *g = randn(n, 1e-3);
        h.bc1 = 1 - pow(h.beta1, step);
        h.bc2_sqrt = sqrt(1 - pow(h.beta2, step));
        O->adamw(p, g, m, v, n, &h);
        for (int i = 0; i < n; i++) {
            double gi = (double)g[i] * h.gscale;
            rp[i] *= 1 - (double)h.lr * h.wd;
            rm[i] = h.beta1 * rm[i] + (1 - (double)h.beta1) * gi;
            rv[i] = h.beta2 * rv[i] + (1 - (double)h.beta2) * gi * gi;
            rp[i] -= h.lr / h.bc1 * rm[i] / (sqrt(rv[i]) / h.bc2_sqrt + h.eps);
        }
        O->free(g);
    }
    double ep = rel_err(p, rp, n), em = rel_err(m, rm, n), ev = rel_err(v, rv, n);
    printf("# adamw, 3 steps: relative error p %.2e, m %.2e, v %.2e\n", ep, em, ev);
    CHECK(ep <= 1e-6 && em <= 1e-6 && ev <= 1e-6, "relative errors p %g, m %g, v %g, bound 1e-6", ep, em, ev);
    free(rp);
    free(rm);
    free(rv);
    O->free(p);
    O->free(m);
    O->free(v);
}

int main(void) {
    O = ops_cpu();
    rng_seed(&R, 20240611);
    on_best_and_avx2(logprob_cases);
    RUN(matmul_dx_matches_double_product_and_accumulates);
    RUN(matmul_dw_accumulates_product_and_bias_sum);
    RUN(rmsnorm_backward_matches_finite_differences_and_accumulates);
    RUN(scale_multiplies_every_element_in_f32);
    RUN(rope_backward_turns_by_minus_the_angle);
    RUN(attention_forward_matches_double_reference_and_keeps_lse);
    RUN(attention_backward_matches_finite_differences_with_gqa);
    RUN(swiglu_backward_matches_finite_differences_even_over_dout);
    RUN(embed_backward_adds_rows_of_repeated_ids);
    RUN(sumsq_accumulates_in_double_and_zero_clears);
    RUN(adamw_three_steps_match_torch_formula_in_double);
    CHECK_DONE();
}
