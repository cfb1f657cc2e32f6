// cpu/kernels_avx512.c — the row kernels for x86-64 processors with AVX-512:
// int8 products with VNNI; with AVX512F/BW/VL/DQ many-row products of f32
// and bf16 weights (vdpbf16ps with AVX512_BF16), bf16 rounding and decoding
// attention on 16 lanes; panels from pack.h; AMX tiles (amx.h) where present.
// The rest of the table is the AVX2 build's (kernels_avx2.c).
#include "model/cpu/kernels_internal.h"

#include <stdlib.h>
#include <string.h>

#include "model/cpu/amx.h"
#include "model/cpu/pack.h"
#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)

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
                                                                       const void *const k[4], rl_dtype dt, int HS,
                                                                       float scale, int nt) {
    __m512 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int j = 0; j < 4; j++) acc[g][j] = _mm512_setzero_ps();
    int d = 0;
    for (; d + 16 <= HS; d += 16)
        for (int j = 0; j < 4; j++) {
            __m512 kv = load16((const char *)k[j], d, 0, dt, 0);
            for (int g = 0; g < gn; g++)
                acc[g][j] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)g * HS + d), kv, acc[g][j]);
        }
    for (int g = 0; g < gn; g++) {
        float s[4];
        _mm_storeu_ps(s, hsum4x16(acc[g][0], acc[g][1], acc[g][2], acc[g][3]));
        scores_store(S + (size_t)g * T, s, q + (size_t)g * HS, k, dt, d, HS, scale, nt);
    }
}

AVX512 static void kv_scores_avx512(float *S, const float *q, int G, const void *K, rl_dtype dt, size_t ld, int T,
                                    int HS, float scale) {
    if (dt == DT_BF16) KV_SCORES_WALK(scores4_avx512, DT_BF16)
    else KV_SCORES_WALK(scores4_avx512, DT_F32)
}

// o (gn, 16·w columns from d0) = P (gn, T) · V's columns (w: 1 or 4)
AVX512 static inline __attribute__((always_inline)) void mix_avx512(float *o, const float *P, int T, int gn,
                                                                   const void *V, rl_dtype dt, size_t ld, int HS,
                                                                   int d0, int w) {
    __m512 acc[3][4];
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < 4; i++) acc[g][i] = _mm512_setzero_ps();
    for (int t = 0; t < T; t++) {
        const char *v = kv_row(V, dt, ld, t);
        if (d0 == 0 && t + KV_AHEAD < T) kv_fetch(kv_row(V, dt, ld, t + KV_AHEAD), HS, dt);
        __m512 p[3];
        for (int g = 0; g < gn; g++) p[g] = _mm512_set1_ps(P[(size_t)g * T + t]);
        for (int i = 0; i < w; i++) {
            __m512 x = load16(v, d0 + 16 * i, 0, dt, 0);
            for (int g = 0; g < gn; g++) acc[g][i] = _mm512_fmadd_ps(p[g], x, acc[g][i]);
        }
    }
    for (int g = 0; g < gn; g++)
        for (int i = 0; i < w; i++) _mm512_storeu_ps(o + (size_t)g * HS + d0 + 16 * i, acc[g][i]);
}

#define KV_MIX512(W, DT)                                                       \
    switch (gn) {                                                              \
    case 1: mix_avx512(og, Pg, T, 1, V, DT, ld, HS, d0, W); break;            \
    case 2: mix_avx512(og, Pg, T, 2, V, DT, ld, HS, d0, W); break;            \
    default: mix_avx512(og, Pg, T, 3, V, DT, ld, HS, d0, W); break;           \
    }

// Columns 64 at a time, then 16, then the AVX2 build's 8 and one by one.
#define KV_MIX512_WALK(DT)                                                     \
    for (int g0 = 0; g0 < G; g0 += 3) {                                        \
        int gn = G - g0 < 3 ? G - g0 : 3, d0 = 0;                              \
        float *og = o + (size_t)g0 * HS;                                       \
        const float *Pg = P + (size_t)g0 * T;                                  \
        for (; d0 + 64 <= HS; d0 += 64) KV_MIX512(4, DT)                       \
        for (; d0 + 16 <= HS; d0 += 16) KV_MIX512(1, DT)                       \
        for (; d0 + 8 <= HS; d0 += 8) KV_MIX(1, DT)                            \
        mix_columns(og, Pg, T, gn, V, DT, ld, HS, d0);                         \
    }

