// cpu/train.c — the backward of the CPU backend's operations (but attention,
// in attention.c, and rope and logprob, next to their forward in cpu.c) and
// the optimizer. Every output element is written by one thread only, so
// results do not depend on the number of threads or on timing.
//
// The products run on the build's panel kernel (kernels.h gemm_panels), the
// forward's: their second operand, read by columns, is packed into panels
// of its transpose (pack.h pack_panels_t), 16 contiguous floats a row, and
// the parts split its panels, every part with all the input rows (so that
// the kernel's blocks, which depend on those rows, are the same for any
// number of threads). Not OpenBLAS's sgemm, which stays where a build has
// no panel kernel or RLPIPE_CPU_PANELS=0: OpenBLAS 0.3.21 runs its SSE3
// kernel on processors it does not know (a KVM guest's Xeon of model 207:
// 33 GFLOP/s a core against 155 with its AVX-512 kernel), where sgemm took
// three quarters of the learner's time.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "model/cpu/cpu.h"
#include "model/cpu/kernels.h"
#include "model/cpu/mem.h"
#include "model/cpu/pack.h"
#include "model/cpu/pool.h"
#include "util.h"

typedef struct {
    float *out, *out2;          // dx / dW / dg / dtable / dgate;  dup
    const float *dout, *x, *w;  // w: weights, norm gains or gate
    const float *u;             // up (swiglu)
    const float *r;             // per row 1/rms (rmsnorm)
    const int32_t *ids;
    const float *panels;        // the products' second operand, packed (pack_panels_t)
    float *t;                   // doutᵀ (M, N)
    int N, M, K;
    int ldo;                    // matmul_dx: dx's row stride (K but for bf16 weights' column blocks)
    float beta, eps;
} targs;

// The buffers of the backward's products, one per purpose and calling
// thread, kept from one call to the next: they are of the same few sizes at
// every step, and fresh memory costs a page fault and a cleared page.
enum { BUF_PANELS, BUF_T, BUF_WIDE, NBUF };
static _Thread_local float *bufs[NBUF];

static float *buf(int which, size_t n) {
    if (!bufs[which] || cpu_mem_size(bufs[which]) < n * sizeof(float)) {
        cpu_mem_free(bufs[which]);
        bufs[which] = cpu_mem_alloc(n * sizeof(float));
    }
    return bufs[which];
}

// 1 where the products go to the panel kernel
static int use_panels(void) {
    return cpu_K->gemm_panels && (cpu_K->panels_for >> DT_F32 & 1) && cpu_panels_allowed();
}

// panels [lo, hi) of the transpose of a->x (a->N rows of a->K)
static void pack_t_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    pack_panels_t((float *)a->panels, a->x, (size_t)a->K, a->N, a->K, lo, hi);
}

// The panels of aᵀ for a (R, C): ceil(C / 16) panels of R · 16 floats.
static const float *pack_t(const float *x, int R, int C) {
    int np = (C + PANEL_ROWS - 1) / PANEL_ROWS;
    targs a = {.panels = buf(BUF_PANELS, (size_t)np * R * PANEL_ROWS), .x = x, .N = R, .K = C};
    pool_for(np, 1, PAR_MIN / (R * PANEL_ROWS) + 1, pack_t_part, &a);
    return a.panels;
}

// ---- matmul_dx: dx (N, K) = dout (N, M) · W (M, K) --------------------------
// Panels: dx's columns [lo, hi) = dout · (Wᵀ's rows [lo, hi))ᵀ.

static void dx_panels_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cpu_K->gemm_panels(a->out + lo, (size_t)a->ldo, a->dout, a->N, NULL, DT_F32,
                       a->panels + (size_t)(lo / PANEL_ROWS) * a->M * PANEL_ROWS, hi - lo, a->M, a->beta != 0);
}

static void dx_rows_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, a->K, a->M, 1.0f, a->dout + (size_t)lo * a->M,
                a->M, a->w, a->K, a->beta, a->out + (size_t)lo * a->ldo, a->ldo);
}

static void dx_cols_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a->N, hi - lo, a->M, 1.0f, a->dout, a->M, a->w + lo,
                a->K, a->beta, a->out + lo, a->ldo);
}

// dx's rows [lo, hi), every column: dx one panel wide (ROW_BLOCK)
static void dx_panel_rows_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cpu_K->gemm_panels(a->out + (size_t)lo * a->ldo, (size_t)a->ldo, a->dout + (size_t)lo * a->M, hi - lo, NULL,
                       DT_F32, a->panels, a->K, a->M, a->beta != 0);
}

