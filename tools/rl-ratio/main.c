// rl-ratio — learner log-probabilities and truncated/masked importance
// weights for rollout records, with the sampler/learner mismatch reported.
// Reads every input, passes each record through the scorer (scorer.h), and
// writes one member with the records in input order, every field they had kept.
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_device.h"
#include "cli/cli_model.h"
#include "clock.h"
#include "ratio/scorer.h"
#include "records/source.h"
#include "sync/receiver.h"

static const char USAGE[] =
    "Usage: rl-ratio [OPTION]... [FILE]...\n"
    "Add learner log-probabilities (logp_learner, ver_learner) and importance\n"
    "weights (w, mask) to rollout records; report the sampler/learner mismatch.\n"
    "With no FILE, or when FILE is -, read standard input.\n"
    "\n"
    "Learner:\n"
    "      --model DIR        score completions with this model (f32), at each record's\n"
    "                         temperature; DIR is a model directory or a checkpoint\n"
    "                         directory with a file 'latest'. Without --model, records\n"
    "                         must carry logp_learner already\n"
    "      --adapter DIR      score with a LoRA adapter merged into --model's weights:\n"
    CLI_ADAPTER_HELP ", kept in f32;\n"
    "                         ver_learner is the adapter's version\n"
    CLI_DEVICE_HELP
    "      --batch N          records scored together and per metrics line, 1..65536\n"
    "                         (default 256)\n"
    "      --listen ADDR      take new learner weights from rl-sync while scoring:\n"
    "                         unix:PATH or tcp:HOST:PORT; each batch is scored with the\n"
    "                         newest weights held, and its records say which (ver_learner)\n"
    "      --token-file FILE  a shared secret every sender must prove (required for tcp)\n"
    "      --skip-uniform     pass on unscored (no logp_learner, w; a mask they came with\n"
    "                         stays) the records of each whole group whose rewards are all\n"
    "                         equal and that carry no adv: a group-baseline advantage is 0\n"
    "                         for them\n"
    "      --as KEY           logp_learner (default), or logp_ref: --model is a frozen\n"
    "                         reference model, and its log-probabilities are written as\n"
    "                         logp_ref and nothing else (no w, mask, logp_learner;\n"
    "                         records need no logp) for rl-learn --kl-coef; not with\n"
    "                         --listen, --skip-uniform, --mode, --clip or --mask\n"
    "\n"
    "Weights, with rho = exp(logp_learner - logp) per token of the model (a record's\n"
    "own mask is 0 on the tokens an environment added: they get w 0, mask 0):\n"
    "      --mode MODE        token: w = min(rho, C) per token (TIS, the default);\n"
    "                         seq: w = min(prod rho, C); geo: w = min(exp(mean log rho), C);\n"
    "                         none: w = 1, no correction (the mismatch is still measured)\n"
    "      --clip C           the cap C > 0 (default 2; inf: no cap)\n"
    "      --mask LO,HI       mask 0 for tokens (token mode) or sequences (seq, geo) whose\n"
    "                         ratio is outside [LO, HI], instead of capping (cap as well\n"
    "                         only when --clip is given)\n"
    "\n"
    "Output:\n"
    "      --metrics FILE     one JSON line of mismatch metrics per batch (- : stdout)\n"
    CLI_OUT_HELP
    CLI_PARTIAL_HELP
    "\n"
    "Exit status: 0 ok, 1 invalid or truncated input (the records before it are\n"
    "still written), a partial one (all its records written, and the output marked\n"
    "partial too) or a model that cannot be loaded, 2 usage error.\n"
    "\n"
    "Examples:\n"
    "  rl-sample --model m/ prompts.jsonl | rl-ratio --model m/ --clip 2 | rl-learn --init m/ --out ckpt/\n"
    "  rl-cat --pack theirs.jsonl | rl-ratio --model m/ | rl-cat --stats\n"
    "  rl-sample --model m/ p.jsonl | rl-ratio --model m/ | rl-ratio --model ref/ --as logp_ref | rl-learn --kl-coef 0.04 --init m/ --out ckpt/\n"
    "  rl-ratio --mode geo --mask 0.5,2 --metrics mm.jsonl scored.rlr -o weighted.rlr\n";

typedef struct {
    const char *model, *adapter, *metrics, *listen, *token_file;
    rl_device device;
    cli_out_opts out;
    cli_partial partial;
    scr_opts scr;
} options;

