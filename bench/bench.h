// bench.h — what the benchmark drivers in bench/ share.
#ifndef RLPIPE_BENCH_H
#define RLPIPE_BENCH_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
