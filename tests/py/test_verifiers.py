"""rl-sample's external verifiers (man/rl-sample.1, VERIFIER COMMANDS):
every key of the prompt in the request, replies that are numbers, booleans or
objects with named parts and a prediction (the records' reward, rewards and
pred), several named verifiers summed with --reward-weights, their errors;
and scripts/rl-reward-fn, TRL-style reward functions as verifiers, checked
against the same functions called directly here.

The model is the tiny configuration with random weights (llama_ref) and a
ChatML-like template for the conversations; the references are Python's
json and the reward functions of TRL's documentation (GRPOTrainer, "Using a
custom reward function"), written here.
"""
import json
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
from rltest import case  # noqa: E402

WORK = tempfile.mkdtemp(prefix="rlpipe-verifiers.", dir=os.environ.get("TMPDIR"))
PY = "/usr/bin/python3 -u"   # the system's Python: the adapter needs its standard library only
REWARD_FN = os.path.join(rltest.ROOT, "scripts", "rl-reward-fn")
TEMPLATE = ("{{ '<|bos|>' }}{% for m in messages %}{{ m['role'] + ':\\n' + m['content'] + '<|eos|>\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ 'assistant:\\n' }}{% endif %}")


def make_model():
    d = os.path.join(WORK, "model")
    llama_ref.random_model(d, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True, seed=5)
    llama_ref.add_tiny_tokenizer(d)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": TEMPLATE, "bos_token": "<|bos|>", "eos_token": "<|eos|>"}, f)
    return d


MODEL = make_model()


def rendered(messages):
    """The template above, rendered with the generation prompt."""
    return "<|bos|>" + "".join(f"{m['role']}:\n{m['content']}<|eos|>\n" for m in messages) + "assistant:\n"


def jsonl(name, objs):
    return rltest.tmpfile(name, "".join(json.dumps(o) + "\n" for o in objs).encode())


def text_prompts(n=6):
    """Prompts with nested, numeric, null and non-ASCII values, as a code task carries its tests."""
    return [{"prompt": f"{i}*3=", "answer": str(3 * i), "ground_truth": str(3 * i),
             "tests": [{"input": [i, 3], "output": 3 * i}, {"input": [], "output": None}],
             "meta": {"source": "gsm-like", "weight": 0.5 + i, "big": 12345678901234567890, "ok": i % 2 == 0},
             "note": "naïve ∑ café"} for i in range(n)]


def chat_prompts(n=4):
    return [{"messages": [{"role": "system", "content": "Answer in <answer> tags."},
                          {"role": "user", "content": f"What is {i} + {i + 1}?"}],
             "ground_truth": str(2 * i + 1), "level": i} for i in range(n)]


def sample(*args, ok=True):
    rc, out, err = rltest.run("rl-sample", "--model", MODEL, "--no-provenance", "--device", "cpu", *args)
    if ok:
        assert rc == 0, f"rl-sample {' '.join(args)} exited {rc}: {err.strip()[:800]}"
        (_, recs, trailer), = rltest.read_stream(out)
        assert trailer["count"] == len(recs)
        return recs, err
    return rc, out, err


def script(name, body):
    return f"{PY} " + rltest.tmpfile(name, body.encode())


# ---- the request ------------------------------------------------------------------------------

@case
def the_request_holds_every_key_of_the_prompt_as_given():
    log = os.path.join(WORK, "requests.jsonl")
    ver = script("log_requests.py", f"""
import sys
with open({log!r}, "w") as log:
    for line in sys.stdin:
        log.write(line)
        log.flush()
        print(0, flush=True)
""")
    ps = text_prompts() + chat_prompts()
    recs, _ = sample("-n", "2", "--max-new-tokens", "6", "--verifier-cmd", ver, jsonl("pkeys.jsonl", ps))
    with open(log) as f:
        reqs = [json.loads(line) for line in f]
    assert len(reqs) == len(recs) == 2 * len(ps)
    by_text = {json.dumps(p.get("prompt") or p["messages"]): p for p in ps}
    for r, q in zip(recs, reqs):
        p = by_text[json.dumps(r.get("messages", r["prompt"]))]
        want = {"prompt": p["prompt"] if "prompt" in p else rendered(p["messages"]), "completion": r["text"]}
        want.update((k, v) for k, v in p.items() if k != "prompt")
        assert q == want, f"request {q} is not the prompt's keys {want}"
        assert list(q) == list(want), f"order {list(q)}, not {list(want)}"
        assert q["prompt"] == r["prompt"], "a conversation's prompt is the text the template rendered"
    print(f"  {len(reqs)} requests, {sum('messages' in q for q in reqs)} of conversations")


