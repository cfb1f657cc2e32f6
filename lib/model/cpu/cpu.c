// cpu/cpu.c — the CPU backend of ops.h: the row kernels' many-row products of f32
// and bf16 weights (from the panels of pack.h where the build has a kernel
// for them), else OpenBLAS sgemm, for matrix products of many rows,
// row kernels (kernels.c and its builds) for the few-row products of decoding
// and for everything elementwise, spread over the threads of pool.h. OpenBLAS
// is kept single-threaded and called by each thread on its block of weight
// rows, so one set of threads does all the work. Attention is attention.c;
// the backward of the other operations and the optimizer are train.c.
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "model/cpu/cpu.h"
#include "model/cpu/mem.h"
#include "model/cpu/pack.h"
#include "model/cpu/pool.h"
#include "util.h"

void openblas_set_num_threads(int);   // OpenBLAS's own; not in every cblas.h

// Products with at most this many rows use the row kernels (the weights are
// read once from memory, converted on the fly); more rows go to the many-row
// products (matmul_sgemm_part).
#define FEW_ROWS 4
// Weight rows converted to f32 per product call when weights are not f32.
#define TILE_ROWS 128
// Products of at least this many rows pack the panels for themselves,
// the packing (reading and writing the matrix once) a few % of the
// product's time there: on a matrix that is not fixed (a learner's), and
// on a fixed one whose panels are not kept yet, which they do not keep (a
// learner's frozen base under LoRA, a scorer's weights: only the products
// of fewer rows, a sampler's decoding, keep a second copy of a matrix). One
// thread, f32, N × 1536 × 576 (bench/forward gemm): on an Intel Xeon the
// panels ran at 1.05 to 1.11 times OpenBLAS sgemm's GFLOP/s at N = 256 and
// 2048, the rows at 0.68 to 0.80; on the AMD EPYC (AVX-512) panels 1.14
// times the rows at N = 4096 (bench/RESULTS.md). At 256 and 512 rows (2
// threads, the weights in cache) the packing cost what the panels gained.
#define ONCE_ROWS 1024

static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

// Writing or freeing a matrix makes its panels (pack.h) stale.
static void cpu_upload(void *dst, const void *src, size_t bytes) {
    cpu_panels_forget(dst, bytes, 0);
    memcpy(dst, src, bytes);
}

static void cpu_free(void *p) {
    if (p) cpu_panels_forget(p, cpu_mem_size(p), 1);
    cpu_mem_free(p);
}

static void cpu_sync(void) {}   // ops return when done

// Row r of a weight matrix and its int8 scales.
static const void *mat_row(const rl_mat *W, int r) {
    return (const char *)W->data + (size_t)r * W->cols * dt_size(W->dtype);
}

static const float *mat_scales(const rl_mat *W, int r) {
    if (!dt_scaled(W->dtype)) return NULL;
    return W->scales + (size_t)r * ((W->cols + W->group - 1) / W->group);
}

// The arguments of every operation, passed to the parts that threads run.
typedef struct {
    float *out;
    float *out2;             // a second output: entropies
    const float *x, *y;
    const float *y2;         // a second input: dloss/d(entropy)
    const float *vec;        // per column or row: norm weights, bias, cos/sin table, 1/temperature
    const int32_t *idx;      // per row: token ids, positions or targets
    const rl_mat *W;
    const void *panels;      // W packed (pack.h), for kernels.h gemm_panels and gemm_i8
    // A product's input quantized (ops.h rl_act), and each row's scale:
    // ACT_I8 rows in xq8 (N, K), ACT_FP8 rows in x (their e4m3 values).
    const int8_t *xq8;
    const float *xscale;
    int N, C, H, HS, V;
    float eps;
    float dir;               // rope: 1 turns by +angle, -1 by -angle
    float factor;            // scale
} args;

