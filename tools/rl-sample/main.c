// rl-sample — the rollout generator: G completions per prompt from the
// policy model, decoded with continuous batching in the sampler's precision,
// each token's log-probability and weight version recorded, scored by a
// verifier. Reads the prompt set (prompts.h), runs the batching engine
// (generate.h) and writes finished groups as records (rollout.h).
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_chat.h"
#include "cli/cli_device.h"
#include "cli/cli_model.h"
#include "cli/cli_signal.h"
#include "clock.h"
#include "sample/admission.h"
#include "sample/agent.h"
#include "sample/rollout.h"
#include "sync/receiver.h"

static const char USAGE[] =
    "Usage: rl-sample --model DIR [OPTION]... [PROMPTS]...\n"
    "Generate completions of prompts with per-token log-probabilities and weight\n"
    "versions, score them with a verifier, and write rollout records.\n"
    "PROMPTS are JSON lines {\"prompt\": \"...\", \"answer\": \"...\", ...} or a record\n"
    "stream of kind prompts; with none, or -, read standard input. A prompt may be a\n"
    "conversation {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}], ...}, rendered\n"
    "with the model's chat template and the start of the assistant's turn.\n"
    "\n"
    "Model:\n"
    "      --model DIR        model directory, or checkpoint directory with a file 'latest'\n"
    "      --adapter DIR      sample with a LoRA adapter merged into --model's weights:\n"
    CLI_ADAPTER_HELP ", then rounded once to\n"
    "                         --dtype; the records' version is the adapter's\n"
    "      --dtype T          the sampler's precision: f32 (default); bf16 (bf16 weights,\n"
    "                         activations and KV cache); int8 (W8A8: int8 weights per output\n"
    "                         channel, int8 activations per token); fp8 (W8A8 e4m3); or with\n"
    "                         f32 activations, bf16w, f16 and int8w (int8 weights per 32 inputs)\n"
    "      --head H           the output layer and its logits: dtype (default) or f32\n"
    CLI_DEVICE_HELP
    CLI_CHAT_HELP
    "\n"
    "Sampling:\n"
    "  -n, --group G          samples per prompt (default 1); a group is written whole\n"
    "      --temperature T    softmax temperature (default 1); 0 = greedy\n"
    "      --top-p P          nucleus sampling, 0 < P <= 1 (default 1: off)\n"
    "      --top-k K          keep the K most probable tokens (default 0: off)\n"
    "      --max-new-tokens N completion tokens at most (default 256; less where the\n"
    "                         model's context ends first)\n"
    "      --stop STRING      end a completion once its text contains STRING (repeatable;\n"
    "                         \\n and \\t are read as newline and tab); every eos id and\n"
    "                         the chat template's end-of-turn token end one too\n"
    "      --ignore-eos       eos ids and the end-of-turn token do not end a completion:\n"
    "                         only --max-new-tokens and --stop do (for benchmarks)\n"
    "      --slots S          sequences decoded together (default 64)\n"
    "      --seed S           shuffles the prompts and seeds every sample (default 0)\n"
    "\n"
    "Prompts:\n"
    "      --epochs N         passes over the shuffled prompt set (default 1; 0 = no end;\n"
    "                         with --max-prompts or --max-records the default is no end)\n"
    "      --max-prompts N    start at most N prompts (groups)\n"
    "      --max-records N    write at most N records (whole groups)\n"
    "      --drop-uniform     DAPO's dynamic sampling: a group whose rewards are all equal\n"
    "                         (no advantage) is not written, and more prompts are drawn in\n"
    "                         its place; each record says in \"drawn\" how many groups were\n"
    "                         drawn for its own (needs -n 2 or more, and rewards)\n"
    "\n"
    "Rewards (prompts with an \"answer\" are scored with 'number' unless told):\n"
    "      --verifier V       exact: trimmed text = answer; number: last number = answer;\n"
    "                         boxed: last \\boxed{...} = answer; none: no reward\n"
    "      --verifier-cmd [NAME=]CMD\n"
    "                         a program (sh -c CMD) that reads JSON lines, each the prompt's\n"
    "                         keys with \"prompt\" (its text) and \"completion\", and writes\n"
    "                         one reply per line (flushed): a reward, true/false, or\n"
    "                         {\"reward\": R, \"rewards\": {NAME: R, ...}, \"pred\": \"...\"};\n"
    "                         repeatable, each NAME=CMD, for several verifiers\n"
    "      --reward-weights NAME=W,...\n"
    "                         reward = sum of W x the reward of verifier NAME (default W 1)\n"
    "      --verifier-timeout S\n"
    "                         seconds the command may take for one reply, or to exit\n"
    "                         at the end (default 60; 0 = no limit)\n"
    "\n"
    "Multi-turn rollouts with an environment (rlpipe-env(5); prompts are conversations):\n"
    "      --env CMD          a program that reads each turn's conversation as a JSON line\n"
    "                         and answers with the next messages or {\"done\": true,\n"
    "                         \"reward\": R} (run by sh -c); it gives the rewards\n"
    "      --max-turns N      assistant turns per rollout at most (default 4)\n"
    "      --max-len L        tokens a rollout holds in all: prompt, turns and the\n"
    "                         environment's messages (default: the longest prompt + N x\n"
    "                         (--max-new-tokens + 256), within the model's context)\n"
    "      --env-timeout S    seconds one answer may take, and the program to exit at\n"
    "                         the end (default 60; 0 = no limit)\n"
    "      --env-max-failures K\n"
    "                         rollouts that may fail (a bad answer, a timeout: reward 0,\n"
    "                         env_error in the record) before the run ends (default 16)\n"
    "      --env-slots E      more sequences kept while they wait for the environment\n"
    "                         (default: --slots)\n"
    "\n"
    "Weights pushed while generating (rl-sync):\n"
    "      --listen ADDR      take new weights from rl-sync: unix:PATH or tcp:HOST:PORT\n"
    "                         (tcp binds loopback unless HOST says otherwise)\n"
    "      --token-file FILE  a shared secret every sender must prove (required for tcp)\n"
    "      --batch N          records per learner step (rl-learn --batch N), for --max-lag\n"
    "      --max-lag K        start no prompt whose samples the learner would train on\n"
    "                         more than K versions after the weights held\n"
    "      --sync             the conventional baseline, --max-lag 0: after each batch,\n"
    "                         wait for the weights trained on it\n"
    "      --metrics FILE     one JSON line per version installed, with how much of the\n"
    "                         learner's update survived the sampler's precision\n"
    "\n"
    "Output:\n"
    CLI_OUT_HELP
    "\n"
    "SIGINT or SIGTERM stops it: the groups finished are written, the stream closed\n"
    "properly, and the exit status is 0.\n"
    "\n"
    "Exit status: 0 ok, 1 bad prompts, a model that cannot be loaded, a verifier or\n"
    "an environment that fails (the groups finished before are written), 2 usage error.\n"
    "\n"
    "Examples:\n"
    "  rl-sample --model m/ -n 8 --dtype bf16 train.jsonl | rl-ratio --model m/ | rl-learn --init m/ --out ckpt/\n"
    "  rl-sample --model ckpt/ --temperature 0 test.jsonl | rl-cat --stats\n"
    "  rl-sample --model m/ -n 8 --listen unix:/tmp/s.sock --max-lag 2 --batch 64 train.jsonl | ...\n"
    "  rl-sample --model m/ -n 4 --env 'python3 -u calc_env.py' --max-turns 3 tasks.jsonl | rl-ratio ...\n";