@case
def a_prompt_carrying_rewards_or_pred_is_an_error():
    for key, value in (("rewards", {"a": 1.0}), ("pred", "2")):
        rc, _, err = sample(jsonl(f"p{key}.jsonl", [{"prompt": "1+1=", key: value}]), ok=False)
        assert rc == 1 and f'"{key}", a field rl-sample writes itself' in err and f"p{key}.jsonl line 1" in err, err


@case
def rl_cat_pack_types_rewards_as_float64_and_refuses_a_rewards_of_strings():
    good = jsonl("packed.jsonl", [{"id": 0, "reward": 1, "rewards": {"acc": 1, "fmt.tags": 0.5}, "pred": "42"}])
    rc, out, err = rltest.run("rl-cat", "--pack", "--kind", "rollouts", good)
    assert rc == 0, err
    (_, (r,), _), = rltest.read_stream(out)
    assert r["rewards"] == {"acc": 1.0, "fmt.tags": 0.5} and all(type(x) is float for x in r["rewards"].values()), r
    assert r["pred"] == "42"
    bad = jsonl("packbad.jsonl", [{"id": 0, "rewards": {"acc": "1"}}])
    rc, _, err = rltest.run("rl-cat", "--pack", "--kind", "rollouts", bad)
    assert rc == 1 and 'field "rewards": expected a number, found a string' in err and "packbad.jsonl line 1" in err, err


# ---- replies ----------------------------------------------------------------------------------

def digits_pred(text):
    """The last run of digits in a text, or None."""
    m = re.findall(r"[0-9]+", text)
    return m[-1] if m else None


@case
def an_object_reply_gives_reward_rewards_and_pred():
    ver = script("object_verifier.py", """
import json, re, sys
for line in sys.stdin:
    q = json.loads(line)
    c = q["completion"]
    d = re.findall(r"[0-9]+", c)
    reply = {"reward": len(c) / 8, "rewards": {"len": len(c), "digits": sum(ch.isdigit() for ch in c)}}
    reply["pred"] = d[-1] if d else None
    print(json.dumps(reply), flush=True)
""")
    recs, err = sample("-n", "3", "--max-new-tokens", "10", "--verifier-cmd", ver, jsonl("pobj.jsonl", text_prompts()))
    with_pred = 0
    for r in recs:
        t = r["text"]
        assert r["reward"] == len(t) / 8, (t, r["reward"])
        assert r["rewards"] == {"len": float(len(t)), "digits": float(sum(ch.isdigit() for ch in t))}, r["rewards"]
        assert list(r["rewards"]) == ["len", "digits"], "a bare command's parts keep their names and order"
        assert r.get("pred") == digits_pred(t), (t, r.get("pred"))
        with_pred += "pred" in r
    assert 0 < with_pred < len(recs), f"{with_pred} of {len(recs)} completions have digits: pred both ways untested"
    mean = sum(r["reward"] for r in recs) / len(recs)
    assert f"reward mean {mean:.4f}" in err, err
    # the records pass rl-cat's checks (rewards a map of numbers, pred a string)
    rc, out, e = rltest.run("rl-cat", "--check", "-", input=rltest.write_stream(recs))
    assert rc == 0, e


