// dist.c — the group of ranks and its collectives (dist.h): MPI when this
// build has it (RL_HAVE_MPI) and a launcher started the process, else one
// process alone.
#include "dist/dist.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dist/nccl_comm.h"

#ifdef RL_HAVE_MPI
#include <mpi.h>
#endif

struct dist {
    int rank, size, force, mpi;
    double timeout;
    int nccl_tried;
    nccl_comm *nccl;             // the GPUs' communicator, once opened
    char nccl_why[256];          // why there is none
    float *host;                 // MPI on host copies of device buffers
    size_t host_n;
};

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

#ifdef RL_HAVE_MPI
static int mpi_fail(int rc, const char *what, rl_err *err) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    return err_set(err, "%s: %s", what, s);
}

// Waits for a nonblocking collective, testing it (which also drives its
// progress): yielding at first, then sleeping 50 µs between tests. Gives up
// after the timeout when limited.
static int mpi_wait(dist_t *d, MPI_Request *rq, const char *what, int limited, rl_err *err) {
    double t0 = clock_now();
    for (long k = 0;; k++) {
        int done = 0, rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what, err);
        if (done) return 0;
        if (k < 1000) {
            sched_yield();
            continue;
        }
        double waited = clock_now() - t0;
        if (limited && d->timeout > 0 && waited > d->timeout)
            return err_set(err, "rank %d of %d: %s: no answer from the other ranks for %.0f s (a rank has died or "
                                "hangs)", d->rank, d->size, what, waited);
        nanosleep(&(struct timespec){0, 50000}, NULL);
    }
}
#endif

int dist_bcast(dist_t *d, sbuf *b, rl_err *err) {
    if (d->size == 1) return 0;
#ifdef RL_HAVE_MPI
    unsigned long long n = b->len;
    MPI_Request rq;
    int rc = MPI_Ibcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "broadcast of the input", err);
    if (mpi_wait(d, &rq, "broadcast of the input", 0, err)) return -1;
    if (d->rank) {
        b->len = 0;
        sbuf_reserve(b, n);
        b->len = n;
    }
    for (unsigned long long off = 0; off < n;) {   // in pieces MPI's int counts can say
        int piece = n - off > (unsigned long long)INT_MAX ? INT_MAX : (int)(n - off);
        rc = MPI_Ibcast(b->data + off, piece, MPI_BYTE, 0, MPI_COMM_WORLD, &rq);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "broadcast of the input", err);
        if (mpi_wait(d, &rq, "broadcast of the input", 1, err)) return -1;
        off += (unsigned long long)piece;
    }
    return 0;
#else
    (void)b;
    return err_set(err, "no MPI in this build");
#endif
}

static int reduce_f64(dist_t *d, double *v, size_t n, int max, rl_err *err) {
    if (d->size == 1 || n == 0) return 0;
#ifdef RL_HAVE_MPI
    const char *what = max ? "maximum of the step's statistics" : "sum of the step's statistics";
    if (n > INT_MAX) return err_set(err, "%s: %zu values", what, n);
    MPI_Request rq;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what, err);
    return mpi_wait(d, &rq, what, 1, err);
#else
    (void)v, (void)max;
    return err_set(err, "no MPI in this build");
#endif
}

int dist_sum(dist_t *d, double *v, size_t n, rl_err *err) { return reduce_f64(d, v, n, 0, err); }
int dist_max(dist_t *d, double *v, size_t n, rl_err *err) { return reduce_f64(d, v, n, 1, err); }

// ---- Parts of flat buffers ------------------------------------------------------------

static size_t total_of(const dist_t *d, const size_t *counts, size_t *off_of_rank) {
    size_t t = 0;
    for (int r = 0; r < d->size; r++) {
        if (r == d->rank && off_of_rank) *off_of_rank = t;
        t += counts[r];
    }
    return t;
}

#ifdef RL_HAVE_MPI
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
    MPI_Request rq;
    int mrc = gather ? MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, c, displs, MPI_FLOAT, MPI_COMM_WORLD, &rq)
                     : MPI_Ireduce_scatter(MPI_IN_PLACE, h, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
    if (mrc != MPI_SUCCESS) {
        mpi_fail(mrc, what, err);
        goto out;
    }
    if (mpi_wait(d, &rq, what, 1, err)) goto out;
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
    MPI_Request rq;
    int mrc = d->rank ? MPI_Igatherv(part, c[d->rank], MPI_FLOAT, NULL, NULL, NULL, MPI_FLOAT, 0, MPI_COMM_WORLD, &rq)
                      : MPI_Igatherv(MPI_IN_PLACE, 0, MPI_FLOAT, out, c, displs, MPI_FLOAT, 0, MPI_COMM_WORLD, &rq);
    if (mrc != MPI_SUCCESS) {
        mpi_fail(mrc, what, err);
        goto out;
    }
    rc = mpi_wait(d, &rq, what, 1, err);
out:
    free(c);
    return rc;
#else
    (void)part, (void)out;
    return err_set(err, "no MPI in this build");
#endif
}

// ---- NCCL -------------------------------------------------------------------------------

#ifdef RL_HAVE_MPI
static int share_id(void *id, void *ctx) {
    dist_t *d = ctx;
    MPI_Request rq;
    rl_err e;
    if (MPI_Ibcast(id, NCCL_COMM_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD, &rq) != MPI_SUCCESS) return -1;
    return mpi_wait(d, &rq, "broadcast of NCCL's id", 1, &e);
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
