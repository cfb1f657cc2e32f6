"""In-flight weight updates (doc/design.md §5): rl-sample and rl-ratio take
pushed weights while they work, every token says which weights produced it,
broken pushes change nothing, and --sync / --max-lag bound the staleness the
learner measures.

Two tiny random models of one configuration (llama_ref.random_model, the
tiny tokenizer) are the weights v0 and v1; references are the float64
PyTorch model of llama_ref.py (nothing of rlpipe's own code), at 1e-4 nats
as in test_sample.py. Pushes are sent by bin/rl-sync, or, when they must
misbehave, by pushproto.py (an independent implementation of the protocol).
Every process runs in its own process group with a timeout, and is killed
when a case fails: nothing may hang CI.

Adapter pushes (section 6): a LoRA adapter of v0 written by PEFT
(peft_adapter.py), pushed by rl-sync into running receivers, leaves them with
the weights of the tool started with --model v0 --adapter DIR, bit for bit
(their records are compared byte for byte), which the float64 reference of
PEFT's own merge_and_unload confirms at 1e-4 nats; adapters that do not fit
are refused, naming the tensor, and the weights stay.
"""
import io
import json
import msgpack
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inflight_util as iu  # noqa: E402
import llama_ref  # noqa: E402
import rltest  # noqa: E402
from rltest import case  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

WORK = rltest.TMP.name   # removed at exit, sockets included
TOL = 1e-4               # nats: sampler and scorer log-probs against the float64 reference
FAR = 0.05               # nats: "clearly not" that model's log-probs (they differ by ~1 per token)
# rewards 0/1 that differ within groups (the parity of the request line's
# length), so that learner steps change the weights
VERIFIER = (f"{sys.executable} -c 'import sys\n"
            "for line in iter(sys.stdin.readline, \"\"): print(len(line) % 2, flush=True)'")


def path(*names):
    return os.path.join(WORK, *names)


def make_model(name, seed):
    d = path(name)
    llama_ref.random_model(d, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True,
                           logit_scale=2.5, max_pos=512, seed=seed)
    return llama_ref.add_tiny_tokenizer(d)


V0, V1 = make_model("v0", 1), make_model("v1", 2)
REF = {V0: llama_ref.Llama(V0), V1: llama_ref.Llama(V1)}
V1_TENSORS = load_file(os.path.join(V1, "model.safetensors"))


def prompts(name, n):
    lines = [json.dumps({"prompt": f"{i * 37 % 100}+{i * 11 % 50}=", "answer": str(i * 37 % 100 + i * 11 % 50)})
             for i in range(n)]
    return rltest.tmpfile(name, ("\n".join(lines) + "\n").encode())


PROMPTS = prompts("prompts.jsonl", 64)


def ref(model_dir):
    if model_dir not in REF:
        REF[model_dir] = llama_ref.Llama(model_dir)
    return REF[model_dir]


def logp_error(r, model_dir, key="logp", tokens=None):
    """max |r[key] - reference log-probs of model_dir| over the tokens (all, or those listed)."""
    lp = ref(model_dir).logprobs(r["prompt_ids"], r["ids"], 1.0)
    tokens = range(len(r["ids"])) if tokens is None else tokens
    return max(abs(r[key][t] - lp[t]) for t in tokens)


def summary_pushes(err, tool="rl-sample"):
    """(first version, last version, installed, refused) of the summary line."""
    m = re.search(rf"^{tool}: .*; weights v(\d+) to v(\d+), (\d+) pushes installed, (\d+) refused, swaps stalled",
                  err, re.M)
    assert m, f"no summary line with pushes: {err[-600:]}"
    return tuple(int(x) for x in m.groups())


def check_groups(recs, group):
    """Records of whole groups, contiguous, ids 0..n-1; ver as long as ids and never decreasing."""
    assert sorted(r["id"] for r in recs) == list(range(len(recs))), "record ids are not 0..n-1"
    for i in range(0, len(recs), group):
        g = {r["group"] for r in recs[i:i + group]}
        assert len(g) == 1 and len(recs[i:i + group]) == group, f"records {i}..{i + group - 1}: groups {g}"
    for r in recs:
        v = r["ver"]
        assert len(v) == len(r["ids"]) == len(r["logp"]) and len(v) > 0, f"record {r['id']}: lengths differ"
        assert all(a <= b for a, b in zip(v, v[1:])), f"record {r['id']}: ver decreases: {v}"


def metrics(file):
    with open(file) as f:
        return [json.loads(line) for line in f]


# ---- 1. a push during generation --------------------------------------------------------

def push_mid_generation(sock):
    """One rl-sample run into which rl-sync pushes v1 once the first group is out:
    (header, records, stderr of rl-sample)."""
    with iu.Procs(WORK) as P:
        s = P.start("rl-sample", "--model", V0, "-n", "2", "--slots", "8", "--max-new-tokens", "32",
                    "--max-prompts", "600", "-u", "--no-provenance", "--listen", "unix:" + sock, PROMPTS,
                    stdout=subprocess.PIPE, name="rl-sample")
        out = iu.Reader(s.stdout)
        assert iu.listen_address(s) == "unix:" + sock
        out.wait_records(2)   # the first group is out: generation is under way
        sync = P.start("rl-sync", "--as-version", "1", V1, "--to", "unix:" + sock, name="rl-sync")
        assert iu.exit_status(sync, 30) == 0, f"rl-sync exited {sync.returncode}: {iu.stderr_of(sync)}"
        hdr, recs, _ = out.finish()
        err = iu.expect_exit_0(s)
    assert not os.path.exists(sock), "rl-sample left its socket file behind"
    return hdr, recs, err


