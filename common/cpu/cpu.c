// cpu/cpu.c — the CPU backend of ops.h: OpenBLAS sgemm for matrix products
// of many rows, row kernels (kernels.c) for the few-row products of decoding
// and for everything elementwise, OpenMP threads around both. OpenBLAS is kept
// single-threaded and called once per thread on a block of weight rows, so
// one pool of threads does all the work and no two pools spin against each other.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "ops.h"

void openblas_set_num_threads(int);   // OpenBLAS's own; not in every cblas.h

static const cpu_kernels *K_;          // chosen once by ops_cpu()

// Products with at most this many rows use the row kernels (the weights are
// read once from memory, converted on the fly); more rows go to sgemm.
#define FEW_ROWS 4
// Weight rows converted to f32 per sgemm call when weights are not f32.
#define TILE_ROWS 128
// Elementwise work below this many elements stays on the calling thread:
// waking the others costs more (a decoding step of one token is all small ops).
#define PAR_MIN 32768

static void *cpu_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "rlpipe: out of memory (%zu bytes for the CPU backend)\n", bytes);
        abort();
    }
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

// Row r of a weight matrix and its int8 scales.
static const void *mat_row(const rl_mat *W, int r) {
    return (const char *)W->data + (size_t)r * W->cols * dt_size(W->dtype);
}

static const float *mat_scales(const rl_mat *W, int r) {
    if (W->dtype != DT_I8) return NULL;
    return W->scales + (size_t)r * ((W->cols + W->group - 1) / W->group);
}

// The part [*lo, *hi) of n items that thread t of nt takes, in multiples of align.
static void split(int n, int nt, int t, int align, int *lo, int *hi) {
    int blocks = (n + align - 1) / align;
    int b0 = (int)((long)blocks * t / nt), b1 = (int)((long)blocks * (t + 1) / nt);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

static void cpu_embed(float *out, const rl_mat *table, const int32_t *ids, int N) {
    int C = table->cols;
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_MIN)
    for (int i = 0; i < N; i++)
        K_->row_to_f32(out + (size_t)i * C, mat_row(table, ids[i]), mat_scales(table, ids[i]), C,
                       table->group, table->dtype);
}

static void cpu_rmsnorm(float *out, const float *x, const float *g, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float *oi = out + (size_t)i * C;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += xi[c] * xi[c];
        float inv = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++) oi[c] = xi[c] * inv * g[c];
    }
}

// out (N, M) = x (N, K) · Wᵀ for N <= FEW_ROWS: each thread takes weight rows.
static void matmul_few(float *out, const float *x, const rl_mat *W, int N) {
    int M = W->rows, Kd = W->cols;
#pragma omp parallel if ((long)M * Kd >= PAR_MIN)
    {
        int lo, hi;
        split(M, omp_get_num_threads(), omp_get_thread_num(), 16, &lo, &hi);
        float *row = N > 1 && W->dtype != DT_F32 ? malloc((size_t)Kd * sizeof(float)) : NULL;
        for (int m = lo; m < hi; m++) {
            const void *w = mat_row(W, m);
            const float *s = mat_scales(W, m);
            if (!row) {
                for (int n = 0; n < N; n++)
                    out[(size_t)n * M + m] = K_->dot(x + (size_t)n * Kd, w, s, Kd, W->group, W->dtype);
            } else {
                K_->row_to_f32(row, w, s, Kd, W->group, W->dtype);
                for (int n = 0; n < N; n++)
                    out[(size_t)n * M + m] = K_->dot(x + (size_t)n * Kd, row, NULL, Kd, 0, DT_F32);
            }
        }
        free(row);
    }
}

// out (N, M) = x (N, K) · Wᵀ with sgemm, each thread on its block of weight
// rows; non-f32 weights are converted TILE_ROWS rows at a time.
static void matmul_sgemm(float *out, const float *x, const rl_mat *W, int N) {
    int M = W->rows, Kd = W->cols;
#pragma omp parallel
    {
        int lo, hi;
        split(M, omp_get_num_threads(), omp_get_thread_num(), 16, &lo, &hi);
        if (W->dtype == DT_F32) {
            if (hi > lo)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, hi - lo, Kd, 1.0f, x, Kd,
                            (const float *)W->data + (size_t)lo * Kd, Kd, 0.0f, out + lo, M);
        } else if (hi > lo) {
            float *tile = malloc((size_t)TILE_ROWS * Kd * sizeof(float));
            if (!tile) {
                fprintf(stderr, "rlpipe: out of memory (matmul tile)\n");
                abort();
            }
            for (int m0 = lo; m0 < hi; m0 += TILE_ROWS) {
                int rows = hi - m0 < TILE_ROWS ? hi - m0 : TILE_ROWS;
                for (int r = 0; r < rows; r++)
                    K_->row_to_f32(tile + (size_t)r * Kd, mat_row(W, m0 + r), mat_scales(W, m0 + r), Kd,
                                   W->group, W->dtype);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, rows, Kd, 1.0f, x, Kd, tile, Kd,
                            0.0f, out + m0, M);
            }
            free(tile);
        }
    }
}

