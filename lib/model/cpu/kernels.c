// cpu/kernels.c — row kernels of the CPU backend (see kernels.h): a portable
// version, one for x86-64 processors with AVX2, FMA and F16C, int8 products
// with AVX-512 VNNI, and bf16 panels and many-row int8 products on AMX tiles
// (amx.c). Their functions carry their own target attribute so that the
// rest of the build stays portable. Floating-point kernels accumulate in
// f32, int8 products exactly in int32.
#include "model/cpu/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "model/cpu/amx.h"
#include "model/cpu/bf16.h"
#include "model/cpu/pack.h"
#include "util.h"

// ---- Portable C -------------------------------------------------------------

static float elem(const void *w, const float *scales, int k, int group, rl_dtype dt) {
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

static float dot_portable(const float *x, const void *w, const float *scales, int K, int group,
                         rl_dtype dt) {
    float s = 0;
    if (dt == DT_I8 || dt == DT_FP8) {   // each group's sum times its scale
        for (int g = 0, k0 = 0; k0 < K; g++, k0 += group) {
            int k1 = k0 + group < K ? k0 + group : K;
            float gs = 0;
            for (int k = k0; k < k1; k++) gs += x[k] * unscaled(w, k, dt);
            s += gs * scales[g];
        }
        return s;
    }
    if (dt == DT_F32) {
        const float *wf = w;
        for (int k = 0; k < K; k++) s += x[k] * wf[k];
        return s;
    }
    for (int k = 0; k < K; k++) s += x[k] * elem(w, scales, k, group, dt);
    return s;
}

static void row_to_f32_portable(float *out, const void *w, const float *scales, int K, int group,
                                rl_dtype dt) {
    if (dt == DT_F32) {
        memcpy(out, w, (size_t)K * sizeof(float));
        return;
    }
    for (int k = 0; k < K; k++) out[k] = elem(w, scales, k, group, dt);
}

static float sum_exp_portable(const float *x, int n, float max, float scale) {
    float s = 0;
    for (int i = 0; i < n; i++) s += expf((x[i] - max) * scale);
    return s;
}

static void swiglu_portable(float *out, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static float exp_row_portable(float *out, const float *x, int n, float sub, float scale) {
    float s = 0;
    for (int i = 0; i < n; i++) {
        out[i] = expf((x[i] - sub) * scale);
        s += out[i];
    }
    return s;
}

static void swiglu_backward_portable(float *dg, float *du, const float *d, const float *g, const float *u, int n) {
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

static void adamw_portable(float *p, const float *g, float *m, float *v, int n, const rl_adamw_f32 *h) {
    for (int i = 0; i < n; i++) adamw_one(p + i, g[i], m + i, v + i, h);
}

static void round_bf16_portable(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

static float quant_i8_portable(int8_t *q, const float *x, int K) {
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k]));
    float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0;
    for (int k = 0; k < K; k++) {
        long v = lrintf(x[k] * inv);
        q[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return s;
}

static float quant_fp8_portable(float *q, const float *x, int K) {
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k]));
    float s = amax / 448.0f, inv = s > 0 ? 1.0f / s : 0;
    for (int k = 0; k < K; k++) q[k] = e4m3_to_f32(f32_to_e4m3(x[k] * inv));
    return s;
}

static void dots_i8_portable(int32_t *out, const int8_t *x, size_t ldx, int nx, const int8_t *w, size_t ldw, int nw,
                             int K) {
    for (int j = 0; j < nx; j++)
        for (int i = 0; i < nw; i++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++) s += (int32_t)x[j * ldx + k] * w[i * ldw + k];
            out[j * nw + i] = s;
        }
}

static void kv_scores_portable(float *S, const float *q, int G, const uint16_t *K, size_t ld, int T, int HS,
                               float scale) {
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++) {
            float s = 0;
            for (int d = 0; d < HS; d++) s += q[(size_t)g * HS + d] * bf16_to_f32(K[(size_t)t * ld + d]);
            S[(size_t)g * T + t] = s * scale;
        }
}

static void kv_mix_portable(float *o, const float *P, int G, int T, const uint16_t *V, size_t ld, int HS) {
    for (size_t i = 0; i < (size_t)G * HS; i++) o[i] = 0;
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++)
            for (int d = 0; d < HS; d++)
                o[(size_t)g * HS + d] += P[(size_t)g * T + t] * bf16_to_f32(V[(size_t)t * ld + d]);
}

static const cpu_kernels *cpu_kernels_portable(void) {
    static const cpu_kernels k = {.name = "portable",
                                  .dot = dot_portable,
                                  .row_to_f32 = row_to_f32_portable,
                                  .sum_exp = sum_exp_portable,
                                  .swiglu = swiglu_portable,
                                  .exp_row = exp_row_portable,
                                  .swiglu_backward = swiglu_backward_portable,
                                  .adamw = adamw_portable,
                                  .round_bf16 = round_bf16_portable,
                                  .quant_i8 = quant_i8_portable,
                                  .quant_fp8 = quant_fp8_portable,
                                  .dots_i8 = dots_i8_portable,
                                  .kv_scores = kv_scores_portable,
                                  .kv_mix = kv_mix_portable};
    return &k;
}

// ---- x86-64 with AVX2 + FMA + F16C ------------------------------------------

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

AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

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

// Σ x[k] w[k] over [k0, k1) of one f32, bf16 or f16 row; four accumulators
// keep the FMA pipeline full.
AVX2 static inline __attribute__((always_inline)) float dot_run(const float *x, const void *w, int k0, int k1,
                                                               rl_dtype dt) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int size = dt == DT_F32 ? 4 : 2;   // bytes of an element: 32 of them are 1 or 2 cache lines
    int k = k0;
    for (; k + 32 <= k1; k += 32) {
        const char *ahead = (const char *)w + (size_t)k * size + AHEAD_ROW;
        _mm_prefetch(ahead, _MM_HINT_T0);
        if (size == 4) _mm_prefetch(ahead + 64, _MM_HINT_T0);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), load8(w, k, dt), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), load8(w, k + 8, dt), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 16), load8(w, k + 16, dt), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 24), load8(w, k + 24, dt), a3);
    }
    for (; k + 8 <= k1; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), load8(w, k, dt), a0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; k < k1; k++) s += x[k] * elem(w, NULL, k, 1, dt);
    return s;
}

// int8 or fp8 (dt): the sum of each group is scaled into a vector
// accumulator, so no horizontal sum is paid per group; two groups at a time,
// on independent chains, keep the FMA units busy (group sizes are multiples
// of 16; fp8's group is the row).
AVX2 static inline __attribute__((always_inline)) float dot_grouped(const float *x, const void *wv,
                                                                   const float *scales, int K, int group,
                                                                   rl_dtype dt) {
    const char *w = wv;   // one byte per element
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float tail = 0;
    int g = 0, k0 = 0;
    for (; group % 16 == 0 && k0 + 2 * group <= K; g += 2, k0 += 2 * group) {
        const float *xa = x + k0, *xb = x + k0 + group;
        const char *wa = w + k0, *wb = w + k0 + group;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
        for (int i = 0; i < group; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xa + i), load8(wa, i, dt), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xa + i + 8), load8(wa, i + 8, dt), a1);
            b0 = _mm256_fmadd_ps(_mm256_loadu_ps(xb + i), load8(wb, i, dt), b0);
            b1 = _mm256_fmadd_ps(_mm256_loadu_ps(xb + i + 8), load8(wb, i + 8, dt), b1);
        }
        acc0 = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(scales[g]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_add_ps(b0, b1), _mm256_set1_ps(scales[g + 1]), acc1);
    }
    for (; k0 < K; g++, k0 += group) {   // the last groups, the last one maybe short
        int k1 = k0 + group < K ? k0 + group : K, k = k0;
        __m256 s0 = _mm256_setzero_ps();
        float t = 0;
        for (; k + 8 <= k1; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), load8(w, k, dt), s0);
        acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(scales[g]), acc0);
        for (; k < k1; k++) t += x[k] * unscaled(w, k, dt);
        tail += t * scales[g];
    }
    return hsum8(_mm256_add_ps(acc0, acc1)) + tail;
}

AVX2 static float dot_avx2(const float *x, const void *w, const float *scales, int K, int group,
                           rl_dtype dt) {
    switch (dt) {   // each case compiles its own loop, with no switch inside
    case DT_F32: return dot_run(x, w, 0, K, DT_F32);
    case DT_BF16: return dot_run(x, w, 0, K, DT_BF16);
    case DT_F16: return dot_run(x, w, 0, K, DT_F16);
    case DT_I8: return dot_grouped(x, w, scales, K, group, DT_I8);
    case DT_FP8: break;
    }
    return dot_grouped(x, w, scales, K, group, DT_FP8);
}

AVX2 static void row_to_f32_avx2(float *out, const void *w, const float *scales, int K, int group,
                                 rl_dtype dt) {
    if (dt == DT_I8 || dt == DT_FP8) {
        for (int g = 0, k0 = 0; k0 < K; g++, k0 += group) {
            int k1 = k0 + group < K ? k0 + group : K, k = k0;
            __m256 s = _mm256_set1_ps(scales[g]);
            if (dt == DT_I8)
                for (; k + 8 <= k1; k += 8) _mm256_storeu_ps(out + k, _mm256_mul_ps(load8(w, k, DT_I8), s));
            else
                for (; k + 8 <= k1; k += 8) _mm256_storeu_ps(out + k, _mm256_mul_ps(load8(w, k, DT_FP8), s));
            for (; k < k1; k++) out[k] = unscaled(w, k, dt) * scales[g];
        }
        return;
    }
    int k = 0;
    for (; k + 8 <= K; k += 8) _mm256_storeu_ps(out + k, load8(w, k, dt));
    for (; k < K; k++) out[k] = elem(w, scales, k, group, dt);
}

