#!/usr/bin/env python3
"""TRL's GRPOTrainer on the task of experiments/smollm2, with the settings of
rlpipe's run there (bench/trl.sh runs it in .deps/trl-venv; its header says
which settings match and what differs).

    trl_grpo.py --model DIR --prompts FILE --out DIR [--steps N] [--seed S]
                [--save-every K] [--threads T] [--group G] [--batch N]
                [--lr X] [--temperature T] [--max-new-tokens N]
                [--t0 EPOCH_S] [--minutes M] [--in-order] [--loss trl|rlpipe]
                [--task number|calc] [--max-turns N]

The clock starts at --t0 (seconds since the epoch; bench/trl.sh gives the
time just before it launched Python), by default when this script began: its
times include the imports, the model load and TRL's set-up, as rl-learn's
`elapsed` includes its start-up. --minutes M stops training at the end of
the first step that ends more than M minutes after --t0 (so a run takes at
most one step more than M minutes), its checkpoint written.

FILE is JSON lines {"messages": [...], "answer": "..."} (train.jsonl of
experiments/smollm2/task.py); the reward is rl-sample's number verifier
(bench/eval_hf.py's number_reward).

--task calc is the calculator task of experiments/agent (its train.jsonl;
the system message describes the tool and its Hermes call format): TRL's
own tool loop (GRPOTrainer's tools=) with a `calculator` tool that computes
what calc_env.py computes, at most --max-turns assistant turns (TRL's
max_tool_calling_iterations = N - 1), and calc_env.py's reward: 1.0 when the
last turn calls no tool and its last number is the answer. TRL parses tool
calls only with a chat template that renders `tool_calls` and a response
parser it knows, and SmolLM2's template renders neither: the tokenizer gets
SmolLM2's template with a branch that renders an assistant message's
tool_calls as <tool_call>{json}</tool_call> (what the prompts ask for;
prompts and tool results render as before), and TRL's Qwen3 response
template, which parses the same calls. TRL's --max-new-tokens budget is the
whole completion's (every turn and every tool result), where rl-sample's
is each turn's: calc gives TRL N x --max-new-tokens.

OUT receives
  train.jsonl   one line per optimizer step: {"step", "step_s" (its wall time:
                sampling, scoring, forward and backward, the update), "gen_s"
                (of which sampling and scoring), "save_s" (its checkpoint's
                write, 0 when none), "elapsed_s" (seconds from --t0 to the
                step's end, its checkpoint written: start-up and every earlier
                step and save included),
                "reward_mean", "reward_std", "frac_reward_zero_std",
                "completion_len_mean", "clipped_ratio", "grad_norm" (of TRL's
                loss, before clipping: rlpipe's scale is 32 times it), "lr"}
  ckpt/vNNNNNN  the model after step N, every K steps and after the last,
                Hugging Face format with the tokenizer files (written under a
                temporary name, then renamed: a vNNNNNN is always complete)
  run.json      the settings, the package versions, "start_s" (seconds from
                --t0 to the first step: imports, model load, TRL's set-up),
                "train_s" (first step to the end of training), "elapsed_s"
                (--t0 to the end), "steps_done", "stopped" ("steps" or
                "minutes": which limit ended the run)
Exit 1 on a bad FILE line or a failed save; 2 on bad usage.
"""
import argparse
import json
import os
import shutil
import sys
import time

