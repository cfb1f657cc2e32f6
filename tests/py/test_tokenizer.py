"""common/tokenizer.c agrees with Hugging Face's `tokenizers` library.

The reference is `tokenizers` (in .deps/venv, whose python
tests/run.sh runs); ours is driven through $BUILD/tests/tools/tokenize. For each
tokenizer file below, our ids equal tokenizers' encode(text,
add_special_tokens=False).ids on every text, and our decoded bytes, read as
UTF-8 with invalid sequences replaced, equal tokenizers' decode(ids) (with and
without skip_special_tokens):

  - models/tiny/tokenizer.json (also: it is what make_tokenizer.py writes, and
    it agrees with models/tiny/config.json), on arithmetic prompts and random
    strings (ASCII, multi-byte UTF-8, emoji, whitespace runs, newlines, the
    special tokens and pieces of them);
  - a tokenizer trained here by tokenizers' BpeTrainer (ByteLevel, no regex,
    a few thousand merges, special and added tokens), as saved (merges as
    pairs) and rewritten with legacy "a b" merges, and variants of it:
    add_prefix_space, ignore_merges, a Sequence pre-tokenizer, no decoder, no
    pre-tokenizer, overlapping and normalized added tokens;
  - a tokenizer with no merges.

Files we do not support are refused, exit 1, with a message naming what:
ByteLevel use_regex true, Split, a normalizer, a WordPiece model, and others;
malformed files name the file and the key; a byte with no token and an id
outside the vocabulary are errors naming them.
"""
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from rltest import ROOT, case, finish

try:
    import tokenizers
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
except ImportError as e:  # the reference is missing: say so, fail nothing
    print(f"SKIP test_tokenizer: Hugging Face tokenizers is not importable ({e}); run scripts/deps.sh test")
    sys.exit(0)

TOOL = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tests/tools/tokenize")
TINY = os.path.join(ROOT, "models/tiny/tokenizer.json")
TMP = tempfile.TemporaryDirectory(prefix="rlpipe-tokenizer.")
rng = random.Random(1234)


# ---- driving our tokenizer ------------------------------------------------------

