// cpu/bf16.c — bf16.h: the check and the copy in one pass, AVX-512 where the
// processor has it (its only callers run there), plain C otherwise.
#include "model/cpu/bf16.h"

#include <string.h>

static int bf16_exact_c(uint16_t *xb, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        if (u & 0xffff) return 0;
        xb[i] = (uint16_t)(u >> 16);
    }
    return 1;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

// 16 values a step, their low halves OR-ed together and tested every 1024
// values (an input that is not bf16 is found early), the tail in plain C.
AVX512 static int bf16_exact_avx512(uint16_t *xb, const float *x, size_t n) {
    __m512i low = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_loadu_si512(x + i);
        low = _mm512_or_si512(low, v);
        _mm256_storeu_si256((__m256i *)(xb + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
        if ((i & 1023) == 0 && _mm512_test_epi32_mask(low, _mm512_set1_epi32(0xffff))) return 0;
    }
    if (_mm512_test_epi32_mask(low, _mm512_set1_epi32(0xffff))) return 0;
    return bf16_exact_c(xb + i, x + i, n - i);
}

int bf16_exact(uint16_t *xb, const float *x, size_t n) {
    static int avx512 = -1;
    if (avx512 < 0) avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    return avx512 ? bf16_exact_avx512(xb, x, n) : bf16_exact_c(xb, x, n);
}
#else
int bf16_exact(uint16_t *xb, const float *x, size_t n) { return bf16_exact_c(xb, x, n); }
#endif
