"""PyTorch side of bench/learn.sh: the rollout records both learners train
on, the training FLOPs of a step, and full training steps of the same model
on the same batches in float32 eager PyTorch (forward, loss, backward,
gradient clipping, torch.optim.AdamW), timed step by step. Prints RESULT
lines in bench/forward.c's format.

  learn_ref.py records OUT --records N --prompt P --completion T --vocab V [--seed S]
  learn_ref.py flop DIR --prompt P --completion T
  learn_ref.py train DIR RECORDS --batch N --steps K [--warmup W] [--lr X] [--threads 2]
                     [--device cpu|cuda] [--tf32]

The model is an nn.Module written here from the Hugging Face Llama
definition (RMSNorm, rotary embeddings in the rotate-half convention,
grouped-query attention as matmul + masked softmax, SwiGLU MLP, tied or
untied output layer), with its parameters read from DIR/model.safetensors:
the same weights rl-learn starts from. The step is rl-learn's with
--loss sft --norm seqs: loss = -(1/N) sum over the N sequences of the
log-probabilities of their completion tokens (prompts masked), the output
layer computed at completion positions only; then clip_grad_norm_(1.0) and
AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0.01 on matrices and
embeddings, none on norm weights), as rl-learn's defaults.

Threads: torch.set_num_threads(--threads, default 2); run it with
OMP_WAIT_POLICY=PASSIVE (learn.sh does).

--device cuda (bench/cuda.sh): the model, the batches and the optimizer on
the GPU, each step timed from a torch.cuda.synchronize() before it to one
after it; float32 products exact (torch.set_float32_matmul_precision
"highest"), or with --tf32 on TF32 tensor cores ("high"). Record files may
be zstd-compressed streams (read through tests/py/rltest.py, which needs the
zstandard module) or plain msgpack ones (read with msgpack alone), as
bench/gpu_ref.py writes them where zstandard may be missing."""
import argparse
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "py"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import llama_ref  # noqa: E402  (read_config, tensor_names)


def result(what, tokens, flop, times, **extra):
    med = statistics.median(times)
    more = "".join(f" {k}={v}" for k, v in extra.items())
    print(f"RESULT what={what} tokens={tokens} flop={flop:.6g} median_s={med:.6f} "
          f"tok_s={tokens / med:.2f}{more} times={','.join(f'{t:.4f}' for t in times)}", flush=True)


def train_flop(c, P, T):
    """Training FLOPs (forward + backward, 2 per multiply-add) of one sequence
    of P prompt + T completion tokens: the model sees its first S = P + T - 1
    tokens and the output layer runs at the T completion positions.
      matmuls:   6 x (layer matrix parameters x S + V x C x T)
                 (forward 2, backward 4: input gradient and weight gradient)
      attention: 6 x L x NH x HS x S(S+1)  (Q·Kᵀ and P·V over the causal
                 lower triangle only: 4 x NH x HS x S(S+1)/2 forward, twice
                 that backward)
    Element-wise work, norms, softmax and AdamW are not counted."""
    C, Fi, L, V = c["C"], c["F"], c["L"], c["V"]
    Q, KV = c["NH"] * c["HS"], c["NKV"] * c["HS"]
    S = P + T - 1
    body = L * (C * Q + 2 * C * KV + Q * C + 3 * C * Fi)
    return 6.0 * (body * S + V * C * T) + 6.0 * L * Q * S * (S + 1)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
F32_KEYS = ("logp", "logp_learner", "w")


