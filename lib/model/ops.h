// ops.h — the backend interface: the few operations the model is made of.
// The model (model*.c) says *what* to compute and calls these through a table;
// a backend (lib/model/cpu/, lib/model/cuda/) says *where*. All pointers given to an
// op are in the backend's memory (alloc/upload; rl_attn_seq arrays too), but
// for structs of scalars (rl_mat, smp_params, rl_adamw), which are host memory
// (an rl_mat's data and scales are the backend's); shapes are row-major. A backend may run ops
// asynchronously: download (and sumsq, which returns a value) waits for them.
// Conventional names: N rows (tokens), C hidden, M outputs, K inputs, F MLP
// width, NH query heads, NKV key/value heads, HS head size, V vocabulary.
#ifndef RLPIPE_OPS_H
#define RLPIPE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "model/adamw_kernel.h"
#include "model/sampling.h"

// How a product's input rows are rounded before the product, as engines
// that quantize activations do (W8A8):
//   ACT_F32  as they are (the weights alone are at a lower precision);
//   ACT_I8   each row n to int8 with its own scale: s[n] = max_k |x[n][k]| / 127,
//            q[n][k] = rint(x[n][k] · (1/s[n])) (f32, nearest even); W is int8
//            with one scale per row; the product sums q·w exactly in int32;
//   ACT_FP8  each row to fp8 e4m3 (dtype.h) with its own scale
//            s[n] = max_k |x[n][k]| / 448, q = e4m3(x · (1/s)), saturated; W is
//            fp8; the product sums q·w (each exact in f32) in f32.
// Then out[n][m] = (Σ_k q[n][k]·w[m][k]) · sw[m] · s[n] (f32, in that order).
typedef enum { ACT_F32 = 0, ACT_I8, ACT_FP8 } rl_act;

// A weight matrix W (M, K) at a storage precision; matmul computes x · Wᵀ.
// DT_I8: data is int8 (M, K), scales (M, ceil(K / group)) f32, one per group
// of consecutive inputs (the last group of a row may be shorter); group = K
// is one scale per output channel. DT_FP8: data e4m3 (M, K), scales (M), group
// = K. Other dtypes: scales NULL, group 0. act: ACT_I8 needs DT_I8 and
// ACT_FP8 DT_FP8, each with group = K.
typedef struct {
    rl_dtype dtype;
    int rows, cols;           // M, K
    int group;
    void *data;
    float *scales;
    rl_act act;
    // 1: data changes only through upload (weights loaded or received, not
    // trained in place), so a backend may keep copies made from it (the CPU
    // backend's panels) until an upload or free overwrites it; 0: it may
    // change by other means (an optimizer step, a collective).
    int fixed;
} rl_mat;

// One sequence of a batch for attention. Its query rows are [q0, q0+n) of q
// and out; query j sits at position pos0 + j and attends to keys at positions
// 0 .. pos0 + j, stored in rows kv0 .. kv0 + pos0 + j of the key/value buffers.
typedef struct {
    int32_t q0, n, pos0, kv0;
} rl_attn_seq;