static void embed_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    for (int i = lo; i < hi; i++)
        cpu_K->row_to_f32(a->out + (size_t)i * a->C, mat_row(a->W, a->idx[i]), mat_scales(a->W, a->idx[i]),
                       a->C, a->W->group, a->W->dtype);
}

static void cpu_embed(float *out, const rl_mat *table, const int32_t *ids, int N) {
    args a = {.out = out, .W = table, .idx = ids, .C = table->cols};
    pool_for(N, 1, PAR_MIN / table->cols, embed_part, &a);
}

static void rmsnorm_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    int C = a->C;
    for (int i = lo; i < hi; i++) {
        const float *xi = a->x + (size_t)i * C;
        float *oi = a->out + (size_t)i * C;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += xi[c] * xi[c];
        float inv = 1.0f / sqrtf(ss / (float)C + a->eps);
        for (int c = 0; c < C; c++) oi[c] = xi[c] * inv * a->vec[c];
    }
}

static void cpu_rmsnorm(float *out, const float *x, const float *g, int N, int C, float eps) {
    args a = {.out = out, .x = x, .vec = g, .C = C, .eps = eps};
    pool_for(N, 1, PAR_MIN / C, rmsnorm_part, &a);
}

// out (N, M) = x (N, K) · Wᵀ for N <= FEW_ROWS, on weight rows [lo, hi).
static void matmul_few_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    const rl_mat *W = a->W;
    int M = W->rows, Kd = W->cols, N = a->N;
    float *row = N > 1 && W->dtype != DT_F32 ? xmalloc((size_t)Kd * sizeof(float)) : NULL;
    for (int m = lo; m < hi; m++) {
        const void *w = mat_row(W, m);
        const float *s = mat_scales(W, m);
        if (row) cpu_K->row_to_f32(row, w, s, Kd, W->group, W->dtype);
        for (int n = 0; n < N; n++) {
            float v = row ? cpu_K->dot(a->x + (size_t)n * Kd, row, NULL, Kd, 0, DT_F32)
                          : cpu_K->dot(a->x + (size_t)n * Kd, w, s, Kd, W->group, W->dtype);
            a->out[(size_t)n * M + m] = a->xscale ? v * a->xscale[n] : v;
        }
    }
    free(row);
}

// The same for many rows: f32 and bf16 weights by the build's kernel
// (kernels.h gemm), which reads them as stored; the other dtypes converted to
// f32 TILE_ROWS rows at a time, for that kernel too (OpenBLAS 0.3.21 runs its
// SSE3 kernel on processors it does not know, as a KVM guest's Xeon of model
// 207: there f16 products of 64 rows ran at 0.24 times f32's through sgemm).
// fp8 (x scaled per row) and a build without a gemm kernel use sgemm: fp8's
// activations are rounded from these sums, and with sgemm's one order every
// kernel build gives them the same bits (test_precision.py).
static void matmul_sgemm_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    const rl_mat *W = a->W;
    int M = W->rows, Kd = W->cols, N = a->N;
    if (a->panels) {   // lo is a multiple of PANEL_ROWS (pool_for's align)
        const char *p = (const char *)a->panels + (size_t)(lo / PANEL_ROWS) * panel_bytes(W->dtype, Kd);
        cpu_K->gemm_panels(a->out + lo, (size_t)M, a->x, N, mat_row(W, lo), W->dtype, p, hi - lo, Kd, 0);
        return;
    }
    if (cpu_K->gemm && (W->dtype == DT_F32 || W->dtype == DT_BF16) && !a->xscale) {
        cpu_K->gemm(a->out + lo, (size_t)M, a->x, N, mat_row(W, lo), W->dtype, hi - lo, Kd);
        return;
    }
    if (W->dtype == DT_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, hi - lo, Kd, 1.0f, a->x, Kd,
                    (const float *)W->data + (size_t)lo * Kd, Kd, 0.0f, a->out + lo, M);
        return;
    }
    float *tile = xmalloc((size_t)TILE_ROWS * Kd * sizeof(float));
    for (int m0 = lo; m0 < hi; m0 += TILE_ROWS) {
        int rows = hi - m0 < TILE_ROWS ? hi - m0 : TILE_ROWS;
        for (int r = 0; r < rows; r++)
            cpu_K->row_to_f32(tile + (size_t)r * Kd, mat_row(W, m0 + r), mat_scales(W, m0 + r), Kd, W->group,
                           W->dtype);
        if (cpu_K->gemm && !a->xscale)
            cpu_K->gemm(a->out + m0, (size_t)M, a->x, N, tile, DT_F32, rows, Kd);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, rows, Kd, 1.0f, a->x, Kd, tile, Kd, 0.0f,
                        a->out + m0, M);
        for (int n = 0; a->xscale && n < N; n++) {   // fp8: each input row's scale
            float *o = a->out + (size_t)n * M + m0, sx = a->xscale[n];
            for (int r = 0; r < rows; r++) o[r] *= sx;
        }
    }
    free(tile);
}

