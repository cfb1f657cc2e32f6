"""tests/fuzz/seeds.py OUTDIR TINY_SAFETENSORS — the seeds tests/fuzz/seeds.sh
does not make with the tools: safetensors files and shard indexes, configs,
tokenizers (with the fixed ones of fuzz_tokenizer listed in
OUTDIR/tokenizers.list), push messages, chat templates and LoRA adapter
configs (as PEFT writes them). Each seed of a harness that chooses what to do
with the rest starts with the byte that chooses (see each fuzz_<name>.c)."""
import json
import os
import struct
import sys

import msgpack
import torch
from safetensors.torch import save

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))
import hf_tokenizer_files  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEXTS = ["Hello, world! 12345 + 678 = 9", "  spaces\tand\nnewlines  ", "café naïve ÅÉÎ ǅ ﬁ ①",
         "日本語のテキスト 🙂👍🏽", "<|bos|>2+2=4<|eos|>", "don't I'll we've 3.14159 1,000,000", "\x00\x01\x7f"]


def write(dir, name, data):
    os.makedirs(dir, exist_ok=True)
    with open(os.path.join(dir, name), "wb") as f:
        f.write(data)


def safetensors_seeds(out, tiny):
    d = os.path.join(out, "safetensors")
    small = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(4, dtype=torch.bfloat16),
             "c": torch.full((2, 1, 2), -0.5, dtype=torch.float16), "scalar": torch.tensor(2.0)}
    write(d, "small", b"\x00" + save(small, metadata={"format": "pt"}))
    write(d, "empty", b"\x00" + save({"z": torch.zeros(0, 3)}))
    with open(tiny, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.seek(0)
        write(d, "tiny-header", b"\x00" + f.read(8 + n + 4096))   # the data cut short
    shards = {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
              "model.norm.weight": "model-00001-of-00002.safetensors",
              "lm_head.weight": "model-00002-of-00002.safetensors"}
    write(d, "index", b"\x01" + json.dumps({"metadata": {"total_size": 40}, "weight_map": shards}, indent=2).encode())
    del shards["lm_head.weight"]
    write(d, "index-shard-unlisted", b"\x01" + json.dumps({"weight_map": shards}).encode())


def config_seeds(out):
    d = os.path.join(out, "config")
    with open(os.path.join(ROOT, "models", "tiny", "config.json"), "rb") as f:
        tiny = f.read()
    base = json.loads(tiny)
    gen = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "eos_token_id": [446, 447],
           "bos_token_id": 445, "pad_token_id": 0, "max_new_tokens": 64, "repetition_penalty": 1.1, "min_p": 0.0}
    write(d, "tiny", tiny)
    write(d, "tiny-generation", tiny + b"\x00" + json.dumps(gen).encode())
    variants = {
        "qwen2": {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 128, "max_window_layers": 2},
        "qwen3": {"model_type": "qwen3", "attention_bias": True, "eos_token_id": [446, 447]},
        "mistral": {"model_type": "mistral", "sliding_window": 64, "rope_theta": 1e6},
        "llama3-rope": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 128}},
        "yarn": {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                  "beta_fast": 32, "beta_slow": 1}},
        "linear": {"rope_scaling": {"type": "linear", "factor": 2.0}, "mlp_bias": True},
        "dynamic": {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}},
    }
    for name, v in variants.items():
        c = dict(base)
        c.update(v)
        if c["model_type"] != "llama":
            c.pop("attention_bias", None)
        write(d, name, json.dumps(c, indent=2).encode())


def trimmed(path, keep):
    """tokenizer.json at path with the ids of its BPE vocabulary below keep and
    the merges among them: the file's structure at a size a fuzzer can mutate."""
    with open(path, "rb") as f:
        t = json.load(f)
    model = t["model"]
    model["vocab"] = {s: i for s, i in model["vocab"].items() if i < keep}
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in model["vocab"] and b in model["vocab"] and a + b in model["vocab"]:
            merges.append(m)
    model["merges"] = merges
    return json.dumps(t, ensure_ascii=False).encode()


