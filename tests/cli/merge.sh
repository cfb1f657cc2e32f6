#!/bin/bash
# rl-cat --merge: several streams, files, named pipes and authenticated
# connections, read at once into one stream of whole groups, in arrival order
# or in rounds; rl-cat --to, the sender; what a source that fails costs (its
# incomplete group, nothing of the others'); usage errors.
# (Contract: man/rl-cat.1 MERGING; doc/design.md §5, several samplers.)
# The outputs are read with tests/py/mergecheck.py (rltest's reference reader).
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$T"' EXIT
writer=("$PY" "$RLPIPE_ROOT/tests/py/mergecheck.py")   # PIPE SRC SIZES PAUSES [GROUP_SIZE [KIND]]

# listening ERRFILE [PREFIX]: the ADDR of "rl-cat: listening for records on ADDR" (the
# first, or the first that starts with PREFIX), waiting up to 10 s for it.
listening() {
    local i
    for i in $(seq 100); do
        grep -oE "listening for records on ${2:-}[^ ]+" "$1" 2>/dev/null | head -n 1 | cut -d' ' -f5 | grep . && return
        sleep 0.1
    done
    return 1
}

"$PY" - <<'EOF' || { fail setup "could not write the inputs"; finish; }
from mergecheck import *
from rltest import header, write_stream, pack_record
import msgpack
def put(name, data):
    open(name, "wb").write(data)
put("a.rlr", stream(1, [4, 4, 4, 4, 4]))
put("b.rlr", stream(2, [4, 4, 4], frame_every=3))
put("c.rlr", stream(3, [4, 4], compress=False))
put("nosize1.rlr", stream(1, [3, 3], group_size=0))
put("nosize.rlr", stream(4, [2, 3, 1], group_size=0))
# cut inside its third group (records 8..11): the zstd frame of record 11 is cut
put("trunc.rlr", stream(5, [4, 4, 4], frame_every=1)[:-60])
# a record that is not a map inside the second group (records 4..7)
objs = member_bytes(records(6, [4, 4, 4]), header(sampling={"group": 4}))
put("corrupt.rlr", b"".join(objs[:7]) + msgpack.packb(7) + b"".join(objs[8:]))
# "group" a string in the first group's third record
recs = records(7, [4, 4])
recs[2]["group"] = "zero"
put("gbad.rlr", write_stream(recs, hdr=header(sampling={"group": 4})))
put("ex.rlr", write_stream([{"prompt": "2+2", "completion": "4"}], hdr=header("examples")))
EOF
printf 'a-token-of-twenty-bytes\n' >tok
printf 'not-the-token-of-twenty\n' >wrong
chmod 600 tok wrong

# ---- help, and usage errors (exit 2) --------------------------------------------------
expect "--help: exit 0" 0 '' -- rl-cat --help
check "--help: both usages, --merge and --to" "stdout: $(head -c 300 out)" \
    eval 'grep -q "^  or:  rl-cat --merge" out && grep -q -- "--to ADDR" out'
