"""rl-learn computes the gradients, optimizer steps and checkpoints of
doc/design.md §3-§4, checked against an independent PyTorch reference.

Gradients: tests/tools/grad_probe runs the first half of an rl-learn step
(advantages, loss, forward and backward over micro-batches) and writes the
gradient of every parameter tensor; the reference is tests/py/llama_ref.py's
float64 model with autograd, and the loss written here from doc/design.md §4:
  pg:    L = −Σ w·mask·Â·log π(a_t) / Z
  ppo:   L = −Σ w·mask·min(ρ·Â, clip(ρ, 1−ε_lo, 1+ε_hi)·Â) / Z,  ρ = π/π_old
  cispo: L = −Σ w·mask·sg(clip(ρ, 1−ε_lo, 1+ε_hi))·Â·log π(a_t) / Z  (sg: detached)
  gspo:  L = −Σ_i w̄_i·min(s_i·Â_i, clip(s_i, 1−ε_lo, 1+ε_hi)·Â_i) / Z,
         s_i = exp(Σ mask·(log π − log π_old) / Σ mask), w̄_i = Σ mask·w / Σ mask
  sft:   L = −Σ mask·log π(a_t) / Z
  --kl-coef B (--kl-in loss): + B·Σ mask·k(d_t) / Z, d = log π − logp_ref,
         k1 = d, k2 = d²/2, k3 = exp(−d) + d − 1 (every sequence, Â 0 or not)
  --kl-in reward: r − B·Σ mask·(logp_s − logp_ref), logp_s the record's
         logp_learner or else its logp, before the advantages
  --entropy-coef C: − C·Σ mask·H_t / Z, H_t = −Σ_v π(v) log π(v) the entropy
         of the token's whole distribution at the record's temperature, with
         autograd through it (every sequence, Â 0 or not; not weighed by w)
  --overlong L,C: r + (0 up to L − C model tokens, (L − C − n)/C up to L, −1 beyond)
  --mask-truncated: mask 0 on every token of a record whose finish is "length"
with log π at the record's temperature, Â from the group's rewards (grpo:
(r − mean)/(std_bessel + 1e-4), drgrpo: r − mean, rloo: r − mean of the
others) and Z the number of sequences (seqs), of tokens kept (tokens) or N;
gspo's s with autograd through the mean of log π.
Tolerance: relative error ‖g − g_ref‖ / ‖g_ref‖ ≤ 1e-4 for every tensor.

Optimizer: one and three rl-learn steps against torch.optim.AdamW with the
same hyper-parameters on the reference's gradients, weights within 1e-6
(relative, per tensor).

LoRA (grad_probe --adapter DIR): the adapter is written by peft itself
(get_peft_model with B drawn, not zero, then save_pretrained), and the
reference's targeted matrices become W + s·B·A with A and B the leaves that
autograd differentiates: PEFT's layer h = W x + s·B(A x), s = alpha/r (or
alpha/sqrt(r) with rsLoRA), written as one product. Same tolerance. With
--base-dtype bf16 the reference's base matrices are bf16-rounded (llama_ref's
bf16w) and the adapters stay f32. --recompute writes the same bytes.
"""
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
from loss_ref import (adamw_run, advantages, kl_estimate, records, ref_logprobs, ref_loss,  # noqa: E402
                      shaped_rewards, tiny_model, write_records)
import rltest  # noqa: E402
import torch  # noqa: E402
from rltest import case, f32  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

WORK = tempfile.mkdtemp(prefix="rlpipe-learn.", dir=os.environ.get("TMPDIR"))
BUILD = os.path.join(rltest.ROOT, os.environ.get("BUILD", "build"))
PROBE = os.path.join(BUILD, "tests", "tools", "grad_probe")
GRAD_TOL = 1e-4


def path(name):
    return os.path.join(WORK, name)


def model(name, **kw):
    return tiny_model(path(name), **kw)


def ref_grads(model_dir, recs, **kw):
    ref = llama_ref.Llama(model_dir)
    for t in ref.w.values():
        t.requires_grad_(True)
    loss = ref_loss(ref, recs, **kw)
    loss.backward()
    return float(loss), {k: t.grad if t.grad is not None else torch.zeros_like(t) for k, t in ref.w.items()}