// exp(x) for x in [-87, 88]: x = n ln2 + r with |r| <= ln2/2, e^r by its
// Taylor series to r^7 (relative error below 1e-8 on that range), times 2^n.
AVX2 static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // ln2 split in a part exact in few bits and the rest, so n·hi is exact
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 static float sum_exp_avx2(const float *x, int n, float max, float scale) {
    __m256 acc = _mm256_setzero_ps(), m = _mm256_set1_ps(max), s = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_add_ps(acc, exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), s)));
    float t = hsum8(acc);
    for (; i < n; i++) t += expf((x[i] - max) * scale);
    return t;
}

AVX2 static void swiglu_avx2(float *out, const float *g, const float *u, int n) {
    int i = 0;
    __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(gv, sig), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

AVX2 static float exp_row_avx2(float *out, const float *x, int n, float sub, float scale) {
    __m256 acc = _mm256_setzero_ps(), m = _mm256_set1_ps(sub), s = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), s));
        _mm256_storeu_ps(out + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float t = hsum8(acc);
    for (; i < n; i++) {
        out[i] = expf((x[i] - sub) * scale);
        t += out[i];
    }
    return t;
}

AVX2 static void swiglu_backward_avx2(float *dg, float *du, const float *d, const float *g, const float *u,
                                      int n) {
    int i = 0;
    __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), dv = _mm256_loadu_ps(d + i), uv = _mm256_loadu_ps(u + i);
        __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
        __m256 dsilu = _mm256_mul_ps(sig, _mm256_add_ps(one, _mm256_mul_ps(gv, _mm256_sub_ps(one, sig))));
        _mm256_storeu_ps(du + i, _mm256_mul_ps(_mm256_mul_ps(dv, gv), sig));
        _mm256_storeu_ps(dg + i, _mm256_mul_ps(_mm256_mul_ps(dv, uv), dsilu));
    }
    swiglu_backward_portable(dg + i, du + i, d + i, g + i, u + i, n - i);
}

AVX2 static void adamw_avx2(float *p, const float *g, float *m, float *v, int n, const rl_adamw_f32 *h) {
    __m256 gs = _mm256_set1_ps(h->gscale), decay = _mm256_set1_ps(h->decay), b2 = _mm256_set1_ps(h->beta2),
           c2 = _mm256_set1_ps(h->one_minus_beta2), bc2 = _mm256_set1_ps(h->bc2_sqrt),
           eps = _mm256_set1_ps(h->eps), step = _mm256_set1_ps(h->neg_step);
    int near_m = h->lerp_w < 0.5f;   // lerp_torch's choice of end
    __m256 w = _mm256_set1_ps(near_m ? h->lerp_w : h->lerp_w - 1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_mul_ps(_mm256_loadu_ps(g + i), gs);
        __m256 pv = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
        __m256 mv = _mm256_loadu_ps(m + i), diff = _mm256_sub_ps(gv, mv);
        mv = _mm256_fmadd_ps(w, diff, near_m ? mv : gv);
        __m256 vv = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2), _mm256_mul_ps(_mm256_mul_ps(c2, gv), gv));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bc2), eps);
        pv = _mm256_add_ps(pv, _mm256_div_ps(_mm256_mul_ps(step, mv), denom));
        _mm256_storeu_ps(m + i, mv);
        _mm256_storeu_ps(v + i, vv);
        _mm256_storeu_ps(p + i, pv);
    }
    adamw_portable(p + i, g + i, m + i, v + i, n - i, h);
}

AVX2 static inline float absmax_avx2(const float *x, int K) {
    __m256 m = _mm256_setzero_ps(), nosign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int k = 0;
    for (; k + 8 <= K; k += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + k), nosign));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float a = _mm_cvtss_f32(h);
    for (; k < K; k++) a = fmaxf(a, fabsf(x[k]));
    return a;
}

// As f32_to_bf16 in integers, 8 lanes at a time: u + 0x7fff + (bit 16 of
// u), its high half kept; NaN (|u| above infinity's bits) u | 0x400000.
AVX2 static void round_bf16_avx2(float *x, int n) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), abs = _mm256_set1_epi32(0x7fffffff),
                  inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x400000),
                  high = _mm256_set1_epi32((int)0xffff0000u);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(_mm256_srli_epi32(u, 16), one));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);   // both below 2^31: signed is unsigned
        r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
        _mm256_storeu_si256((__m256i *)(x + i), _mm256_and_si256(r, high));
    }
    for (; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

// As quant_i8_portable: x · (1/s) rounded by cvtps (the default mode: nearest
// even, as lrintf), packed with saturation (|x · (1/s)| <= 127 already).
AVX2 static float quant_i8_avx2(int8_t *q, const float *x, int K) {
    float s = absmax_avx2(x, K) / 127.0f, inv = s > 0 ? 1.0f / s : 0;
    __m256 iv = _mm256_set1_ps(inv);
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), iv));
        __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8), iv));
        __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);   // 16 int16 in order
        __m128i p = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storeu_si128((__m128i *)(q + k), p);
    }
    for (; k < K; k++) {
        long v = lrintf(x[k] * inv);
        q[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return s;
}

// x rounded to the nearest e4m3 value (nearest even), saturated to ±448, as f32
AVX2 static inline __m256 e4m3_round8(__m256 x) {
    __m256 signbit = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 a = _mm256_min_ps(_mm256_andnot_ps(signbit, x), _mm256_set1_ps(448.0f));
    __m256i u = _mm256_castps_si256(a);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7ffff)), odd);
    __m256 normal = _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xfff00000u)));
    __m256 sub = _mm256_mul_ps(_mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                               _mm256_set1_ps(1.0f / 512));
    __m256 v = _mm256_blendv_ps(normal, sub, _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ));
    return _mm256_or_ps(v, _mm256_and_ps(x, signbit));
}

AVX2 static float quant_fp8_avx2(float *q, const float *x, int K) {
    float s = absmax_avx2(x, K) / 448.0f, inv = s > 0 ? 1.0f / s : 0;
    __m256 iv = _mm256_set1_ps(inv);
    int k = 0;
    for (; k + 8 <= K; k += 8) _mm256_storeu_ps(q + k, e4m3_round8(_mm256_mul_ps(_mm256_loadu_ps(x + k), iv)));
    for (; k < K; k++) q[k] = e4m3_to_f32(f32_to_e4m3(x[k] * inv));
    return s;
}

AVX2 static inline int32_t hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// AVX2 has no int8 product with int32 sums: vpmaddubsw multiplies unsigned
// by signed bytes into pairs summed in int16, so it is given |x| and w with
// x's sign (|x|, |w| <= 127: a pair sums to at most 32258, no saturation),
// and vpmaddwd by ones widens the pairs to int32. One weight row against up
// to 4 input rows at a time (the weights are read once per tile).
AVX2 static void dots_i8_avx2(int32_t *out, const int8_t *x, size_t ldx, int nx, const int8_t *w, size_t ldw,
                              int nw, int K) {
    const __m256i ones = _mm256_set1_epi16(1);
    int K32 = K & ~31;
    for (int i = 0; i < nw; i++) {
        const int8_t *wi = w + i * ldw;
        __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                          _mm256_setzero_si256()};
        for (int k = 0; k < K32; k += 32) {
            _mm_prefetch((const char *)(wi + k) + AHEAD_I8, _MM_HINT_T0);
            __m256i wv = _mm256_loadu_si256((const __m256i *)(wi + k));
            for (int j = 0; j < nx; j++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(x + j * ldx + k));
                __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
                acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(p, ones));
            }
        }
        for (int j = 0; j < nx; j++) {
            int32_t t = hsum8i(acc[j]);
            for (int k = K32; k < K; k++) t += (int32_t)x[j * ldx + k] * wi[k];
            out[j * nw + i] = t;
        }
    }
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
static int gemm_kc(int N, int K, int xsize) {
    long most = GEMM_XBLOCK / ((long)N * xsize);
    most = most < 256 ? 256 : most & ~63L;
    long nb = (K + most - 1) / most, kc = ((K + nb - 1) / nb + 63) & ~63L;
    return kc < K ? (int)kc : K;
}

enum { G2_NX = 4, G2_NW = 3 };   // 12 accumulators of the 16 ymm registers

// out[j·ldo + i] (+)= Σ_k<K x[j·ldx + k] w_i[k] for j < NX, i < NW, w_i at w + i·ldw bytes.
AVX2 static inline __attribute__((always_inline)) void gemm_tile_avx2(float *out, size_t ldo, const float *x,
                                                                     size_t ldx, const char *w, size_t ldw, int K,
                                                                     rl_dtype dt, int add, const int NX,
                                                                     const int NW) {
    __m256 acc[G2_NX][G2_NW];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int i = 0; i < NW; i++) acc[j][i] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[G2_NW];
#pragma GCC unroll 8
        for (int i = 0; i < NW; i++) wv[i] = load8(w + i * ldw, k, dt);
