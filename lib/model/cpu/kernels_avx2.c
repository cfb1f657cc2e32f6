// cpu/kernels_avx2.c — the row kernels for x86-64 processors with AVX2, FMA
// and F16C (kernels.h): rows, many-row products of f32 and bf16 weights (as
// stored and from panels), int8 products, and decoding attention on 8 lanes.
// Every function carries the AVX2 target attribute (kernels_internal.h).
#include "model/cpu/kernels_internal.h"

#include <stdlib.h>
#include <string.h>

#include "model/cpu/pack.h"
#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)

AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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

// Scores of 4 keys k[0..3] of dt (the last repeated where fewer than 4 are
// left: nt are stored) for gn (1 to 3) query heads at q: 12 accumulators of
// 8 lanes, each key's 8 elements loaded (bf16 widened) once for the gn heads;
// the 4 keys' lane sums are added by hadd, then the halves, then the
// elements past the last 8. S's rows are T apart.
AVX2 static inline __attribute__((always_inline)) void scores4_avx2(float *S, int T, const float *q, int gn,
                                                                   const void *const k[4], rl_dtype dt, int HS,
                                                                   float scale, int nt) {
    __m256 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int j = 0; j < 4; j++) acc[g][j] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= HS; d += 8)
        for (int j = 0; j < 4; j++) {
            __m256 kv = load8(k[j], d, dt);
            for (int g = 0; g < gn; g++)
                acc[g][j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)g * HS + d), kv, acc[g][j]);
        }
    for (int g = 0; g < gn; g++) {
        __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[g][0], acc[g][1]), _mm256_hadd_ps(acc[g][2], acc[g][3]));
        float s[4];
        _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
        scores_store(S + (size_t)g * T, s, q + (size_t)g * HS, k, dt, d, HS, scale, nt);
    }
}

AVX2 static void kv_scores_avx2(float *S, const float *q, int G, const void *K, rl_dtype dt, size_t ld, int T, int HS,
                                float scale) {
    if (dt == DT_BF16) KV_SCORES_WALK(scores4_avx2, DT_BF16)
    else KV_SCORES_WALK(scores4_avx2, DT_F32)
}

// Columns 32 at a time, then 8, then one by one (fmaf, in the same order).
#define KV_MIX_WALK(DT)                                                        \
    for (int g0 = 0; g0 < G; g0 += 3) {                                        \
        int gn = G - g0 < 3 ? G - g0 : 3, d0 = 0;                              \
        float *og = o + (size_t)g0 * HS;                                       \
        const float *Pg = P + (size_t)g0 * T;                                  \
        for (; d0 + 32 <= HS; d0 += 32) KV_MIX(4, DT)                          \
        for (; d0 + 8 <= HS; d0 += 8) KV_MIX(1, DT)                            \
        mix_columns(og, Pg, T, gn, V, DT, ld, HS, d0);                         \
    }

AVX2 static void kv_mix_avx2(float *o, const float *P, int G, int T, const void *V, rl_dtype dt, size_t ld, int HS) {
    if (dt == DT_BF16) KV_MIX_WALK(DT_BF16)
    else KV_MIX_WALK(DT_F32)
}
#undef KV_MIX_WALK

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
AVX2 void gemm_panels_avx2(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                           const void *panels, int M, int K, int add_to) {
    (void)w;
    int np = (M + PANEL_ROWS - 1) / PANEL_ROWS, S = dt == DT_BF16 ? (K + 1) / 2 : K, most, sc;
    size_t pb = panel_bytes(dt, K);
    panel_blocks(N, S, &most, &sc);
    for (int n0 = 0; n0 < N; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most;
        for (int p = 0; p < np; p++)
            for (int s0 = 0; s0 < S; s0 += sc) {
                int Sb = S - s0 < sc ? S - s0 : sc, add = add_to || s0 > 0;
                int half = dt == DT_BF16 && (K & 1) && s0 + Sb == S;
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

const cpu_kernels *cpu_kernels_avx2(void) {
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
#else
const cpu_kernels *cpu_kernels_avx2(void) { return NULL; }
#endif
