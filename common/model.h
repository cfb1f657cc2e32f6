// model.h — the Llama-family policy model (DESIGN §3, §6): weights from a
// Hugging Face directory or random, the scoring forward (log-probabilities of
// given tokens at a temperature) and incremental decoding with a KV cache laid
// out for continuous batching. Computation goes through a backend (ops.h).
#ifndef RLPIPE_MODEL_H
#define RLPIPE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dtype.h"
#include "util.h"

typedef struct model model_t;

typedef struct {
    rl_dtype dtype;      // matmul and embedding weights: f32 (learner, scorer), bf16, f16, int8
    int group;           // int8 inputs per scale: 32 or 64 (0 = 32)
} model_opts;

// Reads DIR/config.json and DIR/model.safetensors; checks that every tensor
// the config implies is present with its shape, and that no other tensor is.
model_t *model_load(const char *dir, const model_opts *o, rl_err *err);
// Random weights: matrices and embeddings N(0, std²), biases N(0, std²), norm weights 1.
model_t *model_random(const model_config *c, uint64_t seed, float std, const model_opts *o,
                      rl_err *err);
// Writes DIR/config.json and DIR/model.safetensors (F32; DIR must exist).
int model_save(const model_t *m, const char *dir, rl_err *err);
void model_free(model_t *m);

const model_config *model_cfg(const model_t *m);
rl_dtype model_dtype(const model_t *m);
size_t model_nparams(const model_t *m);

// ---- Scoring: log-probabilities of completions (the learner's and rl-ratio's path).
typedef struct {
    const uint32_t *prompt;   // n_prompt >= 1 tokens of context
    size_t n_prompt;
    const uint32_t *ids;      // n_ids tokens to score, following the prompt
    size_t n_ids;
    float temperature;        // > 0: log-probs of softmax(logits / temperature)
    float *logp;              // out: n_ids values
} model_seq;

// One batched forward over all sequences; the output layer runs in chunks of
// rows, so no (tokens, V) logits array is held. Errors: token >= vocab,
// empty prompt, a sequence longer than max_position_embeddings, temperature <= 0.
int model_score(model_t *m, model_seq *seqs, size_t n, rl_err *err);

// ---- Incremental decoding with a KV cache of `slots` sequences of up to max_len tokens.
int model_cache_init(model_t *m, int slots, int max_len, rl_err *err);
int model_slot_acquire(model_t *m);              // a free slot (length 0), or -1
void model_slot_release(model_t *m, int slot);
int model_slot_len(const model_t *m, int slot);  // tokens in its cache

typedef struct {
    int slot;
    const uint32_t *ids;      // tokens to append (a prompt to prefill, or one decoded token)
    size_t n;
} model_step_seq;

// Appends each sequence's tokens to its slot (one batched forward) and writes
// the logits (temperature 1) after its last token: logits (n, V), host memory.
int model_step(model_t *m, const model_step_seq *s, size_t n, float *logits, rl_err *err);

// log_softmax(logits / temperature)[token] for one row of V logits, in double.
double model_logprob_of(const float *logits, int V, float temperature, uint32_t token);

#endif
