// cpu/attention.c — causal attention with grouped key/value heads (ops.h),
// forward and backward, one task per (sequence, query head), longest
// sequences first. A sequence that brings few new rows (decoding) goes a query
// row at a time, the query heads that share a key/value head together
// (the kernels' kv_scores and kv_mix, on an f32 or a bf16 cache); longer
// ones (prefill, training) in blocks of BQ query rows, with sgemm on the
// (rows × keys) score block and the keys above the diagonal zeroed (a bf16
// cache's rows widened to f32 first). The backward recomputes the
// probabilities from q, k and the forward's log-sum-exp (lse):
//   P = exp(S − lse),  dV += Pᵀ dO,  dP = dO Vᵀ,  D = rowsum(dO ∘ O),
//   dS = P ∘ (dP − D),  dQ = dS K / √HS,  dK += dSᵀ Q / √HS.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "model/cpu/cpu.h"
#include "model/cpu/kernels.h"
#include "model/cpu/pool.h"
#include "util.h"

#define BQ 64          // query rows per score block
#define BLOCK_ROWS 16  // sequences with at least this many new rows go in blocks

typedef struct {
    float *out, *lse;                 // forward outputs
    float *dq, *dk, *dv;              // backward outputs; dk, dv at row stride ld
    const float *dout, *q, *o, *lse_in;
    const void *k, *v;                // f32, or bf16 in the forward (kvt)
    rl_dtype kvt;
    const rl_attn_seq *seqs;
    const int *order;                 // sequences, longest first
    int NH, NKV, HS, ld;
} attn_args;

typedef struct {
    int n, s;
} seq_len;

static int longer_first(const void *x, const void *y) {
    const seq_len *a = x, *b = y;
    return a->n != b->n ? b->n - a->n : a->s - b->s;
}

// The sequences' indices by decreasing length, so the longest tasks start
// first and the short ones fill in at the end.
static int *longest_first(const rl_attn_seq *seqs, int nseq) {
    seq_len *l = xmalloc((size_t)nseq * sizeof *l);
    int *order = xmalloc((size_t)nseq * sizeof *order);
    for (int s = 0; s < nseq; s++) l[s] = (seq_len){seqs[s].pos0 + seqs[s].n, s};
    qsort(l, (size_t)nseq, sizeof *l, longer_first);
    for (int s = 0; s < nseq; s++) order[s] = l[s].s;
    free(l);
    return order;
}

// S (bn, T) = Q Kᵀ / √HS for query rows [j0, j0 + bn) of sequence sq, head h,
// against its keys K [0, T) (f32, at row stride ldk).
static void scores(float *S, const attn_args *a, rl_attn_seq sq, int h, int j0, int bn, int T, const float *K,
                   int ldk) {
    int HS = a->HS, qs = a->NH * HS;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bn, T, HS, 1.0f / sqrtf((float)HS),
                a->q + (size_t)(sq.q0 + j0) * qs + (size_t)h * HS, qs, K, ldk, 0.0f, S, T);
}

// Key (kv = 0) or value (1) head hk of sequence sq, as f32 at row stride
// *ld: the rows themselves, or for a bf16 cache its T rows widened into w (T, HS).
static const float *kv_head(const attn_args *a, rl_attn_seq sq, int hk, int kv, int T, float *w, int *ld) {
    size_t ks = (size_t)a->NKV * a->HS, at = (size_t)sq.kv0 * ks + (size_t)hk * a->HS;
    const void *base = kv ? a->v : a->k;
    if (a->kvt != DT_BF16) {
        *ld = (int)ks;
        return (const float *)base + at;
    }
    const uint16_t *r = (const uint16_t *)base + at;
    for (int t = 0; t < T; t++) dt_bf16_to_f32(w + (size_t)t * a->HS, r + (size_t)t * ks, (size_t)a->HS);
    *ld = a->HS;
    return w;
}