@case
def several_verifiers_give_the_weighted_sum_and_each_reward_by_name():
    length = script("v_len.py", """
import json, sys
for line in sys.stdin:
    print(len(json.loads(line)["completion"]), flush=True)
""")
    digit = script("v_digit.py", """
import json, sys
for line in sys.stdin:
    print("true" if any(c.isdigit() for c in json.loads(line)["completion"]) else "false", flush=True)
""")
    parts = script("v_parts.py", """
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    c = q["completion"]
    print(json.dumps({"reward": 1 if q["answer"] in c else -0.5,
                      "rewards": {"spaces": c.count(" "), "tests": len(q["tests"])}}), flush=True)
""")
    w = {"len": 0.1, "digit": 2.0, "ans": -1.5}
    recs, _ = sample("-n", "2", "--slots", "3", "--max-new-tokens", "12",
                     "--verifier-cmd", f"len={length}", "--verifier-cmd", f"digit={digit}",
                     "--verifier-cmd", f"ans={parts}", "--reward-weights", "ans=-1.5,len=0.1,digit=2",
                     jsonl("pmany.jsonl", text_prompts()))
    assert len(recs) == 12
    for r in recs:
        t = r["text"]
        own = {"len": float(len(t)), "digit": 1.0 if any(c.isdigit() for c in t) else 0.0,
               "ans": 1.0 if r["answer"] in t else -0.5}
        want = 0.0
        for name in ("len", "digit", "ans"):   # the command line's order, as rl-sample sums
            want += w[name] * own[name]
        assert r["reward"] == want, f"{t!r}: reward {r['reward']}, sum {want}"
        assert r["rewards"] == {"len": own["len"], "digit": own["digit"], "ans": own["ans"],
                                "ans.spaces": float(t.count(" ")), "ans.tests": 2.0}, r["rewards"]
        assert list(r["rewards"]) == ["len", "digit", "ans", "ans.spaces", "ans.tests"], list(r["rewards"])
        assert "pred" not in r


@case
def a_record_waits_for_every_verifier_and_a_dying_one_is_named():
    ok = "ok=while read -r l; do echo 1; done"
    # it answers 3 requests, and dies at the 4th after a while (when "ok" has answered the first group)
    dies = "late=i=0; while read -r l; do i=$((i+1)); [ $i -le 3 ] && echo 0.5; [ $i = 4 ] && sleep 0.5 && exit 3; done"
    rc, out, err = sample("-n", "2", "--max-new-tokens", "4", "--verifier-cmd", ok, "--verifier-cmd", dies,
                          jsonl("pdies.jsonl", text_prompts()), ok=False)
    assert rc == 1, err
    assert re.search(r"verifier 'late' exited \(status 3\) without answering request 3: rollout id \d+, prompt "
                     r"\S*pdies\.jsonl line \d", err), err
    recs = [o for o in rltest.stream_objects(out) if "id" in o]
    assert len(recs) == 2, f"the one group both answered is written, got {len(recs)} records"
    assert all(r["reward"] == 1.5 and r["rewards"] == {"ok": 1.0, "late": 0.5} for r in recs), recs


@case
def a_malformed_reply_is_an_error_naming_the_verifier_the_record_and_the_fault():
    cases = [
        ("echo '{\"rewards\": {\"a\": 1}}'", r"has no \"reward\""),
        ("echo '{\"reward\": 1, \"score\": 2}'", r"has the key \"score\""),
        ("echo '{\"reward\": 1, \"rewards\": {\"a\": \"x\"}}'", r"field \"rewards\": expected a number, found a string"),
        ("echo '{\"reward\": 1, \"pred\": 7}'", r"\"pred\" is not a string"),
        ("echo '{\"reward\": 1'", r"column 13: expected ',' or '}'"),
        ("echo NaN", r"is not a finite number"),
        ("echo yes", r"yes' is not a number, true, false or a JSON object"),
    ]
    for reply, why in cases:
        cmd = f"acc=while read -r l; do {reply}; done"
        rc, _, err = sample("--max-new-tokens", "3", "--verifier-cmd", cmd, jsonl("pbad.jsonl", text_prompts(2)),
                            ok=False)
        assert rc == 1, f"{reply}: exit {rc}: {err}"
        assert re.search(r"verifier 'acc': request 0: reply '.*" + why + r".*: rollout id \d+, prompt \S*pbad\.jsonl line",
                         err), f"{reply}: {err}"
    both = "while read -r l; do echo '{\"reward\": 1, \"pred\": \"1\"}'; done"
    rc, _, err = sample("--max-new-tokens", "3", "--verifier-cmd", f"a={both}", "--verifier-cmd", f"b={both}",
                        jsonl("ppred.jsonl", text_prompts(2)), ok=False)
    assert rc == 1 and "verifier 'a' and verifier 'b' both reply with a \"pred\"" in err and "ppred.jsonl" in err, err


