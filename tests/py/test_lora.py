"""rl-learn --lora-rank R trains LoRA adapters as PEFT defines them
(man/rl-learn.1, lib/checkpoint/lora.h), checked against peft 0.13.2 itself
on transformers' model of the same tiny random weights, in float64:

    h = W x + scale·B (A x),  scale = alpha / R (--lora-rslora: alpha / sqrt(R)),
    A (R, in) drawn from U(−1/sqrt(in), 1/sqrt(in)) (PEFT's Kaiming-uniform), B (out, R) zero,

A and B alone trained by AdamW (decayed: they are matrices), every tensor
of the base frozen. Each version CKPT/vNNNNNN holds the adapter as PEFT
saves it (adapter_config.json, adapter_model.safetensors in F32), v000000
the initial one; with --save merged also the model W + scale·B A.

The reference is loss_ref.py's loss of doc/design.md §4 and
torch.optim.AdamW on peft's model (transformers computes RoPE's angles in
float32: its float64 hidden states lie ~6e-7 from llama_ref.py's, far below
every tolerance here). Tolerances, and why:
- the adapters' change from v000000 after steps 1 and 2 (at step 1 only B
  and A's decay move: A's gradient is zero while B is; step 2 tests A's):
  relative error per tensor ≤ STEP_TOL = 2e-4. test_learn.py holds the
  gradients to 1e-4 relative, and its weights to 1e-6 of weights of ~0.17
  per element moved by ~lr = 1e-3 a step: ~1.7e-4 of the change (measured
  here: 6e-5 at most with the build's kernels, 1.4e-4 on an A at step 2 in
  the sanitizer build, whose kernels sum in other orders). An AdamW
  step does not depend on the gradient's scale, so the gradient's relative
  error carries into the step about one for one (more for the few elements
  whose gradient is near AdamW's eps). The floor: at step 1 A moves by its
  decay alone, lr·wd = 1e-3 of A, and its f32 rounding (2^-24 of A) is
  ~3e-5 of that change.
- with them each step's loss and gradient norm, which carry the scale s
  that an AdamW step hides: the loss within LOSS_TOL = 1e-5 of max(1, |loss|)
  (test_learn.py's: pg's loss is a small sum of terms of both signs), the
  norm within GRAD_TOL = 1e-4 relative (test_learn.py's for gradients);
  AdamW's moments in the last version's optimizer.safetensors, sums of the
  gradients (GRAD_TOL) and of their squares (2·GRAD_TOL), per tensor.
- log-probabilities: LOGP_TOL = 1e-4 nats; an f32 forward of log-probs of
  tens of nats is ~1e-5 from float64.
- merged weights, per element: the f32 sums of B A (R terms), its scaling
  and the addition to W, 2^-24·(|W + s·B A| + (R + 2)·s·(|B| |A|)).
"""
import json
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
import torch  # noqa: E402
from ckpt_check import same_files, st_header, vdir  # noqa: E402
from loss_ref import adamw_run, records, ref_logprobs, ref_loss, tiny_model, write_records  # noqa: E402
from rltest import case  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

warnings.filterwarnings("ignore")   # peft's notes on the tiny models are not findings
try:
    import peft
    import peft_adapter
    import transformers
except ImportError as e:  # scripts/deps.sh test installs them into .deps/venv
    print(f"SKIP test_lora: a Python reference is missing ({e}); run scripts/deps.sh test")
    sys.exit(0)

transformers.logging.set_verbosity_error()

WORK = rltest.TMP.name   # removed at exit
STEP_TOL = 2e-4
GRAD_TOL = 1e-4
LOGP_TOL = 1e-4
LOSS_TOL = 1e-5
U32 = 2.0 ** -24   # f32's unit roundoff
ADAPTER = "adapter_model.safetensors"
# AdamW's hyper-parameters of every run (clip and warm-up off unless a case says)
LR, BETAS, ADAM_EPS, WD = 1e-2, (0.9, 0.99), 1e-8, 0.1
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def path(name):
    return os.path.join(WORK, name)


def model(name, **kw):
    return tiny_model(path(name), **kw)


def learn(*args):
    """rl-learn -q ARGS, which must exit 0; its standard error."""
    return rltest.run("rl-learn", "-q", *args, check=True)[2]


