// model/model_internal.h — what the files of the model (lib/model/model*.c)
// share and model.h does not show: the model's struct, its tensor table and
// weight sets, the workspaces' tables, and the functions one file calls in
// another (named mdl_*, as model.h's are model_*). Included by
// lib/model/model*.c only.
//
//   model.c           the plan from a config, the RoPE table, creation, model_free
//   model_table.c     the tensor table, weight sets and their layout, conversions
//   model_io.c        loading, random weights, saving
//   model_work.c      the workspaces' tables of buffers
//   model_forward.c   the forward pass, the output layer in chunks, scoring
//   model_backward.c  forward_train and the backward
//   model_train.c     gradients, AdamW moments and step, tensors' values
//   model_decode.c    the KV cache and incremental decoding
//   model_lora.c      LoRA adapters: attached for training, their forward and backward
#ifndef RL_MODEL_INTERNAL_H
#define RL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "model/ops.h"

// A group of workspace buffers: one block of the backend for up to cap tokens.
typedef struct {
    void *block;
    int cap;
} wgroup;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    size_t off, n;             // in the table's layout of every parameter (gradients, moments), in floats
    size_t poff;               // into a weights set's params; SIZE_MAX for a matrix stored apart
                               // (equal to off in f32 models, the only ones that train)
    int is_mat;                // a 2-D weight used in products
    rl_dtype dtype;            // is_mat: stored at (DT_F32: in params), else DT_F32
    int group;                 // its int8 inputs per scale (the row's length: one per row)
    rl_act act;                // its products' input rounding (ops.h)
} mtensor;

typedef struct {
    float *attn_norm, *mlp_norm;          // (C)
    rl_mat q, k, v, o, gate, up, down;    // (NH·HS, C) (NKV·HS, C) (NKV·HS, C) (C, NH·HS) (F, C) (F, C) (C, F)
    float *bq, *bk, *bv, *bo;             // biases or NULL
    float *qn, *kn;                       // (HS) qwen3's RMSNorm of each q and k head, or NULL
    float *bgate, *bup, *bdown;           // (F) (F) (C) llama mlp_bias, or NULL
} layer_w;

// One complete set of weights. A model computes with one; a standby set
// (model_weights) has the same layout and is swapped in whole, pointers and all.
typedef struct {
    float *params;                        // backend: (nfloat) every tensor not stored apart, f32, table order
    void **mdata;                         // (nt) backend: tensor i at its dtype, for matrices
    float **mscales;                      //   stored apart (int8, fp8: and their scales), else NULL
    rl_mat embed, head;                   // (V, C); head is embed when tied
    float *norm;                          // (C)
    layer_w *L;
} weights;

// LoRA adapters attached for training (model_lora_attach): a table and
// parameters of their own, which the training state covers instead of the
// base's. a[l·LORA_NT + t] (R, in) and b[...] (out, R) are f32 views into
// params, data NULL where t is not targeted.
typedef struct {
    lora_config c;
    float scale;
    int ntargets;              // targets per layer
    mtensor *t;                // for each layer, each target: A, B
    size_t nt, nparams;
    float *params;             // backend (nparams)
    rl_mat *a, *b;             // (layers · LORA_NT)
} mlora;

// The tensors that the parameters of model.h and the training state are:
// the model's table (every weight), or the attached adapters'.
typedef struct {
    const mtensor *t;
    size_t nt, n;
    float *params;             // backend: tensor i at params + t[i].poff
} mparams;

struct model_weights {
    weights w;
    float *stage;                         // host (stage_n): a chunk converted to f32
    size_t stage_n;
};

struct model {
    model_config c;
    model_opts o;
    const rl_ops *ops;
    mtensor *t;
    size_t nt, nparams, nfloat;           // tensors, parameters, f32 parameters held (all for f32 models)
    weights w;                            // the weights in use
    float *cos_sin;                       // (max_pos, HS/2, 2)

    // Workspace: pointers into one block of the backend (work), shapes in mdl_work_table.
    int lrows;
    wgroup work;
    float *x, *xb, *xm, *q, *k, *v, *att, *hb, *hb2;
    int32_t *ids, *pos, *rows;
    rl_attn_seq *seqs;
    float *hrows, *logits, *itemp, *lp;
    float *ent, *dlogp;
    float *lt, *lu, *ldt;                 // LoRA: (N, R) A x, (N, out) B A x, (N, R) its gradient
    int32_t *sel, *tgt;
    double *su, *slogp;
    int32_t *stok;
    int32_t *frows;
    float *kvs_k, *kvs_v, *d_kvs_k, *d_kvs_v;

