// config.h — the Llama-family configuration read from a Hugging Face
// config.json (DESIGN §3): model_type "llama" (optional attention_bias: q/k/v/o
// biases) or "qwen2" (q/k/v biases).
#ifndef RLPIPE_CONFIG_H
#define RLPIPE_CONFIG_H

#include "util.h"

#define CFG_MAX_EOS 16        // eos_token_id lists are a few ids long

typedef struct {
    char model_type[16];      // "llama" or "qwen2"
    int hidden;               // hidden_size                  C
    int inter;                // intermediate_size            F
    int layers;               // num_hidden_layers            L
    int heads;                // num_attention_heads          NH
    int kv_heads;             // num_key_value_heads          NKV (default NH)
    int head_dim;             // head_dim, default hidden / heads   HS
    int vocab;                // vocab_size                   V
    int max_pos;              // max_position_embeddings
    double rms_eps;           // rms_norm_eps
    double rope_theta;        // rope_theta (default 10000)
    int tie_embeddings;       // tie_word_embeddings (default: false for llama and qwen2)
    int qkv_bias;             // q/k/v projections have biases
    int o_bias;               // o_proj has a bias (llama attention_bias)
    int bos_id;               // bos_token_id; -1 when absent (prompts get bos from the tokenizer, not this)
    int eos_id;               // the first of eos_token_id; -1 when absent
    int n_eos;                // eos_token_id as a list, every one of which ends a completion
    int eos_ids[CFG_MAX_EOS]; // (Llama 3.x Instruct: 128001, 128008, 128009); cfg_load fills it,
                              // n_eos 0 in a config built in code means {eos_id} (or none)
} model_config;

// Reads DIR/config.json. Refuses unknown model types, missing or non-positive
// sizes, heads not dividing, hidden_act other than "silu", rope_scaling, and
// sizes large enough to overflow; the message names the file and the key.
int cfg_load(const char *path, model_config *c, rl_err *err);
// Writes a config.json that Hugging Face transformers reads as the same model.
int cfg_save(const char *path, const model_config *c, rl_err *err);
// Checks the invariants cfg_load enforces (for configs built in code).
int cfg_check(const model_config *c, rl_err *err);

#endif