help_matches_man rl-cat 25
usage() {  # usage NAME PATTERN ARGS...
    local name=$1 pattern=$2
    shift 2
    expect "$name: usage error" 2 "^rl-cat: error: $pattern" -- rl-cat "$@"
}
usage "--round without --merge" '--round, --senders and --start-timeout apply to --merge' --round 2 a.rlr
usage "--round 0" '--round: a round holds at least one group' --merge --round 0 a.rlr
usage "--senders without an address" '--senders applies to a SOURCE to listen at' --merge --senders 2 a.rlr
usage "--senders 0" '--senders: a SOURCE to listen at takes one connection' --merge --senders 0 unix:u.sock
usage "--merge --pack" '--merge reads record streams' --merge --pack a.rlr
usage "--merge --head" '--merge writes whole groups; --head does not apply' --merge --head 3 a.rlr
usage "a tcp SOURCE without --token-file" 'SOURCE tcp:127.0.0.1:0: tcp needs --token-file' --merge a.rlr tcp:127.0.0.1:0
usage "a bad port" 'SOURCE tcp:99999: bad port' --merge --token-file tok tcp:99999
usage "an empty socket path" 'SOURCE unix:: empty socket path' --merge unix:
usage "--token-file with nothing to authenticate" '--token-file applies to --to and to a SOURCE' --merge --token-file tok a.rlr
usage "--to and -o" '--to and --output both name where the records go' --to unix:u.sock -o x.rlr a.rlr
usage "--to --json" '--to sends records' --to unix:u.sock --json a.rlr
usage "--to tcp without --token-file" '--to tcp:127.0.0.1:7: tcp needs --token-file' --to tcp:127.0.0.1:7 a.rlr
usage "--retry without --to" '--retry applies to --to' --retry 3 a.rlr
usage "--retry -1" '--retry: -1 is outside' --to unix:u.sock --retry -1 a.rlr
cp tok open.tok
chmod 644 open.tok
expect "a token file others may read: exit 1" 1 '^rl-cat: error: token file open.tok is accessible to others' -- \
    rl-cat --merge --token-file open.tok tcp:127.0.0.1:0

# ---- files ---------------------------------------------------------------------------
expect "3 files: exit 0, a summary that accounts for every record" 0 \
    '^rl-cat: merge of 3 sources: 40 records in, 40 out in 10 groups, 0 dropped in 0 incomplete groups; a\.rlr 20 in, b\.rlr 12 in, c\.rlr 8 in; ' \
    -- timeout 30 rl-cat --merge a.rlr b.rlr c.rlr
cp out abc.rlr
pycheck "3 files: every group whole and consecutive, none lost, renumbered 0..9, source and source_group set" <<'EOF'
from mergecheck import *
h, groups = merged("abc.rlr")
check_whole(groups, {1: [4] * 5, 2: [4] * 3, 3: [4] * 2})
assert {g["src"]: g["source"] for g in groups} == {1: 0, 2: 1, 3: 2}, "source is not the operand's index"
assert h["kind"] == "rollouts" and h["sampling"] == {"group": 4}, h
EOF
expect "--round 2 of 3 files: exit 0, 3 rounds" 0 '40 out in 10 groups, .*, 3 rounds of 2;' -- \
    timeout 30 rl-cat --merge --round 2 a.rlr b.rlr c.rlr
cp out round.rlr
pycheck "--round 2: round r holds groups 2r and 2r+1 of each source that has them, and the rest after" <<'EOF'
from mergecheck import *
h, groups = merged("round.rlr")
order = check_whole(groups, {1: [4] * 5, 2: [4] * 3, 3: [4] * 2})
assert check_rounds(order, {1: [4] * 5, 2: [4] * 3, 3: [4] * 2}, 2) == 3, order
EOF
expect "groups without a size in the header: complete at the next group and at the end" 0 '12 out in 5 groups' -- \
    timeout 30 rl-cat --merge nosize1.rlr nosize.rlr -o n.rlr
pycheck "groups without a size in the header: complete at the next group and at the end" <<'EOF'
from mergecheck import *
check_whole(merged("n.rlr")[1], {1: [3, 3], 4: [2, 3, 1]})
EOF
expect "--json and --stats read a merge too" 0 '' -- timeout 30 rl-cat -q --merge --stats --json a.rlr c.rlr
check "--stats of a merge: 28 records in 7 groups, 2 members read" "$(cat out)" \
    "$PY" -c 'import json,sys; s = json.load(open("out")); sys.exit(not (s["records"] == 28 and s["groups"] == 7 and s["members"] == 2))'