@case
def a_push_mid_generation_switches_versions_between_tokens_and_each_whole_record_matches_its_weights():
    # The swap lands between two decode steps that timing chooses; where all 8 slots happen
    # to be between sequences then (sequences that all ran their 32 tokens end at the same
    # step), no record spans it, and the run is made again, at most 3 times.
    for attempt in range(3):
        hdr, recs, err = push_mid_generation(path("mid.sock"))
        if any(set(r["ver"]) == {0, 1} for r in recs):
            break
        print(f"  run {attempt + 1}: no sequence in flight at the swap; again")
    assert hdr["model"]["version"] == 0, hdr["model"]
    assert len(recs) == 1200, f"{len(recs)} records, expected 600 groups of 2"
    check_groups(recs, 2)
    assert summary_pushes(err) == (0, 1, 1, 0), err[-400:]
    assert re.search(r"^rl-sample: weights v1 installed from a push: ", err, re.M), err

    old = [r for r in recs if set(r["ver"]) == {0}]
    new = [r for r in recs if set(r["ver"]) == {1}]
    mixed = [r for r in recs if set(r["ver"]) == {0, 1}]
    assert len(old) + len(new) + len(mixed) == len(recs), "a version other than 0 and 1"
    print(f"  {len(old)} records at v0, {len(mixed)} switching mid-sequence, {len(new)} at v1")
    assert old and new, "the push came after generation ended (or before it started): no records on both sides"
    assert mixed, "no sequence was in flight at the swap"
    # one swap, never back: every record entirely at v0 is written before every one entirely at v1
    last_old = max(i for i, r in enumerate(recs) if set(r["ver"]) == {0})
    first_new = min(i for i, r in enumerate(recs) if set(r["ver"]) == {1})
    assert last_old < first_new, f"a v0 record (index {last_old}) after a v1 record (index {first_new})"

    for r in old[-6:] + old[:2]:
        e0, e1 = logp_error(r, V0), logp_error(r, V1)
        assert e0 <= TOL and e1 > FAR, f"v0 record {r['id']}: |logp - v0 ref| {e0:.3g}, |logp - v1 ref| {e1:.3g}"
    for r in new[:6] + new[-2:]:
        e0, e1 = logp_error(r, V0), logp_error(r, V1)
        assert e1 <= TOL and e0 > FAR, f"v1 record {r['id']}: |logp - v1 ref| {e1:.3g}, |logp - v0 ref| {e0:.3g}"
    # a switching sequence: exactly one change point; its v0 prefix was computed by v0
    # alone (the reference's); after it, the v1 weights read v0's KV cache (continuity only)
    by_id = {r["id"]: r for r in recs}
    for r in mixed:
        v = r["ver"]
        k = v.index(1)
        assert v == [0] * k + [1] * (len(v) - k) and k > 0, f"record {r['id']}: ver {v}"
        e0 = logp_error(r, V0, tokens=range(k))
        assert e0 <= TOL, f"mixed record {r['id']}: its v0 tokens are {e0:.3g} from the v0 reference"
        mate = by_id[r["id"] ^ 1]   # the other sample of its group (ids 2g, 2g+1)
        assert mate["group"] == r["group"] and mate["prompt_ids"] == r["prompt_ids"], f"record {r['id']}: group differs"
    after = max(logp_error(r, V0, tokens=range(r["ver"].index(1), len(r["ver"]))) for r in mixed)
    assert after > FAR, f"the tokens after the change point equal v0's log-probs ({after:.3g}): no swap happened"


# ---- 2. refused pushes ---------------------------------------------------------------

@case
def broken_or_unauthorised_pushes_are_refused_saying_why_and_generation_goes_on_with_the_old_weights():
    token = b"a shared secret of 32 characters"
    tok = rltest.tmpfile("token", token + b"\n")
    os.chmod(tok, 0o600)
    bad = [   # (what pushproto does, what the warning says)
        (dict(corrupt="data"), r"checksum mismatch"),
        (dict(truncate_at=1000), r"closed by the peer after 1000 of|broke off"),
        (dict(token=b"not the secret the receiver has"), r"authentication failed \(wrong token\)"),
        (dict(version=0, force=True), r"version 0 is not newer than the weights held \(v0\)"),
        (dict(msg_length=0xFFFFFFFF), r"a message of 4294967295 bytes announced"),
        (dict(omit=("model.norm.weight",), extra={"model.norm.weights": V1_TENSORS["model.norm.weight"]}),
         r"tensor 'model.norm.weights' is not part of the model"),
        (dict(shapes={"model.norm.weight": (32, 2)}), r"tensor 'model.norm.weight' has another shape than the model's"),
        (dict(omit=("model.norm.weight",)),
         rf"the push has {len(V1_TENSORS) - 1} tensors, the model {len(V1_TENSORS)}"),
    ]
    with iu.Procs(WORK) as P:
        s = P.start("rl-sample", "--model", V0, "-n", "2", "--slots", "4", "--max-new-tokens", "24", "--epochs", "0",
                    "-u", "--listen", "tcp:127.0.0.1:0", "--token-file", tok, PROMPTS,
                    stdout=subprocess.PIPE, name="rl-sample")
        out = iu.Reader(s.stdout)
        addr = iu.listen_address(s)
        assert re.fullmatch(r"tcp:127\.0\.0\.1:\d+", addr) and not addr.endswith(":0"), addr
        out.wait_records(2)
        for i, (kw, why) in enumerate(bad):
            got, held = iu.refused_push(s, addr, V1_TENSORS, i, kw, **dict(dict(token=token), **kw))
            assert re.search(why, got) and held == "0", f"push {kw}: warning '{got}; keeping weights v{held}'"
        # generation went on: records keep coming, at v0 with v0's log-probs
        n = len(out.records())
        before = out.wait_records(n + 6)
        assert s.poll() is None, f"rl-sample exited {s.returncode}"
        assert all(set(r["ver"]) == {0} for r in before), "a refused push changed the weights"
        for r in before[-4:]:
            e = logp_error(r, V0)
            assert e <= TOL, f"record {r['id']} after the refusals: |logp - v0 ref| {e:.3g}"
        # and a good push is still taken
        sync = P.start("rl-sync", "--as-version", "1", "--token-file", tok, V1, "--to", addr, name="rl-sync")
        assert iu.exit_status(sync, 30) == 0, f"rl-sync exited {sync.returncode}: {iu.stderr_of(sync)}"
        out.wait_records(0, cond=lambda rs: sum(set(r["ver"]) == {1} for r in rs) >= 4)
        s.send_signal(signal.SIGTERM)
        hdr, recs, _ = out.finish()
        err = iu.expect_exit_0(s)
    check_groups(recs, 2)
    assert "stopped by a signal" in err, err[-300:]
    assert summary_pushes(err) == (0, 1, 1, len(bad)), err[-400:]
    assert all(set(r["ver"]) == {0} for r in recs[:len(before)]), "records written before the good push are not all v0"
    r = next(r for r in recs if set(r["ver"]) == {1})
    e = logp_error(r, V1)
    assert e <= TOL, f"record {r['id']} after the good push: |logp - v1 ref| {e:.3g}"


