// cuda/quant.cu — the op matmul; with quantized input rows (ops.h rl_act)
// its own product: each input row to int8 (ACT_I8) or fp8 e4m3 (ACT_FP8)
// with its own scale, bit for bit as the CPU backend's quant_i8 / quant_fp8
// (cpu/kernels.c), then the 8-bit product, then out = Σ · sw[m] · s[n]
// (+ bias) as cu_scale_out rounds it; other products are matmul.cu's.
//
// int8: the sums are exact in int32 whichever way they are formed, so every
// path gives the CPU's bits:
//   - up to CU_FEW_ROWS rows (decoding): a warp per weight row, dp4a on 16
//     bytes per lane and load, the scales applied where the warp's sum ends;
//   - more rows with M and K multiples of 4 (and the weights 4-byte aligned):
//     cuBLASLt's int8 tensor-core product (IMMA: int8 A and B, "TN", int32
//     sums and output), the layout its regular data ordering asks for;
//   - other shapes, or where cuBLASLt has no algorithm: a tiled dp4a kernel.
// fp8: the products of two e4m3 values are exact in f32, the sums are f32
// in an unspecified order (ops.h):
//   - more than CU_FEW_ROWS rows on sm_89 and later (Ada, Hopper), M and K
//     multiples of 16: cuBLASLt's fp8 product (e4m3 A and B, "TN", f32
//     output, unit scales; the scales applied by the last kernel). Its fast
//     accumulation mode stays off: partial sums are promoted to f32;
//   - else the rows' e4m3 values as f32 go to matmul.cu's product of f32
//     rows by fp8 weights (decoding kernel, or bf16 tensor cores on values
//     that are exact in bf16), which applies the scales.
#include <stdio.h>
#include <stdlib.h>

#include "model/cuda/cuda.h"

#define QUANT_THREADS 256            // the quantization kernel: a block per row
#define FEW_WARPS 4                  // weight rows (warps) per block of the few-rows int8 kernel
#define TILE 64                      // tiled int8 kernel: TILE input rows by TILE weight rows per block
#define TILE_K 32                    // ... and TILE_K inputs (TILE_K / 4 words) per step
#define LT_WORKSPACE (32u << 20)     // cuBLASLt's workspace, bytes
#define LT_PLANS 64                  // cuBLASLt plans kept (shapes seen), oldest replaced

// ---- quantization of the input rows -------------------------------------------

// The e4m3 code of f as dtype.h's f32_to_e4m3 makes it: nearest even,
// saturated to ±448, NaN to 0x7f (with its sign).
static __device__ __forceinline__ unsigned e4m3_code(float f) {
    unsigned sign = (__float_as_uint(f) >> 24) & 0x80u;
    float a = fabsf(f);
    if (a != a) return sign | 0x7fu;
    if (a >= 448.0f) return sign | 0x7eu;
    if (a < __uint_as_float(0x3c800000u))   // 2^-6: subnormal, in units of 2^-9 (8 is 2^-6)
        return sign | (unsigned)__float2int_rn(__fmul_rn(a, 512.0f));
    unsigned u = __float_as_uint(a), r = u + 0x7ffffu + ((u >> 20) & 1u);   // the mantissa rounded to 3 bits
    unsigned code = (((r >> 23) - 120u) << 3) | ((r >> 20) & 7u);
    return sign | (code > 0x7eu ? 0x7eu : code);
}

// What a row is quantized into: int8 codes, e4m3 codes, or e4m3 values as f32.
typedef enum { Q_I8, Q_E4M3, Q_E4M3_F32 } quant_kind;

