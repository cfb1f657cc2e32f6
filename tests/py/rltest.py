"""Shared helpers for the Python tests: a reference writer and reader of the
rlpipe record stream built only on Debian's msgpack and zstandard (nothing of
rlpipe's own code), a way to run the tools, and the PASS/FAIL protocol of
tests/run.sh."""
import os
import struct
import subprocess
import sys
import tempfile
import traceback

import msgpack
import zstandard

ROOT = os.environ.get("RLPIPE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("RLPIPE_BIN", os.path.join(ROOT, "bin"))
F32_KEYS = ("logp", "logp_learner", "logp_ref", "w")   # float32 arrays by rlpipe-records(5)
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_failed = 0


def case(fn):
    """Runs fn() now as one test case named after it."""
    global _failed
    try:
        fn()
        print("PASS", fn.__name__, flush=True)
    except Exception as e:  # the case failed: say why, keep going
        _failed += 1
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print(f"FAIL {fn.__name__}: line {tb.lineno}: {type(e).__name__}: {e}", flush=True)
    return fn


def finish():
    sys.exit(1 if _failed else 0)


def f32(x):
    """The float32 value nearest x, as a Python float."""
    return struct.unpack(">f", struct.pack(">f", x))[0]


def pack_value(key, v):
    if key in F32_KEYS and isinstance(v, list):
        out = b""
        n = len(v)
        out += bytes([0x90 | n]) if n < 16 else (b"\xdc" + struct.pack(">H", n) if n < 65536 else b"\xdd" + struct.pack(">I", n))
        for x in v:
            out += b"\xca" + struct.pack(">f", x)
        return out
    return msgpack.packb(v, use_bin_type=True)


def pack_record(d):
    """msgpack map with float32 arrays for the float32 fields of rlpipe-records(5)."""
    n = len(d)
    out = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
    for k, v in d.items():
        out += msgpack.packb(k) + pack_value(k, v)
    return out


def header(kind="rollouts", **extra):
    h = {"rlpipe": 1, "kind": kind, "producer": "rltest.py"}
    h.update(extra)
    return h


def member_bytes(records, hdr=None):
    """Objects of one member (raw msgpack), as a list of byte strings."""
    objs = [pack_record(hdr or header())]
    objs += [pack_record(r) for r in records]
    objs.append(msgpack.packb({"rlpipe_end": 1, "count": len(records)}))
    return objs


def write_stream(records, hdr=None, compress=True, frame_every=None, checksum=True, level=3):
    """One member; zstd frames of `frame_every` objects each (one frame if None)."""
    objs = member_bytes(records, hdr)
    if not compress:
        return b"".join(objs)
    c = zstandard.ZstdCompressor(level=level, write_checksum=checksum)
    step = frame_every or len(objs)
    return b"".join(c.compress(b"".join(objs[i:i + step])) for i in range(0, len(objs), step))


def read_stream(data):
    """Decodes a whole stream: list of (header, records, trailer) per member."""
    raw = decompress(data, allow_cut=True)
    up = msgpack.Unpacker(raw=False)
    up.feed(raw)
    objs = list(up)
    members = []
    i = 0
    while i < len(objs):
        h = objs[i]
        assert "rlpipe" in h, f"object {i} is not a header: {h!r}"
        i += 1
        recs = []
        while "rlpipe_end" not in objs[i]:
            recs.append(objs[i])
            i += 1
        members.append((h, recs, objs[i]))
        i += 1
    return members


def decompress(data, allow_cut=False):
    """Plain msgpack of a stream of zstd frames and raw segments. A cut last
    frame is an error, or with allow_cut gives what it decodes to."""
    raw, pos = b"", 0
    while pos < len(data):
        if data[pos:pos + 4] != ZSTD_MAGIC[:len(data) - pos]:   # a cut magic is a cut frame
            return raw + data[pos:]
        d = zstandard.ZstdDecompressor().decompressobj()
        raw += d.decompress(data[pos:])
        if not d.eof:
            assert allow_cut, f"zstd frame at byte {pos} is incomplete"
            break
        pos = len(data) - len(d.unused_data)
    return raw


def stream_objects(data):
    """Every complete msgpack object of a (maybe truncated) stream: what a
    tool wrote before an error ended it."""
    up = msgpack.Unpacker(raw=False)
    up.feed(decompress(data, allow_cut=True))
    out = []
    try:
        for o in up:
            out.append(o)
    except Exception:   # the cut object
        pass
    return out


TMP = tempfile.TemporaryDirectory(prefix="rlpipe-test.")


def tmpfile(name, data):
    """Writes data to a file of that name in this test's temporary folder; returns its path."""
    path = os.path.join(TMP.name, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def zstd_frames(data):
    """Number of zstd frames in data."""
    n, pos = 0, 0
    while pos < len(data):
        assert data[pos:pos + 4] == ZSTD_MAGIC, f"byte {pos} does not start a zstd frame"
        d = zstandard.ZstdDecompressor().decompressobj()
        d.decompress(data[pos:])
        pos = len(data) - len(d.unused_data)
        n += 1
    return n


def run(tool, *args, input=None, check=False):
    """Runs bin/<tool> args; returns (status, stdout bytes, stderr text)."""
    p = subprocess.run([os.path.join(BIN, tool), *args], input=input,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode("utf-8", "replace")
    if check and p.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} exited {p.returncode}: {err}")
    return p.returncode, p.stdout, err


def groups(recs):
    """The records in runs of one "group", in stream order."""
    out = []
    for r in recs:
        if out and out[-1][0]["group"] == r["group"]:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def rollout(i, n_tokens=8, group=None):
    """A realistic rollout record with float32-exact logps."""
    return {
        "id": i, "group": i // 4 if group is None else group,
        "prompt": f"What is {i} + {i}?", "answer": str(2 * i),
        "prompt_ids": [1, 5 + i % 7, 9, 12],
        "ids": [(i * 31 + t * 7) % 1000 for t in range(n_tokens)],
        "text": f"The answer is {2 * i}. \u00e9\u4e2d",
        "logp": [f32(-0.01 * (t + 1) - 0.001 * i) for t in range(n_tokens)],
        "ver": [0] * n_tokens, "finish": "stop", "reward": float(i % 2),
        "temperature": 1.0, "top_p": 1.0, "top_k": 0, "dtype": "f32",
    }