typedef struct rl_ops {
    const char *name;
    // 1: the backend's memory is the host's, so that any thread may read it
    // in place (the CPU's); 0: only upload and download reach it (a GPU's).
    int host_memory;
    void *(*alloc)(size_t bytes);                                  // zero-filled; aborts when out of memory
    void (*free)(void *p);
    void (*upload)(void *dst, const void *src, size_t bytes);      // host -> backend
    void (*download)(void *dst, const void *src, size_t bytes);    // backend -> host
    void (*sync)(void);                                            // waits for every op called before

    // out (N, C) = table[ids[i]] (rows of a (V, C) matrix, converted to f32)
    void (*embed)(float *out, const rl_mat *table, const int32_t *ids, int N);
    // out (N, C) = x / sqrt(mean(x²) + eps) * g;  out may equal x
    void (*rmsnorm)(float *out, const float *x, const float *g, int N, int C, float eps);
    // out (N, M) = x (N, K) · Wᵀ (+ bias (M) when not NULL); f32 accumulation
    void (*matmul)(float *out, const float *x, const rl_mat *W, const float *bias, int N);
    // The n products of one input: out[i] (N, W[i] rows) = x · W[i]ᵀ (+ bias[i]),
    // each with matmul's bits; one call, so that the backend can share all
    // their rows among its threads at once (q, k and v; gate and up). NULL:
    // the model calls matmul for each.
    void (*matmul_many)(float *const *out, const float *x, const rl_mat *const *W, const float *const *bias, int n,
                        int N);
    // x (N, H, HS) rotated in place, Hugging Face rotate-half convention:
    // pairs (i, i + HS/2) turn by the angle whose (cos, sin) the table holds:
    // cos_sin (max_pos, HS/2, 2) = s·cos, s·sin of pos·inv_freq[i], inv_freq and
    // s as the config's rope_scaling makes them (model.c; s = 1 but for yarn)
    void (*rope)(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS);
    // The dtypes a key/value cache may be stored as (bit 1 << dt): DT_F32
    // always, DT_BF16 where the backend's scatter_rows, gather_rows and
    // attention take it.
    unsigned kv_dtypes;
    // dst row rows[i] = src row i (width W), for i < N, stored as dt: f32, or
    // bf16 (nearest even) for keys/values into a bf16 cache
    void (*scatter_rows)(void *dst, rl_dtype dt, const int32_t *rows, const float *src, int N, int W);
    // dst row i = src row rows[i] (width W, both of dtype dt), for i < N: the
    // rows that need logits, a cache's rows for a shared prefix
    void (*gather_rows)(void *dst, const void *src, rl_dtype dt, const int32_t *rows, int N, int W);
    // out (N, NH, HS) = causal softmax(q kᵀ / sqrt(HS)) v per sequence and head;
    // query head h reads key/value head h / (NH / NKV); k, v rows are (NKV, HS)
    // of dtype kvt (one of kv_dtypes: a bf16 cache's values are widened, exactly).
    // lse (N, NH), when not NULL: log Σ_t exp(score_t) of each query row and
    // head (the softmax's normaliser, kept for the backward pass).
    void (*attention)(float *out, float *lse, const float *q, const void *k, const void *v, rl_dtype kvt,
                      const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS);
    // out (N, F) = silu(gate) * up;  out may equal gate
    void (*swiglu)(float *out, const float *gate, const float *up, int N, int F);
    // x (n) += y (n)
    void (*add)(float *x, const float *y, size_t n);
    // x (n) *= a
    void (*scale)(float *x, float a, size_t n);
    // x (n) rounded to bf16 (nearest even) in place: the activations of bf16 inference
    void (*round_bf16)(float *x, size_t n);
    // out[i] = log_softmax(logits[i] * inv_temp[i])[target[i]], logits (N, V);
    // ent[i], when not NULL: the entropy −Σ p log p of that distribution (nats)
    void (*logprob)(float *out, float *ent, const float *logits, const int32_t *target,
                    const float *inv_temp, int N, int V);
    // tok[i], logp[i] = a token drawn from row i of logits (N, V) and its
    // log-probability under the distribution drawn from, as smp_draw_u
    // (sampling.h) defines both, with parameters p and the uniform u[i] in [0, 1)
    // (not read when p->temperature is 0).
    void (*sample)(int32_t *tok, double *logp, const float *logits, const smp_params *p, const double *u,
                   int N, int V);

    // ---- Training: the backward of each operation above (f32 weights; matmul_dx takes bf16 too).
    // Gradients of parameters accumulate (+=), so micro-batches add up;
    // gradients of activations are written (=) unless the comment says +=.

    // logits (N, V) replaced by d loss / d logits for a loss whose derivatives
    // with respect to out[i] and ent[i] of logprob are dlogp[i] and dent[i]
    // (dent NULL: 0): with s = inv_temp[i], p = softmax(logits[i] · s) and
    // H = −Σ p log p,
    //   s · (dlogp[i] · (onehot(target[i]) − p) − dent[i] · p ⊙ (log p + H))
    // (dH/dz_v = −p_v (log p_v + H) at z = logits · s). A row with dent[i] = 0
    // is computed as with dent NULL, bit for bit.
    void (*logprob_backward)(float *logits, const int32_t *target, const float *inv_temp,
                             const float *dlogp, const float *dent, int N, int V);
    // dx (N, K) = dout (N, M) · W (M, K), or += when accumulate. W f32, or
    // bf16 (a frozen base's, under LoRA): its values widened (the CPU's), or
    // dout rounded to bf16 to meet them as the forward's products do (CUDA's).
    void (*matmul_dx)(float *dx, const float *dout, const rl_mat *W, int N, int accumulate);
    // dW (M, K) += doutᵀ (M, N) · x (N, K);  dbias (M) += Σ_n dout (n, ·) when not NULL
    void (*matmul_dw)(float *dW, float *dbias, const float *dout, const float *x, int N, int M, int K);
    // dx (N, C) += d/dx and dg (C) += d/dg of out = rmsnorm(x, g), given dout (N, C);
    // dg NULL: none (a frozen g)
    void (*rmsnorm_backward)(float *dx, float *dg, const float *dout, const float *x, const float *g,
                             int N, int C, float eps);
    // x (N, H, HS) turned by the table's angles negated (s·cos, −s·sin): the transpose of rope
    void (*rope_backward)(float *x, const int32_t *pos, const float *cos_sin, int N, int H, int HS);
    // dq (N, NH, HS), dk and dv (N, NKV, HS) of attention given dout (N, NH, HS),
    // its inputs q, k, v (as given to attention, without a cache: kv rows are
    // query rows), its output out and lse. dk, dv rows of every sequence are written.
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const float *out, const float *lse,
                               const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS);
    // dgate, dup (N, F) of out = silu(gate) * up given dout (N, F); dgate may equal dout
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, int N, int F);
    // dtable (V, C): row ids[i] += dout row i, for i < N (ids may repeat)
    void (*embed_backward)(float *dtable, const float *dout, const int32_t *ids, int N, int C);
    // x (n) = 0
    void (*zero)(float *x, size_t n);
    // Σ x[i]² (n), accumulated in double: the gradient norm
    double (*sumsq)(const float *x, size_t n);
    // one AdamW step on n parameters (rl_adamw above)
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, const rl_adamw *h);
} rl_ops;

const rl_ops *ops_cpu(void);
// The CUDA backend (lib/model/cuda/): NULL, with *why saying why, when this build
// has none (made with CUDA=0 or without nvcc) or no GPU can be used. Set
// RLPIPE_TF32=1 to let its f32 products use TF32 tensor cores.
const rl_ops *ops_cuda(const char **why);

#endif
