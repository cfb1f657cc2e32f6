"""The library's folders are its layers (doc/design.md §8), and this keeps
them so, from the sources and from the built objects (nm):

  - an include names its folder, and goes downward only: each layer includes
    from the layers the table LOWER gives it, never from a sibling or above;
    the backends (model/cpu, model/cuda) and the ranks' collectives (parallel)
    see model/ops.h and nothing else of the model;
  - the objects of the library form no cycle (object A uses a symbol that B
    defines, B one that A defines, directly or around a loop);
  - each tool links only the layers it uses: rl-cat the leaves, records,
    sync (sockets, the token and the record-stream connections of --merge and
    --to) and cli, with no model, no backend and no OpenBLAS; rl-sync the leaves,
    records, checkpoint files, sync and cli, with no arithmetic of the model;
    the stages link no other stage, with one exception: rl-ratio weighs
    tokens with the formulas of learn/objective.h (the TIS weight), so
    lib/ratio may include learn/objective.h and rl-ratio's binary may hold
    the code of learn/objective.o, and nothing else of learn/ (objective.c
    depends on the leaves only).
"""
import glob
import os
import re
import subprocess

from rltest import BIN, ROOT, case, finish

BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
LIB = os.path.join(ROOT, "lib")

# What each layer may include besides itself (the leaves are lib/*.h).
LOWER = {
    "leaves": set(),
    "records": {"leaves"},
    "checkpoint": {"leaves", "records"},
    "tokenizer": {"leaves", "records"},
    "template": {"leaves", "records", "tokenizer"},
    "model": {"leaves", "records", "checkpoint"},
    "model/cpu": {"leaves", "model/ops.h"},
    "model/cuda": {"leaves", "model/ops.h"},
    "parallel": {"leaves", "model/ops.h"},
    "sync": {"leaves", "records", "checkpoint", "model"},
    "sample": {"leaves", "records", "checkpoint", "tokenizer", "template", "model", "sync"},
    "ratio": {"leaves", "records", "checkpoint", "model", "sync", "learn/objective.h"},
    "learn": {"leaves", "records", "checkpoint", "tokenizer", "template", "model", "parallel"},
    "cli": {"leaves", "records", "checkpoint", "tokenizer", "template", "model", "sync"},
}

# The layers each tool's binary may hold code of (a name with a file,
# "learn/objective", allows that one object of its layer).
LINKS = {
    "rl-cat": {"leaves", "records", "sync", "cli"},
    "rl-sync": {"leaves", "records", "checkpoint", "sync", "cli"},
    "rl-sample": {"leaves", "records", "checkpoint", "tokenizer", "template", "model", "model/cpu", "model/cuda", "sync", "sample",
                  "cli"},
    "rl-ratio": {"leaves", "records", "checkpoint", "tokenizer", "template", "model", "model/cpu", "model/cuda", "sync", "ratio",
                 "cli", "learn/objective"},
    "rl-learn": {"leaves", "records", "checkpoint", "tokenizer", "template", "model", "model/cpu", "model/cuda", "parallel", "learn",
                 "cli"},
}


def layer_of(rel):
    """The layer of a path under lib/ ("records/reader.h" -> "records")."""
    parts = rel.split("/")
    if len(parts) == 1:
        return "leaves"
    if parts[0] == "model" and len(parts) > 2:
        return "model/" + parts[1]
    return parts[0]


def sources():
    for path in glob.glob(os.path.join(LIB, "**", "*"), recursive=True):
        if path.endswith((".c", ".h", ".cu")):
            yield os.path.relpath(path, LIB)


@case
def includes_name_their_folder_and_go_downward():
    bad = []
    for rel in sources():
        here = layer_of(rel)
        with open(os.path.join(LIB, rel)) as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'#include "([^"]+)"', line)
                if not m:
                    continue
                inc = m.group(1)
                if not os.path.exists(os.path.join(LIB, inc)):
                    bad.append(f"{rel}:{n}: {inc} is not lib/{inc}: an include names its folder")
                    continue
                there = layer_of(inc)
                if there != here and there not in LOWER[here] and inc not in LOWER[here]:
                    bad.append(f"{rel}:{n}: {here} includes {inc} ({there})")
    assert not bad, "; ".join(bad[:20])


def library_objects():
    """The objects built from today's sources (not those a moved source left)."""
    objs = [os.path.join(BUILD, "obj", "lib", os.path.splitext(rel)[0] + ".o") for rel in sources()
            if not rel.endswith(".h")]
    objs = [o for o in objs if os.path.exists(o)]
    assert objs, f"no objects under {BUILD}/obj/lib (make BUILD=...)"
    return objs


def defined_and_used(objs):
    """{symbol: object defining it}, {object: symbols it uses}."""
    defs, uses = {}, {o: set() for o in objs}
    for o in objs:
        out = subprocess.run(["nm", "-g", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 2 and f[0] == "U":
                uses[o].add(f[1])
            elif len(f) == 3 and f[1] in "TDBRVW":
                defs[f[2]] = o
    return defs, uses


@case
def library_objects_form_no_cycle():
    objs = library_objects()
    defs, uses = defined_and_used(objs)
    graph = {o: {defs[s] for s in uses[o] if s in defs and defs[s] != o} for o in objs}
    # Tarjan's strongly connected components, iteratively.
    index, low, on, stack, cycles, counter = {}, {}, set(), [], [], [0]
    for root in objs:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(os.path.relpath(w, os.path.join(BUILD, "obj", "lib")))
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))
    assert not cycles, f"cycles between objects: {cycles}"


@case
def each_tool_links_only_its_layers():
    objs = library_objects()
    defs, _ = defined_and_used(objs)
    obj = {s: os.path.splitext(os.path.relpath(o, os.path.join(BUILD, "obj", "lib")))[0] for s, o in defs.items()}
    layer = {s: layer_of(o) for s, o in obj.items()}
    bad = []
    for tool, allowed in LINKS.items():
        out = subprocess.run(["nm", "--defined-only", os.path.join(BIN, tool)], capture_output=True, text=True,
                             check=True).stdout
        held = {}
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[2] in layer:
                held.setdefault(obj[f[2]] if obj[f[2]] in allowed else layer[f[2]], f[2])
        for extra in sorted(set(held) - allowed):
            bad.append(f"{tool} links {extra} (e.g. {held[extra]})")
        assert "records" in held and "leaves" in held, f"{tool}: no library symbols found: is it stripped?"
    assert not bad, "; ".join(bad)


@case
def record_and_sync_tools_need_no_openblas():
    for tool in ("rl-cat", "rl-sync"):
        dyn = subprocess.run(["readelf", "-d", "--dyn-syms", os.path.join(BIN, tool)], capture_output=True,
                             text=True, check=True).stdout
        assert "openblas" not in dyn.lower() and "sgemm" not in dyn, f"{tool} links OpenBLAS"


finish()
