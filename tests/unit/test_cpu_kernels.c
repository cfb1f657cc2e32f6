// test_cpu_kernels.c — the CPU backend's builds of its inner loops agree: the
// int8 products (AVX-512 VNNI, AVX2, portable) give the exact int32 sums, the
// many-row products of f32 and bf16 weights (bf16 ones also from panels,
// laid out as model/cpu/pack.h says) a double-precision sum to f32
// rounding, the per-token quantization of a product's input and the
// rounding of activations to bf16 give the same bits on every build and
// follow their definitions (model/ops.h rl_act, dtype.h f32_to_bf16), fp8
// rows read back as dtype.h's e4m3 values, and decoding attention's products
// on a bf16 cache match a double-precision sum. The builds the processor runs
// are tested (and listed first); one without AVX-512 VNNI tests two, one
// with AMX four.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "model/cpu/kernels.h"
#include "model/cpu/pack.h"
#include "rng.h"

// The builds this processor runs, chosen as RLPIPE_CPU_PORTABLE and RLPIPE_CPU ask.
static const cpu_kernels *builds[4];
static int nbuilds;

static void find_builds(void) {
    const char *env[4][2] = {
        {"RLPIPE_CPU_PORTABLE", "1"}, {"RLPIPE_CPU", "avx2"}, {"RLPIPE_CPU", "avx512"}, {"RLPIPE_CPU", "best"}};
    for (int i = 0; i < 4; i++) {
        unsetenv("RLPIPE_CPU_PORTABLE");
        unsetenv("RLPIPE_CPU");
        setenv(env[i][0], env[i][1], 1);
        cpu_kernels_choose();
        int seen = 0;
        for (int j = 0; j < nbuilds; j++) seen |= builds[j] == cpu_K;
        if (!seen) builds[nbuilds++] = cpu_K;
    }
    unsetenv("RLPIPE_CPU_PORTABLE");
    unsetenv("RLPIPE_CPU");
    for (int j = 0; j < nbuilds; j++) printf("# build: %s\n", builds[j]->name);
}

// Row lengths with and without SIMD tails: a product's K in the models is
// any multiple of a head size (24, 40, 48, 64) or an MLP width.
static const int KS[] = {1, 7, 31, 32, 33, 63, 64, 65, 96, 100, 200, 576, 1536};

static void fill_i8(int8_t *v, size_t n, rl_rng *r, int lo) {
    for (size_t i = 0; i < n; i++) v[i] = (int8_t)(lo + (int)(rng_u64(r) % (uint64_t)(128 - lo)));
}

// Every build: out[j][i] = Σ_k x[j][k] w[i][k] exactly, for every tile of up
// to 4 input rows by 16 weight rows (VNNI sums blocks of 16 / nx weight rows
// across lanes together: whole and partial blocks), strides longer than K,
// values over all of [-127, 127] (the range quantization gives: AVX2's sign
// trick cannot take -128).
static void int8_products_are_exact_on_every_build(void) {
    rl_rng r;
    rng_seed(&r, 3);
    for (size_t t = 0; t < sizeof KS / sizeof *KS; t++) {
        int K = KS[t];
        size_t ld = (size_t)K + 5;
        int8_t *x = malloc(4 * ld), *w = malloc(16 * ld);
        fill_i8(x, 4 * ld, &r, -127);
        fill_i8(w, 16 * ld, &r, -127);
        if (K > 3) x[2] = w[1] = 127, w[2] = x[3] = -127;
        for (int nx = 1; nx <= 4; nx++)
            for (int nw = 1; nw <= 16; nw++) {
                int64_t want[64];
                for (int j = 0; j < nx; j++)
                    for (int i = 0; i < nw; i++) {
                        int64_t s = 0;
                        for (int k = 0; k < K; k++) s += (int64_t)x[j * ld + k] * w[i * ld + k];
                        want[j * nw + i] = s;
                    }
                for (int b = 0; b < nbuilds; b++) {
                    int32_t got[64];
                    builds[b]->dots_i8(got, x, ld, nx, w, ld, nw, K);
                    for (int e = 0; e < nx * nw; e++)
                        CHECK(got[e] == want[e], "%s: K %d, tile %dx%d, entry %d: %d, want %lld", builds[b]->name, K,
                              nx, nw, e, got[e], (long long)want[e]);
                }
            }
        free(x);
        free(w);
    }
}