// ACT_I8: out[n][m] = (Σ_k q[n][k] w[m][k]) · sw[m] · s[n], in tiles of 4
// input rows by 16 weight rows (the weights read once from memory).
static void matmul_i8_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    const rl_mat *W = a->W;
    int M = W->rows, K = W->cols, N = a->N;
    int32_t acc[4 * 16];
    if (N > FEW_ROWS && cpu_K->gemm_i8) {
        const char *p = a->panels ? (const char *)a->panels + (size_t)(lo / PANEL_ROWS) * panel_bytes(DT_I8, K) : NULL;
        cpu_K->gemm_i8(a->out + lo, (size_t)M, a->xq8, a->xscale, N, (const int8_t *)W->data + (size_t)lo * K, p,
                       W->scales + lo, hi - lo, K);
        return;
    }
    for (int m0 = lo; m0 < hi; m0 += 16) {
        int nw = hi - m0 < 16 ? hi - m0 : 16;
        for (int n0 = 0; n0 < N; n0 += 4) {
            int nx = N - n0 < 4 ? N - n0 : 4;
            cpu_K->dots_i8(acc, a->xq8 + (size_t)n0 * K, (size_t)K, nx, (const int8_t *)W->data + (size_t)m0 * K,
                           (size_t)K, nw, K);
            for (int j = 0; j < nx; j++)
                for (int i = 0; i < nw; i++)
                    a->out[(size_t)(n0 + j) * M + m0 + i] = (float)acc[j * nw + i] * W->scales[m0 + i] * a->xscale[n0 + j];
        }
    }
}

// The input rows [lo, hi) quantized as the product's act asks (ops.h rl_act).
typedef struct {
    const float *x;
    int8_t *q8;
    float *qf, *scale;
    int K;
    rl_act act;
} quant_args;

static void quant_part(void *ctx, int lo, int hi) {
    const quant_args *q = ctx;
    for (int n = lo; n < hi; n++) {
        const float *x = q->x + (size_t)n * q->K;
        q->scale[n] = q->act == ACT_I8 ? cpu_K->quant_i8(q->q8 + (size_t)n * q->K, x, q->K)
                                       : cpu_K->quant_fp8(q->qf + (size_t)n * q->K, x, q->K);
    }
}

static void bias_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    int M = a->W->rows;
    for (int n = lo; n < hi; n++)
        for (int m = 0; m < M; m++) a->out[(size_t)n * M + m] += a->vec[m];
}

