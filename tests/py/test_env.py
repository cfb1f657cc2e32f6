"""Multi-turn rollouts: rl-sample --env (rlpipe-env(5)).

The model is the tiny configuration with random weights (llama_ref.random_model)
and a chat template of its own (the tiny tokenizer has no ChatML tokens: an
assistant's turn ends with <|eos|>). The environments are Python programs
written here, as a user writes them. References nobody here wrote:
transformers' apply_chat_template and tokenizer for the environment's tokens,
the float64 PyTorch model of llama_ref.py for the log-probabilities.

  - token in, token out: a record's ids are the model's tokens, exactly as
    sampled, and between its turns the environment's messages as the template
    renders them after the conversation (the rest of the assistant's turn,
    then render(conversation + messages, generation prompt) less
    render(conversation)), tokenized as transformers tokenizes that text;
    mask is 1 on the model's tokens and 0 on the environment's, turns says
    where each turn is, logp is 0 on the environment's tokens;
  - the log-probability of every model token is the reference's within 1e-4,
    also when weights are pushed while conversations wait for their
    environment (the reference then computes each token with the weights
    that did, on the cache the earlier ones left);
  - the protocol: the requests' fields, the turn limit and the context limit
    (final requests), rewards and info into the record;
  - failures: a rollout whose answer is wrong, or late, fails alone (reward
    0, env_error) up to --env-max-failures; an environment that dies, writes
    what is not JSON or answers an id that waits for nothing ends the run,
    naming the rollout and its prompt, with the groups finished written.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inflight_util as iu  # noqa: E402
import llama_ref  # noqa: E402
import rltest  # noqa: E402
import torch  # noqa: E402
from rltest import case  # noqa: E402

try:
    import transformers
except ImportError as e:   # scripts/deps.sh test installs it into .deps/venv
    print(f"SKIP test_env: {e}; run scripts/deps.sh test")
    sys.exit(0)
transformers.logging.set_verbosity_error()

WORK = tempfile.mkdtemp(prefix="rlpipe-env.", dir=os.environ.get("TMPDIR"))
TOL = 1e-4
EOS = llama_ref.TINY_EOS
TEMPLATE = ("{{ '<|bos|>' }}{% for m in messages %}{{ m['role'] + ':\\n' + m['content'] + '<|eos|>\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ 'assistant:\\n' }}{% endif %}")


def make_model():
    d = os.path.join(WORK, "model")
    llama_ref.random_model(d, hidden=128, inter=352, layers=4, heads=4, kv_heads=2, vocab=448,
                           tie=True, logit_scale=2.5, seed=11)
    llama_ref.add_tiny_tokenizer(d)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": TEMPLATE, "bos_token": "<|bos|>", "eos_token": "<|eos|>",
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return d


MODEL = make_model()
REF = llama_ref.Llama(MODEL)
TOK = transformers.AutoTokenizer.from_pretrained(MODEL)


def prompts(name, n=5):
    lines = [json.dumps({"messages": [{"role": "user", "content": f"What is {i * 37 % 100} + {i * 11 % 50}?"}],
                         "answer": str(i * 37 % 100 + i * 11 % 50), "task": {"n": i}}) for i in range(n)]
    return rltest.tmpfile(name, ("\n".join(lines) + "\n").encode())


def env_file(name, body):
    return "/usr/bin/python3 -u " + rltest.tmpfile(name, body.encode())


def sample(*args, ok=True):
    rc, out, err = rltest.run("rl-sample", "--model", MODEL, "--no-provenance", *args)
    if ok:
        assert rc == 0, f"rl-sample {' '.join(args)} exited {rc}: {err.strip()[-800:]}"
        (hdr, recs, trailer), = rltest.read_stream(out)
        assert trailer["count"] == len(recs)
        return recs, err
    return rc, out, err


def threaded_env(name, answer_body):
    """An environment that answers each request in a thread of its own, so
    that answers come in any order: answer_body is the body of answer(r),
    which returns the answer. One line at a time (print() writes the text
    and its newline apart)."""
    return env_file(name, f"""
import json, sys, threading, time
lock = threading.Lock()
def answer(r):
{answer_body}
def reply(r):
    msg = answer(r)
    with lock:
        sys.stdout.write(json.dumps(msg) + "\\n")
        sys.stdout.flush()
