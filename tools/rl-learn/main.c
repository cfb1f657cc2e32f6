// rl-learn — the learner: one optimizer step per batch of whole groups
// (learner.h), a complete checkpoint after every step (checkpoint.h), a
// metrics line per step. The initial model is written first, as the version
// it had (0 for a model directory that is not a checkpoint); each step makes
// the next version, written while the next step runs (ckpt_writer.h) and
// reported once it is on the disk.
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_chat.h"
#include "cli/cli_device.h"
#include "cli/cli_signal.h"
#include "clock.h"
#include "learn/learner.h"
#include "learn/publish.h"
#include "learn/relay.h"
#include "records/source.h"

static const char USAGE[] =
    "Usage: rl-learn (--init DIR | --config FILE | --resume) --out CKPT [OPTION]... [FILE]...\n"
    "Train a policy on rollout (or example) records: one AdamW step per batch of\n"
    "whole groups, a checkpoint CKPT/vNNNNNN after every step, CKPT/latest naming\n"
    "the newest. With no FILE, or when FILE is -, read standard input.\n"
    "\n"
    "Model:\n"
    "      --init DIR         start from this model directory, or a checkpoint's latest\n"
    "                         version (its weights and version number)\n"
    "      --config FILE      start from random weights of this config.json (with the\n"
    "                         tokenizer.json beside it, if any) ...\n"
    "      --seed S           ... drawn with seed S (default 0)\n"
    "      --init-std STD     ... and standard deviation STD (default 0.02)\n"
    "      --out CKPT         the checkpoint directory (must hold no checkpoint yet)\n"
    "      --resume           continue from CKPT/latest: weights, optimizer, step;\n"
    "                         the records its steps consumed are skipped first\n"
    "      --no-skip          with --resume, train on the input from its first record\n"
    "      --keep K           keep the K newest versions (default 5; 0 = all)\n"
    "      --keep-every N     and every version that is a multiple of N\n"
    "      --state-every N    AdamW's state only in versions that are multiples of N\n"
    "                         and the last (default 1: every version); the others hold\n"
    "                         the weights, which samplers follow, and --resume goes\n"
    "                         back to the newest version with the state\n"
    "      --save-dtype D     the weights of each version in f32 (default), bf16 or f16\n"
    "                         (the f32 ones stay in optimizer.safetensors for --resume)\n"
    "      --max-shard-size B weights of more than B bytes (suffix k, M, G) are written as\n"
    "                         shards and model.safetensors.index.json (default 5000000000)\n"
    CLI_DEVICE_HELP
    CLI_CHAT_HELP
    "\n"
    "LoRA (PEFT's layer, h = W x + (A/R) B (A_ x); only the adapters train, the base is\n"
    "frozen; each version holds adapter_config.json and adapter_model.safetensors):\n"
    "      --lora-rank R      train adapters of rank R (>= 1) on the --init model\n"
    "      --lora-alpha A     their alpha A (default R: scale 1)\n"
    "      --lora-targets L   the modules adapted: q_proj,k_proj,v_proj,o_proj,gate_proj,\n"
    "                         up_proj,down_proj, any of them, or all-linear (default)\n"
    "      --lora-rslora      scale A/sqrt(R) (rank-stabilized LoRA) instead of A/R\n"
    "      --lora-dropout P   0 only (default): adapters train without dropout\n"
    "      --adapter DIR      continue training this PEFT adapter (its rank, alpha and\n"
    "                         targets) on the --init model\n"
    "      --base-dtype D     the frozen base's matrices in f32 (default) or bf16\n"
    "      --save W           adapter (default): versions hold the adapter; merged: the\n"
    "                         merged model too (config.json, model.safetensors)\n"
    "\n"
    "Batches:\n"
    "      --batch N          sequences per step, at least: whole groups (default 64)\n"
    "      --recompute        keep each decoder layer's input only, and compute its other\n"
    "                         activations again in the backward pass (activation\n"
    "                         checkpointing): the same gradients, less memory, a\n"
    "                         forward pass more of time\n"
    "      --micro M          micro-batches per step (gradient accumulation; default 1;\n"
    "                         more when one would exceed 16384 tokens)\n"
    "      --keep-last        at the end of input, train on a last partial batch too\n"
    "      --max-steps N      stop after N steps (counted from --init, across --resume)\n"
    "\n"
    "Loss (rl-ratio's w and mask apply to every loss but sft, mask to sft):\n"
    "      --loss L           pg (default), ppo, cispo, gspo or sft\n"
    "      --adv A            grpo (default), drgrpo or rloo; a record's adv is used as given\n"
    "      --norm N           seqs (default), tokens or const:N\n"
    "      --eps E            the ratio's clip range [1-E, 1+E] of ppo, cispo and gspo\n"
    "                         (defaults: ppo 0.2; cispo 1 below, 4 above; gspo 3e-4, 4e-4)\n"
    "      --eps-low E1       ... its lower side alone: 1-E1, 0 <= E1 <= 1\n"
    "      --eps-high E2      ... its upper side alone: 1+E2 (E2 > E1: DAPO's clip-higher)\n"
    "      --epochs K         ppo, cispo, gspo: steps on each batch (default 1)\n"
    "      --tis C            weigh each token by min(pi/mu, C) here, as rl-ratio --clip C\n"
    "                         would, pi from this learner's own forward (the first\n"
    "                         epoch's), mu the record's logp: no rl-ratio in the pipe\n"
    "                         (not gspo, whose ratio is the sequence's)\n"
    "      --kl-coef B        a penalty B on the KL to a frozen reference model, from\n"
    "                         each record's logp_ref (rl-ratio --model ref/ --as logp_ref);\n"
    "                         not with sft\n"
    "      --kl-est K         its per-token estimator of d = logp - logp_ref in the loss:\n"
    "                         k1 = d, k2 = d^2/2, k3 = exp(-d) + d - 1 (default)\n"
    "      --kl-in WHERE      loss (default): B/Z * sum mask*k added to the loss;\n"
    "                         reward: B * sum mask*(logp_s - logp_ref) taken off each\n"
    "                         sequence's reward before the advantages, logp_s its\n"
    "                         logp_learner, else its logp\n"
    "      --entropy-coef C   an entropy bonus: C/Z * sum mask*H off the loss, H the\n"
    "                         entropy of each token's distribution at the record's\n"
    "                         temperature (C < 0: a penalty); with every loss\n"
    "      --mask-truncated   mask 0 on every token of a sequence whose finish is\n"
    "                         \"length\" (DAPO's overlong filtering)\n"
    "      --overlong L,C     DAPO's soft overlong punishment added to the reward: 0 up\n"
    "                         to L-C model tokens, then falling linearly to -1 at L\n"
    "                         tokens, -1 beyond (0 < C <= L)\n"
    "\n"
    "Optimizer (AdamW as torch.optim.AdamW):\n"
    "      --lr X             peak learning rate (default 1e-6)\n"
    "      --warmup STEPS     linear warm-up steps (default 0)\n"
    "      --schedule S       constant (default) or cosine (to 0 at --total-steps)\n"
    "      --total-steps N    the cosine schedule's length\n"
    "      --weight-decay X   on matrices and embeddings (default 0.01)\n"
    "      --beta1 X, --beta2 X, --adam-eps X   (defaults 0.9, 0.999, 1e-8)\n"
    "      --grad-clip X      the most gradient norm (default 1; 0 = off)\n"
    "\n"
    "Data-parallel (under mpirun or srun: rank 0 reads the input and writes the\n"
    "checkpoints and metrics; each rank computes the gradient of its share of\n"
    "every batch's groups; AdamW's state is sharded over the ranks):\n"
    "      --collective-timeout S  give up when the other ranks have not answered a\n"
    "                         collective for S seconds (default 600; 0 = never)\n"
    "\n"
    "Output:\n"
    "      --metrics FILE     one JSON line per step (- : standard output)\n"
    "  -q, --quiet            no line per step and no summary on standard error\n"
    "      --progress         progress of reading on standard error even when not a\n"
    "                         terminal (a line per step is written either way)\n"
    CLI_PARTIAL_HELP
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show versions and exit\n"
    "\n"
    "Exit status: 0 ok (also after SIGINT or SIGTERM: the newest complete checkpoint\n"
    "stays), 1 invalid input (the steps before it are kept), a partial one (trained\n"
    "on, as a whole one) or a failed write, 2 usage.\n"
    "\n"
    "Examples:\n"
    "  rl-sample --model m/ train.jsonl | rl-ratio --model m/ | rl-learn --init m/ --out ckpt/\n"
    "  rl-sample --model m/ train.jsonl | rl-learn --tis 2 --init m/ --out ckpt/\n"
    "  rl-learn --loss sft --init m/ --out sft/ --batch 32 examples.jsonl\n"
    "  rl-learn --resume --out ckpt/ --max-steps 100 saved/*.rlr\n"
    "  ... | mpirun -np 4 rl-learn --init m/ --out ckpt/ --batch 256\n";

