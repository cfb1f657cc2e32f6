// cuda/cuda.cu — the CUDA backend of ops.h: memory, and the table of
// operations, whose kernels live in kernels.cu, train.cu, matmul.cu,
// quant.cu, attention.cu and sample.cu. Start-up, cuBLAS and cuBLASLt,
// scratch buffers and error checks are runtime.cu.
#include "model/cuda/cuda.h"

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
    .host_memory = 0,   // device memory: upload and download reach it
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .embed = cu_embed,
    .rmsnorm = cu_rmsnorm,
    .matmul = cu_matmul,
    .matmul_many = NULL,   // the model calls matmul for each product
    .rope = cu_rope,
    .kv_dtypes = 1u << DT_F32,
    .scatter_rows = cu_scatter_rows,
    .gather_rows = cu_gather_rows,
    .attention = cu_attention,
    .swiglu = cu_swiglu,
    .add = cu_add,
    .scale = cu_scale,
    .round_bf16 = cu_round_bf16,
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

extern "C" const rl_ops *ops_cuda(const char **why) {
    const char *reason = cu_start();
    if (reason) {
        if (why) *why = reason;
        return NULL;
    }
    return &cuda_ops;
}