# ---- 3. rl-ratio --listen --------------------------------------------------------------------

@case
def rl_ratio_scores_the_batches_after_a_push_with_the_pushed_weights_and_says_so_in_ver_learner():
    rc, raw, err = rltest.run("rl-sample", "--model", V0, "-n", "2", "--max-new-tokens", "12", "--max-prompts", "4",
                              "-u", "-q", PROMPTS)
    assert rc == 0, err
    (hdr, recs, _), = rltest.read_stream(raw)
    assert len(recs) == 8
    sock = path("ratio.sock")
    with iu.Procs(WORK) as P:
        rt = P.start("rl-ratio", "--model", V0, "--listen", "unix:" + sock, "--batch", "4", "-u",
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, name="rl-ratio")
        out = iu.Reader(rt.stdout)
        assert iu.listen_address(rt) == "unix:" + sock
        objs = rltest.member_bytes(recs, hdr)   # header, 8 records, trailer
        rt.stdin.write(b"".join(objs[:5]))
        rt.stdin.flush()
        out.wait_records(4)
        sync = P.start("rl-sync", "--as-version", "1", V1, "--to", "unix:" + sock, name="rl-sync")
        assert iu.exit_status(sync, 30) == 0, f"rl-sync exited {sync.returncode}: {iu.stderr_of(sync)}"
        rt.stdin.write(b"".join(objs[5:]))
        rt.stdin.close()
        _, scored, _ = out.finish()
        err = iu.expect_exit_0(rt)
    assert not os.path.exists(sock), "rl-ratio left its socket file behind"
    assert summary_pushes(err, "rl-ratio") == (0, 1, 1, 0), err[-400:]
    assert [r["ver_learner"] for r in scored] == [0] * 4 + [1] * 4, [r["ver_learner"] for r in scored]
    for r in scored:
        want, other = (V0, V1) if r["ver_learner"] == 0 else (V1, V0)
        e, e_other = logp_error(r, want, "logp_learner"), logp_error(r, other, "logp_learner")
        assert e <= TOL and e_other > FAR, f"record {r['id']} (ver_learner {r['ver_learner']}): " \
            f"|logp_learner - its ref| {e:.3g}, other's {e_other:.3g}"


# ---- 4-6. pipelines with rl-sync --watch --------------------------------------------------------

def pipeline(tag, sample_opts, ratio_opts=(), learn_opts=(), watch=True):
    """rl-sample --listen A SAMPLE_OPTS | rl-ratio --model v0 RATIO_OPTS |
    rl-learn --init v0 --out CK --metrics M LEARN_OPTS, with (when watch)
    rl-sync --watch CK pushing to A, and to rl-ratio's --listen when RATIO_OPTS
    has one. Every exit status must be 0, rl-sync's too: it ends by itself once
    the receivers have gone away. Returns (metrics, stderr of each tool,
    rl-ratio's records as they went to rl-learn, CK)."""
    a, ck, met = path(tag + ".sock"), path(tag + ".ck"), path(tag + ".metrics")
    with iu.Procs(WORK) as P:
        s = P.start("rl-sample", "--model", V0, "--listen", "unix:" + a, "--verifier-cmd", VERIFIER, "-u",
                    *sample_opts, PROMPTS, stdout=subprocess.PIPE, name="rl-sample")
        r = P.start("rl-ratio", "--model", V0, "-u", *ratio_opts, stdin=s.stdout, stdout=subprocess.PIPE,
                    name="rl-ratio")
        s.stdout.close()
        ln = P.start("rl-learn", "--init", V0, "--out", ck, "--metrics", met, "--lr", "3e-2", "--keep", "0",
                     *learn_opts, stdin=subprocess.PIPE, name="rl-learn")
        out = iu.Reader(r.stdout, forward=ln.stdin)   # a tee: rl-ratio's records, kept and passed on
        try:
            iu.listen_address(s)
            to = ["--to", "unix:" + a]
            if "--listen" in ratio_opts:
                to += ["--to", iu.listen_address(r)]
            iu.wait_for(lambda: os.path.exists(os.path.join(ck, "latest")), 20, "rl-learn's version 0")
            sync = P.start("rl-sync", "--watch", ck, *to, name="rl-sync") if watch else None
            _, scored, _ = out.finish(60)
            errs = {p.label: iu.expect_exit_0(p, 60) for p in (s, r, ln)}
            if sync:
                errs["rl-sync"] = iu.expect_exit_0(sync, 30)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{P.stderr_tails()}") from None
    for name in ("rl-sample", "rl-ratio"):
        refused = [line for line in errs[name].splitlines() if "push refused" in line]
        assert not refused, f"{name} refused a push of rl-sync: {refused}"
    return metrics(met), errs, scored, ck


def lags(m):
    return [x["lag_max"] for x in m]


