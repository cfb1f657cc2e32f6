"""A cut or damaged stream is always reported, and never costs a good record.

doc/design.md §2 / rl-cat contract: a stream cut anywhere (mid zstd frame, between
frames, mid object, member without trailer) is a "truncated stream": rl-cat
writes every complete record before the cut, then reports the error and exits 1.
A zstd checksum or format error is a "corrupt stream": nothing of the corrupt
frame is delivered, everything before it is.

Sweeps: every cut 0..len-1 of a compressed multi-frame stream, of a raw stream,
and of 2-member files; every single-byte flip (xor 0xff and xor 0x01) in the
payload of several zstd frames. What rl-cat must deliver on a cut is exactly
what a reference decoder recovers: python-zstandard's decompressobj fed the cut
bytes frame by frame, then msgpack.Unpacker counting complete objects.
"""
import concurrent.futures
import json
import os
import re
import subprocess
import time

import msgpack
import zstandard

import rltest
from rltest import case, f32, finish, write_stream

RLCAT = os.path.join(rltest.BIN, "rl-cat")
WORKERS = max(2, 2 * (os.cpu_count() or 1))
T0 = time.time()


def small_records(n, start=0):
    return [{"id": i, "group": i // 3, "ids": [i, 2 * i + 1], "logp": [f32(-0.5 - i / 64), -1.0],
             "text": "r%d" % i, "reward": float(i % 2)} for i in range(start, start + n)]


