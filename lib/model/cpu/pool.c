// cpu/pool.c — a fork-join pool (pool.h): workers wait for a new generation
// of work by spinning briefly, then on a condition variable.
#include "model/cpu/pool.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

// Polls of an idle thread before it sleeps: long (tens of µs) while the
// machine's runnable tasks fit its processors, short (a few µs) where
// others wait to run; looked at every LOOK_S seconds (pool.h).
#define SPIN_SHORT 100
#define SPIN_LONG 2000
#define LOOK_S 0.1

static struct {
    pthread_once_t once;
    int nthreads;
    pthread_mutex_t mu, caller;     // caller: one job at a time, whichever thread posts it
    pthread_cond_t wake, done;
    atomic_uint gen;        // generation of the job posted last
    atomic_int pending;     // workers not finished with it
    atomic_int next;        // next task (pool_tasks)
    pool_fn fn;
    void *ctx;
    int n, align, dynamic;
} P = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER, .caller = PTHREAD_MUTEX_INITIALIZER,
       .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static atomic_int spin = SPIN_SHORT;

static _Thread_local int in_pool;   // a pool function calling the pool runs serially

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

void pool_split(int n, int nt, int t, int align, int *lo, int *hi) {
    int blocks = (n + align - 1) / align;
    int b0 = (int)((long)blocks * t / nt), b1 = (int)((long)blocks * (t + 1) / nt);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

static void run_part(int t) {
    in_pool = 1;
    if (P.dynamic) {
        for (int i; (i = atomic_fetch_add(&P.next, 1)) < P.n;) P.fn(P.ctx, i, i + 1);
    } else {
        int lo, hi;
        pool_split(P.n, P.nthreads, t, P.align, &lo, &hi);
        if (hi > lo) P.fn(P.ctx, lo, hi);
    }
    in_pool = 0;
}

static void *worker(void *arg) {
    int t = (int)(long)arg;
    unsigned seen = 0;
    for (;;) {
        int polls = atomic_load_explicit(&spin, memory_order_relaxed);
        for (int i = 0; i < polls && atomic_load_explicit(&P.gen, memory_order_acquire) == seen; i++) relax();
        if (atomic_load_explicit(&P.gen, memory_order_acquire) == seen) {
            pthread_mutex_lock(&P.mu);
            while (atomic_load(&P.gen) == seen) pthread_cond_wait(&P.wake, &P.mu);
            pthread_mutex_unlock(&P.mu);
        }
        seen = atomic_load(&P.gen);
        run_part(t);
        if (atomic_fetch_sub(&P.pending, 1) == 1) {
            pthread_mutex_lock(&P.mu);
            pthread_cond_signal(&P.done);
            pthread_mutex_unlock(&P.mu);
        }
    }
    return NULL;
}

static void start(void) {
    int n = 0;
    const char *env = getenv("RLPIPE_THREADS");
    if (env && *env) n = atoi(env);
    if (n <= 0) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (n < 1) n = 1;
    if (n > 256) n = 256;
    P.nthreads = n;
    for (int t = 1; t < n; t++) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &attr, worker, (void *)(long)t);
        pthread_attr_destroy(&attr);
        if (rc != 0) {              // fewer threads than asked: run with those started
            P.nthreads = t;
            break;
        }
    }
}

int pool_threads(void) {
    pthread_once(&P.once, start);
    return P.nthreads;
}

// The number of runnable tasks on the machine now (the caller among them,
// and workers that poll), from /proc/loadavg's fourth field; -1 where it
// cannot be read (then the polls stay short).
static int runnable_now(void) {
    static int fd = -2;
    if (fd == -2) fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    char buf[128];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return -1;
    buf[n] = 0;
    double l1, l5, l15;
    int running;
    return sscanf(buf, "%lf %lf %lf %d/", &l1, &l5, &l15, &running) == 4 ? running : -1;
}

// Every LOOK_S seconds, by the thread that posts work (under P.caller)
static void choose_spin(void) {
    static double next;
    static long ncpu;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (now < next) return;
    next = now + LOOK_S;
    if (!ncpu) ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int r = runnable_now();
    atomic_store_explicit(&spin, r > 0 && r <= ncpu ? SPIN_LONG : SPIN_SHORT, memory_order_relaxed);
}

static void run(int n, int align, int dynamic, pool_fn fn, void *ctx) {
    pthread_mutex_lock(&P.caller);
    choose_spin();
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.align = align;
    P.dynamic = dynamic;
    atomic_store(&P.next, 0);
    atomic_store(&P.pending, P.nthreads - 1);
    pthread_mutex_lock(&P.mu);
    atomic_fetch_add_explicit(&P.gen, 1, memory_order_release);
    pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.mu);
    run_part(0);
    int polls = atomic_load_explicit(&spin, memory_order_relaxed);
    for (int i = 0; i < polls && atomic_load_explicit(&P.pending, memory_order_acquire) > 0; i++) relax();
    if (atomic_load(&P.pending) > 0) {
        pthread_mutex_lock(&P.mu);
        while (atomic_load(&P.pending) > 0) pthread_cond_wait(&P.done, &P.mu);
        pthread_mutex_unlock(&P.mu);
    }
    pthread_mutex_unlock(&P.caller);
}

void pool_for(int n, int align, int min_par, pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (align < 1) align = 1;
    if (n < min_par || in_pool || pool_threads() == 1 || n <= align) {
        fn(ctx, 0, n);
        return;
    }
    run(n, align, 0, fn, ctx);
}

void pool_tasks(int n, pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (in_pool || pool_threads() == 1 || n == 1) {
        for (int i = 0; i < n; i++) fn(ctx, i, i + 1);
        return;
    }
    run(n, 1, 1, fn, ctx);
}