def learn_lora(name, base, batches, *args, loss="pg", clip=0.0):
    """Steps of rl-learn with the optimizer above on batches of 8 records
    (one step each); its checkpoint directory."""
    src = write_records(name + ".rlr", [r for b in batches for r in b])
    out = path(name + ".ckpt")
    learn("--init", base, "--out", out, "--batch", "8", "--loss", loss, "--lr", repr(LR), "--beta1", repr(BETAS[0]),
          "--beta2", repr(BETAS[1]), "--adam-eps", repr(ADAM_EPS), "--weight-decay", repr(WD), "--grad-clip",
          repr(clip), "--keep", "0", "--metrics", out + ".jsonl", *args, src)
    return out


def metrics(ckpt):
    with open(ckpt + ".jsonl") as f:
        return [json.loads(x) for x in f]


class Peft:
    """peft's LoRA model on transformers' model of a model directory, at
    dtype, as loss_ref's model: forward(ids (1, T)) gives the hidden states
    after the final norm (1, T, C), logits(h) the output layer's. Built from
    a LoraConfig (A as peft draws it, B zero: load() sets them) or from an
    adapter directory (PeftModel.from_pretrained). base: tensors (Hugging
    Face's names) that replace the directory's, e.g. its bf16-rounded ones."""

    def __init__(self, model_dir, config=None, adapter=None, dtype=torch.float64, base=None):
        m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype,
                                                              attn_implementation="eager")
        with torch.no_grad():
            for name, t in (base or {}).items():
                m.get_parameter(name).copy_(t)
        self.peft = peft.PeftModel.from_pretrained(m, adapter, is_trainable=True) if adapter else \
            peft.get_peft_model(m, config)
        self.inner = self.peft.base_model.model   # the CausalLM, its targeted Linear layers replaced by LoRA ones

    def forward(self, ids):
        return self.inner.model(input_ids=ids).last_hidden_state

    def logits(self, h):
        return self.inner.lm_head(h)

    def adapter(self):
        """{name in adapter_model.safetensors: peft's parameter}"""
        return {n.replace(".default", ""): p for n, p in self.peft.named_parameters() if ".lora_" in n}

    def load(self, tensors):
        params = self.adapter()
        assert set(params) == set(tensors), f"tensors differ from peft's: {sorted(set(params) ^ set(tensors))[:4]}"
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(tensors[k])

    def logprobs(self, recs):
        with torch.no_grad():
            return [ref_logprobs(self, r) for r in recs]


def lora_config(rank, alpha, targets, rslora):
    return peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, use_rslora=rslora)


def lora_args(rank, alpha, targets, rslora):
    """rl-learn's options for that config; alpha None: the default, R."""
    args = ["--lora-rank", str(rank), "--lora-targets", targets if isinstance(targets, str) else ",".join(targets)]
    args += ["--lora-alpha", repr(alpha)] if alpha is not None else []
    return args + (["--lora-rslora"] if rslora else [])


def adapter_file(version_dir):
    return {k: t.to(torch.float64) for k, t in load_file(os.path.join(version_dir, ADAPTER)).items()}


def check_initial_adapter(ckpt, rank, alpha, targets, rslora):
    """v000000: adapter_config.json as PEFT reads it, B zero and A within
    Kaiming-uniform's bound 1/sqrt(in) with a uniform's spread. Returns its tensors."""
    d = vdir(ckpt, 0)
    with open(os.path.join(d, "adapter_config.json")) as f:
        c = json.load(f)
    want = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "use_rslora": rslora, "bias": "none"}
    assert {k: c.get(k) for k in want} == want, f"{d}/adapter_config.json: {c}"
    assert sorted(c["target_modules"]) == sorted(targets), f"target_modules {c['target_modules']}, expected {targets}"
    a0 = adapter_file(d)
    spread = []
    for k, t in a0.items():
        if ".lora_B." in k:
            assert not t.any(), f"{k}: B of the initial adapter is not zero"
            continue
        bound = 1 / math.sqrt(t.shape[1])
        assert t.shape[0] == rank and t.abs().max() <= bound, f"{k}: shape {tuple(t.shape)}, max |A| {t.abs().max()}"
        spread.append(float(t.std()) / (bound / math.sqrt(3)))   # U(-b, b) has std b / sqrt(3)
    assert all(0.8 < x < 1.2 for x in spread), f"std of A / that of U(-b, b): {spread}"
    return a0


