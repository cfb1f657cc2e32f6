// nccl_comm.c — NCCL between GPUs (nccl_comm.h). Built with RL_HAVE_NCCL
// where the CUDA toolkit and nccl.h are (make's CUDA=1 build); else every
// call says this build has none.
#include "parallel/nccl_comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RL_HAVE_NCCL

nccl_comm *nccl_comm_open(int rank, int size, int (*share_id)(void *id, void *ctx), void *ctx, char *why,
                          size_t why_size) {
    (void)rank, (void)size, (void)share_id, (void)ctx;
    snprintf(why, why_size, "this build has no NCCL (made without CUDA)");
    return NULL;
}
void nccl_comm_close(nccl_comm *c) { (void)c; }
int nccl_comm_reduce_scatter(nccl_comm *c, float *buf, const size_t *counts, double timeout, rl_err *err) {
    (void)c, (void)buf, (void)counts, (void)timeout;
    return err_set(err, "this build has no NCCL");
}
int nccl_comm_all_gather(nccl_comm *c, float *buf, const size_t *counts, double timeout, rl_err *err) {
    (void)c, (void)buf, (void)counts, (void)timeout;
    return err_set(err, "this build has no NCCL");
}

#else

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <sched.h>
#include <time.h>

#include "clock.h"

// The functions used, from libnccl.so.2.
static struct {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    const char *(*error_string)(ncclResult_t);
} nf;

struct nccl_comm {
    ncclComm_t comm;
    int rank, size;
};

static int nccl_load(char *why, size_t why_size) {
    static int state;   // 0 untried, 1 loaded, -1 failed
    if (state) return state;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, why_size, "cannot open libnccl.so.2: %s", dlerror());
        return state = -1;
    }
    struct { void **fn; const char *name; } sym[] = {
        {(void **)&nf.get_unique_id, "ncclGetUniqueId"}, {(void **)&nf.init_rank, "ncclCommInitRank"},
        {(void **)&nf.destroy, "ncclCommDestroy"},       {(void **)&nf.abort, "ncclCommAbort"},
        {(void **)&nf.async_error, "ncclCommGetAsyncError"}, {(void **)&nf.group_start, "ncclGroupStart"},
        {(void **)&nf.group_end, "ncclGroupEnd"},        {(void **)&nf.reduce, "ncclReduce"},
        {(void **)&nf.broadcast, "ncclBroadcast"},       {(void **)&nf.error_string, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof sym / sizeof *sym; i++)
        if (!(*sym[i].fn = dlsym(h, sym[i].name))) {
            snprintf(why, why_size, "libnccl.so.2 has no %s", sym[i].name);
            return state = -1;
        }
    return state = 1;
}

nccl_comm *nccl_comm_open(int rank, int size, int (*share_id)(void *id, void *ctx), void *ctx, char *why,
                          size_t why_size) {
    _Static_assert(sizeof(ncclUniqueId) == NCCL_COMM_ID_BYTES, "ncclUniqueId's size");
    if (nccl_load(why, why_size) < 0) return NULL;
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (rank == 0 && (r = nf.get_unique_id(&id)) != ncclSuccess) {
        snprintf(why, why_size, "ncclGetUniqueId: %s", nf.error_string(r));
        return NULL;
    }
    if (size > 1 && share_id(&id, ctx)) {
        snprintf(why, why_size, "the NCCL id did not reach every rank");
        return NULL;
    }
    nccl_comm *c = malloc(sizeof *c);
    if (!c) abort();
    c->rank = rank;
    c->size = size;
    if ((r = nf.init_rank(&c->comm, size, id, rank)) != ncclSuccess) {
        snprintf(why, why_size, "ncclCommInitRank: %s", nf.error_string(r));
        free(c);
        return NULL;
    }
    return c;
}

void nccl_comm_close(nccl_comm *c) {
    if (!c) return;
    nf.destroy(c->comm);
    free(c);
}

// Waits for the stream's work (NCCL's and the kernels queued before it):
// an error of NCCL or CUDA, or the timeout, aborts the communicator.
static int nccl_wait(nccl_comm *c, const char *what, double timeout, rl_err *err) {
    double t0 = clock_now();
    for (long k = 0;; k++) {
        cudaError_t q = cudaStreamQuery(0);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady) return err_set(err, "%s: CUDA: %s", what, cudaGetErrorString(q));
        ncclResult_t ar;
        if (nf.async_error(c->comm, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
            nf.abort(c->comm);
            return err_set(err, "%s: NCCL: %s", what, nf.error_string(ar));
        }
        double waited = clock_now() - t0;
        if (timeout > 0 && waited > timeout) {
            nf.abort(c->comm);
            return err_set(err, "rank %d of %d: %s: no answer from the other GPUs for %.0f s (a rank has died or "
                                "hangs)", c->rank, c->size, what, waited);
        }
        if (k < 1000) sched_yield();
        else nanosleep(&(struct timespec){0, 50000}, NULL);
    }
}

// One root per part: ncclReduce of part r to rank r, or ncclBroadcast of it from rank r.
static int parts(nccl_comm *c, float *buf, const size_t *counts, int gather, double timeout, rl_err *err) {
    const char *what = gather ? "all-gather of the parameters" : "reduce-scatter of the gradient";
    ncclResult_t r = nf.group_start();
    size_t off = 0;
    for (int q = 0; q < c->size && r == ncclSuccess; q++) {
        float *p = buf + off;
        r = gather ? nf.broadcast(p, p, counts[q], ncclFloat32, q, c->comm, 0)
                   : nf.reduce(p, p, counts[q], ncclFloat32, ncclSum, q, c->comm, 0);
        off += counts[q];
    }
    ncclResult_t g = nf.group_end();
    if (r == ncclSuccess) r = g;
    if (r != ncclSuccess) return err_set(err, "%s: NCCL: %s", what, nf.error_string(r));
    return nccl_wait(c, what, timeout, err);
}

int nccl_comm_reduce_scatter(nccl_comm *c, float *buf, const size_t *counts, double timeout, rl_err *err) {
    return parts(c, buf, counts, 0, timeout, err);
}

int nccl_comm_all_gather(nccl_comm *c, float *buf, const size_t *counts, double timeout, rl_err *err) {
    return parts(c, buf, counts, 1, timeout, err);
}

#endif
