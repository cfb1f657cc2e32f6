// backend.h — which backend computes (doc/design.md §6, `--device cpu|cuda`): the
// CPU's, or CUDA's when asked for or, by default, when this build has it and
// a GPU can be used.
#ifndef RLPIPE_BACKEND_H
#define RLPIPE_BACKEND_H

#include "model/ops.h"
#include "util.h"

typedef enum { DEV_AUTO = 0, DEV_CPU, DEV_CUDA } rl_device;

int dev_parse(const char *s, rl_device *out);   // "auto", "cpu", "cuda"; 0 ok, -1 unknown

// The backend for d: DEV_AUTO is CUDA's if ops_cuda() has one, else the
// CPU's. DEV_CUDA without one is an error saying why ("--device cuda: ...").
const rl_ops *dev_ops(rl_device d, rl_err *err);

#endif
