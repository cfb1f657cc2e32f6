// cuda/cuda.cu — the CUDA backend of ops.h: start-up (is there a GPU?), memory,
// the cuBLAS handle, scratch buffers, error checks, and the table of
// operations, whose kernels live in kernels.cu, train.cu, matmul.cu,
// attention.cu and sample.cu.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/cuda.h"

void cu_check(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "rlpipe: CUDA error at %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
    if (e == cudaErrorMemoryAllocation)
        fprintf(stderr, "rlpipe: hint: fewer --slots, a smaller --batch-tokens, or --device cpu\n");
    abort();
}

// The few cuBLAS functions used, from the library opened at start.
static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType_t, int, const void *, cudaDataType_t, int, const void *,
                              void *, cudaDataType_t, int, cublasComputeType_t, cublasGemmAlgo_t);
    const char *(*status)(cublasStatus_t);
} blasf;
static cublasHandle_t blas;
static int tf32;

void cu_check_blas(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "rlpipe: cuBLAS error at %s:%d: %s: %s\n", file, line, call, blasf.status(s));
    abort();
}

cublasStatus_t cu_gemm_ex(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                          const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb,
                          const void *beta, void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                          cublasGemmAlgo_t algo) {
    return blasf.gemm_ex(blas, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute, algo);
}

int cu_tf32(void) { return tf32; }

#define STR_(x) #x
#define STR(x) STR_(x)

// Opens cuBLAS (the major version built against, else any) and finds its
// functions; NULL, or what went wrong.
static const char *open_blas(void) {
    void *h = dlopen("libcublas.so." STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
    *(void **)&blasf.create = dlsym(h, "cublasCreate_v2");
    *(void **)&blasf.gemm_ex = dlsym(h, "cublasGemmEx");
    *(void **)&blasf.status = dlsym(h, "cublasGetStatusString");
    if (!blasf.create || !blasf.gemm_ex || !blasf.status) return "libcublas lacks cublasCreate_v2, cublasGemmEx or cublasGetStatusString";
    return NULL;
}

static struct {
    void *p;
    size_t bytes;
} scratch[SCR_N];

void *cu_scratch(cu_scratch_use use, size_t bytes) {
    if (bytes <= scratch[use].bytes) return scratch[use].p;
    if (scratch[use].p) {
        CU_CHECK(cudaDeviceSynchronize());   // the old buffer may still be read by work queued
        CU_CHECK(cudaFree(scratch[use].p));
    }
    size_t grown = bytes + bytes / 4;        // room for the next, slightly larger call
    CU_CHECK(cudaMalloc(&scratch[use].p, grown));
    scratch[use].bytes = grown;
    return scratch[use].p;
}

static void *cu_alloc(size_t bytes) {
    void *p = NULL;
    CU_CHECK(cudaMalloc(&p, bytes ? bytes : 256));
    CU_CHECK(cudaMemset(p, 0, bytes));
    return p;
}

static void cu_free(void *p) { CU_CHECK(cudaFree(p)); }

static void cu_upload(void *dst, const void *src, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void cu_download(void *dst, const void *src, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void cu_sync(void) { CU_CHECK(cudaDeviceSynchronize()); }

static const rl_ops cuda_ops = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .embed = cu_embed,
    .rmsnorm = cu_rmsnorm,
    .matmul = cu_matmul,
    .rope = cu_rope,
    .scatter_rows = cu_scatter_rows,
    .gather_rows = cu_gather_rows,
    .attention = cu_attention,
    .swiglu = cu_swiglu,
    .add = cu_add,
    .logprob = cu_logprob,
    .sample = cu_sample,
    .logprob_backward = cu_logprob_backward,
    .matmul_dx = cu_matmul_dx,
    .matmul_dw = cu_matmul_dw,
    .rmsnorm_backward = cu_rmsnorm_backward,
    .rope_backward = cu_rope_backward,
    .attention_backward = cu_attention_backward,
    .swiglu_backward = cu_swiglu_backward,
    .embed_backward = cu_embed_backward,
    .zero = cu_zero,
    .sumsq = cu_sumsq,
    .adamw = cu_adamw,
};

// The first call decides, once for the process: device 0 (or the one
// CUDA_VISIBLE_DEVICES leaves first), a cuBLAS handle, TF32 or not.
extern "C" const rl_ops *ops_cuda(const char **why) {
    static int state;            // 0 not tried, 1 ready, -1 unusable
    static char reason[256];
    if (state == 0) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        cublasStatus_t s;
        const char *msg;
        if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
            snprintf(reason, sizeof reason, "no GPU found (%s)", cudaGetErrorString(e));
            state = -1;
        } else if (e != cudaSuccess) {
            snprintf(reason, sizeof reason, "no usable CUDA device (%s)", cudaGetErrorString(e));
            state = -1;
        } else if (n == 0) {
            snprintf(reason, sizeof reason, "no CUDA device found");
            state = -1;
        } else if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) {
            snprintf(reason, sizeof reason, "CUDA device 0 cannot be used (%s)", cudaGetErrorString(e));
            state = -1;
        } else if ((msg = open_blas())) {
            snprintf(reason, sizeof reason, "cuBLAS cannot be opened (%s)", msg);
            state = -1;
        } else if ((s = blasf.create(&blas)) != CUBLAS_STATUS_SUCCESS) {
            snprintf(reason, sizeof reason, "cuBLAS cannot start (%s)", blasf.status(s));
            state = -1;
        } else {
            const char *t = getenv("RLPIPE_TF32");
            tf32 = t && strcmp(t, "1") == 0;
            state = 1;
        }
    }
    if (state < 0) {
        if (why) *why = reason;
        return NULL;
    }
    return &cuda_ops;
}
