// cuda/matmul.cu — the matrix products of the CUDA backend: the forward of
// any weight dtype with the input rows as they are (quant.cu's op, matmul,
// quantizes them first where the weights ask) and the backward matmul_dx and
// matmul_dw (f32 weights).
//
// Many rows go to cuBLAS (cublasGemmEx). Everything here is row-major, cuBLAS
// is column-major: a row-major (R, C) matrix is the column-major (C, R) one
// with the same memory, so each product is computed transposed:
//   out (N, M) = x · Wᵀ      ->  out_cm (M, N) = W_cmᵀ (M, K) · x_cm (K, N)
//   dx (N, K) = dout · W     ->  dx_cm (K, N) = W_cm (K, M) · dout_cm (M, N)
//   dW (M, K) += doutᵀ · x   ->  dW_cm (K, M) += x_cm (K, N) · dout_cmᵀ (N, M)
// 16-bit weights are multiplied by the input rows rounded to the same type
// (tensor cores, f32 accumulation and output); int8 weights are widened to
// bf16 (q · scale rounded once) a tile of rows at a time first; fp8 weights
// are widened without their scale (e4m3 values are exact in bf16), which is
// applied to the f32 results, row by row, after.
//
// Few rows (decoding) with 16-bit, int8 or fp8 weights take a memory-bound
// kernel instead: a warp per weight row reads the row once, 16 bytes per lane
// and load, and multiplies it with every input row in f32.
#include <stdio.h>
#include <stdlib.h>

#include "model/cuda/cuda.h"

#define FEW_WARPS 4                  // warps (weight rows) per block of the few-rows kernel
#define THREADS 256                  // elementwise kernels
#define WIDEN_ELEMS (32u << 20)      // 8-bit weights widened per GEMM: 64 MiB of bf16 at most

// ---- cuBLAS -----------------------------------------------------------------

// The compute type of f32 products: TF32 tensor cores only when asked for.
static cublasComputeType_t f32_compute(void) {
    return cu_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Column-major C (m, n) = op(A) · op(B) + beta · C, f32 C and scalars; A and
// B of type ab (f32, or 16-bit with f32 compute).
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                 const void *B, int ldb, cudaDataType_t ab, float beta, float *C, int ldc, cublasComputeType_t ct) {
    const float one = 1.0f;
    CUBLAS_CHECK(cu_gemm_ex(ta, tb, m, n, k, &one, A, ab, lda, B, ab, ldb, &beta, C, CUDA_R_32F, ldc,
                              ct, CUBLAS_GEMM_DEFAULT));
}

// ---- elementwise helpers of the cuBLAS paths -------------------------------

template <typename T> static __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// x (n) f32 in; out (n) rounded to T (bf16 or f16) to meet 16-bit weights; grid-stride.
template <typename T> static __global__ void round_kernel(T *out, const float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f32<T>(x[i]);
}

// q (M, K) at DT and scales (M, ng) in; out (rows, K) bf16 of weight rows
// [m0, m0 + rows): int8 q · scale (rounded once), fp8 the code's value
// unscaled (exact); a block per row (grid-stride over rows).
template <rl_dtype DT>
static __global__ void widen_kernel(__nv_bfloat16 *out, const void *q, const float *scales, int m0, int rows, int K,
                                    int group) {
    for (size_t r = blockIdx.x; r < (size_t)rows; r += gridDim.x) {
        size_t row = r + m0;
        __nv_bfloat16 *o = out + r * K;
        for (int k = threadIdx.x; k < K; k += blockDim.x) {
            if constexpr (DT == DT_FP8)
                o[k] = __float2bfloat16_rn(cu_e4m3_to_f32(((const uint8_t *)q)[row * K + k]));
            else
                o[k] = __float2bfloat16_rn(cu_mat_elem(q, scales, row, k, K, (K + group - 1) / group, group, DT_I8));
        }
    }
}