for line in sys.stdin:
    threading.Thread(target=reply, args=(json.loads(line),), daemon=True).start()
""")


# An environment that logs its requests, answers "tool" twice and then a
# user's message, and ends a rollout at its third turn or when told final.
LOG = os.path.join(WORK, "requests.jsonl")
TOOLY = env_file("tooly.py", f"""
import json, sys
log = open({LOG!r}, "w")
for line in sys.stdin:
    r = json.loads(line)
    log.write(line); log.flush()
    if r.get("final") or r["turn"] >= 3:
        print(json.dumps({{"id": r["id"], "done": True, "reward": r["turn"] + 0.25, "info": {{"n": r["prompt"]["task"]["n"]}}}}))
    elif r["turn"] == 1:
        print(json.dumps({{"id": r["id"], "messages": [{{"role": "tool", "content": "42 \\u00e9"}}]}}))
    else:
        print(json.dumps({{"id": r["id"], "messages": [{{"role": "user", "content": "Try again."}}, {{"role": "tool", "content": "x"}}]}}))
""")


def runs(mask):
    """[start, end) of the runs of 1s in mask."""
    out, start = [], None
    for t, m in enumerate(mask + [0]):
        if m and start is None:
            start = t
        if not m and start is not None:
            out.append([start, t])
            start = None
    return out


def render(msgs, gen):
    return TOK.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)


def check_rollout(r):
    """The record's tokens against the reference rendering of its conversation."""
    ids, mask, msgs = r["ids"], r["mask"], r["messages"]
    assert len(mask) == len(ids) == len(r["logp"]) == len(r["ver"])
    assert r["turns"] == runs(mask), (r["turns"], runs(mask))
    # The conversation: the prompt's messages, then per turn the assistant's and the environment's.
    first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    assert TOK.encode(render(msgs[:first], True), add_special_tokens=False) == r["prompt_ids"]
    turns = r["turns"]
    k = first
    for i, (s, e) in enumerate(turns):
        assert msgs[k]["role"] == "assistant"
        turn_ids = ids[s:e]
        assert TOK.decode(turn_ids, skip_special_tokens=True).replace("\ufffd", "") == \
            msgs[k]["content"].replace("\ufffd", ""), f"turn {i}: its message is not its text"
        j = k + 1
        while j < len(msgs) and msgs[j]["role"] != "assistant":
            j += 1
        env_end = turns[i + 1][0] if i + 1 < len(turns) else len(ids)
        if j == k + 1:   # no messages after it: the rollout ended here
            assert env_end == e, "tokens after a last turn"
            break
        if i + 1 == len(turns) and env_end == e:
            break        # the messages did not fit: the final request carried them
        # The environment's tokens: the rest of the turn as the template ends it
        # (after a stop token, what follows it), then the new messages' rendering.
        rest = "\n" if turn_ids[-1] == EOS else "<|eos|>\n"
        text = rest + render(msgs[:j], True)[len(render(msgs[:k + 1], False)):]
        want = TOK.encode(text, add_special_tokens=False)
        assert ids[e:env_end] == want, f"turn {i}: environment tokens {ids[e:env_end]}, reference {want} ({text!r})"
        assert all(x == 0.0 for x in r["logp"][e:env_end])
        k = j


def check_logp(r, temperature=1.0):
    """Every model token's logp against the float64 reference on the whole sequence."""
    seq = list(r["prompt_ids"]) + list(r["ids"])
    h = REF.forward(torch.tensor([seq[:-1]], dtype=torch.long))[0, len(r["prompt_ids"]) - 1:]
    lp = torch.log_softmax(REF.logits(h) / temperature, dim=-1)
    worst = 0.0
    for t, (tok, m) in enumerate(zip(r["ids"], r["mask"])):
        if m:
            worst = max(worst, abs(float(lp[t, tok]) - r["logp"][t]))
    assert worst <= TOL, f"record {r['id']}: logp differs by {worst:.2e}"
    return worst


