"""Model directories as Hugging Face writes and reads them (lib/checkpoint/hfweights.c,
man/rl-learn.1 --save-dtype and --max-shard-size).

The reference is transformers 4.46 itself: its save_pretrained writes the
sharded copies (model.safetensors.index.json and its shards) that our tools
must read as the single file, and its from_pretrained must load what rl-learn
writes, in F32, BF16 or as shards, without one warning and with the logits
our model computes (1e-4). Our side is driven through the tools and
$BUILD/tests/tools/model_probe (log-probabilities by the scoring path).
"""
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
import torch  # noqa: E402
from rltest import case  # noqa: E402

try:
    import transformers
except ImportError as e:   # scripts/deps.sh test installs it into .deps/venv
    print(f"SKIP test_hf_files: transformers is missing ({e}); run scripts/deps.sh test")
    sys.exit(0)

WORK = tempfile.mkdtemp(prefix="rlpipe-hf-files.", dir=os.environ.get("TMPDIR"))
PROBE = os.path.join(rltest.ROOT, os.environ.get("BUILD", "build"), "tests", "tools", "model_probe")
VOCAB = 96
JOBS = [(1.0, [3, 17, 5], [9, 40, 2, 77]), (0.7, [50], [1, 1, 60, 8, 33, 4]), (1.0, [12, 13, 14, 15, 16], [95])]


def path(*names):
    return os.path.join(WORK, *names)


def probe(model_dir, *extra):
    """Our log-probabilities of JOBS (scoring path): a list of lists, or the
    failed process."""
    lines = "".join(f"{t}\t{' '.join(map(str, p))}\t{' '.join(map(str, i))}\n" for t, p, i in JOBS)
    r = subprocess.run([PROBE, "--model", model_dir, "--score", *extra], input=lines.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        return r
    return [[float(x) for x in line.split()] for line in r.stdout.decode().splitlines()]


def hf_logps(model):
    """transformers' log-probabilities of JOBS, f32."""
    out = []
    with torch.no_grad():
        for t, p, ids in JOBS:
            seq = torch.tensor([p + ids[:-1]])
            lp = torch.log_softmax(model(seq).logits[0, len(p) - 1:].float() / t, dim=-1)
            out.append(lp.gather(1, torch.tensor(ids)[:, None])[:, 0].tolist())
    return out


def max_diff(a, b):
    assert [len(x) for x in a] == [len(x) for x in b], (a, b)
    return max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v))


def load_quietly(model_dir, **kw):
    """from_pretrained with every warning (Python's and transformers' logger)
    collected: (model, list of warning texts)."""
    texts = []

    class Catch(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                texts.append(record.getMessage())
    handler = Catch()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    transformers.logging.set_verbosity_warning()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kw)
        texts += [str(w.message) for w in caught]
    finally:
        logger.removeHandler(handler)
    return model.eval(), texts


SRC = path("src")
llama_ref.random_model(SRC, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=VOCAB, seed=11, gain=1.3,
                       logit_scale=3.0)
HF = transformers.AutoModelForCausalLM.from_pretrained(SRC, torch_dtype=torch.float32).eval()
HF_LOGPS = hf_logps(HF)


def shard_files(d):
    return sorted(f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".safetensors"))


@case
def shards_that_transformers_writes_score_exactly_as_its_single_file():
    single, sharded = path("single"), path("sharded")
    HF.save_pretrained(single, safe_serialization=True)
    HF.save_pretrained(sharded, safe_serialization=True, max_shard_size="40KB")
    shards = shard_files(sharded)
    assert len(shards) >= 3 and os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), shards
    assert not os.path.exists(os.path.join(sharded, "model.safetensors"))
    a, b = probe(single), probe(sharded)
    assert isinstance(a, list) and isinstance(b, list), (a, b)
    assert a == b, "the sharded copy scores differently from the single file"
    d = max_diff(a, HF_LOGPS)
    assert d <= 1e-4, f"log-probs differ from transformers by {d:.3g} (limit 1e-4)"


@case
def bf16_shards_that_transformers_writes_are_read_as_bf16_values():
    d16 = path("bf16-sharded")
    HF.to(torch.bfloat16).save_pretrained(d16, safe_serialization=True, max_shard_size="20KB")
    HF.to(torch.float32)
    ref = transformers.AutoModelForCausalLM.from_pretrained(d16, torch_dtype=torch.float32).eval()
    got = probe(d16)
    assert isinstance(got, list), got.stderr
    d = max_diff(got, hf_logps(ref))
    assert d <= 1e-4, f"log-probs differ from transformers (bf16 weights in f32) by {d:.3g}"


