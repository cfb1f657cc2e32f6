"""An independent reference of the Llama-family decoder (Hugging Face's
LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM and Qwen3's
Qwen3ForCausalLM), written in PyTorch from the architecture's definition, not
imported from transformers. It reads a model
directory (config.json + model.safetensors, doc/design.md §3) with Hugging Face's
`safetensors` library and computes in float64 for the tests (the values in the
file, bf16-rounded ones included, are exact in float64) or float32 for the
benchmark. It also writes random model directories whose log-probabilities
spread widely, so that a test against it is not passed by a near-uniform model.

    x = embed[ids]
    per layer:  h = rmsnorm(x) ; x += o(attn(rope(q(h)), rope(k(h)), v(h)))
                h = rmsnorm(x) ; x += down(silu(gate(h)) * up(h))
    Qwen3: q(h) and k(h) are RMS-normed per head (weights q_norm, k_norm of
    size head_dim) before rope, as Qwen3Attention does.
    logits = rmsnorm(x) · lm_headᵀ        (lm_head = embed when tied)
    logp   = log_softmax(logits / temperature)

It also emulates the sampler's precisions (rl-sample --dtype, model.h): the
weight-only ones (bf16w, f16, int8w: matrices rounded, all else as at f32)
and those that round the activations too (bf16, and the W8A8 int8 and fp8,
whose decoder-layer products quantize their inputs per token), exactly as
lib/model/model.c and ops.h define them; see PRECISIONS.
"""
import json
import math
import os

import ml_dtypes
import numpy as np
import torch
from safetensors.torch import load_file, save_file


# ---- configuration ---------------------------------------------------------------