// acc (N, M) in (int32 or f32, may be out); out (N, M) = cu_scale_out of
// each. Rows n over blocks in y, columns m over threads in x (grid-stride
// both ways): no division per element.
template <typename T>
static __global__ void scale_kernel(float *out, const T *acc, const float *sw, const float *xs, const float *bias,
                                    int N, int M) {
    size_t m0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (size_t n = blockIdx.y; n < (size_t)N; n += gridDim.y)
        for (size_t m = m0; m < (size_t)M; m += step)
            out[n * M + m] = cu_scale_out((float)acc[n * M + m], sw, m, xs, n, bias);
}

template <typename T>
static void scale_launch(float *out, const T *acc, const float *sw, const float *xs, const float *bias, int N,
                         int M) {
    if (N <= 0 || M <= 0 || (!sw && !xs && !bias && (const void *)acc == (const void *)out)) return;
    unsigned bx = cu_blocks((size_t)M, THREADS), by = N < 65535 ? (unsigned)N : 65535u;
    if (bx > 64) bx = 64;   // a row of up to 16k columns per block row in one sweep; more in strides
    scale_kernel<T><<<dim3(bx, by), THREADS>>>(out, acc, sw, xs, bias, N, M);
    CU_LAUNCHED();
}

void cu_scale_product(float *out, const float *acc, const float *sw, const float *xs, const float *bias, int N, int M) {
    scale_launch(out, acc, sw, xs, bias, N, M);
}

void cu_scale_product(float *out, const int32_t *acc, const float *sw, const float *xs, const float *bias, int N,
                      int M) {
    scale_launch(out, acc, sw, xs, bias, N, M);
}

// ---- few rows: a warp per weight row ------------------------------------------

// 16 bytes of weights as floats: 8 of bf16 or f16, or 16 int8 or fp8 values
// (unscaled: the caller applies the scale to the partial sum).
template <rl_dtype DT> static __device__ __forceinline__ void widen16(uint4 v, float *w) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if constexpr (DT == DT_BF16) {   // bf16 is the top half of an f32; element 2j is the low half
            w[2 * j] = __uint_as_float(u[j] << 16);
            w[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        } else if constexpr (DT == DT_F16) {
            w[2 * j] = __half2float(__ushort_as_half((unsigned short)(u[j] & 0xffffu)));
            w[2 * j + 1] = __half2float(__ushort_as_half((unsigned short)(u[j] >> 16)));
        } else if constexpr (DT == DT_FP8) {   // byte c of word j is element 4j + c
#pragma unroll
            for (int c = 0; c < 4; c++) w[4 * j + c] = cu_e4m3_to_f32((u[j] >> (8 * c)) & 0xffu);
        } else {
            // Integer to float without the conversion unit (a quarter of the
            // FMA rate, too slow to keep up with memory): byte b = q + 128 as
            // the low mantissa bits of 2^23 gives the float 2^23 + b exactly,
            // and subtracting 2^23 + 128 leaves q exactly.
            unsigned b = u[j] ^ 0x80808080u;
#pragma unroll
            for (int c = 0; c < 4; c++)
                w[4 * j + c] = __uint_as_float(__byte_perm(b, 0x4b000000u, 0x7440u + c)) - 8388736.0f;
        }
    }
}

// The end of a warp's row m: out[n][m] = cu_scale_out(Σ over lanes of
// acc[n]) with the row's scale rs (fp8 weights: sums are of unscaled values;
// else NULL) and the input rows' xs (or NULL).
template <int NR>
static __device__ __forceinline__ void few_rows_store(float *out, const float *acc, const float *rs,
                                                      const float *xs, const float *bias, size_t m, int M, int lane) {
#pragma unroll
    for (int n = 0; n < NR; n++) {
        float s = cu_warp_sum(acc[n]);
        if (lane == 0) out[n * (size_t)M + m] = cu_scale_out(s, rs, m, xs, n, bias);
    }
}