typedef struct {
    pub_opts pub;             // the model, the checkpoint, the metrics
    uint64_t max_steps;
    double collective_timeout;
    int keep_last, progress;
    int allow_partial;
    cli_chat_args chat;
    lrn_opts lrn;
    lora_config lora;         // --lora-rank R > 0: LoRA of this config
    int recompute;            // activation checkpointing (model_set_recompute)
} options;

static options parse_options(int argc, char **argv) {
    enum { O_INIT = 256, O_CONFIG, O_SEED, O_INIT_STD, O_OUT, O_RESUME, O_NO_SKIP, O_KEEP, O_KEEP_EVERY, O_BATCH, O_MICRO,
           O_KEEP_LAST, O_MAX_STEPS, O_LOSS, O_ADV, O_NORM, O_EPS, O_EPOCHS, O_LR, O_WARMUP, O_SCHEDULE,
           O_TOTAL, O_WD, O_BETA1, O_BETA2, O_ADAM_EPS, O_CLIP, O_METRICS, O_PROGRESS, O_DEVICE, O_SAVE_DTYPE, O_CHATARG,
           O_SHARD, O_COLL_TIMEOUT, O_STATE_EVERY, O_TIS, O_PARTIAL, O_EPS_LOW, O_EPS_HIGH,
           O_KL_COEF, O_KL_EST, O_KL_IN, O_MASK_TRUNC, O_OVERLONG, O_ENT_COEF, O_LORA_RANK, O_LORA_ALPHA,
           O_LORA_TARGETS, O_LORA_RSLORA, O_LORA_DROPOUT, O_ADAPTER, O_BASE_DTYPE, O_SAVE, O_RECOMPUTE };
    static const struct option longopts[] = {
        {"init", required_argument, 0, O_INIT},       {"config", required_argument, 0, O_CONFIG},
        {"seed", required_argument, 0, O_SEED},       {"init-std", required_argument, 0, O_INIT_STD},
        {"out", required_argument, 0, O_OUT},         {"resume", no_argument, 0, O_RESUME},
        {"no-skip", no_argument, 0, O_NO_SKIP},       {"keep", required_argument, 0, O_KEEP},
        {"allow-partial", no_argument, 0, O_PARTIAL},
        {"keep-every", required_argument, 0, O_KEEP_EVERY}, {"device", required_argument, 0, O_DEVICE},
        {"state-every", required_argument, 0, O_STATE_EVERY},
        {"chat-arg", required_argument, 0, O_CHATARG},
        {"save-dtype", required_argument, 0, O_SAVE_DTYPE}, {"max-shard-size", required_argument, 0, O_SHARD},
        {"batch", required_argument, 0, O_BATCH},     {"micro", required_argument, 0, O_MICRO},
        {"keep-last", no_argument, 0, O_KEEP_LAST},   {"max-steps", required_argument, 0, O_MAX_STEPS},
        {"loss", required_argument, 0, O_LOSS},       {"adv", required_argument, 0, O_ADV},
        {"norm", required_argument, 0, O_NORM},       {"eps", required_argument, 0, O_EPS},
        {"eps-low", required_argument, 0, O_EPS_LOW}, {"eps-high", required_argument, 0, O_EPS_HIGH},
        {"tis", required_argument, 0, O_TIS},
        {"kl-coef", required_argument, 0, O_KL_COEF}, {"kl-est", required_argument, 0, O_KL_EST},
        {"kl-in", required_argument, 0, O_KL_IN},     {"mask-truncated", no_argument, 0, O_MASK_TRUNC},
        {"overlong", required_argument, 0, O_OVERLONG}, {"entropy-coef", required_argument, 0, O_ENT_COEF},
        {"lora-rank", required_argument, 0, O_LORA_RANK}, {"lora-alpha", required_argument, 0, O_LORA_ALPHA},
        {"lora-targets", required_argument, 0, O_LORA_TARGETS}, {"lora-rslora", no_argument, 0, O_LORA_RSLORA},
        {"lora-dropout", required_argument, 0, O_LORA_DROPOUT}, {"adapter", required_argument, 0, O_ADAPTER},
        {"base-dtype", required_argument, 0, O_BASE_DTYPE}, {"save", required_argument, 0, O_SAVE},
        {"recompute", no_argument, 0, O_RECOMPUTE},
        {"epochs", required_argument, 0, O_EPOCHS},   {"lr", required_argument, 0, O_LR},
        {"warmup", required_argument, 0, O_WARMUP},   {"schedule", required_argument, 0, O_SCHEDULE},
        {"total-steps", required_argument, 0, O_TOTAL}, {"weight-decay", required_argument, 0, O_WD},
        {"beta1", required_argument, 0, O_BETA1},     {"beta2", required_argument, 0, O_BETA2},
        {"adam-eps", required_argument, 0, O_ADAM_EPS}, {"grad-clip", required_argument, 0, O_CLIP},
        {"metrics", required_argument, 0, O_METRICS}, {"quiet", no_argument, 0, 'q'},
        {"progress", no_argument, 0, O_PROGRESS},     {"help", no_argument, 0, 'h'},
        {"collective-timeout", required_argument, 0, O_COLL_TIMEOUT},
        {"version", no_argument, 0, 'V'},             {0, 0, 0, 0}};
    options o = {.pub = {.init_std = 0.02, .keep = 5, .state_every = 1}, .collective_timeout = 600,
                 .lrn = {.loss = LOSS_PG, .adv = ADV_GRPO, .norm = NORM_SEQS, .epochs = 1, .kl = KL_K3,
                         .micro = 1, .batch = 64, .opt = adamw_default_opts}};
    adamw_opts *a = &o.lrn.opt;
    rl_err e;
    int c, max_steps_given = 0, kl_est_given = 0, kl_in_given = 0, lora_given = 0, save_given = 0;
    o.lora.targets = LORA_ALL;
    o.lora.alpha = NAN;   // default: the rank
    double eps = NAN, eps_low = NAN, eps_high = NAN;   // as given (NAN: not), resolved by lrn_clip_range
    while ((c = getopt_long(argc, argv, "qhV", longopts, NULL)) != -1) {
        switch (c) {
        case O_INIT: o.pub.init = optarg; break;
        case O_CONFIG: o.pub.config = optarg; break;
        case O_SEED: o.pub.seed = cli_parse_uint("--seed", optarg, UINT64_MAX, 0); break;
        case O_INIT_STD: o.pub.init_std = cli_parse_f64("--init-std", optarg, 0, 10, 0); break;
        case O_OUT: o.pub.out = optarg; break;
        case O_DEVICE: o.pub.device = cli_parse_device(optarg); break;
        case O_CHATARG: cli_chat_arg(&o.chat, optarg); break;
        case O_RESUME: o.pub.resume = 1; break;
        case O_NO_SKIP: o.pub.no_skip = 1; break;
        case O_PARTIAL: o.allow_partial = 1; break;
        case O_KEEP: o.pub.keep = (int)cli_parse_uint("--keep", optarg, 1000000, 0); break;
        case O_KEEP_EVERY: o.pub.keep_every = cli_parse_uint("--keep-every", optarg, UINT32_MAX, 0); break;
        case O_STATE_EVERY:
            if (!(o.pub.state_every = cli_parse_uint("--state-every", optarg, UINT32_MAX, 0)))
                cli_usage_error("--state-every: must be at least 1");
            break;
        case O_SAVE_DTYPE:
            if (dt_parse(optarg, &o.pub.save.dtype) || dt_scaled(o.pub.save.dtype))
                cli_usage_error("--save-dtype: expected f32, bf16 or f16, got '%s'", optarg);
            break;
        case O_SHARD:
            o.pub.save.max_shard_bytes = cli_parse_uint("--max-shard-size", optarg, UINT64_MAX, 1);
            if (!o.pub.save.max_shard_bytes) cli_usage_error("--max-shard-size: must be at least 1 byte");
            break;
        case O_BATCH: o.lrn.batch = cli_parse_uint("--batch", optarg, 1 << 20, 0); break;
        case O_MICRO: o.lrn.micro = (int)cli_parse_uint("--micro", optarg, 1 << 20, 0); break;
        case O_KEEP_LAST: o.keep_last = 1; break;
        case O_MAX_STEPS: max_steps_given = 1; o.max_steps = cli_parse_uint("--max-steps", optarg, UINT64_MAX, 0); break;
        case O_LOSS:
            if (lrn_parse_loss(optarg, &o.lrn.loss, &e)) cli_usage_error("%s", e.msg);
            break;
        case O_ADV:
            if (lrn_parse_adv(optarg, &o.lrn.adv, &e)) cli_usage_error("%s", e.msg);
            break;
        case O_NORM:
            if (lrn_parse_norm(optarg, &o.lrn.norm, &o.lrn.norm_const, &e)) cli_usage_error("%s", e.msg);
            break;
        case O_TIS:
            o.lrn.tis = cli_parse_f64("--tis", optarg, 0, 1e30, 0);
            if (!(o.lrn.tis > 0)) cli_usage_error("--tis: the cap C must be above 0");
            break;
        case O_KL_COEF: o.lrn.kl_coef = cli_parse_f64("--kl-coef", optarg, 0, 1e30, 0); break;
        case O_KL_EST:
            if (lrn_parse_kl_est(optarg, &o.lrn.kl, &e)) cli_usage_error("%s", e.msg);
            kl_est_given = 1;
            break;
        case O_KL_IN:
            if (lrn_parse_kl_in(optarg, &o.lrn.kl_in_reward, &e)) cli_usage_error("%s", e.msg);
            kl_in_given = 1;
            break;
        case O_MASK_TRUNC: o.lrn.mask_truncated = 1; break;
        case O_ENT_COEF: o.lrn.entropy_coef = cli_parse_f64("--entropy-coef", optarg, -1e30, 1e30, 0); break;
        case O_OVERLONG:
            if (lrn_parse_overlong(optarg, &o.lrn.overlong_max, &o.lrn.overlong_cache, &e)) cli_usage_error("%s", e.msg);
            break;
        case O_LORA_RANK:
            if (!(o.lora.rank = (int)cli_parse_uint("--lora-rank", optarg, 1 << 16, 0)))
                cli_usage_error("--lora-rank: at least 1");
            break;
        case O_LORA_ALPHA:
            o.lora.alpha = cli_parse_f64("--lora-alpha", optarg, 0, 1e9, 0);
            if (!(o.lora.alpha > 0)) cli_usage_error("--lora-alpha: must be above 0");
            lora_given = 1;
            break;
        case O_LORA_TARGETS:
            if (lora_parse_targets(optarg, &o.lora.targets, &e)) cli_usage_error("--lora-targets: %s", e.msg);
            lora_given = 1;
            break;
        case O_LORA_RSLORA: o.lora.rslora = 1; lora_given = 1; break;
        case O_LORA_DROPOUT:
            lora_given = 1;
            if (cli_parse_f64("--lora-dropout", optarg, 0, 1, 0) != 0)
                cli_usage_error("--lora-dropout %s: adapters train without dropout (0 only): with dropout the "
                                "learner's log-probabilities would not be those its loss weighs", optarg);
            break;
        case O_ADAPTER: o.pub.adapter = optarg; break;
        case O_RECOMPUTE: o.recompute = 1; break;
        case O_BASE_DTYPE:
            if (dt_parse(optarg, &o.pub.base_dtype) || (o.pub.base_dtype != DT_F32 && o.pub.base_dtype != DT_BF16))
                cli_usage_error("--base-dtype: expected f32 or bf16, got '%s'", optarg);
            break;
        case O_SAVE:
            if (strcmp(optarg, "adapter") && strcmp(optarg, "merged"))
                cli_usage_error("--save: expected adapter or merged, got '%s'", optarg);
            o.pub.merged = !strcmp(optarg, "merged");
            save_given = 1;
            break;
        case O_EPS: eps = cli_parse_f64("--eps", optarg, 0, 1, 1); break;
        case O_EPS_LOW: eps_low = cli_parse_f64("--eps-low", optarg, 0, 1, 0); break;
        case O_EPS_HIGH: eps_high = cli_parse_f64("--eps-high", optarg, 0, 1e30, 0); break;
        case O_EPOCHS: o.lrn.epochs = (int)cli_parse_uint("--epochs", optarg, 1000, 0); break;
        case O_LR: a->lr = cli_parse_f64("--lr", optarg, 0, 1e3, 0); break;
        case O_WARMUP: a->warmup = cli_parse_uint("--warmup", optarg, UINT64_MAX, 0); break;
        case O_SCHEDULE:
            if (!strcmp(optarg, "constant")) a->schedule = SCHED_CONSTANT;
            else if (!strcmp(optarg, "cosine")) a->schedule = SCHED_COSINE;
            else cli_usage_error("--schedule '%s': use constant or cosine", optarg);
            break;
        case O_TOTAL: a->total_steps = cli_parse_uint("--total-steps", optarg, UINT64_MAX, 0); break;
        case O_WD: a->weight_decay = cli_parse_f64("--weight-decay", optarg, 0, 1e3, 0); break;
        case O_BETA1: a->beta1 = cli_parse_f64("--beta1", optarg, 0, 1, 1); break;
        case O_BETA2: a->beta2 = cli_parse_f64("--beta2", optarg, 0, 1, 1); break;
        case O_ADAM_EPS: a->eps = cli_parse_f64("--adam-eps", optarg, 0, 1, 0); break;
        case O_CLIP: a->grad_clip = cli_parse_f64("--grad-clip", optarg, 0, 1e30, 0); break;
        case O_METRICS: o.pub.metrics = optarg; break;
        case 'q': o.pub.quiet = 1; break;
        case O_PROGRESS: o.progress = 1; break;
        case O_COLL_TIMEOUT: o.collective_timeout = cli_parse_f64("--collective-timeout", optarg, 0, 1e9, 0); break;
        case 'h': fputs(USAGE, stdout); exit(0);
        case 'V': cli_print_version(); exit(0);
        default: fprintf(stderr, "Try 'rl-learn --help' for more information.\n"); exit(2);
        }
    }
    if (!o.pub.out) cli_usage_error("--out CKPT: the checkpoint directory is required");
    if (o.pub.resume && (o.pub.init || o.pub.config))
        cli_usage_error("--resume takes the model from CKPT/latest: leave out --%s", o.pub.init ? "init" : "config");
    if (!o.pub.resume && !!o.pub.init + !!o.pub.config != 1)
        cli_usage_error("give the initial model: --init DIR or --config FILE (or --resume)");
    if (o.lrn.batch == 0) cli_usage_error("--batch: a step takes at least one sequence");
    if (o.max_steps == 0 && max_steps_given) cli_usage_error("--max-steps: at least 1");
    if (o.lrn.micro < 1) cli_usage_error("--micro: at least one micro-batch per step");
    if (o.lrn.epochs < 1) cli_usage_error("--epochs: at least 1");
    if (o.lrn.epochs > 1 && !lrn_ratio_loss(o.lrn.loss))
        cli_usage_error("--epochs: only the ppo, cispo and gspo losses take several steps per batch");
    if (o.lrn.tis > 0 && o.lrn.loss == LOSS_SFT) cli_usage_error("--tis weighs the pg, ppo and cispo losses, not sft");
    if (o.lrn.tis > 0 && o.lrn.loss == LOSS_GSPO)
        cli_usage_error("--tis weighs each token, and gspo's ratio is the sequence's: weigh the sequences before "
                        "rl-learn with rl-ratio --mode geo (or seq)");
    if (o.lrn.kl_coef > 0 && o.lrn.loss == LOSS_SFT)
        cli_usage_error("--kl-coef penalizes a policy's distance from a reference: not with --loss sft");
    if ((kl_est_given || kl_in_given) && !(o.lrn.kl_coef > 0))
        cli_usage_error("--%s goes with --kl-coef B > 0", kl_est_given ? "kl-est" : "kl-in");
    if (kl_est_given && o.lrn.kl_in_reward)
        cli_usage_error("--kl-in reward takes k1 of each sequence off its reward: --kl-est is for --kl-in loss");
    lrn_clip_range(o.lrn.loss, eps, eps_low, eps_high, &o.lrn.eps_low, &o.lrn.eps_high);
    if (o.chat.n && o.lrn.loss != LOSS_SFT) cli_usage_error("--chat-arg: only --loss sft renders conversations");
    if (a->schedule == SCHED_COSINE && a->total_steps <= a->warmup)
        cli_usage_error("--schedule cosine needs --total-steps larger than --warmup");
    if (o.pub.no_skip && !o.pub.resume) cli_usage_error("--no-skip goes with --resume");
    int lora = o.lora.rank > 0 || o.pub.adapter;
    if (o.lora.rank > 0 && o.pub.adapter)
        cli_usage_error("--adapter continues an adapter of its own rank: leave out --lora-rank");
    if (o.pub.adapter && lora_given)
        cli_usage_error("--adapter continues an adapter as its adapter_config.json says: leave out --lora-*");
    if (o.pub.resume && (lora || lora_given))
        cli_usage_error("--resume continues the LoRA adapter of CKPT/latest as its adapter_config.json says: "
                        "leave out --lora-rank, --lora-* and --adapter");
    if (!lora && !o.pub.resume && (lora_given || save_given || o.pub.base_dtype != DT_F32))
        cli_usage_error("--lora-alpha, --lora-targets, --lora-rslora, --lora-dropout, --base-dtype and --save are "
                        "for LoRA: give --lora-rank R (or --adapter DIR)");
    if (lora && o.pub.config)
        cli_usage_error("LoRA trains adapters on a base model: give it with --init DIR, not --config");
    if (isnan(o.lora.alpha)) o.lora.alpha = o.lora.rank;
    return o;
}