static options parse_options(int argc, char **argv) {
    enum { O_MODEL = 256, O_MODE, O_CLIP, O_MASK, O_BATCH, O_METRICS, O_LISTEN, O_TOKEN, O_DEVICE, O_SKIP, O_PARTIAL, O_AS, O_ADAPTER };
    static const struct option longopts[] = {
        {"model", required_argument, 0, O_MODEL},   {"mode", required_argument, 0, O_MODE},
        {"clip", required_argument, 0, O_CLIP},     {"mask", required_argument, 0, O_MASK},
        {"batch", required_argument, 0, O_BATCH},   {"metrics", required_argument, 0, O_METRICS},
        {"listen", required_argument, 0, O_LISTEN}, {"token-file", required_argument, 0, O_TOKEN},
        {"device", required_argument, 0, O_DEVICE}, {"skip-uniform", no_argument, 0, O_SKIP},
        {"allow-partial", no_argument, 0, O_PARTIAL}, {"as", required_argument, 0, O_AS},
        {"adapter", required_argument, 0, O_ADAPTER}, CLI_OUT_LONGOPTS, {0, 0, 0, 0}};
    options o = {.scr = {.ratio = ratio_default_opts, .batch = 256}};
    rl_err e;
    int c, mode_given = 0;
    while ((c = getopt_long(argc, argv, CLI_OUT_SHORTOPTS, longopts, NULL)) != -1) {
        if (cli_out_option(c, optarg, &o.out, USAGE)) continue;
        switch (c) {
        case O_MODEL: o.model = optarg; break;
        case O_ADAPTER: o.adapter = optarg; break;
        case O_DEVICE: o.device = cli_parse_device(optarg); break;
        case O_MODE:
            mode_given = 1;
            if (ratio_parse_mode(optarg, &o.scr.ratio.mode, &e)) cli_usage_error("%s", e.msg);
            break;
        case O_CLIP:
            if (ratio_parse_clip(optarg, &o.scr.ratio.clip, &e)) cli_usage_error("%s", e.msg);
            o.scr.ratio.clip_set = 1;
            break;
        case O_MASK:
            if (ratio_parse_mask(optarg, &o.scr.ratio.lo, &o.scr.ratio.hi, &e)) cli_usage_error("%s", e.msg);
            o.scr.ratio.mask = 1;
            break;
        case O_BATCH: o.scr.batch = cli_parse_uint("--batch", optarg, 65536, 1); break;
        case O_METRICS: o.metrics = optarg; break;
        case O_LISTEN: o.listen = optarg; break;
        case O_TOKEN: o.token_file = optarg; break;
        case O_SKIP: o.scr.skip_uniform = 1; break;
        case O_PARTIAL: o.partial.allow = 1; break;
        case O_AS:
            if (!strcmp(optarg, "logp_ref")) o.scr.as_ref = 1;
            else if (strcmp(optarg, "logp_learner")) cli_usage_error("--as '%s': use logp_learner or logp_ref", optarg);
            break;
        }
    }
    if (o.scr.as_ref) {   // a reference is scored, never weighed, never pushed to
        if (!o.model) cli_usage_error("--as logp_ref scores the records with the reference model: give --model DIR");
        if (o.listen) cli_usage_error("--as logp_ref: the reference model is frozen, it takes no weights (--listen)");
        if (o.scr.skip_uniform)
            cli_usage_error("--as logp_ref: every record needs logp_ref for rl-learn --kl-coef (--skip-uniform)");
        if (mode_given || o.scr.ratio.clip_set || o.scr.ratio.mask)
            cli_usage_error("--as logp_ref writes no weights: --mode, --clip and --mask do not apply");
    }
    if (o.scr.ratio.mode == RATIO_NONE && (o.scr.ratio.mask || o.scr.ratio.clip_set))
        cli_usage_error("--mode none gives every token weight 1: --clip and --mask do not apply");
    if (o.listen && !o.model) cli_usage_error("--listen replaces the weights of --model DIR: give it");
    if (o.adapter && !o.model) cli_usage_error("--adapter is merged into the weights of --model DIR: give it");
    if (o.token_file && !o.listen) cli_usage_error("--token-file is for --listen");
    if (o.scr.skip_uniform && !o.model) cli_usage_error("--skip-uniform skips scoring by --model DIR: give it");
    if (o.listen && rcv_check_listen(o.listen, o.token_file, &e)) cli_usage_error("%s", e.msg);
    if (o.scr.batch == 0) cli_usage_error("--batch: a batch holds at least one record");
    int records_to_stdout = !o.out.output || !strcmp(o.out.output, "-");
    if (o.metrics && !strcmp(o.metrics, "-") && records_to_stdout)
        cli_usage_error("--metrics -: standard output already carries the records; give -o FILE");
    if (o.metrics && o.out.output && (!strcmp(o.metrics, o.out.output) || cli_same_file(o.metrics, o.out.output)))
        cli_usage_error("--metrics and --output name the same file");
    return o;
}

