// test_cpu_pack.c — the CPU backend's bf16 panels (model/cpu/pack.h) follow
// the matrix they copy: a product of many rows from a matrix gives the
// product of what was last uploaded into it, after whole or partial uploads
// and after a free and a new matrix in its place, and the same values as the
// product from the rows as stored (RLPIPE_CPU_PANELS=0) to f32 rounding.
// On a processor without AVX512_BF16 there are no panels, and the same
// checks test the rows' product.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "model/cpu/pack.h"
#include "model/ops.h"
#include "rng.h"

enum { N = 24, M = 70, K = 96 };   // more input rows than decoding's few-row kernels take

// wb (M, K) bf16 random, x (N, K) bf16 values
static void fill(uint16_t *wb, float *x, rl_rng *r) {
    for (int i = 0; i < M * K; i++) wb[i] = f32_to_bf16((float)rng_normal(r) * 0.1f);
    for (int i = 0; i < N * K; i++) x[i] = bf16_to_f32(f32_to_bf16((float)rng_normal(r)));
}

// out (N, M) against x · wbᵀ in double, within 1e-5 of Σ|x w|
static void check_product(const float *out, const float *x, const uint16_t *wb, const char *when) {
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) {
            double want = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[n * K + k] * bf16_to_f32(wb[m * K + k]);
                want += p, mag += fabs(p);
            }
            CHECK(fabs(out[n * M + m] - want) <= 1e-5 * mag, "%s: out[%d][%d] %.9g, want %.9g", when, n, m,
                  out[n * M + m], want);
        }
}

static void products_follow_every_upload_into_the_matrix(void) {
    const rl_ops *o = ops_cpu();
    rl_rng r;
    rng_seed(&r, 11);
    uint16_t *wb = malloc(M * K * sizeof *wb);
    float *x = malloc(N * K * sizeof *x), *out = malloc(N * M * sizeof *out);
    fill(wb, x, &r);
    rl_mat W = {.dtype = DT_BF16, .rows = M, .cols = K, .data = o->alloc(M * K * 2)};
    float *dx = o->alloc(N * K * 4), *dout = o->alloc(N * M * 4);
    o->upload(W.data, wb, M * K * 2);
    o->upload(dx, x, N * K * 4);
    o->matmul(dout, dx, &W, NULL, N);
    o->download(out, dout, N * M * 4);
    check_product(out, x, wb, "first product");
    o->matmul(dout, dx, &W, NULL, N);   // again, from the panels made by the first
    o->download(out, dout, N * M * 4);
    check_product(out, x, wb, "second product");

    for (int i = 0; i < M * K; i++) wb[i] = f32_to_bf16((float)rng_normal(&r) * 0.1f);
    o->upload(W.data, wb, M * K * 2);   // new weights, the whole matrix
    o->matmul(dout, dx, &W, NULL, N);
    o->download(out, dout, N * M * 4);
    check_product(out, x, wb, "after a whole upload");

    for (int i = 37 * K; i < 38 * K; i++) wb[i] = f32_to_bf16((float)rng_normal(&r));
    o->upload((uint16_t *)W.data + 37 * K, wb + 37 * K, K * 2);   // one row, as in-flight updates send rows
    o->matmul(dout, dx, &W, NULL, N);
    o->download(out, dout, N * M * 4);
    check_product(out, x, wb, "after one row's upload");

    o->free(W.data);   // a new matrix, perhaps at the same address
    fill(wb, x, &r);
    W.data = o->alloc(M * K * 2);
    o->upload(W.data, wb, M * K * 2);
    o->upload(dx, x, N * K * 4);
    o->matmul(dout, dx, &W, NULL, N);
    o->download(out, dout, N * M * 4);
    check_product(out, x, wb, "a new matrix after a free");

    float *rows = malloc(N * M * sizeof *rows);   // the same product from the rows as stored
    setenv("RLPIPE_CPU_PANELS", "0", 1);
    o->matmul(dout, dx, &W, NULL, N);
    o->download(rows, dout, N * M * 4);
    check_product(rows, x, wb, "from the rows");
    o->free(W.data), o->free(dx), o->free(dout);
    free(wb), free(x), free(out), free(rows);
}

int main(void) {
    RUN(products_follow_every_upload_into_the_matrix);
    CHECK_DONE();
}
