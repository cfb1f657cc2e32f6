// test_cpu_pack.c — the CPU backend's panels (model/cpu/pack.h) follow the
// matrix they copy, f32, bf16 or int8: a product of many rows from a matrix gives
// the product of what was last uploaded into it, after whole or partial
// uploads and after a free and a new matrix in its place, and the same
// values as the product from the rows as stored (RLPIPE_CPU_PANELS=0) to f32
// rounding; a matrix not fixed, written in place, is never read from
// stale panels (products of many rows pack panels for themselves), nor does
// a fixed one multiplied by very many rows keep any; W8A8
// int8 products (read from panels with AMX) keep the bits of the product
// without panels through every upload. Each case runs on the
// processor's best build of the kernels and on its AVX2 build (whose
// panels are read 8 lanes at a time); on a processor with neither there
// are no panels, and the same checks test the rows' product.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_builds.h"
#include "dtype.h"
#include "model/cpu/kernels.h"
#include "model/cpu/pack.h"
#include "model/ops.h"
#include "rng.h"

enum { N = 24, M = 70, K = 96 };   // more input rows than decoding's few-row kernels take
enum { MANY = 2048 };              // rows from which cpu.c packs a matrix not fixed for one product (ONCE_ROWS)

// Rows [r0, r1) of w (M, K) new random values, at dt's precision
static void new_rows(float *w, int r0, int r1, rl_dtype dt, rl_rng *r) {
    for (int i = r0 * K; i < r1 * K; i++) {
        w[i] = (float)rng_normal(r) * 0.1f;
        if (dt == DT_BF16) w[i] = bf16_to_f32(f32_to_bf16(w[i]));
    }
}

// Rows [r0, r1) of w into the matrix W at its dtype
static void upload_rows(const rl_ops *o, const rl_mat *W, const float *w, int r0, int r1) {
    size_t n = (size_t)(r1 - r0) * K, es = dt_size(W->dtype);
    void *host = malloc(n * es);
    if (W->dtype == DT_BF16) dt_f32_to_bf16(host, w + (size_t)r0 * K, n);
    else memcpy(host, w + (size_t)r0 * K, n * es);
    o->upload((char *)W->data + (size_t)r0 * K * es, host, n * es);
    free(host);
}

// x (rows, K) · Wᵀ from the backend against x · wᵀ in double, within 1e-5 of Σ|x w|
static void check_rows(const rl_ops *o, const rl_mat *W, float *dx, float *dout, const float *x, const float *w,
                       int rows, const char *when) {
    float *out = malloc((size_t)rows * M * sizeof *out);
    o->upload(dx, x, (size_t)rows * K * 4);
    o->matmul(dout, dx, W, NULL, rows);
    o->download(out, dout, (size_t)rows * M * 4);
    for (int n = 0; n < rows; n++)
        for (int m = 0; m < M; m++) {
            double want = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[n * K + k] * w[m * K + k];
                want += p, mag += fabs(p);
            }
            CHECK(fabs(out[n * M + m] - want) <= 1e-5 * mag, "%s weights, %s: out[%d][%d] %.9g, want %.9g",
                  dt_name(W->dtype), when, n, m, out[n * M + m], want);
        }
    free(out);
}

static void check_product(const rl_ops *o, const rl_mat *W, float *dx, float *dout, const float *x, const float *w,
                          const char *when) {
    check_rows(o, W, dx, dout, x, w, N, when);
}

