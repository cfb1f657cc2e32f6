// cpu/kernels.c — row kernels of the CPU backend (see kernels.h): the
// portable version, and the choice among it and the builds for x86-64
// (RLPIPE_CPU): AVX2, FMA and F16C (kernels_avx2.c); int8 products with
// AVX-512 VNNI, AVX-512 many-row products and bf16 panels (kernels_avx512.c);
// the latter with bf16 panels and many-row int8 products on AMX tiles
// (amx.c). The vector builds' functions carry their own target attribute so
// that the rest of the build stays portable. Floating-point kernels
// accumulate in f32, int8 products exactly in int32.
#include "model/cpu/kernels_internal.h"

#include <stdlib.h>
#include <string.h>

// ---- Portable C -------------------------------------------------------------

static float dot_portable(const float *x, const void *w, const float *scales, int K, int group,
                         rl_dtype dt) {
    float s = 0;
    if (dt == DT_I8 || dt == DT_FP8) {   // each group's sum times its scale
        for (int g = 0, k0 = 0; k0 < K; g++, k0 += group) {
            int k1 = k0 + group < K ? k0 + group : K;
            float gs = 0;
            for (int k = k0; k < k1; k++) gs += x[k] * unscaled(w, k, dt);
            s += gs * scales[g];
        }
        return s;
    }
    if (dt == DT_F32) {
        const float *wf = w;
        for (int k = 0; k < K; k++) s += x[k] * wf[k];
        return s;
    }
    for (int k = 0; k < K; k++) s += x[k] * elem(w, scales, k, group, dt);
    return s;
}

static void row_to_f32_portable(float *out, const void *w, const float *scales, int K, int group,
                                rl_dtype dt) {
    if (dt == DT_F32) {
        memcpy(out, w, (size_t)K * sizeof(float));
        return;
    }
    for (int k = 0; k < K; k++) out[k] = elem(w, scales, k, group, dt);
}

static float sum_exp_portable(const float *x, int n, float max, float scale) {
    float s = 0;
    for (int i = 0; i < n; i++) s += expf((x[i] - max) * scale);
    return s;
}

static void swiglu_portable(float *out, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static float exp_row_portable(float *out, const float *x, int n, float sub, float scale) {
    float s = 0;
    for (int i = 0; i < n; i++) {
        out[i] = expf((x[i] - sub) * scale);
        s += out[i];
    }
    return s;
}

static void round_bf16_portable(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

static float quant_i8_portable(int8_t *q, const float *x, int K) {
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k]));
    float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0;
    for (int k = 0; k < K; k++) {
        long v = lrintf(x[k] * inv);
        q[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return s;
}

static float quant_fp8_portable(float *q, const float *x, int K) {
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k]));
    float s = amax / 448.0f, inv = s > 0 ? 1.0f / s : 0;
    for (int k = 0; k < K; k++) q[k] = e4m3_to_f32(f32_to_e4m3(x[k] * inv));
    return s;
}

static void dots_i8_portable(int32_t *out, const int8_t *x, size_t ldx, int nx, const int8_t *w, size_t ldw, int nw,
                             int K) {
    for (int j = 0; j < nx; j++)
        for (int i = 0; i < nw; i++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++) s += (int32_t)x[j * ldx + k] * w[i * ldw + k];
            out[j * nw + i] = s;
        }
}

static void kv_scores_portable(float *S, const float *q, int G, const void *K, rl_dtype dt, size_t ld, int T,
                               int HS, float scale) {
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++) {
            float s = 0;
            for (int d = 0; d < HS; d++) s += q[(size_t)g * HS + d] * elem(kv_row(K, dt, ld, t), NULL, d, 0, dt);
            S[(size_t)g * T + t] = s * scale;
        }
}

static void kv_mix_portable(float *o, const float *P, int G, int T, const void *V, rl_dtype dt, size_t ld, int HS) {
    for (size_t i = 0; i < (size_t)G * HS; i++) o[i] = 0;
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++)
            for (int d = 0; d < HS; d++)
                o[(size_t)g * HS + d] += P[(size_t)g * T + t] * elem(kv_row(V, dt, ld, t), NULL, d, 0, dt);
}

static const cpu_kernels *cpu_kernels_portable(void) {
    static const cpu_kernels k = {.name = "portable",
                                  .dot = dot_portable,
                                  .row_to_f32 = row_to_f32_portable,
                                  .sum_exp = sum_exp_portable,
                                  .swiglu = swiglu_portable,
                                  .exp_row = exp_row_portable,
                                  .swiglu_backward = swiglu_backward_portable,
                                  .adamw = adamw_portable,
                                  .round_bf16 = round_bf16_portable,
                                  .quant_i8 = quant_i8_portable,
                                  .quant_fp8 = quant_fp8_portable,
                                  .dots_i8 = dots_i8_portable,
                                  .kv_scores = kv_scores_portable,
                                  .kv_mix = kv_mix_portable};
    return &k;
}

// ---- The choice -------------------------------------------------------------

const cpu_kernels *cpu_K;

void cpu_kernels_choose(void) {
    const char *want = getenv("RLPIPE_CPU");
    const cpu_kernels *k = NULL;
    if (!getenv("RLPIPE_CPU_PORTABLE")) {
        if (!want || (strcmp(want, "avx2") && strcmp(want, "avx512"))) k = cpu_kernels_amx();
        if (!k && (!want || strcmp(want, "avx2"))) k = cpu_kernels_vnni();
        if (!k) k = cpu_kernels_avx2();
    }
    cpu_K = k ? k : cpu_kernels_portable();
}
