"""rl-cat interoperates with an independent implementation of the record stream.

The reference is tests/py/rltest.py (Debian's python3-msgpack and
python3-zstandard only). Contract: man/rl-cat.1, doc/design.md §2 and §7.

  - JSON lines -> records -> JSON lines is the identity on values and types;
  - streams written by Python are read by rl-cat, records byte for byte;
  - streams written by rl-cat are read by Python and by zstd(1);
  - --no-provenance, --head, --frame, and --stats --json agree with Python.
"""
import json
import math
import os
import re
import struct
import subprocess

import msgpack
import zstandard

import rltest
from rltest import case, f32, finish, pack_record, rollout, write_stream, read_stream, zstd_frames

F32_KEYS = rltest.F32_KEYS
tmpfile = rltest.tmpfile


def rlcat(*args, input=None):
    """Runs rl-cat; fails the case unless it exits 0. Returns stdout bytes."""
    rc, out, err = rltest.run("rl-cat", *args, input=input)
    assert rc == 0, f"rl-cat {' '.join(args)} exited {rc}, expected 0: {err.strip()[:400]}"
    return out


def json_lines(out):
    text = out.decode("utf-8")
    assert text == "" or text.endswith("\n"), "JSON output does not end with a newline"
    return [json.loads(line) for line in text.split("\n")[:-1]]   # not splitlines(): U+2028 is inside strings


def objects(raw):
    """Splits raw msgpack into (object, its exact bytes) pairs."""
    up = msgpack.Unpacker(raw=False, strict_map_key=False)
    up.feed(raw)
    out, pos = [], 0
    for obj in up:
        end = up.tell()
        out.append((obj, raw[pos:end]))
        pos = end
    assert pos == len(raw), f"{len(raw) - pos} bytes after the last complete msgpack object"
    return out


def decompress_all(data):
    return rltest.decompress(data)


def frames(data):
    """(start, end) of each zstd frame; data must be nothing but frames."""
    out, pos = [], 0
    while pos < len(data):
        assert data[pos:pos + 4] == rltest.ZSTD_MAGIC, f"byte {pos} does not start a zstd frame"
        d = zstandard.ZstdDecompressor().decompressobj()
        d.decompress(data[pos:])
        assert d.eof, f"zstd frame at byte {pos} is incomplete"
        end = len(data) - len(d.unused_data)
        out.append((pos, end))
        pos = end
    return out


def one_member(data):
    members = read_stream(data)
    assert len(members) == 1, f"expected ONE member, got {len(members)}"
    return members[0]


def f32_bits(x):
    return struct.unpack(">I", struct.pack(">f", x))[0]


def f64_bits(x):
    return struct.unpack(">Q", struct.pack(">d", x))[0]


def assert_same(got, exp, path="record", f32ctx=False):
    """Equal values AND equal JSON types (int stays int, float stays float, key order kept).
    Floats compare bit for bit (NaN equals NaN, -0.0 differs from 0.0); inside the
    float32 fields of rlpipe-records(5), as float32."""
    if isinstance(exp, dict):
        assert isinstance(got, dict), f"{path}: got {type(got).__name__}, expected an object"
        assert list(got) == list(exp), f"{path}: keys {list(got)}, expected {list(exp)} (in this order)"
        for k in exp:
            assert_same(got[k], exp[k], f"{path}.{k}", f32ctx=(path == "record" and k in F32_KEYS))
    elif isinstance(exp, list):
        assert isinstance(got, list), f"{path}: got {got!r}, expected a list"
        assert len(got) == len(exp), f"{path}: {len(got)} elements, expected {len(exp)}"
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_same(g, e, f"{path}[{i}]", f32ctx)
    elif isinstance(exp, float):
        assert type(got) is float, f"{path}: got {got!r} ({type(got).__name__}), expected the float {exp!r}"
        if f32ctx:
            assert f32_bits(got) == f32_bits(exp), f"{path}: float32 {f32(got)!r}, expected float32 {exp!r}"
        elif math.isnan(exp):
            assert math.isnan(got), f"{path}: got {got!r}, expected NaN"
        else:
            assert f64_bits(got) == f64_bits(exp), f"{path}: got {got!r}, expected {exp!r}"
    else:
        assert type(got) is type(exp) and got == exp, \
            f"{path}: got {got!r} ({type(got).__name__}), expected {exp!r} ({type(exp).__name__})"


