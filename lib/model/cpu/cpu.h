// cpu/cpu.h — what the files of the CPU backend share: the kernels in use
// (kernels.h), the work sizes that decide threading, and the operations
// defined outside cpu.c (attention.c, train.c) for the table of ops_cpu().
// Not a public interface: callers use ops.h.
#ifndef RLPIPE_CPU_CPU_H
#define RLPIPE_CPU_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "model/cpu/kernels.h"
#include "model/ops.h"

// Work below this many elements stays on the calling thread: waking the
// others costs more (a decoding step of one token is all small operations).
#define PAR_MIN 32768
// Products whose weights are one panel wide (PANEL_ROWS rows or fewer: a LoRA
// adapter's rank) share out their input rows instead, in blocks of this many
// whatever the number of threads, so that their bits do not depend on it.
#define ROW_BLOCK 64
#define CHUNK 4096   // elements per part of elementwise loops

// max_j x[j] (the order of a max does not matter, so the loop vectorises)
static inline float cpu_row_max(const float *x, int n) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

// attention.c
void cpu_attention(float *out, float *lse, const float *q, const void *k, const void *v, rl_dtype kvt,
                   const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS);
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, const rl_attn_seq *seqs,
                            int nseq, int N, int NH, int NKV, int HS);

// train.c
void cpu_matmul_dx(float *dx, const float *dout, const rl_mat *W, int N, int accumulate);
void cpu_matmul_dw(float *dW, float *dbias, const float *dout, const float *x, int N, int M, int K);
void cpu_rmsnorm_backward(float *dx, float *dg, const float *dout, const float *x, const float *g, int N, int C,
                          float eps);
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                         int F);
void cpu_embed_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C);
void cpu_zero(float *x, size_t n);
double cpu_sumsq(const float *x, size_t n);
void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, const rl_adamw *h);

#endif