@case
def verifier_names_and_weights_are_checked_as_usage_errors():
    p = jsonl("pusage.jsonl", text_prompts(1))
    cases = [
        (["--verifier-cmd", "a=cat", "--verifier-cmd", "a=cat"], "--verifier-cmd 'a=cat': the name 'a' is given twice"),
        (["--verifier-cmd", "a=cat", "--verifier-cmd", "cat"], "several verifiers must each be named"),
        (["--verifier-cmd", "a=cat", "--reward-weights", "b=1"], "--reward-weights 'b=1': no verifier is named 'b'"),
        (["--verifier-cmd", "a=cat", "--reward-weights", "a=1,a=2"], "the weight of 'a' is given twice"),
        (["--verifier-cmd", "a=cat", "--reward-weights", "a=nan"], "the weight is not a finite number"),
        (["--verifier-cmd", "cat", "--reward-weights", "cat=1"], "weights are for named verifiers"),
        (["--reward-weights", "a=1"], "--reward-weights weighs the verifiers of --verifier-cmd"),
        (["--verifier-cmd", "a="], "the command is empty"),
    ]
    for args, msg in cases:
        rc, _, err = sample(*args, p, ok=False)
        assert rc == 2 and msg in err, f"{args}: exit {rc}: {err}"


@case
def a_bare_command_with_an_equals_sign_after_a_space_runs_as_given():
    # "python3 x.py --scale=2": the '=' follows a space, so this is no NAME=CMD
    ver = script("scaled.py", """
import json, sys
scale = float(sys.argv[1].split("=")[1])
for line in sys.stdin:
    print(scale * len(json.loads(line)["completion"]), flush=True)
""") + " --scale=2"
    recs, _ = sample("-n", "2", "--max-new-tokens", "5", "--verifier-cmd", ver, jsonl("peq.jsonl", text_prompts(2)))
    assert all(r["reward"] == 2.0 * len(r["text"]) and "rewards" not in r for r in recs), recs


# ---- rl-reward-fn: TRL-style reward functions ----------------------------------------------------------------

# The examples of TRL's documentation (GRPOTrainer, "Using a custom reward
# function"): a length reward, the format reward for standard and for
# conversational completions, a reward from a dataset column through
# **kwargs, and one that returns None for the samples it does not apply to.
# Each call's batch size is logged, to check the batching.
TRL_FUNCS = r'''
import os, re

def _log(name, n):
    with open(os.environ["BATCH_LOG"], "a") as f:
        f.write(f"{name} {n}\n")

def reward_len(completions, **kwargs):
    _log("reward_len", len(completions))
    return [-abs(20 - len(completion)) for completion in completions]

def format_reward_func(completions, **kwargs):
    """Reward function that checks if the completion has a specific format."""
    _log("format_reward_func", len(completions))
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    matches = [re.match(pattern, content) for content in completions]
    return [1.0 if match else 0.0 for match in matches]

def format_reward_func_conv(completions, **kwargs):
    """The same for conversational completions."""
    _log("format_reward_func_conv", len(completions))
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]

def reward_func(completions, ground_truth, **kwargs):
    _log("reward_func", len(completions))
    # Regular expression to capture content inside \boxed{}; here the last number
    matches = [re.findall(r"\d+", completion if isinstance(completion, str) else completion[0]["content"])
               for completion in completions]
    contents = [match[-1] if match else "" for match in matches]
    # Reward 1 if the content is the same as the ground truth, 0 otherwise
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]

def digits_or_none(prompts, completions, level=None, **kwargs):
    """Only for the conversations of an odd level (None for the others): the digits' share."""
    _log("digits_or_none", len(completions))
    out = []
    for p, c, lv in zip(prompts, completions, level):
        text = c[0]["content"] if isinstance(c, list) else c
        assert isinstance(p, list) == isinstance(c, list)
        out.append(None if lv is None or lv % 2 == 0 else sum(ch.isdigit() for ch in text) / max(len(text), 1))
    return out

def wrong_length(completions, **kwargs):
    return [0.0] * (len(completions) + 1)

def not_a_number(completions, **kwargs):
    return ["high" for _ in completions]
'''