// The output: opened at the first header, which it is made from.
typedef struct {
    const options *o;
    int fd, argc;
    char **argv;
    recw_t *w;
    scorer_t *scr;
} run_t;

// Scores and writes every record held, so that what came before an error
// (or before waiting for input) reaches the output.
static void deliver(run_t *r) {
    rl_err e;
    if (r->w && (scr_flush(r->scr, r->w, &e) || recw_flush(r->w, &e))) cli_die("%s", e.msg);
}

static void on_header(run_t *r, const rec_t *h, const char *name) {
    rl_err e;
    if (scr_check_header(h, &e)) {
        deliver(r);
        cli_die("%s: %s", e.msg, name);
    }
    if (r->w) return;   // later members join the first one's output
    if (!scr_take_group_size(r->scr, h) && r->o->scr.skip_uniform)
        cli_warn("%s: the first header gives no sampling.group: no group is known whole, "
                 "and --skip-uniform skips none", name);
    rec_t *out = rec_new();
    scr_make_header(r->scr, h, out, r->argc, r->argv, r->o->out.no_provenance);
    recw_opts wo = recw_default_opts;
    wo.raw = r->o->out.raw;
    if (!(r->w = recw_fdopen(r->fd, r->o->out.output ? r->o->out.output : "(stdout)", &wo, out, &e))) cli_die("%s", e.msg);
    rec_free(out);
}

// The scorer's pending warnings (top-p sampling, a growing mismatch), each given once.
static void print_warnings(scorer_t *scr, cli_progress *prog) {
    const char *warning;
    while ((warning = scr_take_warning(scr))) {
        cli_progress_done(prog);
        cli_warn("%s", warning);
    }
}