typedef struct {
    const char *model, *adapter, *listen, *token_file, *metrics, *env;
    int max_turns, env_slots;
    uint64_t max_len, env_max_failures;
    double env_timeout;
    uint64_t batch;
    int64_t max_lag;              // -1: no bound
    model_opts prec;          // --dtype, --head: the precision's dtype, activations and head
    rl_device device;
    gen_opts gen;
    char **stop;
    cli_chat_args chat;
    uint64_t epochs, max_prompts, max_records;
    int epochs_set, verifier;   // verifier: -1 default, 0 none, 1 builtin
    int drop_uniform;           // --drop-uniform
    int ignore_eos;             // --ignore-eos: no eos id is a stop id
    double verifier_timeout;    // seconds; 0: none
    vset *vcmd;                 // --verifier-cmd (NULL: none)
    const char *reward_weights; // --reward-weights
    vf_kind kind;
    cli_out_opts out;
} options;

// "\n" and "\t" in a stop string (shells make real newlines awkward to pass).
static char *unescape(const char *s) {
    char *out = xmalloc(strlen(s) + 1), *o = out;
    for (; *s; s++) {
        if (s[0] == '\\' && (s[1] == 'n' || s[1] == 't' || s[1] == '\\')) {
            s++;
            *o++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : '\\';
        } else *o++ = *s;
    }
    *o = 0;
    return out;
}