AVX512 static void kv_mix_avx512(float *o, const float *P, int G, int T, const void *V, rl_dtype dt, size_t ld,
                                 int HS) {
    if (dt == DT_BF16) KV_MIX512_WALK(DT_BF16)
    else KV_MIX512_WALK(DT_F32)
}
#undef KV_MIX512_WALK

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

// A group's weights come from memory in its first tile of input rows and
// from L2 in the others: the first tile waits on memory (one thread drew
// 4 GB/s of a machine's 20 in a 64-row f32 product), the others leave it
// idle. So the later tiles fetch the next group's weights into L2 as they
// go, each its share of that group's steps, one step (a line of each panel)
// every few of its own. Measured on a Xeon with AMX (480 MiB L3), 2 threads,
// bench/forward decode of SmolLM2-135M, 64 slots, f32: 662 to 723 tokens/s
// against 595 to 612 without (3 rounds); bf16 by vdpbf16ps (RLPIPE_CPU=
// avx512): 542 and 548 against 481 and 521.
typedef struct {
    const char *next;   // the next group's panels at this block of steps; NULL: none
    size_t ldp;         // bytes from one of its panels to the next
    int np, lo, hi;     // its panels, and the steps [lo, hi) this tile fetches
} panel_fetch;

// Tile i of nt of a group (a walk over its input rows): its share of the next
// group's S steps, [lo, hi); a lone tile fetches all of them.
static inline panel_fetch fetch_share(const char *next, size_t ldp, int np, int S, int i, int nt) {
    panel_fetch f = {next, ldp, next ? np : 0, 0, 0};
    if (!next || (nt > 1 && i == 0)) return f;
    f.lo = nt == 1 ? 0 : (int)((long)S * (i - 1) / (nt - 1));
    f.hi = nt == 1 ? S : (int)((long)S * i / (nt - 1));
    return f;
}