# A small msgpack parser that keeps the wire types (float32 vs float64, int vs float).
def mp_parse(b, i=0):
    t = b[i]
    i += 1

    def be(n):
        return int.from_bytes(b[i:i + n], "big")
    if t <= 0x7f:
        return ("int", t), i
    if t >= 0xe0:
        return ("int", t - 0x100), i
    if 0x80 <= t <= 0x8f or t in (0xde, 0xdf):
        n, i = (t & 15, i) if t <= 0x8f else ((be(2), i + 2) if t == 0xde else (be(4), i + 4))
        items = []
        for _ in range(n):
            k, i = mp_parse(b, i)
            v, i = mp_parse(b, i)
            items.append((k[1], v))
        return ("map", items), i
    if 0x90 <= t <= 0x9f or t in (0xdc, 0xdd):
        n, i = (t & 15, i) if t <= 0x9f else ((be(2), i + 2) if t == 0xdc else (be(4), i + 4))
        items = []
        for _ in range(n):
            v, i = mp_parse(b, i)
            items.append(v)
        return ("array", items), i
    if 0xa0 <= t <= 0xbf or t in (0xd9, 0xda, 0xdb):
        n, i = (t & 31, i) if t <= 0xbf else {0xd9: (be(1), i + 1), 0xda: (be(2), i + 2), 0xdb: (be(4), i + 4)}[t]
        return ("str", b[i:i + n].decode("utf-8")), i + n
    if t == 0xc0:
        return ("nil", None), i
    if t in (0xc2, 0xc3):
        return ("bool", t == 0xc3), i
    if t in (0xc4, 0xc5, 0xc6):
        w = {0xc4: 1, 0xc5: 2, 0xc6: 4}[t]
        n = be(w)
        return ("bin", b[i + w:i + w + n]), i + w + n
    if t == 0xca:
        return ("f32", struct.unpack(">f", b[i:i + 4])[0]), i + 4
    if t == 0xcb:
        return ("f64", struct.unpack(">d", b[i:i + 8])[0]), i + 8
    if 0xcc <= t <= 0xcf:
        w = 1 << (t - 0xcc)
        return ("int", be(w)), i + w
    if 0xd0 <= t <= 0xd3:
        w = 1 << (t - 0xd0)
        return ("int", int.from_bytes(b[i:i + w], "big", signed=True)), i + w
    raise AssertionError(f"unexpected msgpack type byte 0x{t:02x} at {i - 1}")


def sig_digits(token):
    """Significant digits of a JSON number token: '-0.0100' -> 1, '1.5e-07' -> 2."""
    m = token.lstrip("-").lower().split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return max(len(m), 1)


def shortest_f32_digits(x):
    for p in range(1, 10):
        try:
            if f32(float("%.*g" % (p, x))) == x:
                return p
        except OverflowError:   # rounded beyond the largest float32
            pass
    return 9


def shortest_f64_digits(x):
    return sig_digits(repr(x))


# ---------------------------------------------------------------------------
# 1. JSON lines -> records -> JSON lines

F32_MAX = 3.4028234663852886e38
F32_TINY = 1.401298464324817e-45      # smallest float32 subnormal
F32_MIN_NORMAL = 1.1754943508222875e-38

RT_RECORDS = [
    {"id": 0, "group": 0, "prompt": "What is 2 + 2?", "answer": "4",
     "prompt_ids": [1, 2, 3], "ids": [7, 0, 4294967295, 9, 10, 11, 12],
     "text": "four \u00e9\u4e2d\U0001F600 \"quoted\" back\\slash\n\ttab \u0001 ctl \u007f del \u2028",
     "logp": [f32(-0.1), f32(-1e-8), -87.5, -F32_MAX, F32_TINY, -F32_MIN_NORMAL, f32(-2.718281828)],
     "ver": [0, 1, 4294967295, 2, 2, 2, 2], "finish": "stop", "reward": 0.1,
     "temperature": 0.7, "top_p": 0.95, "top_k": 50, "dtype": "bf16",
     "logp_learner": [f32(-0.123456789), -0.5, f32(-1e-30), -1.0, -2.0, f32(-1e-5), f32(-7.7)],
     "ver_learner": 3, "w": [1.0, 2.0, f32(0.3), F32_TINY, 1.5, f32(1 / 3), 0.0], "mask": [1, 0, 1, 1, 1, 0, 1],
     "adv": -1 / 3},
    {"id": 2 ** 64 - 1, "group": 2 ** 64 - 1, "prompt": "", "ids": [], "logp": [], "ver": [],
     "finish": "length", "reward": 1e-300, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
     "meta": {"nested": {"deep": [1, [2, [3, {"x": None}]]], "f": 2.5}, "flags": [True, False, None]},
     "big": 2 ** 64 - 1, "big63": 2 ** 63, "neg": -2 ** 63, "neg1": -1, "neg33": -2 ** 32 - 1,
     "u32": 2 ** 32, "zero": 0, "fl": 3.0, "fl_neg": -7.0, "tiny": 5e-324, "huge": 1.7976931348623157e308,
     "tenth": 0.1, "third": 1 / 3, "e16": 1e16, "e22": 1e22, "small": 1.5e-7,
     "empty_map": {}, "empty_list": [], "empty_str": "", "t": True, "f": False, "n": None,
     "cl\u00e9 \u4e2d": "unicode key", "mixed": [1, 1.0, "1", [1], {"1": 1}, None, True]},
    {"id": 1, "group": 0, "text": "\U0001F680" * 40 + "x" * 300, "reward": -0.0, "adv": 0.0,
     "logp": [-0.0, 0.0, 0.5, -1.0, -100.0], "ids": [1, 2, 3, 4, 5],
     "long_list": list(range(70000)), "long_str": "a" * 70000},
]