// x (N, K) f32 in; q (N, K) as QK and xs (N), the rows' scales, out. A block
// per row (grid-stride over rows): the row's largest |x| (max is exact in any
// order), s = max / 127 or / 448 and inv = 1 / s in f32 (0 for a zero row),
// q = x · inv rounded to nearest even (int8: clamped to ±127).
template <quant_kind QK> static __global__ void quant_kernel(void *q, float *xs, const float *x, int N, int K) {
    __shared__ float sh[32];
    for (size_t n = blockIdx.x; n < (size_t)N; n += gridDim.x) {
        const float *xr = x + n * K;
        float amax = 0.0f;
        for (int k = threadIdx.x; k < K; k += blockDim.x) amax = fmaxf(amax, fabsf(xr[k]));
        amax = cu_block_max(amax, sh);
        float s = __fdiv_rn(amax, QK == Q_I8 ? 127.0f : 448.0f), inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
        if (threadIdx.x == 0) xs[n] = s;
        for (int k = threadIdx.x; k < K; k += blockDim.x) {
            float v = __fmul_rn(xr[k], inv);
            size_t i = n * K + k;
            if constexpr (QK == Q_I8) {
                int r = __float2int_rn(v);
                ((int8_t *)q)[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
            } else if constexpr (QK == Q_E4M3) {
                ((uint8_t *)q)[i] = (uint8_t)e4m3_code(v);
            } else {
                ((float *)q)[i] = cu_e4m3_to_f32(e4m3_code(v));
            }
        }
    }
}

template <quant_kind QK> static void quantize(void *q, float *xs, const float *x, int N, int K) {
    quant_kernel<QK><<<cu_blocks(N, 1), QUANT_THREADS>>>(q, xs, x, N, K);
    CU_LAUNCHED();
}

// ---- int8 products ------------------------------------------------------------

// xq (NR, K) int8 and xs (NR), W (M, K) int8 and sw (M), bias (M) or NULL
// in; out (NR, M). A warp per weight row m, FEW_WARPS rows per block; its
// lanes sum q·w exactly in int32, and lane 0 scales the warp's sum. vec: K a
// multiple of 16 and W 16-byte aligned (so are xq's rows, in scratch): lane l
// reads 16-byte pieces l, l + 32, ..., U of them before using any (many loads
// in flight, as matmul.cu's decoding kernel); else bytes l, l + 32, ....
template <int NR>
static __global__ void __launch_bounds__(FEW_WARPS * 32)
i8_few_rows_kernel(float *out, const int8_t *xq, const float *xs, const int8_t *W, const float *sw,
                   const float *bias, int M, int K, int vec) {
    constexpr int U = NR <= 2 ? 8 : 4;
    int lane = threadIdx.x & 31;
    size_t m = (size_t)blockIdx.x * FEW_WARPS + (threadIdx.x >> 5);
    if (m >= (size_t)M) return;   // the whole warp: the shuffles below see all lanes
    const int8_t *w = W + m * K;
    int acc[NR];
#pragma unroll
    for (int n = 0; n < NR; n++) acc[n] = 0;
    if (vec) {
        int nv = K / 16;
        for (int i0 = lane; i0 < nv; i0 += 32 * U) {
            int4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                int i = i0 + u * 32;
                v[u] = i < nv ? __ldcs((const int4 *)w + i) : make_int4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                int i = i0 + u * 32;
                if (i >= nv) break;
#pragma unroll
                for (int n = 0; n < NR; n++) {
                    int4 a = __ldg((const int4 *)(xq + n * (size_t)K) + i);
                    acc[n] = __dp4a(a.x, v[u].x, acc[n]);
                    acc[n] = __dp4a(a.y, v[u].y, acc[n]);
                    acc[n] = __dp4a(a.z, v[u].z, acc[n]);
                    acc[n] = __dp4a(a.w, v[u].w, acc[n]);
                }
            }
        }
    } else {
        for (int k = lane; k < K; k += 32) {
            int wk = w[k];
#pragma unroll
            for (int n = 0; n < NR; n++) acc[n] += (int)xq[n * (size_t)K + k] * wk;
        }
    }
#pragma unroll
    for (int n = 0; n < NR; n++) {
        int s = cu_warp_sum(acc[n]);
        if (lane == 0) out[n * (size_t)M + m] = cu_scale_out((float)s, sw, m, xs, n, bias);
    }
}

// Bytes k .. k + 3 of a row of K int8 values as one word for dp4a (byte b of
// the word is element k + b), zeros past the row's end or for no row.
static __device__ __forceinline__ int pack4(const int8_t *row, int k, int K) {
    unsigned v = 0;
    if (row) {
#pragma unroll
        for (int b = 0; b < 4; b++)
            if (k + b < K) v |= (unsigned)(uint8_t)row[k + b] << (8 * b);
    }
    return (int)v;
}

// xq (N, K) int8, W (M, K) int8 in; acc (N, M) int32 = xq · Wᵀ exactly, any
// shape and alignment. A block of 256 threads per TILE × TILE outputs (input
// rows blockIdx.y, weight rows blockIdx.x), each thread 4 × 4 of them; per
// step both tiles' TILE_K inputs are packed into words in shared memory.
static __global__ void __launch_bounds__(256)
i8_tiled_kernel(int32_t *acc, const int8_t *xq, const int8_t *W, int N, int M, int K) {
    constexpr int WORDS = TILE_K / 4;
    __shared__ int xt[TILE][WORDS + 1], wt[TILE][WORDS + 1];   // + 1: rows in different banks
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    size_t n0 = (size_t)blockIdx.y * TILE, m0 = (size_t)blockIdx.x * TILE;
    int a[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) a[i][j] = 0;
    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        for (int e = threadIdx.x; e < TILE * WORDS; e += blockDim.x) {
            int r = e / WORDS, k = k0 + 4 * (e % WORDS);
            xt[r][e % WORDS] = pack4(n0 + r < (size_t)N ? xq + (n0 + r) * K : NULL, k, K);
            wt[r][e % WORDS] = pack4(m0 + r < (size_t)M ? W + (m0 + r) * K : NULL, k, K);
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < WORDS; c++) {
            int xv[4], wv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) xv[i] = xt[ty + 16 * i][c];
#pragma unroll
            for (int j = 0; j < 4; j++) wv[j] = wt[tx + 16 * j][c];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) a[i][j] = __dp4a(xv[i], wv[j], a[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            size_t n = n0 + ty + 16 * i, m = m0 + tx + 16 * j;
            if (n < (size_t)N && m < (size_t)M) acc[n * M + m] = a[i][j];
        }
}

