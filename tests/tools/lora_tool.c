// lora_tool — drives lib/checkpoint/lora.c for the Python tests
// (tests/py/test_lora_files.py), which compare it with PEFT.
//
//   lora_tool dump ADAPTER BASE        reads ADAPTER (a PEFT directory) for the
//                                      base model BASE (its directory or config.json);
//                                      prints "r R alpha A rslora 0|1 targets T dropout D",
//                                      then per tensor, layer by layer, each target
//                                      in LORA_* order, A then B, two lines:
//                                        NAME ROWS COLS
//                                        the values as f32, %.9g, separated by spaces
//   lora_tool copy ADAPTER BASE OUT    reads ADAPTER and writes it to the directory OUT
//   lora_tool merge ADAPTER BASE OUT   each targeted matrix of BASE's model.safetensors
//                                      with the adapter merged (lora_merge), written to
//                                      the file OUT in F32 under the base's names
//
// Exit 0 ok, 1 with the library's message on stderr, 2 usage.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/config.h"
#include "checkpoint/lora.h"
#include "checkpoint/safetensors.h"

static const char *usage = "usage: lora_tool dump|copy|merge ADAPTER BASE [OUT]\n";

static void dump(const lora_adapter *a, double dropout) {
    char targets[128], name[160];
    lora_targets_str(a->c.targets, targets, sizeof targets);
    printf("r %d alpha %.17g rslora %d targets %s dropout %.17g\n", a->c.rank, a->c.alpha, a->c.rslora, targets,
           dropout);
    for (int l = 0; l < a->layers; l++)
        for (int t = 0; t < LORA_NT; t++)
            for (int ab = 0; ab < 2 && (a->c.targets & (1u << t)); ab++) {
                int rows = ab ? a->out[t] : a->c.rank, cols = ab ? a->c.rank : a->in[t];
                const float *v = ab ? a->b[l * LORA_NT + t] : a->a[l * LORA_NT + t];
                lora_tensor_name(name, sizeof name, l, t, ab);
                printf("%s %d %d\n", name, rows, cols);
                for (size_t k = 0; k < (size_t)rows * cols; k++) printf("%s%.9g", k ? " " : "", (double)v[k]);
                printf("\n");
            }
}

// The base's matrices that a targets, each merged, written to out.
static int merge(const lora_adapter *a, const char *base, const char *out, rl_err *e) {
    char *path = path_join(base, "model.safetensors");
    st_file *f = st_open(path, e);
    free(path);
    if (!f) return -1;
    size_t n = 0;
    st_out *t = xmalloc((size_t)a->layers * LORA_NT * sizeof *t);
    char (*names)[160] = xmalloc((size_t)a->layers * LORA_NT * sizeof *names);
    int rc = 0;
    for (int l = 0; l < a->layers && rc == 0; l++)
        for (int tg = 0; tg < LORA_NT && rc == 0; tg++) {
            if (!(a->c.targets & (1u << tg))) continue;
            snprintf(names[n], sizeof names[n], "model.layers.%d.%s.%s.weight", l, tg < LORA_GATE ? "self_attn" : "mlp",
                     lora_target_names[tg]);
            const st_tensor *w = st_find(f, names[n]);
            if (!w || w->ndim != 2 || w->shape[0] != a->out[tg] || w->shape[1] != a->in[tg]) {
                rc = err_set(e, "%s: no tensor %s of shape (%d, %d)", f->path, names[n], a->out[tg], a->in[tg]);
                break;
            }
            float *W = xmalloc(w->nelem * sizeof *W);
            st_read_f32(w, W);
            size_t i = (size_t)l * LORA_NT + tg;
            lora_merge(W, a->out[tg], a->in[tg], a->b[i], a->a[i], a->c.rank, lora_scale(&a->c));
            t[n] = (st_out){.name = names[n], .ndim = 2, .data = W, .shape = {a->out[tg], a->in[tg]}};
            n++;
        }
    if (rc == 0) rc = st_write_f32(out, t, n, e);
    for (size_t k = 0; k < n; k++) free((void *)t[k].data);
    free(t);
    free(names);
    st_close(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5 || (strcmp(argv[1], "dump") == 0) != (argc == 4) ||
        (strcmp(argv[1], "dump") && strcmp(argv[1], "copy") && strcmp(argv[1], "merge"))) {
        fputs(usage, stderr);
        return 2;
    }
    model_config mc;
    rl_err e;
    double dropout;
    lora_adapter *a = NULL;
    int rc = 0;
    if (cfg_load(argv[3], &mc, &e) || !(a = lora_read(argv[2], &mc, &dropout, &e))) rc = -1;
    else if (strcmp(argv[1], "dump") == 0) dump(a, dropout);
    else if (strcmp(argv[1], "copy") == 0) rc = lora_write(argv[4], a, &e);
    else rc = merge(a, argv[3], argv[4], &e);
    lora_free(a);
    if (rc) fprintf(stderr, "lora_tool: error: %s\n", e.msg);
    if (fflush(stdout) || ferror(stdout)) {
        perror("lora_tool: error: stdout");
        return 1;
    }
    return rc ? 1 : 0;
}
