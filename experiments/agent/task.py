#!/usr/bin/env python3
"""The tasks of the agent experiment: conversations with an environment.

    python3 experiments/agent/task.py --out DIR [--seed S] [--train N] [--test N] [--sft N]

writes into DIR

  calc/train.jsonl, calc/test.jsonl
      {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 347 * 29?"}],
       "answer": "10063"}
      a 3-digit by 2-digit product, which the model cannot work out in its
      head; the system message offers a calculator, called in the Hermes
      format (SmolLM2's template renders no tools: the tool is described in
      the system message, as rlpipe-env(5) says);
  calc/sft.jsonl
      worked conversations for a warm start (rl-learn --loss sft) on another
      kind of question, sums and differences of two 4-digit numbers: the
      question, the call, the calculator's result, the answer. It teaches the
      format of a call, not the products RL is then rewarded on;
  retry/train.jsonl, retry/test.jsonl
      {"messages": [{"role": "user", "content": "What is 47 + 85? Answer with just the number."}], "answer": "132"}
      the add2 questions of experiments/smollm2, answered again after
      "That is not right. Try again." (retry_env.py);
  task.json   what was made.

No test question is in a train or sft file. The numbers come from
experiments/arith.py's generator, so the files depend only on the options.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from arith import Lcg  # noqa: E402

SYSTEM = ("You are a helpful assistant with a calculator. To use it, write "
          '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call> '
          "and wait for its result. Then give the final answer as just the number.")


def calc_question(a, b):
    return {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} * {b}?"}],
            "answer": str(a * b)}


def calc_worked(a, op, b):
    value = a + b if op == "+" else a - b
    call = json.dumps({"name": "calculator", "arguments": {"expression": f"{a} {op} {b}"}})
    q = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} {op} {b}?"}]
    return {"messages": q + [{"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
                             {"role": "tool", "content": str(value)},
                             {"role": "assistant", "content": str(value)}]}


def retry_question(a, b):
    return {"messages": [{"role": "user", "content": f"What is {a} + {b}? Answer with just the number."}],
            "answer": str(a + b)}


def distinct(rng, n, draw, seen):
    out = []
    while len(out) < n:
        q = draw(rng)
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


def write(path, objs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for o in objs:
            f.write(json.dumps(o) + "\n")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=5000)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--sft", type=int, default=512)
    o = ap.parse_args(argv)
    rng = Lcg(o.seed)
    calc = lambda r: (100 + r.below(900), 10 + r.below(90))   # noqa: E731
    seen = set()
    test = distinct(rng, o.test, calc, seen)
    train = distinct(rng, o.train, calc, seen)
    sums = lambda r: (1000 + r.below(9000), "+-"[r.below(2)], 1000 + r.below(9000))   # noqa: E731
    sft = distinct(rng, o.sft, sums, set())
    write(os.path.join(o.out, "calc", "test.jsonl"), [calc_question(*q) for q in test])
    write(os.path.join(o.out, "calc", "train.jsonl"), [calc_question(*q) for q in train])
    write(os.path.join(o.out, "calc", "sft.jsonl"), [calc_worked(*q) for q in sft])
    add2 = lambda r: (10 + r.below(90), 10 + r.below(90))   # noqa: E731
    seen = set()
    test = distinct(rng, o.test, add2, seen)
    train = [add2(rng) for _ in range(o.train)]
    train = [q for q in train if q not in seen]
    write(os.path.join(o.out, "retry", "test.jsonl"), [retry_question(*q) for q in test])
    write(os.path.join(o.out, "retry", "train.jsonl"), [retry_question(*q) for q in train])
    with open(os.path.join(o.out, "task.json"), "w") as f:
        json.dump({"seed": o.seed, "calc": {"train": o.train, "test": o.test, "sft": o.sft,
                                            "kind": "a * b, 100 <= a < 1000, 10 <= b < 100",
                                            "sft_kind": "a + b or a - b, 1000 <= a, b < 10000"},
                   "retry": {"train": len(train), "test": o.test, "kind": "a + b, 10 <= a, b < 100"}}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