// ---- Signals: a step in progress is abandoned; idle, the tool exits at once.
// Busy is the main thread in a step (BUSY_STEP) or a version being written
// (BUSY_WRITE): whichever of the two ends last exits, after its checkpoint and
// metrics line are out (cli_signal.h). The writer's thread takes no signals.
enum { BUSY_STEP, BUSY_WRITE };

// version: the newest version written; complete: the newest with AdamW's
// state (what --resume continues from), older with --state-every.
static void stop_message(const char *root, uint64_t version, uint64_t complete) {
    if (complete == version)
        cli_set_stop_message("rl-learn: stopped by a signal; newest checkpoint %s/v%06llu\n", root,
                             (unsigned long long)version);
    else
        cli_set_stop_message("rl-learn: stopped by a signal; newest checkpoint %s/v%06llu (weights only: --resume "
                             "continues from v%06llu)\n", root, (unsigned long long)version,
                             (unsigned long long)complete);
}

// The publisher's hooks (publish.h): a version being written is busy; once
// it is out, it is the one a signal names.
static void on_writing(void *ctx) {
    (void)ctx;
    cli_busy(BUSY_WRITE);
}

static void on_published(void *ctx, uint64_t version, uint64_t complete) {
    stop_message(((const pub_opts *)ctx)->out, version, complete);
    cli_idle(BUSY_WRITE);
}