// ---- cuBLASLt ---------------------------------------------------------------------

// One product shape's descriptors and algorithm, made once: cuBLASLt's
// heuristic costs more host time than a small product on the GPU. Column-major
// as cuBLASLt sees it (matmul.cu's comment): D (M, N) = Aᵀ · B with A the
// weights (K, M) and B the input rows (K, N), "TN".
typedef struct {
    cudaDataType_t ab;         // CUDA_R_8I (int32 sums and D) or CUDA_R_8F_E4M3 (f32)
    int M, N, K;
    unsigned align;            // of the weights' address (bytes, at most 256): algorithms depend on it
    int ok;                    // cuBLASLt has an algorithm for it
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

static lt_plan plans[LT_PLANS];
static int nplans, oldest;

// The largest power of two dividing p's address, up to 256.
static unsigned align_of(const void *p) {
    unsigned a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}

static void lt_plan_free(lt_plan *p) {
    const cu_lt_api *lt = cu_lt();
    CUBLAS_CHECK(lt->desc_destroy(p->desc));
    CUBLAS_CHECK(lt->layout_destroy(p->a));
    CUBLAS_CHECK(lt->layout_destroy(p->b));
    CUBLAS_CHECK(lt->layout_destroy(p->d));
}

static void lt_plan_make(lt_plan *p) {
    const cu_lt_api *lt = cu_lt();
    int i8 = p->ab == CUDA_R_8I;
    cudaDataType_t dt = i8 ? CUDA_R_32I : CUDA_R_32F;   // sums, D (and C, unused: beta = 0) and alpha, beta
    CUBLAS_CHECK(lt->desc_create(&p->desc, i8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F, dt));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(lt->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(lt->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUBLAS_CHECK(lt->layout_create(&p->a, p->ab, (uint64_t)p->K, (uint64_t)p->M, p->K));
    CUBLAS_CHECK(lt->layout_create(&p->b, p->ab, (uint64_t)p->K, (uint64_t)p->N, p->K));
    CUBLAS_CHECK(lt->layout_create(&p->d, dt, (uint64_t)p->M, (uint64_t)p->N, p->M));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(lt->pref_create(&pref));
    uint64_t ws = LT_WORKSPACE;
    uint32_t al = p->align;   // B and D are scratch buffers: 256-byte aligned, the default
    CUBLAS_CHECK(lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t s = lt->heuristic(lt->handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &r, &found);
    CUBLAS_CHECK(lt->pref_destroy(pref));
    if (s != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(s);   // not supported: no algorithm, the caller's other way
    p->ok = s == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->ok) p->algo = r.algo;
}

// The plan of a shape: the one kept, or a new one in place of the oldest.
static const lt_plan *lt_plan_for(cudaDataType_t ab, int M, int N, int K, const void *W) {
    unsigned align = align_of(W);
    for (int i = 0; i < nplans; i++) {
        lt_plan *p = &plans[i];
        if (p->ab == ab && p->M == M && p->N == N && p->K == K && p->align == align) return p;
    }
    lt_plan *p;
    if (nplans < LT_PLANS) {
        p = &plans[nplans++];
    } else {
        p = &plans[oldest];
        oldest = (oldest + 1) % LT_PLANS;
        lt_plan_free(p);
    }
    *p = lt_plan{};
    p->ab = ab;
    p->M = M;
    p->N = N;
    p->K = K;
    p->align = align;
    lt_plan_make(p);
    return p;
}

// D (N, M) row-major = xq (N, K) · W (M, K)ᵀ by cuBLASLt, as plan p says
// (p->ok); D int32 for int8, f32 for fp8.
static void lt_product(const lt_plan *p, const void *W, const void *xq, void *D) {
    const cu_lt_api *lt = cu_lt();
    const int32_t one_i = 1, zero_i = 0;
    const float one_f = 1.0f, zero_f = 0.0f;
    int i8 = p->ab == CUDA_R_8I;
    void *ws = cu_scratch(SCR_LT, LT_WORKSPACE);
    CUBLAS_CHECK(lt->matmul(lt->handle, p->desc, i8 ? (const void *)&one_i : (const void *)&one_f, W, p->a, xq,
                            p->b, i8 ? (const void *)&zero_i : (const void *)&zero_f, D, p->d, D, p->d, &p->algo,
                            ws, LT_WORKSPACE, 0));
}

// ---- the operation --------------------------------------------------------------

static void matmul_i8(float *out, const float *x, const rl_mat *W, const float *bias, int N) {
    int M = W->rows, K = W->cols;
    int8_t *xq = (int8_t *)cu_scratch(SCR_QUANT, (size_t)N * K);
    float *xs = (float *)cu_scratch(SCR_QSCALE, (size_t)N * sizeof(float));
    const int8_t *w = (const int8_t *)W->data;
    quantize<Q_I8>(xq, xs, x, N, K);
    if (N <= CU_FEW_ROWS) {
        int vec = K % 16 == 0 && (uintptr_t)w % 16 == 0;
        unsigned blocks = (unsigned)((M + FEW_WARPS - 1) / FEW_WARPS);
        cu_few_rows_call(N, [&](auto nr) {
            i8_few_rows_kernel<decltype(nr)::value><<<blocks, FEW_WARPS * 32>>>(out, xq, xs, w, W->scales, bias, M,
                                                                                K, vec);
        });
        CU_LAUNCHED();
        return;
    }
    int32_t *acc = (int32_t *)cu_scratch(SCR_ACC, (size_t)N * M * sizeof(int32_t));
    // cuBLASLt's IMMA with the regular data ordering: m, k and the leading
    // dimensions multiples of 4, pointers 4-byte aligned, "TN".
    const lt_plan *p = M % 4 == 0 && K % 4 == 0 && (uintptr_t)w % 4 == 0 ? lt_plan_for(CUDA_R_8I, M, N, K, w) : NULL;
    if (p && p->ok) {
        lt_product(p, w, xq, acc);
    } else {
        dim3 grid((unsigned)((M + TILE - 1) / TILE), (unsigned)((N + TILE - 1) / TILE));
        i8_tiled_kernel<<<grid, 256>>>(acc, xq, w, N, M, K);
        CU_LAUNCHED();
    }
    cu_scale_product(out, acc, W->scales, xs, bias, N, M);
}

static void matmul_fp8(float *out, const float *x, const rl_mat *W, const float *bias, int N) {
    int M = W->rows, K = W->cols;
    float *xs = (float *)cu_scratch(SCR_QSCALE, (size_t)N * sizeof(float));
    // cuBLASLt's fp8 products: sm_89 and later, "TN", dimensions and
    // pointers that allow 16-byte alignment.
    const lt_plan *p = N > CU_FEW_ROWS && cu_sm() >= 89 && M % 16 == 0 && K % 16 == 0 && (uintptr_t)W->data % 16 == 0
                           ? lt_plan_for(CUDA_R_8F_E4M3, M, N, K, W->data)
                           : NULL;
    if (p && p->ok) {
        uint8_t *xq = (uint8_t *)cu_scratch(SCR_QUANT, (size_t)N * K);
        float *acc = (float *)cu_scratch(SCR_ACC, (size_t)N * M * sizeof(float));
        quantize<Q_E4M3>(xq, xs, x, N, K);
        lt_product(p, W->data, xq, acc);
        cu_scale_product(out, acc, W->scales, xs, bias, N, M);
        return;
    }
    float *xv = (float *)cu_scratch(SCR_QUANT, (size_t)N * K * sizeof(float));
    quantize<Q_E4M3_F32>(xv, xs, x, N, K);
    rl_mat Wf = *W;
    Wf.act = ACT_F32;
    cu_matmul_rows_scaled(out, xv, &Wf, bias, N, xs);
}

static void matmul_w8a8(float *out, const float *x, const rl_mat *W, const float *bias, int N) {
    int ok = W->dtype == (W->act == ACT_I8 ? DT_I8 : DT_FP8) && W->group == W->cols;
    if (!ok) {
        fprintf(stderr, "rlpipe: a matmul with %s input rows needs %s weights with one scale per row, got %s "
                "(group %d of %d inputs)\n", W->act == ACT_I8 ? "int8" : "fp8", W->act == ACT_I8 ? "int8" : "fp8",
                dt_name(W->dtype), W->group, W->cols);
        abort();
    }
    if (N <= 0 || W->rows <= 0) return;
    if (W->cols <= 0) {   // an empty sum
        cu_matmul_rows_scaled(out, x, W, bias, N, NULL);
        return;
    }
    if (W->act == ACT_I8) matmul_i8(out, x, W, bias, N);
    else matmul_fp8(out, x, W, bias, N);
}

void cu_matmul(float *out, const float *x, const rl_mat *W, const float *bias, int N) {
    if (W->act != ACT_F32) matmul_w8a8(out, x, W, bias, N);
    else cu_matmul_rows_scaled(out, x, W, bias, N, NULL);
}
