#!/bin/bash
# rl-cat on bad input and bad usage: every data error is one clear line
# "rl-cat: error: <what>: <file> record <N>" with exit status 1, after the
# complete records before the damage have been written; usage errors exit 2.
# (Contract: man/rl-cat.1 "Errors"; doc/design.md §2 and §7.)
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py

# ASan reserves terabytes of address space: there the no-allocation checks rely on time alone.
asan=0
grep -qa __asan_init "$RLPIPE_BIN/rl-cat" 2>/dev/null && asan=1

# limited COMMAND...: at most 5 s and (without ASan) 1 GB of address space.
limited() {
    if [ "$asan" = 1 ]; then timeout 5 "$@"; else (ulimit -v 1000000; exec timeout 5 "$@"); fi
}
# from FILE COMMAND...: COMMAND with FILE on stdin through a pipe.
from() { local f=$1; shift; cat "$f" | "$@"; }
# check NAME WHY TEST...: passes if TEST succeeds (usually on out/err of the last expect).
lines() { [ "$(wc -l <"$1")" -eq "$2" ]; }
# records FILE: how many data records a (possibly cut) stream holds, by the reference decoder.
records() {
    "$PY" - "$1" <<'EOF'
import sys, msgpack, zstandard
data = open(sys.argv[1], "rb").read()
raw, pos = b"", 0
try:
    while pos < len(data):
        if data[pos:pos + 4] != b"\x28\xb5\x2f\xfd":
            raw += data[pos:]
            break
        d = zstandard.ZstdDecompressor().decompressobj()
        raw += d.decompress(data[pos:])
        pos = len(data) - len(d.unused_data)
except zstandard.ZstdError:
    pass
up = msgpack.Unpacker(raw=False, strict_map_key=False)
up.feed(raw)
n = 0
try:
    for o in up:
        n += isinstance(o, dict) and "rlpipe" not in o and "rlpipe_end" not in o
except Exception:
    pass
print(n)
EOF
}

# ---- inputs -------------------------------------------------------------------------
"$PY" - <<'EOF' || { fail setup "could not write the inputs"; finish; }
import gzip, json, msgpack, zstandard
from rltest import *

def put(name, data):
    with open(name, "wb") as f:
        f.write(data)

def frames(objs):  # one zstd frame per object, as a flushing writer makes them
    c = zstandard.ZstdCompressor(write_checksum=True)
    return [c.compress(o) for o in objs]

H = pack_record(header())
R = [pack_record(rollout(i)) for i in range(3)]
def trailer(n): return msgpack.packb({"rlpipe_end": 1, "count": n})
def member_with(bad):  # three good records, then `bad` as record 3
    return b"".join(frames([H, *R, bad, trailer(4)]))