static void products_follow_every_upload_into_the_matrix(void) {
    const rl_ops *o = ops_cpu();
    rl_rng r;
    rng_seed(&r, 11);
    float *w = malloc(M * K * sizeof *w), *x = malloc(N * K * sizeof *x);
    for (int i = 0; i < N * K; i++) x[i] = bf16_to_f32(f32_to_bf16((float)rng_normal(&r)));   // as bf16 makes them
    float *dx = o->alloc(N * K * 4), *dout = o->alloc(N * M * 4);
    for (int bf = 0; bf < 2; bf++) {
        rl_dtype dt = bf ? DT_BF16 : DT_F32;
        unsetenv("RLPIPE_CPU_PANELS");
        rl_mat W = {.dtype = dt, .rows = M, .cols = K, .data = o->alloc((size_t)M * K * dt_size(dt)), .fixed = 1};
        new_rows(w, 0, M, dt, &r);
        upload_rows(o, &W, w, 0, M);
        check_product(o, &W, dx, dout, x, w, "first product");
        check_product(o, &W, dx, dout, x, w, "second product (the panels of the first)");
        new_rows(w, 0, M, dt, &r);
        upload_rows(o, &W, w, 0, M);
        check_product(o, &W, dx, dout, x, w, "after a whole upload");
        new_rows(w, 37, 38, dt, &r);
        upload_rows(o, &W, w, 37, 38);   // one row, as in-flight updates send rows
        check_product(o, &W, dx, dout, x, w, "after one row's upload");
        o->free(W.data);   // a new matrix, perhaps at the same address
        W.data = o->alloc((size_t)M * K * dt_size(dt));
        new_rows(w, 0, M, dt, &r);
        upload_rows(o, &W, w, 0, M);
        check_product(o, &W, dx, dout, x, w, "a new matrix after a free");
        setenv("RLPIPE_CPU_PANELS", "0", 1);   // the same product from the rows as stored
        check_product(o, &W, dx, dout, x, w, "from the rows");
        o->free(W.data);
    }
    o->free(dx), o->free(dout);
    free(w), free(x);
}

// W8A8 int8 weights (ACT_I8), which a build with i8_panels (AMX) reads from
// panels: after a first upload, a whole one, one row's, and a new matrix
// after a free, the product has the bits of the same product with no panels
// (RLPIPE_CPU_PANELS=0: the weights packed again from the rows at that
// product); the int32 sums are exact, so a panel left stale shows as other
// bits.
static void int8_products_follow_every_upload_into_the_matrix(void) {
    const rl_ops *o = ops_cpu();
    rl_rng r;
    rng_seed(&r, 13);
    float *x = malloc(N * K * sizeof *x), *a = malloc(N * M * sizeof *a), *b = malloc(N * M * sizeof *b);
    float *sw = malloc(M * sizeof *sw);
    int8_t *w = malloc(M * K);
    for (int i = 0; i < N * K; i++) x[i] = (float)rng_normal(&r);
    float *dx = o->alloc(N * K * 4), *dout = o->alloc(N * M * 4);
    o->upload(dx, x, N * K * 4);
    rl_mat W = {.dtype = DT_I8, .rows = M, .cols = K, .group = K, .act = ACT_I8, .fixed = 1,
                .data = o->alloc(M * K), .scales = o->alloc(M * 4)};
    const char *when[] = {"first upload", "a whole upload", "one row's upload", "a new matrix after a free"};
    for (int c = 0; c < 4; c++) {
        if (c == 3) {
            o->free(W.data);
            W.data = o->alloc(M * K);
        }
        int r0 = c == 2 ? 37 : 0, r1 = c == 2 ? 38 : M;
        for (int i = r0 * K; i < r1 * K; i++) w[i] = (int8_t)((int)(rng_u64(&r) % 255) - 127);
        for (int m = 0; m < M; m++) sw[m] = (float)rng_uniform(&r) * 0.01f + 1e-4f;
        o->upload((char *)W.data + (size_t)r0 * K, w + (size_t)r0 * K, (size_t)(r1 - r0) * K);
        o->upload(W.scales, sw, M * 4);
        for (int pass = 0; pass < 2; pass++) {   // from the panels (twice: made, then kept), then without
            unsetenv("RLPIPE_CPU_PANELS");
            o->matmul(dout, dx, &W, NULL, N);
            o->download(a, dout, N * M * 4);
        }
        setenv("RLPIPE_CPU_PANELS", "0", 1);
        o->matmul(dout, dx, &W, NULL, N);
        o->download(b, dout, N * M * 4);
        unsetenv("RLPIPE_CPU_PANELS");
        int differ = 0;
        for (int i = 0; i < N * M; i++) differ += memcmp(a + i, b + i, 4) != 0;
        CHECK(differ == 0, "%s: %d of %d outputs differ from the product without panels", when[c], differ, N * M);
    }
    o->free(W.data), o->free(W.scales), o->free(dx), o->free(dout);
    free(x), free(a), free(b), free(sw), free(w);
}

