#!/usr/bin/env python3
"""tb.py — JSON lines of metrics (rl-learn --metrics, rl-ratio --metrics,
lib/rl-run.sh's eval.jsonl) as TensorBoard event files, live.

    tb.py --logdir DIR [--follow [--pid PID]] [--start T] SOURCE...
    rl-learn ... --metrics - | tb.py --logdir DIR -

A SOURCE is FILE, NAME=FILE, or - (standard input, NAME "stdin"); NAME
defaults to FILE's name less ".jsonl". Each source is a TensorBoard run,
DIR/NAME, so that the same key of two sources (rl-learn's training accuracy,
the evaluator's held-out accuracy) is drawn in one chart.

Each line is one JSON object; every number in it (a nested object's as
KEY/SUBKEY; not booleans, null or strings) becomes a scalar whose tag is
its key, at the step "version" (else "step", else the line's number, from
1), with the wall time "time" (Unix seconds), else T + "elapsed" with
--start T, else the time the line is read. The keys taken for the step and
the wall time are not written as scalars. TensorBoard keeps a scalar as a
float32 (simple_value).

--follow: read the files as they grow (one that does not exist yet is
waited for) until SIGTERM or SIGINT, then read what is left, write it, and
exit 0; standard input is read to its end. --pid PID: also stop so once
process PID has ended (lib/rl-run.sh's, should it be killed). Without it: read each source to
its end. A line that is not a JSON object is an error naming the file and
line (exit 1); a usage error exits 2.

The writer is TensorBoard's own EventFileWriter with its Event and Summary
protocol buffers: only the tensorboard package, which anyone who watches
TensorBoard has; torch's SummaryWriter would add torch's import (seconds)
for the same records.
"""
import json
import math
import os
import queue
import signal
import sys
import threading
import time

try:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError as e:
    sys.stderr.write(f"tb.py: error: TensorBoard's writer is missing ({e}): pip install tensorboard\n")
    sys.exit(1)

STEP_KEYS = ("version", "step")


def usage(msg):
    sys.stderr.write(f"tb.py: {msg}\nusage: tb.py --logdir DIR [--follow [--pid PID]] [--start T] SOURCE...\n")
    sys.exit(2)


def die(msg):
    sys.stderr.write(f"tb.py: error: {msg}\n")
    sys.exit(1)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def scalars(obj, prefix=""):
    """(tag, value) of every number in obj, nested objects' as KEY/SUBKEY."""
    for k, v in obj.items():
        if isinstance(v, dict):
            yield from scalars(v, f"{prefix}{k}/")
        elif is_number(v):
            yield prefix + k, float(v)


def event_of(obj, lineno, start):
    """The Event of one metrics line: (step, wall time, [(tag, value)])."""
    step_key = next((k for k in STEP_KEYS if isinstance(obj.get(k), int) and not isinstance(obj.get(k), bool)), None)
    step = obj[step_key] if step_key else lineno
    if is_number(obj.get("time")):
        wall, used = float(obj["time"]), {step_key, "time"}
    elif start is not None and is_number(obj.get("elapsed")):
        wall, used = start + float(obj["elapsed"]), {step_key}
    else:
        wall, used = time.time(), {step_key}
    return step, wall, [(t, v) for t, v in scalars(obj) if t not in used]


