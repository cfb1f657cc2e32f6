# tests/lib.sh — helpers for command-line tests (sourced by tests/cli/*.sh).
# Each case prints "PASS name" or "FAIL name: why"; see tests/run.sh.
# The tools under test are in $RLPIPE_BIN (bin/, or the sanitizer build).
set -u
RLPIPE_ROOT=${RLPIPE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
RLPIPE_BIN=${RLPIPE_BIN:-$RLPIPE_ROOT/bin}
PY=${PY:-/usr/bin/python3}
PATH=$RLPIPE_BIN:$PATH
T=$(mktemp -d "${TMPDIR:-/tmp}/rlpipe-cli.XXXXXX")
trap 'rm -rf "$T"' EXIT
_failed=0

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; _failed=1; }
skip() { echo "SKIP $1: $2"; }

# expect NAME STATUS PATTERN -- COMMAND...
# Runs COMMAND (stdout to $T/out, stderr to $T/err); passes if it exits with
# STATUS and stderr matches the extended regex PATTERN ("" matches anything).
expect() {
    local name=$1 want=$2 pattern=$3
    shift 4
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name" "exit status $rc, expected $want; stderr: $(head -c 400 "$T/err")"
    elif [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$T/err"; then
        fail "$name" "stderr does not match /$pattern/: $(head -c 400 "$T/err")"
    else
        pass "$name"
    fi
}

finish() { exit "$_failed"; }
