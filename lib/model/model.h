// model.h — the Llama-family policy model (doc/design.md §3, §6): weights from a
// Hugging Face directory or random, the scoring forward (log-probabilities of
// given tokens at a temperature) and incremental decoding with a KV cache laid
// out for continuous batching. Computation goes through a backend (ops.h).
#ifndef RLPIPE_MODEL_H
#define RLPIPE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/config.h"
#include "checkpoint/hfweights.h"
#include "checkpoint/lora.h"
#include "dtype.h"
#include "model/adamw_kernel.h"
#include "model/backend.h"
#include "model/sampling.h"
#include "util.h"

typedef struct model model_t;

typedef struct {
    rl_dtype dtype;      // matmul and embedding weights: f32 (learner, scorer), bf16, f16, int8, fp8
    int group;           // int8 inputs per scale: 32 or 64 (0 = 32); not for W8A8
    rl_device device;    // the backend (backend.h); DEV_AUTO (0): CUDA's when there is a GPU
    // Activations: DT_F32 exact (only the weights are rounded), or DT_BF16 as
    // bf16 inference rounds them: the output of every operation (norms,
    // products, RoPE, attention, residual sums, SwiGLU, logits) and so the KV
    // cache. With DT_BF16, dtype int8 or fp8 is W8A8: the decoder layers'
    // matrices hold one scale per output channel and their products quantize
    // their inputs per token (ops.h rl_act); the embedding and output layer
    // stay bf16, as in the W8A8 checkpoints inference engines run.
    rl_dtype act;
    // 1: the output layer at f32 whatever dtype and act say (rl-sample --head
    // f32): its weight stored f32, the final norm's output not rounded before
    // it, the logits f32 sums of f32 products, not rounded; the rest as
    // without. Tied embeddings are one tensor, stored f32 then: the lookup
    // reads f32 rows, which bf16 activations round to the same bits as from
    // a bf16 table; with f32 activations (bf16w, f16, int8w) the embedding
    // is then exact. No effect on an f32 model.
    int head_f32;
} model_opts;

// The sampler's precisions by name (rl-sample --dtype): f32; bf16 (bf16
// weights and activations); int8 (W8A8 int8); fp8 (W8A8 e4m3); and weight-only
// ones with f32 activations: bf16w, f16, int8w (int8 per group of 32). 0, or
// -1 for an unknown name (o untouched).
int model_precision_parse(const char *name, model_opts *o);
// The name of o's precision ("int8w/64" for groups of 64), or NULL for none of them.
const char *model_precision_name(const model_opts *o);
// The names, for messages: "f32, bf16, int8, fp8, bf16w, f16, int8w".
extern const char model_precision_names[];
// The output layer's precision (rl-sample --head): "f32" sets o->head_f32,
// "dtype" (the precision's own) clears it. 0, or -1 for another name.
int model_head_parse(const char *name, model_opts *o);

// Reads DIR/config.json and DIR's weights (model.safetensors, or the shards
// model.safetensors.index.json names; F32, BF16 or F16); checks that every tensor
// the config implies is present with its shape, and that no other tensor is.
model_t *model_load(const char *dir, const model_opts *o, rl_err *err);
// Random weights: matrices and embeddings N(0, std²), biases N(0, std²), norm weights 1.
model_t *model_random(const model_config *c, uint64_t seed, float std, const model_opts *o,
                      rl_err *err);
// Writes DIR/config.json and DIR/model.safetensors (F32; DIR must exist).
int model_save(const model_t *m, const char *dir, rl_err *err);
// The same with the weights stored at o->dtype (f32, bf16 or f16, rounded to
// nearest even) and sharded above o->max_shard_bytes (hfweights.h).
int model_save_as(const model_t *m, const char *dir, const hfw_write_opts *o, rl_err *err);
void model_free(model_t *m);

const model_config *model_cfg(const model_t *m);
rl_dtype model_dtype(const model_t *m);
const model_opts *model_options(const model_t *m);   // as loaded (the group defaulted)
const char *model_device(const model_t *m);   // the backend's name: "cpu" or "cuda"
size_t model_nparams(const model_t *m);

