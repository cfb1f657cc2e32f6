"""The models, records and planned bytes of bench/memory.sh.

    memory_model.py config NAME DIR      DIR/config.json: NAME's config as Hugging
                                         Face ships it (qwen2.5-0.5b, qwen2.5-1.5b,
                                         llama3.2-3b), without bos/eos token ids
    memory_model.py weights DIR [SEED]   DIR/model.safetensors: random BF16 weights
                                         for DIR/config.json, one tensor at a time
                                         (matrices N(0, 0.02²), norms 1, biases
                                         N(0, 0.02²)); numpy float32 in chunks of
                                         at most 2^24 values, rounded to bf16 by
                                         ml_dtypes (nearest even)
    memory_model.py records OUT V [--seqs N --prompt P --completion T --group G]
                                         N rollout records of random ids below V:
                                         groups of G sharing a prompt, rewards
                                         0..G-1 within a group, the sampler's logp
    memory_model.py prompts OUT V [--prompts K --prompt P]
                                         K prompts of P random ids (JSON lines)
    memory_model.py plan DIR [--lora-rank R] [--targets K] [--base-dtype D]
                     [--recompute] [--tokens N] [--train-tokens M]
                                         the learner's planned bytes, one line
    memory_model.py sampler DIR SLOTS LEN
                                         rl-sample --dtype bf16's: weights and
                                         its KV cache of SLOTS x LEN rows

The plan mirrors lib/model: the weights as model_plan lays them out (f32; or
with --base-dtype bf16 every matrix bf16, embedding included, and norms and
biases f32), RoPE's table (max_position_embeddings, head_dim/2, 2) f32, the
LoRA adapters (f32), the training state (gradient + AdamW's two moments, f32,
over the trained parameters), and the two workspaces: mdl_work_table at N
tokens and mdl_train_table at M tokens (default N), each buffer rounded up to
256 bytes (WBUF_ALIGN), with lrows = clamp(2^23 / vocab, 16, 256) rows of
logits. The sampler's plan at bf16: every matrix bf16, norms and biases f32,
RoPE's table, and the KV cache (layers, SLOTS x LEN, kv_heads x head_dim)
for keys and for values, bf16; its workspace is not counted.
"""
import argparse
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "py"))

CONFIGS = {
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "vocab_size": 151936, "max_position_embeddings": 32768, "max_window_layers": 24, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": False, "tie_word_embeddings": True,
        "hidden_act": "silu", "attention_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "bfloat16",
        "use_cache": True},
    "llama3.2-3b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 3072,
        "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
        "attention_dropout": 0.0, "initializer_range": 0.02, "pretraining_tp": 1, "torch_dtype": "bfloat16",
        "use_cache": True},
}
CONFIGS["qwen2.5-1.5b"] = dict(CONFIGS["qwen2.5-0.5b"], hidden_size=1536, intermediate_size=8960,
                               num_hidden_layers=28, num_attention_heads=12, max_position_embeddings=131072,
                               max_window_layers=21, sliding_window=131072)


def short(j):
    """config.json as the model's short names (llama and qwen2 only)."""
    mt = j["model_type"]
    assert mt in ("llama", "qwen2"), f"model_type {mt!r}: llama or qwen2 here"
    C, NH = j["hidden_size"], j["num_attention_heads"]
    return {"C": C, "F": j["intermediate_size"], "L": j["num_hidden_layers"], "NH": NH,
            "NKV": j.get("num_key_value_heads") or NH, "HS": j.get("head_dim") or C // NH, "V": j["vocab_size"],
            "max_pos": j["max_position_embeddings"], "tie": bool(j.get("tie_word_embeddings")),
            "qkv_bias": mt == "qwen2" or bool(j.get("attention_bias")), "o_bias": mt == "llama" and
            bool(j.get("attention_bias")), "mlp_bias": bool(j.get("mlp_bias")), "qk_norm": False}


def read_config(d):
    with open(os.path.join(d, "config.json")) as f:
        return short(json.load(f))