// Builds with a many-row int8 product give the bits of the definition:
// (float)(exact sum) · sw[m] · sx[n], for shapes with partial blocks of
// weight rows (8, 16, 32) and of input rows (4, 6), K not a multiple of 4, K
// past a multiple of 16, and more input rows than one block of them (192,
// AVX2), the last block partial; values ±127 as the extremes of vpmaddubsw's
// pairs (AVX2); for AMX's tiles of 16 input rows by 2 panels of 16 weight
// rows, both not a multiple of 2 × 16 and K not one of 64 (40 x 80 x 1000,
// 33 x 20 x 63), from w's rows and, for a build that reads them, from its
// panels (pack.h).
static void many_row_int8_products_give_the_defined_bits(void) {
    rl_rng r;
    rng_seed(&r, 6);
    const int shapes[][3] = {{1, 1, 1},     {5, 7, 3},     {6, 16, 64},  {13, 33, 100},  {64, 96, 576},
                             {7, 50, 1536}, {3, 48, 150},  {8, 16, 15},  {401, 21, 36}, {4, 9, 8},
                             {40, 80, 1000}, {33, 20, 63}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        int N = shapes[t][0], M = shapes[t][1], K = shapes[t][2];
        int8_t *x = malloc((size_t)N * K), *w = malloc((size_t)M * K);
        float *sx = malloc((size_t)N * sizeof(float)), *sw = malloc((size_t)M * sizeof(float));
        float *out = malloc((size_t)N * (M + 3) * sizeof(float));
        fill_i8(x, (size_t)N * K, &r, -127);
        fill_i8(w, (size_t)M * K, &r, -127);
        if (K == 8) {   // ±127 only (row 0's products by even weight rows all +127², by odd all −127²), some x 0
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) x[n * K + k] = (int8_t)(n == 3 && k < 2 ? 0 : (k + n) % 3 ? 127 : -127);
            for (int m = 0; m < M; m++)
                for (int k = 0; k < K; k++) w[m * K + k] = (int8_t)((k % 3 ? 127 : -127) * (m % 2 ? -1 : 1));
        }
        for (int n = 0; n < N; n++) sx[n] = (float)rng_uniform(&r) * 0.1f + 1e-3f;
        for (int m = 0; m < M; m++) sw[m] = (float)rng_uniform(&r) * 0.01f + 1e-4f;
        int np = (M + PANEL_ROWS - 1) / PANEL_ROWS;
        void *pw = aligned_alloc(64, (size_t)np * panel_bytes(DT_I8, K));
        pack_panels(pw, w, DT_I8, M, K, 0, np);
        for (int b = 0; b < nbuilds * 2; b++) {   // each build from w's rows, then from its panels
            const cpu_kernels *B = builds[b % nbuilds];
            int panels = b >= nbuilds;
            if (!B->gemm_i8 || (panels && !B->i8_panels)) continue;
            B->gemm_i8(out, (size_t)M + 3, x, sx, N, w, panels ? pw : NULL, sw, M, K);
            for (int n = 0; n < N; n++)
                for (int m = 0; m < M; m++) {
                    int64_t acc = 0;
                    for (int k = 0; k < K; k++) acc += (int64_t)x[(size_t)n * K + k] * w[(size_t)m * K + k];
                    float want = (float)acc * sw[m] * sx[n], got = out[(size_t)n * (M + 3) + m];
                    CHECK(memcmp(&got, &want, 4) == 0, "%s%s: %dx%dx%d, out[%d][%d] %.9g, want %.9g", B->name,
                          panels ? " panels" : "", N, M, K, n, m, got, want);
                }
        }
        free(x), free(w), free(sx), free(sw), free(out), free(pw);
    }
}

