// nccl_comm.h — dist.c's collectives between GPUs: NCCL, opened with dlopen
// when first asked for (as the CUDA backend opens cuBLAS), so that the tools
// start where there is no NCCL. Parts of unequal sizes are moved as NCCL's
// own grouped ncclReduce (reduce-scatter) and ncclBroadcast (all-gather), one
// root per part, on the default stream the CUDA backend computes on.
#ifndef RLPIPE_NCCL_COMM_H
#define RLPIPE_NCCL_COMM_H

#include <stddef.h>

#include "util.h"

typedef struct nccl_comm nccl_comm;

// The 128 bytes of ncclUniqueId.
#define NCCL_COMM_ID_BYTES 128
// The communicator of `size` ranks, this one `rank`. share_id sends rank 0's
// id (NCCL_COMM_ID_BYTES at id) to every rank (over MPI; not called for one
// rank). NULL with *why when this build has no NCCL, the library does not
// open, or the communicator cannot be made.
nccl_comm *nccl_comm_open(int rank, int size, int (*share_id)(void *id, void *ctx), void *ctx, char *why,
                          size_t why_size);
void nccl_comm_close(nccl_comm *c);
// As dist_reduce_scatter and dist_all_gather (dist.h) on device memory;
// waiting at most timeout seconds (<= 0: no limit) for them to finish, then
// aborting the communicator.
int nccl_comm_reduce_scatter(nccl_comm *c, float *buf, const size_t *counts, double timeout, rl_err *err);
int nccl_comm_all_gather(nccl_comm *c, float *buf, const size_t *counts, double timeout, rl_err *err);

#endif