// Forward of a few new rows (decoding), for the G = NH/NKV query heads that
// share key/value head hk at once, a row at a time: S (G × T) = Q Kᵀ / √HS,
// each row's exp(S − rowmax), O (G × HS) = that · V divided by its sum. The
// G query rows of one position are contiguous (row stride HS), so is their
// output; K and V are read once for the G of them, by the kernels' kv_scores
// and kv_mix on either cache: the same sums in the same order (a bf16
// cache gives an f32 cache's logits bit for bit), and no dependence on
// OpenBLAS's choice of kernel (with sgemm here, OpenBLAS forced onto the
// SSE3 kernels it runs on processors it does not know made 64-slot f32
// decoding of SmolLM2-135M 7 to 13% slower). Either way these
// rows are bound by the cache's bytes: at 64 slots every step reads every
// sequence's keys and values, more than the L3 keeps beside the weights.
static void attend_rows(const attn_args *a, rl_attn_seq sq, int hk) {
    int NH = a->NH, HS = a->HS, G = NH / a->NKV, qs = NH * HS, ks = a->NKV * HS;
    size_t at = (size_t)sq.kv0 * ks + (size_t)hk * HS, es = dt_size(a->kvt);
    float *S = xmalloc(((size_t)G * (sq.pos0 + sq.n) + (size_t)G) * sizeof(float));
    float *inv = S + (size_t)G * (sq.pos0 + sq.n), scale = 1.0f / sqrtf((float)HS);
    for (int j = 0; j < sq.n; j++) {
        int T = sq.pos0 + j + 1;
        const float *q = a->q + (size_t)(sq.q0 + j) * qs + (size_t)hk * G * HS;
        float *o = a->out + (size_t)(sq.q0 + j) * qs + (size_t)hk * G * HS;
        cpu_K->kv_scores(S, q, G, (const char *)a->k + at * es, a->kvt, (size_t)ks, T, HS, scale);
        for (int g = 0; g < G; g++) {
            float *p = S + (size_t)g * T;
            float mx = cpu_row_max(p, T), sum = cpu_K->exp_row(p, p, T, mx, 1.0f);
            inv[g] = 1.0f / sum;
            if (a->lse) a->lse[(size_t)(sq.q0 + j) * NH + hk * G + g] = mx + logf(sum);
        }
        cpu_K->kv_mix(o, S, G, T, (const char *)a->v + at * es, a->kvt, (size_t)ks, HS);
        for (int g = 0; g < G; g++)
#pragma omp simd
            for (int d = 0; d < HS; d++) o[(size_t)g * HS + d] *= inv[g];
    }
    free(S);
}

// Forward in blocks, query heads [h0, h0 + nh) that share one key/value
// head: the causal exp(S − rowmax) row by row, O = that · V, then each output
// row divided by its sum. A bf16 cache's head is widened once for the nh.
static void attend_blocks(const attn_args *a, rl_attn_seq sq, int h0, int nh) {
    int NH = a->NH, HS = a->HS, qs = NH * HS, hk = h0 / (NH / a->NKV), Tmax = sq.pos0 + sq.n, ldk, ldv;
    float *S = xmalloc((size_t)BQ * (Tmax + 1) * sizeof(float)), *inv = S + (size_t)BQ * Tmax;
    float *wide = a->kvt == DT_BF16 ? xmalloc((size_t)2 * Tmax * HS * sizeof(float)) : NULL;
    const float *K = kv_head(a, sq, hk, 0, Tmax, wide, &ldk),
                *V = kv_head(a, sq, hk, 1, Tmax, wide ? wide + (size_t)Tmax * HS : NULL, &ldv);
    for (int h = h0; h < h0 + nh; h++)
        for (int j0 = 0; j0 < sq.n; j0 += BQ) {
            int bn = sq.n - j0 < BQ ? sq.n - j0 : BQ, T = sq.pos0 + j0 + bn;
            scores(S, a, sq, h, j0, bn, T, K, ldk);
            for (int r = 0; r < bn; r++) {
                float *p = S + (size_t)r * T;
                int Tr = sq.pos0 + j0 + r + 1;
                float mx = cpu_row_max(p, Tr), sum = cpu_K->exp_row(p, p, Tr, mx, 1.0f);
                memset(p + Tr, 0, (size_t)(T - Tr) * sizeof(float));
                inv[r] = 1.0f / sum;
                if (a->lse) a->lse[(size_t)(sq.q0 + j0 + r) * NH + h] = mx + logf(sum);
            }
            float *o = a->out + (size_t)(sq.q0 + j0) * qs + (size_t)h * HS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bn, HS, T, 1.0f, S, T, V, ldv, 0.0f, o, qs);
            for (int r = 0; r < bn; r++)
#pragma omp simd
                for (int d = 0; d < HS; d++) o[(size_t)r * qs + d] *= inv[r];
        }
    free(S);
    free(wide);
}