def check_steps(ckpt, ref, batches, loss_kw, clip=0.0, epochs=1):
    """The adapters' change from v000000 after each of rl-learn's steps
    against torch.optim.AdamW's on ref (loaded with v000000): relative error
    per tensor ≤ STEP_TOL, every tensor of the reference moved by its last
    step. An AdamW step hardly depends on the gradient's scale (the first
    is lr·sign(g)), so each step's loss (LOSS_TOL) and gradient norm
    (GRAD_TOL, relative) are compared too: the norm scales with s, and the
    second step's loss moves with s·B A. Returns the worst relative errors
    of the changes, the losses, the gradient norms and the moments."""
    a0 = adapter_file(vdir(ckpt, 0))
    ref.load(a0)
    trace = []
    moments = {}
    want = adamw_run(ref, ref.adapter(), batches, LR, BETAS, ADAM_EPS, WD, clip, epochs=epochs, loss_kw=loss_kw,
                     trace=trace, moments=moments)
    worst = {"change": 0.0, "loss": 0.0, "grad_norm": 0.0}
    for s, (m, (loss, norm)) in enumerate(zip(metrics(ckpt), trace), 1):
        worst["loss"] = max(worst["loss"], abs(m["loss"] - loss) / max(1.0, abs(loss)))
        worst["grad_norm"] = max(worst["grad_norm"], abs(m["grad_norm"] - norm) / norm)
        assert abs(m["loss"] - loss) <= LOSS_TOL * max(1.0, abs(loss)), f"step {s}: loss {m['loss']}, peft's {loss}"
        assert abs(m["grad_norm"] - norm) <= GRAD_TOL * norm, f"step {s}: grad_norm {m['grad_norm']}, peft's {norm}"
    for s, w in enumerate(want, 1):
        got = adapter_file(vdir(ckpt, s))
        assert set(got) == set(w), f"step {s}: tensors differ from peft's: {sorted(set(got) ^ set(w))[:4]}"
        for k in w:
            d_ref, d_got = w[k] - a0[k], got[k] - a0[k]
            assert d_ref.norm() > 0, f"step {s}: {k} does not move in the reference: the test does not exercise it"
            e = float((d_got - d_ref).norm() / d_ref.norm())
            worst["change"] = max(worst["change"], e)
            assert e <= STEP_TOL, f"step {s}: {k}: relative error of the change {e:.2e} > {STEP_TOL}"
    # AdamW's moments in the last version: a sum of (squared) gradients each, at GRAD_TOL (2·GRAD_TOL squared)
    got = load_file(os.path.join(vdir(ckpt, len(want)), "optimizer.safetensors"))
    assert set(got) == set(moments), f"optimizer.safetensors: {sorted(set(got) ^ set(moments))[:4]}"
    for k, m in moments.items():
        e = float((got[k].to(torch.float64) - m).norm() / m.norm())
        worst["moments"] = max(worst.get("moments", 0.0), e)
        assert e <= (2 if k.endswith("_sq") else 1) * GRAD_TOL, f"{k}: relative error {e:.2e}"
    return worst


def train_and_check(name, base, batches, rank, alpha, targets, rslora, loss="pg", norm="seqs", clip=0.0):
    """learn_lora with that adapter, its v000000 and its steps checked; returns (ckpt, worst)."""
    out = learn_lora(name, base, batches, *lora_args(rank, alpha, targets, rslora), "--norm", norm, loss=loss,
                     clip=clip)
    names = ALL_LINEAR if targets == "all-linear" else targets
    check_initial_adapter(out, rank, rank if alpha is None else alpha, names, rslora)
    check_state_files(out, 2)
    ref = Peft(base, lora_config(rank, rank if alpha is None else alpha, names, rslora))
    return out, check_steps(out, ref, batches, {"loss": loss, "norm": norm}, clip)