def broken_copy(name, edit):
    """A sharded copy whose index or shards edit(dir, index dict) changes."""
    d = path(name)
    HF.save_pretrained(d, safe_serialization=True, max_shard_size="40KB")
    ip = os.path.join(d, "model.safetensors.index.json")
    index = json.load(open(ip))
    edit(d, index)
    with open(ip, "w") as f:
        json.dump(index, f)
    r = probe(d)
    assert not isinstance(r, list) and r.returncode == 1, f"{name}: read anyway"
    return r.stderr.decode()


@case
def a_broken_index_is_refused_naming_the_file_the_tensor_and_the_problem():
    first = "model.embed_tokens.weight"

    def missing_shard(d, index):
        os.remove(os.path.join(d, index["weight_map"][first]))
    err = broken_copy("no-shard", missing_shard)
    assert "a shard" in err and "model.safetensors.index.json" in err and "No such file" in err, err

    def unlisted(d, index):
        del index["weight_map"]["model.norm.weight"]
    err = broken_copy("unlisted", unlisted)
    assert "tensor 'model.norm.weight' is in shard" in err and "not in the weight_map" in err, err

    moved_name = []

    def moved(d, index):   # a tensor of a shard that holds others, mapped to another shard
        m = index["weight_map"]
        name = next(k for k in sorted(m) if list(m.values()).count(m[k]) > 1)
        m[name] = next(f for f in sorted(set(m.values())) if f != m[name])
        moved_name.append(name)
    err = broken_copy("moved", moved)
    assert f"tensor '{moved_name[0]}' is in shard" in err and "but the weight_map says" in err, err

    def escaping(d, index):
        index["weight_map"][first] = "../" + index["weight_map"][first]
    err = broken_copy("escaping", escaping)
    assert f"weight_map[\"{first}\"] is not a file name in the directory" in err, err

    def no_map(d, index):
        index.pop("weight_map")
    err = broken_copy("no-map", no_map)
    assert "weight_map is missing or empty" in err, err


@case
def a_directory_without_weights_names_both_files_it_looked_for():
    d = path("empty")
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(json.load(open(os.path.join(SRC, "config.json"))), f)
    r = probe(d)
    err = r.stderr.decode()
    assert r.returncode == 1 and f"{d}/model.safetensors" in err and "model.safetensors.index.json" in err, err


def rollouts(n_groups=2, size=2, seed=4):
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        for k in range(size):
            n = rng.randint(2, 6)
            out.append({"id": len(out), "group": g, "prompt_ids": [rng.randrange(VOCAB) for _ in range(3)],
                        "ids": [rng.randrange(VOCAB) for _ in range(n)], "reward": float(k % 2),
                        "temperature": 1.0, "ver": [0] * n})
    return out


SRC_RECS = rltest.tmpfile("hf-files.rlr", rltest.write_stream(rollouts(4)))


def learn(out, *args):
    code, _, err = rltest.run("rl-learn", "--init", SRC, "--out", out, "--batch", "2", "--lr", "1e-2", *args,
                              SRC_RECS)
    assert code == 0, err
    with open(os.path.join(out, "latest")) as f:
        return os.path.join(out, f.read().strip())


@case
def rl_learn_checkpoints_load_in_transformers_without_a_warning_and_score_alike():
    for name, args, dtype in (("f32", (), torch.float32), ("bf16", ("--save-dtype", "bf16"), torch.bfloat16),
                              ("f16-shards", ("--save-dtype", "f16", "--max-shard-size", "30k"), torch.float16)):
        v = learn(path("ckpt-" + name), "--max-steps", "1", *args)
        model, texts = load_quietly(v)
        assert not texts, f"{name}: transformers warned: {texts}"
        with open(os.path.join(v, "config.json")) as f:
            cfg = json.load(f)
        for k in ("architectures", "model_type", "tie_word_embeddings", "rope_theta", "torch_dtype"):
            assert k in cfg, f"{name}: config.json has no {k}"
        shards = shard_files(v)
        if name == "f16-shards":
            assert len(shards) >= 3 and not os.path.exists(os.path.join(v, "model.safetensors")), shards
        else:
            assert shards == [], shards
        from safetensors import safe_open
        files = shards or ["model.safetensors"]
        nbytes = 0
        for f in files:
            with safe_open(os.path.join(v, f), framework="pt") as st:
                assert st.metadata() == {"format": "pt"}, f"{name}: {f} metadata {st.metadata()}"
                for k in st.keys():
                    t = st.get_tensor(k)
                    assert t.dtype == dtype, f"{name}: {k} is {t.dtype}, expected {dtype}"
                    nbytes += t.numel() * t.element_size()
        n_params = sum(p.numel() for p in HF.parameters())
        assert nbytes == n_params * (4 if dtype == torch.float32 else 2), f"{name}: {nbytes} bytes of weights"
        got = probe(v)
        assert isinstance(got, list), got.stderr
        d = max_diff(got, hf_logps(model))
        assert d <= 1e-4, f"{name}: our log-probs differ from transformers' on the checkpoint by {d:.3g}"