def tokenizer_seeds(out):
    d = os.path.join(out, "tokenizer")
    fixed_dir = os.path.join(out, "tokenizers")
    os.makedirs(fixed_dir, exist_ok=True)
    fixed = [f for f in hf_tokenizer_files.real_files(fixed_dir, ("tiny", "llama3", "qwen2.5", "smollm2"))
             if f.path]
    with open(os.path.join(out, "tokenizers.list"), "w") as f:
        f.write(":".join(x.path for x in fixed) + "\n")
    built = [f for f in hf_tokenizer_files.built_files(fixed_dir) if f.path]
    for f in fixed + built:
        keep = 10**9 if f.name == "tiny" else 600
        write(d, f"json-{f.name}", b"\x00" + trimmed(f.path, keep) + b"\x00" + TEXTS[len(f.name) % len(TEXTS)].encode())
    for f in built:
        os.remove(f.path)
    # m = 1..n: a text for fixed tokenizer m mod n; m | 0x80: ids to decode.
    for m in range(1, len(fixed) + 1):
        for i, text in enumerate(TEXTS):
            write(d, f"text-{m}-{i}", bytes([m]) + text.encode())
        write(d, f"ids-{m}", bytes([0x80 | m]) + struct.pack("<12H", *range(0, 1200, 100)))


def push_seeds(out):
    d = os.path.join(out, "push")

    def msg(m):
        body = msgpack.packb(m, use_bin_type=True)
        return struct.pack("<I", len(body)) + body

    tensors = [["model.embed_tokens.weight", "bf16", [448, 128]], ["model.norm.weight", "f32", [128]],
               ["model.layers.0.self_attn.q_proj.weight", "f16", [128, 128]]]
    hello = {"ok": True, "receiver": "rl-sample 0.1.0", "dtype": "bf16", "version": 3, "tensors": tensors,
             "stored": "bf16,f32,int8/32"}
    push = {"version": 4, "bytes": 448 * 128 * 2 + 128 * 4 + 128 * 128 * 2, "checksum": "xxh3-64", "tensors": tensors,
            "update_from": 3, "update_n": 73856, "update_moved": 0.999, "update_changed": 0.004,
            "update_norm": 0.05, "update_along": 0.02}
    result = {"ok": True, "version": 4, "bytes": 10, "recv_us": 5, "wait_us": 1, "stall_us": 0}
    write(d, "messages", b"\x00" + msg(hello) + msg(push) + msg({"ok": True}) + msg(result))
    write(d, "error", b"\x00" + msg({"ok": False, "error": "a tensor missing"}))
    # an adapter push (lib/sync/push_lora.h) that fits the harness's base: 2 layers, hidden 32,
    # q_proj (32, 32) and v_proj (16, 32), r 4
    lora = []
    for layer in range(2):
        for mod, out_dim in (("q_proj", 32), ("v_proj", 16)):
            name = f"base_model.model.model.layers.{layer}.self_attn.{mod}"
            lora += [[f"{name}.lora_A.weight", "f32", [4, 32]], [f"{name}.lora_B.weight", "bf16", [out_dim, 4]]]
    write(d, "adapter", b"\x00" + msg(dict(hello, lora=1)) +
          msg({"version": 5, "bytes": 2 * (4 * 32 * 4 + 32 * 4 * 2 + 4 * 32 * 4 + 16 * 4 * 2), "checksum": "xxh3-64",
               "tensors": lora, "lora": {"r": 4, "alpha": 8.0, "rslora": False, "targets": "q_proj,v_proj"}}))
    greeting = b"RLPW" + struct.pack("<III", 1, 0, 0) + bytes(range(32))
    write(d, "greeting", b"\x01" + greeting)
    write(d, "greeting-auth", b"\x05" + greeting[:8] + struct.pack("<I", 1) + greeting[12:])
    write(d, "answer", b"\x02" + bytes(range(32)) + msg({"version": 1, "tensors": []}))
    for i, a in enumerate(["unix:/run/rl.sock", "tcp:127.0.0.1:9000", "tcp:[::1]:80", "tcp:8080", "rel/sock"]):
        write(d, f"address-{i}", b"\x03" + a.encode())
    write(d, "token", b"\x07" + b"0123456789abcdef0123456789abcdef\r\n")


