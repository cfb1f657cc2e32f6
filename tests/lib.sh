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

# check NAME WHY COMMAND...: passes if COMMAND succeeds, else fails saying WHY.
check() { local name=$1 why=$2; shift 2; if "$@"; then pass "$name"; else fail "$name" "$why"; fi; }

# help_matches_man TOOL MIN, after `expect ... -- TOOL --help`: the options
# --help lists (each line's text before its description) and those
# man/TOOL.1 documents (.TP/.TQ items of OPTIONS, at least MIN) are the same set,
# and getopt accepts every one of them (none is "unrecognized").
help_matches_man() {
    local tool=$1 min=$2 o unknown=
    awk '/^ *-/ { sub(/^ +/, ""); split($0, a, /   +/); print a[1] }' "$T/out" |
        grep -oE -- '--[a-z][a-z0-9-]*' | sort -u >"$T/help.opts"
    sed -n '/^\.SH OPTIONS/,/^\.SH [^O]/p' "$RLPIPE_ROOT/man/$tool.1" | sed 's/\\-/-/g' |
        awk 'tp { print } { tp = /^\.T[PQ]/ }' | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u >"$T/man.opts"
    check "--help and man/$tool.1 document the same options" \
        "only in --help: $(comm -23 "$T/help.opts" "$T/man.opts" | tr '\n' ' '); only in the man page: $(comm -13 "$T/help.opts" "$T/man.opts" | tr '\n' ' ')" \
        eval '[ "$(wc -l <"$T/man.opts")" -ge '"$min"' ] && cmp -s "$T/help.opts" "$T/man.opts"'
    while read -r o; do
        "$tool" "$o" </dev/null >/dev/null 2>"$T/err.o"
        grep -qE 'unrecognized|invalid option' "$T/err.o" && unknown="$unknown $o"
    done <"$T/man.opts"
    check "every documented option is accepted by getopt" "unrecognized:$unknown" [ -z "$unknown" ]
}

# pycheck NAME [ARG...] <<'EOF' ... EOF: passes if the Python script on stdin
# exits 0 (ARGs are sys.argv[1:]; its "# " lines are shown); a failure shows
# the script's last lines.
pycheck() {
    local name=$1 msg
    shift
    if msg=$("$PY" - "$@" 2>&1); then
        printf '%s\n' "$msg" | grep '^# '
        pass "$name"
    else
        fail "$name" "$(printf '%s' "$msg" | tail -n 2 | tr '\n' ' ')"
    fi
}

# mpi_ready: 0 when rl-learn can run here under mpirun: there is mpirun,
# the tools are not the sanitizer build (LeakSanitizer reports Open MPI's
# own allocations at exit), and rl-learn was built with MPI; else 1, and
# $no_mpi says why. Exports what Open MPI wants on these machines: running
# as root, more ranks than cores.
mpi_ready() {
    no_mpi=
    if ! command -v mpirun >/dev/null 2>&1; then no_mpi="no mpirun (Open MPI: apt-get install openmpi-bin libopenmpi-dev)"
    elif [ "${RLPIPE_SANITIZED:-0}" = 1 ]; then no_mpi="under the sanitizers (LeakSanitizer reports Open MPI's own allocations)"
    elif ! grep -q MPI_Init <(nm -D "$(command -v rl-learn)" 2>/dev/null); then no_mpi="this rl-learn was built without MPI"
    fi
    [ -z "$no_mpi" ] || return 1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
}

finish() { exit "$_failed"; }