// x (NR, K) f32, W (M, K) at DT (int8: scales (M, ceil(K / group)); fp8:
// scales (M)), bias (M) or NULL, xs (NR) or NULL in; out (NR, M). A warp per
// weight row m, FEW_WARPS rows per block; lane l reads 16-byte pieces l,
// l + 32, ... of the row, U of them before using any, so that many loads are
// in flight per warp (decoding is bound by how fast the weights stream from
// memory). Needs K a multiple of E (the elements per piece), W and x 16-byte
// aligned, and for int8 a group of 2^gshift >= 16 inputs (a piece then lies
// within one group, found by a shift: a division per piece would cost more
// than the piece's arithmetic).
template <rl_dtype DT, int NR>
static __global__ void __launch_bounds__(FEW_WARPS * 32)
few_rows_vec_kernel(float *out, const float *x, const void *W, const float *scales, const float *bias,
                    const float *xs, int M, int K, int gshift) {
    constexpr int E = DT == DT_I8 || DT == DT_FP8 ? 16 : 8;   // elements per 16-byte piece
    constexpr int U = NR <= 2 ? 8 : 4;        // pieces in flight per lane: fewer when registers hold more rows
    int lane = threadIdx.x & 31;
    size_t m = (size_t)blockIdx.x * FEW_WARPS + (threadIdx.x >> 5);
    if (m >= (size_t)M) return;               // the whole warp: the shuffles below see all lanes
    int nv = K / E, ng = DT == DT_I8 ? ((K - 1) >> gshift) + 1 : 0;
    const uint4 *w = (const uint4 *)W + m * nv;
    float acc[NR];
#pragma unroll
    for (int n = 0; n < NR; n++) acc[n] = 0.0f;
    for (int i0 = lane; i0 < nv; i0 += 32 * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int i = i0 + u * 32;
            // Streamed: each weight is read once per call, so it should not
            // push the input rows (read by every warp) out of the caches.
            v[u] = i < nv ? __ldcs(w + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int i = i0 + u * 32;
            if (i >= nv) break;
            float wf[E];
            widen16<DT>(v[u], wf);
            float sc = 1.0f;
            if constexpr (DT == DT_I8) sc = __ldg(scales + m * ng + ((i * E) >> gshift));
#pragma unroll
            for (int n = 0; n < NR; n++) {
                const float4 *xp = (const float4 *)(x + n * (size_t)K) + (size_t)i * (E / 4);
                float t = 0.0f;
#pragma unroll
                for (int j = 0; j < E / 4; j++) {
                    float4 a = __ldg(xp + j);
                    t = fmaf(a.x, wf[4 * j], t);
                    t = fmaf(a.y, wf[4 * j + 1], t);
                    t = fmaf(a.z, wf[4 * j + 2], t);
                    t = fmaf(a.w, wf[4 * j + 3], t);
                }
                if constexpr (DT == DT_I8) acc[n] = fmaf(t, sc, acc[n]);
                else acc[n] += t;
            }
        }
    }
    few_rows_store<NR>(out, acc, DT == DT_FP8 ? scales : NULL, xs, bias, m, M, lane);
}

// The same for any K and alignment: lane l reads elements l, l + 32, ... of
// the row one at a time (int8 each scaled on its own: q · scale, then · x;
// fp8 unscaled, the row's scale applied to the sum).
template <rl_dtype DT, int NR>
static __global__ void __launch_bounds__(FEW_WARPS * 32)
few_rows_scalar_kernel(float *out, const float *x, const void *W, const float *scales, const float *bias,
                       const float *xs, int M, int K, int group) {
    int lane = threadIdx.x & 31;
    size_t m = (size_t)blockIdx.x * FEW_WARPS + (threadIdx.x >> 5);
    if (m >= (size_t)M) return;
    int ng = DT == DT_I8 ? (K + group - 1) / group : 0;
    float acc[NR];
#pragma unroll
    for (int n = 0; n < NR; n++) acc[n] = 0.0f;
    for (int k = lane; k < K; k += 32) {
        float wk = DT == DT_FP8 ? cu_e4m3_to_f32(((const uint8_t *)W)[m * K + k])
                                : cu_mat_elem(W, scales, m, k, K, ng, group, DT);
#pragma unroll
        for (int n = 0; n < NR; n++) acc[n] = fmaf(__ldg(x + n * (size_t)K + k), wk, acc[n]);
    }
    few_rows_store<NR>(out, acc, DT == DT_FP8 ? scales : NULL, xs, bias, m, M, lane);
}

