// cuda/kernels.cu — the forward operations of the CUDA backend but matmul,
// attention and sample: row kernels (a block per row, grid-stride over rows)
// and elementwise ones (grid-stride over elements). They mirror the CPU
// backend (cpu/cpu.c, cpu/kernels.c) operation for operation; where the CPU
// rounds a product before adding it, __fmul_rn and friends keep nvcc from
// fusing the two into an FMA, so that those results match bit for bit.
#include "model/cuda/cuda.h"

#define THREADS 256          // rows and elementwise kernels
#define ROW_THREADS 512      // logprob: rows as long as the vocabulary

// table (V, C) at dtype dt (int8, fp8: scales (V, ng)), ids (N) in; out (N, C); one block per row
static __global__ void embed_kernel(float *out, const void *data, const float *scales, int group, rl_dtype dt,
                                    const int32_t *ids, int N, int C) {
    int ng = dt == DT_I8 || dt == DT_FP8 ? (C + group - 1) / group : 0;
    for (size_t i = blockIdx.x; i < (size_t)N; i += gridDim.x) {
        size_t r = (size_t)ids[i];
        float *o = out + i * C;
        for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = cu_mat_elem(data, scales, r, c, C, ng, group, dt);
    }
}

void cu_embed(float *out, const rl_mat *table, const int32_t *ids, int N) {
    int C = table->cols;
    if (N <= 0 || C <= 0) return;
    embed_kernel<<<cu_blocks(N, 1), THREADS>>>(out, table->data, table->scales, table->group, table->dtype, ids,
                                                N, C);
    CU_LAUNCHED();
}

// x (N, C), g (C) in; out (N, C), which may be x; one block per row. The
// whole row is read for its sum before the first write, and each thread
// writes only the elements it reads.
static __global__ void rmsnorm_kernel(float *out, const float *x, const float *g, int N, int C, float eps) {
    __shared__ float sh[32];
    for (size_t i = blockIdx.x; i < (size_t)N; i += gridDim.x) {
        const float *xi = x + i * C;
        float *oi = out + i * C;
        float ss = 0;
        for (int c = threadIdx.x; c < C; c += blockDim.x) ss += xi[c] * xi[c];
        float inv = 1.0f / sqrtf(cu_block_sum(ss, sh) / (float)C + eps);
        for (int c = threadIdx.x; c < C; c += blockDim.x) oi[c] = xi[c] * inv * g[c];
    }
}

void cu_rmsnorm(float *out, const float *x, const float *g, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_kernel<<<cu_blocks(N, 1), THREADS>>>(out, x, g, N, C, eps);
    CU_LAUNCHED();
}