// Builds with a many-row product of f32 or bf16 weights give Σ_k x w to
// within 1e-5 of Σ_k |x w| (f32 sums in a build's own order; with bf16 inputs
// and AVX512_BF16 the products are exact), over shapes with partial tiles of
// input rows (4) and weight rows (3 or 6), K short of a vector (16 f32, 32
// bf16) or not a multiple of one, N = 5 (the fewest rows the CPU backend
// gives this product), and N x K large enough to be cut into blocks of rows
// (256) and of K (300 x 2000); inputs of any f32 value and of bf16 values (as
// the bf16 precision rounds them), both on bf16 weights. The same for the
// product from weights packed in panels (kernels.h gemm_panels, for the
// dtypes a build has it for): groups of 3 panels of 16 rows and fewer (M = 50: 3 + 1, the
// last short), tiles of 8, 4, 2 and 1 input rows, odd K, blocks of rows
// (300 x 2000), and f32 inputs, which it hands to the rows as stored; for
// AMX's tiles of 16 rows by 2 panels, rows and panels not a multiple of
// 2 × 16 (40 x 80, 33 x 20) and pairs not a multiple of 16 (K = 1000, 31). The
// columns past M of out are left alone.
static void many_row_float_products_match_a_double_reference(void) {
    rl_rng r;
    rng_seed(&r, 7);
    const int shapes[][3] = {{5, 1, 1},   {5, 4, 16},   {5, 7, 3},      {6, 9, 31},   {9, 5, 33},
                             {13, 33, 100}, {8, 6, 64}, {64, 96, 576}, {7, 50, 1536}, {300, 7, 2000},
                             {40, 80, 1000}, {33, 20, 31}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        int N = shapes[t][0], M = shapes[t][1], K = shapes[t][2];
        size_t ldo = (size_t)M + 3;
        float *x = malloc((size_t)N * K * sizeof(float)), *wf = malloc((size_t)M * K * sizeof(float));
        float *out = malloc((size_t)N * ldo * sizeof(float));
        uint16_t *wb = malloc((size_t)M * K * sizeof(uint16_t));
        int np = (M + PANEL_ROWS - 1) / PANEL_ROWS;
        void *pb = aligned_alloc(64, (size_t)np * panel_bytes(DT_BF16, K));
        void *pf = aligned_alloc(64, (size_t)np * panel_bytes(DT_F32, K));
        for (size_t i = 0; i < (size_t)N * K; i++) x[i] = (float)(rng_normal(&r) * pow(10, (double)(i % 5) - 2));
        for (size_t i = 0; i < (size_t)M * K; i++) {
            wb[i] = f32_to_bf16((float)rng_normal(&r) * 0.05f);
            wf[i] = (float)rng_normal(&r) * 0.05f;
        }
        pack_panels(pb, wb, DT_BF16, M, K, 0, np);
        pack_panels(pf, wf, DT_F32, M, K, 0, np);
        for (int xkind = 0; xkind < 2; xkind++) {   // 0: any f32, 1: bf16 values
            if (xkind)
                for (size_t i = 0; i < (size_t)N * K; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
            for (int wkind = 0; wkind < 2; wkind++) {
                rl_dtype dt = wkind ? DT_BF16 : DT_F32;
                for (int b = 0; b < nbuilds * 2; b++) {   // each build's gemm, then its gemm_panels
                    const cpu_kernels *B = builds[b % nbuilds];
                    int panels = b >= nbuilds;
                    if (!B->gemm || (panels && !(B->panels_for >> dt & 1))) continue;
                    for (size_t i = 0; i < (size_t)N * ldo; i++) out[i] = -7.0f;
                    if (panels)
                        B->gemm_panels(out, ldo, x, N, dt == DT_BF16 ? (const void *)wb : wf, dt,
                                       dt == DT_BF16 ? pb : pf, M, K, 0);
                    else B->gemm(out, ldo, x, N, dt == DT_BF16 ? (const void *)wb : wf, dt, M, K);
                    for (int n = 0; n < N; n++) {
                        for (int m = 0; m < M; m++) {
                            double want = 0, mag = 0;
                            for (int k = 0; k < K; k++) {
                                double w = dt == DT_BF16 ? bf16_to_f32(wb[(size_t)m * K + k]) : wf[(size_t)m * K + k];
                                want += (double)x[(size_t)n * K + k] * w;
                                mag += fabs((double)x[(size_t)n * K + k] * w);
                            }
                            double got = out[(size_t)n * ldo + m];
                            CHECK(fabs(got - want) <= 1e-5 * mag,
                                  "%s%s: %s weights, %s inputs, %dx%dx%d, out[%d][%d] %.9g, want %.9g (Σ|xw| %.3g)",
                                  B->name, panels ? " panels" : "", dt_name(dt), xkind ? "bf16" : "f32", N, M, K, n,
                                  m, got, want, mag);
                        }
                        for (size_t m = (size_t)M; m < ldo; m++)
                            CHECK(out[(size_t)n * ldo + m] == -7.0f, "%s%s: %dx%dx%d wrote past M in row %d",
                                  B->name, panels ? " panels" : "", N, M, K, n);
                    }
                }
            }
        }
        free(x), free(wf), free(out), free(wb), free(pb), free(pf);
    }
}

// gemm_panels with add = 1 (f32 weights: the backward's products, which
// accumulate) adds its sums to what out held, within 1e-5 of Σ|xw| + |out|,
// on every build that has f32 panels; the weights packed both as pack_panels
// packs a matrix's rows and as pack_panels_t packs its transpose's (the
// same panels: checked equal), K cut into blocks in the largest shape.
static void f32_panel_products_add_to_out_when_asked(void) {
    rl_rng r;
    rng_seed(&r, 11);
    const int shapes[][3] = {{5, 7, 3}, {9, 33, 100}, {300, 50, 2000}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        int N = shapes[t][0], M = shapes[t][1], K = shapes[t][2], np = (M + PANEL_ROWS - 1) / PANEL_ROWS;
        float *x = malloc((size_t)N * K * sizeof(float)), *w = malloc((size_t)M * K * sizeof(float));
        float *wt = malloc((size_t)K * M * sizeof(float)), *out = malloc((size_t)N * M * sizeof(float));
        float *pf = aligned_alloc(64, (size_t)np * panel_bytes(DT_F32, K));
        float *pt = aligned_alloc(64, (size_t)np * panel_bytes(DT_F32, K));
        for (size_t i = 0; i < (size_t)N * K; i++) x[i] = (float)rng_normal(&r);
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) wt[(size_t)k * M + m] = w[(size_t)m * K + k] = (float)rng_normal(&r) * 0.05f;
        pack_panels(pf, w, DT_F32, M, K, 0, np);
        pack_panels_t(pt, wt, (size_t)M, K, M, 0, np);
        CHECK(memcmp(pf, pt, (size_t)np * panel_bytes(DT_F32, K)) == 0,
              "%dx%d: pack_panels_t of the transpose differs from pack_panels", M, K);
        for (int b = 0; b < nbuilds; b++) {
            const cpu_kernels *B = builds[b];
            if (!B->gemm_panels || !(B->panels_for >> DT_F32 & 1)) continue;
            for (size_t i = 0; i < (size_t)N * M; i++) out[i] = (float)(i % 7) - 3.0f;
            B->gemm_panels(out, (size_t)M, x, N, w, DT_F32, pt, M, K, 1);
            for (int n = 0; n < N; n++)
                for (int m = 0; m < M; m++) {
                    double before = (double)(((size_t)n * M + m) % 7) - 3.0, want = before, mag = fabs(before);
                    for (int k = 0; k < K; k++) {
                        want += (double)x[(size_t)n * K + k] * w[(size_t)m * K + k];
                        mag += fabs((double)x[(size_t)n * K + k] * w[(size_t)m * K + k]);
                    }
                    double got = out[(size_t)n * M + m];
                    CHECK(fabs(got - want) <= 1e-5 * mag, "%s: %dx%dx%d, out[%d][%d] %.9g, want %.9g", B->name, N,
                          M, K, n, m, got, want);
                }
        }
        free(x), free(w), free(wt), free(out), free(pf), free(pt);
    }
}

