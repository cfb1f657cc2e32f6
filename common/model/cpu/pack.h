// cpu/pack.h — bf16 weight matrices packed once in panels for the many-row
// product (kernels.h gemm_panels), kept beside the matrices they copy.
//
// The layout: panel p holds weight rows [16p, 16p + 16) and, for each pair
// q of inputs (k = 2q and 2q + 1), their 16 × 2 values side by side:
//     panels[(p·KP + q)·32 + 2i + j] = w[16p + i][2q + j],   KP = ceil(K / 2),
// zero past the last row and the last input. So one 64-byte vector holds a
// pair of inputs for 16 outputs, and a product walks each panel from its
// start to its end, adding into 16 outputs at once (no sums across lanes),
// where the rows' own layout asks one row per output and the lanes summed
// at the end. Decoding's many-row products read the weights from memory at
// every step: the panels are made when a matrix is first multiplied after
// it was written, not at every product.
//
// The CPU backend writes a matrix only through upload; its upload and free
// forget the panels of whatever they overwrite or give back.
#ifndef RLPIPE_CPU_PACK_H
#define RLPIPE_CPU_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "model/ops.h"

enum { PANEL_ROWS = 16 };

// Elements of one panel of K inputs (KP pairs × 32)
static inline size_t panel_elems(int K) { return (size_t)(K + 1) / 2 * 2 * PANEL_ROWS; }

// Panels [p0, p1) of the bf16 matrix w (M, K) into panels (the layout above).
void pack_panels(uint16_t *panels, const uint16_t *w, int M, int K, int p0, int p1);

// The panels of the bf16 matrix W, made now (spread over the threads) if
// its data was written since, or never packed; NULL when RLPIPE_CPU_PANELS=0
// forbids them (the product then reads the rows as stored).
const uint16_t *cpu_panels(const rl_mat *W);

// Forgets (and frees) the panels of every matrix whose data overlaps
// [p, p + bytes).
void cpu_panels_forget(const void *p, size_t bytes);

#endif
