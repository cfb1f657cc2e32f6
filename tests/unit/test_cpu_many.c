// test_cpu_many.c — the CPU backend's matmul_many (ops.h) gives each product
// matmul's bits: the q, k, v projections and gate and up, for every weight
// precision (f32, bf16, f16, int8 weights alone, W8A8 int8 and fp8), with
// and without biases, at the few input rows of decoding (whose products it
// shares out in one call of the pool) and at more. Each case runs on the
// processor's best build of the kernels and on its AVX2 build.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_builds.h"
#include "dtype.h"
#include "model/ops.h"
#include "rng.h"

enum { K = 576, MAXN = 24, NMAT = 3 };   // 118 rows of 576: even one input row's products are shared out
static const int rows_of[NMAT] = {70, 24, 24};   // q, k, v of a model with 3 times fewer key heads

typedef struct {
    const char *name;
    rl_dtype dtype;
    rl_act act;
    int group;   // scaled dtypes: inputs per scale
} kind;

static const kind kinds[] = {
    {"f32", DT_F32, ACT_F32, 0},      {"bf16", DT_BF16, ACT_F32, 0},        {"f16", DT_F16, ACT_F32, 0},
    {"int8 weights", DT_I8, ACT_F32, 32}, {"W8A8 int8", DT_I8, ACT_I8, K}, {"W8A8 fp8", DT_FP8, ACT_FP8, K},
};

// A matrix of M rows at kind k, random finite values.
static rl_mat new_mat(const rl_ops *o, const kind *k, int M, rl_rng *r) {
    rl_mat W = {.dtype = k->dtype, .rows = M, .cols = K, .group = k->group, .act = k->act, .fixed = 1};
    size_t n = (size_t)M * K, es = dt_size(k->dtype);
    unsigned char *host = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        float v = (float)rng_normal(r) * 0.1f;
        if (k->dtype == DT_F32) memcpy(host + 4 * i, &v, 4);
        else if (k->dtype == DT_BF16) dt_f32_to_bf16((uint16_t *)host + i, &v, 1);
        else if (k->dtype == DT_F16) dt_f32_to_f16((uint16_t *)host + i, &v, 1);
        else if (k->dtype == DT_I8) host[i] = (unsigned char)(int8_t)((int)(rng_u64(r) % 255) - 127);
        else host[i] = (unsigned char)(rng_u64(r) % 0x7e) | (rng_u64(r) & 1 ? 0x80 : 0);   // e4m3 without NaN
    }
    W.data = o->alloc(n * es);
    o->upload(W.data, host, n * es);
    free(host);
    if (dt_scaled(k->dtype)) {
        size_t ns = (size_t)M * ((K + k->group - 1) / k->group);
        float *s = malloc(ns * sizeof *s);
        for (size_t i = 0; i < ns; i++) s[i] = (float)rng_uniform(r) * 0.01f + 1e-4f;
        W.scales = o->alloc(ns * 4);
        o->upload(W.scales, s, ns * 4);
        free(s);
    }
    return W;
}

static void products_of_one_input_have_matmuls_bits(void) {
    const rl_ops *o = ops_cpu();
    rl_rng r;
    rng_seed(&r, 21);
    float *x = malloc(MAXN * K * sizeof *x), *bias = malloc(rows_of[0] * sizeof *bias);
    for (int i = 0; i < MAXN * K; i++) x[i] = (float)rng_normal(&r);
    for (int i = 0; i < rows_of[0]; i++) bias[i] = (float)rng_normal(&r);
    float *dx = o->alloc(MAXN * K * 4), *db = o->alloc(rows_of[0] * 4);
    o->upload(dx, x, MAXN * K * 4);
    o->upload(db, bias, rows_of[0] * 4);
    float *one[NMAT], *many[NMAT], *a = malloc(MAXN * rows_of[0] * 4), *b = malloc(MAXN * rows_of[0] * 4);
    for (int i = 0; i < NMAT; i++) one[i] = o->alloc(MAXN * rows_of[i] * 4), many[i] = o->alloc(MAXN * rows_of[i] * 4);
    for (size_t c = 0; c < sizeof kinds / sizeof *kinds; c++) {
        const kind *k = &kinds[c];
        rl_mat W[NMAT];
        for (int i = 0; i < NMAT; i++) W[i] = new_mat(o, k, rows_of[i], &r);
        const rl_mat *Wp[NMAT] = {&W[0], &W[1], &W[2]};
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *bs[NMAT] = {with_bias ? db : NULL, NULL, with_bias ? db : NULL};   // rows_of[2] <= rows_of[0]
            for (int nm = 2; nm <= NMAT; nm++)
                for (int N = 1; N <= MAXN; N = N < 6 ? N + 1 : 4 * N) {
                    for (int i = 0; i < nm; i++) o->matmul(one[i], dx, Wp[i], bs[i], N);
                    o->matmul_many(many, dx, Wp, bs, nm, N);
                    for (int i = 0; i < nm; i++) {
                        size_t n = (size_t)N * rows_of[i];
                        o->download(a, one[i], n * 4);
                        o->download(b, many[i], n * 4);
                        int differ = 0;
                        for (size_t j = 0; j < n; j++) differ += memcmp(a + j, b + j, 4) != 0;
                        CHECK(differ == 0, "%s, %d products of %d rows%s: %d of %zu outputs of product %d differ",
                              k->name, nm, N, with_bias ? ", biases" : "", differ, n, i);
                    }
                }
        }
        for (int i = 0; i < NMAT; i++) o->free(W[i].data), o->free(W[i].scales);
    }
    for (int i = 0; i < NMAT; i++) o->free(one[i]), o->free(many[i]);
    o->free(dx), o->free(db);
    free(x), free(bias), free(a), free(b);
}

// Products whose weights quantize their input differently are computed one
// by one, with the same bits.
static void products_of_mixed_precisions_have_matmuls_bits(void) {
    const rl_ops *o = ops_cpu();
    rl_rng r;
    rng_seed(&r, 22);
    float *x = malloc(K * sizeof *x), *a = malloc(rows_of[0] * 4), *b = malloc(rows_of[0] * 4);
    for (int i = 0; i < K; i++) x[i] = (float)rng_normal(&r);
    float *dx = o->alloc(K * 4), *one[2], *many[2];
    o->upload(dx, x, K * 4);
    rl_mat W[2] = {new_mat(o, &kinds[4], rows_of[0], &r), new_mat(o, &kinds[1], rows_of[1], &r)};
    const rl_mat *Wp[2] = {&W[0], &W[1]};
    const float *bs[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) one[i] = o->alloc(rows_of[i] * 4), many[i] = o->alloc(rows_of[i] * 4);
    for (int i = 0; i < 2; i++) o->matmul(one[i], dx, Wp[i], NULL, 1);
    o->matmul_many(many, dx, Wp, bs, 2, 1);
    for (int i = 0; i < 2; i++) {
        o->download(a, one[i], rows_of[i] * 4);
        o->download(b, many[i], rows_of[i] * 4);
        CHECK(memcmp(a, b, rows_of[i] * 4) == 0, "W8A8 int8 then bf16: product %d differs", i);
        o->free(W[i].data), o->free(W[i].scales), o->free(one[i]), o->free(many[i]);
    }
    o->free(dx);
    free(x), free(a), free(b);
}

static void cases(void) {
    RUN(products_of_one_input_have_matmuls_bits);
    RUN(products_of_mixed_precisions_have_matmuls_bits);
}

int main(void) {
    on_best_and_avx2(cases);
    CHECK_DONE();
}
