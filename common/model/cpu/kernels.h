// cpu/kernels.h — the inner loops of the CPU backend, in two builds: AVX2 +
// FMA + F16C (chosen at run time when the processor has them) and portable C.
// Each works on one row or one contiguous run; cpu.c, attention.c and train.c
// spread them over threads.
#ifndef RLPIPE_CPU_KERNELS_H
#define RLPIPE_CPU_KERNELS_H

#include <stdint.h>

#include "model/ops.h"

typedef struct {
    // Σ_k x[k] · w[k] for one weight row w of K elements stored as W->dtype;
    // scales: that row's int8 scales (NULL otherwise).
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
} cpu_kernels;

// The kernels in use: NULL until cpu_kernels_choose() sets them once (ops_cpu
// calls it) to the AVX2 build where the processor has it and the environment
// does not set RLPIPE_CPU_PORTABLE, else to the portable one.
extern const cpu_kernels *cpu_K;
void cpu_kernels_choose(void);

#endif