#pragma GCC unroll 8
        for (int j = 0; j < NX; j++) {
            __m256 xv = _mm256_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 8
            for (int i = 0; i < NW; i++) acc[j][i] = _mm256_fmadd_ps(xv, wv[i], acc[j][i]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int i = 0; i < NW; i++) {
            float s = hsum8(acc[j][i]);
            for (int t = k; t < K; t++) s += x[j * ldx + t] * elem(w + i * ldw, NULL, t, 1, dt);
            out[j * ldo + i] = add ? out[j * ldo + i] + s : s;
        }
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

// All N x M outputs over [k0, k0 + K) of the rows (dt: its instances compiled apart).
AVX2 static inline __attribute__((always_inline)) void gemm_block_avx2(float *out, size_t ldo, const float *x,
                                                                      int N, const char *w, int M, size_t ldk,
                                                                      int k0, int K, rl_dtype dt) {
    size_t ws = dt == DT_BF16 ? 2 : 4, ldw = ldk * ws;
    int add = k0 > 0;
    x += k0, w += (size_t)k0 * ws;
#define TILE(o, xr, wr, NX, NW) gemm_tile_avx2(o, ldo, xr, ldk, wr, ldw, K, dt, add, NX, NW)
    GEMM_WALK(G2_NX, G2_NW, x, out, N)
#undef TILE
}

AVX2 static void gemm_avx2(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt, int M, int K) {
    for (int n0 = 0; n0 < N; n0 += GEMM_NB) {
        int nb = N - n0 < GEMM_NB ? N - n0 : GEMM_NB, kc = gemm_kc(nb, K, 4);
        float *o = out + (size_t)n0 * ldo;
        const float *xn = x + (size_t)n0 * K;
        for (int k0 = 0; k0 < K; k0 += kc) {
            int len = K - k0 < kc ? K - k0 : kc;
            if (dt == DT_BF16) gemm_block_avx2(o, ldo, xn, nb, w, M, (size_t)K, k0, len, DT_BF16);
            else gemm_block_avx2(o, ldo, xn, nb, w, M, (size_t)K, k0, len, DT_F32);
        }
    }
}

// Rows of a key/value head fetched ahead of their use: a head's rows are
// short runs at the cache's row stride, which the hardware's prefetchers
// pick up too late (measured: 64-slot bf16 decoding 10% faster with them).
#define KV_AHEAD 16

AVX2 static inline void kv_fetch(const uint16_t *row, int HS) {
    for (int d = 0; d < HS; d += 32) _mm_prefetch((const char *)(row + d), _MM_HINT_T0);
}

// The scores s[0 .. nt) of one query head q, summed over the elements
// before d, finished over the rest and stored scaled into S.
static inline void scores_store(float *S, float *s, const float *q, const uint16_t *const k[4], int d, int HS,
                                float scale, int nt) {
    for (int j = 0; j < nt; j++) {
        for (int e = d; e < HS; e++) s[j] += q[e] * bf16_to_f32(k[j][e]);
        S[j] = s[j] * scale;
    }
}

// The columns [d0, HS) of the mix one by one (fmaf, in the vector builds' order)
static void mix_columns(float *og, const float *Pg, int T, int gn, const uint16_t *V, size_t ld, int HS, int d0) {
    for (; d0 < HS; d0++)
        for (int g = 0; g < gn; g++) {
            float s = 0;
            for (int t = 0; t < T; t++) s = fmaf(Pg[(size_t)g * T + t], bf16_to_f32(V[(size_t)t * ld + d0]), s);
            og[(size_t)g * HS + d0] = s;
        }
}

// Keys 4 at a time for up to 3 query heads at a time, each block by SCORES4
// (a build's scores4_*): the keys are read from memory once for G ≤ 3
// (SmolLM2, Qwen3's smaller models), from cache after.
#define KV_SCORES_WALK(SCORES4)                                                        \
    for (int g0 = 0; g0 < G; g0 += 3) {                                                \
        int gn = G - g0 < 3 ? G - g0 : 3;                                              \
        for (int t0 = 0; t0 < T; t0 += 4) {                                            \
            int nt = T - t0 < 4 ? T - t0 : 4;                                          \
            const uint16_t *k[4];                                                      \
            for (int j = 0; j < 4; j++) k[j] = K + (size_t)(t0 + (j < nt ? j : nt - 1)) * ld; \
            for (int j = 0; g0 == 0 && j < 4 && t0 + KV_AHEAD + j < T; j++)            \
                kv_fetch(K + (size_t)(t0 + KV_AHEAD + j) * ld, HS);                    \
            float *s = S + (size_t)g0 * T + t0;                                        \
            const float *qg = q + (size_t)g0 * HS;                                     \
            if (gn == 3) SCORES4(s, T, qg, 3, k, HS, scale, nt);                       \
            else if (gn == 2) SCORES4(s, T, qg, 2, k, HS, scale, nt);                  \
            else SCORES4(s, T, qg, 1, k, HS, scale, nt);                               \
        }                                                                              \
    }

// Scores of 4 keys k[0..3] (the last repeated where fewer than 4 are left:
// nt are stored) for gn (1 to 3) query heads at q: 12 accumulators of 8
// lanes, each key's 8 elements widened once for the gn heads; the 4 keys'
// lane sums are added by hadd, then the halves, then the elements past the
// last 8. S's rows are T apart.
AVX2 static inline __attribute__((always_inline)) void scores4_avx2(float *S, int T, const float *q, int gn,
                                                                   const uint16_t *const k[4], int HS, float scale,
                                                                   int nt) {
    __m256 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int j = 0; j < 4; j++) acc[g][j] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= HS; d += 8)
        for (int j = 0; j < 4; j++) {
            __m256 kv = load8(k[j], d, DT_BF16);
            for (int g = 0; g < gn; g++)
                acc[g][j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)g * HS + d), kv, acc[g][j]);
        }
    for (int g = 0; g < gn; g++) {
        __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[g][0], acc[g][1]), _mm256_hadd_ps(acc[g][2], acc[g][3]));
        float s[4];
        _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
        scores_store(S + (size_t)g * T, s, q + (size_t)g * HS, k, d, HS, scale, nt);
    }
}

AVX2 static void kv_scores_avx2(float *S, const float *q, int G, const uint16_t *K, size_t ld, int T, int HS,
                                float scale) {
    KV_SCORES_WALK(scores4_avx2)
}

// o (gn, 8·w columns from d0) = P (gn, T) · V's columns, for gn (1 to 3)
// query heads and w (1 or 4) vectors of 8: up to 12 accumulators, each value
// row's vectors widened once for the gn heads; P's and o's rows T and HS apart.
AVX2 static inline __attribute__((always_inline)) void mix_avx2(float *o, const float *P, int T, int gn,
                                                               const uint16_t *V, size_t ld, int HS, int d0, int w) {
    __m256 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < 4; i++) acc[g][i] = _mm256_setzero_ps();
    for (int t = 0; t < T; t++) {
        const uint16_t *v = V + (size_t)t * ld;
        if (d0 == 0 && t + KV_AHEAD < T) kv_fetch(v + KV_AHEAD * ld, HS);
        __m256 p[3];
        for (int g = 0; g < gn; g++) p[g] = _mm256_broadcast_ss(P + (size_t)g * T + t);
        for (int i = 0; i < w; i++) {
            __m256 x = load8(v, d0 + 8 * i, DT_BF16);
            for (int g = 0; g < gn; g++) acc[g][i] = _mm256_fmadd_ps(p[g], x, acc[g][i]);
        }
    }
    for (int g = 0; g < gn; g++)
        for (int i = 0; i < w; i++) _mm256_storeu_ps(o + (size_t)g * HS + d0 + 8 * i, acc[g][i]);
}

#define KV_MIX(W)                                                              \
    switch (gn) {                                                              \
    case 1: mix_avx2(og, Pg, T, 1, V, ld, HS, d0, W); break;                  \
    case 2: mix_avx2(og, Pg, T, 2, V, ld, HS, d0, W); break;                  \
    default: mix_avx2(og, Pg, T, 3, V, ld, HS, d0, W); break;                 \
    }

// Columns 32 at a time, then 8, then one by one (fmaf, in the same order).
AVX2 static void kv_mix_avx2(float *o, const float *P, int G, int T, const uint16_t *V, size_t ld, int HS) {
    for (int g0 = 0; g0 < G; g0 += 3) {
        int gn = G - g0 < 3 ? G - g0 : 3, d0 = 0;
        float *og = o + (size_t)g0 * HS;
        const float *Pg = P + (size_t)g0 * T;
        for (; d0 + 32 <= HS; d0 += 32) KV_MIX(4)
        for (; d0 + 8 <= HS; d0 += 8) KV_MIX(1)
        mix_columns(og, Pg, T, gn, V, ld, HS, d0);
    }
}

// The blocks of a product from panels: rows of inputs *nb at a time (at most
// 192), and S steps along the inputs (f32: one input, bf16: a pair; 4 bytes
// of each input row either way) *sc at a time, so that a block of inputs
// (nb × sc × 4 bytes, up to 192 KiB) stays in L2 while every panel's part of
// the step block (sc × 64 bytes) passes by it. Prefill's thousands of rows
// so read the weights from L3 once per 192 rows, not once per few.
static void panel_blocks(int N, int S, int *nb, int *sc) {
    *nb = N < 192 ? N : 192;
    int most = (int)((192 << 10) / ((size_t)*nb * 4)) & ~15;
    most = most < 64 ? 64 : most;
    *sc = S < most ? S : most;
}

// ---- Panels with AVX2: pack.h's 64 bytes a step read as two vectors ------

// A tile's accumulators (NX rows of 16 outputs, two vectors each) to
// out[j·ldo + i] for i < last, added to what is there when add.
AVX2 static inline __attribute__((always_inline)) void panel_store_avx2(float *out, size_t ldo, __m256 (*acc)[2],
                                                                       int last, int add, const int NX) {
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++) {
        float *o = out + j * ldo;
        if (last == PANEL_ROWS && add) {
            _mm256_storeu_ps(o, _mm256_add_ps(acc[j][0], _mm256_loadu_ps(o)));
            _mm256_storeu_ps(o + 8, _mm256_add_ps(acc[j][1], _mm256_loadu_ps(o + 8)));
        } else if (last == PANEL_ROWS) {
            _mm256_storeu_ps(o, acc[j][0]);
            _mm256_storeu_ps(o + 8, acc[j][1]);
        } else {   // a short last panel
            float v[PANEL_ROWS];
            _mm256_storeu_ps(v, acc[j][0]);
            _mm256_storeu_ps(v + 8, acc[j][1]);
            for (int i = 0; i < last; i++) o[i] = add ? o[i] + v[i] : v[i];
        }
    }
}

