"""PyTorch side of bench/cuda.sh: what the GPU can do (GEMM rates, copy
bandwidth), the models and record files both sides use, and the PyTorch
references of scoring and KV-cache decoding on the same GPU (the learner's is
bench/learn_ref.py train --device cuda). Prints RESULT lines in
bench/forward.c's format. Needs torch, safetensors and msgpack; not
zstandard (record files are written as plain msgpack streams, which the
tools read as they read zstd ones).

  gpu_ref.py info   [--device D]
  gpu_ref.py gemm   --shapes MxNxK[,...] [--dtypes f32,tf32,bf16] [--reps R] [--device D]
  gpu_ref.py copy   [--mib N] [--reps R] [--device D]
  gpu_ref.py refs   (info, gemm and copy in one process, with their options)
  gpu_ref.py write  DIR --config 110m|1b|test [--seed S] [--device D]
  gpu_ref.py records OUT --records N --prompt P --completion T [--vocab V] [--seed S]
  gpu_ref.py setup  DIR --config C --prompt P --completion T --learn-records N
                    --score-records M [--no-model] [--device D]
  gpu_ref.py score  DIR RECORDS [--precisions f32[,tf32]] [--batch B] [--reps R] [--device D]
  gpu_ref.py decode DIR --dtype bf16[,f32] --slots S[,S...] --prompt P --steps N
                    [--reps R] [--warmup W] [--device D]

--device: cuda (default) or cpu (for trying this script without a GPU).

gemm: out (M, N) = x (M, K) · Wᵀ with W (N, K) (F.linear, a linear layer over
M tokens), f32 exact (torch.set_float32_matmul_precision "highest"), tf32
("high": f32 inputs on TF32 tensor cores) or bf16 inputs (f32
accumulation); R timed runs after 3 warm-ups, each run enough products in a
row between two CUDA events to take >= 2 ms; flop = 2 M N K per product.

copy: dst.copy_(src) of two N MiB buffers; bytes = 2 N MiB per copy (read and
written), median of R runs after 2 warm-ups.

write: config.json and model.safetensors (F32) of a llama model with random
weights, N(0, 0.02²) matrices and embeddings, norm weights 1, drawn on the
device (fast where the C writer, one normal at a time, takes a minute for
1b). No bos/eos ids in config.json, so that rl-sample's completions run to
--max-new-tokens. Configs (vocab 32000, heads of 64, kv heads = heads):
  110m: hidden 768, intermediate 2048, 12 layers, 12 heads, tied (109.5M
        parameters: bench/forward.sh's 110m);
  1b:   hidden 2048, intermediate 5632, 16 layers, 32 heads, untied output
        layer (953.2M parameters: TinyLlama's widths, 16 layers, no GQA);
  test: hidden 64, intermediate 128, 2 layers, 4 heads, tied (a CPU check).

records: N rollout records of P + T random token ids (the same generator
seed, the same records), in groups of 4 with rewards 0..3, sampler logp -1,
temperature 1: what rl-learn --loss sft and rl-ratio --model read.

setup: write (unless --no-model), then records DIR-learn.rlr (N records) and
DIR-score.rlr (M), then "flop_per_seq=F params=N" as learn_ref.py flop
prints it (training FLOPs of one sequence of P + T tokens).

score: rl-ratio --model's computation in float32 eager PyTorch
(bench/learn_ref.py's model), exact f32 products or tf32 ones, one RESULT
line for each precision asked for: for every record the log-probabilities of its
completion tokens at temperature 1 (final hidden states at the completion
positions, output layer, log_softmax, gather), B records per forward, under
torch.no_grad; tokens = records x (P + T), flop = forward matmul FLOPs
(2 x layer matrix parameters x tokens + 2 x V x C x completion tokens).

decode: a Hugging Face-style eager decode loop (LlamaForCausalLM's
arithmetic: RMSNorm in f32, rotary embeddings, matmul + softmax (f32)
attention over a preallocated KV cache at the model dtype, SwiGLU MLP) with
weights at each --dtype in turn; per slot count S a prefill of S prompts of P random
tokens, W untimed steps, then R timed runs of N steps, each step one token
per sequence, sampled at temperature 1 on the GPU (softmax in f32,
torch.multinomial) and fed back, as rl-sample does."""
import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "py"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import learn_ref  # noqa: E402  (Llama, read_records, pack_raw_stream)
import llama_ref  # noqa: E402  (read_config, tensor_names)

