"""rl-learn as a tool (man/rl-learn.1, doc/design.md §3-§4): the checkpoint
directory it writes, resuming bit for bit, stopping on SIGINT/SIGTERM
(kill -9 and full disks are test_faults.py's), batches of whole groups, errors that name the bad record, SFT
on text examples and on conversations with tool turns (the assistant's tokens alone), and random
initialisation from a config.

The gradients and the optimizer's arithmetic are test_learn.py's; here every
value asserted is a count, a byte-for-byte equality, or (for the reference
loss of a step) the float64 PyTorch model of llama_ref.py at 1e-5 relative;
for conversations with tool turns, on transformers' tokens and chat_ref.py's
assistant mask, and the gradient a step shows against its autograd at 1e-4
relative per tensor.
Models are tiny (hidden 48, vocab 96) so that a step takes milliseconds and
the file runs in seconds; most of the time goes to the fsyncs of checkpoints.
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
from ckpt_check import latest, read_bytes, same_files, vdir, versions  # noqa: E402
import ckpt_check  # noqa: E402
import rltest  # noqa: E402
import torch  # noqa: E402
from rltest import case  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

WORK = tempfile.mkdtemp(prefix="rlpipe-learn-run.", dir=os.environ.get("TMPDIR"))
LEARN = os.path.join(rltest.BIN, "rl-learn")
VOCAB = 96
TIMING = ("tokens_per_s", "seconds", "save_s", "elapsed")   # metrics that differ between identical steps
METRIC_KEYS = ["step", "version", "epoch", "samples", "groups", "groups_drawn", "trained", "tokens", "fwd_tokens",
               "reward_mean", "reward_std", "accuracy", "adv_mean", "adv_std", "adv_zero", "loss", "grad_norm", "lr",
               "entropy", "lag_mean", "lag_max", "k3", "capped", "ppo_clipped", "clipped", "kl_ref", "tokens_per_s",
               "seconds", "save_s", "elapsed"]


def path(*names):
    return os.path.join(WORK, *names)


def model(name, **kw):
    d = path(name)
    args = dict(hidden=48, inter=80, layers=2, heads=4, kv_heads=2, vocab=VOCAB, logit_scale=2.0, gain=1.2, seed=3)
    args.update(kw)
    llama_ref.random_model(d, **args)
    return d


MODEL = model("m")


def rollouts(sizes, seed=1, equal=(), first_id=0):
    """Rollout records in groups of the given sizes (group g has sizes[g]
    records, ids g + first_id): rewards 0/1 that differ within a group, or all
    equal (1.0) for the groups listed in `equal`; prompts of 1-4 and
    completions of 1-8 tokens."""
    rng = random.Random(seed)
    out = []
    for g, size in enumerate(sizes):
        rewards = [1.0] * size if g in equal else [float(k % 2) for k in range(size)]
        for k in range(size):
            n = rng.randint(1, 8)
            out.append({"id": len(out), "group": g + first_id,
                        "prompt_ids": [rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))],
                        "ids": [rng.randrange(VOCAB) for _ in range(n)], "reward": rewards[k],
                        "temperature": 1.0, "ver": [0] * n})
    return out


def write(name, recs, **kw):
    return rltest.tmpfile(name, rltest.write_stream(recs, **kw))


def learn(*args, input=None):
    return rltest.run("rl-learn", *args, input=input)


def learn_ok(*args, input=None):
    rc, out, err = learn(*args, input=input)
    assert rc == 0, f"rl-learn {' '.join(args)} exited {rc}: {err[-600:]}"
    return err


def metrics(file):
    with open(file) as f:
        return [json.loads(line) for line in f]


MODEL_TENSORS = load_file(os.path.join(MODEL, "model.safetensors"))
MODEL_SHAPES = {k: tuple(t.shape) for k, t in MODEL_TENSORS.items()}


def check_complete(ckpt, v):
    return ckpt_check.check_complete(ckpt, v, MODEL_SHAPES)


def check_all_versions_complete(ckpt):
    return ckpt_check.check_all_versions_complete(ckpt, MODEL_SHAPES)


def ref_pg_loss(model_dir, recs):
    """doc/design.md §4's pg loss with grpo advantages, --norm seqs, in float64."""
    ref = llama_ref.Llama(model_dir)
    by = {}
    for i, r in enumerate(recs):
        by.setdefault(r["group"], []).append(i)
    total = 0.0
    for idx in by.values():
        rs = [recs[i]["reward"] for i in idx]
        n, mean = len(rs), sum(rs) / len(rs)
        if len(set(rs)) == 1:
            continue
        sd = math.sqrt(sum((x - mean) ** 2 for x in rs) / (n - 1))
        for j, i in enumerate(idx):
            r = recs[i]
            p, ids = r["prompt_ids"], r["ids"]
            h = ref.forward(torch.tensor([p + ids[:-1]]))[0, len(p) - 1:]
            lp = torch.log_softmax(ref.logits(h), dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
            total -= (rs[j] - mean) / (sd + 1e-4) * float(lp.sum())
    return total / len(recs)


# ---- 1. the checkpoint directory ----------------------------------------------------------

LAYOUT_RECS = rollouts([2] * 6)   # batch 4: steps of groups [0,1], [2,3], [4,5]
LAYOUT_SRC = write("layout.rlr", LAYOUT_RECS)


@case
def checkpoints_are_complete_versions_one_per_step_with_latest_and_metrics():
    recs, src = LAYOUT_RECS, LAYOUT_SRC
    c, met = path("c_layout"), path("layout.jsonl")
    err = learn_ok("--init", MODEL, "--out", c, "--batch", "4", "--lr", "1e-3", "--keep", "0", "--metrics", met, src)
    assert versions(c) == [0, 1, 2, 3], f"versions {versions(c)}"
    assert latest(c) == "v000003\n", f"latest {latest(c)!r}"
    assert sorted(os.listdir(c)) == [".lock", "latest", "published", "v000000", "v000001", "v000002", "v000003"], os.listdir(c)
    assert read_bytes(os.path.join(c, "published")) == b"v000003\n", "published names the newest version too"
    for v in range(4):
        state = check_complete(c, v)
        assert state["records"] == 4 * v, f"v{v}: records {state['records']}, expected {4 * v}"
        assert state["step"] == v and state["loss"] == "pg" and state["adv"] == "grpo" and state["seed"] == 0, state
    # version 0 is the initial model, tensor for tensor, with zero moments
    w0 = load_file(os.path.join(vdir(c, 0), "model.safetensors"))
    for k, t in MODEL_TENSORS.items():
        assert torch.equal(w0[k], t), f"v000000 {k} differs from the --init model's"
    assert all(not t.any() for t in load_file(os.path.join(vdir(c, 0), "optimizer.safetensors")).values())
    w1 = load_file(os.path.join(vdir(c, 1), "model.safetensors"))
    assert not torch.equal(w1["model.embed_tokens.weight"], w0["model.embed_tokens.weight"]), "step 1 changed nothing"
    # one metrics line per step, the keys in the man page's order, the counts of each batch
    m = metrics(met)
    assert [list(x) for x in m] == [METRIC_KEYS] * 3, f"keys {list(m[0])}"
    for k, x in enumerate(m):
        batch = recs[4 * k:4 * k + 4]
        want = {"step": k + 1, "version": k + 1, "epoch": 1, "samples": 4, "groups": 2, "trained": 4,
                "tokens": sum(len(r["ids"]) for r in batch),
                "fwd_tokens": sum(len(r["prompt_ids"]) + len(r["ids"]) - 1 for r in batch),
                "reward_mean": 0.5, "accuracy": 0.5, "adv_zero": 0.0, "lr": 1e-3, "lag_mean": k, "lag_max": k,
                "k3": None, "capped": None, "ppo_clipped": None, "clipped": None, "kl_ref": None}
        got = {key: x[key] for key in want}
        assert got == want, f"step {k + 1}: {got} != {want}"
        assert x["grad_norm"] > 0 and math.isfinite(x["loss"]) and x["entropy"] > 0, x
    loss_ref = ref_pg_loss(MODEL, recs[:4])
    assert abs(m[0]["loss"] - loss_ref) <= 1e-5 * max(1, abs(loss_ref)), f"loss {m[0]['loss']} vs reference {loss_ref}"
    assert "3 steps (versions 0 to 3)" in err and "0 records left unused" in err and f"{c}/v000003" in err, err


ORDER_SRC = write("order.rlr", rollouts([2] * 20, seed=5))   # 20 steps of batch 2


@case
def each_step_is_reported_once_its_version_is_on_the_disk():
    """Versions are written while the next step runs; a step's metrics line
    comes after its version is complete and named by latest."""
    c = path("c_order")
    p = subprocess.Popen([LEARN, "--init", MODEL, "--out", c, "--batch", "2", "--lr", "1e-3", "--metrics", "-", "-q",
                          ORDER_SRC], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = []
    for line in p.stdout:
        m = json.loads(line)
        assert int(latest(c)[1:]) >= m["step"], f"step {m['step']} reported while latest names {latest(c)!r}"
        check_complete(c, m["step"])
        assert 0 <= m["save_s"] < m["elapsed"], m
        seen.append(m["step"])
    err = p.stderr.read().decode()
    assert p.wait() == 0, f"exit {p.returncode}: {err[-300:]}"
    assert seen == list(range(1, 21)), seen


@case
def keep_2_keeps_only_the_two_newest_versions():
    src = write("keep.rlr", rollouts([2] * 10))
    c = path("c_keep")
    learn_ok("--init", MODEL, "--out", c, "--batch", "4", "--keep", "2", src)
    assert sorted(os.listdir(c)) == [".lock", "latest", "published", "v000004", "v000005"], sorted(os.listdir(c))
    assert latest(c) == "v000005\n"
    for v in (4, 5):
        assert check_complete(c, v)["records"] == 4 * v
    c = path("c_keep_every")
    learn_ok("--init", MODEL, "--out", c, "--batch", "4", "--keep", "2", "--keep-every", "2", src)
    assert versions(c) == [0, 2, 4, 5], f"--keep 2 --keep-every 2: {versions(c)}"


STATE_SRC = write("state.rlr", rollouts([2] * 10, seed=13))   # 5 steps of batch 4
STATE_OPTS = ("--batch", "4", "--lr", "1e-2", "--keep", "0", "-q")


def has_state(c, v):
    return os.path.isfile(os.path.join(vdir(c, v), "optimizer.safetensors"))


@case
def state_every_3_writes_adamw_state_in_the_multiples_of_3_and_the_last_version_only():
    full, c, c4 = path("c_state_full"), path("c_state3"), path("c_state3_max4")
    learn_ok("--init", MODEL, "--out", full, *STATE_OPTS, "--metrics", path("state_full.jsonl"), STATE_SRC)
    learn_ok("--init", MODEL, "--out", c, *STATE_OPTS, "--state-every", "3", STATE_SRC)
    learn_ok("--init", MODEL, "--out", c4, *STATE_OPTS, "--state-every", "3", "--max-steps", "4", STATE_SRC)
    assert versions(c) == [0, 1, 2, 3, 4, 5], versions(c)
    assert [v for v in versions(c) if has_state(c, v)] == [0, 3, 5], "state in v0, the multiples of 3 and the last"
    assert [v for v in versions(c4) if has_state(c4, v)] == [0, 3, 4], "--max-steps 4: the last is v4"
    assert latest(c) == "v000005\n" and latest(c4) == "v000004\n"
    for v in range(6):   # the same weights and state.json as with the state in every version
        same_files(vdir(full, v), vdir(c, v), names=("model.safetensors", "state.json"))
        if has_state(c, v):
            same_files(vdir(full, v), vdir(c, v), names=("optimizer.safetensors",))
        else:
            ckpt_check.check_weights(c, v, MODEL_SHAPES)
    same_files(vdir(full, 4), vdir(c4, 4))


def wait_for_published(c, v, p, timeout=20):
    """Waits until c/published names version v or a later one."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with open(os.path.join(c, "published")) as f:
                if int(f.read()[1:]) >= v:
                    return
        except (FileNotFoundError, ValueError):
            pass
        assert p.poll() is None, f"rl-learn exited {p.returncode} before version {v}"
        time.sleep(0.002)
    raise AssertionError(f"no version {v} published in {timeout} s")


def term_while_waiting(args, objs, wait):
    """rl-learn ARGS given the msgpack objects objs on an input kept open;
    once wait(p) returns, SIGTERM. It must exit 0; returns its stderr."""
    p = subprocess.Popen([LEARN, *args], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(b"".join(objs))
    p.stdin.flush()
    wait(p)
    time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    err = err.decode()
    assert p.returncode == 0, f"exit {p.returncode}: {err[-300:]}"
    return err


def untimed(lines):
    return [{k: v for k, v in m.items() if k not in TIMING} for m in lines]


@case
def stopped_after_a_weights_only_version_resume_goes_back_to_the_newest_state_and_ends_bit_exact():
    c, m = path("c_state_term"), path("state_term.jsonl")
    opts = ("--batch", "4", "--lr", "1e-2", "--keep", "0", "--state-every", "2", "--metrics", m)
    # 3 whole batches and one record more: 3 steps, then rl-learn waits for input
    err = term_while_waiting(("--init", MODEL, "--out", c, *opts),
                             rltest.member_bytes(rollouts([2] * 10, seed=13))[:1 + 13],
                             lambda p: wait_for_published(c, 3, p))
    assert err.endswith(f"rl-learn: stopped by a signal; newest checkpoint {c}/v000003 (weights only: --resume "
                        "continues from v000002)\n"), err[-300:]
    assert latest(c) == "v000002\n" and not has_state(c, 3)
    check_complete(c, 2)
    assert [x["step"] for x in metrics(m)] == [1, 2, 3]
    err = learn_ok("--resume", "--out", c, *opts, STATE_SRC)
    assert "resuming at version 2: skipping the 8 records" in err, err
    assert f"resuming at version 2: 1 line of {m}, from the versions after it, cut off" in err, err
    # The metrics of step 3 once, as an uninterrupted run writes them (the full one, below).
    assert untimed(metrics(m)) == untimed(metrics(path("state_full.jsonl"))), \
        [x["step"] for x in metrics(m)]
    assert [v for v in versions(c) if has_state(c, v)] == [0, 2, 4, 5] and latest(c) == "v000005\n"
    full = path("c_state_full")   # every version with its state (the case above)
    for v in (3, 4, 5):
        same_files(vdir(full, v), vdir(c, v), names=("model.safetensors",))
    same_files(vdir(full, 5), vdir(c, 5))


@case
def a_partial_stream_is_trained_on_and_said_with_exit_status_1_unless_allow_partial():
    objs = rltest.member_bytes(rollouts([2] * 4, seed=3))
    objs[-1] = rltest.msgpack.packb({"rlpipe_end": 1, "count": 8, "partial": "s2 failed: 3 records lost"})
    src = rltest.tmpfile("partial.rlr", b"".join(objs))
    c, c2 = path("c_partial"), path("c_partial2")
    rc, _, err = learn("--init", MODEL, "--out", c, "--batch", "4", "-q", src)
    assert rc == 1 and f"rl-learn: error: {src}: a partial member, its writer lost records (s2 failed: 3 records " \
                       "lost): its records are read, and the run ends with exit status 1" in err, (rc, err[-400:])
    assert latest(c) == "v000002\n", "both batches of the partial member trained on"
    rc, _, err = learn("--init", MODEL, "--out", c2, "--batch", "4", "-q", "--allow-partial", src)
    assert rc == 0 and "rl-learn: warning: " in err and "read with --allow-partial" in err, (rc, err[-400:])
    same_files(vdir(c, 2), vdir(c2, 2), names=("model.safetensors",))


# ---- 2. resuming -----------------------------------------------------------------------------

RESUME_SRC = write("resume.rlr", rollouts([2] * 9, seed=5))   # 4 steps of batch 4, 2 records left


@case
def resume_after_max_steps_2_gives_the_bytes_of_an_uninterrupted_run():
    src = RESUME_SRC
    opts = ("--batch", "4", "--lr", "1e-2", "--weight-decay", "0.1", "--warmup", "3", "-q")
    c1, c2, c3 = path("c_whole"), path("c_split"), path("c_noskip")
    m1, m2, m3 = path("whole.jsonl"), path("split.jsonl"), path("noskip.jsonl")
    learn_ok("--init", MODEL, "--out", c1, *opts, "--metrics", m1, src)
    learn_ok("--init", MODEL, "--out", c2, *opts, "--max-steps", "2", "--metrics", m2, src)
    assert latest(c2) == "v000002\n" and check_complete(c2, 2)["records"] == 8
    shutil.copytree(c2, c3)
    err = learn(*("--resume", "--out", c2, *opts[:-1], "--max-steps", "4", "--metrics", m2, src))[2]
    assert "resuming at version 2: skipping the 8 records" in err, err
    assert latest(c2) == "v000004\n"
    same_files(vdir(c1, 4), vdir(c2, 4))
    assert check_complete(c2, 4)["records"] == 16
    whole, split = metrics(m1), metrics(m2)
    assert [x["step"] for x in split] == [1, 2, 3, 4], "the metrics of the resumed run are appended"
    for a, b in zip(whole[2:4], split[2:4]):
        for k in TIMING:
            a.pop(k), b.pop(k)
        assert a == b, f"step {a['step']}: {a} != {b}"
    # --no-skip: steps 3 and 4 train on records 0-7 again, so the model differs
    learn_ok("--resume", "--no-skip", "--out", c3, *opts, "--max-steps", "4", "--metrics", m3, src)
    ns = metrics(m3)
    assert [x["step"] for x in ns] == [3, 4]
    assert [x["tokens"] for x in ns] == [x["tokens"] for x in whole[:2]], "--no-skip did not start from record 0"
    assert read_bytes(os.path.join(vdir(c3, 4), "model.safetensors")) != \
        read_bytes(os.path.join(vdir(c1, 4), "model.safetensors")), "--no-skip gave the skipping run's weights"
    assert check_complete(c3, 4)["records"] == 8, "after --no-skip, records counts this run's input"


@case
def resume_at_or_past_max_steps_takes_no_step():
    c = path("c_split")   # at version 4 (the case above)
    err = learn_ok("--resume", "--out", c, "--max-steps", "3", RESUME_SRC)
    assert latest(c) == "v000004\n" and versions(c)[-1] == 4
    assert "0 steps (versions 4 to 4)" in err, err


# ---- 3. SIGINT and SIGTERM ------------------------------------------------------------------

KILL_SRC = write("kill.rlr", rollouts([2] * 40, seed=9))   # 40 steps of batch 2
KILL_OPTS = ("--batch", "2", "--lr", "1e-2", "-q")


def wait_for_version(c, v, p, timeout=20):
    """Waits until c/latest names version v or a later one (p still running or not)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        done = p.poll() is not None
        try:
            if int(latest(c)[1:]) >= v:
                return
        except (FileNotFoundError, ValueError):
            pass
        assert not done, f"rl-learn exited {p.returncode} before version {v}"
        time.sleep(0.002)
    raise AssertionError(f"no version {v} in {timeout} s")


@case
def sigterm_while_waiting_for_input_exits_0_naming_the_newest_checkpoint():
    c = path("c_term")
    # 3 whole batches and the first record of a 4th group: 3 steps; the pipe stays open
    err = term_while_waiting(("--init", MODEL, "--out", c, "--batch", "2"),
                             rltest.member_bytes(rollouts([2, 2, 2, 2], seed=11))[:1 + 7],
                             lambda p: wait_for_version(c, 3, p))
    assert check_all_versions_complete(c) == 3
    assert err.endswith(f"rl-learn: stopped by a signal; newest checkpoint {c}/v000003\n"), err[-300:]
    assert "steps (versions" not in err, "a stopped run writes no summary line"


@case
def sigint_during_steps_exits_0_naming_latest_and_resume_finishes_bit_exact():
    ref = path("c_int_ref")
    learn_ok("--init", MODEL, "--out", ref, *KILL_OPTS, KILL_SRC)
    c = path("c_int")
    p = subprocess.Popen([LEARN, "--init", MODEL, "--out", c, *KILL_OPTS, KILL_SRC], stderr=subprocess.PIPE)
    wait_for_version(c, 5, p)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=20)
    err = err.decode()
    assert p.returncode == 0, f"exit {p.returncode}: {err[-300:]}"
    v = check_all_versions_complete(c)
    assert 5 <= v < 40, f"stopped at version {v}"
    assert err == f"rl-learn: stopped by a signal; newest checkpoint {c}/v{v:06d}\n", \
        f"with -q only the stop message: {err!r}"
    learn_ok("--resume", "--out", c, *KILL_OPTS, KILL_SRC)
    same_files(vdir(ref, 40), vdir(c, 40))


# ---- 4. groups and batches --------------------------------------------------------------------

@case
def batches_are_whole_groups_and_the_last_partial_one_needs_keep_last():
    recs = rollouts([3, 5, 2, 4, 1])
    src = write("groups.rlr", recs)
    for keep_last, steps in ((False, 2), (True, 3)):
        c, met = path(f"c_groups{int(keep_last)}"), path(f"groups{int(keep_last)}.jsonl")
        err = learn_ok("--init", MODEL, "--out", c, "--batch", "4", "--metrics", met,
                       *(["--keep-last"] if keep_last else []), src)
        m = metrics(met)
        want = [(8, 2, 8), (6, 2, 6), (1, 1, 0)][:steps]
        assert [(x["samples"], x["groups"], x["trained"]) for x in m] == want, [(x["samples"], x["groups"]) for x in m]
        assert [x["tokens"] for x in m] == [sum(len(r["ids"]) for r in b) for b in (recs[:8], recs[8:14], recs[14:])][:steps]
        assert latest(c) == f"v{steps:06d}\n"
        unused = 0 if keep_last else 1
        assert f"{steps} steps (versions 0 to {steps})" in err and f"{unused} records left unused" in err, err
        assert check_complete(c, steps)["records"] == 15 - unused
    assert m[2]["adv_zero"] == 1.0 and m[2]["grad_norm"] == 0.0, "the group of one has advantage 0"


@case
def a_batch_of_equal_rewards_has_zero_advantage_and_without_decay_changes_no_weight():
    src = write("equal.rlr", rollouts([2, 2], equal=(0, 1)))
    c, met = path("c_equal"), path("equal.jsonl")
    learn_ok("--init", MODEL, "--out", c, "--batch", "4", "--lr", "1e-2", "--weight-decay", "0", "--metrics", met, src)
    (x,) = metrics(met)
    want = {"samples": 4, "groups": 2, "trained": 0, "adv_mean": 0.0, "adv_std": 0.0, "adv_zero": 1.0,
            "loss": 0.0, "grad_norm": 0.0, "lr": 1e-2, "entropy": None, "fwd_tokens": 0}
    assert {k: x[k] for k in want} == want, x
    w0 = load_file(os.path.join(vdir(c, 0), "model.safetensors"))
    w1 = load_file(os.path.join(vdir(c, 1), "model.safetensors"))
    for k in w0:
        assert torch.equal(w0[k], w1[k]), f"{k} changed on a zero gradient without weight decay"
    assert all(not t.any() for t in load_file(os.path.join(vdir(c, 1), "optimizer.safetensors")).values())
    # with weight decay the same step scales the matrices by 1 − lr·wd and leaves the norm weights
    c2 = path("c_equal_wd")
    learn_ok("--init", MODEL, "--out", c2, "--batch", "4", "--lr", "1e-2", "--weight-decay", "0.5", src)
    w1 = load_file(os.path.join(vdir(c2, 1), "model.safetensors"))
    for k in w0:
        want = w0[k] * (1 - 1e-2 * 0.5) if w0[k].dim() == 2 else w0[k]
        assert torch.allclose(w1[k], want, rtol=1e-6, atol=0), f"{k}: not p·(1 − lr·wd)"


@case
def adv_zero_is_the_fraction_of_the_batch_in_all_equal_groups():
    src = write("mixed.rlr", rollouts([2, 4], equal=(0,)))
    c, met = path("c_mixed"), path("mixed.jsonl")
    learn_ok("--init", MODEL, "--out", c, "--batch", "6", "--metrics", met, src)
    (x,) = metrics(met)
    assert (x["samples"], x["groups"], x["trained"]) == (6, 2, 4), x
    assert abs(x["adv_zero"] - 2 / 6) < 1e-12, x["adv_zero"]
    assert x["grad_norm"] > 0


@case
def groups_drawn_sums_each_groups_drawn_over_the_batch_and_is_null_when_no_record_says():
    # rl-sample --drop-uniform: "drawn" on every record of a group, the groups
    # drawn for it (those dropped before it, and itself); a group without the
    # field counts as 1 drawn, and a batch with none at all says null
    recs = rollouts([2, 2, 2, 2, 2, 2])
    drawn = {0: 3, 1: 1, 2: 7, 3: None, 4: None, 5: None}
    for r in recs:
        if drawn[r["group"]] is not None:
            r["drawn"] = drawn[r["group"]]
    c, met = path("c_drawn"), path("drawn.jsonl")
    learn_ok("--init", MODEL, "--out", c, "--batch", "4", "--metrics", met, write("drawn.rlr", recs))
    m = metrics(met)
    # batches: groups [0, 1], [2, 3], [4, 5]
    want = [(2, 3 + 1), (2, 7 + 1), (2, None)]
    assert [(x["groups"], x["groups_drawn"]) for x in m] == want, [(x["groups"], x["groups_drawn"]) for x in m]


@case
def a_group_whose_records_disagree_on_drawn_is_refused_naming_the_record():
    recs = rollouts([2, 2])
    for r in recs:
        r["drawn"] = 2
    recs[3]["drawn"] = 5
    src = write("drawn_bad.rlr", recs)
    rc, _, err = learn("--init", MODEL, "--out", path("c_drawn_bad"), "--batch", "4", src)
    want = f'field "drawn" is 5 but 2 in the record before, of the same group 1: {src} record 3'
    assert rc == 1 and want in err, f"exit {rc}: {err[-400:]}"
    recs[3]["drawn"] = 0
    src = write("drawn_zero.rlr", recs)
    rc, _, err = learn("--init", MODEL, "--out", path("c_drawn_zero"), "--batch", "4", src)
    assert rc == 1 and 'field "drawn" is 0: a written group is one of the groups drawn (at least 1)' in err, err[-400:]


# ---- 5. bad input ------------------------------------------------------------------------------

def bad_record(name, change, *expect, index=5):
    """Records in groups of 2 with record `index` spoilt by change(record):
    exit 1, a message with each of expect and "FILE record INDEX", and the
    steps before it (batch 2: one per group completed) kept."""
    recs = rollouts([2] * 4, seed=13)
    change(recs[index])
    src = write(name + ".rlr", recs)
    c = path("c_" + name)
    rc, _, err = learn("--init", MODEL, "--out", c, "--batch", "2", "-q", src)
    assert rc == 1, f"exit {rc}: {err[-300:]}"
    assert err.startswith("rl-learn: error: ") and err.count("\n") == 1, err
    for e in (*expect, f"{src} record {index}"):
        assert e in err, f"{e!r} not in {err!r}"
    # a group is complete (and its batch of 2 trained) once a good record of the next one arrives
    assert check_all_versions_complete(c) == (index - 1) // 2, f"latest {latest(c)!r}"


@case
def a_record_without_ids_is_an_error_naming_it():
    bad_record("noids", lambda r: r.pop("ids"), 'no "ids"')


@case
def a_completion_of_no_tokens_is_a_sample_with_nothing_to_learn():
    """rl-ratio passes on a completion of no tokens (its "w" and "mask"
    empty); the learner takes it as a sample with no token to learn from: with
    the loss a mean over tokens, the step's weights are those of the batch
    without it, bit for bit, and its metrics count it as a sample."""
    recs = rollouts([4], seed=13)
    for k, r in enumerate(recs):
        r["adv"] = 1.0 if k % 2 else -1.0
    empty = {"id": 4, "group": 1, "prompt_ids": [3, 5], "ids": [], "reward": 1.0, "adv": 1.0,
             "temperature": 1.0, "ver": []}
    runs = {}
    for name, rs, batch in (("noempty", recs, "4"), ("withempty", recs + [empty], "5")):
        c, met = path("c_" + name), path(name + ".jsonl")
        learn_ok("--init", MODEL, "--out", c, "--batch", batch, "--norm", "tokens", "--metrics", met,
                 write(name + ".rlr", rs))
        runs[name] = (load_file(os.path.join(vdir(c, 1), "model.safetensors")), metrics(met))
    (w0, (m0,)), (w1, (m1,)) = runs["noempty"], runs["withempty"]
    assert (m0["samples"], m1["samples"]) == (4, 5), (m0, m1)
    for k in w0:
        assert torch.equal(w0[k], w1[k]), f"{k}: the empty completion changed the step"


@case
def a_nan_reward_is_an_error_naming_the_record():
    bad_record("nanreward", lambda r: r.__setitem__("reward", float("nan")), '"reward" is nan', index=4)


@case
def a_mask_of_the_wrong_length_is_an_error_naming_the_record():
    def change(r):
        r["ids"] = [1, 2, 3, 4]
        r["ver"] = [0] * 4
        r["mask"] = [1, 0, 1]
    bad_record("mask", change, 'field "mask" has 3 elements but "ids" has 4 (one per completion token)', index=3)


@case
def w_of_the_wrong_length_is_an_error_naming_the_record():
    def change(r):
        r["ids"] = [7, 8]
        r["ver"] = [0] * 2
        r["w"] = [1.0] * 3
    bad_record("w", change, 'field "w" has 3 elements but "ids" has 2 (one per completion token)')


def sampled(recs, seed, below=None):
    """The records as rl-sample writes them: the sampler's logp, here the
    float64 model's own within ±0.5, so that π/μ lies on both sides of 1.2;
    or, given below (a number per record), the model's own less below[i] on
    every token of record i."""
    ref = llama_ref.Llama(MODEL)
    rng = random.Random(seed)
    for i, r in enumerate(recs):
        p, ids = r["prompt_ids"], r["ids"]
        h = ref.forward(torch.tensor([p + ids[:-1]]))[0, len(p) - 1:]
        lp = torch.log_softmax(ref.logits(h), dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        r["logp"] = [rltest.f32(float(x) + (rng.uniform(-0.5, 0.5) if below is None else -below[i])) for x in lp]
    return recs


@case
def tis_in_the_learner_steps_as_rl_ratio_on_the_learners_weights_then_rl_learn():
    # rl-learn --tis C computes rl-ratio --clip C's weights from its own
    # forward: on records scored with the learner's own weights (lag 0), one
    # step of each gives the same weights and the same mismatch metrics.
    recs = sampled(rollouts([4] * 4, seed=21), 22)
    src = write("tis.rlr", recs)
    rc, scored, err = rltest.run("rl-ratio", "--model", MODEL, "--clip", "1.2", "-q", src)
    assert rc == 0, err
    a, b = path("c_tis_ratio"), path("c_tis_learn")
    # AdamW with eps 1 moves each weight by about lr·g: the step shows the gradient
    sgd = ("--batch", "16", "-q", "--adam-eps", "1", "--lr", "1", "--weight-decay", "0")
    learn_ok("--init", MODEL, "--out", a, *sgd, "--metrics", a + ".jsonl", input=scored)
    learn_ok("--init", MODEL, "--out", b, *sgd, "--metrics", b + ".jsonl", "--tis", "1.2", src)
    ma, mb = metrics(a + ".jsonl")[0], metrics(b + ".jsonl")[0]
    assert 0.1 < ma["capped"] < 0.9 and ma["capped"] == mb["capped"], (ma["capped"], mb["capped"])
    for k in ("k3", "loss", "grad_norm"):
        assert abs(ma[k] - mb[k]) <= 1e-5 * abs(ma[k]), (k, ma[k], mb[k])
    wa, wb = load_file(os.path.join(vdir(a, 1), "model.safetensors")), load_file(os.path.join(vdir(b, 1), "model.safetensors"))
    worst = 0.0
    for k in wa:
        step = (wa[k] - MODEL_TENSORS[k]).norm()
        assert step > 0, k
        worst = max(worst, float((wa[k] - wb[k]).norm() / step))
        assert (wa[k] - wb[k]).norm() <= 1e-4 * step, f"{k}: {(wa[k] - wb[k]).norm()} against a step of {step}"
    print(f"  the two steps differ by {worst:.1e} of a step; capped {ma['capped']:.3f}, k3 {ma['k3']:.4g}")


@case
def tis_refuses_records_weighed_by_rl_ratio_and_records_without_logp():
    recs = sampled(rollouts([2] * 4, seed=13), 14)
    for key, expect in (("w", '"w" is rl-ratio\'s'), ("logp_learner", '"logp_learner" is rl-ratio\'s'),
                        ("logp", 'no "logp"')):
        bad = [dict(r) for r in recs]
        if key == "logp":
            bad[5].pop("logp")
        else:
            bad[5][key] = [1.0] * len(bad[5]["ids"])
        src = write(f"tis_{key}.rlr", bad)
        rc, _, err = learn("--init", MODEL, "--out", path(f"c_tis_{key}"), "--batch", "2", "--tis", "2", "-q", src)
        assert rc == 1 and expect in err and f"{src} record 5" in err, (rc, err)
        assert check_all_versions_complete(path(f"c_tis_{key}")) == 2


@case
def tis_warns_once_when_the_mismatch_keeps_growing_over_the_steps():
    # A bf16 sampler that rounds the learner's updates away: step s's records
    # have logp = the model's log-probability less d_s on every token,
    # d_s = sqrt(2 k_s), k_s = 0.0015 * 160^((s-1)/29), so that the step's k3
    # = exp(d) - 1 - d grows from 0.0016; with --lr 0 the model stays as it
    # is. The rule (records/drift.h: the latest 5 steps' mean k3 >= 0.02 and
    # >= 4x the first 5's) is due at step 18 (steps 13-17: 0.0191; 14-18:
    # 0.0229). A steady k3 of 0.0018 (the lag alone) draws no warning.
    growing = [math.sqrt(2 * 0.0015 * 160 ** (s / 29)) for s in range(20)]
    for label, offsets in (("growing", growing), ("steady", [0.06] * 12)):
        recs = sampled(rollouts([2] * (2 * len(offsets)), seed=31), 32, below=[d for d in offsets for _ in range(4)])
        c = path(f"c_drift_{label}")
        err = learn_ok("--init", MODEL, "--out", c, "--batch", "4", "--lr", "0", "--tis", "2", "-q",
                       "--metrics", c + ".jsonl", write(f"drift_{label}.rlr", recs))
        warnings = [x for x in err.splitlines() if "warning" in x]
        k3 = [x["k3"] for x in metrics(c + ".jsonl")]
        assert len(k3) == len(offsets), k3
        if label == "steady":
            assert warnings == [] and all(abs(k - 0.0018) < 1e-4 for k in k3), (err, k3)
            continue
        first, latest = sum(k3[0:5]) / 5, sum(k3[13:18]) / 5
        assert sum(k3[12:17]) / 5 < 0.02 <= latest and abs(first - 0.00224) < 1e-5, k3
        want = (f"rl-learn: warning: the mismatch keeps growing: k3 {first:.2g} over steps 1-5, "
                f"{latest:.2g} over steps 14-18; the sampler is not following the learner's updates.")
        assert len(warnings) == 1 and warnings[0].startswith(want), f"{err}\nexpected one warning beginning {want}"
        assert "sample at f16 or f32 (rl-sample(1), Precision" in warnings[0], warnings[0]


@case
def a_token_id_outside_the_vocabulary_is_an_error_naming_the_record():
    def change(r):
        r["ids"] = [5, VOCAB, 6]
        r["ver"] = [0] * 3
    bad_record("vocab", change, f'field "ids" holds token id {VOCAB} at position 1, not below the model\'s vocabulary size {VOCAB}')


@case
def a_member_of_kind_prompts_is_an_error_and_the_steps_before_it_stay():
    data = rltest.write_stream(rollouts([2] * 3)) + \
        rltest.write_stream([{"prompt": "1+1=", "answer": "2"}], hdr=rltest.header("prompts"))
    src = rltest.tmpfile("prompts_member.rlr", data)
    c = path("c_prompts")
    rc, _, err = learn("--init", MODEL, "--out", c, "--batch", "2", "-q", src)
    assert rc == 1, f"exit {rc}: {err}"
    assert err == f'rl-learn: error: member of another kind than "rollouts" or "examples": {src}\n', err
    # groups 0 and 1 were complete (steps 1, 2); group 2 was still held
    assert check_all_versions_complete(c) == 2


@case
def a_truncated_stream_is_an_error_after_the_steps_before_the_cut():
    data = rltest.write_stream(rollouts([2] * 8, seed=3), frame_every=3)
    src = rltest.tmpfile("cut.rlr", data[:len(data) // 2])
    c = path("c_cut")
    rc, _, err = learn("--init", MODEL, "--out", c, "--batch", "2", "-q", src)
    assert rc == 1, f"exit {rc}: {err}"
    assert err.startswith("rl-learn: error: ") and "truncated stream" in err and src in err, err
    v = check_all_versions_complete(c)
    assert 1 <= v < 8, f"latest v{v}: the complete frames before the cut should give some steps"


# ---- 6. the checkpoint directory and --resume ---------------------------------------------------

@case
def out_holding_checkpoints_without_resume_is_an_error_suggesting_it():
    c = path("c_layout")   # versions 0-3 (case 1)
    rc, _, err = learn("--init", MODEL, "--out", c, LAYOUT_SRC)
    assert rc == 1, f"exit {rc}: {err}"
    assert f"{c} already holds checkpoints (latest: {c}/v000003)" in err and "--resume" in err, err
    assert latest(c) == "v000003\n" and versions(c) == [0, 1, 2, 3], "the failed run changed the checkpoints"


@case
def a_refused_out_leaves_the_metrics_file_of_the_run_that_wrote_it_alone():
    # the usual slip: the same command again without --resume
    met = path("layout_again.jsonl")
    shutil.copy(path("layout.jsonl"), met)
    rc, _, err = learn("--init", MODEL, "--out", path("c_layout"), "--metrics", met, LAYOUT_SRC)
    assert rc == 1, f"exit {rc}: {err}"
    assert len(metrics(met)) == 3, f"the refused run left {len(metrics(met))} of the 3 metrics lines"


@case
def resume_on_an_empty_or_missing_directory_is_an_error():
    empty = path("c_empty")
    os.mkdir(empty)
    for d in (empty, path("c_missing")):
        rc, _, err = learn("--resume", "--out", d, LAYOUT_SRC)
        assert rc == 1, f"exit {rc}: {err}"
        assert f"--resume: {d} holds no checkpoint" in err, err
    assert os.listdir(empty) == [], os.listdir(empty)


# ---- 7. SFT on text examples ----------------------------------------------------------------------

BOS, EOS = llama_ref.TINY_BOS, llama_ref.TINY_EOS


def sft_model():
    return llama_ref.add_tiny_tokenizer(model("sftm", vocab=448, seed=21, tie=True))


@case
def sft_on_prompt_and_completion_text_lowers_the_loss_and_keeps_the_tokenizer():
    from tokenizers import Tokenizer
    d = sft_model()
    ex = [("12+30=", "42"), ("7*6=", "42"), ("100-1=", "99"), ("3+4=", "seven")]
    lines = [json.dumps({"prompt": p, "completion": c}) for _ in range(10) for p, c in ex]
    src = rltest.tmpfile("sft.jsonl", ("\n".join(lines) + "\n").encode())
    c, met = path("c_sft"), path("sft.jsonl.metrics")
    learn_ok("--loss", "sft", "--init", d, "--out", c, "--batch", "4", "--lr", "1e-2", "--keep", "0",
             "--metrics", met, src)
    m = metrics(met)
    assert [x["step"] for x in m] == list(range(1, 11)), [x["step"] for x in m]
    # the text is encoded with the model's tokenizer: bos + prompt, completion + eos
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    enc = [(len(tok.encode(p, add_special_tokens=False).ids) + 1, len(tok.encode(c, add_special_tokens=False).ids) + 1)
           for p, c in ex]
    for x in m:
        assert (x["samples"], x["trained"], x["tokens"], x["fwd_tokens"], x["reward_mean"]) == \
            (4, 4, sum(n for _, n in enc), sum(a + b - 1 for a, b in enc), None), x
    assert m[-1]["loss"] < 0.5 * m[0]["loss"], f"loss {m[0]['loss']:.4g} -> {m[-1]['loss']:.4g}"
    src_tok = read_bytes(os.path.join(d, "tokenizer.json"))
    for v in range(11):
        assert read_bytes(os.path.join(vdir(c, v), "tokenizer.json")) == src_tok, f"v{v}: tokenizer.json"
    print(f"  sft loss {m[0]['loss']:.4f} -> {m[-1]['loss']:.4f}")


@case
def resume_after_keep_removed_the_version_it_starts_from_copies_the_tokenizer_on():
    # The resumed run starts from v3; with --keep 2 its third step removes v3,
    # and the versions after it must still get the tokenizer files.
    d = sft_model()
    lines = [json.dumps({"prompt": f"{i}+1=", "completion": str(i + 1)}) for i in range(40)]
    src = rltest.tmpfile("sft_keep.jsonl", ("\n".join(lines) + "\n").encode())
    c = path("c_keep_resume")
    opts = ("--loss", "sft", "--batch", "4", "--lr", "1e-3", "--keep", "2")
    learn_ok("--init", d, "--out", c, *opts, "--max-steps", "3", src)
    learn_ok("--resume", "--out", c, *opts, "--max-steps", "8", src)
    assert versions(c) == [7, 8], versions(c)
    src_tok = read_bytes(os.path.join(d, "tokenizer.json"))
    for v in (7, 8):
        assert read_bytes(os.path.join(vdir(c, v), "tokenizer.json")) == src_tok, f"v{v}: tokenizer.json"


@case
def text_records_without_a_tokenizer_are_an_error_naming_the_line():
    src = rltest.tmpfile("sft_notok.jsonl", b'{"prompt": "1+1=", "completion": "2"}\n')
    rc, _, err = learn("--loss", "sft", "--init", MODEL, "--out", path("c_notok"), src)
    assert rc == 1 and "no tokenizer.json" in err and f"{src} line 1" in err, f"exit {rc}: {err}"


# ---- 8. SFT on conversations with tool turns --------------------------------------------------

try:
    import transformers
    from chat_ref import reference_mask
    NO_TRANSFORMERS = ""
    transformers.logging.set_verbosity_error()
except ImportError as e:   # scripts/deps.sh test installs them into .deps/venv
    NO_TRANSFORMERS = f"{e}; run scripts/deps.sh test"


def transformers_case(fn):
    """A case that needs transformers (the reference's tokens and mask): SKIP without it."""
    if NO_TRANSFORMERS:
        print(f"SKIP {fn.__name__}: {NO_TRANSFORMERS}", flush=True)
        return fn
    return case(fn)


# Qwen2.5's template for conversations with tools, <|im_start|> and <|im_end|>
# renamed to the tiny tokenizer's special tokens <|bos|> and <|pad|>: a
# tool's results are a user turn of <tool_response> blocks (one turn for
# consecutive results), "tool_calls" are <tool_call> blocks of JSON.
TOOL_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role != 'tool' and not message.tool_calls %}"
    "{{- '<|bos|>' + message.role + '\\n' + message.content + '<|pad|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|bos|>assistant' }}{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|pad|>\\n' }}"
    "{%- else %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|bos|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|pad|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|bos|>assistant\\n' }}{%- endif %}")
END_OF_TURN = "<|pad|>"


def tool_model():
    d = llama_ref.add_tiny_tokenizer(model("toolm", vocab=448, seed=21, tie=True, max_pos=1024))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>", "eos_token": "<|eos|>",
                   "chat_template": TOOL_TEMPLATE}, f)
    return d


