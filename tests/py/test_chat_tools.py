"""Conversations through the tools: rl-sample's "messages" prompts and
end-of-turn stops, rl-learn --loss sft on "messages" examples (the loss on the
assistant's turns only), and their errors; the tools a conversation offers
(a prompt's or an example's "tools", --chat-arg tools=@FILE), and the tool
calls read back from an assistant's turn.

The model is the tiny configuration with random weights (llama_ref) and a
ChatML-like template over the tiny tokenizer's special tokens, written into
tokenizer_config.json: <|bos|>ROLE: CONTENT<|pad|> per message, so that the
end of a turn (<|pad|>, 447) is not the config's eos (<|eos|>, 446); a
second model's template also renders its tools. The reference is
transformers' apply_chat_template on the same directory and the mask of
tests/py/chat_ref.py.

Then the templates of real models (tests/py/chat_families.py: Qwen2.5, Qwen3,
Llama 3.1 and 3.2 with their tokenizers, Mistral Nemo's and Ministral 3's
over the tiny one), through tests/tools/chat_tool:
  - an assistant's message with tool_calls, rendered by transformers: the
    text of its turn (between the generation prompt and the end of the turn),
    as the template writes it and as a model's text decodes without special
    tokens, parsed in the template's format (tc_parse through chat_tool
    --toolcalls) gives the calls back: names, arguments (exact JSON values:
    1.0 stays a float) and, where the template writes them, ids;
  - a conversation with "tools" renders as apply_chat_template(messages,
    tools=tools, add_generation_prompt=True), text and ids, and so does
    --arg tools=@FILE; a rollout with tools (chat_tool --turns, chat_continue)
    makes the tokens of apply_chat_template(final conversation, tools=tools).
"""
import json
import os
import random
import re
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
try:   # the real models' templates and tokenizers, for the last part
    import chat_families as cf
    NO_TEMPLATES = "" if os.path.isdir(cf.TEMPLATES) else f"no templates in {cf.TEMPLATES}; run scripts/deps.sh test"
except ImportError as e:
    NO_TEMPLATES = f"{e}; run scripts/deps.sh test"

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


def sft_and_reference(model, tok, convs, name):
    """rl-learn --loss sft on the conversations convs (with their tools), and on
    the same examples as prompt_ids, ids and the reference mask: those
    examples, and the weights after each run."""
    equivalent = []
    for c in convs:
        ids, mask = reference_mask(tok, c["messages"], END_OF_TURN, tools=c.get("tools"))
        first = mask.index(1)
        equivalent.append({"prompt_ids": ids[:first], "ids": ids[first:], "mask": mask[first:]})
    weights = []
    for suffix, examples in (("", convs), ("-ids", equivalent)):
        out = os.path.join(WORK, f"ckpt-{name}{suffix}")
        rc, _, err = learn(model, out, jsonl(f"sft-{name}{suffix}.jsonl", examples))
        assert rc == 0, err
        weights.append(load_file(os.path.join(out, open(os.path.join(out, "latest")).read().strip(),
                                              "model.safetensors")))
    return equivalent, weights[0], weights[1]


@case
def sft_on_messages_trains_on_the_assistant_turns_only():
    equivalent, wa, wb = sft_and_reference(MODEL, TOK, conversations(24), "messages")
    assert any(0 in e["mask"] for e in equivalent), "no example has template tokens between its assistant turns"
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


# ---- the tools a conversation offers ---------------------------------------------------

# Short: the tiny model's context is 256 tokens of about a byte each.
TOOLS = [{"type": "function", "function": {"name": "calc", "scale": 1.0}}]
OTHER_TOOLS = [{"name": "time"}, {"name": "date"}]
# Tools before the conversation, and their count after each tool's result:
# later turns show whether they were rendered with the prompt's tools.
TOOLS_TEMPLATE = ("{% if tools %}<|bos|>tools: {{ tools | tojson }}<|pad|>{% endif %}"
                  "{% for m in messages %}<|bos|>{{ m['role'] }}: {{ m['content'] }}"
                  "{% if m['role'] == 'tool' and tools %} (of {{ tools | length }} tools){% endif %}<|pad|>{% endfor %}"
                  "{% if add_generation_prompt %}<|bos|>assistant:{% endif %}")
TOOLS_MODEL = make_model("chat-tools", TOOLS_TEMPLATE)
TOOLS_TOK = transformers.AutoTokenizer.from_pretrained(TOOLS_MODEL)


def with_tools(qs, tools, every=2):
    """qs with tools on every `every`-th prompt."""
    return [dict(q, tools=tools) if i % every == 0 else q for i, q in enumerate(qs)]


