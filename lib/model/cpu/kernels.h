// cpu/kernels.h — the inner loops of the CPU backend, in four builds:
// AVX-512 with AMX (bf16 panels and int8 products on AMX tiles, amx.h; the
// rest as the next), AVX-512 with VNNI (int8 products; with AVX512VL/DQ also
// many-row products, bf16 rounding and decoding attention on 16 lanes; the
// rest as AVX2; kernels_avx512.c), AVX2 + FMA + F16C (kernels_avx2.c), and
// portable C (kernels.c), the first the processor has chosen at run time.
// Each works on one row or one contiguous run; cpu.c, attention.c and train.c
// spread them over threads.
#ifndef RLPIPE_CPU_KERNELS_H
#define RLPIPE_CPU_KERNELS_H

#include <stdint.h>

#include "model/ops.h"

typedef struct {
    const char *name;   // "avx512-amx", "avx512-vnni", "avx2" or "portable"
    // Σ_k x[k] · w[k] for one weight row w of K elements stored as W->dtype;
    // scales: that row's int8 or fp8 scales (NULL otherwise), each applied to
    // the sum over its group.
    float (*dot)(const float *x, const void *w, const float *scales, int K, int group, rl_dtype dt);
    // out[k] = w[k] as f32 (one row of K elements)
    void (*row_to_f32)(float *out, const void *w, const float *scales, int K, int group, rl_dtype dt);
    // Σ_i exp((x[i] - max) · scale)
    float (*sum_exp)(const float *x, int n, float max, float scale);
    // out[i] = silu(g[i]) · u[i]
    void (*swiglu)(float *out, const float *g, const float *u, int n);
    // out[i] = exp((x[i] - sub) · scale), returning Σ_i out[i]; out may equal x.
    // The AVX2 build clamps the argument to [-87, 88] (callers subtract a maximum).
    float (*exp_row)(float *out, const float *x, int n, float sub, float scale);
    // The backward of swiglu: dg[i] = d[i] · u[i] · silu'(g[i]), du[i] = d[i] · silu(g[i]),
    // with silu'(g) = σ(g)·(1 + g·(1 − σ(g))); dg or du may equal d.
    void (*swiglu_backward)(float *dg, float *du, const float *d, const float *g, const float *u, int n);
    // AdamW on n parameters, its scalars already in float (rl_adamw_f32)
    void (*adamw)(float *p, const float *g, float *m, float *v, int n, const rl_adamw_f32 *h);
    // x[i] = the bf16 value nearest x[i] (ties to even; NaN made quiet, as
    // dtype.h's f32_to_bf16), kept as f32, in place: the same bits on every build.
    void (*round_bf16)(float *x, int n);
    // One row x (K) of a product's input to int8 (ops.h ACT_I8): q (K); returns its scale.
    float (*quant_i8)(int8_t *q, const float *x, int K);
    // One row x (K) to fp8 e4m3 (ops.h ACT_FP8), the values kept as f32: q (K); returns its scale.
    float (*quant_fp8)(float *q, const float *x, int K);
    // out[j·nw + i] = Σ_k x[j·ldx + k] · w[i·ldw + k], exact in int32, for
    // j < nx (1 to 4) and i < nw (1 to 16): int8 input rows against int8
    // weight rows, all values in [-127, 127] as quantization gives them.
    void (*dots_i8)(int32_t *out, const int8_t *x, size_t ldx, int nx, const int8_t *w, size_t ldw, int nw, int K);
    // Many input rows (NULL where a build has no faster way than dots_i8):
    // out[n·ldo + m] = (float)(Σ_k x[n·K + k] w[m·K + k]) · sw[m] · sx[n] for
    // n < N, m < M (ops.h ACT_I8's product; the sum exact in int32).
    // panels: w packed (pack.h, w's first row at a panel's start) for a
    // build with i8_panels set (AMX), which packs w itself when NULL; the
    // others ignore it.
    void (*gemm_i8)(float *out, size_t ldo, const int8_t *x, const float *sx, int N, const int8_t *w,
                    const void *panels, const float *sw, int M, int K);
    int i8_panels;   // 1: gemm_i8 reads int8 panels (the backend makes them once per weight update)
    // Many input rows against f32 or bf16 weight rows as stored (dt; NULL
    // where a build has no faster way than converting them for sgemm):
    // out[n·ldo + m] = Σ_k x[n·K + k] w[m·K + k] for n < N, m < M, summed in
    // f32 (in an order of the build's own). When every x is a bf16 value (the
    // bf16 precision rounds a product's input so) and the processor has
    // AVX512_BF16, bf16 pairs are multiplied by vdpbf16ps, whose products are
    // exact and whose f32 sums treat subnormals as zero.
    void (*gemm)(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt, int M, int K);
    // gemm's product, read from the same weights packed in panels (pack.h;
    // panels holds those of w's rows, w's first row at a panel's start), for
    // the dtypes in panels_for (bit 1 << dt; NULL and 0 in the portable
    // build). The AVX2 build: f32 and bf16 weights (widened exactly) by FMA
    // on 8 lanes, any inputs. AVX-512: f32 by FMA on 16 lanes; bf16 by
    // vdpbf16ps (AVX512_BF16) where every x is a bf16 value, else gemm on
    // w's rows, and as the AVX2 build on processors without AVX512_BF16.
    // AMX: bf16 on AMX tiles (amx.h) where every x is a bf16 value.
    // add (f32 weights only; 0 for bf16): 1 adds the sums to out's values, as
    // the backward's products accumulate (cpu/train.c).
    void (*gemm_panels)(float *out, size_t ldo, const float *x, int N, const void *w, rl_dtype dt,
                        const void *panels, int M, int K, int add);
    unsigned panels_for;
    // Decoding attention against one key/value head of the KV cache, for the
    // G query heads that share it; keys and values are T rows of HS elements
    // of dt (f32 or bf16) at a row stride of ld elements, summed in f32, in
    // the same order for either dt (a bf16 cache's values give an f32
    // cache's sums bit for bit):
    // S (G, T) = scale · q (G, HS) · Kᵀ, each sum over HS in an order of the build's own;
    void (*kv_scores)(float *S, const float *q, int G, const void *K, rl_dtype dt, size_t ld, int T, int HS,
                      float scale);
    // o (G, HS) = P (G, T) · V, each sum over t in order 0 .. T−1 (by FMA
    // but in the portable build).
    void (*kv_mix)(float *o, const float *P, int G, int T, const void *V, rl_dtype dt, size_t ld, int HS);
} cpu_kernels;

// The kernels in use: NULL until cpu_kernels_choose() sets them once (ops_cpu
// calls it) to the best build the processor has, else to the portable one.
// The environment can ask for less: RLPIPE_CPU_PORTABLE=1 the portable
// build, RLPIPE_CPU=avx512 no AMX, RLPIPE_CPU=avx2 no AVX-512 (tests run
// each path on one machine).
extern const cpu_kernels *cpu_K;
void cpu_kernels_choose(void);

#endif