static void on_write_failed(void *ctx, const char *message) {
    (void)ctx;
    fprintf(stderr, "%s: error: %s\n", cli_tool(), message);
    _exit(1);
}

// A failure every rank must stop at: rank 0's message (another rank's names
// it), then the whole group ends.
static _Noreturn void die_all(dist_t *d, const char *msg) {
    fprintf(stderr, "%s: error: %s\n", cli_tool(), msg);
    dist_abort(d, 1);
}

static int is_training_kind(const rec_t *h) {
    const char *kind;
    size_t n;
    return rec_get_str(h, "kind", &kind, &n) == REC_OK && n == 8 &&
           (!memcmp(kind, "rollouts", 8) || !memcmp(kind, "examples", 8));
}

typedef struct {
    const options *o;
    publisher pub;
    relay_t relay;       // rank 0: the input not yet sent to the other ranks
    uint64_t tokens;     // trained on
    cli_partial partial; // rank 0: the partial members read
} run_t;

// Takes every step the held records allow, each saved and reported; signals
// wait (busy) until its checkpoint and metrics line are out. 1 once
// --max-steps steps are taken.
static int train(run_t *r, learner_t *l, int keep_last) {
    const options *o = r->o;
    publisher *p = &r->pub;
    rl_err e;
    while (!(o->max_steps && p->steps >= o->max_steps)) {
        if (!lrn_ready(l, keep_last)) return 0;
        // The other ranks take this step on the same records.
        if (!p->rank && relay_send(&r->relay, &e)) die_all(p->d, e.msg);
        lrn_metrics m;
        cli_busy(BUSY_STEP);
        int rc = lrn_grad(l, p->version, p->steps, &m, &e);
        if (rc == 0) {
            // The last version may still be reading the parameters and
            // moments the step changes: the wait counts in the step's seconds.
            double t0 = clock_now();
            if (p->writer) ckpt_writer_wait_model(p->writer);
            m.seconds += clock_now() - t0;
            rc = lrn_apply(l, &m, &e);
        }
        if (rc < 0) die_all(p->d, e.msg);
        if (rc > 0) {   // abandoned: the newest checkpoint is the model before the step
            if (pub_wait(p, &e)) die_all(p->d, e.msg);
            cli_stop_now();
        }
        p->version = m.version;
        p->steps = m.step;
        r->tokens += m.tokens;
        // (rank 0 reports the step once its version is out)
        if (pub_save(p, l, &m, &e)) die_all(p->d, e.msg);
        const char *warning = lrn_take_warning(l);
        if (warning && !p->rank) cli_warn("%s", warning);   // rank 0 speaks for all
        cli_idle(BUSY_STEP);
    }
    return 1;
}

