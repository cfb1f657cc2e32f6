// cuda/cuda.h — what the files of the CUDA backend share: start-up, error
// checks, the cuBLAS and cuBLASLt handles and scratch memory (runtime.cu),
// launch sizes and device helpers, and the operations defined outside cuda.cu
// for the table of ops_cuda(). Not a public interface: callers use ops.h.
//
// Every op runs on the legacy default stream (stream 0) in the order called,
// so scratch buffers are reused safely in stream order, and a weight upload
// from another thread (model_weights_put) is ordered with the ops around it.
// download and sumsq wait for the work before them.
#ifndef RLPIPE_CUDA_CUDA_H
#define RLPIPE_CUDA_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

extern "C" {
#include "model/ops.h"
}

// Starts the backend, once for the process (later calls repeat the answer):
// device 0 (or the one CUDA_VISIBLE_DEVICES leaves first), cuBLAS and
// cuBLASLt opened and their handles made, TF32 chosen. NULL when ready, else
// why not.
const char *cu_start(void);
int cu_sm(void);   // the device's compute capability, major · 10 + minor (90: Hopper)

// Checks a CUDA runtime or cuBLAS status where the call is made; on failure
// prints "rlpipe: CUDA error at FILE:LINE: CALL: MESSAGE" and aborts (ops
// have no error return, as on the CPU backend, where a failed allocation
// aborts too).
#define CU_CHECK(call) cu_check((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) cu_check_blas((call), #call, __FILE__, __LINE__)
// After every kernel launch: a bad configuration shows here, not at the next sync.
#define CU_LAUNCHED() cu_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

void cu_check(cudaError_t e, const char *call, const char *file, int line);
void cu_check_blas(cublasStatus_t s, const char *call, const char *file, int line);

// cublasGemmEx on the one cuBLAS handle (stream 0, default math mode:
// products name their compute type, CUBLAS_COMPUTE_32F for f32 or
// CUBLAS_COMPUTE_32F_FAST_TF32 when cu_tf32()). cuBLAS is opened with dlopen
// when the backend starts, so that the tools start fast, and without cuBLAS
// installed, when they compute on the CPU.
cublasStatus_t cu_gemm_ex(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                          const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb,
                          const void *beta, void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                          cublasGemmAlgo_t algo);
int cu_tf32(void);   // 1 when the environment has RLPIPE_TF32=1

// The cuBLASLt functions the 8-bit products call (quant.cu), from the library
// opened with cuBLAS, and its handle. Each returns a status to check.
typedef struct {
    cublasLtHandle_t handle;
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
    cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *, cudaDataType_t, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                             cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *, const void *,
                             cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *,
                             void *, size_t, cudaStream_t);
} cu_lt_api;
const cu_lt_api *cu_lt(void);

// Scratch memory on the device, one growing buffer per purpose: the pointer
// stays valid until the next call for the same purpose with more bytes.
// Contents are not kept across calls that grow it, nor cleared.
typedef enum {
    SCR_MAT_X,      // matmul: the input rows at the weights' 16-bit type
    SCR_MAT_W,      // matmul: int8 or fp8 weights widened for cuBLAS
    SCR_QUANT,      // W8A8 matmul: the input rows quantized
    SCR_QSCALE,     // W8A8 matmul: the scale of each input row
    SCR_ACC,        // W8A8 matmul: the product's sums (int32 or f32) before they are scaled
    SCR_LT,         // cuBLASLt's workspace
    SCR_ROWS,       // per-row values: 1/rms of rmsnorm_backward, D of attention_backward
    SCR_MAP,        // attention: the sequence of each row
    SCR_REDUCE,     // sumsq: partial sums
    SCR_SAMPLE,     // sample: probabilities, sorted keys and ids, cub's temporary storage
    SCR_N
} cu_scratch_use;
void *cu_scratch(cu_scratch_use use, size_t bytes);

// Blocks of `threads` covering n items, capped for grid-stride loops.
static inline unsigned cu_blocks(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b > 65535u * 16u) b = 65535u * 16u;
    return b ? (unsigned)b : 1u;
}

// The value of an fp8 e4m3 code, as dtype.h's e4m3_to_f32 (bit for bit: 0x7f
// reads as 480, not NaN): bits 6..0 as an f32's exponent and mantissa are
// 2^-120 times the value, subnormals included; 2^120 is 0x7b800000.
__device__ __forceinline__ float cu_e4m3_to_f32(unsigned b) {
    return __fmul_rn(__uint_as_float(((b & 0x7fu) << 20) | ((b & 0x80u) << 24)), __uint_as_float(0x7b800000u));
}

// Element (r, c) of a row-major weight matrix with C columns, as f32; int8
// and fp8: times its scale, of ng per row. A constant dt (a template's) folds
// the switch.
__device__ __forceinline__ float cu_mat_elem(const void *data, const float *scales, size_t r, int c, int C, int ng,
                                             int group, rl_dtype dt) {
    size_t k = r * (size_t)C + c;
    switch (dt) {
    case DT_F32: return ((const float *)data)[k];
    case DT_BF16: return __uint_as_float((unsigned)((const uint16_t *)data)[k] << 16);
    case DT_F16: return __half2float(__ushort_as_half(((const uint16_t *)data)[k]));
    case DT_I8: return (float)((const int8_t *)data)[k] * scales[r * (size_t)ng + c / group];
    case DT_FP8: return cu_e4m3_to_f32(((const uint8_t *)data)[k]) * scales[r * (size_t)ng + c / group];
    }
    return 0;
}