def tool(*args, input=b""):
    assert os.access(TOOL, os.X_OK), f"{TOOL} is not built (make BUILD=... aux)"
    p = subprocess.run([TOOL, *args], input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def our_encode(path, texts):
    """Ids of each text (str or bytes), from one run of the tool."""
    data = b"".join(b"%d\n" % len(t) + t for t in (x.encode() if isinstance(x, str) else x for x in texts))
    rc, out, err = tool("encode", path, input=data)
    assert rc == 0, f"tokenize encode exited {rc}: {err.strip()[:500]}"
    lines = out.split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(texts) + 1, f"{len(lines) - 1} lines for {len(texts)} texts"
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def our_decode(path, id_lists, skip_special=False):
    """Decoded bytes of each list of ids, from one run of the tool."""
    data = b"".join((" ".join(map(str, ids)) + "\n").encode() for ids in id_lists)
    args = ["decode"] + (["--skip-special"] if skip_special else []) + [path]
    rc, out, err = tool(*args, input=data)
    assert rc == 0, f"tokenize decode exited {rc}: {err.strip()[:500]}"
    res, pos = [], 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        n = int(out[pos:nl])
        res.append(out[nl + 1:nl + 1 + n])
        pos = nl + 1 + n
    assert len(res) == len(id_lists), f"{len(res)} outputs for {len(id_lists)} lines"
    return res


def expect_refusal(path, *words):
    """Loading path fails with exit 1 and a message containing every word."""
    rc, _, err = tool("encode", path, input=b"1\na")
    assert rc == 1, f"exit status {rc}, expected 1 (stderr: {err.strip()[:300]})"
    for w in words:
        assert w in err, f"message {err.strip()!r} does not name {w!r}"
    assert err.startswith("tokenize: error: "), f"message {err!r} is not in the tool's error format"


# ---- comparing with the reference -----------------------------------------------

def write_json(name, obj):
    path = os.path.join(TMP.name, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    return path


def hf_from(obj_or_path):
    if isinstance(obj_or_path, str):
        return Tokenizer.from_file(obj_or_path)
    return Tokenizer.from_str(json.dumps(obj_or_path))


def compare_encode(path, texts, hf=None):
    hf = hf or Tokenizer.from_file(path)
    ours = our_encode(path, texts)
    for text, got in zip(texts, ours):
        want = hf.encode(text, add_special_tokens=False).ids
        assert got == want, f"text {text!r}: ids {got} but tokenizers gives {want}"


def compare_decode(path, id_lists, hf=None):
    hf = hf or Tokenizer.from_file(path)
    for skip in (False, True):
        ours = our_decode(path, id_lists, skip)
        for ids, got in zip(id_lists, ours):
            want = hf.decode(ids, skip_special_tokens=skip)
            assert got.decode("utf-8", "replace") == want, \
                f"ids {ids} (skip_special {skip}): {got!r} but tokenizers gives {want!r}"


def compare_all(path, texts, hf=None):
    """Encode agrees on texts; decode agrees on their ids and on random ids."""
    hf = hf or Tokenizer.from_file(path)
    compare_encode(path, texts, hf)
    ids = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    n = hf.get_vocab_size(with_added_tokens=True)
    ids += [[rng.randrange(n) for _ in range(rng.randrange(12))] for _ in range(300)]
    compare_decode(path, ids, hf)


# ---- texts ------------------------------------------------------------------------

SPECIAL_TINY = ["<|bos|>", "<|eos|>", "<|pad|>"]
PIECES = ["What", "is", "Compute", "Answer:", "The", "answer", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n",
          "+", "-", "*", "/", "=", "?", ".", ",", "(", ")", "x", "é", "ü", "ß", "ñ", "中文", "日本語", "Привет",
          "ελληνικά", "עברית", "مرحبا", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u00a0", "\u2028", "\u200b", "\x00", "\x7f",
          "<|", "|>", "<|bos", "bos|>", "<|eos|", "|", "<", ">", "Ġ", "Ċ", "ĠĠ", "\u0100", "\u0143"]


def random_number():
    return str(rng.choice([rng.randrange(10), rng.randrange(100), rng.randrange(1000), rng.randrange(10 ** 6)]))


def arithmetic_prompts(n):
    forms = ["What is {a} {op} {b}?", "Compute {a}{op}{b}.", "Compute {a} {op} {b}.", "Answer: {c}",
             "The answer is {c}.", "{a} {op} {b} = {c}", "Question: What is {a} {op} {b}?\nAnswer: {c}",
             "<|bos|>What is {a} {op} {b}?<|eos|>", "Solve: {a}{op}{b}={c}", " What is {a} {op} {b}? ",
             "{a}", "-{a}", "{a}.{b}", "What is {a} plus {b}?\n\nLet's think step by step."]
    out = []
    for _ in range(n):
        a, b = random_number(), random_number()
        out.append(rng.choice(forms).format(a=a, b=b, c=random_number(), op=rng.choice("+-*/")))
    return out


def random_strings(n, specials, extra=()):
    pieces = PIECES + list(specials) * 3 + list(extra)
    out = []
    for _ in range(n):
        k = rng.randrange(1, 14)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.5:
                parts.append(rng.choice(pieces))
            elif r < 0.7:
                parts.append(random_number())
            elif r < 0.85:
                parts.append("".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(1, 8))))
            else:  # any code point but surrogates
                parts.append("".join(chr(rng.choice([rng.randrange(0x80, 0x800), rng.randrange(0x800, 0xD800),
                                                     rng.randrange(0xE000, 0x110000)]))
                                     for _ in range(rng.randrange(1, 4))))
        out.append("".join(parts))
    return out + ["", " ", "  ", "\n", "a", "<|bos|>", "<|bos|><|bos|>", "<|bos|><|eos|>"] + list(specials)


SYLLABLES = ["ka", "to", "re", "mi", "su", "na", "lo", "ve", "qu", "ix", "ar", "en", "th", "ing", "ed", "st"]


def generated_corpus(n):
    """Text for BpeTrainer: pseudo-words, numbers, punctuation, some non-ASCII."""
    lines = []
    for _ in range(n):
        words = []
        for _ in range(rng.randrange(3, 15)):
            r = rng.random()
            if r < 0.75:
                words.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randrange(1, 4))))
            elif r < 0.88:
                words.append(random_number())
            elif r < 0.95:
                words.append(rng.choice(["+", "-", "=", "?", ".", ",", ":", "(", ")"]))
            else:
                words.append(rng.choice(["café", "naïve", "中文", "😀", "Ωmega", "straße"]))
        lines.append(" ".join(words) + rng.choice(["", ".", "?", "\n"]))
    return lines