def check_state_files(ckpt, v):
    """Version v holds state.json and AdamW's moments of each adapter tensor,
    NAME.exp_avg and NAME.exp_avg_sq, F32 of its shape."""
    d = vdir(ckpt, v)
    with open(os.path.join(d, "state.json")) as f:
        assert json.load(f)["version"] == v, f"{d}/state.json"
    shapes = {k: (t["dtype"], t["shape"]) for k, t in st_header(os.path.join(d, ADAPTER)).items()}
    assert all(t == "F32" for t, _ in shapes.values()), f"{d}/{ADAPTER}: {shapes}"
    want = {k + m: s for k, s in shapes.items() for m in (".exp_avg", ".exp_avg_sq")}
    got = {k: (t["dtype"], t["shape"]) for k, t in st_header(os.path.join(d, "optimizer.safetensors")).items()}
    assert got == want, f"{d}/optimizer.safetensors: {sorted(set(got) ^ set(want))[:4]}"


def rl_batches(seed, n=2):
    return [records(n_groups=2, group_size=4, seed=seed + s, equal_group=False) for s in range(n)]


def sft_batches(seed, n=2):
    """rl_batches' records as examples: prompt, completion and mask alone."""
    return [[{k: r[k] for k in ("prompt_ids", "ids", "mask")} for r in b] for b in rl_batches(seed, n)]


# ---- 1. AdamW steps against peft in float64 ------------------------------------------------

CONFIGS = [(4, 8.0, ["q_proj", "v_proj"]), (2, None, "all-linear")]   # (R, alpha (None: R), targets)


def worse(a, b):
    return {k: max(a.get(k, 0.0), v) for k, v in b.items()}


def fmt(worst):
    return ", ".join(f"{k} {v:.2e}" for k, v in worst.items())


@case
def pg_steps_equal_peft_float64_for_two_target_sets_with_and_without_rslora():
    d = model("pgbase", seed=21)
    worst = {}
    for rank, alpha, targets in CONFIGS:
        for rslora in (False, True):
            worst = worse(worst, train_and_check(f"pg-{rank}-{rslora:d}", d, rl_batches(30), rank, alpha, targets,
                                                 rslora)[1])
    print(f"  worst relative errors: {fmt(worst)}")


@case
def sft_steps_equal_peft_float64_on_qwen2_with_biases_and_tied_embeddings():
    d = model("sftbase", model_type="qwen2", tie=True, seed=22, heads=6, kv_heads=2)
    worst = {}
    for rank, alpha, targets in CONFIGS:
        for rslora in (False, True):
            worst = worse(worst, train_and_check(f"sft-{rank}-{rslora:d}", d, sft_batches(40), rank, alpha, targets,
                                                 rslora, loss="sft", norm="tokens")[1])
    print(f"  worst relative errors: {fmt(worst)}")


@case
def gradient_clipping_takes_the_norm_of_the_adapters_gradient():
    d = model("clipbase", seed=23)
    out, worst = train_and_check("clip", d, rl_batches(50), 4, 16.0, ["o_proj", "gate_proj", "down_proj"], False,
                                 clip=0.05)
    norms = [m["grad_norm"] for m in metrics(out)]
    assert min(norms) > 0.05, f"grad_norm {norms}: the clip at 0.05 is not in force"
    print(f"  grad_norm {norms}; worst relative errors: {fmt(worst)}")



@case
def ppo_epochs_take_their_ratios_against_the_adapters_at_the_batch_start():
    # 2 batches of 2 epochs: the second epoch's π_old is the adapted model of
    # the batch's start, which the first epoch has moved from (ε 0.01: clipped)
    d = model("ppobase", seed=39)
    batches = rl_batches(180)
    args = (*lora_args(4, 8.0, ["q_proj", "o_proj", "up_proj"], False), "--epochs", "2", "--eps", "0.01")
    out = learn_lora("ppo", d, batches, *args, loss="ppo")
    ref = Peft(d, lora_config(4, 8.0, ["q_proj", "o_proj", "up_proj"], False))
    worst = check_steps(out, ref, batches, {"loss": "ppo", "eps": 0.01}, epochs=2)
    clipped = [m["clipped"] for m in metrics(out)]
    assert clipped[0] == 0 and clipped[2] == 0 and all(0 < c < 1 for c in clipped[1::2]), \
        f"clipped per step {clipped}: none in first epochs, some in the second"
    print(f"  clipped per step {clipped}; worst relative errors: {fmt(worst)}")