// Task s·NH + h: the s-th longest sequence, query head h; for a sequence
// with few new rows, or in blocks over a bf16 cache (widened once), the first
// query head of each group does the group's.
static void attention_task(void *ctx, int task, int end) {
    (void)end;
    const attn_args *a = ctx;
    rl_attn_seq sq = a->seqs[a->order[task / a->NH]];
    int h = task % a->NH, G = a->NH / a->NKV;
    if (sq.n >= BLOCK_ROWS && a->kvt != DT_BF16) attend_blocks(a, sq, h, 1);
    else if (h % G != 0) return;
    else if (sq.n >= BLOCK_ROWS) attend_blocks(a, sq, h, G);
    else attend_rows(a, sq, h / G);
}

void cpu_attention(float *out, float *lse, const float *q, const void *k, const void *v, rl_dtype kvt,
                   const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS) {
    (void)N;
    int *order = longest_first(seqs, nseq);
    attn_args a = {.out = out, .lse = lse, .q = q, .k = k, .v = v, .kvt = kvt, .seqs = seqs, .order = order,
                   .NH = NH, .NKV = NKV, .HS = HS};
    pool_tasks(nseq * NH, attention_task, &a);
    free(order);
}

// Backward of one sequence and query head. Its dK, dV (head column h, row
// stride ld) are zeroed, then accumulate over the query blocks.
static void attention_backward_task(void *ctx, int task, int end) {
    (void)end;
    const attn_args *a = ctx;
    int NH = a->NH, HS = a->HS, qs = NH * HS, ks = a->NKV * HS, ld = a->ld;
    rl_attn_seq sq = a->seqs[a->order[task / NH]];
    int h = task % NH, hk = h / (NH / a->NKV), Tmax = sq.pos0 + sq.n;
    float scale = 1.0f / sqrtf((float)HS);
    const float *K = (const float *)a->k + (size_t)sq.kv0 * ks + (size_t)hk * HS,
                *V = (const float *)a->v + (size_t)sq.kv0 * ks + (size_t)hk * HS;
    float *dK = a->dk + (size_t)sq.kv0 * ld + (size_t)h * HS, *dV = a->dv + (size_t)sq.kv0 * ld + (size_t)h * HS;
    for (int t = 0; t < Tmax; t++) {
        memset(dK + (size_t)t * ld, 0, (size_t)HS * sizeof(float));
        memset(dV + (size_t)t * ld, 0, (size_t)HS * sizeof(float));
    }
    float *P = xmalloc((size_t)2 * BQ * Tmax * sizeof(float)), *dP = P + (size_t)BQ * Tmax;
    for (int j0 = 0; j0 < sq.n; j0 += BQ) {
        int bn = sq.n - j0 < BQ ? sq.n - j0 : BQ, T = sq.pos0 + j0 + bn;
        size_t row0 = (size_t)(sq.q0 + j0) * qs + (size_t)h * HS;
        const float *Q = a->q + row0, *dO = a->dout + row0, *O = a->o + row0;
        scores(P, a, sq, h, j0, bn, T, K, ks);
        for (int r = 0; r < bn; r++) {
            float *p = P + (size_t)r * T;
            int Tr = sq.pos0 + j0 + r + 1;
            cpu_K->exp_row(p, p, Tr, a->lse_in[(size_t)(sq.q0 + j0 + r) * NH + h], 1.0f);
            memset(p + Tr, 0, (size_t)(T - Tr) * sizeof(float));
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, bn, 1.0f, P, T, dO, qs, 1.0f, dV, ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bn, T, HS, 1.0f, dO, qs, V, ks, 0.0f, dP, T);
        for (int r = 0; r < bn; r++) {   // dS over P (zero above the diagonal, as P)
            const float *dor = dO + (size_t)r * qs, *orow = O + (size_t)r * qs;
            float D = 0, *p = P + (size_t)r * T, *dp = dP + (size_t)r * T;
#pragma omp simd reduction(+ : D)
            for (int d = 0; d < HS; d++) D += dor[d] * orow[d];
            int Tr = sq.pos0 + j0 + r + 1;
#pragma omp simd
            for (int t = 0; t < Tr; t++) p[t] *= dp[t] - D;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bn, HS, T, scale, P, T, K, ks, 0.0f, a->dq + row0,
                    qs);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, bn, scale, P, T, Q, qs, 1.0f, dK, ld);
    }
    free(P);
}

