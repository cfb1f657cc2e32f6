"""Hugging Face `tokenizers` side of bench/tokenize.sh, and its inputs.

  tokenize_ref.py files DIR NAME...       writes the tokenizer files NAME...
                                          (tests/py/hf_tokenizer_files.py's
                                          names) into DIR; prints "NAME PATH"
                                          lines
  tokenize_ref.py texts OUT --texts N [--seed S]
                                          writes tests/py/tokcorpus.py's
                                          texts(N, S) as "<byte count>\\n<bytes>"
                                          records (bench/tokenize.c's input)
  tokenize_ref.py encode TOKENIZER.json TEXTS [--reps R] [--special]
                                          times encode on the texts: one
                                          untimed pass, then R timed passes of
                                          Tokenizer.encode_batch and R of
                                          Tokenizer.encode in a loop

encode prints a RESULT line per way, in bench/tokenize.c's format
(what=tokenizers_batch, what=tokenizers_loop). It runs on one thread: it
sets RAYON_NUM_THREADS=1 before tokenizers is imported (encode_batch would
otherwise spread over every core)."""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "py"))
os.environ["RAYON_NUM_THREADS"] = "1"

from tokenizers import Tokenizer  # noqa: E402
import hf_tokenizer_files  # noqa: E402
import tokcorpus  # noqa: E402


def read_texts(path):
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        n = int(data[pos:nl])
        out.append(data[nl + 1:nl + 1 + n].decode("utf-8"))
        pos = nl + 1 + n
    return out


def cmd_files(a):
    os.makedirs(a.dir, exist_ok=True)
    files = hf_tokenizer_files.real_files(a.dir, a.names) + hf_tokenizer_files.built_files(a.dir, a.names)
    found = {f.name: f for f in files}
    for name in a.names:
        f = found.get(name)
        if f is None or f.skip:
            sys.exit(f"tokenize_ref.py: no tokenizer file {name!r}" + (f": {f.skip}" if f else ""))
        print(name, f.path)


def cmd_texts(a):
    with open(a.out, "wb") as f:
        for t in tokcorpus.texts(a.texts, a.seed):
            b = t.encode("utf-8")
            f.write(b"%d\n" % len(b) + b)


def result(what, texts, nbytes, tokens, times):
    med = statistics.median(times)
    print(f"RESULT what={what} texts={texts} bytes={nbytes} tokens={tokens} median_s={med:.6f} "
          f"mb_s={nbytes / med / 1e6:.3f} tok_s={tokens / med:.0f} times={','.join(f'{t:.4f}' for t in times)}",
          flush=True)


def cmd_encode(a):
    tok = Tokenizer.from_file(a.tokenizer)
    texts = read_texts(a.texts)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    ways = {
        "tokenizers_batch": lambda: [e.ids for e in tok.encode_batch(texts, add_special_tokens=a.special)],
        "tokenizers_loop": lambda: [tok.encode(t, add_special_tokens=a.special).ids for t in texts],
    }
    for what, run in ways.items():
        tokens = sum(map(len, run()))     # warm-up
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        result(what, len(texts), nbytes, tokens, times)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("files")
    p.add_argument("dir")
    p.add_argument("names", nargs="+")
    p = sub.add_parser("texts")
    p.add_argument("out")
    p.add_argument("--texts", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("encode")
    p.add_argument("tokenizer")
    p.add_argument("texts")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--special", action="store_true")
    a = ap.parse_args()
    {"files": cmd_files, "texts": cmd_texts, "encode": cmd_encode}[a.cmd](a)


if __name__ == "__main__":
    main()