# ---- tokenizers built here ---------------------------------------------------------

SPECIAL_TRAINED = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]


def trained():
    """A BpeTrainer tokenizer (ByteLevel without regex) plus added tokens, as JSON."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIAL_TRAINED, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(generated_corpus(3000), trainer)
    # Added tokens after training: normalized (the default for non-special) and
    # overlapping ones, where the longest match must win.
    # "two words" and "<|日本|>" are not strings of the byte alphabet: the
    # ByteLevel decoder gives their UTF-8 as it is.
    tok.add_tokens([AddedToken("kato", normalized=True), AddedToken("<tool>", normalized=False),
                    AddedToken("<tool>x", normalized=False), AddedToken("two words", normalized=False)])
    tok.add_special_tokens([AddedToken("<|im", special=True), AddedToken("<|日本|>", special=True)])
    path = os.path.join(TMP.name, "trained.json")
    tok.save(path)
    with open(path, encoding="utf-8") as f:
        return path, json.load(f)


TRAINED_PATH, TRAINED = trained()
TRAINED_EXTRA = ["kato", "<tool>", "<tool>x", "<|im", "katokato", "<tool><tool>x", "<|im_st", "<|im_end",
                 "two words", "two  words", "<|日本|>", "<|日本"]


def trained_texts(n):
    return random_strings(n // 2, SPECIAL_TRAINED, TRAINED_EXTRA) + generated_corpus(n // 2)


def variant(name, edit):
    obj = copy.deepcopy(TRAINED)
    edit(obj)
    return write_json(name, obj), obj


# ---- the tiny model's tokenizer --------------------------------------------------

@case
def tiny_tokenizer_loads_in_tokenizers_with_448_tokens_and_specials_at_445_to_447():
    hf = Tokenizer.from_file(TINY)
    assert hf.get_vocab_size(with_added_tokens=True) == 448, hf.get_vocab_size(with_added_tokens=True)
    assert [hf.token_to_id(s) for s in SPECIAL_TINY] == [445, 446, 447]
    rc, out, err = tool("info", TINY, *SPECIAL_TINY, "nope")
    assert rc == 0, err
    assert out.decode().split("\n") == ["vocab_size 448", "445", "446", "447", "-1", ""], out


@case
def tiny_config_matches_the_tokenizer():
    with open(os.path.join(ROOT, "models/tiny/config.json")) as f:
        cfg = json.load(f)
    hf = Tokenizer.from_file(TINY)
    assert cfg["vocab_size"] % 64 == 0 and cfg["vocab_size"] >= hf.get_vocab_size(True), cfg["vocab_size"]
    assert cfg["bos_token_id"] == hf.token_to_id("<|bos|>") and cfg["eos_token_id"] == hf.token_to_id("<|eos|>")
    assert cfg["hidden_size"] == cfg["num_attention_heads"] * cfg["head_dim"] == 128
    assert cfg["model_type"] == "llama" and cfg["tie_word_embeddings"] is True


@case
def tiny_files_are_what_make_tokenizer_py_writes():
    out = os.path.join(TMP.name, "regen")
    os.mkdir(out)
    subprocess.run([sys.executable, os.path.join(ROOT, "models/tiny/make_tokenizer.py"), out], check=True,
                   stderr=subprocess.DEVNULL)
    for name in ("tokenizer.json", "config.json"):
        with open(os.path.join(out, name), "rb") as a, open(os.path.join(ROOT, "models/tiny", name), "rb") as b:
            assert a.read() == b.read(), f"models/tiny/{name} differs from what make_tokenizer.py writes"


@case
def tiny_encodes_arithmetic_prompts_as_tokenizers_does():
    compare_encode(TINY, arithmetic_prompts(3000))


@case
def tiny_encodes_random_strings_as_tokenizers_does():
    compare_encode(TINY, random_strings(3000, SPECIAL_TINY))


@case
def tiny_decodes_as_tokenizers_does():
    compare_all(TINY, arithmetic_prompts(300) + random_strings(300, SPECIAL_TINY))


@case
def tiny_round_trips_arbitrary_bytes():
    # Not comparable with tokenizers (its input is a str): NULs, invalid UTF-8.
    texts = [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(500)]
    texts += [b"\xff\xfe<|bos|>\x80", b"\x00" * 9, b"\xe4\xb8", "😀".encode()[:3] + b"<|eos|>"]
    ids = our_encode(TINY, texts)
    assert our_decode(TINY, ids) == texts
    stripped = our_decode(TINY, ids, skip_special=True)
    for t, s in zip(texts, stripped):
        for sp in SPECIAL_TINY:
            t = t.replace(sp.encode(), b"")
        assert s == t, f"{t!r} decoded without specials to {s!r}"


@case
def tiny_long_text_encodes_as_tokenizers_does_in_n_log_n():
    text = "\n".join(arithmetic_prompts(20000))   # ~500 KB, one piece between added tokens
    hf = Tokenizer.from_file(TINY)
    start = time.time()
    ours = our_encode(TINY, [text, "9" * 100000, " " * 50000])
    took = time.time() - start
    assert ours[0] == hf.encode(text, add_special_tokens=False).ids, "long text: ids differ"
    assert ours[1] == hf.encode("9" * 100000, add_special_tokens=False).ids, "100000 nines: ids differ"
    assert ours[2] == hf.encode(" " * 50000, add_special_tokens=False).ids, "50000 spaces: ids differ"
    assert took < 10, f"encoding ~650 KB took {took:.1f} s"


# ---- a tokenizer trained by tokenizers' BpeTrainer ------------------------------------

@case
def trained_tokenizer_as_saved_encodes_and_decodes_as_tokenizers_does():
    merges = TRAINED["model"]["merges"]
    assert len(merges) > 2000 and isinstance(merges[0], list), "expected a few thousand pair merges"
    compare_all(TRAINED_PATH, trained_texts(3000))
    rc, out, _ = tool("info", TRAINED_PATH)
    want = Tokenizer.from_file(TRAINED_PATH).get_vocab_size(with_added_tokens=True)
    assert out.decode() == f"vocab_size {want}\n", (out, want)


@case
def trained_tokenizer_with_legacy_string_merges_gives_the_same_ids():
    def legacy(obj):
        obj["model"]["merges"] = [f"{a} {b}" for a, b in obj["model"]["merges"]]
    path, _ = variant("legacy.json", legacy)
    texts = trained_texts(1000)
    assert our_encode(path, texts) == our_encode(TRAINED_PATH, texts), "legacy and pair merges disagree"
    compare_all(path, texts)


@case
def add_prefix_space_applies_to_each_piece_between_added_tokens():
    def aps(obj):
        obj["pre_tokenizer"]["add_prefix_space"] = True
    path, _ = variant("prefix.json", aps)
    compare_all(path, trained_texts(1500) + ["<s>a</s> b", "<s><s>", " x", "x", "\n<s>\n", ""])


@case
def ignore_merges_emits_a_piece_that_is_a_token_whole():
    def ig(obj):
        obj["model"]["ignore_merges"] = True
    path, obj = variant("ignore.json", ig)
    whole = [t for t in obj["model"]["vocab"] if len(t) > 3][:200]
    # vocabulary strings are in the byte alphabet: turn them back into text
    back = Tokenizer.from_file(path)
    texts = [back.decode([obj["model"]["vocab"][t]]) for t in whole]
    compare_all(path, texts + trained_texts(1000))
    # Where it matters: merges alone turn "abc" into a + bc, but "abc" is a token.
    small = copy.deepcopy(obj)
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for extra in ("bc", "ab", "abc"):
        vocab[extra] = len(vocab)
    small["model"]["vocab"] = vocab
    small["model"]["merges"] = [["b", "c"], ["a", "b"]]
    small["added_tokens"] = []
    for flag, want in ((True, [vocab["abc"]]), (False, [vocab["a"], vocab["bc"]])):
        small["model"]["ignore_merges"] = flag
        path = write_json(f"ignore-{flag}.json", small)
        assert our_encode(path, ["abc"]) == [want], (flag, our_encode(path, ["abc"]))
        compare_all(path, ["abc", "abcabc", "ab", "bc", "xabc", "abc abc"])


@case
def sequence_of_one_byte_level_pre_tokenizer_is_the_same():
    def seq(obj):
        obj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [obj["pre_tokenizer"]]}
    path, _ = variant("sequence.json", seq)
    compare_all(path, trained_texts(800))


@case
def no_decoder_joins_token_strings_with_spaces_as_tokenizers_does():
    def nodec(obj):
        obj["decoder"] = None
    path, _ = variant("nodecoder.json", nodec)
    compare_all(path, trained_texts(500))


@case
def no_pre_tokenizer_runs_bpe_on_the_characters():
    def nopre(obj):
        obj["pre_tokenizer"] = None
    path, obj = variant("nopre.json", nopre)
    # Only texts whose every character is a vocabulary token: tokenizers drops
    # the others silently, we refuse them (next check).
    alphabet = [c for c in obj["model"]["vocab"] if len(c) == 1]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30))) for _ in range(1000)]
    texts += ["".join(rng.choice(alphabet + SPECIAL_TRAINED) for _ in range(rng.randrange(1, 12))) for _ in range(300)]
    compare_all(path, texts)
    rc, _, err = tool("encode", path, input=b"3\nab ")
    assert rc == 1 and "U+0020 at offset 2" in err, (rc, err)


@case
def normalized_added_tokens_are_matched_after_the_others():
    # HF matches normalized=false tokens first, then normalized=true ones in the
    # pieces left: "bc" (not normalized) wins over "abcd" (normalized).
    obj = copy.deepcopy(TRAINED)
    top = max(max(obj["model"]["vocab"].values()), max(a["id"] for a in obj["added_tokens"]))
    for i, (content, norm, special) in enumerate([("abcd", True, False), ("bc", False, True), ("cdef", True, False)]):
        obj["added_tokens"].append({"id": top + 1 + i, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": norm, "special": special})
    path = write_json("normalized.json", obj)
    texts = ["abcd", "abcdef", "xabcdx", "cdefbc", "abcdabcd", "a b c d", "bcdef"] + trained_texts(300)
    compare_all(path, texts)


@case
def empty_merges_give_one_token_per_byte():
    obj = copy.deepcopy(TRAINED)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_tokens = sorted(alphabet)
    obj["model"]["vocab"] = {t: i for i, t in enumerate(byte_tokens)}
    obj["model"]["merges"] = []
    obj["added_tokens"] = [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True} for i, s in enumerate(SPECIAL_TRAINED)]
    path = write_json("nomerges.json", obj)
    texts = trained_texts(500)
    compare_all(path, texts)
    plain = [t for t in texts if not any(s in t for s in SPECIAL_TRAINED)]
    for t, ids in zip(plain, our_encode(path, plain)):
        assert len(ids) == len(t.encode()), f"{t!r}: {len(ids)} ids for {len(t.encode())} bytes"


# ---- refusals and errors ------------------------------------------------------------

def saved(name, tok):
    path = os.path.join(TMP.name, name)
    tok.save(path)
    return path


def small_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(generated_corpus(50), trainers.BpeTrainer(vocab_size=300, show_progress=False))
    return tok


@case
def refuses_byte_level_with_use_regex_true():
    tok = small_bpe()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    expect_refusal(saved("regex.json", tok), "ByteLevel", "use_regex true", "not supported")


@case
def refuses_split_pre_tokenizer_also_inside_a_sequence():
    tok = small_bpe()
    split = pre_tokenizers.Split(tokenizers.Regex(r"\d+"), behavior="isolated")
    tok.pre_tokenizer = split
    expect_refusal(saved("split.json", tok), "pre_tokenizer Split (regex pre-tokenization) is not supported yet")
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                 use_regex=False)])
    expect_refusal(saved("llama3-like.json", tok), "Split")


@case
def refuses_other_pre_tokenizers_naming_them():
    tok = small_bpe()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    expect_refusal(saved("whitespace.json", tok), "pre_tokenizer Whitespace")


@case
def refuses_a_normalizer_naming_it():
    tok = small_bpe()
    tok.normalizer = normalizers.NFC()
    expect_refusal(saved("nfc.json", tok), "normalizer NFC", "not supported")
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    expect_refusal(saved("nseq.json", tok), "normalizer NFKC")


@case
def refuses_a_wordpiece_model_naming_it():
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    expect_refusal(saved("wordpiece.json", tok), "model type WordPiece", "only BPE")


@case
def refuses_bpe_options_it_does_not_implement():
    for key, value, word in [("byte_fallback", True, "byte_fallback"), ("dropout", 0.1, "dropout"),
                             ("continuing_subword_prefix", "##", "continuing_subword_prefix"),
                             ("end_of_word_suffix", "</w>", "end_of_word_suffix")]:
        def edit(obj):
            obj["model"][key] = value
        path, _ = variant(f"opt-{key}.json", edit)
        expect_refusal(path, word)


@case
def refuses_added_token_flags_it_does_not_implement():
    for flag in ("lstrip", "rstrip", "single_word"):
        def edit(obj):
            obj["added_tokens"][0][flag] = True
        path, _ = variant(f"flag-{flag}.json", edit)
        expect_refusal(path, flag, '"<s>"')


@case
def refuses_an_added_token_id_tokenizers_would_change():
    def edit(obj):
        obj["added_tokens"][-1]["id"] += 5
    path, obj = variant("badid.json", edit)
    expect_refusal(path, obj["added_tokens"][-1]["content"], "would give it id")


@case
def malformed_files_name_the_file_and_the_key():
    with open(TRAINED_PATH, "rb") as f:
        text = f.read()
    cut = os.path.join(TMP.name, "cut.json")
    with open(cut, "wb") as f:
        f.write(text[:len(text) // 2])
    expect_refusal(cut, cut, "not valid JSON (line")
    missing = os.path.join(TMP.name, "missing.json")
    expect_refusal(missing, missing, "No such file or directory")
    for name, edit, words in [
        ("vocab-list", lambda o: o["model"].__setitem__("vocab", []), ["model.vocab must be an object"]),
        ("vocab-str", lambda o: o["model"]["vocab"].__setitem__("a", "1"), ['model.vocab["a"]', "integer id"]),
        ("vocab-neg", lambda o: o["model"]["vocab"].__setitem__("a", -1), ['model.vocab["a"]']),
        ("merges-obj", lambda o: o["model"].__setitem__("merges", {}), ["model.merges must be an array"]),
        ("merges-unknown", lambda o: o["model"]["merges"].insert(0, ["zzzq", "a"]), ["model.merges[0]", '"zzzq"']),
        ("merges-bad", lambda o: o["model"]["merges"].insert(3, ["a"]), ["model.merges[3]"]),
        ("merges-nospace", lambda o: o["model"].__setitem__("merges", ["ab"]), ["model.merges[0]", "no space"]),
        ("no-model", lambda o: o.pop("model"), ["model must be an object"]),
        ("added-content", lambda o: o["added_tokens"][1].__setitem__("content", 5), ["added_tokens[1].content"]),
        ("added-flag", lambda o: o["added_tokens"][0].__setitem__("special", "yes"), ["added_tokens[0].special"]),
        ("decoder", lambda o: o.__setitem__("decoder", {"type": "WordPiece", "prefix": "##"}), ["decoder WordPiece"]),
        ("aps-missing", lambda o: o["pre_tokenizer"].pop("add_prefix_space"), ["pre_tokenizer.add_prefix_space"]),
    ]:
        path, _ = variant(name + ".json", edit)
        expect_refusal(path, path, *words)
    top = os.path.join(TMP.name, "array.json")
    with open(top, "w") as f:
        f.write("[1, 2]")
    expect_refusal(top, top, "top level must be a JSON object")


@case
def a_byte_with_no_token_is_an_error_naming_it_and_its_offset():
    obj = copy.deepcopy(TRAINED)
    obj["model"] = {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}
    obj["added_tokens"] = []
    path = write_json("ab.json", obj)
    assert our_encode(path, ["abab", "ba"]) == [[2, 2], [1, 0]]
    rc, out, err = tool("encode", path, input=b"4\nabzb")
    assert rc == 1 and "byte 0x7a at offset 2 has no token" in err and path in err, (rc, err)


@case
def an_id_outside_the_vocabulary_is_an_error_naming_it():
    rc, _, err = tool("decode", TINY, input=b"1 2 448\n")
    assert rc == 1 and "token id 448" in err and "not in the vocabulary" in err, (rc, err)
    rc, _, err = tool("decode", TINY, input=b"4294967295\n")
    assert rc == 1 and "token id 4294967295" in err, (rc, err)


finish()
