"""Chat templates (lib/template/chat.c on lib/template/jinja*.c) against transformers 4.46's
apply_chat_template, through tests/tools/chat_tool.

The templates are the public ones of SmolLM2, Qwen2.5, Qwen3 and Llama 3.1/3.2,
each with its real tokenizer (tests/py/chat_families.py says where they come from).

For every template, over 220 generated conversations (a system message or
not, 1 to 6 turns, unicode, empty contents, text that looks like Jinja,
reasoning in <think> for Qwen3) with and without the generation prompt:
  - the rendered text is byte-identical to apply_chat_template(tokenize=False),
  - the ids equal apply_chat_template(tokenize=True),
  - where transformers raises, chat_tool reports an error too.
Then the assistant masks (the loss of rl-learn --loss sft):
  - a template with {% generation %} blocks: equal to transformers'
    return_assistant_tokens_mask;
  - templates without: equal to the reference below, computed from
    transformers' renderings and the tokenizers' offsets;
  - conversations with tool turns (calls in the content or as "tool_calls",
    the tools' results, the user again; with tools=... and Llama 3.1's
    builtin_tools): equal to the reference, the assistant's turns alone, and
    refused where the template raises or the reference cannot split them
    (Qwen3 unless every turn after the last question holds its reasoning).
And the end-of-turn token each template gives, and the errors: a template
that raises, a construct not implemented, malformed messages.
"""
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rltest  # noqa: E402
from rltest import case  # noqa: E402

try:
    import transformers
    from chat_families import FAMILIES, TEMPLATES, model_dir
    from chat_ref import reference_mask
except ImportError as e:   # scripts/deps.sh test installs them into .deps/venv
    print(f"SKIP test_chat: {e}; run scripts/deps.sh test")
    sys.exit(0)

if not os.path.isdir(TEMPLATES):
    print(f"SKIP test_chat: no templates in {TEMPLATES}; run scripts/deps.sh test")
    sys.exit(0)
TOOL = os.path.join(rltest.ROOT, os.environ.get("BUILD", "build"), "tests", "tools", "chat_tool")
N_CONVERSATIONS = 220
transformers.logging.set_verbosity_error()

PIECES = ["Hello", "What is 17 + 17?", "naïve café", "日本語のテキスト", "emoji 🙂🚀", "e\u0301 combining",
          "{{ not_jinja }}", "{% if x %}", "it's \"quoted\"", "line one\nline two", "  padded  ", "\t tab",
          "", "ℌ𝔢𝔩𝔩𝔬 math", "Ünïcödé", "\\backslash\\", "<b>html</b>", "x" * 40, "the end.\n\n", "0.1 + 0.2"]


def text(rng, thinking=False):
    s = "".join(rng.choice(PIECES) + rng.choice(["", " ", "\n"]) for _ in range(rng.randrange(0, 4)))
    if thinking and rng.random() < 0.5:
        s = "<think>\n" + rng.choice(PIECES) + "\n</think>\n\n" + s
    return s


def conversation(rng, thinking, ends_with_user):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng)})
    turns = rng.randrange(1, 7)
    for t in range(turns):
        msgs.append({"role": "user", "content": text(rng)})
        if t < turns - 1 or not ends_with_user:
            m = {"role": "assistant", "content": text(rng, thinking)}
            if rng.random() < 0.1:
                m["name"] = "extra key"
            msgs.append(m)
    return msgs


def conversations(seed, thinking, n=N_CONVERSATIONS):
    rng = random.Random(seed)
    return [conversation(rng, thinking, ends_with_user=i % 2 == 0) for i in range(n)]


