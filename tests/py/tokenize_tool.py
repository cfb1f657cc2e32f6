"""Drives $BUILD/tests/tools/tokenize (lib/tokenizer/tokenizer.c) for the tokenizer
tests: many texts or id lists in one process, in the tool's formats.

  encode(path, texts, special=False)       ids of each text (str or bytes);
                                           special: `encode --special`, as
                                           add_special_tokens=True
  decode(path, id_lists, skip_special, streamed=False)
                                           decoded bytes of each list of ids;
                                           streamed: `decode --continue`, id
                                           by id as lib/sample/generate.c streams
Both raise AssertionError with the tool's message when it exits non-zero."""
import os
import subprocess

from rltest import ROOT

TOOL = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tests/tools/tokenize")


def run(*args, input=b""):
    """(exit status, stdout bytes, stderr text) of one run of the tool."""
    assert os.access(TOOL, os.X_OK), f"{TOOL} is not built (make BUILD=... aux)"
    p = subprocess.run([TOOL, *args], input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def checked(*args, input=b""):
    rc, out, err = run(*args, input=input)
    err = " / ".join(err.strip().splitlines())
    assert rc == 0, f"tokenize {' '.join(args)} exited {rc}: {err[:400]}"
    return out


def encode(path, texts, special=False):
    data = b"".join(b"%d\n" % len(t) + t for t in (x.encode() if isinstance(x, str) else x for x in texts))
    out = checked("encode", *(["--special"] if special else []), path, input=data)
    lines = out.split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(texts) + 1, f"{len(lines) - 1} lines for {len(texts)} texts"
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def decode(path, id_lists, skip_special=False, streamed=False):
    data = b"".join((" ".join(map(str, ids)) + "\n").encode() for ids in id_lists)
    opts = (["--skip-special"] if skip_special else []) + (["--continue"] if streamed else [])
    out = checked("decode", *opts, path, input=data)
    res, pos = [], 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        n = int(out[pos:nl])
        res.append(out[nl + 1:nl + 1 + n])
        pos = nl + 1 + n
    assert len(res) == len(id_lists), f"{len(res)} outputs for {len(id_lists)} lines"
    return res