// One output of a scaled product (ops.h rl_act): a · sw[m] · xs[n] + bias[m],
// in that order, each step rounded as the CPU rounds it (nothing fused); a
// NULL factor or term is left out.
__device__ __forceinline__ float cu_scale_out(float a, const float *sw, size_t m, const float *xs, size_t n,
                                              const float *bias) {
    if (sw) a = __fmul_rn(a, sw[m]);
    if (xs) a = __fmul_rn(a, xs[n]);
    return bias ? __fadd_rn(a, bias[m]) : a;
}

// At most this many input rows take the few-rows (decoding) kernels of the
// products, a warp per weight row and an accumulator per input row in
// registers; more go to cuBLAS(Lt).
#define CU_FEW_ROWS 8

// Calls f(std::integral_constant<int, N>()) for N in 1 .. CU_FEW_ROWS: the
// number of rows as a template argument of what f launches.
template <typename F> static inline void cu_few_rows_call(int N, F f) {
    switch (N) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 5: f(std::integral_constant<int, 5>()); break;
    case 6: f(std::integral_constant<int, 6>()); break;
    case 7: f(std::integral_constant<int, 7>()); break;
    case 8: f(std::integral_constant<int, 8>()); break;
    }
}
static_assert(CU_FEW_ROWS == 8, "cu_few_rows_call handles 1..8 rows");

// ---- warp and block reductions (blockDim.x a multiple of 32, at most 1024)

template <typename T> __device__ __forceinline__ T cu_warp_sum(T v) {   // float or double
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum of v over the block, returned to every thread; the order of additions
// is fixed (lanes, then warps in order), so results repeat bit for bit.
// sh: 32 values of shared memory; the block synchronises inside.
template <typename T> __device__ __forceinline__ T cu_block_sum(T v, T *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = cu_warp_sum(v);
    __syncthreads();   // sh may still be read by a previous reduction
    if (lane == 0) sh[w] = v;
    __syncthreads();
    T s = 0;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}
__device__ __forceinline__ float cu_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int i = 0; i < nw; i++) m = fmaxf(m, sh[i]);
    return m;
}

// ---- the operations (ops.h has their contracts), by file

// kernels.cu: the forward operations but matmul, attention and sample
void cu_embed(float *out, const rl_mat *table, const int32_t *ids, int N);
void cu_rmsnorm(float *out, const float *x, const float *g, int N, int C, float eps);
void cu_rope(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS);
void cu_rope_backward(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS);
void cu_kv_f32_only(rl_dtype dt, const char *op);   // aborts unless dt is DT_F32
void cu_scatter_rows(void *dst, rl_dtype dt, const int32_t *rows, const float *src, int N, int W);
void cu_gather_rows(void *dst, const void *src, rl_dtype dt, const int32_t *rows, int N, int W);
void cu_swiglu(float *out, const float *gate, const float *up, int N, int F);
void cu_add(float *x, const float *y, size_t n);
void cu_scale(float *x, float a, size_t n);
void cu_round_bf16(float *x, size_t n);
void cu_logprob(float *out, float *ent, const float *logits, const int32_t *target, const float *inv_temp, int N,
                int V);

// train.cu: the backward operations but matmul's and attention's, and the optimizer
void cu_logprob_backward(float *logits, const int32_t *target, const float *inv_temp, const float *dlogp,
                         const float *dent, int N, int V);
void cu_rmsnorm_backward(float *dx, float *dg, const float *dout, const float *x, const float *g, int N, int C,
                         float eps);
void cu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                        int F);
void cu_embed_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C);
void cu_zero(float *x, size_t n);
double cu_sumsq(const float *x, size_t n);
void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, const rl_adamw *h);

// matmul.cu: the products of f32 rows by stored weights with a scale per
// input row, xs (N) or NULL: out (N, M) = (x · Wᵀ) · xs[n] (+ bias), and the
// last step of products summed apart, in acc (N, M), which may be out:
// out = acc · sw[m] · xs[n] (+ bias[m]), as cu_scale_out (any factor NULL).
void cu_matmul_rows_scaled(float *out, const float *x, const rl_mat *W, const float *bias, int N, const float *xs);
void cu_scale_product(float *out, const float *acc, const float *sw, const float *xs, const float *bias, int N, int M);
void cu_scale_product(float *out, const int32_t *acc, const float *sw, const float *xs, const float *bias, int N,
                      int M);
void cu_matmul_dx(float *dx, const float *dout, const rl_mat *W, int N, int accumulate);
void cu_matmul_dw(float *dW, float *dbias, const float *dout, const float *x, int N, int M, int K);

// quant.cu: the op matmul; input rows quantized where W->act asks (ACT_I8,
// ACT_FP8), else matmul.cu's cu_matmul_rows_scaled
void cu_matmul(float *out, const float *x, const rl_mat *W, const float *bias, int N);

// attention.cu
void cu_attention(float *out, float *lse, const float *q, const void *k, const void *v, rl_dtype kvt,
                  const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS);
void cu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                           const float *v, const float *out, const float *lse, const rl_attn_seq *seqs, int nseq,
                           int N, int NH, int NKV, int HS);

// sample.cu
void cu_sample(int32_t *tok, double *logp, const float *logits, const smp_params *p, const double *u, int N, int V);

#endif
