// grad_probe — the gradient of one rl-learn step, for the Python tests to
// compare with PyTorch autograd (tests/py/test_learn.py).
//
//   grad_probe --model DIR [--loss pg|ppo|cispo|gspo|sft] [--adv grpo|drgrpo|rloo]
//              [--norm seqs|tokens|const:N] [--eps E] [--eps-low E1] [--eps-high E2]
//              [--micro M] [--micro-tokens T] [--tis C] [--kl-coef B] [--kl-est K]
//              [--kl-in WHERE] [--mask-truncated] [--overlong L,C] [--entropy-coef C]
//              [--adapter DIR] [--base-dtype f32|bf16] [--recompute]
//              RECORDS OUT.safetensors
//
// (the clip range as rl-learn resolves it: lrn_clip_range)
//
// Reads every record of RECORDS (a record stream or JSON lines), makes them
// one batch and runs the first half of a step (lrn_grad: advantages, loss,
// forward and backward over the micro-batches); writes the gradient of every
// parameter tensor to OUT (F32, the parameters' names and shapes) and prints
// the loss (%.17g) on standard output. With --adapter, the LoRA adapter of DIR
// (PEFT's files) is attached to the model (held at --base-dtype) and the
// parameters are its tensors, under their PEFT names. --recompute: the
// backward computes each layer's activations again (model_set_recompute).
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "learn/learner.h"
#include "records/source.h"

static void die(const char *msg) {
    fprintf(stderr, "grad_probe: error: %s\n", msg);
    exit(1);
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'}, {"loss", required_argument, 0, 'l'},
        {"adv", required_argument, 0, 'a'},   {"norm", required_argument, 0, 'n'},
        {"eps", required_argument, 0, 'e'},   {"micro", required_argument, 0, 'M'},
        {"micro-tokens", required_argument, 0, 'T'}, {"tis", required_argument, 0, 't'},
        {"eps-low", required_argument, 0, 'L'}, {"eps-high", required_argument, 0, 'H'},
        {"kl-coef", required_argument, 0, 'k'}, {"kl-est", required_argument, 0, 'K'},
        {"kl-in", required_argument, 0, 'I'},   {"mask-truncated", no_argument, 0, 'X'},
        {"overlong", required_argument, 0, 'O'}, {"entropy-coef", required_argument, 0, 'E'},
        {"adapter", required_argument, 0, 'A'}, {"base-dtype", required_argument, 0, 'B'},
        {"recompute", no_argument, 0, 'R'}, {0, 0, 0, 0}};
    const char *dir = NULL, *adapter = NULL;
    model_opts mo = {.dtype = DT_F32};
    int recompute = 0;
    lrn_opts o = {.loss = LOSS_PG, .adv = ADV_GRPO, .norm = NORM_SEQS, .epochs = 1, .micro = 1, .kl = KL_K3,
                  .batch = SIZE_MAX, .opt = adamw_default_opts};   // one batch of every record
    double eps = NAN, eps_low = NAN, eps_high = NAN;
    rl_err e;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': dir = optarg; break;
        case 'l': bad = lrn_parse_loss(optarg, &o.loss, &e); break;
        case 'a': bad = lrn_parse_adv(optarg, &o.adv, &e); break;
        case 'n': bad = lrn_parse_norm(optarg, &o.norm, &o.norm_const, &e); break;
        case 'e': eps = atof(optarg); break;
        case 'L': eps_low = atof(optarg); break;
        case 'H': eps_high = atof(optarg); break;
        case 'M': o.micro = atoi(optarg); break;
        case 'T': o.micro_tokens = (size_t)atol(optarg); break;
        case 't': o.tis = atof(optarg); break;
        case 'k': o.kl_coef = atof(optarg); break;
        case 'K': bad = lrn_parse_kl_est(optarg, &o.kl, &e); break;
        case 'I': bad = lrn_parse_kl_in(optarg, &o.kl_in_reward, &e); break;
        case 'X': o.mask_truncated = 1; break;
        case 'E': o.entropy_coef = atof(optarg); break;
        case 'O': bad = lrn_parse_overlong(optarg, &o.overlong_max, &o.overlong_cache, &e); break;
        case 'A': adapter = optarg; break;
        case 'R': recompute = 1; break;
        case 'B':
            if (dt_parse(optarg, &mo.dtype)) die("--base-dtype: f32 or bf16");
            break;
        default: die("usage: grad_probe --model DIR [options] RECORDS OUT.safetensors");
        }
        if (bad) die(e.msg);
    }
    if (!dir || argc - optind != 2) die("usage: grad_probe --model DIR [options] RECORDS OUT.safetensors");
    lrn_clip_range(o.loss, eps, eps_low, eps_high, &o.eps_low, &o.eps_high);
    model_t *m = model_load(dir, &mo, &e);
    if (!m) die(e.msg);
    if (adapter) {
        lora_adapter *a = lora_read(adapter, model_cfg(m), NULL, &e);
        if (!a || model_lora_attach(m, &a->c, a, 0, &e)) die(e.msg);
        lora_free(a);
    }
    if (model_train_init(m, &e)) die(e.msg);
    model_set_recompute(m, recompute);
    char tpath[4200];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
    tokenizer *tok = tok_load(tpath, &e);   // optional: NULL when the directory has none
    o.tok = tok;

    learner_t *l = lrn_new(m, &o);
    src_t *s = src_open(argv[optind], SRC_DETECT, &rec_default_limits, &e);
    if (!s) die(e.msg);
    rec_t *r = rec_new();
    recr_event ev;
    while ((ev = src_next(s, r)) != RECR_END) {
        if (ev == RECR_ERROR) die(src_error(s));
        char where[1200];
        if (ev == RECR_RECORD && lrn_add(l, r, src_where(s, where, sizeof where), &e)) die(e.msg);
    }
    src_close(s);
    lrn_end(l);
    lrn_metrics mt;
    if (lrn_grad(l, 0, 0, &mt, &e)) die(e.msg);

    size_t nt = model_ntensors(m);
    st_out *out = xmalloc(nt * sizeof *out);
    for (size_t i = 0; i < nt; i++) {
        model_tensor t = model_tensor_at(m, i);
        float *g = xmalloc(t.n * sizeof(float));
        if (model_tensor_get(m, MODEL_GRAD, i, g)) die("no gradient");
        out[i] = (st_out){.name = t.name, .ndim = t.ndim, .data = g};
        out[i].shape[0] = t.shape[0];
        out[i].shape[1] = t.shape[1];
    }
    if (st_write_f32(argv[optind + 1], out, nt, &e)) die(e.msg);
    printf("%.17g\n", mt.loss);
    for (size_t i = 0; i < nt; i++) free((void *)out[i].data);
    free(out);
    rec_free(r);
    lrn_free(l);
    tok_free(tok);
    model_free(m);
    return 0;
}