# ---- live named pipes -------------------------------------------------------------------
mkfifo fast slow
timeout 30 "${writer[@]}" slow 1 4,4 3 &
timeout 30 "${writer[@]}" fast 2 4,4,4,4,4,4 "" &
expect "a fast and a slow pipe: exit 0" 0 '24 out in 6 groups|32 out in 8 groups' -- timeout 30 rl-cat --merge slow fast
cp out live.rlr
pycheck "a fast and a slow pipe: the fast one's groups are not held up by the slow one's pause" <<'EOF'
from mergecheck import *
order = check_whole(merged("live.rlr")[1], {1: [4, 4], 2: [4] * 6})
assert order.index((1, 1)) == len(order) - 1, f"the slow pipe's second group was not last: {order}"
EOF
mkfifo r1 r2
timeout 30 "${writer[@]}" r1 1 4,4,4 "" &
timeout 30 "${writer[@]}" r2 2 4,4,4 0.4,0.4 &
expect "--round 1 of a fast and a slow pipe: exit 0" 0 '24 out in 6 groups, .*3 rounds of 1' -- \
    timeout 30 rl-cat --merge --round 1 r1 r2
cp out liveround.rlr
pycheck "--round 1 of a fast and a slow pipe: the slow one's groups pace the rounds" <<'EOF'
from mergecheck import *
order = check_whole(merged("liveround.rlr")[1], {1: [4] * 3, 2: [4] * 3})
check_rounds(order, {1: [4] * 3, 2: [4] * 3}, 1)
EOF
# A group is complete once the header's group size has arrived: it goes out
# while its writer pauses, before the next group's first record.
mkfifo held
timeout 30 "${writer[@]}" held 1 4,4 5 &
check "a group of the header's size goes out before the next one starts" "the first group came only at the end" \
    "$PY" -c '
import subprocess, sys, time, os
p = subprocess.Popen(["timeout", "30", "rl-cat", "--merge", "-u", "-q", "held"], stdout=subprocess.PIPE)
t0, got = time.time(), b""
while len(got) < 400:   # header and the first 4 records are about 1.3 kB
    b = os.read(p.stdout.fileno(), 1 << 16)
    if not b: break
    got += b
took = time.time() - t0
p.stdout.read(); p.wait()
sys.exit(not (took < 4 and p.returncode == 0))'

# ---- connections: tcp with the token, unix, and a sender that waits ---------------------------
timeout 60 rl-cat --merge --senders 2 --token-file tok tcp:127.0.0.1:0 a.rlr >tcp.rlr 2>tcp.err &
merge=$!
addr=$(listening tcp.err) || fail "tcp: the merge listens" "$(cat tcp.err)"
expect "tcp: a sender with the wrong token is refused, and says so" 1 \
    "^rl-cat: error: $addr refused the connection: authentication failed: wrong token$" -- \
    rl-cat --to "$addr" --token-file wrong b.rlr
expect "tcp: a sender with the token: exit 0" 0 "^rl-cat: 12 records, 1 member, 1 file, .* out to $addr, " -- \
    rl-cat --to "$addr" --token-file tok b.rlr
expect "tcp: a second sender, from a pipe: exit 0" 0 '' -- sh -c "cat c.rlr | rl-cat --to $addr --token-file tok"
wait $merge
rc=$?
check "tcp: the merge ends with its senders, exit 0" "exit $rc: $(cat tcp.err)" test $rc = 0
check "tcp: the refused peer is named in a warning" "$(cat tcp.err)" \
    grep -qE "^rl-cat: warning: $addr: refused 127\.0\.0\.1:[0-9]+: authentication failed \(wrong token\)$" tcp.err
check "tcp: the summary counts 3 sources and 1 peer refused" "$(cat tcp.err)" \
    grep -qE "^rl-cat: merge of 3 sources: 40 records in, 40 out in 10 groups, .*; a\.rlr 20 in, $addr from 127\.0\.0\.1:[0-9]+ (12|8) in, .*, 1 peer refused, " tcp.err
pycheck "tcp: the file's and both senders' groups, whole" <<'EOF'
from mergecheck import *
check_whole(merged("tcp.rlr")[1], {1: [4] * 5, 2: [4] * 3, 3: [4] * 2})
EOF
(sleep 0.7; exec timeout 30 rl-cat -q --merge unix:u.sock >unix.rlr 2>unix.err) &
expect "unix: a sender started before the merge waits for it (--retry), exit 0" 0 'out to unix:u\.sock' -- \
    timeout 30 rl-cat --to unix:u.sock --retry 10 c.rlr
