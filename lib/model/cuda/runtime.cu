// cuda/runtime.cu — what every file of the CUDA backend calls: start-up (is
// there a GPU?), error checks, the cuBLAS handle (cuBLAS opened with dlopen)
// and its GemmEx, cuBLASLt's handle and functions (opened the same way), and
// the scratch buffers on the device.
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
static cu_lt_api lt;
static int tf32, sm;

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

int cu_sm(void) { return sm; }

const cu_lt_api *cu_lt(void) { return &lt; }

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

// Opens cuBLASLt (which cuBLAS itself loads) and finds its functions, as
// open_blas; NULL, or what went wrong.
static const char *open_blas_lt(void) {
    void *h = dlopen("libcublasLt.so." STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
    const struct {
        void **fn;
        const char *name;
    } want[] = {
        {(void **)&lt.desc_create, "cublasLtMatmulDescCreate"},
        {(void **)&lt.desc_destroy, "cublasLtMatmulDescDestroy"},
        {(void **)&lt.desc_set, "cublasLtMatmulDescSetAttribute"},
        {(void **)&lt.layout_create, "cublasLtMatrixLayoutCreate"},
        {(void **)&lt.layout_destroy, "cublasLtMatrixLayoutDestroy"},
        {(void **)&lt.pref_create, "cublasLtMatmulPreferenceCreate"},
        {(void **)&lt.pref_destroy, "cublasLtMatmulPreferenceDestroy"},
        {(void **)&lt.pref_set, "cublasLtMatmulPreferenceSetAttribute"},
        {(void **)&lt.heuristic, "cublasLtMatmulAlgoGetHeuristic"},
        {(void **)&lt.matmul, "cublasLtMatmul"},
    };
    static char why[96];
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!(*want[i].fn = dlsym(h, want[i].name))) {
            snprintf(why, sizeof why, "libcublasLt lacks %s", want[i].name);
            return why;
        }
    cublasStatus_t (*create)(cublasLtHandle_t *);
    *(void **)&create = dlsym(h, "cublasLtCreate");
    if (!create) return "libcublasLt lacks cublasLtCreate";
    cublasStatus_t s = create(&lt.handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, sizeof why, "cublasLtCreate: %s", blasf.status(s));
        return why;
    }
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

// The GPU of this process: its local rank on the node, modulo the GPUs
// there, when a launcher says it (Open MPI's mpirun, Slurm's srun, MPICH's
// hydra: one GPU per data-parallel rank); else the first.
static int pick_device(int n) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0) return (int)(r % n);
    }
    return 0;
}

const char *cu_start(void) {
    static int state;            // 0 not tried, 1 ready, -1 unusable
    static char reason[256];
    if (state == 0) {
        int n = 0, dev = 0, major = 0, minor = 0;
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
        } else if ((e = cudaSetDevice(dev = pick_device(n))) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) {
            snprintf(reason, sizeof reason, "CUDA device %d cannot be used (%s)", dev, cudaGetErrorString(e));
            state = -1;
        } else if ((msg = open_blas())) {
            snprintf(reason, sizeof reason, "cuBLAS cannot be opened (%s)", msg);
            state = -1;
        } else if ((s = blasf.create(&blas)) != CUBLAS_STATUS_SUCCESS) {
            snprintf(reason, sizeof reason, "cuBLAS cannot start (%s)", blasf.status(s));
            state = -1;
        } else if ((msg = open_blas_lt())) {
            snprintf(reason, sizeof reason, "cuBLASLt cannot be opened (%s)", msg);
            state = -1;
        } else if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
                   (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess) {
            snprintf(reason, sizeof reason, "CUDA device %d has no compute capability (%s)", dev,
                     cudaGetErrorString(e));
            state = -1;
        } else {
            const char *t = getenv("RLPIPE_TF32");
            tf32 = t && strcmp(t, "1") == 0;
            sm = major * 10 + minor;
            state = 1;
        }
    }
    return state < 0 ? reason : NULL;
}