@case
def seed_draws_the_initial_a_and_the_same_seed_the_same_bytes():
    d = model("seedbase", seed=24)
    src = write_records("seed.rlr", rl_batches(60, 1)[0])
    outs = {}
    for name, seed in (("s1", "1"), ("s1b", "1"), ("s2", "2")):
        outs[name] = path("seed-" + name)
        learn("--init", d, "--out", outs[name], "--lora-rank", "4", "--seed", seed, "--batch", "8", src)
    same_files(vdir(outs["s1"], 0), vdir(outs["s1b"], 0), names=(ADAPTER,))
    a, b = adapter_file(vdir(outs["s1"], 0)), adapter_file(vdir(outs["s2"], 0))
    assert all(not torch.equal(a[k], b[k]) for k in a if ".lora_A." in k), "--seed 1 and 2 drew the same A"



@case
def versions_hold_the_adapter_its_state_and_the_bases_tokenizer_and_no_model_without_save_merged():
    d = llama_ref.add_tiny_tokenizer(model("tokbase", seed=37, vocab=llama_ref.TINY_VOCAB))
    out = path("tok.ckpt")
    learn("--init", d, "--out", out, "--batch", "8", "--lora-rank", "2",
          write_records("tok.rlr", rl_batches(160, 1)[0]))
    files = ["adapter_config.json", ADAPTER, "optimizer.safetensors", "state.json", "tokenizer.json"]
    for v in (0, 1):
        assert sorted(os.listdir(vdir(out, v))) == sorted(files), f"v{v:06d}: {sorted(os.listdir(vdir(out, v)))}"
        same_files(d, vdir(out, v), names=("tokenizer.json",))
    check_state_files(out, 1)

# ---- 2. peft reads what rl-learn saves -----------------------------------------------------

def ratio_logprobs(model_dir, recs, *args):
    """logp_learner (float32 values) of rl-ratio --model model_dir ARGS on recs."""
    src = write_records("ratio.rlr", recs)
    out = rltest.run("rl-ratio", "-q", "--model", model_dir, *args, src, check=True)[1]
    got = rltest.read_stream(out)[0][1]
    assert len(got) == len(recs), f"rl-ratio wrote {len(got)} records of {len(recs)}"
    return [torch.tensor(r["logp_learner"], dtype=torch.float64) for r in got]


def worst_diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@case
def peft_loads_a_saved_adapter_with_the_logprobs_rl_ratio_gives_it_and_its_merged_version():
    # two steps at lr 1e-2 move the log-probs by far more than LOGP_TOL, so the
    # adapter's contribution is what is compared
    d = model("loadbase", seed=25)
    out = learn_lora("load", d, rl_batches(70), "--lora-rank", "4", "--lora-alpha", "8", "--save", "merged")
    recs = records(n_groups=2, group_size=4, seed=80)
    lp = ratio_logprobs(d, recs, "--adapter", vdir(out, 2))
    merged = ratio_logprobs(vdir(out, 2), recs)
    assert all(torch.equal(a, b) for a, b in zip(lp, merged)), \
        f"rl-ratio --adapter and the merged version differ by {worst_diff(lp, merged):.2e}: both merge in f32"
    moved = worst_diff(lp, ratio_logprobs(d, recs))
    assert moved > 100 * LOGP_TOL, f"the adapter moves the log-probs by {moved:.2e} only"
    errs = {}
    for dtype in (torch.float32, torch.float64):
        ref = Peft(d, adapter=vdir(out, 2), dtype=dtype)
        errs[str(dtype)] = e = worst_diff(lp, ref.logprobs(recs))
        assert e <= LOGP_TOL, f"peft at {dtype}: log-probs {e:.2e} from rl-ratio's (tolerance {LOGP_TOL})"
    print(f"  the adapter moves the log-probs by up to {moved:.3g}; peft vs rl-ratio --adapter: {errs}")


# ---- 3. --save merged ----------------------------------------------------------------------

