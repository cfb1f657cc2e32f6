"""The arithmetic task of the demo (experiments/arith.py): held-out problems
that neither RL nor SFT sees, answers that are right, worked examples whose
every step is true and whose last number is the answer, files the tools
read, and the same bytes for the same seed.

Answers are checked by parsing the prompt and computing with Python's
integers; each worked step "x+y[+c]=s" / "x*b[+c]=s" is checked as an
equation and against the digits it must use.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rltest  # noqa: E402
from rltest import case  # noqa: E402

GEN = os.path.join(rltest.ROOT, "experiments", "arith.py")
TINY = os.path.join(rltest.ROOT, "models", "tiny")
PROMPT = re.compile(r"^What is (\d+) ([+*]) (\d+)\?$")


def generate(name, *args):
    out = os.path.join(rltest.TMP.name, name)
    subprocess.run([sys.executable, GEN, "--out", out, *args], check=True, capture_output=True)
    return {f: [json.loads(line) for line in open(os.path.join(out, f + ".jsonl"))] for f in ("test", "train", "sft")}, out


DATA, DIR = generate("a", "--seed", "3", "--test", "300", "--train", "2000", "--sft", "3000")


def problem(row):
    m = PROMPT.match(row["prompt"])
    assert m, f"prompt {row['prompt']!r} is not 'What is A op B?'"
    return int(m.group(1)), m.group(2), int(m.group(3))


@case
def counts_and_the_kinds_of_problem_are_as_asked():
    assert [len(DATA[f]) for f in ("test", "train", "sft")] == [300, 2000, 3000]
    probs = [problem(r) for r in DATA["train"]]
    adds = sum(op == "+" for _, op, _ in probs)
    assert 0.45 < adds / len(probs) < 0.55, f"{adds} additions of {len(probs)}"
    assert all(a < 1000 and (b < 1000 if op == "+" else b < 10) for a, op, b in probs)
    assert max(a for a, _, _ in probs) >= 900, "three-digit operands are drawn"


@case
def no_held_out_problem_is_in_train_or_sft_and_held_out_problems_are_distinct():
    test = [problem(r) for r in DATA["test"]]
    assert len(set(test)) == len(test), "a held-out problem repeats"
    seen = {problem(r) for r in DATA["train"]} | {problem(r) for r in DATA["sft"]}
    assert not set(test) & seen, f"held-out problems also trained on: {sorted(set(test) & seen)[:5]}"


@case
def every_answer_is_the_result_of_its_problem():
    for f in ("test", "train", "sft"):
        for r in DATA[f]:
            a, op, b = problem(r)
            assert r["answer"] == str(a + b if op == "+" else a * b), f"{f}: {r}"


@case
def every_worked_step_is_true_uses_the_right_digits_and_the_last_number_is_the_answer():
    step = re.compile(r"^(\d)([+*])(\d+)(?:\+(\d+))?=(\d+)$")
    for r in DATA["sft"]:
        a, op, b = problem(r)
        c = r["completion"]
        assert c.startswith(" ") and c.endswith(f". Answer: {r['answer']}"), c
        steps = c[1:-len(f". Answer: {r['answer']}")].split(", ")
        da, db = str(a)[::-1], str(b)[::-1]
        carry = 0
        for i, s in enumerate(steps):
            m = step.match(s)
            assert m, f"{r['prompt']}: step {s!r}"
            x, sym, y, cin, total = m.group(1), m.group(2), m.group(3), int(m.group(4) or 0), int(m.group(5))
            assert sym == op and cin == carry, f"{r['prompt']}: step {i} {s!r}, carry in {carry}"
            assert x == (da[i] if i < len(da) else "0"), f"{r['prompt']}: step {i} takes digit {x}"
            if op == "+":
                assert y == (db[i] if i < len(db) else "0"), f"{r['prompt']}: step {i} takes digit {y}"
                assert int(x) + int(y) + cin == total, f"{r['prompt']}: {s!r} is false"
            else:
                assert int(y) == b and int(x) * b + cin == total, f"{r['prompt']}: {s!r} is false"
            carry = total // 10
        assert len(steps) == (max(len(da), len(db)) if op == "+" else len(da)), f"{r['prompt']}: {steps}"
        # what the number verifier reads: the last number of the text
        assert re.findall(r"-?\d+", c)[-1] == r["answer"], c


@case
def the_same_seed_gives_the_same_bytes_and_another_seed_other_problems():
    _, again = generate("b", "--seed", "3", "--test", "300", "--train", "2000", "--sft", "3000")
    other, _ = generate("c", "--seed", "4", "--test", "300", "--train", "2000", "--sft", "3000")
    for f in ("test", "train", "sft"):
        assert open(os.path.join(DIR, f + ".jsonl"), "rb").read() == open(os.path.join(again, f + ".jsonl"), "rb").read()
    assert DATA["test"] != other["test"]


@case
def the_tools_read_the_files_and_a_worked_example_fits_the_tiny_model():
    for f, kind in (("test", "prompts"), ("train", "prompts"), ("sft", "examples")):
        rc, _, err = rltest.run("rl-cat", "--pack", "--kind", kind, "-o", os.path.join(DIR, f + ".rlr"),
                                os.path.join(DIR, f + ".jsonl"))
        assert rc == 0, f"rl-cat --pack {f}.jsonl: exit {rc}: {err}"
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))
    longest = max(len(tok.encode(r["prompt"]).ids) + len(tok.encode(r["completion"]).ids) for r in DATA["sft"])
    cfg = json.load(open(os.path.join(TINY, "config.json")))
    assert longest + 2 <= cfg["max_position_embeddings"], f"{longest} tokens"
    print(f"# longest worked example: {longest} tokens", flush=True)


if __name__ == "__main__":
    rltest.finish()
