#!/usr/bin/env python3
"""Greedy held-out accuracy of model directories with transformers: the same
measure as experiments/lib/eval.sh (rl-sample --temperature 0, f32, the
number verifier), computed by another implementation, so that checkpoints of
rlpipe and of other trainers (bench/trl.sh) are evaluated alike.

    eval_hf.py [--tokenizer DIR] [--max-new-tokens N] [--batch B] [--threads T]
               [--completions FILE] TEST MODEL...

TEST is JSON lines {"messages": [...], "answer": "..."} (experiments/smollm2/
task.py's test.jsonl). Each MODEL is a Hugging Face model directory: a
transformers save, rlpipe's model directory or one of rl-learn's checkpoint
versions (CKPT/vNNNNNN: config.json, model.safetensors or its shards, the
tokenizer files copied from --init, and optimizer.safetensors and state.json,
which are not read), loaded as it is; or a checkpoint root CKPT, whose
"latest" names the version. The tokenizer comes from the model directory, or
from --tokenizer DIR when it has none (a checkpoint of a model made from
--config). A transformers 5 save (bench/trl.sh's checkpoints) loads under
4.46 as well: its rope_theta is taken from "rope_parameters" and its chat
template from chat_template.jinja, where 4.46 does not look.

Each question is rendered with the tokenizer's chat template and the
assistant's turn opened (apply_chat_template(messages, add_generation_prompt=
True)), tokenized without added special tokens (the template writes its
own), and completed greedily in f32, B at a time with left padding, for at
most N new tokens (default 32, experiments/smollm2's MAX_NEW); a completion
ends at an eos id of the config, the generation config or the tokenizer. Its
text (special tokens left out) scores 1 when its last number equals the
answer, as rl-sample's "number" verifier decides (lib/sample/verifier.c).

One JSON line per model on standard output:
    {"model": DIR, "accuracy": A, "samples": N, "tokens_mean": T}
--completions FILE writes every completion as JSON lines {"model", "index",
"text", "reward", "tokens"}. Exit 1 on a bad TEST line or a model that does
not load; 2 on bad usage. Runs with transformers 4.46 (.deps/venv) or 5.x
(.deps/trl-venv).
"""
import argparse
import json
import os
import sys
import time

# ---- the number verifier, as lib/sample/verifier.c reads numbers ---------
# On UTF-8 bytes, as the C code: only ASCII characters are digits, signs,
# spaces or letters.
SPACE = b" \t\n\r\v\f"


def _digit(c):
    return 48 <= c <= 57  # '0'..'9'


def _binds_minus(c):
    # A character that makes a following '-' an operator rather than a sign.
    return _digit(c) or 97 <= c <= 122 or 65 <= c <= 90 or c in b"._"


def _number_at(s, i):
    if _digit(s[i]):
        return True
    return s[i] == 45 and i + 1 < len(s) and _digit(s[i + 1]) and (i == 0 or not _binds_minus(s[i - 1]))


def _read_number(s, i):
    """The number that begins at s[i] (_number_at holds), normalised: (neg,
    integer digits without leading zeros or commas, fraction digits without
    trailing zeros), and the index where it ends."""
    n = len(s)
    j = i
    neg = s[j] == 45
    j += neg
    int_start = j
    while j < n and _digit(s[j]):
        j += 1
    # Thousands groups: ',' then exactly three digits, then no digit.
    while (j + 3 < n and s[j] == 44 and _digit(s[j + 1]) and _digit(s[j + 2]) and _digit(s[j + 3])
           and (j + 4 == n or not _digit(s[j + 4]))):
        j += 4
    int_end = j
    frac = b""
    if j + 1 < n and s[j] == 46 and _digit(s[j + 1]):
        j += 1
        frac_start = j
        while j < n and _digit(s[j]):
            j += 1
        frac = s[frac_start:j].rstrip(b"0")
    whole = s[int_start:int_end].lstrip(b"0,").replace(b",", b"")
    if not whole and not frac:
        neg = False
    return (neg, whole, frac), j


def last_number(text):
    """The last number of text (normalised as _read_number), or None."""
    s = text.encode("utf-8")
    found = None
    i = 0
    while i < len(s):
        if _number_at(s, i):
            found, i = _read_number(s, i)
        else:
            i += 1
    return found


def whole_number(text):
    """text, trimmed, read as exactly one number, or None."""
    s = text.encode("utf-8").strip(SPACE)
    if not s or not _number_at(s, 0):
        return None
    num, end = _read_number(s, 0)
    return num if end == len(s) else None


def number_reward(completion, answer):
    got, want = last_number(completion), whole_number(answer)
    return float(got is not None and want is not None and got == want)


# ---- inputs ------------------------------------------------------------------

def read_test(path, prog="eval_hf.py"):
    """[(messages, answer)] of a TEST file; exits 1 naming the bad line (and
    prog, the tool that read it)."""
    items = []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        sys.exit(f"{prog}: {path}: {e.strerror}")
    with f:
        for k, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{prog}: {path}:{k}: not JSON: {e}")
            if not isinstance(rec, dict):
                sys.exit(f"{prog}: {path}:{k}: not a JSON object")
            msgs, ans = rec.get("messages"), rec.get("answer")
            if (not isinstance(msgs, list) or not msgs
                    or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                               for m in msgs)):
                sys.exit(f"{prog}: {path}:{k}: needs \"messages\", a non-empty list of {{\"role\", \"content\"}} strings")
            if not isinstance(ans, str) or whole_number(ans) is None:
                sys.exit(f"{prog}: {path}:{k}: \"answer\" must be a number as a string (the number verifier needs one)")
            items.append((msgs, ans))
    if not items:
        sys.exit(f"{prog}: {path}: no questions")
    return items


