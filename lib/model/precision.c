// model/precision.c — the sampler's precisions by name (model.h): each is a
// weight dtype and an activation rounding of model_opts.
#include <stdio.h>
#include <string.h>

#include "model/model.h"

typedef struct {
    const char *name;
    rl_dtype dtype, act;
} precision;

static const precision P[] = {
    {"f32", DT_F32, DT_F32},   {"bf16", DT_BF16, DT_BF16}, {"int8", DT_I8, DT_BF16}, {"fp8", DT_FP8, DT_BF16},
    {"bf16w", DT_BF16, DT_F32}, {"f16", DT_F16, DT_F32},   {"int8w", DT_I8, DT_F32},
};

const char model_precision_names[] = "f32, bf16, int8, fp8, bf16w, f16, int8w";

int model_precision_parse(const char *name, model_opts *o) {
    for (size_t i = 0; i < sizeof P / sizeof *P; i++)
        if (!strcmp(name, P[i].name)) {
            o->dtype = P[i].dtype;
            o->act = P[i].act;
            return 0;
        }
    return -1;
}

const char *model_precision_name(const model_opts *o) {
    for (size_t i = 0; i < sizeof P / sizeof *P; i++)
        if (o->dtype == P[i].dtype && o->act == P[i].act) {
            if (o->dtype == DT_I8 && o->act == DT_F32 && o->group == 64) return "int8w/64";
            return P[i].name;
        }
    return NULL;
}

int model_head_parse(const char *name, model_opts *o) {
    if (strcmp(name, "f32") && strcmp(name, "dtype")) return -1;
    o->head_f32 = !strcmp(name, "f32");
    return 0;
}
