"""Real models' configs, exact against transformers.

Log-probabilities that rlpipe's f32 model gives (tests/tools/model_probe:
model_score, and the KV-cache decoding path) against transformers 4.46's own
model classes (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM) run in
float64 on the same weights, within TOL = 1e-4, for random weights at the
exact published config.json of each model below; each model also as a
sharded copy (save_pretrained with a small max_shard_size, so that
model.safetensors.index.json names the shards), which must give the very
same log-probs. What is cut, and why: the number of layers only, where the
memory (24 GiB shared by the machine's users; the float64 reference doubles
the model) or the time (the test's 3 minutes on 2 shared cores) needs it;
every other size, the vocabulary included, is the published one:
    Qwen2.5-0.5B-Instruct   all 24 layers
    Llama-3.2-1B-Instruct   16 -> 4 layers   (memory: 16 need 15 GB with the float64 copy)
    SmolLM2-135M-Instruct   all 30 layers
    Mistral-7B-v0.3         32 -> 1 layer    (memory: one layer is 218 M parameters)
    Qwen3-0.6B              28 -> 8 layers   (time: the float64 reference is Python)
transformers 4.46 has no Qwen3 (4.51+ does not import on Debian's torch 1.13):
Qwen3 is tested against llama_ref.py, this suite's independent float64
decoder, whose Qwen3 part (an RMSNorm of each head of q and of k, weights of
size head_dim, before RoPE) is written from Qwen3's published modeling code
(Qwen3Attention), not from rlpipe's.

Small configs then cover each feature against transformers: rope_scaling
linear, dynamic (within the lengths it equals the default), yarn (default and
explicit parameters, on Llama and on Qwen2) and llama3, transformers 5's
rope_parameters, head_dim other than hidden/heads, attention_bias with
mlp_bias, Mistral's and Qwen2's sliding window (sequences within it match,
longer ones are refused naming the key); the gradients of the new parameters
(mlp biases against transformers' autograd, Qwen3's q/k norms against
llama_ref's) through tests/tools/grad_probe; and config.json files written by
rlpipe (cfg_save) load in transformers without a warning as the same model.

Random weights follow llama_ref.random_tensor's scheme (logits of std ~4, so
that log-probs spread over tens of nats); each reference's spread is checked
so that no case passes on a near-uniform model."""
import json
import logging
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
from rltest import case  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from huggingface_hub import split_torch_state_dict_into_shards  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers.modeling_utils import no_init_weights  # noqa: E402

BUILD = os.path.join(rltest.ROOT, os.environ.get("BUILD", "build"))
TOOLS = os.path.join(BUILD, "tests", "tools")
WORK = tempfile.mkdtemp(prefix="rlpipe-hf-configs.", dir=os.environ.get("TMPDIR"))
TOL = 1e-4          # log-prob, f32 against float64 (test_model_torch.py says why this size)
GRAD_TOL = 1e-4     # ‖g − g_ref‖ / ‖g_ref‖ per tensor, as tests/py/test_learn.py
SHARD = "40MB"      # max_shard_size of the sharded copies: several shards for every model here
torch.set_num_threads(2)
transformers.logging.set_verbosity_error()   # save_pretrained's notes; warnings are caught where they matter

# ---- the published configs (config.json of each model on the Hugging Face hub) ----------

QWEN25_05B_INSTRUCT = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
LLAMA32_1B_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
}
SMOLLM2_135M_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041666666666666664,
    "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "pad_token_id": 2,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_scaling": None,
    "rope_theta": 100000, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
    "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}}, "use_cache": True,
    "vocab_size": 49152,
}
MISTRAL_7B_V03 = {
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0",
    "use_cache": True, "vocab_size": 32768,
}
QWEN3_06B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}
HF_CLASSES = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
              "mistral": transformers.MistralForCausalLM}
HF_CONFIGS = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
              "mistral": transformers.MistralConfig}


# ---- building models ------------------------------------------------------------------------