// dx (N, a->K columns, row stride a->ldo) = dout (N, M) · w (M, K), w f32.
static void dx_f32(targs *a) {
    int N = a->N;
    if (use_panels()) {
        a->panels = pack_t(a->w, a->M, a->K);
        if (a->K <= PANEL_ROWS && N > 2 * ROW_BLOCK) pool_for(N, ROW_BLOCK, 0, dx_panel_rows_part, a);
        else pool_for(a->K, PANEL_ROWS, (int)(PAR_MIN / ((long)N * a->M)) + 1, dx_panels_part, a);
        return;
    }
    // Each thread packs the whole of the other operand: split the larger side.
    if ((long)N * a->M * a->K < PAR_MIN) dx_rows_part(a, 0, N);
    else if (N >= a->K) pool_for(N, 4, 0, dx_rows_part, a);
    else pool_for(a->K, 16, 0, dx_cols_part, a);
}

// widen rows [lo, hi) of a bf16 matrix's column block into a->t (rows of a->K)
static void widen_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    const uint16_t *w = (const uint16_t *)a->x;   // the block's first column of row 0; row stride a->ldo
    for (int m = lo; m < hi; m++) dt_bf16_to_f32(a->t + (size_t)m * a->K, w + (size_t)m * a->ldo, (size_t)a->K);
}

enum { DX_WIDE_COLS = 256 };   // bf16 weights: columns widened at a time

void cpu_matmul_dx(float *dx, const float *dout, const rl_mat *W, int N, int accumulate) {
    if (W->dtype != DT_F32 && W->dtype != DT_BF16) {
        fprintf(stderr, "rlpipe: the backward of matmul needs f32 or bf16 weights, got %s\n", dt_name(W->dtype));
        abort();
    }
    if (N <= 0) return;
    int M = W->rows, K = W->cols;
    float beta = accumulate ? 1.0f : 0.0f;
    if (W->dtype == DT_F32) {
        targs a = {.out = dx, .dout = dout, .w = W->data, .N = N, .M = M, .K = K, .ldo = K, .beta = beta};
        dx_f32(&a);
        return;
    }
    // bf16: dx's columns a block at a time, from W's columns widened to f32
    // (M, cols): the values the forward multiplies, in scratch of M · 256 floats.
    for (int k0 = 0; k0 < K; k0 += DX_WIDE_COLS) {
        int kb = K - k0 < DX_WIDE_COLS ? K - k0 : DX_WIDE_COLS;
        targs wa = {.t = buf(BUF_WIDE, (size_t)M * kb), .x = (const float *)((const uint16_t *)W->data + k0),
                    .K = kb, .ldo = K};
        pool_for(M, 16, PAR_MIN / kb + 1, widen_part, &wa);
        targs a = {.out = dx + k0, .dout = dout, .w = wa.t, .N = N, .M = M, .K = kb, .ldo = K, .beta = beta};
        dx_f32(&a);
    }
}

// ---- matmul_dw: dW (M, K) += doutᵀ (M, N) · x (N, K); dbias (M) += Σ_n dout --
// Panels: doutᵀ made (t), then dW's columns [lo, hi) += t · (xᵀ's rows [lo, hi))ᵀ.

// t (M, N) = doutᵀ for dout's columns [lo, hi), in 16 × 16 blocks
static void transpose_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    for (int n0 = 0; n0 < a->N; n0 += 16)
        for (int m0 = lo; m0 < hi; m0 += 16) {
            int n1 = n0 + 16 < a->N ? n0 + 16 : a->N, m1 = m0 + 16 < hi ? m0 + 16 : hi;
            for (int m = m0; m < m1; m++)
                for (int n = n0; n < n1; n++) a->t[(size_t)m * a->N + n] = a->dout[(size_t)n * a->M + m];
        }
}

static void dw_panels_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cpu_K->gemm_panels(a->out + lo, (size_t)a->K, a->t, a->M, NULL, DT_F32,
                       a->panels + (size_t)(lo / PANEL_ROWS) * a->N * PANEL_ROWS, hi - lo, a->N, 1);
}

// dW's rows [lo, hi), every column: dW one panel wide (ROW_BLOCK)
static void dw_panel_rows_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cpu_K->gemm_panels(a->out + (size_t)lo * a->K, (size_t)a->K, a->t + (size_t)lo * a->N, hi - lo, NULL, DT_F32,
                       a->panels, a->K, a->N, 1);
}

static void dw_rows_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, a->K, a->N, 1.0f, a->dout + lo, a->M, a->x,
                a->K, 1.0f, a->out + (size_t)lo * a->K, a->K);
}

static void dw_cols_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, a->M, hi - lo, a->N, 1.0f, a->dout, a->M, a->x + lo,
                a->K, 1.0f, a->out + lo, a->K);
}