// Decoding attention's two products on an f32 and on a bf16 cache, on every
// build, against double sums: scores S (G, T) = scale · q Kᵀ within 1e-5 of
// Σ|q k|, and the mix o (G, HS) = P V within 1e-5 of Σ|p v|. Key/value rows
// sit at a stride wider than a head (the other heads between them); the
// shapes cover G from 1 to 7 (groups of 3 heads and fewer), HS of whole
// vectors of 64, 32, 16 and 8 and a tail, T from 1 key to beyond the rows
// fetched ahead, and one row short of a block of 4 keys. Nothing is written
// past G·T scores or G·HS outputs. A bf16 cache gives, bit for bit, what an
// f32 cache of its values gives (the same sums in the same order), and the
// AVX-512 builds' mix has the AVX2 build's bits (each column summed over t
// in the same order by FMA).
typedef struct {
    float *S, *o;
} kv_out;

static kv_out kv_run(const cpu_kernels *B, const float *q, const float *P, int G, int T, int HS, const void *K,
                     const void *V, rl_dtype dt, size_t ld, size_t extra) {
    kv_out r = {malloc(((size_t)G * T + extra) * sizeof(float)), malloc(((size_t)G * HS + extra) * sizeof(float))};
    for (size_t i = 0; i < (size_t)G * T + extra; i++) r.S[i] = -7.0f;
    for (size_t i = 0; i < (size_t)G * HS + extra; i++) r.o[i] = -7.0f;
    B->kv_scores(r.S, q, G, K, dt, ld, T, HS, 1.0f / sqrtf((float)HS));
    B->kv_mix(r.o, P, G, T, V, dt, ld, HS);
    return r;
}