// x (N, H, HS) rotated in place, pos (N), cos_sin (max_pos, HS/2, 2); one
// block per row, a thread per pair (j, j + HS/2) of a head. dir 1 turns by
// +angle (rope), -1 by -angle (rope_backward).
static __global__ void rope_kernel(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS,
                                   float dir) {
    int half = HS / 2;
    for (size_t i = blockIdx.x; i < (size_t)N; i += gridDim.x) {
        const float *cs = cos_sin + (size_t)pos[i] * half * 2;
        float *xi = x + i * H * HS;
        for (int p = threadIdx.x; p < H * half; p += blockDim.x) {
            int h = p / half, j = p - h * half;
            float *v = xi + (size_t)h * HS;
            float c = cs[2 * j], s = dir * cs[2 * j + 1], x1 = v[j], x2 = v[j + half];
            v[j] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
            v[j + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
        }
    }
}

static void rope_turn(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS, float dir) {
    if (N <= 0 || H <= 0 || HS < 2) return;
    rope_kernel<<<cu_blocks(N, 1), THREADS>>>(x, pos, cos_sin, N, H, HS, dir);
    CU_LAUNCHED();
}

void cu_rope(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS) {
    rope_turn(x, pos, cos_sin, N, H, HS, 1.0f);
}

void cu_rope_backward(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS) {
    rope_turn(x, pos, cos_sin, N, H, HS, -1.0f);
}

// src rows (N, W) in; dst rows (W wide) out: dst row drows[i] = src row
// srows[i], either index i where its array is NULL; one block per row
static __global__ void copy_rows_kernel(float *dst, const int32_t *drows, const float *src, const int32_t *srows,
                                        int N, int W) {
    for (size_t i = blockIdx.x; i < (size_t)N; i += gridDim.x) {
        float *d = dst + (drows ? (size_t)drows[i] : i) * W;
        const float *s = src + (srows ? (size_t)srows[i] : i) * W;
        for (int c = threadIdx.x; c < W; c += blockDim.x) d[c] = s[c];
    }
}

static void copy_rows(float *dst, const int32_t *drows, const float *src, const int32_t *srows, int N, int W) {
    if (N <= 0 || W <= 0) return;
    copy_rows_kernel<<<cu_blocks(N, 1), THREADS>>>(dst, drows, src, srows, N, W);
    CU_LAUNCHED();
}

// This backend's key/value caches are f32 (ops.h kv_dtypes): any other dtype is a caller's bug.
void cu_kv_f32_only(rl_dtype dt, const char *op) {
    if (dt == DT_F32) return;
    fprintf(stderr, "rlpipe: CUDA %s: rows of dtype %d, but this backend's are f32 only\n", op, (int)dt);
    abort();
}

void cu_scatter_rows(void *dst, rl_dtype dt, const int32_t *rows, const float *src, int N, int W) {
    cu_kv_f32_only(dt, "scatter_rows");
    copy_rows((float *)dst, rows, src, NULL, N, W);
}

void cu_gather_rows(void *dst, const void *src, rl_dtype dt, const int32_t *rows, int N, int W) {
    cu_kv_f32_only(dt, "gather_rows");
    copy_rows((float *)dst, NULL, (const float *)src, rows, N, W);
}

// gate, up (n) in; out (n), which may be gate; grid-stride over elements
static __global__ void swiglu_kernel(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void cu_swiglu(float *out, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)(N > 0 ? N : 0) * (size_t)(F > 0 ? F : 0);
    if (n == 0) return;
    swiglu_kernel<<<cu_blocks(n, THREADS), THREADS>>>(out, gate, up, n);
    CU_LAUNCHED();
}

// x (n) += y (n); grid-stride over elements
static __global__ void add_kernel(float *x, const float *y, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

void cu_add(float *x, const float *y, size_t n) {
    if (n == 0) return;
    add_kernel<<<cu_blocks(n, THREADS), THREADS>>>(x, y, n);
    CU_LAUNCHED();
}

// x (n) *= a; grid-stride over elements
static __global__ void scale_kernel(float *x, float a, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

void cu_scale(float *x, float a, size_t n) {
    if (n == 0) return;
    scale_kernel<<<cu_blocks(n, THREADS), THREADS>>>(x, a, n);
    CU_LAUNCHED();
}

// x (n) rounded to bf16 and back in place, as dtype.h's f32_to_bf16 rounds
// (nearest even; a NaN kept, made quiet); grid-stride over elements
static __global__ void round_bf16_kernel(float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned u = __float_as_uint(x[i]);
        unsigned h = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        x[i] = __uint_as_float(h << 16);
    }
}

void cu_round_bf16(float *x, size_t n) {
    if (n == 0) return;
    round_bf16_kernel<<<cu_blocks(n, THREADS), THREADS>>>(x, n);
    CU_LAUNCHED();
}

// logits (N, V), target, inv_temp (N) in; out (N) and ent (N, or NULL) out;
// one block per row. As cpu.c: with z = (l − max)·s, the exponentials in
// f32, their sum (and Σ e·z for the entropy) in double; logp = z[target] −
// lse with z[target] formed in double, entropy = lse − Σ e·z / Σ e.
static __global__ void logprob_kernel(float *out, float *ent, const float *logits, const int32_t *target,
                                      const float *inv_temp, int N, int V) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    for (size_t i = blockIdx.x; i < (size_t)N; i += gridDim.x) {
        const float *l = logits + i * V;
        float it = inv_temp[i], mx = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, l[j]);
        mx = cu_block_max(mx, shf);
        double sum = 0, ez = 0;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float z = (l[j] - mx) * it, e = expf(z);
            sum += e;
            if (ent) ez += (double)e * z;
        }
        sum = cu_block_sum(sum, shd);
        if (ent) ez = cu_block_sum(ez, shd);
        if (threadIdx.x == 0) {
            double lse = log(sum);
            out[i] = (float)((double)(l[target[i]] - mx) * it - lse);
            if (ent) ent[i] = (float)(lse - ez / sum);
        }
    }
}

void cu_logprob(float *out, float *ent, const float *logits, const int32_t *target, const float *inv_temp, int N,
                int V) {
    if (N <= 0 || V <= 0) return;
    logprob_kernel<<<cu_blocks(N, 1), ROW_THREADS>>>(out, ent, logits, target, inv_temp, N, V);
    CU_LAUNCHED();
}
