"""A character that a tokenizer.json cannot represent (no token, no byte
fallback, no unk_token) gives no id, as Hugging Face's tokenizers drops it,
so that our ids agree with transformers' (SmolLM2's real vocabulary lacks 21
bytes, 0x04 and 0xF1 among them). It is not lost silently: rl-sample and
rl-learn warn, naming what was dropped and where (man/rl-sample.1,
man/rl-learn.1).

The tokenizer is the tiny model's with the token of byte 0x04 renamed (its id
kept, so that the added tokens keep theirs); the
reference for the ids is `tokenizers` on the same file.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
from rltest import case  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

WORK = tempfile.mkdtemp(prefix="rlpipe-dropped.", dir=os.environ.get("TMPDIR"))
MODEL = os.path.join(WORK, "m")
llama_ref.random_model(MODEL, hidden=32, inter=48, layers=1, heads=2, kv_heads=1, vocab=448, seed=5)
llama_ref.add_tiny_tokenizer(MODEL)
TOK = os.path.join(MODEL, "tokenizer.json")
with open(TOK) as f:
    spec = json.load(f)
# Byte 0x04 is U+0104 in the ByteLevel alphabet; no merge of the tiny vocabulary uses it.
spec["model"]["vocab"]["<unused04>"] = spec["model"]["vocab"].pop("\u0104")
assert not any("\u0104" in "".join(m) for m in spec["model"]["merges"])
with open(TOK, "w") as f:
    json.dump(spec, f)
TEXT = "What is 1\x04+2\x04?"


@case
def ids_are_those_of_tokenizers_which_drops_the_byte():
    ours = os.path.join(rltest.ROOT, os.environ.get("BUILD", "build"), "tests", "tools", "tokenize")
    import subprocess
    data = TEXT.encode()
    r = subprocess.run([ours, "encode", "--special", TOK], input=b"%d\n" % len(data) + data,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    want = Tokenizer.from_file(TOK).encode(TEXT).ids
    assert [int(x) for x in r.stdout.split()] == want, (r.stdout, want)
    assert want == Tokenizer.from_file(TOK).encode(TEXT.replace("\x04", "")).ids


@case
def rl_sample_warns_naming_the_byte_and_the_prompt():
    prompts = rltest.tmpfile("p.jsonl", (json.dumps({"prompt": TEXT}) + "\n" + json.dumps({"prompt": "1+1"}) + "\n"
                                         + json.dumps({"prompt": "\x04"}) + "\n").encode())
    rc, out, err = rltest.run("rl-sample", "--model", MODEL, "--max-new-tokens", "2", "--seed", "1", prompts)
    assert rc == 0, err
    want = (f"rl-sample: warning: prompt: 2 bytes with no token (the first byte 0x04) were dropped, as Hugging "
            f"Face's tokenizers drops them: {prompts} line 1")
    assert want in err, err
    assert "2 prompts in all had characters with no token" in err, err
    recs = [r for _, member, _ in rltest.read_stream(out) for r in member]
    assert recs[0]["prompt_ids"] == Tokenizer.from_file(TOK).encode(TEXT).ids, recs[0]["prompt_ids"]


@case
def rl_learn_warns_once_naming_the_field_and_the_record():
    examples = rltest.tmpfile("ex.jsonl", "".join(
        json.dumps({"prompt": "What is 1+2?", "completion": c}) + "\n" for c in (" 3", " 3\x04", " 4\x04")).encode())
    rc, _, err = rltest.run("rl-learn", "--loss", "sft", "--init", MODEL, "--out", os.path.join(WORK, "ck"),
                            "--batch", "3", examples)
    assert rc == 0, err
    assert ("rl-learn: warning: \"completion\": 1 byte with no token (the first byte 0x04) was dropped, as Hugging "
            "Face's tokenizers drops them: ") in err and "line 2" in err, err
    assert "2 texts in all had characters with no token" in err, err
    assert err.count("byte with no token") == 1, err


rltest.finish()
