"""rl-ratio computes the importance weights and mismatch metrics of doc/design.md §4,
and passes every other byte of a record on unchanged.

References are recomputed here with numpy in float64 from the float32 values
of the records (rltest.py writes and reads the streams; nothing of rlpipe's
own code is used):
  d_t = logp_learner_t - logp_t, rho_t = exp(d_t)
  token: w_t = min(rho_t, C); seq: w = min(exp(sum d), C); geo: w = min(exp(mean d), C)
  --mask LO,HI: mask 0 outside [LO, HI] (per token, or on the sequence ratio),
  weights uncapped unless --clip is given too; weights beyond float32 are FLT_MAX.
Tolerances: weights 1e-6 relative (float32 output), metrics 1e-9 relative.

With a model (a tiny random Llama written here with safetensors.numpy), also:
logp_learner does not depend on which records share a forward, it is a
normalised distribution at the record's temperature, and ver_learner comes
from state.json or from a checkpoint root's "latest"; --skip-uniform passes
whole groups of equal rewards on unscored, and scores every other record.
"""
import json
import math
import os
import re
import select
import subprocess
import time

import msgpack
import numpy as np
import zstandard

import rltest
from rltest import case, f32, finish, header, pack_record, write_stream, read_stream

TMP = rltest.TMP
RLRATIO = os.path.join(rltest.BIN, "rl-ratio")
FLT_MAX = float(np.finfo(np.float32).max)
LENGTHS = [0, 1, 2, 3, 5, 8, 13, 40, 200, 1, 7]


def path(name):
    return os.path.join(TMP.name, name)


put = rltest.tmpfile


def ratio(*args, input=None, ok=True):
    """Runs rl-ratio; unless ok is False, fails the case when it does not exit 0."""
    rc, out, err = rltest.run("rl-ratio", *args, input=input)
    if ok:
        assert rc == 0, f"rl-ratio {' '.join(args)} exited {rc}, expected 0: {err.strip()[:500]}"
    return rc, out, err


# ---- raw bytes of streams, objects and fields ------------------------------------------

def decompress(data):
    """Plain msgpack of a stream: its complete zstd frames (a cut last frame gives what it can) and raw tail."""
    return rltest.decompress(data, allow_cut=True)


def objects(raw):
    """(object, its exact bytes) for every complete msgpack object of raw."""
    up = msgpack.Unpacker(raw=False, strict_map_key=False)
    up.feed(raw)
    out, pos = [], 0
    try:
        for obj in up:
            out.append((obj, raw[pos:up.tell()]))
            pos = up.tell()
    except msgpack.OutOfData:
        pass
    return out


def raw_fields(b):
    """[(key, exact bytes of the value)] of one encoded map, in order."""
    c = b[0]
    if 0x80 <= c <= 0x8f:
        n, i = c & 0x0f, 1
    elif c == 0xde:
        n, i = int.from_bytes(b[1:3], "big"), 3
    else:
        n, i = int.from_bytes(b[1:5], "big"), 5
    up = msgpack.Unpacker(raw=False, strict_map_key=False)
    up.feed(b[i:])
    out = []
    for _ in range(n):
        k = up.unpack()
        start = up.tell()
        up.skip()
        out.append((k, b[i + start:i + up.tell()]))
    return out


def data_records(raw_objs):
    return [(o, b) for o, b in raw_objs if isinstance(o, dict) and "rlpipe" not in o and "rlpipe_end" not in o]


def output_records(out):
    """The records of an rl-ratio output (maybe without trailer): [(record, bytes)]."""
    return data_records(objects(decompress(out)))


# ---- inputs --------------------------------------------------------------------------

def make_records(n, seed, noise=0.3, identity=False, lengths=LENGTHS, ver_learner=True):
    """Rollouts with random float32 logp and logp_learner = logp + noise, and odd extra fields."""
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        T = lengths[i % len(lengths)]
        logp = -rng.exponential(1.0, T).astype(np.float32)
        if identity:
            ll = logp.copy()
        elif i % 11 == 8:   # a drifting sequence: prod rho far beyond float32
            ll = (logp + np.float32(1.0)).astype(np.float32)
        else:
            ll = (logp + rng.normal(0, noise, T)).astype(np.float32)
        r = {
            "id": i, "group": i // 4, "prompt": f"q{i} \u00e9\u4e2d", "prompt_ids": [1, 5 + i % 7, 9],
            "ids": [int(x) for x in rng.integers(0, 90, T)],
            "text": "UTF-8 \u2713 \u00e9\u4e2d \U0001F680 \u2028 end",
            "logp": [float(x) for x in logp], "ver": [int(x) for x in rng.integers(0, 4, T)],
            "finish": "stop", "reward": float(i % 2), "temperature": 1.0, "top_p": 1.0, "top_k": 0,
            "logp_learner": [float(x) for x in ll],
            "meta": {"nested": {"a": [1, 2.5, "x", None, True], "m": {"k": -3}}, "bin": b"\x00\xff\x80"},
            "blob": bytes(range(i % 7 + 3)), "f64s": [1.5, -2.25e-300], "big": 2 ** 64 - 1, "neg": -7,
        }
        if ver_learner and i % 3:
            r["ver_learner"] = 5
        if i % 5 == 4:   # stale weights from an earlier run that rejected no token: replaced where they are
            r["w"] = [9.0] * T
            r["mask"] = [1] * T
        recs.append(r)
    return recs


RECS = make_records(66, seed=7)
STREAM = put("recs.rlr", write_stream(RECS, hdr=header(seed=3, model={"name": "tiny"}, custom=[1, "two"]),
                                      frame_every=5))


def arr(x):
    return np.array(x, dtype=np.float64)


def expected(rec, mode="token", clip=2.0, clip_set=False, mask=None):
    """w, mask and tokens capped of one record, in float64 (w clamped to FLT_MAX)."""
    d = arr(rec["logp_learner"]) - arr(rec["logp"])
    T = len(d)
    cap = mask is None or clip_set
    if mode == "none":
        return np.ones(T), np.ones(T, bool), 0
    if mode == "token":
        rho = np.exp(d)
        w = np.minimum(rho, clip) if cap else rho
        m = np.ones(T, bool) if mask is None else (rho >= mask[0]) & (rho <= mask[1])
        capped = int(np.sum(rho > clip)) if cap else 0
    else:
        if T == 0:
            return np.zeros(0), np.zeros(0, bool), 0
        lr = d.sum() if mode == "seq" else d.mean()
        with np.errstate(over="ignore"):
            R = float(np.exp(lr))
        w = np.full(T, min(R, clip) if cap else R)
        m = np.full(T, mask is None or mask[0] <= R <= mask[1])
        capped = T if cap and R > clip else 0
    return np.minimum(w, FLT_MAX), m, capped


def close(got, want, rel):
    got, want = arr(got), arr(want)
    return np.allclose(got, want, rtol=rel, atol=0) and got.shape == want.shape