T_SCRIPT = time.time()   # the clock's default start, before the imports of torch and TRL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eval_hf import number_reward, read_test  # noqa: E402


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--group", type=int, default=8, help="samples per prompt")
    ap.add_argument("--batch", type=int, default=64, help="samples per optimizer step")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--t0", type=float, default=T_SCRIPT,
                    help="the clock's start, seconds since the epoch (default: when this script began)")
    ap.add_argument("--minutes", type=float,
                    help="stop at the end of the first step that ends more than M minutes after --t0 (default: none)")
    ap.add_argument("--in-order", action="store_true",
                    help="the prompts in the file's order (TRL's shuffle_dataset off): another engine's order, "
                         "for a run on the same questions")
    ap.add_argument("--loss", choices=("trl", "rlpipe"), default="trl",
                    help="trl: TRL's default loss normalisation and clipping at gradient norm 1, as users run it; "
                         "rlpipe: dr_grpo clipped as rl-learn clips (see bench/trl.sh)")
    ap.add_argument("--task", choices=("number", "calc"), default="number",
                    help="number: the add2 questions and the number verifier; calc: the calculator tool (above)")
    ap.add_argument("--max-turns", type=int, default=3, help="calc: at most N assistant turns (default 3)")
    o = ap.parse_args(argv)
    for name in ("steps", "max_turns", "save_every", "threads", "group", "batch", "max_new_tokens"):
        if getattr(o, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if o.batch % o.group:
        ap.error(f"--batch {o.batch} must be whole groups of --group {o.group}")
    if o.seed < 0 or not o.lr > 0 or not o.temperature > 0:
        ap.error("--seed must be >= 0, --lr and --temperature > 0")
    if o.minutes is not None and not o.minutes > 0:
        ap.error(f"--minutes must be > 0, not {o.minutes}")
    if not 0 < o.t0 <= time.time():
        ap.error(f"--t0 {o.t0}: not a time since the epoch before now")
    return o


def number(completions, answer, **_):
    """TRL reward function: 1.0 when the completion's last number is the answer."""
    return [number_reward(c[-1]["content"] if isinstance(c, list) else c, a) for c, a in zip(completions, answer)]


SMOL_TURN = "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
SMOL_TURN_CALLS = ("{{'<|im_start|>' + message['role'] + '\n' + message['content']}}"
                   "{% for call in message.tool_calls or [] %}{{ '<tool_call>' + ({'name': call['function']['name'], "
                   "'arguments': call['function']['arguments']} | tojson) + '</tool_call>' }}{% endfor %}"
                   "{{'<|im_end|>' + '\n'}}")


def calc_template(tok):
    """SmolLM2's chat template with tool_calls rendered in Hermes form and
    TRL's parser of them (above); exits 1 on another template."""
    from trl.chat_template_utils import qwen3_template
    if tok.chat_template is None or tok.chat_template.count(SMOL_TURN) != 1:
        sys.exit("trl_grpo.py: --task calc: the model's chat template is not SmolLM2's: "
                 "give TRL a template that renders tool_calls")
    tok.chat_template = tok.chat_template.replace(SMOL_TURN, SMOL_TURN_CALLS)
    tok.response_template = qwen3_template


def calc_tools_and_reward():
    """([calculator], reward): the tool and the reward of experiments/agent's
    calc_env.py, in the form TRL's GRPOTrainer takes them."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "experiments", "agent"))
    import calc_env

    def calculator(expression: str) -> str:
        """Evaluates an arithmetic expression.

        Args:
            expression: digits, + - * / and parentheses, e.g. "12 * 34"
        """
        try:
            return calc_env.evaluate(str(expression))
        except ValueError as e:
            return f"error: {e}"

    def reward(completions, answer, **_):
        out = []
        for c, a in zip(completions, answer):
            last = c[-1] if c else {}
            right = (last.get("role") == "assistant" and not last.get("tool_calls")
                     and calc_env.last_number(last.get("content") or "") == a)
            out.append(float(right))
        return out

    return [calculator], reward


def main(argv):
    o = parse(argv)
    if not os.path.isfile(os.path.join(o.model, "config.json")):
        sys.exit(f"trl_grpo.py: {o.model}: no config.json")
    items = read_test(o.prompts, "trl_grpo.py")

    import torch
    torch.set_num_threads(o.threads)
    import datasets
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    transformers.logging.set_verbosity_warning()
    transformers.logging.disable_progress_bar()
    datasets.disable_progress_bars()

    tok = AutoTokenizer.from_pretrained(o.model)
    tok_files = AutoTokenizer.from_pretrained(o.model)   # saved with checkpoints: --task calc changes tok's template
    model = AutoModelForCausalLM.from_pretrained(o.model, dtype=torch.float32)
    data = datasets.Dataset.from_list([{"prompt": m, "answer": a} for m, a in items])
    ckpt = os.path.join(o.out, "ckpt")
    os.makedirs(ckpt, exist_ok=True)

    # rlpipe's loss is -(1/batch) sum_t A logp[t]; dr_grpo's the same sum over
    # batch x max_completion_length: clipping its gradient at 1/max_new_tokens
    # is clipping rlpipe's at 1 (rl-learn's --grad-clip default). --loss trl
    # keeps TRL's own defaults for both.
    reward, tools, turns = number, {}, {}
    if o.task == "calc":
        calc_template(tok)
        calc_tools, reward = calc_tools_and_reward()
        tools = {"tools": calc_tools}
        turns = {"max_tool_calling_iterations": o.max_turns - 1}
    max_completion = o.max_new_tokens * (o.max_turns if o.task == "calc" else 1)
    loss = {} if o.loss == "trl" else {"loss_type": "dr_grpo", "max_grad_norm": 1.0 / max_completion}
    cfg = GRPOConfig(
        output_dir=os.path.join(o.out, "trainer"), max_steps=o.steps, seed=o.seed, data_seed=o.seed,
        per_device_train_batch_size=o.batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=o.group, num_iterations=1, max_completion_length=max_completion,
        temperature=o.temperature, top_p=1.0, top_k=0,
        learning_rate=o.lr, lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch", weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        scale_rewards="group", beta=0.0, epsilon=0.2, mask_truncated_completions=False,
        use_vllm=False, bf16=False, fp16=False, gradient_checkpointing=False, use_cpu=True,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, log_completions=False,
        dataloader_num_workers=0, shuffle_dataset=not o.in_order, **loss, **turns,
    )

    log = open(os.path.join(o.out, "train.jsonl"), "w")

    class StepLog(TrainerCallback):
        """Times each step, saves every --save-every steps and the last,
        stops after --minutes, writes train.jsonl."""

        def __init__(self):
            self.t_begin = self.t_step = None
            self.step_s = self.save_s = self.gen_s = 0.0
            self.steps_done, self.stopped = 0, "steps"

        def on_train_begin(self, args, state, control, **kw):
            self.t_begin = time.time()

        def on_step_begin(self, args, state, control, **kw):
            self.t_step = time.time()
            self.gen_s = 0.0

        def on_step_end(self, args, state, control, **kw):
            t = time.time()
            self.step_s = t - self.t_step
            self.save_s = 0.0
            self.steps_done = state.global_step
            if o.minutes is not None and t - o.t0 > 60 * o.minutes and state.global_step < o.steps:
                control.should_training_stop = True   # the Trainer still logs this step, then stops
                self.stopped = "minutes"
            if state.global_step % o.save_every == 0 or state.global_step == o.steps or self.stopped == "minutes":
                save(state.global_step)
                self.save_s = time.time() - t

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "reward" not in logs:
                return
            rec = {"step": state.global_step, "step_s": round(self.step_s, 3), "gen_s": round(self.gen_s, 3),
                   "save_s": round(self.save_s, 3),
                   "elapsed_s": round(time.time() - o.t0, 3), "reward_mean": logs["reward"],
                   "reward_std": logs.get("reward_std"), "frac_reward_zero_std": logs.get("frac_reward_zero_std"),
                   "completion_len_mean": logs.get("completions/mean_length"),
                   "clipped_ratio": logs.get("completions/clipped_ratio"), "grad_norm": logs.get("grad_norm"),
                   "lr": logs.get("learning_rate"), "tool_calls": logs.get("tools/call_frequency"),
                   "tool_failures": logs.get("tools/failure_frequency")}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(f"trl_grpo.py: step {rec['step']}: {rec['step_s']:.1f} s, reward {rec['reward_mean']:.3f}, "
                  f"elapsed {rec['elapsed_s']:.0f} s", file=sys.stderr, flush=True)

    def save(step):
        final = os.path.join(ckpt, f"v{step:06d}")
        tmp = os.path.join(ckpt, f".tmp-v{step:06d}-{os.getpid()}")
        try:
            trainer.model.save_pretrained(tmp, safe_serialization=True)
            tok_files.save_pretrained(tmp)
            if os.path.exists(final):
                shutil.rmtree(final)
            os.replace(tmp, final)
        except OSError as e:
            sys.exit(f"trl_grpo.py: saving {final}: {e}")

    steplog = StepLog()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data, processing_class=tok,
                          callbacks=[steplog], **tools)
    # The sampling part of a step: TRL's (private) method that generates and
    # scores a batch, timed from outside; gen_s stays 0 if a TRL lacks it.
    generate = getattr(trainer, "_generate_and_score_completions", None)
    if generate is not None:
        def timed_generate(*a, **kw):
            t = time.time()
            out = generate(*a, **kw)
            steplog.gen_s += time.time() - t
            return out
        trainer._generate_and_score_completions = timed_generate
    trainer.train()
    t_end = time.time()
    log.close()
    run = {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
           "model": o.model, "prompts": o.prompts, "steps": o.steps, "seed": o.seed, "save_every": o.save_every,
           "threads": o.threads, "group": o.group, "batch": o.batch, "lr": o.lr, "temperature": o.temperature,
           "max_new_tokens": o.max_new_tokens, "task": o.task, "max_turns": o.max_turns,
           "max_completion_length": max_completion, "loss_type": cfg.loss_type, "max_grad_norm": cfg.max_grad_norm,
           "weight_decay": cfg.weight_decay, "beta": cfg.beta, "minutes": o.minutes, "t0": o.t0,
           "start_s": round(steplog.t_begin - o.t0, 3), "train_s": round(t_end - steplog.t_begin, 3),
           "elapsed_s": round(t_end - o.t0, 3), "steps_done": steplog.steps_done, "stopped": steplog.stopped}
    with open(os.path.join(o.out, "run.json"), "w") as f:
        json.dump(run, f)
        f.write("\n")
    print(f"trl_grpo.py: {steplog.steps_done} steps in {t_end - steplog.t_begin:.0f} s after {run['start_s']:.0f} s "
          f"of start-up{' (stopped by --minutes)' if steplog.stopped == 'minutes' else ''}; {o.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