@case
def resuming_from_bf16_checkpoints_continues_from_the_f32_weights_bit_for_bit():
    straight = learn(path("straight"), "--max-steps", "2", "--save-dtype", "bf16")
    learn(path("split"), "--max-steps", "1", "--save-dtype", "bf16")
    code, _, err = rltest.run("rl-learn", "--resume", "--out", path("split"), "--batch", "2", "--lr", "1e-2",
                              "--max-steps", "2", "--save-dtype", "bf16", SRC_RECS)
    assert code == 0, err
    split = os.path.join(path("split"), open(os.path.join(path("split"), "latest")).read().strip())
    for f in ("model.safetensors", "optimizer.safetensors"):
        a, b = open(os.path.join(straight, f), "rb").read(), open(os.path.join(split, f), "rb").read()
        assert a == b, f"{f} of the resumed run differs from the uninterrupted run's"
    from safetensors.torch import load_file
    opt, w = load_file(os.path.join(split, "optimizer.safetensors")), load_file(os.path.join(split, "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    assert opt[name].dtype == torch.float32 and w[name].dtype == torch.bfloat16
    assert torch.equal(opt[name].to(torch.bfloat16), w[name]), "the bf16 weights are not the f32 ones rounded"
    assert not torch.equal(opt[name], w[name].float()), "the f32 weights kept are the rounded ones"


@case
def save_options_are_checked():
    for args, want in ((("--save-dtype", "int8"), "--save-dtype: expected f32, bf16 or f16"),
                       (("--max-shard-size", "0"), "--max-shard-size: must be at least 1 byte")):
        code, _, err = rltest.run("rl-learn", "--init", SRC, "--out", path("never"), *args, SRC_RECS)
        assert code == 2 and want in err and not os.path.exists(path("never")), (code, err)



@case
def a_model_larger_than_memory_is_refused_after_its_shapes_and_before_any_allocation():
    # Weights whose shapes match the config but need more memory than the
    # machine has: a sparse file (no disk used) with a valid header.
    import struct
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    C, F, NH, NKV, HS = 16384, 64, 128, 8, 128
    V = int(ram * 1.25 / (C * 4)) + 1
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": C, "intermediate_size": F,
           "num_hidden_layers": 1, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HS,
           "vocab_size": V, "max_position_embeddings": 64, "tie_word_embeddings": True, "rms_norm_eps": 1e-5}
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C],
              "model.layers.0.input_layernorm.weight": [C], "model.layers.0.post_attention_layernorm.weight": [C],
              "model.layers.0.self_attn.q_proj.weight": [NH * HS, C], "model.layers.0.self_attn.k_proj.weight": [NKV * HS, C],
              "model.layers.0.self_attn.v_proj.weight": [NKV * HS, C], "model.layers.0.self_attn.o_proj.weight": [C, NH * HS],
              "model.layers.0.mlp.gate_proj.weight": [F, C], "model.layers.0.mlp.up_proj.weight": [F, C],
              "model.layers.0.mlp.down_proj.weight": [C, F]}
    header, off = {}, 0
    for name, shape in shapes.items():
        n = 4 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    d = path("too-large")
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + off)
    r = probe(d)
    err = r.stderr.decode() if not isinstance(r, list) else ""
    assert not isinstance(r, list) and r.returncode == 1, "loaded anyway"
    assert "its weights need" in err and "more than this machine's" in err, err
    assert f"{off / 2 ** 30:.1f} GiB at f32" in err, (off, err)


rltest.finish()