def rt_jsonl():
    """The round-trip records as JSON lines: odd lines ASCII-escaped (surrogate pairs), even raw UTF-8."""
    return "".join(json.dumps(r, ensure_ascii=(i % 2 == 0)) + "\n" for i, r in enumerate(RT_RECORDS)).encode()


@case
def json_round_trip_pack_then_json_is_identity_on_values_and_types():
    src = tmpfile("rt.jsonl", rt_jsonl())
    packed = tmpfile("rt.rlr", rlcat("--pack", "--no-provenance", src))
    got = json_lines(rlcat("--json", packed))
    assert len(got) == len(RT_RECORDS), f"{len(got)} lines, expected {len(RT_RECORDS)}"
    for g, e in zip(got, RT_RECORDS):
        assert_same(g, e)


@case
def json_round_trip_through_a_pipe_and_uncompressed():
    packed = rlcat("--pack", "-u", "-", input=rt_jsonl())
    assert packed[:4] != rltest.ZSTD_MAGIC and (packed[0] in (0xde, 0xdf) or 0x80 <= packed[0] <= 0x8f), \
        f"-u output starts with 0x{packed[0]:02x}, not a map"
    got = json_lines(rlcat("--json", "-", input=packed))
    for g, e in zip(got, RT_RECORDS):
        assert_same(g, e)
    assert len(got) == len(RT_RECORDS)


@case
def pack_and_json_in_one_command_equals_the_two_step_pipe():
    direct = rlcat("--pack", "--json", input=rt_jsonl())
    two_step = rlcat("--json", input=rlcat("--pack", input=rt_jsonl()))
    assert direct == two_step, "rl-cat --pack --json differs from rl-cat --pack | rl-cat --json"


@case
def json_round_trip_is_a_fixed_point_of_the_text():
    once = rlcat("--pack", "--json", input=rt_jsonl())
    twice = rlcat("--pack", "--json", input=once)
    assert once == twice, "JSON -> records -> JSON -> records -> JSON changed the text"


@case
def json_float32_fields_print_the_shortest_form_that_reads_back():
    tokens = []
    for line in rlcat("--pack", "--json", input=rt_jsonl()).decode().split("\n")[:-1]:
        tokens.append(json.loads(line, parse_float=lambda s: s))
    checked = 0
    for rec, exp in zip(tokens, RT_RECORDS):
        for k in F32_KEYS:
            for tok, x in zip(rec.get(k, []), exp.get(k, [])):
                assert isinstance(tok, str), f"{k}: {tok!r} printed without '.' or exponent"
                assert f32(float(tok)) == x, f"{k}: {tok} reads back as float32 {f32(float(tok))!r}, not {x!r}"
                if x != 0:
                    assert sig_digits(tok) == shortest_f32_digits(x), \
                        f"{k}: {tok} has {sig_digits(tok)} digits; float32 {x!r} needs {shortest_f32_digits(x)}"
                checked += 1
        for k in ("reward", "adv", "temperature", "top_p", "tenth", "third", "tiny", "huge", "small", "e16", "e22"):
            if k in exp and exp[k] != 0:
                tok = rec[k]
                assert isinstance(tok, str), f"{k}: {tok!r} printed without '.' or exponent"
                assert float(tok) == exp[k], f"{k}: {tok} != {exp[k]!r}"
                assert sig_digits(tok) <= shortest_f64_digits(exp[k]), \
                    f"{k}: {tok} is longer than the shortest float64 form {exp[k]!r}"
                checked += 1
    assert checked > 20


@case
def json_integral_floats_keep_a_point_or_exponent():
    out = rlcat("--pack", "--json", input=b'{"reward": 1.0, "adv": -2.0, "x": 3.0, "logp": [1.0, -0.0], "y": 1e300}\n')
    rec = json.loads(out, parse_float=lambda s: "F:" + s)
    assert all(str(v).startswith("F:") for v in (rec["reward"], rec["adv"], rec["x"], rec["y"], *rec["logp"])), rec