def probe(model_dir, recs, *args):
    src = write_records("probe.rlr", recs)
    out = path("grads.safetensors")
    p = subprocess.run([PROBE, "--model", model_dir, *args, src, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, f"grad_probe {' '.join(args)} exited {p.returncode}: {p.stderr.decode()[:500]}"
    return float(p.stdout), load_file(out)


def check_grads(model_dir, recs, probe_args=(), **kw):
    loss_ref, g_ref = ref_grads(model_dir, recs, **kw)
    loss, g = probe(model_dir, recs, *probe_args)
    assert abs(loss - loss_ref) <= 1e-5 * max(1.0, abs(loss_ref)), f"loss {loss} vs reference {loss_ref}"
    assert set(g) == set(g_ref), f"tensors differ: {sorted(set(g) ^ set(g_ref))}"
    worst = 0.0
    for k in g_ref:
        want = g_ref[k]
        got = g[k].to(torch.float64)
        denom = want.norm().item()
        assert denom > 0, f"{k}: the reference gradient is zero: the test does not exercise it"
        e = (got - want).norm().item() / denom
        worst = max(worst, e)
        assert e <= GRAD_TOL, f"{k}: relative error {e:.2e} > {GRAD_TOL} (|g_ref| {denom:.3e})"
    print(f"  worst relative gradient error {worst:.2e}, loss {loss:.6g} vs {loss_ref:.6g}")
    return worst


# ---- gradients against autograd ------------------------------------------------------------

@case
def pg_gradients_match_autograd_with_gqa_w_and_mask_untied():
    d = model("untied", tie=False)
    check_grads(d, records(), loss="pg")


@case
def pg_gradients_match_autograd_tied_embeddings():
    d = model("tied", tie=True, seed=4)
    check_grads(d, records(seed=2), loss="pg")


@case
def gradients_match_autograd_when_a_groups_samples_share_their_prompt():
    # rl-learn computes a prompt that consecutive records share once; its
    # rows take the gradient of every sample that reads them.
    d = model("gshared")
    check_grads(d, records(seed=8, group_size=5, shared_prompt=True), loss="pg")


@case
def gradients_match_autograd_with_qwen2_biases_and_rloo():
    d = model("qwen2", model_type="qwen2", tie=True, seed=5, heads=6, kv_heads=2)
    check_grads(d, records(seed=3), ("--adv", "rloo"), loss="pg", adv="rloo")


@case
def gradients_match_autograd_with_llama_attention_bias_and_drgrpo_tokens_norm():
    d = model("abias", attention_bias=True, seed=6, heads=4, kv_heads=4)
    check_grads(d, records(seed=4), ("--adv", "drgrpo", "--norm", "tokens"), loss="pg", adv="drgrpo", norm="tokens")


@case
def ppo_gradients_match_autograd_with_logp_learner_as_pi_old():
    d = model("ppo", seed=7)
    ref = llama_ref.Llama(d)
    recs = records(seed=5, logp_learner=True, ref=ref)
    check_grads(d, recs, ("--loss", "ppo", "--eps", "0.2"), loss="ppo", eps=0.2)


@case
def ppo_without_logp_learner_takes_its_own_logprobs_as_pi_old():
    d = model("ppo2", seed=8)
    check_grads(d, records(seed=6), ("--loss", "ppo", "--norm", "const:7"), loss="ppo", norm="const:7")


def clip_case(name, seed, probe_args, spread=0.4, **kw):
    """check_grads of a new model (seed) on records whose π_old lies within
    ±spread of its log-probs; returns ref_loss's clips."""
    d = model(name, seed=seed)
    recs = records(seed=seed + 1, logp_learner=True, ref=llama_ref.Llama(d), spread=spread)
    clips = {}
    check_grads(d, recs, probe_args, clips=clips, **kw)
    print(f"  clipped below: {clips['below']}, above: {clips['above']}, of {clips['terms']}")
    return clips


@case
def ppo_clip_higher_clips_each_side_at_its_own_epsilon():
    # --eps-low 0.1 --eps-high 0.3 (DAPO's clip-higher): with π_old within
    # ±0.4 of π, ratios leave [0.9, 1.3] on both sides
    clips = clip_case("ppohi", 31, ("--loss", "ppo", "--eps-low", "0.1", "--eps-high", "0.3"), loss="ppo",
                      eps_low=0.1, eps_high=0.3)
    assert clips["below"] >= 3 and clips["above"] >= 3, f"clipped terms {clips}: both sides must be exercised"


@case
def cispo_caps_the_ratio_at_5_with_no_lower_clip_by_default():
    # π_old within ±2 of π: ratios from e^-2 to e^2, some above 5; the
    # clipped ratio is a constant, so the capped tokens keep a gradient
    clips = clip_case("cispo", 33, ("--loss", "cispo"), spread=2.0, loss="cispo")
    assert clips["above"] >= 3 and clips["below"] == 0, f"clipped tokens {clips}: expected some above 5, none below"


@case
def cispo_with_eps_low_clips_small_ratios_from_below_too():
    clips = clip_case("cispolo", 35, ("--loss", "cispo", "--eps-low", "0.2"), spread=2.0, loss="cispo", eps_low=0.2)
    assert clips["below"] >= 3 and clips["above"] >= 3, f"clipped tokens {clips}: both sides must be exercised"


LOGIT_ROWS = 256   # rows of the output layer at a time at this vocabulary (lib/model/model.c logit_rows)


@case
def gspo_with_logp_learner_takes_each_sequence_ratio_at_theta_some_clipped():
    # s ≠ 1: rl-learn scores each micro-batch before its backward, whose
    # output layer asks for dL/dlogp 256 rows at a time; one sequence
    # straddles two such chunks. π_old within ±0.4 of π: with ε 0.1, some
    # sequences' s leave [0.9, 1.1] on each side with the clipped term taken.
    d = model("gspo", seed=37)
    ref = llama_ref.Llama(d)
    recs = records(n_groups=12, seed=38, logp_learner=True, ref=ref)
    starts, t = [], 0
    for r, ai in zip(recs, advantages(recs)):
        if ai != 0:
            starts.append(t)
            t += len(r["ids"])
    assert any(a < LOGIT_ROWS < b for a, b in zip(starts, starts[1:] + [t])), "no sequence straddles row 256"
    clips = {}
    check_grads(d, recs, ("--loss", "gspo", "--eps", "0.1"), loss="gspo", eps=0.1, clips=clips)
    assert clips["below"] >= 1 and clips["above"] >= 1, f"clipped sequences {clips}: both sides must be exercised"
    print(f"  sequences clipped below 0.9: {clips['below']}, above 1.1: {clips['above']}, of {clips['terms']}")
    check_grads(d, recs, ("--loss", "gspo", "--eps", "0.1", "--micro", "3"), loss="gspo", eps=0.1)


@case
def gspo_normalises_by_tokens_and_by_a_constant_as_the_other_losses():
    # (a group's samples share their prompt: computed once in both passes)
    d = model("gsponorm", seed=39)
    ref = llama_ref.Llama(d)
    recs = records(seed=40, logp_learner=True, ref=ref, shared_prompt=True)
    check_grads(d, recs, ("--loss", "gspo", "--eps", "0.1", "--norm", "tokens"), loss="gspo", eps=0.1, norm="tokens")
    check_grads(d, recs, ("--loss", "gspo", "--norm", "const:7"), loss="gspo", norm="const:7")


@case
def gspo_without_logp_learner_has_ratio_1_and_the_gradient_of_the_mean_log_prob():
    # π_old is the forward itself: s = 1 exactly, no scoring pass; each
    # token's gradient is −w̄·Â·mask/Σ mask (the paper's ε 3e-4, 4e-4)
    d = model("gspo1", seed=41)
    check_grads(d, records(seed=42), ("--loss", "gspo"), loss="gspo")


def tis_records(d, seed):
    """Records of rl-sample's fields (no w): the sampler's logp within ±0.5
    of the reference's own log-probs, so that π/μ lies on both sides of 1.2."""
    ref = llama_ref.Llama(d)
    rng = random.Random(seed)
    recs = records(seed=seed, w=False, shared_prompt=True)
    ratios = []
    for r in recs:
        lp = ref_logprobs(ref, r).detach()
        r["logp"] = [f32(float(x) + rng.uniform(-0.5, 0.5)) for x in lp]
        ratios += [math.exp(float(x) - mu) for x, mu in zip(lp, r["logp"])]
    assert min(ratios) < 1 and sum(x > 1.2 for x in ratios) >= 5 and sum(x < 1.2 for x in ratios) >= 5
    return recs


@case
def pg_with_tis_weighs_each_token_by_min_of_its_own_ratio_and_c():
    # rl-learn --tis C: w = min(π/μ, C) from the learner's own forward, held
    # constant; no rl-ratio before it (the records carry only the sampler's logp).
    d = model("tis", seed=10)
    check_grads(d, tis_records(d, 11), ("--tis", "1.2"), loss="pg", tis=1.2)


@case
def ppo_with_tis_takes_pi_old_and_the_weights_from_the_first_forward():
    d = model("tisppo", seed=12)
    check_grads(d, tis_records(d, 13), ("--loss", "ppo", "--tis", "1.2"), loss="ppo", tis=1.2)


@case
def sft_gradients_match_autograd_on_examples_with_mask():
    d = model("sft", seed=9)
    recs = [{k: v for k, v in r.items() if k in ("prompt_ids", "ids", "mask")} for r in records(seed=7)]
    check_grads(d, recs, ("--loss", "sft", "--norm", "tokens"), loss="sft", norm="tokens")


@case
def micro_batches_accumulate_to_the_same_gradient():
    d = model("micro", seed=10)
    recs = records(seed=8)
    check_grads(d, recs, ("--micro", "3"), loss="pg")
    check_grads(d, recs, ("--micro-tokens", "10"), loss="pg")


@case
def a_record_adv_is_used_as_given():
    d = model("adv", seed=11)
    recs = records(seed=9)
    for i, r in enumerate(recs):
        r["adv"] = 0.25 * (i % 5) - 0.5
    check_grads(d, recs, loss="pg")


# ---- LoRA adapters -------------------------------------------------------------------------

def peft_adapter(model_dir, name, targets, r=4, alpha=8, rslora=False, seed=0):
    """A PEFT adapter of model_dir saved by peft (B drawn, so that every
    gradient is non-zero): its directory."""
    import peft
    import transformers
    torch.manual_seed(seed)
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    cfg = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, use_rslora=rslora, lora_dropout=0.0,
                          init_lora_weights=False, task_type="CAUSAL_LM")
    d = path(name)
    peft.get_peft_model(base, cfg).save_pretrained(d)
    return d


def lora_ref_grads(model_dir, adapter_dir, recs, precision="f32", **kw):
    """ref_grads of the base (frozen) with the adapter's A and B as the leaves,
    under their PEFT names."""
    cfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    s = cfg["lora_alpha"] / (math.sqrt(cfg["r"]) if cfg["use_rslora"] else cfg["r"])
    ref = llama_ref.Llama(model_dir, precision=precision)
    leaves = {k: v.to(torch.float64).requires_grad_(True)
              for k, v in load_file(os.path.join(adapter_dir, "adapter_model.safetensors")).items()}
    for k, a in leaves.items():
        if ".lora_A." not in k:
            continue
        base = k.replace("base_model.model.", "", 1).replace(".lora_A.weight", ".weight")
        ref.w[base] = ref.w[base] + s * leaves[k.replace(".lora_A.", ".lora_B.")] @ a
    loss = ref_loss(ref, recs, **kw)
    loss.backward()
    return float(loss), {k: t.grad for k, t in leaves.items()}


def check_lora_grads(model_dir, adapter_dir, recs, probe_args=(), precision="f32", **kw):
    loss_ref, g_ref = lora_ref_grads(model_dir, adapter_dir, recs, precision, **kw)
    loss, g = probe(model_dir, recs, "--adapter", adapter_dir, *probe_args)
    assert abs(loss - loss_ref) <= 1e-5 * max(1.0, abs(loss_ref)), f"loss {loss} vs reference {loss_ref}"
    assert set(g) == set(g_ref), f"tensors differ: {sorted(set(g) ^ set(g_ref))[:4]}"
    worst = 0.0
    for k, want in g_ref.items():
        denom = want.norm().item()
        assert denom > 0, f"{k}: the reference gradient is zero: the test does not exercise it"
        e = (g[k].to(torch.float64) - want).norm().item() / denom
        worst = max(worst, e)
        assert e <= GRAD_TOL, f"{k}: relative error {e:.2e} > {GRAD_TOL}"
    print(f"  {len(g)} adapter tensors, worst relative gradient error {worst:.2e}, loss {loss:.6g} vs {loss_ref:.6g}")


@case
def lora_pg_gradients_of_q_and_v_adapters_match_autograd_of_peft_layer():
    d = model("lora_qv", seed=21, tie=False)
    a = peft_adapter(d, "lora_qv_adapter", ["q_proj", "v_proj"])
    check_lora_grads(d, a, records(seed=21, shared_prompt=True), loss="pg")


@case
def lora_sft_gradients_of_all_linear_rslora_adapters_match_autograd():
    d = model("lora_all", seed=22, model_type="qwen2")
    a = peft_adapter(d, "lora_all_adapter", "all-linear", r=8, alpha=16, rslora=True)
    recs = [{k: v for k, v in r.items() if k in ("prompt_ids", "ids", "mask")} for r in records(seed=22)]
    check_lora_grads(d, a, recs, ("--loss", "sft"), loss="sft")


@case
def lora_on_a_bf16_base_differentiates_the_bf16_rounded_base():
    d = model("lora_bf16", seed=23)
    a = peft_adapter(d, "lora_bf16_adapter", ["o_proj", "gate_proj", "up_proj", "down_proj"])
    check_lora_grads(d, a, records(seed=23), ("--base-dtype", "bf16"), precision="bf16w", loss="pg")


@case
def recomputed_activations_give_the_same_gradient_bytes():
    d = model("recompute", seed=24)
    a = peft_adapter(d, "recompute_adapter", "all-linear")
    recs = records(seed=24, shared_prompt=True)
    for extra in ((), ("--adapter", a), ("--adapter", a, "--base-dtype", "bf16")):
        loss, g = probe(d, recs, *extra)
        loss2, g2 = probe(d, recs, *extra, "--recompute")
        assert loss == loss2, f"{extra}: loss {loss} vs {loss2} recomputed"
        for k in g:
            assert torch.equal(g[k], g2[k]), f"{extra}: {k} differs when recomputed"


# ---- AdamW steps against torch.optim.AdamW -------------------------------------------------

def learn(*args):
    rc, out, err = rltest.run("rl-learn", "-q", *args)
    assert rc == 0, f"rl-learn {' '.join(args)} exited {rc}: {err.strip()[:600]}"
    return err


def ref_adamw_run(model_dir, batches, lr, betas, eps, wd, clip=0.0, warmup=0, epochs=1, loss_kw=None):
    """Weights (float64) after each step of torch.optim.AdamW on the reference's
    loss (loss_ref.adamw_run over every tensor of the model)."""
    ref = llama_ref.Llama(model_dir)
    return adamw_run(ref, ref.w, batches, lr, betas, eps, wd, clip, warmup, epochs, loss_kw)


def check_weights(ckpt_version_dir, want, tol=1e-6):
    got = load_file(os.path.join(ckpt_version_dir, "model.safetensors"))
    assert set(got) == set(want), f"tensors differ: {sorted(set(got) ^ set(want))}"
    worst = 0.0
    for k, w in want.items():
        e = (got[k].to(torch.float64) - w).norm().item() / w.norm().item()
        worst = max(worst, e)
        assert e <= tol, f"{k}: relative weight error {e:.2e} > {tol}"
    return worst


def adamw_case(name, steps, clip, warmup, *args, epochs=1, **kw):
    """Returns rl-learn's metrics lines."""
    d = model(name, seed=20 + steps)
    batches = [records(n_groups=2, group_size=4, seed=30 + s, equal_group=False) for s in range(steps // epochs)]
    src = write_records(name + ".rlr", [r for b in batches for r in b])
    out = path(name + ".ckpt")
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.99, 1e-8, 0.1
    learn("--init", d, "--out", out, "--batch", "8", "--lr", str(lr), "--beta1", str(b1), "--beta2", str(b2),
          "--adam-eps", str(eps), "--weight-decay", str(wd), "--grad-clip", str(clip), "--warmup", str(warmup),
          "--keep", "0", "--metrics", out + ".jsonl", *args, src)
    want = ref_adamw_run(d, batches, lr, (b1, b2), eps, wd, clip, warmup, epochs, kw)
    for s in range(steps):
        worst = check_weights(os.path.join(out, f"v{s + 1:06d}"), want[s])
        print(f"  step {s + 1}: worst relative weight error {worst:.2e}")
    return [json.loads(x) for x in open(out + ".jsonl")]


@case
def one_adamw_step_matches_torch_adamw_with_weight_decay():
    adamw_case("adamw1", 1, 0.0, 0)


@case
def three_adamw_steps_match_torch_adamw_with_clipping_and_warmup():
    adamw_case("adamw3", 3, 0.5, 2)



@case
def ppo_epochs_take_steps_against_the_pi_old_of_the_batch_start():
    adamw_case("ppo_epochs", 4, 0.0, 0, "--loss", "ppo", "--epochs", "2", "--eps", "0.1", epochs=2, loss="ppo",
               eps=0.1)


@case
def gspo_epochs_take_steps_against_the_pi_old_of_the_batch_start():
    # the second epoch's s ≠ 1, taken at θ by a scoring pass before each
    # backward. One step at lr 1e-3 moves most s by over 20% in the
    # direction of its advantage: the paper's lower side (3e-4) clips those of
    # negative advantage, an upper side of 1 lets some of positive advantage
    # keep their gradient, through s
    m = adamw_case("gspo_epochs", 4, 0.0, 0, "--loss", "gspo", "--epochs", "2", "--eps-high", "1", epochs=2,
                   loss="gspo", eps_high=1.0)
    second = [x["clipped"] for x in m if x["epoch"] == 2]
    assert [x["epoch"] for x in m] == [1, 2, 1, 2] and all(0 < c < 1 for c in second), \
        f"epochs {[x['epoch'] for x in m]}, clipped in the second epochs {second}: expected some, not all"
    print(f"  clipped in the second epochs: {second}")


@case
def cispo_epochs_take_steps_against_the_pi_old_of_the_batch_start():
    m = adamw_case("cispo_epochs", 4, 0.0, 0, "--loss", "cispo", "--epochs", "2", "--eps-high", "0.01", epochs=2,
                   loss="cispo", eps_high=0.01)
    second = [x["clipped"] for x in m if x["epoch"] == 2]
    assert all(0 < c < 1 for c in second), f"clipped in the second epochs {second}: expected some, not all"
    print(f"  clipped in the second epochs: {second}")


# ---- multi-turn rollouts: the environment's tokens -----------------------------------------

ENV_VER = 3


def multi_turn(recs):
    """recs as multi-turn rollouts: in each completion of 3 tokens or more a run of
    tokens an environment added (a tool's result) in the middle, and in every
    other one a run at the end (a user's turn): mask 0, logp 0 (no sampler
    probability), ver ENV_VER; w and logp_learner there as they come. With
    logp_learner, -800 there: π_old of a token the model did not sample may be
    that small, and a ratio exp(log π_θ + 800) is inf in float64."""
    for i, r in enumerate(recs):
        n = len(r["ids"])
        m = [1] * n
        if n >= 3:
            for t in range(n // 3, n // 3 + max(1, n // 4)):
                m[t] = 0
            if i % 2 and n >= 5:
                m[n - 1] = 0
        r["mask"] = m
        for t in range(n):
            if not m[t]:
                r["logp"][t] = 0.0
                r["ver"][t] = ENV_VER
                if "logp_learner" in r:
                    r["logp_learner"][t] = -800.0
    assert sum(r["mask"].count(0) for r in recs) >= 10
    return recs


@case
def environment_tokens_get_no_gradient_pg_ppo_sft_and_tokens_norm_counts_the_models():
    # the reference leaves the tokens of mask 0 out of the sums; rl-learn
    # multiplies their terms by mask 0, and must give neither a gradient nor
    # a NaN (PPO's ratio on them is inf against their π_old)
    d = model("env", seed=14)
    ref = llama_ref.Llama(d)
    recs = multi_turn(records(seed=15, mask=False, logp_learner=True, ref=ref))
    check_grads(d, recs, ("--norm", "tokens"), loss="pg", norm="tokens", drop_masked=True)
    check_grads(d, recs, ("--loss", "ppo", "--eps", "0.2"), loss="ppo", eps=0.2, drop_masked=True)
    check_grads(d, recs, ("--loss", "ppo", "--norm", "tokens"), loss="ppo", norm="tokens", drop_masked=True)
    sft = [{k: v for k, v in r.items() if k in ("prompt_ids", "ids", "mask")} for r in recs]
    check_grads(d, sft, ("--loss", "sft", "--norm", "tokens"), loss="sft", norm="tokens", drop_masked=True)
    # straight from the sampler: --tis weighs the model's tokens by their logp, the environment's not at all
    sampled = [{k: v for k, v in r.items() if k not in ("w", "logp_learner")} for r in recs]
    check_grads(d, sampled, ("--tis", "1.2"), loss="pg", tis=1.2, drop_masked=True)
    # the same records with a positive advantage on every record: PPO's clipped
    # branch on the environment's tokens, their ρ still inf
    for r in recs:
        r["adv"] = 0.5 + 0.1 * (r["id"] % 3)
    check_grads(d, recs, ("--loss", "ppo"), loss="ppo", drop_masked=True)


@case
def environment_tokens_get_no_gradient_cispo_and_gspo():
    # cispo's ratio on them is inf, and gspo's s is the mean over the model's tokens alone
    d = model("env2", seed=43)
    ref = llama_ref.Llama(d)
    recs = multi_turn(records(seed=44, mask=False, logp_learner=True, ref=ref))
    check_grads(d, recs, ("--loss", "cispo", "--eps", "0.2"), loss="cispo", eps=0.2, drop_masked=True)
    check_grads(d, recs, ("--loss", "cispo"), loss="cispo", drop_masked=True)
    check_grads(d, recs, ("--loss", "gspo", "--eps", "0.1"), loss="gspo", eps=0.1, drop_masked=True)
    check_grads(d, recs, ("--loss", "gspo", "--norm", "tokens"), loss="gspo", norm="tokens", drop_masked=True)
    sampled = [{k: v for k, v in r.items() if k != "logp_learner"} for r in recs]   # s = 1
    check_grads(d, sampled, ("--loss", "gspo"), loss="gspo", drop_masked=True)


@case
def learner_metrics_leave_the_environment_tokens_out():
    # lag, k3, capped, entropy and clipped over the tokens of mask 1 of a
    # step, from the reference: an environment token counted would show (its
    # lag -3, its k3 about 799, its ratio 0, its PPO ratio inf); clipped:
    # ppo's clipped term taken (ε 0.2), cispo's ratio outside [0.8, 1.2],
    # every token of a sequence whose gspo term is clipped (ε 0.1)
    d = model("envm", seed=16)
    ref = llama_ref.Llama(d)
    recs = multi_turn(records(seed=17, mask=False, logp_learner=True, ref=ref))
    src = write_records("env-metrics.rlr", recs)
    a = advantages(recs)
    kept = [(r, t) for r in recs for t in range(len(r["ids"])) if r["mask"][t]]
    d_lr = [r["logp_learner"][t] - r["logp"][t] for r, t in kept]
    k3 = sum(math.exp(x) - 1 - x for x in d_lr) / len(kept)
    capped = sum(r["w"][t] < math.exp(x) * (1 - 1e-6) for (r, t), x in zip(kept, d_lr)) / len(kept)
    ent, n_run, tis_rho = 0.0, 0, []
    clipped = {"ppo": 0, "cispo": 0, "gspo": 0}
    for r, ai in zip(recs, a):
        if ai == 0:   # not run
            continue
        p, ids = r["prompt_ids"], r["ids"]
        h = ref.forward(torch.tensor([p + ids[:-1]]))[0, len(p) - 1:]
        lp_all = torch.log_softmax(ref.logits(h) / r["temperature"], dim=-1).detach()
        log_rho = []
        for t in range(len(ids)):
            if not r["mask"][t]:
                continue
            ent -= float((lp_all[t].exp() * lp_all[t]).sum())
            log_rho.append(float(lp_all[t, ids[t]]) - r["logp_learner"][t])
            rho = math.exp(log_rho[-1])
            clipped["ppo"] += not (rho * ai <= min(max(rho, 0.8), 1.2) * ai)
            clipped["cispo"] += not 0.8 <= rho <= 1.2
            tis_rho.append(math.exp(float(lp_all[t, ids[t]]) - r["logp"][t]))   # --tis: π_old the forward's, μ the sampler's
            n_run += 1
        if log_rho:
            s = math.exp(sum(log_rho) / len(log_rho))
            clipped["gspo"] += len(log_rho) * (not s * ai <= min(max(s, 0.9), 1.1) * ai)
    for loss, eps in (("pg", "0.2"), ("ppo", "0.2"), ("cispo", "0.2"), ("gspo", "0.1")):
        out = path(f"env-metrics-{loss}")
        learn("--init", d, "--out", out, "--batch", str(len(recs)), "--loss", loss, "--eps", eps, "--lr", "0",
              "--keep", "0", "--metrics", out + ".jsonl", src)
        m = [json.loads(x) for x in open(out + ".jsonl")][0]
        assert m["lag_mean"] == 0 and m["lag_max"] == 0, f"{loss}: lag {m['lag_mean']}, {m['lag_max']}: expected 0, 0"
        assert abs(m["k3"] - k3) <= 1e-6 * k3, f"{loss}: k3 {m['k3']}, expected {k3}"
        assert abs(m["capped"] - capped) <= 1e-12, f"{loss}: capped {m['capped']}, expected {capped}"
        assert abs(m["entropy"] - ent / n_run) <= 1e-5 * ent / n_run, f"{loss}: entropy {m['entropy']}, expected {ent / n_run}"
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]), m
        if loss == "pg":
            assert m["clipped"] is None and m["ppo_clipped"] is None, f"pg: clipped {m['clipped']}, expected null"
        else:
            want = clipped[loss] / n_run
            assert abs(m["clipped"] - want) <= 1e-12, f"{loss}: clipped {m['clipped']}, expected {clipped[loss]}/{n_run}"
            assert 0 < want < 1, f"{loss}: {clipped[loss]} of {n_run} tokens clipped: the test exercises nothing"
            ppo_key = m["clipped"] if loss == "ppo" else None   # ppo_clipped: ppo's alone
            assert m["ppo_clipped"] == ppo_key, f"{loss}: ppo_clipped {m['ppo_clipped']}, expected {ppo_key}"
    # --tis C with C between the middle two of those ratios: half of the tokens capped
    mid = sorted(tis_rho)[n_run // 2 - 1:n_run // 2 + 1]
    cap = math.sqrt(mid[0] * mid[1])
    tis_k3 = sum(x - 1 - math.log(x) for x in tis_rho) / n_run
    tis_capped = sum(x > cap for x in tis_rho)
    out = path("env-metrics-tis")
    sampled = [{k: v for k, v in r.items() if k not in ("w", "logp_learner")} for r in recs]
    learn("--init", d, "--out", out, "--batch", str(len(recs)), "--tis", repr(cap), "--lr", "0", "--keep", "0",
          "--metrics", out + ".jsonl", write_records("env-metrics-tis.rlr", sampled))
    m = [json.loads(x) for x in open(out + ".jsonl")][0]
    assert abs(m["k3"] - tis_k3) <= 1e-5 * tis_k3, f"--tis: k3 {m['k3']}, expected {tis_k3}"
    assert abs(m["capped"] - tis_capped / n_run) <= 1e-12, f"--tis: capped {m['capped']}, expected {tis_capped}/{n_run}"
    print(f"  k3 {k3:.4g}, capped {capped:.3f}, entropy {ent / n_run:.4g}, clipped {clipped} of {n_run}, "
          f"--tis {cap:.3g}: k3 {tis_k3:.4g}, capped {tis_capped}/{n_run}")


# ---- a reference model's KL, and overlong sequences (DAPO) ------------------------------------

def with_logp_ref(ref, recs, seed, spread=1.0):
    """recs with logp_ref, a reference model's log-probs: the learner's own
    within ±spread, so that d = log π − logp_ref takes both signs and every
    estimator's derivative differs from the others'."""
    rng = random.Random(seed)
    for r in recs:
        lp = ref_logprobs(ref, r).detach()
        r["logp_ref"] = [f32(float(x) + rng.uniform(-spread, spread)) for x in lp]
    return recs


@case
def kl_to_a_reference_in_the_loss_matches_autograd_for_k1_k2_k3_under_pg_and_ppo():
    # B·Σ mask·k(d)/Z over every sequence, those of advantage 0 too (the
    # records' last group has equal rewards: only the KL moves it)
    d = model("kl", seed=51)
    ref = llama_ref.Llama(d)
    recs = with_logp_ref(ref, records(seed=52, logp_learner=True, ref=ref), 53)
    worst = {}
    for est in ("k1", "k2", "k3"):
        for loss in ("pg", "ppo"):
            args = ("--loss", loss, "--kl-coef", "0.3", "--kl-est", est)
            worst[loss, est] = check_grads(d, recs, args, loss=loss, kl_coef=0.3, kl_est=est)
    check_grads(d, recs, ("--loss", "ppo", "--kl-coef", "0.3", "--norm", "tokens", "--micro", "3"), loss="ppo",
                kl_coef=0.3, norm="tokens")
    print(f"  worst relative gradient errors: {worst}")


@case
def kl_in_the_loss_of_cispo_and_gspo_and_with_environment_tokens():
    d = model("klenv", seed=54)
    ref = llama_ref.Llama(d)
    recs = with_logp_ref(ref, multi_turn(records(seed=55, mask=False, logp_learner=True, ref=ref)), 56)
    check_grads(d, recs, ("--loss", "cispo", "--kl-coef", "0.2", "--kl-est", "k2"), loss="cispo", kl_coef=0.2,
                kl_est="k2", drop_masked=True)
    check_grads(d, recs, ("--loss", "gspo", "--eps", "0.1", "--kl-coef", "0.2"), loss="gspo", eps=0.1,
                kl_coef=0.2, drop_masked=True)


@case
def kl_in_reward_takes_b_times_the_sequence_k1_off_the_reward_before_the_advantages():
    # logp_s is logp_learner where the records carry it, else logp; no loss term
    d = model("klrew", seed=57)
    ref = llama_ref.Llama(d)
    recs = with_logp_ref(ref, records(seed=58, logp_learner=True, ref=ref), 59)
    base, shaped = advantages(recs), advantages(shaped_rewards(recs, 0.5, "reward"))
    assert sum(x != y for x, y in zip(base, shaped)) >= len(recs) // 2, "the penalty changes few advantages"
    check_grads(d, recs, ("--kl-coef", "0.5", "--kl-in", "reward"), loss="pg", kl_coef=0.5, kl_in="reward")
    check_grads(d, recs, ("--loss", "ppo", "--kl-coef", "0.5", "--kl-in", "reward", "--adv", "drgrpo"), loss="ppo",
                kl_coef=0.5, kl_in="reward", adv="drgrpo")
    sampled = [{k: v for k, v in r.items() if k != "logp_learner"} for r in recs]
    assert advantages(shaped_rewards(sampled, 0.5, "reward")) != shaped, "logp and logp_learner give the same"
    check_grads(d, sampled, ("--kl-coef", "0.5", "--kl-in", "reward"), loss="pg", kl_coef=0.5, kl_in="reward")


# ---- the entropy bonus -------------------------------------------------------------------

@case
def entropy_bonus_matches_autograd_under_every_loss_at_temperatures_other_than_1():
    # −C·Σ mask·H/Z over every sequence, those of advantage 0 too (the
    # records' last group has equal rewards: only the bonus moves it), with
    # the gradient through H at T = 0.6 and 1.4
    d = model("ent", seed=70)
    ref = llama_ref.Llama(d)
    recs = records(seed=71, logp_learner=True, ref=ref, temperatures=(0.6, 1.4))
    worst = {}
    for loss in ("pg", "ppo", "cispo", "gspo", "sft"):
        worst[loss] = check_grads(d, recs, ("--loss", loss, "--entropy-coef", "0.7"), loss=loss, entropy_coef=0.7)
    worst["ppo tokens micro 3"] = check_grads(d, recs, ("--loss", "ppo", "--entropy-coef", "0.7", "--norm", "tokens",
                                                        "--micro", "3"), loss="ppo", norm="tokens", entropy_coef=0.7)
    print(f"  worst relative gradient errors: {worst}")


@case
def entropy_bonus_with_a_kl_penalty_with_environment_tokens_and_negative():
    d = model("entkl", seed=72)
    ref = llama_ref.Llama(d)
    recs = with_logp_ref(ref, records(seed=73, logp_learner=True, ref=ref, temperatures=(0.8, 1.25)), 74)
    check_grads(d, recs, ("--loss", "ppo", "--kl-coef", "0.3", "--entropy-coef", "0.4"), loss="ppo", kl_coef=0.3,
                entropy_coef=0.4)
    check_grads(d, recs, ("--kl-coef", "0.3", "--kl-est", "k2", "--entropy-coef", "0.4", "--norm", "const:7"),
                loss="pg", kl_coef=0.3, kl_est="k2", entropy_coef=0.4, norm="const:7")
    check_grads(d, recs, ("--kl-coef", "0.5", "--kl-in", "reward", "--entropy-coef", "0.4"), loss="pg", kl_coef=0.5,
                kl_in="reward", entropy_coef=0.4)
    env = multi_turn(records(seed=75, mask=False, logp_learner=True, ref=ref))
    check_grads(d, env, ("--loss", "gspo", "--eps", "0.1", "--entropy-coef", "-0.5"), loss="gspo", eps=0.1,
                entropy_coef=-0.5, drop_masked=True)   # C < 0: a penalty on the entropy


@case
def entropy_coef_is_recorded_in_state_json_and_its_term_in_the_step_loss():
    d = model("entstate", seed=76)
    recs = records(seed=77, temperatures=(0.7, 1.2))
    src = write_records("ent-state.rlr", recs)
    ref = llama_ref.Llama(d)
    for coef in (0.25, -0.1):
        out = path(f"ent-state-{coef}")
        learn("--init", d, "--out", out, "--batch", str(len(recs)), "--lr", "0", "--entropy-coef", repr(coef),
              "--metrics", out + ".jsonl", src)
        with open(os.path.join(out, "v000001", "state.json")) as f:
            state = json.load(f)
        assert state["entropy_coef"] == coef, f"state.json entropy_coef {state['entropy_coef']}, expected {coef}"
        m = [json.loads(x) for x in open(out + ".jsonl")][0]
        want = float(ref_loss(ref, recs, entropy_coef=coef))
        assert abs(m["loss"] - want) <= 1e-5 * max(1.0, abs(want)), f"C {coef}: loss {m['loss']}, expected {want}"
        assert m["trained"] == len(recs), f"C {coef}: {m['trained']} sequences trained, expected all {len(recs)}"
    out = path("ent-state-none")
    learn("--init", d, "--out", out, "--batch", str(len(recs)), "--lr", "0", src)
    with open(os.path.join(out, "v000001", "state.json")) as f:
        state = json.load(f)
    assert state["entropy_coef"] == 0, f"without --entropy-coef: entropy_coef {state['entropy_coef']}, expected 0"


@case
def overlong_adds_dapo_soft_punishment_to_the_reward_before_the_advantages():
    # completions of 1-12 tokens, masks of about 80% ones: L_MAX 8, L_CACHE 4
    # puts some in each piece (<= 4 model tokens, the ramp, beyond 8)
    d = model("overlong", seed=60)
    recs = records(seed=61, mask=True)
    lengths = [sum(r["mask"]) for r in recs]
    assert min(lengths) <= 4 and any(4 < x <= 8 for x in lengths) and max(lengths) > 8, lengths
    check_grads(d, recs, ("--overlong", "8,4"), loss="pg", overlong=(8, 4))
    no_mask = [{k: v for k, v in r.items() if k not in ("mask", "w")} for r in recs]   # L: every token
    check_grads(d, no_mask, ("--overlong", "10,6", "--adv", "rloo"), loss="pg", overlong=(10, 6), adv="rloo")


@case
def mask_truncated_gives_no_gradient_to_a_sequence_cut_at_the_length_limit():
    d = model("trunc", seed=62)
    recs = records(seed=63)
    for i, r in enumerate(recs):
        r["finish"] = "length" if i % 3 == 0 else "stop"
    check_grads(d, recs, ("--mask-truncated", "--norm", "tokens"), loss="pg", norm="tokens", mask_truncated=True)
    check_grads(d, recs, ("--mask-truncated", "--loss", "ppo", "--overlong", "8,4"), loss="ppo", overlong=(8, 4),
                mask_truncated=True)


@case
def kl_ref_metric_is_the_mean_estimate_over_the_trained_tokens():
    d = model("klm", seed=64)
    ref = llama_ref.Llama(d)
    recs = with_logp_ref(ref, records(seed=65), 66)
    src = write_records("kl-metrics.rlr", recs)
    a = advantages(recs)
    for kl_in, est in (("loss", "k2"), ("loss", "k3"), ("reward", "k1")):
        a_in = advantages(shaped_rewards(recs, 0.1, "reward")) if kl_in == "reward" else a
        # slack: what the learner's f32 log-probabilities (relative error
        # ~1e-6) can move the estimate by, k'(d)·|logp| per token; k1's mean
        # is a small difference of large log-probabilities, so a bound relative
        # to it alone would ask for more than f32 gives (the sanitizers' build
        # rounds differently)
        total, slack, n = 0.0, 0.0, 0
        for r, ai in zip(recs, a_in):
            if kl_in == "reward" and ai == 0:   # not run: no forward, no estimate
                continue
            lp = ref_logprobs(ref, r).detach()
            for t, mt in enumerate(r["mask"]):
                if mt:
                    dt = float(lp[t]) - r["logp_ref"][t]
                    total += float(kl_estimate(est, lp[t] - r["logp_ref"][t]))
                    slack += abs({"k1": 1.0, "k2": dt, "k3": 1 - math.exp(-dt)}[est]) * (abs(float(lp[t])) + 1)
                    n += 1
        out = path(f"kl-metrics-{kl_in}-{est}")
        est_args = ("--kl-est", est) if kl_in == "loss" else ()
        learn("--init", d, "--out", out, "--batch", str(len(recs)), "--kl-coef", "0.1", "--kl-in", kl_in, *est_args,
              "--lr", "0", "--keep", "0", "--metrics", out + ".jsonl", src)
        m = [json.loads(x) for x in open(out + ".jsonl")][0]
        tol = 1e-5 * abs(total / n) + 1e-6 * slack / n
        assert abs(m["kl_ref"] - total / n) <= tol, \
            f"{kl_in} {est}: kl_ref {m['kl_ref']}, expected {total / n} within {tol:.2e}"
    out = path("kl-metrics-none")
    learn("--init", d, "--out", out, "--batch", str(len(recs)), "--lr", "0", "--metrics", out + ".jsonl", src)
    m = [json.loads(x) for x in open(out + ".jsonl")][0]
    assert m["kl_ref"] is None, f"without --kl-coef: kl_ref {m['kl_ref']}, expected null"


@case
def kl_coef_refuses_a_record_without_logp_ref_naming_it():
    d = model("klmissing", seed=67)
    ref = llama_ref.Llama(d)
    recs = with_logp_ref(ref, records(seed=68), 69)
    del recs[5]["logp_ref"]
    src = write_records("kl-missing.rlr", recs)
    rc, out, err = rltest.run("rl-learn", "-q", "--init", d, "--out", path("klmissing.ckpt"), "--kl-coef", "0.1", src)
    assert rc == 1 and '"logp_ref"' in err and "record 5" in err, f"exit {rc}: {err.strip()[:400]}"


if __name__ == "__main__":
    rltest.finish()