def tool_conversations(n, seed):
    """Calculator conversations: [system], a question, one or two rounds of
    calls (in the content as the model writes them, or as "tool_calls"; at
    times two at once) and their results, the answer; every third one a
    second question after it, answered without a tool."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs = [{"role": "system", "content": "You can call a calculator."}] if i % 2 else []
        for q in range(1 + (i % 3 == 0)):
            a, b = rng.randrange(100, 1000), rng.randrange(10, 100)
            msgs.append({"role": "user", "content": f"What is {a} * {b} + {b}?"})
            if q == 1:
                msgs.append({"role": "assistant", "content": f"{a * b + b}, as before."})
                continue
            first = [(f"{a} * {b}", a * b), (f"{a} + {b}", a + b)] if i % 4 == 1 else [(f"{a} * {b}", a * b)]
            for calls in (first, [(f"{a * b} + {b}", a * b + b)]):   # (expression, result)
                if rng.random() < 0.5:
                    text = "\n".join('<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n'
                                     '</tool_call>' % e for e, _ in calls)
                    msgs.append({"role": "assistant", "content": text})
                else:
                    msgs.append({"role": "assistant", "content": "", "tool_calls": [
                        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": e}}}
                        for e, _ in calls]})
                msgs += [{"role": "tool", "content": str(r)} for _, r in calls]
            msgs.append({"role": "assistant", "content": f"The answer is {a * b + b}."})
        out.append({"messages": msgs})
    return out


def ref_sft_terms(ref, encoded, every=False):
    """Σ mask·log π(a_t) and Σ mask of each conversation (ids, mask), float64:
    with every, the mask is 1 on every token from the first assistant token
    on (the tools' results, the user's words and the template's too)."""
    terms = []
    for ids, mask in encoded:
        if every:
            first = mask.index(1)
            mask = [0] * first + [1] * (len(ids) - first)
        h = ref.forward(torch.tensor([ids[:-1]]))[0]
        lp = torch.log_softmax(ref.logits(h), dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        m = torch.tensor(mask[1:], dtype=torch.float64)
        terms.append(((m * lp).sum(), float(m.sum())))
    return terms


def tool_examples(d, n, seed):
    """n tool conversations, their JSON lines file, and each one's (ids, mask)
    from transformers' tokens and the reference mask."""
    convs = tool_conversations(n, seed)
    src = rltest.tmpfile(f"tools{seed}.jsonl", "".join(json.dumps(c) + "\n" for c in convs).encode())
    tok = transformers.AutoTokenizer.from_pretrained(d)
    encoded = [reference_mask(tok, c["messages"], END_OF_TURN) for c in convs]
    assert all(e is not None for e in encoded)
    # tokens of mask 0 (the tools' results, the user) between assistant turns
    assert all(0 in mask[mask.index(1):] for _, mask in encoded)
    return src, encoded


@transformers_case
def sft_on_tool_conversations_has_the_loss_of_the_assistants_tokens_alone():
    d = tool_model()
    src, encoded = tool_examples(d, 12, seed=2)
    rc, packed, err = rltest.run("rl-cat", "--pack", "--kind", "examples", src)
    assert rc == 0, err
    c, c2, met = path("c_tools"), path("c_tools_packed"), path("tools.metrics")
    opts = ("--loss", "sft", "--init", d, "--batch", "12", "--lr", "1e-3", "-q")
    learn_ok(*opts, "--out", c, "--metrics", met, src)
    learn_ok(*opts, "--out", c2, rltest.tmpfile("tools.rlr", packed))
    same_files(vdir(c, 1), vdir(c2, 1), names=("model.safetensors",))
    (m,) = metrics(met)
    # the prompt is what precedes the first assistant token, the completion the rest
    firsts = [mask.index(1) for _, mask in encoded]
    assert (m["samples"], m["tokens"], m["fwd_tokens"]) == \
        (12, sum(len(ids) - f for (ids, _), f in zip(encoded, firsts)), sum(len(ids) - 1 for ids, _ in encoded)), m
    ref = llama_ref.Llama(d)
    with torch.no_grad():
        want = -sum(float(s) for s, _ in ref_sft_terms(ref, encoded)) / 12   # --norm seqs
        every = -sum(float(s) for s, _ in ref_sft_terms(ref, encoded, every=True)) / 12
    assert abs(m["loss"] - want) <= 1e-5 * abs(want), f"loss {m['loss']} vs reference {want}"
    assert abs(every - want) > 0.1 * abs(want), "the loss over every token is not told apart"
    print(f"  loss {m['loss']:.6f}, reference {want:.6f} (over every token after the prompt: {every:.6f})")


@transformers_case
def sft_on_tool_conversations_gives_the_tools_and_users_tokens_no_gradient():
    # AdamW's first step with eps 1, lr 1 and no decay or clipping moves each
    # weight by Δ = −g/(|g| + 1): the step gives the gradient back,
    # g = −Δ/(1 − |Δ|). --norm tokens: Z is the number of the assistant's tokens.
    d = tool_model()
    src, encoded = tool_examples(d, 12, seed=3)
    c = path("c_tools_grad")
    learn_ok("--loss", "sft", "--init", d, "--out", c, "--batch", "12", "--norm", "tokens", "--lr", "1",
             "--adam-eps", "1", "--weight-decay", "0", "--grad-clip", "0", "-q", src)
    w0 = load_file(os.path.join(d, "model.safetensors"))
    w1 = load_file(os.path.join(vdir(c, 1), "model.safetensors"))
    grads = {}
    for every in (False, True):
        ref = llama_ref.Llama(d)
        for t in ref.w.values():
            t.requires_grad_(True)
        terms = ref_sft_terms(ref, encoded, every)
        (-sum(s for s, _ in terms) / sum(n for _, n in terms)).backward()
        grads[every] = {k: t.grad for k, t in ref.w.items()}
    worst, nearest_every = 0.0, math.inf
    for k, want in grads[False].items():
        step = w1[k].double() - w0[k].double()
        got = -step / (1 - step.abs())
        e = float((got - want).norm() / want.norm())
        assert e <= 1e-4, f"{k}: relative error {e:.2e} against the gradient of the assistant's tokens alone"
        worst = max(worst, e)
        nearest_every = min(nearest_every, float((grads[True][k] - want).norm() / want.norm()))
    assert nearest_every > 0.1, "the gradient over every token is not told apart"
    print(f"  worst relative gradient error {worst:.1e}; over every token the gradients differ by >= {nearest_every:.2f}")


# ---- 9. random initialisation --------------------------------------------------------------------

@case
def config_and_seed_give_reproducible_random_weights_that_differ_between_seeds():
    cfg = os.path.join(MODEL, "config.json")
    runs = {}
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        c = path("c_rand_" + name)
        learn_ok("--config", cfg, "--seed", seed, "--out", c, input=b"")
        assert latest(c) == "v000000\n"
        assert check_complete(c, 0)["seed"] == int(seed)
        assert not os.path.exists(os.path.join(vdir(c, 0), "tokenizer.json"))
        runs[name] = vdir(c, 0)
    same_files(runs["a"], runs["b"])
    wa, wc = (load_file(os.path.join(runs[k], "model.safetensors")) for k in "ac")
    for k, t in wa.items():
        if k.endswith("norm.weight"):
            assert torch.equal(t, torch.ones_like(t)), f"{k}: norm weights are 1"
        else:
            assert not torch.equal(t, wc[k]), f"{k}: seeds 5 and 6 gave the same values"
            assert abs(t.std().item() - 0.02) < 0.1 * 0.02, f"{k}: std {t.std().item():.4f}, expected 0.02"
    c = path("c_rand_std")
    learn_ok("--config", cfg, "--init-std", "0.05", "--out", c, input=b"")
    w = load_file(os.path.join(vdir(c, 0), "model.safetensors"))["model.embed_tokens.weight"]
    assert abs(w.std().item() - 0.05) < 0.005, f"--init-std 0.05: std {w.std().item():.4f}"



@case
def a_config_beside_a_tokenizer_makes_a_model_with_that_tokenizer():
    tiny = os.path.join(rltest.ROOT, "models", "tiny")
    c = path("c_tiny")
    learn_ok("--config", os.path.join(tiny, "config.json"), "--out", c, input=b"")
    same = read_bytes(os.path.join(vdir(c, 0), "tokenizer.json")) == read_bytes(os.path.join(tiny, "tokenizer.json"))
    assert same, "models/tiny/tokenizer.json did not go into v000000"


# ---- 10. starting from a checkpoint ------------------------------------------------------------

@case
def a_run_from_a_checkpoint_carries_its_version_on_and_counts_its_own_steps():
    # SFT to version 3, then a run --init from it: the sampler, given the same
    # directory, reads version 3, so the learner's versions must carry on from
    # 3 (lag 0 for its tokens); the schedule and --max-steps count this run's steps.
    sft, rl, met = path("c_from_sft"), path("c_from_rl"), path("from_rl.jsonl")
    learn_ok("--init", MODEL, "--out", sft, "--batch", "4", "--max-steps", "3", LAYOUT_SRC)
    assert latest(sft) == "v000003\n"
    recs = rollouts([2] * 6, seed=9)
    for r in recs:
        r["ver"] = [3] * len(r["ids"])
    src = write("from_sft.rlr", recs)
    err = learn_ok("--init", sft, "--out", rl, "--batch", "4", "--lr", "1e-2", "--warmup", "4", "--keep", "0",
                   "--max-steps", "2", "--metrics", met, src)
    assert versions(rl) == [3, 4, 5], f"versions {versions(rl)}"
    w3 = load_file(os.path.join(vdir(rl, 3), "model.safetensors"))
    for k, t in load_file(os.path.join(vdir(sft, 3), "model.safetensors")).items():
        assert torch.equal(w3[k], t), f"{k}: v000003 of the new run is not the --init weights"
    assert all(not t.any() for t in load_file(os.path.join(vdir(rl, 3), "optimizer.safetensors")).values())
    assert [(check_complete(rl, v)["version"], check_complete(rl, v)["step"]) for v in (3, 4, 5)] == \
        [(3, 0), (4, 1), (5, 2)]
    m = metrics(met)
    got = [(x["step"], x["version"], x["lr"], x["lag_mean"]) for x in m]
    assert got == [(1, 4, 1e-2 * 1 / 4, 0.0), (2, 5, 1e-2 * 2 / 4, 1.0)], got
    assert "2 steps (versions 3 to 5)" in err, err
    # resumed, it goes on counting: one more step to --max-steps 3
    learn_ok("--resume", "--out", rl, "--batch", "4", "--lr", "1e-2", "--warmup", "4", "--max-steps", "3",
             "--metrics", met, src)
    assert latest(rl) == "v000006\n" and check_complete(rl, 6)["step"] == 3
    assert metrics(met)[-1]["lr"] == 1e-2 * 3 / 4

@case
def a_group_is_complete_when_it_holds_the_headers_group_size_without_waiting_for_the_next():
    # rl-sample --sync sends nothing more until the weights trained on the
    # batch arrive: the learner must take its step on the batch's last group
    # as soon as that group has sampling.group records (the header says 2).
    ck = path("ck-groupsize")
    hdr = rltest.header(sampling={"group": 2})
    objs = rltest.member_bytes(rollouts([2, 2, 2]), hdr)   # header, 3 groups of 2, trailer
    p = subprocess.Popen([LEARN, "--init", MODEL, "--out", ck, "--batch", "4", "-q"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        p.stdin.write(b"".join(objs[:5]))   # the header and two groups
        p.stdin.flush()
        deadline = time.time() + 20
        while time.time() < deadline and not os.path.exists(os.path.join(ck, "v000001")):
            time.sleep(0.05)
        assert os.path.exists(os.path.join(ck, "v000001")), "no step on two complete groups of 2 while input stays open"
        assert not os.path.exists(os.path.join(ck, "v000002"))
        p.stdin.write(b"".join(objs[5:]))
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    assert p.returncode == 0, p.stderr.read().decode()


if __name__ == "__main__":
    rltest.finish()