// Σ_k x[j][k] · P[k][i] over S steps for NX (1 to 6) f32 input rows x (row
// stride ldx) and one f32 panel P: its 16 weights of input k by x[j][k]
// broadcast, by FMA; 12 accumulators.
AVX2 static inline __attribute__((always_inline)) void panel_tile_f32_avx2(float *out, size_t ldo, const float *x,
                                                                          size_t ldx, const float *P, int S,
                                                                          int last, int add, const int NX) {
    __m256 acc[6][2];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int k = 0; k < S; k++) {
        __m256 w0 = _mm256_load_ps(P + (size_t)k * PANEL_ROWS), w1 = _mm256_load_ps(P + (size_t)k * PANEL_ROWS + 8);
#pragma GCC unroll 8
        for (int j = 0; j < NX; j++) {
            __m256 xv = _mm256_broadcast_ss(x + j * ldx + k);
            acc[j][0] = _mm256_fmadd_ps(xv, w0, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(xv, w1, acc[j][1]);
        }
    }
    panel_store_avx2(out, ldo, acc, last, add, NX);
}

// The same for one bf16 panel over S pairs of inputs, for NX (1 to 4) f32
// input rows (any values: the weights are widened, exactly, not the inputs):
// each 32 bytes of a step (8 outputs' pairs) give the pair's first weights
// (the low halves shifted up) and its second (the high halves), each by FMA
// with its input broadcast. half: the last pair is an odd K's last input alone.
AVX2 static inline __attribute__((always_inline)) void panel_tile_bf16_avx2(float *out, size_t ldo, const float *x,
                                                                           size_t ldx, const uint16_t *P, int S,
                                                                           int half, int last, int add,
                                                                           const int NX) {
    __m256 acc[6][2];
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int q = 0; q < S; q++) {
        __m256i a = _mm256_load_si256((const __m256i *)(P + (size_t)q * 32)),
                b = _mm256_load_si256((const __m256i *)(P + (size_t)q * 32 + 16));
        __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16)), o0 = _mm256_castsi256_ps(_mm256_and_si256(a, hi));
        __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)), o1 = _mm256_castsi256_ps(_mm256_and_si256(b, hi));
        int two = !(half && q == S - 1);
#pragma GCC unroll 8
        for (int j = 0; j < NX; j++) {
            __m256 xe = _mm256_broadcast_ss(x + j * ldx + 2 * (size_t)q);
            acc[j][0] = _mm256_fmadd_ps(xe, e0, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(xe, e1, acc[j][1]);
            if (two) {
                __m256 xo = _mm256_broadcast_ss(x + j * ldx + 2 * (size_t)q + 1);
                acc[j][0] = _mm256_fmadd_ps(xo, o0, acc[j][0]);
                acc[j][1] = _mm256_fmadd_ps(xo, o1, acc[j][1]);
            }
        }
    }
    panel_store_avx2(out, ldo, acc, last, add, NX);
}

// Input rows [0, nb) against one panel: MOST rows a tile, then the rest.
#define PANEL_ROWS_AVX2(TILE, MOST)                                  \
    do {                                                             \
        int j_ = 0;                                                  \
        for (; j_ + (MOST) <= nb; j_ += (MOST)) TILE(j_, MOST);      \
        switch (nb - j_) {                                           \
        case 5: TILE(j_, 5); break;                                  \
        case 4: TILE(j_, 4); break;                                  \
        case 3: TILE(j_, 3); break;                                  \
        case 2: TILE(j_, 2); break;                                  \
        case 1: TILE(j_, 1); break;                                  \
        }                                                            \
    } while (0)

// f32 or bf16 weights (dt) from panels: input rows in panel_blocks' blocks,
// each block against one panel at a time, the panel's step blocks in turn:
// the block's outputs for that panel stay in L1 from one step block to the
// next (measured: 4096-row products 1.15 to 1.28 times the order with the
// step blocks outside, which re-read every output row from memory).
AVX2 static void gemm_panels_avx2(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                                  const void *panels, int M, int K) {
    (void)w;
    int np = (M + PANEL_ROWS - 1) / PANEL_ROWS, S = dt == DT_BF16 ? (K + 1) / 2 : K, most, sc;
    size_t pb = panel_bytes(dt, K);
    panel_blocks(N, S, &most, &sc);
    for (int n0 = 0; n0 < N; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most;
        for (int p = 0; p < np; p++)
            for (int s0 = 0; s0 < S; s0 += sc) {
                int Sb = S - s0 < sc ? S - s0 : sc, add = s0 > 0, half = dt == DT_BF16 && (K & 1) && s0 + Sb == S;
                int last = (p + 1) * PANEL_ROWS <= M ? PANEL_ROWS : M - p * PANEL_ROWS;
                const char *P = (const char *)panels + (size_t)p * pb + (size_t)s0 * 64;
                float *o = out + (size_t)n0 * ldo + (size_t)p * PANEL_ROWS;
                if (dt == DT_BF16) {
                    const float *xs = x + (size_t)n0 * K + 2 * (size_t)s0;
#define TILE(j, NX) panel_tile_bf16_avx2(o + (j) * ldo, ldo, xs + (size_t)(j) * K, (size_t)K, \
                                         (const uint16_t *)P, Sb, half, last, add, NX)
                    PANEL_ROWS_AVX2(TILE, 4);
#undef TILE
                } else {
                    const float *xs = x + (size_t)n0 * K + s0;
#define TILE(j, NX) panel_tile_f32_avx2(o + (j) * ldo, ldo, xs + (size_t)(j) * K, (size_t)K, (const float *)P, \
                                        Sb, last, add, NX)
                    PANEL_ROWS_AVX2(TILE, 6);
#undef TILE
                }
            }
    }
}

// ---- AVX2 many-row int8 products (kernels.h gemm_i8) -----------------------
// As the VNNI build's, without vpdpbusd: weight rows are packed 8 at a time
// so that one vector holds 4 consecutive inputs of each of the 8 rows (K
// rounded up to 4, zeros after), and each input row's 4 bytes are broadcast.
// vpmaddubsw multiplies unsigned by signed bytes and adds them in pairs into
// int16, saturating: |x| (at most 127) against the weights given x's signs
// (vpsignb) keeps a pair within 2 · 127 · 127 = 32258, so none saturates, and
// vpmaddwd by ones adds the pairs into the 8 rows' int32 sums: exact, with no
// sums across lanes. A tile is 4 input rows by 2 packed blocks (16 weight
// rows): 8 accumulators. The part's rows are packed once per call; then the
// input rows are taken I8_NB at a time (their block stays in L2), the packed
// rows in groups of I8_GROUP bytes (in L2), and each tile's 4 input rows go
// over the whole group while they are in L1.
enum { I8_NX = 4, I8_NB = 192, I8_GROUP = 128 << 10 };

// out[j·ldo + i] = (float)(Σ_k x_j[k] w_i[k]) · sw[i] · sx[j] for the NX input
// rows of x (rows of K4 bytes) and the 16 weight rows packed in p0, p1; only
// the first `rows` outputs of each row are stored.
AVX2 static inline __attribute__((always_inline)) void i8_tile_avx2(float *out, size_t ldo, const int8_t *x, int K4,
                                                                   const int8_t *p0, const int8_t *p1,
                                                                   const float *sw, int rows, const float *sx,
                                                                   const int NX) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a0[I8_NX], a1[I8_NX];
#pragma GCC unroll 4
    for (int j = 0; j < NX; j++) a0[j] = a1[j] = _mm256_setzero_si256();
    for (int k = 0; k < K4; k += 4) {
        __m256i w0 = _mm256_load_si256((const __m256i *)(p0 + (size_t)k * 8));
        __m256i w1 = _mm256_load_si256((const __m256i *)(p1 + (size_t)k * 8));
#pragma GCC unroll 4
        for (int j = 0; j < NX; j++) {
            int32_t b;
            memcpy(&b, x + (size_t)j * K4 + k, 4);
            __m256i xb = _mm256_set1_epi32(b), xa = _mm256_abs_epi8(xb);
            __m256i q0 = _mm256_maddubs_epi16(xa, _mm256_sign_epi8(w0, xb));   // int16 pairs
            __m256i q1 = _mm256_maddubs_epi16(xa, _mm256_sign_epi8(w1, xb));
            a0[j] = _mm256_add_epi32(a0[j], _mm256_madd_epi16(q0, ones));
            a1[j] = _mm256_add_epi32(a1[j], _mm256_madd_epi16(q1, ones));
        }
    }
    __m256 s0 = _mm256_loadu_ps(sw), s1 = _mm256_loadu_ps(sw + 8);
#pragma GCC unroll 4
    for (int j = 0; j < NX; j++) {   // (Σ x w) · sw · sx: the exact int32 to f32, then the two scales
        __m256 sxj = _mm256_set1_ps(sx[j]);
        __m256 v0 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a0[j]), s0), sxj);
        __m256 v1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a1[j]), s1), sxj);
        float *o = out + (size_t)j * ldo;
        if (rows == 16) {
            _mm256_storeu_ps(o, v0);
            _mm256_storeu_ps(o + 8, v1);
        } else {
            float t[16];
            _mm256_storeu_ps(t, v0);
            _mm256_storeu_ps(t + 8, v1);
            memcpy(o, t, (size_t)rows * sizeof(float));
        }
    }
}