def check_prompts(recs, qs, default_tools=None):
    """Each record's prompt is its conversation rendered with its own tools, else default_tools."""
    assert len(recs) == len(qs)
    for r in recs:
        q = qs[r["n"]]
        tools = q.get("tools", default_tools)
        want = TOOLS_TOK.apply_chat_template(q["messages"], tools=tools, tokenize=False, add_generation_prompt=True)
        assert r["prompt"] == want, (r["prompt"], want)
        assert list(r["prompt_ids"]) == TOOLS_TOK.apply_chat_template(q["messages"], tools=tools, tokenize=True,
                                                                      add_generation_prompt=True)
        assert r.get("tools") == q.get("tools"), "a prompt's tools go on into its records"
        assert ("<|bos|>tools: " in r["prompt"]) == (tools is not None)


@case
def a_prompts_tools_render_it_as_apply_chat_template_with_tools():
    qs = with_tools(questions(8), TOOLS)
    rc, out, err = sample(TOOLS_MODEL, jsonl("qt.jsonl", qs), "--temperature", "0", "--max-new-tokens", "2")
    assert rc == 0, err
    (_, recs, _), = rltest.read_stream(out)
    check_prompts(recs, qs)


@case
def chat_arg_tools_at_file_gives_every_prompt_the_files_tools_and_a_prompts_own_or_null_replace_them():
    path = rltest.tmpfile("tools.json", json.dumps(TOOLS, indent=2, ensure_ascii=False).encode())
    with open(path, encoding="utf-8") as f:
        assert "1.0" in f.read(), "the file's 1.0 must reach the template as a float, as Python's json reads it"
    qs = with_tools(questions(8), OTHER_TOOLS, every=3)
    qs[1]["tools"] = None   # none for this one, as apply_chat_template(tools=None)
    rc, out, err = sample(TOOLS_MODEL, jsonl("qf.jsonl", qs), "--temperature", "0", "--max-new-tokens", "2",
                          "--chat-arg", f"tools=@{path}")
    assert rc == 0, err
    (_, recs, _), = rltest.read_stream(out)
    check_prompts(recs, qs, default_tools=TOOLS)


@case
def chat_arg_at_a_file_that_cannot_be_read_or_is_not_json_is_a_usage_error_naming_it():
    none = os.path.join(WORK, "no-such-tools.json")
    bad = rltest.tmpfile("bad-tools.json", b'[{"type": "function",\n  "function": {"name": "x",}}]')
    for arg, want in ((f"tools=@{none}", [none, "No such file"]),
                      (f"tools=@{bad}", [bad, "not valid JSON (line 2"]),
                      ("tools=@", ["name the file after '@'"])):
        rc, out, err = sample(TOOLS_MODEL, jsonl("qe.jsonl", questions(1)), "--chat-arg", arg)
        assert rc == 2 and all(w in err for w in want), (arg, rc, err)


@case
def a_prompts_tools_that_are_not_a_list_are_refused_naming_the_line():
    qs = questions(2) + [dict(questions(1)[0], tools={"type": "function"})]
    rc, out, err = sample(TOOLS_MODEL, jsonl("qbad.jsonl", qs))
    assert rc == 1 and '"tools" is not a list' in err and "qbad.jsonl line 3" in err, (rc, err)


@case
def rollouts_render_the_environments_messages_with_their_prompts_tools():
    env = rltest.tmpfile("tool-env.py", b"""
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r.get("final"):
        print(json.dumps({"id": r["id"], "done": True, "reward": 1.0}), flush=True)
    else:
        print(json.dumps({"id": r["id"], "messages": [{"role": "tool", "content": "1554"}]}), flush=True)
""")
    qs = with_tools(questions(6), TOOLS)
    rc, out, err = sample(TOOLS_MODEL, jsonl("qenv.jsonl", qs), "--max-new-tokens", "4", "--max-turns", "2",
                          "--env", f"/usr/bin/python3 -u {env}")
    assert rc == 0, err
    (_, recs, _), = rltest.read_stream(out)
    assert len(recs) == len(qs)
    for r in recs:
        text = TOOLS_TOK.decode(r["ids"])
        result = "<|bos|>tool: 1554 (of 1 tools)<|pad|>" if "tools" in qs[r["n"]] else "<|bos|>tool: 1554<|pad|>"
        assert result in text, (qs[r["n"]], text)
        assert r["messages"][-1]["role"] == "assistant" and r["turns"] and len(r["turns"]) == 2, r


