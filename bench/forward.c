// forward — the timing driver of bench/forward.sh and bench/cuda.sh: writes a
// random model, times cblas_sgemm, the scoring forward (model_score) and
// KV-cache decoding (model_step, or model_step_sample with --sample). Each
// timed command prints one line (decode: one per slot count)
//   RESULT what=... tokens=N flop=F median_s=S tok_s=R [more=...] times=t1,t2,...
// where tokens are the tokens processed per repetition and flop the matmul
// floating-point operations per repetition (2 per multiply-add; attention
// scores and element-wise work not counted).
//
//   forward write   --model DIR --config 15m|110m|1b [--seed N]
//   forward sgemm   --m M --n N --k K [--reps R]
//   forward gemm    --m M --n N --k K [--reps R] [--span MB]
//   forward peak    [--reps R]
//   forward score   --model DIR [--dtype D] [--group G] [--records N] [--prompt P]
//                   [--completion C] [--reps R] [--device D]
//   forward decode  --model DIR [--dtype D] [--group G] [--slots S[,S...]] [--prompt P]
//                   [--steps N] [--reps R] [--warmup W] [--sample] [--device D]
//
// gemm: one thread's many-row products on the CPU, out (M, N) = x (M, K) ·
// Wᵀ, each timed over copies of W that together span --span MB (default 96,
// past most last-level caches, as decoding reads its weights from memory; a
// larger L3 holds them unless it is raised): cblas_sgemm of f32 weights;
// bf16 weights widened 128 rows at a time for sgemm (the CPU backend's way
// without a many-row kernel); the chosen build's kernel (kernels.h gemm) on
// bf16 weights with f32 inputs (bf16w), with bf16-valued inputs (bf16) and
// on f32 weights; and where the build has them, its products from the same
// weights packed in panels (kernels.h gemm_panels, the panels made before
// the timing, as the CPU backend makes them once per weight update): bf16
// with bf16-valued inputs (bf16_panels) and f32 (f32_panels); int8 weights
// and inputs (quantized per row, as ACT_I8) in tiles of 4 x 4 rows by dots_i8
// (i8_tiles) and by the build's many-row product where it has one (i8,
// kernels.h gemm_i8, its packing in the timing, as the backend calls it).
// The methods take turns within each repetition; each line
// adds gflops= and of_sgemm= (its speed over sgemm's).
// peak: the processor's own one-thread rate of a product instruction on
// 512 bits, the bound of the products above: 12 independent accumulators,
// each updated 2^22 times (so that no instruction waits for the one before),
// by the f32 FMA (fma512: 32 FLOP an instruction) and, where the processor
// has AVX-512 BF16, by vdpbf16ps (dpbf16: 64 FLOP an instruction, 16 lanes
// of two products each); x86-64 with AVX-512 only. Its lines add gflops=.
// --device cpu|cuda|auto: the backend of score and decode (default auto, as
// the tools: CUDA's when built with it and a GPU is there).
// decode: for each slot count S in turn (a new KV cache each), prefills S
// prompts of P random tokens in one step, takes W untimed decode steps, then
// times R runs of N steps. Without --sample every step appends random tokens
// and brings the (S, V) logits back to the host (model_step); with --sample
// it appends the tokens the previous step drew, drawing the next on the
// device at temperature 1 (model_step_sample: only S tokens and S
// log-probabilities come back), as rl-sample decodes. Its RESULT lines add
// slots=S, wbytes= (bytes of weights a step reads once whatever S: every
// layer matrix and the output layer at the model's dtype, one embedding row
// per sequence not counted) and kvbytes= (the mean over the timed steps of
// the keys and values attention reads per sequence: layers x 2 x kv width x
// 4 bytes, or 2 for a bf16 cache, x positions attended).
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench.h"
#include "model/cpu/kernels.h"
#include "model/cpu/mem.h"
#include "model/cpu/pack.h"
#include "model/model.h"
#include "rng.h"

#define MAX_REPS 64   // bench_median takes at most 64

void openblas_set_num_threads(int);   // OpenBLAS's own; not in every cblas.h

