// cpu_builds.h — unit tests of the CPU backend that run their cases on the
// processor's best build of the kernels (model/cpu/kernels.h), then on its
// AVX2 build (8 lanes where the best has 16).
#ifndef RLPIPE_TEST_CPU_BUILDS_H
#define RLPIPE_TEST_CPU_BUILDS_H

#include <stdio.h>
#include <stdlib.h>

#include "model/cpu/kernels.h"
#include "model/ops.h"

static void on_best_and_avx2(void (*cases)(void)) {
    ops_cpu();   // chooses the best build once
    for (int b = 0; b < 2; b++) {
        if (b) setenv("RLPIPE_CPU", "avx2", 1);
        cpu_kernels_choose();
        printf("# kernels: %s\n", cpu_K->name);
        cases();
    }
    unsetenv("RLPIPE_CPU");
}

#endif
