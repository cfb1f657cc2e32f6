"""PyTorch side of bench/forward.sh and bench/sample.sh: the same computations
as bench/forward.c and rl-sample in float32 eager PyTorch (tests/py/llama_ref.py's
model), and the record file rl-ratio is timed on. Prints RESULT lines in
forward.c's format.

  forward_ref.py records OUT --records N --prompt P --completion C [--seed S]
  forward_ref.py score  DIR --records N --prompt P --completion C [--reps R] [--batch B]
  forward_ref.py decode DIR --slots S --prompt P --steps N [--reps R]
  forward_ref.py generate DIR --slots S --prompt P --steps N [--prompts N] [--reps R]

Threads: torch.set_num_threads(--threads, default 2); run it with
OMP_WAIT_POLICY=PASSIVE (forward.sh does)."""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "py"))

import torch  # noqa: E402
import llama_ref  # noqa: E402


class Llama(llama_ref.Llama):
    """llama_ref's model with one-row products through torch.mv: Debian's
    PyTorch sends x @ Wᵀ to an sgemm that reads W at under half gemv's speed
    when x is one row (decoding one sequence); mv gives the reference its best."""

    def _linear(self, x, name, bias):
        if x.numel() != x.shape[-1]:
            return super()._linear(x, name, bias)
        y = torch.mv(self.w[name + ".weight"], x.reshape(-1)).view(*x.shape[:-1], -1)
        return y + self.w[name + ".bias"] if bias else y

    def logits(self, hidden):
        if hidden.numel() != hidden.shape[-1]:
            return super().logits(hidden)
        return torch.mv(self.lm_head, hidden.reshape(-1)).view(*hidden.shape[:-1], -1)


def result(what, tokens, flop, times):
    med = statistics.median(times)
    print(f"RESULT what={what} tokens={tokens} flop={flop:.6g} median_s={med:.6f} "
          f"tok_s={tokens / med:.2f} times={','.join(f'{t:.4f}' for t in times)}", flush=True)


def flop_per_token(c):
    """Matmul FLOPs per token through the layers and through the output layer (as forward.c)."""
    C, F, Q, KV = c["C"], c["F"], c["NH"] * c["HS"], c["NKV"] * c["HS"]
    return 2.0 * c["L"] * (C * Q + 2 * C * KV + Q * C + 3 * C * F), 2.0 * c["V"] * C


def cmd_records(a):
    import random
    import rltest
    rnd = random.Random(a.seed)
    V = 32000
    recs = []
    for i in range(a.records):
        recs.append({"id": i, "group": i // 8, "prompt_ids": [rnd.randrange(V) for _ in range(a.prompt)],
                     "ids": [rnd.randrange(V) for _ in range(a.completion)],
                     "logp": [-1.0] * a.completion, "ver": [0] * a.completion,
                     "temperature": 1.0, "top_p": 1.0, "top_k": 0})
    with open(a.dir, "wb") as f:
        f.write(rltest.write_stream(recs))


def cmd_score(a, m):
    c = m.cfg
    g = torch.Generator().manual_seed(a.seed)
    P, T = a.prompt, a.completion
    seqs = torch.randint(0, c["V"], (a.records, P + T), generator=g)

    def score(n):
        out = []
        for b in range(0, n, a.batch):           # batches bound the (B, T, V) logits
            s = seqs[b:min(b + a.batch, n)]
            h = m.forward(s[:, :-1])[:, P - 1:]   # positions whose next token is scored
            lp = torch.log_softmax(m.logits(h), dim=-1)
            out.append(lp.gather(2, s[:, P:, None])[..., 0])
        return torch.cat(out)

    score(1)  # warm-up: one sequence
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        score(a.records)
        times.append(time.perf_counter() - t0)
    body, head = flop_per_token(c)
    result("torch_score_f32", a.records * (P + T), body * a.records * (P + T) + head * a.records * T, times)


def cmd_decode(a, m):
    c = m.cfg
    S, P = a.slots, a.prompt
    g = torch.Generator().manual_seed(a.seed)
    cache = m.new_cache(S, P + a.reps * a.steps + 8)
    t0 = time.perf_counter()
    m.logits(m.forward(torch.randint(0, c["V"], (S, P), generator=g), cache, 0)[:, -1])
    print(f"forward_ref.py: decode {S} slots: prefill of {S} x {P} tokens {time.perf_counter() - t0:.3f} s",
          file=sys.stderr)
    pos = P
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            tok = torch.randint(0, c["V"], (S, 1), generator=g)
            m.logits(m.forward(tok, cache, pos)[:, -1])
            pos += 1
        times.append(time.perf_counter() - t0)
    body, head = flop_per_token(c)
    result(f"torch_decode_f32_{S}", S * a.steps, (body + head) * S * a.steps, times)


def cmd_generate(a, m):
    """rl-sample's work on --prompts prompts of P random tokens, S at a time:
    per batch a prefill, then N - 1 decode steps; every step samples one token
    per sequence at temperature 1 and keeps its log-probability. Timed from the
    first prefill to the last token; tokens = prompts x N generated."""
    c = m.cfg
    S, P, N = a.slots, a.prompt, a.steps
    n = a.prompts or S
    g = torch.Generator().manual_seed(a.seed)

    def generate(B):
        cache = m.new_cache(B, P + N)
        ids = torch.randint(0, c["V"], (B, P), generator=g)
        out, logps = [], []
        for pos in range(P, P + N):
            logp = torch.log_softmax(m.logits(m.forward(ids, cache, pos - ids.shape[1])[:, -1]), dim=-1)
            ids = torch.multinomial(logp.exp(), 1, generator=g)          # (B, 1)
            out.append(ids)
            logps.append(logp.gather(1, ids))
        return torch.cat(out, 1), torch.cat(logps, 1)

    generate(1)  # warm-up: one sequence
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for b in range(0, n, S):
            generate(min(S, n - b))
        times.append(time.perf_counter() - t0)
    body, head = flop_per_token(c)
    result(f"torch_generate_f32_{S}", n * N, (body * (P + N - 1) + head * N) * n, times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("records", "score", "decode", "generate"))
    ap.add_argument("dir")
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--completion", type=int, default=96)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=0, help="generate: prompts in all (default --slots)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.cmd == "records":
        return cmd_records(a)
    torch.set_num_threads(a.threads)
    m = (Llama if a.cmd == "generate" else llama_ref.Llama)(a.dir, dtype=torch.float32)
    with torch.no_grad():
        {"score": cmd_score, "decode": cmd_decode, "generate": cmd_generate}[a.cmd](a, m)


if __name__ == "__main__":
    main()
