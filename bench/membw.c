// membw — memory bandwidth, the reference of bench/sample.sh's bandwidth
// bound (read) and of bench/sync.sh's push throughput (--copy): T threads
// each sum their share of a buffer of MIB MiB, or with --copy memcpy their
// share of it into a second buffer of MIB MiB (both written once before, so
// every page is backed), REPS times; prints
//   RESULT what=membw_read|membw_copy bytes=B median_s=S gb_s=G times=t1,t2,...
// with B the bytes read (copied), G = B / S / 1e9 (decimal GB/s) over the
// median pass. The buffer should be far larger than the last-level cache.
//
//   membw [--copy] [--mib MIB (default 1024)] [--threads T (default 2)] [--reps R (default 7)]
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
    uint64_t *dst;  // --copy: where p[0..n) goes
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

static void *copy_part(void *arg) {
    part *a = arg;
    memcpy(a->dst, a->p, a->n * sizeof *a->p);
    a->sum = a->dst[a->n / 2];
    return NULL;
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {{"copy", no_argument, 0, 'c'},
                                             {"mib", required_argument, 0, 'm'},
                                             {"threads", required_argument, 0, 't'},
                                             {"reps", required_argument, 0, 'r'},
                                             {0, 0, 0, 0}};
    int mib = 1024, nt = 2, reps = 7, copy = 0, c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': copy = 1; break;
        case 'm': mib = bench_int_arg("membw", optarg, "mib", 1, 1 << 20); break;
        case 't': nt = bench_int_arg("membw", optarg, "threads", 1, MAX_THREADS); break;
        case 'r': reps = bench_int_arg("membw", optarg, "reps", 1, MAX_REPS); break;
        default: fprintf(stderr, "usage: membw [--copy] [--mib MIB] [--threads T] [--reps R]\n"); return 2;
        }
    }
    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(bytes), *dst = copy ? malloc(bytes) : NULL;
    if (!buf || (copy && !dst)) {
        fprintf(stderr, "membw: error: cannot allocate %d MiB%s\n", mib, copy ? " twice" : "");
        return 1;
    }
    memset(buf, 1, bytes);
    if (copy) memset(dst, 0, bytes);
    part parts[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    double t[MAX_REPS];
    uint64_t total = 0;
    for (int r = -1; r < reps; r++) {     // one warm-up pass
        double t0 = bench_now();
        for (int i = 0; i < nt; i++) {
            size_t lo = n * (size_t)i / (size_t)nt, hi = n * (size_t)(i + 1) / (size_t)nt;
            parts[i] = (part){buf + lo, copy ? dst + lo : NULL, hi - lo, 0};
            if (pthread_create(&th[i], NULL, copy ? copy_part : read_part, &parts[i]) != 0) {
                fprintf(stderr, "membw: error: cannot start a thread\n");
                return 1;
            }
        }
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL), total += parts[i].sum;
        if (r >= 0) t[r] = bench_now() - t0;
    }
    double med = bench_median(t, reps);
    printf("RESULT what=membw_%s bytes=%zu median_s=%.6f gb_s=%.2f ", copy ? "copy" : "read", bytes, med,
           (double)bytes / med / 1e9);
    bench_print_times(t, reps);
    if (total == 42) printf("(sum %llu)\n", (unsigned long long)total);   // never: keeps the sums live
    free(buf);
    free(dst);
    return 0;
}