// The input x of products with W's act, quantized once (ops.h rl_act) into
// q, before the weight rows are shared out; a's input (x itself for ACT_F32)
// and scales point to it.
static void quant_input(quant_args *q, args *a, const float *x, const rl_mat *W, int N) {
    *q = (quant_args){.x = x, .K = W->cols, .act = W->act};
    a->x = x;
    if (W->act == ACT_F32) return;
    int K = W->cols;
    q->scale = xmalloc((size_t)N * sizeof(float));
    if (W->act == ACT_I8) q->q8 = xmalloc((size_t)N * K);
    else q->qf = xmalloc((size_t)N * K * sizeof(float));
    pool_for(N, 1, PAR_MIN / K, quant_part, q);
    a->xscale = q->scale;
    a->xq8 = q->q8;
    if (q->qf) a->x = q->qf;
}

static void quant_free(quant_args *q) {
    free(q->scale);
    free(q->q8);
    free(q->qf);
}

// The part that computes a product of N input rows on weights W.
static pool_fn matmul_part(const rl_mat *W, int N) {
    if (W->act == ACT_I8) return matmul_i8_part;
    return N <= FEW_ROWS ? matmul_few_part : matmul_sgemm_part;
}

// A product's part over input rows [lo, hi) and every weight row (ROW_BLOCK).
typedef struct {
    const args *a;
    pool_fn part;
} rows_args;

static void rows_part(void *ctx, int lo, int hi) {
    const rows_args *r = ctx;
    args a = *r->a;
    a.x += (size_t)lo * a.W->cols;
    a.out += (size_t)lo * a.W->rows;
    a.N = hi - lo;
    r->part(&a, 0, a.W->rows);
}

static void cpu_matmul(float *out, const float *x, const rl_mat *W, const float *bias, int N) {
    args a = {.out = out, .x = x, .W = W, .vec = bias, .N = N};
    pool_fn part = matmul_part(W, N);
    void *once = NULL;   // panels made for this product alone
    quant_args q;
    quant_input(&q, &a, x, W, N);
    if (W->act == ACT_I8) {
        if (N > FEW_ROWS && cpu_K->i8_panels) a.panels = cpu_panels(W);
    } else if (W->act == ACT_F32 && N > FEW_ROWS && (cpu_K->panels_for >> W->dtype & 1)) {
        a.panels = N >= ONCE_ROWS ? cpu_panels_kept(W) : cpu_panels(W);
        if (!a.panels && N >= ONCE_ROWS) a.panels = once = cpu_panels_once(W);
    }
    if ((long)W->rows * W->cols * N < PAR_MIN) part(&a, 0, W->rows);
    else if (W->rows <= PANEL_ROWS && W->act == ACT_F32 && !a.xscale && N > 2 * ROW_BLOCK)
        pool_for(N, ROW_BLOCK, 0, rows_part, &(rows_args){&a, matmul_part(W, ROW_BLOCK)});
    else pool_for(W->rows, PANEL_ROWS, 0, part, &a);
    cpu_panels_release(once, W);
    quant_free(&q);
    if (bias) pool_for(N, 1, PAR_MIN / W->rows, bias_part, &a);
}

// matmul_many for a few input rows (a decode step): the weight rows of all
// the products, one after another, shared out in one call of the pool, not
// one each (a product of one row is a few µs of work; every call of the pool
// waits for its slowest thread). Each row is computed by matmul's own part.
enum { MANY_MAX = 4 };
typedef struct {
    args a[MANY_MAX];
    pool_fn part[MANY_MAX];
    int off[MANY_MAX + 1];   // product i has rows [off[i], off[i + 1]) of the whole
    int n;
} many_args;

static void matmul_many_part(void *ctx, int lo, int hi) {
    many_args *s = ctx;
    for (int i = 0; i < s->n; i++) {
        int a0 = lo > s->off[i] ? lo : s->off[i], a1 = hi < s->off[i + 1] ? hi : s->off[i + 1];
        if (a0 < a1) s->part[i](&s->a[i], a0 - s->off[i], a1 - s->off[i]);
    }
}