// ---- Scoring: log-probabilities of completions (the learner's and rl-ratio's path).
typedef struct {
    const uint32_t *prompt;   // n_prompt >= 1 tokens of context
    size_t n_prompt;
    const uint32_t *ids;      // n_ids tokens to score, following the prompt
    size_t n_ids;
    float temperature;        // > 0: log-probs of softmax(logits / temperature)
    float *logp;              // out: n_ids values
    float *entropy;           // out when not NULL: n_ids entropies (nats) of those distributions
} model_seq;

// One batched forward over all sequences; the output layer runs in chunks of
// rows, so no (tokens, V) logits array is held. Errors: token >= vocab,
// empty prompt, a sequence longer than cfg_max_seq (max_position_embeddings,
// or a sliding window, or dynamic RoPE's original length), temperature <= 0.
int model_score(model_t *m, model_seq *seqs, size_t n, rl_err *err);
// The same, with the prompt of consecutive sequences that share it (a
// group's samples) computed once: the others take its keys and values, and
// the logits after it for their first token. The values differ from
// model_score's only by the order of f32 sums in another batch.
int model_score_groups(model_t *m, model_seq *seqs, size_t n, rl_err *err);

// ---- Training (f32 models): exact gradients and the AdamW step (doc/design.md §4).
// The gradient, optimizer moments and step live in the model's backend.

// Allocates the gradient (zero) and the AdamW moments (zero) of every parameter.
int model_train_init(model_t *m, rl_err *err);
// The same with the moments of parameters [lo, hi) of the flat order (the
// order of the tensor table, tensor after tensor) only: a rank's part of a
// sharded optimizer (ZeRO-1). model_grad_sumsq and model_adamw then work on
// that range; the moments of model_tensor_get/set are those of the tensor's
// elements in it (the others are not written, or not read).
int model_train_init_range(model_t *m, size_t lo, size_t hi, rl_err *err);
void model_train_range(const model_t *m, size_t *lo, size_t *hi);
// The flat buffers (backend memory) of a model with training state, for
// collectives between ranks: the parameters (MODEL_PARAM) and the gradient
// (MODEL_GRAD), nparams floats each, and the moments (MODEL_EXP_AVG,
// MODEL_EXP_AVG_SQ) of the range, hi − lo floats; NULL without training state.
float *model_train_buffer(const model_t *m, int which);
// The parameters of an f32 model in host memory, flat in the tensor table's
// order (model_tensor_at: tensor i after the n of those before it), when
// the backend's memory is the host's (the CPU's); NULL otherwise. Another
// thread may read them while the model computes, until something changes
// them (model_adamw, model_tensor_set, a collective on the buffer).
const float *model_host_params(const model_t *m);
// The same for AdamW's moments (which: MODEL_EXP_AVG or MODEL_EXP_AVG_SQ)
// of every parameter, flat in the same order, when the backend's memory is
// the host's and the moments' range is all the parameters (not a rank's
// part, model_train_init_range); NULL otherwise. Read while the model
// computes until model_adamw (or model_tensor_set) changes them.
const float *model_host_moments(const model_t *m, int which);
const rl_ops *model_ops(const model_t *m);

// A loss L = Σ_r ℓ_r(logp_r, H_r) over the scored tokens, numbered r = 0, 1,
// ... sequence after sequence (those with n_ids > 0), token after token; H_r
// the entropy (nats) of the distribution logp_r is taken from. The callback
// gets the log-probabilities of tokens r0 .. r0+rows-1 (in order of r0, each
// token once) and writes dlogp[i] = dℓ/dlogp for each. When the sequences ask
// for entropies (model_seq.entropy), ent holds those tokens' and dent comes
// zero-filled, for dent[i] = dℓ/dH where ℓ has a term in H (the gradient
// then flows through H too); otherwise both are NULL.
typedef void (*model_dlogp_fn)(void *ctx, size_t r0, size_t rows, const float *logp, const float *ent,
                               float *dlogp, float *dent);

