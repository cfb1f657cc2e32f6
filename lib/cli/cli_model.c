// cli_model.c — --model with --adapter (cli_model.h).
#include "cli/cli_model.h"

#include <stdio.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/lora.h"

model_t *cli_load_model(const char *model, const char *adapter, const model_opts *o, const char *what,
                        cli_model *info, rl_err *err) {
    info->adapter[0] = 0;
    if (ckpt_resolve(model, info->dir, sizeof info->dir, &info->version, err)) return NULL;
    lora_adapter *a = NULL;
    if (adapter) {
        model_config c;
        rl_err e;
        if (ckpt_resolve(adapter, info->adapter, sizeof info->adapter, &info->version, err)) return NULL;
        if (cfg_load(info->dir, &c, &e)) {
            err_set(err, "cannot load %s: %s", what, e.msg);
            return NULL;
        }
        if (!(a = lora_read(info->adapter, &c, NULL, err))) return NULL;
    }
    rl_err e;
    model_t *m = a ? model_load_merged(info->dir, a, o, &e) : model_load(info->dir, o, &e);
    if (!m) err_set(err, "cannot load %s: %s", what, e.msg);
    if (a) lora_free(a);
    return m;
}
