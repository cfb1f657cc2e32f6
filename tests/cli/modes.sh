#!/bin/bash
# rl-cat's modes: concatenate (default), --check, --stats, --json, --pack, --head,
# -o; what the output member holds; records flow through a pipe without delay.
# (Contract: man/rl-cat.1; doc/design.md §2 and §7.)
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py
cat_bin="$RLPIPE_BIN/rl-cat"

# check NAME WHY TEST...: passes if TEST succeeds.
# pycheck (lib.sh): rltest is importable.
# member FILE N: FILE is one member of N records whose trailer says N (reference reader).
member() {
    "$PY" -c 'import sys; from rltest import read_stream
m = read_stream(open(sys.argv[1], "rb").read())
assert len(m) == 1 and len(m[0][1]) == int(sys.argv[2]) == m[0][2]["count"]' "$1" "$2" 2>/dev/null
}

"$PY" - <<'EOF' || { fail setup "could not write the inputs"; finish; }
import json, msgpack
from rltest import *
def put(name, data):
    with open(name, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
def jsonl(objs): return "".join(json.dumps(o) + "\n" for o in objs)

put("good.rlr", write_stream([rollout(i) for i in range(5)], frame_every=1))
put("trunc.rlr", write_stream([rollout(i) for i in range(5)], frame_every=1)[:-30])
put("a.rlr", write_stream([rollout(i) for i in range(0, 3)], hdr=header(seed=1)))
put("b.rlr", write_stream([rollout(i) for i in range(3, 7)], hdr=header(seed=2), frame_every=2))
put("c.rlr", write_stream([rollout(i) for i in range(7, 12)], hdr=header(seed=3), compress=False))
ex = [{"prompt": "2+2", "completion": "4"}, {"prompt": "3+3", "completion": "6"}]
put("ex.rlr", write_stream(ex, hdr=header("examples")))
put("ex.jsonl", jsonl(ex))
put("good.jsonl", jsonl([rollout(i) for i in range(5)]))
put("blank.jsonl", "\n" + jsonl([rollout(0)]) + "\n  \n" + jsonl([rollout(1)]) + "\n")
put("withheader.jsonl", jsonl([{"rlpipe": 1, "kind": "prompts", "producer": "me", "seed": 7},
                               {"prompt": "a"}, {"prompt": "b"}, {"rlpipe_end": 1, "count": 2}]))
put("badcount.jsonl", jsonl([{"rlpipe": 1, "kind": "prompts"}, {"prompt": "a"}, {"prompt": "b"},
                             {"rlpipe_end": 1, "count": 3}]))
# a known field of the wrong type (line numbers are 1-based lines of the file, blank ones included)
put("wrong1.jsonl", jsonl([rollout(0), {"id": 1, "ids": "abc"}]))
put("wrong2.jsonl", jsonl([rollout(0)]) + "\n" + jsonl([{"id": 1, "logp": [1.5, "x"]}]))
put("wrong3.jsonl", jsonl([rollout(0), {"id": -1}]))
put("wrong4.jsonl", jsonl([rollout(0), {"id": 1, "mask": [0, 1, 2]}]))
put("wrong5.jsonl", jsonl([rollout(0), {"id": 1, "reward": "high"}]))
put("badjson1.jsonl", jsonl([rollout(0)]) + '{"id": 1, "ids": [1, 2\n')
put("badjson2.jsonl", jsonl([rollout(0)]) + "[1, 2, 3]\n")

# JSON -> records -> JSON: known and unknown keys, odd numbers, unicode, empty arrays
rt = [rollout(i) for i in range(4)]
rt[0].update({"meta": {"tags": ["a", "b"], "n": 3, "x": 2.5, "ok": True, "none": None},
              "score": 0.1, "two": 2.0, "tiny": 5e-324, "huge": 1.7976931348623157e308,
              "negzero": -0.0, "big": 2**64 - 1, "neg": -2**63, "adv": -0.25})
rt[1].update({"reward": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
              "text": "tab\tquote\"backslash\\ newline\n \u2028 \U0001f600 \x01"})
rt[2].update({"ids": [], "logp": [], "ver": [], "prompt_ids": [0, 4294967295]})
rt[3].update({"logp": [f32(x) for x in (-1e-8, -123.456, -3.4e38, -0.1)], "ids": [1, 2, 3, 4],
              "ver": [0, 1, 2, 3], "logp_learner": [-0.5, -1.5, -2.5, -3.5], "w": [1.0, 2.0, 0.75, 1.25],
              "mask": [1, 0, 1, 1], "ver_learner": 4, "top_k": 40, "temperature": 0.7})
put("rt.jsonl", jsonl(rt))

# a record with non-canonical msgpack encodings: passes through byte for byte
odd = (b"\x83" + b"\xa2id" + b"\xcf" + (5).to_bytes(8, "big")        # uint64 for 5
       + b"\xd9\x05extra" + b"\xcb" + bytes.fromhex("3ff8000000000000")  # str8 key, float64 1.5
       + b"\xa4list" + b"\xdc\x00\x02\xd0\x01\xcc\x02")                 # array16 of int8 1, uint8 2
put("odd.mp", pack_record(header()) + odd + msgpack.packb({"rlpipe_end": 1, "count": 1}))
put("odd.bytes", odd)
EOF

# ---- --check ------------------------------------------------------------------------
expect "--check on a valid file: exit 0, 'ok' summary" 0 '^rl-cat: ok: 5 records in 1 member' -- rl-cat --check good.rlr
check "--check on a valid file: nothing on stdout" "stdout: $(head -c 100 out)" [ ! -s out ]
expect "--check -q: exit 0" 0 '' -- rl-cat --check -q good.rlr
check "--check -q: no summary, nothing at all" "stderr: $(head -c 200 err); stdout $(wc -c <out) bytes" \
    eval '[ ! -s err ] && [ ! -s out ]'
expect "--check of 3 files: counts records, members and files" 0 '^rl-cat: ok: 12 records in 3 members, 3 files' \
    -- rl-cat --check a.rlr b.rlr c.rlr
expect "--check on a truncated file: exit 1, truncated stream" 1 '^rl-cat: error: truncated stream:.*: trunc\.rlr record' \
    -- rl-cat --check trunc.rlr
check "--check on a truncated file: nothing on stdout" "stdout: $(head -c 100 out)" [ ! -s out ]
expect "--check reads every input: a bad last one fails" 1 'trunc\.rlr' -- rl-cat --check good.rlr trunc.rlr

# ---- concatenation ------------------------------------------------------------------
expect "3 files: exit 0 with a summary line" 0 '^rl-cat: 12 records, 3 members, 3 files' -- rl-cat a.rlr b.rlr c.rlr
cp out abc.rlr
pycheck "3 files: one member, its records in order, trailer count 12, header of the first" <<'EOF'
from rltest import *
[(h, recs, t)] = read_stream(open("abc.rlr", "rb").read())
assert t == {"rlpipe_end": 1, "count": 12}, t
assert recs == [rollout(i) for i in range(12)], "records differ"
assert h == header(seed=1), h
EOF
expect "--stats --json of the concatenation: 12 records, 1 member" 0 '' -- rl-cat --stats --json abc.rlr
pycheck "--stats --json of the concatenation: 12 records, 1 member" <<'EOF'
import json
s = json.load(open("out"))
assert s["records"] == 12 and s["members"] == 1, s
EOF
cat a.rlr b.rlr c.rlr >multi.rlr
expect "3 members on stdin: exit 0" 0 '' -- rl-cat -q - <multi.rlr
check "3 members on stdin: one member of 12 records" "not one 12-record member" member out 12
expect "-u: exit 0" 0 '' -- rl-cat -u -q a.rlr
pycheck "-u: raw msgpack (a map first, no zstd), one member of 3 records" <<'EOF'
from rltest import *
data = open("out", "rb").read()
assert data[:4] != ZSTD_MAGIC and (data[0] & 0xF0 == 0x80 or data[0] in (0xDE, 0xDF)), data[:8]
[(h, recs, t)] = read_stream(data)
assert recs == [rollout(i) for i in range(3)] and t["count"] == 3
EOF
expect "records pass through byte for byte (odd encodings kept)" 0 '' -- rl-cat -u -q odd.mp
check "records pass through byte for byte (odd encodings kept)" "the record bytes changed" \
    "$PY" -c 'import sys; sys.exit(open("odd.bytes","rb").read() not in open("out","rb").read())'
expect "--frame 2: exit 0" 0 '' -- rl-cat -q --frame 2 good.rlr
pycheck "--frame 2: at least 3 zstd frames, each with a content checksum" <<'EOF'
from rltest import *
data = open("out", "rb").read()
assert zstd_frames(data) >= 3, zstd_frames(data)
import zstandard
pos = 0
while pos < len(data):
    assert data[pos + 4] & 0x04, f"frame at byte {pos} has no content checksum"
    d = zstandard.ZstdDecompressor().decompressobj(); d.decompress(data[pos:])
    pos = len(data) - len(d.unused_data)
assert len(read_stream(data)[0][1]) == 5
EOF
expect "--level 19: exit 0, same records" 0 '' -- rl-cat -q --level 19 good.rlr
check "--level 19: same records" "not one 5-record member" member out 5
expect "inputs of another kind than the first: error naming the kind" 1 '^rl-cat: error: .*kind.*ex\.rlr' -- rl-cat good.rlr ex.rlr

# ---- -o -----------------------------------------------------------------------------
expect "-o FILE: exit 0" 0 '' -- rl-cat -q a.rlr -o o.rlr
check "-o FILE: nothing on stdout" "stdout: $(wc -c <out) bytes" [ ! -s out ]
check "-o FILE: FILE holds the member" "o.rlr is not a 3-record member" member o.rlr 3
expect "--output=FILE: exit 0" 0 '' -- rl-cat -q --output=o2.rlr a.rlr
check "--output=FILE: FILE holds the member" "o2.rlr is not a 3-record member" member o2.rlr 3
# same_file NAME IN OUT: writing onto an input is refused (exit 1 or 2, a message) and the input is intact.
same_file() {
    local name=$1 in=$2 outf=$3 rc
    cp a.rlr same.rlr
    rl-cat "$in" -o "$outf" >out 2>err
    rc=$?
    if [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ]; then fail "$name" "exit status $rc, expected 1 or 2"
    elif ! grep -q '^rl-cat: ' err; then fail "$name" "no message; stderr: $(head -c 200 err)"
    elif ! cmp -s same.rlr a.rlr; then fail "$name" "the input was changed"
    else pass "$name"; fi
}
same_file "-o onto the input (rl-cat same.rlr -o same.rlr): refused, input intact" same.rlr same.rlr
same_file "-o onto the input by another path (./same.rlr): refused, input intact" same.rlr ./same.rlr
ln -f same.rlr link.rlr
same_file "-o onto a hard link of the input: refused, input intact" same.rlr link.rlr

# ---- --head -------------------------------------------------------------------------
expect "--head 2: exit 0" 0 '' -- rl-cat -q --head 2 good.rlr
check "--head 2: a complete member of 2 records (trailer count 2)" "not one 2-record member" member out 2
expect "--head 0: exit 0" 0 '' -- rl-cat -q --head 0 good.rlr
check "--head 0: a complete member of 0 records" "not one 0-record member" member out 0
expect "--head 7 across files: exit 0" 0 '' -- rl-cat -q --head 7 a.rlr b.rlr c.rlr
check "--head 7 across files: one member of 7 records" "not one 7-record member" member out 7
expect "--head 2 --json: 2 lines" 0 '' -- rl-cat --head 2 --json good.rlr
check "--head 2 --json: 2 lines" "$(wc -l <out) lines" [ "$(wc -l <out)" -eq 2 ]

# ---- --pack -------------------------------------------------------------------------
expect "--pack: exit 0" 0 '' -- rl-cat --pack -q good.jsonl
cp out packed.rlr
pycheck "--pack: generated header (rollouts, producer rl-cat 0.1.0, argv, time) and the records" <<'EOF'
from rltest import *
[(h, recs, t)] = read_stream(open("packed.rlr", "rb").read())
assert h["rlpipe"] == 1 and h["kind"] == "rollouts" and h["producer"] == "rl-cat 0.1.0", h
assert isinstance(h["argv"], list) and h["time"].endswith("Z"), h
assert recs == [rollout(i) for i in range(5)] and t["count"] == 5
EOF
expect "--pack --kind examples: exit 0" 0 '' -- rl-cat --pack --kind examples -q ex.jsonl
pycheck "--pack --kind examples: the header kind is examples" <<'EOF'
from rltest import *
[(h, recs, t)] = read_stream(open("out", "rb").read())
assert h["kind"] == "examples", h
assert recs == [{"prompt": "2+2", "completion": "4"}, {"prompt": "3+3", "completion": "6"}], recs
EOF
expect "--pack -k prompts: exit 0" 0 '' -- rl-cat --pack -k prompts -q ex.jsonl
pycheck "--pack -k prompts: the header kind is prompts" <<'EOF'
from rltest import *
assert read_stream(open("out", "rb").read())[0][0]["kind"] == "prompts"
EOF
rl-cat --pack --no-provenance -q good.jsonl >np1.rlr 2>/dev/null
sleep 1.1
rl-cat --pack --no-provenance -q good.jsonl >np2.rlr 2>/dev/null
pycheck "--pack --no-provenance: no argv or time in the header" <<'EOF'
from rltest import *
[(h, recs, t)] = read_stream(open("np1.rlr", "rb").read())
assert "argv" not in h and "time" not in h, h
assert len(recs) == 5
EOF
check "--pack --no-provenance: two runs give identical bytes" "np1.rlr and np2.rlr differ" cmp -s np1.rlr np2.rlr
expect "--pack: blank lines are ignored" 0 '' -- rl-cat --pack -q blank.jsonl
check "--pack: blank lines are ignored" "not one 2-record member" member out 2
expect "--pack: a header line in the input is the header" 0 '' -- rl-cat --pack -q withheader.jsonl
pycheck "--pack: a header line in the input is the header" <<'EOF'
from rltest import *
[(h, recs, t)] = read_stream(open("out", "rb").read())
assert h == {"rlpipe": 1, "kind": "prompts", "producer": "me", "seed": 7}, h
assert recs == [{"prompt": "a"}, {"prompt": "b"}] and t["count"] == 2
EOF
expect "--pack: a trailer line with the wrong count: error naming the line" 1 \
    '^rl-cat: error: trailer count mismatch.*: badcount\.jsonl line 4' -- rl-cat --pack badcount.jsonl
expect "--pack: \"ids\": \"abc\" is an error naming file, line and field" 1 \
    '^rl-cat: error: .*\bids\b.*: wrong1\.jsonl line 2' -- rl-cat --pack wrong1.jsonl
expect "--pack: \"logp\": [1.5, \"x\"] is an error naming file, line (blank lines counted) and field" 1 \
    '^rl-cat: error: .*\blogp\b.*: wrong2\.jsonl line 3' -- rl-cat --pack wrong2.jsonl
expect "--pack: \"id\": -1 is an error naming file, line and field" 1 \
    '^rl-cat: error: .*\bid\b.*: wrong3\.jsonl line 2' -- rl-cat --pack wrong3.jsonl
expect "--pack: \"mask\": [0, 1, 2] is an error naming file, line and field" 1 \
    '^rl-cat: error: .*\bmask\b.*: wrong4\.jsonl line 2' -- rl-cat --pack wrong4.jsonl
expect "--pack: \"reward\": \"high\" is an error naming file, line and field" 1 \
    '^rl-cat: error: .*\breward\b.*: wrong5\.jsonl line 2' -- rl-cat --pack wrong5.jsonl
expect "--pack --json of a bad line 2: line 1 is still written" 1 'wrong1\.jsonl line 2' -- rl-cat --pack --json wrong1.jsonl
check "--pack --json of a bad line 2: line 1 is still written" "$(wc -l <out) lines on stdout" [ "$(wc -l <out)" -eq 1 ]
expect "--pack of invalid JSON: error naming the line" 1 '^rl-cat: error: .*: badjson1\.jsonl line 2' -- rl-cat --pack badjson1.jsonl
expect "--pack of a JSON array line: error naming the line" 1 '^rl-cat: error: .*: badjson2\.jsonl line 2' -- rl-cat --pack badjson2.jsonl
expect "--pack on stdin: exit 0" 0 '' -- rl-cat --pack -q - <good.jsonl
check "--pack on stdin: the 5 records" "not one 5-record member" member out 5

# ---- --json and the round trip ------------------------------------------------------
expect "--json: one line per record" 0 '' -- rl-cat --json -q good.rlr
check "--json: one line per record" "$(wc -l <out) lines" [ "$(wc -l <out)" -eq 5 ]
expect "--json --header: header first, trailer last" 0 '' -- rl-cat --json --header -q good.rlr
cp out hdr.jsonl
pycheck "--json --header: header first, trailer last" <<'EOF'
import json
from rltest import *
lines = [json.loads(l) for l in open("hdr.jsonl")]
assert lines[0] == header(), lines[0]
assert lines[-1] == {"rlpipe_end": 1, "count": 5}, lines[-1]
def f32s(r): return {k: [f32(x) for x in v] if k in F32_KEYS else v for k, v in r.items()}
assert [f32s(r) for r in lines[1:-1]] == [rollout(i) for i in range(5)], lines[1]
EOF
bash -o pipefail -c 'rl-cat -q --pack hdr.jsonl | rl-cat -q --json --header' >hdr2.jsonl 2>hdr2.err
check "--json --header | --pack | --json --header: same lines" "status or text differs: $(head -c 200 hdr2.err)" \
    cmp -s hdr.jsonl hdr2.jsonl
bash -o pipefail -c 'rl-cat -q --pack rt.jsonl | rl-cat -q --json' >rt.out 2>rt.err
check "rl-cat --pack rt.jsonl | rl-cat --json: exit 0" "$(head -c 300 rt.err)" [ ! -s rt.err ]
pycheck "JSON -> records -> JSON is the identity on values, types and key order" rt.jsonl rt.out <<'EOF'
import json, sys
from rltest import f32, F32_KEYS
src = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = [json.loads(l) for l in open(sys.argv[2])]
assert len(out) == len(src), f"{len(out)} lines back for {len(src)}"
def same(a, b, key, path):
    assert type(a) is type(b), f"{path}: {a!r} came back as {b!r}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} came back as {list(b)}"
        for k in a: same(a[k], b[k], k, f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: {a!r} came back as {b!r}"
        for i, (x, y) in enumerate(zip(a, b)): same(x, y, key, f"{path}[{i}]")
    elif isinstance(a, float):
        if key in F32_KEYS: a, b = f32(a), f32(b)   # float32 fields: the same float32
        assert repr(a) == repr(b), f"{path}: {a!r} came back as {b!r}"
    else:
        assert a == b, f"{path}: {a!r} came back as {b!r}"
for i, (a, b) in enumerate(zip(src, out)): same(a, b, None, f"line {i + 1}")
EOF
pycheck "--json number text: float32 fields shortest float32 form, floats with '.' or exponent" rt.out <<'EOF'
import json, sys
from rltest import f32, F32_KEYS
def shortest32(v):
    for p in range(1, 10):
        if f32(float("%.*g" % (p, v))) == v: return float("%.*g" % (p, v))
for n, line in enumerate(open(sys.argv[1]), 1):
    d = json.loads(line, parse_float=str, parse_constant=str)   # floats as their text
    def walk(x, key):
        if isinstance(x, dict):
            for k, v in x.items(): walk(v, k)
        elif isinstance(x, list):
            for v in x: walk(v, key)
        elif isinstance(x, str) and key not in ("prompt", "answer", "text", "finish", "dtype", "tags"):
            assert x in ("NaN", "Infinity", "-Infinity") or "." in x or "e" in x.lower(), f"line {n} {key}: {x}"
            if key in F32_KEYS and x not in ("NaN", "Infinity", "-Infinity"):
                assert float(x) == shortest32(f32(float(x))), f"line {n} {key}: {x} is not the shortest float32 form"
    walk(d, None)
EOF

# ---- --stats ------------------------------------------------------------------------
expect "--stats: exit 0" 0 '' -- rl-cat --stats good.rlr
check "--stats: a table row 'records 5'" "stdout: $(head -c 400 out)" grep -qE '^ *records[ :]+5( |$)' out
check "--stats: a table row 'accuracy 0.4'" "stdout: $(head -c 400 out)" grep -qE '^ *accuracy[ :]+0?\.40*( |$)' out
expect "--stats --json: exit 0" 0 '' -- rl-cat --stats --json good.rlr
pycheck "--stats --json: one object with the contract's keys and values" <<'EOF'
import json
s = json.load(open("out"))
want = {"records": 5, "members": 1, "groups": 2, "rewarded": 5, "reward_mean": 0.4, "accuracy": 0.4,
        "tokens_mean": 8, "tokens_max": 8, "finish": {"stop": 5}, "ver_min": 0, "ver_max": 0,
        "mixed_version_frac": 0}
for k, v in want.items():
    assert k in s, f"no {k!r} in {s}"
    assert (s[k] == v if not isinstance(v, float) else abs(s[k] - v) < 1e-9), f"{k}: {s[k]!r}, expected {v!r}"
for k in ("k1", "k3", "lag_mean", "ess", "capped_frac", "masked_frac", "tokens_scored"):
    assert k not in s, f"{k!r} present without its fields"
EOF
"$PY" - <<'EOF'
import math
from rltest import *
recs = []
for i in range(4):   # rho either < 1 (w = 1, not capped) or > 2.5 (w = 2, capped)
    lp = [f32(-1.0 - 0.1 * t - 0.05 * i) for t in range(6)]
    ll = [f32(x + (1.2 if (t + i) % 3 == 0 else -0.3 - 0.01 * t)) for t, x in enumerate(lp)]
    w = [2.0 if b - a > 0 else 1.0 for a, b in zip(lp, ll)]
    r = rollout(i, n_tokens=6)
    r.update({"logp": lp, "logp_learner": ll, "w": w, "mask": [1] * 6, "ver_learner": 3,
              "ver": [0, 0, 1, 1, 2, 2] if i % 2 else [2] * 6})
    recs.append(r)
open("scored.rlr", "wb").write(write_stream(recs))
masked = []
for i, (mask, w) in enumerate((([1, 0, 1, 1], [1, 5, 2, 0.5]), ([0, 0, 1, 1], [9, 9, 1, 3]))):
    masked.append({"id": i, "ids": [1, 2, 3, 4], "logp": [-1.0] * 4, "logp_learner": [-1.0] * 4,
                   "w": w, "mask": mask})
open("masked.rlr", "wb").write(write_stream(masked))
EOF
rl-cat --stats --json scored.rlr >scored.json 2>scored.err
pycheck "--stats --json with logp_learner, w, mask, ver, ver_learner: values by the contract's formulas" <<'EOF'
import json, math
from rltest import *
s = json.load(open("scored.json"))
[(h, recs, t)] = read_stream(open("scored.rlr", "rb").read())
lp = [x for r in recs for x in r["logp"]]; ll = [x for r in recs for x in r["logp_learner"]]
w = [x for r in recs for x in r["w"]]; rho = [math.exp(b - a) for a, b in zip(lp, ll)]
lag = [r["ver_learner"] - v for r in recs for v in r["ver"]]
n = len(lp)
want = {"tokens_scored": n, "k1": sum(a - b for a, b in zip(lp, ll)) / n,
        "k3": sum(x - 1 - math.log(x) for x in rho) / n, "ratio_mean": sum(rho) / n,
        "ratio_min": min(rho), "ratio_max": max(rho),
        "max_abs_p_diff": max(abs(math.exp(b) - math.exp(a)) for a, b in zip(lp, ll)),
        "capped_frac": sum(x < y for x, y in zip(w, rho)) / n, "ess": sum(w) ** 2 / (n * sum(x * x for x in w)),
        "masked_frac": 0, "lag_mean": sum(lag) / n, "lag_max": max(lag), "ver_min": 0, "ver_max": 2,
        "mixed_version_frac": 0.5}
bad = [f"{k}: {s.get(k)!r}, expected {v!r}" for k, v in want.items()
       if not (k in s and isinstance(s[k], (int, float)) and math.isclose(s[k], v, rel_tol=1e-4, abs_tol=1e-6))]
assert not bad, "; ".join(bad)
EOF
rl-cat --stats --json masked.rlr >masked.json 2>masked.err
pycheck "--stats --json with mask zeros: masked_frac, ess over tokens with mask != 0" <<'EOF'
import json, math
s = json.load(open("masked.json"))
w = [1, 2, 0.5, 1, 3]
for k, v in {"masked_frac": 3 / 8, "ess": sum(w) ** 2 / (len(w) * sum(x * x for x in w))}.items():
    assert k in s and math.isclose(s[k], v, rel_tol=1e-4), f"{k}: {s.get(k)!r}, expected {v!r}"
EOF

# ---- latency: records flow through a pipe before the input ends ---------------------
# A producer writes a header and 3 records as flushed zstd frames (or 3 JSON lines), waits
# 2 s, then writes the trailer and closes. rl-cat must deliver the 3 records within 1 s,
# stay running until the input ends, then exit 0 with its summary.
latency() {
    pycheck "$1" "$cat_bin" "$2" "$3" <<'EOF'
import json, os, select, subprocess, sys, time, msgpack, zstandard
from rltest import *
exe, source, sink = sys.argv[1:]
args = [exe] + (["--pack"] if source == "jsonl" else []) + (["--json"] if sink == "json" else [])
p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
recs = [rollout(i) for i in range(3)]
c = zstandard.ZstdCompressor(write_checksum=True)
objs = member_bytes(recs)
if source == "jsonl":
    first, last = "".join(json.dumps(r) + "\n" for r in recs).encode(), b""
else:
    first, last = b"".join(c.compress(o) for o in objs[:-1]), c.compress(objs[-1])

def delivered(got):  # records complete in what came out so far
    if sink == "json":
        return got.count(b"\n")
    raw, pos = b"", 0
    while pos < len(got) and got[pos:pos + 4] == ZSTD_MAGIC:
        d = zstandard.ZstdDecompressor().decompressobj()
        try:
            raw += d.decompress(got[pos:])
        except zstandard.ZstdError:
            break
        if not d.unused_data and not d.eof: break
        pos = len(got) - len(d.unused_data)
    up = msgpack.Unpacker(raw=False); up.feed(raw)
    return sum(1 for o in up if "rlpipe" not in o and "rlpipe_end" not in o)

time.sleep(0.3)   # let rl-cat start
t0 = time.monotonic()
p.stdin.write(first); p.stdin.flush()
got, fd = b"", p.stdout.fileno()
while delivered(got) < 3 and time.monotonic() < t0 + 1.0:
    if select.select([fd], [], [], max(0, t0 + 1.0 - time.monotonic()))[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk: break
        got += chunk
took = time.monotonic() - t0
assert delivered(got) >= 3, f"{delivered(got)} records out after {took:.2f} s, before the input ended"
time.sleep(max(0, t0 + 2.0 - time.monotonic()))
assert p.poll() is None, f"rl-cat exited ({p.returncode}) before its input ended"
out, err = p.communicate(last, timeout=10)
assert p.returncode == 0, f"exit status {p.returncode}: {err.decode()[:300]}"
assert b"3 records" in err, f"no summary after the end: {err.decode()[:300]}"
EOF
}
latency "records on a pipe, --json: records out within 1 s, before the trailer" stream json
latency "records on a pipe, records out: records out within 1 s, before the trailer" stream records
latency "--pack of lines on a pipe: records out within 1 s, before the input ends" jsonl records

finish
