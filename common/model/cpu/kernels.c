// cpu/kernels.c — row kernels of the CPU backend (see kernels.h): a portable
// version, and one for x86-64 processors with AVX2, FMA and F16C, whose
// functions carry their own target attribute so that the rest of the build
// stays portable. All accumulate in f32.
#include "model/cpu/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

// ---- Portable C -------------------------------------------------------------

static float elem(const void *w, const float *scales, int k, int group, rl_dtype dt) {
    switch (dt) {
    case DT_F32: return ((const float *)w)[k];
    case DT_BF16: return bf16_to_f32(((const uint16_t *)w)[k]);
    case DT_F16: return f16_to_f32(((const uint16_t *)w)[k]);
    case DT_I8: return (float)((const int8_t *)w)[k] * scales[k / group];
    }
    return 0;
}

static float dot_portable(const float *x, const void *w, const float *scales, int K, int group,
                         rl_dtype dt) {
    float s = 0;
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

static const cpu_kernels *cpu_kernels_portable(void) {
    static const cpu_kernels k = {dot_portable,     row_to_f32_portable,      sum_exp_portable,
                                  swiglu_portable,  exp_row_portable,         swiglu_backward_portable,
                                  adamw_portable};
    return &k;
}

// ---- x86-64 with AVX2 + FMA + F16C ------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

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
    case DT_F32: break;
    }
    return _mm256_loadu_ps((const float *)w + k);
}

// Σ x[k] w[k] over [k0, k1) of one f32, bf16 or f16 row; four accumulators
// keep the FMA pipeline full.
AVX2 static inline __attribute__((always_inline)) float dot_run(const float *x, const void *w, int k0, int k1,
                                                               rl_dtype dt) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int k = k0;
    for (; k + 32 <= k1; k += 32) {
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

// int8: the sum of each group is scaled into a vector accumulator, so no
// horizontal sum is paid per group; two groups at a time, on independent
// chains, keep the FMA units busy (group sizes are multiples of 16).
AVX2 static float dot_i8_avx2(const float *x, const int8_t *w, const float *scales, int K, int group) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float tail = 0;
    int g = 0, k0 = 0;
    for (; group % 16 == 0 && k0 + 2 * group <= K; g += 2, k0 += 2 * group) {
        const float *xa = x + k0, *xb = x + k0 + group;
        const int8_t *wa = w + k0, *wb = w + k0 + group;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
        for (int i = 0; i < group; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xa + i), load8(wa, i, DT_I8), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xa + i + 8), load8(wa, i + 8, DT_I8), a1);
            b0 = _mm256_fmadd_ps(_mm256_loadu_ps(xb + i), load8(wb, i, DT_I8), b0);
            b1 = _mm256_fmadd_ps(_mm256_loadu_ps(xb + i + 8), load8(wb, i + 8, DT_I8), b1);
        }
        acc0 = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(scales[g]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_add_ps(b0, b1), _mm256_set1_ps(scales[g + 1]), acc1);
    }
    for (; k0 < K; g++, k0 += group) {   // the last groups, the last one maybe short
        int k1 = k0 + group < K ? k0 + group : K, k = k0;
        __m256 s0 = _mm256_setzero_ps();
        for (; k + 8 <= k1; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), load8(w, k, DT_I8), s0);
        acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(scales[g]), acc0);
        for (; k < k1; k++) tail += x[k] * (float)w[k] * scales[g];
    }
    return hsum8(_mm256_add_ps(acc0, acc1)) + tail;
}

AVX2 static float dot_avx2(const float *x, const void *w, const float *scales, int K, int group,
                           rl_dtype dt) {
    switch (dt) {   // each case compiles its own loop, with no switch inside
    case DT_F32: return dot_run(x, w, 0, K, DT_F32);
    case DT_BF16: return dot_run(x, w, 0, K, DT_BF16);
    case DT_F16: return dot_run(x, w, 0, K, DT_F16);
    case DT_I8: break;
    }
    return dot_i8_avx2(x, w, scales, K, group);
}

AVX2 static void row_to_f32_avx2(float *out, const void *w, const float *scales, int K, int group,
                                 rl_dtype dt) {
    if (dt == DT_I8) {
        for (int g = 0, k0 = 0; k0 < K; g++, k0 += group) {
            int k1 = k0 + group < K ? k0 + group : K, k = k0;
            __m256 s = _mm256_set1_ps(scales[g]);
            for (; k + 8 <= k1; k += 8) _mm256_storeu_ps(out + k, _mm256_mul_ps(load8(w, k, dt), s));
            for (; k < k1; k++) out[k] = (float)((const int8_t *)w)[k] * scales[g];
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

static const cpu_kernels *cpu_kernels_avx2(void) {
    static const cpu_kernels k = {dot_avx2,    row_to_f32_avx2,      sum_exp_avx2,
                                  swiglu_avx2, exp_row_avx2,         swiglu_backward_avx2,
                                  adamw_avx2};
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;
    // F16C has no __builtin_cpu_supports name in every GCC; AVX2 processors all have it.
    return &k;
}
#else
static const cpu_kernels *cpu_kernels_avx2(void) { return NULL; }
#endif

// ---- The choice -------------------------------------------------------------

const cpu_kernels *cpu_K;

void cpu_kernels_choose(void) {
    const cpu_kernels *k = getenv("RLPIPE_CPU_PORTABLE") ? NULL : cpu_kernels_avx2();
    cpu_K = k ? k : cpu_kernels_portable();
}