static void die(const char *file, int line, const char *msg) {
    fprintf(stderr, "forward: error: %s (%s:%d)\n", msg, file, line);
    exit(1);
}
#define CHECK(call, err) do { if ((call) != 0) die(__FILE__, __LINE__, (err).msg); } while (0)

// Prints the RESULT line of reps timings t (seconds per repetition), with
// the fields `more` (if not NULL) before the times.
static void result_more(const char *what, double tokens, double flop, const char *more, double *t, int reps) {
    double med = bench_median(t, reps);
    printf("RESULT what=%s tokens=%.0f flop=%.6g median_s=%.6f tok_s=%.2f ", what, tokens, flop, med, tokens / med);
    if (more) printf("%s ", more);
    bench_print_times(t, reps);
}

static void result(const char *what, double tokens, double flop, double *t, int reps) {
    result_more(what, tokens, flop, NULL, t, reps);
}

// Matmul FLOPs of one token through the layers (body) and through the output layer (head).
static void flop_per_token(const model_config *c, double *body, double *head) {
    double C = c->hidden, F = c->inter, Q = (double)c->heads * c->head_dim, KV = (double)c->kv_heads * c->head_dim;
    *body = 2.0 * c->layers * (C * Q + 2 * C * KV + Q * C + 3 * C * F);
    *head = 2.0 * c->vocab * C;
}

#define MAX_SLOT_COUNTS 16

typedef struct {
    const char *model, *config;
    model_opts mo;
    int records, prompt, completion, steps, reps, warmup, sample, prefill_only;
    int slots[MAX_SLOT_COUNTS], nslots;
    int m, n, k, span_mb;
    uint64_t seed;
} args;

static void cmd_write(const args *a) {
    model_config c = {.model_type = "llama", .vocab = 32000, .max_pos = 2048, .rms_eps = 1e-5,
                      .rope_theta = 10000.0, .tie_embeddings = 1, .bos_id = 1, .eos_id = 2, .n_eos = 1, .eos_ids = {2}};
    if (strcmp(a->config, "15m") == 0) {
        c.hidden = 288, c.inter = 768, c.layers = 6, c.heads = 6;
    } else if (strcmp(a->config, "110m") == 0) {
        c.hidden = 768, c.inter = 2048, c.layers = 12, c.heads = 12;
    } else if (strcmp(a->config, "1b") == 0) {   // Llama-3.2-1B's shapes: 1.24B parameters, 4.9 GB at f32
        c.hidden = 2048, c.inter = 8192, c.layers = 16, c.heads = 32, c.kv_heads = 8;
        c.vocab = 128256, c.rope_theta = 500000.0;
    } else {
        die(__FILE__, __LINE__, "--config must be 15m, 110m or 1b");
    }
    if (!c.kv_heads) c.kv_heads = c.heads;
    c.head_dim = c.hidden / c.heads;
    rl_err err = {{0}};
    CHECK(cfg_check(&c, &err), err);
    model_opts mo = {.dtype = DT_F32, .device = a->mo.device};
    model_t *m = model_random(&c, a->seed, 0.02f, &mo, &err);
    if (!m) die(__FILE__, __LINE__, err.msg);
    if (mkdir(a->model, 0777) != 0 && errno != EEXIST) {
        snprintf(err.msg, sizeof err.msg, "cannot create %s: %s", a->model, strerror(errno));
        die(__FILE__, __LINE__, err.msg);
    }
    CHECK(model_save(m, a->model, &err), err);
    printf("wrote %s: %s, %zu parameters\n", a->model, a->config, model_nparams(m));
    model_free(m);
}

static void cmd_sgemm(const args *a) {
    // out (M, N) = x (M, K) · Wᵀ, W (N, K): the shape of a linear layer over M tokens
    size_t M = (size_t)a->m, N = (size_t)a->n, K = (size_t)a->k;
    float *x = xmalloc(M * K * sizeof *x), *w = xmalloc(N * K * sizeof *w), *out = xmalloc(M * N * sizeof *out);
    rl_rng r;
    rng_seed(&r, a->seed);
    for (size_t i = 0; i < M * K; i++) x[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < N * K; i++) w[i] = (float)rng_normal(&r);
    double t[MAX_REPS];
    for (int i = -1; i < a->reps; i++) {     // one warm-up
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->m, a->n, a->k, 1.0f, x, a->k, w, a->k,
                    0.0f, out, a->n);
        if (i >= 0) t[i] = bench_now() - t0;
    }
    char what[64];
    snprintf(what, sizeof what, "sgemm_%dx%dx%d", a->m, a->n, a->k);
    result(what, (double)M, 2.0 * M * N * K, t, a->reps);
    free(x), free(w), free(out);
}

