// ckpt_writer.h — checkpoint versions written on a thread of their own, so
// that the learner's next step runs while the last one's version goes to the
// disk. SmolLM2-135M's 1.6 GB of weights and AdamW moments take seconds, as
// long as a step, where each page the page cache takes anew is costly (a
// virtual machine's); the moments go past the page cache (ckpt_model.c).
//
// One version at a time: saving waits for the version still being written,
// then takes the model (ckpt_snap_take, on the caller's thread) and hands the
// snapshot to the writer's thread, which publishes it (ckpt_snap_write) and
// then calls done. The parameters and AdamW's moments are read where the
// model keeps them when that is host memory (the CPU's), rather than copied
// (8 bytes a parameter for the moments, 4 more for the F32 parameters
// beside 16-bit weights): the caller changes them only after
// ckpt_writer_wait_model, which returns once the weights are written, or
// with the moments (or the F32 parameters beside 16-bit weights) once the
// optimizer file is. AdamW's update is the first thing that changes them,
// at the end of the next step's forward and backward. On a GPU they are
// copied to the host and nothing waits; with several ranks rank 0 copies
// all ranks' parts of the moments.
// Signals are blocked on the writer's thread.
#ifndef RLPIPE_CKPT_WRITER_H
#define RLPIPE_CKPT_WRITER_H

#include <stdint.h>

#include "learn/ckpt_model.h"

typedef struct ckpt_writer ckpt_writer;

// done(ctx, version, err), on the writer's thread once the version is
// published: what the caller does then (reports the step). It returns 0, or
// -1 with err, which counts as the write's error. failed(ctx, message), on
// the writer's thread when a write (or done) failed; NULL keeps the error for
// ckpt_writer_wait to return.
typedef int (*ckpt_done_fn)(void *ctx, uint64_t version, rl_err *err);
typedef void (*ckpt_failed_fn)(void *ctx, const char *message);
ckpt_writer *ckpt_writer_new(ckpt_done_fn done, ckpt_failed_fn failed, void *ctx);
// Waits for the version being written (-1 with its error if it failed), then
// snapshots m (d, parts as ckpt_snap_take) and starts writing it as
// ckpt_write would; o and the strings it points to are copied. 0, or -1 with
// err.
int ckpt_writer_save(ckpt_writer *w, const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts,
                     rl_err *err);
// Waits for the version being written, then completes version o->version
// (published weights-only) with m's optimizer state, as ckpt_complete_state
// does, on the caller's thread and in the writer's snapshot, so that no
// second copy of the model is made. 0, or -1 with err.
int ckpt_writer_complete(ckpt_writer *w, const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts,
                         rl_err *err);
// Waits until the version being written reads the model's parameters and
// moments no more (at once when it copied them, or when none is being
// written): what the caller does before it changes them (an optimizer step).
void ckpt_writer_wait_model(ckpt_writer *w);
// Waits until no version is being written: 0, or -1 with the error of the
// last write (once: the error is then cleared).
int ckpt_writer_wait(ckpt_writer *w, rl_err *err);
// 1 while a version is being written.
int ckpt_writer_busy(ckpt_writer *w);
// Waits, then frees (NULL: nothing).
void ckpt_writer_free(ckpt_writer *w);

#endif
