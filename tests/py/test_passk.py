"""rl-cat --stats --pass-at: pass@k and maj@k over the groups of a stream,
against references written here (man/rl-cat.1, lib/records/passk.h).

  - pass@k is 1 - C(n-c, k) / C(n, k) per group (math.comb, exact integers),
    averaged over the groups with n >= k; the others counted as skipped;
  - maj@k: the majority of the non-empty "pred"s of a group's first k
    samples, a tie to the pred that reached the count first, solved when
    the first sample with that pred has reward > 0;
  - a sample is correct when its reward > 0 (the accuracy of --stats);
  - bad input: exit 1 naming the record and the field; bad usage: exit 2.
"""
import json
import math
import random
from fractions import Fraction

import rltest
from rltest import case, finish, write_stream


def rlcat(*args, input=None):
    rc, out, err = rltest.run("rl-cat", "-q", *args, input=input)
    assert rc == 0, f"rl-cat {' '.join(args)}: exit {rc}: {err[-400:]}"
    return json.loads(out)


def pass_at_ref(recs, k):
    """(mean pass@k over the groups with n >= k, groups with n < k)."""
    vals, skipped = [], 0
    for g in rltest.groups(recs):
        n, c = len(g), sum(1 for r in g if r["reward"] > 0)
        if n < k:
            skipped += 1
        else:
            vals.append(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))
    return (float(sum(vals) / len(vals)) if vals else None), skipped


def maj_at_ref(recs, k):
    solved, counted = 0, 0
    for g in rltest.groups(recs):
        if len(g) < k:
            continue
        counted += 1
        counts, reached = {}, {}
        for i, r in enumerate(g[:k]):
            p = r.get("pred", "")
            if p:
                counts[p] = counts.get(p, 0) + 1
                reached[(p, counts[p])] = i
        if not counts:
            continue
        top = max(counts.values())
        winner = min((p for p in counts if counts[p] == top), key=lambda p: reached[(p, top)])
        solved += next(r for r in g[:k] if r.get("pred") == winner)["reward"] > 0
    return solved / counted if counted else None


def random_stream(seed, groups=60, nmax=20):
    """Groups of 1..nmax samples with rewards in {-1, 0, 0.5, 1} and preds
    from a small alphabet (many ties), some absent or empty."""
    rnd = random.Random(seed)
    recs, gid = [], 0
    for _ in range(groups):
        gid += rnd.randint(1, 3)
        n, p_ok = rnd.randint(1, nmax), rnd.random()
        for _ in range(n):
            r = {"group": gid, "reward": rnd.choice([1.0, 0.5]) if rnd.random() < p_ok else rnd.choice([0.0, -1.0])}
            u = rnd.random()
            if u < 0.85:
                r["pred"] = rnd.choice("abcd")
            elif u < 0.92:
                r["pred"] = ""
            recs.append(r)
    return recs


KS = [1, 2, 3, 5, 8, 16, 20]


def check_against_reference(recs, got, ks):
    for k in ks:
        exp, skipped = pass_at_ref(recs, k)
        if exp is None:
            assert f"pass@{k}" not in got, got
        else:
            assert abs(got[f"pass@{k}"] - exp) <= 1e-12, f"pass@{k}: {got[f'pass@{k}']!r}, expected {exp!r}"
            m = maj_at_ref(recs, k)
            assert got[f"maj@{k}"] == m, f"maj@{k}: {got[f'maj@{k}']!r}, expected {m!r}"
        assert got.get(f"pass@{k}_skipped", 0) == skipped, f"pass@{k}_skipped: {got.get(f'pass@{k}_skipped')}, expected {skipped}"


@case
def pass_at_and_maj_at_equal_the_reference_on_random_streams():
    worst = 0.0
    for seed in range(8):
        recs = random_stream(seed)
        got = rlcat("--stats", "--json", "--pass-at", ",".join(map(str, KS)), input=write_stream(recs, frame_every=7))
        check_against_reference(recs, got, KS)
        worst = max(worst, max(abs(got[f"pass@{k}"] - pass_at_ref(recs, k)[0]) for k in KS if f"pass@{k}" in got))
    print(f"# worst |pass@k - math.comb reference| over 8 streams: {worst:.2e}")