enum { GEMM_METHODS = 9, GEMM_TILE_ROWS = 128 };

// The int8 operands of methods 7 and 8: x and one copy of the weights quantized, their scales.
typedef struct {
    const int8_t *x, *w;
    const float *sx, *sw;
} gemm_i8_in;

// The CPU backend's int8 product without a many-row kernel: tiles of 4 input
// rows by 4 weight rows (kernels.h dots_i8), scaled as gemm_i8 scales.
static void gemm_i8_tiles(float *out, const gemm_i8_in *q, int M, int N, int K) {
    int32_t acc[16];
    for (int m0 = 0; m0 < N; m0 += 4) {
        int nw = N - m0 < 4 ? N - m0 : 4;
        for (int n0 = 0; n0 < M; n0 += 4) {
            int nx = M - n0 < 4 ? M - n0 : 4;
            cpu_K->dots_i8(acc, q->x + (size_t)n0 * K, (size_t)K, nx, q->w + (size_t)m0 * K, (size_t)K, nw, K);
            for (int j = 0; j < nx; j++)
                for (int i = 0; i < nw; i++)
                    out[(size_t)(n0 + j) * N + m0 + i] = (float)acc[j * nw + i] * q->sw[m0 + i] * q->sx[n0 + j];
        }
    }
}

// Method k of cmd_gemm on weight copy c: f32 weights wf, bf16 weights wb, input x (f32) or xr (bf16 values).
// pb, pf: wb's and wf's copy c packed in panels; q: the int8 operands, q->w the copy's.
static void gemm_method(int k, float *out, const float *x, const float *xr, const float *wf, const uint16_t *wb,
                        const void *pb, const void *pf, const gemm_i8_in *q, float *tile, int M, int N, int K) {
    switch (k) {
    case 0:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, wf, K, 0.0f, out, N);
        break;
    case 1:
        for (int n0 = 0; n0 < N; n0 += GEMM_TILE_ROWS) {
            int rows = N - n0 < GEMM_TILE_ROWS ? N - n0 : GEMM_TILE_ROWS;
            for (int r = 0; r < rows; r++)
                cpu_K->row_to_f32(tile + (size_t)r * K, wb + (size_t)(n0 + r) * K, NULL, K, 0, DT_BF16);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, rows, K, 1.0f, xr, K, tile, K, 0.0f, out + n0, N);
        }
        break;
    case 2: cpu_K->gemm(out, (size_t)N, x, M, wb, DT_BF16, N, K); break;
    case 3: cpu_K->gemm(out, (size_t)N, xr, M, wb, DT_BF16, N, K); break;
    case 5: cpu_K->gemm_panels(out, (size_t)N, xr, M, wb, DT_BF16, pb, N, K, 0); break;
    case 6: cpu_K->gemm_panels(out, (size_t)N, x, M, wf, DT_F32, pf, N, K, 0); break;
    case 7: gemm_i8_tiles(out, q, M, N, K); break;
    case 8: cpu_K->gemm_i8(out, (size_t)N, q->x, q->sx, M, q->w, NULL, q->sw, N, K); break;
    default: cpu_K->gemm(out, (size_t)N, x, M, wf, DT_F32, N, K); break;
    }
}