@case
def sync_batch_gives_zero_lag_on_every_step_and_a_step_per_batch_the_prompts_allow():
    # 14 prompts of 2 samples, --batch 4: 7 steps; each batch sampled with the weights trained on the ones before
    m, errs, scored, _ = pipeline("sync", ["-n", "2", "--slots", "4", "--max-new-tokens", "12", "--max-prompts", "14",
                                           "--sync", "--batch", "4"], learn_opts=["--batch", "4"])
    assert [x["step"] for x in m] == list(range(1, 8)), lags(m)
    assert lags(m) == [0] * 7 and [x["lag_mean"] for x in m] == [0] * 7, f"lag_max per step {lags(m)}"
    assert sum(x["grad_norm"] > 0 for x in m) >= 3, "fewer than 3 steps changed the weights: versions hardly differ"
    # the sampler held version b for batch b: record k has ver k // 4 throughout
    assert [set(r["ver"]) for r in scored] == [{k // 4} for k in range(28)], [sorted(set(r["ver"])) for r in scored]
    assert "7 steps (versions 0 to 7)" in errs["rl-learn"], errs["rl-learn"][-300:]
    assert "rl-sample: 14 prompts, 28 samples," in errs["rl-sample"], errs["rl-sample"][-300:]
    first, last, installed, refused = summary_pushes(errs["rl-sample"])
    assert (first, refused) == (0, 0) and 6 <= last <= 7 and installed == last, errs["rl-sample"][-300:]


MAXLAG_OPTS = ["-n", "2", "--slots", "4", "--max-new-tokens", "12", "--max-prompts", "40"]


@case
def max_lag_k_keeps_every_measured_lag_at_most_k_when_the_learner_is_slower():
    K = 2
    # without the bound the sampler runs ahead: the learner is the slower one (no
    # rl-sync: this sampler waits for nothing, and is done before a push could come)
    free, _, _, _ = pipeline("free", MAXLAG_OPTS, learn_opts=["--batch", "4"], watch=False)
    assert len(free) == 20 and max(lags(free)) > K + 2, f"unbounded lag_max per step {lags(free)}"
    m, errs, scored, _ = pipeline("lag", MAXLAG_OPTS + ["--max-lag", str(K), "--batch", "4"],
                                  learn_opts=["--batch", "4"])
    print(f"  lag_max per step: unbounded {lags(free)}\n                    --max-lag {K} {lags(m)}")
    assert len(m) == 20, f"{len(m)} steps"
    assert max(lags(m)) <= K, f"lag_max per step {lags(m)} exceeds {K}"
    assert max(lags(m)) >= 1, f"lag_max per step {lags(m)}: never ahead of the learner, as --sync would be"
    # the admission rule itself: group j (records 2j, 2j+1) starts at a version >= j // 2 - K
    for r in scored:
        j = r["id"] // 2
        assert min(r["ver"]) >= j // 2 - K, f"record {r['id']}: ver {r['ver']} below {j // 2 - K}"


@case
def with_max_lag_groups_are_written_in_the_order_they_started_so_the_bound_holds_for_the_learners_batches():
    # A stop string cuts completions at random lengths, so groups finish out of
    # order. Unbounded, they are written as they finish; with --max-lag they
    # must come out in the order they started, or a group started for batch b
    # lands in batch b+1 and its lag is K+1.
    opts = ["-n", "2", "--slots", "8", "--max-new-tokens", "24", "--stop", "1", "--max-prompts", "24"]
    rc, out, err = rltest.run("rl-sample", "--model", V0, "-u", "-q", *opts, PROMPTS)
    assert rc == 0, err
    free = [o["group"] for o in msgpack.Unpacker(io.BytesIO(out), raw=False) if "group" in o]
    assert free != sorted(free), f"groups finished in order {free}: the case does not exercise the reordering"
    K = 2
    m, errs, scored, _ = pipeline("order", opts + ["--max-lag", str(K), "--batch", "4"], learn_opts=["--batch", "4"])
    groups = [r["group"] for r in scored]
    print(f"  groups in output order: {groups}\n  lag_max per step: {lags(m)}")
    assert groups == sorted(groups), f"groups written out of order under --max-lag: {groups}"
    assert len(m) == 12 and max(lags(m)) <= K, f"lag_max per step {lags(m)} exceeds {K}"

@case
def max_lag_with_drop_uniform_counts_the_groups_dropped_and_keeps_every_lag_at_most_k():
    # Half the groups of 2 have equal rewards (the verifier's parity of the
    # line): dropped, they are no part of any batch, so the admission counts
    # the groups started less those dropped; counting the dropped ones too
    # would leave the sampler waiting for a batch that cannot fill.
    K = 2
    m, errs, scored, _ = pipeline("dropk", MAXLAG_OPTS + ["--max-lag", str(K), "--batch", "4", "--drop-uniform"],
                                  learn_opts=["--batch", "4"])
    got = re.search(r"rl-sample: (\d+) prompts \((\d+) drawn, (\d+) dropped", errs["rl-sample"])
    assert got, errs["rl-sample"][-300:]
    written, drawn, dropped = (int(x) for x in got.groups())
    assert drawn == 40 and dropped >= 5 and written == len(scored) // 2, errs["rl-sample"][-300:]
    groups = [scored[i:i + 2] for i in range(0, len(scored), 2)]
    assert all(g[0]["group"] == g[1]["group"] and g[0]["reward"] != g[1]["reward"] for g in groups), \
        "a group written whole with equal rewards"
    assert [g[0]["group"] for g in groups] == sorted(g[0]["group"] for g in groups), "written out of start order"
    print(f"  {drawn} groups drawn, {dropped} dropped; lag_max per step: {lags(m)}")
    assert len(m) == written // 2 and max(lags(m)) <= K, f"lag_max per step {lags(m)} exceeds {K}"
    # each step's groups_drawn: the sum of its 2 groups' drawn
    assert [x["groups_drawn"] for x in m] == [groups[2 * k][0]["drawn"] + groups[2 * k + 1][0]["drawn"]
                                             for k in range(len(m))], [x["groups_drawn"] for x in m]
    assert sum(g[0]["drawn"] for g in groups) <= drawn
    # the admission rule itself: the group written j-th started at a version >= j // 2 - K
    for j, g in enumerate(groups):
        assert min(g[0]["ver"] + g[1]["ver"]) >= j // 2 - K, f"group {g[0]['group']} written {j}th: ver below {j // 2 - K}"


@case
def full_loop_sample_ratio_learn_with_rl_sync_watch_pushing_to_both_ends_cleanly_at_max_prompts():
    ratio_sock = path("loop-ratio.sock")
    m, errs, scored, ck = pipeline("loop", ["-n", "2", "--slots", "4", "--max-new-tokens", "12", "--max-prompts", "20",
                                            "--max-lag", "2", "--batch", "4"],
                                   ratio_opts=["--listen", "unix:" + ratio_sock, "--batch", "4"],
                                   learn_opts=["--batch", "4"])
    assert [x["step"] for x in m] == list(range(1, 11)), [x["step"] for x in m]
    assert max(lags(m)) <= 2, lags(m)
    assert len(scored) == 40 and sorted(r["id"] for r in scored) == list(range(40))
    vers = [max(r["ver"]) for r in scored]
    vl = [r["ver_learner"] for r in scored]
    print(f"  sampler ver per record {vers}\n  ver_learner per record {vl}")
    assert max(vers) >= 1, "the sampler never took a pushed version"
    assert all(a <= b for a, b in zip(vl, vl[1:])) and vl[-1] >= 1, f"ver_learner {vl}"
    # a record scored at version v has the log-probs of the checkpoint's version v
    for r in [next(r for r in scored if r["ver_learner"] == vl[-1])]:
        e = logp_error(r, os.path.join(ck, f"v{r['ver_learner']:06d}"), "logp_learner")
        assert e <= TOL, f"record {r['id']}: |logp_learner - ref of v{r['ver_learner']}| {e:.3g}"
    assert "10 steps (versions 0 to 10)" in errs["rl-learn"], errs["rl-learn"][-300:]
    assert "rl-sample: 20 prompts, 40 samples," in errs["rl-sample"], errs["rl-sample"][-300:]
    assert summary_pushes(errs["rl-ratio"], "rl-ratio")[2] >= 1, errs["rl-ratio"][-300:]
    assert summary_pushes(errs["rl-sample"])[2] >= 1, errs["rl-sample"][-300:]
    assert not os.path.exists(ratio_sock) and not os.path.exists(path("loop.sock")), "a socket file was left behind"



@case
def a_sampler_waiting_for_weights_ends_when_its_reader_has_gone():
    # The learner ends (--max-steps) while the sampler waits, written out, for
    # weights nobody will push: it must not wait for ever. It ends as a write
    # to the closed pipe would end it (SIGPIPE), without writing.
    with iu.Procs(WORK) as P:
        s = P.start("rl-sample", "--model", V0, "--listen", "unix:" + path("gone.sock"), "-n", "2", "--slots", "4",
                    "--max-new-tokens", "4", "--epochs", "0", "--sync", "--batch", "4", "-u", PROMPTS,
                    stdout=subprocess.PIPE, name="rl-sample")
        up, recs = msgpack.Unpacker(raw=False), []
        while len(recs) < 4:                        # one batch written: now it waits for v1
            b = os.read(s.stdout.fileno(), 1 << 16)
            assert b, f"the output ended after {len(recs)} records: {iu.stderr_of(s)[-300:]}"
            up.feed(b)
            recs += [o for o in up if "rlpipe" not in o]
        s.stdout.close()                            # the reader goes away
        rc = iu.exit_status(s, 10)
        assert rc == -signal.SIGPIPE, f"exit {rc}, expected death by SIGPIPE: {iu.stderr_of(s)[-300:]}"
        assert not os.path.exists(path("gone.sock")), "the socket file was left behind"

@case
def a_silent_connection_holds_up_a_push_for_the_greeting_deadline_only():
    # Anyone who can reach a tcp receiver may connect and say nothing; the
    # receiver waits PUSH_GREET_TIMEOUT (3 s) for the answer to its greeting,
    # not the 30 s a push may stall, before it serves the next sender.
    import socket
    import time
    tok = rltest.tmpfile("silent-token", b"a shared secret of 32 characters\n")
    os.chmod(tok, 0o600)
    with iu.Procs(WORK) as P:
        rt = P.start("rl-ratio", "--model", V0, "--listen", "tcp:127.0.0.1:0", "--token-file", tok,
                     stdin=subprocess.PIPE, name="rl-ratio")
        addr = iu.listen_address(rt)
        host, port = addr[len("tcp:"):].rsplit(":", 1)
        silent = socket.create_connection((host, int(port)))
        time.sleep(0.2)   # accepted and greeted first
        t0 = time.monotonic()
        sync = P.start("rl-sync", "--as-version", "1", "--token-file", tok, V1, "--to", addr, name="rl-sync")
        assert iu.exit_status(sync, 30) == 0, f"rl-sync exited {sync.returncode}: {iu.stderr_of(sync)}"
        took = time.monotonic() - t0
        silent.close()
        assert took < 10, f"the push waited {took:.1f} s behind a silent connection"
        iu.wait_stderr(rt, r"weights v1 installed from a push")
        err = iu.stderr_of(rt)
        assert "push refused: no progress for 3 s; keeping weights v0" in err, err
        print(f"  the push behind a silent connection took {took:.1f} s")


@case
def a_receiver_killed_by_sigterm_or_ending_in_an_error_leaves_no_socket_file():
    sock = path("killed.sock")
    with iu.Procs(WORK) as P:
        rt = P.start("rl-ratio", "--model", V0, "--listen", "unix:" + sock, stdin=subprocess.PIPE, name="rl-ratio")
        assert iu.listen_address(rt) == "unix:" + sock
        rt.send_signal(signal.SIGTERM)
        assert iu.exit_status(rt) == -signal.SIGTERM, "rl-ratio did not die of SIGTERM"
        assert not os.path.exists(sock), "SIGTERM left the socket file behind"
        rt = P.start("rl-ratio", "--model", V0, "--listen", "unix:" + sock, stdin=subprocess.PIPE, name="rl-ratio")
        assert iu.listen_address(rt) == "unix:" + sock
        rt.stdin.write(b"not records")
        rt.stdin.close()
        assert iu.exit_status(rt) == 1, iu.stderr_of(rt)
        assert not os.path.exists(sock), "an error exit left the socket file behind"


# ---- 5. how much of each update the sampler's precision keeps ----------------------------

def version_root(name, base, scales):
    """A checkpoint root whose version v holds base's weights with the matrices
    times scales[v] (norms kept), each version written whole before 'latest'
    names it, as checkpoint.c writes them."""
    import shutil
    import numpy as np
    from safetensors.numpy import save_file
    root, w = path(name), load_file(os.path.join(base, "model.safetensors"))
    os.makedirs(root)

    def write(v):
        d = os.path.join(root, f"v{v:06d}")
        os.makedirs(d)
        shutil.copy(os.path.join(base, "config.json"), d)
        save_file({k: (t.astype(np.float32) * np.float32(scales[v]) if t.ndim == 2 else t.astype(np.float32))
                   for k, t in w.items()}, os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"version": v}, f)
        with open(os.path.join(root, ".latest.tmp"), "w") as f:
            f.write(f"v{v:06d}\n")
        os.rename(os.path.join(root, ".latest.tmp"), os.path.join(root, "latest"))
    return root, write


@case
def the_sampler_tells_how_much_of_each_update_its_precision_keeps_and_warns_once_at_bf16():
    # a model stored in bf16 (its weights on the bf16 grid), updated by an
    # eighth of a bf16 step a version (under half a step in all): at bf16
    # nothing of it arrives, at f32 all; the warning after 5 versions
    base = path("grid")
    llama_ref.random_model(base, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True,
                           logit_scale=2.5, max_pos=512, seed=3, dtype="BF16")
    llama_ref.add_tiny_tokenizer(base)
    for prec in ("bf16", "f32"):
        sock, met = path(f"upd-{prec}.sock"), path(f"upd-{prec}.jsonl")
        root, write = version_root(f"upd-{prec}", base, {v: 1 + 2.5e-4 * v for v in range(6)})
        write(0)
        with iu.Procs(WORK) as P:
            s = P.start("rl-sample", "--model", base, "--dtype", prec, "--listen", "unix:" + sock, "--metrics", met,
                        "--epochs", "0", "--max-new-tokens", "8", "-u", PROMPTS, name="rl-sample")
            iu.listen_address(s)
            sync = P.start("rl-sync", "--watch", root, "--to", "unix:" + sock, "--poll", "0.1", "--max-version", "5",
                           name="rl-sync")
            iu.wait_stderr(sync, r"already holds v000000$")
            for v in range(1, 6):
                write(v)
                iu.wait_stderr(s, rf"^rl-sample: weights v{v} installed from a push: ")
            serr = iu.expect_exit_0(sync)
            s.send_signal(signal.SIGTERM)
            err = iu.expect_exit_0(s)
        lines = metrics(met)
        assert [(x["from"], x["version"]) for x in lines] == [(v, v + 1) for v in range(5)], lines
        for x in lines:   # the first too: rl-sync took v0's sample when it found the sampler holding it
            assert x["sampled"] > 0 and x["moved"] > 0.9, x
            if prec == "f32":
                assert x["along"] == 1 and x["norm"] == 1 and x["changed"] == x["moved"], x
            else:
                assert x["along"] == 0 and x["norm"] == 0 and x["changed"] == 0, x
        warn = [x for x in err.splitlines() if "warning" in x]
        swarn = [x for x in serr.splitlines() if "warning" in x]
        if prec == "f32":
            assert not warn and not swarn, (warn, swarn)
            assert re.search(r"^rl-sample: weights v5 installed .*; the update from v4: along 1\.00 \(norm 1\.00x ",
                             err, re.M), err
        else:
            assert len(warn) == 1 and warn[0].startswith(
                "rl-sample: warning: at bf16, the versions installed carry on average 0.00 of the learner's update "
                "(the 5 from v0 to v5; the latest: 0.0% of the weights changed, "), warn
            assert "(f16 or f32: rl-sample(1), Precision)" in warn[0], warn[0]
            assert len(swarn) == 1, serr


# ---- 6. adapter pushes -------------------------------------------------------------------

_ADAPTERS = {}


def adapter(name, base=V0, **kw):
    """(adapter directory, PEFT's merge of it into base): a PEFT adapter of
    base, version 3, r 4 on q_proj and v_proj, unless kw says otherwise."""
    if name not in _ADAPTERS:
        import peft_adapter
        kw = dict(dict(version=3, seed=11), **kw)
        _ADAPTERS[name] = (peft_adapter.write(path(name), base, merged=path(name + "-merged"), **kw),
                           path(name + "-merged"))
    return _ADAPTERS[name]


def pushed_line(err, v):
    """(bytes, merge us) of rl-sync's line for version v."""
    m = re.search(rf"^rl-sync: v{v:06d} -> \S+: ([0-9.]+ [kMG]?B)( of adapter)? in [0-9.]+ s \([^)]*\)"
                  r"(?:, merged in ([0-9]+) us)?, receiver stall [0-9]+ us", err, re.M)
    assert m, f"no push line for v{v}: {err}"
    return m.group(1), m.group(3)


def kb(text):
    n, unit = text.split()
    return float(n) * {"B": 1e-3, "kB": 1, "MB": 1e3, "GB": 1e6}[unit]


@case
def an_adapter_push_leaves_a_bf16_sampler_with_the_weights_of_one_started_with_the_adapter_bit_for_bit():
    # groups decoded one at a time (2 slots, no eos: both samples run 16 tokens), so that the
    # run with the push and the run started with the adapter compute the same products
    lora, _ = adapter("lora-sample", version=4)   # --sync waits for v4 after the 4th group: this one
    common = ["-n", "2", "--slots", "2", "--max-new-tokens", "16", "--ignore-eos", "--max-prompts", "4",
              "--dtype", "bf16", "--seed", "7", "-u", "--no-provenance", PROMPTS]
    rc, raw, err = rltest.run("rl-sample", "--model", V0, "--adapter", lora, *common)
    assert rc == 0, err
    (hdr_ref, want, _), = rltest.read_stream(raw)
    assert hdr_ref["model"]["adapter"] == lora and hdr_ref["model"]["path"] == V0, hdr_ref["model"]
    assert hdr_ref["model"]["version"] == 4 and all(set(r["ver"]) == {4} for r in want), hdr_ref["model"]
    sock = path("lora-sample.sock")
    with iu.Procs(WORK) as P:   # --sync: the first group at v0, then waits for weights
        s = P.start("rl-sample", "--model", V0, "--listen", "unix:" + sock, "--sync", "--batch", "2", *common,
                    stdout=subprocess.PIPE, name="rl-sample")
        out = iu.Reader(s.stdout)
        iu.listen_address(s)
        out.wait_records(2)
        sync = P.start("rl-sync", lora, "--to", "unix:" + sock, name="rl-sync")
        serr = iu.expect_exit_0(sync)
        _, recs, _ = out.finish()
        err = iu.expect_exit_0(s)
    size, merge_us = pushed_line(serr, 4)
    assert merge_us is not None, serr
    assert re.search(rf"^rl-sample: weights v4 installed from an adapter push: {size} in [0-9.]+ s \([^)]*\), "
                     r"merged in [0-9.]+ s, ", err, re.M), err
    assert summary_pushes(err) == (0, 4, 1, 0), err[-400:]
    assert [sorted(set(r["ver"])) for r in recs] == [[0]] * 2 + [[4]] * 6, [r["ver"] for r in recs]
    by_id = {r["id"]: r for r in want}
    for r in recs[2:]:
        w = by_id[r["id"]]
        assert (r["prompt_ids"], r["ids"]) == (w["prompt_ids"], w["ids"]), f"record {r['id']}: other tokens"
        assert r["logp"] == w["logp"], f"record {r['id']}: log-probs differ from the sampler started with the " \
            f"adapter, by up to {max(abs(a - b) for a, b in zip(r['logp'], w['logp'])):.3g}"
    print(f"  adapter push {size}, merged in {merge_us} us; records 2-7 equal the --adapter run's bit for bit")


@case
def rl_ratio_scores_with_a_pushed_adapter_as_with_adapter_given_and_as_pefts_merge_then_takes_a_full_push():
    lora, merged = adapter("lora-ratio")
    rc, raw, err = rltest.run("rl-sample", "--model", V0, "-n", "2", "--max-new-tokens", "12", "--max-prompts", "6",
                              "-u", "-q", PROMPTS)
    assert rc == 0, err
    (hdr, recs, _), = rltest.read_stream(raw)
    objs = rltest.member_bytes(recs, hdr)   # header, 12 records, trailer
    rc, raw, err = rltest.run("rl-ratio", "--model", V0, "--adapter", lora, "--batch", "4", "-u", input=b"".join(objs))
    assert rc == 0, err
    (rhdr, want, _), = rltest.read_stream(raw)
    assert rhdr["ratio"]["adapter"] == lora and all(r["ver_learner"] == 3 for r in want), rhdr["ratio"]
    sock = path("lora-ratio.sock")
    with iu.Procs(WORK) as P:
        rt = P.start("rl-ratio", "--model", V0, "--listen", "unix:" + sock, "--batch", "4", "-u",
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, name="rl-ratio")
        out = iu.Reader(rt.stdout)
        iu.listen_address(rt)
        rt.stdin.write(b"".join(objs[:5]))
        rt.stdin.flush()
        out.wait_records(4)
        sync = P.start("rl-sync", lora, "--to", "unix:" + sock, name="rl-sync")
        a_err = iu.expect_exit_0(sync)
        rt.stdin.write(b"".join(objs[5:9]))
        rt.stdin.flush()
        out.wait_records(8)
        sync = P.start("rl-sync", "--as-version", "4", merged, "--to", "unix:" + sock, name="rl-sync full")
        f_err = iu.expect_exit_0(sync)
        rt.stdin.write(b"".join(objs[9:]))
        rt.stdin.close()
        _, scored, _ = out.finish()
        err = iu.expect_exit_0(rt)
    assert summary_pushes(err, "rl-ratio") == (0, 4, 2, 0), err[-400:]
    assert [r["ver_learner"] for r in scored] == [0] * 4 + [3] * 4 + [4] * 4, [r["ver_learner"] for r in scored]
    for r, w in zip(scored[4:8], want[4:8]):
        assert r["logp_learner"] == w["logp_learner"], f"record {r['id']}: the pushed adapter scores otherwise " \
            "than rl-ratio --adapter"
    for r in scored[4:]:   # PEFT's merge, in float64: the adapter's and the merged model's scores alike
        e = logp_error(r, merged, "logp_learner")
        assert e <= TOL, f"record {r['id']} (ver_learner {r['ver_learner']}): |logp_learner - PEFT merge ref| {e:.3g}"
    (a_size, merge_us), (f_size, _) = pushed_line(a_err, 3), pushed_line(f_err, 4)
    assert kb(a_size) * 10 < kb(f_size), (a_size, f_size)
    print(f"  push bytes: adapter (r 4, q_proj and v_proj) {a_size}, merged in {merge_us} us; "
          f"the merged model in full {f_size}")


@case
def full_loop_with_rl_learn_training_lora_adapters_pushes_each_version_as_its_adapter():
    ratio_sock = path("lora-loop-ratio.sock")
    m, errs, scored, ck = pipeline("lora-loop", ["-n", "2", "--slots", "4", "--max-new-tokens", "12",
                                                 "--max-prompts", "12", "--max-lag", "1", "--batch", "4"],
                                   ratio_opts=["--listen", "unix:" + ratio_sock, "--batch", "4"],
                                   learn_opts=["--batch", "4", "--lora-rank", "4", "--lora-targets", "q_proj,v_proj"])
    assert [x["step"] for x in m] == list(range(1, 7)), [x["step"] for x in m]
    v6 = os.path.join(ck, "v000006")
    assert sorted(f for f in os.listdir(v6) if f.endswith((".json", ".safetensors"))
                  and not f.startswith(("tokenizer", "optimizer"))) == \
        ["adapter_config.json", "adapter_model.safetensors", "state.json"], os.listdir(v6)
    pushes = re.findall(r"^rl-sync: v(\d+) -> \S+: ([0-9.]+ [kMG]?B) of adapter in ", errs["rl-sync"], re.M)
    assert pushes and all(size == pushes[0][1] for _, size in pushes), errs["rl-sync"][-600:]
    assert not re.search(r"^rl-sync: v\d+ -> \S+: [0-9.]+ [kMG]?B in ", errs["rl-sync"], re.M), "a full push"
    assert max(lags(m)) <= 1, lags(m)
    for tool in ("rl-sample", "rl-ratio"):
        installed = summary_pushes(errs[tool], tool)[2]
        assert installed >= 1, errs[tool][-300:]
    vl = [r["ver_learner"] for r in scored]
    assert max(vl) >= 1 and max(max(r["ver"]) for r in scored) >= 1, vl
    # a record scored with a pushed adapter: the log-probs of PEFT's merge of that version onto v0
    import peft_adapter
    r = next(r for r in reversed(scored) if r["ver_learner"] >= 1)
    merged = peft_adapter.merge(os.path.join(ck, f"v{r['ver_learner']:06d}"), V0, path("lora-loop-merged"))
    e = logp_error(r, merged, "logp_learner")
    assert e <= TOL, f"record {r['id']} (ver_learner {r['ver_learner']}): |logp_learner - PEFT merge ref| {e:.3g}"
    print(f"  {len(pushes)} adapter pushes of {pushes[0][1]} each; ver_learner per record {vl}")


@case
def adapters_that_do_not_fit_the_base_are_refused_naming_the_tensor_and_the_weights_stay():
    other = path("other-base")   # hidden 32: another base's adapter
    llama_ref.random_model(other, hidden=32, inter=96, layers=2, heads=2, kv_heads=1, vocab=448, tie=True,
                           max_pos=512, seed=5)
    llama_ref.add_tiny_tokenizer(other)
    foreign, _ = adapter("lora-foreign", base=other)
    lora, _ = adapter("lora-refused")
    a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    rc, _, err = rltest.run("rl-sample", "--model", V0, "--adapter", foreign, "--max-prompts", "1", PROMPTS)
    assert rc == 1 and "adapter_model.safetensors" in err and "lora_A" in err, f"exit {rc}: {err}"
    tensors = dict(load_file(os.path.join(lora, "adapter_model.safetensors")))
    cfg = {"r": 4, "alpha": 8.0, "rslora": False, "targets": "q_proj,v_proj"}
    bad = [   # (pushproto's push, the warning)
        (dict(omit=(a,)), r"the adapter has 7 tensors; r 4 on 2 modules of 2 layers needs 8"),
        (dict(lora=dict(cfg, targets="q_proj,k_proj")),
         r"tensor 'base_model\.model\.model\.layers\.0\.self_attn\.v_proj\.lora_A\.weight' is not part of"),
        (dict(lora=dict(cfg, r=0)), r"'lora' has no rank r in 1\.\.65536"),
        (dict(lora=dict(cfg, r=5)), rf"tensor '{re.escape(a)}' is \[4, 64\]; the receiver's base needs \[5, 64\]"),
    ]
    sock = path("lora-refused.sock")
    with iu.Procs(WORK) as P:
        s = P.start("rl-sample", "--model", V0, "-n", "2", "--slots", "4", "--max-new-tokens", "8", "--epochs", "0",
                    "-u", "--listen", "unix:" + sock, PROMPTS, stdout=subprocess.PIPE, name="rl-sample")
        out = iu.Reader(s.stdout)
        iu.listen_address(s)
        out.wait_records(2)
        sync = P.start("rl-sync", foreign, "--to", "unix:" + sock, name="rl-sync")
        assert iu.exit_status(sync, 30) == 1, iu.stderr_of(sync)
        serr = iu.stderr_of(sync)
        assert f"the receiver refused the push: the adapter does not fit the base {V0}: tensor '{a}' is [4, 32]; " \
               "the receiver's base needs [4, 64]" in serr, serr
        for i, (kw, why) in enumerate(bad, start=1):
            kw = dict(dict(lora=cfg), **kw)
            got, held = iu.refused_push(s, "unix:" + sock, tensors, i, kw, None, version=3, **kw)
            assert re.search(why, got) and held == "0", f"push {kw}: warning '{got}; keeping weights v{held}'"
        n = len(out.records())
        after = out.wait_records(n + 4)[n:]
        s.send_signal(signal.SIGTERM)
        out.finish()
        err = iu.expect_exit_0(s)
    assert summary_pushes(err) == (0, 0, 0, 1 + len(bad)), err[-400:]
    assert all(set(r["ver"]) == {0} for r in after), "a refused adapter changed the weights"
    for r in after[-2:]:
        e = logp_error(r, V0)
        assert e <= TOL, f"record {r['id']} after the refusals: |logp - v0 ref| {e:.3g}"


if __name__ == "__main__":
    rltest.finish()