@case
def each_turn_goes_to_the_environment_and_its_messages_come_back_as_the_templates_tokens():
    recs, err = sample("-n", "2", "--slots", "3", "--env-slots", "2", "--max-new-tokens", "10", "--env", TOOLY,
                       prompts("p1.jsonl"))
    assert len(recs) == 10 and [r["id"] for r in recs] == sorted(r["id"] for r in recs)
    with open(LOG) as f:
        reqs = [json.loads(line) for line in f]
    for r in recs:
        check_rollout(r)
        assert len(r["turns"]) == 3 and r["reward"] == 3.25 and r["info"] == {"n": r["task"]["n"]}
        assert r["finish"] in ("stop", "length") and r["text"] == r["messages"][-1]["content"]
        mine = [q for q in reqs if q["id"] == r["id"]]
        assert [q["turn"] for q in mine] == [1, 2, 3]
        assert all(set(q) == {"id", "turn", "messages", "prompt"} for q in mine), mine[0].keys()
        assert mine[0]["prompt"] == {"answer": r["answer"], "task": r["task"]}
        assert mine[-1]["messages"] == r["messages"], "the last request carries the whole conversation"
    assert "30 turns, 0 rollouts failed" in err, err


@case
def model_tokens_carry_the_log_probability_they_were_drawn_with():
    recs, _ = sample("-n", "2", "--slots", "4", "--max-new-tokens", "8", "--env", TOOLY, prompts("p2.jsonl", 3))
    worst = max(check_logp(r) for r in recs)
    print(f"# {sum(sum(r['mask']) for r in recs)} model tokens after environment turns: largest |logp - reference| "
          f"{worst:.2e}")


@case
def max_turns_makes_the_last_request_final():
    recs, _ = sample("--max-turns", "2", "--max-new-tokens", "6", "--env", TOOLY, prompts("p3.jsonl", 3))
    with open(LOG) as f:
        reqs = [json.loads(line) for line in f]
    for r in recs:
        assert len(r["turns"]) == 2 and r["reward"] == 2.25
    finals = [q for q in reqs if q.get("final")]
    assert len(finals) == 3 and all(q["turn"] == 2 and q["reason"] == "max_turns" for q in finals)


@case
def the_context_length_ends_a_rollout_with_a_final_request():
    # 25 prompt tokens, turns of at most 6: the environment's 2nd answer does not fit in 60.
    recs, _ = sample("--max-len", "60", "--max-new-tokens", "6", "--env", TOOLY, prompts("p4.jsonl", 2))
    with open(LOG) as f:
        reqs = [json.loads(line) for line in f]
    for r in recs:
        check_rollout(r)
        assert len(r["prompt_ids"]) + len(r["ids"]) <= 60
        assert r["reward"] == 2.25, "ended by the final request of turn 2"
    assert all(q["reason"] == "length" for q in reqs if q.get("final"))


@case
def a_slow_environment_waits_while_others_decode_and_the_groups_stay_whole():
    slow = threaded_env("slow.py", """
    time.sleep(0.05 * (r["id"] % 4))
    return {"id": r["id"], "done": True, "reward": 1.0} if r["turn"] >= 2 else \\
           {"id": r["id"], "messages": [{"role": "user", "content": "more"}]}
""")
    recs, _ = sample("-n", "3", "--slots", "2", "--max-new-tokens", "5", "--env", slow, prompts("p5.jsonl", 4))
    assert len(recs) == 12
    for g in range(4):
        grp = [r for r in recs if r["group"] == g]
        assert len(grp) == 3 and all(len(r["turns"]) == 2 for r in grp)
        check_rollout(grp[0])


# ---- weights pushed during a conversation ----------------------------------------------

def versions_model(name, seed):
    d = os.path.join(WORK, name)
    llama_ref.random_model(d, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True,
                           logit_scale=2.5, max_pos=512, seed=seed)
    llama_ref.add_tiny_tokenizer(d)
    shutil.copy(os.path.join(MODEL, "tokenizer_config.json"), d)
    return d