// Σ over rows of the columns [lo, hi) of a (N, M) matrix, added to out2.
static void colsum_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    float *acc = xmalloc((size_t)(hi - lo) * sizeof(float));
    memset(acc, 0, (size_t)(hi - lo) * sizeof(float));
    for (int n = 0; n < a->N; n++) {
        const float *d = a->dout + (size_t)n * a->M + lo;
#pragma omp simd
        for (int m = 0; m < hi - lo; m++) acc[m] += d[m];
    }
    for (int m = 0; m < hi - lo; m++) a->out2[lo + m] += acc[m];
    free(acc);
}

void cpu_matmul_dw(float *dW, float *dbias, const float *dout, const float *x, int N, int M, int K) {
    if (N <= 0) return;
    targs a = {.out = dW, .out2 = dbias, .dout = dout, .x = x, .N = N, .M = M, .K = K};
    if (use_panels()) {
        a.t = buf(BUF_T, (size_t)M * N);
        pool_for(M, 16, (int)(PAR_MIN / N) + 1, transpose_part, &a);
        a.panels = pack_t(x, N, K);
        if (K <= PANEL_ROWS && M > 2 * ROW_BLOCK) pool_for(M, ROW_BLOCK, 0, dw_panel_rows_part, &a);
        else pool_for(K, PANEL_ROWS, (int)(PAR_MIN / ((long)N * M)) + 1, dw_panels_part, &a);
    } else if ((long)N * M * K < PAR_MIN) {
        dw_rows_part(&a, 0, M);
    } else if (M >= K) {
        pool_for(M, 16, 0, dw_rows_part, &a);
    } else {
        pool_for(K, 16, 0, dw_cols_part, &a);
    }
    if (dbias) pool_for(M, 16, PAR_MIN / N, colsum_part, &a);
}

// ---- rmsnorm_backward -----------------------------------------------------
// out = x·r·g with r = (mean(x²) + eps)^(−1/2):
//   dx_c += r·g_c·dout_c − r³·x_c·(Σ_j dout_j g_j x_j) / C;   dg_c += Σ_n dout_nc x_nc r_n
// dx a row per thread, then dg a block of columns per thread.

static void rmsnorm_dx_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    int C = a->K;
    float *rr = (float *)a->r;
    for (int i = lo; i < hi; i++) {
        const float *xi = a->x + (size_t)i * C, *di = a->dout + (size_t)i * C, *g = a->w;
        float *dx = a->out + (size_t)i * C;
        float ss = 0, s = 0;
#pragma omp simd reduction(+ : ss, s)
        for (int c = 0; c < C; c++) {
            ss += xi[c] * xi[c];
            s += di[c] * g[c] * xi[c];
        }
        float r = 1.0f / sqrtf(ss / (float)C + a->eps), k = r * r * r * s / (float)C;
#pragma omp simd
        for (int c = 0; c < C; c++) dx[c] += r * g[c] * di[c] - k * xi[c];
        rr[i] = r;
    }
}

static void rmsnorm_dg_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    int C = a->K;
    float *acc = xmalloc((size_t)(hi - lo) * sizeof(float));
    memset(acc, 0, (size_t)(hi - lo) * sizeof(float));
    for (int n = 0; n < a->N; n++) {
        const float *xn = a->x + (size_t)n * C + lo, *dn = a->dout + (size_t)n * C + lo;
        float r = a->r[n];
#pragma omp simd
        for (int c = 0; c < hi - lo; c++) acc[c] += dn[c] * xn[c] * r;
    }
    for (int c = 0; c < hi - lo; c++) a->out2[lo + c] += acc[c];
    free(acc);
}

void cpu_rmsnorm_backward(float *dx, float *dg, const float *dout, const float *x, const float *g, int N, int C,
                          float eps) {
    if (N <= 0) return;
    float *r = xmalloc((size_t)N * sizeof(float));
    targs a = {.out = dx, .out2 = dg, .dout = dout, .x = x, .w = g, .r = r, .N = N, .K = C, .eps = eps};
    pool_for(N, 1, PAR_MIN / C, rmsnorm_dx_part, &a);
    if (dg) pool_for(C, 16, PAR_MIN / N, rmsnorm_dg_part, &a);   // NULL: a frozen norm weight
    free(r);
}

// ---- swiglu_backward ------------------------------------------------------

static void swiglu_backward_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    size_t n = (size_t)a->N * a->K, i0 = (size_t)lo * CHUNK, i1 = (size_t)hi * CHUNK < n ? (size_t)hi * CHUNK : n;
    cpu_K->swiglu_backward(a->out + i0, a->out2 + i0, a->dout + i0, a->w + i0, a->u + i0, (int)(i1 - i0));
}

void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                         int F) {
    size_t n = (size_t)N * F;
    targs a = {.out = dgate, .out2 = dup, .dout = dout, .w = gate, .u = up, .N = N, .K = F};
    pool_for((int)((n + CHUNK - 1) / CHUNK), 1, PAR_MIN / CHUNK, swiglu_backward_part, &a);
}