def read_config(model_dir):
    """config.json as the short names the model uses (C, F, L, NH, NKV, HS, V, ...)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        j = json.load(f)
    mt = j["model_type"]
    assert mt in ("llama", "qwen2", "qwen3", "mistral"), f"model_type {mt!r} is not llama, qwen2, qwen3 or mistral"
    assert j.get("hidden_act", "silu") == "silu", "only hidden_act silu is defined here"
    assert (j.get("rope_scaling") or {}).get("rope_type", "default") == "default", "rope_scaling is not defined here"
    C, NH = j["hidden_size"], j["num_attention_heads"]
    NKV = j.get("num_key_value_heads") or NH
    HS = j.get("head_dim") or (128 if mt == "qwen3" else C // NH)   # Qwen3Config's default head_dim is 128
    assert NH % NKV == 0
    if mt in ("llama", "qwen3"):
        qkv_bias = o_bias = bool(j.get("attention_bias", False))
    elif mt == "qwen2":  # q/k/v biases always, o_proj never
        qkv_bias, o_bias = True, False
    else:  # Mistral: no biases
        qkv_bias = o_bias = False
    return {
        "model_type": mt, "C": C, "F": j["intermediate_size"], "L": j["num_hidden_layers"],
        "NH": NH, "NKV": NKV, "HS": HS, "V": j["vocab_size"],
        "eps": float(j.get("rms_norm_eps", 1e-6)), "theta": float(j.get("rope_theta", 10000.0)),
        "max_pos": j.get("max_position_embeddings", 2048),
        "tie": bool(j.get("tie_word_embeddings", False)), "qkv_bias": qkv_bias, "o_bias": o_bias,
        "mlp_bias": mt == "llama" and bool(j.get("mlp_bias", False)), "qk_norm": mt == "qwen3",
    }


def tensor_names(cfg):
    """{name: shape} of every tensor the config implies, named as Hugging Face names them."""
    C, F, V, NH, NKV, HS = cfg["C"], cfg["F"], cfg["V"], cfg["NH"], cfg["NKV"], cfg["HS"]
    t = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg["tie"]:
        t["lm_head.weight"] = (V, C)
    for i in range(cfg["L"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (C,)
        t[p + "post_attention_layernorm.weight"] = (C,)
        t[p + "self_attn.q_proj.weight"] = (NH * HS, C)
        t[p + "self_attn.k_proj.weight"] = (NKV * HS, C)
        t[p + "self_attn.v_proj.weight"] = (NKV * HS, C)
        t[p + "self_attn.o_proj.weight"] = (C, NH * HS)
        if cfg["qkv_bias"]:
            t[p + "self_attn.q_proj.bias"] = (NH * HS,)
            t[p + "self_attn.k_proj.bias"] = (NKV * HS,)
            t[p + "self_attn.v_proj.bias"] = (NKV * HS,)
        if cfg["o_bias"]:
            t[p + "self_attn.o_proj.bias"] = (C,)
        if cfg["qk_norm"]:
            t[p + "self_attn.q_norm.weight"] = (HS,)
            t[p + "self_attn.k_norm.weight"] = (HS,)
        t[p + "mlp.gate_proj.weight"] = (F, C)
        t[p + "mlp.up_proj.weight"] = (F, C)
        t[p + "mlp.down_proj.weight"] = (C, F)
        if cfg["mlp_bias"]:
            t[p + "mlp.gate_proj.bias"] = (F,)
            t[p + "mlp.up_proj.bias"] = (F,)
            t[p + "mlp.down_proj.bias"] = (C,)
    return t


# ---- the sampler's precisions ---------------------------------------------------------

# rl-sample --dtype NAME: (storage of the decoder layers' matrices, storage of
# the embedding and lm_head, activations). Storage: f32, bf16, f16 (rounded to
# nearest even), int8 (one scale per `group` inputs of a row), int8row and fp8
# (W8A8: one scale per output channel, the product's input quantized per
# token). Activations: f32 (only the weights are rounded) or bf16 (every
# activation rounded to bf16 where model_forward.c's act_round does: Llama._act).
PRECISIONS = {
    "f32": ("f32", "f32", "f32"),
    "bf16": ("bf16", "bf16", "bf16"),
    "int8": ("int8row", "bf16", "bf16"),
    "fp8": ("fp8", "bf16", "bf16"),
    "bf16w": ("bf16", "bf16", "f32"),
    "f16": ("f16", "f16", "f32"),
    "int8w": ("int8", "int8", "f32"),
}

F32 = torch.float32


def row_scale(x, top):
    """Per row of x (..., K), f32 as dtype.h and ops.h compute them: s = max|x| / top
    and inv = 1/s (0 where s is 0); both (..., 1)."""
    s = x.abs().amax(dim=-1, keepdim=True) / torch.tensor(top, dtype=F32)
    inv = torch.where(s > 0, torch.tensor(1.0, dtype=F32) / s, torch.zeros_like(s))
    return s, inv


def quantize_i8(x):
    """x (..., K) f32 to int8 with one scale per row (dt_quantize_i8 with group = K,
    and ops.h ACT_I8): q = round-half-even(x * (1/s)) clamped to ±127, s =
    max|x| / 127, all in f32. Returns q (float64 integers) and s (..., 1) f32."""
    s, inv = row_scale(x, 127.0)
    return torch.round(x * inv).clamp(-127, 127).to(torch.float64), s


def e4m3(y):
    """f32 values rounded to fp8 e4m3 (OCP E4M3FN; nearest, ties to even),
    saturated to ±448 as dtype.h's f32_to_e4m3 is: clipped first, since
    ml_dtypes's float8_e4m3fn takes what rounds past 448 to NaN. As f32."""
    a = y.to(F32).clamp(-448.0, 448.0).numpy().astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return torch.from_numpy(a)


def quantize_fp8(x):
    """x (..., K) f32 to e4m3 with one scale per row (dt_quantize_fp8, ops.h
    ACT_FP8): q = e4m3(x * (1/s)), s = max|x| / 448, in f32. Returns q (the
    e4m3 values, float64) and s (..., 1) f32."""
    s, inv = row_scale(x, 448.0)
    return e4m3(x * inv).to(torch.float64), s


def round_weight(w, store, group=32):
    """A weight matrix (M, K) as the sampler stores it, returned in float64:
    bf16 / f16 rounded to nearest even from f32; int8 as dtype.h defines it:
    per row and group of `group` consecutive inputs (the last group may be
    shorter), s = max|x| / 127 in f32, q = round-half-even(x * (1/s)) clamped
    to ±127, value q * s; int8row the same with one group per row; fp8 e4m3
    per row (quantize_fp8), value q * s."""
    x = w.to(F32)
    if store == "f32":
        return x.to(torch.float64)
    if store == "bf16":
        return x.to(torch.bfloat16).to(torch.float64)
    if store == "f16":
        return x.to(torch.float16).to(torch.float64)
    if store == "fp8":
        q, s = quantize_fp8(x)
        return q * s.to(torch.float64)
    if store == "int8row":
        group = x.shape[1]
    assert store in ("int8", "int8row"), f"unknown storage {store!r}"
    M, K = x.shape
    out = torch.empty(M, K, dtype=torch.float64)
    for c0 in range(0, K, group):
        q, s = quantize_i8(x[:, c0:c0 + group])
        out[:, c0:c0 + group] = q * s.to(torch.float64)
    return out