wait
check "unix: the merge took the stream, and left no socket file" "$(cat unix.err) $(ls)" \
    eval '[ ! -e u.sock ] && "$PY" -c "from mergecheck import *; check_whole(merged(\"unix.rlr\")[1], {3: [4, 4]})"'
timeout 30 rl-cat --merge --token-file tok unix:two.sock tcp:127.0.0.1:0 >two.rlr 2>two.err &
merge=$!
addr=$(listening two.err tcp:) || fail "two addresses: the merge listens" "$(cat two.err)"
rl-cat -q --to "$addr" --token-file tok b.rlr &
rl-cat -q --to unix:two.sock --token-file tok c.rlr
wait $merge
rc=$?
check "two addresses, tcp and unix, one sender each: exit 0, both merged" "exit $rc: $(cat two.err)" \
    eval '[ $rc = 0 ] && [ ! -e two.sock ] && "$PY" -c "from mergecheck import *; check_whole(merged(\"two.rlr\")[1], {2: [4] * 3, 3: [4, 4]})"'
expect "unix: nobody listens, --retry 0: exit 1 at once" 1 '^rl-cat: error: cannot connect to unix:none\.sock: No such file or directory$' -- \
    rl-cat --to unix:none.sock --retry 0 a.rlr
timeout 30 rl-cat --merge --token-file tok unix:t.sock >ut.rlr 2>ut.err &
merge=$!
listening ut.err >/dev/null
expect "unix with a token: a sender without one is told to give --token-file" 1 'requires authentication: give its token with --token-file' -- \
    rl-cat --to unix:t.sock a.rlr
expect "unix with a token: the sender with it" 0 '' -- rl-cat --to unix:t.sock --token-file tok a.rlr
wait $merge
rc=$?
check "unix with a token: exit 0, the tokenless peer refused" "exit $rc: $(cat ut.err)" \
    eval "[ $rc = 0 ] && grep -qE '^rl-cat: warning: unix:t\.sock: refused pid [0-9]+: ' ut.err"

# ---- faults: the source is named, its incomplete group dropped, the others' groups all out -------
expect "a truncated, a corrupt and a mis-typed source: exit 1" 1 '' -- \
    timeout 30 rl-cat --merge a.rlr trunc.rlr corrupt.rlr gbad.rlr -o f.rlr
check "the truncated source named, with its record, and its incomplete group dropped" "$(cat err)" \
    grep -qE '^rl-cat: error: truncated stream: .*: trunc\.rlr record 11 \(the 3 records of its incomplete group dropped\)$' err
check "the corrupt source named, with its record" "$(cat err)" \
    grep -qE '^rl-cat: error: record is an? .*, not a map.*: corrupt\.rlr record 6 \(the 2 records of its incomplete group dropped\)$' err
check "the mis-typed group named" "$(cat err)" \
    grep -qE '^rl-cat: error: "group" is not an unsigned integer: gbad\.rlr record 2 \(the 3 records of its incomplete group dropped\)$' err
check "the summary accounts for every record: 40 in = 32 out + 8 dropped" "$(tail -n 1 err)" \
    grep -qE '^rl-cat: merge of 4 sources: 40 records in, 32 out in 8 groups, 8 dropped in 3 incomplete groups; a\.rlr 20 in, trunc\.rlr 11 in \(3 dropped, failed\), corrupt\.rlr 6 in \(2 dropped, failed\), gbad\.rlr 3 in \(3 dropped, failed\); ' err
pycheck "faults: every group of the good source out, and the complete ones of the others" <<'EOF'
from mergecheck import *
check_whole(merged("f.rlr")[1], {1: [4] * 5, 5: [4, 4, 4], 6: [4, 4, 4], 7: [4, 4]},
            dropped=[(5, 2), (6, 1), (6, 2), (7, 0), (7, 1)])