@case
def json_nonfinite_floats_round_trip_as_python_writes_them():
    rec = {"id": 3, "reward": float("nan"), "adv": float("-inf"), "logp": [float("-inf"), float("inf"), float("nan"), -1.0],
           "x": float("inf"), "y": [float("nan"), float("-inf")], "z": -0.0}
    line = json.dumps(rec) + "\n"
    out = rlcat("--pack", "--json", input=line.encode())
    text = out.decode()
    for tok in ("NaN", "Infinity", "-Infinity"):
        assert tok in text, f"{tok} missing from {text!r}"
    assert_same(json.loads(text), rec)


@case
def pack_gives_design_types_on_the_wire():
    raw = rlcat("--pack", "-u", "--no-provenance", input=rt_jsonl())
    objs = objects(raw)
    assert len(objs) == len(RT_RECORDS) + 2, "expected header, records, trailer"
    for (_, b), exp in zip(objs[1:-1], RT_RECORDS):
        (tag, items), end = mp_parse(b)
        assert tag == "map" and end == len(b)
        fields = dict(items)
        for k, (vt, v) in fields.items():
            if k in F32_KEYS:
                assert vt == "array" and all(e[0] == "f32" for e in v), f"{k}: not an array of float32: {[e[0] for e in v]}"
            elif k in ("id", "group", "top_k", "ver_learner"):
                assert vt == "int" and v >= 0, f"{k}: {vt}, expected an unsigned int"
            elif k in ("ids", "prompt_ids", "ver"):
                assert vt == "array" and all(e[0] == "int" and 0 <= e[1] < 2 ** 32 for e in v), f"{k}: not uint32s"
            elif k == "mask":
                assert vt == "array" and all(e[0] == "int" and e[1] in (0, 1) for e in v), f"{k}: not 0/1"
            elif k in ("reward", "adv", "temperature", "top_p"):
                assert vt == "f64", f"{k}: {vt}, expected float64"
            elif k in ("prompt", "answer", "text", "finish", "dtype", "completion"):
                assert vt == "str", f"{k}: {vt}, expected str"
            elif isinstance(exp[k], bool):
                assert vt == "bool", f"{k}: {vt}"
            elif isinstance(exp[k], int):
                assert vt == "int" and v == exp[k], f"unknown integer field {k}: {vt} {v!r}, expected int {exp[k]}"
            elif isinstance(exp[k], float):
                assert vt == "f64", f"unknown float field {k}: {vt}, expected float64"


@case
def json_header_option_writes_the_header_first_and_the_trailer_last():
    hdr = {"rlpipe": 1, "kind": "examples", "producer": "someone 9", "seed": 7, "model": {"name": "m"}}
    src = json.dumps(hdr) + "\n" + "".join(json.dumps(r) + "\n" for r in RT_RECORDS[:2])
    packed = rlcat("--pack", "--no-provenance", input=src.encode())
    h, recs, t = one_member(packed)
    assert h == hdr, f"header {h!r}, expected the JSON line's header {hdr!r}"
    assert t == {"rlpipe_end": 1, "count": 2}, t
    lines = json_lines(rlcat("--json", "--header", input=packed))
    assert lines[0] == hdr, lines[0]
    assert lines[-1] == {"rlpipe_end": 1, "count": 2}, lines[-1]
    assert len(lines) == 4


# ---------------------------------------------------------------------------
# 2. Streams written by Python, read by rl-cat

def py_records(n=10, start=0):
    recs = []
    for i in range(start, start + n):
        r = rollout(i, n_tokens=3 + i % 5)
        if i % 3 == 0:
            r["logp_learner"] = [f32(x - 0.02) for x in r["logp"]]
            r["ver_learner"] = 1
            r["w"] = [f32(0.97)] * len(r["logp"])
            r["mask"] = [1] * (len(r["logp"]) - 1) + [0]
        if i % 4 == 1:
            r["extra"] = {"nested": [1, {"k": [True, None, -5, 2.5]}], "big": 2 ** 64 - 1, "neg": -2 ** 63}
        recs.append(r)
    return recs


def odd_record_bytes():
    """A record with valid but non-canonical encodings, which a pass-through must keep byte for byte:
    map16 for 5 keys, uint16 for a small int, str8 for a short string, array16 for 2 elements,
    a float32 in an unknown field, int64 for a positive value."""
    b = b"\xde\x00\x05"
    b += b"\xa2id" + b"\xcd\x00\x63"                            # id: 99 as uint16
    b += b"\xd9\x05group" + b"\xd3" + (25).to_bytes(8, "big")     # key as str8; group: 25 as int64
    b += b"\xa4text" + b"\xd9\x02hi"                             # "hi" as str8
    b += b"\xa3ids" + b"\xdc\x00\x02" + b"\x01\xcc\x02"          # [1, 2] as array16, 2 as uint8
    b += b"\xa3odd" + b"\xca" + struct.pack(">f", 0.25)          # float32 outside the fields of rlpipe-records(5)
    return b