VARIANTS = [
    ([], dict()),
    (["--clip", "1.5"], dict(clip=1.5, clip_set=True)),
    (["--clip", "inf"], dict(clip=math.inf, clip_set=True)),
    (["--mode", "seq"], dict(mode="seq")),
    (["--mode", "seq", "--clip", "5"], dict(mode="seq", clip=5.0, clip_set=True)),
    (["--mode", "geo"], dict(mode="geo")),
    (["--mode", "geo", "--clip", "1.1"], dict(mode="geo", clip=1.1, clip_set=True)),
    (["--mask", "0.5,2"], dict(mask=(0.5, 2.0))),
    (["--mask", "0.8,1.25", "--clip", "1.1"], dict(mask=(0.8, 1.25), clip=1.1, clip_set=True)),
    (["--mode", "seq", "--mask", "0.1,10"], dict(mode="seq", mask=(0.1, 10.0))),
    (["--mode", "seq", "--mask", "0.5,2", "--clip", "1.5"], dict(mode="seq", mask=(0.5, 2.0), clip=1.5, clip_set=True)),
    (["--mode", "geo", "--mask", "0.9,1.1"], dict(mode="geo", mask=(0.9, 1.1))),
    (["--mode", "none"], dict(mode="none")),
]


def check_weights(recs_in, recs_out, kw, label):
    assert len(recs_out) == len(recs_in), f"{label}: {len(recs_out)} records out, {len(recs_in)} in"
    masked = capped = 0
    for r, (o, _) in zip(recs_in, recs_out):
        w, m, c = expected(r, **kw)
        masked += int(np.sum(~m))
        capped += c
        assert len(o["w"]) == len(o["mask"]) == len(r["ids"]), f"{label}: record {r['id']}: lengths"
        assert close(o["w"], w, 1e-6), \
            f"{label}: record {r['id']} ({len(w)} tokens): w {o['w'][:6]}..., expected {list(w[:6])}..."
        assert list(o["mask"]) == [int(x) for x in m], f"{label}: record {r['id']}: mask {o['mask']}, expected {m}"
    return masked, capped


@case
def weights_and_masks_of_every_mode_agree_with_numpy_float64():
    exercised = []
    for args, kw in VARIANTS:
        _, out, _ = ratio("-q", *args, STREAM)
        masked, capped = check_weights(RECS, output_records(out), kw, " ".join(args) or "(default)")
        exercised.append((" ".join(args) or "(default)", masked, capped))
    # the inputs must exercise what is tested: caps in capping variants, masks in mask variants
    for (label, masked, capped), (args, kw) in zip(exercised, VARIANTS):
        if kw.get("mask"):
            assert masked > 0, f"{label}: no token masked: the test data does not exercise --mask"
        if kw.get("mode") == "none":
            assert capped == 0 and masked == 0, f"{label}: {capped} capped, {masked} masked"
        elif kw.get("clip", 2.0) != math.inf and (not kw.get("mask") or kw.get("clip_set")):
            assert capped > 0, f"{label}: no token capped: the test data does not exercise the cap"
    print("# (variant, tokens masked, tokens capped):", exercised, flush=True)


@case
def a_ratio_beyond_float32_is_stored_as_flt_max_never_inf():
    _, out, _ = ratio("-q", "--mode", "seq", "--clip", "inf", STREAM)
    got = output_records(out)
    drift = [o for r, (o, _) in zip(RECS, got) if r["id"] % 11 == 8 and len(r["ids"]) >= 100]
    assert drift, "no drifting 200-token record in the inputs"
    for o in drift:
        assert all(x == FLT_MAX for x in o["w"]), f"record {o['id']}: w {o['w'][:3]}, expected FLT_MAX"
    assert all(math.isfinite(x) for o, _ in got for x in o["w"]), "some weight is not finite"


@case
def zero_token_completions_get_empty_w_and_mask():
    _, out, _ = ratio("-q", STREAM)
    empty = [o for o, _ in output_records(out) if not o["ids"]]
    assert empty, "no 0-token record in the inputs"
    for o in empty:
        assert o["w"] == [] and o["mask"] == [], f"record {o['id']}: w {o['w']}, mask {o['mask']}"


def identity_records():
    return make_records(30, seed=11, identity=True)


@case
def identity_when_logp_learner_equals_logp_ratio_one_and_k3_zero():
    recs = identity_records()
    src = put("identity.rlr", write_stream(recs))
    mpath = path("identity-metrics.jsonl")
    for args in ([], ["--mode", "seq"], ["--mode", "geo"], ["--mask", "0.99,1.01"]):
        _, out, _ = ratio("-q", "--metrics", mpath, *args, src)
        for o, _ in output_records(out):
            assert all(abs(x - 1) <= 1e-5 for x in o["w"]), f"{args}: record {o['id']}: w {o['w'][:5]}"
            assert all(x == 1 for x in o["mask"]), f"{args}: record {o['id']}: mask {o['mask']}"
        lines = [json.loads(x) for x in open(mpath)]
        assert len(lines) == 1, f"{len(lines)} metrics lines for 30 records in a batch of 256"
        m = lines[0]
        assert abs(m["k3"]) <= 1e-12 and abs(m["k1"]) <= 1e-12, f"{args}: k1 {m['k1']}, k3 {m['k3']}"
        assert m["ratio_min"] == m["ratio_max"] == m["ratio_mean"] == 1.0, f"{args}: {m}"
        assert m["capped_frac"] == 0 and m["masked_frac"] == 0, f"{args}: {m}"
        assert abs(m["ess"] - 1) <= 1e-12 and m["max_abs_p_diff"] == 0, f"{args}: {m}"


@case
def every_other_field_passes_through_byte_identical_in_order():
    raw_in = data_records(objects(decompress(open(STREAM, "rb").read())))
    for args in ([], ["--mode", "geo", "--mask", "0.5,2"]):
        _, out, _ = ratio("-q", *args, STREAM)
        got = output_records(out)
        assert len(got) == len(raw_in)
        for (ri, bi), (ro, bo) in zip(raw_in, got):
            fi, fo = raw_fields(bi), raw_fields(bo)
            keys_in = [k for k, _ in fi]
            want_keys = keys_in + [k for k in ("w", "mask") if k not in keys_in]
            assert [k for k, _ in fo] == want_keys, f"record {ri['id']}: keys {[k for k, _ in fo]}, expected {want_keys}"
            vo = dict(fo)
            for k, v in fi:
                if k not in ("w", "mask"):
                    assert vo[k] == v, f"record {ri['id']}: field {k!r} changed: {v[:40]!r} -> {vo[k][:40]!r}"


