"""Injected faults: rl-learn killed by SIGKILL at random moments,
disks that fill up under rl-learn, rl-sample and rl-cat, and pushes that are
cut off, damaged, old or unauthorised. What must hold after each: a
checkpoint's `latest` names a complete version that rl-learn loads, and
--resume ends on the bytes of an uninterrupted run; a full disk is an error
that names the file and the reason, and what it left is never taken for
complete; a receiver keeps its weights and its work, and says why it refused.

Models are tiny random ones (llama_ref.random_model) so that a step takes
milliseconds; most of the time goes to the fsyncs of checkpoints. The disk
is a small tmpfs: mounted directly as root, or, for another user, inside a
user namespace (this file runs itself again under `unshare -rm`); without
either the disk-full cases are skipped.
"""
import atexit
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Another user runs this file again as root of a user namespace with a mount
# namespace of its own, where it may mount a tmpfs; where that is refused the
# disk-full cases are skipped.
if __name__ == "__main__" and os.geteuid() != 0 and "RLPIPE_FAULTS_USERNS" not in os.environ:
    try:
        can = subprocess.run(["unshare", "-rm", "true"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL).returncode == 0
    except FileNotFoundError:
        can = False
    os.environ["RLPIPE_FAULTS_USERNS"] = "1"
    if can:
        sys.stdout.flush()
        os.execvp("unshare", ["unshare", "-rm", sys.executable, *sys.argv])

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_check  # noqa: E402
import inflight_util as iu  # noqa: E402
from ckpt_check import latest, read_bytes, vdir, versions  # noqa: E402
import llama_ref  # noqa: E402
import pushproto  # noqa: E402
import rltest  # noqa: E402
from rltest import case  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

WORK = tempfile.mkdtemp(prefix="rlpipe-faults.", dir=os.environ.get("TMPDIR"))
atexit.register(shutil.rmtree, WORK, True)
LEARN = os.path.join(rltest.BIN, "rl-learn")
VOCAB = 96


def path(*names):
    return os.path.join(WORK, *names)


def rollouts(groups, seed):
    """Groups of 2 rollout records (rewards 0 and 1, so that every step
    changes the weights), prompts of 1-4 and completions of 1-8 tokens."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        for k in range(2):
            n = rng.randint(1, 8)
            out.append({"id": len(out), "group": g, "prompt_ids": [rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))],
                        "ids": [rng.randrange(VOCAB) for _ in range(n)], "reward": float(k), "ver": [0] * n})
    return out


def learn(*args):
    return rltest.run("rl-learn", *args)


def learn_ok(*args):
    rc, _, err = learn(*args)
    assert rc == 0, f"rl-learn {' '.join(args)} exited {rc}: {err[-600:]}"
    return err


MODEL = path("m")
llama_ref.random_model(MODEL, hidden=48, inter=80, layers=2, heads=4, kv_heads=2, vocab=VOCAB, logit_scale=2.0,
                       gain=1.2, seed=3)
MODEL_SHAPES = {k: v.shape for k, v in load_file(os.path.join(MODEL, "model.safetensors")).items()}


def check_all_versions_complete(ckpt):
    return ckpt_check.check_all_versions_complete(ckpt, MODEL_SHAPES)


# ---- checkpoint directories -------------------------------------------------------------

def check_loads(ckpt, step, src):
    """rl-learn itself loads latest: --resume (weights and optimizer) at a
    --max-steps already reached takes no step and writes nothing; at step 0
    (--max-steps must be 1 or more) --init from it into a scratch directory."""
    if step > 0:
        err = learn_ok("--resume", "--out", ckpt, "--max-steps", str(step), src)
        assert re.search(r"^rl-learn: 0 steps \(versions (\d+) to \1\)", err, re.M), err
    else:
        scratch = path("c_scratch")
        shutil.rmtree(scratch, ignore_errors=True)
        learn_ok("--init", ckpt, "--out", scratch, "-q", os.devnull)


def same_version(a, b):
    """Two version directories hold the same files, byte for byte."""
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b)), f"{a}: {names}; {b}: {sorted(os.listdir(b))}"
    ckpt_check.same_files(a, b, names)


def names(ckpt):
    return os.listdir(ckpt) if os.path.isdir(ckpt) else []


def leftovers(ckpt, pid):
    """What a writer killed in ckpt_write left (checkpoint.h): its .tmp-vNNNNNN
    (a version being written), .tmp-old-* (one being removed), .latest.tmp
    (latest being replaced), or a version newer than latest (killed between
    the two renames). Empty when the kill came outside a write."""
    found = []
    for n in names(ckpt):
        if n.startswith(".tmp-old-") and n.endswith(f"-{pid}"):
            found.append("removing an old version")
        elif n.startswith(".tmp-v") and n.endswith(f"-{pid}"):
            found.append("writing a version")
        elif n == f".latest.tmp-{pid}":
            found.append("replacing latest")
    try:
        if versions(ckpt) and versions(ckpt)[-1] > int(latest(ckpt)[1:]):
            found.append("between the renames")
    except FileNotFoundError:
        if versions(ckpt):
            found.append("between the renames")
    return found


# ---- 1. kill -9 -------------------------------------------------------------------------------

KILL_STEPS = 60
KILL_SRC = rltest.tmpfile("kill.rlr", rltest.write_stream(rollouts(KILL_STEPS, seed=9)))
KILL_OPTS = ("--batch", "2", "--lr", "1e-2", "--keep", "3", "-q")


def wait_until(cond, p, timeout=20):
    """Polls cond() every 0.5 ms until it is true: True, or False when p ended first."""
    t0 = time.time()
    while not cond():
        if p.poll() is not None:
            return False
        assert time.time() - t0 < timeout, f"waited {timeout} s"
        time.sleep(0.0005)
    return True


def version_now(ckpt):
    try:
        return int(latest(ckpt)[1:])
    except (FileNotFoundError, ValueError):
        return -1


@case
def kill_9_at_60_random_moments_leaves_a_loadable_latest_and_resume_ends_on_the_uninterrupted_bytes():
    ref = path("c_kill_ref")
    t0 = time.time()
    learn_ok("--init", MODEL, "--out", ref, *KILL_OPTS, KILL_SRC)
    step_s = (time.time() - t0) / (KILL_STEPS + 1)
    rng = random.Random(19)
    # A third of the kills come at a random moment of start-up (loading, or
    # writing version 0), a third at a random moment of a step after a
    # version is out, a third at a random moment of a checkpoint write (after
    # its .tmp- directory appeared). A run killed that way that reaches the
    # last version is finished with --resume and compared, and the next
    # kills go to a new one.
    where = {"start-up": 0, "step": 0, "write": 0}
    inside = {}
    kills = in_writes = 0
    runs = []
    while kills < 60:
        c = path(f"c_kill{len(runs)}")
        runs.append(c)
        while kills < 60 and version_now(c) < KILL_STEPS:
            v = version_now(c)
            moment = ("start-up", "step", "write")[kills % 3]
            args = ["--resume"] if v >= 0 else ["--init", MODEL]
            p = subprocess.Popen([LEARN, *args, "--out", c, *KILL_OPTS, KILL_SRC], stderr=subprocess.PIPE)
            target = v + rng.randint(0, 1)
            mine = f"-{p.pid}"
            if moment == "start-up":
                time.sleep(rng.uniform(0, 2 * step_s))
            elif moment == "step" and wait_until(lambda: version_now(c) >= max(target, 0), p):
                time.sleep(rng.uniform(0, step_s))
            elif moment == "write" and wait_until(lambda: version_now(c) >= target, p) and \
                    wait_until(lambda: any(n.startswith(".tmp-v") and n.endswith(mine) for n in names(c)), p):
                time.sleep(rng.uniform(0, 0.8 * step_s))
            p.kill()
            _, err = p.communicate()
            assert p.returncode in (0, -signal.SIGKILL), f"exit {p.returncode}: {err.decode()[-300:]}"
            kills += p.returncode == -signal.SIGKILL
            where[moment] += p.returncode == -signal.SIGKILL
            left = leftovers(c, p.pid)
            in_writes += bool(left)
            for what in left:
                inside[what] = inside.get(what, 0) + 1
            if os.path.exists(os.path.join(c, "latest")):
                v = check_all_versions_complete(c)
                check_loads(c, ckpt_check.check_complete(c, v, MODEL_SHAPES)["step"], KILL_SRC)
        learn_ok("--resume", "--out", c, *KILL_OPTS, KILL_SRC)
        assert check_all_versions_complete(c) == KILL_STEPS
        same_version(vdir(ref, KILL_STEPS), vdir(c, KILL_STEPS))
        assert not [n for n in os.listdir(c) if n.startswith(".tmp") or n.startswith(".latest.tmp")], os.listdir(c)
    print(f"  {kills} kills ({where}) in {len(runs)} runs of {KILL_STEPS} steps, {in_writes} inside a checkpoint "
          f"write, which left {inside}; a step takes {step_s * 1e3:.0f} ms")
    assert in_writes >= 15 and inside.get("writing a version", 0) >= 10, f"too few kills inside writes: {inside}"


# ---- 2. full disks ------------------------------------------------------------------------------

class Tmpfs:
    """A tmpfs of `size` bytes mounted at WORK/name (unmounted on leaving the
    block), with a file `ballast` of its free space but `free` bytes, so that
    removing it makes room again."""

    def __init__(self, name, size, free=None):
        self.dir = path(name)
        os.makedirs(self.dir, exist_ok=True)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", self.dir],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode:
            raise OSError(" ".join(p.stdout.decode(errors="replace").split()) or f"mount exited {p.returncode}")
        self.ballast = os.path.join(self.dir, "ballast")
        if free is not None:
            with open(self.ballast, "wb") as f:
                left = os.statvfs(self.dir).f_bavail * os.statvfs(self.dir).f_frsize - free
                f.write(b"\0" * max(left, 0))

    def make_room(self):
        os.unlink(self.ballast)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["umount", self.dir], check=True)
        return False


def tmpfs_refused():
    """Why no tmpfs can be mounted here, or None."""
    try:
        with Tmpfs("probe", 65536):
            pass
    except (OSError, subprocess.CalledProcessError) as e:
        return f"cannot mount a tmpfs ({e}){'' if os.geteuid() == 0 else '; unshare -rm was refused'}"
    return None


TMPFS_REFUSED = tmpfs_refused()


def disk_case(fn):
    """A case that needs a tmpfs: SKIP (with the reason) when none can be mounted."""
    if TMPFS_REFUSED:
        print(f"SKIP {fn.__name__}: {TMPFS_REFUSED}", flush=True)
        return fn
    return case(fn)


def version_bytes(d):
    """Bytes a version directory takes on a tmpfs (whole 4 KiB pages per file)."""
    return sum(-(-os.path.getsize(os.path.join(d, n)) // 4096) * 4096 for n in os.listdir(d))


FULL_SRC = rltest.tmpfile("full.rlr", rltest.write_stream(rollouts(6, seed=4)))
FULL_OPTS = ("--batch", "2", "--lr", "1e-2", "--keep", "0", "-q")


@disk_case
def a_disk_full_during_the_fourth_checkpoint_is_an_error_naming_the_file_and_resume_after_making_room_ends_bit_exact():
    ref = path("c_full_ref")
    learn_ok("--init", MODEL, "--out", ref, *FULL_OPTS, FULL_SRC)
    size = version_bytes(vdir(ref, 0))
    with Tmpfs("full_learn", 64 << 20, free=int(3.5 * size)) as fs:
        c = os.path.join(fs.dir, "ckpt")
        rc, _, err = learn("--init", MODEL, "--out", c, *FULL_OPTS, FULL_SRC)
        assert rc == 1, f"exit {rc}: {err[-400:]}"
        assert err.startswith("rl-learn: error: ") and err.count("\n") == 1, err
        assert f"{c}/" in err and "No space left on device" in err, err
        # versions 0-2 fit; the fourth (v000003) did not, and left nothing
        assert check_all_versions_complete(c) == 2 and versions(c) == [0, 1, 2], (latest(c), os.listdir(c))
        assert not [n for n in os.listdir(c) if n.startswith(".tmp") or n.startswith(".latest.tmp")], os.listdir(c)
        check_loads(c, 2, FULL_SRC)
        fs.make_room()
        learn_ok("--resume", "--out", c, *FULL_OPTS, FULL_SRC)
        assert check_all_versions_complete(c) == 6
        same_version(vdir(ref, 6), vdir(c, 6))
    print(f"  a version takes {size} bytes; the disk had room for 3.5")


@disk_case
def a_metrics_file_on_a_full_disk_is_an_error_and_keeps_only_whole_lines():
    src = rltest.tmpfile("full_metrics.rlr", rltest.write_stream(rollouts(12, seed=6)))
    c, ref = path("c_full_metrics"), path("c_full_metrics_ref")
    learn_ok("--init", MODEL, "--out", ref, *FULL_OPTS, src)
    with Tmpfs("full_metrics", 1 << 20, free=4096) as fs:   # one page: 6 or 7 lines of about 600 bytes
        met = os.path.join(fs.dir, "metrics.jsonl")
        rc, _, err = learn("--init", MODEL, "--out", c, *FULL_OPTS, "--metrics", met, src)
        assert rc == 1, f"exit {rc}: {err[-400:]}"
        assert err == f"rl-learn: error: write error: {met}: No space left on device\n", err
        text = read_bytes(met)
        steps = [json.loads(x)["step"] for x in text.splitlines()]   # whole lines only
        k = len(steps)
        assert text.endswith(b"\n") and steps == list(range(1, k + 1)) and 1 <= k < 12, text[-200:]
        # the step whose line did not fit has its checkpoint
        assert check_all_versions_complete(c) == k + 1
        fs.make_room()
        learn_ok("--resume", "--out", c, *FULL_OPTS, "--metrics", met, src)
        steps = [json.loads(x)["step"] for x in read_bytes(met).splitlines()]
        assert steps == list(range(1, k + 1)) + list(range(k + 2, 13)), steps
    same_version(vdir(ref, 12), vdir(c, 12))
    print(f"  {k} metrics lines fitted")


SAMPLER = path("sampler")
llama_ref.random_model(SAMPLER, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True,
                       logit_scale=2.5, max_pos=512, seed=1)
llama_ref.add_tiny_tokenizer(SAMPLER)
PROMPTS = rltest.tmpfile("prompts.jsonl", "".join(
    json.dumps({"prompt": f"{i * 37 % 100}+{i * 11 % 50}=", "answer": str(i * 37 % 100 + i * 11 % 50)}) + "\n"
    for i in range(64)).encode())


def check_truncated(file):
    """rl-cat --check finds the stream in file truncated: exit 1, saying so."""
    rc, _, err = rltest.run("rl-cat", "--check", file)
    assert rc == 1 and "truncated" in err, f"rl-cat --check {file}: exit {rc}: {err[-300:]}"


@disk_case
def rl_sample_and_rl_cat_writing_to_a_full_disk_fail_naming_the_file_and_leave_a_stream_read_as_truncated():
    with Tmpfs("full_out", 1 << 20, free=16384) as fs:
        out = os.path.join(fs.dir, "rollouts.rlr")
        rc, _, err = rltest.run("rl-sample", "--model", SAMPLER, "-n", "2", "--slots", "16", "--max-new-tokens", "24",
                                "--max-prompts", "2000", "-o", out, PROMPTS)
        assert rc == 1, f"rl-sample exit {rc}: {err[-300:]}"
        assert re.search(rf"^rl-sample: error: .*{re.escape(out)}: No space left on device$", err, re.M), err[-300:]
        check_truncated(out)
        os.unlink(out)
        # rl-cat: JSON lines packed into records, then records recompressed
        out = os.path.join(fs.dir, "packed.rlr")
        lines = rltest.tmpfile("many.jsonl", b"".join(
            json.dumps({"prompt": f"{i} {random.Random(i).random()}", "answer": str(i)}).encode() + b"\n"
            for i in range(20000)))
        rc, _, err = rltest.run("rl-cat", "--pack", "--kind", "prompts", "-l", "1", "-o", out, lines)
        assert rc == 1 and re.search(rf"^rl-cat: error: .*{re.escape(out)}: No space left on device$", err, re.M), \
            f"rl-cat --pack exit {rc}: {err[-300:]}"
        check_truncated(out)
        os.unlink(out)
        whole = path("whole.rlr")
        rltest.run("rl-cat", "--pack", "--kind", "prompts", "-o", whole, lines, check=True)
        rc, _, err = rltest.run("rl-cat", "-u", "-o", out, whole)
        assert rc == 1 and re.search(rf"^rl-cat: error: .*{re.escape(out)}: No space left on device$", err, re.M), \
            f"rl-cat -u exit {rc}: {err[-300:]}"
        check_truncated(out)


# ---- 3. pushes that go wrong ------------------------------------------------------------------

PUSHED = path("pushed")   # the weights of the pushes: another random model of the sampler's shape
llama_ref.random_model(PUSHED, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True,
                       logit_scale=2.5, max_pos=512, seed=2)
PUSHED_TENSORS = load_file(os.path.join(PUSHED, "model.safetensors"))
REF = llama_ref.Llama(SAMPLER)
TOL = 1e-4   # nats: the sampler's log-probs against the float64 reference (as test_inflight.py)



def logp_error(r):
    lp = REF.logprobs(r["prompt_ids"], r["ids"], 1.0)
    return max(abs(a - b) for a, b in zip(r["logp"], lp))


@case
def pushes_cut_flipped_old_or_unauthorised_are_each_refused_and_reported_and_the_receiver_keeps_its_weights():
    token = b"a shared secret of 32 characters"
    tok = rltest.tmpfile("token", token + b"\n")
    os.chmod(tok, 0o600)
    rng = random.Random(5)
    with iu.Procs(WORK) as P:
        s = P.start("rl-sample", "--model", SAMPLER, "-n", "2", "--slots", "4", "--max-new-tokens", "16",
                    "--epochs", "0", "-u", "--listen", "tcp:127.0.0.1:0", "--token-file", tok, PROMPTS,
                    stdout=subprocess.PIPE, name="rl-sample")
        out = iu.Reader(s.stdout)
        addr = iu.listen_address(s)
        out.wait_records(2)
        probe = pushproto.push(addr, PUSHED_TENSORS, 1, token, close_after="hello")
        assert probe.ok and probe.hello["version"] == 0, probe
        parts = pushproto.stream_parts(probe.hello, PUSHED_TENSORS, 1, auth=True)
        # (what pushproto does, what the warning says): cuts and flips at random
        # offsets of each part; a cut after the whole MAC is a sender that only
        # wanted the hello (rl-sync does that when the version is held), not a fault
        cut = r"closed by the peer after|broke off"
        bad = []
        for part, cuts, flips in (("mac", 2, 2), ("length", 1, 2), ("message", 2, 3), ("data", 4, 3),
                                  ("checksum", 1, 1)):
            a, z = parts[part]
            for at in rng.sample(range(max(a, 1), z), cuts):
                bad.append((dict(cut_at=at), part, cut))
            for at in rng.sample(range(a, z), flips):
                bad.append((dict(flip_at=at, timeout=2), part, None))
        bad += [(dict(version=0, force=True), "", r"version 0 is not newer than the weights held \(v0\)"),
                (dict(token=b"not the secret the receiver has"), "", r"authentication failed \(wrong token\)"),
                (dict(token=None), "", r"authentication failed \(wrong token\)")]
        seen = []
        for i, (kw, part, why) in enumerate(bad):
            got, held = iu.refused_push(s, addr, PUSHED_TENSORS, i, f"{kw} ({part})", **dict(dict(token=token), **kw))
            assert held == "0" and (why is None or re.search(why, got)), f"push {kw} ({part}): '{got}; v{held}'"
            assert s.poll() is None, f"rl-sample exited {s.returncode} after push {kw}"
            seen.append(f"{part or list(kw)[0]} {list(kw.values())[0]}: {got}")
        print("  " + "\n  ".join(seen))
        # rl-sync refuses to push over tcp without the token before it connects
        sync = P.start("rl-sync", "--as-version", "1", PUSHED, "--to", addr, name="rl-sync-no-token")
        assert iu.exit_status(sync, 30) == 2 and "needs --token-file" in iu.stderr_of(sync), iu.stderr_of(sync)
        # generation went on at v0, with v0's log-probs
        n = len(out.records())
        before = out.wait_records(n + 6)
        assert all(set(r["ver"]) == {0} for r in before), "a refused push changed the weights"
        for r in before[-4:]:
            assert logp_error(r) <= TOL, f"record {r['id']}: |logp - v0 reference| {logp_error(r):.3g}"
        # and a good push is still taken
        good = pushproto.push(addr, PUSHED_TENSORS, 1, token)
        assert good.ok and good.result["version"] == 1, good
        out.wait_records(0, cond=lambda rs: sum(set(r["ver"]) == {1} for r in rs) >= 2)
        s.send_signal(signal.SIGTERM)
        out.finish()
        err = iu.expect_exit_0(s)
    assert re.search(rf"; weights v0 to v1, 1 pushes installed, {len(bad)} refused,", err), err[-300:]


if __name__ == "__main__":
    rltest.finish()