def cut(cfg, layers):
    return dict(cfg, num_hidden_layers=layers)


def write_config(d, cfg):
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def hf_model(d, cfg, seed, sharded=None, gain=1.5):
    """transformers' model of config dict cfg with random weights (random_tensor's
    scheme with `gain`, from seed), eager attention, in eval mode. Saved to d (when not None)
    as one model.safetensors and, when sharded is a path, there in shards of
    SHARD; config.json is cfg itself, as published."""
    config = HF_CONFIGS[cfg["model_type"]](**cfg)
    config._attn_implementation = "eager"
    with no_init_weights():
        model = HF_CLASSES[cfg["model_type"]](config)
    model.tie_weights()   # which no_init_weights leaves undone: lm_head is embed_tokens when tied
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(llama_ref.random_tensor(name, tuple(p.shape), g, cfg["hidden_size"], gain))
    model.eval()
    for out in (d, sharded):
        if out:
            model.save_pretrained(out, **({"max_shard_size": SHARD} if out == sharded else {}))
            write_config(out, cfg)
    return model


def ref_model(d, cfg, seed, sharded=None, gain=1.5):
    """A model with no transformers class here (Qwen3): random weights written by
    hand to d (and in shards to `sharded`, split as save_pretrained splits them),
    config.json cfg. Returns llama_ref's float64 model of d."""
    for out in (d, sharded):
        if out:
            os.makedirs(out, exist_ok=True)
            write_config(out, cfg)
    g = torch.Generator().manual_seed(seed)
    shapes = llama_ref.tensor_names(llama_ref.read_config(d))
    sd = {n: llama_ref.random_tensor(n, s, g, cfg["hidden_size"], gain) for n, s in shapes.items()}
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    if sharded:
        split = split_torch_state_dict_into_shards(sd, filename_pattern="model{suffix}.safetensors",
                                                   max_shard_size=SHARD)
        for file, names in split.filename_to_tensors.items():
            save_file({n: sd[n] for n in names}, os.path.join(sharded, file), metadata={"format": "pt"})
        with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, f, indent=2)
    return llama_ref.Llama(d)


def make_jobs(vocab, seed, n=6, max_prompt=10, max_ids=8):
    """(prompt, ids, temperature): prompt lengths 1..max_prompt, completions
    1..max_ids tokens, the extremes included, temperatures 1.0 and 0.7."""
    rnd = random.Random(seed)
    jobs = []
    for i in range(n):
        np_ = (1, max_prompt)[i] if i < 2 else rnd.randint(1, max_prompt)
        ni = (max_ids, 1)[i] if i < 2 else rnd.randint(1, max_ids)
        jobs.append(([rnd.randrange(vocab) for _ in range(np_)], [rnd.randrange(vocab) for _ in range(ni)],
                     (1.0, 0.7)[i % 2]))
    return jobs


# ---- log-probabilities --------------------------------------------------------------------

def hf_logprobs(model, jobs):
    """transformers' log-probs of each job in float64 (model converted in place):
    the decoder of transformers' class, its lm_head on the rows that predict."""
    model.double()
    out = []
    with torch.no_grad():
        for p, ids, t in jobs:
            seq = torch.tensor([list(p) + list(ids[:-1])])
            h = model.model(input_ids=seq).last_hidden_state[0, len(p) - 1:]
            lp = torch.log_softmax(model.lm_head(h) / t, dim=-1)
            out.append(lp.gather(1, torch.tensor(ids)[:, None])[:, 0].tolist())
    return out