static void cmd_gemm(const args *a) {
    static const char *names[GEMM_METHODS] = {"sgemm_f32", "widen_sgemm_bf16", "kernel_bf16w", "kernel_bf16",
                                              "kernel_f32", "kernel_bf16_panels", "kernel_f32_panels",
                                              "kernel_i8_tiles", "kernel_i8"};
    size_t M = (size_t)a->m, N = (size_t)a->n, K = (size_t)a->k;
    cpu_kernels_choose();
    openblas_set_num_threads(1);
    if (!cpu_K->gemm) {
        fprintf(stderr, "forward: the %s kernels have no many-row product (kernels.h gemm)\n", cpu_K->name);
        exit(1);
    }
    size_t copies = ((size_t)a->span_mb << 20) / (N * K * 6) + 1;   // f32 and bf16 copies past the cache
    float *x = xmalloc(M * K * sizeof *x), *xr = xmalloc(M * K * sizeof *xr), *out = xmalloc(M * N * sizeof *out);
    float *wf = xmalloc(copies * N * K * sizeof *wf), *tile = xmalloc(GEMM_TILE_ROWS * K * sizeof *tile);
    uint16_t *wb = xmalloc(copies * N * K * sizeof *wb);
    size_t np = (N + PANEL_ROWS - 1) / PANEL_ROWS, sb = np * panel_bytes(DT_BF16, a->k),
           sf = np * panel_bytes(DT_F32, a->k);
    int has_b = cpu_K->panels_for >> DT_BF16 & 1, has_f = cpu_K->panels_for >> DT_F32 & 1;
    char *pb = has_b ? cpu_mem_alloc(copies * sb) : NULL, *pf = has_f ? cpu_mem_alloc(copies * sf) : NULL;
    rl_rng r;
    rng_seed(&r, a->seed);
    for (size_t i = 0; i < M * K; i++) x[i] = (float)rng_normal(&r), xr[i] = bf16_to_f32(f32_to_bf16(x[i]));
    for (size_t i = 0; i < copies * N * K; i++) wf[i] = (float)rng_normal(&r) * 0.02f, wb[i] = f32_to_bf16(wf[i]);
    // int8: the weights' rows and the input's quantized as the CPU backend does (quant_i8), all copies
    int8_t *xq = xmalloc(M * K), *wq = xmalloc(copies * N * K);
    float *sx = xmalloc(M * sizeof *sx), *sw = xmalloc(copies * N * sizeof *sw);
    for (size_t i = 0; i < M; i++) sx[i] = cpu_K->quant_i8(xq + i * K, x + i * K, a->k);
    for (size_t i = 0; i < copies * N; i++) sw[i] = cpu_K->quant_i8(wq + i * K, wf + i * K, a->k);
    for (size_t c = 0; c < copies; c++) {
        if (pb) pack_panels(pb + c * sb, wb + c * N * K, DT_BF16, a->n, a->k, 0, (int)np);
        if (pf) pack_panels(pf + c * sf, wf + c * N * K, DT_F32, a->n, a->k, 0, (int)np);
    }
    double t[GEMM_METHODS][MAX_REPS];
    for (int i = -1; i < a->reps; i++)   // one warm-up
        for (int k = 0; k < GEMM_METHODS; k++) {
            if ((k == 5 && !pb) || (k == 6 && !pf) || (k == 8 && !cpu_K->gemm_i8)) continue;
            double t0 = bench_now();
            for (size_t c = 0; c < copies; c++) {
                gemm_i8_in q = {.x = xq, .sx = sx, .w = wq + c * N * K, .sw = sw + c * N};
                gemm_method(k, out, x, xr, wf + c * N * K, wb + c * N * K, pb ? pb + c * sb : NULL,
                            pf ? pf + c * sf : NULL, &q, tile, a->m, a->n, a->k);
            }
            if (i >= 0) t[k][i] = (bench_now() - t0) / (double)copies;
        }
    double flop = 2.0 * M * N * K, base = bench_median(t[0], a->reps);
    for (int k = 0; k < GEMM_METHODS; k++) {
        if ((k == 5 && !pb) || (k == 6 && !pf) || (k == 8 && !cpu_K->gemm_i8)) continue;
        char what[96], more[128];
        double med = bench_median(t[k], a->reps);
        snprintf(what, sizeof what, "gemm_%s_%dx%dx%d", names[k], a->m, a->n, a->k);
        snprintf(more, sizeof more, "build=%s gflops=%.1f of_sgemm=%.2f", k ? cpu_K->name : "openblas",
                 flop / med * 1e-9, base / med);
        result_more(what, (double)M, flop, more, t[k], a->reps);
    }
    free(x), free(xr), free(out), free(wf), free(tile), free(wb);
    free(xq), free(wq), free(sx), free(sw);
    cpu_mem_free(pb), cpu_mem_free(pf);
}