static void cpu_matmul_many(float *const *out, const float *x, const rl_mat *const *W, const float *const *bias, int n,
                            int N) {
    int fuse = N <= FEW_ROWS && n <= MANY_MAX;
    for (int i = 1; fuse && i < n; i++) fuse = W[i]->act == W[0]->act && W[i]->cols == W[0]->cols;
    if (!fuse) {
        for (int i = 0; i < n; i++) cpu_matmul(out[i], x, W[i], bias[i], N);
        return;
    }
    many_args s = {.n = n};
    quant_args q;
    args in = {0};   // the input, quantized once for all
    quant_input(&q, &in, x, W[0], N);
    for (int i = 0; i < n; i++) {
        s.a[i] = (args){.out = out[i], .x = in.x, .xq8 = in.xq8, .xscale = in.xscale, .W = W[i], .vec = bias[i],
                        .N = N};
        s.part[i] = matmul_part(W[i], N);
        s.off[i + 1] = s.off[i] + W[i]->rows;
    }
    if ((long)s.off[n] * W[0]->cols * N < PAR_MIN) matmul_many_part(&s, 0, s.off[n]);
    else pool_for(s.off[n], 1, 0, matmul_many_part, &s);
    quant_free(&q);
    for (int i = 0; i < n; i++)
        if (bias[i]) pool_for(N, 1, PAR_MIN / W[i]->rows, bias_part, &s.a[i]);
}

// dir 1 turns by +angle (rope), -1 by -angle (its transpose, rope_backward)
static void rope_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    int half = a->HS / 2;
    for (int i = lo; i < hi; i++) {
        const float *cs = a->vec + (size_t)a->idx[i] * half * 2;
        for (int h = 0; h < a->H; h++) {
            float *v = a->out + ((size_t)i * a->H + h) * a->HS;
            for (int j = 0; j < half; j++) {
                float c = cs[2 * j], s = a->dir * cs[2 * j + 1], x1 = v[j], x2 = v[j + half];
                v[j] = x1 * c - x2 * s;
                v[j + half] = x2 * c + x1 * s;
            }
        }
    }
}

static void cpu_rope(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS) {
    args a = {.out = x, .idx = pos, .vec = cos_sin, .H = H, .HS = HS, .dir = 1};
    pool_for(N, 1, PAR_MIN / (H * HS), rope_part, &a);
}

static void cpu_rope_backward(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS) {
    args a = {.out = x, .idx = pos, .vec = cos_sin, .H = H, .HS = HS, .dir = -1};
    pool_for(N, 1, PAR_MIN / (H * HS), rope_part, &a);
}

static void cpu_scatter_rows(void *dst, rl_dtype dt, const int32_t *rows, const float *src, int N, int W) {
    for (int i = 0; i < N; i++)
        if (dt == DT_BF16)
            dt_f32_to_bf16((uint16_t *)dst + (size_t)rows[i] * W, src + (size_t)i * W, (size_t)W);
        else
            memcpy((float *)dst + (size_t)rows[i] * W, src + (size_t)i * W, (size_t)W * sizeof(float));
}

static void cpu_gather_rows(void *dst, const void *src, rl_dtype dt, const int32_t *rows, int N, int W) {
    size_t row = (size_t)W * dt_size(dt);
    for (int i = 0; i < N; i++) memcpy((char *)dst + (size_t)i * row, (const char *)src + (size_t)rows[i] * row, row);
}

static void swiglu_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    size_t n = (size_t)a->N, i0 = (size_t)lo * CHUNK, i1 = (size_t)hi * CHUNK < n ? (size_t)hi * CHUNK : n;
    cpu_K->swiglu(a->out + i0, a->x + i0, a->y + i0, (int)(i1 - i0));
}

static void cpu_swiglu(float *out, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)N * F;
    args a = {.out = out, .x = gate, .y = up, .N = (int)n};
    pool_for((int)((n + CHUNK - 1) / CHUNK), 1, PAR_MIN / CHUNK, swiglu_part, &a);
}

