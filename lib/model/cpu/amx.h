// cpu/amx.h — many-row products on Intel's AMX tiles (AMX-BF16 and
// AMX-INT8: Sapphire Rapids and later Xeons): bf16 weights for kernels.h's
// gemm_panels, W8A8 int8 for its gemm_i8.
//
// A tile multiply (tdpbf16ps) takes 16 input rows × 32 bf16 inputs against
// a tile of 16 steps × 16 outputs, where a step is a pair of inputs for 16
// outputs side by side: 64 bytes, exactly a bf16 panel's step (pack.h). So
// the panels are read as they are, 16 steps a tile, with no repacking.
// Its sums are f32, in an order and with intermediate precision of the
// processor's own: not the bits of vdpbf16ps or of FMAs, and closer to the
// exact sum than either (measured on a Xeon: about a third of vdpbf16ps's
// error over 1280 products).
#ifndef RLPIPE_CPU_AMX_H
#define RLPIPE_CPU_AMX_H

#include <stddef.h>
#include <stdint.h>

// 1 when the processor has AMX-BF16 and AMX-INT8 and the kernel let this
// process use the tiles' registers (asked once, for the whole process); else 0.
int amx_available(void);

// out[n·ldo + m] = Σ_k x[n·K + k] w[m·K + k] for n < N, m < M, from w's bf16
// panels (pack.h, M rows, K inputs), when every x is a bf16 value; returns 1.
// Returns 0 as soon as it meets an x that is not one (out then partly
// written; the caller computes it another way). Call only when
// amx_available().
int amx_gemm_panels_bf16(float *out, size_t ldo, const float *x, int N, const uint16_t *panels, int M, int K);

// kernels.h gemm_i8's product: out[n·ldo + m] = (float)(Σ_k x[n·K + k]
// w[m·K + k]) · sw[m] · sx[n], the sums exact in int32 (tdpbssd), so the
// same bits as every other build; from w's int8 panels (pack.h), or, when
// panels is NULL, from w packed here. Call only when amx_available().
void amx_gemm_i8(float *out, size_t ldo, const int8_t *x, const float *sx, int N, const int8_t *w,
                 const void *panels, const float *sw, int M, int K);

#endif
