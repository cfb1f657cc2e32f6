// cpu/kernels_internal.h — what the builds of the row kernels share:
// kernels.c (portable C and the choice of build), kernels_avx2.c (AVX2, FMA,
// F16C) and kernels_avx512.c (AVX-512 VNNI, F/BW/VL/DQ, AVX512_BF16). The
// portable element and tail code the AVX2 build ends its rows with, and on
// x86-64 the AVX2 helpers, walks and blocking rules the AVX-512 build reuses.
// Each helper keeps its own target attribute; the static functions that not
// every file calls are marked unused. Included by those three files only.
#ifndef RL_CPU_KERNELS_INTERNAL_H
#define RL_CPU_KERNELS_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "dtype.h"
#include "model/cpu/bf16.h"
#include "model/cpu/kernels.h"

// Each vector build's table, NULL where the processor lacks it (or off x86-64).
const cpu_kernels *cpu_kernels_avx2(void);
const cpu_kernels *cpu_kernels_vnni(void);   // AVX-512 VNNI, with AVX512F/BW/VL/DQ and BF16 where present
const cpu_kernels *cpu_kernels_amx(void);    // the VNNI build with AMX tiles (amx.h)

// ---- Portable C: kernels.c's, and the AVX2 build's tails -------------------

static __attribute__((unused)) float elem(const void *w, const float *scales, int k, int group, rl_dtype dt) {
    switch (dt) {
    case DT_F32: return ((const float *)w)[k];
    case DT_BF16: return bf16_to_f32(((const uint16_t *)w)[k]);
    case DT_F16: return f16_to_f32(((const uint16_t *)w)[k]);
    case DT_I8: return (float)((const int8_t *)w)[k] * scales[k / group];
    case DT_FP8: return e4m3_to_f32(((const uint8_t *)w)[k]) * scales[k / group];
    }
    return 0;
}

// Element k of an int8 or fp8 row, its scale not applied
static inline float unscaled(const void *w, int k, rl_dtype dt) {
    return dt == DT_I8 ? (float)((const int8_t *)w)[k] : e4m3_to_f32(((const uint8_t *)w)[k]);
}

// Bytes of a KV cache's element: f32 or bf16 (inline, for the kernels' loops)
static inline size_t kv_size(rl_dtype dt) { return dt == DT_BF16 ? 2 : 4; }

// Row t of a KV cache's head: rows of dt ld elements apart
static inline const void *kv_row(const void *base, rl_dtype dt, size_t ld, int t) {
    return (const char *)base + (size_t)t * ld * kv_size(dt);
}

static __attribute__((unused)) void swiglu_backward_portable(float *dg, float *du, const float *d, const float *g,
                                                             const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float gi = g[i], di = d[i], ui = u[i], sig = 1.0f / (1.0f + expf(-gi));
        du[i] = di * gi * sig;
        dg[i] = di * ui * (sig * (1.0f + gi * (1.0f - sig)));
    }
}

// torch.lerp(a, b, w) as its vectorised CPU kernel computes it: one fused
// multiply-add, from whichever end is nearer for accuracy.
static inline float lerp_torch(float a, float b, float w) {
    return w < 0.5f ? fmaf(w, b - a, a) : fmaf(w - 1.0f, b - a, b);
}

// One parameter, in the order of torch's single-tensor AdamW: p.mul_(decay);
// m.lerp_(g, 1 − β1); v.mul_(β2).addcmul_(g, g, 1 − β2);
// denom = v.sqrt() / bc2_sqrt + eps; p.addcdiv_(m, denom, −step).
static inline void adamw_one(float *p, float g, float *m, float *v, const rl_adamw_f32 *h) {
    g *= h->gscale;
    float pd = *p * h->decay;
    *m = lerp_torch(*m, g, h->lerp_w);
    *v = *v * h->beta2 + h->one_minus_beta2 * g * g;
    float denom = sqrtf(*v) / h->bc2_sqrt + h->eps;
    *p = pd + h->neg_step * *m / denom;
}

// Not inlined: the AVX2 build's tail calls it as compiled for every x86-64,
// with no multiply-add fused (as in the portable build).
static __attribute__((unused, noinline)) void adamw_portable(float *p, const float *g, float *m, float *v, int n,
                                                             const rl_adamw_f32 *h) {
    for (int i = 0; i < n; i++) adamw_one(p + i, g[i], m + i, v + i, h);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

// Decoding one sequence reads every weight row once per token, from memory
// (or a shared L3) in one stream per thread; the row kernels ask for the
// bytes this far ahead of the ones they read (prefetcht0), which the
// hardware prefetcher alone does not keep up with. One-slot decoding of
// SmolLM2-135M on 2 threads of an Intel Xeon (AMX; bench/RESULTS.md): int8
// 101 to 110 -> 151 to 157 tokens/s, bf16 52 to 55 -> 74 to 80; f32, at
// the memory's speed already, unchanged. Prefetches past a matrix's end are harmless (a
// hint never faults).
enum { AHEAD_ROW = 2048, AHEAD_I8 = 4096 };

// 8 weights from element k on, as f32 (not int8: its scale is per group)
AVX2 static inline __attribute__((always_inline)) __m256 load8(const void *w, int k, rl_dtype dt) {
    switch (dt) {
    case DT_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case DT_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k)));
    case DT_I8: {
        __m128i b = _mm_loadl_epi64((const __m128i *)((const int8_t *)w + k));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    }
    case DT_FP8: {   // e4m3_to_f32's bits, 8 at a time
        __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)w + k)));
        __m256i mag = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7f)), 20);
        __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
        return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(mag, sign)), _mm256_set1_ps(0x1p120f));
    }
    case DT_F32: break;
    }
    return _mm256_loadu_ps((const float *)w + k);
}

