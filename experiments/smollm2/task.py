#!/usr/bin/env python3
"""The task of the SmolLM2 experiment: arithmetic questions in the chat
format, with verifiable answers.

    python3 experiments/smollm2/task.py --out DIR [--kind K] [--seed S] [--train N] [--test N]

writes into DIR

  test.jsonl   {"messages": [{"role": "user", "content": "What is 47 + 85? Answer with just the number."}],
                "answer": "132"}                                          held-out questions
  train.jsonl  the same form: the prompts RL samples from
  task.json    {"kind": ..., "description": ..., "seed": ..., "train": N, "test": N}: what was made

Kinds (the experiment's Makefile chooses one by the base model's accuracy):
  add2  a + b, 10 <= a, b < 100
  add3  a + b, 100 <= a, b < 1000
  mul   a * b, 10 <= a < 100, 2 <= b < 10
  mix   add3 and mul, half each
No question of test.jsonl is in train.jsonl (a question is the triple a, op,
b). The numbers come from experiments/arith.py's generator, so the files
depend only on the options.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from arith import Lcg  # noqa: E402

KINDS = {"add2": "a + b with 10 <= a, b < 100",
         "add3": "a + b with 100 <= a, b < 1000",
         "mul": "a * b with 10 <= a < 100, 2 <= b < 10",
         "mix": "a + b with 100 <= a, b < 1000, or a * b with 10 <= a < 100, 2 <= b < 10, half each"}


def draw(rng, kind):
    if kind == "mix":
        kind = "add3" if rng.below(2) else "mul"
    if kind == "add2":
        return 10 + rng.below(90), "+", 10 + rng.below(90)
    if kind == "add3":
        return 100 + rng.below(900), "+", 100 + rng.below(900)
    return 10 + rng.below(90), "*", 2 + rng.below(8)


def question(a, op, b):
    value = a + b if op == "+" else a * b
    text = f"What is {a} {op} {b}? Answer with just the number."
    return {"messages": [{"role": "user", "content": text}], "answer": str(value)}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--kind", choices=sorted(KINDS), default="add2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=200)
    o = ap.parse_args(argv)
    rng = Lcg(o.seed)
    test = []
    seen = set()
    while len(test) < o.test:
        q = draw(rng, o.kind)
        if q not in seen:
            seen.add(q)
            test.append(q)
    train = []
    while len(train) < o.train:
        q = draw(rng, o.kind)
        if q not in seen:
            train.append(q)
    os.makedirs(o.out, exist_ok=True)
    for name, qs in (("test", test), ("train", train)):
        with open(os.path.join(o.out, f"{name}.jsonl"), "w") as f:
            for q in qs:
                f.write(json.dumps(question(*q)) + "\n")
    with open(os.path.join(o.out, "task.json"), "w") as f:
        json.dump({"kind": o.kind, "description": KINDS[o.kind], "seed": o.seed, "train": o.train, "test": o.test}, f)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