static void decode_attention_products_on_either_cache_match_a_double_reference(void) {
    rl_rng r;
    rng_seed(&r, 11);
    const int shapes[][3] = {{1, 1, 8}, {3, 1, 64}, {3, 5, 64}, {2, 7, 12}, {7, 37, 128}, {4, 64, 40},
                             {3, 150, 64}, {1, 3, 3}, {5, 21, 100}, {3, 9, 80}, {2, 6, 24}, {4, 19, 136}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int G = shapes[c][0], T = shapes[c][1], HS = shapes[c][2];
        size_t ld = (size_t)HS * 3 + 5, extra = 16, n = (size_t)T * ld;
        float *q = malloc((size_t)G * HS * sizeof(float)), *P = malloc((size_t)G * T * sizeof(float));
        float *K32 = malloc(n * 4), *V32 = malloc(n * 4), *Kw = malloc(n * 4), *Vw = malloc(n * 4);
        uint16_t *K16 = malloc(n * 2), *V16 = malloc(n * 2);
        for (size_t i = 0; i < (size_t)G * HS; i++) q[i] = (float)rng_normal(&r);
        for (size_t i = 0; i < (size_t)G * T; i++) P[i] = (float)rng_uniform(&r) / (float)T;
        for (size_t i = 0; i < n; i++) {
            K32[i] = (float)rng_normal(&r);
            V32[i] = (float)rng_normal(&r);
            K16[i] = f32_to_bf16(K32[i]), Kw[i] = bf16_to_f32(K16[i]);
            V16[i] = f32_to_bf16(V32[i]), Vw[i] = bf16_to_f32(V16[i]);
        }
        float scale = 1.0f / sqrtf((float)HS);
        for (int cache = 0; cache < 2; cache++) {   // 0: f32, 1: bf16
            rl_dtype dt = cache ? DT_BF16 : DT_F32;
            const void *K = cache ? (const void *)K16 : K32, *V = cache ? (const void *)V16 : V32;
            const float *Kf = cache ? Kw : K32, *Vf = cache ? Vw : V32;   // their values
            float *o2 = NULL;   // the AVX2 build's mix
            for (int b = 0; b < nbuilds; b++) {
                const cpu_kernels *B = builds[b];
                kv_out got = kv_run(B, q, P, G, T, HS, K, V, dt, ld, extra);
                for (int g = 0; g < G; g++) {
                    for (int t = 0; t < T; t++) {
                        double want = 0, mag = 0;
                        for (int d = 0; d < HS; d++) {
                            double x = (double)q[(size_t)g * HS + d] * Kf[(size_t)t * ld + d];
                            want += x, mag += fabs(x);
                        }
                        want *= scale, mag *= scale;
                        double s = got.S[(size_t)g * T + t];
                        CHECK(fabs(s - want) <= 1e-5 * mag, "%s scores, %s: G %d, T %d, HS %d: S[%d][%d] %.9g, want %.9g",
                              B->name, dt_name(dt), G, T, HS, g, t, s, want);
                    }
                    for (int d = 0; d < HS; d++) {
                        double want = 0, mag = 0;
                        for (int t = 0; t < T; t++) {
                            double x = (double)P[(size_t)g * T + t] * Vf[(size_t)t * ld + d];
                            want += x, mag += fabs(x);
                        }
                        double v = got.o[(size_t)g * HS + d];
                        CHECK(fabs(v - want) <= 1e-5 * mag, "%s mix, %s: G %d, T %d, HS %d: o[%d][%d] %.9g, want %.9g",
                              B->name, dt_name(dt), G, T, HS, g, d, v, want);
                    }
                }
                if (strcmp(B->name, "avx2") == 0) {
                    o2 = malloc((size_t)G * HS * sizeof(float));
                    memcpy(o2, got.o, (size_t)G * HS * sizeof(float));
                } else if (o2 && strncmp(B->name, "avx512", 6) == 0) {
                    CHECK(memcmp(got.o, o2, (size_t)G * HS * sizeof(float)) == 0,
                          "%s mix, %s: G %d, T %d, HS %d: not avx2's bits", B->name, dt_name(dt), G, T, HS);
                }
                for (size_t i = 0; i < extra; i++) {
                    CHECK(got.S[(size_t)G * T + i] == -7.0f, "%s scores, %s: G %d, T %d, HS %d wrote past G·T", B->name,
                          dt_name(dt), G, T, HS);
                    CHECK(got.o[(size_t)G * HS + i] == -7.0f, "%s mix, %s: G %d, T %d, HS %d wrote past G·HS", B->name,
                          dt_name(dt), G, T, HS);
                }
                if (cache) {   // against an f32 cache of the same values
                    kv_out w = kv_run(B, q, P, G, T, HS, Kw, Vw, DT_F32, ld, extra);
                    CHECK(!memcmp(got.S, w.S, (size_t)G * T * sizeof(float)),
                          "%s scores: G %d, T %d, HS %d: a bf16 cache's are not those of an f32 cache of its values",
                          B->name, G, T, HS);
                    CHECK(!memcmp(got.o, w.o, (size_t)G * HS * sizeof(float)),
                          "%s mix: G %d, T %d, HS %d: a bf16 cache's is not that of an f32 cache of its values",
                          B->name, G, T, HS);
                    free(w.S), free(w.o);
                }
                free(got.S), free(got.o);
            }
            free(o2);
        }
        free(q), free(P), free(K32), free(V32), free(Kw), free(Vw), free(K16), free(V16);
    }
}

