// cpu/bf16.h — f32 rows whose values are all bf16 ones (as the bf16
// precision rounds a product's input), copied as bf16 for the products
// that multiply bf16 pairs (vdpbf16ps in kernels_avx512.c, AMX tiles in amx.c).
#ifndef RLPIPE_CPU_BF16_H
#define RLPIPE_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>

// xb[i] = x[i] as bf16 for i < n when every x[i] is a bf16 value (its low
// 16 bits zero): returns 1; else 0, xb partly written.
int bf16_exact(uint16_t *xb, const float *x, size_t n);

#endif