put("empty.rlr", b"")
put("good.rlr", write_stream([rollout(i) for i in range(5)], frame_every=1))
put("text.txt", b"hello, world\nthis is a text file\n")
put("lines.jsonl", b"".join(json.dumps(rollout(i)).encode() + b"\n" for i in range(3)))
put("other.mp", msgpack.packb({"format": "other", "version": 1}) + msgpack.packb({"id": 1}))
put("other.zst", zstandard.ZstdCompressor().compress(msgpack.packb({"format": "other", "id": 1})))
put("hello.gz", gzip.compress(b"hello\n"))
put("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + bytes(17))
put("v2.rlr", write_stream([rollout(0)], hdr={"rlpipe": 2, "kind": "rollouts"}))

put("array.rlr", member_with(msgpack.packb([1, 2, 3])))
# {"ids": array32 declaring 2^32-1 elements}, nothing after it
huge_array = b"\x81\xa3ids\xdd\xff\xff\xff\xff"
put("hugearray.rlr", member_with(huge_array))
put("hugearray.mp", H + b"".join(R) + huge_array)
put("hugemap.rlr", member_with(b"\xdf\xff\xff\xff\xff"))
put("longstr.rlr", member_with(pack_record({"id": 3, "text": "x" * 200})))
# {"id": 3, "text": str32 declaring 4 GB}
put("hugestr.rlr", member_with(b"\x82\xa2id\x03\xa4text\xdb\xff\xff\xff\xff"))
put("bigrecord.rlr", member_with(pack_record({"id": 3, "ids": list(range(100000, 100500))})))
put("intkey.rlr", member_with(msgpack.packb({"id": 3, 7: "seven"})))
put("badutf8.rlr", member_with(b"\x82\xa2id\x03\xa4text\xa2\xff\xfe"))
put("deep.rlr", member_with(b"\x82\xa2id\x03\xa1x" + b"\x91" * 10000 + b"\xc0"))
put("bin.rlr", member_with(pack_record({"id": 3, "blob": b"\x00\x01"})))

put("mismatch.rlr", b"".join(frames([H, *R, trailer(5)])))
put("notrailer.rlr", b"".join(frames([H, *R])))
f = frames([H, *R, pack_record(rollout(3)), trailer(4)])
put("midframe.rlr", b"".join(f[:4]) + f[4][:len(f[4]) // 2])
raw = member_bytes([rollout(i) for i in range(4)])
put("midobject.mp", b"".join(raw[:4]) + raw[4][:len(raw[4]) // 2])
bad = bytearray(f[4]); bad[-1] ^= 0xFF            # last 4 bytes of a frame: its content checksum
put("checksum.rlr", b"".join(f[:4]) + bytes(bad) + f[5])
EOF
mkdir adir

# ---- inputs that are not record streams --------------------------------------------
expect "empty file: 'empty input' naming the file" 1 '^rl-cat: error: empty input.*: empty\.rlr' -- rl-cat empty.rlr
expect "empty stdin (redirected file): 'empty input' naming stdin" 1 '^rl-cat: error: empty input.*stdin' -- rl-cat - <empty.rlr
expect "empty stdin (pipe): 'empty input' naming stdin" 1 '^rl-cat: error: empty input.*stdin' -- from empty.rlr rl-cat
expect "text file: not an rlpipe stream" 1 '^rl-cat: error: not an rlpipe stream:.*: text\.txt' -- rl-cat text.txt
expect "JSON lines: not an rlpipe stream, hint --pack" 1 '^rl-cat: error: not an rlpipe stream:.*--pack.*: lines\.jsonl' -- rl-cat lines.jsonl
expect "JSON lines on stdin: hint --pack" 1 '^rl-cat: error: not an rlpipe stream:.*--pack.*stdin' -- from lines.jsonl rl-cat
expect "msgpack map without \"rlpipe\": not an rlpipe stream" 1 '^rl-cat: error: not an rlpipe stream:.*: other\.mp' -- rl-cat other.mp
expect "zstd of a map without \"rlpipe\": not an rlpipe stream" 1 '^rl-cat: error: not an rlpipe stream:.*: other\.zst' -- rl-cat other.zst
expect "gzip file: not an rlpipe stream" 1 '^rl-cat: error: not an rlpipe stream:.*: hello\.gz' -- rl-cat hello.gz
expect "PNG file: not an rlpipe stream" 1 '^rl-cat: error: not an rlpipe stream:.*: image\.png' -- rl-cat image.png
expect "header \"rlpipe\": 2: unsupported version" 1 '^rl-cat: error: .*(version|rlpipe).*2.*: v2\.rlr' -- rl-cat v2.rlr
expect "nonexistent file: strerror" 1 '^rl-cat: error: .*nope\.rlr.*No such file or directory' -- rl-cat nope.rlr
expect "nonexistent second file: strerror" 1 '^rl-cat: error: .*nope\.rlr.*No such file or directory' -- rl-cat good.rlr nope.rlr
expect "directory: error naming it" 1 '^rl-cat: error: .*adir.*[Dd]irectory' -- rl-cat adir

# ---- bad records (three good records, then the bad one as record 3) -----------------
expect "record that is an array: 'record is a array, not a map'" 1 \
    '^rl-cat: error: record is an? array, not a map.*: array\.rlr record 3' -- rl-cat --json array.rlr
check "record that is an array: the 3 records before it are written" "stdout: $(head -c 300 out)" lines out 3
rl-cat array.rlr >part.rlr 2>/dev/null
check "record that is an array: records before it are written as records too" \
    "$(records part.rlr) records in the output, expected 3" [ "$(records part.rlr)" = 3 ]

expect "array declaring 2^32-1 elements: element limit, fast, no allocation" 1 \
    '^rl-cat: error: .*exceeds the limit of 16777216 elements.*: hugearray\.rlr record 3' -- limited rl-cat --json hugearray.rlr
check "array declaring 2^32-1 elements: the 3 records before it are written" "stdout: $(head -c 300 out)" lines out 3
expect "array declaring 2^32-1 elements, raw msgpack on a pipe: element limit" 1 \
    '^rl-cat: error: .*exceeds the limit of 16777216 elements.*stdin.* record 3' -- limited bash -c 'cat hugearray.mp | rl-cat --json'
expect "array declaring 2^32-1 elements with --max-array raised: record limit, no allocation" 1 \
    '^rl-cat: error: .*record limit.*: hugearray\.rlr record 3' -- limited rl-cat --max-array 4294967295 -q --json hugearray.rlr
expect "map declaring 2^32-1 entries: element limit, no allocation" 1 \
    '^rl-cat: error: .*exceeds the limit of 16777216 elements.*: hugemap\.rlr record 3' -- limited rl-cat hugemap.rlr
expect "--max-array 2 with 8-token records: element limit naming 2" 1 \
    '^rl-cat: error: .*exceeds the limit of 2 elements.*: good\.rlr record 0' -- rl-cat --max-array 2 good.rlr
expect "200-byte string with --max-string 100: string limit" 1 \
    '^rl-cat: error: .*exceeds the string limit of 100 bytes.*: longstr\.rlr record 3' -- rl-cat --max-string 100 --json longstr.rlr
check "200-byte string with --max-string 100: the 3 records before it are written" "stdout: $(head -c 300 out)" lines out 3
expect "str32 declaring 4 GB: string limit, fast, no allocation" 1 \
    '^rl-cat: error: .*exceeds the string limit of 67108864 bytes.*: hugestr\.rlr record 3' -- limited rl-cat hugestr.rlr
expect "record over --max-record 1000: record limit naming 1000" 1 \
    '^rl-cat: error: .*record limit.*1000.*: bigrecord\.rlr record 3' -- rl-cat --max-record 1000 --json bigrecord.rlr
check "record over --max-record: the 3 records before it are written" "stdout: $(head -c 300 out)" lines out 3
expect "map key that is an integer: key is not a string" 1 \
    '^rl-cat: error: .*key.*not a string.*: intkey\.rlr record 3' -- rl-cat --json intkey.rlr
check "map key that is an integer: the 3 records before it are written" "stdout: $(head -c 300 out)" lines out 3
expect "invalid UTF-8 in a string: says UTF-8" 1 '^rl-cat: error: .*UTF-8.*: badutf8\.rlr record 3' -- rl-cat badutf8.rlr
expect "10000 nested arrays: nesting too deep, no crash" 1 '^rl-cat: error: .*(nest|deep|depth).*: deep\.rlr record 3' -- limited rl-cat deep.rlr
expect "--json of a bin value: error naming the record" 1 '^rl-cat: error: .*bin.*bin\.rlr record 3' -- rl-cat --json bin.rlr
check "--json of a bin value: the 3 records before it are written" "stdout: $(head -c 300 out)" lines out 3
expect "bin value without --json: passes through" 0 '' -- rl-cat -q bin.rlr -o bin-copy.rlr

# ---- damaged members ----------------------------------------------------------------
expect "trailer count mismatch" 1 '^rl-cat: error: trailer count mismatch.*: mismatch\.rlr' -- rl-cat --json mismatch.rlr
check "trailer count mismatch: the 3 records are written" "stdout: $(head -c 300 out)" lines out 3
expect "member without trailer: truncated stream, 3 complete records" 1 \
    '^rl-cat: error: truncated stream:.*\(3 complete records before it\).*: notrailer\.rlr record 3' -- rl-cat --json notrailer.rlr
check "member without trailer: the 3 records are written" "stdout: $(head -c 300 out)" lines out 3
expect "stream cut mid zstd frame: truncated stream, 3 complete records" 1 \
    '^rl-cat: error: truncated stream:.*\(3 complete records before it\).*: midframe\.rlr record 3' -- rl-cat --json midframe.rlr
check "stream cut mid zstd frame: the 3 records are written" "stdout: $(head -c 300 out)" lines out 3
expect "raw msgpack cut mid object on a pipe: truncated stream, 3 complete records" 1 \
    '^rl-cat: error: truncated stream:.*\(3 complete records before it\).*stdin.*record 3' -- from midobject.mp rl-cat --json
check "raw msgpack cut mid object: the 3 records are written" "stdout: $(head -c 300 out)" lines out 3
expect "bad zstd content checksum: corrupt stream" 1 '^rl-cat: error: corrupt stream:.*: checksum\.rlr' -- rl-cat --json checksum.rlr
check "bad zstd content checksum: the records of the good frames before it are written" \
    "stdout: $(head -c 300 out)" [ "$(wc -l <out)" -ge 3 ]
cat notrailer.rlr good.rlr >header-inside.rlr
expect "header inside a member (cat truncated good): truncated stream, 3 complete records" 1 \
    '^rl-cat: error: truncated stream:.*3 complete records before it.*: header-inside\.rlr record 3' -- rl-cat --json header-inside.rlr
check "header inside a member: the 3 records before it are written" "stdout: $(head -c 300 out)" lines out 3
expect "good file then a truncated one: error names the second file" 1 \
    '^rl-cat: error: truncated stream:.*: notrailer\.rlr record 3' -- rl-cat --json good.rlr notrailer.rlr
check "good file then a truncated one: all 8 complete records are written" "stdout: $(head -c 300 out)" lines out 8

# ---- usage errors (exit 2) ----------------------------------------------------------
expect "unknown option: usage error naming it" 2 'bogus' -- rl-cat --bogus good.rlr
check "unknown option: nothing on stdout" "stdout: $(head -c 100 out)" [ ! -s out ]
expect "--head without a number: usage error" 2 'head' -- rl-cat good.rlr --head
expect "--head -1: usage error" 2 'head' -- rl-cat --head -1 good.rlr
expect "--head abc: usage error" 2 'head' -- rl-cat --head abc good.rlr
expect "--kind bogus: usage error" 2 '(kind|bogus)' -- rl-cat --pack --kind bogus lines.jsonl
expect "--level 99: usage error" 2 'level' -- rl-cat --level 99 good.rlr
expect "--level 0: usage error" 2 'level' -- rl-cat --level 0 good.rlr
expect "--max-string abc: usage error" 2 'max-string' -- rl-cat --max-string abc good.rlr
expect "--json with -u: not an error (-u only matters for record output)" 0 '' -- rl-cat --json -u -q good.rlr
check "--json with -u: JSON lines on stdout" "stdout: $(head -c 200 out)" grep -q '^{"id": *0' out
expect "--help: exit 0" 0 '' -- rl-cat --help
check "--help: usage on stdout" "stdout: $(head -c 200 out)" grep -qiE '^usage: *rl-cat' out
check "--help: lists the options" "stdout lacks --pack/--json/--check" \
    eval "grep -q -- --pack out && grep -q -- --json out && grep -q -- --check out"
check "--help: stderr empty" "stderr: $(head -c 200 err)" [ ! -s err ]
expect "--version: exit 0" 0 '' -- rl-cat --version
check "--version: first line 'rl-cat (rlpipe) 0.1.0'" "stdout: $(head -c 200 out)" \
    eval '[ "$(head -n 1 out)" = "rl-cat (rlpipe) 0.1.0" ]'
check "--version: library versions follow" "stdout: $(head -c 200 out)" grep -qi zstd out
expect "-V: same as --version" 0 '' -- rl-cat -V
check "-V: first line 'rl-cat (rlpipe) 0.1.0'" "stdout: $(head -c 200 out)" \
    eval '[ "$(head -n 1 out)" = "rl-cat (rlpipe) 0.1.0" ]'

finish