@case
def output_order_is_input_order_across_members_and_files():
    a, b = make_records(9, seed=1), make_records(14, seed=2)
    for i, r in enumerate(b):
        r["id"] = 100 + i
    two = put("two.rlr", write_stream(a, frame_every=3) + write_stream(b, compress=False))
    third = put("third.rlr", write_stream(make_records(4, seed=3)))
    _, out, err = ratio("--batch", "5", two, third)
    members = read_stream(out)
    assert len(members) == 1, f"{len(members)} output members, expected one"
    h, recs, trailer = members[0]
    want = [r["id"] for r in a] + [r["id"] for r in b] + list(range(4))
    assert [r["id"] for r in recs] == want, f"ids {[r['id'] for r in recs]}, expected {want}"
    assert trailer["count"] == len(want), trailer
    assert re.search(r"2 files?", err) and "3 members" in err, f"summary line: {err.strip()}"


@case
def output_header_is_rl_ratios_and_keeps_the_inputs_other_keys():
    _, out, _ = ratio("-q", "--mode", "seq", "--mask", "0.5,2", "--batch", "7", STREAM)
    h = read_stream(out)[0][0]
    assert h["rlpipe"] == 1 and h["kind"] == "rollouts", h
    assert h["producer"].startswith("rl-ratio "), h
    assert h["seed"] == 3 and h["model"] == {"name": "tiny"} and h["custom"] == [1, "two"], h
    assert h["ratio"] == {"mode": "seq", "mask": [0.5, 2.0], "batch": 7}, h["ratio"]
    _, out, _ = ratio("-q", "--no-provenance", STREAM)
    h = read_stream(out)[0][0]
    assert "argv" not in h and "time" not in h and h["ratio"] == {"mode": "token", "clip": 2.0, "batch": 256}, h


def expected_metrics(recs_in, recs_out, kw):
    lp = np.concatenate([arr(r["logp"]) for r in recs_in])
    ll = np.concatenate([arr(r["logp_learner"]) for r in recs_in])
    w = np.concatenate([arr(o["w"]) for o in recs_out])
    m = np.concatenate([np.array(o["mask"], dtype=bool) for o in recs_out])
    capped = sum(expected(r, **kw)[2] for r in recs_in)
    d = ll - lp
    rho = np.exp(d)
    lag = [r["ver_learner"] - v for r in recs_in if "ver_learner" in r for v in r["ver"]]
    N = len(d)
    return {
        "records": len(recs_in), "tokens": N, "skipped": 0,
        "k1": float(np.mean(-d)), "k3": float(np.mean(rho - 1 - d)),
        "ratio_mean": float(rho.mean()), "ratio_min": float(rho.min()), "ratio_max": float(rho.max()),
        "capped_frac": capped / N, "masked_frac": float(np.mean(~m)),
        "ess": float(w[m].sum() ** 2 / (m.sum() * (w[m] ** 2).sum())),
        "max_abs_p_diff": float(np.max(np.abs(np.exp(ll) - np.exp(lp)))),
        "lag_mean": float(np.mean(lag)) if lag else None, "lag_max": max(lag) if lag else None,
    }


def check_metrics(got, want, label, rel=1e-9):
    assert set(got) - {"batch"} == set(want), f"{label}: keys {sorted(got)}, expected {sorted(want)}"
    for k, v in want.items():
        g = got[k]
        if v is None or isinstance(v, int):
            assert g == v, f"{label}: {k} = {g}, expected {v}"
        else:
            assert g is not None and abs(g - v) <= rel * abs(v) + 1e-12, f"{label}: {k} = {g!r}, expected {v!r}"


@case
def metrics_lines_per_batch_agree_with_numpy():
    mpath = path("metrics.jsonl")
    for args, kw in (([], {}), (["--mode", "seq", "--clip", "5"], dict(mode="seq", clip=5.0, clip_set=True)),
                     (["--mode", "geo", "--mask", "0.9,1.1"], dict(mode="geo", mask=(0.9, 1.1)))):
        _, out, _ = ratio("-q", "--batch", "20", "--metrics", mpath, *args, STREAM)
        got = [o for o, _ in output_records(out)]
        lines = [json.loads(x) for x in open(mpath)]
        assert [x["batch"] for x in lines] == [0, 1, 2, 3], f"{args}: batches {[x['batch'] for x in lines]} for 66 records by 20"
        for b, line in enumerate(lines):
            sl = slice(20 * b, 20 * b + 20)
            check_metrics(line, expected_metrics(RECS[sl], got[sl], kw), f"{args} batch {b}")


@case
def metrics_lines_are_json_with_null_where_undefined():
    recs = [r for r in make_records(11, seed=5, ver_learner=False) if not r["ids"]]
    src = put("empty-completions.rlr", write_stream(recs))
    mpath = path("metrics-null.jsonl")
    ratio("-q", "--metrics", mpath, src)
    text = open(mpath).read()
    line = json.loads(text)
    assert line["records"] == len(recs) and line["tokens"] == 0, line
    for k in ("k1", "k3", "ratio_mean", "ratio_min", "ratio_max", "capped_frac", "masked_frac", "ess",
              "max_abs_p_diff", "lag_mean", "lag_max"):
        assert line[k] is None, f"{k} = {line[k]!r}, expected null"
    assert "NaN" not in text and "Infinity" not in text, text


@case
def summary_line_on_stderr_gives_the_run_totals():
    _, out, err = ratio(STREAM)
    got = [o for o, _ in output_records(out)]
    want = expected_metrics(RECS, got, {})
    line = [x for x in err.splitlines() if x.startswith("rl-ratio: records ")]
    assert len(line) == 1, f"stderr: {err.strip()}"
    for k, v in want.items():
        m = re.search(rf"\b{k} (\S+?)[,;]", line[0])
        assert m, f"{k} is not in the summary line: {line[0]}"
        if v is None:
            assert m.group(1) == "-", f"{k}: {m.group(1)}, expected -"
        else:
            assert abs(float(m.group(1)) - v) <= 1e-3 * abs(v) + 1e-12, f"{k}: {m.group(1)}, expected {v}"
    _, _, err = ratio("-q", STREAM)
    assert err == "", f"-q: stderr {err!r}"


