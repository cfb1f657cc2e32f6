#!/usr/bin/env python3
"""step_work.py: the work of each RL step of runs of experiments/lib/rl-run.sh,
its time at the machine's sgemm rate, and where the cores went (bench/step.sh).

usage: step_work.py --sgemm GFLOPS --model DIR NAME=RUN [NAME=RUN ...]

For each run RUN (rl-run.sh's output: learn.jsonl, rollouts.rlr, and NAME's
CPU samples in RUN/../NAME.cpu, bench/monitor.py's lines "seconds tool
cpu-seconds" and "seconds idle idle-seconds"), step k's
work is counted from the records of its batch (rollouts.rlr, in the order
rl-learn read them), in matrix-product FLOP (2 per multiply-add):
  - a token through the layers: 2 x (the layer matrices' parameters), plus
    attention's 4 x heads x head_dim x (its position + 1) a layer;
  - a row of the output layer: 2 x vocab x hidden, only where a token is
    drawn (sampling) or scored (rl-ratio, rl-learn);
  - sampling, scoring and learning each: a group's prompt once, then each
    sample's completion tokens but its last (which is drawn, not fed);
  - scoring: the groups rl-ratio scored (their records carry logp_learner;
    rl-ratio --skip-uniform passes the groups of equal rewards on unscored);
  - learning: the groups whose samples have a non-zero GRPO advantage (the
    rewards not all equal), forward and backward (3 forwards).
The limit is that work at the sgemm rate; "of limit" is the limit over the
step's wall time. CPU: each tool's cores in use over the step (CPU time over
wall time); "idle" the processors' idle time (or waiting for I/O) over the
wall time, and "other" the machine's cores less the tools' and idle: what
else ran (tee, the kernel's writeback, the monitor; other jobs: measure on
a quiet machine).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import msgpack  # noqa: E402
import rltest  # noqa: E402

TOOLS = ("rl-sample", "rl-ratio", "rl-learn", "rl-sync")


def die(msg):
    sys.stderr.write(f"step_work.py: {msg}\n")
    sys.exit(1)


def model_flops(cfg):
    C, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HS = cfg.get("head_dim") or C // NH
    body = 2.0 * L * (C * NH * HS + 2 * C * NKV * HS + NH * HS * C + 3 * C * F)
    att = 4.0 * L * NH * HS   # per key attended to
    head = 2.0 * cfg["vocab_size"] * C
    return body, att, head


def tokens_flop(body, att, first, count):
    """Tokens at positions first .. first + count - 1 through the layers."""
    if count <= 0:
        return 0.0
    keys = count * (first + 1) + count * (count - 1) / 2
    return body * count + att * keys


def batch_work(recs, group, fl):
    body, att, head = fl
    sample = score = learn = 0.0
    trained = 0
    for g0 in range(0, len(recs), group):
        grp = recs[g0:g0 + group]
        P = len(grp[0]["prompt_ids"])
        gen = tokens_flop(body, att, 0, P)
        for r in grp:
            n = len(r["ids"])
            gen += tokens_flop(body, att, P, n - 1) + head * n
        sample += gen
        if all("logp_learner" in r for r in grp):
            score += gen
        rewards = [r.get("reward") for r in grp]
        if len(set(rewards)) > 1:   # every sample has an advantage; the prompt computed once
            learn += 3 * gen
            trained += len(grp)
    return sample, score, learn, trained


def cpu_series(path):
    series = {t: [] for t in TOOLS + ("idle",)}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[1] in series:
                series[parts[1]].append((float(parts[0]), float(parts[2])))
    return series


def cpu_at(points, t):
    """CPU seconds of a tool at time t: the last sample at or before t (0 before its first)."""
    v = 0.0
    for tt, c in points:
        if tt > t:
            break
        v = c
    return v


def report(name, run, group, fl, sgemm, cores):
    learn = [json.loads(line) for line in open(os.path.join(run, "learn.jsonl"))]
    if len(learn) < 2:
        die(f"{run}: fewer than 2 steps in learn.jsonl")
    with open(os.path.join(run, "rollouts.rlr"), "rb") as f:   # cut where the pipeline stopped
        up = msgpack.Unpacker(raw=False)
        up.feed(rltest.decompress(f.read(), allow_cut=True))
    recs = [o for o in up if isinstance(o, dict) and "ids" in o and "prompt_ids" in o]
    series = cpu_series(os.path.join(os.path.dirname(run), name + ".cpu"))
    if not series["rl-learn"] or not series["idle"]:
        die(f"{name}: no CPU samples of rl-learn, or no idle time (bench/monitor.py's lines)")
    t0 = series["rl-learn"][0][0]   # rl-learn's elapsed counts from its start (within one sample)
    print(f"{name}: step, wall s, work TFLOP (sample + score + learn), limit s, of limit, rl-learn's step and "
          f"checkpoint s (its metrics' seconds and save_s), cores in use (sample / ratio / learn / sync), cores "
          f"idle, cores taken by other work")
    print("| step | wall s | TFLOP | sample | score | learn | limit s | of limit | step s | ckpt s | rl-sample | rl-ratio "
          "| rl-learn | rl-sync | idle | other |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows, off, prev = [], 0, 0.0
    for m in learn:
        n = m["samples"]
        s, c, l, trained = batch_work(recs[off:off + n], group, fl)
        off += n
        if trained != m["trained"]:
            die(f"{run} step {m['step']}: {trained} records with an advantage, rl-learn says {m['trained']}")
        wall = m["elapsed"] - prev
        a, b = t0 + prev, t0 + m["elapsed"]
        use = {t: (cpu_at(series[t], b) - cpu_at(series[t], a)) / wall for t in TOOLS}
        idle = (cpu_at(series["idle"], b) - cpu_at(series["idle"], a)) / wall
        other = max(0.0, cores - idle - sum(use.values()))
        work = s + c + l
        limit = work / (sgemm * 1e9)
        ckpt = m.get("save_s", float("nan"))   # (rl-learn before save_s: not reported)
        row = dict(step=m["step"], wall=wall, work=work, s=s, c=c, l=l, limit=limit, frac=limit / wall, use=use,
                   idle=idle, other=other, learn=m["seconds"], ckpt=ckpt)
        rows.append(row)
        prev = m["elapsed"]
        print(f"| {m['step']} | {wall:.1f} | {work / 1e12:.2f} | {s / 1e12:.2f} | {c / 1e12:.2f} | {l / 1e12:.2f} "
              f"| {limit:.1f} | {limit / wall:.2f} | {m['seconds']:.1f} | {ckpt:.1f} | " +
              " | ".join(f"{use[t]:.2f}" for t in TOOLS) + f" | {idle:.2f} | {other:.2f} |")
    later = rows[1:]
    keys = ("wall", "work", "limit", "frac", "idle", "other", "learn", "ckpt")
    med = {k: statistics.median(r[k] for r in later) for k in keys}
    use = {t: statistics.median(r["use"][t] for r in later) for t in TOOLS}
    last = rows[-1]["step"]
    print(f"| median 2..{last} | {med['wall']:.1f} | {med['work'] / 1e12:.2f} | | | | {med['limit']:.1f} "
          f"| {med['frac']:.2f} | {med['learn']:.1f} | {med['ckpt']:.1f} | " +
          " | ".join(f"{use[t]:.2f}" for t in TOOLS) + f" | {med['idle']:.2f} | {med['other']:.2f} |")
    # Steps in flight vary (a step may find its records ready): the whole
    # span's limit over its wall time says more than a median step.
    wall, limit = sum(r["wall"] for r in later), sum(r["limit"] for r in later)
    print(f"| all 2..{last}, a step | {wall / len(later):.1f} | | | | | {limit / len(later):.1f} | {limit / wall:.2f} "
          f"| | | | | | | | |")
    print()
    print(f"RESULT what=step_{name} median_s={med['wall']:.3f} mean_s={wall / len(later):.3f} "
          f"work_tflop={med['work'] / 1e12:.4f} limit_s={med['limit']:.3f} of_limit={med['frac']:.3f} "
          f"of_limit_all={limit / wall:.3f} idle_cores={med['idle']:.3f} other_cores={med['other']:.3f} ckpt_s={med['ckpt']:.3f}")
    print()
    return med["wall"], wall / len(later)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sgemm", type=float, required=True, help="GFLOP/s")
    ap.add_argument("--model", required=True)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("runs", nargs="+", metavar="NAME=RUN")
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        fl = model_flops(json.load(f))
    walls = {}
    for spec in a.runs:
        name, _, run = spec.partition("=")
        if not run:
            die(f"{spec}: not NAME=RUN")
        walls[name] = report(name, run, a.group, fl, a.sgemm, os.cpu_count())
    if "inflight" in walls and "sync" in walls:
        (mi, ai), (ms, as_) = walls["inflight"], walls["sync"]
        print(f"in flight over --sync: {ms / mi:.2f}x the steps per second by the median step ({mi:.1f} s against "
              f"{ms:.1f} s), {as_ / ai:.2f}x by the mean ({ai:.1f} s against {as_:.1f} s)")


if __name__ == "__main__":
    main()