@case
def save_merged_writes_w_plus_scale_b_a_as_peft_merges_it_and_the_base_elsewhere():
    d = model("mergebase", model_type="qwen2", tie=True, seed=26, heads=6, kv_heads=2)   # biases: frozen
    rank, alpha = 4, 6.0
    out = learn_lora("merge", d, rl_batches(90), *lora_args(rank, alpha, ["q_proj", "up_proj", "down_proj"], True),
                     "--save", "merged")
    scale = alpha / math.sqrt(rank)
    base = {k: t.to(torch.float64) for k, t in load_file(os.path.join(d, "model.safetensors")).items()}
    ad = adapter_file(vdir(out, 2))
    got = {k: t.to(torch.float64) for k, t in load_file(os.path.join(vdir(out, 2), "model.safetensors")).items()}
    assert set(got) == set(base), f"merged tensors differ from the base's: {sorted(set(got) ^ set(base))[:4]}"
    ref = Peft(d, adapter=vdir(out, 2), dtype=torch.float32)
    merged = {k: t.to(torch.float64) for k, t in ref.peft.merge_and_unload().state_dict().items()}
    worst_exact, worst_peft, n = 0.0, 0.0, 0
    for k, w in base.items():
        a_name = "base_model.model." + k.replace(".weight", ".lora_A.weight")
        if a_name not in ad:
            assert torch.equal(got[k], w), f"{k}: not targeted, yet it differs from the base's"
            continue
        n += 1
        A, B = ad[a_name], ad[a_name.replace("lora_A", "lora_B")]
        exact = w + scale * B @ A
        bound = U32 * (exact.abs() + (rank + 2) * scale * (B.abs() @ A.abs()))
        worst_exact = max(worst_exact, float(((got[k] - exact).abs() / bound).max()))
        worst_peft = max(worst_peft, float(((got[k] - merged[k]).abs() / (2 * bound)).max()))
        assert (got[k] - w).abs().max() > 1e3 * bound.max(), f"{k}: the merge does not move it"
    assert n == 3 * 2, f"{n} merged matrices, expected 6"
    assert worst_exact <= 1 and worst_peft <= 1, \
        f"merged weights: {worst_exact:.3g} of the f32 bound from W + s·B A, {worst_peft:.3g} of twice it from peft's"
    print(f"  worst error / f32 bound: {worst_exact:.3g} from the exact merge, {worst_peft:.3g} from peft's merge")



@case
def save_merged_at_save_dtype_bf16_rounds_the_f32_merge_once():
    d = model("mergebf16base", seed=40)
    outs = {}
    for dtype in ("f32", "bf16"):
        outs[dtype] = learn_lora(f"merge-{dtype}", d, rl_batches(190), "--lora-rank", "4", "--save", "merged",
                                 "--save-dtype", dtype)
    f32 = load_file(os.path.join(vdir(outs["f32"], 2), "model.safetensors"))
    bf16 = load_file(os.path.join(vdir(outs["bf16"], 2), "model.safetensors"))
    assert set(f32) == set(bf16) and all(t.dtype == torch.bfloat16 for t in bf16.values()), \
        f"--save-dtype bf16: {sorted({str(t.dtype) for t in bf16.values()})}"
    for k, t in f32.items():
        assert torch.equal(bf16[k], t.to(torch.bfloat16)), f"{k}: not the f32 merge rounded to nearest even"
    # the adapter and AdamW's moments are the f32 run's (optimizer.safetensors holds the adapter's f32
    # weights too at --save-dtype bf16, as a full fine-tune's)
    same_files(vdir(outs["f32"], 2), vdir(outs["bf16"], 2), names=(ADAPTER,))
    m32, m16 = (load_file(os.path.join(vdir(outs[x], 2), "optimizer.safetensors")) for x in ("f32", "bf16"))
    assert all(torch.equal(m16[k], t) for k, t in m32.items()), "AdamW's moments differ with --save-dtype bf16"

# ---- 4. a bf16 base -----------------------------------------------------------------------