def python_stream_variants():
    recs = py_records(10)
    recs2 = py_records(7, start=10)
    hdr = rltest.header(seed=7, model={"name": "tiny", "layers": 2})
    odd = odd_record_bytes()

    def with_odd(compress, frame_every=None):
        objs = rltest.member_bytes(recs[:5], hdr)
        objs = objs[:-1] + [odd] + [pack_record(r) for r in recs[5:]] + [msgpack.packb({"rlpipe_end": 1, "count": 11})]
        if not compress:
            return b"".join(objs)
        c = zstandard.ZstdCompressor(level=3, write_checksum=True)
        step = frame_every or len(objs)
        return b"".join(c.compress(b"".join(objs[i:i + step])) for i in range(0, len(objs), step))

    all_objs = ([pack_record(r) for r in recs[:5]] + [odd] + [pack_record(r) for r in recs[5:]])
    one = (hdr, all_objs)
    two = (hdr, all_objs + [pack_record(r) for r in recs2])
    a2 = write_stream(recs2, hdr=rltest.header(producer2="second"), frame_every=4)
    return [
        ("compressed_single_frame", with_odd(True), one),
        ("compressed_multi_frame", with_odd(True, frame_every=3), one),
        ("compressed_one_object_per_frame", with_odd(True, frame_every=1), one),
        ("raw_uncompressed", with_odd(False), one),
        ("frames_without_checksum", write_stream_nochecksum(with_odd(False)), one),
        ("two_compressed_members", with_odd(True, frame_every=4) + a2, two),
        ("compressed_then_raw_member", with_odd(True, frame_every=4) + write_stream(recs2, compress=False), two),
        ("raw_then_compressed_member", with_odd(False) + a2, two),
        ("two_raw_members", with_odd(False) + write_stream(recs2, compress=False), two),
    ]


def write_stream_nochecksum(raw_member):
    objs = [b for _, b in objects(raw_member)]
    c = zstandard.ZstdCompressor(level=3, write_checksum=False)
    out = b"".join(c.compress(b"".join(objs[i:i + 3])) for i in range(0, len(objs), 3))
    assert not zstandard.get_frame_parameters(out).has_checksum
    return out


def check_python_stream(data, expected):
    hdr, rec_bytes = expected
    exp_values = [msgpack.unpackb(b, raw=False) for b in rec_bytes]
    src = tmpfile("py.rlr", data)
    # rl-cat --json: the values
    got = json_lines(rlcat("--json", src))
    assert len(got) == len(exp_values), f"--json gave {len(got)} records, expected {len(exp_values)}"
    for i, (g, e) in enumerate(zip(got, exp_values)):
        assert_same(g, e, path="record")
    # rl-cat -u, and rl-cat (compressed): one member, the header kept, records byte for byte
    for args in (("-u",), ()):
        out = rlcat(*args, src)
        if args:
            assert out[:4] != rltest.ZSTD_MAGIC, "-u output is zstd"
        else:
            assert out[:4] == rltest.ZSTD_MAGIC, "default output is not zstd"
        h, recs, t = one_member(out)
        assert h == hdr, f"header {h!r}, expected the first input header {hdr!r}"
        assert t == {"rlpipe_end": 1, "count": len(rec_bytes)}, f"trailer {t!r}"
        objs = objects(decompress_all(out))
        assert len(objs) == len(rec_bytes) + 2
        for i, ((_, b), want) in enumerate(zip(objs[1:-1], rec_bytes)):
            assert b == want, f"rl-cat {' '.join(args)}: record {i} bytes {b[:40].hex()}..., expected {want[:40].hex()}..."


for _name, _data, _exp in python_stream_variants():
    def _f(data=_data, exp=_exp):
        check_python_stream(data, exp)
    _f.__name__ = "python_stream_read_by_rl_cat_" + _name
    case(_f)


@case
def python_stream_passes_rl_cat_check():
    for name, data, exp in python_stream_variants():
        rc, out, err = rltest.run("rl-cat", "--check", tmpfile("chk.rlr", data))
        assert rc == 0 and out == b"", f"{name}: --check exited {rc}: {err.strip()}"


# ---------------------------------------------------------------------------
# 3. Streams written by rl-cat, read by Python

def rl_written(n=10, *args):
    src = tmpfile("src.rlr", write_stream(py_records(n)))
    return rlcat(*args, src)


@case
def rl_cat_compressed_output_has_a_content_checksum_in_every_frame():
    for args in ((), ("--frame", "2"), ("--level", "19")):
        out = rl_written(10, *args)
        fr = frames(out)
        assert len(fr) >= 1
        for s, e in fr:
            p = zstandard.get_frame_parameters(out[s:e])
            assert p.has_checksum, f"rl-cat {' '.join(args)}: frame at byte {s} has no content checksum"
            assert out[s + 4] & 0x04, "Frame_Header_Descriptor content-checksum bit is 0"
    out = rlcat("--pack", "--frame", "1", input=rt_jsonl())
    assert all(zstandard.get_frame_parameters(out[s:e]).has_checksum for s, e in frames(out))


