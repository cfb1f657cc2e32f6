"""LoRA adapters for tests, written by PEFT 0.13.2 itself (nothing of rlpipe's
own code): get_peft_model on the transformers model of a base directory,
every lora_A and lora_B drawn from N(0, std^2) (PEFT's own init leaves B at
zero: an adapter that changes nothing), saved with save_pretrained into a
directory laid out as a version of rl-learn --lora-rank (adapter_config.json,
adapter_model.safetensors, state.json, the base's tokenizer files; no
config.json or model.safetensors); and the same adapter merged by PEFT's
merge_and_unload into a model directory, the float64 reference's input."""
import json
import os
import shutil

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _peft_model(base, r, alpha, targets, rslora, seed, std):
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), use_rslora=rslora, lora_dropout=0.0,
                     bias="none", task_type="CAUSAL_LM")
    pm = get_peft_model(model, cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(pm.named_parameters()):
            if ".lora_A." in name or ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return pm


def write(out, base, *, version, r=4, alpha=8.0, targets=("q_proj", "v_proj"), rslora=False, seed=0, std=0.2,
          merged=None):
    """The adapter as version `version` in directory out; with merged (a
    directory), also the base with it merged by PEFT, saved as f32
    safetensors. Returns out."""
    pm = _peft_model(base, r, alpha, targets, rslora, seed, std)
    pm.save_pretrained(out, safe_serialization=True)
    readme = os.path.join(out, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    with open(os.path.join(out, "state.json"), "w") as f:
        json.dump({"version": version}, f)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(base, name)):
            shutil.copy(os.path.join(base, name), out)
    if merged:
        _save_merged(pm, base, merged)
    return out


def _save_merged(pm, base, out):
    pm.merge_and_unload().save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(base, name)):
            shutil.copy(os.path.join(base, name), out)


def merge(adapter, base, out):
    """The adapter directory `adapter` (rlpipe's or PEFT's) loaded by PEFT onto
    base and merged by merge_and_unload into the model directory out."""
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    _save_merged(PeftModel.from_pretrained(model, adapter), base, out)
    return out
