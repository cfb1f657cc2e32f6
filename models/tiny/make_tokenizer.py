#!/usr/bin/env python3
"""Writes models/tiny/tokenizer.json and models/tiny/config.json: the tiny
model's byte-level BPE tokenizer, learned from a deterministic corpus of
arithmetic prompts and answers, and its Llama configuration.

    python3 models/tiny/make_tokenizer.py [OUT_DIR]     (default: this folder)

Only Python's standard library is used, and the output is byte-identical on
every run. The tokenizer is a Hugging Face tokenizer.json that the
`tokenizers` library loads (Tokenizer.from_file):

  ids 0..255     one token per byte, in the GPT-2 byte alphabet; id = byte value
  ids 256..444   tokens learned by BPE: the most frequent adjacent pair of the
                 corpus is merged, repeatedly (ties: the smaller pair of strings)
  ids 445..447   special added tokens <|bos|>, <|eos|>, <|pad|>

The post-processor puts <|bos|> before a text encoded with special tokens
(what rl-sample does to a text prompt). The pre-tokenizer is ByteLevel without regex splitting (use_regex false,
add_prefix_space false), so merges were learned, and apply, across spaces.
The vocabulary size, 448, is a multiple of 64, so config.json's vocab_size is
exactly the tokenizer's size.
"""
import json
import os
import sys

N_LEARNED = 189             # 256 + 189 + 3 specials = 448 = 7 * 64
SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>"]


def bos_template(bos, bos_id):
    """The post-processor that puts bos before a text, as Llama 3's does: what
    encode(text, add_special_tokens=True) adds (rl-sample's text prompts)."""
    def special(type_id):
        return {"SpecialToken": {"id": bos, "type_id": type_id}}

    def seq(name, type_id):
        return {"Sequence": {"id": name, "type_id": type_id}}
    return {"type": "TemplateProcessing",
            "single": [special(0), seq("A", 0)],
            "pair": [special(0), seq("A", 0), special(1), seq("B", 1)],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def byte_alphabet():
    """GPT-2's bytes -> unicode map: printable bytes stand for themselves, the
    other 68 become U+0100.. in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


class Lcg:
    """A fixed 64-bit linear congruential generator (Knuth's MMIX constants),
    so that the corpus does not depend on the Python version's `random`."""

    def __init__(self, seed):
        self.state = seed

    def below(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.state >> 33) % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


OPS = [("+", "plus", lambda a, b: a + b), ("-", "minus", lambda a, b: a - b),
       ("*", "times", lambda a, b: a * b)]


def corpus():
    """Arithmetic prompts and answers, as the tiny model sees them."""
    rng = Lcg(20261121)
    texts = []
    for _ in range(6000):
        a = rng.below(100) if rng.below(3) else rng.below(1000)
        b = rng.below(100) if rng.below(3) else rng.below(1000)
        sym, word, fn = rng.pick(OPS)
        c = fn(a, b)
        form = rng.below(12)
        if form == 0:
            q = f"What is {a} {sym} {b}?"
        elif form == 1:
            q = f"What is {a} {word} {b}?"
        elif form == 2:
            q = f"Compute {a}{sym}{b}."
        elif form == 3:
            q = f"Compute {a} {sym} {b}."
        elif form == 4:
            q = f"Calculate {a} {sym} {b}."
        elif form == 5:
            q = f"Question: What is {a} {sym} {b}?\nAnswer: {c}"
        elif form == 6:
            q = f"{a} {sym} {b} = {c}"
        elif form == 7:
            q = f"Answer: {c}"
        elif form == 8:
            q = f"The answer is {c}."
        elif form == 9:
            q = f"Solve: {a} {sym} {b} = ?"
        elif form == 10:
            q = f"What is {a} {sym} {b}? Answer: {c}"
        else:
            q = f"The sum of {a} and {b} is {a + b}. The product is {a * b}."
        texts.append(q)
    for n in range(1000):
        texts.append(str(n))
    return texts


def learn_merges(texts, n_tokens, alphabet):
    """Byte-pair merges over whole texts (no pre-splitting, like the
    pre-tokenizer), until the vocabulary has n_tokens entries."""
    counts = {}
    for t in texts:
        word = tuple(alphabet[b] for b in t.encode("utf-8"))
        counts[word] = counts.get(word, 0) + 1
    words = list(counts.items())
    vocab = [alphabet[b] for b in range(256)]
    known = set(vocab)
    merges = []
    while len(vocab) < n_tokens:
        pairs = {}
        for word, n in words:
            for pair in zip(word, word[1:]):
                pairs[pair] = pairs.get(pair, 0) + n
        if not pairs:
            raise SystemExit("make_tokenizer.py: the corpus has run out of pairs to merge")
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        if joined not in known:
            known.add(joined)
            vocab.append(joined)
        new_words = []
        for word, n in words:
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words.append((tuple(out), n))
        words = new_words
    return vocab, merges


def byte_level(add_prefix_space=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
            "use_regex": False}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    alphabet = byte_alphabet()
    vocab, merges = learn_merges(corpus(), 256 + N_LEARNED, alphabet)
    ids = {tok: i for i, tok in enumerate(vocab)}
    added = []
    for name in SPECIALS:
        added.append({"id": len(vocab) + len(added), "content": name, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level(),
        "post_processor": bos_template(added[0]["content"], added[0]["id"]),
        "decoder": byte_level(),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": ids,
            "merges": [list(m) for m in merges],
        },
    }
    size = len(vocab) + len(added)
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 128,
        "intermediate_size": 352,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": (size + 63) // 64 * 64,
        "max_position_embeddings": 256,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "hidden_act": "silu",
        "bos_token_id": added[0]["id"],
        "eos_token_id": added[1]["id"],
        "torch_dtype": "float32",
    }
    for name, obj in (("tokenizer.json", tokenizer), ("config.json", config)):
        path = os.path.join(out_dir, name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=2)
            f.write("\n")
        os.replace(path + ".tmp", path)
    print(f"make_tokenizer.py: {len(vocab)} model tokens ({len(merges)} merges), "
          f"{len(added)} special, vocab_size {config['vocab_size']}, "
          f"bos {config['bos_token_id']}, eos {config['eos_token_id']}", file=sys.stderr)


if __name__ == "__main__":
    main()