@case
def base_dtype_bf16_trains_on_the_bf16_rounded_base_as_peft_does_on_it():
    d = model("bf16base", seed=27)
    batches = sft_batches(100)
    names = ["q_proj", "k_proj", "v_proj", "o_proj"]
    out = learn_lora("bf16", d, batches, *lora_args(4, 8.0, names, False), "--base-dtype", "bf16",
                     "--norm", "tokens", loss="sft")
    rounded = llama_ref.Llama(d, precision="bf16w").w   # every matrix rounded to bf16, norms as they are
    ref = Peft(d, lora_config(4, 8.0, names, False), base=rounded)
    worst = check_steps(out, ref, batches, {"loss": "sft", "norm": "tokens"})   # step 1's loss among them
    # the rounding is seen: the f32 base's loss lies far outside LOSS_TOL
    f32_ref = Peft(d, lora_config(4, 8.0, names, False))
    for r in (ref, f32_ref):
        r.load(adapter_file(vdir(out, 0)))
    loss, at_f32 = metrics(out)[0]["loss"], float(ref_loss(f32_ref, batches[0], loss="sft", norm="tokens"))
    assert abs(at_f32 - loss) > 10 * LOSS_TOL * abs(loss), f"step 1's loss {loss} is the f32 base's {at_f32}"
    lp16, lp32 = ref.logprobs(batches[0]), f32_ref.logprobs(batches[0])
    k3 = torch.cat([torch.exp(a - b) - 1 - (a - b) for a, b in zip(lp32, lp16)]).mean()
    print(f"  step 1's loss {loss:.7g} ({at_f32:.7g} on the f32 base); k3(f32 base, bf16 base) {float(k3):.3g}; "
          f"worst relative errors: {fmt(worst)}")


# ---- 5. --resume and --recompute: the same bytes -------------------------------------------

@case
def resume_after_step_1_gives_the_bytes_of_an_uninterrupted_run_on_an_f32_and_a_bf16_base():
    # --resume takes the adapter's config and base from the checkpoint, the
    # optimizer's options and --base-dtype from its command line
    d = model("resumebase", seed=28)
    src = write_records("resume.rlr", [r for b in rl_batches(110, 3) for r in b])
    for dtype in ("f32", "bf16"):
        opts = ("--batch", "8", "--lr", "1e-2", "--weight-decay", "0.1", "--warmup", "2", "--base-dtype", dtype)
        whole, split = path(f"resume-whole-{dtype}"), path(f"resume-split-{dtype}")
        lora = lora_args(4, 8, "all-linear", True)
        learn("--init", d, "--out", whole, *opts, *lora, src)
        learn("--init", d, "--out", split, *opts, *lora, "--max-steps", "1", src)
        learn("--resume", "--out", split, *opts, src)
        for v in (2, 3):
            same_files(vdir(whole, v), vdir(split, v), names=(ADAPTER, "optimizer.safetensors", "adapter_config.json"))


@case
def recompute_gives_the_bytes_of_a_run_that_keeps_its_activations():
    d = model("recomputebase", seed=36)
    src = write_records("recompute.rlr", [r for b in rl_batches(150, 2) for r in b])
    outs = []
    for extra in ((), ("--recompute",)):
        outs.append(path(f"recompute{len(outs)}"))
        learn("--init", d, "--out", outs[-1], "--batch", "8", "--lr", "1e-2", *lora_args(4, 8, "all-linear", False),
              *extra, src)
    for v in (1, 2):
        same_files(vdir(outs[0], v), vdir(outs[1], v), names=(ADAPTER, "optimizer.safetensors"))


# ---- 6. --adapter: continuing a PEFT adapter ------------------------------------------------