    // Training (model_train_init): gradient and AdamW moments, (nparams) each,
    // in the order of params.
    float *grads, *exp_avg, *exp_avg_sq;
    size_t mlo, mhi;                      // the moments hold parameters [mlo, mhi) of that order
    // Saved activations of the forward and gradients of activations:
    // pointers into one block (train), shapes in mdl_train_table.
    wgroup train;
    float *s_x, *s_n1, *s_q, *s_k, *s_v, *s_att, *s_lse, *s_xm, *s_n2, *s_gate, *s_up;
    float *d_x, *d_n, *d_q, *d_k, *d_v, *d_att, *d_h, *d_up;
    float *s_qr, *s_kr, *d_qr, *d_kr;     // qwen3 only, else NULL
    float *hraw, *dh, *dent;
    float *s_lora;                        // LoRA: (L, ntargets, N, R) scale · A x of each target
    mlora *lora;                          // NULL: the base trains
    int recompute;                        // model_set_recompute: one layer's activations saved, not L

    // KV cache: (L, slots·max_len, NKV·HS) each, of dtype kc_dt: bf16 where
    // the activations are bf16 (its keys and values are bf16 values already)
    // and the backend takes it, else f32
    int slots, max_len;
    void *kc, *vc;
    rl_dtype kc_dt;
    int *slot_len;
    unsigned char *slot_used;
    // The key/value rows that a forward with_cache stores and attends to: the
    // KV cache (kv_stride = slots·max_len rows a layer), or when scoring or
    // training shares prompts the work buffers kvs_k, kvs_v (one layer's rows
    // at a time: kv_stride 0), of dtype kv_dt.
    void *kvk, *kvv;
    rl_dtype kv_dt;
    size_t kv_stride;
    // The shared prefixes of the forward under way (model_step_seq.shared,
    // model_score_groups): fork f copies each layer's rows frows[off .. off +
    // n) to rows dst .. dst + n (frows is a work buffer).
    struct fork { int32_t dst, off, n; } *forks;
    int nforks;
    size_t forks_cap;
};

// The activations of one layer over N tokens: where forward_train saves them
// for the backward, or the workspace that forward reuses for every layer.
typedef struct {
    float *n1, *q, *k, *v, *att, *lse, *xm, *n2, *gate, *up;   // lse may be NULL
    float *qr, *kr;           // q, k before qwen3's per-head norm (may be q, k: normed in place)
    float *x;                                                 // the layer's input (saved only)
    float *lora;              // (ntargets, N, R) scale · A x of each target (saved only; else m->lt)
} saved;

// One buffer of a group: the model's pointer at byte offset `field` of struct
// model points to `sets` consecutive sets (one per layer) of n elements of
// `size` bytes each; n = 0: no buffer (NULL). in_saved: the offset of the
// member of `saved` that a layer's set is (saved_at), or -1.
typedef struct {
    size_t field, size, sets, n;
    ptrdiff_t in_saved;
} wbuf;

enum { WT_MAX = 32 };   // buffers in a group's table

// A group's table for N tokens into t; returns its length.
typedef size_t wbuf_table_fn(const model_t *m, size_t N, wbuf t[WT_MAX]);

// ---- model.c ----------------------------------------------------------------
// A model's table and layout from c and o, no weights yet; NULL and err when refused.
model_t *model_plan(const model_config *c, const model_opts *o, rl_err *err);
// Allocates the planned weights (-1 and err when they exceed the machine's memory).
int model_alloc(model_t *m, rl_err *err);
model_t *model_new(const model_config *c, const model_opts *o, rl_err *err);   // plan and alloc
model_t *mdl_finish_new(model_t *m);   // the RoPE table, once the weights are in

// ---- model_table.c ----------------------------------------------------------
void mdl_build_table(model_t *m);
const mtensor *mdl_find_tensor(const model_t *m, const char *name);   // or NULL
int mdl_stored_apart(const mtensor *t);                  // a matrix kept at its dtype, not in params
const char *mdl_prec_name(const model_t *m);             // its precision's name ("bf16", "int8w/64", ...)
size_t mdl_nscales(const mtensor *t);                    // its scales: int8 per group of a row, fp8 per row
void mdl_alloc_weights(const model_t *m, weights *w);   // the model's layout, zero
void mdl_free_weights(const model_t *m, weights *w);
// Elements [off, off + n) of t in w from f32 host values x (n).
void mdl_put_f32(const model_t *m, weights *w, const mtensor *t, size_t off, size_t n, const float *x);
// t's values in w, f32 (t->n, host): a matrix at another dtype widened (int8, fp8: dequantized).
void mdl_get_f32(const model_t *m, const weights *w, const mtensor *t, float *out);