class Source:
    """One input: its name, where it is, its writer, and what is read of it."""

    def __init__(self, name, path, logdir):
        self.name, self.path = name, path
        self.dir = os.path.join(logdir, name)
        self.writer, self.f, self.pending, self.lineno, self.ended = None, None, b"", 0, False
        self.lines = None
        if path == "-":   # standard input, on a thread of its own: the files are polled meanwhile
            self.lines = queue.Queue()
            threading.Thread(target=self._read_stdin, daemon=True).start()

    def _read_stdin(self):
        for line in sys.stdin.buffer:
            self.lines.put(line)
        self.lines.put(None)

    def new_lines(self, last):
        """The complete lines that came since the last call; with last, also
        a final line without its newline (the file is complete)."""
        if self.lines is not None:
            out = []
            while not self.ended:
                try:
                    line = self.lines.get(block=last, timeout=None)
                except queue.Empty:
                    break
                if line is None:
                    self.ended = True
                else:
                    out.append(line)
            return out
        if self.f is None:
            try:
                self.f = open(self.path, "rb")
            except FileNotFoundError:
                return []
            except OSError as e:
                die(f"{self.path}: {e.strerror}")
        data = self.pending + self.f.read()
        lines = data.split(b"\n")
        self.pending = lines.pop()
        if last and self.pending.strip():
            lines.append(self.pending)
            self.pending = b""
        return [x + b"\n" for x in lines]

    def write(self, lines, start):
        for raw in lines:
            self.lineno += 1
            if not raw.strip():
                continue
            where = f"{'(stdin)' if self.path == '-' else self.path} line {self.lineno}"
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as e:
                die(f"{where}: not JSON ({e})")
            if not isinstance(obj, dict):
                die(f"{where}: not a JSON object")
            step, wall, values = event_of(obj, self.lineno, start)
            if not values:
                continue
            if self.writer is None:
                os.makedirs(self.dir, exist_ok=True)
                self.writer = EventFileWriter(self.dir)
            self.writer.add_event(Event(wall_time=wall, step=step, summary=Summary(
                value=[Summary.Value(tag=t, simple_value=v) for t, v in values])))
        if self.writer is not None and lines:
            self.writer.flush()   # live: visible at TensorBoard's next reload

    def close(self):
        if self.writer is not None:
            self.writer.close()


def main(argv):
    logdir, follow, start, pid, specs = None, False, None, None, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--logdir", "--start", "--pid"):
            if i + 1 >= len(argv):
                usage(f"{a} needs a value")
            if a == "--logdir":
                logdir = argv[i + 1]
            elif a == "--pid":
                if not argv[i + 1].isdigit() or int(argv[i + 1]) < 1:
                    usage(f"--pid: expected a process id, got {argv[i + 1]!r}")
                pid = int(argv[i + 1])
            else:
                try:
                    start = float(argv[i + 1])
                except ValueError:
                    usage(f"--start: expected Unix seconds, got {argv[i + 1]!r}")
                if not math.isfinite(start):
                    usage(f"--start: expected Unix seconds, got {argv[i + 1]!r}")
            i += 2
            continue
        if a == "--follow":
            follow = True
        elif a in ("-h", "--help"):
            sys.stdout.write(__doc__)
            return 0
        elif a.startswith("--"):
            usage(f"unknown option {a}")
        else:
            specs.append(a)
        i += 1
    if not logdir:
        usage("--logdir DIR is required")
    if not specs:
        usage("no SOURCE")
    if pid is not None and not follow:
        usage("--pid applies to --follow")
    named = []
    for s in specs:
        name, eq, path = s.partition("=")
        if not eq:
            path, name = s, ("stdin" if s == "-" else os.path.basename(s).removesuffix(".jsonl"))
        if not name or not path or name in (n for n, _ in named) or "/" in name or name in (".", ".."):
            usage(f"SOURCE {s!r}: each needs a name of its own (NAME=FILE), without '/'")
        named.append((name, path))
    if sum(1 for _, path in named if path == "-") > 1:
        usage("standard input can be one SOURCE only")
    for _, path in named:
        if path != "-" and not follow and not os.path.exists(path):
            die(f"{path}: no such file")
    sources = [Source(name, path, logdir) for name, path in named]

    stop = [not follow]
    def on_signal(signum, frame):
        stop[0] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    files = [x for x in sources if x.path != "-"]
    while True:
        last = stop[0]
        for x in files:
            x.write(x.new_lines(last), start)
        for x in sources:
            if x.path == "-":
                x.write(x.new_lines(last or not files), start)
        if last or (not files and all(x.ended for x in sources)):
            break
        time.sleep(0.5)
        if pid is not None and not alive(pid):
            stop[0] = True
    for x in sources:
        x.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