AVX2 static void gemm_i8_avx2(float *out, size_t ldo, const int8_t *x, const float *sx, int N, const int8_t *w,
                              const void *panels, const float *sw, int M, int K) {
    (void)panels;
    int K4 = (K + 3) & ~3, blocks = (M + 15) / 16;
    int8_t *xp = xmalloc((size_t)N * K4);                            // x, zeros after K
    int8_t *pk = aligned_alloc(32, (size_t)blocks * 16 * K4);        // 16 rows a block, 2 × 8 packed
    float *sws = xmalloc((size_t)blocks * 16 * sizeof(float));       // sw, zeros after M
    if (!pk) abort();
    for (int n = 0; n < N; n++) {
        memcpy(xp + (size_t)n * K4, x + (size_t)n * K, (size_t)K);
        memset(xp + (size_t)n * K4 + K, 0, (size_t)(K4 - K));
    }
    for (int b = 0; b < blocks; b++) {
        int m0 = 16 * b, rows = M - m0 < 16 ? M - m0 : 16, r0 = rows < 8 ? rows : 8;
        int8_t *p = pk + (size_t)b * 16 * K4;
        pack4_i8(p, w + (size_t)m0 * K, (size_t)K, r0, K, 8);
        pack4_i8(p + (size_t)K4 * 8, w + (size_t)(m0 + r0) * K, (size_t)K, rows - r0, K, 8);
        for (int i = 0; i < 16; i++) sws[m0 + i] = i < rows ? sw[m0 + i] : 0;
    }
    int group = (int)(I8_GROUP / ((size_t)16 * K4));   // packed blocks that stay in L2 together
    if (group < 1) group = 1;
    for (int nb = 0; nb < N; nb += I8_NB) {
        int ne = N - nb < I8_NB ? N : nb + I8_NB;
        for (int g0 = 0; g0 < blocks; g0 += group) {
            int g1 = blocks - g0 < group ? blocks : g0 + group;
            for (int n0 = nb; n0 < ne; n0 += I8_NX) {
                int nx = ne - n0 < I8_NX ? ne - n0 : I8_NX;
                for (int b = g0; b < g1; b++) {   // a tile's input rows stay in L1 over the group
                    int m0 = 16 * b, rows = M - m0 < 16 ? M - m0 : 16;
                    const int8_t *p0 = pk + (size_t)b * 16 * K4, *p1 = p0 + (size_t)K4 * 8;
                    float *o = out + (size_t)n0 * ldo + m0;
                    if (nx == I8_NX)
                        i8_tile_avx2(o, ldo, xp + (size_t)n0 * K4, K4, p0, p1, sws + m0, rows, sx + n0, I8_NX);
                    else
                        for (int j = 0; j < nx; j++)
                            i8_tile_avx2(o + (size_t)j * ldo, ldo, xp + (size_t)(n0 + j) * K4, K4, p0, p1, sws + m0,
                                         rows, sx + n0 + j, 1);
                }
            }
        }
    }
    free(xp);
    free(pk);
    free(sws);
}

static const cpu_kernels *cpu_kernels_avx2(void) {
    static const cpu_kernels k = {.name = "avx2",
                                  .dot = dot_avx2,
                                  .row_to_f32 = row_to_f32_avx2,
                                  .sum_exp = sum_exp_avx2,
                                  .swiglu = swiglu_avx2,
                                  .exp_row = exp_row_avx2,
                                  .swiglu_backward = swiglu_backward_avx2,
                                  .adamw = adamw_avx2,
                                  .round_bf16 = round_bf16_avx2,
                                  .quant_i8 = quant_i8_avx2,
                                  .quant_fp8 = quant_fp8_avx2,
                                  .dots_i8 = dots_i8_avx2,
                                  .gemm_i8 = gemm_i8_avx2,
                                  .gemm = gemm_avx2,
                                  .gemm_panels = gemm_panels_avx2,
                                  .panels_for = 1u << DT_F32 | 1u << DT_BF16,
                                  .kv_scores = kv_scores_avx2,
                                  .kv_mix = kv_mix_avx2};
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;
    // F16C has no __builtin_cpu_supports name in every GCC; AVX2 processors all have it.
    return &k;
}

// ---- x86-64 with AVX-512 VNNI: int8 products ----------------------------------

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// 64 bytes of a row from k on, the bytes at or past K zero. Only a row's
// last bytes are read under a mask: with a masked load for every vector, the
// one-slot int8 decode ran at about 2.5 times the time on this project's
// 2-core AMD EPYC.
VNNI static inline __m512i vnni_load(const int8_t *p, int k, int K) {
    if (K - k >= 64) return _mm512_loadu_si512(p + k);
    return _mm512_maskz_loadu_epi8(((__mmask64)1 << (K - k)) - 1, p + k);
}

// Lane i of the result: the sum of the 16 lanes of v[i] (pairs of vectors
// interleaved and added, then pairs of those, down to one vector).
VNNI static inline __m512i sum16_epi32(const __m512i v[16]) {
    __m512i a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)   // each 128 bits: v[2i], v[2i+1], v[2i], v[2i+1]
        a[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++)   // each 128 bits: v[4i] .. v[4i+3]
        b[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * i], a[2 * i + 1]),
                                _mm512_unpackhi_epi64(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 2; i++)   // 128-bit lanes: v[8i .. 8i+3] twice, v[8i+4 .. 8i+7] twice
        c[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2 * i], b[2 * i + 1], 0x88),
                                _mm512_shuffle_i32x4(b[2 * i], b[2 * i + 1], 0xdd));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(c[0], c[1], 0x88), _mm512_shuffle_i32x4(c[0], c[1], 0xdd));
}

// vpdpbusd multiplies unsigned by signed bytes, summing groups of 4 into
// int32 without saturation. The weights are made unsigned by adding 128 (w ^
// 0x80), and 128 · Σ x taken off after: Σ x (w + 128) − 128 Σ x = Σ x w, with
// Σ x from vpdpbusd of ones, once per input row and call. The weight rows
// are read one after the other (one stream), each against all NX input rows
// (which stay in L1), each (input row, weight row) summing in a vector of
// its own; R = 16 / NX weight rows make a block whose NX · R vectors are
// summed across their lanes together (sum16_epi32), not one by one. The
// loops over NX are unrolled in full so that the accumulators live in
// registers (gcc keeps arrays of vectors on the stack otherwise).
VNNI static inline __attribute__((always_inline)) void vnni_rows(int32_t *out, const int8_t *x, size_t ldx,
                                                                const int8_t *w, size_t ldw, int nw, int K,
                                                                const int NX) {
    const int R = 16 / NX;
    const __m512i flip = _mm512_set1_epi8((char)0x80), one = _mm512_set1_epi8(1);
    __m512i a[4], sums[16];
    int32_t c[16], t[16];   // c: 128 Σx of the input row of each lane
#pragma GCC unroll 4
    for (int j = 0; j < NX; j++) a[j] = _mm512_setzero_si512();
    for (int k = 0; k < K; k += 64) {
#pragma GCC unroll 4
        for (int j = 0; j < NX; j++) a[j] = _mm512_dpbusd_epi32(a[j], one, vnni_load(x + j * ldx, k, K));
    }
    for (int l = 0; l < 16; l++) c[l] = 0;
    for (int j = 0; j < NX; j++) {
        int32_t sx = _mm512_reduce_add_epi32(a[j]) * 128;
        for (int r = 0; r < R; r++) c[j * R + r] = sx;
    }
    const __m512i cv = _mm512_loadu_si512(c);
    for (int i0 = 0; i0 < nw; i0 += R) {
        int rows = nw - i0 < R ? nw - i0 : R;
        for (int l = 0; l < 16; l++) sums[l] = _mm512_setzero_si512();
        for (int r = 0; r < rows; r++) {
            const int8_t *wr = w + (size_t)(i0 + r) * ldw;
#pragma GCC unroll 4
            for (int j = 0; j < NX; j++) a[j] = _mm512_setzero_si512();
            for (int k = 0; k < K; k += 64) {
                _mm_prefetch((const char *)(wr + k) + AHEAD_I8, _MM_HINT_T0);
                __m512i wv = _mm512_xor_si512(vnni_load(wr, k, K), flip);
#pragma GCC unroll 4
                for (int j = 0; j < NX; j++) a[j] = _mm512_dpbusd_epi32(a[j], wv, vnni_load(x + j * ldx, k, K));
            }
#pragma GCC unroll 4
            for (int j = 0; j < NX; j++) sums[j * R + r] = a[j];
        }
        _mm512_storeu_si512(t, _mm512_sub_epi32(sum16_epi32(sums), cv));
        for (int j = 0; j < NX; j++)
            for (int r = 0; r < rows; r++) out[j * nw + i0 + r] = t[j * R + r];
    }
}

VNNI static void dots_i8_vnni(int32_t *out, const int8_t *x, size_t ldx, int nx, const int8_t *w, size_t ldw,
                              int nw, int K) {
    switch (nx) {
    case 1: vnni_rows(out, x, ldx, w, ldw, nw, K, 1); break;
    case 2: vnni_rows(out, x, ldx, w, ldw, nw, K, 2); break;
    case 3: vnni_rows(out, x, ldx, w, ldw, nw, K, 3); break;
    default: vnni_rows(out, x, ldx, w, ldw, nw, K, 4); break;
    }
}

// Many input rows: weight rows 16 at a time are packed so that one vector
// holds 4 consecutive inputs of each of the 16 rows (K rounded up to 4, zeros
// after); each input row's 4 bytes are broadcast and vpdpbusd adds to the 16
// rows' sums in the lanes, with no horizontal sums. 32 weight rows by 6
// input rows per tile: 12 accumulators, 2 weight loads and 6 broadcasts per
// 4 inputs. The packing reads the weights once per call, against N times as
// many products.
enum { GEMM_NX = 6 };

// Rows [0, rows) of w packed (the rest zero), 4 bytes at a time; rowsum (16)
// their sums, from vpdpbusd of ones over the packed vectors.
VNNI static void vnni_pack16(int8_t *p, int32_t *rowsum, const int8_t *w, size_t ldw, int rows, int K) {
    int K4 = (K + 3) & ~3;
    pack4_i8(p, w, ldw, rows, K, 16);
    __m512i s = _mm512_setzero_si512(), one = _mm512_set1_epi8(1);
    for (int k4 = 0; k4 < K4 / 4; k4++) s = _mm512_dpbusd_epi32(s, one, _mm512_load_si512(p + (size_t)k4 * 64));
    _mm512_storeu_si512(rowsum, s);
}