// ---- embed_backward: a block of columns per thread, as ids may repeat -------

static void embed_backward_part(void *ctx, int lo, int hi) {
    const targs *a = ctx;
    int C = a->K;
    for (int i = 0; i < a->N; i++) {
        float *row = a->out + (size_t)a->ids[i] * C;
        const float *d = a->dout + (size_t)i * C;
#pragma omp simd
        for (int c = lo; c < hi; c++) row[c] += d[c];
    }
}

void cpu_embed_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C) {
    if (N <= 0) return;
    targs a = {.out = dtable, .dout = dout, .ids = ids, .N = N, .K = C};
    pool_for(C, 16, PAR_MIN / N, embed_backward_part, &a);
}

// ---- zero, sumsq, adamw: flat loops over CHUNK-element parts ----------------

typedef struct {
    float *p, *m, *v;
    const float *g;
    double *part;           // sumsq: one sum per chunk
    size_t n;
    const rl_adamw_f32 *h;
} flat;

// Elements [*i0, *i1) of chunks [lo, hi)
static void chunk_range(const flat *f, int lo, int hi, size_t *i0, size_t *i1) {
    *i0 = (size_t)lo * CHUNK;
    *i1 = (size_t)hi * CHUNK < f->n ? (size_t)hi * CHUNK : f->n;
}

static int chunks(size_t n) { return (int)((n + CHUNK - 1) / CHUNK); }

static void zero_part(void *ctx, int lo, int hi) {
    const flat *f = ctx;
    size_t i0, i1;
    chunk_range(f, lo, hi, &i0, &i1);
    memset(f->p + i0, 0, (i1 - i0) * sizeof(float));
}

void cpu_zero(float *x, size_t n) {
    flat f = {.p = x, .n = n};
    pool_for(chunks(n), 1, PAR_MIN / CHUNK, zero_part, &f);
}

// Σ x² of x[0, n) in double: element i into lane i % SQ_LANES, the lanes
// then summed in a fixed tree. Each square of a float is exact in double, so
// an FMA gives the same bits as a multiply and an add: every build (and any
// vector width the compiler chooses) has the same sum. Eight chains, not
// one: a single running sum waits on each add (4 cycles an element).
// (Four pairs in registers: SSE2's width, which every x86-64 build has.)
enum { SQ_LANES = 8 };
typedef double sq_pair __attribute__((vector_size(16)));
static double sumsq_lanes(const float *x, size_t n) {
    sq_pair a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};   // lanes 0 1, 2 3, 4 5, 6 7
    size_t i = 0;
    for (; i + SQ_LANES <= n; i += SQ_LANES) {
        const float *p = x + i;
        sq_pair v0 = {p[0], p[1]}, v1 = {p[2], p[3]}, v2 = {p[4], p[5]}, v3 = {p[6], p[7]};
        a0 += v0 * v0, a1 += v1 * v1, a2 += v2 * v2, a3 += v3 * v3;
    }
    double l[SQ_LANES] = {a0[0], a0[1], a1[0], a1[1], a2[0], a2[1], a3[0], a3[1]};
    for (int k = 0; i < n; i++, k++) l[k] += (double)x[i] * x[i];
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static void sumsq_part(void *ctx, int lo, int hi) {
    const flat *f = ctx;
    for (int c = lo; c < hi; c++) {
        size_t i0, i1;
        chunk_range(f, c, c + 1, &i0, &i1);
        f->part[c] = sumsq_lanes(f->g + i0, i1 - i0);
    }
}

// Summed per chunk, then the chunks in order: the same result on any number of threads.
double cpu_sumsq(const float *x, size_t n) {
    int nc = chunks(n);
    flat f = {.g = x, .n = n, .part = xmalloc((size_t)nc * sizeof(double))};
    pool_for(nc, 1, PAR_MIN / CHUNK, sumsq_part, &f);
    double s = 0;
    for (int c = 0; c < nc; c++) s += f.part[c];
    free(f.part);
    return s;
}

static void adamw_part(void *ctx, int lo, int hi) {
    const flat *f = ctx;
    size_t i0, i1;
    chunk_range(f, lo, hi, &i0, &i1);
    cpu_K->adamw(f->p + i0, f->g + i0, f->m + i0, f->v + i0, (int)(i1 - i0), f->h);
}

void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, const rl_adamw *h) {
    rl_adamw_f32 s = adamw_f32(h);
    flat f = {.p = p, .g = g, .m = m, .v = v, .n = n, .h = &s};
    pool_for(chunks(n), 1, PAR_MIN / CHUNK, adamw_part, &f);
}
