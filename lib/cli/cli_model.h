// cli_model.h — the model of the tools that compute with one (rl-sample,
// rl-ratio): --model DIR, a model directory or a checkpoint root, with
// --adapter DIR, a LoRA adapter (checkpoint/lora.h) merged into its weights
// as they load (model_load_merged).
#ifndef RLPIPE_CLI_MODEL_H
#define RLPIPE_CLI_MODEL_H

#include <stdint.h>

#include "model/model.h"

// --adapter's lines of --help, between the tool's own first and last.
#define CLI_ADAPTER_HELP                                                                               \
    "                         DIR holds PEFT's adapter_config.json and\n"                               \
    "                         adapter_model.safetensors (a version of rl-learn --lora-rank,\n"          \
    "                         or a checkpoint root whose 'latest' names one); --model is\n"             \
    "                         its base. Each matrix it targets is merged in f32,\n"                     \
    "                         W + scale B A (scale = lora_alpha / r, or / sqrt(r) with\n"                \
    "                         use_rslora; PEFT's merge_and_unload)"

typedef struct {
    char dir[4096];           // the model directory loaded (--model resolved)
    char adapter[4096];       // the adapter directory merged ("" without one)
    uint64_t version;         // the adapter's version with one, else the model's (ckpt_resolve)
} cli_model;

// Loads model (ckpt_resolve) at o, with adapter (NULL: none; resolved the
// same way, read with lora_read against the model's config.json) merged.
// NULL with err: lora_read's errors as they are (they name the file and the
// tensor or key), the loader's as "cannot load WHAT: ...".
model_t *cli_load_model(const char *model, const char *adapter, const model_opts *o, const char *what,
                        cli_model *info, rl_err *err);

#endif
