// bench.h — what the benchmark drivers in bench/ share.
#ifndef RLPIPE_BENCH_H
#define RLPIPE_BENCH_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The integer value of option --name, in [lo, hi]; exits 2 naming prog otherwise.
static inline int bench_int_arg(const char *prog, const char *s, const char *name, int lo, int hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "%s: error: --%s must be an integer in [%d, %d]\n", prog, name, lo, hi);
        exit(2);
    }
    return (int)v;
}

// Seconds on the monotonic clock.
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median of t[0..n), n <= 64 (t is left as it is).
static inline double bench_median(const double *t, int n) {
    double s[64];
    memcpy(s, t, (size_t)n * sizeof *t);
    qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

// Ends a RESULT line with "times=" and the n timings, then a newline, flushed.
static inline void bench_print_times(const double *t, int n) {
    printf("times=");
    for (int i = 0; i < n; i++) printf(i ? ",%.4f" : "%.4f", t[i]);
    putchar('\n');
    fflush(stdout);
}

#endif
