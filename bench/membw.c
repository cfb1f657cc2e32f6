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

// Eight independent sums: one sum's chain of adds (an 8-byte add per cycle)
// would bound a thread at about 24 GB/s at 3 GHz, below what one core reads
// from memory; with AVX2 where the processor has it (32-byte loads).
static uint64_t sum_portable(const uint64_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
        s4 += p[i + 4], s5 += p[i + 5], s6 += p[i + 6], s7 += p[i + 7];
    }
    for (; i < n; i++) s0 += p[i];
    return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return v[0] + v[1] + v[2] + v[3] + sum_portable(p + i, n - i);
}
#endif

static void *read_part(void *arg) {
    part *a = arg;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        a->sum = sum_avx2(a->p, a->n);
        return NULL;
    }
#endif
    a->sum = sum_portable(a->p, a->n);
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