def mixed_logp(r, refs):
    """The reference log-probabilities of a record whose tokens were computed
    by several versions: the input at position p (prompt and ids) was computed,
    its keys and values cached, by the weights of the step that fed it, which
    drew the next token: version ver[p - P + 1] (P prompt tokens; the prompt's
    positions all by ver[0]). Each run of one version goes through that
    version's float64 model on the cache the earlier runs filled."""
    seq, P = list(r["prompt_ids"]) + list(r["ids"]), len(r["prompt_ids"])
    vers = [r["ver"][max(0, p - P + 1)] for p in range(len(seq) - 1)]
    cache = refs[vers[0]].new_cache(1, len(seq))
    logits, p = [], 0
    while p < len(vers):
        q = p
        while q < len(vers) and vers[q] == vers[p]:
            q += 1
        m = refs[vers[p]]
        logits.append(m.logits(m.forward(torch.tensor([seq[p:q]], dtype=torch.long), cache, pos0=p))[0])
        p = q
    lp = torch.log_softmax(torch.cat(logits)[P - 1:], dim=-1)
    return [float(lp[t, tok]) for t, tok in enumerate(r["ids"])]


@case
def a_push_while_conversations_wait_for_their_environment_applies_to_their_next_turns():
    v0, v1 = versions_model("v0", 1), versions_model("v1", 2)
    refs = {0: llama_ref.Llama(v0), 1: llama_ref.Llama(v1)}
    sock, flag, log = os.path.join(WORK, "s.sock"), os.path.join(WORK, "pushed"), os.path.join(WORK, "waits.jsonl")
    # Answers the three first turns once all have come and the test has
    # pushed v1; the second turns with the end.
    env = env_file("waits.py", f"""
import json, os, sys, time
log, first = open({log!r}, "w"), []
for line in sys.stdin:
    r = json.loads(line)
    log.write(line); log.flush()
    if r["turn"] > 1:
        print(json.dumps({{"id": r["id"], "done": True, "reward": 1}}), flush=True)
        continue
    first.append(r["id"])
    if len(first) == 3:
        while not os.path.exists({flag!r}):
            time.sleep(0.01)
        for i in first:
            print(json.dumps({{"id": i, "messages": [{{"role": "tool", "content": "7"}}]}}), flush=True)
""")
    with iu.Procs(WORK) as P:
        s = P.start("rl-sample", "--model", v0, "--slots", "4", "--max-new-tokens", "10", "-u", "--no-provenance",
                    "--listen", "unix:" + sock, "--env", env, prompts("pv.jsonl", 3), stdout=subprocess.PIPE)
        out = iu.Reader(s.stdout)
        iu.wait_for(lambda: os.path.exists(log) and len(open(log).readlines()) == 3, 30, "3 first turns")
        sync = P.start("rl-sync", "--as-version", "1", v1, "--to", "unix:" + sock, name="rl-sync")
        assert iu.exit_status(sync, 30) == 0, iu.stderr_of(sync)
        open(flag, "w").close()
        _, recs, _ = out.finish()
        iu.expect_exit_0(s)
    worst = 0.0
    for r in recs:
        (s0, e0), (s1, e1) = r["turns"]
        assert set(r["ver"][s0:e0]) == {0} and set(r["ver"][e0:]) == {1}, r["ver"]
        ref = mixed_logp(r, refs)
        for t in range(len(r["ids"])):
            if r["mask"][t]:
                worst = max(worst, abs(ref[t] - r["logp"][t]))
    assert worst <= TOL, worst
    print(f"# turn 1 by v0, the environment's tokens and turn 2 by v1 on v0's cache: largest |logp - reference| "
          f"{worst:.2e}")


# ---- failures ------------------------------------------------------------------------------

BAD = env_file("bad.py", """
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    k = r["id"] % 5
    if k == 0:
        out = {"id": r["id"], "messages": [{"role": "assistant", "content": "I am the model"}]}
    elif k == 1:
        out = {"id": r["id"], "done": True}
    elif k == 2:
        out = {"id": r["id"], "error": "the sandbox crashed"}
    elif k == 3:
        out = {"id": r["id"], "messages": [{"content": "no role"}]}
    else:
        out = {"id": r["id"], "done": True, "reward": 1}
    print(json.dumps(out), flush=True)
""")


@case
def a_bad_answer_fails_its_rollout_alone_with_reward_0_and_the_reason():
    recs, err = sample("--max-new-tokens", "4", "--env", BAD, prompts("p6.jsonl", 10))
    assert len(recs) == 10
    why = {0: "the role \"assistant\"", 1: "\"done\" without a finite number \"reward\"",
           2: "the sandbox crashed", 3: "not a map with a string \"role\""}
    for r in recs:
        k = r["id"] % 5
        if k in why:
            assert r["reward"] == 0.0 and why[k] in r["env_error"], (k, r.get("env_error"))
            assert f"rollout id {r['id']} failed" in err
        else:
            assert r["reward"] == 1.0 and "env_error" not in r
    assert "8 rollouts failed" in err, err