static void add_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    size_t n = (size_t)a->N, i1 = (size_t)hi * CHUNK < n ? (size_t)hi * CHUNK : n;
#pragma omp simd
    for (size_t i = (size_t)lo * CHUNK; i < i1; i++) a->out[i] += a->x[i];
}

static void cpu_add(float *x, const float *y, size_t n) {
    args a = {.out = x, .x = y, .N = (int)n};
    pool_for((int)((n + CHUNK - 1) / CHUNK), 1, PAR_MIN / CHUNK, add_part, &a);
}

static void scale_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    size_t n = (size_t)a->N, i1 = (size_t)hi * CHUNK < n ? (size_t)hi * CHUNK : n;
    float f = a->factor;
#pragma omp simd
    for (size_t i = (size_t)lo * CHUNK; i < i1; i++) a->out[i] *= f;
}

static void cpu_scale(float *x, float f, size_t n) {
    args a = {.out = x, .factor = f, .N = (int)n};
    pool_for((int)((n + CHUNK - 1) / CHUNK), 1, PAR_MIN / CHUNK, scale_part, &a);
}

static void round_bf16_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    size_t n = (size_t)a->N, i0 = (size_t)lo * CHUNK, i1 = (size_t)hi * CHUNK < n ? (size_t)hi * CHUNK : n;
    cpu_K->round_bf16(a->out + i0, (int)(i1 - i0));
}

static void cpu_round_bf16(float *x, size_t n) {
    args a = {.out = x, .N = (int)n};
    pool_for((int)((n + CHUNK - 1) / CHUNK), 1, PAR_MIN / CHUNK, round_bf16_part, &a);
}

// Σ e_j z_j over a row, in double, with z = (l − mx)·s and e = exp(z) as
// exp_row wrote it: the entropy is lse − this / Σ e.
static double sum_ez(const float *e, const float *l, int V, float mx, float it) {
    double ez = 0;
#pragma omp simd reduction(+ : ez)
    for (int j = 0; j < V; j++) ez += (double)e[j] * ((l[j] - mx) * it);
    return ez;
}

// With z = (l − max)·s, whose largest is exactly 0: logp = z[target] − lse,
// lse = log Σ exp z, and entropy = lse − Σ p z, with p = exp(z − lse).
static void logprob_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    int V = a->V;
    float *e = a->out2 ? xmalloc((size_t)V * sizeof(float)) : NULL;
    for (int i = lo; i < hi; i++) {
        const float *l = a->x + (size_t)i * V;
        float it = a->vec[i], mx = cpu_row_max(l, V);
        double sum = e ? cpu_K->exp_row(e, l, V, mx, it) : cpu_K->sum_exp(l, V, mx, it);
        double lse = log(sum);
        a->out[i] = (float)((double)(l[a->idx[i]] - mx) * it - lse);
        if (e) a->out2[i] = (float)(lse - sum_ez(e, l, V, mx, it) / sum);
    }
    free(e);
}

static void cpu_logprob(float *out, float *ent, const float *logits, const int32_t *target,
                        const float *inv_temp, int N, int V) {
    args a = {.out = out, .out2 = ent, .x = logits, .idx = target, .vec = inv_temp, .V = V};
    pool_for(N, 1, 2, logprob_part, &a);
}