// The sums of NX input rows (x + 128, rows of K4 bytes) by the 32 packed rows
// of p0 and p1, less 128 · their row sums c0, c1, times sw (s0, s1) and sx,
// stored under the masks of the rows there are.
VNNI static inline __attribute__((always_inline)) void vnni_gemm_tile(float *out, size_t ldo, const uint8_t *xr,
                                                                     int K4, const int8_t *p0, const int8_t *p1,
                                                                     __m512i c0, __m512i c1, __m512 s0, __m512 s1,
                                                                     __mmask16 k0, __mmask16 k1, const float *sx,
                                                                     const int NX) {
    __m512i a0[GEMM_NX], a1[GEMM_NX];
    for (int j = 0; j < NX; j++) a0[j] = a1[j] = _mm512_setzero_si512();
    for (int k = 0; k < K4; k += 4) {
        __m512i w0 = _mm512_load_si512(p0 + (size_t)k * 16), w1 = _mm512_load_si512(p1 + (size_t)k * 16);
        for (int j = 0; j < NX; j++) {
            int32_t b;
            memcpy(&b, xr + (size_t)j * K4 + k, 4);
            __m512i xb = _mm512_set1_epi32(b);
            a0[j] = _mm512_dpbusd_epi32(a0[j], xb, w0);
            a1[j] = _mm512_dpbusd_epi32(a1[j], xb, w1);
        }
    }
    for (int j = 0; j < NX; j++) {   // (Σ x w) · sw · sx: the exact int32 to f32, then the two scales
        __m512 sxj = _mm512_set1_ps(sx[j]);
        __m512 v0 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a0[j], c0)), s0), sxj);
        __m512 v1 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a1[j], c1)), s1), sxj);
        _mm512_mask_storeu_ps(out + (size_t)j * ldo, k0, v0);
        _mm512_mask_storeu_ps(out + (size_t)j * ldo + 16, k1, v1);
    }
}

VNNI static void gemm_i8_vnni(float *out, size_t ldo, const int8_t *x, const float *sx, int N, const int8_t *w,
                              const void *panels, const float *sw, int M, int K) {
    (void)panels;
    int K4 = (K + 3) & ~3;
    uint8_t *xu = xmalloc((size_t)N * K4);          // x + 128, zeros (128) after K
    int8_t *pk = aligned_alloc(64, (size_t)K4 * 32); // two packed blocks of 16 rows
    if (!pk) abort();
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) xu[(size_t)n * K4 + k] = (uint8_t)(x[(size_t)n * K + k] ^ 0x80);
        for (int k = K; k < K4; k++) xu[(size_t)n * K4 + k] = 0x80;
    }
    int32_t rs[32];
    for (int m0 = 0; m0 < M; m0 += 32) {
        int rows = M - m0 < 32 ? M - m0 : 32, r0 = rows < 16 ? rows : 16;
        vnni_pack16(pk, rs, w + (size_t)m0 * K, (size_t)K, r0, K);
        vnni_pack16(pk + (size_t)K4 * 16, rs + 16, w + (size_t)(m0 + 16) * K, (size_t)K, rows - r0, K);
        __m512i c0 = _mm512_slli_epi32(_mm512_loadu_si512(rs), 7), c1 = _mm512_slli_epi32(_mm512_loadu_si512(rs + 16), 7);
        __mmask16 k0 = (__mmask16)((1u << r0) - 1), k1 = (__mmask16)((1u << (rows - r0)) - 1);
        __m512 s0 = _mm512_maskz_loadu_ps(k0, sw + m0), s1 = _mm512_maskz_loadu_ps(k1, sw + m0 + 16);
        const int8_t *p1 = pk + (size_t)K4 * 16;
        int n0 = 0;
        for (; n0 + GEMM_NX <= N; n0 += GEMM_NX)
            vnni_gemm_tile(out + (size_t)n0 * ldo + m0, ldo, xu + (size_t)n0 * K4, K4, pk, p1, c0, c1, s0, s1, k0, k1,
                           sx + n0, GEMM_NX);
        for (; n0 < N; n0++)
            vnni_gemm_tile(out + (size_t)n0 * ldo + m0, ldo, xu + (size_t)n0 * K4, K4, pk, p1, c0, c1, s0, s1, k0, k1,
                           sx + n0, 1);
    }
    free(xu);
    free(pk);
}

// ---- AVX-512 (and AVX512_BF16) many-row products of f32 and bf16 weights ----

#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define AVX512BF16 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

enum { G5_NX = 4, G5_NW = 6 };   // 24 accumulators of the 32 zmm registers

// 16 weights from element k on as f32; masked: only those under m (the rest zero).
AVX512 static inline __attribute__((always_inline)) __m512 load16(const char *w, int k, __mmask16 m, rl_dtype dt,
                                                                 const int masked) {
    if (dt == DT_BF16) {
        const uint16_t *p = (const uint16_t *)w + k;
        __m256i h = masked ? _mm256_maskz_loadu_epi16(m, p) : _mm256_loadu_si256((const __m256i *)p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return masked ? _mm512_maskz_loadu_ps(m, (const float *)w + k) : _mm512_loadu_ps((const float *)w + k);
}

// The lane sums of a, b, c, d in that order
AVX512 static inline __m128 hsum4x16(__m512 a, __m512 b, __m512 c, __m512 d) {
#define HALVES(v) _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1))
    __m256 ab = _mm256_hadd_ps(HALVES(a), HALVES(b)), cd = _mm256_hadd_ps(HALVES(c), HALVES(d));
#undef HALVES
    __m256 abcd = _mm256_hadd_ps(ab, cd);   // a0123 b0123 c0123 d0123 | a4567 ...
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// Row j of a tile's accumulators, summed, into out (+= when add)
AVX512 static inline __attribute__((always_inline)) void gemm_store512(float *out, const __m512 *acc, int add,
                                                                      const int NW) {
    int i = 0;
    for (; i + 4 <= NW; i += 4) {
        __m128 v = hsum4x16(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
        if (add) v = _mm_add_ps(v, _mm_loadu_ps(out + i));
        _mm_storeu_ps(out + i, v);
    }
    for (; i < NW; i++) {
        float s = _mm512_reduce_add_ps(acc[i]);
        out[i] = add ? out[i] + s : s;
    }
}

// One step of 16 along K of a tile of f32 input rows (gemm_tile_avx2's shape)
AVX512 static inline __attribute__((always_inline)) void gemm_step512(__m512 (*acc)[G5_NW], const float *x,
                                                                     size_t ldx, const char *w, size_t ldw, int k,
                                                                     __mmask16 m, rl_dtype dt, const int masked,
                                                                     const int NX, const int NW) {
    __m512 wv[G5_NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; i++) wv[i] = load16(w + i * ldw, k, m, dt, masked);
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++) {
        __m512 xv = masked ? _mm512_maskz_loadu_ps(m, x + j * ldx + k) : _mm512_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 8
        for (int i = 0; i < NW; i++) acc[j][i] = _mm512_fmadd_ps(xv, wv[i], acc[j][i]);
    }
}

AVX512 static inline __attribute__((always_inline)) void gemm_tile512(float *out, size_t ldo, const float *x,
                                                                     size_t ldx, const char *w, size_t ldw, int K,
                                                                     rl_dtype dt, int add, const int NX,
                                                                     const int NW) {
    __m512 acc[G5_NX][G5_NW];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int i = 0; i < NW; i++) acc[j][i] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) gemm_step512(acc, x, ldx, w, ldw, k, 0, dt, 0, NX, NW);
    if (k < K) gemm_step512(acc, x, ldx, w, ldw, k, (__mmask16)((1u << (K - k)) - 1), dt, 1, NX, NW);
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++) gemm_store512(out + j * ldo, acc[j], add, NW);
}

// bf16 input rows xb (exact copies of x) by bf16 weight rows, 32 products a
// vdpbf16ps, K's last pairs under a mask.
AVX512BF16 static inline __attribute__((always_inline)) void gemm_step_dp(__m512 (*acc)[G5_NW], const uint16_t *xb,
                                                                         size_t ldx, const char *w, size_t ldw,
                                                                         int k, __mmask32 m, const int masked,
                                                                         const int NX, const int NW) {
    __m512i wv[G5_NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; i++) {
        const uint16_t *p = (const uint16_t *)(w + i * ldw) + k;
        wv[i] = masked ? _mm512_maskz_loadu_epi16(m, p) : _mm512_loadu_si512(p);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++) {
        const uint16_t *p = xb + j * ldx + k;
        __m512i xv = masked ? _mm512_maskz_loadu_epi16(m, p) : _mm512_loadu_si512(p);
#pragma GCC unroll 8
        for (int i = 0; i < NW; i++) acc[j][i] = _mm512_dpbf16_ps(acc[j][i], (__m512bh)xv, (__m512bh)wv[i]);
    }
}

AVX512BF16 static inline __attribute__((always_inline)) void gemm_tile_dp(float *out, size_t ldo, const uint16_t *xb,
                                                                         size_t ldx, const char *w, size_t ldw,
                                                                         int K, int add, const int NX,
                                                                         const int NW) {
    __m512 acc[G5_NX][G5_NW];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int i = 0; i < NW; i++) acc[j][i] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 32 <= K; k += 32) gemm_step_dp(acc, xb, ldx, w, ldw, k, 0, 0, NX, NW);
    if (k < K) gemm_step_dp(acc, xb, ldx, w, ldw, k, (__mmask32)((1u << (K - k)) - 1), 1, NX, NW);
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++) gemm_store512(out + j * ldo, acc[j], add, NW);
}

