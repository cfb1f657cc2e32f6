// rl-learn — the learner: one optimizer step per batch of whole groups
// (learner.h), a complete checkpoint after every step (checkpoint.h), a
// metrics line per step. The initial model is written first, as the version
// it had (0 for a model directory that is not a checkpoint); each step makes
// the next version, written while the next step runs (ckpt_writer.h) and
// reported once it is on the disk.
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/cli_chat.h"
#include "cli/cli_device.h"
#include "clock.h"
#include "learn/ckpt_model.h"
#include "learn/ckpt_writer.h"
#include "learn/learner.h"
#include "learn/zero.h"
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
    "Batches:\n"
    "      --batch N          sequences per step, at least: whole groups (default 64)\n"
    "      --micro M          micro-batches per step (gradient accumulation; default 1;\n"
    "                         more when one would exceed 16384 tokens)\n"
    "      --keep-last        at the end of input, train on a last partial batch too\n"
    "      --max-steps N      stop after N steps (counted from --init, across --resume)\n"
    "\n"
    "Loss (rl-ratio's w and mask apply to pg and ppo, mask to sft):\n"
    "      --loss L           pg (default), ppo or sft\n"
    "      --adv A            grpo (default), drgrpo or rloo; a record's adv is used as given\n"
    "      --norm N           seqs (default), tokens or const:N\n"
    "      --eps E            PPO clip range (default 0.2)\n"
    "      --epochs K         PPO: steps on each batch (default 1)\n"
    "      --tis C            weigh each token by min(pi/mu, C) here, as rl-ratio --clip C\n"
    "                         would, pi from this learner's own forward (the first\n"
    "                         epoch's), mu the record's logp: no rl-ratio in the pipe\n"
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
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show versions and exit\n"
    "\n"
    "Exit status: 0 ok (also after SIGINT or SIGTERM: the newest complete checkpoint\n"
    "stays), 1 invalid input (the steps before it are kept) or a failed write, 2 usage.\n"
    "\n"
    "Examples:\n"
    "  rl-sample --model m/ train.jsonl | rl-ratio --model m/ | rl-learn --init m/ --out ckpt/\n"
    "  rl-sample --model m/ train.jsonl | rl-learn --tis 2 --init m/ --out ckpt/\n"
    "  rl-learn --loss sft --init m/ --out sft/ --batch 32 examples.jsonl\n"
    "  rl-learn --resume --out ckpt/ --max-steps 100 saved/*.rlr\n"
    "  ... | mpirun -np 4 rl-learn --init m/ --out ckpt/ --batch 256\n";

typedef struct {
    const char *init, *config, *out, *metrics;
    uint64_t seed, max_steps, keep_every, state_every;
    double init_std, collective_timeout;
    int resume, no_skip, keep, keep_last, quiet, progress;
    rl_device device;
    hfw_write_opts save;
    cli_chat_args chat;
    lrn_opts lrn;
} options;