EOF
# ---- a merge that lost records ends its stream partial, and its readers say so ---------------
pycheck "the output of a merge with failed sources: its trailer says partial, naming the first" <<'EOF'
from rltest import read_stream
h, recs, t = read_stream(open("f.rlr", "rb").read())[0]
first = ("trunc.rlr record 11", "corrupt.rlr record 6", "gbad.rlr record 2")   # whichever failed first
assert t["count"] == 32 and any(f in t["partial"] for f in first), t
EOF
expect "rl-cat --check of it: exit 1, the member said partial, with why" 1 \
    '^rl-cat: error: f\.rlr: a partial member, its writer lost records \((truncated stream: .*trunc\.rlr record 11|record is an? .*corrupt\.rlr record 6|"group" is not an unsigned integer: gbad\.rlr record 2).*\): its records are read, and the run ends with exit status 1 \(--allow-partial accepts it\)$' \
    -- rl-cat --check f.rlr
check "rl-cat --check of it: the summary says partial" "$(tail -n 1 err)" grep -q '^rl-cat: partial: 32 records in 1 member, 1 file$' err
expect "rl-cat --check --allow-partial of it: exit 0, a warning" 0 \
    '^rl-cat: warning: f\.rlr: a partial member, its writer lost records \(.*\): read with --allow-partial$' \
    -- rl-cat --check --allow-partial f.rlr
expect "rl-cat of it: exit 1, every record copied" 1 'a partial member' -- rl-cat f.rlr -o g.rlr
expect "rl-cat --json --header of it: exit 1" 1 'a partial member' -- bash -c 'rl-cat --json --header f.rlr >g.jsonl'
expect "merging it again: exit 1, named as the source of a partial member" 1 \
    '^rl-cat: error: f\.rlr member 1: a partial member, its writer lost records \(.*\): its records are merged, and the run ends with exit status 1 \(--allow-partial accepts it\)$' \
    -- timeout 30 rl-cat --merge f.rlr c.rlr -o h.rlr
expect "merging it again with --allow-partial: exit 0, a warning" 0 '^rl-cat: warning: f\.rlr member 1: a partial member' \
    -- timeout 30 rl-cat --merge --allow-partial f.rlr c.rlr -o h2.rlr
pycheck "what is made of a partial stream is partial too, its records all there" <<'EOF'
import json
from rltest import read_stream
why = read_stream(open("f.rlr", "rb").read())[0][2]["partial"]
for path in ("g.rlr", "h.rlr", "h2.rlr"):
    h, recs, t = read_stream(open(path, "rb").read())[0]
    assert why in t.get("partial", ""), (path, t)   # the first reason, carried on
assert read_stream(open("g.rlr", "rb").read())[0][2]["count"] == 32
last = json.loads(open("g.jsonl").read().splitlines()[-1])
assert last["rlpipe_end"] == 1 and last["count"] == 32 and last["partial"] == why, last
EOF
expect "a missing file: named, the others merged, exit 1" 1 '^rl-cat: error: cannot open: nosuch\.rlr: No such file' -- \
    timeout 30 rl-cat --merge -o m.rlr c.rlr nosuch.rlr
check "a missing file: the others' groups are out" "m.rlr" "$PY" -c 'from mergecheck import *; check_whole(merged("m.rlr")[1], {3: [4, 4]})'
timeout 60 rl-cat --merge --senders 2 --token-file tok tcp:127.0.0.1:0 >cut.rlr 2>cut.err &
merge=$!
addr=$(listening cut.err) || fail "a peer that breaks off: the merge listens" "$(cat cut.err)"
expect "a peer that breaks off mid-group: the sender fails on its own input" 1 'trunc\.rlr record 11' -- \
    rl-cat --to "$addr" --token-file tok trunc.rlr
