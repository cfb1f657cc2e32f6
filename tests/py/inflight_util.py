"""Helpers of test_inflight.py: tools started as process groups that a failed
case kills (nothing may hang CI), and a reader of a tool's raw msgpack output
that a test can pause or use as a tee. Pushes are sent with pushproto.py (an independent
implementation of the protocol) or bin/rl-sync."""
import os
import re
import signal
import subprocess
import threading
import time

import msgpack

import pushproto
import rltest


# ---- processes ---------------------------------------------------------------------

class Procs:
    """Tools started in a `with` block, each in its own process group with
    stderr in a file; leaving the block kills (SIGKILL) every group still
    running, so that a failed case leaves nothing behind."""

    def __init__(self, work):
        self.work, self.all = work, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.all:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdin, p.stdout):
                try:
                    if f:
                        f.close()
                except OSError:   # a pipe whose reader is gone
                    pass
        return False

    def stderr_tails(self, n=6):
        """The last n lines of every tool's stderr, to say where a pipeline got stuck."""
        out = []
        for p in self.all:
            lines = stderr_of(p).splitlines()[-n:]
            out.append(f"--- {p.label} (exit {p.poll()}):\n" + "\n".join(lines))
        return "\n".join(out)

    def start(self, tool, *args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, name=None):
        """bin/<tool> args; returns the Popen, with .errfile (its stderr) and .label."""
        label = name or f"{tool}{len(self.all)}"
        errfile = os.path.join(self.work, f"{label}.{len(self.all)}.err")
        with open(errfile, "wb") as err:
            p = subprocess.Popen([os.path.join(rltest.BIN, tool), *args], stdin=stdin, stdout=stdout,
                                 stderr=err, start_new_session=True)
        p.errfile, p.label = errfile, label
        self.all.append(p)
        return p


def stderr_of(p):
    with open(p.errfile, "rb") as f:
        return f.read().decode("utf-8", "replace")


def wait_for(cond, timeout, what):
    """Polls cond() until it is true (returns its value) or raises after timeout s."""
    t0 = time.time()
    while True:
        v = cond()
        if v:
            return v
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def wait_stderr(p, pattern, timeout=20):
    """Waits for a line of p's stderr matching the regex; returns the match.
    Fails at once if p exits without writing it."""
    rx = re.compile(pattern, re.M)

    def look():
        m = rx.search(stderr_of(p))
        if not m and p.poll() is not None:
            m = rx.search(stderr_of(p))
            assert m, f"{p.label} exited {p.returncode} without /{pattern}/ on stderr: {stderr_of(p)[-800:]}"
        return m
    return wait_for(look, timeout, f"/{pattern}/ from {p.label}: {stderr_of(p)[-400:]}")


def listen_address(p, timeout=20):
    """The ADDR of p's "listening for weights on ADDR" line."""
    return wait_stderr(p, r"listening for weights on (\S+)$", timeout).group(1)


def exit_status(p, timeout=30):
    """p's exit status; kills its group and fails after timeout s."""
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise AssertionError(f"{p.label} still running after {timeout} s: {stderr_of(p)[-600:]}")


def expect_exit_0(p, timeout=30):
    rc = exit_status(p, timeout)
    assert rc == 0, f"{p.label} exited {rc}: {stderr_of(p)[-800:]}"
    return stderr_of(p)


# ---- reading raw msgpack output as it comes ----------------------------------------------

class Reader:
    """A thread that reads the raw msgpack objects (rl-sample -u, rl-ratio -u)
    of a file object as they arrive. Clearing `gate` stops the reading: the
    pipe fills and the writer blocks."""

    def __init__(self, f, forward=None):
        """forward: a file object every byte read is written to as well (and
        closed at the end): the reader is then a tee between two tools."""
        self.f, self.forward, self.objs, self.gate = f, forward, [], threading.Event()
        self.gate.set()
        self.done, self.error = False, None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        up = msgpack.Unpacker(raw=False)
        fd = self.f.fileno()
        try:
            while True:
                self.gate.wait()
                b = os.read(fd, 1 << 16)
                if not b:
                    break
                if self.forward:
                    self.forward.write(b)
                    self.forward.flush()
                up.feed(b)
                self.objs.extend(up)
        except Exception as e:  # reported by the waits
            self.error = e
        if self.forward:
            try:
                self.forward.close()
            except OSError as e:
                self.error = self.error or e
        self.done = True

    def records(self):
        """The records read so far (header and trailer left out)."""
        return [o for o in list(self.objs) if "rlpipe" not in o and "rlpipe_end" not in o]

    def wait_records(self, n, timeout=30, cond=None):
        """Waits until n records have been read (or cond(records) holds)."""
        ok = cond or (lambda rs: len(rs) >= n)

        def look():
            assert self.error is None, f"reading the output: {self.error}"
            rs = self.records()
            if ok(rs):
                return rs or True
            assert not self.done, f"the output ended after {len(rs)} records"
            return None
        return wait_for(look, timeout, f"records ({len(self.records())} read)")

    def finish(self, timeout=30):
        """Waits for the end of the output; returns (header, records, trailer)."""
        self.gate.set()
        self.t.join(timeout)
        assert not self.t.is_alive(), f"the output did not end in {timeout} s"
        assert self.error is None, f"reading the output: {self.error}"
        objs = self.objs
        assert objs and "rlpipe" in objs[0], f"no header: {objs[:1]}"
        assert "rlpipe_end" in objs[-1], f"no trailer: the stream was not closed properly ({len(objs)} objects)"
        recs = objs[1:-1]
        assert not any("rlpipe" in o or "rlpipe_end" in o for o in recs), "more than one member"
        assert objs[-1]["count"] == len(recs), f"trailer count {objs[-1]['count']}, {len(recs)} records"
        return objs[0], recs, objs[-1]


def refusals(err):
    """(reason, version held) of each "push refused" warning in rl-sample's stderr."""
    return re.findall(r"^rl-sample: warning: push refused: (.*); keeping weights v(\d+)$", err, re.M)


def refused_push(proc, addr, tensors, i, what, token, version=1, **kw):
    """Sends the push that pushproto.push(addr, tensors, version, token, **kw)
    makes to the receiver proc (rl-sample --listen), which must refuse it as its
    refusal number i (0-based): its warning's (reason, version held)."""
    res = pushproto.push(addr, tensors, version, token, **kw)
    assert not res.ok, f"push {what} was accepted: {res}"
    wait_for(lambda: len(refusals(stderr_of(proc))) > i, 20, f"the warning about push {what}")
    return refusals(stderr_of(proc))[i]
