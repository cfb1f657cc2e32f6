#!/bin/bash
# stage.sh OUT NAME COMMAND... — one stage of an experiment, Kaldi-style: the
# command's output goes to OUT/log/NAME.log, its time to OUT/log/NAME.time,
# and one line says how it went. On failure the log's tail is shown and the
# status passed on, so make stops there; rerunning make resumes at the
# stage that failed.
set -u
out=$1 name=$2
shift 2
mkdir -p "$out/log" || exit 1
log=$out/log/$name.log
t0=$(date +%s.%N)
printf '%-28s ... ' "$name" >&2
"$@" >"$log" 2>&1
rc=$?
t1=$(date +%s.%N)
secs=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
if [ $rc != 0 ]; then
    echo "FAILED (exit $rc) after $secs s; the end of $log:" >&2
    tail -n 15 "$log" >&2
    exit $rc
fi
echo "$secs" >"$out/log/$name.time"
echo "done in $secs s ($log)" >&2