// Rank 0: the inputs, read; each header and record given to the learner
// (and relayed to the other ranks), a step taken whenever a batch is full.
// 1 once --max-steps steps are taken.
static int read_inputs(run_t *r, learner_t *l, char **inputs, int ninputs) {
    const options *o = r->o;
    publisher *p = &r->pub;
    uint64_t skipped = 0, nread = 0;
    int warned_drop = 0, done = o->max_steps && p->steps >= o->max_steps;
    cli_progress prog;
    cli_progress_init(&prog, o->progress);
    rec_t *rec = rec_new();
    rl_err e;
    for (int i = 0; i < ninputs && !done; i++) {
        src_t *s = src_open(inputs[i], SRC_DETECT, &rec_default_limits, &e);
        if (!s) die_all(p->d, e.msg);
        const char *name = strcmp(inputs[i], "-") ? inputs[i] : "(stdin)";
        recr_event ev = RECR_END;
        while (!done && (ev = src_next(s, rec)) != RECR_END && ev != RECR_ERROR) {
            if (ev == RECR_HEADER && !is_training_kind(rec)) {
                src_close(s);   // (freed before the exit, so that a leak check finds nothing)
                rec_free(rec);
                cli_die("member of another kind than \"rollouts\" or \"examples\": %s", name);
            }
            if (ev == RECR_HEADER) {
                lrn_member(l, rec);
                relay_put(&r->relay, RELAY_HEADER, rec, NULL);
            }
            char why[1024];
            if (ev == RECR_TRAILER) {
                cli_progress_done(&prog);
                cli_partial_check(&r->partial, rec, name, why, sizeof why);
            }
            if (ev != RECR_RECORD) continue;
            if (skipped < p->skip) {
                skipped++;
                continue;
            }
            char where[1200];
            if (lrn_add(l, rec, src_where(s, where, sizeof where), &e)) cli_die("%s", e.msg);
            relay_put(&r->relay, RELAY_RECORD, rec, where);
            const char *drop;
            if (lrn_dropped(l, &drop) == 1 && !warned_drop++) cli_warn("%s", drop);   // the first one, at once
            nread++;
            if (lrn_ready(l, 0)) cli_progress_done(&prog);
            done = train(r, l, 0);
            if (cli_progress_due(&prog))
                cli_progress_print(&prog, "%llu records read, %zu held for step %llu", (unsigned long long)nread,
                                   lrn_held(l), (unsigned long long)p->version + 1);
        }
        if (!done && ev == RECR_ERROR) {
            char why[2048];
            snprintf(why, sizeof why, "%s", src_error(s));
            src_close(s);
            rec_free(rec);
            cli_die("%s", why);
        }
        src_close(s);
    }
    cli_progress_done(&prog);
    rec_free(rec);
    relay_put(&r->relay, RELAY_END, NULL, NULL);
    if (relay_send(&r->relay, &e)) die_all(p->d, e.msg);
    return done;
}