template <rl_dtype DT, int NR>
static void few_rows_launch(float *out, const float *x, const rl_mat *W, const float *bias, const float *xs) {
    int M = W->rows, K = W->cols, E = DT == DT_I8 || DT == DT_FP8 ? 16 : 8;
    unsigned blocks = (unsigned)((M + FEW_WARPS - 1) / FEW_WARPS);
    int g = W->group, vec = K % E == 0 && (uintptr_t)W->data % 16 == 0 && (uintptr_t)x % 16 == 0 &&
                           (DT != DT_I8 || (g >= 16 && (g & (g - 1)) == 0));
    if (vec)
        few_rows_vec_kernel<DT, NR><<<blocks, FEW_WARPS * 32>>>(out, x, W->data, W->scales, bias, xs, M, K,
                                                                DT == DT_I8 ? __builtin_ctz((unsigned)g) : 0);
    else
        few_rows_scalar_kernel<DT, NR><<<blocks, FEW_WARPS * 32>>>(out, x, W->data, W->scales, bias, xs, M, K,
                                                                   W->group);
    CU_LAUNCHED();
}

template <rl_dtype DT>
static void few_rows(float *out, const float *x, const rl_mat *W, const float *bias, const float *xs, int N) {
    cu_few_rows_call(N, [&](auto nr) { few_rows_launch<DT, decltype(nr)::value>(out, x, W, bias, xs); });
}

// ---- the operations ---------------------------------------------------------

// 8-bit weights (int8 or fp8, DT) by the input rows xb (N, K) bf16: tiles of
// weight rows widened into one scratch buffer, reused in stream order; out (N, M).
template <rl_dtype DT> static void widened_gemm(float *out, const __nv_bfloat16 *xb, const rl_mat *W, int N) {
    int M = W->rows, K = W->cols;
    int tile = (size_t)K < WIDEN_ELEMS ? (int)(WIDEN_ELEMS / (size_t)K) : 1;
    if (tile > M) tile = M;
    __nv_bfloat16 *wb = (__nv_bfloat16 *)cu_scratch(SCR_MAT_W, (size_t)tile * K * sizeof(__nv_bfloat16));
    for (int m0 = 0; m0 < M; m0 += tile) {
        int rows = M - m0 < tile ? M - m0 : tile;
        widen_kernel<DT><<<cu_blocks(rows, 1), THREADS>>>(wb, W->data, W->scales, m0, rows, K, W->group);
        CU_LAUNCHED();
        gemm(CUBLAS_OP_T, CUBLAS_OP_N, rows, N, K, wb, K, xb, K, CUDA_R_16BF, 0.0f, out + m0, M, CUBLAS_COMPUTE_32F);
    }
}

void cu_matmul_rows_scaled(float *out, const float *x, const rl_mat *W, const float *bias, int N, const float *xs) {
    int M = W->rows, K = W->cols;
    if (N <= 0 || M <= 0) return;
    const float *sw = NULL;   // the weights' row scales, applied after the product (fp8)
    if (K <= 0) {   // an empty sum: cuBLAS is not asked about zero-width operands
        CU_CHECK(cudaMemsetAsync(out, 0, (size_t)N * M * sizeof(float), 0));
    } else if (W->dtype != DT_F32 && N <= CU_FEW_ROWS) {   // scales and bias folded in
        switch (W->dtype) {
        case DT_BF16: few_rows<DT_BF16>(out, x, W, bias, xs, N); break;
        case DT_F16: few_rows<DT_F16>(out, x, W, bias, xs, N); break;
        case DT_FP8: few_rows<DT_FP8>(out, x, W, bias, xs, N); break;
        default: few_rows<DT_I8>(out, x, W, bias, xs, N); break;
        }
        return;
    } else if (W->dtype == DT_F32) {
        gemm(CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, W->data, K, x, K, CUDA_R_32F, 0.0f, out, M, f32_compute());
    } else if (W->dtype == DT_F16) {
        __half *xh = (__half *)cu_scratch(SCR_MAT_X, (size_t)N * K * sizeof(__half));
        round_kernel<__half><<<cu_blocks((size_t)N * K, THREADS), THREADS>>>(xh, x, (size_t)N * K);
        CU_LAUNCHED();
        gemm(CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, W->data, K, xh, K, CUDA_R_16F, 0.0f, out, M, CUBLAS_COMPUTE_32F);
    } else {
        __nv_bfloat16 *xb = (__nv_bfloat16 *)cu_scratch(SCR_MAT_X, (size_t)N * K * sizeof(__nv_bfloat16));
        round_kernel<__nv_bfloat16><<<cu_blocks((size_t)N * K, THREADS), THREADS>>>(xb, x, (size_t)N * K);
        CU_LAUNCHED();
        if (W->dtype == DT_BF16) {
            gemm(CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, W->data, K, xb, K, CUDA_R_16BF, 0.0f, out, M,
                 CUBLAS_COMPUTE_32F);
        } else if (W->dtype == DT_FP8) {
            widened_gemm<DT_FP8>(out, xb, W, N);
            sw = W->scales;
        } else {
            widened_gemm<DT_I8>(out, xb, W, N);
        }
    }
    cu_scale_product(out, out, sw, xs, bias, N, M);
}