static model_t *load(const args *a) {
    rl_err err = {{0}};
    model_t *m = model_load(a->model, &a->mo, &err);
    if (!m) die(__FILE__, __LINE__, err.msg);
    return m;
}

static void random_ids(rl_rng *r, uint32_t *ids, size_t n, int V) {
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)(rng_u64(r) % (uint64_t)V);
}

#if defined(__x86_64__)
enum { PEAK_ITERS = 1 << 22, PEAK_N = 12 };
// PEAK_N (12) chains a##j of 512 bits: each declared, updated PEAK_ITERS times by STEP(j),
// and summed into the value returned, so that none is dropped.
#define PEAK_12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define PEAK_INIT(j) __m512 a##j = _mm512_set1_ps((float)(j));
#define PEAK_SUM(j) s = _mm512_add_ps(s, a##j);
#define PEAK_CHAINS(STEP)                                           \
    PEAK_12(PEAK_INIT)                                              \
    for (int i = 0; i < PEAK_ITERS; i++) { PEAK_12(STEP) }         \
    __m512 s = _mm512_setzero_ps();                                 \
    PEAK_12(PEAK_SUM)                                               \
    return _mm512_reduce_add_ps(s);

// f32 FMAs on 512 bits.
__attribute__((target("avx512f"))) static float peak_fma512(void) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
#define FMA_STEP(j) a##j = _mm512_fmadd_ps(a##j, m, c);
    PEAK_CHAINS(FMA_STEP)
#undef FMA_STEP
}

// vdpbf16ps: each lane adds two bf16 products to its f32 sum.
__attribute__((target("avx512f,avx512bf16"))) static float peak_dpbf16(void) {
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);  // 1.0, 2^-24
#define DPBF16_STEP(j) a##j = _mm512_dpbf16_ps(a##j, x, y);
    PEAK_CHAINS(DPBF16_STEP)
#undef DPBF16_STEP
}
#undef PEAK_CHAINS
#undef PEAK_INIT
#undef PEAK_SUM

static void peak_time(const char *what, float (*loop)(void), double flop_per_instr, int reps) {
    double t[MAX_REPS];
    volatile float sink = 0;
    for (int i = -1; i < reps; i++) {     // one warm-up, which also lifts the clock
        double t0 = bench_now();
        sink += loop();
        if (i >= 0) t[i] = bench_now() - t0;
    }
    (void)sink;
    double flop = flop_per_instr * PEAK_N * PEAK_ITERS;
    char more[32];
    snprintf(more, sizeof more, "gflops=%.1f", flop / bench_median(t, reps) * 1e-9);
    result_more(what, 1, flop, more, t, reps);
}

static void cmd_peak(const args *a) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        fprintf(stderr, "forward: error: peak: this processor has no AVX-512\n");
        exit(1);
    }
    peak_time("peak_fma512", peak_fma512, 32, a->reps);
    if (__builtin_cpu_supports("avx512bf16")) peak_time("peak_dpbf16", peak_dpbf16, 64, a->reps);
}
#else
static void cmd_peak(const args *a) {
    (void)a;
    fprintf(stderr, "forward: error: peak: x86-64 only\n");
    exit(1);
}
#endif