CONFIGS = {
    "110m": dict(hidden=768, inter=2048, layers=12, heads=12, tie=True),
    "1b": dict(hidden=2048, inter=5632, layers=16, heads=32, tie=False),
    "test": dict(hidden=64, inter=128, layers=2, heads=4, tie=True),
}

# NVIDIA's datasheet peaks by product: TFLOP/s f32 (CUDA cores), tf32 and
# bf16 (tensor cores, dense: half the figures quoted with sparsity), and
# memory bandwidth TB/s.
PEAKS = [  # (name contains all of, f32, tf32, bf16, TB/s)
    (("H200", "NVL"), 60.0, 417.5, 835.5, 4.8),
    (("H200",), 67.0, 494.5, 989.5, 4.8),
    (("H100", "NVL"), 60.0, 417.5, 835.5, 3.9),
    (("H100", "PCIe"), 51.0, 378.0, 756.5, 2.0),
    (("H100",), 67.0, 494.5, 989.5, 3.35),      # SXM5, "H100 80GB HBM3"
]


def result(what, tokens, flop, times, **extra):
    med = statistics.median(times)
    more = "".join(f" {k}={v}" for k, v in extra.items())
    print(f"RESULT what={what} tokens={tokens} flop={flop:.6g} median_s={med:.6f} "
          f"tok_s={tokens / med if med > 0 else 0:.2f}{more} times={','.join(f'{t:.6f}' for t in times)}",
          flush=True)