// Within a tile's walk over S steps: after step k, *acc grows by its share,
// and each time it passes S the next step of the share is fetched, so that
// the share's hi − lo steps spread evenly over the S (hi − lo <= S).
AVX512 static inline __attribute__((always_inline)) void fetch_step(const panel_fetch *f, int *acc, int *s, int S) {
    *acc += f->hi - f->lo;
    if (*acc < S) return;
    *acc -= S;
    for (int p = 0; p < f->np; p++) _mm_prefetch(f->next + (size_t)p * f->ldp + (size_t)*s * 64, _MM_HINT_T1);
    (*s)++;
}

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
                                                                       int S, int last, int add, panel_fetch f,
                                                                       const int NX, const int NP) {
    __m512 acc[GP_NX][GP_NP];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[j][p] = _mm512_setzero_ps();
    int facc = 0, fs = f.lo;
    for (int k = 0; k < S; k++) {
        __m512 w[GP_NP];
        if (f.hi > f.lo) fetch_step(&f, &facc, &fs, S);
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
                                                                            int last, int add, panel_fetch f,
                                                                            const int NX, const int NP) {
    __m512 acc[GP_NX][GP_NP];
#pragma GCC unroll 8
    for (int j = 0; j < NX; j++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[j][p] = _mm512_setzero_ps();
    int facc = 0, fs = f.lo;
    for (int q = 0; q < S; q++) {
        __m512i w[GP_NP];
        if (f.hi > f.lo) fetch_step(&f, &facc, &fs, S);
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
// P, into op: 8 rows a tile, then 4, 2, 1, TILE(out, inputs, fetch, NX, NP)
// the tile of the caller's dtype, fetching its share of the next group
// (NEXT, NPN panels PB bytes apart; panel_fetch).
#define PANEL_WALK(TILE, NB, LDX, XP, NP, NEXT, NPN, PB)                                 \
    do {                                                                                \
        int n_ = 0, i_ = 0, nt_ = (NB) / 8 + ((NB) & 4 ? 1 : 0) + ((NB) & 2 ? 1 : 0) + ((NB) & 1); \
        for (; n_ + 8 <= (NB); n_ += 8, i_++)                                           \
            TILE(op + n_ * ldo, (XP) + n_ * (LDX), fetch_share(NEXT, PB, NPN, S, i_, nt_), 8, NP); \
        if (n_ + 4 <= (NB))                                                             \
            TILE(op + n_ * ldo, (XP) + n_ * (LDX), fetch_share(NEXT, PB, NPN, S, i_, nt_), 4, NP), n_ += 4, i_++; \
        if (n_ + 2 <= (NB))                                                             \
            TILE(op + n_ * ldo, (XP) + n_ * (LDX), fetch_share(NEXT, PB, NPN, S, i_, nt_), 2, NP), n_ += 2, i_++; \
        if (n_ < (NB)) TILE(op + n_ * ldo, (XP) + n_ * (LDX), fetch_share(NEXT, PB, NPN, S, i_, nt_), 1, NP); \
    } while (0)

// The same against every group of 3 panels of M outputs (np panels, each PB
// bytes from PANELS; the last group 1 to 3, its last panel short of 16
// outputs when M is), from out's block o.
#define PANEL_GROUPS(TILE, NB, LDX, XP, PANELS, PB)                                \
    for (int p0 = 0; p0 < np; p0 += GP_NP) {                                       \
        int g = np - p0 < GP_NP ? np - p0 : GP_NP, end = (p0 + g) * PANEL_ROWS;    \
        int last = end <= M ? PANEL_ROWS : PANEL_ROWS - (end - M);                 \
        const void *P = (const char *)(PANELS) + (size_t)p0 * (PB);                \
        int gn = np - p0 - g < GP_NP ? np - p0 - g : GP_NP;                        \
        const char *next = gn > 0 ? (const char *)P + (size_t)g * (PB) : NULL;    \
        float *op = o + p0 * PANEL_ROWS;                                           \
        if (g == 3) PANEL_WALK(TILE, NB, LDX, XP, 3, next, gn, PB);               \
        else if (g == 2) PANEL_WALK(TILE, NB, LDX, XP, 2, next, gn, PB);               \
        else PANEL_WALK(TILE, NB, LDX, XP, 1, next, gn, PB);                      \
    }

// f32 weights: input rows and steps in panel_blocks' blocks, each block of
// inputs against every group of panels.
AVX512 static void gemm_panels_f32(float *out, size_t ldo, const float *x, int N, const float *panels, int M,
                                   int K, int add_to) {
    int np = (M + PANEL_ROWS - 1) / PANEL_ROWS, most, sc;
    size_t pb = panel_bytes(DT_F32, K), ldp = pb / 4;
    panel_blocks(N, K, &most, &sc);
    for (int n0 = 0; n0 < N; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most;
        float *o = out + (size_t)n0 * ldo;
        for (int s0 = 0; s0 < K; s0 += sc) {
            int S = K - s0 < sc ? K - s0 : sc, add = add_to || s0 > 0;
            const float *xn = x + (size_t)n0 * K + s0;
            const float *ps = panels + (size_t)s0 * PANEL_ROWS;
#define TILE(ot, xr, F, NX, NP) panel_tile_f32(ot, ldo, xr, (size_t)K, P, ldp, S, last, add, F, NX, NP)
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
#define TILE(ot, xr, F, NX, NP) panel_tile_bf16(ot, ldo, xr, ldx, P, ldp, S, last, add, F, NX, NP)
            PANEL_GROUPS(TILE, nb, ldx, xs, ps, pb)
#undef TILE
        }
    }
}

// Without AVX512_BF16, bf16 panels are read as the AVX2 build reads them.
AVX512 static void gemm_panels_avx512(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                                      const void *panels, int M, int K, int add) {
    if (dt == DT_BF16) gemm_panels_avx2(out, ldo, x, N, w, dt, panels, M, K, 0);
    else gemm_panels_f32(out, ldo, x, N, panels, M, K, add);
}

AVX512BF16 static void gemm_panels_avx512bf16(float *out, size_t ldo, const float *x, int N, const void *w,
                                              rl_dtype dt, const void *panels, int M, int K, int add) {
    if (dt == DT_BF16) gemm_panels_bf16(out, ldo, x, N, w, panels, M, K);
    else gemm_panels_f32(out, ldo, x, N, panels, M, K, add);
}

// With AMX-BF16, bf16 panels go to the tiles (amx.h), but for inputs that
// are not all bf16 values.
AVX512BF16 static void gemm_panels_amx(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                                       const void *panels, int M, int K, int add) {
    if (dt == DT_BF16 && amx_gemm_panels_bf16(out, ldo, x, N, panels, M, K)) return;
    gemm_panels_avx512bf16(out, ldo, x, N, w, dt, panels, M, K, add);
}

const cpu_kernels *cpu_kernels_vnni(void) {
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
const cpu_kernels *cpu_kernels_amx(void) {
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
const cpu_kernels *cpu_kernels_vnni(void) { return NULL; }
const cpu_kernels *cpu_kernels_amx(void) { return NULL; }
#endif
