"""Checks of rl-learn's checkpoint directories (man/rl-learn.1, lib/checkpoint/checkpoint.h),
read by hand and with safetensors, not by rlpipe: shared by test_learn_run.py
and test_faults.py.

A checkpoint root holds version directories vNNNNNN, a file `latest` naming
the newest complete one and a file `published` naming the newest whose
weights are written; shapes are {tensor name: shape} of the model trained."""
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


def check_weights(ckpt, v, shapes):
    """ckpt/vNNNNNN holds what a sampler loads of version v of a model of these
    shapes: config.json, model.safetensors (F32, the same names and shapes,
    finite), state.json of version v. Returns the state.json."""
    d = vdir(ckpt, v)
    for f in ("config.json", "model.safetensors", "state.json"):
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
    return state


def check_complete(ckpt, v, shapes):
    """ckpt/vNNNNNN is a complete version v: check_weights, and optimizer.safetensors
    (NAME.exp_avg and NAME.exp_avg_sq of each, F32). Returns the state.json."""
    state = check_weights(ckpt, v, shapes)
    d = vdir(ckpt, v)
    assert os.path.isfile(os.path.join(d, "optimizer.safetensors")), f"{d}: no optimizer.safetensors"
    o = st_header(os.path.join(d, "optimizer.safetensors"))
    want = {}
    for k, s in shapes.items():
        want[k + ".exp_avg"] = want[k + ".exp_avg_sq"] = ("F32", list(s))
    assert {k: (t["dtype"], t["shape"]) for k, t in o.items()} == want, f"{d}/optimizer.safetensors: other tensors"
    load_file(os.path.join(d, "optimizer.safetensors"))
    return state


def check_all_versions_complete(ckpt, shapes):
    """`latest` names a vNNNNNN directory, which is complete, as is every older
    one; a newer one (a writer killed between publishing its weights and writing
    its optimizer state) holds the weights, and `published`, when present, names
    latest or a newer one. Returns latest's version."""
    name = latest(ckpt)
    assert re.fullmatch(r"v\d{6}\n", name) and int(name[1:]) in versions(ckpt), f"latest {name!r}"
    last = int(name[1:])
    for v in versions(ckpt):
        (check_complete if v <= last else check_weights)(ckpt, v, shapes)
    pub = os.path.join(ckpt, "published")
    if os.path.exists(pub):
        p = read_bytes(pub).decode()
        assert re.fullmatch(r"v\d{6}\n", p) and int(p[1:]) in versions(ckpt) and int(p[1:]) >= last, \
            f"published {p!r}, latest {name!r}"
    return last


def same_files(a, b, names=("model.safetensors", "optimizer.safetensors")):
    """The files names of directories a and b are the same bytes."""
    for n in names:
        assert read_bytes(os.path.join(a, n)) == read_bytes(os.path.join(b, n)), f"{a}/{n} and {b}/{n} differ"
