#!/usr/bin/env python3
"""monitor.py: the CPU time of a run's tools and the machine's idle time, sampled
every 0.2 s until killed (bench/step.sh).

usage: monitor.py PATTERN OUT

Writes to OUT, at every sample, a line "seconds tool cpu-seconds" for each
rl-sample, rl-ratio, rl-learn and rl-sync process whose command line holds
PATTERN (utime + stime of /proc/PID/stat), and a line "seconds idle
idle-seconds": the time all processors have spent idle or waiting for I/O
(/proc/stat). One process that forks nothing: a shell loop of pgrep, cat,
date and awk took about 0.17 of this machine's 2 cores, time the run it
measured did not get, and that its table counted as idle.
"""
import os
import sys
import time

TOOLS = {"rl-sample", "rl-ratio", "rl-learn", "rl-sync"}
TICK = os.sysconf("SC_CLK_TCK")


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def tools_of(pattern):
    """The PIDs of the run's tools: {pid: name}."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        comm = read(f"/proc/{entry}/comm")
        if comm is None or comm.strip().decode(errors="replace") not in TOOLS:
            continue
        cmd = read(f"/proc/{entry}/cmdline")
        if cmd is not None and pattern in cmd:
            found[int(entry)] = comm.strip().decode()
    return found


def idle_seconds():
    fields = read("/proc/stat").split(b"\n", 1)[0].split()   # cpu user nice system idle iowait ...
    return (int(fields[4]) + int(fields[5])) / TICK


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: monitor.py PATTERN OUT\n")
        sys.exit(2)
    pattern = os.fsencode(sys.argv[1])
    with open(sys.argv[2], "w") as out:
        pids, n = {}, 0
        while True:
            # New processes: looked for every sample until rl-learn is seen (its
            # first sample marks its start for step_work.py), then every second.
            if n % 5 == 0 or "rl-learn" not in pids.values():
                pids = tools_of(pattern)
            n += 1
            now = time.time()
            lines = [f"{now:.6f} idle {idle_seconds():.2f}\n"]
            for pid, name in list(pids.items()):
                stat = read(f"/proc/{pid}/stat")
                if stat is None:
                    del pids[pid]
                    continue
                f = stat[stat.rindex(b")") + 2:].split()   # fields from the third (state) on
                lines.append(f"{now:.6f} {name} {(int(f[11]) + int(f[12])) / TICK:.2f}\n")
            out.writelines(lines)
            out.flush()
            time.sleep(0.2)


if __name__ == "__main__":
    main()
