"""Conversations through the tools: rl-sample's "messages" prompts and
end-of-turn stops, rl-learn --loss sft on "messages" examples (the loss on the
assistant's turns only), and their errors.

The model is the tiny configuration with random weights (llama_ref) and a
ChatML-like template over the tiny tokenizer's special tokens, written into
tokenizer_config.json: <|bos|>ROLE: CONTENT<|pad|> per message, so that the
end of a turn (<|pad|>, 447) is not the config's eos (<|eos|>, 446). The
reference is transformers' apply_chat_template on the same directory and the
mask of tests/py/chat_ref.py.
"""
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
from rltest import case  # noqa: E402

try:
    import transformers
    from chat_ref import reference_mask
    from safetensors.numpy import load_file
except ImportError as e:   # scripts/deps.sh test installs them into .deps/venv
    print(f"SKIP test_chat_tools: {e}; run scripts/deps.sh test")
    sys.exit(0)

WORK = rltest.TMP.name
TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}: {{ m['content'] }}<|pad|>{% endfor %}"
            "{% if add_generation_prompt %}<|bos|>assistant:{% if greeting is defined %} {{ greeting }}{% endif %}"
            "{% endif %}")
END_OF_TURN = "<|pad|>"
PAD = 447
transformers.logging.set_verbosity_error()


def make_model(name, template=TEMPLATE):
    d = os.path.join(WORK, name)
    llama_ref.random_model(d, hidden=128, inter=352, layers=4, heads=4, kv_heads=2, vocab=448,
                           tie=True, logit_scale=2.5, seed=11)
    llama_ref.add_tiny_tokenizer(d)
    if template is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>", "eos_token": "<|eos|>",
                       "chat_template": template}, f)
    return d


MODEL = make_model("chat")
PLAIN = make_model("plain", None)
TOK = transformers.AutoTokenizer.from_pretrained(MODEL)


def jsonl(name, objs):
    return rltest.tmpfile(name, "".join(json.dumps(o) + "\n" for o in objs).encode())


def questions(n, seed=3):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randrange(100), rng.randrange(100)
        msgs = [{"role": "user", "content": f"{a}+{b}="}]
        if i % 3 == 0:
            msgs.insert(0, {"role": "system", "content": "add"})
        out.append({"messages": msgs, "answer": str(a + b), "n": i})
    return out


def sample(model, path, *args):
    rc, out, err = rltest.run("rl-sample", "--model", model, "--no-provenance", *args, path)
    return rc, out, err


@case
def messages_prompts_are_rendered_and_tokenized_as_apply_chat_template():
    qs = questions(20)
    rc, out, err = sample(MODEL, jsonl("q.jsonl", qs), "--temperature", "0", "--max-new-tokens", "4")
    assert rc == 0, err
    (hdr, recs, _), = rltest.read_stream(out)
    assert len(recs) == len(qs)
    for r in recs:
        q = qs[r["n"]]
        want_text = TOK.apply_chat_template(q["messages"], tokenize=False, add_generation_prompt=True)
        want_ids = TOK.apply_chat_template(q["messages"], tokenize=True, add_generation_prompt=True)
        assert r["prompt"] == want_text, (r["prompt"], want_text)
        assert list(r["prompt_ids"]) == list(want_ids)
        assert r["messages"] == q["messages"], "the conversation goes on with the other keys of the prompt"
        assert r["answer"] == q["answer"]


@case
def messages_in_a_prompt_record_stream_are_rendered_alike():
    qs = questions(6)
    rc, packed, err = rltest.run("rl-cat", "--pack", "--kind", "prompts", jsonl("qp.jsonl", qs))
    assert rc == 0, err
    rc, out, err = sample(MODEL, rltest.tmpfile("qp.rlr", packed), "--temperature", "0", "--max-new-tokens", "2")
    assert rc == 0, err
    (_, recs, _), = rltest.read_stream(out)
    for r in recs:
        want = TOK.apply_chat_template(qs[r["n"]]["messages"], tokenize=True, add_generation_prompt=True)
        assert list(r["prompt_ids"]) == list(want)


@case
def chat_arg_sets_a_template_variable():
    rc, out, err = sample(MODEL, jsonl("q1.jsonl", questions(2)), "--temperature", "0", "--max-new-tokens", "1",
                          "--chat-arg", "greeting=\"Sure!\"")
    assert rc == 0, err
    (_, recs, _), = rltest.read_stream(out)
    assert all(r["prompt"].endswith("<|bos|>assistant: Sure!") for r in recs), recs[0]["prompt"]


@case
def a_completion_ends_at_the_templates_end_of_turn_and_says_so():
    rc, out, err = sample(MODEL, jsonl("q2.jsonl", questions(64)), "-n", "4", "--max-new-tokens", "48", "--seed", "5")
    assert rc == 0, err
    (_, recs, _), = rltest.read_stream(out)
    ended = 0
    for r in recs:
        ids = list(r["ids"])
        assert PAD not in ids[:-1], f"a completion went on after the end of its turn: {ids}"
        if ids[-1] == PAD:
            ended += 1
            assert r["finish"] == "stop" and r["stop_reason"] == END_OF_TURN, r
            assert END_OF_TURN not in r["text"], "the text leaves out special tokens"
            assert r["text"] == TOK.decode(ids, skip_special_tokens=True)
        elif r["finish"] == "length":
            assert "stop_reason" not in r
    assert ended > 0, "no completion of 256 sampled the end of its turn: the check proved nothing"
    print(f"# {ended} of {len(recs)} completions ended at {END_OF_TURN}")


