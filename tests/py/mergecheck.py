"""Helpers of tests/cli/merge.sh and merge_inflight.sh: sources of known
groups for rl-cat --merge, written at once or slowly, and a reader of its
output that checks the rules every merge keeps (rl-cat(1) MERGING), built on
rltest.py's reference reader (nothing of rlpipe's own code).

A source here is records whose "id" says where they come from: source s,
record i has id s * 1000 + i, and "src": s; the groups are runs of "group"."""
import sys
import time

from rltest import header, member_bytes, read_stream, rollout, write_stream


def records(s, sizes):
    """Source s: groups of the given sizes (group j has `sizes[j]` records)."""
    out, i = [], 0
    for j, n in enumerate(sizes):
        for _ in range(n):
            out.append(dict(rollout(i, group=j), id=s * 1000 + i, src=s))
            i += 1
    return out


def stream(s, sizes, group_size=4, **kw):
    """The bytes of source s as one member whose header says "sampling": {"group": group_size}."""
    hdr = header(sampling={"group": group_size}) if group_size else header()
    return write_stream(records(s, sizes), hdr=hdr, **kw)


def write_slowly(path, s, sizes, pauses, group_size=4, kind="rollouts"):
    """Writes source s to path (a named pipe) as raw msgpack, group by group,
    sleeping pauses[j] seconds after group j (0 when not given). A reader that
    goes away (a merge that refused the stream) ends it quietly."""
    objs = member_bytes(records(s, sizes), header(kind, sampling={"group": group_size}))
    try:
        with open(path, "wb", buffering=0) as f:
            f.write(objs[0])
            i = 1
            for j, n in enumerate(sizes):
                f.write(b"".join(objs[i:i + n]))
                i += n
                time.sleep(pauses[j] if j < len(pauses) else 0)
            f.write(objs[-1])
    except BrokenPipeError:
        pass


def merged(path):
    """(header, groups) of a merge's output: one member, its groups in order,
    each {"group", "source", "source_group", "ids", "src"}. Checks that every
    group is consecutive, numbered 0, 1, ... in order, and of one source."""
    members = read_stream(open(path, "rb").read())
    assert len(members) == 1, f"{len(members)} members, expected 1"
    h, recs, t = members[0]
    assert t["count"] == len(recs), f"trailer count {t['count']}, {len(recs)} records"
    groups = []
    for r in recs:
        if not groups or groups[-1]["group"] != r["group"]:
            groups.append({"group": r["group"], "source": r["merge_source"], "source_group": r["source_group"],
                           "ids": [], "src": r["src"]})
        g = groups[-1]
        assert (r["merge_source"], r["source_group"], r["src"]) == (g["source"], g["source_group"], g["src"]), \
            f"output group {g['group']} mixes records of two source groups: {r['id']} in {g}"
        g["ids"].append(r["id"])
    assert [g["group"] for g in groups] == list(range(len(groups))), \
        f"groups not numbered 0, 1, ... in order: {[g['group'] for g in groups]}"
    return h, groups


def check_whole(groups, sources, dropped=()):
    """Every group of every source (sources: {src: sizes}) is out exactly
    once, whole and in its order, but the (src, j) listed in dropped; each
    source's groups in their order. Returns [(src, j)] in output order."""
    order = [(g["src"], g["source_group"]) for g in groups]
    want = {(s, j) for s, sizes in sources.items() for j in range(len(sizes))} - set(dropped)
    assert len(order) == len(set(order)), f"a group out twice: {order}"
    assert set(order) == want, f"missing {sorted(want - set(order))}, unexpected {sorted(set(order) - want)}"
    for g in groups:
        s, j = g["src"], g["source_group"]
        start = sum(sources[s][:j])
        assert g["ids"] == [s * 1000 + start + k for k in range(sources[s][j])], f"group {(s, j)}: ids {g['ids']}"
    for s in sources:
        js = [j for (t, j) in order if t == s]
        assert js == sorted(js), f"source {s}: its groups out of order {js}"
    return order


def check_rounds(order, sources, n, dropped=()):
    """order (check_whole's) is in rounds of n groups of each source that
    still has groups: round r holds group j of source s exactly when j // n == r."""
    left = {s: [j for j in range(len(sizes)) if (s, j) not in dropped] for s, sizes in sources.items()}
    i, r = 0, 0
    while i < len(order):
        want = {(s, j) for s, js in left.items() for j in js if j // n == r}
        got = set(order[i:i + len(want)])
        assert got == want, f"round {r} (groups {i}..): {sorted(got)}, expected {sorted(want)}"
        i += len(want)
        r += 1
    return r


if __name__ == "__main__":   # python mergecheck.py PIPE S SIZES PAUSES [GROUP_SIZE [KIND]]: write_slowly
    a = sys.argv[1:]
    write_slowly(a[0], int(a[1]), [int(x) for x in a[2].split(",")], [float(x) for x in a[3].split(",") if x],
                 *([int(a[4])] if len(a) > 4 else []), *a[5:6])