// pack.h's panels hold w[16p + i][k] at (p·K + k)·16 + i for f32,
// w[16p + i][2q + j] at (p·KP + q)·32 + 2i + j for bf16 and
// w[16p + i][4q + j] at (p·KQ + q)·64 + 4i + j for int8, and zeros past the
// last row and input: K odd, even, and not a multiple of 4, a last panel
// short of 16 rows or full, one element; packing panels [p0, p1) writes
// only those.
static void panels_hold_each_weight_where_the_layout_says(void) {
    const int shapes[][2] = {{1, 1}, {16, 2}, {17, 3}, {33, 576}, {48, 31}};
    const rl_dtype dts[] = {DT_F32, DT_BF16, DT_I8};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++)
        for (int d = 0; d < 3; d++) {
            rl_dtype dt = dts[d];
            int M = shapes[t][0], K = shapes[t][1], np = (M + PANEL_ROWS - 1) / PANEL_ROWS;
            int per = (int)(4 / dt_size(dt)), steps = (K + per - 1) / per;   // 64 bytes a step: 4 bytes a row
            size_t pb = panel_bytes(dt, K), es = dt_size(dt);
            CHECK(pb == (size_t)steps * 64, "%s %dx%d: %zu bytes a panel", dt_name(dt), M, K, pb);
            unsigned char *w = malloc((size_t)M * K * es), *p = malloc((size_t)np * pb);
            for (size_t i = 0; i < (size_t)M * K * es; i++) w[i] = (unsigned char)(i % 251 + 1);   // none zero
            memset(p, 0xee, (size_t)np * pb);
            pack_panels(p, w, dt, M, K, np > 1 ? 1 : 0, np);   // all but the first panel of several
            for (int pn = 0; pn < np; pn++)
                for (int s = 0; s < steps; s++)
                    for (int i = 0; i < PANEL_ROWS; i++)
                        for (int j = 0; j < per; j++) {
                            int row = pn * PANEL_ROWS + i, k = s * per + j;
                            const unsigned char *got = p + (size_t)pn * pb + (size_t)s * 64 + (size_t)(i * per + j) * es;
                            unsigned char want[4] = {0}, stale[4] = {0xee, 0xee, 0xee, 0xee};
                            if (row < M && k < K) memcpy(want, w + ((size_t)row * K + k) * es, es);
                            CHECK(memcmp(got, np > 1 && pn == 0 ? stale : want, es) == 0,
                                  "%s %dx%d: panel %d step %d row %d input %d", dt_name(dt), M, K, pn, s, i, j);
                        }
            free(w), free(p);
        }
}

