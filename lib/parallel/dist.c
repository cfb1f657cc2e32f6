// dist.c — the group of ranks and its collectives (dist.h): MPI when this
// build has it (RL_HAVE_MPI) and a launcher started the process, else one
// process alone. MPI's collectives are its blocking ones (their algorithms
// are the tuned ones: rings and trees, where Open MPI's nonblocking
// reduce-scatter goes through rank 0); the timeout is a watchdog thread's,
// armed around each.
#include "parallel/dist.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "parallel/nccl_comm.h"

#ifdef RL_HAVE_MPI
#include <mpi.h>
#endif

struct dist {
    int rank, size, force, mpi;
    double timeout;
    // The watchdog (with MPI, more than one rank and a timeout): `what` is
    // the collective under way (NULL: none), which must end by `deadline`.
    pthread_t watchdog;
    int watching, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const char *what;
    double deadline;
    int nccl_tried;
    nccl_comm *nccl;             // the GPUs' communicator, once opened
    char nccl_why[256];          // why there is none
    float *host;                 // MPI on host copies of device buffers
    size_t host_n;
};

#ifdef RL_HAVE_MPI
static int mpi_fail(int rc, const char *what, rl_err *err) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    return err_set(err, "%s: %s", what, s);
}

// The watchdog: once a collective has waited past its deadline, it says so
// and ends this process (exit status 1; the launcher then ends the others).
// MPI is not called from it: rl-learn's MPI is the main thread's alone.
static void *watch(void *arg) {
    dist_t *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->what && !d->quit) pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit) break;
        struct timespec ts = clock_timespec(d->deadline);
        int rc = pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        if (rc == ETIMEDOUT && d->what && clock_now() >= d->deadline) {
            fprintf(stderr, "%s: error: rank %d of %d: %s: no answer from the other ranks for %.0f s (a rank has died "
                            "or hangs)\n", program_invocation_short_name, d->rank, d->size, d->what, d->timeout);
            _exit(1);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void watch_start(dist_t *d) {
    if (d->size == 1 || d->timeout <= 0) return;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&d->mu, NULL);
    sigset_t all, old;   // signals stay the main thread's
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    d->watching = pthread_create(&d->watchdog, NULL, watch, d) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void watch_stop(dist_t *d) {
    if (!d->watching) return;
    pthread_mutex_lock(&d->mu);
    d->quit = 1;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->watchdog, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
}

// Arms the watchdog for collective `what` (NULL: disarms it).
static void watch_arm(dist_t *d, const char *what) {
    if (!d->watching) return;
    pthread_mutex_lock(&d->mu);
    d->what = what;
    d->deadline = clock_now() + d->timeout;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

// A blocking collective's return code, the watchdog disarmed.
static int mpi_done(dist_t *d, int rc, const char *what, rl_err *err) {
    watch_arm(d, NULL);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, what, err);
}
#endif

static int launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

dist_t *dist_open(int force, double timeout, rl_err *err) {
    dist_t *d = xmalloc(sizeof *d);
    memset(d, 0, sizeof *d);
    d->size = 1;
    d->force = force;
    d->timeout = timeout;
    if (!launched_by_mpi()) return d;
#ifdef RL_HAVE_MPI
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        free(d);
        err_set(err, "MPI_Init failed");
        return NULL;
    }
    // Errors come back as codes, and are reported here, with the collective's name.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->mpi = 1;
    watch_start(d);
    return d;
#else
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (n && strcmp(n, "1")) {
        free(d);
        err_set(err, "started by an MPI launcher (%s ranks), but this build has no MPI: build it where mpicc is "
                     "installed (Debian: libopenmpi-dev)", n);
        return NULL;
    }
    return d;
#endif
}

void dist_close(dist_t *d) {
    if (!d) return;
    nccl_comm_close(d->nccl);
#ifdef RL_HAVE_MPI
    watch_stop(d);
    if (d->mpi) MPI_Finalize();
#endif
    free(d->host);
    free(d);
}