// Row i becomes c·(onehot(target) − softmax(l·s)) with c = dlogp[i]·s: the
// exponentials are written over the logits, then scaled. With an entropy
// term (d = dent[i]·s ≠ 0) it becomes p ⊙ (−c − d·(log p + H)) + c·onehot,
// log p_j + H = z_j + (H − lse) = z_j − Σ p z, from the exponentials e in a
// row of their own (the logits are still needed for z).
static void logprob_backward_part(void *ctx, int lo, int hi) {
    const args *a = ctx;
    int V = a->V;
    float *e = a->y2 ? xmalloc((size_t)V * sizeof(float)) : NULL;
    for (int i = lo; i < hi; i++) {
        float *l = a->out + (size_t)i * V;
        float it = a->vec[i], c = a->y[i] * it, d = a->y2 ? a->y2[i] * it : 0;
        if (d != 0) {
            float mx = cpu_row_max(l, V);
            double sum = cpu_K->exp_row(e, l, V, mx, it);
            float h_lse = (float)(-sum_ez(e, l, V, mx, it) / sum), inv = (float)(1 / sum);   // H − lse = −Σ p z
#pragma omp simd
            for (int j = 0; j < V; j++) l[j] = e[j] * inv * (-c - d * ((l[j] - mx) * it + h_lse));
            l[a->idx[i]] += c;
            continue;
        }
        if (c == 0) {   // a row without loss, such as a prompt's
            memset(l, 0, (size_t)V * sizeof(float));
            continue;
        }
        float sum = cpu_K->exp_row(l, l, V, cpu_row_max(l, V), it), f = -c / sum;
#pragma omp simd
        for (int j = 0; j < V; j++) l[j] *= f;
        l[a->idx[i]] += c;
    }
    free(e);
}

static void cpu_logprob_backward(float *logits, const int32_t *target, const float *inv_temp, const float *dlogp,
                                 const float *dent, int N, int V) {
    args a = {.out = logits, .idx = target, .vec = inv_temp, .y = dlogp, .y2 = dent, .V = V};
    pool_for(N, 1, 2, logprob_backward_part, &a);
}

typedef struct {
    int32_t *tok;
    double *logp;
    const float *logits;
    const smp_params *p;
    const double *u;
    int V;
} sample_args;

static void sample_part(void *ctx, int lo, int hi) {
    const sample_args *a = ctx;
    smp_work *w = smp_work_new(a->V);
    for (int i = lo; i < hi; i++)
        a->tok[i] = (int32_t)smp_draw_u(a->logits + (size_t)i * a->V, a->p, a->u[i], w, &a->logp[i]);
    smp_work_free(w);
}

static void cpu_sample(int32_t *tok, double *logp, const float *logits, const smp_params *p, const double *u, int N,
                       int V) {
    sample_args a = {.tok = tok, .logp = logp, .logits = logits, .p = p, .u = u, .V = V};
    pool_for(N, 1, 2, sample_part, &a);
}

const rl_ops *ops_cpu(void) {
    static const rl_ops ops = {
        .name = "cpu",
        .host_memory = 1,
        .alloc = cpu_mem_alloc,
        .free = cpu_free,
        .upload = cpu_upload,
        .download = cpu_copy,
        .sync = cpu_sync,
        .embed = cpu_embed,
        .rmsnorm = cpu_rmsnorm,
        .matmul = cpu_matmul,
        .matmul_many = cpu_matmul_many,
        .rope = cpu_rope,
        .kv_dtypes = 1u << DT_F32 | 1u << DT_BF16,
        .scatter_rows = cpu_scatter_rows,
        .gather_rows = cpu_gather_rows,
        .attention = cpu_attention,
        .swiglu = cpu_swiglu,
        .add = cpu_add,
        .scale = cpu_scale,
        .round_bf16 = cpu_round_bf16,
        .logprob = cpu_logprob,
        .sample = cpu_sample,
        .logprob_backward = cpu_logprob_backward,
        .matmul_dx = cpu_matmul_dx,
        .matmul_dw = cpu_matmul_dw,
        .rmsnorm_backward = cpu_rmsnorm_backward,
        .rope_backward = cpu_rope_backward,
        .attention_backward = cpu_attention_backward,
        .swiglu_backward = cpu_swiglu_backward,
        .embed_backward = cpu_embed_backward,
        .zero = cpu_zero,
        .sumsq = cpu_sumsq,
        .adamw = cpu_adamw,
    };
    if (!cpu_K) {
        cpu_kernels_choose();
        openblas_set_num_threads(1);
        pool_threads();
    }
    return &ops;
}
