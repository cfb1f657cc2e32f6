// dist.h — the ranks of a data-parallel learner (doc/design.md §4, §8) and the
// collectives they need: MPI's between processes (Open MPI; mpirun, or srun
// under Slurm), NCCL's between GPUs (the communicator set up over MPI), and
// a group of one process otherwise. Buffers of parameters and gradients are
// the backend's memory (ops.h): on the GPU they go through NCCL when the
// library opens, else through host copies and MPI.
//
// Every collective but dist_bcast gives up after the group's timeout with an
// error that says which collective waited and for how long: a rank that died
// or hangs does not hang the others. dist_bcast waits without a limit: the
// ranks wait in it while rank 0 waits for its input.
#ifndef RLPIPE_DIST_H
#define RLPIPE_DIST_H

#include <stddef.h>

#include "model/ops.h"
#include "util.h"

typedef struct dist dist_t;

// The group this process belongs to. Under an MPI launcher (Open MPI's
// mpirun sets OMPI_COMM_WORLD_SIZE; PMIx and PMI launchers such as srun set
// PMIX_RANK or PMI_RANK) MPI is started and the group is MPI_COMM_WORLD;
// otherwise it is this process alone, without MPI. force: use the
// data-parallel path (dist_active) even alone: one rank, whose collectives
// copy nothing on the host and are NCCL's own on a GPU (the tests' way of
// running that path where one GPU is all there is). timeout: seconds a
// collective may wait for the others (<= 0: no limit). NULL with err when
// MPI cannot start, or this build has no MPI and a launcher started it.
dist_t *dist_open(int force, double timeout, rl_err *err);
// Finalizes MPI (after the last collective), frees d. NULL: nothing.
void dist_close(dist_t *d);
// Ends every rank of the group with this exit status (MPI_Abort), or this
// process alone.
_Noreturn void dist_abort(dist_t *d, int status);

int dist_rank(const dist_t *d);
int dist_size(const dist_t *d);
// 1 when the data-parallel path is taken: more than one rank, or forced.
int dist_active(const dist_t *d);
// Which collectives move buffers of this backend: "mpi", "nccl",
// "mpi (host copies)", or "self" (one rank).
const char *dist_transport(dist_t *d, const rl_ops *ops);

// Rank 0's bytes b to every rank: b is replaced on the others (no timeout).
int dist_bcast(dist_t *d, sbuf *b, rl_err *err);
// v (n values) := their sum over the ranks (in rank order: the same on every rank).
int dist_sum(dist_t *d, double *v, size_t n, rl_err *err);

// A flat buffer of the backend's memory split into consecutive parts, part r
// (counts[r] floats from offset Σ_{q<r} counts[q]) owned by rank r.
// dist_reduce_scatter: the owner's part := the sum of that part over the
// ranks (the other parts are left undefined). dist_all_gather: every part
// := its owner's. buf holds Σ counts floats.
int dist_reduce_scatter(dist_t *d, const rl_ops *ops, float *buf, const size_t *counts, rl_err *err);
int dist_all_gather(dist_t *d, const rl_ops *ops, float *buf, const size_t *counts, rl_err *err);
// Host memory: rank 0's out (Σ counts floats, its own part already in place)
// := every other rank's part (counts[r] floats at `part`), in rank order;
// part is not read on rank 0, out not on the others.
int dist_gather(dist_t *d, const float *part, float *out, const size_t *counts, rl_err *err);

#endif
