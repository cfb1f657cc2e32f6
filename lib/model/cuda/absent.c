// cuda/absent.c — ops_cuda() of a build without the CUDA backend (make CUDA=0,
// or no nvcc found): there is none, and the reason says how to get one.
#include "model/ops.h"

const rl_ops *ops_cuda(const char **why) {
    if (why) *why = "this build has no CUDA backend (built with CUDA=0 or without nvcc; rebuild with nvcc on PATH)";
    return 0;
}
