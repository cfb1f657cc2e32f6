// lora.h — a LoRA adapter as PEFT keeps it in a directory:
//   DIR/adapter_config.json      {"peft_type": "LORA", "r": R, "lora_alpha": A, "target_modules": [...],
//                                 "use_rslora": false, "bias": "none", ...}
//   DIR/adapter_model.safetensors for each decoder layer N and target module:
//     base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight   A (R, in)
//     base_model.model.model.layers.N.self_attn.q_proj.lora_B.weight   B (out, R)
//   (q_proj, k_proj, v_proj, o_proj under self_attn; gate_proj, up_proj,
//   down_proj under mlp). The layer is PEFT's: h = W x + scale · B (A x),
//   scale = alpha / R, or alpha / sqrt(R) with rsLoRA.
// Read, checked against the base model's config, written, and merged into a
// base matrix in f32 (W + scale · B A) as PEFT's merge_and_unload computes it.
#ifndef RLPIPE_LORA_H
#define RLPIPE_LORA_H

#include <stddef.h>

#include "checkpoint/config.h"
#include "util.h"

#define LORA_CONFIG "adapter_config.json"
#define LORA_WEIGHTS "adapter_model.safetensors"

// The modules an adapter may target, in this order (bit 1 << LORA_Q ...).
enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_NT };
#define LORA_ALL ((1u << LORA_NT) - 1)
// "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
extern const char *const lora_target_names[LORA_NT];

typedef struct {
    int rank;                 // r >= 1
    double alpha;             // lora_alpha (> 0)
    int rslora;               // use_rslora: scale alpha / sqrt(r)
    unsigned targets;         // bits 1 << LORA_*; not 0
    char base[4096];          // base_model_name_or_path ("" when none): the base it was trained on
} lora_config;

// alpha / rank, or alpha / sqrt(rank) with rslora, in f32 as PEFT's layer holds it.
float lora_scale(const lora_config *c);
// "q_proj,v_proj" (any subset of the names, any order, no repeats) or
// "all-linear" (every one: PEFT's shorthand, the output layer excluded).
// 0, or -1 with err naming the unknown module.
int lora_parse_targets(const char *s, unsigned *out, rl_err *err);
// The targets as a comma-separated list in LORA_* order, into buf.
void lora_targets_str(unsigned targets, char *buf, size_t size);

// A module's matrix W (out, in) in a model of config mc.
void lora_dims(const model_config *mc, int target, int *out, int *in);

// An adapter in host memory: a[l·LORA_NT + t] (R, in) and b[...] (out, R)
// f32, for layer l and target t; both NULL where t is not targeted.
typedef struct {
    lora_config c;
    int layers;
    float **a, **b;           // (layers · LORA_NT) each
    int out[LORA_NT], in[LORA_NT];   // each target's W (out, in) in the base (lora_dims); lora_new sets them
} lora_adapter;

// A zero adapter for a model of config mc (tensors of every target of c allocated).
lora_adapter *lora_new(const lora_config *c, const model_config *mc);
void lora_free(lora_adapter *a);

// 1 when DIR holds an adapter: DIR/adapter_config.json exists (a version
// saved merged holds a model beside it: hfw_exists tells).
int lora_exists(const char *dir);

// Reads DIR/adapter_config.json (path names the file or its directory): a
// JSON object with "peft_type" "LORA", an integer "r" >= 1, a positive
// "lora_alpha" (whose scale is a finite non-zero f32), "target_modules" a
// list of module names (or the string "all-linear"). Refused, naming the file and
// the key: options rlpipe does not implement (use_dora true, bias other than
// "none", modules_to_save, layers_to_transform, layer_replication,
// rank_pattern or alpha_pattern not empty, fan_in_fan_out true, a
// target_modules regex string, target modules outside the list above), and
// those of later PEFT versions that change the layer (lora_bias,
// exclude_modules, target_parameters, trainable_token_indices, use_qalora,
// alora_invocation_tokens), and an init_lora_weights that rewrites the base
// at initialisation (pissa, olora, corda, loftq: such an adapter fits its
// changed base, not the one named). A target_modules list may repeat a name
// (PEFT reads it as a set).
// Keys that change nothing at inference (lora_dropout, task_type,
// inference_mode, init_lora_weights true, false or "gaussian", revision, any
// key unknown here, ...) are read and ignored;
// *dropout (when not NULL) gets lora_dropout (0 when absent).
int lora_config_read(const char *path, lora_config *c, double *dropout, rl_err *err);
// DIR/adapter_config.json (path names the file or an existing directory) as
// PEFT 0.13.2 writes it, every key of its LoraConfig but runtime_config
// (lora_dropout 0, bias "none", inference_mode true, task_type "CAUSAL_LM",
// peft_type "LORA"; target_modules a list in LORA_* order;
// base_model_name_or_path null when base is ""), fsynced.
int lora_config_write(const char *path, const lora_config *c, rl_err *err);

// The safetensors name of a tensor: ab 0 for lora_A, 1 for lora_B.
void lora_tensor_name(char *buf, size_t size, int layer, int target, int ab);
// The inverse: 0 with *layer, *target, *ab set, or -1 for another name.
int lora_tensor_parse(const char *name, int *layer, int *target, int *ab);

// Reads DIR (config and weights, F32, BF16 or F16 tensors) for a base of
// config mc: every tensor of every layer and target the config names, with
// shapes A (r, in) and B (out, r), and no other tensor. Errors name the file
// and the tensor or key (an adapter_model.bin, a pickle, is not read: the
// message says so). *dropout as lora_config_read.
lora_adapter *lora_read(const char *dir, const model_config *mc, double *dropout, rl_err *err);
// Writes DIR/adapter_model.safetensors (F32) and DIR/adapter_config.json
// (DIR must exist; each file fsynced). 0, or -1 with err.
int lora_write(const char *dir, const lora_adapter *a, rl_err *err);

// W (out, in) += scale · B (out, r) · A (r, in), in f32: B A computed first
// (f32 sums), then scaled and added, as PEFT merges.
void lora_merge(float *W, int out, int in, const float *B, const float *A, int r, float scale);

#endif
