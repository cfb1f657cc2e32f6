"""experiments/lib/tb.py writes JSON lines of metrics as TensorBoard event
files, read back here with TensorBoard's own reader (EventAccumulator):

  - every number of every line is a scalar tagged by its key (a nested
    object's KEY/SUBKEY), at the step "version", else "step", else the
    line's number, with the wall time "time", else --start + "elapsed";
    values as float32 (TensorBoard's simple_value), equal to the JSON's;
  - a source per run directory (NAME=FILE, FILE's stem, stdin);
  - --follow reads lines appended while it runs, and on SIGTERM what is
    left (a last line without its newline too), then exits 0;
  - a line that is not a JSON object: exit 1 naming the file and the line.
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rltest import ROOT, case, finish

TB = os.path.join(ROOT, "experiments", "lib", "tb.py")
TMP = tempfile.mkdtemp(prefix="rlpipe-tb.")
atexit.register(shutil.rmtree, TMP, True)


def tb(*args, input=None):
    p = subprocess.run([sys.executable, TB, *args], input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stderr.decode()


def read_run(d):
    """{tag: [(step, wall_time, value)]} of the event files in d."""
    acc = EventAccumulator(d, size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.wall_time, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def numbers(obj, prefix=""):
    for k, v in obj.items():
        if isinstance(v, dict):
            yield from numbers(v, prefix + k + "/")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield prefix + k, v


def expected(lines, start=None):
    """The scalars the lines hold, by the rules above."""
    out = {}
    for i, obj in enumerate(lines, 1):
        step_key = next((k for k in ("version", "step") if isinstance(obj.get(k), int)), None)
        step = obj[step_key] if step_key else i
        wall = obj.get("time", start + obj["elapsed"] if start is not None and "elapsed" in obj else None)
        for tag, v in numbers(obj):
            if tag in (step_key, "time" if "time" in obj else None):
                continue
            out.setdefault(tag, []).append((step, wall, float(np.float32(v))))
    return out


def assert_same(got, exp, check_wall=True):
    assert sorted(got) == sorted(exp), f"tags {sorted(got)}, expected {sorted(exp)}"
    for tag in exp:
        g = [(s, v) for s, _, v in got[tag]]
        e = [(s, v) for s, _, v in exp[tag]]
        assert g == e, f"{tag}: {g}, expected {e}"
        if check_wall:
            for (_, gw, _), (_, ew, _) in zip(got[tag], exp[tag]):
                assert abs(gw - ew) <= 1e-6 * max(1.0, abs(ew)), f"{tag}: wall time {gw}, expected {ew}"


LEARN = [{"step": i, "version": 10 + i, "epoch": 1, "samples": 16, "reward_mean": 0.1 * i + 1 / 3,
          "accuracy": 0.25 * (i % 3), "k3": 1.2345678e-5 * i, "lag_max": None if i == 1 else i % 3,
          "elapsed": 2.5 * i, "note": "text", "flag": True} for i in range(1, 8)]


@case
def every_number_is_a_scalar_at_its_version_with_wall_time_from_start_plus_elapsed():
    d = os.path.join(TMP, "a")
    f = os.path.join(TMP, "learn.jsonl")
    with open(f, "w") as fh:
        fh.writelines(json.dumps(x) + "\n" for x in LEARN)
    rc, err = tb("--logdir", d, "--start", "1700000000.25", f)
    assert rc == 0, err
    assert os.listdir(d) == ["learn"], os.listdir(d)
    got = read_run(os.path.join(d, "learn"))
    exp = expected(LEARN, start=1700000000.25)
    assert "step" in got and "version" not in got and "note" not in got and "flag" not in got, sorted(got)
    assert_same(got, exp)


@case
def time_is_the_wall_time_nested_objects_are_key_slash_subkey_and_named_sources_are_runs():
    lines = [{"version": 4, "accuracy": 0.5, "pass@8": 0.75, "time": 1800000000.5, "wall_s": 3.25,
              "learner_samples": 64, "extra": {"a": 1, "b": {"c": 2.5}}},
             {"version": 8, "accuracy": 0.625, "pass@8": 0.875, "time": 1800000010.0, "wall_s": 12.75,
              "learner_samples": 128, "extra": {"a": 2, "b": {"c": -1}}}]
    f = os.path.join(TMP, "e.jsonl")
    with open(f, "w") as fh:
        fh.writelines(json.dumps(x) + "\n" for x in lines)
    d = os.path.join(TMP, "b")
    rc, err = tb("--logdir", d, "held=" + f)
    assert rc == 0, err
    got = read_run(os.path.join(d, "held"))
    assert "extra/b/c" in got and "time" not in got, sorted(got)
    assert_same(got, expected(lines))


@case
def standard_input_without_step_or_version_counts_lines():
    lines = [{"loss": 1.5 - 0.1 * i, "n": i} for i in range(5)]
    d = os.path.join(TMP, "c")
    rc, err = tb("--logdir", d, "-", input="".join(json.dumps(x) + "\n" for x in lines).encode())
    assert rc == 0, err
    got = read_run(os.path.join(d, "stdin"))
    assert_same(got, expected(lines), check_wall=False)


@case
def follow_reads_appended_lines_and_what_is_left_at_sigterm():
    f = os.path.join(TMP, "grow.jsonl")
    d = os.path.join(TMP, "f")
    p = subprocess.Popen([sys.executable, TB, "--logdir", d, "--follow", f], stderr=subprocess.PIPE)
    time.sleep(1.0)   # the file does not exist yet: waited for
    with open(f, "w") as fh:
        fh.write(json.dumps(LEARN[0]) + "\n")
        fh.flush()
        time.sleep(1.5)
        assert p.poll() is None, "tb.py --follow ended by itself"
        fh.write(json.dumps(LEARN[1]) + "\n" + json.dumps(LEARN[2]))   # the last without its newline
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=20)
    assert rc == 0, p.stderr.read().decode()
    assert_same(read_run(os.path.join(d, "grow")), expected(LEARN[:3]), check_wall=False)


@case
def follow_with_pid_stops_once_that_process_has_ended():
    f = os.path.join(TMP, "pid.jsonl")
    with open(f, "w") as fh:
        fh.writelines(json.dumps(x) + "\n" for x in LEARN[:2])
    parent = subprocess.Popen(["sleep", "1"])
    threading.Thread(target=parent.wait, daemon=True).start()   # reaped when it ends, as a shell would
    t0 = time.time()
    p = subprocess.run([sys.executable, TB, "--logdir", os.path.join(TMP, "p"), "--follow", "--pid", str(parent.pid), f],
                       stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 0 and time.time() - t0 < 20, (p.returncode, p.stderr.decode())
    assert_same(read_run(os.path.join(TMP, "p", "pid")), expected(LEARN[:2]), check_wall=False)


@case
def a_line_that_is_not_a_json_object_is_an_error_naming_file_and_line():
    f = os.path.join(TMP, "bad.jsonl")
    for bad in ("{\"step\": 1,", "[1, 2]"):
        with open(f, "w") as fh:
            fh.write(json.dumps(LEARN[0]) + "\n\n" + bad + "\n")
        rc, err = tb("--logdir", os.path.join(TMP, "x"), f)
        assert rc == 1 and f"{f} line 3:" in err, (rc, err)


@case
def usage_errors_exit_2():
    for args in ([], ["--logdir", TMP], ["x.jsonl"], ["--logdir", TMP, "--start", "soon", "x.jsonl"],
                 ["--logdir", TMP, "--bogus", "x.jsonl"], ["--logdir", TMP, "a=x", "a=y"],
                 ["--logdir", TMP, "--pid", "1", "x.jsonl"], ["--logdir", TMP, "--follow", "--pid", "x", "x.jsonl"]):
        rc, err = tb(*args)
        assert rc == 2 and "usage:" in err, (args, rc, err)
    rc, err = tb("--logdir", TMP, os.path.join(TMP, "absent.jsonl"))
    assert rc == 1 and "absent.jsonl: no such file" in err, (rc, err)


finish()