def trl_module():
    path = os.path.join(WORK, "trl_rewards.py")
    with open(path, "w") as f:
        f.write(TRL_FUNCS)
    return path


def call_directly(mod, name, r):
    """The function called as TRL would, on the one sample of record r."""
    conv = "messages" in r
    prompts = [r["messages"]] if conv else [r["prompt"]]
    completions = [[{"role": "assistant", "content": r["text"]}]] if conv else [r["text"]]
    cols = {k: [r[k]] for k in ("answer", "ground_truth", "tests", "meta", "note", "level") if k in r}
    x = getattr(mod, name)(prompts=prompts, completions=completions, **cols)[0]
    return 0.0 if x is None else float(x)


def load_module(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("trl_rewards_ref", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@case
def trl_reward_functions_through_rl_reward_fn_give_what_they_give_called_directly():
    path = trl_module()
    log = os.path.join(WORK, "batches.log")
    os.environ["BATCH_LOG"] = log   # rl-sample's verifiers inherit it
    if os.path.exists(log):
        os.remove(log)
    mod = load_module(path)
    # texts: the length, format and ground-truth rewards; batches of at most 5
    fns = {"len": "reward_len", "fmt": "format_reward_func", "gt": "reward_func"}
    weights = {"len": 0.05, "fmt": 1.0, "gt": 2.0}
    args = []
    for name, fn in fns.items():
        args += ["--verifier-cmd", f"{name}={PY} {REWARD_FN} --batch-size 5 {path}:{fn}"]
    recs, _ = sample("-n", "4", "--slots", "16", "--max-new-tokens", "16", *args, "--reward-weights",
                     "len=0.05,gt=2", jsonl("ptrl.jsonl", text_prompts(8)))
    assert len(recs) == 32
    with open(log) as f:
        calls = [line.split() for line in f]
    os.environ["BATCH_LOG"] = os.devnull   # not the direct calls below
    for fn in fns.values():
        sizes = [int(n) for name, n in calls if name == fn]
        assert sum(sizes) == 32 and max(sizes) <= 5, f"{fn}: batches {sizes}"
    print(f"  batches of reward_len: {[int(n) for name, n in calls if name == 'reward_len']}")
    for r in recs:
        want = {name: call_directly(mod, fn, r) for name, fn in fns.items()}
        assert r["rewards"] == want, f"{r['text']!r}: {r['rewards']}, called directly {want}"
        total = 0.0
        for name in fns:
            total += weights[name] * want[name]
        assert r["reward"] == total, (r["reward"], total)
    # conversations: completions as [{"role": "assistant", "content": ...}], prompts as messages, None as 0
    fns = {"fmt": "format_reward_func_conv", "gt": "reward_func", "dig": "digits_or_none"}
    args = []
    for name, fn in fns.items():
        args += ["--verifier-cmd", f"{name}={PY} {REWARD_FN} {path}:{fn}"]
    recs, _ = sample("-n", "3", "--max-new-tokens", "12", *args, jsonl("ptrlchat.jsonl", chat_prompts(6)))
    nones = 0
    for r in recs:
        want = {name: call_directly(mod, fn, r) for name, fn in fns.items()}
        assert r["rewards"] == want, f"{r['text']!r}: {r['rewards']}, called directly {want}"
        assert r["reward"] == want["fmt"] + want["gt"] + want["dig"]
        nones += r["level"] % 2 == 0
    assert 0 < nones < len(recs)


@case
def a_reward_function_that_breaks_the_contract_is_an_error():
    path = trl_module()
    for fn, why in (("wrong_length", "wrong_length returned "),
                    ("not_a_number", "not_a_number returned 'high' for request 0"),
                    ("no_such_function", "has no function no_such_function")):
        rc, _, err = sample("-n", "4", "--max-new-tokens", "3", "--verifier-cmd",
                            f"f={PY} {REWARD_FN} --batch-size 4 {path}:{fn}", jsonl("pbroken.jsonl", text_prompts(2)),
                            ok=False)
        assert rc == 1 and why in err and "verifier 'f'" in err and "exited (status 1)" in err, f"{fn}: {err}"


rltest.finish()
