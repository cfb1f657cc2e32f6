// fuzz_config.c — config.json and the generation_config.json beside it
// (config.c). The input is config.json, then, after a NUL byte when there
// is one, generation_config.json (absent when there is none). A config that
// loads is checked, described, and written back with cfg_save: what is
// written must load again as the same model.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/config.h"
#include "fuzz_util.h"

static void same_model(const model_config *a, const model_config *b) {
    if (strcmp(a->model_type, b->model_type) || a->hidden != b->hidden || a->inter != b->inter ||
        a->layers != b->layers || a->heads != b->heads || a->kv_heads != b->kv_heads ||
        a->head_dim != b->head_dim || a->vocab != b->vocab || a->max_pos != b->max_pos ||
        a->tie_embeddings != b->tie_embeddings || a->qkv_bias != b->qkv_bias || a->o_bias != b->o_bias ||
        a->mlp_bias != b->mlp_bias || a->qk_norm != b->qk_norm || a->sliding_window != b->sliding_window ||
        a->rope.type != b->rope.type || a->eos_id != b->eos_id || a->bos_id != b->bos_id) {
        fprintf(stderr, "fuzz_config: cfg_save wrote a config that cfg_load reads as another model\n");
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[4096], saved[4096];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/model", fz_dir());
        snprintf(saved, sizeof saved, "%s/saved", fz_dir());
        if (mkdir(dir, 0700) || mkdir(saved, 0700)) __builtin_trap();
    }
    const uint8_t *cfg, *gen;
    size_t ncfg, ngen;
    if (fz_split(data, size, 0, &cfg, &ncfg, &gen, &ngen))
        fz_write(dir, "generation_config.json", gen, ngen);
    else
        fz_remove(dir, "generation_config.json");
    fz_write(dir, "config.json", cfg, ncfg);

    model_config c, back;
    rl_err err;
    if (cfg_load(dir, &c, &err)) return 0;
    if (cfg_check(&c, &err)) {
        fprintf(stderr, "fuzz_config: cfg_load accepted what cfg_check refuses: %s\n", err.msg);
        __builtin_trap();
    }
    const char *why;
    (void)cfg_max_seq(&c, &why);
    char line[512];
    cfg_generation_str(&c, line, sizeof line);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", saved);
    if (cfg_save(path, &c, &err) || cfg_load(path, &back, &err)) {
        fprintf(stderr, "fuzz_config: a config cfg_load accepted does not read back: %s\n", err.msg);
        __builtin_trap();
    }
    same_model(&c, &back);
    return 0;
}
