// learn — the sgemm reference of bench/learn.sh: times the three cblas_sgemm
// calls of one linear layer's training step at the shape of a layer of the
// model, and prints
//   RESULT what=sgemm_train_MxNxK tokens=M flop=F median_s=S gflop_s=G times=t1,t2,...
// where F = 6·M·N·K (three products of 2·M·N·K) and S the median over REPS
// repetitions of the three calls together (after one warm-up). OpenBLAS runs
// with its own threads (OPENBLAS_NUM_THREADS, default one per core).
//
//   learn sgemm --m M --n N --k K [--reps R (default 3)]
//     forward          y  (M, N) = x (M, K) · Wᵀ      W (N, K), as the file stores it
//     input gradient   dx (M, K) = dy (M, N) · W
//     weight gradient  dW (N, K) = dyᵀ · x            (accumulated: beta 1)
#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "rng.h"
#include "util.h"

#define MAX_REPS 64   // bench_median takes at most 64

static float *normal_matrix(rl_rng *r, size_t n) {
    float *a = xmalloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = (float)rng_normal(r);
    return a;
}

static void cmd_sgemm(int M, int N, int K, int reps) {
    rl_rng r;
    rng_seed(&r, 1);
    float *x = normal_matrix(&r, (size_t)M * K), *w = normal_matrix(&r, (size_t)N * K);
    float *dy = normal_matrix(&r, (size_t)M * N), *y = xmalloc((size_t)M * N * sizeof *y);
    float *dx = xmalloc((size_t)M * K * sizeof *dx), *dw = calloc((size_t)N * K, sizeof *dw);
    if (!dw) { fprintf(stderr, "learn: error: out of memory\n"); exit(1); }
    double t[MAX_REPS];
    for (int i = -1; i < reps; i++) {     // one warm-up
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dy, N, w, K, 0.0f, dx, K);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dy, N, x, K, 1.0f, dw, K);
        if (i >= 0) t[i] = bench_now() - t0;
    }
    double med = bench_median(t, reps), flop = 6.0 * M * N * K;
    printf("RESULT what=sgemm_train_%dx%dx%d tokens=%d flop=%.6g median_s=%.6f gflop_s=%.2f ", M, N, K, M, flop, med,
           flop / med / 1e9);
    bench_print_times(t, reps);
    free(x), free(w), free(dy), free(y), free(dx), free(dw);
}

int main(int argc, char **argv) {
    static const char usage[] = "usage: learn sgemm --m M --n N --k K [--reps R]  (see bench/learn.c)\n";
    if (argc < 2 || strcmp(argv[1], "sgemm") != 0) { fputs(usage, stderr); return 2; }
    static const struct option longopts[] = {{"m", required_argument, 0, '1'}, {"n", required_argument, 0, '2'},
                                             {"k", required_argument, 0, '3'}, {"reps", required_argument, 0, 'R'},
                                             {0, 0, 0, 0}};
    int M = 1024, N = 1024, K = 1024, reps = 3, c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case '1': M = bench_int_arg("learn", optarg, "m", 1, 1 << 16); break;
        case '2': N = bench_int_arg("learn", optarg, "n", 1, 1 << 18); break;
        case '3': K = bench_int_arg("learn", optarg, "k", 1, 1 << 16); break;
        case 'R': reps = bench_int_arg("learn", optarg, "reps", 1, MAX_REPS); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind != argc) { fputs(usage, stderr); return 2; }
    cmd_sgemm(M, N, K, reps);
    return 0;
}