// A matrix not fixed (ops.h rl_mat: a trained one) may be written by ops in
// place, as the optimizer writes the learner's weights: no panels kept, so
// the next product sees the new values, at a few rows (read from the rows)
// and at many (panels packed for each product, their buffer used again).
static void a_matrix_written_in_place_is_never_read_from_panels(void) {
    const rl_ops *o = ops_cpu();
    rl_rng r;
    rng_seed(&r, 12);
    float *w = malloc(M * K * sizeof *w), *step = malloc(M * K * sizeof *step);
    float *x = malloc((size_t)MANY * K * sizeof *x);
    for (int i = 0; i < MANY * K; i++) x[i] = (float)rng_normal(&r);
    float *dx = o->alloc((size_t)MANY * K * 4), *dout = o->alloc((size_t)MANY * M * 4), *dstep = o->alloc(M * K * 4);
    unsetenv("RLPIPE_CPU_PANELS");
    rl_mat W = {.dtype = DT_F32, .rows = M, .cols = K, .data = o->alloc(M * K * 4), .fixed = 0};
    new_rows(w, 0, M, DT_F32, &r);
    upload_rows(o, &W, w, 0, M);
    check_product(o, &W, dx, dout, x, w, "before the step");
    check_rows(o, &W, dx, dout, x, w, MANY, "many rows, before the step");
    new_rows(step, 0, M, DT_F32, &r);
    o->upload(dstep, step, M * K * 4);
    o->add(W.data, dstep, (size_t)M * K);   // in place, not through upload
    o->download(w, W.data, M * K * 4);
    check_product(o, &W, dx, dout, x, w, "after a step in place");
    check_rows(o, &W, dx, dout, x, w, MANY, "many rows, after a step in place");
    o->free(W.data), o->free(dx), o->free(dout), o->free(dstep);
    free(w), free(x), free(step);
}

// A fixed matrix multiplied by very many rows (a learner's frozen base, a
// scorer's weights) is packed for that product alone: no panels are kept,
// and the product has the bits of the same product from kept panels (which
// a product of N rows, a sampler's decoding, makes and keeps).
static void only_products_of_fewer_rows_keep_a_fixed_matrixs_panels(void) {
    const rl_ops *o = ops_cpu();
    rl_rng r;
    rng_seed(&r, 14);
    float *w = malloc(M * K * sizeof *w), *x = malloc((size_t)MANY * K * sizeof *x);
    float *once = malloc((size_t)MANY * M * sizeof *once), *kept = malloc((size_t)MANY * M * sizeof *kept);
    for (int i = 0; i < MANY * K; i++) x[i] = bf16_to_f32(f32_to_bf16((float)rng_normal(&r)));
    float *dx = o->alloc((size_t)MANY * K * 4), *dout = o->alloc((size_t)MANY * M * 4);
    o->upload(dx, x, (size_t)MANY * K * 4);
    unsetenv("RLPIPE_CPU_PANELS");
    for (int bf = 0; bf < 2; bf++) {
        rl_dtype dt = bf ? DT_BF16 : DT_F32;
        rl_mat W = {.dtype = dt, .rows = M, .cols = K, .data = o->alloc((size_t)M * K * dt_size(dt)), .fixed = 1};
        new_rows(w, 0, M, dt, &r);
        upload_rows(o, &W, w, 0, M);
        check_rows(o, &W, dx, dout, x, w, MANY, "many rows, nothing kept");
        o->download(once, dout, (size_t)MANY * M * 4);
        int none_after_many = cpu_panels_kept(&W) == NULL;
        o->matmul(dout, dx, &W, NULL, N);
        int kept_after_few = cpu_panels_kept(&W) != NULL || !(cpu_K->panels_for >> dt & 1);
        o->matmul(dout, dx, &W, NULL, MANY);
        o->download(kept, dout, (size_t)MANY * M * 4);
        int differ = 0;
        for (int i = 0; i < MANY * M; i++) differ += memcmp(once + i, kept + i, 4) != 0;
        CHECK(none_after_many, "%s: a product of %d rows kept panels", dt_name(dt), MANY);
        CHECK(kept_after_few, "%s: a product of %d rows kept no panels", dt_name(dt), N);
        CHECK(differ == 0, "%s: %d of %d outputs from kept panels differ from those packed for the product",
              dt_name(dt), differ, MANY * M);
        o->free(W.data);
    }
    o->free(dx), o->free(dout);
    free(w), free(x), free(once), free(kept);
}

static void cases(void) {
    RUN(products_follow_every_upload_into_the_matrix);
    RUN(int8_products_follow_every_upload_into_the_matrix);
    RUN(a_matrix_written_in_place_is_never_read_from_panels);
    RUN(only_products_of_fewer_rows_keep_a_fixed_matrixs_panels);
}

int main(void) {
    on_best_and_avx2(cases);
    CHECK_DONE();
}
