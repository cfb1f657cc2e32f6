"""rl-sync against an independent receiver (pushproto.py: the protocol of
lib/sync/push.h written in Python from its description): what arrives is the
checkpoint's tensors, bit for bit as f32, and as PyTorch's float32 -> bfloat16
/ float16 rounding for a receiver that asks for those; a receiver that holds
the version gets nothing; wrong tokens, models that do not fit and refused
pushes fail with exit 1 and a message naming the receiver; --watch pushes each
new version of a checkpoint root (written by rl-learn, or by hand the way
lib/checkpoint/checkpoint.c writes them), passes over versions that pile up, and ends
at --max-version, when the receivers go away, or on SIGTERM (man/rl-sync.1).
A version holding a LoRA adapter (written by PEFT: peft_adapter.py) goes out as
the adapter's tensors, bit for bit, with its config in the push message, to a
receiver that takes adapters, and fails, saying what to do, at one that does not.

Models are tiny (hidden 32, vocab 64): every push takes milliseconds; the
time goes to the waits of the watch cases (poll intervals of 0.1-0.2 s).
"""
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import pushproto  # noqa: E402
import rltest  # noqa: E402
import torch  # noqa: E402
from rltest import case  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

WORK = tempfile.mkdtemp(prefix="rlpipe-sync.", dir=os.environ.get("TMPDIR"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)
SYNC = os.path.join(rltest.BIN, "rl-sync")
TOKEN = b"0123456789abcdef-test-token"


def path(*names):
    return os.path.join(WORK, *names)


def model(name, **kw):
    d = path(name)
    args = dict(hidden=32, inter=48, layers=2, heads=2, kv_heads=1, vocab=64, seed=4)
    args.update(kw)
    llama_ref.random_model(d, **args)
    return d


MODEL = model("m")
WEIGHTS = load_file(os.path.join(MODEL, "model.safetensors"))
SHAPES = {k: tuple(v.shape) for k, v in WEIGHTS.items()}


def token_file(name, data=TOKEN):
    p = path(name)
    with open(p, "wb") as f:
        f.write(data + b"\n")
    os.chmod(p, 0o600)
    return p


def sock(name):
    return "unix:" + path(name + ".sock")


def sync(*args, timeout=60):
    p = subprocess.run([SYNC, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def sync_ok(*args):
    rc, err = sync(*args)
    assert rc == 0, f"rl-sync {' '.join(args)} exited {rc}: {err[-800:]}"
    return err


def start_sync(*args):
    return subprocess.Popen([SYNC, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish(proc, timeout=20):
    """Waits for a watching rl-sync to end by itself; (status, stderr)."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"rl-sync did not end within {timeout} s: {err.decode()[-800:]}")
    return proc.returncode, err.decode("utf-8", "replace")


def perturbed(v):
    """The weights of version v: WEIGHTS plus v * 1e-3 (exactly representable changes are not needed)."""
    return {k: (t + v * 1e-3).contiguous() for k, t in WEIGHTS.items()}


def write_version(root, v, weights=None, state=True, pointer="latest"):
    """root/vNNNNNN written as lib/checkpoint/checkpoint.c writes it: a temporary
    directory renamed into place, then `pointer` ('latest', or 'published' as
    rl-learn names a version whose optimizer state is still on its way)
    replaced by a rename."""
    os.makedirs(root, exist_ok=True)
    name = f"v{v:06d}"
    tmp = os.path.join(root, f".tmp-{name}-py")
    os.makedirs(tmp)
    shutil.copy(os.path.join(MODEL, "config.json"), tmp)
    save_file(weights if weights is not None else perturbed(v), os.path.join(tmp, "model.safetensors"),
              metadata={"format": "pt"})
    if state:
        with open(os.path.join(tmp, "state.json"), "w") as f:
            json.dump({"version": v}, f)
    os.rename(tmp, os.path.join(root, name))
    with open(os.path.join(root, f".{pointer}.tmp-py"), "w") as f:
        f.write(name + "\n")
    os.rename(os.path.join(root, f".{pointer}.tmp-py"), os.path.join(root, pointer))
    return os.path.join(root, name)


def same_bits(received, expected, name):
    want = expected.contiguous().numpy().tobytes()
    assert received == want, f"{name}: the bytes received differ from the file's"


def receiver(name, version=0, tensors=None, **kw):
    return pushproto.Receiver(sock(name), tensors or SHAPES, version=version, **kw)


PUSH_LINE = r"^rl-sync: v{v:06d} -> {addr}: [0-9.]+ kB in [0-9.]+ s \([0-9.]+ [kMG]?B/s\), receiver stall 1 us$"


# ---- one-shot pushes -------------------------------------------------------------------------

@case
def a_checkpoint_root_pushes_its_latest_version_bit_for_bit_over_unix():
    root = path("ck_unix")
    rc, _, err = rltest.run("rl-learn", "--init", MODEL, "--out", root, input=b"")
    assert rc == 0, f"rl-learn: {err}"
    vdir = write_version(root, 1)
    with receiver("one") as r:
        err = sync_ok(root, "--to", r.address)
        assert len(r.exchanges) == 1 and r.exchanges[0].kind == "pushed", r.exchanges
        ex = r.exchanges[0]
    assert ex.version == 1 and ex.push["checksum"] == "xxh3-64", ex.push
    file = load_file(os.path.join(vdir, "model.safetensors"))
    assert sorted(ex.raw) == sorted(file), f"tensors {sorted(ex.raw)}"
    for k, t in file.items():
        assert ex.dtypes[k] == "f32"
        same_bits(ex.raw[k], t, k)
    assert ex.bytes == sum(4 * t.numel() for t in file.values())
    lines = err.splitlines()
    assert re.match(PUSH_LINE.format(v=1, addr=re.escape(r.address)), lines[0]), lines[0]
    assert re.match(r"^rl-sync: 1 push, 0 failed, 0 already held, 0 versions skipped for newer ones, "
                    r"[0-9.]+ kB at [0-9.]+ [kMG]?B/s, [0-9.]+ s$", lines[1]), lines[1]


@case
def tcp_with_a_token_converts_to_the_dtypes_the_receiver_asks_for_as_torch_rounds():
    vdir = write_version(path("ck_tcp"), 3)
    file = load_file(os.path.join(vdir, "model.safetensors"))
    f16 = "model.layers.0.mlp.up_proj.weight"
    want = {k: (s, "f32" if k.endswith("norm.weight") else "f16" if k == f16 else "bf16") for k, s in SHAPES.items()}
    with pushproto.Receiver("tcp:127.0.0.1:0", want, version=2, token=TOKEN, dtype="bf16") as r:
        sync_ok(path("ck_tcp"), "--to", r.address, "--token-file", token_file("tok"))
        assert [e.kind for e in r.exchanges] == ["pushed"], r.exchanges
        ex = r.exchanges[0]
    for k, t in file.items():
        dt = want[k][1]
        assert ex.dtypes[k] == dt, f"{k}: sent as {ex.dtypes[k]}, asked for {dt}"
        expected = t if dt == "f32" else t.to(torch.bfloat16 if dt == "bf16" else torch.float16)
        assert ex.raw[k] == expected.view(torch.int32 if dt == "f32" else torch.int16).numpy().tobytes(), \
            f"{k}: not PyTorch's float32 -> {dt} rounding"


@case
def a_bf16_file_is_sent_as_it_lies_or_widened_exactly_to_f32():
    d = model("m_bf16", dtype="BF16", seed=5)
    file = load_file(os.path.join(d, "model.safetensors"))
    half = sorted(file)[::2]
    want = {k: (tuple(t.shape), "bf16" if k in half else "f32") for k, t in file.items()}
    with pushproto.Receiver(sock("bf16"), want, version=0) as r:
        sync_ok(d, "--as-version", "1", "--to", r.address)
        ex = r.pushes()[0]
    for k, t in file.items():
        got = ex.raw[k]
        if k in half:
            assert got == t.view(torch.int16).numpy().tobytes(), f"{k}: bf16 bytes changed on the way"
        else:
            same_bits(got, t.to(torch.float32), k)


@case
def a_receiver_holding_the_version_or_a_newer_one_gets_nothing():
    write_version(path("ck_held"), 4)
    with receiver("held", version=5) as r:
        err = sync_ok(path("ck_held"), "--to", r.address)
        r.wait(lambda x: x.exchanges)
        assert [e.kind for e in r.exchanges] == ["closed"] and r.exchanges[0].push is None, r.exchanges
    assert f"rl-sync: {r.address} already holds v000005\n" in err, err
    assert "0 pushes, 0 failed, 1 already held" in err, err


@case
def a_model_directory_without_state_json_is_version_0_unless_told():
    with receiver("v0") as r:
        err = sync_ok(MODEL, "--to", r.address)
        assert "already holds v000000 (SRC has no state.json, so it is version 0: give --as-version N)" in err, err
        sync_ok(MODEL, "--to", r.address, "--as-version", "7")
        assert r.pushes() and r.pushes()[0].version == 7 and r.version == 7, r.exchanges


@case
def a_wrong_token_is_refused_with_exit_1_naming_the_receiver():
    write_version(path("ck_tok"), 1)
    with pushproto.Receiver("tcp:127.0.0.1:0", SHAPES, token=TOKEN) as r:
        rc, err = sync(path("ck_tok"), "--to", r.address, "--token-file", token_file("bad", b"another-token-0123456"))
        assert rc == 1, f"exit {rc}: {err}"
        assert f"rl-sync: warning: v000001 not pushed: {r.address}: the receiver refused the push: " \
               "authentication failed: wrong token" in err, err
        assert [e.kind for e in r.exchanges] == ["auth"] and r.version == 0


@case
def a_receiver_that_wants_a_token_tells_a_sender_without_one():
    write_version(path("ck_notok"), 1)
    with receiver("needtok", token=TOKEN) as r:
        rc, err = sync(path("ck_notok"), "--to", r.address)
    assert rc == 1 and "the receiver requires authentication: give its token with --token-file" in err, err


@case
def a_model_that_does_not_fit_the_receiver_fails_naming_the_tensor_and_the_file():
    vdir = write_version(path("ck_fit"), 1)
    st = os.path.join(vdir, "model.safetensors")
    with receiver("fit", tensors=dict(SHAPES, **{"model.extra.weight": (4, 4)})) as r:
        rc, err = sync(path("ck_fit"), "--to", r.address)
        assert rc == 1 and f"the receiver needs tensor model.extra.weight, which is not in {st}" in err, err
    shapes = dict(SHAPES, **{"model.norm.weight": (33,)})
    with receiver("fit2", tensors=shapes) as r:
        rc, err = sync(path("ck_fit"), "--to", r.address)
        assert rc == 1 and f"tensor model.norm.weight is [32] in {st}, but the receiver's model has [33]" in err, err
        r.wait(lambda x: x.exchanges)
        assert all(e.kind == "closed" for e in r.exchanges) and r.version == 0, r.exchanges


@case
def a_refused_push_is_exit_1_with_the_receivers_reason():
    write_version(path("ck_ref"), 2)
    with receiver("refuse") as r:
        r.refuse = "standby buffer busy"
        rc, err = sync(path("ck_ref"), "--to", r.address)
        assert rc == 1 and f"{r.address}: the receiver refused the push: standby buffer busy" in err, err
        r.refuse, r.fail_result = None, "weights rejected after the checksum"
        rc, err = sync(path("ck_ref"), "--to", r.address)
        assert rc == 1 and "the receiver refused the push: weights rejected after the checksum" in err, err


@case
def a_receiver_that_is_not_listening_yet_is_tried_again_for_retry_seconds():
    write_version(path("ck_retry"), 1)
    proc = start_sync(path("ck_retry"), "--to", sock("late"), "--retry", "10", "--poll", "0.1")
    time.sleep(0.5)
    with receiver("late") as r:
        rc, err = finish(proc)
        assert rc == 0 and [e.kind for e in r.exchanges] == ["pushed"], (rc, err, r.exchanges)
    assert f"rl-sync: nobody listens at {sock('late')} yet; trying again for 10 s" in err, err
    t0 = time.monotonic()
    rc, err = sync(path("ck_retry"), "--to", sock("never"), "--retry", "0.5", "--poll", "0.1")
    assert rc == 1 and f"nobody listens at {sock('never')} (tried for 0.5 s)" in err, err
    assert 0.5 <= time.monotonic() - t0 < 5


@case
def a_slow_receiver_does_not_delay_the_others():
    write_version(path("ck_slow"), 1)
    with receiver("slow") as slow, receiver("fast") as fast:
        slow.delay = 1.5
        sync_ok(path("ck_slow"), "--to", slow.address, "--to", fast.address)
        s, f = slow.pushes()[0], fast.pushes()[0]
    assert f.ended < s.ended - 1.0, f"the fast receiver finished {s.ended - f.ended:.2f} s before the slow one"


# ---- --watch ---------------------------------------------------------------------------------

@case
def watch_pushes_each_new_version_and_ends_at_max_version():
    root = path("ck_watch")
    write_version(root, 0, WEIGHTS)
    with receiver("watch") as r:
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "0.2", "--max-version", "3")
        assert r.wait(lambda x: len(x.exchanges) >= 1), "no exchange for v000000"
        for v in (1, 2, 3):
            write_version(root, v)
            assert r.wait(lambda x: x.version == v), f"v{v} not pushed: {r.exchanges}"
        rc, err = finish(proc)
        assert [e.version for e in r.pushes()] == [1, 2, 3], r.exchanges
    assert rc == 0, err
    for v in (1, 2, 3):
        assert re.search(PUSH_LINE.format(v=v, addr=re.escape(r.address)), err, re.M), err
    assert re.search(r"^rl-sync: 3 pushes, 0 failed, 1 already held, 0 versions skipped", err, re.M), err


def kept_as(t, stored):
    """t (a float32 tensor) as a receiver keeping it as `stored` holds it, computed
    with PyTorch's roundings and numpy: bf16 and f16 to nearest even; int8/G:
    per group of G inputs of a row, s = max|x| / 127 and q = rint(x * (1 / s))
    clipped to ±127, all in float32, read back as q * s."""
    if stored == "f32":
        return t.double()
    if stored in ("bf16", "f16"):
        return t.to(torch.bfloat16 if stored == "bf16" else torch.float16).double()
    import numpy as np
    g = int(stored.split("/")[1])
    x = t.numpy().astype(np.float32).reshape(-1, t.shape[-1])
    out = np.empty_like(x)
    for c0 in range(0, x.shape[1], g):
        part = x[:, c0:c0 + g]
        s = (np.abs(part).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
        inv = np.where(s > 0, np.float32(1) / np.where(s > 0, s, 1), 0).astype(np.float32)
        q = np.clip(np.rint(part * inv), -127, 127).astype(np.float32)
        out[:, c0:c0 + g] = q * s
    return torch.from_numpy(out.reshape(t.shape)).double()


@case
def the_update_figures_are_those_of_the_weights_rounded_as_the_receiver_keeps_them():
    # v1 on the bf16 grid (a model stored in bf16), v2 = v1 moved by about a
    # bf16 step: part of the update rounds away at bf16, less at f16, int8's
    # errors are unbiased; the figures must be those of PyTorch's and numpy's
    # roundings over every weight (a tiny model is sampled whole)
    gen = torch.Generator().manual_seed(7)
    v1 = {k: t.to(torch.bfloat16).float() for k, t in WEIGHTS.items()}
    v2 = {k: (t + 0.002 * t.abs() * torch.randn(t.shape, generator=gen)).contiguous() for k, t in v1.items()}
    names = list(SHAPES)
    mats = [k for k in names if len(SHAPES[k]) == 2]
    stored = {k: "f32" for k in names}
    stored.update({k: "bf16" for k in mats})
    stored[mats[1]], stored[mats[2]] = "f16", "int8/16"
    wire = {k: (SHAPES[k], stored[k] if stored[k] in ("bf16", "f16") else "f32") for k in names}
    root = path("ck_update")
    write_version(root, 0, WEIGHTS)
    with pushproto.Receiver(sock("update"), wire, dtype="bf16") as r:
        r.stored = ",".join(stored[k] for k in names)
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "0.1", "--max-version", "2")
        assert r.wait(lambda x: len(x.exchanges) >= 1), "no exchange for v000000"
        for v, w in ((1, v1), (2, v2)):
            write_version(root, v, w)
            assert r.wait(lambda x: x.version == v), f"v{v} not pushed: {r.exchanges}"
        rc, err = finish(proc)
        first, second = [e.push for e in r.pushes()]
    assert rc == 0, err
    # v000000, which the receiver held, gave the sample of the first push's figures
    assert first["update_from"] == 0 and first["update_n"] == sum(t.numel() for t in WEIGHTS.values()), first
    d = torch.cat([(v2[k].double() - v1[k].double()).flatten() for k in names])
    e = torch.cat([(kept_as(v2[k], stored[k]) - kept_as(v1[k], stored[k])).flatten() for k in names])
    want = {"update_from": 1, "update_n": d.numel(), "update_moved": (d != 0).double().mean().item(),
            "update_changed": (e != 0).double().mean().item(), "update_norm": (e.norm() / d.norm()).item(),
            "update_along": (e.dot(d) / d.dot(d)).item()}
    for k, x in want.items():
        assert abs(second[k] - x) <= 1e-9 * max(1, abs(x)), f"{k}: sent {second[k]}, computed {x}"
    print(f"  at bf16 (and one f16, one int8 matrix): along {want['update_along']:.3f}, norm "
          f"{want['update_norm']:.3f}, changed {want['update_changed']:.3f} of the weights, moved "
          f"{want['update_moved']:.3f}")
    assert 0.3 < want["update_changed"] < 0.9 and want["update_moved"] > 0.99, "the update is not the mix intended"
    line = re.search(r"^rl-sync: v000002 -> .*; the update from v000001: along (\S+) \(norm (\S+)x the learner's; "
                     r"(\S+)% of the weights changed at bf16, (\S+)% in f32; (\S+) sampled\)$", err, re.M)
    assert line, err
    assert [float(x) for x in line.groups()[:4]] == [round(want["update_along"], 2), round(want["update_norm"], 2),
                                                       round(100 * want["update_changed"], 1),
                                                       round(100 * want["update_moved"], 1)], line.group(0)


@case
def a_receiver_losing_most_of_the_update_is_warned_of_once():
    # v0 on the bf16 grid and updates of an eighth of a bf16 step a version: at
    # bf16 nothing changes; the warning comes with the fifth version measured
    v = {0: {k: t.to(torch.bfloat16).float() for k, t in WEIGHTS.items()}}
    for i in range(1, 7):
        v[i] = {k: (t * (1 + 2.5e-4 * i) if t.dim() == 2 else t).contiguous() for k, t in v[0].items()}
    root = path("ck_lost")
    write_version(root, 0, v[0])
    wire = {k: (s, "bf16" if len(s) == 2 else "f32") for k, s in SHAPES.items()}
    with pushproto.Receiver(sock("lost"), wire, dtype="bf16") as r:
        r.stored = ",".join(dt for _, dt in wire.values())
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "0.1", "--max-version", "6")
        assert r.wait(lambda x: len(x.exchanges) >= 1), "no exchange for v000000"
        for i in range(1, 7):
            write_version(root, i, v[i])
            assert r.wait(lambda x: x.version == i), f"v{i} not pushed: {r.exchanges}"
        rc, err = finish(proc)
        pushes = [e.push for e in r.pushes()]
    assert rc == 0, err
    assert [p.get("update_along") for p in pushes] == [0.0] * 6, [p.get("update_along") for p in pushes]
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"rl-sync: warning: {r.address} keeps its weights at bf16, whose versions carry on average 0.00 of the "
        f"learner's update (the 5 from v000000 to v000005; the latest: 0.0% of the weights changed, "), err
    assert "sample at f16 or f32 (rl-sample(1), Precision)" in warnings[0], warnings[0]
    lines = err.splitlines()
    assert lines.index(warnings[0]) == next(i for i, x in enumerate(lines) if x.startswith("rl-sync: v000005 ->")) + 1, \
        "the warning does not follow the fifth version's line"


@case
def watch_passes_over_versions_that_pile_up_while_a_push_is_in_flight():
    root = path("ck_pile")
    write_version(root, 0, WEIGHTS)
    with receiver("pile") as r:
        r.delay = 1.0
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "0.2", "--max-version", "4")
        write_version(root, 1)
        assert r.wait(lambda x: x.active is not None and x.active.push is not None, 10), "v1 never started"
        for v in (2, 3, 4):
            write_version(root, v)
        rc, err = finish(proc)
        assert [e.version for e in r.pushes()] == [1, 4], r.exchanges
    assert rc == 0 and re.search(r"^rl-sync: 2 pushes, 0 failed, [01] already held, 2 versions skipped", err, re.M), err


@case
def watch_ends_when_every_receiver_it_reached_has_gone_away():
    root = path("ck_gone")
    write_version(root, 1)
    a, b = receiver("gone_a"), pushproto.Receiver("tcp:127.0.0.1:0", SHAPES, token=TOKEN)
    proc = start_sync("--watch", root, "--to", a.address, "--to", b.address, "--token-file", token_file("tok_g"),
                      "--poll", "0.1")
    assert a.wait(lambda x: x.version == 1) and b.wait(lambda x: x.version == 1), (a.exchanges, b.exchanges)
    a.close()
    time.sleep(0.5)
    assert proc.poll() is None, "rl-sync ended while a receiver still listened"
    b.close()
    rc, err = finish(proc, 10)
    assert rc == 0, err
    for x in (a, b):
        assert f"rl-sync: {x.address} has gone away" in err, err
    assert "rl-sync: every receiver it reached has gone away" in err, err


@case
def watch_follows_a_root_that_does_not_exist_yet_and_a_learner_writing_it():
    root = path("ck_learn")
    recs = [{"group": i // 2, "prompt_ids": [1 + i, 2], "ids": [3, 4 + i, 5], "reward": float(i % 2)} for i in range(8)]
    data = rltest.tmpfile("learn.rlr", rltest.write_stream(recs))
    with receiver("learn") as r:
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "0.1", "--max-version", "4")
        time.sleep(0.3)
        rc, _, err = rltest.run("rl-learn", "--init", MODEL, "--out", root, "--batch", "2", "--lr", "1e-3", data)
        assert rc == 0, err
        rc, err = finish(proc)
        last = r.pushes()[-1]
    assert rc == 0 and last.version == 4, (rc, err, r.exchanges)
    for k, t in load_file(os.path.join(root, "v000004", "model.safetensors")).items():
        same_bits(last.raw[k], t, k)


@case
def watch_sees_a_new_version_at_once_through_inotify_not_only_by_polling():
    root = path("ck_inotify")
    write_version(root, 1)
    with receiver("inotify") as r:
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "30", "--max-version", "2")
        assert r.wait(lambda x: x.version == 1, 10), r.exchanges
        t0 = time.monotonic()
        write_version(root, 2)
        assert r.wait(lambda x: x.version == 2, 10), r.exchanges
        took = time.monotonic() - t0
        rc, err = finish(proc)   # it ends itself once v2 is installed (a SIGTERM now could cut off its result)
    assert took < 5, f"v2 pushed {took:.1f} s after it was written (the poll interval is 30 s)"
    assert rc == 0 and re.search(r"^rl-sync: 2 pushes, 0 failed", err, re.M), (rc, err)


@case
def watch_pushes_a_version_as_soon_as_published_names_it_before_latest_does():
    root = path("ck_published")
    write_version(root, 1)
    with receiver("published") as r:
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "30", "--max-version", "2")
        assert r.wait(lambda x: x.version == 1, 10), r.exchanges
        write_version(root, 2, pointer="published")   # its weights written, latest still v000001
        assert r.wait(lambda x: x.version == 2, 10), f"v2 not pushed on 'published': {r.exchanges}"
        rc, err = finish(proc)
        got = r.pushes()[-1]
    assert rc == 0, err
    for name, t in perturbed(2).items():
        same_bits(got.raw[name], t, name)


@case
def watch_follows_latest_when_published_names_an_older_version():
    root = path("ck_pub_old")
    write_version(root, 1, pointer="published")
    write_version(root, 2)   # as a writer that knows nothing of 'published' goes on
    with receiver("pub_old") as r:
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "0.2", "--max-version", "2")
        assert r.wait(lambda x: x.version == 2, 10), r.exchanges
        rc, err = finish(proc)
    assert rc == 0 and [e.version for e in r.pushes()] == [2], (rc, err, r.exchanges)


@case
def a_sampler_with_the_f32_head_is_sent_its_output_layer_at_f32_and_the_other_matrices_at_bf16():
    """rl-sample --dtype bf16 --head f32 asks for its output layer (tied:
    the embedding) at f32, so that pushes keep it exact, and for every other
    matrix at bf16: what rl-sync sends weighs 4 bytes a parameter for the
    head and the norm weights, 2 for the rest. It installs the push between
    its two batches (--sync: v1 after the first, v2 after the last) and says
    head_dtype f32 in its header."""
    v0 = llama_ref.add_tiny_tokenizer(model("head0", vocab=448, tie=True))
    v1 = model("head1", vocab=448, tie=True, seed=5)
    shapes = {k: v.numel() for k, v in load_file(os.path.join(v1, "model.safetensors")).items()}
    want = sum(n * (4 if k == "model.embed_tokens.weight" or k.endswith("norm.weight") else 2)
               for k, n in shapes.items())
    kb = f"{want / 1e3:.1f} kB"
    prompts = path("head-prompts.jsonl")
    with open(prompts, "w") as f:
        f.write("".join(f'{{"prompt": "{i}+{i}="}}\n' for i in range(4)))
    out = path("head.rlr")
    s = subprocess.Popen([os.path.join(rltest.BIN, "rl-sample"), "--model", v0, "--dtype", "bf16", "--head", "f32",
                          "--listen", sock("head"), "--sync", "--batch", "2", "--max-prompts", "4",
                          "--max-new-tokens", "4", "--verifier", "none", "-o", out, prompts],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        err = sync_ok("--as-version", "1", "--retry", "20", v1, "--to", sock("head"))
        sync_ok("--as-version", "2", v1, "--to", sock("head"))   # --sync waits for the last batch's weights
        _, serr = s.communicate(timeout=60)
    finally:
        s.kill()
    serr = serr.decode("utf-8", "replace")
    assert s.returncode == 0, f"rl-sample exited {s.returncode}: {serr[-600:]}"
    assert re.search(rf"^rl-sync: v000001 -> {re.escape(sock('head'))}: {kb} in ", err, re.M), (kb, err)
    assert re.search(rf"^rl-sample: weights v1 installed from a push: {kb} in ", serr, re.M), (kb, serr)
    with open(out, "rb") as f:
        (hdr, recs, _), = rltest.read_stream(f.read())
    assert hdr["model"]["head_dtype"] == "f32" and hdr["model"]["dtype"] == "bf16", hdr["model"]
    assert [r["ver"][0] for r in recs] == [0, 0, 1, 1], [r["ver"] for r in recs]
    print(f"  {kb} pushed ({shapes['model.embed_tokens.weight']} head parameters at f32)")


@case
def watch_on_a_model_directory_is_an_error():
    rc, err = sync("--watch", MODEL, "--to", sock("x"))
    assert rc == 1 and f"{MODEL} is a model directory, not a checkpoint root" in err, err


# ---- adapters --------------------------------------------------------------------------------

def adapter_version(root, v, **kw):
    """root/vNNNNNN holding a PEFT adapter of MODEL as version v (rl-learn
    --lora-rank's layout: no config.json, no model.safetensors), latest naming it."""
    import peft_adapter
    os.makedirs(root, exist_ok=True)
    name = f"v{v:06d}"
    peft_adapter.write(os.path.join(root, name), MODEL, version=v, seed=v, **kw)
    with open(os.path.join(root, ".latest.tmp-py"), "w") as f:
        f.write(name + "\n")
    os.rename(os.path.join(root, ".latest.tmp-py"), os.path.join(root, "latest"))
    return os.path.join(root, name)


LORA_PUSH_LINE = (r"^rl-sync: v{v:06d} -> {addr}: [0-9.]+ kB of adapter in [0-9.]+ s \([0-9.]+ [kMG]?B/s\), "
                  r"merged in 0 us, receiver stall 1 us$")


@case
def an_adapter_version_goes_out_as_its_tensors_bit_for_bit_with_its_config():
    vdir = adapter_version(path("ck_lora"), 3, r=4, alpha=16.0, targets=("q_proj", "v_proj", "down_proj"))
    file = load_file(os.path.join(vdir, "adapter_model.safetensors"))
    with receiver("lora", adapter={k: tuple(t.shape) for k, t in file.items()}) as r:
        err = sync_ok(path("ck_lora"), "--to", r.address)
        assert [e.kind for e in r.exchanges] == ["pushed"], r.exchanges
        ex = r.exchanges[0]
    assert ex.version == 3 and ex.push["lora"] == {"r": 4, "alpha": 16.0, "rslora": False,
                                                   "targets": "q_proj,v_proj,down_proj"}, ex.push
    assert not any(k.startswith("update_") for k in ex.push), ex.push
    assert sorted(ex.raw) == sorted(file) and len(file) == 2 * 3 * 2, sorted(ex.raw)
    for k, t in file.items():
        assert ex.dtypes[k] == "f32", (k, ex.dtypes[k])
        same_bits(ex.raw[k], t, k)
    full = sum(4 * t.numel() for t in WEIGHTS.values())
    assert ex.bytes == sum(4 * t.numel() for t in file.values()) < full / 4, (ex.bytes, full)
    assert re.match(LORA_PUSH_LINE.format(v=3, addr=re.escape(r.address)), err.splitlines()[0]), err
    print(f"  adapter push {ex.bytes} bytes; the model's f32 tensors {full}")


@case
def a_receiver_that_takes_no_adapters_fails_the_push_saying_to_push_a_merged_model():
    vdir = adapter_version(path("ck_lora_old"), 2)
    with receiver("noadapters") as r:
        rc, err = sync(path("ck_lora_old"), "--to", r.address)
        r.wait(lambda x: x.exchanges)
        assert [e.kind for e in r.exchanges] == ["closed"] and r.version == 0, r.exchanges
    assert rc == 1 and f"{r.address}: {vdir} holds a LoRA adapter, and the receiver takes no adapter pushes " \
        "(an older rlpipe): push a model directory, the base with the adapter merged" in err, err


@case
def watch_pushes_adapter_versions_and_refuses_an_adapter_directory():
    root = path("ck_lora_watch")
    v1 = adapter_version(root, 1)
    shapes = {k: tuple(t.shape) for k, t in load_file(os.path.join(v1, "adapter_model.safetensors")).items()}
    with receiver("lorawatch", adapter=shapes) as r:
        proc = start_sync("--watch", root, "--to", r.address, "--poll", "0.1", "--max-version", "2")
        assert r.wait(lambda x: x.version == 1), r.exchanges
        v2 = adapter_version(root, 2)
        rc, err = finish(proc)
        assert rc == 0, err
        assert [e.version for e in r.pushes()] == [1, 2], r.exchanges
    for ex, d in zip(r.pushes(), (v1, v2)):
        for k, t in load_file(os.path.join(d, "adapter_model.safetensors")).items():
            same_bits(ex.raw[k], t, k)
    rc, err = sync("--watch", v1, "--to", sock("x"))
    assert rc == 1 and f"{v1} is a LoRA adapter directory, not a checkpoint root" in err, err


if __name__ == "__main__":
    rltest.finish()
