// precision_tool — dtype.h's fp8 e4m3 conversions, and the CPU backend's products
// of the sampler's precisions, for tests/py/test_precision.py, which compares
// them with ml_dtypes' float8_e4m3fn and with the definitions in ops.h.
//
//   precision_tool codes        the value of each of the 256 codes (e4m3_to_f32):
//                               lines "CODE BITS", both hex, BITS the f32's bits
//   precision_tool round < F32 > U8  each f32 (raw, little-endian) as f32_to_e4m3's
//                               code, one byte each
//   precision_tool product KIND N M K < X W > OUT
//                               out (N, M) = x (N, K) · Wᵀ by ops_cpu()->matmul,
//                               W (M, K) given in f32 and stored as KIND stores it:
//                                 int8  int8, one scale per output channel, ACT_I8
//                                       (the input quantized per row: W8A8)
//                                 fp8   e4m3, one scale per row, ACT_FP8
//                                 bf16  bf16, ACT_F32 (the input as it is)
//                               X, W and OUT raw f32, row-major, one after another.
//
// product says on stderr "kernels NAME", the CPU kernels in use (avx512-vnni,
// avx2 or portable: RLPIPE_CPU_PORTABLE=1 and RLPIPE_CPU=avx2 ask for less).
// Exit 0 ok, 1 on a short input, 2 usage.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "model/cpu/kernels.h"
#include "model/ops.h"
#include "util.h"

static const char *usage =
    "usage: precision_tool codes | precision_tool round < f32 | precision_tool product int8|fp8|bf16 N M K < x w\n";

static int codes(void) {
    for (int c = 0; c < 256; c++) {
        float f = e4m3_to_f32((uint8_t)c);
        uint32_t u;
        memcpy(&u, &f, 4);
        printf("%02x %08x\n", c, u);
    }
    return 0;
}

static int round_all(void) {
    float in[4096];
    uint8_t out[4096];
    size_t n;
    while ((n = fread(in, sizeof *in, 4096, stdin)) > 0) {
        for (size_t i = 0; i < n; i++) out[i] = f32_to_e4m3(in[i]);
        if (fwrite(out, 1, n, stdout) != n) return 1;
    }
    return ferror(stdin) ? 1 : 0;
}

static int read_all(float *x, size_t n, const char *what) {
    if (fread(x, sizeof *x, n, stdin) == n) return 0;
    fprintf(stderr, "precision_tool: error: input ends before %s's %zu values\n", what, n);
    return -1;
}

static int product(const char *kind, int N, int M, int K) {
    rl_mat W = {.rows = M, .cols = K};
    if (!strcmp(kind, "int8")) W.dtype = DT_I8, W.group = K, W.act = ACT_I8;
    else if (!strcmp(kind, "fp8")) W.dtype = DT_FP8, W.group = K, W.act = ACT_FP8;
    else if (!strcmp(kind, "bf16")) W.dtype = DT_BF16, W.act = ACT_F32;
    else return fputs(usage, stderr), 2;
    const rl_ops *o = ops_cpu();
    fprintf(stderr, "kernels %s\n", cpu_K->name);
    size_t nx = (size_t)N * K, nw = (size_t)M * K, es = dt_size(W.dtype);
    float *x = xmalloc(nx * sizeof *x), *w = xmalloc(nw * sizeof *w), *out = xmalloc((size_t)N * M * sizeof *out);
    if (read_all(x, nx, "x") || read_all(w, nw, "W")) return 1;
    void *data = xmalloc(nw * es);
    float *scales = W.group ? xmalloc((size_t)M * sizeof *scales) : NULL;
    if (W.dtype == DT_I8) dt_quantize_i8(data, scales, w, (size_t)M, (size_t)K, K);
    else if (W.dtype == DT_FP8) dt_quantize_fp8(data, scales, w, (size_t)M, (size_t)K);
    else dt_f32_to_bf16(data, w, nw);
    // in the backend's memory, as the model keeps them
    float *bx = o->alloc(nx * sizeof *bx), *bout = o->alloc((size_t)N * M * sizeof *bout);
    W.data = o->alloc(nw * es);
    o->upload(W.data, data, nw * es);
    if (scales) {
        W.scales = o->alloc((size_t)M * sizeof *scales);
        o->upload(W.scales, scales, (size_t)M * sizeof *scales);
    }
    o->upload(bx, x, nx * sizeof *x);
    o->matmul(bout, bx, &W, NULL, N);
    o->sync();
    o->download(out, bout, (size_t)N * M * sizeof *out);
    fwrite(out, sizeof *out, (size_t)N * M, stdout);
    o->free(bx);
    o->free(bout);
    o->free(W.data);
    if (W.scales) o->free(W.scales);
    free(x), free(w), free(out), free(data), free(scales);
    return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "codes")) return codes();
    if (argc == 2 && !strcmp(argv[1], "round")) return round_all();
    if (argc == 6 && !strcmp(argv[1], "product")) {
        int N = atoi(argv[3]), M = atoi(argv[4]), K = atoi(argv[5]);
        if (N > 0 && M > 0 && K > 0) return product(argv[2], N, M, K);
    }
    fputs(usage, stderr);
    return 2;
}
