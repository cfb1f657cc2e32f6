"""The losses of doc/design.md §4 in float64 with PyTorch autograd, on any
model object that has forward(ids (1, T)) -> final-normed hidden states
(1, T, C) and logits(hidden) -> (T, V): llama_ref.Llama, or a Hugging Face
model behind a thin wrapper (test_lora.py's PEFT model). Also the tiny
model and the records those tests train on, and torch.optim.AdamW over the
loss (the formulas are listed in test_learn.py's header). Shared by
test_learn.py and test_lora.py."""
import math
import random

import llama_ref
import rltest
import torch
from rltest import f32


def tiny_model(model_dir, **kw):
    """A random model that records() are drawn for (vocabulary 96, hidden 48,
    2 layers, grouped-query attention), writing a step in milliseconds; kw
    replace llama_ref.random_model's arguments. Returns model_dir."""
    args = dict(hidden=48, inter=80, layers=2, heads=4, kv_heads=2, vocab=96, logit_scale=2.0, gain=1.2, seed=3)
    args.update(kw)
    llama_ref.random_model(model_dir, **args)
    return model_dir


def records(n_groups=4, group_size=4, seed=1, vocab=96, w=True, mask=True, logp_learner=False, ref=None,
            temperatures=(1.0, 0.7), equal_group=True, shared_prompt=False, spread=0.4):
    """Rollout records with groups of varied rewards (the last one all equal
    when equal_group), prompts of 1-6 and completions of 1-12 tokens; with
    shared_prompt, one prompt for each group, as rl-sample writes them; with
    logp_learner, π_old within ±spread of the reference's log-probs."""
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        rewards = [float(rng.choice([0, 1, 0.5, 2])) for _ in range(group_size)]
        if equal_group and g == n_groups - 1:
            rewards = [1.0] * group_size
        elif len(set(rewards)) == 1:
            rewards[0] += 1
        shared = [rng.randrange(vocab) for _ in range(rng.randint(1, 6))] if shared_prompt else None
        for k in range(group_size):
            n = rng.randint(1, 12)
            prompt = shared or [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
            r = {"id": len(out), "group": g, "prompt_ids": list(prompt),
                 "ids": [rng.randrange(vocab) for _ in range(n)], "reward": rewards[k],
                 "temperature": temperatures[len(out) % len(temperatures)],
                 "logp": [f32(-rng.uniform(0.1, 3)) for _ in range(n)], "ver": [0] * n}
            if w:
                r["w"] = [f32(rng.uniform(0.3, 2.0)) for _ in range(n)]
            if mask:
                r["mask"] = [int(rng.random() > 0.2) for _ in range(n)]
            out.append(r)
    if logp_learner:   # π_old near the reference's own log-probs, so that some ratios leave [1−ε, 1+ε]
        for r in out:
            lp = ref_logprobs(ref, r).detach()
            r["logp_learner"] = [f32(float(x) + rng.uniform(-spread, spread)) for x in lp]
    return out


def write_records(name, recs):
    return rltest.tmpfile(name, rltest.write_stream(recs))


def ref_logprobs(ref, r, entropy=False):
    """log π(a_t) (n,) of the completion at the record's temperature, float64,
    with autograd; with entropy, also H_t = −Σ_v π(v) log π(v) (n,) of each
    token's distribution."""
    p, ids = r["prompt_ids"], r["ids"]
    seq = torch.tensor([p + ids[:-1]], dtype=torch.long)
    h = ref.forward(seq)[0, len(p) - 1:]
    lp = torch.log_softmax(ref.logits(h) / r.get("temperature", 1.0), dim=-1)
    out = lp.gather(1, torch.tensor(ids)[:, None])[:, 0]
    return (out, -(lp.exp() * lp).sum(dim=1)) if entropy else out


def advantages(recs, kind="grpo"):
    by = {}
    for i, r in enumerate(recs):
        by.setdefault(r.get("group", -1 - i), []).append(i)
    a = [0.0] * len(recs)
    for idx in by.values():
        rs = [recs[i]["reward"] for i in idx]
        n, mean = len(rs), sum(rs) / len(rs)
        if len(set(rs)) == 1:
            continue
        for j, i in enumerate(idx):
            if kind == "grpo":
                sd = math.sqrt(sum((x - mean) ** 2 for x in rs) / (n - 1))
                a[i] = (rs[j] - mean) / (sd + 1e-4)
            elif kind == "drgrpo":
                a[i] = rs[j] - mean
            else:
                a[i] = rs[j] - (sum(rs) - rs[j]) / (n - 1)
    for i, r in enumerate(recs):
        if "adv" in r:
            a[i] = r["adv"]
    return a


# rl-learn's clip range (ε_lo, ε_hi) of each ratio loss without --eps, --eps-low, --eps-high
DEFAULT_EPS = {"ppo": (0.2, 0.2), "cispo": (1.0, 4.0), "gspo": (3e-4, 4e-4)}


def kl_estimate(est, d):
    """Schulman's estimators of KL(π‖π_ref) from d = log π − log π_ref (a tensor)."""
    if est == "k1":
        return d
    if est == "k2":
        return d * d / 2
    return torch.exp(-d) + d - 1


def shaped_rewards(recs, kl_coef=0.0, kl_in="loss", overlong=None):
    """Copies of recs whose rewards carry --overlong's punishment and --kl-in
    reward's penalty, each over the record's own mask."""
    out = []
    for r in recs:
        r = dict(r)
        n = len(r["ids"])
        m = r.get("mask", [1] * n)
        if overlong is not None:
            l_max, l_cache = overlong
            length = sum(m)
            if length > l_max:
                r["reward"] -= 1.0
            elif length > l_max - l_cache:
                r["reward"] += (l_max - l_cache - length) / l_cache
        if kl_coef and kl_in == "reward":
            lp_s = r["logp_learner"] if "logp_learner" in r else r["logp"]
            r["reward"] -= kl_coef * sum(mt * (a - b) for mt, a, b in zip(m, lp_s, r["logp_ref"]))
        out.append(r)
    return out


def truncated_masked(recs):
    """--mask-truncated: mask 0 on every token of the records cut at the length limit."""
    return [dict(r, mask=[0] * len(r["ids"])) if r.get("finish") == "length" else r for r in recs]


def ref_loss(ref, recs, loss="pg", adv="grpo", norm="seqs", eps=None, eps_low=None, eps_high=None, pi_old=None,
             tis=None, drop_masked=False, clips=None, kl_coef=0.0, kl_est="k3", kl_in="loss", overlong=None,
             mask_truncated=False, entropy_coef=0.0):
    """pi_old: for the ratio losses (ppo, cispo, gspo), log π_old per record
    (list of tensors); default the record's logp_learner, else the current
    log-probs (detached). eps sets both sides of the clip range, eps_low and
    eps_high one each, as rl-learn's options; DEFAULT_EPS the rest. tis: the
    cap C of rl-learn --tis, w = min(π_old / μ, C) held constant, π_old the
    current log-probs (detached) and μ the record's logp. drop_masked: the
    sums run over the tokens of mask 1 alone (the others are left out of
    every term, not multiplied by 0), as for an environment's tokens.
    clips: a dict that gets "below" and "above", the terms (tokens; gspo's
    sequences) whose clip is in force on each side: ppo's and gspo's clipped
    term taken, cispo's ratio clipped."""
    if loss in DEFAULT_EPS:
        lo, hi = DEFAULT_EPS[loss]
        lo, hi = (eps, eps) if eps is not None else (lo, hi)
        lo, hi = lo if eps_low is None else eps_low, hi if eps_high is None else eps_high
    if clips is not None:
        clips.update(below=0, above=0, terms=0)
    a = advantages(shaped_rewards(recs, kl_coef, kl_in, overlong), adv) if loss != "sft" else [0.0] * len(recs)
    if mask_truncated:
        recs = truncated_masked(recs)
    if norm == "seqs":
        z = len(recs)
    elif norm == "tokens":
        z = sum(sum(r.get("mask", [1] * len(r["ids"]))) for r in recs) or 1
    else:
        z = float(norm.split(":")[1])
    total = torch.zeros((), dtype=torch.float64)
    for i, (r, ai) in enumerate(zip(recs, a)):
        lp, ent = ref_logprobs(ref, r, entropy=True)
        n = len(r["ids"])
        keep = torch.tensor([t for t in range(n) if not drop_masked or r["mask"][t]], dtype=torch.long)
        lp, ent = lp[keep], ent[keep]
        w = torch.tensor(r.get("w", [1.0] * n), dtype=torch.float64)[keep]
        if tis is not None:
            w = torch.exp(lp.detach() - torch.tensor(r["logp"], dtype=torch.float64)[keep]).clamp(max=tis)
        m = torch.tensor(r.get("mask", [1] * n), dtype=torch.float64)[keep]
        if kl_coef and kl_in == "loss":
            d = lp - torch.tensor(r["logp_ref"], dtype=torch.float64)[keep]
            total = total + kl_coef * (m * kl_estimate(kl_est, d)).sum()
        if entropy_coef:
            total = total - entropy_coef * (m * ent).sum()
        if loss == "sft":
            total = total - (m * lp).sum()
            continue
        if loss == "pg":
            total = total - (w * m * ai * lp).sum()
            continue
        if pi_old is not None:
            old = pi_old[i][keep]
        elif "logp_learner" in r:
            old = torch.tensor(r["logp_learner"], dtype=torch.float64)[keep]
        else:
            old = lp.detach()
        if loss == "gspo":   # one ratio for the sequence: the exp of the mask-weighted mean log ratio
            if ai == 0 or m.sum() == 0:
                continue
            rho = torch.exp((m * (lp - old)).sum() / m.sum())[None]
            w, m = ((m * w).sum() / m.sum())[None], torch.ones(1, dtype=torch.float64)
        else:
            rho = torch.exp(lp - old)
        clipped = rho.clamp(1 - lo, 1 + hi)
        if loss == "cispo":
            total = total - (w * m * clipped.detach() * ai * lp).sum()
            taken = (clipped != rho) & (m != 0)
        else:
            total = total - (w * m * torch.minimum(rho * ai, clipped * ai)).sum()
            taken = (clipped * ai < rho * ai) & (m != 0)
        if clips is not None and ai != 0:
            clips["terms"] += int((m != 0).sum())
            clips["below"] += int((taken & (rho < 1)).sum())
            clips["above"] += int((taken & (rho > 1)).sum())
    return total / z


def adamw_run(ref, params, batches, lr, betas, eps, wd, clip=0.0, warmup=0, epochs=1, loss_kw=None, trace=None,
              moments=None):
    """Copies of params (a dict of ref's tensors, float64) after each step of
    torch.optim.AdamW on ref_loss over batches (lists of records), each batch
    `epochs` times; decay on 2-D tensors only, clip_grad_norm_ over all of
    params when clip > 0, linear warm-up over `warmup` steps. trace, a list,
    gets each step's (loss, gradient norm before the clip); moments, a dict,
    AdamW's state after the last step, NAME.exp_avg and NAME.exp_avg_sq."""
    loss_kw = loss_kw or {}
    decay = [t for t in params.values() if t.dim() == 2]
    other = [t for t in params.values() if t.dim() != 2]
    for t in params.values():
        t.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps)
    out = []
    steps = [(recs, e) for recs in batches for e in range(epochs)]
    for step, (recs, epoch) in enumerate(steps, 1):
        for g in opt.param_groups:
            g["lr"] = lr * step / warmup if warmup and step <= warmup else lr
        if epoch == 0:   # ratio losses: π_old is the learner at the start of the batch
            pi_old = [ref_logprobs(ref, r).detach() for r in recs]
        opt.zero_grad()
        loss = ref_loss(ref, recs, pi_old=pi_old if loss_kw.get("loss") in DEFAULT_EPS else None, **loss_kw)
        loss.backward()
        if trace is not None:
            grads = [t.grad for t in params.values() if t.grad is not None]
            trace.append((float(loss), float(torch.sqrt(sum((g * g).sum() for g in grads)))))
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        opt.step()
        out.append({k: t.detach().clone() for k, t in params.items()})
    if moments is not None:
        for k, t in params.items():
            moments[k + ".exp_avg"] = opt.state[t]["exp_avg"].clone()
            moments[k + ".exp_avg_sq"] = opt.state[t]["exp_avg_sq"].clone()
    return out