// One forward and backward pass over the sequences (as model_score_groups,
// whose errors it shares: a prompt that consecutive sequences share is
// computed once, and its rows take the gradient of every sequence that reads
// them): fills seqs[i].logp (and entropy) and adds dL/dθ to the gradient, so
// that calls between two model_zero_grad accumulate.
int model_backward(model_t *m, model_seq *seqs, size_t n, model_dlogp_fn dlogp, void *ctx, rl_err *err);
void model_zero_grad(model_t *m);
// on: model_backward keeps the residual stream into each decoder layer only,
// and computes each layer's other activations again in the backward pass
// (activation checkpointing): the same gradients, bit for bit, for one more
// forward pass's time and (L − 1) layers' activations less memory.
void model_set_recompute(model_t *m, int on);
// Σ over the parameters of the moments' range (all, but for
// model_train_init_range) of gradient², in double.
double model_grad_sumsq(const model_t *m);
// One AdamW step on the parameters of the moments' range (ops.h rl_adamw;
// the caller sets lr, betas, eps, gscale and the bias corrections). Weight
// decay h->wd applies to 2-D tensors (matrices and embeddings), none to norm
// weights and biases.
void model_adamw(model_t *m, const rl_adamw *h);
// Waits until the backend has done all the work asked of it (a GPU works
// asynchronously): for timings.
void model_sync(const model_t *m);

// The parameter tensors in the model's order; the gradient and moments use the same.
typedef struct {
    const char *name;         // Hugging Face name
    int ndim;
    int64_t shape[2];
    size_t n;                 // elements
    rl_dtype stored;          // the dtype products read it at: the model's for matrices (f32 for the
                              // output layer with head_f32), else f32
    int group;                // int8: inputs per scale (a whole row: the row's length)
} model_tensor;
size_t model_ntensors(const model_t *m);
model_tensor model_tensor_at(const model_t *m, size_t i);
// Host copies (n floats of tensor i) of a parameter, its gradient or a moment;
// get returns -1 if the model has no training state. A model at another dtype
// than f32 keeps no f32 copy of its matrices: their parameter is the stored
// matrix widened (int8: dequantized). set refuses parameters of such models.
enum { MODEL_PARAM, MODEL_GRAD, MODEL_EXP_AVG, MODEL_EXP_AVG_SQ };
int model_tensor_get(const model_t *m, int which, size_t i, float *out);
int model_tensor_set(model_t *m, int which, size_t i, const float *in);

// ---- Standby weights: a second set of every parameter, filled while the
// model works (from another thread: filling touches only the standby set and
// the backend's memory), then swapped in whole between two calls (receiver.h).
typedef struct model_weights model_weights;
// Allocates a set of the model's layout and dtype (contents zero).
model_weights *model_weights_new(const model_t *m);
void model_weights_free(const model_t *m, model_weights *w);
// Elements [off, off + n) of tensor i (table order, model_tensor_at) from host
// data at `wire` (f32, bf16 or f16), converted as loading converts: a matrix
// stored at the model's dtype gets the same bits as a model loaded from those
// values (sent at that dtype, they are taken as they are), any other tensor
// the values widened to f32. For a matrix stored at another dtype off and n
// must be whole rows. 0, or -1 for a range, index or wire dtype out of bounds.
int model_weights_put(const model_t *m, model_weights *w, size_t i, size_t off, size_t n, rl_dtype wire,
                      const void *data);
// Exchanges the model's weights with w in O(1) (pointers only): the model
// computes with w's from its next call, and w holds the previous ones. The KV
// cache is kept: sequences decoding go on with the new weights.
void model_weights_swap(model_t *m, model_weights *w);

// ---- Incremental decoding with a KV cache of `slots` sequences of up to max_len tokens.
// The cache holds keys and values in bf16 where the activations are bf16
// (model_opts.act: they are bf16 values already, so nothing changes but the
// bytes read) and the backend can, else in f32; RLPIPE_KV_F32=1 keeps f32.
int model_cache_init(model_t *m, int slots, int max_len, rl_err *err);
rl_dtype model_cache_dtype(const model_t *m);     // DT_F32 or DT_BF16, once model_cache_init has run
int model_slot_acquire(model_t *m);              // a free slot (length 0), or -1
void model_slot_release(model_t *m, int slot);
int model_slot_len(const model_t *m, int slot);  // tokens in its cache

