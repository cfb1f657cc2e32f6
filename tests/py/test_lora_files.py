"""LoRA adapters (lib/checkpoint/lora.c) against PEFT 0.13.2, which wrote
the layout rlpipe reads and reads what rlpipe writes.

A tiny Qwen2 model (random weights, transformers 4.46) is wrapped with PEFT
(LoraConfig r=4, lora_alpha=8, init_lora_weights=False so that B is not
zero) and save_pretrained writes its adapter; tests/tools/lora_tool (built by
`make aux`) drives the library:

  - lora_read takes PEFT's directory and reads the very values PEFT saved
    (F32, and BF16 and F16 copies widened exactly), with its r, alpha,
    rsLoRA, targets ("all-linear" among them) and lora_dropout;
  - a directory lora_write wrote loads with PeftModel.from_pretrained as the
    same tensors (bit for bit) and the same config, and the model computes
    the same logits as the model PEFT saved;
  - lora_merge's matrices against PEFT's merge_and_unload, within the f32
    rounding bound of the two ways of summing (stated at the case);
  - adapters PEFT writes with options rlpipe does not compute (DoRA, some
    layers only, a bias) are refused with exit 1, naming the file and key.
"""
import dataclasses
import json
import os
import subprocess
import sys
import warnings

import numpy as np

import rltest
from rltest import ROOT, case, finish

try:
    import torch
    import transformers
    import peft
    from safetensors.torch import load_file, save_file