@case
def rl_cat_output_is_read_by_python():
    recs = py_records(10)
    h, got, t = one_member(rl_written(10))
    assert got == recs, "records differ from what Python wrote"
    assert t == {"rlpipe_end": 1, "count": 10}, t


@case
def rl_cat_uncompressed_output_is_plain_msgpack():
    out = rl_written(10, "-u")
    assert out[:4] != rltest.ZSTD_MAGIC
    assert 0x80 <= out[0] <= 0x8f or out[0] in (0xde, 0xdf), f"first byte 0x{out[0]:02x} is not a map"
    objs = [o for o, _ in objects(out)]
    assert objs[0]["rlpipe"] == 1
    assert objs[1:-1] == py_records(10)
    assert objs[-1] == {"rlpipe_end": 1, "count": 10}
    out2 = rl_written(10, "--uncompressed")
    assert out2 == out, "-u and --uncompressed differ"


@case
def rl_cat_frame_option_ends_a_frame_every_n_records():
    for n_recs, n in ((10, 3), (9, 3), (10, 1), (5, 1024), (25, 4)):
        out = rl_written(n_recs, "--frame", str(n))
        ends, count = [], 0
        fr = frames(out)
        for s, e in fr:
            raw = zstandard.ZstdDecompressor().decompressobj().decompress(out[s:e])
            objs = [o for o, _ in objects(raw)]   # asserts: a frame holds whole objects only
            count += sum(1 for o in objs if "rlpipe" not in o and "rlpipe_end" not in o)
            ends.append(count)
        inner = ends[:-1]
        multiples = [k for k in range(n, n_recs, n)]
        assert all(c == 0 or c % n == 0 for c in inner), \
            f"--frame {n}, {n_recs} records: frames end after records {inner}, not on multiples of {n}"
        assert set(multiples) <= set(inner) | ({n_recs} if n_recs % n == 0 else set()), \
            f"--frame {n}, {n_recs} records: frames end after records {ends}, expected ends at {multiples}"
        assert len(fr) >= -(-n_recs // n), f"--frame {n}: {len(fr)} frames for {n_recs} records"
        assert zstd_frames(out) == len(fr)
        assert one_member(out)[1] == py_records(n_recs)


@case
def zstd_dc_of_rl_cat_output_yields_plain_msgpack():
    for args in ((), ("--frame", "3")):
        path = tmpfile("z.rlr", rl_written(10, *args))
        p = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 0, f"zstd -dc exited {p.returncode}: {p.stderr.decode()}"
        objs = [o for o, _ in objects(p.stdout)]
        assert objs[0]["rlpipe"] == 1 and objs[-1] == {"rlpipe_end": 1, "count": 10}
        assert objs[1:-1] == py_records(10)


@case
def rl_cat_trailer_count_is_the_number_of_records():
    for n in (0, 1, 10, 100):
        h, recs, t = one_member(rl_written(n))
        assert len(recs) == n and t == {"rlpipe_end": 1, "count": n}, f"{n} records: trailer {t!r}"


@case
def rl_cat_output_of_several_inputs_is_one_member():
    a = tmpfile("a.rlr", write_stream(py_records(4), hdr=rltest.header(tag="first")))
    b = tmpfile("b.rlr", write_stream(py_records(3, start=4), compress=False))
    c = tmpfile("c.rlr", write_stream(py_records(2, start=7), frame_every=1) + write_stream(py_records(3, start=9)))
    for args in ((), ("-u",)):
        out = rlcat(*args, a, b, c)
        h, recs, t = one_member(out)
        assert h == rltest.header(tag="first"), f"header {h!r} is not the first input's"
        assert recs == py_records(12), "records not concatenated in order"
        assert t == {"rlpipe_end": 1, "count": 12}, t


@case
def no_provenance_outputs_are_byte_identical_across_runs():
    src = tmpfile("np.jsonl", rt_jsonl())
    for args in ((), ("-u",), ("--frame", "1")):
        a = rlcat("--pack", "--no-provenance", *args, src)
        b = rlcat("--pack", "--no-provenance", *args, src)
        assert a == b, f"--pack --no-provenance {' '.join(args)}: outputs differ"
        h = one_member(a)[0]
        assert "argv" not in h and "time" not in h, f"header {h!r} still has provenance"
        assert h.get("rlpipe") == 1 and h.get("kind") == "rollouts" and h.get("producer") == "rl-cat 0.1.0", h
    # an input header with provenance loses it too
    with_prov = tmpfile("prov.rlr", rlcat("--pack", src))
    a = rlcat("--no-provenance", with_prov)
    b = rlcat("--no-provenance", with_prov)
    assert a == b
    h = one_member(a)[0]
    assert "argv" not in h and "time" not in h, f"header {h!r} still has provenance"


@case
def without_no_provenance_the_header_has_argv_and_time():
    src = tmpfile("p.jsonl", rt_jsonl())
    h = one_member(rlcat("--pack", "-k", "examples", src))[0]
    assert h.get("rlpipe") == 1 and h.get("kind") == "examples" and h.get("producer") == "rl-cat 0.1.0", h
    assert isinstance(h.get("argv"), list) and all(isinstance(a, str) for a in h["argv"]), h
    assert "--pack" in h["argv"] and src in h["argv"], f"argv {h['argv']!r}"
    assert isinstance(h.get("time"), str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", h["time"]), \
        f"time {h.get('time')!r} is not an ISO 8601 UTC time"


@case
def head_n_gives_the_first_n_records_and_trailer_count_n():
    recs = py_records(10)
    src = tmpfile("h.rlr", write_stream(recs, frame_every=3))
    for n in (0, 1, 4, 10, 11, 1000):
        h, got, t = one_member(rlcat("--head", str(n), src))
        k = min(n, 10)
        assert got == recs[:k], f"--head {n}: {len(got)} records, expected the first {k}"
        assert t == {"rlpipe_end": 1, "count": k}, f"--head {n}: trailer {t!r}"
    lines = json_lines(rlcat("--head", "4", "--json", src))
    assert len(lines) == 4 and [r["id"] for r in lines] == [0, 1, 2, 3]
    second = tmpfile("h2.rlr", write_stream(py_records(5, start=10)))
    h, got, t = one_member(rlcat("--head", "12", src, second))
    assert got == recs + py_records(2, start=10) and t["count"] == 12, f"--head across files: {t}"
    h, got, t = one_member(rlcat("--pack", "--head", "2", input=rt_jsonl()))
    assert len(got) == 2 and t["count"] == 2


# ---------------------------------------------------------------------------
# 4. --stats --json equals the statistics computed here

def next_f32_up(x):
    """The smallest float32 >= x (x > 0)."""
    y = f32(x)
    if y < x:
        y = struct.unpack(">f", struct.pack(">I", struct.unpack(">I", struct.pack(">f", y))[0] + 1))[0]
    return y


def stats_records():
    diffs = [-0.5, -0.2, 0.1, 0.3, 0.8, 1.2, -0.05, 0.6, -1.1, 0.45]
    recs = []
    for i in range(41):
        n = 2 + i % 7
        lp = [f32(-0.05 * (t + 1) - 0.013 * i) for t in range(n)]
        lpl = [f32(lp[t] + diffs[(i + 3 * t) % len(diffs)] + 0.001 * t) for t in range(n)]
        w, mask = [], []
        for t in range(n):
            rho = math.exp(lpl[t] - lp[t])
            w.append(2.0 if rho > 2.0 else next_f32_up(rho))
            mask.append(0 if rho < 0.45 else 1)
        v0 = i // 6
        ver = [v0 + (1 if (i % 5 == 0 and t >= n // 2) else 0) for t in range(n)]
        r = {"id": i, "group": i // 4, "ids": [(7 * i + t) % 50 for t in range(n)],
             "logp": lp, "logp_learner": lpl, "w": w, "mask": mask,
             "ver": ver, "ver_learner": max(ver) + i % 3,
             "finish": ["stop", "length", "stop", "stop", "abort"][i % 5]}
        if i % 7 != 3:
            r["reward"] = [1.0, 0.0, -0.5, 0.25, 2.0][i % 5]
        recs.append(r)
    return recs


def python_stats(recs, members):
    toks = [(r, t) for r in recs for t in range(len(r["ids"]))]
    rewarded = [r["reward"] for r in recs if "reward" in r]
    groups = sum(1 for i, r in enumerate(recs) if i == 0 or r["group"] != recs[i - 1]["group"])
    finish = {}
    for r in recs:
        finish[r["finish"]] = finish.get(r["finish"], 0) + 1
    lens = [len(r["ids"]) for r in recs]
    vers = [v for r in recs for v in r["ver"]]
    lags = [r["ver_learner"] - v for r in recs for v in r["ver"]]
    d = [(r["logp"][t], r["logp_learner"][t]) for r, t in toks]
    rho = [math.exp(b - a) for a, b in d]
    w = [r["w"][t] for r, t in toks]
    wm = [r["w"][t] for r, t in toks if r["mask"][t] != 0]
    return {
        "records": len(recs), "members": members, "groups": groups, "rewarded": len(rewarded),
        "reward_mean": sum(rewarded) / len(rewarded),
        "accuracy": sum(1 for x in rewarded if x > 0) / len(rewarded),
        "tokens_mean": sum(lens) / len(lens), "tokens_max": max(lens), "finish": finish,
        "ver_min": min(vers), "ver_max": max(vers),
        "mixed_version_frac": sum(1 for r in recs if len(set(r["ver"])) > 1) / len(recs),
        "lag_mean": sum(lags) / len(lags), "lag_max": max(lags),
        "tokens_scored": len(d),
        "k1": sum(a - b for a, b in d) / len(d),
        "k3": sum(x - 1 - (b - a) for x, (a, b) in zip(rho, d)) / len(d),
        "ratio_mean": sum(rho) / len(rho), "ratio_min": min(rho), "ratio_max": max(rho),
        "max_abs_p_diff": max(abs(math.exp(b) - math.exp(a)) for a, b in d),
        "capped_frac": sum(1 for x, y in zip(w, rho) if x < y) / len(w),
        "ess": sum(wm) ** 2 / (len(wm) * sum(x * x for x in wm)),
        "masked_frac": sum(1 for r, t in toks if r["mask"][t] == 0) / len(toks),
    }


def assert_stats(got, exp):
    for k, e in exp.items():
        assert k in got, f"--stats --json has no {k!r} (keys: {sorted(got)})"
        g = got[k]
        if isinstance(e, dict) or isinstance(e, int):
            assert g == e, f"{k}: {g!r}, expected {e!r}"
        else:
            assert isinstance(g, (int, float)) and math.isclose(g, e, rel_tol=1e-9, abs_tol=1e-300), \
                f"{k}: {g!r}, expected {e!r} (relative error {abs(g - e) / abs(e) if e else g!r})"


@case
def stats_json_equals_python_statistics_of_the_same_records():
    recs = stats_records()
    exp = python_stats(recs, 1)
    assert 0 < exp["capped_frac"] < 1 and 0 < exp["masked_frac"] < 1 and 0 < exp["mixed_version_frac"] < 1
    src = tmpfile("s.rlr", write_stream(recs, frame_every=5))
    out = rlcat("--stats", "--json", src)
    assert out.count(b"\n") == 1 and out.endswith(b"\n"), f"expected ONE JSON line, got {out[:200]!r}"
    assert_stats(json.loads(out), exp)


@case
def stats_json_over_two_members_counts_members_and_all_records():
    recs = stats_records()
    data = write_stream(recs[:20], frame_every=3) + write_stream(recs[20:], compress=False)
    exp = python_stats(recs, 2)
    assert_stats(json.loads(rlcat("--stats", "--json", tmpfile("s2.rlr", data))), exp)
    # the same through a pipe, and from JSON lines
    assert_stats(json.loads(rlcat("--stats", "--json", "-", input=data)), exp)
    jl = "".join(json.dumps(r) + "\n" for r in recs).encode()
    assert_stats(json.loads(rlcat("--pack", "--stats", "--json", input=jl)), python_stats(recs, 1))


@case
def stats_json_omits_keys_whose_fields_are_absent():
    recs = [{"id": i, "group": i // 2, "ids": [1] * (i + 1), "reward": float(i % 2), "finish": "stop"} for i in range(6)]
    got = json.loads(rlcat("--stats", "--json", input=write_stream(recs)))
    exp = {"records": 6, "members": 1, "groups": 3, "rewarded": 6, "reward_mean": 0.5, "accuracy": 0.5,
           "tokens_mean": 3.5, "tokens_max": 6, "finish": {"stop": 6}}
    assert_stats(got, exp)
    for k in ("ver_min", "ver_max", "mixed_version_frac", "lag_mean", "lag_max", "tokens_scored", "k1", "k3",
              "ratio_mean", "ratio_min", "ratio_max", "max_abs_p_diff", "capped_frac", "ess", "masked_frac"):
        assert k not in got, f"{k} present although its fields are absent: {got[k]!r}"



@case
def a_map_key_with_a_nul_byte_is_refused_where_it_is_read():
    # --json would write it as \u0000, which --pack (and the tools' options)
    # cannot take back: such a key is refused when the stream is read.
    for rec in ({"id": 0, "a\x00b": 1}, {"id": 0, "meta": {"x\x00": 2}}):
        data = rltest.write_stream([rec])
        rc, _, err = rltest.run("rl-cat", "--check", "-", input=data)
        assert rc == 1 and "contains a NUL byte" in err and "record 0" in err, (rec, rc, err)
    ok = rltest.write_stream([{"id": 0, "text": "a\x00b", "meta": {"x": "\x00"}}])
    rc, _, err = rltest.run("rl-cat", "--check", "-", input=ok)
    assert rc == 0, f"NUL bytes in string values are data and stay valid: {err}"


finish()