void dist_abort(dist_t *d, int status) {
#ifdef RL_HAVE_MPI
    if (d && d->mpi && d->size > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
    (void)d;
    exit(status);
}

int dist_rank(const dist_t *d) { return d->rank; }
int dist_size(const dist_t *d) { return d->size; }
int dist_active(const dist_t *d) { return d->size > 1 || d->force; }


int dist_bcast(dist_t *d, sbuf *b, rl_err *err) {
    if (d->size == 1) return 0;
#ifdef RL_HAVE_MPI
    const char *what = "broadcast of the input";
    unsigned long long n = b->len;
    // the length: the ranks wait in it while rank 0 waits for its input
    int rc = MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what, err);
    if (d->rank) {
        b->len = 0;
        sbuf_reserve(b, n);
        b->len = n;
    }
    for (unsigned long long off = 0; off < n;) {   // in pieces MPI's int counts can say
        int piece = n - off > (unsigned long long)INT_MAX ? INT_MAX : (int)(n - off);
        watch_arm(d, what);
        if (mpi_done(d, MPI_Bcast(b->data + off, piece, MPI_BYTE, 0, MPI_COMM_WORLD), what, err)) return -1;
        off += (unsigned long long)piece;
    }
    return 0;
#else
    (void)b;
    return err_set(err, "no MPI in this build");
#endif
}

int dist_sum(dist_t *d, double *v, size_t n, rl_err *err) {
    if (d->size == 1 || n == 0) return 0;
#ifdef RL_HAVE_MPI
    const char *what = "sum of the step's statistics";
    if (n > INT_MAX) return err_set(err, "%s: %zu values", what, n);
    watch_arm(d, what);
    return mpi_done(d, MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), what, err);
#else
    (void)v;
    return err_set(err, "no MPI in this build");
#endif
}

// ---- Parts of flat buffers ------------------------------------------------------------

#ifdef RL_HAVE_MPI
static size_t total_of(const dist_t *d, const size_t *counts, size_t *off_of_rank) {
    size_t t = 0;
    for (int r = 0; r < d->size; r++) {
        if (r == d->rank && off_of_rank) *off_of_rank = t;
        t += counts[r];
    }
    return t;
}

static int int_counts(const dist_t *d, const size_t *counts, int *c, int *displs, const char *what, rl_err *err) {
    size_t off = 0;
    for (int r = 0; r < d->size; r++) {
        if (counts[r] > INT_MAX || off > INT_MAX)
            return err_set(err, "%s: a part of %zu values at %zu is more than MPI's counts can say: use more ranks",
                           what, counts[r], off);
        c[r] = (int)counts[r];
        displs[r] = (int)off;
        off += counts[r];
    }
    return 0;
}

// The collective on host memory h (Σ counts floats).
static int mpi_parts(dist_t *d, float *h, const size_t *counts, int gather, rl_err *err) {
    const char *what = gather ? "all-gather of the parameters" : "reduce-scatter of the gradient";
    int *c = xmalloc(2 * (size_t)d->size * sizeof *c), *displs = c + d->size, rc = -1;
    if (int_counts(d, counts, c, displs, what, err)) goto out;
    watch_arm(d, what);
    int mrc = gather ? MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, c, displs, MPI_FLOAT, MPI_COMM_WORLD)
                     : MPI_Reduce_scatter(MPI_IN_PLACE, h, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (mpi_done(d, mrc, what, err)) goto out;
    // In place, MPI_Reduce_scatter leaves this rank's part at the start.
    if (!gather && displs[d->rank]) memmove(h + displs[d->rank], h, counts[d->rank] * sizeof *h);
    rc = 0;
out:
    free(c);
    return rc;
}
#endif

static int nccl_ready(dist_t *d, const rl_ops *ops);