@case
def without_a_template_the_pad_token_does_not_stop_and_messages_are_refused():
    path = jsonl("q3.jsonl", [{"prompt": "1+2=", "answer": "3"}])
    rc, out, err = sample(PLAIN, path, "-n", "64", "--max-new-tokens", "48", "--seed", "5")
    assert rc == 0, err
    (_, recs, _), = rltest.read_stream(out)
    assert any(PAD in list(r["ids"])[:-1] for r in recs), "447 ends nothing when no template names it"
    rc, out, err = sample(PLAIN, jsonl("q4.jsonl", questions(3)))
    assert rc == 1 and "chat template" in err and "q4.jsonl line 1" in err, err
    rc, out, err = sample(PLAIN, path, "--chat-arg", "x=1")
    assert rc == 2 and "no chat template" in err, err


@case
def bad_conversations_are_refused_naming_the_line():
    bad = [{"messages": [{"role": "user", "content": "hi"}], "prompt": "hi"},
           {"messages": "hello"},
           {"messages": [{"content": "no role"}]}]
    for i, obj in enumerate(bad):
        path = jsonl(f"bad{i}.jsonl", questions(2) + [obj])
        rc, out, err = sample(MODEL, path)
        assert rc == 1, (rc, err)
        assert f"bad{i}.jsonl line 3" in err, err
    rc, out, err = sample(MODEL, jsonl("bad9.jsonl", questions(1)), "--chat-arg", "enable thinking=1")
    assert rc == 2 and "not a template variable" in err, err


# ---- supervised fine-tuning on conversations ------------------------------------------------

def conversations(n, seed=4):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs = [{"role": "system", "content": "add"}] if i % 2 else []
        for _ in range(rng.randrange(1, 4)):
            a, b = rng.randrange(100), rng.randrange(100)
            msgs += [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": str(a + b)}]
        out.append({"messages": msgs})
    return out


def learn(model, out, path, *args):
    return rltest.run("rl-learn", "--init", model, "--out", out, "--loss", "sft", "--batch", "8", "--lr", "1e-3",
                      "--max-steps", "3", "--quiet", *args, path)


@case
def sft_on_messages_trains_on_the_assistant_turns_only():
    convs = conversations(24)
    # the same examples as prompt_ids, ids and the reference mask
    equivalent = []
    for c in convs:
        ids, mask = reference_mask(TOK, c["messages"], END_OF_TURN)
        first = mask.index(1)
        equivalent.append({"prompt_ids": ids[:first], "ids": ids[first:], "mask": mask[first:]})
    assert any(0 in e["mask"] for e in equivalent), "no example has template tokens between its assistant turns"
    a, b = os.path.join(WORK, "ckpt-messages"), os.path.join(WORK, "ckpt-ids")
    rc, _, err = learn(MODEL, a, jsonl("sft.jsonl", convs))
    assert rc == 0, err
    rc, _, err = learn(MODEL, b, jsonl("sft-ids.jsonl", equivalent))
    assert rc == 0, err
    wa = load_file(os.path.join(a, open(os.path.join(a, "latest")).read().strip(), "model.safetensors"))
    wb = load_file(os.path.join(b, open(os.path.join(b, "latest")).read().strip(), "model.safetensors"))
    w0 = load_file(os.path.join(MODEL, "model.safetensors"))
    for k in wa:
        assert (wa[k] == wb[k]).all(), f"{k}: the messages run differs from the run on the reference mask"
    assert any((wa[k] != w0[k]).any() for k in wa), "3 steps changed nothing"


@case
def sft_messages_errors_are_clear():
    conv = conversations(1)[0]
    cases = [({"messages": [{"role": "user", "content": "only a question"}]}, "sft", "no assistant turn"),
             (dict(conv, mask=[1, 0]), "sft", "\"mask\""),
             (dict(conv, prompt="12+30="), "sft", "\"prompt\""),
             (dict(conv, reward=1.0), "pg", "--loss sft")]
    for i, (obj, loss, want) in enumerate(cases):
        out = os.path.join(WORK, f"ckpt-bad{i}")
        good = conversations(2) if loss == "sft" else []
        rc, _, err = rltest.run("rl-learn", "--init", MODEL, "--out", out, "--loss", loss, "--batch", "1", "--quiet",
                                jsonl(f"sft-bad{i}.jsonl", good + [obj]))
        assert rc == 1 and want in err and f"line {len(good) + 1}" in err, (rc, err)
    rc, _, err = rltest.run("rl-learn", "--init", PLAIN, "--out", os.path.join(WORK, "ckpt-plain"), "--loss", "sft",
                            "--batch", "1", "--quiet", jsonl("sft-plain.jsonl", conversations(1)))
    assert rc == 1 and "chat template" in err, (rc, err)


rltest.finish()