// The definition (ops.h ACT_I8): s = max|x| / 127, q = rint(x · (1/s)) in f32.
static float quant_i8_def(int8_t *q, const float *x, int K) {
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k]));
    float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0;
    for (int k = 0; k < K; k++) q[k] = (int8_t)lrintf(x[k] * inv);
    return s;
}

// Rows of every length, a zero row, rows whose values sit on halves of a
// step (ties go to even), and one of mixed magnitudes.
static void fill_row(float *x, int K, int kind, rl_rng *r) {
    for (int k = 0; k < K; k++) {
        switch (kind) {
        case 0: x[k] = (float)(rng_normal(r) * 3.0); break;
        case 1: x[k] = 0; break;
        case 2: x[k] = (float)((int)(rng_u64(r) % 255) - 127) + 0.5f; break;
        default: x[k] = (float)(rng_normal(r) * pow(10, (double)(k % 7) - 3)); break;
        }
    }
    if (kind == 2 && K > 1) x[0] = 127.0f;   // the scale is exactly 1, so the halves are ties
}

static void input_rows_quantize_alike_on_every_build(void) {
    rl_rng r;
    rng_seed(&r, 4);
    for (size_t t = 0; t < sizeof KS / sizeof *KS; t++)
        for (int kind = 0; kind < 4; kind++) {
            int K = KS[t];
            float *x = malloc((size_t)K * sizeof(float)), *qf = malloc((size_t)K * sizeof(float));
            int8_t *want = malloc((size_t)K), *got = malloc((size_t)K);
            fill_row(x, K, kind, &r);
            float s = quant_i8_def(want, x, K);
            for (int b = 0; b < nbuilds; b++) {
                float gs = builds[b]->quant_i8(got, x, K);
                CHECK(gs == s && memcmp(got, want, (size_t)K) == 0, "%s int8: K %d, row kind %d: scale %g (want %g)%s",
                      builds[b]->name, K, kind, gs, s, memcmp(got, want, (size_t)K) ? ", values differ" : "");
                // fp8: s = max|x| / 448, q = e4m3(x · (1/s)), each an e4m3 value
                float amax = 0;
                for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k]));
                float s8 = amax / 448.0f, inv = s8 > 0 ? 1.0f / s8 : 0;
                gs = builds[b]->quant_fp8(qf, x, K);
                CHECK(gs == s8, "%s fp8: K %d, kind %d: scale %g, want %g", builds[b]->name, K, kind, gs, s8);
                for (int k = 0; k < K; k++) {
                    float v = e4m3_to_f32(f32_to_e4m3(x[k] * inv));
                    CHECK(memcmp(&qf[k], &v, 4) == 0, "%s fp8: K %d, kind %d, element %d: %.9g, want %.9g",
                          builds[b]->name, K, kind, k, qf[k], v);
                }
            }
            free(x);
            free(qf);
            free(want);
            free(got);
        }
}

// Rounding activations to bf16 gives dtype.h's f32_to_bf16 bits on every
// build: random bit patterns (NaNs, infinities, subnormals, both signs
// among them), ties to even both ways, the largest finite values (which
// round to infinity), at every length up to 70 (the vector tails).
static void bf16_rounding_gives_the_defined_bits_on_every_build(void) {
    rl_rng r;
    rng_seed(&r, 6);
    enum { N = 70 };
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xff800001u,
                                       0x7fc00000u, 0xffffffffu, 0x7fbfffffu, 0x7f7fffffu, 0xff7fffffu, 0x00000001u,
                                       0x807fffffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0xbf808000u, 0x7f7f8000u};
    size_t ns = sizeof special / sizeof *special;
    for (int n = 0; n <= N; n++)
        for (int rep = 0; rep < 3; rep++) {
            uint32_t bits[N];
            float x[N], want[N];
            for (int i = 0; i < n; i++) {
                uint64_t v = rng_u64(&r);
                bits[i] = rep == 0 ? special[(size_t)(i + n) % ns]
                          : rep == 1 ? (uint32_t)v
                                     : ((uint32_t)v & 0xffff0000u) | ((v >> 32) & 1 ? 0x8000u : 0x7fffu);
                memcpy(&x[i], &bits[i], 4);
                want[i] = bf16_to_f32(f32_to_bf16(x[i]));
            }
            for (int b = 0; b < nbuilds; b++) {
                float got[N];
                memcpy(got, x, (size_t)n * sizeof(float));
                builds[b]->round_bf16(got, n);
                for (int i = 0; i < n; i++) {
                    uint32_t g, w;
                    memcpy(&g, &got[i], 4);
                    memcpy(&w, &want[i], 4);
                    CHECK(g == w, "%s: n %d, element %d: 0x%08x rounds to 0x%08x, want 0x%08x", builds[b]->name, n, i,
                          bits[i], g, w);
                }
            }
        }
}