def probe(d, jobs, *args):
    """model_probe's (status, log-probs, stderr) for the jobs; args: --score, --slots N."""
    inp = "".join(f"{t!r}\t{' '.join(map(str, p))}\t{' '.join(map(str, ids))}\n" for p, ids, t in jobs)
    r = subprocess.run([os.path.join(TOOLS, "model_probe"), "--model", d, *args], input=inp.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lps = [[float(x) for x in line.split()] for line in r.stdout.decode().splitlines()]
    return r.returncode, lps, r.stderr.decode()


def rl_logprobs(d, jobs, *args):
    rc, lps, err = probe(d, jobs, *args)
    assert rc == 0, f"model_probe {' '.join(args)} on {os.path.basename(d)} exited {rc}: {err.strip()}"
    return lps


def max_error(got, ref):
    assert len(got) == len(ref), f"{len(got)} sequences back, {len(ref)} sent"
    e = 0.0
    for i, (g, r) in enumerate(zip(got, ref)):
        assert len(g) == len(r), f"sequence {i}: {len(g)} log-probs, expected {len(r)}"
        assert all(math.isfinite(x) for x in g), f"sequence {i}: non-finite log-prob"
        e = max(e, max(abs(a - b) for a, b in zip(g, r)))
    return e


def assert_spread(ref, vocab):
    """The reference is far from uniform (-ln vocab everywhere): its log-probs
    spread over nats (random tokens of a peaked distribution fall far below)."""
    lps = [x for r in ref for x in r]
    mean = sum(lps) / len(lps)
    std = math.sqrt(sum((x - mean) ** 2 for x in lps) / len(lps))
    assert std > 1.0 and mean < -math.log(vocab) - 1, \
        f"reference log-probs too uniform: std {std:.3f}, mean {mean:.2f}, uniform {-math.log(vocab):.2f}"
    return std


def check(name, d, jobs, ref, vocab, *args):
    """rlpipe's log-probs of model directory d (model_score, or the decoding
    path with args) within TOL of ref; returns them."""
    std = assert_spread(ref, vocab)
    got = rl_logprobs(d, jobs, *(args or ("--score",)))
    e = max_error(got, ref)
    print(f"  {name} {' '.join(args) or '--score'}: max |err| {e:.3g} over {sum(map(len, ref))} tokens, "
          f"reference std {std:.2f}", flush=True)
    assert e <= TOL, f"{name}: max |logp - reference| {e:.3g} > {TOL}"
    return got


# ---- the real configs ---------------------------------------------------------------------

# Projections of gain 1 (std 1/sqrt(fan_in)) keep these deep models well
# conditioned: at gain 1.5, 24 to 30 layers amplify f32 rounding until
# transformers' own float32 forward is 7e-5 to 1e-4 from its float64 one
# (rlpipe's as much), too close to TOL; at gain 1 both stay near 3e-5.
REAL_GAIN = 1.0

def real_model_case(name, cfg, layers, seed):
    """Log-probs of cfg with `layers` layers against its reference (transformers,
    or llama_ref for Qwen3), by model_score and by decoding with the KV cache;
    the sharded copy gives the very same log-probs."""
    c = cut(cfg, layers)
    d, ds = os.path.join(WORK, name), os.path.join(WORK, name + "-sharded")
    jobs = make_jobs(c["vocab_size"], seed)
    if c["model_type"] in HF_CLASSES:
        ref = hf_logprobs(hf_model(d, c, seed, sharded=ds, gain=REAL_GAIN), jobs)
    else:
        m = ref_model(d, c, seed, sharded=ds, gain=REAL_GAIN)
        ref = [m.logprobs(p, ids, t) for p, ids, t in jobs]
        del m
    try:
        got = check(name, d, jobs, ref, c["vocab_size"])
        check(name, d, jobs, ref, c["vocab_size"], "--slots", "3")
        shards = sorted(f for f in os.listdir(ds) if f.endswith(".safetensors"))
        assert len(shards) >= 3 and os.path.exists(os.path.join(ds, "model.safetensors.index.json")), shards
        rc, sharded, err = probe(ds, jobs, "--score")
        assert rc == 0, f"the sharded copy ({len(shards)} shards) is refused: {err.strip()}"
        assert sharded == got, f"the sharded copy ({len(shards)} shards) gives other log-probs"
        print(f"  {name}: the copy in {len(shards)} shards gives the same log-probs", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(ds, ignore_errors=True)


@case
def qwen2_5_0_5b_instruct_matches_transformers_also_sharded():
    real_model_case("Qwen2.5-0.5B-Instruct", QWEN25_05B_INSTRUCT, 24, 1)


@case
def llama_3_2_1b_instruct_matches_transformers_also_sharded():
    real_model_case("Llama-3.2-1B-Instruct", LLAMA32_1B_INSTRUCT, 4, 2)


@case
def smollm2_135m_instruct_matches_transformers_also_sharded():
    real_model_case("SmolLM2-135M-Instruct", SMOLLM2_135M_INSTRUCT, 30, 3)


@case
def mistral_7b_v0_3_matches_transformers_also_sharded():
    real_model_case("Mistral-7B-v0.3", MISTRAL_7B_V03, 1, 4)


@case
def qwen3_0_6b_matches_the_float64_reference_also_sharded():
    real_model_case("Qwen3-0.6B", QWEN3_06B, 8, 5)


# ---- features on small configs ----------------------------------------------------------

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1,
         "eos_token_id": 2}
SMALL_JOBS = make_jobs(300, 7, n=8, max_prompt=12, max_ids=10)


def small(name, model_type="llama", seed=11, **kw):
    """A small model of SMALL's sizes and kw's keys saved to WORK/name; returns
    (dir, config, transformers' model in float64, its log-probs of SMALL_JOBS)."""
    c = dict(SMALL, model_type=model_type, architectures=[HF_CLASSES[model_type].__name__], **kw)
    d = os.path.join(WORK, name)
    model = hf_model(d, c, seed)
    return d, c, model, hf_logprobs(model, SMALL_JOBS)


def rope_case(name, rope, matters=True, model_type="llama"):
    d, c, _, ref = small(name, model_type, rope_scaling=rope)
    for args in ((), ("--slots", "3")):
        check(name, d, SMALL_JOBS, ref, 300, *args)
    # without the scaling transformers gives other log-probs (so the case tests
    # it), except for dynamic, which equals the default within the window
    base = hf_logprobs(hf_model(None, dict(c, rope_scaling=None), 11), SMALL_JOBS)
    diff = max_error(base, ref)
    print(f"  {name}: the default RoPE differs from it by {diff:.3g}", flush=True)
    assert diff > 1e-2 if matters else diff == 0, f"rope_scaling {rope} changes log-probs by {diff:.3g}"


@case
def rope_linear_matches_transformers():
    rope_case("linear", {"rope_type": "linear", "factor": 4.0})


@case
def rope_dynamic_matches_transformers_and_is_the_default_within_the_window():
    rope_case("dynamic", {"rope_type": "dynamic", "factor": 2.0}, matters=False)


def within(jobs, ref, n):
    """The jobs of at most n tokens (prompt and completion but its last) and their reference."""
    keep = [i for i, (p, ids, _) in enumerate(jobs) if len(p) + len(ids) - 1 <= n]
    assert 2 <= len(keep) < len(jobs), f"{len(keep)} of {len(jobs)} jobs within {n} tokens"
    return [jobs[i] for i in keep], [ref[i] for i in keep]


def refused(d, job, phrase):
    """model_probe refuses job (scoring and decoding) with a message holding phrase."""
    for args in (("--score",), ("--slots", "2")):
        rc, _, err = probe(d, [job], *args)
        assert rc == 1 and phrase in err, f"{args}: exited {rc}: {err.strip()}"


@case
def rope_dynamic_refuses_sequences_past_its_original_length():
    d, c, _, ref = small("dynamic-orig", rope_scaling={"rope_type": "dynamic", "factor": 2.0,
                                                        "original_max_position_embeddings": 16})
    check("dynamic within original_max_position_embeddings 16", d, *within(SMALL_JOBS, ref, 16), 300)
    refused(d, ([5] * 12, [6] * 6, 1.0), "17 tokens exceed rope_scaling dynamic original_max_position_embeddings 16")


@case
def rope_yarn_matches_transformers():
    rope_case("yarn", {"rope_type": "yarn", "factor": 4.0})


@case
def rope_yarn_with_explicit_parameters_matches_transformers():
    rope_case("yarn-explicit", {"type": "yarn", "factor": 3.0, "attention_factor": 0.8, "beta_fast": 8.0,
                                "beta_slow": 2.0})


@case
def rope_yarn_on_qwen2_matches_transformers():
    # as Qwen2.5's model cards say to enable it, original_max_position_embeddings = max_position_embeddings
    rope_case("qwen2-yarn", {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
              model_type="qwen2")


@case
def rope_llama3_matches_transformers():
    # original 32 positions: every band of wavelengths (kept, blended, divided) occurs at head_dim 16
    rope_case("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32})


@case
def transformers_5_rope_parameters_give_the_same_model():
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32}
    d, c, _, ref = small("rope-parameters", rope_scaling=rope)
    c5 = {k: v for k, v in c.items() if k not in ("rope_scaling", "rope_theta")}
    write_config(d, dict(c5, rope_parameters=dict(rope, rope_theta=c["rope_theta"])))
    check("rope_parameters", d, SMALL_JOBS, ref, 300)


@case
def head_dim_other_than_hidden_over_heads_matches_transformers():
    d, _, _, ref = small("head-dim", head_dim=32)
    for args in ((), ("--slots", "3")):
        check("head_dim 32 (hidden 64, 4 heads)", d, SMALL_JOBS, ref, 300, *args)


@case
def attention_and_mlp_biases_match_transformers():
    d, _, _, ref = small("biases", attention_bias=True, mlp_bias=True)
    for args in ((), ("--slots", "3")):
        check("attention_bias and mlp_bias", d, SMALL_JOBS, ref, 300, *args)


def window_case(name, model_type, **kw):
    """Sequences within the 16-token window match transformers; a longer one,
    which transformers' window does change, is refused naming sliding_window."""
    d, c, model, ref = small(name, model_type, **kw)
    check(name, d, *within(SMALL_JOBS, ref, 16), 300)
    long_job = ([7, 8, 9] * 7, [10, 11, 12, 13], 1.0)                       # 24 tokens
    windowed = hf_logprobs(model, [long_job])
    whole = hf_logprobs(hf_model(None, dict(c, sliding_window=None, use_sliding_window=False), 11), [long_job])
    diff = max_error(whole, windowed)
    assert diff > 1e-3, f"the window changes a 24-token sequence by {diff:.3g} only"
    # scoring refuses the 24 tokens, decoding its 21-token prompt already
    refused(d, long_job, "tokens exceed sliding_window 16 (attention over a sliding window is not supported)")
    print(f"  {name}: a 24-token sequence is refused (transformers' window changes it by {diff:.3g})", flush=True)


@case
def mistral_sliding_window_matches_within_it_and_refuses_longer():
    window_case("mistral-window", "mistral", sliding_window=16)


@case
def qwen2_use_sliding_window_matches_within_it_and_refuses_longer():
    window_case("qwen2-window", "qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=1)


@case
def qwen3_small_matches_the_float64_reference():
    c = dict(SMALL, model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=24, attention_bias=True)
    d = os.path.join(WORK, "qwen3-small")
    m = ref_model(d, c, 12)
    ref = [m.logprobs(p, ids, t) for p, ids, t in SMALL_JOBS]
    for args in ((), ("--slots", "3")):
        check("qwen3 (head_dim 24, attention_bias)", d, SMALL_JOBS, ref, 300, *args)


# ---- gradients ------------------------------------------------------------------------------

def sft_records(seed, n=6):
    rnd = random.Random(seed)
    return [{"prompt_ids": [rnd.randrange(300) for _ in range(rnd.randint(1, 6))],
             "ids": [rnd.randrange(300) for _ in range(rnd.randint(1, 10))]} for _ in range(n)]


def grad_probe(d, recs):
    """grad_probe's loss and gradients of one `--loss sft` step: L = −Σ log π / sequences."""
    src = rltest.tmpfile("grad.rlr", rltest.write_stream(recs))
    out = os.path.join(WORK, "grads.safetensors")
    p = subprocess.run([os.path.join(TOOLS, "grad_probe"), "--model", d, "--loss", "sft", src, out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, f"grad_probe exited {p.returncode}: {p.stderr.decode()[:500]}"
    return float(p.stdout), load_file(out)


def sft_loss(logprobs_of, recs):
    total = 0
    for r in recs:
        total = total - logprobs_of(r["prompt_ids"], r["ids"]).sum()
    return total / len(recs)


def compare_grads(loss, g, loss_ref, g_ref, new):
    assert abs(loss - loss_ref) <= 1e-5 * max(1.0, abs(loss_ref)), f"loss {loss} vs reference {loss_ref}"
    assert set(g) == set(g_ref), f"tensors differ: {sorted(set(g) ^ set(g_ref))[:6]}"
    assert any(k.endswith(new) for k in g), f"no {new} tensor"
    worst = 0.0
    for k, want in g_ref.items():
        denom = want.norm().item()
        assert denom > 0, f"{k}: the reference gradient is zero: the test does not exercise it"
        e = (g[k].double() - want).norm().item() / denom
        worst = max(worst, e)
        assert e <= GRAD_TOL, f"{k}: relative error {e:.2e} > {GRAD_TOL} (|g_ref| {denom:.3e})"
    print(f"  worst relative gradient error {worst:.2e} over {len(g)} tensors (with every *{new}), "
          f"loss {loss:.6g} vs {loss_ref:.6g}", flush=True)


@case
def mlp_bias_gradients_match_transformers_autograd():
    c = dict(SMALL, model_type="llama", architectures=["LlamaForCausalLM"], attention_bias=True, mlp_bias=True)
    d = os.path.join(WORK, "grad-mlp-bias")
    model = hf_model(d, c, 13).double()
    recs = sft_records(1)

    def logprobs_of(p, ids):
        logits = model(input_ids=torch.tensor([p + ids[:-1]])).logits[0, len(p) - 1:]
        return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]

    loss_ref = sft_loss(logprobs_of, recs)
    loss_ref.backward()
    g_ref = {k: p.grad for k, p in model.named_parameters()}
    compare_grads(*grad_probe(d, recs), float(loss_ref), g_ref, "mlp.down_proj.bias")


@case
def qwen3_qk_norm_gradients_match_the_reference_autograd():
    c = dict(SMALL, model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=24)
    d = os.path.join(WORK, "grad-qwen3")
    ref = ref_model(d, c, 14)
    for t in ref.w.values():
        t.requires_grad_(True)
    recs = sft_records(2)

    def logprobs_of(p, ids):
        h = ref.forward(torch.tensor([p + ids[:-1]]))[0, len(p) - 1:]
        return torch.log_softmax(ref.logits(h), dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]

    loss_ref = sft_loss(logprobs_of, recs)
    loss_ref.backward()
    compare_grads(*grad_probe(d, recs), float(loss_ref), {k: t.grad for k, t in ref.w.items()},
                  "self_attn.k_norm.weight")


# ---- configs written by rlpipe -----------------------------------------------------------

def transformers_messages(fn):
    """fn()'s result and the warnings transformers logged or raised meanwhile."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep(level=logging.WARNING)
    root = logging.getLogger("transformers")
    transformers.logging.set_verbosity_warning()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fn()
    finally:
        root.removeHandler(handler)
        transformers.logging.set_verbosity_error()
    return out, records + [str(w.message) for w in caught]


@case
def saved_configs_load_in_transformers_without_warning_as_the_same_model():
    """cfg_save (st_tool cfg IN OUT) of every feature above: transformers reads
    OUT without a warning, and the model it builds from OUT and the same
    weights gives the log-probs of the original (bit for bit in float64)."""
    variants = {
        "llama3": dict(model_type="llama", rope_scaling=dict(LLAMA32_1B_INSTRUCT["rope_scaling"],
                                                             original_max_position_embeddings=32),
                       head_dim=32, eos_token_id=[2, 5, 7], tie_word_embeddings=True),
        "yarn": dict(model_type="qwen2", rope_scaling={"type": "yarn", "factor": 4.0, "beta_fast": 16.0}),
        "linear-biases": dict(model_type="llama", rope_scaling={"rope_type": "linear", "factor": 2.0},
                              attention_bias=True, mlp_bias=True, pad_token_id=0),
        "dynamic": dict(model_type="llama", rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
        "mistral": dict(model_type="mistral", sliding_window=32),
        "qwen2-window": dict(model_type="qwen2", use_sliding_window=True, sliding_window=32),
    }
    for name, kw in variants.items():
        c = dict(SMALL, architectures=[HF_CLASSES[kw["model_type"]].__name__], **kw)
        d = os.path.join(WORK, "saved-" + name)
        model = hf_model(d, c, 15)
        jobs = SMALL_JOBS[:3]
        ref = hf_logprobs(model, jobs)
        out = os.path.join(WORK, "saved-" + name + ".json")
        p = subprocess.run([os.path.join(TOOLS, "st_tool"), "cfg", d, out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        assert p.returncode == 0, f"{name}: st_tool cfg exited {p.returncode}: {p.stderr.decode()}"
        shutil.copy(out, os.path.join(d, "config.json"))
        config, msgs = transformers_messages(lambda: transformers.AutoConfig.from_pretrained(d))
        assert not msgs, f"{name}: transformers warns on the saved config: {msgs}"
        config._attn_implementation = "eager"
        reloaded, msgs = transformers_messages(
            lambda: HF_CLASSES[kw["model_type"]].from_pretrained(d, config=config, torch_dtype=torch.float32))
        msgs = [m for m in msgs if "Sliding Window Attention is enabled but not implemented" not in m]
        assert not msgs, f"{name}: transformers warns loading the model: {msgs}"
        got = hf_logprobs(reloaded, jobs)
        assert got == ref, f"{name}: the saved config builds another model (max diff {max_error(got, ref):.3g})"
        check(name + " (saved config)", d, jobs, ref, 300)
        shutil.rmtree(d)
    print(f"  {len(variants)} saved configs: no warning, the same model", flush=True)


@case
def a_saved_qwen3_config_reads_back_as_the_same_model():
    """transformers 4.46 cannot read a Qwen3 config: the saved one must read back
    in llama_ref and in rlpipe as the model it was."""
    c = dict(SMALL, model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=24, attention_bias=True,
             use_sliding_window=True, sliding_window=32)
    d = os.path.join(WORK, "saved-qwen3")
    m = ref_model(d, c, 16)
    jobs = SMALL_JOBS[:3]
    ref = [m.logprobs(p, ids, t) for p, ids, t in jobs]
    out = os.path.join(WORK, "saved-qwen3.json")
    p = subprocess.run([os.path.join(TOOLS, "st_tool"), "cfg", d, out], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr.decode()
    saved = json.load(open(out))
    for k in ("model_type", "head_dim", "attention_bias", "use_sliding_window", "sliding_window", "num_key_value_heads",
              "tie_word_embeddings", "rms_norm_eps", "rope_theta"):
        assert saved[k] == c[k], f"saved {k} {saved[k]!r}, expected {c[k]!r}"
    assert saved["architectures"] == ["Qwen3ForCausalLM"], saved["architectures"]
    shutil.copy(out, os.path.join(d, "config.json"))
    assert llama_ref.read_config(d) == m.cfg, "llama_ref reads the saved config as another model"
    check("qwen3 (saved config)", d, jobs, ref, 300)


shutil.rmtree(WORK, ignore_errors=True)
rltest.finish()