// ---- Many-row products of f32 and bf16 weights (kernels.h gemm) -------------
// Every vector build works alike: NW weight rows at a time, read as stored
// and widened to f32 in registers, against the input rows NX at a time, with
// one accumulator per (input row, weight row) along K, summed across its lanes
// at the end; no copy of the weights is made. Input rows are taken GEMM_NB at
// a time (the weights read from memory once per such block: once in
// decoding), and K is cut into blocks so that the input rows' block (at most
// GEMM_XBLOCK bytes) stays in L2 while every weight row passes over it, the
// sums of later blocks added to out. On this project's 2-core AMD EPYC, one
// thread, N = 64 and 256, K = 768 and 2048 (bench/forward gemm): AVX-512 f32
// FMA 1.3 to 1.8 times cblas_sgemm's speed (4 x 6 tiles; 4 x 4 tiles and
// 256 KiB blocks 1.0 to 1.6), vdpbf16ps 2.7 to 3.3 times; AVX2 about sgemm's.
enum { GEMM_XBLOCK = 768 << 10, GEMM_NB = 256 };

// K per block for N input rows of elements of xsize bytes, the blocks as even
// as multiples of 64 allow.
static __attribute__((unused)) int gemm_kc(int N, int K, int xsize) {
    long most = GEMM_XBLOCK / ((long)N * xsize);
    most = most < 256 ? 256 : most & ~63L;
    long nb = (K + most - 1) / most, kc = ((K + nb - 1) / nb + 63) & ~63L;
    return kc < K ? (int)kc : K;
}

// The walk of every build over the tiles of out (N, M): x's rows X + n·ldk,
// w's rows w + m·ldw, NW weight rows by NX input rows a tile, the last
// weight rows one at a time, for a tile call TILE(out, x rows, w rows, NX,
// NW) that each user defines (with M, w, ldw, ldo and ldk in scope).
#define GEMM_WALK(NXT, NWT, X, OUT, NR)                                                             \
    for (int m0 = 0; m0 < M; m0 += (NWT)) {                                                         \
        const char *wm = w + (size_t)m0 * ldw;                                                      \
        float *om = (OUT) + m0;                                                                     \
        if (M - m0 < (NWT)) {   /* the last weight rows one at a time */                            \
            for (int i = 0; i < M - m0; i++) {                                                      \
                int n = 0;                                                                          \
                for (; n + (NXT) <= (NR); n += (NXT))                                               \
                    TILE(om + n * ldo + i, X + n * ldk, wm + i * ldw, NXT, 1);                      \
                for (; n < (NR); n++) TILE(om + n * ldo + i, X + n * ldk, wm + i * ldw, 1, 1);      \
            }                                                                                       \
            break;                                                                                  \
        }                                                                                           \
        int n = 0;                                                                                  \
        for (; n + (NXT) <= (NR); n += (NXT)) TILE(om + n * ldo, X + n * ldk, wm, NXT, NWT);        \
        for (; n < (NR); n++) TILE(om + n * ldo, X + n * ldk, wm, 1, NWT);                          \
    }

// Rows of a key/value head fetched ahead of their use: a head's rows are
// short runs at the cache's row stride, which the hardware's prefetchers
// pick up too late (measured: 64-slot bf16 decoding 10% faster with them).
#define KV_AHEAD 16

AVX2 static inline void kv_fetch(const void *row, int HS, rl_dtype dt) {
    for (size_t b = 0; b < (size_t)HS * kv_size(dt); b += 64) _mm_prefetch((const char *)row + b, _MM_HINT_T0);
}

// The scores s[0 .. nt) of one query head q, summed over the elements
// before d, finished over the rest (fmaf, so that no compiler's choice to
// fuse or not tells an f32 cache from a bf16 one) and stored scaled into S.
static inline void scores_store(float *S, float *s, const float *q, const void *const k[4], rl_dtype dt, int d,
                                int HS, float scale, int nt) {
    for (int j = 0; j < nt; j++) {
        for (int e = d; e < HS; e++) s[j] = fmaf(q[e], elem(k[j], NULL, e, 0, dt), s[j]);
        S[j] = s[j] * scale;
    }
}

