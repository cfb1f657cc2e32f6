// cpu/pack.h — f32, bf16 and int8 weight matrices packed once in panels
// for the many-row products (kernels.h gemm_panels, gemm_i8), kept beside
// the matrices they copy.
//
// The layout: panel p holds weight rows [16p, 16p + 16), 64 bytes for each
// step along the inputs, a step's 16 rows side by side:
//     f32:  panels[(p·K + k)·16 + i]          = w[16p + i][k];
//     bf16: panels[(p·KP + q)·32 + 2i + j]    = w[16p + i][2q + j],  KP = ceil(K / 2)
//     int8: panels[(p·KQ + q)·64 + 4i + j]    = w[16p + i][4q + j],  KQ = ceil(K / 4)
// (a bf16 step is a pair of inputs, as vdpbf16ps multiplies them, an int8
// step 4 inputs, as vpdpbusd and AMX's tdpbssd do), zero past the last row
// and the last input. A product walks each panel from its
// start to its end, adding into 16 outputs at once (no sums across lanes),
// where the rows' own layout asks one row per output and the lanes summed
// at the end. Decoding's many-row products read the weights from memory at
// every step: the panels are made when a matrix is first multiplied after
// it was written, not at every product. Products of very many rows (a
// learner's, a scorer's) pack a matrix for themselves when no panels are
// kept, and keep none (cpu_panels_once): the copy costs memory, not time.
//
// Only fixed matrices (ops.h rl_mat: written only through upload) are
// packed; the CPU backend's upload and free forget the panels of whatever
// they overwrite or give back.
#ifndef RLPIPE_CPU_PACK_H
#define RLPIPE_CPU_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "model/ops.h"

enum { PANEL_ROWS = 16 };

// Bytes of one panel of K inputs: 64 a step (f32: one input, bf16: a pair,
// int8: 4)
static inline size_t panel_bytes(rl_dtype dt, int K) {
    return (dt == DT_BF16 ? (size_t)(K + 1) / 2 : dt == DT_I8 ? (size_t)(K + 3) / 4 : (size_t)K) * 64;
}

// The int8 products' packing: rows [0, rows) of w (row stride ldw), 4
// inputs of each of `lanes` rows side by side, zero past `rows` and past K
// rounded up to 4: p[(k / 4)·4·lanes + 4r + k % 4] = w[r][k] (K4 · lanes
// bytes). With 16 lanes, one int8 panel.
void pack4_i8(int8_t *p, const int8_t *w, size_t ldw, int rows, int K, int lanes);

// Panels [p0, p1) of the matrix w (M, K), f32, bf16 or int8 (dt), into
// panels (the layout above).
void pack_panels(void *panels, const void *w, rl_dtype dt, int M, int K, int p0, int p1);

// Panels [p0, p1) of the transpose of the f32 matrix a (R rows of C, row
// stride lda): the panels of aᵀ (C, R), panel p holding a's columns
// [16p, 16p + 16): panels[(p·R + r)·16 + i] = a[r][16p + i], zero past
// column C. A strip of 16 contiguous floats per row: the backward's products
// (cpu/train.c), whose second operand is a matrix read by columns.
void pack_panels_t(float *panels, const float *a, size_t lda, int R, int C, int p0, int p1);

// 1 unless RLPIPE_CPU_PANELS=0 forbids panels (read at every product, so
// that a program, a test or a benchmark, can turn them off and on).
int cpu_panels_allowed(void);

// The panels of the fixed f32, bf16 or int8 matrix W, made now (spread over the
// threads) if its data was written since, or never packed; NULL for a
// matrix not fixed, or when RLPIPE_CPU_PANELS=0 forbids them (the product
// then reads the rows as stored).
const void *cpu_panels(const rl_mat *W);
// The panels cpu_panels keeps for W, without making them: NULL when there
// are none (yet), as for cpu_panels.
const void *cpu_panels_kept(const rl_mat *W);

// The panels of the f32, bf16 or int8 matrix W, fixed or not, made now for
// one product (spread over the threads): for a learner's matrices, which
// AdamW writes in place at every step. Given back with cpu_panels_release,
// which keeps the buffer for the next panels of its size (fresh memory
// costs a page fault and a cleared page each time). NULL when
// RLPIPE_CPU_PANELS=0 forbids them.
void *cpu_panels_once(const rl_mat *W);
void cpu_panels_release(void *panels, const rl_mat *W);

// Forgets the panels of every matrix whose data overlaps [p, p + bytes):
// when freed (the matrix's memory is given back) they and every spare are
// freed, else (it is written) they are kept as spares for the next panels of
// their size.
void cpu_panels_forget(const void *p, size_t bytes, int freed);

#endif