@case
def sft_on_messages_with_tools_trains_as_on_the_reference_mask_with_them():
    _, wa, wb = sft_and_reference(TOOLS_MODEL, TOOLS_TOK, with_tools(conversations(12, seed=5), TOOLS), "tools")
    for k in wa:
        assert (wa[k] == wb[k]).all(), f"{k}: the run on messages with tools differs from the run on the reference mask"


# ---- real templates: tool calls read back, tools rendered ---------------------------------

CHAT_TOOL = os.path.join(rltest.ROOT, os.environ.get("BUILD", "build"), "tests", "tools", "chat_tool")
REAL_TOOLS = TOOLS + [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather at a place, in \"quotes\"",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]
CALLS = {
    "calc": {"name": "calculator", "arguments": {"expression": "37 * 42"}},
    "weather": {"name": "get_weather", "arguments": {"city": "Zürich 🙂", "days": 2, "scale": 1.0, "hours": [9, 17.5],
                                                     "detail": {"wind": True, "note": "a } b { \" ]"}, "none": None}},
    "time": {"name": "time", "arguments": {}},
}
CALL_IDS = ["a1b2c3d4e", "f5g6h7i8j"]   # Mistral's: 9 letters and digits


def tool_calls(*names):
    return [{"id": CALL_IDS[i], "type": "function", "function": CALLS[n]} for i, n in enumerate(names)]


def real(fn):
    """A case on the real templates, or SKIP when they are not installed."""
    if NO_TEMPLATES:
        print(f"SKIP {fn.__name__}: {NO_TEMPLATES}", flush=True)
        return fn
    return case(fn)


SPECS = {} if NO_TEMPLATES else dict(
    {k: cf.FAMILIES[k] for k in ("qwen2.5", "qwen3", "llama3.1", "llama3.2")}, **cf.MISTRAL)
DIRS = {name: cf.model_dir(name, *spec[:3]) for name, spec in SPECS.items()}
TOKS = {name: transformers.AutoTokenizer.from_pretrained(d) for name, d in DIRS.items()}


def chat_tool(name, lines, *args):
    p = subprocess.run([CHAT_TOOL, *args, DIRS[name]], input="".join(json.dumps(x) + "\n" for x in lines).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, f"chat_tool {args} exited {p.returncode}: {p.stderr.decode()[-800:]}"
    out = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert len(out) == len(lines)
    return out


def assistant_turn(name, msgs):
    """The text the template writes for the last message, an assistant's: what follows the
    messages before it rendered with the generation prompt, up to the end of the turn."""
    tok = TOKS[name]
    before = tok.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True)
    whole = tok.apply_chat_template(msgs, tokenize=False)
    assert whole.startswith(before), (name, before, whole)
    turn = whole[len(before):]
    return turn[:turn.rindex(SPECS[name][4])]


def decoded(name, turn):
    """turn as a model's text decodes, its special tokens left out: Mistral's
    tokenizers hold [TOOL_CALLS], [ARGS] and [CALL_ID] as special tokens."""
    if name in cf.MISTRAL:
        return re.sub(r"\[(TOOL_CALLS|ARGS|CALL_ID)\]", "", turn)
    tok = TOKS[name]
    return tok.decode(tok.encode(turn, add_special_tokens=False), skip_special_tokens=True)


# family: (format, the calls of one message (Llama's templates render one), contents,
#          whether the text decoded without special tokens still holds the calls, whether ids are written)
ROUND_TRIPS = {
    "qwen2.5": ("hermes", [["calc"], ["weather"], ["time"], ["calc", "weather"]], ["", "Let me check."], True, False),
    "qwen3": ("hermes", [["calc"], ["weather"], ["time"], ["calc", "weather"]], ["", "Let me check."], True, False),
    "llama3.1": ("llama", [["calc"], ["weather"], ["time"]], [""], True, False),
    "llama3.2": ("llama", [["calc"], ["weather"], ["time"]], [""], True, False),
    "mistral-nemo": ("mistral", [["calc"], ["weather", "time"]], [""], True, True),
    # [TOOL_CALLS]NAME[ARGS]{...} is read with its markers only (toolcall.h)
    "ministral3": ("mistral", [["calc"], ["weather", "time"]], ["", "Let me check."], False, False),
}