static options parse_options(int argc, char **argv) {
    enum { O_MODEL = 256, O_DTYPE, O_TEMP, O_TOPP, O_TOPK, O_MAXNEW, O_STOP, O_SLOTS, O_SEED, O_EPOCHS,
           O_MAXPROMPTS, O_MAXRECORDS, O_VERIFIER, O_VCMD, O_RWEIGHTS, O_LISTEN, O_TOKEN, O_BATCH, O_MAXLAG, O_SYNC, O_DEVICE,
           O_VTIMEOUT, O_CHATARG, O_IGNOREEOS, O_METRICS, O_HEAD, O_ENV, O_MAXTURNS, O_MAXLEN, O_ENVTIMEOUT,
           O_ENVFAIL, O_ENVSLOTS, O_DROPUNIFORM, O_ADAPTER };
    static const struct option longopts[] = {
        {"model", required_argument, 0, O_MODEL},          {"dtype", required_argument, 0, O_DTYPE},
        {"group", required_argument, 0, 'n'},              {"temperature", required_argument, 0, O_TEMP},
        {"top-p", required_argument, 0, O_TOPP},           {"top-k", required_argument, 0, O_TOPK},
        {"max-new-tokens", required_argument, 0, O_MAXNEW}, {"stop", required_argument, 0, O_STOP},
        {"slots", required_argument, 0, O_SLOTS},          {"seed", required_argument, 0, O_SEED},
        {"epochs", required_argument, 0, O_EPOCHS},        {"max-prompts", required_argument, 0, O_MAXPROMPTS},
        {"max-records", required_argument, 0, O_MAXRECORDS}, {"verifier", required_argument, 0, O_VERIFIER},
        {"verifier-cmd", required_argument, 0, O_VCMD},    {"listen", required_argument, 0, O_LISTEN},
        {"reward-weights", required_argument, 0, O_RWEIGHTS},
        {"token-file", required_argument, 0, O_TOKEN},     {"batch", required_argument, 0, O_BATCH},
        {"max-lag", required_argument, 0, O_MAXLAG},       {"sync", no_argument, 0, O_SYNC},
        {"device", required_argument, 0, O_DEVICE},      {"verifier-timeout", required_argument, 0, O_VTIMEOUT},
        {"chat-arg", required_argument, 0, O_CHATARG},     {"ignore-eos", no_argument, 0, O_IGNOREEOS},
        {"metrics", required_argument, 0, O_METRICS},      {"head", required_argument, 0, O_HEAD},
        {"env", required_argument, 0, O_ENV},              {"max-turns", required_argument, 0, O_MAXTURNS},
        {"max-len", required_argument, 0, O_MAXLEN},       {"env-timeout", required_argument, 0, O_ENVTIMEOUT},
        {"env-max-failures", required_argument, 0, O_ENVFAIL}, {"env-slots", required_argument, 0, O_ENVSLOTS},
        {"drop-uniform", no_argument, 0, O_DROPUNIFORM}, {"adapter", required_argument, 0, O_ADAPTER},
        CLI_OUT_LONGOPTS,
        {0, 0, 0, 0}};
    options o = {.prec = {.dtype = DT_F32, .act = DT_F32}, .epochs = 1, .verifier = -1,
                 .max_lag = -1, .verifier_timeout = 60, .max_turns = -1, .env_slots = -1, .env_timeout = 60,
                 .env_max_failures = 16,
                 .gen = {.slots = 64, .group = 1, .max_new = 256, .sp = {.temperature = 1, .top_p = 1}}};
    int c;
    while ((c = getopt_long(argc, argv, CLI_OUT_SHORTOPTS "n:", longopts, NULL)) != -1) {
        if (cli_out_option(c, optarg, &o.out, USAGE)) continue;
        switch (c) {
        case O_MODEL: o.model = optarg; break;
        case O_ADAPTER: o.adapter = optarg; break;
        case O_CHATARG: cli_chat_arg(&o.chat, optarg); break;
        case O_DTYPE:
            if (model_precision_parse(optarg, &o.prec))
                cli_usage_error("--dtype: expected one of %s, got '%s'", model_precision_names, optarg);
            break;
        case O_HEAD:
            if (model_head_parse(optarg, &o.prec)) cli_usage_error("--head: expected f32 or dtype, got '%s'", optarg);
            break;
        case O_DEVICE: o.device = cli_parse_device(optarg); break;
        case 'n': o.gen.group = (int)cli_parse_uint("--group", optarg, 65536, 0); break;
        case O_TEMP: o.gen.sp.temperature = (float)cli_parse_f64("--temperature", optarg, 0, 1e6, 0); break;
        case O_TOPP:
            o.gen.sp.top_p = (float)cli_parse_f64("--top-p", optarg, 0, 1, 0);
            if (o.gen.sp.top_p <= 0) cli_usage_error("--top-p: must be above 0, got '%s'", optarg);
            break;
        case O_TOPK: o.gen.sp.top_k = (uint32_t)cli_parse_uint("--top-k", optarg, UINT32_MAX, 0); break;
        case O_MAXNEW: o.gen.max_new = cli_parse_uint("--max-new-tokens", optarg, 1 << 20, 1); break;
        case O_IGNOREEOS: o.ignore_eos = 1; break;
        case O_STOP:
            if (!*optarg) cli_usage_error("--stop: the stop string is empty");
            o.stop = xrealloc(o.stop, (o.gen.n_stop + 1) * sizeof *o.stop);
            o.stop[o.gen.n_stop++] = unescape(optarg);
            break;
        case O_SLOTS: o.gen.slots = (int)cli_parse_uint("--slots", optarg, 65536, 0); break;
        case O_SEED: o.gen.seed = cli_parse_uint("--seed", optarg, UINT64_MAX, 0); break;
        case O_EPOCHS:
            o.epochs = cli_parse_uint("--epochs", optarg, UINT64_MAX, 0);
            o.epochs_set = 1;
            break;
        case O_MAXPROMPTS: o.max_prompts = cli_parse_uint("--max-prompts", optarg, UINT64_MAX, 1); break;
        case O_MAXRECORDS: o.max_records = cli_parse_uint("--max-records", optarg, UINT64_MAX, 1); break;
        case O_DROPUNIFORM: o.drop_uniform = 1; break;
        case O_VERIFIER:
            if (!strcmp(optarg, "none")) o.verifier = 0;
            else if (!vf_parse(optarg, &o.kind)) o.verifier = 1;
            else cli_usage_error("--verifier: expected exact, number, boxed or none, got '%s'", optarg);
            break;
        case O_VCMD: {
            rl_err ve;
            if (!o.vcmd) o.vcmd = vs_new();
            if (vs_add(o.vcmd, optarg, &ve)) cli_usage_error("--verifier-cmd %s", ve.msg);
            break;
        }
        case O_RWEIGHTS: o.reward_weights = optarg; break;
        case O_VTIMEOUT: o.verifier_timeout = cli_parse_f64("--verifier-timeout", optarg, 0, 1e9, 0); break;
        case O_LISTEN: o.listen = optarg; break;
        case O_TOKEN: o.token_file = optarg; break;
        case O_ENV: o.env = optarg; break;
        case O_MAXTURNS:
            o.max_turns = (int)cli_parse_uint("--max-turns", optarg, 65536, 0);
            if (o.max_turns < 1) cli_usage_error("--max-turns: at least one turn");
            break;
        case O_MAXLEN: o.max_len = cli_parse_uint("--max-len", optarg, 1 << 24, 0); break;
        case O_ENVTIMEOUT: o.env_timeout = cli_parse_f64("--env-timeout", optarg, 0, 1e9, 0); break;
        case O_ENVFAIL: o.env_max_failures = cli_parse_uint("--env-max-failures", optarg, UINT64_MAX, 0); break;
        case O_ENVSLOTS: o.env_slots = (int)cli_parse_uint("--env-slots", optarg, 65536, 0); break;
        case O_METRICS: o.metrics = optarg; break;
        case O_BATCH: o.batch = cli_parse_uint("--batch", optarg, UINT32_MAX, 0); break;
        case O_MAXLAG: {
            int64_t k = (int64_t)cli_parse_uint("--max-lag", optarg, UINT32_MAX, 0);
            if (o.max_lag >= 0 && o.max_lag != k) cli_usage_error("--sync is --max-lag 0; give one of them");
            o.max_lag = k;
            break;
        }
        case O_SYNC:
            if (o.max_lag > 0) cli_usage_error("--sync is --max-lag 0; give one of them");
            o.max_lag = 0;
            break;
        }
    }
    if (!o.model) cli_usage_error("--model DIR is required");
    if (o.gen.group < 1) cli_usage_error("--group: at least one sample per prompt");
    if (o.gen.slots < 1) cli_usage_error("--slots: at least one slot");
    if (o.gen.max_new < 1) cli_usage_error("--max-new-tokens: at least one token");
    if (o.vcmd && o.verifier >= 0) cli_usage_error("--verifier and --verifier-cmd exclude each other");
    if (o.reward_weights && !o.vcmd) cli_usage_error("--reward-weights weighs the verifiers of --verifier-cmd NAME=CMD");
    rl_err e;
    if (o.reward_weights && vs_weights(o.vcmd, o.reward_weights, &e)) cli_usage_error("--reward-weights %s", e.msg);
    if (o.env && (o.vcmd || o.verifier >= 0))
        cli_usage_error("--env gives the rewards: --verifier and --verifier-cmd are not for it");
    if (!o.env && (o.max_turns >= 0 || o.max_len || o.env_slots >= 0))
        cli_usage_error("--max-turns, --max-len and --env-slots are for multi-turn rollouts: give --env CMD");
    if (o.drop_uniform && o.gen.group < 2)
        cli_usage_error("--drop-uniform: a group of one sample is always uniform: give -n 2 or more");
    if (o.drop_uniform && o.verifier == 0) cli_usage_error("--drop-uniform compares rewards: --verifier none gives none");
    if (o.max_turns < 0) o.max_turns = 4;
    if (o.env_slots < 0) o.env_slots = o.gen.slots;
    if (o.max_records && o.max_records < (uint64_t)o.gen.group)
        cli_usage_error("--max-records %llu holds no whole group of %d", (unsigned long long)o.max_records, o.gen.group);
    if (o.max_lag >= 0 && !o.listen) cli_usage_error("--max-lag and --sync wait for pushed weights: give --listen ADDR");
    if (o.max_lag >= 0 && !o.batch)
        cli_usage_error("--max-lag and --sync need --batch N, the records per learner step (rl-learn --batch)");
    if (o.batch && o.max_lag < 0) cli_usage_error("--batch is for --max-lag or --sync");
    if (o.token_file && !o.listen) cli_usage_error("--token-file is for --listen");
    if (o.metrics && !o.listen) cli_usage_error("--metrics tells of the weights installed: give --listen ADDR");
    if (o.metrics && (!strcmp(o.metrics, "-") || (o.out.output && cli_same_file(o.metrics, o.out.output))))
        cli_usage_error("--metrics: name a file of its own (standard output and --output carry the records)");
    if (o.listen && rcv_check_listen(o.listen, o.token_file, &e)) cli_usage_error("%s", e.msg);
    if (!o.epochs_set && (o.max_prompts || o.max_records)) o.epochs = 0;
    if (o.gen.sp.temperature == 0 && (o.gen.sp.top_p < 1 || o.gen.sp.top_k))
        cli_warn("--temperature 0 is greedy: --top-p and --top-k change nothing");
    o.gen.stop = (const char *const *)o.stop;
    return o;
}