@case
def more_failures_than_env_max_failures_end_the_run():
    rc, out, err = sample("--max-new-tokens", "4", "--env-max-failures", "2", "--env", BAD, prompts("p7.jsonl", 10),
                          ok=False)
    assert rc == 1, err
    assert re.search(r"3 rollouts failed, more than --env-max-failures 2; the last, rollout id \d+, prompt .*p7\.jsonl "
                     r"line \d+", err), err


@case
def an_answer_that_does_not_come_within_env_timeout_fails_its_rollout():
    # Rollout 1's answer comes after 1 s, while the others still talk (4
    # turns of 0.3 s): it is dropped with a warning.
    late = threaded_env("late.py", """
    time.sleep(1.0 if r["id"] == 1 else 0.3)
    done = r["id"] == 1 or r["turn"] >= 4
    return {"id": r["id"], "done": True, "reward": 1.0} if done else \\
           {"id": r["id"], "messages": [{"role": "user", "content": "go on"}]}
""")
    recs, err = sample("--max-new-tokens", "4", "--env-timeout", "0.5", "--env", late, prompts("p8.jsonl", 3))
    r = next(r for r in recs if r["id"] == 1)
    assert r["reward"] == 0.0 and "no answer in 0.5 s" in r["env_error"] and len(r["turns"]) == 1, r
    assert all(x["reward"] == 1.0 and len(x["turns"]) == 4 for x in recs if x["id"] != 1)
    assert "the answer to rollout id 1 came after its 0.5 s timeout; dropped" in err, err


def fatal(body, name, *expect):
    rc, out, err = sample("-n", "2", "--max-new-tokens", "4", "--env", env_file(name + ".py", body),
                          prompts(name + ".jsonl", 6), ok=False)
    assert rc == 1, f"exit {rc}: {err}"
    for x in expect:
        assert re.search(x, err), f"{x!r} not in {err}"
    recs = [o for o in rltest.stream_objects(out) if "id" in o]
    assert len(recs) % 2 == 0, "only whole groups are written"
    return recs


@case
def an_environment_that_dies_ends_the_run_naming_the_rollout_and_its_prompt():
    recs = fatal("""
import json, sys
for i, line in enumerate(sys.stdin):
    if i == 4:
        sys.exit(3)
    print(json.dumps({"id": json.loads(line)["id"], "done": True, "reward": 1}), flush=True)
""", "dies", r"environment exited \(status 3\) with \d+ requests waiting", r"rollout id \d+, prompt .*dies\.jsonl line")
    assert len(recs) >= 2, "the groups finished before are written"


@case
def an_answer_that_is_not_json_ends_the_run():
    fatal("""
import sys
for line in sys.stdin:
    print("nonsense", flush=True)
""", "garbage", r"environment: answer line 1: not a JSON answer: .*\('nonsense'\)")


@case
def an_answer_to_an_id_that_waits_for_nothing_ends_the_run():
    fatal("""
import json, sys
for line in sys.stdin:
    print(json.dumps({"id": 999, "done": True, "reward": 1}), flush=True)
""", "unknown", r"answer line 1: id 999 is no request waiting for an answer")


@case
def usage_errors():
    for args, msg in ((["--env", "cat", "--verifier", "exact"], "--env gives the rewards"),
                      (["--max-turns", "2"], "give --env CMD"),
                      (["--env", "cat", "--max-turns", "0"], "--max-turns: at least one turn")):
        rc, _, err = sample(*args, prompts("pu.jsonl", 1), ok=False)
        assert rc == 2 and msg in err, (args, rc, err)
    text = rltest.tmpfile("text.jsonl", b'{"prompt": "1+1=", "answer": "2"}\n')
    rc, _, err = sample("--env", "cat", text, ok=False)
    assert rc == 1 and "--env needs conversations" in err and "text.jsonl line 1" in err, err


rltest.finish()