# ---- the model ---------------------------------------------------------------------

class Llama:
    """The decoder at one float dtype. forward() takes a batch of equal-length
    token rows and, optionally, a KV cache (for step-by-step decoding)."""

    def __init__(self, model_dir, dtype=torch.float64, precision="f32", group=32):
        """precision: the sampler's (PRECISIONS; int8w with one scale per
        `group` inputs). Norm weights and biases stay as in the file.

        What is computed in which float: the file's values, bf16-rounded ones
        included, are exact in float64. Where the precision's definition
        fixes the arithmetic it is done as defined, in f32: the quantizers'
        scales, x * (1/s) and its rounding, and the int8 product's
        ((float)Σ q·w) · s_w · s_x. Everything else (norms, attention, RoPE,
        SwiGLU, sums, the fp8 product's sum, whose order the definition
        leaves open) is computed in `dtype`, so that the reference is the
        definition with exact arithmetic between its rounding points, and a
        value at bf16 activations is first rounded to f32 (what the sampler
        holds), then to bf16."""
        self.cfg = cfg = read_config(model_dir)
        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        want = tensor_names(cfg)
        assert set(raw) == set(want), f"tensors differ from the config: {sorted(set(raw) ^ set(want))[:5]}"
        for k, shape in want.items():
            assert tuple(raw[k].shape) == shape, f"{k}: shape {tuple(raw[k].shape)}, config implies {shape}"
        assert precision in PRECISIONS, f"unknown precision {precision!r}: one of {', '.join(PRECISIONS)}"
        self.precision = precision
        inner, outer, act = PRECISIONS[precision]
        self.act_bf16 = act == "bf16"
        # W8A8 matrices: their integer or e4m3 values (float64) and per-row scales (M,) f32
        self.wq = {}
        for k, v in raw.items():
            if v.dim() != 2:
                continue
            store = outer if k in ("model.embed_tokens.weight", "lm_head.weight") else inner
            if store in ("int8row", "fp8"):
                q, sc = (quantize_i8 if store == "int8row" else quantize_fp8)(v.to(F32))
                self.wq[k] = (q, sc[:, 0])
            raw[k] = round_weight(v, store, group)
        # bf16/f16 -> float64 is exact, so the reference sees exactly the file's values
        self.w = {k: v.to(dtype).contiguous() for k, v in raw.items()}
        self.dtype = dtype
        self.lm_head = self.w["model.embed_tokens.weight" if cfg["tie"] else "lm_head.weight"]
        HS = cfg["HS"]
        # HF rotary: inv_freq[i] = 1 / theta^(2i / HS), angles computed in float64
        self.inv_freq = 1.0 / cfg["theta"] ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS)

    def _act(self, x):
        """An activation as the precision keeps it: at bf16 rounded (through
        f32, as the sampler's values are f32) to nearest even."""
        return x.to(F32).to(torch.bfloat16).to(self.dtype) if self.act_bf16 else x

    def _rmsnorm(self, x, name):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.cfg["eps"]) * self.w[name]

    def _w8a8(self, x, name):
        """x (..., K) · Wᵀ of a W8A8 matrix (ops.h ACT_I8, ACT_FP8): each row of x
        quantized with its own scale s_x, the products of integers (or of e4m3
        values) summed exactly in float64, then scaled by s_w[m] and s_x[n]:
        int8 in f32 as ops.h fixes it ((float)Σ, · s_w, · s_x), fp8 in `dtype`."""
        q_w, s_w = self.wq[name]
        xf = x.to(F32)                     # exact: every product's input is bf16-rounded
        if self.precision == "int8":
            q_x, s_x = quantize_i8(xf)
            return ((q_x @ q_w.t()).to(F32) * s_w * s_x).to(self.dtype)   # |Σ| <= 127² K: exact in float64
        q_x, s_x = quantize_fp8(xf)
        return (q_x @ q_w.t()).to(self.dtype) * s_w.to(self.dtype) * s_x.to(self.dtype)

    def _linear(self, x, name, bias):
        """x · Wᵀ (+ bias), the output kept as an activation (self._act)."""
        y = self._w8a8(x, name + ".weight") if name + ".weight" in self.wq else x @ self.w[name + ".weight"].t()
        return self._act(y + self.w[name + ".bias"] if bias else y)

    def _rope_table(self, pos):
        """cos, sin (T, HS) of the angles pos * inv_freq, each repeated over both halves."""
        ang = pos.to(torch.float64)[:, None] * self.inv_freq[None, :]      # (T, HS/2)
        ang = torch.cat([ang, ang], dim=-1)                                # (T, HS)
        return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

    @staticmethod
    def _rope(x, cos, sin):
        """x (B, H, T, HS) rotated in the rotate-half convention:
        out = x * cos + rotate_half(x) * sin, rotate_half([a, b]) = [-b, a]."""
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    def new_cache(self, B, max_len):
        """KV cache for B sequences: per layer (k, v), each (B, NKV, max_len, HS)."""
        c = self.cfg
        return [(torch.zeros(B, c["NKV"], max_len, c["HS"], dtype=self.dtype),
                 torch.zeros(B, c["NKV"], max_len, c["HS"], dtype=self.dtype)) for _ in range(c["L"])]

    def forward(self, ids, cache=None, pos0=0):
        """ids (B, T) long, at positions pos0 .. pos0+T-1 (pos0 > 0 needs the cache
        that holds positions 0 .. pos0-1). Returns the final-normed hidden states (B, T, C)."""
        c = self.cfg
        B, T = ids.shape
        NH, NKV, HS = c["NH"], c["NKV"], c["HS"]
        pos = torch.arange(pos0, pos0 + T)
        cos, sin = self._rope_table(pos)
        # At bf16 activations every value below is rounded where model_forward.c rounds
        # it (self._act; products' outputs in _linear), so the KV cache holds
        # the rounded k (after RoPE) and v.
        x = self._act(self.w["model.embed_tokens.weight"][ids])            # (B, T, C)
        # causal mask: query at pos0+i sees keys 0 .. pos0+i
        mask = torch.arange(pos0 + T)[None, :] > pos[:, None]              # (T, pos0+T)
        A = self._act
        for i in range(c["L"]):
            p = f"model.layers.{i}."
            h = A(self._rmsnorm(x, p + "input_layernorm.weight"))
            q = self._linear(h, p + "self_attn.q_proj", c["qkv_bias"]).view(B, T, NH, HS)
            k = self._linear(h, p + "self_attn.k_proj", c["qkv_bias"]).view(B, T, NKV, HS)
            if c["qk_norm"]:   # Qwen3: each head's (HS) vector, before rope
                q = A(self._rmsnorm(q, p + "self_attn.q_norm.weight"))
                k = A(self._rmsnorm(k, p + "self_attn.k_norm.weight"))
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            v = self._linear(h, p + "self_attn.v_proj", c["qkv_bias"]).view(B, T, NKV, HS).transpose(1, 2)
            q, k = A(self._rope(q, cos, sin)), A(self._rope(k, cos, sin))
            if cache is not None:
                kc, vc = cache[i]
                kc[:, :, pos0:pos0 + T] = k
                vc[:, :, pos0:pos0 + T] = v
                k, v = kc[:, :, :pos0 + T], vc[:, :, :pos0 + T]
            else:
                assert pos0 == 0, "positions after 0 need a cache"
            # grouped-query attention: query head h reads key/value head h // (NH / NKV)
            if NKV != NH:
                k = k.repeat_interleave(NH // NKV, dim=1)                  # (B, NH, S, HS)
                v = v.repeat_interleave(NH // NKV, dim=1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)                  # (B, NH, T, S)
            if T > 1:
                s = s.masked_fill(mask, float("-inf"))
            a = A(torch.softmax(s, dim=-1) @ v)                            # (B, NH, T, HS)
            a = a.transpose(1, 2).reshape(B, T, NH * HS)
            x = A(x + self._linear(a, p + "self_attn.o_proj", c["o_bias"]))
            h = A(self._rmsnorm(x, p + "post_attention_layernorm.weight"))
            g = self._linear(h, p + "mlp.gate_proj", c["mlp_bias"])
            u = self._linear(h, p + "mlp.up_proj", c["mlp_bias"])
            x = A(x + self._linear(A(torch.nn.functional.silu(g) * u), p + "mlp.down_proj", c["mlp_bias"]))
        return A(self._rmsnorm(x, "model.norm.weight"))

    def logits(self, hidden):
        return self._act(hidden @ self.lm_head.t())

    def logprobs(self, prompt, ids, temperature):
        """log_softmax(logits / temperature)[ids[t]] of each completion token
        after prompt + ids[:t]; a list of floats."""
        assert len(prompt) >= 1 and len(ids) >= 1 and temperature > 0
        seq = torch.tensor([list(prompt) + list(ids[:-1])], dtype=torch.long)
        h = self.forward(seq)[0, len(prompt) - 1:]                         # (n_ids, C)
        lp = torch.log_softmax(self.logits(h) / temperature, dim=-1)
        return lp.gather(1, torch.tensor(ids, dtype=torch.long)[:, None])[:, 0].tolist()


# ---- random model directories --------------------------------------------------------

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "mistral": "MistralForCausalLM"}


def random_model(model_dir, *, model_type="llama", hidden=64, inter=96, layers=2, heads=4,
                 kv_heads=2, head_dim=None, vocab=300, tie=False, attention_bias=False,
                 mlp_bias=False, dtype="F32", seed=0, gain=1.5, logit_scale=4.0, max_pos=256,
                 eps=1e-5, theta=10000.0):
    """Writes model_dir/config.json and model.safetensors (F32 or BF16) with random
    weights scaled so that the model is far from uniform:
      - projections N(0, (gain / sqrt(fan_in))²), gain > 1: every layer changes the
        residual stream and attention is peaked (score std ≈ gain²);
      - embeddings and lm_head N(0, (logit_scale / sqrt(hidden))²): logits have std
        ≈ logit_scale, so log-probs of random tokens spread over tens of nats;
      - norm weights 1 + N(0, 0.2²) and biases N(0, 0.5²), so that both are used.
    Returns the config dict written."""
    os.makedirs(model_dir, exist_ok=True)
    cfg = {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "vocab_size": vocab, "rms_norm_eps": eps, "rope_theta": theta,
        "max_position_embeddings": max_pos, "tie_word_embeddings": tie, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32" if dtype == "F32" else "bfloat16",
    }
    if model_type in ("llama", "qwen3"):
        cfg["attention_bias"] = attention_bias
    if model_type == "llama":
        cfg["mlp_bias"] = mlp_bias
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shapes = tensor_names(read_config(model_dir))
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        t = random_tensor(name, shape, g, hidden, gain, logit_scale, torch.float64)
        out[name] = t.to(torch.float32 if dtype == "F32" else torch.bfloat16).contiguous()
    save_file(out, os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})
    return cfg