typedef struct {
    int slot;
    const uint32_t *ids;      // tokens to append (a prompt to prefill, or one decoded token)
    size_t n;
    // A shared prefix (shared > 0): the slot, empty, first takes the cache rows
    // of the first `shared` tokens of slot `from` (which holds them once this
    // step's own tokens are in: it may be another sequence of this step), then
    // its n tokens follow at positions shared, shared + 1, ... The rows are
    // copied layer by layer, after the step's new keys and values are stored.
    // n may be 0 when `from` is a sequence of this step whose last token sits
    // at position shared − 1: this sequence's logits are then that one's.
    // replay (n = 1): ids[0] is the prefix's last token, run again at
    // position shared − 1 for the logits after it; the cache keeps `from`'s
    // rows for it, so the slot holds exactly `from`'s prefix.
    int from;
    size_t shared;
    int replay;
} model_step_seq;

// Appends each sequence's tokens to its slot (one batched forward) and writes
// the logits (temperature 1) after its last token: logits (n, V), host memory.
// A slot that would hold more than cfg_max_seq tokens is refused.
int model_step(model_t *m, const model_step_seq *s, size_t n, float *logits, rl_err *err);
// The same, but each sequence's next token is drawn where the logits are (on
// the GPU with CUDA), as smp_draw_u does (sampling.h) with parameters p and
// the uniform u[i] (not read when greedy): tok[i] and its log-probability
// logp[i] under the distribution drawn from. Only n tokens and n values come back.
int model_step_sample(model_t *m, const model_step_seq *s, size_t n, const smp_params *p, const double *u,
                      uint32_t *tok, double *logp, rl_err *err);

// log_softmax(logits / temperature)[token] for one row of V logits, in double.
double model_logprob_of(const float *logits, int V, float temperature, uint32_t token);

// ---- LoRA adapters (checkpoint/lora.h)

// model_load with adapter a merged into the matrices it targets: each read
// as f32, W + scale · B A computed in f32 (lora_merge), then stored at o's
// precision as loading stores a matrix (rounded once); every other tensor as
// model_load loads it. a must fit DIR's config (lora_read checks it).
model_t *model_load_merged(const char *dir, const lora_adapter *a, const model_opts *o, rl_err *err);
// Fills the standby set w with what model_load_merged would hold, from the
// base's files f (hfw_open of the base's directory, the one m was loaded
// from) and adapter a (NULL: the base alone). 0, or -1 with err.
int model_weights_fill(const model_t *m, model_weights *w, const hfw_set *f, const lora_adapter *a, rl_err *err);

// Writes DIR/config.json and the weights (as model_save_as) of the base
// with adapter a merged into the matrices it targets (lora_merge, in f32),
// whatever adapters the model has attached (a NULL: the base alone). Reads
// only the base's weights, which a model with adapters attached never
// changes: another thread may call it while the model trains.
int model_save_merged(const model_t *m, const lora_adapter *a, const char *dir, const hfw_write_opts *o,
                      rl_err *err);

// Attaches trainable adapters of config c (PEFT's layer on c->targets of
// every decoder layer, scale lora_scale(c)) with the values of a, or when a
// is NULL as PEFT initialises them: A Kaiming-uniform, U(−1/sqrt(in),
// 1/sqrt(in)), drawn from seed, and B zero, so that the model computes as
// the base does. From then on the base's weights are frozen and the model's
// parameters (model_nparams, model_ntensors, model_tensor_at/get/set,
// model_host_params, the training state) are the adapters': for each layer,
// each target in LORA_* order, A then B, named as adapter_model.safetensors
// names them. model_save_as writes the merged model. The base's weights
// must be f32 or bf16 (model_opts.dtype) with f32 activations. 0, or -1 with err.
int model_lora_attach(model_t *m, const lora_config *c, const lora_adapter *a, uint64_t seed, rl_err *err);
const lora_config *model_lora(const model_t *m);   // the attached adapters' config, or NULL
// Host copies of the attached adapters' values (lora_free it), or NULL without.
lora_adapter *model_lora_get(const model_t *m);

#endif
