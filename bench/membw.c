// membw — memory read bandwidth, the reference of bench/sample.sh's
// bandwidth bound: T threads each sum their share of a buffer of MIB MiB
// (written once before, so every page is backed), REPS times; prints
//   RESULT what=membw_read bytes=B median_s=S gb_s=G times=t1,t2,...
// with G = B / S / 1e9 (decimal GB/s) over the median pass. The buffer should
// be far larger than the last-level cache.
//
//   membw [--mib MIB (default 1024)] [--threads T (default 2)] [--reps R (default 7)]
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define MAX_THREADS 64
#define MAX_REPS 64   // bench_median takes at most 64

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;   // kept so that the reads are not optimised away
} part;

static void *read_part(void *arg) {
    part *a = arg;
    uint64_t s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < a->n; i++) s += a->p[i];
    a->sum = s;
    return NULL;
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {{"mib", required_argument, 0, 'm'},
                                             {"threads", required_argument, 0, 't'},
                                             {"reps", required_argument, 0, 'r'},
                                             {0, 0, 0, 0}};
    int mib = 1024, nt = 2, reps = 7, c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': mib = bench_int_arg("membw", optarg, "mib", 1, 1 << 20); break;
        case 't': nt = bench_int_arg("membw", optarg, "threads", 1, MAX_THREADS); break;
        case 'r': reps = bench_int_arg("membw", optarg, "reps", 1, MAX_REPS); break;
        default: fprintf(stderr, "usage: membw [--mib MIB] [--threads T] [--reps R]\n"); return 2;
        }
    }
    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(bytes);
    if (!buf) { fprintf(stderr, "membw: error: cannot allocate %d MiB\n", mib); return 1; }
    memset(buf, 1, bytes);
    part parts[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    double t[MAX_REPS];
    uint64_t total = 0;
    for (int r = -1; r < reps; r++) {     // one warm-up pass
        double t0 = bench_now();
        for (int i = 0; i < nt; i++) {
            size_t lo = n * (size_t)i / (size_t)nt, hi = n * (size_t)(i + 1) / (size_t)nt;
            parts[i] = (part){buf + lo, hi - lo, 0};
            if (pthread_create(&th[i], NULL, read_part, &parts[i]) != 0) {
                fprintf(stderr, "membw: error: cannot start a thread\n");
                return 1;
            }
        }
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL), total += parts[i].sum;
        if (r >= 0) t[r] = bench_now() - t0;
    }
    double med = bench_median(t, reps);
    printf("RESULT what=membw_read bytes=%zu median_s=%.6f gb_s=%.2f ", bytes, med, (double)bytes / med / 1e9);
    bench_print_times(t, reps);
    if (total == 42) printf("(sum %llu)\n", (unsigned long long)total);   // never: keeps the sums live
    free(buf);
    return 0;
}
