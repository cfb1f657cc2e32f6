"""DAPO's dynamic sampling: rl-sample --drop-uniform.

A group whose rewards are all equal has advantage 0 under a group baseline
and teaches nothing; with --drop-uniform it is not written, and each group
written carries "drawn", the groups decided since the group written before
it, itself included. The references are runs of the same command without
the option on the same seed: generation does not depend on which groups are
dropped, so the stream with the option must be the stream without it less
its uniform groups, record for record, and each group's "drawn" is 1 + the
uniform groups right before it there. Rewards come from the built-in
verifier (answers chosen from a run without rewards), from an external
verifier (--verifier-cmd) and from an environment (--env, multi-turn).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
from rltest import case  # noqa: E402

TMP = rltest.TMP.name
TEMPLATE = ("{{ '<|bos|>' }}{% for m in messages %}{{ m['role'] + ':\\n' + m['content'] + '<|eos|>\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ 'assistant:\\n' }}{% endif %}")


def make_model():
    d = os.path.join(TMP, "model")
    llama_ref.random_model(d, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True, seed=4)
    llama_ref.add_tiny_tokenizer(d)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:   # for --env's conversations
        json.dump({"chat_template": TEMPLATE, "bos_token": "<|bos|>", "eos_token": "<|eos|>",
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return d


MODEL = make_model()
N_PROMPTS = 12


def jsonl(name, rows):
    return rltest.tmpfile(name, "".join(json.dumps(r) + "\n" for r in rows).encode())


PROMPTS = jsonl("p.jsonl", [{"prompt": f"{i}*3=", "answer": str(3 * i)} for i in range(N_PROMPTS)])
# reward 1 when the completion holds an "a": about a third of the groups of 3 differ
VERIFIER = "/usr/bin/python3 -u " + rltest.tmpfile("v.py", b"""import json, sys
for line in sys.stdin:
    print(1.0 if "a" in json.loads(line)["completion"] else 0.0, flush=True)
""")
COMMON = ["--model", MODEL, "-n", "3", "--max-new-tokens", "6", "--seed", "1", "--no-provenance"]


def sample(*args, out_file=None):
    rc, out, err = rltest.run("rl-sample", *COMMON, *args, *(["-o", out_file] if out_file else []))
    assert rc == 0, f"rl-sample {' '.join(args)} exited {rc}: {err.strip()[-800:]}"
    if out_file:
        with open(out_file, "rb") as f:
            out = f.read()
    (hdr, recs, trailer), = rltest.read_stream(out)
    assert trailer["count"] == len(recs)
    return hdr, recs, err


def uniform(g):
    return len({r["reward"] for r in g}) == 1


def summary(err):
    """(written, drawn, dropped) from the summary line."""
    m = re.search(r"rl-sample: (\d+) prompts \((\d+) drawn, (\d+) dropped with uniform rewards\)", err)
    assert m, err[-400:]
    return tuple(int(x) for x in m.groups())


def expect_base_less_uniform(base, kept, err):
    """kept is base less its uniform groups, in the same order; each kept
    group's drawn is 1 + the uniform groups right before it in base; the
    summary counts them all."""
    bg = rltest.groups(base)
    n_uniform = sum(uniform(g) for g in bg)
    assert 0 < n_uniform < len(bg), f"{n_uniform} of {len(bg)} groups uniform: the case tests nothing"
    want, run = [], 0
    for g in bg:
        if uniform(g):
            run += 1
            continue
        want += [dict(r, drawn=run + 1) for r in g]
        run = 0
    assert kept == want, (f"groups {[g[0]['group'] for g in rltest.groups(kept)]} drawn "
                          f"{[g[0].get('drawn') for g in rltest.groups(kept)]}, expected {[g[0]['group'] for g in rltest.groups(want)]}"
                          f" drawn {[g[0]['drawn'] for g in rltest.groups(want)]}")
    assert summary(err) == (len(bg) - n_uniform, len(bg), n_uniform), err[-300:]
    # drawn counts every group decided, but those after the last one written
    assert sum(g[0]["drawn"] for g in rltest.groups(kept)) + run == len(bg)


@case
def an_external_verifiers_uniform_groups_are_dropped_and_drawn_counts_them():
    _, base, _ = sample("--verifier-cmd", VERIFIER, PROMPTS)
    hdr, kept, err = sample("--verifier-cmd", VERIFIER, "--drop-uniform", PROMPTS)
    expect_base_less_uniform(base, kept, err)
    assert hdr["sampling"]["drop_uniform"] is True and hdr["sampling"]["group"] == 3, hdr["sampling"]


@case
def the_builtin_verifiers_uniform_groups_are_dropped_and_drawn_counts_them():
    # answers chosen so that some groups have 1 and 0, some all 1, some all 0
    _, free, _ = sample("--verifier", "none", PROMPTS)
    answer = {}
    for k, g in enumerate(rltest.groups(free)):
        texts = [r["text"].strip() for r in g]
        pick = next((t for t in texts if t), None)
        answer[g[0]["prompt"]] = pick if pick and k % 3 else "no completion says this"
    prompts = jsonl("answered.jsonl", [{"prompt": f"{i}*3=", "answer": answer[f"{i}*3="]} for i in range(N_PROMPTS)])
    _, base, _ = sample("--verifier", "exact", prompts)
    assert [r["text"] for r in base] == [r["text"] for r in free], "the answers changed what was sampled"
    _, kept, err = sample("--verifier", "exact", "--drop-uniform", prompts)
    expect_base_less_uniform(base, kept, err)


@case
def greedy_groups_are_all_uniform_and_nothing_is_written():
    _, kept, err = sample("--temperature", "0", "--drop-uniform", PROMPTS)
    assert kept == [] and summary(err) == (0, N_PROMPTS, N_PROMPTS), err[-300:]


@case
def multi_turn_rollouts_are_decided_by_the_environments_rewards():
    env = "/usr/bin/python3 -u " + rltest.tmpfile("env.py", b"""import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r["turn"] == 1 and not r.get("final"):
        print(json.dumps({"id": r["id"], "messages": [{"role": "user", "content": "and?"}]}), flush=True)
    else:
        print(json.dumps({"id": r["id"], "done": True, "reward": len(r["messages"][-1]["content"]) % 2}), flush=True)