def tensors(c):
    """[(name, shape, is_matrix)] in model_table.c's order."""
    C, F, QD, KVD = c["C"], c["F"], c["NH"] * c["HS"], c["NKV"] * c["HS"]
    t = [("model.embed_tokens.weight", (c["V"], C), True)]
    for i in range(c["L"]):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", (C,), False))
        for name, out, inp, bias in (("q", QD, C, c["qkv_bias"]), ("k", KVD, C, c["qkv_bias"]),
                                     ("v", KVD, C, c["qkv_bias"]), ("o", C, QD, c["o_bias"])):
            t.append((p + f"self_attn.{name}_proj.weight", (out, inp), True))
            if bias:
                t.append((p + f"self_attn.{name}_proj.bias", (out,), False))
        t.append((p + "post_attention_layernorm.weight", (C,), False))
        for name, out, inp in (("gate", F, C), ("up", F, C), ("down", C, F)):
            t.append((p + f"mlp.{name}_proj.weight", (out, inp), True))
            if c["mlp_bias"]:
                t.append((p + f"mlp.{name}_proj.bias", (out,), False))
    t.append(("model.norm.weight", (C,), False))
    if not c["tie"]:
        t.append(("lm_head.weight", (c["V"], C), True))
    return t


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def cmd_config(a):
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(CONFIGS[a.name], f, indent=2)
        f.write("\n")


