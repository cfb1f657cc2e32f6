// push_lora.h — adapter pushes (push.h, doc/design.md §5): a version that
// holds a LoRA adapter (checkpoint/lora.h: adapter_config.json and
// adapter_model.safetensors, no model weights) goes out as the adapter's
// tensors, megabytes where the model is gigabytes, and the receiver merges
// them into the base it loaded, as model_load_merged would.
//
// The hello of a receiver that takes them says "lora": PUSH_LORA, and the
// push message of one carries "lora": {r, alpha, rslora, targets: "q_proj,
// v_proj"} (adapter_config.json's r, lora_alpha, use_rslora and
// target_modules in LORA_* order) with the adapter's tensors, PEFT's names,
// in place of the hello's: for each decoder layer of the receiver's base and
// each target, lora_A (r, in) and lora_B (out, r), each once, each as f32,
// bf16 or f16 (widened to f32 exactly on arrival).
#ifndef RLPIPE_PUSH_LORA_H
#define RLPIPE_PUSH_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/config.h"
#include "checkpoint/lora.h"
#include "checkpoint/safetensors.h"
#include "records/record.h"
#include "sync/push.h"
#include "util.h"

#define PUSH_LORA 1u        // the hello's "lora": the adapter pushes the receiver takes
#define PUSH_LORA_MAX_RANK 65536

// 1 when dir holds an adapter (adapter_config.json) and no model weights
// (hfweights.h): a version of rl-learn --lora-rank. A directory with both is
// a model: its weights are pushed whole.
int push_lora_is_adapter(const char *dir);

// The push message's "lora" map from c.
void push_lora_set(rec_t *msg, const lora_config *c);
// Reads it back into c (base ""): 0; 1 when the message has none; -1 with
// err when it is not such a map (r outside 1..PUSH_LORA_MAX_RANK, alpha not
// a positive finite number, rslora not a boolean, targets not lora_parse_targets').
int push_lora_get(const rec_t *msg, lora_config *c, rl_err *err);

// The sending end: dir's adapter config (lora_config_read's checks) into c,
// its weights file opened into *f, and the push's tensor list (*t
// malloc'd, *n entries; t[i] is (*f)->t[i], as it lies in the file); *f
// (st_close) and *t (free) are the caller's to release, even on an error.
// 0, or -1 with err naming the file and the tensor: a name that is not
// lora_tensor_parse's, a module that the config does not target, a tensor
// that is not a matrix.
int push_lora_open(const char *dir, lora_config *c, st_file **f, push_tensor **t, size_t *n, rl_err *err);

// Where tensor k of an adapter push goes.
typedef struct {
    int layer, target, ab;    // ab 0: lora_A, 1: lora_B
} push_lora_slot;

// The receiving end: checks an adapter push's tensors t[0..n) against a
// base of config mc (every layer and target of c, A and B, each once with
// its shape) into slot[0..n); *bytes is their data's size. 0, or -1 with
// err naming the tensor. An r above a targeted matrix's smaller dimension
// is refused: it adapts nothing more, and the memory it would take is the
// sender's to choose.
int push_lora_match(const model_config *mc, const lora_config *c, const push_tensor *t, size_t n,
                    push_lora_slot *slot, uint64_t *bytes, rl_err *err);
// The f32 elements of slot s in adapter a (lora_new's).
float *push_lora_dest(const lora_adapter *a, push_lora_slot s);

#endif