@case
def pass_at_of_large_groups_is_stable():
    # n = 1000, c = 3: C(997, k) / C(1000, k) in floats of the product form
    recs = [{"group": 0, "reward": float(i < 3)} for i in range(1000)]
    recs += [{"group": 1, "reward": float(i % 2)} for i in range(600)]
    got = rlcat("--stats", "--json", "--pass-at", "1,10,100,500", input=write_stream(recs))
    for k in (1, 10, 100, 500):
        exp, _ = pass_at_ref(recs, k)
        assert abs(got[f"pass@{k}"] - exp) <= 1e-12, (k, got[f"pass@{k}"], exp)


@case
def pass_at_1_is_the_mean_of_the_groups_accuracies():
    recs = [{"group": g, "reward": float(i < g)} for g in range(1, 5) for i in range(4)]
    got = rlcat("--stats", "--json", "--pass-at", "1", input=write_stream(recs))
    assert abs(got["pass@1"] - (1 + 2 + 3 + 4) / 16) <= 1e-15, got


@case
def maj_at_k_breaks_a_tie_for_the_pred_that_reached_the_count_first():
    # preds a b b a: a and b reach 2 votes at the 4th and 3rd sample: b wins,
    # and the first sample that voted b is wrong
    recs = [{"group": 7, "reward": r, "pred": p} for r, p in ((1.0, "a"), (0.0, "b"), (0.0, "b"), (1.0, "a"))]
    got = rlcat("--stats", "--json", "--pass-at", "2,4", input=write_stream(recs))
    assert got["maj@4"] == 0.0 and got["maj@2"] == 1.0 and got["pass@4"] == 1.0, got


@case
def equal_groups_apart_are_two_problems():
    recs = [{"group": 1, "reward": 1.0}, {"group": 2, "reward": 0.0}, {"group": 1, "reward": 0.0}]
    got = rlcat("--stats", "--json", "--pass-at", "1", input=write_stream(recs))
    assert got["groups"] == 3 and abs(got["pass@1"] - 1 / 3) <= 1e-15, got


@case
def without_pred_there_is_no_maj_at_k_and_table_says_the_skipped_groups():
    recs = [{"group": g, "reward": 1.0} for g in (0, 0, 1)]
    got = rlcat("--stats", "--json", "--pass-at", "2", input=write_stream(recs))
    assert got["pass@2"] == 1.0 and got["pass@2_skipped"] == 1 and "maj@2" not in got, got
    rc, out, err = rltest.run("rl-cat", "-q", "--stats", "--pass-at", "2", input=write_stream(recs))
    lines = out.decode().splitlines()
    assert rc == 0 and any(x.split()[:2] == ["pass@2", "1"] for x in lines) and \
        any(x.split()[:2] == ["pass@2_skipped", "1"] for x in lines), out.decode()


@case
def a_record_without_group_or_reward_or_with_a_pred_not_a_string_is_an_error():
    for bad, what in (({"reward": 0.0}, 'field "group" is missing'), ({"group": 0}, 'field "reward" is missing'),
                      ({"group": 0, "reward": 1.0, "pred": 3}, 'field "pred" is not a string')):
        rc, out, err = rltest.run("rl-cat", "--stats", "--pass-at", "1",
                                  input=write_stream([{"group": 0, "reward": 1.0}, bad]))
        assert rc == 1 and what in err and "record 1" in err, (rc, err)


@case
def bad_pass_at_lists_are_usage_errors():
    for arg in ("0", "1,1", "x", "1,", "2,,3", "1000001", ",".join(str(k) for k in range(1, 18))):
        rc, out, err = rltest.run("rl-cat", "--stats", "--pass-at", arg, input=b"")
        assert rc == 2 and "--pass-at" in err, (arg, rc, err)
    rc, out, err = rltest.run("rl-cat", "--pass-at", "1", input=b"")
    assert rc == 2 and "--pass-at applies to --stats" in err, err


finish()