def cmd_weights(a):
    import ml_dtypes
    import numpy as np
    ts = tensors(read_config(a.dir))
    header, off = {}, 0
    for name, shape, _ in ts:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + 2 * numel(shape)]}
        off += 2 * numel(shape)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    rng = np.random.default_rng(a.seed)
    path = os.path.join(a.dir, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name, shape, _ in ts:
            n = numel(shape)
            norm = name.endswith("layernorm.weight") or name == "model.norm.weight"
            for i in range(0, n, 1 << 24):
                k = min(1 << 24, n - i)
                x = np.ones(k, np.float32) if norm else rng.standard_normal(k, dtype=np.float32) * np.float32(0.02)
                f.write(x.astype(ml_dtypes.bfloat16).tobytes())
    os.replace(path + ".tmp", path)
    print(f"{path}: {sum(numel(s) for _, s, _ in ts)} parameters, {off} bytes of BF16")


def cmd_records(a):
    import rltest
    rnd = random.Random(a.seed)
    recs = []
    for i in range(a.seqs):
        if i % a.group == 0:
            prompt = [rnd.randrange(a.vocab) for _ in range(a.prompt)]
        recs.append({"id": i, "group": i // a.group, "prompt_ids": prompt,
                     "ids": [rnd.randrange(a.vocab) for _ in range(a.completion)],
                     "logp": [-rnd.uniform(5.0, 15.0) for _ in range(a.completion)],
                     "reward": float(i % a.group)})
    with open(a.out, "wb") as f:
        f.write(rltest.write_stream(recs))


def cmd_prompts(a):
    rnd = random.Random(a.seed)
    with open(a.out, "w") as f:
        for _ in range(a.prompts):
            f.write(json.dumps({"prompt": "", "prompt_ids": [rnd.randrange(a.vocab) for _ in range(a.prompt)]}) + "\n")


def table_bytes(bufs):
    """Bytes of a workspace block: each buffer (count, element size) rounded up to 256."""
    return sum((n * s + 255) // 256 * 256 for n, s in bufs)


def plan(c, rank, ntargets, base_dtype, recompute, N, NT):
    C, F, L, NH, V = c["C"], c["F"], c["L"], c["NH"], c["V"]
    QD, KVD = NH * c["HS"], c["NKV"] * c["HS"]
    R = min(max((8 << 20) // V, 16), 256)   # lrows
    mat = 2 if base_dtype == "bf16" else 4
    ts = tensors(c)
    nparams = sum(numel(s) for _, s, _ in ts)
    weights = sum(numel(s) * (mat if m else 4) for _, s, m in ts)
    rope = c["max_pos"] * (c["HS"] // 2) * 2 * 4
    # LoRA, all-linear: per layer q, k, v, o, gate, up, down: A (r, in), B (out, r)
    dims = [(QD, C), (KVD, C), (KVD, C), (C, QD), (F, C), (F, C), (C, F)][:ntargets] if rank else []
    nlora = L * sum(rank * (o + i) for o, i in dims)
    trained = nlora if rank else nparams
    state = 3 * trained * 4
    LR = rank
    LW = max(C, QD, F) if rank else 0
    work = table_bytes([(N * C, 4)] * 3 + [(N * QD, 4)] * 2 + [(N * KVD, 4)] * 2 + [(N * F, 4)] * 2 +
                       [(N, 4)] * 5 + [(N, 4)] * 4 + [(N, 8)] * 2 + [(N, 4)] + [(R * C, 4), (R * V, 4)] +
                       [(N, 16), (N, 4)] + [(N * KVD, 4)] * 4 + [(N * LR, 4), (N * LW, 4), (N * LR, 4)])
    Ls = 1 if recompute else L
    M = NT
    train = table_bytes([((L + 1) * M * C, 4), (Ls * M * C, 4), (Ls * M * QD, 4), (Ls * M * KVD, 4),
                         (Ls * M * KVD, 4), (Ls * M * QD, 4), (Ls * M * NH, 4), (Ls * M * C, 4), (Ls * M * C, 4),
                         (Ls * M * F, 4), (Ls * M * F, 4)] +
                        [(M * C, 4)] * 2 + [(M * QD, 4)] + [(M * KVD, 4)] * 2 + [(M * QD, 4)] + [(M * F, 4)] * 2 +
                        [(R * C, 4)] * 2 + [(M, 4)] + [(Ls * ntargets * rank * M if rank else 0, 4)])
    return {"params": nparams, "lora_params": nlora, "weights": weights, "rope": rope, "adapters": nlora * 4,
            "state": state, "work": work, "train": train,
            "total": weights + rope + nlora * 4 + state + work + train}


def cmd_plan(a):
    c = read_config(a.dir)
    p = plan(c, a.lora_rank, a.targets if a.lora_rank else 0, a.base_dtype, a.recompute, a.tokens,
             a.train_tokens or a.tokens)
    print("PLAN " + " ".join(f"{k}={v}" for k, v in p.items()))


def cmd_sampler(a):
    c = read_config(a.dir)
    ts = tensors(c)
    weights = sum(numel(s) * (2 if m else 4) for _, s, m in ts)
    rope = c["max_pos"] * (c["HS"] // 2) * 2 * 4
    kv = 2 * c["L"] * a.slots * a.len * c["NKV"] * c["HS"] * 2
    print(f"PLAN weights={weights} rope={rope} kv={kv} total={weights + rope + kv}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    num = {"type": int}
    seed = ("--seed", {"type": int, "default": 1})
    commands = {
        "config": (cmd_config, [("name", {"choices": sorted(CONFIGS)}), ("dir", {})]),
        "weights": (cmd_weights, [("dir", {}), ("seed", {"nargs": "?", "type": int, "default": 1})]),
        "records": (cmd_records, [("out", {}), ("vocab", num), ("--seqs", {"type": int, "default": 64}),
                                  ("--prompt", {"type": int, "default": 64}),
                                  ("--completion", {"type": int, "default": 448}),
                                  ("--group", {"type": int, "default": 8}), seed]),
        "prompts": (cmd_prompts, [("out", {}), ("vocab", num), ("--prompts", {"type": int, "default": 8}),
                                  ("--prompt", {"type": int, "default": 64}), seed]),
        "plan": (cmd_plan, [("dir", {}), ("--lora-rank", {"type": int, "default": 0}),
                            ("--targets", {"type": int, "default": 7, "help": "LoRA targets (all-linear: 7)"}),
                            ("--base-dtype", {"choices": ("f32", "bf16"), "default": "f32"}),
                            ("--recompute", {"action": "store_true"}), ("--tokens", {"type": int, "default": 16384}),
                            ("--train-tokens", {"type": int, "default": 0})]),
        "sampler": (cmd_sampler, [("dir", {}), ("slots", num), ("len", num)]),
    }
    for name, (fn, args) in commands.items():
        s = sub.add_parser(name)
        for flag, kw in args:
            s.add_argument(flag, **kw)
        s.set_defaults(fn=fn)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