static void cpu_matmul(float *out, const float *x, const rl_mat *W, const float *bias, int N) {
    if (N <= FEW_ROWS) matmul_few(out, x, W, N);
    else matmul_sgemm(out, x, W, N);
    if (!bias) return;
    int M = W->rows;
#pragma omp parallel for schedule(static) if ((long)N * M >= PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) out[(size_t)n * M + m] += bias[m];
}

static void cpu_rope(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS) {
    int half = HS / 2;
#pragma omp parallel for schedule(static) if ((long)N * H * HS >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *cs = cos_sin + (size_t)pos[i] * half * 2;
        for (int h = 0; h < H; h++) {
            float *v = x + ((size_t)i * H + h) * HS;
            for (int j = 0; j < half; j++) {
                float c = cs[2 * j], s = cs[2 * j + 1], a = v[j], b = v[j + half];
                v[j] = a * c - b * s;
                v[j + half] = b * c + a * s;
            }
        }
    }
}

static void cpu_scatter_rows(float *dst, const int32_t *rows, const float *src, int N, int W) {
    for (int i = 0; i < N; i++)
        memcpy(dst + (size_t)rows[i] * W, src + (size_t)i * W, (size_t)W * sizeof(float));
}

static void cpu_gather_rows(float *dst, const float *src, const int32_t *rows, int N, int W) {
    for (int i = 0; i < N; i++)
        memcpy(dst + (size_t)i * W, src + (size_t)rows[i] * W, (size_t)W * sizeof(float));
}

// One (sequence, head) pair per task: for each query row, scores against every
// key up to its position, softmax, weighted sum of values.
static void cpu_attention(float *out, const float *q, const float *k, const float *v,
                          const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS) {
    (void)N;
    int group = NH / NKV, qstride = NH * HS, kvstride = NKV * HS;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int s = 0; s < nseq; s++)
        for (int h = 0; h < NH; h++) {
            rl_attn_seq sq = seqs[s];
            int hk = h / group;
            float *sc = malloc((size_t)(sq.pos0 + sq.n) * sizeof(float));
            if (!sc) {
                fprintf(stderr, "rlpipe: out of memory (attention scores)\n");
                abort();
            }
            for (int j = 0; j < sq.n; j++) {
                const float *qr = q + (size_t)(sq.q0 + j) * qstride + (size_t)h * HS;
                float *o = out + (size_t)(sq.q0 + j) * qstride + (size_t)h * HS;
                int T = sq.pos0 + j + 1;
                float mx = -INFINITY;
                for (int t = 0; t < T; t++) {
                    const float *kr = k + (size_t)(sq.kv0 + t) * kvstride + (size_t)hk * HS;
                    sc[t] = K_->dot(qr, kr, NULL, HS, 0, DT_F32) * scale;
                    if (sc[t] > mx) mx = sc[t];
                }
                float sum = 0;
                for (int t = 0; t < T; t++) {
                    sc[t] = expf(sc[t] - mx);
                    sum += sc[t];
                }
                float inv = 1.0f / sum;
                memset(o, 0, (size_t)HS * sizeof(float));
                for (int t = 0; t < T; t++) {
                    const float *vr = v + (size_t)(sq.kv0 + t) * kvstride + (size_t)hk * HS;
                    float a = sc[t] * inv;
                    for (int d = 0; d < HS; d++) o[d] += a * vr[d];
                }
            }
            free(sc);
        }
}

static void cpu_swiglu(float *out, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)N * F, chunk = 4096;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i += chunk)
        K_->swiglu(out + i, gate + i, up + i, (int)(n - i < chunk ? n - i : chunk));
}

static void cpu_add(float *x, const float *y, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_logprob(float *out, const float *logits, const int32_t *target, const float *inv_temp,
                        int N, int V) {
#pragma omp parallel for schedule(static) if (N > 1)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * V;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        // log Σ exp((l - mx)·s) with the largest term exactly 1
        double lse = log((double)K_->sum_exp(l, V, mx, inv_temp[i]));
        out[i] = (float)((double)(l[target[i]] - mx) * inv_temp[i] - lse);
    }
}

const rl_ops *ops_cpu(void) {
    static const rl_ops ops = {
        .name = "cpu",
        .alloc = cpu_alloc,
        .free = cpu_free,
        .upload = cpu_copy,
        .download = cpu_copy,
        .embed = cpu_embed,
        .rmsnorm = cpu_rmsnorm,
        .matmul = cpu_matmul,
        .rope = cpu_rope,
        .scatter_rows = cpu_scatter_rows,
        .gather_rows = cpu_gather_rows,
        .attention = cpu_attention,
        .swiglu = cpu_swiglu,
        .add = cpu_add,
        .logprob = cpu_logprob,
    };
    if (!K_) {
        const cpu_kernels *k = getenv("RLPIPE_CPU_PORTABLE") ? NULL : cpu_kernels_avx2();
        K_ = k ? k : cpu_kernels_portable();
        openblas_set_num_threads(1);
    }
    return &ops;
}