// The columns [d0, HS) of the mix one by one (fmaf, in the vector builds' order)
static __attribute__((unused)) void mix_columns(float *og, const float *Pg, int T, int gn, const void *V, rl_dtype dt,
                                                size_t ld, int HS, int d0) {
    for (; d0 < HS; d0++)
        for (int g = 0; g < gn; g++) {
            float s = 0;
            for (int t = 0; t < T; t++) s = fmaf(Pg[(size_t)g * T + t], elem(kv_row(V, dt, ld, t), NULL, d0, 0, dt), s);
            og[(size_t)g * HS + d0] = s;
        }
}

// Keys 4 at a time for up to 3 query heads at a time, each block by SCORES4
// (a build's scores4_*) on keys of DT: the keys are read from memory once
// for G ≤ 3 (SmolLM2, Qwen3's smaller models), from cache after.
#define KV_SCORES_WALK(SCORES4, DT)                                                    \
    for (int g0 = 0; g0 < G; g0 += 3) {                                                \
        int gn = G - g0 < 3 ? G - g0 : 3;                                              \
        for (int t0 = 0; t0 < T; t0 += 4) {                                            \
            int nt = T - t0 < 4 ? T - t0 : 4;                                          \
            const void *k[4];                                                          \
            for (int j = 0; j < 4; j++) k[j] = kv_row(K, DT, ld, t0 + (j < nt ? j : nt - 1)); \
            for (int j = 0; g0 == 0 && j < 4 && t0 + KV_AHEAD + j < T; j++)            \
                kv_fetch(kv_row(K, DT, ld, t0 + KV_AHEAD + j), HS, DT);                \
            float *s = S + (size_t)g0 * T + t0;                                        \
            const float *qg = q + (size_t)g0 * HS;                                     \
            if (gn == 3) SCORES4(s, T, qg, 3, k, DT, HS, scale, nt);                   \
            else if (gn == 2) SCORES4(s, T, qg, 2, k, DT, HS, scale, nt);              \
            else SCORES4(s, T, qg, 1, k, DT, HS, scale, nt);                           \
        }                                                                              \
    }

// o (gn, 8·w columns from d0) = P (gn, T) · V's columns, for gn (1 to 3)
// query heads and w (1 or 4) vectors of 8: up to 12 accumulators, each value
// row's vectors loaded (a bf16 one widened) once for the gn heads; P's and
// o's rows T and HS apart.
AVX2 static inline __attribute__((always_inline)) void mix_avx2(float *o, const float *P, int T, int gn, const void *V,
                                                               rl_dtype dt, size_t ld, int HS, int d0, int w) {
    __m256 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < 4; i++) acc[g][i] = _mm256_setzero_ps();
    for (int t = 0; t < T; t++) {
        const void *v = kv_row(V, dt, ld, t);
        if (d0 == 0 && t + KV_AHEAD < T) kv_fetch(kv_row(V, dt, ld, t + KV_AHEAD), HS, dt);
        __m256 p[3];
        for (int g = 0; g < gn; g++) p[g] = _mm256_broadcast_ss(P + (size_t)g * T + t);
        for (int i = 0; i < w; i++) {
            __m256 x = load8(v, d0 + 8 * i, dt);
            for (int g = 0; g < gn; g++) acc[g][i] = _mm256_fmadd_ps(p[g], x, acc[g][i]);
        }
    }
    for (int g = 0; g < gn; g++)
        for (int i = 0; i < w; i++) _mm256_storeu_ps(o + (size_t)g * HS + d0 + 8 * i, acc[g][i]);
}

#define KV_MIX(W, DT)                                                          \
    switch (gn) {                                                              \
    case 1: mix_avx2(og, Pg, T, 1, V, DT, ld, HS, d0, W); break;              \
    case 2: mix_avx2(og, Pg, T, 2, V, DT, ld, HS, d0, W); break;              \
    default: mix_avx2(og, Pg, T, 3, V, DT, ld, HS, d0, W); break;             \
    }

// The blocks of a product from panels: rows of inputs *nb at a time (at most
// 192), and S steps along the inputs (f32: one input, bf16: a pair; 4 bytes
// of each input row either way) *sc at a time, so that a block of inputs
// (nb × sc × 4 bytes, up to 192 KiB) stays in L2 while every panel's part of
// the step block (sc × 64 bytes) passes by it. Prefill's thousands of rows
// so read the weights from L3 once per 192 rows, not once per few.
static __attribute__((unused)) void panel_blocks(int N, int S, int *nb, int *sc) {
    *nb = N < 192 ? N : 192;
    int most = (int)((192 << 10) / ((size_t)*nb * 4)) & ~15;
    most = most < 64 ? 64 : most;
    *sc = S < most ? S : most;
}

// Panels of f32 or bf16 weights (pack.h) with AVX2: the AVX-512 build's for
// bf16 without AVX512_BF16.
AVX2 void gemm_panels_avx2(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                           const void *panels, int M, int K, int add);
#endif

#endif
