#!/bin/bash
# rl-cat and where its output goes: binary records are never written to a
# terminal (exit 2, clear message) unless --force, -o FILE or a text mode;
# a reader that goes away (SIGPIPE/EPIPE) ends rl-cat quietly.
# (Contract: man/rl-cat.1 "Errors"; doc/design.md §7.)
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py

# check NAME WHY TEST...: passes if TEST succeeds.
# on_tty COMMAND-LINE: runs it with stdin, stdout and stderr on a pseudo-terminal
# (util-linux script); its status is the command's; what the terminal shows comes out on stderr.
on_tty() { script -qec "$1" /dev/null </dev/null >&2; }
# no_zstd FILE: FILE holds no zstd frame magic (no binary records got through).
no_zstd() { ! LC_ALL=C grep -qaF $'\x28\xb5\x2f\xfd' "$1"; }
valid() {  # valid FILE N: FILE is one member of N records by the reference reader
    "$PY" -c 'import sys; from rltest import read_stream
m = read_stream(open(sys.argv[1], "rb").read())
assert len(m) == 1 and len(m[0][1]) == int(sys.argv[2]) == m[0][2]["count"], m' "$1" "$2" 2>/dev/null
}

command -v script >/dev/null || { skip "terminal" "script (util-linux) is not installed"; }

"$PY" - <<'EOF' || { fail setup "could not write the inputs"; finish; }
import json
from rltest import *
recs = [rollout(i) for i in range(20000)]
open("good.rlr", "wb").write(write_stream(recs[:5], frame_every=1))
open("good.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in recs[:5]))
open("big.rlr", "wb").write(write_stream(recs, frame_every=1024))
open("big.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in recs))
EOF
cat="$RLPIPE_BIN/rl-cat"

# ---- terminals ----------------------------------------------------------------------
if command -v script >/dev/null; then
    expect "records to a terminal: refused with exit 2" 2 '^rl-cat: .*terminal' -- on_tty "$cat good.rlr"
    check "records to a terminal: no binary reaches it" "zstd bytes on the terminal" no_zstd err
    check "records to a terminal: the message says how to override (--force)" "$(head -c 300 err)" grep -q -- '--force' err
    expect "raw msgpack (-u) to a terminal: refused with exit 2" 2 '^rl-cat: .*terminal' -- on_tty "$cat -u good.rlr"
    expect "--pack records to a terminal: refused with exit 2" 2 '^rl-cat: .*terminal' -- on_tty "$cat --pack good.jsonl"
    expect "records to a terminal with --force: written, exit 0" 0 '' -- on_tty "$cat --force -q good.rlr"
    check "records to a terminal with --force: the zstd frames reach it" "no zstd magic on the terminal" \
        eval '! no_zstd err'
    expect "-o FILE while stdout is a terminal: allowed" 0 '' -- on_tty "$cat -q good.rlr -o copy.rlr"
    check "-o FILE while stdout is a terminal: FILE holds the 5 records" "copy.rlr is not a 5-record member" valid copy.rlr 5
    expect "stdout redirected while stderr is a terminal: allowed" 0 '' -- on_tty "$cat -q good.rlr > copy2.rlr"
    check "stdout redirected while stderr is a terminal: the file holds the 5 records" "copy2.rlr is not a 5-record member" valid copy2.rlr 5
    expect "--json to a terminal: allowed" 0 '"id": ?4' -- on_tty "$cat --json good.rlr"
    expect "--stats to a terminal: allowed" 0 'records' -- on_tty "$cat --stats good.rlr"
    expect "--check to a terminal: allowed" 0 'ok' -- on_tty "$cat --check good.rlr"
fi

# ---- SIGPIPE: the reader goes away --------------------------------------------------
# quiet NAME COMMAND-LINE: with pipefail, rl-cat (first in the pipe, stderr to pipe.err)
# is killed by SIGPIPE (141) or exits 0, and says nothing.
quiet() {
    local name=$1 line=$2 rc
    rm -f pipe.err
    timeout 60 bash -o pipefail -c "$line"
    rc=$?
    if [ "$rc" -ne 141 ] && [ "$rc" -ne 0 ]; then
        fail "$name" "pipeline status $rc, expected 141 or 0; rl-cat stderr: $(head -c 300 pipe.err)"
    elif [ -s pipe.err ]; then
        fail "$name" "rl-cat wrote to stderr: $(head -c 300 pipe.err)"
    else
        pass "$name"
    fi
}
quiet "rl-cat big.rlr | head -c 100: ends quietly" "$cat big.rlr 2>pipe.err | head -c 100 >/dev/null"
quiet "rl-cat -u big.rlr | head -c 100: ends quietly" "$cat -u big.rlr 2>pipe.err | head -c 100 >/dev/null"
quiet "rl-cat --json big.rlr | head -n 1: ends quietly" "$cat --json big.rlr 2>pipe.err | head -n 1 >/dev/null"
quiet "rl-cat --pack big.jsonl | head -c 100: ends quietly" "$cat --pack big.jsonl 2>pipe.err | head -c 100 >/dev/null"
quiet "cat big.rlr | rl-cat | head -c 100: ends quietly" "cat big.rlr | $cat 2>pipe.err | head -c 100 >/dev/null"
quiet "rl-cat --json big.rlr | true (reader never reads): ends quietly" "$cat --json big.rlr 2>pipe.err | true"
expect "rl-cat --json big.rlr | head -n 1: the first line is record 0" 0 '' -- \
    bash -c "$cat --json big.rlr 2>/dev/null | head -n 1 | grep -q '^{\"id\": *0,'"

finish
