#!/usr/bin/env python3
"""The report of bench/agent.sh: rlpipe's and TRL's runs on the calculator
task, their held-out success by step and by time, and the time to targets.

    agent_report.py --warm EVAL --init-version V --rlpipe DIR --trl DIR
                    --seeds "1 2 3" --targets "0.9 0.95"

EVAL: the warm start's evaluation (one evaluate.py line: step 0 of every run).
V: the warm start's version (rlpipe's version V + n is its step n).
DIR/calc-s<SEED>: rlpipe's runs (learn.jsonl, eval.jsonl) and TRL's
(train.jsonl, run.json, eval.jsonl); a run missing is reported as such.
Markdown on stdout. Standard library only.
"""
import argparse
import json
import os
import re
import statistics
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def step_of(model, init):
    """The step of an evaluated checkpoint from its name vNNNNNN."""
    m = re.search(r"v(\d+)/?$", model)
    if not m:
        sys.exit(f"agent_report.py: {model}: not a vNNNNNN checkpoint")
    return int(m.group(1)) - init


class Run:
    """steps, step_s (median), wall_s, evals [(step, seconds, success, calls)]."""

    def __init__(self, engine, seed, d, init, warm):
        self.engine, self.seed, self.ok = engine, seed, False
        ev = os.path.join(d, "eval.jsonl")
        if not os.path.isfile(ev):
            return
        if engine == "rlpipe":
            steps = lines(os.path.join(d, "learn.jsonl"))
            at = {x["step"]: x["elapsed"] for x in steps}
            el = [x["elapsed"] for x in steps]
            self.step_s = statistics.median(b - a for a, b in zip(el, el[1:])) if len(el) > 1 else el[0]
            self.wall_s, base = el[-1], init
        else:
            steps = lines(os.path.join(d, "train.jsonl"))
            at = {x["step"]: x["elapsed_s"] for x in steps}
            self.step_s = statistics.median(x["step_s"] for x in steps)
            with open(os.path.join(d, "run.json")) as f:
                self.wall_s = json.load(f)["elapsed_s"]
            base = 0
        self.steps = steps[-1]["step"]
        self.evals = [(0, 0.0, warm["success"], warm["calls"])]
        for e in lines(ev):
            n = step_of(e["model"], base)
            if n > 0:
                self.evals.append((n, at[n], e["success"], e["calls"]))
        self.evals.sort()
        self.ok = True

    def first(self, target):
        """(step, seconds) of the first evaluation at or above target, or None."""
        return next(((n, t) for n, t, s, _ in self.evals if s >= target - 1e-12), None)


def fmt(x, nd=1):
    return f"{x:.{nd}f}"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for a in ("--warm", "--rlpipe", "--trl", "--seeds", "--targets"):
        ap.add_argument(a, required=True)
    ap.add_argument("--init-version", type=int, required=True)
    o = ap.parse_args(argv)
    warm = lines(o.warm)[-1]
    seeds = [int(s) for s in o.seeds.split()]
    targets = [float(t) for t in o.targets.split()]
    runs = {(e, s): Run(e, s, os.path.join(d, f"calc-s{s}"), o.init_version, warm)
            for e, d in (("rlpipe", o.rlpipe), ("TRL", o.trl)) for s in seeds}
    out = [f"Warm start (step 0 of every run): held-out success {fmt(warm['success'], 3)}, "
           f"tool calls per question {fmt(warm['calls'], 2)}.", "",
           "| engine | seed | steps | s/step (median) | wall s | held-out success at the end | "
           "held-out success at step (seconds, tool calls per question) |",
           "|---|---|---|---|---|---|---|"]
    for (e, s), r in runs.items():
        if not r.ok:
            out.append(f"| {e} | {s} | not run | | | | |")
            continue
        ev = ", ".join(f"{n}: {fmt(x, 3)} ({fmt(t, 0)} s" + ("" if c is None else f", {fmt(c, 2)}") + ")"
                       for n, t, x, c in r.evals)
        out.append(f"| {e} | {s} | {r.steps} | {fmt(r.step_s)} | {fmt(r.wall_s, 0)} | {fmt(r.evals[-1][2], 3)} | {ev} |")
    out += ["", "| success ≥ | seed | rlpipe: step, s | TRL: step, s | TRL's time over rlpipe's |", "|---|---|---|---|---|"]
    for tg in targets:
        ratios = []
        for s in seeds:
            a, b = runs[("rlpipe", s)], runs[("TRL", s)]
            fa = a.first(tg) if a.ok else None
            fb = b.first(tg) if b.ok else None
            cell = lambda r, f: "not run" if not r.ok else "not reached" if f is None else f"{f[0]}, {fmt(f[1], 0)}"
            if fa and fb and fa[1] > 0:
                ratio = fb[1] / fa[1]
                ratios.append(ratio)
                rs = f"{fmt(ratio, 2)}×"
            elif fa and b.ok and not fb:
                rs = f"> {fmt(b.wall_s / fa[1], 2)}× (TRL did not reach it in {fmt(b.wall_s, 0)} s)"
            else:
                rs = "—"
            out.append(f"| {tg} | {s} | {cell(a, fa)} | {cell(b, fb)} | {rs} |")
        if len(ratios) == len(seeds):
            out.append(f"| {tg} | median | | | **{fmt(statistics.median(ratios), 2)}×** |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