static void cmd_score(const args *a) {
    model_t *m = load(a);
    const model_config *c = model_cfg(m);
    size_t N = (size_t)a->records, P = (size_t)a->prompt, T = (size_t)a->completion;
    uint32_t *tok = xmalloc(N * (P + T) * sizeof *tok);
    float *logp = xmalloc(N * T * sizeof *logp);
    rl_rng r;
    rng_seed(&r, a->seed);
    random_ids(&r, tok, N * (P + T), c->vocab);
    model_seq *seqs = xmalloc(N * sizeof *seqs);
    for (size_t i = 0; i < N; i++)
        seqs[i] = (model_seq){tok + i * (P + T), P, tok + i * (P + T) + P, T, 1.0f, logp + i * T, NULL};
    rl_err err = {{0}};
    CHECK(model_score(m, seqs, 1, &err), err);      // warm-up: one sequence
    double t[MAX_REPS];
    for (int i = 0; i < a->reps; i++) {
        double t0 = bench_now();
        CHECK(model_score(m, seqs, N, &err), err);
        t[i] = bench_now() - t0;
    }
    double body, head;
    flop_per_token(c, &body, &head);
    char what[64];
    snprintf(what, sizeof what, "score_%s", dt_name(a->mo.dtype));
    result(what, (double)(N * (P + T)), body * (double)(N * (P + T)) + head * (double)(N * T), t, a->reps);
    free(tok), free(logp), free(seqs);
    model_free(m);
}

// Bytes of the weight matrices one decode step reads (whatever the number of
// sequences): every layer matrix and the output layer at their dtype (int8:
// 1 byte and a 4-byte scale per group of inputs; W8A8 int8 and fp8 keep the
// output layer bf16).
static double weight_bytes(const model_config *c, const model_opts *mo) {
    double C = c->hidden, F = c->inter, Q = (double)c->heads * c->head_dim, KV = (double)c->kv_heads * c->head_dim;
    double layers = c->layers * (C * Q + 2 * C * KV + Q * C + 3 * C * F), head = (double)c->vocab * C;
    int w8a8 = mo->act == DT_BF16 && (mo->dtype == DT_I8 || mo->dtype == DT_FP8);
    switch (mo->dtype) {
    case DT_F32: return 4 * (layers + head);
    case DT_I8:
        if (!w8a8) return (layers + head) * (1.0 + 4.0 / (mo->group ? mo->group : 32));
        /* fall through */
    case DT_FP8: return layers + 2 * head;   // and a scale per row
    default: return 2 * (layers + head);
    }
}

// One decode step of S sequences, one token each: next[s] (random ids, or
// with --sample those the previous step drew, which this one replaces).
static void decode_step(model_t *m, const args *a, model_step_seq *st, int S, uint32_t *next, uint32_t *drawn,
                        double *u, double *lp, float *logits, rl_rng *r) {
    rl_err err = {{0}};
    if (!a->sample) random_ids(r, next, (size_t)S, model_cfg(m)->vocab);
    for (int s = 0; s < S; s++) st[s].ids = &next[s], st[s].n = 1;
    if (a->sample) {
        static const smp_params p = {.temperature = 1.0f, .top_p = 1.0f, .top_k = 0};
        for (int s = 0; s < S; s++) u[s] = rng_uniform(r);
        CHECK(model_step_sample(m, st, (size_t)S, &p, u, drawn, lp, &err), err);
        memcpy(next, drawn, (size_t)S * sizeof *next);
    } else {
        CHECK(model_step(m, st, (size_t)S, logits, &err), err);
    }
}