// bf16 weights (a frozen base under LoRA): dout rounded to bf16 to meet
// them, as the forward's products round their inputs, f32 sums.
void cu_matmul_dx(float *dx, const float *dout, const rl_mat *W, int N, int accumulate) {
    if (W->dtype != DT_F32 && W->dtype != DT_BF16) {
        fprintf(stderr, "rlpipe: the backward of matmul needs f32 or bf16 weights, got %s\n", dt_name(W->dtype));
        abort();
    }
    int M = W->rows, K = W->cols;
    if (N <= 0 || K <= 0) return;
    if (W->dtype == DT_BF16) {
        __nv_bfloat16 *db = (__nv_bfloat16 *)cu_scratch(SCR_MAT_X, (size_t)N * M * sizeof(__nv_bfloat16));
        round_kernel<__nv_bfloat16><<<cu_blocks((size_t)N * M, THREADS), THREADS>>>(db, dout, (size_t)N * M);
        CU_LAUNCHED();
        gemm(CUBLAS_OP_N, CUBLAS_OP_N, K, N, M, W->data, K, db, M, CUDA_R_16BF, accumulate ? 1.0f : 0.0f, dx, K,
             CUBLAS_COMPUTE_32F);
        return;
    }
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, K, N, M, W->data, K, dout, M, CUDA_R_32F, accumulate ? 1.0f : 0.0f, dx, K,
         f32_compute());
}

#define DB_COLS 32   // dbias: columns per block, one per thread in x
#define DB_PARTS 8   // dbias: threads in y, each summing every DB_PARTS-th row

// dout (N, M) in; dbias (M) += Σ_n dout[n][m]. Block (DB_COLS, DB_PARTS): a
// column per thread in x, partial sums over rows y, y + DB_PARTS, ... in
// order, then the DB_PARTS partials added in order: no atomics, the same
// bits every run.
static __global__ void dbias_kernel(float *dbias, const float *dout, int N, int M) {
    __shared__ float part[DB_PARTS][DB_COLS];
    int m = blockIdx.x * DB_COLS + threadIdx.x;
    float s = 0.0f;
    if (m < M)
        for (int n = threadIdx.y; n < N; n += DB_PARTS) s += dout[(size_t)n * M + m];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && m < M) {
        float t = 0.0f;
        for (int p = 0; p < DB_PARTS; p++) t += part[p][threadIdx.x];
        dbias[m] += t;
    }
}

void cu_matmul_dw(float *dW, float *dbias, const float *dout, const float *x, int N, int M, int K) {
    if (N <= 0 || M <= 0) return;
    if (K > 0)
        gemm(CUBLAS_OP_N, CUBLAS_OP_T, K, M, N, x, K, dout, M, CUDA_R_32F, 1.0f, dW, K, f32_compute());
    if (dbias) {
        dbias_kernel<<<(unsigned)((M + DB_COLS - 1) / DB_COLS), dim3(DB_COLS, DB_PARTS)>>>(dbias, dout, N, M);
        CU_LAUNCHED();
    }
}