class Timer:
    """Wall time of GPU work: CUDA events on cuda, perf_counter on the CPU."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def start(self):
        if self.cuda:
            self.e0, self.e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.e0.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self):
        """Seconds since start(), once the work queued before is done."""
        if self.cuda:
            self.e1.record()
            self.e1.synchronize()
            return self.e0.elapsed_time(self.e1) / 1e3
        return time.perf_counter() - self.t0


def set_precision(dev, tf32):
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high" if tf32 else "highest")


# ---- what the GPU can do ----------------------------------------------------------

def cmd_info(a, dev):
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("gpu_ref.py: torch.cuda.is_available() is False: no GPU PyTorch can use")
        p = torch.cuda.get_device_properties(dev)
        name = p.name
        print(f"gpu={name.replace(' ', '_')} sms={p.multi_processor_count} mem_gib={p.total_memory / 2**30:.1f} "
              f"torch={torch.__version__} cuda={torch.version.cuda} capability={p.major}.{p.minor}")
        for keys, f32, tf32, bf16, bw in PEAKS:
            if all(k in name for k in keys):
                print(f"peak f32={f32} tf32={tf32} bf16={bf16} tb_s={bw} product={'_'.join(keys)}")
                break
    else:
        print(f"gpu=none(cpu) sms=0 mem_gib=0 torch={torch.__version__} cuda=none capability=none")


def cmd_gemm(a, dev):
    timer = Timer(dev)
    for shape in a.shapes.split(","):
        M, N, K = (int(v) for v in shape.split("x"))
        for dt in a.dtypes.split(","):
            set_precision(dev, dt == "tf32")
            t = torch.bfloat16 if dt == "bf16" else torch.float32
            g = torch.Generator(device=dev).manual_seed(1)
            x = torch.randn(M, K, device=dev, dtype=t, generator=g)
            w = torch.randn(N, K, device=dev, dtype=t, generator=g)
            for _ in range(3):
                y = F.linear(x, w)
            timer.sync()
            timer.start()
            y = F.linear(x, w)
            one = max(timer.stop(), 1e-6)
            inner = max(1, min(1000, math.ceil(2e-3 / one)))
            times = []
            for _ in range(a.reps):
                timer.start()
                for _ in range(inner):
                    y = F.linear(x, w)
                times.append(timer.stop() / inner)
            del x, w, y
            flop = 2.0 * M * N * K
            med = statistics.median(times)
            result(f"gemm_{dt}_{M}x{N}x{K}", M, flop, times, tflop_s=f"{flop / med / 1e12:.2f}", inner=inner)
    set_precision(dev, False)


def cmd_copy(a, dev):
    timer = Timer(dev)
    n = a.mib * 2**20 // 4
    src = torch.ones(n, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    times = []
    for _ in range(a.reps):
        timer.sync()
        timer.start()
        dst.copy_(src)
        times.append(timer.stop())
    nbytes = 2 * n * 4
    med = statistics.median(times)
    print(f"RESULT what=copy_{a.mib}mib bytes={nbytes} median_s={med:.6f} gb_s={nbytes / med / 1e9:.1f} "
          f"times={','.join(f'{t:.6f}' for t in times)}", flush=True)


# ---- models and records -----------------------------------------------------------

def cmd_write(a, dev):
    from safetensors.torch import save_file
    c = CONFIGS[a.config]
    os.makedirs(a.dir, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c["hidden"],
           "intermediate_size": c["inter"], "num_hidden_layers": c["layers"],
           "num_attention_heads": c["heads"], "num_key_value_heads": c["heads"],
           "head_dim": c["hidden"] // c["heads"], "vocab_size": 32000, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
           "tie_word_embeddings": c["tie"], "hidden_act": "silu", "attention_bias": False,
           "mlp_bias": False, "torch_dtype": "float32"}
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shapes = llama_ref.tensor_names(llama_ref.read_config(a.dir))
    g = torch.Generator(device=dev).manual_seed(a.seed)
    out = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            out[name] = torch.ones(shape, dtype=torch.float32)
        else:
            out[name] = (torch.randn(shape, device=dev, generator=g) * 0.02).cpu().contiguous()
    save_file(out, os.path.join(a.dir, "model.safetensors"), metadata={"format": "pt"})
    n = sum(v.numel() for v in out.values())
    print(f"wrote {a.dir}: {a.config}, {n} parameters")


def write_records(path, n, P, T, V, seed):
    import random
    rnd = random.Random(seed)
    recs = [{"id": i, "group": i // 4, "prompt_ids": [rnd.randrange(V) for _ in range(P)],
             "ids": [rnd.randrange(V) for _ in range(T)], "logp": [-1.0] * T,
             "ver": [0] * T, "reward": float(i % 4), "temperature": 1.0, "top_p": 1.0, "top_k": 0}
            for i in range(n)]
    with open(path, "wb") as f:
        f.write(learn_ref.pack_raw_stream(recs, {"rlpipe": 1, "kind": "rollouts", "producer": "gpu_ref.py"}))


def cmd_records(a, dev):
    write_records(a.dir, a.records, a.prompt, a.completion, a.vocab, a.seed)


def cmd_setup(a, dev):
    if not a.no_model:
        cmd_write(a, dev)
    write_records(a.dir + "-learn.rlr", a.learn_records, a.prompt, a.completion, a.vocab, a.seed)
    write_records(a.dir + "-score.rlr", a.score_records, a.prompt, a.completion, a.vocab, a.seed + 1)
    learn_ref.cmd_flop(a)


def cmd_refs(a, dev):
    cmd_info(a, dev)
    cmd_gemm(a, dev)
    cmd_copy(a, dev)


# ---- scoring ------------------------------------------------------------------------

def cmd_score(a, dev):
    recs = learn_ref.read_records(a.records_file)
    P, T = len(recs[0]["prompt_ids"]), len(recs[0]["ids"])
    assert all(len(r["prompt_ids"]) == P and len(r["ids"]) == T for r in recs), "records of different lengths"
    seqs = torch.tensor([r["prompt_ids"] + r["ids"] for r in recs], dtype=torch.long).to(dev)
    N = len(recs)
    m = learn_ref.Llama(a.dir).to(dev)
    head = m.head_weight()
    timer = Timer(dev)

    def score(n):
        out = []
        for b in range(0, n, a.batch):
            s = seqs[b:min(b + a.batch, n)]
            h = m(s[:, :-1])[:, P - 1:]                      # positions whose next token is scored
            lp = torch.log_softmax(F.linear(h, head), dim=-1)
            out.append(lp.gather(2, s[:, P:, None])[..., 0])
        return torch.cat(out)

    body, head_f = flop_per_token(m.c)
    for prec in a.precisions.split(","):
        assert prec in ("f32", "tf32"), f"--precisions: {prec}?"
        set_precision(dev, prec == "tf32")
        with torch.no_grad():
            score(min(a.batch, N))                           # warm-up: one batch
            times = []
            for _ in range(a.reps):
                timer.sync()
                timer.start()
                lp = score(N)
                times.append(timer.stop())
        result("torch_score_" + prec, N * (P + T), body * N * (P + T) + head_f * N * T, times,
               logp_mean=f"{lp.double().mean().item():.6f}")


def flop_per_token(c):
    """Matmul FLOPs per token through the layers and through the output layer (as forward.c)."""
    C, Fi, Q, KV = c["C"], c["F"], c["NH"] * c["HS"], c["NKV"] * c["HS"]
    return 2.0 * c["L"] * (C * Q + 2 * C * KV + Q * C + 3 * C * Fi), 2.0 * c["V"] * C


# ---- decoding -------------------------------------------------------------------------

class Decoder:
    """LlamaForCausalLM's decode arithmetic, eager, with a static KV cache."""

    def __init__(self, model_dir, dtype, dev):
        from safetensors.torch import load_file
        self.c = c = llama_ref.read_config(model_dir)
        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {k: v.to(device=dev, dtype=dtype if v.dim() == 2 else torch.float32) for k, v in raw.items()}
        del raw
        self.head = self.w["model.embed_tokens.weight" if c["tie"] else "lm_head.weight"]
        self.dtype, self.dev = dtype, dev
        HS = c["HS"]
        self.inv_freq = 1.0 / c["theta"] ** (torch.arange(0, HS, 2, dtype=torch.float32, device=dev) / HS)

    def new_cache(self, B, max_len):
        c = self.c
        return [(torch.zeros(B, c["NKV"], max_len, c["HS"], dtype=self.dtype, device=self.dev),
                 torch.zeros(B, c["NKV"], max_len, c["HS"], dtype=self.dtype, device=self.dev))
                for _ in range(c["L"])]

    def rmsnorm(self, x, name):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.c["eps"])
        return (self.w[name] * h).to(self.dtype)

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def forward(self, ids, cache, pos0):
        """ids (B, T) at positions pos0 ..; returns the logits (B, V) after the last, f32."""
        c, w = self.c, self.w
        B, T = ids.shape
        NH, NKV, HS = c["NH"], c["NKV"], c["HS"]
        pos = torch.arange(pos0, pos0 + T, device=self.dev, dtype=torch.float32)
        ang = pos[:, None] * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        cos, sin = ang.cos().to(self.dtype), ang.sin().to(self.dtype)
        x = w["model.embed_tokens.weight"][ids]
        S = pos0 + T
        mask = None
        if T > 1:
            mask = torch.arange(S, device=self.dev)[None, :] > torch.arange(pos0, S, device=self.dev)[:, None]
        for i in range(c["L"]):
            p = f"model.layers.{i}."
            h = self.rmsnorm(x, p + "input_layernorm.weight")
            q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(B, T, NH, HS).transpose(1, 2)
            k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(B, T, NKV, HS).transpose(1, 2)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(B, T, NKV, HS).transpose(1, 2)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            kc, vc = cache[i]
            kc[:, :, pos0:S] = k
            vc[:, :, pos0:S] = v
            k, v = kc[:, :, :S], vc[:, :, :S]
            if NKV != NH:
                k = k.repeat_interleave(NH // NKV, dim=1)
                v = v.repeat_interleave(NH // NKV, dim=1)
            s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(HS))
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            att = torch.softmax(s, dim=-1, dtype=torch.float32).to(self.dtype)
            o = torch.matmul(att, v).transpose(1, 2).reshape(B, T, NH * HS)
            x = x + F.linear(o, w[p + "self_attn.o_proj.weight"])
            h = self.rmsnorm(x, p + "post_attention_layernorm.weight")
            g = F.linear(h, w[p + "mlp.gate_proj.weight"])
            u = F.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(g) * u, w[p + "mlp.down_proj.weight"])
        h = self.rmsnorm(x[:, -1], "model.norm.weight")
        return F.linear(h, self.head).float()