// Prefills S prompts in one step, takes a->warmup untimed steps, then times
// a->reps runs of a->steps decode steps; each step appends one token to every
// sequence and computes its logits (and with --sample draws the next token).
// The sequences grow from run to run (no new prefill).
static void decode_slots(model_t *m, const args *a, int S, rl_rng *r) {
    const model_config *c = model_cfg(m);
    int V = c->vocab;
    size_t P = (size_t)a->prompt;
    rl_err err = {{0}};
    CHECK(model_cache_init(m, S, a->prompt + a->warmup + a->reps * a->steps + 8, &err), err);
    uint32_t *prompts = xmalloc((size_t)S * P * sizeof *prompts), *next = xmalloc((size_t)S * sizeof *next);
    uint32_t *drawn = xmalloc((size_t)S * sizeof *drawn);
    double *u = xmalloc((size_t)S * sizeof *u), *lp = xmalloc((size_t)S * sizeof *lp);
    float *logits = a->sample ? NULL : xmalloc((size_t)S * V * sizeof *logits);
    model_step_seq *steps = xmalloc((size_t)S * sizeof *steps);
    random_ids(r, prompts, (size_t)S * P, V);
    for (int s = 0; s < S; s++) {
        int slot = model_slot_acquire(m);
        if (slot < 0) die(__FILE__, __LINE__, "no free slot");
        steps[s] = (model_step_seq){.slot = slot, .ids = prompts + (size_t)s * P, .n = P};
    }
    double t0 = bench_now();
    if (a->sample) {
        static const smp_params p = {.temperature = 1.0f, .top_p = 1.0f, .top_k = 0};
        for (int s = 0; s < S; s++) u[s] = rng_uniform(r);
        CHECK(model_step_sample(m, steps, (size_t)S, &p, u, next, lp, &err), err);
    } else {
        CHECK(model_step(m, steps, (size_t)S, logits, &err), err);
    }
    double prefill = bench_now() - t0;
    if (a->prefill_only) {   // the S prompts' tokens, the output layer for the last of each
        double body, head;
        flop_per_token(c, &body, &head);
        char what[64];
        snprintf(what, sizeof what, "prefill_%s_%d", model_precision_name(&a->mo), S);
        result_more(what, (double)S * P, body * S * P + head * S, "", &prefill, 1);
        for (int s = 0; s < S; s++) model_slot_release(m, steps[s].slot);
        free(prompts), free(next), free(drawn), free(u), free(lp), free(logits), free(steps);
        return;
    }
    for (int k = 0; k < a->warmup; k++) decode_step(m, a, steps, S, next, drawn, u, lp, logits, r);
    double t[MAX_REPS], ctx = 0;
    int len = a->prompt + a->warmup;   // tokens in every slot before the timed steps
    for (int i = 0; i < a->reps; i++) {
        t0 = bench_now();
        for (int k = 0; k < a->steps; k++) decode_step(m, a, steps, S, next, drawn, u, lp, logits, r);
        t[i] = bench_now() - t0;
    }
    for (int k = 1; k <= a->reps * a->steps; k++) ctx += len + k;   // positions attended at each timed step
    ctx /= a->reps * a->steps;
    if (model_slot_len(m, steps[0].slot) != len + a->reps * a->steps)
        die(__FILE__, __LINE__, "the slot does not hold the tokens appended");
    double body, head;
    flop_per_token(c, &body, &head);
    double kv = (double)c->layers * 2.0 * c->kv_heads * c->head_dim * dt_size(model_cache_dtype(m)) * ctx;
    char what[64], more[128];
    snprintf(what, sizeof what, "%s_%s_%d", a->sample ? "sample" : "decode", model_precision_name(&a->mo), S);
    snprintf(more, sizeof more, "slots=%d wbytes=%.0f kvbytes=%.0f", S, weight_bytes(c, &a->mo), kv);
    fprintf(stderr, "forward: %s on %s: prefill of %d x %zu tokens %.3f s\n", what, model_device(m), S, P, prefill);
    result_more(what, (double)S * a->steps, (body + head) * S * a->steps, more, t, a->reps);
    for (int s = 0; s < S; s++) model_slot_release(m, steps[s].slot);
    free(prompts), free(next), free(drawn), free(u), free(lp), free(logits), free(steps);
}

static void cmd_decode(const args *a) {
    model_t *m = load(a);
    rl_rng r;
    rng_seed(&r, a->seed);
    for (int i = 0; i < a->nslots; i++) decode_slots(m, a, a->slots[i], &r);
    model_free(m);
}