@case
def truncated_input_exits_nonzero_after_writing_every_complete_record():
    data = open(STREAM, "rb").read()
    cuts = [len(data) // 3, len(data) // 2, len(data) - 3]
    for cut in cuts:
        recoverable = len(data_records(objects(decompress(data[:cut]))))
        rc, out, err = ratio(input=data[:cut], ok=False)
        assert rc == 1 and "rl-ratio: error: truncated stream" in err, f"cut {cut}: exit {rc}, {err.strip()}"
        assert re.search(rf"\(stdin\) record {recoverable}\b", err), f"cut {cut}: {err.strip()} (expected record {recoverable})"
        got = output_records(out)
        assert [o["id"] for o, _ in got] == [r["id"] for r in RECS[:recoverable]], \
            f"cut {cut}: {len(got)} records out, {recoverable} recoverable"
        check_weights(RECS[:recoverable], got, {}, f"cut {cut}")


@case
def a_bad_record_stops_the_run_after_the_records_before_it():
    recs = make_records(9, seed=4)
    del recs[6]["logp"]
    src = put("bad6.rlr", write_stream(recs))
    rc, out, err = ratio("--batch", "100", src, ok=False)
    assert rc == 1 and re.search(r'^rl-ratio: error: field "logp" is missing.*bad6\.rlr record 6$', err, re.M), \
        f"exit {rc}: {err.strip()}"
    got = output_records(out)
    assert [o["id"] for o, _ in got] == list(range(6)), f"{len(got)} records out, expected 6"
    check_weights(recs[:6], got, {}, "before the bad record")


@case
def top_p_or_top_k_sampling_is_warned_about_once_per_run():
    recs = make_records(12, seed=6)
    for r in recs[3:]:
        r["top_p"] = 0.9
    recs[8]["top_k"] = 50
    src = put("top-p.rlr", write_stream(recs))
    _, out, err = ratio("-q", src)
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1, f"{len(warnings)} warnings: {err.strip()}"
    assert re.search(r"^rl-ratio: warning: .*top-p\.rlr record 3\b.*top_p 0\.9", warnings[0]), warnings[0]
    assert len(output_records(out)) == 12


# ---- multi-turn rollouts: the environment's tokens -------------------------------------

# A record's own mask (rl-sample's, for a multi-turn rollout) is 1 on the
# model's tokens and 0 on those an environment added, whose logp is 0. The
# reference is the one above applied to the model's tokens alone: weights,
# masks and metrics over them; every environment token w 0, mask 0.

def env_records(n, seed):
    """make_records' rollouts, most of them multi-turn: a run of environment tokens
    in the middle, others at the end, a record of them only; every seventh has no mask."""
    recs = make_records(n, seed=seed, lengths=[0, 1, 3, 6, 9, 13, 40, 200, 7, 12, 4])
    rng = np.random.default_rng(seed + 100)
    for i, r in enumerate(recs):
        T = len(r["ids"])
        r.pop("w", None)
        if i % 7 == 3:
            r.pop("mask", None)   # a single-turn rollout as rl-sample writes one: no mask
            continue
        m = np.ones(T, dtype=np.int64)
        if T >= 3:
            a = T // 3
            m[a:a + max(1, T // 4)] = 0       # a tool's result between two turns of the model
        if T >= 6 and i % 2:
            m[T - max(1, T // 6):] = 0         # a user turn after the model's last one
        if i % 11 == 2:
            m[:] = 0                           # the environment's tokens only
        r["mask"] = [int(x) for x in m]
        for t in np.flatnonzero(m == 0):
            r["logp"][t] = 0.0                 # no sampler probability
            # the learner's: far from 0, so a ratio taken there would show in every metric
            r["logp_learner"][t] = f32(-rng.uniform(5, 60))
            r["ver"][t] = 9                    # the version held when it was added
    return recs


ENV_RECS = env_records(55, seed=31)
ENV_STREAM = put("env.rlr", write_stream(ENV_RECS, frame_every=4))


def model_part(rec):
    """rec restricted to its model's tokens (every token without a mask), and their indices."""
    keep = np.flatnonzero(np.array(rec["mask"]) == 1) if "mask" in rec else np.arange(len(rec["ids"]))
    part = dict(rec)
    for k in ("ids", "logp", "logp_learner", "ver", "w", "mask"):
        if k in rec:
            part[k] = [rec[k][t] for t in keep]
    return part, keep


def expected_env(rec, **kw):
    """w, mask and tokens capped over the whole record: the model's tokens as expected()
    weighs them alone, w 0 and mask 0 on the environment's."""
    part, keep = model_part(rec)
    w_k, m_k, capped = expected(part, **kw)
    T = len(rec["ids"])
    w, m = np.zeros(T), np.zeros(T, bool)
    w[keep], m[keep] = w_k, m_k
    return w, m, capped


ENV_VARIANTS = [
    ([], dict()),
    (["--clip", "1.3"], dict(clip=1.3, clip_set=True)),
    (["--mode", "seq"], dict(mode="seq")),
    (["--mode", "seq", "--clip", "inf"], dict(mode="seq", clip=math.inf, clip_set=True)),
    (["--mode", "geo"], dict(mode="geo")),
    (["--mode", "geo", "--clip", "1.05"], dict(mode="geo", clip=1.05, clip_set=True)),
    (["--mode", "none"], dict(mode="none")),
    (["--mask", "0.6,1.6"], dict(mask=(0.6, 1.6))),
    (["--mode", "seq", "--mask", "0.2,5"], dict(mode="seq", mask=(0.2, 5.0))),
    (["--mode", "geo", "--mask", "0.9,1.1", "--clip", "1.05"], dict(mode="geo", mask=(0.9, 1.1), clip=1.05, clip_set=True)),
]


@case
def environment_tokens_get_w_0_mask_0_and_the_model_tokens_the_weights_of_numpy_over_them_alone():
    env = sum(r["mask"].count(0) for r in ENV_RECS if "mask" in r)
    assert env > 100 and any("mask" not in r for r in ENV_RECS), "the inputs do not exercise the environment's tokens"
    mpath = path("env-metrics.jsonl")
    for args, kw in ENV_VARIANTS:
        label = " ".join(args) or "(default)"
        _, out, _ = ratio("-q", "--batch", "20", "--metrics", mpath, *args, ENV_STREAM)
        got = [o for o, _ in output_records(out)]
        assert len(got) == len(ENV_RECS), f"{label}: {len(got)} records out"
        masked = capped = 0
        for r, o in zip(ENV_RECS, got):
            w, m, c = expected_env(r, **kw)
            masked += int(np.sum(~m))
            capped += c
            assert len(o["w"]) == len(o["mask"]) == len(r["ids"]), f"{label}: record {r['id']}: lengths"
            assert close(o["w"], w, 1e-6), f"{label}: record {r['id']}: w {o['w'][:8]}, expected {list(w[:8])}"
            assert list(o["mask"]) == [int(x) for x in m], f"{label}: record {r['id']}: mask {o['mask']}, expected {m}"
            if "mask" in r:   # the environment's tokens: whatever the mode, out of the loss
                env_t = [t for t, x in enumerate(r["mask"]) if x == 0]
                assert all(o["w"][t] == 0 and o["mask"][t] == 0 for t in env_t), f"{label}: record {r['id']}"
            else:   # a record without mask: weighed as ever
                assert close(o["w"], expected(r, **kw)[0], 1e-6), f"{label}: record {r['id']} (no mask)"
        if kw.get("mode") != "none" and kw.get("clip", 2.0) != math.inf and (not kw.get("mask") or kw.get("clip_set")):
            assert capped > 0, f"{label}: no model token capped: the test data does not exercise the cap"
        # the metrics lines: numpy over the model's tokens of each batch of 20
        lines = [json.loads(x) for x in open(mpath)]
        assert [x["batch"] for x in lines] == [0, 1, 2], f"{label}: batches {[x['batch'] for x in lines]}"
        for b, line in enumerate(lines):
            parts, outs = [], []
            for r, o in zip(ENV_RECS[20 * b:20 * b + 20], got[20 * b:20 * b + 20]):
                part, keep = model_part(r)
                parts.append(part)
                outs.append({"w": [o["w"][t] for t in keep], "mask": [o["mask"][t] for t in keep]})
            want = expected_metrics(parts, outs, kw)
            assert want["tokens"] < sum(len(r["ids"]) for r in ENV_RECS[20 * b:20 * b + 20]), "no environment token"
            check_metrics(line, want, f"{label} batch {b}")


@case
def mode_none_keeps_the_records_mask_and_weighs_the_model_tokens_1():
    _, out, _ = ratio("-q", "--mode", "none", ENV_STREAM)
    for r, (o, _) in zip(ENV_RECS, output_records(out)):
        want = r.get("mask", [1] * len(r["ids"]))
        assert list(o["mask"]) == want, f"record {r['id']}: mask {o['mask']}, expected {want}"
        assert list(o["w"]) == [float(x) for x in want], f"record {r['id']}: w {o['w']}, expected {want}"


@case
def weighting_again_keeps_the_mask_and_the_model_tokens_weights():
    # The second run reads the first one's mask as the record's own: the
    # tokens it rejected stay 0 (their weight becomes 0), the others keep
    # their weight and mask exactly.
    for args in (["--mask", "0.6,1.6"], ["--mode", "seq", "--clip", "1.5"], ["--mode", "geo", "--mask", "0.9,1.1"]):
        first = ratio("-q", *args, ENV_STREAM)[1]
        once = [o for o, _ in output_records(first)]
        again = [o for o, _ in output_records(ratio("-q", *args, input=first)[1])]
        assert len(again) == len(once)
        for a, b in zip(once, again):
            assert a["mask"] == b["mask"], f"{args}: record {a['id']}: mask {a['mask']} then {b['mask']}"
            kept = [t for t, x in enumerate(a["mask"]) if x]
            assert [a["w"][t] for t in kept] == [b["w"][t] for t in kept], f"{args}: record {a['id']}: w changed"
            assert all(b["w"][t] == 0 for t, x in enumerate(a["mask"]) if not x), f"{args}: record {a['id']}"


@case
def records_without_mask_are_weighed_byte_for_byte_as_alone():
    # each record is weighed on its own: one without mask among multi-turn
    # ones comes out with the bytes it has in a stream of records without mask
    plain = [r for r in ENV_RECS if "mask" not in r]
    alone = output_records(ratio("-q", "--mode", "geo", put("plain.rlr", write_stream(plain)))[1])
    mixed = output_records(ratio("-q", "--mode", "geo", ENV_STREAM)[1])
    by_id = {o["id"]: b for o, b in mixed}
    assert len(alone) == len(plain) >= 5
    for o, b in alone:
        assert by_id[o["id"]] == b, f"record {o['id']}: bytes differ"


# ---- a mismatch that keeps growing -----------------------------------------------------

# The growth of a bf16 sampler that rounds the learner's updates away: a
# batch's k3 about 0.0015 * 160^(b/29) (0.0015 at batch 0, 0.24 at 29), each
# token's logp_learner = logp + sqrt(2 k) (k3 = exp(d) - 1 - d ~ d^2 / 2).
GROWING = [math.sqrt(2 * 0.0015 * 160 ** (b / 29)) for b in range(24)]


def offset_records(offsets, per_batch=3, seed=8):
    """per_batch records for each offset d: logp_learner = logp + d on every token (float32)."""
    rng = np.random.default_rng(seed)
    recs = []
    for d in offsets:
        for _ in range(per_batch):
            logp = (-1 - rng.exponential(1.0, 6)).astype(np.float32)
            ll = (logp + np.float32(d)).astype(np.float32)
            recs.append({"id": len(recs), "ids": [int(x) for x in rng.integers(0, 90, 6)],
                         "logp": [float(x) for x in logp], "logp_learner": [float(x) for x in ll]})
    return recs


def drift_warnings(err):
    return [x for x in err.splitlines() if "mismatch keeps growing" in x]


@case
def a_growing_mismatch_is_warned_about_once_naming_both_windows_k3():
    # Rule (records/drift.h): once 10 batches were seen, warn once at the first
    # batch whose latest 5 batches' mean k3 is >= 0.02 and >= 4x the first 5's.
    # numpy's k3 of the batches: first 5 mean 0.00224; the latest window
    # reaches 0.0191 at batches 12-16, 0.0229 at 13-17.
    recs = offset_records(GROWING)
    src = put("growing.rlr", write_stream(recs))
    k3 = []
    for b in range(len(GROWING)):
        d = np.concatenate([arr(r["logp_learner"]) - arr(r["logp"]) for r in recs[3 * b:3 * b + 3]])
        k3.append(float(np.mean(np.exp(d) - 1 - d)))
    first, latest = np.mean(k3[0:5]), np.mean(k3[13:18])
    assert abs(first - 0.00224) < 1e-5 and np.mean(k3[12:17]) < 0.02 <= latest, (first, k3)
    mpath = path("growing.jsonl")
    for args in (["--metrics", mpath], [], ["-q"]):
        _, out, err = ratio("--batch", "3", *args, src)
        warnings = drift_warnings(err)
        assert len(warnings) == 1, f"{args}: {len(warnings)} warnings: {err.strip()}"
        want = (f"rl-ratio: warning: the mismatch keeps growing: k3 {first:.2g} over batches 0-4, "
                f"{latest:.2g} over batches 13-17; the sampler is not following the learner's updates.")
        assert warnings[0].startswith(want), f"{args}: {warnings[0]}\nexpected it to begin {want}"
        assert "bf16" in warnings[0] and "sample at f16 or f32 (rl-sample(1), Precision" in warnings[0], warnings[0]
        assert len(output_records(out)) == len(recs)
        assert ("rl-ratio: records " in err) == (args != ["-q"]), f"{args}: {err}"
    lines = [json.loads(x) for x in open(mpath)]
    assert [x["batch"] for x in lines] == list(range(24))
    assert all(abs(x["k3"] - k) <= 1e-9 * k for x, k in zip(lines, k3)), [x["k3"] for x in lines]


@case
def a_steady_mismatch_low_or_high_draws_no_warning():
    # the lag alone (k3 0.0018), and a sampler far off from the start (k3 0.21):
    # the latest batches are no worse than the first
    for d, label in ((0.06, "low"), (0.6, "high")):
        src = put(f"steady-{label}.rlr", write_stream(offset_records([d] * 30, seed=9)))
        _, out, err = ratio("--batch", "3", src)
        assert drift_warnings(err) == [] and "warning" not in err, f"{label}: {err.strip()}"
        assert len(output_records(out)) == 90


# ---- a producer on a pipe --------------------------------------------------------------

def held_records_appear_before_the_input_ends(args, recs):
    """Writes a header and 3 of the 4 records into rl-ratio's stdin and keeps the pipe open:
    the 3 weighted records must come out while rl-ratio waits for more."""
    c = zstandard.ZstdCompressor(write_checksum=True)
    p = subprocess.Popen([RLRATIO, "-q", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        p.stdin.write(c.compress(pack_record(header())))
        for r in recs[:3]:
            p.stdin.write(c.compress(pack_record(r)))
        p.stdin.flush()
        got, deadline = b"", time.time() + 20
        while len(output_records(got)) < 3 and time.time() < deadline:
            ready, _, _ = select.select([p.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(p.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                got += chunk
        n = len(output_records(got))
        if n != 3 and p.poll() is not None:
            raise AssertionError(f"rl-ratio exited {p.returncode}: {p.stderr.read().decode().strip()[:300]}")
        assert n == 3, f"{n} records came out while the input stayed open, expected 3"
        p.stdin.write(c.compress(pack_record(recs[3]) + msgpack.packb({"rlpipe_end": 1, "count": 4})))
        p.stdin.close()
        rest = p.stdout.read()
        rc = p.wait(timeout=20)
        err = p.stderr.read().decode()
        assert rc == 0, f"exit {rc}: {err.strip()}"
        members = read_stream(got + rest)
        assert [r["id"] for r in members[0][1]] == [0, 1, 2, 3], members
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@case
def on_a_pipe_records_are_written_before_waiting_for_more_input():
    held_records_appear_before_the_input_ends([], make_records(4, seed=9, lengths=[3, 5, 2, 4]))


# ---- with a model ----------------------------------------------------------------------

V = 61


def make_model(dirname, seed):
    """A tiny random Llama in the Hugging Face layout (F32)."""
    from safetensors.numpy import save_file
    C, F, L, NH, NKV = 32, 48, 2, 4, 2
    HS = C // NH
    os.makedirs(dirname, exist_ok=True)
    cfg = {"model_type": "llama", "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
           "num_attention_heads": NH, "num_key_value_heads": NKV, "vocab_size": V, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "max_position_embeddings": 256, "tie_word_embeddings": False,
           "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
    rng = np.random.default_rng(seed)

    def r(*s):
        return (rng.standard_normal(s) * 0.3).astype(np.float32)
    t = {"model.embed_tokens.weight": r(V, C), "model.norm.weight": 1 + r(C) * 0.1, "lm_head.weight": r(V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = 1 + r(C) * 0.1
        t[p + "post_attention_layernorm.weight"] = 1 + r(C) * 0.1
        t[p + "self_attn.q_proj.weight"] = r(NH * HS, C)
        t[p + "self_attn.k_proj.weight"] = r(NKV * HS, C)
        t[p + "self_attn.v_proj.weight"] = r(NKV * HS, C)
        t[p + "self_attn.o_proj.weight"] = r(C, NH * HS)
        t[p + "mlp.gate_proj.weight"] = r(F, C)
        t[p + "mlp.up_proj.weight"] = r(F, C)
        t[p + "mlp.down_proj.weight"] = r(C, F)
    with open(os.path.join(dirname, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file(t, os.path.join(dirname, "model.safetensors"))
    return dirname


def model_records(n, seed):
    recs = make_records(n, seed=seed, lengths=[0, 1, 4, 9, 30, 2, 17])
    rng = np.random.default_rng(seed)
    for i, r in enumerate(recs):
        r["prompt_ids"] = [int(x) for x in rng.integers(0, V, 1 + i % 6)]
        r["ids"] = [int(x) for x in rng.integers(0, V, len(r["ids"]))]
        r["temperature"] = (0.7, 1.0, 1.3)[i % 3]
        del r["logp_learner"]
        r.pop("ver_learner", None)
    return recs


MODEL = {}


def model():
    """The model directory, or None (with the reason) when rl-ratio cannot load one."""
    if "dir" not in MODEL:
        try:
            d = make_model(path("model"), seed=1)
        except ImportError as e:
            MODEL["dir"], MODEL["why"] = None, f"safetensors is not importable: {e}"
            return None
        src = put("one.rlr", write_stream(model_records(1, seed=1)))
        rc, _, err = ratio("-q", "--model", d, src, ok=False)
        MODEL["dir"], MODEL["why"] = (d, "") if rc == 0 else (None, f"rl-ratio --model fails: {err.strip()[:200]}")
    return MODEL["dir"]


def model_case(fn):
    """A case that needs a model: SKIP (with the reason) when there is none."""
    if model() is None:
        print(f"SKIP {fn.__name__}: {MODEL['why']}", flush=True)
        return fn
    return case(fn)


@model_case
def model_logp_learner_is_the_same_scored_alone_or_in_a_batch():
    recs = model_records(40, seed=21)
    src = put("model-batch.rlr", write_stream(recs))
    together = [o for o, _ in output_records(ratio("-q", "--model", model(), src)[1])]
    alone = [o for o, _ in output_records(ratio("-q", "--model", model(), "--batch", "1", src)[1])]
    single = [o for o, _ in output_records(ratio("-q", "--model", model(), put("r17.rlr", write_stream([recs[17]])))[1])]
    # f32 matrix products may sum in another order for another number of rows: equal to
    # f32 rounding of the logits, |diff| <= 1e-5 * max(1, |logp|)
    def diff(a, b):
        a, b = arr(a), arr(b)
        return float(np.max(np.abs(a - b) / np.maximum(1, np.abs(a)))) if len(a) else 0.0
    worst = 0.0
    for a, b in zip(together, alone):
        assert len(a["logp_learner"]) == len(a["ids"]) == len(b["logp_learner"]), f"record {a['id']}: lengths"
        worst = max(worst, diff(a["logp_learner"], b["logp_learner"]))
    print(f"# batch of 40 vs one record per forward: max |diff| / max(1, |logp|) {worst:.3g}", flush=True)
    assert worst <= 1e-5, f"logp_learner differs by {worst} (relative) between a batch and single-record forwards"
    assert diff(single[0]["logp_learner"], together[17]["logp_learner"]) <= 1e-5
    for r, o in zip(recs, together):   # the weights follow from the computed logp_learner
        assert all(x <= 0 for x in o["logp_learner"]), f"record {r['id']}: log-probabilities above 0"
        assert close(o["w"], np.minimum(np.exp(arr(o["logp_learner"]) - arr(r["logp"])), 2.0), 1e-6)
        assert o["ver_learner"] == 0


@model_case
def model_logp_learner_is_a_normalised_distribution_at_the_records_temperature():
    base = model_records(1, seed=3)[0]
    for T in (0.6, 1.0, 1.7):
        recs = []
        for v in range(V):   # every possible first completion token
            r = dict(base, id=v, ids=[v], logp=[-1.0], ver=[0], temperature=T)
            r.pop("w", None)
            r.pop("mask", None)
            recs.append(r)
        out = ratio("-q", "--model", model(), put(f"vocab-{T}.rlr", write_stream(recs)))[1]
        lp = np.array([o["logp_learner"][0] for o, _ in output_records(out)], dtype=np.float64)
        total = float(np.exp(lp).sum())
        assert abs(total - 1) <= 1e-5, f"T={T}: sum over the vocabulary of exp(logp_learner) = {total}"
        MODEL[T] = lp
    # lower temperature sharpens: log p_T = log_softmax(z / T), so the spread grows as T falls
    assert np.std(MODEL[0.6]) > np.std(MODEL[1.0]) > np.std(MODEL[1.7]), "temperature does not sharpen"


@model_case
def model_ver_learner_comes_from_state_json_or_the_checkpoint_root():
    recs = model_records(5, seed=8)
    src = put("ver.rlr", write_stream(recs))
    m17 = make_model(path("m17"), seed=1)
    with open(os.path.join(m17, "state.json"), "w") as f:
        json.dump({"version": 17, "step": 17}, f)
    ck = path("ckpt")
    make_model(os.path.join(ck, "v000001"), seed=2)
    make_model(os.path.join(ck, "v000003"), seed=3)
    with open(os.path.join(ck, "v000001", "state.json"), "w") as f:
        json.dump({"version": 1}, f)
    with open(os.path.join(ck, "v000003", "state.json"), "w") as f:
        json.dump({"version": 3}, f)
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write("v000003\n")
    mpath = path("ver-metrics.jsonl")
    for d, ver in ((model(), 0), (m17, 17), (ck, 3), (ck + "/", 3)):
        out = ratio("-q", "--model", d, "--metrics", mpath, src)[1]
        h, got, _ = read_stream(out)[0]
        assert [o["ver_learner"] for o in got] == [ver] * 5, f"--model {d}: ver_learner {[o['ver_learner'] for o in got]}"
        assert h["ratio"]["ver_learner"] == ver, h["ratio"]
        lag = [ver - v for r in recs for v in r["ver"]]
        m = json.loads(open(mpath).read())
        assert m["lag_max"] == max(lag) and abs(m["lag_mean"] - np.mean(lag)) <= 1e-12, f"--model {d}: {m}"
    # the checkpoint root loads the version "latest" names, not another one
    via_root = read_stream(ratio("-q", "--model", ck, src)[1])[0][1]
    direct = read_stream(ratio("-q", "--model", os.path.join(ck, "v000003"), src)[1])[0][1]
    older = read_stream(ratio("-q", "--model", os.path.join(ck, "v000001"), src)[1])[0][1]
    assert [o["logp_learner"] for o in via_root] == [o["logp_learner"] for o in direct]
    assert [o["logp_learner"] for o in via_root] != [o["logp_learner"] for o in older]
    assert [o["ver_learner"] for o in older] == [1] * 5


@model_case
def model_every_other_field_passes_through_byte_identical():
    recs = model_records(12, seed=13)
    src = put("model-pass.rlr", write_stream(recs))
    raw_in = data_records(objects(decompress(open(src, "rb").read())))
    got = output_records(ratio("-q", "--model", model(), "--batch", "5", src)[1])
    assert len(got) == len(raw_in)
    ours = ("logp_learner", "ver_learner", "w", "mask")
    for (ri, bi), (ro, bo) in zip(raw_in, got):
        fi, fo = raw_fields(bi), dict(raw_fields(bo))
        for k, v in fi:
            if k not in ours:
                assert fo[k] == v, f"record {ri['id']}: field {k!r} changed"
        assert [k for k, _ in raw_fields(bo)][:len(fi)] == [k for k, _ in fi], f"record {ri['id']}: key order"


def uniform_group_records():
    """Groups of 4 (ids 4g .. 4g+3): which of them --skip-uniform may pass on unscored."""
    recs = model_records(24, seed=23)
    rewards = {0: [1.0] * 4,                 # uniform: skipped
               1: [0.0, 1.0, 0.0, 0.0],      # mixed: scored
               2: [0.0] * 4,                 # uniform, but one record has its own adv: scored
               3: [0.5] * 4,                 # uniform, with an earlier run's fields: skipped, those but mask removed
               4: [1.0, 0.0, 1.0, 1.0],      # mixed: scored
               5: [0.0] * 4}                 # uniform, but split by --batch 22 (records 20, 21 | 22, 23): scored
    for r in recs:
        r["group"] = r["id"] // 4
        r["reward"] = rewards[r["group"]][r["id"] % 4]
    recs[9]["adv"] = 0.25
    for r in recs[12:16]:
        r["logp_learner"] = [-1.0] * len(r["ids"])
        r["ver_learner"] = 7
        r["w"] = [1.0] * len(r["ids"])
        r["mask"] = [1] * len(r["ids"])
    return recs


@model_case
def model_skip_uniform_passes_whole_groups_of_equal_rewards_on_unscored():
    recs = uniform_group_records()
    hdr = header(sampling={"group": 4, "temperature": 1.0})
    src = put("uniform.rlr", write_stream(recs, hdr=hdr, frame_every=3))
    mpath = path("uniform-metrics.jsonl")
    _, out, err = ratio("--model", model(), "--batch", "22", "--skip-uniform", "--metrics", mpath, src)
    full = [o for o, _ in output_records(ratio("-q", "--model", model(), "--batch", "22", src)[1])]
    got = output_records(out)
    raw_in = data_records(objects(decompress(open(src, "rb").read())))
    assert [o["id"] for o, _ in got] == [r["id"] for r in recs], "records in input order"
    skipped = [o["id"] for o, _ in got if "logp_learner" not in o]
    assert skipped == [0, 1, 2, 3, 12, 13, 14, 15], f"skipped {skipped}"
    ours = {"logp_learner", "ver_learner", "w"}   # a mask stays: its zeros may be the environment's tokens
    for (ri, bi), (o, bo), f in zip(raw_in, got, full):
        if o["id"] in skipped:   # every other field's bytes, in order; none of ours
            want = [(k, v) for k, v in raw_fields(bi) if k not in ours]
            assert raw_fields(bo) == want, f"record {o['id']}: not passed on as it came"
        else:   # scored as without --skip-uniform, up to the order of f32 sums in another batch
            assert o["ver_learner"] == 0 and len(o["w"]) == len(o["ids"]) == len(o["mask"]), f"record {o['id']}"
            d = np.abs(arr(o["logp_learner"]) - arr(f["logp_learner"])) / np.maximum(1, np.abs(arr(f["logp_learner"])))
            assert not len(d) or float(d.max()) <= 1e-5, f"record {o['id']}: logp_learner off by {d.max()}"
    lines = [json.loads(l) for l in open(mpath)]
    assert [l["skipped"] for l in lines] == [8, 0] and [l["records"] for l in lines] == [22, 2], lines
    tok = sum(len(recs[i]["ids"]) for i in range(22) if i not in skipped)
    assert re.search(r"skipped 8,", err), err
    h = objects(decompress(out))[0][0]
    assert h["ratio"]["skip_uniform"] is True, h["ratio"]
    # the mismatch covers the scored tokens only: k1 from numpy over them
    d = [float(x) - float(y) for o in got[:22] if "logp_learner" in o[0]
         for x, y in zip(arr(o[0]["logp"]), arr(o[0]["logp_learner"]))]
    assert len(d) == tok and abs(lines[0]["k1"] - float(np.mean(d))) <= 1e-9 * max(1, abs(np.mean(d))), lines[0]


@model_case
def model_skip_uniform_leaves_a_multi_turn_records_mask_as_it_came():
    recs = uniform_group_records()[:8]   # group 0 uniform (skipped), group 1 mixed (scored)
    for r in recs:
        T = len(r["ids"])
        for k in ("logp_learner", "ver_learner", "w"):
            r.pop(k, None)
        r["mask"] = [0 if T // 3 <= t < T // 3 + 2 else 1 for t in range(T)]
        r["logp"] = [0.0 if not m else x for x, m in zip(r["logp"], r["mask"])]
    assert any(0 in r["mask"] for r in recs[:4]) and any(0 in r["mask"] for r in recs[4:])
    src = put("uniform-env.rlr", write_stream(recs, hdr=header(sampling={"group": 4, "temperature": 1.0})))
    raw_in = data_records(objects(decompress(open(src, "rb").read())))
    got = output_records(ratio("-q", "--model", model(), "--skip-uniform", src)[1])
    for (ri, bi), (o, bo) in zip(raw_in, got):
        if ri["group"] == 0:   # passed on unscored: every byte as it came, the mask with them
            assert bo == bi, f"record {ri['id']}: not passed on as it came"
        else:   # scored: the environment's tokens w 0, mask 0; the model's weighed
            w = np.minimum(np.exp(arr(o["logp_learner"]) - arr(ri["logp"])), 2.0)
            w[np.array(ri["mask"]) == 0] = 0
            assert list(o["mask"]) == ri["mask"] and close(o["w"], w, 1e-6), f"record {ri['id']}: {o['w']}"
            assert len(o["logp_learner"]) == len(ri["ids"]), "logp_learner on every token, the environment's too"


@model_case
def model_skip_uniform_skips_nothing_without_the_group_size():
    recs = uniform_group_records()
    src = put("uniform-nogroup.rlr", write_stream(recs))
    _, out, err = ratio("--model", model(), "--skip-uniform", src)
    assert all("logp_learner" in o for o, _ in output_records(out))
    assert "no sampling.group" in err and "skips none" in err, err
    rc, _, err = ratio("--skip-uniform", src, ok=False)
    assert rc == 2 and "--model" in err, f"exit {rc}: {err.strip()}"


@model_case
def model_on_a_pipe_held_records_are_scored_before_waiting_for_more_input():
    held_records_appear_before_the_input_ends(["--model", model(), "--batch", "256"], model_records(4, seed=9))


@model_case
def model_truncated_input_scores_and_writes_the_held_records_first():
    recs = model_records(20, seed=17)
    data = write_stream(recs, frame_every=4)
    cut = len(data) * 2 // 3
    recoverable = len(data_records(objects(decompress(data[:cut]))))
    rc, out, err = ratio("--model", model(), input=data[:cut], ok=False)
    assert rc == 1 and "truncated stream" in err, f"exit {rc}: {err.strip()}"
    got = output_records(out)
    assert recoverable > 0 and [o["id"] for o, _ in got] == list(range(recoverable)), \
        f"{len(got)} records out, {recoverable} recoverable"
    assert all(len(o["logp_learner"]) == len(o["ids"]) for o, _ in got)


@model_case
def model_as_logp_ref_writes_exactly_the_reference_models_logprobs_and_nothing_else():
    # the learner's pass first (logp_learner, ver_learner, w, mask), then a
    # second model as the reference: logp_ref is its log π_ref at each
    # record's temperature (float64 reference, llama_ref.py), every field
    # the record had keeps its bytes, and no w or logp_learner is added
    import llama_ref
    import torch
    ref_dir = make_model(path("ref"), seed=2)
    recs = model_records(30, seed=31)
    scored = ratio("-q", "--model", model(), put("ref-in.rlr", write_stream(recs)))[1]
    _, out, _ = ratio("-q", "--model", ref_dir, "--as", "logp_ref", "-", input=scored)
    before, after = output_records(scored), output_records(out)
    assert len(before) == len(after) == len(recs)
    ref = llama_ref.Llama(ref_dir)
    worst = 0.0
    with torch.no_grad():
        for (o_in, b_in), (o, b) in zip(before, after):
            assert set(o) == set(o_in) | {"logp_ref"}, f"record {o['id']}: keys {sorted(set(o) ^ set(o_in))}"
            assert raw_fields(b)[:len(raw_fields(b_in))] == raw_fields(b_in), f"record {o['id']}: fields changed"
            if not o["ids"]:
                assert o["logp_ref"] == [], f"record {o['id']}: logp_ref {o['logp_ref']} for no token"
                continue
            want = np.array(ref.logprobs(o["prompt_ids"], o["ids"], o["temperature"]))
            got = arr(o["logp_ref"])
            worst = max(worst, float(np.max(np.abs(got - want) / np.maximum(1, np.abs(want)))))
            assert not np.allclose(got, arr(o["logp_learner"]), atol=1e-3), "the reference scored as the learner"
    print(f"# logp_ref against llama_ref.py's float64: max |diff| / max(1, |logp|) {worst:.3g}", flush=True)
    assert worst <= 1e-5, f"logp_ref differs from the reference's log-probabilities by {worst} (relative)"
    # straight from a sampler: records with neither w nor logp_learner get logp_ref alone (logp is not needed)
    plain = [{k: v for k, v in r.items() if k not in ("w", "mask", "logp")} for r in recs]
    _, out, _ = ratio("-q", "--model", ref_dir, "--as", "logp_ref", put("ref-plain.rlr", write_stream(plain)))
    for r, (o, _) in zip(plain, output_records(out)):
        assert set(o) == set(r) | {"logp_ref"}, f"record {o['id']}: keys {sorted(set(o) ^ set(r))}"
    h = read_stream(out)[0][0]
    assert h["ref"]["model"] == ref_dir and "ratio" not in h, f"header {h}"
    h = read_stream(ratio("-q", "--model", ref_dir, "--as", "logp_ref", "-", input=scored)[1])[0][0]
    assert h["ratio"]["mode"] == "token" and h["ref"]["model"] == ref_dir, f"the learner pass's ratio kept: {h}"


finish()