// The other ranks: rank 0's input, given to the learner as rank 0 gave it.
static int follow_inputs(run_t *r, learner_t *l) {
    publisher *p = &r->pub;
    int done = r->o->max_steps && p->steps >= r->o->max_steps, kind;
    rec_t *rec = rec_new();
    rl_err e;
    char where[1200];
    while ((kind = relay_next(&r->relay, rec, where, sizeof where, &e)) != RELAY_END) {
        if (kind < 0) die_all(p->d, e.msg);
        if (kind == RELAY_HEADER) lrn_member(l, rec);
        else if (lrn_add(l, rec, where, &e)) die_all(p->d, e.msg);
        else if (!done) done = train(r, l, 0);
    }
    rec_free(rec);
    return done;
}

int main(int argc, char **argv) {
    cli_init("rl-learn");
    options o = parse_options(argc, argv);
    if (o.lora.rank > 0) o.pub.lora = &o.lora;
    int ninputs;
    char **inputs = cli_inputs(argc, argv, &ninputs);
    cli_refuse_overwrite(inputs, ninputs, o.pub.metrics, "metrics file");
    cli_busy(BUSY_STEP);   // until the first checkpoint exists
    cli_catch_signals(CLI_STOP_WHEN_IDLE);

    double t0 = clock_now();
    rl_err e;
    const char *force = getenv("RLPIPE_DIST");
    dist_t *d = dist_open(force && !strcmp(force, "1"), o.collective_timeout, &e);
    if (!d) cli_die("%s", e.msg);
    int rank = dist_rank(d), dp = dist_active(d);
    static char tool[40];
    if (rank) {   // rank 0 speaks for all; the others only say their errors, naming themselves
        snprintf(tool, sizeof tool, "rl-learn (rank %d)", rank);
        cli_init(tool);
        o.pub.quiet = 1, o.progress = 0, o.pub.metrics = NULL;
    }
    o.pub.tool = cli_tool();
    o.pub.writing = on_writing, o.pub.published = on_published, o.pub.failed = on_write_failed, o.pub.ctx = &o.pub;
    run_t run = {.o = &o, .partial = {.allow = o.allow_partial}};
    publisher *p = &run.pub;
    pub_init(p, &o.pub, &o.lrn, d, t0);
    relay_init(&run.relay, d);
    tokenizer *tok = NULL;
    if (pub_start(p, &tok, &e)) cli_die("%s", e.msg);
    model_set_recompute(p->m, o.recompute);
    // Only sft renders conversations: the other losses never read the template.
    // Loaded before the first version is written, so that a refused template leaves no checkpoint.
    chat_t *chat = tok && o.lrn.loss == LOSS_SFT ? cli_chat_load(p->from, tok, &o.chat) : NULL;
    if (!tok && o.chat.n) cli_usage_error("--chat-arg: the model has no tokenizer.json, hence no chat template");
    if (!o.pub.resume && pub_save(p, NULL, NULL, &e)) die_all(d, e.msg);
    // Opened once the checkpoint directory is known good, so that a refused run loses nothing.
    int metrics_file = o.pub.metrics && strcmp(o.pub.metrics, "-");
    if (o.pub.metrics && !metrics_file) p->metrics = STDOUT_FILENO;
    if (metrics_file && (p->metrics = open(o.pub.metrics, (o.pub.resume ? O_RDWR : O_WRONLY | O_TRUNC) | O_CREAT |
                                                              O_APPEND | O_CLOEXEC, 0666)) < 0)
        cli_die("cannot open the metrics file: %s: %s", o.pub.metrics, strerror(errno));
    size_t dropped = 0;
    if (o.pub.resume && metrics_file && pub_trim_metrics(p, &dropped, &e)) cli_die("%s", e.msg);
    if (dropped && !o.pub.quiet)
        fprintf(stderr, "rl-learn: resuming at version %llu: %zu line%s of %s, from the versions after it, cut off: "
                "their steps are taken again\n", (unsigned long long)p->version, dropped, dropped > 1 ? "s" : "",
                o.pub.metrics);
    p->complete = p->version;
    stop_message(o.pub.out, p->version, p->complete);
    cli_idle(BUSY_STEP);
    if (p->skip && !o.pub.quiet)
        fprintf(stderr, "rl-learn: resuming at version %llu: skipping the %llu records its steps consumed (--no-skip to train on them)\n",
                (unsigned long long)p->version, (unsigned long long)p->skip);
    const lora_config *lc = model_lora(p->m);
    if (lc && !o.pub.quiet && !rank) {
        char t[128];
        lora_targets_str(lc->targets, t, sizeof t);
        fprintf(stderr, "rl-learn: LoRA of rank %d, alpha %g (scale %g%s) on %s: %zu parameters train, the base's "
                "are frozen at %s\n", lc->rank, lc->alpha, (double)lora_scale(lc), lc->rslora ? ", rsLoRA" : "", t,
                model_nparams(p->m), dt_name(model_dtype(p->m)));
    }
    if (dp && !o.pub.quiet) {
        size_t lo, hi;
        model_train_range(p->m, &lo, &hi);
        char b[32];
        fprintf(stderr, "rl-learn: %d ranks (%s); AdamW's moments of %zu of %zu parameters on each (%s on rank 0)\n",
                dist_size(d), dist_transport(d, model_ops(p->m)), hi - lo, model_nparams(p->m),
                fmt_bytes(2 * (hi - lo) * sizeof(float), b, sizeof b));
    }
    o.lrn.tok = tok;
    o.lrn.chat = chat;
    // Every rank takes every step: none abandons one alone (a signal ends them after it).
    o.lrn.stop = dist_size(d) > 1 ? NULL : &cli_stop_requested;
    o.lrn.dist = dp ? d : NULL;
    o.lrn.parts = p->parts;
    learner_t *l = lrn_new(p->m, &o.lrn);
    uint64_t first = p->version;
    int done = rank ? follow_inputs(&run, l) : read_inputs(&run, l, inputs, ninputs);
    if (lrn_dropped(l, NULL) > 1 && !rank)
        cli_warn("%zu texts in all had characters with no token, dropped as Hugging Face's tokenizers drops them",
                 lrn_dropped(l, NULL));
    lrn_end(l);
    if (!done) train(&run, l, o.keep_last);
    if (pub_complete_last(p, &e)) die_all(d, e.msg);
    if (metrics_file && close(p->metrics)) cli_die("write error: %s: %s", o.pub.metrics, strerror(errno));
    char ranks[32] = "";
    if (dist_size(d) > 1) snprintf(ranks, sizeof ranks, ", %d ranks", dist_size(d));
    if (!o.pub.quiet)
        fprintf(stderr, "rl-learn: %llu steps (versions %llu to %llu), %llu tokens, %zu records left unused, %s/v%06llu, %.2f s on %s%s\n",
                (unsigned long long)(p->version - first), (unsigned long long)first, (unsigned long long)p->version,
                (unsigned long long)run.tokens, lrn_held(l), o.pub.out, (unsigned long long)p->version,
                clock_now() - t0, model_device(p->m), ranks);
    lrn_free(l);
    chat_free(chat);
    tok_free(tok);
    pub_free(p);
    relay_free(&run.relay);
    dist_close(d);
    return cli_partial_failed(&run.partial);
}