def spawn(data):
    p = subprocess.run([RLCAT, "--json"], input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def spawn_all(inputs):
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as ex:
        return list(ex.map(spawn, inputs))


def is_record(o):
    return isinstance(o, dict) and "rlpipe" not in o and "rlpipe_end" not in o


def recoverable(data):
    """Records a reference decoder recovers from (possibly cut) bytes: zstd frames decoded
    one by one with decompressobj (a cut frame gives what it can), raw msgpack as is, then
    the complete msgpack objects that are data records."""
    raw = rltest.decompress(data, allow_cut=True)
    up = msgpack.Unpacker(raw=False)
    up.feed(raw)
    return sum(1 for o in up if is_record(o))


def frames(data):
    out, pos = [], 0
    while pos < len(data) and data[pos:pos + 4] == rltest.ZSTD_MAGIC:
        d = zstandard.ZstdDecompressor().decompressobj()
        content = d.decompress(data[pos:])
        end = len(data) - len(d.unused_data)
        up = msgpack.Unpacker(raw=False)
        up.feed(content)
        out.append((pos, end, sum(1 for o in up if is_record(o))))
        pos = end
    return out


def expected_lines(data, records):
    """rl-cat --json of the whole stream, checked against the records; returns its lines."""
    rc, out, err = spawn(data)
    assert rc == 0, f"rl-cat --json of the uncut stream exited {rc}: {err.strip()}"
    lines = out.splitlines(keepends=True)
    got = [json.loads(x) for x in lines]
    assert len(got) == len(records), f"{len(got)} records from the uncut stream, expected {len(records)}"
    for g, r in zip(got, records):
        assert [f32(x) for x in g["logp"]] == r["logp"] and {**g, "logp": r["logp"]} == r, f"{g} != {r}"
    return lines


def count_phrase_ok(err, k):
    return bool(re.search(rf"\b{k} complete records? before it", err)) or (k == 0 and "no complete record before it" in err)


class Sweep:
    """Runs rl-cat --json on every cut data[:off], off = 0..len-1."""

    def __init__(self, name, data, records, valid_cuts=()):
        self.name, self.data, self.records = name, data, records
        self.valid = {off: n for off, n in valid_cuts}   # cuts that leave a complete stream: off -> records
        self.lines = expected_lines(data, records)
        t = time.time()
        self.results = spawn_all([data[:off] for off in range(len(data))])
        self.seconds = time.time() - t
        self.ref = [recoverable(data[:off]) for off in range(len(data))]

    def report(self, what, bad, total):
        print(f"# {self.name}: {what}: {len(bad)} of {total} cuts"
              + (f" (first: {bad[:5]})" if bad else ""), flush=True)

    def check_detected(self):
        undetected, wrong = [], []
        for off, (rc, out, err) in enumerate(self.results):
            if off in self.valid:
                if rc != 0:
                    wrong.append((off, f"exit {rc} on a cut that leaves a complete member: {err.strip()[:160]}"))
                continue
            want = "empty input" if off == 0 else "truncated stream"
            if rc == 0:
                undetected.append(off)
            elif rc != 1 or want not in err:
                wrong.append((off, f"exit {rc}, stderr {err.strip()[:200]!r}, expected exit 1 and {want!r}"))
        print(f"# {self.name}: {len(self.data)} bytes, {len(self.results)} cuts in {self.seconds:.1f} s, "
              f"{len(undetected)} undetected, {len(wrong)} misreported", flush=True)
        assert not undetected, f"{len(undetected)} undetected cuts (exit 0), at offsets {undetected[:10]}"
        assert not wrong, f"{len(wrong)} cuts misreported, e.g. {wrong[:3]}"

    def check_delivered(self):
        bad = []
        for off, (rc, out, err) in enumerate(self.results):
            k = self.valid.get(off, self.ref[off])
            if out != b"".join(self.lines[:k]):
                n = out.count(b"\n")
                prefix = out == b"".join(self.lines[:n])
                bad.append((off, f"{n} records{'' if prefix else ' (NOT a prefix of the originals)'}, "
                                 f"reference decoder recovers {k}"))
        self.report("delivered records differ from the recoverable ones", bad, len(self.results))
        assert not bad, f"{len(bad)} cuts deliver other records than the reference recovers, e.g. {bad[:3]}"

    def check_position(self):
        bad = []
        for off, (rc, out, err) in enumerate(self.results):
            if off == 0 or off in self.valid or rc != 1:
                continue
            k = out.count(b"\n")
            if not re.search(rf"record {k}\b", err) or not count_phrase_ok(err, k):
                bad.append((off, k, err.strip()[:200]))
        self.report("error does not name 'record K' and 'K complete records before it'", bad, len(self.results))
        assert not bad, f"{len(bad)} messages do not name the first record not delivered, e.g. {bad[:3]}"


# ---------------------------------------------------------------------------
# Cuts

RECS = small_records(30)
COMPRESSED = write_stream(RECS, frame_every=3)
RAW = write_stream(RECS, compress=False)
M1, M2 = small_records(16), small_records(14, start=16)
TWO = write_stream(M1, frame_every=3) + write_stream(M2, hdr=rltest.header(part=2), frame_every=4)
MIXED = write_stream(M1, frame_every=5) + write_stream(M2, compress=False)

assert rltest.zstd_frames(COMPRESSED) >= 10 and len(COMPRESSED) < 8192


def sweep_cases(name, make):
    state = {}

    def get():
        if "s" not in state:
            state["s"] = make()
        return state["s"]

    def detected():
        get().check_detected()

    def delivered():
        get().check_delivered()

    def position():
        get().check_position()
    detected.__name__ = f"{name}_cut_at_every_byte_is_reported_as_truncated"
    delivered.__name__ = f"{name}_cut_delivers_exactly_the_records_a_reference_decoder_recovers"
    position.__name__ = f"{name}_cut_error_names_the_first_record_not_delivered"
    for f in (detected, delivered, position):
        case(f)


sweep_cases("compressed_multi_frame_stream", lambda: Sweep("compressed, 30 records, 3 objects a frame", COMPRESSED, RECS))
sweep_cases("raw_stream", lambda: Sweep("raw msgpack, 30 records", RAW, RECS))
sweep_cases("two_member_compressed_file", lambda: Sweep(
    "2 compressed members", TWO, M1 + M2, valid_cuts=[(len(write_stream(M1, frame_every=3)), len(M1))]))
sweep_cases("compressed_then_raw_member_file", lambda: Sweep(
    "compressed + raw member", MIXED, M1 + M2, valid_cuts=[(len(write_stream(M1, frame_every=5)), len(M1))]))


# ---------------------------------------------------------------------------
# Corruption: one byte flipped inside the payload of a frame

def reference_decode(data):
    """All decompressed bytes of a stream of zstd frames, or None if python-zstandard finds an error."""
    raw, pos = b"", 0
    try:
        while pos < len(data):
            d = zstandard.ZstdDecompressor().decompressobj()
            raw += d.decompress(data[pos:])
            if not d.eof:
                return None
            pos = len(data) - len(d.unused_data)
    except zstandard.ZstdError:
        return None
    return raw


class Flips:
    """Every flip whose frame the reference decoder rejects must be an error; a flip the
    reference decodes to the very same bytes (a bit zstd does not use) changes nothing
    and must read as the original stream."""

    def __init__(self, data, records, which):
        self.lines = expected_lines(data, records)
        fr = frames(data)
        self.jobs = []   # (frame index, offset, mask, records in the frames before)
        for fi in which:
            s, e, _ = fr[fi]
            before = sum(n for _, _, n in fr[:fi])
            for off in range(s + zstandard.frame_header_size(data[s:e]), e):
                for mask in (0xff, 0x01):
                    self.jobs.append((fi, off, mask, before))
        inputs = []
        for fi, off, mask, before in self.jobs:
            b = bytearray(data)
            b[off] ^= mask
            inputs.append(bytes(b))
        clean = reference_decode(data)
        self.null = [reference_decode(b) == clean for b in inputs]   # flips without effect
        t = time.time()
        self.results = spawn_all(inputs)
        self.seconds = time.time() - t
        kinds = {}
        for rc, out, err in self.results:
            m = re.search(r"error: ([a-z ]+)", err)
            k = m.group(1).strip() if m else f"exit {rc}, no error message"
            kinds[k] = kinds.get(k, 0) + 1
        garbage = sum(1 for (rc, out, err) in self.results
                      if out != b"".join(self.lines[:out.count(b"\n")]))
        print(f"# corruption: {len(self.jobs)} flips in frames {list(which)} of {len(fr)}, {self.seconds:.1f} s, "
              f"{sum(self.null)} without effect on the decoded bytes (reference decoder); "
              f"errors: {kinds}; outputs that are not a prefix of the originals: {garbage}", flush=True)


FLIPS = {}


def flips():
    if "f" not in FLIPS:
        n = len(frames(COMPRESSED))
        FLIPS["f"] = Flips(COMPRESSED, RECS, (0, 1, n // 2, n - 1))
    return FLIPS["f"]


@case
def flipped_byte_in_a_frame_payload_is_an_error_never_success_never_a_crash():
    f = flips()
    crashed = [(j[:3], rc) for j, (rc, _, _) in zip(f.jobs, f.results) if rc < 0]
    passed = [j[:3] for j, (rc, _, _), null in zip(f.jobs, f.results, f.null) if rc == 0 and not null]
    other = [(j[:3], rc, err.strip()[:160]) for j, (rc, _, err), null in zip(f.jobs, f.results, f.null)
             if not null and (rc > 1 or (rc == 1 and "rl-cat: error: " not in err))]
    assert not crashed, f"{len(crashed)} flips crash rl-cat (signal), e.g. (frame, offset, mask), rc: {crashed[:5]}"
    assert not passed, f"{len(passed)} flips go undetected (exit 0), e.g. (frame, offset, mask): {passed[:5]}"
    assert not other, f"{len(other)} flips exit with another status or no error message, e.g. {other[:3]}"


@case
def flipped_byte_without_effect_on_the_decoded_bytes_reads_as_the_original():
    f = flips()
    bad = [(j[:3], rc, err.strip()[:160]) for j, (rc, out, err), null in zip(f.jobs, f.results, f.null)
           if null and (rc != 0 or out != b"".join(f.lines))]
    assert not bad, f"{len(bad)} flips that the reference decoder ignores are not read as the original, e.g. {bad[:3]}"


@case
def flipped_byte_keeps_every_record_of_the_frames_before():
    f = flips()
    bad = [(j[:3], out.count(b"\n"), j[3]) for j, (rc, out, err) in zip(f.jobs, f.results)
           if not out.startswith(b"".join(f.lines[:j[3]]))]
    assert not bad, f"{len(bad)} flips lose records of earlier frames, e.g. ((frame, offset, mask), got, expected): {bad[:5]}"


@case
def corrupt_stream_error_delivers_no_record_of_the_corrupt_frame():
    f = flips()
    n_corrupt = 0
    bad = []
    for j, (rc, out, err) in zip(f.jobs, f.results):
        if "corrupt stream" not in err:
            continue
        n_corrupt += 1
        if out != b"".join(f.lines[:j[3]]):
            bad.append((j[:3], out.count(b"\n"), j[3]))
    assert n_corrupt > len(f.jobs) // 2, f"only {n_corrupt} of {len(f.jobs)} flips reported as 'corrupt stream'"
    assert not bad, f"{len(bad)} 'corrupt stream' errors deliver records of the corrupt frame, " \
                    f"e.g. ((frame, offset, mask), delivered, records before the frame): {bad[:5]}"


@case
def corrupt_stream_error_names_the_first_record_not_delivered():
    f = flips()
    bad = []
    for j, (rc, out, err) in zip(f.jobs, f.results):
        if "corrupt stream" in err:
            k = out.count(b"\n")
            if not re.search(rf"record {k}\b", err):
                bad.append((j[:3], k, err.strip()[:200]))
    assert not bad, f"{len(bad)} messages do not name 'record K' (K delivered), e.g. {bad[:3]}"


print(f"# total {time.time() - T0:.1f} s", flush=True)
finish()
