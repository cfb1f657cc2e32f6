"""Checks of rl-learn's checkpoint directories (man/rl-learn.1, common/checkpoint/checkpoint.h),
read by hand and with safetensors, not by rlpipe: shared by test_learn_run.py
and test_faults.py.

A checkpoint root holds version directories vNNNNNN and a file `latest`
naming one of them; shapes are {tensor name: shape} of the model trained."""
import json
import os
import re
import struct

import numpy as np
from safetensors.numpy import load_file


def read_bytes(file):
    with open(file, "rb") as f:
        return f.read()


def latest(ckpt):
    with open(os.path.join(ckpt, "latest")) as f:
        return f.read()


def vdir(ckpt, v):
    return os.path.join(ckpt, f"v{v:06d}")


def versions(ckpt):
    """The version numbers of the vNNNNNN directories, ascending ([] without ckpt)."""
    names = os.listdir(ckpt) if os.path.isdir(ckpt) else []
    return sorted(int(n[1:]) for n in names if n[:1] == "v" and n[1:].isdigit())


def st_header(file):
    """The JSON header of a safetensors file, without its __metadata__."""
    with open(file, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def check_complete(ckpt, v, shapes):
    """ckpt/vNNNNNN is a complete version v of a model of these shapes: config.json,
    model.safetensors (F32, the same names and shapes, finite), optimizer.safetensors
    (NAME.exp_avg and NAME.exp_avg_sq of each, F32), state.json of version v.
    Returns the state.json."""
    d = vdir(ckpt, v)
    for f in ("config.json", "model.safetensors", "optimizer.safetensors", "state.json"):
        assert os.path.isfile(os.path.join(d, f)), f"{d}: no {f}"
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f)["vocab_size"] == shapes["model.embed_tokens.weight"][0], f"{d}/config.json"
    with open(os.path.join(d, "state.json")) as f:
        state = json.load(f)
    assert state["version"] == v, f"{d}/state.json: version {state['version']}, expected {v}"
    h = st_header(os.path.join(d, "model.safetensors"))
    assert {k: (t["dtype"], t["shape"]) for k, t in h.items()} == \
        {k: ("F32", list(s)) for k, s in shapes.items()}, f"{d}/model.safetensors: other tensors"
    w = load_file(os.path.join(d, "model.safetensors"))
    assert all(np.isfinite(t).all() for t in w.values()), f"{d}: weights not finite"
    o = st_header(os.path.join(d, "optimizer.safetensors"))
    want = {}
    for k, s in shapes.items():
        want[k + ".exp_avg"] = want[k + ".exp_avg_sq"] = ("F32", list(s))
    assert {k: (t["dtype"], t["shape"]) for k, t in o.items()} == want, f"{d}/optimizer.safetensors: other tensors"
    load_file(os.path.join(d, "optimizer.safetensors"))
    return state


def check_all_versions_complete(ckpt, shapes):
    """Every vNNNNNN directory is complete and `latest` names one of them: its version."""
    for v in versions(ckpt):
        check_complete(ckpt, v, shapes)
    name = latest(ckpt)
    assert re.fullmatch(r"v\d{6}\n", name) and int(name[1:]) in versions(ckpt), f"latest {name!r}"
    return int(name[1:])


def same_files(a, b, names=("model.safetensors", "optimizer.safetensors")):
    """The files names of directories a and b are the same bytes."""
    for n in names:
        assert read_bytes(os.path.join(a, n)) == read_bytes(os.path.join(b, n)), f"{a}/{n} and {b}/{n} differ"
