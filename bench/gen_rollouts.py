#!/usr/bin/python3
"""Writes a synthetic but realistic rollout stream as raw msgpack (one member:
header, records, trailer) for bench/records.sh.

usage: gen_rollouts.py OUT.msgpack [MB] [SEED]

MB is the target size of the output in 10^6 bytes (default 1000). Each record
looks like what rl-sample writes (doc/design.md §2): ~200 completion tokens (ids from
a Zipf-like distribution over a 32000 vocabulary, so mostly 3-byte msgpack
uints), float32 logps (0xca), per-token weight versions, ~800 characters of
text with some non-ASCII, a prompt shared by the 8 records of its group, ~40
prompt ids, reward (float64), finish, sampling parameters and dtype.

The per-token arrays are encoded with numpy in batches; only the assembly of
each record's pieces is done in Python. Prints one line on stdout:
"records=N bytes=B seconds=S".
"""
import struct
import sys
import time

import msgpack
import numpy as np

VOCAB = 32000
GROUP = 8
MAX_TOKENS = 256
BATCH_GROUPS = 512

WORDS = (
    "the of and to a in is that for it as with be on by this are we let so then "
    "answer number value equation both sides divide multiply add subtract total "
    "first second next step therefore since because check result gives equals "
    "integer fraction remainder sum product difference square root prime factor "
    "probability triangle angle area perimeter radius circle length width height "
    "speed distance time rate hours minutes apples students books dollars cost "
    "price each per more less than twice half three four five seven eleven "
    "wait actually recompute simplify substitute solve verify final boxed "
    "café naïve résumé façade über straße größer déjà année niño "
).split()
SYMBOLS = ["=", "+", "-", "×", "÷", "≈", "≤", "≥", "→", "√", "π", "½", "²", "°",
           "—", "…", "∑", "∫", "λ", "θ", "中文", "答案", "数学", "日本語", "🙂"]


def build_corpus(rng, nchars=2_000_000):
    """A long string of plausible reasoning text with some non-ASCII."""
    words = np.array(WORDS, dtype=object)
    out, n = [], 0
    while n < nchars:
        k = int(rng.integers(6, 18))
        sent = list(words[rng.integers(0, len(words), k)])
        r = rng.random()
        if r < 0.35:  # a bit of arithmetic
            a, b = rng.integers(2, 999, 2)
            op = SYMBOLS[int(rng.integers(0, 6))]
            sent.append(f"{a} {op} {b} = {a * b if op == '×' else a + b}")
        elif r < 0.55:
            sent.insert(int(rng.integers(0, len(sent))), SYMBOLS[int(rng.integers(0, len(SYMBOLS)))])
        s = " ".join(sent)
        s = s[0].upper() + s[1:] + (". " if rng.random() < 0.85 else ".\n\n")
        out.append(s)
        n += len(s)
    return "".join(out)


def str_hdr(n):
    if n < 32:
        return bytes([0xa0 | n])
    if n < 256:
        return b"\xd9" + bytes([n])
    if n < 65536:
        return b"\xda" + struct.pack(">H", n)
    return b"\xdb" + struct.pack(">I", n)


def arr_hdr(n):
    if n < 16:
        return bytes([0x90 | n])
    if n < 65536:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def mp_str(s):
    b = s.encode("utf-8")
    return str_hdr(len(b)) + b


def encode_uints(v):
    """msgpack encodings of the uints v, concatenated, and the byte offset
    of each element (plus the total at the end)."""
    v = v.astype(np.uint32)
    size = np.where(v < 128, 1, np.where(v < 256, 2, np.where(v < 65536, 3, 5)))
    ends = np.cumsum(size)
    off = ends - size
    buf = np.empty(int(ends[-1]) if len(v) else 0, np.uint8)
    m = size == 1
    buf[off[m]] = v[m]
    m = size == 2
    buf[off[m]] = 0xcc
    buf[off[m] + 1] = v[m]
    m = size == 3
    o = off[m]
    buf[o] = 0xcd
    buf[o + 1] = v[m] >> 8
    buf[o + 2] = v[m] & 0xff
    m = size == 5
    o = off[m]
    buf[o] = 0xce
    for j in range(4):
        buf[o + 1 + j] = (v[m] >> (24 - 8 * j)) & 0xff
    return buf.tobytes(), np.append(off, len(buf))


F32_DT = np.dtype([("t", "u1"), ("v", ">f4")])


def encode_f32(x):
    a = np.empty(len(x), F32_DT)
    a["t"] = 0xca
    a["v"] = x
    return a.tobytes()


def token_ids(rng, n):
    """Zipf-like ids: ~3% byte tokens (< 256), the rest log-uniform over 256..VOCAB-1."""
    ids = 256 + np.exp(rng.random(n) * np.log(VOCAB - 256)).astype(np.int64) - 1
    byte = rng.random(n) < 0.03
    ids[byte] = rng.integers(3, 256, int(byte.sum()))
    return np.clip(ids, 0, VOCAB - 1)


