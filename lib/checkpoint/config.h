// config.h — the configuration of a Llama-family model read from a Hugging
// Face config.json (doc/design.md §3) and the generation_config.json beside it.
// Families (model_type): "llama" (optional attention_bias: q/k/v/o biases;
// mlp_bias: gate/up/down biases), "qwen2" (q/k/v biases), "qwen3" (RMSNorm of
// each head of q and k before RoPE, attention_bias) and "mistral" (no biases).
#ifndef RLPIPE_CONFIG_H
#define RLPIPE_CONFIG_H

#include "util.h"

#define CFG_MAX_EOS 16        // eos_token_id lists are a few ids long

// How RoPE's inverse frequencies are scaled: config.json's rope_scaling (or
// transformers 5's rope_parameters), computed as transformers 4.46's
// modeling_rope_utils computes them (model.c's rope table).
typedef enum {
    CFG_ROPE_DEFAULT,         // inv_freq[i] = theta^(-2i/HS)
    CFG_ROPE_LINEAR,          // inv_freq / factor
    CFG_ROPE_DYNAMIC,         // NTK scaling that grows with the sequence; equal to the default
                              // for sequences within original_max_pos, the only ones accepted
    CFG_ROPE_YARN,            // interpolated per frequency band; cos and sin times attention_factor
    CFG_ROPE_LLAMA3,          // Llama 3.1's: low frequencies / factor, a smooth band between
} cfg_rope_type;

typedef struct {
    cfg_rope_type type;
    double factor;            // every type but the default: >= 1
    double low_freq_factor;   // llama3
    double high_freq_factor;  // llama3 (> low_freq_factor)
    int original_max_pos;     // original_max_position_embeddings: llama3 (required), dynamic and
                              // yarn (optional); 0 when absent
    double attention_factor;  // yarn; 0 when absent: 0.1 ln(factor) + 1
    double beta_fast, beta_slow;   // yarn; 0 when absent: 32 and 1
} cfg_rope;

// generation_config.json's sampling defaults: read and kept so that a tool
// can show them, never applied (rl-sample's options decide how to sample).
typedef struct {
    int present;              // DIR/generation_config.json was read
    int do_sample;            // 0 or 1; -1 when absent
    int top_k;                // -1 when absent
    int max_new_tokens;       // -1 when absent
    double temperature, top_p, min_p, repetition_penalty;   // NAN when absent
} cfg_generation;

typedef struct {
    char model_type[16];      // "llama", "qwen2", "qwen3" or "mistral"
    int hidden;               // hidden_size                  C
    int inter;                // intermediate_size            F
    int layers;               // num_hidden_layers            L
    int heads;                // num_attention_heads          NH
    int kv_heads;             // num_key_value_heads          NKV
    int head_dim;             // head_dim, default hidden / heads (qwen3: 128)   HS
    int vocab;                // vocab_size                   V
    int max_pos;              // max_position_embeddings
    double rms_eps;           // rms_norm_eps
    double rope_theta;        // rope_theta (default 10000)
    int tie_embeddings;       // tie_word_embeddings (default false)
    int qkv_bias;             // q/k/v projections have biases
    int o_bias;               // o_proj has a bias (llama and qwen3 attention_bias)
    int bos_id;               // bos_token_id; -1 when absent (prompts get bos from the tokenizer, not this)
    int eos_id;               // the first of eos_token_id; -1 when absent
    int n_eos;                // eos_token_id as a list, every one of which ends a completion
    int eos_ids[CFG_MAX_EOS]; // (Llama 3.x Instruct: 128001, 128008, 128009); cfg_load fills it,
                              // n_eos 0 in a config built in code means {eos_id} (or none)
    int has_pad, pad_id;      // pad_token_id when has_pad (recorded, not used)
    int mlp_bias;             // gate/up/down projections have biases (llama mlp_bias)
    int qk_norm;              // q_norm and k_norm: RMSNorm weights (HS) of each head of q and k (qwen3)
    int sliding_window;       // attention window in tokens (mistral sliding_window, qwen2/qwen3 with
                              // use_sliding_window); 0: none. Longer sequences are refused.
    cfg_rope rope;            // zero: the default RoPE
    char torch_dtype[16];     // "float32", "bfloat16", "float16"; "" when absent (cfg_save: float32)
    cfg_generation gen;       // cfg_load fills it; not written by cfg_save
} model_config;

// Reads DIR/config.json (path names the file or its directory) and, when
// present, generation_config.json beside it: its eos_token_id joins the
// config's (config's first), its bos/pad ids fill those the config lacks, its
// sampling defaults go to c->gen. Refuses unknown model types and keys,
// missing or non-positive sizes, heads not dividing, hidden_act other than
// "silu", unsupported rope_scaling, and sizes large enough to overflow; the
// message names the file, the key and the value.
int cfg_load(const char *path, model_config *c, rl_err *err);
// Writes a config.json that Hugging Face transformers reads as the same model.
int cfg_save(const char *path, const model_config *c, rl_err *err);
// Checks the invariants cfg_load enforces (for configs built in code).
int cfg_check(const model_config *c, rl_err *err);

// The longest sequence (tokens) the model computes as transformers does:
// max_position_embeddings, or less where a sliding window or dynamic RoPE
// scaling would change attention beyond it. *why, when not NULL, names the
// limiting key ("max_position_embeddings", "sliding_window", "rope_scaling
// dynamic original_max_position_embeddings").
int cfg_max_seq(const model_config *c, const char **why);

// generation_config.json's sampling defaults as one line for a tool to print
// ("temperature 0.6, top_p 0.9, do_sample true"), or "" when there are none.
void cfg_generation_str(const model_config *c, char *buf, size_t size);

#endif