static options parse_options(int argc, char **argv) {
    enum { O_INIT = 256, O_CONFIG, O_SEED, O_INIT_STD, O_OUT, O_RESUME, O_NO_SKIP, O_KEEP, O_KEEP_EVERY, O_BATCH, O_MICRO,
           O_KEEP_LAST, O_MAX_STEPS, O_LOSS, O_ADV, O_NORM, O_EPS, O_EPOCHS, O_LR, O_WARMUP, O_SCHEDULE,
           O_TOTAL, O_WD, O_BETA1, O_BETA2, O_ADAM_EPS, O_CLIP, O_METRICS, O_PROGRESS, O_DEVICE, O_SAVE_DTYPE, O_CHATARG,
           O_SHARD, O_COLL_TIMEOUT, O_STATE_EVERY, O_TIS };
    static const struct option longopts[] = {
        {"init", required_argument, 0, O_INIT},       {"config", required_argument, 0, O_CONFIG},
        {"seed", required_argument, 0, O_SEED},       {"init-std", required_argument, 0, O_INIT_STD},
        {"out", required_argument, 0, O_OUT},         {"resume", no_argument, 0, O_RESUME},
        {"no-skip", no_argument, 0, O_NO_SKIP},       {"keep", required_argument, 0, O_KEEP},
        {"keep-every", required_argument, 0, O_KEEP_EVERY}, {"device", required_argument, 0, O_DEVICE},
        {"state-every", required_argument, 0, O_STATE_EVERY},
        {"chat-arg", required_argument, 0, O_CHATARG},
        {"save-dtype", required_argument, 0, O_SAVE_DTYPE}, {"max-shard-size", required_argument, 0, O_SHARD},
        {"batch", required_argument, 0, O_BATCH},     {"micro", required_argument, 0, O_MICRO},
        {"keep-last", no_argument, 0, O_KEEP_LAST},   {"max-steps", required_argument, 0, O_MAX_STEPS},
        {"loss", required_argument, 0, O_LOSS},       {"adv", required_argument, 0, O_ADV},
        {"norm", required_argument, 0, O_NORM},       {"eps", required_argument, 0, O_EPS},
        {"tis", required_argument, 0, O_TIS},
        {"epochs", required_argument, 0, O_EPOCHS},   {"lr", required_argument, 0, O_LR},
        {"warmup", required_argument, 0, O_WARMUP},   {"schedule", required_argument, 0, O_SCHEDULE},
        {"total-steps", required_argument, 0, O_TOTAL}, {"weight-decay", required_argument, 0, O_WD},
        {"beta1", required_argument, 0, O_BETA1},     {"beta2", required_argument, 0, O_BETA2},
        {"adam-eps", required_argument, 0, O_ADAM_EPS}, {"grad-clip", required_argument, 0, O_CLIP},
        {"metrics", required_argument, 0, O_METRICS}, {"quiet", no_argument, 0, 'q'},
        {"progress", no_argument, 0, O_PROGRESS},     {"help", no_argument, 0, 'h'},
        {"collective-timeout", required_argument, 0, O_COLL_TIMEOUT},
        {"version", no_argument, 0, 'V'},             {0, 0, 0, 0}};
    options o = {.init_std = 0.02, .keep = 5, .state_every = 1, .collective_timeout = 600,
                 .lrn = {.loss = LOSS_PG, .adv = ADV_GRPO, .norm = NORM_SEQS, .ppo_eps = 0.2, .epochs = 1,
                         .micro = 1, .batch = 64, .opt = adamw_default_opts}};
    adamw_opts *a = &o.lrn.opt;
    rl_err e;
    int c, max_steps_given = 0;
    while ((c = getopt_long(argc, argv, "qhV", longopts, NULL)) != -1) {
        switch (c) {
        case O_INIT: o.init = optarg; break;
        case O_CONFIG: o.config = optarg; break;
        case O_SEED: o.seed = cli_parse_uint("--seed", optarg, UINT64_MAX, 0); break;
        case O_INIT_STD: o.init_std = cli_parse_f64("--init-std", optarg, 0, 10, 0); break;
        case O_OUT: o.out = optarg; break;
        case O_DEVICE: o.device = cli_parse_device(optarg); break;
        case O_CHATARG: cli_chat_arg(&o.chat, optarg); break;
        case O_RESUME: o.resume = 1; break;
        case O_NO_SKIP: o.no_skip = 1; break;
        case O_KEEP: o.keep = (int)cli_parse_uint("--keep", optarg, 1000000, 0); break;
        case O_KEEP_EVERY: o.keep_every = cli_parse_uint("--keep-every", optarg, UINT32_MAX, 0); break;
        case O_STATE_EVERY:
            if (!(o.state_every = cli_parse_uint("--state-every", optarg, UINT32_MAX, 0)))
                cli_usage_error("--state-every: must be at least 1");
            break;
        case O_SAVE_DTYPE:
            if (dt_parse(optarg, &o.save.dtype) || dt_scaled(o.save.dtype))
                cli_usage_error("--save-dtype: expected f32, bf16 or f16, got '%s'", optarg);
            break;
        case O_SHARD:
            o.save.max_shard_bytes = cli_parse_uint("--max-shard-size", optarg, UINT64_MAX, 1);
            if (!o.save.max_shard_bytes) cli_usage_error("--max-shard-size: must be at least 1 byte");
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
        case O_EPS: o.lrn.ppo_eps = cli_parse_f64("--eps", optarg, 0, 1, 1); break;
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
        case O_METRICS: o.metrics = optarg; break;
        case 'q': o.quiet = 1; break;
        case O_PROGRESS: o.progress = 1; break;
        case O_COLL_TIMEOUT: o.collective_timeout = cli_parse_f64("--collective-timeout", optarg, 0, 1e9, 0); break;
        case 'h': fputs(USAGE, stdout); exit(0);
        case 'V': cli_print_version(); exit(0);
        default: fprintf(stderr, "Try 'rl-learn --help' for more information.\n"); exit(2);
        }
    }
    if (!o.out) cli_usage_error("--out CKPT: the checkpoint directory is required");
    if (o.resume && (o.init || o.config))
        cli_usage_error("--resume takes the model from CKPT/latest: leave out --%s", o.init ? "init" : "config");
    if (!o.resume && !!o.init + !!o.config != 1)
        cli_usage_error("give the initial model: --init DIR or --config FILE (or --resume)");
    if (o.lrn.batch == 0) cli_usage_error("--batch: a step takes at least one sequence");
    if (o.max_steps == 0 && max_steps_given) cli_usage_error("--max-steps: at least 1");
    if (o.lrn.micro < 1) cli_usage_error("--micro: at least one micro-batch per step");
    if (o.lrn.epochs < 1) cli_usage_error("--epochs: at least 1");
    if (o.lrn.epochs > 1 && o.lrn.loss != LOSS_PPO) cli_usage_error("--epochs: only the ppo loss takes several steps per batch");
    if (o.lrn.tis > 0 && o.lrn.loss == LOSS_SFT) cli_usage_error("--tis weighs the pg and ppo losses, not sft");
    if (a->schedule == SCHED_COSINE && a->total_steps <= a->warmup)
        cli_usage_error("--schedule cosine needs --total-steps larger than --warmup");
    if (o.no_skip && !o.resume) cli_usage_error("--no-skip goes with --resume");
    return o;
}