def cmd_decode(a, dev):
    set_precision(dev, False)
    for dt in a.dtype.split(","):
        assert dt in ("bf16", "f32"), f"--dtype: {dt}?"
        decode(a, dev, dt, Decoder(a.dir, {"bf16": torch.bfloat16, "f32": torch.float32}[dt], dev))
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def decode(a, dev, dt, m):
    c = m.c
    timer = Timer(dev)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    body, head = flop_per_token(c)
    with torch.no_grad():
        for S in (int(v) for v in a.slots.split(",")):
            cache = m.new_cache(S, a.prompt + a.warmup + a.reps * a.steps + 8)
            ids = torch.randint(0, c["V"], (S, a.prompt), device=dev, generator=g)

            def sample(logits):
                return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=g)   # (S, 1)

            timer.sync()
            t0 = time.perf_counter()
            tok = sample(m.forward(ids, cache, 0))
            timer.sync()
            print(f"gpu_ref.py: decode {dt}, {S} slots: prefill of {S} x {a.prompt} tokens "
                  f"{time.perf_counter() - t0:.3f} s", file=sys.stderr)
            pos = a.prompt
            for _ in range(a.warmup):
                tok = sample(m.forward(tok, cache, pos))
                pos += 1
            times = []
            for _ in range(a.reps):
                timer.sync()
                timer.start()
                for _ in range(a.steps):
                    tok = sample(m.forward(tok, cache, pos))
                    pos += 1
                times.append(timer.stop())
            del cache
            result(f"torch_decode_{dt}_{S}", S * a.steps, (body + head) * S * a.steps, times, slots=S)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("info", "gemm", "copy", "refs", "write", "records", "setup", "score", "decode"))
    ap.add_argument("dir", nargs="?")
    ap.add_argument("records_file", nargs="?", metavar="RECORDS")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default="8192x8192x8192")
    ap.add_argument("--dtypes", default="f32,tf32,bf16")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="110m")
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--completion", type=int, default=192)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="bf16", help="decode: bf16, f32 or both (bf16,f32)")
    ap.add_argument("--precisions", default="f32", help="score: f32, tf32 or both (f32,tf32)")
    ap.add_argument("--learn-records", type=int, default=64)
    ap.add_argument("--score-records", type=int, default=64)
    ap.add_argument("--no-model", action="store_true", help="setup: the model is there already")
    ap.add_argument("--slots", default="1")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.cmd in ("write", "records", "setup", "score", "decode") and not a.dir:
        ap.error(f"{a.cmd} needs DIR")
    if a.cmd == "score" and not a.records_file:
        ap.error("score needs DIR RECORDS")
    dev = torch.device(a.device)
    if dev.type == "cuda" and a.cmd != "records" and not torch.cuda.is_available():
        sys.exit("gpu_ref.py: --device cuda, but torch.cuda.is_available() is False")
    {"info": cmd_info, "gemm": cmd_gemm, "copy": cmd_copy, "refs": cmd_refs, "write": cmd_write,
     "records": cmd_records, "setup": cmd_setup, "score": cmd_score, "decode": cmd_decode}[a.cmd](a, dev)


if __name__ == "__main__":
    main()