// The header's model map names the adapter merged into its weights (its
// path: the base's), as "adapter".
static void header_adapter(rec_t *h, const char *adapter) {
    size_t n;
    long i = rec_find(h, "model");
    const uint8_t *v = i >= 0 ? rec_value(h, (size_t)i, &n) : NULL;
    rec_t *model = rec_new();
    sbuf enc = {0};
    rl_err e;
    if (!v || rec_parse(model, v, n, &rec_default_limits, &e)) cli_die("the header's model map: %s", v ? e.msg : "none");
    rec_set_cstr(model, "adapter", adapter);
    rec_encode(model, &enc);
    rec_set_raw(h, "model", 5, enc.data, enc.len);
    sbuf_free(&enc);
    rec_free(model);
}

// A finished group's records (with its rollouts' fields from the environment).
static void add_group(ro_t *ro, ag_t *ag, const gen_group *grp) {
    if (!ag) {
        ro_add(ro, grp, NULL);
        return;
    }
    rec_t **extra = xmalloc((size_t)grp->n * sizeof *extra);
    for (int j = 0; j < grp->n; j++) extra[j] = ag_take(ag, grp->group * (uint64_t)grp->n + (uint64_t)j);
    ro_add(ro, grp, extra);
    for (int j = 0; j < grp->n; j++) rec_free(extra[j]);
    free(extra);
}