static int parts(dist_t *d, const rl_ops *ops, float *buf, const size_t *counts, int gather, rl_err *err) {
    if (nccl_ready(d, ops))
        return gather ? nccl_comm_all_gather(d->nccl, buf, counts, d->timeout, err)
                      : nccl_comm_reduce_scatter(d->nccl, buf, counts, d->timeout, err);
    if (d->size == 1) return 0;
#ifdef RL_HAVE_MPI
    if (strcmp(ops->name, "cuda")) return mpi_parts(d, buf, counts, gather, err);
    // Device memory without NCCL: through a host copy.
    size_t off = 0, n = total_of(d, counts, &off);
    if (d->host_n < n) {
        free(d->host);
        d->host = xmalloc(n * sizeof *d->host);
        d->host_n = n;
    }
    ops->download(d->host, buf, n * sizeof *buf);
    if (mpi_parts(d, d->host, counts, gather, err)) return -1;
    if (gather) ops->upload(buf, d->host, n * sizeof *buf);
    else ops->upload(buf + off, d->host + off, counts[d->rank] * sizeof *buf);
    return 0;
#else
    (void)buf, (void)counts, (void)gather;
    return err_set(err, "no MPI in this build");
#endif
}

int dist_reduce_scatter(dist_t *d, const rl_ops *ops, float *buf, const size_t *counts, rl_err *err) {
    return parts(d, ops, buf, counts, 0, err);
}

int dist_all_gather(dist_t *d, const rl_ops *ops, float *buf, const size_t *counts, rl_err *err) {
    return parts(d, ops, buf, counts, 1, err);
}

int dist_gather(dist_t *d, const float *part, float *out, const size_t *counts, rl_err *err) {
    if (d->size == 1) return 0;
#ifdef RL_HAVE_MPI
    const char *what = "gather of the optimizer state";
    int *c = xmalloc(2 * (size_t)d->size * sizeof *c), *displs = c + d->size, rc = -1;
    if (int_counts(d, counts, c, displs, what, err)) goto out;
    watch_arm(d, what);
    int mrc = d->rank ? MPI_Gatherv(part, c[d->rank], MPI_FLOAT, NULL, NULL, NULL, MPI_FLOAT, 0, MPI_COMM_WORLD)
                      : MPI_Gatherv(MPI_IN_PLACE, 0, MPI_FLOAT, out, c, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    rc = mpi_done(d, mrc, what, err);
out:
    free(c);
    return rc;
#else
    (void)part, (void)out, (void)counts;
    return err_set(err, "no MPI in this build");
#endif
}

// ---- NCCL -------------------------------------------------------------------------------

#ifdef RL_HAVE_MPI
static int share_id(void *id, void *ctx) {
    dist_t *d = ctx;
    rl_err e;
    watch_arm(d, "broadcast of NCCL's id");
    return mpi_done(d, MPI_Bcast(id, NCCL_COMM_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast of NCCL's id", &e);
}
#endif

// 1 when buffers of ops go through NCCL: the CUDA backend, and NCCL opened
// (tried once; why not is kept for dist_transport).
static int nccl_ready(dist_t *d, const rl_ops *ops) {
    if (strcmp(ops->name, "cuda") || !dist_active(d)) return 0;
    if (!d->nccl_tried) {
        d->nccl_tried = 1;
#ifdef RL_HAVE_MPI
        int (*share)(void *, void *) = d->mpi ? share_id : NULL;
#else
        int (*share)(void *, void *) = NULL;
#endif
        d->nccl = nccl_comm_open(d->rank, d->size, share, d, d->nccl_why, sizeof d->nccl_why);
    }
    return d->nccl != NULL;
}

const char *dist_transport(dist_t *d, const rl_ops *ops) {
    if (nccl_ready(d, ops)) return "nccl";
    if (d->size == 1) return "self";
    return strcmp(ops->name, "cuda") ? "mpi" : "mpi (host copies)";
}