def main():
    out = sys.argv[1]
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 1000.0
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    target = int(mb * 1e6)
    rng = np.random.default_rng(seed)
    t0 = time.time()
    corpus = build_corpus(rng)
    clen = len(corpus)

    K = {k: msgpack.packb(k) for k in (
        "id", "group", "prompt", "answer", "prompt_ids", "ids", "text", "logp",
        "ver", "finish", "reward", "temperature", "top_p", "top_k", "dtype")}
    map_hdr = bytes([0x80 | len(K)])
    tail = (K["temperature"] + msgpack.packb(1.0) + K["top_p"] + msgpack.packb(1.0)
            + K["top_k"] + msgpack.packb(0) + K["dtype"] + msgpack.packb("bf16"))
    fin = {True: K["finish"] + msgpack.packb("length"), False: K["finish"] + msgpack.packb("stop")}
    rew = {r: K["reward"] + b"\xcb" + struct.pack(">d", r) for r in (0.0, 1.0)}

    header = {"rlpipe": 1, "kind": "rollouts", "producer": "gen_rollouts.py 0.1.0",
              "seed": seed, "model": {"name": "synthetic-1b", "vocab_size": VOCAB},
              "bench": {"target_mb": mb}}
    written = 0
    count = 0
    group = 0
    with open(out, "wb", buffering=1 << 22) as f:
        b = msgpack.packb(header)
        f.write(b)
        written += len(b)
        while written < target:
            G = BATCH_GROUPS
            B = G * GROUP
            # completion lengths ~ N(200, 40), a few hit the limit
            n = np.clip(rng.normal(200, 40, B).astype(np.int64), 8, MAX_TOKENS)
            starts = np.concatenate(([0], np.cumsum(n)))
            T = int(starts[-1])
            ids_b, ids_off = encode_uints(token_ids(rng, T))
            # sampler logprobs: mostly confident tokens, some uncertain ones
            lp = -rng.exponential(0.35, T) * (1 + 8 * (rng.random(T) < 0.05))
            logp_b = encode_f32(lp.astype(np.float32))
            # weight versions: group's version, some sequences switch mid-way (in-flight update)
            gver = (group + np.arange(G)) // 512
            ver = np.repeat(np.repeat(gver, GROUP), n)
            switch = rng.random(B) < 0.2
            cut = (rng.random(B) * n).astype(np.int64)
            pos = np.arange(T) - np.repeat(starts[:-1], n)
            ver = ver + (np.repeat(switch, n) & (pos >= np.repeat(cut, n)))
            ver_b, ver_off = encode_uints(ver)
            # prompts: one per group
            pn = np.clip(rng.normal(40, 10, G).astype(np.int64), 5, 120)
            pstarts = np.concatenate(([0], np.cumsum(pn)))
            pids_b, pids_off = encode_uints(token_ids(rng, int(pstarts[-1])))
            plen = rng.integers(100, 260, G)
            ppos = rng.integers(0, clen - 300, G)
            tlen = (n * 4 + rng.normal(0, 40, B)).astype(np.int64).clip(20, None)
            tpos = rng.integers(0, clen - 1200, B)
            rewards = (rng.random(B) < 0.4).astype(np.float64)
            parts = []
            for g in range(G):
                gid = group + g
                a = int(pids_off[pstarts[g]])
                z = int(pids_off[pstarts[g + 1]])
                prompt = (K["prompt"] + mp_str(f"Problem {gid}: " + corpus[ppos[g]:ppos[g] + plen[g]]
                                               + " Put the final answer in \\boxed{}.")
                          + K["answer"] + mp_str(str(gid * 37 % 1000))
                          + K["prompt_ids"] + arr_hdr(int(pn[g])) + pids_b[a:z])
                gb = K["group"] + msgpack.packb(gid)
                for j in range(GROUP):
                    i = g * GROUP + j
                    ni = int(n[i])
                    s, e = int(starts[i]), int(starts[i + 1])
                    ah = arr_hdr(ni)
                    parts += (
                        map_hdr, K["id"], msgpack.packb(count + i), gb, prompt,
                        K["ids"], ah, ids_b[int(ids_off[s]):int(ids_off[e])],
                        K["text"], mp_str(corpus[tpos[i]:tpos[i] + tlen[i]]),
                        K["logp"], ah, logp_b[5 * s:5 * e],
                        K["ver"], ah, ver_b[int(ver_off[s]):int(ver_off[e])],
                        fin[ni == MAX_TOKENS], rew[rewards[i]], tail,
                    )
            chunk = b"".join(parts)
            f.write(chunk)
            written += len(chunk)
            count += B
            group += G
        b = msgpack.packb({"rlpipe_end": 1, "count": count})
        f.write(b)
        written += len(b)
    print(f"records={count} bytes={written} seconds={time.time() - t0:.2f}")


if __name__ == "__main__":
    main()