// Before an environment's error ends the run: the groups that finished are
// written (the stream then ends without a trailer, as with a verifier's error).
static void write_finished(gen_t *g, ro_t *ro, ag_t *ag, recw_t *w) {
    rl_err e;
    for (const gen_group *grp; (grp = gen_peek(g)); gen_pop(g)) add_group(ro, ag, grp);
    if (ro_write(ro, w, 1, &e)) cli_warn("%s", e.msg);
}

int main(int argc, char **argv) {
    cli_init("rl-sample");
    options o = parse_options(argc, argv);
    cli_require_utf8_args(argc, argv);
    int ninputs;
    char **inputs = cli_inputs(argc, argv, &ninputs);
    cli_refuse_overwrite(inputs, ninputs, o.out.output, "output");
    cli_refuse_overwrite(inputs, ninputs, o.metrics, "metrics file");
    int fd = cli_open_output(o.out.output, 1, o.out.force);
    FILE *metrics = NULL;
    if (o.metrics && !(metrics = fopen(o.metrics, "w")))
        cli_die("cannot create the metrics file: %s: %s", o.metrics, strerror(errno));
    double t0 = clock_now();

    rl_err e;
    char path[4200];
    cli_model loaded;
    o.prec.device = o.device;
    model_t *m = cli_load_model(o.model, o.adapter, &o.prec, "the model", &loaded, &e);
    if (!m) cli_die("%s", e.msg);
    const char *dir = loaded.dir;
    uint64_t version = loaded.version;
    const model_config *cfg = model_cfg(m);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    tokenizer *tok = tok_load(path, &e);
    if (!tok) cli_die("%s", e.msg);
    chat_t *chat = cli_chat_load(dir, tok, &o.chat);

    prompt_set ps = {0};
    // The longest sequence computed as transformers would (max_position_embeddings,
    // or a sliding window or dynamic RoPE's original length when shorter).
    int max_seq = cfg_max_seq(cfg, NULL);
    prm_opts po = {.tok = tok, .chat = chat, .vocab = (size_t)cfg->vocab, .max_ids = (size_t)max_seq - 1};
    for (int i = 0; i < ninputs; i++)
        if (prm_read(&ps, inputs[i], &po, &e)) cli_die("%s", e.msg);
    if (ps.n == 0) cli_die("no prompts in the input");
    // Characters with no token are dropped as transformers' tokenizers drops
    // them (so that the ids agree), but not silently.
    size_t n_dropped = 0;
    for (size_t i = 0; i < ps.n; i++)
        if (ps.v[i].tok.dropped && !n_dropped++) {
            char what[256];
            tok_report_text(&ps.v[i].tok, what, sizeof what);
            cli_warn("prompt: %s: %s", what, ps.v[i].where);
        }
    if (n_dropped > 1)
        cli_warn("%zu prompts in all had characters with no token, dropped as Hugging Face's tokenizers drops them",
                 n_dropped);
    if (o.env && !chat) cli_die("--env: the model has no chat template, which multi-turn rollouts need: %s", dir);
    for (size_t i = 0; o.env && i < ps.n; i++)
        if (!rec_has(ps.v[i].rec, "messages"))
            cli_die("--env needs conversations: give the prompt as \"messages\" (a list of {\"role\", \"content\"}): %s",
                    ps.v[i].where);
    int builtin = !o.env && (o.verifier == 1 || (o.verifier < 0 && !o.vcmd));
    if (o.verifier < 0 && !o.vcmd) o.kind = VF_NUMBER;
    for (size_t i = 0; builtin && i < ps.n; i++) {
        if (!ps.v[i].answer && o.verifier == 1)
            cli_die("no \"answer\", which --verifier %s needs: %s", vf_name(o.kind), ps.v[i].where);
        if (ps.v[i].answer && vf_check_answer(o.kind, ps.v[i].answer, ps.v[i].answer_len, &e))
            cli_die("%s%s: %s", e.msg, o.verifier < 0 ? " (the default with answers; name --verifier exact or boxed)" : "",
                    ps.v[i].where);
    }

    // Completions end at the eos ids, the end of a chat turn and the --stop
    // strings that are special tokens (gen_stop_ids).
    size_t n_stop_ids;
    uint32_t *stop_ids = gen_stop_ids(cfg, tok, chat, (const char *const *)o.stop, o.gen.n_stop, o.ignore_eos, &n_stop_ids);
    o.gen.stop_ids = stop_ids;
    o.gen.n_stop_ids = n_stop_ids;
    // --max-lag counts group j in batch j / per_batch: the learner's batches
    // must be those, so groups are written in the order they were started.
    o.gen.in_order = o.max_lag >= 0;
    size_t max_len = o.max_len ? o.max_len
                     : o.env ? ps.max_ids + (size_t)o.max_turns * (o.gen.max_new + 256)
                             : ps.max_ids + o.gen.max_new;
    if (o.max_len && o.max_len <= ps.max_ids)
        cli_die("--max-len %llu holds no token after the longest prompt (%zu tokens)", (unsigned long long)o.max_len,
                ps.max_ids);
    o.gen.max_len = max_len < (size_t)max_seq ? (int)max_len : max_seq;
    o.gen.multi_turn = o.env != NULL;
    o.gen.cache_slots = o.env ? o.gen.slots + o.env_slots : o.gen.slots;
    gen_t *g = gen_new(m, tok, &o.gen, &e);
    if (!g) cli_die("%s", e.msg);
    gen_set_version(g, (uint32_t)version);
    rcv_t *rcv = NULL;
    if (o.listen) {
        rcv_opts ropt = {.listen = o.listen, .token_file = o.token_file, .tool = "rl-sample", .quiet = o.out.quiet,
                         .metrics = metrics, .metrics_name = o.metrics, .base = dir};
        if (!(rcv = rcv_start(m, version, &ropt, &e))) cli_die("%s", e.msg);
        if (!o.out.quiet) fprintf(stderr, "rl-sample: listening for weights on %s\n", rcv_address(rcv));
        rcv_remove_at_exit(rcv);
    }
    cli_catch_signals(0);
    adm_t adm;
    adm_init(&adm, version, o.max_lag, o.batch, o.gen.group);
    if (o.vcmd) {   // every prompt's keys go into the verifiers' requests as JSON
        sbuf keys = {0};
        for (size_t i = 0; i < ps.n; i++, keys.len = 0)
            if (vp_prompt_keys(ps.v[i].rec, &keys, &e)) cli_die("--verifier-cmd: %s: %s", e.msg, ps.v[i].where);
        sbuf_free(&keys);
        if (vs_start(o.vcmd, o.verifier_timeout, &e)) cli_die("%s", e.msg);
    }
    envproc *env = NULL;
    ag_t *ag = NULL;
    if (o.env) {
        if (!(env = env_start(o.env, o.env_timeout, &e))) cli_die("%s", e.msg);
        ag = ag_new(&(ag_opts){.prompts = &ps, .chat = chat, .tok = tok, .env = env, .max_turns = o.max_turns,
                               .max_failures = o.env_max_failures, .warn = cli_warn});
    }
    const char *prec = model_precision_name(&o.prec);   // the --dtype value
    const char *vname = env ? "env" : o.vcmd ? "cmd" : builtin ? vf_name(o.kind) : "none";
    ro_t *ro = ro_new(&(ro_opts){.prompts = &ps, .builtin = builtin, .kind = o.kind, .cmd = o.vcmd,
                                 .sp = o.gen.sp, .dtype = prec, .drop_uniform = o.drop_uniform});
    rec_t *h = rec_new();
    ro_make_header(h, argc, argv, o.out.no_provenance, dir, version, m, prec, &o.gen, vname, o.drop_uniform);
    if (o.adapter) header_adapter(h, loaded.adapter);
    recw_opts wo = recw_default_opts;
    wo.raw = o.out.raw;
    recw_t *w = recw_fdopen(fd, o.out.output ? o.out.output : "(stdout)", &wo, h, &e);
    if (!w) cli_die("%s", e.msg);
    rec_free(h);

    // --max-records caps the groups started, or with --drop-uniform those
    // started and not dropped: a dropped group's place is drawn again.
    uint64_t max_groups = o.max_prompts;
    if (o.max_records && o.drop_uniform) adm.max_kept = o.max_records / (uint64_t)o.gen.group;
    else if (o.max_records && (!max_groups || o.max_records / (uint64_t)o.gen.group < max_groups))
        max_groups = o.max_records / (uint64_t)o.gen.group;
    prm_feed feed;
    prm_feed_init(&feed, ps.n, o.gen.seed, o.epochs, max_groups);
    cli_progress prog;
    cli_progress_init(&prog, o.out.progress);
    double tgen = clock_now();
    int more = 1;
    while (!cli_stop_requested) {
        uint64_t held = rcv ? rcv_hold(rcv) : version;   // a verified push is installed here
        gen_set_version(g, (uint32_t)held);
        adm_dropped(&adm, ro_total(ro)->dropped);
        int lagging = adm_fill(&adm, g, &feed, &ps, held, &more);
        long n = gen_step(g, &e);
        if (rcv) rcv_release(rcv);
        if (n < 0) cli_die("%s", e.msg);
        // Turns ended go to the environment; its answers continue or end
        // their rollouts. With nothing to decode, wait for one.
        int idle = n == 0 && gen_turns_waiting(g) && !gen_waiting(g);
        if (ag && ag_pump(ag, g, idle ? 1000 : 0, &e)) {
            cli_progress_done(&prog);
            write_finished(g, ro, ag, w);
            cli_die("%s", e.msg);
        }
        for (const gen_group *grp; (grp = gen_peek(g)); gen_pop(g)) add_group(ro, ag, grp);
        // Too many records awaiting the external verifier: wait for it.
        if (ro_write(ro, w, ro_held(ro) > 65536, &e)) {
            cli_progress_done(&prog);
            cli_die("%s", e.msg);
        }
        if (n == 0 && ag && gen_busy(g)) continue;   // rollouts wait for their environment
        if (n == 0 && !more) break;
        if (n == 0 && adm_full(&adm)) {   // --max-records met, unless groups awaiting rewards are dropped
            if (ro_write(ro, w, 1, &e)) cli_die("%s", e.msg);
            adm_dropped(&adm, ro_total(ro)->dropped);
            if (adm_full(&adm)) break;
            continue;
        }
        if (n == 0 && lagging) {   // all written: wait for the learner's weights
            if (ro_write(ro, w, 1, &e)) cli_die("%s", e.msg);
            adm_dropped(&adm, ro_total(ro)->dropped);   // drops lower the version needed
            int64_t got = rcv_wait(rcv, adm_needed(&adm), &cli_stop_requested, fd);
            if (got == -2) raise(SIGPIPE);   // the reader has gone: end as the next write would
            if (got < 0) break;
        }
        if (cli_progress_due(&prog)) {
            const ro_totals *t = ro_total(ro);
            double dt = clock_now() - tgen;
            cli_progress_print(&prog, "%llu prompts started, %llu samples written, %llu tokens, %.0f tokens/s",
                               (unsigned long long)feed.started, (unsigned long long)t->samples,
                               (unsigned long long)t->tokens, dt > 0 ? (double)t->tokens / dt : 0.0);
        }
    }
    cli_progress_done(&prog);
    rcv_stats rs = {0};
    if (rcv) {
        rs = rcv_get_stats(rcv);
        rcv_stop(rcv);
    }
    if (ro_write(ro, w, 1, &e) || (o.vcmd && vs_finish(o.vcmd, &e)) || (env && env_finish(env, &e)) || recw_close(w, &e))
        cli_die("%s", e.msg);
    if (metrics && (rs.metrics_errno || fclose(metrics)))   // the records are out whole; the metrics are not
        cli_die("write error: %s: %s", o.metrics, strerror(rs.metrics_errno ? rs.metrics_errno : errno));
    double tend = clock_now();
    const ro_totals *t = ro_total(ro);
    if (!o.out.quiet) {
        char acc[96] = "";
        if (t->rewarded)
            snprintf(acc, sizeof acc, ", reward mean %.4f, accuracy %.4f", t->reward_sum / (double)t->rewarded,
                     (double)t->positive / (double)t->rewarded);
        char pushes[256] = "";
        if (o.listen)
            snprintf(pushes, sizeof pushes, "; weights v%llu to v%llu, %llu pushes installed, %llu refused, swaps "
                     "stalled generation %.0f us (longest %.0f us), waited %.2f s for weights",
                     (unsigned long long)version, (unsigned long long)rs.version, (unsigned long long)rs.installed,
                     (unsigned long long)rs.refused, rs.stall_s * 1e6, rs.stall_max_s * 1e6, rs.wait_s);
        char dropped[160] = "";
        if (o.drop_uniform)
            snprintf(dropped, sizeof dropped, " (%llu drawn, %llu dropped with uniform rewards)",
                     (unsigned long long)(t->groups + t->dropped), (unsigned long long)t->dropped);
        char turns[160] = "";
        if (ag) {
            const ag_totals *at = ag_total(ag);
            snprintf(turns, sizeof turns, ", %llu turns, %llu rollouts failed", (unsigned long long)at->turns,
                     (unsigned long long)at->failed);
        }
        fprintf(stderr, "rl-sample: %s%llu prompts%s, %llu samples%s, %llu tokens, %.1f tokens/s%s; %s on %s, %d slots, %.2f s%s\n",
                cli_stop_requested ? "stopped by a signal: " : "", (unsigned long long)t->groups, dropped,
                (unsigned long long)t->samples, turns, (unsigned long long)t->tokens,
                tend > tgen ? (double)t->tokens / (tend - tgen) : 0.0, acc, prec, model_device(m), o.gen.slots, tend - t0,
                pushes);
    }
    recw_free(w);
    ro_free(ro);
    vs_free(o.vcmd);
    ag_free(ag);
    env_free(env);
    gen_free(g);
    prm_feed_free(&feed);
    prm_free(&ps);
    chat_free(chat);
    tok_free(tok);
    model_free(m);
    free(stop_ids);
    for (size_t i = 0; i < o.gen.n_stop; i++) free(o.stop[i]);
    free(o.stop);
    if (fd > 1 && close(fd)) cli_die("write error: %s: %s", o.out.output, strerror(errno));
    return 0;
}