// --slots: one count, or a comma-separated list of up to MAX_SLOT_COUNTS.
static void parse_slots(const char *s, args *a) {
    char buf[256];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "forward: error: --slots is too long\n");
        exit(2);
    }
    strcpy(buf, s);
    a->nslots = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (a->nslots == MAX_SLOT_COUNTS) {
            fprintf(stderr, "forward: error: --slots: at most %d counts\n", MAX_SLOT_COUNTS);
            exit(2);
        }
        a->slots[a->nslots++] = bench_int_arg("forward", tok, "slots", 1, 4096);
    }
    if (a->nslots == 0) {
        fprintf(stderr, "forward: error: --slots needs a count\n");
        exit(2);
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: forward write|sgemm|gemm|peak|score|decode [options]  (see bench/forward.c)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'M'},  {"config", required_argument, 0, 'c'},
        {"dtype", required_argument, 0, 'd'},  {"group", required_argument, 0, 'g'},
        {"records", required_argument, 0, 'r'}, {"prompt", required_argument, 0, 'p'},
        {"completion", required_argument, 0, 't'}, {"slots", required_argument, 0, 's'},
        {"steps", required_argument, 0, 'n'},  {"reps", required_argument, 0, 'R'},
        {"m", required_argument, 0, '1'},      {"n", required_argument, 0, '2'},
        {"k", required_argument, 0, '3'},      {"seed", required_argument, 0, 'S'},
        {"device", required_argument, 0, 'D'}, {"warmup", required_argument, 0, 'w'},
        {"span", required_argument, 0, 'X'},
        {"sample", no_argument, 0, 'x'},       {"prefill-only", no_argument, 0, 'P'},
        {0, 0, 0, 0}};
    args a = {.mo = {.dtype = DT_F32, .act = DT_F32}, .records = 64, .prompt = 32, .completion = 96, .slots = {1}, .nslots = 1,
              .steps = 32, .reps = 3, .m = 1024, .n = 1024, .k = 1024, .span_mb = 96, .seed = 1, .config = "15m"};
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'M': a.model = optarg; break;
        case 'c': a.config = optarg; break;
        case 'd':
            if (model_precision_parse(optarg, &a.mo) != 0) {
                fprintf(stderr, "forward: error: --dtype: expected one of %s\n", model_precision_names);
                return 2;
            }
            break;
        case 'g': a.mo.group = bench_int_arg("forward", optarg, "group", 0, 64); break;
        case 'r': a.records = bench_int_arg("forward", optarg, "records", 1, 1 << 20); break;
        case 'p': a.prompt = bench_int_arg("forward", optarg, "prompt", 1, 1 << 16); break;
        case 't': a.completion = bench_int_arg("forward", optarg, "completion", 1, 1 << 16); break;
        case 's': parse_slots(optarg, &a); break;
        case 'D':
            if (dev_parse(optarg, &a.mo.device) != 0) {
                fprintf(stderr, "forward: error: --device must be cpu, cuda or auto\n");
                return 2;
            }
            break;
        case 'w': a.warmup = bench_int_arg("forward", optarg, "warmup", 0, 1 << 16); break;
        case 'X': a.span_mb = bench_int_arg("forward", optarg, "span", 1, 1 << 16); break;
        case 'x': a.sample = 1; break;
        case 'P': a.prefill_only = 1; break;
        case 'n': a.steps = bench_int_arg("forward", optarg, "steps", 1, 1 << 16); break;
        case 'R': a.reps = bench_int_arg("forward", optarg, "reps", 1, MAX_REPS); break;
        case '1': a.m = bench_int_arg("forward", optarg, "m", 1, 1 << 16); break;
        case '2': a.n = bench_int_arg("forward", optarg, "n", 1, 1 << 16); break;
        case '3': a.k = bench_int_arg("forward", optarg, "k", 1, 1 << 16); break;
        case 'S': a.seed = (uint64_t)bench_int_arg("forward", optarg, "seed", 0, 1 << 30); break;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) { usage(stderr); return 2; }
    int needs_model = strcmp(cmd, "sgemm") != 0 && strcmp(cmd, "gemm") != 0 && strcmp(cmd, "peak") != 0;
    if (needs_model && !a.model) { fprintf(stderr, "forward: error: %s needs --model DIR\n", cmd); return 2; }
    if (strcmp(cmd, "write") == 0) cmd_write(&a);
    else if (strcmp(cmd, "sgemm") == 0) cmd_sgemm(&a);
    else if (strcmp(cmd, "gemm") == 0) cmd_gemm(&a);
    else if (strcmp(cmd, "peak") == 0) cmd_peak(&a);
    else if (strcmp(cmd, "score") == 0) cmd_score(&a);
    else if (strcmp(cmd, "decode") == 0) cmd_decode(&a);
    else { usage(stderr); return 2; }
    return 0;
}