AVX512 static inline __attribute__((always_inline)) void gemm_block512(float *out, size_t ldo, const float *x,
                                                                      int N, const char *w, int M, size_t ldk,
                                                                      int k0, int K, rl_dtype dt) {
    size_t ws = dt == DT_BF16 ? 2 : 4, ldw = ldk * ws;
    int add = k0 > 0;
    x += k0, w += (size_t)k0 * ws;
#define TILE(o, xr, wr, NX, NW) gemm_tile512(o, ldo, xr, ldk, wr, ldw, K, dt, add, NX, NW)
    GEMM_WALK(G5_NX, G5_NW, x, out, N)
#undef TILE
}

// Rows [0, N) of x (N <= GEMM_NB), K in blocks (gemm_kc)
AVX512 static void gemm_rows512(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt, int M,
                                int K) {
    int kc = gemm_kc(N, K, 4);
    for (int k0 = 0; k0 < K; k0 += kc) {
        int len = K - k0 < kc ? K - k0 : kc;
        if (dt == DT_BF16) gemm_block512(out, ldo, x, N, w, M, (size_t)K, k0, len, DT_BF16);
        else gemm_block512(out, ldo, x, N, w, M, (size_t)K, k0, len, DT_F32);
    }
}

AVX512 static void gemm_avx512(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt, int M,
                               int K) {
    for (int n0 = 0; n0 < N; n0 += GEMM_NB)
        gemm_rows512(out + (size_t)n0 * ldo, ldo, x + (size_t)n0 * K, N - n0 < GEMM_NB ? N - n0 : GEMM_NB, w, dt, M,
                     K);
}

// round_bf16_avx2's arithmetic, 16 lanes at a time, the tail under a mask
AVX512 static void round_bf16_avx512(float *x, int n) {
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), abs = _mm512_set1_epi32(0x7fffffff),
                  inf = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x400000),
                  high = _mm512_set1_epi32((int)0xffff0000u);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
        __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        r = _mm512_mask_or_epi32(r, nan, u, quiet);
        _mm512_mask_storeu_epi32(x + i, m, _mm512_and_si512(r, high));
    }
}

// ---- Decoding attention on 16 lanes (kernels.h kv_scores, kv_mix) ------------
// The AVX2 build's loops on 16 lanes: scores of 4 keys for up to 3 query
// heads (12 accumulators), their lanes summed 4 keys at a time (hsum4x16);
// the mix 64 columns at a time for up to 3 heads, each column's sum over t in
// the same order by FMA as the AVX2 build's, so the mix has its bits. The
// key and value rows KV_AHEAD ahead are fetched as there.
AVX512 static inline __attribute__((always_inline)) void scores4_avx512(float *S, int T, const float *q, int gn,
                                                                       const uint16_t *const k[4], int HS,
                                                                       float scale, int nt) {
    __m512 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int j = 0; j < 4; j++) acc[g][j] = _mm512_setzero_ps();
    int d = 0;
    for (; d + 16 <= HS; d += 16)
        for (int j = 0; j < 4; j++) {
            __m512 kv = load16((const char *)k[j], d, 0, DT_BF16, 0);
            for (int g = 0; g < gn; g++)
                acc[g][j] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)g * HS + d), kv, acc[g][j]);
        }
    for (int g = 0; g < gn; g++) {
        float s[4];
        _mm_storeu_ps(s, hsum4x16(acc[g][0], acc[g][1], acc[g][2], acc[g][3]));
        scores_store(S + (size_t)g * T, s, q + (size_t)g * HS, k, d, HS, scale, nt);
    }
}

AVX512 static void kv_scores_avx512(float *S, const float *q, int G, const uint16_t *K, size_t ld, int T, int HS,
                                    float scale) {
    KV_SCORES_WALK(scores4_avx512)
}

// o (gn, 16·w columns from d0) = P (gn, T) · V's columns (w: 1 or 4)
AVX512 static inline __attribute__((always_inline)) void mix_avx512(float *o, const float *P, int T, int gn,
                                                                   const uint16_t *V, size_t ld, int HS, int d0,
                                                                   int w) {
    __m512 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < 4; i++) acc[g][i] = _mm512_setzero_ps();
    for (int t = 0; t < T; t++) {
        const uint16_t *v = V + (size_t)t * ld;
        if (d0 == 0 && t + KV_AHEAD < T) kv_fetch(v + KV_AHEAD * ld, HS);
        __m512 p[3];
        for (int g = 0; g < gn; g++) p[g] = _mm512_set1_ps(P[(size_t)g * T + t]);
        for (int i = 0; i < w; i++) {
            __m512 x = load16((const char *)v, d0 + 16 * i, 0, DT_BF16, 0);
            for (int g = 0; g < gn; g++) acc[g][i] = _mm512_fmadd_ps(p[g], x, acc[g][i]);
        }
    }
    for (int g = 0; g < gn; g++)
        for (int i = 0; i < w; i++) _mm512_storeu_ps(o + (size_t)g * HS + d0 + 16 * i, acc[g][i]);
}

#define KV_MIX512(W)                                                           \
    switch (gn) {                                                              \
    case 1: mix_avx512(og, Pg, T, 1, V, ld, HS, d0, W); break;                \
    case 2: mix_avx512(og, Pg, T, 2, V, ld, HS, d0, W); break;                \
    default: mix_avx512(og, Pg, T, 3, V, ld, HS, d0, W); break;               \
    }

// Columns 64 at a time, then 16, then the AVX2 build's 8 and one by one.
AVX512 static void kv_mix_avx512(float *o, const float *P, int G, int T, const uint16_t *V, size_t ld, int HS) {
    for (int g0 = 0; g0 < G; g0 += 3) {
        int gn = G - g0 < 3 ? G - g0 : 3, d0 = 0;
        float *og = o + (size_t)g0 * HS;
        const float *Pg = P + (size_t)g0 * T;
        for (; d0 + 64 <= HS; d0 += 64) KV_MIX512(4)
        for (; d0 + 16 <= HS; d0 += 16) KV_MIX512(1)
        for (; d0 + 8 <= HS; d0 += 8) KV_MIX(1)
        mix_columns(og, Pg, T, gn, V, ld, HS, d0);
    }
}

// Each thread's copy of a block of a product's input rows in bf16 (GEMM_NB x K)
static __thread uint16_t *gemm_xb;
static __thread size_t gemm_xb_n;

// Blocks of input rows whose values are all bf16 ones go to vdpbf16ps, the
// others (and f32 weights) to gemm_block512.
AVX512BF16 static void gemm_avx512bf16(float *out, size_t ldo, const float *x, int N, const void *wv, rl_dtype dt,
                                       int M, int K) {
    size_t ldk = (size_t)K, ldw = ldk * 2, most = (size_t)(N < GEMM_NB ? N : GEMM_NB) * K;
    if (dt == DT_BF16 && most > gemm_xb_n) {
        free(gemm_xb);
        gemm_xb = xmalloc(most * sizeof *gemm_xb);
        gemm_xb_n = most;
    }
    for (int n0 = 0; n0 < N; n0 += GEMM_NB) {
        int nb = N - n0 < GEMM_NB ? N - n0 : GEMM_NB;
        float *o = out + (size_t)n0 * ldo;
        const float *xn = x + (size_t)n0 * K;
        if (dt != DT_BF16 || !bf16_exact(gemm_xb, xn, (size_t)nb * K)) {
            gemm_rows512(o, ldo, xn, nb, wv, dt, M, K);
            continue;
        }
        int kc = gemm_kc(nb, K, 2);
        for (int k0 = 0; k0 < K; k0 += kc) {
            int len = K - k0 < kc ? K - k0 : kc, add = k0 > 0;
            const uint16_t *xk = gemm_xb + k0;
            const char *w = (const char *)wv + (size_t)k0 * 2;
#define TILE(ot, xr, wr, NX, NW) gemm_tile_dp(ot, ldo, xr, ldk, wr, ldw, len, add, NX, NW)
            GEMM_WALK(G5_NX, G5_NW, xk, o, nb)
#undef TILE
        }
    }
}

// ---- The same product from weights packed in panels (pack.h) ---------------

enum { GP_NX = 8, GP_NP = 3 };   // 24 accumulators: 8 input rows by 3 panels of 16 outputs

// A tile's accumulators to out[j·ldo + 16p + i] for j < NX, p < NP, i < 16
// (the last panel's first last outputs only), added to what is there when
// add (a later block of inputs).
AVX512 static inline __attribute__((always_inline)) void panel_store(float *out, size_t ldo,
                                                                    __m512 (*acc)[GP_NP], int last, int add,
                                                                    const int NX, const int NP) {
    __mmask16 m = (__mmask16)((1u << last) - 1);
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) {
            float *o = out + j * ldo + p * PANEL_ROWS;
            __m512 v = acc[j][p];
            if (p < NP - 1 || last == PANEL_ROWS) {
                if (add) v = _mm512_add_ps(v, _mm512_loadu_ps(o));
                _mm512_storeu_ps(o, v);
            } else {
                if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, o));
                _mm512_mask_storeu_ps(o, m, v);
            }
        }
}

// Σ_k x[j][k] · P_p[k][i] over S steps (inputs) for NX f32 input rows x (row
// stride ldx) and NP f32 panels (ldp floats apart): each panel's 16 weights
// of input k by x[j][k] broadcast, by FMA.
AVX512 static inline __attribute__((always_inline)) void panel_tile_f32(float *out, size_t ldo, const float *x,
                                                                       size_t ldx, const float *P, size_t ldp,
                                                                       int S, int last, int add, const int NX,
                                                                       const int NP) {
    __m512 acc[GP_NX][GP_NP];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[j][p] = _mm512_setzero_ps();
    for (int k = 0; k < S; k++) {
        __m512 w[GP_NP];
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) w[p] = _mm512_load_ps(P + p * ldp + (size_t)k * PANEL_ROWS);
#pragma GCC unroll 8
        for (int j = 0; j < NX; j++) {
            __m512 xv = _mm512_set1_ps(x[j * ldx + k]);
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++) acc[j][p] = _mm512_fmadd_ps(xv, w[p], acc[j][p]);
        }
    }
    panel_store(out, ldo, acc, last, add, NX, NP);
}

