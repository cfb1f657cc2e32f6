// backend.c — choosing the backend (backend.h).
#include "model/backend.h"

#include <string.h>

static const char *const names[] = {"auto", "cpu", "cuda"};

int dev_parse(const char *s, rl_device *out) {
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (rl_device)i;
            return 0;
        }
    return -1;
}

const rl_ops *dev_ops(rl_device d, rl_err *err) {
    const char *why = NULL;
    const rl_ops *o;
    switch (d) {
    case DEV_CPU: return ops_cpu();
    case DEV_CUDA:
        if ((o = ops_cuda(&why))) return o;
        err_set(err, "--device cuda: %s", why);
        return NULL;
    case DEV_AUTO: break;
    }
    return (o = ops_cuda(&why)) ? o : ops_cpu();
}