expect "the other peer: exit 0" 0 '' -- rl-cat --to "$addr" --token-file tok b.rlr
wait $merge
rc=$?
check "a peer that breaks off mid-group: exit 1, named with its record" "exit $rc: $(cat cut.err)" \
    eval "[ $rc = 1 ] && grep -qE '^rl-cat: error: truncated stream: .*: $addr from 127\.0\.0\.1:[0-9]+ record 11 \(the 3 records of its incomplete group dropped\)$' cut.err"
pycheck "a peer that breaks off mid-group: its complete groups and all of the other's out" <<'EOF'
from mergecheck import *
check_whole(merged("cut.rlr")[1], {5: [4, 4, 4], 2: [4] * 3}, dropped=[(5, 2)])
EOF
# Headers: the first to arrive is the merge's; a later one of another kind or group size is refused.
mkfifo late1 late2
(sleep 0.5; exec timeout 30 "${writer[@]}" late1 8 1,1 "" 4 examples) &
(sleep 0.5; exec timeout 30 "${writer[@]}" late2 9 3 "" 3) &
expect "a later source of another kind, and one of another group size: exit 1, each named" 1 '' -- \
    timeout 30 rl-cat --merge a.rlr late1 late2 -o k.rlr
check "another kind: refused, named" "$(cat err)" \
    grep -qE '^rl-cat: error: a member of kind "examples" cannot join the merge of kind "rollouts": late1 record 0$' err
check "another group size: refused, named" "$(cat err)" \
    grep -qE '^rl-cat: error: a member whose header says "sampling": groups of 3 cannot join the merge of groups of 4: late2 record 0$' err
check "the first source's groups all out" "k.rlr" "$PY" -c 'from mergecheck import *; check_whole(merged("k.rlr")[1], {1: [4] * 5})'
# Sources that do not start: a named pipe no writer opens, a connection that does not come.
mkfifo idle
expect "--start-timeout: a named pipe nobody writes to fails after it, named; exit 1" 1 \
    '^rl-cat: error: idle: no writer wrote to this named pipe within 1 s of the start \(--start-timeout\)$' -- \
    timeout 30 rl-cat --merge --start-timeout 1 c.rlr idle -o st.rlr
pycheck "--start-timeout: the other source's groups are out, the trailer names the pipe" <<'EOF'
from mergecheck import *
from rltest import read_stream
check_whole(merged("st.rlr")[1], {3: [4, 4]})
assert read_stream(open("st.rlr", "rb").read())[0][2]["partial"].startswith("idle: no writer"), "no partial trailer"
EOF
timeout 30 rl-cat --merge --senders 2 --start-timeout 2 "unix:$T/st.sock" >st2.rlr 2>st2.err &
merge=$!
addr=$(listening st2.err) || fail "--start-timeout, connections: the merge listens" "$(cat st2.err)"
expect "--start-timeout, connections: the one sender that comes: exit 0" 0 '' -- rl-cat --to "$addr" c.rlr
wait $merge
rc=$?
check "--start-timeout, connections: 1 of 2 came, named; exit 1" "exit $rc: $(cat st2.err)" \
    eval "[ $rc = 1 ] && grep -qF 'rl-cat: error: $addr: 1 of 2 connections came within 2 s of the start (--start-timeout)' st2.err"
check "--start-timeout, connections: the sender's groups are out" "st2.rlr" \
    "$PY" -c 'from mergecheck import *; check_whole(merged("st2.rlr")[1], {3: [4, 4]})'
mkfifo late3
(sleep 6; exec timeout 30 "${writer[@]}" late3 7 4,4 "") &
expect "a named pipe whose writer comes 6 s late: stderr says what the merge waits for; exit 0" 0 \
    '^rl-cat: waiting for late3 to start sending; --start-timeout S gives up on them$' -- \
    timeout 30 rl-cat --merge c.rlr late3 -o w.rlr
check "the late pipe's groups are out" "w.rlr" \
    "$PY" -c 'from mergecheck import *; check_whole(merged("w.rlr")[1], {3: [4, 4], 7: [4, 4]})'
expect "--start-timeout without --merge: a usage error" 2 'apply to --merge' -- rl-cat --start-timeout 1 c.rlr
finish