@case
def adapter_continues_a_peft_adapter_from_its_logprobs_and_config():
    d = model("contbase", seed=29)
    targets = ["k_proj", "v_proj", "up_proj"]
    src_dir = peft_adapter.write(path("peft-adapter"), d, version=0, r=3, alpha=5.0, targets=targets, rslora=True,
                                 seed=31, std=0.1)
    batches = rl_batches(120)
    out = learn_lora("cont", d, batches, "--adapter", src_dir, "--save", "merged")
    want, got = adapter_file(src_dir), adapter_file(vdir(out, 0))
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want), \
        "v000000 is not the adapter given"
    with open(os.path.join(vdir(out, 0), "adapter_config.json")) as f:
        c = json.load(f)
    assert (c["r"], c["lora_alpha"], c["use_rslora"], sorted(c["target_modules"])) == (3, 5.0, True, sorted(targets)), c
    # step 0: the merged v000000 scores as peft's model with the adapter
    ref = Peft(d, adapter=src_dir)
    recs = batches[0]
    lp, lp_ref, lp_base = ratio_logprobs(vdir(out, 0), recs), ref.logprobs(recs), ratio_logprobs(d, recs)
    e, moved = worst_diff(lp, lp_ref), worst_diff(lp_base, lp_ref)
    assert e <= LOGP_TOL and moved > 100 * LOGP_TOL, f"log-probs {e:.2e} from peft's, the base's {moved:.2e}"
    worst = check_steps(out, ref, batches, {"loss": "pg"})
    print(f"  step 0's log-probs within {e:.2e} of peft's (the base's {moved:.3g} away); "
          f"worst relative errors: {fmt(worst)}")


@case
def init_of_a_lora_checkpoint_is_refused_saying_to_give_its_base_and_the_adapter_which_then_continues_it():
    d = model("initbase", seed=38)
    src = write_records("init.rlr", [r for b in rl_batches(170, 2) for r in b])
    first = path("init-first")
    learn("--init", d, "--out", first, "--batch", "8", "--lr", "1e-2", "--lora-rank", "2", src)
    rc, _, err = rltest.run("rl-learn", "-q", "--init", first, "--out", path("init-refused"), src)
    v2 = vdir(first, 2)
    assert rc == 1 and f"{v2} holds a LoRA adapter, not a model: give its base with --init and the adapter with " \
                       f"--adapter {v2}" in err, (rc, err)
    assert not os.path.exists(path("init-refused")) or not os.listdir(path("init-refused")), "written before the error"
    again = path("init-again")
    learn("--init", d, "--adapter", v2, "--out", again, "--batch", "8", "--max-steps", "1", src)
    same_files(v2, vdir(again, 0), names=(ADAPTER,))

# ---- 7. bad adapters -----------------------------------------------------------------------

def learn_fails(*args):
    rc, _, err = rltest.run("rl-learn", "-q", *args)
    return rc, err.strip()


@case
def adapter_of_a_base_of_other_shapes_is_refused_naming_the_file_and_the_tensor():
    d = model("shapebase", seed=32)
    other = model("shapeother", seed=32, inter=64)
    src_dir = peft_adapter.write(path("other-adapter"), other, version=0, r=2, alpha=2.0, targets=["up_proj"], seed=33)
    src = write_records("shape.rlr", rl_batches(130, 1)[0])
    rc, err = learn_fails("--init", d, "--out", path("shape.ckpt"), "--adapter", src_dir, src)
    # A (r, in) fits (in 48 both), B (out, r) not: out 64 against the base's 80
    tensor = "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight"
    assert rc == 1 and os.path.join(src_dir, ADAPTER) in err and tensor in err and "[64, 2]" in err, (rc, err)


@case
def adapter_config_with_options_rlpipe_does_not_implement_is_refused_naming_the_file_and_the_key():
    d = model("cfgbase", seed=34)
    good = peft_adapter.write(path("cfg-adapter"), d, version=0, r=2, alpha=2.0, targets=["q_proj"], seed=35)
    src = write_records("cfg.rlr", rl_batches(140, 1)[0])
    for key, value in (("use_dora", True), ("bias", "all"), ("modules_to_save", ["lm_head"])):
        bad = path(f"cfg-{key}")
        os.makedirs(bad)
        with open(os.path.join(good, "adapter_config.json")) as f:
            c = json.load(f)
        c[key] = value
        with open(os.path.join(bad, "adapter_config.json"), "w") as f:
            json.dump(c, f)
        os.link(os.path.join(good, ADAPTER), os.path.join(bad, ADAPTER))
        rc, err = learn_fails("--init", d, "--out", path(f"cfg-{key}.ckpt"), "--adapter", bad, src)
        assert rc == 1 and f"{bad}/adapter_config.json: {key}" in err, (key, rc, err)
        assert not os.path.exists(vdir(path(f"cfg-{key}.ckpt"), 0)), f"{key}: a version written before the error"


if __name__ == "__main__":
    rltest.finish()
