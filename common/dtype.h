// dtype.h — the element types of weights: f32, bf16, f16 as stored in
// safetensors files and by the sampler, and int8 weight-only quantisation with
// one f32 scale per group of 32 or 64 consecutive inputs (doc/design.md §6).
#ifndef RLPIPE_DTYPE_H
#define RLPIPE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { DT_F32 = 0, DT_BF16, DT_F16, DT_I8 } rl_dtype;

const char *dt_name(rl_dtype t);                 // "f32", "bf16", "f16", "int8"
int dt_parse(const char *s, rl_dtype *out);      // accepts the names above; 0 ok, -1 unknown
size_t dt_size(rl_dtype t);                      // bytes per element (int8: 1, scales apart)

// bf16 is the top half of an f32; rounding to nearest even, NaN kept quiet.
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t f32_to_bf16(float f);
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

#endif