int main(int argc, char **argv) {
    cli_init("rl-ratio");
    options o = parse_options(argc, argv);
    cli_require_utf8_args(argc, argv);
    int ninputs;
    char **inputs = cli_inputs(argc, argv, &ninputs);
    cli_refuse_overwrite(inputs, ninputs, o.out.output, "output");
    cli_refuse_overwrite(inputs, ninputs, o.metrics, "metrics file");
    run_t run = {.o = &o, .argc = argc, .argv = argv};
    run.fd = cli_open_output(o.out.output, 1, o.out.force);
    if (o.metrics) {
        o.scr.metrics_name = strcmp(o.metrics, "-") ? o.metrics : "(stdout)";
        o.scr.metrics = strcmp(o.metrics, "-") ? fopen(o.metrics, "w") : stdout;
        if (!o.scr.metrics) cli_die("cannot create the metrics file: %s: %s", o.metrics, strerror(errno));
    }
    cli_model loaded;
    if (o.model) {
        rl_err e;
        model_opts mo = {.dtype = DT_F32, .device = o.device};
        if (!(o.scr.model = cli_load_model(o.model, o.adapter, &mo, o.scr.as_ref ? "the model" : "the learner model",
                                           &loaded, &e)))
            cli_die("%s", e.msg);
        o.scr.model_dir = loaded.dir;
        o.scr.adapter_dir = o.adapter ? loaded.adapter : NULL;
        o.scr.ver_learner = loaded.version;
    }
    if (o.listen) {
        rl_err e;
        rcv_opts ropt = {.listen = o.listen, .token_file = o.token_file, .tool = "rl-ratio", .quiet = o.out.quiet,
                         .base = loaded.dir};
        if (!(o.scr.receiver = rcv_start(o.scr.model, o.scr.ver_learner, &ropt, &e))) cli_die("%s", e.msg);
        rcv_release(o.scr.receiver);   // the scorer holds the model only while it scores
        if (!o.out.quiet) fprintf(stderr, "rl-ratio: listening for weights on %s\n", rcv_address(o.scr.receiver));
        rcv_remove_at_exit(o.scr.receiver);
    }
    run.scr = scr_new(&o.scr);

    rec_t *rec = rec_new();
    cli_progress prog;
    cli_progress_init(&prog, o.out.progress);
    double t0 = clock_now();
    uint64_t bytes_in = 0, members = 0;
    for (int i = 0; i < ninputs; i++) {
        rl_err e;
        src_t *s = src_open(inputs[i], 0, &rec_default_limits, &e);
        if (!s) {
            deliver(&run);
            cli_die("%s", e.msg);
        }
        const char *name = strcmp(inputs[i], "-") ? inputs[i] : "(stdin)";
        recr_event ev;
        for (;;) {
            if (src_would_block(s)) deliver(&run);   // pass on what we have before waiting
            ev = src_next(s, rec);
            if (ev == RECR_END || ev == RECR_ERROR) break;
            if (ev == RECR_HEADER) {
                members++;
                on_header(&run, rec, name);
            } else if (ev == RECR_TRAILER) {   // a partial input: the output is partial too
                char why[1024];
                cli_progress_done(&prog);
                if (cli_partial_check(&o.partial, rec, name, why, sizeof why) && run.w) recw_set_partial(run.w, why);
            } else if (ev == RECR_RECORD) {
                char where[1200];
                if (scr_add(run.scr, rec, src_where(s, where, sizeof where), run.w, &e)) {
                    cli_progress_done(&prog);
                    rl_err e2;   // the records before the bad one were written: send them on
                    if (recw_flush(run.w, &e2)) cli_die("%s", e2.msg);
                    cli_die("%s", e.msg);
                }
                print_warnings(run.scr, &prog);
            }
            if (cli_progress_due(&prog)) {
                char b[32];
                const ratio_acc *t = scr_total(run.scr);
                cli_progress_print(&prog, "%llu records, %llu tokens, %s read", (unsigned long long)t->records,
                                   (unsigned long long)t->tokens, fmt_bytes(bytes_in + src_bytes_in(s), b, sizeof b));
            }
        }
        bytes_in += src_bytes_in(s);
        if (ev == RECR_ERROR) {
            cli_progress_done(&prog);
            deliver(&run);   // every complete record before the damage
            cli_die("%s", src_error(s));
        }
        src_close(s);
    }
    cli_progress_done(&prog);
    rl_err e;
    if (scr_flush(run.scr, run.w, &e) || scr_finish(run.scr, &e) || recw_close(run.w, &e)) cli_die("%s", e.msg);
    print_warnings(run.scr, &prog);
    uint64_t bytes_out = recw_bytes_written(run.w);
    rcv_stats rs = {0};
    if (o.scr.receiver) {
        rs = rcv_get_stats(o.scr.receiver);
        rcv_stop(o.scr.receiver);
    }
    recw_free(run.w);
    if (!o.out.quiet) {
        sbuf line = {0};
        char bin[32], bout[32];
        ratio_acc_text(scr_total(run.scr), &line);
        char pushes[200] = "", dev[32] = "";
        if (o.scr.model) snprintf(dev, sizeof dev, " on %s", model_device(o.scr.model));
        if (o.listen)
            snprintf(pushes, sizeof pushes, "; weights v%llu to v%llu, %llu pushes installed, %llu refused, swaps "
                     "stalled scoring %.0f us", (unsigned long long)o.scr.ver_learner, (unsigned long long)rs.version,
                     (unsigned long long)rs.installed, (unsigned long long)rs.refused, rs.stall_s * 1e6);
        fprintf(stderr, "rl-ratio: %.*s; %llu member%s, %d file%s, %s in, %s out, %.2f s%s%s\n", (int)line.len,
                (const char *)line.data, (unsigned long long)members, members == 1 ? "" : "s", ninputs,
                ninputs == 1 ? "" : "s", fmt_bytes(bytes_in, bin, sizeof bin), fmt_bytes(bytes_out, bout, sizeof bout),
                clock_now() - t0, dev, pushes);
        sbuf_free(&line);
    }
    if (o.scr.metrics && o.scr.metrics != stdout && fclose(o.scr.metrics))
        cli_die("write error: %s: %s", o.metrics, strerror(errno));
    scr_free(run.scr);
    if (o.scr.model) model_free(o.scr.model);
    rec_free(rec);
    if (run.fd > 1 && close(run.fd)) cli_die("write error: %s: %s", o.out.output, strerror(errno));
    return cli_partial_failed(&o.partial);
}