// The same over S steps (pairs of inputs) for bf16 input rows xb (exact
// copies of the inputs, each padded to a whole pair) and bf16 panels (ldp
// elements apart): each 64-byte vector of a panel (a pair of inputs for 16
// outputs) by the pair broadcast from each input row, by vdpbf16ps.
AVX512BF16 static inline __attribute__((always_inline)) void panel_tile_bf16(float *out, size_t ldo,
                                                                            const uint16_t *xb, size_t ldx,
                                                                            const uint16_t *P, size_t ldp, int S,
                                                                            int last, int add, const int NX,
                                                                            const int NP) {
    __m512 acc[GP_NX][GP_NP];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[j][p] = _mm512_setzero_ps();
    for (int q = 0; q < S; q++) {
        __m512i w[GP_NP];
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) w[p] = _mm512_load_si512(P + p * ldp + (size_t)q * 32);
#pragma GCC unroll 8
        for (int j = 0; j < NX; j++) {
            int32_t pair;
            memcpy(&pair, xb + j * ldx + 2 * (size_t)q, 4);
            __m512i xv = _mm512_set1_epi32(pair);
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++) acc[j][p] = _mm512_dpbf16_ps(acc[j][p], (__m512bh)w[p], (__m512bh)xv);
        }
    }
    panel_store(out, ldo, acc, last, add, NX, NP);
}

// Input rows [0, NB) (XP, row stride LDX) against the group of NP panels at
// P, into op: 8 rows a tile, then 4, 2, 1, TILE(out, inputs, NX, NP) the
// tile of the caller's dtype.
#define PANEL_WALK(TILE, NB, LDX, XP, NP)                                              \
    do {                                                                               \
        int n_ = 0;                                                                    \
        for (; n_ + 8 <= (NB); n_ += 8) TILE(op + n_ * ldo, (XP) + n_ * (LDX), 8, NP); \
        if (n_ + 4 <= (NB)) TILE(op + n_ * ldo, (XP) + n_ * (LDX), 4, NP), n_ += 4;    \
        if (n_ + 2 <= (NB)) TILE(op + n_ * ldo, (XP) + n_ * (LDX), 2, NP), n_ += 2;    \
        if (n_ < (NB)) TILE(op + n_ * ldo, (XP) + n_ * (LDX), 1, NP);                  \
    } while (0)

// The same against every group of 3 panels of M outputs (np panels, each PB
// bytes from PANELS; the last group 1 to 3, its last panel short of 16
// outputs when M is), from out's block o.
#define PANEL_GROUPS(TILE, NB, LDX, XP, PANELS, PB)                                \
    for (int p0 = 0; p0 < np; p0 += GP_NP) {                                       \
        int g = np - p0 < GP_NP ? np - p0 : GP_NP, end = (p0 + g) * PANEL_ROWS;    \
        int last = end <= M ? PANEL_ROWS : PANEL_ROWS - (end - M);                 \
        const void *P = (const char *)(PANELS) + (size_t)p0 * (PB);                \
        float *op = o + p0 * PANEL_ROWS;                                           \
        if (g == 3) PANEL_WALK(TILE, NB, LDX, XP, 3);                              \
        else if (g == 2) PANEL_WALK(TILE, NB, LDX, XP, 2);                         \
        else PANEL_WALK(TILE, NB, LDX, XP, 1);                                     \
    }

// f32 weights: input rows and steps in panel_blocks' blocks, each block of
// inputs against every group of panels.
AVX512 static void gemm_panels_f32(float *out, size_t ldo, const float *x, int N, const float *panels, int M,
                                   int K) {
    int np = (M + PANEL_ROWS - 1) / PANEL_ROWS, most, sc;
    size_t pb = panel_bytes(DT_F32, K), ldp = pb / 4;
    panel_blocks(N, K, &most, &sc);
    for (int n0 = 0; n0 < N; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most;
        float *o = out + (size_t)n0 * ldo;
        for (int s0 = 0; s0 < K; s0 += sc) {
            int S = K - s0 < sc ? K - s0 : sc, add = s0 > 0;
            const float *xn = x + (size_t)n0 * K + s0;
            const float *ps = panels + (size_t)s0 * PANEL_ROWS;
#define TILE(ot, xr, NX, NP) panel_tile_f32(ot, ldo, xr, (size_t)K, P, ldp, S, last, add, NX, NP)
            PANEL_GROUPS(TILE, nb, (size_t)K, xn, ps, pb)
#undef TILE
        }
    }
}

// bf16 weights: the same, each block of input rows first copied as bf16
// (gemm_xb); a block whose values are not all bf16 ones goes to gemm_rows512
// on the rows as stored.
AVX512BF16 static void gemm_panels_bf16(float *out, size_t ldo, const float *x, int N, const uint16_t *w,
                                        const uint16_t *panels, int M, int K) {
    int np = (M + PANEL_ROWS - 1) / PANEL_ROWS, KP = (K + 1) / 2, most, sc;
    size_t ldx = 2 * (size_t)KP, pb = panel_bytes(DT_BF16, K), ldp = pb / 2;
    panel_blocks(N, KP, &most, &sc);
    if ((size_t)most * ldx > gemm_xb_n) {
        free(gemm_xb);
        gemm_xb = xmalloc((size_t)most * ldx * sizeof *gemm_xb);
        gemm_xb_n = (size_t)most * ldx;
    }
    for (int n0 = 0; n0 < N; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most, exact = 1;
        float *o = out + (size_t)n0 * ldo;
        const float *xn = x + (size_t)n0 * K;
        for (int n = 0; n < nb && exact; n++) {
            exact = bf16_exact(gemm_xb + n * ldx, xn + (size_t)n * K, (size_t)K);
            if (K & 1) gemm_xb[n * ldx + K] = 0;
        }
        if (!exact) {
            gemm_rows512(o, ldo, xn, nb, w, DT_BF16, M, K);
            continue;
        }
        for (int s0 = 0; s0 < KP; s0 += sc) {
            int S = KP - s0 < sc ? KP - s0 : sc, add = s0 > 0;
            const uint16_t *xs = gemm_xb + 2 * (size_t)s0, *ps = panels + (size_t)s0 * 32;
#define TILE(ot, xr, NX, NP) panel_tile_bf16(ot, ldo, xr, ldx, P, ldp, S, last, add, NX, NP)
            PANEL_GROUPS(TILE, nb, ldx, xs, ps, pb)
#undef TILE
        }
    }
}

// Without AVX512_BF16, bf16 panels are read as the AVX2 build reads them.
AVX512 static void gemm_panels_avx512(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                                      const void *panels, int M, int K) {
    if (dt == DT_BF16) gemm_panels_avx2(out, ldo, x, N, w, dt, panels, M, K);
    else gemm_panels_f32(out, ldo, x, N, panels, M, K);
}

AVX512BF16 static void gemm_panels_avx512bf16(float *out, size_t ldo, const float *x, int N, const void *w,
                                              rl_dtype dt, const void *panels, int M, int K) {
    if (dt == DT_BF16) gemm_panels_bf16(out, ldo, x, N, w, panels, M, K);
    else gemm_panels_f32(out, ldo, x, N, panels, M, K);
}

// With AMX-BF16, bf16 panels go to the tiles (amx.h), but for inputs that
// are not all bf16 values.
AVX512BF16 static void gemm_panels_amx(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                                       const void *panels, int M, int K) {
    if (dt == DT_BF16 && amx_gemm_panels_bf16(out, ldo, x, N, panels, M, K)) return;
    gemm_panels_avx512bf16(out, ldo, x, N, w, dt, panels, M, K);
}

static const cpu_kernels *cpu_kernels_vnni(void) {
    static cpu_kernels k;
    const cpu_kernels *a = cpu_kernels_avx2();
    if (!a || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vnni"))
        return NULL;
    k = *a;
    k.name = "avx512-vnni";
    k.dots_i8 = dots_i8_vnni;
    k.gemm_i8 = gemm_i8_vnni;
    if (__builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        int bf16 = __builtin_cpu_supports("avx512bf16");
        k.gemm = bf16 ? gemm_avx512bf16 : gemm_avx512;
        k.gemm_panels = bf16 ? gemm_panels_avx512bf16 : gemm_panels_avx512;
        k.round_bf16 = round_bf16_avx512;
        k.kv_scores = kv_scores_avx512;
        k.kv_mix = kv_mix_avx512;
    }
    return &k;
}

// The VNNI build with bf16 panels and int8 products on AMX tiles
static const cpu_kernels *cpu_kernels_amx(void) {
    static cpu_kernels k;
    const cpu_kernels *v = cpu_kernels_vnni();
    if (!v || v->gemm_panels != gemm_panels_avx512bf16 || !amx_available()) return NULL;
    k = *v;
    k.name = "avx512-amx";
    k.gemm_panels = gemm_panels_amx;
    k.gemm_i8 = amx_gemm_i8;
    k.i8_panels = 1;
    return &k;
}
#else
static const cpu_kernels *cpu_kernels_avx2(void) { return NULL; }
static const cpu_kernels *cpu_kernels_vnni(void) { return NULL; }
static const cpu_kernels *cpu_kernels_amx(void) { return NULL; }
#endif

// ---- The choice -------------------------------------------------------------

const cpu_kernels *cpu_K;

void cpu_kernels_choose(void) {
    const char *want = getenv("RLPIPE_CPU");
    const cpu_kernels *k = NULL;
    if (!getenv("RLPIPE_CPU_PORTABLE")) {
        if (!want || (strcmp(want, "avx2") && strcmp(want, "avx512"))) k = cpu_kernels_amx();
        if (!k && (!want || strcmp(want, "avx2"))) k = cpu_kernels_vnni();
        if (!k) k = cpu_kernels_avx2();
    }
    cpu_K = k ? k : cpu_kernels_portable();
}