def ours(d, convs, gen, args=None, mask=False):
    cmd = [TOOL] + (["--gen"] if gen else []) + (["--mask"] if mask else [])
    for k, v in (args or {}).items():
        cmd += ["--arg", f"{k}={json.dumps(v)}"]
    stdin = "".join(json.dumps({"messages": m}, ensure_ascii=False) + "\n" for m in convs)
    p = subprocess.run(cmd + [d], input=stdin.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, f"chat_tool exited {p.returncode}: {p.stderr.decode()[-800:]}"
    # one result a line: JSON text may hold U+2028 and the like, which splitlines() would also split at
    out = [json.loads(line) for line in p.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(convs), f"{len(out)} results for {len(convs)} conversations"
    return out


def theirs(tok, msgs, gen, args):
    try:
        t = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen, **args)
        ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen, **args)
        return {"text": t, "ids": list(ids)}
    except Exception as e:   # the template raised: ours must refuse too
        return {"error": f"{type(e).__name__}: {e}"}


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"at {i}: ours {a[max(0, i - 20):i + 30]!r} / transformers {b[max(0, i - 20):i + 30]!r}"


DIRS = {name: model_dir(name, *spec[:3]) for name, spec in FAMILIES.items()}
TOKS = {name: transformers.AutoTokenizer.from_pretrained(d) for name, d in DIRS.items()}


def check_family(name):
    thinking = name == "qwen3"
    convs = conversations(sum(name.encode()), thinking)
    compared = errors = 0
    for args in FAMILIES[name][3]:
        for gen in (True, False):
            got = ours(DIRS[name], convs, gen, args)
            for k, msgs in enumerate(convs):
                want = theirs(TOKS[name], msgs, gen, args)
                where = f"conversation {k} (gen {gen}, args {args}): {json.dumps(msgs, ensure_ascii=False)[:300]}"
                if "error" in want:
                    assert "error" in got[k], f"transformers raised {want['error']}, ours did not: {where}"
                    errors += 1
                    continue
                assert "error" not in got[k], f"ours failed: {got[k]['error']}: {where}"
                assert got[k]["text"] == want["text"], f"text differs {first_difference(got[k]['text'], want['text'])}: {where}"
                assert got[k]["ids"] == want["ids"], f"ids differ {first_difference(got[k]['ids'], want['ids'])}: {where}"
                compared += 1
    print(f"# {name}: {compared} renderings byte-identical with equal ids, {errors} refused by both")
    assert compared >= 2 * N_CONVERSATIONS


@case
def smollm2_renders_as_transformers():
    check_family("smollm2")


@case
def qwen25_renders_as_transformers():
    check_family("qwen2.5")


@case
def qwen3_renders_as_transformers_with_enable_thinking_unset_true_false():
    check_family("qwen3")


@case
def llama31_renders_as_transformers():
    check_family("llama3.1")


@case
def llama32_renders_as_transformers_with_todays_date():
    check_family("llama3.2")


