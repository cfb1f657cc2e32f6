// dtype.c — conversions between f32 and the stored weight types.
#include "dtype.h"

#include <math.h>

const char *dt_name(rl_dtype t) {
    switch (t) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I8: return "int8";
    case DT_FP8: return "fp8";
    }
    return "?";
}

int dt_parse(const char *s, rl_dtype *out) {
    for (int t = DT_F32; t <= DT_FP8; t++)
        if (strcmp(s, dt_name((rl_dtype)t)) == 0) {
            *out = (rl_dtype)t;
            return 0;
        }
    return -1;
}

size_t dt_size(rl_dtype t) {
    return t == DT_F32 ? 4 : dt_scaled(t) ? 1 : 2;
}


float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0) {                                   // zero or subnormal: man * 2^-24
        f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    uint32_t u = exp == 31 ? sign | 0x7f800000u | (man << 13)
                           : sign | ((exp + 112) << 23) | (man << 13);
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(f);
    if (a != a) return sign | 0x7e00;                            // NaN
    if (a >= 65520.0f) return sign | 0x7c00;                     // rounds to inf
    if (a < 6.103515625e-05f) {                                  // subnormal: units of 2^-24
        float m = nearbyintf(ldexpf(a, 24));                     // current mode: nearest even
        return sign | (uint16_t)m;
    }
    memcpy(&u, &a, 4);
    uint32_t r = u + 0xfffu + ((u >> 13) & 1);                   // round mantissa to 10 bits
    return sign | (uint16_t)(((r >> 23) - 112) << 10 | ((r >> 13) & 0x3ff));
}

void dt_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void dt_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

void dt_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

void dt_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_f16(src[i]);
}

void dt_quantize_i8(int8_t *q, float *scales, const float *x, size_t rows, size_t cols, int group) {
    size_t ng = (cols + (size_t)group - 1) / (size_t)group;
    for (size_t r = 0; r < rows; r++)
        for (size_t g = 0; g < ng; g++) {
            size_t c0 = g * (size_t)group, c1 = c0 + (size_t)group < cols ? c0 + (size_t)group : cols;
            const float *xr = x + r * cols;
            float amax = 0;
            for (size_t c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(xr[c]));
            float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0;
            scales[r * ng + g] = s;
            for (size_t c = c0; c < c1; c++) {
                long v = lrintf(xr[c] * inv);
                q[r * cols + c] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            }
        }
}

void dt_dequantize_i8(float *x, const int8_t *q, const float *scales, size_t rows, size_t cols, int group) {
    size_t ng = (cols + (size_t)group - 1) / (size_t)group;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            x[r * cols + c] = (float)q[r * cols + c] * scales[r * ng + c / (size_t)group];
}

uint8_t f32_to_e4m3(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    float a = fabsf(f);
    if (a != a) return sign | 0x7f;                              // NaN
    if (a >= 448.0f) return sign | 0x7e;                         // saturated to 448
    if (a < 0x1p-6f) return sign | (uint8_t)nearbyintf(a * 512.0f);   // subnormal: units of 2^-9 (8 is 2^-6)
    memcpy(&u, &a, 4);
    uint32_t r = u + 0x7ffffu + ((u >> 20) & 1);                 // round the mantissa to 3 bits
    uint32_t code = (((r >> 23) - 120) << 3) | ((r >> 20) & 7);
    return sign | (uint8_t)(code > 0x7e ? 0x7e : code);
}

void dt_quantize_fp8(uint8_t *q, float *scales, const float *x, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float amax = 0;
        for (size_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(xr[c]));
        float s = amax / 448.0f, inv = s > 0 ? 1.0f / s : 0;
        scales[r] = s;
        for (size_t c = 0; c < cols; c++) q[r * cols + c] = f32_to_e4m3(xr[c] * inv);
    }
}

void dt_dequantize_fp8(float *x, const uint8_t *q, const float *scales, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) x[r * cols + c] = e4m3_to_f32(q[r * cols + c]) * scales[r];
}