// ---- Signals: a step in progress is abandoned; idle, the tool exits at once.
// Busy is the main thread in a step (busy_step) or a version being written
// (busy_write): whichever of the two ends last exits, after its checkpoint and
// metrics line are out. The writer's thread takes no signals.
static volatile sig_atomic_t stop_requested, busy_step, busy_write;
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static char stop_message[4200];

static void stop_now(void) {
    ssize_t w = write(2, stop_message, strlen(stop_message));
    (void)w;
    _exit(0);
}

static int load(volatile sig_atomic_t *flag) { return __atomic_load_n(flag, __ATOMIC_SEQ_CST); }
static void store(volatile sig_atomic_t *flag, int v) { __atomic_store_n(flag, v, __ATOMIC_SEQ_CST); }

static void on_signal(int sig) {
    (void)sig;
    store(&stop_requested, 1);
    if (!load(&busy_step) && !load(&busy_write)) stop_now();
}

// Ends one of the two busy parts; exits if a signal came meanwhile and the other is over too.
static void set_idle(volatile sig_atomic_t *flag) {
    pthread_mutex_lock(&idle_lock);
    store(flag, 0);
    if (load(&stop_requested) && !load(&busy_step) && !load(&busy_write)) stop_now();
    pthread_mutex_unlock(&idle_lock);
}