// fp8 weight rows: row_to_f32 gives each e4m3 value times the row's scale
// exactly, and dot the scaled sum to f32 rounding, on every build.
static void fp8_rows_read_back_as_their_e4m3_values(void) {
    rl_rng r;
    rng_seed(&r, 5);
    for (size_t t = 0; t < sizeof KS / sizeof *KS; t++) {
        int K = KS[t];
        uint8_t *w = malloc((size_t)K);
        float *x = malloc((size_t)K * sizeof(float)), *out = malloc((size_t)K * sizeof(float)), scale = 0.0173f;
        for (int k = 0; k < K; k++) {
            w[k] = (uint8_t)(rng_u64(&r) % 256);
            if ((w[k] & 0x7f) == 0x7f) w[k] ^= 1;   // not NaN
            x[k] = (float)rng_normal(&r);
        }
        double want = 0, mag = 0;
        for (int k = 0; k < K; k++) {
            want += (double)x[k] * e4m3_to_f32(w[k]);
            mag += fabs((double)x[k] * e4m3_to_f32(w[k]));
        }
        want *= scale;
        for (int b = 0; b < nbuilds; b++) {
            builds[b]->row_to_f32(out, w, &scale, K, K, DT_FP8);
            for (int k = 0; k < K; k++)
                CHECK(out[k] == e4m3_to_f32(w[k]) * scale, "%s: K %d, element %d: %.9g", builds[b]->name, K, k, out[k]);
            double got = builds[b]->dot(x, w, &scale, K, K, DT_FP8);
            CHECK(fabs(got - want) <= 1e-6 * mag * scale + 1e-30, "%s: K %d: dot %.9g, want %.9g", builds[b]->name, K,
                  got, want);
        }
        free(w);
        free(x);
        free(out);
    }
}

// Every code but NaN (0x7f, 0xff) reads back as itself; conversion saturates at 448.
static void e4m3_codes_round_trip_and_saturate(void) {
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        float v = e4m3_to_f32((uint8_t)c);
        CHECK(f32_to_e4m3(v) == c || (v == 0 && (f32_to_e4m3(v) & 0x7f) == 0), "code 0x%02x (%g) reads back as 0x%02x",
              c, v, f32_to_e4m3(v));
    }
    CHECK(e4m3_to_f32(0x7e) == 448.0f && e4m3_to_f32(0x01) == 0x1p-9f && e4m3_to_f32(0x08) == 0x1p-6f,
          "448, the least subnormal 2^-9 and the least normal 2^-6");
    CHECK(f32_to_e4m3(1e9f) == 0x7e && f32_to_e4m3(-460.0f) == 0xfe && f32_to_e4m3(INFINITY) == 0x7e, "saturation");
    CHECK((f32_to_e4m3(NAN) & 0x7f) == 0x7f, "NaN stays NaN");
    CHECK(f32_to_e4m3(0x1p-10f) == 0x00 && f32_to_e4m3(0x1.8p-10f) == 0x01 && f32_to_e4m3(0x1.8p-9f) == 0x02,
          "subnormal ties go to even");
    CHECK(f32_to_e4m3(1.0625f) == 0x38 && f32_to_e4m3(1.1875f) == 0x3a, "normal ties go to even");
}

int main(void) {
    find_builds();
    RUN(int8_products_are_exact_on_every_build);
    RUN(many_row_int8_products_give_the_defined_bits);
    RUN(panels_hold_each_weight_where_the_layout_says);
    RUN(many_row_float_products_match_a_double_reference);
    RUN(f32_panel_products_add_to_out_when_asked);
    RUN(decode_attention_products_on_either_cache_match_a_double_reference);
    RUN(input_rows_quantize_alike_on_every_build);
    RUN(bf16_rounding_gives_the_defined_bits_on_every_build);
    RUN(fp8_rows_read_back_as_their_e4m3_values);
    RUN(e4m3_codes_round_trip_and_saturate);
    CHECK_DONE();
}
