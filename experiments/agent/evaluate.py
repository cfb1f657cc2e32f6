#!/usr/bin/env python3
"""Held-out success of models in a multi-turn environment, greedy, in f32.

    evaluate.py --env CMD [--max-turns N] [--max-new-tokens N] TEST OUT MODEL...

For each model (a model or checkpoint directory): rl-sample --temperature 0
--env CMD on the conversations of TEST, its records read back by rl-cat
--json. Appends one JSON line per model to OUT:
    {"model": DIR, "version": V, "success": S, "accuracy": S, "first": F, "turns": T,
     "calls": C, "samples": N, "failed": K}
success: the share of rollouts with reward > 0; first: of those right at
their first turn (the environment's info "first", when it gives one); turns:
the mean turns taken; calls: the mean tool calls (info "calls"); accuracy:
success again, under the name lib/report.py reads; failed:
rollouts the environment failed (env_error). The conversations of the first
three rollouts go to OUT's folder as examples-vV.json. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys

BIN = os.environ.get("RLPIPE_BIN", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bin"))


def evaluate(o, model):
    sample = subprocess.Popen([os.path.join(BIN, "rl-sample"), "-q", "--model", model, "--temperature", "0",
                               "--seed", "7", "--env", o.env, "--max-turns", str(o.max_turns),
                               "--max-new-tokens", str(o.max_new_tokens), o.test], stdout=subprocess.PIPE)
    cat = subprocess.run([os.path.join(BIN, "rl-cat"), "-q", "--json"], stdin=sample.stdout, stdout=subprocess.PIPE)
    sample.stdout.close()
    if sample.wait() != 0 or cat.returncode != 0:
        sys.exit(f"evaluate.py: {model}: rl-sample exited {sample.returncode}, rl-cat {cat.returncode}")
    recs = [json.loads(line) for line in cat.stdout.decode().splitlines() if line.strip()]
    if not recs:
        sys.exit(f"evaluate.py: {model}: no records")
    n = len(recs)
    info = [r.get("info") or {} for r in recs]
    line = {"model": model, "version": min(r["ver"][0] for r in recs),
            "success": sum(r["reward"] > 0 for r in recs) / n,
            "first": sum(i.get("first", 0) for i in info) / n if any("first" in i for i in info) else None,
            "turns": sum(len(r["turns"]) for r in recs) / n,
            "calls": sum(i.get("calls", 0) for i in info) / n if any("calls" in i for i in info) else None,
            "samples": n, "failed": sum("env_error" in r for r in recs)}
    line["accuracy"] = line["success"]
    with open(os.path.join(os.path.dirname(os.path.abspath(o.out)), f"examples-v{line['version']}.json"), "w") as f:
        json.dump([{"messages": r["messages"], "reward": r["reward"]} for r in recs[:3]], f, indent=1,
                  ensure_ascii=False)
    return line


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", required=True)
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("test")
    ap.add_argument("out")
    ap.add_argument("models", nargs="+")
    o = ap.parse_args(argv)
    for m in o.models:
        line = evaluate(o, m)
        with open(o.out, "a") as f:
            f.write(json.dumps(line) + "\n")
        print(f"evaluate.py: {m}: version {line['version']}: success {line['success']:.3f}, first {line['first']}, "
              f"turns {line['turns']:.2f}, calls {line['calls']} ({line['samples']} rollouts, {line['failed']} failed)",
              file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
