#!/usr/bin/env python3
"""The arithmetic task of the demo and the experiments: problems with
verifiable answers, and worked examples for the SFT warm-up.

    python3 experiments/arith.py --out DIR [--seed S] [--train N] [--test N] [--sft N]

writes three JSON-lines files into DIR:

  test.jsonl   {"prompt": "What is 347 + 285?", "answer": "632"}   held-out problems
  train.jsonl  the same form: the prompts RL samples from
  sft.jsonl    {"prompt": ..., "completion": " 7+5=12, 4+8+1=13, 3+2+1=6. Answer: 632",
                "answer": "632"}: worked examples, digit by digit with carries

A problem is a + b with a, b < 1000, or a * b with a < 1000 and b < 10, each
half of the time. No problem of test.jsonl is in train.jsonl or sft.jsonl
(a problem is the triple a, op, b), so the held-out accuracy measures
arithmetic, not memory. Within a file problems may repeat (train and sft
draw with replacement from what the test set left).

The worked completion adds (or multiplies) digit by digit from the units up,
each step "x+y+carry=s" or "x*b+carry=s", then "Answer: N": its last number
is the answer, so rl-sample's `number` verifier scores it 1. Only Python's
standard library is used, and the output depends only on the options (a
fixed generator, not Python's `random`, so it is the same on every Python).
"""
import argparse
import json
import os
import sys


class Lcg:
    """A 64-bit linear congruential generator (Knuth's MMIX constants)."""

    def __init__(self, seed):
        self.state = (seed * 2862933555777941757 + 3037000493) % (1 << 64)

    def below(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.state >> 33) % n


def draw(rng):
    """One problem (a, op, b)."""
    if rng.below(2):
        return rng.below(1000), "+", rng.below(1000)
    return rng.below(1000), "*", rng.below(10)


def answer(a, op, b):
    return a + b if op == "+" else a * b


def prompt(a, op, b):
    return f"What is {a} {op} {b}?"


def worked(a, op, b):
    """The worked completion: digit steps from the units up, then the answer."""
    da = [int(c) for c in str(a)][::-1]
    db = [int(c) for c in str(b)][::-1]
    steps, carry = [], 0
    n = max(len(da), len(db)) if op == "+" else len(da)
    for i in range(n):
        x = da[i] if i < len(da) else 0
        if op == "+":
            y = db[i] if i < len(db) else 0
            s = x + y + carry
            head = f"{x}+{y}"
        else:
            s = x * b + carry
            head = f"{x}*{b}"
        steps.append(head + (f"+{carry}" if carry else "") + f"={s}")
        carry = s // 10
    return " " + ", ".join(steps) + f". Answer: {answer(a, op, b)}"


def main():
    ap = argparse.ArgumentParser(description="Write the arithmetic task: test, train and worked SFT examples.")
    ap.add_argument("--out", required=True, help="directory to write test.jsonl, train.jsonl, sft.jsonl into")
    ap.add_argument("--seed", type=int, default=1, help="seed of the draw (default 1)")
    ap.add_argument("--test", type=int, default=500, help="held-out problems (default 500, all distinct)")
    ap.add_argument("--train", type=int, default=20000, help="RL prompts (default 20000)")
    ap.add_argument("--sft", type=int, default=40000, help="worked examples (default 40000)")
    o = ap.parse_args()
    if min(o.test, o.train, o.sft) < 0 or o.seed < 0:
        ap.error("counts and the seed must be non-negative")
    if o.test > 100000:
        ap.error("--test: at most 100000 distinct problems")
    os.makedirs(o.out, exist_ok=True)
    rng = Lcg(o.seed)
    test, held = [], set()
    while len(test) < o.test:
        p = draw(rng)
        if p not in held:
            held.add(p)
            test.append(p)

    def fresh(n):
        out = []
        while len(out) < n:
            p = draw(rng)
            if p not in held:
                out.append(p)
        return out

    train, sft = fresh(o.train), fresh(o.sft)
    files = {
        "test.jsonl": [{"prompt": prompt(*p), "answer": str(answer(*p))} for p in test],
        "train.jsonl": [{"prompt": prompt(*p), "answer": str(answer(*p))} for p in train],
        "sft.jsonl": [{"prompt": prompt(*p), "completion": worked(*p), "answer": str(answer(*p))} for p in sft],
    }
    for name, rows in files.items():
        tmp = os.path.join(o.out, name + ".tmp")
        with open(tmp, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, os.path.join(o.out, name))
    print(f"arith.py: {o.out}: {len(test)} held-out problems, {len(train)} RL prompts, {len(sft)} worked examples "
          f"(seed {o.seed})", file=sys.stderr)


if __name__ == "__main__":
    main()
