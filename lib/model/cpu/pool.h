// cpu/pool.h — the CPU backend's threads: one per available core (the caller
// counts as one), or RLPIPE_THREADS. Idle threads poll for a while, then
// sleep. How long they poll depends on the machine's load: tools that share
// the cores (a pipeline of three on two cores) must not burn each other's
// time, while a tool alone on its cores loses the most to sleeping and
// waking between the many short operations of one decode step. So the
// thread that posts work reads the number of runnable tasks
// (/proc/loadavg) every 0.1 s: while it is at most the number of
// processors, idle threads poll about 2000 times (tens of µs), otherwise
// about 100 (a few µs). OpenMP's libgomp spins far longer by default and
// reads its policy only from the environment, before main() (a program
// cannot change it for itself). Measured with two other processes busy on
// the 2 cores, one-slot decoding of a 25M-parameter model: libgomp's
// default 4 tokens/s, OMP_WAIT_POLICY=PASSIVE 330; this pool polling 20000
// / 1000 / 100 / 0 times before sleeping: 20 / 199 / 316 / 330. Alone on
// the 2 cores, one-slot int8 decoding of a 110M-parameter model: 100 polls
// ~174 tokens/s, 2000 polls ~300.
#ifndef RLPIPE_CPU_POOL_H
#define RLPIPE_CPU_POOL_H

// Work on items [lo, hi) of a loop.
typedef void (*pool_fn)(void *ctx, int lo, int hi);

// Runs fn over [0, n): contiguous parts, one per thread, each a multiple of
// align items (but the last); serially when n < min_par, or when called from
// inside a pool function. Returns when every part is done.
void pool_for(int n, int align, int min_par, pool_fn fn, void *ctx);
// Runs fn(ctx, i, i + 1) for every i < n, handing tasks to whichever thread is free.
void pool_tasks(int n, pool_fn fn, void *ctx);
// The part [*lo, *hi) of n items that part t of nt takes, in multiples of align.
void pool_split(int n, int nt, int t, int align, int *lo, int *hi);
int pool_threads(void);

#endif