@real
def tool_calls_read_back_from_the_turn_each_template_writes():
    for name, (fmt, call_sets, contents, without_specials, ids) in ROUND_TRIPS.items():
        cases = []
        for names in call_sets:
            for content in contents:
                calls = tool_calls(*names)
                turn = assistant_turn(name, [{"role": "user", "content": "What is 37 * 42, and the weather?"},
                                             {"role": "assistant", "content": content, "tool_calls": calls}])
                want = [dict({"id": c["id"]} if ids else {}, type="function", function=c["function"]) for c in calls]
                cases.append((turn, want))
                cases.append((decoded(name, turn), want if without_specials else []))
        got = chat_tool(name, [{"text": t} for t, _ in cases], "--toolcalls")
        for (turn, want), g in zip(cases, got):
            assert g["format"] == fmt, (name, g["format"])
            # json.dumps tells 1.0 from 1 and keeps the keys' order
            assert json.dumps(g["tool_calls"], ensure_ascii=False) == json.dumps(want, ensure_ascii=False), \
                f"{name}: {turn!r}\n  parsed {g['tool_calls']}\n  given  {want}"
        print(f"# {name}: {len(cases)} turns, {sum(len(w) for _, w in cases)} calls read back in the {fmt} format")


def tool_conversations(name):
    """Conversations with and without a system message, earlier turns, and (but
    Mistral Nemo's, which insists on its own call ids) a tool call and its result."""
    convs = [[{"role": "user", "content": "What is 37 * 42?"}],
             [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "naïve café 🙂"}],
             [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
              {"role": "user", "content": "Weather in Zürich?"}]]
    if name != "mistral-nemo":
        convs.append([{"role": "user", "content": "What is 37 * 42?"},
                      {"role": "assistant", "content": "", "tool_calls": tool_calls("calc")},
                      {"role": "tool", "content": "1554"}, {"role": "user", "content": "And 2 * 2?"}])
    return convs


@real
def conversations_with_tools_render_as_apply_chat_template_with_tools():
    path = rltest.tmpfile("real-tools.json", json.dumps(REAL_TOOLS).encode())
    for name in ("qwen2.5", "qwen3", "llama3.1", "llama3.2", "mistral-nemo"):
        tok, convs = TOKS[name], tool_conversations(name)
        lines = [{"messages": m, "tools": REAL_TOOLS} for m in convs] + [{"messages": m} for m in convs]
        for got, line in zip(chat_tool(name, lines, "--gen"), lines):
            tools = line.get("tools")
            want = tok.apply_chat_template(line["messages"], tools=tools, tokenize=False, add_generation_prompt=True)
            assert got.get("text") == want, f"{name} tools {tools is not None}: {got} / {want!r}"
            if name not in cf.MISTRAL:   # its tokenizer a stand-in: the text alone says what was rendered
                assert got["ids"] == tok.apply_chat_template(line["messages"], tools=tools, add_generation_prompt=True)
        # --arg tools=@FILE for every conversation
        for got, m in zip(chat_tool(name, [{"messages": m} for m in convs], "--gen", "--arg", f"tools=@{path}"), convs):
            assert got.get("text") == tok.apply_chat_template(m, tools=REAL_TOOLS, tokenize=False,
                                                              add_generation_prompt=True), (name, got)
        print(f"# {name}: {len(lines) + len(convs)} conversations rendered as apply_chat_template(tools=...)")


TURN_TEXTS = {"hermes": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "37 * 42"}}\n</tool_call>',
              "llama": '{"name": "calculator", "parameters": {"expression": "37 * 42"}}'}


@real
def rollouts_with_tools_make_the_tokens_of_the_final_conversation_with_them():
    for name, fmt in (("qwen2.5", "hermes"), ("llama3.1", "llama"), ("llama3.2", "llama")):
        rng = random.Random(len(name))
        lines = []
        for k in range(12):
            msgs = [{"role": "system", "content": "Use the tools."}] if k % 2 else []
            msgs.append({"role": "user", "content": "What is 37 * 42?"})
            for _ in range(rng.randrange(1, 4)):
                msgs.append({"role": "assistant", "content": TURN_TEXTS[fmt]})
                msgs.append({"role": "tool", "content": rng.choice(["1554", '{"result": 1554}', "naïve 🙂"])})
                if rng.random() < 0.4:
                    msgs.append({"role": "user", "content": "Go on."})
            lines.append({"messages": msgs, "tools": REAL_TOOLS})
        tok = TOKS[name]
        for got, line in zip(chat_tool(name, lines, "--turns"), lines):
            assert "error" not in got, (name, got)
            want = tok.apply_chat_template(line["messages"], tools=REAL_TOOLS, add_generation_prompt=True)
            assert got["ids"] == want and got["rewrote"] == 0, (name, line["messages"])
        print(f"# {name}: {len(lines)} rollouts with tools equal apply_chat_template(final conversation, tools=...)")


rltest.finish()