// ---- model_work.c -----------------------------------------------------------
size_t mdl_work_table(const model_t *m, size_t N, wbuf t[WT_MAX]);    // forward's, for N tokens
size_t mdl_train_table(const model_t *m, size_t N, wbuf t[WT_MAX]);   // what training adds
void mdl_group_free(model_t *m, wgroup *g, wbuf_table_fn *table);
void mdl_group_reserve(model_t *m, wgroup *g, wbuf_table_fn *table, int N);   // for N tokens
void mdl_reserve(model_t *m, int N);   // the workspace for N tokens (at least 64)

// ---- model_forward.c --------------------------------------------------------
// Layer l: x (N, C) in, next (N, C) out, activations to s, h (N, F) the MLP's hidden product.
void mdl_layer_forward(model_t *m, int l, const float *x, float *next, const saved *s, float *h, int N, int nseq,
                   int with_cache);
// m->x (N, C): the residual stream after the last layer for m->ids at m->pos.
void mdl_forward(model_t *m, int N, int nseq, int with_cache);
// m->logits (rows, V) of rows sel (rows) of x (tokens, C), through raw (rows, C).
void mdl_logits_rows(model_t *m, const float *x, float *raw, const int32_t *sel, int rows);
size_t mdl_max_batch_tokens(const model_t *m);
int mdl_check_tokens(const model_t *m, const uint32_t *ids, size_t n, const char *what, size_t seq,
                 rl_err *err);
int mdl_check_len(const model_t *m, size_t seq, size_t len, rl_err *err);
void mdl_add_fork(model_t *m, int dst, size_t off, size_t n);   // each layer's rows frows[off, off + n) to dst
// n sequences into one batch: N tokens, R scored rows, nseq sequences, Nkv key/value rows.
int mdl_pack_scored(model_t *m, const model_seq *seqs, size_t n, int share, size_t *N_, size_t *R_,
                size_t *nseq_, int *shared_, size_t *Nkv_, rl_err *err);
int mdl_want_entropy(const model_seq *seqs, size_t n);
void mdl_download_scored(model_t *m, model_seq *seqs, size_t n, size_t R);   // m->lp (R) into seqs
void mdl_kv_work(model_t *m);   // keys and values of shared prompts in the work buffers

// ---- model_lora.c -----------------------------------------------------------
mparams mdl_params(const model_t *m);   // the adapters' when attached, else the model's
// out (N, out) += scale · B (A x) for target t of layer l, x (N, in) its
// input; A x (scaled) kept in ts (N, R), or in the work buffer when NULL.
// Nothing where l's t has no adapter.
void mdl_lora_forward(model_t *m, int l, int t, const float *x, float *out, float *ts, int N);
// Its backward given dout (N, out) = dloss/d(out): the adapters' gradients
// accumulate, dx (N, in) += dloss/dx through them.
void mdl_lora_backward(model_t *m, int l, int t, const float *x, const float *ts, const float *dout, float *dx,
                       int N);
// The saved (N, R) block of target t within a layer's (ntargets, N, R), or NULL without it.
float *mdl_lora_saved(const model_t *m, const saved *s, int t, int N);
void mdl_lora_free(model_t *m);
// W (out, in, host) += scale · B A, as lora_merge computes it (B A in f32,
// then scaled, then added), with the product on the CPU backend's threads
// and kernels, for the merges of a whole model at every push (thread-safe:
// a receiver's thread calls it while the model computes); with another
// backend, lora_merge on the host.
void mdl_lora_merge(const model_t *m, float *W, int out, int in, const float *B, const float *A, int r, float scale);
// layer · LORA_NT + target of the base's tensor `name` when it is a module's
// weight that an adapter may target ("model.layers.3.mlp.up_proj.weight"), else -1.
int mdl_lora_module(const char *name);

// ---- model_decode.c ---------------------------------------------------------
void mdl_free_cache(model_t *m);   // the KV cache and its slots, none left

#endif