except ImportError as e:  # scripts/deps.sh test installs them into .deps/venv
    print(f"SKIP test_lora_files: a Python reference is missing ({e}); run scripts/deps.sh test")
    sys.exit(0)

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
BUILD = os.environ.get("BUILD", "build")
LORA_TOOL = os.path.join(ROOT, BUILD, "tests", "tools", "lora_tool")
TMP = rltest.TMP.name
TARGETS = ["q_proj", "v_proj", "o_proj", "down_proj"]
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_tool(*args):
    """Runs lora_tool; returns (status, stdout, stderr)."""
    assert os.access(LORA_TOOL, os.X_OK), f"{LORA_TOOL} is not built (make BUILD={BUILD} aux)"
    p = subprocess.run([LORA_TOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def dump(adapter):
    """(header dict, {name: float32 array}) as lora_read reads adapter for the base."""
    rc, out, err = lora_tool("dump", adapter, BASE)
    assert rc == 0, f"lora_tool dump {adapter} exited {rc}: {err.strip()}"
    lines = out.split("\n")
    w = lines[0].split(" ")
    head = dict(zip(w[0::2], w[1::2]))
    tensors = {}
    for i in range(1, len(lines) - 1, 2):
        name, rows, cols = lines[i].split(" ")
        tensors[name] = np.array([float(v) for v in lines[i + 1].split(" ")], dtype=np.float32).reshape(
            int(rows), int(cols))
    return head, tensors


def tiny_base():
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=64, max_position_embeddings=64,
                                   tie_word_embeddings=False)
    return transformers.Qwen2ForCausalLM(cfg).eval()


BASE = os.path.join(TMP, "base")
tiny_base().save_pretrained(BASE, safe_serialization=True)


def base_model():
    return transformers.Qwen2ForCausalLM.from_pretrained(BASE).eval()


def peft_adapter(name, **kw):
    """A PEFT model on the tiny base with kw's LoraConfig, saved to TMP/name."""
    torch.manual_seed(1)
    args = dict(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False, task_type="CAUSAL_LM")
    args.update(kw)
    model = peft.get_peft_model(base_model(), peft.LoraConfig(**args))
    path = os.path.join(TMP, name)
    model.save_pretrained(path)
    return model.eval(), path


PEFT_MODEL, ADAPTER = peft_adapter("adapter", lora_dropout=0.1)
SAVED = load_file(os.path.join(ADAPTER, "adapter_model.safetensors"))


@case
def peft_s_adapter_reads_with_its_values_rank_alpha_targets_and_dropout():
    head, tensors = dump(ADAPTER)
    assert head == {"r": "4", "alpha": "8", "rslora": "0", "targets": "q_proj,v_proj,o_proj,down_proj",
                    "dropout": "0.10000000000000001"}, head
    assert set(tensors) == set(SAVED), sorted(set(tensors) ^ set(SAVED))
    for name, want in SAVED.items():
        assert tensors[name].shape == tuple(want.shape), (name, tensors[name].shape, want.shape)
        assert np.array_equal(tensors[name], want.numpy()), name
    b = SAVED["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"]
    assert b.shape == (32, 4) and float(b.abs().max()) > 0.01, "B is zero: the adapter would check nothing"


@case
def bf16_and_f16_adapters_are_widened_exactly():
    for dtype in (torch.bfloat16, torch.float16):
        path = os.path.join(TMP, f"adapter-{dtype}".replace("torch.", ""))
        os.makedirs(path)
        with open(os.path.join(ADAPTER, "adapter_config.json")) as f, \
                open(os.path.join(path, "adapter_config.json"), "w") as g:
            g.write(f.read())
        low = {k: v.to(dtype) for k, v in SAVED.items()}
        save_file(low, os.path.join(path, "adapter_model.safetensors"), metadata={"format": "pt"})
        _, tensors = dump(path)
        for name, v in low.items():
            assert np.array_equal(tensors[name], v.float().numpy()), (dtype, name)


@case
def rslora_and_all_linear_adapters_read_with_every_module():
    _, path = peft_adapter("all-linear", r=2, lora_alpha=3, target_modules="all-linear", use_rslora=True)
    head, tensors = dump(path)
    assert head["r"] == "2" and head["alpha"] == "3" and head["rslora"] == "1", head
    assert head["targets"] == ",".join(ALL) and head["dropout"] == "0", head
    saved = load_file(os.path.join(path, "adapter_model.safetensors"))
    assert len(saved) == 2 * 7 * 2 and all(np.array_equal(tensors[k], v.numpy()) for k, v in saved.items())


@case
def an_adapter_lora_write_wrote_loads_in_peft_as_the_same_tensors_and_model():
    out = os.path.join(TMP, "written")
    os.makedirs(out)
    rc, _, err = lora_tool("copy", ADAPTER, BASE, out)
    assert rc == 0, err
    loaded = peft.PeftModel.from_pretrained(base_model(), out).eval()
    cfg = loaded.peft_config["default"]
    assert cfg.r == 4 and cfg.lora_alpha == 8 and not cfg.use_rslora and cfg.peft_type == peft.PeftType.LORA
    assert set(cfg.target_modules) == set(TARGETS) and cfg.bias == "none", cfg
    state = peft.get_peft_model_state_dict(loaded)
    assert set(state) == set(SAVED), sorted(set(state) ^ set(SAVED))
    for name, want in SAVED.items():
        assert torch.equal(state[name], want), name
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got, want = loaded(ids).logits, PEFT_MODEL(ids).logits
        base = base_model()(ids).logits
    assert torch.equal(got, want), float((got - want).abs().max())
    assert float((want - base).abs().max()) > 1e-3, "the adapter does not change the model"
    written = json.load(open(os.path.join(out, "adapter_config.json")))
    fields = {f.name for f in dataclasses.fields(peft.LoraConfig)}
    assert set(written) <= fields, sorted(set(written) - fields)


@case
def an_rslora_adapter_written_loads_in_peft_with_its_scale():
    model, path = peft_adapter("rslora", r=4, lora_alpha=6, target_modules=["k_proj", "up_proj"], use_rslora=True)
    out = os.path.join(TMP, "rslora-written")
    os.makedirs(out)
    rc, _, err = lora_tool("copy", path, BASE, out)
    assert rc == 0, err
    loaded = peft.PeftModel.from_pretrained(base_model(), out).eval()
    layer = loaded.base_model.model.model.layers[0].mlp.up_proj
    assert layer.scaling["default"] == 6 / 2, layer.scaling
    ids = torch.arange(12).reshape(1, 12)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


@case
def merged_matrices_match_peft_s_merge_and_unload_within_the_f32_bound():
    # Both compute W + fl(scale · fl(B A)) in f32 and differ only in how the r
    # products of each element of B A are summed: each sum is within r·u·Σ|b a|
    # of the exact one (u = 2^-24), so the two results within
    # 2·u·((r + 2)·scale·Σ_k |B[i,k] A[k,j]| + |W[i,j]|) of each other (1.01
    # for second-order terms).
    out = os.path.join(TMP, "merged.safetensors")
    rc, _, err = lora_tool("merge", ADAPTER, BASE, out)
    assert rc == 0, err
    ours = load_file(out)
    merged = peft_adapter("again", lora_dropout=0.1)[0].merge_and_unload().state_dict()
    base = load_file(os.path.join(BASE, "model.safetensors"))
    assert len(ours) == 2 * len(TARGETS), sorted(ours)
    worst = 0.0
    u, r, scale = 2.0 ** -24, 4, 8 / 4
    for name, got in ours.items():
        stem = name[:-len(".weight")]
        a = SAVED[f"base_model.model.{stem}.lora_A.weight"].double().numpy()
        b = SAVED[f"base_model.model.{stem}.lora_B.weight"].double().numpy()
        w = base[name].double().numpy()
        mag = np.abs(b) @ np.abs(a)
        tol = 2.02 * u * ((r + 2) * scale * mag + np.abs(w))
        diff = np.abs(got.double().numpy() - merged[name].double().numpy())
        assert (diff <= tol).all(), (name, float(diff.max()))
        exact = w + scale * (b @ a)
        assert np.abs(got.double().numpy() - exact).max() <= (tol / 2).max(), name
        assert np.abs(exact - w).max() > 1e-2, f"{name}: the merge changes nothing"
        worst = max(worst, float((diff / tol).max()))
    print(f"# merge against PEFT: worst difference {worst:.3f} of the bound")


@case
def peft_adapters_with_options_rlpipe_does_not_compute_are_refused_naming_the_key():
    cases = {"use_dora": dict(use_dora=True), "layers_to_transform": dict(layers_to_transform=[0]),
             "bias \"lora_only\"": dict(bias="lora_only"), "rank_pattern": dict(rank_pattern={"q_proj": 2}),
             "modules_to_save": dict(modules_to_save=["lm_head"])}
    for i, (key, kw) in enumerate(cases.items()):
        _, path = peft_adapter(f"refused-{i}", **kw)
        rc, _, err = lora_tool("dump", path, BASE)
        assert rc == 1 and f"{path}/adapter_config.json" in err and key in err, (key, rc, err)


finish()