@case
def end_of_turn_is_the_special_token_after_an_assistant_reply():
    for name, d in DIRS.items():
        p = subprocess.run([TOOL, "--info", d], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 0, p.stderr.decode()
        info = json.loads(p.stdout)
        want = TOKS[name].convert_tokens_to_ids(FAMILIES[name][4])
        assert info["end_of_turn"] == want, f"{name}: end of turn {info['end_of_turn']}, expected {want}"
        eos = TOKS[name].eos_token_id
        assert info["eos"] == (eos if eos is not None else -1), f"{name}: eos {info['eos']}, expected {eos}"


# ---- assistant masks ----------------------------------------------------------------

def check_masks(name, convs, args=None):
    """chat_tool --mask against reference_mask: equal masks, or an error from
    both where the reference cannot split the conversation or the template
    raises. (compared, refused, raised)."""
    args = args or {}
    got = ours(DIRS[name], convs, False, args, mask=True)
    compared = refused = raised = 0
    for k, msgs in enumerate(convs):
        try:
            want = reference_mask(TOKS[name], msgs, FAMILIES[name][4], **args)
        except Exception as e:   # transformers raised: ours must refuse too
            assert "error" in got[k], f"{name} conversation {k}: transformers raised {type(e).__name__}: {e}, " \
                                      f"ours did not: {json.dumps(msgs, ensure_ascii=False)[:300]}"
            raised += 1
            continue
        if want is None:
            assert "error" in got[k] and "generation" in got[k]["error"], \
                f"{name} conversation {k}: the reference cannot split it, ours gave {str(got[k])[:200]}"
            refused += 1
            continue
        where = f"{name} conversation {k} (args {args}): {json.dumps(msgs, ensure_ascii=False)[:300]}"
        assert "error" not in got[k], f"{got[k]['error']}: {where}"
        assert got[k]["ids"] == want[0], f"ids differ {first_difference(got[k]['ids'], want[0])}: {where}"
        assert got[k]["mask"] == want[1], f"mask {first_difference(got[k]['mask'], want[1])}: {where}"
        assert sum(want[1]) > 0
        compared += 1
    print(f"# {name}{' ' + str(sorted(args)) if args else ''}: {compared} assistant masks equal to the reference, "
          f"{refused} refused by both, {raised} raised by the template and refused by ours")
    return compared, refused, raised


@case
def assistant_masks_without_generation_blocks_match_the_reference():
    for name in ("smollm2", "qwen2.5", "llama3.1"):
        convs = [c for c in conversations(7, False, 60) if c[-1]["role"] == "assistant"]
        compared, _, _ = check_masks(name, convs)
        assert compared == len(convs)


@case
def qwen3_single_turn_masks_match_and_multi_turn_reasoning_is_refused():
    convs = [c for c in conversations(8, True, 80) if c[-1]["role"] == "assistant"]
    compared, refused, _ = check_masks("qwen3", convs)
    assert compared > 0 and refused > 0, (compared, refused)


GENERATION_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@case
def generation_blocks_give_transformers_assistant_masks():
    d = model_dir("smollm2-generation", "smollm2", None, {}, GENERATION_TEMPLATE)
    tok = transformers.AutoTokenizer.from_pretrained(d)
    convs = [c for c in conversations(9, False, 80) if c[-1]["role"] == "assistant"]
    got = ours(d, convs, False, mask=True)
    for k, msgs in enumerate(convs):
        want = tok.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert got[k]["ids"] == list(want["input_ids"]), f"conversation {k}: ids differ"
        assert got[k]["mask"] == list(want["assistant_masks"]), \
            f"conversation {k}: mask {first_difference(got[k]['mask'], list(want['assistant_masks']))}"
    print(f"# {len(convs)} masks equal to transformers' return_assistant_tokens_mask")


# ---- assistant masks of conversations with tool turns ----------------------------
# An agent's conversation as an SFT example: a question, turns that call tools
# (the calls written in the content as the model writes them, or as
# "tool_calls" in the OpenAI form, which the template renders: Qwen's
# <tool_call> blocks, Llama 3.1's JSON; SmolLM2's leaves them out), the tools'
# results (role "tool"; Llama 3.1's "ipython" too), the answer, at times the
# user again. The mask is the assistant's turns', whatever the template makes
# of the others: SmolLM2 a ChatML turn of role "tool", Qwen a user turn of
# <tool_response> blocks (one turn for consecutive results), Llama 3.1 an
# ipython turn.

TOOL_SYSTEM = ('You can call a calculator: write <tool_call>{"name": "calculator", "arguments": '
               '{"expression": "..."}}</tool_call>')
CALCULATOR = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluates ☀ \"arithmetic\"",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
CALL_ARGUMENTS = [{"expression": "347 * 29"}, {"city": "Zürich", "units": "°C"}, {"x": 2.0, "y": 1e-05, "z": -3},
                  {"q": "say \"hi\"\n\tand \\ back", "ok": True, "none": None}, {"list": [1, 2.5, "three", {"k": []}]},
                  {}, {"emoji": "🙂🚀", "big": 12345678901234, "sum": 0.30000000000000004}]
TOOL_OUTPUTS = ["10063", '{"result": 1554}', "error: division by zero", "naïve café 🙂", "line one\nline two", "",
                "  42  ", "<b>html</b>", "{{ not_jinja }}"]
THOUGHTS = ["I should use the calculator.", "日本語で考える", "Two steps:\n1. call\n2. answer"]


def tool_call(rng, k):
    """A call in the OpenAI form; its arguments an object, or the JSON text of one."""
    args = rng.choice(CALL_ARGUMENTS)
    call = {"type": "function", "function": {
        "name": rng.choice(["calculator", "get_weather"]),
        "arguments": json.dumps(args, ensure_ascii=False) if rng.random() < 0.25 else args}}
    if rng.random() < 0.5:
        call["id"] = f"call_{k}"
    return call


def calling_turn(rng, n_calls, llama, reasoning, odd_content):
    """An assistant's turn that calls n_calls tools. odd_content: with "tool_calls",
    content at times null or absent (SmolLM2's and Qwen3's templates raise on it)."""
    calls = [tool_call(rng, k) for k in range(n_calls)]
    if rng.random() < 0.5:   # written in the content, in the model's own format
        fs = [c["function"] for c in calls]
        if llama:
            text = "\n".join(json.dumps({"name": f["name"], "parameters": f["arguments"]}, ensure_ascii=False)
                             for f in fs)
        else:
            text = rng.choice(["", "Let me compute that.\n"]) + "\n".join(
                "<tool_call>\n" + json.dumps({"name": f["name"], "arguments": f["arguments"]}, ensure_ascii=False)
                + "\n</tool_call>" for f in fs)
        m = {"role": "assistant", "content": text}
    else:
        m = {"role": "assistant", "content": rng.choice(["", "Calling the tool."]), "tool_calls": calls}
        if odd_content and rng.random() < 0.4:
            if rng.random() < 0.5:
                m["content"] = None
            else:
                del m["content"]
    if reasoning:   # Qwen3's two places for it
        thought = rng.choice(THOUGHTS)
        if isinstance(m.get("content"), str) and rng.random() < 0.5:
            m["content"] = f"<think>\n{thought}\n</think>\n\n" + m["content"]
        else:
            m["reasoning_content"] = thought
    return m


def tool_conversation(rng, llama=False, reasoning=False, questions=(1, 3), rounds=(0, 4), odd_content=True):
    """[system], then questions: the user's, rounds of calls (1, at times 2 at
    once) and their results, the answer; the last answer at times left out, so
    that a tool's results end the conversation."""
    msgs = [{"role": "system", "content": rng.choice([TOOL_SYSTEM, text(rng)])}] if rng.random() < 0.5 else []
    tool_roles = ["tool", "ipython"] if llama else ["tool"]
    for _ in range(rng.randrange(*questions)):
        msgs.append({"role": "user", "content": text(rng)})
        for _ in range(rng.randrange(*rounds)):
            n = 2 if rng.random() < 0.2 else 1
            msgs.append(calling_turn(rng, n, llama, reasoning, odd_content))
            for k in range(n):
                result = {"role": rng.choice(tool_roles), "content": rng.choice(TOOL_OUTPUTS)}
                if rng.random() < 0.3:
                    result["tool_call_id"] = f"call_{k}"
                if rng.random() < 0.3:
                    result["name"] = "calculator"
                msgs.append(result)
        answer = {"role": "assistant", "content": text(rng)}
        if reasoning:
            answer["content"] = f"<think>\n{rng.choice(THOUGHTS)}\n</think>\n\n" + answer["content"]
        if msgs[-1]["role"] != "tool" or rng.random() < 0.9:
            msgs.append(answer)
    return msgs


def masked_runs(tok, ids, mask):
    """The text of each run of mask-1 tokens."""
    runs, cur = [], []
    for i, m in zip(ids + [None], mask + [0]):
        if m:
            cur.append(i)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    return runs


@case
def tool_conversation_masks_are_the_assistant_turns_alone_smollm2_qwen25_llama31():
    for name in ("smollm2", "qwen2.5", "llama3.1"):
        llama = name.startswith("llama")
        convs = [tool_conversation(random.Random(100 * k + len(name)), llama) for k in range(120)]
        assert sum("tool_calls" in m for c in convs for m in c) > 60 and \
            sum(m["role"] == "tool" for c in convs for m in c) > 150
        for args in ({}, {"tools": CALCULATOR}) if name != "smollm2" else ({},):
            compared, refused, raised = check_masks(name, convs, args)
            # raised: SmolLM2's template on a content null or absent; Llama 3.1's
            # on "tool_calls" with two calls ("only supports single tool-calls")
            assert refused == 0 and compared >= 60 and (raised > 0) == (name != "qwen2.5"), (compared, refused, raised)


@case
def llama31_tool_conversation_masks_in_ipython_mode_with_builtin_tools():
    # builtin_tools: a call of one of them is <|python_tag|>NAME.call(...), and
    # every assistant's turn that calls ends with <|eom_id|> instead of <|eot_id|>.
    convs = []
    for k in range(60):
        rng = random.Random(7000 + k)
        c = tool_conversation(rng, llama=True)
        for m in c:
            for call in m.get("tool_calls", []):
                if rng.random() < 0.5:
                    call["function"] = {"name": "brave_search", "arguments": {"query": rng.choice(PIECES)}}
        convs.append(c)
    compared, refused, _ = check_masks("llama3.1", convs, {"builtin_tools": ["brave_search", "wolfram_alpha"]})
    assert compared >= 40 and refused == 0, (compared, refused)


def calculator_example(calls_as):
    """A calculator's conversation: the call in the content, or as "tool_calls"."""
    call = {"expression": "347 * 29"}
    if calls_as == "content":
        turn = {"role": "assistant",
                "content": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 29"}}\n</tool_call>'}
    else:
        turn = {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": call}}]}
    return [{"role": "system", "content": TOOL_SYSTEM}, {"role": "user", "content": "What is 347 * 29?"}, turn,
            {"role": "tool", "content": "10063"}, {"role": "assistant", "content": "The answer is 10063."}]


@case
def the_calculator_example_trains_on_the_call_and_the_answer_alone():
    blocks = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 29"}}\n</tool_call>'
    want = {  # family: the assistant's text the loss covers, call in the content / as tool_calls
        "smollm2": ([blocks + "<|im_end|>", "The answer is 10063.<|im_end|>"],
                    ["<|im_end|>", "The answer is 10063.<|im_end|>"]),   # its template leaves the calls out
        "qwen2.5": ([blocks + "<|im_end|>", "The answer is 10063.<|im_end|>"],) * 2,
        "llama3.1": ([blocks + "<|eot_id|>", "The answer is 10063.<|eot_id|>"],
                     ['{"name": "calculator", "parameters": {"expression": "347 * 29"}}<|eot_id|>',
                      "The answer is 10063.<|eot_id|>"]),
    }
    for name, runs in want.items():
        for calls_as, expected in zip(("content", "tool_calls"), runs):
            got = ours(DIRS[name], [calculator_example(calls_as)], False, mask=True)[0]
            assert "error" not in got, (name, calls_as, got["error"])
            assert masked_runs(TOKS[name], got["ids"], got["mask"]) == expected, \
                (name, calls_as, masked_runs(TOKS[name], got["ids"], got["mask"]))
    # Qwen3 gives the last turn an empty reasoning block that it leaves out
    # once the turn is followed: without reasoning the calling turn cannot be
    # told apart, with it (reasoning_content) it can.
    got = ours(DIRS["qwen3"], [calculator_example("tool_calls")], False, mask=True)[0]
    assert "generation" in got.get("error", ""), got
    conv = calculator_example("tool_calls")
    conv[2]["reasoning_content"] = "I should use the calculator."
    got = ours(DIRS["qwen3"], [conv], False, mask=True)[0]
    assert masked_runs(TOKS["qwen3"], got["ids"], got["mask"]) == [
        "<think>\nI should use the calculator.\n</think>\n\n" + blocks + "<|im_end|>",
        "<think>\n\n</think>\n\nThe answer is 10063.<|im_end|>"], got


@case
def qwen3_tool_conversation_masks_match_when_every_turn_after_the_question_reasons_and_are_refused_otherwise():
    reasoned = [tool_conversation(random.Random(8000 + k), reasoning=True, questions=(1, 2), odd_content=False)
                for k in range(60)]
    for args in ({}, {"tools": CALCULATOR}):
        compared, refused, raised = check_masks("qwen3", reasoned, args)
        assert compared == len(reasoned), (compared, refused, raised)
    # enable_thinking=false: the generation prompt's reasoning block is empty, the turns' are not
    compared, refused, raised = check_masks("qwen3", reasoned, {"enable_thinking": False})
    assert refused == len(reasoned), (compared, refused, raised)
    unreasoned = [tool_conversation(random.Random(9000 + k), questions=(1, 2), rounds=(1, 4), odd_content=False)
                  for k in range(60)]
    compared, refused, raised = check_masks("qwen3", unreasoned)
    assert refused == len(unreasoned), (compared, refused, raised)
    # and a question after the calls: the turns before it lose their reasoning
    mixed = [tool_conversation(random.Random(10000 + k), reasoning=k % 2 == 0) for k in range(120)]
    compared, refused, raised = check_masks("qwen3", mixed)
    assert compared > 0 and refused > 0 and raised > 0, (compared, refused, raised)


# ---- multi-turn rollouts: the environment's messages after the turns generated ----

TOOL_RESULTS = ["42", "{\"result\": 1554}", "error: division by zero", "naïve café 🙂", "line one\nline two"]
REPLIES = ["That is not right. Try again.", "Use the calculator.", "日本語で", "ok"]


def reply_text(rng, thinking):
    """An assistant's turn as a model writes it: no white space at its ends
    (Llama 3's template trims it), and reasoning in Qwen3's own layout."""
    s = "".join(rng.choice(PIECES) + " " for _ in range(rng.randrange(1, 3))).strip() or "x"
    if rng.random() < 0.3:
        s += '\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "37 * 42"}}\n</tool_call>'
    if thinking and rng.random() < 0.5:
        s = "<think>\n" + rng.choice(PIECES).strip("\n") + "\n</think>\n\n" + s
    return s


def rollout(rng, thinking):
    """[system], user, then turns: assistant, then a tool's result or a user's reply (or both); ends
    with the environment's message, so the rendering ends with the generation prompt."""
    msgs = ([{"role": "system", "content": "You can call a calculator."}] if rng.random() < 0.5 else [])
    msgs.append({"role": "user", "content": rng.choice(PIECES).strip() or "Hi"})
    for _ in range(rng.randrange(1, 4)):
        msgs.append({"role": "assistant", "content": reply_text(rng, thinking)})
        kind = rng.random()
        if kind < 0.5:
            msgs.append({"role": "tool", "content": rng.choice(TOOL_RESULTS)})
        if kind > 0.3:
            msgs.append({"role": "user", "content": rng.choice(REPLIES)})
    return msgs


THINK = __import__("re").compile(r"<think>\n.*?\n</think>\n\n", __import__("re").S)


def check_turns(name, args=None):
    """chat_tool --turns against apply_chat_template(final conversation, generation prompt)."""
    thinking = name == "qwen3"
    convs = [rollout(random.Random(1000 * k + len(name)), thinking) for k in range(80)]
    cmd = [TOOL, "--turns"] + sum((["--arg", f"{k}={json.dumps(v)}"] for k, v in (args or {}).items()), [])
    stdin = "".join(json.dumps({"messages": m}, ensure_ascii=False) + "\n" for m in convs)
    p = subprocess.run(cmd + [DIRS[name]], input=stdin.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr.decode()[-800:]
    got = [json.loads(line) for line in p.stdout.decode().splitlines()]
    tok = TOKS[name]
    exact = pinned = rewrote = 0
    for k, msgs in enumerate(convs):
        where = f"{name} rollout {k}: {json.dumps(msgs, ensure_ascii=False)[:300]}"
        assert "error" not in got[k], f"{got[k]['error']}: {where}"
        want = list(tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, **(args or {})))
        rewrote += got[k]["rewrote"] > 0
        if got[k]["ids"] == want:
            exact += 1
            continue
        # Only Qwen3 rewrites earlier turns: it drops the reasoning of the
        # turns before a user's message. The tokens generated keep it.
        assert thinking, f"ids differ {first_difference(got[k]['ids'], want)}: {where}"
        ours_text, their_text = tok.decode(got[k]["ids"]), tok.decode(want)
        assert THINK.sub("", ours_text) == THINK.sub("", their_text), \
            f"differ beyond the reasoning kept: {first_difference(ours_text, their_text)}: {where}"
        assert len(THINK.findall(ours_text)) > len(THINK.findall(their_text)), where
        pinned += 1
    print(f"# {name}: {exact} of {len(convs)} rollouts' tokens equal apply_chat_template of the final conversation; "
          f"{pinned} differ only by the reasoning of earlier turns the template drops; "
          f"{rewrote} took the template's probe conversation for a continuation")
    return exact, pinned, rewrote


@case
def multi_turn_tokens_equal_the_final_conversations_rendering_smollm2_qwen25_llama31():
    for name in ("smollm2", "qwen2.5", "llama3.1", "llama3.2"):
        exact, pinned, rewrote = check_turns(name)
        assert exact == 80 and rewrote == 0, (name, exact, pinned, rewrote)


@case
def qwen3_multi_turn_tokens_keep_the_reasoning_its_template_drops_from_earlier_turns():
    exact, pinned, rewrote = check_turns("qwen3")
    assert exact > 0 and pinned > 0 and exact + pinned == 80 and rewrote > 0, (exact, pinned, rewrote)
    # With enable_thinking=false the generation prompt writes an empty
    # reasoning block, which the tokens keep and the template drops.
    exact, pinned, rewrote = check_turns("qwen3", {"enable_thinking": False})
    assert exact + pinned == 80, (exact, pinned)


# ---- errors ------------------------------------------------------------------------

@case
def a_template_that_raises_is_an_error_with_its_message():
    d = model_dir("raises", "smollm2", None, {},
                  "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with the user') }}"
                  "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    got = ours(d, [[{"role": "assistant", "content": "hi"}], [{"role": "user", "content": "hi"}]], True)
    assert "Conversations must start with the user" in got[0]["error"], got[0]
    assert got[1]["text"] == "hi"


@case
def an_unsupported_construct_is_refused_naming_it_and_its_line():
    d = model_dir("unsupported", "smollm2", None, {}, "{% for m in messages %}\n{{ m['content'] }}\n{% endfor %}\n"
                                                       "{% include 'other.jinja' %}")
    p = subprocess.run([TOOL, d], input=b"", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode()
    assert p.returncode == 1, (p.returncode, err)
    assert "include" in err and "line 4" in err, err


@case
def malformed_messages_are_errors_naming_what_is_wrong():
    d = DIRS["smollm2"]
    got = ours(d, [[], [{"content": "no role"}], [{"role": 3, "content": "x"}]], True)
    assert "is an empty list: a conversation needs at least one message" in got[0]["error"], got[0]
    assert "\"messages\"[0]" in got[1]["error"] and "role" in got[1]["error"], got[1]
    assert "role" in got[2]["error"], got[2]


def chat_tool_error(d):
    """chat_tool's exit status and message on the model directory d."""
    p = subprocess.run([TOOL, d], input=b"", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stderr.decode()


def tokenizer_config(name, text):
    """A model directory whose tokenizer_config.json is the given text."""
    d = model_dir(name, "smollm2", None, {}, "x")
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        f.write(text)
    return d


@case
def tokenizer_config_is_read_as_python_reads_it_or_refused_naming_the_place():
    rc, err = chat_tool_error(tokenizer_config("dup", '{"chat_template": "a",\n "chat_template": "b"}'))
    assert rc == 1 and 'key "chat_template" appears twice (transformers would take the last value' in err, err
    rc, err = chat_tool_error(tokenizer_config("syntax", '{"chat_template": "a",\n "x": [1,, 2]}'))
    assert rc == 1 and "tokenizer_config.json: not valid JSON (line 2, column 10)" in err, err
    rc, err = chat_tool_error(tokenizer_config("nan", '{"chat_template": "a", "x": NaN}'))
    assert rc == 1 and "(line 1, column 29): NaN and Infinity are not JSON" in err, err
    rc, err = chat_tool_error(tokenizer_config("bos7", '{"chat_template": "{{ bos_token }}", "bos_token": 7}'))
    assert rc == 1 and '"bos_token" is 7, neither a string nor an AddedToken' in err, err
    # Of two templates named "default", the last, as transformers' dict of them keeps it.
    d = tokenizer_config("defaults", json.dumps({"chat_template": [
        {"name": "default", "template": "first"}, {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "{% for m in messages %}{{ m.content }}{% endfor %}last"}]}))
    got = ours(d, [[{"role": "user", "content": "hi"}]], False)
    assert got[0]["text"] == "hilast", got[0]


rltest.finish()