""")
    prompts = jsonl("conv.jsonl", [{"messages": [{"role": "user", "content": f"{i}*3="}]} for i in range(N_PROMPTS)])
    _, base, _ = sample("--env", env, "--max-turns", "2", prompts)
    _, kept, err = sample("--env", env, "--max-turns", "2", "--drop-uniform", prompts)
    # the environment answers at its own pace: groups may finish in another
    # order, so compare group by group, and drawn by its sum
    bg = {g[0]["group"]: g for g in rltest.groups(base)}
    n_uniform = sum(uniform(g) for g in bg.values())
    assert 0 < n_uniform < len(bg), f"{n_uniform} of {len(bg)} groups uniform: the case tests nothing"
    kg = rltest.groups(kept)
    for g in kg:
        d = g[0]["drawn"]
        assert all(r["drawn"] == d for r in g), f"group {g[0]['group']}: drawn differs between its records"
        for r, rb in zip(g, bg[g[0]["group"]]):
            # the same tokens; their log-probabilities computed in batches of
            # other sizes (the environment's pace decides which) within 1e-5
            diff = sorted(k for k in set(r) | set(rb) if k not in ("drawn", "logp") and r.get(k) != rb.get(k))
            assert not diff, f"record {r['id']} differs from the run without --drop-uniform in {diff}"
            err_logp = max(abs(x - y) for x, y in zip(r["logp"], rb["logp"]))
            assert err_logp <= 1e-5, f"record {r['id']}: |logp - logp without --drop-uniform| {err_logp:.3g}"
    assert sorted(g[0]["group"] for g in kg) == sorted(k for k, g in bg.items() if not uniform(g))
    written, drawn, dropped = summary(err)
    assert (written, drawn, dropped) == (len(bg) - n_uniform, len(bg), n_uniform), err[-300:]
    assert sum(g[0]["drawn"] for g in kg) <= drawn


@case
def max_records_draws_on_past_the_prompt_set_until_its_groups_are_informative():
    # 8 groups of 3 with rewards that differ, from 12 prompts of which only
    # about a third give one per pass: the feed goes on past the first pass
    _, kept, err = sample("--verifier-cmd", VERIFIER, "--drop-uniform", "--max-records", "24", "--slots", "4", PROMPTS)
    kg = rltest.groups(kept)
    assert len(kept) == 24 and len(kg) == 8 and not any(uniform(g) for g in kg), [len(g) for g in kg]
    written, drawn, dropped = summary(err)
    assert (written, drawn - dropped) == (8, 8) and drawn > N_PROMPTS, err[-300:]
    # the run stops at the 8th group written: no group is drawn after it
    assert sum(g[0]["drawn"] for g in kg) == drawn, (drawn, [g[0]["drawn"] for g in kg])
    # with --epochs 1 the prompt set ends first: fewer groups, exit 0
    _, one, err = sample("--verifier-cmd", VERIFIER, "--drop-uniform", "--max-records", "24", "--epochs", "1",
                         PROMPTS)
    written, drawn, dropped = summary(err)
    assert drawn == N_PROMPTS and written == len(rltest.groups(one)) < 8, err[-300:]


@case
def rl_cat_merge_passes_drawn_through():
    a, b = (os.path.join(TMP, f"s{k}.rlr") for k in (0, 1))
    src = [sample("--verifier-cmd", VERIFIER, "--drop-uniform", "--seed", str(k + 1), PROMPTS, out_file=f)[1]
           for k, f in enumerate((a, b))]
    rc, out, err = rltest.run("rl-cat", "--merge", "--round", "1", a, b)
    assert rc == 0, err
    (_, merged, _), = rltest.read_stream(out)
    assert len(merged) == sum(len(s) for s in src)
    for r in merged:
        orig = next(x for x in src[r["merge_source"]] if x["id"] == r["id"])
        assert r["drawn"] == orig["drawn"] and r["source_group"] == orig["group"], (r["drawn"], orig["drawn"])


@case
def usage_errors():
    for args, why in ((["-n", "1"], "--drop-uniform: a group of one sample is always uniform: give -n 2 or more"),
                      (["-n", "2", "--verifier", "none"], "--drop-uniform compares rewards: --verifier none gives none")):
        rc, _, err = rltest.run("rl-sample", "--model", MODEL, *args, "--drop-uniform", PROMPTS)
        assert rc == 2 and f"rl-sample: error: {why}" in err, f"exit {rc}: {err[-300:]}"
    # a prompt may not carry the field rl-sample writes
    bad = jsonl("drawn.jsonl", [{"prompt": "1*3=", "answer": "3", "drawn": 2}])
    rc, _, err = rltest.run("rl-sample", "--model", MODEL, "-n", "2", "--drop-uniform", bad)
    assert rc == 1 and 'the prompt carries "drawn", a field rl-sample writes itself' in err, err[-300:]


rltest.finish()