def chat_seeds(out):
    """Chat templates (from $JINJA_TEMPLATES, default .deps/templates, when
    there) and small ones of our own, each followed by a NUL and variables."""
    d = os.path.join(out, "chat")
    os.makedirs(d, exist_ok=True)
    conv = json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u \u00e9 {{ x }}"},
                                    {"role": "assistant", "content": "<think>r</think>a",
                                     "tool_calls": [{"function": {"name": "f", "arguments": {"k": 1.5}}}]},
                                    {"role": "tool", "content": "t"}],
                       "add_generation_prompt": True, "bos_token": "<s>", "enable_thinking": False,
                       "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}).encode()
    own = [b"{% for m in messages %}{{ loop.index }}{{ m.role|upper }}{% generation %}{{ m.content|trim }}"
           b"{% endgeneration %}{% endfor %}",
           b"{%- set ns = namespace(x=0) -%}{% for i in range(5) if i is odd %}{% set ns.x = ns.x + i %}{% endfor %}"
           b"{{ ns.x }}{{ [1, 'a', none]|tojson(indent=2) }}{{ 'a,b'.split(',')[::-1] }}",
           b"{% macro m(a, b=2) %}{{ a ~ b }}{{ caller() if caller is defined }}{% endmacro %}{{ m(1) }}"
           b"{% call m(3) %}c{% endcall %}{{ raise_exception('x') if false }}"]
    for i, t in enumerate(own):
        write(d, f"own-{i}", t + b"\0" + conv)
    # Long chains of each form (past the parser's nesting limit, and within
    # it), and chains inside chains (past the evaluator's depth limit).
    forms = [(b"{{ 1", b" + 1", b" }}"), (b"{{ 'a'", b" ~ 'a'", b" }}"), (b"{{ 1", b" and 1", b" }}"),
             (b"{{ 0", b" < 1", b" }}"), (b"{{ 'A'", b"|lower", b" }}"), (b"{{ x", b"[0]", b" }}"),
             (b"{{ x", b".x", b" }}"), (b"{{ 1", b" if 1", b" }}"), (b"{% set y", b" | upper", b" %}a{% endset %}"),
             (b"{% if 0 %}", b"{% elif 0 %}", b"{% endif %}")]
    for i, (head, link, tail) in enumerate(forms):
        for n in (200, 2000):
            write(d, f"chain-{i}-{n}", head + link * n + tail + b"\0" + conv)
    nested = b"{{ " + b"(" * 50 + b"1" + (b" + 1" * 100 + b")") * 50 + b" }}"
    write(d, "chains-in-chains", nested + b"\0" + conv)
    src = os.environ.get("JINJA_TEMPLATES", os.path.join(ROOT, ".deps", "templates"))
    if os.path.isdir(src):
        for name in sorted(os.listdir(src)):
            if name.endswith(".jinja"):
                with open(os.path.join(src, name), "rb") as f:
                    write(d, name, f.read() + b"\0" + conv)


def lora_seeds(out):
    """adapter_config.json files as PEFT's LoraConfig.save_pretrained writes
    them: ones lora_config_read takes, and ones it refuses."""
    import tempfile
    import peft
    d = os.path.join(out, "lora")
    variants = {
        "qv": dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.05),
        "all-linear-rslora": dict(r=16, lora_alpha=32, target_modules="all-linear", use_rslora=True),
        "mlp-named-base": dict(r=4, lora_alpha=8.5, target_modules=["gate_proj", "up_proj", "down_proj"],
                               base_model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct"),
        "dora": dict(r=4, lora_alpha=8, target_modules=["o_proj"], use_dora=True),
        "layers": dict(r=4, lora_alpha=8, target_modules=["k_proj"], layers_to_transform=[0, 2]),
        "regex": dict(r=4, lora_alpha=8, target_modules=r".*\.q_proj"),
        "patterns": dict(r=4, lora_alpha=8, target_modules=["q_proj"], rank_pattern={"q_proj": 2},
                         alpha_pattern={"q_proj": 4}, modules_to_save=["lm_head"], bias="lora_only"),
    }
    for name, kw in variants.items():
        with tempfile.TemporaryDirectory() as tmp:
            peft.LoraConfig(task_type="CAUSAL_LM", **kw).save_pretrained(tmp)
            with open(os.path.join(tmp, "adapter_config.json"), "rb") as f:
                write(d, name, f.read())


def main():
    out, tiny = sys.argv[1], sys.argv[2]
    chat_seeds(out)
    safetensors_seeds(out, tiny)
    config_seeds(out)
    tokenizer_seeds(out)
    push_seeds(out)
    lora_seeds(out)


if __name__ == "__main__":
    main()
