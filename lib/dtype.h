// dtype.h — the element types of weights: f32, bf16, f16 as stored in
// safetensors files and by the sampler; int8 with one f32 scale per group of
// consecutive inputs (32 or 64, or a whole row: one per output channel); and
// fp8 e4m3 (OCP E4M3FN: 4 exponent bits, 3 mantissa bits, no infinities,
// largest 448) with one f32 scale per row (doc/design.md §6).
#ifndef RLPIPE_DTYPE_H
#define RLPIPE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { DT_F32 = 0, DT_BF16, DT_F16, DT_I8, DT_FP8 } rl_dtype;

const char *dt_name(rl_dtype t);                 // "f32", "bf16", "f16", "int8", "fp8"
int dt_parse(const char *s, rl_dtype *out);      // accepts the names above; 0 ok, -1 unknown
size_t dt_size(rl_dtype t);                      // bytes per element (int8, fp8: 1, scales apart)
// int8 and fp8 values need their scales: they exist only in a sampler's
// memory, never in a file or a weight push (which carry f32, bf16 or f16).
static inline int dt_scaled(rl_dtype t) { return t == DT_I8 || t == DT_FP8; }

// bf16 is the top half of an f32; rounding to nearest even, NaN kept quiet.
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t nearest_even = (u + 0x7fffu + ((u >> 16) & 1)) >> 16, quiet_nan = (u >> 16) | 0x40;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest_even);   // a select: loops vectorise
}
float f16_to_f32(uint16_t h);                    // IEEE binary16, subnormals included
uint16_t f32_to_f16(float f);                    // round to nearest even, overflow to inf

// Bulk conversions (n elements).
void dt_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void dt_f16_to_f32(float *dst, const uint16_t *src, size_t n);
void dt_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void dt_f32_to_f16(uint16_t *dst, const float *src, size_t n);

// int8 weight-only quantisation of a (rows, cols) matrix with ceil(cols/group)
// scales per row (the last group of a row may be shorter):
// q[r][c] = round(x[r][c] / s[r][c/group]), s = max|x| over the group / 127.
void dt_quantize_i8(int8_t *q, float *scales, const float *x, size_t rows, size_t cols, int group);
void dt_dequantize_i8(float *x, const int8_t *q, const float *scales, size_t rows, size_t cols, int group);

// fp8 e4m3: the code of f rounded to nearest even, saturated to ±448 (NaN
// stays NaN, code 0x7f); and the value of a code, exact in f32 (and in bf16).
uint8_t f32_to_e4m3(float f);
static inline float e4m3_to_f32(uint8_t b) {
    // Bits 6..0 placed as an f32's exponent and mantissa read as 2^-120 times
    // the value (subnormals included, as f32 subnormals); 0x7f reads as 480.
    uint32_t u = ((uint32_t)(b & 0x7f) << 20) | ((uint32_t)(b & 0x80) << 24);
    float f;
    memcpy(&f, &u, 4);
    return f * 0x1p120f;
}
// fp8 quantisation of a (rows, cols) matrix, one scale per row:
// q[r][c] = e4m3(x[r][c] / s[r]) (x times 1/s, in f32), s = max|x| of the row / 448.
void dt_quantize_fp8(uint8_t *q, float *scales, const float *x, size_t rows, size_t cols);
void dt_dequantize_fp8(float *x, const uint8_t *q, const float *scales, size_t rows, size_t cols);

#endif