// version: the newest version written; complete: the newest with AdamW's
// state (what --resume continues from), older with --state-every.
static void set_stop_message(const char *root, uint64_t version, uint64_t complete) {
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    if (complete == version)
        snprintf(stop_message, sizeof stop_message, "rl-learn: stopped by a signal; newest checkpoint %s/v%06llu\n",
                 root, (unsigned long long)version);
    else
        snprintf(stop_message, sizeof stop_message,
                 "rl-learn: stopped by a signal; newest checkpoint %s/v%06llu (weights only: --resume continues "
                 "from v%06llu)\n", root, (unsigned long long)version, (unsigned long long)complete);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

// ---- Checkpoints ----------------------------------------------------------------

typedef struct {
    const options *o;
    model_t *m;
    uint64_t version, steps, skip;   // the model's version; steps taken since --init
    uint64_t complete;       // the newest version written with AdamW's state
    int weights_only;        // the version being (or last) written has no AdamW state (--state-every)
    char from[4096];         // the model directory tokenizer files are copied from ("": none)
    double t0;               // when rl-learn started (cli_now)
    dist_t *d;               // the ranks
    int dp, rank;            // data-parallel (dist_active); this rank (0 writes)
    size_t *parts;           // the optimizer's parts of the parameters over the ranks (dp)
    ckpt_writer *writer;     // rank 0: writes the versions
    int background;          // the writer works while the next step runs (not data-parallel)
    int metrics;             // the metrics file's descriptor, or -1
    lrn_metrics pending;     // the step the version being written ends (reported once it is out)
    int has_pending;
    double step_end;         // when that step ended
    sbuf events;             // rank 0: the input not yet sent to the other ranks (input events below)
} run_t;

// A failure every rank must stop at: rank 0's message (another rank's names
// it), then the whole group ends.
static _Noreturn void die_all(run_t *r, const char *msg) {
    fprintf(stderr, "%s: error: %s\n", cli_tool(), msg);
    dist_abort(r->d, 1);
}

static int report(const options *o, int metrics, const lrn_metrics *m, rl_err *err);

// The writer's thread, once version `version` is published: it is the one a
// signal names, and the step that made it is reported.
static int published(void *ctx, uint64_t version, rl_err *err) {
    run_t *r = ctx;
    if (!r->weights_only) r->complete = version;
    set_stop_message(r->o->out, version, r->complete);
    if (r->has_pending) {
        double now = clock_now();
        r->pending.save_s = now - r->step_end;
        r->pending.elapsed = now - r->t0;
        if (report(r->o, r->metrics, &r->pending, err)) return -1;
    }
    set_idle(&busy_write);
    return 0;
}

// The writer's thread, when a version written while the next step runs failed.
static void write_failed(void *ctx, const char *message) {
    (void)ctx;
    fprintf(stderr, "%s: error: %s\n", cli_tool(), message);
    _exit(1);
}

// Waits for the version being written; a failed write ends the run.
static void finish_writing(run_t *r) {
    rl_err e;
    if (r->writer && ckpt_writer_wait(r->writer, &e)) die_all(r, e.msg);
}

// Every exit waits for the version being written (one written in the
// background that fails has ended the process already).
static ckpt_writer *exit_writer;
static void wait_at_exit(void) {
    rl_err e;
    if (exit_writer) ckpt_writer_wait(exit_writer, &e);
}

// The options of writing version r->version.
static ckpt_write_opts write_opts(const run_t *r, const char *state_json) {
    return (ckpt_write_opts){.root = r->o->out, .version = r->version, .state_json = state_json,
                             .copy_from = r->from[0] ? r->from : NULL, .keep = r->o->keep,
                             .keep_every = r->o->keep_every, .save = r->o->save, .weights_only = r->weights_only};
}

// Writes version r->version, made by step m (NULL: the initial model). In the
// background unless data-parallel or the initial model: then done on return.
// Without AdamW's state unless it is the initial model or a multiple of
// --state-every (every rank decides alike).
static void save(run_t *r, learner_t *l, const lrn_metrics *m) {
    rl_err e;
    int weights_only = m && r->version % r->o->state_every != 0;
    if (r->rank) {   // the other ranks send their parts of AdamW's moments to rank 0's checkpoint
        r->weights_only = weights_only;
        if (!weights_only && zero_gather_moments(r->m, r->d, r->parts, NULL, NULL, &e)) die_all(r, e.msg);
        return;
    }
    double end = clock_now();
    finish_writing(r);   // (the writer reads pending and weights_only until then)
    r->weights_only = weights_only;
    r->has_pending = m != NULL;
    if (m) r->pending = *m;
    r->step_end = end;
    sbuf st = {0};
    ckpt_state_json(&st, &r->o->lrn, r->version, r->steps, r->skip + (l ? lrn_consumed(l) : 0), r->o->seed);
    sbuf_putc(&st, 0);
    ckpt_write_opts w = write_opts(r, (const char *)st.data);
    store(&busy_write, 1);
    int rc = ckpt_writer_save(r->writer, &w, r->m, r->dp ? r->d : NULL, r->parts, &e);
    sbuf_free(&st);
    if (rc) die_all(r, e.msg);
    if (!r->background || !m) finish_writing(r);
    // The next version copies the tokenizer files from this one: the version
    // a --resume started from may be gone (--keep), this one stays.
    if (r->from[0] && (size_t)snprintf(r->from, sizeof r->from, "%s/v%06llu", r->o->out,
                                       (unsigned long long)r->version) >= sizeof r->from)
        cli_die("path too long: %s", r->o->out);
}

// At the end of a run whose last version was written without AdamW's state
// (--state-every), the state goes into it (the model has not changed since),
// so that it is the one --resume continues from. Every rank calls it.
static void complete_last(run_t *r) {
    rl_err e;
    finish_writing(r);   // (rank 0: the writer reads weights_only until then)
    if (!r->weights_only) return;
    r->weights_only = 0;
    if (r->rank) {
        if (zero_gather_moments(r->m, r->d, r->parts, NULL, NULL, &e)) die_all(r, e.msg);
        return;
    }
    store(&busy_write, 1);
    ckpt_write_opts w = write_opts(r, NULL);
    if (ckpt_writer_complete(r->writer, &w, r->m, r->dp ? r->d : NULL, r->parts, &e)) die_all(r, e.msg);
    r->complete = r->version;
    set_stop_message(r->o->out, r->version, r->complete);
    set_idle(&busy_write);
}

// The model's training state: all of AdamW's moments, or this rank's part.
static int train_init(run_t *r, rl_err *err) {
    if (!r->dp) return model_train_init(r->m, err);
    return (r->parts = zero_train_init(r->m, r->d, err)) ? 0 : -1;
}

// The model to train: CKPT/latest with its optimizer state (--resume), or
// the initial one, written as the version it has.
static void start(run_t *r, tokenizer **tok) {
    const options *o = r->o;
    rl_err e;
    char dir[4096];
    uint64_t version = 0;
    model_opts mo = {.dtype = DT_F32, .device = o->device};
    int have = ckpt_resolve(o->out, dir, sizeof dir, &version, &e) == 0 && access(dir, F_OK) == 0 &&
               strcmp(dir, o->out) != 0;
    if (o->resume) {
        if (!have) cli_die("--resume: %s holds no checkpoint (no file 'latest')", o->out);
        // A run killed while it removed old versions leaves their temporaries and the versions after them.
        if (!r->rank && ckpt_tidy(o->out, o->keep, o->keep_every, &e)) cli_die("%s", e.msg);
        if (!(r->m = model_load(dir, &mo, &e)) || train_init(r, &e) || ckpt_read_optimizer(dir, r->m, &e))
            cli_die("%s", e.msg);
        r->version = version;
        snprintf(r->from, sizeof r->from, "%s", dir);
        uint64_t records = 0;
        int found = ckpt_state_uint(dir, "records", &records, &e);
        if (found > 0) found = ckpt_state_uint(dir, "step", &r->steps, &e);
        if (found < 0) cli_die("%s", e.msg);
        if (!found) cli_die("%s/state.json: no \"records\" or \"step\" count: not written by rl-learn", dir);
        r->skip = o->no_skip ? 0 : records;
    } else {
        if (have && !r->rank)   // (the other ranks may see rank 0's first version already)
            cli_die("%s already holds checkpoints (latest: %s): continue with --resume, or choose another --out", o->out,
                    dir);
        if (o->init) {
            if (ckpt_resolve(o->init, r->from, sizeof r->from, &r->version, &e) ||
                !(r->m = model_load(r->from, &mo, &e)))
                cli_die("%s", e.msg);
        } else {
            model_config c;
            if (cfg_load(o->config, &c, &e) || !(r->m = model_random(&c, o->seed, (float)o->init_std, &mo, &e)))
                cli_die("%s", e.msg);
            // The tokenizer beside the config file, if there is one, goes with it.
            if (path_parent(o->config, r->from, sizeof r->from)) cli_die("path too long: %s", o->config);
        }
        if (train_init(r, &e)) cli_die("%s", e.msg);
    }
    char tpath[4200];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", r->from);
    if (r->from[0] && access(tpath, F_OK) != 0) r->from[0] = 0;   // a model directory without a tokenizer
    if (r->from[0] && !(*tok = tok_load(tpath, &e))) cli_die("%s", e.msg);
    if (!o->resume) save(r, NULL, NULL);
}

static int is_training_kind(const rec_t *h) {
    const char *kind;
    size_t n;
    return rec_get_str(h, "kind", &kind, &n) == REC_OK && n == 8 &&
           (!memcmp(kind, "rollouts", 8) || !memcmp(kind, "examples", 8));
}

// metrics: the descriptor of the metrics file, or -1. A line that does not
// fit (a full disk) is cut off again, so that the file holds whole lines only
// and a --resume appends after the last of them.
static int report(const options *o, int metrics, const lrn_metrics *m, rl_err *err) {
    if (metrics < 0 && o->quiet) return 0;
    sbuf line = {0};
    lrn_metrics_json(m, &line);
    sbuf_putc(&line, '\n');
    struct stat st;
    int rc = 0;
    if (metrics >= 0 && fstat(metrics, &st)) rc = err_set(err, "cannot stat: %s: %s", o->metrics, strerror(errno));
    else if (metrics >= 0 && fd_write_all(metrics, line.data, line.len)) {
        int e = errno;
        if (S_ISREG(st.st_mode) && ftruncate(metrics, st.st_size))
            rc = err_set(err, "write error: %s: %s (and the part of the line written stays: %s)", o->metrics,
                         strerror(e), strerror(errno));
        else rc = err_set(err, "write error: %s: %s", o->metrics, strerror(e));
    }
    sbuf_free(&line);
    if (rc || o->quiet) return rc;
    fprintf(stderr, "rl-learn: step %llu: %llu seqs, %llu tokens, loss %.4g, grad %.3g, lr %.3g", (unsigned long long)m->step,
            (unsigned long long)m->samples, (unsigned long long)m->tokens, m->loss, m->grad_norm, m->lr);
    if (m->has_reward) fprintf(stderr, ", reward %.3f, acc %.3f", m->reward_mean, m->accuracy);
    if (m->has_lag) fprintf(stderr, ", lag %.2f", m->lag_mean);
    fprintf(stderr, ", %.0f tok/s, %.2f s\n", m->tokens_per_s, m->seconds);
    return 0;
}

// ---- The input on every rank (data-parallel): rank 0 reads it, and what it
// gives its learner goes, as events, to the other ranks before each step and
// at the end; they give their learners the same, and so take the same steps.
// An event: its kind (a byte), the length (u32) and text of where the record
// is, the length (u64) and msgpack of the header or record.
enum { EV_HEADER = 'H', EV_RECORD = 'R', EV_END = 'E' };

static void put_event(run_t *r, int kind, const rec_t *rec, const char *where) {
    if (!r->dp || dist_size(r->d) == 1) return;
    sbuf *b = &r->events;
    uint32_t wn = where ? (uint32_t)strlen(where) : 0;
    sbuf_putc(b, (uint8_t)kind);
    sbuf_put(b, &wn, sizeof wn);
    sbuf_put(b, where, wn);
    uint64_t n = 0;
    size_t at = b->len;
    sbuf_put(b, &n, sizeof n);
    if (rec) rec_encode(rec, b);
    n = b->len - at - sizeof n;
    memcpy(b->data + at, &n, sizeof n);
}

static void send_events(run_t *r) {
    rl_err e;
    if (!r->events.len) return;
    if (dist_bcast(r->d, &r->events, &e)) die_all(r, e.msg);
    r->events.len = 0;
}

// Takes every step the held records allow, each saved and reported; signals
// wait (busy) until its checkpoint and metrics line are out. 1 once
// --max-steps steps are taken.
static int train(run_t *r, learner_t *l, int keep_last, uint64_t *tokens) {
    const options *o = r->o;
    while (!(o->max_steps && r->steps >= o->max_steps)) {
        if (!lrn_ready(l, keep_last)) return 0;
        if (!r->rank) send_events(r);   // the other ranks take this step on the same records
        lrn_metrics m;
        rl_err e;
        store(&busy_step, 1);
        int rc = lrn_grad(l, r->version, r->steps, &m, &e);
        if (rc == 0) {
            // The last version may still be reading the parameters the step
            // changes: the wait counts in the step's seconds.
            double t0 = clock_now();
            if (r->writer) ckpt_writer_wait_model(r->writer);
            m.seconds += clock_now() - t0;
            rc = lrn_apply(l, &m, &e);
        }
        if (rc < 0) die_all(r, e.msg);
        if (rc > 0) {   // abandoned: the newest checkpoint is the model before the step
            finish_writing(r);
            stop_now();
        }
        r->version = m.version;
        r->steps = m.step;
        *tokens += m.tokens;
        save(r, l, &m);   // rank 0 reports the step once its version is out
        set_idle(&busy_step);
    }
    return 1;
}

// Rank 0: the inputs, read; each header and record given to the learner
// (and queued for the other ranks), a step taken whenever a batch is full.
// 1 once --max-steps steps are taken.
static int read_inputs(run_t *r, learner_t *l, char **inputs, int ninputs, uint64_t *tokens) {
    const options *o = r->o;
    uint64_t skipped = 0, nread = 0;
    int warned_drop = 0, done = o->max_steps && r->steps >= o->max_steps;
    cli_progress prog;
    cli_progress_init(&prog, o->progress);
    rec_t *rec = rec_new();
    for (int i = 0; i < ninputs && !done; i++) {
        rl_err e;
        src_t *s = src_open(inputs[i], SRC_DETECT, &rec_default_limits, &e);
        if (!s) die_all(r, e.msg);
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
                put_event(r, EV_HEADER, rec, NULL);
            }
            if (ev != RECR_RECORD) continue;
            if (skipped < r->skip) {
                skipped++;
                continue;
            }
            char where[1200];
            if (lrn_add(l, rec, src_where(s, where, sizeof where), &e)) cli_die("%s", e.msg);
            put_event(r, EV_RECORD, rec, where);
            const char *drop;
            if (lrn_dropped(l, &drop) == 1 && !warned_drop++) cli_warn("%s", drop);   // the first one, at once
            nread++;
            if (lrn_ready(l, 0)) cli_progress_done(&prog);
            done = train(r, l, 0, tokens);
            if (cli_progress_due(&prog))
                cli_progress_print(&prog, "%llu records read, %zu held for step %llu", (unsigned long long)nread,
                                   lrn_held(l), (unsigned long long)r->version + 1);
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
    put_event(r, EV_END, NULL, NULL);
    send_events(r);
    return done;
}

// The other ranks: rank 0's events, given to the learner as rank 0 gave them.
static int follow_inputs(run_t *r, learner_t *l, uint64_t *tokens) {
    sbuf in = {0};
    size_t at = 0;
    int done = r->o->max_steps && r->steps >= r->o->max_steps;
    rec_t *rec = rec_new();
    rl_err e;
    for (;;) {
        if (at == in.len) {
            if (dist_bcast(r->d, &in, &e)) die_all(r, e.msg);
            at = 0;
        }
        uint32_t wn;
        uint64_t n;
        int kind = in.data[at++];
        memcpy(&wn, in.data + at, sizeof wn);
        char where[1200];
        snprintf(where, sizeof where, "%.*s", (int)wn, (const char *)in.data + at + sizeof wn);
        at += sizeof wn + wn;
        memcpy(&n, in.data + at, sizeof n);
        at += sizeof n;
        if (kind == EV_END) break;
        if (rec_parse(rec, in.data + at, n, &rec_default_limits, &e)) die_all(r, e.msg);
        at += n;
        if (kind == EV_HEADER) lrn_member(l, rec);
        else if (lrn_add(l, rec, where, &e)) die_all(r, e.msg);
        else if (!done) done = train(r, l, 0, tokens);
    }
    rec_free(rec);
    sbuf_free(&in);
    return done;
}

int main(int argc, char **argv) {
    cli_init("rl-learn");
    options o = parse_options(argc, argv);
    int ninputs;
    char **inputs = cli_inputs(argc, argv, &ninputs);
    cli_refuse_overwrite(inputs, ninputs, o.metrics, "metrics file");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    store(&busy_step, 1);   // until the first checkpoint exists
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    double t0 = clock_now();
    run_t run = {.o = &o, .t0 = t0};
    rl_err e;
    const char *force = getenv("RLPIPE_DIST");
    if (!(run.d = dist_open(force && !strcmp(force, "1"), o.collective_timeout, &e))) cli_die("%s", e.msg);
    run.dp = dist_active(run.d);
    run.rank = dist_rank(run.d);
    static char tool[40];
    if (run.rank) {   // rank 0 speaks for all; the others only say their errors, naming themselves
        snprintf(tool, sizeof tool, "rl-learn (rank %d)", run.rank);
        cli_init(tool);
        o.quiet = 1, o.progress = 0, o.metrics = NULL;
    }
    if (!run.rank) {
        run.background = !run.dp;
        run.writer = ckpt_writer_new(published, run.background ? write_failed : NULL, &run);
        exit_writer = run.writer;
        atexit(wait_at_exit);
    }
    run.metrics = -1;
    tokenizer *tok = NULL;
    start(&run, &tok);
    // Opened once the checkpoint directory is known good, so that a refused run loses nothing.
    int metrics_file = o.metrics && strcmp(o.metrics, "-");
    if (o.metrics && !metrics_file) run.metrics = STDOUT_FILENO;
    if (metrics_file &&
        (run.metrics = open(o.metrics, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (o.resume ? 0 : O_TRUNC), 0666)) < 0)
        cli_die("cannot open the metrics file: %s: %s", o.metrics, strerror(errno));
    run.complete = run.version;
    set_stop_message(o.out, run.version, run.complete);
    set_idle(&busy_step);
    if (run.skip && !o.quiet)
        fprintf(stderr, "rl-learn: resuming at version %llu: skipping the %llu records its steps consumed (--no-skip to train on them)\n",
                (unsigned long long)run.version, (unsigned long long)run.skip);
    if (run.dp && !o.quiet) {
        size_t lo, hi;
        model_train_range(run.m, &lo, &hi);
        char b[32];
        fprintf(stderr, "rl-learn: %d ranks (%s); AdamW's moments of %zu of %zu parameters on each (%s on rank 0)\n",
                dist_size(run.d), dist_transport(run.d, model_ops(run.m)), hi - lo, model_nparams(run.m),
                fmt_bytes(2 * (hi - lo) * sizeof(float), b, sizeof b));
    }
    o.lrn.tok = tok;
    chat_t *chat = tok ? cli_chat_load(run.from, tok, &o.chat) : NULL;
    if (!tok && o.chat.n) cli_usage_error("--chat-arg: the model has no tokenizer.json, hence no chat template");
    o.lrn.chat = chat;
    // Every rank takes every step: none abandons one alone (a signal ends them after it).
    o.lrn.stop = dist_size(run.d) > 1 ? NULL : &stop_requested;
    o.lrn.dist = run.dp ? run.d : NULL;
    o.lrn.parts = run.parts;
    learner_t *l = lrn_new(run.m, &o.lrn);
    uint64_t first = run.version, tokens = 0;
    int done = run.rank ? follow_inputs(&run, l, &tokens) : read_inputs(&run, l, inputs, ninputs, &tokens);
    if (lrn_dropped(l, NULL) > 1 && !run.rank)
        cli_warn("%zu texts in all had characters with no token, dropped as Hugging Face's tokenizers drops them",
                 lrn_dropped(l, NULL));
    lrn_end(l);
    if (!done) train(&run, l, o.keep_last, &tokens);
    complete_last(&run);
    if (metrics_file && close(run.metrics)) cli_die("write error: %s: %s", o.metrics, strerror(errno));
    char ranks[32] = "";
    if (dist_size(run.d) > 1) snprintf(ranks, sizeof ranks, ", %d ranks", dist_size(run.d));
    if (!o.quiet)
        fprintf(stderr, "rl-learn: %llu steps (versions %llu to %llu), %llu tokens, %zu records left unused, %s/v%06llu, %.2f s on %s%s\n",
                (unsigned long long)(run.version - first), (unsigned long long)first, (unsigned long long)run.version,
                (unsigned long long)tokens, lrn_held(l), o.out, (unsigned long long)run.version, clock_now() - t0,
                model_device(run.m), ranks);
    lrn_free(l);
    chat_free(chat);
    tok_free(tok);
    exit_writer = NULL;
    ckpt_writer_free(run.writer);
    model_free(run.m);
    free(run.parts);
    sbuf_free(&run.events);
    dist_close(run.d);
    return 0;
}
