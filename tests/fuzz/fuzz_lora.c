// fuzz_lora.c — adapter_config.json as lora_config_read reads it (lora.c).
// Whatever the bytes: no crash, leak or undefined behaviour; a refusal says
// why; a config taken has a rank from 1, a finite positive alpha, targets
// among the seven modules, a dropout in [0, 1) and a terminated base name;
// and written back with lora_config_write, it reads back the same.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/lora.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char saved[4200];
    if (fd < 0) {
        fd = fz_memfd("adapter_config.json");
        snprintf(saved, sizeof saved, "%s/" LORA_CONFIG, fz_dir());
    }
    lora_config c, back;
    double dropout = -1, dropout_back = -1;
    rl_err err;
    err.msg[0] = 0;
    if (lora_config_read(fz_fill(fd, data, size), &c, &dropout, &err)) {
        if (!err.msg[0]) __builtin_trap();
        return 0;
    }
    if (c.rank < 1 || !(c.alpha > 0) || !isfinite(c.alpha) || !c.targets || (c.targets & ~LORA_ALL) ||
        !(dropout >= 0 && dropout < 1) || !memchr(c.base, 0, sizeof c.base) || !isfinite(lora_scale(&c))) {
        fprintf(stderr, "fuzz_lora: lora_config_read accepted an invalid config (r %d, alpha %g)\n", c.rank, c.alpha);
        __builtin_trap();
    }
    char names[128];
    lora_targets_str(c.targets, names, sizeof names);
    unsigned parsed;
    if (lora_parse_targets(names, &parsed, &err) || parsed != c.targets) __builtin_trap();
    if (lora_config_write(saved, &c, &err) || lora_config_read(saved, &back, &dropout_back, &err)) {
        fprintf(stderr, "fuzz_lora: a config lora_config_read accepted does not read back: %s\n", err.msg);
        __builtin_trap();
    }
    if (back.rank != c.rank || back.alpha != c.alpha || back.rslora != c.rslora || back.targets != c.targets ||
        strcmp(back.base, c.base) || dropout_back != 0) {
        fprintf(stderr, "fuzz_lora: lora_config_write wrote a config that reads back otherwise\n");
        __builtin_trap();
    }
    return 0;
}