typedef struct {
    float *dk, *dv;
    const float *bk, *bv;   // (N, NH, HS): one slice per query head
    int NKV, group, HS, kv0;
} reduce_args;

// dk, dv rows [kv0 + lo, kv0 + hi): the sum of each group's query-head slices
static void reduce_part(void *ctx, int lo, int hi) {
    const reduce_args *r = ctx;
    int HS = r->HS, W = r->NKV * HS;
    for (int t = r->kv0 + lo; t < r->kv0 + hi; t++)
        for (int hk = 0; hk < r->NKV; hk++) {
            float *dk = r->dk + (size_t)t * W + (size_t)hk * HS, *dv = r->dv + (size_t)t * W + (size_t)hk * HS;
            const float *bk = r->bk + ((size_t)t * r->NKV * r->group + (size_t)hk * r->group) * HS,
                        *bv = r->bv + ((size_t)t * r->NKV * r->group + (size_t)hk * r->group) * HS;
            memcpy(dk, bk, (size_t)HS * sizeof(float));
            memcpy(dv, bv, (size_t)HS * sizeof(float));
            for (int g = 1; g < r->group; g++)
#pragma omp simd
                for (int d = 0; d < HS; d++) {
                    dk[d] += bk[(size_t)g * HS + d];
                    dv[d] += bv[(size_t)g * HS + d];
                }
        }
}

// With grouped heads, the query heads of a group would race on their key
// and value head: each writes its own slice of an (N, NH, HS) buffer, and the
// slices of a group are summed afterwards, so every task stays independent.
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, const rl_attn_seq *seqs,
                            int nseq, int N, int NH, int NKV, int HS) {
    int group = NH / NKV;
    float *buf = group > 1 ? xmalloc((size_t)2 * N * NH * HS * sizeof(float)) : NULL;
    int *order = longest_first(seqs, nseq);
    attn_args a = {.dq = dq, .dk = buf ? buf : dk, .dv = buf ? buf + (size_t)N * NH * HS : dv, .dout = dout,
                   .q = q, .k = k, .v = v, .kvt = DT_F32, .o = out, .lse_in = lse, .seqs = seqs, .order = order,
                   .NH = NH, .NKV = NKV, .HS = HS, .ld = NH * HS};
    pool_tasks(nseq * NH, attention_backward_task, &a);
    for (int s = 0; buf && s < nseq; s++) {
        reduce_args r = {dk, dv, a.dk, a.dv, NKV, group, HS, seqs[s].kv0};
        pool_for(seqs[s].pos0 + seqs[s].n, 1, PAR_MIN / (NH * HS), reduce_part, &r);
    }
    free(buf);
    free(order);
}