def pack_raw_stream(records, header):
    """One member (header, records, trailer) as plain msgpack, the float
    arrays of F32_KEYS as float32 (0xca) as rl-sample writes them."""
    import msgpack
    import struct

    def value(k, v):
        if k in F32_KEYS and isinstance(v, list):
            n = len(v)
            head = bytes([0x90 | n]) if n < 16 else (b"\xdc" + struct.pack(">H", n) if n < 65536
                                                     else b"\xdd" + struct.pack(">I", n))
            return head + b"".join(b"\xca" + struct.pack(">f", x) for x in v)
        return msgpack.packb(v, use_bin_type=True)

    def record(d):
        n = len(d)
        head = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
        return head + b"".join(msgpack.packb(k) + value(k, v) for k, v in d.items())

    return (record(header) + b"".join(record(r) for r in records)
            + msgpack.packb({"rlpipe_end": 1, "count": len(records)}))


def read_records(path):
    """The records of every member of a record file, in order: a zstd stream
    through rltest, a plain msgpack one with msgpack alone."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == ZSTD_MAGIC:
        import rltest
        return [r for _, rs, _ in rltest.read_stream(data) for r in rs]
    import msgpack
    up = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1 << 20))
    up.feed(data)
    return [o for o in up if "rlpipe" not in o and "rlpipe_end" not in o]


def cmd_records(a):
    """N rollout records of random ids below --vocab, in groups of 4 whose
    rewards differ (so that the pg loss would train every sequence too)."""
    import random
    import rltest
    rnd = random.Random(a.seed)
    recs = [{"id": i, "group": i // 4, "prompt_ids": [rnd.randrange(a.vocab) for _ in range(a.prompt)],
             "ids": [rnd.randrange(a.vocab) for _ in range(a.completion)], "reward": float(i % 4)}
            for i in range(a.records)]
    with open(a.dir, "wb") as f:
        f.write(rltest.write_stream(recs))


def cmd_flop(a):
    c = llama_ref.read_config(a.dir)
    params = sum(math.prod(s) for s in llama_ref.tensor_names(c).values())
    print(f"flop_per_seq={train_flop(c, a.prompt, a.completion):.6g} params={params}")


class RMSNorm(torch.nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Linear(torch.nn.Module):
    """y = x·Wᵀ (+ b) through F.linear, W (out, in) as the file stores it."""

    def __init__(self, n_in, n_out, bias):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n_out, n_in))
        self.bias = torch.nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, Q, KV = c["C"], c["NH"] * c["HS"], c["NKV"] * c["HS"]
        self.c = c
        self.input_layernorm = RMSNorm(C, c["eps"])
        self.post_attention_layernorm = RMSNorm(C, c["eps"])
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = Linear(C, Q, c["qkv_bias"])
        self.self_attn.k_proj = Linear(C, KV, c["qkv_bias"])
        self.self_attn.v_proj = Linear(C, KV, c["qkv_bias"])
        self.self_attn.o_proj = Linear(Q, C, c["o_bias"])
        self.mlp = torch.nn.Module()
        self.mlp.gate_proj = Linear(C, c["F"], False)
        self.mlp.up_proj = Linear(C, c["F"], False)
        self.mlp.down_proj = Linear(c["F"], C, False)

    @staticmethod
    def rope(x, cos, sin):
        """x (B, H, T, HS): x·cos + rotate_half(x)·sin, rotate_half([a, b]) = [-b, a]."""
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        NH, NKV, HS = self.c["NH"], self.c["NKV"], self.c["HS"]
        at = self.self_attn
        h = self.input_layernorm(x)
        q = self.rope(at.q_proj(h).view(B, T, NH, HS).transpose(1, 2), cos, sin)
        k = self.rope(at.k_proj(h).view(B, T, NKV, HS).transpose(1, 2), cos, sin)
        v = at.v_proj(h).view(B, T, NKV, HS).transpose(1, 2)
        if NKV != NH:   # query head h reads key/value head h // (NH / NKV)
            k = k.repeat_interleave(NH // NKV, dim=1)
            v = v.repeat_interleave(NH // NKV, dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)).mul_(1.0 / math.sqrt(HS)).masked_fill_(mask, float("-inf"))
        a = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + at.o_proj(a)
        h = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(h)) * self.mlp.up_proj(h))


class Llama(torch.nn.Module):
    def __init__(self, model_dir):
        super().__init__()
        from safetensors.torch import load_file
        self.c = c = llama_ref.read_config(model_dir)
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(c["V"], c["C"])
        self.model.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["L"]))
        self.model.norm = RMSNorm(c["C"], c["eps"])
        self.lm_head = None if c["tie"] else Linear(c["C"], c["V"], False)
        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        want = llama_ref.tensor_names(c)
        assert set(raw) == set(want), f"tensors differ from the config: {sorted(set(raw) ^ set(want))[:5]}"
        self.load_state_dict({k: v.to(torch.float32) for k, v in raw.items()}, strict=True)
        HS = c["HS"]
        self.inv_freq = 1.0 / c["theta"] ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS)

    def head_weight(self):
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, ids):
        """ids (B, T) -> final-normed hidden states (B, T, C), on ids' device."""
        T, dev = ids.shape[1], ids.device
        ang = torch.arange(T, dtype=torch.float64, device=dev)[:, None] * self.inv_freq.to(dev)[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        cos, sin = ang.cos().to(torch.float32), ang.sin().to(torch.float32)
        mask = torch.ones(T, T, dtype=torch.bool, device=dev).triu_(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.model.norm(x)


def read_batches(path, batch, steps):
    """(steps, batch, P + T) ids of the first steps x batch records."""
    recs = read_records(path)
    need = steps * batch
    assert len(recs) >= need, f"{path}: {len(recs)} records, {need} needed"
    P, T = len(recs[0]["prompt_ids"]), len(recs[0]["ids"])
    rows = [r["prompt_ids"] + r["ids"] for r in recs[:need]]
    assert all(len(r) == P + T for r in rows), "records of different lengths"
    return torch.tensor(rows, dtype=torch.long).view(steps, batch, P + T), P, T


def cmd_train(a):
    """W + K steps, a new batch each; the RESULT line times the last K (the
    first step allocates the optimizer state; at 110M parameters the second
    and third are still 10-50% slower than the later ones)."""
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high" if a.tf32 else "highest")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    m = Llama(a.dir).to(dev)
    n_steps = a.warmup + a.steps
    ids, P, T = read_batches(a.records_file, a.batch, n_steps)
    ids = ids.to(dev)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    head = m.head_weight()
    times, losses = [], []
    for k in range(n_steps):
        seqs = ids[k]
        sync()
        t0 = time.perf_counter()
        h = m(seqs[:, :-1])[:, P - 1:]                      # (N, T, C): positions whose next token is scored
        logits = F.linear(h, head)                          # (N, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seqs[:, P:].reshape(-1),
                               reduction="sum") / a.batch
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        print(f"learn_ref.py: step {k + 1}: loss {losses[-1]:.6g}, {times[-1]:.3f} s", file=sys.stderr)
    toks = a.batch * (P + T - 1)
    what = "torch_train_" + ("tf32" if a.tf32 and dev.type == "cuda" else "f32")
    extra = {"device": "cuda"} if dev.type == "cuda" else {}
    result(what, toks, a.batch * train_flop(m.c, P, T), times[a.warmup:],
           loss1=f"{losses[0]:.6g}", warmup_s=",".join(f"{t:.4f}" for t in times[:a.warmup]), **extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("records", "flop", "train"))
    ap.add_argument("dir")
    ap.add_argument("records_file", nargs="?", metavar="RECORDS")
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--completion", type=int, default=192)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3, help="train: timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="train: untimed steps before them")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="train: cpu (default) or cuda")
    ap.add_argument("--tf32", action="store_true", help="train on cuda: float32 products on TF32 tensor cores")
    a = ap.parse_args()
    if a.cmd == "train" and not a.records_file:
        ap.error("train needs DIR RECORDS")
    {"records": cmd_records, "flop": cmd_flop, "train": cmd_train}[a.cmd](a)


if __name__ == "__main__":
    main()