def random_tensor(name, shape, g, hidden, gain=1.5, logit_scale=4.0, dtype=torch.float32):
    """The random value of tensor `name` (Hugging Face's name) in random_model's
    scheme: norm weights 1 + N(0, 0.2²), biases N(0, 0.5²), embeddings and
    lm_head N(0, (logit_scale / sqrt(hidden))²), matrices N(0, (gain / sqrt(fan_in))²)."""
    z = torch.randn(shape, generator=g, dtype=dtype)
    if name.endswith("norm.weight"):
        return z.mul_(0.2).add_(1.0)
    if name.endswith(".bias"):
        return z.mul_(0.5)
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return z.mul_(logit_scale / math.sqrt(hidden))
    return z.mul_(gain / math.sqrt(shape[1]))


# The built-in tiny tokenizer (models/tiny/tokenizer.json): 448 tokens, bos and eos ids.
TINY_VOCAB, TINY_BOS, TINY_EOS = 448, 445, 446


def add_tiny_tokenizer(model_dir):
    """Gives a random model directory (vocab >= 448) the tiny tokenizer and its
    bos/eos ids in config.json, so that it encodes text as rl-sample does."""
    import shutil
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["bos_token_id"], cfg["eos_token_id"] = TINY_BOS, TINY_EOS
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shutil.copy(os.path.join(root, "models", "tiny", "tokenizer.json"), model_dir)
    return model_dir