def resolve_model(path):
    """A model directory: path itself, or the version a checkpoint root's
    "latest" names."""
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    latest = os.path.join(path, "latest")
    if os.path.isfile(latest):
        with open(latest) as f:
            v = os.path.join(path, f.read().strip())
        if os.path.isfile(os.path.join(v, "config.json")):
            return v
    sys.exit(f"eval_hf.py: {path}: no config.json (not a model directory, nor a checkpoint root with a \"latest\")")


def has_tokenizer(path):
    return any(os.path.isfile(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json"))


# ---- evaluation --------------------------------------------------------------

def eos_ids(model, tok):
    """Every id that ends a completion: the config's, the generation config's
    and the tokenizer's eos."""
    ids = set()
    for v in (model.config.eos_token_id, getattr(model.generation_config, "eos_token_id", None), tok.eos_token_id):
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            ids.update(x for x in v if isinstance(x, int))
    return sorted(ids)


def load_config(path, major):
    """The model's config. transformers 5 saves rope_theta inside
    "rope_parameters", where 4.x does not look (it would take its default,
    10000): under 4.x it is set from there."""
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(path)
    with open(os.path.join(path, "config.json")) as f:
        raw = json.load(f)
    rope = raw.get("rope_parameters")
    if major < 5 and rope is not None and "rope_theta" not in raw:
        if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default" or "rope_theta" not in rope:
            sys.exit(f"eval_hf.py: {path}/config.json: rope_parameters {rope} need transformers 5 (run in .deps/trl-venv)")
        cfg.rope_theta = rope["rope_theta"]
    return cfg


def load_tokenizer(tok_dir):
    """The tokenizer with its chat template, which transformers 5 saves as
    chat_template.jinja, a file 4.46 does not read."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tok_dir)
    jinja = os.path.join(tok_dir, "chat_template.jinja")
    if tok.chat_template is None and os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            tok.chat_template = f.read()
    if tok.chat_template is None:
        sys.exit(f"eval_hf.py: {tok_dir}: the tokenizer has no chat template")
    return tok


def evaluate(path, tok_dir, items, opt, torch, transformers, dump):
    from transformers import AutoModelForCausalLM
    major = int(transformers.__version__.split(".")[0])
    tok = load_tokenizer(tok_dir)
    dtype_kw = "dtype" if major >= 5 else "torch_dtype"
    model = AutoModelForCausalLM.from_pretrained(path, config=load_config(path, major), **{dtype_kw: torch.float32})
    model.eval()
    stop = eos_ids(model, tok)
    if not stop:
        sys.exit(f"eval_hf.py: {path}: no eos token id in its config, generation config or tokenizer")
    pad = tok.pad_token_id if tok.pad_token_id is not None else stop[0]
    # prompts[i] is the token ids of question i, rendered as rl-sample renders it.
    prompts = [tok(tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                   add_special_tokens=False)["input_ids"] for m, _ in items]
    correct, tokens = 0.0, 0
    for b in range(0, len(items), opt.batch):
        chunk = prompts[b:b + opt.batch]
        width = max(len(p) for p in chunk)
        # input_ids, attention_mask are (B, width), left padded
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        # synced_gpus given: left to itself, transformers 4.46 imports torch.distributed.fsdp to decide it,
        # which Debian's torch 1.13 cannot do on Python 3.11 (.deps/venv).
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=mask, do_sample=False, max_new_tokens=opt.max_new_tokens,
                                 eos_token_id=stop, pad_token_id=pad, temperature=None, top_p=None, top_k=None,
                                 synced_gpus=False)
        for i, row in enumerate(out[:, width:].tolist()):
            n = next((k for k, t in enumerate(row) if t in stop), len(row))
            text = tok.decode(row[:n], skip_special_tokens=True)
            r = number_reward(text, items[b + i][1])
            correct += r
            tokens += min(n + 1, len(row))  # the eos counts, as in rl-sample's records
            if dump:
                dump.write(json.dumps({"model": path, "index": b + i, "text": text, "reward": r, "tokens": min(n + 1, len(row))}) + "\n")
    return correct / len(items), tokens / len(items)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("test")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tokenizer", help="tokenizer directory for models without tokenizer files")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--completions", help="write every completion here (JSON lines)")
    opt = ap.parse_args(argv)
    for name in ("max_new_tokens", "batch", "threads"):
        if getattr(opt, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if opt.tokenizer and not has_tokenizer(opt.tokenizer):
        sys.exit(f"eval_hf.py: --tokenizer {opt.tokenizer}: no tokenizer.json or tokenizer_config.json there")
    items = read_test(opt.test)
    dirs = [resolve_model(m) for m in opt.models]
    for d in dirs:
        if not has_tokenizer(d) and not opt.tokenizer:
            sys.exit(f"eval_hf.py: {d}: no tokenizer files: give --tokenizer DIR (the model it was trained from)")

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    import transformers
    torch.set_num_threads(opt.threads)
    transformers.logging.set_verbosity_error()
    dump = open(opt.completions, "w") if opt.completions else None
    for m, d in zip(opt.models, dirs):
        t0 = time.time()
        acc, tm = evaluate(d, d if has_tokenizer(d) else opt.tokenizer, items, opt, torch, transformers, dump)
        print(json.dumps({"model": m, "accuracy": acc, "samples": len(items), "tokens_mean": tm}), flush=True)
        print(f"eval_hf.py: {m}: accuracy {acc:.3f} ({len(items)} samples, {time.time() - t0:.0f} s)", file=sys.stderr)
    if dump:
        dump.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
